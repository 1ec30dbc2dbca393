//! A fake kubelet: a real tonic server serving the PodResources API (the vendored proto) on
//! a unix socket, with answers a test changes while it runs. Node mode's and the sidecar's
//! tests use it, and so does the `fake_kubelet` example the benchmarks run.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use truthscale_exporter::attribution::kubelet::proto::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use truthscale_exporter::attribution::kubelet::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, CdiDevice, ClaimResource,
    ContainerDevices, ContainerResources, DynamicResource, GetPodResourcesRequest,
    GetPodResourcesResponse, ListPodResourcesRequest, ListPodResourcesResponse, PodResources,
};

/// What the fake kubelet answers, changeable while it runs; `delay` makes it slow. `Get`
/// answers from the same pods, as `get` says; `calls` records what was asked.
#[derive(Clone, Debug, Default)]
pub struct State {
    pub answer: Arc<Mutex<ListPodResourcesResponse>>,
    pub delay: Arc<Mutex<Duration>>,
    pub get: Arc<Mutex<GetMode>>,
    pub calls: Arc<Mutex<Calls>>,
}

/// How the fake kubelet answers `Get`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GetMode {
    /// The pod asked for, from the answer; a pod not in it as the kubelet says so.
    #[default]
    Serve,
    /// As a kubelet before 1.27, which has no `Get`.
    Unimplemented,
    /// As a later kubelet with the feature gate `KubeletPodResourcesGet` off (its own text).
    Disabled,
}

/// The calls the fake kubelet saw: how many `List`s, and each `Get`'s pod and namespace.
#[derive(Debug, Default)]
pub struct Calls {
    pub list: usize,
    pub get: Vec<(String, String)>,
}

struct FakeKubelet(State);

#[tonic::async_trait]
impl PodResourcesLister for FakeKubelet {
    async fn list(
        &self,
        _: tonic::Request<ListPodResourcesRequest>,
    ) -> Result<tonic::Response<ListPodResourcesResponse>, tonic::Status> {
        self.0.calls.lock().unwrap().list += 1;
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
        request: tonic::Request<GetPodResourcesRequest>,
    ) -> Result<tonic::Response<GetPodResourcesResponse>, tonic::Status> {
        let r = request.into_inner();
        self.0
            .calls
            .lock()
            .unwrap()
            .get
            .push((r.pod_name.clone(), r.pod_namespace.clone()));
        let delay = *self.0.delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        let mode = *self.0.get.lock().unwrap();
        match mode {
            GetMode::Unimplemented => Err(tonic::Status::unimplemented(
                "unknown method Get for service v1.PodResourcesLister",
            )),
            // The kubelet's own errors are plain Go errors: gRPC code Unknown.
            GetMode::Disabled => Err(tonic::Status::unknown(
                "PodResources API Get method disabled",
            )),
            GetMode::Serve => self
                .0
                .answer
                .lock()
                .unwrap()
                .pod_resources
                .iter()
                .find(|p| p.name == r.pod_name && p.namespace == r.pod_namespace)
                .map(|p| {
                    tonic::Response::new(GetPodResourcesResponse {
                        pod_resources: Some(p.clone()),
                    })
                })
                .ok_or_else(|| {
                    tonic::Status::unknown(format!(
                        "pod {} in namespace {} not found",
                        r.pod_name, r.pod_namespace
                    ))
                }),
        }
    }
}

/// A fake kubelet serving `state` on `socket` until dropped.
#[derive(Debug)]
pub struct Kubelet {
    _rt: tokio::runtime::Runtime,
}

impl Kubelet {
    /// Serve `state` on `socket` (replacing a stale socket file).
    ///
    /// # Panics
    /// The runtime cannot start, or the socket cannot be bound.
    #[must_use]
    pub fn start(socket: &std::path::Path, state: State) -> Kubelet {
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

/// One pod with one container holding `ids` of `resource`.
#[must_use]
pub fn pod(name: &str, ns: &str, container: &str, resource: &str, ids: &[&str]) -> PodResources {
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

/// One pod with one container holding `device` through a DRA resource claim of NVIDIA's
/// driver (`gpu.nvidia.com`), as the kubelet lists it: the device's name (`gpu-<minor>` for
/// a whole GPU) and its CDI device.
#[must_use]
pub fn dra_pod(name: &str, ns: &str, container: &str, device: &str) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: vec![ContainerResources {
            name: container.into(),
            dynamic_resources: vec![DynamicResource {
                claim_name: format!("{name}-gpu"),
                claim_namespace: ns.into(),
                claim_resources: vec![ClaimResource {
                    cdi_devices: vec![CdiDevice {
                        name: format!("k8s.gpu.nvidia.com/device={device}"),
                    }],
                    driver_name: "gpu.nvidia.com".into(),
                    pool_name: "gpu-node-1".into(),
                    device_name: device.into(),
                }],
            }],
            ..Default::default()
        }],
    }
}
