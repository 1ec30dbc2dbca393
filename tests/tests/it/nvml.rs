//! `truthscale serve --source nvml` and `truthscale doctor` against the fake NVML library
//! (`tests/fake-nvml`), one scenario per situation in `tests/fake-nvml/scenarios/`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use truthscale_e2e::{Sample, Sidecar, TempDir, cargo_build, clean_command, workspace};
use truthscale_e2e::{series, value};

/// The fake library and its old-driver build (without
/// `nvmlDeviceGetProcessesUtilizationInfo`), built once per test process.
fn fake_libraries() -> &'static (PathBuf, PathBuf) {
    static LIBS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    LIBS.get_or_init(|| {
        let dir = cargo_build(&["-p", "fake-nvml", "--lib", "--example", "old_driver"]);
        let current = dir.join("libfake_nvml.so");
        let old = dir.join("examples").join("libold_driver.so");
        for lib in [&current, &old] {
            assert!(lib.exists(), "{} missing after build", lib.display());
        }
        (current, old)
    })
}

fn fake() -> &'static Path {
    &fake_libraries().0
}

fn old_driver() -> &'static Path {
    &fake_libraries().1
}

fn scenario(name: &str) -> PathBuf {
    workspace()
        .join("tests/fake-nvml/scenarios")
        .join(format!("{name}.json"))
}

/// Scenario `name` with `edit` made to it, written into `dir`: its path.
fn edited_scenario(
    name: &str,
    dir: &TempDir,
    edit: impl FnOnce(&mut serde_json::Value),
) -> PathBuf {
    let text = std::fs::read_to_string(scenario(name)).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut v);
    let path = dir.path().join("scenario.json");
    std::fs::write(&path, v.to_string()).unwrap();
    path
}

/// `serve --source nvml` on the fake library with a scenario, sampling every 250 ms.
fn serve(lib: &Path, name: &str, dir: &TempDir) -> Sidecar {
    let scenario = scenario(name);
    Sidecar::start(
        &truthscale_e2e::nvml_args(lib, "250ms"),
        &[("FAKE_NVML_SCENARIO", scenario.to_str().unwrap())],
        dir.path(),
    )
}

/// How long a condition may take to show on `/metrics`.
const WAIT: Duration = Duration::from_secs(20);

/// The counter regime (no serving engine here, so no serving phase names).
fn phase_is(m: &[Sample], regime: &str) -> bool {
    value(
        m,
        "truthscale_gpu_regime",
        &[("regime", regime), ("method", "counters")],
    ) == Some(1.0)
}

/// The effective compute fraction the spec defines for an H100 SXM (989 dense BF16, 134
/// FP16, 67 FP32 TFLOP/s; f_ref 1830 MHz): (τ + φ16·134/989 + φ32·67/989) · f̄ / 1830.
fn h100_ecf(tensor: f64, fp16: f64, fp32: f64, mean_clock_mhz: f64) -> f64 {
    (tensor + fp16 * 134.0 / 989.0 + fp32 * 67.0 / 989.0) * mean_clock_mhz / 1830.0
}

fn errors_of(m: &[Sample], kind: &str) -> f64 {
    value(
        m,
        "truthscale_source_errors_total",
        &[("source", "nvml"), ("kind", kind)],
    )
    .unwrap_or(0.0)
}

fn close(v: Option<f64>, want: f64, tol: f64) -> bool {
    v.is_some_and(|v| (v - want).abs() <= tol)
}

/// A clean scenario counts no error at all: every call answered, GPM's 100 ms rule kept
/// (the fake refuses a sample pair closer than that).
fn no_errors(m: &[Sample], stderr: &str) {
    let errs = series(m, "truthscale_source_errors_total", &[]);
    assert!(errs.is_empty(), "unexpected errors {errs:#?}\n{stderr}");
}

#[test]
fn one_sm_kernel_on_h100_is_stalled_with_100x_spatial_inflation() {
    let dir = TempDir::new("nvml-one-sm");
    let s = serve(fake(), "h100-one-sm", &dir);
    let m = s.wait_for(WAIT, "regime stalled", |m| phase_is(m, "stalled"));
    let info = series(&m, "truthscale_gpu_info", &[]);
    assert_eq!(info.len(), 1, "{info:#?}");
    assert_eq!(info[0].label("source"), Some("nvml"));
    assert_eq!(info[0].label("fidelity"), Some("profiling"));
    assert_eq!(info[0].label("catalog_model"), Some("h100-sxm"));
    assert_eq!(info[0].label("model"), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(info[0].label("gpu"), Some("0"));
    assert_eq!(
        info[0].label("uuid"),
        Some("GPU-5f0c6a3e-8d3b-4c1e-9a7f-000000000001")
    );
    let get = |n: &str| value(&m, n, &[]);
    assert_eq!(get("truthscale_gpu_reported_utilization_ratio"), Some(1.0));
    assert!(close(get("truthscale_gpu_sm_active_ratio"), 0.0076, 1e-9));
    assert_eq!(get("truthscale_gpu_tensor_active_ratio"), Some(0.0));
    assert_eq!(get("truthscale_gpu_dram_active_ratio"), Some(0.0));
    // The scenario's FP32 pipe at 0.5 % is all the compute: 0.005 × 67/989 at 1980 of
    // 1830 MHz, 0.000 366 5; SM active 0.0076 is under the 0.01 floor, so the spatial
    // inflation is 1 / 0.01 = 100; the gap 1 − ECF.
    let want = h100_ecf(0.0, 0.0, 0.005, 1980.0);
    assert!((want - 0.000_366_5).abs() < 1e-7, "{want}");
    let ecf = get("truthscale_gpu_effective_compute_ratio");
    assert!(close(ecf, want, 1e-9), "ECF {ecf:?}");
    let spatial = get("truthscale_gpu_spatial_inflation_factor");
    assert!(close(spatial, 100.0, 1e-9), "spatial inflation {spatial:?}");
    let gap = get("truthscale_gpu_inflation_gap_ratio");
    assert!(close(gap, 1.0 - want, 1e-9), "gap {gap:?}");
    // Power from the energy counter (ΔE/Δt), the clock, memory, limit, temperature.
    assert!(
        close(get("truthscale_gpu_power_watts"), 120.0, 6.0),
        "{m:#?}"
    );
    assert_eq!(get("truthscale_gpu_power_limit_watts"), Some(700.0));
    assert_eq!(get("truthscale_gpu_sm_clock_hertz"), Some(1.98e9));
    assert_eq!(
        get("truthscale_gpu_memory_used_bytes"),
        Some(2_147_483_648.0)
    );
    assert_eq!(
        get("truthscale_gpu_memory_total_bytes"),
        Some(85_520_809_984.0)
    );
    assert_eq!(get("truthscale_gpu_temperature_celsius"), Some(45.0));
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "nvml")]),
        Some(1.0)
    );
    // A few more ticks: still no error (every GPM pair more than 100 ms apart).
    std::thread::sleep(Duration::from_millis(1200));
    no_errors(&s.metrics(), &s.process.stderr());
}

#[test]
fn decode_on_h100() {
    let dir = TempDir::new("nvml-decode");
    let s = serve(fake(), "h100-decode", &dir);
    let m = s.wait_for(WAIT, "regime memory_bound", |m| phase_is(m, "memory_bound"));
    let get = |n: &str| value(&m, n, &[]);
    assert_eq!(get("truthscale_gpu_reported_utilization_ratio"), Some(1.0));
    assert!(close(get("truthscale_gpu_tensor_active_ratio"), 0.02, 1e-9));
    assert!(close(get("truthscale_gpu_dram_active_ratio"), 0.6, 1e-9));
    assert!(close(get("truthscale_gpu_sm_active_ratio"), 0.85, 1e-9));
    assert!(close(get("truthscale_gpu_sm_occupancy_ratio"), 0.2, 1e-9));
    // Pinned exactly: κ = 1980 / 1830 (no clock samples, so the mean of the window's end
    // readings, all 1980 MHz). Skipping κ would give 0.02597, inverting it 0.02222.
    let ecf = get("truthscale_gpu_effective_compute_ratio").unwrap();
    let want = h100_ecf(0.02, 0.01, 0.03, 1980.0);
    assert!((ecf - want).abs() < 1e-9, "ECF {ecf}, want {want}");
    assert!(close(
        get("truthscale_gpu_clock_correction_ratio"),
        1980.0 / 1830.0,
        1e-12
    ));
    let rho = get("truthscale_gpu_intensity_ridge_ratio").unwrap();
    assert!(rho < 0.1, "rho {rho}");
    assert!(close(
        get("truthscale_gpu_roofline_saturation_ratio"),
        0.6,
        1e-9
    ));
    assert!(close(get("truthscale_gpu_power_watts"), 380.0, 15.0));
    assert_eq!(
        value(&m, "truthscale_gpu_info", &[("fidelity", "profiling")]),
        Some(1.0)
    );
    no_errors(&m, &s.process.stderr());
}

