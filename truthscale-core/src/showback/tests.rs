use super::*;
use crate::fleet::{Point, Track};

fn cfg(by: &str) -> ShowbackConfig {
    ShowbackConfig {
        by: by.into(),
        idle_busy_below: 0.05,
        idle_compute_below: 0.01,
        period_steps: None,
        period_offset: 0,
        default_price: None,
        prices: Vec::new(),
        energy_price_per_kwh: None,
    }
}

/// A window of 12 one-minute steps holding track `t` alone.
fn twelve_minutes(t: Track) -> FleetInput {
    FleetInput {
        step_seconds: 60.0,
        steps: 12,
        tracks: vec![t],
        held: Default::default(),
        step_bands: None,
    }
}

/// An empty track of an H100 on `gpu`, held by `pod`.
fn h100(pod: Option<&str>, gpu: &str) -> Track {
    let mut t = Track::new(pod.map(str::to_string), gpu.into());
    t.model = Some("NVIDIA H100 80GB HBM3".into());
    t.spec = crate::gpus::lookup("NVIDIA H100 80GB HBM3");
    t
}

fn track(pod: Option<&str>, gpu: &str, points: &[Option<(f64, f64)>]) -> Track {
    let mut t = h100(pod, gpu);
    for (s, p) in points.iter().enumerate() {
        let p = p.map_or(Point::NONE, |(busy, ecf)| {
            Point::new(Some(ecf), Some(busy), Some(ecf), Some(1e9))
        });
        t.record(s, p);
    }
    t
}

/// A whole GPU, a time-sliced one, a MIG instance and a GPU no pod holds, each over a few
/// 60 s steps (ten in the window), and each track's group, its pod's namespace.
fn four_gpus() -> (FleetInput, Vec<Option<String>>) {
    let used = Some((0.9, 0.3));
    let idle = Some((0.0, 0.0));
    let a = track(
        Some("ml/a"),
        "n/g1",
        &[
            used,
            used,
            used,
            used,
            used,
            idle,
            idle,
            idle,
            None,
            Some((1.0, 0.5)),
        ],
    );
    let b = track(Some("ml/b"), "n/g2", &[used; 6]);
    let c = track(Some("web/c"), "n/g2", &[used; 6]);
    let mut d = track(Some("web/d"), "n/g3", &[Some((0.5, 0.2)); 7]);
    d.is_mig = true;
    d.mig = d
        .spec
        .and_then(|s| s.mig.iter().find(|p| p.name == "3g.40gb"));
    assert!(d.mig.is_some());
    let e = track(None, "n/g4", &[used; 4]);
    let input = FleetInput {
        step_seconds: 60.0,
        steps: 10,
        tracks: vec![a, b, c, d, e],
        held: Default::default(),
        step_bands: None,
    };
    let groups = namespaces(&input);
    (input, groups)
}

/// Each track's group: its pod's namespace (`None` without a pod).
pub(super) fn namespaces(input: &FleetInput) -> Vec<Option<String>> {
    input
        .tracks
        .iter()
        .map(|t| {
            t.pod
                .as_deref()
                .map(|p| p.split('/').next().unwrap().to_string())
        })
        .collect()
}

/// `steps` 60 s steps, in hours.
fn h(steps: f64) -> f64 {
    steps / 60.0
}

#[track_caller]
fn near(x: f64, y: f64) {
    assert!((x - y).abs() < 1e-9, "{x} != {y}");
}

/// [`four_gpus`]: every figure counted by hand from its steps.
#[test]
fn gpu_hours_by_group_reconcile_with_the_fleet() {
    let (input, groups) = four_gpus();
    let requested = BTreeMap::from([
        ("ml".to_string(), BTreeMap::from([(0, 0.5)])),
        ("batch".to_string(), BTreeMap::from([(0, 0.25)])),
    ]);
    let s = showback(
        &input,
        &groups,
        &Holders::new(),
        &requested,
        &cfg("namespace"),
    );
    let t = &s.total;
    assert!(t.reconciled, "{}", t.check);
    near(t.fleet_gpu_hours, h(10.0 + 6.0 + 7.0 + 4.0));
    near(t.unallocated_gpu_hours, h(4.0 + 4.0));
    assert_eq!(
        t.check,
        "groups 0.317 + unallocated 0.133 = fleet 0.450 GPU-hours"
    );
    let g = |name: &str| t.groups.iter().find(|g| g.group == name).unwrap();
    ml_by_hand(g("ml"));
    web_by_hand(g("web"));
    let batch = g("batch");
    assert_eq!(batch.allocated_gpu_hours, 0.0);
    assert_eq!(batch.requested_gpu_hours, Some(0.25));
    assert_eq!(t.groups[0].group, "ml", "most allocated first");
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("1 GPU(s) were time-sliced")),
        "{:?}",
        s.notes
    );
}

