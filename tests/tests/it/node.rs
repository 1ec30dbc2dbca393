//! Node mode end to end: `truthscale serve --mode node` against a fake kubelet, a real tonic
//! server on a unix socket in a temp dir serving the vendored PodResources proto (also used by
//! `node_manifests`), and, for pod labels, a fake API server: a real HTTPS server (axum over
//! rustls, with a CA made here) that checks the bearer token and the field selector and
//! serves a pod list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use truthscale_e2e::kubelet::{Kubelet, State, dra_pod, pod};
use truthscale_e2e::{Sample, Sidecar, TempDir, clean_command};
use truthscale_e2e::{series, value};
use truthscale_exporter::attribution::kubelet::proto::ListPodResourcesResponse;

const WAIT: Duration = Duration::from_secs(20);

/// Three simulated GPUs: 0 held by one pod, 1 time-sliced between two, 2 by none. Then the
/// exclusive pod ends, then the kubelet goes away.
#[test]
fn node_mode_attributes_every_gpu_to_its_pods() {
    let dir = TempDir::new("node-mode");
    let socket = dir.path().join("kubelet.sock");
    let state = State::default();
    *state.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![
            pod("train-0", "ml", "cuda", "nvidia.com/gpu", &["0"]),
            pod("chat-a", "web", "vllm", "nvidia.com/gpu", &["1::0"]),
            pod("chat-b", "web", "vllm", "nvidia.com/gpu", &["1::1"]),
            // Not a GPU: not attributed.
            pod("fpga", "hw", "f", "example.com/fpga", &["2"]),
        ],
    };
    let kubelet = Kubelet::start(&socket, state.clone());
    let socket_text = socket.display().to_string();
    let sidecar = Sidecar::start(
        &[
            "--mode",
            "node",
            "--source",
            "sim",
            "--sim-gpus",
            "3",
            "--interval",
            "200ms",
            "--stale-after",
            "1s",
        ],
        &[
            ("TRUTHSCALE_NODE__SOCKET", &socket_text),
            // The agent's own pod must never label the GPUs.
            ("POD_NAME", "truthscale-agent-x1"),
            ("POD_NAMESPACE", "monitoring"),
            ("NODE_NAME", "gpu-node-3"),
        ],
        dir.path(),
    );
    let m = sidecar.wait_for(WAIT, "attribution", |m| {
        value(m, "truthscale_gpu_pods", &[("gpu", "2")]) == Some(0.0)
    });
    // GPU 0: exclusive, every series of it carries its pod.
    let g0 = series(&m, "truthscale_gpu_info", &[("gpu", "0")]);
    assert_eq!(g0.len(), 1);
    assert_eq!(g0[0].label("pod"), Some("train-0"));
    assert_eq!(g0[0].label("namespace"), Some("ml"));
    assert_eq!(g0[0].label("container"), Some("cuda"));
    assert_eq!(g0[0].label("node"), Some("gpu-node-3"));
    assert!(
        series(
            &m,
            "truthscale_gpu_roofline_saturation_ratio",
            &[("gpu", "0")]
        )
        .iter()
        .all(|s| s.label("pod") == Some("train-0"))
    );
    assert_eq!(value(&m, "truthscale_gpu_pods", &[("gpu", "0")]), Some(1.0));
    // GPU 1: shared by two pods; the device's series carry no pod, the allocation lists both.
    let g1 = series(&m, "truthscale_gpu_info", &[("gpu", "1")]);
    assert_eq!(g1.len(), 1);
    assert_eq!(g1[0].label("pod"), None);
    assert_eq!(value(&m, "truthscale_gpu_pods", &[("gpu", "1")]), Some(2.0));
    let mut held: Vec<(String, String)> =
        series(&m, "truthscale_gpu_allocation_info", &[("gpu", "1")])
            .iter()
            .map(|s| {
                (
                    s.label("pod").unwrap_or_default().to_string(),
                    s.label("replica").unwrap_or_default().to_string(),
                )
            })
            .collect();
    held.sort();
    assert_eq!(
        held,
        [
            ("chat-a".to_string(), "0".to_string()),
            ("chat-b".to_string(), "1".to_string())
        ]
    );
    // GPU 2: idle capacity, no pod.
    assert_eq!(
        series(&m, "truthscale_gpu_info", &[("gpu", "2")])[0].label("pod"),
        None
    );
    assert!(
        !m.iter()
            .any(|s| s.label("pod") == Some("truthscale-agent-x1"))
    );
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "kubelet")]),
        Some(1.0)
    );

    // The exclusive pod ends: its series go within the stale period, the GPU stays.
    state.answer.lock().unwrap().pod_resources.remove(0);
    let m = sidecar.wait_for(WAIT, "the ended pod gone", |m| {
        value(m, "truthscale_gpu_pods", &[("gpu", "0")]) == Some(0.0)
            && !m.iter().any(|s| s.label("pod") == Some("train-0"))
    });
    assert_eq!(series(&m, "truthscale_gpu_info", &[("gpu", "0")]).len(), 1);

    // The kubelet goes away: counted, kubelet down, GPUs flow without attribution.
    drop(kubelet);
    let _ = std::fs::remove_file(&socket);
    let m = sidecar.wait_for(WAIT, "the kubelet down", |m| {
        value(m, "truthscale_source_up", &[("source", "kubelet")]) == Some(0.0)
    });
    assert!(
        value(
            &m,
            "truthscale_source_errors_total",
            &[("source", "kubelet"), ("kind", "unreachable")]
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{m:?}"
    );
    assert!(!m.iter().any(|s| s.name == "truthscale_gpu_pods"));
    assert!(!m.iter().any(|s| s.name == "truthscale_gpu_allocation_info"));
    assert_eq!(
        m.iter().filter(|s| s.name == "truthscale_gpu_info").count(),
        3
    );
    assert!(!m.iter().any(|s| s.label("pod").is_some()));
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "sim")]),
        Some(1.0)
    );
    assert!(!sidecar.process.stderr().contains("panicked"));
}

/// Node mode at a 500 ms interval against a kubelet that takes 5 s to answer, with the
/// kubelet call's `timeout`: the metrics once two kubelet timeouts are counted.
fn two_kubelet_timeouts(name: &str, timeout: &str) -> Vec<Sample> {
    let dir = TempDir::new(name);
    let socket = dir.path().join("kubelet.sock");
    let state = State::default();
    *state.delay.lock().unwrap() = Duration::from_secs(5);
    let _kubelet = Kubelet::start(&socket, state);
    let socket_text = socket.display().to_string();
    let sidecar = Sidecar::start(
        &[
            "--mode",
            "node",
            "--source",
            "sim",
            "--sim-gpus",
            "1",
            "--interval",
            "500ms",
        ],
        &[
            ("TRUTHSCALE_NODE__SOCKET", &socket_text),
            ("TRUTHSCALE_NODE__TIMEOUT", timeout),
        ],
        dir.path(),
    );
    sidecar.wait_for(WAIT, "two kubelet timeouts", |m| {
        value(
            m,
            "truthscale_source_errors_total",
            &[("source", "kubelet"), ("kind", "timeout")],
        )
        .unwrap_or(0.0)
            >= 2.0
    })
}

