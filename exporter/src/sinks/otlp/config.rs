//! `[otlp]`: the OTLP sink's own configuration and its validation (the standard
//! `OTEL_…` variables first, keys that mirror them).
//!
//! Every key, when set (file < `TRUTHSCALE_OTLP__…` < flags), wins over the standard
//! variables; among those, `OTEL_EXPORTER_OTLP_METRICS_…` wins over `OTEL_EXPORTER_OTLP_…`.
//! The SDK reads most variables itself; the TLS files (`OTEL_EXPORTER_OTLP_CERTIFICATE`,
//! `…_CLIENT_CERTIFICATE`, `…_CLIENT_KEY`), which it does not read, are resolved here, and
//! every file is read and parsed at start so that a bad one is refused with its name.

use crate::setting::Invalid;
use rustls_pki_types::pem::{self, PemObject as _};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The SDK's default export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT` unset).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const TIMEOUT_RANGE: (Duration, Duration) = (Duration::from_millis(1), Duration::from_secs(300));
const INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(3600));

/// A standard variable of milliseconds (`OTEL_METRIC_EXPORT_INTERVAL=60000`), in range.
fn env_millis(
    var: &'static str,
    value: Option<String>,
    (min, max): (Duration, Duration),
) -> Result<Option<Duration>, Invalid> {
    let Some(v) = value else { return Ok(None) };
    let ms: u64 = v.parse().map_err(|_| {
        Invalid::new(
            var,
            format!("{v:?} is not a whole number of milliseconds (e.g. 10000)"),
        )
    })?;
    let d = Duration::from_millis(ms);
    if d < min || d > max {
        return Err(Invalid::new(
            var,
            format!(
                "{ms} ms is outside {}..={} ms",
                min.as_millis(),
                max.as_millis()
            ),
        ));
    }
    Ok(Some(d))
}

/// `[otlp]`: push the same metrics to an OpenTelemetry collector. Every unset key falls
/// back to the standard `OTEL_…` environment variables, then to the SDK's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpConfig {
    /// Push even without an endpoint here or in `OTEL_EXPORTER_OTLP_(METRICS_)ENDPOINT`
    /// (then to the SDK default, localhost). An endpoint anywhere also turns it on.
    pub enabled: bool,
    /// Collector URL (`http://HOST:4317` for gRPC, `http://HOST:4318` for HTTP; the HTTP
    /// path `/v1/metrics` is added when the URL has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// `grpc` or `http/protobuf`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Timeout of one export, retries included (e.g. `10s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Time between exports (e.g. `60s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// `cumulative` (the SDK default) or `delta`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temporality: Option<String>,
    /// Request headers, as `OTEL_EXPORTER_OTLP_HEADERS` writes them (`api-key=…,tenant=7`,
    /// values percent-decoded). Merged with the variable's, winning for the same name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<String>,
    /// `gzip` or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// PEM file of the CA(s) that the collector's certificate must chain to, instead of the
    /// system roots (`https://` endpoints).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate: Option<PathBuf>,
    /// PEM certificate chain truthscale presents to the collector (mutual TLS); needs
    /// `client_key`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of `client_certificate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// gRPC (tonic).
    Grpc,
    /// HTTP with protobuf bodies.
    HttpProtobuf,
}

impl OtlpProtocol {
    /// Parse the `OTEL_EXPORTER_OTLP_PROTOCOL` spelling.
    #[must_use]
    pub(crate) fn parse(s: &str) -> Option<OtlpProtocol> {
        match s.trim() {
            "grpc" => Some(OtlpProtocol::Grpc),
            "http/protobuf" => Some(OtlpProtocol::HttpProtobuf),
            _ => None,
        }
    }
}

/// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` as the SDK reads it: the SDK falls
/// back to cumulative on a value it does not know, and its warning is compiled out: refused,
/// naming the variable. The raw value, untrimmed (`"delta "` is not delta to it).
fn temporality_variable(env: &[(String, String)]) -> Result<(), Invalid> {
    const TEMPORALITY_VAR: &str = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
    let raw = env
        .iter()
        .find(|(n, _)| n == TEMPORALITY_VAR)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty());
    match raw {
        Some(v)
            if !["cumulative", "delta", "lowmemory"]
                .iter()
                .any(|t| v.eq_ignore_ascii_case(t)) =>
        {
            Err(Invalid::new(
                TEMPORALITY_VAR,
                format!("{v:?} is not one of cumulative, delta, lowmemory"),
            ))
        }
        _ => Ok(()),
    }
}

/// The `OTEL_EXPORTER_OTLP_*` variables of `env` the OpenTelemetry specification does not
/// name (the exporter's settings, bare or for one signal, and the metrics' own two).
fn unknown_otlp_variables(env: &[(String, String)]) -> Vec<&str> {
    const SETTINGS: [&str; 9] = [
        "ENDPOINT",
        "PROTOCOL",
        "HEADERS",
        "TIMEOUT",
        "COMPRESSION",
        "CERTIFICATE",
        "CLIENT_KEY",
        "CLIENT_CERTIFICATE",
        "INSECURE",
    ];
    const METRICS_ONLY: [&str; 2] = ["TEMPORALITY_PREFERENCE", "DEFAULT_HISTOGRAM_AGGREGATION"];
    env.iter()
        .filter_map(|(k, _)| {
            let rest = k.strip_prefix("OTEL_EXPORTER_OTLP_")?;
            let setting = ["METRICS_", "TRACES_", "LOGS_"]
                .iter()
                .find_map(|s| rest.strip_prefix(s))
                .unwrap_or(rest);
            let known = SETTINGS.contains(&setting)
                || rest
                    .strip_prefix("METRICS_")
                    .is_some_and(|m| METRICS_ONLY.contains(&m));
            (!known).then_some(k.as_str())
        })
        .collect()
}

