//! Activity from cumulative cycle counters: the top fidelity tier.
//!
//! DCGM 4.6 added raw cumulative profiling counters (fields 1084–1096, backed by NVML GPM
//! metrics 248–260, counted since boot): SM cycles elapsed, SM cycles active, and the cycles
//! each pipe (any tensor, HMMA, IMMA, FP64, FP32, FP16) was active. A window's activity is
//! then the active counter's delta over the elapsed counter's delta: the exact mean over
//! the time between the two readings, whatever the cadence, where a ratio gauge is a point
//! sample of a workload that may change every few seconds.
//!
//! The rules, as for the energy counter:
//! - The ratios replace the gauges' readings of the same window ([`Field::CYCLE_COUNTERS`]
//!   names which); where a counter is missing the gauge stays, as the fallback.
//! - A delta spans the time since the counters' previous reading that moved: blank
//!   readings and gaps between are spanned, not lost. Each activity counter keeps its own
//!   baseline: one blank in a move spans that counter's time to its next reading.
//! - The tier is `cumulative` where the tensor activity, the effective compute's own input,
//!   came from its counter; other counters alone leave the window's tier as the gauges make
//!   it.
//! - A reading equal to the previous one is the counters not yet updated (dcgm-exporter
//!   repeats them between its collections): the window holds the ratios of the last move,
//!   the latest exact measurement, and the next move's delta spans both.
//! - A counter that goes down was reset (a driver reload, a wrap): it says nothing for that
//!   window (diagnosed; the gauges stay), and counts again from its new value.
//! - A delta of active cycles above the elapsed one is not a measurement: blank, diagnosed.
//!
//! The counters' own blanks are DCGM's INT64 ones ([`crate::derive::is_sentinel_of`]): a
//! counter passes 2^47, the FP64 blank, within minutes of boot. Values are held as `f64`:
//! past 2^53 a reading is rounded to a few hundred cycles at most, far below one window's
//! delta (billions of cycles a second).
//!
//! The SM clock is not taken from the elapsed cycles: whether DCGM sums them over SMs is
//! not verified on hardware, so κ keeps coming from the clock reading
//! (`docs/derivations.md`, "Cumulative counters").

use crate::diag::{Diagnostic, DiagnosticKind};
use crate::model::{EntityId, Field, Readings};

/// How many activity counters there are beside the elapsed one.
const N: usize = Field::CYCLE_COUNTERS.len();

/// A blank among the counters' readings and ratios (a reading is never NaN).
const NONE: f64 = f64::NAN;

/// One entity's cumulative counters between windows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CycleCounters {
    /// The elapsed cycles of the latest reading that moved (or the first); none before it.
    elapsed: Option<f64>,
    /// Each activity counter's own baseline, one for each of [`Field::CYCLE_COUNTERS`]: the
    /// elapsed cycles and its value at its latest reading in a move ([`NONE`]: not read
    /// since the elapsed counter's first reading or reset). A counter blank in a move keeps
    /// its baseline, and its next reading's delta spans the blank.
    since: [f64; N],
    active: [f64; N],
    /// The ratios of the last move, held while the counters repeat ([`NONE`]: none).
    held: [f64; N],
}

impl Default for CycleCounters {
    fn default() -> Self {
        CycleCounters {
            elapsed: None,
            since: [NONE; N],
            active: [NONE; N],
            held: [NONE; N],
        }
    }
}

/// The bit of the tensor activity in [`Readings::set_values`]' answer.
const TENSOR_BIT: u64 = 1 << Field::TensorActive as usize;

impl CycleCounters {
    /// Replace the window's activity ratios in `r` by the counters' deltas since their
    /// previous move (see the [module docs](self)). Returns whether the tensor activity, the
    /// effective compute's own input, came from the counters (the `cumulative` tier).
    #[inline(always)]
    pub fn derive(
        &mut self,
        r: &mut Readings,
        entity: &EntityId,
        diags: &mut Vec<Diagnostic>,
    ) -> bool {
        // Most sources read no counters: told where the window is derived, without a call.
        let Some(elapsed) = r.value(Field::SmCyclesElapsed) else {
            return false;
        };
        self.derive_from(elapsed, r, entity, diags)
    }