/// `ml` of [`four_gpus`]: all of g1 (5 used, 3 idle, 1 unmeasured, 1 used at 0.5) and half
/// of the time-sliced g2's 6 steps.
fn ml_by_hand(ml: &GroupHours) {
    assert_eq!(ml.workloads, 2);
    near(ml.allocated_gpu_hours, h(10.0 + 3.0));
    near(ml.used_gpu_hours, h(6.0));
    near(ml.idle_gpu_hours, h(3.0));
    near(ml.unmeasured_gpu_hours, h(1.0));
    near(ml.use_unknown_gpu_hours, h(3.0));
    near(ml.effective_compute_gpu_hours.unwrap(), h(5.0 * 0.3 + 0.5));
    near(ml.effective_compute_measured_gpu_hours, h(9.0));
    near(ml.busy_gpu_hours.unwrap(), h(5.0 * 0.9 + 1.0));
    // Half of the time-sliced device's measured 0.3 over its 6 steps, not its own use.
    near(
        ml.time_sliced_effective_compute_gpu_hours.unwrap(),
        h(6.0 * 0.3 / 2.0),
    );
    assert_eq!(ml.effective_compute_estimate_gpu_hours, None);
    assert_eq!(ml.requested_gpu_hours, Some(0.5));
}

/// `web` of [`four_gpus`]: the other half of g2, and the 3g.40gb instance on g3.
fn web_by_hand(web: &GroupHours) {
    near(web.allocated_gpu_hours, h(3.0 + 7.0 * 3.0 / 7.0));
    near(web.use_unknown_gpu_hours, h(3.0));
    // The MIG instance's own counters: 3/7 of the GPU-time, at its measured fractions.
    near(web.used_gpu_hours, h(3.0));
    near(web.effective_compute_gpu_hours.unwrap(), h(3.0 * 0.2));
    // Its saturation is recorded in whole-GPU terms (0.2 of the whole GPU, as the sizing
    // reads it): 0.2 of the GPU's 7 steps, not again times its 3/7 share.
    near(web.saturation_gpu_hours.unwrap(), h(7.0 * 0.2));
    assert!(web.requested_gpu_hours.is_none());
}

/// Prices by model: the cost of each part, and of idle; a group holding a model without a
/// price has no cost (its priced part alone would bill the rest at 0), and the model is
/// named.
#[test]
fn costs_by_model_and_periods() {
    let used = Some((0.9, 0.3));
    let idle = Some((0.0, 0.0));
    let a = track(Some("ml/a"), "n/g1", &[used, idle, used, idle]);
    let mut b = track(Some("lab/b"), "n/g2", &[used, used, used, used]);
    b.model = Some("Tesla T4".into());
    b.spec = crate::gpus::lookup("Tesla T4");
    let mut c2 = track(Some("ml/c"), "n/g3", &[used, used, used, used]);
    c2.model = b.model.clone();
    c2.spec = b.spec;
    let input = FleetInput {
        step_seconds: 3600.0,
        steps: 4,
        tracks: vec![a, b],
        held: Default::default(),
        step_bands: None,
    };
    let groups = vec![Some("ml".to_string()), Some("lab".to_string())];
    let mut c = cfg("namespace");
    c.prices = vec![("NVIDIA H100 80GB HBM3".into(), 4.0)];
    c.period_steps = Some(2);
    let s = showback(&input, &groups, &Holders::new(), &BTreeMap::new(), &c);
    let group = |p: &Period, g: &str| p.groups.iter().find(|x| x.group == g).cloned().unwrap();
    let ml = group(&s.total, "ml");
    let cost = ml.cost.as_ref().unwrap();
    assert_eq!(cost.allocated, 16.0, "4 H100 GPU-hours at 4");
    assert_eq!(cost.idle, 8.0);
    assert_eq!(cost.used, 8.0);
    assert!((cost.effective_compute.unwrap() - 2.0 * 0.3 * 4.0).abs() < 1e-9);
    assert_eq!(group(&s.total, "lab").cost, None, "the T4 has no price");
    assert!(
        s.notes.iter().any(|n| n.contains("no price for Tesla T4")),
        "{:?}",
        s.notes
    );
    assert_eq!(s.periods.len(), 2);
    for p in &s.periods {
        assert!(p.reconciled, "{}", p.check);
        assert_eq!(p.fleet_gpu_hours, 4.0);
        assert_eq!(group(p, "ml").idle_gpu_hours, 1.0);
    }
    // One group holding both models: its cost is not known, never the H100's part alone.
    let mixed = FleetInput {
        tracks: vec![input.tracks[0].clone(), c2],
        ..input
    };
    let both = vec![Some("ml".to_string()), Some("ml".to_string())];
    let s = showback(&mixed, &both, &Holders::new(), &BTreeMap::new(), &c);
    assert_eq!(s.total.groups[0].allocated_gpu_hours, 8.0);
    assert_eq!(s.total.groups[0].cost, None);
    assert_eq!(s.total.unallocated_cost, Some(0.0), "nothing unallocated");
}