/// A kubelet that answers too slowly is a `timeout`, and GPUs still flow.
#[test]
fn a_slow_kubelet_is_a_timeout() {
    let m = two_kubelet_timeouts("node-slow", "200ms");
    assert_eq!(
        m.iter().filter(|s| s.name == "truthscale_gpu_info").count(),
        1
    );
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "kubelet")]),
        Some(0.0)
    );
    // Every slow call is a timeout, never an answer of another kind.
    for kind in ["http", "unreachable"] {
        assert_eq!(
            value(
                &m,
                "truthscale_source_errors_total",
                &[("source", "kubelet"), ("kind", kind)]
            )
            .unwrap_or(0.0),
            0.0,
            "{kind}"
        );
    }
}

/// A hung kubelet never slows sampling: its calls (2 s timeout, longer than the 500 ms
/// interval) run on a thread of their own, so ticks keep their cadence and no overrun is
/// counted, neither against the GPU source nor against the kubelet. (At most one is let
/// pass, a loaded machine's stall: calls on the sampler's thread would overrun on every
/// tick of the two timeouts' 4 s, and make it take 2 s.)
#[test]
fn a_hung_kubelet_does_not_slow_sampling() {
    let m = two_kubelet_timeouts("node-hung", "2s");
    for source in ["sim", "kubelet"] {
        let overruns = value(
            &m,
            "truthscale_source_errors_total",
            &[("source", source), ("kind", "overrun")],
        );
        assert!(
            overruns.is_none_or(|n| n <= 1.0),
            "{source}: {overruns:?} overruns were counted"
        );
    }
    let took = value(&m, "truthscale_sample_duration_seconds", &[]).expect("sample duration");
    assert!(took < 1.0, "a tick took {took} s with the kubelet hung");
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "kubelet")]),
        Some(0.0)
    );
    assert_eq!(
        m.iter().filter(|s| s.name == "truthscale_gpu_info").count(),
        1
    );
}

/// A big node's answer over tonic's default 4 MiB decoding limit (here about 6 MiB: 50 000
/// pods) is read, and the GPU attributed; it used to fail every `List` as `http`.
#[test]
fn a_kubelet_answer_over_4_mib_is_read() {
    let dir = TempDir::new("node-big-answer");
    let socket = dir.path().join("kubelet.sock");
    let state = State::default();
    let mut pods = vec![pod("train-0", "ml", "cuda", "nvidia.com/gpu", &["0"])];
    for i in 0..50_000 {
        let name = format!("padding-pod-with-a-long-generated-name-{i:08}");
        pods.push(pod(
            &name,
            "batch-namespace",
            "worker",
            "example.com/fpga",
            &["fpga-0"],
        ));
    }
    *state.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: pods,
    };
    let _kubelet = Kubelet::start(&socket, state);
    let socket_text = socket.display().to_string();
    let sidecar = Sidecar::start(
        &["--mode", "node", "--source", "sim", "--sim-gpus", "1"],
        &[("TRUTHSCALE_NODE__SOCKET", &socket_text)],
        dir.path(),
    );
    let m = sidecar.wait_for(WAIT, "the GPU attributed", |m| {
        value(
            m,
            "truthscale_gpu_info",
            &[("gpu", "0"), ("pod", "train-0")],
        )
        .is_some()
    });
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "kubelet")]),
        Some(1.0)
    );
    for kind in ["http", "too_large"] {
        assert_eq!(
            value(
                &m,
                "truthscale_source_errors_total",
                &[("source", "kubelet"), ("kind", kind)]
            ),
            None,
            "{kind}"
        );
    }
}

/// A source whose answer does not change between ticks (dcgm-exporter collects every 30 s by
/// default, and is read every interval) reports its GPU as unchanged, under the key it names
/// it by: the attributed GPU stays up, under its pod, over several stale periods.
#[test]
fn an_unchanging_source_keeps_an_attributed_gpu_up() {
    let dir = TempDir::new("node-unchanged");
    let socket = dir.path().join("kubelet.sock");
    let state = State::default();
    *state.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![pod("train-0", "ml", "cuda", "nvidia.com/gpu", &["0"])],
    };
    let _kubelet = Kubelet::start(&socket, state);
    let body = std::fs::read_to_string(truthscale_e2e::fixture(
        "dcgm-exporter-cncf-k8s-ai-conformance-upcloud-l40s.txt",
    ))
    .expect("the L40S capture");
    let dcgm = truthscale_e2e::StandIn::start(truthscale_e2e::ok(&body));
    let source = format!("dcgm-exporter:{}", dcgm.url());
    let sidecar = Sidecar::start(
        &[
            "--mode",
            "node",
            "--source",
            &source,
            "--interval",
            "250ms",
            "--stale-after",
            "1s",
        ],
        &[("TRUTHSCALE_NODE__SOCKET", socket.to_str().unwrap())],
        dir.path(),
    );
    sidecar.wait_for(WAIT, "attribution", |m| {
        value(m, "truthscale_gpu_pods", &[("gpu", "0")]) == Some(1.0)
    });
    let hits = dcgm.hits.load(std::sync::atomic::Ordering::SeqCst);
    sidecar.wait_for(WAIT, "unchanged answers over two stale periods", |_| {
        dcgm.hits.load(std::sync::atomic::Ordering::SeqCst) >= hits + 8
    });
    let m = sidecar.metrics();
    assert_eq!(
        value(&m, "truthscale_gpu_up", &[("gpu", "0"), ("pod", "train-0")]),
        Some(1.0),
        "{m:?}"
    );
    assert_eq!(
        m.iter().filter(|s| s.name == "truthscale_gpu_info").count(),
        1
    );
}

