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

use super::apiserver::PodLabelSettings;
use crate::sources::{Produced, SourceError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use truthscale_core::model::{EntitySample, Holder, PodRef, ProcessReading};

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

/// The kubelet's default PodResources socket.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// `[node]`: node mode's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// The kubelet's PodResources socket.
    pub socket: PathBuf,
    /// Resource names that are GPUs: exact names, or a prefix ending in `*`.
    pub resource_names: Vec<String>,
    /// Timeout of one call: the kubelet's `List`, and the API server's pod list.
    pub timeout: String,
    /// Where the host's processes are seen (`/proc` with `hostPID: true`, or a mount of the
    /// host's `/proc`): per-process attribution reads `<proc_root>/<pid>/cgroup` and
    /// `<proc_root>/<pid>/environ` there.
    pub proc_root: PathBuf,
    /// Pod labels to add to `truthscale_gpu_allocation_info` as `label_<key>`, read from the
    /// API server (Kubernetes label keys). Empty: none, and no request to the API server.
    pub pod_labels: Vec<String>,
    /// How often the API server's list of this node's pods is read (1s..=1h).
    pub pod_labels_refresh: String,
    /// The API server (`https://…`). Empty: in-cluster, from `KUBERNETES_SERVICE_HOST` and
    /// `KUBERNETES_SERVICE_PORT`.
    pub api_server: String,
    /// The bearer token, re-read at every refresh (projected tokens rotate).
    pub token_file: PathBuf,
    /// The CA certificates (PEM) the API server is checked against.
    pub ca_file: PathBuf,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            socket: DEFAULT_SOCKET.into(),
            resource_names: default_resource_names(),
            timeout: "2s".into(),
            proc_root: "/proc".into(),
            pod_labels: Vec::new(),
            pod_labels_refresh: "30s".into(),
            api_server: String::new(),
            token_file: super::apiserver::DEFAULT_TOKEN_FILE.into(),
            ca_file: super::apiserver::DEFAULT_CA_FILE.into(),
        }
    }
}

/// The kubelet client's settings, checked: node mode's (`node.*`) and the sidecar's
/// (`sidecar.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletSettings {
    /// The socket.
    pub socket: PathBuf,
    /// GPU resource names (exact, or a prefix ending in `*`).
    pub resource_names: Vec<String>,
    /// Timeout of one call.
    pub timeout: Duration,
}

/// The dotted keys of a section's socket, resource names and timeout, for its errors.
struct KubeletKeys {
    socket: &'static str,
    resource_names: &'static str,
    timeout: &'static str,
}

/// Check a section's socket, resource names and timeout.
fn kubelet_settings(
    keys: &KubeletKeys,
    socket: &Path,
    resource_names: &[String],
    timeout: &str,
) -> Result<KubeletSettings, crate::setting::Invalid> {
    if socket.as_os_str().is_empty() {
        return Err((
            keys.socket,
            format!("must name the kubelet socket (default {DEFAULT_SOCKET})"),
        ));
    }
    if resource_names.iter().any(|r| r.trim().is_empty()) {
        return Err((keys.resource_names, "an empty resource name".into()));
    }
    let timeout = crate::setting::duration(
        keys.timeout,
        timeout,
        Duration::from_millis(10),
        Duration::from_secs(60),
    )?;
    Ok(KubeletSettings {
        socket: socket.to_path_buf(),
        resource_names: resource_names.to_vec(),
        timeout,
    })
}

fn default_resource_names() -> Vec<String> {
    vec![
        "nvidia.com/gpu".into(),
        "nvidia.com/gpu.shared".into(),
        "nvidia.com/mig-*".into(),
    ]
}

/// `[sidecar]`: sidecar mode's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SidecarConfig {
    /// Ask the kubelet (PodResources `Get`, one pod) which GPUs are this pod's, and label only
    /// those with it; the other GPUs the container sees are exported without pod labels.
    /// Needs the pod's name and namespace (`POD_NAME`, `POD_NAMESPACE`) and the kubelet's
    /// socket mounted.
    pub pod_resources: bool,
    /// The kubelet's PodResources socket.
    pub socket: PathBuf,
    /// Resource names that are GPUs: exact names, or a prefix ending in `*`.
    pub resource_names: Vec<String>,
    /// Timeout of one `Get`.
    pub timeout: String,
}

impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig {
            pod_resources: false,
            socket: DEFAULT_SOCKET.into(),
            resource_names: default_resource_names(),
            timeout: "2s".into(),
        }
    }
}

/// Sidecar mode's `Get`, checked: whose resources to ask for, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct SidecarSettings {
    /// This pod's name.
    pub pod: String,
    /// This pod's namespace.
    pub namespace: String,
    /// The kubelet client.
    pub kubelet: KubeletSettings,
}

impl SidecarConfig {
    /// Check the section; `pod` and `namespace` are this pod's (`identity.*`, else the
    /// Downward API variables). `None` when `pod_resources` is off.
    ///
    /// # Errors
    /// `(key, message)` for a bad value, or `pod_resources` without the pod's name or
    /// namespace.
    pub fn validate(
        &self,
        pod: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Option<SidecarSettings>, crate::setting::Invalid> {
        if !self.pod_resources {
            return Ok(None);
        }
        let kubelet = kubelet_settings(
            &KubeletKeys {
                socket: "sidecar.socket",
                resource_names: "sidecar.resource_names",
                timeout: "sidecar.timeout",
            },
            &self.socket,
            &self.resource_names,
            &self.timeout,
        )?;
        let known = |v: Option<&str>| {
            v.map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        match (known(pod), known(namespace)) {
            (Some(pod), Some(namespace)) => Ok(Some(SidecarSettings {
                pod,
                namespace,
                kubelet,
            })),
            (pod, namespace) => {
                let missing: Vec<&str> = [
                    ("POD_NAME (identity.pod)", pod.is_none()),
                    ("POD_NAMESPACE (identity.namespace)", namespace.is_none()),
                ]
                .into_iter()
                .filter(|(_, m)| *m)
                .map(|(v, _)| v)
                .collect();
                Err((
                    "sidecar.pod_resources",
                    format!(
                        "asks the kubelet for this pod's GPUs by the pod's name and namespace, and {} not set: set POD_NAME and POD_NAMESPACE from the Downward API (fieldRef metadata.name and metadata.namespace), or identity.pod and identity.namespace",
                        if missing.len() == 1 {
                            format!("{} is", missing[0])
                        } else {
                            format!("{} are", missing.join(" and "))
                        }
                    ),
                ))
            }
        }
    }
}

/// Node mode's settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSettings {
    /// The socket.
    pub socket: PathBuf,
    /// GPU resource names (exact, or a prefix ending in `*`).
    pub resource_names: Vec<String>,
    /// Timeout of one call.
    pub timeout: Duration,
    /// Where the host's processes are seen.
    pub proc_root: PathBuf,
    /// The pod-label reader, when `pod_labels` is not empty.
    pub pod_labels: Option<PodLabelSettings>,
}

impl NodeConfig {
    /// Check the section; `node` is the node's name (`NODE_NAME`, `identity.node`), and
    /// `getenv` reads the environment (the in-cluster API server's address).
    ///
    /// # Errors
    /// `(key, message)` for a bad value, or pod labels asked for without a node name or an
    /// API server.
    pub fn validate(
        &self,
        node: Option<&str>,
        getenv: &dyn Fn(&str) -> Option<String>,
    ) -> Result<NodeSettings, crate::setting::Invalid> {
        let KubeletSettings {
            socket,
            resource_names,
            timeout,
        } = kubelet_settings(
            &KubeletKeys {
                socket: "node.socket",
                resource_names: "node.resource_names",
                timeout: "node.timeout",
            },
            &self.socket,
            &self.resource_names,
            &self.timeout,
        )?;
        let keys = super::apiserver::label_keys(&self.pod_labels)?;
        let refresh = crate::setting::duration(
            "node.pod_labels_refresh",
            &self.pod_labels_refresh,
            Duration::from_secs(1),
            Duration::from_secs(3600),
        )?;
        let pod_labels = if keys.is_empty() {
            None
        } else {
            let node = node.filter(|n| !n.trim().is_empty()).ok_or((
                "node.pod_labels",
                "pod labels are read for this node's pods, and the node's name is not known: set NODE_NAME (Downward API fieldRef spec.nodeName, as the node DaemonSet does) or identity.node".to_string(),
            ))?;
            for (key, path) in [
                ("node.token_file", &self.token_file),
                ("node.ca_file", &self.ca_file),
            ] {
                if path.as_os_str().is_empty() {
                    return Err((key, "must name a file to read pod labels".into()));
                }
            }
            Some(PodLabelSettings {
                keys,
                refresh,
                api_server: super::apiserver::api_server_url(&self.api_server, getenv)?,
                node: node.trim().to_string(),
                token_file: self.token_file.clone(),
                ca_file: self.ca_file.clone(),
                timeout,
            })
        };
        Ok(NodeSettings {
            socket,
            resource_names,
            timeout,
            proc_root: self.proc_root.clone(),
            pod_labels,
        })
    }
}

impl NodeSettings {
    /// The kubelet client's part.
    #[must_use]
    pub fn kubelet(&self) -> KubeletSettings {
        KubeletSettings {
            socket: self.socket.clone(),
            resource_names: self.resource_names.clone(),
            timeout: self.timeout,
        }
    }
}

/// A device as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceRef {
    /// A GPU or MIG UUID.
    Uuid(String),
    /// A GPU index.
    Index(u32),
}

