//! `truthscale serve --source dcgm-exporter:URL` against a local stand-in for dcgm-exporter
//! that serves the real captures in `truthscale-core/tests/fixtures/dcgm/`.

use std::sync::atomic::Ordering;
use std::time::Duration;
use truthscale_e2e::value;
use truthscale_e2e::{Reply, Sample, Sidecar, StandIn, TempDir, fixture, ok};

fn fixture_text(name: &str) -> String {
    // The issue-68 capture quotes one line with a markdown marker; strip it as its note says.
    std::fs::read_to_string(fixture(name))
        .unwrap()
        .lines()
        .map(|l| l.strip_prefix("> ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// How long a condition may take to show on `/metrics`.
const WAIT: Duration = Duration::from_secs(15);

/// A metric, the `gpu` label of the series, and the value it must have.
type Check = (&'static str, &'static str, f64);

#[test]
fn serves_every_fixture_with_its_identities() {
    // (fixture, expected GPU entities when every GPU is kept, a checked value)
    let cases: &[(&str, usize, Option<Check>)] = &[
        (
            "dcgm-exporter-cncf-k8s-ai-conformance-ericsson-ccd-t4.txt",
            1,
            Some(("truthscale_gpu_tensor_active_ratio", "0", 0.005822)),
        ),
        (
            "dcgm-exporter-cncf-k8s-ai-conformance-upcloud-l40s.txt",
            1,
            Some(("truthscale_gpu_reported_utilization_ratio", "0", 0.0)),
        ),
        (
            "dcgm-exporter-linode-lke-ai-conformance-README.txt",
            1,
            Some(("truthscale_gpu_reported_utilization_ratio", "0", 0.0)),
        ),
        (
            "dcgm-exporter-NVIDIA-DCGM-issue191.txt",
            2,
            Some(("truthscale_gpu_tensor_active_ratio", "1", 0.0)),
        ),
        ("dcgm-exporter-NVIDIA-DCGM-issue226.txt", 3, None),
        (
            "dcgm-exporter-NVIDIA-dcgm-exporter-issue188.txt",
            1,
            Some(("truthscale_gpu_reported_utilization_ratio", "0", 0.0)),
        ),
        (
            "dcgm-exporter-NVIDIA-gpu-monitoring-tools-issue138.txt",
            2,
            Some(("truthscale_gpu_reported_utilization_ratio", "0", 0.44)),
        ),
        ("dcgm-exporter-NVIDIA-dcgm-exporter-issue68.txt", 2, None),
    ];
    let dir = TempDir::new("dcgm-fixtures");
    for (name, entities, check) in cases {
        let server = StandIn::start(ok(&fixture_text(name)));
        let src = format!("dcgm-exporter:{}", server.url());
        let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
        let m = sidecar.wait_for(WAIT, name, |m| {
            m.iter().filter(|s| s.name == "truthscale_gpu_info").count() == *entities
        });
        for s in m.iter().filter(|s| s.name == "truthscale_gpu_info") {
            assert_eq!(s.label("source"), Some("dcgm_exporter"), "{name}");
            assert!(
                s.label("uuid").is_some_and(|u| u.starts_with("GPU-")),
                "{name}: {s:?}"
            );
        }
        if let Some((metric, gpu, want)) = check {
            let got =
                value(&m, metric, &[("gpu", gpu)]).unwrap_or_else(|| panic!("{name}: no {metric}"));
            assert!(
                (got - want).abs() < 1e-9,
                "{name}: {metric} {got} != {want}"
            );
        }
        assert_eq!(
            value(&m, "truthscale_source_up", &[("source", "dcgm_exporter")]),
            Some(1.0),
            "{name}"
        );
        assert!(server.hits.load(Ordering::SeqCst) >= 1);
    }
}

#[test]
fn keeps_only_this_pods_gpus_with_pod_labels() {
    // Issue 191: GPU 0 attributed to a Triton pod, GPU 1 unattributed.
    let server = StandIn::start(ok(&fixture_text("dcgm-exporter-NVIDIA-DCGM-issue191.txt")));
    let src = format!("dcgm-exporter:{}", server.url());
    let dir = TempDir::new("dcgm-pod");
    let env = [
        ("POD_NAME", "triton-84d57987c9-kks4k"),
        ("POD_NAMESPACE", "default"),
    ];
    let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &env, dir.path());
    let m = sidecar.wait_for(WAIT, "gpu info", |m| {
        m.iter().any(|s| s.name == "truthscale_gpu_info")
    });
    let info: Vec<&Sample> = m
        .iter()
        .filter(|s| s.name == "truthscale_gpu_info")
        .collect();
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(info[0].label("gpu"), Some("0"));
    assert_eq!(
        info[0].label("uuid"),
        Some("GPU-84412445-5790-0b3f-f714-da8aa3b2c0b0")
    );
    assert_eq!(info[0].label("pod"), Some("triton-84d57987c9-kks4k"));
    assert_eq!(info[0].label("namespace"), Some("default"));
    assert_eq!(info[0].label("container"), Some("triton-server"));
    assert_eq!(info[0].label("model"), Some("Tesla T4"));
    // SM active, occupancy and tensor only: a tensor counter makes it the profiling tier.
    assert_eq!(info[0].label("fidelity"), Some("profiling"));

    // Configured UUIDs win over the pod attribution.
    let sidecar = Sidecar::start(
        &["--source", &src, "--interval", "200ms"],
        &[
            ("POD_NAME", "triton-84d57987c9-kks4k"),
            (
                "TRUTHSCALE_SOURCE__GPU_UUIDS",
                "GPU-4812b59b-1f1a-430f-d8a4-69d2ee8c18bb",
            ),
        ],
        dir.path(),
    );
    let m = sidecar.wait_for(WAIT, "gpu info", |m| {
        m.iter().any(|s| s.name == "truthscale_gpu_info")
    });
    let gpus: Vec<_> = m
        .iter()
        .filter(|s| s.name == "truthscale_gpu_info")
        .filter_map(|s| s.label("gpu"))
        .collect();
    assert_eq!(gpus, vec!["1"]);
}

/// A scope that keeps none of the GPUs dcgm-exporter reports (a sidecar whose
/// `NVIDIA_VISIBLE_DEVICES` names a MIG instance, which dcgm-exporter labels with its parent
/// GPU's UUID) exports no GPU, goes stale, and says why once, naming what to set.
#[test]
fn a_scope_that_keeps_no_gpu_says_so_once() {
    let server = StandIn::start(ok(&fixture_text("dcgm-exporter-NVIDIA-DCGM-issue191.txt")));
    let src = format!("dcgm-exporter:{}", server.url());
    let dir = TempDir::new("dcgm-scope");
    let sidecar = Sidecar::start(
        &["--source", &src, "--interval", "200ms"],
        &[(
            "NVIDIA_VISIBLE_DEVICES",
            "MIG-0a1b2c3d-0000-5000-8000-000000000001",
        )],
        dir.path(),
    );
    let deadline = std::time::Instant::now() + WAIT;
    while server.hits.load(Ordering::SeqCst) < 5 {
        assert!(std::time::Instant::now() < deadline, "too few scrapes");
        std::thread::sleep(Duration::from_millis(100));
    }
    let m = sidecar.wait_for(WAIT, "source down", |m| {
        value(m, "truthscale_source_up", &[("source", "dcgm_exporter")]) == Some(0.0)
    });
    assert!(!m.iter().any(|s| s.name == "truthscale_gpu_info"), "{m:?}");
    let stderr = sidecar.process.stderr();
    let said = stderr
        .matches("None of the GPUs dcgm-exporter reports is in this pod's scope")
        .count();
    assert_eq!(said, 1, "said once, not every scrape:\n{stderr}");
    assert!(stderr.contains("gpus=2"), "{stderr}");
    assert!(stderr.contains("name the parent GPU-"), "{stderr}");
}

#[test]
fn busy_only_scrape_gets_busy_only_fidelity_and_repeats_are_observed_time() {
    let body =
        "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-1\",modelName=\"NVIDIA H100 80GB HBM3\"} 80\n";
    let server = StandIn::start(ok(body));
    let src = format!("dcgm-exporter:{}", server.url());
    let dir = TempDir::new("dcgm-busy");
    let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
    let m = sidecar.wait_for(WAIT, "info", |m| {
        m.iter().any(|s| s.name == "truthscale_gpu_info")
    });
    let info = m.iter().find(|s| s.name == "truthscale_gpu_info").unwrap();
    assert_eq!(info.label("fidelity"), Some("busy_only"));
    // No SM clock read: the busy fraction at the H100 SXM's maximum clock, 1980 of the
    // 1830 MHz its peak is quoted at.
    let bound = value(
        &m,
        "truthscale_gpu_effective_compute_upper_bound_ratio",
        &[("gpu", "0")],
    )
    .unwrap();
    assert!((bound - 0.8 * 1980.0 / 1830.0).abs() < 1e-12, "{bound}");
    assert_eq!(
        value(
            &m,
            "truthscale_gpu_effective_compute_ratio",
            &[("gpu", "0")]
        ),
        None
    );
    // The same value repeated for 2 s (10 scrapes), as dcgm-exporter repeats a value between
    // its collections: still observed time, at wall-clock rate, and never a gap.
    let observed = |m: &[Sample]| {
        value(m, "truthscale_gpu_observed_seconds_total", &[("gpu", "0")]).unwrap_or(0.0)
    };
    // Against the snapshots' own timestamps (each tick's sample time) the integral is exact;
    // against the test's clock it can lag by a tick and the two requests' own times.
    let stamp = |m: &[Sample]| value(m, "truthscale_snapshot_timestamp_seconds", &[]).unwrap();
    let first = sidecar.metrics();
    let (before, t0) = (observed(&first), std::time::Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let m = sidecar.metrics();
    let grown = observed(&m) - before;
    let wall = t0.elapsed().as_secs_f64();
    let stamped = stamp(&m) - stamp(&first);
    assert!(server.hits.load(Ordering::SeqCst) >= 8);
    assert!(
        (grown - stamped).abs() <= 0.05 && grown <= wall + 0.45 && grown >= 1.0,
        "observed grew {grown} s in {stamped} s of snapshots, {wall} s of wall clock"
    );
    assert_eq!(
        value(
            &m,
            "truthscale_gpu_unobserved_seconds_total",
            &[("gpu", "0")]
        ),
        Some(0.0)
    );
    // A new value: integrated from the scrape it appears in.
    server.set(ok(&body.replace(" 80\n", " 40\n")));
    let m = sidecar.wait_for(WAIT, "the new value", |m| {
        value(
            m,
            "truthscale_gpu_reported_utilization_ratio",
            &[("gpu", "0")],
        ) == Some(0.4)
    });
    let observed = observed(&m);
    let busy = value(&m, "truthscale_gpu_busy_seconds_total", &[("gpu", "0")]).unwrap();
    assert!(
        busy < 0.8 * observed && busy > 0.4 * observed,
        "busy {busy} observed {observed}"
    );
}

/// dcgm-exporter repeats its values for 30 s (its default collection interval); a MIG slice
/// with no power or energy field, idle, never changes a reading. It accrues idle seconds at
/// wall-clock rate, and its parent's energy counter, which moves once in the 30 s, is never
/// read as 0 W.
#[test]
fn an_idle_mig_slice_whose_readings_never_change_accrues_idle_time() {
    let mig = r#"gpu="0",UUID="GPU-a30",device="nvidia0",modelName="NVIDIA A30",GPU_I_PROFILE="1g.6gb",GPU_I_ID="3""#;
    let gpu = r#"gpu="0",UUID="GPU-a30",device="nvidia0",modelName="NVIDIA A30""#;
    let body = |energy_mj: u64| {
        format!(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{mig}}} 0.000000\n\
             DCGM_FI_PROF_SM_ACTIVE{{{mig}}} 0.000000\n\
             DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{mig}}} 0.000000\n\
             DCGM_FI_PROF_DRAM_ACTIVE{{{mig}}} 0.000000\n\
             DCGM_FI_DEV_FB_USED{{{mig}}} 0\n\
             DCGM_FI_DEV_FB_FREE{{{mig}}} 5836\n\
             DCGM_FI_DEV_SM_CLOCK{{{gpu}}} 1440\n\
             DCGM_FI_DEV_POWER_USAGE{{{gpu}}} 31.0\n\
             DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{gpu}}} {energy_mj}\n"
        )
    };
    let server = StandIn::start(ok(&body(1_000_000_000)));
    let src = format!("dcgm-exporter:{}", server.url());
    let dir = TempDir::new("dcgm-idle-mig");
    let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
    let idle = |m: &[Sample]| {
        value(
            m,
            "truthscale_gpu_regime_seconds_total",
            &[("mig_instance", "3"), ("regime", "idle")],
        )
    };
    let m = sidecar.wait_for(WAIT, "the slice's idle seconds", |m| {
        idle(m).is_some_and(|v| v > 0.0)
    });
    let stamp = |m: &[Sample]| value(m, "truthscale_snapshot_timestamp_seconds", &[]).unwrap();
    let (idle0, t0, stamp0) = (idle(&m).unwrap(), std::time::Instant::now(), stamp(&m));
    // 30 s of the same answer, but for the energy counter moving once, after 15 s, by 15 s
    // of 31 W: the parent's power is about 31 W over the time since the counter last moved,
    // never 0 W in between, and not 75 × 31 W at the move (the 200 ms window alone).
    std::thread::sleep(Duration::from_secs(15));
    server.set(ok(&body(1_000_000_000 + 15 * 31_000)));
    let m = sidecar.wait_for(WAIT, "the energy counter moved", |m| {
        value(m, "truthscale_gpu_energy_joules_total", &[("gpu", "0")]).is_some_and(|j| j > 400.0)
    });
    let power = value(&m, "truthscale_gpu_power_watts", &[("gpu", "0")]).unwrap();
    assert!((25.0..=35.0).contains(&power) || power == 31.0, "{power}");
    let until = t0 + Duration::from_secs(30);
    std::thread::sleep(until.saturating_duration_since(std::time::Instant::now()));
    let m = sidecar.metrics();
    let wall = t0.elapsed().as_secs_f64();
    let grown = idle(&m).unwrap() - idle0;
    // Exact against the snapshots' own timestamps; within a tick and the requests' own
    // times of the test's clock.
    let stamped = stamp(&m) - stamp0;
    assert!(
        (grown - stamped).abs() <= 0.05 && (grown - wall).abs() <= 1.0,
        "the idle slice accrued {grown} idle s in {stamped} s of snapshots, {wall} s of wall time"
    );
    // Never a gap, and never stale: the answer kept coming.
    assert_eq!(
        value(
            &m,
            "truthscale_gpu_unobserved_seconds_total",
            &[("mig_instance", "3")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "dcgm_exporter")]),
        Some(1.0)
    );
    // The power gauge is the POWER field's 31 W between moves of the counter (a repeated
    // counter gives no energy power), and was never 0.
    assert_eq!(
        value(&m, "truthscale_gpu_power_watts", &[("gpu", "0")]),
        Some(31.0)
    );
}

