//! An idle holder, its owner, and a decode server that is not idle, end to end: the real
//! binary with the fake NVML library (a scenario written here: the format sets each GPU's
//! memory used, busy flag and pipe activity), in node mode with a fake kubelet and a fake
//! API server serving the pods' labels and owner references (`node`'s), and, for tokens, in
//! sidecar mode with a serving engine stand-in (as `engine`'s tests): node mode does not
//! know which GPU an engine's tokens are from, so its engine (if any) is the agent's own
//! pod's.
//!
//! The 20 minutes are not waited for here: the 1 200 s are covered where time is
//! data (`truthscale-core/tests/it/idle_since.rs`, the alert's promtool test, the report's
//! golden test).

use crate::node::{ApiServer, ApiState, labelled};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use truthscale_e2e::kubelet::{Kubelet, State, pod};
use truthscale_e2e::{Sample, Sidecar, StandIn, TempDir, ok, series, value, workspace};
use truthscale_exporter::attribution::kubelet::proto::ListPodResourcesResponse;

const WAIT: Duration = Duration::from_secs(30);
const NODE: &str = "gpu-node-3";
/// What the notebook holds: 8 GB, in bytes.
const NOTEBOOK_BYTES: u64 = 8_000_000_000;
const NOTEBOOK_GPU: &str = "GPU-5f0c6a3e-8d3b-4c1e-9a7f-0000000000b0";
const DECODE_GPU: &str = "GPU-5f0c6a3e-8d3b-4c1e-9a7f-0000000000b1";
const IDLE: &str = "truthscale_gpu_idle_seconds";

/// One fake H100 at index `i`: busy flag `util` %, SM busy `sm` %, DRAM `dram` %, no
/// tensor or floating-point pipe at work (effective compute 0), `used` bytes held.
fn device(i: usize, uuid: &str, util: u32, sm: u32, dram: u32, used: u64) -> serde_json::Value {
    json!({
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": uuid,
        "pci_bus_id": format!("00000000:{:02X}:00.0", 0x1A + i),
        "architecture": "hopper",
        "memory_total_bytes": 85_520_809_984_u64,
        "memory_used_bytes": used,
        "util_percent": util,
        "power_watts": if util > 0 { 300 } else { 72 },
        "power_limit_watts": 700,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "temperature_c": 40,
        "gpm": {"metrics": {
            "graphics_util": util, "sm_util": sm, "sm_occupancy": sm / 4,
            "any_tensor_util": 0, "hmma_tensor_util": 0, "imma_tensor_util": 0,
            "dram_bw_util": dram, "fp64_util": 0, "fp32_util": 0, "fp16_util": 0,
            "pcie_tx_per_sec": 0, "pcie_rx_per_sec": 0,
            "nvlink_total_rx_per_sec": 0, "nvlink_total_tx_per_sec": 0
        }},
        "processes": []
    })
}

/// Write a scenario of `devices` in `dir`.
fn scenario(dir: &std::path::Path, devices: &[serde_json::Value]) -> std::path::PathBuf {
    let path = dir.join("scenario.json");
    std::fs::write(&path, json!({ "devices": devices }).to_string()).unwrap();
    path
}

fn idle(m: &[Sample], gpu: &str) -> Option<f64> {
    value(m, IDLE, &[("gpu", gpu)])
}

/// The (owner kind, owner name, `label_notebook_name`) of GPU `gpu`'s allocation series.
fn owner<'a>(
    m: &'a [Sample],
    gpu: &str,
) -> Vec<(Option<&'a str>, Option<&'a str>, Option<&'a str>)> {
    series(m, "truthscale_gpu_allocation_info", &[("gpu", gpu)])
        .iter()
        .map(|s| {
            (
                s.label("owner_kind"),
                s.label("owner_name"),
                s.label("label_notebook_name"),
            )
        })
        .collect()
}

/// The node: GPU 0 held by Kubeflow Notebook `nb-alice`'s pod (its StatefulSet's, as the
/// notebook controller makes it: `notebook-name: nb-alice`), GPU 1 by a decode server of
/// Deployment `decode`; the agent reads the pod list with `notebook-name` allowlisted.
struct NotebookNode {
    dir: TempDir,
    _kubelet: Kubelet,
    _api: ApiServer,
    sidecar: Sidecar,
}

