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

fn holding(pod: &str, estimate: Option<f64>) -> Holding {
    Holding {
        pod: pod.into(),
        group: pod.split('/').next().unwrap().into(),
        effective_compute_estimate: estimate,
        method: estimate.map(|_| "sm_busy_share".to_string()),
    }
}

/// A time-sliced GPU whose device series name no pod (truthscale's own history): its two
/// holders from the allocation info take half each, and half each of the device's
/// measured effective compute (0.3) as time-sliced effective compute; the one with a
/// per-process estimate (0.06 of the GPU) has it shown apart, never billed; both holders'
/// use is unknown. A step with one holder charges it the device's own use.
#[test]
fn holders_of_a_device_without_pods_take_its_shares() {
    let mut dev = Track::new(None, "n/g2".into());
    for s in 0..4 {
        dev.record(s, Point::new(Some(0.4), Some(1.0), Some(0.3), Some(1e9)));
    }
    let input = FleetInput {
        step_seconds: 3600.0,
        steps: 4,
        tracks: vec![dev],
        held: Default::default(),
        step_bands: None,
    };
    let mut steps = BTreeMap::new();
    for s in 0..3 {
        steps.insert(
            s,
            vec![holding("a/chat-a", Some(0.06)), holding("b/chat-b", None)],
        );
    }
    steps.insert(3, vec![holding("a/chat-a", None)]);
    let holders = Holders::from([("n/g2".to_string(), steps)]);
    let s = showback(&input, &[None], &holders, &BTreeMap::new(), &cfg());
    assert!(s.total.reconciled, "{}", s.total.check);
    assert_eq!(s.total.unallocated_gpu_hours, 0.0);
    let g = |n: &str| s.total.groups.iter().find(|g| g.group == n).unwrap();
    let a = g("a");
    assert_eq!(a.allocated_gpu_hours, 1.5 + 1.0);
    assert!(
        (a.effective_compute_gpu_hours.unwrap() - 0.3).abs() < 1e-12,
        "the step alone"
    );
    assert_eq!(a.effective_compute_measured_gpu_hours, 1.0);
    let sliced = a.time_sliced_effective_compute_gpu_hours.unwrap();
    assert!((sliced - 3.0 * 0.3 / 2.0).abs() < 1e-12, "{sliced}");
    assert!((a.effective_compute_estimate_gpu_hours.unwrap() - 3.0 * 0.06).abs() < 1e-12);
    assert_eq!(a.used_gpu_hours, 1.0);
    assert_eq!(a.use_unknown_gpu_hours, 1.5);
    assert_eq!(a.busy_gpu_hours, Some(1.0), "only the step it held alone");
    let b = g("b");
    assert_eq!(b.allocated_gpu_hours, 1.5);
    assert_eq!(b.use_unknown_gpu_hours, 1.5);
    // Never measured as its own: absent, not 0.
    assert_eq!(b.effective_compute_gpu_hours, None);
    assert_eq!(b.effective_compute_measured_gpu_hours, 0.0);
    assert!((b.time_sliced_effective_compute_gpu_hours.unwrap() - 1.5 * 0.3).abs() < 1e-12);
    assert_eq!(b.effective_compute_estimate_gpu_hours, None);
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("method sm_busy_share") && n.contains("never billed")),
        "{:?}",
        s.notes
    );
}

/// The report's check that its two halves count the same allocation: a time-sliced
/// device held at its 4 read hours is 4 GPU-hours on 1 GPU in both; with no holder named
/// for its last hour the showback charges 3 while the sizing (the device is one
/// workload all 4 hours) counts 4, and the check says they disagree.
#[test]
fn the_allocation_check_compares_the_sizing_and_the_showback() {
    let mut dev = Track::new(None, "n/g2".into());
    for s in 0..4 {
        dev.record(s, Point::new(Some(0.4), Some(1.0), Some(0.3), Some(1e9)));
    }
    let pods = vec!["a/chat-a".to_string(), "b/chat-b".to_string()];
    let input = FleetInput {
        step_seconds: 3600.0,
        steps: 4,
        tracks: vec![dev],
        held: BTreeMap::from([(
            "n/g2".to_string(),
            crate::fleet::HeldBy {
                pods: pods.into_iter().map(|p| (p, (0..4).collect())).collect(),
            },
        )]),
        step_bands: None,
    };
    let fleet = crate::fleet::analyze(&input, &crate::fleet::FleetConfig::default());
    for (named, agrees, charged) in [(4, true, 4.0), (3, false, 3.0)] {
        let steps: BTreeMap<usize, Vec<Holding>> = (0..named)
            .map(|s| {
                (
                    s,
                    vec![holding("a/chat-a", None), holding("b/chat-b", None)],
                )
            })
            .collect();
        let holders = Holders::from([("n/g2".to_string(), steps)]);
        let mut s = showback(&input, &[None], &holders, &BTreeMap::new(), &cfg());
        check_against_sizing(&mut s, &fleet);
        let a = &s.allocation;
        assert_eq!((a.gpus, a.gpu_hours, a.unread_gpu_hours), (1, charged, 0.0));
        assert_eq!(a.sizing_gpu_hours, Some(4.0));
        assert_eq!(a.agrees, Some(agrees), "{}", a.check);
        assert_eq!(a.check.contains("DISAGREE"), !agrees, "{}", a.check);
    }
}

