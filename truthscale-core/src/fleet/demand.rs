//! Demand: nearest-rank and weighted percentiles, the fleet's time-aligned sums of compute,
//! memory and busy GPUs, and the pooled lower bound.

use super::track::{BANDS, Grid, P99_BAND, Point, Track, units_to_ratio};

use super::{Binding, FleetInput, FleetSeries, FleetSum, PooledBound, Summary};
use std::collections::BTreeMap;

/// Nearest-rank percentile `q` of sorted values.
fn rank(sorted: &[u64], q: f64) -> u64 {
    let n = sorted.len();
    let k = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[k - 1]
}

/// Nearest-rank p50, p95, p99 and max of `values` (integers), scaled by `scale`.
pub(super) fn summarize(mut values: Vec<u64>, scale: impl Fn(u64) -> f64) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(Summary {
        p50: scale(rank(&values, 0.50)),
        p95: scale(rank(&values, 0.95)),
        p99: scale(rank(&values, 0.99)),
        max: scale(values[values.len() - 1]),
        steps_known: values.len(),
    })
}

/// [`summarize`] of weighted values (each a sub-step of a step, weighted by its share):
/// weighted nearest-rank p50, p95, p99 and the max, over `steps_known` steps.
fn summarize_weighted(
    mut values: Vec<(u64, u64)>,
    steps_known: usize,
    scale: impl Fn(u64) -> f64,
) -> Option<Summary> {
    let max = values.iter().map(|x| x.0).max()?;
    let mut q = |q: f64| weighted_rank(&mut values, q).map(&scale);
    Some(Summary {
        p50: q(0.50)?,
        p95: q(0.95)?,
        p99: q(0.99)?,
        max: scale(max),
        steps_known,
    })
}

/// Nearest-rank percentile `q` of the known values of one field of a track.
pub(super) fn track_quantile(t: &Track, q: f64, f: impl Fn(Point) -> Option<u64>) -> Option<u64> {
    let mut v: Vec<u64> = t.points.iter().filter_map(|p| f(*p)).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(rank(&v, q))
}

/// A sum over tracks per step, known where every live track that has the quantity was
/// measured. `value` is `None` for an unmeasured point.
fn sum_series(
    tracks: &[&Track],
    steps: usize,
    has: impl Fn(&Track) -> bool,
    value: impl Fn(Point) -> Option<u64>,
) -> (Vec<Option<u64>>, usize) {
    let mut sum: Vec<Option<u64>> = vec![None; steps];
    let mut live = vec![false; steps];
    let mut unknown = vec![false; steps];
    let mut n = 0;
    for t in tracks.iter().filter(|t| has(t)) {
        n += 1;
        for (i, p) in t.points.iter().enumerate() {
            let s = t.first + i;
            if s >= steps {
                break;
            }
            live[s] = true;
            match value(*p) {
                Some(v) => *sum[s].get_or_insert(0) += v,
                None => unknown[s] = true,
            }
        }
    }
    for s in 0..steps {
        if unknown[s] || !live[s] {
            sum[s] = None;
        }
    }
    (sum, n)
}

/// [`sum_series`] of the saturation per sub-step of `grid` (`steps · grid.m` of them):
/// each workload's band `j` added to sub-step `j` of its step.
fn sum_sub_steps(tracks: &[&Track], steps: usize, grid: Grid) -> Vec<Option<u64>> {
    let subs = steps * grid.m;
    let mut sum: Vec<Option<u64>> = vec![None; subs];
    let mut unknown = vec![false; subs];
    each_sub_step(tracks, steps, grid, |u, value| match value {
        Some(v) => *sum[u].get_or_insert(0) += u64::from(v),
        None => unknown[u] = true,
    });
    for (x, &unknown) in sum.iter_mut().zip(&unknown) {
        if unknown {
            *x = None;
        }
    }
    sum
}

