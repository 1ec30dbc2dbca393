//! Verdicts: is this GPU working, and if not, why not and what would help.
//!
//! Pure: one verdict per entity per window from truthscale's own signals (busy flag,
//! roofline saturation, clock-event reasons) and the serving engine's KV cache and queue.
//! Rules, in order (see `docs/verdicts.md`):
//!
//! | verdict | when |
//! |---|---|
//! | `unavailable` | the GPU's health is unavailable ([`crate::health`]): never idle, never busy |
//! | `unknown` | no busy flag (nor GR engine active) |
//! | `idle` | busy flag `< idle_util`, or below `busy_util` with saturation `< starved_saturation` |
//! | `throttled` | busy and a power or thermal clock-event reason is active |
//! | `blocked` | KV cache `≥ kv_blocked` with at least `queued_min` requests waiting |
//! | `unknown` | busy, but no roofline saturation (no tensor/DRAM counters) |
//! | `starved` | busy flag `≥ busy_util` while roofline saturation `< starved_saturation`, with its cause ([`crate::causes`]) |
//! | `busy` | otherwise: the work is real, compute- or memory-bound |

use crate::causes::{self, Cause, CauseConfig, CauseSignals, Finding};
use crate::gpus::GpuSpec;
use crate::health::{Health, HealthFinding, HealthReason};
use crate::model::{Readings, ServingSnapshot, Throttles};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The verdicts, in a fixed order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Clock-event reasons show power or thermal capping.
    Throttled,
    /// The KV cache is (nearly) full with requests queued.
    Blocked,
    /// The busy flag is high while roofline saturation is low.
    Starved,
    /// Real work, compute- or memory-bound.
    Busy,
    /// Nothing (or almost nothing) running.
    Idle,
    /// Not enough counters to say.
    Unknown,
    /// The GPU cannot take work: a pending or failed row remap, a recovery action asked
    /// for, a fatal XID or a double-bit ECC error ([`crate::health`]).
    Unavailable,
}

impl Verdict {
    /// All verdicts, in label order.
    pub const ALL: [Verdict; 7] = [
        Verdict::Throttled,
        Verdict::Blocked,
        Verdict::Starved,
        Verdict::Busy,
        Verdict::Idle,
        Verdict::Unknown,
        Verdict::Unavailable,
    ];

    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Throttled => "throttled",
            Verdict::Blocked => "blocked",
            Verdict::Starved => "starved",
            Verdict::Busy => "busy",
            Verdict::Idle => "idle",
            Verdict::Unknown => "unknown",
            Verdict::Unavailable => "unavailable",
        }
    }

    /// Index into [`Verdict::ALL`].
    #[must_use]
    pub fn index(self) -> usize {
        self as usize
    }

    /// Parse a label value.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Verdict thresholds (defaults to calibrate, not truths).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerdictConfig {
    /// Below this busy fraction the GPU is idle.
    pub idle_util: f64,
    /// At or above this busy fraction the busy flag counts as high.
    pub busy_util: f64,
    /// Roofline saturation below this, behind a high busy flag, is starved.
    pub starved_saturation: f64,
    /// KV-cache usage at or above this, with requests queued, is blocked.
    pub kv_blocked: f64,
    /// Requests waiting for `blocked`.
    pub queued_min: f64,
    /// The thresholds of the rules that name a starved window's cause.
    pub causes: CauseConfig,
    /// Which GPUs make one job, and when one of them is its straggler.
    pub stragglers: crate::stragglers::StragglerConfig,
    /// The health rules' settings.
    pub health: crate::health::HealthConfig,
}

impl Default for VerdictConfig {
    fn default() -> Self {
        VerdictConfig {
            idle_util: 0.05,
            busy_util: 0.5,
            starved_saturation: 0.25,
            kv_blocked: 0.9,
            queued_min: 1.0,
            causes: CauseConfig::default(),
            stragglers: crate::stragglers::StragglerConfig::default(),
            health: crate::health::HealthConfig::default(),
        }
    }
}