#[test]
fn failures_are_counted_and_never_exported_as_data() {
    let good = fixture_text("dcgm-exporter-cncf-k8s-ai-conformance-ericsson-ccd-t4.txt");
    let server = StandIn::start(ok(&good));
    let src = format!("dcgm-exporter:{}", server.url());
    let dir = TempDir::new("dcgm-fail");
    let sidecar = Sidecar::start(
        &[
            "--source",
            &src,
            "--interval",
            "200ms",
            "--stale-after",
            "1s",
        ],
        &[],
        dir.path(),
    );
    sidecar.wait_for(WAIT, "data", |m| {
        m.iter().any(|s| s.name == "truthscale_gpu_info")
    });
    let errors = |m: &[Sample], kind: &str| {
        value(
            m,
            "truthscale_source_errors_total",
            &[("source", "dcgm_exporter"), ("kind", kind)],
        )
        .unwrap_or(0.0)
    };
    let cases: Vec<(&str, Reply)> = vec![
        (
            "http",
            Reply {
                status: "500 Internal Server Error",
                body: b"boom".to_vec(),
                claimed_len: None,
            },
        ),
        (
            "io",
            Reply {
                status: "200 OK",
                body: good.as_bytes()[..200].to_vec(),
                claimed_len: Some(good.len()),
            },
        ),
        ("parse", ok("<html><body>not metrics</body></html>\n")),
        (
            "sentinel",
            ok(
                "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a\",modelName=\"Tesla T4\"} 4294967295\n",
            ),
        ),
    ];
    for (kind, reply) in cases {
        server.set(reply);
        let m = sidecar.wait_for(WAIT, kind, |m| errors(m, kind) >= 2.0);
        assert!(sidecar.get("/healthz", &[]).status == 200);
        // A sentinel is not data: the busy fraction is never 42949672.95.
        assert!(m.iter().all(|s| s.value.is_finite()));
        for s in m
            .iter()
            .filter(|s| s.name == "truthscale_gpu_reported_utilization_ratio")
        {
            assert!(s.value <= 1.0, "{kind}: {s:?}");
        }
    }
    // A scrape holding only a sentinel still proves the exporter alive. After a second of
    // failed scrapes, the GPU series go and up is 0; the server serves on.
    server.set(Reply {
        status: "503 Service Unavailable",
        body: Vec::new(),
        claimed_len: None,
    });
    let m = sidecar.wait_for(WAIT, "stale", |m| {
        value(m, "truthscale_source_up", &[("source", "dcgm_exporter")]) == Some(0.0)
    });
    assert!(!m.iter().any(|s| s.name == "truthscale_gpu_info"));
    // The exporter comes back: so does the data.
    server.set(ok(&good));
    sidecar.wait_for(WAIT, "recovery", |m| {
        value(m, "truthscale_source_up", &[("source", "dcgm_exporter")]) == Some(1.0)
            && m.iter().any(|s| s.name == "truthscale_gpu_info")
    });
}

