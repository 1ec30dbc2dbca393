//! `analyze` on a `dcgmi dmon` capture without the SM clock: the text and the JSON give the
//! upper bound on effective compute, the seconds it covers, the gap it implies and what was
//! missing, and `--gpu-model` shows in the table. The expected figures are computed here
//! from the workload the test wrote (H100 SXM: reference 1830 MHz, maximum 1980 MHz).

use serde_json::Value;
use truthscale_e2e::{TempDir, run};

const SWEEPS: u32 = 60;

/// Sweep `k`'s tensor activity in thousandths (0.100 to 0.690), at a busy flag of 90 %.
fn tau_milli(k: u32) -> u32 {
    100 + 10 * k
}

/// One GPU, `dcgmi dmon -e 203,1001,1002,1003,1004,1005,155`: no SM clock (field 100).
fn capture() -> String {
    let line = |label: &str, cells: &[&str]| {
        let mut l = format!("{label:<16}");
        for c in cells {
            l += &format!("{c:<13}");
        }
        l.trim_end().to_owned() + "\n"
    };
    let mut text = line(
        "#Entity",
        &[
            "GPUTL", "GRACT", "SMACT", "SMOCC", "TENSO", "DRAMA", "POWER",
        ],
    );
    text += &line("ID", &["", "", "", "", "", "", " W"]);
    for k in 0..SWEEPS {
        let tau = format!("0.{:03}", tau_milli(k));
        let sm = format!("0.{:03}", tau_milli(k) + 200);
        let cells = ["90", "0.900", &sm, "0.300", &tau, "0.200", "450.000"];
        text += &line("GPU 0", &cells);
    }
    text
}

fn analyze(path: &str, extra: &[&str]) -> (String, Value) {
    let text = run(&[&["analyze", path], extra].concat());
    let stderr = String::from_utf8_lossy(&text.stderr);
    assert!(text.status.success(), "{stderr}");
    let json = run(&[&["analyze", path, "--json"], extra].concat());
    assert!(json.status.success());
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    (String::from_utf8_lossy(&text.stdout).into_owned(), v)
}

#[test]
fn a_clockless_capture_prints_the_bound_and_what_is_missing() {
    let dir = TempDir::new("clock-bound");
    let path = dir.path().join("clockless.txt");
    std::fs::write(&path, capture()).unwrap();
    let path = path.to_str().unwrap();
    let n = f64::from(SWEEPS);
    let taus: Vec<f64> = (0..SWEEPS)
        .map(|k| f64::from(tau_milli(k)) / 1000.0)
        .collect();
    for (extra, ratio) in [
        (&["--gpu-model", "h100-sxm"][..], 1980.0 / 1830.0),
        (&[][..], 1.1),
    ] {
        let (text, v) = analyze(path, extra);
        let bound = taus.iter().map(|t| t * ratio).sum::<f64>() / n;
        let gap = taus
            .iter()
            .map(|t| (100.0 * (0.9 - t * ratio)).max(0.0))
            .sum::<f64>()
            / n;
        let e = &v["entities"][0];
        // Never the measured figure's name.
        assert!(e["effective_compute"].is_null(), "{e}");
        let b = &e["effective_compute_upper_bound"];
        let mean = b["mean"].as_f64().unwrap();
        assert!((mean - bound).abs() < 1e-12, "{mean} vs {bound}");
        assert_eq!(b["seconds"], n, "{b}");
        assert_eq!(b["bounded_seconds"], n, "{b}");
        let at_least = b["inflation_gap_points_at_least"].as_f64().unwrap();
        assert!((at_least - gap).abs() < 1e-9, "{at_least} vs {gap}");
        assert_eq!(b["missing"][0]["input"], "sm_clock", "{b}");
        assert_eq!(b["missing"][0]["seconds"], n, "{b}");
        let want = format!(
            "  effective compute  ≤ {:.1}% over 60 s (a tensor counter, but no SM clock; collect field 100 (DCGM_FI_DEV_SM_CLOCK: dcgmi dmon -e 100, or in dcgm-exporter's counters file) for the exact figure",
            100.0 * bound
        );
        assert!(text.contains(&want), "{want}\n{text}");
        let want = format!("  inflation gap      at least {gap:.1} points");
        assert!(text.contains(&want), "{want}\n{text}");
        if extra.is_empty() {
            assert_eq!(b["missing"][1]["input"], "model", "{b}");
            assert_eq!(b["missing"][1]["kappa_bound"], 1.1, "{b}");
            assert!(
                text.contains(
                    "unknown model: pass --gpu-model (the clock correction was bounded by 1.1)"
                ),
                "{text}"
            );
            assert!(text.contains("gpu 0  unknown model"), "{text}");
        } else {
            assert_eq!(b["missing"].as_array().unwrap().len(), 1, "{b}");
            assert_eq!(e["catalog_model"], "h100-sxm");
            assert!(text.contains("gpu 0  H100 SXM (--gpu-model)"), "{text}");
            assert!(!text.contains("unknown model"), "{text}");
        }
    }
}

/// A trace whose SM clock is read in some windows only: the exact inflation gap covers the
/// clock-corrected windows alone, and says so beside the bound's gap over them all. Eleven
/// 1 s windows at τ 0.5 and 1 830 MHz (ECF 0.5; the first sample stands for the spacing to
/// the next) under a busy flag of 0.9, then five without the clock (each bounded at
/// 0.5 × 1980 / 1830): the gap is 90 − 50 = 40.0 points over the eleven, at least
/// (11 × 40 + 5 × (90 − 54.1)) / 16 = 38.7 over the sixteen.
#[test]
fn a_partly_clocked_trace_says_what_its_exact_gap_covers() {
    let dir = TempDir::new("clock-part");
    let path = dir.path().join("part.jsonl");
    let line = |t: u32, clock: &str| {
        format!(
            "{{\"gpu\":0,\"model\":\"NVIDIA H100 80GB HBM3\",\"taken\":\"2026-01-01T00:00:{t:02}Z\",\"gpu_util\":0.9,\"tensor_active\":0.5,\"dram_active\":0.1{clock}}}\n"
        )
    };
    let text: String = (0..=15)
        .map(|t| {
            line(
                t,
                if t <= 10 {
                    ",\"sm_clock_mhz\":1830"
                } else {
                    ""
                },
            )
        })
        .collect();
    std::fs::write(&path, text).unwrap();
    let (text, v) = analyze(path.to_str().unwrap(), &[]);
    assert!(
        text.contains(
            "  inflation gap      40.0 points  over the windows with effective compute only\n"
        ),
        "{text}"
    );
    let at_least = (11.0 * 40.0 + 5.0 * 100.0 * (0.9 - 0.5 * 1980.0 / 1830.0)) / 16.0;
    let b = &v["entities"][0]["effective_compute_upper_bound"];
    let got = b["inflation_gap_points_at_least"].as_f64().unwrap();
    assert!((got - at_least).abs() < 1e-9, "{got} vs {at_least}");
    assert!(
        text.contains(&format!(
            "  inflation gap      at least {at_least:.1} points"
        )),
        "{text}"
    );
}
