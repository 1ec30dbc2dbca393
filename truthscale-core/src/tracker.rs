//! Per-entity state over time: counter deltas, the phase classifier, and time integrals.
//!
//! Each sample describes the window that ends at its timestamp and began at the same
//! entity's previous sample. Integrals (busy seconds, effective-compute seconds, seconds
//! per phase) accumulate over those windows, so consumers can take exact averages over
//! any range as a `rate()` of a counter.

use crate::derive::{self, DeriveConfig, Fidelity, WindowContext, WindowMetrics, WorkloadHint};
use crate::diag::{Diagnostic, DiagnosticKind};
use crate::gpus::{self, GpuSpec};
use crate::model::{
    EntityId, EntityKey, EntitySample, Field, Phase, Sample, ServingSnapshot, Timestamp,
};
use crate::phase::{PhaseClassifier, PhaseInputs, PhaseMethod};
use crate::verdict::{self, VerdictConfig, VerdictInputs, VerdictResult};
use std::collections::{BTreeMap, VecDeque};

/// Time integrals for one entity since it was first seen.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Totals {
    /// Windows integrated.
    pub windows: u64,
    /// Seconds covered by integrated windows.
    pub observed_seconds: f64,
    /// ∫ reported utilization dt, over the windows that had a busy flag.
    pub busy_seconds: f64,
    /// Seconds with a busy flag (the denominator for its mean).
    pub busy_observed_seconds: f64,
    /// ∫ effective compute fraction dt (profiling tier only).
    pub effective_compute_seconds: f64,
    /// Seconds with an effective compute value (the denominator for its mean).
    pub effective_compute_observed_seconds: f64,
    /// Seconds in each regime, by method: `[PhaseMethod::index][Phase::index]`.
    pub phase_seconds: [[f64; 6]; 2],
    /// Seconds whose regime could not be decided.
    pub unclassified_seconds: f64,
    /// Seconds under each verdict, indexed by [`crate::verdict::Verdict::index`].
    pub verdict_seconds: [f64; 6],
    /// Energy in joules (from the energy counter, else ∫ power dt).
    pub energy_joules: f64,
    /// Seconds whose energy was measured (the denominator for mean power).
    pub energy_observed_seconds: f64,
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
    /// Ground-truth regime, for simulated data.
    pub truth_phase: Option<Phase>,
    /// Ground-truth workload, for simulated data.
    pub truth_workload: Option<crate::model::Workload>,
    /// Ground-truth effective compute, for simulated data.
    pub truth_effective_compute: Option<f64>,
    /// The serving engine's view of the same window, when scraped.
    pub serving: Option<ServingSnapshot>,
    /// The verdict of the window, with its reasons.
    pub verdict: VerdictResult,
    /// Integrals up to and including this window.
    pub totals: Totals,
    /// The sanitized readings the window was derived from.
    pub readings: crate::model::Readings,
    /// Observed ceilings up to and including this window.
    pub ceilings: Ceilings,
}

/// How far back observed ceilings look (seconds).
pub const CEILING_HORIZON_SECONDS: f64 = 3600.0;
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
#[derive(Debug, Clone)]
pub struct CeilingTracker {
    horizon: f64,
    sustain: f64,
    /// Windows overlapping the trailing sustain span: (end, seconds, value).
    recent: VecDeque<(Timestamp, f64, f64)>,
    /// Sustained averages that may still become the maximum, values decreasing:
    /// (end of their span, value).
    best: VecDeque<(Timestamp, f64)>,
}

impl CeilingTracker {
    /// A tracker of the best `sustain`-second average over the last `horizon` seconds.
    #[must_use]
    pub fn new(horizon_seconds: f64, sustain_seconds: f64) -> CeilingTracker {
        CeilingTracker {
            horizon: horizon_seconds,
            sustain: sustain_seconds,
            recent: VecDeque::new(),
            best: VecDeque::new(),
        }
    }

