//! The router through axum's `oneshot`: status codes, content types, readiness, auth.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tower::ServiceExt;
use truthscale_exporter::compose;
use truthscale_exporter::config::Config;
use truthscale_exporter::http::{RouterLimits, router};
use truthscale_exporter::pipeline::Sampler;
use truthscale_exporter::publish::Snapshot;

async fn get(app: axum::Router, uri: &str, accept: Option<&str>) -> (StatusCode, String, String) {
    let mut req = Request::get(uri);
    if let Some(a) = accept {
        req = req.header(header::ACCEPT, a);
    }
    let resp = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let status = resp.status();
    let ct = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 24)
        .await
        .unwrap();
    (status, ct, String::from_utf8(body.to_vec()).unwrap())
}

fn sim_sidecar(gpus: u32) -> Sampler {
    let mut c = Config::default();
    c.source.interval = "100ms".into();
    c.source.config = truthscale_exporter::sources::SourceConfig::Sim(
        truthscale_exporter::sources::sim::SimConfig {
            gpus,
            ..Default::default()
        },
    );
    let settings = c.validate(&[]).unwrap();
    let s = compose::start(&settings).unwrap();
    let t = Instant::now();
    while !s.latest().ready() {
        assert!(t.elapsed() < Duration::from_secs(5), "no first snapshot");
        std::thread::sleep(Duration::from_millis(10));
    }
    s
}

