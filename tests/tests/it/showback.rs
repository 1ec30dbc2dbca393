//! `truthscale report --by` end to end: a real Prometheus backfilled with promtool holding a
//! fleet's dcgm-exporter history, kube-state-metrics' pod labels and GPU requests, and the
//! same fleet in truthscale's own series; the GPU-hours each group held and did, read back
//! through the HTTP API, against what the test itself counts from the workload it wrote.
//!
//! The fleet, five H100s of 80 GiB, every series over the last 3 hours at a 60 s step (the
//! report reads the last 2 hours: 120 steps of 1/60 h):
//! - `node-a` gpu 0, `research/train` (team `research`): busy 100 %, tensor active 0.5;
//! - `node-a` gpu 1, `research/notebook` (team `research`): holds it, does nothing;
//! - `node-a` gpu 2, time-sliced between `web/chat-a` and `web/chat-b` (team `serving`):
//!   dcgm-exporter writes the device's series once per pod; busy 100 %, tensor 0.1;
//! - `node-b` gpu 0, no pod: busy 50 %, tensor 0.2;
//! - `node-b` gpu 1, `web/batch` (no team label): busy 100 %, tensor 0.3, its readings NaN
//!   for 30 minutes in the middle of the window (unmeasured, never idle).
//!
//! Every GPU runs at 1830 MHz with DRAM activity 0.1 (the notebook's 0). Every pod requests
//! one `nvidia.com/gpu` (kube-state-metrics), the time-sliced ones too.

use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use truthscale_e2e::{Prometheus, Spawned, TempDir, clean_command, require_tool_or_return};

const STEP: i64 = 60;
/// Three hours of data; the report reads the last two.
const POINTS: i64 = 3 * 60;
/// Steps of a 2 h window at 60 s: 120, each standing for the minute up to it.
pub(crate) const W: f64 = 120.0;
/// Hours per step.
pub(crate) const H: f64 = 1.0 / 60.0;
/// `web/batch` has NaN readings for these 30 steps of the window, counted back from its end.
const GAP_FROM_END: std::ops::Range<i64> = 40..70;

/// The shared GPU's holders in truthscale's own series (node mode with per-process
/// attribution): `web/chat-a` spins one block (its processes' SM busy 0.6, no tensor work),
/// `web/chat-b` does all the device's tensor work (SM busy 0.2). Truth: the device's
/// effective compute (0.1, its tensor activity at κ = 1) is all chat-b's, chat-a's own is 0.
const SPIN_SM_BUSY: f64 = 0.6;
/// See [`SPIN_SM_BUSY`].
const GEMM_SM_BUSY: f64 = 0.2;
/// The shared GPU's effective compute, measured on the device (its tensor activity).
const SHARED_DEVICE_ECF: f64 = 0.1;

/// A holder's estimate as node mode writes it: the device's value split by SM-busy share.
fn sm_busy_estimate(pod: &str) -> f64 {
    let own = if pod == "chat-a" {
        SPIN_SM_BUSY
    } else {
        GEMM_SM_BUSY
    };
    SHARED_DEVICE_ECF * own / (SPIN_SM_BUSY + GEMM_SM_BUSY)
}

/// Memory every GPU holds, and holds in all, MiB.
const MEMORY_MIB: f64 = 10_240.0;
/// See [`MEMORY_MIB`].
const TOTAL_MIB: f64 = 81_920.0;
const MIB: f64 = 1_048_576.0;

/// DRAM activity of every GPU but the notebook's (0).
const DRAM: f64 = 0.1;
/// The SM clock of every GPU: the H100 SXM's datasheet clock (its BF16 dense peak is quoted
/// at 1830 MHz), so that the clock correction κ is 1 and effective compute is τ.
const CLOCK_MHZ: f64 = 1830.0;

/// `(node, gpu, namespace, pod, team, busy %, tensor)`; `pod` empty for a GPU without one.
type Workload = (
    &'static str,
    u32,
    &'static str,
    &'static str,
    Option<&'static str>,
    f64,
    f64,
);