    /// Feed the window of `seconds` ending at `end` with `value` (`None`: not measured,
    /// which breaks continuity). Returns the ceiling as of `end`.
    pub fn observe(&mut self, end: Timestamp, seconds: f64, value: Option<f64>) -> Option<Ceiling> {
        match value.filter(|v| v.is_finite()) {
            Some(v) if seconds > 0.0 && seconds.is_finite() => {
                self.recent.push_back((end, seconds, v));
            }
            _ => self.recent.clear(),
        }
        // Keep the windows that end inside the trailing span (end - sustain, end].
        while self
            .recent
            .front()
            .is_some_and(|(e, _, _)| end.seconds_since(*e) >= self.sustain)
        {
            self.recent.pop_front();
        }
        let (mut covered, mut avg) = (0.0, 0.0);
        for (e, dt, v) in &self.recent {
            // The part of [e - dt, e] inside [end - sustain, end]. A running mean, not a
            // sum: huge values average to themselves instead of overflowing.
            let part = dt.min(self.sustain - end.seconds_since(*e)).max(0.0);
            if part > 0.0 {
                covered += part;
                avg += (v - avg) * (part / covered);
            }
        }
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
    last_energy: Option<f64>,
    idle_power: Option<f64>,
    classifier: PhaseClassifier,
    totals: Totals,
    pending_first: Option<EntityWindow>,
    warned_unknown_model: bool,
    capability: Fidelity,
    last_clock_mhz: Option<f64>,
    ceiling_saturation: CeilingTracker,
    ceiling_output_tokens: CeilingTracker,
}

/// Derives metrics sample by sample, keeping per-entity state. Pure: time comes from samples.
#[derive(Debug, Clone)]
pub struct Deriver {
    config: DeriveConfig,
    nominal_interval: Option<f64>,
    model_override: Option<&'static GpuSpec>,
    verdict: VerdictConfig,
    entities: BTreeMap<EntityKey, EntityState>,
}

impl Deriver {
    /// A deriver. `nominal_interval` (seconds) is the length given to each entity's first
    /// window and the unit for gap detection; `None` learns it from the first two samples.
    #[must_use]
    pub fn new(config: DeriveConfig, nominal_interval: Option<f64>) -> Deriver {
        Deriver {
            config,
            nominal_interval: nominal_interval.filter(|i| i.is_finite() && *i > 0.0),
            model_override: None,
            verdict: VerdictConfig::default(),
            entities: BTreeMap::new(),
        }
    }

    /// Use this catalog entry for every entity, whatever model the readings name.
    pub fn set_model_override(&mut self, spec: Option<&'static GpuSpec>) {
        self.model_override = spec;
    }

