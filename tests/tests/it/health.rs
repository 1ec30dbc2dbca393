//! Health as a capacity class: `truthscale serve` on the fake NVML library and on a
//! stand-in dcgm-exporter, with GPUs whose driver error state makes them unavailable
//! (a pending row remap, a fatal XID) or leaves them ok. An unavailable GPU is never idle
//! and never busy, and its seconds are counted apart.
//!
//! The ground truth is the scenario itself: which GPU has a pending remap or XID 79 is
//! written here, and NVIDIA's XID catalog says XID 79 is a GPU fallen off the bus.

use serde_json::{Value as Json, json};
use std::time::Duration;
use truthscale_e2e::fake_nvml as fake;
use truthscale_e2e::{Sample, Sidecar, StandIn, TempDir, ok, value};

/// How long a condition may take to show on `/metrics`.
const WAIT: Duration = Duration::from_secs(30);

fn uuid(index: usize) -> String {
    format!("GPU-4ea1e000-0000-4000-8000-00000000000{index}")
}

/// An H100 with its busy flag at 100 % and real tensor work (GPM), and `health` merged in.
fn h100(index: usize, health: &Json) -> Json {
    let mut d = json!({
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": uuid(index),
        "pci_bus_id": format!("00000000:{:02X}:00.0", 0x18 + index),
        "architecture": "hopper",
        "memory_total_bytes": 85_520_809_984_u64,
        "memory_used_bytes": 40_000_000_000_u64,
        "util_percent": 100,
        "power_watts": 600,
        "power_limit_watts": 700,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "temperature_c": 50,
        "gpm": { "metrics": { "sm_util": 90.0, "any_tensor_util": 60.0, "dram_bw_util": 40.0 } },
    });
    for (k, v) in health.as_object().expect("an object") {
        d[k] = v.clone();
    }
    d
}

/// The GPU's series `name`, with `labels` too.
/// A sidecar on the fake NVML library at a 250 ms interval, over a scenario of `devices`.
fn nvml_sidecar(dir: &TempDir, comment: &str, devices: &[Json]) -> Sidecar {
    let scenario = dir.path().join("scenario.json");
    let text = json!({ "_comment": comment, "devices": devices }).to_string();
    std::fs::write(&scenario, text).expect("write the scenario");
    Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "250ms"),
        &[(
            "FAKE_NVML_SCENARIO",
            scenario.to_str().expect("a UTF-8 path"),
        )],
        dir.path(),
    )
}

fn of(m: &[Sample], gpu: usize, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let id = uuid(gpu);
    let mut all = vec![("uuid", id.as_str())];
    all.extend_from_slice(labels);
    value(m, name, &all)
}

fn verdict(m: &[Sample], gpu: usize, v: &str) -> Option<f64> {
    of(m, gpu, "truthscale_gpu_verdict", &[("verdict", v)])
}

fn health(m: &[Sample], gpu: usize, state: &str) -> Option<f64> {
    of(m, gpu, "truthscale_gpu_health", &[("state", state)])
}

#[test]
fn nvml_a_pending_row_remap_is_unavailable_and_a_healthy_gpu_ok() {
    let dir = TempDir::new("health-nvml");
    let devices = vec![
        h100(
            0,
            &json!({
                "ecc_sbe_volatile": 12, "ecc_dbe_volatile": 0, "ecc_dbe_aggregate": 0,
                "row_remap": { "uncorrectable": 1, "pending": true },
                "power_violation_ns": 0, "thermal_violation_ns": 0,
            }),
        ),
        h100(
            1,
            &json!({
                "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0, "ecc_dbe_aggregate": 0,
                "row_remap": {},
                "power_violation_ns": 0, "thermal_violation_ns": 0,
            }),
        ),
    ];
    let s = nvml_sidecar(
        &dir,
        "GPU 0 has a row remap pending; GPU 1 is healthy; both are busy.",
        &devices,
    );
    let m = s.wait_for(WAIT, "unavailable seconds and a busy GPU", |m| {
        of(m, 0, "truthscale_gpu_unavailable_seconds_total", &[]).is_some_and(|v| v > 0.0)
            && verdict(m, 1, "busy") == Some(1.0)
    });
    // GPU 0: unavailable, never idle nor busy.
    assert_eq!(verdict(&m, 0, "unavailable"), Some(1.0));
    assert_eq!(verdict(&m, 0, "idle"), Some(0.0));
    assert_eq!(verdict(&m, 0, "busy"), Some(0.0));
    assert_eq!(health(&m, 0, "unavailable"), Some(1.0));
    assert_eq!(health(&m, 0, "ok"), Some(0.0));
    assert_eq!(
        of(&m, 0, "truthscale_gpu_row_remap_pending", &[]),
        Some(1.0)
    );
    assert_eq!(of(&m, 0, "truthscale_gpu_row_remap_failed", &[]), Some(0.0));
    assert_eq!(
        of(&m, 0, "truthscale_gpu_row_remap_uncorrectable_rows", &[]),
        Some(1.0)
    );
    assert_eq!(
        of(
            &m,
            0,
            "truthscale_gpu_ecc_errors_total",
            &[("kind", "sbe"), ("scope", "volatile")]
        ),
        Some(12.0)
    );
    // GPU 1: ok and busy, no unavailable second.
    assert_eq!(health(&m, 1, "ok"), Some(1.0));
    assert_eq!(verdict(&m, 1, "unavailable"), Some(0.0));
    assert_eq!(
        of(&m, 1, "truthscale_gpu_unavailable_seconds_total", &[]),
        Some(0.0)
    );
    assert_eq!(
        of(
            &m,
            1,
            "truthscale_gpu_clock_violation_seconds_total",
            &[("reason", "power")]
        ),
        Some(0.0)
    );
}

