//! What a PodResources answer allocates: which containers hold each device, and the
//! attribution of entities and processes from it (see [`super::kubelet`] for the rules).

#[cfg(any(test, feature = "fuzzing"))]
use super::kubelet::proto;
use crate::bounds::fits;
use crate::bounds::{LeftOut, MAX_ENTITIES, MAX_HOLDERS, MAX_LABEL_BYTES};
use crate::cgroup::{MAX_CGROUP_BYTES, MAX_ENVIRON_BYTES, read_proc_file};
use crate::sources::Produced;
use crate::sources::SourceError;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use truthscale_core::model::{EntitySample, Holder, PodRef, ProcessReading};

/// A device as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum DeviceRef {
    /// A GPU or MIG UUID.
    Uuid(String),
    /// A GPU index.
    Index(u32),
    /// A GPU's minor number (`/dev/nvidia<minor>`): how NVIDIA's DRA driver names a GPU
    /// (`gpu-<minor>`), which need not be its index.
    Minor(u32),
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
    if let Some((uuid, n)) = hami_id(dev) {
        return Some((DeviceRef::Uuid(uuid.to_string()), Some(n.to_string())));
    }
    if dev.starts_with("GPU-") || dev.starts_with("MIG-") {
        Some((DeviceRef::Uuid(dev.to_string()), replica))
    } else {
        dev.parse().ok().map(|i| (DeviceRef::Index(i), replica))
    }
}

/// HAMi's device-plugin id, `GPU-<uuid>-<n>`: the GPU's UUID (`GPU-` and 36 characters,
/// 8-4-4-4-12 hex digits) and the share `n`, a replica of a shared GPU.
fn hami_id(dev: &str) -> Option<(&str, &str)> {
    const UUID: usize = "GPU-".len() + 36;
    let uuid = dev.get(..UUID)?;
    let n = dev.get(UUID..)?.strip_prefix('-')?;
    let hex = |part: &str, len| part.len() == len && part.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = uuid.strip_prefix("GPU-")?.split('-').collect();
    let well_formed =
        parts.len() == 5 && parts.iter().zip([8, 4, 4, 4, 12]).all(|(p, l)| hex(p, l));
    (well_formed && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some((uuid, n))
}

/// A DRA claim's `gpu-N` matched to the GPU of index N, whose source reads no minor
/// numbers: said once.
fn assumed_minor() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        tracing::warn!(
            "A DRA claim names a GPU by its minor number (gpu-N) and the source reads no minor numbers: the claim is matched to the GPU of index N, which is its minor number on most machines. The NVML and dcgm-exporter sources read minor numbers and match exactly."
        );
    });
}

/// Whether a DRA claim's driver is a GPU driver (`gpu.nvidia.com`): its devices are GPUs,
/// and one whose name matches none is a GPU whose holder is unknown.
pub(crate) fn is_gpu_driver(driver: &str) -> bool {
    driver.contains("gpu")
}

/// The device a DRA claim names: a `GPU-`/`MIG-` UUID in its device name or its CDI
/// devices' names (`vendor/class=name`), else the minor number of `gpu-N` (NVIDIA's DRA
/// driver names a GPU `gpu-<minor>`).
pub(crate) fn dra_device<'a>(
    device_name: &'a str,
    cdi_names: impl Iterator<Item = &'a str>,
) -> Option<DeviceRef> {
    let names =
        std::iter::once(device_name).chain(cdi_names.map(|n| n.rsplit('=').next().unwrap_or(n)));
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
            index = Some(DeviceRef::Minor(i));
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
    /// What the caps left out of the answer.
    left_out: LeftOut,
    /// GPU device ids and GPU claims that name no device truthscale can match (an index
    /// strategy's `0:1` MIG id, a DRA MIG device name), and the first of them: while there
    /// are any, a device with no holder found has holders unknown, never none.
    unmapped: (u64, Option<String>),
    /// GPU UUIDs the answer lists under a resource not among the GPU resource names (a
    /// renamed resource: a time-slicing `rename`, a vGPU plugin's own name), and the first
    /// such resource: a GPU among them with no holder found has holders unknown, never none.
    unlisted: (HashSet<String>, Option<String>),
}

