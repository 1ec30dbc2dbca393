use super::*;

/// `millis` gives what `round` gives, bit for bit: halves, both signs, times of today
/// with sub-millisecond noise, the ends of `i64` and beyond, NaN and infinities.
#[test]
fn millis_rounds_as_round_does() {
    let want = |t: f64| (t * 1000.0).round() as i64;
    let mut cases = vec![
        0.0,
        -0.0,
        0.0005,
        -0.0005,
        0.0015,
        -0.0025,
        0.000_499_999_999_999_999_9,
        0.0004999,
        0.0005001,
        1.7e9,
        1_733_000_000.123_5,
        -1e-3,
        9.3e15,
        -9.3e15,
        9.3e16,
        1e300,
        -1e300,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN_POSITIVE,
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for k in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let unit = (x >> 11) as f64 / (1u64 << 53) as f64;
        cases.push(match k % 4 {
            0 => 1.6e9 + unit * 2e8,
            1 => (unit - 0.5) * 1e4,
            2 => f64::from_bits(x),
            _ => (1.7e12 + (x % 1_000_000) as f64 + 0.5) / 1000.0,
        });
    }
    for t in cases {
        assert_eq!(millis(t), want(t), "{t:e}");
    }
}
use truthscale_core::model::{Field, Reading};

type Labels<'a> = &'a [(&'a str, &'a str)];