/// Per-process attribution on a time-sliced GPU: three processes on one fake H100 (SM busy
/// 60 %, 30 %, 10 %), two of them in the GPU's two pods (found through their cgroup and
/// hostname under a fake `/proc`), the third in a pod that does not hold the GPU. Each pod
/// gets its share of the device's effective compute, the unattributed process is counted
/// under no pod, and the parts sum to the device value. Memory per pod is the driver's.
#[test]
fn shared_gpu_is_apportioned_to_its_pods_by_sm_busy() {
    let dir = TempDir::new("node-shared");
    let socket = dir.path().join("kubelet.sock");
    let uuid = "GPU-5f0c6a3e-8d3b-4c1e-9a7f-0000000000a1";
    let state = State::default();
    *state.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![
            pod(
                "chat-a",
                "web",
                "vllm",
                "nvidia.com/gpu",
                &[&format!("{uuid}::0")],
            ),
            pod(
                "chat-b",
                "web",
                "vllm",
                "nvidia.com/gpu",
                &[&format!("{uuid}::1")],
            ),
        ],
    };
    let _kubelet = Kubelet::start(&socket, state);
    // A fake /proc: each process's cgroup (a pod UID) and environment (its hostname).
    let proc_root = dir.path().join("proc");
    let procs = [
        (5001, "1b4e28ba-2fa1-11d2-883f-0016d3cca427", "chat-a"),
        (5002, "2c5f39cb-3fb2-22e3-994f-1127e4ddb538", "chat-b"),
        (5003, "3d6f4adc-4fc3-33f4-aa5f-2238f5eec649", "batch-x"),
    ];
    truthscale_e2e::fake_proc(&proc_root, &procs);
    let sidecar = shared_h100_agent(dir.path(), &socket, &proc_root, &[]);
    let m = sidecar.wait_for(WAIT, "per-pod shares", |m| {
        m.iter()
            .filter(|s| s.name == "truthscale_pod_effective_compute_estimate_ratio")
            .count()
            == 3
            && value(m, "truthscale_gpu_effective_compute_ratio", &[("gpu", "0")]).is_some()
    });
    effective_compute_by_hand(&m);
    let mem = |pod: Option<&str>| {
        m.iter()
            .find(|s| s.name == "truthscale_pod_memory_used_bytes" && s.label("pod") == pod)
            .map(|s| s.value)
    };
    assert_eq!(mem(Some("chat-a")), Some(40_000_000_000.0));
    assert_eq!(mem(Some("chat-b")), Some(30_000_000_000.0));
    assert_eq!(mem(None), Some(5_000_000_000.0));
    // The device's own series carry no pod.
    assert!(
        m.iter()
            .filter(|s| s.name == "truthscale_gpu_effective_compute_ratio")
            .all(|s| s.label("pod").is_none())
    );
    energy_follows_sm_busy(&sidecar);
}

/// The shared H100's effective compute and each pod's SM-busy share of it, against values
/// worked out by hand (below), never by the code under test.
fn effective_compute_by_hand(m: &[Sample]) {
    let device = value(m, "truthscale_gpu_effective_compute_ratio", &[("gpu", "0")]).unwrap();
    // By hand from h100-shared.json (GPM tensor 2 %, FP16 1 %, FP32 3 %; SM clock 1980 MHz)
    // and the spec's H100 SXM peaks (989 dense tensor, 134 FP16, 67 FP32 TFLOP/s; f_ref
    // 1830 MHz): C = 0.02 + 0.01·134/989 + 0.03·67/989 = 0.0233873, κ = 1980/1830 =
    // 1.0819672, ECF = C·κ = 0.0253042. Shares 60/30/10 % of it: 0.0151825, 0.0075913 and
    // 0.0025304.
    assert!((device - 0.025_304_248).abs() < 1e-8, "device ECF {device}");
    let part = |pod: Option<&str>| {
        m.iter()
            .find(|s| {
                s.name == "truthscale_pod_effective_compute_estimate_ratio" && s.label("pod") == pod
            })
            .map(|s| {
                assert_eq!(s.label("method"), Some("sm_busy_share"));
                s.value
            })
            .unwrap_or_else(|| panic!("no part for {pod:?}"))
    };
    let (a, b, none) = (part(Some("chat-a")), part(Some("chat-b")), part(None));
    assert!((a - 0.015_182_549).abs() < 1e-8, "chat-a {a}");
    assert!((b - 0.007_591_275).abs() < 1e-8, "chat-b {b}");
    assert!((none - 0.002_530_425).abs() < 1e-8, "unfound {none}");
    assert!((a / device - 0.6).abs() < 1e-9, "{a} of {device}");
    assert!((b / device - 0.3).abs() < 1e-9, "{b} of {device}");
    assert!((none / device - 0.1).abs() < 1e-9, "{none} of {device}");
    // The text exposition rounds nothing: the parts add up to the device value.
    assert!(
        ((a + b + none) - device).abs() <= 1e-15 * device.max(1.0),
        "{a}+{b}+{none} vs {device}"
    );
}