/// Issue 34: a pod spinning one block (SM busy 0.6, no tensor work) beside a pod doing
/// GEMMs (tensor 0.30, SM busy 0.2) on one time-sliced H100 for 2 h. Truth from the
/// workload: the device's effective compute is the GEMM pod's tensor activity, 0.30; the
/// spin pod's own is 0. The SM-busy split gives the spin pod 0.30 × 0.6/0.8 = 0.225 and
/// the GEMM pod 0.075: that estimate is shown apart and never billed as measured; each
/// holder is billed half the GPU and half the device's measured 0.30.
#[test]
fn a_spinning_pod_is_never_billed_its_neighbours_gemms() {
    let (spin_sm, gemm_sm, gemm_tensor) = (0.6, 0.2, 0.30);
    let device_ecf = gemm_tensor; // the spin pod does no tensor or FP work
    let hours = 2.0;
    let mut dev = Track::new(None, "n/g0".into());
    for s in 0..2 {
        let busy = Some(1.0);
        dev.record(
            s,
            Point::new(Some(device_ecf), busy, Some(device_ecf), Some(1e9)),
        );
    }
    let input = FleetInput {
        step_seconds: 3600.0,
        steps: 2,
        tracks: vec![dev],
        held: Default::default(),
        step_bands: None,
    };
    // The estimate as the exporter writes it: the device value split by SM busy.
    let total_sm = spin_sm + gemm_sm;
    let (spin_est, gemm_est) = (
        device_ecf * spin_sm / total_sm,
        device_ecf * gemm_sm / total_sm,
    );
    let at = vec![
        holding("gemm/train", Some(gemm_est)),
        holding("spin/notebook", Some(spin_est)),
    ];
    let holders = Holders::from([(
        "n/g0".to_string(),
        BTreeMap::from([(0, at.clone()), (1, at)]),
    )]);
    let s = showback(&input, &[None], &holders, &BTreeMap::new(), &cfg());
    assert!(s.total.reconciled, "{}", s.total.check);
    let g = |n: &str| s.total.groups.iter().find(|g| g.group == n).unwrap();
    let near = |x: f64, y: f64| assert!((x - y).abs() < 1e-12, "{x} != {y}");
    for (name, est) in [("spin", 0.225), ("gemm", 0.075)] {
        let h = g(name);
        near(h.allocated_gpu_hours, hours / 2.0);
        // No measured effective compute is billed to either holder of the shared GPU:
        // neither holds it alone.
        assert_eq!(h.effective_compute_gpu_hours, None, "{name}");
        assert_eq!(h.effective_compute_measured_gpu_hours, 0.0, "{name}");
        assert_eq!(h.used_gpu_hours, 0.0, "{name}");
        near(h.use_unknown_gpu_hours, hours / 2.0);
        // The device's measured total, billed as the GPU is: half each.
        near(
            h.time_sliced_effective_compute_gpu_hours.unwrap(),
            device_ecf / 2.0 * hours,
        );
        // The estimate, in its own column.
        near(h.effective_compute_estimate_gpu_hours.unwrap(), est * hours);
    }
    near(spin_est, 0.225);
    near(gemm_est, 0.075);
    // The billed parts add up to the device's measured total.
    let billed: f64 = s
        .total
        .groups
        .iter()
        .filter_map(|g| g.time_sliced_effective_compute_gpu_hours)
        .sum();
    near(billed, device_ecf * hours);
}