fn matrix(series: &[(Labels<'_>, &[(f64, &str)])]) -> Matrix {
    Matrix::of(
        series
            .iter()
            .map(|(labels, values)| {
                let metric = labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect();
                let values = values
                    .iter()
                    .map(|(t, v)| (*t, PromValue::parse(v)))
                    .collect();
                (metric, values)
            })
            .collect(),
    )
}

#[test]
fn merge_per_timestamp_with_gaps_and_churn() {
    let mut c = Chunk::default();
    let g0: &[(&str, &str)] = &[("gpu", "0"), ("UUID", "GPU-a"), ("pod", "")];
    let g1a: &[(&str, &str)] = &[("gpu", "1"), ("pod", "a")];
    let g1b: &[(&str, &str)] = &[("gpu", "1"), ("pod", "b")];
    c.add(
        Family::DcgmExporter,
        "DCGM_FI_DEV_GPU_UTIL",
        &matrix(&[
            (g0, &[(15.0, "100"), (30.0, "50"), (60.0, "NaN")]),
            (g1a, &[(15.0, "10")]),
            (g1b, &[(45.0, "20")]),
        ]),
    );
    c.add(
        Family::DcgmExporter,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        &matrix(&[(g0, &[(30.0, "0.25")])]),
    );
    c.add(
        Family::DcgmExporter,
        "DCGM_FI_DEV_FB_USED",
        &matrix(&[(g0, &[(15.0, "100")])]),
    );
    c.add(
        Family::DcgmExporter,
        "dcgm_fi_dev_fb_free",
        &matrix(&[(g0, &[(15.0, "300")])]),
    );
    let mut s: Vec<Sample> = Vec::new();
    c.feed(&mut Units::default(), |x| s.push(x.clone()));
    let times: Vec<i64> = s.iter().map(|s| s.taken.0).collect();
    assert_eq!(times, [15_000, 30_000, 45_000, 60_000]);
    assert_eq!(s[0].entities.len(), 2);
    let e = &s[0].entities[0];
    assert_eq!(e.readings.get(Field::ReportedUtil), Reading::Value(1.0));
    // Missing at this step: blank, not zero.
    assert_eq!(e.readings.get(Field::TensorActive), Reading::Blank);
    assert_eq!(
        e.readings.get(Field::MemTotalBytes),
        Reading::Value(400.0 * 1_048_576.0)
    );
    assert_eq!(
        s[1].entities[0].readings.get(Field::TensorActive),
        Reading::Value(0.25)
    );
    assert_eq!(s[1].entities.len(), 1);
    assert_eq!(
        s[2].entities[0].id.pod.as_ref().map(|p| p.pod.as_str()),
        Some("b")
    );
    // NaN is blank.
    assert_eq!(
        s[3].entities[0].readings.get(Field::ReportedUtil),
        Reading::Blank
    );
}

/// Own entities that come and go, and change order: each sample holds exactly its
/// timestamp's entities, in the order of their first points, and nothing of an earlier
/// timestamp (the samples are built in place of the previous ones).
#[test]
fn own_entities_that_come_and_go_carry_nothing_over() {
    let a: Labels<'_> = &[("gpu", "0"), ("uuid", "GPU-a"), ("pod", "a")];
    let b: Labels<'_> = &[("gpu", "1"), ("uuid", "GPU-b"), ("pod", "b")];
    let mut c = Chunk::default();
    c.add(
        Family::Truthscale,
        "truthscale_gpu_tensor_active_ratio",
        &matrix(&[
            (a, &[(1.0, "0.5"), (3.0, "0.6"), (5.0, "0.8"), (6.0, "0.1")]),
            (
                b,
                &[
                    (1.0, "0.1"),
                    (2.0, "0.2"),
                    (3.0, "0.3"),
                    (4.0, "0.4"),
                    (5.0, "0.9"),
                ],
            ),
        ]),
    );
    c.add(
        Family::Truthscale,
        "truthscale_gpu_dram_active_ratio",
        &matrix(&[(a, &[(4.0, "0.7")]), (b, &[(6.0, "0.3")])]),
    );
    let mut got: Vec<Vec<(String, Reading, Reading)>> = Vec::new();
    c.feed(&mut Units::default(), |s| {
        got.push(
            s.entities
                .iter()
                .map(|e| {
                    (
                        e.id.pod.as_ref().map(|p| p.pod.clone()).unwrap_or_default(),
                        e.readings.get(Field::TensorActive),
                        e.readings.get(Field::DramActive),
                    )
                })
                .collect(),
        );
    });
    let (v, blank) = (Reading::Value, Reading::Blank);
    let e = |p: &str, t, d| (p.to_owned(), t, d);
    assert_eq!(
        got,
        [
            vec![e("a", v(0.5), blank), e("b", v(0.1), blank)],
            vec![e("b", v(0.2), blank)],
            vec![e("a", v(0.6), blank), e("b", v(0.3), blank)],
            vec![e("b", v(0.4), blank), e("a", blank, v(0.7))],
            vec![e("a", v(0.8), blank), e("b", v(0.9), blank)],
            vec![e("a", v(0.1), blank), e("b", blank, v(0.3))],
        ]
    );
}

/// Values of GPU series that are not finite are left blank and counted, whichever family
/// wrote them.
#[test]
fn values_that_are_not_finite_are_blank_and_counted() {
    let a: Labels<'_> = &[("gpu", "0"), ("uuid", "GPU-a")];
    let mut c = Chunk::default();
    c.add(
        Family::Truthscale,
        "truthscale_gpu_tensor_active_ratio",
        &matrix(&[(a, &[(1.0, "NaN"), (2.0, "+Inf"), (3.0, "0.5")])]),
    );
    let mut got = Vec::new();
    let refused = c.feed(&mut Units::default(), |s| {
        got.push(s.entities[0].readings.get(Field::TensorActive))
    });
    assert_eq!(got, [Reading::Blank, Reading::Blank, Reading::Value(0.5)]);
    assert_eq!(refused.non_finite, 2);
    let g: Labels<'_> = &[("gpu", "0"), ("UUID", "GPU-a")];
    let mut c = Chunk::default();
    c.add(
        Family::DcgmExporter,
        "DCGM_FI_DEV_GPU_UTIL",
        &matrix(&[(g, &[(1.0, "-Inf"), (2.0, "40")])]),
    );
    assert_eq!(c.feed(&mut Units::default(), |_| {}).non_finite, 1);
    // A DCGM blank sentinel stored in the history (power's FP64 blank) is counted apart.
    let mut c = Chunk::default();
    c.add(
        Family::DcgmExporter,
        "DCGM_FI_DEV_POWER_USAGE",
        &matrix(&[(g, &[(1.0, "140737488355328"), (2.0, "300")])]),
    );
    let mut got = Vec::new();
    let refused = c.feed(&mut Units::default(), |s| {
        got.push(s.entities[0].readings.get(Field::PowerWatts))
    });
    assert_eq!(got, [Reading::Blank, Reading::Value(300.0)]);
    assert_eq!((refused.sentinels, refused.non_finite), (1, 0));
}

/// Two dcgm-exporter instances reading one GPU (the same labels but `instance`) that
/// disagree leave the reading blank at that time, counted by family; where they agree, it is
/// read. The sizing had followed whichever instance's name sorted last.
#[test]
fn two_instances_that_disagree_leave_the_reading_blank() {
    let a: Labels<'_> = &[
        ("gpu", "0"),
        ("UUID", "GPU-a"),
        ("Hostname", "n1"),
        ("instance", "a"),
    ];
    let b: Labels<'_> = &[
        ("gpu", "0"),
        ("UUID", "GPU-a"),
        ("Hostname", "n1"),
        ("instance", "b"),
    ];
    let mut c = Chunk::default();
    c.add(
        Family::DcgmExporter,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        &matrix(&[
            (a, &[(1.0, "0.2"), (2.0, "0.5")]),
            (b, &[(1.0, "0.8"), (2.0, "0.5")]),
        ]),
    );
    let mut got = Vec::new();
    let refused = c.feed(&mut Units::default(), |s| {
        got.push(s.entities[0].readings.get(Field::TensorActive));
    });
    assert_eq!(got, [Reading::Blank, Reading::Value(0.5)]);
    assert_eq!(
        refused.disagreeing.get("dcgm_fi_prof_pipe_tensor_active"),
        Some(&2)
    );
}

