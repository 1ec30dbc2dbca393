use super::*;
use crate::fleet::test_support::{GIB, input};
use crate::gpus;

/// The idle workloads listed, with their idle GPU-hours.
fn idle_hours(r: &FleetReport) -> Vec<(&str, f64)> {
    r.idle
        .workloads
        .iter()
        .map(|w| (w.workload.as_str(), w.idle_gpu_hours))
        .collect()
}

/// Pins `analyze` on a small fleet that takes the branches the tests above do not: a
/// pod on two GPUs, mixed models, one GPU's memory from the catalog, a MIG instance, a
/// GPU without pod labels, both exclusion reasons, idleness unmeasured, a gap step and
/// savings without a price.
#[test]
fn a_mixed_fleet_takes_every_note() {
    let steps = 5;
    let spec = |t: &mut Track, key| {
        t.spec = gpus::by_key(key);
        t.model = t.spec.map(|s| s.name.to_owned());
    };
    let mut a = Track::new(Some("a/x".into()), "n/gpu 0".into());
    spec(&mut a, "h100-sxm");
    let mut b = Track::new(Some("a/x".into()), "n/gpu 1".into());
    spec(&mut b, "l4");
    let mut blind = Track::new(Some("b/blind".into()), "n/gpu 2".into());
    spec(&mut blind, "h100-sxm");
    let mut nomem = Track::new(Some("b/nomem".into()), "n/gpu 3".into());
    spec(&mut nomem, "h100-sxm");
    nomem.is_mig = true;
    // A MIG instance's total is not one GPU's memory.
    nomem.memory_total_mib = Some(40_000);
    for s in 0..4 {
        a.record(
            s,
            Point::new(Some(0.5), Some(0.9), Some(0.4), Some(10.0 * GIB)),
        );
        b.record(s, Point::new(Some(0.1), Some(0.5), Some(0.1), Some(GIB)));
        blind.record(s, Point::new(None, Some(0.0), None, None));
        nomem.record(s, Point::new(Some(0.2), None, None, None));
    }
    let mut bare = Track::new(None, "m/gpu 0".into());
    bare.record(0, Point::new(Some(0.3), None, None, None));
    let r = analyze(
        &input(vec![a, b, blind, nomem, bare], steps),
        &FleetConfig::default(),
    );
    assert_eq!(
        (r.workload_unit, r.workloads, r.steps_with_data),
        ("pod", 4, 4)
    );
    assert_eq!(r.gpus_without_pods, ["m/gpu 0"]);
    // The catalog's 80 GB, in whole MiB.
    assert_eq!(r.gpu_memory_bytes, Some(76_293.0 * MIB));
    let notes: Vec<&str> = r.notes.iter().map(|n| &n[..24]).collect();
    assert_eq!(
        notes,
        [
            "1 GPU(s) never carried p",
            "the fleet mixes 2 models",
            "no total-memory series f",
            "saturation (compute dema",
            "memory was never measure",
            "3 workload(s) had their ",
            "1 of 5 steps had no read",
        ]
    );
    assert!(r.notes[4].contains("for b/blind, b/nomem:"));
    let s = &r.sizing;
    assert_eq!(s.allocated_gpus.unwrap().max, 4.0);
    assert_eq!(s.gpus_reporting.unwrap().max, 5.0);
    assert_eq!(s.compute_demand_gpus.summary.unwrap().p99, 0.8);
    assert_eq!(
        (
            s.busy_claim_gpus.workloads,
            s.busy_claim_gpus.unmeasured.len()
        ),
        (3, 1)
    );
    assert_eq!(
        s.memory_demand_gpus.summary.unwrap().max,
        11_264.0 / 76_293.0
    );
    let pooled = s.pooled_lower_bound.as_ref().unwrap();
    assert_eq!(
        (pooled.gpus, pooled.compute_gpus, pooled.binding),
        (1, Some(1.0), Binding::Memory)
    );
    let p = s.packing.as_ref().unwrap();
    assert_eq!((p.packed_gpus, p.excluded_gpus, p.gpus), (1, 2, 3));
    assert_eq!(p.bins[0].workloads, ["a/x on n/gpu 0", "a/x on n/gpu 1"]);
    let reasons: Vec<(&str, &str)> = p
        .excluded
        .iter()
        .map(|e| (e.workload.as_str(), e.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("b/blind", "neither saturation nor memory was measured"),
            ("b/nomem", "memory was not measured"),
        ]
    );
    let c = &r.colocation[0];
    assert_eq!((c.gpus_held, c.gpus_freed, c.interleaved), (2, 1, false));
    assert_eq!((c.sum_of_p99s, c.saturation_p99), (0.6, Some(0.6)));
    assert_eq!(r.idle.workloads.len(), 1);
    assert_eq!(r.idle.workloads[0].workload, "b/blind");
    assert_eq!(r.idle.workloads[0].idle_gpu_hours, 4.0 / 60.0);
    assert_eq!(r.idle.unmeasured, ["b/nomem"]);
    assert_eq!(r.rightsizing.len(), 4);
    let sv = r.savings.as_ref().unwrap();
    assert_eq!((sv.baseline_gpus, sv.gpus_freed, sv.cost), (4, 1, None));
    assert_eq!(sv.gpu_hours, 4.0 / 60.0);
    assert_eq!(
        sv.assumptions.last().unwrap(),
        "no --cost-per-gpu-hour: GPU-hours only"
    );
    assert_eq!(r.series.memory_demand_gpus[4], None);
    assert_eq!(r.series.busy_claim_gpus[0], Some(1.4));
}

