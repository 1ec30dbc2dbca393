//! Per-entity state over time: counter deltas, the phase classifier, and time integrals.
//!
//! Each sample describes the window that ends at its timestamp and began at the same
//! entity's previous sample. Integrals (busy seconds, effective-compute seconds, seconds
//! per phase) accumulate over those windows, so consumers can take exact averages over
//! any range as a `rate()` of a counter.

use crate::causes;
use crate::cycles::CycleCounters;
use crate::derive::{self, DeriveConfig, Fidelity, WindowContext, WindowMetrics, WorkloadHint};
use crate::diag::{Diagnostic, DiagnosticKind};
use crate::energy::{EnergyHolders, IdleFloor, Joules};
use crate::gpus::{self, GpuSpec};
use crate::health::{self, HealthFinding, HealthInputs};
use crate::model::{
    EntityId, EntityKey, EntitySample, Field, Phase, Sample, ServingSnapshot, Timestamp,
};
use crate::phase::{PhaseClassifier, PhaseInputs, PhaseMethod};
use crate::stragglers::{Mark, Stragglers};
use crate::verdict::{self, Decision, VerdictConfig, VerdictInputs};
use std::collections::{HashMap, VecDeque};

/// Time integrals for one entity since it was first seen.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Totals {
    /// Windows integrated.
    pub windows: u64,
    /// Seconds covered by integrated windows.
    pub observed_seconds: f64,
    /// Seconds not observed: windows longer than `max_gap_intervals` update intervals. No
    /// other integral grows for them, except energy where the energy counter spans them.
    pub unobserved_seconds: f64,
    /// ∫ reported utilization dt, over the windows that had a busy flag.
    pub busy_seconds: f64,
    /// Seconds with a busy flag (the denominator for its mean).
    pub busy_observed_seconds: f64,
    /// ∫ effective compute fraction dt (profiling tier only).
    pub effective_compute_seconds: f64,
    /// Seconds with an effective compute value (the denominator for its mean).
    pub effective_compute_observed_seconds: f64,
    /// Seconds in each regime, by method: `[PhaseMethod::index][Phase::index]`.
    pub phase_seconds: [[f64; Phase::ALL.len()]; 2],
    /// Seconds whose regime could not be decided.
    pub unclassified_seconds: f64,
    /// Seconds under each verdict, indexed by [`crate::verdict::Verdict::index`].
    pub verdict_seconds: [f64; crate::verdict::Verdict::ALL.len()],
    /// Of the `starved` seconds, those of each cause, indexed by
    /// [`crate::causes::Cause::index`]: they sum to `verdict_seconds[starved]`.
    pub starved_cause_seconds: [f64; 7],
    /// Seconds whose verdict had roofline saturation (the denominator of its mean).
    pub saturation_observed_seconds: f64,
    /// Seconds that could be judged `starved` or not: roofline saturation measured, the
    /// busy flag read, and not judged unavailable (the denominator of the starved share).
    pub starved_judged_seconds: f64,
    /// Seconds with a health finding: the only ones that could be judged `unavailable`.
    pub health_observed_seconds: f64,
    /// Energy in joules: the energy counter's deltas over the spans between its readings,
    /// else ∫ power dt over windows the counter does not span; never both for one second.
    pub energy_joules: f64,
    /// Seconds whose energy was measured (the denominator for mean power).
    pub energy_observed_seconds: f64,
    /// Of `energy_joules`, the idle floor's part: the floor in force ([`EntityWindow::idle_floor`])
    /// times the seconds, at most the energy ([`crate::energy`]).
    pub idle_floor_joules: f64,
    /// Of `energy_joules`, the rest: active energy (never below 0 in any window).
    pub active_energy_joules: f64,
    /// Of `energy_joules`, what was counted while no floor was known: neither idle floor nor
    /// active ([`crate::energy`]).
    pub unsplit_energy_joules: f64,
    /// Seconds in which both the counter regime and the serving engine's token rates were
    /// known (the denominator of `phase_agreed_seconds`).
    pub phase_compared_seconds: f64,
    /// Of those, seconds in which the two agreed.
    pub phase_agreed_seconds: f64,
    /// Simulated data only: ∫ true effective compute dt.
    pub truth_effective_compute_seconds: Option<f64>,
}

/// One entity's derived view of one window.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityWindow {
    /// Who.
    pub id: EntityId,
    /// The catalog entry, when the model is known.
    pub spec: Option<&'static GpuSpec>,
    /// Whether the readings came from a simulator.
    pub simulated: bool,
    /// Window length in seconds that was integrated (0 when the window was skipped).
    pub dt_seconds: f64,
    /// The derived metrics.
    pub metrics: WindowMetrics,
    /// Counter regime after hysteresis.
    pub phase: Option<Phase>,
    /// How the regime was decided. Stable per entity: counters once the entity has shown a
    /// compute counter, else the power heuristic.
    pub phase_method: Option<PhaseMethod>,
    /// The entity's capability tier: the best fidelity any of its windows had. Stable, so a
    /// label from it does not churn series; per-window coverage is in the observed-seconds
    /// integrals.
    pub capability: Fidelity,
    /// Whether the workload is known to be LLM serving (an engine is attached, or the
    /// configuration says so): only then are regimes named prefill and decode.
    pub llm_serving: bool,
    /// What the serving engine's token rates say the window was, when they say anything.
    pub engine_phase: Option<Phase>,
    /// Clock-event reasons reported for the window.
    pub throttles: Option<crate::model::Throttles>,
    /// Processes listed for the window (only when per-process series are on).
    pub processes: Vec<crate::model::ProcessReading>,
    /// Node mode: the containers the kubelet allocated the entity to, when known.
    pub allocation: Option<Vec<crate::model::Holder>>,
    /// The idle floor in force (the entity's power at busy 0, else the catalog's idle
    /// power), when one is known.
    pub idle_floor: Option<IdleFloor>,
    /// The entity's energy by holder (node mode): per pod, and what no pod held.
    pub energy_holders: EnergyHolders,
    /// The job of a straggler, or of a GPU that waits on one.
    pub job: Option<String>,
    /// Seconds since the entity last did work (0 in a window with work); `None` where the
    /// window measured neither busy flag, effective compute nor tokens.
    pub idle_seconds: Option<f64>,
    /// Node mode: each holder pod's own pressure over the window, where measured.
    pub holder_pressure: Vec<crate::model::PodPressure>,
    /// Ground-truth regime, for simulated data.
    pub truth_phase: Option<Phase>,
    /// Ground-truth workload, for simulated data.
    pub truth_workload: Option<crate::model::Workload>,
    /// Ground-truth effective compute, for simulated data.
    pub truth_effective_compute: Option<f64>,
    /// The serving engine's view of the same window, when scraped.
    pub serving: Option<ServingSnapshot>,
    /// The verdict of the window, with the numbers behind it ([`Decision::explain`] gives
    /// the reasons as text).
    pub verdict: Decision,
    /// The window's health ([`crate::health::classify`]), when anything of it was read.
    pub health: Option<HealthFinding>,
    /// Integrals up to and including this window.
    pub totals: Totals,
    /// The sanitized readings the window was derived from.
    pub readings: crate::model::Readings,
    /// Observed ceilings up to and including this window.
    pub ceilings: Ceilings,
}

/// How far back observed ceilings look (seconds).
pub const CEILING_HORIZON_SECONDS: f64 = 3600.0;
/// How long an energy counter may go unread before the windows after its last move count
/// from the power gauge: longer than any source holds its counters between collections
/// (dcgm-exporter collects every 30 s by default).
pub(crate) const ENERGY_SPAN_MAX_SECONDS: f64 = 300.0;
/// How long a held NVLink transmit-wait counter's last rise holds its rate while the counter
/// repeats: two of dcgm-exporter's default collections (30 s). A rise is over the time since
/// the last, at most this.
pub(crate) const TX_WAIT_HOLD_SECONDS: f64 = 60.0;
/// How long a level must be held to count as a ceiling (seconds).
pub const CEILING_SUSTAIN_SECONDS: f64 = 60.0;

/// The best sustained value of one quantity seen over the horizon: observed, so a lower
/// bound on what the GPU and workload can reach.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ceiling {
    /// The best average over [`CEILING_SUSTAIN_SECONDS`] of continuous windows.
    pub value: f64,
    /// Seconds from the end of that best span to the current window's end.
    pub age_seconds: f64,
}

impl Ceiling {
    /// `current` over the ceiling (`None` when either is missing or the ceiling is 0).
    /// It can exceed 1: a single window may beat the best sustained average.
    #[must_use]
    pub fn ratio(&self, current: Option<f64>) -> Option<f64> {
        let c = current.filter(|c| c.is_finite())?;
        (self.value > 0.0).then(|| c / self.value)
    }
}

/// The observed ceilings of one entity.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Ceilings {
    /// Roofline saturation.
    pub roofline_saturation: Option<Ceiling>,
    /// The serving engine's output tokens per second.
    pub output_tokens_per_second: Option<Ceiling>,
}

/// The best sustained average of one quantity over a rolling horizon. Pure: time comes
/// from the windows fed in.
///
/// Each window's average over the trailing span is kept as exact sums of the windows it
/// holds (value × seconds, and seconds), updated as windows enter and leave the span, so a
/// window costs O(1) amortized whatever the span holds: the average is a function of the
/// windows in the span only, and equal spans give equal averages. The windows fed in are
/// consecutive and do not overlap (as the deriver's are); only the oldest can straddle the
/// start of the span, and it is weighted by its overlap.
#[derive(Debug, Clone)]
pub struct CeilingTracker {
    horizon: f64,
    sustain: f64,
    /// Windows overlapping the trailing sustain span: (end, seconds, value).
    recent: VecDeque<(Timestamp, f64, f64)>,
    /// Σ value × seconds over `recent` but its oldest window (and huge windows).
    weighted: ExactSum,
    /// Σ seconds over the same windows.
    seconds: ExactSum,
    /// Windows in `recent` whose value × seconds is too large to sum ([`is_huge`]): while
    /// any is there, the average is a running mean instead, which cannot overflow.
    huge: usize,
    /// Sustained averages that may still become the maximum, values decreasing:
    /// (end of their span, value).
    best: VecDeque<(Timestamp, f64)>,
}

/// Whether a window's value × seconds is too large to sum (the sum of many could overflow).
fn is_huge(seconds: f64, value: f64) -> bool {
    (value * seconds).abs() >= 1e280
}

impl CeilingTracker {
    /// A tracker of the best `sustain`-second average over the last `horizon` seconds.
    #[must_use]
    pub fn new(horizon_seconds: f64, sustain_seconds: f64) -> CeilingTracker {
        CeilingTracker {
            horizon: horizon_seconds,
            sustain: sustain_seconds,
            recent: VecDeque::new(),
            weighted: ExactSum::default(),
            seconds: ExactSum::default(),
            huge: 0,
            best: VecDeque::new(),
        }
    }

    /// Feed the window of `seconds` ending at `end` with `value` (`None`: not measured,
    /// which breaks continuity). Returns the ceiling as of `end`.
    pub fn observe(&mut self, end: Timestamp, seconds: f64, value: Option<f64>) -> Option<Ceiling> {
        match value.filter(|v| v.is_finite()) {
            Some(v) if seconds > 0.0 && seconds.is_finite() => {
                self.recent.push_back((end, seconds, v));
                if is_huge(seconds, v) {
                    self.huge += 1;
                } else if self.recent.len() > 1 {
                    self.weighted.add(v * seconds);
                    self.seconds.add(seconds);
                }
            }
            _ => {
                self.recent.clear();
                self.weighted.clear();
                self.seconds.clear();
                self.huge = 0;
            }
        }
        // Keep the windows that end inside the trailing span (end - sustain, end].
        while let Some(&(e, dt, v)) = self.recent.front()
            && end.seconds_since(e) >= self.sustain
        {
            self.recent.pop_front();
            if is_huge(dt, v) {
                self.huge -= 1;
            }
            // The new oldest window leaves the sums: it is weighted by its overlap below.
            if let Some(&(_, dt, v)) = self.recent.front()
                && !is_huge(dt, v)
            {
                self.weighted.add(-(v * dt));
                self.seconds.add(-dt);
            }
        }
        let (covered, avg) = if self.huge > 0 {
            naive_mean(&self.recent, end, self.sustain)
        } else {
            self.mean(end)
        };
        if covered >= self.sustain * (1.0 - 1e-9) && avg.is_finite() {
            while self.best.back().is_some_and(|(_, b)| *b <= avg) {
                self.best.pop_back();
            }
            self.best.push_back((end, avg));
        }
        while self
            .best
            .front()
            .is_some_and(|(t, _)| end.seconds_since(*t) > self.horizon)
        {
            self.best.pop_front();
        }
        self.best.front().map(|(t, v)| Ceiling {
            value: *v,
            age_seconds: end.seconds_since(*t),
        })
    }

    /// Seconds covered and the average over the span ending at `end`: the sums of the whole
    /// windows, plus the oldest window's overlap with the span.
    fn mean(&self, end: Timestamp) -> (f64, f64) {
        let Some(&(e, dt, v)) = self.recent.front() else {
            return (0.0, 0.0);
        };
        let part = dt.min(self.sustain - end.seconds_since(e)).max(0.0);
        let covered = self.seconds.plus(part);
        if covered <= 0.0 {
            return (0.0, 0.0);
        }
        (covered, self.weighted.plus(v * part) / covered)
    }
}

/// Seconds covered and the average of `recent` over the span (end - sustain, end], as a
/// running mean: huge values average to themselves instead of overflowing a sum. O(windows).
fn naive_mean(
    recent: &VecDeque<(Timestamp, f64, f64)>,
    end: Timestamp,
    sustain: f64,
) -> (f64, f64) {
    let (mut covered, mut avg) = (0.0, 0.0);
    for (e, dt, v) in recent {
        // The part of [e - dt, e] inside [end - sustain, end].
        let part = dt.min(sustain - end.seconds_since(*e)).max(0.0);
        if part > 0.0 {
            covered += part;
            avg += (v - avg) * (part / covered);
        }
    }
    (covered, avg)
}

/// An exact sum of floating-point terms, as non-overlapping partials in increasing
/// magnitude (Shewchuk's algorithm, the one behind Python's `math.fsum`). Adding and then
/// subtracting a term leaves it exactly as it was, so a sliding sum never drifts, and its
/// value depends on the terms it holds, not on the order they came and went in.
#[derive(Debug, Clone, Default)]
struct ExactSum {
    partials: Vec<f64>,
}

impl ExactSum {
    fn add(&mut self, x: f64) {
        grow(&mut self.partials, x);
    }

    fn clear(&mut self) {
        self.partials.clear();
    }

    /// The sum plus `x`, correctly rounded.
    fn plus(&self, x: f64) -> f64 {
        if self.partials.len() < 4 {
            let mut p = [0.0; 5];
            p[..self.partials.len()].copy_from_slice(&self.partials);
            let n = grow_array(&mut p, self.partials.len(), x);
            round(&p[..n])
        } else {
            let mut p = self.partials.clone();
            grow(&mut p, x);
            round(&p)
        }
    }
}

/// Two-sum of `x` into the partials, dropping zeros.
fn grow(partials: &mut Vec<f64>, x: f64) {
    let n = partials.len();
    let kept = two_sums(partials, n, x);
    partials.truncate(kept.0);
    if kept.1 != 0.0 {
        partials.push(kept.1);
    }
}

