//! Checking one setting's value, naming its key: shared by the configuration, the sources'
//! own settings and the OTLP settings.

use std::time::Duration;

/// A setting that cannot be used: its dotted key (`source.interval`) and what is wrong. The
/// configuration's and the sources' errors take it with `?` (`From`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub(crate) struct Invalid {
    /// The dotted key, such as `source.interval` (`flag` for a command-line value).
    pub(crate) key: &'static str,
    /// What is wrong.
    pub(crate) message: String,
}

impl Invalid {
    /// `key` cannot be used, because of `message`.
    pub(crate) fn new(key: &'static str, message: impl Into<String>) -> Invalid {
        Invalid {
            key,
            message: message.into(),
        }
    }
}

/// A value as an error message quotes it: at most 40 characters, the rest elided, so that a
/// 309-digit number is not echoed back whole.
pub(crate) fn shown(text: &str) -> String {
    const MAX: usize = 40;
    if text.chars().count() <= MAX {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(MAX).collect();
        format!("{head:?}… ({} characters)", text.chars().count())
    }
}

/// Parse `text` (`500ms`, `1s`, `2m`) as a duration in `[min, max]`.
///
/// # Errors
/// Not a duration, or outside the range; the message names both bounds.
pub(crate) fn duration(
    key: &'static str,
    text: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, Invalid> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        Invalid::new(
            key,
            format!(
                "{} is not a duration ({e}); write e.g. 500ms, 1s, 2m",
                shown(text)
            ),
        )
    })?;
    if d < min || d > max {
        return Err(Invalid::new(
            key,
            format!(
                "{} is outside {}..={}",
                shown(text),
                humantime::format_duration(min),
                humantime::format_duration(max)
            ),
        ));
    }
    Ok(d)
}

/// A clap value parser for a duration flag in `[min, max]` (`--interval 0s` is refused with
/// the range, instead of being accepted and doing nothing useful).
pub(crate) fn duration_flag(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text: &str| duration("flag", text, min, max).map_err(|e| e.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_value_is_not_echoed_whole() {
        let long = format!("{}s", "9".repeat(309));
        let e = duration("source.interval", &long, Duration::ZERO, Duration::MAX).unwrap_err();
        assert!(e.message.len() < 260, "{}", e.message);
        assert!(e.message.contains("(310 characters)"), "{}", e.message);
        assert_eq!(shown("2s"), "\"2s\"");
    }

    #[test]
    fn durations_have_a_range() {
        let s = Duration::from_secs;
        assert_eq!(duration("k", " 2s ", s(1), s(10)), Ok(s(2)));
        assert_eq!(
            duration("k", "365d", s(1), s(3600)),
            Err(Invalid::new("k", "\"365d\" is outside 1s..=1h".to_string()))
        );
        assert_eq!(
            duration("k", "0s", Duration::from_millis(100), s(3600)),
            Err(Invalid::new(
                "k",
                "\"0s\" is outside 100ms..=1h".to_string()
            ))
        );
        assert!(
            duration("k", "soon", s(1), s(2))
                .unwrap_err()
                .message
                .contains("not a duration")
        );
    }
}
