//! Sidecar mode with `sidecar.pod_resources`: `truthscale serve --source nvml` on a fake NVML
//! library with two GPUs, beside pod `web/chat-a`, asks the fake kubelet of `node` (a real
//! tonic server on a unix socket) which of them its pod holds, with `Get` for that pod only.
//! Only those GPUs carry the pod's labels; a kubelet without `Get`, or no socket at all,
//! leaves every GPU with the sidecar's own identity, as without the setting.

use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use truthscale_e2e::kubelet::{GetMode, Kubelet, State, pod};
use truthscale_e2e::value;
use truthscale_e2e::{Sample, Sidecar, StandIn, TempDir, clean_command, fixture, ok, workspace};
use truthscale_exporter::attribution::kubelet::proto::ListPodResourcesResponse;

const WAIT: Duration = Duration::from_secs(20);

/// The two GPUs' UUIDs.
const UUIDS: [&str; 2] = [
    "GPU-5f0c6a3e-8d3b-4c1e-9a7f-0000000000c0",
    "GPU-5f0c6a3e-8d3b-4c1e-9a7f-0000000000c1",
];

/// The sidecar's pod, as the Downward API gives it.
const IDENTITY: [(&str, &str); 4] = [
    ("POD_NAME", "chat-a"),
    ("POD_NAMESPACE", "web"),
    ("CONTAINER_NAME", "vllm"),
    ("NODE_NAME", "gpu-node-3"),
];

/// A fake NVML scenario with two H100s (the decode scenario's device, twice), both visible
/// to the sidecar's container.
fn two_gpus(dir: &Path) -> PathBuf {
    let text =
        std::fs::read_to_string(workspace().join("tests/fake-nvml/scenarios/h100-decode.json"))
            .expect("the decode scenario");
    let template: Json = serde_json::from_str(&text).expect("scenario JSON");
    let devices: Vec<Json> = UUIDS
        .iter()
        .enumerate()
        .map(|(i, uuid)| {
            let mut d = template["devices"][0].clone();
            d["uuid"] = Json::from(*uuid);
            d["pci_bus_id"] = Json::from(format!("00000000:1{}:00.0", ["A", "B"][i]));
            if i == 1 {
                d["processes"] = Json::Array(Vec::new());
            }
            d
        })
        .collect();
    let scenario = dir.join("two-gpus.json");
    std::fs::write(
        &scenario,
        serde_json::json!({
            "_comment": "Two H100s a sidecar's container sees; the kubelet gives its pod one.",
            "devices": devices,
        })
        .to_string(),
    )
    .expect("write the scenario");
    scenario
}

/// The sidecar with `sidecar.pod_resources` on, reading `socket`.
fn start(dir: &Path, socket: &Path) -> Sidecar {
    let lib = truthscale_e2e::fake_nvml();
    let scenario = two_gpus(dir);
    let mut env = vec![
        ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap()),
        ("TRUTHSCALE_SIDECAR__POD_RESOURCES", "true"),
        ("TRUTHSCALE_SIDECAR__SOCKET", socket.to_str().unwrap()),
    ];
    env.extend(IDENTITY);
    Sidecar::start(
        &[
            &truthscale_e2e::nvml_args(lib, "250ms")[..],
            &["--stale-after", "1s"],
        ]
        .concat(),
        &env,
        dir,
    )
}

/// Pod `web/chat-a` holds GPU 0; pod `ml/batch-x` (which `List` would name) holds GPU 1.
fn allocations() -> ListPodResourcesResponse {
    ListPodResourcesResponse {
        pod_resources: vec![
            pod("chat-a", "web", "vllm", "nvidia.com/gpu", &[UUIDS[0]]),
            pod("batch-x", "ml", "cuda", "nvidia.com/gpu", &[UUIDS[1]]),
        ],
    }
}

/// Every series of GPU `gpu`.
fn of_gpu<'a>(m: &'a [Sample], gpu: &str) -> Vec<&'a Sample> {
    m.iter().filter(|s| s.label("gpu") == Some(gpu)).collect()
}

/// The `pod` label of each GPU's `truthscale_gpu_info` (one per GPU, or the test fails).
fn pods(m: &[Sample]) -> [Option<String>; 2] {
    ["0", "1"].map(|g| {
        let info: Vec<_> = of_gpu(m, g)
            .into_iter()
            .filter(|s| s.name == "truthscale_gpu_info")
            .collect();
        assert_eq!(info.len(), 1, "GPU {g}: {info:?}");
        info[0].label("pod").map(str::to_string)
    })
}

