use super::*;
use crate::fleet::demand::summarize;
use crate::fleet::index::MAX_BIN_TRIES;
use crate::fleet::test_support::{GIB, h100, input, pod, steady};
use crate::fleet::track::{NO_RATIO, Point, StepBands, Track};
use crate::fleet::workloads::names;
use crate::fleet::{Binding, FleetConfig, NotListed, analyze};

/// The example: 8 GPUs of 80 GiB, one pod each at 20 % saturation and 30 GiB.
#[test]
fn eight_pods_need_three_pooled_and_four_packed() {
    let steps = 120;
    let r = analyze(
        &input((0..8).map(|i| steady(i, steps)).collect(), steps),
        &FleetConfig {
            cost_per_gpu_hour: Some(2.5),
            ..FleetConfig::default()
        },
    );
    assert_eq!(r.workload_unit, "pod");
    assert_eq!(r.steps_with_data, 120);
    let s = &r.sizing;
    assert_eq!(s.allocated_gpus.unwrap().p99, 8.0);
    assert_eq!(s.busy_claim_gpus.summary.unwrap().p50, 7.2);
    assert_eq!(s.compute_demand_gpus.summary.unwrap().p99, 1.6);
    assert_eq!(s.memory_demand_gpus.summary.unwrap().max, 3.0);
    let pooled = s.pooled_lower_bound.as_ref().unwrap();
    // Compute: 1.6 / 0.8 = 2 GPUs; memory: 240 / 80 = 3 GPUs.
    assert_eq!(pooled.gpus, 3);
    assert_eq!(pooled.compute_gpus, Some(2.0));
    assert_eq!(pooled.memory_gpus, Some(3.0));
    assert_eq!(pooled.binding, Binding::Memory);
    let p = s.packing.as_ref().unwrap();
    // Two per GPU: 60 GiB fits 80, 90 does not.
    assert_eq!((p.packed_gpus, p.gpus, p.excluded_gpus), (4, 4, 0));
    assert!(p.bins.iter().all(|b| b.workloads.len() == 2));
    assert_eq!(p.bins[0].peak_memory_bytes, 60.0 * GIB);
    assert_eq!(p.bins[0].saturation_p99, Some(0.4));
    assert_eq!(r.colocation.len(), 4);
    assert!(
        r.colocation
            .iter()
            .all(|c| c.gpus_freed == 1 && !c.interleaved)
    );
    let sv = r.savings.unwrap();
    assert_eq!((sv.baseline_gpus, sv.needed_gpus, sv.gpus_freed), (8, 4, 4));
    assert_eq!(sv.hours, 2.0);
    assert_eq!(sv.gpu_hours, 8.0);
    assert_eq!(sv.cost, Some(20.0));
    assert!(sv.estimate);
}

/// The pooled lower bound is one: no packing uses fewer GPUs. Four pods at 0.5, two of
/// them at 1.0 for one step each, at different steps, with no headroom: each pair fits one
/// GPU (over its limit at one step of 100, the p99 tail), so two GPUs are packed. The
/// summed demand is 2.0 at 98 steps and 2.5 at two: its p99 of 2.5 asks 3 GPUs, a figure
/// the packing beats; the bound is the fewest B whose B × 1.0 the sum stays within at all
/// but B % of the steps: 2.
#[test]
fn the_pooled_lower_bound_is_never_above_a_packing() {
    let steps = 100;
    let flat = |name: &str, gpu: usize, high: Option<usize>| {
        pod(name, &format!("node-a/gpu {gpu}"), 0..steps, move |s| {
            let sat = if Some(s) == high { 1.0 } else { 0.5 };
            (Some(sat), Some(1.0), Some(1.0))
        })
    };
    let tracks = vec![
        flat("t/a1", 0, None),
        flat("t/a2", 1, Some(0)),
        flat("t/b1", 2, None),
        flat("t/b2", 3, Some(1)),
    ];
    let r = analyze(
        &input(tracks, steps),
        &FleetConfig {
            headroom: 0.0,
            ..FleetConfig::default()
        },
    );
    let s = &r.sizing;
    let pooled = s.pooled_lower_bound.as_ref().unwrap();
    assert_eq!(pooled.compute_gpus, Some(2.5));
    assert_eq!((pooled.gpus, pooled.binding), (2, Binding::Compute));
    let p = s.packing.as_ref().unwrap();
    assert_eq!(p.gpus, 2);
    assert!(pooled.gpus <= p.gpus);
}

