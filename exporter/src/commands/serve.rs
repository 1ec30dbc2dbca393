//! `truthscale serve`: the sidecar's main loop.

use crate::config::{Config, Settings};
use crate::http::web;
use crate::http::{self, RouterLimits};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Duration;

/// Run the sidecar on `settings` until SIGTERM, SIGHUP or Ctrl-C.
///
/// # Errors
/// A source that cannot be built, or a port that cannot be bound.
pub(crate) fn run(settings: Settings) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("truthscale-http")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(settings))
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let web = crate::compose::web_config(&settings).context("invalid web config")?;
    if let (Some(w), Some(p)) = (&web, &settings.web_config_file)
        && !w.config.tls_enabled()
        && !w.config.auth_enabled()
    {
        tracing::warn!(
            file = %p.display(),
            "The web config sets neither tls_server_config nor basic_auth_users: serving plain HTTP without authentication. Add them, or drop --web-config if that is intended."
        );
    }
    let (web_config, tls) = match web {
        Some(w) => (Some(w.config), w.tls),
        None => (None, None),
    };
    let sidecar = crate::compose::start(&settings).context("cannot start the source")?;
    let otlp = match &settings.otlp {
        Some(o) => Some(
            crate::sinks::otlp::Otlp::start(
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
        // A tick may take an interval plus a source timeout; allow several before calling
        // the sampler stuck.
        liveness_after: (settings.stale_after * 3).max(Duration::from_secs(60)),
    };
    let mut app = http::router(sidecar.subscribe(), limits);
    if let Some(auth) = web_config.as_ref().and_then(web::WebConfig::basic_auth) {
        app = web::layer(app, auth);
    }
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| anyhow::anyhow!("{}", bind_error(settings.listen, &e)))?;
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

/// Why `addr` cannot be bound, and what to do: a privileged port without the right to it
/// (EACCES) is told apart from a port another process holds (EADDRINUSE) and from an
/// address this machine does not have (EADDRNOTAVAIL).
pub(crate) fn bind_error(addr: std::net::SocketAddr, e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    let port = addr.port();
    let what = match e.kind() {
        ErrorKind::PermissionDenied => format!(
            "permission denied binding port {port}: use a port above 1023 (--listen 0.0.0.0:{}) or grant CAP_NET_BIND_SERVICE (or run as root)",
            crate::config::DEFAULT_PORT
        ),
        ErrorKind::AddrInUse => format!(
            "another process is using port {port} (ss -ltnp 'sport = :{port}' names it); choose another with --listen"
        ),
        ErrorKind::AddrNotAvailable => format!(
            "this machine has no address {}; listen on 0.0.0.0 or one of its own addresses (--listen)",
            addr.ip()
        ),
        _ => "choose another address with --listen".to_owned(),
    };
    format!("cannot listen on {addr} ({e}): {what}")
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let unix = |kind| async move {
        match tokio::signal::unix::signal(kind) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(unix)]
    let (term, hup) = (
        unix(tokio::signal::unix::SignalKind::terminate()),
        unix(tokio::signal::unix::SignalKind::hangup()),
    );
    #[cfg(not(unix))]
    let (term, hup) = (std::future::pending::<()>(), std::future::pending::<()>());
    tokio::select! {
        () = ctrl_c => tracing::info!("Received Ctrl-C."),
        () = term => tracing::info!("Received SIGTERM."),
        // Its default would end the process at once, the last export unsent; there is no
        // configuration to reload (a change takes a restart), so it shuts down as SIGTERM.
        () = hup => tracing::info!("Received SIGHUP: shutting down (the configuration is read at start only; restart to change it)."),
    }
}

/// `truthscale serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Counter source (see `--help`).
    #[arg(
        long,
        help = "Counter source: sim[:SCENARIO], replay:PATH, nvml, dcgm-exporter[:URL], auto or \
                null [default: auto]. auto reads NVML when a driver is present, and otherwise \
                stops naming these choices: the simulated GPU (sim) only when asked for. Short \
                for source.kind plus its argument (source.scenario, source.path, source.url)"
    )]
    pub source: Option<String>,
    /// Address to serve on [default: 0.0.0.0:9488].
    #[arg(long)]
    pub listen: Option<String>,
    /// Sampling interval, at least 100ms [default: 1s].
    #[arg(long)]
    pub interval: Option<String>,
    /// Number of simulated GPUs (sim only), 1 to 64 [default: 4].
    #[arg(long)]
    pub sim_gpus: Option<u32>,
    /// After this long without data, series disappear and truthscale_source_up is 0
    /// [default: three intervals].
    #[arg(long)]
    pub stale_after: Option<String>,
    /// Replay the capture again from the start when it ends (--source replay:PATH only).
    #[arg(long)]
    pub replay_loop: bool,
    /// Web config file (exporter-toolkit style YAML) for TLS and basic auth.
    #[arg(long)]
    pub web_config: Option<PathBuf>,
    /// Configuration file (TOML); see `truthscale config defaults`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Also push metrics over OTLP to this collector (http:// or https://; HOST:4317 for gRPC,
    /// HOST:4318 for HTTP/protobuf; choose with OTEL_EXPORTER_OTLP_PROTOCOL or
    /// otlp.protocol). OTEL_EXPORTER_OTLP_ENDPOINT turns OTLP on too; see docs/otlp.md.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// sidecar: this pod's GPUs, labelled with this pod (the default). node: every GPU of the
    /// node, each attributed to its pods through the kubelet's PodResources socket (see the
    /// `[node]` keys in docs/config.md, and docs/node-mode.md).
    #[arg(long, value_enum)]
    pub mode: Option<crate::config::Mode>,
    /// The NVML library to load for --source nvml or auto [default: libnvidia-ml.so.1].
    #[arg(long, value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
}