/// A GPU held through a DRA resource claim: NVIDIA's DRA driver names a GPU `gpu-<minor>`,
/// its minor number (`/dev/nvidia<minor>`), which need not be its index. Here the fake
/// driver's two H100s have their minor numbers the other way round (index 0 is
/// `/dev/nvidia1`), so a claim of `gpu-0` holds the GPU of index 1; the GPU of index 0 is
/// held by nobody. The ground truth is the scenario's minor numbers, written here.
#[test]
fn a_dra_claim_holds_the_gpu_of_its_minor_number() {
    let dir = TempDir::new("node-dra");
    let socket = dir.path().join("kubelet.sock");
    let state = State::default();
    *state.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![dra_pod("decode-0", "llm", "vllm", "gpu-0")],
    };
    let _kubelet = Kubelet::start(&socket, state);
    let h100 = |index: u32, minor: u32| {
        serde_json::json!({
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": format!("GPU-d2a00000-0000-4000-8000-00000000000{index}"),
            "pci_bus_id": format!("00000000:{:02X}:00.0", 0x18 + index),
            "minor": minor,
            "architecture": "hopper",
            "memory_total_bytes": 85_520_809_984_u64,
            "util_percent": 100,
            "power_watts": 500,
            "power_limit_watts": 700,
            "sm_clock_mhz": 1980,
            "gpm": { "metrics": { "sm_util": 80.0, "any_tensor_util": 40.0, "dram_bw_util": 30.0 } },
        })
    };
    let scenario = dir.path().join("scenario.json");
    let text = serde_json::json!({
        "_comment": "Two H100s whose minor numbers are not their indices.",
        "devices": [h100(0, 1), h100(1, 0)],
    });
    std::fs::write(&scenario, text.to_string()).unwrap();
    let sidecar = nvml_agent(dir.path(), &scenario, &socket, &[]);
    let m = sidecar.wait_for(WAIT, "the claim attributed", |m| {
        value(m, "truthscale_gpu_pods", &[("gpu", "1")]) == Some(1.0)
            && value(m, "truthscale_gpu_pods", &[("gpu", "0")]).is_some()
    });
    // The claimed GPU (minor 0, index 1): every series of it carries the claim's pod.
    let info = series(&m, "truthscale_gpu_info", &[("gpu", "1")]);
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].label("pod"), Some("decode-0"));
    assert_eq!(info[0].label("namespace"), Some("llm"));
    assert_eq!(info[0].label("container"), Some("vllm"));
    let held = series(&m, "truthscale_gpu_allocation_info", &[("gpu", "1")]);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].label("pod"), Some("decode-0"));
    assert_eq!(held[0].label("resource"), Some("dra:gpu.nvidia.com"));
    // The GPU of index 0 (minor 1) is held by nobody: idle capacity, no pod on any series.
    assert_eq!(value(&m, "truthscale_gpu_pods", &[("gpu", "0")]), Some(0.0));
    assert!(
        m.iter()
            .filter(|s| s.label("gpu") == Some("0"))
            .all(|s| s.label("pod").is_none())
    );
    // NVML reads minor numbers: nothing is assumed.
    let log = sidecar.process.stderr();
    assert!(!log.contains("reads no minor numbers"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// A time-sliced GPU held by two pods of one name, `chat`, in two namespaces, and used by a
/// third `chat` (another namespace) that holds no share of it: the hostname tells none of
/// their processes apart; with the API server's pod list, the pod UID in each process's
/// cgroup does. Each holder gets its process's share of the scenario's SM busy (60 % and
/// 30 %), and the third's 10 % counts under no pod.
#[test]
fn pods_of_one_name_are_told_apart_by_their_uids() {
    let dir = TempDir::new("node-uids");
    let uuid = "GPU-5f0c6a3e-8d3b-4c1e-9a7f-0000000000a1";
    let state = State::default();
    let replica = |r: u32| format!("{uuid}::{r}");
    *state.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![
            pod("chat", "web", "vllm", "nvidia.com/gpu", &[&replica(0)]),
            pod("chat", "staging", "vllm", "nvidia.com/gpu", &[&replica(1)]),
        ],
    };
    let _kubelet = Kubelet::start(&dir.path().join("kubelet.sock"), state);
    let api_state = ApiState::new("token-1", NODE);
    api_state.set_pods(vec![
        labelled("web", "chat", &[("app.kubernetes.io/name", "chat")]),
        labelled("staging", "chat", &[("app.kubernetes.io/name", "chat")]),
        labelled("batch", "chat", &[("app.kubernetes.io/name", "chat")]),
    ]);
    let api = ApiServer::start(dir.path(), api_state);
    let token = dir.path().join("token");
    std::fs::write(&token, "token-1\n").unwrap();
    // A fake /proc: each process's cgroup (its pod's UID) and its hostname, `chat` for all.
    let proc_root = dir.path().join("proc");
    let uids: Vec<String> = ["web", "staging", "batch"]
        .iter()
        .map(|ns| api_uid(ns, "chat"))
        .collect();
    let procs: Vec<(u32, &str, &str)> = (5001..)
        .zip(&uids)
        .map(|(pid, uid)| (pid, uid.as_str(), "chat"))
        .collect();
    truthscale_e2e::fake_proc(&proc_root, &procs);
    let sidecar = shared_h100_agent(
        dir.path(),
        &dir.path().join("kubelet.sock"),
        &proc_root,
        &[
            ("TRUTHSCALE_NODE__POD_LABELS", "app.kubernetes.io/name"),
            ("TRUTHSCALE_NODE__POD_LABELS_REFRESH", "1s"),
            ("TRUTHSCALE_NODE__API_SERVER", api.url.as_str()),
            ("TRUTHSCALE_NODE__TOKEN_FILE", token.to_str().unwrap()),
            ("TRUTHSCALE_NODE__CA_FILE", api.ca.to_str().unwrap()),
            ("NODE_NAME", NODE),
        ],
    );
    const ESTIMATE: &str = "truthscale_pod_effective_compute_estimate_ratio";
    let part = |m: &[Sample], ns: Option<&str>| {
        m.iter()
            .find(|s| s.name == ESTIMATE && s.label("namespace") == ns)
            .map(|s| s.value)
    };
    let m = sidecar.wait_for(WAIT, "each holder's share", |m| {
        part(m, Some("web")).is_some()
            && part(m, Some("staging")).is_some()
            && value(m, "truthscale_gpu_effective_compute_ratio", &[("gpu", "0")]).is_some()
    });
    let device = value(
        &m,
        "truthscale_gpu_effective_compute_ratio",
        &[("gpu", "0")],
    )
    .unwrap();
    let (web, staging) = (
        part(&m, Some("web")).unwrap(),
        part(&m, Some("staging")).unwrap(),
    );
    let none = part(&m, None).expect("the third pod's part, under no pod");
    assert!((web / device - 0.6).abs() < 1e-9, "{web} of {device}");
    assert!(
        (staging / device - 0.3).abs() < 1e-9,
        "{staging} of {device}"
    );
    assert!((none / device - 0.1).abs() < 1e-9, "{none} of {device}");
    assert!(
        !m.iter()
            .any(|s| s.name == ESTIMATE && s.label("namespace") == Some("batch")),
        "the pod that holds no share has no part of its own"
    );
    let log = sidecar.process.stderr();
    assert!(!log.contains("panicked"), "{log}");
}

/// The node agent on the fake NVML library over `scenario`, reading the kubelet on
/// `socket`, at a 250 ms interval, with `extra` settings.
fn nvml_agent(
    dir: &std::path::Path,
    scenario: &std::path::Path,
    socket: &std::path::Path,
    extra: &[(&str, &str)],
) -> Sidecar {
    let lib = truthscale_e2e::fake_nvml();
    let mut env = vec![
        ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap()),
        ("TRUTHSCALE_NODE__SOCKET", socket.to_str().unwrap()),
    ];
    env.extend_from_slice(extra);
    Sidecar::start(
        &[
            &["--mode", "node"][..],
            &truthscale_e2e::nvml_args(lib, "250ms"),
        ]
        .concat(),
        &env,
        dir,
    )
}

/// [`nvml_agent`] on the fake NVML's time-sliced H100 (`h100-shared.json`: processes 5001,
/// 5002 and 5003 at SM busy 60, 30 and 10 %), per-process series on, `/proc` under
/// `proc_root`, with `extra` settings.
fn shared_h100_agent(
    dir: &std::path::Path,
    socket: &std::path::Path,
    proc_root: &std::path::Path,
    extra: &[(&str, &str)],
) -> Sidecar {
    let scenario = truthscale_e2e::workspace().join("tests/fake-nvml/scenarios/h100-shared.json");
    let mut env = vec![
        ("TRUTHSCALE_SOURCE__PER_PROCESS_SERIES", "true"),
        ("TRUTHSCALE_NODE__PROC_ROOT", proc_root.to_str().unwrap()),
    ];
    env.extend_from_slice(extra);
    nvml_agent(dir, &scenario, socket, &env)
}

