//! The flags of `--prometheus` resolved once ([`Resolved`]): each default filled in as the
//! command asks ([`Defaults`]), each flag checked, the credentials read. `History::open`
//! reads nothing else.

use super::api::DEFAULT_RETRIES;
use super::args::{
    Compression, DEFAULT_DEADLINE, DEFAULT_IN_FLIGHT, DEFAULT_REQUESTS_PER_QUERY,
    DEFAULT_SCRAPE_INTERVAL, DEFAULT_SINCE, DEFAULT_STEP, PrometheusArgs, REQUEST_TIMEOUT,
    RemoteRead, Until, WAITING_NOTICE,
};
use super::authorization;
use super::query::selector_matchers;
use anyhow::{Context as _, bail};
use std::path::PathBuf;
use std::time::Duration;

/// Most steps the default step of `report` gives a window: a workload's 5 000 steps are
/// 80 kB, so 2 000 GPUs over 14 days (at 5 minutes) hold 129 MB where 60 s would hold
/// 645 MB.
pub(crate) const DEFAULT_MAX_STEPS: u64 = 5_000;
/// The steps [`default_step`] is chosen from, finest first: whole minutes and hours.
const DEFAULT_STEPS_S: &[u64] = &[
    60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 21_600, 43_200, 86_400,
];

/// The default step of a window of `since` for `report`: 60 s, or for a long window the
/// finest of [`DEFAULT_STEPS_S`] that keeps it under [`DEFAULT_MAX_STEPS`] steps (14 days:
/// 5 minutes). A step at least twice the scrape interval reads the raw samples in it as
/// summaries, so the coarser step keeps the peaks and p99s.
#[must_use]
pub(crate) fn default_step(since: Duration) -> Duration {
    let s = since.as_secs();
    let step = DEFAULT_STEPS_S
        .iter()
        .copied()
        .find(|step| s / step < DEFAULT_MAX_STEPS)
        .unwrap_or(86_400);
    Duration::from_secs(step)
}

/// `analyze`'s step whatever the window: [`DEFAULT_STEP`].
fn analyze_step(_since: Duration) -> Duration {
    DEFAULT_STEP
}

/// A command's defaults of `--since` and `--step`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Defaults {
    /// The window when `--since` is not given.
    pub since: Duration,
    /// The step of a window when `--step` is not given.
    pub step: fn(Duration) -> Duration,
}

impl Defaults {
    /// `analyze --prometheus`: [`DEFAULT_SINCE`], and [`DEFAULT_STEP`] whatever the window.
    pub(crate) const ANALYZE: Defaults = Defaults {
        since: DEFAULT_SINCE,
        step: analyze_step,
    };
}

/// The flags of `--prometheus` checked, with the command's defaults: the one configuration
/// a history is opened with. The step is held here once.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// `--prometheus`, as given.
    pub url: String,
    /// `--since`, or the command's default.
    pub since: Duration,
    /// `--step`, or the command's default for `since`: at least 100 ms, at most `since`.
    pub step: Duration,
    /// `--scrape-interval`, positive.
    pub scrape_interval: Duration,
    /// The label matchers of `--selector`, without braces.
    pub matchers: String,
    /// `--until`.
    pub until: Option<Until>,
    /// `--prometheus-timeout`, positive.
    pub timeout: Duration,
    /// `--deadline`, positive.
    pub deadline: Duration,
    /// `--max-requests-per-query`.
    pub requests_per_query: u64,
    /// `--max-queries-in-flight`, at least 1.
    pub in_flight: usize,
    /// `--prometheus-retries`.
    pub retries: u32,
    /// `--cluster-label`.
    pub cluster_label: Option<String>,
    /// `--compression`.
    pub compression: Compression,
    /// `--remote-read`.
    pub remote_read: RemoteRead,
    /// `--waiting-notice` (zero: never).
    pub waiting_notice: Duration,
    /// `--ca-file`.
    pub ca_file: Option<PathBuf>,
    /// The `Authorization` header, from `--bearer-token-file` or `--basic-auth`.
    pub authorization: Option<String>,
}

impl Resolved {
    /// Each step summarises the raw samples in it: the step is at least twice
    /// `--scrape-interval`.
    #[must_use]
    pub(crate) fn summarizes(&self) -> bool {
        self.step >= self.scrape_interval.saturating_mul(2)
    }
}

impl PrometheusArgs {
    /// The flags checked, with `defaults` for those not given, and the credentials read
    /// (the password of `--basic-auth USER` from `env`).
    ///
    /// # Errors
    /// No `--prometheus`; a flag out of its range (each error names it); a bearer token
    /// file that cannot be read, or a password missing from `env`.
    pub(crate) fn resolve(
        &self,
        defaults: &Defaults,
        env: &[(String, String)],
    ) -> anyhow::Result<Resolved> {
        let url = self
            .prometheus
            .as_deref()
            .context("--prometheus URL is missing")?;
        let since = self.since.unwrap_or(defaults.since);
        let step = self.step.unwrap_or_else(|| (defaults.step)(since));
        if step.as_millis() < 100 {
            bail!(
                "--step {}: at least 100ms",
                humantime::format_duration(step)
            );
        }
        let scrape_interval = self.scrape_interval.unwrap_or(DEFAULT_SCRAPE_INTERVAL);
        if scrape_interval.is_zero() {
            bail!("--scrape-interval: give a positive duration, like 60s");
        }
        if since < step {
            bail!(
                "--since {} is shorter than --step {}",
                humantime::format_duration(since),
                humantime::format_duration(step)
            );
        }
        let matchers = selector_matchers(self.selector.as_deref())?;
        let in_flight = self
            .max_queries_in_flight
            .unwrap_or(DEFAULT_IN_FLIGHT)
            .max(1) as usize;
        let timeout = self.prometheus_timeout.unwrap_or(REQUEST_TIMEOUT);
        if timeout.is_zero() {
            bail!("--prometheus-timeout: give a positive duration, like 30s");
        }
        let deadline = self.deadline.unwrap_or(DEFAULT_DEADLINE);
        if deadline.is_zero() {
            bail!("--deadline: give a positive duration, like 10m");
        }
        Ok(Resolved {
            url: url.to_owned(),
            since,
            step,
            scrape_interval,
            matchers,
            until: self.until,
            timeout,
            deadline,
            requests_per_query: self
                .max_requests_per_query
                .unwrap_or(DEFAULT_REQUESTS_PER_QUERY),
            in_flight,
            retries: self.prometheus_retries.unwrap_or(DEFAULT_RETRIES),
            cluster_label: self.cluster_label.clone(),
            compression: self.compression.unwrap_or(Compression::Auto),
            remote_read: self.remote_read.unwrap_or(RemoteRead::Auto),
            waiting_notice: self.waiting_notice.unwrap_or(WAITING_NOTICE),
            ca_file: self.ca_file.clone(),
            authorization: authorization(self, env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_step_keeps_a_window_under_5000_steps() {
        let d = |h: u64| default_step(Duration::from_secs(h * 3600));
        assert_eq!(d(6), Duration::from_secs(60));
        assert_eq!(d(72), Duration::from_secs(60), "3 days: 4 320 steps");
        assert_eq!(
            d(7 * 24),
            Duration::from_secs(300),
            "2 m would be 5 040 steps"
        );
        assert_eq!(d(14 * 24), Duration::from_secs(300), "4 032 steps");
        assert_eq!(d(30 * 24), Duration::from_secs(600), "4 320 steps");
        assert_eq!(d(365 * 24), Duration::from_secs(7_200));
        assert_eq!(d(100 * 365 * 24), Duration::from_secs(86_400));
    }
}
