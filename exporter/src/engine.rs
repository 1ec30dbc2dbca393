//! The serving engine's own view: scrape the inference server's Prometheus endpoint in the
//! same pod (vLLM, SGLang or TGI) on the sampler thread, with the GPU sample's clock, and
//! turn it into a [`ServingSnapshot`].
//!
//! - Counters become rates over the window between two scrapes; a counter that went down
//!   was reset (engine restart) and its new value is the increase since.
//! - An engine that cannot be read is reported absent with the reason, never as zeros.
//! - NaN or infinite values are dropped (that quantity is absent), never exported.
//!
//! The name mapping is in `docs/serving-engines.md`.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;
use truthscale_core::gpus::GpuSpec;
use truthscale_core::model::ServingSnapshot;

/// The default engine endpoint: vLLM's and SGLang's default port in the same pod.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8000/metrics";

/// Largest body read from the engine.
const MAX_BODY: u64 = 16 << 20;

/// `[engine]` in the configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Scrape the serving engine with every GPU sample.
    pub enabled: bool,
    /// The engine's Prometheus endpoint.
    pub url: String,
    /// Timeout of one scrape (kept short: it runs on the sampler thread).
    pub timeout: String,
    /// The model's parameter count (e.g. 8e9), for MFU and MBU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_params: Option<f64>,
    /// The weights' dtype: fp32, bf16, fp16, fp8, int8 or int4, for MFU and MBU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_dtype: Option<String>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            enabled: false,
            url: DEFAULT_URL.to_string(),
            timeout: "250ms".to_string(),
            model_params: None,
            model_dtype: None,
        }
    }
}

/// A weight dtype, with its bytes per parameter and the peak its matmuls run at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// 4 bytes, FP32 (non-tensor) peak.
    Fp32,
    /// 2 bytes, BF16 dense tensor peak.
    Bf16,
    /// 2 bytes, FP16 dense tensor peak (the catalog's BF16 figure).
    Fp16,
    /// 1 byte, FP8 dense tensor peak.
    Fp8,
    /// 1 byte, weight-only quantization: matmuls at the BF16 peak.
    Int8,
    /// Half a byte, weight-only quantization: matmuls at the BF16 peak.
    Int4,
}

impl Dtype {
    /// Parse a configuration value.
    #[must_use]
    pub fn parse(s: &str) -> Option<Dtype> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "fp32" | "float32" => Dtype::Fp32,
            "bf16" | "bfloat16" => Dtype::Bf16,
            "fp16" | "float16" | "half" => Dtype::Fp16,
            "fp8" | "float8" => Dtype::Fp8,
            "int8" => Dtype::Int8,
            "int4" => Dtype::Int4,
            _ => return None,
        })
    }

    /// The configuration name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Fp32 => "fp32",
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
            Dtype::Fp8 => "fp8",
            Dtype::Int8 => "int8",
            Dtype::Int4 => "int4",
        }
    }

    /// Bytes per parameter.
    #[must_use]
    pub fn bytes(self) -> f64 {
        match self {
            Dtype::Fp32 => 4.0,
            Dtype::Bf16 | Dtype::Fp16 => 2.0,
            Dtype::Fp8 | Dtype::Int8 => 1.0,
            Dtype::Int4 => 0.5,
        }
    }

    /// Peak FLOP/s of one GPU for this dtype's matmuls, and the peak's name.
    #[must_use]
    pub fn peak_flops(self, spec: &GpuSpec) -> Option<(f64, &'static str)> {
        match self {
            Dtype::Fp32 => Some((spec.fp32_tflops * 1e12, "fp32")),
            Dtype::Fp8 => spec.fp8_dense_tflops.map(|t| (t * 1e12, "fp8_dense")),
            _ => Some((spec.bf16_dense_tflops * 1e12, "bf16_dense")),
        }
    }
}

/// The model MFU and MBU are computed for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelParams {
    /// Parameter count.
    pub params: f64,
    /// Weight dtype.
    pub dtype: Dtype,
}