/// An idle MIG instance holds its share of the GPU's hours: an H100's 1g.10gb (1 of 7
/// compute slices) idle for 4 h at 3 a GPU-hour is 4/7 GPU-hours and 12/7, not a whole
/// GPU's 4 and 12; one of an unknown profile is named, its idle GPU-hours not counted.
/// How long a workload had been idle is counted back from its last reading that measured
/// use: where that last reading held memory alone (its busy flag lost), it is unknown, never
/// 0; idle to the end, it is the idle run.
#[test]
fn idle_for_is_unknown_where_the_last_reading_measured_no_use() {
    let idle_for = |memory_alone_last: bool| {
        let mut t = Track::new(Some("a/nb".into()), "n/gpu 0".into());
        for s in 0..4 {
            t.record(s, Point::new(Some(0.0), Some(0.0), Some(0.0), Some(1e9)));
        }
        if memory_alone_last {
            t.record(4, Point::new(None, None, None, Some(1e9)));
        }
        let mut input = input(vec![t], 5);
        input.step_seconds = 3600.0;
        let idle = analyze(&input, &FleetConfig::default()).idle;
        assert_eq!(idle.workloads.len(), 1);
        idle.workloads[0].idle_for_hours
    };
    assert_eq!(idle_for(true), None);
    // Read to its last point: idle for its 4 hours.
    assert_eq!(idle_for(false), Some(4.0));
}

#[test]
fn an_idle_mig_instance_holds_its_share() {
    let mut one = Track::new(Some("a/small".into()), "n/gpu 0/1".into());
    one.spec = gpus::by_key("h100-sxm");
    one.model = one.spec.map(|s| s.name.to_owned());
    one.is_mig = true;
    one.mig = one
        .spec
        .and_then(|s| s.mig.iter().find(|p| p.name == "1g.10gb"));
    assert_eq!(one.mig.map(|p| p.compute_slices), Some(1));
    let mut unknown = one.clone();
    unknown.pod = Some("a/unknown".into());
    unknown.gpu = "n/gpu 0/2".into();
    unknown.mig = None;
    for s in 0..4 {
        one.record(s, Point::new(Some(0.0), Some(0.0), Some(0.0), None));
        unknown.record(s, Point::new(Some(0.0), Some(0.0), Some(0.0), None));
    }
    let mut input = input(vec![one, unknown], 4);
    input.step_seconds = 3600.0;
    let cfg = FleetConfig {
        cost_per_gpu_hour: Some(3.0),
        ..FleetConfig::default()
    };
    let idle = analyze(&input, &cfg).idle;
    assert_eq!(idle.workloads.len(), 1);
    let w = &idle.workloads[0];
    assert_eq!(w.workload, "a/small");
    assert!(
        (w.idle_gpu_hours - 4.0 / 7.0).abs() < 1e-12,
        "{}",
        w.idle_gpu_hours
    );
    assert!((w.idle_cost.unwrap() - 12.0 / 7.0).abs() < 1e-12);
    assert_eq!(
        (w.held_hours, w.idle_for_hours),
        (4.0, Some(4.0)),
        "wall hours"
    );
    assert!((idle.idle_gpu_hours.unwrap() - 4.0 / 7.0).abs() < 1e-12);
    assert_eq!(idle.unmeasured, ["a/unknown"]);
}