/// A device-plugin id: the device and the replica (`GPU-…::2` → replica `2`).
#[must_use]
pub fn parse_device_id(id: &str) -> Option<(DeviceRef, Option<String>)> {
    let id = id.trim();
    let (dev, replica) = match id.split_once("::") {
        Some((d, r)) if !r.is_empty() => (d, Some(r.to_string())),
        Some((d, _)) => (d, None),
        None => (id, None),
    };
    if dev.starts_with("GPU-") || dev.starts_with("MIG-") {
        Some((DeviceRef::Uuid(dev.to_string()), replica))
    } else {
        dev.parse().ok().map(|i| (DeviceRef::Index(i), replica))
    }
}

/// The device a DRA claim names: a `GPU-`/`MIG-` UUID in the device or CDI names, else the
/// index of `gpu-N`.
fn dra_device(c: &proto::ClaimResource) -> Option<DeviceRef> {
    let names = std::iter::once(c.device_name.as_str()).chain(
        c.cdi_devices
            .iter()
            .map(|d| d.name.rsplit('=').next().unwrap_or(&d.name)),
    );
    let mut index = None;
    for n in names {
        for prefix in ["GPU-", "MIG-"] {
            if let Some(i) = n.find(prefix) {
                let uuid: String = n[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                if uuid.len() > prefix.len() {
                    return Some(DeviceRef::Uuid(uuid));
                }
            }
        }
        if index.is_none()
            && let Some(i) = n.strip_prefix("gpu-").and_then(|s| s.parse::<u32>().ok())
        {
            index = Some(DeviceRef::Index(i));
        }
    }
    index
}

fn is_gpu_resource(name: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == p,
    })
}

/// Who holds which device, from one `List` answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allocations {
    holders: HashMap<DeviceRef, Vec<Holder>>,
}

impl Allocations {
    /// The GPU allocations of a `List` answer, for the resource names `patterns`.
    #[must_use]
    pub fn from_response(r: &proto::ListPodResourcesResponse, patterns: &[String]) -> Allocations {
        let mut holders: HashMap<DeviceRef, Vec<Holder>> = HashMap::new();
        for pod in &r.pod_resources {
            for c in &pod.containers {
                let who = PodRef {
                    pod: pod.name.clone(),
                    namespace: Some(pod.namespace.clone()).filter(|n| !n.is_empty()),
                    container: Some(c.name.clone()).filter(|n| !n.is_empty()),
                };
                for d in &c.devices {
                    if !is_gpu_resource(&d.resource_name, patterns) {
                        continue;
                    }
                    for id in &d.device_ids {
                        if let Some((dev, replica)) = parse_device_id(id) {
                            holders.entry(dev).or_default().push(Holder {
                                pod: who.clone(),
                                resource: d.resource_name.clone(),
                                replica,
                                labels: Vec::new(),
                            });
                        }
                    }
                }
                for claim in &c.dynamic_resources {
                    for cr in &claim.claim_resources {
                        if let Some(dev) = dra_device(cr) {
                            holders.entry(dev).or_default().push(Holder {
                                pod: who.clone(),
                                resource: format!("dra:{}", cr.driver_name),
                                replica: None,
                                labels: Vec::new(),
                            });
                        }
                    }
                }
            }
        }
        for h in holders.values_mut() {
            h.sort();
            h.dedup();
        }
        Allocations { holders }
    }

