//! OTLP push against real receivers that decode the protobuf: a tonic `MetricsService`
//! server (gRPC) and an axum handler (HTTP/protobuf), both in this process.

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, metric, number_data_point,
};
use prost::Message as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use truthscale_e2e::{Sample, Sidecar, TempDir, free_port};

type Received = Arc<Mutex<Vec<ExportMetricsServiceRequest>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Grpc,
    Http,
}

struct Grpc(Received);

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// A receiver on 127.0.0.1:`port`, running in its own runtime until dropped.
/// A gRPC collector that refuses every export as invalid.
struct GrpcRejecting;

#[tonic::async_trait]
impl MetricsService for GrpcRejecting {
    async fn export(
        &self,
        _request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        Err(tonic::Status::invalid_argument(
            "rejected by the test collector",
        ))
    }
}

/// A collector (either protocol) that reads each export whole and refuses it: HTTP 400, or
/// gRPC `InvalidArgument`.
fn start_rejecting(proto: Proto, port: u16) -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
        .unwrap_or_else(|e| panic!("bind collector on {port}: {e}"));
    match proto {
        Proto::Grpc => {
            rt.spawn(async move {
                let _ = tonic::transport::Server::builder()
                    .add_service(MetricsServiceServer::new(GrpcRejecting))
                    .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                    .await;
            });
        }
        Proto::Http => {
            let app = axum::Router::new().fallback(|_body: axum::body::Bytes| async {
                (axum::http::StatusCode::BAD_REQUEST, "rejected")
            });
            rt.spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
        }
    }
    rt
}

struct Receiver {
    received: Received,
    paths: Arc<Mutex<Vec<String>>>,
    _rt: tokio::runtime::Runtime,
}

impl Receiver {
    fn start(proto: Proto, port: u16) -> Receiver {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let received: Received = Arc::default();
        let paths: Arc<Mutex<Vec<String>>> = Arc::default();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
            .unwrap_or_else(|e| panic!("bind receiver on {port}: {e}"));
        match proto {
            Proto::Grpc => {
                let svc = MetricsServiceServer::new(Grpc(received.clone()));
                rt.spawn(async move {
                    let _ = tonic::transport::Server::builder()
                        .add_service(svc)
                        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                        .await;
                });
            }
            Proto::Http => {
                let r = received.clone();
                let p = paths.clone();
                let app = axum::Router::new().fallback(
                    move |uri: axum::http::Uri, body: axum::body::Bytes| {
                        let r = r.clone();
                        let p = p.clone();
                        async move {
                            p.lock().unwrap().push(uri.path().to_string());
                            match ExportMetricsServiceRequest::decode(body) {
                                Ok(req) => {
                                    r.lock().unwrap().push(req);
                                    (
                                        axum::http::StatusCode::OK,
                                        [("content-type", "application/x-protobuf")],
                                        ExportMetricsServiceResponse::default().encode_to_vec(),
                                    )
                                }
                                Err(_) => (
                                    axum::http::StatusCode::BAD_REQUEST,
                                    [("content-type", "text/plain")],
                                    b"bad protobuf".to_vec(),
                                ),
                            }
                        }
                    },
                );
                rt.spawn(async move {
                    let _ = axum::serve(listener, app).await;
                });
            }
        }
        Receiver {
            received,
            paths,
            _rt: rt,
        }
    }

    fn requests(&self) -> Vec<ExportMetricsServiceRequest> {
        self.received.lock().unwrap().clone()
    }