#[test]
fn prefill_on_h100_at_its_power_cap() {
    let dir = TempDir::new("nvml-prefill");
    let s = serve(fake(), "h100-prefill", &dir);
    let m = s.wait_for(WAIT, "regime compute_bound", |m| {
        phase_is(m, "compute_bound")
    });
    let get = |n: &str| value(&m, n, &[]);
    assert!(close(get("truthscale_gpu_tensor_active_ratio"), 0.5, 1e-9));
    // GPM's HMMA and IMMA pipes: all of this tensor work is half precision.
    assert!(close(get("truthscale_gpu_hmma_active_ratio"), 0.5, 1e-9));
    assert!(close(get("truthscale_gpu_imma_active_ratio"), 0.0, 1e-9));
    assert!(close(get("truthscale_gpu_dram_active_ratio"), 0.2, 1e-9));
    assert!(get("truthscale_gpu_intensity_ridge_ratio").unwrap() >= 1.5);
    // κ from the window's mean clock: the driver's clock samples average 1464 MHz while the
    // clock read at the window's end is 1830 MHz, so κ = 0.8, not 1.
    let kappa = get("truthscale_gpu_clock_correction_ratio").unwrap();
    assert!(close(Some(kappa), 0.8, 1e-12), "kappa {kappa}");
    assert_eq!(get("truthscale_gpu_sm_clock_hertz"), Some(1.464e9));
    // Pinned exactly: 0.40488. With the point reading it would be 0.50610, with κ skipped
    // the same, with κ inverted 0.63262.
    let ecf = get("truthscale_gpu_effective_compute_ratio").unwrap();
    let want = h100_ecf(0.5, 0.02, 0.05, 1464.0);
    assert!((ecf - want).abs() < 1e-9, "ECF {ecf}, want {want}");
    assert_eq!(
        value(
            &m,
            "truthscale_gpu_clock_event_active",
            &[("reason", "sw_power_cap")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &m,
            "truthscale_gpu_clock_event_active",
            &[("reason", "thermal")]
        ),
        Some(0.0)
    );
    no_errors(&m, &s.process.stderr());
}

/// A GPM cycle counter that reads below 0 is no count: blank and counted as a sentinel
/// (it was dropped with a debug line only), and the others are read.
#[test]
fn a_negative_gpm_counter_is_blank_and_counted() {
    let dir = TempDir::new("nvml-negative-counter");
    let path = edited_scenario("h100-cumulative", &dir, |v| {
        v["devices"][0]["gpm"]["counters"]["active_percent"]["fp16_cycles_active"] =
            serde_json::json!(-4);
    });
    let s = Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "250ms"),
        &[("FAKE_NVML_SCENARIO", path.to_str().unwrap())],
        dir.path(),
    );
    let m = s.wait_for(WAIT, "a sentinel counted", |m| {
        errors_of(m, "sentinel") > 0.0
            && close(
                value(m, "truthscale_gpu_tensor_active_ratio", &[("gpu", "0")]),
                0.8,
                1e-6,
            )
    });
    assert!(errors_of(&m, "sentinel") > 0.0);
    assert!(
        s.process.stderr().contains("is no count, left blank"),
        "{}",
        s.process.stderr()
    );
}

/// GPU 0 of `h100-cumulative` has the cumulative GPM counters (248–260), GPU 1 only the
/// ratio metrics: GPU 0's window activity is the counters' deltas (SM 90 %, tensor and HMMA
/// 80 %, FP32 10 %, FP16 4 %, where its ratio metrics say 98 / 50 / 50 / 5 / 2 %), at the
/// `cumulative` tier; GPU 1 stays at `profiling` with the ratio metrics.
#[test]
fn cumulative_gpm_counters_give_the_cumulative_tier_and_replace_the_ratios() {
    let dir = TempDir::new("nvml-cumulative");
    let s = serve(fake(), "h100-cumulative", &dir);
    let tier = |m: &[Sample], gpu: &str| -> Option<String> {
        series(m, "truthscale_gpu_info", &[("gpu", gpu)])
            .first()
            .and_then(|s| s.label("fidelity").map(str::to_string))
    };
    let m = s.wait_for(WAIT, "GPU 0 at the cumulative tier", |m| {
        tier(m, "0").as_deref() == Some("cumulative") && tier(m, "1").is_some()
    });
    assert_eq!(series(&m, "truthscale_gpu_info", &[]).len(), 2);
    assert_eq!(tier(&m, "1").as_deref(), Some("profiling"));
    let get = |n: &str, gpu: &str| value(&m, n, &[("gpu", gpu)]);
    // GPU 0: the counters' ratios, to rounding of two doubles near 2^48.
    for (metric, want) in [
        ("truthscale_gpu_sm_active_ratio", 0.9),
        ("truthscale_gpu_tensor_active_ratio", 0.8),
        ("truthscale_gpu_hmma_active_ratio", 0.8),
        ("truthscale_gpu_imma_active_ratio", 0.0),
    ] {
        let v = get(metric, "0");
        assert!(close(v, want, 1e-9), "{metric} {v:?}, want {want}");
    }
    // κ still from the clock samples: 1464 / 1830.
    assert!(close(
        get("truthscale_gpu_clock_correction_ratio", "0"),
        0.8,
        1e-12
    ));
    // The truth from the scenario: (0.8 + 0.04·134/989 + 0.10·67/989) · 1464/1830 = 0.64976.
    // With the ratio metrics it would be 0.40488.
    let ecf = get("truthscale_gpu_effective_compute_ratio", "0").unwrap();
    let want = h100_ecf(0.8, 0.04, 0.10, 1464.0);
    assert!((ecf - want).abs() < 1e-9, "GPU 0 ECF {ecf}, want {want}");
    // GPU 1: the ratio metrics as GPM gives them.
    assert!(close(
        get("truthscale_gpu_tensor_active_ratio", "1"),
        0.5,
        1e-9
    ));
    assert!(close(
        get("truthscale_gpu_sm_active_ratio", "1"),
        0.98,
        1e-9
    ));
    let ecf1 = get("truthscale_gpu_effective_compute_ratio", "1").unwrap();
    let want1 = h100_ecf(0.5, 0.02, 0.05, 1464.0);
    assert!(
        (ecf1 - want1).abs() < 1e-9,
        "GPU 1 ECF {ecf1}, want {want1}"
    );
    // A driver without the counters is no error: the ratios stand in.
    no_errors(&m, &s.process.stderr());
    // Later windows stay at the tier, with the same values.
    let later = s.wait_for(WAIT, "a later window", |l| {
        value(l, "truthscale_gpu_observed_seconds_total", &[("gpu", "0")])
            > value(&m, "truthscale_gpu_observed_seconds_total", &[("gpu", "0")])
    });
    assert_eq!(tier(&later, "0").as_deref(), Some("cumulative"));
    let ecf = value(
        &later,
        "truthscale_gpu_effective_compute_ratio",
        &[("gpu", "0")],
    )
    .unwrap();
    assert!(
        (ecf - want).abs() < 1e-9,
        "later GPU 0 ECF {ecf}, want {want}"
    );
    no_errors(&later, &s.process.stderr());
}