fn kubelet_errors(m: &[Sample], kind: &str) -> f64 {
    value(
        m,
        "truthscale_source_errors_total",
        &[("source", "kubelet"), ("kind", kind)],
    )
    .unwrap_or(0.0)
}

fn kubelet_up(m: &[Sample]) -> Option<f64> {
    value(m, "truthscale_source_up", &[("source", "kubelet")])
}

fn gpu_info_count(m: &[Sample], gpu: &str) -> usize {
    of_gpu(m, gpu)
        .iter()
        .filter(|s| s.name == "truthscale_gpu_info")
        .count()
}

/// Whether GPU `gpu` is labelled with the sidecar's own pod: pod, namespace and container.
fn own_labels(m: &[Sample], gpu: &str) -> bool {
    let series = of_gpu(m, gpu);
    gpu_info_count(m, gpu) == 1
        && series.iter().all(|s| {
            s.label("pod") == Some("chat-a")
                && s.label("namespace") == Some("web")
                && s.label("container") == Some("vllm")
        })
}

/// Whether GPU `gpu` carries no pod labels at all.
fn no_pod_labels(m: &[Sample], gpu: &str) -> bool {
    gpu_info_count(m, gpu) == 1
        && of_gpu(m, gpu).iter().all(|s| {
            s.label("pod").is_none()
                && s.label("namespace").is_none()
                && s.label("container").is_none()
        })
}