/// With `source.scrape_timeout` unset, a hung dcgm-exporter's scrape ends within the stale
/// period's whole intervals less half an interval (500 ms at a 200 ms interval and its
/// 600 ms stale period; it was 5 s, then the whole 600 ms, which put publications the
/// watchdog's limit apart): every tick ends as a `timeout` before it would be served stale,
/// so `/readyz` stays 200 and the source reads down, never stale and fresh by turns.
#[test]
fn a_hung_exporter_never_flaps_readiness() {
    let silent = truthscale_e2e::Silent::start();
    let src = format!("dcgm-exporter:http://{}/metrics", silent.addr());
    let dir = TempDir::new("dcgm-hung-ready");
    let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
    let m = sidecar.wait_for(WAIT, "timeouts", |m| {
        value(m, "truthscale_source_errors_total", &[("kind", "timeout")]).unwrap_or(0.0) >= 3.0
    });
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "dcgm_exporter")]),
        Some(0.0)
    );
    // Polled over three more scrapes of 500 ms: ready each time.
    let until = std::time::Instant::now() + std::time::Duration::from_millis(1800);
    let mut polls = 0;
    while std::time::Instant::now() < until {
        let r = sidecar.get("/readyz", &[]);
        assert_eq!(r.status, 200, "poll {polls}: {}", r.text());
        polls += 1;
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A poll every 50 ms plus its request: at least 10 in 1.8 s on a loaded machine.
    assert!(polls >= 10, "{polls}");
}

