//! Property tests of the showback's buckets: on any fleet of whole GPUs (pods and devices,
//! read at any steps), each GPU-step of a GPU's life goes to exactly one of its holders'
//! groups, unallocated (a series of the GPU read, no pod holding it) or allocation unknown
//! (nothing of it read, no pod holding it), counted here from the generated readings alone.

use proptest::prelude::*;
use std::collections::BTreeMap;
use truthscale_core::fleet::{FleetInput, Point, Track};
use truthscale_core::showback::{Holders, ShowbackConfig, showback};

/// One series: its pod's index (`None`: the device's own, no pod) and the steps it read.
type Series = (Option<u8>, Vec<bool>);

fn any_series(steps: usize) -> impl Strategy<Value = Series> {
    (
        prop::option::of(0u8..3),
        prop::collection::vec(any::<bool>(), steps),
    )
}

/// Up to three GPUs of one to three series each, over `steps` steps.
fn any_fleet() -> impl Strategy<Value = (usize, Vec<Vec<Series>>, usize)> {
    (1usize..24).prop_flat_map(|steps| {
        (
            Just(steps),
            prop::collection::vec(prop::collection::vec(any_series(steps), 1..4), 1..4),
            1usize..6,
        )
    })
}

/// The first and last step `read` holds a reading at.
fn span(read: &[bool]) -> Option<(usize, usize)> {
    let first = read.iter().position(|r| *r)?;
    let last = read.iter().rposition(|r| *r)?;
    Some((first, last))
}

/// Counted from the readings: each GPU-step from the GPU's first reading to its last is
/// held (a pod's series spans it), else unallocated (some series read it), else allocation
/// unknown. In whole GPU-steps.
fn by_hand(gpus: &[Vec<Series>]) -> (u64, u64, u64) {
    let (mut held, mut unallocated, mut unknown) = (0, 0, 0);
    for series in gpus {
        let spans: Vec<_> = series.iter().filter_map(|(_, r)| span(r)).collect();
        let (Some(first), Some(last)) = (
            spans.iter().map(|s| s.0).min(),
            spans.iter().map(|s| s.1).max(),
        ) else {
            continue;
        };
        for s in first..=last {
            let pod_spans = series
                .iter()
                .filter(|(pod, _)| pod.is_some())
                .filter_map(|(_, r)| span(r))
                .any(|(a, b)| (a..=b).contains(&s));
            let read = series.iter().any(|(_, r)| r[s]);
            match (pod_spans, read) {
                (true, _) => held += 1,
                (false, true) => unallocated += 1,
                (false, false) => unknown += 1,
            }
        }
    }
    (held, unallocated, unknown)
}

fn input(steps: usize, gpus: &[Vec<Series>]) -> (FleetInput, Vec<Option<String>>) {
    let mut tracks = Vec::new();
    let mut groups = Vec::new();
    for (g, series) in gpus.iter().enumerate() {
        for (k, (pod, read)) in series.iter().enumerate() {
            let pod = pod.map(|p| format!("ns{p}/pod{k}"));
            groups.push(pod.as_ref().map(|p| p[..3].to_owned()));
            let mut t = Track::new(pod, format!("node/gpu{g}"));
            t.model = Some("NVIDIA H100 80GB HBM3".into());
            for (s, _) in read.iter().enumerate().filter(|(_, r)| **r) {
                t.record(s, Point::new(Some(0.3), Some(0.9), Some(0.3), Some(1e9)));
            }
            tracks.push(t);
        }
    }
    let input = FleetInput {
        step_seconds: 3600.0,
        steps,
        tracks,
        held: BTreeMap::new(),
        step_bands: None,
    };
    (input, groups)
}

proptest! {
    #[test]
    fn every_gpu_step_is_held_unallocated_or_of_unknown_allocation((steps, gpus, per) in any_fleet()) {
        let (input, groups) = input(steps, &gpus);
        let cfg = ShowbackConfig {
            by: "namespace".into(),
            idle_busy_below: 0.05,
            idle_compute_below: 0.01,
            period_steps: Some(per),
            period_offset: 0,
            default_price: None,
            prices: Vec::new(),
            energy_price_per_kwh: None,
        };
        let s = showback(&input, &groups, &Holders::new(), &BTreeMap::new(), &cfg);
        let (held, unallocated, unknown) = by_hand(&gpus);
        let t = &s.total;
        let near = |a: f64, b: u64| (a - b as f64).abs() < 1e-9;
        let allocated: f64 = t.groups.iter().map(|g| g.allocated_gpu_hours).sum();
        prop_assert!(near(allocated, held), "{allocated} held, counted {held}");
        prop_assert!(near(t.unallocated_gpu_hours, unallocated), "{} unallocated, counted {unallocated}", t.unallocated_gpu_hours);
        prop_assert!(near(t.allocation_unknown_gpu_hours, unknown), "{} unknown, counted {unknown}", t.allocation_unknown_gpu_hours);
        prop_assert!(near(t.fleet_gpu_hours, held + unallocated + unknown));
        prop_assert!(t.reconciled, "{}", t.check);
        prop_assert!(t.funnel.adds_up, "{}", t.funnel.check);
        prop_assert!(near(t.funnel.allocation_unknown_gpu_hours, unknown));
        prop_assert!(near(t.funnel.unallocated_gpu_hours, unallocated));
        let periods: f64 = s.periods.iter().map(|p| p.allocation_unknown_gpu_hours).sum();
        prop_assert!(near(periods, unknown), "{periods} over the periods, counted {unknown}");
        for p in &s.periods {
            prop_assert!(p.reconciled, "{}", p.check);
        }
    }
}