/// [`grow`] over the first `n` of a fixed array with room for one more; returns the length.
fn grow_array(partials: &mut [f64; 5], n: usize, x: f64) -> usize {
    let (mut kept, hi) = two_sums(&mut partials[..], n, x);
    if hi != 0.0 {
        partials[kept] = hi;
        kept += 1;
    }
    kept
}

/// Adds `x` to the first `n` partials in place: the non-zero low parts are written back to
/// the front; returns how many, and the high part left over.
fn two_sums(partials: &mut [f64], n: usize, mut x: f64) -> (usize, f64) {
    let mut kept = 0;
    for j in 0..n {
        let mut y = partials[j];
        if x.abs() < y.abs() {
            std::mem::swap(&mut x, &mut y);
        }
        let hi = x + y;
        let lo = y - (hi - x);
        if lo != 0.0 {
            partials[kept] = lo;
            kept += 1;
        }
        x = hi;
    }
    (kept, x)
}

/// The correctly rounded value of non-overlapping partials in increasing magnitude.
fn round(partials: &[f64]) -> f64 {
    let Some((&top, rest)) = partials.split_last() else {
        return 0.0;
    };
    let (mut hi, mut lo) = (top, 0.0);
    let mut n = rest.len();
    while n > 0 {
        let x = hi;
        n -= 1;
        let y = rest[n];
        hi = x + y;
        lo = y - (hi - x);
        if lo != 0.0 {
            break;
        }
    }
    // Half-way cases: the next partial down decides.
    if n > 0 && ((lo < 0.0 && rest[n - 1] < 0.0) || (lo > 0.0 && rest[n - 1] > 0.0)) {
        let y = lo * 2.0;
        let x = hi + y;
        if y == x - hi {
            hi = x;
        }
    }
    hi
}

impl Default for CeilingTracker {
    fn default() -> Self {
        CeilingTracker::new(CEILING_HORIZON_SECONDS, CEILING_SUSTAIN_SECONDS)
    }
}

/// The result of feeding one sample.
#[derive(Debug, Clone, Default)]
pub struct Derivation {
    /// One entry per entity in the sample (skipped windows included, with `dt_seconds` 0).
    pub windows: Vec<EntityWindow>,
    /// What was noticed along the way.
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, Clone)]
struct EntityState {
    last_taken: Timestamp,
    /// The energy counter's latest reading that moved (or its first), when it was taken,
    /// and whether that sample is one where the counter changed: only then is its time the
    /// counter's own move, which a delta may be paired with.
    last_energy: Option<(f64, Timestamp, bool)>,
    /// Gauge energy (joules, seconds) of the observed windows since `last_energy` whose
    /// counter reading was blank or repeated: counted only if the counter comes back reset,
    /// since its next delta otherwise spans them.
    provisional_energy: (f64, f64),
    /// How the current window's energy counts.
    window_energy: EnergyRule,
    /// Energy (joules, seconds) the counter counted for the current window, added once the
    /// window's holders are known ([`EntityState::add_energy`]).
    counted_energy: (f64, f64),
    idle_power: Option<f64>,
    /// The lowest power of the windows whose busy flag read 0 ([`crate::energy`]).
    measured_floor: Option<f64>,
    classifier: PhaseClassifier,
    /// The entity's latest window, with the entity's integrals up to it.
    window: EntityWindow,
    /// Whether `window` waits to be integrated, and why.
    pending: Pending,
    /// The length of the entity's latest observed window: what a window is compared with to
    /// tell a gap when the source declares no update interval.
    last_window_seconds: Option<f64>,
    /// The highest busy flag of the windows since the energy counter last moved (1 for one
    /// unread): the power the counter gives when it moves is drawn over all of them.
    span_util: f64,
    warned_unknown_model: bool,
    /// A malformed line lay in the input since this entity's previous sample
    /// ([`Deriver::line_lost`]).
    lost_line: bool,
    capability: Fidelity,
    last_clock_mhz: Option<f64>,
    /// The cumulative cycle counters between windows.
    cycles: CycleCounters,
    /// The single-bit ECC total, and the power plus thermal violation time with the set of
    /// fields it summed and the time it was read, at the entity's previous reading of each:
    /// what the window's health rises are taken from.
    last_health_counters: (Option<f64>, Option<(f64, u64, Timestamp)>),
    /// The highest lifetime double-bit ECC count read: a later reading below it is none.
    dbe_aggregate: Option<f64>,
    /// Whether the current window's activity came from the cycle counters.
    activity_from_counters: bool,
    ceiling_saturation: CeilingTracker,
    ceiling_output_tokens: CeilingTracker,
    /// Since when the entity has done no work: the end of its last window with work, else
    /// the first sample seen of it.
    idle_from: Timestamp,
    /// The NVLink transmit-wait counter's last reading and when it was taken (for a source
    /// that holds its counters, its last rise), and that rise's rate.
    /// The NVLink transmit wait's last reading, its time, and how many links it summed.
    last_tx_wait: Option<(f64, Timestamp, u16)>,
    tx_wait_held: Option<f64>,
}

/// An energy counter's move from `moved.0` to `moved.1` J over `span` s, more than `bound` W
/// can draw: out of range.
#[cold]
#[inline(never)]
fn impossible_energy(e: &EntitySample, moved: (f64, f64), span: f64, bound: f64) -> Diagnostic {
    let (prev, now) = moved;
    Diagnostic {
        kind: DiagnosticKind::OutOfRange,
        entity: Some(e.id.clone()),
        field: Some(Field::EnergyJoules),
        detail: format!(
            "{prev} J then {now} J over {span} s is {} W, over the bound of {bound} W",
            (now - prev) / span
        ),
    }
}

/// Why an entity's window waits to be integrated.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Pending {
    /// It does not wait.
    No,
    /// The entity's first window, where the source declares no update interval: it lasts
    /// as long as the entity's own next spacing.
    First,
    /// A window much longer than the one before, where the source declares no update
    /// interval: a change of cadence if the next window is as long, else a gap.
    Long(f64),
    /// A window after a malformed line ([`Deriver::line_lost`]) before the entity's cadence
    /// is known: as long as the entity's next spacing at most, the rest not observed.
    Lost(f64),
}

/// How a window's energy counts.
#[derive(Debug, Clone, Copy, PartialEq)]
enum EnergyRule {
    /// The energy counter's delta counted it already (or it has none to count).
    Counter,
    /// From the power gauge, once the window is observed.
    Gauge,
    /// From the power gauge, provisionally: the counter's next delta will span it (the
    /// windows after the counter's last move, until it moves again).
    Provisional,
}

impl EntityState {
    fn new(taken: Timestamp, e: &EntitySample) -> EntityState {
        EntityState {
            idle_from: taken,
            last_tx_wait: None,
            tx_wait_held: None,
            last_taken: taken,
            last_energy: None,
            provisional_energy: (0.0, 0.0),
            window_energy: EnergyRule::Gauge,
            counted_energy: (0.0, 0.0),
            idle_power: None,
            measured_floor: None,
            classifier: PhaseClassifier::default(),
            window: EntityWindow {
                id: e.id.clone(),
                spec: None,
                simulated: e.simulated,
                dt_seconds: 0.0,
                metrics: WindowMetrics::default(),
                phase: None,
                phase_method: None,
                capability: Fidelity::None,
                llm_serving: false,
                engine_phase: None,
                throttles: None,
                processes: Vec::new(),
                allocation: None,
                idle_floor: None,
                energy_holders: EnergyHolders::default(),
                job: None,
                idle_seconds: None,
                holder_pressure: Vec::new(),
                truth_phase: None,
                truth_workload: None,
                truth_effective_compute: None,
                serving: None,
                verdict: Decision::default(),
                health: None,
                totals: Totals::default(),
                readings: e.readings,
                ceilings: Ceilings::default(),
            },
            pending: Pending::No,
            last_window_seconds: None,
            span_util: 0.0,
            warned_unknown_model: false,
            lost_line: false,
            capability: Fidelity::None,
            last_clock_mhz: None,
            cycles: CycleCounters::default(),
            last_health_counters: (None, None),
            dbe_aggregate: None,
            activity_from_counters: false,
            ceiling_saturation: CeilingTracker::default(),
            ceiling_output_tokens: CeilingTracker::default(),
        }
    }

    /// Integrate the current window over `dt` seconds.
    #[inline(always)]
    fn integrate(&mut self, dt: f64) {
        integrate(&mut self.window, dt);
        let Some(p) = self.window.metrics.power_watts.map(|p| p.value) else {
            return;
        };
        match self.window_energy {
            EnergyRule::Counter => {}
            EnergyRule::Gauge => self.add_energy(p * dt, dt),
            EnergyRule::Provisional => {
                self.provisional_energy.0 += p * dt;
                self.provisional_energy.1 += dt;
            }
        }
    }

    /// Count `joules` over `seconds`: the idle floor's part and the active rest, and both to
    /// the window's holders ([`crate::energy`]).
    fn add_energy(&mut self, joules: f64, seconds: f64) {
        let win = &mut self.window;
        let floor = IdleFloor::decide(self.measured_floor, win.spec.map(|s| s.idle_power_watts));
        let parts = IdleFloor::split(floor, joules, seconds);
        let t = &mut win.totals;
        t.energy_joules += joules;
        t.energy_observed_seconds += seconds;
        match parts {
            Joules::Split(idle, active) => {
                t.idle_floor_joules += idle;
                t.active_energy_joules += active;
            }
            Joules::Unsplit(j) => t.unsplit_energy_joules += j,
        }
        win.energy_holders
            .attribute(&win.id, win.allocation.as_deref(), &win.processes, parts);
    }

    /// `seconds` before the window a malformed line's sample stood for
    /// ([`Deriver::line_lost`]): not observed, said.
    #[cold]
    fn lost_seconds(&mut self, seconds: f64, diags: &mut Vec<Diagnostic>) {
        self.window.totals.unobserved_seconds += seconds;
        diags.push(Diagnostic {
            kind: DiagnosticKind::Gap,
            entity: Some(self.window.id.clone()),
            field: None,
            detail: format!(
                "{seconds} s before this sample were a malformed line's, not read: not observed"
            ),
        });
    }

    /// The current window was not observed: `dt` seconds of gap.
    fn unobserved(&mut self, dt: f64, diags: &mut Vec<Diagnostic>, detail: String) {
        self.window.totals.unobserved_seconds += dt;
        self.window.dt_seconds = 0.0;
        diags.push(Diagnostic {
            kind: DiagnosticKind::Gap,
            entity: Some(self.window.id.clone()),
            field: None,
            detail,
        });
    }
}

/// Per-entity values by [`EntityKey`], in first-seen order. An entity is looked up first
/// at the slot the entity at the same position of the previous sample had (a key
/// comparison, no allocation: sources list their entities in the same order every
/// sample), then by its key.
#[derive(Debug, Clone)]
pub(crate) struct EntityTable<T> {
    slots: Vec<(EntityKey, T)>,
    index: HashMap<EntityKey, usize>,
    /// The slot of the entity at each position of the previous sample.
    hints: Vec<usize>,
}

impl<T> Default for EntityTable<T> {
    fn default() -> Self {
        EntityTable {
            slots: Vec::new(),
            index: HashMap::new(),
            hints: Vec::new(),
        }
    }
}

impl<T> EntityTable<T> {
    /// The slot of `id`, the entity at position `pos` of its sample.
    #[inline(always)]
    pub(crate) fn find(&mut self, pos: usize, id: &EntityId) -> Option<usize> {
        if let Some(&slot) = self.hints.get(pos)
            && self.slots.get(slot).is_some_and(|(k, _)| k.is_key_of(id))
        {
            return Some(slot);
        }
        let slot = *self.index.get(&id.key())?;
        self.hint(pos, slot);
        Some(slot)
    }

    /// Add `id` (not in the table) at position `pos`; returns its slot.
    pub(crate) fn insert(&mut self, pos: usize, id: &EntityId, value: T) -> usize {
        let slot = self.slots.len();
        let key = id.key();
        self.index.insert(key.clone(), slot);
        self.slots.push((key, value));
        self.hint(pos, slot);
        slot
    }

    /// The slot of `id`, added with `make` when it is new.
    pub(crate) fn find_or_insert(
        &mut self,
        pos: usize,
        id: &EntityId,
        make: impl FnOnce() -> T,
    ) -> usize {
        match self.find(pos, id) {
            Some(slot) => slot,
            None => self.insert(pos, id, make()),
        }
    }

    fn hint(&mut self, pos: usize, slot: usize) {
        if pos >= self.hints.len() {
            self.hints.resize(pos + 1, usize::MAX);
        }
        self.hints[pos] = slot;
    }

    pub(crate) fn get(&self, slot: usize) -> &T {
        &self.slots[slot].1
    }

    pub(crate) fn get_mut(&mut self, slot: usize) -> &mut T {
        &mut self.slots[slot].1
    }

    /// Remove the entity with `key`, if present.
    pub(crate) fn remove(&mut self, key: &EntityKey) {
        let Some(slot) = self.index.remove(key) else {
            return;
        };
        self.slots.swap_remove(slot);
        if let Some((moved, _)) = self.slots.get(slot) {
            self.index.insert(moved.clone(), slot);
        }
    }

    /// Keep only the entities for which `keep` holds; the rest are dropped with their index
    /// entries, the slots compacted (a later slot moves down), and the index rebuilt only
    /// when something was dropped. Memory held past four times what is kept goes back.
    /// Returns how many were dropped.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) -> usize {
        let before = self.slots.len();
        self.slots.retain(|(_, t)| keep(t));
        let dropped = before - self.slots.len();
        if dropped == 0 {
            return 0;
        }
        self.index.clear();
        for (slot, (key, _)) in self.slots.iter().enumerate() {
            self.index.insert(key.clone(), slot);
        }
        // A hint is checked against its slot's key before use; the stale ones would only
        // miss, but they are cleared so that none points past the end.
        self.hints.clear();
        let floor = self.slots.len().max(16);
        if self.slots.capacity() > 4 * floor {
            self.slots.shrink_to(2 * floor);
            self.index.shrink_to(2 * floor);
            self.hints.shrink_to(2 * floor);
        }
        dropped
    }

    /// How many entities the table holds.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Entries in the key index (the same number as entities; for tests of the bound).
    #[cfg(test)]
    pub(crate) fn index_len(&self) -> usize {
        self.index.len()
    }

    /// The values in key order.
    pub(crate) fn sorted(&self) -> Vec<&T> {
        let mut v: Vec<&(EntityKey, T)> = self.slots.iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.into_iter().map(|(_, t)| t).collect()
    }
}

/// Derives metrics sample by sample, keeping per-entity state. Pure: time comes from samples.
///
/// A window's length is the difference of its two samples' own timestamps. A window longer
/// than `max_gap_intervals` update intervals is a gap: not observed, counted in
/// [`Totals::unobserved_seconds`], and no other integral grows for it (but energy, where
/// the energy counter spans it). The update interval is the one the source declares;
/// where it declares none, a window is compared with the entity's previous one, and one
/// much longer waits for the next: as long again, it was a change of cadence and is
/// observed; else it was a gap.
#[derive(Debug, Clone)]
pub struct Deriver {
    config: DeriveConfig,
    update_interval: Option<f64>,
    model_override: Option<&'static GpuSpec>,
    verdict: VerdictConfig,
    /// Whether observed ceilings are tracked.
    ceilings: bool,
    entities: EntityTable<EntityState>,
    /// Counts the entities forgotten: while it stands, each entity keeps its slot.
    epoch: u64,
    /// The catalog entries of the model names seen, so a name is parsed once and not once
    /// per entity and sample (a fleet names few models; past [`MODELS_CACHED`] names, the
    /// rest are looked up each time).
    models: Vec<(String, Option<&'static GpuSpec>)>,
    /// Each job's stragglers, found across a sample's entities before each is derived.
    stragglers: Stragglers,
}

/// Model names [`Deriver`] keeps the catalog entry of.
const MODELS_CACHED: usize = 32;

/// Where a window's entity lies in the deriver, for a consumer that keeps its own state
/// per entity to find it without comparing keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Slot {
    /// The entity's slot, which stays its own while `epoch` stands.
    pub index: usize,
    /// Changes whenever an entity is forgotten (slots move then).
    pub epoch: u64,
    /// Whether the window's id differs from the entity's previous window's (it is new,
    /// or an attribute the key leaves out changed).
    pub id_changed: bool,
}

