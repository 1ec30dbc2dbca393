//! Fractional sharing end to end: a real Prometheus backfilled with three H100s over the last
//! hour, and kube-state-metrics' and HAMi's series beside them, read back by `report --by
//! namespace`:
//! - GPU 0: HAMi pods `ha/a` (`nvidia.com/gpucores` 25, its own use measured by HAMi at 20 %
//!   of the GPU) and `hb/b` (gpucores 50), each requesting 1 `nvidia.com/gpu`;
//! - GPU 1: KAI's `kai/k` (annotation `gpu-fraction: "0.5"`) and KAI's reservation pod
//!   `kai-resource-reservation/gpu-reservation-n1`;
//! - GPU 2: `dra/c`, its GPU claimed through DRA (`kube_pod_resourceclaim_info`), no
//!   `nvidia_com_gpu` request;
//! - GPU 3: HAMi pod `hi/idle` alone (gpucores 25), idle throughout;
//! - GPU 4: HAMi pod `hp/p` alone, `nvidia.com/gpumem-percentage` 25.
//!
//! Known answers, `H` one GPU's hours over the window: `ha` 0.25 H, `hb` 0.5 H, `kai` 0.5 H,
//! `dra` H, `hi` 0.25 H, `hp` 0.25 H allocated and requested; the reservation pod nothing;
//! unallocated 2.25 H; `ha`'s use measured, not unknown: busy 20 % of the GPU over its quarter,
//! 0.8 × 0.25 H; `hi/idle` holds 0.25 H of idle capacity, its quarter, not the GPU's H.

use crate::report::{Om, end_now, truthscale};
use truthscale_e2e::{Prometheus, TempDir, require_tool_or_return};

const STEP: i64 = 60;
const GIB: f64 = 1_073_741_824.0;

fn history(end: i64) -> String {
    let mut om = Om::default();
    let gpus = [
        (0, "ha", "a"),
        (0, "hb", "b"),
        (1, "kai", "k"),
        (1, "kai-resource-reservation", "gpu-reservation-n1"),
        (2, "dra", "c"),
        (3, "hi", "idle"),
        (4, "hp", "p"),
    ];
    for i in 0..61 {
        let t = end - (60 - i) * STEP;
        for (gpu, ns, pod) in gpus {
            let l = format!(
                "job=\"share\",source=\"sim\",gpu=\"{gpu}\",uuid=\"GPU-share-{gpu}\",model=\"Simulated H100 SXM\",node=\"n1\",namespace=\"{ns}\",pod=\"{pod}\",container=\"main\""
            );
            let busy = if ns == "hi" { 0.0 } else { 1.0 };
            om.add("truthscale_gpu_tensor_active_ratio", &l, t, 0.2 * busy);
            om.add("truthscale_gpu_dram_active_ratio", &l, t, 0.1 * busy);
            om.add(
                "truthscale_gpu_reported_utilization_ratio",
                &l,
                t,
                0.9 * busy,
            );
            om.add("truthscale_gpu_memory_used_bytes", &l, t, 10.0 * GIB);
            om.add("truthscale_gpu_memory_total_bytes", &l, t, 80.0 * GIB);
        }
        for (ns, pod, resource, v) in [
            ("ha", "a", "nvidia_com_gpu", 1.0),
            ("ha", "a", "nvidia_com_gpucores", 25.0),
            ("hb", "b", "nvidia_com_gpu", 1.0),
            ("hb", "b", "nvidia_com_gpucores", 50.0),
            ("hi", "idle", "nvidia_com_gpu", 1.0),
            ("hi", "idle", "nvidia_com_gpucores", 25.0),
            ("hp", "p", "nvidia_com_gpu", 1.0),
            ("hp", "p", "nvidia_com_gpumem_percentage", 25.0),
        ] {
            let r = format!(
                "namespace=\"{ns}\",pod=\"{pod}\",container=\"main\",resource=\"{resource}\",unit=\"integer\""
            );
            om.add("kube_pod_container_resource_requests", &r, t, v);
        }
        om.add(
            "kube_pod_annotations",
            "namespace=\"kai\",pod=\"k\",annotation_gpu_fraction=\"0.5\"",
            t,
            1.0,
        );
        om.add(
            "kube_pod_resourceclaim_info",
            "namespace=\"dra\",pod=\"c\",uid=\"u1\",claim_name=\"gpu\",resourceclaim_name=\"c-gpu-x1\",resourceclaim_template_name=\"one-gpu\"",
            t,
            1.0,
        );
        om.add(
            "hami_container_device_utilization_ratio",
            "namespace=\"ha\",pod=\"a\",container=\"main\",vdevice_index=\"0\",device_uuid=\"GPU-share-0\"",
            t,
            20.0,
        );
    }
    om.text()
}