impl ServeArgs {
    /// The flags that were given, as configuration overrides.
    ///
    /// # Errors
    /// `--source` names no source, or gives an argument its kind does not take.
    pub(crate) fn overrides(&self) -> anyhow::Result<Vec<(&'static str, String)>> {
        let mut o = Vec::new();
        if let Some(v) = &self.source {
            o.extend(
                crate::sources::SourceConfig::shorthand(v)
                    .map_err(|e| anyhow::anyhow!("--source: {e}"))?,
            );
        }
        if let Some(m) = self.mode {
            o.push((
                "mode",
                match m {
                    crate::config::Mode::Sidecar => "sidecar",
                    crate::config::Mode::Node => "node",
                }
                .into(),
            ));
        }
        if let Some(v) = &self.listen {
            o.push(("listen_address", v.clone()));
        }
        if let Some(v) = &self.interval {
            o.push(("source.interval", v.clone()));
        }
        if let Some(v) = self.sim_gpus {
            self.needs_source("--sim-gpus simulates GPUs", &["sim"])?;
            o.push(("source.gpus", v.to_string()));
        }
        if let Some(v) = &self.stale_after {
            o.push(("source.stale_after", v.clone()));
        }
        if self.replay_loop {
            self.needs_source("--replay-loop replays a capture", &["replay:PATH"])?;
            o.push(("source.loop", "true".into()));
        }
        if let Some(v) = &self.web_config {
            o.push(("web_config_file", v.display().to_string()));
        }
        if let Some(v) = &self.otlp_endpoint {
            o.push(("otlp.endpoint", v.clone()));
        }
        if let Some(v) = &self.nvml_library {
            self.needs_source("--nvml-library reads NVML", &["nvml", "auto"])?;
            o.push(("source.library", v.display().to_string()));
        }
        Ok(o)
    }

    /// A flag that `what` is said here where `--source` names a kind other than `kinds` (each
    /// as it is written, `replay:PATH`, its kind before the colon): the configuration library
    /// would only call it an unknown field of that source.
    fn needs_source(&self, what: &str, kinds: &[&str]) -> anyhow::Result<()> {
        let Some(v) = self.source.as_deref() else {
            return Ok(());
        };
        fn kind_of(k: &str) -> &str {
            k.split(':').next().unwrap_or(k)
        }
        if kinds.iter().any(|k| kind_of(k) == kind_of(v)) {
            return Ok(());
        }
        anyhow::bail!(
            "{what}: it needs --source {}, not --source {v}",
            kinds.join(" or ")
        )
    }
}

/// `truthscale serve`: load the configuration (file, environment, flags) and run.
///
/// # Errors
/// A configuration error, or the sidecar failing to start.
pub(crate) fn main(args: &ServeArgs, env: &[(String, String)]) -> anyhow::Result<()> {
    crate::logging::init(env);
    let overrides = args.overrides()?;
    let overrides: Vec<(&str, String)> = overrides.iter().map(|(k, v)| (*k, v.clone())).collect();
    let config = Config::load(args.config.as_deref(), env, &overrides)?;
    let settings = config
        .validate_at(args.config.as_deref(), env, &overrides)
        .context("invalid configuration")?;
    run(settings)
}

#[cfg(test)]
mod tests {
    use super::bind_error;
    use std::io::{Error, ErrorKind};
    use std::net::SocketAddr;

    /// The user this test runs as: the owner of `/proc/self`.
    fn running_as_root() -> bool {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }

    /// EACCES (a privileged port without root or CAP_NET_BIND_SERVICE) is told apart from
    /// EADDRINUSE and EADDRNOTAVAIL, each with what to do. A real privileged bind is tried
    /// when the test runs as a user other than root (and the kernel keeps ports under 1024
    /// privileged); as root, which may bind any port, the mapping is checked on a
    /// synthetic `PermissionDenied` error only.
    #[test]
    fn a_port_that_cannot_be_bound_says_why_and_what_to_do() {
        let addr: SocketAddr = "0.0.0.0:80".parse().unwrap();
        let denied = Error::from(ErrorKind::PermissionDenied);
        let msg = bind_error(addr, &denied);
        assert!(msg.starts_with("cannot listen on 0.0.0.0:80 ("), "{msg}");
        assert!(
            msg.ends_with(
                "permission denied binding port 80: use a port above 1023 (--listen 0.0.0.0:9488) or grant CAP_NET_BIND_SERVICE (or run as root)"
            ),
            "{msg}"
        );
        assert!(!msg.contains("another process"), "{msg}");
        if !running_as_root()
            && let Err(e) = std::net::TcpListener::bind("127.0.0.1:1")
            && e.kind() == ErrorKind::PermissionDenied
        {
            let msg = bind_error("127.0.0.1:1".parse().unwrap(), &e);
            assert!(
                msg.contains("permission denied binding port 1: use a port above 1023"),
                "{msg}"
            );
        }
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = held.local_addr().unwrap();
        let e = std::net::TcpListener::bind(taken).unwrap_err();
        let msg = bind_error(taken, &e);
        assert!(
            msg.contains(&format!("another process is using port {}", taken.port()))
                && msg.ends_with("choose another with --listen"),
            "{msg}"
        );
        let msg = bind_error(
            "10.255.255.254:9488".parse().unwrap(),
            &Error::from(ErrorKind::AddrNotAvailable),
        );
        assert!(
            msg.ends_with("this machine has no address 10.255.255.254; listen on 0.0.0.0 or one of its own addresses (--listen)"),
            "{msg}"
        );
    }
}
