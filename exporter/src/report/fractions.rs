//! Fractional sharing read from the same Prometheus (kube-state-metrics): HAMi's
//! `nvidia.com/gpucores`, `nvidia.com/gpumem` and `nvidia.com/gpumem-percentage` requests
//! and KAI's `gpu-fraction` and
//! `gpu-memory` pod annotations, each pod's granted fraction of its GPU
//! ([`truthscale_core::showback::Fraction`]); DRA claims (`kube_pod_resourceclaim_info`) as
//! requested GPUs.

use super::showback::{PodRequests, pod_of};
use crate::history::History;
use std::collections::{BTreeMap, HashMap};
use truthscale_core::showback::{Fraction, Fractions, MeasuredUse};

/// HAMi's requests, by pod and resource (kube-state-metrics sanitises `nvidia.com/gpucores`
/// to `nvidia_com_gpucores`), of these three resources ([`HAMI_RESOURCES`]).
const HAMI: (&str, &str) = (
    "max by (namespace, pod, resource)",
    "kube_pod_container_resource_requests",
);
const HAMI_RESOURCES: &str =
    "resource=~\"nvidia_com_gpucores|nvidia_com_gpumem|nvidia_com_gpumem_percentage\"";

/// The query of `by` over `metric`, its series matched by `more` and within `history`'s
/// pods ([`History::pod_selector`]).
pub(crate) fn pods_query(history: &History, (by, metric): (&str, &str), more: &str) -> String {
    format!("{by} ({metric}{})", history.pod_selector(more))
}

/// KAI's annotations (kube-state-metrics with
/// `--metric-annotations-allowlist=pods=[gpu-fraction,gpu-memory]`).
const KAI: (&str, &str) = (
    "max by (namespace, pod, annotation_gpu_fraction, annotation_gpu_memory)",
    "kube_pod_annotations",
);

/// Each pod's DRA resource claims, by step.
const DRA: (&str, &str) = ("count by (namespace, pod)", "kube_pod_resourceclaim_info");

/// HAMi vGPUmonitor's per-container utilization of its device, by pod: a percent (0 to
/// 100, the SM utilization NVML gives), not a ratio whatever its name says.
const HAMI_USE: (&str, &str) = (
    "sum by (namespace, pod)",
    "hami_container_device_utilization_ratio",
);

/// Each pod's (`namespace/pod`) values by step.
pub(crate) type ByStep = HashMap<String, Vec<(usize, f64)>>;

/// A series' labels and its values by step.
type StepSeries = (BTreeMap<String, String>, Vec<(usize, f64)>);

/// A series' latest finite value.
fn last(values: &[(usize, f64)]) -> Option<f64> {
    values.iter().rev().map(|(_, v)| *v).find(|v| v.is_finite())
}

/// HAMi's requests into `out`: gpucores (percent, above 0 up to 100) as the compute part,
/// gpumem (MiB, above 0) and gpumem-percentage (above 0 up to 100) as the memory part, each
/// pod's latest. Returns the pods whose request was none of them (gpucores or
/// gpumem-percentage 0 or past 100, gpumem 0 or below, or no finite value):
/// their fraction is not known, so they are charged as pods without one; and the pods with
/// one part so refused beside one that reads: charged by the part that reads, that part not
/// known.
pub(crate) fn hami(series: &[StepSeries], out: &mut Fractions) -> (Vec<String>, Vec<String>) {
    let mut refused = Vec::new();
    for (labels, values) in series {
        let Some(pod) = pod_of(labels) else {
            continue;
        };
        let f = out.entry(pod.clone()).or_default();
        match (labels.get("resource").map(String::as_str), last(values)) {
            (Some("nvidia_com_gpucores"), Some(v)) if v > 0.0 && v <= 100.0 => {
                f.compute = Some(v / 100.0);
            }
            (Some("nvidia_com_gpumem"), Some(v)) if v > 0.0 => f.memory_mib = Some(v),
            (Some("nvidia_com_gpumem_percentage"), Some(v)) if v > 0.0 && v <= 100.0 => {
                f.memory_share = Some(v / 100.0);
            }
            _ => refused.push(pod),
        }
    }
    out.retain(|_, f| *f != Fraction::default());
    let (mut partly, mut whole): (Vec<String>, Vec<String>) =
        refused.into_iter().partition(|p| out.contains_key(p));
    for list in [&mut whole, &mut partly] {
        list.sort_unstable();
        list.dedup();
    }
    (whole, partly)
}