/// The energy counters of one scrape: chat-a's, chat-b's and the unfound pod's estimates,
/// then the device's active part and its whole energy.
fn energy_snapshot(m: &[Sample]) -> [Option<f64>; 5] {
    const PART: &str = "truthscale_pod_energy_estimate_joules_total";
    let part = |pod: Option<&str>| {
        m.iter()
            .find(|s| s.name == PART && s.label("pod") == pod)
            .map(|s| {
                assert_eq!(s.label("method"), Some("sm_busy_share"));
                s.value
            })
    };
    [
        part(Some("chat-a")),
        part(Some("chat-b")),
        part(None),
        value(
            m,
            "truthscale_gpu_energy_part_joules_total",
            &[("gpu", "0"), ("part", "active")],
        ),
        value(m, "truthscale_gpu_energy_joules_total", &[("gpu", "0")]),
    ]
}

/// The shared GPU's active energy goes to its pods by SM busy share (60:30:10), an estimate
/// whose parts sum to the device's active energy; nothing is unallocated (the GPU is held);
/// its floor is the catalog's H100 idle power (the busy flag never reads 0). Compared over
/// the growth between two scrapes, so that windows before the holders were known do not
/// count; the expected ratios are the scenario's own SM busy figures, and the active part
/// of the energy is worked out by hand from its power and the H100's idle power.
fn energy_follows_sm_busy(sidecar: &Sidecar) {
    let ready = |m: &[Sample]| {
        let now = energy_snapshot(m);
        now.iter().all(Option::is_some) && now[3].is_some_and(|x| x > 0.0)
    };
    let first = energy_snapshot(&sidecar.wait_for(WAIT, "per-pod energy", ready));
    let active0 = first[3].unwrap();
    // About 3 s of growth: the window edges' timing jitter is small against it.
    let m = sidecar.wait_for(WAIT, "more energy", |m| {
        ready(m) && energy_snapshot(m)[3].is_some_and(|x| x > active0 + 1000.0)
    });
    let then = energy_snapshot(&m);
    let grew: [f64; 5] = std::array::from_fn(|i| then[i].unwrap() - first[i].unwrap());
    let [a, b, none, active, total] = grew;
    assert!(a > 0.0 && b > 0.0 && none > 0.0, "{a} {b} {none}");
    assert!(
        (a / b - 2.0).abs() / 2.0 < 0.01,
        "chat-a:chat-b {a}:{b}, not 2:1"
    );
    assert!(
        (a / none - 6.0).abs() / 6.0 < 0.01,
        "chat-a:none {a}:{none}, not 6:1"
    );
    assert!(
        ((a + b + none) - active).abs() <= 1e-6 * active,
        "{a}+{b}+{none} vs {active}"
    );
    // By hand: h100-shared.json draws P = 380 W throughout (its energy counter grows at
    // power_watts); the floor is the H100 SXM's idle power, 75 W (spec §5.1, Splitwise's
    // constants). Active share of the energy = (P − P_idle)/P = (380 − 75)/380 = 0.802632;
    // chat-a's, 0.6 × that = 0.481579.
    let share = active / total;
    assert!(
        (share - 0.802_632).abs() < 0.01,
        "active {active} of {total}"
    );
    assert!(
        (a / total - 0.481_579).abs() < 0.006,
        "chat-a {a} of {total}"
    );
    for part in ["active", "idle_floor"] {
        let unallocated = value(
            &m,
            "truthscale_gpu_unallocated_energy_joules_total",
            &[("gpu", "0"), ("part", part)],
        );
        assert_eq!(unallocated, Some(0.0), "{part}");
    }
    assert_eq!(
        value(
            &m,
            "truthscale_gpu_idle_floor_watts",
            &[("gpu", "0"), ("floor", "catalog")]
        ),
        Some(75.0)
    );
}

// ---------------------------------------------------------------------------------------
// Pod labels from the API server.

/// A pod of the fake API server: namespace, name, labels.
pub(crate) type ApiPod = (String, String, Vec<(String, String)>);

/// A pod of the fake API server by namespace and name.
type ApiPodKey = (String, String);

/// A pod's controller: kind and name.
type ApiOwner = (String, String);

/// A request the fake API server saw: its `Authorization` header and its query.
type ApiRequest = (String, HashMap<String, String>);

/// What the fake API server accepts and answers, changeable while it runs.
#[derive(Clone)]
pub(crate) struct ApiState {
    /// The token it accepts (`Authorization: Bearer …`); another is a 401.
    token: Arc<Mutex<String>>,
    /// The node whose pods it serves (`fieldSelector=spec.nodeName=…`); another is a 400.
    node: String,
    /// 200: the pod list; anything else: that status with a Kubernetes `Status` body.
    status: Arc<Mutex<u16>>,
    /// The pods, as (namespace, name, labels).
    pods: Arc<Mutex<Vec<ApiPod>>>,
    /// The controller of a pod, by (namespace, name): (kind, name), served as its
    /// `ownerReferences`; a pod not here has none.
    owners: Arc<Mutex<HashMap<ApiPodKey, ApiOwner>>>,
    /// Every request: its `Authorization` header and its query.
    requests: Arc<Mutex<Vec<ApiRequest>>>,
}

impl ApiState {
    pub(crate) fn new(token: &str, node: &str) -> ApiState {
        ApiState {
            token: Arc::new(Mutex::new(token.into())),
            node: node.into(),
            status: Arc::new(Mutex::new(200)),
            pods: Arc::default(),
            owners: Arc::default(),
            requests: Arc::default(),
        }
    }

    /// Serve these pods.
    pub(crate) fn set_pods(&self, pods: Vec<ApiPod>) {
        *self.pods.lock().unwrap() = pods;
    }

    /// Name `kind`/`name` as the controller of pod `ns`/`pod`.
    pub(crate) fn set_owner(&self, ns: &str, pod: &str, kind: &str, name: &str) {
        self.owners
            .lock()
            .unwrap()
            .insert((ns.into(), pod.into()), (kind.into(), name.into()));
    }

    pub(crate) fn requests(&self) -> Vec<ApiRequest> {
        self.requests.lock().unwrap().clone()
    }
}