/// A pod granted a fraction of its GPU (HAMi, KAI) holds that fraction of its idle hours,
/// as the showback charges it; pods sharing a GPU hold their grants together, or the
/// whole GPU where one of them has none. Idle for 4 h each: a lone pod granted 0.25 holds
/// 1 GPU-hour; pods granted 0.25 and 0.5 on one GPU 3; a granted pod and one without on
/// another GPU the whole 4; KAI's reservation pod (a placeholder, granted nothing) none
/// alone, and beside a tenant granted 0.5 the tenant's 2.
#[test]
fn a_pod_granted_a_fraction_holds_that_fraction_idle() {
    use crate::fleet::test_support::pod;
    let idle = |name: &str, gpu: &str, granted: Option<f64>| {
        let mut t = pod(name, gpu, 0..4, |_| (Some(0.0), Some(0.0), Some(1.0)));
        t.granted = granted;
        t
    };
    let tracks = vec![
        idle("a/lone", "n/gpu 0", Some(0.25)),
        idle("b/x", "n/gpu 1", Some(0.25)),
        idle("b/y", "n/gpu 1", Some(0.5)),
        idle("c/x", "n/gpu 2", Some(0.25)),
        idle("c/y", "n/gpu 2", None),
        // A reservation pod alone (its tenants not seen): granted nothing, no idle capacity.
        idle("kai-resource-reservation/r", "n/gpu 3", Some(0.0)),
        // A reservation pod beside its tenant: the tenant's grant alone.
        idle("kai-resource-reservation/s", "n/gpu 4", Some(0.0)),
        idle("k/t", "n/gpu 4", Some(0.5)),
    ];
    let mut input = input(tracks, 4);
    input.step_seconds = 3600.0;
    let idle = analyze(&input, &FleetConfig::default()).idle;
    let hours: Vec<(&str, f64)> = idle
        .workloads
        .iter()
        .map(|w| (w.workload.as_str(), w.idle_gpu_hours))
        .collect();
    assert_eq!(
        hours,
        [
            ("c/x + c/y", 4.0),
            ("b/x + b/y", 3.0),
            ("k/t + kai-resource-reservation/s", 2.0),
            ("a/lone", 1.0)
        ]
    );
    assert_eq!(idle.idle_gpu_hours, Some(10.0));
    assert!(idle.unmeasured.is_empty(), "{:?}", idle.unmeasured);
}

/// Pods that held one GPU one after another are workloads of their own, never one pair
/// "held at once": `train/job` busy for the first 5 hours of GPU 0, `dev/nb` idle for the
/// last 4 (neither in between) holds its own 4 idle GPU-hours; the pair would have held 4
/// of 9 hours idle, under the listing's half, and hidden it. In node mode, a GPU's pod-less
/// series after its one pod left (GPU 1: `ml/a` busy for 2 hours, named by the allocation
/// info too, then free for 8) is the GPU's free time, no pod's: `ml/a` holds no idle hour.
/// By hand.
#[test]
fn pods_one_after_another_on_a_gpu_are_workloads_of_their_own() {
    use crate::fleet::test_support::pod;
    let job = pod("train/job", "n/gpu 0", 0..5, |_| {
        (Some(0.5), Some(1.0), Some(60.0))
    });
    let nb = pod("dev/nb", "n/gpu 0", 6..10, |_| {
        (Some(0.0), Some(0.0), Some(4.0))
    });
    let a = pod("ml/a", "n/gpu 1", 0..2, |_| {
        (Some(0.5), Some(1.0), Some(10.0))
    });
    let mut free = Track::new(None, "n/gpu 1".into());
    for s in 2..10 {
        free.record(s, Point::new(Some(0.0), Some(0.0), Some(0.0), Some(GIB)));
    }
    let mut fleet = input(vec![job, nb, a, free], 10);
    fleet.step_seconds = 3600.0;
    fleet.held.insert(
        "n/gpu 1".into(),
        crate::fleet::HeldBy {
            pods: BTreeMap::from([("ml/a".into(), (0..2).collect())]),
        },
    );
    let r = analyze(&fleet, &FleetConfig::default());
    let hours = idle_hours(&r);
    assert_eq!(hours, [("dev/nb", 4.0)]);
    assert_eq!(r.idle.idle_gpu_hours, Some(4.0));
    assert!(
        !r.notes.iter().any(|n| n.contains("held by several pods")),
        "{:?}",
        r.notes
    );
}

