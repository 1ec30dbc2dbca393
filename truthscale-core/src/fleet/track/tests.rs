use super::*;
use crate::fleet::sizing::{PeakLimit, right_size};
use crate::fleet::test_support::{GIB, every_band, tensor_sample};

/// A coarse step read twice: its means feed the sums of use, its peaks the sizing.
#[test]
fn a_steps_peak_sizes_it_while_its_mean_sums_its_use() {
    use crate::tracker::Deriver;
    let sample = tensor_sample;
    let cfg = DeriveConfig::default();
    let mut diags = Vec::new();
    let mut means = Deriver::new(cfg.clone(), Some(300.0));
    let mut t = Track::new(Some("ns/p".into()), "n/gpu 0".into());
    for step in 0..4 {
        let ms = step as i64 * 300_000;
        for w in &means.observe(&sample(ms, 0.2)).windows {
            t.observe(step, w);
        }
        assert!(!every_band(
            &mut t,
            step,
            &sample(ms, 0.8).entities[0],
            &cfg,
            &mut diags
        ));
    }
    let p = t.points()[2];
    assert_eq!(p.sat(), Some(2_000), "the mean: 0.2 of the tensor pipe");
    assert_eq!(p.sat_peak(), Some(8_000), "the step's p99: 0.8");
    assert_eq!(p.pipe(), Some(8_000));
    assert_eq!(p.dram(), Some(2_000));
    // The sizing takes the peak: p99 saturation 0.8, not 0.2.
    let limit = PeakLimit {
        max_over: 1.0,
        seconds_per_point: 300.0,
        grid: Grid::of(None),
    };
    let r = right_size(&t, "ns/p", 0.2, limit);
    assert_eq!(r.saturation_p99, Some(0.8));
    // A peak never lowers a point, and a step without a mean stays unknown.
    let idle = sample(1_200_000, 0.0);
    assert!(!every_band(&mut t, 3, &idle.entities[0], &cfg, &mut diags));
    assert!(!every_band(&mut t, 9, &idle.entities[0], &cfg, &mut diags));
    assert_eq!(t.points()[3].sat_peak(), Some(8_000));
    assert!(diags.is_empty(), "{diags:?}");
    // A sentinel, or a p99 no fraction can be, is not a peak: the step held an
    // impossible raw sample that its mean averaged in, so the step is unknown.
    for (step, bad) in [(3, 9.223_372_036_854_776e18), (2, 2.89)] {
        let mut blank = sample(step as i64 * 300_000, 0.9);
        blank.entities[0]
            .readings
            .set_value(Field::TensorActive, bad);
        assert!(every_band(
            &mut t,
            step,
            &blank.entities[0],
            &cfg,
            &mut diags
        ));
        assert_eq!(t.points()[step], Point::NONE);
    }
    assert_eq!(diags.len(), 2);
    assert_eq!(t.points()[1].sat_peak(), Some(8_000));
    assert_eq!(t.lifetime_steps(), 4);
}

/// Three steps a point: each point's means are over the steps that measured them (an
/// unmeasured step is not a 0), memory and the sizing's saturation are the highest, and a
/// summarised step's peak raises its point whether that point is still open or closed.
#[test]
fn steps_combined_into_points_keep_means_over_what_was_measured_and_the_peaks() {
    let gib = 1_073_741_824.0;
    let p = |sat: f64, mem: f64| Point::new(Some(sat), Some(1.0), Some(sat / 2.0), Some(mem * gib));
    let mut t = Track::new(Some("ns/p".into()), "n/gpu 0".into()).with_steps_per_point(3);
    t.record(0, p(0.2, 10.0));
    t.record(1, Point::NONE);
    t.record(2, p(0.4, 30.0));
    t.record(3, p(0.5, 20.0));
    // Step 4 not read at all; step 3 again is ignored.
    t.record(3, p(0.9, 70.0));
    t.record(5, p(0.1, 20.0));
    t.record(7, p(0.6, 5.0));
    t.finish();
    assert_eq!(t.first_step(), 0);
    assert_eq!(t.lifetime_steps(), 3);
    let pts = t.points();
    assert_eq!(
        pts[0].sat(),
        Some(3_000),
        "the mean of 0.2 and 0.4, not of 0.2, 0, 0.4"
    );
    assert_eq!(pts[0].sat_peak(), Some(4_000));
    assert_eq!(pts[0].ecf(), Some(1_500));
    assert_eq!(pts[0].busy(), Some(10_000));
    assert_eq!(pts[0].mem(), Some(30 * 1024));
    assert_eq!(pts[1].sat(), Some(3_000));
    assert_eq!(pts[1].sat_peak(), Some(5_000));
    assert_eq!(pts[1].mem(), Some(20 * 1024));
    assert_eq!(pts[2].sat(), Some(6_000));
    assert_eq!(pts[2].sat_peak(), Some(6_000));

    // A track that starts later starts at its point; peaks raise open and closed points.
    let sample = tensor_sample;
    let cfg = DeriveConfig::default();
    let mut diags = Vec::new();
    let mut t = later_track(&cfg);
    // Points 1 (step 3), 2 (steps 4, 5) closed, 3 (step 6) open.
    assert!(!every_band(
        &mut t,
        4,
        &sample(240_000, 0.8).entities[0],
        &cfg,
        &mut diags
    ));
    assert!(!every_band(
        &mut t,
        6,
        &sample(360_000, 0.7).entities[0],
        &cfg,
        &mut diags
    ));
    let mut bad = sample(180_000, 0.9);
    bad.entities[0].readings.set_value(Field::TensorActive, 2.9);
    assert!(every_band(&mut t, 3, &bad.entities[0], &cfg, &mut diags));
    t.finish();
    assert_eq!(t.first_step(), 1);
    let pts = t.points();
    assert_eq!(pts.len(), 3);
    assert_eq!(
        pts[0],
        Point::NONE,
        "an impossible peak: the point is unknown"
    );
    assert_eq!(
        (pts[1].sat(), pts[1].sat_peak()),
        (Some(2_000), Some(8_000))
    );
    assert_eq!(
        (pts[2].sat(), pts[2].sat_peak()),
        (Some(2_000), Some(7_000))
    );
    assert_eq!(pts[2].pipe(), Some(7_000));
}

