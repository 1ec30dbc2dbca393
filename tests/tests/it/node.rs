//! Node mode end to end: `truthscale serve --mode node` against a fake kubelet, a real tonic
//! server on a unix socket in a temp dir serving the vendored PodResources proto (also used by
//! `node_manifests`).

use std::sync::{Arc, Mutex};
use std::time::Duration;
use truthscale_e2e::{Sample, Sidecar, TempDir};
use truthscale_exporter::sources::kubelet::proto::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use truthscale_exporter::sources::kubelet::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};

const WAIT: Duration = Duration::from_secs(20);

/// What the fake kubelet answers, changeable while it runs; `delay` makes it slow.
#[derive(Clone, Default)]
pub(crate) struct State {
    pub(crate) answer: Arc<Mutex<ListPodResourcesResponse>>,
    pub(crate) delay: Arc<Mutex<Duration>>,
}

struct FakeKubelet(State);

#[tonic::async_trait]
impl PodResourcesLister for FakeKubelet {
    async fn list(
        &self,
        _: tonic::Request<ListPodResourcesRequest>,
    ) -> Result<tonic::Response<ListPodResourcesResponse>, tonic::Status> {
        let delay = *self.0.delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        Ok(tonic::Response::new(self.0.answer.lock().unwrap().clone()))
    }
    async fn get_allocatable_resources(
        &self,
        _: tonic::Request<AllocatableResourcesRequest>,
    ) -> Result<tonic::Response<AllocatableResourcesResponse>, tonic::Status> {
        Ok(tonic::Response::new(AllocatableResourcesResponse::default()))
    }
    async fn get(
        &self,
        _: tonic::Request<GetPodResourcesRequest>,
    ) -> Result<tonic::Response<GetPodResourcesResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in this fake"))
    }
}

/// A fake kubelet serving `state` on `socket` until dropped.
pub(crate) struct Kubelet {
    _rt: tokio::runtime::Runtime,
}

impl Kubelet {
    pub(crate) fn start(socket: &std::path::Path, state: State) -> Kubelet {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let _ = std::fs::remove_file(socket);
        let listener = {
            let _guard = rt.enter();
            tokio::net::UnixListener::bind(socket).expect("bind the kubelet socket")
        };
        rt.spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(PodResourcesListerServer::new(FakeKubelet(state)))
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
                .await;
        });
        Kubelet { _rt: rt }
    }
}

pub(crate) fn pod(
    name: &str,
    ns: &str,
    container: &str,
    resource: &str,
    ids: &[&str],
) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: vec![ContainerResources {
            name: container.into(),
            devices: vec![ContainerDevices {
                resource_name: resource.into(),
                device_ids: ids.iter().map(|s| (*s).into()).collect(),
                topology: None,
            }],
            ..Default::default()
        }],
    }
}

fn series<'a>(m: &'a [Sample], name: &str, gpu: &str) -> Vec<&'a Sample> {
    m.iter()
        .filter(|s| s.name == name && s.label("gpu") == Some(gpu))
        .collect()
}

fn value(m: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    m.iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
}

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
    let g0 = series(&m, "truthscale_gpu_info", "0");
    assert_eq!(g0.len(), 1);
    assert_eq!(g0[0].label("pod"), Some("train-0"));
    assert_eq!(g0[0].label("namespace"), Some("ml"));
    assert_eq!(g0[0].label("container"), Some("cuda"));
    assert_eq!(g0[0].label("node"), Some("gpu-node-3"));
    assert!(
        series(&m, "truthscale_gpu_roofline_saturation_ratio", "0")
            .iter()
            .all(|s| s.label("pod") == Some("train-0"))
    );
    assert_eq!(value(&m, "truthscale_gpu_pods", &[("gpu", "0")]), Some(1.0));
    // GPU 1: shared by two pods; the device's series carry no pod, the allocation lists both.
    let g1 = series(&m, "truthscale_gpu_info", "1");
    assert_eq!(g1.len(), 1);
    assert_eq!(g1[0].label("pod"), None);
    assert_eq!(value(&m, "truthscale_gpu_pods", &[("gpu", "1")]), Some(2.0));
    let mut held: Vec<(String, String)> = series(&m, "truthscale_gpu_allocation_info", "1")
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
    assert_eq!(series(&m, "truthscale_gpu_info", "2")[0].label("pod"), None);
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
    assert_eq!(series(&m, "truthscale_gpu_info", "0").len(), 1);

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

