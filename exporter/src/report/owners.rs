//! The workload behind each pod at the window's end, for the idle section: truthscale's allocation info where
//! node mode wrote owners on it, else kube-state-metrics' `kube_pod_owner`, a ReplicaSet
//! followed to its Deployment through `kube_replicaset_owner`, a StatefulSet to its Kubeflow
//! Notebook where `kube_pod_labels` carries the pod's `notebook-name` label (else the
//! StatefulSet stays the owner). Each idle workload then gets
//! the command that would suspend it ([`truthscale_core::fleet::suspend_command`]); truthscale
//! runs none of them.

use crate::history::History;
use std::collections::{BTreeMap, HashMap};
use truthscale_core::fleet::{Idle, suspend_command};
use truthscale_core::model::{NOTEBOOK_NAME_LABEL, PodOwner};

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
    let pods = by("kube_pod_owner", "pod")?;
    let replicasets = by("kube_replicaset_owner", "replicaset")?;
    // The notebook label only matters for a StatefulSet's pods: asked only when there is one.
    let notebooks = if pods
        .iter()
        .any(|l| l.get("owner_kind").is_some_and(|k| k == "StatefulSet"))
    {
        let label = notebook_label();
        history.series_at_end(&format!(
            "max by (namespace, pod, {label}) (kube_pod_labels{{{label}!=\"\"}})"
        ))?
    } else {
        Vec::new()
    };
    let by_pod = from_kube_state_metrics(&pods, &replicasets, &notebooks);
    let note = if by_pod.is_empty() {
        "no pod owners in this Prometheus (kube-state-metrics' kube_pod_owner, or truthscale's allocation info with node mode's pod reader): idle workloads are listed without owner or command".into()
    } else {
        "owners from kube-state-metrics' kube_pod_owner (a ReplicaSet followed to its Deployment through kube_replicaset_owner; a StatefulSet to its Kubeflow Notebook where kube_pod_labels carries the pod's notebook-name label)".into()
    };
    Ok(Owners { by_pod, note })
}

/// `label_notebook_name`: kube-state-metrics' name of the pod label Kubeflow's notebook
/// controller sets ([`NOTEBOOK_NAME_LABEL`]), on `kube_pod_labels` only where its
/// `--metric-labels-allowlist` names it (`pods=[notebook-name]`).
fn notebook_label() -> String {
    truthscale_core::catalog::pod_label_name(NOTEBOOK_NAME_LABEL)
}

/// Each pod's owner from kube-state-metrics' series at the window's end: `kube_pod_owner`
/// (`pods`), a ReplicaSet followed to its Deployment through `kube_replicaset_owner`
/// (`replicasets`), a StatefulSet to its Kubeflow Notebook where the pod's
/// `label_notebook_name` on `kube_pod_labels` (`notebooks`) is the StatefulSet's name
/// ([`PodOwner::through_notebook`]). Without that label (kube-state-metrics exports no pod
/// label unless allowlisted) the StatefulSet stays the owner, and the command scales it.
fn from_kube_state_metrics(
    pods: &[BTreeMap<String, String>],
    replicasets: &[BTreeMap<String, String>],
    notebooks: &[BTreeMap<String, String>],
) -> HashMap<String, PodOwner> {
    let mut deployments = HashMap::new();
    for labels in replicasets {
        if let (Some(rs), Some(o)) = (labels.get("replicaset"), named(labels)) {
            deployments.insert(key(labels.get("namespace"), rs), o);
        }
    }
    let label = notebook_label();
    let notebook: HashMap<String, &str> = notebooks
        .iter()
        .filter_map(|l| {
            let (pod, n) = (l.get("pod")?, l.get(&label)?);
            Some((key(l.get("namespace"), pod), n.as_str()))
        })
        .collect();
    let mut by_pod = HashMap::new();
    for labels in pods {
        let (Some(pod), Some(mut o)) = (labels.get("pod"), named(labels)) else {
            continue;
        };
        let pod = key(labels.get("namespace"), pod);
        if o.kind == "ReplicaSet"
            && let Some(d) = deployments.get(&key(labels.get("namespace"), &o.name))
        {
            o = d.clone();
        }
        o = o.through_notebook(notebook.get(&pod).copied());
        by_pod.insert(pod, o);
    }
    by_pod
}