#[test]
fn a100_without_gpm_gets_the_nvml_tier_and_only_an_upper_bound() {
    let dir = TempDir::new("nvml-a100");
    let s = serve(fake(), "a100-no-gpm", &dir);
    let m = s.wait_for(WAIT, "an A100 window with power", |m| {
        value(m, "truthscale_gpu_power_watts", &[]).is_some()
    });
    let info = series(&m, "truthscale_gpu_info", &[]);
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].label("fidelity"), Some("nvml"));
    assert_eq!(info[0].label("catalog_model"), Some("a100-80-sxm"));
    let get = |n: &str| value(&m, n, &[]);
    assert!(close(
        get("truthscale_gpu_reported_utilization_ratio"),
        0.9,
        1e-9
    ));
    assert!(close(
        get("truthscale_gpu_effective_compute_upper_bound_ratio"),
        0.9,
        1e-9
    ));
    for absent in [
        "truthscale_gpu_effective_compute_ratio",
        "truthscale_gpu_tensor_active_ratio",
        "truthscale_gpu_sm_active_ratio",
        "truthscale_gpu_spatial_inflation_factor",
    ] {
        assert_eq!(get(absent), None, "{absent} must be absent without GPM");
    }
    // By hand (spec §6.2 power proxy, §6.4's A100 example): a100-no-gpm.json draws 250 W
    // against an enforced limit of 400 W; the A100 80GB SXM's idle power is 63 W (Splitwise's
    // constants, spec §5.1). π = (250 − 63)/(400 − 63) = 187/337 = 0.554896. Mean power may
    // be the energy counter's growth over the window, which the fake counts on the wall
    // clock and the source divides by the time between its reads, each stamped to the
    // millisecond: 2 ms over 250 ms at most, 2 W, 0.006 of π; allow 0.01. Wrong formulas
    // stay outside it: 250/400 = 0.625, 187/400 = 0.4675.
    let proxy = get("truthscale_gpu_power_proxy_ratio");
    assert!(close(proxy, 0.554_896, 0.01), "power proxy {proxy:?}");
    assert_eq!(get("truthscale_gpu_sm_clock_hertz"), Some(1.41e9));
    no_errors(&m, &s.process.stderr());
}

/// The energy counter's deltas are divided by the time between its own reads. The fake's
/// counter grows at 250 W on the wall clock (its power gauge reads 200 W, so the counter's
/// windows are told from the gauge's), and every second tick its memory call, just before
/// the energy read, stalls 40 ms: stamped at the tick's start, the 250 ms windows would
/// alternate between 250 × 290/250 = 290 W and 250 × 210/250 = 210 W. Stamped at the read
/// (to the millisecond at each end: 2 ms of 250 at most, 2 W), every window after the
/// counter's first reads 250 W within 4 W.
#[test]
fn energy_power_is_timed_by_the_counters_own_reads() {
    let dir = TempDir::new("nvml-energy-stamp");
    let path = edited_scenario("a100-no-gpm", &dir, |v| {
        v["devices"][0]["memory_stall_ms"] = serde_json::json!(40);
        v["devices"][0]["power_gauge_watts"] = serde_json::json!(200);
    });
    let s = Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "250ms"),
        &[("FAKE_NVML_SCENARIO", path.to_str().unwrap())],
        dir.path(),
    );
    // Each window's power, told apart by the energy counted up to it; the gauge's (before
    // the counter's first delta) left out.
    let mut windows = std::collections::BTreeMap::new();
    let deadline = std::time::Instant::now() + WAIT;
    while windows.len() < 8 {
        let m = s.metrics();
        let energy = value(&m, "truthscale_gpu_energy_joules_total", &[]);
        if let (Some(e), Some(p)) = (energy, value(&m, "truthscale_gpu_power_watts", &[]))
            && p != 200.0
        {
            windows.insert(e.to_bits(), p);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} windows in {WAIT:?}: {windows:?}",
            windows.len()
        );
        std::thread::sleep(Duration::from_millis(60));
    }
    for (energy, watts) in &windows {
        let joules = f64::from_bits(*energy);
        assert!(
            (watts - 250.0).abs() <= 4.0,
            "{watts} W in the window up to {joules} J; all: {:?}",
            windows.values().collect::<Vec<_>>()
        );
    }
    no_errors(&s.metrics(), &s.process.stderr());
}

/// Health is the GPU's: in MIG mode, a pending row remap on the GPU makes every instance
/// unavailable, never idle nor busy (the instances had no health readings at all, so a
/// broken MIG GPU's capacity read as usable).
#[test]
fn a_mig_gpu_with_a_pending_row_remap_is_unavailable_on_every_instance() {
    let dir = TempDir::new("nvml-mig-health");
    let path = edited_scenario("h100-mig", &dir, |v| {
        v["devices"][0]["row_remap"] = serde_json::json!({ "uncorrectable": 1, "pending": true });
    });
    let s = Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "250ms"),
        &[("FAKE_NVML_SCENARIO", path.to_str().unwrap())],
        dir.path(),
    );
    let state = |m: &[Sample], instance: &str, state: &str| {
        value(
            m,
            "truthscale_gpu_health",
            &[("mig_instance", instance), ("state", state)],
        )
    };
    let m = s.wait_for(WAIT, "both instances judged", |m| {
        ["1", "2"]
            .iter()
            .all(|i| state(m, i, "unavailable").is_some())
    });
    for instance in ["1", "2"] {
        assert_eq!(state(&m, instance, "unavailable"), Some(1.0), "{instance}");
        assert_eq!(state(&m, instance, "ok"), Some(0.0), "{instance}");
        let verdict = |v: &str| {
            value(
                &m,
                "truthscale_gpu_verdict",
                &[("mig_instance", instance), ("verdict", v)],
            )
        };
        assert_eq!(verdict("unavailable"), Some(1.0), "{instance}");
        assert_eq!(verdict("busy"), Some(0.0), "{instance}");
        assert_eq!(verdict("idle"), Some(0.0), "{instance}");
    }
}

#[test]
fn h100_in_mig_mode_exports_one_entity_per_gpu_instance_without_busy_flag() {
    let dir = TempDir::new("nvml-mig");
    let s = serve(fake(), "h100-mig", &dir);
    let m = s.wait_for(WAIT, "two MIG instances", |m| {
        series(m, "truthscale_gpu_info", &[]).len() == 2
    });
    let info = series(&m, "truthscale_gpu_info", &[]);
    let mut instances: Vec<(&str, &str)> = info
        .iter()
        .map(|s| {
            (
                s.label("mig_instance").expect("mig_instance label"),
                s.label("mig_profile").expect("mig_profile label"),
            )
        })
        .collect();
    instances.sort_unstable();
    assert_eq!(instances, [("1", "3g.40gb"), ("2", "3g.40gb")]);
    for i in &info {
        assert_eq!(i.label("fidelity"), Some("profiling"));
        assert_eq!(i.label("gpu"), Some("0"));
        assert_eq!(
            i.label("uuid"),
            Some("GPU-5f0c6a3e-8d3b-4c1e-9a7f-000000000004")
        );
    }
    assert!(
        series(&m, "truthscale_gpu_reported_utilization_ratio", &[]).is_empty(),
        "MIG has no busy flag"
    );
    let busy = &[("mig_instance", "1")];
    assert!(close(
        value(&m, "truthscale_gpu_tensor_active_ratio", busy),
        0.45,
        1e-9
    ));
    assert!(close(
        value(&m, "truthscale_gpu_sm_active_ratio", busy),
        0.8,
        1e-9
    ));
    mig_instance_by_hand(&s);
    assert_eq!(
        value(&m, "truthscale_gpu_memory_total_bytes", busy),
        Some(40320.0 * 1_048_576.0)
    );
    assert_eq!(
        value(&m, "truthscale_gpu_memory_used_bytes", busy),
        Some(10_737_418_240.0)
    );
    assert_eq!(
        value(
            &m,
            "truthscale_gpu_tensor_active_ratio",
            &[("mig_instance", "2")]
        ),
        Some(0.0)
    );
    no_errors(&m, &s.process.stderr());
}