/// [`four_gpus`] with the time-sliced g2 an L4 and g4 of a model not reported, split by
/// model: H100 at 4, L4 at 1, the default 2 for the unreported one. Each part holds its GPUs'
/// hours alone (by hand from their steps), every cost is the part's hours at its one price,
/// and the parts add up to the whole showback.
#[test]
fn a_showback_split_by_model_adds_up_to_the_whole() {
    let (mut input, groups) = four_gpus();
    for t in &mut input.tracks[1..3] {
        t.model = Some("NVIDIA L4".into());
        t.spec = crate::gpus::lookup("NVIDIA L4");
    }
    input.tracks[4].model = None;
    let mut c = cfg("namespace");
    c.prices = vec![
        ("NVIDIA H100 80GB HBM3".into(), 4.0),
        ("NVIDIA L4".into(), 1.0),
    ];
    c.default_price = Some(2.0);
    let none = (&Fractions::new(), &MeasuredUse::new());
    let parts = showback_by_model(&input, &groups, &Holders::new(), none, &c);
    let models: Vec<(Option<&str>, Option<f64>)> = parts
        .iter()
        .map(|p| (p.model.as_deref(), p.price))
        .collect();
    assert_eq!(
        models,
        [
            (Some("NVIDIA H100 80GB HBM3"), Some(4.0)),
            (Some("NVIDIA L4"), Some(1.0)),
            (None, Some(2.0))
        ]
    );
    // (ml, web, unallocated) GPU-hours of each part: g1 all ml, g3's 3g.40gb web and the
    // rest of g3 no pod's; g2 half ml, half web; g4 no pod's.
    let want = [
        (h(10.0), h(3.0), h(4.0)),
        (h(3.0), h(3.0), 0.0),
        (0.0, 0.0, h(4.0)),
    ];
    for (part, (ml, web, unallocated)) in parts.iter().zip(want) {
        let t = &part.showback.total;
        let price = part.price.unwrap();
        let group = |g: &str| t.groups.iter().find(|x| x.group == g);
        for (name, hours) in [("ml", ml), ("web", web)] {
            let Some(g) = group(name) else {
                assert_eq!(hours, 0.0, "{name} in {:?}", part.model);
                continue;
            };
            near(g.allocated_gpu_hours, hours);
            near(g.cost.as_ref().unwrap().allocated, price * hours);
        }
        near(t.unallocated_gpu_hours, unallocated);
        near(t.unallocated_cost.unwrap(), price * unallocated);
        assert!(t.reconciled, "{}", t.check);
    }
    let whole = showback(&input, &groups, &Holders::new(), &BTreeMap::new(), &c).total;
    let sum = |f: &dyn Fn(&Period) -> f64| parts.iter().map(|p| f(&p.showback.total)).sum::<f64>();
    near(sum(&|t| t.fleet_gpu_hours), whole.fleet_gpu_hours);
    near(
        sum(&|t| t.unallocated_cost.unwrap()),
        whole.unallocated_cost.unwrap(),
    );
    let cost = |t: &Period| {
        t.groups
            .iter()
            .map(|g| g.cost.as_ref().unwrap().allocated)
            .sum::<f64>()
    };
    near(sum(&cost), cost(&whole));
    // ml: 10 H100 steps and 3 L4 ones; web: 3 of each.
    near(cost(&whole), 4.0 * h(10.0 + 3.0) + 1.0 * h(3.0 + 3.0));
}

