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

/// The items of a comma-separated list (a list variable, `RUST_LOG`): each trimmed, empty
/// ones left out (`A, B,` is two items, an empty text none).
pub(crate) fn list_items(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// The Levenshtein distance between `a` and `b`, in characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Whether `text` is an `http://` or `https://` URL a request can be sent to: a host, a
/// port in 1..=65535 where one is written, nothing a URL cannot hold (a space). `shown` is
/// the text as the message may quote it (its credentials redacted).
///
/// # Errors
/// Not such a URL, naming `key`.
pub(crate) fn http_url(key: &'static str, text: &str, shown: &str) -> Result<(), Invalid> {
    let bad = |why: &str| {
        Err(Invalid::new(
            key,
            format!(
                "{shown:?} is not an http:// or https:// URL {why} (e.g. http://host:9400/metrics)"
            ),
        ))
    };
    let Ok(uri) = text.parse::<axum::http::Uri>() else {
        return bad("(it does not parse)");
    };
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return bad("(its scheme)");
    }
    let Some(authority) = uri.authority() else {
        return bad("with a host");
    };
    if authority.host().is_empty() {
        return bad("with a host");
    }
    // A port past u16 or 0 is no port: the client refuses it at every request.
    let written = authority
        .as_str()
        .rsplit_once(':')
        .filter(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if written.is_some() && uri.port_u16().is_none_or(|p| p == 0) {
        return bad("with a port in 1..=65535");
    }
    Ok(())
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

/// An integer setting and its range, inclusive: the one place each range is written. The
/// check of the value reads it, and so does the check of a `TRUTHSCALE_…` variable's text,
/// before the text is converted (the conversion would round `1e19` or `inf` to the largest
/// integer, and `NaN` to 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IntRange {
    /// The dotted key (`http.max_concurrent_requests`).
    pub(crate) key: &'static str,
    /// The least value accepted.
    pub(crate) min: i64,
    /// The largest value accepted.
    pub(crate) max: i64,
}

impl IntRange {
    /// `value` within the range.
    ///
    /// # Errors
    /// Outside it; the message names both bounds.
    pub(crate) fn check<T>(&self, value: T) -> Result<(), Invalid>
    where
        T: TryInto<i64> + std::fmt::Display + Copy,
    {
        match value.try_into() {
            Ok(v) if (self.min..=self.max).contains(&v) => Ok(()),
            _ => Err(self.outside(&value.to_string())),
        }
    }

    /// The text of a variable for this setting: a whole number (`64`, not `64.0`, `1e19`,
    /// `inf` or `NaN`) within the range.
    ///
    /// # Errors
    /// Not a whole number, or outside the range; the message names both bounds.
    pub(crate) fn check_text(&self, text: &str) -> Result<(), Invalid> {
        let t = text.trim();
        let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Invalid::new(
                self.key,
                format!(
                    "{} is not a whole number; use one in {}..={}",
                    shown(text),
                    self.min,
                    self.max
                ),
            ));
        }
        match t.parse::<i128>() {
            Ok(v) if (i128::from(self.min)..=i128::from(self.max)).contains(&v) => Ok(()),
            _ => Err(self.outside(&shown(t))),
        }
    }

    fn outside(&self, value: &str) -> Invalid {
        Invalid::new(
            self.key,
            format!("{value} is outside {}..={}", self.min, self.max),
        )
    }
}

/// `max_series`: far above any node's series, below what would hide a mistake.
pub(crate) const MAX_SERIES: IntRange = IntRange {
    key: "max_series",
    min: 100,
    max: 10_000_000,
};
/// `http.max_concurrent_requests`: far above what one scraper or a few need, far below the
/// limit of the semaphore that holds them (2^61 − 1, where the server would abort).
pub(crate) const MAX_CONCURRENT_REQUESTS: IntRange = IntRange {
    key: "http.max_concurrent_requests",
    min: 1,
    max: 65_536,
};
/// `http.max_header_bytes`: a request head's buffer, 8 KiB (the HTTP server's own least
/// buffer: a smaller value could not be kept) to 1 MiB.
pub(crate) const MAX_HEADER_BYTES: IntRange = IntRange {
    key: "http.max_header_bytes",
    min: 8192,
    max: 1 << 20,
};
/// `source.gpus` (`sim`).
pub(crate) const SIM_GPUS: IntRange = IntRange {
    key: "source.gpus",
    min: 1,
    max: 64,
};
/// `source.seed` (`sim`): any integer TOML can write that is not negative.
pub(crate) const SIM_SEED: IntRange = IntRange {
    key: "source.seed",
    min: 0,
    max: i64::MAX,
};
/// Each of `source.gpu_indices` (`dcgm-exporter`).
pub(crate) const GPU_INDICES: IntRange = IntRange {
    key: "source.gpu_indices",
    min: 0,
    max: 4095,
};
/// `derive.phase.switch_after`: the core checks the value (`PhaseConfig::validate`); the
/// range is written here too for the environment's text (a test holds the two equal).
pub(crate) const SWITCH_AFTER: IntRange = IntRange {
    key: "derive.phase.switch_after",
    min: 1,
    max: 100,
};

