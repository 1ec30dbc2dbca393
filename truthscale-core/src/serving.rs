//! The serving engine's numbers, from its own Prometheus text: which names each engine
//! (vLLM current and older names, SGLang, TGI) uses, counter rates with reset handling,
//! queue time, and MFU/MBU with their assumptions. Pure: the scrape itself is the
//! exporter's (its engine enricher); the text comes in, a [`ServingSnapshot`] goes out.
//!
//! - Counters become rates over the window between two scrapes; a counter that went down
//!   was reset (engine restart) and its new value is the increase since.
//! - An engine that cannot be read is reported absent with the reason, never as zeros.
//! - NaN or infinite values are dropped (that quantity is absent), never exported.

use crate::gpus::GpuSpec;
use crate::model::ServingSnapshot;
use std::collections::HashMap;

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
    /// The engine's own estimate of FLOPs per GPU (a counter), where it exports one.
    flops_total: &'static [&'static str],
    /// The engine's own estimate of bytes read and written per GPU (counters).
    read_bytes_total: &'static [&'static str],
    write_bytes_total: &'static [&'static str],
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
        flops_total: &["vllm:estimated_flops_per_gpu_total"],
        read_bytes_total: &["vllm:estimated_read_bytes_per_gpu_total"],
        write_bytes_total: &["vllm:estimated_write_bytes_per_gpu_total"],
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
        flops_total: &["sglang:estimated_flops_per_gpu_total"],
        read_bytes_total: &["sglang:estimated_read_bytes_per_gpu_total"],
        write_bytes_total: &["sglang:estimated_write_bytes_per_gpu_total"],
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
        flops_total: &[],
        read_bytes_total: &[],
        write_bytes_total: &[],
    },
];

/// Each name's series of one scrape: `(labels, value)`, the labels as one sorted key. A name
/// with any non-finite series is `None`: never a partial sum.
pub type Parsed = HashMap<String, Option<Vec<(String, f64)>>>;

/// Parse Prometheus text exposition into each name's series (the core's one parser). A line
/// that does not parse makes its name's family `None`, as a non-finite value does (never a
/// sum without it); one without even a metric name can be no family's and is skipped.
#[must_use]
pub fn parse_text(body: &str) -> Parsed {
    let mut out: Parsed = HashMap::new();
    for (_, line) in crate::parse::prom_text::sample_lines(body) {
        let Ok(s) = crate::parse::prom_text::parse_sample(line) else {
            if let Some(name) = crate::parse::prom_text::metric_name(line) {
                out.insert(name.to_owned(), None);
            }
            continue;
        };
        let slot = out
            .entry(s.name.to_string())
            .or_insert_with(|| Some(Vec::new()));
        match (slot.as_mut(), s.value.is_finite()) {
            (Some(series), true) => {
                let mut labels: Vec<String> =
                    s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                labels.sort();
                series.push((labels.join("\u{1}"), s.value));
            }
            _ => *slot = None,
        }
    }
    out
}

/// A counter's series (an engine's data-parallel ranks, …): each reset is its own.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Counter(Vec<(String, f64)>);

impl Counter {
    /// The increases of the series read both times, summed (a series new this time has no
    /// increase yet), and how many there were; `None` where none was read both times.
    fn since(&self, prev: &Counter) -> Option<(f64, usize)> {
        let mut sum = 0.0;
        let mut n = 0;
        for (k, v) in &self.0 {
            if let Some((_, p)) = prev.0.iter().find(|(pk, _)| pk == k) {
                sum += increase(*p, *v);
                n += 1;
            }
        }
        (n > 0).then_some((sum, n))
    }
}

/// What one scrape read: the engine and its values (counters per series).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Scrape {
    /// Unix milliseconds of the scrape (the GPU sample's clock).
    pub taken_ms: i64,
    /// Index into the engine table.
    engine: usize,
    kv: Option<f64>,
    running: Option<f64>,
    waiting: Option<f64>,
    prompt_total: Option<Counter>,
    output_total: Option<Counter>,
    queue_sum: Option<Counter>,
    queue_count: Option<Counter>,
    steps_total: Option<Counter>,
    flops_total: Option<Counter>,
    read_bytes_total: Option<Counter>,
    write_bytes_total: Option<Counter>,
}

