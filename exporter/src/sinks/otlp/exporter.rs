//! The counting exporter: wraps the SDK's exporter, classifies each failed export into a
//! kind (`truthscale_sink_errors_total{sink="otlp",kind}`), logs failures rate-limited (a
//! failed TLS handshake with a hint), and backs off while the collector keeps failing.

use super::instruments::Delivery;
use super::transport::{ClientCertAsked, TransportDetail};
use crate::logging::LogLimiter;
use crate::publish::SinkErrors;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `sink` label value of OTLP failures.
pub(crate) const SINK: &str = "otlp";

/// Failure kinds counted in `truthscale_sink_errors_total{sink="otlp"}`.
pub(crate) const ERROR_KINDS: [&str; 4] = ["unavailable", "timeout", "rejected", "other"];

/// Longest pause between export attempts while the collector keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

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
pub(super) fn error_kind(e: &OTelSdkError) -> &'static str {
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
    /// Failures are logged at most every 30 s per kind (a new kind at once), and the first
    /// after a success at once.
    log: LogLimiter,
    /// Failures since the last one logged.
    unlogged: u64,
    succeeded_once: bool,
    /// Partial successes are logged at most every 30 s: they come with exports that
    /// succeeded, which reset `log`.
    partial_log: LogLimiter,
}

impl ExportState {
    /// An export succeeded: say so when it ends an outage (or is the first), and reset.
    fn succeeded(&mut self, now: Instant) {
        if self.consecutive > 0 {
            tracing::info!(
                sink = SINK,
                failed_exports = self.consecutive,
                outage = ?self.outage_since.map(|t| now - t),
                "OTLP export succeeded again."
            );
        } else if !self.succeeded_once {
            tracing::info!(sink = SINK, "First OTLP export succeeded.");
        }
        self.succeeded_once = true;
        self.log = LogLimiter::default();
        self.consecutive = 0;
        self.not_before = None;
        self.outage_since = None;
        self.unlogged = 0;
    }
}

/// Wraps the OTLP exporter: counts failures into [`SinkErrors`], logs them rate-limited
/// (a failed TLS handshake with a hint), and backs off (skips exports) while the collector
/// keeps failing.
#[derive(Debug)]
pub(crate) struct CountingExporter<E> {
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
    /// Set when the process stops: the final export is attempted even while backing off
    /// (an export skipped then is never retried).
    stopping: Arc<AtomicBool>,
    /// Told whether each export reached the collector (the instruments resend a delta
    /// change that did not).
    delivery: Arc<Delivery>,
}

impl<E> CountingExporter<E> {
    /// Wrap `inner`, each of whose attempts times out after `timeout` (an export with a
    /// retry can take longer).
    pub(crate) fn new(inner: E, errors: SinkErrors, timeout: Duration) -> Self {
        CountingExporter {
            inner,
            errors,
            state: Mutex::new(ExportState::default()),
            timeout,
            detail: None,
            trust: None,
            client_cert_asked: None,
            stopping: Arc::default(),
            delivery: Arc::default(),
        }
    }

    /// The final export is attempted even while backing off once `stopping` is set.
    pub(super) fn with_stopping(mut self, stopping: Arc<AtomicBool>) -> Self {
        self.stopping = stopping;
        self
    }

    /// Tell `delivery` whether each export reached the collector.
    pub(super) fn with_delivery(mut self, delivery: Arc<Delivery>) -> Self {
        self.delivery = delivery;
        self
    }

    /// Add the HTTP client's transport error to failures that carry none.
    pub(super) fn with_transport_detail(mut self, detail: TransportDetail) -> Self {
        self.detail = Some(detail);
        self
    }

    /// The endpoint uses TLS, checked against `trust` (for hints).
    pub(super) fn with_trust(mut self, trust: String) -> Self {
        self.trust = Some(trust);
        self
    }

    /// Whether the collector asked for a client certificate truthscale lacks is noted in
    /// `asked` (TLS endpoints).
    pub(super) fn with_client_cert_asked(mut self, asked: Option<ClientCertAsked>) -> Self {
        self.client_cert_asked = asked;
        self
    }

    /// `e` with the transport error the HTTP client kept, when the SDK's message lacks it.
    fn detailed(&self, e: OTelSdkError) -> OTelSdkError {
        let Some(d) = self
            .detail
            .as_ref()
            .and_then(|d| d.error.lock().ok().and_then(|mut d| d.take()))
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

    /// A collector's partial success after an export that succeeded: the points it
    /// rejected are counted (`rejected`) and logged (rate-limited), never dropped silently.
    fn partially_rejected(&self) {
        let Some((points, why)) = self
            .detail
            .as_ref()
            .and_then(|d| d.partial.lock().ok().and_then(|mut p| p.take()))
        else {
            return;
        };
        self.errors.add(SINK, "rejected");
        let Ok(mut s) = self.state.lock() else { return };
        if s.partial_log.allow("partial") {
            tracing::warn!(
                sink = SINK,
                kind = "rejected",
                rejected_data_points = points,
                error = %why,
                "The OTLP collector accepted the export but rejected part of it (partial success); check the collector's limits and logs."
            );
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
            Ok(()) => s.succeeded(now),
            Err(e) => self.failed(&mut s, e, now, took, client_cert_asked),
        }
    }

    /// Count a failed export, back off, and log it when due.
    fn failed(
        &self,
        s: &mut ExportState,
        e: &OTelSdkError,
        now: Instant,
        took: Duration,
        client_cert_asked: bool,
    ) {
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
        if s.log.allow(kind) {
            self.log_failure(s, e, kind, backoff, client_cert_asked);
            s.unlogged = 0;
        }
    }

    /// Log a failed export, with a hint when the TLS handshake failed.
    fn log_failure(
        &self,
        s: &ExportState,
        e: &OTelSdkError,
        kind: &'static str,
        backoff: Duration,
        client_cert_asked: bool,
    ) {
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
    }
}

impl<E: PushMetricExporter> PushMetricExporter for CountingExporter<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        if self.backing_off() && !self.stopping.load(Ordering::Relaxed) {
            // Cumulative totals lose nothing by a skipped export; the next one carries them.
            // Delta changes go with the next export that is delivered (`delivery`); the skip
            // is counted.
            if self.inner.temporality() == Temporality::Delta {
                self.errors.add(SINK, "skipped");
            }
            self.delivery.set(false);
            return Ok(());
        }
        if let Some(d) = &self.detail {
            if let Ok(mut e) = d.error.lock() {
                *e = None;
            }
            if let Ok(mut p) = d.partial.lock() {
                *p = None;
            }
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
        self.delivery.set(result.is_ok());
        if result.is_ok() {
            self.partially_rejected();
        }
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

    /// A partial success comes with an export that succeeded, which lets the next failure be
    /// logged at once: its own line is still said at most every 30 s, not at every export.
    #[test]
    fn a_partial_success_is_logged_at_most_every_30_s() {
        let mut s = ExportState::default();
        assert!(s.partial_log.allow("partial"));
        s.succeeded(Instant::now());
        assert!(!s.partial_log.allow("partial"));
        assert!(
            s.log.allow("timeout"),
            "a failure after a success is said at once"
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
}