/// A GPU with no series between two holders (a gap in its series): whether a pod held it
/// is not known, so the steps are allocation unknown, never unallocated, and priced as its
/// model: they still count in the fleet, at the GPU's price.
#[test]
fn a_gap_between_two_holders_is_allocation_unknown_and_priced() {
    let used = Some((0.9, 0.3));
    let a = track(Some("ml/a"), "n/g1", &[used]);
    let mut b = track(Some("ml/b"), "n/g1", &[]);
    b.record(3, Point::new(Some(0.3), Some(0.9), Some(0.3), Some(1e9)));
    let input = FleetInput {
        step_seconds: 3600.0,
        steps: 4,
        tracks: vec![a, b],
        held: Default::default(),
        step_bands: None,
    };
    let groups = vec![Some("ml".to_string()), Some("ml".to_string())];
    let mut c = cfg("namespace");
    c.prices = vec![("NVIDIA H100 80GB HBM3".into(), 4.0)];
    let s = showback(&input, &groups, &Holders::new(), &BTreeMap::new(), &c);
    let t = &s.total;
    assert_eq!(t.fleet_gpu_hours, 4.0);
    // Steps 1 and 2: nothing of the GPU read, no holder named.
    assert_eq!(t.allocation_unknown_gpu_hours, 2.0);
    assert_eq!(t.allocation_unknown_cost, Some(8.0), "2 h at 4, not 0");
    assert_eq!(t.unallocated_gpu_hours, 0.0);
    assert_eq!(t.unallocated_cost, Some(0.0), "nothing unallocated");
    assert_eq!(t.groups[0].cost.as_ref().unwrap().allocated, 8.0);
    assert!(t.reconciled, "{}", t.check);
    assert_eq!(
        t.check,
        "groups 2.000 + unallocated 0.000 + allocation unknown 2.000 = fleet 4.000 GPU-hours"
    );
    let f = &t.funnel;
    assert_eq!(
        (
            f.total_gpu_hours,
            f.healthy_gpu_hours,
            f.allocated_gpu_hours
        ),
        (4.0, 4.0, 2.0)
    );
    assert_eq!(
        (f.unallocated_gpu_hours, f.allocation_unknown_gpu_hours),
        (0.0, 2.0)
    );
    assert_eq!(f.health_unread_gpu_hours, 4.0);
    assert!(f.adds_up, "{}", f.check);
    let note = s.notes.iter().find(|n| n.contains("allocation unknown"));
    assert!(
        note.is_some_and(|n| n.starts_with("2.00 GPU-hours on 1 GPU(s) had nothing")),
        "{:?}",
        s.notes
    );
}

/// A GPU whose own series name no pod (node mode, dcgm-exporter): a step it was read with
/// no holder named is unallocated; a step in a gap of its series is allocation unknown,
/// unless node mode named its holders then.
#[test]
fn a_gap_in_a_device_series_is_allocation_unknown_unless_a_holder_is_named() {
    let idle = Some((0.0, 0.0));
    // Read at steps 0, 1 and 4 to 5; nothing at 2 and 3.
    let device = track(None, "n/g1", &[idle, idle, None, None, idle, idle]);
    let input = FleetInput {
        step_seconds: 3600.0,
        steps: 6,
        tracks: vec![device],
        held: Default::default(),
        step_bands: None,
    };
    let groups = vec![None];
    let s = showback(
        &input,
        &groups,
        &Holders::new(),
        &BTreeMap::new(),
        &cfg("namespace"),
    );
    let t = &s.total;
    assert_eq!(
        (
            t.fleet_gpu_hours,
            t.unallocated_gpu_hours,
            t.allocation_unknown_gpu_hours
        ),
        (6.0, 4.0, 2.0)
    );
    assert!(t.reconciled, "{}", t.check);
    // Node mode names a holder at step 3: that step is held (its use unmeasured).
    let holding = Holding {
        pod: "ml/a".into(),
        group: "ml".into(),
        effective_compute_estimate: None,
        method: None,
    };
    let holders: Holders = [("n/g1".to_string(), BTreeMap::from([(3, vec![holding])]))].into();
    let s = showback(
        &input,
        &groups,
        &holders,
        &BTreeMap::new(),
        &cfg("namespace"),
    );
    let t = &s.total;
    assert_eq!(
        (t.unallocated_gpu_hours, t.allocation_unknown_gpu_hours),
        (4.0, 1.0)
    );
    assert_eq!(t.groups[0].allocated_gpu_hours, 1.0);
    assert_eq!(t.groups[0].unmeasured_gpu_hours, 1.0);
    assert!(t.reconciled, "{}", t.check);
}

/// A track of `watts` at each step (`None`: power not read), busy 0.9.
fn powered(pod: Option<&str>, gpu: &str, watts: &[Option<f64>]) -> Track {
    let mut t = h100(pod, gpu);
    for (s, w) in watts.iter().enumerate() {
        let p = Point::new(Some(0.3), Some(0.9), Some(0.3), Some(1e9)).with_power(*w);
        t.record(s, p);
    }
    t
}

/// A whole GPU at 700 W held by `ml` for 3 steps of 60 s (no power read at its fourth); a
/// GPU time-sliced by `ml` and `web` at 333.3 W; a 3g.40gb MIG instance of `web` on a GPU
/// at 400.1 W; a GPU no pod holds at 61.7 W (its idle floor).
fn powered_gpus() -> FleetInput {
    let a = powered(
        Some("ml/a"),
        "n/g1",
        &[Some(700.0), Some(700.0), Some(700.0), None],
    );
    let b = powered(Some("ml/b"), "n/g2", &[Some(333.3); 3]);
    let c = powered(Some("web/c"), "n/g2", &[Some(333.3); 3]);
    let mut d = powered(Some("web/d"), "n/g3", &[Some(400.1); 2]);
    d.is_mig = true;
    d.mig = d
        .spec
        .and_then(|s| s.mig.iter().find(|p| p.name == "3g.40gb"));
    let e = powered(None, "n/g4", &[Some(61.7); 4]);
    FleetInput {
        step_seconds: 60.0,
        steps: 4,
        tracks: vec![a, b, c, d, e],
        held: Default::default(),
        step_bands: None,
    }
}