/// A value that is no number (`"n/a"`, from a Prometheus-compatible server) is a blank
/// reading counted with the values that are not finite, never dropped in silence; the
/// reading beside it is read.
#[test]
fn values_that_are_no_number_are_blank_and_counted() {
    let body = br#"{"status":"success","data":{"resultType":"matrix","result":[
        {"metric":{"gpu":"0","uuid":"GPU-a"},"values":[[1,"n/a"],[2,"0.5"]]}]}}"#;
    let (m, _) = crate::history::api::decode::<Matrix>("q", 200, body).unwrap();
    let mut c = Chunk::default();
    c.add(Family::Truthscale, "truthscale_gpu_tensor_active_ratio", &m);
    let mut got = Vec::new();
    let refused = c.feed(&mut Units::default(), |s| {
        got.push(s.entities[0].readings.get(Field::TensorActive));
    });
    assert_eq!(got, [Reading::Blank, Reading::Value(0.5)]);
    assert_eq!(refused.non_finite, 1);
    // DCGM's too.
    let g: Labels<'_> = &[("gpu", "0"), ("UUID", "GPU-a")];
    let mut c = Chunk::default();
    c.add(
        Family::DcgmExporter,
        "DCGM_FI_DEV_GPU_UTIL",
        &matrix(&[(g, &[(1.0, "n/a"), (2.0, "40")])]),
    );
    assert_eq!(c.feed(&mut Units::default(), |_| {}).non_finite, 1);
}

/// Points outside the chunk's times (a misbehaving server answers them; Prometheus never
/// does) are not read, and counted.
#[test]
fn points_outside_the_chunk_are_counted() {
    let a: Labels<'_> = &[("gpu", "0"), ("uuid", "GPU-a")];
    let mut c = Chunk {
        bounds: Some((60_000, 120_000)),
        step: 60_000,
        ..Chunk::default()
    };
    c.add(
        Family::Truthscale,
        "truthscale_gpu_tensor_active_ratio",
        &matrix(&[(
            a,
            &[(0.0, "0.1"), (60.0, "0.2"), (120.0, "0.3"), (180.0, "0.4")],
        )]),
    );
    let mut got = Vec::new();
    let refused = c.feed(&mut Units::default(), |s| {
        got.push((s.taken.0, s.entities[0].readings.get(Field::TensorActive)));
    });
    assert_eq!(
        got,
        [
            (60_000, Reading::Value(0.2)),
            (120_000, Reading::Value(0.3))
        ]
    );
    assert_eq!((refused.outside, refused.non_finite), (2, 0));
}

