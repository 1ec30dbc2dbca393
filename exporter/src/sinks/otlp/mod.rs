//! OTLP push: the same values as `/metrics`, over gRPC or HTTP/protobuf.
//!
//! Every OTLP instrument is an asynchronous (observable) one, named by
//! [`truthscale_core::catalog`] (`MetricDesc::otel`). Callbacks never sample: they read the
//! latest [`Snapshot`] from the sidecar's `watch` channel, and take their values from
//! [`exposition::for_each_value`], the function `/metrics` is encoded from. The first
//! callback of a collection pins one snapshot and the others read that pinned one (the SDK
//! runs callbacks in registration order), so one export never mixes two ticks, and
//! `truthscale.snapshot.timestamp` says which tick it was.
//!
//! The SDK's `PeriodicReader` collects and exports on its own thread, so a slow or absent
//! collector never blocks sampling or `/metrics`. Nothing is queued between exports (the
//! reader keeps only the current aggregation), so memory stays bounded through an outage;
//! with cumulative temporality nothing is lost either, since the next export carries the
//! totals. Failures are counted in `truthscale_sink_errors_total{sink="otlp",kind}` by an
//! exporter wrapper ([`CountingExporter`]), logged at most every 30 s (a failure of another
//! kind, or the first after a success, at once), and back off:
//! after repeated failures, exports are skipped for up to 30 s.
//!
//! Standard `OTEL_…` variables work as the SDK defines them; truthscale's own `[otlp]`
//! settings are passed to the SDK only when set, and then win.
//!
//! `https://` endpoints use rustls (ring) for both protocols, checking the collector against
//! the CA file of `otlp.certificate` / `OTEL_EXPORTER_OTLP_(METRICS_)CERTIFICATE`, else the
//! system roots, and presenting the client certificate when one is set (mutual TLS). The
//! HTTP client is truthscale's own (a blocking reqwest client with that rustls
//! configuration), handed to the SDK; it also keeps the transport error the SDK reduces to
//! "network error", so that a failed handshake is logged with its cause and a hint.

pub mod config;