/// A consumer's own index for each of the deriver's slots (its state for the slot's entity),
/// forgotten whenever the slots' epoch moves.
#[derive(Debug, Clone, Default)]
pub struct SlotIndex {
    epoch: u64,
    of: Vec<Option<usize>>,
}

impl SlotIndex {
    /// The index kept for `slot`: `None` until one is written, and again once the epoch
    /// the slots stand in has moved.
    pub fn entry(&mut self, slot: Slot) -> &mut Option<usize> {
        if slot.epoch != self.epoch {
            self.of.clear();
            self.epoch = slot.epoch;
        }
        if slot.index >= self.of.len() {
            self.of.resize(slot.index + 1, None);
        }
        &mut self.of[slot.index]
    }
}

/// How a window handed to a consumer counts, for one that weighs windows by time itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Handed {
    /// A new window, integrated now over these seconds (0 while it waits, or a gap).
    New(f64),
    /// A window handed before while it waited, integrated now over these seconds (0: it
    /// turned out to be a gap). Handed just before the entity's next window.
    Late(f64),
}

/// What decides the current window.
#[derive(Clone, Copy)]
enum WindowSpan {
    /// Observed over these seconds.
    Observed(f64),
    /// A gap of these seconds.
    Gap(f64),
    /// It waits.
    Waits(Pending),
}

impl WindowSpan {
    /// The window's length (0 for a first window that waits for it).
    fn seconds(&self) -> f64 {
        match *self {
            WindowSpan::Observed(dt)
            | WindowSpan::Gap(dt)
            | WindowSpan::Waits(Pending::Long(dt) | Pending::Lost(dt)) => dt,
            WindowSpan::Waits(_) => 0.0,
        }
    }
}

impl Deriver {
    /// A deriver. `update_interval` (seconds) is the interval at which the source updates
    /// its readings, when it declares one: the length of each entity's first window and the
    /// unit for gaps. `None`: an entity's first window lasts as long as its next spacing, and
    /// gaps are told from the entity's own cadence.
    #[must_use]
    pub fn new(config: DeriveConfig, update_interval: Option<f64>) -> Deriver {
        Deriver {
            config,
            update_interval: update_interval.filter(|i| i.is_finite() && *i > 0.0),
            model_override: None,
            verdict: VerdictConfig::default(),
            ceilings: true,
            entities: EntityTable::default(),
            epoch: 0,
            models: Vec::new(),
            stragglers: Stragglers::default(),
        }
    }

    /// The catalog entry of a model name, through [`Deriver::models`].
    fn spec_of(&mut self, model: &str) -> Option<&'static GpuSpec> {
        if let Some((_, spec)) = self.models.iter().find(|(m, _)| m == model) {
            return *spec;
        }
        let spec = gpus::lookup(model);
        if self.models.len() < MODELS_CACHED {
            self.models.push((model.to_owned(), spec));
        }
        spec
    }

    /// Use this catalog entry for every entity, whatever model the readings name.
    pub fn set_model_override(&mut self, spec: Option<&'static GpuSpec>) {
        self.model_override = spec;
    }

    /// Use these verdict thresholds.
    pub fn set_verdict_config(&mut self, config: VerdictConfig) {
        self.verdict = config;
    }

    /// Track observed ceilings (the default), or not: a consumer that reads none saves
    /// their cost, and its windows carry none.
    pub fn set_ceilings(&mut self, on: bool) {
        self.ceilings = on;
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &DeriveConfig {
        &self.config
    }

    /// Forget an entity (for example when its source went stale): its state, its slot and
    /// its index entry are dropped. A later sample of it starts it afresh.
    pub fn forget(&mut self, key: &EntityKey) {
        let before = self.entities.len();
        self.entities.remove(key);
        if self.entities.len() != before {
            self.epoch += 1;
        }
    }

    /// Forget every entity whose latest sample was taken before `cutoff` (an entity not
    /// seen for a while: a pod that ended, a GPU replaced); returns how many. Meant to run
    /// once in a while (say once per stale period), not every sample: it walks every
    /// entity.
    pub fn forget_unseen_since(&mut self, cutoff: Timestamp) -> usize {
        let dropped = self
            .entities
            .retain(|st| st.last_taken.seconds_since(cutoff) >= 0.0);
        if dropped > 0 {
            self.epoch += 1;
        }
        dropped
    }

    /// How many entities the deriver keeps state for.
    #[must_use]
    pub fn tracked(&self) -> usize {
        self.entities.len()
    }

    /// Feed one sample.
    pub fn observe(&mut self, sample: &Sample) -> Derivation {
        let mut out = Derivation::default();
        let Derivation {
            windows,
            diagnostics,
        } = &mut out;
        self.observe_each(sample, diagnostics, |w| windows.push(w.clone()));
        out
    }

    /// Feed one sample, handing each entity's window to `each` as it is derived (the same
    /// windows, in the same order, as [`Deriver::observe`]), and appending what was noticed
    /// to `diagnostics`.
    pub fn observe_each(
        &mut self,
        sample: &Sample,
        diagnostics: &mut Vec<Diagnostic>,
        mut each: impl FnMut(&EntityWindow),
    ) {
        self.observe_each_slot(sample, diagnostics, |_, w| each(w));
    }

    /// [`Deriver::observe_each`], each window handed with its entity's [`Slot`]: a consumer
    /// that keeps its own state per entity finds it by the slot (while the slot's epoch
    /// stands), without comparing the entity's key again.
    pub fn observe_each_slot(
        &mut self,
        sample: &Sample,
        diagnostics: &mut Vec<Diagnostic>,
        mut each: impl FnMut(Slot, &EntityWindow),
    ) {
        self.observe_slots(sample, diagnostics, |slot, w, handed| {
            if let Handed::New(_) = handed {
                each(slot, w);
            }
        });
    }

    /// The end of the input: each window still waiting for the entity's next sample
    /// ([`Pending`]) is decided without one, said, and handed again ([`Handed::Late`], with
    /// no seconds). A long last window cannot be told a change of cadence without a spacing
    /// after it, so its seconds are not observed; an entity's only window has no length (no
    /// sample before or after it, and no declared interval), so it stands for no time. Either
    /// was left waiting in silence: the last 295 s after a pause were neither observed nor
    /// unobserved, and a capture of one sample read as having no busy flag.
    pub(crate) fn finish(
        &mut self,
        diags: &mut Vec<Diagnostic>,
        mut each: impl FnMut(Slot, &EntityWindow, Handed),
    ) {
        for slot in 0..self.entities.len() {
            let state = self.entities.get_mut(slot);
            let (seconds, detail) = match state.pending {
                Pending::No => continue,
                Pending::Long(long) => (
                    long,
                    format!(
                        "{long} s since the previous sample, and no sample after it to tell a change of cadence from a gap (the end of the input): not observed"
                    ),
                ),
                Pending::First => (0.0, "one sample only, and no interval declared by its format: the time it stands for is unknown, so none of its readings is averaged; capture at least two samples".to_string()),
                Pending::Lost(lost) => (
                    lost,
                    format!(
                        "{lost} s since the previous sample, with a malformed line between and no sample after it to tell the cadence (the end of the input): not observed"
                    ),
                ),
            };
            state.pending = Pending::No;
            state.unobserved(seconds, diags, detail);
            let handed = Slot {
                index: slot,
                epoch: self.epoch,
                id_changed: false,
            };
            each(handed, &self.entities.get(slot).window, Handed::Late(0.0));
        }
    }

    /// A line of the input was malformed and not read: whose sample it held is not known,
    /// so each entity's next window is taken as no longer than its cadence (the source's
    /// update interval, else its own previous window), and the rest of it is not observed:
    /// its reading is the lost line's, never the next sample's.
    pub fn line_lost(&mut self) {
        for slot in 0..self.entities.len() {
            self.entities.get_mut(slot).lost_line = true;
        }
    }

    /// `decision` for entity `st`'s window where a malformed line lay before it
    /// ([`Deriver::line_lost`]): an observed window longer than the entity's cadence cut to
    /// it, with the seconds cut (0 where none). Where the cadence is not known yet (the
    /// entity's second sample, in a source that declares no update interval), the window
    /// waits for the next spacing to tell it ([`Pending::Lost`]).
    #[inline(always)]
    fn after_lost_line(&self, st: Option<&EntityState>, decision: WindowSpan) -> (WindowSpan, f64) {
        match st {
            Some(st) if st.lost_line => self.cut_to_cadence(st, decision),
            _ => (decision, 0.0),
        }
    }

    /// [`Deriver::after_lost_line`] where a line was lost.
    #[cold]
    fn cut_to_cadence(&self, st: &EntityState, decision: WindowSpan) -> (WindowSpan, f64) {
        let (WindowSpan::Observed(dt) | WindowSpan::Waits(Pending::Long(dt))) = decision else {
            return (decision, 0.0);
        };
        match self.update_interval.or(st.last_window_seconds) {
            Some(cadence) if dt > cadence * (1.0 + 1e-9) => {
                (WindowSpan::Observed(cadence), dt - cadence)
            }
            Some(_) => (decision, 0.0),
            None => (WindowSpan::Waits(Pending::Lost(dt)), 0.0),
        }
    }

    /// [`Deriver::observe_each`], each window handed with where its entity lies and how it
    /// counts; a window that waited is handed again, [`Handed::Late`], once it is decided.
    pub(crate) fn observe_slots(
        &mut self,
        sample: &Sample,
        diagnostics: &mut Vec<Diagnostic>,
        mut each: impl FnMut(Slot, &EntityWindow, Handed),
    ) {
        let marks = self.stragglers.marks(sample, &self.verdict.stragglers);
        let mut marks = marks.iter().peekable();
        for (pos, e) in sample.entities.iter().enumerate() {
            let mark = marks.next_if(|m| m.index == pos);
            self.observe_entity(sample.taken, (pos, mark), e, diagnostics, &mut each);
        }
    }

    /// How long the window ending at `taken` is, and what decides it: the source's update
    /// interval, else the entity's own cadence.
    fn decide(&self, state: Option<&EntityState>, taken: Timestamp) -> Option<WindowSpan> {
        let k = self.config.max_gap_intervals;
        let Some(st) = state else {
            return Some(match self.update_interval {
                Some(u) => WindowSpan::Observed(u),
                None => WindowSpan::Waits(Pending::First),
            });
        };
        let dt = taken.seconds_since(st.last_taken);
        if dt <= 0.0 {
            return None;
        }
        // A window that waits after a lost line ([`Pending::Lost`]) is at most its length.
        let prev = st.last_window_seconds.or(match st.pending {
            Pending::Lost(l) => Some(l),
            _ => None,
        });
        Some(match (self.update_interval, prev) {
            (Some(u), _) if dt > k * u => WindowSpan::Gap(dt),
            (None, Some(prev)) if dt > k * prev => WindowSpan::Waits(Pending::Long(dt)),
            _ => WindowSpan::Observed(dt),
        })
    }

    /// Derive entity `e`'s window ending at `taken` in place of its previous one, and hand it
    /// to `each` (after the window that waited, once that one is decided). The steps are
    /// [`EntityState`]'s, in this order: each reads what the ones before it left.
    fn observe_entity(
        &mut self,
        taken: Timestamp,
        (pos, mark): (usize, Option<&Mark>),
        e: &EntitySample,
        diags: &mut Vec<Diagnostic>,
        each: &mut impl FnMut(Slot, &EntityWindow, Handed),
    ) {
        let spec = match (self.model_override, e.id.model.as_deref()) {
            (Some(spec), _) => Some(spec),
            (None, Some(model)) => self.spec_of(model),
            (None, None) => None,
        };

        let slot = self.entities.find(pos, &e.id);
        let existing = slot.map(|slot| self.entities.get(slot));
        let Some(decision) = self.decide(existing, taken) else {
            let dt = existing.map_or(0.0, |st| taken.seconds_since(st.last_taken));
            skip_sample(e, spec, dt, diags);
            return;
        };
        let (decision, lost) = self.after_lost_line(existing, decision);
        let first = slot.is_none();
        let k = self.config.max_gap_intervals;

        let slot =
            slot.unwrap_or_else(|| self.entities.insert(pos, &e.id, EntityState::new(taken, e)));
        let state = self.entities.get_mut(slot);
        let cfg = &self.config;
        let handed_slot = |id_changed| Slot {
            index: slot,
            epoch: self.epoch,
            id_changed,
        };
        // A window that waited is decided now, before this one takes its place.
        if !first && let Some(seconds) = state.resolve_pending(taken, k, diags) {
            each(handed_slot(false), &state.window, Handed::Late(seconds));
        }
        state.lost_line = false;
        if lost > 0.0 {
            state.lost_seconds(lost, diags);
        }
        // The window is derived in place of the entity's previous one.
        let attributes_changed = state.take_readings(e, spec, diags);
        state.window.mark(e, mark);
        state.tx_wait_rate(taken, e.counters_held, e.nvlink_wait_links);
        let id_changed = first || attributes_changed;
        state.activity_from_counters =
            state
                .cycles
                .derive(&mut state.window.readings, &e.id, diags);
        state.judge_health(&e.id, &self.verdict.health, taken, diags);
        let energy_power = state.count_energy(taken, e, spec, diags);
        state.last_taken = taken;
        state.mean_clock(e.sm_clock_is_point, first);
        state.derive_metrics(e, spec, energy_power, cfg, diags);
        state.classify(e, spec, decision.seconds(), cfg, &self.verdict);
        let gap = matches!(decision, WindowSpan::Gap(_));
        state.idle_since(taken, e, self.verdict.idle_util, gap);
        state.observe_ceilings(taken, decision, e, self.ceilings);
        state.copy_attributes(e, spec, cfg.workload);
        let (joules, seconds) = std::mem::take(&mut state.counted_energy);
        if seconds > 0.0 || joules > 0.0 {
            state.add_energy(joules, seconds);
        }
        let seconds = state.settle(decision, self.update_interval, k, diags);
        each(handed_slot(id_changed), &state.window, Handed::New(seconds));
    }
}

impl EntityWindow {
    /// The job's marks on the window: a straggler's gaps, or the gap it waits on, and the
    /// job (the sample's own, where its source marked it, else none).
    #[inline(always)]
    fn mark(&mut self, e: &EntitySample, mark: Option<&Mark>) {
        match mark {
            Some(m) => {
                for (f, v) in &m.fields {
                    self.readings.set_value(*f, *v);
                }
                if self.job.as_deref() != Some(m.job.as_str()) {
                    self.job = Some(m.job.clone());
                }
            }
            None if self.job.is_some() || e.job.is_some() => self.job.clone_from(&e.job),
            None => {}
        }
    }
}

/// What [`EntityState::judge_health`] looks at: its inputs, and the lifetime double-bit ECC
/// count it checks ([`EntityState::lifetime_count`]).
const JUDGED: u64 = health::INPUT_FIELDS | Field::set_of(&[Field::EccDbeAggregate]);

