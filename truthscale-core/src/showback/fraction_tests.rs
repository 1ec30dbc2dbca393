use super::*;
use crate::fleet::{Point, Track};

fn cfg() -> ShowbackConfig {
    ShowbackConfig {
        by: "namespace".into(),
        idle_busy_below: 0.05,
        idle_compute_below: 0.01,
        period_steps: None,
        period_offset: 0,
        default_price: None,
        prices: Vec::new(),
        energy_price_per_kwh: None,
    }
}

/// A pod's (or the device's, `None`) series on `gpu` of 80 000 MiB, busy 0.9 and effective
/// compute 0.2 of the whole GPU at each of `steps` one-hour steps.
fn track(pod: Option<&str>, gpu: &str, steps: usize) -> Track {
    let mut t = Track::new(pod.map(str::to_string), gpu.into());
    t.model = Some("NVIDIA H100 80GB HBM3".into());
    t.spec = crate::gpus::lookup("NVIDIA H100 80GB HBM3");
    t.memory_total_mib = Some(80_000);
    for s in 0..steps {
        t.record(s, Point::new(Some(0.2), Some(0.9), Some(0.2), Some(1e9)));
    }
    t
}

fn compute(c: f64) -> Fraction {
    Fraction {
        compute: Some(c),
        ..Fraction::default()
    }
}

fn run(tracks: Vec<Track>, fractions: &Fractions) -> Showback {
    let input = FleetInput {
        step_seconds: 3600.0,
        steps: 2,
        tracks,
        held: Default::default(),
        step_bands: None,
    };
    let groups = super::tests::namespaces(&input);
    showback_with(
        &input,
        &groups,
        &Holders::new(),
        &BTreeMap::new(),
        (fractions, &MeasuredUse::new()),
        &cfg(),
    )
}

fn allocated(s: &Showback, group: &str) -> Option<f64> {
    s.total
        .groups
        .iter()
        .find(|g| g.group == group)
        .map(|g| g.allocated_gpu_hours)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// HAMi `nvidia.com/gpucores: 25` alone on a GPU for 2 h: 0.25 GPU-hours an hour (0.5),
/// the other 0.75 (1.5) unallocated, never charged to it. Its use is the device's (it is
/// alone): effective compute 0.2 of the GPU is 0.8 of its share, 0.8 × 0.5 = 0.4.
#[test]
fn gpucores_25_alone_is_charged_a_quarter() {
    let fr = Fractions::from([("a/hami".to_string(), compute(0.25))]);
    let s = run(vec![track(Some("a/hami"), "n/g1", 2)], &fr);
    assert!(s.total.reconciled, "{}", s.total.check);
    assert_eq!(allocated(&s, "a"), Some(0.5));
    assert_eq!(s.total.unallocated_gpu_hours, 1.5);
    assert_eq!(s.total.fleet_gpu_hours, 2.0);
    let a = &s.total.groups[0];
    assert_eq!(a.used_gpu_hours, 0.5);
    assert!(
        a.effective_compute_gpu_hours.is_some_and(|e| close(e, 0.4)),
        "{:?}",
        a.effective_compute_gpu_hours
    );
    // The funnel agrees: 0.4 of its 0.5 held GPU-hours computed, 0.1 busy but not.
    let f = &s.total.funnel;
    assert!(
        close(f.effective_gpu_hours.unwrap_or(f64::NAN), 0.4),
        "{:?}",
        f.effective_gpu_hours
    );
    assert!(
        close(f.busy_not_computing_gpu_hours.unwrap_or(f64::NAN), 0.1),
        "{:?}",
        f.busy_not_computing_gpu_hours
    );
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("1 pod(s) were charged the fraction"))
    );
}