/// Two pods busy at alternate times: each one's p99 is 0.7, the sum of p99s 1.4 would
/// refuse them a shared GPU; aligned in time, the sum never exceeds 0.7.
#[test]
fn pods_busy_at_alternate_times_share_a_gpu() {
    let steps = 120;
    let busy_a = |s: usize| (s / 30).is_multiple_of(2);
    let a = pod("alt/a", "node-b/gpu 0", 0..steps, |s| {
        (
            Some(if busy_a(s) { 0.7 } else { 0.0 }),
            Some(if busy_a(s) { 1.0 } else { 0.0 }),
            Some(30.0),
        )
    });
    let b = pod("alt/b", "node-b/gpu 1", 0..steps, |s| {
        (
            Some(if busy_a(s) { 0.0 } else { 0.7 }),
            Some(if busy_a(s) { 0.0 } else { 1.0 }),
            Some(30.0),
        )
    });
    let r = analyze(
        &input(vec![a.clone(), b.clone()], steps),
        &FleetConfig::default(),
    );
    let p = r.sizing.packing.as_ref().unwrap();
    assert_eq!(p.gpus, 1);
    assert_eq!(r.sizing.compute_demand_gpus.summary.unwrap().p99, 0.7);
    assert_eq!(r.colocation.len(), 1);
    let c = &r.colocation[0];
    assert_eq!(c.workloads, ["alt/a", "alt/b"]);
    assert_eq!((c.gpus_held, c.gpus_freed), (2, 1));
    assert_eq!(c.sum_of_p99s, 1.4);
    assert_eq!(c.saturation_p99, Some(0.7));
    assert!(c.interleaved);
    // Both idle half of the time: listed above a 0.4 share, with their idle hours.
    let r = analyze(
        &input(vec![a.clone(), b.clone()], steps),
        &FleetConfig {
            idle_share: 0.4,
            ..FleetConfig::default()
        },
    );
    assert_eq!(r.idle.workloads.len(), 2);
    assert_eq!(r.idle.workloads[0].idle_share, 0.5);
    assert_eq!(r.idle.workloads[0].idle_gpu_hours, 1.0);
    assert_eq!(r.idle.workloads[0].held_hours, 2.0);
    assert_eq!(
        (r.idle.idle_gpu_hours, r.idle.listed_idle_gpu_hours),
        (Some(2.0), 2.0)
    );
    // Above a 0.5 share neither is listed, and the total is the same 2 idle GPU-hours
    // (one hour each, from their 120 one-minute steps): the listing says what it left.
    let r = analyze(
        &input(vec![a.clone(), b.clone()], steps),
        &FleetConfig::default(),
    );
    assert!(r.idle.workloads.is_empty());
    assert_eq!(r.idle.idle_gpu_hours, Some(2.0));
    assert_eq!(r.idle.listed_idle_gpu_hours, 0.0);
    // A true 0, not the -0 of an empty float sum (which JSON writes "-0.0").
    assert!(r.idle.listed_idle_gpu_hours.is_sign_positive());
    assert_eq!(
        r.idle.not_listed,
        NotListed {
            workloads: 2,
            gpu_hours: 2.0,
            hours_of_unknown_share: None,
        }
    );
    // In phase, the same two pods need two GPUs.
    let b2 = pod("alt/a2", "node-b/gpu 0", 0..steps, |s| {
        (Some(if busy_a(s) { 0.0 } else { 0.7 }), None, Some(30.0))
    });
    let r = analyze(&input(vec![b, b2], steps), &FleetConfig::default());
    assert_eq!(r.sizing.packing.unwrap().gpus, 2);
    assert!(r.colocation.is_empty());
}

#[test]
fn a_pod_too_big_to_share_takes_a_gpu_of_its_own() {
    let steps = 5;
    let big = pod("b/big", "n/gpu 0", 0..steps, |_| {
        (Some(0.95), Some(1.0), Some(40.0))
    });
    let r = analyze(
        &input(vec![big, steady(1, steps)], steps),
        &FleetConfig::default(),
    );
    let p = r.sizing.packing.unwrap();
    assert_eq!(p.gpus, 2);
    assert_eq!(p.bins[0].workloads, ["b/big"]);
    // 0.95 + 0.2 over 0.8: pooled compute is ⌈1.15 / 0.8⌉ = 2.
    let pooled = r.sizing.pooled_lower_bound.unwrap();
    assert_eq!((pooled.gpus, pooled.binding), (2, Binding::Compute));
    assert_eq!(pooled.compute_gpus, Some(1.4375));
}