/// A counter of the health inputs that went back since its previous reading (`before`,
/// `now`): a driver reload starts it again. Counted, as a cycle counter's is; the window's
/// rise is then unknown.
fn count_reset(
    id: &EntityId,
    what: &str,
    (before, now): (Option<f64>, Option<f64>),
    diags: &mut Vec<Diagnostic>,
) {
    if let (Some(before), Some(now)) = (before, now)
        && now < before
    {
        diags.push(Diagnostic {
            kind: DiagnosticKind::CounterReset,
            entity: Some(id.clone()),
            field: None,
            detail: format!(
                "the {what} went back from {before} to {now}: counted again from there"
            ),
        });
    }
}

/// A sample not after the entity's previous one (`dt` seconds after it) is skipped, with a
/// diagnostic; its readings are still sanitized, for what that diagnoses.
fn skip_sample(
    e: &EntitySample,
    spec: Option<&'static GpuSpec>,
    dt: f64,
    diags: &mut Vec<Diagnostic>,
) {
    let mut readings = e.readings;
    derive::sanitize(&mut readings, &e.id, spec, diags);
    diags.push(Diagnostic {
        kind: DiagnosticKind::NonIncreasingTime,
        entity: Some(e.id.clone()),
        field: None,
        detail: format!("{dt} s after the previous sample; sample skipped"),
    });
}

/// The steps of [`Deriver::observe_entity`], in the order it takes them. Each works on the
/// entity's state and its window in place: nothing is allocated but what a diagnostic or a
/// changed attribute needs.
impl EntityState {
    /// Decide the window that waited ([`Pending`]), now that the entity's next sample came
    /// at `taken`: a first window lasts as long as the spacing to it; a long one is observed
    /// when at most `k` such spacings long (a change of cadence), else it was a gap. Returns
    /// the seconds it was integrated over (0 for a gap), `None` when no window waited.
    #[inline(always)]
    fn resolve_pending(
        &mut self,
        taken: Timestamp,
        k: f64,
        diags: &mut Vec<Diagnostic>,
    ) -> Option<f64> {
        let spacing = taken.seconds_since(self.last_taken);
        let late = match self.pending {
            Pending::No => None,
            Pending::First if self.lost_line => {
                self.unobserved(
                    0.0,
                    diags,
                    "the first sample, then a malformed line: the time it stands for is unknown, so none of its readings is averaged".to_string(),
                );
                Some(0.0)
            }
            // The next spacing tells no cadence where it spans a lost line too, or a gap.
            Pending::Lost(dt) if self.lost_line || spacing > k * dt => {
                self.unobserved(
                    dt,
                    diags,
                    format!(
                        "{dt} s since the previous sample, with a malformed line between, and the spacing after it ({spacing} s) tells no cadence (another line lost, or a gap): not observed"
                    ),
                );
                Some(0.0)
            }
            Pending::Lost(dt) => {
                let observed = dt.min(spacing);
                self.integrate(observed);
                self.last_window_seconds = Some(observed);
                if dt > observed {
                    self.lost_seconds(dt - observed, diags);
                }
                Some(observed)
            }
            Pending::First => {
                self.integrate(spacing);
                self.last_window_seconds = Some(spacing);
                Some(spacing)
            }
            Pending::Long(long) if long <= k * spacing => {
                self.integrate(long);
                self.last_window_seconds = Some(long);
                Some(long)
            }
            Pending::Long(long) => {
                self.unobserved(
                    long,
                    diags,
                    format!(
                        "{long} s since the previous sample, against {spacing} s before and after: not observed"
                    ),
                );
                Some(0.0)
            }
        };
        self.pending = Pending::No;
        late
    }

    /// Take the sample's id and sanitized readings into the window, and say once that the
    /// model is not in the catalog. Returns whether the id's attributes changed (found by
    /// its key, only the attributes the key leaves out can differ).
    #[inline(always)]
    fn take_readings(
        &mut self,
        e: &EntitySample,
        spec: Option<&'static GpuSpec>,
        diags: &mut Vec<Diagnostic>,
    ) -> bool {
        let win = &mut self.window;
        let changed = !win.id.same_attributes(&e.id);
        if changed {
            win.id.clone_from(&e.id);
        }
        derive::sanitize_from(&mut win.readings, &e.readings, &e.id, spec, diags);
        if spec.is_none() && !self.warned_unknown_model {
            self.warned_unknown_model = true;
            diags.push(Diagnostic {
                kind: DiagnosticKind::UnknownModel,
                entity: Some(e.id.clone()),
                field: None,
                detail: format!(
                    "model {:?} is not in the catalog; clock correction, power proxy and MIG fit are omitted",
                    e.id.model.as_deref().unwrap_or("unknown")
                ),
            });
        }
        changed
    }

    /// The window's health ([`health::classify`]): its levels, and the rises of the
    /// single-bit ECC total and the violation time since their previous readings, the
    /// violation time as a share of the window that ends at `taken`. After a fatal XID the
    /// window's profiling readings are not trusted: they are blanked, with a diagnostic, so
    /// that no effective compute comes from the window.
    #[inline(always)]
    fn judge_health(
        &mut self,
        id: &EntityId,
        cfg: &health::HealthConfig,
        taken: Timestamp,
        diags: &mut Vec<Diagnostic>,
    ) {
        // Most windows of most sources: nothing to judge, now or before.
        if !self.window.readings.any_filled(JUDGED) && self.last_health_counters == (None, None) {
            self.window.health = None;
            return;
        }
        self.lifetime_count(id, diags);
        let r = &mut self.window.readings;
        let sbe = r.value(Field::EccSbeVolatile);
        let violation = health::violation(r);
        let (last_sbe, last_violation) = self.last_health_counters;
        // A counter's first reading (or its first after a drop, or a violation sum of other
        // fields than the last) says nothing rose in the window: what it counted came
        // before. The violation time's rise is a share of the time since its previous
        // reading (a blank in between widens both).
        let before = last_violation
            .filter(|l| violation.is_some_and(|v| v.1 == l.1))
            .map(|l| l.0);
        let now = violation.map(|v| v.0);
        count_reset(id, "single-bit ECC count", (last_sbe, sbe), diags);
        count_reset(id, "clock violation time (ns)", (before, now), diags);
        let inputs = HealthInputs {
            sbe_rise: health::rise(last_sbe, sbe).or(sbe.map(|_| 0.0)),
            violation_rise_ns: health::rise(before, now).or(now.map(|_| 0.0)),
            window_seconds: last_violation.map(|(.., at)| taken.seconds_since(at)),
            ..HealthInputs::from_readings(r)
        };
        self.last_health_counters = (
            sbe.or(last_sbe),
            violation.map(|(v, set)| (v, set, taken)).or(last_violation),
        );
        self.window.health = health::classify(&inputs, cfg);
        if self.window.health.is_some_and(|h| h.profiling_untrusted()) {
            for f in health::PROFILING_FIELDS {
                if r.value(f).is_some() {
                    r.set(f, crate::model::Reading::Blank);
                    diags.push(Diagnostic {
                        kind: DiagnosticKind::UntrustedAfterXid,
                        entity: Some(id.clone()),
                        field: Some(f),
                        detail: "after a fatal XID the profiling readings are not trusted"
                            .to_string(),
                    });
                }
            }
        }
    }

    /// The lifetime double-bit ECC count, which no reset lowers (it is kept across driver
    /// reloads and reboots): a reading below the highest one before is no reading, left
    /// blank and counted as out of range.
    fn lifetime_count(&mut self, id: &EntityId, diags: &mut Vec<Diagnostic>) {
        let r = &mut self.window.readings;
        let Some(now) = r.value(Field::EccDbeAggregate) else {
            return;
        };
        match self.dbe_aggregate {
            Some(before) if now < before => {
                r.set(Field::EccDbeAggregate, crate::model::Reading::Blank);
                diags.push(Diagnostic {
                    kind: DiagnosticKind::OutOfRange,
                    entity: Some(id.clone()),
                    field: Some(Field::EccDbeAggregate),
                    detail: format!(
                        "{now} after {before}: a lifetime count never goes back; not read"
                    ),
                });
            }
            _ => self.dbe_aggregate = Some(now),
        }
    }

    /// Energy bookkeeping, and how the window's own energy counts ([`EnergyRule`]). Each
    /// counter delta is paired with the time between the counter's own moves, the samples
    /// where its reading changed: a delta spans whatever lies between (blank or repeated
    /// readings, gaps) and is counted at once; the windows after the last move are
    /// provisional until the next. Where the source holds its counters between collections
    /// ([`EntitySample::counters_held`]: dcgm-exporter may have taken a first reading up to
    /// a collection interval before), the first reading (or a drop) is not known to be a
    /// move: the windows up to the counter's first change, and that change's own, count
    /// from the power gauge, and the change is the first move. A counter read when sampled
    /// moves at its first reading. A
    /// window no delta spans counts from the gauge once observed; after a reset, the gauge
    /// energy of the windows since the counter's last move is counted instead. What the
    /// counter counts waits in `counted_energy` until the window's holders are known (the
    /// window ending at this sample is its holders'). Returns the power the counter gives
    /// over the time since it last moved, when it moved.
    #[inline(always)]
    fn count_energy(
        &mut self,
        taken: Timestamp,
        e: &EntitySample,
        spec: Option<&GpuSpec>,
        diags: &mut Vec<Diagnostic>,
    ) -> Option<f64> {
        let energy = self.window.readings.value(Field::EnergyJoules);
        // The counter's own read time, where the source stamps it apart from the sample.
        let taken = e.energy_read_at.unwrap_or(taken);
        let mut energy_power = None;
        // A reading equal to the previous one is the counter not yet updated (dcgm-exporter
        // repeats it between its collections), not 0 W: it waits, like a blank, for the next
        // reading that moves, whose delta then spans it. So `last_energy` is the counter's
        // last move (or its first reading, until it changes).
        let mut changed = true;
        self.window_energy = match (energy, self.last_energy) {
            (Some(now), Some((prev, _, _))) if now < prev => {
                diags.push(Diagnostic {
                    kind: DiagnosticKind::CounterReset,
                    entity: Some(e.id.clone()),
                    field: Some(Field::EnergyJoules),
                    detail: format!("{prev} J then {now} J"),
                });
                // The counter cannot say what the windows since its previous reading used:
                // their gauge energy is counted instead, and this window's.
                self.counted_energy = std::mem::take(&mut self.provisional_energy);
                EnergyRule::Gauge
            }
            // A move no board can draw (over the power gauge's own bound) is no measurement:
            // counted, and the windows it spans count from the gauge, as after a reset.
            (Some(now), Some((prev, since, true)))
                if now - prev
                    > derive::power_bound(&self.window.readings, spec)
                        * taken.seconds_since(since) =>
            {
                let span = taken.seconds_since(since);
                let bound = derive::power_bound(&self.window.readings, spec);
                diags.push(impossible_energy(e, (prev, now), span, bound));
                self.counted_energy = std::mem::take(&mut self.provisional_energy);
                EnergyRule::Gauge
            }
            (Some(now), Some((prev, _, _))) if now == prev => {
                changed = false;
                self.provisional_or_gauge()
            }
            (Some(now), Some((prev, since, true))) => {
                let span = taken.seconds_since(since);
                self.counted_energy = (now - prev, span);
                self.provisional_energy = (0.0, 0.0);
                if span > 0.0 {
                    energy_power = Some((now - prev) / span);
                }
                EnergyRule::Counter
            }
            // The first change: the reading before it has no known time, so its delta has
            // none to be paired with.
            (Some(_), Some((_, _, false))) | (Some(_), None) | (None, None) => EnergyRule::Gauge,
            // The counter gone for longer than any source holds it between collections: the
            // windows waiting for its next move count from the gauge, and a reading that
            // comes back counts again from itself.
            (None, Some((_, since, true)))
                if taken.seconds_since(since) > ENERGY_SPAN_MAX_SECONDS =>
            {
                self.counted_energy = std::mem::take(&mut self.provisional_energy);
                self.last_energy = None;
                EnergyRule::Gauge
            }
            (None, Some(_)) => self.provisional_or_gauge(),
        };
        if let (Some(now), true) = (energy, changed) {
            // A drop is a change too: the counter counts again from it. A counter read when
            // sampled moves at its first reading; a held one only when it changes.
            let moved = self.last_energy.is_some() || !e.counters_held;
            self.last_energy = Some((now, taken, moved));
        }
        energy_power
    }

    /// A window the counter's last reading does not span: provisional after a move (its
    /// next delta will span it), from the gauge before the counter's first move (no delta
    /// will).
    fn provisional_or_gauge(&self) -> EnergyRule {
        match self.last_energy {
            Some((_, _, true)) => EnergyRule::Provisional,
            _ => EnergyRule::Gauge,
        }
    }

    /// κ from the window's mean SM clock: a source that reads the clock at one instant
    /// (`point`) gets the mean of the window's two end readings (but for the entity's
    /// `first` window, which has one, and a window after one whose clock was already a mean:
    /// the point read before that one is no end of this window).
    #[inline]
    fn mean_clock(&mut self, point: bool, first: bool) {
        let readings = &mut self.window.readings;
        let clock = readings.value(Field::SmClockMhz);
        if point && let (Some(now), Some(prev), false) = (clock, self.last_clock_mhz, first) {
            readings.set_value(Field::SmClockMhz, 0.5 * (now + prev));
        }
        self.last_clock_mhz = if point { clock } else { None };
    }

    /// Derive the window's metrics, then learn from them: the entity's capability tier (the
    /// best fidelity seen) and its idle power (the lowest power seen while the busy flag is
    /// nearly off, which the next windows use). A busy flag below effective compute is
    /// diagnosed where the gap was clamped.
    #[inline(always)]
    fn derive_metrics(
        &mut self,
        e: &EntitySample,
        spec: Option<&'static GpuSpec>,
        energy_power: Option<f64>,
        cfg: &DeriveConfig,
        diags: &mut Vec<Diagnostic>,
    ) {
        let win = &mut self.window;
        let ctx = WindowContext {
            spec,
            energy_power_watts: energy_power,
            idle_power_watts: self.idle_power,
            throttles: e.throttles,
            activity_from_counters: self.activity_from_counters,
        };
        derive::window_into(&mut win.metrics, &win.readings, &ctx, cfg);
        let metrics = &win.metrics;
        // The busy flag over the seconds the power covers: the energy counter's power spans
        // every window since its last move, a gauge's this window alone.
        let u = metrics.reported_utilization;
        let (span_u, next_span) = match energy_power {
            Some(_) => (u.map(|u| u.max(self.span_util)), 0.0),
            None => (u, self.span_util.max(u.unwrap_or(1.0))),
        };
        self.span_util = next_span;
        self.measured_floor = crate::energy::learn_floor(
            self.measured_floor,
            span_u,
            metrics.power_watts.map(|p| p.value),
        );
        win.idle_floor = IdleFloor::decide(self.measured_floor, spec.map(|s| s.idle_power_watts));
        if let Some(f) = metrics.fidelity {
            self.capability = self.capability.min(f);
        }
        if let (Some(u), Some(p)) = (span_u, metrics.power_watts)
            && u < cfg.inflation_min_util
        {
            self.idle_power = Some(self.idle_power.map_or(p.value, |i: f64| i.min(p.value)));
        }
        if metrics.inflation_gap_points == Some(0.0)
            && let (Some(u), Some(ecf)) = (metrics.reported_utilization, metrics.effective_compute)
            && u < ecf
        {
            diags.push(Diagnostic {
                kind: DiagnosticKind::NegativeGap,
                entity: Some(e.id.clone()),
                field: None,
                detail: format!("reported {u} below effective {ecf}; gap clamped to 0"),
            });
        }
    }

