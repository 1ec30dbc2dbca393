//! The bound where the SM clock is missing (`docs/derivations.md`): a window with the tensor
//! counter and no clock gets `ECF ≤ C × f_max / f_ref` (× 1.1 for a model the catalog does
//! not know), and the capture's bound covers exactly the windows it says. The truth in each
//! test is computed here from the workload the test wrote (its tensor activity, its true
//! clock), never from the deriver; the catalog's clocks are typed in (H100 SXM: reference
//! 1830 MHz, maximum 1980 MHz).

use std::path::PathBuf;
use truthscale_core::analysis::{Analyzer, EntitySummary};
use truthscale_core::derive::{BoundMissing, DeriveConfig};
use truthscale_core::exposition::{self, Encoding, ExporterStatus, GpuEntry, Identity};
use truthscale_core::gpus::{GpuSpec, by_key};
use truthscale_core::model::{Field, Sample, Timestamp};
use truthscale_core::parse::{Format, LineParser};
use truthscale_core::tracker::{Deriver, EntityWindow};

/// H100 SXM's reference and maximum SM clocks, MHz, as `gpus.rs` lists them.
const F_REF: f64 = 1830.0;
const F_MAX: f64 = 1980.0;
/// The clock correction's bound for a model the catalog does not know (`kappa_max`).
const UNKNOWN: f64 = 1.1;
/// Sweeps of the generated capture.
const SWEEPS: u32 = 60;
/// The true SM clock of each GPU of the generated capture (not in the capture): one under
/// a power cap, one at the maximum boost clock (the worst case for the bound).
const TRUE_CLOCK: [f64; 2] = [1755.0, 1980.0];

/// GPU `g`'s tensor activity in sweep `k`, in thousandths (varies per sweep, 0.050 to
/// 0.849 on GPU 0 and 0.100 to 0.899 on GPU 1).
fn tau_milli(g: u32, k: u32) -> u32 {
    50 * (g + 1) + (k * (137 + 64 * g)) % 800
}

/// GPU `g`'s busy flag in sweep `k`, percent.
fn util_percent(g: u32, k: u32) -> u32 {
    if (k + g).is_multiple_of(7) { 40 } else { 95 }
}

/// A `dcgmi dmon -e 203,1001,1002,1003,1004,1005,155` capture without the SM clock, as
/// DCGM v4.6.0 lays it out: the `#Entity` header, the units line (`ID`, ` W` under POWER),
/// then one row per GPU per sweep.
fn clockless_capture() -> String {
    let columns = [
        ("GPUTL", ""),
        ("GRACT", ""),
        ("SMACT", ""),
        ("SMOCC", ""),
        ("TENSO", ""),
        ("DRAMA", ""),
        ("POWER", " W"),
    ];
    let line = |label: &str, cells: &[String]| {
        let mut l = format!("{label:<16}");
        for c in cells {
            l += &format!("{c:<13}");
        }
        l.trim_end().to_owned() + "\n"
    };
    let names: Vec<String> = columns.iter().map(|(n, _)| (*n).to_owned()).collect();
    let units: Vec<String> = columns.iter().map(|(_, u)| (*u).to_owned()).collect();
    let mut text = String::from("$ dcgmi dmon -e 203,1001,1002,1003,1004,1005,155\n");
    text += &line("#Entity", &names);
    text += &line("ID", &units);
    for k in 0..SWEEPS {
        for g in 0..2 {
            let tau = tau_milli(g, k);
            let u = util_percent(g, k);
            let cells = [
                format!("{u}"),
                format!("0.{u:03}"),
                format!("0.{:03}", (tau + 100).min(999)),
                "0.300".to_owned(),
                format!("0.{tau:03}"),
                "0.200".to_owned(),
                format!("{}.000", 200 + tau / 2),
            ];
            text += &line(&format!("GPU {g}"), &cells);
        }
    }
    text
}

/// Parse `text` as `format` (1 s between sweeps or scrapes), skipping malformed lines.
fn samples(format: Format, text: &str) -> Vec<Sample> {
    let mut p = LineParser::new(format, "capture", 1.0, Timestamp(0));
    let mut out = Vec::new();
    for line in text.lines() {
        if let Ok(s) = p.push_line(line) {
            out.extend(s);
        }
    }
    out.extend(p.finish());
    out
}

fn deriver(model: Option<&'static GpuSpec>) -> Deriver {
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    d.set_model_override(model);
    d
}

/// Every window of `samples`, in order.
fn windows(samples: &[Sample], model: Option<&'static GpuSpec>) -> Vec<EntityWindow> {
    let mut d = deriver(model);
    samples.iter().flat_map(|s| d.observe(s).windows).collect()
}

fn summaries(samples: &[Sample], model: Option<&'static GpuSpec>) -> Vec<EntitySummary> {
    let mut a = Analyzer::new(deriver(model), false);
    for s in samples {
        a.push(s);
    }
    a.report().entities
}