use crate::publish::{SinkErrors, Snapshot, VERSION};
use anyhow::Context as _;
use config::{OtlpCompression, OtlpProtocol, OtlpSettings, OtlpTemporality};
use opentelemetry::metrics::{
    AsyncInstrument, Meter, MeterProvider as _, ObservableCounter, ObservableGauge,
    ObservableUpDownCounter,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{
    Compression, MetricExporter, Protocol, WithExportConfig as _, WithHttpConfig as _,
    WithTonicConfig as _,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use truthscale_core::catalog::{self, MetricId, OtelInstrument, Scope};
use truthscale_core::exposition::{self, Identity};

/// The `sink` label value of OTLP failures.
pub const SINK: &str = "otlp";

/// Failure kinds counted in `truthscale_sink_errors_total{sink="otlp"}`.
pub const ERROR_KINDS: [&str; 4] = ["unavailable", "timeout", "rejected", "other"];

/// Repeated failures of one kind are logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Longest pause between export attempts while the collector keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The values of one pinned snapshot, per catalog family: indexed by
/// [`MetricId::index`](truthscale_core::catalog::MetricId::index), empty for a family
/// without an OTLP name.
#[derive(Debug, Default)]
struct Pinned {
    tick: u64,
    families: Vec<Vec<(Vec<KeyValue>, f64)>>,
}

#[derive(Debug)]
struct Shared {
    rx: watch::Receiver<Arc<Snapshot>>,
    pinned: Mutex<Pinned>,
}

impl Shared {
    /// Pin the latest snapshot (first callback of a collection).
    fn pin(&self) {
        let snap = self.rx.borrow().clone();
        let Ok(mut p) = self.pinned.lock() else {
            return;
        };
        if p.tick == snap.tick && !p.families.is_empty() {
            return;
        }
        p.tick = snap.tick;
        p.families = vec![Vec::new(); catalog::ALL.len()];
        if !snap.ready() {
            return;
        }
        exposition::for_each_value(&snap.gpus, &snap.identity, &snap.status, |m, labels, v| {
            let Some(o) = m.otel else { return };
            let mut attrs: Vec<KeyValue> = Vec::with_capacity(labels.len() + 4);
            if m.scope == Scope::Gpu {
                attrs.extend(
                    catalog::OTEL_GPU_FIXED
                        .iter()
                        .map(|(k, v)| KeyValue::new(*k, *v)),
                );
            }
            attrs.extend(o.fixed.iter().map(|(k, v)| KeyValue::new(*k, *v)));
            for (l, val) in labels {
                let key = catalog::otel_attribute(l).unwrap_or(l);
                attrs.push(KeyValue::new(key, (*val).to_string()));
            }
            p.families[m.id.index()].push((attrs, v));
        });
    }

    fn observe_f64(&self, id: MetricId, obs: &dyn AsyncInstrument<f64>) {
        if let Ok(p) = self.pinned.lock()
            && let Some(points) = p.families.get(id.index())
        {
            for (attrs, v) in points {
                obs.observe(*v, attrs);
            }
        }
    }

    fn observe_i64(&self, id: MetricId, obs: &dyn AsyncInstrument<i64>) {
        if let Ok(p) = self.pinned.lock()
            && let Some(points) = p.families.get(id.index())
        {
            for (attrs, v) in points {
                // Memory sizes: integral byte counts, exactly representable.
                obs.observe(v.round() as i64, attrs);
            }
        }
    }
}

/// One registered instrument (kept so that its callback stays registered).
#[derive(Debug)]
enum Instrument {
    Gauge(ObservableGauge<f64>),
    Counter(ObservableCounter<f64>),
    UpDown(ObservableUpDownCounter<i64>),
}

/// The instruments [`register`] created; dropping it does not unregister them (the SDK
/// has no unregistration), it only lets them go.
#[derive(Debug)]
pub struct Registration {
    _instruments: Vec<Instrument>,
}

/// Register one observable instrument per catalog family that has an OTLP name on
/// `meter`, in catalog order, reading values from the sidecar's snapshots
/// (`Sidecar::subscribe`); each callback reads its family's values by [`MetricId`].
///
/// For a service that already has an OpenTelemetry `MeterProvider`: its own reader and
/// exporter then carry truthscale's metrics, with the values `/metrics` shows.
#[must_use]
pub fn register(meter: &Meter, rx: watch::Receiver<Arc<Snapshot>>) -> Registration {
    let shared = Arc::new(Shared {
        rx,
        pinned: Mutex::new(Pinned::default()),
    });
    let families = catalog::ALL
        .iter()
        .filter_map(|m| Some((m, m.otel?)))
        .enumerate();
    let mut instruments = Vec::with_capacity(catalog::ALL.len());
    for (i, (m, o)) in families {
        let s = Arc::clone(&shared);
        let id = m.id;
        // The first registered callback pins the snapshot for the whole collection.
        let first = i == 0;
        let inst = match o.instrument {
            OtelInstrument::Gauge => Instrument::Gauge(
                meter
                    .f64_observable_gauge(o.name)
                    .with_unit(o.unit)
                    .with_description(m.help)
                    .with_callback(move |obs| {
                        if first {
                            s.pin();
                        }
                        s.observe_f64(id, obs);
                    })
                    .build(),
            ),
            OtelInstrument::Counter => Instrument::Counter(
                meter
                    .f64_observable_counter(o.name)
                    .with_unit(o.unit)
                    .with_description(m.help)
                    .with_callback(move |obs| {
                        if first {
                            s.pin();
                        }
                        s.observe_f64(id, obs);
                    })
                    .build(),
            ),
            OtelInstrument::UpDownCounter => Instrument::UpDown(
                meter
                    .i64_observable_up_down_counter(o.name)
                    .with_unit(o.unit)
                    .with_description(m.help)
                    .with_callback(move |obs| {
                        if first {
                            s.pin();
                        }
                        s.observe_i64(id, obs);
                    })
                    .build(),
            ),
        };
        instruments.push(inst);
    }
    Registration {
        _instruments: instruments,
    }
}

/// The resource: `service.name` (default `truthscale`), `service.version`, `host.name`
/// and the `k8s.*` identity, overridden by `OTEL_RESOURCE_ATTRIBUTES`, then by
/// `OTEL_SERVICE_NAME`.
#[must_use]
pub fn resource(identity: &Identity) -> Resource {
    let mut attrs = vec![
        KeyValue::new("service.name", "truthscale"),
        KeyValue::new("service.version", VERSION),
    ];
    if let Some(h) = hostname() {
        attrs.push(KeyValue::new("host.name", h));
    }
    let k8s = [
        ("k8s.pod.name", &identity.pod),
        ("k8s.namespace.name", &identity.namespace),
        ("k8s.container.name", &identity.container),
        ("k8s.node.name", &identity.node),
    ];
    for (k, v) in k8s {
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            attrs.push(KeyValue::new(k, v.clone()));
        }
    }
    let mut b = Resource::builder_empty()
        .with_attributes(attrs)
        .with_detectors(&[
            Box::new(TelemetryResourceDetector),
            Box::new(EnvResourceDetector::new()),
        ]);
    if let Some(name) = env_nonempty("OTEL_SERVICE_NAME") {
        b = b.with_service_name(name);
    }
    b.build()
}

fn env_nonempty(k: &str) -> Option<String> {
    std::env::var(k)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn hostname() -> Option<String> {
    env_nonempty("HOSTNAME").or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
    })
}