impl crate::pipeline::Answer for Allocations {
    fn left_out(&self) -> Option<SourceError> {
        self.left_out
            .message("the kubelet's pod resources")
            .map(SourceError::OverLimit)
    }
}

/// The caps on one answer, and what they left out.
#[derive(Default)]
struct Caps {
    long_names: u64,
    devices: u64,
    holders: u64,
}

impl Caps {
    fn left_out(&self) -> LeftOut {
        let mut l = LeftOut::default();
        l.add(
            format!("containers whose pod, namespace, container or resource name is over {MAX_LABEL_BYTES} bytes"),
            self.long_names,
        );
        l.add(
            format!("devices past the first {MAX_ENTITIES}"),
            self.devices,
        );
        l.add(
            format!("holders past {MAX_HOLDERS} of one device"),
            self.holders,
        );
        l
    }
}

/// [`Allocations`] built one holder at a time, within the caps: what is past them is
/// counted and never built.
pub(crate) struct Builder<'p> {
    patterns: &'p [String],
    holders: HashMap<DeviceRef, Vec<Holder>>,
    caps: Caps,
    unmapped: (u64, Option<String>),
    unlisted: (HashSet<String>, Option<String>),
}

impl<'p> Builder<'p> {
    /// Allocations of the GPU resource names `patterns`.
    pub(crate) fn new(patterns: &'p [String]) -> Self {
        Builder {
            patterns,
            holders: HashMap::new(),
            caps: Caps::default(),
            unmapped: (0, None),
            unlisted: (HashSet::new(), None),
        }
    }

    /// Whether `resource` is one of the GPU resource names.
    pub(crate) fn is_gpu_resource(&self, resource: &str) -> bool {
        is_gpu_resource(resource, self.patterns)
    }

    /// Count a GPU device id or claim that names no device truthscale can match.
    /// An empty id names nothing, and is not counted.
    pub(crate) fn unmapped(&mut self, id: &str) {
        if id.trim().is_empty() {
            return;
        }
        self.unmapped.0 += 1;
        if self.unmapped.1.is_none() && fits(id) {
            self.unmapped.1 = Some(id.to_owned());
        }
    }

    /// A device id under `resource`, not a GPU resource: where it is a GPU's or MIG
    /// instance's UUID, the GPU's holders cannot be told from this answer (at most
    /// [`MAX_ENTITIES`] such UUIDs kept).
    pub(crate) fn unlisted(&mut self, id: &str, resource: &str) {
        if let Some((DeviceRef::Uuid(uuid), _)) = parse_device_id(id)
            && self.unlisted.0.len() < MAX_ENTITIES
            && fits(&uuid)
        {
            self.unlisted.0.insert(uuid);
            if self.unlisted.1.is_none() && fits(resource) {
                self.unlisted.1 = Some(resource.to_owned());
            }
        }
    }

    /// Count a container left out because a name is over [`MAX_LABEL_BYTES`].
    pub(crate) fn long_names(&mut self) {
        self.caps.long_names += 1;
    }

    /// Add `holder()` of `dev`, within the caps (built only when kept).
    pub(crate) fn add(&mut self, dev: DeviceRef, holder: impl FnOnce() -> Holder) {
        if !self.holders.contains_key(&dev) && self.holders.len() >= MAX_ENTITIES {
            self.caps.devices += 1;
            return;
        }
        let of = self.holders.entry(dev).or_default();
        if of.len() >= MAX_HOLDERS {
            self.caps.holders += 1;
            return;
        }
        of.push(holder());
    }

    /// The allocations, each device's holders sorted and without repeats.
    pub(crate) fn finish(mut self) -> Allocations {
        for h in self.holders.values_mut() {
            h.sort();
            h.dedup();
        }
        Allocations {
            holders: self.holders,
            left_out: self.caps.left_out(),
            unmapped: self.unmapped,
            unlisted: self.unlisted,
        }
    }
}

