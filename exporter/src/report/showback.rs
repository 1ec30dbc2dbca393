//! `report --by`: the groups of the fleet's pods (a namespace, a pod label, a node, a GPU
//! model), the attributes of pods the same Prometheus holds beside the GPU series
//! (kube-state-metrics' GPU requests and pod labels, or truthscale's own allocation info),
//! and the CSV rendering of [`truthscale_core::showback`].

use crate::attribution::apiserver::label_keys;
use crate::history::History;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use truthscale_core::fleet::{FleetInput, HeldBy, Track};
use truthscale_core::showback::{
    GroupCost, GroupHours, Holders, Holding, Period, Requested, Showback,
};

/// What pods are grouped by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum By {
    /// The pod's namespace.
    Namespace,
    /// The node of the pod's GPU.
    Node,
    /// The model of the pod's GPU.
    Model,
    /// A pod label: its Kubernetes key and its Prometheus name (`label_team`).
    Label { key: String, name: &'static str },
}

/// The group of pods that no value names.
pub(crate) const NONE: &str = "(none)";

impl By {
    /// `namespace`, `node`, `model`, or a pod label's key (`team`, `label:team`,
    /// `app.kubernetes.io/name`).
    ///
    /// # Errors
    /// A label key Kubernetes would not take.
    pub(crate) fn parse(s: &str) -> Result<By, String> {
        let s = s.trim();
        match s {
            "namespace" => Ok(By::Namespace),
            "node" => Ok(By::Node),
            "model" => Ok(By::Model),
            _ => {
                let key = s.strip_prefix("label:").unwrap_or(s);
                let keys = label_keys(&[key.to_string()]).map_err(|e| {
                    format!(
                        "{key:?} is neither namespace, node, model nor a pod label key: {}",
                        e.message
                    )
                })?;
                let k = keys.into_iter().next().ok_or("give a pod label key")?;
                Ok(By::Label {
                    key: k.key,
                    name: k.name,
                })
            }
        }
    }

    /// The name in the output.
    pub(crate) fn describe(&self) -> String {
        match self {
            By::Namespace => "namespace".into(),
            By::Node => "node".into(),
            By::Model => "model".into(),
            By::Label { key, .. } => format!("label:{key}"),
        }
    }
}

/// One holder of a GPU at one step, from truthscale's allocation info: the GPU's key (as the
/// report's tracks name it), the pod (`namespace/pod`), the step, and its per-process
/// estimate of its part of the device's effective compute with its method, where attributed
/// (an estimate: shown apart, never billed).
#[derive(Debug, Clone)]
pub(crate) struct Held {
    gpu: String,
    pod: String,
    step: usize,
    part: Option<f64>,
    method: Option<String>,
}

/// GPU-hours requested, by pod (`namespace/pod`) and by step.
pub(crate) type PodRequests = HashMap<String, BTreeMap<usize, f64>>;

/// What the same Prometheus says of each pod (`namespace/pod`).
#[derive(Debug, Default)]
pub(crate) struct PodAttributes {
    /// The holders of each GPU at each step (truthscale's own history only: node mode's
    /// allocation info, and the per-process estimates of shared GPUs' parts).
    pub held: Vec<Held>,
    /// GPU-hours requested by each pod at each step; `None` when no request series exists.
    pub requested: Option<PodRequests>,
    /// Each pod's granted fraction of its GPU (HAMi's requests, KAI's annotations).
    pub fractions: truthscale_core::showback::Fractions,
    /// Each pod's own measured use by step, a fraction of the whole GPU (HAMi).
    pub measured: super::fractions::ByStep,
    /// The pod label's value (`--by` a label).
    pub labels: HashMap<String, String>,
    /// Where the labels came from, and what was not there, in words.
    pub notes: Vec<String>,
}

/// `namespace/pod` of a series' labels.
pub(crate) fn pod_of(labels: &BTreeMap<String, String>) -> Option<String> {
    let pod = labels.get("pod").filter(|p| !p.is_empty())?;
    Some(match labels.get("namespace").filter(|n| !n.is_empty()) {
        Some(ns) => format!("{ns}/{pod}"),
        None => pod.clone(),
    })
}

