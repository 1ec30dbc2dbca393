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
//! exporter wrapper ([`CountingExporter`]), logged at most every 30 s, and back off:
//! after repeated failures, exports are skipped for up to 30 s.
//!
//! Standard `OTEL_…` variables work as the SDK defines them; truthscale's own `[otlp]`
//! settings are passed to the SDK only when set, and then win.

pub mod config;

use crate::sinks::prometheus::{SinkErrors, Snapshot, VERSION};
use anyhow::Context as _;
use config::{OtlpProtocol, OtlpSettings, OtlpTemporality};
use opentelemetry::metrics::{
    AsyncInstrument, Meter, MeterProvider as _, ObservableCounter, ObservableGauge,
    ObservableUpDownCounter,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{MetricExporter, Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use truthscale_core::catalog::{self, MetricDesc, OtelInstrument, Scope};
use truthscale_core::exposition::{self, Identity};

/// The `sink` label value of OTLP failures.
pub const SINK: &str = "otlp";

/// Failure kinds counted in `truthscale_sink_errors_total{sink="otlp"}`.
pub const ERROR_KINDS: [&str; 4] = ["unavailable", "timeout", "rejected", "other"];

/// Repeated failures are logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Longest pause between export attempts while the collector keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The values of one pinned snapshot, per registered family.
#[derive(Debug, Default)]
struct Pinned {
    tick: u64,
    families: Vec<Vec<(Vec<KeyValue>, f64)>>,
}

#[derive(Debug)]
struct Shared {
    rx: watch::Receiver<Arc<Snapshot>>,
    families: Vec<&'static MetricDesc>,
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
        p.families = vec![Vec::new(); self.families.len()];
        if !snap.ready() {
            return;
        }
        exposition::for_each_value(&snap.gpus, &snap.identity, &snap.status, |m, labels, v| {
            let Some(i) = self.families.iter().position(|f| f.name == m.name) else {
                return;
            };
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
            p.families[i].push((attrs, v));
        });
    }

    fn observe_f64(&self, i: usize, obs: &dyn AsyncInstrument<f64>) {
        if let Ok(p) = self.pinned.lock()
            && let Some(points) = p.families.get(i)
        {
            for (attrs, v) in points {
                obs.observe(*v, attrs);
            }
        }
    }

    fn observe_i64(&self, i: usize, obs: &dyn AsyncInstrument<i64>) {
        if let Ok(p) = self.pinned.lock()
            && let Some(points) = p.families.get(i)
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
/// `meter`, reading values from the sidecar's snapshots (`Sidecar::subscribe`).
///
/// For a service that already has an OpenTelemetry `MeterProvider`: its own reader and
/// exporter then carry truthscale's metrics, with the values `/metrics` shows.
#[must_use]
pub fn register(meter: &Meter, rx: watch::Receiver<Arc<Snapshot>>) -> Registration {
    let families: Vec<&'static MetricDesc> =
        catalog::ALL.iter().filter(|m| m.otel.is_some()).collect();
    let shared = Arc::new(Shared {
        rx,
        families: families.clone(),
        pinned: Mutex::new(Pinned::default()),
    });
    let mut instruments = Vec::with_capacity(families.len());
    for (i, m) in families.iter().enumerate() {
        let Some(o) = m.otel else { continue };
        let s = Arc::clone(&shared);
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
                        s.observe_f64(i, obs);
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
                        s.observe_f64(i, obs);
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
                        s.observe_i64(i, obs);
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
    /// A bad `OTEL_…` value the SDK rejects, or an `https://` endpoint (TLS is not built
    /// in).
    pub fn start(
        settings: &OtlpSettings,
        identity: &Identity,
        rx: watch::Receiver<Arc<Snapshot>>,
        errors: SinkErrors,
    ) -> anyhow::Result<Otlp> {
        let proto = protocol(settings.protocol)?;
        if settings.endpoint.is_none() {
            for var in [
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ] {
                if let Some(v) = env_nonempty(var) {
                    anyhow::ensure!(
                        !v.starts_with("https://"),
                        "{var}={v:?}: TLS is not built into truthscale's OTLP exporter; push to a collector over http://"
                    );
                    break;
                }
            }
        }
        let temporality = settings.temporality.map(|t| match t {
            OtlpTemporality::Cumulative => Temporality::Cumulative,
            OtlpTemporality::Delta => Temporality::Delta,
        });
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
                b.build()
            }
            OtlpProtocol::HttpProtobuf => {
                let mut b = MetricExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary);
                if let Some(e) = &settings.endpoint {
                    b = b.with_endpoint(http_metrics_url(e));
                }
                if let Some(t) = settings.timeout {
                    b = b.with_timeout(t);
                }
                if let Some(t) = temporality {
                    b = b.with_temporality(t);
                }
                b.build()
            }
        }
        .context("cannot build the OTLP exporter")?;
        errors.register(SINK, &ERROR_KINDS);
        let exporter = CountingExporter::new(exporter, errors, settings.effective_timeout);
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
            endpoint = settings
                .endpoint
                .as_deref()
                .unwrap_or("(from OTEL_… or the SDK default)"),
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

/// The kind of an export failure, for `truthscale_sink_errors_total{kind}`.
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
    unlogged: u64,
    succeeded_once: bool,
}

/// Wraps the OTLP exporter: counts failures into [`SinkErrors`], logs them rate-limited,
/// and backs off (skips exports) while the collector keeps failing.
#[derive(Debug)]
pub struct CountingExporter<E> {
    inner: E,
    errors: SinkErrors,
    state: Mutex<ExportState>,
    timeout: Duration,
}

impl<E> CountingExporter<E> {
    /// Wrap `inner`, whose exports time out after `timeout`.
    pub fn new(inner: E, errors: SinkErrors, timeout: Duration) -> Self {
        CountingExporter {
            inner,
            errors,
            state: Mutex::new(ExportState::default()),
            timeout,
        }
    }

    fn backing_off(&self) -> bool {
        self.state
            .lock()
            .is_ok_and(|s| s.not_before.is_some_and(|t| Instant::now() < t))
    }

    fn record(&self, result: &OTelSdkResult, took: Duration) {
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
                s.consecutive = 0;
                s.not_before = None;
                s.outage_since = None;
                s.unlogged = 0;
            }
            Err(e) => {
                // The HTTP client reports a timeout as a bare "network error": a failure
                // that took the whole timeout is one.
                let kind = match error_kind(e) {
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
                if s.last_log.is_none_or(|t| now - t >= LOG_EVERY) {
                    tracing::warn!(
                        sink = SINK,
                        kind,
                        error = %e,
                        failures = s.unlogged,
                        next_attempt_in = ?backoff,
                        "OTLP export failed; sampling and /metrics are unaffected (repeats are logged every 30s)."
                    );
                    s.last_log = Some(now);
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
        let started = Instant::now();
        let result = self.inner.export(metrics).await;
        self.record(&result, started.elapsed());
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
    }
}