    /// [`CycleCounters::derive`] for a window whose elapsed counter read `elapsed`.
    fn derive_from(
        &mut self,
        elapsed: f64,
        r: &mut Readings,
        entity: &EntityId,
        diags: &mut Vec<Diagnostic>,
    ) -> bool {
        let now = Field::CYCLE_COUNTERS.map(|(counter, _)| r.value_or_nan(counter));
        // The first reading, or after the elapsed counter's reset: every counter read counts
        // from here.
        let restart = |c: &mut CycleCounters| {
            *c = CycleCounters {
                elapsed: Some(elapsed),
                since: now.map(|a| if a.is_nan() { NONE } else { elapsed }),
                active: now,
                held: [NONE; N],
            };
            false
        };
        let Some(prev) = self.elapsed else {
            return restart(self);
        };
        if elapsed < prev {
            reset(entity, Field::SmCyclesElapsed, prev, elapsed, diags);
            return restart(self);
        }
        // Equal: the counters not yet updated, and the last move's ratios held.
        if elapsed != prev {
            for (i, &b) in now.iter().enumerate() {
                if b.is_nan() {
                    // Blank in this move: no ratio, and its baseline stays.
                    self.held[i] = NONE;
                    continue;
                }
                let (a, span) = (self.active[i], elapsed - self.since[i]);
                let ratio = (b - a) / span;
                // A little above 1 is rounding of two large doubles; more is no
                // measurement. Without a baseline the ratio is NaN: none.
                self.held[i] = if (0.0..=1.0 + 1e-9).contains(&ratio) {
                    ratio.min(1.0)
                } else {
                    if !a.is_nan() {
                        no_ratio(i, a, b, span, entity, diags);
                    }
                    NONE
                };
                (self.since[i], self.active[i]) = (elapsed, b);
            }
            self.elapsed = Some(elapsed);
        }
        apply(r, &self.held) & TENSOR_BIT != 0
    }
}

/// Why activity counter `i`, read `a` then `b` over `span` elapsed cycles, gives no ratio:
/// it went down (a reset), or it rose by more than the elapsed cycles.
#[cold]
#[inline(never)]
fn no_ratio(i: usize, a: f64, b: f64, span: f64, entity: &EntityId, diags: &mut Vec<Diagnostic>) {
    let counter = Field::CYCLE_COUNTERS[i].0;
    if b < a {
        reset(entity, counter, a, b, diags);
        return;
    }
    diags.push(Diagnostic {
        kind: DiagnosticKind::OutOfRange,
        entity: Some(entity.clone()),
        field: Some(counter),
        detail: format!(
            "{} active cycles over {span} elapsed is not a fraction",
            b - a
        ),
    });
}

/// The gauges the counters' ratios replace, as indices into [`Field::ALL`] (fewer than 64:
/// each fits a byte).
const RATIO_FIELDS: [u8; N] = {
    let mut fields = [0; N];
    let mut i = 0;
    while i < N {
        fields[i] = Field::CYCLE_COUNTERS[i].1 as u8;
        i += 1;
    }
    fields
};

/// Write the ratios over the gauges' readings; the fields written, one bit each.
#[inline]
fn apply(r: &mut Readings, ratios: &[f64; N]) -> u64 {
    r.set_values(&RATIO_FIELDS, ratios)
}

