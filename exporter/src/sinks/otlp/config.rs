//! `[otlp]`: the OTLP sink's own configuration and its validation (the standard
//! `OTEL_…` variables first, keys that mirror them).

use serde::{Deserialize, Serialize};
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
) -> Result<Option<Duration>, (&'static str, String)> {
    let Some(v) = value else { return Ok(None) };
    let ms: u64 = v.parse().map_err(|_| {
        (
            var,
            format!("{v:?} is not a whole number of milliseconds (e.g. 10000)"),
        )
    })?;
    let d = Duration::from_millis(ms);
    if d < min || d > max {
        return Err((
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
    pub fn parse(s: &str) -> Option<OtlpProtocol> {
        match s.trim() {
            "grpc" => Some(OtlpProtocol::Grpc),
            "http/protobuf" => Some(OtlpProtocol::HttpProtobuf),
            _ => None,
        }
    }
}

/// OTLP aggregation temporality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpTemporality {
    /// Totals since start.
    Cumulative,
    /// Changes since the previous export.
    Delta,
}

/// Validated `[otlp]`: `None` fields are left to the SDK (environment, then defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
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
}

impl OtlpConfig {
    /// Check the section against the environment; `None` when OTLP is off.
    ///
    /// # Errors
    /// `(key, message)` for a bad value.
    pub fn validate(
        &self,
        env: &[(String, String)],
    ) -> Result<Option<OtlpSettings>, (&'static str, String)> {
        let getenv = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let endpoint = self
            .endpoint
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_string);
        if let Some(e) = &endpoint {
            if e.starts_with("https://") {
                return Err((
                    "otlp.endpoint",
                    format!(
                        "{e:?}: TLS is not built into truthscale's OTLP exporter; push to a collector over http:// (e.g. a node-local agent)"
                    ),
                ));
            }
            if !e.starts_with("http://") {
                return Err((
                    "otlp.endpoint",
                    format!("{e:?} is not an http:// URL (e.g. http://localhost:4317)"),
                ));
            }
        }
        let protocol = match self.protocol.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(p) => Some(OtlpProtocol::parse(p).ok_or_else(|| {
                (
                    "otlp.protocol",
                    format!("{p:?} is not one of grpc, http/protobuf"),
                )
            })?),
        };
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
        let temporality = match self.temporality.as_deref().map(str::trim) {
            None | Some("") => None,
            Some("cumulative") => Some(OtlpTemporality::Cumulative),
            Some("delta") => Some(OtlpTemporality::Delta),
            Some(t) => {
                return Err((
                    "otlp.temporality",
                    format!("{t:?} is not one of cumulative, delta"),
                ));
            }
        };
        let on = self.enabled
            || endpoint.is_some()
            || getenv("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some();
        let sdk_disabled =
            getenv("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if !on || sdk_disabled {
            return Ok(None);
        }
        Ok(Some(OtlpSettings {
            endpoint,
            protocol,
            timeout,
            interval,
            temporality,
            effective_timeout: timeout.or(env_timeout).unwrap_or(DEFAULT_TIMEOUT),
        }))
    }
}
