//! `truthscale analyze --prometheus` end to end: a real Prometheus, backfilled with promtool
//! with known dcgm-exporter (and truthscale) series, read back through its HTTP API; canned
//! HTTP servers for the error paths; and `docs/dcgm-compatibility.md` against the parser's
//! mapping.
//!
//! Every process started here lives in a guard that kills it on drop. The tests on a real
//! Prometheus belong to the external-tool tier (`require_tool_or_return!`): without
//! `TRUTHSCALE_FULL_TESTS` or `CI` they say so and are not run; with either, a missing tool
//! fails them (run `scripts/test`, which installs them).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use truthscale_e2e::{
    Prometheus, Spawned, TempDir, clean_command, free_port, require_tool, require_tool_or_return,
};

/// What one `truthscale` run left behind.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        assert_eq!(self.code, Some(0), "stderr:\n{}", self.stderr);
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

/// `truthscale ARGS` with a clean environment (plus `env`), within two minutes.
fn truthscale(args: &[&str], env: &[(&str, &str)]) -> Run {
    let tmp = TempDir::new("history-run");
    let mut cmd = clean_command();
    cmd.args(args).envs(env.iter().copied());
    let p = Spawned::start(cmd, tmp.path(), "truthscale");
    let (stdout_path, stderr_path) = (
        tmp.path().join("truthscale.stdout"),
        tmp.path().join("truthscale.stderr"),
    );
    let status = p.finish(Duration::from_secs(120));
    Run {
        code: status.code(),
        stdout: std::fs::read_to_string(stdout_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(stderr_path).unwrap_or_default(),
    }
}

fn f(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} in {v}"))
}

fn near(got: f64, want: f64, tol: f64, what: &str) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: {got} (want {want} ± {tol})"
    );
}

/// Now in Unix seconds, rounded down to a multiple of `align` seconds: the last sample's
/// time of a test's data.
fn now_on(align: i64) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (i64::try_from(now).unwrap() / align) * align
}

/// Unix seconds `t` as `--until` takes them.
fn rfc3339(t: i64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(u64::try_from(t).unwrap()))
        .to_string()
}

// ---------------------------------------------------------------------------------------
// Test data: 2 h of 15 s samples, ending just before now.

const STEP: i64 = 15;
const POINTS: i64 = 480;
/// GPU 0's series are missing for these steps (an exporter outage of 10 minutes).
const GPU0_GAP: std::ops::Range<i64> = 240..280;
const H100: &str = "NVIDIA H100 80GB HBM3";

/// Series by metric name, each `(labels, [(t seconds, value)])`.
type Families = BTreeMap<&'static str, Vec<(String, Vec<(i64, f64)>)>>;

fn add(fams: &mut Families, name: &'static str, labels: &str, points: Vec<(i64, f64)>) {
    if !points.is_empty() {
        fams.entry(name)
            .or_default()
            .push((labels.to_owned(), points));
    }
}

/// `fams` as OpenMetrics text to backfill (every family a gauge).
fn exposition(fams: &Families) -> String {
    let mut text = String::new();
    for (name, series) in fams {
        text.push_str(&format!("# TYPE {name} gauge\n"));
        for (labels, points) in series {
            for (t, v) in points {
                text.push_str(&format!("{name}{{{labels}}} {v} {t}\n"));
            }
        }
    }
    text.push_str("# EOF\n");
    text
}

/// The OpenMetrics text to backfill, and the timestamp of its last step.
fn openmetrics() -> (String, i64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let now = i64::try_from(now).unwrap();
    let end = (now / STEP) * STEP;
    let t = |i: i64| end - (POINTS - 1 - i) * STEP;
    let all = |v: &dyn Fn(i64) -> Option<f64>| -> Vec<(i64, f64)> {
        (0..POINTS)
            .filter_map(|i| v(i).map(|x| (t(i), x)))
            .collect()
    };
    let mut fams = Families::new();

    // GPU 0: an LLM decoding in prod/llm; busy flag 100 %, tensor 2 %, DRAM 60 %, no clock.
    let g0 = format!(
        "gpu=\"0\",UUID=\"GPU-0000\",modelName=\"{H100}\",Hostname=\"node-a\",pod=\"llm\",namespace=\"prod\",container=\"server\",job=\"dcgm\""
    );
    let g0v = |x: f64| move |i: i64| (!GPU0_GAP.contains(&i)).then_some(x);
    add(&mut fams, "DCGM_FI_DEV_GPU_UTIL", &g0, all(&g0v(100.0)));
    add(
        &mut fams,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        &g0,
        all(&g0v(0.02)),
    );
    add(&mut fams, "DCGM_FI_PROF_DRAM_ACTIVE", &g0, all(&g0v(0.6)));
    add(&mut fams, "DCGM_FI_PROF_SM_ACTIVE", &g0, all(&g0v(0.9)));

    // GPU 1: an hour of prefill, then an hour idle; 20 000 MiB used of 81 000.
    let g1 = format!(
        "gpu=\"1\",UUID=\"GPU-1111\",modelName=\"{H100}\",Hostname=\"node-a\",job=\"dcgm\""
    );
    let busy = |on: f64| move |i: i64| Some(if i < POINTS / 2 { on } else { 0.0 });
    add(&mut fams, "DCGM_FI_DEV_GPU_UTIL", &g1, all(&busy(100.0)));
    add(
        &mut fams,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        &g1,
        all(&busy(0.6)),
    );
    add(&mut fams, "DCGM_FI_PROF_DRAM_ACTIVE", &g1, all(&busy(0.2)));
    add(&mut fams, "DCGM_FI_PROF_SM_ACTIVE", &g1, all(&busy(0.95)));
    // Its SM clock at the H100's reference 1830 MHz (κ = 1), so ECF = τ: a window without a
    // clock would have no ECF at all.
    add(
        &mut fams,
        "DCGM_FI_DEV_SM_CLOCK",
        &g1,
        all(&|_| Some(1830.0)),
    );
    add(
        &mut fams,
        "DCGM_FI_DEV_FB_USED",
        &g1,
        all(&|_| Some(20_000.0)),
    );
    add(
        &mut fams,
        "DCGM_FI_DEV_FB_FREE",
        &g1,
        all(&|_| Some(61_000.0)),
    );

    // GPU 2: churn. Pod job-a for 20 minutes, then job-b for 20 minutes; busy flag only.
    for (pod, from, to) in [("job-a", 120, 200), ("job-b", 200, 280)] {
        let l = format!(
            "gpu=\"2\",UUID=\"GPU-2222\",modelName=\"{H100}\",pod=\"{pod}\",namespace=\"batch\",job=\"dcgm\""
        );
        add(
            &mut fams,
            "DCGM_FI_DEV_GPU_UTIL",
            &l,
            all(&|i| (from..to).contains(&i).then_some(50.0)),
        );
    }

    // gpu 0 of two more nodes, without UUIDs or pods, busy flag only: one entity each.
    for (node, busy) in [("node-b", 30.0), ("node-c", 70.0)] {
        let l = format!("gpu=\"0\",modelName=\"{H100}\",Hostname=\"{node}\",job=\"dcgm\"");
        add(&mut fams, "DCGM_FI_DEV_GPU_UTIL", &l, all(&|_| Some(busy)));
    }

    // GPU 7: only truthscale's own gauges (another job), SM clock at 0.8 × f_ref.
    let g7 = format!(
        "gpu=\"7\",uuid=\"GPU-7777\",model=\"{H100}\",pod=\"vllm\",namespace=\"serve\",node=\"node-b\",job=\"truthscale\""
    );
    for (name, v) in [
        ("truthscale_gpu_reported_utilization_ratio", 0.8),
        ("truthscale_gpu_tensor_active_ratio", 0.3),
        ("truthscale_gpu_dram_active_ratio", 0.1),
        ("truthscale_gpu_sm_active_ratio", 0.7),
        ("truthscale_gpu_sm_clock_hertz", 1_464_000_000.0),
        ("truthscale_gpu_power_watts", 500.0),
        ("truthscale_gpu_memory_used_bytes", 40e9),
        ("truthscale_gpu_memory_total_bytes", 80e9),
    ] {
        add(&mut fams, name, &g7, all(&|_| Some(v)));
    }

    let text = exposition(&fams);
    (text, end)
}