/// Two HAMi pods, gpucores 25 and 50, on one GPU for 2 h: 0.5 and 1.0 GPU-hours, 0.5
/// unallocated (0.25/0.5/0.25 an hour); their use is unknown (the counters are the
/// device's), the device's effective compute billed by their shares.
#[test]
fn two_hami_pods_take_their_fractions_and_leave_the_rest_unallocated() {
    let fr = Fractions::from([
        ("a/p25".to_string(), compute(0.25)),
        ("b/p50".to_string(), compute(0.5)),
    ]);
    let s = run(
        vec![
            track(Some("a/p25"), "n/g1", 2),
            track(Some("b/p50"), "n/g1", 2),
        ],
        &fr,
    );
    assert!(s.total.reconciled, "{}", s.total.check);
    assert_eq!(allocated(&s, "a"), Some(0.5));
    assert_eq!(allocated(&s, "b"), Some(1.0));
    assert_eq!(s.total.unallocated_gpu_hours, 0.5);
    assert_eq!(s.total.overallocated_gpu_hours, 0.0);
    let b = s.total.groups.iter().find(|g| g.group == "b").unwrap();
    assert_eq!(b.use_unknown_gpu_hours, 1.0);
    let sliced = b.time_sliced_effective_compute_gpu_hours.unwrap();
    assert!(close(sliced, 0.2), "{sliced}");
}

/// Only `nvidia.com/gpumem: 20000` (MiB) on a GPU of 80 000 MiB: a quarter; a pod with no
/// fraction on the same GPU takes the rest (0.75).
#[test]
fn gpumem_alone_is_memory_over_the_gpus_and_others_share_the_rest() {
    let fr = Fractions::from([(
        "a/mem".to_string(),
        Fraction {
            memory_mib: Some(20_000.0),
            ..Fraction::default()
        },
    )]);
    let s = run(
        vec![
            track(Some("a/mem"), "n/g1", 2),
            track(Some("b/plain"), "n/g1", 2),
        ],
        &fr,
    );
    assert!(s.total.reconciled, "{}", s.total.check);
    assert_eq!(allocated(&s, "a"), Some(0.5));
    assert_eq!(allocated(&s, "b"), Some(1.5));
    assert_eq!(s.total.unallocated_gpu_hours, 0.0);
}

/// KAI `gpu-fraction: "0.5"` beside its reservation pod on the same GPU: the tenant 0.5 an
/// hour (1.0), the reservation pod nothing (a placeholder, not a tenant), 1.0 unallocated.
#[test]
fn kai_fraction_is_charged_and_the_reservation_pod_never() {
    let fr = Fractions::from([("team/kai".to_string(), compute(0.5))]);
    let s = run(
        vec![
            track(Some("team/kai"), "n/g1", 2),
            track(
                Some("kai-resource-reservation/gpu-reservation-n-abcde"),
                "n/g1",
                2,
            ),
        ],
        &fr,
    );
    assert!(s.total.reconciled, "{}", s.total.check);
    assert_eq!(allocated(&s, "team"), Some(1.0));
    assert_eq!(allocated(&s, "kai-resource-reservation"), None);
    assert_eq!(s.total.unallocated_gpu_hours, 1.0);
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("kai-resource-reservation/gpu-reservation-n-abcde")),
        "{:?}",
        s.notes
    );
    // A GPU only a reservation pod is seen on: all of it unallocated.
    let s = run(
        vec![track(Some("runai-reservation/r"), "n/g2", 2)],
        &Fractions::new(),
    );
    assert_eq!(s.total.unallocated_gpu_hours, 2.0);
    assert!(s.total.groups.is_empty());
}