/// The protocol: truthscale's setting, else `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`, else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, else HTTP/protobuf (the SDK's order).
fn protocol(configured: Option<OtlpProtocol>) -> anyhow::Result<OtlpProtocol> {
    if let Some(p) = configured {
        return Ok(p);
    }
    for var in [
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(v) = env_nonempty(var) {
            return OtlpProtocol::parse(&v).with_context(|| {
                format!("{var}={v:?} is not one of grpc, http/protobuf (http/json is not built in)")
            });
        }
    }
    Ok(OtlpProtocol::HttpProtobuf)
}

/// `http://host:4318` → `http://host:4318/v1/metrics`; a URL with a path is kept.
fn http_metrics_url(base: &str) -> String {
    let after_scheme = base.split_once("://").map_or(base, |(_, r)| r);
    match after_scheme.find('/') {
        Some(i) if after_scheme[i..] != *"/" => base.to_string(),
        _ => format!("{}/v1/metrics", base.trim_end_matches('/')),
    }
}

/// The endpoint in force and what set it, resolved as the SDK resolves it: truthscale's
/// setting, else `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT`,
/// else the SDK default.
fn endpoint(configured: Option<&str>, proto: OtlpProtocol) -> (String, &'static str) {
    if let Some(e) = configured {
        return (e.to_string(), "otlp.endpoint");
    }
    for var in [
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ] {
        if let Some(v) = env_nonempty(var) {
            return (v, var);
        }
    }
    let default = match proto {
        OtlpProtocol::Grpc => "http://localhost:4317",
        OtlpProtocol::HttpProtobuf => "http://localhost:4318/v1/metrics",
    };
    (default.to_string(), "the SDK default")
}

/// Whether exports to `endpoint` use TLS: `https://`, or (gRPC) an endpoint without a
/// scheme unless `OTEL_EXPORTER_OTLP_(METRICS_)INSECURE=true`, as the SDK decides.
fn uses_tls(endpoint: &str, proto: OtlpProtocol) -> bool {
    let e = endpoint.trim().to_ascii_lowercase();
    if e.starts_with("https://") {
        return true;
    }
    if e.contains("://") {
        return false;
    }
    let insecure = env_nonempty("OTEL_EXPORTER_OTLP_METRICS_INSECURE")
        .or_else(|| env_nonempty("OTEL_EXPORTER_OTLP_INSECURE"))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    proto == OtlpProtocol::Grpc && !insecure
}

/// `https://user:secret@host` → `https://…@host`, for logs.
fn redact_userinfo(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) if !scheme.is_empty() => format!("{scheme}://…{}", &rest[at..]),
        Some(at) => format!("…{}", &rest[at..]),
        None => url.to_string(),
    }
}

/// A `(key or variable, message)` error as one line.
fn named((key, message): (&'static str, String)) -> anyhow::Error {
    anyhow::anyhow!("{key}: {message}")
}

/// `otlp.headers` as gRPC metadata, set over the SDK's own (from the variables).
#[derive(Debug, Clone)]
struct HeaderInterceptor(
    Arc<
        Vec<(
            tonic::metadata::MetadataKey<tonic::metadata::Ascii>,
            tonic::metadata::AsciiMetadataValue,
        )>,
    >,
);

impl tonic::service::Interceptor for HeaderInterceptor {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        for (k, v) in self.0.iter() {
            request.metadata_mut().insert(k.clone(), v.clone());
        }
        Ok(request)
    }
}

/// The last transport error of the HTTP client, in full (the SDK keeps only "network
/// error").
type TransportDetail = Arc<Mutex<Option<String>>>;

/// The HTTP/protobuf client: a blocking reqwest client with truthscale's rustls
/// configuration, which sets `otlp.headers` over the SDK's headers and keeps the last
/// transport error.
#[derive(Debug)]
struct HttpClient {
    inner: reqwest::blocking::Client,
    headers: Vec<(axum::http::HeaderName, axum::http::HeaderValue)>,
    detail: TransportDetail,
}

#[tonic::async_trait]
impl opentelemetry_http::HttpClient for HttpClient {
    async fn send_bytes(
        &self,
        mut request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        for (k, v) in &self.headers {
            request.headers_mut().insert(k.clone(), v.clone());
        }
        let result = opentelemetry_http::HttpClient::send_bytes(&self.inner, request).await;
        if let Err(e) = &result
            && let Ok(mut d) = self.detail.lock()
        {
            *d = Some(error_chain(e.as_ref()));
        }
        result
    }
}

/// An error and its sources, `: `-joined, each only once.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let m = cause.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        next = cause.source();
    }
    out
}

/// Set during a TLS handshake in which the collector asked for a client certificate and
/// truthscale had none to give. With TLS 1.3 the collector's refusal comes after the
/// handshake, and often arrives as a cut connection rather than as its alert, so this, not
/// the error text, is what says that the collector wants mutual TLS.
type ClientCertAsked = Arc<AtomicBool>;

