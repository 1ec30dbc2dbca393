//! Fault injection end to end: each fault has a bounded effect. Sampling and `/metrics` keep
//! their cadence, errors are counted by kind, memory stays bounded, and nothing fabricated is
//! exported. (The NVML faults, a GPU lost mid-tick and back, are in `nvml.rs`; a hung
//! dcgm-exporter in `dcgm_source.rs`; an OTLP collector that is down or hangs in `otlp.rs`.)

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use truthscale_e2e::value;
use truthscale_e2e::{Reply, Sidecar, Silent, StandIn, TempDir, ok, require_tool_or_return};

const WAIT: Duration = Duration::from_secs(20);

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The peak resident memory of process `pid` so far, KiB (`VmHWM`).
pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// A `/proc/PID/status` figure in KiB; a process whose status cannot be read fails the test.
fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// The snapshot's timestamp advances while the fault lasts: sampling kept its cadence (ten
/// 200 ms ticks in 2 s; at least five asked, so that a loaded machine's late tick or slow
/// `/metrics` is not taken for a stall, while a read that blocked would be).
fn assert_cadence(s: &Sidecar) {
    let ts = |s: &Sidecar| value(&s.metrics(), "truthscale_snapshot_timestamp_seconds", &[]);
    let before = ts(s).expect("snapshot timestamp");
    std::thread::sleep(Duration::from_millis(2_000));
    let after = ts(s).expect("snapshot timestamp");
    assert!(
        after >= before + 1.0,
        "sampling stalled: {before} → {after}"
    );
}

const GOOD: &str = "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-f1\",device=\"nvidia0\",modelName=\"Tesla T4\",Hostname=\"h\"} 37\n\
DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",UUID=\"GPU-f1\",device=\"nvidia0\",modelName=\"Tesla T4\",Hostname=\"h\"} 0.25\n";