impl Allocations {
    /// The GPU allocations of a `List` answer decoded by prost, for the resource names
    /// `patterns`: what [`super::kubelet_codec::decode_answer`] reads from its bytes, kept
    /// as the reference its tests and fuzz target compare it with.
    #[cfg(any(test, feature = "fuzzing"))]
    #[must_use]
    pub(crate) fn from_response(
        r: &proto::ListPodResourcesResponse,
        patterns: &[String],
    ) -> Allocations {
        let mut b = Builder::new(patterns);
        for pod in &r.pod_resources {
            for c in &pod.containers {
                let names_fit = [&pod.name, &pod.namespace, &c.name]
                    .into_iter()
                    .chain(c.devices.iter().map(|d| &d.resource_name))
                    .chain(
                        c.dynamic_resources
                            .iter()
                            .flat_map(|d| &d.claim_resources)
                            .map(|r| &r.driver_name),
                    )
                    .all(|n| fits(n));
                if !names_fit {
                    b.long_names();
                    continue;
                }
                let who = PodRef {
                    pod: pod.name.clone(),
                    namespace: Some(pod.namespace.clone()).filter(|n| !n.is_empty()),
                    container: Some(c.name.clone()).filter(|n| !n.is_empty()),
                };
                for d in &c.devices {
                    if !b.is_gpu_resource(&d.resource_name) {
                        for id in &d.device_ids {
                            b.unlisted(id, &d.resource_name);
                        }
                        continue;
                    }
                    for id in &d.device_ids {
                        let Some((dev, replica)) = parse_device_id(id) else {
                            b.unmapped(id);
                            continue;
                        };
                        b.add(dev, || Holder {
                            pod: who.clone(),
                            resource: d.resource_name.clone(),
                            replica,
                            labels: Vec::new(),
                            owner: None,
                        });
                    }
                }
                for cr in c.dynamic_resources.iter().flat_map(|d| &d.claim_resources) {
                    let cdi = cr.cdi_devices.iter().map(|d| d.name.as_str());
                    match dra_device(&cr.device_name, cdi) {
                        Some(dev) => b.add(dev, || Holder {
                            pod: who.clone(),
                            resource: format!("dra:{}", cr.driver_name),
                            replica: None,
                            labels: Vec::new(),
                            owner: None,
                        }),
                        None if is_gpu_driver(&cr.driver_name) => b.unmapped(&cr.device_name),
                        None => {}
                    }
                }
            }
        }
        b.finish()
    }

    /// The containers holding entity `e`: a MIG instance by its own UUID; a GPU by its
    /// UUID, else its minor number (a DRA claim's `gpu-<minor>`), else its index. A GPU
    /// whose source reads no minor number is taken to have its index as one, as on most
    /// machines, and the log says so once ([`assumed_minor`]).
    #[must_use]
    pub(crate) fn of(&self, e: &EntitySample) -> Vec<Holder> {
        let mut keys = Vec::with_capacity(3);
        match &e.id.mig {
            Some(m) => keys.extend(m.uuid.clone().map(DeviceRef::Uuid)),
            None => {
                keys.extend(e.id.uuid.clone().map(DeviceRef::Uuid));
                keys.extend(e.id.minor.or(e.id.gpu).map(DeviceRef::Minor));
                keys.extend(e.id.gpu.map(DeviceRef::Index));
            }
        }
        let Some((key, holders)) = keys
            .iter()
            .find_map(|k| self.holders.get(k).map(|h| (k, h)))
        else {
            return Vec::new();
        };
        if matches!(key, DeviceRef::Minor(_)) && e.id.minor.is_none() {
            assumed_minor();
        }
        holders.clone()
    }

