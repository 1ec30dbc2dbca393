//! OTLP push against real receivers that decode the protobuf: a tonic `MetricsService`
//! server (gRPC) and an axum handler (HTTP/protobuf), both in this process, in plain text or
//! over TLS (rustls) with certificates generated for each test.

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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use truthscale_e2e::{Sample, Sidecar, TempDir, free_port};

type Received = Arc<Mutex<Vec<ExportMetricsServiceRequest>>>;

/// What a receiver saw of each request besides its body.
#[derive(Debug, Clone, Default)]
struct Seen {
    /// Header (gRPC: metadata) names, lowercased, and values.
    headers: Vec<(String, String)>,
    /// Certificates the client presented (gRPC only; over HTTP, the server refuses the
    /// handshake without one when it requires one).
    client_certs: usize,
}

impl Seen {
    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

type SeenLog = Arc<Mutex<Vec<Seen>>>;

fn header_pairs(h: &axum::http::HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Grpc,
    Http,
}

struct Grpc(Received, SeenLog);

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.1.lock().unwrap().push(Seen {
            headers: header_pairs(&request.metadata().clone().into_headers()),
            client_certs: request.peer_certs().map_or(0, |c| c.len()),
        });
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// Certificates generated for one test, as PEM files in its directory: a CA, a server
/// certificate it signed for 127.0.0.1 and localhost, a client certificate it signed, and an
/// unrelated CA.
struct Pki {
    ca: String,
    wrong_ca: String,
    client_cert: String,
    client_key: String,
    ca_der: rustls::pki_types::CertificateDer<'static>,
    server_cert_pem: String,
    server_key_pem: String,
    server_cert_der: rustls::pki_types::CertificateDer<'static>,
    server_key_der: Vec<u8>,
}

fn ca(name: &str) -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap()
}

impl Pki {
    fn generate(dir: &std::path::Path) -> Pki {
        let issuer = ca("truthscale e2e CA");
        let wrong = ca("some other CA");
        let leaf = |names: Vec<String>, eku| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut p = rcgen::CertificateParams::new(names).unwrap();
            p.extended_key_usages = vec![eku];
            let cert = p.signed_by(&key, &issuer).unwrap();
            (cert, key)
        };
        let (server, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client, client_key) = leaf(
            vec!["truthscale".into()],
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        );
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        Pki {
            ca: write("ca.pem", &issuer.pem()),
            wrong_ca: write("wrong-ca.pem", &wrong.pem()),
            client_cert: write("client.pem", &client.pem()),
            client_key: write("client.key", &client_key.serialize_pem()),
            ca_der: issuer.der().clone(),
            server_cert_pem: server.pem(),
            server_key_pem: server_key.serialize_pem(),
            server_cert_der: server.der().clone(),
            server_key_der: server_key.serialize_der(),
        }
    }
}

/// How a receiver serves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Plain,
    /// TLS with the server certificate of the [`Pki`].
    Tls,
    /// TLS, and a client certificate signed by the CA is required.
    MutualTls,
}

/// An HTTPS listener for `axum::serve`: TLS handshakes happen in `accept`, and failed ones
/// are noted and skipped.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    failed: Arc<Mutex<Vec<String>>>,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            match self.acceptor.accept(tcp).await {
                Ok(tls) => return (tls, addr),
                Err(e) => self.failed.lock().unwrap().push(e.to_string()),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

fn rustls_server_config(pki: &Pki, transport: Transport) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = if transport == Transport::MutualTls {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki.ca_der.clone()).unwrap();
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder
        .with_single_cert(
            vec![pki.server_cert_der.clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(pki.server_key_der.clone().into()),
        )
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
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
    seen: SeenLog,
    /// Failed TLS handshakes (HTTPS only).
    handshake_failures: Arc<Mutex<Vec<String>>>,
    _rt: tokio::runtime::Runtime,
}

impl Receiver {
    fn start(proto: Proto, port: u16) -> Receiver {
        Receiver::start_with(proto, port, Transport::Plain, None)
    }

