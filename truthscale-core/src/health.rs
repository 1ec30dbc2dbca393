//! Health: whether a GPU can take work at all, a capacity class apart from busy and idle.
//!
//! Pure: one [`Health`] per window from the driver's own error state (last XID, ECC totals,
//! row remapping, the recovery action it asks for) and the time the clocks were held down.
//! Rules, in order (see `docs/verdicts.md`, Health):
//!
//! | health | when |
//! |---|---|
//! | `unavailable` | a row remap is pending or failed; the recovery action is not 0 (none); the last XID is a fatal one ([`FATAL_XIDS`]); or a double-bit ECC error since the driver loaded |
//! | `degraded` | single-bit ECC errors rose in the window, or power or thermal violation time did |
//! | `ok` | something was read and none of the above holds |
//! | none | nothing of the above was read |

use crate::model::{Field, Readings};
use std::fmt;

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
}

impl HealthInputs {
    /// The levels of `r`, without the rises (which need the previous reading).
    #[must_use]
    pub fn from_readings(r: &Readings) -> HealthInputs {
        HealthInputs {
            xid_last: r.value(Field::XidLast),
            dbe_volatile: r.value(Field::EccDbeVolatile),
            row_remap_pending: r.value(Field::RowRemapPending),
            row_remap_failed: r.value(Field::RowRemapFailed),
            recovery_action: r.value(Field::RecoveryAction),
            sbe_rise: None,
            violation_rise_ns: None,
        }
    }

    fn anything(&self) -> bool {
        [
            self.xid_last,
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
pub fn classify(i: &HealthInputs) -> Option<HealthFinding> {
    if !i.anything() {
        return None;
    }
    let on = |v: Option<f64>| v.is_some_and(|v| v > 0.0);
    let fatal = i.xid_last.and_then(fatal_xid);
    let finding = |health, reason| {
        Some(HealthFinding {
            health,
            reason,
            fatal_xid: fatal.is_some(),
        })
    };
    let unavailable = |reason| finding(Health::Unavailable, reason);
    if on(i.row_remap_pending) {
        return unavailable(HealthReason::RowRemapPending);
    }
    if on(i.row_remap_failed) {
        return unavailable(HealthReason::RowRemapFailed);
    }
    if let Some(a) = i.recovery_action.filter(|a| *a > 0.0) {
        return unavailable(HealthReason::RecoveryAction(a));
    }
    if let Some((x, what)) = fatal {
        return unavailable(HealthReason::FatalXid(x, what));
    }
    if let Some(n) = i.dbe_volatile.filter(|n| *n > 0.0) {
        return unavailable(HealthReason::DoubleBitErrors(n));
    }
    let degraded = |reason| finding(Health::Degraded, reason);
    if let Some(n) = i.sbe_rise.filter(|n| *n > 0.0) {
        return degraded(HealthReason::SingleBitErrors(n));
    }
    if let Some(ns) = i.violation_rise_ns.filter(|n| *n > 0.0) {
        return degraded(HealthReason::ViolationTime(ns));
    }
    finding(Health::Ok, HealthReason::Clean)
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
        classify(&i).map(|f| f.health)
    }

    fn clean() -> HealthInputs {
        HealthInputs {
            xid_last: Some(0.0),
            dbe_volatile: Some(0.0),
            row_remap_pending: Some(0.0),
            row_remap_failed: Some(0.0),
            recovery_action: Some(0.0),
            sbe_rise: Some(0.0),
            violation_rise_ns: Some(0.0),
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
        ];
        for c in cases {
            assert_eq!(state(c), Some(Health::Unavailable), "{c:?}");
        }
        for (x, _) in FATAL_XIDS {
            let c = HealthInputs {
                xid_last: Some(f64::from(x)),
                ..HealthInputs::default()
            };
            let f = classify(&c).unwrap();
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
        let f = classify(&c).unwrap();
        assert_eq!(f.reason, HealthReason::RowRemapPending);
        // The fatal XID still makes the profiling readings untrusted.
        assert!(f.profiling_untrusted());
        let remap_only = HealthInputs {
            row_remap_pending: Some(1.0),
            ..clean()
        };
        assert!(!classify(&remap_only).unwrap().profiling_untrusted());
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
        let f = classify(&violation).unwrap();
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
}