const FLEET: [Workload; 6] = [
    (
        "node-a",
        0,
        "research",
        "train",
        Some("research"),
        100.0,
        0.5,
    ),
    (
        "node-a",
        1,
        "research",
        "notebook",
        Some("research"),
        0.0,
        0.0,
    ),
    ("node-a", 2, "web", "chat-a", Some("serving"), 100.0, 0.1),
    ("node-a", 2, "web", "chat-b", Some("serving"), 100.0, 0.1),
    ("node-b", 0, "", "", None, 50.0, 0.2),
    ("node-b", 1, "web", "batch", None, 100.0, 0.3),
];

pub(crate) fn end_now() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (i64::try_from(now).unwrap() / STEP) * STEP
}

/// The OpenMetrics text promtool backfills: dcgm-exporter's fields (job `dcgm`),
/// truthscale's own gauges for the whole GPUs (job `truthscale`), and kube-state-metrics'
/// series (job `ksm`).
pub(crate) fn openmetrics(end: i64) -> String {
    let mut families: std::collections::BTreeMap<&str, String> = Default::default();
    let mut add = |name: &'static str, labels: &str, t: i64, v: f64| {
        let s = families.entry(name).or_default();
        let v = if v.is_nan() {
            "NaN".to_string()
        } else {
            v.to_string()
        };
        let _ = writeln!(s, "{name}{{{labels}}} {v} {t}");
    };
    for i in 0..POINTS {
        let t = end - (POINTS - 1 - i) * STEP;
        let from_end = (end - t) / STEP;
        for (node, gpu, ns, pod, team, busy, tensor) in FLEET {
            let gap = pod == "batch" && GAP_FROM_END.contains(&from_end);
            let (busy, tensor) = if gap {
                (f64::NAN, f64::NAN)
            } else {
                (busy, tensor)
            };
            let l = format!(
                "job=\"dcgm\",gpu=\"{gpu}\",UUID=\"GPU-{node}-{gpu}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"{node}\",namespace=\"{ns}\",pod=\"{pod}\",container=\"main\""
            );
            let (dram, clock) = if gap {
                (f64::NAN, f64::NAN)
            } else {
                (if pod == "notebook" { 0.0 } else { DRAM }, CLOCK_MHZ)
            };
            add("DCGM_FI_DEV_GPU_UTIL", &l, t, busy);
            add("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", &l, t, tensor);
            add("DCGM_FI_PROF_DRAM_ACTIVE", &l, t, dram);
            add("DCGM_FI_DEV_SM_CLOCK", &l, t, clock);
            // Every GPU holds 10 GiB of its 80 (dcgm-exporter in MiB, truthscale in bytes).
            add("DCGM_FI_DEV_FB_USED", &l, t, MEMORY_MIB);
            add("DCGM_FI_DEV_FB_FREE", &l, t, TOTAL_MIB - MEMORY_MIB);
            // truthscale's own series: one device series per GPU, pod labels only on a GPU one
            // pod holds (node mode writes none on a shared device's series).
            if gpu != 2 || pod == "chat-a" {
                let pod_labels = if gpu == 2 || pod.is_empty() {
                    String::new()
                } else {
                    format!(",namespace=\"{ns}\",pod=\"{pod}\",container=\"main\"")
                };
                let l = format!(
                    "job=\"truthscale\",gpu=\"{gpu}\",uuid=\"GPU-{node}-{gpu}\",model=\"NVIDIA H100 80GB HBM3\",node=\"{node}\"{pod_labels}"
                );
                add(
                    "truthscale_gpu_reported_utilization_ratio",
                    &l,
                    t,
                    busy / 100.0,
                );
                add("truthscale_gpu_tensor_active_ratio", &l, t, tensor);
                add("truthscale_gpu_dram_active_ratio", &l, t, dram);
                add("truthscale_gpu_sm_clock_hertz", &l, t, clock * 1e6);
                add("truthscale_gpu_memory_used_bytes", &l, t, MEMORY_MIB * MIB);
                add("truthscale_gpu_memory_total_bytes", &l, t, TOTAL_MIB * MIB);
            }
            // Node mode's allocation info: one series per holder; the shared GPU's holders have
            // per-process estimates of their parts of the device's effective compute.
            if !pod.is_empty() && !gap {
                let replica = if gpu == 2 {
                    format!(",replica=\"{}\"", &pod[5..])
                } else {
                    String::new()
                };
                let l = format!(
                    "job=\"truthscale\",gpu=\"{gpu}\",uuid=\"GPU-{node}-{gpu}\",model=\"NVIDIA H100 80GB HBM3\",node=\"{node}\",namespace=\"{ns}\",pod=\"{pod}\",container=\"main\",resource=\"nvidia.com/gpu\"{replica}"
                );
                add("truthscale_gpu_allocation_info", &l, t, 1.0);
                if gpu == 2 {
                    assert_eq!(tensor, SHARED_DEVICE_ECF);
                    let l = format!(
                        "job=\"truthscale\",gpu=\"{gpu}\",uuid=\"GPU-{node}-{gpu}\",model=\"NVIDIA H100 80GB HBM3\",node=\"{node}\",namespace=\"{ns}\",pod=\"{pod}\",container=\"main\",method=\"sm_busy_share\""
                    );
                    add(
                        "truthscale_pod_effective_compute_estimate_ratio",
                        &l,
                        t,
                        sm_busy_estimate(pod),
                    );
                }
            }
            if !pod.is_empty() {
                let team = team
                    .map(|t| format!(",label_team=\"{t}\""))
                    .unwrap_or_default();
                add(
                    "kube_pod_labels",
                    &format!("job=\"ksm\",namespace=\"{ns}\",pod=\"{pod}\",uid=\"u-{pod}\"{team}"),
                    t,
                    1.0,
                );
                add(
                    "kube_pod_container_resource_requests",
                    &format!(
                        "job=\"ksm\",namespace=\"{ns}\",pod=\"{pod}\",uid=\"u-{pod}\",container=\"main\",node=\"{node}\",resource=\"nvidia_com_gpu\",unit=\"integer\""
                    ),
                    t,
                    1.0,
                );
            }
        }
    }
    exposition(&families)
}