/// A seeded fleet on 80 GiB H100s: steady pods at varied saturation, bursty ones, idle
/// ones, short-lived ones; a few steps missed or with saturation unmeasured, a few pods
/// too big to share; peaks 5–40 GiB.
fn random_fleet(seed: u64, n: usize, steps: usize) -> Vec<Track> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let mut t = Track::new(
                Some(format!("r{seed}/p{i}")),
                format!("n{}/gpu {}", i / 8, i % 8),
            );
            t.spec = Some(h100());
            t.memory_total_mib = Some(80 * 1024);
            let peak = if i % 97 == 5 {
                85.0
            } else {
                rng.random_range(5.0..40.0)
            };
            let level = if i % 89 == 7 {
                0.95
            } else {
                rng.random_range(0.0..0.7)
            };
            let kind = rng.random_range(0..5);
            let (start, end) = if kind == 4 {
                let a = rng.random_range(0..steps);
                (a, rng.random_range(a + 1..=steps))
            } else {
                (0, steps)
            };
            let phase = rng.random_range(0..steps);
            for s in start..end {
                if rng.random_bool(0.03) {
                    continue;
                }
                let sat = match kind {
                    1 => Some(if ((s + phase) / 5).is_multiple_of(2) {
                        level + 0.1
                    } else {
                        0.0
                    }),
                    2 => Some(0.001),
                    _ => Some(level * rng.random_range(0.85..1.15)),
                };
                let sat = sat.filter(|_| !rng.random_bool(0.02));
                let mem = if s == start {
                    peak
                } else {
                    peak * rng.random_range(0.7..1.0)
                };
                t.record(s, Point::new(sat, Some(0.5), None, Some(mem * GIB)));
            }
            t
        })
        .collect()
}

const CAP: u64 = 80 * 1024;

const LIMIT: u32 = 8_000;

/// The first-fit decreasing of before the index: every bin tried in order. On the way,
/// checks that the index never rules out a bin that takes the workload, and that the
/// check stopping early answers as the whole check does.
fn first_fit_exhaustive(tracks: &[Track], steps: usize, grid: Grid) -> Vec<Vec<usize>> {
    let work: Vec<&Track> = tracks.iter().collect();
    let names = names(&work);
    let (mut items, _) = packing_items(&work, &names, grid);
    sort_items(&names, &mut items, CAP, LIMIT);
    let ranks = Ranks::of(steps, grid);
    let mut bins: Vec<Bin> = Vec::new();
    let mut index = BinIndex {
        rule: Trees::new(),
        room: Trees::new(),
    };
    let mut scratch = Vec::new();
    for it in &items {
        let t = work[it.track];
        let q = Query::of(t, it, CAP, LIMIT, &ranks, steps, &mut scratch);
        let mut placed = None;
        for (b, bin) in bins.iter().enumerate() {
            let whole = bin.fits(t, it, (CAP, LIMIT, u64::MAX), &mut 0);
            let early = bin.fits(t, it, (CAP, LIMIT, ranks.slack), &mut 0);
            assert_eq!(whole, early);
            if whole.is_some() {
                assert!(
                    index.rule.admits(b, &q.rule),
                    "{} ruled out of {b}",
                    names[it.track]
                );
                placed = placed.or(whole.map(|c| (b, c)));
            }
        }
        let b = join_or_open(&mut bins, placed, t, it, (steps, grid), LIMIT);
        index.set(b, bins[b].keys(&ranks, &mut scratch));
    }
    bins.into_iter().map(|b| b.members).collect()
}

/// The bounded first-fit decreasing's bins (track indices), and the packable tracks.
fn first_fit_bounded(
    tracks: &[Track],
    steps: usize,
    budget: Budget,
    grid: Grid,
) -> (Vec<Vec<usize>>, Vec<usize>) {
    let work: Vec<&Track> = tracks.iter().collect();
    let names = names(&work);
    let (mut items, _) = packing_items(&work, &names, grid);
    let bins = first_fit_within(&work, &names, &mut items, (CAP, LIMIT, steps, grid), budget);
    let packable = items.iter().map(|it| it.track).collect();
    (bins.into_iter().map(|b| b.members).collect(), packable)
}