/// 10 MB of garbage, a body over the 32 MiB limit, and an exporter flapping between valid and
/// broken: counted as `parse` and `too_large`, memory bounded, and the only GPU values ever
/// exported are the valid scrape's.
#[test]
fn a_broken_dcgm_exporter_has_a_bounded_effect() {
    let server = StandIn::start(ok(GOOD));
    let dir = TempDir::new("faults-dcgm");
    let sidecar = Sidecar::start(
        &[
            "--source",
            &format!("dcgm-exporter:{}", server.url()),
            "--interval",
            "200ms",
        ],
        &[],
        dir.path(),
    );
    sidecar.wait_for(WAIT, "the valid scrape", |m| {
        value(m, "truthscale_gpu_reported_utilization_ratio", &[]) == Some(0.37)
    });
    let base_rss = rss_kib(sidecar.process.id());

    // 10 MB of garbage.
    let garbage: Vec<u8> = (0..10_000_000u32)
        .map(|i| b"x{=\"} \n#\xff"[(i % 9) as usize])
        .collect();
    server.set(Reply {
        status: "200 OK",
        body: garbage,
        claimed_len: None,
    });
    let m = sidecar.wait_for(WAIT, "parse errors", |m| {
        value(m, "truthscale_source_errors_total", &[("kind", "parse")]).unwrap_or(0.0) >= 3.0
    });
    assert_cadence(&sidecar);
    assert!(
        value(&m, "truthscale_gpu_reported_utilization_ratio", &[]).is_none_or(|v| v == 0.37),
        "a value that was never scraped"
    );
    // Over the limit: not read, and said so.
    server.set(Reply {
        status: "200 OK",
        body: vec![b'#'; 40 << 20],
        claimed_len: None,
    });
    sidecar.wait_for(WAIT, "too_large", |m| {
        value(
            m,
            "truthscale_source_errors_total",
            &[("kind", "too_large")],
        )
        .unwrap_or(0.0)
            >= 1.0
    });
    assert_cadence(&sidecar);
    let rss = rss_kib(sidecar.process.id());
    assert!(
        rss < base_rss + 120 * 1024,
        "RSS {rss} KiB grew by more than 120 MiB over {base_rss} KiB"
    );
    // Flapping between valid and broken: every exported value is the valid one.
    let t = Instant::now();
    let mut seen = 0;
    while t.elapsed() < Duration::from_secs(4) {
        let broken = (t.elapsed().as_millis() / 300) % 2 == 1;
        server.set(if broken {
            ok("<html>not metrics</html>\n")
        } else {
            ok(GOOD)
        });
        if let Some(v) = value(
            &sidecar.metrics(),
            "truthscale_gpu_reported_utilization_ratio",
            &[],
        ) {
            assert_eq!(v, 0.37, "a fabricated value while flapping");
            seen += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(seen > 0, "the valid scrapes were served while flapping");
    assert!(
        !sidecar.process.stderr().contains("panicked"),
        "{}",
        sidecar.process.stderr()
    );
}

/// The `Content-Length` of a response head.
fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no content-length in {head}"))
}

/// Reads one HTTP/1.1 response (head and a `Content-Length` body) from `s`, leaving the
/// connection open.
fn read_response(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let len = content_length(&head);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    head + &String::from_utf8_lossy(&body)
}

/// SIGTERM while scrapes are in flight: a response being sent is sent in full, and the
/// process exits 0 within the grace period (a half-sent request head holds the exit at most
/// that long, 3 s, where its own head timeout is 10 s), saying that it waits.
///
/// Both connections are first shown to be accepted and served: a connection still in the
/// listen backlog, or accepted with its request unread, is closed at shutdown like any
/// server's, so a request is "in flight" only once its answer has begun.
#[test]
fn sigterm_during_a_scrape_answers_it_and_exits() {
    let dir = TempDir::new("faults-sigterm-scrape");
    let mut sidecar = Sidecar::start(&["--source", "sim", "--sim-gpus", "8"], &[], dir.path());
    let timeout = Some(Duration::from_secs(15));
    let mut half = TcpStream::connect(&sidecar.addr).unwrap();
    half.set_read_timeout(timeout).unwrap();
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(read_response(&mut half).starts_with("HTTP/1.1 200"));
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut full = TcpStream::connect(&sidecar.addr).unwrap();
    full.set_read_timeout(timeout).unwrap();
    full.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    // The answer has begun: its first byte is here.
    let mut first = [0u8; 1];
    full.read_exact(&mut first).unwrap();
    let signalled = std::time::Instant::now();
    sidecar.process.signal("TERM");
    let mut body = first.to_vec();
    full.read_to_end(&mut body).unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:.200}");
    let (head, payload) = text.split_once("\r\n\r\n").unwrap();
    assert_eq!(payload.len(), content_length(head), "the whole body");
    assert!(payload.contains("truthscale_gpu_info{"), "the whole body");
    let status = sidecar
        .process
        .wait_timeout(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("still running after SIGTERM:\n{}", sidecar.process.stderr()));
    assert_eq!(status.code(), Some(0), "{}", sidecar.process.stderr());
    // The half-sent request is not waited on past the 3 s grace period (its head timeout is
    // 10 s), and the wait is said.
    let took = signalled.elapsed();
    assert!(took < Duration::from_secs(8), "exit {took:?} after SIGTERM");
    let err = sidecar.process.stderr();
    assert!(
        err.contains("Waiting for open connections to finish their requests"),
        "{err}"
    );
    drop(half);
}

/// SIGTERM while an OTLP export hangs on a collector that never answers: the process still
/// exits 0, bounded by the export timeout.
#[test]
fn sigterm_during_an_otlp_export_exits_in_bounded_time() {
    let collector = Silent::start();
    let dir = TempDir::new("faults-sigterm-otlp");
    let mut sidecar = Sidecar::start(
        &[
            "--source",
            "sim:tiny-kernel",
            "--sim-gpus",
            "1",
            "--interval",
            "200ms",
            "--otlp-endpoint",
            &format!("http://{}", collector.addr()),
        ],
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
        ],
        dir.path(),
    );
    // An export is in flight (the collector holds it).
    std::thread::sleep(Duration::from_millis(800));
    let sent = Instant::now();
    sidecar.process.signal("TERM");
    let status = sidecar
        .process
        .wait_timeout(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("still running after SIGTERM:\n{}", sidecar.process.stderr()));
    let took = sent.elapsed();
    eprintln!(
        "sigterm_during_an_otlp_export: exited {status} after {:.1} s",
        took.as_secs_f64()
    );
    assert_eq!(status.code(), Some(0), "{}", sidecar.process.stderr());
    assert!(took < Duration::from_secs(12), "took {took:?}");
}