/// One scrape of a GPU whose last XID is 79 and whose row remap is pending, and of a
/// healthy one, under the legacy names (`legacy`) or DCGM 4.6's canonical ones.
fn scrape(legacy: bool) -> String {
    let (xid, failed, unc, action) = if legacy {
        (
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
        )
    } else {
        (
            "DCGM_FI_DEV_XID_ERROR",
            "DCGM_FI_DEV_ROW_REMAP_FAILED",
            "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
            "DCGM_FI_DEV_GPU_RECOVERY_ACTION",
        )
    };
    let mut out = String::new();
    for (gpu, (x, pending, a)) in [(79, 1, 1), (0, 0, 0)].into_iter().enumerate() {
        let l = format!(
            "gpu=\"{gpu}\",UUID=\"{}\",modelName=\"NVIDIA H100 80GB HBM3\"",
            uuid(gpu)
        );
        out.push_str(&format!(
            "DCGM_FI_DEV_GPU_UTIL{{{l}}} 100\n\
             DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{l}}} 0.6\n\
             DCGM_FI_PROF_DRAM_ACTIVE{{{l}}} 0.4\n\
             DCGM_FI_DEV_SM_CLOCK{{{l}}} 1980\n\
             {xid}{{{l}}} {x}\n\
             DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{l}}} 0\n\
             DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{l}}} 0\n\
             DCGM_FI_DEV_ECC_DBE_AGG_TOTAL{{{l}}} 0\n\
             DCGM_FI_DEV_ROW_REMAP_PENDING{{{l}}} {pending}\n\
             {failed}{{{l}}} 0\n\
             {unc}{{{l}}} {pending}\n\
             {action}{{{l}}} {a}\n\
             DCGM_FI_DEV_POWER_VIOLATION{{{l}}} 0\n\
             DCGM_FI_DEV_THERMAL_VIOLATION{{{l}}} 0\n"
        ));
    }
    out
}

/// The health series of a dcgm-exporter answer, once the healthy GPU is judged busy, and
/// the profiling readings dropped as untrusted (after XID 79) by then.
fn health_series(body: &str, name: &str) -> (Vec<(String, Option<f64>)>, Option<f64>) {
    let server = StandIn::start(ok(body));
    let src = format!("dcgm-exporter:{}", server.url());
    let dir = TempDir::new(name);
    let s = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
    let m = s.wait_for(WAIT, "both GPUs judged", |m| {
        verdict(m, 1, "busy") == Some(1.0)
            && of(m, 0, "truthscale_gpu_unavailable_seconds_total", &[]).is_some_and(|v| v > 0.0)
    });
    let mut out = Vec::new();
    for gpu in 0..2 {
        for v in ["unavailable", "busy", "idle"] {
            out.push((format!("{gpu} verdict {v}"), verdict(&m, gpu, v)));
        }
        for h in ["ok", "degraded", "unavailable"] {
            out.push((format!("{gpu} health {h}"), health(&m, gpu, h)));
        }
        for f in [
            "truthscale_gpu_xid_last",
            "truthscale_gpu_row_remap_pending",
            "truthscale_gpu_row_remap_failed",
            "truthscale_gpu_row_remap_uncorrectable_rows",
            "truthscale_gpu_recovery_action",
            "truthscale_gpu_effective_compute_ratio",
        ] {
            out.push((format!("{gpu} {f}"), of(&m, gpu, f, &[])));
        }
    }
    let untrusted = value(
        &m,
        "truthscale_derivation_diagnostics_total",
        &[("kind", "untrusted_after_xid")],
    );
    (out, untrusted)
}

