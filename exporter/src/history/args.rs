//! The flags of `--prometheus` ([`PrometheusArgs`]), their defaults and their parsers.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Time limit of one HTTP request, body included.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request waits before it is said on stderr (`--waiting-notice`).
pub(crate) const WAITING_NOTICE: Duration = Duration::from_secs(20);
/// Time limit of the whole read (`--deadline`).
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);
/// Requests one query may take, retries and split parts included
/// (`--max-requests-per-query`).
pub(crate) const DEFAULT_REQUESTS_PER_QUERY: u64 = 64;

/// Environment variable holding the password for `--basic-auth USER`.
pub(crate) const PASSWORD_ENV: &str = "TRUTHSCALE_PROMETHEUS_PASSWORD";

/// `analyze --prometheus`: where to read history from.
/// The longest `--since` and `--step`, and the longest ago `--until` goes: 10 years of
/// 365.25 days.
const TEN_YEARS: Duration = Duration::from_secs(315_576_000);
/// The longest `--deadline`.
const WEEK: Duration = Duration::from_secs(7 * 86_400);
/// The longest `--scrape-interval`.
const DAY: Duration = Duration::from_secs(86_400);
/// The longest `--prometheus-timeout` and `--waiting-notice`.
const HOUR: Duration = Duration::from_secs(3600);