/// h100-mig.json's busy instance (GPU instance 1, 3g.40gb): its derived values worked out by
/// hand. Its GPM reads tensor 45 %, DRAM 20 %, FP16 and FP32 0; the parent's SM clock is
/// 1980 MHz against the H100 SXM's f_ref of 1830 MHz. The instance's counters are its own
/// (normalized to its slices), so (spec §6.2, §6.4):
/// κ = 1980/1830 = 1.081967; C = τ = 0.45; ECF = C·κ = 0.486885 (of the instance's peak);
/// S = max(C, d) = max(0.45, 0.20) = 0.45; ρ = C/max(d, 0.02) = 0.45/0.20 = 2.25, which
/// with τ ≥ 0.20 enters compute_bound (ρ ≥ 1.5).
fn mig_instance_by_hand(s: &Sidecar) {
    let busy = &[("mig_instance", "1")];
    let m = s.wait_for(WAIT, "instance 1 compute-bound", |m| {
        value(
            m,
            "truthscale_gpu_regime",
            &[
                ("mig_instance", "1"),
                ("regime", "compute_bound"),
                ("method", "counters"),
            ],
        ) == Some(1.0)
    });
    let get = |n: &str| value(&m, n, busy);
    let kappa = get("truthscale_gpu_clock_correction_ratio");
    assert!(close(kappa, 1.081_967, 1e-6), "κ {kappa:?}");
    let ecf = get("truthscale_gpu_effective_compute_ratio");
    assert!(close(ecf, 0.486_885, 1e-6), "ECF {ecf:?}");
    let sat = get("truthscale_gpu_roofline_saturation_ratio");
    assert!(close(sat, 0.45, 1e-9), "saturation {sat:?}");
    let rho = get("truthscale_gpu_intensity_ridge_ratio");
    assert!(close(rho, 2.25, 1e-9), "ρ {rho:?}");
}

#[test]
fn a_driver_without_per_process_utilization_degrades_and_counts_it_once() {
    let dir = TempDir::new("nvml-old-driver");
    let s = serve(old_driver(), "h100-decode", &dir);
    let m = s.wait_for(WAIT, "decode and an unsupported count", |m| {
        phase_is(m, "memory_bound") && errors_of(m, "unsupported") >= 1.0
    });
    assert_eq!(
        value(&m, "truthscale_gpu_info", &[("fidelity", "profiling")]),
        Some(1.0)
    );
    assert_eq!(errors_of(&m, "nvml"), 0.0);
    // Counted once (at discovery), not every tick.
    std::thread::sleep(Duration::from_millis(800));
    let m = s.metrics();
    assert_eq!(errors_of(&m, "unsupported"), 1.0);
    assert_eq!(errors_of(&m, "nvml"), 0.0);
    assert!(
        s.process
            .stderr()
            .contains("nvmlDeviceGetProcessesUtilizationInfo")
    );
}

#[test]
fn gpm_no_permission_is_counted_and_the_gpu_falls_back_to_the_nvml_tier() {
    let dir = TempDir::new("nvml-denied");
    let s = serve(fake(), "h100-gpm-denied", &dir);
    let m = s.wait_for(WAIT, "no_permission and a window", |m| {
        errors_of(m, "no_permission") >= 1.0
            && value(m, "truthscale_gpu_info", &[("fidelity", "nvml")]).is_some()
    });
    let get = |n: &str| value(&m, n, &[]);
    assert_eq!(get("truthscale_gpu_tensor_active_ratio"), None);
    assert_eq!(get("truthscale_gpu_effective_compute_ratio"), None);
    assert_eq!(
        get("truthscale_gpu_effective_compute_upper_bound_ratio"),
        Some(1.0)
    );
    // GPM is off for a minute: no new NO_PERMISSION each tick.
    std::thread::sleep(Duration::from_millis(800));
    let m = s.metrics();
    assert_eq!(errors_of(&m, "no_permission"), 1.0);
    let stderr = s.process.stderr();
    assert!(stderr.contains("NO_PERMISSION"), "{stderr}");
    assert_eq!(
        stderr.matches("nvml fidelity tier until then").count(),
        1,
        "warned once: {stderr}"
    );
}

#[test]
fn a_gpu_lost_mid_run_goes_stale_and_the_other_carries_on() {
    let dir = TempDir::new("nvml-lost");
    let s = serve(fake(), "h100-lost", &dir);
    let gpus = |m: &[Sample]| -> Vec<String> {
        series(m, "truthscale_gpu_info", &[])
            .iter()
            .filter_map(|s| s.label("gpu").map(str::to_string))
            .collect()
    };
    s.wait_for(WAIT, "both GPUs", |m| gpus(m).len() == 2);
    let m = s.wait_for(WAIT, "GPU 1 gone after it is lost", |m| {
        errors_of(m, "gpu_lost") >= 1.0 && gpus(m) == ["0"]
    });
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "nvml")]),
        Some(1.0)
    );
    // The lost GPU is listed as down; the other as up.
    assert_eq!(value(&m, "truthscale_gpu_up", &[("gpu", "1")]), Some(0.0));
    assert_eq!(value(&m, "truthscale_gpu_up", &[("gpu", "0")]), Some(1.0));
    assert!(phase_is(&m, "memory_bound"));
    // The sidecar keeps serving GPU 0 with fresh windows.
    let observed =
        |m: &[Sample]| value(m, "truthscale_gpu_observed_seconds_total", &[("gpu", "0")]);
    let before = observed(&m).unwrap();
    let later = s.wait_for(WAIT, "GPU 0 still sampled", |m| {
        observed(m).is_some_and(|o| o > before + 0.4)
    });
    assert_eq!(gpus(&later), ["0"]);
    let mut process = s.process;
    assert!(process.try_wait().is_none(), "serve exited");
    assert!(!process.stderr().contains("panicked"));
    assert!(process.stderr().contains("GPU is lost"));
    assert!(
        process
            .stderr()
            .contains("reset the GPU (nvidia-smi -r) or reboot"),
        "{}",
        process.stderr()
    );
}

/// A GPU whose handle is denied (NO_PERMISSION, not lost) is no longer read: it goes stale
/// (`truthscale_gpu_up 0`, its windows no longer served as fresh), never its last values
/// served as live; the other carries on.
#[test]
fn a_gpu_whose_handle_is_denied_goes_stale() {
    let dir = TempDir::new("nvml-denied");
    let s = serve(fake(), "h100-handle-denied", &dir);
    s.wait_for(WAIT, "both GPUs up", |m| {
        value(m, "truthscale_gpu_up", &[("gpu", "1")]) == Some(1.0)
            && value(m, "truthscale_gpu_up", &[("gpu", "0")]) == Some(1.0)
    });
    let m = s.wait_for(WAIT, "GPU 1 stale once its handle is denied", |m| {
        errors_of(m, "no_permission") >= 1.0
            && value(m, "truthscale_gpu_up", &[("gpu", "1")]) == Some(0.0)
    });
    assert_eq!(value(&m, "truthscale_gpu_up", &[("gpu", "0")]), Some(1.0));
    let observed =
        |m: &[Sample], gpu| value(m, "truthscale_gpu_observed_seconds_total", &[("gpu", gpu)]);
    assert_eq!(
        observed(&m, "1"),
        None,
        "a stale GPU's windows are not served"
    );
    let before = observed(&m, "0").unwrap();
    s.wait_for(WAIT, "GPU 0 still sampled", |m| {
        observed(m, "0").is_some_and(|o| o > before + 0.4)
    });
    let mut process = s.process;
    assert!(process.try_wait().is_none(), "serve exited");
    let stderr = process.stderr();
    assert!(!stderr.contains("panicked"));
    // The log says what to do about it, not only that it happened.
    assert!(
        stderr.contains("give it read access to /dev/nvidiactl"),
        "{stderr}"
    );
}

fn doctor(lib: &Path, name: Option<&str>) -> (i32, String, String) {
    let mut cmd = clean_command();
    cmd.args(["doctor", "--nvml-library", lib.to_str().unwrap()]);
    if let Some(n) = name {
        cmd.env("FAKE_NVML_SCENARIO", scenario(n));
    }
    let out = cmd.output().expect("run truthscale doctor");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code().unwrap_or(-1), stdout, stderr)
}

fn has_line(out: &str, want: &str) -> bool {
    out.lines().any(|l| l.trim_end() == want)
}