#[test]
fn dcgm_health_fields_under_legacy_and_canonical_names_read_the_same() {
    let (legacy, untrusted_legacy) = health_series(&scrape(true), "health-dcgm-legacy");
    let (canonical, untrusted_canonical) = health_series(&scrape(false), "health-dcgm-canonical");
    assert_eq!(legacy, canonical);
    // GPU 0's tensor and DRAM readings, dropped each window and counted.
    for u in [untrusted_legacy, untrusted_canonical] {
        assert!(u.is_some_and(|u| u >= 2.0), "{u:?}");
    }
    let get = |k: &str| legacy.iter().find(|(n, _)| n == k).and_then(|(_, v)| *v);
    assert_eq!(get("0 verdict unavailable"), Some(1.0));
    assert_eq!(get("0 verdict busy"), Some(0.0));
    assert_eq!(get("0 verdict idle"), Some(0.0));
    assert_eq!(get("0 health unavailable"), Some(1.0));
    assert_eq!(get("0 truthscale_gpu_xid_last"), Some(79.0));
    assert_eq!(get("0 truthscale_gpu_recovery_action"), Some(1.0));
    // After XID 79 the profiling readings are not trusted: no effective compute.
    assert_eq!(get("0 truthscale_gpu_effective_compute_ratio"), None);
    assert_eq!(get("1 verdict busy"), Some(1.0));
    assert_eq!(get("1 health ok"), Some(1.0));
    assert_eq!(get("1 truthscale_gpu_xid_last"), Some(0.0));
    assert!(get("1 truthscale_gpu_effective_compute_ratio").is_some());
}

/// The fake driver's health state common to the NVML tests below: no ECC error, no remap,
/// no violation time, and `more` merged in.
fn clean_nvml(more: &Json) -> Json {
    let mut h = json!({
        "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0, "ecc_dbe_aggregate": 0,
        "row_remap": {},
        "power_violation_ns": 0, "thermal_violation_ns": 0,
    });
    for (k, v) in more.as_object().expect("an object") {
        h[k] = v.clone();
    }
    h
}

/// NVML's recovery action (a field value), its critical XID events and the clock-event
/// reasons' times. GPU 0: the driver asks for a GPU reset (recovery action 1). GPU 1: XID 79
/// arrives 4 s after the driver is opened, so its last XID goes from 0 (no XID since the
/// events were registered) to 79 and it turns unavailable. GPU 2: XID 13 (the
/// application's) arrives and it stays ok and busy; its clock-event reasons' times are read.
/// A failed registration of the XID events is tried again (every 10 s), not given up for
/// good: the driver refuses it for the first second, the last XID is blank until the retry,
/// then XID 79 is read and the GPU turns unavailable.
#[test]
fn nvml_registers_the_xid_events_again_after_a_failure() {
    let dir = TempDir::new("health-nvml-xid-retry");
    let devices = vec![h100(
        0,
        &clean_nvml(&json!({
            "register_events_failing_ms": 1000,
            "xid_events": [{ "xid": 79, "after_ms": 0 }],
        })),
    )];
    let s = nvml_sidecar(
        &dir,
        "GPU 0: the XID events cannot be registered for 1 s; XID 79 waits.",
        &devices,
    );
    let before = s.wait_for(WAIT, "GPU 0 busy, its XID blank", |m| {
        verdict(m, 0, "busy") == Some(1.0)
    });
    assert_eq!(of(&before, 0, "truthscale_gpu_xid_last", &[]), None);
    let m = s.wait_for(WAIT, "XID 79 once the events are registered", |m| {
        of(m, 0, "truthscale_gpu_xid_last", &[]) == Some(79.0)
    });
    assert_eq!(health(&m, 0, "unavailable"), Some(1.0));
    let failed = value(
        &m,
        "truthscale_source_errors_total",
        &[("source", "nvml"), ("kind", "nvml")],
    );
    assert!(failed.is_some_and(|n| n >= 1.0), "{failed:?}");
}

