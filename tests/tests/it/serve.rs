//! `truthscale serve` end to end: the real binary against a real Prometheus, promtool, a
//! replayed capture, a stale source, headless Chromium, signals and the config commands.
//!
//! Every process started here lives in a guard that kills it on drop, so a failed assertion
//! leaves nothing running. The tests that drive Prometheus, promtool or Chromium belong to
//! the external-tool tier (`require_tool_or_return!`): without `TRUTHSCALE_FULL_TESTS` or
//! `CI` they say so and are not run; with either, a missing tool fails them (run
//! `scripts/test`, which installs them).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use truthscale_e2e::{
    Prometheus, Sample, Sidecar, Spawned, TempDir, clean_command, fixture, free_port, http_get,
    require_tool, require_tool_or_return, url_encode,
};

const T4: &str = "dcgm-exporter-cncf-k8s-ai-conformance-ericsson-ccd-t4.txt";
/// Regime names, and the serving phase names where the workload is LLM serving.
const PHASES: [&str; 8] = [
    "idle",
    "compute_bound",
    "memory_bound",
    "prefill",
    "decode",
    "mixed",
    "stalled",
    "underloaded",
];

fn samples<'a>(all: &'a [Sample], name: &str) -> Vec<&'a Sample> {
    all.iter().filter(|s| s.name == name).collect()
}

fn only<'a>(all: &'a [Sample], name: &str) -> &'a Sample {
    let found = samples(all, name);
    assert_eq!(found.len(), 1, "exactly one {name}: {found:?}");
    found[0]
}

// ---------------------------------------------------------------------------------------
// 1. A real Prometheus scrapes the sidecar; the counters' algebra holds in PromQL.

/// An instant query against Prometheus' HTTP API: `(labels, value)` per result series.
fn prom_query(addr: &str, query: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let path = format!("/api/v1/query?query={}", url_encode(query));
    let r = http_get(addr, &path, &[]).unwrap_or_else(|e| panic!("query {query}: {e}"));
    assert_eq!(r.status, 200, "query {query}: {}", r.text());
    let v: Value = serde_json::from_slice(&r.body).expect("Prometheus answers JSON");
    assert_eq!(v["status"], "success", "{query}: {v}");
    assert_eq!(v["data"]["resultType"], "vector", "{query}: {v}");
    v["data"]["result"]
        .as_array()
        .expect("result array")
        .iter()
        .map(|s| {
            let labels = s["metric"]
                .as_object()
                .expect("metric object")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            let value = s["value"][1]
                .as_str()
                .and_then(|x| x.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("value in {s}"));
            (labels, value)
        })
        .collect()
}

/// `query` aggregated or keyed by `gpu`: value per GPU label.
fn per_gpu(addr: &str, query: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (labels, value) in prom_query(addr, query) {
        let gpu = labels
            .get("gpu")
            .unwrap_or_else(|| panic!("gpu label in {labels:?} for {query}"))
            .clone();
        assert!(
            out.insert(gpu.clone(), value).is_none(),
            "two series for gpu {gpu} in {query}"
        );
    }
    out
}

/// Diagnostics for a failed rate check: each phase's rate and its value 30 s ago.
fn per_phase(addr: &str, gpu: &str) -> Vec<(String, f64, f64)> {
    let sel = format!("truthscale_gpu_regime_seconds_total{{gpu=\"{gpu}\"}}");
    let rates = prom_query(addr, &format!("rate({sel}[30s])"));
    let before = prom_query(addr, &format!("{sel} offset 30s"));
    rates
        .into_iter()
        .map(|(labels, rate)| {
            let phase = labels.get("regime").cloned().unwrap_or_default();
            let then = before
                .iter()
                .find(|(l, _)| l.get("regime") == Some(&phase))
                .map_or(f64::NAN, |(_, v)| *v);
            (phase, rate, then)
        })
        .collect()
}