/// A Prometheus serving a TSDB backfilled with [`openmetrics`], with no scrape jobs.
struct Backfilled {
    url: String,
    prom: Prometheus,
    _dir: TempDir,
}

fn backfilled() -> Backfilled {
    backfilled_with(None)
}

/// [`backfilled`], serving https with `tls` (cert, key) when given.
fn backfilled_with(tls: Option<(&std::path::Path, &std::path::Path)>) -> Backfilled {
    let dir = TempDir::new("history-prom");
    let prom = Prometheus::backfilled(&openmetrics().0, dir.path(), tls);
    Backfilled {
        url: prom.url(),
        prom,
        _dir: dir,
    }
}

fn entity<'a>(v: &'a Value, gpu: u64, pod: Option<&str>) -> &'a Value {
    let ents = v["entities"].as_array().expect("entities");
    ents.iter()
        .find(|e| e["gpu"] == gpu && e["pod"].as_str() == pod)
        .unwrap_or_else(|| panic!("gpu {gpu} pod {pod:?} in {v:#}"))
}

#[test]
fn history_from_a_real_prometheus() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let started = Instant::now();
    let p = backfilled();
    eprintln!(
        "history: prometheus ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let base = [
        "analyze",
        "--prometheus",
        p.url.as_str(),
        "--since",
        "3h",
        "--step",
        "15s",
    ];

    // A window of exactly the first chunk's ten steps, its end off the step grid (now): the
    // reader never asks a chunk that starts past the window's end (a bad request).
    for remote in ["never", "auto"] {
        let run = truthscale(
            &[
                "analyze",
                "--prometheus",
                p.url.as_str(),
                "--since",
                "10m",
                "--step",
                "60s",
                "--remote-read",
                remote,
                "--json",
            ],
            &[],
        );
        assert_eq!(run.code, Some(0), "--remote-read {remote}: {}", run.stderr);
    }

    // Everything: the DCGM series win over truthscale's own.
    let mut args = base.to_vec();
    args.push("--json");
    let run = truthscale(&args, &[]);
    let v = run.json();
    assert!(
        run.stderr.contains("dcgm-exporter series"),
        "{}",
        run.stderr
    );
    let ents = v["entities"].as_array().unwrap();
    assert_eq!(
        ents.len(),
        6,
        "gpu 0, gpu 1, gpu 2 twice, gpu 0 of node-b and of node-c: {v:#}"
    );
    // GPUs of different nodes never merge, with or without UUIDs.
    for (node, busy) in [("node-b", 0.3), ("node-c", 0.7)] {
        let e = ents
            .iter()
            .find(|e| e["gpu"] == 0 && e["node"] == node)
            .unwrap_or_else(|| panic!("gpu 0 of {node} in {v:#}"));
        near(f(e, "/reported_utilization/mean"), busy, 1e-9, node);
        assert!(e["uuid"].is_null());
    }
    assert!(
        !run.stderr.contains("non_increasing_time"),
        "samples collided: {}",
        run.stderr
    );
    assert!(
        ents.iter().all(|e| e["gpu"] != 7),
        "truthscale series mixed in"
    );

    let g0 = entity(&v, 0, Some("llm"));
    let (r0, d0) = (
        f(g0, "/reported_utilization/mean"),
        f(g0, "/regime_fraction/memory_bound"),
    );
    eprintln!(
        "history: gpu 0: reported {r0:.4}, decode {d0:.4}, samples {}",
        g0["samples"]
    );
    assert_eq!(g0["namespace"], "prod");
    assert_eq!(g0["container"], "server");
    assert_eq!(g0["uuid"], "GPU-0000");
    assert_eq!(g0["model"], H100);
    assert_eq!(g0["node"], "node-a");
    assert_eq!(g0["fidelity"], "profiling");
    // No SM-clock series for gpu 0: its tensor activity cannot be clock-corrected, so it
    // has no effective compute fraction at all (never τ passed off as one).
    assert_eq!(g0["clock_corrected"], 0.0);
    assert!(g0["effective_compute"].is_null(), "{g0}");
    near(r0, 1.0, 0.01, "gpu 0 reported");
    near(d0, 1.0, 0.01, "gpu 0 decode");
    // 480 steps less the 20 past Prometheus' 5-minute lookback in the gap, plus the steps
    // between the last sample and now (the lookback repeats it).
    let n0 = g0["samples"].as_u64().unwrap();
    assert!((460..=470).contains(&n0), "gpu 0 samples {n0}");

    let g1 = entity(&v, 1, None);
    let (r1, e1, pf1, id1) = (
        f(g1, "/reported_utilization/mean"),
        f(g1, "/effective_compute/mean"),
        f(g1, "/regime_fraction/compute_bound"),
        f(g1, "/regime_fraction/idle"),
    );
    eprintln!(
        "history: gpu 1: reported {r1:.4}, ECF {e1:.4}, prefill {pf1:.4}, idle {id1:.4}, samples {}",
        g1["samples"]
    );
    near(r1, 0.5, 0.01, "gpu 1 reported");
    near(e1, 0.3, 0.01, "gpu 1 ECF");
    near(pf1, 0.5, 0.05, "gpu 1 prefill");
    near(id1, 0.5, 0.05, "gpu 1 idle");
    assert!(g1["namespace"].is_null());
    let mib = 1_048_576.0;
    near(
        f(g1, "/memory/total_bytes"),
        81_000.0 * mib,
        1.0,
        "gpu 1 total (used + free)",
    );
    near(
        f(g1, "/memory/peak_used_bytes"),
        20_000.0 * mib,
        1.0,
        "gpu 1 peak",
    );
    assert!(g1["memory"]["mig_fit"].is_string(), "{g1:#}");

    // Churn: two pods on GPU 2, one after the other; no tensor counter, so no ECF (never 0).
    for pod in ["job-a", "job-b"] {
        let g2 = entity(&v, 2, Some(pod));
        near(
            f(g2, "/reported_utilization/mean"),
            0.5,
            0.01,
            "gpu 2 reported",
        );
        assert!(g2["effective_compute"].is_null(), "{g2:#}");
        assert_eq!(g2["fidelity"], "busy_only");
        assert_eq!(g2["namespace"], "batch");
    }
    assert!(
        v["diagnostics"]["gap"].as_u64().unwrap_or(0) >= 1,
        "GPU 0's outage is a gap: {}",
        v["diagnostics"]
    );

    // A 1 s step: 10 800 steps in two chunks (10 000 + 800), the same means.
    let mut args = base.to_vec();
    args.truncate(base.len() - 1);
    args.extend(["1s", "--json"]);
    let run = truthscale(&args, &[]);
    let v = run.json();
    eprint!("history: {}", run.stderr);
    let g0 = entity(&v, 0, Some("llm"));
    near(
        f(g0, "/reported_utilization/mean"),
        1.0,
        0.01,
        "1 s: gpu 0 reported",
    );
    assert!(
        g0["effective_compute"].is_null(),
        "1 s: gpu 0 has no clock, so no ECF"
    );
    // GPU 0's outage: 41 steps of 15 s between its last point before and first after, of
    // which Prometheus' 5-minute lookback repeats the last value for 300 s (299 s where the
    // lookback is left-open, 3.x): 615 − 300 s is not observed, never counted as time.
    let unobserved = f(g0, "/unobserved_seconds");
    assert!(
        (315.0..=316.0).contains(&unobserved),
        "1 s: gpu 0 unobserved {unobserved}"
    );
    near(
        f(g0, "/regime_fraction/memory_bound"),
        1.0,
        0.01,
        "1 s: gpu 0 decode",
    );
    let g1 = entity(&v, 1, None);
    near(
        f(g1, "/reported_utilization/mean"),
        0.5,
        0.01,
        "1 s: gpu 1 reported",
    );
    near(
        f(g1, "/regime_fraction/compute_bound"),
        0.5,
        0.05,
        "1 s: gpu 1 prefill",
    );
    near(f(g1, "/regime_fraction/idle"), 0.5, 0.05, "1 s: gpu 1 idle");
    let n1 = g1["samples"].as_u64().unwrap();
    assert!((7186..=7400).contains(&n1), "1 s: gpu 1 samples {n1}");

    // The table names the source.
    let run = truthscale(&base, &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with(&format!("source: prometheus {}: dcgm-exporter", p.url)),
        "{}",
        run.stdout
    );
    eprint!("history: the table:\n{}", run.stdout);
    // Named with its node: two nodes' GPU 0 are told apart.
    assert!(
        run.stdout.contains("gpu 0 on node-a (prod/llm)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("a tensor counter, but no SM clock"),
        "{}",
        run.stdout
    );
    // GPU 0's outage is said, in seconds not observed.
    assert!(
        run.stdout.contains("  not observed       "),
        "{}",
        run.stdout
    );

    // A selector narrows every query.
    let mut args = base.to_vec();
    args.extend(["--selector", "{namespace=\"prod\"}", "--json"]);
    let v = truthscale(&args, &[]).json();
    let ents = v["entities"].as_array().unwrap();
    assert_eq!(ents.len(), 1, "{v:#}");
    assert_eq!(ents[0]["gpu"], 0);
    assert_eq!(ents[0]["pod"], "llm");

    // Only truthscale's own series: they are read back.
    let mut args = base.to_vec();
    args.extend(["--selector", "{job=\"truthscale\"}", "--json"]);
    let run = truthscale(&args, &[]);
    let v = run.json();
    assert!(run.stderr.contains("truthscale series"), "{}", run.stderr);
    let ents = v["entities"].as_array().unwrap();
    assert_eq!(ents.len(), 1, "{v:#}");
    let g7 = &ents[0];
    assert_eq!(
        (&g7["gpu"], &g7["pod"], &g7["namespace"], &g7["node"]),
        (
            &Value::from(7),
            &Value::from("vllm"),
            &Value::from("serve"),
            &Value::from("node-b")
        )
    );
    let (r7, e7, pf7) = (
        f(g7, "/reported_utilization/mean"),
        f(g7, "/effective_compute/mean"),
        f(g7, "/regime_fraction/compute_bound"),
    );
    eprintln!(
        "history: gpu 7 (truthscale series): reported {r7:.4}, ECF {e7:.4}, prefill {pf7:.4}"
    );
    near(r7, 0.8, 0.01, "gpu 7 reported");
    assert_eq!(g7["clock_corrected"], 1.0);
    // κ = 1464 / 1830 = 0.8: ECF = 0.3 · 0.8 (skipping κ would read 0.3, inverting it 0.375).
    near(e7, 0.24, 1e-6, "gpu 7 ECF at 0.8 × f_ref");
    near(pf7, 1.0, 0.01, "gpu 7 prefill");
    near(f(g7, "/memory/total_bytes"), 80e9, 1.0, "gpu 7 total");

    // A bad selector is refused before any query, in the user's own text: a regular
    // expression that does not compile, and a value without quotes at its column.
    let mut args = base.to_vec();
    args.extend(["--selector", "{namespace=~\"(\"}"]);
    let run = truthscale(&args, &[]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--selector '{namespace=~\"(\"}': column 13: the regular expression \"(\" does not compile"),
        "{}",
        run.stderr
    );
    let mut args = base.to_vec();
    args.extend(["--selector", "namespace=chat"]);
    let run = truthscale(&args, &[]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "--selector 'namespace=chat': column 11: the value `chat` must be in double quotes"
        ) && !run.stderr.contains("parse error"),
        "{}",
        run.stderr
    );

    // Nothing there: a clear error.
    let mut args = base.to_vec();
    args.extend(["--selector", "{namespace=\"nowhere\"}"]);
    let run = truthscale(&args, &[]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("no DCGM_FI_*"), "{}", run.stderr);

    let problems: Vec<String> = p
        .prom
        .process
        .stderr()
        .lines()
        .filter(|l| truthscale_e2e::logs_an_error(l))
        .map(str::to_owned)
        .collect();
    assert!(
        problems.is_empty(),
        "prometheus logged errors:\n{problems:#?}"
    );
    eprintln!("history: done in {:.1} s", started.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------
// Errors: unreachable, HTTP status, not JSON, truncated, auth.

/// A one-response-per-connection HTTP server on 127.0.0.1 answering every request with
/// `response` (raw bytes, headers included); the requests it got come out of the channel.
/// The thread ends with the test process.
fn canned(response: Vec<u8>) -> (String, mpsc::Receiver<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&req).into_owned());
            let _ = s.write_all(&response);
            let _ = s.flush();
        }
    });
    (format!("http://{addr}"), rx)
}

