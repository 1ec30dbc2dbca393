//! Logging to stderr, set up once for the commands that log, and the one limiter of
//! repeated log lines, shared by the pipeline's stages, the sources' error reports, the API
//! server's reader and the OTLP sink.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use tracing_subscriber::filter::Targets;

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
///
/// `RUST_LOG` is a list of `target=level` and `level` directives (`Targets`): the span and
/// field filters of `EnvFilter` would compile regular expressions, a build's worth of
/// crates that no log of this program needs. Empty items are dropped (`RUST_LOG=` is
/// unset), and a list with a span or field filter (`[` or `{`) is refused as a whole.
pub(crate) fn init(env: &[(String, String)]) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let (filter, bad) = filter(env);
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .with(filter)
        .try_init();
    if let Some(why) = bad {
        tracing::warn!("{why}");
    }
}

/// The filter `RUST_LOG` (in `env`) asks for, else `info`, and why it was not taken when it
/// was set and did not parse.
fn filter(env: &[(String, String)]) -> (Targets, Option<String>) {
    let info = || Targets::new().with_default(tracing::Level::INFO);
    let Some((_, v)) = env.iter().find(|(k, _)| k == "RUST_LOG") else {
        return (info(), None);
    };
    let said = |why: String| {
        Some(format!(
            "RUST_LOG={v:?} {why}; logging at info (e.g. RUST_LOG=debug or RUST_LOG=truthscale=debug)"
        ))
    };
    // `Targets` reads an empty item as every target at TRACE, and a span filter as part of
    // a target's name: both are taken out here.
    let items: Vec<&str> = crate::setting::list_items(v).collect();
    if items.is_empty() {
        return (info(), None);
    }
    if let Some(span) = items.iter().find(|i| i.contains(['[', '{'])) {
        return (
            info(),
            said(format!(
                "has a span or field filter ({span:?}), which is not read"
            )),
        );
    }
    if let Some(word) = items.iter().find_map(|i| not_a_target(i)) {
        return (info(), said(word));
    }
    match items.join(",").parse::<Targets>() {
        Ok(f) => (f, None),
        Err(e) => (info(), said(format!("does not parse ({e})"))),
    }
}

/// Why a directive without `=` is neither a level nor a target, if it is not: a bare word is
/// read as a target at TRACE with every other target off, so a misspelt level (`wran`) or
/// a word no module path can be (`garbage!!`) turned every log off, warnings included.
fn not_a_target(item: &str) -> Option<String> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    if item.contains('=') {
        return None;
    }
    let lower = item.to_ascii_lowercase();
    if LEVELS.contains(&lower.as_str()) {
        return None;
    }
    if let Some(level) = LEVELS
        .iter()
        .find(|l| crate::setting::edit_distance(&lower, l) <= 2)
    {
        return Some(format!(
            "has {item:?}, which reads as a module's name and turns every other log off: is it the level {level}?"
        ));
    }
    let path_like = item.split("::").all(|part| {
        !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    });
    (!path_like).then(|| format!("has {item:?}, which is neither a level nor a module's name"))
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
        // A misspelt level, or a word no module is named, turned every log off: said, and
        // info used. A module's name alone is taken, as written.
        for (v, why) in [
            ("wran", "is it the level warn?"),
            ("DEBG", "is it the level debug?"),
            ("garbage!!", "neither a level nor a module's name"),
            ("info,a::::b", "neither a level nor a module's name"),
        ] {
            let (f, said) = super::filter(&env(v));
            assert!(
                said.as_deref().is_some_and(|w| w.contains(why)),
                "{v}: {said:?}"
            );
            assert!(
                f.would_enable("truthscale_exporter", &tracing::Level::WARN),
                "{v}"
            );
        }
        for v in [
            "truthscale_exporter",
            "WARN",
            "warn,truthscale_exporter::sources",
            "h2",
        ] {
            assert_eq!(super::filter(&env(v)).1, None, "{v}");
        }
        // Span and field filters are not taken: said, and info used.
        for v in [
            "[span{a=1}]=debug",
            "[span]=debug",
            "foo[span]=debug",
            "foo[{field}]=debug",
        ] {
            let why = super::filter(&env(v)).1.expect(v);
            assert!(why.contains("span or field filter"), "{why}");
        }
    }

    /// Empty items are dropped: an empty `RUST_LOG` is info, and a trailing comma leaves
    /// the rest as written (an empty item was every target at TRACE).
    #[test]
    fn empty_items_are_dropped() {
        use tracing::Level;
        let env = |v: &str| vec![("RUST_LOG".to_owned(), v.to_owned())];
        for v in ["", " ", ",", "info,", " info , "] {
            let (f, why) = super::filter(&env(v));
            assert_eq!(why, None, "{v:?}");
            assert!(f.would_enable("h2::codec", &Level::INFO), "{v:?}");
            assert!(!f.would_enable("h2::codec", &Level::DEBUG), "{v:?}");
            assert!(!f.would_enable("rustls::conn", &Level::TRACE), "{v:?}");
        }
    }

    /// What each directive enables: a target's own level, the default elsewhere, and
    /// nothing outside the listed targets when no default is given.
    #[test]
    fn levels_by_target() {
        use tracing::Level;
        let env = |v: &str| vec![("RUST_LOG".to_owned(), v.to_owned())];
        let (f, _) = super::filter(&env("warn,truthscale_exporter::sources=debug"));
        assert!(f.would_enable("truthscale_exporter::sources::nvml", &Level::DEBUG));
        assert!(!f.would_enable("truthscale_exporter::http", &Level::INFO));
        assert!(f.would_enable("truthscale_exporter::http", &Level::WARN));
        let (f, _) = super::filter(&env("truthscale=debug"));
        assert!(f.would_enable("truthscale_exporter::http", &Level::DEBUG));
        assert!(!f.would_enable("tonic::transport", &Level::ERROR));
        let (f, _) = super::filter(&[]);
        assert!(f.would_enable("tonic::transport", &Level::INFO));
        assert!(!f.would_enable("truthscale_exporter::http", &Level::DEBUG));
    }
}
