//! The workloads of a fleet: devices read by several tracks merged, pods and GPUs without
//! pods, their names and the fleet's GPU model.

use super::FleetInput;
use super::track::Track;
use crate::gpus::GpuSpec;
use std::collections::{BTreeMap, BTreeSet};

/// The workload's display names, unique: a pod on several GPUs is named with its GPU.
pub(super) fn names(tracks: &[&Track]) -> Vec<String> {
    let base: Vec<String> = tracks
        .iter()
        .map(|t| t.pod.clone().unwrap_or_else(|| t.gpu.clone()))
        .collect();
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for b in &base {
        *count.entry(b.as_str()).or_default() += 1;
    }
    tracks
        .iter()
        .zip(&base)
        .map(|(t, b)| {
            if count[b.as_str()] > 1 && t.pod.is_some() {
                format!("{b} on {}", t.gpu)
            } else {
                b.clone()
            }
        })
        .collect()
}

/// The devices held by several pods, each one workload ([`devices`]).
pub(super) struct Merged {
    tracks: Vec<Track>,
    /// Each track taken into a merged workload (its index in [`FleetInput::tracks`]), and
    /// that workload's index in `tracks`.
    of: BTreeMap<usize, usize>,
    gpus: BTreeSet<String>,
}

/// One physical GPU, one place in the sizing. A whole GPU's tracks under several pods at
/// once are one device's counters read once per holder (dcgm-exporter, and each holder's
/// sidecar, write a time-sliced GPU's series once per pod): merged into one workload named
/// by its holders, its demand counted once. A GPU whose own series carry no pod but whose
/// holders node mode's allocation info names ([`FleetInput::held`], holders with no series
/// of their own there) is that workload too while they held it, as is a pod-less series
/// read while a pod's was. Pods that held the GPU one after another (never read at the same
/// step, nor at the same step as one read with the other) stay workloads of their own, and
/// the GPU's pod-less series beside them (its free time) is no pod's: the tracks read at
/// once are joined, and so on through every pair that was. MIG instances are devices of
/// their own and never merged.
pub(super) fn devices(input: &FleetInput, notes: &mut Vec<String>) -> Merged {
    let mut by_gpu: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, t) in input.tracks.iter().enumerate().filter(|(_, t)| !t.is_mig) {
        if t.pod.is_some() || input.held.contains_key(&t.gpu) {
            by_gpu.entry(t.gpu.as_str()).or_default().push(i);
        }
    }
    let mut merged = Merged {
        tracks: Vec::new(),
        of: BTreeMap::new(),
        gpus: BTreeSet::new(),
    };
    for (gpu, tracks) in by_gpu {
        let (members, held_only) = members(input, gpu, &tracks);
        for group in read_at_once(&members) {
            let device: Vec<&Track> = group.iter().map(|&k| members[k].track.as_ref()).collect();
            let mut holders: BTreeSet<&str> =
                device.iter().filter_map(|t| t.pod.as_deref()).collect();
            if group.iter().any(|&k| members[k].cut) {
                holders.extend(held_only.iter().copied());
            }
            let mut one = device[0].clone();
            for t in &device[1..] {
                one.merge_copy(t);
            }
            one.granted = granted_together(&device, &holders);
            one.pod = Some(holders.into_iter().collect::<Vec<_>>().join(" + "));
            for &k in &group {
                merged.of.insert(members[k].index, merged.tracks.len());
            }
            merged.tracks.push(one);
            merged.gpus.insert(gpu.to_owned());
        }
    }
    if !merged.gpus.is_empty() {
        notes.push(format!(
            "{} GPU(s) held by several pods at once, or time-sliced under node mode, are sized once each, as one workload named by their holders: {}",
            merged.gpus.len(),
            merged.gpus.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    merged
}

/// One of a GPU's tracks in [`devices`]: a pod's, or the GPU's own pod-less one.
struct Member<'a> {
    /// Its index in [`FleetInput::tracks`].
    index: usize,
    /// The track; a pod-less one held by holders named only by node mode's allocation info
    /// is cut to the points they held it at.
    track: std::borrow::Cow<'a, Track>,
    /// Whether it is such a cut: the workload of those holders, alone or not.
    cut: bool,
}

/// The tracks of `gpu` (`tracks`, indices into [`FleetInput::tracks`]) as [`Member`]s, the
/// pod-less ones first, and the holders node mode's allocation info names with no series of
/// their own. A pod-less track is theirs at the points it names them, and the GPU's free
/// time elsewhere; it is left out where they held it at no point it read.
fn members<'a>(
    input: &'a FleetInput,
    gpu: &str,
    tracks: &[usize],
) -> (Vec<Member<'a>>, Vec<&'a str>) {
    let (pod_less, pods): (Vec<usize>, Vec<usize>) =
        tracks.iter().partition(|&&i| input.tracks[i].pod.is_none());
    let own: BTreeSet<&str> = pods
        .iter()
        .filter_map(|&i| input.tracks[i].pod.as_deref())
        .collect();
    // The holders with no series of their own, and the points any of them held it at.
    let mut held_only: Vec<&str> = Vec::new();
    let mut at: BTreeSet<usize> = BTreeSet::new();
    for (pod, points) in input.held.get(gpu).into_iter().flat_map(|h| &h.pods) {
        if !own.contains(pod.as_str()) {
            held_only.push(pod);
            at.extend(points);
        }
    }
    let mut out = Vec::new();
    for index in pod_less {
        let t = &input.tracks[index];
        if held_only.is_empty() {
            out.push(Member {
                index,
                track: std::borrow::Cow::Borrowed(t),
                cut: false,
            });
        } else if let Some(cut) = t.only_at(&at) {
            out.push(Member {
                index,
                track: std::borrow::Cow::Owned(cut),
                cut: true,
            });
        }
    }
    out.extend(pods.into_iter().map(|index| Member {
        index,
        track: std::borrow::Cow::Borrowed(&input.tracks[index]),
        cut: false,
    }));
    (out, held_only)
}