/// A dcgm-exporter that accepts and never answers is a `timeout` (it used to count as
/// `unreachable`), each tick that waits for it longer than the interval is an `overrun`, and
/// `/metrics` keeps its cadence: nothing of the GPU is exported.
#[test]
fn hung_exporter_is_a_timeout_and_an_overrun() {
    let silent = truthscale_e2e::Silent::start();
    let src = format!("dcgm-exporter:http://{}/metrics", silent.addr());
    let dir = TempDir::new("dcgm-hung");
    let sidecar = Sidecar::start(
        &["--source", &src, "--interval", "200ms"],
        &[("TRUTHSCALE_SOURCE__SCRAPE_TIMEOUT", "300ms")],
        dir.path(),
    );
    let m = sidecar.wait_for(WAIT, "timeouts", |m| {
        value(m, "truthscale_source_errors_total", &[("kind", "timeout")]).unwrap_or(0.0) >= 2.0
            && value(m, "truthscale_source_errors_total", &[("kind", "overrun")]).unwrap_or(0.0)
                >= 2.0
    });
    assert_eq!(
        value(
            &m,
            "truthscale_source_errors_total",
            &[("kind", "unreachable")]
        ),
        None
    );
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "dcgm_exporter")]),
        Some(0.0)
    );
    // Ready while its source is down: that `truthscale_source_up 0` must reach Prometheus
    // (a ServiceMonitor drops an unready pod's endpoint).
    assert_eq!(sidecar.get("/readyz", &[]).status, 200);
    assert!(!m.iter().any(|s| s.name == "truthscale_gpu_info"));
}