/// `doctor` reads the library's variable as `serve` does: set, that library is loaded;
/// empty, it is not set (the default library), never clap's "a value is required for
/// '--nvml-library'", a flag that was not given.
#[test]
fn doctor_reads_the_library_variable_and_takes_empty_as_unset() {
    let run = |value: &std::ffi::OsStr| {
        let out = clean_command()
            .arg("doctor")
            .env("TRUTHSCALE_SOURCE__LIBRARY", value)
            .env("FAKE_NVML_SCENARIO", scenario("h100-one-sm"))
            .output()
            .expect("run truthscale doctor");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = run(fake().as_os_str());
    assert_eq!(code, Some(0), "{text}");
    assert!(has_line(&text, "GPU 0  NVIDIA H100 80GB HBM3"), "{text}");
    let (code, text) = run(std::ffi::OsStr::new(""));
    assert_eq!(code, Some(1), "{text}");
    assert!(!text.contains("a value is required"), "{text}");
    assert!(text.contains("libnvidia-ml.so.1: not usable"), "{text}");
}

#[test]
fn doctor_per_scenario() {
    let (code, out, _) = doctor(fake(), Some("h100-one-sm"));
    assert_eq!(code, 0, "{out}");
    for want in [
        "driver version  550.54.15",
        "NVML version    12.550.54.15",
        "CUDA driver     12.4",
        "GPUs            1",
        "GPU 0  NVIDIA H100 80GB HBM3",
        "  minor number    0 (/dev/nvidia0; a DRA claim names it gpu-0)",
        "  architecture    Hopper",
        "  MIG mode        disabled",
        "  GPM             supported and permitted (a sample pair succeeded)",
        "  fidelity tier   profiling",
    ] {
        assert!(has_line(&out, want), "missing {want:?} in\n{out}");
    }
    assert!(out.contains("SM active 0.8 %"), "{out}");
    // The advice follows the worst tier of the GPU's entities: profiling, nothing to do.
    let nothing_to_do = "  better tier     nothing to do: GPM counters give the profiling tier \
                         (tensor, DRAM and SM activity)";
    assert!(has_line(&out, nothing_to_do), "{out}");

    let (code, out, _) = doctor(fake(), Some("a100-no-gpm"));
    assert_eq!(code, 0, "{out}");
    assert!(has_line(&out, "  GPM             not supported"), "{out}");
    assert!(has_line(&out, "  fidelity tier   nvml"), "{out}");
    assert!(out.contains("A100 80GB SXM has no GPM"), "{out}");
    assert!(out.contains("--source dcgm-exporter:URL"), "{out}");

    let (code, out, _) = doctor(fake(), Some("h100-mig"));
    assert_eq!(code, 0, "{out}");
    assert!(
        has_line(
            &out,
            "  MIG mode        enabled, 2 GPU instances (no busy flag on MIG)"
        ),
        "{out}"
    );
    assert!(
        has_line(&out, "  instance 1      3g.40gb  fidelity tier profiling"),
        "{out}"
    );
    assert!(
        has_line(&out, "  instance 2      3g.40gb  fidelity tier profiling"),
        "{out}"
    );
    assert!(out.contains("GPU instance 1, 10.0 GiB"), "{out}");
    assert!(has_line(&out, nothing_to_do), "{out}");

    // A GPU instance with a second compute instance: one entity, and the second's process
    // is listed too (NVML lists on a MIG handle only its own compute instance's).
    let (code, out, _) = doctor(fake(), Some("h100-mig-two-ci"));
    assert_eq!(code, 0, "{out}");
    assert!(
        has_line(
            &out,
            "  MIG mode        enabled, 2 GPU instances (no busy flag on MIG)"
        ),
        "{out}"
    );
    assert!(has_line(&out, "  processes       2"), "{out}");
    assert!(
        has_line(&out, "    pid 6262, GPU instance 1, 2.0 GiB, pod unknown"),
        "{out}"
    );

    let (code, out, _) = doctor(fake(), Some("h100-gpm-denied"));
    assert_eq!(code, 0, "{out}");
    assert!(
        has_line(
            &out,
            "  GPM             supported but not permitted (NVML_ERROR_NO_PERMISSION)"
        ),
        "{out}"
    );
    assert!(has_line(&out, "  fidelity tier   nvml"), "{out}");
    assert!(out.contains("CAP_SYS_ADMIN"), "{out}");
    assert!(out.contains("no_permission (1)"), "{out}");

    let (code, out, _) = doctor(old_driver(), Some("h100-decode"));
    assert_eq!(code, 0, "{out}");
    // That scenario has no processor-clock samples, no cumulative GPM counters, no recovery
    // action and no clock-event times either: all are listed (the counters once, not one
    // line per counter; each field value the driver answers as unsupported by name).
    assert!(
        has_line(
            &out,
            "  not available   GPM cumulative counters (248-260), \
             nvmlDeviceGetFieldValues(clock_event_hw_power_brake_ns_total), \
             nvmlDeviceGetFieldValues(clock_event_hw_thermal_ns_total), \
             nvmlDeviceGetFieldValues(clock_event_sw_power_cap_ns_total), \
             nvmlDeviceGetFieldValues(clock_event_sw_thermal_ns_total), \
             nvmlDeviceGetFieldValues(clock_event_sync_boost_ns_total), \
             nvmlDeviceGetFieldValues(gpu_recovery_action), \
             nvmlDeviceGetProcessesUtilizationInfo, nvmlDeviceGetSamples(PROCESSOR_CLK)"
        ),
        "{out}"
    );
    assert!(has_line(&out, "  fidelity tier   profiling"), "{out}");

    // Two H100s, the counters on GPU 0 only: listed as not available for GPU 1 alone.
    let (code, out, _) = doctor(fake(), Some("h100-cumulative"));
    assert_eq!(code, 0, "{out}");
    let gpu1 = out.find("GPU 1  ").expect("GPU 1 listed");
    let noted: Vec<usize> = out
        .match_indices("GPM cumulative counters (248-260)")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(noted.len(), 1, "{out}");
    assert!(noted[0] > gpu1, "{out}");
}

#[test]
fn doctor_without_a_library_or_driver_says_so_and_fails() {
    let (code, out, err) = doctor(Path::new("/nonexistent/libnvidia-ml.so.1"), None);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("cannot load the NVML library /nonexistent/libnvidia-ml.so.1"),
        "{err}"
    );
    assert!(err.contains("--nvml-library"), "{err}");
    assert!(out.contains("not usable"), "{out}");
    // The library loads, but the driver is not running (no scenario: DRIVER_NOT_LOADED).
    let (code, _, err) = doctor(fake(), None);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("the NVIDIA driver is not running"), "{err}");
}

#[test]
fn serve_without_nvml_fails_at_start_with_a_clear_message() {
    for source in ["nvml", "auto"] {
        let out = clean_command()
            .args([
                "serve",
                "--source",
                source,
                "--nvml-library",
                "/nonexistent/libnvidia-ml.so.1",
                "--listen",
                "127.0.0.1:0",
            ])
            .output()
            .expect("run truthscale serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            err.contains("cannot load the NVML library /nonexistent/libnvidia-ml.so.1"),
            "{err}"
        );
        assert!(err.contains("--source dcgm-exporter:URL"), "{err}");
        if source == "auto" {
            assert!(
                err.contains("no GPU source configured and no NVIDIA driver found"),
                "{err}"
            );
        }
    }
}

#[test]
fn a_lost_gpu_that_answers_again_is_found_on_the_next_retry() {
    let dir = TempDir::new("nvml-lost-recovers");
    let s = serve(fake(), "h100-lost-recovers", &dir);
    let present = |m: &[Sample]| !series(m, "truthscale_gpu_info", &[]).is_empty();
    s.wait_for(WAIT, "the GPU", present);
    s.wait_for(WAIT, "the GPU lost and gone", |m| {
        errors_of(m, "gpu_lost") >= 1.0 && !present(m)
    });
    // It is looked for again 10 s after it was lost.
    let m = s.wait_for(WAIT, "the GPU back", |m| {
        present(m) && phase_is(m, "memory_bound")
    });
    assert_eq!(errors_of(&m, "gpu_lost"), 1.0);
    assert_eq!(s.process.stderr().matches("NVML: GPU ready.").count(), 2);
}

