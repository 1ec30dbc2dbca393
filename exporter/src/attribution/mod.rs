//! Attribution: which pods hold each GPU, as stages of the pipeline.
//!
//! - `NodeAttribution`: node mode, the kubelet's PodResources `List` for the whole node:
//!   every entity (and every process on a shared GPU) attributed to its holders.
//! - `PodLabels`: node mode's allowlisted pod labels from the API server, read on a thread
//!   of its own (`apiserver`), applied to the allocation info.
//! - `OwnPod`: the sidecar's `Get` for its own pod: only the GPUs the pod holds take its
//!   labels.
//!
//! [`kubelet`] holds the PodResources client, [`config`] its settings, `allocations` what an
//! answer allocates and the attribution from it; `apiserver` the API server's pod-label
//! reader.

pub(crate) mod allocations;
pub(crate) mod apiserver;
pub mod config;
#[cfg(test)]
mod generated_check;
pub mod kubelet;
pub(crate) mod kubelet_codec;

use crate::pipeline::{Background, Health, LogLimiter, Stage, Tick};
use crate::sources::SourceError;
use allocations::{Allocations, Procs};
use apiserver::ApiServer;
use kubelet::Kubelet;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use truthscale_core::exposition::SourceHealth;
use truthscale_core::model::PodRef;

/// The `source` label of the kubelet's health.
pub(crate) const KUBELET: &str = "kubelet";

/// Node mode: every entity attributed from the kubelet's `List` answer, read every interval
/// on a thread of its own (a slow or hung kubelet never slows sampling).
#[derive(Debug)]
pub(crate) struct NodeAttribution {
    reader: Background<Allocations>,
    procs: Procs,
    /// Up, and the reader's failures by kind, as of this tick.
    health: Health,
    /// Failures the pipeline counted against this stage (overruns).
    own: BTreeMap<String, u64>,
    /// Whether MIG instances the kubelet's answer cannot name were logged.
    warned_mig: bool,
    /// Whether unmatched device ids were logged.
    warned_unmapped: bool,
    /// Whether GPU UUIDs under resources not among the GPU resource names were logged.
    warned_unlisted: bool,
}

impl NodeAttribution {
    /// Attribution from `kubelet`, read every `every`, reading processes' cgroups under
    /// `proc_root`.
    #[must_use]
    pub(crate) fn new(
        mut kubelet: Kubelet,
        proc_root: PathBuf,
        every: Duration,
    ) -> NodeAttribution {
        let mut log = LogLimiter::default();
        let mut failing = false;
        let reader = Background::start(
            "truthscale-kubelet",
            every,
            move || kubelet.read(),
            move |answer| match answer {
                Ok(_) => {
                    if std::mem::take(&mut failing) {
                        tracing::info!(
                            source = KUBELET,
                            "Reading the kubelet's pod resources again."
                        );
                    }
                }
                Err(e) => {
                    failing = true;
                    if log.allow(e.kind()) {
                        tracing::warn!(
                            source = KUBELET,
                            kind = e.kind(),
                            error = %e,
                            "Cannot read the kubelet's pod resources; the last answer is used for the stale period, then GPUs are exported without pod attribution until it answers (counted in truthscale_source_errors_total{{source=\"kubelet\"}}; repeats logged every 30 s)."
                        );
                    }
                }
            },
        );
        NodeAttribution {
            reader,
            procs: Procs::new(proc_root),
            health: Health::default(),
            own: BTreeMap::new(),
            warned_mig: false,
            warned_unmapped: false,
            warned_unlisted: false,
        }
    }
}

impl NodeAttribution {
    /// Say once what in the kubelet's answer leaves GPUs' holders unknown: device ids that
    /// match no GPU, and GPU UUIDs under resources not among the GPU resource names.
    fn warn_once(&mut self, a: &Allocations) {
        let pods = truthscale_core::catalog::GPU_PODS.name;
        if let (n @ 1.., first) = a.unmapped()
            && !std::mem::replace(&mut self.warned_unmapped, true)
        {
            tracing::warn!(
                source = KUBELET,
                ids = n,
                first = first.unwrap_or_default(),
                "The kubelet names GPU devices by ids truthscale cannot match to a GPU (a device plugin's index strategy with MIG, `0:1`; a DRA MIG device name): the GPUs no other id names are exported without allocation (no {pods}, no allocation info), never as held by nobody. Use the device plugin's uuid strategy (--device-id-strategy=uuid). Logged once.",
            );
        }
        if let (n @ 1.., first) = a.unlisted()
            && !std::mem::replace(&mut self.warned_unlisted, true)
        {
            tracing::warn!(
                source = KUBELET,
                gpus = n,
                resource = first.unwrap_or_default(),
                "The kubelet lists GPUs under a resource that is not among the GPU resource names (a renamed time-sliced resource, a vGPU plugin's own name): those GPUs with no other holder are exported without allocation (no {pods}, no allocation info), never as held by nobody. Add the resource to node.resource_names. Logged once.",
            );
        }
    }
}