/// `--waiting-notice`: 0 (never), or 1 s to 1 h: the notice counts whole seconds, and one
/// more often than a line can be written would do nothing but write.
fn waiting_notice(text: &str) -> Result<Duration, String> {
    let d = crate::setting::duration_flag(Duration::ZERO, HOUR)(text)?;
    if !d.is_zero() && d < Duration::from_secs(1) {
        return Err(format!(
            "{text:?} is shorter than 1s: give 1s to 1h (the notice counts whole seconds), or 0s for never"
        ));
    }
    Ok(d)
}

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Prometheus history")]
pub(crate) struct PrometheusArgs {
    /// Read DCGM_FI_* (or truthscale_gpu_*) history from this Prometheus-compatible server,
    /// e.g. http://prometheus:9090 (a path prefix is kept).
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// How far back from now to read, at most 10 years [default: 24h for analyze, 14d for
    /// report].
    #[arg(long, value_parser = crate::setting::duration_flag(Duration::ZERO, TEN_YEARS))]
    pub since: Option<Duration>,
    /// Resolution of the history: one sample per step, at least 100ms [default: 15s for
    /// analyze; for report 60s, or over a long window the finest whole minutes or hours that
    /// keep it under 5 000 steps (5m for 14d)]. Use the scrape interval, or a multiple of it.
    #[arg(long, value_parser = crate::setting::duration_flag(Duration::ZERO, TEN_YEARS))]
    pub step: Option<Duration>,
    /// Label matchers every series must also satisfy, e.g. '{namespace="prod"}'.
    #[arg(long, value_name = "MATCHERS")]
    pub selector: Option<String>,
    /// Send `Authorization: Bearer <token>` with the token in this file.
    #[arg(long, value_name = "FILE", conflicts_with = "basic_auth")]
    pub bearer_token_file: Option<PathBuf>,
    /// Basic auth as USER:PASSWORD, or USER with the password in the environment variable
    /// TRUTHSCALE_PROMETHEUS_PASSWORD (which keeps it out of the process list).
    #[arg(long, value_name = "USER[:PASSWORD]")]
    pub basic_auth: Option<String>,
    /// Time limit of each request to Prometheus, its answer included [default: 30s]. A
    /// request with no whole answer in time is tried again (--prometheus-retries), then
    /// the command fails naming this flag; it is never split into smaller queries (at most
    /// 1h).
    #[arg(long, value_name = "DURATION", value_parser = crate::setting::duration_flag(Duration::ZERO, HOUR))]
    pub prometheus_timeout: Option<Duration>,
    /// Time limit of the whole read from Prometheus, every request, retry and split query
    /// included: the command fails naming this flag when it runs out (at most 7d)
    /// [default: 10m].
    #[arg(long, value_name = "DURATION", value_parser = crate::setting::duration_flag(Duration::ZERO, WEEK))]
    pub deadline: Option<Duration>,
    /// The most requests one query may take: its retries, and the smaller queries it is
    /// split into when the server refuses it for a limit (1 to 100000) [default: 64].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub max_requests_per_query: Option<u64>,
    /// End of the window instead of now: an RFC 3339 time (2026-11-30T14:00:00Z) or how
    /// long ago (2h), to read a past incident; --since counts back from it.
    #[arg(long, value_name = "TIME|AGO", value_parser = parse_until)]
    pub until: Option<Until>,
    /// Trust only the CA certificates in this PEM file for an https:// Prometheus (a
    /// private CA); without it, the Mozilla roots are trusted.
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// Queries to Prometheus in flight at once (1 to 32) [default: 2]. Their answers share
    /// 512 MiB: one answer may be at most 512 MiB over N (256 MiB at 2, 16 MiB at 32).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=32))]
    pub max_queries_in_flight: Option<u32>,
    /// Tries again of a request that failed for a passing reason (HTTP 5xx or 429, a
    /// connection refused or cut, no answer in time), after 250 ms, 500 ms, 1 s… (0 to 10)
    /// [default: 3].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=10))]
    pub prometheus_retries: Option<u32>,
    /// The label that tells clusters apart in a store several clusters write to (an
    /// external label such as `cluster`): each GPU's node is then named CLUSTER/NODE, so
    /// the same node or pod name in two clusters stays two, and `report` sizes each cluster
    /// on its own as well.
    #[arg(long, value_name = "LABEL", value_parser = label_name)]
    pub cluster_label: Option<String>,
    /// How often the series were scraped [default: 60s]. A --step of at least twice this
    /// reads each step as summaries of the raw samples in it (the mean of each activity
    /// ratio, the peak of memory used, and for `report` four bands of each activity ratio for
    /// the sizing) instead of one sample per step, so a coarse step over a long window
    /// keeps the bursts and peaks a finer one would see (at most 1d).
    #[arg(long, value_name = "DURATION", value_parser = crate::setting::duration_flag(Duration::ZERO, DAY))]
    pub scrape_interval: Option<Duration>,
    /// Ask Prometheus for gzip-compressed answers: `auto` does unless the server is on
    /// this host (localhost, 127.0.0.0/8, [::1]), where compressing costs the server more
    /// CPU than the transfer it saves [default: auto].
    #[arg(long, value_name = "WHEN", value_enum)]
    pub compression: Option<Compression>,
    /// While a request to Prometheus has had no answer this long, say so on stderr
    /// ("still waiting for Prometheus at URL (20 s)"), and again as often; 0s for never,
    /// else 1s to 1h [default: 20s].
    #[arg(long, value_name = "DURATION", value_parser = waiting_notice)]
    pub waiting_notice: Option<Duration>,
    /// Read each GPU series' raw samples by Prometheus' remote-read API (streamed chunks)
    /// and evaluate its steps here as the server would, instead of query_range: `auto`
    /// does where the server shows how it evaluates (Prometheus 2.13 or later, its
    /// lookback flag listed, no external labels), `always` fails where it does not
    /// [default: auto].
    #[arg(long, value_name = "WHEN", value_enum)]
    pub remote_read: Option<RemoteRead>,
}