    /// Attribute every entity of `produced` (see the module documentation), and the
    /// processes listed on it, seen under `procs`' root. Returns how many MIG instances
    /// were left as the source gave them, their holders unknown: the kubelet names an
    /// instance by its own UUID, which the source did not give (dcgm-exporter labels an
    /// instance with its parent GPU's UUID), so no allocation is set (absent, never "no
    /// holder"). An entity no id names is left so too while the answer held GPU ids it could
    /// not read ([`Allocations::unmapped`]): one of them may be its.
    pub(crate) fn attribute(&self, produced: &mut Produced, procs: &mut Procs) -> usize {
        procs.begin_tick();
        let mut unknown = 0;
        for s in &mut produced.samples {
            for e in &mut s.entities {
                if unmatched_mig(e) {
                    unknown += 1;
                    continue;
                }
                let holders = self.of(e);
                // Held by none of the ids read, while some ids were not read: unknown.
                if self.holders_unknown(e, &holders) {
                    continue;
                }
                e.id.pod = match holders.as_slice() {
                    [only] if only.replica.is_none() => Some(only.pod.clone()),
                    _ => None,
                };
                for p in &mut e.processes {
                    p.pod = match &e.id.pod {
                        Some(pod) => {
                            // The pod is the holder's; its UID and container from `/proc`.
                            if p.pod_uid.is_none() || p.container_id.is_none() {
                                procs.seen(p);
                            }
                            Some(pod.clone())
                        }
                        None => procs.pod_of(p, &holders),
                    };
                }
                e.allocation = Some(holders);
            }
        }
        procs.end_tick();
        unknown
    }

    /// Sidecar mode (`sidecar.pod_resources`), from this pod's own `Get` answer: an entity
    /// this pod holds by one container, by an id without a replica suffix, takes that
    /// container's pod, namespace and container; every other entity takes none. Those are
    /// GPUs the container sees but its pod was not allocated (`NVIDIA_VISIBLE_DEVICES=all`, a
    /// wrong device list), or time-sliced and several-container devices, whose counters are
    /// not the pod's alone: the same rule as node mode. No allocation is set: one pod's
    /// answer says nothing of the node's other pods, so neither `truthscale_gpu_pods` nor
    /// allocation info would be true. An entity whose holders cannot be told (a MIG instance
    /// without its own UUID, dcgm-exporter's; one no id names while some ids were not read)
    /// keeps the pod labels the source gave, as in node mode; returns how many there were.
    pub(crate) fn attribute_own(&self, produced: &mut Produced) -> usize {
        let mut unknown = 0;
        for s in &mut produced.samples {
            for e in &mut s.entities {
                let holders = self.of(e);
                if self.holders_unknown(e, &holders) {
                    unknown += 1;
                    continue;
                }
                e.id.pod = match holders.as_slice() {
                    [only] if only.replica.is_none() => Some(only.pod.clone()),
                    _ => None,
                };
            }
        }
        unknown
    }

    /// How many GPU device ids and claims named no device truthscale can match, and the
    /// first of them.
    #[must_use]
    pub(crate) fn unmapped(&self) -> (u64, Option<&str>) {
        (self.unmapped.0, self.unmapped.1.as_deref())
    }

    /// How many devices have holders (for the tests).
    #[cfg(test)]
    pub(crate) fn devices_held(&self) -> usize {
        self.holders.len()
    }