/// The protocol and endpoint in force, resolved as the exporter resolves them at start
/// (`otlp.*`, then the `OTEL_` variables), checked here so that `config check` refuses what
/// `serve` would: a protocol variable that is neither `grpc` nor `http/protobuf`, and an
/// endpoint that is no URL with a host (`http://`, a space in the host; a bare `host:port`
/// is a URL to gRPC only), naming the key or variable that set it.
fn resolved_transport(settings: &OtlpSettings) -> Result<(), Invalid> {
    let proto = super::transport::protocol(settings)?;
    let (endpoint, origin) = super::transport::endpoint(settings, proto);
    let uri = endpoint.parse::<axum::http::Uri>().ok();
    let has_host = uri
        .as_ref()
        .and_then(axum::http::Uri::host)
        .is_some_and(|h| !h.is_empty());
    let scheme_ok = uri
        .as_ref()
        .and_then(axum::http::Uri::scheme_str)
        .map_or(proto == OtlpProtocol::Grpc, |s| s == "http" || s == "https");
    if has_host && scheme_ok {
        return Ok(());
    }
    let key = match origin {
        "otlp.endpoint" => "otlp.endpoint",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT" => "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        _ => "OTEL_EXPORTER_OTLP_ENDPOINT",
    };
    Err(Invalid::new(
        key,
        format!(
            "{:?} is not an http:// or https:// URL with a host (e.g. http://collector:4318)",
            super::transport::redact_userinfo(&endpoint)
        ),
    ))
}

/// OTLP aggregation temporality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpTemporality {
    /// Totals since start.
    Cumulative,
    /// Changes since the previous export.
    Delta,
}

/// OTLP request compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpCompression {
    /// Uncompressed.
    None,
    /// gzip (`Content-Encoding: gzip`, `grpc-encoding: gzip`).
    Gzip,
}

/// A PEM file and where it was named (a key or a variable), for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemFile {
    /// The file.
    pub path: PathBuf,
    /// The key or variable that named it (`otlp.certificate`, `OTEL_EXPORTER_OTLP_CERTIFICATE`).
    pub origin: &'static str,
}

impl fmt::Display for PemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (from {})", self.path.display(), self.origin)
    }
}

impl PemFile {
    /// The file's bytes.
    ///
    /// # Errors
    /// An [`Invalid`] naming the setting and the file.
    pub(crate) fn read(&self) -> Result<Vec<u8>, Invalid> {
        crate::bounds::read_file(&self.path, crate::bounds::MAX_PEM_FILE).map_err(|e| {
            Invalid::new(
                self.origin,
                format!("cannot read {}: {e}", self.path.display()),
            )
        })
    }

    /// The certificates in the file (at least one).
    ///
    /// # Errors
    /// Unreadable, not PEM, or no certificate in it.
    pub(crate) fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, Invalid> {
        let bytes = self.read()?;
        let certs = CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, pem::Error>>()
            .map_err(|e| self.invalid(format!("invalid PEM: {e}")))?;
        if certs.is_empty() {
            return Err(self.invalid("no PEM certificate (BEGIN CERTIFICATE) in it".into()));
        }
        Ok(certs)
    }

    /// The private key in the file.
    ///
    /// # Errors
    /// Unreadable, not PEM, or no private key in it.
    pub(crate) fn private_key(&self) -> Result<PrivateKeyDer<'static>, Invalid> {
        let bytes = self.read()?;
        PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
            pem::Error::NoItemsFound => self.invalid(
                "no PEM private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) in it"
                    .into(),
            ),
            e => self.invalid(format!("invalid PEM: {e}")),
        })
    }

    fn invalid(&self, why: String) -> Invalid {
        Invalid::new(self.origin, format!("{}: {why}", self.path.display()))
    }
}

/// TLS material for `https://` endpoints, each resolved key first, then
/// `OTEL_EXPORTER_OTLP_METRICS_…`, then `OTEL_EXPORTER_OTLP_…`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtlpTls {
    /// CA file; `None`: the system roots.
    pub certificate: Option<PemFile>,
    /// Client certificate chain (mutual TLS); set together with `client_key`.
    pub client_certificate: Option<PemFile>,
    /// Client private key.
    pub client_key: Option<PemFile>,
}

impl OtlpTls {
    /// Whether anything is set.
    #[must_use]
    pub(crate) fn is_set(&self) -> bool {
        self.certificate.is_some() || self.client_certificate.is_some()
    }

