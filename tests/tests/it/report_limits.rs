//! `truthscale report` on the Prometheus setups large fleets run: a real Prometheus whose
//! query limits refuse the report's queries (met by splitting them, with the same answer as
//! without limits, or a clear error naming the flag), a flaky front (retries with backoff, a
//! query timeout met by shorter ranges, queries in flight together), and a distributed
//! setup: two Prometheus agents remote-writing two clusters (told apart by an external
//! label) to a central Prometheus with the remote-write receiver on, whose answers carry a
//! warning (a remote-read store that is down: a partial answer), read back with
//! `--cluster-label` and `--selector`.
//!
//! The fleet is `report`'s (see that module): 11 pods over 7 hours at a 60 s step.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::Value;
use truthscale_e2e::{Prometheus, Sidecar, TempDir, free_port, require_tool_or_return};

use crate::report::{FLEET_FLAGS, Run, end_now, openmetrics, truthscale};

/// Read by `query_range` alone: the limits, splits and faults below are its (the answers
/// they must give are read the default way, by remote-read).
const NEVER: &[&str] = &["--remote-read", "never"];

/// `report` over `url` for `since` up to `until`, the `truthscale` job's pods.
fn report(url: &str, until: &str, since: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "report",
        "--prometheus",
        url,
        "--since",
        since,
        "--until",
        until,
        "--step",
        "60s",
        "--selector",
        "{job=\"truthscale\"}",
    ];
    args.extend_from_slice(FLEET_FLAGS);
    args.extend_from_slice(extra);
    truthscale(&args)
}

/// The document without what tells two reads of the same data apart: the server's URL and
/// the notes on how the history was read (splits, retries, warnings).
fn answer(run: &Run) -> Value {
    let mut v = run.json();
    v["source"]["prometheus"] = Value::Null;
    if let Some(notes) = v["notes"].as_array_mut() {
        notes.retain(|n| {
            let n = n.as_str().unwrap_or_default();
            !n.contains("refused for a server limit") && !n.contains("tried again")
        });
    }
    v
}

/// The count in the stderr summary `… (R retried, S split for a server limit) …`.
fn counted(run: &Run, what: &str) -> u64 {
    let line = run
        .stderr
        .lines()
        .find(|l| l.contains("split for a server limit"))
        .unwrap_or_else(|| panic!("no summary line on stderr:\n{}", run.stderr));
    let at = line
        .find(what)
        .unwrap_or_else(|| panic!("{what:?} not in {line:?}"));
    line[..at]
        .split(|c: char| !c.is_ascii_digit())
        .rev()
        .find(|w| !w.is_empty())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no count before {what:?} in {line:?}"))
}

/// The RFC 3339 time of Unix seconds `t`.
fn rfc3339(t: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_secs(u64::try_from(t).unwrap());
    humantime::format_rfc3339_seconds(t).to_string()
}

#[test]
fn report_meets_query_limits_with_the_same_answer() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let end = end_now();
    let until = rfc3339(end);
    let om = openmetrics(end);
    let plain_dir = TempDir::new("limits-plain");
    let plain = Prometheus::backfilled(&om, plain_dir.path(), None);
    let base = report(&plain.url(), &until, "6h", &[]);
    let want = answer(&base);
    assert_eq!(want["workloads"], 11);
    // A window that starts 3 h before the data: the first chunk finds no series to size the
    // next by, so the chunks stay short (10, 20, 40, 40 … steps) until the data begins,
    // never the rest of the window in one chunk (2 chunks in all, its memory the window's).
    let early = report(&plain.url(), &until, "10h", &["--remote-read", "never"]);
    assert_eq!(early.code, Some(0), "{}", early.stderr);
    assert!(counted(&early, "chunks") >= 5, "{}", early.stderr);
    assert_eq!(counted(&base, "split"), 0, "{}", base.stderr);

    // 11 series × 360 steps = 3 960 samples per query, over the limit of 2 000: each is read
    // in halves in time (180 steps each), four queries in flight.
    let dir = TempDir::new("limits-samples");
    let limited = Prometheus::backfilled_with(&om, dir.path(), None, &["--query.max-samples=2000"]);
    let run = report(
        &limited.url(),
        &until,
        "6h",
        &["--max-queries-in-flight", "4", "--remote-read", "never"],
    );
    assert_eq!(answer(&run), want, "stderr:\n{}", run.stderr);
    let splits = counted(&run, "split");
    assert!(
        splits >= 5,
        "each of the 5 names split at least once: {}",
        run.stderr
    );
    let notes = run.json()["notes"].to_string();
    assert!(
        notes.contains(&format!("{splits} queries were refused for a server limit")),
        "{notes}"
    );

    // One step of the 11 series is over a limit of 8: the series are split by uuid (and
    // each half in time again), still the same answer.
    let base_1h = answer(&report(&plain.url(), &until, "1h", &[]));
    let dir = TempDir::new("limits-series");
    let tight = Prometheus::backfilled_with(&om, dir.path(), None, &["--query.max-samples=8"]);
    let run = report(&tight.url(), &until, "1h", NEVER);
    assert_eq!(answer(&run), base_1h, "stderr:\n{}", run.stderr);
    assert!(counted(&run, "split") > 5, "{}", run.stderr);

    // No sample at all is allowed: nothing to split down to; the error names the limit
    // and the flag to raise.
    let dir = TempDir::new("limits-none");
    let none = Prometheus::backfilled_with(&om, dir.path(), None, &["--query.max-samples=0"]);
    let run = report(&none.url(), &until, "1h", NEVER);
    assert_eq!(run.code, Some(2), "stderr:\n{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    for want in [
        "HTTP 422",
        "would load too many samples",
        "split down to one step and one uuid, it is still refused",
        "raise --query.max-samples",
    ] {
        assert!(
            run.stderr.contains(want),
            "{want:?} not in:\n{}",
            run.stderr
        );
    }
}