    /// Wait until `n` requests with GPU data arrived.
    fn wait_for(&self, n: usize, limit: Duration, sidecar: &Sidecar) {
        let deadline = Instant::now() + limit;
        while self
            .requests()
            .iter()
            .filter(|r| find_metric(r, "truthscale.gpu.observed.time").is_some())
            .count()
            < n
        {
            assert!(
                Instant::now() < deadline,
                "fewer than {n} OTLP exports with GPU data within {limit:?}; stderr:\n{}",
                sidecar.process.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn s(kv: &[KeyValue], key: &str) -> Option<String> {
    kv.iter()
        .find(|k| k.key == key)
        .and_then(|k| k.value.as_ref()?.value.as_ref())
        .and_then(|v| match v {
            any_value::Value::StringValue(s) => Some(s.clone()),
            any_value::Value::IntValue(i) => Some(i.to_string()),
            _ => None,
        })
}

fn find_metric<'a>(r: &'a ExportMetricsServiceRequest, name: &str) -> Option<&'a Metric> {
    r.resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .find(|m| m.name == name)
}

fn points(m: &Metric) -> &[NumberDataPoint] {
    match &m.data {
        Some(metric::Data::Gauge(g)) => &g.data_points,
        Some(metric::Data::Sum(s)) => &s.data_points,
        _ => &[],
    }
}

fn value(p: &NumberDataPoint) -> f64 {
    match p.value {
        Some(number_data_point::Value::AsDouble(v)) => v,
        Some(number_data_point::Value::AsInt(v)) => v as f64,
        None => f64::NAN,
    }
}

fn gauge_value(r: &ExportMetricsServiceRequest, name: &str) -> Option<f64> {
    find_metric(r, name)
        .and_then(|m| points(m).first())
        .map(value)
}

const ENV: &[(&str, &str)] = &[
    ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
    ("POD_NAME", "trainer-0"),
    ("POD_NAMESPACE", "ml"),
    ("CONTAINER_NAME", "cuda"),
    ("NODE_NAME", "gpu-node-7"),
    ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
];

const ARGS: &[&str] = &[
    "--source",
    "sim:tiny-kernel",
    "--sim-gpus",
    "1",
    "--interval",
    "500ms",
];

/// `/metrics` values by snapshot timestamp, polled while exports happen.
fn poll_metrics(sidecar: &Sidecar, for_: Duration) -> HashMap<u64, Vec<Sample>> {
    let mut by_ts = HashMap::new();
    let deadline = Instant::now() + for_;
    while Instant::now() < deadline {
        let m = sidecar.metrics();
        if let Some(ts) = m
            .iter()
            .find(|s| s.name == "truthscale_snapshot_timestamp_seconds")
        {
            by_ts.insert(ts.value.to_bits(), m);
        }
        std::thread::sleep(Duration::from_millis(80));
    }
    by_ts
}

fn prom(samples: &[Sample], name: &str, label: Option<(&str, &str)>) -> f64 {
    samples
        .iter()
        .find(|s| s.name == name && label.is_none_or(|(k, v)| s.label(k) == Some(v)))
        .unwrap_or_else(|| panic!("{name} {label:?} missing from /metrics"))
        .value
}

fn check_push(proto: Proto) {
    let dir = TempDir::new("otlp");
    let port = free_port();
    let rx = Receiver::start(proto, port);
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut env = ENV.to_vec();
    let mut args = ARGS.to_vec();
    match proto {
        // gRPC: the flag, with the protocol from the standard variable.
        Proto::Grpc => {
            env.push(("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"));
            args.extend(["--otlp-endpoint", &endpoint]);
        }
        // HTTP/protobuf: the standard variables only (the SDK adds /v1/metrics).
        Proto::Http => {
            env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint));
            env.push(("OTEL_SERVICE_NAME", "gpu-truth"));
        }
    }
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let by_ts = poll_metrics(&sidecar, Duration::from_secs(5));
    rx.wait_for(3, Duration::from_secs(20), &sidecar);
    let reqs: Vec<_> = rx
        .requests()
        .into_iter()
        .filter(|r| find_metric(r, "truthscale.gpu.observed.time").is_some())
        .collect();
    if proto == Proto::Http {
        assert!(
            rx.paths.lock().unwrap().iter().all(|p| p == "/v1/metrics"),
            "{:?}",
            rx.paths.lock().unwrap()
        );
    }

