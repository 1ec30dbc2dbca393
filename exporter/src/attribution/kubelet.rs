//! Node mode: the kubelet's PodResources API (v1) over its unix socket says which containers
//! were given which GPUs, and each GPU entity is attributed from it.
//!
//! - **Devices.** Device-plugin ids are GPU UUIDs (`GPU-…`), MIG UUIDs (`MIG-…`) or indices
//!   (`0`), possibly with the `::N` replica suffix the NVIDIA device plugin adds for
//!   time-sliced GPUs. DRA claims (`dynamic_resources`) name a device (`gpu-0`) and CDI
//!   devices; a UUID in either is used, else the index in `gpu-N`.
//! - **Attribution.** A GPU held by one container, without a replica suffix, is that
//!   container's: its series carry the pod, namespace and container. A GPU held by several
//!   (time-sliced, shared) carries no pod labels, because its counters are the device's; the
//!   holders are listed in `truthscale_gpu_allocation_info`, and per-pod estimates come from
//!   per-process attribution. A GPU held by none has `truthscale_gpu_pods 0`: idle capacity.
//! - **Failures.** A socket that is missing, refuses or is slow is an error of the `kubelet`
//!   source (counted by kind); the last answer is used for up to the stale period, then GPU
//!   series flow without pod labels and without allocation (not known is not "none").
//! - **Sidecar mode** (`sidecar.pod_resources`). The sidecar asks `Get` for its own pod only,
//!   and labels with its pod only the GPUs that pod holds ([`Allocations::attribute_own`]);
//!   the others it sees are exported without pod labels. Until the kubelet has answered (or
//!   when it does not serve `Get`), every GPU keeps the sidecar's own identity, as without it.

use super::allocations::Allocations;
use super::config::KubeletSettings;
use crate::sources::SourceError;
use std::path::Path;
use std::time::{Duration, Instant};

/// The code generated from `proto/kubelet/podresources/v1/api.proto`.
#[allow(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::pedantic
)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/v1.rs"));
}

/// What the client asks the kubelet for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Request {
    /// `List()`: every pod of the node (node mode).
    List,
    /// `Get(pod, namespace)`: one pod (the sidecar's own).
    Get {
        /// The pod's name.
        pod: String,
        /// Its namespace.
        namespace: String,
    },
}

/// A PodResources client on the kubelet's socket, with its own small runtime (the sampler
/// thread is synchronous).
pub struct Kubelet {
    settings: KubeletSettings,
    request: Request,
    runtime: Option<tokio::runtime::Runtime>,
    client: Option<
        proto::pod_resources_lister_client::PodResourcesListerClient<tonic::transport::Channel>,
    >,
    last: Option<(Allocations, Instant)>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet")
            .field("socket", &self.settings.socket)
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

impl Kubelet {
    /// A client of the socket in `settings` (connected on first use) that reads every pod's
    /// allocations with `List` (node mode).
    #[must_use]
    pub fn new(settings: KubeletSettings) -> Kubelet {
        Kubelet::with_request(settings, Request::List)
    }

    /// A client that reads one pod's allocations with `Get` (the sidecar's own pod).
    #[must_use]
    pub fn for_pod(settings: KubeletSettings, pod: &str, namespace: &str) -> Kubelet {
        Kubelet::with_request(
            settings,
            Request::Get {
                pod: pod.to_string(),
                namespace: namespace.to_string(),
            },
        )
    }

    fn with_request(settings: KubeletSettings, request: Request) -> Kubelet {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok();
        Kubelet {
            settings,
            request,
            runtime,
            client: None,
            last: None,
        }
    }

    /// `List()`: the allocations now.
    ///
    /// # Errors
    /// The socket is missing or refuses (`unreachable`), does not answer in time
    /// (`timeout`), or answers with an error status (`http`).
    pub fn list(&mut self) -> Result<Allocations, SourceError> {
        self.call(&Request::List)
    }