#[test]
fn unreachable_exporter_is_counted_and_reported_absent() {
    let port = truthscale_e2e::free_port();
    let src = format!("dcgm-exporter:http://127.0.0.1:{port}/metrics");
    let dir = TempDir::new("dcgm-down");
    let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
    let m = sidecar.wait_for(WAIT, "errors", |m| {
        value(
            m,
            "truthscale_source_errors_total",
            &[("kind", "unreachable")],
        )
        .unwrap_or(0.0)
            >= 2.0
    });
    assert_eq!(
        value(&m, "truthscale_source_up", &[("source", "dcgm_exporter")]),
        Some(0.0)
    );
    assert!(!m.iter().any(|s| s.name == "truthscale_gpu_info"));
    assert!(
        sidecar
            .process
            .stderr()
            .contains(&format!("127.0.0.1:{port}"))
    );
}

/// A reading that cannot be physical (POWER 0xFFFFFFFE W, an SM clock of 0xFFFFFFFE MHz) is
/// a blank: counted as `out_of_range` every time, logged once for the GPU, never exported
/// and never integrated into energy.
#[test]
fn impossible_readings_are_counted_logged_once_and_never_integrated() {
    let labels = r#"gpu="0",UUID="GPU-h100",modelName="NVIDIA H100 80GB HBM3""#;
    let body = format!(
        "DCGM_FI_DEV_GPU_UTIL{{{labels}}} 100\n\
         DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{labels}}} 0.4\n\
         DCGM_FI_PROF_DRAM_ACTIVE{{{labels}}} 0.2\n\
         DCGM_FI_DEV_POWER_USAGE{{{labels}}} 4294967294\n\
         DCGM_FI_DEV_SM_CLOCK{{{labels}}} 4294967294\n"
    );
    let server = StandIn::start(ok(&body));
    let src = format!("dcgm-exporter:{}", server.url());
    let dir = TempDir::new("dcgm-impossible");
    let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
    let out_of_range = |m: &[Sample]| {
        value(
            m,
            "truthscale_derivation_diagnostics_total",
            &[("kind", "out_of_range")],
        )
        .unwrap_or(0.0)
    };
    // Two readings a scrape, over at least five scrapes.
    let m = sidecar.wait_for(WAIT, "out_of_range counted", |m| out_of_range(m) >= 10.0);
    for absent in [
        "truthscale_gpu_power_watts",
        "truthscale_gpu_energy_joules_total",
        "truthscale_gpu_energy_observed_seconds_total",
        "truthscale_gpu_sm_clock_hertz",
        "truthscale_gpu_clock_correction_ratio",
        // No clock to correct the tensor activity by: no ECF either.
        "truthscale_gpu_effective_compute_ratio",
    ] {
        assert_eq!(value(&m, absent, &[("gpu", "0")]), None, "{absent}");
    }
    assert_eq!(
        value(&m, "truthscale_gpu_tensor_active_ratio", &[("gpu", "0")]),
        Some(0.4)
    );
    let stderr = sidecar.process.stderr();
    let logged = stderr
        .lines()
        .filter(|l| l.contains("Reading not used as a measurement") && l.contains("out_of_range"))
        .count();
    assert_eq!(logged, 1, "logged once per GPU and kind:\n{stderr}");
}