/// Read an engine's values from a parsed scrape; `None` when no engine's names are there.
/// Counts (requests running, waiting) are summed over the series; the KV-cache use, a ratio
/// each engine rank has of its own cache, is their mean; counters stay per series.
pub fn read(parsed: &Parsed, taken_ms: i64) -> Option<Scrape> {
    for (i, n) in ENGINES.iter().enumerate() {
        let present = |names: &[&str]| names.iter().any(|k| parsed.contains_key(*k));
        let series = |names: &[&str]| names.iter().find_map(|k| parsed.get(*k).cloned().flatten());
        if !(present(n.kv)
            || present(n.running)
            || present(n.waiting)
            || present(n.prompt_total)
            || present(n.output_total))
        {
            continue;
        }
        let sum = |names: &[&str]| {
            series(names)
                .map(|s| s.iter().map(|(_, v)| v).sum::<f64>())
                .filter(|v| v.is_finite() && *v >= 0.0)
        };
        let mean = |names: &[&str]| {
            series(names)
                .filter(|s| !s.is_empty())
                .map(|s| s.iter().map(|(_, v)| v.clamp(0.0, 1.0)).sum::<f64>() / s.len() as f64)
        };
        let counter = |names: &[&str]| {
            series(names)
                .filter(|s| s.iter().all(|(_, v)| *v >= 0.0))
                .map(Counter)
        };
        return Some(Scrape {
            taken_ms,
            engine: i,
            kv: mean(n.kv),
            running: sum(n.running),
            waiting: sum(n.waiting),
            prompt_total: counter(n.prompt_total),
            output_total: counter(n.output_total),
            queue_sum: counter(n.queue_sum),
            queue_count: counter(n.queue_count),
            steps_total: counter(n.steps_total),
            flops_total: counter(n.flops_total),
            read_bytes_total: counter(n.read_bytes_total),
            write_bytes_total: counter(n.write_bytes_total),
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
pub fn derive(prev: Option<&Scrape>, cur: &Scrape) -> ServingSnapshot {
    let prev = prev.filter(|p| p.engine == cur.engine && p.taken_ms < cur.taken_ms);
    let dt = prev.map(|p| (cur.taken_ms - p.taken_ms) as f64 / 1000.0);
    // Each series' increase (its own resets), summed over the series read both times.
    let since = |f: fn(&Scrape) -> Option<&Counter>| f(cur)?.since(f(prev?)?);
    let delta = |f: fn(&Scrape) -> Option<&Counter>| since(f).map(|(d, _)| d);
    let per_second = |d: f64| match dt {
        Some(dt) if dt > 0.0 => Some(d / dt).filter(|r| r.is_finite()),
        _ => None,
    };
    let rate = |f: fn(&Scrape) -> Option<&Counter>| delta(f).and_then(per_second);
    // The engine's own estimates are per GPU already: each rank's, averaged.
    let per_gpu =
        |f: fn(&Scrape) -> Option<&Counter>| since(f).and_then(|(d, n)| per_second(d / n as f64));
    // A histogram's count moves by whole requests: an increase below one is no request
    // (and its mean no measurement: 1e307 s over 1e-300 requests is infinite).
    let queue_seconds = match (
        delta(|r| r.queue_sum.as_ref()),
        delta(|r| r.queue_count.as_ref()),
    ) {
        (Some(s), Some(c)) if c >= 1.0 => Some(s / c).filter(|q| q.is_finite()),
        _ => None,
    };
    ServingSnapshot {
        engine: Some(ENGINES[cur.engine].engine.to_string()),
        kv_cache_utilization: cur.kv,
        running_requests: cur.running,
        queued_requests: cur.waiting,
        queue_seconds,
        prompt_tokens_per_sec: rate(|r| r.prompt_total.as_ref()),
        output_tokens_per_sec: rate(|r| r.output_total.as_ref()),
        batch_size: cur.running,
        max_batch_size: None,
        steps_per_sec: rate(|r| r.steps_total.as_ref()),
        engine_flops_per_sec: per_gpu(|r| r.flops_total.as_ref()),
        // Read and written, both or neither: one alone is not the traffic.
        engine_bytes_per_sec: per_gpu(|r| r.read_bytes_total.as_ref())
            .zip(per_gpu(|r| r.write_bytes_total.as_ref()))
            .map(|(r, w)| r + w)
            .filter(|b| b.is_finite()),
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
    // Prompt plus output tokens; where the engine reports only one of them, that one, and
    // the assumptions say so (a missing rate is never a zero).
    let tokens = match (s.prompt_tokens_per_sec, s.output_tokens_per_sec) {
        (Some(p), Some(o)) => Some(p + o).filter(|t| t.is_finite()),
        (Some(p), None) => {
            assumptions.push_str(",tokens=prompt_only");
            Some(p)
        }
        (None, Some(o)) => {
            assumptions.push_str(",tokens=output_only");
            Some(o)
        }
        (None, None) => None,
    };
    if let (Some(t), Some((peak, peak_name))) = (tokens, model.dtype.peak_flops(spec)) {
        s.mfu = fraction(2.0 * model.params * t / (peak * n));
        if s.mfu.is_some() {
            assumptions.push_str(&format!(
                ",flops=2*params*tokens,peak={peak_name}_datasheet"
            ));
        }
    }
    if let Some(steps) = s.steps_per_sec {
        let bytes = model.params * model.dtype.bytes();
        s.mbu = fraction(bytes * steps / (spec.bandwidth_bytes_per_sec * n));
        if s.mbu.is_some() {
            assumptions.push_str(",weights_read_once_per_step");
        }
    }
    if s.mfu.is_some() || s.mbu.is_some() {
        s.assumptions = Some(assumptions);
    }
}

/// A model-based utilization as a fraction: clamped into [0, 1] as the KV-cache gauge is,
/// absent where it overflowed (an infinite product is no estimate, not a made-up 1).
fn fraction(x: f64) -> Option<f64> {
    x.is_finite().then(|| x.clamp(0.0, 1.0))
}

/// The engine's own FLOP and byte estimates per GPU over the GPU's datasheet peaks (dense
/// BF16, or the configured dtype's peak; DRAM bandwidth): a model-based MFU and MBU that
/// come from the engine itself, beside truthscale's counter-based ones.
pub fn add_engine_estimates(s: &mut ServingSnapshot, spec: Option<&GpuSpec>, dtype: Option<Dtype>) {
    if s.absent_reason.is_some() {
        return;
    }
    let Some(spec) = spec else { return };
    let dtype = dtype.unwrap_or(Dtype::Bf16);
    if let (Some(f), Some((peak, name))) = (s.engine_flops_per_sec, dtype.peak_flops(spec)) {
        s.engine_mfu = Some(f / peak);
        s.engine_assumptions = Some(format!("flops=engine_estimate,peak={name}_datasheet"));
    }
    if let Some(b) = s.engine_bytes_per_sec {
        s.engine_mbu = Some(b / spec.bandwidth_bytes_per_sec);
        let a = s.engine_assumptions.get_or_insert_with(String::new);
        if !a.is_empty() {
            a.push(',');
        }
        a.push_str("bytes=engine_estimate,peak=dram_datasheet");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line that does not parse blanks its family, as a non-finite value does: rank 1's
    /// `4x` never leaves rank 0's 3 as the running requests; other families are read.
    #[test]
    fn a_malformed_line_blanks_its_family() {
        let body = "vllm:num_requests_running{engine=\"0\"} 3\n\
                    vllm:num_requests_running{engine=\"1\"} 4x\n\
                    vllm:num_requests_waiting 2\n\
                    {broken} 1\n";
        let parsed = parse_text(body);
        assert_eq!(parsed.get("vllm:num_requests_running"), Some(&None));
        let s = read(&parsed, 0).unwrap();
        assert_eq!((s.running, s.waiting), (None, Some(2.0)));
        let name = crate::parse::prom_text::metric_name;
        assert_eq!(name("vllm:x{a=\"b\"} 1"), Some("vllm:x"));
        assert_eq!(name("{broken} 1"), None);
        assert_eq!(name("9x 1"), None);
    }

    fn scrape(flops: f64, read: f64, write: f64, prompt: f64) -> String {
        format!(
            "vllm:num_requests_running 4\nvllm:prompt_tokens_total {prompt}\n\
             vllm:estimated_flops_per_gpu_total {flops}\n\
             vllm:estimated_read_bytes_per_gpu_total {read}\n\
             vllm:estimated_write_bytes_per_gpu_total {write}\n"
        )
    }

    /// Two data-parallel ranks (vLLM's `engine` label): a reset of one is its own (its new
    /// value is its increase, as `rate()` takes it), not the pair's total dropping; the KV
    /// cache use is their mean, never a sum over 1; requests are counted over both; the
    /// engine's per-GPU estimate is each rank's, averaged.
    #[test]
    fn each_rank_is_its_own_series() {
        let body = |p0: f64, p1: f64, f0: f64, f1: f64| {
            format!(
                "vllm:prompt_tokens_total{{engine=\"0\"}} {p0}\nvllm:prompt_tokens_total{{engine=\"1\"}} {p1}\n\
                 vllm:kv_cache_usage_perc{{engine=\"0\"}} 0.46\nvllm:kv_cache_usage_perc{{engine=\"1\"}} 0.46\n\
                 vllm:num_requests_running{{engine=\"0\"}} 3\nvllm:num_requests_running{{engine=\"1\"}} 5\n\
                 vllm:estimated_flops_per_gpu_total{{engine=\"0\"}} {f0}\nvllm:estimated_flops_per_gpu_total{{engine=\"1\"}} {f1}\n"
            )
        };
        let a = read(&parse_text(&body(1e7, 1e7, 0.0, 0.0)), 0).unwrap();
        // 1 s later: rank 0 added 100 tokens; rank 1 restarted and has counted 10 since.
        let b = read(&parse_text(&body(1e7 + 100.0, 10.0, 1e14, 1e14)), 1000).unwrap();
        let s = derive(Some(&a), &b);
        assert_eq!(s.prompt_tokens_per_sec, Some(110.0));
        assert_eq!(s.kv_cache_utilization, Some(0.46));
        assert_eq!(s.running_requests, Some(8.0));
        assert_eq!(
            s.engine_flops_per_sec,
            Some(1e14),
            "each rank's, not their sum"
        );
    }

    /// The engine's own estimates, as rates over the datasheet peaks: 2·10¹⁴ FLOPs and
    /// 1.1·10¹² bytes in 2 s on an H100 SXM.
    #[test]
    fn engine_estimates_over_the_datasheet_peaks() {
        let spec = crate::gpus::by_key("h100-sxm").unwrap();
        let a = read(&parse_text(&scrape(1e15, 1e12, 2e11, 100.0)), 0).unwrap();
        let b = read(&parse_text(&scrape(1.2e15, 2e12, 3e11, 300.0)), 2000).unwrap();
        let mut s = derive(Some(&a), &b);
        assert_eq!(s.engine_flops_per_sec, Some(1e14));
        assert_eq!(s.engine_bytes_per_sec, Some(5e11 + 5e10));
        add_engine_estimates(&mut s, Some(spec), None);
        // Over the H100 SXM's datasheet 989 TFLOP/s and 3.35 TB/s, typed in.
        assert_eq!(s.engine_mfu, Some(1e14 / 989e12));
        assert_eq!(s.engine_mbu, Some(5.5e11 / 3.35e12));
        assert_eq!(
            s.engine_assumptions.as_deref(),
            Some(
                "flops=engine_estimate,peak=bf16_dense_datasheet,bytes=engine_estimate,peak=dram_datasheet"
            )
        );
        // Without the write counter there is no byte rate (one alone is not the traffic),
        // and without the engine's counters nothing at all.
        let only_read = |f: f64, r: f64, t| {
            read(
                &parse_text(&format!(
                    "vllm:num_requests_running 1\nvllm:estimated_flops_per_gpu_total {f}\nvllm:estimated_read_bytes_per_gpu_total {r}\n"
                )),
                t,
            )
            .unwrap()
        };
        let s = derive(Some(&only_read(0.0, 0.0, 0)), &only_read(1.0, 1.0, 1000));
        assert_eq!(s.engine_bytes_per_sec, None);
        let plain = |t| read(&parse_text("vllm:num_requests_running 1\n"), t).unwrap();
        let mut s = derive(Some(&plain(0)), &plain(1000));
        add_engine_estimates(&mut s, Some(spec), None);
        assert_eq!(
            (s.engine_mfu, s.engine_mbu, s.engine_assumptions),
            (None, None, None)
        );
    }
}