    /// `Get(pod, namespace)`: the allocations of that one pod now.
    ///
    /// # Errors
    /// As [`Kubelet::list`], and `unsupported` when the kubelet does not serve `Get`
    /// (Kubernetes before 1.27, or the feature gate `KubeletPodResourcesGet` off); a pod
    /// the kubelet does not know is `http`.
    pub fn get(&mut self, pod: &str, namespace: &str) -> Result<Allocations, SourceError> {
        self.call(&Request::Get {
            pod: pod.to_string(),
            namespace: namespace.to_string(),
        })
    }

    fn call(&mut self, request: &Request) -> Result<Allocations, SourceError> {
        let socket = self.settings.socket.clone();
        let timeout = self.settings.timeout;
        let Some(rt) = &self.runtime else {
            return Err(SourceError::Io(
                "cannot start the kubelet client's runtime".into(),
            ));
        };
        let client = &mut self.client;
        let answer = rt.block_on(async {
            if client.is_none() {
                let path = socket.clone();
                // The URI is not used: the connector dials the unix socket. The call's one
                // deadline is the `tokio::time::timeout` around it below (a second, tonic's
                // own, would race it and end the call as `Cancelled`, not as a timeout).
                let endpoint = tonic::transport::Endpoint::from_static("http://kubelet.local")
                    .connect_timeout(timeout);
                let channel = tokio::time::timeout(
                    timeout,
                    endpoint.connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                        let path = path.clone();
                        async move {
                            tokio::net::UnixStream::connect(path)
                                .await
                                .map(hyper_util::rt::TokioIo::new)
                        }
                    })),
                )
                .await
                .map_err(|_| {
                    SourceError::Timeout(format!(
                        "kubelet {}: no connection within {} ms",
                        socket.display(),
                        timeout.as_millis()
                    ))
                })?
                .map_err(|e| {
                    SourceError::Unreachable(format!(
                        "kubelet {}: {e}{}; is the pod-resources folder mounted (hostPath /var/lib/kubelet/pod-resources)?",
                        socket.display(),
                        source_text(&e)
                    ))
                })?;
                *client = Some(proto::pod_resources_lister_client::PodResourcesListerClient::new(channel));
            }
            let Some(c) = client.as_mut() else {
                return Err(SourceError::Io("no kubelet client".into()));
            };
            let (method, answer) = match request {
                Request::List => (
                    "List",
                    tokio::time::timeout(timeout, c.list(proto::ListPodResourcesRequest {}))
                        .await
                        .map(|r| r.map(tonic::Response::into_inner)),
                ),
                // One pod's answer, as a list of one: the same matching as `List`'s.
                Request::Get { pod, namespace } => (
                    "Get",
                    tokio::time::timeout(
                        timeout,
                        c.get(proto::GetPodResourcesRequest {
                            pod_name: pod.clone(),
                            pod_namespace: namespace.clone(),
                        }),
                    )
                    .await
                    .map(|r| {
                        r.map(|r| proto::ListPodResourcesResponse {
                            pod_resources: r.into_inner().pod_resources.into_iter().collect(),
                        })
                    }),
                ),
            };
            match answer {
                Err(_) => Err(SourceError::Timeout(format!(
                    "kubelet {}: {method} did not answer within {} ms",
                    socket.display(),
                    timeout.as_millis()
                ))),
                Ok(Err(status)) => Err(status_error(&socket, request, &status)),
                Ok(Ok(r)) => Ok(r),
            }
        });
        match answer {
            Ok(r) => {
                let a = Allocations::from_response(&r, &self.settings.resource_names);
                self.last = Some((a.clone(), Instant::now()));
                Ok(a)
            }
            Err(e) => {
                // Reconnect next time.
                self.client = None;
                Err(e)
            }
        }
    }

    /// The allocations to attribute with: this tick's answer (to `List`, or to `Get` for
    /// [`Kubelet::for_pod`]), else the last one while it is younger than `stale_after` (one
    /// slow answer does not flap every series' labels); `None` when neither, which is also
    /// when the kubelet counts as down.
    pub fn current(&mut self, stale_after: Duration) -> (Option<Allocations>, Option<SourceError>) {
        let now = match self.request.clone() {
            Request::List => self.list(),
            Request::Get { pod, namespace } => self.get(&pod, &namespace),
        };
        match now {
            Ok(a) => (Some(a), None),
            Err(e) => {
                let last = self
                    .last
                    .as_ref()
                    .filter(|(_, at)| at.elapsed() <= stale_after)
                    .map(|(a, _)| a.clone());
                (last, Some(e))
            }
        }
    }
}