/// The report's key of the GPU a series names: `node/uuid`, or `node/gpu N`, the node
/// `CLUSTER/NODE` with `--cluster-label` (as the GPUs' own tracks name it).
fn gpu_of(labels: &BTreeMap<String, String>, cluster_label: Option<&str>) -> String {
    let node = crate::history::own_node(labels, cluster_label);
    let node = node.as_deref().unwrap_or("?");
    match (
        labels.get("uuid").filter(|u| !u.is_empty()),
        labels.get("gpu"),
    ) {
        (Some(u), _) => format!("{node}/{u}"),
        (None, Some(g)) => format!("{node}/gpu {g}"),
        (None, None) => format!("{node}/gpu ?"),
    }
}

/// Node mode's allocation info over truthscale's history: each whole GPU's holders at each
/// step, with the per-process estimates of their parts of the device's effective compute
/// where attributed (`truthscale_pod_effective_compute_estimate_ratio`).
fn read_held(history: &mut History) -> anyhow::Result<Vec<Held>> {
    let m = history.matchers().to_owned();
    let cluster_label = history.cluster_label().map(str::to_owned);
    let cluster = cluster_label.as_deref();
    let by = cluster.map(|c| format!("{c}, ")).unwrap_or_default();
    let with = |extra: &str| {
        if m.is_empty() {
            format!("{{{extra}}}")
        } else {
            format!("{{{extra},{m}}}")
        }
    };
    let alloc = history.series_by_step(&format!(
        "max by ({by}node, uuid, gpu, namespace, pod) (truthscale_gpu_allocation_info{})",
        with("mig_instance=\"\"")
    ))?;
    let parts = history.series_by_step(&format!(
        "max by ({by}node, uuid, gpu, namespace, pod, method) ({}{})",
        truthscale_core::catalog::POD_EFFECTIVE_COMPUTE_ESTIMATE.name,
        with("pod!=\"\"")
    ))?;
    let mut part_at: HashMap<(String, String, usize), (f64, Option<String>)> = HashMap::new();
    for (labels, values) in &parts {
        let Some(pod) = pod_of(labels) else { continue };
        for (step, v) in values.iter().filter(|(_, v)| v.is_finite()) {
            part_at.insert(
                (gpu_of(labels, cluster), pod.clone(), *step),
                (*v, labels.get("method").cloned()),
            );
        }
    }
    let mut held = Vec::new();
    for (labels, values) in &alloc {
        let Some(pod) = pod_of(labels) else { continue };
        let gpu = gpu_of(labels, cluster);
        for (step, _) in values.iter().filter(|(_, v)| v.is_finite()) {
            let part = part_at.get(&(gpu.clone(), pod.clone(), *step));
            held.push(Held {
                gpu: gpu.clone(),
                pod: pod.clone(),
                step: *step,
                part: part.map(|p| p.0),
                method: part.and_then(|p| p.1.clone()),
            });
        }
    }
    Ok(held)
}

/// Each GPU's holders over the window and the points they held it at (`per` steps a
/// point), from node mode's allocation info (`held`): what the sizing counts a time-sliced
/// GPU's workload by ([`FleetInput::held`]).
#[must_use]
pub(crate) fn held_by_gpu(held: &[Held], per: usize) -> BTreeMap<String, HeldBy> {
    let mut out: BTreeMap<String, HeldBy> = BTreeMap::new();
    for h in held {
        let holders = out.entry(h.gpu.clone()).or_default();
        let points = holders.pods.entry(h.pod.clone()).or_default();
        points.insert(h.step / per.max(1));
    }
    out
}

/// Node mode's holders of each GPU at each step, where `--by` did not read them: none for
/// a history of dcgm-exporter's series (their pods are on the series).
///
/// # Errors
/// Prometheus refusing the query.
pub(crate) fn read_held_steps(history: &mut History) -> anyhow::Result<Vec<Held>> {
    if history.family() != crate::history::Family::Truthscale {
        return Ok(Vec::new());
    }
    read_held(history)
}