/// A pod that held a GPU after two pods shared it is a workload of its own, not a third
/// holder of their merged one: `a/x` and `a/y` read at once for the first 4 hours of GPU 2
/// (busy), `b/z` alone for the last 5 (idle, neither of the others read then). `b/z` holds
/// its own 5 idle GPU-hours; the three together would have held 5 of 9 and named the two
/// busy pods. By hand.
#[test]
fn a_pod_after_a_shared_spell_is_a_workload_of_its_own() {
    use crate::fleet::test_support::pod;
    let busy = |name: &str| {
        pod(name, "n/gpu 2", 0..4, |_| {
            (Some(0.5), Some(1.0), Some(30.0))
        })
    };
    let z = pod("b/z", "n/gpu 2", 5..10, |_| {
        (Some(0.0), Some(0.0), Some(4.0))
    });
    let mut fleet = input(vec![busy("a/x"), busy("a/y"), z], 10);
    fleet.step_seconds = 3600.0;
    let r = analyze(&fleet, &FleetConfig::default());
    let hours = idle_hours(&r);
    assert_eq!(hours, [("b/z", 5.0)]);
    assert_eq!(r.idle.idle_gpu_hours, Some(5.0));
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("held by several pods") && n.ends_with(": n/gpu 2")),
        "{:?}",
        r.notes
    );
}

/// In node mode, a time-sliced GPU's pod-less series is its holders' only while the
/// allocation info names them: GPU 3 is read idle for 10 hours, `ml/b` (no series of its
/// own) held it for the first 4; it holds 4 idle GPU-hours, and the 6 after it left are
/// the GPU's free time, no pod's. GPU 4's holder held it only before its series was read:
/// no workload. By hand.
#[test]
fn node_mode_holders_hold_a_gpu_only_while_named() {
    let mut idle = Track::new(None, "n/gpu 3".into());
    let mut late = Track::new(None, "n/gpu 4".into());
    for s in 0..10 {
        idle.record(
            s,
            Point::new(Some(0.0), Some(0.0), Some(0.0), Some(4.0 * GIB)),
        );
    }
    for s in 5..10 {
        late.record(
            s,
            Point::new(Some(0.0), Some(0.0), Some(0.0), Some(4.0 * GIB)),
        );
    }
    let mut fleet = input(vec![idle, late], 10);
    fleet.step_seconds = 3600.0;
    for (gpu, pod, at) in [("n/gpu 3", "ml/b", 0..4), ("n/gpu 4", "ml/c", 0..5)] {
        fleet.held.insert(
            gpu.into(),
            crate::fleet::HeldBy {
                pods: BTreeMap::from([(pod.into(), at.collect())]),
            },
        );
    }
    let r = analyze(&fleet, &FleetConfig::default());
    let hours = idle_hours(&r);
    assert_eq!(hours, [("ml/b", 4.0)]);
    assert_eq!(r.idle.idle_gpu_hours, Some(4.0));
    assert_eq!(r.workloads, 1);
}

/// A node-mode holder with no series of its own holds the device's series only at its own
/// points, not at those of a holder with a series of its own: GPU 5 is read idle for 10
/// hours; `ml/b` (allocation info only) held it for the first 4, `ml/a` (its own series,
/// idle) for the last 4. Each is a workload of its own with 4 idle GPU-hours; taking
/// `ml/a`'s points as `ml/b`'s too would have made one "ml/a + ml/b" of 8. By hand.
#[test]
fn a_holder_with_no_series_holds_only_its_own_points() {
    use crate::fleet::test_support::pod;
    let mut device = Track::new(None, "n/gpu 5".into());
    for s in 0..10 {
        device.record(
            s,
            Point::new(Some(0.0), Some(0.0), Some(0.0), Some(4.0 * GIB)),
        );
    }
    let a = pod("ml/a", "n/gpu 5", 6..10, |_| {
        (Some(0.0), Some(0.0), Some(4.0))
    });
    let mut fleet = input(vec![device, a], 10);
    fleet.step_seconds = 3600.0;
    fleet.held.insert(
        "n/gpu 5".into(),
        crate::fleet::HeldBy {
            pods: BTreeMap::from([
                ("ml/b".into(), (0..4).collect()),
                ("ml/a".into(), (6..10).collect()),
            ]),
        },
    );
    let r = analyze(&fleet, &FleetConfig::default());
    let mut hours = idle_hours(&r);
    hours.sort_by(|x, y| x.0.cmp(y.0));
    assert_eq!(hours, [("ml/a", 4.0), ("ml/b", 4.0)]);
    assert_eq!(r.idle.idle_gpu_hours, Some(8.0));
}