    /// The roots the collector's certificate is checked against: the CA file, else the
    /// system's store.
    ///
    /// # Errors
    /// A CA file that does not read or parse, or holds a certificate that cannot be a trust
    /// anchor; no system roots at all.
    pub(crate) fn roots(&self, env: &[(String, String)]) -> Result<rustls::RootCertStore, Invalid> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.certificate {
            Some(f) => {
                for (i, c) in f.certificates()?.into_iter().enumerate() {
                    roots.add(c).map_err(|e| {
                        f.invalid(format!("certificate {} is not a usable CA: {e}", i + 1))
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    let why = found
                        .errors
                        .first()
                        .map_or_else(String::new, |e| format!(" ({e})"));
                    // rustls-native-certs reads these instead of the system store when set.
                    let store = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
                        .into_iter()
                        .filter_map(|v| {
                            env.iter()
                                .find(|(k, _)| k == v)
                                .map(|(_, p)| format!("{v}={p:?}"))
                        })
                        .collect::<Vec<_>>();
                    let store = if store.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", store.join(", "))
                    };
                    return Err(Invalid::new(
                        "otlp.certificate",
                        format!(
                            "no CA certificates found in the system store{store}{why}; install them (ca-certificates) or set OTEL_EXPORTER_OTLP_CERTIFICATE or otlp.certificate to the collector's CA"
                        ),
                    ));
                }
            }
        }
        Ok(roots)
    }

    /// The rustls client configuration (ring provider, safe default protocol versions):
    /// `roots`, and the client certificate when set.
    ///
    /// # Errors
    /// A client certificate or key that does not read or parse, or a key that does not
    /// belong to the certificate.
    pub(crate) fn client_config(
        &self,
        roots: rustls::RootCertStore,
    ) -> Result<rustls::ClientConfig, Invalid> {
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| Invalid::new("otlp", format!("TLS setup: {e}")))?
        .with_root_certificates(roots);
        match (&self.client_certificate, &self.client_key) {
            (Some(c), Some(k)) => {
                let chain = c.certificates()?;
                let key = k.private_key()?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    Invalid::new(
                        k.origin,
                        format!(
                            "{} does not go with the client certificate {c}: {e}",
                            k.path.display()
                        ),
                    )
                })
            }
            _ => Ok(builder.with_no_client_auth()),
        }
    }
}

/// Header names and values set by `otlp.headers`; `Debug` shows the names only (values are
/// often API keys).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OtlpHeaders(pub Vec<(String, String)>);

impl fmt::Debug for OtlpHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(n, _)| format!("{n}: …")))
            .finish()
    }
}

/// `%XX` sequences decoded, as the SDK decodes header values; the text as it is when a
/// sequence is not valid UTF-8 hex.
fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(h) = v.get(i + 1..i + 3)
            && let Ok(x) = u8::from_str_radix(h, 16)
        {
            out.push(x);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| v.to_string())
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs separated by commas (W3C baggage style),
/// each trimmed and percent-decoded (`team=a%20b` is `a b`, as the specification asks); an
/// empty entry (a trailing comma) is skipped.
///
/// # Errors
/// An entry without `=`, or with an empty key, naming the entry (the specification has
/// the whole variable discarded then; truthscale refuses to start, as for every variable).
pub(crate) fn resource_attributes(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, key, value) in baggage(text, "key=value,key=value, values percent-encoded")? {
        let key = percent_decode(key);
        if key.is_empty() {
            return Err(format!("entry {i} has no key"));
        }
        out.push((key, percent_decode(value)));
    }
    Ok(out)
}

/// The `name=value` entries of a comma-separated list (W3C baggage style), each name and
/// value trimmed, with the entry's number from 1; an empty entry (a trailing comma) skipped.
///
/// # Errors
/// An entry without `=`, naming it, and `how` to write one.
fn baggage<'a>(text: &'a str, how: &str) -> Result<Vec<(usize, &'a str, &'a str)>, String> {
    let mut out = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let Some((name, value)) = entry.split_once('=') else {
            return Err(format!("entry {} has no '=' (write {how})", i + 1));
        };
        out.push((i + 1, name.trim(), value.trim()));
    }
    Ok(out)
}

/// Parse `name=value,name=value` (W3C baggage style, as `OTEL_EXPORTER_OTLP_HEADERS`).
/// Messages name the entry and header, never a value.
///
/// # Errors
/// An entry without `=`, an empty name or value, or one HTTP cannot carry.
pub(crate) fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, name, value) in baggage(text, "name=value,name=value")? {
        let name = name.to_ascii_lowercase();
        let value = percent_decode(value);
        if name.is_empty() {
            return Err(format!("entry {i} has no header name"));
        }
        if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("{name:?} is not a valid header name"));
        }
        if value.is_empty() {
            return Err(format!("header {name:?} has an empty value"));
        }
        if axum::http::HeaderValue::from_str(&value).is_err() {
            return Err(format!(
                "the value of header {name:?} holds characters a header cannot carry (control characters or non-ASCII; percent-encode them)"
            ));
        }
        out.retain(|(n, _)| *n != name);
        out.push((name, value));
    }
    Ok(out)
}