/// The holders of GPUs whose own series name no pod, with their groups.
#[must_use]
/// `per`: steps per point of `input` (a holder at any step of a point holds it at that
/// point, once).
pub(crate) fn holders(input: &FleetInput, by: &By, attrs: &PodAttributes, per: usize) -> Holders {
    let model: HashMap<&str, Option<&str>> = input
        .tracks
        .iter()
        .map(|t| (t.gpu.as_str(), t.model.as_deref()))
        .collect();
    holders_in(&attrs.held, per, |h| match by {
        By::Namespace => h
            .pod
            .split_once('/')
            .map_or(NONE.to_string(), |(ns, _)| ns.to_string()),
        By::Node => node_of(&h.gpu),
        By::Model => model
            .get(h.gpu.as_str())
            .copied()
            .flatten()
            .unwrap_or(NONE)
            .to_string(),
        By::Label { .. } => attrs
            .labels
            .get(&h.pod)
            .cloned()
            .unwrap_or_else(|| NONE.to_string()),
    })
}

/// The holders `held` of GPUs whose own series name no pod, each in the group `group_of`
/// gives it; `per` steps per point.
pub(crate) fn holders_in(held: &[Held], per: usize, group_of: impl Fn(&Held) -> String) -> Holders {
    let mut out = Holders::new();
    for h in held {
        let group = group_of(h);
        let at = out
            .entry(h.gpu.clone())
            .or_default()
            .entry(h.step / per.max(1))
            .or_default();
        if per <= 1 || !at.iter().any(|x| x.pod == h.pod) {
            at.push(Holding {
                pod: h.pod.clone(),
                group,
                effective_compute_estimate: h.part,
                method: h.method.clone(),
            });
        }
    }
    for steps in out.values_mut() {
        for hs in steps.values_mut() {
            hs.sort_by(|a, b| a.pod.cmp(&b.pod));
        }
    }
    out
}

/// The most GPUs one pod may request: more is no GPU count (a broken exporter, or a
/// hostile store) and is refused rather than summed into absurd GPU-hours.
pub(crate) const MAX_REQUESTED_GPUS: f64 = 1e6;

/// A pod's GPU requests by step, each checked: a number from 0 to [`MAX_REQUESTED_GPUS`].
///
/// # Errors
/// The first step with another value, naming the pod and the series.
fn check_requests(pod: &str, values: &[(usize, f64)]) -> anyhow::Result<()> {
    if let Some((step, v)) = values
        .iter()
        .find(|(_, v)| !(0.0..=MAX_REQUESTED_GPUS).contains(v))
    {
        let v = if !v.is_finite() || v.abs() < 1e9 {
            v.to_string()
        } else {
            format!("{v:e}")
        };
        anyhow::bail!(
            "kube_pod_container_resource_requests{{resource=\"nvidia_com_gpu\"}} of pod {pod} is {v} at step {step}: not a GPU count (0 to {MAX_REQUESTED_GPUS:e}); the requests are refused rather than summed (fix the series, or leave out --by)"
        );
    }
    Ok(())
}

/// Groups listed in the text, CSV and HTML showback by default (`--top`).
pub(crate) const DEFAULT_TOP: usize = 50;

/// The sum of an optional value over groups where unknown in one is unknown in all.
fn all_known(groups: &[GroupHours], f: impl Fn(&GroupHours) -> Option<f64>) -> Option<f64> {
    groups.iter().map(f).sum()
}

/// The sum of an optional value over the groups that have it (`None`: none has).
fn where_any(groups: &[GroupHours], f: impl Fn(&GroupHours) -> Option<f64>) -> Option<f64> {
    groups.iter().filter_map(f).reduce(|a, b| a + b)
}

