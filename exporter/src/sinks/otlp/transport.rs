//! The transport: where exports go (protocol and endpoint, resolved as the SDK resolves
//! them) and how: the gRPC channel and the HTTP client, both built on the one rustls
//! configuration from the TLS settings. The HTTP client keeps the transport error the SDK
//! reduces to "network error"; a resolver notes a collector that asks for a client
//! certificate truthscale lacks.

use super::config::{OtlpCompression, OtlpProtocol, OtlpSettings, OtlpTemporality};
use crate::setting::Invalid;
use anyhow::Context as _;
use opentelemetry_otlp::{
    Compression, MetricExporter, Protocol, WithExportConfig as _, WithHttpConfig as _,
    WithTonicConfig as _,
};
use opentelemetry_sdk::metrics::Temporality;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The protocol: truthscale's setting, else `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`, else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, else HTTP/protobuf (the SDK's order).
pub(super) fn protocol(settings: &OtlpSettings) -> Result<OtlpProtocol, Invalid> {
    if let Some(p) = settings.protocol {
        return Ok(p);
    }
    for var in [
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(v) = settings.var(var) {
            return OtlpProtocol::parse(&v).ok_or_else(|| {
                Invalid::new(
                    var,
                    format!("{v:?} is not one of grpc, http/protobuf (http/json is not built in)"),
                )
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
pub(super) fn endpoint(settings: &OtlpSettings, proto: OtlpProtocol) -> (String, &'static str) {
    if let Some(e) = settings.endpoint.as_deref() {
        return (e.to_string(), "otlp.endpoint");
    }
    for var in [
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ] {
        if let Some(v) = settings.var(var) {
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
pub(super) fn uses_tls(settings: &OtlpSettings, endpoint: &str, proto: OtlpProtocol) -> bool {
    let e = endpoint.trim().to_ascii_lowercase();
    if e.starts_with("https://") {
        return true;
    }
    if e.contains("://") {
        return false;
    }
    let insecure = settings
        .var("OTEL_EXPORTER_OTLP_METRICS_INSECURE")
        .or_else(|| settings.var("OTEL_EXPORTER_OTLP_INSECURE"))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    proto == OtlpProtocol::Grpc && !insecure
}

pub(super) use crate::client::redact_userinfo;

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

/// What the HTTP client learns of an exchange that the SDK does not pass on.
pub(super) type TransportDetail = Arc<TransportNotes>;

/// What the HTTP client keeps of the last exchange.
#[derive(Debug, Default)]
pub(super) struct TransportNotes {
    /// The last attempt's transport error, in full (the SDK keeps only "network error");
    /// cleared by an attempt that got an answer.
    pub(super) error: Mutex<Option<String>>,
    /// A collector's partial success (its answer's `partial_success`: data points it
    /// rejected, and why), which the SDK logs only (and its logs are compiled out).
    pub(super) partial: Mutex<Option<(i64, String)>>,
}

/// `ExportMetricsServiceResponse`, as far as read here.
#[derive(Clone, PartialEq, prost::Message)]
struct ExportAnswer {
    #[prost(message, optional, tag = "1")]
    partial_success: Option<PartialSuccess>,
}

/// `ExportMetricsPartialSuccess`.
#[derive(Clone, PartialEq, prost::Message)]
struct PartialSuccess {
    #[prost(int64, tag = "1")]
    rejected_data_points: i64,
    #[prost(string, tag = "2")]
    error_message: String,
}

/// The partial success a collector's answer `body` (protobuf) holds: data points rejected
/// or a message; `None` for a full success or an answer that does not decode.
fn partial_success(body: &[u8]) -> Option<(i64, String)> {
    use prost::Message as _;
    let p = ExportAnswer::decode(body).ok()?.partial_success?;
    (p.rejected_data_points != 0 || !p.error_message.is_empty())
        .then_some((p.rejected_data_points, p.error_message))
}

/// The largest answer read from a collector, as the SDK's own clients read it.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The HTTP/protobuf client: an agent of truthscale's one HTTP client (ureq) over the
/// rustls configuration the gRPC channel uses, which sets `otlp.headers` over the SDK's
/// headers and keeps the last transport error. One deadline holds for the whole exchange
/// (the export timeout): a collector that trickles its answer a byte at a time is abandoned
/// at the deadline and its connection closed. The SDK calls the client from a thread of its
/// own, outside any runtime, so the exchange runs there, blocking.
#[derive(Debug)]
struct HttpClient {
    agent: ureq::Agent,
    headers: Vec<(axum::http::HeaderName, axum::http::HeaderValue)>,
    detail: TransportDetail,
    /// The whole exchange's deadline (the export timeout).
    deadline: Duration,
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
        let result = self.exchange(request);
        if let Ok(mut d) = self.detail.error.lock() {
            // An attempt that got an answer leaves no transport error for a later one's.
            *d = result.as_ref().err().map(|e| error_chain(e.as_ref()));
        }
        if let Ok(r) = &result
            && r.status().is_success()
            && let Some(p) = partial_success(r.body())
            && let Ok(mut slot) = self.detail.partial.lock()
        {
            *slot = Some(p);
        }
        result
    }
}

/// The error of an exchange abandoned at its deadline.
fn deadline_error(deadline: Duration) -> opentelemetry_http::HttpError {
    format!(
        "no complete answer within the {} ms timeout (the collector is slow or trickles its answer): abandoned, its connection closed",
        deadline.as_millis()
    )
    .into()
}

impl HttpClient {
    /// One exchange under the whole-request deadline, the answer read whole (at most
    /// [`MAX_ANSWER_BYTES`] of it).
    fn exchange(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let (parts, body) = request.into_parts();
        let request = opentelemetry_http::Request::from_parts(parts, body.to_vec());
        let answer = self.agent.run(request).and_then(|r| {
            let (parts, mut body) = r.into_parts();
            let bytes = body
                .with_config()
                .limit(MAX_ANSWER_BYTES as u64)
                .read_to_vec()?;
            Ok((parts, bytes))
        });
        match answer {
            Ok((parts, bytes)) => Ok(opentelemetry_http::Response::from_parts(
                parts,
                opentelemetry_http::Bytes::from(bytes),
            )),
            Err(ureq::Error::Timeout(_)) => Err(deadline_error(self.deadline)),
            Err(ureq::Error::BodyExceedsLimit(_)) => {
                Err(Box::new(opentelemetry_http::ResponseBodyTooLarge::new()))
            }
            Err(e) => Err(Box::new(e)),
        }
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
pub(super) type ClientCertAsked = Arc<AtomicBool>;

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
    // A gRPC endpoint without a scheme (`collector:4317`) is TLS unless told insecure
    // ([`uses_tls`]): its requests carry `https`, or tonic refuses them as an invalid URI.
    let origin: Uri = if endpoint.contains("://") {
        endpoint.parse()
    } else {
        format!("https://{endpoint}").parse()
    }
    .with_context(invalid)?;
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

/// The SDK's exporter over truthscale's transport, and what that transport notes for the
/// counting exporter.
#[derive(Debug)]
pub(super) struct Transport {
    pub(super) exporter: MetricExporter,
    /// The HTTP client's last transport error (HTTP/protobuf).
    pub(super) detail: TransportDetail,
    /// Set when the collector asks for a client certificate truthscale lacks (TLS).
    pub(super) client_cert_asked: Option<ClientCertAsked>,
}

/// Build the SDK's exporter for `proto` to `endpoint` (TLS when `tls`), over one rustls
/// configuration from the TLS settings. truthscale's settings are passed to the SDK only
/// when set; the SDK reads the `OTEL_…` variables for the rest.
///
/// # Errors
/// For TLS, a CA or client certificate file that does not read or parse, or no system roots
/// at all; a header that cannot be sent; a bad `OTEL_…` value the SDK rejects.
pub(super) fn build(
    settings: &OtlpSettings,
    proto: OtlpProtocol,
    endpoint: &str,
    tls: bool,
) -> anyhow::Result<Transport> {
    let roots = if tls {
        settings.tls.roots(&settings.env)?
    } else {
        rustls::RootCertStore::empty()
    };
    let detail: TransportDetail = Arc::default();
    let (exporter, client_cert_asked) = match proto {
        OtlpProtocol::Grpc => grpc_exporter(settings, endpoint, tls, roots)?,
        OtlpProtocol::HttpProtobuf => http_exporter(settings, tls, roots, &detail)?,
    };
    Ok(Transport {
        exporter,
        detail,
        client_cert_asked,
    })
}

/// `otlp.temporality`, as the SDK names it.
fn temporality(settings: &OtlpSettings) -> Option<Temporality> {
    settings.temporality.map(|t| match t {
        OtlpTemporality::Cumulative => Temporality::Cumulative,
        OtlpTemporality::Delta => Temporality::Delta,
    })
}

/// Whether `otlp.compression` asks for gzip.
fn gzip(settings: &OtlpSettings) -> bool {
    settings.compression == Some(OtlpCompression::Gzip)
}

/// The gRPC exporter: the SDK's tonic channel, or truthscale's TLS channel for TLS.
fn grpc_exporter(
    settings: &OtlpSettings,
    endpoint: &str,
    tls: bool,
    roots: rustls::RootCertStore,
) -> anyhow::Result<(MetricExporter, Option<ClientCertAsked>)> {
    let mut asked = None;
    let mut b = MetricExporter::builder().with_tonic();
    if let Some(e) = &settings.endpoint {
        b = b.with_endpoint(e.clone());
    }
    if let Some(t) = settings.timeout {
        b = b.with_timeout(t);
    }
    if let Some(t) = temporality(settings) {
        b = b.with_temporality(t);
    }
    if tls {
        let mut tls_config = settings.tls.client_config(roots)?;
        tls_config.alpn_protocols = vec![b"h2".to_vec()];
        asked = Some(record_client_cert_requests(&mut tls_config));
        b = b.with_channel(grpc_tls_channel(
            endpoint,
            tls_config,
            settings.effective_timeout,
        )?);
    }
    if gzip(settings) {
        b = b.with_compression(Compression::Gzip);
    }
    if !settings.headers.0.is_empty() {
        b = b.with_interceptor(grpc_metadata(settings)?);
    }
    let exporter = b.build().context("cannot build the OTLP exporter")?;
    Ok((exporter, asked))
}

/// `otlp.headers` as gRPC metadata.
fn grpc_metadata(settings: &OtlpSettings) -> anyhow::Result<HeaderInterceptor> {
    let mut md = Vec::with_capacity(settings.headers.0.len());
    for (k, v) in &settings.headers.0 {
        let key = tonic::metadata::MetadataKey::from_bytes(k.as_bytes())
            .map_err(|_| anyhow::anyhow!("otlp.headers: {k:?} cannot be sent as gRPC metadata"))?;
        let value = tonic::metadata::AsciiMetadataValue::try_from(v.as_str()).map_err(|_| {
            anyhow::anyhow!("otlp.headers: the value of {k:?} cannot be sent as gRPC metadata")
        })?;
        md.push((key, value));
    }
    Ok(HeaderInterceptor(Arc::new(md)))
}

/// The HTTP/protobuf exporter, over truthscale's HTTP client (TLS or not).
fn http_exporter(
    settings: &OtlpSettings,
    tls: bool,
    roots: rustls::RootCertStore,
    detail: &TransportDetail,
) -> anyhow::Result<(MetricExporter, Option<ClientCertAsked>)> {
    let mut asked = None;
    let mut tls_config = settings.tls.client_config(roots)?;
    tls_config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if tls {
        asked = Some(record_client_cert_requests(&mut tls_config));
    }
    let headers = http_headers(settings)?;
    let client = HttpClient {
        agent: crate::client::agent_with_rustls(settings.effective_timeout, tls_config),
        headers,
        detail: Arc::clone(detail),
        deadline: settings.effective_timeout,
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
    if let Some(t) = temporality(settings) {
        b = b.with_temporality(t);
    }
    if gzip(settings) {
        b = b.with_compression(Compression::Gzip);
    }
    let exporter = b.build().context("cannot build the OTLP exporter")?;
    Ok((exporter, asked))
}

/// `otlp.headers` as HTTP headers.
fn http_headers(
    settings: &OtlpSettings,
) -> anyhow::Result<Vec<(axum::http::HeaderName, axum::http::HeaderValue)>> {
    let mut headers = Vec::with_capacity(settings.headers.0.len());
    for (k, v) in &settings.headers.0 {
        let name = axum::http::HeaderName::from_bytes(k.as_bytes())
            .with_context(|| format!("otlp.headers: {k:?}"))?;
        let value = axum::http::HeaderValue::from_str(v)
            .with_context(|| format!("otlp.headers: the value of {k:?}"))?;
        headers.push((name, value));
    }
    Ok(headers)
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
    fn endpoints_and_tls() {
        let none = OtlpSettings::default();
        assert!(uses_tls(&none, "https://c:4317", OtlpProtocol::Grpc));
        assert!(uses_tls(
            &none,
            "HTTPS://c:4318/v1/metrics",
            OtlpProtocol::HttpProtobuf
        ));
        assert!(!uses_tls(&none, "http://c:4317", OtlpProtocol::Grpc));
        assert!(uses_tls(&none, "c:4317", OtlpProtocol::Grpc));
        // The variables as the environment held them at start, not the process's now.
        let env = |pairs: &[(&str, &str)]| OtlpSettings {
            env: pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            ..OtlpSettings::default()
        };
        let insecure = env(&[("OTEL_EXPORTER_OTLP_INSECURE", "true")]);
        assert!(!uses_tls(&insecure, "c:4317", OtlpProtocol::Grpc));
        let grpc = env(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", " http://c:4317 "),
        ]);
        assert_eq!(protocol(&grpc).unwrap(), OtlpProtocol::Grpc);
        assert_eq!(
            endpoint(&grpc, OtlpProtocol::Grpc),
            ("http://c:4317".to_string(), "OTEL_EXPORTER_OTLP_ENDPOINT")
        );
        assert_eq!(protocol(&none).unwrap(), OtlpProtocol::HttpProtobuf);
        assert!(protocol(&env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")])).is_err());
        assert_eq!(
            redact_userinfo("https://user:secret@c:4318/v1/metrics"),
            "https://…@c:4318/v1/metrics"
        );
        assert_eq!(redact_userinfo("http://c:4318/a@b"), "http://c:4318/a@b");
        assert_eq!(
            endpoint(
                &OtlpSettings {
                    endpoint: Some("https://c:4317".into()),
                    ..OtlpSettings::default()
                },
                OtlpProtocol::Grpc
            ),
            ("https://c:4317".to_string(), "otlp.endpoint")
        );
    }
}