fn notebook_node() -> NotebookNode {
    let dir = TempDir::new("idle-owner");
    let state = State::default();
    *state.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![
            pod(
                "nb-alice-0",
                "research",
                "notebook",
                "nvidia.com/gpu",
                &[NOTEBOOK_GPU],
            ),
            pod(
                "decode-7d9f8b-x2k4q",
                "serving",
                "vllm",
                "nvidia.com/gpu",
                &[DECODE_GPU],
            ),
        ],
    };
    let kubelet = Kubelet::start(&dir.path().join("kubelet.sock"), state);
    let api_state = ApiState::new("token-1", NODE);
    api_state.set_pods(vec![
        labelled(
            "research",
            "nb-alice-0",
            &[("notebook-name", "nb-alice"), ("statefulset", "nb-alice")],
        ),
        labelled(
            "serving",
            "decode-7d9f8b-x2k4q",
            &[("pod-template-hash", "7d9f8b")],
        ),
    ]);
    api_state.set_owner("research", "nb-alice-0", "StatefulSet", "nb-alice");
    api_state.set_owner(
        "serving",
        "decode-7d9f8b-x2k4q",
        "ReplicaSet",
        "decode-7d9f8b",
    );
    let api = ApiServer::start(dir.path(), api_state);
    let token = dir.path().join("token");
    std::fs::write(&token, "token-1\n").unwrap();
    // The notebook: 8 GB held, busy 0, SM 0. The decode server: busy 100 %, SM 90 %, DRAM
    // 60 %, its tensor and FP pipes idle (effective compute 0), 60 GB.
    let scenario = scenario(
        dir.path(),
        &[
            device(0, NOTEBOOK_GPU, 0, 0, 0, NOTEBOOK_BYTES),
            device(1, DECODE_GPU, 100, 90, 60, 60_000_000_000),
        ],
    );
    let socket = dir.path().join("kubelet.sock").display().to_string();
    let sidecar = Sidecar::start(
        &[
            &["--mode", "node"][..],
            &truthscale_e2e::nvml_args(truthscale_e2e::fake_nvml(), "250ms"),
        ]
        .concat(),
        &[
            ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap()),
            ("TRUTHSCALE_NODE__SOCKET", &socket),
            ("TRUTHSCALE_NODE__POD_LABELS", "notebook-name"),
            ("TRUTHSCALE_NODE__POD_LABELS_REFRESH", "1s"),
            ("TRUTHSCALE_NODE__API_SERVER", &api.url),
            ("TRUTHSCALE_NODE__TOKEN_FILE", token.to_str().unwrap()),
            ("TRUTHSCALE_NODE__CA_FILE", api.ca.to_str().unwrap()),
            ("NODE_NAME", NODE),
        ],
        dir.path(),
    );
    NotebookNode {
        dir,
        _kubelet: kubelet,
        _api: api,
        sidecar,
    }
}

/// The issue in node mode: the notebook's GPU shows the 8 GB, its allocation names
/// Notebook `nb-alice` (from its StatefulSet's pod's `notebook-name` label, no request
/// more), and its idle seconds climb with the wall clock: two scrapes 3 s apart differ by
/// the time between them (within the 250 ms tick and scheduling: 1 s). The decode server,
/// busy with effective compute 0, stays at 0, named by its Deployment.
#[test]
fn a_notebook_held_idle_counts_up_named_by_its_notebook_and_a_busy_decode_server_does_not() {
    let NotebookNode {
        dir: _dir,
        _kubelet,
        _api,
        sidecar,
    } = notebook_node();
    let ready = |m: &[Sample]| {
        owner(m, "0").first().is_some_and(|o| o.0.is_some())
            && owner(m, "1").first().is_some_and(|o| o.0.is_some())
            && idle(m, "0").is_some_and(|s| s > 0.0)
            && idle(m, "1").is_some()
    };
    let first = sidecar.wait_for(WAIT, "owners and idle seconds", ready);
    let first_at = Instant::now();
    assert_eq!(
        owner(&first, "0"),
        [(Some("Notebook"), Some("nb-alice"), Some("nb-alice"))]
    );
    assert_eq!(
        owner(&first, "1"),
        [(Some("Deployment"), Some("decode"), None)]
    );
    let pod_of = |m: &[Sample], gpu: &str| {
        series(m, IDLE, &[("gpu", gpu)])
            .first()
            .and_then(|s| s.label("pod").map(str::to_owned))
    };
    assert_eq!(pod_of(&first, "0").as_deref(), Some("nb-alice-0"));
    assert_eq!(pod_of(&first, "1").as_deref(), Some("decode-7d9f8b-x2k4q"));
    let bytes =
        |m: &[Sample], gpu: &str| value(m, "truthscale_gpu_memory_used_bytes", &[("gpu", gpu)]);
    assert_eq!(bytes(&first, "0"), Some(8e9));

    std::thread::sleep(Duration::from_secs(3));
    let second_at = Instant::now();
    let second = sidecar.metrics();
    let wall = second_at.duration_since(first_at).as_secs_f64();
    let (a, b) = (idle(&first, "0").unwrap(), idle(&second, "0").unwrap());
    assert!(b >= 2.0, "idle {b} s after 3 s more of samples");
    assert!(
        ((b - a) - wall).abs() < 1.0,
        "idle went from {a} to {b} s over {wall} s of wall clock"
    );
    assert_eq!(bytes(&second, "0"), Some(8e9));
    assert_eq!(
        value(
            &second,
            "truthscale_gpu_reported_utilization_ratio",
            &[("gpu", "0")]
        ),
        Some(0.0)
    );
    // The decode server: busy, effective compute 0, never idle.
    for m in [&first, &second] {
        assert_eq!(idle(m, "1"), Some(0.0));
        assert_eq!(
            value(
                m,
                "truthscale_gpu_reported_utilization_ratio",
                &[("gpu", "1")]
            ),
            Some(1.0)
        );
    }
    assert_eq!(
        value(
            &second,
            "truthscale_gpu_effective_compute_ratio",
            &[("gpu", "1")]
        ),
        Some(0.0)
    );
    assert!(!sidecar.process.stderr().contains("panicked"));
}

