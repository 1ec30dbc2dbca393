//! Logging to stderr, set up once for the commands that log, and the one limiter of
//! repeated log lines, shared by the pipeline's stages, the sources' error reports, the API
//! server's reader and the OTLP sink.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Repeated messages of one kind are logged at most this often.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(30);

/// The one limiter of repeated log lines: a kind is let through at most every
/// [`LOG_EVERY`]; counters still count every occurrence.
#[derive(Debug, Default)]
pub(crate) struct LogLimiter {
    last: HashMap<&'static str, Instant>,
}

impl LogLimiter {
    /// Whether a message of `kind` may be logged now (and, if so, that it was).
    pub(crate) fn allow(&mut self, kind: &'static str) -> bool {
        let due = self.last.get(kind).is_none_or(|t| t.elapsed() >= LOG_EVERY);
        if due {
            self.last.insert(kind, Instant::now());
        }
        due
    }
}

/// Logging to stderr at `RUST_LOG`'s levels (from `env`), else `info`.
pub(crate) fn init(env: &[(String, String)]) {
    let filter = env
        .iter()
        .find(|(k, _)| k == "RUST_LOG")
        .and_then(|(_, v)| tracing_subscriber::EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