/// The error of a status the kubelet answered `request` with.
fn status_error(socket: &Path, request: &Request, status: &tonic::Status) -> SourceError {
    let socket = socket.display();
    let message = status.message();
    let method = match request {
        Request::List => "List",
        Request::Get { .. } => "Get",
    };
    match (status.code(), request) {
        (tonic::Code::DeadlineExceeded, _) => {
            SourceError::Timeout(format!("kubelet {socket}: {message}"))
        }
        (tonic::Code::Unavailable, _) => {
            SourceError::Unreachable(format!("kubelet {socket}: {message}"))
        }
        // A connection that broke under the call (the kubelet went away) is no answer.
        (tonic::Code::Unknown, _) if message == "transport error" => {
            SourceError::Unreachable(format!("kubelet {socket}: {method}: {message}"))
        }
        // A kubelet before 1.27 has no `Get`; a later one with the feature gate off answers
        // with this error text (code Unknown).
        (tonic::Code::Unimplemented, Request::Get { .. }) => SourceError::Unsupported(format!(
            "kubelet {socket} does not serve Get (Kubernetes before 1.27): {message}"
        )),
        (tonic::Code::Unknown, Request::Get { .. }) if message.contains("Get method disabled") => {
            SourceError::Unsupported(format!(
                "kubelet {socket} does not serve Get (the feature gate KubeletPodResourcesGet is off, its default before Kubernetes 1.34): {message}"
            ))
        }
        (tonic::Code::Unknown, Request::Get { pod, namespace })
            if message.contains("not found") =>
        {
            SourceError::Http(format!(
                "kubelet {socket}: Get answered: {message}; is {namespace}/{pod} this pod (POD_NAME and POD_NAMESPACE from the Downward API, or identity.pod and identity.namespace)?"
            ))
        }
        (code, _) => SourceError::Http(format!(
            "kubelet {socket}: {method} answered {code:?}: {message}"
        )),
    }
}

