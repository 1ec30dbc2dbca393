//! `truthscale serve`: the sidecar's main loop.

use crate::config::{Config, Settings};
use crate::http::{self, RouterLimits};
use crate::sidecar::Sidecar;
use crate::web;
use anyhow::Context;
use std::time::Duration;

/// Run the sidecar until SIGTERM or Ctrl-C.
///
/// # Errors
/// Bad configuration, a source that cannot be built, or a port that cannot be bound.
pub fn run(config: &Config) -> anyhow::Result<()> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let settings = config.validate(&env).context("invalid configuration")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("truthscale-http")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(settings))
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let web_config = match &settings.web_config_file {
        Some(p) => Some(web::WebConfig::load(p).context("invalid web config")?),
        None => None,
    };
    let tls = match &web_config {
        Some(w) => w.tls_acceptor().context("invalid web config")?,
        None => None,
    };
    let sidecar = Sidecar::start(&settings).context("cannot start the source")?;
    let otlp = match &settings.otlp {
        Some(o) => Some(
            crate::otlp::Otlp::start(
                o,
                &settings.identity,
                sidecar.subscribe(),
                sidecar.sink_errors(),
            )
            .context("invalid OTLP configuration")?,
        ),
        None => None,
    };
    let limits = RouterLimits {
        request_timeout: settings.request_timeout,
        max_concurrent_requests: settings.max_concurrent_requests,
    };
    let mut app = http::router(sidecar.subscribe(), limits);
    if let Some(auth) = web_config.as_ref().and_then(web::WebConfig::basic_auth) {
        app = web::layer(app, auth);
    }
    let listener = tokio::net::TcpListener::bind(settings.listen).await.with_context(|| {
        format!(
            "cannot listen on {}; is another process using the port? Choose another with --listen",
            settings.listen
        )
    })?;
    let local = listener.local_addr().unwrap_or(settings.listen);
    tracing::info!(
        listen = %local,
        source = sidecar.source(),
        interval = ?settings.interval,
        tls = tls.is_some(),
        "Serving /metrics."
    );
    let http_limits = web::HttpLimits {
        max_header_bytes: settings.max_header_bytes,
        header_read_timeout: Duration::from_secs(10),
    };
    web::serve(listener, app, tls, http_limits, shutdown_signal())
        .await
        .context("HTTP server failed")?;
    if let Some(o) = otlp {
        // The final export blocks; bound it so that a dead collector cannot hold the exit.
        let done = tokio::task::spawn_blocking(move || o.shutdown());
        if tokio::time::timeout(Duration::from_secs(5), done)
            .await
            .is_err()
        {
            tracing::warn!("The final OTLP export did not finish within 5s; exiting anyway.");
        }
    }
    tracing::info!("Shutting down: stopping the sampler.");
    sidecar.shutdown();
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("Received Ctrl-C."),
        () = term => tracing::info!("Received SIGTERM."),
    }
}