/// Clears its flag when dropped.
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// vLLM's `/metrics` (the `engine` fixture) with `generated` output tokens so far.
fn engine_body(template: &str, generated: u64) -> String {
    template.replace(
        "vllm:generation_tokens_total{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 50000.0",
        &format!(
            "vllm:generation_tokens_total{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}} {generated}.0"
        ),
    )
}

/// A decode server whose GPU shows almost nothing (busy 2 %, under `verdict.idle_util`'s
/// 5 %; effective compute 0) but whose engine makes 400 output tokens a second: its idle
/// seconds stay 0 in every scrape over 2 s (500 ms windows of about 200 tokens each, so
/// that a loaded machine's stall of the tokens' writer, or two engine reads close together,
/// leaves no window without tokens). Its tokens stop (the counter stands still):
/// idle from then on, rising.
#[test]
fn a_decode_server_with_steady_tokens_is_not_idle_until_they_stop() {
    let dir = TempDir::new("idle-tokens");
    let template =
        std::fs::read_to_string(workspace().join("tests/fixtures/engines/vllm-v1-a.prom")).unwrap();
    assert!(
        engine_body(&template, 1).contains("} 1.0"),
        "the fixture's counter line"
    );
    let engine = StandIn::start(ok(&engine_body(&template, 50_000)));
    let scenario = scenario(
        dir.path(),
        &[device(0, DECODE_GPU, 2, 3, 5, 60_000_000_000)],
    );
    let url = engine.url();
    let flowing = AtomicBool::new(true);
    std::thread::scope(|s| {
        // However the test ends (a failed assertion too), the tokens thread stops.
        let _stop = Stop(&flowing);
        // 400 tokens a second, the counter moved every 20 ms while they flow.
        s.spawn(|| {
            let start = Instant::now();
            while flowing.load(Ordering::SeqCst) {
                let n = 50_000 + (start.elapsed().as_millis() as u64) * 400 / 1000;
                engine.set(ok(&engine_body(&template, n)));
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let sidecar = Sidecar::start(
            &truthscale_e2e::nvml_args(truthscale_e2e::fake_nvml(), "500ms"),
            &[
                ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap()),
                ("TRUTHSCALE_ENGINE__ENABLED", "true"),
                ("TRUTHSCALE_ENGINE__URL", &url),
            ],
            dir.path(),
        );
        let tokens = |m: &[Sample]| {
            value(
                m,
                "truthscale_serving_output_tokens_per_second",
                &[("gpu", "0")],
            )
        };
        let m = sidecar.wait_for(WAIT, "tokens, not idle", |m| {
            tokens(m).is_some_and(|t| t > 0.0) && idle(m, "0") == Some(0.0)
        });
        assert_eq!(
            value(
                &m,
                "truthscale_gpu_reported_utilization_ratio",
                &[("gpu", "0")]
            ),
            Some(0.02)
        );
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            let m = sidecar.metrics();
            assert_eq!(idle(&m, "0"), Some(0.0), "tokens {:?}", tokens(&m));
            std::thread::sleep(Duration::from_millis(250));
        }
        // The tokens stop: the next rate is 0, and the idle seconds count from the last
        // window with tokens.
        flowing.store(false, Ordering::SeqCst);
        let m = sidecar.wait_for(WAIT, "idle without tokens", |m| {
            tokens(m) == Some(0.0) && idle(m, "0").is_some_and(|s| s >= 1.0)
        });
        let a = idle(&m, "0").unwrap();
        std::thread::sleep(Duration::from_secs(1));
        let b = idle(&sidecar.metrics(), "0").unwrap();
        assert!(b > a, "idle {a} then {b} s");
        assert!(!sidecar.process.stderr().contains("panicked"));
    });
}

/// History and node mode agree: a real Prometheus scrapes the node agent of the first test
/// every second until node mode has counted 25 s of idle; `truthscale report` over that
/// history (2 minutes, 1 s steps: all of it) lists the notebook alone, idle all of the time
/// history saw it hold the GPU, and that time is what node mode's own
/// `truthscale_gpu_idle_seconds` counted over the same stretch: its value at the report
/// (read just before and just after it) less its value at the first scrape (the agent
/// counted a few seconds before Prometheus started), within 3 s (the step, the scrape and
/// the tick). Holding the 8 GB (in whole MiB), owned by Notebook `nb-alice` (from the allocation info in
/// history), with its stop command.
#[test]
fn the_report_from_history_lists_the_notebook_idle_as_long_as_node_mode_counted() {
    truthscale_e2e::require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let NotebookNode {
        dir,
        _kubelet,
        _api,
        sidecar,
    } = notebook_node();
    let prom_dir = dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
         scrape_configs:\n\
         \x20 - job_name: truthscale\n    honor_labels: true\n    \
         static_configs:\n      - targets: ['{}']\n",
        sidecar.addr
    );
    let prom = truthscale_e2e::Prometheus::start(&config, &prom_dir);
    let node_idle = || {
        prom.series(&format!("{IDLE}{{gpu=\"0\",pod=\"nb-alice-0\"}}"))
            .first()
            .map(|(_, v)| *v)
    };
    let started = Instant::now();
    while !node_idle().is_some_and(|s| s >= 25.0) {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no 25 s of idle in Prometheus: {:?}\n{}",
            node_idle(),
            prom.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let before = node_idle().unwrap();
    // The value at the first scrape: the smallest (it only rises while nothing works).
    let first = prom
        .series(&format!(
            "min_over_time({IDLE}{{gpu=\"0\",pod=\"nb-alice-0\"}}[5m])"
        ))
        .first()
        .map(|(_, v)| *v)
        .unwrap();
    let url = format!("http://{}", prom.addr);
    let run = crate::report::truthscale(&[
        "report",
        "--prometheus",
        &url,
        "--since",
        "2m",
        "--step",
        "1s",
        "--scrape-interval",
        "1s",
        "--selector",
        "{job=\"truthscale\"}",
        "--json",
    ]);
    let after = node_idle().unwrap();
    let v = run.json();
    let idle = v
        .pointer("/idle/workloads")
        .and_then(|w| w.as_array())
        .unwrap();
    assert_eq!(idle.len(), 1, "{idle:#?}");
    let w = &idle[0];
    let num = |k: &str| w[k].as_f64().unwrap_or_else(|| panic!("{k} in {w:#}"));
    assert_eq!(w["workload"], "research/nb-alice-0");
    assert_eq!(w["idle_share"], 1.0);
    let idle_for = num("idle_for_hours") * 3600.0;
    assert!(
        idle_for >= before - first - 3.0 && idle_for <= after - first + 3.0,
        "the report: idle for {idle_for} s; node mode: {first} s at the first scrape, {before} s before the report, {after} s after"
    );
    assert!(
        (num("held_hours") * 3600.0 - idle_for).abs() < 1e-6,
        "{w:#}"
    );
    assert!(
        (num("idle_gpu_hours") * 3600.0 - idle_for).abs() < 1e-6,
        "{w:#}"
    );
    // History keeps memory in whole MiB: 8e9 bytes are 7 629.39 MiB, kept as 7 629 MiB.
    assert_eq!(num("memory_held_bytes"), 7_629.0 * 1_048_576.0);
    assert_eq!(w["owner"]["kind"], "Notebook");
    assert_eq!(w["owner"]["name"], "nb-alice");
    assert_eq!(
        w["command"],
        "kubectl -n research annotate notebook/nb-alice kubeflow-resource-stopped=\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\" --overwrite"
    );
}