#[tokio::test]
async fn not_ready_before_the_first_sample() {
    let (_tx, rx) = watch::channel(Arc::new(Snapshot::default()));
    let app = router(rx, RouterLimits::default());
    assert_eq!(
        get(app.clone(), "/readyz", None).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        get(app.clone(), "/metrics", None).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let (status, _, body) = get(app, "/healthz", None).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
}

#[tokio::test]
async fn serves_metrics_landing_and_readiness() {
    let s = sim_sidecar(2);
    let app = router(s.subscribe(), RouterLimits::default());
    let (status, _, body) = get(app.clone(), "/readyz", None).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ready\n"));

    let (status, ct, body) = get(app.clone(), "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
    assert!(body.contains("# TYPE truthscale_gpu_busy_seconds_total counter"));
    assert_eq!(
        body.lines()
            .filter(|l| l.starts_with("truthscale_gpu_info{"))
            .count(),
        2
    );
    assert!(
        body.lines()
            .filter(|l| l.starts_with("truthscale_gpu_info{"))
            .all(|l| l.contains("source=\"sim\""))
    );
    assert!(body.contains("truthscale_source_up{source=\"sim\"} 1"));

    let (status, ct, body) = get(
        app.clone(),
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(ct.starts_with("application/openmetrics-text; version=1.0.0"));
    assert!(body.ends_with("# EOF\n"));

    let (status, ct, body) = get(app.clone(), "/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ct, "text/html; charset=utf-8");
    assert!(body.contains("href=\"/metrics\"") && body.contains("SIMULATED"));

    assert_eq!(get(app, "/nope", None).await.0, StatusCode::NOT_FOUND);
    s.shutdown();
}

#[tokio::test]
async fn scrapes_do_not_sample() {
    // The body is the same bytes until the next tick, however many scrapes come.
    let mut c = Config::default();
    c.source.interval = "10s".into();
    c.source.config = truthscale_exporter::sources::SourceConfig::Sim(Default::default());
    let s = compose::start(&c.validate(&[]).unwrap()).unwrap();
    while !s.latest().ready() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let app = router(s.subscribe(), RouterLimits::default());
    let first = get(app.clone(), "/metrics", None).await.2;
    for _ in 0..20 {
        assert_eq!(get(app.clone(), "/metrics", None).await.2, first);
    }
    assert_eq!(s.latest().tick, 1);
    s.shutdown();
}

#[tokio::test]
async fn basic_auth_rejects_without_credentials() {
    let dir = std::env::temp_dir().join(format!("ts-http-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hash = bcrypt::hash("secret", 4).unwrap();
    let f = dir.join("web.yml");
    std::fs::write(&f, format!("basic_auth_users:\n  alice: {hash}\n")).unwrap();
    let web = truthscale_exporter::http::web::WebConfig::load(&f).unwrap();
    let s = sim_sidecar(1);
    let app = truthscale_exporter::http::web::layer(
        router(s.subscribe(), RouterLimits::default()),
        web.basic_auth().unwrap(),
    );
    let resp = app
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().get(header::WWW_AUTHENTICATE).is_some());
    use base64::Engine as _;
    let creds = base64::engine::general_purpose::STANDARD.encode("alice:secret");
    let resp = app
        .oneshot(
            Request::get("/metrics")
                .header(header::AUTHORIZATION, format!("Basic {creds}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    s.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A source that panics on its first sample, or sleeps once for `hang`.
#[derive(Debug)]
struct Faulty {
    hang: Option<Duration>,
    panic: bool,
}

impl truthscale_exporter::sources::Source for Faulty {
    fn name(&self) -> &'static str {
        "null"
    }
    fn update_interval(&self) -> Option<Duration> {
        None
    }
    fn sample(&mut self, _now: std::time::SystemTime) -> truthscale_exporter::sources::Produced {
        assert!(!self.panic, "a source bug");
        if let Some(d) = self.hang.take() {
            std::thread::sleep(d);
        }
        truthscale_exporter::sources::Produced::default()
    }
}

fn faulty_sidecar(hang: Option<Duration>) -> Sampler {
    let mut c = Config::default();
    c.source.interval = "100ms".into();
    let settings = c.validate(&[]).unwrap();
    let panic = hang.is_none();
    compose::start_with_source(&settings, Box::new(Faulty { hang, panic }))
}

/// Liveness follows the sampler: a sampler thread that died (here by a panic) turns
/// `/healthz` to 503 for good, where it used to answer 200 forever.
#[tokio::test]
async fn healthz_fails_when_the_sampler_died() {
    let sidecar = faulty_sidecar(None);
    let app = router(sidecar.subscribe(), RouterLimits::default());
    let t = Instant::now();
    loop {
        let (status, _, body) = get(app.clone(), "/healthz", None).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            assert!(body.contains("sampler thread ended"), "{body}");
            break;
        }
        assert_eq!(status, StatusCode::OK);
        assert!(t.elapsed() < Duration::from_secs(5), "healthz still 200");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, _, _) = get(app, "/readyz", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

/// A sampler stuck in its source longer than the liveness limit fails `/healthz`, and
/// recovers when the tick completes.
#[tokio::test]
async fn healthz_fails_while_the_sampler_hangs() {
    // A 4 s hang against a 1 s liveness limit: the first answer has a second to come, the
    // second lands two seconds into the hang, the recovery two seconds after it.
    let sidecar = faulty_sidecar(Some(Duration::from_millis(4000)));
    let limits = RouterLimits {
        liveness_after: Duration::from_millis(1000),
        ..RouterLimits::default()
    };
    let app = router(sidecar.subscribe(), limits);
    let (status, _, _) = get(app.clone(), "/healthz", None).await;
    assert_eq!(status, StatusCode::OK, "fresh at start");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let (status, _, body) = get(app.clone(), "/healthz", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("the last tick began"), "{body}");
    let t = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if get(app.clone(), "/healthz", None).await.0 == StatusCode::OK {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "no recovery");
    }
}

/// With the binary's panic hook, a panic on any thread ends the process (SIGABRT) with a
/// line that says so. The test runs itself as the child that panics.
#[test]
fn a_panic_anywhere_ends_the_process() {
    const CHILD: &str = "TRUTHSCALE_TEST_PANIC_CHILD";
    if std::env::var_os(CHILD).is_some() {
        truthscale_exporter::cli::install_panic_hook();
        let _ = std::thread::Builder::new()
            .name("worker".into())
            .spawn(|| panic!("boom"))
            .unwrap()
            .join();
        // Not reached: the hook aborts the whole process.
        std::thread::sleep(Duration::from_secs(5));
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "http::a_panic_anywhere_ends_the_process",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(out.status.signal(), Some(6), "{:?} {err}", out.status);
    assert!(err.contains("boom"), "{err}");
    assert!(
        err.contains("truthscale: internal error: thread 'worker' panicked"),
        "{err}"
    );
}

/// Over `max_series`, whole GPUs are left out (the last first), the exporter's own series
/// stay, and `truthscale_series_dropped_total` counts the series left out.
#[test]
fn the_series_cap_drops_whole_entities_and_counts_them() {
    let mut c = Config::default();
    c.source.interval = "100ms".into();
    c.source.config = truthscale_exporter::sources::SourceConfig::Sim(
        truthscale_exporter::sources::sim::SimConfig {
            gpus: 4,
            ..Default::default()
        },
    );
    c.max_series = 120;
    let settings = c.validate(&[]).unwrap();
    let s = compose::start(&settings).unwrap();
    let t = Instant::now();
    while s.latest().tick < 3 {
        assert!(t.elapsed() < Duration::from_secs(5), "no snapshots");
        std::thread::sleep(Duration::from_millis(10));
    }
    let snap = s.latest();
    let text = String::from_utf8_lossy(&snap.text).to_string();
    let gpu_series = text
        .lines()
        .filter(|l| l.starts_with("truthscale_gpu_") || l.starts_with("truthscale_process_"))
        .count();
    assert!(gpu_series <= 120, "{gpu_series} GPU series over the cap");
    assert!(gpu_series > 0, "the first GPU fits");
    let infos: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("truthscale_gpu_info{"))
        .collect();
    assert_eq!(infos.len(), 1, "{infos:?}");
    assert!(
        infos[0].contains("gpu=\"0\""),
        "the last are left out first"
    );
    let dropped: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("truthscale_series_dropped_total "))
        .expect("the counter")
        .parse()
        .unwrap();
    assert!(dropped > 0.0);
    assert!(text.contains("truthscale_build_info{"), "own series stay");
    assert!(text.contains("truthscale_source_up{source=\"sim\"} 1"));
    // Below the cap, nothing is dropped and the counter is a measured 0.
    let mut c = Config::default();
    c.source.interval = "100ms".into();
    c.source.config = truthscale_exporter::sources::SourceConfig::Sim(Default::default());
    let s = compose::start(&c.validate(&[]).unwrap()).unwrap();
    while s.latest().tick < 1 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = String::from_utf8_lossy(&s.latest().text).to_string();
    assert!(text.contains("\ntruthscale_series_dropped_total 0\n"));
}