/// A KAI annotation of `labels` read as a number above 0 up to `max`: `None` where there is
/// none, `Some(None)` where it does not read.
fn annotation(labels: &BTreeMap<String, String>, key: &str, max: f64) -> Option<Option<f64>> {
    labels.get(key).filter(|v| !v.trim().is_empty()).map(|v| {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v > 0.0 && *v <= max)
    })
}

/// KAI's annotations into `out` (where HAMi gave the pod nothing): `gpu-fraction` (above 0
/// up to 1) as the compute part, `gpu-memory` (MiB) as the memory part, from the pod's
/// series seen last (a pod made again under its name with a new annotation has a series of
/// each); returns the GPU-hours each such pod requested (each series' fraction × the hours
/// it was seen, every series), `hours_per_step` a step's, and the pods with an annotation
/// that does not read, in any series (named in a note: that part of theirs is not known).
pub(crate) fn kai(
    series: &[StepSeries],
    out: &mut Fractions,
    hours_per_step: f64,
) -> (PodRequests, Vec<String>) {
    let hami: std::collections::HashSet<String> = out.keys().cloned().collect();
    let mut requested = HashMap::new();
    let mut refused = Vec::new();
    // The last step of the series each pod's fraction was taken from.
    let mut taken_at: HashMap<String, usize> = HashMap::new();
    for (labels, values) in series {
        let Some(pod) = pod_of(labels) else { continue };
        if hami.contains(&pod) {
            continue;
        }
        let compute = annotation(labels, "annotation_gpu_fraction", 1.0);
        let memory = annotation(labels, "annotation_gpu_memory", f64::INFINITY);
        if compute == Some(None) || memory == Some(None) {
            refused.push(pod.clone());
        }
        let (compute, memory_mib) = (compute.flatten(), memory.flatten());
        if compute.is_none() && memory_mib.is_none() {
            continue;
        }
        if let Some(c) = compute {
            let by_step: &mut BTreeMap<usize, f64> = requested.entry(pod.clone()).or_default();
            for (step, _) in values {
                *by_step.entry(*step).or_default() += c * hours_per_step;
            }
        }
        let last_step = values.iter().map(|(s, _)| *s).max().unwrap_or(0);
        if taken_at.get(&pod).is_some_and(|&at| at > last_step) {
            continue;
        }
        taken_at.insert(pod.clone(), last_step);
        out.insert(
            pod,
            Fraction {
                compute,
                memory_mib,
                ..Fraction::default()
            },
        );
    }
    refused.sort_unstable();
    refused.dedup();
    (requested, refused)
}

/// The GPU-hours each pod's DRA claims requested: one GPU a claim, at each step it was
/// seen.
pub(crate) fn claimed(series: &[StepSeries], hours_per_step: f64) -> PodRequests {
    let mut out = PodRequests::new();
    for (labels, values) in series {
        let Some(pod) = pod_of(labels) else { continue };
        let by_step = out.entry(pod).or_default();
        for (step, v) in values.iter().filter(|(_, v)| v.is_finite() && *v >= 0.0) {
            *by_step.entry(*step).or_default() += v * hours_per_step;
        }
    }
    out
}