/// OpenMetrics text of `families` (each family's sample lines by name), every family a
/// gauge, for promtool to backfill.
pub(crate) fn exposition(families: &std::collections::BTreeMap<&str, String>) -> String {
    let mut out = String::new();
    for (name, body) in families {
        let _ = writeln!(out, "# TYPE {name} gauge");
        out.push_str(body);
    }
    out.push_str("# EOF\n");
    out
}

pub(crate) struct Run {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

fn truthscale(args: &[&str]) -> Run {
    let tmp = TempDir::new("showback-run");
    let mut cmd = clean_command();
    cmd.args(args);
    let p = Spawned::start(cmd, tmp.path(), "truthscale");
    let status = p.finish(Duration::from_secs(60));
    Run {
        code: status.code(),
        stdout: std::fs::read_to_string(tmp.path().join("truthscale.stdout")).unwrap_or_default(),
        stderr: std::fs::read_to_string(tmp.path().join("truthscale.stderr")).unwrap_or_default(),
    }
}

pub(crate) fn report(url: &str, selector: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "report",
        "--prometheus",
        url,
        "--since",
        "2h",
        "--step",
        "60s",
        "--selector",
        selector,
    ];
    args.extend_from_slice(extra);
    truthscale(&args)
}

pub(crate) fn json(r: &Run) -> Value {
    assert_eq!(r.code, Some(0), "stderr:\n{}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", r.stdout))
}

pub(crate) fn group<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["showback"]["total"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["group"] == name)
        .unwrap_or_else(|| panic!("no group {name} in {:#}", v["showback"]))
}

pub(crate) fn near(got: &Value, want: f64, what: &str) {
    let got = got
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: {got} is not a number"));
    assert!(
        (got - want).abs() < 1e-6,
        "{what}: {got} GPU-hours, counted {want}"
    );
}