    /// The containers holding entity `e`: a MIG instance by its own UUID; a GPU by its
    /// UUID, else its index.
    #[must_use]
    pub fn of(&self, e: &EntitySample) -> Vec<Holder> {
        let mut keys = Vec::with_capacity(2);
        match &e.id.mig {
            Some(m) => keys.extend(m.uuid.clone().map(DeviceRef::Uuid)),
            None => {
                keys.extend(e.id.uuid.clone().map(DeviceRef::Uuid));
                keys.extend(e.id.gpu.map(DeviceRef::Index));
            }
        }
        keys.iter()
            .find_map(|k| self.holders.get(k))
            .cloned()
            .unwrap_or_default()
    }

    /// Attribute every entity of `produced` (see the module documentation), and the
    /// processes listed on it, seen under `proc_root`.
    pub fn attribute(&self, produced: &mut Produced, proc_root: &Path) {
        for s in &mut produced.samples {
            for e in &mut s.entities {
                let holders = self.of(e);
                e.id.pod = match holders.as_slice() {
                    [only] if only.replica.is_none() => Some(only.pod.clone()),
                    _ => None,
                };
                for p in &mut e.processes {
                    p.pod = match &e.id.pod {
                        Some(pod) => Some(pod.clone()),
                        None => pod_of_process(proc_root, p, &holders),
                    };
                }
                e.allocation = Some(holders);
            }
        }
    }

    /// Sidecar mode (`sidecar.pod_resources`), from this pod's own `Get` answer: an entity
    /// this pod holds by one container, by an id without a replica suffix, takes that
    /// container's pod, namespace and container; every other entity takes none. Those are
    /// GPUs the container sees but its pod was not allocated (`NVIDIA_VISIBLE_DEVICES=all`, a
    /// wrong device list), or time-sliced and several-container devices, whose counters are
    /// not the pod's alone: the same rule as node mode. No allocation is set: one pod's
    /// answer says nothing of the node's other pods, so neither `truthscale_gpu_pods` nor
    /// allocation info would be true.
    pub fn attribute_own(&self, produced: &mut Produced) {
        for s in &mut produced.samples {
            for e in &mut s.entities {
                e.id.pod = match self.of(e).as_slice() {
                    [only] if only.replica.is_none() => Some(only.pod.clone()),
                    _ => None,
                };
            }
        }
    }

    /// Whether a container of the answer holds entity `e` (alone or not).
    #[must_use]
    pub fn holds(&self, e: &EntitySample) -> bool {
        !self.of(e).is_empty()
    }
}

/// The holder a process on a shared GPU belongs to: its cgroup names a pod (UID), and its
/// container's hostname (`HOSTNAME`, which Kubernetes sets to the pod name) names exactly one
/// of the device's holders. `None` (counted under no pod) otherwise.
fn pod_of_process(proc_root: &Path, p: &mut ProcessReading, holders: &[Holder]) -> Option<PodRef> {
    let dir = proc_root.join(&p.pid);
    let cgroup = std::fs::read_to_string(dir.join("cgroup")).ok()?;
    let a = crate::cgroup::parse(&cgroup)?;
    p.pod_uid.get_or_insert(a.pod_uid);
    if let Some(c) = a.container_id {
        p.container_id.get_or_insert(c);
    }
    let environ = std::fs::read(dir.join("environ")).ok()?;
    let hostname = environ
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"HOSTNAME="))
        .and_then(|h| std::str::from_utf8(h).ok())?;
    let mut found = holders.iter().filter(|h| h.pod.pod == hostname);
    let first = found.next()?;
    // Two holders of that name (other namespaces): not told apart, so not attributed.
    if found.any(|h| h.pod != first.pod) {
        return None;
    }
    Some(first.pod.clone())
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
    use proto::*;
    use truthscale_core::model::{EntityId, MigId};

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