/// A front of `upstream` (`127.0.0.1:PORT`), one request per connection, that answers
/// `fault(n, request line)` instead of forwarding when it gives an answer; `n` counts the
/// requests from 0. The thread ends with the test process.
fn front(
    upstream: String,
    fault: impl Fn(usize, &str) -> Option<String> + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&count);
    let fault = Arc::new(fault);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut client) = stream else { continue };
            let (upstream, fault, counter) =
                (upstream.clone(), Arc::clone(&fault), Arc::clone(&counter));
            std::thread::spawn(move || {
                let _ = client.set_read_timeout(Some(Duration::from_secs(30)));
                let mut head = Vec::new();
                let mut buf = [0u8; 8192];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match client.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let line = text.lines().next().unwrap_or_default().to_owned();
                let n = counter.fetch_add(1, Ordering::SeqCst);
                if let Some(answer) = fault(n, &line) {
                    let _ = client.write_all(answer.as_bytes());
                    return;
                }
                // Forward, asking the upstream to close after its answer.
                let mut request: String = text
                    .split("\r\n")
                    .filter(|l| !l.to_ascii_lowercase().starts_with("connection:") && !l.is_empty())
                    .map(|l| format!("{l}\r\n"))
                    .collect();
                request.push_str("Connection: close\r\n\r\n");
                let Ok(mut up) = std::net::TcpStream::connect(&upstream) else {
                    return;
                };
                if up.write_all(request.as_bytes()).is_ok() {
                    let _ = std::io::copy(&mut up, &mut client);
                }
            });
        }
    });
    (format!("http://{addr}"), count)
}

/// An HTTP answer with a JSON or text body, closing the connection.
fn http(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The steps of a `query_range` request line (`None` for other requests).
fn steps_asked(line: &str) -> Option<i64> {
    let query = line
        .split_whitespace()
        .nth(1)?
        .split_once("/api/v1/query_range?")?
        .1;
    let param = |k: &str| -> Option<f64> {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
    };
    Some(((param("end")? - param("start")?) / param("step")?).floor() as i64 + 1)
}

#[test]
fn report_retries_and_meets_a_query_timeout_behind_a_flaky_front() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let end = end_now();
    let until = rfc3339(end);
    let dir = TempDir::new("flaky");
    let prom = Prometheus::backfilled(&openmetrics(end), dir.path(), None);
    let want = answer(&report(&prom.url(), &until, "6h", &[]));

    // Every fourth request gets a 503 from the front (a restarting Prometheus behind a
    // load balancer); a query over more than 100 steps gets Prometheus' own query timeout
    // answer (503, errorType timeout), as a server with a short --query.timeout gives it.
    let (url, count) = front(prom.addr.clone(), |n, line| {
        if n % 4 == 1 {
            return Some(http("503 Service Unavailable", "upstream connect error"));
        }
        steps_asked(line).filter(|&s| s > 100).map(|_| {
            http(
                "503 Service Unavailable",
                r#"{"status":"error","errorType":"timeout","error":"query timed out in query execution"}"#,
            )
        })
    });
    let started = Instant::now();
    let run = report(
        &url,
        &until,
        "6h",
        &["--max-queries-in-flight", "3", "--remote-read", "never"],
    );
    assert_eq!(answer(&run), want, "stderr:\n{}", run.stderr);
    let retried = counted(&run, "retried");
    assert!(retried >= 1, "{}", run.stderr);
    assert!(counted(&run, "split") >= 5, "{}", run.stderr);
    eprintln!(
        "flaky front: {} requests, {retried} retried, in {:.1} s",
        count.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64()
    );
    let notes = run.json()["notes"].to_string();
    assert!(
        notes.contains(&format!(
            "{retried} requests to Prometheus failed for a passing reason and were tried again"
        )),
        "{notes}"
    );

    // Without retries, the first 503 is the error, named.
    let (url, _) = front(prom.addr.clone(), |n, _| {
        (n == 1).then(|| http("503 Service Unavailable", "upstream connect error"))
    });
    let run = report(
        &url,
        &until,
        "6h",
        &["--prometheus-retries", "0", "--remote-read", "never"],
    );
    assert_eq!(run.code, Some(2), "stderr:\n{}", run.stderr);
    assert!(run.stderr.contains("HTTP 503"), "{}", run.stderr);
}