/// Checks from the tracks alone that every GPU shared by two or more workloads holds
/// them (each reserving its peak memory over its lifetime, never over the GPU's memory
/// unless only one is live; summed saturation, unknown where a live one's is, at most
/// the limit at p99), and that every packable workload is on exactly one GPU.
fn assert_valid(tracks: &[Track], steps: usize, bins: &[Vec<usize>], packable: &[usize]) {
    let mut placed: Vec<usize> = bins.iter().flatten().copied().collect();
    placed.sort_unstable();
    let mut want = packable.to_vec();
    want.sort_unstable();
    assert_eq!(placed, want, "every packable workload placed exactly once");
    for members in bins.iter().filter(|m| m.len() >= 2) {
        let mut sums = Vec::new();
        for s in 0..steps {
            let live: Vec<&Track> = members
                .iter()
                .map(|&m| &tracks[m])
                .filter(|t| t.range().contains(&s))
                .collect();
            let mem: u64 = live
                .iter()
                .map(|t| u64::from(t.points.iter().filter_map(|p| p.mem()).max().unwrap()))
                .sum();
            // One workload too big to share may be over on its own.
            assert!(
                mem <= CAP || live.len() == 1,
                "{members:?} at step {s}: {mem} MiB"
            );
            let sat: Option<u64> = live
                .iter()
                .map(|t| t.points[s - t.first].sat_peak().map(u64::from))
                .sum();
            if let (false, Some(x)) = (live.is_empty(), sat) {
                sums.push(x);
            }
        }
        if let Some(p) = summarize(sums, |x| x as f64) {
            assert!(p.p99 <= f64::from(LIMIT), "{members:?}: p99 {}", p.p99);
        }
    }
}

#[test]
fn bounded_first_fit_is_first_fit_while_the_packing_is_small() {
    for seed in 0..24 {
        let steps = [20, 50, 150][seed as usize % 3];
        let tracks = random_fleet(seed, 30 + seed as usize * 3, steps);
        let exhaustive = first_fit_exhaustive(&tracks, steps, Grid::of(None));
        assert!(
            exhaustive.len() < MAX_BIN_TRIES,
            "seed {seed}: a small packing"
        );
        let (bounded, packable) = first_fit_bounded(&tracks, steps, BUDGET, Grid::of(None));
        assert_eq!(bounded, exhaustive, "seed {seed}");
        assert_valid(&tracks, steps, &bounded, &packable);
    }
}

/// With no bound on the work, the index's skips alone leave the packing as it was, on a
/// packing of many more GPUs than the budget's checks.
#[test]
fn the_index_never_rules_out_a_gpu_that_fits() {
    let unbounded = Budget {
        tries: usize::MAX,
        room: 0,
    };
    for (seed, steps) in [(100, 120), (101, 40)] {
        let tracks = random_fleet(seed, 400, steps);
        let exhaustive = first_fit_exhaustive(&tracks, steps, Grid::of(None));
        assert!(exhaustive.len() > 2 * MAX_BIN_TRIES);
        let (bounded, _) = first_fit_bounded(&tracks, steps, unbounded, Grid::of(None));
        assert_eq!(bounded, exhaustive, "seed {seed}");
    }
    // And in the bands of coarse steps: each step's bands spread below and above its
    // value (p50 lower, the max higher), weighted as a step of 15 samples.
    let grid = Grid::of(Some(StepBands::for_samples(15.0)));
    let mut tracks = random_fleet(102, 400, 60);
    for t in &mut tracks {
        for (k, p) in t.points.iter_mut().enumerate() {
            if let Some(x) = p.sat() {
                let spread = [
                    x / 2,
                    x,
                    x.saturating_add(1_500),
                    x.saturating_add(4_000 + (k as u16 % 7) * 500),
                ];
                p.bands = spread.map(|b| b.min(NO_RATIO - 1));
            }
        }
    }
    let exhaustive = first_fit_exhaustive(&tracks, 60, grid);
    let (bounded, _) = first_fit_bounded(&tracks, 60, unbounded, grid);
    assert_eq!(bounded, exhaustive, "in bands");
}

