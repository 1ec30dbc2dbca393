use super::wire::Label;
use super::*;

fn prometheus(version: u32) -> Evaluation {
    Evaluation {
        lookback: 300_000,
        left_open: version >= 3,
        version: format!("{version}.0.0"),
        matchers: Vec::new(),
    }
}

/// The values at each step, as `(seconds, value)`.
fn at_steps(samples: &[(i64, f64)], steps: (i64, i64, i64), e: &Evaluation) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    evaluate(samples, steps, e, &mut out);
    out.into_iter().map(|(t, v)| (t, v.0)).collect()
}

#[test]
fn each_step_takes_the_newest_sample_within_the_lookback() {
    // Samples at 10 s, 20 s and 30 s; steps every 100 s from 0 to 400 s. As Prometheus'
    // own staleness tests have it: the value at 30 s holds until 330 s (Prometheus 2) or
    // 329.999 s (Prometheus 3), and a stale marker ends it at once.
    let samples = [(10_000, 0.0), (20_000, 1.0), (30_000, 2.0)];
    let v2 = prometheus(2);
    assert_eq!(
        at_steps(&samples, (0, 400_000, 100_000), &v2),
        vec![(100.0, 2.0), (200.0, 2.0), (300.0, 2.0)]
    );
    assert_eq!(
        at_steps(&samples, (330_000, 330_000, 1), &v2),
        vec![(330.0, 2.0)]
    );
    assert_eq!(at_steps(&samples, (330_001, 330_001, 1), &v2), vec![]);
    let v3 = prometheus(3);
    assert_eq!(at_steps(&samples, (330_000, 330_000, 1), &v3), vec![]);
    assert_eq!(
        at_steps(&samples, (329_999, 329_999, 1), &v3),
        vec![(329.999, 2.0)]
    );
    // A step exactly at a sample takes it; one between two takes the earlier.
    assert_eq!(
        at_steps(&samples, (20_000, 25_000, 5_000), &v2),
        vec![(20.0, 1.0), (25.0, 1.0)]
    );
    let stale = [
        (10_000, 1.0),
        (20_000, f64::from_bits(STALE_NAN)),
        (40_000, 3.0),
    ];
    assert_eq!(
        at_steps(&stale, (10_000, 40_000, 10_000), &v2),
        vec![(10.0, 1.0), (40.0, 3.0)]
    );
}

#[test]
fn a_plain_nan_is_a_value_and_a_series_without_steps_is_left_out() {
    let e = prometheus(2);
    let mut out = Vec::new();
    evaluate(&[(0, f64::NAN)], (0, 0, 1), &e, &mut out);
    assert!(out[0].1.0.is_nan());
    let mut series = Series {
        samples: vec![(0, 1.0)],
        ..Series::default()
    };
    series.flush((1_000_000, 2_000_000, 1000), &e, || {
        [("__name__".to_owned(), "x".to_owned())].into()
    });
    let m = series.into_matrix();
    assert!(m.result.is_empty() && m.values.is_empty());
}

#[test]
fn durations_read_as_prometheus_writes_them() {
    assert_eq!(prometheus_duration("5m"), Some(300_000));
    assert_eq!(prometheus_duration("1h30m"), Some(5_400_000));
    assert_eq!(prometheus_duration("90s"), Some(90_000));
    assert_eq!(prometheus_duration("1m500ms"), Some(60_500));
    assert_eq!(prometheus_duration("2d"), Some(172_800_000));
    assert_eq!(prometheus_duration(""), None);
    assert_eq!(prometheus_duration("5"), None);
    assert_eq!(prometheus_duration("5x"), None);
}

/// `--query.lookback-delta=0s` is the engine's default, 5 minutes, as `query_range` evaluates
/// it: never a lookback of 0.
#[test]
fn a_lookback_of_0_is_the_engines_default() {
    assert_eq!(engine_lookback(prometheus_duration("0s").unwrap()), 300_000);
    assert_eq!(engine_lookback(120_000), 120_000);
}