/// Readings no GPU gives that are not a field's own (negative free memory beside the used,
/// a clock-event bitmask that is no whole number) are blank and counted under
/// `kind="impossible"`, two a scrape: no memory total is made of them, and no throttle
/// reasons read.
#[test]
fn impossible_readings_outside_the_fields_are_counted_as_impossible() {
    let labels = r#"gpu="0",UUID="GPU-h100",modelName="NVIDIA H100 80GB HBM3""#;
    let body = format!(
        "DCGM_FI_DEV_GPU_UTIL{{{labels}}} 100\n\
         DCGM_FI_DEV_FB_USED{{{labels}}} 1000\n\
         DCGM_FI_DEV_FB_FREE{{{labels}}} -900\n\
         DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{{labels}}} 3.5\n"
    );
    let server = StandIn::start(ok(&body));
    let src = format!("dcgm-exporter:{}", server.url());
    let dir = TempDir::new("dcgm-impossible-extra");
    let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
    let impossible = |m: &[Sample]| {
        value(
            m,
            "truthscale_source_errors_total",
            &[("source", "dcgm_exporter"), ("kind", "impossible")],
        )
        .unwrap_or(0.0)
    };
    let m = sidecar.wait_for(WAIT, "impossible readings counted", |m| {
        impossible(m) >= 6.0
    });
    assert_eq!(impossible(&m) % 2.0, 0.0, "two a scrape");
    assert_eq!(
        value(&m, "truthscale_gpu_memory_used_bytes", &[("gpu", "0")]),
        Some(1000.0 * 1_048_576.0)
    );
    assert_eq!(
        value(&m, "truthscale_gpu_memory_total_bytes", &[("gpu", "0")]),
        None
    );
    assert_eq!(
        value(
            &m,
            "truthscale_source_errors_total",
            &[("kind", "sentinel")]
        ),
        None
    );
}

