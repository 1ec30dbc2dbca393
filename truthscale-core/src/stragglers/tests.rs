use super::*;
use crate::model::{Holder, PodRef};

const H100: &str = "NVIDIA H100 80GB HBM3";

/// GPU `i` held by `pod` (none: unattributed), at `clock_mhz`, tensor activity `tensor`.
fn gpu(i: u32, pod: Option<&str>, clock_mhz: f64, tensor: f64) -> EntitySample {
    let mut e = EntitySample {
        id: EntityId {
            gpu: Some(i),
            uuid: Some(format!("GPU-{i}")),
            model: Some(H100.into()),
            pod: pod.map(|p| PodRef {
                pod: p.into(),
                namespace: Some("ml".into()),
                container: Some("main".into()),
            }),
            ..EntityId::default()
        },
        ..EntitySample::default()
    };
    e.readings.set_value(Field::SmClockMhz, clock_mhz);
    e.readings.set_value(Field::TensorActive, tensor);
    e
}

/// Eight GPUs of pod `train`, GPU 3's clock capped to 1200 MHz; the others wait (tensor
/// 5 %) while it computes (tensor 60 %).
fn job_at(ms: i64) -> Sample {
    Sample {
        taken: Timestamp(ms),
        entities: (0..8)
            .map(|i| {
                if i == 3 {
                    gpu(i, Some("train"), 1200.0, 0.6)
                } else {
                    gpu(i, Some("train"), 1980.0, 0.05)
                }
            })
            .collect(),
    }
}

fn value(s: &Sample, i: usize, f: Field) -> Option<f64> {
    s.entities[i].readings.value(f)
}

#[test]
fn the_band_is_the_median_less_the_wider_of_k_mads_and_the_floor_share() {
    let cfg = StragglerConfig::default();
    // Seven at 1980 and one at 1200: MAD 0, so the band is 10 % of the median wide.
    let mut v = vec![1980.0; 7];
    v.push(1200.0);
    let b = Band::of(&v, &cfg).unwrap();
    assert_eq!(b.median, 1980.0);
    assert!((b.floor - 1782.0).abs() < 1e-9, "{b:?}");
    let gap = b.gap(1200.0).unwrap();
    assert!((gap - 780.0 / 1980.0).abs() < 1e-12, "{gap}");
    assert_eq!(b.gap(1800.0), None);
    // Spread values: median 10, deviations 0,1,1,2,2 → MAD 1; 3 MADs (3) beat 10 % (1).
    let b = Band::of(&[10.0, 9.0, 11.0, 8.0, 12.0], &cfg).unwrap();
    assert_eq!((b.median, b.floor), (10.0, 7.0));
    assert_eq!(b.gap(7.5), None);
    assert_eq!(b.gap(6.0), Some(0.4));
    // Too few members, or a value that is not a number: no band.
    assert_eq!(Band::of(&[1.0, 2.0], &cfg), None);
    assert_eq!(Band::of(&[1.0, 2.0, f64::NAN], &cfg), None);
}

#[test]
fn a_capped_gpu_is_the_straggler_once_sustained_and_the_others_wait_on_it() {
    let cfg = StragglerConfig::default();
    let mut d = Stragglers::default();
    let gap = 780.0 / 1980.0;
    for t in 0..=31 {
        let mut s = job_at(t * 1000);
        d.mark(&mut s, &cfg);
        // Out of the band since t = 0: sustained once 30 s have passed since then.
        if t < 30 {
            assert!(
                s.entities.iter().all(|e| e.job.is_none()
                    && e.readings == job_at(0).entities[e.id.gpu.unwrap() as usize].readings),
                "t = {t}"
            );
            continue;
        }
        let clock_gap = value(&s, 3, Field::StragglerClockGap).unwrap();
        assert!((clock_gap - gap).abs() < 1e-12, "t = {t}: {clock_gap}");
        // Its compute term is above its peers': only the clock is out of the band.
        assert_eq!(value(&s, 3, Field::StragglerComputeGap), None);
        assert_eq!(value(&s, 3, Field::StragglerWaitGap), None);
        for i in (0..8).filter(|i| *i != 3) {
            let w = value(&s, i, Field::StragglerWaitGap).unwrap();
            assert!((w - gap).abs() < 1e-12, "t = {t}, gpu {i}: {w}");
            assert_eq!(value(&s, i, Field::StragglerClockGap), None);
        }
        assert!(
            s.entities
                .iter()
                .all(|e| e.job.as_deref() == Some("ml/train"))
        );
    }
}