/// The fleet's model is the most common among its physical GPUs: three whole L4s and one
/// H100 split into four MIG instances is an L4 fleet, not an H100 one (four workloads
/// against three).
#[test]
fn the_fleet_model_counts_gpus_not_mig_instances() {
    use crate::fleet::test_support::pod;
    let l4 = gpus::by_key("l4").unwrap();
    let mut tracks: Vec<Track> = (0..3)
        .map(|i| {
            let mut t = pod(&format!("web/l{i}"), &format!("n/gpu {i}"), 0..4, |_| {
                (Some(0.2), Some(0.5), Some(4.0))
            });
            t.spec = Some(l4);
            t.model = Some("NVIDIA L4".into());
            t.memory_total_mib = Some(23_034);
            t
        })
        .collect();
    for i in 0..4 {
        let mut t = pod(&format!("ml/m{i}"), "n/gpu 9", 0..4, |_| {
            (Some(0.2), Some(0.5), Some(4.0))
        });
        t.is_mig = true;
        t.mig = t
            .spec
            .and_then(|s| s.mig.iter().find(|m| m.name == "1g.10gb"));
        t.memory_total_mib = Some(10 * 1024);
        tracks.push(t);
    }
    let r = analyze(&input(tracks, 4), &FleetConfig::default());
    assert_eq!(r.gpu_model.as_deref(), Some(l4.name));
}

/// A fleet whose idleness was never measured (memory read, neither busy flag nor effective
/// compute) has no idle total: unknown, never 0.
#[test]
fn idle_capacity_never_measured_is_unknown() {
    use crate::fleet::test_support::pod;
    let t = pod("a/mem", "n/gpu 0", 0..4, |_| (None, None, Some(1.0)));
    let idle = analyze(&input(vec![t], 4), &FleetConfig::default()).idle;
    assert_eq!(idle.idle_gpu_hours, None);
    assert_eq!(idle.unmeasured, ["a/mem"]);
    assert!(idle.workloads.is_empty());
}

/// Savings are counted over the hours pods held GPUs, not every hour a GPU reported: two
/// pods on two GPUs for the last 4 of 10 hours, packed onto one, free 1 GPU for 4 hours
/// (a third GPU, without pods, reported all 10).
#[test]
fn savings_count_the_hours_pods_held_gpus() {
    use crate::fleet::test_support::pod;
    let a = pod("a/x", "n/gpu 0", 6..10, |_| {
        (Some(0.1), Some(0.5), Some(10.0))
    });
    let b = pod("a/y", "n/gpu 1", 6..10, |_| {
        (Some(0.1), Some(0.5), Some(10.0))
    });
    let mut bare = Track::new(None, "n/gpu 2".into());
    for s in 0..10 {
        bare.record(s, Point::new(Some(0.0), Some(0.0), Some(0.0), None));
    }
    let mut fleet = input(vec![a, b, bare], 10);
    fleet.step_seconds = 3600.0;
    let s = analyze(&fleet, &FleetConfig::default())
        .savings
        .expect("savings");
    assert_eq!((s.baseline_gpus, s.needed_gpus), (2, 1));
    assert_eq!(s.hours, 4.0);
    assert_eq!(s.gpu_hours, 4.0);
}

/// A peak held for one step saves for one step: pods `a/x` and `a/y` hold two GPUs for 10
/// hours, and `a/brief` a third for the last hour only; packed onto one GPU. The peak frees
/// 2 GPUs, but the GPU-hours are each hour's beyond the packing, 9 × 1 + 1 × 2 = 11, not
/// 2 × 10 = 20 (more than the 21 allocated less the 10 the packing needs). By hand.
#[test]
fn savings_count_each_steps_gpus_not_the_peaks() {
    use crate::fleet::test_support::pod;
    let small = |_| (Some(0.1), Some(0.1), Some(10.0));
    let a = pod("a/x", "n/gpu 0", 0..10, small);
    let b = pod("a/y", "n/gpu 1", 0..10, small);
    let brief = pod("a/brief", "n/gpu 2", 9..10, small);
    let mut fleet = input(vec![a, b, brief], 10);
    fleet.step_seconds = 3600.0;
    let s = analyze(&fleet, &FleetConfig::default())
        .savings
        .expect("savings");
    assert_eq!((s.baseline_gpus, s.needed_gpus, s.gpus_freed), (3, 1, 2));
    assert_eq!(s.hours, 10.0);
    assert_eq!(s.gpu_hours, 11.0);
}
