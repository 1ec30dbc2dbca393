//! Checking one setting's value, naming its key: shared by the configuration, the sources'
//! own settings and the OTLP settings.

use std::time::Duration;

/// A setting that cannot be used: its dotted key (`source.interval`) and what is wrong.
pub(crate) type Invalid = (&'static str, String);

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
        (
            key,
            format!("{text:?} is not a duration ({e}); write e.g. 500ms, 1s, 2m"),
        )
    })?;
    if d < min || d > max {
        return Err((
            key,
            format!(
                "{text:?} is outside {}..={}",
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
    move |text: &str| duration("flag", text, min, max).map_err(|(_, message)| message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_a_range() {
        let s = Duration::from_secs;
        assert_eq!(duration("k", " 2s ", s(1), s(10)), Ok(s(2)));
        assert_eq!(
            duration("k", "365d", s(1), s(3600)),
            Err(("k", "\"365d\" is outside 1s..=1h".to_string()))
        );
        assert_eq!(
            duration("k", "0s", Duration::from_millis(100), s(3600)),
            Err(("k", "\"0s\" is outside 100ms..=1h".to_string()))
        );
        assert!(
            duration("k", "soon", s(1), s(2))
                .unwrap_err()
                .1
                .contains("not a duration")
        );
    }
}
