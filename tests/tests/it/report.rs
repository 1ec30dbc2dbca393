//! `truthscale report` end to end: a real Prometheus backfilled with promtool holding a fleet
//! whose answers are known (in truthscale's own series and, the same fleet, as dcgm-exporter
//! fields with its pod labels), read back through the HTTP API; the HTML page in headless
//! Chromium; and bad input: an unreachable or hung server, a selector that matches nothing,
//! GPUs without pod labels, a busy-flag-only fleet, a window with a gap.
//!
//! The fleet, 11 H100s of 80 GiB over the last 6 hours at a 60 s step (`source="sim"` on
//! every series; truthscale's series name the model `Simulated H100 SXM`):
//! - `steady/p0`…`p7`: saturation 0.2 (tensor 0.2, DRAM 0.1), busy flag 0.9, 30 GiB;
//! - `alt/a`, `alt/b`: busy at alternate half-hours (tensor 0.7, DRAM 0.2, busy flag 1.0;
//!   else all 0), 30 GiB each;
//! - `dev/notebook`: holds its GPU and does nothing (all 0), 2 GiB.
//!
//! Known answers with headroom 0.2: compute demand 8 × 0.2 + 0.7 = 2.3 at every step, memory
//! demand 302 / 80 = 3.775; pooled lower bound max(⌈2.3 / 0.8⌉, ⌈3.775⌉) = 4 (memory);
//! packed 5: the alternating pair and the notebook on one GPU (62 GiB, aligned sum 0.7), the
//! steady pods two by two (60 GiB; three would be 90).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use truthscale_e2e::{
    Prometheus, Silent, Spawned, TempDir, clean_command, free_port, require_tool,
    require_tool_or_return,
};

const STEP: i64 = 60;
/// Seven hours of data; the report reads the last six.
const POINTS: i64 = 7 * 60;
const GIB_MIB: f64 = 1024.0;
const GIB: f64 = 1_073_741_824.0;
/// Steps of a 6 h window at 60 s: 360, each standing for the minute up to it.
const STEPS: u64 = 360;
/// The `gappy` job has no data for these 60 minutes (counted back from the end).
const GAP_FROM_END: std::ops::Range<i64> = 120..180;

/// What one `truthscale` run left behind.
pub(crate) struct Run {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) took: Duration,
}