impl VerdictConfig {
    /// Every threshold in range and in order (keys are `<prefix>name`).
    ///
    /// # Errors
    /// Each problem, naming its key.
    pub fn validate(&self, prefix: &str) -> Result<(), Vec<crate::phase::InvalidSetting>> {
        let mut c = crate::phase::Checker::new(prefix);
        c.range("idle_util", self.idle_util, 0.0, 1.0);
        c.range("busy_util", self.busy_util, 0.0, 1.0);
        c.range("starved_saturation", self.starved_saturation, 0.0, 1.0);
        c.range("kv_blocked", self.kv_blocked, 0.0, 1.0);
        c.range("queued_min", self.queued_min, 0.0, 1e9);
        c.below(
            "idle_util",
            self.idle_util,
            "busy_util",
            self.busy_util,
            "a busy flag cannot be idle and high at once",
        );
        let own = c.finish();
        let of_causes = self.causes.validate(&format!("{prefix}causes."));
        let of_stragglers = self.stragglers.validate(&format!("{prefix}stragglers."));
        let of_health = self.health.validate(&format!("{prefix}health."));
        let problems: Vec<_> = [own, of_causes, of_stragglers, of_health]
            .into_iter()
            .filter_map(Result::err)
            .flatten()
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

/// What a verdict is decided from.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct VerdictInputs<'a> {
    /// Busy flag (or GR engine active).
    pub util: Option<f64>,
    /// Roofline saturation `max(C, d)`.
    pub saturation: Option<f64>,
    /// Tensor pipe active.
    pub tensor: Option<f64>,
    /// DRAM bandwidth fraction.
    pub dram: Option<f64>,
    /// Clock-event reasons, when known.
    pub throttles: Option<Throttles>,
    /// The serving engine's view, when scraped.
    pub serving: Option<&'a ServingSnapshot>,
    /// The window's sanitized readings and the GPU's model, which a starved window's cause
    /// is decided from (read only for a starved window).
    pub readings: Option<(&'a Readings, Option<&'static GpuSpec>)>,
    /// The window's health ([`crate::health::classify`]), when anything of it was read.
    pub health: Option<HealthFinding>,
}

/// A verdict with its reasons, what was missing, and one suggested action, as text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictResult {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in plain language.
    pub reasons: Vec<String>,
    /// What was not measured, and how to get it.
    pub missing: Vec<String>,
    /// One suggested action.
    pub action: String,
    /// A starved window's cause (absent for any other verdict).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

/// A verdict and the numbers it was decided from. Nothing is formatted until a reader asks
/// ([`Decision::explain`], or [`Reason`]'s `Display`): deriving a window costs no text.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// Why.
    pub reason: Reason,
    /// What was not measured.
    pub missing: Missing,
}

impl Default for Decision {
    /// `unknown`, with nothing measured.
    fn default() -> Self {
        Decision {
            verdict: Verdict::Unknown,
            reason: Reason::NoBusyFlag,
            missing: Missing {
                busy_flag: true,
                engine_not_configured: true,
                engine_absent: None,
                clock_events: true,
                profiling: true,
                tensor_counter: true,
                dram_counter: true,
            },
        }
    }
}

/// Why a verdict was reached, with the numbers that decided it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reason {
    /// The GPU's health is unavailable.
    Unavailable {
        /// Why.
        health: HealthReason,
    },
    /// No busy flag.
    NoBusyFlag,
    /// The busy flag is under `idle_util`.
    Idle {
        /// Busy flag.
        util: f64,
        /// The threshold.
        idle_util: f64,
    },
    /// The busy flag is under `busy_util` and saturation under `starved_saturation`.
    MostlyIdle {
        /// Busy flag.
        util: f64,
        /// Roofline saturation.
        saturation: f64,
    },
    /// Power or thermal clock-event reasons while busy.
    Throttled {
        /// The reasons reported.
        throttles: Throttles,
        /// Busy flag.
        util: f64,
    },
    /// The KV cache is (nearly) full with requests queued.
    Blocked {
        /// KV-cache usage.
        kv: f64,
        /// Requests queued.
        queued: f64,
    },
    /// Busy, but no roofline saturation.
    NoSaturation {
        /// Busy flag.
        util: f64,
    },
    /// A high busy flag with low roofline saturation.
    Starved {
        /// Busy flag.
        util: f64,
        /// Roofline saturation.
        saturation: f64,
        /// Tensor and DRAM activity, when both were read.
        pipes: Option<(f64, f64)>,
        /// The engine's KV-cache usage, when known.
        kv: Option<f64>,
        /// Why it waits.
        cause: Finding,
    },
    /// Real work.
    Busy {
        /// Busy flag.
        util: f64,
        /// Roofline saturation.
        saturation: f64,
        /// Tensor and DRAM activity, when both were read.
        pipes: Option<(f64, f64)>,
        /// The engine's KV-cache usage, when known.
        kv: Option<f64>,
    },
}