/// Where each GPU falls off the bus in the middle of a tick: at the call that first answers
/// `GPU_IS_LOST` (`lost_at_call`), the calls before it in the tick having answered. Each
/// of truthscale's own ways to learn it (the handle, a plain call, one field value's entry,
/// the whole field-values call, the XID event wait, a GPM sample, GPM's metrics, a MIG
/// instance's handle) loses that GPU alone: counted once, named in the warning with the
/// call, its series gone while the GPU beside it is served, and found again on the retry.
const LOST_AT: [(&str, Option<&str>, &str, &str); 8] = [
    (
        "nvmlDeviceGetHandleByIndex_v2",
        None,
        "nvmlDeviceGetHandleByIndex",
        "h100-decode",
    ),
    (
        "nvmlDeviceGetMemoryInfo_v2",
        None,
        "nvmlDeviceGetMemoryInfo_v2",
        "h100-decode",
    ),
    (
        "nvmlDeviceGetFieldValues",
        Some("recovery_action"),
        "nvmlDeviceGetFieldValues(gpu_recovery_action)",
        "h100-decode",
    ),
    (
        "nvmlDeviceGetFieldValues",
        None,
        "nvmlDeviceGetFieldValues",
        "h100-decode",
    ),
    (
        "nvmlEventSetWait_v2",
        None,
        "nvmlEventSetWait_v2",
        "h100-decode",
    ),
    ("nvmlGpmSampleGet", None, "nvmlGpmSampleGet", "h100-decode"),
    (
        "nvmlGpmMetricsGet",
        None,
        "nvmlGpmMetricsGet",
        "h100-decode",
    ),
    (
        "nvmlDeviceGetMigDeviceHandleByIndex",
        None,
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "h100-mig",
    ),
];

/// The scenario of [`LOST_AT`] (the fake's call, its field, the name truthscale gives it,
/// the GPU's scenario): GPU k falls off at call k, 3 s in, for 2 s; GPU 8, the
/// decode H100, never does.
fn lost_at_calls(dir: &TempDir) -> PathBuf {
    let device = |name: &str| {
        let text = std::fs::read_to_string(scenario(name)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["devices"][0].clone()
    };
    let mut devices: Vec<serde_json::Value> = LOST_AT
        .iter()
        .map(|(call, field, _, name)| {
            let mut d = device(name);
            d["lost_at_call"] = serde_json::json!({"call": call, "field": field, "after_ms": 3000});
            d["lost_for_ms"] = serde_json::json!(2000);
            d
        })
        .chain([device("h100-decode")])
        .collect();
    for (k, d) in devices.iter_mut().enumerate() {
        d["uuid"] = serde_json::json!(format!("GPU-5f0c6a3e-8d3b-4c1e-9a7f-1000000000{k:02}"));
        d["pci_bus_id"] = serde_json::json!(format!("00000000:{:02X}:00.0", 0x40 + k));
    }
    let path = dir.path().join("scenario.json");
    std::fs::write(&path, serde_json::json!({ "devices": devices }).to_string()).unwrap();
    path
}

/// The GPUs with a `truthscale_gpu_info` series, by index.
fn gpus_served(m: &[Sample]) -> std::collections::BTreeSet<String> {
    series(m, "truthscale_gpu_info", &[])
        .iter()
        .filter_map(|s| s.label("gpu").map(str::to_string))
        .collect()
}

#[test]
fn a_gpu_lost_at_any_call_is_lost_alone_and_found_again() {
    let dir = TempDir::new("nvml-lost-at-calls");
    let path = lost_at_calls(&dir);
    let s = Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "250ms"),
        &[("FAKE_NVML_SCENARIO", path.to_str().unwrap())],
        dir.path(),
    );
    let all: std::collections::BTreeSet<String> = (0..=8).map(|k| k.to_string()).collect();
    s.wait_for(WAIT, "all nine GPUs", |m| gpus_served(m) == all);
    let m = s.wait_for(WAIT, "eight GPUs lost and gone, GPU 8 served", |m| {
        errors_of(m, "gpu_lost") >= 8.0 && gpus_served(m) == ["8".to_string()].into()
    });
    assert_eq!(errors_of(&m, "gpu_lost"), 8.0);
    assert!(phase_is(&m, "memory_bound"), "GPU 8 carries on");
    let err = s.process.stderr();
    for (k, (.., named, _)) in LOST_AT.iter().enumerate() {
        let lost: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("GPU is lost") && l.contains(&format!("gpu={k} ")))
            .collect();
        assert_eq!(lost.len(), 1, "GPU {k}: {lost:?}");
        let call = format!("call=\"{named}\"");
        assert!(
            lost[0].contains(&call),
            "GPU {k} lost at {call}: {}",
            lost[0]
        );
    }
    // Each is looked for again 10 s after it was lost, and answers by then.
    let m = s.wait_for(WAIT, "every GPU back", |m| gpus_served(m) == all);
    assert_eq!(errors_of(&m, "gpu_lost"), 8.0);
    assert_eq!(s.process.stderr().matches("NVML: GPU ready.").count(), 17);
}

#[test]
fn per_process_series_only_when_enabled() {
    let dir = TempDir::new("nvml-procs");
    // Off by default: no process series.
    let s = serve(fake(), "h100-decode", &dir);
    let m = s.wait_for(WAIT, "regime memory_bound", |m| phase_is(m, "memory_bound"));
    assert!(series(&m, "truthscale_process_memory_used_bytes", &[]).is_empty());
    drop(s);
    // On: memory and SM busy per process, labelled with the pid.
    let scenario = scenario("h100-decode");
    let s = Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "250ms"),
        &[
            ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap()),
            ("TRUTHSCALE_SOURCE__PER_PROCESS_SERIES", "true"),
        ],
        dir.path(),
    );
    let m = s.wait_for(WAIT, "process series", |m| {
        !series(m, "truthscale_process_memory_used_bytes", &[]).is_empty()
    });
    let mem = series(&m, "truthscale_process_memory_used_bytes", &[]);
    assert_eq!(mem.len(), 1, "{mem:?}");
    assert_eq!(mem[0].label("pid"), Some("4243"));
    assert_eq!(mem[0].label("gpu"), Some("0"));
    assert_eq!(mem[0].value, 75_161_927_680.0);
    let busy = s.wait_for(WAIT, "process SM busy", |m| {
        !series(m, "truthscale_process_sm_busy_ratio", &[]).is_empty()
    });
    assert_eq!(
        value(
            &busy,
            "truthscale_process_sm_busy_ratio",
            &[("pid", "4243")]
        ),
        Some(1.0)
    );
}

/// A listed process with no utilization sample since the last call was not busy: its SM busy
/// is 0 (where the driver answered), so the GPU's split by SM busy share still holds.
#[test]
fn a_listed_process_without_a_sample_is_not_busy() {
    let dir = TempDir::new("nvml-idle-proc");
    let scenario = scenario("h100-shared-idle-process");
    let s = Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "250ms"),
        &[
            ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap()),
            ("TRUTHSCALE_SOURCE__PER_PROCESS_SERIES", "true"),
        ],
        dir.path(),
    );
    let m = s.wait_for(WAIT, "three processes' SM busy", |m| {
        series(m, "truthscale_process_sm_busy_ratio", &[]).len() == 3
    });
    let busy = |pid| value(&m, "truthscale_process_sm_busy_ratio", &[("pid", pid)]);
    assert_eq!(
        (busy("5001"), busy("5002"), busy("5003")),
        (Some(0.6), Some(0.3), Some(0.0))
    );
}

/// A process utilization sample above 100 % (NVML's `u32` "not available", 0xFFFFFFFF,
/// among them) is no measurement: that process's SM busy is blank, not 42 949 672.95, and
/// counted as a sentinel; the others' are read as before.
#[test]
fn an_impossible_process_sample_is_blank_and_counted() {
    let dir = TempDir::new("nvml-impossible-proc");
    let path = edited_scenario("h100-shared-idle-process", &dir, |v| {
        v["devices"][0]["processes"][1]["sm_util"] = serde_json::json!(4_294_967_295_u32);
    });
    let s = Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "250ms"),
        &[
            ("FAKE_NVML_SCENARIO", path.to_str().unwrap()),
            ("TRUTHSCALE_SOURCE__PER_PROCESS_SERIES", "true"),
        ],
        dir.path(),
    );
    let m = s.wait_for(WAIT, "a sentinel counted", |m| {
        errors_of(m, "sentinel") > 0.0
            && !series(m, "truthscale_process_sm_busy_ratio", &[]).is_empty()
    });
    let busy = |pid| value(&m, "truthscale_process_sm_busy_ratio", &[("pid", pid)]);
    assert_eq!(
        (busy("5001"), busy("5002"), busy("5003")),
        (Some(0.6), None, Some(0.0))
    );
    assert!(
        s.process
            .stderr()
            .contains("process 5002: SM utilization above 100 %"),
        "{}",
        s.process.stderr()
    );
}