/// Each pod's own measured use by step, a fraction of the whole GPU: HAMi's percent over
/// 100; a value outside 0 to 100 (or not finite) is no reading, and counted (the second).
pub(crate) fn measured(series: &[StepSeries]) -> (ByStep, usize) {
    let mut out = ByStep::new();
    let mut refused = 0;
    for (labels, values) in series {
        let Some(pod) = pod_of(labels) else { continue };
        let read = out.entry(pod).or_default();
        for (s, v) in values {
            if (0.0..=100.0).contains(v) {
                read.push((*s, v / 100.0));
            } else {
                refused += 1;
            }
        }
    }
    out.retain(|_, read| !read.is_empty());
    (out, refused)
}

/// The measured use `by_step` at each point of `per` steps: the mean of its steps read.
#[must_use]
pub(crate) fn by_point(by_step: &ByStep, per: usize) -> MeasuredUse {
    let per = per.max(1);
    let mut out = MeasuredUse::new();
    for (pod, values) in by_step {
        let mut sums: std::collections::BTreeMap<usize, (f64, f64)> = BTreeMap::new();
        for (s, v) in values {
            let e = sums.entry(s / per).or_default();
            *e = (e.0 + v, e.1 + 1.0);
        }
        out.insert(
            pod.clone(),
            sums.into_iter().map(|(p, (sum, n))| (p, sum / n)).collect(),
        );
    }
    out
}

/// Folds the fractions and claims into the requested GPU-hours `requested` (kube-state-
/// metrics' `nvidia_com_gpu`, `None` where none): a HAMi pod's requested GPUs count by its
/// compute part (gpucores 25 of 1 GPU: a quarter), else by its gpumem-percentage (a memory
/// size alone counts whole: the GPU's memory is not known here); a KAI pod's fraction while annotated;
/// a DRA claim one GPU where the pod requested none through `nvidia_com_gpu`.
pub(crate) fn fold_requested(
    requested: &mut Option<PodRequests>,
    fractions: &Fractions,
    kai: PodRequests,
    claims: PodRequests,
) {
    if let Some(r) = requested.as_mut() {
        for (pod, by_step) in r.iter_mut() {
            if let Some(c) = fractions
                .get(pod)
                .and_then(|f| f.compute.or(f.memory_share))
            {
                by_step.values_mut().for_each(|h| *h *= c);
            }
        }
    }
    if kai.is_empty() && claims.is_empty() {
        return;
    }
    let r = requested.get_or_insert_with(HashMap::new);
    for (pod, h) in kai.into_iter().chain(claims) {
        r.entry(pod).or_insert(h);
    }
}