/// A holder's track: a pod's, or a pod-less one cut to its holders' points.
fn is_holders(m: &Member<'_>) -> bool {
    m.track.pod.is_some() || m.cut
}

/// One GPU's [`Member`]s grouped by being read at once ([`Track::overlaps`]), a holder's
/// track ([`is_holders`]) with any other, and through every such pair: the groups with
/// more than one track or a holder's pod-less track, each in the order given.
fn read_at_once(members: &[Member<'_>]) -> Vec<Vec<usize>> {
    let mut group: Vec<usize> = (0..members.len()).collect();
    for a in 0..members.len() {
        for b in a + 1..members.len() {
            let (ga, gb) = (group[a], group[b]);
            let linked = is_holders(&members[a]) || is_holders(&members[b]);
            if ga != gb && linked && members[a].track.overlaps(&members[b].track) {
                for g in &mut group {
                    if *g == gb {
                        *g = ga;
                    }
                }
            }
        }
    }
    let mut out: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (k, &g) in group.iter().enumerate() {
        out.entry(g).or_default().push(k);
    }
    out.into_values()
        .filter(|g| g.len() > 1 || members[g[0]].cut)
        .collect()
}

/// The share of a GPU its holders were granted together, where every holder has a track
/// with a grant ([`Track::granted`]): their sum, at most the whole GPU. `None` (the whole
/// GPU) where any holder has none: holders without a grant share what is left.
fn granted_together(tracks: &[&Track], holders: &BTreeSet<&str>) -> Option<f64> {
    if holders.is_empty() {
        return None;
    }
    let mut sum = 0.0;
    for h in holders {
        let track = tracks.iter().find(|t| t.pod.as_deref() == Some(*h))?;
        sum += track.granted?;
    }
    Some(sum.min(1.0))
}

/// The workloads: one per device ([`devices`]), the tracks with a pod when any has one
/// (unit `pod`), else every GPU as one workload (unit `gpu`, with a note that allocation is
/// then unknown).
pub(super) fn workloads<'a>(
    input: &'a FleetInput,
    merged: &'a Merged,
    notes: &mut Vec<String>,
) -> (&'static str, Vec<&'a Track>) {
    // Each merged device where its first track was.
    let mut emitted = BTreeSet::new();
    let mut with_pod: Vec<&Track> = Vec::new();
    for (i, t) in input.tracks.iter().enumerate() {
        if let Some(&m) = merged.of.get(&i) {
            if emitted.insert(m) {
                with_pod.push(&merged.tracks[m]);
            }
        } else if t.pod.is_some() {
            with_pod.push(t);
        }
    }
    if with_pod.is_empty() {
        if !input.tracks.is_empty() {
            notes.push(
                "no GPU carried pod labels (pod, namespace): each GPU is treated as one workload, allocation is unknown, and savings are counted against the GPUs reporting".to_owned(),
            );
        }
        ("gpu", input.tracks.iter().collect())
    } else {
        ("pod", with_pod)
    }
}