/// The kubelet gives the sidecar's pod GPU 0 only: GPU 0 carries the pod's labels on every
/// series, GPU 1 none (not `ml/batch-x`'s either: only this pod was asked for), and the
/// kubelet was asked `Get` for `web/chat-a`, never `List`. When the pod is given GPU 1 as
/// well, GPU 1 takes its labels, and each GPU stays one entity.
#[test]
fn a_sidecar_labels_only_the_gpus_its_pod_holds() {
    let dir = TempDir::new("sidecar-get");
    let socket = dir.path().join("kubelet.sock");
    let state = State::default();
    *state.answer.lock().unwrap() = allocations();
    let _kubelet = Kubelet::start(&socket, state.clone());
    let sidecar = start(dir.path(), &socket);
    let m = sidecar.wait_for(WAIT, "the pod's GPU only", |m| {
        kubelet_up(m) == Some(1.0) && own_labels(m, "0") && no_pod_labels(m, "1")
    });
    assert_eq!(pods(&m), [Some("chat-a".to_string()), None]);
    // GPU 0's every series: the pod's labels, the node's.
    let g0 = of_gpu(&m, "0");
    assert!(g0.len() > 5, "{g0:?}");
    assert!(g0.iter().all(|s| s.label("node") == Some("gpu-node-3")));
    assert!(
        value(
            &m,
            "truthscale_gpu_effective_compute_ratio",
            &[("gpu", "0")]
        )
        .is_some(),
        "{m:?}"
    );
    // GPU 1 still flows, with its node but no pod.
    let g1 = of_gpu(&m, "1");
    assert!(g1.len() > 5, "{g1:?}");
    assert!(g1.iter().all(|s| s.label("node") == Some("gpu-node-3")));
    assert!(
        value(
            &m,
            "truthscale_gpu_effective_compute_ratio",
            &[("gpu", "1")]
        )
        .is_some()
    );
    // Nothing from List, nor node mode's allocation series (one pod's answer cannot say them).
    assert!(!m.iter().any(|s| s.label("pod") == Some("batch-x")));
    assert!(
        !m.iter()
            .any(|s| s.name == "truthscale_gpu_pods" || s.name == "truthscale_gpu_allocation_info")
    );
    assert_eq!(kubelet_errors(&m, "unsupported"), 0.0);
    {
        let calls = state.calls.lock().unwrap();
        assert_eq!(calls.list, 0, "List was called");
        assert!(!calls.get.is_empty());
        assert!(
            calls
                .get
                .iter()
                .all(|c| c == &("chat-a".into(), "web".into())),
            "{:?}",
            calls.get
        );
    }

    // The pod is given the second GPU too.
    state.answer.lock().unwrap().pod_resources = vec![pod(
        "chat-a",
        "web",
        "vllm",
        "nvidia.com/gpu",
        &[UUIDS[0], UUIDS[1]],
    )];
    let m = sidecar.wait_for(WAIT, "both GPUs the pod's", |m| {
        own_labels(m, "0") && own_labels(m, "1")
    });
    assert_eq!(
        pods(&m),
        [Some("chat-a".to_string()), Some("chat-a".to_string())]
    );
    assert_eq!(state.calls.lock().unwrap().list, 0);
    let stderr = sidecar.process.stderr();
    assert!(
        stderr.contains("Asking the kubelet (PodResources Get)"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A kubelet without `Get` (before 1.27), then one that serves it, then one with the
/// feature gate off: each refusal is logged once with what it means and counted as
/// `unsupported`. Before any answer both GPUs flow labelled with the sidecar's pod; after
/// one, its answer stands.
#[test]
fn a_kubelet_without_get_leaves_the_gpus_with_the_sidecars_pod() {
    let dir = TempDir::new("sidecar-no-get");
    let socket = dir.path().join("kubelet.sock");
    let state = State::default();
    *state.answer.lock().unwrap() = allocations();
    *state.get.lock().unwrap() = GetMode::Unimplemented;
    let _kubelet = Kubelet::start(&socket, state.clone());
    let sidecar = start(dir.path(), &socket);
    let m = sidecar.wait_for(WAIT, "unsupported counted", |m| {
        kubelet_errors(m, "unsupported") >= 4.0
    });
    assert!(own_labels(&m, "0") && own_labels(&m, "1"), "{m:?}");
    assert_eq!(kubelet_up(&m), Some(0.0));
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "nvml")]),
        Some(1.0)
    );
    let told = |stderr: &str| {
        stderr
            .lines()
            .filter(|l| l.contains("The kubelet does not serve Get"))
            .count()
    };
    let stderr = sidecar.process.stderr();
    assert_eq!(told(&stderr), 1, "{stderr}");
    assert!(stderr.contains("before 1.27"), "{stderr}");
    assert!(
        stderr.contains("GPUs stay labelled with this pod"),
        "{stderr}"
    );

    // The kubelet serves Get: the attribution comes.
    *state.get.lock().unwrap() = GetMode::Serve;
    sidecar.wait_for(WAIT, "the pod's GPU only", |m| {
        kubelet_up(m) == Some(1.0) && own_labels(m, "0") && no_pod_labels(m, "1")
    });

    // The feature gate off: told again (once); the last answer stands (a pod's devices do
    // not change while it lives), so GPU 1, known not to be the pod's, is never claimed
    // for it, stale period or not.
    *state.get.lock().unwrap() = GetMode::Disabled;
    let m = sidecar.wait_for(WAIT, "the last answer standing", |m| {
        kubelet_up(m) == Some(0.0) && own_labels(m, "0") && no_pod_labels(m, "1")
    });
    let before = kubelet_errors(&m, "unsupported");
    sidecar.wait_for(WAIT, "more unsupported", |m| {
        kubelet_errors(m, "unsupported") >= before + 2.0
    });
    let stderr = sidecar.process.stderr();
    assert_eq!(told(&stderr), 2, "{stderr}");
    assert!(
        stderr.contains("the feature gate KubeletPodResourcesGet is off"),
        "{stderr}"
    );
    assert_eq!(state.calls.lock().unwrap().list, 0);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A source whose answer does not change between ticks (dcgm-exporter collects every 30 s by
/// default, and is read every interval) reports its GPU as unchanged, under the key it names
/// it by: the GPU the kubelet gives the pod stays up, with the pod's labels, over several
/// stale periods.
#[test]
fn an_unchanging_source_keeps_the_pods_gpu_up() {
    let dir = TempDir::new("sidecar-get-unchanged");
    let socket = dir.path().join("kubelet.sock");
    let state = State::default();
    *state.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![pod("chat-a", "web", "vllm", "nvidia.com/gpu", &["0"])],
    };
    let _kubelet = Kubelet::start(&socket, state);
    let body = std::fs::read_to_string(fixture(
        "dcgm-exporter-cncf-k8s-ai-conformance-upcloud-l40s.txt",
    ))
    .expect("the L40S capture");
    let dcgm = StandIn::start(ok(&body));
    let source = format!("dcgm-exporter:{}", dcgm.url());
    let mut env = vec![
        ("TRUTHSCALE_SIDECAR__POD_RESOURCES", "true"),
        ("TRUTHSCALE_SIDECAR__SOCKET", socket.to_str().unwrap()),
    ];
    env.extend(IDENTITY);
    let sidecar = Sidecar::start(
        &[
            "--source",
            &source,
            "--interval",
            "250ms",
            "--stale-after",
            "1s",
        ],
        &env,
        dir.path(),
    );
    sidecar.wait_for(WAIT, "the pod's GPU", |m| {
        kubelet_up(m) == Some(1.0) && own_labels(m, "0")
    });
    let hits = dcgm.hits.load(Ordering::SeqCst);
    sidecar.wait_for(WAIT, "unchanged answers over two stale periods", |_| {
        dcgm.hits.load(Ordering::SeqCst) >= hits + 8
    });
    let m = sidecar.metrics();
    assert_eq!(
        value(&m, "truthscale_gpu_up", &[("gpu", "0")]),
        Some(1.0),
        "{m:?}"
    );
    assert!(own_labels(&m, "0"), "{m:?}");
}

