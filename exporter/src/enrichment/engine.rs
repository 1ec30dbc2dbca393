//! The serving-engine reader: scrape the inference server's Prometheus endpoint in the
//! same pod (vLLM, SGLang or TGI), on a thread of its own (never the sampler's), and derive
//! the [`ServingSnapshot`] the core's [`truthscale_core::serving`] makes of it, with rates
//! over the reads' own clock. The stage (`enrichment::Engine`) attaches the last fresh one to
//! the GPU samples. The name mapping is in `docs/serving-engines.md`.

use crate::setting::Invalid;
use crate::sources::SourceError;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use truthscale_core::model::ServingSnapshot;
use truthscale_core::serving::{self, Dtype, ModelParams, Scrape};

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
    /// Timeout of one scrape (10ms..=10s; it runs on the engine reader's own thread, so a
    /// slow engine never slows sampling).
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

/// Validated `[engine]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EngineSettings {
    /// The endpoint.
    pub url: String,
    /// Scrape timeout.
    pub timeout: Duration,
    /// The model, when configured.
    pub model: Option<ModelParams>,
}

impl EngineConfig {
    /// Check the section (every value, whether the engine is on or not); `None` when it is
    /// off.
    ///
    /// # Errors
    /// An [`Invalid`] naming the key, for a bad value.
    pub(crate) fn validate(&self) -> Result<Option<EngineSettings>, Invalid> {
        // Every value is checked whether the engine is read or not, so that `config check`
        // refuses a bad one before anyone turns the reader on.
        let shown = crate::client::redact_userinfo(&self.url);
        crate::setting::http_url("engine.url", &self.url, &shown)?;
        let timeout = crate::setting::duration(
            "engine.timeout",
            &self.timeout,
            TIMEOUT_RANGE.0,
            TIMEOUT_RANGE.1,
        )?;
        let model = match (self.model_params, &self.model_dtype) {
            (None, None) => None,
            (Some(p), Some(d)) => {
                check_model_params(p)?;
                let dtype = Dtype::parse(d).ok_or_else(|| {
                    Invalid::new(
                        "engine.model_dtype",
                        format!("{d:?} is not one of fp32, bf16, fp16, fp8, int8, int4"),
                    )
                })?;
                Some(ModelParams { params: p, dtype })
            }
            (Some(_), None) => {
                return Err(Invalid::new(
                    "engine.model_dtype",
                    "is needed with engine.model_params",
                ));
            }
            (None, Some(_)) => {
                return Err(Invalid::new(
                    "engine.model_params",
                    "is needed with engine.model_dtype",
                ));
            }
        };
        Ok(self.enabled.then(|| EngineSettings {
            url: self.url.clone(),
            timeout,
            model,
        }))
    }
}

/// `engine.model_params` within [`crate::setting::MODEL_PARAMS`], checked whether the
/// engine is on or not (so that `config check` refuses it either way).
///
/// # Errors
/// Not finite, or outside the range; the message names both bounds.
pub(crate) fn check_model_params(p: f64) -> Result<(), Invalid> {
    let (key, min, max) = crate::setting::MODEL_PARAMS;
    if !p.is_finite() {
        return Err(Invalid::new(
            key,
            format!("{p} is not a number; use a parameter count in [{min}, {max:e}]"),
        ));
    }
    if !(min..=max).contains(&p) {
        let shown = if p.abs() >= 1e6 {
            format!("{p:e}")
        } else {
            p.to_string()
        };
        return Err(Invalid::new(
            key,
            format!("{shown} is outside [{min}, {max:e}] (a parameter count, e.g. 8e9)"),
        ));
    }
    Ok(())
}

/// `engine.timeout`'s range (the scrape runs on the engine reader's own thread every
/// interval; a slow one is the engine's `timeout`, never the GPU source's overrun).
pub(crate) const TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(10));

/// Why a scrape gave no reading: the error counted by its kind, and the reason the engine's
/// series show (`absent_reason`).
#[derive(Debug)]
pub(crate) struct Failure {
    /// Counted in `truthscale_source_errors_total{source="engine"}` by its kind.
    pub error: SourceError,
    /// What `truthscale_serving_engine_up`'s `absent_reason` says.
    pub reason: String,
}

/// Scrapes one engine, keeping the previous reading for rates.
#[derive(Debug)]
pub(crate) struct EngineScraper {
    settings: EngineSettings,
    agent: ureq::Agent,
    prev: Option<Scrape>,
}

impl EngineScraper {
    /// A scraper for these settings.
    #[must_use]
    pub(crate) fn new(settings: EngineSettings) -> EngineScraper {
        let agent = crate::client::agent(settings.timeout);
        EngineScraper {
            settings,
            agent,
            prev: None,
        }
    }