/// A dcgm-exporter 4.10 answer (DCGM 4.7 names, base units, `hostname`) with the cumulative
/// counters days past boot: read at the top tier, with nothing counted as a sentinel, and
/// the one family truthscale does not read counted once, however many scrapes name it.
#[test]
fn a_dcgm_exporter_4_10_answer_reads_at_the_cumulative_tier() {
    let labels = "gpu=\"0\",UUID=\"GPU-1\",hostname=\"node-a\",modelName=\"NVIDIA H100 80GB HBM3\"";
    // The counters of one scrape: 0.25 of the cycles with a tensor pipe active since the
    // previous one, `k` scrapes after a start past 2^47.
    let body = |k: u64| {
        let elapsed = 300_000_000_000_000_000_u64 + k * 1_000_000_000_000;
        let mma = 75_000_000_000_000_000_u64 + k * 250_000_000_000;
        format!(
            "# HELP DCGM_FI_DEV_GPU_UTIL_RATIO GPU utilization (ratio 0-1).\n\
             DCGM_FI_DEV_GPU_UTIL_RATIO{{{labels}}} 1\n\
             DCGM_FI_DEV_SM_CLOCK_HERTZ{{{labels}}} 1830000000\n\
             DCGM_FI_PROF_TENSOR_UTIL_RATIO{{{labels}}} 0.9\n\
             DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL{{{labels}}} {elapsed}\n\
             DCGM_FI_PROF_MMA_CYCLES_ACTIVE_TOTAL{{{labels}}} {mma}\n\
             DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND{{{labels}}} 1000000\n\
             DCGM_FI_DEV_PCIE_REPLAY_TOTAL{{{labels}}} 0\n"
        )
    };
    let server = StandIn::start(ok(&body(0)));
    let src = format!("dcgm-exporter:{}", server.url());
    let dir = TempDir::new("dcgm-4-10");
    let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
    sidecar.wait_for(WAIT, "info", |m| {
        m.iter().any(|s| s.name == "truthscale_gpu_info")
    });
    for k in 1..=4 {
        server.set(ok(&body(k)));
        std::thread::sleep(Duration::from_millis(450));
    }
    let m = sidecar.wait_for(WAIT, "the cumulative tier", |m| {
        m.iter()
            .any(|s| s.name == "truthscale_gpu_info" && s.label("fidelity") == Some("cumulative"))
    });
    // τ from the counters (0.25), not the gauge (0.9), at κ = 1830 / f_ref = 1.
    assert_eq!(
        value(&m, "truthscale_gpu_tensor_active_ratio", &[("gpu", "0")]),
        Some(0.25)
    );
    let ecf = value(
        &m,
        "truthscale_gpu_effective_compute_ratio",
        &[("gpu", "0")],
    )
    .unwrap();
    assert!((ecf - 0.25).abs() < 1e-9, "{ecf}");
    // Ratio units from the help text: busy 1, not 0.01.
    assert_eq!(
        value(
            &m,
            "truthscale_gpu_reported_utilization_ratio",
            &[("gpu", "0")]
        ),
        Some(1.0)
    );
    let errors = |kind: &str| {
        value(
            &m,
            "truthscale_source_errors_total",
            &[("source", "dcgm_exporter"), ("kind", kind)],
        )
    };
    assert_eq!(
        errors("unread_family"),
        Some(1.0),
        "PCIe replays, named once"
    );
    assert_eq!(errors("sentinel"), None, "counters past 2^47 are readings");
    assert_eq!(errors("ambiguous_unit"), None);
}