fn reset(entity: &EntityId, field: Field, prev: f64, now: f64, diags: &mut Vec<Diagnostic>) {
    diags.push(Diagnostic {
        kind: DiagnosticKind::CounterReset,
        entity: Some(entity.clone()),
        field: Some(field),
        detail: format!("{prev} then {now}"),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Reading as R;

    fn counters(elapsed: f64, sm: f64, mma: f64) -> Readings {
        let mut r = Readings::default();
        r.set_value(Field::SmCyclesElapsed, elapsed);
        r.set_value(Field::SmCyclesActive, sm);
        r.set_value(Field::MmaCyclesActive, mma);
        r.set_value(Field::TensorActive, 0.9);
        r
    }

    #[test]
    fn deltas_replace_the_gauges_and_repeats_hold_the_last_move() {
        let base = 3.0e17; // far past 2^47: days of uptime
        let mut c = CycleCounters::default();
        let mut d = Vec::new();
        let id = EntityId::default();
        let mut r = counters(base, base / 2.0, base / 4.0);
        assert!(!c.derive(&mut r, &id, &mut d));
        assert_eq!(
            r.get(Field::TensorActive),
            R::Value(0.9),
            "first: the gauge stays"
        );
        let mut r = counters(base + 1e12, base / 2.0 + 6e11, base / 4.0 + 2.5e11);
        assert!(c.derive(&mut r, &id, &mut d));
        assert_eq!(r.get(Field::TensorActive), R::Value(0.25));
        assert_eq!(r.get(Field::SmActive), R::Value(0.6));
        // Repeated: the last move's ratios are held.
        let mut r = counters(base + 1e12, base / 2.0 + 6e11, base / 4.0 + 2.5e11);
        assert!(c.derive(&mut r, &id, &mut d));
        assert_eq!(r.get(Field::TensorActive), R::Value(0.25));
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn a_blank_is_spanned_and_a_reset_is_diagnosed() {
        let mut c = CycleCounters::default();
        let mut d = Vec::new();
        let id = EntityId::default();
        c.derive(&mut counters(1e12, 0.0, 0.0), &id, &mut d);
        let mut blank = Readings::default();
        assert!(!c.derive(&mut blank, &id, &mut d));
        // The next delta spans the blank: (1e11 + 3e11) / 2e12.
        let mut r = counters(3e12, 0.0, 4e11);
        assert!(c.derive(&mut r, &id, &mut d));
        assert_eq!(r.get(Field::TensorActive), R::Value(0.2));
        let mut r = counters(5e11, 0.0, 1e11);
        assert!(!c.derive(&mut r, &id, &mut d));
        assert_eq!(r.get(Field::TensorActive), R::Value(0.9));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].kind, DiagnosticKind::CounterReset);
        assert_eq!(d[0].field, Some(Field::SmCyclesElapsed));
    }

    /// One counter blank in a move keeps its own baseline: the MMA counter read 0, blank,
    /// 1.3e11 over elapsed 0, 2.6e11, 5.2e11 is 1.3e11 / 5.2e11 = 0.25 in the third window,
    /// not the gauge's 0.9; the SM counter, read each time, moves by its own deltas.
    #[test]
    fn a_blank_counter_keeps_its_own_baseline() {
        let mut c = CycleCounters::default();
        let mut d = Vec::new();
        let id = EntityId::default();
        c.derive(&mut counters(0.0, 0.0, 0.0), &id, &mut d);
        let mut r = counters(2.6e11, 1.3e11, 0.0);
        r.set(Field::MmaCyclesActive, R::Blank);
        assert!(
            !c.derive(&mut r, &id, &mut d),
            "no tensor counter: not cumulative"
        );
        assert_eq!(r.get(Field::TensorActive), R::Value(0.9));
        assert_eq!(r.get(Field::SmActive), R::Value(0.5));
        let mut r = counters(5.2e11, 1.3e11, 1.3e11);
        assert!(c.derive(&mut r, &id, &mut d));
        assert_eq!(r.get(Field::TensorActive), R::Value(0.25));
        assert_eq!(r.get(Field::SmActive), R::Value(0.0));
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn more_active_than_elapsed_is_no_measurement() {
        let mut c = CycleCounters::default();
        let mut d = Vec::new();
        let id = EntityId::default();
        c.derive(&mut counters(0.0, 0.0, 0.0), &id, &mut d);
        let mut r = counters(1e9, 2e9, 5e8);
        assert!(c.derive(&mut r, &id, &mut d));
        assert_eq!(r.get(Field::TensorActive), R::Value(0.5));
        assert_eq!(r.get(Field::SmActive), R::Blank);
        assert_eq!(d[0].field, Some(Field::SmCyclesActive));
    }

    /// The rules of the module docs, written plainly and applied to a random run of
    /// readings (moves, repeats, blanks, resets, counters running ahead of the elapsed
    /// ones), give the same ratios, bit for bit, and the same diagnostics.
    #[test]
    fn a_random_run_reads_as_the_rules_say() {
        use rand::{Rng, SeedableRng};
        type Counters = [Option<f64>; N];
        // The elapsed cycles of the last move, each counter's (elapsed, value) at its last
        // reading in a move, and the last move's ratios.
        #[derive(Default)]
        struct Rules {
            last: Option<f64>,
            base: [Option<(f64, f64)>; N],
            held: Option<Counters>,
        }
        let mut rules = Rules::default();
        let mut rule = |e: f64, now: Counters, want: &mut Vec<(DiagnosticKind, Field)>| {
            let restart = |rules: &mut Rules| {
                rules.last = Some(e);
                rules.base = now.map(|v| v.map(|v| (e, v)));
                rules.held = None;
            };
            let Some(prev) = rules.last else {
                restart(&mut rules);
                return None;
            };
            if e < prev {
                want.push((DiagnosticKind::CounterReset, Field::SmCyclesElapsed));
                restart(&mut rules);
                return None;
            }
            if e == prev {
                return rules.held;
            }
            let mut out = [None; N];
            for (i, &(counter, _)) in Field::CYCLE_COUNTERS.iter().enumerate() {
                let Some(b) = now[i] else {
                    continue;
                };
                if let Some((since, a)) = rules.base[i] {
                    let q = (b - a) / (e - since);
                    if b < a {
                        want.push((DiagnosticKind::CounterReset, counter));
                    } else if q > 1.0 + 1e-9 {
                        want.push((DiagnosticKind::OutOfRange, counter));
                    } else {
                        out[i] = Some(q.min(1.0));
                    }
                }
                rules.base[i] = Some((e, b));
            }
            (rules.last, rules.held) = (Some(e), Some(out));
            Some(out)
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1084);
        let mut c = CycleCounters::default();
        let (mut d, mut want) = (Vec::new(), Vec::new());
        let id = EntityId::default();
        let (mut e, mut counters) = (3.0e17, [1.0e17; N]);
        for _ in 0..20_000 {
            let step = 2.6e11 * rng.random_range(0.5..1.5);
            match rng.random_range(0..100) {
                0..3 => e = rng.random_range(0.0..1e12),
                3..13 => {}
                _ => e += step,
            }
            let mut r = Readings::default();
            let mut now = [None; N];
            for (i, &(counter, gauge)) in Field::CYCLE_COUNTERS.iter().enumerate() {
                counters[i] += step * rng.random_range(-0.05..1.1);
                r.set_value(gauge, 0.5);
                if rng.random_bool(0.9) {
                    r.set_value(counter, counters[i]);
                    now[i] = Some(counters[i]);
                }
            }
            let blank = rng.random_bool(0.03);
            if !blank {
                r.set_value(Field::SmCyclesElapsed, e);
            }
            let ratios = if blank { None } else { rule(e, now, &mut want) };
            let any = c.derive(&mut r, &id, &mut d);
            let ratios = ratios.unwrap_or([None; N]);
            assert_eq!(any, ratios[1].is_some(), "the tensor activity's counter");
            for (&(_, gauge), ratio) in Field::CYCLE_COUNTERS.iter().zip(ratios) {
                let v = r.value(gauge).map(f64::to_bits);
                assert_eq!(v, Some(ratio.unwrap_or(0.5).to_bits()), "{gauge:?}");
            }
        }
        let got: Vec<_> = d.iter().map(|x| (x.kind, x.field)).collect();
        let want: Vec<_> = want.into_iter().map(|(k, f)| (k, Some(f))).collect();
        assert_eq!(got, want);
        // The run reaches every rule.
        for (kind, field) in [
            (DiagnosticKind::CounterReset, Field::SmCyclesElapsed),
            (DiagnosticKind::CounterReset, Field::SmCyclesActive),
            (DiagnosticKind::OutOfRange, Field::SmCyclesActive),
        ] {
            let n = want.iter().filter(|w| **w == (kind, Some(field))).count();
            assert!(n > 10, "{kind:?} {field:?}: {n}");
        }
    }
}