/// A client-certificate resolver that notes a request it cannot serve.
#[derive(Debug)]
struct RecordingResolver {
    inner: Arc<dyn rustls::client::ResolvesClientCert>,
    asked: ClientCertAsked,
}

impl rustls::client::ResolvesClientCert for RecordingResolver {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        let key = self.inner.resolve(root_hint_subjects, sigschemes);
        if key.is_none() {
            self.asked.store(true, Ordering::Relaxed);
        }
        key
    }

    fn only_raw_public_keys(&self) -> bool {
        self.inner.only_raw_public_keys()
    }

    fn has_certs(&self) -> bool {
        self.inner.has_certs()
    }
}

/// Note, in the returned flag, every handshake of `config` in which the collector asks for
/// a client certificate that `config` does not have.
fn record_client_cert_requests(config: &mut rustls::ClientConfig) -> ClientCertAsked {
    let asked = ClientCertAsked::default();
    config.client_auth_cert_resolver = Arc::new(RecordingResolver {
        inner: Arc::clone(&config.client_auth_cert_resolver),
        asked: Arc::clone(&asked),
    });
    asked
}

/// The gRPC channel to an `https://` collector, over truthscale's rustls configuration (the
/// same as the HTTP client's). The channel dials `endpoint`'s host and port (443 when none
/// is given) and does the TLS handshake itself; requests still carry the `https` scheme
/// and the endpoint's authority.
fn grpc_tls_channel(
    endpoint: &str,
    tls: rustls::ClientConfig,
    timeout: Duration,
) -> anyhow::Result<tonic::transport::Channel> {
    use tonic::transport::{Endpoint, Uri};
    let invalid = || format!("the OTLP endpoint {endpoint:?} is not a valid URL");
    let origin: Uri = endpoint.parse().with_context(invalid)?;
    let authority = origin
        .authority()
        .with_context(|| format!("{}: it has no host", invalid()))?
        .clone();
    let host = authority.host().trim_matches(['[', ']']).to_owned();
    let port = authority.port_u16().unwrap_or(443);
    let name = rustls::pki_types::ServerName::try_from(host.clone()).with_context(|| {
        format!("the OTLP endpoint's host {host:?} is not a DNS name or IP address")
    })?;
    // The scheme tonic dials is plain: the stream the connector hands back is already TLS.
    let dial = Endpoint::from_shared(format!("http://{authority}"))
        .with_context(invalid)?
        .origin(origin)
        .timeout(timeout)
        .connect_timeout(timeout);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    Ok(
        dial.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let (connector, host, name) = (connector.clone(), host.clone(), name.clone());
            async move {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                tcp.set_nodelay(true)?;
                let stream = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        })),
    )
}

/// Build the blocking HTTP client on a thread of its own: reqwest's blocking client must
/// not be built (or dropped) on an async worker.
fn http_client(
    tls: rustls::ClientConfig,
    timeout: Duration,
) -> anyhow::Result<reqwest::blocking::Client> {
    std::thread::Builder::new()
        .name("otlp-http-client".into())
        .spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .tls_backend_preconfigured(tls)
                .build()
        })
        .context("cannot start a thread for the OTLP HTTP client")?
        .join()
        .map_err(|_| anyhow::anyhow!("building the OTLP HTTP client panicked"))?
        .context("cannot build the OTLP HTTP client")
}

/// A running OTLP pipeline: meter provider, periodic reader thread, instruments.
#[derive(Debug)]
pub struct Otlp {
    provider: SdkMeterProvider,
    _registration: Registration,
}