/// Each sub-step `u` of `grid` (within `steps`) at which a track of `tracks` with a
/// saturation has a point, with that track's value there (`None`: not known).
fn each_sub_step(
    tracks: &[&Track],
    steps: usize,
    grid: Grid,
    mut each: impl FnMut(usize, Option<u16>),
) {
    for t in tracks.iter().filter(|t| t.has_saturation()) {
        for (i, p) in t.points.iter().enumerate() {
            let s = t.first + i;
            if s >= steps {
                break;
            }
            for j in 0..grid.m {
                each(s * grid.m + j, grid.value(*p, j));
            }
        }
    }
}

/// [`Series::compute_known_anywhere`] of `tracks`.
fn known_anywhere_weight(tracks: &[&Track], steps: usize, grid: Grid) -> u64 {
    let mut any = vec![false; steps * grid.m];
    each_sub_step(tracks, steps, grid, |u, value| any[u] |= value.is_some());
    any.iter()
        .enumerate()
        .filter(|&(_, &a)| a)
        .map(|(u, _)| grid.weights[u % grid.m])
        .sum()
}

/// Distinct GPUs with a reading per step, among `tracks`: the tracks grouped by GPU, a step
/// counts a GPU once however many of its tracks read then (`O(n log n + n · steps)`).
fn gpu_count(tracks: &[&Track], steps: usize) -> Vec<Option<u32>> {
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    for t in tracks {
        let n = ids.len();
        ids.entry(t.gpu.as_str()).or_insert(n);
    }
    let mut by_gpu: Vec<(usize, &Track)> =
        tracks.iter().map(|t| (ids[t.gpu.as_str()], *t)).collect();
    by_gpu.sort_by_key(|&(g, _)| g);
    let mut count = vec![0u32; steps];
    // The last GPU counted at each step: its tracks come one after the other.
    let mut last = vec![usize::MAX; steps];
    for (g, t) in by_gpu {
        for (i, p) in t.points.iter().enumerate() {
            let s = t.first + i;
            if s >= steps {
                break;
            }
            if p.any() && last[s] != g {
                last[s] = g;
                count[s] += 1;
            }
        }
    }
    count.into_iter().map(|c| (c > 0).then_some(c)).collect()
}

fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

/// Nearest-rank quantile `q` of weighted values: the least value such that those at most it
/// weigh at least `⌈q · total⌉` (with unit weights, the `⌈q·n⌉`-th smallest). Reorders `v`.
pub(super) fn weighted_rank(v: &mut [(u64, u64)], q: f64) -> Option<u64> {
    let total: u64 = v.iter().map(|x| x.1).sum();
    if total == 0 {
        return None;
    }
    v.sort_unstable();
    let k = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut below = 0;
    v.iter()
        .find(|&&(_, w)| {
            below += w;
            below >= k
        })
        .map(|x| x.0)
}

/// Nearest-rank quantile `q` of a track's sizing saturation over its known sub-steps, each
/// weighted by its share of its step.
pub(super) fn sizing_quantile(t: &Track, q: f64, grid: Grid) -> Option<u64> {
    let mut v: Vec<(u64, u64)> = t.points.iter().flat_map(|&p| grid.weighted(p)).collect();
    weighted_rank(&mut v, q)
}

/// The fleet-level series per step, in integer units, with the number of workloads each
/// sum is over.
pub(super) struct Series {
    /// GPUs with a reading, among all tracks.
    pub(super) reporting: Vec<Option<u32>>,
    /// GPUs holding a workload (unknown without pod labels).
    pub(super) allocated: Vec<Option<u32>>,
    /// Summed busy flag, ratio units.
    busy: (Vec<Option<u64>>, usize),
    /// Summed saturation, ratio units: the step's (a coarse step's p99 band).
    compute: (Vec<Option<u64>>, usize),
    /// Summed saturation per sub-step of `grid` (the bands of a workload summed band by
    /// band: within a step, their busiest times taken as at once), for the percentiles.
    compute_subs: Vec<Option<u64>>,
    grid: Grid,
    /// Summed memory, MiB.
    pub(super) memory: (Vec<Option<u64>>, usize),
    /// The weight of the sub-steps at which any workload's saturation is known: no packed
    /// GPU knows more of the window.
    pub(super) compute_known_anywhere: u64,
}

