//! Health: whether a GPU can take work at all, a capacity class apart from busy and idle.
//!
//! Pure: one [`Health`] per window from the driver's own error state (last XID, the XIDs the
//! source counted in its window, ECC totals, row remapping, unrepairable memory, the fabric's
//! health, the recovery action it asks for) and the time the clocks were held down.
//! Rules, in order (see `docs/verdicts.md`, Health):
//!
//! | health | when |
//! |---|---|
//! | `unavailable` | a row remap is pending or failed; the memory is unrepairable; the recovery action is not 0 (none); the last XID, or one the source counted in its window, is a fatal one ([`FATAL_XIDS`]); the fabric is unhealthy (summary 2); or a double-bit ECC error since the driver loaded |
//! | `degraded` | single-bit ECC errors rose in the window; the clocks were held down by power or temperature for at least [`HealthConfig::degraded_violation_share`] of the window; or the fabric has limited capacity (summary 3) |
//! | `ok` | something was read and none of the above holds |
//! | none | nothing of the above was read |

use crate::model::{Field, Readings};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The health rules' settings (`[verdict.health]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// The share of a window the clocks must be held down by power or temperature (the
    /// violation time's rise over the window's length) for the window to be degraded: a
    /// 1 ms cap in a 10 s window is not.
    pub degraded_violation_share: f64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            degraded_violation_share: 0.05,
        }
    }
}

impl HealthConfig {
    /// Every setting in range (keys are `<prefix>name`).
    ///
    /// # Errors
    /// Each problem, naming its key.
    pub fn validate(&self, prefix: &str) -> Result<(), Vec<crate::phase::InvalidSetting>> {
        let mut c = crate::phase::Checker::new(prefix);
        c.range(
            "degraded_violation_share",
            self.degraded_violation_share,
            0.0,
            1.0,
        );
        c.finish()
    }
}

/// The fabric health summary that makes a GPU unavailable
/// (`NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY`).
pub const FABRIC_UNHEALTHY: f64 = 2.0;
/// The fabric health summary that makes a GPU degraded
/// (`NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY`).
pub const FABRIC_LIMITED_CAPACITY: f64 = 3.0;

/// A GPU's health over one window, in label order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Nothing in the driver's error state says otherwise.
    Ok,
    /// Working, but with errors corrected or clocks held down in the window.
    Degraded,
    /// The GPU cannot be trusted with work until it is reset, its memory repaired or the
    /// node rebooted.
    Unavailable,
}

impl Health {
    /// All states, in label order.
    pub const ALL: [Health; 3] = [Health::Ok, Health::Degraded, Health::Unavailable];

    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Ok => "ok",
            Health::Degraded => "degraded",
            Health::Unavailable => "unavailable",
        }
    }
}

impl Health {
    /// Its rank, worst highest (its place in [`Health::ALL`]).
    #[must_use]
    pub fn rank(self) -> u8 {
        self as u8
    }