fn response(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn fails(url: &str, extra: &[&str], env: &[(&str, &str)]) -> String {
    let mut args = vec!["analyze", "--prometheus", url, "--since", "1h", "--json"];
    args.extend_from_slice(extra);
    let run = truthscale(&args, env);
    assert_eq!(
        run.code,
        Some(2),
        "stdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr.contains(url),
        "the URL {url} is named: {}",
        run.stderr
    );
    eprint!("history: {}", run.stderr);
    run.stderr
}

/// A CA, and a server certificate for 127.0.0.1 signed by it, made with openssl.
fn certificates(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let openssl = require_tool("/usr/bin/openssl", "openssl");
    let run = |args: &[&str]| {
        let out = Command::new(&openssl)
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

/// History over https from a Prometheus with a private CA: refused without `--ca-file`
/// (saying it is the certificate), read with it; and `--until` ends the window in the past.
#[test]
fn history_over_https_with_a_ca_and_until() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/openssl", "openssl");
    let certs = TempDir::new("history-tls");
    let (ca, cert, key) = certificates(certs.path());
    let p = backfilled_with(Some((&cert, &key)));
    let run = truthscale(
        &[
            "analyze",
            "--prometheus",
            &p.url,
            "--since",
            "3h",
            "--step",
            "15s",
            "--json",
        ],
        &[],
    );
    assert_ne!(run.code, Some(0), "an unknown CA was trusted");
    assert!(
        run.stderr.to_lowercase().contains("certificate") || run.stderr.contains("UnknownIssuer"),
        "{}",
        run.stderr
    );
    let ca_text = ca.display().to_string();
    let full = truthscale(
        &[
            "analyze",
            "--prometheus",
            &p.url,
            "--since",
            "3h",
            "--step",
            "15s",
            "--json",
            "--ca-file",
            &ca_text,
        ],
        &[],
    );
    let v = full.json();
    let all = entity(&v, 0, Some("llm"))["samples"].as_u64().unwrap();
    // Half an hour ending five minutes ago (clear of GPU 0's gap, 50 to 60 minutes ago).
    let past = truthscale(
        &[
            "analyze",
            "--prometheus",
            &p.url,
            "--since",
            "30m",
            "--until",
            "5m",
            "--step",
            "15s",
            "--json",
            "--ca-file",
            &ca_text,
        ],
        &[],
    );
    let v = past.json();
    let part = entity(&v, 0, Some("llm"))["samples"].as_u64().unwrap();
    assert!(
        (119..=122).contains(&part),
        "{part} samples in 30 min at 15 s (of {all})"
    );
    assert!(all > 400, "{all}");
    let bad = truthscale(
        &[
            "analyze",
            "--prometheus",
            &p.url,
            "--ca-file",
            "/nonexistent/ca.pem",
        ],
        &[],
    );
    assert!(
        bad.stderr
            .contains("--ca-file /nonexistent/ca.pem: cannot read"),
        "{}",
        bad.stderr
    );
    let future = truthscale(
        &[
            "analyze",
            "--prometheus",
            &p.url,
            "--until",
            "2099-01-01T00:00:00Z",
            "--ca-file",
            &ca_text,
        ],
        &[],
    );
    assert!(
        future.stderr.contains("--until is in the future"),
        "{}",
        future.stderr
    );
}

#[test]
fn unreachable_prometheus_is_named() {
    // A port that was just free: nothing listens there.
    let url = format!("http://127.0.0.1:{}", free_port());
    let err = fails(&url, &[], &[]);
    assert!(err.contains("connection refused"), "{err}");
}

#[test]
fn http_500_names_the_status_and_prometheus_error() {
    let (url, _) = canned(response(
        "500 Internal Server Error",
        r#"{"status":"error","errorType":"internal","error":"boom in the tsdb"}"#,
    ));
    let err = fails(&url, &[], &[]);
    assert!(err.contains("HTTP 500"), "{err}");
    assert!(err.contains("internal: boom in the tsdb"), "{err}");
}

/// A server that answers 429 with `Retry-After: 2` is waited for as it asks, not hammered
/// at 250 ms; the error after the retries names the flag that sets them.
#[test]
fn retry_after_is_followed() {
    let body =
        r#"{"status":"error","errorType":"unavailable","error":"too many outstanding requests"}"#;
    let raw = format!(
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 2\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (url, _) = canned(raw.into_bytes());
    let started = Instant::now();
    let err = fails(&url, &["--prometheus-retries", "1"], &[]);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2),
        "retried after {took:?}: {err}"
    );
    assert!(err.contains("HTTP 429"), "{err}");
    assert!(err.contains("--prometheus-retries"), "{err}");
}

#[test]
fn a_body_that_is_not_json_is_an_error() {
    let (url, _) = canned(response(
        "200 OK",
        "<html><body>Grafana login</body></html>",
    ));
    let err = fails(&url, &[], &[]);
    assert!(err.contains("not Prometheus API JSON"), "{err}");
    assert!(err.contains("Grafana login"), "{err}");
}

#[test]
fn a_truncated_body_is_an_error() {
    // Complete HTTP, truncated JSON.
    let (url, _) = canned(response(
        "200 OK",
        r#"{"status":"success","data":["DCGM_FI_DEV_GPU"#,
    ));
    let err = fails(&url, &[], &[]);
    assert!(err.contains("not Prometheus API JSON"), "{err}");
    // The connection closes before Content-Length bytes arrived.
    let (url, _) = canned(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n{\"status\":\"success\",\"data\":[".to_vec(),
    );
    let err = fails(&url, &[], &[]);
    assert!(err.contains("could not be read"), "{err}");
}

#[test]
fn status_error_and_credentials() {
    // 200 with "status":"error" (some proxies), and the bearer token is sent but never shown.
    let (url, requests) = canned(response(
        "200 OK",
        r#"{"status":"error","errorType":"bad_data","error":"unknown matcher"}"#,
    ));
    let tmp = TempDir::new("history-token");
    let token = tmp.path().join("token");
    std::fs::write(&token, "s3cr3t-token\n").unwrap();
    let err = fails(&url, &["--bearer-token-file", token.to_str().unwrap()], &[]);
    assert!(err.contains("bad_data: unknown matcher"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
    let req = requests.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        req.to_ascii_lowercase()
            .contains("authorization: bearer s3cr3t-token\r\n"),
        "{req}"
    );
    assert!(
        req.starts_with("GET /api/v1/label/__name__/values?"),
        "{req}"
    );

    // 401, with basic auth whose password comes from the environment.
    let (url, requests) = canned(response(
        "401 Unauthorized",
        r#"{"status":"error","errorType":"unauthorized","error":"no"}"#,
    ));
    let err = fails(
        &url,
        &["--basic-auth", "alice"],
        &[("TRUTHSCALE_PROMETHEUS_PASSWORD", "hunter2")],
    );
    assert!(
        err.contains("HTTP 401") && err.contains("--basic-auth"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    let req = requests.recv_timeout(Duration::from_secs(5)).unwrap();
    // base64("alice:hunter2")
    assert!(
        req.to_ascii_lowercase()
            .contains("authorization: basic ywxpy2u6ahvudgvymg==\r\n"),
        "{req}"
    );

    // --basic-auth USER without a password anywhere: refused before any request.
    let run = truthscale(
        &["analyze", "--prometheus", &url, "--basic-auth", "alice"],
        &[],
    );
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("TRUTHSCALE_PROMETHEUS_PASSWORD"),
        "{}",
        run.stderr
    );
}

#[test]
fn prometheus_flags_need_prometheus() {
    let run = truthscale(&["analyze", "capture.txt", "--since", "1h"], &[]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("--since") && run.stderr.contains("--prometheus"),
        "{}",
        run.stderr
    );
    let run = truthscale(&["analyze", "--prometheus", "prometheus:9090"], &[]);
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.contains("http://"), "{}", run.stderr);
}

// ---------------------------------------------------------------------------------------
// docs/dcgm-compatibility.md lists every name the parser maps, with the field it feeds.

#[test]
fn compatibility_doc_lists_every_mapped_name() {
    let path = truthscale_e2e::workspace().join("docs/dcgm-compatibility.md");
    let doc = std::fs::read_to_string(&path).expect("docs/dcgm-compatibility.md exists");
    let rows: Vec<String> = doc
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(str::to_ascii_lowercase)
        .collect();
    let mut missing = Vec::new();
    for (name, field) in truthscale_core::parse::dcgm_text::mapped_metrics() {
        let needle = format!("`{name}`");
        let Some(row) = rows.iter().find(|r| r.contains(&needle)) else {
            missing.push(format!("{name}: no table row"));
            continue;
        };
        let feeds = field.map_or("clock-event reasons", |f| f.name());
        if !row.contains(&format!("`{feeds}`")) && !row.contains(feeds) {
            missing.push(format!("{name}: its row does not say it feeds {feeds}"));
        }
    }
    assert!(
        missing.is_empty(),
        "{} is out of date with truthscale_core::parse::dcgm_text::mapped_metrics():\n{}",
        path.display(),
        missing.join("\n")
    );
}

/// A Prometheus that trickles its answer (a byte every 100 ms) ends at the one deadline for
/// the whole exchange, named with its flag; one that answers more than 256 MiB is refused
/// at the cap, saying how to ask for less.
#[test]
fn a_trickling_or_huge_prometheus_answer_is_a_clear_error() {
    let serve = |trickle: bool| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf);
                    let len: u64 = if trickle { 1000 } else { 300 << 20 };
                    let _ = s.write_all(
                        format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n")
                            .as_bytes(),
                    );
                    if trickle {
                        for _ in 0..len {
                            if s.write_all(b" ").is_err() {
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    } else {
                        let chunk = vec![b' '; 1 << 20];
                        for _ in 0..300 {
                            if s.write_all(&chunk).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        format!("http://{addr}")
    };
    let err = fails(&serve(true), &["--prometheus-timeout", "1s"], &[]);
    assert!(
        err.contains("no complete answer within 1s") && err.contains("--prometheus-timeout"),
        "{err}"
    );
    let err = fails(&serve(false), &[], &[]);
    assert!(
        err.contains("larger than 256 MiB") && err.contains("--selector"),
        "{err}"
    );
}

/// A Prometheus (or a proxy before it) answering with a redirect: not followed, exit 2
/// naming the answer, and the place it points to never asked.
#[test]
fn a_redirecting_prometheus_is_not_followed() {
    let (target, asked) = canned(response("200 OK", r#"{"status":"success","data":[]}"#));
    let (url, _) = canned(
        format!(
            "HTTP/1.1 302 Found\r\nLocation: {target}/api/v1/label/__name__/values\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .into_bytes(),
    );
    let err = fails(&url, &[], &[]);
    assert!(err.contains("302"), "{err}");
    assert!(asked.try_recv().is_err(), "the redirect was followed");
}

/// One workload on three GPUs in Prometheus: node-a's written in dcgm-exporter 4.8's names
/// and units (`Hostname`, %, MHz, W, mJ, MiB), node-b's in 4.9's (`hostname`, the DCGM 4.7
/// names, 0..1, Hz, J, bytes), and node-c's upgraded halfway through (4.8 then 4.10). All
/// three read the same, and node-c's is one GPU across the upgrade.
#[test]
fn every_name_generation_in_history_reads_the_same() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let end = now_on(STEP);
    let points = 240_i64;
    let t = |i: i64| end - (points - 1 - i) * STEP;
    let legacy = [
        ("DCGM_FI_DEV_GPU_UTIL", 80.0),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.3),
        ("DCGM_FI_DEV_SM_CLOCK", 1830.0),
        ("DCGM_FI_DEV_POWER_USAGE", 400.0),
        ("DCGM_FI_DEV_FB_USED", 20_000.0),
        ("DCGM_FI_DEV_FB_FREE", 61_000.0),
    ];
    let canonical = [
        ("DCGM_FI_DEV_GPU_UTIL_RATIO", 0.8),
        ("DCGM_FI_PROF_TENSOR_UTIL_RATIO", 0.3),
        ("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1.83e9),
        ("DCGM_FI_DEV_BOARD_POWER_WATTS", 400.0),
        ("DCGM_FI_DEV_FB_USED_BYTES", 20_000.0 * 1_048_576.0),
        ("DCGM_FI_DEV_FB_FREE_BYTES", 61_000.0 * 1_048_576.0),
    ];
    let mut fams = Families::new();
    let mut write = |host: &str, node: &str, names: &[(&'static str, f64)], from: i64, to: i64| {
        let labels =
            format!("gpu=\"0\",UUID=\"GPU-{node}\",modelName=\"{H100}\",{host}=\"{node}\"");
        for &(name, v) in names {
            add(
                &mut fams,
                name,
                &labels,
                (from..to).map(|i| (t(i), v)).collect(),
            );
        }
    };
    write("Hostname", "node-a", &legacy, 0, points);
    write("hostname", "node-b", &canonical, 0, points);
    write("Hostname", "node-c", &legacy, 0, points / 2);
    write("hostname", "node-c", &canonical, points / 2, points);
    // A family truthscale does not read: named, never dropped in silence.
    write(
        "hostname",
        "node-b",
        &[("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", 0.0)],
        0,
        points,
    );
    let text = exposition(&fams);
    let dir = TempDir::new("history-generations");
    let prom = Prometheus::backfilled(&text, dir.path(), None);
    let url = prom.url();
    let run = truthscale(
        &[
            "analyze",
            "--prometheus",
            &url,
            "--since",
            "1h",
            "--step",
            "15s",
            "--json",
        ],
        &[],
    );
    let v = run.json();
    let ents = v["entities"].as_array().unwrap();
    assert_eq!(
        ents.len(),
        3,
        "one GPU per node, node-c across its upgrade: {v:#}"
    );
    for node in ["node-a", "node-b", "node-c"] {
        let e = ents
            .iter()
            .find(|e| e["node"] == node)
            .unwrap_or_else(|| panic!("{node} in {v:#}"));
        near(f(e, "/reported_utilization/mean"), 0.8, 1e-9, node);
        // κ = 1830 / f_ref (1830 for the H100 SXM) = 1: ECF = τ.
        near(f(e, "/effective_compute/mean"), 0.3, 1e-9, node);
        assert_eq!(e["fidelity"], "profiling", "{node}");
    }
    assert!(
        run.stderr
            .contains("DCGM fields not read: dcgm_fi_dev_pcie_replay_total"),
        "{}",
        run.stderr
    );
}

/// `DCGM_FI_DEV_GPU_UTIL_RATIO` names DCGM 4.6's percent (id 203) and dcgm-exporter 4.9's
/// 0..1 ratio alike. At a coarse step each value read is a mean of raw samples, and a mean of
/// whole percents is no ratio: node-a's 2 % then three 0 % a minute average 0.5 (a 1-minute
/// step), which read as a ratio would be a GPU 50 % busy, 100 times its own reading. The
/// step's largest raw sample (2, a whole number above 1) decides the percent: the first
/// half hour is 0.5 %, the second 50 %, a mean of 0.2525 at the coarse step as at the raw
/// one. node-b's ratio (0.3, then 0.7: fractions, so no percent's) reads 0.5 at both.
#[test]
fn a_coarse_step_decides_percent_or_ratio_from_the_raw_samples() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    // On the minute: each 1-minute step holds four raw samples.
    let end = now_on(60);
    let points = 240_i64;
    let t = |i: i64| end - (points - 1 - i) * STEP;
    let mut fams = Families::new();
    let percent = |i: i64| match (i < points / 2, i % 4) {
        (true, 0) => 2.0,
        (true, _) => 0.0,
        (false, _) => 50.0,
    };
    let ratio = |i: i64| if i < points / 2 { 0.3 } else { 0.7 };
    for (node, value) in [
        ("node-a", &percent as &dyn Fn(i64) -> f64),
        ("node-b", &ratio),
    ] {
        let labels =
            format!("gpu=\"0\",UUID=\"GPU-{node}\",modelName=\"{H100}\",Hostname=\"{node}\"");
        for (name, v) in [
            ("DCGM_FI_DEV_GPU_UTIL_RATIO", None),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Some(0.3)),
            ("DCGM_FI_DEV_SM_CLOCK", Some(1830.0)),
        ] {
            let series = (0..points).map(|i| (t(i), v.unwrap_or_else(|| value(i))));
            add(&mut fams, name, &labels, series.collect());
        }
    }
    let text = exposition(&fams);
    let dir = TempDir::new("history-percent-or-ratio");
    let prom = Prometheus::backfilled(&text, dir.path(), None);
    let url = prom.url();
    let until = rfc3339(end);
    for (node, want) in [("node-a", 0.2525), ("node-b", 0.5)] {
        // One node a read: a family's unit is decided once for the read.
        let selector = format!("{{Hostname=\"{node}\"}}");
        for step in ["60s", "15s"] {
            let run = truthscale(
                &[
                    "analyze",
                    "--prometheus",
                    &url,
                    "--since",
                    "1h",
                    "--until",
                    &until,
                    "--step",
                    step,
                    "--scrape-interval",
                    "15s",
                    "--selector",
                    &selector,
                    "--json",
                ],
                &[],
            );
            let v = run.json();
            let e = &v["entities"][0];
            let what = format!("{node} at {step}");
            near(f(e, "/reported_utilization/mean"), want, 1e-9, &what);
            assert!(
                !run.stderr.contains("could not be told"),
                "{what}: {}",
                run.stderr
            );
        }
    }
}

/// A family whose name does not prove its unit, reading only 1 (1 % or 100 %), is decided by
/// the `# HELP` text Prometheus keeps from its scrapes (the metadata API): "in %" reads 1 as
/// 0.01, a ratio's text as 1.0. A history without that text (a backfilled one) refuses the
/// same readings as ambiguous, and says so.
#[test]
fn the_help_text_prometheus_scraped_decides_percent_or_ratio() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let labels = format!("gpu=\"0\",UUID=\"GPU-a\",modelName=\"{H100}\",Hostname=\"node-a\"");
    let body = |help: &str| {
        format!(
            "# HELP DCGM_FI_DEV_GPU_UTIL_RATIO {help}\n# TYPE DCGM_FI_DEV_GPU_UTIL_RATIO gauge\n\
             DCGM_FI_DEV_GPU_UTIL_RATIO{{{labels}}} 1\n\
             # HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n\
             # TYPE DCGM_FI_DEV_SM_CLOCK gauge\nDCGM_FI_DEV_SM_CLOCK{{{labels}}} 1830\n"
        )
    };
    let target =
        truthscale_e2e::StandIn::start(truthscale_e2e::ok(&body("GPU utilization (in %).")));
    let dir = TempDir::new("history-metadata");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n\
         \x20 - job_name: dcgm-exporter\n    static_configs:\n      - targets: ['{}']\n",
        target
            .url()
            .trim_start_matches("http://")
            .trim_end_matches("/metrics")
    );
    let prom = Prometheus::start(&config, dir.path());
    let url = prom.url();
    // Once `help`'s text was scraped (the metadata lists it), the mean reported utilization
    // a read finds, and whether it refused readings as ambiguous.
    let read_under = |help: &str| {
        target.set(truthscale_e2e::ok(&body(help)));
        let deadline = Instant::now() + Duration::from_secs(30);
        let listed = format!("\"help\":\"{help}\"");
        while !prom
            .get("/api/v1/metadata?metric=DCGM_FI_DEV_GPU_UTIL_RATIO")
            .text()
            .contains(&listed)
        {
            assert!(Instant::now() < deadline, "{help}: not in the metadata");
            std::thread::sleep(Duration::from_millis(200));
        }
        let run = truthscale(
            &[
                "analyze",
                "--prometheus",
                &url,
                "--since",
                "1m",
                "--step",
                "1s",
                "--scrape-interval",
                "1s",
                "--json",
            ],
            &[],
        );
        let v = run.json();
        let mean = v.pointer("/entities/0/reported_utilization/mean");
        assert!(
            v.pointer("/entities/0/samples")
                .and_then(Value::as_u64)
                .is_some_and(|n| n >= 5),
            "{help}: too few samples read: {v}\n{}",
            run.stderr
        );
        (
            mean.and_then(Value::as_f64),
            run.stderr.contains("could not be told"),
        )
    };
    // Ten readings of 1 first, however slowly the scrapes come.
    let deadline = Instant::now() + Duration::from_secs(60);
    while prom
        .series("count_over_time(DCGM_FI_DEV_GPU_UTIL_RATIO[1m])")
        .first()
        .is_none_or(|(_, n)| *n < 10.0)
    {
        assert!(
            Instant::now() < deadline,
            "fewer than 10 scrapes in a minute"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (mean, refused) = read_under("GPU utilization (in %).");
    near(mean.expect("a mean in %"), 0.01, 1e-12, "in %");
    assert!(!refused);
    // The same readings under a ratio's text: 100 %.
    let (mean, refused) = read_under("GPU utilization as a ratio (0-1).");
    near(mean.expect("a mean as a ratio"), 1.0, 1e-12, "ratio");
    assert!(!refused);
    // A text that names no unit decides nothing: the 1s are refused, and counted.
    assert_eq!(read_under("GPU utilization."), (None, true));
}

/// A coarse step summarises the health levels by their largest reading and the health
/// counters by their last: one 15 s reading of XID 79, of an unhealthy fabric (summary 2) or
/// of a fatal XID counted by dcgm-exporter, among 5-minute steps of healthy readings, still
/// makes that step unavailable (a mean, 79 / 20 = 3.95 or 1.05, would be healthy), while a GPU
/// whose readings are all healthy stays wholly ok.
#[test]
fn a_coarse_step_keeps_one_unhealthy_reading() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let end = now_on(STEP);
    let points = 240_i64;
    let t = |i: i64| end - (points - 1 - i) * STEP;
    // The one unhealthy reading, half way through.
    let bad = points / 2;
    let mut fams = Families::new();
    for (node, name, healthy, unhealthy) in [
        ("node-a", "DCGM_FI_DEV_XID_ERRORS", 0.0, 79.0),
        ("node-b", "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY", 1.0, 2.0),
        ("node-c", "DCGM_EXP_XID_ERRORS_COUNT", 0.0, 1.0),
        ("node-d", "DCGM_FI_DEV_XID_ERRORS", 0.0, 0.0),
    ] {
        let labels =
            format!("gpu=\"0\",UUID=\"GPU-{node}\",modelName=\"{H100}\",Hostname=\"{node}\"");
        for (metric, v) in [
            ("DCGM_FI_DEV_GPU_UTIL", 100.0),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.6),
            ("DCGM_FI_PROF_DRAM_ACTIVE", 0.4),
            ("DCGM_FI_DEV_SM_CLOCK", 1830.0),
            // A single-bit ECC total that stands still: no rise, never degraded.
            ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 5.0),
        ] {
            add(
                &mut fams,
                metric,
                &labels,
                (0..points).map(|i| (t(i), v)).collect(),
            );
        }
        let labels = if name.starts_with("DCGM_EXP") {
            format!("{labels},xid=\"79\",window_size_in_ms=\"300000\"")
        } else {
            labels
        };
        let series = (0..points)
            .map(|i| (t(i), if i == bad { unhealthy } else { healthy }))
            .collect();
        add(&mut fams, name, &labels, series);
    }
    let text = exposition(&fams);
    let dir = TempDir::new("history-health");
    let prom = Prometheus::backfilled(&text, dir.path(), None);
    let url = prom.url();
    let run = truthscale(
        &[
            "analyze",
            "--prometheus",
            &url,
            "--since",
            "1h",
            "--step",
            "5m",
            "--json",
        ],
        &[],
    );
    let v = run.json();
    let ents = v["entities"].as_array().unwrap();
    assert_eq!(ents.len(), 4, "one GPU per node: {v:#}");
    let unavailable = |node: &str| {
        let e = ents
            .iter()
            .find(|e| e["node"] == node)
            .unwrap_or_else(|| panic!("{node} in {v:#}"));
        (
            f(e, "/verdict_fraction/unavailable"),
            f(e, "/verdict_fraction/busy"),
        )
    };
    // An hour in 5-minute steps: 12 or 13 steps, of which the one holding the reading is
    // unavailable and the others busy (a window is its step, the first one judged has none).
    for node in ["node-a", "node-b", "node-c"] {
        let (u, busy) = unavailable(node);
        assert!((0.07..=0.1).contains(&u), "{node}: unavailable {u}");
        near(u + busy, 1.0, 1e-9, node);
    }
    assert_eq!(unavailable("node-d"), (0.0, 1.0));
}

/// What [`fake`] does with one request: wait, then write these bytes (an HTTP answer)./// What [`fake`] does with one request: wait, then write these bytes (an HTTP answer).
type FakeAnswer = (Duration, Vec<u8>);

/// A Prometheus stand-in on 127.0.0.1, one request per connection, each in a thread of its
/// own: `route(decoded request target)` says how long to wait and what to write. The
/// requests are counted. The threads end with the test process.
fn fake(
    route: impl Fn(&str) -> FakeAnswer + Send + Sync + 'static,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let (counter, route) = (Arc::clone(&count), Arc::new(route));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let (counter, route) = (Arc::clone(&counter), Arc::clone(&route));
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut head = Vec::new();
                let mut buf = [0u8; 8192];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let text = String::from_utf8_lossy(&head).into_owned();
                let target = text.split_whitespace().nth(1).unwrap_or_default();
                let (wait, answer) = route(&percent_decode(target));
                std::thread::sleep(wait);
                let _ = s.write_all(&answer);
                let _ = s.flush();
            });
        }
    });
    (format!("http://{addr}"), count)
}