    /// The window's regime after hysteresis over its `seconds` (by counters once the entity
    /// has shown a compute counter, else by the power heuristic), and its verdict.
    #[inline(always)]
    fn classify(
        &mut self,
        e: &EntitySample,
        spec: Option<&'static GpuSpec>,
        seconds: f64,
        cfg: &DeriveConfig,
        verdict_cfg: &VerdictConfig,
    ) {
        let win = &mut self.window;
        let (readings, metrics) = (&win.readings, &win.metrics);
        let inputs = PhaseInputs {
            util: metrics
                .reported_utilization
                .or(readings.value(Field::GrActive)),
            sm_active: readings.value(Field::SmActive),
            compute: derive::compute_term(readings, spec),
            dram: readings.value(Field::DramActive),
            pipe: metrics.busiest_pipe,
            power_proxy: metrics.power_proxy,
            power_capped: e.throttles.is_some_and(|t| t.sw_power_cap),
            tensor: readings.value(Field::TensorActive),
            nvlink_share: causes::nvlink_share(readings, spec.and_then(GpuSpec::interconnect)),
            link_waiting: readings
                .value(Field::NvlinkTxWaitPerSec)
                .is_some_and(|w| w > verdict_cfg.causes.nvlink_tx_wait_per_sec),
            waiting_on_straggler: readings.value(Field::StragglerWaitGap).is_some(),
        };
        let method = if self.capability <= Fidelity::Profiling {
            PhaseMethod::Counters
        } else {
            PhaseMethod::PowerHeuristic
        };
        let phase = self
            .classifier
            .observe_window(&inputs, method, seconds, &cfg.phase);
        win.verdict = verdict::judge(
            &VerdictInputs {
                util: inputs.util,
                saturation: metrics.roofline_saturation,
                tensor: readings.value(Field::TensorActive),
                dram: readings.value(Field::DramActive),
                throttles: e.throttles,
                serving: e.serving.as_ref(),
                readings: Some((readings, spec)),
                health: win.health,
            },
            verdict_cfg,
        );
        win.phase = phase;
        win.phase_method = phase.map(|_| method);
    }

    /// The NVLink transmit wait's rise per second since the counter's previous reading
    /// ([`Field::NvlinkTxWaitPerSec`]); for a source that holds its counters (`held`), since
    /// its last rise, a repeat holding that rise's rate ([`TX_WAIT_HOLD_SECONDS`]); blank for
    /// a first reading, a counter that went back
    /// (reset), a sum of another number of `links` than the last (a new baseline) or a
    /// blank.
    #[inline]
    fn tx_wait_rate(&mut self, taken: Timestamp, held: bool, links: u16) {
        let r = &mut self.window.readings;
        let Some(now) = r.value(Field::NvlinkTxWaitTotal) else {
            return;
        };
        let Some((prev, at, _)) = self.last_tx_wait.filter(|l| l.2 == links) else {
            self.last_tx_wait = Some((now, taken, links));
            self.tx_wait_held = None;
            return;
        };
        let dt = taken.seconds_since(at);
        if held && now == prev {
            // A source that holds its counters between collections (dcgm-exporter) repeats
            // a reading not yet collected again: the last rise's rate holds for up to
            // `TX_WAIT_HOLD_SECONDS` after it, then nothing was waited. Its baseline stays:
            // the next rise is over the time since the last.
            let rate = if dt <= TX_WAIT_HOLD_SECONDS {
                self.tx_wait_held
            } else {
                Some(0.0)
            };
            if let Some(rate) = rate {
                r.set_value(Field::NvlinkTxWaitPerSec, rate);
            }
            return;
        }
        self.tx_wait_held = None;
        if now >= prev && dt > 0.0 {
            let rate = (now - prev)
                / if held {
                    dt.min(TX_WAIT_HOLD_SECONDS)
                } else {
                    dt
                };
            r.set_value(Field::NvlinkTxWaitPerSec, rate);
            self.tx_wait_held = Some(rate);
        }
        self.last_tx_wait = Some((now, taken, links));
    }

    /// How long the entity has done no work, as of `taken`: 0 after a window with work (the
    /// busy flag at `idle_util` or more, effective compute at
    /// [`crate::fleet::IDLE_COMPUTE_BELOW`] or more, or tokens from its serving engine: a
    /// decode server with low effective compute but steady tokens works), the seconds since
    /// the end of its last such window otherwise (since the first sample seen of it, when it
    /// never worked). `None` for a window that measured none of them. Only idle time
    /// observed counts: after a `gap` window, or one that measured none of them, it starts
    /// again at 0 (the GPU may have worked meanwhile).
    #[inline]
    fn idle_since(&mut self, taken: Timestamp, e: &EntitySample, idle_util: f64, gap: bool) {
        let m = &self.window.metrics;
        let busy = m.reported_utilization;
        let ecf = m.effective_compute;
        // Whether either token rate read is above 0 (`None`: neither was read; one unread
        // says nothing).
        let tokens = e.serving.as_ref().and_then(|s| {
            match (s.output_tokens_per_sec, s.prompt_tokens_per_sec) {
                (None, None) => None,
                (o, p) => Some(o.is_some_and(|x| x > 0.0) || p.is_some_and(|x| x > 0.0)),
            }
        });
        if busy.is_none() && ecf.is_none() && tokens.is_none() {
            self.idle_from = taken;
            self.window.idle_seconds = None;
            return;
        }
        let worked = busy.is_some_and(|u| u >= idle_util)
            || ecf.is_some_and(|c| c >= crate::fleet::IDLE_COMPUTE_BELOW)
            || tokens == Some(true);
        if worked || gap {
            self.idle_from = taken;
        }
        self.window.idle_seconds = Some(taken.seconds_since(self.idle_from).max(0.0));
    }

    /// The window's observed ceilings, when tracked (`on`): an observed window feeds the
    /// trackers; a gap, or a window that may be one, breaks their continuity and has none.
    #[inline(always)]
    fn observe_ceilings(
        &mut self,
        taken: Timestamp,
        decision: WindowSpan,
        e: &EntitySample,
        on: bool,
    ) {
        let win = &mut self.window;
        win.ceilings = match decision {
            WindowSpan::Observed(dt) if on => Ceilings {
                roofline_saturation: self.ceiling_saturation.observe(
                    taken,
                    dt,
                    win.metrics.roofline_saturation,
                ),
                output_tokens_per_second: self.ceiling_output_tokens.observe(
                    taken,
                    dt,
                    e.serving
                        .as_ref()
                        .filter(|s| s.absent_reason.is_none())
                        .and_then(|s| s.output_tokens_per_sec),
                ),
            },
            WindowSpan::Gap(dt) | WindowSpan::Waits(Pending::Long(dt) | Pending::Lost(dt))
                if on =>
            {
                self.ceiling_saturation.observe(taken, dt, None);
                self.ceiling_output_tokens.observe(taken, dt, None);
                Ceilings::default()
            }
            _ => Ceilings::default(),
        };
    }

    /// Copy the sample's attributes into the window (not yet integrated: `dt_seconds` 0).
    /// Lists and snapshots are copied only when either side has one, into the window's own
    /// buffers.
    #[inline(always)]
    fn copy_attributes(
        &mut self,
        e: &EntitySample,
        spec: Option<&'static GpuSpec>,
        workload: WorkloadHint,
    ) {
        let win = &mut self.window;
        win.spec = spec;
        win.simulated = e.simulated;
        win.dt_seconds = 0.0;
        win.capability = self.capability;
        win.llm_serving = match workload {
            WorkloadHint::Auto => e.serving.is_some(),
            WorkloadHint::LlmServing => true,
            WorkloadHint::Other => false,
        };
        win.engine_phase = e.serving.as_ref().and_then(engine_phase);
        win.throttles = e.throttles;
        if !(win.processes.is_empty() && e.processes.is_empty()) {
            win.processes.clone_from(&e.processes);
        }
        if win.allocation.is_some() || e.allocation.is_some() {
            win.allocation.clone_from(&e.allocation);
        }
        if !(win.holder_pressure.is_empty() && e.holder_pressure.is_empty()) {
            win.holder_pressure.clone_from(&e.holder_pressure);
        }
        win.truth_phase = e.truth_phase;
        win.truth_workload = e.truth_workload;
        win.truth_effective_compute = e.truth_effective_compute;
        if win.serving.is_some() || e.serving.is_some() {
            win.serving.clone_from(&e.serving);
        }
    }

    /// Settle the window as `decision` says: integrated over its length when observed; a
    /// gap over `k` × the source's `update_interval`, not observed and diagnosed; else it
    /// waits for the entity's next sample. Returns the seconds integrated now.
    #[inline(always)]
    fn settle(
        &mut self,
        decision: WindowSpan,
        update_interval: Option<f64>,
        k: f64,
        diags: &mut Vec<Diagnostic>,
    ) -> f64 {
        match decision {
            WindowSpan::Observed(dt) => {
                self.integrate(dt);
                self.last_window_seconds = Some(dt);
                dt
            }
            WindowSpan::Gap(dt) => {
                let u = update_interval.unwrap_or(dt);
                self.unobserved(
                    dt,
                    diags,
                    format!(
                        "{dt} s since the previous sample, over {k} × the {u} s update interval: not observed"
                    ),
                );
                0.0
            }
            WindowSpan::Waits(why) => {
                self.pending = why;
                0.0
            }
        }
    }
}

/// What the serving engine's own token rates say the window was: prompt tokens only is
/// compute-bound (prefill), output tokens only is memory-bound (decode), both is mixed,
/// neither with nothing running is idle. `None` when the rates do not say.
fn engine_phase(sv: &ServingSnapshot) -> Option<Phase> {
    if sv.absent_reason.is_some() {
        return None;
    }
    let (p, o) = (sv.prompt_tokens_per_sec?, sv.output_tokens_per_sec?);
    match (p > 0.0, o > 0.0) {
        (true, false) => Some(Phase::ComputeBound),
        (false, true) => Some(Phase::MemoryBound),
        (true, true) => Some(Phase::Mixed),
        (false, false) => (sv.running_requests == Some(0.0)).then_some(Phase::Idle),
    }
}