/// Each window of the generated capture: the bound is `τ × f_max / f_ref` (`τ × 1.1`
/// without a model), at least the truth `τ × f_true / f_ref`, at least `τ` (so at least
/// `τ × κ_min` for any lowest clock at or under the reference one), never a measured ECF;
/// the gap is at least `u − bound`; and the capture's bound is the mean of the windows'
/// over all 60 s, says the clock (and the model) was missing, and holds the true mean.
#[test]
fn a_clockless_dmon_capture_is_bounded_in_every_window_and_in_the_summary() {
    let text = clockless_capture();
    assert_eq!(Format::detect(&text), Some(Format::DcgmiDmon));
    let s = samples(Format::DcgmiDmon, &text);
    assert_eq!(s.len(), SWEEPS as usize);
    for (model, ratio) in [(by_key("h100-sxm"), F_MAX / F_REF), (None, UNKNOWN)] {
        let ws = windows(&s, model);
        assert_eq!(ws.len(), 2 * SWEEPS as usize);
        let mut seen = [0u32; 2];
        for w in &ws {
            let g = w.id.gpu.unwrap();
            let k = seen[g as usize];
            seen[g as usize] += 1;
            let tau = f64::from(tau_milli(g, k)) / 1000.0;
            let u = f64::from(util_percent(g, k)) / 100.0;
            assert_eq!(w.readings.value(Field::TensorActive), Some(tau));
            let truth = tau * TRUE_CLOCK[g as usize] / F_REF;
            let m = &w.metrics;
            assert_eq!(m.effective_compute, None, "gpu {g} sweep {k}");
            let b = m.effective_compute_upper_bound.unwrap();
            assert_eq!(b, tau * ratio, "gpu {g} sweep {k}");
            assert!(b >= truth, "gpu {g} sweep {k}: {b} < truth {truth}");
            assert!(b >= tau, "gpu {g} sweep {k}: {b} < τ {tau}");
            assert_eq!(
                m.effective_compute_bound_missing,
                Some(BoundMissing {
                    tensor_counter: false,
                    sm_clock: true,
                    model: model.is_none(),
                })
            );
            assert_eq!(
                m.inflation_gap_points_at_least,
                Some((100.0 * (u - b)).max(0.0))
            );
            exported_as_bounds(w, u, b);
        }
        let report = summaries(&s, model);
        assert_eq!(report.len(), 2);
        for e in &report {
            let g = e.gpu.unwrap();
            let n = f64::from(SWEEPS);
            let taus = (0..SWEEPS).map(|k| f64::from(tau_milli(g, k)) / 1000.0);
            let bound_mean = taus.clone().map(|t| t * ratio).sum::<f64>() / n;
            let true_mean = taus
                .map(|t| t * TRUE_CLOCK[g as usize] / F_REF)
                .sum::<f64>()
                / n;
            assert!(e.effective_compute.is_none(), "{e:?}");
            let b = e.effective_compute_upper_bound.as_ref().unwrap();
            assert!(
                (b.mean - bound_mean).abs() < 1e-12,
                "{} vs {bound_mean}",
                b.mean
            );
            assert!(b.mean >= true_mean, "{} < {true_mean}", b.mean);
            assert_eq!((b.seconds, b.bounded_seconds), (n, n));
            let missing: Vec<_> = b
                .missing
                .iter()
                .map(|m| (m.input, m.seconds, m.kappa_bound))
                .collect();
            let mut want = vec![("sm_clock", n, None)];
            if model.is_none() {
                want.push(("model", n, Some(UNKNOWN)));
            }
            assert_eq!(missing, want);
            // The JSON document says it, with what would make the figure exact.
            let json = serde_json::to_value(e).unwrap();
            let j = &json["effective_compute_upper_bound"];
            assert_eq!(j["seconds"], n, "{j}");
            assert_eq!(j["missing"][0]["input"], "sm_clock", "{j}");
            let fix = j["missing"][0]["fix"].as_str().unwrap();
            assert!(fix.contains("collect field 100"), "{fix}");
            if model.is_none() {
                assert_eq!(j["missing"][1]["kappa_bound"], UNKNOWN, "{j}");
                let fix = j["missing"][1]["fix"].as_str().unwrap();
                assert!(fix.contains("pass --gpu-model"), "{fix}");
                assert!(fix.contains("1.1"), "{fix}");
            }
        }
    }
}

/// The window's exposition carries the bounds under their own names, each the value
/// worked out above (`u` the busy flag, `b` the effective-compute bound), and neither measured
/// family: the gap's lower bound is `max(u − b, 0)` (a bound, never a blank).
fn exported_as_bounds(w: &EntityWindow, u: f64, b: f64) {
    let entry = GpuEntry {
        window: w.clone(),
        source: "replay",
        up: true,
        list_cap: None,
    };
    let body = exposition::encode(
        &[entry],
        &Identity::default(),
        &ExporterStatus::default(),
        Encoding::Text,
    );
    let value = |family: &str| -> Option<f64> {
        body.lines()
            .find(|l| l.starts_with(&format!("{family}{{")))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
    };
    let gap = value("truthscale_gpu_inflation_gap_lower_bound_ratio").unwrap();
    assert!((gap - (u - b).max(0.0)).abs() < 1e-12, "{gap} vs {u} - {b}");
    assert_eq!(
        value("truthscale_gpu_effective_compute_upper_bound_ratio"),
        Some(b)
    );
    assert_eq!(value("truthscale_gpu_inflation_gap_ratio"), None, "{body}");
    assert_eq!(value("truthscale_gpu_effective_compute_ratio"), None);
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dcgm")
}