/// What a verdict could not use.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Missing {
    /// No busy flag.
    pub busy_flag: bool,
    /// No serving engine configured.
    pub engine_not_configured: bool,
    /// Why the configured serving engine gave no data.
    pub engine_absent: Option<String>,
    /// No clock-event reasons.
    pub clock_events: bool,
    /// No roofline saturation (no profiling counters).
    pub profiling: bool,
    /// Of the two counters roofline saturation needs, the tensor activity was not read.
    pub tensor_counter: bool,
    /// Of the two counters roofline saturation needs, the DRAM activity was not read.
    pub dram_counter: bool,
}

impl Missing {
    /// Each missing input and how to get it, in a fixed order.
    #[must_use]
    pub fn lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.busy_flag {
            v.push(
                "busy flag: no GPU utilization reading (NVML or DCGM_FI_DEV_GPU_UTIL; a MIG \
                 instance has none, and its graphics-engine activity, DCGM field 1001, stands in)"
                    .to_string(),
            );
        }
        if self.engine_not_configured {
            v.push(
                "serving engine: not configured; set [engine] url to read vLLM, SGLang or TGI"
                    .to_string(),
            );
        }
        if let Some(r) = &self.engine_absent {
            v.push(format!("serving engine: {r}"));
        }
        if self.clock_events {
            v.push("clock-event reasons: not reported by this source".to_string());
        }
        if self.profiling {
            v.push(self.saturation_line().to_string());
        }
        v
    }

    /// What roofline saturation lacked: both counters, the one not read, or, with both
    /// read, a window whose readings gave none (refused, or not observed).
    fn saturation_line(&self) -> &'static str {
        match (self.tensor_counter, self.dram_counter) {
            (true, true) => NO_PROFILING,
            (true, false) => {
                "roofline saturation: no tensor activity reading (DCGM profiling field 1004 or \
                 NVML GPM); the DRAM activity was read"
            }
            (false, true) => {
                "roofline saturation: no DRAM activity reading (DCGM profiling field 1005 or \
                 NVML GPM); the tensor activity was read"
            }
            (false, false) => {
                "roofline saturation: none from this window's readings (see the diagnostics)"
            }
        }
    }

    /// What to do where no roofline saturation decided the verdict and one of its two
    /// counters was read: collect the other. `None` otherwise ([`Reason::action`]'s).
    fn saturation_action(&self) -> Option<&'static str> {
        match (self.tensor_counter, self.dram_counter) {
            (true, false) => Some(
                "collect the tensor activity counter (DCGM field 1004, or NVML GPM) to tell busy from starved",
            ),
            (false, true) => Some(
                "collect the DRAM activity counter (DCGM field 1005, or NVML GPM) to tell busy from starved",
            ),
            _ => None,
        }
    }
}

/// A fraction as a whole percentage (`0.25` → `25 %`).
struct Pct(f64);

impl fmt::Display for Pct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.0} %", self.0 * 100.0)
    }
}

/// ` (tensor 25 %, DRAM 50 %)`, or nothing.
struct Pipes(Option<(f64, f64)>);

impl fmt::Display for Pipes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((t, d)) => write!(f, " (tensor {}, DRAM {})", Pct(t), Pct(d)),
            None => Ok(()),
        }
    }
}

/// Compute- or memory-bound from the tensor and DRAM activity.
fn bound(pipes: Option<(f64, f64)>) -> &'static str {
    match pipes {
        Some((t, d)) if d > t => "memory-bound",
        Some(_) => "compute-bound",
        None => "working",
    }
}