/// The innermost cause of a transport error, which says what the socket did (`No such file
/// or directory`, `Connection refused`).
fn source_text(e: &dyn std::error::Error) -> String {
    let mut cause = e.source();
    let mut last = None;
    while let Some(c) = cause {
        last = Some(c.to_string());
        cause = c.source();
    }
    last.map(|c| format!(" ({c})")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::allocations::*;
    use crate::attribution::config::*;
    use crate::sources::Produced;
    use proto::*;
    use std::path::PathBuf;
    use truthscale_core::model::{EntityId, MigId};
    use truthscale_core::model::{EntitySample, PodRef};

    #[test]
    fn device_ids() {
        let u = |s: &str| DeviceRef::Uuid(s.into());
        assert_eq!(
            parse_device_id("GPU-8a1b2c3d-0000-1111-2222-333344445555"),
            Some((u("GPU-8a1b2c3d-0000-1111-2222-333344445555"), None))
        );
        assert_eq!(
            parse_device_id("GPU-abc::2"),
            Some((u("GPU-abc"), Some("2".into())))
        );
        assert_eq!(parse_device_id("MIG-xyz"), Some((u("MIG-xyz"), None)));
        assert_eq!(parse_device_id("3"), Some((DeviceRef::Index(3), None)));
        assert_eq!(
            parse_device_id("1::0"),
            Some((DeviceRef::Index(1), Some("0".into())))
        );
        assert_eq!(parse_device_id("nvidia0"), None);
    }

    fn container(name: &str, resource: &str, ids: &[&str]) -> ContainerResources {
        ContainerResources {
            name: name.into(),
            devices: vec![ContainerDevices {
                resource_name: resource.into(),
                device_ids: ids.iter().map(|s| (*s).into()).collect(),
                topology: None,
            }],
            ..Default::default()
        }
    }

    fn entity(gpu: u32, uuid: &str, mig: Option<&str>) -> EntitySample {
        EntitySample {
            id: EntityId {
                gpu: Some(gpu),
                uuid: Some(uuid.into()),
                mig: mig.map(|m| MigId {
                    gpu_instance: 1,
                    compute_instance: None,
                    profile: None,
                    uuid: Some(m.into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn exclusive_shared_mig_dra_and_idle() {
        let r = ListPodResourcesResponse {
            pod_resources: vec![
                PodResources {
                    name: "train".into(),
                    namespace: "ml".into(),
                    containers: vec![container("cuda", "nvidia.com/gpu", &["GPU-a"])],
                },
                PodResources {
                    name: "chat-1".into(),
                    namespace: "web".into(),
                    containers: vec![container("vllm", "nvidia.com/gpu.shared", &["GPU-b::0"])],
                },
                PodResources {
                    name: "chat-2".into(),
                    namespace: "web".into(),
                    containers: vec![
                        container("vllm", "nvidia.com/gpu.shared", &["GPU-b::1"]),
                        // Not a GPU resource: ignored.
                        container("side", "example.com/fpga", &["GPU-c"]),
                    ],
                },
                PodResources {
                    name: "slice".into(),
                    namespace: "ml".into(),
                    containers: vec![container("c", "nvidia.com/mig-1g.10gb", &["MIG-m1"])],
                },
                PodResources {
                    name: "claimed".into(),
                    namespace: "dra".into(),
                    containers: vec![ContainerResources {
                        name: "c".into(),
                        dynamic_resources: vec![DynamicResource {
                            claim_name: "gpu-claim".into(),
                            claim_namespace: "dra".into(),
                            claim_resources: vec![ClaimResource {
                                cdi_devices: vec![CdiDevice {
                                    name: "k8s.gpu.nvidia.com/device=gpu-4".into(),
                                }],
                                driver_name: "gpu.nvidia.com".into(),
                                pool_name: "node-1".into(),
                                device_name: "gpu-4".into(),
                            }],
                        }],
                        ..Default::default()
                    }],
                },
            ],
        };
        let a = Allocations::from_response(&r, &NodeConfig::default().resource_names);
        let mut produced = Produced {
            samples: vec![truthscale_core::model::Sample {
                taken: truthscale_core::model::Timestamp(0),
                entities: vec![
                    entity(0, "GPU-a", None),
                    entity(1, "GPU-b", None),
                    entity(2, "GPU-c", None),
                    entity(3, "GPU-d", Some("MIG-m1")),
                    entity(4, "GPU-e", None),
                ],
            }],
            ..Produced::default()
        };
        a.attribute(&mut produced, Path::new("/nonexistent"));
        let e = &produced.samples[0].entities;
        // Exclusive: the pod's labels.
        assert_eq!(e[0].id.pod.as_ref().map(|p| p.pod.as_str()), Some("train"));
        assert_eq!(e[0].allocation.as_ref().map(Vec::len), Some(1));
        // Time-sliced between two pods: no pod labels, both holders listed.
        assert_eq!(e[1].id.pod, None);
        let held: Vec<_> = e[1]
            .allocation
            .iter()
            .flatten()
            .map(|h| (h.pod.pod.as_str(), h.replica.as_deref()))
            .collect();
        assert_eq!(held, [("chat-1", Some("0")), ("chat-2", Some("1"))]);
        // Held by nobody (the FPGA resource is not a GPU): idle capacity.
        assert_eq!(e[2].id.pod, None);
        assert_eq!(e[2].allocation, Some(Vec::new()));
        // A MIG instance by its own UUID.
        assert_eq!(e[3].id.pod.as_ref().map(|p| p.pod.as_str()), Some("slice"));
        // A DRA claim by its device's index.
        assert_eq!(
            e[4].id.pod.as_ref().map(|p| p.pod.as_str()),
            Some("claimed")
        );
        assert_eq!(
            e[4].allocation.as_ref().unwrap()[0].resource,
            "dra:gpu.nvidia.com"
        );
    }

    /// Sidecar mode: only the GPUs this pod's answer names take its labels (a time-sliced
    /// replica none), and no allocation is claimed.
    #[test]
    fn own_pod_attribution() {
        let r = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "chat-a".into(),
                namespace: "web".into(),
                containers: vec![
                    container("vllm", "nvidia.com/gpu", &["GPU-a"]),
                    container("side", "nvidia.com/gpu.shared", &["GPU-c::3"]),
                    container("tools", "example.com/fpga", &["GPU-d"]),
                ],
            }],
        };
        let a = Allocations::from_response(&r, &SidecarConfig::default().resource_names);
        let own = PodRef {
            pod: "chat-a".into(),
            namespace: Some("web".into()),
            container: Some("vllm".into()),
        };
        let mut produced = Produced {
            samples: vec![truthscale_core::model::Sample {
                taken: truthscale_core::model::Timestamp(0),
                entities: ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]
                    .iter()
                    .zip(0..)
                    .map(|(u, i)| {
                        let mut e = entity(i, u, None);
                        // What the source (or the fallback) said: replaced by the answer.
                        e.id.pod = Some(own.clone());
                        e
                    })
                    .collect(),
            }],
            ..Produced::default()
        };
        a.attribute_own(&mut produced);
        let e = &produced.samples[0].entities;
        assert_eq!(e[0].id.pod.as_ref(), Some(&own));
        // Not this pod's: no pod labels.
        assert_eq!(e[1].id.pod, None);
        // Time-sliced: the device's counters, not the pod's alone.
        assert_eq!(e[2].id.pod, None);
        // Not a GPU resource.
        assert_eq!(e[3].id.pod, None);
        assert!(e.iter().all(|e| e.allocation.is_none()));
        assert!(a.holds(&e[0]) && a.holds(&e[2]) && !a.holds(&e[1]) && !a.holds(&e[3]));
    }

    #[test]
    fn get_errors_by_kind() {
        let get = Request::Get {
            pod: "chat-a".into(),
            namespace: "web".into(),
        };
        let socket = Path::new("/run/k.sock");
        let kind = |r: &Request, s: tonic::Status| status_error(socket, r, &s);
        // Kubernetes before 1.27: no such method.
        let e = kind(
            &get,
            tonic::Status::unimplemented("unknown method Get for service v1.PodResourcesLister"),
        );
        assert_eq!(e.kind(), "unsupported");
        assert!(e.to_string().contains("before 1.27"), "{e}");
        // The feature gate off: the kubelet's own error text, code Unknown.
        let e = kind(
            &get,
            tonic::Status::unknown("PodResources API Get method disabled"),
        );
        assert_eq!(e.kind(), "unsupported");
        assert!(e.to_string().contains("KubeletPodResourcesGet"), "{e}");
        // A pod the kubelet does not know: the identity is named.
        let e = kind(
            &get,
            tonic::Status::unknown("pod chat-a in namespace web not found"),
        );
        assert_eq!(e.kind(), "http");
        assert!(
            e.to_string().contains("web/chat-a") && e.to_string().contains("POD_NAME"),
            "{e}"
        );
        assert_eq!(
            kind(&get, tonic::Status::unavailable("gone")).kind(),
            "unreachable"
        );
        // The connection broke under the call.
        for r in [&get, &Request::List] {
            assert_eq!(
                kind(r, tonic::Status::unknown("transport error")).kind(),
                "unreachable"
            );
        }
        assert_eq!(
            kind(&get, tonic::Status::deadline_exceeded("slow")).kind(),
            "timeout"
        );
        // `List` unimplemented is not the missing `Get`.
        assert_eq!(
            kind(&Request::List, tonic::Status::unimplemented("?")).kind(),
            "http"
        );
    }

    #[test]
    fn sidecar_config_checks() {
        let on = SidecarConfig {
            pod_resources: true,
            ..SidecarConfig::default()
        };
        // Off by default: nothing asked, nothing needed.
        assert_eq!(SidecarConfig::default().validate(None, None), Ok(None));
        let s = on.validate(Some("chat-a"), Some("web")).unwrap().unwrap();
        assert_eq!((s.pod.as_str(), s.namespace.as_str()), ("chat-a", "web"));
        assert_eq!(s.kubelet.socket, Path::new(DEFAULT_SOCKET));
        assert_eq!(s.kubelet.timeout, Duration::from_secs(2));
        assert_eq!(
            s.kubelet.resource_names,
            NodeConfig::default().resource_names
        );
        // The pod's name and namespace are needed, and named when missing.
        for (pod, namespace, named) in [
            (None, Some("web"), vec!["POD_NAME"]),
            (Some("chat-a"), None, vec!["POD_NAMESPACE"]),
            (None, None, vec!["POD_NAME", "POD_NAMESPACE"]),
            (Some(" "), Some(""), vec!["POD_NAME", "POD_NAMESPACE"]),
        ] {
            let (key, message) = on.validate(pod, namespace).unwrap_err();
            assert_eq!(key, "sidecar.pod_resources");
            for n in named {
                assert!(message.contains(n), "{message}");
            }
        }
        let bad = |c: SidecarConfig| c.validate(Some("p"), Some("n")).unwrap_err().0;
        assert_eq!(
            bad(SidecarConfig {
                timeout: "5ms".into(),
                ..on.clone()
            }),
            "sidecar.timeout"
        );
        assert_eq!(
            bad(SidecarConfig {
                socket: PathBuf::new(),
                ..on.clone()
            }),
            "sidecar.socket"
        );
        assert_eq!(
            bad(SidecarConfig {
                resource_names: vec![" ".into()],
                ..on.clone()
            }),
            "sidecar.resource_names"
        );
    }

    #[test]
    fn config_checks() {
        let no_env = |_: &str| None;
        let defaults = NodeConfig::default().validate(None, &no_env).unwrap();
        // Off by default: no API server settings, none needed.
        assert_eq!(defaults.pod_labels, None);
        let c = NodeConfig {
            timeout: "2h".into(),
            ..NodeConfig::default()
        };
        assert_eq!(c.validate(None, &no_env).unwrap_err().0, "node.timeout");
    }

    #[test]
    fn pod_labels_need_a_node_name_and_an_api_server() {
        let no_env = |_: &str| None;
        let cluster = |k: &str| match k {
            "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        let c = NodeConfig {
            pod_labels: vec!["app.kubernetes.io/name".into()],
            ..NodeConfig::default()
        };
        let (key, message) = c.validate(None, &cluster).unwrap_err();
        assert_eq!(key, "node.pod_labels");
        assert!(message.contains("NODE_NAME"), "{message}");
        assert_eq!(
            c.validate(Some("n1"), &no_env).unwrap_err().0,
            "node.api_server"
        );
        let p = c
            .validate(Some("n1"), &cluster)
            .unwrap()
            .pod_labels
            .unwrap();
        assert_eq!(p.api_server, "https://10.96.0.1:443");
        assert_eq!(p.node, "n1");
        assert_eq!(p.refresh, Duration::from_secs(30));
        assert_eq!(p.keys[0].name, "label_app_kubernetes_io_name");
        assert_eq!(
            p.token_file,
            Path::new(super::super::apiserver::DEFAULT_TOKEN_FILE)
        );
        let c = NodeConfig {
            pod_labels: vec!["not a key".into()],
            ..NodeConfig::default()
        };
        let (key, message) = c.validate(Some("n1"), &cluster).unwrap_err();
        assert_eq!(key, "node.pod_labels");
        assert!(message.contains("\"not a key\""), "{message}");
        let c = NodeConfig {
            pod_labels_refresh: "100ms".into(),
            ..NodeConfig::default()
        };
        assert_eq!(
            c.validate(None, &no_env).unwrap_err().0,
            "node.pod_labels_refresh"
        );
    }
}