impl Otlp {
    /// Build the exporter and start exporting. Must run inside a Tokio runtime (the gRPC
    /// channel lives there); exports themselves run on the reader's own thread.
    ///
    /// # Errors
    /// A bad `OTEL_…` value the SDK rejects; for an `https://` endpoint, a CA or client
    /// certificate file that does not read or parse, or no system roots at all.
    pub fn start(
        settings: &OtlpSettings,
        identity: &Identity,
        rx: watch::Receiver<Arc<Snapshot>>,
        errors: SinkErrors,
    ) -> anyhow::Result<Otlp> {
        let proto = protocol(settings.protocol)?;
        let (endpoint, endpoint_origin) = endpoint(settings.endpoint.as_deref(), proto);
        let tls = uses_tls(&endpoint, proto);
        if !tls && settings.tls.is_set() {
            tracing::warn!(
                endpoint = %redact_userinfo(&endpoint),
                from = endpoint_origin,
                "A CA or client certificate is set for OTLP, but the endpoint is not https://: it is not used."
            );
        }
        // What the collector's certificate is checked against, for logs and hints.
        let trust = match &settings.tls.certificate {
            Some(f) => format!("the CA in {f}"),
            None => "the system roots".to_string(),
        };
        let roots = if tls {
            settings.tls.roots().map_err(named)?
        } else {
            rustls::RootCertStore::empty()
        };
        let temporality = settings.temporality.map(|t| match t {
            OtlpTemporality::Cumulative => Temporality::Cumulative,
            OtlpTemporality::Delta => Temporality::Delta,
        });
        let gzip = settings.compression == Some(OtlpCompression::Gzip);
        let detail: TransportDetail = Arc::default();
        let mut asked = None;
        let exporter = match proto {
            OtlpProtocol::Grpc => {
                let mut b = MetricExporter::builder().with_tonic();
                if let Some(e) = &settings.endpoint {
                    b = b.with_endpoint(e.clone());
                }
                if let Some(t) = settings.timeout {
                    b = b.with_timeout(t);
                }
                if let Some(t) = temporality {
                    b = b.with_temporality(t);
                }
                if tls {
                    let mut tls_config = settings.tls.client_config(roots).map_err(named)?;
                    tls_config.alpn_protocols = vec![b"h2".to_vec()];
                    asked = Some(record_client_cert_requests(&mut tls_config));
                    b = b.with_channel(grpc_tls_channel(
                        &endpoint,
                        tls_config,
                        settings.effective_timeout,
                    )?);
                }
                if gzip {
                    b = b.with_compression(Compression::Gzip);
                }
                if !settings.headers.0.is_empty() {
                    let mut md = Vec::with_capacity(settings.headers.0.len());
                    for (k, v) in &settings.headers.0 {
                        let key = tonic::metadata::MetadataKey::from_bytes(k.as_bytes())
                            .map_err(|_| {
                                anyhow::anyhow!(
                                    "otlp.headers: {k:?} cannot be sent as gRPC metadata"
                                )
                            })?;
                        let value = tonic::metadata::AsciiMetadataValue::try_from(v.as_str())
                            .map_err(|_| {
                                anyhow::anyhow!(
                                    "otlp.headers: the value of {k:?} cannot be sent as gRPC metadata"
                                )
                            })?;
                        md.push((key, value));
                    }
                    b = b.with_interceptor(HeaderInterceptor(Arc::new(md)));
                }
                b.build()
            }
            OtlpProtocol::HttpProtobuf => {
                let mut tls_config = settings.tls.client_config(roots).map_err(named)?;
                tls_config.alpn_protocols = vec![b"http/1.1".to_vec()];
                if tls {
                    asked = Some(record_client_cert_requests(&mut tls_config));
                }
                let mut headers = Vec::with_capacity(settings.headers.0.len());
                for (k, v) in &settings.headers.0 {
                    let name = axum::http::HeaderName::from_bytes(k.as_bytes())
                        .with_context(|| format!("otlp.headers: {k:?}"))?;
                    let value = axum::http::HeaderValue::from_str(v)
                        .with_context(|| format!("otlp.headers: the value of {k:?}"))?;
                    headers.push((name, value));
                }
                let client = HttpClient {
                    inner: http_client(tls_config, settings.effective_timeout)?,
                    headers,
                    detail: Arc::clone(&detail),
                };
                let mut b = MetricExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_http_client(client);
                if let Some(e) = &settings.endpoint {
                    b = b.with_endpoint(http_metrics_url(e));
                }
                if let Some(t) = settings.timeout {
                    b = b.with_timeout(t);
                }
                if let Some(t) = temporality {
                    b = b.with_temporality(t);
                }
                if gzip {
                    b = b.with_compression(Compression::Gzip);
                }
                b.build()
            }
        }
        .context("cannot build the OTLP exporter")?;
        errors.register(SINK, &ERROR_KINDS);
        let mut exporter = CountingExporter::new(exporter, errors, settings.effective_timeout)
            .with_transport_detail(detail);
        if tls {
            exporter = exporter.with_trust(trust.clone());
        }
        exporter.client_cert_asked = asked;
        let mut reader = PeriodicReader::builder(exporter);
        if let Some(i) = settings.interval {
            reader = reader.with_interval(i);
        }
        let provider = SdkMeterProvider::builder()
            .with_resource(resource(identity))
            .with_reader(reader.build())
            .build();
        let meter = provider.meter_with_scope(
            InstrumentationScope::builder("truthscale")
                .with_version(VERSION)
                .build(),
        );
        let registration = register(&meter, rx);
        tracing::info!(
            protocol = match proto {
                OtlpProtocol::Grpc => "grpc",
                OtlpProtocol::HttpProtobuf => "http/protobuf",
            },
            endpoint = %redact_userinfo(&endpoint),
            from = endpoint_origin,
            tls = if tls { trust.as_str() } else { "no" },
            client_certificate = tls && settings.tls.client_certificate.is_some(),
            "Pushing metrics over OTLP."
        );
        Ok(Otlp {
            provider,
            _registration: registration,
        })
    }