    // Resource.
    let res = &reqs[0].resource_metrics[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes;
    let service = if proto == Proto::Http {
        "gpu-truth"
    } else {
        "truthscale"
    };
    assert_eq!(s(res, "service.name").as_deref(), Some(service));
    assert_eq!(
        s(res, "service.version").as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(s(res, "k8s.pod.name").as_deref(), Some("trainer-0"));
    assert_eq!(s(res, "k8s.namespace.name").as_deref(), Some("ml"));
    assert_eq!(s(res, "k8s.container.name").as_deref(), Some("cuda"));
    assert_eq!(s(res, "k8s.node.name").as_deref(), Some("gpu-node-7"));
    assert_eq!(
        s(res, "deployment.environment").as_deref(),
        Some("test"),
        "OTEL_RESOURCE_ATTRIBUTES is merged"
    );
    assert!(s(res, "host.name").is_some());

    // Names, units, attributes.
    let any = by_ts.values().next().expect("polled /metrics");
    let uuid = any
        .iter()
        .find(|s| s.name == "truthscale_gpu_info")
        .and_then(|s| s.label("uuid"))
        .expect("uuid on /metrics")
        .to_string();
    let r = &reqs[reqs.len() - 1];
    for (name, unit) in [
        ("hw.gpu.utilization", "1"),
        ("hw.gpu.memory.usage", "By"),
        ("hw.gpu.memory.limit", "By"),
        ("hw.power", "W"),
        ("hw.energy", "J"),
        ("truthscale.gpu.effective_compute", "1"),
        ("truthscale.gpu.roofline_saturation", "1"),
        ("truthscale.gpu.inflation_gap", "1"),
        ("truthscale.gpu.regime.time", "s"),
        ("truthscale.gpu.busy.time", "s"),
        ("truthscale.gpu.busy.observed.time", "s"),
        ("truthscale.gpu.effective_compute.time", "s"),
        ("truthscale.gpu.effective_compute.observed.time", "s"),
        ("truthscale.gpu.energy.observed.time", "s"),
        ("truthscale.gpu.observed.time", "s"),
        ("truthscale.snapshot.timestamp", "s"),
        ("truthscale.sink.errors", "{error}"),
    ] {
        let m = find_metric(r, name).unwrap_or_else(|| panic!("{name} not exported"));
        assert_eq!(m.unit, unit, "{name}");
    }
    let util = find_metric(r, "hw.gpu.utilization").unwrap();
    let p = &points(util)[0];
    assert_eq!(s(&p.attributes, "hw.gpu.task").as_deref(), Some("general"));
    assert_eq!(s(&p.attributes, "hw.id").as_deref(), Some(uuid.as_str()));
    assert_eq!(s(&p.attributes, "hw.vendor").as_deref(), Some("NVIDIA"));
    assert_eq!(s(&p.attributes, "hw.type").as_deref(), Some("gpu"));
    assert!(s(&p.attributes, "hw.model").is_some_and(|m| m.starts_with("Simulated")));
    assert!(matches!(util.data, Some(metric::Data::Gauge(_))));
    let regimes = find_metric(r, "truthscale.gpu.regime.time").unwrap();
    assert!(points(regimes).iter().any(|p| {
        s(&p.attributes, "truthscale.gpu.regime").as_deref() == Some("idle")
            && s(&p.attributes, "truthscale.method").as_deref() == Some("counters")
    }));
    assert!(matches!(
        find_metric(r, "hw.gpu.memory.usage").unwrap().data,
        Some(metric::Data::Sum(ref s)) if !s.is_monotonic
    ));

    // Counters: monotonic cumulative sums that never go down.
    let mut last = f64::MIN;
    let mut start = None;
    for r in &reqs {
        let m = find_metric(r, "truthscale.gpu.observed.time").unwrap();
        let Some(metric::Data::Sum(sum)) = &m.data else {
            panic!("observed.time is not a sum: {m:?}");
        };
        assert!(sum.is_monotonic);
        assert_eq!(
            sum.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        let p = &sum.data_points[0];
        assert!(value(p) >= last, "observed.time went down");
        last = value(p);
        assert_eq!(
            *start.get_or_insert(p.start_time_unix_nano),
            p.start_time_unix_nano
        );
    }

    // Values equal /metrics for the same snapshot, matched on the snapshot timestamp.
    let mut matched = 0;
    for r in &reqs {
        let ts = gauge_value(r, "truthscale.snapshot.timestamp").unwrap();
        let Some(m) = by_ts.get(&ts.to_bits()) else {
            continue;
        };
        matched += 1;
        let pairs = [
            (
                "truthscale.gpu.observed.time",
                prom(m, "truthscale_gpu_observed_seconds_total", None),
            ),
            (
                "truthscale.gpu.busy.time",
                prom(m, "truthscale_gpu_busy_seconds_total", None),
            ),
            (
                "hw.energy",
                prom(m, "truthscale_gpu_energy_joules_total", None),
            ),
            (
                "hw.gpu.utilization",
                prom(m, "truthscale_gpu_reported_utilization_ratio", None),
            ),
            (
                "hw.gpu.memory.usage",
                prom(m, "truthscale_gpu_memory_used_bytes", None),
            ),
            ("hw.power", prom(m, "truthscale_gpu_power_watts", None)),
        ];
        for (name, want) in pairs {
            assert_eq!(gauge_value(r, name), Some(want), "{name} at {ts}");
        }
        for p in points(find_metric(r, "truthscale.gpu.regime.time").unwrap()) {
            let regime = s(&p.attributes, "truthscale.gpu.regime").unwrap();
            assert_eq!(
                value(p),
                prom(
                    m,
                    "truthscale_gpu_regime_seconds_total",
                    Some(("regime", &regime))
                ),
                "regime {regime} at {ts}"
            );
        }
    }
    assert!(
        matched >= 1,
        "no OTLP export matched a polled /metrics snapshot ({} exports, {} snapshots)",
        reqs.len(),
        by_ts.len()
    );
}

#[test]
fn grpc_push_equals_metrics() {
    check_push(Proto::Grpc);
}

#[test]
fn http_protobuf_push_equals_metrics() {
    check_push(Proto::Http);
}

fn sink_errors(sidecar: &Sidecar) -> f64 {
    sidecar
        .metrics()
        .iter()
        .filter(|s| s.name == "truthscale_sink_errors_total" && s.label("sink") == Some("otlp"))
        .map(|s| s.value)
        .sum()
}

fn check_outage(proto: Proto) {
    let dir = TempDir::new("otlp-outage");
    // Nothing listens here yet.
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut env = ENV.to_vec();
    env.push((
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        if proto == Proto::Grpc {
            "grpc"
        } else {
            "http/protobuf"
        },
    ));
    env.push(("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    while sink_errors(&sidecar) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "no truthscale_sink_errors_total{{sink=\"otlp\"}} during the outage; stderr:\n{}",
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // /metrics keeps serving fresh snapshots during the outage.
    let ts = |s: &Sidecar| prom(&s.metrics(), "truthscale_snapshot_timestamp_seconds", None);
    let before = ts(&sidecar);
    std::thread::sleep(Duration::from_millis(1200));
    assert!(ts(&sidecar) > before, "sampling stalled during the outage");
    assert!(
        sidecar.process.stderr().contains("OTLP export failed"),
        "the failure is logged"
    );
    // The collector comes up on the same port: data arrives without a restart (backoff
    // is at most 30s).
    let rx = Receiver::start(proto, port);
    rx.wait_for(1, Duration::from_secs(45), &sidecar);
}

#[test]
fn grpc_outage_then_recovery() {
    check_outage(Proto::Grpc);
}

#[test]
fn http_outage_then_recovery() {
    check_outage(Proto::Http);
}

/// A collector that accepts and never answers: each export fails as `timeout` (it used to be
/// `unavailable`), and sampling keeps its cadence.
fn check_hung(proto: Proto) {
    let dir = TempDir::new("otlp-hung");
    let silent = truthscale_e2e::Silent::start();
    let endpoint = format!("http://{}", silent.addr());
    let mut env = ENV.to_vec();
    env.push((
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        if proto == Proto::Grpc {
            "grpc"
        } else {
            "http/protobuf"
        },
    ));
    env.push(("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let kind = |s: &Sidecar, k: &str| {
        s.metrics()
            .iter()
            .filter(|m| {
                m.name == "truthscale_sink_errors_total"
                    && m.label("sink") == Some("otlp")
                    && m.label("kind") == Some(k)
            })
            .map(|m| m.value)
            .sum::<f64>()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while kind(&sidecar, "timeout") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "no timeout counted; unavailable = {}, other = {}; stderr:\n{}",
            kind(&sidecar, "unavailable"),
            kind(&sidecar, "other"),
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(kind(&sidecar, "unavailable"), 0.0);
    let ts = |s: &Sidecar| prom(&s.metrics(), "truthscale_snapshot_timestamp_seconds", None);
    let before = ts(&sidecar);
    std::thread::sleep(Duration::from_millis(1200));
    assert!(
        ts(&sidecar) > before,
        "sampling stalled while the collector hung"
    );
}

/// A collector that refuses every export: counted as `rejected` (never `unavailable`), and
/// `/metrics` keeps its cadence.
fn check_rejecting(proto: Proto) {
    let dir = TempDir::new("otlp-rejecting");
    let port = free_port();
    let _collector = start_rejecting(proto, port);
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut env = ENV.to_vec();
    env.push((
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        if proto == Proto::Grpc {
            "grpc"
        } else {
            "http/protobuf"
        },
    ));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let kind = |s: &Sidecar, k: &str| {
        s.metrics()
            .iter()
            .filter(|m| {
                m.name == "truthscale_sink_errors_total"
                    && m.label("sink") == Some("otlp")
                    && m.label("kind") == Some(k)
            })
            .map(|m| m.value)
            .sum::<f64>()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while kind(&sidecar, "rejected") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "no rejection counted; unavailable = {}, other = {}; stderr:\n{}",
            kind(&sidecar, "unavailable"),
            kind(&sidecar, "other"),
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(kind(&sidecar, "unavailable"), 0.0);
    let ts = |s: &Sidecar| prom(&s.metrics(), "truthscale_snapshot_timestamp_seconds", None);
    let before = ts(&sidecar);
    std::thread::sleep(Duration::from_millis(1200));
    assert!(
        ts(&sidecar) > before,
        "sampling stalled while the collector refused"
    );
}

#[test]
fn grpc_rejecting_collector_is_counted_as_rejected() {
    check_rejecting(Proto::Grpc);
}

#[test]
fn http_rejecting_collector_is_counted_as_rejected() {
    check_rejecting(Proto::Http);
}

#[test]
fn grpc_hung_collector_is_a_timeout() {
    check_hung(Proto::Grpc);
}

#[test]
fn http_hung_collector_is_a_timeout() {
    check_hung(Proto::Http);
}

#[test]
fn otlp_is_off_by_default() {
    let dir = TempDir::new("otlp-off");
    let sidecar = Sidecar::start(ARGS, &[], dir.path());
    let m = sidecar.metrics();
    assert!(m.iter().all(|s| s.name != "truthscale_sink_errors_total"));
    assert!(!sidecar.process.stderr().contains("OTLP"));
}