/// `report --by namespace` charges each fraction, never the reservation pod, counts the DRA
/// claim as requested and HAMi's measured use as the holder's own; the groups plus
/// unallocated reconcile with the fleet. An idle pod granted a fraction holds that fraction
/// of idle capacity.
#[test]
fn report_charges_fractions_and_counts_dra_claims() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let dir = TempDir::new("report-sharing");
    let prom = Prometheus::backfilled(&history(end_now()), dir.path(), None);
    let url = prom.url();
    let v = truthscale(&[
        "report",
        "--prometheus",
        url.as_str(),
        "--since",
        "1h",
        "--step",
        "60s",
        "--by",
        "namespace",
        "--json",
    ])
    .json();
    let total = &v["showback"]["total"];
    assert_eq!(total["reconciled"], true, "{}", total["check"]);
    let fleet = total["fleet_gpu_hours"].as_f64().unwrap();
    let h = fleet / 5.0;
    assert!(h > 0.9, "{fleet}");
    let groups = total["groups"].as_array().unwrap();
    let group = |n: &str| groups.iter().find(|g| g["group"] == n);
    let f = |n: &str, k: &str| group(n).unwrap_or_else(|| panic!("no {n}: {v}"))[k].as_f64();
    let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-6);
    for (ns, share) in [
        ("ha", 0.25),
        ("hb", 0.5),
        ("kai", 0.5),
        ("dra", 1.0),
        ("hi", 0.25),
        ("hp", 0.25),
    ] {
        let a = f(ns, "allocated_gpu_hours");
        assert!(close(a, share * h), "{ns}: {a:?} not {share} × {h}");
        let r = f(ns, "requested_gpu_hours");
        assert!(
            close(r, share * h),
            "{ns} requested: {r:?} not {share} × {h}"
        );
    }
    assert!(group("kai-resource-reservation").is_none(), "{total}");
    let unallocated = total["unallocated_gpu_hours"].as_f64();
    assert!(close(unallocated, 2.25 * h), "{unallocated:?}");
    let idle = &v["idle"];
    assert_eq!(idle["workloads"][0]["workload"], "hi/idle", "{idle}");
    let held = idle["workloads"][0]["idle_gpu_hours"].as_f64();
    assert!(close(held, 0.25 * h), "{held:?} not 0.25 × {h}");
    assert!(close(f("hi", "idle_gpu_hours"), 0.25 * h), "as charged");
    assert_eq!(f("ha", "use_unknown_gpu_hours"), Some(0.0));
    let busy = f("ha", "busy_gpu_hours");
    assert!(close(busy, 0.8 * 0.25 * h), "{busy:?}");
    // By hand: `hb` holds gpucores 50 of GPU 0, so 0.5 H allocated; nothing measures its own
    // use (HAMi reports `ha`'s alone) and GPU 0's counters are the device's, shared with
    // `ha`, so the whole share is of unknown use: 0.5 H, none of it used or idle.
    let unknown = f("hb", "use_unknown_gpu_hours");
    assert!(close(unknown, 0.5 * h), "{unknown:?} not 0.5 × {h}");
    assert_eq!(f("hb", "used_gpu_hours"), Some(0.0));
    assert_eq!(f("hb", "idle_gpu_hours"), Some(0.0));
    let notes = v["showback"]["notes"].to_string();
    for want in [
        "gpu-reservation-n1",
        "DRA resource claims",
        "charged the fraction",
    ] {
        assert!(notes.contains(want), "{want:?} not in {notes}");
    }
}