#[test]
fn nvml_recovery_action_xid_events_and_clock_event_times() {
    let dir = TempDir::new("health-nvml-events");
    let devices = vec![
        h100(0, &clean_nvml(&json!({ "recovery_action": 1 }))),
        h100(
            1,
            &clean_nvml(&json!({
                "recovery_action": 0,
                "xid_events": [{ "xid": 79, "after_ms": 4000 }],
            })),
        ),
        h100(
            2,
            &clean_nvml(&json!({
                "recovery_action": 0,
                "xid_events": [{ "xid": 13, "after_ms": 0 }],
                "clock_event_ns": {
                    "sw_power_cap": 2_500_000_000_u64, "sync_boost": 0,
                    "sw_thermal": 0, "hw_thermal": 750_000_000, "hw_power_brake": 0,
                },
            })),
        ),
        h100(
            3,
            &clean_nvml(&json!({
                "recovery_action": 0,
                "xid_events": [{ "xid": 95, "after_ms": 0 }, { "xid": 45, "after_ms": 0 }],
            })),
        ),
    ];
    let s = nvml_sidecar(
        &dir,
        "GPU 0: recovery action 1; GPU 1: XID 79 after 4 s; GPU 2: XID 13, and clock-event times; GPU 3: XID 95 then 45 in one poll.",
        &devices,
    );
    // Before XID 79 arrives GPU 1 reads XID 0: registered, nothing yet, busy.
    let before = s.wait_for(WAIT, "GPU 1 busy with no XID yet", |m| {
        of(m, 1, "truthscale_gpu_xid_last", &[]) == Some(0.0) && verdict(m, 1, "busy") == Some(1.0)
    });
    assert_eq!(health(&before, 1, "ok"), Some(1.0));
    let m = s.wait_for(WAIT, "XID 79 on GPU 1 and GPU 2 busy", |m| {
        of(m, 1, "truthscale_gpu_xid_last", &[]) == Some(79.0)
            && verdict(m, 1, "unavailable") == Some(1.0)
            && verdict(m, 2, "busy") == Some(1.0)
    });
    // GPU 0: the driver asks for a reset.
    assert_eq!(of(&m, 0, "truthscale_gpu_recovery_action", &[]), Some(1.0));
    assert_eq!(verdict(&m, 0, "unavailable"), Some(1.0));
    assert_eq!(health(&m, 0, "unavailable"), Some(1.0));
    assert_eq!(of(&m, 0, "truthscale_gpu_xid_last", &[]), Some(0.0));
    // GPU 1: XID 79 (fallen off the bus), unavailable, never busy.
    assert_eq!(of(&m, 1, "truthscale_gpu_recovery_action", &[]), Some(0.0));
    assert_eq!(health(&m, 1, "unavailable"), Some(1.0));
    assert_eq!(verdict(&m, 1, "busy"), Some(0.0));
    // GPU 2: XID 13 is the application's: ok and busy.
    assert_eq!(of(&m, 2, "truthscale_gpu_xid_last", &[]), Some(13.0));
    assert_eq!(health(&m, 2, "ok"), Some(1.0));
    assert_eq!(verdict(&m, 2, "unavailable"), Some(0.0));
    // Its clock-event times, ns / 1e9, by reason; GPU 0 reads none (not supported).
    let event = |gpu, reason| {
        of(
            &m,
            gpu,
            "truthscale_gpu_clock_event_seconds_total",
            &[("reason", reason)],
        )
    };
    // The XIDs of the last five minutes: GPU 2's one, not fatal; GPU 3's fatal 95 and the
    // cleanup XID 45 after it in the same poll, its last: unavailable for the window's 95.
    let window = |gpu| {
        (
            of(&m, gpu, "truthscale_gpu_xid_window_errors", &[]),
            of(&m, gpu, "truthscale_gpu_xid_window_fatal", &[]),
        )
    };
    assert_eq!(window(0), (Some(0.0), Some(0.0)));
    assert_eq!(window(2), (Some(1.0), Some(0.0)));
    assert_eq!(window(3), (Some(2.0), Some(95.0)));
    assert_eq!(of(&m, 3, "truthscale_gpu_xid_last", &[]), Some(45.0));
    assert_eq!(health(&m, 3, "unavailable"), Some(1.0));
    assert_eq!(event(2, "sw_power_cap"), Some(2.5));
    assert_eq!(event(2, "hw_thermal"), Some(0.75));
    assert_eq!(event(2, "sync_boost"), Some(0.0));
    assert_eq!(event(0, "sw_power_cap"), None);
    // Unavailable seconds: GPU 0 counts them from its first window, GPU 2 none.
    assert!(of(&m, 0, "truthscale_gpu_unavailable_seconds_total", &[]).is_some_and(|v| v > 0.0));
    assert_eq!(
        of(&m, 2, "truthscale_gpu_unavailable_seconds_total", &[]),
        Some(0.0)
    );
}
