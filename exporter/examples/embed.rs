//! Embedding truthscale in a Rust service: start the sampler, merge its router into your
//! own app, and read the latest snapshot directly.
//!
//! `cargo run -p truthscale-exporter --example embed`, then `curl localhost:8080/gpu/metrics`.

use axum::Router;
use axum::routing::get;
use std::time::Duration;
use truthscale_exporter::compose;
use truthscale_exporter::config::Config;
use truthscale_exporter::http::{RouterLimits, router};
use truthscale_exporter::sources::{SourceConfig, sim::SimConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Any configuration the binary accepts; here: two simulated GPUs sampled every 500 ms.
    let mut config = Config::default();
    config.source.config = SourceConfig::Sim(SimConfig {
        gpus: 2,
        ..SimConfig::default()
    });
    config.source.interval = "500ms".into();
    let settings = config.validate(&[])?;
    let sampler = compose::start(&settings)?;

    // Your own routes, with truthscale's under /gpu.
    let app = Router::new()
        .route("/", get(|| async { "my inference service\n" }))
        .nest("/gpu", router(sampler.subscribe(), RouterLimits::default()));

    // Read the snapshot in-process, e.g. for your own admission control.
    let mut rx = sampler.subscribe();
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let snap = rx.borrow().clone();
            for g in &snap.gpus {
                // Absent is not 0: a window without a tensor counter or an SM clock has
                // no effective compute fraction, and says so.
                match g.window.metrics.effective_compute {
                    Some(ecf) => tracing::debug!(gpu = %g.window.id, ecf, "tick"),
                    None => {
                        tracing::debug!(gpu = %g.window.id, "tick: effective compute not measured")
                    }
                }
            }
        }
    });

    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    println!("serving on http://127.0.0.1:8080 (truthscale under /gpu); Ctrl-C to stop");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    sampler.shutdown();
    Ok(())
}
