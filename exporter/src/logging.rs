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

/// Logging to stderr at `RUST_LOG`'s levels (from `env`), else `info`; a `RUST_LOG` that
/// does not parse is said, with why, and `info` used.
pub(crate) fn init(env: &[(String, String)]) {
    let (filter, bad) = filter(env);
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    if let Some(why) = bad {
        tracing::warn!("{why}");
    }
}

/// The filter `RUST_LOG` (in `env`) asks for, else `info`, and why it was not taken when it
/// was set and did not parse.
fn filter(env: &[(String, String)]) -> (tracing_subscriber::EnvFilter, Option<String>) {
    let info = || tracing_subscriber::EnvFilter::new("info");
    match env.iter().find(|(k, _)| k == "RUST_LOG") {
        None => (info(), None),
        Some((_, v)) => match tracing_subscriber::EnvFilter::try_new(v) {
            Ok(f) => (f, None),
            Err(e) => (
                info(),
                Some(format!(
                    "RUST_LOG={v:?} does not parse ({e}); logging at info (e.g. RUST_LOG=debug or RUST_LOG=truthscale=debug)"
                )),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    /// A `RUST_LOG` that does not parse is said, naming it; a good one or none is taken.
    #[test]
    fn a_bad_rust_log_is_said() {
        let env = |v: &str| vec![("RUST_LOG".to_owned(), v.to_owned())];
        let (_, why) = super::filter(&env("truthscale=dbug"));
        assert!(why.is_some_and(|w| w.contains("RUST_LOG=\"truthscale=dbug\"")));
        assert_eq!(super::filter(&env("truthscale=debug")).1, None);
        assert_eq!(super::filter(&[]).1, None);
    }
}