/// DCGM readings refused for an ambiguous unit (a percent-or-ratio family without a # HELP,
/// reading 1: 1 % or 100 %) are counted by family and handed back, for the read's warning;
/// a 0, the same in either unit, is read.
#[test]
fn readings_of_an_ambiguous_unit_are_counted() {
    let g: Labels<'_> = &[("gpu", "0"), ("UUID", "GPU-a")];
    let mut c = Chunk::default();
    c.add(
        Family::DcgmExporter,
        "DCGM_FI_DEV_GPU_UTIL_RATIO",
        &matrix(&[(g, &[(1.0, "0"), (2.0, "1"), (3.0, "0"), (4.0, "1")])]),
    );
    let mut got = Vec::new();
    let refused = c.feed(&mut Units::default(), |s| {
        got.extend(
            s.entities
                .iter()
                .map(|e| e.readings.get(Field::ReportedUtil)),
        );
    });
    assert_eq!(
        refused.ambiguous,
        BTreeMap::from([("dcgm_fi_dev_gpu_util_ratio".to_owned(), 2)])
    );
    let read: Vec<_> = got.into_iter().filter(|r| *r != Reading::Blank).collect();
    assert_eq!(read, [Reading::Value(0.0), Reading::Value(0.0)]);
}

/// The unit of a percent-or-ratio family, once decided (40: percent), holds in the chunks
/// after: where chunks start never changes a value (a chunk starting at a run of 1 would
/// read them as ambiguous and refuse them, another as 1 %).
#[test]
fn a_unit_decided_holds_across_chunks() {
    let g: Labels<'_> = &[("gpu", "0"), ("UUID", "GPU-a")];
    let points: Vec<(f64, &str)> = vec![(1.0, "40"), (2.0, "0"), (3.0, "0"), (4.0, "40")];
    let read = |cuts: &[usize]| {
        let mut units = Units::default();
        let (mut got, mut refused) = (Vec::new(), 0);
        let mut from = 0;
        for &to in cuts.iter().chain([&points.len()]) {
            let mut c = Chunk::default();
            c.add(
                Family::DcgmExporter,
                "DCGM_FI_DEV_GPU_UTIL_RATIO",
                &matrix(&[(g, &points[from..to])]),
            );
            let r = c.feed(&mut units, |s| {
                got.push(s.entities[0].readings.get(Field::ReportedUtil));
            });
            refused += r.ambiguous.values().sum::<u64>();
            from = to;
        }
        (got, refused)
    };
    let whole = read(&[]);
    assert_eq!(
        whole.0,
        [0.4, 0.0, 0.0, 0.4].map(Reading::Value).to_vec(),
        "percent"
    );
    assert_eq!(whole.1, 0);
    assert_eq!(read(&[1]), whole);
    assert_eq!(read(&[1, 2, 3]), whole);
}