    /// The health of a rank ([`Health::rank`]); `None` for any other number.
    #[must_use]
    pub fn of_rank(r: u8) -> Option<Health> {
        Health::ALL.get(usize::from(r)).copied()
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// XIDs after which the GPU is unavailable, with what NVIDIA's XID catalog ("XID Errors",
/// docs.nvidia.com/deploy/xid-errors) says each is. The catalog lists a GPU reset or a node
/// reboot as the recovery of each.
pub const FATAL_XIDS: [(u32, &str); 6] = [
    (48, "double-bit ECC error"),
    (79, "GPU has fallen off the bus"),
    (94, "contained ECC error"),
    (95, "uncontained ECC error"),
    (119, "GSP RPC timeout"),
    (120, "GSP error"),
];

/// The profiling readings, which a window after a fatal XID does not trust: the activity
/// ratios effective compute and roofline saturation come from.
pub const PROFILING_FIELDS: [Field; 10] = [
    Field::GrActive,
    Field::SmActive,
    Field::SmOccupancy,
    Field::TensorActive,
    Field::HmmaActive,
    Field::ImmaActive,
    Field::DramActive,
    Field::Fp16Active,
    Field::Fp32Active,
    Field::Fp64Active,
];

/// What NVIDIA's XID catalog calls `xid`, when it is one of [`FATAL_XIDS`].
#[must_use]
pub fn fatal_xid(xid: f64) -> Option<(u32, &'static str)> {
    FATAL_XIDS.into_iter().find(|(x, _)| f64::from(*x) == xid)
}

/// What a window's health is decided from: the window's readings and, for the counters,
/// how much each rose since the entity's previous reading (`None` where there was no
/// previous reading, or the counter went back, as at a driver reload).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HealthInputs {
    /// The last XID.
    pub xid_last: Option<f64>,
    /// A fatal XID the source counted in its own window (0: none).
    pub xid_window_fatal: Option<f64>,
    /// The memory cannot be repaired (non-zero).
    pub memory_unrepairable: Option<f64>,
    /// The fabric's health summary ([`FABRIC_UNHEALTHY`], [`FABRIC_LIMITED_CAPACITY`]).
    pub fabric_health: Option<f64>,
    /// Double-bit ECC errors since the driver loaded.
    pub dbe_volatile: Option<f64>,
    /// A row remap is pending (non-zero).
    pub row_remap_pending: Option<f64>,
    /// A row remap failed (non-zero).
    pub row_remap_failed: Option<f64>,
    /// The recovery action the driver asks for (non-zero: one is needed).
    pub recovery_action: Option<f64>,
    /// Single-bit ECC errors in the window.
    pub sbe_rise: Option<f64>,
    /// Power plus thermal violation time in the window, nanoseconds.
    pub violation_rise_ns: Option<f64>,
    /// The window's length in seconds, which the violation time is a share of (`None`:
    /// unknown, and any violation time counts).
    pub window_seconds: Option<f64>,
}

/// Every field health is judged from ([`HealthInputs::from_readings`], the single-bit ECC
/// count and [`violation_ns`]): a window without any, after none before, has no health
/// finding.
pub const INPUT_FIELDS: u64 = Field::set_of(&[
    Field::XidLast,
    Field::XidWindowFatal,
    Field::MemoryUnrepairable,
    Field::FabricHealthSummary,
    Field::EccDbeVolatile,
    Field::RowRemapPending,
    Field::RowRemapFailed,
    Field::RecoveryAction,
    Field::EccSbeVolatile,
    Field::PowerViolationNs,
    Field::ThermalViolationNs,
    Field::ClockEventSwPowerCapNs,
    Field::ClockEventSwThermalNs,
    Field::ClockEventHwThermalNs,
    Field::ClockEventHwPowerBrakeNs,
]);

impl HealthInputs {
    /// The levels of `r`, without the rises (which need the previous reading).
    #[must_use]
    pub fn from_readings(r: &Readings) -> HealthInputs {
        HealthInputs {
            xid_last: r.value(Field::XidLast),
            xid_window_fatal: r.value(Field::XidWindowFatal),
            memory_unrepairable: r.value(Field::MemoryUnrepairable),
            fabric_health: r.value(Field::FabricHealthSummary),
            dbe_volatile: r.value(Field::EccDbeVolatile),
            row_remap_pending: r.value(Field::RowRemapPending),
            row_remap_failed: r.value(Field::RowRemapFailed),
            recovery_action: r.value(Field::RecoveryAction),
            sbe_rise: None,
            violation_rise_ns: None,
            window_seconds: None,
        }
    }