#[test]
fn a_dip_shorter_than_the_sustain_is_no_straggler_and_a_return_resets_it() {
    let cfg = StragglerConfig {
        sustain_seconds: 5.0,
        ..StragglerConfig::default()
    };
    let mut d = Stragglers::default();
    let calm = |ms| {
        let mut s = job_at(ms);
        s.entities[3] = gpu(3, Some("train"), 1980.0, 0.05);
        s
    };
    let marked = |s: &Sample| s.entities.iter().any(|e| e.job.is_some());
    // Out for 4 s (t = 0..=4), back at t = 5, out again from t = 6: marked at t = 11.
    for t in 0..=12 {
        let mut s = if t == 5 {
            calm(t * 1000)
        } else {
            job_at(t * 1000)
        };
        d.mark(&mut s, &cfg);
        assert_eq!(marked(&s), t >= 11, "t = {t}");
    }
}

#[test]
fn jobs_are_pods_labels_or_the_node_and_small_jobs_have_no_band() {
    let mut s = job_at(0);
    // Two more pods: one of two GPUs (too small for a band), one unattributed GPU.
    s.entities.push(gpu(8, Some("pair"), 1980.0, 0.5));
    s.entities.push(gpu(9, Some("pair"), 1000.0, 0.5));
    s.entities.push(gpu(10, None, 900.0, 0.5));
    let cfg = StragglerConfig {
        sustain_seconds: 0.0,
        ..StragglerConfig::default()
    };
    let mut marked = s.clone();
    Stragglers::default().mark(&mut marked, &cfg);
    let jobs: Vec<Option<&str>> = marked.entities.iter().map(|e| e.job.as_deref()).collect();
    assert_eq!(&jobs[..8], &[Some("ml/train"); 8]);
    assert_eq!(&jobs[8..], &[None, None, None]);

    // By label: the pods `train` and `pair` share a job label; the unlabelled GPU is out.
    let holder = |pod: &str, job: &str| Holder {
        pod: PodRef {
            pod: pod.into(),
            namespace: Some("ml".into()),
            container: None,
        },
        resource: "nvidia.com/gpu".into(),
        replica: None,
        labels: vec![("label_job_name", job.into())],
        owner: None,
    };
    let mut by_label = s.clone();
    for e in &mut by_label.entities {
        if let Some(p) = &e.id.pod {
            e.allocation = Some(vec![holder(&p.pod, "run-7")]);
        }
    }
    let cfg_label = StragglerConfig {
        group_by: GroupBy::Label,
        job_label: "job-name".into(),
        ..cfg.clone()
    };
    Stragglers::default().mark(&mut by_label, &cfg_label);
    // Ten GPUs, median clock 1980: GPU 3 (1200) and GPU 9 (1000) are out.
    let gaps: Vec<Option<f64>> = by_label
        .entities
        .iter()
        .map(|e| e.readings.value(Field::StragglerClockGap))
        .collect();
    assert!(gaps[3].is_some() && gaps[9].is_some(), "{gaps:?}");
    assert_eq!(gaps.iter().flatten().count(), 2, "{gaps:?}");
    assert_eq!(by_label.entities[10].job, None);
    assert_eq!(by_label.entities[0].job.as_deref(), Some("ml/run-7"));

    // By node: all eleven; off: none.
    let mut by_node = s.clone();
    let node = StragglerConfig {
        group_by: GroupBy::Node,
        ..cfg.clone()
    };
    Stragglers::default().mark(&mut by_node, &node);
    assert!(
        by_node
            .entities
            .iter()
            .all(|e| e.job.as_deref() == Some("node"))
    );
    let mut off = s.clone();
    let none = StragglerConfig {
        group_by: GroupBy::Off,
        ..cfg
    };
    Stragglers::default().mark(&mut off, &none);
    assert_eq!(off, s);
}

