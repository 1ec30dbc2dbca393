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
pub mod kubelet;

use crate::pipeline::{Health, LogLimiter, Stage, Tick};
use apiserver::{ApiServer, PodLabelReader};
use kubelet::Kubelet;
use std::collections::BTreeMap;
use std::path::PathBuf;
use truthscale_core::exposition::SourceHealth;
use truthscale_core::model::PodRef;

/// The `source` label of the kubelet's health.
pub(crate) const KUBELET: &str = "kubelet";

/// Node mode: every entity attributed from the kubelet's `List` answer.
#[derive(Debug)]
pub(crate) struct NodeAttribution {
    kubelet: Kubelet,
    proc_root: PathBuf,
    health: Health,
    log: LogLimiter,
}

impl NodeAttribution {
    /// Attribution from `kubelet`, reading processes' cgroups under `proc_root`.
    #[must_use]
    pub(crate) fn new(kubelet: Kubelet, proc_root: PathBuf) -> NodeAttribution {
        NodeAttribution {
            kubelet,
            proc_root,
            health: Health::default(),
            log: LogLimiter::default(),
        }
    }
}

impl Stage for NodeAttribution {
    fn name(&self) -> &'static str {
        KUBELET
    }

    fn apply(&mut self, tick: &mut Tick<'_>) {
        let (allocations, error) = self.kubelet.current(tick.stale_after);
        if let Some(e) = error {
            self.health.count(e.kind());
            if self.log.allow(KUBELET) {
                tracing::warn!(
                    source = KUBELET,
                    kind = e.kind(),
                    error = %e,
                    "Cannot read the kubelet's pod resources; GPUs are exported without pod attribution until it answers (counted in truthscale_source_errors_total{{source=\"kubelet\"}}; repeats logged every 30 s)."
                );
            }
        }
        self.health.up = allocations.is_some();
        if let Some(a) = allocations {
            a.attribute(tick.produced, &self.proc_root);
        }
    }

    fn health(&self) -> SourceHealth {
        self.health.report(KUBELET)
    }

    fn count(&mut self, kind: &str) {
        self.health.count(kind);
    }

    fn attributes(&self) -> bool {
        true
    }
}

/// Node mode's pod labels: the reader's last answer (never read on the sampler's thread).
#[derive(Debug)]
pub(crate) struct PodLabels {
    reader: PodLabelReader,
    /// The reader's health, replaced on every tick.
    health: Health,
    /// Failures the pipeline counted against this stage (overruns).
    own: BTreeMap<String, u64>,
}

impl PodLabels {
    /// Start reading labels from `api` on a thread of its own.
    #[must_use]
    pub(crate) fn start(api: ApiServer) -> PodLabels {
        PodLabels {
            reader: PodLabelReader::start(api),
            health: Health::default(),
            own: BTreeMap::new(),
        }
    }
}

impl Stage for PodLabels {
    fn name(&self) -> &'static str {
        apiserver::SOURCE
    }

    fn apply(&mut self, tick: &mut Tick<'_>) {
        let (labels, errors) = self.reader.current();
        if let Some(l) = &labels {
            l.apply(tick.produced);
        }
        self.health = Health {
            up: labels.is_some(),
            errors,
        };
    }

    fn health(&self) -> SourceHealth {
        let mut h = self.health.report(apiserver::SOURCE);
        for (kind, n) in &self.own {
            *h.errors.entry(kind.clone()).or_default() += n;
        }
        h
    }

    fn count(&mut self, kind: &str) {
        *self.own.entry(kind.to_string()).or_default() += 1;
    }
}

/// Sidecar mode with `sidecar.pod_resources`: the kubelet's answer to `Get` for this pod says
/// which of the GPUs this container sees are the pod's. Only those take the pod's labels
/// (from the answer); the others are exported without any. While no answer is known (the
/// kubelet unreadable, or without `Get`), every GPU takes this pod's identity, as without the
/// setting. The GPUs the pod holds are handed on ([`Tick::held`]).
#[derive(Debug)]
pub(crate) struct OwnPod {
    kubelet: Kubelet,
    /// This pod's identity (`identity.*`, the Downward API): the labels of every GPU while
    /// the kubelet's answer is not known.
    own: PodRef,
    health: Health,
    log: LogLimiter,
    /// Whether "the kubelet does not serve Get" was logged since the last answer.
    told_unsupported: bool,
}

impl OwnPod {
    /// This pod's attribution from `kubelet` (made for this pod), `own` while unknown.
    #[must_use]
    pub(crate) fn new(kubelet: Kubelet, own: PodRef) -> OwnPod {
        OwnPod {
            kubelet,
            own,
            health: Health::default(),
            log: LogLimiter::default(),
            told_unsupported: false,
        }
    }

    fn log(&mut self, error: Option<&crate::sources::SourceError>) {
        use crate::sources::SourceError;
        match error {
            None => self.told_unsupported = false,
            Some(e @ SourceError::Unsupported(_)) => {
                if !self.told_unsupported {
                    self.told_unsupported = true;
                    tracing::warn!(
                        source = KUBELET,
                        kind = e.kind(),
                        error = %e,
                        "The kubelet does not serve Get (Kubernetes before 1.27, or the feature gate KubeletPodResourcesGet off, its default before 1.34); GPUs stay labelled with this pod, as without sidecar.pod_resources (counted in truthscale_source_errors_total{{source=\"kubelet\",kind=\"unsupported\"}}; logged once)."
                    );
                }
            }
            Some(e) => {
                if self.log.allow(KUBELET) {
                    tracing::warn!(
                        source = KUBELET,
                        kind = e.kind(),
                        error = %e,
                        "Cannot read this pod's resources from the kubelet; the last answer is used for up to the stale period, then every GPU this container sees is labelled with this pod, as without sidecar.pod_resources, until it answers (counted in truthscale_source_errors_total{{source=\"kubelet\"}}; repeats logged every 30 s)."
                    );
                }
            }
        }
    }
}

impl Stage for OwnPod {
    fn name(&self) -> &'static str {
        KUBELET
    }

    fn apply(&mut self, tick: &mut Tick<'_>) {
        let (allocations, error) = self.kubelet.current(tick.stale_after);
        self.log(error.as_ref());
        if let Some(e) = error {
            self.health.count(e.kind());
        }
        self.health.up = allocations.is_some();
        match &allocations {
            Some(a) => {
                a.attribute_own(tick.produced);
                tick.held = Some(
                    tick.produced
                        .samples
                        .iter()
                        .flat_map(|s| &s.entities)
                        .filter(|e| a.holds(e))
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
        self.health.report(KUBELET)
    }

    fn count(&mut self, kind: &str) {
        self.health.count(kind);
    }

    fn attributes(&self) -> bool {
        true
    }
}