    fn anything(&self) -> bool {
        [
            self.xid_last,
            self.xid_window_fatal,
            self.memory_unrepairable,
            self.fabric_health,
            self.dbe_volatile,
            self.row_remap_pending,
            self.row_remap_failed,
            self.recovery_action,
            self.sbe_rise,
            self.violation_rise_ns,
        ]
        .iter()
        .any(Option::is_some)
    }
}

/// Why a window has the health it has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HealthReason {
    /// A row remap is pending: the GPU needs a reset to apply it.
    RowRemapPending,
    /// A row remap failed: the memory cannot be repaired in the field.
    RowRemapFailed,
    /// The driver flags the memory as unrepairable.
    MemoryUnrepairable,
    /// The GPU's fabric is unhealthy.
    FabricUnhealthy,
    /// The GPU's fabric works with limited capacity.
    FabricLimited,
    /// The source counted a fatal XID in its own window.
    FatalXidInWindow(u32, &'static str),
    /// The driver asks for a recovery action (its code).
    RecoveryAction(f64),
    /// The last XID is a fatal one.
    FatalXid(u32, &'static str),
    /// Double-bit ECC errors since the driver loaded.
    DoubleBitErrors(f64),
    /// Single-bit ECC errors in the window.
    SingleBitErrors(f64),
    /// Clocks held down by power or temperature in the window, nanoseconds.
    ViolationTime(f64),
    /// Nothing wrong was read.
    Clean,
}

impl fmt::Display for HealthReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            HealthReason::RowRemapPending => {
                f.write_str("a row remap is pending: the GPU needs a reset to apply it")
            }
            HealthReason::RowRemapFailed => f.write_str("a row remap failed"),
            HealthReason::MemoryUnrepairable => f.write_str("the memory is flagged unrepairable"),
            HealthReason::FabricUnhealthy => f.write_str("the GPU fabric is unhealthy"),
            HealthReason::FabricLimited => {
                f.write_str("the GPU fabric works with limited capacity")
            }
            HealthReason::FatalXidInWindow(x, what) => {
                write!(f, "XID {x} ({what}) counted in the source's window")
            }
            HealthReason::RecoveryAction(a) => {
                write!(
                    f,
                    "the driver asks for recovery action {a:.0} ({})",
                    recovery_name(a)
                )
            }
            HealthReason::FatalXid(x, what) => write!(f, "last XID {x} ({what})"),
            HealthReason::DoubleBitErrors(n) => {
                write!(f, "{n:.0} double-bit ECC errors since the driver loaded")
            }
            HealthReason::SingleBitErrors(n) => {
                write!(f, "{n:.0} single-bit ECC errors in the window")
            }
            HealthReason::ViolationTime(ns) => write!(
                f,
                "clocks held down by power or temperature for {:.3} s in the window",
                ns / 1e9
            ),
            HealthReason::Clean => f.write_str("no error read"),
        }
    }
}

/// The name of NVML's recovery action `a` (`nvmlDeviceGpuRecoveryAction_t`).
#[must_use]
pub fn recovery_name(a: f64) -> &'static str {
    match a {
        0.0 => "none",
        1.0 => "GPU reset",
        2.0 => "node reboot",
        3.0 => "drain peer-to-peer",
        4.0 => "drain and reset",
        _ => "unknown",
    }
}

/// A window's health and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealthFinding {
    /// The health.
    pub health: Health,
    /// Why.
    pub reason: HealthReason,
    /// Whether the last XID is a fatal one, whichever rule decided.
    pub fatal_xid: bool,
}

impl HealthFinding {
    /// Whether the window's profiling readings are not to be trusted: after a fatal XID
    /// the counters may be stale or garbage (NVIDIA/DCGM #303).
    #[must_use]
    pub fn profiling_untrusted(&self) -> bool {
        self.fatal_xid
    }
}