/// One row holding the sums of `groups`, named for how many they are.
fn rest_row(groups: &[GroupHours]) -> GroupHours {
    let sum = |f: fn(&GroupHours) -> f64| groups.iter().map(f).sum::<f64>();
    let cost: Option<Vec<&GroupCost>> = groups.iter().map(|g| g.cost.as_ref()).collect();
    let cost = cost.map(|c| {
        let sum = |f: fn(&GroupCost) -> f64| c.iter().map(|g| f(g)).sum::<f64>();
        GroupCost {
            allocated: sum(|c| c.allocated),
            requested: c.iter().map(|g| g.requested).sum(),
            used: sum(|c| c.used),
            idle: sum(|c| c.idle),
            unmeasured: sum(|c| c.unmeasured),
            use_unknown: sum(|c| c.use_unknown),
            unavailable: where_any(groups, |g| g.cost.as_ref().and_then(|c| c.unavailable)),
            effective_compute: c
                .iter()
                .filter_map(|g| g.effective_compute)
                .reduce(|a, b| a + b),
        }
    });
    GroupHours {
        group: format!("(the rest: {} groups)", groups.len()),
        workloads: groups.iter().map(|g| g.workloads).sum(),
        allocated_gpu_hours: sum(|g| g.allocated_gpu_hours),
        requested_gpu_hours: all_known(groups, |g| g.requested_gpu_hours),
        used_gpu_hours: sum(|g| g.used_gpu_hours),
        idle_gpu_hours: sum(|g| g.idle_gpu_hours),
        unmeasured_gpu_hours: sum(|g| g.unmeasured_gpu_hours),
        use_unknown_gpu_hours: sum(|g| g.use_unknown_gpu_hours),
        unavailable_gpu_hours: where_any(groups, |g| g.unavailable_gpu_hours),
        health_measured_gpu_hours: sum(|g| g.health_measured_gpu_hours),
        busy_gpu_hours: where_any(groups, |g| g.busy_gpu_hours),
        busy_measured_gpu_hours: sum(|g| g.busy_measured_gpu_hours),
        effective_compute_gpu_hours: where_any(groups, |g| g.effective_compute_gpu_hours),
        effective_compute_measured_gpu_hours: sum(|g| g.effective_compute_measured_gpu_hours),
        time_sliced_effective_compute_gpu_hours: where_any(groups, |g| {
            g.time_sliced_effective_compute_gpu_hours
        }),
        effective_compute_estimate_gpu_hours: where_any(groups, |g| {
            g.effective_compute_estimate_gpu_hours
        }),
        saturation_gpu_hours: where_any(groups, |g| g.saturation_gpu_hours),
        saturation_measured_gpu_hours: sum(|g| g.saturation_measured_gpu_hours),
        energy_kwh: where_any(groups, |g| g.energy_kwh),
        energy_measured_gpu_hours: sum(|g| g.energy_measured_gpu_hours),
        energy_cost: where_any(groups, |g| g.energy_cost),
        cost,
        simulated: groups.iter().any(|g| g.simulated),
        assumed_share_gpu_hours: sum(|g| g.assumed_share_gpu_hours),
    }
}

/// For the text, CSV and HTML: each period's first `top` groups (the most allocated), the
/// others folded into one row `(the rest: K groups)` holding their sums (a sum some group
/// does not know is unknown), and a note saying so. The JSON keeps every group.
pub(crate) fn fold_rest(s: &mut Showback, top: usize) {
    let all = s.total.groups.len();
    let mut folded = false;
    for p in std::iter::once(&mut s.total).chain(s.periods.iter_mut()) {
        if p.groups.len() > top + 1 {
            let rest = p.groups.split_off(top);
            p.groups.push(rest_row(&rest));
            folded = true;
        }
    }
    if folded {
        s.notes.push(format!(
            "{all} groups: the {top} most allocated are listed (--top), the others summed in one row; the JSON lists every group"
        ));
    }
}