/// The capping reasons of a throttled window (sync boost is not one).
fn capping_names(t: &Throttles) -> String {
    let names: Vec<&str> = t
        .names()
        .into_iter()
        .filter(|n| *n != "sync_boost")
        .collect();
    names.join(", ")
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Reason::Unavailable { health } => {
                write!(
                    f,
                    "unavailable: {health}; its work and its counters do not count"
                )
            }
            Reason::NoBusyFlag => f.write_str("no busy flag, so not even idle can be told"),
            Reason::Idle { util, idle_util } => {
                write!(f, "busy flag {} (below {})", Pct(util), Pct(idle_util))
            }
            Reason::MostlyIdle { util, saturation } => write!(
                f,
                "mostly idle: busy flag {} and roofline saturation {}",
                Pct(util),
                Pct(saturation)
            ),
            Reason::Throttled { throttles, util } => write!(
                f,
                "clocks capped by {} while busy ({})",
                capping_names(&throttles),
                Pct(util)
            ),
            Reason::Blocked { kv, queued } => write!(
                f,
                "KV cache {} used with {queued:.0} requests queued",
                Pct(kv)
            ),
            Reason::NoSaturation { util } => write!(
                f,
                "busy flag {} but no roofline saturation, so real work cannot be told from waiting",
                Pct(util)
            ),
            Reason::Starved {
                util,
                saturation,
                pipes,
                ..
            } => write!(
                f,
                "busy flag {} but roofline saturation only {}{}: kernels are resident, the math and memory units mostly wait",
                Pct(util),
                Pct(saturation),
                Pipes(pipes)
            ),
            Reason::Busy {
                util,
                saturation,
                pipes,
                ..
            } => write!(
                f,
                "busy flag {}, roofline saturation {}{}: real work, {}",
                Pct(util),
                Pct(saturation),
                Pipes(pipes),
                bound(pipes)
            ),
        }
    }
}

impl Reason {
    /// The one suggested action.
    #[must_use]
    pub fn action(&self) -> String {
        let s = match *self {
            Reason::Unavailable { health } => unavailable_action(health),
            Reason::NoBusyFlag => {
                "collect GPU utilization (NVML, or dcgm-exporter with DCGM_FI_DEV_GPU_UTIL; for a MIG instance, DCGM_FI_PROF_GR_ENGINE_ACTIVE)"
            }
            Reason::Idle { .. } => "give this GPU work or release it",
            Reason::MostlyIdle { .. } => {
                "send more traffic to this GPU, or share it (MIG or fewer replicas)"
            }
            Reason::Throttled { throttles, .. } => {
                if throttles.thermal || throttles.hw_slowdown {
                    "check cooling and airflow: the GPU slows itself down to stay within temperature"
                } else {
                    "check the power limit (nvidia-smi -q -d POWER): the GPU is held below its clocks by power"
                }
            }
            Reason::Blocked { .. } => {
                "add KV-cache room: more GPU memory for the cache, a shorter max context, KV quantization, or another replica"
            }
            Reason::NoSaturation { .. } => {
                "enable profiling counters (DCGM fields 1004 and 1005, or NVML GPM) to tell busy from starved"
            }
            Reason::Starved { cause, .. } if cause.cause != Cause::Unknown => {
                return cause.advice();
            }
            Reason::Starved { kv, .. } => match kv {
                Some(kv) if kv < 0.5 => {
                    return format!("batch more: the KV cache is {} used", Pct(kv));
                }
                _ => {
                    "feed it faster or more at once: larger batches, more data-loader workers, \
                     mixed precision (bf16) so the tensor cores do the math"
                }
            },
            Reason::Busy { kv, pipes, .. } => match kv {
                Some(kv) if kv < 0.5 && bound(pipes) == "memory-bound" => {
                    return format!("batch more: the KV cache is {} used", Pct(kv));
                }
                _ => "nothing urgent: this GPU does real work",
            },
        };
        s.to_string()
    }
}