/// Each band's share is the quantiles' difference, the top band at least one raw
/// sample's (taken from the bands below it), and the shares add up to one step.
#[test]
fn step_bands_share_a_step_with_one_sample_in_the_top_band() {
    for (samples, want) in [
        (60.0, [5_000, 4_000, 833, 167]),
        (15.0, [5_000, 4_000, 333, 667]),
        (5.0, [5_000, 3_000, 0, 2_000]),
        (2.0, [5_000, 0, 0, 5_000]),
        (1.0, [0, 0, 0, 10_000]),
        (1_000.0, [5_000, 4_000, 900, 100]),
        (f64::NAN, [0, 0, 0, 10_000]),
    ] {
        let b = StepBands::for_samples(samples);
        assert_eq!(b.weights, want, "{samples} samples a step");
        assert_eq!(b.weights.iter().sum::<u32>(), STEP_WEIGHT_UNITS);
    }
    // Zero shares are not sub-steps of the sizing.
    let g = Grid::of(Some(StepBands::for_samples(5.0)));
    assert_eq!(
        (g.m, &g.band[..3], &g.weights[..3]),
        (3, &[0, 1, 3][..], &[5_000, 3_000, 2_000][..])
    );
    assert_eq!(Grid::of(None).m, 1);
}

#[test]
fn quantizing_is_exact_and_never_invents_a_value() {
    assert_eq!(ratio_units(Some(0.2)), Some(2000));
    assert_eq!(ratio_units(Some(f64::NAN)), None);
    assert_eq!(ratio_units(Some(-0.1)), None);
    assert_eq!(ratio_units(None), None);
    assert_eq!(mib(Some(30.0 * GIB)), Some(30_720));
    assert_eq!(Point::new(None, None, None, None), Point::NONE);
}

/// A point's memory, health and power share their bytes and keep each value: set in any
/// order, each reads back as set, and none is unknown until set.
#[test]
fn memory_health_and_power_read_back_as_set() {
    let gib80 = 80.0 * GIB;
    let none = Point::NONE;
    assert_eq!(
        (none.mem(), none.health(), none.power_dw()),
        (None, None, None)
    );
    let p = Point::new(Some(0.5), Some(0.9), Some(0.4), Some(gib80))
        .with_health(Some(Health::Unavailable))
        .with_power(Some(699.96));
    assert_eq!(p.mem(), Some(81_920));
    assert_eq!(p.health(), Some(Health::Unavailable));
    assert_eq!(p.power_dw(), Some(7_000));
    // Health set, then cleared: the memory stays.
    let q = p.with_health(Some(Health::Ok)).with_health(None);
    assert_eq!((q.mem(), q.health()), (Some(81_920), None));
    // No memory, with a health: the memory stays unknown.
    let r = Point::new(None, Some(1.0), None, None).with_health(Some(Health::Ok));
    assert_eq!((r.mem(), r.health()), (None, Some(Health::Ok)));
    // The largest sanitized reading of each fits: 4 TiB, and twice the generic power bound.
    let big = Point::new(
        None,
        None,
        None,
        Some(crate::derive::GENERIC_MAX_MEMORY_BYTES),
    )
    .with_power(Some(2.0 * crate::derive::GENERIC_MAX_POWER_WATTS));
    assert_eq!(big.mem(), Some(4 * 1024 * 1024));
    assert_eq!(big.power_dw(), Some(40_000));
}