/// A GPM sample that fails for a tick or two (a passing error): the GPU is reported
/// unchanged meanwhile, never a window without its GPM values (its effective compute gone
/// from `/metrics` for that window, its tier's figures missing); the failure is counted.
#[test]
fn a_passing_gpm_failure_leaves_no_window_without_gpm() {
    let dir = TempDir::new("nvml-gpm-blip");
    let s = serve(fake(), "h100-gpm-blip", &dir);
    let ecf = |m: &[Sample]| value(m, "truthscale_gpu_effective_compute_ratio", &[("gpu", "0")]);
    s.wait_for(WAIT, "effective compute", |m| ecf(m).is_some());
    // Past the failure (2 to 2.4 s after the library loaded), whenever the start ended.
    let until = std::time::Instant::now() + Duration::from_secs(5);
    let mut missing = 0;
    while std::time::Instant::now() < until {
        let m = s.metrics();
        if ecf(&m).is_none() && value(&m, "truthscale_gpu_up", &[("gpu", "0")]) == Some(1.0) {
            missing += 1;
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    assert_eq!(
        missing, 0,
        "scrapes without effective compute while the GPU was up"
    );
    s.wait_for(WAIT, "the failure counted", |m| errors_of(m, "nvml") >= 1.0);
}

/// A passing failure of the driver's clock samples (`nvmlDeviceGetSamples` answering
/// `UNKNOWN` from 1 s to 4 s after the library loaded, on `h100-prefill`): each failed call
/// is counted, the window's clock falls back to the point reading (1830 MHz: κ = 1, the
/// effective compute that clock gives), and once the samples answer again the window's mean
/// (1464 MHz, κ = 0.8) is back. No window reads any other κ.
#[test]
fn a_passing_clock_samples_failure_falls_back_to_the_point_clock_and_comes_back() {
    let dir = TempDir::new("nvml-samples-blip");
    let path = edited_scenario("h100-prefill", &dir, |v| {
        v["devices"][0]["samples_error_between_ms"] = serde_json::json!([1000, 4000]);
    });
    let s = Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "250ms"),
        &[("FAKE_NVML_SCENARIO", path.to_str().unwrap())],
        dir.path(),
    );
    let deadline = std::time::Instant::now() + WAIT;
    let (mut point, mut back) = (false, false);
    while !back {
        assert!(
            std::time::Instant::now() < deadline,
            "point clock seen: {point}\n{}",
            s.process.stderr()
        );
        let m = s.metrics();
        let get = |n: &str| value(&m, n, &[]);
        if let (Some(kappa), Some(ecf)) = (
            get("truthscale_gpu_clock_correction_ratio"),
            get("truthscale_gpu_effective_compute_ratio"),
        ) {
            let mhz = if (kappa - 1.0).abs() < 1e-12 {
                1830.0
            } else {
                assert!((kappa - 0.8).abs() < 1e-12, "κ {kappa}");
                1464.0
            };
            let want = h100_ecf(0.5, 0.02, 0.05, mhz);
            assert!(
                (ecf - want).abs() < 1e-9,
                "ECF {ecf} at κ {kappa}, want {want}"
            );
            if mhz == 1830.0 {
                assert!(
                    errors_of(&m, "nvml") >= 1.0,
                    "a point clock with no failure counted"
                );
                point = true;
            }
            back = point && mhz == 1464.0;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A passing failure of `nvmlGpmMetricsGet` keeps the earlier sample: the pair after it
/// spans every tick the GPU was reported unchanged, not the last one. The fake's metrics
/// change at 2.5 s (tensor 2 % → 40 %) and its metrics calls fail for the pairs ending in
/// [1.5 s, 3.5 s), the ticks near 2 s and 3 s at a 1 s interval. By hand, with the ticks at
/// 1 + δ, 2 + δ, 3 + δ and 4 + δ s (|δ| < 0.5): the window from 1 + δ to 4 + δ reads
/// (2 × (1.5 − δ) + 40 × (1.5 + δ)) / 3 = 21 + 12.7 δ %, between 14.7 % and 27.3 %. Paired
/// from the last failed tick instead, it would read 40 %.
#[test]
fn a_passing_gpm_metrics_failure_keeps_the_earlier_sample() {
    let dir = TempDir::new("nvml-gpm-metrics-blip");
    let s = decode_turning_to_tensor(&dir, "metrics_error_between_ms", [1500, 3500]);
    let tensor = |m: &[Sample]| value(m, "truthscale_gpu_tensor_active_ratio", &[("gpu", "0")]);
    // Each value the tensor activity took, in order, until the change's full 40 %.
    let seen: Vec<f64> = readings_until(&s, |m| tensor(m).map(Some), |v| near(v, 0.4))
        .into_iter()
        .flatten()
        .collect();
    let mixed: Vec<f64> = seen
        .iter()
        .copied()
        .filter(|v| (v - 0.02).abs() > 1e-9)
        .collect();
    assert!(
        (0.147..=0.273).contains(&mixed[0]),
        "the window after the failure read {}, not a mix; all: {seen:?}",
        mixed[0]
    );
    s.wait_for(WAIT, "the failure counted", |m| errors_of(m, "nvml") >= 1.0);
}

/// A GPM outage past the wait (three ticks): the windows go out without GPM, and the sample
/// from before it is dropped, so no pair spans it. The fake's samples fail in [1.5 s, 7.5 s)
/// and its tensor activity changes at 2.5 s (2 % → 40 %). Once the samples come back, the
/// first window goes out without GPM and the next pair spans one tick: 40 %. Paired with the
/// sample from before the outage, it would read a mix, (2 × 1.5 + 40 × 5.5) / 7 ≈ 32 %.
#[test]
fn a_gpm_outage_past_the_wait_is_not_averaged_into_the_window_after_it() {
    let dir = TempDir::new("nvml-gpm-outage");
    let s = decode_turning_to_tensor(&dir, "sample_error_between_ms", [1500, 7500]);
    let tensor = |m: &[Sample]| value(m, "truthscale_gpu_tensor_active_ratio", &[("gpu", "0")]);
    // Each value the tensor activity took (`None`: a window without it), in order, until
    // the change's full 40 %.
    let up = |m: &[Sample]| value(m, "truthscale_gpu_up", &[("gpu", "0")]) == Some(1.0);
    let seen = readings_until(&s, |m| up(m).then(|| tensor(m)), |v| near(v, 0.4));
    assert!(seen.contains(&None), "no window without GPM: {seen:?}");
    let mixed: Vec<f64> = seen
        .iter()
        .flatten()
        .copied()
        .filter(|v| (v - 0.02).abs() > 1e-9 && (v - 0.4).abs() > 1e-9)
        .collect();
    assert!(mixed.is_empty(), "a window read a mix: {seen:?}");
    s.wait_for(WAIT, "the misses counted", |m| errors_of(m, "nvml") >= 4.0);
}

/// In MIG mode, a tick whose GPM samples all fail is reported unchanged, and the GPU's
/// clock samples of that tick are kept for the next window, which spans it. The fake's
/// clock samples read 1980 MHz, then 1200 MHz from 2.5 s; both instances' GPM samples fail
/// in [1.5 s, 3.5 s), the ticks near 2 s and 3 s at a 1 s interval. The window from about
/// 1 s to 4 s then reads a mean of both clocks (about 1590 MHz); read only since the last
/// failed tick, as it was, it would read 1200 MHz alone.
#[test]
fn a_mig_tick_without_gpm_keeps_its_clock_samples_for_the_next_window() {
    let dir = TempDir::new("nvml-mig-clock");
    let path = edited_scenario("h100-mig", &dir, |v| {
        let d = &mut v["devices"][0];
        d["sm_clock_samples_mhz"] = serde_json::json!(1980);
        d["sm_clock_samples_after"] = serde_json::json!({ "after_ms": 2500, "mhz": 1200 });
        for gi in 0..2 {
            d["mig"][gi]["gpm"]["sample_error_between_ms"] = serde_json::json!([1500, 3500]);
        }
    });
    let s = Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "1s"),
        &[("FAKE_NVML_SCENARIO", path.to_str().unwrap())],
        dir.path(),
    );
    let clock = |m: &[Sample]| value(m, "truthscale_gpu_sm_clock_hertz", &[("mig_instance", "1")]);
    // Each value the clock took, in order, until the 1200 MHz alone.
    let seen: Vec<f64> = readings_until(&s, |m| clock(m).map(Some), |v| near(v, 1.2e9))
        .into_iter()
        .flatten()
        .collect();
    let mixed: Vec<f64> = seen
        .iter()
        .copied()
        .filter(|v| (v - 1.98e9).abs() > 1.0 && (v - 1.2e9).abs() > 1.0)
        .collect();
    assert!(
        mixed.iter().any(|v| (1.3e9..=1.9e9).contains(v)),
        "no window spanned the failed ticks' clock samples: {seen:?}"
    );
}

/// `h100-decode` at a 1 s interval, its tensor activity 2 % turning 40 % at 2.5 s, and its
/// GPM failing (`failing`: `metrics_error_between_ms` or `sample_error_between_ms`) in the
/// span `[from, to)` ms.
fn decode_turning_to_tensor(dir: &TempDir, failing: &str, span: [u64; 2]) -> Sidecar {
    let path = edited_scenario("h100-decode", dir, |v| {
        let gpm = &mut v["devices"][0]["gpm"];
        gpm[failing] = serde_json::json!(span);
        gpm["metrics_after"] = serde_json::json!({
            "after_ms": 2500,
            "metrics": { "any_tensor_util": 40, "hmma_tensor_util": 40 }
        });
    });
    Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "1s"),
        &[("FAKE_NVML_SCENARIO", path.to_str().unwrap())],
        dir.path(),
    )
}