/// Read the requests (kube-state-metrics' `nvidia_com_gpu`) and, grouping by a label, the
/// pods' labels: kube-state-metrics' `kube_pod_labels` when it holds the label, else
/// truthscale's own allocation info (node mode with `node.pod_labels`).
///
/// # Errors
/// Prometheus refusing a query.
pub(crate) fn read(history: &mut History, by: &By) -> anyhow::Result<PodAttributes> {
    let hours_per_step = history.step_seconds() / 3600.0;
    let mut out = PodAttributes::default();
    if history.family() == crate::history::Family::Truthscale {
        out.held = read_held(history)?;
    }
    let requests = history.series_by_step(&super::fractions::pods_query(
        history,
        (
            "sum by (namespace, pod)",
            "kube_pod_container_resource_requests",
        ),
        "resource=\"nvidia_com_gpu\"",
    ))?;
    if requests.is_empty() {
        out.notes.push("no kube_pod_container_resource_requests{resource=\"nvidia_com_gpu\"} in this Prometheus (kube-state-metrics): requested GPU-hours are unknown".into());
    } else {
        let mut requested = HashMap::new();
        for (labels, values) in &requests {
            if let Some(pod) = pod_of(labels) {
                check_requests(&pod, values)?;
                let by_step: &mut BTreeMap<usize, f64> = requested.entry(pod).or_default();
                for (step, v) in values {
                    *by_step.entry(*step).or_default() += v * hours_per_step;
                }
            }
        }
        out.requested = Some(requested);
    }
    (out.fractions, out.measured) =
        super::fractions::read(history, &mut out.requested, &mut out.notes)?;
    if let Some(label) = history.cluster_label() {
        out.notes.push(format!("the pods' requests, labels and fractions are read by namespace and pod name across clusters (--cluster-label {label} names the GPUs' clusters only): pods of the same name in two clusters share them"));
    }
    if let By::Label { key, name } = by {
        let mut found = false;
        for (metric, source) in [
            ("kube_pod_labels", "kube-state-metrics' kube_pod_labels"),
            (
                "truthscale_gpu_allocation_info",
                "truthscale's allocation info (node.pod_labels)",
            ),
        ] {
            let by = format!("max by (namespace, pod, {name})");
            let series = history.series_by_step(&super::fractions::pods_query(
                history,
                (&by, metric),
                "",
            ))?;
            // Each pod's value: the one of its latest series with the label.
            let mut latest: HashMap<String, (usize, String)> = HashMap::new();
            for (labels, values) in &series {
                let (Some(pod), Some(value)) =
                    (pod_of(labels), labels.get(*name).filter(|v| !v.is_empty()))
                else {
                    continue;
                };
                let last = values.iter().map(|(s, _)| *s).max().unwrap_or(0);
                let e = latest.entry(pod).or_insert((last, value.clone()));
                if last >= e.0 {
                    *e = (last, value.clone());
                }
            }
            if !latest.is_empty() {
                out.notes.push(format!(
                    "the pod label {key} ({name}) is read from {source}"
                ));
                out.labels = latest.into_iter().map(|(p, (_, v))| (p, v)).collect();
                found = true;
                break;
            }
        }
        if !found {
            out.notes.push(format!(
                "no pod carries the label {key} ({name}) in kube_pod_labels (kube-state-metrics with --metric-labels-allowlist=pods=[{key}]) or truthscale_gpu_allocation_info (node.pod_labels): every pod is in {NONE}"
            ));
        }
    }
    Ok(out)
}

/// The group of each track (`None`: no pod holds it).
#[must_use]
pub(crate) fn groups(input: &FleetInput, by: &By, attrs: &PodAttributes) -> Vec<Option<String>> {
    input
        .tracks
        .iter()
        .map(|t| group_of(t, by, attrs))
        .collect()
}

/// The node of a GPU's key (`node/uuid`, `node/gpu N`; the node `CLUSTER/NODE` with
/// `--cluster-label`): all before its last `/`, since a UUID or `gpu N` holds none.
fn node_of(gpu: &str) -> String {
    gpu.rsplit_once('/')
        .map_or(NONE.to_string(), |(n, _)| n.to_string())
}