    /// Final export and stop. Blocks (up to the export timeout): call it from a blocking
    /// context (`spawn_blocking`), never on an async worker.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "OTLP shutdown was not clean.");
        }
    }
}

/// Words of rustls's errors (as the HTTP and gRPC clients pass them on, lowercased) that
/// mean the TLS handshake failed.
const TLS_FAILURES: [&str; 7] = [
    "invalid peer certificate",
    "received fatal alert",
    "received corrupt message",
    "peer is incompatible",
    "peer misbehaved",
    "peer sent no certificates",
    "handshake",
];

/// Whether a (lowercased) failure message is a failed TLS handshake.
fn is_tls_failure(msg: &str) -> bool {
    TLS_FAILURES.iter().any(|w| msg.contains(w))
}

/// What to do when the collector wants a client certificate and none is set.
const CLIENT_CERT_HINT: &str = "the collector requires a client certificate: set OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY (or otlp.client_certificate and otlp.client_key)";

/// What to do about a failed TLS handshake (`msg` lowercased); `trust` says what the
/// collector's certificate was checked against.
fn tls_hint(msg: &str, trust: &str) -> Option<String> {
    if !is_tls_failure(msg) {
        return None;
    }
    let has = |words: &[&str]| words.iter().any(|w| msg.contains(w));
    Some(
        if has(&["unknownissuer", "badsignature", "unknown issuer"]) {
            format!(
                "the collector's certificate is not signed by a CA truthscale trusts (it was checked against {trust}): set OTEL_EXPORTER_OTLP_CERTIFICATE (or otlp.certificate) to the PEM file of the CA that signed it"
            )
        } else if has(&["not valid for name", "notvalidforname"]) {
            "the collector's certificate does not hold the endpoint's host name: use a host name it holds in the endpoint URL".to_string()
        } else if has(&[
            "certificate expired",
            "not valid yet",
            "expired",
            "notvalidyet",
        ]) {
            "the collector's certificate is expired or not yet valid (check it, and the clocks)"
                .to_string()
        } else if has(&["certificaterequired", "peer sent no certificates"]) {
            CLIENT_CERT_HINT.to_string()
        } else if has(&["received fatal alert"]) {
            "the collector refused the TLS handshake: if it requires mutual TLS, check that the client certificate (OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE, otlp.client_certificate) is signed by a CA the collector trusts".to_string()
        } else if has(&["received corrupt message", "invalidcontenttype"]) {
            "the collector does not speak TLS on this port: use an http:// endpoint, or the collector's TLS port".to_string()
        } else {
            format!(
                "the TLS handshake with the collector failed (its certificate was checked against {trust}); check OTEL_EXPORTER_OTLP_CERTIFICATE / otlp.certificate and the client certificate settings"
            )
        },
    )
}

/// The kind of an export failure, for `truthscale_sink_errors_total{kind}`. A failed TLS
/// handshake (an untrusted certificate, a wrong host name, a refused client certificate, TLS
/// to a plain-text port) is `other`: the collector is up, and did not refuse the data, but
/// truthscale's or the collector's TLS configuration must change; retrying does not help.
#[must_use]
pub fn error_kind(e: &OTelSdkError) -> &'static str {
    let msg = match e {
        OTelSdkError::Timeout(_) => return "timeout",
        OTelSdkError::AlreadyShutdown => return "other",
        OTelSdkError::InternalFailure(m) => m.to_ascii_lowercase(),
    };
    let has = |words: &[&str]| words.iter().any(|w| msg.contains(w));
    if has(&["timeout", "timed out", "deadline", "cancelled"]) {
        "timeout"
    } else if is_tls_failure(&msg) {
        "other"
    } else if has(&[
        "unavailable",
        "network error",
        "connect",
        "refused",
        "transport",
        "status code: 429",
        "status code: 502",
        "status code: 503",
        "status code: 504",
        "resourceexhausted",
    ]) {
        "unavailable"
    } else if has(&[
        "status code: 4",
        "invalidargument",
        "unauthenticated",
        "permissiondenied",
        "unimplemented",
        "notfound",
        "failedprecondition",
    ]) {
        "rejected"
    } else {
        "other"
    }
}

#[derive(Debug, Default)]
struct ExportState {
    /// Failures in a row.
    consecutive: u32,
    /// Skip exports until then (backoff).
    not_before: Option<Instant>,
    /// When the current outage began.
    outage_since: Option<Instant>,
    last_log: Option<Instant>,
    /// The kind of the last failure logged: another kind is logged at once.
    last_logged_kind: Option<&'static str>,
    unlogged: u64,
    succeeded_once: bool,
}