impl Decision {
    /// The cause of a starved window (`None` for any other verdict).
    #[must_use]
    pub fn cause(&self) -> Option<Finding> {
        match self.reason {
            Reason::Starved { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// The reasons, what was missing and the action, as text.
    #[must_use]
    pub fn explain(&self) -> VerdictResult {
        let mut reasons = vec![self.reason.to_string()];
        reasons.extend(self.cause().map(|c| format!("the wait is {c}")));
        VerdictResult {
            verdict: self.verdict,
            reasons,
            missing: self.missing.lines(),
            action: match (self.reason, self.missing.saturation_action()) {
                (Reason::NoSaturation { .. }, Some(action)) => action.to_string(),
                _ => self.reason.action(),
            },
            cause: self.cause().map(|c| c.cause),
        }
    }
}

const NO_PROFILING: &str = "roofline saturation: needs the tensor and DRAM activity counters \
     (DCGM profiling fields 1004/1005 or NVML GPM); run `truthscale doctor`";

/// What to do about an unavailable GPU.
fn unavailable_action(health: HealthReason) -> &'static str {
    match health {
        HealthReason::RowRemapPending => {
            "drain the GPU and reset it (nvidia-smi -r) to apply the pending row remap"
        }
        HealthReason::RowRemapFailed | HealthReason::MemoryUnrepairable => {
            "drain the GPU and have it serviced: its memory cannot be repaired in the field"
        }
        HealthReason::FabricUnhealthy => {
            "drain the GPU and check its NVLink fabric (the fabric manager, NVSwitches, links)"
        }
        HealthReason::RecoveryAction(2.0) => "drain the node and reboot it, as the driver asks",
        _ => {
            "drain the GPU and reset it (or reboot the node, as the driver asks); see docs/runbooks.md"
        }
    }
}

/// Decide the verdict of one window, with its reasons as text.
#[must_use]
pub fn decide(i: &VerdictInputs<'_>, cfg: &VerdictConfig) -> VerdictResult {
    judge(i, cfg).explain()
}

/// Decide the verdict of one window, keeping its reasons as numbers.
#[must_use]
#[inline(always)]
pub fn judge(i: &VerdictInputs<'_>, cfg: &VerdictConfig) -> Decision {
    let serving = i.serving.filter(|s| s.absent_reason.is_none());
    let missing = Missing {
        busy_flag: i.util.is_none(),
        engine_not_configured: i.serving.is_none(),
        engine_absent: i.serving.and_then(|s| s.absent_reason.clone()),
        clock_events: i.throttles.is_none(),
        profiling: i.saturation.is_none(),
        tensor_counter: i.tensor.is_none(),
        dram_counter: i.dram.is_none(),
    };
    let (verdict, reason) = reason(i, serving, cfg);
    Decision {
        verdict,
        reason,
        missing,
    }
}

#[inline(always)]
fn reason(
    i: &VerdictInputs<'_>,
    serving: Option<&ServingSnapshot>,
    cfg: &VerdictConfig,
) -> (Verdict, Reason) {
    if let Some(h) = i.health
        && h.health == Health::Unavailable
    {
        return (
            Verdict::Unavailable,
            Reason::Unavailable { health: h.reason },
        );
    }
    let Some(util) = i.util else {
        return (Verdict::Unknown, Reason::NoBusyFlag);
    };
    let s = i.saturation;
    if util < cfg.idle_util {
        return (
            Verdict::Idle,
            Reason::Idle {
                util,
                idle_util: cfg.idle_util,
            },
        );
    }
    if util < cfg.busy_util
        && let Some(saturation) = s
        && saturation < cfg.starved_saturation
    {
        return (Verdict::Idle, Reason::MostlyIdle { util, saturation });
    }
    if let Some(t) = i.throttles
        && (t.sw_power_cap || t.power || t.thermal || t.hw_slowdown)
    {
        return (Verdict::Throttled, Reason::Throttled { throttles: t, util });
    }
    if let Some(sv) = serving
        && let (Some(kv), Some(queued)) = (sv.kv_cache_utilization, sv.queued_requests)
        && kv >= cfg.kv_blocked
        && queued >= cfg.queued_min
    {
        return (Verdict::Blocked, Reason::Blocked { kv, queued });
    }
    let Some(saturation) = s else {
        return (Verdict::Unknown, Reason::NoSaturation { util });
    };
    let pipes = match (i.tensor, i.dram) {
        (Some(t), Some(d)) => Some((t, d)),
        _ => None,
    };
    let kv = serving.and_then(|sv| sv.kv_cache_utilization);
    if util >= cfg.busy_util && saturation < cfg.starved_saturation {
        return (
            Verdict::Starved,
            Reason::Starved {
                util,
                saturation,
                pipes,
                kv,
                cause: causes::cause(
                    &i.readings
                        .map(|(r, spec)| CauseSignals::from_readings(r, spec))
                        .unwrap_or_default(),
                    &cfg.causes,
                ),
            },
        );
    }
    (
        Verdict::Busy,
        Reason::Busy {
            util,
            saturation,
            pipes,
            kv,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(u: f64, tensor: f64, dram: f64) -> VerdictInputs<'static> {
        VerdictInputs {
            util: Some(u),
            saturation: Some(tensor.max(dram)),
            tensor: Some(tensor),
            dram: Some(dram),
            throttles: Some(Throttles::default()),
            serving: None,
            readings: None,
            health: None,
        }
    }

    /// Without roofline saturation, what is missing names the counter not read, and the
    /// action asks for that one: a capture with the tensor counter and no DRAM counter was
    /// told it needed both and to "enable profiling counters".
    #[test]
    fn no_saturation_names_the_counter_not_read() {
        let cfg = VerdictConfig::default();
        let without = |tensor: Option<f64>, dram: Option<f64>| {
            decide(
                &VerdictInputs {
                    saturation: None,
                    tensor,
                    dram,
                    ..inputs(0.9, 0.0, 0.0)
                },
                &cfg,
            )
        };
        // The last line: the serving engine's comes before it.
        let saturation = |r: &VerdictResult| r.missing.last().cloned().unwrap_or_default();
        let r = without(Some(0.5), None);
        assert_eq!(r.verdict, Verdict::Unknown);
        assert_eq!(
            saturation(&r),
            "roofline saturation: no DRAM activity reading (DCGM profiling field 1005 or NVML GPM); the tensor activity was read"
        );
        assert_eq!(
            r.action,
            "collect the DRAM activity counter (DCGM field 1005, or NVML GPM) to tell busy from starved"
        );
        let r = without(None, Some(0.2));
        assert!(
            saturation(&r).contains("no tensor activity reading"),
            "{r:?}"
        );
        assert!(
            r.action.starts_with("collect the tensor activity counter"),
            "{r:?}"
        );
        let r = without(None, None);
        assert_eq!(saturation(&r), NO_PROFILING);
        assert!(r.action.starts_with("enable profiling counters"), "{r:?}");
        // Both read, none derived (refused, or not observed): no counter to ask for.
        let r = without(Some(0.5), Some(0.2));
        assert_eq!(
            saturation(&r),
            "roofline saturation: none from this window's readings (see the diagnostics)"
        );
    }

    #[test]
    fn saturated_vllm_server_is_busy_not_starved() {
        // busy ~100 %, SM active ~0.8 (occupancy ~12 %), tensor ~0.25, DRAM ~0.5.
        let r = decide(&inputs(1.0, 0.25, 0.5), &VerdictConfig::default());
        assert_eq!(r.verdict, Verdict::Busy);
        assert_eq!(
            r.reasons[0],
            "busy flag 100 %, roofline saturation 50 % (tensor 25 %, DRAM 50 %): real work, memory-bound"
        );
    }

    #[test]
    fn fp32_training_loop_is_starved() {
        let r = decide(&inputs(0.99, 0.015, 0.19), &VerdictConfig::default());
        assert_eq!(r.verdict, Verdict::Starved);
        assert!(r.reasons[0].starts_with("busy flag 99 % but roofline saturation only 19 %"));
        assert!(r.action.contains("mixed precision"));
    }

    #[test]
    fn each_verdict_from_known_inputs() {
        let cfg = VerdictConfig::default();
        assert_eq!(decide(&inputs(0.01, 0.0, 0.0), &cfg).verdict, Verdict::Idle);
        assert_eq!(
            decide(&inputs(0.3, 0.01, 0.02), &cfg).verdict,
            Verdict::Idle
        );
        let mut t = inputs(0.95, 0.4, 0.3);
        t.throttles = Some(Throttles {
            sw_power_cap: true,
            ..Throttles::default()
        });
        let r = decide(&t, &cfg);
        assert_eq!(r.verdict, Verdict::Throttled);
        assert_eq!(
            r.reasons[0],
            "clocks capped by sw_power_cap while busy (95 %)"
        );
        // Sync boost alone is not capping.
        t.throttles = Some(Throttles {
            sync_boost: true,
            ..Throttles::default()
        });
        assert_eq!(decide(&t, &cfg).verdict, Verdict::Busy);

        let full = ServingSnapshot {
            engine: Some("vllm".into()),
            kv_cache_utilization: Some(0.95),
            queued_requests: Some(12.0),
            ..ServingSnapshot::default()
        };
        let mut b = inputs(1.0, 0.2, 0.6);
        b.serving = Some(&full);
        let r = decide(&b, &cfg);
        assert_eq!(r.verdict, Verdict::Blocked);
        assert_eq!(r.reasons[0], "KV cache 95 % used with 12 requests queued");
        // Nothing queued: not blocked.
        let not_queued = ServingSnapshot {
            queued_requests: Some(0.0),
            ..full.clone()
        };
        b.serving = Some(&not_queued);
        assert_eq!(decide(&b, &cfg).verdict, Verdict::Busy);

        let mut u = inputs(0.9, 0.0, 0.0);
        u.saturation = None;
        u.tensor = None;
        u.dram = None;
        let r = decide(&u, &cfg);
        assert_eq!(r.verdict, Verdict::Unknown);
        assert!(r.missing.iter().any(|m| m.contains("truthscale doctor")));
        let none = VerdictInputs::default();
        let r = decide(&none, &cfg);
        assert_eq!(r.verdict, Verdict::Unknown);
        assert!(r.missing[0].starts_with("busy flag"));
    }

    #[test]
    fn starved_with_a_kv_cache_hint_says_batch_more() {
        let low = ServingSnapshot {
            engine: Some("vllm".into()),
            kv_cache_utilization: Some(0.07),
            queued_requests: Some(0.0),
            ..ServingSnapshot::default()
        };
        let mut i = inputs(0.98, 0.05, 0.1);
        i.serving = Some(&low);
        let r = decide(&i, &VerdictConfig::default());
        assert_eq!(r.verdict, Verdict::Starved);
        assert_eq!(r.action, "batch more: the KV cache is 7 % used");
    }

    #[test]
    fn thresholds_are_configurable() {
        let cfg = VerdictConfig {
            starved_saturation: 0.6,
            ..VerdictConfig::default()
        };
        assert_eq!(
            decide(&inputs(1.0, 0.25, 0.5), &cfg).verdict,
            Verdict::Starved
        );
    }

    #[test]
    fn absent_engine_is_missing_with_its_reason() {
        let absent = ServingSnapshot {
            absent_reason: Some("cannot reach http://127.0.0.1:8000/metrics".into()),
            ..ServingSnapshot::default()
        };
        let mut i = inputs(1.0, 0.25, 0.5);
        i.serving = Some(&absent);
        let r = decide(&i, &VerdictConfig::default());
        assert_eq!(
            r.missing,
            vec!["serving engine: cannot reach http://127.0.0.1:8000/metrics".to_string()]
        );
    }

    #[test]
    fn an_unavailable_gpu_is_never_idle_nor_busy() {
        let cfg = VerdictConfig::default();
        let down = crate::health::classify(
            &crate::health::HealthInputs {
                row_remap_pending: Some(1.0),
                ..Default::default()
            },
            &cfg.health,
        );
        for (u, t, d) in [(0.0, 0.0, 0.0), (1.0, 0.9, 0.5), (0.99, 0.01, 0.02)] {
            let i = VerdictInputs {
                health: down,
                ..inputs(u, t, d)
            };
            let r = decide(&i, &cfg);
            assert_eq!(r.verdict, Verdict::Unavailable);
            assert!(r.reasons[0].contains("row remap is pending"), "{r:?}");
            assert!(r.action.contains("reset"));
        }
        // Without a busy flag too.
        let i = VerdictInputs {
            health: down,
            ..VerdictInputs::default()
        };
        assert_eq!(decide(&i, &cfg).verdict, Verdict::Unavailable);
        // Unrepairable memory and an unhealthy fabric each name what to do.
        for (state, action) in [
            (
                crate::health::HealthInputs {
                    memory_unrepairable: Some(1.0),
                    ..Default::default()
                },
                "have it serviced",
            ),
            (
                crate::health::HealthInputs {
                    fabric_health: Some(2.0),
                    ..Default::default()
                },
                "check its NVLink fabric",
            ),
        ] {
            let i = VerdictInputs {
                health: crate::health::classify(&state, &cfg.health),
                ..inputs(0.5, 0.5, 0.5)
            };
            let r = decide(&i, &cfg);
            assert_eq!(r.verdict, Verdict::Unavailable);
            assert!(r.action.contains(action), "{r:?}");
        }
        // A degraded or ok GPU is judged as before.
        let degraded = crate::health::classify(
            &crate::health::HealthInputs {
                sbe_rise: Some(1.0),
                ..Default::default()
            },
            &cfg.health,
        );
        let i = VerdictInputs {
            health: degraded,
            ..inputs(0.01, 0.0, 0.0)
        };
        assert_eq!(decide(&i, &cfg).verdict, Verdict::Idle);
    }
}