/// Validated `[engine]`.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineSettings {
    /// The endpoint.
    pub url: String,
    /// Scrape timeout.
    pub timeout: Duration,
    /// The model, when configured.
    pub model: Option<ModelParams>,
}

impl EngineConfig {
    /// Check the section; `None` when the engine is off.
    ///
    /// # Errors
    /// `(key, message)` for a bad value.
    pub fn validate(&self) -> Result<Option<EngineSettings>, (&'static str, String)> {
        if !self.enabled {
            return Ok(None);
        }
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err((
                "engine.url",
                format!("{:?} is not an http:// or https:// URL", self.url),
            ));
        }
        let timeout = humantime::parse_duration(self.timeout.trim()).map_err(|e| {
            (
                "engine.timeout",
                format!("{:?} is not a duration ({e})", self.timeout),
            )
        })?;
        let model = match (self.model_params, &self.model_dtype) {
            (None, None) => None,
            (Some(p), Some(d)) => {
                if !(p.is_finite() && p > 0.0) {
                    return Err((
                        "engine.model_params",
                        format!("{p} is not a positive count"),
                    ));
                }
                let dtype = Dtype::parse(d).ok_or_else(|| {
                    (
                        "engine.model_dtype",
                        format!("{d:?} is not one of fp32, bf16, fp16, fp8, int8, int4"),
                    )
                })?;
                Some(ModelParams { params: p, dtype })
            }
            (Some(_), None) => {
                return Err((
                    "engine.model_dtype",
                    "is needed with engine.model_params".into(),
                ));
            }
            (None, Some(_)) => {
                return Err((
                    "engine.model_params",
                    "is needed with engine.model_dtype".into(),
                ));
            }
        };
        Ok(Some(EngineSettings {
            url: self.url.clone(),
            timeout,
            model,
        }))
    }
}

/// Which series one engine exposes for each quantity (sums over all label sets).
#[derive(Debug)]
struct Names {
    engine: &'static str,
    kv: &'static [&'static str],
    running: &'static [&'static str],
    waiting: &'static [&'static str],
    prompt_total: &'static [&'static str],
    output_total: &'static [&'static str],
    queue_sum: &'static [&'static str],
    queue_count: &'static [&'static str],
    steps_total: &'static [&'static str],
}

const ENGINES: [Names; 3] = [
    Names {
        engine: "vllm",
        kv: &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        running: &["vllm:num_requests_running"],
        waiting: &["vllm:num_requests_waiting"],
        prompt_total: &["vllm:prompt_tokens_total"],
        output_total: &["vllm:generation_tokens_total"],
        queue_sum: &["vllm:request_queue_time_seconds_sum"],
        queue_count: &["vllm:request_queue_time_seconds_count"],
        steps_total: &["vllm:iteration_tokens_total_count"],
    },
    Names {
        engine: "sglang",
        kv: &["sglang:token_usage"],
        running: &["sglang:num_running_reqs"],
        waiting: &["sglang:num_queue_reqs"],
        prompt_total: &["sglang:prompt_tokens_total"],
        output_total: &["sglang:generation_tokens_total"],
        queue_sum: &["sglang:queue_time_seconds_sum"],
        queue_count: &["sglang:queue_time_seconds_count"],
        steps_total: &[],
    },
    Names {
        engine: "tgi",
        kv: &[],
        running: &["tgi_batch_current_size"],
        waiting: &["tgi_queue_size"],
        prompt_total: &["tgi_request_input_length_sum"],
        output_total: &["tgi_request_generated_tokens_sum"],
        queue_sum: &["tgi_request_queue_duration_sum"],
        queue_count: &["tgi_request_queue_duration_count"],
        steps_total: &[],
    },
];

/// Per-name sums of one scrape. A name with any non-finite series is `None`.
type Parsed = HashMap<String, Option<f64>>;