/// `verdict.stragglers.min_members`: the core checks the value
/// (`StragglerConfig::validate`); the range is written here too for the environment's text.
pub(crate) const STRAGGLER_MIN_MEMBERS: IntRange = IntRange {
    key: "verdict.stragglers.min_members",
    min: 3,
    max: 100_000,
};

/// Every integer setting, with its range.
pub(crate) const INTEGERS: &[IntRange] = &[
    MAX_SERIES,
    MAX_CONCURRENT_REQUESTS,
    MAX_HEADER_BYTES,
    SIM_GPUS,
    SIM_SEED,
    GPU_INDICES,
    SWITCH_AFTER,
    STRAGGLER_MIN_MEMBERS,
];

/// `engine.model_params`: a parameter count, 1 to 10^15 (the largest models are near 10^12).
pub(crate) const MODEL_PARAMS: (&str, f64, f64) = ("engine.model_params", 1.0, 1e15);

/// The settings that are numbers with a fraction and that `config defaults` does not write
/// (unset by default); the others are found in the defaults.
pub(crate) const OPTIONAL_FRACTIONS: &[&str] = &[MODEL_PARAMS.0];

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
    /// A URL a request can be sent to passes; one with no host, a port past 65535 or 0, a
    /// space, or another scheme is refused, naming the key: `config check` passed
    /// `http://`, and `serve` then failed every scrape.
    #[test]
    fn an_http_url_needs_a_host_and_a_port_in_range() {
        for ok in [
            "http://127.0.0.1:9400/metrics",
            "https://dcgm.gpu-operator.svc/metrics",
            "http://[::1]:9400/metrics",
            "http://user:pw@host:1/x",
            "http://host",
        ] {
            assert_eq!(http_url("source.url", ok, ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("http://", "(it does not parse)"),
            ("http:///metrics", "(it does not parse)"),
            ("http://host:99999/metrics", "with a port in 1..=65535"),
            ("http://host:0/metrics", "with a port in 1..=65535"),
            ("http://a b:1/x", "(it does not parse)"),
            ("ftp://x/metrics", "(its scheme)"),
            ("host:9400/metrics", "(it does not parse)"),
            ("http://:9400/metrics", "with a host"),
        ] {
            let e = http_url("source.url", bad, bad).unwrap_err();
            assert_eq!(e.key, "source.url");
            assert!(e.message.contains(why), "{bad}: {}", e.message);
        }
    }

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
    fn integers_have_a_range_in_value_and_text() {
        let r = MAX_CONCURRENT_REQUESTS;
        assert_eq!(r.check(64_usize), Ok(()));
        assert_eq!(
            r.check(usize::MAX),
            Err(Invalid::new(
                r.key,
                "18446744073709551615 is outside 1..=65536"
            ))
        );
        assert_eq!(r.check_text(" 65536 "), Ok(()));
        for (text, message) in [
            (
                "1e19",
                "\"1e19\" is not a whole number; use one in 1..=65536",
            ),
            ("inf", "\"inf\" is not a whole number; use one in 1..=65536"),
            ("NaN", "\"NaN\" is not a whole number; use one in 1..=65536"),
            (
                "64.0",
                "\"64.0\" is not a whole number; use one in 1..=65536",
            ),
            ("", "\"\" is not a whole number; use one in 1..=65536"),
            ("-1", "\"-1\" is outside 1..=65536"),
            ("0", "\"0\" is outside 1..=65536"),
            ("65537", "\"65537\" is outside 1..=65536"),
            (
                "18446744073709551616",
                "\"18446744073709551616\" is outside 1..=65536",
            ),
        ] {
            assert_eq!(
                r.check_text(text),
                Err(Invalid::new(r.key, message)),
                "{text}"
            );
        }
        let huge = "9".repeat(309);
        assert_eq!(
            r.check_text(&huge).unwrap_err().message,
            format!(
                "\"{}\"… (309 characters) is outside 1..=65536",
                "9".repeat(40)
            )
        );
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