#[test]
fn prometheus_round_trip() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let started = Instant::now();
    let tmp = TempDir::new("prom");
    let mut sidecar = Sidecar::start(
        &["--source", "sim", "--sim-gpus", "3", "--interval", "1s"],
        &[],
        tmp.path(),
    );
    let sidecar_started = Instant::now();

    let config = format!(
        "global:\n  scrape_interval: 5s\n  scrape_timeout: 4s\n  evaluation_interval: 5s\n\
         scrape_configs:\n  - job_name: truthscale\n    honor_labels: true\n    \
         static_configs:\n      - targets: ['{}']\n",
        sidecar.addr
    );
    // Started on a port of its own, and ready (its TSDB open) when this returns.
    let mut prom = Prometheus::start(&config, tmp.path());
    let prom_addr = prom.addr.clone();
    eprintln!(
        "prometheus_round_trip: prometheus ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The first scrape lands within one scrape interval (plus jitter; generous for a loaded
    // machine).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let up = prom_query(&prom_addr, "up{job=\"truthscale\"}");
        if up.len() == 1 && up[0].1 == 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sidecar never became up in Prometheus: {up:?}\nprometheus:\n{}\nsidecar:\n{}",
            prom.process.stderr(),
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let up_at = Instant::now();
    eprintln!(
        "prometheus_round_trip: target up after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // At least 35 s of scraping, watching that neither process dies meanwhile. The query
    // also waits for a minute of sidecar uptime: rate() does not extrapolate a counter back
    // past zero, so a phase counter first entered inside the 30 s window (the simulated
    // llm-serving GPU first goes idle at ~15 s and mixed at ~25 s) pulls the sum below 1 by
    // up to ~0.1 though the exported counters add up exactly. Measured: 0.96 at 42 s of
    // uptime, 1.00 from ~57 s on.
    while up_at.elapsed() < Duration::from_secs(36)
        || sidecar_started.elapsed() < Duration::from_secs(60)
    {
        assert!(
            prom.process.try_wait().is_none(),
            "prometheus exited:\n{}",
            prom.process.stderr()
        );
        assert!(
            sidecar.process.try_wait().is_none(),
            "sidecar exited:\n{}",
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let scrapes = prom_query(&prom_addr, "count_over_time(up{job=\"truthscale\"}[1m])");
    assert_eq!(scrapes.len(), 1, "{scrapes:?}");
    assert!(scrapes[0].1 >= 7.0, "only {} scrapes in 1m", scrapes[0].1);
    let up_sum = prom_query(&prom_addr, "sum_over_time(up{job=\"truthscale\"}[1m])");
    assert_eq!(up_sum[0].1, scrapes[0].1, "every scrape succeeded");

    // The identity itself, at every scrape of the last minute: per GPU the six regime counters (every workload has them)
    // add up to the observed seconds.
    let identity = per_gpu(
        &prom_addr,
        "max_over_time((abs(sum by (gpu) (truthscale_gpu_regime_seconds_total) \
         - sum by (gpu) (truthscale_gpu_observed_seconds_total)))[1m:5s])",
    );
    eprintln!("prometheus_round_trip: max |sum(phase) - observed| per gpu = {identity:?}");
    assert_eq!(identity.len(), 3, "{identity:?}");
    for (gpu, diff) in &identity {
        assert!(*diff <= 1e-6, "gpu {gpu}: phases miss observed by {diff} s");
    }

    // Per GPU the six regime counters together advance one second per second.
    let rates = per_gpu(
        &prom_addr,
        "sum by (gpu) (rate(truthscale_gpu_regime_seconds_total[30s]))",
    );
    eprintln!("prometheus_round_trip: sum of phase rates per gpu = {rates:?}");
    assert_eq!(
        rates.keys().collect::<Vec<_>>(),
        ["0", "1", "2"],
        "{rates:?}"
    );
    // Prometheus' rate over 30 s extrapolates from samples that lag their 1 s ticks by up
    // to a tick, about 0.04 by itself: 0.1 allowed. A phase counted twice, or a window
    // lost a tick in two, is 0.5 away.
    for (gpu, rate) in &rates {
        assert!(
            (rate - 1.0).abs() <= 0.1,
            "gpu {gpu}: phase seconds advance at {rate} s/s, not 1 (per phase: {:?})",
            per_phase(&prom_addr, gpu)
        );
    }

    // The ECF averaged from the counters (over the seconds it was measured) matches the
    // simulator's ground truth, within half of what skipping κ would cost, plus the
    // counters' noise: the simulated GPUs run at 1.08 × f_ref under load, so without κ a
    // GPU at truth t would read t / 1.08, 0.074·t low (inverting κ: twice that). The
    // counters' noise (σ 0.01 a window) leaves σ 0.0013 on a minute's mean of 60 windows;
    // measured: +0.0016, −0.0013, +0.0016, and +0.0013 at t = 0.019, where half the κ
    // effect alone (0.0007) is below one σ. Three σ of the mean are allowed beside it.
    let derived = per_gpu(
        &prom_addr,
        "increase(truthscale_gpu_effective_compute_seconds_total[1m]) \
         / increase(truthscale_gpu_effective_compute_observed_seconds_total[1m])",
    );
    let truth = per_gpu(
        &prom_addr,
        "increase(truthscale_sim_truth_effective_compute_seconds_total[1m]) \
         / increase(truthscale_gpu_observed_seconds_total[1m])",
    );
    assert_eq!(derived.len(), 3, "{derived:?}");
    assert_eq!(truth.len(), 3, "{truth:?}");
    for (gpu, ecf) in &derived {
        let t = truth[gpu];
        eprintln!(
            "prometheus_round_trip: gpu {gpu}: ECF {ecf:.4} vs truth {t:.4} (diff {:+.4})",
            ecf - t
        );
        assert!(ecf.is_finite() && t.is_finite(), "gpu {gpu}: {ecf} vs {t}");
        let noise = 3.0 * 0.01 / 60_f64.sqrt();
        assert!(
            (ecf - t).abs() <= 0.5 * t * (1.0 - 1.0 / 1.08) + noise,
            "gpu {gpu}: derived ECF {ecf} vs ground truth {t}"
        );
    }

    // Every identity series says it is simulated, and honor_labels kept the sidecar's labels.
    let info = prom_query(&prom_addr, "truthscale_gpu_info");
    assert_eq!(info.len(), 3, "{info:?}");
    for (labels, value) in &info {
        assert_eq!(*value, 1.0, "{labels:?}");
        assert_eq!(
            labels.get("source").map(String::as_str),
            Some("sim"),
            "{labels:?}"
        );
        assert_eq!(
            labels.get("model").map(String::as_str),
            Some("Simulated H100 SXM"),
            "{labels:?}"
        );
    }
    let problems = prom.process.stderr();
    assert!(
        !truthscale_e2e::logs_an_error(&problems),
        "prometheus logged errors:\n{problems}"
    );
    eprintln!(
        "prometheus_round_trip: done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// 2. promtool lints the text exposition; OpenMetrics is negotiated.

#[test]
fn promtool_accepts_the_exposition() {
    let promtool = require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let tmp = TempDir::new("promtool");
    let sidecar = Sidecar::start(&["--source", "sim", "--interval", "1s"], &[], tmp.path());

    // Wait for two ticks: every GPU has observed at least two seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let r = sidecar.get("/metrics", &[]);
        assert_eq!(r.status, 200);
        let text = r.text();
        let all = truthscale_e2e::parse_exposition(&text);
        let observed = samples(&all, "truthscale_gpu_observed_seconds_total");
        if observed.len() == 4 && observed.iter().all(|s| s.value >= 2.0) {
            let ct = r.header("content-type").unwrap_or_default().to_owned();
            assert!(
                ct.starts_with("text/plain") && ct.contains("version=0.0.4"),
                "content type {ct}"
            );
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no two ticks in 20 s: {observed:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(body.as_bytes()).expect("write to promtool");
    }
    let out = child.wait_with_output().expect("promtool finishes");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool check metrics: {}\n{report}",
        out.status
    );
    let problems: Vec<&str> = report.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        problems.is_empty(),
        "promtool reports problems: {problems:#?}"
    );

    let om = sidecar.get("/metrics", &[("Accept", "application/openmetrics-text")]);
    assert_eq!(om.status, 200);
    let ct = om.header("content-type").unwrap_or_default();
    assert!(
        ct.starts_with("application/openmetrics-text"),
        "content type {ct}"
    );
    let text = om.text();
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics body ends with {:?}",
        &text[text.len().saturating_sub(40)..]
    );
    assert_eq!(text.matches("# EOF").count(), 1);
    // The same families, in the other format.
    let om_samples = truthscale_e2e::parse_exposition(&text);
    assert!(
        om_samples
            .iter()
            .any(|s| s.name == "truthscale_gpu_effective_compute_ratio"),
        "OpenMetrics body has the ECF gauge"
    );
}

/// gzip, as Prometheus asks for it: the first request is answered uncompressed (nothing was
/// compressed yet), and from the next tick on the sampler's compressed body is served; it
/// decompresses to exactly the uncompressed body of the same tick, in both formats. A
/// client that does not ask, or refuses gzip with `q=0`, gets the plain body.
#[test]
fn gzip_is_served_when_asked_and_decompresses_to_the_same_body() {
    use std::io::Read as _;
    let tmp = TempDir::new("gzip");
    let sidecar = Sidecar::start(
        &["--source", "sim", "--sim-gpus", "8", "--interval", "1s"],
        &[],
        tmp.path(),
    );
    let stamp = |body: &str| {
        truthscale_e2e::parse_exposition(body)
            .into_iter()
            .find(|s| s.name == "truthscale_snapshot_timestamp_seconds")
            .map(|s| s.value)
    };
    for accept in ["text/plain", "application/openmetrics-text"] {
        let gz = [("Accept", accept), ("Accept-Encoding", "gzip")];
        let first = sidecar.get("/metrics", &gz);
        assert_eq!(first.status, 200);
        assert!(
            first
                .header("vary")
                .is_some_and(|v| v.contains("Accept-Encoding"))
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let (compressed, plain) = loop {
            assert!(
                Instant::now() < deadline,
                "no gzipped body within 20 s ({accept})"
            );
            let r = sidecar.get("/metrics", &gz);
            if r.header("content-encoding") != Some("gzip") {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            let mut body = String::new();
            flate2::read::GzDecoder::new(r.body.as_slice())
                .read_to_string(&mut body)
                .expect("a valid gzip stream");
            let plain = sidecar.get("/metrics", &[("Accept", accept)]);
            assert_eq!(plain.header("content-encoding"), None);
            // Compare within one tick.
            if stamp(&body) == stamp(&plain.text()) {
                break (r, (body, plain));
            }
        };
        let (body, plain) = plain;
        assert_eq!(body, plain.text(), "{accept}: gzip holds the same body");
        assert_eq!(
            compressed.header("content-type"),
            plain.header("content-type")
        );
        assert!(
            compressed.body.len() * 5 < plain.body.len(),
            "{accept}: {} bytes gzipped against {}",
            compressed.body.len(),
            plain.body.len()
        );
        eprintln!(
            "gzip {accept}: {} bytes on the wire against {}",
            compressed.body.len(),
            plain.body.len()
        );
        for refused in ["gzip;q=0", "identity", "br"] {
            let r = sidecar.get(
                "/metrics",
                &[("Accept", accept), ("Accept-Encoding", refused)],
            );
            assert_eq!(r.header("content-encoding"), None, "{refused}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// 3. Serving a replayed capture exports exactly what `analyze` computes.

#[test]
fn replay_serves_what_analyze_computes() {
    let t4 = fixture(T4);
    let t4 = t4.to_str().unwrap();
    let out = clean_command()
        .args(["analyze", t4, "--json"])
        .output()
        .expect("run analyze");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("analyze --json prints JSON");
    let ents = v["entities"].as_array().expect("entities");
    assert_eq!(ents.len(), 1, "{v}");
    let e = &ents[0];
    let mean = |k: &str| {
        e[k]["mean"]
            .as_f64()
            .unwrap_or_else(|| panic!("{k}.mean in {e}"))
    };

    let tmp = TempDir::new("replay");
    let source = format!("replay:{t4}");
    let sidecar = Sidecar::start(
        &["--source", &source, "--stale-after", "1h"],
        &[],
        tmp.path(),
    );
    let all = sidecar.metrics();
    let served = |name: &str| {
        let s = only(&all, name);
        assert_eq!(s.label("gpu"), Some("0"), "{s:?}");
        assert_eq!(
            s.label("uuid"),
            e["uuid"].as_str(),
            "{s:?} has the capture's uuid"
        );
        s.value
    };
    let pairs = [
        (
            "truthscale_gpu_effective_compute_ratio",
            mean("effective_compute"),
        ),
        (
            "truthscale_gpu_reported_utilization_ratio",
            mean("reported_utilization"),
        ),
        (
            "truthscale_gpu_roofline_saturation_ratio",
            mean("roofline_saturation"),
        ),
        (
            "truthscale_gpu_inflation_gap_ratio",
            mean("inflation_gap_points") / 100.0,
        ),
    ];
    for (name, want) in pairs {
        let got = served(name);
        eprintln!("replay_serves_what_analyze_computes: {name} served {got} analyze {want}");
        assert!(
            (got - want).abs() <= 1e-9,
            "{name}: served {got}, analyze {want}"
        );
    }
    let info = only(&all, "truthscale_gpu_info");
    assert_eq!(info.label("source"), Some("replay"), "{info:?}");
    assert_eq!(info.label("model"), Some("Tesla T4"), "{info:?}");
    assert_eq!(info.label("fidelity"), e["fidelity"].as_str(), "{info:?}");
    let up = only(&all, "truthscale_source_up");
    assert_eq!(up.label("source"), Some("replay"));
    assert_eq!(
        up.value, 1.0,
        "a one-scrape capture stays up with --stale-after 1h"
    );
}

/// A `dcgmi dmon` capture replayed whose power column holds DCGM's blanks in two of its
/// four sweeps (INT32's and 2^47): each counted once as `kind="sentinel"`, never served as a
/// power, and the sweeps with 300 W served as 300 W.
#[test]
fn a_replayed_dmon_captures_sentinels_are_counted() {
    let tmp = TempDir::new("replay-dmon-sentinels");
    let capture = tmp.path().join("dmon.txt");
    let mut text = String::from("#Entity   GRACT        POWER\nID\n");
    for power in ["300.000", "2147483647", "140737488355328", "300.000"] {
        text += &format!("GPU 0     0.500        {power}\n");
    }
    std::fs::write(&capture, text).unwrap();
    let source = format!("replay:{}", capture.display());
    let sidecar = Sidecar::start(
        &[
            "--source",
            &source,
            "--interval",
            "200ms",
            "--stale-after",
            "1h",
        ],
        &[("TRUTHSCALE_SOURCE__SPACING", "300ms")],
        tmp.path(),
    );
    let sentinels = |m: &[Sample]| {
        m.iter()
            .find(|s| {
                s.name == "truthscale_source_errors_total"
                    && s.label("source") == Some("replay")
                    && s.label("kind") == Some("sentinel")
            })
            .map(|s| s.value)
    };
    sidecar.wait_for(Duration::from_secs(20), "two sentinels counted", |m| {
        sentinels(m) == Some(2.0)
    });
    // Over the replay's four sweeps (1.2 s) and after: every power served is 300 W.
    let mut power = Vec::new();
    for _ in 0..10 {
        let m = sidecar.metrics();
        assert_eq!(sentinels(&m), Some(2.0), "counted once each");
        power.extend(
            samples(&m, "truthscale_gpu_power_watts")
                .into_iter()
                .filter(|s| s.label("gpu") == Some("0"))
                .map(|s| s.value),
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !power.is_empty() && power.iter().all(|&w| w == 300.0),
        "{power:?}"
    );
}

/// A trace at a 10 s cadence, replayed with the default settings: every window counts its
/// own 10 s, the first too (it used to count the 1 s replay spacing: every counter 10× low).
#[test]
fn a_slow_trace_replays_with_its_own_ten_second_windows() {
    let tmp = TempDir::new("slow-replay");
    let trace = tmp.path().join("slow.jsonl");
    let line = |t: &str, busy: f64| {
        format!(
            "{{\"taken\":\"2026-01-01T00:00:{t}Z\",\"gpu\":0,\"model\":\"NVIDIA H100 80GB HBM3\",\"gpu_util\":{busy}}}\n"
        )
    };
    // Busy for the windows ending at 10 s and 20 s, idle for the one ending at 30 s.
    std::fs::write(
        &trace,
        line("10", 1.0) + &line("20", 1.0) + &line("30", 0.0),
    )
    .unwrap();
    let source = format!("replay:{}", trace.display());
    let sidecar = Sidecar::start(
        &["--source", &source, "--stale-after", "1h"],
        &[],
        tmp.path(),
    );
    let gauge = |m: &[Sample], name: &str| {
        m.iter()
            .find(|s| s.name == name && s.label("gpu") == Some("0"))
            .map(|s| s.value)
    };
    // The third sample is served 20 s after the first: the three windows are integrated.
    let m = sidecar.wait_for(Duration::from_secs(40), "the third window", |m| {
        gauge(m, "truthscale_gpu_observed_seconds_total") == Some(30.0)
    });
    // Truth, from the trace itself: 30 s observed, 20 of them busy, none missed.
    assert_eq!(gauge(&m, "truthscale_gpu_busy_seconds_total"), Some(20.0));
    assert_eq!(
        gauge(&m, "truthscale_gpu_busy_observed_seconds_total"),
        Some(30.0)
    );
    assert_eq!(
        gauge(&m, "truthscale_gpu_unobserved_seconds_total"),
        Some(0.0)
    );
    // A replay that does not loop says when it ends: the file, the samples, their span.
    let said = format!(
        "replay of {} ended after 3 samples (20.0 s)",
        trace.display()
    );
    let until = Instant::now() + Duration::from_secs(15);
    while !sidecar.process.stderr().contains(&said) {
        assert!(
            Instant::now() < until,
            "no {said:?} in:\n{}",
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------
// 4. A source that stops producing: the series go, the server stays.

#[test]
fn stale_source_drops_series_and_keeps_serving() {
    let tmp = TempDir::new("stale");
    let capture = tmp.path().join("dmon.txt");
    std::fs::write(
        &capture,
        "#Entity   GPUTL  TENSO  DRAMA\n\
         ID\n\
         GPU 0     100    0.5    0.2\n\
         GPU 0     100    0.5    0.2\n\
         GPU 0     100    0.5    0.2\n",
    )
    .unwrap();
    let source = format!("replay:{}", capture.display());
    let started = Instant::now();
    let mut sidecar = Sidecar::start(
        &[
            "--source",
            &source,
            "--interval",
            "200ms",
            "--stale-after",
            "2s",
        ],
        // A dmon capture has no timestamps: its rows are spaced `source.spacing`
        // apart (1s by default), not `--interval`. Space them 500ms, so the three rows
        // are gone by ~1 s and the source is stale by ~3 s: the first scrape, right after
        // the start, has 3 s to come while the data is fresh, on a loaded machine too.
        &[("TRUTHSCALE_SOURCE__SPACING", "500ms")],
        tmp.path(),
    );

    let first = sidecar.metrics();
    eprintln!(
        "stale_source_drops_series_and_keeps_serving: first scrape {:.2} s after start",
        started.elapsed().as_secs_f64()
    );
    let tensor: Vec<_> = samples(&first, "truthscale_gpu_tensor_active_ratio")
        .into_iter()
        .filter(|s| s.label("gpu") == Some("0"))
        .collect();
    assert_eq!(tensor.len(), 1, "tensor for gpu 0 while fresh: {first:?}");
    assert!((tensor[0].value - 0.5).abs() < 1e-9, "{:?}", tensor[0]);
    // τ = 0.5 with no clock and no model: it cannot be clock-corrected, so no ECF.
    assert!(samples(&first, "truthscale_gpu_effective_compute_ratio").is_empty());
    let up = only(&first, "truthscale_source_up");
    assert_eq!((up.label("source"), up.value), (Some("replay"), 1.0));

    let later = sidecar.wait_for(Duration::from_secs(30), "the source stale", |m| {
        m.iter()
            .any(|s| s.name == "truthscale_source_up" && s.value == 0.0)
            && m.iter()
                .filter(|s| s.name.starts_with("truthscale_gpu_"))
                .count()
                <= 1
    });
    // Only `truthscale_gpu_up 0` remains for the GPU that stopped.
    let gpu_series: Vec<_> = later
        .iter()
        .filter(|s| s.name.starts_with("truthscale_gpu_"))
        .collect();
    assert_eq!(
        gpu_series.len(),
        1,
        "stale GPU series still served: {gpu_series:?}"
    );
    assert_eq!(
        (
            gpu_series[0].name.as_str(),
            gpu_series[0].label("gpu"),
            gpu_series[0].value
        ),
        ("truthscale_gpu_up", Some("0"), 0.0)
    );
    let up = only(&later, "truthscale_source_up");
    assert_eq!((up.label("source"), up.value), (Some("replay"), 0.0));
    let health = sidecar.get("/healthz", &[]);
    assert_eq!(health.status, 200, "{}", health.text());
    assert!(
        sidecar.process.try_wait().is_none(),
        "the server exited: {}",
        sidecar.process.stderr()
    );
}

// ---------------------------------------------------------------------------------------
// 5. The landing page renders in a real browser.

fn chromium(tmp: &Path, name: &str, extra: &[String], url: &str) -> String {
    let chromium = require_tool("/usr/bin/chromium", "chromium");
    let profile = tmp.join(format!("profile-{name}"));
    std::fs::create_dir_all(&profile).unwrap();
    let mut cmd = Command::new(chromium);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,700",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(extra)
    .arg(url);
    let started = Instant::now();
    let mut run = Spawned::start(cmd, tmp, &format!("chromium-{name}"));
    let status = match run.wait_timeout(Duration::from_secs(60)) {
        Some(s) => s,
        None => {
            run.kill();
            panic!("chromium {name} ran over 60 s:\n{}", run.stderr());
        }
    };
    eprintln!(
        "landing_page_renders_in_chromium: chromium {name} took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        status.success(),
        "chromium {name}: {status}\n{}",
        run.stderr()
    );
    run.stdout()
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[test]
fn landing_page_renders_in_chromium() {
    require_tool_or_return!("/usr/bin/chromium", "chromium");
    let tmp = TempDir::new("chromium");
    let sidecar = Sidecar::start(&["--source", "sim", "--sim-gpus", "2"], &[], tmp.path());
    let url = format!("http://{}/", sidecar.addr);

    let png = tmp.path().join("landing.png");
    chromium(
        tmp.path(),
        "screenshot",
        &[format!("--screenshot={}", png.display())],
        &url,
    );
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "PNG signature: {:?}",
        &bytes[..bytes.len().min(8)]
    );
    assert!(
        bytes.len() >= 10 * 1024,
        "screenshot only {} bytes",
        bytes.len()
    );
    // The first chunk is IHDR: length 13, then width and height, big-endian.
    assert_eq!(be_u32(&bytes[8..12]), 13);
    assert_eq!(&bytes[12..16], b"IHDR");
    let (w, h) = (be_u32(&bytes[16..20]), be_u32(&bytes[20..24]));
    eprintln!(
        "landing_page_renders_in_chromium: screenshot {w}x{h}, {} bytes",
        bytes.len()
    );
    assert_eq!((w, h), (1200, 700));

    let dom = chromium(tmp.path(), "dom", &["--dump-dom".to_owned()], &url);
    assert!(
        dom.contains("SIMULATED"),
        "DOM lacks the SIMULATED badge:\n{dom}"
    );
    assert!(
        dom.contains("Simulated H100 SXM"),
        "DOM lacks the model:\n{dom}"
    );
    assert!(
        PHASES.iter().any(|p| dom.contains(&format!(">{p}<"))),
        "DOM shows no phase:\n{dom}"
    );
    assert!(
        dom.contains("href=\"/metrics\""),
        "DOM has no link to /metrics:\n{dom}"
    );
}

// ---------------------------------------------------------------------------------------
// 6. SIGTERM: a clean, prompt exit.

#[test]
fn sigterm_shuts_down_gracefully() {
    shuts_down_gracefully_on("TERM");
}

/// SIGHUP (a terminal closed, or a supervisor's reload) shuts down as SIGTERM does, the
/// last export sent: its default action ended the process at once, with no log line.
#[test]
fn sighup_shuts_down_gracefully_too() {
    shuts_down_gracefully_on("HUP");
}

fn shuts_down_gracefully_on(signal: &str) {
    let tmp = TempDir::new(&format!("sig{signal}"));
    let mut sidecar = Sidecar::start(&["--source", "sim", "--sim-gpus", "1"], &[], tmp.path());
    let sent = Instant::now();
    sidecar.process.signal(signal);
    let status = sidecar.process.wait_timeout(Duration::from_secs(5));
    let took = sent.elapsed();
    let status = status.unwrap_or_else(|| {
        panic!(
            "still running 5 s after SIG{signal}:\n{}",
            sidecar.process.stderr()
        )
    });
    eprintln!(
        "SIG{signal}: exited {status} after {:.0} ms",
        took.as_secs_f64() * 1e3
    );
    assert_eq!(
        status.code(),
        Some(0),
        "exit after SIG{signal}:\n{}",
        sidecar.process.stderr()
    );
    assert!(
        sidecar
            .process
            .stderr()
            .contains(&format!("Received SIG{signal}")),
        "{}",
        sidecar.process.stderr()
    );
    // The port is released.
    assert!(
        http_get(&sidecar.addr, "/healthz", &[]).is_err(),
        "still answering after exit"
    );
}

// ---------------------------------------------------------------------------------------
// 7. `config defaults`, `config check`, and validation at startup.

#[test]
fn config_commands() {
    let tmp = TempDir::new("config");
    let defaults = clean_command()
        .args(["config", "defaults"])
        .output()
        .expect("run config defaults");
    assert!(defaults.status.success(), "{defaults:?}");
    let toml = String::from_utf8(defaults.stdout).expect("UTF-8");
    assert!(
        toml.lines()
            .any(|l| l == "listen_address = \"0.0.0.0:9488\""),
        "{toml}"
    );

    let good = tmp.path().join("defaults.toml");
    std::fs::write(&good, &toml).unwrap();
    // The defaults' source is auto (NVML where a driver is present, checked by
    // nvml::node_mode_without_a_source_reads_nvml_or_names_the_choices); a
    // kind from the environment replaces it, so this check does not depend on the machine.
    let out = clean_command()
        .args(["config", "check"])
        .arg(&good)
        .env("TRUTHSCALE_SOURCE__KIND", "sim")
        .output()
        .expect("run config check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim_end(), format!("{}: ok", good.display()));

    let bad = tmp.path().join("typo.toml");
    std::fs::write(&bad, "[source]\nintervl = \"1s\"\n").unwrap();
    let out = clean_command()
        .args(["config", "check"])
        .arg(&bad)
        .output()
        .expect("run config check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a typo passed: {out:?}");
    assert!(stderr.contains(&bad.display().to_string()), "{stderr}");
    assert!(stderr.contains("intervl"), "{stderr}");

    // Too short an interval: refused at startup, naming the setting.
    let mut cmd = clean_command();
    cmd.args([
        "serve",
        "--interval",
        "50ms",
        "--listen",
        &format!("127.0.0.1:{}", free_port()),
    ]);
    let run = Spawned::start(cmd, tmp.path(), "serve-50ms");
    let stderr_path = tmp.path().join("serve-50ms.stderr");
    let status = run.finish(Duration::from_secs(10));
    let stderr = std::fs::read_to_string(stderr_path).unwrap_or_default();
    assert!(!status.success(), "serve --interval 50ms started: {stderr}");
    assert!(stderr.contains("source.interval"), "{stderr}");
}

/// A setting past its range aborted `serve` (exit 134) after passing `config check`:
/// `http.max_concurrent_requests` above the semaphore's limit, here through the environment
/// as `1e19` (which the conversion rounded to the largest integer). Both now run the same
/// check and stop with status 2 and the same message, naming the variable, the key and the
/// range.
#[test]
fn a_setting_past_its_range_stops_check_and_serve_alike() {
    let tmp = TempDir::new("config-range");
    let file = tmp.path().join("empty.toml");
    std::fs::write(&file, "").unwrap();
    let expected = "truthscale: error: environment (TRUTHSCALE_HTTP__MAX_CONCURRENT_REQUESTS): \
                    http.max_concurrent_requests: \"1e19\" is not a whole number; use one in \
                    1..=65536\n";
    let out = clean_command()
        .args(["config", "check"])
        .arg(&file)
        .env("TRUTHSCALE_SOURCE__KIND", "sim")
        .env("TRUTHSCALE_HTTP__MAX_CONCURRENT_REQUESTS", "1e19")
        .output()
        .expect("run config check");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), expected);

    let mut cmd = clean_command();
    cmd.args([
        "serve",
        "--source",
        "sim",
        "--listen",
        &format!("127.0.0.1:{}", free_port()),
    ])
    .env("TRUTHSCALE_HTTP__MAX_CONCURRENT_REQUESTS", "1e19");
    let run = Spawned::start(cmd, tmp.path(), "serve-1e19");
    let status = run.finish(Duration::from_secs(10));
    let stderr = std::fs::read_to_string(tmp.path().join("serve-1e19.stderr")).unwrap_or_default();
    assert_eq!(status.code(), Some(2), "{status:?}: {stderr}");
    assert!(stderr.ends_with(expected), "{stderr}");
}

/// A FIFO as the TLS certificate blocked the start with no log line. It is refused at once,
/// by `config check` (which reads the web config as `serve` does) and by `serve`, with
/// status 2 and a message naming the web config, the key and the file.
#[test]
fn a_fifo_as_the_tls_certificate_is_refused_at_start() {
    let mkfifo = require_tool_or_return!("/usr/bin/mkfifo", "coreutils");
    let tmp = TempDir::new("tls-fifo");
    let fifo = tmp.path().join("cert.fifo");
    let made = Command::new(mkfifo)
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    std::fs::write(tmp.path().join("server.key"), "").unwrap();
    let web = tmp.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: server.key\n",
            fifo.display()
        ),
    )
    .unwrap();
    let config = tmp.path().join("c.toml");
    std::fs::write(
        &config,
        format!("web_config_file = \"{}\"\n", web.display()),
    )
    .unwrap();
    let expected = format!(
        "invalid web config: {}: tls_server_config.cert_file: {}: is a FIFO (named pipe), not \
         a regular file: point the setting at a regular file",
        web.display(),
        fifo.display()
    );
    let started = Instant::now();
    let out = clean_command()
        .args(["config", "check"])
        .arg(&config)
        .env("TRUTHSCALE_SOURCE__KIND", "sim")
        .output()
        .expect("run config check");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("truthscale: error: {expected}\n")
    );

    let mut cmd = clean_command();
    cmd.args(["serve", "--source", "sim", "--web-config"])
        .arg(&web)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())]);
    let run = Spawned::start(cmd, tmp.path(), "serve-fifo");
    let status = run.finish(Duration::from_secs(10));
    let stderr = std::fs::read_to_string(tmp.path().join("serve-fifo.stderr")).unwrap_or_default();
    assert_eq!(status.code(), Some(2), "{status:?}: {stderr}");
    assert!(
        stderr.ends_with(&format!("truthscale: error: {expected}\n")),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
