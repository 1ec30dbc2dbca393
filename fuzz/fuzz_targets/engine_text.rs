//! The serving engine's Prometheus text, through the path the engine enricher takes
//! (`serving::parse_text`, `read`, `derive`, `add_utilization`) and the one Prometheus-text
//! parser under it. Input: the first scrape, a NUL byte, the second scrape, a NUL byte,
//! then parameter bytes (milliseconds between the scrapes as a little-endian `i64`, GPUs,
//! weight dtype, GPU model, parameter count).
//!
//! Checks what `serving` documents: no value is NaN or infinite ("dropped, never
//! exported"), the KV-cache utilization and MFU/MBU are fractions, counters give rates
//! that are never negative, rates need two readings, and an engine whose names are absent
//! is no reading at all.

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_core::gpus;
use truthscale_core::model::ServingSnapshot;
use truthscale_core::parse::prom_text;
use truthscale_core::serving::{self, Dtype, ModelParams};

const DTYPES: [Dtype; 6] = [
    Dtype::Fp32,
    Dtype::Bf16,
    Dtype::Fp16,
    Dtype::Fp8,
    Dtype::Int8,
    Dtype::Int4,
];

fn check_prom_text(body: &str) {
    for (line, s) in prom_text::samples(body) {
        if let Ok(s) = s {
            assert!(!s.name.is_empty(), "line {line}: empty name");
            assert!(
                s.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                    && !s.name.starts_with(|c: char| c.is_ascii_digit()),
                "line {line}: name {:?}",
                s.name
            );
            for (k, _) in &s.labels {
                assert!(!k.is_empty(), "line {line}: empty label name");
            }
        }
    }
}

fn check_snapshot(s: &ServingSnapshot, has_prev: bool) {
    let values = [
        ("kv_cache_utilization", s.kv_cache_utilization),
        ("running_requests", s.running_requests),
        ("queued_requests", s.queued_requests),
        ("queue_seconds", s.queue_seconds),
        ("prompt_tokens_per_sec", s.prompt_tokens_per_sec),
        ("output_tokens_per_sec", s.output_tokens_per_sec),
        ("batch_size", s.batch_size),
        ("max_batch_size", s.max_batch_size),
        ("steps_per_sec", s.steps_per_sec),
        ("mfu", s.mfu),
        ("mbu", s.mbu),
    ];
    for (what, v) in values {
        if let Some(v) = v {
            assert!(v.is_finite(), "{what} = {v} is exported");
            assert!(v >= 0.0, "{what} = {v} is negative");
        }
    }
    for (what, v) in [
        ("kv_cache_utilization", s.kv_cache_utilization),
        ("mfu", s.mfu),
        ("mbu", s.mbu),
    ] {
        if let Some(v) = v {
            assert!(v <= 1.0, "{what} = {v} is not a fraction");
        }
    }
    if !has_prev {
        assert!(
            s.prompt_tokens_per_sec.is_none()
                && s.output_tokens_per_sec.is_none()
                && s.steps_per_sec.is_none()
                && s.queue_seconds.is_none(),
            "a rate from one reading: {s:?}"
        );
    }
    assert!(s.engine.is_some() && s.absent_reason.is_none(), "{s:?}");
}

/// The model-based MFU written out from its formula (docs/serving-engines.md): absent
/// where the product is not finite, never a made-up 1; else the product clamped to [0, 1].
fn check_model_utilization(
    s: &ServingSnapshot,
    model: &ModelParams,
    spec: Option<&gpus::GpuSpec>,
    gpus: usize,
) {
    let tokens = match (s.prompt_tokens_per_sec, s.output_tokens_per_sec) {
        (Some(p), Some(o)) => Some(p + o),
        (p, o) => p.or(o),
    };
    let peak = spec.and_then(|g| model.dtype.peak_flops(g));
    let want = match (tokens, peak) {
        (Some(t), Some((peak, _))) => {
            let x = 2.0 * model.params * t / (peak * gpus.max(1) as f64);
            x.is_finite().then(|| x.clamp(0.0, 1.0))
        }
        _ => None,
    };
    assert_eq!(s.mfu, want, "{s:?}");
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |b| *b == 0);
    let first = parts.next().unwrap_or_default();
    let second = parts.next();
    let params = parts.next().unwrap_or_default();
    let byte = |i: usize| params.get(i).copied().unwrap_or(0);
    let dt_ms = match params.get(..8) {
        Some(b) => i64::from_le_bytes(b.try_into().unwrap_or([0; 8])),
        None => 1000,
    };
    let gpus = usize::from(byte(8) % 9);
    let dtype = DTYPES[usize::from(byte(9)) % DTYPES.len()];
    let spec = gpus::lookup(
        ["NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA A100-SXM4-40GB"][usize::from(byte(10)) % 3],
    );
    let model = ModelParams {
        params: [8e9, 7e10, 1.0, 4.05e11][usize::from(byte(11)) % 4],
        dtype,
    };

    let mut prev = None;
    let mut taken_ms = 0i64;
    for (k, body) in std::iter::once(first).chain(second).enumerate() {
        let body = String::from_utf8_lossy(body);
        check_prom_text(&body);
        let parsed = serving::parse_text(&body);
        for (name, v) in &parsed {
            for (_, x) in v.iter().flatten() {
                assert!(x.is_finite(), "{name}: a series' value {x} is not finite");
            }
        }
        if k > 0 {
            taken_ms = taken_ms.saturating_add(dt_ms);
        }
        let Some(cur) = serving::read(&parsed, taken_ms) else {
            prev = None;
            continue;
        };
        let mut snap = serving::derive(prev.as_ref(), &cur);
        check_snapshot(&snap, prev.is_some());
        serving::add_utilization(&mut snap, &model, spec, gpus);
        check_snapshot(&snap, prev.is_some());
        check_model_utilization(&snap, &model, spec, gpus);
        prev = Some(cur);
    }
});
