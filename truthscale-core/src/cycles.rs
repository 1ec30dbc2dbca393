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
//!   readings and gaps between are spanned, not lost.
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

/// One reading of the counters.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    elapsed: f64,
    active: [Option<f64>; N],
}

impl Reading {
    fn of(r: &Readings, elapsed: f64) -> Reading {
        Reading {
            elapsed,
            active: Field::CYCLE_COUNTERS.map(|(counter, _)| r.value(counter)),
        }
    }
}

/// One entity's cumulative counters between windows.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CycleCounters {
    /// The latest reading that moved (or the first).
    last: Option<Reading>,
    /// The ratios of the last move, held while the counters repeat.
    held: Option<[Option<f64>; N]>,
}

impl CycleCounters {
    /// Replace the window's activity ratios in `r` by the counters' deltas since their
    /// previous move (see the [module docs](self)). Returns whether any ratio came from
    /// the counters.
    pub fn derive(
        &mut self,
        r: &mut Readings,
        entity: &EntityId,
        diags: &mut Vec<Diagnostic>,
    ) -> bool {
        let Some(elapsed) = r.value(Field::SmCyclesElapsed) else {
            return false;
        };
        let now = Reading::of(r, elapsed);
        let Some(prev) = self.last else {
            self.last = Some(now);
            return false;
        };
        if elapsed < prev.elapsed {
            reset(entity, Field::SmCyclesElapsed, prev.elapsed, elapsed, diags);
            *self = CycleCounters {
                last: Some(now),
                held: None,
            };
            return false;
        }
        if elapsed == prev.elapsed {
            return self.held.is_some_and(|held| apply(r, &held));
        }
        let ratios = deltas(&prev, &now, entity, diags);
        self.last = Some(now);
        self.held = Some(ratios);
        apply(r, &ratios)
    }
}

/// Each activity counter's delta over the elapsed one's, where both readings have it.
fn deltas(
    prev: &Reading,
    now: &Reading,
    entity: &EntityId,
    diags: &mut Vec<Diagnostic>,
) -> [Option<f64>; N] {
    let elapsed = now.elapsed - prev.elapsed;
    let mut out = [None; N];
    for (i, &(counter, _)) in Field::CYCLE_COUNTERS.iter().enumerate() {
        let (Some(a), Some(b)) = (prev.active[i], now.active[i]) else {
            continue;
        };
        if b < a {
            reset(entity, counter, a, b, diags);
            continue;
        }
        let ratio = (b - a) / elapsed;
        // A little above 1 is rounding of two large doubles; more is no measurement.
        if ratio <= 1.0 + 1e-9 {
            out[i] = Some(ratio.min(1.0));
        } else {
            diags.push(Diagnostic {
                kind: DiagnosticKind::OutOfRange,
                entity: Some(entity.clone()),
                field: Some(counter),
                detail: format!(
                    "{} active cycles over {elapsed} elapsed is not a fraction",
                    b - a
                ),
            });
        }
    }
    out
}

/// Write the ratios over the gauges' readings; whether any was written.
fn apply(r: &mut Readings, ratios: &[Option<f64>; N]) -> bool {
    let mut any = false;
    for (&(_, ratio), v) in Field::CYCLE_COUNTERS.iter().zip(ratios) {
        if let Some(v) = *v {
            r.set_value(ratio, v);
            any = true;
        }
    }
    any
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
}