/// Parse Prometheus text exposition into per-name sums over label sets (the core's one
/// parser). A line that does not parse has no name to count it under and is skipped; a
/// name with any non-finite value is unknown, never a partial sum.
#[must_use]
pub fn parse_text(body: &str) -> HashMap<String, Option<f64>> {
    let mut out: Parsed = HashMap::new();
    for (_, s) in truthscale_core::parse::prom_text::samples(body) {
        let Ok(s) = s else { continue };
        let slot = out.entry(s.name.to_string()).or_insert(Some(0.0));
        *slot = match (*slot, s.value.is_finite()) {
            (Some(sum), true) => Some(sum + s.value),
            _ => None,
        };
    }
    out
}

/// What one scrape read: the engine and its values (counters as totals).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Reading {
    /// Unix milliseconds of the scrape (the GPU sample's clock).
    pub taken_ms: i64,
    /// Index into the engine table.
    engine: usize,
    kv: Option<f64>,
    running: Option<f64>,
    waiting: Option<f64>,
    prompt_total: Option<f64>,
    output_total: Option<f64>,
    queue_sum: Option<f64>,
    queue_count: Option<f64>,
    steps_total: Option<f64>,
}

/// Read an engine's values from a parsed scrape; `None` when no engine's names are there.
fn read(parsed: &Parsed, taken_ms: i64) -> Option<Reading> {
    for (i, n) in ENGINES.iter().enumerate() {
        let present = |names: &[&str]| names.iter().any(|k| parsed.contains_key(*k));
        let get = |names: &[&str]| names.iter().find_map(|k| parsed.get(*k).copied().flatten());
        if !(present(n.kv)
            || present(n.running)
            || present(n.waiting)
            || present(n.prompt_total)
            || present(n.output_total))
        {
            continue;
        }
        return Some(Reading {
            taken_ms,
            engine: i,
            kv: get(n.kv).map(|v| v.clamp(0.0, 1.0)),
            running: get(n.running).filter(|v| *v >= 0.0),
            waiting: get(n.waiting).filter(|v| *v >= 0.0),
            prompt_total: get(n.prompt_total).filter(|v| *v >= 0.0),
            output_total: get(n.output_total).filter(|v| *v >= 0.0),
            queue_sum: get(n.queue_sum).filter(|v| *v >= 0.0),
            queue_count: get(n.queue_count).filter(|v| *v >= 0.0),
            steps_total: get(n.steps_total).filter(|v| *v >= 0.0),
        });
    }
    None
}

/// The increase of a counter from `prev` to `cur`; a decrease is a reset, after which the
/// whole current value is the increase (as Prometheus's `rate()` takes it).
#[must_use]
pub fn increase(prev: f64, cur: f64) -> f64 {
    if cur >= prev { cur - prev } else { cur }
}

/// Turn two readings into a snapshot (rates need both; gauges only the current).
#[must_use]
pub fn derive(prev: Option<&Reading>, cur: &Reading) -> ServingSnapshot {
    let prev = prev.filter(|p| p.engine == cur.engine && p.taken_ms < cur.taken_ms);
    let dt = prev.map(|p| (cur.taken_ms - p.taken_ms) as f64 / 1000.0);
    let delta = |f: fn(&Reading) -> Option<f64>| match (prev.and_then(f), f(cur)) {
        (Some(a), Some(b)) => Some(increase(a, b)),
        _ => None,
    };
    let rate = |f: fn(&Reading) -> Option<f64>| match (delta(f), dt) {
        (Some(d), Some(dt)) if dt > 0.0 => Some(d / dt),
        _ => None,
    };
    let queue_seconds = match (delta(|r| r.queue_sum), delta(|r| r.queue_count)) {
        (Some(s), Some(c)) if c > 0.0 => Some(s / c),
        _ => None,
    };
    ServingSnapshot {
        engine: Some(ENGINES[cur.engine].engine.to_string()),
        kv_cache_utilization: cur.kv,
        running_requests: cur.running,
        queued_requests: cur.waiting,
        queue_seconds,
        prompt_tokens_per_sec: rate(|r| r.prompt_total),
        output_tokens_per_sec: rate(|r| r.output_total),
        batch_size: cur.running,
        max_batch_size: None,
        steps_per_sec: rate(|r| r.steps_total),
        ..ServingSnapshot::default()
    }
}