#[test]
fn the_request_names_the_series_and_the_selector() {
    use prost::Message as _;
    let mut e = prometheus(2);
    e.matchers = crate::history::selector::matchers(r#"a="x\"y",b!~"c.*""#).unwrap();
    let body = request(&e, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1, 2);
    // A snappy block of literals: the length, a tag, then the message itself.
    let (len, n) = wire::tests_uvarint(&body);
    let message = &body[n + if len <= 60 { 1 } else { 3 }..];
    let req = wire::ReadRequest::decode(message).unwrap();
    assert_eq!(req.accepted_response_types, vec![wire::STREAMED_XOR_CHUNKS]);
    let q = &req.queries[0];
    assert_eq!((q.start_timestamp_ms, q.end_timestamp_ms), (1, 2));
    let m: Vec<(i32, &str, &str)> = q
        .matchers
        .iter()
        .map(|m| (m.r#type, m.name.as_str(), m.value.as_str()))
        .collect();
    assert_eq!(
        m,
        vec![
            (0, "__name__", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
            (0, "a", "x\"y"),
            (3, "b", "c.*"),
        ]
    );
}

/// An XOR chunk of one sample: its count, its time (a zig-zag varint) and its value.
fn one_sample_chunk(t: i64, v: f64) -> wire::Chunk {
    let mut data = vec![0, 1];
    let mut u = ((t << 1) ^ (t >> 63)) as u64;
    while u >= 0x80 {
        data.push((u as u8) | 0x80);
        u >>= 7;
    }
    data.push(u as u8);
    data.extend_from_slice(&v.to_bits().to_be_bytes());
    wire::Chunk {
        min_time_ms: t,
        max_time_ms: t,
        r#type: wire::XOR,
        data,
    }
}

#[test]
fn each_chunk_of_a_span_reads_as_its_own_steps_would() {
    // Samples every 70 s for two hours, a 4-minute gap and a stale marker in them; each a
    // chunk of its own.
    let samples: Vec<(i64, f64)> = (0..100i32)
        .filter(|k| !(40..44).contains(k))
        .map(|k| {
            let v = if k == 70 {
                f64::from_bits(STALE_NAN)
            } else {
                f64::from(k) / 3.0
            };
            (1_000_000 + i64::from(k) * 70_000, v)
        })
        .collect();
    let label = |v: &str| Label {
        name: "__name__".into(),
        value: v.into(),
    };
    for version in [2, 3] {
        let e = prometheus(version);
        let mut span = Span::new(1_000_000, 8_000_000);
        // The series in two parts, as two frames bring it.
        let (a, b) = samples.split_at(30);
        for part in [a, b] {
            let chunks = part.iter().map(|&(t, v)| one_sample_chunk(t, v)).collect();
            span.add(wire::ChunkedSeries {
                labels: vec![label("x")],
                chunks,
            })
            .unwrap();
        }
        assert_eq!(span.series.len(), 1);
        // Chunks of the feed at 60 s steps, each evaluated from the span alone.
        for (first, last) in [
            (1_000_000, 1_540_000),
            (1_600_000, 4_000_000),
            (4_060_000, 8_000_000),
        ] {
            let m = span.evaluate((first, last, 60_000), &e).unwrap();
            let want = at_steps(&samples, (first, last, 60_000), &e);
            let got: Vec<(f64, f64)> = m.values.iter().map(|(t, v)| (*t, v.0)).collect();
            assert_eq!(got, want, "Prometheus {version}, steps {first}..={last}");
            let names: Vec<_> = m.result.iter().map(|s| s.metric.clone()).collect();
            assert_eq!(
                names,
                vec![[("__name__".to_owned(), "x".to_owned())].into()]
            );
            assert!(!want.is_empty());
        }
    }
}

/// An answer listing many series without a chunk (10 000 here) reserves values for the one
/// series with data alone: a day at 15 s steps is 5 761 values, not 57 million (a server
/// answering 600 000 such series made the reservation abort the process).
#[test]
fn series_without_chunks_reserve_nothing() {
    let mut span = Span::new(0, 86_400_000);
    let label = |v: String| Label {
        name: "__name__".into(),
        value: v,
    };
    span.add(wire::ChunkedSeries {
        labels: vec![label("x".into())],
        chunks: vec![one_sample_chunk(60_000, 1.0)],
    })
    .unwrap();
    for i in 0..10_000 {
        span.add(wire::ChunkedSeries {
            labels: vec![label(format!("empty{i}"))],
            chunks: Vec::new(),
        })
        .unwrap();
    }
    let m = span
        .evaluate((0, 86_400_000, 15_000), &prometheus(3))
        .unwrap();
    assert_eq!(m.result.len(), 1);
    assert!(m.values.capacity() <= 5_761, "{}", m.values.capacity());
}

/// A chunk cut short is an error that names its series, so a reader can find it.
#[test]
fn a_malformed_chunk_names_its_series() {
    let mut chunk = one_sample_chunk(1_000_000, 1.0);
    chunk.data.truncate(chunk.data.len() - 4);
    let mut span = Span::new(1_000_000, 2_000_000);
    span.add(wire::ChunkedSeries {
        labels: vec![
            Label {
                name: "__name__".into(),
                value: "DCGM_FI_DEV_GPU_UTIL".into(),
            },
            Label {
                name: "gpu".into(),
                value: "3".into(),
            },
        ],
        chunks: vec![chunk],
    })
    .unwrap();
    let err = span
        .evaluate((1_000_000, 1_060_000, 60_000), &prometheus(3))
        .unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.starts_with("remote-read: series {__name__=\"DCGM_FI_DEV_GPU_UTIL\",gpu=\"3\"}: an XOR chunk of 1 samples is cut short"),
        "{text}"
    );
}

/// A server that reads remote stores is one remote-read is not used on: the top-level key
/// with an entry, not an empty list nor `remote_write`.
#[test]
fn remote_stores_are_the_top_level_key() {
    let reads = "global:\n  scrape_interval: 15s\nremote_read:\n- url: http://x/read\n";
    assert!(reads_remote_stores(reads));
    assert!(!reads_remote_stores(
        "global:\n  scrape_interval: 15s\nremote_read: []\n"
    ));
    assert!(!reads_remote_stores(
        "global:\n  scrape_interval: 15s\nremote_write:\n- url: http://x/write\n"
    ));
}

/// External labels are the global section's; a remote_read entry's `filter_external_labels`
/// (which Prometheus writes into every one) is not one.
#[test]
fn external_labels_are_the_global_keys() {
    let with = "global:\n  scrape_interval: 15s\n  external_labels:\n    cluster: a\n";
    let without = "global:\n  scrape_interval: 15s\nremote_read:\n- url: http://x/read\n  filter_external_labels: true\n";
    assert!(has_external_labels(with));
    assert!(!has_external_labels(without));
}