/// A MIG instance's saturation, in whole-GPU terms, needs both terms, as a whole GPU's
/// does: the tensor term alone is a lower bound, not the saturation.
#[test]
fn a_mig_instances_saturation_needs_both_terms() {
    let spec = crate::gpus::by_key("h100-sxm").unwrap();
    let mut t = Track::new(Some("a/p".into()), "n/GPU-0".into());
    t.spec = Some(spec);
    t.is_mig = true;
    t.mig = spec.mig.iter().find(|p| p.name == "3g.40gb");
    let mut r = Readings::default();
    r.set_value(Field::TensorActive, 0.2);
    let m = crate::derive::WindowMetrics::default();
    assert_eq!(t.saturation_of(&r, &m), None, "tensor alone");
    // 3g.40gb on an H100 SXM: 60 of its 132 SMs, 4 of its 8 memory slices:
    // max(0.2 × 60/132, 0.7 × 4/8) = 0.35.
    r.set_value(Field::DramActive, 0.7);
    let s = t.saturation_of(&r, &m).unwrap_or_default();
    assert!((s - 0.35).abs() < 1e-12, "{s}");
    // The compute term winning: max(0.9 × 60/132, 0.3 × 4/8) = 0.409 091 (by its compute
    // slices, 3/7, it would read 0.385 714; unscaled, 0.9).
    r.set_value(Field::TensorActive, 0.9);
    r.set_value(Field::DramActive, 0.3);
    let s = t.saturation_of(&r, &m).unwrap_or_default();
    assert!((s - 0.409_090_909_090_909).abs() < 1e-12, "{s}");
    let mut dram_only = Readings::default();
    dram_only.set_value(Field::DramActive, 0.7);
    assert_eq!(t.saturation_of(&dram_only, &m), None, "DRAM alone");
}

/// A GPU whose memory total reads 0 (below 1 MiB is no GPU's) keeps no total: the fleet's
/// GPU is then the catalog's 80 GB H100, and 40 000 MiB used needs one GPU's memory, not
/// 40 000 (each MiB taken as a GPU).
#[test]
fn a_memory_total_of_zero_sizes_nothing() {
    use crate::fleet::test_support::input;
    use crate::fleet::{FleetConfig, analyze};
    use crate::tracker::Deriver;
    let mut d = Deriver::new(DeriveConfig::default(), Some(60.0));
    let mut t = Track::new(Some("ns/p".into()), "n/gpu 0".into());
    for step in 0..10 {
        let mut s = tensor_sample(step as i64 * 60_000, 0.3);
        let r = &mut s.entities[0].readings;
        r.set_value(Field::MemTotalBytes, 0.0);
        r.set_value(Field::MemUsedBytes, 40_000.0 * 1_048_576.0);
        for w in &d.observe(&s).windows {
            t.spec = w.spec;
            t.model = w.id.model.clone();
            t.observe(step, w);
        }
    }
    assert_eq!(t.memory_total_mib, None);
    let r = analyze(&input(vec![t], 10), &FleetConfig::default());
    let pooled = r.sizing.pooled_lower_bound.expect("a bound");
    assert_eq!(pooled.gpus, 1, "{pooled:?}");
    // The catalog's 80 GB, in whole MiB.
    assert_eq!(r.gpu_memory_bytes, Some(76_293.0 * 1_048_576.0));
}

/// Each step that held an impossible raw sample is counted once, however many steps a
/// point holds and whichever bands tell it: steps 4 and 5 of one point each hold one (2,
/// where the point's state had told only the first), and step 4's second band says nothing
/// new.
#[test]
fn each_impossible_step_is_counted_once() {
    let cfg = DeriveConfig::default();
    let mut diags = Vec::new();
    let mut t = later_track(&cfg);
    let mut bad = tensor_sample(240_000, 0.9);
    bad.entities[0].readings.set_value(Field::TensorActive, 2.9);
    let counted: Vec<bool> = [(4, 3), (4, 2), (5, 3), (5, 3)]
        .iter()
        .map(|&(step, band)| t.observe_peak_sample(step, band, &bad.entities[0], &cfg, &mut diags))
        .collect();
    assert_eq!(counted, [true, false, true, false]);
}

/// A track of two steps a point, read at tensor 0.2 from step 3 to step 6 (points 1, 2 and
/// 3, the last still open).
fn later_track(cfg: &DeriveConfig) -> Track {
    let mut means = crate::tracker::Deriver::new(cfg.clone(), Some(60.0));
    let mut t = Track::new(Some("ns/q".into()), "n/gpu 1".into()).with_steps_per_point(2);
    for step in 3..7 {
        for w in &means
            .observe(&tensor_sample(step as i64 * 60_000, 0.2))
            .windows
        {
            t.observe(step, w);
        }
    }
    t
}