impl Owners {
    /// Give each idle workload its owner and the command that would suspend it.
    pub(super) fn apply(&self, idle: &mut Idle) {
        for w in &mut idle.workloads {
            let pod = pod_of_workload(&w.workload);
            let Some(o) = self.by_pod.get(pod) else {
                continue;
            };
            let ns = pod.split_once('/').map_or("default", |(ns, _)| ns);
            w.command = suspend_command(ns, o);
            w.owner = Some(o.clone());
        }
    }
}

/// The pod a workload's name names: a pod on several GPUs is named with its GPU
/// (`ns/pod on node/gpu`; a pod's name holds no space); pods merged on one device
/// (`a + b`) name no one pod, and find no owner.
fn pod_of_workload(name: &str) -> &str {
    name.split_once(" on ").map_or(name, |(pod, _)| pod)
}

#[cfg(test)]
impl Owners {
    /// The owners `read` makes of kube-state-metrics' series at the window's end.
    pub(super) fn from_series(
        pods: &[BTreeMap<String, String>],
        replicasets: &[BTreeMap<String, String>],
        notebooks: &[BTreeMap<String, String>],
    ) -> Owners {
        Owners {
            by_pod: from_kube_state_metrics(pods, replicasets, notebooks),
            note: String::new(),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A series' labels.
    pub(in crate::report) fn row(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn owner_row(ns: &str, pod: &str, kind: &str, name: &str) -> BTreeMap<String, String> {
        row(&[
            ("namespace", ns),
            ("pod", pod),
            ("owner_kind", kind),
            ("owner_name", name),
        ])
    }

    /// A pod that moved between GPUs is named with each GPU: its owner is still the pod's.
    #[test]
    fn a_pod_named_with_its_gpu_finds_its_owner() {
        assert_eq!(pod_of_workload("dev/nb on n2/GPU-n2-1"), "dev/nb");
        assert_eq!(pod_of_workload("dev/nb"), "dev/nb");
        assert_eq!(pod_of_workload("a/x + a/y"), "a/x + a/y");
    }

    /// kube-state-metrics names a Notebook's pod's owner as the StatefulSet; with the pod's
    /// `notebook-name` label on `kube_pod_labels` (allowlisted) equal to its name, the
    /// Notebook. Another notebook's name, the label in another namespace, or no label: the
    /// StatefulSet stays. A ReplicaSet still goes to its Deployment.
    #[test]
    fn a_statefulset_whose_pod_names_it_as_its_notebook_is_the_notebook() {
        let pods = [
            owner_row("research", "nb-alice-0", "StatefulSet", "nb-alice"),
            owner_row("research", "db-0", "StatefulSet", "db"),
            owner_row("research", "nb-bob-0", "StatefulSet", "nb-bob"),
            owner_row("serving", "web-7d9f8b-x2k4q", "ReplicaSet", "web-7d9f8b"),
        ];
        let replicasets = [row(&[
            ("namespace", "serving"),
            ("replicaset", "web-7d9f8b"),
            ("owner_kind", "Deployment"),
            ("owner_name", "web"),
        ])];
        let label = |ns: &str, pod: &str, n: &str| {
            row(&[("namespace", ns), ("pod", pod), ("label_notebook_name", n)])
        };
        let notebooks = [
            label("research", "nb-alice-0", "nb-alice"),
            label("research", "db-0", "nb-alice"),
            label("other", "nb-bob-0", "nb-bob"),
        ];
        let got = from_kube_state_metrics(&pods, &replicasets, &notebooks);
        let owner = |k: &str| got.get(k).map(|o| (o.kind.as_str(), o.name.as_str()));
        assert_eq!(got.len(), 4);
        assert_eq!(owner("research/nb-alice-0"), Some(("Notebook", "nb-alice")));
        assert_eq!(owner("research/db-0"), Some(("StatefulSet", "db")));
        assert_eq!(owner("research/nb-bob-0"), Some(("StatefulSet", "nb-bob")));
        assert_eq!(
            owner("serving/web-7d9f8b-x2k4q"),
            Some(("Deployment", "web"))
        );
    }
}