/// Validated `[otlp]`: `None` fields are left to the SDK (environment, then defaults).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct OtlpSettings {
    /// Endpoint set in truthscale's configuration or flags.
    pub endpoint: Option<String>,
    /// Protocol set in truthscale's configuration.
    pub protocol: Option<OtlpProtocol>,
    /// Export timeout set in truthscale's configuration.
    pub timeout: Option<Duration>,
    /// Export interval set in truthscale's configuration.
    pub interval: Option<Duration>,
    /// Temporality set in truthscale's configuration.
    pub temporality: Option<OtlpTemporality>,
    /// The export timeout in force (configuration, else the standard variables, else the
    /// SDK's 10 s): an export that fails after this long failed by timing out.
    pub effective_timeout: Duration,
    /// Headers of `otlp.headers`: sent on top of the SDK's own (which come from
    /// `OTEL_EXPORTER_OTLP_METRICS_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`), winning for
    /// the same name.
    pub headers: OtlpHeaders,
    /// Compression set in truthscale's configuration (else the SDK reads the variables).
    pub compression: Option<OtlpCompression>,
    /// TLS files from the configuration or the variables (the SDK reads none of them).
    pub tls: OtlpTls,
    /// The `OTEL_…` variables, `HOSTNAME`, `POD_UID` and `SSL_CERT_FILE`/`SSL_CERT_DIR` as the
    /// environment held them at start: the protocol, the endpoint and the resource are
    /// resolved from these. (The SDK reads the
    /// variables it resolves itself, such as `OTEL_EXPORTER_OTLP_HEADERS`, on its own.)
    pub env: Vec<(String, String)>,
}

impl OtlpSettings {
    /// The variable `k` at start, trimmed, when set and not empty.
    pub(crate) fn var(&self, k: &str) -> Option<String> {
        self.env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }
}