impl Stage for NodeAttribution {
    fn name(&self) -> &'static str {
        KUBELET
    }

    fn apply(&mut self, tick: &mut Tick<'_>) {
        let (allocations, errors) = self.reader.current(tick.stale_after);
        self.health = Health {
            up: allocations.is_some(),
            errors,
        };
        if let Some(a) = allocations {
            self.warn_once(&a);
            let unknown = a.attribute(tick.produced, &mut self.procs);
            if unknown > 0 && !std::mem::replace(&mut self.warned_mig, true) {
                tracing::warn!(
                    source = KUBELET,
                    instances = unknown,
                    "MIG instances without their own UUID (dcgm-exporter labels an instance with its parent GPU's) cannot be matched to the kubelet's allocations, which name instances by their MIG UUID: they are exported without allocation (no {}, no allocation info) and with the pod labels the source gave. Read MIG GPUs through NVML (--source nvml) to attribute them. Logged once.",
                    truthscale_core::catalog::GPU_PODS.name
                );
            }
        }
    }

    fn health(&self) -> SourceHealth {
        with_own(self.health.report(KUBELET), &self.own)
    }

    fn count(&mut self, kind: &str) {
        *self.own.entry(kind.to_string()).or_default() += 1;
    }

    fn attributes(&self) -> bool {
        true
    }
}

/// A reader's health with the failures the pipeline counted against its stage added.
fn with_own(mut h: SourceHealth, own: &BTreeMap<String, u64>) -> SourceHealth {
    for (kind, n) in own {
        *h.errors.entry(kind.clone()).or_default() += n;
    }
    h
}

/// Node mode's pod labels: the pod list read every refresh period on a thread of its own
/// (never on the sampler's thread); the last answer is used for three refresh periods.
#[derive(Debug)]
pub(crate) struct PodLabels {
    reader: Background<apiserver::PodLabels>,
    keep_for: Duration,
    /// The reader's health as of this tick.
    health: Health,
    /// Failures the pipeline counted against this stage (overruns).
    own: BTreeMap<String, u64>,
    /// Whether a process whose UID is not its hostname's holder's was logged.
    warned_uid: bool,
}

impl PodLabels {
    /// Start reading labels from `api`.
    #[must_use]
    pub(crate) fn start(api: ApiServer) -> PodLabels {
        let every = api.refresh();
        let mut log = LogLimiter::default();
        let mut failing = false;
        let reader = Background::start(
            "truthscale-pod-labels",
            every,
            move || api.list(),
            move |answer| match answer {
                Ok(labels) => {
                    if std::mem::take(&mut failing) {
                        tracing::info!(
                            source = apiserver::SOURCE,
                            pods = labels.pods(),
                            "Reading pod labels from the API server again."
                        );
                    }
                }
                Err(e) => {
                    failing = true;
                    if log.allow(e.kind()) {
                        tracing::warn!(
                            source = apiserver::SOURCE,
                            kind = e.kind(),
                            error = %e,
                            "Cannot read pod labels from the API server; allocation info is exported without them (the last answer is kept for three refresh periods; counted in truthscale_source_errors_total{{source=\"apiserver\"}}; repeats logged every 30 s)."
                        );
                    }
                }
            },
        );
        PodLabels {
            reader,
            keep_for: every * 3,
            health: Health::default(),
            own: BTreeMap::new(),
            warned_uid: false,
        }
    }
}

impl Stage for PodLabels {
    fn name(&self) -> &'static str {
        apiserver::SOURCE
    }

    fn apply(&mut self, tick: &mut Tick<'_>) {
        let (labels, errors) = self.reader.current(self.keep_for);
        let not_theirs = labels.as_ref().map_or(0, |l| l.apply(tick.produced));
        if not_theirs > 0 && !std::mem::replace(&mut self.warned_uid, true) {
            tracing::warn!(
                source = apiserver::SOURCE,
                processes = not_theirs,
                "A process on a GPU has the hostname of a pod that holds the GPU but another pod's UID in its cgroup: it is counted under no pod (a pod that holds no share of the GPU uses it, or a pod of the same name in another namespace). Said once."
            );
        }
        self.health = Health {
            up: labels.is_some(),
            errors,
        };
    }

    fn health(&self) -> SourceHealth {
        with_own(self.health.report(apiserver::SOURCE), &self.own)
    }

    fn count(&mut self, kind: &str) {
        *self.own.entry(kind.to_string()).or_default() += 1;
    }
}