/// GPU-hours by team from dcgm-exporter's history and kube-state-metrics' labels and
/// requests: allocated by the policy (the time-sliced GPU half to each holder, its use
/// unknown), used, idle, unmeasured, effective compute, busy, requested and cost; the groups
/// plus unallocated are the fleet exactly; the CSV and the HTML say the same.
#[test]
fn showback_by_team_from_dcgm_history_and_kube_state_metrics() {
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let dir = TempDir::new("showback-prom");
    let prom = Prometheus::backfilled(&openmetrics(end_now()), dir.path(), None);
    let url = prom.url();
    let csv = dir.path().join("showback.csv");
    let html = dir.path().join("report.html");
    let run = report(
        &url,
        "job=\"dcgm\"",
        &[
            "--by",
            "team",
            "--json",
            "--cost-per-gpu-hour",
            "2.5",
            "--csv",
            csv.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
    );
    let v = json(&run);
    let total = &v["showback"]["total"];
    assert_eq!(v["showback"]["by"], "label:team");
    // Five GPUs over the window; node-b's gpu 0 is held by no pod.
    near(&total["fleet_gpu_hours"], 5.0 * W * H, "fleet");
    near(&total["unallocated_gpu_hours"], W * H, "unallocated");
    assert_eq!(total["reconciled"], true, "{}", total["check"]);
    assert_eq!(
        total["check"],
        format!(
            "groups {:.3} + unallocated {:.3} = fleet {:.3} GPU-hours",
            4.0 * W * H,
            W * H,
            5.0 * W * H
        )
    );

    let research = group(&v, "research");
    assert_eq!(research["workloads"], 2);
    near(
        &research["allocated_gpu_hours"],
        2.0 * W * H,
        "research allocated",
    );
    near(&research["used_gpu_hours"], W * H, "research used (train)");
    near(
        &research["idle_gpu_hours"],
        W * H,
        "research idle (notebook)",
    );
    near(
        &research["unmeasured_gpu_hours"],
        0.0,
        "research unmeasured",
    );
    near(
        &research["use_unknown_gpu_hours"],
        0.0,
        "research use unknown",
    );
    near(&research["busy_gpu_hours"], W * H, "research busy flag");
    // ECF = τ·κ with κ = 1 (the datasheet clock): train's tensor activity times its time,
    // and the notebook's 0; saturation max(τ, DRAM) likewise.
    near(
        &research["effective_compute_gpu_hours"],
        0.5 * W * H,
        "research effective",
    );
    near(
        &research["effective_compute_measured_gpu_hours"],
        2.0 * W * H,
        "research ECF measured",
    );
    near(
        &research["saturation_gpu_hours"],
        0.5 * W * H,
        "research saturation",
    );
    near(
        &research["requested_gpu_hours"],
        2.0 * W * H,
        "research requested",
    );
    near(
        &research["cost"]["allocated"],
        2.5 * 2.0 * W * H,
        "research cost",
    );
    near(
        &research["cost"]["idle"],
        2.5 * W * H,
        "research cost of idle",
    );

    // The time-sliced GPU: half to each holder, and their use is not the device's.
    let serving = group(&v, "serving");
    assert_eq!(serving["workloads"], 2);
    near(&serving["allocated_gpu_hours"], W * H, "serving allocated");
    near(
        &serving["use_unknown_gpu_hours"],
        W * H,
        "serving use unknown",
    );
    near(&serving["used_gpu_hours"], 0.0, "serving used");
    // Never measured as its own (its GPU is time-sliced): absent, not 0, and so are its
    // busy flag's hours.
    for k in ["effective_compute_gpu_hours", "busy_gpu_hours"] {
        assert!(serving[k].is_null(), "serving {k}: {}", serving[k]);
    }
    assert_eq!(
        serving["effective_compute_measured_gpu_hours"].as_f64(),
        Some(0.0)
    );
    near(
        &serving["requested_gpu_hours"],
        2.0 * W * H,
        "serving requested (two replicas)",
    );

    // The pod without the label: its NaN half hour is unmeasured, never idle.
    let none = group(&v, "(none)");
    near(&none["allocated_gpu_hours"], W * H, "(none) allocated");
    near(&none["unmeasured_gpu_hours"], 30.0 * H, "(none) unmeasured");
    near(&none["used_gpu_hours"], (W - 30.0) * H, "(none) used");
    near(&none["idle_gpu_hours"], 0.0, "(none) idle");
    near(
        &none["effective_compute_gpu_hours"],
        0.3 * (W - 30.0) * H,
        "(none) effective",
    );
    let notes: Vec<&str> = v["showback"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("1 GPU(s) were time-sliced")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("kube-state-metrics' kube_pod_labels")),
        "{notes:?}"
    );

    // The CSV: one row per group and the unallocated row, the same figures.
    let text = std::fs::read_to_string(&csv).expect("the CSV");
    let rows: Vec<&str> = text.lines().collect();
    assert!(
        rows[0].starts_with("window_start,window_end,by,group,"),
        "{text}"
    );
    assert_eq!(rows.len(), 1 + 3 + 1, "{text}");
    let research_row = rows
        .iter()
        .find(|r| r.contains(",research,"))
        .expect("research");
    assert!(
        research_row.contains(&format!(
            ",label:team,research,2,{:.6},{:.6},",
            2.0 * W * H,
            2.0 * W * H
        )),
        "{research_row}"
    );
    assert!(
        rows.last()
            .unwrap()
            .contains(&format!(",(unallocated),,{:.6},", W * H)),
        "{text}"
    );
    // The HTML: the section, its chart and its check.
    let page = std::fs::read_to_string(&html).expect("the HTML");
    assert!(
        page.contains("<h2>Showback by label:team</h2>"),
        "no section"
    );
    assert!(page.contains("id=\"showback\"><svg"), "no chart");
    assert!(
        page.contains("(reconciled)") || page.contains("check: groups"),
        "no check"
    );

    // The terminal table.
    let run = report(&url, "job=\"dcgm\"", &["--by", "team"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.contains("SHOWBACK BY LABEL:TEAM"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("(reconciled)"), "{}", run.stdout);
    eprintln!("{}", &run.stdout[run.stdout.find("SHOWBACK").unwrap()..]);

    // A selector on the namespace scopes kube-state-metrics' requests too: no group of
    // another namespace appears with only its requested hours.
    let v = json(&report(
        &url,
        "job=\"dcgm\",namespace=\"research\"",
        &["--by", "namespace", "--json"],
    ));
    let groups: Vec<&str> = v["showback"]["total"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["group"].as_str())
        .collect();
    assert_eq!(groups, ["research"], "{v:#}");
    // Its two pods (train and the notebook) requested one GPU each, the whole window.
    near(
        &group(&v, "research")["requested_gpu_hours"],
        2.0 * W * H,
        "research requested",
    );
}

/// The same fleet in truthscale's own series (node mode's allocation info, per-process
/// estimates for the shared GPU's holders: a spinning pod beside the one doing the tensor
/// work), by namespace and by node, with a price per model and hourly periods: every period
/// reconciles, the whole GPUs' figures are the dcgm-exporter history's, and the shared GPU
/// bills no measured effective compute to either holder: its measured total half to each
/// (time-sliced), the SM-busy split in the estimate column, never billed.
#[test]
fn showback_by_namespace_and_node_from_truthscale_series() {
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let dir = TempDir::new("showback-own");
    let prom = Prometheus::backfilled(&openmetrics(end_now()), dir.path(), None);
    let url = prom.url();
    let started = Instant::now();
    let v = json(&report(
        &url,
        "job=\"truthscale\"",
        &[
            "--by",
            "namespace",
            "--json",
            "--every",
            "1h",
            "--gpu-hour-price",
            "NVIDIA H100 80GB HBM3=4",
        ],
    ));
    let total = &v["showback"]["total"];
    assert_eq!(total["reconciled"], true, "{}", total["check"]);
    near(&total["fleet_gpu_hours"], 5.0 * W * H, "fleet");
    // The shared GPU carries no pod on truthscale's device series: its holders come from
    // the allocation info, half each.
    near(&total["unallocated_gpu_hours"], W * H, "unallocated");
    let research = group(&v, "research");
    near(
        &research["allocated_gpu_hours"],
        2.0 * W * H,
        "research allocated",
    );
    near(
        &research["effective_compute_gpu_hours"],
        0.5 * W * H,
        "research effective",
    );
    near(
        &research["cost"]["allocated"],
        4.0 * 2.0 * W * H,
        "research cost",
    );
    let web = group(&v, "web");
    near(&web["unmeasured_gpu_hours"], 30.0 * H, "web unmeasured");
    near(
        &web["allocated_gpu_hours"],
        2.0 * W * H,
        "web allocated: batch and half each of the shared GPU",
    );
    // Both holders' own use is unknown: the estimate is not a measurement of theirs.
    near(
        &web["use_unknown_gpu_hours"],
        W * H,
        "web use unknown (chat-a and chat-b)",
    );
    near(
        &web["used_gpu_hours"],
        (W - 30.0) * H,
        "web used (batch only)",
    );
    // Measured effective compute: batch's own only; none from the shared GPU's estimate
    // (chat-a's would be 0.075 of the GPU, three quarters of work chat-b did).
    near(
        &web["effective_compute_gpu_hours"],
        0.3 * (W - 30.0) * H,
        "web effective (batch's own)",
    );
    near(
        &web["effective_compute_measured_gpu_hours"],
        (W - 30.0) * H,
        "web effective measured (batch's)",
    );
    // The device's measured total, billed half to each holder.
    near(
        &web["time_sliced_effective_compute_gpu_hours"],
        2.0 * (0.5 * SHARED_DEVICE_ECF) * W * H,
        "web time-sliced effective compute",
    );
    // The estimate apart: chat-a's 0.075 and chat-b's 0.025 of the GPU over the window.
    near(
        &web["effective_compute_estimate_gpu_hours"],
        (sm_busy_estimate("chat-a") + sm_busy_estimate("chat-b")) * W * H,
        "web effective compute estimate",
    );
    assert!((sm_busy_estimate("chat-a") - 0.075).abs() < 1e-12);
    assert!(research["effective_compute_estimate_gpu_hours"].is_null());
    let notes: Vec<&str> = v["showback"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("method sm_busy_share") && n.contains("never billed")),
        "{notes:?}"
    );
    let periods = v["showback"]["periods"].as_array().expect("periods");
    // 120 one-minute steps in hours cut on the clock's hours: the first period runs to the
    // first whole hour after the window's start, the others an hour each, the last to the
    // window's end (no stub past it).
    let start_ms = v["source"]["start_ms"].as_i64().unwrap();
    let first = ((3_600_000 - start_ms.rem_euclid(3_600_000)) % 3_600_000 / 60_000) as u64;
    let mut want = Vec::new();
    let (mut at, mut len) = (0u64, if first == 0 { 60 } else { first });
    while at < 120 {
        let steps = len.min(120 - at);
        want.push((at, steps));
        at += steps;
        len = 60;
    }
    let got: Vec<(u64, u64)> = periods
        .iter()
        .map(|p| {
            (
                p["start_step"].as_u64().unwrap(),
                p["steps"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want, "from {start_ms} ms");
    for &(at, _) in &want[1..] {
        assert_eq!(
            (start_ms + at as i64 * 60_000) % 3_600_000,
            0,
            "on the hour"
        );
    }
    let fleet: f64 = periods
        .iter()
        .map(|p| {
            assert_eq!(p["reconciled"], true, "{}", p["check"]);
            p["fleet_gpu_hours"].as_f64().unwrap()
        })
        .sum();
    assert!((fleet - 5.0 * W * H).abs() < 1e-9, "{fleet}");
    // The CSV and the terminal table name the estimate as one, in a column of its own.
    let csv = dir.path().join("own.csv");
    let run = report(
        &url,
        "job=\"truthscale\"",
        &["--by", "namespace", "--csv", csv.to_str().unwrap()],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("t-sliced  estimate"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("estimate: the SM-busy split, an ESTIMATE, never billed"),
        "{}",
        run.stdout
    );
    let text = std::fs::read_to_string(&csv).expect("the CSV");
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let web_row: Vec<&str> = text
        .lines()
        .find(|r| r.contains(",web,"))
        .expect("web")
        .split(',')
        .collect();
    let col = |name: &str| {
        let i = header.iter().position(|h| *h == name).expect(name);
        web_row[i].parse::<f64>().unwrap()
    };
    let want = (sm_busy_estimate("chat-a") + sm_busy_estimate("chat-b")) * W * H;
    assert!((col("effective_compute_estimate_gpu_hours") - want).abs() < 1e-5);
    assert!((col("effective_compute_gpu_hours") - 0.3 * (W - 30.0) * H).abs() < 1e-5);
    let by_node = json(&report(
        &url,
        "job=\"truthscale\"",
        &["--by", "node", "--json"],
    ));
    let a = group(&by_node, "node-a");
    near(
        &a["allocated_gpu_hours"],
        3.0 * W * H,
        "node-a allocated: train, notebook and the shared GPU's holders",
    );
    eprintln!(
        "showback from truthscale's series: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// One physical GPU, one place in the sizing: the time-sliced GPU is one workload whether
/// the history names its holders on copies of its series (dcgm-exporter) or only in the
/// allocation info (node mode, no pod on the device's series), with or without `--by`.
/// Truth from the fleet: 4 GPUs allocated (train, notebook, the shared one, batch), 4
/// workloads, and a compute demand at its p99 of 0.5 + 0 + 0.1 + 0.3 = 0.9 (saturation is
/// max(τ, DRAM) at κ = 1; the notebook's is 0). The GPUs needed ([`needed_gpus`]): 2, so
/// 2 freed of the 4 allocated; counting the shared GPU once per holder made it 3 workloads'
/// demand where there is one.
#[test]
fn a_time_sliced_gpu_is_one_workload_in_the_sizing_from_either_history() {
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let dir = TempDir::new("showback-sizing");
    let prom = Prometheus::backfilled(&openmetrics(end_now()), dir.path(), None);
    let url = prom.url();
    for (selector, by) in [
        ("job=\"dcgm\"", None),
        ("job=\"dcgm\"", Some("namespace")),
        ("job=\"truthscale\"", None),
        ("job=\"truthscale\"", Some("namespace")),
    ] {
        let mut extra = vec!["--json"];
        if let Some(by) = by {
            extra.extend(["--by", by]);
        }
        let v = json(&report(&url, selector, &extra));
        let fleet = &v;
        let what = format!("{selector} --by {by:?}");
        assert_eq!(fleet["workloads"], 4, "{what}: {fleet:#}");
        assert_eq!(
            fleet["gpus_without_pods"].as_array().map(Vec::len),
            Some(1),
            "{what}"
        );
        near(&fleet["sizing"]["allocated_gpus"]["p99"], 4.0, &what);
        let needed = needed_gpus();
        assert_eq!(
            fleet["sizing"]["packing"]["gpus"], needed,
            "{what}: {:#}",
            fleet["sizing"]
        );
        assert_eq!(fleet["savings"]["gpus_freed"], 4 - needed, "{what}");
        if by.is_some() {
            // The two halves of one report count the same GPUs allocated: the report says so.
            let a = &fleet["showback"]["allocation"];
            assert_eq!(a["agrees"], true, "{what}: {a:#}");
            assert_eq!(a["gpus"], 4, "{what}: {a:#}");
            let read = a["gpu_hours"].as_f64().unwrap() - a["unread_gpu_hours"].as_f64().unwrap();
            near(&a["sizing_gpu_hours"], read, &what);
            assert!(
                a["check"]
                    .as_str()
                    .unwrap()
                    .starts_with("sizing and showback agree"),
                "{what}: {a:#}"
            );
        }
        near(
            &fleet["sizing"]["compute_demand_gpus"]["summary"]["p99"],
            0.9,
            &what,
        );
        near(
            &fleet["sizing"]["busy_claim_gpus"]["summary"]["p99"],
            3.0,
            &what,
        );
        let names: Vec<&str> = fleet["rightsizing"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w["workload"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "research/train",
                "research/notebook",
                "web/chat-a + web/chat-b",
                "web/batch"
            ],
            "{what}"
        );
    }
}

/// The GPUs the pod-held workloads need, worked out here from the fleet: each workload's
/// saturation (max(τ, DRAM), steady: its p99; the shared GPU's counted once for its two
/// holders, as one workload) and 10 GiB each, first-fit decreasing onto 80 GiB H100s kept
/// under 1 − 0.2 (ties by name).
fn needed_gpus() -> u64 {
    let mut work: Vec<(String, f64)> = Vec::new();
    for (node, gpu, _, pod, _, _, tensor) in FLEET {
        if pod.is_empty() || work.iter().any(|(k, _)| k == &format!("{node}/{gpu}")) {
            continue;
        }
        let dram = if pod == "notebook" { 0.0 } else { DRAM };
        work.push((format!("{node}/{gpu}"), f64::max(tensor, dram)));
    }
    assert_eq!(work.len(), 4, "train, notebook, the shared GPU, batch");
    let size = |s: f64| f64::max(s / 0.8, MEMORY_MIB / TOTAL_MIB);
    work.sort_by(|a, b| size(b.1).total_cmp(&size(a.1)).then(a.0.cmp(&b.0)));
    let mut bins: Vec<(f64, f64)> = Vec::new();
    for (_, s) in work {
        match bins
            .iter_mut()
            .find(|(sat, mem)| sat + s <= 0.8 + 1e-9 && mem + MEMORY_MIB <= TOTAL_MIB)
        {
            Some(b) => *b = (b.0 + s, b.1 + MEMORY_MIB),
            None => bins.push((s, MEMORY_MIB)),
        }
    }
    bins.len() as u64
}
