//! OTLP push: the same values as `/metrics`, over gRPC or HTTP/protobuf.
//!
//! Every OTLP instrument is an asynchronous (observable) one, named by
//! [`truthscale_core::catalog`] (`MetricDesc::otel`). Callbacks never sample: they read the
//! latest [`Snapshot`] from the sidecar's `watch` channel, and take their values from
//! [`exposition::for_each_value`](truthscale_core::exposition::for_each_value), the
//! function `/metrics` is encoded from. The first callback of a collection pins one
//! snapshot and the others read that pinned one (the SDK runs callbacks in registration
//! order), so one export never mixes two ticks, and `truthscale.snapshot.timestamp` says
//! which tick it was.
//!
//! The SDK's `PeriodicReader` collects and exports on its own thread, so a slow or absent
//! collector never blocks sampling or `/metrics`. Nothing is queued between exports (the
//! reader keeps only the current aggregation), so memory stays bounded through an outage;
//! with cumulative temporality nothing is lost either, since the next export carries the
//! totals. Failures are counted in `truthscale_sink_errors_total{sink="otlp",kind}` by an
//! exporter wrapper (`CountingExporter`), logged at most every 30 s (a failure of another
//! kind, or the first after a success, at once), and back off:
//! after repeated failures, exports are skipped for up to 30 s.
//!
//! Standard `OTEL_…` variables work as the SDK defines them; truthscale's own `[otlp]`
//! settings are passed to the SDK only when set, and then win.
//!
//! `https://` endpoints use rustls (ring) for both protocols, checking the collector against
//! the CA file of `otlp.certificate` / `OTEL_EXPORTER_OTLP_(METRICS_)CERTIFICATE`, else the
//! system roots, and presenting the client certificate when one is set (mutual TLS). The
//! HTTP client is truthscale's one HTTP client (a ureq agent over that rustls
//! configuration, `client::agent_with_rustls`), handed to the SDK; it also keeps the transport error the SDK reduces to
//! "network error", so that a failed handshake is logged with its cause and a hint.
//!
//! The parts: `instruments` (the observable instruments and [`register`]), `transport`
//! (endpoint and protocol, the gRPC channel and the HTTP client on one rustls
//! configuration), `exporter` (`CountingExporter`, which classifies failures into kinds);
//! this module wires them into `Otlp::start`.

pub mod config;
mod exporter;
mod instruments;
mod transport;

pub(crate) use exporter::{CountingExporter, ERROR_KINDS, SINK};
pub use instruments::{Registration, register, register_with};

use crate::publish::{SinkErrors, Snapshot, VERSION};
use config::OtlpSettings;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::resource::TelemetryResourceDetector;
use opentelemetry_semantic_conventions::attribute as sa;
use opentelemetry_semantic_conventions::resource as sr;
use std::sync::Arc;
use tokio::sync::watch;
use truthscale_core::exposition::Identity;

/// The resource: `service.name` (default `truthscale`), `service.version`, `host.name`
/// (`HOSTNAME`, else the kernel's) and the `k8s.*` identity, overridden by
/// `OTEL_RESOURCE_ATTRIBUTES`, then by `OTEL_SERVICE_NAME`, both read from `env` (the
/// process environment, as [`crate::config::environment`] returns it).
#[must_use]
pub fn resource(identity: &Identity, env: &[(String, String)]) -> Resource {
    let env_nonempty = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let mut attrs = vec![
        KeyValue::new(sr::SERVICE_NAME, "truthscale"),
        KeyValue::new(sr::SERVICE_VERSION, VERSION),
    ];
    let host = env_nonempty("HOSTNAME").or_else(kernel_hostname);
    if let Some(h) = &host {
        attrs.push(KeyValue::new(sr::HOST_NAME, h.clone()));
    }
    // The pod's UID from the Downward API (`POD_UID`, fieldRef metadata.uid), where the
    // exporter is a pod's own (a sidecar): node mode's agent is not its GPUs' pod.
    let uid = identity.pod.as_ref().and(env_nonempty("POD_UID"));
    if let Some(id) = instance_id(identity, uid.as_deref(), host.as_deref()) {
        attrs.push(KeyValue::new(sr::SERVICE_INSTANCE_ID, id));
    }
    let k8s = [
        (sa::K8S_POD_NAME, identity.pod.as_ref()),
        (sa::K8S_POD_UID, uid.as_ref()),
        (sa::K8S_NAMESPACE_NAME, identity.namespace.as_ref()),
        (sa::K8S_CONTAINER_NAME, identity.container.as_ref()),
        (sa::K8S_NODE_NAME, identity.node.as_ref()),
    ];
    for (k, v) in k8s {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            attrs.push(KeyValue::new(k, v.clone()));
        }
    }
    // `OTEL_RESOURCE_ATTRIBUTES`, percent-decoded; refused at start where malformed
    // ([`config::resource_attributes`]), so nothing of it is left out here.
    let from_env = env_nonempty("OTEL_RESOURCE_ATTRIBUTES")
        .and_then(|v| config::resource_attributes(&v).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| KeyValue::new(k, v));
    let mut b = Resource::builder_empty()
        .with_attributes(attrs)
        .with_detectors(&[Box::new(TelemetryResourceDetector)])
        .with_attributes(from_env);
    if let Some(name) = env_nonempty("OTEL_SERVICE_NAME") {
        b = b.with_service_name(name);
    }
    b.build()
}