impl PrometheusArgs {
    /// A flag of this group given without `--prometheus`, if any.
    #[must_use]
    pub(crate) fn stray_flag(&self) -> Option<&'static str> {
        if self.prometheus.is_some() {
            return None;
        }
        [
            (self.since.is_some(), "--since"),
            (self.step.is_some(), "--step"),
            (self.selector.is_some(), "--selector"),
            (self.bearer_token_file.is_some(), "--bearer-token-file"),
            (self.basic_auth.is_some(), "--basic-auth"),
            (self.prometheus_timeout.is_some(), "--prometheus-timeout"),
            (self.deadline.is_some(), "--deadline"),
            (
                self.max_requests_per_query.is_some(),
                "--max-requests-per-query",
            ),
            (self.until.is_some(), "--until"),
            (self.ca_file.is_some(), "--ca-file"),
            (
                self.max_queries_in_flight.is_some(),
                "--max-queries-in-flight",
            ),
            (self.prometheus_retries.is_some(), "--prometheus-retries"),
            (self.cluster_label.is_some(), "--cluster-label"),
            (self.scrape_interval.is_some(), "--scrape-interval"),
            (self.compression.is_some(), "--compression"),
            (self.waiting_notice.is_some(), "--waiting-notice"),
            (self.remote_read.is_some(), "--remote-read"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

/// `--remote-read`: whether plain series are read by Prometheus' remote-read API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RemoteRead {
    /// Where the server shows how it evaluates a range query; `query_range` elsewhere.
    Auto,
    /// Always; an error where the server does not show how it evaluates.
    Always,
    /// Never: `query_range` only.
    Never,
}

/// `--compression`: whether answers are asked for gzip-compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Compression {
    /// gzip unless the server is on this host.
    Auto,
    /// Always gzip.
    Gzip,
    /// Never: the answers come as they are.
    None,
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn label_name(s: &str) -> Result<String, String> {
    let mut chars = s.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not a label name (letters, digits and _, not starting with a digit)"
        ))
    }
}

/// Default of `--max-queries-in-flight`.
pub(crate) const DEFAULT_IN_FLIGHT: u32 = 2;

/// Where `--until` ends the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// At this time.
    At(SystemTime),
    /// This long before now.
    Ago(Duration),
}

impl Until {
    /// The end, in Unix milliseconds, given `now`.
    #[must_use]
    pub(crate) fn end_ms(self, now_ms: i64) -> i64 {
        match self {
            Until::At(t) => t
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Until::Ago(d) => {
                now_ms.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            }
        }
    }
}

/// `--until`: an RFC 3339 time, or a duration ago.
///
/// # Errors
/// Neither; the message shows both forms.
pub(crate) fn parse_until(s: &str) -> Result<Until, String> {
    let s = s.trim();
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(Until::At(t));
    }
    match humantime::parse_duration(s) {
        Ok(ago) if ago <= TEN_YEARS => Ok(Until::Ago(ago)),
        Ok(_) => Err(format!("{s:?} ago is more than 10 years ago")),
        Err(_) => Err(format!(
            "{s:?} is neither an RFC 3339 time (2026-11-30T14:00:00Z) nor a duration ago (2h)"
        )),
    }
}

/// Default of `--since`.
pub(crate) const DEFAULT_SINCE: Duration = Duration::from_secs(24 * 3600);
/// Default of `--step`.
pub(crate) const DEFAULT_STEP: Duration = Duration::from_secs(15);
/// Default of `--scrape-interval`.
pub(crate) const DEFAULT_SCRAPE_INTERVAL: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_is_a_time_or_a_duration_ago() {
        let at = parse_until("2026-11-30T14:00:00Z").unwrap();
        assert_eq!(at.end_ms(0), 1_796_047_200_000);
        assert_eq!(parse_until("2h").unwrap().end_ms(10_000_000), 2_800_000);
        assert!(parse_until("yesterday").unwrap_err().contains("RFC 3339"));
    }

    #[test]
    fn a_waiting_notice_is_never_or_whole_seconds() {
        assert_eq!(waiting_notice("0s"), Ok(Duration::ZERO));
        assert_eq!(waiting_notice("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(waiting_notice("1h"), Ok(HOUR));
        for short in ["1us", "999ms"] {
            let e = waiting_notice(short).unwrap_err();
            assert!(e.contains("shorter than 1s: give 1s to 1h"), "{e}");
        }
        assert!(waiting_notice("2h").is_err());
    }

    #[test]
    fn label_names() {
        assert_eq!(label_name("cluster"), Ok("cluster".to_owned()));
        assert!(label_name("9x").is_err() && label_name("a-b").is_err() && label_name("").is_err());
    }
}