impl Series {
    /// The series of `work` (and, for `reporting`, of every track) over `steps` steps.
    pub(super) fn of(
        input: &FleetInput,
        unit: &str,
        work: &[&Track],
        steps: usize,
        grid: Grid,
    ) -> Series {
        let all: Vec<&Track> = input.tracks.iter().collect();
        let reporting = gpu_count(&all, steps);
        let allocated = if unit == "pod" {
            gpu_count(work, steps)
        } else {
            vec![None; steps]
        };
        let busy = sum_series(work, steps, has_busy, |p| p.busy().map(u64::from));
        let step_band = if grid.m == 1 { BANDS - 1 } else { P99_BAND };
        let compute = sum_series(work, steps, Track::has_saturation, |p| {
            p.band(step_band).map(u64::from)
        });
        let compute_subs = if grid.is_unit() {
            compute.0.clone()
        } else {
            sum_sub_steps(work, steps, grid)
        };
        let memory = sum_series(work, steps, Track::has_memory, |p| p.mem().map(u64::from));
        Series {
            reporting,
            allocated,
            busy,
            compute,
            compute_subs,
            grid,
            memory,
            compute_known_anywhere: known_anywhere_weight(work, steps, grid),
        }
    }

    /// The summed saturation's sub-steps where known, with their weights.
    pub(super) fn compute_weighted(&self) -> Vec<(u64, u64)> {
        let m = self.grid.m;
        self.compute_subs
            .iter()
            .enumerate()
            .filter_map(|(u, x)| x.map(|x| (x, self.grid.weights[u % m])))
            .collect()
    }

    /// The report's series: ratios as fractions, memory over one GPU's memory (`gpu_mib`).
    pub(super) fn into_fleet_series(self, gpu_mib: Option<u64>) -> FleetSeries {
        let ratio_series = |v: &[Option<u64>]| v.iter().map(|x| x.map(units_to_ratio)).collect();
        FleetSeries {
            allocated_gpus: self.allocated,
            gpus_reporting: self.reporting,
            busy_claim_gpus: ratio_series(&self.busy.0),
            compute_demand_gpus: ratio_series(&self.compute.0),
            memory_demand_gpus: self
                .memory
                .0
                .iter()
                .map(|m| m.and_then(|m| gpu_mib.map(|g| m as f64 / g as f64)))
                .collect(),
        }
    }
}

/// Whether the track's busy flag was ever measured.
fn has_busy(t: &Track) -> bool {
    t.points.iter().any(|p| p.busy().is_some())
}

/// The busy claim, compute demand and memory demand as percentiles, each with the
/// workloads it never measured; a note names those whose demand is unknown.
pub(super) fn demand_sums(
    work: &[&Track],
    names: &[String],
    series: &Series,
    gpu_mib: Option<u64>,
    notes: &mut Vec<String>,
) -> [FleetSum; 3] {
    let unmeasured = |has: &dyn Fn(&Track) -> bool| -> Vec<String> {
        work.iter()
            .zip(names)
            .filter(|(t, _)| !has(t))
            .map(|(_, n)| n.clone())
            .collect()
    };
    let (busy, busy_n) = &series.busy;
    let (compute, compute_n) = &series.compute;
    let (memory, memory_n) = &series.memory;
    let busy_claim = FleetSum {
        summary: summarize(busy.iter().flatten().copied().collect(), units_to_ratio),
        workloads: *busy_n,
        unmeasured: unmeasured(&has_busy),
    };
    let compute_demand = FleetSum {
        summary: summarize_weighted(
            series.compute_weighted(),
            compute.iter().flatten().count(),
            units_to_ratio,
        ),
        workloads: *compute_n,
        unmeasured: unmeasured(&Track::has_saturation),
    };
    let memory_demand = FleetSum {
        summary: gpu_mib.and_then(|g| {
            summarize(memory.iter().flatten().copied().collect(), |m| {
                m as f64 / g as f64
            })
        }),
        workloads: *memory_n,
        unmeasured: unmeasured(&Track::has_memory),
    };
    for (what, d) in [
        ("saturation (compute demand)", &compute_demand),
        ("memory", &memory_demand),
    ] {
        if !d.unmeasured.is_empty() {
            notes.push(format!(
                "{what} was never measured for {}: unknown, not counted as 0 and not packed",
                d.unmeasured.join(", ")
            ));
        }
    }
    [busy_claim, compute_demand, memory_demand]
}