fn group_of(t: &Track, by: &By, attrs: &PodAttributes) -> Option<String> {
    let pod = t.pod.as_deref()?;
    Some(match by {
        By::Namespace => pod
            .split_once('/')
            .map_or(NONE.to_string(), |(ns, _)| ns.to_string()),
        By::Node => node_of(&t.gpu),
        By::Model => t.model.clone().unwrap_or_else(|| NONE.to_string()),
        By::Label { .. } => attrs
            .labels
            .get(pod)
            .cloned()
            .unwrap_or_else(|| NONE.to_string()),
    })
}

/// The requested GPU-hours by group and point (`per` steps a point): a pod's group is its
/// attribute's (namespace, label) or its GPU's (node, model; a pod seen on no GPU is in
/// `(no GPU seen)`).
#[must_use]
pub(crate) fn requested_by_group(
    input: &FleetInput,
    groups: &[Option<String>],
    by: &By,
    attrs: &PodAttributes,
    per: usize,
) -> Requested {
    let Some(requested) = &attrs.requested else {
        return BTreeMap::new();
    };
    let on_gpu: HashMap<&str, &str> = input
        .tracks
        .iter()
        .zip(groups)
        .filter_map(|(t, g)| Some((t.pod.as_deref()?, g.as_deref()?)))
        .collect();
    // In pod order, so that a group's sum is the same floating-point sum on every run.
    let mut pods: Vec<(&String, &BTreeMap<usize, f64>)> = requested.iter().collect();
    pods.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = Requested::new();
    for (pod, by_step) in pods {
        let group = match by {
            By::Namespace => pod
                .split_once('/')
                .map_or(NONE.to_string(), |(ns, _)| ns.to_string()),
            By::Label { .. } => attrs
                .labels
                .get(pod)
                .cloned()
                .unwrap_or_else(|| NONE.to_string()),
            By::Node | By::Model => on_gpu
                .get(pod.as_str())
                .map_or_else(|| "(no GPU seen)".to_string(), |g| (*g).to_string()),
        };
        let points = out.entry(group).or_default();
        for (step, h) in by_step {
            *points.entry(step / per.max(1)).or_default() += h;
        }
    }
    out
}

/// The CSV header.
/// `effective_compute_gpu_hours` is the holders' own measured effective compute;
/// `time_sliced_effective_compute_gpu_hours` the measured device total of time-sliced GPUs
/// billed as the allocation policy splits them; `effective_compute_estimate_gpu_hours` the
/// SM-busy split, an estimate never billed. `busy_gpu_hours`, `effective_compute_gpu_hours`
/// and `saturation_gpu_hours` are sums over the hours each was measured, given last
/// (`*_measured_gpu_hours`): their share is over those, not over the allocated hours.
const CSV_HEADER: &str = "window_start,window_end,by,group,workloads,allocated_gpu_hours,requested_gpu_hours,used_gpu_hours,idle_gpu_hours,unmeasured_gpu_hours,use_unknown_gpu_hours,busy_gpu_hours,effective_compute_gpu_hours,saturation_gpu_hours,allocated_cost,idle_cost,time_sliced_effective_compute_gpu_hours,effective_compute_estimate_gpu_hours,energy_kwh,energy_cost,unavailable_gpu_hours,unavailable_cost,simulated,busy_measured_gpu_hours,effective_compute_measured_gpu_hours,saturation_measured_gpu_hours,health_measured_gpu_hours,energy_measured_gpu_hours,assumed_share_gpu_hours,overallocated_gpu_hours";

/// A CSV field: quoted when it holds a comma, a quote or a line break.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn num(x: Option<f64>) -> String {
    x.map_or_else(String::new, |v| format!("{v:.6}"))
}