/// Wraps the OTLP exporter: counts failures into [`SinkErrors`], logs them rate-limited
/// (a failed TLS handshake with a hint), and backs off (skips exports) while the collector
/// keeps failing.
#[derive(Debug)]
pub struct CountingExporter<E> {
    inner: E,
    errors: SinkErrors,
    state: Mutex<ExportState>,
    timeout: Duration,
    /// The HTTP client's last transport error, when the client is truthscale's.
    detail: Option<TransportDetail>,
    /// What the collector's certificate is checked against (TLS endpoints).
    trust: Option<String>,
    /// Whether the collector asked for a client certificate that truthscale lacks.
    client_cert_asked: Option<ClientCertAsked>,
}

impl<E> CountingExporter<E> {
    /// Wrap `inner`, whose exports time out after `timeout`.
    pub fn new(inner: E, errors: SinkErrors, timeout: Duration) -> Self {
        CountingExporter {
            inner,
            errors,
            state: Mutex::new(ExportState::default()),
            timeout,
            detail: None,
            trust: None,
            client_cert_asked: None,
        }
    }

    /// Add the HTTP client's transport error to failures that carry none.
    fn with_transport_detail(mut self, detail: TransportDetail) -> Self {
        self.detail = Some(detail);
        self
    }

    /// The endpoint uses TLS, checked against `trust` (for hints).
    fn with_trust(mut self, trust: String) -> Self {
        self.trust = Some(trust);
        self
    }

    /// `e` with the transport error the HTTP client kept, when the SDK's message lacks it.
    fn detailed(&self, e: OTelSdkError) -> OTelSdkError {
        let Some(d) = self
            .detail
            .as_ref()
            .and_then(|d| d.lock().ok().and_then(|mut d| d.take()))
        else {
            return e;
        };
        match e {
            OTelSdkError::InternalFailure(m) if !m.contains(&d) => {
                OTelSdkError::InternalFailure(format!("{m}: {d}"))
            }
            e => e,
        }
    }

    fn backing_off(&self) -> bool {
        self.state
            .lock()
            .is_ok_and(|s| s.not_before.is_some_and(|t| Instant::now() < t))
    }

    /// Count and log the outcome of one export that took `took`; `client_cert_asked` says
    /// that the collector asked for a client certificate truthscale does not have.
    fn record(&self, result: &OTelSdkResult, took: Duration, client_cert_asked: bool) {
        let Ok(mut s) = self.state.lock() else { return };
        let now = Instant::now();
        match result {
            Ok(()) => {
                if s.consecutive > 0 {
                    tracing::info!(
                        sink = SINK,
                        failed_exports = s.consecutive,
                        outage = ?s.outage_since.map(|t| now - t),
                        "OTLP export succeeded again."
                    );
                } else if !s.succeeded_once {
                    tracing::info!(sink = SINK, "First OTLP export succeeded.");
                }
                s.succeeded_once = true;
                s.last_logged_kind = None;
                s.consecutive = 0;
                s.not_before = None;
                s.outage_since = None;
                s.unlogged = 0;
            }
            Err(e) => {
                // The HTTP client reports a timeout as a bare "network error": a failure
                // that took the whole timeout is one.
                // A refused handshake is `other`, however the refusal reached the client.
                let kind = match error_kind(e) {
                    _ if client_cert_asked => "other",
                    "unavailable" | "other" if took >= self.timeout.mul_f64(0.9) => "timeout",
                    k => k,
                };
                self.errors.add(SINK, kind);
                s.consecutive = s.consecutive.saturating_add(1);
                s.outage_since.get_or_insert(now);
                // 1 s, 2 s, 4 s … up to 30 s between attempts; the first retry is at the
                // next interval as usual.
                let backoff = Duration::from_secs(1)
                    .saturating_mul(1 << s.consecutive.saturating_sub(1).min(5))
                    .min(MAX_BACKOFF);
                s.not_before = Some(now + backoff);
                s.unlogged += 1;
                if s.last_log.is_none_or(|t| now - t >= LOG_EVERY)
                    || s.last_logged_kind != Some(kind)
                {
                    let hint = if client_cert_asked {
                        Some(CLIENT_CERT_HINT.to_string())
                    } else {
                        tls_hint(
                            &e.to_string().to_ascii_lowercase(),
                            self.trust.as_deref().unwrap_or("the system roots"),
                        )
                    };
                    match hint {
                        Some(hint) => tracing::warn!(
                            sink = SINK,
                            kind,
                            error = %e,
                            hint = %hint,
                            failures = s.unlogged,
                            next_attempt_in = ?backoff,
                            "OTLP export failed: TLS handshake with the collector failed; sampling and /metrics are unaffected (repeats are logged every 30s)."
                        ),
                        None => tracing::warn!(
                            sink = SINK,
                            kind,
                            error = %e,
                            failures = s.unlogged,
                            next_attempt_in = ?backoff,
                            "OTLP export failed; sampling and /metrics are unaffected (repeats are logged every 30s)."
                        ),
                    }
                    s.last_log = Some(now);
                    s.last_logged_kind = Some(kind);
                    s.unlogged = 0;
                }
            }
        }
    }
}