/// The serving engine beside the sidecar is its pod's: its figures (`engine="vllm"`) go to
/// the GPU the kubelet gives the pod, and none to the other GPU the container sees.
#[test]
fn the_engine_goes_only_to_the_pods_gpu() {
    let dir = TempDir::new("sidecar-get-engine");
    let socket = dir.path().join("kubelet.sock");
    let state = State::default();
    *state.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![pod("chat-a", "web", "vllm", "nvidia.com/gpu", &["0"])],
    };
    let _kubelet = Kubelet::start(&socket, state);
    let body = std::fs::read_to_string(workspace().join("tests/fixtures/engines/vllm-v1-a.prom"))
        .expect("the vLLM fixture");
    let engine = StandIn::start(ok(&body));
    let url = engine.url();
    let mut env = vec![
        ("TRUTHSCALE_SIDECAR__POD_RESOURCES", "true"),
        ("TRUTHSCALE_SIDECAR__SOCKET", socket.to_str().unwrap()),
        ("TRUTHSCALE_ENGINE__ENABLED", "true"),
        ("TRUTHSCALE_ENGINE__URL", &url),
        ("TRUTHSCALE_ENGINE__MODEL_PARAMS", "8000000000"),
        ("TRUTHSCALE_ENGINE__MODEL_DTYPE", "bf16"),
    ];
    env.extend(IDENTITY);
    let sidecar = Sidecar::start(
        &[
            "--source",
            "sim:decode-only",
            "--sim-gpus",
            "2",
            "--interval",
            "250ms",
        ],
        &env,
        dir.path(),
    );
    let m = sidecar.wait_for(WAIT, "the engine on the pod's GPU", |m| {
        value(
            m,
            "truthscale_serving_engine_up",
            &[("gpu", "0"), ("engine", "vllm")],
        ) == Some(1.0)
            && no_pod_labels(m, "1")
    });
    assert!(own_labels(&m, "0"), "{m:?}");
    // The simulated GPUs carry their simulator's own serving series (engine="sim").
    let serving_on = |gpu: &str| {
        m.iter()
            .filter(|s| s.label("engine") == Some("vllm") && s.label("gpu") == Some(gpu))
            .count()
    };
    assert!(serving_on("0") > 0);
    assert_eq!(serving_on("1"), 0, "{m:?}");
}

/// No socket (the folder not mounted): `unreachable` counted, the kubelet down, a clear
/// message, and both GPUs flow labelled with the sidecar's pod; `/readyz` does not depend
/// on the kubelet.
#[test]
fn a_missing_socket_is_counted_and_the_gpus_keep_flowing() {
    let dir = TempDir::new("sidecar-no-socket");
    let socket = dir.path().join("missing/kubelet.sock");
    let sidecar = start(dir.path(), &socket);
    let m = sidecar.wait_for(WAIT, "unreachable counted", |m| {
        kubelet_errors(m, "unreachable") >= 2.0
    });
    assert_eq!(kubelet_up(&m), Some(0.0));
    assert!(own_labels(&m, "0") && own_labels(&m, "1"), "{m:?}");
    assert_eq!(sidecar.get("/readyz", &[]).status, 200);
    let stderr = sidecar.process.stderr();
    assert!(
        stderr.contains("Cannot read this pod's resources from the kubelet")
            && stderr.contains("is the pod-resources folder mounted"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `sidecar.pod_resources` without the pod's namespace: the start is refused, naming the
/// key and the variable.
#[test]
fn pod_resources_without_the_pods_namespace_are_refused_at_start() {
    let out = clean_command()
        .args(["serve", "--source", "sim", "--listen", "127.0.0.1:0"])
        .env("TRUTHSCALE_SIDECAR__POD_RESOURCES", "true")
        .env("POD_NAME", "chat-a")
        .output()
        .expect("run truthscale serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("sidecar.pod_resources") && stderr.contains("POD_NAMESPACE"),
        "{stderr}"
    );
}