    /// Every device's holders (for the fuzz targets).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn devices(&self) -> &HashMap<DeviceRef, Vec<Holder>> {
        &self.holders
    }

    /// Whether a container of the answer holds entity `e` (alone or not; for the tests).
    #[cfg(test)]
    #[must_use]
    pub(crate) fn holds(&self, e: &EntitySample) -> bool {
        !self.of(e).is_empty()
    }

    /// Whether `e`'s holders cannot be told from this answer: a MIG instance without its own
    /// UUID ([`unmatched_mig`]), or a device no id names while some ids were not read.
    /// `holders` are `e`'s by this answer ([`Allocations::of`]).
    fn holders_unknown(&self, e: &EntitySample, holders: &[Holder]) -> bool {
        let uuid = match &e.id.mig {
            Some(m) => m.uuid.as_ref(),
            None => e.id.uuid.as_ref(),
        };
        unmatched_mig(e)
            || holders.is_empty()
                && (self.unmapped.0 > 0 || uuid.is_some_and(|u| self.unlisted.0.contains(u)))
    }

    /// How many GPU UUIDs the answer lists under resources not among the GPU resource
    /// names, and the first such resource.
    #[must_use]
    pub(crate) fn unlisted(&self) -> (usize, Option<&str>) {
        (self.unlisted.0.len(), self.unlisted.1.as_deref())
    }

    /// Sidecar mode: whether the pod `own`, whose answer this is, holds `e`: by the answer,
    /// or, where its holders cannot be told ([`Allocations::holders_unknown`]), by the pod
    /// labels the source gave it.
    pub(crate) fn held_by_own(&self, e: &EntitySample, own: &PodRef) -> bool {
        let holders = self.of(e);
        !holders.is_empty()
            || self.holders_unknown(e, &holders)
                && e.id.pod.as_ref().is_some_and(|p| p.same_pod(own))
    }
}

/// A MIG instance the source gave without its own UUID (dcgm-exporter labels one with its
/// parent GPU's): the kubelet names instances by their own, so its holders are unknown.
pub(crate) fn unmatched_mig(e: &EntitySample) -> bool {
    e.id.mig.as_ref().is_some_and(|m| m.uuid.is_none())
}

/// New processes whose `/proc` files are read in one tick: the per-process scan's cost per
/// tick is bounded by this, whatever the number of processes (the rest are read on the
/// ticks after, and are under no pod until then).
pub(crate) const PROC_READS_PER_TICK: usize = 256;

/// What a process's `/proc` files say of it: its cgroup's pod and container, and its
/// container's hostname.
#[derive(Debug, Clone, Default)]
struct Seen {
    pod_uid: Option<String>,
    container_id: Option<String>,
    hostname: Option<String>,
}

/// The processes' `/proc` files under a root, each read once while the process lives (a
/// process keeps its cgroup and its environment), at most [`PROC_READS_PER_TICK`] new ones
/// a tick.
#[derive(Debug)]
pub(crate) struct Procs {
    root: std::path::PathBuf,
    seen: HashMap<String, (Seen, u64)>,
    tick: u64,
    reads_left: usize,
    /// Processes read so far (for tests and the budget).
    pub(crate) reads: u64,
}

impl Procs {
    pub(crate) fn new(root: std::path::PathBuf) -> Procs {
        Procs {
            root,
            seen: HashMap::new(),
            tick: 0,
            reads_left: PROC_READS_PER_TICK,
            reads: 0,
        }
    }

    fn begin_tick(&mut self) {
        self.tick += 1;
        self.reads_left = PROC_READS_PER_TICK;
    }

    /// Forget processes not seen this tick (they ended, and their pid may be reused).
    fn end_tick(&mut self) {
        let tick = self.tick;
        self.seen.retain(|_, (_, at)| *at == tick);
    }

    /// What `p`'s `/proc` files under the root say, read once while it lives (`None` for a
    /// new process past this tick's reads); its pod UID and container id filled in where
    /// the source left them out (a source that reads `/proc` without the host's PIDs, where
    /// `node.proc_root` is the host's `/proc`).
    fn seen(&mut self, p: &mut ProcessReading) -> Option<Seen> {
        let tick = self.tick;
        let seen = match self.seen.get_mut(&p.pid) {
            Some((seen, at)) => {
                *at = tick;
                seen.clone()
            }
            None if self.reads_left == 0 => return None,
            None => {
                self.reads_left -= 1;
                self.reads += 1;
                let seen = read_seen(&self.root.join(&p.pid));
                self.seen.insert(p.pid.clone(), (seen.clone(), tick));
                seen
            }
        };
        if let Some(uid) = &seen.pod_uid {
            p.pod_uid.get_or_insert_with(|| uid.clone());
        }
        if let Some(c) = &seen.container_id {
            p.container_id.get_or_insert_with(|| c.clone());
        }
        Some(seen)
    }

