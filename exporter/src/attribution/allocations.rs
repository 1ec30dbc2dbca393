//! What a PodResources answer allocates: which containers hold each device, and the
//! attribution of entities and processes from it (see [`super::kubelet`] for the rules).

use super::kubelet::proto;
use crate::cgroup::{MAX_CGROUP_BYTES, MAX_ENVIRON_BYTES, read_proc_file};
use crate::sources::Produced;
use std::collections::HashMap;
use std::path::Path;
use truthscale_core::model::{EntitySample, Holder, PodRef, ProcessReading};

/// A device as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum DeviceRef {
    /// A GPU or MIG UUID.
    Uuid(String),
    /// A GPU index.
    Index(u32),
}

/// A device-plugin id: the device and the replica (`GPU-…::2` → replica `2`).
#[must_use]
pub(crate) fn parse_device_id(id: &str) -> Option<(DeviceRef, Option<String>)> {
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
pub(crate) struct Allocations {
    holders: HashMap<DeviceRef, Vec<Holder>>,
}

impl Allocations {
    /// The GPU allocations of a `List` answer, for the resource names `patterns`.
    #[must_use]
    pub(crate) fn from_response(
        r: &proto::ListPodResourcesResponse,
        patterns: &[String],
    ) -> Allocations {
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
    pub(crate) fn of(&self, e: &EntitySample) -> Vec<Holder> {
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
    pub(crate) fn attribute(&self, produced: &mut Produced, proc_root: &Path) {
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
    pub(crate) fn attribute_own(&self, produced: &mut Produced) {
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
    pub(crate) fn holds(&self, e: &EntitySample) -> bool {
        !self.of(e).is_empty()
    }
}

/// The holder a process on a shared GPU belongs to: its cgroup names a pod (UID), and its
/// container's hostname (`HOSTNAME`, which Kubernetes sets to the pod name) names exactly one
/// of the device's holders. `None` (counted under no pod) otherwise.
fn pod_of_process(proc_root: &Path, p: &mut ProcessReading, holders: &[Holder]) -> Option<PodRef> {
    let dir = proc_root.join(&p.pid);
    let cgroup = read_proc_file(&dir.join("cgroup"), MAX_CGROUP_BYTES).ok()?;
    let a = crate::cgroup::parse(std::str::from_utf8(&cgroup).ok()?)?;
    p.pod_uid.get_or_insert(a.pod_uid);
    if let Some(c) = a.container_id {
        p.container_id.get_or_insert(c);
    }
    let environ = read_proc_file(&dir.join("environ"), MAX_ENVIRON_BYTES).ok()?;
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