#[test]
fn a_sentinel_clock_is_no_reading() {
    let mut s = job_at(0);
    // A DCGM blank on GPU 3's clock: no clock for it, so no band member and no gap.
    s.entities[3]
        .readings
        .set_value(Field::SmClockMhz, crate::derive::INT32_BLANK);
    let cfg = StragglerConfig {
        sustain_seconds: 0.0,
        ..StragglerConfig::default()
    };
    Stragglers::default().mark(&mut s, &cfg);
    assert!(s.entities.iter().all(|e| e.job.is_none()));
}

#[test]
fn settings_are_checked_by_key() {
    let bad = StragglerConfig {
        group_by: GroupBy::Label,
        min_members: 2,
        min_gap: 1.5,
        ..StragglerConfig::default()
    };
    let keys: Vec<String> = bad
        .validate("verdict.stragglers.")
        .unwrap_err()
        .into_iter()
        .map(|p| p.key)
        .collect();
    assert_eq!(
        keys,
        [
            "verdict.stragglers.min_gap",
            "verdict.stragglers.min_members",
            "verdict.stragglers.job_label",
        ]
    );
    assert_eq!(StragglerConfig::default().validate("x."), Ok(()));
}

/// Busy flag 100 % and DRAM 5 % on every GPU of `s`.
fn busy_flags(s: &mut Sample) {
    for e in &mut s.entities {
        e.readings.set_value(Field::ReportedUtil, 1.0);
        e.readings.set_value(Field::DramActive, 0.05);
    }
}

#[test]
fn the_waiting_gpus_are_comm_bound_and_the_straggler_is_busy() {
    use crate::causes::Cause;
    use crate::derive::DeriveConfig;
    use crate::model::Phase;
    use crate::tracker::Deriver;
    use crate::verdict::Verdict;
    // The deriver finds them itself, from its verdict configuration.
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    d.set_verdict_config(crate::verdict::VerdictConfig {
        stragglers: StragglerConfig {
            sustain_seconds: 5.0,
            ..StragglerConfig::default()
        },
        ..crate::verdict::VerdictConfig::default()
    });
    let mut totals = Vec::new();
    for t in 0..=20 {
        let mut s = job_at(t * 1000);
        busy_flags(&mut s);
        let windows = d.observe(&s).windows;
        for w in &windows {
            let g = w.id.gpu.unwrap();
            // Before the mark (t < 5) the waiting GPUs are starved of unknown cause and
            // stalled; from it, comm-bound.
            assert_eq!(w.job.as_deref(), (t >= 5).then_some("ml/train"), "t = {t}");
            if g == 3 {
                assert_eq!(w.verdict.verdict, Verdict::Busy, "t = {t}");
                assert_ne!(w.phase, Some(Phase::CommBound), "t = {t}");
            } else {
                let want = if t >= 5 {
                    Cause::CommBound
                } else {
                    Cause::Unknown
                };
                assert_eq!(w.verdict.verdict, Verdict::Starved, "t = {t}, gpu {g}");
                assert_eq!(
                    w.verdict.cause().map(|f| f.cause),
                    Some(want),
                    "t = {t}, gpu {g}"
                );
                assert_eq!(
                    w.phase == Some(Phase::CommBound),
                    t >= 5,
                    "t = {t}, gpu {g}"
                );
            }
        }
        totals = windows.iter().map(|w| w.totals).collect();
    }
    // At a known 1 s interval every window is integrated as it comes: the windows ending
    // at t = 5..=20, 16 s, are comm-bound.
    let comm = Phase::CommBound.index();
    for (g, t) in totals.iter().enumerate() {
        let by_regime = t.phase_seconds[0][comm];
        let by_cause = t.starved_cause_seconds[Cause::CommBound.index()];
        if g == 3 {
            assert_eq!((by_regime, by_cause), (0.0, 0.0));
        } else {
            assert!((by_regime - 16.0).abs() < 1e-9, "gpu {g}: {by_regime}");
            assert!((by_cause - 16.0).abs() < 1e-9, "gpu {g}: {by_cause}");
        }
    }
}