/// `(cluster, value)` of an instant query's series (its warnings let through: this store's
/// answers are partial on purpose).
fn by_cluster(prom: &Prometheus, query: &str) -> Vec<(String, f64)> {
    let v: Value = serde_json::from_str(&prom.query(query).text()).expect("API JSON");
    v["data"]["result"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|s| {
                    (
                        s["metric"]["cluster"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        s["value"][1]
                            .as_str()
                            .and_then(|x| x.parse().ok())
                            .unwrap_or(0.0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn report_reads_two_clusters_remote_written_by_agents_to_a_central_prometheus() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let dir = TempDir::new("clusters");
    // The central store: the remote-write receiver on, and a remote-read store that is
    // down, so every answer is partial and says so in its warnings.
    let central_dir = dir.path().join("central");
    std::fs::create_dir_all(&central_dir).unwrap();
    let central = Prometheus::start_with(
        &format!(
            "global:\n  scrape_interval: 15s\nremote_read:\n  - url: http://127.0.0.1:{}/api/v1/read\n",
            free_port()
        ),
        &central_dir,
        &["--web.enable-remote-write-receiver"],
    );
    // Two clusters, each a simulated sidecar of the same pod name on the same node name,
    // scraped by an agent whose external label names its cluster.
    let mut keep = Vec::new();
    for cluster in ["a", "b"] {
        let d = dir.path().join(cluster);
        std::fs::create_dir_all(&d).unwrap();
        let sidecar = Sidecar::start(
            &["--source", "sim", "--interval", "1s"],
            &[
                ("POD_NAME", "llm-0"),
                ("POD_NAMESPACE", "serving"),
                ("CONTAINER_NAME", "vllm"),
                ("NODE_NAME", "gpu-node-1"),
            ],
            &d,
        );
        let config = format!(
            "global:\n  scrape_interval: 1s\n  external_labels:\n    cluster: {cluster}\nscrape_configs:\n  - job_name: truthscale\n    static_configs:\n      - targets: ['{}']\nremote_write:\n  - url: http://{}/api/v1/write\n    queue_config:\n      batch_send_deadline: 1s\n",
            sidecar.addr, central.addr
        );
        let agent = Prometheus::start_with(&config, &d, &[Prometheus::agent_flag()]);
        keep.push((sidecar, agent));
    }
    // Wait until the central store holds 20 s of both clusters.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let counts = by_cluster(
            &central,
            "min by (cluster) (count_over_time(truthscale_gpu_tensor_active_ratio[1m]))",
        );
        if counts.len() == 2 && counts.iter().all(|(_, n)| *n >= 20.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agents never wrote 20 s of both clusters: {counts:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let url = central.url();
    let read = |extra: &[&str]| {
        let mut args = vec![
            "report",
            "--prometheus",
            url.as_str(),
            "--since",
            "15s",
            "--step",
            "1s",
        ];
        args.extend_from_slice(extra);
        truthscale(&args)
    };
    let run = |extra: &[&str]| read(&[&["--json"], extra].concat());

    // The simulated pod's GPUs, in each cluster.
    let n = by_cluster(
        &central,
        "count by (cluster) (truthscale_gpu_tensor_active_ratio)",
    );
    assert_eq!(n.len(), 2, "{n:?}");
    let per = n[0].1;
    assert!(per >= 1.0 && (n[1].1 - per).abs() < 1e-9, "{n:?}");
    // Without the cluster label, the two clusters' series name the same GPUs: one pod.
    let merged = run(&[]).json();
    assert_eq!(merged["workloads"].as_f64(), Some(per), "{merged:#}");

    let r = run(&["--cluster-label", "cluster"]);
    let v = r.json();
    // With it, the same pod and node names in two clusters stay apart, on GPUs named
    // CLUSTER/NODE/UUID.
    assert_eq!(v["workloads"].as_f64(), Some(2.0 * per), "{v:#}");
    let gpus: Vec<&str> = v["rightsizing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["gpu"].as_str().unwrap())
        .collect();
    let in_a = gpus
        .iter()
        .filter(|g| g.starts_with("a/gpu-node-1/"))
        .count();
    let in_b = gpus
        .iter()
        .filter(|g| g.starts_with("b/gpu-node-1/"))
        .count();
    assert_eq!((in_a as f64, in_b as f64), (per, per), "{gpus:?}");
    let clusters = v["clusters"].as_array().expect("clusters");
    let names: Vec<&str> = clusters
        .iter()
        .map(|c| c["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    for c in clusters {
        assert_eq!(c["workloads"].as_f64(), Some(per), "{c:#}");
        assert_eq!(c["allocated_gpus"]["max"].as_f64(), Some(per), "{c:#}");
    }
    // The partial answers' warnings are in the notes.
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("Prometheus warned (the answer may be partial): remote_read"),
        "{notes}"
    );
    assert!(notes.contains("pool the 2 clusters as one"), "{notes}");
    assert!(r.stderr.contains("warning"), "{}", r.stderr);

    // --selector picks one cluster.
    let v = run(&[
        "--cluster-label",
        "cluster",
        "--selector",
        "{cluster=\"b\"}",
    ])
    .json();
    assert_eq!(v["workloads"].as_f64(), Some(per));
    assert_eq!(v["clusters"][0]["cluster"], "b");
    assert_eq!(v["clusters"].as_array().map(Vec::len), Some(1));

    // `--by node` groups by each cluster's node, not by the cluster.
    let v = run(&["--cluster-label", "cluster", "--by", "node"]).json();
    let mut groups: Vec<&str> = v["showback"]["total"]["groups"]
        .as_array()
        .expect("showback groups")
        .iter()
        .map(|g| g["group"].as_str().unwrap())
        .collect();
    groups.sort_unstable();
    assert_eq!(groups, ["a/gpu-node-1", "b/gpu-node-1"], "{v:#}");
    // The pods' own series are read by name across clusters, and a note says so.
    let notes = v["showback"]["notes"].to_string();
    assert!(
        notes.contains("pods of the same name in two clusters share them"),
        "{notes}"
    );

    // The text report has the table.
    let text = read(&["--cluster-label", "cluster"]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert!(text.stdout.contains("BY CLUSTER"), "{}", text.stdout);
    drop(keep);
}

/// `report` read by remote-read (the raw samples streamed as chunks, each step evaluated by
/// truthscale) gives the report `query_range` gives on the same real Prometheus, byte for
/// byte: at the samples' own 60 s step and at a 45 s step that falls between them (each
/// step then takes the newest sample within the server's lookback); and `--remote-read
/// always` says so on stderr.
#[test]
fn remote_read_gives_the_report_range_queries_give() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let end = end_now();
    let until = rfc3339(end);
    let dir = TempDir::new("remote-read");
    let prom = Prometheus::backfilled(&openmetrics(end), dir.path(), None);
    let url = prom.url();
    for step in ["60s", "45s"] {
        let run = |how: &str| {
            let mut args = vec![
                "report",
                "--prometheus",
                &url,
                "--since",
                "6h",
                "--until",
                &until,
                "--step",
                step,
                "--selector",
                "{job=\"truthscale\"}",
                "--remote-read",
                how,
            ];
            args.extend_from_slice(FLEET_FLAGS);
            truthscale(&args)
        };
        let (remote, range) = (run("always"), run("never"));
        assert_eq!(remote.code, Some(0), "stderr:\n{}", remote.stderr);
        assert_eq!(range.code, Some(0), "stderr:\n{}", range.stderr);
        assert_eq!(range.json()["workloads"], 11, "{}", range.stdout);
        assert!(
            remote.stdout == range.stdout,
            "step {step}: remote-read and query_range differ:\n{}\n---\n{}",
            remote.stdout,
            range.stdout
        );
        assert!(counted(&remote, "by remote-read") >= 5, "{}", remote.stderr);
        assert_eq!(counted(&range, "by remote-read"), 0, "{}", range.stderr);
    }

    // A remote-read answer that is no stream of frames (a front that mangles it): under
    // `auto` it is said once and the rest read by query_range, the same report; under
    // `always` it is the error, naming what was wrong.
    let want = answer(&report(&url, &until, "6h", NEVER));
    let (bad, _) = front(prom.addr.clone(), |_, line| {
        line.starts_with("POST /api/v1/read")
            .then(|| http("200 OK", "no frames here"))
    });
    let run = report(&bad, &until, "6h", &[]);
    assert_eq!(answer(&run), want, "stderr:\n{}", run.stderr);
    assert!(
        run.stderr
            .contains("remote-read failed, reading by query_range from now on"),
        "{}",
        run.stderr
    );
    assert_eq!(counted(&run, "by remote-read"), 0, "{}", run.stderr);
    let run = report(&bad, &until, "6h", &["--remote-read", "always"]);
    assert_eq!(run.code, Some(2), "stderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains("the streamed answer") && run.stderr.contains("frame at byte 0"),
        "{}",
        run.stderr
    );
}