/// The fewest GPUs `b` any packing of the summed saturation `compute` (ratio units, at the
/// sub-steps where every workload's is known, weighted) can use, each GPU allowed up to
/// `limit` at all but a 1 % tail of the weight it knows, as the packing tests it
/// ([`p99_slack`]): with `b` GPUs the sum is over `b × limit` only where some GPU is over
/// its limit, and each is over at no more than `tail_per_gpu` weight (the slack of the
/// most any GPU can know, [`Series::compute_known_anywhere`]: a GPU's own known steps may
/// be many more than the few where every workload is known), so at most `b` times that
/// weight of the sum is over `b × limit`. At most `ceil(p99 / limit)` (`p99_gpus`), which
/// passes; the smallest `b` that passes, by bisection (the test only gets easier as `b`
/// grows).
fn compute_bound(compute: &[(u64, u64)], limit: u32, p99_gpus: u64, tail_per_gpu: u64) -> u64 {
    let passes = |b: u64| {
        let within = b.saturating_mul(u64::from(limit));
        let over: u64 = compute
            .iter()
            .filter(|&&(v, _)| v > within)
            .map(|&(_, w)| w)
            .sum();
        over <= b.saturating_mul(tail_per_gpu)
    };
    let (mut lo, mut hi) = (1, p99_gpus.max(1));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if passes(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    if p99_gpus == 0 { 0 } else { lo }
}

/// The pooled lower bound from the summed saturation (ratio units, over `limit`) and the
/// summed memory (MiB, over one GPU's `gpu_mib`); `None` when neither was measured. Memory
/// binds on a tie.
pub(super) fn pooled_bound(
    mut compute: Vec<(u64, u64)>,
    (memory, known_anywhere): (&[Option<u64>], u64),
    gpu_mib: Option<u64>,
    limit: u32,
) -> Option<PooledBound> {
    let compute_p99_units = weighted_rank(&mut compute, 0.99);
    let tail_per_gpu = super::packing::p99_slack(known_anywhere);
    let memory_peak_mib = memory.iter().flatten().copied().max();
    let compute_term = compute_p99_units.map(|u| {
        let p99_gpus = ceil_div(u, u64::from(limit));
        (
            u as f64 / f64::from(limit),
            compute_bound(&compute, limit, p99_gpus, tail_per_gpu),
        )
    });
    let memory_term = match (memory_peak_mib, gpu_mib) {
        // A GPU of no memory sizes nothing (the sanitizer blanks such a total).
        (Some(m), Some(g)) if g > 0 => Some((m as f64 / g as f64, ceil_div(m, g))),
        _ => None,
    };
    match (compute_term, memory_term) {
        (None, None) => None,
        (c, m) => {
            let cg = c.map_or(0, |x| x.1);
            let mg = m.map_or(0, |x| x.1);
            Some(PooledBound {
                gpus: cg.max(mg),
                compute_gpus: c.map(|x| x.0),
                memory_gpus: m.map(|x| x.0),
                binding: if m.is_some() && (mg >= cg || c.is_none()) {
                    Binding::Memory
                } else {
                    Binding::Compute
                },
            })
        }
    }
}

/// Percentiles of a GPU count over the steps at which it is known.
pub(super) fn gpu_summary(counts: &[Option<u32>]) -> Option<Summary> {
    summarize(
        counts.iter().flatten().map(|&x| u64::from(x)).collect(),
        |x| x as f64,
    )
}

/// The note on the steps of `steps` with no reading of any GPU (a gap in the history, or a
/// step whose readings were all refused as impossible), when
/// `steps_with_data` is fewer.
pub(super) fn gap_note(steps_with_data: usize, steps: usize) -> Option<String> {
    (steps_with_data < steps).then(|| {
        format!(
            "{} of {} steps had no reading of any GPU (a gap in the history, or only readings that were not measurements): they are left out, never counted as idle or 0",
            steps - steps_with_data,
            steps
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::packing::p99_within;
    use crate::fleet::test_support::{GIB, input, pod, steady};
    use crate::fleet::track::StepBands;
    use crate::fleet::{FleetConfig, analyze};
    use crate::rightsizing::Constraint;

    /// Weighted nearest rank: with unit weights the `⌈q·n⌉`-th smallest; a value holding 1 %
    /// of the weight or less is above the p99 only when more than 1 % is above it.
    #[test]
    fn weighted_ranks() {
        let mut v: Vec<(u64, u64)> = (1..=100).map(|x| (x, 1)).collect();
        assert_eq!(weighted_rank(&mut v, 0.99), Some(99));
        let mut v = vec![(950, 100), (50, 9_900)];
        assert_eq!(weighted_rank(&mut v, 0.99), Some(50));
        let mut v = vec![(950, 101), (50, 9_899)];
        assert_eq!(weighted_rank(&mut v, 0.99), Some(950));
        assert_eq!(weighted_rank(&mut [], 0.99), None);
    }

    /// A pod at 0.05 but for a burst to 0.95 that fills the top two bands of one hour-long
    /// step a day (p99 and max: 10 % of that hour, 6 minutes), beside four at 0.35: sized
    /// in bands it shares a GPU with two of them (its 0.95 over 0.25 % of the day), as its
    /// minutes would; held for the hour (4 % of the day) its p99 would be 0.95 and it
    /// would take a GPU of its own.
    #[test]
    fn a_burst_in_the_top_bands_of_a_coarse_step_weighs_its_share_of_the_step() {
        let steps = 24;
        let bands = StepBands::for_samples(60.0);
        let mut tracks = Vec::new();
        let mut bursty = pod("team/bursty", "n/gpu 9", 0..steps, |_| {
            (Some(0.05), Some(1.0), Some(10.0))
        });
        for j in 0..BANDS {
            let x = if j >= P99_BAND { 9_500 } else { 500 };
            bursty.points[10].bands[j] = x;
        }
        bursty.finish();
        assert_eq!(bursty.points[10].sat_peak(), Some(9_500));
        tracks.push(bursty);
        for i in 0..4 {
            tracks.push(pod(
                &format!("team/s{i}"),
                &format!("n/gpu {i}"),
                0..steps,
                |_| (Some(0.35), Some(1.0), Some(10.0)),
            ));
        }
        let mut fleet = FleetInput {
            step_seconds: 3_600.0,
            step_bands: Some(bands),
            ..input(tracks, steps)
        };
        let r = analyze(&fleet, &FleetConfig::default());
        let a = r
            .rightsizing
            .iter()
            .find(|w| w.workload == "team/bursty")
            .unwrap();
        assert_eq!(a.saturation_p99, Some(0.05));
        assert_eq!(r.sizing.packing.as_ref().map(|p| p.gpus), Some(2));
        assert_eq!(
            r.sizing.pooled_lower_bound.as_ref().map(|b| b.gpus),
            Some(2)
        );
        // The same points, each step one value (its top band held for the hour).
        fleet.step_bands = None;
        let r = analyze(&fleet, &FleetConfig::default());
        let a = r
            .rightsizing
            .iter()
            .find(|w| w.workload == "team/bursty")
            .unwrap();
        assert_eq!(a.saturation_p99, Some(0.95));
        assert_eq!(r.sizing.packing.as_ref().map(|p| p.gpus), Some(3));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let s = summarize((1..=100).collect(), |x| x as f64).unwrap();
        assert_eq!(
            (s.p50, s.p95, s.p99, s.max, s.steps_known),
            (50.0, 95.0, 99.0, 100.0, 100)
        );
        let s = summarize(vec![7], |x| x as f64).unwrap();
        assert_eq!((s.p50, s.p99), (7.0, 7.0));
        assert_eq!(summarize(Vec::new(), |x| x as f64), None);
        // p99 ≤ L with at most ⌊1 % of n⌋ values above it.
        assert!(p99_within(100, 1));
        assert!(!p99_within(100, 2));
        assert!(p99_within(99, 0) && !p99_within(99, 1));
    }

    #[test]
    fn unmeasured_demand_is_unknown_and_not_packed() {
        let steps = 10;
        let blind = pod("x/blind", "node-c/gpu 0", 0..steps, |_| {
            (None, Some(0.9), Some(10.0))
        });
        let r = analyze(
            &input(vec![steady(0, steps), blind], steps),
            &FleetConfig::default(),
        );
        let s = &r.sizing;
        assert_eq!(s.compute_demand_gpus.unmeasured, ["x/blind"]);
        assert_eq!(s.compute_demand_gpus.workloads, 1);
        // The blind pod's memory is measured and counted: (30 + 10) / 80.
        assert_eq!(s.memory_demand_gpus.summary.unwrap().max, 0.5);
        let p = s.packing.as_ref().unwrap();
        assert_eq!((p.packed_gpus, p.excluded_gpus, p.gpus), (1, 1, 2));
        assert_eq!(p.excluded[0].workload, "x/blind");
        assert!(p.excluded[0].reason.contains("saturation was not measured"));
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("x/blind") && n.contains("not counted as 0"))
        );
        // Nothing freed: the blind pod keeps its GPU.
        assert_eq!(r.savings.unwrap().gpus_freed, 0);
        let rs = r
            .rightsizing
            .iter()
            .find(|x| x.workload == "x/blind")
            .unwrap();
        assert_eq!(rs.saturation_p99, None);
        assert_eq!(rs.saturation_measured_share, Some(0.0));
        assert_eq!(
            rs.mig_fit.as_ref().unwrap().unmeasured,
            [Constraint::Compute, Constraint::Bandwidth]
        );
        assert!(rs.smaller_gpu.is_none());
    }

    #[test]
    fn a_gap_is_unknown_and_a_pod_that_did_not_run_adds_nothing() {
        let steps = 10;
        // p0 misses steps 3 and 4 inside its lifetime; p1 runs only from step 5.
        let mut p0 = Track::new(Some("g/p0".into()), "n/gpu 0".into());
        p0.memory_total_mib = Some(81_920);
        for s in (0..10).filter(|s| !(3..5).contains(s)) {
            p0.record(s, Point::new(Some(0.5), None, None, Some(GIB)));
        }
        let mut p1 = Track::new(Some("g/p1".into()), "n/gpu 1".into());
        p1.memory_total_mib = Some(81_920);
        for s in 5..10 {
            p1.record(s, Point::new(Some(0.25), None, None, Some(GIB)));
        }
        let r = analyze(&input(vec![p0, p1], steps), &FleetConfig::default());
        let c = &r.series.compute_demand_gpus;
        assert_eq!(
            &c[..6],
            &[Some(0.5), Some(0.5), Some(0.5), None, None, Some(0.75)]
        );
        let s = r.sizing.compute_demand_gpus.summary.unwrap();
        assert_eq!((s.steps_known, s.p50, s.max), (8, 0.75, 0.75));
        assert_eq!(r.steps_with_data, 8);
        assert!(
            r.notes
                .iter()
                .any(|n| n.starts_with("2 of 10 steps had no reading of any GPU"))
        );
        assert_eq!(r.series.allocated_gpus[3], None);
        assert_eq!(r.series.allocated_gpus[5], Some(2));
    }

    /// A GPU read by two workloads at once counts once; a step at which nothing was read
    /// counts nothing.
    #[test]
    fn a_gpu_read_by_two_workloads_counts_once() {
        let p = Point::new(Some(0.1), None, None, Some(GIB));
        let mut a = Track::new(Some("x/a".into()), "n/gpu 0".into());
        let mut b = Track::new(Some("x/b".into()), "n/gpu 0".into());
        let mut c = Track::new(Some("x/c".into()), "n/gpu 1".into());
        for s in 0..4 {
            a.record(s, p);
            b.record(s + 2, if s == 1 { Point::NONE } else { p });
            c.record(s + 1, p);
        }
        let counts = gpu_count(&[&a, &c, &b], 6);
        assert_eq!(
            counts,
            [Some(1), Some(2), Some(2), Some(2), Some(2), Some(1)]
        );
        assert_eq!(gpu_count(&[], 2), [None, None]);
    }
}
