//! A GPU lost to health in the report from history: a real Prometheus backfilled with
//! dcgm-exporter's series of three H100s over the last three hours at a 60 s step (the
//! report reads the last two: 120 steps of 1/60 h), each GPU at 1830 MHz so that effective
//! compute is its tensor activity:
//! - gpu 0, `ml/train`: busy 100 %, tensor active 0.5, healthy throughout;
//! - gpu 1, `ml/broken`: busy 100 %, tensor 0.3, until its last 60 steps, in which a row
//!   remap is pending and the last XID is 79 (fallen off the bus): busy 0, tensor 0;
//! - gpu 2, no pod: busy 0, healthy.
//!
//! The broken GPU's last hour is unavailable in the funnel and in the showback, never idle
//! capacity; the funnel's stages add up to the fleet.

use std::fmt::Write as _;

use super::showback::{end_now, group, json, near, report};
use truthscale_e2e::{Prometheus, TempDir, require_tool_or_return};

/// Three hours of points, the report reading the last two.
const POINTS: i64 = 3 * 60;
const STEP: i64 = 60;
/// Steps of the 2 h window: 120, each standing for the minute up to it.
const W: f64 = 120.0;
/// Hours per step.
const H: f64 = 1.0 / 60.0;
/// The broken GPU's last steps, unavailable.
const DOWN: i64 = 60;

/// `(gpu, pod, busy %, tensor)` while healthy.
const GPUS: [(u32, &str, f64, f64); 3] = [
    (0, "train", 100.0, 0.5),
    (1, "broken", 100.0, 0.3),
    (2, "", 0.0, 0.0),
];

fn openmetrics(end: i64) -> String {
    let mut families: std::collections::BTreeMap<&str, String> = Default::default();
    let mut add = |name: &'static str, labels: &str, t: i64, v: f64| {
        let _ = writeln!(
            families.entry(name).or_default(),
            "{name}{{{labels}}} {v} {t}"
        );
    };
    for i in 0..POINTS {
        let t = end - (POINTS - 1 - i) * STEP;
        let from_end = (end - t) / STEP;
        for (gpu, pod, busy, tensor) in GPUS {
            let pod_labels = if pod.is_empty() {
                String::new()
            } else {
                format!(",namespace=\"ml\",pod=\"{pod}\",container=\"main\"")
            };
            let l = format!(
                "job=\"dcgm\",gpu=\"{gpu}\",UUID=\"GPU-{gpu}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-a\"{pod_labels}"
            );
            let down = pod == "broken" && from_end < DOWN;
            let (busy, tensor) = if down { (0.0, 0.0) } else { (busy, tensor) };
            add("DCGM_FI_DEV_GPU_UTIL", &l, t, busy);
            add("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", &l, t, tensor);
            add("DCGM_FI_PROF_DRAM_ACTIVE", &l, t, tensor / 4.0);
            add("DCGM_FI_DEV_SM_CLOCK", &l, t, 1830.0);
            add("DCGM_FI_DEV_FB_USED", &l, t, 8192.0);
            add("DCGM_FI_DEV_FB_FREE", &l, t, 81_920.0 - 8192.0);
            add(
                "DCGM_FI_DEV_XID_ERRORS",
                &l,
                t,
                if down { 79.0 } else { 0.0 },
            );
            add(
                "DCGM_FI_DEV_ROW_REMAP_PENDING",
                &l,
                t,
                if down { 1.0 } else { 0.0 },
            );
        }
    }
    crate::showback::exposition(&families)
}

#[test]
fn a_gpu_with_a_pending_row_remap_and_xid_79_is_unavailable_not_idle() {
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let dir = TempDir::new("unavailable-prom");
    let end = end_now();
    let prom = Prometheus::backfilled(&openmetrics(end), dir.path(), None);
    // The window ends at the data's end, whatever minute the report runs in (a run in the
    // next minute read the last sample once more, through the lookback).
    let until = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(end).unwrap()),
    )
    .to_string();
    let run = report(
        &prom.url(),
        "job=\"dcgm\"",
        &[
            "--by",
            "namespace",
            "--json",
            "--cost-per-gpu-hour",
            "2",
            "--until",
            &until,
        ],
    );
    let v = json(&run);
    let f = &v["funnel"];
    let down = DOWN as f64;
    near(&f["total_gpu_hours"], 3.0 * W * H, "total");
    near(&f["unavailable_gpu_hours"], down * H, "unavailable");
    near(&f["healthy_gpu_hours"], (3.0 * W - down) * H, "healthy");
    near(&f["unallocated_gpu_hours"], W * H, "unallocated (gpu 2)");
    near(&f["allocated_gpu_hours"], (2.0 * W - down) * H, "allocated");
    near(&f["idle_held_gpu_hours"], 0.0, "idle held");
    near(&f["use_unmeasured_gpu_hours"], 0.0, "use not measured");
    near(&f["active_gpu_hours"], (2.0 * W - down) * H, "active");
    // Effective compute is tensor activity at the reference clock: 0.5 on gpu 0 for the
    // whole window, 0.3 on gpu 1 while it was healthy.
    near(
        &f["effective_gpu_hours"],
        (0.5 * W + 0.3 * (W - down)) * H,
        "effective",
    );
    assert_eq!(f["adds_up"], true, "{}", f["check"]);
    assert_eq!(f["health_unread_gpu_hours"], 0.0);
    // The showback: ml held the broken GPU's last hour, unavailable and priced apart, idle
    // never.
    let ml = group(&v, "ml");
    near(&ml["unavailable_gpu_hours"], down * H, "ml unavailable");
    near(&ml["idle_gpu_hours"], 0.0, "ml idle");
    near(
        &ml["cost"]["unavailable"],
        2.0 * down * H,
        "ml unavailable cost",
    );
    near(&ml["allocated_gpu_hours"], 2.0 * W * H, "ml allocated");
    // Not idle capacity: the broken GPU's pod is not listed, and no hour of it is idle.
    let idle = v["idle"]["workloads"].as_array().unwrap();
    assert!(
        idle.iter().all(|w| w["workload"] != "ml/broken"),
        "{idle:#?}"
    );
    near(&v["idle"]["idle_gpu_hours"], 0.0, "idle capacity");
}