/// The UID the fake API server gives pod `name` in `namespace`: a UUID made of the two,
/// the same each time.
pub(crate) fn api_uid(namespace: &str, name: &str) -> String {
    use std::hash::{Hash, Hasher};
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, namespace, name).hash(&mut h);
        h.finish()
    };
    let hex = format!("{:016x}{:016x}", half(0), half(1));
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn status_body(code: u16, reason: &str, message: &str) -> String {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
    .to_string()
}

async fn list_pods(
    axum::extract::State(s): axum::extract::State<ApiState>,
    axum::extract::Query(query): axum::extract::Query<HashMap<String, String>>,
    headers: axum::http::HeaderMap,
) -> (axum::http::StatusCode, String) {
    use axum::http::StatusCode;
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    s.requests
        .lock()
        .unwrap()
        .push((auth.clone(), query.clone()));
    if auth != format!("Bearer {}", s.token.lock().unwrap()) {
        return (
            StatusCode::UNAUTHORIZED,
            status_body(401, "Unauthorized", "Unauthorized"),
        );
    }
    if query.get("fieldSelector") != Some(&format!("spec.nodeName={}", s.node)) {
        return (
            StatusCode::BAD_REQUEST,
            status_body(400, "BadRequest", "this node's pods only"),
        );
    }
    let status = *s.status.lock().unwrap();
    if status != 200 {
        return (
            StatusCode::from_u16(status).unwrap(),
            status_body(
                status,
                "Forbidden",
                "pods is forbidden: User \"system:serviceaccount:monitoring:truthscale-node\" cannot list resource \"pods\" in API group \"\" at the cluster scope",
            ),
        );
    }
    let owners = s.owners.lock().unwrap().clone();
    let items: Vec<serde_json::Value> = s
        .pods
        .lock()
        .unwrap()
        .iter()
        .map(|(ns, name, labels)| {
            let labels: serde_json::Map<String, serde_json::Value> = labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            let mut item = serde_json::json!({"metadata": {
                "name": name, "namespace": ns, "uid": api_uid(ns, name), "labels": labels,
            }});
            if let Some((kind, owner)) = owners.get(&(ns.clone(), name.clone())) {
                item["metadata"]["ownerReferences"] = serde_json::json!([{
                    "apiVersion": "apps/v1", "kind": kind, "name": owner,
                    "uid": format!("uid-{ns}-{owner}"), "controller": true,
                    "blockOwnerDeletion": true,
                }]);
            }
            item
        })
        .collect();
    (
        StatusCode::OK,
        serde_json::json!({
            "kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items,
        })
        .to_string(),
    )
}

/// TLS handshakes in `accept`, for `axum::serve`; a failed handshake is skipped.
struct Https {
    tcp: tokio::net::TcpListener,
    tls: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for Https {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Ok((tcp, addr)) = self.tcp.accept().await
                && let Ok(tls) = self.tls.accept(tcp).await
            {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A fake API server on 127.0.0.1 serving `GET /api/v1/pods` over HTTPS, with a CA of its
/// own (written to `ca.crt` in `dir`), until dropped.
pub(crate) struct ApiServer {
    pub(crate) url: String,
    pub(crate) ca: std::path::PathBuf,
    _rt: tokio::runtime::Runtime,
}

impl ApiServer {
    pub(crate) fn start(dir: &std::path::Path, state: ApiState) -> ApiServer {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "kubernetes");
        ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let issuer =
            rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let ca_path = dir.join("ca.crt");
        std::fs::write(&ca_path, issuer.pem()).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let tcp = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("https://{}", tcp.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/api/v1/pods", axum::routing::get(list_pods))
            .with_state(state);
        let https = Https {
            tcp,
            tls: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        };
        rt.spawn(async move {
            let _ = axum::serve(https, app).await;
        });
        ApiServer {
            url,
            ca: ca_path,
            _rt: rt,
        }
    }
}

const NODE: &str = "gpu-node-3";
const APP: &str = "label_app_kubernetes_io_name";

pub(crate) fn labelled(ns: &str, name: &str, labels: &[(&str, &str)]) -> ApiPod {
    (
        ns.into(),
        name.into(),
        labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
    )
}

/// The kubelet's answer of the pod-label tests: GPU 0 held by `train-0` alone, GPU 1
/// time-sliced between `chat-a` and `chat-b`, GPU 2 idle.
fn node_with_pods(dir: &std::path::Path) -> Kubelet {
    let state = State::default();
    *state.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![
            pod("train-0", "ml", "cuda", "nvidia.com/gpu", &["0"]),
            pod("chat-a", "web", "vllm", "nvidia.com/gpu", &["1::0"]),
            pod("chat-b", "web", "vllm", "nvidia.com/gpu", &["1::1"]),
        ],
    };
    Kubelet::start(&dir.join("kubelet.sock"), state)
}

/// The API server's pods: `chat-b` has no `app.kubernetes.io/name`; `train-0`'s is also
/// on a pod of the same name in another namespace, which must not be taken for it.
pub(crate) fn api_pods(state: &ApiState) {
    *state.pods.lock().unwrap() = vec![
        labelled(
            "ml",
            "train-0",
            &[("app.kubernetes.io/name", "trainer"), ("team", "research")],
        ),
        labelled("web", "chat-a", &[("app.kubernetes.io/name", "chat")]),
        labelled("web", "chat-b", &[("team", "web")]),
        labelled(
            "other",
            "train-0",
            &[("app.kubernetes.io/name", "impostor")],
        ),
        labelled(
            "kube-system",
            "no-gpu",
            &[("app.kubernetes.io/name", "dns")],
        ),
    ];
}

/// The node of the pod-label tests: the kubelet of [`node_with_pods`], an API server that
/// serves [`api_pods`] and accepts `token-1`, and where the token file goes (not written).
/// A test binds `_kubelet` by name: the kubelet stops when it is dropped.
struct LabelledNode {
    dir: TempDir,
    _kubelet: Kubelet,
    api_state: ApiState,
    api: ApiServer,
    token: std::path::PathBuf,
}

fn labelled_node(name: &str) -> LabelledNode {
    let dir = TempDir::new(name);
    let kubelet = node_with_pods(dir.path());
    let api_state = ApiState::new("token-1", NODE);
    api_pods(&api_state);
    let api = ApiServer::start(dir.path(), api_state.clone());
    let token = dir.path().join("token");
    LabelledNode {
        dir,
        _kubelet: kubelet,
        api_state,
        api,
        token,
    }
}

/// `serve --mode node` with `pod_labels = ["app.kubernetes.io/name"]`, reading `api`.
fn start_with_pod_labels(
    dir: &std::path::Path,
    api: &ApiServer,
    token: &std::path::Path,
    extra: &[(&str, &str)],
) -> Sidecar {
    let socket = dir.join("kubelet.sock").display().to_string();
    let mut env = vec![
        ("TRUTHSCALE_NODE__SOCKET", socket.as_str()),
        ("TRUTHSCALE_NODE__POD_LABELS", "app.kubernetes.io/name"),
        ("TRUTHSCALE_NODE__POD_LABELS_REFRESH", "1s"),
        ("TRUTHSCALE_NODE__API_SERVER", api.url.as_str()),
        ("TRUTHSCALE_NODE__TOKEN_FILE", token.to_str().unwrap()),
        ("TRUTHSCALE_NODE__CA_FILE", api.ca.to_str().unwrap()),
        ("NODE_NAME", NODE),
    ];
    env.extend_from_slice(extra);
    Sidecar::start(
        &[
            "--mode",
            "node",
            "--source",
            "sim",
            "--sim-gpus",
            "3",
            "--interval",
            "200ms",
        ],
        &env,
        dir,
    )
}

fn allocation<'a>(m: &'a [Sample], pod: &str) -> Vec<&'a Sample> {
    m.iter()
        .filter(|s| s.name == "truthscale_gpu_allocation_info" && s.label("pod") == Some(pod))
        .collect()
}