/// `truthscale_gpu_info` carries the PCI id and the driver version dcgm-exporter labels its
/// series with, the driver version under either name (`DCGM_FI_DRIVER_VERSION`, and
/// `DCGM_FI_SYSTEM_DRIVER_VERSION` from 4.9), the node from `Hostname` or `hostname`; both
/// empty when the exporter has neither.
#[test]
fn driver_version_and_pci_bus_id_from_either_label_name() {
    let dir = TempDir::new("dcgm-driver-version");
    let cases = [
        (
            "Hostname=\"node-48\",DCGM_FI_DRIVER_VERSION=\"550.54.15\"",
            "00000000:3B:00.0",
            "node-48",
            "550.54.15",
        ),
        (
            "hostname=\"node-49\",DCGM_FI_SYSTEM_DRIVER_VERSION=\"570.124.06\"",
            "00000000:3C:00.0",
            "node-49",
            "570.124.06",
        ),
        ("hostname=\"node-50\"", "", "node-50", ""),
    ];
    for (labels, pci, node, driver) in cases {
        let body = format!(
            "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",UUID=\"GPU-1\",pci_bus_id=\"{pci}\",\
             modelName=\"NVIDIA H100 80GB HBM3\",{labels}}} 80\n"
        );
        let server = StandIn::start(ok(&body));
        let src = format!("dcgm-exporter:{}", server.url());
        let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
        let m = sidecar.wait_for(WAIT, "info", |m| {
            m.iter().any(|s| s.name == "truthscale_gpu_info")
        });
        let info: Vec<&Sample> = m
            .iter()
            .filter(|s| s.name == "truthscale_gpu_info")
            .collect();
        assert_eq!(info.len(), 1, "{info:?}");
        for (k, v) in [
            ("uuid", "GPU-1"),
            ("node", node),
            ("source", "dcgm_exporter"),
            ("pci_bus_id", pci),
            ("driver_version", driver),
        ] {
            assert_eq!(info[0].label(k), Some(v), "{labels}: {k}: {info:?}");
        }
    }
}

/// dcgm-exporter run without `NODE_NAME` labels its GPUs with its pod's name, which a
/// restart changes. Read as it was, the GPU became a second one on another "node", its
/// counts split: the GPU keeps the first `Hostname` it had (one `truthscale_gpu_info`, its
/// observed seconds counting on), and the log says what to set. With this node's name known
/// (`NODE_NAME`), every GPU takes it.
#[test]
fn a_restarted_dcgm_exporter_s_new_hostname_does_not_split_a_gpu() {
    let dir = TempDir::new("dcgm-hostname");
    let body = |host: &str| {
        format!(
            "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",UUID=\"GPU-1\",modelName=\"NVIDIA H100 80GB HBM3\",\
             Hostname=\"{host}\"}} 80\n"
        )
    };
    let server = StandIn::start(ok(&body("dcgm-exporter-7f9c4")));
    let src = format!("dcgm-exporter:{}", server.url());
    let sidecar = Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
    let observed = |m: &[Sample]| value(m, "truthscale_gpu_observed_seconds_total", &[]);
    let before = sidecar.wait_for(WAIT, "a second observed", |m| {
        observed(m).is_some_and(|s| s >= 1.0)
    });
    let before = observed(&before).unwrap_or_default();
    server.set(ok(&body("dcgm-exporter-k2m8x")));
    let m = sidecar.wait_for(WAIT, "two more seconds observed", |m| {
        observed(m).is_some_and(|s| s >= before + 2.0)
    });
    let info: Vec<&Sample> = m
        .iter()
        .filter(|s| s.name == "truthscale_gpu_info")
        .collect();
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(info[0].label("node"), Some("dcgm-exporter-7f9c4"));
    assert!(
        !m.iter()
            .any(|s| s.label("node") == Some("dcgm-exporter-k2m8x"))
    );
    let log = sidecar.process.stderr();
    assert_eq!(
        log.matches("Set NODE_NAME in dcgm-exporter").count(),
        1,
        "{log}"
    );
    drop(sidecar);

    let sidecar = Sidecar::start(
        &["--source", &src, "--interval", "200ms"],
        &[("NODE_NAME", "gpu-node-3")],
        dir.path(),
    );
    let m = sidecar.wait_for(WAIT, "info", |m| {
        m.iter().any(|s| s.name == "truthscale_gpu_info")
    });
    let info = m.iter().find(|s| s.name == "truthscale_gpu_info");
    assert_eq!(info.and_then(|s| s.label("node")), Some("gpu-node-3"));
}
