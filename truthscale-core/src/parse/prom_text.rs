//! The one Prometheus text-exposition parser (format 0.0.4, and OpenMetrics samples),
//! used by the dcgm-exporter reader, the serving-engine reader, `explain --url` and the
//! tests. A line at a time; it never panics, and a bad line is an error naming what is wrong.

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct PromSample<'a> {
    /// Metric name, as written.
    pub name: &'a str,
    /// Labels, values unescaped.
    pub labels: Labels<'a>,
    /// The value (may be NaN or ±Inf, as written).
    pub value: f64,
    /// The exposition timestamp, milliseconds since the Unix epoch, when the line has one.
    pub timestamp_ms: Option<i64>,
}

impl PromSample<'_> {
    /// The value of label `name`, if present.
    #[must_use]
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Every line of `body` that is a sample, with its 1-based line number: `Ok` for a sample,
/// `Err` for a line that is neither a sample, a comment nor blank.
pub fn samples(body: &str) -> impl Iterator<Item = (usize, Result<PromSample<'_>, String>)> {
    sample_lines(body).map(|(n, t)| (n, parse_sample(t)))
}

/// Every line of `body` that is neither a comment nor blank, trimmed, with its 1-based line
/// number: the lines [`samples`] reads.
pub fn sample_lines(body: &str) -> impl Iterator<Item = (usize, &str)> {
    body.lines()
        .map(str::trim)
        .enumerate()
        .filter(|(_, t)| !t.is_empty() && !t.starts_with('#'))
        .map(|(i, t)| (i + 1, t))
}

/// Label pairs of one sample, values unescaped, in the order written.
pub type Labels<'a> = Vec<(&'a str, String)>;

/// The exposition timestamps read, in milliseconds since the epoch: years 1 to 9999, as an
/// RFC 3339 time, so that the span between any two is a number of milliseconds too.
const TIMESTAMP_RANGE_MS: std::ops::RangeInclusive<i64> = -62_135_596_800_000..=253_402_300_799_999;

/// An exposition timestamp in milliseconds since the epoch. The Prometheus text format
/// writes integer milliseconds; OpenMetrics writes seconds, with a fraction or without: a
/// timestamp with a fraction, or an integer from 0 to below 10^11 (before March 1973 in
/// milliseconds, but up to the year 5138 in seconds), is seconds.
fn timestamp_ms(ts: &str) -> Result<i64, String> {
    const SECONDS_BELOW: i64 = 100_000_000_000;
    let ms = match ts.parse::<i64>() {
        Ok(s) if (0..SECONDS_BELOW).contains(&s) => Some(s * 1000),
        Ok(ms) => Some(ms),
        Err(_) => ts
            .parse::<f64>()
            .ok()
            .map(|s| s * 1000.0)
            .filter(|ms| ms.is_finite() && ms.abs() < 1e17)
            .map(|ms| ms.round() as i64),
    };
    ms.filter(|ms| TIMESTAMP_RANGE_MS.contains(ms))
        .ok_or_else(|| {
            format!(
                "bad timestamp `{ts}` (milliseconds, or OpenMetrics' seconds, from year 1 to 9999)"
            )
        })
}