/// A GPU whose device series name no pod (node mode): its holder with gpucores 25 takes a
/// quarter, a marked placeholder nothing.
#[test]
fn holders_of_a_device_without_pods_take_their_fractions() {
    let input = FleetInput {
        step_seconds: 3600.0,
        steps: 1,
        tracks: vec![track(None, "n/g1", 1)],
        held: Default::default(),
        step_bands: None,
    };
    let holding = |pod: &str| Holding {
        pod: pod.into(),
        group: pod.split('/').next().unwrap().into(),
        effective_compute_estimate: None,
        method: None,
    };
    let holders = Holders::from([(
        "n/g1".to_string(),
        BTreeMap::from([(0, vec![holding("a/p25"), holding("x/hold")])]),
    )]);
    let fr = Fractions::from([
        ("a/p25".to_string(), compute(0.25)),
        (
            "x/hold".to_string(),
            Fraction {
                placeholder: true,
                ..Fraction::default()
            },
        ),
    ]);
    let s = showback_with(
        &input,
        &[None],
        &holders,
        &BTreeMap::new(),
        (&fr, &MeasuredUse::new()),
        &cfg(),
    );
    assert!(s.total.reconciled, "{}", s.total.check);
    assert_eq!(allocated(&s, "a"), Some(0.25));
    assert_eq!(allocated(&s, "x"), None);
    assert_eq!(s.total.unallocated_gpu_hours, 0.75);
    let a = &s.total.groups[0];
    assert!(
        a.effective_compute_gpu_hours.is_some_and(|e| close(e, 0.2)),
        "alone: all of the device's"
    );
}

/// Fractions of share units: compute first, memory over the GPU's where compute is not
/// given, nothing else.
#[test]
fn a_fraction_in_share_units() {
    assert_eq!(compute(0.25).units(None), Some(SHARE_UNITS / 4));
    assert_eq!(compute(1.5).units(None), Some(SHARE_UNITS), "at most a GPU");
    let mem = Fraction {
        memory_mib: Some(40_000.0),
        ..Fraction::default()
    };
    assert_eq!(mem.units(Some(80_000.0)), Some(SHARE_UNITS / 2));
    assert_eq!(mem.units(None), None, "a GPU of unknown memory");
    assert_eq!(compute(0.0).units(Some(1.0)), None, "no compute part given");
    assert_eq!(compute(f64::NAN).units(None), None);
    // HAMi's gpumem-percentage 25: a quarter whatever the GPU's memory; a memory size over
    // a known total first.
    let percent = Fraction {
        memory_share: Some(0.25),
        ..Fraction::default()
    };
    assert_eq!(percent.units(None), Some(SHARE_UNITS / 4));
    assert_eq!(percent.units(Some(80_000.0)), Some(SHARE_UNITS / 4));
    let both = Fraction {
        memory_mib: Some(40_000.0),
        ..percent
    };
    assert_eq!(both.units(Some(80_000.0)), Some(SHARE_UNITS / 2));
    assert_eq!(
        both.units(None),
        Some(SHARE_UNITS / 4),
        "the share where the size is not"
    );
}

/// A track's granted share is its pod's fraction as the showback charges it: gpucores 25
/// a quarter, gpumem 20 000 MiB of the track's 80 000 a quarter too, none without a
/// fraction or a pod.
#[test]
fn a_tracks_granted_share_is_its_pods_fraction() {
    let fr = Fractions::from([
        ("a/cores".to_string(), compute(0.25)),
        (
            "a/mem".to_string(),
            Fraction {
                memory_mib: Some(20_000.0),
                ..Fraction::default()
            },
        ),
    ]);
    let share = |pod: Option<&str>| granted_share(&fr, &track(pod, "n/g1", 0));
    assert_eq!(share(Some("a/cores")), Some(0.25));
    assert_eq!(share(Some("a/mem")), Some(0.25));
    assert_eq!(share(Some("a/whole")), None);
    assert_eq!(share(None), None);
    assert_eq!(
        share(Some("kai-resource-reservation/gpu-reservation-n1")),
        Some(0.0),
        "a placeholder is granted nothing"
    );
}