/// An absent engine: no values, only the reason.
#[must_use]
pub fn absent(reason: String) -> ServingSnapshot {
    ServingSnapshot {
        absent_reason: Some(reason),
        ..ServingSnapshot::default()
    }
}

/// Add MFU and MBU for one GPU of `gpus` that share the engine (tensor parallel), when the
/// model is configured and the GPU model is in the catalog.
pub fn add_utilization(
    s: &mut ServingSnapshot,
    model: &ModelParams,
    spec: Option<&GpuSpec>,
    gpus: usize,
) {
    if s.absent_reason.is_some() {
        return;
    }
    let Some(spec) = spec else { return };
    let n = gpus.max(1) as f64;
    let mut assumptions = format!(
        "params={:e},dtype={},gpus={gpus}",
        model.params,
        model.dtype.as_str()
    );
    let tokens = match (s.prompt_tokens_per_sec, s.output_tokens_per_sec) {
        (None, None) => None,
        (p, o) => Some(p.unwrap_or(0.0) + o.unwrap_or(0.0)),
    };
    if let (Some(t), Some((peak, peak_name))) = (tokens, model.dtype.peak_flops(spec)) {
        s.mfu = Some((2.0 * model.params * t / (peak * n)).clamp(0.0, 1.0));
        assumptions.push_str(&format!(
            ",flops=2*params*tokens,peak={peak_name}_datasheet"
        ));
    }
    if let Some(steps) = s.steps_per_sec {
        let bytes = model.params * model.dtype.bytes();
        s.mbu = Some((bytes * steps / (spec.bandwidth_bytes_per_sec * n)).clamp(0.0, 1.0));
        assumptions.push_str(",weights_read_once_per_step");
    }
    if s.mfu.is_some() || s.mbu.is_some() {
        s.assumptions = Some(assumptions);
    }
}

/// Scrapes one engine, keeping the previous reading for rates.
#[derive(Debug)]
pub struct EngineScraper {
    settings: EngineSettings,
    agent: ureq::Agent,
    prev: Option<Reading>,
}

impl EngineScraper {
    /// A scraper for these settings.
    #[must_use]
    pub fn new(settings: EngineSettings) -> EngineScraper {
        let agent = crate::client::agent(settings.timeout);
        EngineScraper {
            settings,
            agent,
            prev: None,
        }
    }

    /// The model MFU and MBU are computed for, when configured.
    #[must_use]
    pub fn model(&self) -> Option<ModelParams> {
        self.settings.model
    }

    fn fetch(&self) -> Result<String, String> {
        let url = &self.settings.url;
        crate::client::get_text(&self.agent, url, "text/plain", MAX_BODY).map_err(|e| e.to_string())
    }