/// The peak-weighted compute term of a window's readings, `τ + φ16·P16/P + φ32·P32/P`
/// (`τ` alone without a model), at most 1.
fn compute_term(w: &EntityWindow) -> Option<f64> {
    let r = &w.readings;
    let tau = r.value(Field::TensorActive)?;
    let Some(spec) = w.spec else {
        return Some(tau);
    };
    let p = spec.bf16_dense_tflops;
    let pipe = |f: Field| r.value(f).map_or(0.0, |v| v);
    let c = tau
        + pipe(Field::Fp16Active) * spec.fp16_tflops / p
        + pipe(Field::Fp32Active) * spec.fp32_tflops / p;
    Some(c.min(1.0))
}

/// Every real capture, as read and with `--gpu-model h100-sxm`: each window with the tensor
/// counter has its measured ECF or, without it, the bound `C × f_max / f_ref` of its model
/// (`C × 1.1` without one), which is at least `τ` and at least the ECF at the maximum clock
/// (the largest truth); the capture's bound covers the seconds of those windows.
#[test]
#[expect(clippy::disallowed_methods, reason = "reads the fixtures")]
fn real_captures_bound_every_window_with_a_tensor_counter() {
    let mut bounded = 0;
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let format = Format::detect(&text).unwrap_or_else(|| panic!("{name}"));
        let s = samples(format, &text);
        for model in [None, by_key("h100-sxm")] {
            for w in windows(&s, model) {
                let m = &w.metrics;
                let Some(c) = compute_term(&w) else {
                    continue;
                };
                let tau = w.readings.value(Field::TensorActive).unwrap();
                match (m.effective_compute, m.effective_compute_upper_bound) {
                    (Some(_), None) => {}
                    (None, Some(b)) => {
                        bounded += 1;
                        let ratio = w.spec.map_or(UNKNOWN, |s| s.max_sm_clock_mhz / s.f_ref_mhz);
                        assert_eq!(b, (c * ratio).min(1.0), "{name} {}", w.id);
                        assert!(b >= tau, "{name} {}", w.id);
                        let clock = w.readings.value(Field::SmClockMhz).is_some();
                        assert_eq!(
                            m.effective_compute_bound_missing,
                            Some(BoundMissing {
                                tensor_counter: false,
                                sm_clock: !clock,
                                model: w.spec.is_none(),
                            }),
                            "{name} {}",
                            w.id
                        );
                    }
                    other => panic!("{name} {}: {other:?}", w.id),
                }
            }
            for e in summaries(&s, model) {
                if let Some(b) = &e.effective_compute_upper_bound {
                    assert!(b.bounded_seconds > 0.0 && b.bounded_seconds <= b.seconds);
                    assert!(!b.missing.is_empty(), "{name}: {b:?}");
                }
            }
        }
    }
    // The issue-244 capture's GPU 0 (τ 0.178, no clock), the v4.6.0 layout's two GPUs
    // (a clock, no model), and the exporter captures of unknown models, at least.
    assert!(bounded >= 60, "{bounded}");
}

/// The issue-244 capture (8 GPUs, model not stated, no SM clock): GPU 0's one window with
/// the tensor counter (τ 0.178, FP16 pipe 0.001) is bounded at 0.178 × 1.1 (τ alone
/// without a model), or with `--gpu-model h100-sxm` at `C × 1980 / 1830` where
/// `C = 0.178 + 0.001 × 134 / 989` (H100 SXM's FP16 over its dense BF16 peak); the
/// capture's bound covers that one second and says why.
#[test]
#[expect(clippy::disallowed_methods, reason = "reads a fixture")]
fn the_issue_244_capture_is_bounded_where_it_had_the_tensor_counter() {
    let text =
        std::fs::read_to_string(fixtures().join("dcgmi-dmon-NVIDIA-DCGM-issue244.txt")).unwrap();
    let s = samples(Format::DcgmiDmon, &text);
    let h100_c = 0.178 + 0.001 * 134.0 / 989.0;
    for (model, c, ratio, inputs) in [
        (None, 0.178, UNKNOWN, vec!["sm_clock", "model"]),
        (by_key("h100-sxm"), h100_c, F_MAX / F_REF, vec!["sm_clock"]),
    ] {
        let e = summaries(&s, model);
        let g0 = e.iter().find(|e| e.gpu == Some(0)).unwrap();
        assert!(g0.effective_compute.is_none());
        let b = g0.effective_compute_upper_bound.as_ref().unwrap();
        assert_eq!(b.mean, c * ratio);
        assert_eq!((b.seconds, b.bounded_seconds), (1.0, 1.0));
        let got: Vec<_> = b.missing.iter().map(|m| m.input).collect();
        assert_eq!(got, inputs);
        // No busy flag in the capture: no gap to bound.
        assert_eq!(b.inflation_gap_points_at_least, None);
    }
}