/// The allocation series of `pod` (on its GPU's series when it holds it alone).
fn app_label_of(m: &[Sample], pod: &str) -> Vec<Option<String>> {
    allocation(m, pod)
        .iter()
        .map(|s| s.label(APP).map(str::to_string))
        .collect()
}

/// Pod labels end to end: the allowlisted label on the allocation series of the pods that
/// have it (exclusive and shared GPUs alike, matched by namespace and name), on no other
/// series; a pod without it has no such label; only the allowlisted key; the request sends
/// the token and asks for this node's pods; a rotated token is read at the next refresh.
#[test]
fn pod_labels_from_the_api_server_on_allocation_info() {
    let LabelledNode {
        dir,
        _kubelet,
        api_state,
        api,
        token,
    } = labelled_node("node-pod-labels");
    std::fs::write(&token, "token-1\n").unwrap();
    let sidecar = start_with_pod_labels(dir.path(), &api, &token, &[]);
    let m = sidecar.wait_for(WAIT, "pod labels", |m| {
        app_label_of(m, "chat-a") == [Some("chat".to_string())]
            && !allocation(m, "chat-b").is_empty()
    });
    // GPU 0 is train-0's alone: its allocation series carries the pod (as every series of
    // the GPU does) and the label of the pod in namespace ml, not of the one in "other".
    let train: Vec<&Sample> = m
        .iter()
        .filter(|s| s.name == "truthscale_gpu_allocation_info" && s.label("gpu") == Some("0"))
        .collect();
    assert_eq!(train.len(), 1, "{train:?}");
    assert_eq!(train[0].label("pod"), Some("train-0"));
    assert_eq!(train[0].label(APP), Some("trainer"));
    // A pod without the label has none (not an empty one); a key not allowlisted is never
    // exported.
    assert_eq!(app_label_of(&m, "chat-b"), [None]);
    assert!(
        allocation(&m, "chat-b")[0]
            .labels
            .iter()
            .all(|(k, _)| !k.starts_with("label_"))
    );
    assert!(!m.iter().any(|s| s.label("label_team").is_some()));
    // Only the allocation series carries pod labels.
    assert!(
        m.iter()
            .filter(|s| s.name != "truthscale_gpu_allocation_info")
            .all(|s| s.labels.iter().all(|(k, _)| !k.starts_with("label_"))),
        "{m:?}"
    );
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "apiserver")]),
        Some(1.0)
    );
    // What was asked: the token, this node's pods.
    let requests = api_state.requests();
    assert!(!requests.is_empty());
    for (auth, query) in &requests {
        assert_eq!(auth, "Bearer token-1");
        assert_eq!(
            query.get("fieldSelector").map(String::as_str),
            Some("spec.nodeName=gpu-node-3")
        );
    }

    // The token rotates (a projected token): the next refresh reads the new one.
    *api_state.token.lock().unwrap() = "token-2".into();
    std::fs::write(&token, "token-2\n").unwrap();
    let t = std::time::Instant::now();
    while !api_state
        .requests()
        .iter()
        .any(|(auth, _)| auth == "Bearer token-2")
    {
        assert!(t.elapsed() < WAIT, "the rotated token was never sent");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A label that changes on the pod changes on the series.
    api_state.pods.lock().unwrap()[1].2[0].1 = "chat-v2".into();
    let m = sidecar.wait_for(WAIT, "the changed label", |m| {
        app_label_of(m, "chat-a") == [Some("chat-v2".to_string())]
    });
    assert_eq!(allocation(&m, "chat-a").len(), 1);
    assert!(!sidecar.process.stderr().contains("panicked"));
}

/// The API server refuses the list (403, no RBAC): counted as `no_permission`, logged with
/// what to apply, `truthscale_source_up{source="apiserver"} 0`, and allocation info flows on
/// without the extra label. Granted, the labels come.
#[test]
fn a_forbidden_pod_list_is_counted_and_attribution_goes_on() {
    let LabelledNode {
        dir,
        _kubelet,
        api_state,
        api,
        token,
    } = labelled_node("node-pod-labels-403");
    *api_state.status.lock().unwrap() = 403;
    std::fs::write(&token, "token-1").unwrap();
    let sidecar = start_with_pod_labels(dir.path(), &api, &token, &[]);
    let m = sidecar.wait_for(WAIT, "the refusal counted", |m| {
        value(
            m,
            "truthscale_source_errors_total",
            &[("source", "apiserver"), ("kind", "no_permission")],
        )
        .unwrap_or(0.0)
            >= 2.0
            && !allocation(m, "chat-a").is_empty()
    });
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "apiserver")]),
        Some(0.0)
    );
    // The kubelet's attribution is untouched.
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "kubelet")]),
        Some(1.0)
    );
    assert_eq!(value(&m, "truthscale_gpu_pods", &[("gpu", "1")]), Some(2.0));
    for pod in ["train-0", "chat-a", "chat-b"] {
        assert_eq!(app_label_of(&m, pod), [None], "{pod}");
    }
    let stderr = sidecar.process.stderr();
    let line = stderr
        .lines()
        .find(|l| l.contains("answered HTTP 403"))
        .unwrap_or_else(|| panic!("no log line names the 403:\n{stderr}"));
    eprintln!("node: {line}");
    assert!(
        line.contains("may not list pods")
            && line.contains("kubectl apply --server-side -k docker/kubernetes/node/pod-labels"),
        "{line}"
    );
    // Logged once per 30 s, not at every refresh.
    assert_eq!(stderr.matches("answered HTTP 403").count(), 1, "{stderr}");

    // The role is granted: the labels come at the next refresh.
    *api_state.status.lock().unwrap() = 200;
    let m = sidecar.wait_for(WAIT, "the labels after the grant", |m| {
        app_label_of(m, "chat-a") == [Some("chat".to_string())]
    });
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "apiserver")]),
        Some(1.0)
    );
}