impl Run {
    pub(crate) fn json(&self) -> Value {
        assert_eq!(self.code, Some(0), "stderr:\n{}", self.stderr);
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

pub(crate) fn truthscale(args: &[&str]) -> Run {
    let tmp = TempDir::new("report-run");
    let mut cmd = clean_command();
    cmd.args(args);
    let started = Instant::now();
    let p = Spawned::start(cmd, tmp.path(), "truthscale");
    let status = p.finish(Duration::from_secs(60));
    Run {
        code: status.code(),
        stdout: std::fs::read_to_string(tmp.path().join("truthscale.stdout")).unwrap_or_default(),
        stderr: std::fs::read_to_string(tmp.path().join("truthscale.stderr")).unwrap_or_default(),
        took: started.elapsed(),
    }
}

/// One pod's values at absolute time `t` (seconds): tensor, DRAM, busy flag, memory GiB.
type Profile = fn(i64) -> (f64, f64, f64, f64);

fn steady(_: i64) -> (f64, f64, f64, f64) {
    (0.2, 0.1, 0.9, 30.0)
}
/// Busy in the even half-hours of the epoch.
fn a_busy(t: i64) -> bool {
    (t / 1800) % 2 == 0
}
fn alt_a(t: i64) -> (f64, f64, f64, f64) {
    if a_busy(t) {
        (0.7, 0.2, 1.0, 30.0)
    } else {
        (0.0, 0.0, 0.0, 30.0)
    }
}
fn alt_b(t: i64) -> (f64, f64, f64, f64) {
    alt_a(t + 1800)
}
fn notebook(_: i64) -> (f64, f64, f64, f64) {
    (0.0, 0.0, 0.0, 2.0)
}

/// `(node, gpu, namespace, pod, profile)` of the fleet.
fn fleet() -> Vec<(&'static str, u32, &'static str, String, Profile)> {
    let mut v: Vec<(&'static str, u32, &'static str, String, Profile)> = (0..8)
        .map(|i| ("node-a", i, "steady", format!("p{i}"), steady as Profile))
        .collect();
    v.push(("node-b", 0, "alt", "a".into(), alt_a));
    v.push(("node-b", 1, "alt", "b".into(), alt_b));
    v.push(("node-b", 2, "dev", "notebook".into(), notebook));
    v
}

/// OpenMetrics text builder: one family per name, in any order of series.
#[derive(Default)]
pub(crate) struct Om(std::collections::BTreeMap<&'static str, String>);

impl Om {
    pub(crate) fn add(&mut self, name: &'static str, labels: &str, t: i64, v: f64) {
        let s = self.0.entry(name).or_default();
        let _ = writeln!(s, "{name}{{{labels}}} {v} {t}");
    }
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        for (name, body) in &self.0 {
            let _ = writeln!(out, "# TYPE {name} gauge");
            out.push_str(body);
        }
        out.push_str("# EOF\n");
        out
    }
}

/// The last data timestamp: the last whole minute.
pub(crate) fn end_now() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (i64::try_from(now).unwrap() / STEP) * STEP
}

/// Every job's series.
pub(crate) fn openmetrics(end: i64) -> String {
    let mut om = Om::default();
    let times = (0..POINTS).map(|i| end - (POINTS - 1 - i) * STEP);
    for t in times {
        for (node, gpu, ns, pod, f) in fleet() {
            let (tensor, dram, busy, mem) = f(t);
            // truthscale's own gauges.
            let l = format!(
                "job=\"truthscale\",source=\"sim\",gpu=\"{gpu}\",uuid=\"GPU-{node}-{gpu}\",model=\"Simulated H100 SXM\",node=\"{node}\",namespace=\"{ns}\",pod=\"{pod}\",container=\"main\""
            );
            om.add("truthscale_gpu_tensor_active_ratio", &l, t, tensor);
            om.add("truthscale_gpu_dram_active_ratio", &l, t, dram);
            om.add("truthscale_gpu_reported_utilization_ratio", &l, t, busy);
            om.add("truthscale_gpu_memory_used_bytes", &l, t, mem * GIB);
            om.add("truthscale_gpu_memory_total_bytes", &l, t, 80.0 * GIB);
            // The same fleet as dcgm-exporter writes it.
            let l = format!(
                "job=\"dcgm\",source=\"sim\",gpu=\"{gpu}\",UUID=\"GPU-{node}-{gpu}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"{node}\",namespace=\"{ns}\",pod=\"{pod}\",container=\"main\""
            );
            om.add("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", &l, t, tensor);
            om.add("DCGM_FI_PROF_DRAM_ACTIVE", &l, t, dram);
            om.add("DCGM_FI_DEV_GPU_UTIL", &l, t, busy * 100.0);
            om.add("DCGM_FI_DEV_FB_USED", &l, t, mem * GIB_MIB);
            om.add("DCGM_FI_DEV_FB_FREE", &l, t, (80.0 - mem) * GIB_MIB);
        }
        // kube-state-metrics' owners: the notebook's StatefulSet, which Kubeflow's notebook
        // controller names after the Notebook and whose pod it labels `notebook-name` (on
        // kube_pod_labels with `--metric-labels-allowlist=pods=[notebook-name]`): the
        // Notebook; p0's ReplicaSet, whose Deployment kube_replicaset_owner names.
        om.add(
            "kube_pod_owner",
            "job=\"ksm\",namespace=\"dev\",pod=\"notebook\",owner_kind=\"StatefulSet\",owner_name=\"notebook\",owner_is_controller=\"true\"",
            t,
            1.0,
        );
        om.add(
            "kube_pod_labels",
            "job=\"ksm\",namespace=\"dev\",pod=\"notebook\",label_notebook_name=\"notebook\"",
            t,
            1.0,
        );
        om.add(
            "kube_pod_owner",
            "job=\"ksm\",namespace=\"steady\",pod=\"p0\",owner_kind=\"ReplicaSet\",owner_name=\"steady-7d9f8b\",owner_is_controller=\"true\"",
            t,
            1.0,
        );
        om.add(
            "kube_replicaset_owner",
            "job=\"ksm\",namespace=\"steady\",replicaset=\"steady-7d9f8b\",owner_kind=\"Deployment\",owner_name=\"steady\",owner_is_controller=\"true\"",
            t,
            1.0,
        );
        // Two GPUs without pod labels (dcgm-exporter without the pod-resources mapping).
        for gpu in 0..2 {
            let l = format!(
                "job=\"nopod\",source=\"sim\",gpu=\"{gpu}\",UUID=\"GPU-z-{gpu}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-z\""
            );
            om.add("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", &l, t, 0.3);
            om.add("DCGM_FI_PROF_DRAM_ACTIVE", &l, t, 0.1);
            om.add("DCGM_FI_DEV_GPU_UTIL", &l, t, 50.0);
            om.add("DCGM_FI_DEV_FB_USED", &l, t, 10.0 * GIB_MIB);
            om.add("DCGM_FI_DEV_FB_FREE", &l, t, 70.0 * GIB_MIB);
        }
        // Two pods with the busy flag and memory only: no profiling fields.
        for gpu in 0..2 {
            let l = format!(
                "job=\"busyonly\",source=\"sim\",gpu=\"{gpu}\",UUID=\"GPU-y-{gpu}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-y\",namespace=\"b\",pod=\"q{gpu}\""
            );
            om.add("DCGM_FI_DEV_GPU_UTIL", &l, t, 80.0);
            om.add("DCGM_FI_DEV_FB_USED", &l, t, 30.0 * GIB_MIB);
            om.add("DCGM_FI_DEV_FB_FREE", &l, t, 50.0 * GIB_MIB);
        }
        // Two steady pods whose exporter was down for an hour.
        let back = (end - t) / 60;
        if !GAP_FROM_END.contains(&back) {
            for gpu in 0..2 {
                let l = format!(
                    "job=\"gappy\",source=\"sim\",gpu=\"{gpu}\",uuid=\"GPU-g-{gpu}\",model=\"Simulated H100 SXM\",node=\"node-g\",namespace=\"g\",pod=\"r{gpu}\""
                );
                om.add("truthscale_gpu_tensor_active_ratio", &l, t, 0.2);
                om.add("truthscale_gpu_dram_active_ratio", &l, t, 0.1);
                om.add("truthscale_gpu_reported_utilization_ratio", &l, t, 0.9);
                om.add("truthscale_gpu_memory_used_bytes", &l, t, 30.0 * GIB);
                om.add("truthscale_gpu_memory_total_bytes", &l, t, 80.0 * GIB);
            }
        }
    }
    om.text()
}

/// A Prometheus serving a TSDB backfilled with [`openmetrics`], with no scrape jobs.
struct Backfilled {
    url: String,
    _prom: Prometheus,
    _dir: TempDir,
}

fn backfilled() -> Backfilled {
    let dir = TempDir::new("report-prom");
    let prom = Prometheus::backfilled(&openmetrics(end_now()), dir.path(), None);
    Backfilled {
        url: prom.url(),
        _prom: prom,
        _dir: dir,
    }
}

fn report(p: &Backfilled, selector: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "report",
        "--prometheus",
        p.url.as_str(),
        "--since",
        "6h",
        "--step",
        "60s",
        "--selector",
        selector,
    ];
    args.extend_from_slice(extra);
    truthscale(&args)
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    v.pointer(path)
        .unwrap_or_else(|| panic!("{path} missing in {v:#}"))
}