/// `name{labels} value [timestamp]` → name, unescaped labels, value and the timestamp
/// (milliseconds since the epoch) if there is one. The line must be a sample (not blank,
/// not a comment).
///
/// # Errors
/// What is wrong with the line: a bad name, label set, escape, value or timestamp.
pub fn parse_sample(t: &str) -> Result<PromSample<'_>, String> {
    let name = metric_name(t).ok_or("expected a metric name")?;
    let mut rest = &t[name.len()..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        (labels, rest) = parse_labels(r)?;
    }
    let mut tokens = rest.split_whitespace();
    let value = tokens.next().ok_or("missing value")?;
    let value = value
        .parse::<f64>()
        .map_err(|_| format!("bad value `{value}`"))?;
    let timestamp_ms = tokens.next().map(timestamp_ms).transpose()?;
    if let Some(extra) = tokens.next() {
        return Err(format!("unexpected `{extra}` after the value"));
    }
    Ok(PromSample {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

/// The metric name a sample line `t` starts with: its leading run of letters, digits, `_`
/// and `:`, where that is not empty and does not start with a digit.
#[must_use]
pub fn metric_name(t: &str) -> Option<&str> {
    let end = t
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(t.len());
    let name = &t[..end];
    (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit())).then_some(name)
}

/// The label set after `{`, and what follows its `}`.
///
/// # Errors
/// An unterminated set, a bad label name, a label named twice (the exposition format
/// allows a name once; which value would be the series' is not said), a missing quote or a
/// bad escape.
pub fn parse_labels(mut s: &str) -> Result<(Labels<'_>, &str), String> {
    const UNTERMINATED: &str = "unterminated label set";
    let mut out = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((out, rest));
        }
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        let (name, rest) = s.split_at(end);
        if name.is_empty() {
            return Err(if s.is_empty() {
                UNTERMINATED
            } else {
                "expected a label name"
            }
            .into());
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(format!("label {name} given twice"));
        }
        let rest = rest
            .trim_start()
            .strip_prefix('=')
            .ok_or("expected `=` after a label name")?;
        let rest = rest
            .trim_start()
            .strip_prefix('"')
            .ok_or("expected a quoted label value")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let close = loop {
            match chars.next().ok_or(UNTERMINATED)? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or(UNTERMINATED)?.1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    c => return Err(format!("bad escape `\\{c}` in a label value")),
                },
                (_, c) => value.push(c),
            }
        };
        out.push((name, value));
        s = rest[close + 1..].trim_start();
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err(if s.is_empty() {
                UNTERMINATED
            } else {
                "expected `,` or `}` in a label set"
            }
            .into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_comments_and_errors() {
        let body = "# HELP x y\nx{a=\"1\",b=\"q\\\"z\"} 2.5 1767225600123\n\nbad line\ny NaN\n";
        let got: Vec<_> = samples(body).collect();
        assert_eq!(got.len(), 3);
        let (line, s) = &got[0];
        let s = s.as_ref().unwrap();
        assert_eq!(
            (*line, s.name, s.value, s.timestamp_ms),
            (2, "x", 2.5, Some(1_767_225_600_123))
        );
        assert_eq!(s.label("b"), Some("q\"z"));
        assert_eq!(got[1].0, 4);
        assert!(got[1].1.is_err());
        let y = got[2].1.as_ref().unwrap();
        assert!(y.value.is_nan());
        assert_eq!(y.timestamp_ms, None);
        // A label named twice is no series: which value would be its is not said.
        let twice: Vec<_> = samples("x{gpu=\"0\",gpu=\"1\"} 50\n").collect();
        assert_eq!(twice[0].1.as_ref().unwrap_err(), "label gpu given twice");
    }

    /// OpenMetrics writes seconds (a fraction or not), the Prometheus text format
    /// milliseconds: both read as the same instant.
    #[test]
    fn openmetrics_seconds_and_prometheus_milliseconds() {
        let ts = |t: &str| parse_sample(&format!("x 1 {t}")).map(|s| s.timestamp_ms);
        assert_eq!(ts("1767225600000"), Ok(Some(1_767_225_600_000)));
        assert_eq!(ts("1767225600"), Ok(Some(1_767_225_600_000)));
        assert_eq!(ts("1767225600.5"), Ok(Some(1_767_225_600_500)));
        assert_eq!(ts("1.7672256e9"), Ok(Some(1_767_225_600_000)));
        assert!(ts("NaN").is_err());
        assert!(ts("1e300").is_err());
    }

    #[test]
    fn timestamps_past_the_years_of_rfc_3339_do_not_read() {
        let ts = |t: &str| parse_sample(&format!("x 1 {t}")).map(|s| s.timestamp_ms);
        assert_eq!(ts("253402300799999"), Ok(Some(253_402_300_799_999)));
        assert_eq!(ts("-62135596800000"), Ok(Some(-62_135_596_800_000)));
        for t in ["253402300800000", "-62135596800001", "9000000000000000000"] {
            let e = ts(t).unwrap_err();
            assert!(e.contains(&format!("bad timestamp `{t}`")), "{e}");
        }
    }
}