/// What tells this exporter from every other one sending to the same backend (OTLP
/// ingestion into Prometheus makes `instance` of it, so agents' own series would collide
/// without it): a sidecar's pod UID and container (else its namespace, pod and container),
/// a node agent's node, else the host name.
fn instance_id(identity: &Identity, uid: Option<&str>, host: Option<&str>) -> Option<String> {
    let nonempty = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
    let container = nonempty(&identity.container).unwrap_or_default();
    let pod = nonempty(&identity.pod).map(|pod| match uid {
        Some(u) => format!("{u}.{container}"),
        None => format!(
            "{}.{pod}.{container}",
            nonempty(&identity.namespace).unwrap_or_default()
        ),
    });
    pod.or_else(|| nonempty(&identity.node))
        .or_else(|| host.map(str::to_owned))
}

fn kernel_hostname() -> Option<String> {
    crate::bounds::read_file_to_string(
        std::path::Path::new("/proc/sys/kernel/hostname"),
        crate::bounds::MAX_HOSTNAME_FILE,
    )
    .ok()
    .map(|h| h.trim().to_string())
    .filter(|h| !h.is_empty())
}

/// A running OTLP pipeline: meter provider, periodic reader thread, instruments.
#[derive(Debug)]
pub(crate) struct Otlp {
    provider: SdkMeterProvider,
    _registration: Registration,
    /// Set before the final export: it is attempted even while exports back off.
    stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Otlp {
    /// Build the exporter and start exporting. Must run inside a Tokio runtime (the gRPC
    /// channel lives there); exports themselves run on the reader's own thread.
    ///
    /// # Errors
    /// A bad `OTEL_…` value the SDK rejects; for an `https://` endpoint, a CA or client
    /// certificate file that does not read or parse, or no system roots at all.
    pub(crate) fn start(
        settings: &OtlpSettings,
        identity: &Identity,
        rx: watch::Receiver<Arc<Snapshot>>,
        errors: SinkErrors,
    ) -> anyhow::Result<Otlp> {
        let proto = transport::protocol(settings)?;
        let (endpoint, endpoint_origin) = transport::endpoint(settings, proto);
        let tls = transport::uses_tls(settings, &endpoint, proto);
        if !tls && settings.tls.is_set() {
            tracing::warn!(
                endpoint = %transport::redact_userinfo(&endpoint),
                from = endpoint_origin,
                "A CA or client certificate is set for OTLP, but the endpoint is not https://: it is not used."
            );
        }
        // What the collector's certificate is checked against, for logs and hints.
        let trust = match &settings.tls.certificate {
            Some(f) => format!("the CA in {f}"),
            None => "the system roots".to_string(),
        };
        let built = transport::build(settings, proto, &endpoint, tls)?;
        let delta = {
            use opentelemetry_sdk::metrics::exporter::PushMetricExporter as _;
            built.exporter.temporality() == opentelemetry_sdk::metrics::Temporality::Delta
        };
        // Only delta exports lose anything by a skip: their count is written at 0 from the
        // start with the others, so the first skip is an increase a rate sees.
        let mut kinds = ERROR_KINDS.to_vec();
        if delta {
            kinds.push("skipped");
        }
        errors.register(SINK, &kinds);
        let mut exporter =
            CountingExporter::new(built.exporter, errors, settings.effective_timeout)
                .with_transport_detail(built.detail);
        if tls {
            exporter = exporter.with_trust(trust.clone());
        }
        let stopping = std::sync::Arc::default();
        let delivery = std::sync::Arc::default();
        let exporter = exporter
            .with_client_cert_asked(built.client_cert_asked)
            .with_stopping(std::sync::Arc::clone(&stopping))
            .with_delivery(std::sync::Arc::clone(&delivery));
        let provider = meter_provider(settings, identity, exporter);
        let meter = provider.meter_with_scope(
            InstrumentationScope::builder("truthscale")
                .with_version(VERSION)
                .build(),
        );
        let registration = instruments::register_delivered(&meter, rx, delta, delivery);
        tracing::info!(
            protocol = match proto {
                config::OtlpProtocol::Grpc => "grpc",
                config::OtlpProtocol::HttpProtobuf => "http/protobuf",
            },
            endpoint = %transport::redact_userinfo(&endpoint),
            from = endpoint_origin,
            tls = if tls { trust.as_str() } else { "no" },
            client_certificate = tls && settings.tls.client_certificate.is_some(),
            "Pushing metrics over OTLP."
        );
        Ok(Otlp {
            provider,
            _registration: registration,
            stopping,
        })
    }

    /// Final export and stop. Blocks (up to the export timeout): call it from a blocking
    /// context (`spawn_blocking`), never on an async worker.
    pub(crate) fn shutdown(self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "OTLP shutdown was not clean.");
        }
    }
}

/// The meter provider: `exporter` behind a periodic reader (at `otlp.interval` when set),
/// with the [`resource`] of `identity`.
fn meter_provider(
    settings: &OtlpSettings,
    identity: &Identity,
    exporter: impl PushMetricExporter,
) -> SdkMeterProvider {
    let mut reader = PeriodicReader::builder(exporter);
    if let Some(i) = settings.interval {
        reader = reader.with_interval(i);
    }
    SdkMeterProvider::builder()
        .with_resource(resource(identity, &settings.env))
        .with_reader(reader.build())
        .build()
}