/// 3 000 workloads × 50 steps within the default budget: a valid packing.
#[test]
fn a_large_fleet_packs_validly_within_the_budget() {
    let steps = 50;
    let tracks = random_fleet(7, 3_000, steps);
    let (bins, packable) = first_fit_bounded(&tracks, steps, BUDGET, Grid::of(None));
    assert!(packable.len() > 2_990);
    assert_valid(&tracks, steps, &bins, &packable);
    // Shared GPUs, not one per workload.
    assert!(bins.len() < 1_500, "{} GPUs", bins.len());
    // And the same through `analyze`.
    let r = analyze(&input(tracks, steps), &FleetConfig::default());
    let p = r.sizing.packing.unwrap();
    assert_eq!(p.packed_gpus, bins.len() as u64);
    assert_eq!(p.excluded.len(), 3_000 - packable.len());
}

/// However small the budget, the packing is valid: the check has the final word.
#[test]
fn a_tiny_budget_still_packs_validly() {
    let steps = 30;
    let tracks = random_fleet(3, 500, steps);
    let exhaustive = first_fit_exhaustive(&tracks, steps, Grid::of(None)).len();
    for budget in [
        Budget { tries: 0, room: 0 },
        Budget { tries: 1, room: 0 },
        Budget { tries: 0, room: 1 },
        Budget { tries: 2, room: 2 },
    ] {
        let (bins, packable) = first_fit_bounded(&tracks, steps, budget, Grid::of(None));
        assert_valid(&tracks, steps, &bins, &packable);
        assert!(bins.len() >= exhaustive / 2, "{budget:?}: {}", bins.len());
    }
}

/// A group frees a GPU only where it takes every workload off it: `x/a` alone on GPU 0 and
/// `x/b`, a MIG instance of GPU 1, share one packed GPU, but GPU 1 also holds the instance
/// of `x/mem`, whose saturation was never measured (left out of the packing, keeping its
/// GPU). The group holds two GPUs today and vacates one, which it needs itself: it frees
/// none (the old count, held − 1, said one). By hand.
#[test]
fn a_group_frees_only_the_gpus_it_vacates() {
    let steps = 20;
    let small = |_| (Some(0.1), Some(0.5), Some(10.0));
    let a = pod("x/a", "node-a/gpu 0", 0..steps, small);
    let instance = |mut t: Track| {
        t.is_mig = true;
        t.mig = h100().mig.iter().find(|m| m.name == "3g.40gb");
        t.memory_total_mib = Some(40 * 1024);
        t
    };
    let b = instance(pod("x/b", "node-a/gpu 1", 0..steps, small));
    let unmeasured = instance(pod("x/mem", "node-a/gpu 1", 0..steps, |_| {
        (None, None, Some(5.0))
    }));
    let r = analyze(
        &input(vec![a, b, unmeasured], steps),
        &FleetConfig::default(),
    );
    assert_eq!(r.colocation.len(), 1, "{:?}", r.colocation);
    let c = &r.colocation[0];
    assert_eq!(c.workloads, ["x/a", "x/b"]);
    assert_eq!((c.gpus_held, c.gpus_freed), (2, 0));
}

/// The pooled lower bound holds against the packing where a workload is measured at few
/// steps: `y/a` at 0.7 with 1.0 at two steps, `y/b` at 0.7, and `y/c` measured only at
/// those two steps (0 there), over 120. The whole fleet's sum is known at those two steps
/// alone, 1.7 at both; each packed GPU knows its own steps (120) and may be over its limit
/// (0.8) at 1 % of them, one step: two GPUs may be over at both, so 2 GPUs pass and the
/// bound is 2, as packed (`[y/a]`, `[y/b, y/c]`), never the 3 the two steps alone would
/// give. By hand.
#[test]
fn the_pooled_bound_holds_where_a_workload_is_measured_at_few_steps() {
    let steps = 120;
    let spike = |s: usize| s == 10 || s == 20;
    let a = pod("y/a", "node-a/gpu 0", 0..steps, |s| {
        (
            Some(if spike(s) { 1.0 } else { 0.7 }),
            Some(1.0),
            Some(10.0),
        )
    });
    let b = pod("y/b", "node-a/gpu 1", 0..steps, |_| {
        (Some(0.7), Some(1.0), Some(10.0))
    });
    let c = pod("y/c", "node-a/gpu 2", 0..steps, |s| {
        (spike(s).then_some(0.0), Some(1.0), Some(10.0))
    });
    let r = analyze(&input(vec![a, b, c], steps), &FleetConfig::default());
    let packed = r.sizing.packing.as_ref().unwrap().gpus;
    let pooled = r.sizing.pooled_lower_bound.as_ref().unwrap().gpus;
    assert_eq!((pooled, packed), (2, 2));
}