/// A web config that sets neither TLS nor users starts plain HTTP, and says so.
#[test]
fn an_empty_web_config_warns() {
    let dir = TempDir::new("faults-empty-web");
    let web = dir.path().join("web.yml");
    std::fs::write(&web, "# nothing yet\n").unwrap();
    let sidecar = Sidecar::start(
        &[
            "--source",
            "sim",
            "--sim-gpus",
            "1",
            "--web-config",
            web.to_str().unwrap(),
        ],
        &[],
        dir.path(),
    );
    assert!(
        sidecar
            .process
            .stderr()
            .contains("sets neither tls_server_config nor basic_auth_users"),
        "{}",
        sidecar.process.stderr()
    );
}

/// A replay whose file stops mid-capture (a FIFO whose writer went quiet): the read blocks
/// the tick. Once the last data is older than the stale limit it is served as down
/// (`truthscale_source_up 0`, only `truthscale_gpu_up 0`) and `/readyz` answers 503; SIGTERM
/// still ends the process within a few seconds, whatever the read is doing.
#[test]
fn a_hung_replay_read_is_served_stale_and_sigterm_still_exits() {
    let mkfifo = require_tool_or_return!("/usr/bin/mkfifo", "coreutils");
    let dir = TempDir::new("faults-hung-replay");
    let fifo = dir.path().join("capture.fifo");
    let made = std::process::Command::new(mkfifo)
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    // Held open for reading and writing: opening it does not block, and the reader never
    // sees the end of the file.
    let mut writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .expect("open the FIFO");
    // Three samples, then the header again (as dmon repeats it) so that the first 64 lines,
    // which tell the format, are there.
    let mut start =
        "#Entity   GPUTL  TENSO  DRAMA\nID\nGPU 0     100    0.5    0.2\nGPU 0     100    0.4    0.2\nGPU 0     100    0.3    0.2\n"
            .to_string();
    start.push_str(&"#Entity   GPUTL  TENSO  DRAMA\nID\n".repeat(40));
    writer
        .write_all(start.as_bytes())
        .expect("write the capture's start");
    let mut sidecar = Sidecar::start(
        &[
            "--source",
            &format!("replay:{}", fifo.display()),
            "--interval",
            "200ms",
        ],
        &[("TRUTHSCALE_SOURCE__SPACING", "200ms")],
        dir.path(),
    );
    let live = sidecar.wait_for(WAIT, "the replayed GPU", |m| {
        value(m, "truthscale_gpu_up", &[("gpu", "0")]) == Some(1.0)
    });
    assert_eq!(
        value(&live, "truthscale_source_up", &[("source", "replay")]),
        Some(1.0)
    );
    let gpu_series = |m: &[truthscale_e2e::Sample]| {
        m.iter()
            .filter(|s| s.name != "truthscale_gpu_up" && s.labels.iter().any(|(k, _)| k == "gpu"))
            .count()
    };
    assert!(gpu_series(&live) > 5, "{live:#?}");
    // The capture's three lines last 600 ms; then the read blocks and, past the stale limit
    // (600 ms) plus an interval, the data is served stale.
    let stale = sidecar.wait_for(WAIT, "the stale snapshot", |m| {
        value(m, "truthscale_source_up", &[("source", "replay")]) == Some(0.0)
    });
    assert_eq!(
        value(&stale, "truthscale_gpu_up", &[("gpu", "0")]),
        Some(0.0)
    );
    assert_eq!(
        gpu_series(&stale),
        0,
        "a stale GPU writes only truthscale_gpu_up 0: {stale:#?}"
    );
    let ready = sidecar.get("/readyz", &[]);
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert!(ready.text().contains("stale"), "{}", ready.text());
    assert!(
        sidecar.process.stderr().contains("past the stale limit"),
        "the stall is logged:\n{}",
        sidecar.process.stderr()
    );
    let sent = Instant::now();
    sidecar.process.signal("TERM");
    let status = sidecar
        .process
        .wait_timeout(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("still running after SIGTERM:\n{}", sidecar.process.stderr()));
    let took = sent.elapsed();
    eprintln!(
        "a_hung_replay_read: exited {status} {:.1} s after SIGTERM",
        took.as_secs_f64()
    );
    assert_eq!(status.code(), Some(0), "{}", sidecar.process.stderr());
    assert!(took < Duration::from_secs(8), "took {took:?}");
    drop(writer);
}