/// Sidecar mode with `sidecar.pod_resources`: the kubelet's answer to `Get` for this pod says
/// which of the GPUs this container sees are the pod's. Only those take the pod's labels
/// (from the answer); the others are exported without any. A pod's devices are fixed for its
/// life, so once an answer came, the last one stands while the kubelet cannot be read (its
/// health says so). Before any answer (the kubelet unreadable, or without `Get`), every GPU
/// takes this pod's identity, as without the setting. The GPUs the pod holds are handed on
/// ([`Tick::held`]). The kubelet is read every interval on a thread of its own.
#[derive(Debug)]
pub(crate) struct OwnPod {
    reader: Background<Allocations>,
    /// This pod's identity (`identity.*`, the Downward API): the labels of every GPU while
    /// the kubelet's answer is not known.
    own: PodRef,
    health: Health,
    /// Failures the pipeline counted against this stage (overruns).
    counted: BTreeMap<String, u64>,
    /// Whether unmatched MIG instances were logged.
    warned_mig: bool,
    /// The last answer: the pod's devices do not change while it lives, so it stands while
    /// the kubelet cannot be read.
    last: Option<Arc<Allocations>>,
}

impl OwnPod {
    /// This pod's attribution from `kubelet` (made for this pod), read every `every`; `own`
    /// while unknown.
    #[must_use]
    pub(crate) fn new(mut kubelet: Kubelet, own: PodRef, every: Duration) -> OwnPod {
        let mut log = LogLimiter::default();
        // Whether "the kubelet does not serve Get" was logged since the last answer.
        let mut told_unsupported = false;
        let reader = Background::start(
            "truthscale-kubelet",
            every,
            move || kubelet.read(),
            move |answer| match answer {
                Ok(_) => told_unsupported = false,
                Err(e @ SourceError::Unsupported(_)) => {
                    if !std::mem::replace(&mut told_unsupported, true) {
                        tracing::warn!(
                            source = KUBELET,
                            kind = e.kind(),
                            error = %e,
                            "The kubelet does not serve Get (Kubernetes before 1.27, or the feature gate KubeletPodResourcesGet off, its default before 1.34); GPUs stay labelled with this pod, as without sidecar.pod_resources, until a first answer (an earlier answer stands) (counted in truthscale_source_errors_total{{source=\"kubelet\",kind=\"unsupported\"}}; logged once)."
                        );
                    }
                }
                Err(e) => {
                    if log.allow(KUBELET) {
                        tracing::warn!(
                            source = KUBELET,
                            kind = e.kind(),
                            error = %e,
                            "Cannot read this pod's resources from the kubelet; its last answer stands (a pod's devices do not change while it lives), and before any answer every GPU this container sees is labelled with this pod, as without sidecar.pod_resources, until it answers (counted in truthscale_source_errors_total{{source=\"kubelet\"}}; repeats logged every 30 s)."
                        );
                    }
                }
            },
        );
        OwnPod {
            reader,
            own,
            health: Health::default(),
            counted: BTreeMap::new(),
            warned_mig: false,
            last: None,
        }
    }
}

impl Stage for OwnPod {
    fn name(&self) -> &'static str {
        KUBELET
    }

    fn apply(&mut self, tick: &mut Tick<'_>) {
        let (allocations, errors) = self.reader.current(tick.stale_after);
        self.health = Health {
            up: allocations.is_some(),
            errors,
        };
        if allocations.is_some() {
            self.last.clone_from(&allocations);
        }
        match &self.last {
            Some(a) => {
                let unknown = a.attribute_own(tick.produced);
                if unknown > 0 && !std::mem::replace(&mut self.warned_mig, true) {
                    tracing::warn!(
                        source = KUBELET,
                        instances = unknown,
                        "GPUs whose holders this pod's allocation cannot tell (MIG instances without their own UUID: dcgm-exporter labels an instance with its parent GPU's, and the kubelet names instances by their MIG UUID; or device ids truthscale cannot match, such as the index strategy's `0:1`; or GPUs listed under a resource not among sidecar.resource_names) keep the pod labels the source gave, and count as this pod's where those name it. Read MIG GPUs through NVML (--source nvml), and use the device plugin's uuid strategy, to attribute them. Logged once."
                    );
                }
                tick.held = Some(
                    tick.produced
                        .samples
                        .iter()
                        .flat_map(|s| &s.entities)
                        .filter(|e| a.held_by_own(e, &self.own))
                        .map(|e| e.id.key())
                        .collect(),
                );
            }
            None => {
                for e in tick
                    .produced
                    .samples
                    .iter_mut()
                    .flat_map(|s| &mut s.entities)
                {
                    e.id.pod.get_or_insert_with(|| self.own.clone());
                }
            }
        }
    }

    fn health(&self) -> SourceHealth {
        with_own(self.health.report(KUBELET), &self.counted)
    }

    fn count(&mut self, kind: &str) {
        *self.counted.entry(kind.to_string()).or_default() += 1;
    }

    fn attributes(&self) -> bool {
        true
    }
}