    /// Use these verdict thresholds.
    pub fn set_verdict_config(&mut self, config: VerdictConfig) {
        self.verdict = config;
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &DeriveConfig {
        &self.config
    }

    /// Forget an entity (for example when its source went stale).
    pub fn forget(&mut self, key: &EntityKey) {
        self.entities.remove(key);
    }

    /// Feed one sample.
    pub fn observe(&mut self, sample: &Sample) -> Derivation {
        let mut out = Derivation::default();
        for e in &sample.entities {
            self.observe_entity(sample.taken, e, &mut out);
        }
        out
    }

    fn observe_entity(&mut self, taken: Timestamp, e: &EntitySample, out: &mut Derivation) {
        let diags = &mut out.diagnostics;
        let mut readings = e.readings;
        derive::sanitize(&mut readings, &e.id, diags);
        let spec = self
            .model_override
            .or_else(|| e.id.model.as_deref().and_then(gpus::lookup));
        let key = e.id.key();
        let cfg = &self.config;

        let state = self.entities.get_mut(&key);
        // Window length.
        let (dt, first) = match &state {
            None => (self.nominal_interval, true),
            Some(st) => {
                let dt = taken.seconds_since(st.last_taken);
                if dt <= 0.0 {
                    diags.push(Diagnostic {
                        kind: DiagnosticKind::NonIncreasingTime,
                        entity: Some(e.id.clone()),
                        field: None,
                        detail: format!("{dt} s after the previous sample; sample skipped"),
                    });
                    return;
                }
                if self.nominal_interval.is_none() {
                    self.nominal_interval = Some(dt);
                }
                let limit = self.nominal_interval.unwrap_or(dt) * cfg.max_gap_intervals;
                if dt > limit {
                    diags.push(Diagnostic {
                        kind: DiagnosticKind::Gap,
                        entity: Some(e.id.clone()),
                        field: None,
                        detail: format!("{dt} s since the previous sample; one interval counted"),
                    });
                    (self.nominal_interval, false)
                } else {
                    (Some(dt), false)
                }
            }
        };

        let state = self.entities.entry(key).or_insert_with(|| EntityState {
            last_taken: taken,
            last_energy: None,
            idle_power: None,
            classifier: PhaseClassifier::default(),
            totals: Totals::default(),
            pending_first: None,
            warned_unknown_model: false,
            capability: Fidelity::None,
            last_clock_mhz: None,
            ceiling_saturation: CeilingTracker::default(),
            ceiling_output_tokens: CeilingTracker::default(),
        });
        if spec.is_none() && !state.warned_unknown_model {
            state.warned_unknown_model = true;
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

        // Energy counter → window-average power.
        let energy = readings.value(Field::EnergyJoules);
        let mut energy_power = None;
        let mut energy_delta = None;
        if let (Some(now), Some(prev), false) = (energy, state.last_energy, first) {
            let span = taken.seconds_since(state.last_taken);
            if now < prev {
                diags.push(Diagnostic {
                    kind: DiagnosticKind::CounterReset,
                    entity: Some(e.id.clone()),
                    field: Some(Field::EnergyJoules),
                    detail: format!("{prev} J then {now} J"),
                });
            } else if span > 0.0 && dt == Some(span) {
                energy_power = Some((now - prev) / span);
                energy_delta = Some(now - prev);
            }
        }
        if energy.is_some() {
            state.last_energy = energy;
        }
        state.last_taken = taken;
        // κ from the window's mean SM clock: a source that reads the clock at one instant
        // gets the mean of the window's two end readings.
        let clock = readings.value(Field::SmClockMhz);
        if e.sm_clock_is_point
            && let (Some(now), Some(prev), false) = (clock, state.last_clock_mhz, first)
        {
            readings.set_value(Field::SmClockMhz, 0.5 * (now + prev));
        }
        if e.sm_clock_is_point {
            state.last_clock_mhz = clock;
        }

        let ctx = WindowContext {
            spec,
            energy_power_watts: energy_power,
            idle_power_watts: state.idle_power,
            throttles: e.throttles,
        };
        let metrics = derive::window(&readings, &ctx, cfg);
        if let Some(f) = metrics.fidelity {
            state.capability = state.capability.min(f);
        }
        // Idle power: lowest power seen while the busy flag is (nearly) off.
        if let (Some(u), Some(p)) = (metrics.reported_utilization, metrics.power_watts)
            && u < cfg.inflation_min_util
        {
            state.idle_power = Some(state.idle_power.map_or(p.value, |i: f64| i.min(p.value)));
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

        let inputs = PhaseInputs {
            util: metrics
                .reported_utilization
                .or(readings.value(Field::GrActive)),
            sm_active: readings.value(Field::SmActive),
            compute: derive::compute_term(&readings, spec),
            dram: readings.value(Field::DramActive),
            pipe: metrics.busiest_pipe,
            power_proxy: metrics.power_proxy,
            power_capped: e.throttles.is_some_and(|t| t.sw_power_cap),
        };
        let method = if state.capability == Fidelity::Profiling {
            PhaseMethod::Counters
        } else {
            PhaseMethod::PowerHeuristic
        };
        let phase = state
            .classifier
            .observe_by(&inputs, method, &cfg.phase)
            .map(|p| (p, method));
        let llm_serving = match cfg.workload {
            WorkloadHint::Auto => e.serving.is_some(),
            WorkloadHint::LlmServing => true,
            WorkloadHint::Other => false,
        };
        let engine_phase = e.serving.as_ref().and_then(engine_phase);
        let verdict = verdict::decide(
            &VerdictInputs {
                util: inputs.util,
                saturation: metrics.roofline_saturation,
                tensor: readings.value(Field::TensorActive),
                dram: readings.value(Field::DramActive),
                throttles: e.throttles,
                serving: e.serving.as_ref(),
            },
            &self.verdict,
        );

        let ceilings = match dt {
            Some(dt) => Ceilings {
                roofline_saturation: state.ceiling_saturation.observe(
                    taken,
                    dt,
                    metrics.roofline_saturation,
                ),
                output_tokens_per_second: state.ceiling_output_tokens.observe(
                    taken,
                    dt,
                    e.serving
                        .as_ref()
                        .filter(|s| s.absent_reason.is_none())
                        .and_then(|s| s.output_tokens_per_sec),
                ),
            },
            // The interval is not known yet: nothing to average over.
            None => Ceilings::default(),
        };
        let mut win = EntityWindow {
            id: e.id.clone(),
            spec,
            simulated: e.simulated,
            dt_seconds: 0.0,
            metrics,
            phase: phase.map(|p| p.0),
            phase_method: phase.map(|p| p.1),
            capability: state.capability,
            llm_serving,
            engine_phase,
            throttles: e.throttles,
            processes: e.processes.clone(),
            allocation: e.allocation.clone(),
            truth_phase: e.truth_phase,
            truth_workload: e.truth_workload,
            truth_effective_compute: e.truth_effective_compute,
            serving: e.serving.clone(),
            verdict,
            totals: state.totals,
            readings,
            ceilings,
        };
        match dt {
            Some(dt) => {
                if let Some(mut pending) = state.pending_first.take() {
                    integrate(&mut state.totals, &mut pending, dt, None);
                }
                integrate(&mut state.totals, &mut win, dt, energy_delta);
                out.windows.push(win);
            }
            None => {
                // Interval not known yet: integrate this first window once the next arrives.
                state.pending_first = Some(win.clone());
                out.windows.push(win);
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

fn integrate(t: &mut Totals, w: &mut EntityWindow, dt: f64, energy_delta: Option<f64>) {
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
    match (energy_delta, m.power_watts) {
        (Some(de), _) => {
            t.energy_joules += de;
            t.energy_observed_seconds += dt;
        }
        (None, Some(p)) => {
            t.energy_joules += p.value * dt;
            t.energy_observed_seconds += dt;
        }
        _ => {}
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
    w.totals = *t;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Readings;

    fn sample(ms: i64, pairs: &[(Field, f64)]) -> Sample {
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
    fn integrals_are_exact() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let busy = [
            (Field::ReportedUtil, 1.0),
            (Field::TensorActive, 0.5),
            (Field::DramActive, 0.1),
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

    #[test]
    fn time_going_backwards_and_gaps_are_diagnosed() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        d.observe(&sample(1000, &[(Field::ReportedUtil, 1.0)]));
        let out = d.observe(&sample(1000, &[(Field::ReportedUtil, 1.0)]));
        assert_eq!(out.diagnostics[0].kind, DiagnosticKind::NonIncreasingTime);
        assert!(out.windows.is_empty());
        let out = d.observe(&sample(60_000, &[(Field::ReportedUtil, 1.0)]));
        assert_eq!(out.diagnostics[0].kind, DiagnosticKind::Gap);
        assert_eq!(out.windows[0].totals.observed_seconds, 2.0);
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
        let sat = w.metrics.roofline_saturation.unwrap();
        assert!(sat > 0.1, "{sat}");
        close(w.ceilings.roofline_saturation, sat, 0.0);
        close(w.ceilings.output_tokens_per_second, 600.0, 0.0);
        // Half the work for 10 s: the ceilings stay, and current ÷ ceiling is about 0.5.
        for t in 61..=70 {
            w = obs(&mut d, t, 0.225, 300.0);
        }
        close(w.ceilings.roofline_saturation, sat, 10.0);
        close(w.ceilings.output_tokens_per_second, 600.0, 10.0);
        let ratio = |c: Option<Ceiling>, cur| c.unwrap().ratio(cur).unwrap();
        assert!((ratio(w.ceilings.output_tokens_per_second, Some(300.0)) - 0.5).abs() < 1e-12);
        let now = w.metrics.roofline_saturation;
        assert!((ratio(w.ceilings.roofline_saturation, now) - now.unwrap() / sat).abs() < 1e-12);
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
    }
}