/// A dcgm-exporter answer just under the 32 MiB body cap that lists 474 162 GPUs, one
/// line each: the reader keeps the first 1 024 and counts the rest as `over_limit`, and reads the
/// answer line by line as it arrives, so the peak memory stays under the sidecar
/// manifests' 64 MiB limit (every entity tracked took 2.5 GB; the answer held whole, 68–75 MB
/// at 200 000 GPUs).
#[test]
fn a_dcgm_exporter_with_200000_gpus_keeps_the_first_1024() {
    // As many one-line GPUs as fit under the cap.
    let mut body = String::with_capacity(32 << 20);
    let mut gpus = 0usize;
    loop {
        let line = format!(
            "DCGM_FI_DEV_GPU_UTIL{{gpu=\"{gpus}\",UUID=\"GPU-{gpus:08}\",Hostname=\"h\"}} 50\n"
        );
        if body.len() + line.len() >= 32 << 20 {
            break;
        }
        body.push_str(&line);
        gpus += 1;
    }
    assert!(gpus > 470_000, "{gpus}");
    let dcgm = StandIn::start(ok(&body));
    let dir = TempDir::new("faults-many-gpus");
    let sidecar = Sidecar::start(
        &[
            "--source",
            &format!("dcgm-exporter:{}", dcgm.url()),
            "--interval",
            "500ms",
        ],
        // A debug build parses a 32 MiB answer in seconds, as it arrives.
        &[
            ("TRUTHSCALE_SOURCE__SCRAPE_TIMEOUT", "60s"),
            ("TRUTHSCALE_SOURCE__STALE_AFTER", "120s"),
        ],
        dir.path(),
    );
    let m = sidecar.wait_for(3 * WAIT, "over_limit counted twice", |m| {
        value(
            m,
            "truthscale_source_errors_total",
            &[("source", "dcgm_exporter"), ("kind", "over_limit")],
        )
        .is_some_and(|v| v >= 2.0)
    });
    let up = m.iter().filter(|s| s.name == "truthscale_gpu_up").count();
    assert_eq!(up, 1024, "the first 1 024 GPUs are kept");
    assert!(body.len() < 32 << 20, "under the cap: {} bytes", body.len());
    let peak = peak_rss_kib(sidecar.process.id());
    eprintln!("a_dcgm_exporter_with_200000_gpus: peak RSS {peak} KiB");
    assert!(
        peak < 64 * 1024,
        "peak RSS {peak} KiB, over the sidecar's 64 MiB limit"
    );
    let left = format!(
        "left out {} lines of entities past the cap of 1024 entities",
        gpus - 1024
    );
    assert!(
        sidecar.process.stderr().contains(&left),
        "{}",
        sidecar.process.stderr()
    );
}

/// A web config naming a certificate that is not there: the error names the file, the key
/// and the cause, once.
#[test]
fn a_web_config_error_says_its_cause_once() {
    let dir = TempDir::new("faults-web-cause");
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
    )
    .unwrap();
    let out = truthscale_e2e::run(&[
        "serve",
        "--source",
        "null",
        "--listen",
        "127.0.0.1:0",
        "--web-config",
        web.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tls_server_config.cert_file") && stderr.contains("missing.crt"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}
