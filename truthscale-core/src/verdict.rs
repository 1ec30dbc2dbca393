//! Verdicts: is this GPU working, and if not, why not and what would help.
//!
//! Pure: one verdict per entity per window from truthscale's own signals (busy flag,
//! roofline saturation, clock-event reasons) and the serving engine's KV cache and queue.
//! Rules, in order (see `docs/verdicts.md`):
//!
//! | verdict | when |
//! |---|---|
//! | `unknown` | no busy flag (nor GR engine active) |
//! | `idle` | busy flag `< idle_util`, or below `busy_util` with saturation `< starved_saturation` |
//! | `throttled` | busy and a power or thermal clock-event reason is active |
//! | `blocked` | KV cache `≥ kv_blocked` with at least `queued_min` requests waiting |
//! | `unknown` | busy, but no roofline saturation (no tensor/DRAM counters) |
//! | `starved` | busy flag `≥ busy_util` while roofline saturation `< starved_saturation` |
//! | `busy` | otherwise: the work is real, compute- or memory-bound |

use crate::model::{ServingSnapshot, Throttles};
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
}

impl Verdict {
    /// All verdicts, in label order.
    pub const ALL: [Verdict; 6] = [
        Verdict::Throttled,
        Verdict::Blocked,
        Verdict::Starved,
        Verdict::Busy,
        Verdict::Idle,
        Verdict::Unknown,
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
}

impl Default for VerdictConfig {
    fn default() -> Self {
        VerdictConfig {
            idle_util: 0.05,
            busy_util: 0.5,
            starved_saturation: 0.25,
            kv_blocked: 0.9,
            queued_min: 1.0,
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
        c.finish()
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
}

/// A verdict with its reasons, what was missing, and one suggested action.
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
}

fn pct(v: f64) -> String {
    format!("{:.0} %", v * 100.0)
}

const NO_PROFILING: &str = "roofline saturation: needs the tensor and DRAM activity counters \
     (DCGM profiling fields 1004/1005 or NVML GPM); run `truthscale doctor`";

/// Decide the verdict of one window.
#[must_use]
pub fn decide(i: &VerdictInputs<'_>, cfg: &VerdictConfig) -> VerdictResult {
    let mut missing = Vec::new();
    let serving = i.serving.filter(|s| s.absent_reason.is_none());
    match i.serving {
        None => missing.push(
            "serving engine: not configured; set [engine] url to read vLLM, SGLang or TGI"
                .to_string(),
        ),
        Some(s) => {
            if let Some(r) = &s.absent_reason {
                missing.push(format!("serving engine: {r}"));
            }
        }
    }
    if i.throttles.is_none() {
        missing.push("clock-event reasons: not reported by this source".to_string());
    }
    if i.saturation.is_none() {
        missing.push(NO_PROFILING.to_string());
    }
    let result =
        |verdict, reasons: Vec<String>, action: &str, missing: Vec<String>| VerdictResult {
            verdict,
            reasons,
            missing,
            action: action.to_string(),
        };
    let Some(u) = i.util else {
        missing.insert(
            0,
            "busy flag: no GPU utilization reading (NVML or DCGM_FI_DEV_GPU_UTIL)".to_string(),
        );
        return result(
            Verdict::Unknown,
            vec!["no busy flag, so not even idle can be told".to_string()],
            "collect GPU utilization (NVML, or dcgm-exporter with DCGM_FI_DEV_GPU_UTIL)",
            missing,
        );
    };
    let s = i.saturation;
    if u < cfg.idle_util {
        return result(
            Verdict::Idle,
            vec![format!(
                "busy flag {} (below {})",
                pct(u),
                pct(cfg.idle_util)
            )],
            "give this GPU work or release it",
            missing,
        );
    }
    if u < cfg.busy_util
        && let Some(s) = s
        && s < cfg.starved_saturation
    {
        return result(
            Verdict::Idle,
            vec![format!(
                "mostly idle: busy flag {} and roofline saturation {}",
                pct(u),
                pct(s)
            )],
            "send more traffic to this GPU, or share it (MIG or fewer replicas)",
            missing,
        );
    }
    if let Some(t) = i.throttles
        && (t.sw_power_cap || t.power || t.thermal || t.hw_slowdown)
    {
        let names: Vec<&str> = t
            .names()
            .into_iter()
            .filter(|n| *n != "sync_boost")
            .collect();
        let thermal = t.thermal || t.hw_slowdown;
        return result(
            Verdict::Throttled,
            vec![format!(
                "clocks capped by {} while busy ({})",
                names.join(", "),
                pct(u)
            )],
            if thermal {
                "check cooling and airflow: the GPU slows itself down to stay within temperature"
            } else {
                "check the power limit (nvidia-smi -q -d POWER): the GPU is held below its clocks by power"
            },
            missing,
        );
    }
    if let Some(sv) = serving
        && let (Some(kv), Some(q)) = (sv.kv_cache_utilization, sv.queued_requests)
        && kv >= cfg.kv_blocked
        && q >= cfg.queued_min
    {
        return result(
            Verdict::Blocked,
            vec![format!(
                "KV cache {} used with {q:.0} requests queued",
                pct(kv)
            )],
            "add KV-cache room: more GPU memory for the cache, a shorter max context, KV quantization, or another replica",
            missing,
        );
    }
    let Some(s) = s else {
        return result(
            Verdict::Unknown,
            vec![format!(
                "busy flag {} but no roofline saturation, so real work cannot be told from waiting",
                pct(u)
            )],
            "enable profiling counters (DCGM fields 1004 and 1005, or NVML GPM) to tell busy from starved",
            missing,
        );
    };
    let detail = match (i.tensor, i.dram) {
        (Some(t), Some(d)) => format!(" (tensor {}, DRAM {})", pct(t), pct(d)),
        _ => String::new(),
    };
    if u >= cfg.busy_util && s < cfg.starved_saturation {
        let kv_hint = serving.and_then(|sv| sv.kv_cache_utilization);
        let action = match kv_hint {
            Some(kv) if kv < 0.5 => format!("batch more: the KV cache is {} used", pct(kv)),
            _ => "feed it faster or more at once: larger batches, more data-loader workers, \
                  mixed precision (bf16) so the tensor cores do the math"
                .to_string(),
        };
        return VerdictResult {
            verdict: Verdict::Starved,
            reasons: vec![format!(
                "busy flag {} but roofline saturation only {}{detail}: kernels are resident, the math and memory units mostly wait",
                pct(u),
                pct(s)
            )],
            missing,
            action,
        };
    }
    let bound = match (i.tensor, i.dram) {
        (Some(t), Some(d)) if d > t => "memory-bound",
        (Some(_), Some(_)) => "compute-bound",
        _ => "working",
    };
    let action = match serving.and_then(|sv| sv.kv_cache_utilization) {
        Some(kv) if kv < 0.5 && bound == "memory-bound" => {
            format!("batch more: the KV cache is {} used", pct(kv))
        }
        _ => "nothing urgent: this GPU does real work".to_string(),
    };
    VerdictResult {
        verdict: Verdict::Busy,
        reasons: vec![format!(
            "busy flag {}, roofline saturation {}{detail}: real work, {bound}",
            pct(u),
            pct(s)
        )],
        missing,
        action,
    }
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
        }
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
}