/// `%XX` and `+` of a request target decoded.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => out.push(v),
                    Err(_) => out.extend_from_slice(&b[i..i + 3]),
                }
                i += 3;
                continue;
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The discovery answer of [`fake`]: one name of truthscale's own.
fn names_answer() -> FakeAnswer {
    (
        Duration::ZERO,
        response(
            "200 OK",
            r#"{"status":"success","data":["truthscale_gpu_memory_used_bytes"]}"#,
        ),
    )
}

/// A Prometheus that takes 3 s a query, read with `--prometheus-timeout 1s`: no whole
/// answer in time is tried again (three retries), never taken for a server's limit and
/// split: 4 query_range requests, and the error names `--prometheus-timeout` within
/// about 6 s (it took 16 min 53 s when each timed-out query was split in halves and each
/// half retried). And one `--deadline` ends the whole read: queries of 3 s each under
/// `--deadline 5s` end at 5 s, the error naming the deadline and the 3 requests sent.
#[test]
fn a_client_timeout_is_never_split_and_the_deadline_ends_the_read() {
    let slow = || {
        fake(|target| {
            if target.starts_with("/api/v1/label/") {
                return names_answer();
            }
            // A server busy with long queries still answers a light request at once.
            if target.starts_with("/api/v1/status/buildinfo") {
                let body = r#"{"status":"success","data":{"version":"3.0.0"}}"#;
                return (Duration::ZERO, response("200 OK", body));
            }
            let body = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
            (Duration::from_secs(3), response("200 OK", body))
        })
    };
    let (url, count) = slow();
    let started = Instant::now();
    let err = fails(
        &url,
        &[
            "--step",
            "60s",
            "--prometheus-timeout",
            "1s",
            "--remote-read",
            "never",
        ],
        &[],
    );
    let took = started.elapsed();
    let sent = count.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!(
        "client timeout: {sent} requests, {:.1} s",
        took.as_secs_f64()
    );
    assert!(
        err.contains("within 1s") && err.contains("raise --prometheus-timeout"),
        "{err}"
    );
    assert!(err.contains("after 3 retries"), "{err}");
    assert!(!err.contains("split"), "{err}");
    assert_eq!(
        sent,
        1 + 4 + 1,
        "discovery, then one query tried four times, and one light request (the server answers)"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");

    let (url, count) = slow();
    let started = Instant::now();
    let err = fails(
        &url,
        &[
            "--step",
            "60s",
            // Two 3 s queries: the second is cut. 5 s leaves the start and discovery 2 s
            // before the first could be cut, on a loaded machine too.
            "--deadline",
            "5s",
            "--remote-read",
            "never",
        ],
        &[],
    );
    let took = started.elapsed();
    let sent = count.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!("deadline: {sent} requests, {:.1} s", took.as_secs_f64());
    assert!(
        err.contains("the overall deadline (--deadline 5s) ran out after 3 requests"),
        "{err}"
    );
    assert!(took < Duration::from_secs(9), "{took:?}");
    assert_eq!(sent, 1 + 2, "discovery, the first chunk, the second cut");
}

/// A Prometheus answering only one series at one step (Mimir's series limit on anything
/// more) drew 27 000 requests in 10 minutes: now one query's retries and split parts come
/// out of a budget of 64 requests (`--max-requests-per-query`), and running out is an
/// error naming it, after at most 65 requests.
#[test]
fn splitting_a_refused_query_has_a_budget() {
    let uuids: Vec<String> = (0..200).map(|i| format!("\"GPU-{i}\"")).collect();
    let uuids = format!(r#"{{"status":"success","data":[{}]}}"#, uuids.join(","));
    let (url, count) = fake(move |target| {
        if target.starts_with("/api/v1/label/__name__/") {
            return names_answer();
        }
        if target.starts_with("/api/v1/label/") {
            return (Duration::ZERO, response("200 OK", &uuids));
        }
        let param = |k: &str| {
            target
                .split(['?', '&'])
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .unwrap_or_default()
                .to_owned()
        };
        let query = param("query");
        let one_series = query.contains("=~\"") && !query.contains('|');
        let ok = query.contains("uuid=\"\"") || (one_series && param("start") == param("end"));
        let body = if ok {
            response(
                "200 OK",
                r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
            )
        } else {
            response(
                "422 Unprocessable Entity",
                r#"{"status":"error","errorType":"execution","error":"the query exceeded the maximum number of series (limit: 1 series) (err-mimir-max-series-per-query)"}"#,
            )
        };
        (Duration::ZERO, body)
    });
    let err = fails(&url, &["--step", "60s", "--remote-read", "never"], &[]);
    let sent = count.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!("split budget: {sent} requests");
    assert!(
        err.contains("request budget of one query ran out (--max-requests-per-query 64)"),
        "{err}"
    );
    assert!(sent <= 1 + 64, "{sent} requests");
}

/// Several large answers in flight share one cap of 512 MiB: with 8 queries in flight one
/// answer may be at most 64 MiB, and a 100 MiB answer is refused at the cap, naming it.
#[test]
fn answers_in_flight_share_one_memory_cap() {
    let (url, _) = fake(|target| {
        if target.starts_with("/api/v1/label/") {
            return names_answer();
        }
        let len = 100u64 << 20;
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        )
        .into_bytes();
        answer.resize(answer.len() + (len as usize), b' ');
        (Duration::ZERO, answer)
    });
    let err = fails(&url, &["--max-queries-in-flight", "8"], &[]);
    assert!(
        err.contains("larger than 64 MiB") && err.contains("--max-queries-in-flight"),
        "{err}"
    );
}

/// Why GPUs are starved, from history: three H100s starved for an hour (busy flag 100 %,
/// tensor and DRAM activity 2 %), and cAdvisor's series of their holder pods, from which
/// `analyze --prometheus` reads the holder signals, joined to each GPU by its pod:
///
/// - gpu 0, held by `ml/a` (dcgm-exporter's labels honoured): pod a's container throttled in
///   6 of its 10 CFS periods a second (60 %; the kubelet's 100 ms period: at most 10 a
///   second), its pod cgroup (`container=""`) in all of them (not counted), its sidecar and
///   an idle container in none of their 10: the pod's periods 20 % throttled, its most
///   throttled container's 60 %, so `cpu_throttled` (as node mode and the recording rule
///   judge it);
/// - gpu 1, held by `ml/b` under Prometheus' renamed labels (`exported_pod`; `pod` is the
///   exporter's own): pod b's container waits on I/O 0.4 s a second (PSI some, 40 %):
///   `io_stalled`;
/// - gpu 2, held by `ml/c`, which has no cAdvisor series: no signal, so `unknown` (never a
///   zero read as "not throttled");
/// - gpu 3, time-sliced between `ml/d` and `ml/e` (dcgm-exporter writes its series once per
///   holder), built as gpu 2 is: each holder's row says `unknown`, and the report's totals
///   count the one device's starved hours once.
///
/// The ground truth is how the series are built. At a coarse step and a fine one.
#[test]
fn history_says_why_gpus_are_starved() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let end = now_on(STEP);
    let points = 240_i64;
    let t = |i: i64| end - (points - 1 - i) * STEP;
    let mut fams = Families::new();
    let gpus = [
        ("0", "pod=\"a\",namespace=\"ml\",container=\"train\""),
        (
            "1",
            "pod=\"dcgm-exporter-x\",namespace=\"gpu-operator\",exported_pod=\"b\",exported_namespace=\"ml\",exported_container=\"loader\"",
        ),
        ("2", "pod=\"c\",namespace=\"ml\",container=\"main\""),
        ("3", "pod=\"d\",namespace=\"ml\",container=\"main\""),
        ("3", "pod=\"e\",namespace=\"ml\",container=\"main\""),
    ];
    for (gpu, holder) in gpus {
        let labels = format!(
            "gpu=\"{gpu}\",UUID=\"GPU-{gpu}\",modelName=\"{H100}\",Hostname=\"node-a\",{holder}"
        );
        for (name, v) in [
            ("DCGM_FI_DEV_GPU_UTIL", 100.0),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.02),
            ("DCGM_FI_PROF_DRAM_ACTIVE", 0.02),
            ("DCGM_FI_PROF_SM_ACTIVE", 0.9),
            ("DCGM_FI_DEV_SM_CLOCK", 1830.0),
        ] {
            add(
                &mut fams,
                name,
                &labels,
                (0..points).map(|i| (t(i), v)).collect(),
            );
        }
    }
    // Counters, every 15 s: (name, labels, increase per second).
    let counters = [
        (
            "container_cpu_cfs_periods_total",
            "namespace=\"ml\",pod=\"a\",container=\"train\"",
            10.0,
        ),
        (
            "container_cpu_cfs_throttled_periods_total",
            "namespace=\"ml\",pod=\"a\",container=\"train\"",
            6.0,
        ),
        (
            "container_cpu_cfs_periods_total",
            "namespace=\"ml\",pod=\"a\",container=\"sidecar\"",
            10.0,
        ),
        (
            "container_cpu_cfs_throttled_periods_total",
            "namespace=\"ml\",pod=\"a\",container=\"sidecar\"",
            0.0,
        ),
        (
            "container_cpu_cfs_periods_total",
            "namespace=\"ml\",pod=\"a\",container=\"idle\"",
            10.0,
        ),
        (
            "container_cpu_cfs_throttled_periods_total",
            "namespace=\"ml\",pod=\"a\",container=\"idle\"",
            0.0,
        ),
        (
            "container_cpu_cfs_periods_total",
            "namespace=\"ml\",pod=\"a\",container=\"\"",
            10.0,
        ),
        (
            "container_cpu_cfs_throttled_periods_total",
            "namespace=\"ml\",pod=\"a\",container=\"\"",
            10.0,
        ),
        (
            "container_pressure_io_waiting_seconds_total",
            "namespace=\"ml\",pod=\"b\",container=\"loader\"",
            0.4,
        ),
        (
            "container_pressure_cpu_waiting_seconds_total",
            "namespace=\"ml\",pod=\"b\",container=\"loader\"",
            0.01,
        ),
    ];
    for (name, labels, per_second) in counters {
        let labels = format!("{labels},job=\"kubelet\",node=\"node-a\"");
        add(
            &mut fams,
            name,
            &labels,
            (0..points)
                .map(|i| (t(i), per_second * (i * STEP) as f64))
                .collect(),
        );
    }
    let text = exposition(&fams);
    let dir = TempDir::new("history-causes");
    let prom = Prometheus::backfilled(&text, dir.path(), None);
    let url = prom.url();
    // One fixed end for every run: `analyze` and `report` run seconds apart, and an end
    // of "now" would move their step grids apart whenever a step boundary passes between.
    let until = rfc3339(end);
    for step in ["60s", "15s"] {
        let base = [
            "analyze",
            "--prometheus",
            url.as_str(),
            "--since",
            "1h",
            "--until",
            until.as_str(),
            "--step",
            step,
            "--scrape-interval",
            "15s",
        ];
        let mut args = base.to_vec();
        args.push("--json");
        let v = truthscale(&args, &[]).json();
        let ents = v["entities"].as_array().unwrap();
        assert_eq!(ents.len(), 5, "{step}: {v:#}");
        for (gpu, cause) in [(0, "cpu_throttled"), (1, "io_stalled"), (2, "unknown")] {
            let e = ents
                .iter()
                .find(|e| e["gpu"] == gpu)
                .unwrap_or_else(|| panic!("{step}: gpu {gpu} in {v:#}"));
            assert_eq!(e["verdict"], "starved", "{step}: gpu {gpu}: {e:#}");
            let by_cause = e["starved_cause_seconds"]
                .as_object()
                .unwrap_or_else(|| panic!("{step}: gpu {gpu}: {e:#}"));
            let starved: f64 = by_cause.values().filter_map(Value::as_f64).sum();
            let of_cause = f(e, &format!("/starved_cause_seconds/{cause}"));
            eprintln!(
                "history causes, step {step}: gpu {gpu}: {of_cause:.0} s of {starved:.0} starved s {cause}"
            );
            // The whole hour but the first window, whose rate has too few samples yet.
            assert!(starved > 3000.0, "{step}: gpu {gpu}: {by_cause:?}");
            assert!(
                of_cause >= starved - 300.0,
                "{step}: gpu {gpu}: {by_cause:?}"
            );
        }
        // gpu 1's pod: the holder as exported_pod; its entity keeps dcgm-exporter's `pod`.
        let g1 = ents.iter().find(|e| e["gpu"] == 1).unwrap();
        assert_eq!(g1["pod"], "dcgm-exporter-x", "{g1:#}");

        let run = truthscale(&base, &[]);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        // The source line names the signals read (those whose cAdvisor series exist).
        assert!(
            run.stdout.lines().next().is_some_and(|l| l.ends_with(
                ", holder pods' signals from cAdvisor (holder_cpu_throttled_ratio, holder_cpu_pressure_waiting_ratio, holder_io_pressure_waiting_ratio)"
            )),
            "{step}: {}",
            run.stdout
        );
        assert!(
            run.stdout.contains("  starved by cause   cpu_throttled "),
            "{step}: {}",
            run.stdout
        );
        assert!(
            run.stdout.contains("  starved by cause   io_stalled "),
            "{step}: {}",
            run.stdout
        );
        // The report joins the same cAdvisor series and names the same causes.
        let report = [
            "report",
            "--prometheus",
            url.as_str(),
            "--since",
            "1h",
            "--until",
            until.as_str(),
            "--step",
            step,
            "--scrape-interval",
            "15s",
            "--json",
        ];
        let r = truthscale(&report, &[]).json();
        let rows = r["waits"]["starved"]
            .as_array()
            .unwrap_or_else(|| panic!("{r:#}"));
        assert_eq!(rows.len(), 5, "{step}: {:#}", r["waits"]);
        let hours = |row: &Value, cause: &str| {
            row["by_cause"]
                .as_array()
                .and_then(|b| b.iter().find(|c| c["cause"] == cause))
                .map(|c| f(c, "/hours"))
                .unwrap_or_default()
        };
        // The time-sliced GPU: both holders' rows, the device's hours once in the totals.
        let sliced: Vec<&Value> = rows
            .iter()
            .filter(|x| x["gpu"].as_str().is_some_and(|g| g.ends_with("GPU-3")))
            .collect();
        assert_eq!(sliced.len(), 2, "{step}: {:#}", r["waits"]);
        let one_device = hours(
            rows.iter()
                .find(|x| x["gpu"].as_str().is_some_and(|g| g.ends_with("GPU-2")))
                .unwrap(),
            "unknown",
        );
        assert!(one_device > 0.8, "{step}: {:#}", r["waits"]);
        for row in sliced {
            assert!((hours(row, "unknown") - one_device).abs() < 1e-9, "{row:#}");
        }
        let total = r["waits"]["starved_gpu_hours"]
            .as_array()
            .and_then(|b| b.iter().find(|c| c["cause"] == "unknown"))
            .map(|c| f(c, "/hours"));
        // Every row's hours, but the second holder's copy of GPU-3's.
        let once: f64 = rows.iter().map(|x| hours(x, "unknown")).sum::<f64>() - one_device;
        assert!(
            total.is_some_and(|t| (t - once).abs() < 1e-9),
            "{step}: GPU-3's {one_device} h once: {once} h, not {total:?}"
        );
        for (gpu, cause) in [
            ("GPU-0", "cpu_throttled"),
            ("GPU-1", "io_stalled"),
            ("GPU-2", "unknown"),
        ] {
            let row = rows
                .iter()
                .find(|x| x["gpu"].as_str().is_some_and(|g| g.ends_with(gpu)))
                .unwrap_or_else(|| panic!("{step}: {gpu} in {:#}", r["waits"]));
            assert_eq!(row["main_cause"], cause, "{step}: {row:#}");
            // Starved from its first judged window on: the whole judged hour but a window.
            let share = f(row, "/starved_share");
            assert!(share > 0.9, "{step}: {row:#}");
            let e = ents
                .iter()
                .find(|e| e["uuid"].as_str().is_some_and(|u| u.ends_with(gpu)))
                .unwrap_or_else(|| panic!("{gpu}"));
            let analyzed = f(e, &format!("/starved_cause_seconds/{cause}")) / 3600.0;
            let reported = row["by_cause"]
                .as_array()
                .and_then(|b| b.iter().find(|c| c["cause"] == cause))
                .map(|c| f(c, "/hours"))
                .unwrap_or_default();
            eprintln!(
                "report causes, step {step}: {gpu}: {reported:.3} h {cause}, analyze {analyzed:.3} h"
            );
            assert!(
                (reported - analyzed).abs() < 1e-9,
                "{step}: {gpu}: report {reported} h, analyze {analyzed} h"
            );
        }
    }
}