    /// Scrape now (`taken_ms`: the read's wall time, the clock of its rates) and derive a
    /// snapshot.
    ///
    /// # Errors
    /// A [`Failure`] (unreachable, timeout, http, too large, not an engine's metrics); it
    /// forgets the previous reading, so the next rates wait for two answers in a row.
    pub(crate) fn scrape(&mut self, taken_ms: i64) -> Result<ServingSnapshot, Failure> {
        let url = &self.settings.url;
        // A user and password in the URL are never shown (a reason is a label on /metrics).
        let shown = crate::client::redact_userinfo(url);
        let body = match crate::client::get_text(&self.agent, url, "text/plain", MAX_BODY) {
            Ok(b) => b,
            Err(e) => {
                self.prev = None;
                let reason = e.to_string();
                let error = SourceError::from(e);
                return Err(Failure { reason, error });
            }
        };
        let parsed = serving::parse_text(&body);
        let Some(cur) = serving::read(&parsed, taken_ms) else {
            self.prev = None;
            let reason =
                format!("no vLLM, SGLang or TGI metrics at {shown} (is it the engine's /metrics?)");
            return Err(Failure {
                error: SourceError::Parse(reason.clone()),
                reason,
            });
        };
        let snap = serving::derive(self.prev.as_ref(), &cur);
        self.prev = Some(cur);
        Ok(snap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use truthscale_core::serving::{absent, add_utilization, derive, increase, parse_text, read};

    fn fixture(name: &str) -> String {
        let p = format!(
            "{}/../tests/fixtures/engines/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    fn reading(name: &str, ms: i64) -> Scrape {
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
        // 2 × 8e9 × 1600 FLOP/s over the H100 SXM's 989 TFLOP/s (datasheet, typed in);
        // 16e9 bytes × 50 steps/s over its 3.35 TB/s.
        assert!((s.mfu.unwrap() - 0.025_884_732_052_578).abs() < 1e-12);
        assert!((s.mbu.unwrap() - 0.238_805_970_149_254).abs() < 1e-12);
        assert_eq!(
            s.assumptions.as_deref(),
            Some(
                "params=8e9,dtype=bf16,gpus=1,flops=2*params*tokens,peak=bf16_dense_datasheet,weights_read_once_per_step"
            )
        );
        // The counter-science reference's worked case (§5.2): Llama-2-70B in BF16 over two
        // H100 SXMs (tensor parallel), a 2048-token prefill in 0.31 s and a 37 ms decode
        // step: MFU = 2 × 70e9 × (2048 / 0.31) / (989e12 × 2) = 0.4676, MBU = 140e9 ×
        // (1 / 0.037) / (3.35e12 × 2) = 0.5647. Both divide by the two GPUs' peaks.
        let mut tp = ServingSnapshot {
            engine: Some("vllm".into()),
            prompt_tokens_per_sec: Some(2048.0 / 0.31),
            output_tokens_per_sec: Some(0.0),
            steps_per_sec: Some(1.0 / 0.037),
            ..ServingSnapshot::default()
        };
        let llama = ModelParams {
            params: 70e9,
            dtype: Dtype::Bf16,
        };
        add_utilization(&mut tp, &llama, Some(spec), 2);
        assert!(
            (tp.mfu.unwrap() - 0.467_595_159_659_480).abs() < 1e-12,
            "{tp:?}"
        );
        assert!(
            (tp.mbu.unwrap() - 0.564_743_848_325_938).abs() < 1e-12,
            "{tp:?}"
        );
        assert!(tp.assumptions.unwrap().contains("gpus=2"));
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
        assert_eq!(s.scrape(1_000).unwrap().absent_reason, None);
        let b = s.scrape(3_000).unwrap();
        assert_eq!(b.prompt_tokens_per_sec, Some(1000.0));
        let f = s.scrape(4_000).unwrap_err();
        assert_eq!(f.reason, format!("{url} answered HTTP 404"));
        assert_eq!(f.error.kind(), "http");
        let f = s.scrape(5_000).unwrap_err();
        assert!(
            f.reason.starts_with("no vLLM, SGLang or TGI metrics at"),
            "{}",
            f.reason
        );
        assert_eq!(f.error.kind(), "parse");
        t.join().unwrap();
        // Nothing listens any more.
        let f = s.scrape(6_000).unwrap_err();
        assert!(
            f.reason.starts_with(&format!("cannot reach {url}")),
            "{f:?}"
        );
        assert_eq!(f.error.kind(), "unreachable");
        // A password in the URL is never shown: the reason is a label on /metrics.
        let with_password = url.replacen("http://", "http://admin:s3cr3t@", 1);
        let mut s = EngineScraper::new(EngineSettings {
            url: with_password,
            timeout: Duration::from_secs(2),
            model: None,
        });
        let f = s.scrape(7_000).unwrap_err();
        assert!(!f.reason.contains("s3cr3t"), "{}", f.reason);
        assert!(!f.error.to_string().contains("s3cr3t"), "{}", f.error);
        assert!(f.reason.contains("…@127.0.0.1"), "{}", f.reason);
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
        assert_eq!(bad.validate().unwrap_err().key, "engine.model_dtype");
        let half = EngineConfig {
            model_dtype: None,
            ..on
        };
        assert_eq!(half.validate().unwrap_err().key, "engine.model_dtype");
    }
}