/// Whether `v` is a reading within a millionth of `want`.
fn near(v: Option<f64>, want: f64) -> bool {
    v.is_some_and(|v| (v - want).abs() <= want.abs() * 1e-6)
}

/// Each distinct reading `read` takes from `s`'s `/metrics` (`None` from `read`: that scrape
/// is passed over; `Some(None)`: a scrape without the reading), in order, polled every 100 ms
/// until `done` holds for the last one.
fn readings_until(
    s: &Sidecar,
    read: impl Fn(&[Sample]) -> Option<Option<f64>>,
    done: impl Fn(Option<f64>) -> bool,
) -> Vec<Option<f64>> {
    let mut seen: Vec<Option<f64>> = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while !seen.last().is_some_and(|v| done(*v)) {
        if let Some(v) = read(&s.metrics())
            && seen.last() != Some(&v)
        {
            seen.push(v);
        }
        assert!(std::time::Instant::now() < deadline, "{seen:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    seen
}

/// The choices a start without a source names when there is no driver.
const CHOICES: &str = "): pass --source nvml (with --nvml-library PATH where the library is \
                       elsewhere), --source dcgm-exporter:URL, --source replay:FILE, or --source \
                       sim for the simulated GPU";

/// `truthscale ARGS` with the NVML library `lib` and no source kind, in node mode's
/// environment (and the fake's `scenario_name`, when given): `(exit status, stderr, stdout)`.
/// Only for a run that exits: a start that succeeds would keep serving.
fn without_a_source(
    args: &[&str],
    lib: &str,
    scenario_name: Option<&str>,
    dir: &TempDir,
) -> (i32, String, String) {
    let mut cmd = clean_command();
    cmd.args(args)
        .env("TRUTHSCALE_SOURCE__LIBRARY", lib)
        .env("TRUTHSCALE_NODE__SOCKET", dir.path().join("kubelet.sock"))
        .env("NODE_NAME", "gpu-node-9");
    if let Some(n) = scenario_name {
        cmd.env("FAKE_NVML_SCENARIO", scenario(n));
    }
    let out = cmd.output().expect("run truthscale");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stderr),
        text(&out.stdout),
    )
}

/// Node mode with no source configured: NVML where a driver is present (the library loads
/// and the driver answers), with `source="nvml"` and NVML's PCI id and driver version on
/// `truthscale_gpu_info`; otherwise the start (and `config check`) stops naming the choices,
/// never serving the simulator; `--source sim` serves the simulator.
#[test]
fn node_mode_without_a_source_reads_nvml_or_names_the_choices() {
    let dir = TempDir::new("nvml-no-source");
    let file = dir.path().join("node.toml");
    std::fs::write(&file, "mode = \"node\"\n").expect("write node.toml");
    let serve = ["serve", "--mode", "node", "--listen", "127.0.0.1:0"];
    let check = ["config", "check", file.to_str().unwrap()];
    // No library: no driver. The start and `config check` say the same.
    let absent = "/nonexistent/libnvidia-ml.so.1";
    for args in [&serve[..], &check[..]] {
        let (code, err, out) = without_a_source(args, absent, None, &dir);
        assert_eq!(code, 2, "{args:?}: {err}");
        let head = format!(
            "no GPU source configured and no NVIDIA driver found (cannot load the NVML library \
             {absent}: "
        );
        assert!(err.contains(&head) && err.contains(CHOICES), "{err}");
        assert!(
            !err.contains("Serving /metrics") && out.is_empty(),
            "{err}{out}"
        );
    }
    // The library loads but the driver is not running (the fake without a scenario).
    let lib = fake().to_str().unwrap();
    for args in [&serve[..], &check[..]] {
        let (code, err, _) = without_a_source(args, lib, None, &dir);
        assert_eq!(code, 2, "{args:?}: {err}");
        let want = format!(
            "no GPU source configured and no NVIDIA driver found (NVML ({lib}) loaded, but the \
             NVIDIA driver is not running (NVML_ERROR_DRIVER_NOT_LOADED){CHOICES}"
        );
        assert!(err.contains(&want), "{err}");
    }
    // A driver: config check says what the start will read.
    let (code, err, out) = without_a_source(&check, lib, Some("h100-decode"), &dir);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "{}: ok (no source configured: auto reads NVML ({lib}, driver 550.54.15))\n",
            file.display()
        )
    );
    // And the start reads it.
    let socket = dir.path().join("kubelet.sock").display().to_string();
    let node_env = [
        ("TRUTHSCALE_NODE__SOCKET", socket.as_str()),
        ("NODE_NAME", "gpu-node-9"),
    ];
    let mut env = node_env.to_vec();
    let decode = scenario("h100-decode");
    env.push(("FAKE_NVML_SCENARIO", decode.to_str().unwrap()));
    let s = Sidecar::start(
        &[
            "--mode",
            "node",
            "--nvml-library",
            lib,
            "--interval",
            "250ms",
        ],
        &env,
        dir.path(),
    );
    let m = s.wait_for(WAIT, "the GPU", |m| {
        !series(m, "truthscale_gpu_info", &[]).is_empty()
    });
    let info = series(&m, "truthscale_gpu_info", &[]);
    assert_eq!(info.len(), 1, "{info:?}");
    for (k, v) in [
        ("gpu", "0"),
        ("uuid", "GPU-5f0c6a3e-8d3b-4c1e-9a7f-000000000002"),
        ("model", "NVIDIA H100 80GB HBM3"),
        ("node", "gpu-node-9"),
        ("source", "nvml"),
        ("pci_bus_id", "00000000:1A:00.0"),
        ("driver_version", "550.54.15"),
    ] {
        assert_eq!(info[0].label(k), Some(v), "{k}: {info:?}");
    }
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "nvml")]),
        Some(1.0)
    );
    let stderr = s.process.stderr();
    assert!(stderr.contains("Reading NVML."), "{stderr}");
    drop(s);
    // Asked for: the simulator, which says so.
    let s = Sidecar::start(
        &["--mode", "node", "--source", "sim", "--sim-gpus", "1"],
        &node_env,
        dir.path(),
    );
    let m = s.wait_for(WAIT, "the simulated GPU", |m| {
        !series(m, "truthscale_gpu_info", &[]).is_empty()
    });
    let info = series(&m, "truthscale_gpu_info", &[]);
    assert_eq!(info.len(), 1, "{info:?}");
    for (k, v) in [
        ("source", "sim"),
        ("model", "Simulated H100 SXM"),
        ("pci_bus_id", ""),
        ("driver_version", ""),
    ] {
        assert_eq!(info[0].label(k), Some(v), "{k}: {info:?}");
    }
}