fn num(v: &Value, path: &str) -> f64 {
    at(v, path)
        .as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number: {}", at(v, path)))
}

fn strs(v: &Value, path: &str) -> Vec<String> {
    at(v, path)
        .as_array()
        .unwrap_or_else(|| panic!("{path} is not an array"))
        .iter()
        .map(|x| x.as_str().unwrap_or_default().to_owned())
        .collect()
}

/// All four percentiles and the max of a summary equal `want`, over `steps` steps.
fn flat(v: &Value, path: &str, want: f64, steps: u64) {
    for q in ["p50", "p95", "p99", "max"] {
        assert_eq!(num(v, &format!("{path}/{q}")), want, "{path}/{q}");
    }
    assert_eq!(
        at(v, &format!("{path}/steps_known")).as_u64(),
        Some(steps),
        "{path}/steps_known"
    );
}

fn rightsizing<'a>(v: &'a Value, workload: &str) -> &'a Value {
    at(v, "/rightsizing")
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["workload"] == workload)
        .unwrap_or_else(|| panic!("{workload} not right-sized: {v:#}"))
}

/// The answers of the whole fleet, the same from either family.
fn assert_fleet(v: &Value, family: &str) {
    assert_eq!(v["schema"], "truthscale.report");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(at(v, "/source/family"), family);
    assert_eq!(v["workload_unit"], "pod");
    assert_eq!(v["workloads"], 11);
    assert_eq!(v["gpu_model"], "H100 SXM");
    assert_eq!(num(v, "/gpu_memory_bytes"), 80.0 * GIB);
    assert_eq!(v["steps"], STEPS);
    assert_eq!(v["steps_with_data"], STEPS);
    assert_eq!(v["step_seconds"], 60.0);
    assert_eq!(v["headroom"], 0.2);

    // Fleet sizing, flat in time: 11 GPUs held, the busy flag claims 8 × 0.9 + 1.0 = 8.2,
    // saturation adds to 8 × 0.2 + 0.7 = 2.3, memory to (10 × 30 + 2) / 80 = 3.775.
    flat(v, "/sizing/allocated_gpus", 11.0, STEPS);
    flat(v, "/sizing/busy_claim_gpus/summary", 8.2, STEPS);
    flat(v, "/sizing/compute_demand_gpus/summary", 2.3, STEPS);
    flat(v, "/sizing/memory_demand_gpus/summary", 3.775, STEPS);
    assert_eq!(v["sizing"]["compute_demand_gpus"]["workloads"], 11);
    assert!(strs(v, "/sizing/compute_demand_gpus/unmeasured").is_empty());

    let pooled = at(v, "/sizing/pooled_lower_bound");
    assert_eq!(pooled["gpus"], 4);
    assert_eq!(pooled["compute_gpus"], 2.875);
    assert_eq!(pooled["memory_gpus"], 3.775);
    assert_eq!(pooled["binding"], "memory");

    let packing = at(v, "/sizing/packing");
    assert_eq!(packing["gpus"], 5);
    assert_eq!(packing["packed_gpus"], 5);
    assert_eq!(packing["excluded_gpus"], 0);
    let bins = packing["bins"].as_array().unwrap();
    assert_eq!(
        strs(&bins[0], "/workloads"),
        ["alt/a", "alt/b", "dev/notebook"]
    );
    assert_eq!(num(&bins[0], "/peak_memory_bytes"), 62.0 * GIB);
    assert_eq!(num(&bins[0], "/saturation_p99"), 0.7);
    for (i, bin) in bins.iter().enumerate().skip(1) {
        let k = 2 * (i - 1);
        assert_eq!(
            strs(bin, "/workloads"),
            [format!("steady/p{k}"), format!("steady/p{}", k + 1)]
        );
        assert_eq!(num(bin, "/peak_memory_bytes"), 60.0 * GIB);
        assert_eq!(num(bin, "/saturation_p99"), 0.4);
    }

    // Co-location: the interleaved pair (with the notebook) frees 2 GPUs, each steady pair 1.
    let groups = at(v, "/colocation").as_array().unwrap();
    assert_eq!(groups.len(), 5);
    let g = &groups[0];
    assert_eq!(strs(g, "/workloads"), ["alt/a", "alt/b", "dev/notebook"]);
    assert_eq!(
        (g["gpus_held"].as_u64(), g["gpus_freed"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(g["sum_of_p99s"], 1.4);
    assert_eq!(g["saturation_p99"], 0.7);
    assert_eq!(g["interleaved"], true);
    for g in &groups[1..] {
        assert_eq!(g["gpus_freed"], 1);
        assert_eq!(g["interleaved"], false);
        assert_eq!(g["sum_of_p99s"], 0.4);
    }

    // Right-sizing.
    let s = rightsizing(v, "steady/p0");
    assert_eq!(num(s, "/memory_peak_bytes"), 30.0 * GIB);
    assert_eq!(num(s, "/memory_p99_bytes"), 30.0 * GIB);
    assert_eq!(num(s, "/memory_total_bytes"), 80.0 * GIB);
    assert_eq!(s["memory_peak_fraction"], 0.375);
    assert_eq!(s["saturation_p99"], 0.2);
    assert_eq!(s["saturation_measured_share"], 1.0);
    assert_eq!(at(s, "/mig_fit/profile"), "3g.40gb");
    assert_eq!(at(s, "/mig_fit/binding"), "memory");
    assert_eq!(at(s, "/smaller_gpu/key"), "l40s");
    let a = rightsizing(v, "alt/a");
    assert_eq!(a["saturation_p99"], 0.7);
    // p95 of the tensor pipe 0.7 over 0.8 needs 0.875 of the SMs: only the whole GPU.
    assert_eq!(at(a, "/mig_fit/profile"), "7g.80gb");
    assert_eq!(at(a, "/mig_fit/binding"), "compute");
    assert!(a["smaller_gpu"].is_null());
    let n = rightsizing(v, "dev/notebook");
    assert_eq!(at(n, "/mig_fit/profile"), "1g.10gb");
    assert_eq!(at(n, "/smaller_gpu/name"), "L4");

    // Idle allocated capacity: the notebook, idle all of its 360 minutes.
    let hours = STEPS as f64 * (60.0 / 3600.0);
    let idle = at(v, "/idle/workloads").as_array().unwrap();
    assert_eq!(idle.len(), 1, "{idle:#?}");
    assert_eq!(idle[0]["workload"], "dev/notebook");
    assert_eq!(idle[0]["idle_share"], 1.0);
    assert_eq!(num(&idle[0], "/idle_gpu_hours"), hours);
    assert_eq!(num(&idle[0], "/held_hours"), hours);
    // Idle for the whole window at its last reading, holding its 2 GiB; its owner from
    // kube-state-metrics' kube_pod_owner (the StatefulSet) and kube_pod_labels (its
    // notebook-name: the Notebook), and the command that would stop it; its cost at
    // the price given (2.5 a GPU-hour).
    assert_eq!(num(&idle[0], "/idle_for_hours"), hours);
    assert_eq!(num(&idle[0], "/memory_held_bytes"), 2.0 * GIB);
    assert_eq!(num(&idle[0], "/idle_cost"), 2.5 * hours);
    assert_eq!(at(&idle[0], "/owner/kind"), "Notebook");
    assert_eq!(at(&idle[0], "/owner/name"), "notebook");
    assert_eq!(
        at(&idle[0], "/command"),
        "kubectl -n dev annotate notebook/notebook kubeflow-resource-stopped=\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\" --overwrite"
    );

    // Savings: 11 − 5 = 6 GPUs × 6.0167 h × 2.5.
    let sv = at(v, "/savings");
    assert_eq!(sv["estimate"], true);
    assert_eq!(sv["baseline_gpus"], 11);
    assert_eq!(sv["needed_gpus"], 5);
    assert_eq!(sv["gpus_freed"], 6);
    assert_eq!(num(sv, "/hours"), hours);
    assert_eq!(num(sv, "/gpu_hours"), 6.0 * hours);
    assert_eq!(num(sv, "/cost"), 2.5 * (6.0 * hours));
    assert!(!strs(v, "/method").is_empty());

    // The series, as many as the steps.
    for s in [
        "allocated_gpus",
        "busy_claim_gpus",
        "compute_demand_gpus",
        "memory_demand_gpus",
    ] {
        let a = at(v, &format!("/series/{s}")).as_array().unwrap();
        assert_eq!(a.len() as u64, STEPS, "{s}");
    }
    assert_eq!(at(v, "/series/compute_demand_gpus/0"), 2.3);
}

pub(crate) const FLEET_FLAGS: &[&str] = &[
    "--json",
    "--cost-per-gpu-hour",
    "2.5",
    "--idle-share",
    "0.6",
];

#[test]
fn report_pins_the_fleet_from_truthscale_series() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let p = backfilled();
    let run = report(&p, "{job=\"truthscale\"}", FLEET_FLAGS);
    eprintln!("report: {}", run.stderr);
    let v = run.json();
    assert_fleet(&v, "truthscale");
    assert_eq!(
        v["simulated"], true,
        "truthscale's series name a simulated model"
    );
    assert_eq!(rightsizing(&v, "alt/a")["simulated"], true);
    assert!(
        run.stderr.contains("waiting for Prometheus"),
        "time split on stderr: {}",
        run.stderr
    );

    // The issue's example alone: 8 × (0.2, 30 GiB) need 3 GPUs pooled (memory), 4 packed.
    let run = report(&p, "{job=\"truthscale\",namespace=\"steady\"}", &["--json"]);
    let v = run.json();
    assert_eq!(v["workloads"], 8);
    let pooled = at(&v, "/sizing/pooled_lower_bound");
    assert_eq!(pooled["gpus"], 3);
    assert_eq!(pooled["compute_gpus"], 2.0);
    assert_eq!(pooled["memory_gpus"], 3.0);
    assert_eq!(pooled["binding"], "memory");
    assert_eq!(at(&v, "/sizing/packing/gpus"), 4);
    assert_eq!(at(&v, "/savings/gpus_freed"), 4);
    assert!(at(&v, "/savings/cost").is_null(), "no price, no cost");

    // The text report says the same.
    let run = report(&p, "{job=\"truthscale\"}", &["--cost-per-gpu-hour", "2.5"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let t = &run.stdout;
    for want in [
        "GPUs needed, pooled lower bound: 4  (compute p99 2.88 / memory 3.77; bound by memory)",
        "GPUs needed, packed (first-fit decreasing): 5",
        "frees 2: alt/a + alt/b + dev/notebook",
        "interleaved: their p99s add to 140.0%",
        "a smaller model fits: L4",
        "SAVINGS (estimate): 6 GPUs freed at the peak (11 today, 5 needed)",
        "[SIMULATED]",
        "METHOD",
    ] {
        assert!(t.contains(want), "text lacks {want:?}:\n{t}");
    }

    // `--idle`: the header and the reclaimable capacity alone, the notebook with its owner
    // and the command that would stop it.
    let run = report(
        &p,
        "{job=\"truthscale\"}",
        &["--idle", "--cost-per-gpu-hour", "2.5"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let t = &run.stdout;
    assert!(t.starts_with("truthscale report: "), "{t}");
    assert!(t.contains("IDLE ALLOCATED CAPACITY"), "{t}");
    assert!(t.contains("dev/notebook: idle 100.0%"), "{t}");
    assert!(t.contains("Notebook notebook"), "{t}");
    assert!(
        t.contains(
            "to suspend it: kubectl -n dev annotate notebook/notebook kubeflow-resource-stopped="
        ),
        "{t}"
    );
    for other in [
        "FLEET SIZING",
        "WHERE THE GPU-HOURS WENT",
        "SAVINGS",
        "METHOD",
    ] {
        assert!(!t.contains(other), "--idle printed {other:?}:\n{t}");
    }
}

#[test]
fn report_from_dcgm_only_history_gives_the_same_answers() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let p = backfilled();
    let run = report(&p, "{job=\"dcgm\"}", FLEET_FLAGS);
    eprintln!("report: {}", run.stderr);
    let v = run.json();
    assert_fleet(&v, "dcgm_exporter");
    // dcgm-exporter's model names carry no simulation mark (the series' source="sim" label
    // is not one dcgm-exporter defines).
    assert_eq!(v["simulated"], false);
    assert_eq!(rightsizing(&v, "steady/p3")["gpu"], "node-a/GPU-node-a-3");
}

/// Count the pixels of each colour in a PNG (8-bit RGB or RGBA), decoded with Python's
/// zlib: `[(r, g, b)] → counts`.
fn pixel_counts(png: &Path, colors: &[(u8, u8, u8)]) -> Vec<u64> {
    const DECODE: &str = r#"
import sys, zlib, struct
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n'
pos, idat, w, h, ct = 8, b'', 0, 0, 0
while pos < len(data):
    n, kind = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b'IHDR':
        w, h, depth, ct = struct.unpack('>IIBB', body[:10])
        assert depth == 8 and ct in (2, 6), (depth, ct)
    elif kind == b'IDAT':
        idat += body
    pos += 12 + n
bpp = 3 if ct == 2 else 4
raw = zlib.decompress(idat)
stride = w * bpp
prev = bytearray(stride)
want = [tuple(int(x) for x in c.split(',')) for c in sys.argv[2:]]
counts = [0] * len(want)
i = 0
for y in range(h):
    f = raw[i]; line = bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b = prev[x]
        c = prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        px = tuple(line[x:x + 3])
        for k, c in enumerate(want):
            if px == c: counts[k] += 1
    prev = line
print(' '.join(map(str, counts)))
"#;
    let out = Command::new(require_tool("python3", "python3"))
        .arg("-c")
        .arg(DECODE)
        .arg(png)
        .args(colors.iter().map(|(r, g, b)| format!("{r},{g},{b}")))
        .output()
        .expect("start python3");
    assert!(
        out.status.success(),
        "decoding {}: {}",
        png.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect()
}

fn chromium(tmp: &Path, name: &str, extra: &[String], url: &str) -> (String, String) {
    let chromium = require_tool("/usr/bin/chromium", "chromium");
    let profile = tmp.join(format!("profile-{name}"));
    std::fs::create_dir_all(&profile).unwrap();
    let mut cmd = Command::new(chromium);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1200,1500",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(extra)
    .arg(url);
    let mut run = Spawned::start(cmd, tmp, &format!("chromium-{name}"));
    let status = match run.wait_timeout(Duration::from_secs(60)) {
        Some(s) => s,
        None => {
            run.kill();
            panic!("chromium {name} ran over 60 s:\n{}", run.stderr());
        }
    };
    assert!(
        status.success(),
        "chromium {name}: {status}\n{}",
        run.stderr()
    );
    (run.stdout(), run.stderr())
}

#[test]
fn report_html_renders_in_chromium() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/chromium", "chromium");
    require_tool_or_return!("python3", "python3");
    let p = backfilled();
    let tmp = TempDir::new("report-html");
    let html = tmp.path().join("report.html");
    let html_s = html.display().to_string();
    let run = report(
        &p,
        "{job=\"truthscale\"}",
        &["--html", &html_s, "--cost-per-gpu-hour", "2.5"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    // Self-contained: no script, no stylesheet or font to fetch, no image to load.
    for banned in [
        "<script", "<link", "@import", "url(", " src=", "<img", "<iframe",
    ] {
        assert!(!page.contains(banned), "the page has {banned:?}");
    }
    assert_eq!(
        page.matches("<svg").count(),
        3,
        "three inline SVG charts: the funnel, the bars, the timeline"
    );
    // The timeline reads clock time, and its legend is below the plot, not in it.
    let timeline = &page[page.find("id=\"timeline\"").expect("the timeline")..];
    let svg_end = timeline.find("</svg>").unwrap();
    assert!(
        timeline[..svg_end].contains("time (UTC)"),
        "clock-time axis"
    );
    assert!(
        timeline[svg_end + "</svg>".len()..]
            .trim_start()
            .starts_with("</div><p class=\"legend\">"),
        "the legend follows the plot"
    );
    assert!(
        !timeline[..svg_end].contains("compute demand"),
        "no legend drawn over the plot"
    );
    // Readable type: no text in the charts under 13.5 px.
    for size in page.match_indices("font-size=\"").map(|(i, _)| {
        let rest = &page[i + 11..];
        rest[..rest.find('"').unwrap()]
            .trim_end_matches("px")
            .parse::<f64>()
            .unwrap()
    }) {
        assert!(size >= 13.5, "chart text of {size} px");
    }
    assert!(page.contains("id=\"pooled\">4<") && page.contains("id=\"packed\">5<"));

    let url = format!("file://{html_s}");
    let png = tmp.path().join("report.png");
    let (_, stderr) = chromium(
        tmp.path(),
        "screenshot",
        &[format!("--screenshot={}", png.display())],
        &url,
    );
    for bad in ["CONSOLE", "Uncaught", "ERR_FILE_NOT_FOUND", "net::ERR"] {
        assert!(!stderr.contains(bad), "chromium logged {bad}:\n{stderr}");
    }
    // The charts' colours: the compute-demand line (blue), the packed bar and line (red),
    // the pooled bound (green), the busy-flag line and bar (orange).
    // The allocated line (grey, widest, drawn first) shows under the others.
    let colors = [
        (41, 128, 185),
        (192, 57, 43),
        (39, 174, 96),
        (230, 126, 34),
        (170, 170, 170),
    ];
    let counts = pixel_counts(&png, &colors);
    eprintln!("report_html_renders_in_chromium: chart pixels {counts:?}");
    for (c, n) in colors.iter().zip(&counts) {
        assert!(*n >= 500, "colour {c:?}: only {n} pixels in the screenshot");
    }
    let (dom, stderr) = chromium(tmp.path(), "dom", &["--dump-dom".to_owned()], &url);
    assert!(!stderr.contains("CONSOLE"), "{stderr}");
    assert!(dom.contains("SIMULATED"), "no SIMULATED badge");
    assert!(dom.contains("GPUs needed vs allocated"));
    assert!(dom.contains("alt/a + alt/b + dev/notebook"));
    assert_eq!(dom.matches("<svg").count(), 3);
}

#[test]
fn report_bad_input_gets_a_clear_message_and_nothing_made_up() {
    // Nothing listening.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let run = truthscale(&["report", "--prometheus", &url, "--since", "1h"]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains(&format!(
            "cannot reach Prometheus at {url}/api/v1/label/__name__/values"
        )),
        "{}",
        run.stderr
    );
    // A server that accepts and never answers: the request's time limit ends it.
    let silent = Silent::start();
    let url = format!("http://{}", silent.addr());
    let run = truthscale(&["report", "--prometheus", &url, "--prometheus-timeout", "1s"]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains(&url)
            && run.stderr.contains("within 1s")
            && run.stderr.contains("--prometheus-timeout"),
        "{}",
        run.stderr
    );
    assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
    drop(silent);
    // Flags.
    let run = truthscale(&["report"]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("give --prometheus URL"),
        "{}",
        run.stderr
    );
    let run = truthscale(&["report", "--prometheus", "http://x", "--headroom", "1.5"]);
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.contains("--headroom"), "{}", run.stderr);

    // The rest reads a real Prometheus.
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let p = backfilled();
    // A selector that matches nothing.
    let run = report(&p, "{job=\"nothing-here\"}", &["--json"]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains(&p.url)
            && run.stderr.contains(
                "no DCGM_FI_*, dcgm_* or truthscale_gpu_* series matching {job=\"nothing-here\"}"
            )
            && run
                .stderr
                .contains("; Prometheus has no GPU sample in the 7d before "),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty());

    // GPUs without pod labels: each GPU is one workload, allocation unknown.
    let v = report(&p, "{job=\"nopod\"}", &["--json"]).json();
    assert_eq!(v["workload_unit"], "gpu");
    assert_eq!(v["workloads"], 2);
    assert!(
        v["sizing"]["allocated_gpus"].is_null(),
        "allocation is unknown"
    );
    flat(&v, "/sizing/gpus_reporting", 2.0, STEPS);
    assert!(
        strs(&v, "/notes")[0].starts_with("no GPU carried pod labels"),
        "{:?}",
        v["notes"]
    );
    // Who held them is unknown: no funnel (it would call every hour unallocated), said.
    assert!(v["funnel"].is_null(), "{}", v["funnel"]);
    assert!(
        strs(&v, "/notes")
            .iter()
            .any(|n| n.starts_with("no funnel: no GPU carried pod labels and no holder was read")),
        "{:?}",
        v["notes"]
    );
    // Nor can its hours be charged by a grouping: refused, saying why.
    let refused = report(&p, "{job=\"nopod\"}", &["--by", "namespace", "--json"]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("names a pod, and no holder was read"),
        "{}",
        refused.stderr
    );
    // 2 × (0.3, 10 GiB) fit one GPU; savings count against the 2 GPUs reporting.
    assert_eq!(at(&v, "/sizing/packing/gpus"), 1);
    assert_eq!(at(&v, "/savings/baseline_gpus"), 2);
    assert_eq!(at(&v, "/savings/gpus_freed"), 1);

    // No profiling fields: compute demand unknown (never 0), nothing packed.
    let v = report(&p, "{job=\"busyonly\"}", &["--json"]).json();
    assert!(at(&v, "/sizing/compute_demand_gpus/summary").is_null());
    assert_eq!(
        strs(&v, "/sizing/compute_demand_gpus/unmeasured"),
        ["b/q0", "b/q1"]
    );
    flat(&v, "/sizing/busy_claim_gpus/summary", 1.6, STEPS);
    let pooled = at(&v, "/sizing/pooled_lower_bound");
    assert!(pooled["compute_gpus"].is_null());
    assert_eq!(pooled["memory_gpus"], 0.75);
    assert_eq!(pooled["gpus"], 1);
    assert_eq!(pooled["binding"], "memory");
    assert!(at(&v, "/sizing/packing").is_null());
    assert!(at(&v, "/savings").is_null(), "no savings without a packing");
    assert!(at(&v, "/rightsizing/0/saturation_p99").is_null());
    let notes = strs(&v, "/notes").join("\n");
    assert!(
        notes.contains("saturation (compute demand) was never measured for b/q0, b/q1"),
        "{notes}"
    );
    assert!(notes.contains("no packing"), "{notes}");

    // A 60-minute hole: Prometheus' 5-minute lookback (inclusive in 2.x) fills its first 5
    // steps, the other 55 have no data and are left out.
    let v = report(&p, "{job=\"gappy\"}", &["--json"]).json();
    assert_eq!(v["steps"], STEPS);
    assert_eq!(v["steps_with_data"], STEPS - 55);
    flat(&v, "/sizing/compute_demand_gpus/summary", 0.4, STEPS - 55);
    flat(&v, "/sizing/allocated_gpus", 2.0, STEPS - 55);
    let series = at(&v, "/series/compute_demand_gpus").as_array().unwrap();
    assert_eq!(series.iter().filter(|x| x.is_null()).count(), 55);
    assert!(
        strs(&v, "/notes")
            .iter()
            .any(|n| n.starts_with("55 of 360 steps had no reading of any GPU")),
        "{:?}",
        v["notes"]
    );
    // The held hours count only the steps with readings.
    let r = rightsizing(&v, "g/r0");
    assert_eq!(
        num(r, "/saturation_measured_share"),
        (STEPS - 55) as f64 / STEPS as f64
    );
}

/// `pods` pods over the last hour, each in a namespace of its own (`ns0/p0`…), at a
/// steady 0.2, each requesting one GPU except `ns0/p0`, which requests `first_request`.
fn many_namespaces(end: i64, pods: usize, first_request: f64) -> String {
    let mut om = Om::default();
    for i in 0..61 {
        let t = end - (60 - i) * STEP;
        for p in 0..pods {
            let l = format!(
                "job=\"many\",source=\"sim\",gpu=\"0\",uuid=\"GPU-many-{p}\",model=\"Simulated H100 SXM\",node=\"node-{p}\",namespace=\"ns{p}\",pod=\"p{p}\",container=\"main\""
            );
            om.add("truthscale_gpu_tensor_active_ratio", &l, t, 0.2);
            om.add("truthscale_gpu_dram_active_ratio", &l, t, 0.1);
            om.add("truthscale_gpu_reported_utilization_ratio", &l, t, 0.9);
            om.add("truthscale_gpu_memory_used_bytes", &l, t, 30.0 * GIB);
            om.add("truthscale_gpu_memory_total_bytes", &l, t, 80.0 * GIB);
            let r = format!(
                "namespace=\"ns{p}\",pod=\"p{p}\",container=\"main\",resource=\"nvidia_com_gpu\",unit=\"integer\""
            );
            let request = if p == 0 { first_request } else { 1.0 };
            om.add("kube_pod_container_resource_requests", &r, t, request);
        }
    }
    om.text()
}

/// `--by` over 120 namespaces lists the 50 most allocated (`--top`) and one row
/// `(the rest: 70 groups)` with their sums, in the text and the CSV; the JSON keeps all
/// 120, and `--top 200` lists every group.
#[test]
fn report_by_many_groups_lists_the_top_and_sums_the_rest() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let dir = TempDir::new("report-many");
    let prom = Prometheus::backfilled(&many_namespaces(end_now(), 120, 1.0), dir.path(), None);
    let url = prom.url();
    let csv = dir.path().join("showback.csv");
    let csv_s = csv.to_str().unwrap();
    let base = [
        "report",
        "--prometheus",
        url.as_str(),
        "--since",
        "1h",
        "--step",
        "60s",
        "--by",
        "namespace",
    ];
    let v = truthscale(&[&base[..], &["--json"]].concat()).json();
    let groups = at(&v, "/showback/total/groups").as_array().unwrap().clone();
    assert_eq!(groups.len(), 120);
    let summed = |k: &str| format!("{:.1}", groups[50..].iter().map(|g| num(g, k)).sum::<f64>());
    let run = truthscale(&[&base[..], &["--csv", csv_s]].concat());
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    // The SHOWBACK table's rows of namespaces.
    let table = |text: &str| -> usize {
        let section = text.split("SHOWBACK BY").nth(1).unwrap_or_default();
        section
            .lines()
            .take_while(|l| !l.trim_start().starts_with("check:"))
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|w| w.starts_with("ns"))
            })
            .count()
    };
    assert_eq!(table(&run.stdout), 50, "{}", run.stdout);
    let rest = run
        .stdout
        .lines()
        .find(|l| l.contains("(the rest: 70 groups)"))
        .unwrap_or_else(|| panic!("no rest row:\n{}", run.stdout));
    let cells: Vec<&str> = rest.split_whitespace().collect();
    assert_eq!(
        cells[4..6],
        [
            summed("/allocated_gpu_hours"),
            summed("/requested_gpu_hours")
        ],
        "{rest}"
    );
    assert!(
        run.stdout
            .contains("120 groups: the 50 most allocated are listed"),
        "{}",
        run.stdout
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows = text
        .lines()
        .filter(|l| l.split(',').nth(3).is_some_and(|g| g.starts_with("ns")));
    assert_eq!(rows.count(), 50, "{text}");
    assert_eq!(text.lines().count(), 1 + 51 + 1, "{text}");
    assert!(text.contains(",(the rest: 70 groups),70,"), "{text}");

    let all = truthscale(&[&base[..], &["--top", "200"]].concat());
    assert_eq!(table(&all.stdout), 120, "{}", all.stdout);
    assert!(!all.stdout.contains("the rest"), "{}", all.stdout);
}

