//! The router through axum's `oneshot`: status codes, content types, readiness, auth.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tower::ServiceExt;
use truthscale_exporter::config::Config;
use truthscale_exporter::http::{RouterLimits, router};
use truthscale_exporter::sidecar::Sidecar;
use truthscale_exporter::sinks::prometheus::Snapshot;

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

fn sim_sidecar(gpus: u32) -> Sidecar {
    let mut c = Config::default();
    c.source.interval = "100ms".into();
    c.source.config = truthscale_exporter::sources::SourceConfig::Sim(
        truthscale_exporter::sources::sim::SimConfig {
            gpus,
            ..Default::default()
        },
    );
    let settings = c.validate(&[]).unwrap();
    let s = Sidecar::start(&settings).unwrap();
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
    let s = Sidecar::start(&c.validate(&[]).unwrap()).unwrap();
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