/// A kubelet that answers too slowly is a `timeout`, and GPUs still flow.
#[test]
fn a_slow_kubelet_is_a_timeout() {
    let dir = TempDir::new("node-slow");
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
            ("TRUTHSCALE_NODE__TIMEOUT", "200ms"),
        ],
        dir.path(),
    );
    let m = sidecar.wait_for(WAIT, "timeouts", |m| {
        value(
            m,
            "truthscale_source_errors_total",
            &[("source", "kubelet"), ("kind", "timeout")],
        )
        .unwrap_or(0.0)
            >= 2.0
    });
    assert_eq!(
        m.iter().filter(|s| s.name == "truthscale_gpu_info").count(),
        1
    );
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "kubelet")]),
        Some(0.0)
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
    for (pid, uid, host) in procs {
        let d = proc_root.join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("cgroup"),
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{}.scope\n",
                uid.replace('-', "_"),
                "ab".repeat(32)
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("environ"),
            format!("PATH=/bin\0HOSTNAME={host}\0HOME=/root\0"),
        )
        .unwrap();
    }
    let lib = truthscale_e2e::cargo_build(&["-p", "fake-nvml", "--lib"]).join("libfake_nvml.so");
    let scenario = truthscale_e2e::workspace().join("tests/fake-nvml/scenarios/h100-shared.json");
    let sidecar = Sidecar::start(
        &[
            "--mode",
            "node",
            "--source",
            "nvml",
            "--nvml-library",
            lib.to_str().unwrap(),
            "--interval",
            "250ms",
        ],
        &[
            ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap()),
            ("TRUTHSCALE_SOURCE__PER_PROCESS_SERIES", "true"),
            ("TRUTHSCALE_NODE__SOCKET", socket.to_str().unwrap()),
            ("TRUTHSCALE_NODE__PROC_ROOT", proc_root.to_str().unwrap()),
        ],
        dir.path(),
    );
    let m = sidecar.wait_for(WAIT, "per-pod shares", |m| {
        m.iter()
            .filter(|s| s.name == "truthscale_pod_effective_compute_ratio")
            .count()
            == 3
            && value(m, "truthscale_gpu_effective_compute_ratio", &[("gpu", "0")]).is_some()
    });
    let device = value(
        &m,
        "truthscale_gpu_effective_compute_ratio",
        &[("gpu", "0")],
    )
    .unwrap();
    assert!(device > 0.0);
    let part = |pod: Option<&str>| {
        m.iter()
            .find(|s| s.name == "truthscale_pod_effective_compute_ratio" && s.label("pod") == pod)
            .map(|s| {
                assert_eq!(s.label("method"), Some("sm_busy_share"));
                s.value
            })
            .unwrap_or_else(|| panic!("no part for {pod:?}"))
    };
    let (a, b, none) = (part(Some("chat-a")), part(Some("chat-b")), part(None));
    assert!((a / device - 0.6).abs() < 1e-9, "{a} of {device}");
    assert!((b / device - 0.3).abs() < 1e-9, "{b} of {device}");
    assert!((none / device - 0.1).abs() < 1e-9, "{none} of {device}");
    // The text exposition rounds nothing: the parts add up to the device value.
    assert!(
        ((a + b + none) - device).abs() <= 1e-15 * device.max(1.0),
        "{a}+{b}+{none} vs {device}"
    );
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
}