impl<E: PushMetricExporter> PushMetricExporter for CountingExporter<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        if self.backing_off() {
            // Cumulative totals lose nothing by a skipped export; the next one carries them.
            return Ok(());
        }
        if let Some(d) = &self.detail
            && let Ok(mut d) = d.lock()
        {
            *d = None;
        }
        if let Some(a) = &self.client_cert_asked {
            a.store(false, Ordering::Relaxed);
        }
        let started = Instant::now();
        let result = self
            .inner
            .export(metrics)
            .await
            .map_err(|e| self.detailed(e));
        let asked = self
            .client_cert_asked
            .as_ref()
            .is_some_and(|a| a.swap(false, Ordering::Relaxed));
        self.record(&result, started.elapsed(), asked);
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_urls_get_the_metrics_path() {
        assert_eq!(
            http_metrics_url("http://c:4318"),
            "http://c:4318/v1/metrics"
        );
        assert_eq!(
            http_metrics_url("http://c:4318/"),
            "http://c:4318/v1/metrics"
        );
        assert_eq!(
            http_metrics_url("http://c:4318/custom"),
            "http://c:4318/custom"
        );
    }

    #[test]
    fn error_kinds() {
        let f = |m: &str| error_kind(&OTelSdkError::InternalFailure(m.into()));
        assert_eq!(f("HTTP export failed: network error"), "unavailable");
        assert_eq!(
            f("TonicMetricsClient export failed with gRPC code: Unavailable: tcp connect error"),
            "unavailable"
        );
        assert_eq!(f("HTTP export failed with status code: 400"), "rejected");
        assert_eq!(f("HTTP export failed with status code: 503"), "unavailable");
        assert_eq!(
            f("TonicMetricsClient export failed with gRPC code: DeadlineExceeded"),
            "timeout"
        );
        assert_eq!(
            error_kind(&OTelSdkError::Timeout(Duration::ZERO)),
            "timeout"
        );
        assert_eq!(f("something else"), "other");
        // A failed handshake is `other`, even where the gRPC status says Unavailable.
        assert_eq!(
            f(
                "HTTP export failed: network error: error sending request for url (https://127.0.0.1:1/v1/metrics): client error (Connect): invalid peer certificate: UnknownIssuer"
            ),
            "other"
        );
        assert_eq!(
            f(
                "TonicMetricsClient export failed with gRPC code: Unavailable: transport error: invalid peer certificate: UnknownIssuer"
            ),
            "other"
        );
        assert_eq!(
            f(
                "HTTP export failed: network error: received corrupt message of type InvalidContentType"
            ),
            "other"
        );
    }

    #[test]
    fn tls_failures_get_a_hint() {
        let hint = |m: &str| {
            tls_hint(
                &m.to_ascii_lowercase(),
                "the CA in /x/ca.pem (from otlp.certificate)",
            )
        };
        let h = hint("transport error: invalid peer certificate: UnknownIssuer").unwrap();
        assert!(
            h.contains("not signed by a CA truthscale trusts")
                && h.contains("/x/ca.pem")
                && h.contains("OTEL_EXPORTER_OTLP_CERTIFICATE"),
            "{h}"
        );
        let h = hint("received fatal alert: CertificateRequired").unwrap();
        assert!(h.contains("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"), "{h}");
        let h = hint(
            "invalid peer certificate: certificate not valid for name \"c\"; certificate is only valid for localhost",
        )
        .unwrap();
        assert!(h.contains("host name"), "{h}");
        let h = hint("received corrupt message of type InvalidContentType").unwrap();
        assert!(h.contains("http://"), "{h}");
        assert_eq!(hint("HTTP export failed with status code: 401"), None);
        assert_eq!(hint("tcp connect error: Connection refused"), None);
    }

    #[test]
    fn endpoints_and_tls() {
        assert!(uses_tls("https://c:4317", OtlpProtocol::Grpc));
        assert!(uses_tls(
            "HTTPS://c:4318/v1/metrics",
            OtlpProtocol::HttpProtobuf
        ));
        assert!(!uses_tls("http://c:4317", OtlpProtocol::Grpc));
        assert_eq!(
            redact_userinfo("https://user:secret@c:4318/v1/metrics"),
            "https://…@c:4318/v1/metrics"
        );
        assert_eq!(redact_userinfo("http://c:4318/a@b"), "http://c:4318/a@b");
        assert_eq!(
            endpoint(Some("https://c:4317"), OtlpProtocol::Grpc),
            ("https://c:4317".to_string(), "otlp.endpoint")
        );
    }
}