/// One row per group and period (the whole window without periods), plus an `(unallocated)`
/// row per period, and an `(allocation unknown)` row where any GPU-hours were; an unknown
/// value is an empty field, never 0. `simulated` is `true` on a row with any GPU-hour of a
/// simulated GPU. `overallocated_gpu_hours`, on the `(unallocated)` row only, is the
/// GPU-hours the groups were charged beyond the GPUs' own (fractions held past one), by
/// which the rows' hours and costs add up to more than the fleet's.
///
/// # Errors
/// Writing fails.
pub(crate) fn write_csv(
    out: &mut impl Write,
    s: &Showback,
    start_ms: i64,
    step_seconds: f64,
) -> std::io::Result<()> {
    writeln!(out, "{CSV_HEADER}")?;
    let periods: Vec<&Period> = if s.periods.is_empty() {
        vec![&s.total]
    } else {
        s.periods.iter().collect()
    };
    let at = |step: usize| {
        crate::times::rfc3339(start_ms + (step as f64 * step_seconds * 1000.0) as i64)
    };
    for p in periods {
        let (from, to) = (at(p.start_step), at(p.start_step + p.steps));
        for g in &p.groups {
            write_group_row(out, &s.by, (&from, &to), g)?;
        }
        // What no pod held of the GPUs lost to health: the fleet's unavailable hours less
        // the groups'.
        let unheld_down = p.unallocated_unavailable_gpu_hours;
        writeln!(
            out,
            "{from},{to},{},(unallocated),,{},,,,,,,,,{},,,,{},{},{},,{},,,,{},{},{},{}",
            field(&s.by),
            num(Some(p.unallocated_gpu_hours)),
            num(p.unallocated_cost),
            num(p.energy.as_ref().map(|e| e.unallocated_kwh)),
            num(p.energy.as_ref().and_then(|e| e.unallocated_cost)),
            num(unheld_down),
            p.unallocated_simulated,
            num(Some(p.unallocated_health_measured_gpu_hours)),
            num(p.energy.as_ref().map(|e| e.unallocated_measured_gpu_hours)),
            num(Some(p.unallocated_assumed_share_gpu_hours)),
            num(Some(p.overallocated_gpu_hours)),
        )?;
        // Nothing of the GPU read and no holder named: not known whether a pod held it, so
        // no energy or health was read of it either.
        if p.allocation_unknown_gpu_hours > 0.0 {
            writeln!(
                out,
                "{from},{to},{},(allocation unknown),,{},,,,,,,,,{},,,,,,,,{},,,,,,,",
                field(&s.by),
                num(Some(p.allocation_unknown_gpu_hours)),
                num(p.allocation_unknown_cost),
                p.allocation_unknown_simulated,
            )?;
        }
    }
    Ok(())
}

/// A group's row of a period from `from` to `to`.
fn write_group_row(
    out: &mut impl Write,
    by: &str,
    (from, to): (&str, &str),
    g: &GroupHours,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{from},{to},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},",
        field(by),
        field(&g.group),
        g.workloads,
        num(Some(g.allocated_gpu_hours)),
        num(g.requested_gpu_hours),
        num(Some(g.used_gpu_hours)),
        num(Some(g.idle_gpu_hours)),
        num(Some(g.unmeasured_gpu_hours)),
        num(Some(g.use_unknown_gpu_hours)),
        num(g.busy_gpu_hours),
        num(g.effective_compute_gpu_hours),
        num(g.saturation_gpu_hours),
        num(g.cost.as_ref().map(|c| c.allocated)),
        num(g.cost.as_ref().map(|c| c.idle)),
        num(g.time_sliced_effective_compute_gpu_hours),
        num(g.effective_compute_estimate_gpu_hours),
        num(g.energy_kwh),
        num(g.energy_cost),
        num(g.unavailable_gpu_hours),
        num(g.cost.as_ref().and_then(|c| c.unavailable)),
        g.simulated,
        num(Some(g.busy_measured_gpu_hours)),
        num(Some(g.effective_compute_measured_gpu_hours)),
        num(Some(g.saturation_measured_gpu_hours)),
        num(Some(g.health_measured_gpu_hours)),
        num(Some(g.energy_measured_gpu_hours)),
        num(Some(g.assumed_share_gpu_hours)),
    )
}

#[cfg(test)]
mod tests;