/// Reads the fractions and claims, folding the claims and fractions into `requested`;
/// what was found goes to `notes`.
///
/// # Errors
/// Prometheus refusing a query.
pub(crate) fn read(
    history: &mut History,
    requested: &mut Option<PodRequests>,
    notes: &mut Vec<String>,
) -> anyhow::Result<(Fractions, ByStep)> {
    let hours_per_step = history.step_seconds() / 3600.0;
    let mut fractions = Fractions::new();
    let scoped = |query| pods_query(history, query, "");
    let (refused, partly) = hami(
        &history.series_by_step(&pods_query(history, HAMI, HAMI_RESOURCES))?,
        &mut fractions,
    );
    if !refused.is_empty() {
        notes.push(format!("{} pod(s) request through HAMi none of gpucores above 0 up to 100, gpumem above 0 or gpumem-percentage above 0 up to 100, so their fraction is not known and they are charged as pods without one: {}", refused.len(), refused.join(", ")));
    }
    if !partly.is_empty() {
        notes.push(format!("{} pod(s) request through HAMi a gpucores or gpumem-percentage not above 0 up to 100, or a gpumem not above 0, beside a part that reads, so that part of their request is not known and they are charged by the other: {}", partly.len(), partly.join(", ")));
    }
    let hami_pods = fractions.len();
    let (kai_requested, kai_refused) = kai(
        &history.series_by_step(&scoped(KAI))?,
        &mut fractions,
        hours_per_step,
    );
    if !kai_refused.is_empty() {
        notes.push(format!("{} pod(s) carry a KAI gpu-fraction annotation not above 0 up to 1, or a gpu-memory annotation not above 0 MiB, so that part of their request is not known and they are charged without it: {}", kai_refused.len(), kai_refused.join(", ")));
    }
    let claims = claimed(&history.series_by_step(&scoped(DRA))?, hours_per_step);
    if hami_pods > 0 {
        notes.push(format!("{hami_pods} pod(s) request a fraction of a GPU through HAMi (kube_pod_container_resource_requests nvidia_com_gpucores, nvidia_com_gpumem, nvidia_com_gpumem_percentage)"));
    }
    if fractions.len() > hami_pods {
        notes.push(format!(
            "{} pod(s) carry KAI's gpu-fraction or gpu-memory annotation (kube_pod_annotations)",
            fractions.len() - hami_pods
        ));
    }
    if !claims.is_empty() {
        notes.push(format!("{} pod(s) hold DRA resource claims (kube_pod_resourceclaim_info): each claim counts as one GPU requested where the pod requests none through nvidia_com_gpu (the series names no device class)", claims.len()));
    }
    let (used, refused) = measured(&history.series_by_step(&scoped(HAMI_USE))?);
    if refused > 0 {
        notes.push(format!("{refused} step(s) of HAMi's use (hami_container_device_utilization_ratio, summed over a pod's containers) were outside 0 to 100 % and not read: the use of those steps is unknown"));
    }
    if !used.is_empty() {
        notes.push(format!("{} pod(s) have their own use measured by HAMi (hami_container_device_utilization_ratio, a percent read over 100): their use is that, not unknown", used.len()));
    }
    fold_requested(requested, &fractions, kai_requested, claims);
    Ok((fractions, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each pod's GPU-hours over every step.
    fn total(r: &PodRequests) -> HashMap<String, f64> {
        r.iter()
            .map(|(p, by)| (p.clone(), by.values().sum()))
            .collect()
    }

    fn series(labels: &[(&str, &str)], values: &[f64]) -> StepSeries {
        (
            labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            values.iter().copied().enumerate().collect(),
        )
    }

    /// kube-state-metrics' HAMi requests: gpucores 25 is a quarter of the compute, gpumem
    /// 20000 MiB the memory part; gpucores beyond 100 or 0 is no fraction.
    #[test]
    fn hami_requests_are_fractions() {
        let mut f = Fractions::new();
        let s = [
            series(
                &[
                    ("namespace", "a"),
                    ("pod", "p"),
                    ("resource", "nvidia_com_gpucores"),
                ],
                &[50.0, 25.0],
            ),
            series(
                &[
                    ("namespace", "a"),
                    ("pod", "p"),
                    ("resource", "nvidia_com_gpumem"),
                ],
                &[20_000.0],
            ),
            series(
                &[
                    ("namespace", "b"),
                    ("pod", "q"),
                    ("resource", "nvidia_com_gpucores"),
                ],
                &[250.0],
            ),
        ];
        let (refused, partly) = hami(&s, &mut f);
        assert_eq!(refused, ["b/q"], "gpucores 250 is no fraction");
        assert!(partly.is_empty());
        let p = f["a/p"];
        assert_eq!(p.compute, Some(0.25), "the latest");
        assert_eq!(p.memory_mib, Some(20_000.0));
        assert!(!f.contains_key("b/q"), "{f:?}");
        // gpucores 250 beside a gpumem that reads, and a gpucores with no finite value: the
        // memory part charged, the other part named, never dropped in silence.
        let mut f = Fractions::new();
        let part = |pod: &str, resource: &str, v: f64| {
            series(
                &[("namespace", "c"), ("pod", pod), ("resource", resource)],
                &[v],
            )
        };
        let s = [
            part("r", "nvidia_com_gpucores", 250.0),
            part("r", "nvidia_com_gpumem", 20_000.0),
            part("n", "nvidia_com_gpucores", f64::NAN),
        ];
        let (refused, partly) = hami(&s, &mut f);
        assert_eq!(
            (refused, partly),
            (vec!["c/n".to_string()], vec!["c/r".to_string()])
        );
        // gpumem-percentage 25 is a quarter of the memory; past 100 it is no fraction.
        let mut g = Fractions::new();
        let s = [
            part("m", "nvidia_com_gpumem_percentage", 25.0),
            part("o", "nvidia_com_gpumem_percentage", 150.0),
        ];
        let (refused, partly) = hami(&s, &mut g);
        assert_eq!((refused, partly.len()), (vec!["c/o".to_string()], 0));
        assert_eq!(
            (g["c/m"].compute, g["c/m"].memory_mib, g["c/m"].memory_share),
            (None, None, Some(0.25))
        );
        assert_eq!(
            (f["c/r"].compute, f["c/r"].memory_mib),
            (None, Some(20_000.0))
        );
    }

    /// A pod made again under its name with a new annotation has a series of each: both
    /// count in its request (0.25 × 2 h + 0.5 × 2 h), the fraction is the latest series',
    /// and a later one that does not read is named.
    #[test]
    fn every_kai_series_of_a_pod_counts() {
        let at = |steps: std::ops::Range<usize>| -> Vec<(usize, f64)> {
            steps.map(|s| (s, 1.0)).collect()
        };
        let labels = |fraction: &str| -> BTreeMap<String, String> {
            [
                ("namespace", "t"),
                ("pod", "k"),
                ("annotation_gpu_fraction", fraction),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
        };
        // The later series sorts first by its labels.
        let s = [(labels("0.25"), at(2..4)), (labels("0.5"), at(0..2))];
        let mut f = Fractions::new();
        let (requested, refused) = kai(&s, &mut f, 1.0);
        assert_eq!(
            requested["t/k"],
            BTreeMap::from([(0, 0.5), (1, 0.5), (2, 0.25), (3, 0.25)]),
            "each step at the fraction annotated then"
        );
        assert_eq!(f["t/k"].compute, Some(0.25), "the latest");
        assert!(refused.is_empty());
        let s = [(labels("0.5"), at(0..2)), (labels("1.5"), at(2..4))];
        let (requested, refused) = kai(&s, &mut Fractions::new(), 1.0);
        assert_eq!(total(&requested), HashMap::from([("t/k".to_string(), 1.0)]));
        assert_eq!(refused, ["t/k"]);
    }

    /// KAI's annotations: gpu-fraction 0.5 seen at 4 one-hour steps requests 2 GPU-hours;
    /// gpu-memory alone is the memory part; a pod HAMi already gave a fraction keeps it.
    #[test]
    fn kai_annotations_are_fractions_and_requests() {
        let mut f = Fractions::from([(
            "a/h".to_string(),
            Fraction {
                compute: Some(0.25),
                ..Fraction::default()
            },
        )]);
        let s = [
            series(
                &[
                    ("namespace", "t"),
                    ("pod", "k"),
                    ("annotation_gpu_fraction", "0.5"),
                ],
                &[1.0; 4],
            ),
            series(
                &[
                    ("namespace", "t"),
                    ("pod", "m"),
                    ("annotation_gpu_memory", "2000"),
                ],
                &[1.0],
            ),
            series(
                &[
                    ("namespace", "a"),
                    ("pod", "h"),
                    ("annotation_gpu_fraction", "0.9"),
                ],
                &[1.0],
            ),
            series(&[("namespace", "t"), ("pod", "plain")], &[1.0]),
        ];
        let (requested, refused) = kai(&s, &mut f, 1.0);
        assert_eq!(f["t/k"].compute, Some(0.5));
        assert_eq!(f["t/m"].memory_mib, Some(2000.0));
        assert_eq!(f["t/m"].compute, None);
        assert_eq!(f["a/h"].compute, Some(0.25));
        assert!(!f.contains_key("t/plain"));
        assert_eq!(total(&requested), HashMap::from([("t/k".to_string(), 2.0)]));
        assert_eq!(refused, Vec::<String>::new());
        // Annotations that do not read are named, never taken for no annotation.
        let s = [
            series(
                &[
                    ("namespace", "t"),
                    ("pod", "big"),
                    ("annotation_gpu_fraction", "1.5"),
                ],
                &[1.0],
            ),
            series(
                &[
                    ("namespace", "t"),
                    ("pod", "word"),
                    ("annotation_gpu_fraction", "abc"),
                    ("annotation_gpu_memory", "2000"),
                ],
                &[1.0],
            ),
            series(
                &[
                    ("namespace", "t"),
                    ("pod", "zero"),
                    ("annotation_gpu_memory", "0"),
                ],
                &[1.0],
            ),
            series(
                &[
                    ("namespace", "t"),
                    ("pod", "empty"),
                    ("annotation_gpu_fraction", ""),
                ],
                &[1.0],
            ),
        ];
        let mut f = Fractions::new();
        let (requested, refused) = kai(&s, &mut f, 1.0);
        assert_eq!(refused, ["t/big", "t/word", "t/zero"]);
        assert!(requested.is_empty());
        assert_eq!(f.keys().collect::<Vec<_>>(), ["t/word"]);
        assert_eq!(
            (f["t/word"].compute, f["t/word"].memory_mib),
            (None, Some(2000.0))
        );
    }

    /// A DRA claim is one GPU requested at each step it is seen (3 steps of 0.5 h, one claim:
    /// 1.5 GPU-hours) where the pod requested none through `nvidia_com_gpu`; a HAMi pod's
    /// request of 1 GPU over 4 h with gpucores 25 is 1 GPU-hour.
    #[test]
    fn claims_and_fractions_fold_into_the_requests() {
        let claims = claimed(
            &[
                series(
                    &[("namespace", "d"), ("pod", "c"), ("claim_name", "gpu")],
                    &[1.0; 3],
                ),
                series(&[("namespace", "a"), ("pod", "p")], &[1.0]),
            ],
            0.5,
        );
        assert_eq!(total(&claims)["d/c"], 1.5);
        let f = Fractions::from([(
            "a/p".to_string(),
            Fraction {
                compute: Some(0.25),
                ..Fraction::default()
            },
        )]);
        let four_hours = BTreeMap::from([(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0)]);
        let mut requested = Some(PodRequests::from([("a/p".to_string(), four_hours)]));
        fold_requested(&mut requested, &f, PodRequests::new(), claims);
        let r = total(&requested.unwrap());
        assert_eq!(
            r["a/p"], 1.0,
            "its own request, by its fraction; not its claim"
        );
        assert_eq!(r["d/c"], 1.5);
        let mut none = None;
        let claim = PodRequests::from([("d/c".to_string(), BTreeMap::from([(0, 1.0)]))]);
        fold_requested(
            &mut none,
            &Fractions::new(),
            PodRequests::new(),
            claim.clone(),
        );
        assert_eq!(none, Some(claim));
    }

    /// HAMi's per-container utilization is a percent: 40 is 0.4 of the GPU; 250 is no
    /// reading; points of 2 steps take the mean of the steps read.
    #[test]
    fn hami_use_is_a_percent_over_100() {
        let (m, refused) = measured(&[
            series(
                &[("namespace", "a"), ("pod", "p")],
                &[40.0, 20.0, 250.0, 10.0],
            ),
            // A pod with no reading in range is no pod measured.
            series(&[("namespace", "a"), ("pod", "q")], &[-1.0, f64::NAN]),
        ]);
        assert_eq!(m["a/p"], vec![(0, 0.4), (1, 0.2), (3, 0.1)]);
        assert!(!m.contains_key("a/q"), "{m:?}");
        assert_eq!(refused, 3, "250, -1 and NaN counted");
        let p = by_point(&m, 2);
        let p = &p["a/p"];
        assert!((p[&0] - 0.3).abs() < 1e-12, "{p:?}");
        assert!((p[&1] - 0.1).abs() < 1e-12, "{p:?}");
    }
}
