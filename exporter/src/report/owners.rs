//! The workload behind each pod at the window's end, for the idle section: truthscale's allocation info where
//! node mode wrote owners on it, else kube-state-metrics' `kube_pod_owner`, a ReplicaSet
//! followed to its Deployment through `kube_replicaset_owner`. Each idle workload then gets
//! the command that would suspend it ([`truthscale_core::fleet::suspend_command`]); truthscale
//! runs none of them.

use crate::history::History;
use std::collections::{BTreeMap, HashMap};
use truthscale_core::fleet::{Idle, suspend_command};
use truthscale_core::model::PodOwner;

/// Each pod's owner, keyed `namespace/pod`, with a note on where they came from.
pub(super) struct Owners {
    by_pod: HashMap<String, PodOwner>,
    /// What was read, or why nothing was.
    pub note: String,
}

/// The owner named by a series' `owner_kind` and `owner_name` (kube-state-metrics writes
/// `<none>` for a pod without one).
fn named(labels: &BTreeMap<String, String>) -> Option<PodOwner> {
    let kind = labels
        .get("owner_kind")
        .filter(|k| !k.is_empty() && *k != "<none>")?;
    let name = labels
        .get("owner_name")
        .filter(|n| !n.is_empty() && *n != "<none>")?;
    Some(PodOwner {
        kind: kind.clone(),
        name: name.clone(),
    })
}

fn key(ns: Option<&String>, name: &str) -> String {
    match ns.filter(|n| !n.is_empty()) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// Read the owners at the window's end (the pods still there: those whose idle GPUs can
/// be given back), one small query a source. A failure leaves the owners unknown, with the
/// reason in the note: they name what to suspend, the report stands without them.
pub(super) fn read(history: &History) -> Owners {
    match read_at_end(history) {
        Ok(o) => o,
        Err(e) => Owners {
            by_pod: HashMap::new(),
            note: format!(
                "pod owners not read ({e:#}): idle workloads are listed without owner or command"
            ),
        },
    }
}

fn read_at_end(history: &History) -> anyhow::Result<Owners> {
    let by = |metric: &str, what: &str| {
        history.series_at_end(&format!(
            "max by (namespace, {what}, owner_kind, owner_name) ({metric})"
        ))
    };
    let mut by_pod = HashMap::new();
    for labels in by(truthscale_core::catalog::GPU_ALLOCATION.name, "pod")? {
        if let (Some(pod), Some(o)) = (labels.get("pod"), named(&labels)) {
            by_pod.insert(key(labels.get("namespace"), pod), o);
        }
    }
    if !by_pod.is_empty() {
        return Ok(Owners {
            by_pod,
            note: "owners from truthscale's allocation info (node mode's pod reader)".into(),
        });
    }
    let mut replicasets = HashMap::new();
    for labels in by("kube_replicaset_owner", "replicaset")? {
        if let (Some(rs), Some(o)) = (labels.get("replicaset"), named(&labels)) {
            replicasets.insert(key(labels.get("namespace"), rs), o);
        }
    }
    for labels in by("kube_pod_owner", "pod")? {
        let (Some(pod), Some(mut o)) = (labels.get("pod"), named(&labels)) else {
            continue;
        };
        if o.kind == "ReplicaSet"
            && let Some(d) = replicasets.get(&key(labels.get("namespace"), &o.name))
        {
            o = d.clone();
        }
        by_pod.insert(key(labels.get("namespace"), pod), o);
    }
    let note = if by_pod.is_empty() {
        "no pod owners in this Prometheus (kube-state-metrics' kube_pod_owner, or truthscale's allocation info with node mode's pod reader): idle workloads are listed without owner or command".into()
    } else {
        "owners from kube-state-metrics' kube_pod_owner (a ReplicaSet followed to its Deployment through kube_replicaset_owner)".into()
    };
    Ok(Owners { by_pod, note })
}

impl Owners {
    /// Give each idle workload its owner and the command that would suspend it.
    pub(super) fn apply(&self, idle: &mut Idle) {
        for w in &mut idle.workloads {
            let Some(o) = self.by_pod.get(&w.workload) else {
                continue;
            };
            let ns = w.workload.split_once('/').map_or("default", |(ns, _)| ns);
            w.command = suspend_command(ns, o);
            w.owner = Some(o.clone());
        }
    }
}