/// A pod requesting 1e308 GPUs (summed, +inf GPU-hours in the text and the CSV) is
/// refused at reading: exit 2 naming the pod and the series, nothing printed.
#[test]
fn report_refuses_an_absurd_gpu_request() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let dir = TempDir::new("report-absurd");
    let prom = Prometheus::backfilled(&many_namespaces(end_now(), 3, 1e308), dir.path(), None);
    let url = prom.url();
    let run = truthscale(&[
        "report",
        "--prometheus",
        url.as_str(),
        "--since",
        "1h",
        "--step",
        "60s",
        "--by",
        "namespace",
    ]);
    assert_eq!(
        run.code,
        Some(2),
        "stdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    for want in [
        "kube_pod_container_resource_requests",
        "of pod ns0/p0 is 1e308",
        "not a GPU count",
    ] {
        assert!(
            run.stderr.contains(want),
            "{want:?} not in:\n{}",
            run.stderr
        );
    }
}

/// A Prometheus that accepts the connection and never answers: the wait is said on stderr
/// ("still waiting for Prometheus at URL (N s)"), and at the timeout the error says the
/// server sent no answer, not that a query ran long (no retries either).
#[test]
fn a_prometheus_that_never_answers_is_said_while_waiting_and_named_hung() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Accept every connection and hold it, answering nothing (the thread ends with the
    // test process).
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            held.push(c);
        }
    });
    let run = truthscale(&[
        "report",
        "--prometheus",
        &url,
        "--prometheus-timeout",
        "2s",
        "--waiting-notice",
        "1s",
    ]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "truthscale: still waiting for Prometheus at {url} (1 s)"
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "Prometheus at {url} accepted the connection but sent no answer within 2s"
        )) && run
            .stderr
            .contains("the server is hung, not a query running long"),
        "{}",
        run.stderr
    );
    assert!(
        run.took < Duration::from_secs(20),
        "no retries: {:?}",
        run.took
    );
}