/// Energy by group beside GPU-hours, by hand, on [`powered_gpus`]: the time-sliced GPU's
/// energy 1/2 to each holder, the MIG GPU's 3/7 to its instance, the GPU no pod holds all
/// unallocated; a step with no power read counts no energy. Groups plus unallocated are
/// the fleet's energy exactly, with a price per kWh.
#[test]
fn energy_by_group_reconciles_with_the_fleets_exactly() {
    let input = powered_gpus();
    let mut config = cfg("namespace");
    config.energy_price_per_kwh = Some(0.25);
    let s = showback(
        &input,
        &namespaces(&input),
        &Holders::new(),
        &BTreeMap::new(),
        &config,
    );
    let kwh = |joules: f64| joules / 3.6e6;
    // By hand, in joules.
    let g1 = 700.0 * 60.0 * 3.0;
    let g2 = 333.3 * 60.0 * 3.0;
    let g3 = 400.1 * 60.0 * 2.0;
    let g4 = 61.7 * 60.0 * 4.0;
    let ml = g1 + g2 / 2.0;
    let web = g2 / 2.0 + g3 * 3.0 / 7.0;
    let unallocated = g3 * 4.0 / 7.0 + g4;
    let row = |g: &str| {
        s.total
            .groups
            .iter()
            .find(|r| r.group == g)
            .unwrap()
            .clone()
    };
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(
        close(row("ml").energy_kwh.unwrap(), kwh(ml)),
        "{:?}",
        row("ml")
    );
    assert!(close(row("web").energy_kwh.unwrap(), kwh(web)));
    // The GPU-hours each group's energy covers: ml's 4 steps of g1 (power read at 3) and
    // half of g2's 3; web's half of g2's 3 and 3/7 of g3's 2, all read.
    let step = 1.0 / 60.0;
    assert!(close(row("ml").allocated_gpu_hours, 5.5 * step));
    assert!(close(row("ml").energy_measured_gpu_hours, 4.5 * step));
    let web_hours = (1.5 + 6.0 / 7.0) * step;
    assert!(close(row("web").energy_measured_gpu_hours, web_hours));
    assert!(close(row("web").allocated_gpu_hours, web_hours));
    assert!(close(row("web").energy_cost.unwrap(), kwh(web) * 0.25));
    let e = s.total.energy.as_ref().unwrap();
    assert!(close(e.unallocated_kwh, kwh(unallocated)), "{e:?}");
    // The unallocated hours that energy covers: 4/7 of g3's 2 steps, and g4's 4.
    assert!(close(
        e.unallocated_measured_gpu_hours,
        (8.0 / 7.0 + 4.0) * step
    ));
    assert!(close(e.fleet_kwh, kwh(g1 + g2 + g3 + g4)));
    assert!(e.reconciled, "{}", e.check);
    // Exactly: the groups' kWh are the sum of millijoule parts that add up to the fleet's.
    assert_eq!(
        (e.groups_kwh * 3.6e9).round() + (e.unallocated_kwh * 3.6e9).round(),
        (e.fleet_kwh * 3.6e9).round()
    );
    assert!(close(e.fleet_cost.unwrap(), kwh(g1 + g2 + g3 + g4) * 0.25));
    // The held GPU-step without power (ml/a's last) is named: 1 of 9 held 60 s steps.
    assert!(
        s.notes.iter().any(|n| n.starts_with(
            "0.02 of the 0.15 GPU-hours held by pods had no power reading: the groups' energy (kWh, and its cost) covers the other 0.13 only"
        )),
        "{:?}",
        s.notes
    );
}