/// Decide a window's health (rules in the [module docs](self)); `None` where nothing was
/// read.
#[must_use]
pub fn classify(i: &HealthInputs, cfg: &HealthConfig) -> Option<HealthFinding> {
    if !i.anything() {
        return None;
    }
    let last = i.xid_last.and_then(fatal_xid);
    let counted = i.xid_window_fatal.and_then(fatal_xid);
    let (health, reason) = if let Some(reason) = unavailable_reason(i, last, counted) {
        (Health::Unavailable, reason)
    } else if let Some(reason) = degraded_reason(i, cfg) {
        (Health::Degraded, reason)
    } else {
        (Health::Ok, HealthReason::Clean)
    };
    Some(HealthFinding {
        health,
        reason,
        fatal_xid: last.is_some() || counted.is_some(),
    })
}

/// The first unavailable rule that holds, given the fatal XIDs found (the last one, and one
/// counted in the source's window).
fn unavailable_reason(
    i: &HealthInputs,
    last: Option<(u32, &'static str)>,
    counted: Option<(u32, &'static str)>,
) -> Option<HealthReason> {
    let on = |v: Option<f64>| v.is_some_and(|v| v > 0.0);
    if on(i.row_remap_pending) {
        return Some(HealthReason::RowRemapPending);
    }
    if on(i.row_remap_failed) {
        return Some(HealthReason::RowRemapFailed);
    }
    if on(i.memory_unrepairable) {
        return Some(HealthReason::MemoryUnrepairable);
    }
    if let Some(a) = i.recovery_action.filter(|a| *a > 0.0) {
        return Some(HealthReason::RecoveryAction(a));
    }
    if let Some((x, what)) = last {
        return Some(HealthReason::FatalXid(x, what));
    }
    if let Some((x, what)) = counted {
        return Some(HealthReason::FatalXidInWindow(x, what));
    }
    if i.fabric_health == Some(FABRIC_UNHEALTHY) {
        return Some(HealthReason::FabricUnhealthy);
    }
    i.dbe_volatile
        .filter(|n| *n > 0.0)
        .map(HealthReason::DoubleBitErrors)
}

/// The first degraded rule that holds.
fn degraded_reason(i: &HealthInputs, cfg: &HealthConfig) -> Option<HealthReason> {
    if let Some(n) = i.sbe_rise.filter(|n| *n > 0.0) {
        return Some(HealthReason::SingleBitErrors(n));
    }
    if let Some(ns) = i.violation_rise_ns.filter(|n| *n > 0.0) {
        // Without the window's length any violation time counts.
        let share = i
            .window_seconds
            .filter(|s| *s > 0.0)
            .map(|s| ns / (s * 1e9));
        if share.is_none_or(|share| share >= cfg.degraded_violation_share) {
            return Some(HealthReason::ViolationTime(ns));
        }
    }
    (i.fabric_health == Some(FABRIC_LIMITED_CAPACITY)).then_some(HealthReason::FabricLimited)
}

/// The time the clocks were held down by power or temperature, in nanoseconds, as read:
/// the power plus thermal violation times (DCGM 240/241, NVML violation status) where
/// either is read, else the clock-event reasons' times (DCGM 1420, 1422-1424) other than
/// sync boost. `None` where none is read.
#[must_use]
pub fn violation_ns(r: &Readings) -> Option<f64> {
    violation(r).map(|v| v.0)
}

/// [`violation_ns`] and the set of the fields it summed ([`Field::set_of`]): a rise is
/// only a rise between two sums of the same fields (a field that drops out of the sum is
/// no fall of the time, nor its return a rise).
#[must_use]
pub fn violation(r: &Readings) -> Option<(f64, u64)> {
    // The sum of those read and their set; `None` when none is.
    let sum = |fields: &[Field]| {
        fields.iter().fold(None, |acc: Option<(f64, u64)>, &f| {
            let Some(v) = r.value(f) else { return acc };
            let (s, set) = acc.unwrap_or((0.0, 0));
            Some((s + v, set | Field::set_of(&[f])))
        })
    };
    sum(&[Field::PowerViolationNs, Field::ThermalViolationNs]).or_else(|| {
        sum(&[
            Field::ClockEventSwPowerCapNs,
            Field::ClockEventSwThermalNs,
            Field::ClockEventHwThermalNs,
            Field::ClockEventHwPowerBrakeNs,
        ])
    })
}

/// How much a counter rose from `prev` to `now`: `None` without both, or where it went
/// back (a driver reload resets the volatile counters).
#[must_use]
pub fn rise(prev: Option<f64>, now: Option<f64>) -> Option<f64> {
    match (prev, now) {
        (Some(p), Some(n)) if n >= p => Some(n - p),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(i: HealthInputs) -> Option<Health> {
        classify(&i, &HealthConfig::default()).map(|f| f.health)
    }

    fn clean() -> HealthInputs {
        HealthInputs {
            xid_last: Some(0.0),
            xid_window_fatal: Some(0.0),
            memory_unrepairable: Some(0.0),
            fabric_health: Some(1.0),
            dbe_volatile: Some(0.0),
            row_remap_pending: Some(0.0),
            row_remap_failed: Some(0.0),
            recovery_action: Some(0.0),
            sbe_rise: Some(0.0),
            violation_rise_ns: Some(0.0),
            window_seconds: Some(10.0),
        }
    }

    #[test]
    fn nothing_read_is_no_health() {
        assert_eq!(state(HealthInputs::default()), None);
    }

    #[test]
    fn clean_readings_are_ok() {
        assert_eq!(state(clean()), Some(Health::Ok));
        // One reading is enough to say ok: a blank is not an error.
        let one = HealthInputs {
            xid_last: Some(13.0),
            ..HealthInputs::default()
        };
        assert_eq!(state(one), Some(Health::Ok));
    }

    #[test]
    fn each_unavailable_rule() {
        let cases = [
            HealthInputs {
                row_remap_pending: Some(1.0),
                ..clean()
            },
            HealthInputs {
                row_remap_failed: Some(1.0),
                ..clean()
            },
            HealthInputs {
                recovery_action: Some(1.0),
                ..clean()
            },
            HealthInputs {
                recovery_action: Some(2.0),
                ..clean()
            },
            HealthInputs {
                dbe_volatile: Some(3.0),
                ..clean()
            },
            HealthInputs {
                memory_unrepairable: Some(1.0),
                ..clean()
            },
            HealthInputs {
                fabric_health: Some(FABRIC_UNHEALTHY),
                ..clean()
            },
            HealthInputs {
                xid_window_fatal: Some(95.0),
                ..clean()
            },
        ];
        for c in cases {
            assert_eq!(state(c), Some(Health::Unavailable), "{c:?}");
        }
        for (x, _) in FATAL_XIDS {
            let c = HealthInputs {
                xid_last: Some(f64::from(x)),
                ..HealthInputs::default()
            };
            let f = classify(&c, &HealthConfig::default()).unwrap();
            assert_eq!(f.health, Health::Unavailable, "xid {x}");
            assert!(f.profiling_untrusted());
        }
    }

    #[test]
    fn a_non_fatal_xid_is_not_unavailable() {
        // XID 13 (graphics engine exception) and 31 (MMU fault) are the application's.
        for x in [13.0, 31.0, 43.0] {
            let c = HealthInputs {
                xid_last: Some(x),
                ..clean()
            };
            assert_eq!(state(c), Some(Health::Ok));
        }
    }

    #[test]
    fn the_first_rule_names_the_reason() {
        let c = HealthInputs {
            row_remap_pending: Some(1.0),
            xid_last: Some(79.0),
            ..clean()
        };
        let f = classify(&c, &HealthConfig::default()).unwrap();
        assert_eq!(f.reason, HealthReason::RowRemapPending);
        // The fatal XID still makes the profiling readings untrusted.
        assert!(f.profiling_untrusted());
        let remap_only = HealthInputs {
            row_remap_pending: Some(1.0),
            ..clean()
        };
        assert!(
            !classify(&remap_only, &HealthConfig::default())
                .unwrap()
                .profiling_untrusted()
        );
        assert_eq!(
            f.reason.to_string(),
            "a row remap is pending: the GPU needs a reset to apply it"
        );
    }

    #[test]
    fn each_degraded_rule() {
        let sbe = HealthInputs {
            sbe_rise: Some(2.0),
            ..clean()
        };
        assert_eq!(state(sbe), Some(Health::Degraded));
        let violation = HealthInputs {
            violation_rise_ns: Some(5e8),
            ..clean()
        };
        let f = classify(&violation, &HealthConfig::default()).unwrap();
        assert_eq!(f.health, Health::Degraded);
        assert_eq!(
            f.reason.to_string(),
            "clocks held down by power or temperature for 0.500 s in the window"
        );
        // Unavailable wins over degraded.
        let both = HealthInputs {
            dbe_volatile: Some(1.0),
            ..sbe
        };
        assert_eq!(state(both), Some(Health::Unavailable));
    }

    #[test]
    fn a_counter_that_goes_back_did_not_rise() {
        assert_eq!(rise(Some(5.0), Some(7.0)), Some(2.0));
        assert_eq!(rise(Some(7.0), Some(5.0)), None);
        assert_eq!(rise(None, Some(5.0)), None);
        assert_eq!(rise(Some(5.0), None), None);
    }

    #[test]
    fn readings_give_the_levels() {
        let mut r = Readings::default();
        r.set_value(Field::RowRemapPending, 1.0);
        r.set_value(Field::XidLast, 79.0);
        let i = HealthInputs::from_readings(&r);
        assert_eq!(i.row_remap_pending, Some(1.0));
        assert_eq!(i.xid_last, Some(79.0));
        assert_eq!(i.dbe_volatile, None);
    }

    #[test]
    fn a_fatal_xid_counted_in_the_window_is_unavailable_like_the_last_one() {
        // The last XID is 13 (the application's); the source counted XID 79 in its window.
        let c = HealthInputs {
            xid_last: Some(13.0),
            xid_window_fatal: Some(79.0),
            ..clean()
        };
        let f = classify(&c, &HealthConfig::default()).unwrap();
        assert_eq!(f.health, Health::Unavailable);
        assert_eq!(
            f.reason,
            HealthReason::FatalXidInWindow(79, "GPU has fallen off the bus")
        );
        assert!(f.profiling_untrusted());
        assert_eq!(
            f.reason.to_string(),
            "XID 79 (GPU has fallen off the bus) counted in the source's window"
        );
        // A code that is not fatal (none is, 0) changes nothing.
        let none = HealthInputs {
            xid_window_fatal: Some(0.0),
            ..clean()
        };
        assert_eq!(state(none), Some(Health::Ok));
        // Nothing but the window's count read is enough to judge.
        let only = HealthInputs {
            xid_window_fatal: Some(48.0),
            ..HealthInputs::default()
        };
        assert_eq!(state(only), Some(Health::Unavailable));
    }

    #[test]
    fn unrepairable_memory_and_the_fabric() {
        let f = classify(
            &HealthInputs {
                memory_unrepairable: Some(1.0),
                ..clean()
            },
            &HealthConfig::default(),
        )
        .unwrap();
        assert_eq!(
            (f.health, f.reason),
            (Health::Unavailable, HealthReason::MemoryUnrepairable)
        );
        assert!(!f.profiling_untrusted());
        // Fabric summary: 0 not supported and 1 healthy are ok, 2 unavailable, 3 degraded.
        for (summary, health) in [
            (0.0, Health::Ok),
            (1.0, Health::Ok),
            (2.0, Health::Unavailable),
            (3.0, Health::Degraded),
        ] {
            let c = HealthInputs {
                fabric_health: Some(summary),
                ..clean()
            };
            assert_eq!(state(c), Some(health), "summary {summary}");
        }
        let limited = HealthInputs {
            fabric_health: Some(3.0),
            ..clean()
        };
        assert_eq!(
            classify(&limited, &HealthConfig::default())
                .unwrap()
                .reason
                .to_string(),
            "the GPU fabric works with limited capacity"
        );
    }

    #[test]
    fn violation_time_degrades_from_its_share_of_the_window() {
        let cfg = HealthConfig::default();
        assert_eq!(cfg.degraded_violation_share, 0.05);
        let held = |ns: f64, secs: Option<f64>| HealthInputs {
            violation_rise_ns: Some(ns),
            window_seconds: secs,
            ..clean()
        };
        // 1 ms in a 10 s window: 0.0001 of it, under 0.05: ok.
        assert_eq!(state(held(1e6, Some(10.0))), Some(Health::Ok));
        // 0.4 s of 10 s is 0.04: ok; 0.5 s is 0.05: degraded (at the share).
        assert_eq!(state(held(4e8, Some(10.0))), Some(Health::Ok));
        assert_eq!(state(held(5e8, Some(10.0))), Some(Health::Degraded));
        // Without the window's length any violation time counts, as before.
        assert_eq!(state(held(1e6, None)), Some(Health::Degraded));
        // A share of 0 makes any rise degraded.
        let strict = HealthConfig {
            degraded_violation_share: 0.0,
        };
        assert_eq!(
            classify(&held(1e6, Some(10.0)), &strict).map(|f| f.health),
            Some(Health::Degraded)
        );
        assert!(HealthConfig::default().validate("verdict.health.").is_ok());
        let bad = HealthConfig {
            degraded_violation_share: 1.5,
        };
        let e = bad.validate("verdict.health.").unwrap_err();
        assert!(
            e[0].to_string()
                .contains("verdict.health.degraded_violation_share"),
            "{e:?}"
        );
    }

    #[test]
    fn violation_time_from_the_violation_counters_else_the_clock_event_reasons() {
        let mut r = Readings::default();
        assert_eq!(violation_ns(&r), None);
        r.set_value(Field::ClockEventSwPowerCapNs, 100.0);
        r.set_value(Field::ClockEventSyncBoostNs, 1000.0);
        r.set_value(Field::ClockEventHwThermalNs, 20.0);
        // Sync boost is no power nor thermal cap: 100 + 20.
        assert_eq!(violation_ns(&r), Some(120.0));
        r.set_value(Field::ThermalViolationNs, 7.0);
        // The violation counters win where either is read.
        assert_eq!(violation_ns(&r), Some(7.0));
        r.set_value(Field::PowerViolationNs, 5.0);
        assert_eq!(violation_ns(&r), Some(12.0));
        let both = Field::set_of(&[Field::PowerViolationNs, Field::ThermalViolationNs]);
        assert_eq!(violation(&r), Some((12.0, both)));
        r.set(Field::ThermalViolationNs, crate::model::Reading::Blank);
        assert_eq!(
            violation(&r),
            Some((5.0, Field::set_of(&[Field::PowerViolationNs])))
        );
    }

    /// A field outside [`INPUT_FIELDS`], whatever its value, gives health nothing to judge:
    /// the tracker skips windows without any of them.
    #[test]
    fn fields_outside_the_inputs_are_not_judged() {
        for &field in Field::ALL {
            let inside = Field::set_of(&[field]) & INPUT_FIELDS != 0;
            for v in [0.0, 1.0, 48.0, 79.0, 1e9] {
                let mut r = Readings::default();
                r.set_value(field, v);
                assert_eq!(r.any_filled(INPUT_FIELDS), inside, "{field:?}");
                if inside {
                    continue;
                }
                let i = HealthInputs::from_readings(&r);
                assert!(!i.anything(), "{field:?} = {v}");
                assert_eq!(violation_ns(&r), None, "{field:?}");
                assert_ne!(field, Field::EccSbeVolatile);
            }
        }
    }
}