/// Two HAMi pods, gpucores 25 and 50, whose own use HAMi measured (0.2 and 0.02 of the
/// whole GPU at each of 2 one-hour steps): no longer unknown; the first used 0.8 of its
/// share (busy 0.8 × 0.5 h = 0.4), the second 0.04 of its share, below the busy threshold
/// 0.05: idle (busy 0.04 × 1 h). The device's counters are not theirs: no effective compute of their own.
#[test]
fn hami_measured_use_is_the_holders_own() {
    let input = FleetInput {
        step_seconds: 3600.0,
        steps: 2,
        tracks: vec![
            track(Some("a/p25"), "n/g1", 2),
            track(Some("b/p50"), "n/g1", 2),
        ],
        held: Default::default(),
        step_bands: None,
    };
    let fr = Fractions::from([
        ("a/p25".to_string(), compute(0.25)),
        ("b/p50".to_string(), compute(0.5)),
    ]);
    let measured = MeasuredUse::from([
        ("a/p25".to_string(), BTreeMap::from([(0, 0.2), (1, 0.2)])),
        ("b/p50".to_string(), BTreeMap::from([(0, 0.02), (1, 0.02)])),
    ]);
    let groups = vec![Some("a".to_string()), Some("b".to_string())];
    let s = showback_with(
        &input,
        &groups,
        &Holders::new(),
        &BTreeMap::new(),
        (&fr, &measured),
        &cfg(),
    );
    assert!(s.total.reconciled, "{}", s.total.check);
    let g = |n: &str| s.total.groups.iter().find(|g| g.group == n).unwrap();
    let a = g("a");
    assert_eq!(a.allocated_gpu_hours, 0.5);
    assert_eq!(a.use_unknown_gpu_hours, 0.0);
    assert_eq!(a.used_gpu_hours, 0.5);
    assert!(
        a.busy_gpu_hours.is_some_and(|b| close(b, 0.4)),
        "{:?}",
        a.busy_gpu_hours
    );
    assert_eq!(a.effective_compute_measured_gpu_hours, 0.0);
    let b = g("b");
    assert_eq!(b.allocated_gpu_hours, 1.0);
    assert_eq!(b.idle_gpu_hours, 1.0);
    assert!(
        b.busy_gpu_hours.is_some_and(|x| close(x, 0.04)),
        "{:?}",
        b.busy_gpu_hours
    );
    assert_eq!(s.total.unallocated_gpu_hours, 0.5);
}

/// A lone HAMi pod (gpucores 25) whose own use HAMi measured (0.2 of the whole GPU, each of
/// 2 one-hour steps): the device's counters are still its own (no one else holds the GPU),
/// so its effective compute is the device's over its share, 0.2 / 0.25 = 0.8, as without
/// the measurement: 0.8 × 0.5 GPU-hours = 0.4, in the group and in the funnel alike (the
/// device's 0.2 of a GPU for 2 h). It read 0.1 in the funnel, and none in the group.
#[test]
fn a_lone_hami_pod_measured_keeps_the_devices_effective_compute() {
    let input = FleetInput {
        step_seconds: 3600.0,
        steps: 2,
        tracks: vec![track(Some("a/p25"), "n/g1", 2)],
        held: Default::default(),
        step_bands: None,
    };
    let fr = Fractions::from([("a/p25".to_string(), compute(0.25))]);
    let measured = MeasuredUse::from([("a/p25".to_string(), BTreeMap::from([(0, 0.2), (1, 0.2)]))]);
    let s = showback_with(
        &input,
        &[Some("a".to_string())],
        &Holders::new(),
        &BTreeMap::new(),
        (&fr, &measured),
        &cfg(),
    );
    assert!(s.total.reconciled, "{}", s.total.check);
    let a = &s.total.groups[0];
    assert!(
        a.effective_compute_gpu_hours.is_some_and(|e| close(e, 0.4)),
        "{:?}",
        a.effective_compute_gpu_hours
    );
    assert!(
        a.busy_gpu_hours.is_some_and(|b| close(b, 0.4)),
        "{:?}",
        a.busy_gpu_hours
    );
    let f = &s.total.funnel;
    assert!(
        close(f.effective_gpu_hours.unwrap_or(f64::NAN), 0.4),
        "{:?}",
        f.effective_gpu_hours
    );
}