/// A GPU no pod holds whose power was read at 2 of its 4 steps (its busy flag at all four):
/// the unallocated and fleet energy cover those 2 alone, and a note says so and how much
/// was not covered; the held GPU's energy is whole, and no note speaks of held hours.
#[test]
fn unheld_hours_without_power_are_named_as_a_lower_bound() {
    let held = powered(Some("ml/a"), "n/g1", &[Some(700.0); 4]);
    let idle = powered(None, "n/g2", &[Some(61.7), None, Some(61.7), None]);
    let input = FleetInput {
        step_seconds: 60.0,
        steps: 4,
        tracks: vec![held, idle],
        held: Default::default(),
        step_bands: None,
    };
    let s = showback(
        &input,
        &namespaces(&input),
        &Holders::new(),
        &BTreeMap::new(),
        &cfg("namespace"),
    );
    let kwh = |joules: f64| joules / 3.6e6;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let e = s.total.energy.as_ref().unwrap();
    assert!(close(e.unallocated_kwh, kwh(61.7 * 60.0 * 2.0)), "{e:?}");
    assert!(
        close(e.fleet_kwh, kwh(700.0 * 240.0 + 61.7 * 120.0)),
        "{e:?}"
    );
    assert_eq!(s.total.unallocated_gpu_hours, 4.0 / 60.0);
    assert_eq!(e.unallocated_measured_gpu_hours, 2.0 / 60.0);
    // 2 of 4 steps of 60 s: 0.033 of 0.067 GPU-hours.
    assert!(
        s.notes.iter().any(|n| n.starts_with(
            "0.03 of the 0.07 GPU-hours no pod held had no power reading: the unallocated energy (kWh, and its cost), and the fleet's with it, covers the other 0.03 only, a lower bound"
        )),
        "{:?}",
        s.notes
    );
    assert!(
        !s.notes
            .iter()
            .any(|n| n.contains("held by pods had no power"))
    );
}

/// Without any power read, no energy: never a zero, and no note of a lower bound.
#[test]
fn no_power_read_is_no_energy_and_no_bound() {
    let blind = track(Some("ml/a"), "n/g1", &[Some((0.9, 0.3))]);
    let input = FleetInput {
        step_seconds: 60.0,
        steps: 1,
        tracks: vec![blind],
        held: Default::default(),
        step_bands: None,
    };
    let mut config = cfg("namespace");
    config.energy_price_per_kwh = Some(0.25);
    let s = showback(
        &input,
        &[Some("ml".into())],
        &Holders::new(),
        &BTreeMap::new(),
        &config,
    );
    assert_eq!(s.total.energy, None);
    assert_eq!(s.total.groups[0].energy_kwh, None);
    assert!(
        !s.notes.iter().any(|n| n.contains("no power reading")),
        "{:?}",
        s.notes
    );
}

/// Saturation is charged where it was measured, the busy flag read or not: tensor 0.5 at
/// each of 12 one-minute steps, the busy flag blank at 4 of them (and no effective compute)
/// is 0.5 × 12 GPU-minutes over 12 measured, where the 4 steps without a busy flag were
/// left out (0.5 × 8 over 8). By hand.
#[test]
fn saturation_is_charged_where_measured_whatever_the_busy_flag() {
    let mut t = h100(Some("ml/a"), "n/g1");
    for s in 0..12 {
        let busy = (s % 3 != 0).then_some(0.8);
        t.record(s, Point::new(Some(0.5), busy, None, Some(1e9)));
    }
    let input = twelve_minutes(t);
    let groups = vec![Some("ml".to_string())];
    let s = showback(
        &input,
        &groups,
        &Holders::new(),
        &BTreeMap::new(),
        &cfg("namespace"),
    );
    let ml = &s.total.groups[0];
    near(ml.saturation_gpu_hours.unwrap(), h(0.5 * 12.0));
    near(ml.saturation_measured_gpu_hours, h(12.0));
    near(ml.busy_gpu_hours.unwrap(), h(0.8 * 8.0));
}

/// The GPU-hours no pod held cost each GPU's hours at its price; without a price, unknown.
#[test]
fn the_unallocated_gpu_hours_have_a_cost() {
    let used = Some((0.9, 0.3));
    let input = FleetInput {
        step_seconds: 60.0,
        steps: 6,
        tracks: vec![
            track(Some("ml/a"), "n/g1", &[used; 6]),
            track(None, "n/g2", &[used; 4]),
        ],
        held: Default::default(),
        step_bands: None,
    };
    let groups = vec![Some("ml".to_string()), None];
    let run = |price: Option<f64>| {
        let cfg = ShowbackConfig {
            default_price: price,
            ..cfg("namespace")
        };
        showback(&input, &groups, &Holders::new(), &BTreeMap::new(), &cfg)
    };
    let s = run(Some(3.0));
    // The pod-less GPU: 4 steps of 1/60 h at 3 an hour.
    assert!((s.total.unallocated_gpu_hours - 4.0 / 60.0).abs() < 1e-12);
    let cost = s.total.unallocated_cost.expect("priced");
    assert!((cost - 3.0 * 4.0 / 60.0).abs() < 1e-12, "{cost}");
    assert_eq!(run(None).total.unallocated_cost, None);
}

