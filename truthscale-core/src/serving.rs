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

/// Per-name sums of one scrape. A name with any non-finite series is `None`.
pub type Parsed = HashMap<String, Option<f64>>;

/// Parse Prometheus text exposition into per-name sums over label sets (the core's one
/// parser). A line that does not parse has no name to count it under and is skipped; a
/// name with any non-finite value is unknown, never a partial sum.
#[must_use]
pub fn parse_text(body: &str) -> HashMap<String, Option<f64>> {
    let mut out: Parsed = HashMap::new();
    for (_, s) in crate::parse::prom_text::samples(body) {
        let Ok(s) = s else { continue };
        let slot = out.entry(s.name.to_string()).or_insert(Some(0.0));
        *slot = match (*slot, s.value.is_finite()) {
            // A sum that overflows is as unknown as a non-finite term.
            (Some(sum), true) => Some(sum + s.value).filter(|v| v.is_finite()),
            _ => None,
        };
    }
    out
}

/// What one scrape read: the engine and its values (counters as totals).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Scrape {
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
    flops_total: Option<f64>,
    read_bytes_total: Option<f64>,
    write_bytes_total: Option<f64>,
}

/// Read an engine's values from a parsed scrape; `None` when no engine's names are there.
pub fn read(parsed: &Parsed, taken_ms: i64) -> Option<Scrape> {
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
        return Some(Scrape {
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
            flops_total: get(n.flops_total).filter(|v| *v >= 0.0),
            read_bytes_total: get(n.read_bytes_total).filter(|v| *v >= 0.0),
            write_bytes_total: get(n.write_bytes_total).filter(|v| *v >= 0.0),
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
    let delta = |f: fn(&Scrape) -> Option<f64>| match (prev.and_then(f), f(cur)) {
        (Some(a), Some(b)) => Some(increase(a, b)),
        _ => None,
    };
    let rate = |f: fn(&Scrape) -> Option<f64>| match (delta(f), dt) {
        (Some(d), Some(dt)) if dt > 0.0 => Some(d / dt).filter(|r| r.is_finite()),
        _ => None,
    };
    // A histogram's count moves by whole requests: an increase below one is no request
    // (and its mean no measurement: 1e307 s over 1e-300 requests is infinite).
    let queue_seconds = match (delta(|r| r.queue_sum), delta(|r| r.queue_count)) {
        (Some(s), Some(c)) if c >= 1.0 => Some(s / c),
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
        engine_flops_per_sec: rate(|r| r.flops_total),
        // Read and written, both or neither: one alone is not the traffic.
        engine_bytes_per_sec: rate(|r| r.read_bytes_total)
            .zip(rate(|r| r.write_bytes_total))
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

    fn scrape(flops: f64, read: f64, write: f64, prompt: f64) -> String {
        format!(
            "vllm:num_requests_running 4\nvllm:prompt_tokens_total {prompt}\n\
             vllm:estimated_flops_per_gpu_total {flops}\n\
             vllm:estimated_read_bytes_per_gpu_total {read}\n\
             vllm:estimated_write_bytes_per_gpu_total {write}\n"
        )
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
        assert_eq!(s.engine_mfu, Some(1e14 / (spec.bf16_dense_tflops * 1e12)));
        assert_eq!(s.engine_mbu, Some(5.5e11 / spec.bandwidth_bytes_per_sec));
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