/// In the pod analysis, the GPUs that never carried a pod (sorted, each once): left out of
/// it, and named in a note.
pub(super) fn gpus_without_pods(
    input: &FleetInput,
    unit: &str,
    work: &[&Track],
    notes: &mut Vec<String>,
) -> Vec<String> {
    let mut gpus_without_pods: Vec<String> = if unit == "pod" {
        let pod_gpus: BTreeSet<&str> = work.iter().map(|t| t.gpu.as_str()).collect();
        input
            .tracks
            .iter()
            .filter(|t| t.pod.is_none() && !pod_gpus.contains(t.gpu.as_str()))
            .map(|t| t.gpu.clone())
            .collect()
    } else {
        Vec::new()
    };
    gpus_without_pods.sort();
    gpus_without_pods.dedup();
    if !gpus_without_pods.is_empty() {
        notes.push(format!(
            "{} GPU(s) never carried pod labels and are left out of the pod analysis (counted in gpus_reporting only): {}",
            gpus_without_pods.len(),
            gpus_without_pods.join(", ")
        ));
    }
    gpus_without_pods
}

/// The fleet's model (the most common among the physical GPUs the workloads hold: a GPU
/// split into seven MIG instances counts once) and one GPU's memory in MiB: the largest
/// total measured on a whole GPU of that model, else the catalog's figure, else the largest
/// total measured on any whole GPU.
pub(super) fn fleet_gpu(
    work: &[&Track],
    notes: &mut Vec<String>,
) -> (Option<&'static GpuSpec>, Option<u64>) {
    let mut gpus: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut specs: BTreeMap<&str, &'static GpuSpec> = BTreeMap::new();
    for t in work {
        if let Some(s) = t.spec {
            gpus.entry(s.key).or_default().insert(t.gpu.as_str());
            specs.insert(s.key, s);
        }
    }
    let models: BTreeMap<&str, (usize, &'static GpuSpec)> = gpus
        .iter()
        .map(|(k, g)| (*k, (g.len(), specs[k])))
        .collect();
    let fleet_spec = models
        .values()
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.key.cmp(a.1.key)))
        .map(|x| x.1);
    if models.len() > 1 {
        notes.push(format!(
            "the fleet mixes {} models; packing places every workload on the most common one, {}, and sums each workload's saturation, a fraction of its own GPU, as if of that one (not converted between models: the packing is approximate)",
            models.len(),
            fleet_spec.map_or("?", |s| s.name)
        ));
    }
    let measured_total = work
        .iter()
        .filter(|t| !t.is_mig && t.spec.map(|s| s.key) == fleet_spec.map(|s| s.key))
        .filter_map(|t| t.memory_total_mib)
        .max();
    let gpu_mib: Option<u64> = measured_total
        .map(u64::from)
        .or_else(|| fleet_spec.map(|s| s.memory_bytes / (1 << 20)))
        .or_else(|| {
            work.iter()
                .filter(|t| !t.is_mig)
                .filter_map(|t| t.memory_total_mib)
                .max()
                .map(u64::from)
        });
    if measured_total.is_none() && gpu_mib.is_some() && fleet_spec.is_some() {
        notes.push("no total-memory series for the fleet's model: one GPU's memory is the catalog's figure".to_owned());
    }
    (fleet_spec, gpu_mib)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::test_support::{GIB, input, pod, steady};
    use crate::fleet::track::Point;
    use crate::fleet::{Binding, FleetConfig, analyze};

    /// A time-sliced GPU is one device in the sizing, whichever way its history names its
    /// holders: dcgm-exporter writes its series once per holder (two copies), node mode
    /// without pods (its holders in the allocation info). With a sole holder's GPU beside it:
    /// busy claim 2 GPUs, compute 0.5 + 0.2 = 0.7, memory (20 + 10) / 80 = 0.375 GPUs, packed
    /// onto 1 GPU of the 2 allocated, 1 freed. Counted per holder, the shared GPU read 1.7
    /// compute and 3 busy GPUs.
    #[test]
    fn a_time_sliced_gpu_is_sized_once_however_its_holders_are_written() {
        let steps = 60;
        let shared = |name: &str| {
            pod(name, "n/gpu 0", 0..steps, |_| {
                (Some(0.5), Some(1.0), Some(20.0))
            })
        };
        let sole = pod("ns/c", "n/gpu 1", 0..steps, |_| {
            (Some(0.2), Some(1.0), Some(10.0))
        });
        let per_holder = input(vec![shared("ns/a"), shared("ns/b"), sole.clone()], steps);
        let mut node_mode = input(vec![shared("x"), sole], steps);
        node_mode.tracks[0].pod = None;
        let all: BTreeSet<usize> = (0..steps).collect();
        node_mode.held.insert(
            "n/gpu 0".into(),
            crate::fleet::HeldBy {
                pods: BTreeMap::from([("ns/a".into(), all.clone()), ("ns/b".into(), all)]),
            },
        );
        for (how, fleet) in [("per holder", per_holder), ("node mode", node_mode)] {
            let r = analyze(&fleet, &FleetConfig::default());
            let s = &r.sizing;
            assert_eq!(r.workloads, 2, "{how}");
            assert!(r.gpus_without_pods.is_empty(), "{how}");
            assert_eq!(s.allocated_gpus.unwrap().p99, 2.0, "{how}");
            assert_eq!(s.busy_claim_gpus.summary.unwrap().p99, 2.0, "{how}");
            assert_eq!(s.compute_demand_gpus.summary.unwrap().p99, 0.7, "{how}");
            assert_eq!(s.memory_demand_gpus.summary.unwrap().p99, 0.375, "{how}");
            let p = s.packing.as_ref().unwrap();
            assert_eq!(p.gpus, 1, "{how}");
            let names: Vec<&str> = p.bins[0].workloads.iter().map(String::as_str).collect();
            assert!(names.contains(&"ns/a + ns/b"), "{how}: {names:?}");
            let sv = r.savings.unwrap();
            assert_eq!(
                (sv.baseline_gpus, sv.needed_gpus, sv.gpus_freed),
                (2, 1, 1),
                "{how}"
            );
            assert!(
                r.notes.iter().any(|n| n.contains("sized once each")),
                "{how}"
            );
        }
    }

    #[test]
    fn gpus_without_pod_labels_are_their_own_workloads() {
        let mut g = Track::new(None, "n/gpu 0".into());
        g.record(0, Point::new(Some(0.3), Some(0.5), None, Some(GIB)));
        let r = analyze(&input(vec![g.clone()], 1), &FleetConfig::default());
        assert_eq!(r.workload_unit, "gpu");
        assert_eq!(r.sizing.allocated_gpus, None);
        assert!(r.notes[0].starts_with("no GPU carried pod labels"));
        // Beside pods, such a GPU is left out of the pod analysis and named.
        let r = analyze(&input(vec![g, steady(0, 1)], 1), &FleetConfig::default());
        assert_eq!(r.workloads, 1);
        assert_eq!(r.gpus_without_pods, ["n/gpu 0"]);
        assert_eq!(r.sizing.gpus_reporting.unwrap().max, 2.0);
        assert_eq!(r.sizing.allocated_gpus.unwrap().max, 1.0);
    }

    /// Without pod labels, savings count against the GPUs reporting; without one GPU's
    /// memory, or without a workload whose demand was measured, there is no packing.
    #[test]
    fn gpus_pack_against_those_reporting_and_no_packing_says_why() {
        let gpu = |name: &str, p: Point| {
            let mut t = Track::new(None, name.to_owned());
            t.memory_total_mib = Some(81_920);
            for s in 0..3 {
                t.record(s, p);
            }
            t
        };
        let p = Point::new(Some(0.2), Some(0.5), None, Some(GIB));
        let r = analyze(
            &input(vec![gpu("n/gpu 0", p), gpu("n/gpu 1", p)], 3),
            &FleetConfig {
                cost_per_gpu_hour: Some(3.0),
                ..FleetConfig::default()
            },
        );
        assert_eq!(r.gpu_model, None);
        assert_eq!(r.gpu_memory_bytes, Some(80.0 * GIB));
        let sv = r.savings.as_ref().unwrap();
        assert_eq!((sv.baseline_gpus, sv.needed_gpus, sv.gpus_freed), (2, 1, 1));
        assert_eq!((sv.hours, sv.cost), (0.05, Some(0.15000000000000002)));
        assert!(sv.assumptions[1].contains("GPUs reporting (allocation unknown)"));
        // No total memory and no catalog model: one GPU's memory is not known.
        let mut t = gpu("n/gpu 0", p);
        t.memory_total_mib = None;
        let r = analyze(&input(vec![t], 3), &FleetConfig::default());
        assert_eq!(r.sizing.packing, None);
        assert_eq!(r.savings, None);
        assert!(
            r.notes
                .iter()
                .any(|n| n.starts_with("no packing: one GPU's memory")),
            "{:?}",
            r.notes
        );
        assert_eq!(r.sizing.memory_demand_gpus.summary, None);
        assert_eq!(r.sizing.pooled_lower_bound.as_ref().unwrap().gpus, 1);
        // Memory known, but no workload with both demands.
        let blind = Point::new(None, Some(0.5), None, Some(GIB));
        let r = analyze(
            &input(vec![gpu("n/gpu 0", blind)], 3),
            &FleetConfig::default(),
        );
        assert_eq!(r.sizing.packing, None);
        assert_eq!(
            r.notes.last().unwrap(),
            "no packing: no workload had both saturation and memory measured"
        );
        let pooled = r.sizing.pooled_lower_bound.unwrap();
        assert_eq!(
            (pooled.compute_gpus, pooled.binding),
            (None, Binding::Memory)
        );
    }
}