/// The file the key names, else the first of `vars` that is set.
fn first_set(
    key: (&'static str, Option<&Path>),
    vars: [&'static str; 2],
    getenv: &impl Fn(&str) -> Option<String>,
) -> Option<PemFile> {
    if let (k, Some(p)) = key
        && !p.as_os_str().is_empty()
    {
        return Some(PemFile {
            path: p.to_path_buf(),
            origin: k,
        });
    }
    vars.into_iter().find_map(|v| {
        getenv(v).map(|p| PemFile {
            path: PathBuf::from(p),
            origin: v,
        })
    })
}

/// `gzip` or `none`, named by `origin` in the message.
fn compression(origin: &'static str, v: &str) -> Result<OtlpCompression, Invalid> {
    match v.trim().to_ascii_lowercase().as_str() {
        "gzip" => Ok(OtlpCompression::Gzip),
        "none" => Ok(OtlpCompression::None),
        "zstd" => Err(Invalid::new(
            origin,
            "zstd is not built into truthscale; use gzip or none",
        )),
        other => Err(Invalid::new(
            origin,
            format!("{other:?} is not one of gzip, none"),
        )),
    }
}

/// The durations set: `otlp.timeout`, `otlp.interval`, and the standard variables' timeout.
struct Durations {
    timeout: Option<Duration>,
    interval: Option<Duration>,
    env_timeout: Option<Duration>,
}

impl OtlpConfig {
    /// Check the section against the environment; `None` when OTLP is off.
    ///
    /// # Errors
    /// An [`Invalid`] naming the key, for a bad value.
    pub(crate) fn validate(
        &self,
        env: &[(String, String)],
    ) -> Result<Option<OtlpSettings>, Invalid> {
        let getenv = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let endpoint = self.endpoint()?;
        let protocol = self.protocol()?;
        let Durations {
            timeout,
            interval,
            env_timeout,
        } = self.durations(&getenv)?;
        let temporality = self.temporality()?;
        temporality_variable(env)?;
        for name in unknown_otlp_variables(env) {
            tracing::warn!(
                variable = name,
                "{name} is not an OTLP exporter variable of the OpenTelemetry specification (a misspelling of OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT?): it is not read."
            );
        }
        let on = self.enabled
            || endpoint.is_some()
            || getenv("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some();
        let sdk_disabled =
            getenv("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if !on || sdk_disabled {
            // The keys of `[otlp]` are checked even so (not the variables, which other
            // programs of the pod may share): a bad one is a bad configuration, used or not.
            let unset = |_: &str| None;
            self.headers(&unset)?;
            self.compression(&unset)?;
            self.tls(&unset, &[])?;
            if on {
                tracing::warn!(
                    "OTEL_SDK_DISABLED=true: nothing is pushed over OTLP, although an endpoint is set (otlp.endpoint, --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT); unset OTEL_SDK_DISABLED to push."
                );
            }
            return Ok(None);
        }
        // Read only where OTLP pushes: other programs of the pod may share these variables.
        if let Some(v) = getenv("OTEL_SDK_DISABLED")
            .filter(|v| !v.eq_ignore_ascii_case("true") && !v.eq_ignore_ascii_case("false"))
        {
            tracing::warn!(
                value = %v,
                "OTEL_SDK_DISABLED is neither true nor false: read as false (OTLP is not disabled by it); set it to true to disable."
            );
        }
        if let Some(v) = getenv("OTEL_RESOURCE_ATTRIBUTES") {
            resource_attributes(&v).map_err(|m| Invalid::new("OTEL_RESOURCE_ATTRIBUTES", m))?;
        }
        let settings = OtlpSettings {
            endpoint,
            protocol,
            timeout,
            interval,
            temporality,
            effective_timeout: timeout.or(env_timeout).unwrap_or(DEFAULT_TIMEOUT),
            headers: OtlpHeaders(self.headers(&getenv)?),
            compression: self.compression(&getenv)?,
            tls: self.tls(&getenv, env)?,
            env: env
                .iter()
                .filter(|(k, _)| {
                    k.starts_with("OTEL_")
                        || ["HOSTNAME", "POD_UID", "SSL_CERT_FILE", "SSL_CERT_DIR"]
                            .contains(&k.as_str())
                })
                .cloned()
                .collect(),
        };
        resolved_transport(&settings)?;
        Ok(Some(settings))
    }

    /// `otlp.endpoint`, an http(s) URL, when set.
    fn endpoint(&self) -> Result<Option<String>, Invalid> {
        let endpoint = self
            .endpoint
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_string);
        if let Some(e) = &endpoint
            && !e.starts_with("http://")
            && !e.starts_with("https://")
        {
            return Err(Invalid::new(
                "otlp.endpoint",
                format!("{e:?} is not an http:// or https:// URL (e.g. https://collector:4317)"),
            ));
        }
        Ok(endpoint)
    }

    /// `otlp.protocol`, when set.
    fn protocol(&self) -> Result<Option<OtlpProtocol>, Invalid> {
        Ok(match self.protocol.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(p) => Some(OtlpProtocol::parse(p).ok_or_else(|| {
                Invalid::new(
                    "otlp.protocol",
                    format!("{p:?} is not one of grpc, http/protobuf"),
                )
            })?),
        })
    }

    /// `otlp.timeout` and `otlp.interval` when set, and the timeout of the standard
    /// variables; the variables the SDK reads itself are refused where it would spin or
    /// stall on them.
    fn durations(&self, getenv: &impl Fn(&str) -> Option<String>) -> Result<Durations, Invalid> {
        let timeout = match self.timeout.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(t) => Some(crate::setting::duration(
                "otlp.timeout",
                t,
                TIMEOUT_RANGE.0,
                TIMEOUT_RANGE.1,
            )?),
        };
        let interval = match self.interval.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(t) => Some(crate::setting::duration(
                "otlp.interval",
                t,
                INTERVAL_RANGE.0,
                INTERVAL_RANGE.1,
            )?),
        };
        // The SDK reads the standard variables itself; refuse the values it would spin or
        // stall on (`OTEL_METRIC_EXPORT_INTERVAL=0` busy-loops a thread), naming them.
        env_millis(
            "OTEL_METRIC_EXPORT_INTERVAL",
            getenv("OTEL_METRIC_EXPORT_INTERVAL"),
            INTERVAL_RANGE,
        )?;
        let env_timeout = env_millis(
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
            getenv("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"),
            TIMEOUT_RANGE,
        )?
        .or(env_millis(
            "OTEL_EXPORTER_OTLP_TIMEOUT",
            getenv("OTEL_EXPORTER_OTLP_TIMEOUT"),
            TIMEOUT_RANGE,
        )?);
        Ok(Durations {
            timeout,
            interval,
            env_timeout,
        })
    }

    /// `otlp.temporality`, when set.
    fn temporality(&self) -> Result<Option<OtlpTemporality>, Invalid> {
        Ok(match self.temporality.as_deref().map(str::trim) {
            None | Some("") => None,
            Some("cumulative") => Some(OtlpTemporality::Cumulative),
            Some("delta") => Some(OtlpTemporality::Delta),
            Some(t) => {
                return Err(Invalid::new(
                    "otlp.temporality",
                    format!("{t:?} is not one of cumulative, delta"),
                ));
            }
        })
    }

    /// The headers of `otlp.headers`; the variable's are checked too, which the SDK would
    /// drop entry by entry without a word (a missing API key then shows only as 401s).
    fn headers(
        &self,
        getenv: &impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, String)>, Invalid> {
        let headers = match self.headers.as_deref().map(str::trim) {
            None | Some("") => Vec::new(),
            Some(h) => parse_headers(h).map_err(|m| Invalid::new("otlp.headers", m))?,
        };
        let headers_var = [
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ]
        .into_iter()
        .find_map(|v| getenv(v).map(|h| (v, h)));
        if let Some((var, h)) = headers_var {
            parse_headers(&h).map_err(|m| Invalid::new(var, m))?;
        }
        Ok(headers)
    }

    /// `otlp.compression`, passed to the SDK, which reads the variables otherwise.
    fn compression(
        &self,
        getenv: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<OtlpCompression>, Invalid> {
        let compression_key = match self.compression.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(c) => Some(compression("otlp.compression", c)?),
        };
        let mut compression_var = None;
        for var in [
            "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ] {
            if let Some(v) = getenv(var) {
                let c = compression(var, &v)?;
                compression_var.get_or_insert((var, c));
            }
        }
        if compression_key == Some(OtlpCompression::None)
            && let Some((var, OtlpCompression::Gzip)) = compression_var
        {
            // The SDK has no way to be told "none" over the variable.
            return Err(Invalid::new(
                "otlp.compression",
                format!(
                    "\"none\" cannot override {var}=gzip (the SDK reads the variable itself); unset {var}"
                ),
            ));
        }
        Ok(compression_key)
    }

    /// The TLS files (read by truthscale: the SDK does not read these variables), each read
    /// and parsed now, so that a missing or bad one stops the start with its name.
    fn tls(
        &self,
        getenv: &impl Fn(&str) -> Option<String>,
        env: &[(String, String)],
    ) -> Result<OtlpTls, Invalid> {
        let tls = OtlpTls {
            certificate: first_set(
                ("otlp.certificate", self.certificate.as_deref()),
                [
                    "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
                    "OTEL_EXPORTER_OTLP_CERTIFICATE",
                ],
                getenv,
            ),
            client_certificate: first_set(
                (
                    "otlp.client_certificate",
                    self.client_certificate.as_deref(),
                ),
                [
                    "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                ],
                getenv,
            ),
            client_key: first_set(
                ("otlp.client_key", self.client_key.as_deref()),
                [
                    "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
                    "OTEL_EXPORTER_OTLP_CLIENT_KEY",
                ],
                getenv,
            ),
        };
        match (&tls.client_certificate, &tls.client_key) {
            (Some(c), None) => {
                return Err(Invalid::new(
                    c.origin,
                    format!(
                        "a client certificate needs its key: set otlp.client_key, OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY or OTEL_EXPORTER_OTLP_CLIENT_KEY too (certificate: {c})"
                    ),
                ));
            }
            (None, Some(k)) => {
                return Err(Invalid::new(
                    k.origin,
                    format!(
                        "a client key needs its certificate: set otlp.client_certificate, OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE or OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE too (key: {k})"
                    ),
                ));
            }
            _ => {}
        }
        // Read and parse every file now, so that a missing or bad one stops the start
        // with its name (the system roots are loaded at start, only for https://).
        if tls.certificate.is_some() || tls.client_certificate.is_some() {
            let roots = match &tls.certificate {
                Some(_) => tls.roots(env)?,
                None => rustls::RootCertStore::empty(),
            };
            tls.client_config(roots)?;
        }
        Ok(tls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    /// `OTEL_RESOURCE_ATTRIBUTES` is percent-decoded as the specification asks (it arrived as
    /// `a%20b`), and a malformed value stops the start naming the variable (it was dropped
    /// without a word).
    #[test]
    fn resource_attributes_are_decoded_and_a_bad_one_is_refused() {
        assert_eq!(
            resource_attributes(
                " team=a%20b , deployment.environment=prod,k8s.cluster.name=c%2C1,"
            )
            .unwrap(),
            [
                ("team".to_owned(), "a b".to_owned()),
                ("deployment.environment".to_owned(), "prod".to_owned()),
                ("k8s.cluster.name".to_owned(), "c,1".to_owned()),
            ]
        );
        assert!(
            resource_attributes("garbage")
                .unwrap_err()
                .contains("entry 1 has no '='")
        );
        assert!(
            resource_attributes("a=1,=2")
                .unwrap_err()
                .contains("entry 2 has no key")
        );
        let on = |v: &str| {
            OtlpConfig {
                enabled: true,
                ..OtlpConfig::default()
            }
            .validate(&env(&[("OTEL_RESOURCE_ATTRIBUTES", v)]))
        };
        let e = on("garbage").unwrap_err();
        assert_eq!(e.key, "OTEL_RESOURCE_ATTRIBUTES", "{e:?}");
        assert!(on("team=a%20b").is_ok());
        // With OTLP off the variable is not read: another program of the pod may own it.
        let off = OtlpConfig::default().validate(&env(&[("OTEL_RESOURCE_ATTRIBUTES", "garbage")]));
        assert_eq!(off, Ok(None));
    }

    /// A scratch directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "truthscale-otlp-config-{name}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn write(&self, name: &str, text: &str) -> String {
            let p = self.0.join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A CA, and a certificate with its key signed by it.
    fn ca_and_leaf() -> (String, String, String) {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "truthscale test CA");
        let ca =
            rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["client".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        (ca.pem(), leaf.pem(), key.serialize_pem())
    }

    fn on() -> OtlpConfig {
        OtlpConfig {
            enabled: true,
            ..OtlpConfig::default()
        }
    }

    #[test]
    fn tls_files_follow_the_precedence() {
        let dir = Scratch::new("precedence");
        let (ca, _, _) = ca_and_leaf();
        let generic = dir.write("generic.pem", &ca);
        let metrics = dir.write("metrics.pem", &ca);
        let key = dir.write("key.pem", &ca);
        let vars = env(&[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &generic),
            ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", &metrics),
        ]);
        let ca_of = |c: &OtlpConfig, e: &[(String, String)]| {
            let f = c.validate(e).unwrap().unwrap().tls.certificate.unwrap();
            (f.origin, f.path.display().to_string())
        };
        let mut c = on();
        c.certificate = Some(PathBuf::from(&key));
        assert_eq!(ca_of(&c, &vars), ("otlp.certificate", key.clone()));
        c.certificate = None;
        assert_eq!(
            ca_of(&c, &vars),
            ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", metrics)
        );
        assert_eq!(
            ca_of(&c, &vars[..1]),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", generic)
        );
        assert_eq!(c.validate(&[]).unwrap().unwrap().tls, OtlpTls::default());
        // OTLP off: the files are not looked at.
        let off = OtlpConfig::default();
        assert_eq!(
            off.validate(&env(&[(
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                "/nonexistent.pem"
            )])),
            Ok(None)
        );
    }

    #[test]
    fn a_missing_or_bad_ca_is_refused_naming_it() {
        let dir = Scratch::new("bad-ca");
        let missing = dir.0.join("missing.pem").display().to_string();
        let Invalid { key, message: msg } = on()
            .validate(&env(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", &missing)]))
            .unwrap_err();
        assert_eq!(key, "OTEL_EXPORTER_OTLP_CERTIFICATE");
        assert!(
            msg.contains(&missing) && msg.contains("cannot read"),
            "{msg}"
        );
        let garbage = dir.write("garbage.pem", "not a certificate\n");
        let mut c = on();
        c.certificate = Some(PathBuf::from(&garbage));
        let Invalid { key, message: msg } = c.validate(&[]).unwrap_err();
        assert_eq!(key, "otlp.certificate");
        assert!(
            msg.contains(&garbage) && msg.contains("no PEM certificate"),
            "{msg}"
        );
        let (_, _, private_key) = ca_and_leaf();
        let a_key = dir.write("a-key.pem", &private_key);
        c.certificate = Some(PathBuf::from(&a_key));
        let Invalid {
            key: _,
            message: msg,
        } = c.validate(&[]).unwrap_err();
        assert!(msg.contains("no PEM certificate"), "{msg}");
    }

    #[test]
    fn a_client_certificate_needs_its_own_key() {
        let dir = Scratch::new("client");
        let (ca, leaf, key) = ca_and_leaf();
        let (_, _, other_key) = ca_and_leaf();
        let ca = dir.write("ca.pem", &ca);
        let leaf = dir.write("client.pem", &leaf);
        let key = dir.write("client.key", &key);
        let other_key = dir.write("other.key", &other_key);
        let vars = |k: &str| {
            env(&[
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.as_str()),
                ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", leaf.as_str()),
                ("OTEL_EXPORTER_OTLP_CLIENT_KEY", k),
            ])
        };
        let tls = on().validate(&vars(&key)).unwrap().unwrap().tls;
        assert_eq!(
            tls.client_key.unwrap().origin,
            "OTEL_EXPORTER_OTLP_CLIENT_KEY"
        );
        let Invalid {
            key: var,
            message: msg,
        } = on().validate(&vars(&other_key)).unwrap_err();
        assert_eq!(var, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
        assert!(msg.contains("does not go with"), "{msg}");
        let Invalid {
            key: var,
            message: msg,
        } = on().validate(&vars(&ca)).unwrap_err();
        assert_eq!(var, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
        assert!(msg.contains("no PEM private key"), "{msg}");
        let Invalid {
            key: var,
            message: msg,
        } = on().validate(&vars(&key)[..2]).unwrap_err();
        assert_eq!(var, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE");
        assert!(msg.contains("needs its key"), "{msg}");
        // The key's own setting wins over the variable, and is checked the same way.
        let mut c = on();
        c.client_key = Some(PathBuf::from(&other_key));
        let Invalid {
            key: key_name,
            message: _,
        } = c.validate(&vars(&key)).unwrap_err();
        assert_eq!(key_name, "otlp.client_key");
    }

    #[test]
    fn headers_parse_like_the_variable_and_never_show_values() {
        assert_eq!(
            parse_headers(" api-key = s%20e%2Ccret , X-Tenant=7,,"),
            Ok(vec![
                ("api-key".to_string(), "s e,cret".to_string()),
                ("x-tenant".to_string(), "7".to_string())
            ])
        );
        assert_eq!(
            parse_headers("a=1,a=2"),
            Ok(vec![("a".to_string(), "2".to_string())])
        );
        // A value is shown neither as written nor decoded (`%0A` is a newline, which `{:?}`
        // writes as `\n`).
        for bad in ["novalue", "=x", "a=", "bad name=1", "a=%0A", "a=s3cr3t%0A"] {
            let e = parse_headers(bad).unwrap_err();
            assert!(
                !e.contains("%0A")
                    && !e.contains('\n')
                    && !e.contains("\\n")
                    && !e.contains("s3cr3t"),
                "{e}"
            );
        }
        let mut c = on();
        c.headers = Some("authorization=Bearer%20secret,tenant=t1".into());
        let s = c.validate(&[]).unwrap().unwrap();
        assert_eq!(
            s.headers.0,
            [
                ("authorization".to_string(), "Bearer secret".to_string()),
                ("tenant".to_string(), "t1".to_string())
            ]
        );
        let shown = format!("{s:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("secret"),
            "{shown}"
        );
        c.headers = Some("authorization".into());
        assert_eq!(c.validate(&[]).unwrap_err().key, "otlp.headers");
        // The variables are checked too (the SDK would drop a bad entry silently), and the
        // signal-specific one is the one read.
        let Invalid {
            key: var,
            message: msg,
        } = on()
            .validate(&env(&[
                ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
                ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-api-key"),
            ]))
            .unwrap_err();
        assert_eq!(var, "OTEL_EXPORTER_OTLP_METRICS_HEADERS");
        assert!(msg.contains("entry 1"), "{msg}");
    }

    /// A temporality the SDK does not know is refused, naming the variable (the SDK would
    /// fall back to cumulative without a word); its names, in any case, are taken.
    #[test]
    fn the_temporality_variable_is_checked() {
        let var = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
        let msg = on()
            .validate(&env(&[(var, "deltas")]))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains(var) && msg.contains("\"deltas\" is not one of"),
            "{msg}"
        );
        for ok in ["Delta", "cumulative", "LowMemory"] {
            assert!(on().validate(&env(&[(var, ok)])).is_ok(), "{ok}");
        }
        // The SDK does not trim it: a padded value would be taken as cumulative.
        assert!(on().validate(&env(&[(var, "delta ")])).is_err());
    }

    /// Misspelled exporter variables are found (and logged), the specification's are not.
    #[test]
    fn misspelled_otlp_variables_are_found() {
        let env: Vec<(String, String)> = [
            "OTEL_EXPORTER_OTLP_METRIC_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPIONT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
            "OTEL_SERVICE_NAME",
        ]
        .iter()
        .map(|k| ((*k).to_owned(), "x".to_owned()))
        .collect();
        assert_eq!(
            unknown_otlp_variables(&env),
            vec![
                "OTEL_EXPORTER_OTLP_METRIC_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPIONT"
            ]
        );
    }

    /// What `serve` would refuse at start is refused by the settings' check (so by `config
    /// check` too), naming the key or variable: an unknown protocol variable, an endpoint
    /// that is no URL with a host; a bare `host:port` is one to gRPC only.
    #[test]
    fn the_protocol_and_endpoint_in_force_are_checked() {
        let vars = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let err =
            |c: &OtlpConfig, env: &[(&str, &str)]| c.validate(&vars(env)).unwrap_err().to_string();
        let e = err(&on(), &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && e.contains("http/json"),
            "{e}"
        );
        let bare = [("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")];
        let e = err(&on(), &bare);
        assert!(e.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{e}");
        let mut grpc = on();
        grpc.protocol = Some("grpc".into());
        assert!(grpc.validate(&vars(&bare)).unwrap().is_some());
        for bad in ["http://", "http://col lector:4318"] {
            let mut c = on();
            c.endpoint = Some(bad.into());
            let e = err(&c, &[]);
            assert!(e.contains("otlp.endpoint"), "{bad}: {e}");
        }
        let mut c = on();
        c.endpoint = Some("http://collector:4318".into());
        assert!(c.validate(&[]).unwrap().is_some());
        assert!(
            on().validate(&[]).unwrap().is_some(),
            "the SDK's default endpoint"
        );
    }

    /// OTLP off: the keys of `[otlp]` are checked all the same, naming the key; the
    /// variables are not (other programs may share them).
    #[test]
    fn keys_are_checked_while_off() {
        let off = OtlpConfig::default();
        assert_eq!(off.validate(&[]), Ok(None));
        let mut c = off.clone();
        c.compression = Some("brotli".into());
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .contains("otlp.compression")
        );
        let mut c = off.clone();
        c.headers = Some("no-equals-sign".into());
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .contains("otlp.headers")
        );
        let mut c = off.clone();
        c.certificate = Some("/nonexistent/ca.pem".into());
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .contains("otlp.certificate")
        );
        let shared = vec![(
            "OTEL_EXPORTER_OTLP_COMPRESSION".to_owned(),
            "brotli".to_owned(),
        )];
        assert_eq!(off.validate(&shared), Ok(None));
    }

    #[test]
    fn compression_from_the_key_or_the_variables() {
        let mut c = on();
        assert_eq!(c.validate(&[]).unwrap().unwrap().compression, None);
        c.compression = Some("GZIP".into());
        assert_eq!(
            c.validate(&[]).unwrap().unwrap().compression,
            Some(OtlpCompression::Gzip)
        );
        let vars = env(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")]);
        c.compression = Some("none".into());
        let Invalid { key, message: msg } = c.validate(&vars).unwrap_err();
        assert_eq!(key, "otlp.compression");
        assert!(
            msg.contains("unset OTEL_EXPORTER_OTLP_COMPRESSION"),
            "{msg}"
        );
        // The signal-specific variable says none: no conflict.
        let vars = env(&[
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "none"),
        ]);
        assert!(c.validate(&vars).is_ok());
        let Invalid {
            key: var,
            message: msg,
        } = on()
            .validate(&env(&[("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "zstd")]))
            .unwrap_err();
        assert_eq!(var, "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION");
        assert!(msg.contains("zstd is not built in"), "{msg}");
        c.compression = Some("brotli".into());
        assert_eq!(c.validate(&[]).unwrap_err().key, "otlp.compression");
    }

    #[test]
    fn https_endpoints_are_accepted() {
        let mut c = on();
        c.endpoint = Some("https://collector.example:4317".into());
        assert!(c.validate(&[]).unwrap().is_some());
        c.endpoint = Some("collector:4317".into());
        assert_eq!(c.validate(&[]).unwrap_err().key, "otlp.endpoint");
    }

    /// The OTLP certificate, client certificate and key are read bounded: `/dev/zero`, a
    /// FIFO, a directory and a file over 1 MiB are refused at once, naming the setting and
    /// the file.
    #[test]
    fn pem_files_are_read_bounded() {
        let dir = Scratch::new("bounded");
        let t = std::time::Instant::now();
        for (path, why) in crate::bounds::hostile::files(&dir.0, crate::bounds::MAX_PEM_FILE) {
            let file = PemFile {
                path: path.clone(),
                origin: "otlp.certificate",
            };
            let expected = Invalid::new(
                "otlp.certificate",
                format!("cannot read {}: {why}", path.display()),
            );
            assert_eq!(file.certificates().unwrap_err(), expected);
            assert_eq!(file.private_key().unwrap_err(), expected);
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }
}