/// Add window `w` of `dt` seconds to the entity's integrals, which it carries: they are the
/// previous window's plus its own. Energy is the entity's ([`EntityState::integrate`]).
#[inline(always)]
fn integrate(w: &mut EntityWindow, dt: f64) {
    let t = &mut w.totals;
    let m = &w.metrics;
    t.windows += 1;
    t.observed_seconds += dt;
    if let Some(u) = m.reported_utilization {
        t.busy_seconds += u * dt;
        t.busy_observed_seconds += dt;
    }
    if let Some(ecf) = m.effective_compute {
        t.effective_compute_seconds += ecf * dt;
        t.effective_compute_observed_seconds += dt;
    }
    match (w.phase, w.phase_method) {
        (Some(p), Some(method)) => t.phase_seconds[method.index()][p.index()] += dt,
        _ => t.unclassified_seconds += dt,
    }
    if let (Some(counter), Some(engine), Some(PhaseMethod::Counters)) =
        (w.phase, w.engine_phase, w.phase_method)
    {
        t.phase_compared_seconds += dt;
        if counter == engine {
            t.phase_agreed_seconds += dt;
        }
    }
    t.verdict_seconds[w.verdict.verdict.index()] += dt;
    if let Some(finding) = w.verdict.cause() {
        t.starved_cause_seconds[finding.cause.index()] += dt;
    }
    if !w.verdict.missing.profiling {
        t.saturation_observed_seconds += dt;
        if !w.verdict.missing.busy_flag && w.verdict.verdict != verdict::Verdict::Unavailable {
            t.starved_judged_seconds += dt;
        }
    }
    if w.health.is_some() {
        t.health_observed_seconds += dt;
    }
    // The simulator's truth is a fraction; a trace may carry anything, and what is not a
    // fraction is not integrated (an integral must stay finite).
    if let Some(truth) = w
        .truth_effective_compute
        .filter(|v| v.is_finite() && (0.0..=1.5).contains(v))
    {
        *t.truth_effective_compute_seconds.get_or_insert(0.0) += truth * dt;
    }
    w.dt_seconds = dt;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{PodRef, Readings};

    /// A sample of one H100 (gpu 0) at `ms` with these readings.
    pub(crate) fn sample(ms: i64, pairs: &[(Field, f64)]) -> Sample {
        let mut r = Readings::default();
        for &(f, v) in pairs {
            r.set_value(f, v);
        }
        Sample {
            taken: Timestamp(ms),
            entities: vec![EntitySample {
                id: EntityId {
                    gpu: Some(0),
                    model: Some("NVIDIA H100 80GB HBM3".into()),
                    ..Default::default()
                },
                readings: r,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn a_slot_index_is_kept_while_its_epoch_stands() {
        let slot = |index, epoch| Slot {
            index,
            epoch,
            id_changed: false,
        };
        let mut by = SlotIndex::default();
        assert_eq!(*by.entry(slot(3, 0)), None);
        *by.entry(slot(3, 0)) = Some(7);
        *by.entry(slot(0, 0)) = Some(2);
        assert_eq!(
            (*by.entry(slot(3, 0)), *by.entry(slot(0, 0))),
            (Some(7), Some(2))
        );
        // The slots moved: nothing kept holds.
        assert_eq!(*by.entry(slot(0, 1)), None);
        assert_eq!(*by.entry(slot(3, 1)), None);
    }

    #[test]
    fn each_slot_stays_its_entitys_until_the_epoch_moves() {
        // Two GPUs, listed in one order and then the other; then GPU 0 forgotten.
        let two = |ms, order: [u32; 2]| {
            let mut s = sample(ms, &[(Field::TensorActive, 0.5)]);
            let e = s.entities.remove(0);
            s.entities = order
                .iter()
                .map(|&g| {
                    let mut e = e.clone();
                    e.id.gpu = Some(g);
                    e
                })
                .collect();
            s
        };
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let seen = |d: &mut Deriver, s: &Sample| {
            let (mut slots, mut windows) = (Vec::new(), Vec::new());
            d.observe_each_slot(s, &mut Vec::new(), |slot, w| {
                slots.push((w.id.gpu, slot.index, slot.epoch, slot.id_changed));
                windows.push(w.clone());
            });
            (slots, windows)
        };
        // The same windows as `observe` hands, from a deriver fed the same samples.
        let mut twin = Deriver::new(DeriveConfig::default(), Some(1.0));
        for (ms, order) in [(1000, [0, 1]), (2000, [1, 0]), (3000, [0, 1])] {
            let s = two(ms, order);
            let (slots, windows) = seen(&mut d, &s);
            assert_eq!(windows, twin.observe(&s).windows);
            let first = ms == 1000;
            let want: Vec<_> = order
                .iter()
                .map(|&g| (Some(g), g as usize, 0, first))
                .collect();
            assert_eq!(slots, want, "at {ms} ms");
        }
        let zero = two(0, [0, 1]).entities[0].id.key();
        d.forget(&zero);
        let (slots, _) = seen(&mut d, &two(4000, [1, 0]));
        // GPU 1 moved into the freed slot 0, and the epoch says so; GPU 0 is new again.
        assert_eq!(slots, vec![(Some(1), 0, 1, false), (Some(0), 1, 1, true)]);
    }

    #[test]
    fn integrals_are_exact() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let f_ref = gpus::by_key("h100-sxm").unwrap().f_ref_mhz;
        let busy = [
            (Field::ReportedUtil, 1.0),
            (Field::TensorActive, 0.5),
            (Field::DramActive, 0.1),
            (Field::SmClockMhz, f_ref),
        ];
        d.observe(&sample(1000, &busy));
        d.observe(&sample(2000, &busy));
        let out = d.observe(&sample(
            2500,
            &[
                (Field::ReportedUtil, 0.5),
                (Field::TensorActive, 0.0),
                (Field::DramActive, 0.0),
            ],
        ));
        let t = out.windows[0].totals;
        assert_eq!(t.observed_seconds, 2.5);
        assert!((t.busy_seconds - 2.25).abs() < 1e-12);
        assert!((t.effective_compute_seconds - 1.0).abs() < 1e-12);
        assert!((t.phase_seconds.iter().flatten().sum::<f64>() - 2.5).abs() < 1e-12);
    }

    #[test]
    fn energy_counter_gives_power_and_resets_are_diagnosed() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        d.observe(&sample(1000, &[(Field::EnergyJoules, 1000.0)]));
        let out = d.observe(&sample(
            2000,
            &[(Field::EnergyJoules, 1300.0), (Field::PowerWatts, 250.0)],
        ));
        let p = out.windows[0].metrics.power_watts.unwrap();
        assert_eq!(p.value, 300.0);
        assert_eq!(out.windows[0].totals.energy_joules, 300.0 + 0.0);
        let out = d.observe(&sample(
            3000,
            &[(Field::EnergyJoules, 5.0), (Field::PowerWatts, 250.0)],
        ));
        assert_eq!(out.diagnostics[0].kind, DiagnosticKind::CounterReset);
        assert_eq!(out.windows[0].metrics.power_watts.unwrap().value, 250.0);
    }

    /// A counter read later than its sample's time (a slow call before it in the tick): its
    /// delta is divided by the time between its own reads. By hand: a board drawing 250 W
    /// read at 1 000, 2 040, 3 000 and 4 040 ms (ticks at whole seconds) counts 260, 240
    /// and 260 J over 1.04, 0.96 and 1.04 s: 250 W each, where the ticks' seconds would
    /// give 260, 240 and 260 W.
    #[test]
    fn the_energy_counter_is_divided_by_its_own_read_times() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut total = 0.0;
        for (k, read_ms) in [1000, 2040, 3000, 4040].into_iter().enumerate() {
            let mut s = sample(
                1000 * (k as i64 + 1),
                &[(Field::EnergyJoules, 5000.0 + 0.25 * read_ms as f64)],
            );
            s.entities[0].energy_read_at = Some(Timestamp(read_ms));
            let out = d.observe(&s);
            if k > 0 {
                let p = out.windows[0].metrics.power_watts.unwrap();
                assert!((p.value - 250.0).abs() < 1e-9, "window {k}: {p:?}");
                total = out.windows[0].totals.energy_joules;
            }
        }
        assert!((total - 760.0).abs() < 1e-9, "{total}");
    }

    /// An energy counter that stops being read: the windows after its last move wait for
    /// its next one, and count from the power gauge once it has been gone for
    /// [`ENERGY_SPAN_MAX_SECONDS`]; no window of a GPU whose gauge reads 300 W throughout is
    /// left out of the energy, or counted twice.
    #[test]
    fn windows_after_a_counter_that_is_gone_count_from_the_gauge() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut out = Derivation::default();
        for k in 1..=400 {
            let mut r = vec![(Field::PowerWatts, 300.0)];
            if k <= 2 {
                r.push((Field::EnergyJoules, 1000.0 + 300.0 * (k - 1) as f64));
            }
            out = d.observe(&sample(1000 * k, &r));
        }
        let t = out.windows[0].totals;
        assert_eq!(
            (t.observed_seconds, t.energy_observed_seconds),
            (400.0, 400.0)
        );
        assert!(
            (t.energy_joules - 300.0 * 400.0).abs() < 1e-6,
            "{}",
            t.energy_joules
        );
    }

    /// An energy counter's move that no board can draw (1e9 J in 1 s on an H100 SXM, whose
    /// bound is 2 × 700 W) is counted as out of range, never integrated: that second counts
    /// from the 300 W gauge, and the counter counts again from the reading after it.
    #[test]
    fn an_impossible_energy_move_is_counted_not_integrated() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut out = Derivation::default();
        let mut diags = Vec::new();
        for (ms, joules) in [
            (1000, 1000.0),
            (2000, 1300.0),
            (3000, 1e9),
            (4000, 1e9 + 300.0),
        ] {
            let mut s = sample(
                ms,
                &[(Field::EnergyJoules, joules), (Field::PowerWatts, 300.0)],
            );
            s.entities[0].id.model = Some("NVIDIA H100 80GB HBM3".into());
            out = d.observe(&s);
            diags.extend(out.diagnostics.iter().map(|d| (ms, d.kind, d.field)));
        }
        assert_eq!(
            diags,
            vec![(3000, DiagnosticKind::OutOfRange, Some(Field::EnergyJoules))]
        );
        // Four windows of 300 J each: the first (its declared second) and the third from the
        // gauge, the second and the fourth from the counter.
        let t = out.windows[0].totals;
        assert_eq!((t.energy_joules, t.energy_observed_seconds), (1200.0, 4.0));
        // 1 e9 − 1 300 J in a second is over 1 400 W on no board; 1 000 J is under the
        // bound of a model the catalog does not know (2 000 W).
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let unknown = |ms, joules| {
            let mut s = sample(ms, &[(Field::EnergyJoules, joules)]);
            s.entities[0].id.model = None;
            s
        };
        d.observe(&unknown(1000, 0.0));
        let out = d.observe(&unknown(2000, 1000.0));
        assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
        assert_eq!(out.windows[0].metrics.power_watts.unwrap().value, 1000.0);
    }

    #[test]
    fn impossible_power_adds_no_energy() {
        for model in [Some("NVIDIA H100 80GB HBM3"), None] {
            let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
            let mut out = Derivation::default();
            for ms in [1000, 2000, 3000] {
                let mut s = sample(ms, &[(Field::PowerWatts, 4_294_967_294.0)]);
                s.entities[0].id.model = model.map(Into::into);
                out = d.observe(&s);
                assert!(
                    out.diagnostics
                        .iter()
                        .any(|d| d.kind == DiagnosticKind::OutOfRange
                            && d.field == Some(Field::PowerWatts)),
                    "{:?}",
                    out.diagnostics
                );
            }
            let w = &out.windows[0];
            assert_eq!(
                w.readings.get(Field::PowerWatts),
                crate::model::Reading::Blank
            );
            assert_eq!(w.metrics.power_watts, None);
            assert_eq!(w.totals.energy_joules, 0.0);
        }
    }

    #[test]
    fn time_going_backwards_and_gaps_are_diagnosed() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        d.observe(&sample(1000, &[(Field::ReportedUtil, 1.0)]));
        let out = d.observe(&sample(1000, &[(Field::ReportedUtil, 1.0)]));
        assert_eq!(out.diagnostics[0].kind, DiagnosticKind::NonIncreasingTime);
        assert!(out.windows.is_empty());
        let out = d.observe(&sample(60_000, &[(Field::ReportedUtil, 1.0)]));
        assert_eq!(out.diagnostics[0].kind, DiagnosticKind::Gap);
        // The gap is not observed: only the first window (the declared 1 s) counts, and the
        // 59 s are counted apart; no integral grows for them.
        let t = out.windows[0].totals;
        assert_eq!(t.observed_seconds, 1.0);
        assert_eq!(t.busy_seconds, 1.0);
        assert_eq!(t.unobserved_seconds, 59.0);
        assert_eq!(out.windows[0].dt_seconds, 0.0);
    }

    #[test]
    fn interval_is_learned_when_not_given() {
        let mut d = Deriver::new(DeriveConfig::default(), None);
        let r = [(Field::ReportedUtil, 1.0)];
        d.observe(&sample(0, &r));
        let out = d.observe(&sample(250, &r));
        assert_eq!(out.windows[0].totals.observed_seconds, 0.5);
        assert_eq!(out.windows[0].totals.busy_seconds, 0.5);
    }

    /// A line lost before a long spacing (over 5 cadences), in a source that declares no
    /// interval: the window after it is the cadence (1 s) and the rest is not observed,
    /// where it waited as a change of cadence and was then read as a 7 s gap, the sample's
    /// own second with it.
    #[test]
    fn a_long_window_after_a_lost_line_is_its_cadence() {
        let mut d = Deriver::new(DeriveConfig::default(), None);
        let r = [(Field::ReportedUtil, 1.0)];
        for ms in [0, 1000, 2000] {
            d.observe(&sample(ms, &r));
        }
        d.line_lost();
        let t = d.observe(&sample(9000, &r)).windows[0].totals;
        // The first window (1 s, once the next spacing told it), 1 s, 1 s, then 1 s.
        assert_eq!((t.observed_seconds, t.unobserved_seconds), (4.0, 6.0));
        assert_eq!(t.busy_seconds, 4.0);
        let t = d.observe(&sample(10_000, &r)).windows[0].totals;
        assert_eq!((t.observed_seconds, t.unobserved_seconds), (5.0, 6.0));
    }

    /// A power draw of 0 W is no reading: an idle H100 drawing 80 W a second, with one
    /// reading of 0 W among them, keeps its measured idle floor at 80 W (it was 0 W, and
    /// every later window's energy was then all active) and its energy over the 3 s it was
    /// measured, 240 J (the 0 W second was 0 J of 4 s).
    #[test]
    fn a_power_draw_of_zero_is_no_reading() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut last = None;
        for (ms, watts) in [(1000, 80.0), (2000, 0.0), (3000, 80.0), (4000, 80.0)] {
            let out = d.observe(&sample(
                ms,
                &[(Field::ReportedUtil, 0.0), (Field::PowerWatts, watts)],
            ));
            last = Some(out.windows[0].clone());
        }
        let w = last.unwrap();
        assert_eq!(w.idle_floor.map(|f| f.watts), Some(80.0));
        assert_eq!(w.totals.energy_joules, 240.0);
        assert_eq!(w.totals.energy_observed_seconds, 3.0);
    }

    /// A window waiting after a lost line (no cadence known yet) is the previous window of
    /// the spacing after it: 98 s after a 2 s window is a gap, not 98 s observed; and the
    /// waiting window, followed by a gap, learns no cadence: its 2 s are not observed. Only
    /// the last second (101 s) is observed, 100 s not.
    #[test]
    fn a_gap_after_a_window_waiting_on_a_lost_line_is_a_gap() {
        let mut d = Deriver::new(DeriveConfig::default(), None);
        let r = [(Field::ReportedUtil, 1.0)];
        d.observe(&sample(0, &r));
        d.line_lost();
        for ms in [2000, 100_000] {
            d.observe(&sample(ms, &r));
        }
        let t = d.observe(&sample(101_000, &r)).windows[0].totals;
        assert_eq!((t.observed_seconds, t.unobserved_seconds), (1.0, 100.0));
        assert_eq!(t.busy_seconds, 1.0);
    }

    /// Every other line lost (no cadence known): each window after a lost line is resolved
    /// by a spacing that spans a lost line too, so none is observed; the lost seconds are
    /// never read as the samples' own.
    #[test]
    fn every_other_line_lost_observes_nothing() {
        let mut d = Deriver::new(DeriveConfig::default(), None);
        let r = [(Field::ReportedUtil, 1.0)];
        let mut t = Default::default();
        for ms in [0, 2000, 4000, 6000] {
            t = d.observe(&sample(ms, &r)).windows[0].totals;
            d.line_lost();
        }
        assert_eq!(t.observed_seconds, 0.0);
        assert_eq!(t.busy_seconds, 0.0);
        assert_eq!(t.unobserved_seconds, 4.0);
    }

    #[test]
    fn unknown_model_is_diagnosed_once() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut s = sample(0, &[(Field::ReportedUtil, 1.0)]);
        s.entities[0].id.model = Some("NVIDIA RTX 4000 Ada Generation".into());
        let out = d.observe(&s);
        assert_eq!(out.diagnostics[0].kind, DiagnosticKind::UnknownModel);
        s.taken = Timestamp(1000);
        assert!(d.observe(&s).diagnostics.is_empty());
    }

    /// The NVLink transmit wait summed over another set of links (dcgm-exporter leaves a
    /// blank link's series out of a scrape) is a new baseline, no move: without it, the
    /// partial sum read as a reset, and the next whole sum as one window's rise of the
    /// missing link's whole count since boot (5e9 a second here).
    #[test]
    fn a_transmit_wait_over_another_set_of_links_is_a_new_baseline() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut rate = |t: i64, total: f64, links: u16| {
            let mut s = sample(t, &[(Field::NvlinkTxWaitTotal, total)]);
            s.entities[0].nvlink_wait_links = links;
            d.observe(&s).windows[0]
                .readings
                .value(Field::NvlinkTxWaitPerSec)
        };
        let whole = 5.0e9 + 10_000.0;
        assert_eq!(rate(0, whole, 3), None);
        assert_eq!(rate(1000, whole + 3000.0, 3), Some(3000.0));
        // Link 0 (5e9) left out of this scrape.
        assert_eq!(rate(2000, 16_000.0, 2), None);
        assert_eq!(rate(3000, whole + 9000.0, 3), None);
        assert_eq!(rate(4000, whole + 12_000.0, 3), Some(3000.0));
    }

    /// Idle seconds count only idle time observed: a window that measured nothing, or a
    /// gap, starts them again at 0 (the GPU may have worked meanwhile).
    #[test]
    fn idle_seconds_count_only_idle_time_observed() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut idle =
            |t: i64, r: &[(Field, f64)]| d.observe(&sample(t, r)).windows[0].idle_seconds;
        let (busy, idle_flag) = ([(Field::ReportedUtil, 1.0)], [(Field::ReportedUtil, 0.0)]);
        assert_eq!(idle(0, &busy), Some(0.0));
        for t in 1..=4 {
            assert_eq!(idle(t * 1000, &idle_flag), Some(t as f64));
        }
        // Nothing measured: no idle seconds, and the run starts again after it.
        assert_eq!(idle(5000, &[(Field::PowerWatts, 80.0)]), None);
        assert_eq!(idle(6000, &idle_flag), Some(1.0));
        assert_eq!(idle(7000, &idle_flag), Some(2.0));
        // A gap of 93 s (more than the gap limit): idle from the reading after it.
        assert_eq!(idle(100_000, &idle_flag), Some(0.0));
        assert_eq!(idle(101_000, &idle_flag), Some(1.0));
    }

    /// The seconds that could be judged starved (roofline saturation measured) and
    /// unavailable (health read) are counted apart: without them, a GPU's 0 starved or
    /// unavailable seconds would read as "never", where it could not be told.
    #[test]
    fn seconds_that_could_be_judged_starved_or_unavailable_are_counted() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let busy_only = [(Field::ReportedUtil, 1.0)];
        let profiled = [
            (Field::ReportedUtil, 1.0),
            (Field::TensorActive, 0.02),
            (Field::DramActive, 0.05),
            (Field::SmClockMhz, 1980.0),
        ];
        let health = [(Field::ReportedUtil, 1.0), (Field::XidLast, 0.0)];
        let mut totals = |t: i64, r: &[(Field, f64)]| {
            let w = &d.observe(&sample(t, r)).windows[0];
            let t = &w.totals;
            (t.saturation_observed_seconds, t.health_observed_seconds)
        };
        assert_eq!(totals(0, &busy_only), (0.0, 0.0));
        assert_eq!(totals(1000, &busy_only), (0.0, 0.0));
        assert_eq!(totals(2000, &profiled), (1.0, 0.0));
        assert_eq!(totals(3000, &health), (1.0, 1.0));
        assert_eq!(totals(4000, &busy_only), (1.0, 1.0));
    }

    /// A second with roofline saturation but no busy flag (a MIG instance, a capture without
    /// GPU utilization), or judged unavailable, can never be judged starved: it counts in
    /// the saturation's seconds, not in those that could be judged starved, so the starved
    /// share of 10 starved seconds beside 10 such seconds is 1, not 0.5.
    #[test]
    fn only_seconds_that_could_be_starved_are_judged() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let starved = [
            (Field::ReportedUtil, 1.0),
            (Field::TensorActive, 0.02),
            (Field::DramActive, 0.02),
            (Field::SmClockMhz, 1980.0),
        ];
        let no_flag = [
            (Field::TensorActive, 0.02),
            (Field::DramActive, 0.02),
            (Field::SmClockMhz, 1980.0),
        ];
        let unavailable = [
            (Field::ReportedUtil, 1.0),
            (Field::TensorActive, 0.02),
            (Field::DramActive, 0.02),
            (Field::SmClockMhz, 1980.0),
            (Field::RowRemapPending, 1.0),
        ];
        let mut last = Totals::default();
        for k in 0..=30 {
            let r: &[(Field, f64)] = match k {
                0..=10 => &starved,
                11..=20 => &no_flag,
                _ => &unavailable,
            };
            last = d.observe(&sample(k * 1000, r)).windows[0].totals;
        }
        let starved_index = crate::verdict::Verdict::Starved.index();
        assert_eq!(last.verdict_seconds[starved_index], 11.0);
        assert_eq!(last.saturation_observed_seconds, 31.0);
        assert_eq!(last.starved_judged_seconds, 11.0);
    }

    #[test]
    fn health_rises_are_taken_between_windows_and_a_fatal_xid_drops_profiling() {
        use crate::health::{Health, HealthReason};
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let health = |d: &mut Deriver, t: i64, r: &[(Field, f64)]| {
            let out = d.observe(&sample(t, r));
            (out.windows[0].health.map(|h| h.health), out)
        };
        let base = [(Field::ReportedUtil, 1.0), (Field::TensorActive, 0.5)];
        let with = |sbe: f64| [base[0], base[1], (Field::EccSbeVolatile, sbe)];
        // The first reading has nothing to rise from: ok, nothing rose in the window.
        assert_eq!(health(&mut d, 0, &with(3.0)).0, Some(Health::Ok));
        assert_eq!(health(&mut d, 1000, &with(3.0)).0, Some(Health::Ok));
        assert_eq!(health(&mut d, 2000, &with(5.0)).0, Some(Health::Degraded));
        // A blank keeps the last reading: the next rise is taken from it.
        assert_eq!(health(&mut d, 3000, &base).0, None);
        assert_eq!(health(&mut d, 4000, &with(5.0)).0, Some(Health::Ok));
        // A drop (a driver reload) is no rise.
        assert_eq!(health(&mut d, 5000, &with(0.0)).0, Some(Health::Ok));
        // A fatal XID: unavailable, the tensor reading dropped and counted.
        let xid = [base[0], base[1], (Field::XidLast, 79.0)];
        let (h, out) = health(&mut d, 6000, &xid);
        assert_eq!(h, Some(Health::Unavailable));
        let w = &out.windows[0];
        assert_eq!(
            w.health.map(|h| h.reason),
            Some(HealthReason::FatalXid(79, "GPU has fallen off the bus"))
        );
        assert_eq!(w.verdict.verdict, crate::verdict::Verdict::Unavailable);
        assert_eq!(w.readings.value(Field::TensorActive), None);
        assert_eq!(w.metrics.effective_compute, None);
        assert!(
            out.diagnostics
                .iter()
                .any(|g| g.kind == DiagnosticKind::UntrustedAfterXid
                    && g.field == Some(Field::TensorActive))
        );
        assert!(w.totals.verdict_seconds[crate::verdict::Verdict::Unavailable.index()] > 0.0);
    }

    /// A lifetime double-bit ECC count that goes back is no reading (it survives driver
    /// reloads): 3 then 0 had served `ecc_aggregate_errors_total` falling 3 → 0 → 3 with
    /// nothing counted. A volatile count or a violation time that goes back is a reload,
    /// served as read and now counted as a reset.
    #[test]
    fn a_lifetime_count_that_goes_back_is_blank_and_resets_are_counted() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let at = |dbe: f64, sbe: f64, power_ns: f64| {
            [
                (Field::ReportedUtil, 1.0),
                (Field::EccDbeAggregate, dbe),
                (Field::EccSbeVolatile, sbe),
                (Field::PowerViolationNs, power_ns),
            ]
        };
        let kinds = |out: &Derivation| -> Vec<(DiagnosticKind, Option<Field>)> {
            out.diagnostics.iter().map(|g| (g.kind, g.field)).collect()
        };
        let out = d.observe(&sample(0, &at(3.0, 5.0, 1e6)));
        assert_eq!(
            out.windows[0].readings.value(Field::EccDbeAggregate),
            Some(3.0)
        );
        assert_eq!(kinds(&out), []);
        let out = d.observe(&sample(1000, &at(0.0, 2.0, 0.0)));
        assert_eq!(out.windows[0].readings.value(Field::EccDbeAggregate), None);
        assert_eq!(
            out.windows[0].readings.value(Field::EccSbeVolatile),
            Some(2.0)
        );
        assert_eq!(
            kinds(&out),
            [
                (DiagnosticKind::OutOfRange, Some(Field::EccDbeAggregate)),
                (DiagnosticKind::CounterReset, None),
                (DiagnosticKind::CounterReset, None),
            ]
        );
        assert_eq!(
            out.diagnostics[0].detail,
            "0 after 3: a lifetime count never goes back; not read"
        );
        assert_eq!(
            out.diagnostics[1].detail,
            "the single-bit ECC count went back from 5 to 2: counted again from there"
        );
        // Read again at the highest count, and above it: read, nothing counted.
        for (t, dbe) in [(2000, 3.0), (3000, 4.0)] {
            let out = d.observe(&sample(t, &at(dbe, 2.0, 0.0)));
            assert_eq!(
                out.windows[0].readings.value(Field::EccDbeAggregate),
                Some(dbe)
            );
            assert_eq!(kinds(&out), []);
        }
    }

    #[test]
    fn violation_time_degrades_a_window_from_its_share_of_the_time_since_the_last_reading() {
        use crate::health::Health;
        let mut d = Deriver::new(DeriveConfig::default(), Some(10.0));
        let health = |d: &mut Deriver, t: i64, r: &[(Field, f64)]| {
            d.observe(&sample(t, r)).windows[0].health.map(|h| h.health)
        };
        let at = |power: f64, thermal: f64| {
            [
                (Field::ReportedUtil, 1.0),
                (Field::PowerViolationNs, power),
                (Field::ThermalViolationNs, thermal),
            ]
        };
        assert_eq!(health(&mut d, 0, &at(0.0, 0.0)), Some(Health::Ok));
        // 1 ms held down in 10 s (0.0001 of it): ok.
        assert_eq!(health(&mut d, 10_000, &at(1e6, 0.0)), Some(Health::Ok));
        // 0.3 s power + 0.3 s thermal in 10 s: 0.06, over the default 0.05: degraded.
        assert_eq!(
            health(&mut d, 20_000, &at(3.01e8, 3e8)),
            Some(Health::Degraded)
        );
        // A blank window, then 0.8 s more over the 20 s since the last reading: 0.04, ok.
        let blank = [(Field::ReportedUtil, 1.0)];
        assert_eq!(health(&mut d, 30_000, &blank), None);
        assert_eq!(health(&mut d, 40_000, &at(1.101e9, 3e8)), Some(Health::Ok));
        // Only the clock-event reasons read (a DCGM 4.x capture without 240/241): 0.7 s of
        // hardware slowdown in 10 s is degraded, 9 s of sync boost is not a cap.
        let mut d = Deriver::new(DeriveConfig::default(), Some(10.0));
        let events = |hw: f64, sync: f64| {
            [
                (Field::ReportedUtil, 1.0),
                (Field::ClockEventHwThermalNs, hw),
                (Field::ClockEventSyncBoostNs, sync),
            ]
        };
        assert_eq!(health(&mut d, 0, &events(0.0, 0.0)), Some(Health::Ok));
        assert_eq!(health(&mut d, 10_000, &events(0.0, 9e9)), Some(Health::Ok));
        assert_eq!(
            health(&mut d, 20_000, &events(7e8, 9e9)),
            Some(Health::Degraded)
        );
        // A field that drops out of the sum and comes back is no rise: power 1e12 ns and
        // thermal 3e12 ns, the thermal time unread for a window, then both again 1 ms and
        // 1 ms on. The sum of the same fields rose 2e6 ns in 20 s: ok, not 3e12 ns.
        let mut d = Deriver::new(DeriveConfig::default(), Some(10.0));
        assert_eq!(health(&mut d, 0, &at(1e12, 3e12)), Some(Health::Ok));
        let power_only = [
            (Field::ReportedUtil, 1.0),
            (Field::PowerViolationNs, 1e12 + 5e5),
        ];
        assert_eq!(health(&mut d, 10_000, &power_only), Some(Health::Ok));
        assert_eq!(
            health(&mut d, 20_000, &at(1e12 + 1e6, 3e12 + 1e6)),
            Some(Health::Ok)
        );
    }

    /// Feed `values` as consecutive 1 s windows ending at `start + 1`, `start + 2`, … s.
    fn feed(c: &mut CeilingTracker, start: i64, values: &[Option<f64>]) -> Vec<Option<Ceiling>> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| c.observe(Timestamp((start + i as i64 + 1) * 1000), 1.0, *v))
            .collect()
    }

    fn close(a: Option<Ceiling>, value: f64, age: f64) {
        let a = a.expect("a ceiling");
        assert!((a.value - value).abs() < 1e-12, "{a:?} vs {value}");
        assert!((a.age_seconds - age).abs() < 1e-9, "{a:?} vs age {age}");
    }

    #[test]
    fn ceiling_needs_a_full_sustained_minute_then_keeps_the_best() {
        let mut c = CeilingTracker::new(3600.0, 60.0);
        let out = feed(&mut c, 0, &[Some(0.5); 59]);
        assert!(out.iter().all(Option::is_none), "59 s is not sustained");
        close(feed(&mut c, 59, &[Some(0.5)])[0], 0.5, 0.0);
        // 30 s at 0.8: the best minute is [30, 90] = (30·0.5 + 30·0.8) / 60 = 0.65.
        let out = feed(&mut c, 60, &[Some(0.8); 30]);
        close(out[29], 0.65, 0.0);
        // It drops to 0.2: the ceiling stays, getting older.
        let out = feed(&mut c, 90, &[Some(0.2); 60]);
        close(out[0], 0.65, 1.0);
        close(out[59], 0.65, 60.0);
    }

    #[test]
    fn ceiling_forgets_beyond_the_horizon() {
        let mut c = CeilingTracker::new(100.0, 60.0);
        feed(&mut c, 0, &[Some(0.5); 60]);
        feed(&mut c, 60, &[Some(0.8); 30]);
        let out = feed(&mut c, 90, &[Some(0.2); 101]);
        // At t = 190 the 0.65 minute (ending at 90) is exactly 100 s old: still kept.
        close(out[99], 0.65, 100.0);
        // At t = 191 it is gone; the next best is the minute ending at 91:
        // (29·0.5 + 30·0.8 + 1·0.2) / 60 = 0.645.
        close(out[100], 0.645, 100.0);
    }

    #[test]
    fn ceiling_needs_continuous_windows() {
        let mut c = CeilingTracker::new(3600.0, 60.0);
        feed(&mut c, 0, &[Some(0.5); 59]);
        // Not measured for one window: the minute starts over.
        assert_eq!(feed(&mut c, 59, &[None]), [None]);
        let out = feed(&mut c, 60, &[Some(0.4); 60]);
        assert!(out[..59].iter().all(Option::is_none));
        close(out[59], 0.4, 0.0);
        // A 10 s hole in time (a window of 1 s ending 10 s later) breaks it too.
        let mut c = CeilingTracker::new(3600.0, 60.0);
        feed(&mut c, 0, &[Some(0.5); 30]);
        // Windows end at 41 … 100 s: the minute (40, 100] is covered only at the 60th.
        let out = feed(&mut c, 40, &[Some(0.5); 60]);
        assert!(out[..59].iter().all(Option::is_none), "{out:?}");
        close(out[59], 0.5, 0.0);
        // A partly covered window is weighted by its overlap: 7 s windows ending at 7, 14,
        // …, 63 s; the minute (3, 63] holds 4 s of the first (at 1.0), the rest at 0.
        let mut c = CeilingTracker::new(3600.0, 60.0);
        let mut last = None;
        for i in 1..=9 {
            let v = if i == 1 { 1.0 } else { 0.0 };
            last = c.observe(Timestamp(i * 7000), 7.0, Some(v));
        }
        close(last, 4.0 / 60.0, 0.0);
    }

    /// The ceilings by brute force: every window since continuity last broke is kept, and
    /// at each window the average of every span is recomputed from scratch.
    #[derive(Default)]
    struct BruteCeiling {
        windows: Vec<(Timestamp, f64, f64)>,
        /// Every sustained average so far: (end of its span, value).
        spans: Vec<(Timestamp, f64)>,
    }

    impl BruteCeiling {
        fn observe(
            &mut self,
            end: Timestamp,
            seconds: f64,
            value: Option<f64>,
            horizon: f64,
            sustain: f64,
        ) -> Option<Ceiling> {
            match value {
                Some(v) => self.windows.push((end, seconds, v)),
                None => self.windows.clear(),
            }
            let (mut covered, mut sum) = (0.0, 0.0);
            for &(e, dt, v) in &self.windows {
                let part = dt.min(sustain - end.seconds_since(e)).max(0.0);
                covered += part;
                sum += v * part;
            }
            if covered >= sustain * (1.0 - 1e-9) {
                self.spans.push((end, sum / covered));
            }
            // The best in the horizon; of equal ones, the latest.
            self.spans
                .iter()
                .filter(|(t, _)| end.seconds_since(*t) <= horizon)
                .fold(None, |best: Option<(Timestamp, f64)>, &(t, v)| match best {
                    Some((_, b)) if b > v => best,
                    _ => Some((t, v)),
                })
                .map(|(t, v)| Ceiling {
                    value: v,
                    age_seconds: end.seconds_since(t),
                })
        }
    }

    /// The tracker as it was before its sums: the running mean over the span, walked at
    /// every window.
    struct WalkingCeiling {
        recent: VecDeque<(Timestamp, f64, f64)>,
        best: VecDeque<(Timestamp, f64)>,
    }

    impl WalkingCeiling {
        fn observe(
            &mut self,
            end: Timestamp,
            seconds: f64,
            value: Option<f64>,
            horizon: f64,
            sustain: f64,
        ) -> Option<Ceiling> {
            match value {
                Some(v) => self.recent.push_back((end, seconds, v)),
                None => self.recent.clear(),
            }
            while self
                .recent
                .front()
                .is_some_and(|(e, _, _)| end.seconds_since(*e) >= sustain)
            {
                self.recent.pop_front();
            }
            let (covered, avg) = naive_mean(&self.recent, end, sustain);
            if covered >= sustain * (1.0 - 1e-9) {
                while self.best.back().is_some_and(|(_, b)| *b <= avg) {
                    self.best.pop_back();
                }
                self.best.push_back((end, avg));
            }
            while self
                .best
                .front()
                .is_some_and(|(t, _)| end.seconds_since(*t) > horizon)
            {
                self.best.pop_front();
            }
            self.best.front().map(|(t, v)| Ceiling {
                value: *v,
                age_seconds: end.seconds_since(*t),
            })
        }
    }

    /// Windows of 0.25 to 4 s with values in 1/256ths: every sum is exact, so the tracker
    /// must give exactly what recomputing every span from scratch gives, ages included
    /// (plateaus of equal averages among them).
    #[test]
    fn ceiling_sums_equal_recomputing_every_span() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(15);
        for _ in 0..20 {
            let (horizon, sustain) = (120.0, 10.0);
            let mut c = CeilingTracker::new(horizon, sustain);
            let mut brute = BruteCeiling::default();
            let mut ms = 0i64;
            let steps = [250, 500, 1000, 2000, 4000];
            let levels = rng.random_range(1..=8u32);
            for i in 0..600 {
                let dt = steps[rng.random_range(0..steps.len())];
                // Now and then a hole in time: the window is shorter than the spacing.
                let hole = if rng.random_ratio(1, 50) { 3000 } else { 0 };
                ms += dt + hole;
                let value = (!rng.random_ratio(1, 100))
                    .then(|| f64::from(rng.random_range(0..=levels)) * 32.0 / 256.0);
                let end = Timestamp(ms);
                let seconds = dt as f64 / 1000.0;
                let got = c.observe(end, seconds, value);
                let want = brute.observe(end, seconds, value, horizon, sustain);
                assert_eq!(got, want, "window {i} ending at {ms} ms");
            }
        }
    }

    /// Any values and window lengths: the same ceilings as the running mean walked over the
    /// span at every window, up to rounding.
    #[test]
    fn ceiling_sums_agree_with_walking_the_span() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(16);
        for run in 0..20 {
            let (horizon, sustain) = (300.0, 60.0);
            let mut c = CeilingTracker::new(horizon, sustain);
            let mut walk = WalkingCeiling {
                recent: VecDeque::new(),
                best: VecDeque::new(),
            };
            let mut ms = 0i64;
            let scale = [1.0, 1e-6, 1e4][run % 3];
            for i in 0..3000 {
                let dt = rng.random_range(50..3000);
                ms += dt;
                let value = (!rng.random_ratio(1, 500)).then(|| rng.random::<f64>() * scale);
                let end = Timestamp(ms);
                let seconds = dt as f64 / 1000.0;
                let got = c.observe(end, seconds, value);
                let want = walk.observe(end, seconds, value, horizon, sustain);
                match (got, want) {
                    (None, None) => {}
                    (Some(g), Some(w)) => {
                        assert!(
                            (g.value - w.value).abs() <= 1e-12 * w.value.abs(),
                            "window {i}: {g:?} vs {w:?}"
                        );
                        assert_eq!(g.age_seconds, w.age_seconds, "window {i}");
                    }
                    _ => panic!("window {i}: {got:?} vs {want:?}"),
                }
            }
        }
    }

    #[test]
    fn exact_sums_do_not_drift() {
        let mut s = ExactSum::default();
        for x in [0.1, 1e16, 0.2, -1e16, 0.3] {
            s.add(x);
        }
        for x in [0.2, 0.1] {
            s.add(-x);
        }
        assert_eq!(s.plus(0.0), 0.3);
        assert_eq!(s.plus(-0.3), 0.0);
        // 0.1 + 0.2 + 0.3 exactly, then rounded once (a running sum gives 0.6000000000000001).
        let mut t = ExactSum::default();
        for x in [0.1, 0.2, 0.3] {
            t.add(x);
        }
        assert_eq!(t.plus(0.0), 0.6);
    }

    /// Looking an entity up without building its key finds what the key finds, and two ids
    /// of one key are equal when their other attributes are.
    #[test]
    fn entity_lookups_agree_with_keys_and_equality() {
        use crate::model::{MigId, PodRef};
        let mig = |profile: Option<&str>| MigId {
            gpu_instance: 1,
            compute_instance: Some(2),
            profile: profile.map(str::to_string),
            uuid: None,
        };
        let ids: Vec<EntityId> = vec![
            EntityId::default(),
            EntityId {
                gpu: Some(0),
                ..EntityId::default()
            },
            EntityId {
                gpu: Some(0),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                ..EntityId::default()
            },
            EntityId {
                gpu: Some(0),
                node: Some("a".into()),
                ..EntityId::default()
            },
            EntityId {
                gpu: Some(0),
                mig: Some(mig(None)),
                ..EntityId::default()
            },
            EntityId {
                gpu: Some(0),
                mig: Some(mig(Some("3g.40gb"))),
                pci_bus_id: Some("00000000:01:00.0".into()),
                ..EntityId::default()
            },
            EntityId {
                gpu: Some(1),
                uuid: Some("GPU-1".into()),
                pod: Some(PodRef {
                    pod: "p".into(),
                    namespace: None,
                    container: None,
                }),
                ..EntityId::default()
            },
        ];
        let mut table = EntityTable::default();
        for a in &ids {
            for b in &ids {
                assert_eq!(a.key().is_key_of(b), a.key() == b.key(), "{a:?} {b:?}");
                if a.key() == b.key() {
                    assert_eq!(a.same_attributes(b), a == b, "{a:?} {b:?}");
                }
            }
            if table.find(0, a).is_none() {
                table.insert(0, a, a.clone());
            }
        }
        // Found at any position, by the hint or by the key.
        for (pos, a) in ids.iter().enumerate().rev() {
            let slot = table.find(pos, a).expect("inserted");
            assert_eq!(table.get_mut(slot).key(), a.key());
        }
        table.remove(&ids[1].key());
        assert!(table.find(1, &ids[1]).is_none() && table.find(0, &ids[2]).is_none());
        let sorted: Vec<EntityKey> = table.sorted().iter().map(|id| id.key()).collect();
        assert!(sorted.windows(2).all(|w| w[0] < w[1]), "{sorted:?}");
    }

    #[test]
    fn ceiling_ratio() {
        let c = Ceiling {
            value: 0.5,
            age_seconds: 3.0,
        };
        assert_eq!(c.ratio(Some(0.25)), Some(0.5));
        assert_eq!(c.ratio(Some(0.6)), Some(1.2));
        assert_eq!(c.ratio(None), None);
        let zero = Ceiling {
            value: 0.0,
            age_seconds: 0.0,
        };
        assert_eq!(zero.ratio(Some(0.2)), None);
    }

    #[test]
    fn deriver_reports_observed_ceilings() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let obs = |d: &mut Deriver, t: i64, tensor: f64, tokens: f64| {
            let mut s = sample(
                t * 1000,
                &[
                    (Field::ReportedUtil, 1.0),
                    (Field::TensorActive, tensor),
                    (Field::DramActive, 0.1),
                ],
            );
            s.entities[0].serving = Some(ServingSnapshot {
                output_tokens_per_sec: Some(tokens),
                ..Default::default()
            });
            d.observe(&s).windows.remove(0)
        };
        let mut w = obs(&mut d, 1, 0.45, 600.0);
        assert_eq!(w.ceilings, Ceilings::default());
        for t in 2..=60 {
            w = obs(&mut d, t, 0.45, 600.0);
        }
        // S = max(τ, d) at the clocks the GPU ran (spec §6.2; no FP16/FP32 reading, so the
        // compute term is τ): max(0.45, 0.1) = 0.45. A sum would give 0.55, a mean 0.275.
        let sat = w.metrics.roofline_saturation.unwrap();
        assert!((sat - 0.45).abs() < 1e-12, "{sat}");
        close(w.ceilings.roofline_saturation, 0.45, 0.0);
        close(w.ceilings.output_tokens_per_second, 600.0, 0.0);
        // Half the work for 10 s: the ceilings stay, and current ÷ ceiling is about 0.5.
        for t in 61..=70 {
            w = obs(&mut d, t, 0.225, 300.0);
        }
        close(w.ceilings.roofline_saturation, 0.45, 10.0);
        close(w.ceilings.output_tokens_per_second, 600.0, 10.0);
        let ratio = |c: Option<Ceiling>, cur| c.unwrap().ratio(cur).unwrap();
        assert!((ratio(w.ceilings.output_tokens_per_second, Some(300.0)) - 0.5).abs() < 1e-12);
        // Now S = max(0.225, 0.1) = 0.225, half the ceiling's 0.45: the ratio is 0.5. A sum
        // would give 0.325 / 0.55 ≈ 0.59, a mean 0.1625 / 0.275 ≈ 0.59.
        let now = w.metrics.roofline_saturation;
        assert!((now.unwrap() - 0.225).abs() < 1e-12, "{now:?}");
        assert!((ratio(w.ceilings.roofline_saturation, now) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn tokens_work_when_either_rate_read_is_above_zero() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let idle = |d: &mut Deriver, t: i64, output: Option<f64>, prompt: Option<f64>| {
            let mut s = sample(t * 1000, &[(Field::ReportedUtil, 0.0)]);
            s.entities[0].serving = Some(ServingSnapshot {
                output_tokens_per_sec: output,
                prompt_tokens_per_sec: prompt,
                ..Default::default()
            });
            d.observe(&s).windows.remove(0).idle_seconds
        };
        // No output and the prompt rate unread: no work, the idle time runs on.
        assert_eq!(idle(&mut d, 1, Some(0.0), None), Some(0.0));
        assert_eq!(idle(&mut d, 2, Some(0.0), None), Some(1.0));
        // Prompt tokens with the output rate unread: work.
        assert_eq!(idle(&mut d, 3, None, Some(5.0)), Some(0.0));
        assert_eq!(idle(&mut d, 4, Some(0.0), Some(0.0)), Some(1.0));
        assert_eq!(idle(&mut d, 5, Some(0.0), Some(0.0)), Some(2.0));
        // Output tokens with the prompt rate unread: work.
        assert_eq!(idle(&mut d, 6, Some(3.0), None), Some(0.0));
    }

    #[test]
    fn gpu_zero_of_two_nodes_is_two_gpus() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let two = |ms: i64| {
            let mut s = sample(ms, &[(Field::ReportedUtil, 1.0)]);
            let mut other = s.entities[0].clone();
            s.entities[0].id.node = Some("node-a".into());
            other.id.node = Some("node-b".into());
            other.readings.set_value(Field::ReportedUtil, 0.5);
            s.entities.push(other);
            s
        };
        for ms in [1000, 2000, 3000] {
            let out = d.observe(&two(ms));
            assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
            assert_eq!(out.windows.len(), 2);
        }
        let out = d.observe(&two(4000));
        let busy: Vec<f64> = out.windows.iter().map(|w| w.totals.busy_seconds).collect();
        assert_eq!(busy, [4.0, 2.0]);
    }

    #[test]
    fn a_point_clock_is_averaged_over_the_window() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let at = |ms: i64, mhz: f64| {
            let mut s = sample(
                ms,
                &[
                    (Field::ReportedUtil, 1.0),
                    (Field::TensorActive, 0.5),
                    (Field::DramActive, 0.1),
                    (Field::SmClockMhz, mhz),
                ],
            );
            s.entities[0].sm_clock_is_point = true;
            s
        };
        d.observe(&at(1000, 1830.0));
        // The clock fell to 1098 MHz by the window's end: the window's mean is 1464 MHz,
        // κ = 0.8, not 0.6.
        let w = d.observe(&at(2000, 1098.0)).windows.remove(0);
        assert!((w.metrics.kappa.unwrap() - 0.8).abs() < 1e-12);
        assert!((w.metrics.effective_compute.unwrap() - 0.4).abs() < 1e-12);
        // A source whose clock is already the window's mean is taken as it is.
        let mut s = at(3000, 1098.0);
        s.entities[0].sm_clock_is_point = false;
        let w = d.observe(&s).windows.remove(0);
        assert!((w.metrics.kappa.unwrap() - 0.6).abs() < 1e-12);
        // A point after it (a source whose clock samples failed this tick) has no reading at
        // the window's start: the 1098 MHz read at 2 s is no end of this window, so the
        // point is taken alone, κ = 1, never the mean with it (1464 MHz, κ 0.8).
        let w = d.observe(&at(4000, 1830.0)).windows.remove(0);
        assert!(
            (w.metrics.kappa.unwrap() - 1.0).abs() < 1e-12,
            "{:?}",
            w.metrics.kappa
        );
        // The next point averages with it.
        let w = d.observe(&at(5000, 1098.0)).windows.remove(0);
        assert!((w.metrics.kappa.unwrap() - 0.8).abs() < 1e-12);
    }

    /// One H100's entity: `uuid`, index `gpu`, held by `pod`, with readings that vary by `i`.
    fn churn_entity(gpu: u32, uuid: &str, pod: &str, i: i64) -> EntitySample {
        let mut r = Readings::default();
        r.set_value(Field::ReportedUtil, (i % 10) as f64 / 10.0);
        r.set_value(Field::TensorActive, (i % 7) as f64 / 10.0);
        r.set_value(Field::EnergyJoules, 1000.0 + 300.0 * i as f64);
        EntitySample {
            id: EntityId {
                gpu: Some(gpu),
                uuid: Some(uuid.into()),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                pod: Some(PodRef {
                    pod: pod.into(),
                    namespace: Some("batch".into()),
                    container: None,
                }),
                ..Default::default()
            },
            readings: r,
            ..Default::default()
        }
    }

    #[test]
    fn forgetting_the_unseen_keeps_churn_bounded_and_the_rest_unchanged() {
        // Two GPUs held all along; beside them, every sample, a new UUID (a replaced GPU)
        // and a new pod on a third GPU (a batch job), for 3 000 samples a second apart. A
        // sweep every 60 samples forgets what was not seen for 30 s.
        let mut churned = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut steady = Deriver::new(DeriveConfig::default(), Some(1.0));
        let (mut most, mut after_sweeps) = (0, Vec::new());
        for i in 1..=3000_i64 {
            let taken = Timestamp(i * 1000);
            let stable = vec![
                churn_entity(0, "GPU-a", "server", i),
                churn_entity(1, "GPU-b", "server", i),
            ];
            let mut all = stable.clone();
            all.push(churn_entity(2, &format!("GPU-new-{i}"), "job", i));
            all.push(churn_entity(3, "GPU-d", &format!("job-{i}"), i));
            let out = churned.observe(&Sample {
                taken,
                entities: all,
            });
            let alone = steady.observe(&Sample {
                taken,
                entities: stable,
            });
            // The entities still present derive exactly what they would without the churn.
            assert_eq!(out.windows[..2], alone.windows[..]);
            most = most.max(churned.tracked());
            if i % 60 == 0 {
                let dropped = churned.forget_unseen_since(Timestamp(taken.0 - 30_000));
                assert_eq!(dropped, if i == 60 { 58 } else { 120 });
                after_sweeps.push(churned.tracked());
                assert_eq!(churned.entities.index_len(), churned.tracked());
            }
        }
        // After a sweep: the 2 held GPUs and the 2 churning entities of the last 31 samples
        // (the cutoff's own included); before one, 60 samples' more churn at most.
        assert_eq!(after_sweeps, vec![64; 50]);
        assert_eq!(most, 64 + 2 * 60);
        assert_eq!(steady.tracked(), 2);
        // Forgetting one by key drops it, and only it.
        churned.forget(&churn_entity(3, "GPU-d", "job-3000", 3000).id.key());
        assert_eq!(churned.tracked(), 63);
        assert_eq!(churned.entities.index_len(), 63);
        churned.forget(&churn_entity(3, "GPU-d", "job-1", 1).id.key());
        assert_eq!(churned.tracked(), 63);
    }
}