/// With prices given, a period in which no GPU reported (the exporter started later) has
/// nothing unallocated and it costs 0, known; without prices, its cost is unknown.
#[test]
fn a_period_before_any_gpu_reported_costs_nothing_unallocated() {
    let mut t = h100(Some("ml/a"), "n/g1");
    for s in 6..12 {
        t.record(s, Point::new(Some(0.3), Some(0.9), Some(0.3), Some(1e9)));
    }
    let input = twelve_minutes(t);
    let groups = vec![Some("ml".to_string())];
    let run = |price: Option<f64>| {
        let cfg = ShowbackConfig {
            default_price: price,
            period_steps: Some(6),
            period_offset: 0,
            ..cfg("namespace")
        };
        showback(&input, &groups, &Holders::new(), &BTreeMap::new(), &cfg)
    };
    let s = run(Some(3.0));
    let first = &s.periods[0];
    assert_eq!(first.unallocated_gpu_hours, 0.0);
    assert_eq!(first.unallocated_cost, Some(0.0));
    assert_eq!(run(None).periods[0].unallocated_cost, None);
}

/// Each period has the GPU-hours requested within it, not the window's: `ml` requested one
/// GPU at each of the 12 steps (1 GPU-minute a step) and `lab`, which held nothing, at
/// steps 7 and 8 only. In periods cut at steps 2 and 8: `ml` 2, 6 and 4 GPU-minutes; `lab`
/// none known in the first, 1 in the second, 1 in the third; the window 12 and 2. By hand.
#[test]
fn each_period_has_its_own_requests() {
    let t = track(Some("ml/a"), "n/g1", &[Some((0.9, 0.3)); 12]);
    let input = twelve_minutes(t);
    let minute = 1.0 / 60.0;
    let requested = BTreeMap::from([
        ("ml".to_string(), (0..12).map(|s| (s, minute)).collect()),
        (
            "lab".to_string(),
            BTreeMap::from([(7, minute), (8, minute)]),
        ),
    ]);
    let cfg = ShowbackConfig {
        period_steps: Some(6),
        period_offset: 2,
        ..cfg("namespace")
    };
    let s = showback(
        &input,
        &[Some("ml".into())],
        &Holders::new(),
        &requested,
        &cfg,
    );
    let asked = |p: &Period, g: &str| {
        p.groups
            .iter()
            .find(|x| x.group == g)
            .and_then(|x| x.requested_gpu_hours)
            .map(|h| (h * 60.0 * 1e9).round() / 1e9)
    };
    let each: Vec<(Option<f64>, Option<f64>)> = s
        .periods
        .iter()
        .map(|p| (asked(p, "ml"), asked(p, "lab")))
        .collect();
    assert_eq!(
        each,
        [
            (Some(2.0), None),
            (Some(6.0), Some(1.0)),
            (Some(4.0), Some(1.0))
        ]
    );
    assert_eq!(
        (asked(&s.total, "ml"), asked(&s.total, "lab")),
        (Some(12.0), Some(2.0))
    );
    assert!(!s.notes.iter().any(|n| n.contains("whole window only")));
}

/// Periods on the calendar's boundaries: a 12-step window (1-minute steps) whose first
/// boundary is 2 steps in, in periods of 6, is cut at steps 2 and 8: periods of 2, 6 and 4
/// steps. One GPU held by `ml` at every step: 2, 6 and 4 GPU-minutes, in the periods'
/// own bounds; the periods add up to the window's 12.
#[test]
fn periods_fall_on_the_calendars_boundaries() {
    let t = track(Some("ml/a"), "n/g1", &[Some((0.9, 0.3)); 12]);
    let input = twelve_minutes(t);
    let groups = vec![Some("ml".to_string())];
    let run = |offset: usize| {
        let cfg = ShowbackConfig {
            period_steps: Some(6),
            period_offset: offset,
            ..cfg("namespace")
        };
        showback(&input, &groups, &Holders::new(), &BTreeMap::new(), &cfg)
    };
    let bounds = |s: &Showback| -> Vec<(usize, usize, f64)> {
        s.periods
            .iter()
            .map(|p| {
                (
                    p.start_step,
                    p.steps,
                    p.groups[0].allocated_gpu_hours * 60.0,
                )
            })
            .collect()
    };
    let near = |got: Vec<(usize, usize, f64)>, want: &[(usize, usize, f64)]| {
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0, g.1), (w.0, w.1), "{got:?}");
            assert!((g.2 - w.2).abs() < 1e-9, "{got:?}");
        }
    };
    near(bounds(&run(2)), &[(0, 2, 2.0), (2, 6, 6.0), (8, 4, 4.0)]);
    // No offset, or a whole period's: the periods start at the window's first step.
    near(bounds(&run(0)), &[(0, 6, 6.0), (6, 6, 6.0)]);
    near(bounds(&run(6)), &[(0, 6, 6.0), (6, 6, 6.0)]);
    // A boundary past the window: one period, the whole window.
    let input_short = FleetInput {
        steps: 4,
        ..input.clone()
    };
    let cfg = ShowbackConfig {
        period_steps: Some(6),
        period_offset: 5,
        ..cfg("namespace")
    };
    let s = showback(
        &input_short,
        &groups,
        &Holders::new(),
        &BTreeMap::new(),
        &cfg,
    );
    assert_eq!(s.periods.len(), 1);
    assert_eq!((s.periods[0].start_step, s.periods[0].steps), (0, 4));
}

