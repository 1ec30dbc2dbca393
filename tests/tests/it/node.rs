//! Node mode end to end: `truthscale serve --mode node` against a fake kubelet, a real tonic
//! server on a unix socket in a temp dir serving the vendored PodResources proto.

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
struct State {
    answer: Arc<Mutex<ListPodResourcesResponse>>,
    delay: Arc<Mutex<Duration>>,
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
struct Kubelet {
    _rt: tokio::runtime::Runtime,
}

impl Kubelet {
    fn start(socket: &std::path::Path, state: State) -> Kubelet {
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

fn pod(name: &str, ns: &str, container: &str, resource: &str, ids: &[&str]) -> PodResources {
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
    assert!(!m.iter().any(|s| s.label("pod") == Some("truthscale-agent-x1")));
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
    assert_eq!(m.iter().filter(|s| s.name == "truthscale_gpu_info").count(), 3);
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
        &["--mode", "node", "--source", "sim", "--sim-gpus", "1", "--interval", "500ms"],
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
    assert_eq!(m.iter().filter(|s| s.name == "truthscale_gpu_info").count(), 1);
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "kubelet")]),
        Some(0.0)
    );
}