    /// Scrape now (`taken_ms`: the GPU sample's time) and derive a snapshot. Failures give
    /// an absent snapshot with the reason and forget the previous reading.
    pub fn scrape(&mut self, taken_ms: i64) -> ServingSnapshot {
        let body = match self.fetch() {
            Ok(b) => b,
            Err(reason) => {
                self.prev = None;
                return absent(reason);
            }
        };
        let parsed = parse_text(&body);
        let Some(cur) = read(&parsed, taken_ms) else {
            self.prev = None;
            return absent(format!(
                "no vLLM, SGLang or TGI metrics at {} (is it the engine's /metrics?)",
                self.settings.url
            ));
        };
        let snap = derive(self.prev.as_ref(), &cur);
        self.prev = Some(cur);
        snap
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    fn fixture(name: &str) -> String {
        let p = format!(
            "{}/../tests/fixtures/engines/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    fn reading(name: &str, ms: i64) -> Reading {
        read(&parse_text(&fixture(name)), ms).expect("an engine")
    }

    #[test]
    fn vllm_current_names_and_rates_across_two_scrapes() {
        let a = reading("vllm-v1-a.prom", 1_000);
        let b = reading("vllm-v1-b.prom", 3_000);
        let first = derive(None, &a);
        assert_eq!(first.engine.as_deref(), Some("vllm"));
        assert_eq!(first.kv_cache_utilization, Some(0.42));
        assert_eq!(
            first.prompt_tokens_per_sec, None,
            "a rate needs two scrapes"
        );
        let s = derive(Some(&a), &b);
        // prompt 12000 → 14000, generation 50000 → 51200 over 2 s.
        assert_eq!(s.prompt_tokens_per_sec, Some(1000.0));
        assert_eq!(s.output_tokens_per_sec, Some(600.0));
        // queue: sum 10.0 → 13.0 over count 100 → 110 requests.
        assert_eq!(s.queue_seconds, Some(0.3));
        assert_eq!(s.running_requests, Some(24.0));
        assert_eq!(s.batch_size, Some(24.0));
        assert_eq!(s.queued_requests, Some(3.0));
        assert_eq!(s.kv_cache_utilization, Some(0.93));
        // iteration_tokens_total count 5000 → 5100 engine steps.
        assert_eq!(s.steps_per_sec, Some(50.0));
    }

    #[test]
    fn vllm_old_names() {
        let s = derive(None, &reading("vllm-v0.prom", 0));
        assert_eq!(s.engine.as_deref(), Some("vllm"));
        assert_eq!(s.kv_cache_utilization, Some(0.071));
        assert_eq!(s.running_requests, Some(2.0));
        assert_eq!(s.queued_requests, Some(0.0));
    }

    #[test]
    fn counter_reset_counts_the_new_value() {
        let a = reading("vllm-v1-b.prom", 1_000);
        let b = reading("vllm-v1-reset.prom", 2_000);
        let s = derive(Some(&a), &b);
        // 14000 → 300 after a restart: 300 tokens in 1 s, not −13700.
        assert_eq!(s.prompt_tokens_per_sec, Some(300.0));
        assert_eq!(s.output_tokens_per_sec, Some(150.0));
        assert_eq!(increase(10.0, 4.0), 4.0);
    }

    #[test]
    fn sglang_and_tgi() {
        let a = reading("sglang-a.prom", 0);
        let b = reading("sglang-b.prom", 4_000);
        let s = derive(Some(&a), &b);
        assert_eq!(s.engine.as_deref(), Some("sglang"));
        assert_eq!(s.kv_cache_utilization, Some(0.55));
        assert_eq!(s.prompt_tokens_per_sec, Some(500.0));
        assert_eq!(s.output_tokens_per_sec, Some(250.0));
        assert_eq!(s.queued_requests, Some(5.0));
        let a = reading("tgi-a.prom", 0);
        let b = reading("tgi-b.prom", 2_000);
        let s = derive(Some(&a), &b);
        assert_eq!(s.engine.as_deref(), Some("tgi"));
        assert_eq!(
            s.kv_cache_utilization, None,
            "TGI exposes no KV-cache usage"
        );
        assert_eq!(s.prompt_tokens_per_sec, Some(1024.0));
        assert_eq!(s.output_tokens_per_sec, Some(128.0));
        assert_eq!(s.queue_seconds, Some(0.25));
        assert_eq!(s.batch_size, Some(8.0));
        assert_eq!(s.queued_requests, Some(2.0));
    }

    #[test]
    fn nan_values_are_absent_not_zero() {
        let s = derive(None, &reading("vllm-nan.prom", 0));
        assert_eq!(s.kv_cache_utilization, None);
        assert_eq!(s.running_requests, Some(4.0));
        let j = serde_json::to_string(&s).unwrap();
        assert!(!j.contains("NaN"), "{j}");
    }

    #[test]
    fn non_engine_endpoint_is_not_an_engine() {
        assert!(read(&parse_text(&fixture("not-an-engine.prom")), 0).is_none());
    }

    #[test]
    fn mfu_and_mbu_with_their_assumptions() {
        let spec = truthscale_core::gpus::lookup("h100-sxm").unwrap();
        let mut s = ServingSnapshot {
            engine: Some("vllm".into()),
            prompt_tokens_per_sec: Some(1000.0),
            output_tokens_per_sec: Some(600.0),
            steps_per_sec: Some(50.0),
            ..ServingSnapshot::default()
        };
        let model = ModelParams {
            params: 8e9,
            dtype: Dtype::Bf16,
        };
        add_utilization(&mut s, &model, Some(spec), 1);
        let mfu = 2.0 * 8e9 * 1600.0 / (spec.bf16_dense_tflops * 1e12);
        assert!((s.mfu.unwrap() - mfu).abs() < 1e-12);
        let mbu = 16e9 * 50.0 / spec.bandwidth_bytes_per_sec;
        assert!((s.mbu.unwrap() - mbu).abs() < 1e-12);
        assert_eq!(
            s.assumptions.as_deref(),
            Some(
                "params=8e9,dtype=bf16,gpus=1,flops=2*params*tokens,peak=bf16_dense_datasheet,weights_read_once_per_step"
            )
        );
        let mut absent = absent("down".into());
        add_utilization(&mut absent, &model, Some(spec), 1);
        assert_eq!(absent.mfu, None);
    }

    /// A one-shot HTTP server on 127.0.0.1 answering each connection with the next body.
    fn serve(bodies: Vec<(&'static str, String)>) -> (String, std::thread::JoinHandle<()>) {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", l.local_addr().unwrap());
        let t = std::thread::spawn(move || {
            for (status, body) in bodies {
                let Ok((mut c, _)) = l.accept() else { return };
                let mut buf = [0u8; 2048];
                let _ = c.read(&mut buf);
                let _ = write!(
                    c,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (url, t)
    }

    #[test]
    fn scraper_over_http_rates_failures_and_reasons() {
        let (url, t) = serve(vec![
            ("200 OK", fixture("vllm-v1-a.prom")),
            ("200 OK", fixture("vllm-v1-b.prom")),
            ("404 Not Found", "no".into()),
            ("200 OK", fixture("not-an-engine.prom")),
        ]);
        let mut s = EngineScraper::new(EngineSettings {
            url: url.clone(),
            timeout: Duration::from_secs(2),
            model: None,
        });
        assert_eq!(s.scrape(1_000).absent_reason, None);
        let b = s.scrape(3_000);
        assert_eq!(b.prompt_tokens_per_sec, Some(1000.0));
        assert_eq!(
            s.scrape(4_000).absent_reason,
            Some(format!("{url} answered HTTP 404"))
        );
        let r = s.scrape(5_000).absent_reason.unwrap();
        assert!(r.starts_with("no vLLM, SGLang or TGI metrics at"), "{r}");
        t.join().unwrap();
        // Nothing listens any more.
        let r = s.scrape(6_000);
        assert!(
            r.absent_reason
                .as_deref()
                .unwrap()
                .starts_with(&format!("cannot reach {url}")),
            "{r:?}"
        );
        assert_eq!(r.kv_cache_utilization, None);
    }

    #[test]
    fn config_validation() {
        assert_eq!(EngineConfig::default().validate(), Ok(None));
        let on = EngineConfig {
            enabled: true,
            model_params: Some(8e9),
            model_dtype: Some("bf16".into()),
            ..EngineConfig::default()
        };
        let s = on.validate().unwrap().unwrap();
        assert_eq!(s.url, DEFAULT_URL);
        assert_eq!(s.model.unwrap().dtype, Dtype::Bf16);
        let bad = EngineConfig {
            model_dtype: Some("fp7".into()),
            ..on.clone()
        };
        assert_eq!(bad.validate().unwrap_err().0, "engine.model_dtype");
        let half = EngineConfig {
            model_dtype: None,
            ..on
        };
        assert_eq!(half.validate().unwrap_err().0, "engine.model_dtype");
    }
}