    /// A receiver that takes gzip-compressed requests too (and notes which were).
    fn start_with(proto: Proto, port: u16, transport: Transport, pki: Option<&Pki>) -> Receiver {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let received: Received = Arc::default();
        let paths: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen: SeenLog = Arc::default();
        let handshake_failures: Arc<Mutex<Vec<String>>> = Arc::default();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
            .unwrap_or_else(|e| panic!("bind receiver on {port}: {e}"));
        match proto {
            Proto::Grpc => {
                let svc = MetricsServiceServer::new(Grpc(received.clone(), seen.clone()))
                    .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
                let mut server = tonic::transport::Server::builder();
                if transport != Transport::Plain {
                    let pki = pki.expect("TLS needs certificates");
                    let mut tls = tonic::transport::ServerTlsConfig::new().identity(
                        tonic::transport::Identity::from_pem(
                            &pki.server_cert_pem,
                            &pki.server_key_pem,
                        ),
                    );
                    if transport == Transport::MutualTls {
                        tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(
                            std::fs::read(&pki.ca).unwrap(),
                        ));
                    }
                    server = server.tls_config(tls).unwrap();
                }
                rt.spawn(async move {
                    let _ = server
                        .add_service(svc)
                        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                        .await;
                });
            }
            Proto::Http => {
                let r = received.clone();
                let p = paths.clone();
                let seen = seen.clone();
                let app = axum::Router::new().fallback(
                    move |uri: axum::http::Uri,
                          headers: axum::http::HeaderMap,
                          body: axum::body::Bytes| {
                        let r = r.clone();
                        let p = p.clone();
                        let seen = seen.clone();
                        async move {
                            p.lock().unwrap().push(uri.path().to_string());
                            seen.lock().unwrap().push(Seen {
                                headers: header_pairs(&headers),
                                client_certs: 0,
                            });
                            let body = if headers
                                .get("content-encoding")
                                .is_some_and(|e| e.as_bytes() == b"gzip")
                            {
                                let mut out = Vec::new();
                                if std::io::Read::read_to_end(
                                    &mut flate2::read::GzDecoder::new(&body[..]),
                                    &mut out,
                                )
                                .is_err()
                                {
                                    return (
                                        axum::http::StatusCode::BAD_REQUEST,
                                        [("content-type", "text/plain")],
                                        b"bad gzip".to_vec(),
                                    );
                                }
                                axum::body::Bytes::from(out)
                            } else {
                                body
                            };
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
                match transport {
                    Transport::Plain => {
                        rt.spawn(async move {
                            let _ = axum::serve(listener, app).await;
                        });
                    }
                    Transport::Tls | Transport::MutualTls => {
                        let pki = pki.expect("TLS needs certificates");
                        let tls = TlsListener {
                            tcp: listener,
                            acceptor: tokio_rustls::TlsAcceptor::from(rustls_server_config(
                                pki, transport,
                            )),
                            failed: handshake_failures.clone(),
                        };
                        rt.spawn(async move {
                            let _ = axum::serve(tls, app).await;
                        });
                    }
                }
            }
        }
        Receiver {
            received,
            paths,
            seen,
            handshake_failures,
            _rt: rt,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
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
    ("POD_UID", "6f0c2a4e-0d1b-4c55-9c1e-2f5a7d1e9b01"),
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
    assert_eq!(
        s(res, "k8s.pod.uid").as_deref(),
        Some("6f0c2a4e-0d1b-4c55-9c1e-2f5a7d1e9b01")
    );
    assert_eq!(s(res, "k8s.namespace.name").as_deref(), Some("ml"));
    assert_eq!(s(res, "k8s.container.name").as_deref(), Some("cuda"));
    assert_eq!(s(res, "k8s.node.name").as_deref(), Some("gpu-node-7"));
    // One instance per exporter (OTLP ingestion into Prometheus makes `instance` of it): the
    // sidecar's pod UID and container.
    assert_eq!(
        s(res, "service.instance.id").as_deref(),
        Some("6f0c2a4e-0d1b-4c55-9c1e-2f5a7d1e9b01.cuda")
    );
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
        ("hw.gpu.memory.utilization", "1"),
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
    // Memory utilization is usage over limit, point by point of the same GPU.
    let of_gpu = |name: &str| -> f64 {
        let m = find_metric(r, name).unwrap();
        let p = points(m)
            .iter()
            .find(|p| s(&p.attributes, "hw.id").as_deref() == Some(uuid.as_str()))
            .unwrap_or_else(|| panic!("{name}: no point of {uuid}"));
        value(p)
    };
    let ratio = of_gpu("hw.gpu.memory.usage") / of_gpu("hw.gpu.memory.limit");
    let utilization = of_gpu("hw.gpu.memory.utilization");
    assert!(
        (utilization - ratio).abs() < 1e-9 && utilization > 0.0,
        "memory utilization {utilization} vs usage / limit {ratio}"
    );
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

/// A sidecar on the fake driver's H100 (`uuid`) that counts 7 corrected errors, then
/// `sbe` since a reload `after_ms` after it loads, exporting over gRPC with delta
/// temporality every `export_ms` to a receiver that decodes the protobuf.
fn ecc_reload_sidecar(
    dir: &TempDir,
    uuid: &str,
    (after_ms, sbe): (u64, u64),
    export_ms: &str,
) -> (Receiver, Sidecar) {
    let scenario = dir.path().join("scenario.json");
    let device = serde_json::json!({
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": uuid,
        "architecture": "hopper",
        "memory_total_bytes": 85_520_809_984_u64,
        "util_percent": 100,
        "power_watts": 500,
        "ecc_sbe_volatile": 7,
        "ecc_dbe_volatile": 0,
        "ecc_reload": { "after_ms": after_ms, "sbe_volatile": sbe, "dbe_volatile": 0 },
    });
    let text =
        serde_json::json!({ "_comment": "An H100 whose ECC counts change.", "devices": [device] });
    std::fs::write(&scenario, text.to_string()).unwrap();
    delta_grpc_sidecar(dir, &scenario, export_ms)
}

/// A sidecar on the fake driver with `scenario`, sampling every 250 ms and exporting over
/// gRPC with delta temporality every `export_ms` to a receiver that decodes the protobuf.
fn delta_grpc_sidecar(
    dir: &TempDir,
    scenario: &std::path::Path,
    export_ms: &str,
) -> (Receiver, Sidecar) {
    let port = free_port();
    let rx = Receiver::start(Proto::Grpc, port);
    let endpoint = format!("http://127.0.0.1:{port}");
    let lib = truthscale_e2e::fake_nvml();
    let sidecar = Sidecar::start(
        &[
            &truthscale_e2e::nvml_args(lib, "250ms")[..],
            &["--otlp-endpoint", &endpoint],
        ]
        .concat(),
        &[
            ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta"),
            ("OTEL_METRIC_EXPORT_INTERVAL", export_ms),
        ],
        dir.path(),
    );
    (rx, sidecar)
}

/// Every delta the receiver got of `hw.errors`' volatile corrected errors (checked to be a
/// monotonic delta sum).
fn volatile_sbe_deltas(rx: &Receiver) -> Vec<f64> {
    rx.requests()
        .iter()
        .filter_map(|r| find_metric(r, "hw.errors"))
        .flat_map(|m| {
            let Some(metric::Data::Sum(sum)) = &m.data else {
                panic!("hw.errors is not a sum: {m:?}");
            };
            assert!(sum.is_monotonic);
            assert_eq!(
                sum.aggregation_temporality,
                AggregationTemporality::Delta as i32
            );
            sum.data_points.clone()
        })
        .filter(|p| {
            s(&p.attributes, "error.type").as_deref() == Some("sbe")
                && s(&p.attributes, "truthscale.ecc.scope").as_deref() == Some("volatile")
        })
        .map(|p| value(&p))
        .collect()
}

/// Wait until the receiver holds `n` requests.
fn wait_requests(rx: &Receiver, n: usize, sidecar: &Sidecar) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while rx.requests().len() < n {
        assert!(Instant::now() < deadline, "{}", sidecar.process.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A driver reload zeroes a GPU's volatile ECC counts: the fake driver's H100 counts 7
/// corrected errors, then, 6 s after it loads, 2 since the reload. `/metrics` shows the
/// reading as it is (Prometheus reads a reset counter as one); over OTLP with delta
/// temporality, where the SDK sends each export's difference, no delta is negative, and the
/// deltas add up to the 2 errors counted while the sidecar watched: the 7 it found at its
/// first reading are history, its baseline, never sent as new errors (a restart would send
/// them again). Received by a gRPC receiver that decodes the protobuf.
#[test]
fn a_driver_reload_never_sends_a_negative_delta() {
    let dir = TempDir::new("otlp-ecc-reload");
    let uuid = "GPU-ecc00000-0000-4000-8000-000000000001";
    let (rx, sidecar) = ecc_reload_sidecar(&dir, uuid, (6000, 2), "500");
    let volatile_sbe = |m: &[Sample]| {
        truthscale_e2e::value(
            m,
            "truthscale_gpu_ecc_errors_total",
            &[("kind", "sbe"), ("scope", "volatile")],
        )
    };
    sidecar.wait_for(Duration::from_secs(30), "the reload read", |m| {
        volatile_sbe(m) == Some(2.0)
    });
    // Exports after the reload was read.
    wait_requests(&rx, rx.requests().len() + 3, &sidecar);
    let deltas = volatile_sbe_deltas(&rx);
    assert!(deltas.iter().all(|d| *d >= 0.0), "{deltas:?}");
    assert_eq!(deltas.iter().sum::<f64>(), 2.0, "{deltas:?}");
    assert_eq!(volatile_sbe(&sidecar.metrics()), Some(2.0));
}

/// A counter the device kept starts, over OTLP with delta temporality, from the sidecar's
/// first reading of it, not from its reading at the first export: the fake H100 counts 7
/// corrected errors when the sidecar starts and 9 a second later, and the first export
/// comes 4 s in; the deltas add up to the 2 counted while the sidecar watched (from the
/// first export's reading, 9, they added up to 0). Received by a gRPC receiver that decodes
/// the protobuf.
#[test]
fn a_device_counter_counts_from_the_first_reading_not_the_first_export() {
    let dir = TempDir::new("otlp-first-reading");
    let uuid = "GPU-ecc00000-0000-4000-8000-000000000002";
    let (rx, sidecar) = ecc_reload_sidecar(&dir, uuid, (1000, 9), "4000");
    wait_requests(&rx, 2, &sidecar);
    let deltas = volatile_sbe_deltas(&rx);
    assert_eq!(deltas.iter().sum::<f64>(), 2.0, "{deltas:?}");
}

/// A GPU that falls off the bus is not read for about 10 s: the fake's H100 (300 W) is lost
/// after twelve energy readings, and truthscale looks for it again 10 s later. Under delta
/// temporality no export carries an energy point for it in that time (no change, not even
/// 0, for time nothing measured), and the first point after the gap is the energy used
/// over it, once: 300 W times the seconds between the points either side (within the jitter of
/// a 250 ms tick), not the counter's total (it starts at 10^6 J). Received by a gRPC
/// receiver that decodes the protobuf.
#[test]
fn a_gpu_not_read_sends_no_delta_then_its_increase_once() {
    const UUID: &str = "GPU-5f0c6a3e-8d3b-4c1e-9a7f-000000000008";
    let dir = TempDir::new("otlp-delta-lost");
    let scenario =
        truthscale_e2e::workspace().join("tests/fake-nvml/scenarios/h100-lost-recovers.json");
    let (rx, sidecar) = delta_grpc_sidecar(&dir, &scenario, "500");
    let served = |m: &[Sample]| truthscale_e2e::value(m, "truthscale_gpu_info", &[]).is_some();
    let lost = |m: &[Sample]| {
        truthscale_e2e::value(
            m,
            "truthscale_source_errors_total",
            &[("source", "nvml"), ("kind", "gpu_lost")],
        ) == Some(1.0)
    };
    let wait = Duration::from_secs(60);
    sidecar.wait_for(wait, "the GPU lost", |m| lost(m) && !served(m));
    sidecar.wait_for(wait, "the GPU back", |m| lost(m) && served(m));
    // The GPU's energy point in each export, after it was first read.
    let energy = |r: &ExportMetricsServiceRequest| {
        find_metric(r, "hw.energy").and_then(|m| {
            points(m)
                .iter()
                .find(|p| s(&p.attributes, "hw.id").as_deref() == Some(UUID))
                .map(|p| (p.time_unix_nano, value(p)))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (before, gap, after) = loop {
        let all: Vec<Option<(u64, f64)>> = rx.requests().iter().map(energy).collect();
        let first = all.iter().position(Option::is_some).unwrap_or(all.len());
        let seen = &all[first..];
        let back = seen
            .iter()
            .enumerate()
            .skip_while(|(_, p)| p.is_some())
            .find_map(|(k, p)| p.map(|p| (k, p)));
        if let Some((k, after)) = back {
            let none = seen[..k].iter().rev().take_while(|p| p.is_none()).count();
            break (seen[k - none - 1].unwrap(), none, after);
        }
        assert!(
            Instant::now() < deadline,
            "{all:?}\n{}",
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The fake's counter moves at every reading, so a point of 0 is an export without one;
    // but the tick that found the GPU lost read no energy and held the counter (as any
    // counter is held until it next moves, with its observed seconds), so the point before
    // the gap may be 0.
    let all: Vec<Option<(u64, f64)>> = rx.requests().iter().map(energy).collect();
    let zeros = all.iter().flatten().filter(|p| p.1 == 0.0).count();
    assert!(zeros <= usize::from(before.1 == 0.0), "{all:?}");
    assert!(
        gap >= 5,
        "{gap} exports without the GPU's point in about 10 s"
    );
    let seconds = (after.0 - before.0) as f64 / 1e9;
    let want = 300.0 * seconds;
    assert!(
        (after.1 - want).abs() <= 300.0,
        "{} J sent after {seconds} s without a reading, want {want} J",
        after.1
    );
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

/// The sidecar's environment with an export every 300 ms over HTTP/protobuf: failures come
/// fast enough to back off within a test.
fn every_300_ms_over_http() -> Vec<(&'static str, &'static str)> {
    let mut env: Vec<(&str, &str)> = ENV
        .iter()
        .copied()
        .filter(|(k, _)| *k != "OTEL_METRIC_EXPORT_INTERVAL")
        .collect();
    env.push(("OTEL_METRIC_EXPORT_INTERVAL", "300"));
    env.push(("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"));
    env
}

/// With delta temporality, a change whose export did not reach the collector (refused
/// while no collector listens, then skipped while backing off) is sent with the next export
/// that does: exports every 300 ms to a port where the collector comes up after the first
/// failures are counted, and the deltas of `truthscale.gpu.observed.time` received up to an
/// export add up to the counter `/metrics` showed for the same snapshot (matched on the
/// snapshot timestamp): the seconds observed during the outage included, none lost.
#[test]
fn delta_changes_lost_to_an_outage_are_sent_with_the_next_export() {
    let dir = TempDir::new("otlp-delta-outage");
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut env = every_300_ms_over_http();
    env.push(("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta"));
    env.push(("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    while sink_errors(&sidecar) < 2.0 {
        assert!(Instant::now() < deadline, "{}", sidecar.process.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    let rx = Receiver::start(Proto::Http, port);
    rx.wait_for(1, Duration::from_secs(45), &sidecar);
    let by_ts = poll_metrics(&sidecar, Duration::from_secs(4));
    let reqs = rx.requests();
    let mut sum = 0.0;
    let mut matched = 0;
    for r in &reqs {
        sum += find_metric(r, "truthscale.gpu.observed.time")
            .map_or(0.0, |m| points(m).iter().map(value).sum::<f64>());
        let Some(m) =
            gauge_value(r, "truthscale.snapshot.timestamp").and_then(|ts| by_ts.get(&ts.to_bits()))
        else {
            continue;
        };
        matched += 1;
        let want = prom(m, "truthscale_gpu_observed_seconds_total", None);
        assert!(
            (sum - want).abs() < 1e-9,
            "deltas add up to {sum} s, /metrics says {want} s"
        );
    }
    assert!(matched >= 2, "{matched} exports matched a polled snapshot");
}

/// With delta temporality, an export skipped while backing off is counted
/// (`kind="skipped"`); its changes go with the next export that reaches the collector.
/// With cumulative temporality the next export carries the totals, and a skip is no loss:
/// none is counted. Under delta the
/// count is written at 0 from the start (no skip can come before three failures), so the
/// first skip is an increase `rate()` sees.
#[test]
fn skipped_delta_exports_are_counted() {
    for (temporality, counted) in [("delta", true), ("cumulative", false)] {
        let dir = TempDir::new("otlp-skipped");
        let endpoint = format!("http://127.0.0.1:{}", free_port());
        let mut env = every_300_ms_over_http();
        env.push((
            "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
            temporality,
        ));
        let mut args = ARGS.to_vec();
        args.extend(["--otlp-endpoint", &endpoint]);
        let sidecar = Sidecar::start(&args, &env, dir.path());
        // The first scrape with the sink's counts (registered at 0, `unavailable` among
        // them): `skipped` is there too under delta, before any skip could be.
        let kind = |m: &[Sample], k: &str| {
            m.iter()
                .find(|s| {
                    s.name == "truthscale_sink_errors_total"
                        && s.label("sink") == Some("otlp")
                        && s.label("kind") == Some(k)
                })
                .map(|s| s.value)
        };
        let first = sidecar.wait_for(Duration::from_secs(20), "the sink's counts", |m| {
            kind(m, "unavailable").is_some()
        });
        assert_eq!(
            kind(&first, "skipped"),
            counted.then_some(0.0),
            "{temporality}: skipped written at 0 from the start"
        );
        // Three failures start the backoff; exports every 300 ms fall within it.
        let deadline = Instant::now() + Duration::from_secs(20);
        while sink_errors(&sidecar) - errors_of_kind(&sidecar, "skipped") < 3.0 {
            assert!(Instant::now() < deadline, "fewer than three failed exports");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(2));
        let skipped = errors_of_kind(&sidecar, "skipped");
        assert_eq!(
            skipped > 0.0,
            counted,
            "{temporality}: {skipped} skipped counted"
        );
    }
}

/// The collector was down long enough for exports to back off (4 s after three failures);
/// it comes back and the process is stopped within the backoff: the final export is sent,
/// not skipped in silence with everything since the last one.
#[test]
fn the_final_export_is_sent_even_while_backing_off() {
    let dir = TempDir::new("otlp-final");
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = every_300_ms_over_http();
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let mut sidecar = Sidecar::start(&args, &env, dir.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    while sink_errors(&sidecar) < 3.0 {
        assert!(
            Instant::now() < deadline,
            "fewer than three failed exports; stderr:\n{}",
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let rx = Receiver::start(Proto::Http, port);
    sidecar.process.signal("TERM");
    sidecar
        .process
        .wait_timeout(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("still running after SIGTERM:\n{}", sidecar.process.stderr()));
    assert!(
        !rx.requests().is_empty(),
        "no final export reached the collector; stderr:\n{}",
        sidecar.process.stderr()
    );
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

/// An OTLP/HTTP collector that accepts each export (200) but rejects part of it, as its
/// answer's `partial_success` says: counted as `rejected` and logged with the collector's
/// message, never taken as a full success in silence.
#[test]
fn http_partial_success_is_counted_and_logged() {
    let dir = TempDir::new("otlp-partial");
    let port = free_port();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
        .unwrap();
    let app = axum::Router::new().fallback(|_body: axum::body::Bytes| async {
        let answer = ExportMetricsServiceResponse {
            partial_success: Some(
                opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess {
                    rejected_data_points: 7,
                    error_message: "too many series for tenant".into(),
                },
            ),
        };
        (
            [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
            answer.encode_to_vec(),
        )
    });
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut env = ENV.to_vec();
    env.push(("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    while errors_of_kind(&sidecar, "rejected") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "no partial rejection counted; stderr:\n{}",
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(errors_of_kind(&sidecar, "unavailable"), 0.0);
    let stderr = sidecar.process.stderr();
    assert!(
        stderr.contains("partial success") && stderr.contains("too many series for tenant"),
        "{stderr}"
    );
    assert!(stderr.contains("rejected_data_points=7"), "{stderr}");
}

/// An OTLP/HTTP collector that answers with a redirect (to plain HTTP elsewhere): the
/// export is not sent there, and the failure is counted.
#[test]
fn http_collector_redirect_is_not_followed() {
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let target = format!("http://{}/v1/metrics", elsewhere.local_addr().unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().fallback(move |_body: axum::body::Bytes| {
        let target = target.clone();
        async move {
            (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, target)],
                "moved",
            )
        }
    });
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let dir = TempDir::new("otlp-redirect");
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut env = ENV.to_vec();
    env.push(("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let failed = |s: &Sidecar| {
        s.metrics()
            .iter()
            .filter(|m| m.name == "truthscale_sink_errors_total" && m.label("sink") == Some("otlp"))
            .map(|m| m.value)
            .sum::<f64>()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while failed(&sidecar) < 2.0 {
        assert!(
            Instant::now() < deadline,
            "no export failure counted:\n{}",
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        elsewhere.accept().is_err(),
        "the export followed the redirect"
    );
}

/// An OTLP/HTTP collector that answers 200 with 8 MiB: the answer is read to 4 MiB at most
/// (opentelemetry-http's cap) and the export counted as failed, export after export.
#[test]
fn http_collector_answering_huge_is_counted() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let app =
        axum::Router::new().fallback(|_body: axum::body::Bytes| async { vec![b'x'; 8 << 20] });
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let dir = TempDir::new("otlp-huge-answer");
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut env = ENV.to_vec();
    env.push(("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let failed = |s: &Sidecar| {
        s.metrics()
            .iter()
            .filter(|m| m.name == "truthscale_sink_errors_total" && m.label("sink") == Some("otlp"))
            .map(|m| m.value)
            .sum::<f64>()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while failed(&sidecar) < 2.0 {
        assert!(
            Instant::now() < deadline,
            "no export failure counted:\n{}",
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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

fn protocol_env(proto: Proto) -> (&'static str, &'static str) {
    (
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        if proto == Proto::Grpc {
            "grpc"
        } else {
            "http/protobuf"
        },
    )
}

fn errors_of_kind(s: &Sidecar, kind: &str) -> f64 {
    s.metrics()
        .iter()
        .filter(|m| {
            m.name == "truthscale_sink_errors_total"
                && m.label("sink") == Some("otlp")
                && m.label("kind") == Some(kind)
        })
        .map(|m| m.value)
        .sum()
}

/// Wait until a failure of `kind` is counted; the stderr then.
fn wait_for_failure(sidecar: &Sidecar, kind: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while errors_of_kind(sidecar, kind) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "no {kind} failure counted; unavailable = {}, rejected = {}, other = {}, timeout = {}; stderr:\n{}",
            errors_of_kind(sidecar, "unavailable"),
            errors_of_kind(sidecar, "rejected"),
            errors_of_kind(sidecar, "other"),
            errors_of_kind(sidecar, "timeout"),
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The warning is written right after the count.
    std::thread::sleep(Duration::from_millis(200));
    sidecar.process.stderr()
}

/// Over TLS, with a client certificate the collector requires, headers and gzip: each set
/// another way (the standard variables, and truthscale's keys through `TRUTHSCALE_OTLP__…`)
/// so that the precedence is exercised too.
fn check_tls_push(proto: Proto) {
    let dir = TempDir::new("otlp-tls");
    let pki = Pki::generate(dir.path());
    let port = free_port();
    let rx = Receiver::start_with(proto, port, Transport::MutualTls, Some(&pki));
    let endpoint = match proto {
        Proto::Grpc => format!("https://127.0.0.1:{port}"),
        Proto::Http => format!("https://localhost:{port}"),
    };
    let mut env = ENV.to_vec();
    let mut args = ARGS.to_vec();
    env.push(protocol_env(proto));
    // Headers: the variable's, with `x-tenant` overridden by the key.
    env.push((
        "OTEL_EXPORTER_OTLP_HEADERS",
        "x-api-key=key%20one,x-tenant=from-variable",
    ));
    env.push(("TRUTHSCALE_OTLP__HEADERS", "x-tenant=from-config"));
    match proto {
        // gRPC: the flag, and the generic variables.
        Proto::Grpc => {
            args.extend(["--otlp-endpoint", &endpoint]);
            env.push(("OTEL_EXPORTER_OTLP_CERTIFICATE", &pki.ca));
            env.push(("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &pki.client_cert));
            env.push(("OTEL_EXPORTER_OTLP_CLIENT_KEY", &pki.client_key));
            env.push(("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"));
        }
        // HTTP: the endpoint variable; the signal-specific CA over a wrong generic one;
        // the client certificate and compression by truthscale's keys.
        Proto::Http => {
            env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint));
            env.push(("OTEL_EXPORTER_OTLP_CERTIFICATE", &pki.wrong_ca));
            env.push(("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", &pki.ca));
            env.push(("TRUTHSCALE_OTLP__CLIENT_CERTIFICATE", &pki.client_cert));
            env.push(("TRUTHSCALE_OTLP__CLIENT_KEY", &pki.client_key));
            env.push(("TRUTHSCALE_OTLP__COMPRESSION", "gzip"));
        }
    }
    let sidecar = Sidecar::start(&args, &env, dir.path());
    rx.wait_for(2, Duration::from_secs(20), &sidecar);
    assert_eq!(
        sink_errors(&sidecar),
        0.0,
        "stderr:\n{}",
        sidecar.process.stderr()
    );
    assert!(
        rx.handshake_failures.lock().unwrap().is_empty(),
        "{:?}",
        rx.handshake_failures.lock().unwrap()
    );
    let stderr = sidecar.process.stderr();
    assert!(
        stderr.contains("Pushing metrics over OTLP") && stderr.contains(&pki.ca),
        "the start is logged with the CA in use:\n{stderr}"
    );
    let seen = rx.seen();
    assert!(!seen.is_empty());
    for s in &seen {
        assert_eq!(s.all("x-api-key"), ["key one"], "{s:?}");
        assert_eq!(s.all("x-tenant"), ["from-config"], "{s:?}");
        let encoding = match proto {
            Proto::Grpc => "grpc-encoding",
            Proto::Http => "content-encoding",
        };
        assert_eq!(s.all(encoding), ["gzip"], "{s:?}");
        if proto == Proto::Grpc {
            assert_eq!(s.client_certs, 1, "the client certificate was presented");
        }
    }
    if proto == Proto::Http {
        assert!(
            rx.paths.lock().unwrap().iter().all(|p| p == "/v1/metrics"),
            "{:?}",
            rx.paths.lock().unwrap()
        );
    }
    // The compressed bodies decoded into the metrics.
    let r = rx
        .requests()
        .into_iter()
        .rev()
        .find(|r| find_metric(r, "truthscale.gpu.observed.time").is_some())
        .unwrap();
    assert!(gauge_value(&r, "truthscale.snapshot.timestamp").is_some_and(|t| t > 0.0));
    assert!(find_metric(&r, "hw.gpu.utilization").is_some());
}

#[test]
fn grpc_tls_push_with_client_certificate_headers_and_gzip() {
    check_tls_push(Proto::Grpc);
}

#[test]
fn http_tls_push_with_client_certificate_headers_and_gzip() {
    check_tls_push(Proto::Http);
}

/// A collector whose certificate another CA signed: nothing is delivered, each failure is
/// counted as `other` (never `unavailable`), and the log says why and names the CA setting.
fn check_wrong_ca(proto: Proto) {
    let dir = TempDir::new("otlp-wrong-ca");
    let pki = Pki::generate(dir.path());
    let port = free_port();
    let rx = Receiver::start_with(proto, port, Transport::Tls, Some(&pki));
    let endpoint = format!("https://127.0.0.1:{port}");
    let mut env = ENV.to_vec();
    env.push(protocol_env(proto));
    env.push(("OTEL_EXPORTER_OTLP_CERTIFICATE", &pki.wrong_ca));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let stderr = wait_for_failure(&sidecar, "other");
    assert_eq!(errors_of_kind(&sidecar, "unavailable"), 0.0, "{stderr}");
    assert_eq!(errors_of_kind(&sidecar, "rejected"), 0.0, "{stderr}");
    for want in [
        "TLS handshake with the collector failed",
        "UnknownIssuer",
        "not signed by a CA truthscale trusts",
        pki.wrong_ca.as_str(),
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
    ] {
        assert!(stderr.contains(want), "{want:?} not in the log:\n{stderr}");
    }
    assert!(rx.requests().is_empty(), "nothing is delivered");
    if proto == Proto::Http {
        assert!(!rx.handshake_failures.lock().unwrap().is_empty());
    }
}

#[test]
fn grpc_tls_wrong_ca_is_counted_and_explained() {
    check_wrong_ca(Proto::Grpc);
}

#[test]
fn http_tls_wrong_ca_is_counted_and_explained() {
    check_wrong_ca(Proto::Http);
}

/// A collector that requires a client certificate, and none is set: counted as `other`, and
/// the log names the client certificate settings. (With TLS 1.3 the collector refuses the
/// client after the handshake, so an attempt whose connection is cut before its alert is read
/// counts as `unavailable`; at least one reads the alert.)
fn check_missing_client_certificate(proto: Proto) {
    let dir = TempDir::new("otlp-no-client-cert");
    let pki = Pki::generate(dir.path());
    let port = free_port();
    let rx = Receiver::start_with(proto, port, Transport::MutualTls, Some(&pki));
    let endpoint = format!("https://127.0.0.1:{port}");
    let mut env = ENV.to_vec();
    env.push(protocol_env(proto));
    env.push(("OTEL_EXPORTER_OTLP_CERTIFICATE", &pki.ca));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let stderr = wait_for_failure(&sidecar, "other");
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
        "the hint names the client certificate:\n{stderr}"
    );
    // Every attempt is `other`, however the refusal reached the client (with TLS 1.3 it
    // often arrives as a cut connection, not as the collector's alert).
    for kind in ["unavailable", "timeout", "rejected"] {
        assert_eq!(errors_of_kind(&sidecar, kind), 0.0, "{kind}:\n{stderr}");
    }
    assert!(rx.requests().is_empty(), "nothing is delivered");
}

#[test]
fn grpc_tls_missing_client_certificate_is_explained() {
    check_missing_client_certificate(Proto::Grpc);
}

#[test]
fn http_tls_missing_client_certificate_is_explained() {
    check_missing_client_certificate(Proto::Http);
}

/// Without a CA setting the collector is checked against the system roots, which
/// `SSL_CERT_FILE` replaces (here with the test CA): delivered over both protocols.
fn check_system_roots(proto: Proto) {
    let dir = TempDir::new("otlp-system-roots");
    let pki = Pki::generate(dir.path());
    let port = free_port();
    let rx = Receiver::start_with(proto, port, Transport::Tls, Some(&pki));
    let endpoint = format!("https://localhost:{port}");
    let mut env = ENV.to_vec();
    env.push(protocol_env(proto));
    env.push(("SSL_CERT_FILE", &pki.ca));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    rx.wait_for(1, Duration::from_secs(20), &sidecar);
    let stderr = sidecar.process.stderr();
    assert!(
        stderr.contains("tls=\"the system roots\""),
        "the start says what the certificate is checked against:\n{stderr}"
    );
}

/// A gRPC endpoint without a scheme (`127.0.0.1:PORT`) is TLS, as the SDK and the docs say:
/// the collector's CA given, exports arrive. Its requests went out without a scheme, and
/// tonic refused every one as an invalid URI (counted `unavailable`, nothing delivered).
#[test]
fn grpc_tls_to_an_endpoint_without_a_scheme_delivers() {
    let dir = TempDir::new("otlp-grpc-bare");
    let pki = Pki::generate(dir.path());
    let port = free_port();
    let rx = Receiver::start_with(Proto::Grpc, port, Transport::Tls, Some(&pki));
    let endpoint = format!("127.0.0.1:{port}");
    let mut env = ENV.to_vec();
    env.push(protocol_env(Proto::Grpc));
    env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint));
    env.push(("OTEL_EXPORTER_OTLP_CERTIFICATE", &pki.ca));
    let sidecar = Sidecar::start(ARGS, &env, dir.path());
    rx.wait_for(1, Duration::from_secs(20), &sidecar);
    assert_eq!(errors_of_kind(&sidecar, "unavailable"), 0.0);
}

#[test]
fn grpc_tls_system_roots_deliver() {
    check_system_roots(Proto::Grpc);
}

#[test]
fn http_tls_system_roots_deliver() {
    check_system_roots(Proto::Http);
}

/// A CA file that does not exist, or holds no certificate, stops the start with a message
/// that names the variable or key and the file; so do system roots that hold none.
#[test]
fn otlp_bad_ca_file_stops_the_start() {
    let dir = TempDir::new("otlp-bad-ca");
    let missing = dir.path().join("missing.pem").display().to_string();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let garbage = garbage.display().to_string();
    for (env, name, file, why) in [
        (
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", missing.as_str()),
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            missing.as_str(),
            "cannot read",
        ),
        (
            ("TRUTHSCALE_OTLP__CERTIFICATE", garbage.as_str()),
            "otlp.certificate",
            garbage.as_str(),
            "no PEM certificate",
        ),
        (
            ("SSL_CERT_FILE", garbage.as_str()),
            "otlp.certificate",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            "no CA certificates found in the system store",
        ),
    ] {
        let mut cmd = truthscale_e2e::clean_command();
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(ARGS)
            .args(["--otlp-endpoint", "https://127.0.0.1:9"])
            .env(env.0, env.1);
        let mut p = truthscale_e2e::Spawned::start(cmd, dir.path(), "truthscale-bad-ca");
        let status = p.wait_timeout(Duration::from_secs(30));
        let stderr = p.stderr();
        if status.is_none() {
            p.kill();
        }
        let status = status.unwrap_or_else(|| panic!("{env:?}: kept running:\n{stderr}"));
        assert!(!status.success(), "{env:?}: started:\n{stderr}");
        assert!(
            stderr.contains(name) && stderr.contains(file) && stderr.contains(why),
            "{env:?}: the error names {name}, {file} and {why:?}:\n{stderr}"
        );
    }
}

/// Label hygiene over OTLP: a pod identity with quotes, a backslash, a newline and non-ASCII
/// arrives as the very same strings in the resource attributes, the protobuf decoding it
/// whole.
#[test]
fn awkward_identities_arrive_exact_over_otlp() {
    const POD: &str = "we\"ird\\pod\nname-é日本";
    const NAMESPACE: &str = "ns-\"quoted\"";
    let dir = TempDir::new("otlp-hygiene");
    let port = free_port();
    let rx = Receiver::start(Proto::Http, port);
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = [
        ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("POD_NAME", POD),
        ("POD_NAMESPACE", NAMESPACE),
        ("NODE_NAME", "nœud-⚙"),
    ];
    let sidecar = Sidecar::start(ARGS, &env, dir.path());
    rx.wait_for(1, Duration::from_secs(20), &sidecar);
    let reqs = rx.requests();
    let res = &reqs
        .iter()
        .find(|r| find_metric(r, "truthscale.gpu.observed.time").is_some())
        .unwrap()
        .resource_metrics[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes;
    assert_eq!(s(res, "k8s.pod.name").as_deref(), Some(POD));
    assert_eq!(s(res, "k8s.namespace.name").as_deref(), Some(NAMESPACE));
    assert_eq!(s(res, "k8s.node.name").as_deref(), Some("nœud-⚙"));
    let instance = s(res, "service.instance.id").expect("service.instance.id");
    assert!(instance.contains(POD), "{instance}");
}

/// A collector whose first connection trickles its answer (a byte every 300 ms, never
/// finishing) and whose later connections answer at once; what it saw.
struct TricklingThenHealthy {
    addr: std::net::SocketAddr,
    /// Exports answered on the later connections.
    answered: Arc<AtomicUsize>,
    /// Set when the trickling connection is closed by the exporter.
    trickle_closed: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl TricklingThenHealthy {
    fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let this = Self {
            addr: listener.local_addr().unwrap(),
            answered: Arc::default(),
            trickle_closed: Arc::default(),
            stop: Arc::default(),
        };
        let (answered, closed, stop) = (
            Arc::clone(&this.answered),
            Arc::clone(&this.trickle_closed),
            Arc::clone(&this.stop),
        );
        std::thread::spawn(move || {
            let mut first = true;
            while !stop.load(Ordering::SeqCst) {
                let Ok((c, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                let (answered, closed, stop) = (
                    Arc::clone(&answered),
                    Arc::clone(&closed),
                    Arc::clone(&stop),
                );
                if std::mem::take(&mut first) {
                    std::thread::spawn(move || trickle(c, &closed, &stop));
                } else {
                    std::thread::spawn(move || answer_each(c, &answered));
                }
            }
        });
        this
    }
}

impl Drop for TricklingThenHealthy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Read one request's head and body from `c`; false at the connection's end.
fn read_request(c: &mut std::io::BufReader<std::net::TcpStream>) -> bool {
    use std::io::{BufRead as _, Read as _};
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if c.read_line(&mut line).unwrap_or(0) == 0 {
            return false;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).is_ok()
}

/// Answer the first request's head, then a byte every 300 ms until the peer closes.
fn trickle(c: std::net::TcpStream, closed: &AtomicBool, stop: &AtomicBool) {
    use std::io::Write as _;
    let mut reader = std::io::BufReader::new(c.try_clone().unwrap());
    let mut c = c;
    if !read_request(&mut reader) {
        return;
    }
    let head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100000\r\n\r\n";
    let _ = c.write_all(head);
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(300));
        if c.write_all(b"\0").and_then(|()| c.flush()).is_err() {
            closed.store(true, Ordering::SeqCst);
            return;
        }
    }
}

/// Answer every request on `c` at once with an empty (successful) export answer.
fn answer_each(c: std::net::TcpStream, answered: &AtomicUsize) {
    use std::io::Write as _;
    let mut reader = std::io::BufReader::new(c.try_clone().unwrap());
    let mut c = c;
    while read_request(&mut reader) {
        let ok =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
        if c.write_all(ok).is_err() {
            return;
        }
        answered.fetch_add(1, Ordering::SeqCst);
    }
}

/// A collector whose first answer trickles forever, then answers new connections at once:
/// the stuck exchange used to keep its in-flight flag, so every later export was refused
/// unsent (0 exports in 60 s). The stuck exchange is abandoned at its deadline (the 1 s
/// export timeout), counted once as `timeout`, its connection closed, and exports resume
/// on a fresh connection within one interval (1 s) of it.
#[test]
fn http_exports_resume_after_a_trickling_answer() {
    let collector = TricklingThenHealthy::start();
    let dir = TempDir::new("otlp-trickle-recovers");
    let endpoint = format!("http://{}", collector.addr);
    let mut env = ENV.to_vec();
    env.push(("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"));
    env.push(("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    wait_for_failure(&sidecar, "timeout");
    let timed_out = Instant::now();
    while collector.answered.load(Ordering::SeqCst) == 0 {
        assert!(
            // One interval after the timeout, with room for a loaded machine; the defect
            // was none in 60 s.
            timed_out.elapsed() < Duration::from_millis(4000),
            "no export answered within one interval of the timeout; stderr:\n{}",
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = collector.answered.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(3500));
    let later = collector.answered.load(Ordering::SeqCst) - first;
    // Three or four at a 1 s interval; at least one more on a loaded machine, never none.
    assert!(
        (1..=5).contains(&later),
        "{later} exports answered in 3.5 s at a 1 s interval"
    );
    assert!(collector.trickle_closed.load(Ordering::SeqCst));
    assert_eq!(errors_of_kind(&sidecar, "timeout"), 1.0);
    assert_eq!(errors_of_kind(&sidecar, "unavailable"), 0.0);
    assert_eq!(errors_of_kind(&sidecar, "other"), 0.0);
}

/// A collector that answers HTTP/protobuf a byte every 300 ms: each read is within a
/// per-read timeout, so the export used to hang for as long as it trickled (one export in
/// 45 s, nothing counted). The whole exchange has one deadline, and the failure is a
/// `timeout` (that the next export then goes out: `http_exports_resume_after_a_trickling_answer`).
#[test]
fn http_trickling_collector_is_a_timeout() {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = std::sync::Arc::clone(&stop);
    listener.set_nonblocking(true).unwrap();
    let server = std::thread::spawn(move || {
        let mut conns = Vec::new();
        while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
            if let Ok((mut c, _)) = listener.accept() {
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                let mut buf = [0u8; 65536];
                let _ = c.read(&mut buf);
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100000\r\n\r\n",
                );
                conns.push(c);
            }
            for c in &mut conns {
                let _ = c.write_all(b"\0");
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let dir = TempDir::new("otlp-trickle");
    let endpoint = format!("http://{addr}");
    let mut env = ENV.to_vec();
    env.push(("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"));
    env.push(("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"));
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let sidecar = Sidecar::start(&args, &env, dir.path());
    let started = Instant::now();
    let stderr = wait_for_failure(&sidecar, "timeout");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the first timeout took {:?}",
        started.elapsed()
    );
    assert!(
        stderr.contains("timeout") || stderr.contains("trickl"),
        "{stderr}"
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(sidecar);
    let _ = server.join();
}