#[test]
fn a_pure_all_reduce_is_comm_bound() {
    use crate::causes::Cause;
    use crate::derive::DeriveConfig;
    use crate::model::Phase;
    use crate::tracker::Deriver;
    // NVLink at 600 of an H100's 900 GB/s (both directions), tensor 2 %: a ring all-reduce
    // with nothing to overlap it.
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    let mut last = None;
    for t in 0..=5 {
        let mut e = gpu(0, None, 1980.0, 0.02);
        for (f, v) in [
            (Field::ReportedUtil, 1.0),
            (Field::SmActive, 0.15),
            (Field::GrActive, 1.0),
            (Field::DramActive, 0.1),
            (Field::NvlinkTxBytesPerSec, 300e9),
            (Field::NvlinkRxBytesPerSec, 300e9),
        ] {
            e.readings.set_value(f, v);
        }
        let s = Sample {
            taken: Timestamp(t * 1000),
            entities: vec![e],
        };
        last = d.observe(&s).windows.pop();
    }
    let w = last.unwrap();
    assert_eq!(w.phase, Some(Phase::CommBound));
    // The SMs are at 15 %, under launch-bound's 25 %: NVLink near its peak leaves it to
    // comm_bound, the regime and the cause alike.
    assert_eq!(w.verdict.cause().map(|f| f.cause), Some(Cause::CommBound));
}

#[test]
fn comm_bound_takes_over_from_stalled() {
    use crate::model::Phase;
    use crate::phase::{PhaseConfig, PhaseInputs};
    let c = PhaseConfig::default();
    let waiting = PhaseInputs {
        util: Some(1.0),
        sm_active: Some(0.15),
        compute: Some(0.03),
        dram: Some(0.05),
        pipe: Some(0.03),
        tensor: Some(0.03),
        ..PhaseInputs::default()
    };
    // Stalled on its own counters; once its job has a straggler, comm-bound.
    assert_eq!(waiting.counter_candidate(None, &c), Some(Phase::Stalled));
    let marked = PhaseInputs {
        waiting_on_straggler: true,
        ..waiting
    };
    assert_eq!(
        marked.counter_candidate(Some(Phase::Stalled), &c),
        Some(Phase::CommBound)
    );
    // And back once the straggler is gone.
    assert_eq!(
        waiting.counter_candidate(Some(Phase::CommBound), &c),
        Some(Phase::Stalled)
    );
}

/// The jobs kept from the last sample give the marks finding them afresh gives, whatever
/// the entities do from sample to sample: the same, moved between pods (one key changed,
/// the count the same), reordered, or fewer.
#[test]
fn jobs_kept_from_the_last_sample_mark_as_found_afresh() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let cfg = StragglerConfig {
        sustain_seconds: 0.0,
        ..StragglerConfig::default()
    };
    let pods = [Some("a"), Some("b"), Some("c"), None];
    let mut entities: Vec<EntitySample> = (0..9)
        .map(|i| gpu(i, pods[i as usize % 3], 1980.0, 0.05))
        .collect();
    let (mut kept, mut afresh) = (Stragglers::default(), Stragglers::default());
    for k in 0..400 {
        match rng.random_range(0..5) {
            0 => {
                let i = rng.random_range(0..entities.len());
                let p = pods[rng.random_range(0..pods.len())];
                entities[i] = gpu(u32::try_from(i).unwrap(), p, 1980.0, 0.05);
            }
            1 => {
                let j = rng.random_range(0..entities.len());
                entities.swap(0, j);
            }
            2 if entities.len() > 3 => {
                entities.pop();
            }
            _ => {}
        }
        for e in &mut entities {
            e.readings
                .set_value(Field::SmClockMhz, rng.random_range(1000.0..2000.0));
        }
        let sample = Sample {
            taken: Timestamp(k * 1000),
            entities: entities.clone(),
        };
        afresh.jobs = Jobs::default();
        assert_eq!(
            kept.marks(&sample, &cfg),
            afresh.marks(&sample, &cfg),
            "sample {k}"
        );
    }
}
