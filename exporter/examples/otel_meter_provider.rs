//! A Rust service that already runs an OpenTelemetry `MeterProvider` registers truthscale's
//! instruments on its own meter: its reader and exporter then carry truthscale's metrics,
//! with the values the sidecar's `/metrics` shows.
//!
//! ```sh
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 \
//!   cargo run -p truthscale-exporter --example otel_meter_provider -- 10
//! ```
//!
//! Runs for the given number of seconds (default 5) against simulated GPUs, then flushes.

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use std::time::Duration;
use truthscale_exporter::sources::{SourceConfig, sim::SimConfig};
use truthscale_exporter::{compose, config, config::Config, sinks::otlp};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);

    // The service's own provider: here an OTLP exporter configured by the OTEL_… variables
    // (HTTP/protobuf to localhost:4318 when none is set), exporting every 2 seconds.
    let exporter = opentelemetry_otlp::MetricExporter::builder().build()?;
    let env = config::environment()?;
    let provider = SdkMeterProvider::builder()
        .with_resource(otlp::resource(&Default::default(), &env))
        .with_reader(
            PeriodicReader::builder(exporter)
                .with_interval(Duration::from_secs(2))
                .build(),
        )
        .build();
    let meter = provider.meter("my-service");

    // truthscale's sampler (simulated GPUs, asked for: the default source is NVML), and its
    // instruments on the service's meter. Keep the registration alive as long as the meter.
    let mut config = Config::default();
    config.source.config = SourceConfig::Sim(SimConfig::default());
    let settings = config.validate(&env)?;
    let sampler = compose::start(&settings)?;
    let _registration = otlp::register(&meter, sampler.subscribe());

    println!("exporting truthscale metrics for {seconds}s through the service's MeterProvider");
    tokio::time::sleep(Duration::from_secs(seconds)).await;

    // Flushing blocks on the export: do it off the async workers.
    tokio::task::spawn_blocking(move || {
        if let Err(e) = provider.force_flush() {
            eprintln!("flush failed (is a collector listening?): {e}");
        }
        let _ = provider.shutdown();
    })
    .await?;
    sampler.shutdown();
    Ok(())
}