/// `analyze` read by remote-read gives what `query_range` gives on the same real
/// Prometheus, byte for byte: at the samples' own 15 s step, where GPU 0's last sample
/// before its gap holds for the server's five-minute lookback and the last step it holds
/// for is exactly five minutes after it (Prometheus 2 takes a sample on the bound), and at
/// a 7 s step between the samples.
#[test]
fn remote_read_gives_the_analysis_range_queries_give() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let dir = TempDir::new("history-remote");
    let (text, end) = openmetrics();
    let prom = Prometheus::backfilled(&text, dir.path(), None);
    let url = prom.url();
    let until = rfc3339(end);
    for step in ["15s", "7s"] {
        let run = |how: &str| {
            truthscale(
                &[
                    "analyze",
                    "--prometheus",
                    &url,
                    "--since",
                    "2h",
                    "--until",
                    &until,
                    "--step",
                    step,
                    "--json",
                    "--remote-read",
                    how,
                ],
                &[],
            )
        };
        let (remote, range) = (run("always"), run("never"));
        let v = range.json();
        assert_eq!(remote.code, Some(0), "stderr:\n{}", remote.stderr);
        assert!(
            remote.stdout == range.stdout,
            "step {step}: remote-read and query_range differ:\n{}\n---\n{}",
            remote.stdout,
            range.stdout
        );
        // The lookback at work: GPU 0 has samples past the start of its 40-step gap.
        let g0 = entity(&v, 0, Some("llm"))["samples"].as_u64().unwrap();
        if step == "15s" {
            assert_eq!(g0, (POINTS - 40 + 20) as u64, "{v:#}");
        }
    }
}
