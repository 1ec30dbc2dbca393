//! Tests of the Prometheus API client.

use super::*;

/// `--compression auto` leaves out gzip for a server on this host only.
#[test]
fn a_server_on_this_host_is_told_by_its_url() {
    let local = |url: &str| {
        Client::new(url, None, Duration::from_secs(1), None)
            .unwrap()
            .is_local()
    };
    for url in [
        "http://localhost:9090",
        "http://LOCALHOST",
        "http://127.0.0.1:9090/prefix",
        "https://127.1.2.3",
        "http://[::1]:9090",
    ] {
        assert!(local(url), "{url}");
    }
    for url in [
        "http://prometheus:9090",
        "http://10.0.0.1:9090",
        "http://[2001:db8::1]:9090",
        "http://localhost.example.com",
    ] {
        assert!(!local(url), "{url}");
    }
}

/// The limits by the exact texts of Prometheus' and Mimir's errors; other errors are
/// not limits.
#[test]
fn limits_are_told_by_their_errors() {
    assert_eq!(
        limit_of(
            422,
            Some("execution"),
            "query processing would load too many samples into memory in query execution"
        ),
        Some(Limit::Samples)
    );
    assert_eq!(
        limit_of(503, Some("timeout"), "query timed out in query execution"),
        Some(Limit::Timeout)
    );
    assert_eq!(
        limit_of(
            422,
            Some("execution"),
            "the query exceeded the maximum number of series (limit: 1000 series) (err-mimir-max-series-per-query). Consider reducing the time range"
        ),
        Some(Limit::Mimir("-querier.max-fetched-series-per-query"))
    );
    assert_eq!(
        limit_of(422, None, "x (err-mimir-max-chunks-bytes-per-query)"),
        Some(Limit::Mimir("-querier.max-fetched-chunk-bytes-per-query"))
    );
    assert_eq!(
        limit_of(
            422,
            None,
            "the query time range exceeds the limit (err-mimir-max-query-length)"
        ),
        Some(Limit::Mimir("-query-frontend.max-query-length"))
    );
    assert_eq!(
        limit_of(422, None, "x (err-mimir-max-total-query-length)"),
        Some(Limit::Mimir("-query-frontend.max-total-query-length"))
    );
    assert_eq!(limit_of(500, Some("internal"), "boom in the tsdb"), None);
    assert_eq!(limit_of(400, Some("bad_data"), "parse error"), None);
    assert!(Limit::Samples.advice().contains("--query.max-samples"));
    assert!(Limit::Timeout.advice().contains("--query.timeout"));
}

/// The answers in flight share 512 MiB: 256 MiB each at 1 or 2 in flight, 64 MiB at 8,
/// 16 MiB at 32.
#[test]
fn answers_in_flight_share_one_cap() {
    let mib = |n| max_body(n) >> 20;
    assert_eq!([mib(1), mib(2), mib(8), mib(32)], [256, 256, 64, 16]);
    assert!((1..=32).all(|n| max_body(n) * n as u64 <= MAX_BODIES_IN_FLIGHT));
}

/// A query's budget gives exactly its requests, then an error naming the flag.
#[test]
fn a_query_budget_runs_out_naming_its_flag() {
    let b = Budget::new(3);
    assert!((0..3).all(|_| b.spend("u").is_ok()));
    let Err(GetError::Other(e)) = b.spend("u") else {
        panic!("the fourth request is refused")
    };
    assert!(e.to_string().contains("--max-requests-per-query 3"), "{e}");
}

/// 400 000 warnings (Thanos' partial answers) are kept as at most 20 distinct lines,
/// each at most 500 characters, and one line that counts them all.
#[test]
fn warnings_are_capped_and_counted() {
    let mut w = Warnings::default();
    for answer in 0..4 {
        w.add(
            (0..100_000)
                .map(|i| format!("partial answer {answer}-{i}: {}", "x".repeat(2000)))
                .collect(),
        );
    }
    w.add(vec!["same".into(), "same".into()]);
    let lines = w.lines();
    assert_eq!(lines.len(), MAX_WARNINGS + 1);
    assert!(
        lines[..MAX_WARNINGS]
            .iter()
            .all(|l| l.chars().count() <= 500)
    );
    assert_eq!(
        lines[MAX_WARNINGS],
        "400002 warnings in all from the answers (20 distinct shown above)"
    );
    let mut few = Warnings::default();
    few.add(vec!["a".into(), "a".into()]);
    assert_eq!(
        few.lines(),
        [
            "a",
            "2 warnings in all from the answers (1 distinct shown above)"
        ]
    );
}

/// A range query's series keep their labels and, in one list, their values in order: a
/// number, NaN and ±Inf as written, a value that is no number as NaN (refused where read,
/// never dropped); a series without `values` (a native histogram's) holds none, and keys
/// not read are skipped.
#[test]
fn a_matrix_holds_every_series_values_in_one_list() {
    let body = br#"{"status":"success","data":{"resultType":"matrix","result":[
        {"metric":{"__name__":"a","gpu":"0"},"values":[[1.5,"0.25"],[2,"NaN"],[3,"+Inf"],[4,"x"]]},
        {"metric":{"gpu":"h"},"histograms":[[1,{"count":"1","sum":"2"}]]},
        {"values":[[5,"-1e3"]],"extra":{"a":[1,2]},"metric":{"gpu":"1"}}]}}"#;
    let (m, warnings) = decode::<Matrix>("q", 200, body).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(m.result_type, "matrix");
    let gpus: Vec<&str> = m.result.iter().map(|s| s.metric["gpu"].as_str()).collect();
    assert_eq!(gpus, ["0", "h", "1"]);
    assert_eq!(m.result[0].metric["__name__"], "a");
    let values = |i: usize| -> Vec<(f64, String)> {
        m.values_of(&m.result[i])
            .iter()
            .map(|&(t, v)| (t, v.0.to_string()))
            .collect()
    };
    let s = |x: &str| x.to_owned();
    assert_eq!(
        values(0),
        [
            (1.5, s("0.25")),
            (2.0, s("NaN")),
            (3.0, s("inf")),
            (4.0, s("NaN"))
        ]
    );
    assert_eq!(values(1), []);
    assert_eq!(values(2), [(5.0, s("-1000"))]);
    assert_eq!(m.values.len(), 5);
    // A series without its labels is no answer of the API.
    let body = br#"{"status":"success","data":{"resultType":"matrix","result":[{"values":[]}]}}"#;
    let e = decode::<Matrix>("q", 200, body).unwrap_err();
    assert!(format!("{e:#}").contains("missing field `metric`"), "{e:#}");
}