/// A token file that cannot be read: at start, the start is refused naming the key and the
/// file; after start (the token gone), each refresh is an `io` error, logged with the file,
/// and once the last answer is three refresh periods old the labels go (never stale ones
/// kept for ever) while allocation info stays. Pod labels without a node name are refused
/// at start too.
#[test]
fn an_unreadable_token_is_refused_at_start_and_counted_after() {
    let LabelledNode {
        dir,
        _kubelet,
        api_state,
        api,
        token,
    } = labelled_node("node-pod-labels-token");
    let socket = dir.path().join("kubelet.sock").display().to_string();
    let refused = |env: &[(&str, &str)]| {
        let out = clean_command()
            .args([
                "serve",
                "--mode",
                "node",
                "--source",
                "sim",
                "--listen",
                "127.0.0.1:0",
            ])
            .env("TRUTHSCALE_NODE__SOCKET", &socket)
            .env("TRUTHSCALE_NODE__POD_LABELS", "app.kubernetes.io/name")
            .env("TRUTHSCALE_NODE__API_SERVER", &api.url)
            .env("TRUTHSCALE_NODE__CA_FILE", &api.ca)
            .env("TRUTHSCALE_NODE__TOKEN_FILE", &token)
            .envs(env.iter().copied())
            .output()
            .expect("run truthscale");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = refused(&[("NODE_NAME", NODE)]);
    assert!(
        stderr.contains("node.token_file")
            && stderr.contains(&token.display().to_string())
            && stderr.contains("cannot read the token"),
        "{stderr}"
    );
    let stderr = refused(&[]);
    assert!(
        stderr.contains("node.pod_labels") && stderr.contains("NODE_NAME"),
        "{stderr}"
    );
    assert!(
        api_state.requests().is_empty(),
        "no request without a start"
    );

    std::fs::write(&token, "token-1").unwrap();
    let sidecar = start_with_pod_labels(dir.path(), &api, &token, &[]);
    sidecar.wait_for(WAIT, "pod labels", |m| {
        app_label_of(m, "chat-a") == [Some("chat".to_string())]
    });
    std::fs::remove_file(&token).unwrap();
    let m = sidecar.wait_for(WAIT, "the labels gone with the token", |m| {
        value(
            m,
            "truthscale_source_errors_total",
            &[("source", "apiserver"), ("kind", "io")],
        )
        .unwrap_or(0.0)
            >= 1.0
            && value(m, "truthscale_source_up", &[("source", "apiserver")]) == Some(0.0)
    });
    assert_eq!(app_label_of(&m, "chat-a"), [None]);
    assert_eq!(app_label_of(&m, "chat-b"), [None]);
    let stderr = sidecar.process.stderr();
    assert!(
        stderr.lines().any(
            |l| l.contains("cannot read the token") && l.contains(&token.display().to_string())
        ),
        "{stderr}"
    );
}

/// The kubelet's answer is read within the node DaemonSet's 128 MiB memory limit at its cap,
/// whatever it holds: just under 16 MiB of the answer that costs most once decoded into
/// structs (hundreds of thousands of pods, each with several empty containers: 2 bytes on
/// the wire each), plus one pod holding GPU 0. Read at least twice, the peak resident memory
/// (`VmHWM`) stays under the limit (docker/kubernetes/node/base/daemonset.yaml).
#[test]
fn a_kubelet_answer_of_empty_containers_at_the_cap_is_read_within_128_mib() {
    use prost::Message as _;
    use truthscale_exporter::attribution::kubelet::proto::{ContainerResources, PodResources};
    let dir = TempDir::new("node-amplified-answer");
    let socket = dir.path().join("kubelet.sock");
    let state = State::default();
    let mut answer = ListPodResourcesResponse {
        pod_resources: vec![pod("train-0", "ml", "cuda", "nvidia.com/gpu", &["0"])],
    };
    let empty = PodResources {
        name: "p-0000000".into(),
        namespace: String::new(),
        containers: vec![ContainerResources::default(); 8],
    };
    // Each padding pod is the same size on the wire: fill to just under 16 MiB.
    let each = ListPodResourcesResponse {
        pod_resources: vec![empty.clone()],
    }
    .encoded_len();
    let room = (16 << 20) - 4096 - answer.encoded_len();
    answer
        .pod_resources
        .extend((0..room / each).map(|i| PodResources {
            name: format!("p-{i:07}"),
            ..empty.clone()
        }));
    let bytes = answer.encoded_len();
    assert!((15 << 20..16 << 20).contains(&bytes), "{bytes} bytes");
    *state.answer.lock().unwrap() = answer;
    let _kubelet = Kubelet::start(&socket, state.clone());
    let socket_text = socket.display().to_string();
    let sidecar = Sidecar::start(
        &[
            "--mode",
            "node",
            "--source",
            "sim",
            "--sim-gpus",
            "1",
            "--interval",
            "250ms",
            // Each answer takes seconds to encode and read: an allocation stays fresh from
            // one to the next, where the default 750 ms made it a moment to catch.
            "--stale-after",
            "60s",
        ],
        // Encoding millions of messages (the fake kubelet) takes more than the default 2 s.
        &[
            ("TRUTHSCALE_NODE__SOCKET", &socket_text),
            ("TRUTHSCALE_NODE__TIMEOUT", "30s"),
        ],
        dir.path(),
    );
    let m = sidecar.wait_for(Duration::from_secs(180), "the answer read twice", |m| {
        // A third call begins only once the second answer was read.
        state.calls.lock().unwrap().list >= 3
            && value(
                m,
                "truthscale_gpu_info",
                &[("gpu", "0"), ("pod", "train-0")],
            )
            .is_some()
    });
    for kind in ["http", "too_large", "timeout"] {
        assert_eq!(
            value(
                &m,
                "truthscale_source_errors_total",
                &[("source", "kubelet"), ("kind", kind)]
            ),
            None,
            "{kind}"
        );
    }
    let peak = super::faults::peak_rss_kib(sidecar.process.id());
    eprintln!(
        "a_kubelet_answer_of_empty_containers_at_the_cap_is_read_within_128_mib: {bytes} bytes, peak RSS {peak} KiB"
    );
    assert!(
        peak < 128 * 1024,
        "peak RSS {peak} KiB over the DaemonSet's 128 MiB limit"
    );
}