    /// The holder a process on a shared GPU belongs to: its cgroup names a pod (UID), and
    /// its container's hostname (`HOSTNAME`, which Kubernetes sets to the pod name) names
    /// exactly one of the device's holders. `None` (counted under no pod) otherwise, and
    /// for a new process past this tick's reads.
    fn pod_of(&mut self, p: &mut ProcessReading, holders: &[Holder]) -> Option<PodRef> {
        let hostname = self.seen(p)?.hostname?;
        let mut found = holders
            .iter()
            .filter(|h| hostname_of(&h.pod.pod) == hostname);
        let first = found.next()?;
        let mut pod = first.pod.clone();
        for h in found {
            // Two holders of that name in other namespaces: not told apart, so not
            // attributed. Two containers of the pod: the pod's, its container not told.
            if h.pod.namespace != first.pod.namespace {
                return None;
            }
            if h.pod.container != pod.container {
                pod.container = None;
            }
        }
        Some(pod)
    }
}

/// The hostname the kubelet gives a pod named `pod`: its name, cut to 63 characters (a DNS
/// label) and then of any `-` or `.` it ends with.
fn hostname_of(pod: &str) -> &str {
    match pod.get(..63) {
        Some(cut) if pod.len() > 63 => cut.trim_end_matches(['-', '.']),
        _ => pod,
    }
}

/// Read a process's cgroup and `HOSTNAME` under `dir` (bounded, non-blocking reads).
fn read_seen(dir: &Path) -> Seen {
    let Ok(cgroup) = read_proc_file(&dir.join("cgroup"), MAX_CGROUP_BYTES) else {
        return Seen::default();
    };
    let environ = || read_proc_file(&dir.join("environ"), MAX_ENVIRON_BYTES).ok();
    seen_of(&cgroup, environ)
}

/// What a process's `cgroup` file and its `environ` (read only when the cgroup names a
/// pod) say of it.
fn seen_of(cgroup: &[u8], environ: impl FnOnce() -> Option<Vec<u8>>) -> Seen {
    let Some(a) = std::str::from_utf8(cgroup)
        .ok()
        .and_then(crate::cgroup::parse)
    else {
        return Seen::default();
    };
    Seen {
        pod_uid: Some(a.pod_uid),
        container_id: a.container_id,
        hostname: environ().and_then(|e| {
            e.split(|b| *b == 0)
                .find_map(|kv| kv.strip_prefix(b"HOSTNAME="))
                .and_then(|h| std::str::from_utf8(h).ok())
                .map(str::to_string)
        }),
    }
}

/// The fuzz targets' way in (feature `fuzzing`): what `cgroup` and `environ` say of a
/// process, as (pod UID, container id, hostname).
#[cfg(feature = "fuzzing")]
pub(crate) fn seen_parts(
    cgroup: &[u8],
    environ: &[u8],
) -> (Option<String>, Option<String>, Option<String>) {
    let s = seen_of(cgroup, || Some(environ.to_vec()));
    (s.pod_uid, s.container_id, s.hostname)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kubelet cuts a long pod name to 63 characters for its hostname, then trims a
    /// trailing `-` or `.`: a process's `HOSTNAME` is matched against that.
    #[test]
    fn a_long_pod_names_hostname_is_cut_as_the_kubelet_cuts_it() {
        assert_eq!(hostname_of("llm-0"), "llm-0");
        let long = format!("{}-x", "a".repeat(62));
        assert_eq!(
            hostname_of(&long),
            "a".repeat(62),
            "63 chars end in '-', trimmed"
        );
        let long = "b".repeat(70);
        assert_eq!(hostname_of(&long), "b".repeat(63));
        let exact = "c".repeat(63);
        assert_eq!(hostname_of(&exact), exact);
    }
}