#[test]
fn merging_on_the_grid_orders_as_the_sort_does() {
    let g0: Labels<'_> = &[("gpu", "0")];
    let g1: Labels<'_> = &[("gpu", "1")];
    let fill = |c: &mut Chunk| {
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_DEV_GPU_UTIL",
            &matrix(&[
                (g1, &[(15.0, "1"), (30.0, "2"), (60.0, "3")]),
                (g0, &[(30.0, "4"), (45.0, "5")]),
            ]),
        );
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_DEV_FB_USED",
            &matrix(&[(g0, &[(15.0, "6"), (60.0, "7")])]),
        );
    };
    let groups = |c: &mut Chunk| {
        let mut out: Vec<Vec<(i64, u32, f64)>> = Vec::new();
        c.for_each_time(|g| out.push(g.to_vec()));
        out
    };
    let grid = || Chunk {
        bounds: Some((15_000, 60_000)),
        step: 15_000,
        ..Chunk::default()
    };
    let mut merged = grid();
    let mut sorted = Chunk::default();
    fill(&mut merged);
    fill(&mut sorted);
    let (merged, sorted) = (groups(&mut merged), groups(&mut sorted));
    assert_eq!(merged, sorted);
    let times: Vec<Vec<i64>> = merged
        .iter()
        .map(|g| g.iter().map(|p| p.0).collect())
        .collect();
    assert_eq!(
        times,
        [
            vec![15_000, 15_000],
            vec![30_000, 30_000],
            vec![45_000],
            vec![60_000, 60_000]
        ]
    );
    // Series order within a timestamp: g1's GPU_UTIL (series 0), g0's (1), FB_USED (2).
    assert_eq!(merged[0], [(15_000, 0, 1.0), (15_000, 2, 6.0)]);
    // A point off the grid, or a series out of time order: the sort, the same groups.
    for extra in [(20_000, 2, 1.0), (15_000, 2, 1.0)] {
        let mut off = grid();
        fill(&mut off);
        off.points.push(extra);
        let mut reference = Chunk::default();
        fill(&mut reference);
        reference.points.push(extra);
        let got = groups(&mut off);
        assert_eq!(got, groups(&mut reference));
        assert!(got.iter().flatten().any(|p| *p == extra), "{extra:?}");
        assert!(got.windows(2).all(|w| w[0][0].0 < w[1][0].0));
    }
}

#[test]
fn points_outside_the_chunk_are_dropped() {
    let mut c = Chunk {
        bounds: Some((15_000, 30_000)),
        ..Chunk::default()
    };
    let g0: Labels<'_> = &[("gpu", "0")];
    c.add(
        Family::DcgmExporter,
        "DCGM_FI_DEV_GPU_UTIL",
        &matrix(&[(g0, &[(0.0, "1"), (15.0, "2"), (30.0, "3"), (45.0, "4")])]),
    );
    let mut times = Vec::new();
    c.feed(&mut Units::default(), |s| times.push(s.taken.0));
    assert_eq!(times, [15_000, 30_000]);
}

#[test]
fn own_metrics_map_back() {
    let mut c = Chunk::default();
    let l: &[(&str, &str)] = &[
        ("gpu", "3"),
        ("uuid", "GPU-x"),
        ("model", "Simulated H100 SXM"),
        ("mig_instance", "2"),
        ("mig_profile", "3g.40gb"),
        ("pod", "p"),
        ("namespace", "ns"),
        ("container", ""),
        ("node", "n1"),
    ];
    c.add(
        Family::Truthscale,
        "truthscale_gpu_sm_clock_hertz",
        &matrix(&[(l, &[(1.0, "1830000000")])]),
    );
    c.add(
        Family::Truthscale,
        "truthscale_gpu_tensor_active_ratio",
        &matrix(&[(l, &[(1.0, "0.5")])]),
    );
    let mut s: Vec<Sample> = Vec::new();
    c.feed(&mut Units::default(), |x| s.push(x.clone()));
    assert_eq!(s.len(), 1);
    let e = &s[0].entities[0];
    assert!(e.simulated);
    assert_eq!(e.readings.get(Field::SmClockMhz), Reading::Value(1830.0));
    assert_eq!(e.readings.get(Field::TensorActive), Reading::Value(0.5));
    let want = EntityId {
        gpu: Some(3),
        uuid: Some("GPU-x".into()),
        model: Some("Simulated H100 SXM".into()),
        pci_bus_id: None,
        driver_version: None,
        minor: None,
        mig: Some(MigId {
            gpu_instance: 2,
            compute_instance: None,
            profile: Some("3g.40gb".into()),
            ..MigId::default()
        }),
        pod: Some(PodRef {
            pod: "p".into(),
            namespace: Some("ns".into()),
            container: None,
        }),
        node: Some("n1".into()),
    };
    assert_eq!(e.id, want);
}