/// Simulated data says so: a group charged a simulated GPU's hours is marked, a group on
/// real GPUs alone is not, and the capacity no pod held is marked only where a simulated
/// GPU left some.
#[test]
fn simulated_gpu_hours_are_marked_as_such() {
    let used = Some((0.9, 0.3));
    let mut sim = track(Some("demo/a"), "n/g1", &[used; 4]);
    sim.simulated = true;
    let real = track(Some("ml/b"), "n/g2", &[used; 4]);
    // A simulated GPU no pod holds, then a real one no pod holds.
    let mut idle_sim = track(None, "n/g3", &[used; 2]);
    idle_sim.simulated = true;
    let idle_real = track(None, "n/g4", &[used; 2]);
    let fleet = |tracks| FleetInput {
        step_seconds: 60.0,
        steps: 4,
        tracks,
        held: Default::default(),
        step_bands: None,
    };
    let group = |input: &FleetInput| -> Vec<Option<String>> {
        let name = |p: &str| p.split('/').next().unwrap().to_string();
        input
            .tracks
            .iter()
            .map(|t| t.pod.as_deref().map(name))
            .collect()
    };
    let run = |input: &FleetInput| {
        let none = BTreeMap::new();
        showback(
            input,
            &group(input),
            &Holders::new(),
            &none,
            &cfg("namespace"),
        )
    };
    let s = run(&fleet(vec![sim, real, idle_real.clone()]));
    let marked: Vec<(&str, bool)> = s
        .total
        .groups
        .iter()
        .map(|g| (g.group.as_str(), g.simulated))
        .collect();
    assert_eq!(marked, [("demo", true), ("ml", false)]);
    // Only real GPUs left capacity unheld.
    assert!(!s.total.unallocated_simulated);
    let s = run(&fleet(vec![idle_real, idle_sim]));
    assert!(s.total.groups.is_empty());
    assert!(s.total.unallocated_simulated);
    assert!((s.total.unallocated_gpu_hours - 4.0 / 60.0).abs() < 1e-12);
}

/// A MIG instance of an unknown profile is charged an assumed share, and its GPU-hours say
/// so. By hand, on one H100 (7 compute slices) over 6 steps of 60 s: `ml`'s 3g.40gb instance
/// holds 3/7 of each step (read, not assumed); `web`'s instance of an unknown profile takes
/// an equal part of the GPU's two instances, 1/2 (assumed); what is left, 1 − 3/7 − 1/2 =
/// 1/14 of each step, no pod held, and depends on that assumption. A whole GPU held by
/// `lab` has nothing assumed.
#[test]
fn an_assumed_mig_share_is_counted_apart() {
    let used = Some((0.9, 0.3));
    let mut known = track(Some("ml/a"), "n/g1", &[used; 6]);
    known.is_mig = true;
    known.mig = known
        .spec
        .and_then(|s| s.mig.iter().find(|p| p.name == "3g.40gb"));
    let mut unknown = track(Some("web/b"), "n/g1", &[used; 6]);
    unknown.is_mig = true;
    let whole = track(Some("lab/c"), "n/g2", &[used; 6]);
    let input = FleetInput {
        step_seconds: 60.0,
        steps: 6,
        tracks: vec![known, unknown, whole],
        held: Default::default(),
        step_bands: None,
    };
    let s = showback(
        &input,
        &namespaces(&input),
        &Holders::new(),
        &BTreeMap::new(),
        &cfg("namespace"),
    );
    let step = 1.0 / 60.0;
    let row = |g: &str| s.total.groups.iter().find(|r| r.group == g).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(row("ml").allocated_gpu_hours, 6.0 * 3.0 / 7.0 * step));
    assert_eq!(row("ml").assumed_share_gpu_hours, 0.0);
    assert!(close(row("web").allocated_gpu_hours, 6.0 * 0.5 * step));
    assert!(close(row("web").assumed_share_gpu_hours, 6.0 * 0.5 * step));
    assert_eq!(row("lab").assumed_share_gpu_hours, 0.0);
    let left = 6.0 * step / 14.0;
    assert!(close(s.total.unallocated_gpu_hours, left), "{:?}", s.total);
    assert!(close(s.total.unallocated_assumed_share_gpu_hours, left));
    assert!(s.notes.iter().any(|n| n.contains("unknown profile")));
}
