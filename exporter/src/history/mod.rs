//! `truthscale analyze --prometheus URL`: the same analysis as `analyze FILE`, over the
//! DCGM history a Prometheus server (or a compatible API) already holds.
//!
//! 1. Discovery: one `GET /api/v1/label/__name__/values` with
//!    `match[]={__name__=~"<every mapped name>", <selector>}` over the range lists the metric
//!    names present. The dcgm-exporter names the text parser maps
//!    ([`dcgm_text::mapped_metrics`], `DCGM_FI_*` and the old lowercase `dcgm_*` names) are
//!    used when any exist; otherwise truthscale's own `truthscale_gpu_*` gauges.
//! 2. Chunks: the range is cut into chunks of at most `CHUNK_POINTS` steps (under
//!    Prometheus' 11 000 points per series), aligned to multiples of the step. Each chunk
//!    runs one `query_range` per metric name (`NAME{selector}`).
//! 3. Merge: a chunk's points are sorted by (timestamp, series) and each timestamp becomes
//!    one [`Sample`] with the entities that have a value at it, built with the text
//!    parser's own mapping ([`Scrape`]): units, sentinels, label conventions, MIG, pods.
//!    A series missing at a step is blank there, never zero; series that come and go
//!    (pods, relabelling) are entities that come and go.
//! 4. The samples feed the [`Analyzer`](truthscale_core::analysis::Analyzer) in time order
//!    with a nominal interval of one step, and the report prints as `analyze FILE`'s does.

mod api;
mod merge;

use anyhow::{Context, bail};
use api::*;
pub(crate) use merge::NO_CLUSTER;
use merge::*;
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use truthscale_core::catalog::{self, GpuMetric, MetricId, Raw};
use truthscale_core::fleet::{BANDS, STEP_QUANTILES};
use truthscale_core::model::{
    EntityId, EntityKey, EntitySample, Field, MigId, PodRef, Sample, Timestamp,
};
use truthscale_core::parse::Unread;
use truthscale_core::parse::dcgm_text::{self, Scrape};

/// Steps per `query_range` request: Prometheus refuses more than 11 000 points per series.
pub(crate) const CHUNK_POINTS: i64 = 10_000;
/// Steps of the first chunk, before the number of series is known: few, so that even a
/// fleet of 10 000 GPUs holds no more than [`CHUNK_BUDGET`] points in it (50 000 series ×
/// 10 steps is a third of the budget); each next chunk is sized from the series seen.
pub(crate) const FIRST_CHUNK_POINTS: i64 = 10;
/// Points (steps × series, all names together) one chunk may hold: after the first chunk,
/// the chunk length is this over the number of series seen, so memory stays bounded
/// whatever the number of GPUs.
pub(crate) const CHUNK_BUDGET: i64 = 1_500_000;
const _: () = assert!(CHUNK_POINTS <= 11_000, "Prometheus' limit per series");
/// Time limit of one HTTP request, body included.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Time limit of the whole read (`--deadline`).
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);
/// Requests one query may take, retries and split parts included
/// (`--max-requests-per-query`).
pub(crate) const DEFAULT_REQUESTS_PER_QUERY: u64 = 64;
/// Largest response body read (after decompression), whatever the queries in flight
/// ([`api::MAX_BODIES_IN_FLIGHT`] shared by them may lower it).
const MAX_BODY: u64 = 256 << 20;
/// Environment variable holding the password for `--basic-auth USER`.
pub(crate) const PASSWORD_ENV: &str = "TRUTHSCALE_PROMETHEUS_PASSWORD";

/// `analyze --prometheus`: where to read history from.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Prometheus history")]
pub(crate) struct PrometheusArgs {
    /// Read DCGM_FI_* (or truthscale_gpu_*) history from this Prometheus-compatible server,
    /// e.g. http://prometheus:9090 (a path prefix is kept).
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// How far back from now to read [default: 24h for analyze, 14d for report].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<Duration>,
    /// Resolution of the history: one sample per step, at least 100ms [default: 15s for
    /// analyze, 60s for report]. Use the scrape interval, or a multiple of it.
    #[arg(long, value_parser = humantime::parse_duration)]
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
    /// the command fails naming this flag; it is never split into smaller queries.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub prometheus_timeout: Option<Duration>,
    /// Time limit of the whole read from Prometheus, every request, retry and split query
    /// included: the command fails naming this flag when it runs out [default: 10m].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
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
    /// keeps the bursts and peaks a finer one would see.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub scrape_interval: Option<Duration>,
    /// Ask Prometheus for gzip-compressed answers: `auto` does unless the server is on
    /// this host (localhost, 127.0.0.0/8, [::1]), where compressing costs the server more
    /// CPU than the transfer it saves [default: auto].
    #[arg(long, value_name = "WHEN", value_enum)]
    pub compression: Option<Compression>,
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
    humantime::parse_duration(s).map(Until::Ago).map_err(|_| {
        format!("{s:?} is neither an RFC 3339 time (2026-11-30T14:00:00Z) nor a duration ago (2h)")
    })
}

/// Default of `--since`.
pub(crate) const DEFAULT_SINCE: Duration = Duration::from_secs(24 * 3600);
/// Default of `--step`.
pub(crate) const DEFAULT_STEP: Duration = Duration::from_secs(15);
/// Default of `--scrape-interval`.
pub(crate) const DEFAULT_SCRAPE_INTERVAL: Duration = Duration::from_secs(60);

/// How a step coarser than the scrape ([`History::summarizes`]) summarises the raw samples
/// scraped in it: one `*_over_time` function over the step's own window, `[step − 1ms]`
/// back from its time `t`, so the windows tile the range and every raw sample is in exactly
/// one step, whether the server's ranges include their start (Prometheus 2: the window is
/// `[t − step + 1ms, t]`) or not (Prometheus 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Summary {
    /// `avg_over_time`: activity ratios, clocks, power, rates.
    Mean,
    /// `max_over_time`: memory used and total (a step's peak is what must fit).
    Max,
    /// `min_over_time`: dcgm-exporter's free framebuffer (with the peak used, the total).
    Min,
    /// `last_over_time`: counters (energy: the differences between steps stay exact) and
    /// bit fields (throttle reasons).
    Last,
    /// The upper edge of band `j` of the step's raw samples of an activity ratio
    /// ([`STEP_QUANTILES`]): `quantile_over_time(q, …)`, the top band `max_over_time`; read
    /// beside the mean for the sizing ([`SampleKind::Peak`]).
    Band(usize),
}

impl Summary {
    /// The summary of `selector` over each step of `step_ms`.
    fn wrap(self, selector: &str, step_ms: i64) -> String {
        let f = match self {
            Summary::Mean => "avg_over_time(",
            Summary::Max => "max_over_time(",
            Summary::Min => "min_over_time(",
            Summary::Last => "last_over_time(",
            Summary::Band(j) if j + 1 >= BANDS => "max_over_time(",
            Summary::Band(j) => {
                return format!(
                    "quantile_over_time({}, {selector}[{}ms])",
                    STEP_QUANTILES[j],
                    (step_ms - 1).max(1)
                );
            }
        };
        format!("{f}{selector}[{}ms])", (step_ms - 1).max(1))
    }

    /// How a coarse step summarises the series `name` of `family`, and whether its bands are
    /// read too (activity ratios).
    fn of(family: Family, name: &str) -> (Summary, bool) {
        let lower = name.to_ascii_lowercase();
        if family == Family::DcgmExporter
            && (lower.ends_with("fb_free") || lower.ends_with("fb_free_bytes"))
        {
            return (Summary::Min, false);
        }
        match field_of(family, name) {
            Some(f) if f.is_ratio() => (Summary::Mean, true),
            Some(Field::MemUsedBytes | Field::MemTotalBytes) => (Summary::Max, false),
            // Counters: their last value in each step, whose deltas the deriver reads.
            Some(Field::EnergyJoules) | None => (Summary::Last, false),
            Some(f) if f.is_cycle_counter() => (Summary::Last, false),
            Some(_) => (Summary::Mean, false),
        }
    }
}

/// The reading a series of `family` is (dcgm-exporter's free framebuffer: the total it
/// completes).
fn field_of(family: Family, name: &str) -> Option<Field> {
    match family {
        Family::Truthscale => own_metric(name).map(|r| r.field),
        Family::DcgmExporter => dcgm_text::mapped_metrics()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, f)| f),
    }
}

/// The activity ratios the sizing's saturation and busiest pipe are derived from: read in
/// bands at a coarse step ([`History::read_peaks`]).
const SIZING_RATIOS: [Field; 7] = [
    Field::TensorActive,
    Field::HmmaActive,
    Field::ImmaActive,
    Field::Fp16Active,
    Field::Fp32Active,
    Field::Fp64Active,
    Field::DramActive,
];

/// Which of a step's samples [`History::feed_stats`] hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SampleKind {
    /// The step's sample: Prometheus' own at a fine step, the summaries (means, peak
    /// memory) at a coarse one.
    Step,
    /// At a coarse step with peaks asked for ([`History::read_peaks`]): band `j` of the
    /// same step ([`STEP_QUANTILES`]), with
    /// each activity ratio's p99 over the raw samples in it, after all of a chunk's
    /// [`SampleKind::Step`] samples.
    Peak(usize),
}

/// One query of each chunk: a metric name and how each step reads it.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    /// `None`: the sample Prometheus evaluates at each step.
    summary: Option<Summary>,
    /// Read for the [`SampleKind::Peak`] samples of this band only.
    band: Option<usize>,
    /// Read for every kind: a series without bands of its own that the saturation of a band
    /// sample needs (the clocks).
    shared: bool,
}

impl Column {
    /// Whether the column's answers go into the samples of `kind`.
    fn feeds(&self, kind: SampleKind) -> bool {
        match kind {
            SampleKind::Step => self.band.is_none(),
            SampleKind::Peak(j) => self.band == Some(j) || self.shared,
        }
    }
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
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

/// Which metric names the history is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// dcgm-exporter's raw counters (`DCGM_FI_*`, old `dcgm_*`).
    DcgmExporter,
    /// truthscale's own gauges (`truthscale_gpu_*`), when no DCGM series exist.
    Truthscale,
}

impl Family {
    /// How the output names it.
    #[must_use]
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Family::DcgmExporter => "dcgm-exporter series (DCGM_FI_*)",
            Family::Truthscale => "truthscale series (truthscale_gpu_*)",
        }
    }
}

/// The families of truthscale's own that the history does not read back, though each is
/// one reading ([`catalog::MetricDesc::raw`]): the history never read them (it read the
/// families the analysis uses), and reading them would add a `query_range` per family
/// and chunk for readings the analysis does not use.
const NOT_READ_BACK: &[MetricId] = &[
    MetricId::Gpu(GpuMetric::GpuHmmaActive),
    MetricId::Gpu(GpuMetric::GpuImmaActive),
    MetricId::Gpu(GpuMetric::GpuTemperature),
];

/// How one of truthscale's own series is read back: the reading its family is, from the
/// catalog (exported as is, or an estimate of it, as the power is).
fn own_metric(name: &str) -> Option<Raw> {
    let m = MetricId::from_name(name)?.desc();
    m.raw.filter(|_| !NOT_READ_BACK.contains(&m.id))
}

/// The names of truthscale's own families read back, in catalog order.
fn own_names() -> impl Iterator<Item = &'static str> {
    catalog::ALL
        .iter()
        .map(|m| m.name)
        .filter(|n| own_metric(n).is_some())
}

/// The time range, in milliseconds since the epoch: evaluation at `start + k·step ≤ end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    /// First evaluation time, a multiple of `step`.
    pub start: i64,
    /// Last time (inclusive).
    pub end: i64,
    /// Step.
    pub step: i64,
}

impl Range {
    /// `since` back from `now`, the start aligned down to a multiple of `step`.
    #[must_use]
    pub(crate) fn back_from(now: i64, since: i64, step: i64) -> Range {
        let step = step.max(1);
        Range {
            start: (now - since).div_euclid(step) * step,
            end: now,
            step,
        }
    }

    /// Evaluation times in the range.
    #[must_use]
    pub(crate) fn points(&self) -> i64 {
        if self.end < self.start {
            0
        } else {
            (self.end - self.start) / self.step + 1
        }
    }
}

/// Seconds for the API, with millisecond precision.
fn secs(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

/// The label matchers of `--selector`, without braces: `{a="b"}` or `a="b"`.
///
/// # Errors
/// A selector with a metric name or unbalanced braces.
pub(crate) fn selector_matchers(selector: Option<&str>) -> anyhow::Result<String> {
    let Some(s) = selector.map(str::trim) else {
        return Ok(String::new());
    };
    let inner = match s.strip_prefix('{') {
        Some(rest) => rest
            .strip_suffix('}')
            .with_context(|| format!("--selector {s:?}: no closing `}}`"))?,
        None if s.contains(['{', '}']) => bail!(
            "--selector {s:?}: give label matchers only, like '{{namespace=\"prod\"}}'; truthscale picks the metric names"
        ),
        None => s,
    };
    Ok(inner.trim().trim_end_matches(',').trim().to_owned())
}

/// `NAME{matchers}` for one metric.
fn series_query(name: &str, matchers: &str) -> String {
    if matchers.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{matchers}}}")
    }
}

/// The labels a metric's series are split by when one step of all of them is refused: the
/// first with two values or more in the range.
const SPLIT_LABELS: &[&str] = &["uuid", "UUID", "node", "Hostname", "instance", "gpu", "pod"];

/// `matchers` with one more matcher.
fn join_matchers(matchers: &str, more: &str) -> String {
    if matchers.is_empty() {
        more.to_owned()
    } else {
        format!("{matchers},{more}")
    }
}

/// A regular expression matching exactly the `values` (Prometheus anchors it), escaped
/// for RE2 and for a PromQL double-quoted string.
fn alternation(values: &[String]) -> String {
    let mut out = String::new();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push('|');
        }
        for c in v.chars() {
            match c {
                // The regex escape of a backslash, each of the two escaped for the string.
                '\\' => out.push_str(r"\\\\"),
                // The regex escape, itself escaped for the string.
                '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$' => {
                    out.push_str(r"\\");
                    out.push(c);
                }
                '"' => out.push_str(r#"\""#),
                c => out.push(c),
            }
        }
    }
    out
}

/// The `Authorization` header value, from `--bearer-token-file` or `--basic-auth` (the
/// password, when not in the flag, from `PASSWORD_ENV` in `env`).
fn authorization(
    args: &PrometheusArgs,
    env: &[(String, String)],
) -> anyhow::Result<Option<String>> {
    use base64::Engine as _;
    if let Some(path) = &args.bearer_token_file {
        let token = crate::bounds::read_file_to_string(path, crate::bounds::MAX_TOKEN_FILE)
            .with_context(|| format!("cannot read --bearer-token-file {}", path.display()))?;
        let token = token.trim();
        if token.is_empty() {
            bail!("--bearer-token-file {}: the file is empty", path.display());
        }
        return Ok(Some(format!("Bearer {token}")));
    }
    let Some(basic) = &args.basic_auth else {
        return Ok(None);
    };
    let (user, password) = match basic.split_once(':') {
        Some((u, p)) => (u.to_owned(), p.to_owned()),
        None => match env.iter().find(|(k, _)| k == PASSWORD_ENV) {
            Some((_, p)) => (basic.clone(), p.clone()),
            None => bail!(
                "--basic-auth USER without :PASSWORD takes the password from {PASSWORD_ENV}, which is not set"
            ),
        },
    };
    if user.is_empty() {
        bail!("--basic-auth: the user name is empty");
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    Ok(Some(format!("Basic {encoded}")))
}

/// Every name discovery asks for: the mapped DCGM names as dcgm-exporter writes them
/// (upper case) and in lower case, and truthscale's gauges.
fn candidate_names() -> Vec<String> {
    let mut names: BTreeSet<String> = BTreeSet::new();
    for (n, _) in dcgm_text::mapped_metrics() {
        names.insert(n.to_owned());
        names.insert(n.to_ascii_uppercase());
    }
    names.extend(own_names().map(str::to_owned));
    names.into_iter().collect()
}

fn is_dcgm(name: &str) -> bool {
    dcgm_text::mapped_metrics().any(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// A Prometheus history to read: the flags checked, the range fixed, the series found.
#[derive(Debug)]
pub(crate) struct History {
    client: Client,
    range: Range,
    step: Duration,
    matchers: String,
    family: Family,
    /// The queries of each chunk, one per metric name (and one per band for an activity
    /// ratio read in bands).
    columns: Vec<Column>,
    /// Each step summarises the raw samples in it (`--step` at least twice
    /// `--scrape-interval`).
    summarizes: bool,
    /// Raw samples a step holds: the step over `--scrape-interval`.
    samples_per_step: f64,
    in_flight: usize,
    /// `--cluster-label`.
    cluster_label: Option<String>,
    /// `--max-requests-per-query`.
    requests_per_query: u64,
    /// Queries the server refused for a limit and that were split.
    splits: AtomicU64,
    /// After a split: the most steps one query of a name has been answered for, so later
    /// chunks start there (`i64::MAX`: no split yet).
    steps_answered: AtomicI64,
    /// The DCGM families in the range that are not read.
    unread: Unread,
}

/// What reading the history cost, and where the time went.
#[derive(Debug, Clone)]
pub(crate) struct FeedStats {
    /// One line saying what was read.
    pub summary: String,
    /// `query_range` and label requests made.
    pub queries: u64,
    /// Chunks read.
    pub chunks: u64,
    /// Seconds spent waiting for Prometheus' answers (until each whole body was read).
    pub waiting_seconds: f64,
    /// Seconds spent decoding the answers and merging them into samples.
    pub decoding_seconds: f64,
    /// Seconds spent in the caller's hand-over function (the analysis).
    pub consuming_seconds: f64,
    /// Largest number of series one chunk held.
    pub max_series: u64,
    /// Requests tried again after a passing failure.
    pub retries: u64,
    /// Queries refused for a server limit and split into smaller ones.
    pub splits: u64,
    /// The answers' warnings (Prometheus', or Thanos' and Mimir's partial answers), capped
    /// and summarised: for the report's notes.
    pub warnings: Vec<String>,
}

/// One series of [`History::series_by_step`]: its labels, and its values by step index.
pub(crate) type StepSeries = (BTreeMap<String, String>, Vec<(usize, f64)>);

impl History {
    /// Check the flags and discover which series the range holds.
    ///
    /// # Errors
    /// Bad flags; Prometheus unreachable, answering an error, a status other than 200 or
    /// something that is not its API JSON; no GPU series in the range.
    pub(crate) fn open(p: &PrometheusArgs, env: &[(String, String)]) -> anyhow::Result<History> {
        let url = p
            .prometheus
            .as_deref()
            .context("--prometheus URL is missing")?;
        let (since_d, step_d) = (
            p.since.unwrap_or(DEFAULT_SINCE),
            p.step.unwrap_or(DEFAULT_STEP),
        );
        let step = i64::try_from(step_d.as_millis()).unwrap_or(i64::MAX);
        if step < 100 {
            bail!(
                "--step {}: at least 100ms",
                humantime::format_duration(step_d)
            );
        }
        let scrape = p.scrape_interval.unwrap_or(DEFAULT_SCRAPE_INTERVAL);
        if scrape.is_zero() {
            bail!("--scrape-interval: give a positive duration, like 60s");
        }
        let summarizes = step_d >= scrape.saturating_mul(2);
        if since_d < step_d {
            bail!(
                "--since {} is shorter than --step {}",
                humantime::format_duration(since_d),
                humantime::format_duration(step_d)
            );
        }
        let matchers = selector_matchers(p.selector.as_deref())?;
        let in_flight = p.max_queries_in_flight.unwrap_or(DEFAULT_IN_FLIGHT).max(1) as usize;
        let client = Self::client(url, p, env, in_flight)?;
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let now = match p.until {
            Some(u) => {
                let end = u.end_ms(wall);
                if end > wall {
                    bail!("--until is in the future: the window must end by now");
                }
                end
            }
            None => wall,
        };
        let since = i64::try_from(since_d.as_millis()).unwrap_or(i64::MAX / 2);
        let range = Range::back_from(now, since.min(now), step);

        // Discovery: which names exist in the range, and which DCGM families beside them
        // are not read (named, never dropped in silence).
        let names_re = format!("{}|DCGM_FI_.+|dcgm_fi_.+", candidate_names().join("|"));
        let mut discover = format!("{{__name__=~\"{names_re}\"");
        if !matchers.is_empty() {
            discover.push(',');
            discover.push_str(&matchers);
        }
        discover.push('}');
        let (start_s, end_s) = (secs(range.start), secs(range.end));
        let found: Vec<String> = client.get(
            "/api/v1/label/__name__/values",
            &[("match[]", &discover), ("start", &start_s), ("end", &end_s)],
        )?;
        let dcgm: Vec<String> = found.iter().filter(|n| is_dcgm(n)).cloned().collect();
        let mut unread = Unread::default();
        for n in found
            .iter()
            .filter(|n| n.to_ascii_lowercase().starts_with("dcgm_fi_") && !is_dcgm(n))
        {
            unread.family(&n.to_ascii_lowercase());
        }
        let own: Vec<String> = found
            .iter()
            .filter(|n| own_metric(n).is_some())
            .cloned()
            .collect();
        let (family, names) = if !dcgm.is_empty() {
            (Family::DcgmExporter, dcgm)
        } else if !own.is_empty() {
            (Family::Truthscale, own)
        } else {
            bail!(
                "{}: no DCGM_FI_*, dcgm_* or truthscale_gpu_* series{} between {} and {}",
                client.base,
                if matchers.is_empty() {
                    String::new()
                } else {
                    format!(" matching {{{matchers}}}")
                },
                rfc3339(range.start),
                rfc3339(range.end)
            );
        };

        let columns = names
            .into_iter()
            .map(|name| Column {
                summary: summarizes.then(|| Summary::of(family, &name).0),
                name,
                band: None,
                shared: false,
            })
            .collect();
        Ok(History {
            client,
            range,
            step: step_d,
            matchers,
            family,
            columns,
            summarizes,
            samples_per_step: step_d.as_secs_f64() / scrape.as_secs_f64(),
            in_flight,
            cluster_label: p.cluster_label.clone(),
            requests_per_query: p
                .max_requests_per_query
                .unwrap_or(DEFAULT_REQUESTS_PER_QUERY),
            splits: AtomicU64::new(0),
            steps_answered: AtomicI64::new(i64::MAX),
            unread,
        })
    }

    /// The client for `url` as `p` asks: its timeout, retries and compression, the
    /// deadline of the whole read (from now), and the largest answer for `in_flight`
    /// queries at once.
    fn client(
        url: &str,
        p: &PrometheusArgs,
        env: &[(String, String)],
        in_flight: usize,
    ) -> anyhow::Result<Client> {
        let timeout = p.prometheus_timeout.unwrap_or(REQUEST_TIMEOUT);
        if timeout.is_zero() {
            bail!("--prometheus-timeout: give a positive duration, like 30s");
        }
        let deadline = p.deadline.unwrap_or(DEFAULT_DEADLINE);
        if deadline.is_zero() {
            bail!("--deadline: give a positive duration, like 10m");
        }
        let mut client = Client::new(url, authorization(p, env)?, timeout, p.ca_file.as_deref())?;
        client.retries = p.prometheus_retries.unwrap_or(DEFAULT_RETRIES);
        client.max_body = api::max_body(in_flight);
        client.deadline = Some(api::Deadline {
            at: std::time::Instant::now() + deadline,
            given: deadline,
        });
        client.gzip = match p.compression.unwrap_or(Compression::Auto) {
            Compression::Auto => !client.is_local(),
            Compression::Gzip => true,
            Compression::None => false,
        };
        Ok(client)
    }

    /// One `query_range` of `query` over `[first, last]` at the range's step.
    fn matrix(
        &self,
        query: &str,
        first: i64,
        last: i64,
        budget: &Budget,
    ) -> Result<Matrix, GetError> {
        let timeout = format!("{}s", self.client.timeout.as_secs().max(1));
        let matrix: Matrix = self.client.get_limited(
            "/api/v1/query_range",
            &[
                ("query", query),
                ("start", &secs(first)),
                ("end", &secs(last)),
                ("step", &secs(self.range.step)),
                ("timeout", &timeout),
            ],
            Some(budget),
        )?;
        if matrix.result_type != "matrix" {
            return Err(GetError::Other(anyhow::anyhow!(
                "{}/api/v1/query_range: expected a matrix, got {:?}",
                self.client.base,
                matrix.result_type
            )));
        }
        Ok(matrix)
    }

    /// Every series of `query` over `[first, last]`, as one answer or, when the server
    /// refuses it for a limit a smaller query meets ([`Limit`]), as the answers of smaller
    /// queries: halves in time, down to one step; when one step is still refused and the
    /// query is one metric's series (`name`: the name and the matchers of `query`), halves
    /// of its series over the whole range, told apart by the first of [`SPLIT_LABELS`]
    /// with two values or more (each half again split in time while refused). A refusal no
    /// split works around is an error naming the limit and the flag that raises it. All
    /// its requests (retries, parts, label lookups) come out of one budget of
    /// `--max-requests-per-query`.
    fn read(
        &self,
        query: &str,
        column: Option<(&Column, &str)>,
        first: i64,
        last: i64,
    ) -> anyhow::Result<Vec<Matrix>> {
        let budget = &Budget::new(self.requests_per_query);
        let (limit, message) = match self.read_halves(query, first, last, false, budget)? {
            Ok(out) => return Ok(out),
            Err(refused) => refused,
        };
        let Some((column, matchers)) = column else {
            bail!(
                "{message}; split down to one step, it is still refused: this is {}",
                limit.advice()
            );
        };
        for label in SPLIT_LABELS {
            let values: Vec<String> = self
                .client
                .get_limited(
                    &format!("/api/v1/label/{label}/values"),
                    &[
                        ("match[]", &series_query(&column.name, matchers)),
                        ("start", &secs(first)),
                        ("end", &secs(last)),
                    ],
                    Some(budget),
                )
                .map_err(anyhow::Error::from)?;
            if values.len() >= 2 {
                // The series without the label, then halves of those with it.
                let without = join_matchers(matchers, &format!("{label}=\"\""));
                let series = (column, *label, first, last, budget);
                let mut out = self.read_series(series, &without, &[])?;
                out.extend(self.read_series(series, matchers, &values)?);
                return Ok(out);
            }
        }
        bail!(
            "{message}; split down to one step, it is still refused, and no label ({}) tells two of its series apart: this is {}",
            SPLIT_LABELS.join(", "),
            limit.advice()
        )
    }

    /// `query` over `[first, last]`, in halves in time while the server refuses it for a
    /// limit; `Ok(Err(..))`: one step is still refused (the limit and the message).
    /// `halved`: this is a half (its length is then remembered for later chunks).
    fn read_halves(
        &self,
        query: &str,
        first: i64,
        last: i64,
        halved: bool,
        budget: &Budget,
    ) -> anyhow::Result<Result<Vec<Matrix>, (Limit, String)>> {
        let steps = (last - first) / self.range.step + 1;
        match self.matrix(query, first, last, budget) {
            Ok(m) => {
                if halved {
                    self.steps_answered.fetch_min(steps, Ordering::Relaxed);
                }
                Ok(Ok(vec![m]))
            }
            Err(GetError::Other(e)) => Err(e),
            Err(GetError::Limit { limit, message }) => {
                self.splits.fetch_add(1, Ordering::Relaxed);
                if steps < 2 {
                    return Ok(Err((limit, message)));
                }
                let mid = first + (steps / 2 - 1) * self.range.step;
                let mut out = match self.read_halves(query, first, mid, true, budget)? {
                    Ok(out) => out,
                    refused => return Ok(refused),
                };
                match self.read_halves(query, mid + self.range.step, last, true, budget)? {
                    Ok(more) => out.extend(more),
                    refused => return Ok(refused),
                }
                Ok(Ok(out))
            }
        }
    }

    /// The series of `column` over `matchers` whose `label` is one of `values` (none: all
    /// of `matchers`), split in time while refused, and in halves of `values` when one step
    /// is still refused.
    fn read_series(
        &self,
        series: (&Column, &str, i64, i64, &Budget),
        matchers: &str,
        values: &[String],
    ) -> anyhow::Result<Vec<Matrix>> {
        let (column, label, first, last, budget) = series;
        let m = if values.is_empty() {
            matchers.to_owned()
        } else {
            join_matchers(matchers, &format!("{label}=~\"{}\"", alternation(values)))
        };
        match self.read_halves(&self.column_query(column, &m), first, last, false, budget)? {
            Ok(out) => Ok(out),
            Err((limit, message)) => {
                if values.len() < 2 {
                    bail!(
                        "{message}; split down to one step and one {label}, it is still refused: this is {}",
                        limit.advice()
                    );
                }
                let (a, b) = values.split_at(values.len() / 2);
                let mut out = self.read_series(series, matchers, a)?;
                out.extend(self.read_series(series, matchers, b)?);
                Ok(out)
            }
        }
    }

    /// The series a PromQL `query` gives over the range, at its step, read in chunks of at
    /// most [`CHUNK_POINTS`] steps: each series' labels and its values by step index (NaN
    /// and infinities kept, for the reader to refuse or leave out). For attributes of pods (kube-state-metrics' requests and
    /// labels) beside the GPU series; the selector does not apply.
    ///
    /// # Errors
    /// As the GPU series' reads.
    pub(crate) fn series_by_step(&self, query: &str) -> anyhow::Result<Vec<StepSeries>> {
        let range = self.range;
        let mut out: BTreeMap<BTreeMap<String, String>, Vec<(usize, f64)>> = BTreeMap::new();
        let mut first = range.start;
        while first <= range.end {
            let last = (first + (CHUNK_POINTS - 1) * range.step).min(range.end);
            for matrix in self.read(query, None, first, last)? {
                for series in matrix.result {
                    let values = out.entry(series.metric).or_default();
                    for (t, v) in series.values {
                        let ms = (t * 1000.0).round() as i64;
                        let Ok(step) = usize::try_from((ms - range.start) / range.step) else {
                            continue;
                        };
                        // Non-finite values too: each reader decides (a GPU request that
                        // is not a number is refused, never dropped in silence).
                        if let Some(v) = v.0 {
                            values.push((step, v));
                        }
                    }
                }
            }
            first = last + range.step;
        }
        for values in out.values_mut() {
            // The halves of a split range arrive in order; a split by series is not used
            // here. Sorted anyway, so a step's value is found by position.
            values.sort_unstable_by_key(|v| v.0);
            values.dedup_by_key(|v| v.0);
        }
        Ok(out.into_iter().collect())
    }

    /// The query of `column` over `matchers`: its series, summarised per step when the step
    /// is coarse.
    fn column_query(&self, column: &Column, matchers: &str) -> String {
        let selector = series_query(&column.name, matchers);
        match column.summary {
            Some(s) => s.wrap(&selector, self.range.step),
            None => selector,
        }
    }

    /// At a coarse step, also read the bands of each activity ratio the sizing uses
    /// ([`SIZING_RATIOS`]) over the raw samples in each step: the quantiles
    /// [`STEP_QUANTILES`], handed over as [`SampleKind::Peak`] samples of each band
    /// ([`BANDS`] more queries per ratio and chunk). Nothing changes at a fine step, whose
    /// samples are the raw ones.
    pub(crate) fn read_peaks(&mut self) {
        if !self.summarizes || self.columns.iter().any(|c| c.band.is_some()) {
            return;
        }
        let mut peaks = Vec::new();
        for c in &mut self.columns {
            c.shared = matches!(
                field_of(self.family, &c.name),
                Some(Field::SmClockMhz | Field::MemClockMhz)
            );
            let sizing = field_of(self.family, &c.name).is_some_and(|f| SIZING_RATIOS.contains(&f));
            if sizing && Summary::of(self.family, &c.name).1 {
                peaks.extend((0..BANDS).map(|j| Column {
                    name: c.name.clone(),
                    summary: Some(Summary::Band(j)),
                    band: Some(j),
                    shared: false,
                }));
            }
        }
        self.columns.extend(peaks);
    }

    /// Each step summarises the raw samples in it (the step is at least twice
    /// `--scrape-interval`).
    #[must_use]
    pub(crate) fn summarizes(&self) -> bool {
        self.summarizes
    }

    /// How a summarised step's time is shared between the bands read
    /// ([`History::read_peaks`]): `None` at a fine step, or before the bands are asked for.
    #[must_use]
    pub(crate) fn step_bands(&self) -> Option<truthscale_core::fleet::StepBands> {
        (self.summarizes && self.columns.iter().any(|c| c.band.is_some()))
            .then(|| truthscale_core::fleet::StepBands::for_samples(self.samples_per_step))
    }

    /// The step, in seconds: the nominal interval of the samples.
    #[must_use]
    pub(crate) fn step_seconds(&self) -> f64 {
        self.range.step as f64 / 1000.0
    }

    /// The range read, in milliseconds since the epoch.
    #[must_use]
    pub(crate) fn range(&self) -> Range {
        self.range
    }

    /// Which metric names are read.
    #[must_use]
    pub(crate) fn family(&self) -> Family {
        self.family
    }

    /// The server's base URL.
    #[must_use]
    pub(crate) fn base_url(&self) -> &str {
        &self.client.base
    }

    /// The label matchers of `--selector`, without braces.
    #[must_use]
    pub(crate) fn matchers(&self) -> &str {
        &self.matchers
    }

    /// Read the range in chunks, as [`History::feed_stats`], and return the one-line summary.
    ///
    /// # Errors
    /// As [`History::open`], for any chunk.
    pub(crate) fn feed(self, mut on_sample: impl FnMut(&Sample)) -> anyhow::Result<String> {
        self.feed_stats(|s, kind| {
            if kind == SampleKind::Step {
                on_sample(s);
            }
        })
        .map(|s| s.summary)
    }

    /// Read the range in chunks, handing each step's sample to `on_sample` in time order (and,
    /// with [`History::read_peaks`], each chunk's peak samples after its step samples), with
    /// progress on a terminal (queries done of the total, the rate). The first chunk is
    /// [`FIRST_CHUNK_POINTS`] steps; each next one holds about [`CHUNK_BUDGET`] points for
    /// the number of series seen so far (at most [`CHUNK_POINTS`] steps, and no more than a
    /// split query was answered for), so memory does not grow with GPUs × steps. A chunk's
    /// queries (one per name) run up to `--max-queries-in-flight` at once, and the next
    /// chunk is read while this one is handed over. Returns what was read and where the time
    /// went.
    ///
    /// # Errors
    /// As [`History::open`], for any chunk.
    pub(crate) fn feed_stats(
        self,
        mut on_sample: impl FnMut(&Sample, SampleKind),
    ) -> anyhow::Result<FeedStats> {
        let progress = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {pos}/{len} queries ({per_sec}) {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        let range = self.range;
        let names = self.columns.len() as u64;
        let bands = if self.columns.iter().any(|c| c.band.is_some()) {
            BANDS
        } else {
            0
        };
        let mut steps = 0u64;
        let mut chunks = 0u64;
        let mut max_series = 0u64;
        let mut consuming = Duration::ZERO;
        let mut merging = Duration::ZERO;
        let this = &self;
        let bar = progress.as_ref();
        let result = std::thread::scope(|scope| -> anyhow::Result<()> {
            let fetch =
                |first: i64, last: i64| scope.spawn(move || this.read_chunk(first, last, bar));
            // The queries expected: those done, and a name's per chunk of `per` steps after
            // `end` (a split adds more).
            let expect = |end: i64, per: i64| {
                if let Some(bar) = bar {
                    let rest = (range.end - end).max(0) / range.step;
                    let more = (rest + per - 1) / per.max(1);
                    bar.set_length(bar.position() + names * more as u64);
                }
            };
            let mut per = FIRST_CHUNK_POINTS.min(CHUNK_POINTS);
            let last = (range.start + (per - 1) * range.step).min(range.end);
            expect(range.start - range.step, per);
            let mut pending =
                (range.start <= range.end).then(|| (range.start, last, fetch(range.start, last)));
            while let Some((first, end, handle)) = pending.take() {
                let answers = handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("a history reader thread panicked"))??;
                let t = std::time::Instant::now();
                let new_chunk = || Chunk {
                    bounds: Some((first, end)),
                    step: range.step,
                    cluster_label: this.cluster_label.clone(),
                    ..Chunk::default()
                };
                let mut chunk = new_chunk();
                let mut banded: Vec<Chunk> = (0..bands).map(|_| new_chunk()).collect();
                // Each chunk's points allocated once, at their count.
                let count = |kind: SampleKind| -> usize {
                    this.columns
                        .iter()
                        .zip(&answers)
                        .filter(|(c, _)| c.feeds(kind))
                        .flat_map(|(_, m)| m.iter().flat_map(|m| &m.result))
                        .map(|s| s.values.len())
                        .sum()
                };
                chunk.points.reserve_exact(count(SampleKind::Step));
                for (j, b) in banded.iter_mut().enumerate() {
                    b.points.reserve_exact(count(SampleKind::Peak(j)));
                }
                for (column, matrices) in this.columns.iter().zip(answers) {
                    for matrix in &matrices {
                        for (j, b) in banded.iter_mut().enumerate() {
                            if column.feeds(SampleKind::Peak(j)) {
                                b.add(this.family, &column.name, matrix);
                            }
                        }
                        if column.feeds(SampleKind::Step) {
                            chunk.add(this.family, &column.name, matrix);
                        }
                    }
                }
                merging += t.elapsed();
                // Series per step (a split query brings its series more than once).
                let chunk_steps = (end - first) / range.step + 1;
                let held =
                    chunk.points.len() + banded.iter().map(|b| b.points.len()).sum::<usize>();
                let series = (held as i64 + chunk_steps - 1) / chunk_steps;
                max_series = max_series.max(series as u64);
                per = (CHUNK_BUDGET / series.max(1))
                    .min(this.steps_answered.load(Ordering::Relaxed))
                    .clamp(1, CHUNK_POINTS);
                expect(end, per);
                if end < range.end {
                    let next = end + range.step;
                    let last = (next + (per - 1) * range.step).min(range.end);
                    pending = Some((next, last, fetch(next, last)));
                }
                let t = std::time::Instant::now();
                let mut spent = Duration::ZERO;
                chunk.feed(|sample| {
                    let c = std::time::Instant::now();
                    on_sample(sample, SampleKind::Step);
                    spent += c.elapsed();
                    steps += 1;
                });
                for (j, b) in banded.into_iter().enumerate() {
                    b.feed(|sample| {
                        let c = std::time::Instant::now();
                        on_sample(sample, SampleKind::Peak(j));
                        spent += c.elapsed();
                    });
                }
                merging += t.elapsed().saturating_sub(spent);
                consuming += spent;
                chunks += 1;
            }
            Ok(())
        });
        if let Some(bar) = progress {
            bar.finish_and_clear();
        }
        result?;
        let History {
            client,
            range,
            step: step_d,
            matchers,
            family,
            splits,
            summarizes,
            unread,
            ..
        } = self;
        let c = client.counters();
        let mut warnings = c.warnings.lines();
        warnings.extend(
            unread.summary().map(|s| {
                format!("DCGM fields {s} (docs/dcgm-compatibility.md lists what is read)")
            }),
        );
        for w in &warnings {
            eprintln!("truthscale: warning: {}: {w}", client.base);
        }
        let summary = format!(
            "prometheus {}: {}, {} steps with data, every {}{} from {} to {}{}",
            client.base,
            family.describe(),
            steps,
            humantime::format_duration(step_d),
            if summarizes {
                " (summaries of the raw samples in each)"
            } else {
                ""
            },
            rfc3339(range.start),
            rfc3339(range.end),
            if matchers.is_empty() {
                String::new()
            } else {
                format!(", {{{matchers}}}")
            }
        );
        Ok(FeedStats {
            summary,
            queries: c.queries,
            chunks,
            waiting_seconds: c.waiting.as_secs_f64(),
            decoding_seconds: (c.decoding + merging).as_secs_f64(),
            consuming_seconds: consuming.as_secs_f64(),
            max_series,
            retries: c.retries,
            splits: splits.into_inner(),
            warnings,
        })
    }

    /// One chunk's answers, one list per column in order: up to `in_flight` queries at once.
    fn read_chunk(
        &self,
        first: i64,
        last: i64,
        bar: Option<&indicatif::ProgressBar>,
    ) -> anyhow::Result<Vec<Vec<Matrix>>> {
        let next = AtomicUsize::new(0);
        let failed = std::sync::atomic::AtomicBool::new(false);
        let slots: Vec<std::sync::Mutex<Option<anyhow::Result<Vec<Matrix>>>>> = self
            .columns
            .iter()
            .map(|_| std::sync::Mutex::new(None))
            .collect();
        std::thread::scope(|scope| {
            for _ in 0..self.in_flight.min(self.columns.len()) {
                scope.spawn(|| {
                    while !failed.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(column) = self.columns.get(i) else {
                            break;
                        };
                        let query = self.column_query(column, &self.matchers);
                        let answer = self.read(&query, Some((column, &self.matchers)), first, last);
                        failed.fetch_or(answer.is_err(), Ordering::Relaxed);
                        if let Some(bar) = bar {
                            bar.inc(1);
                        }
                        *slots[i]
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(answer);
                    }
                });
            }
        });
        // A slot left empty was not read because another query failed, and that slot holds
        // the error returned here.
        let mut out = Vec::with_capacity(slots.len());
        for slot in slots {
            let answer = slot
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            out.push(answer.transpose()?.unwrap_or_default());
        }
        Ok(out)
    }
}

/// A time in milliseconds since the epoch as RFC 3339, to the second.
#[must_use]
pub(crate) fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Decode one `query_range` answer for the series `metric` (one of truthscale's own, or a
/// DCGM field) and hand `on_sample` the samples it maps to: the path an answer takes from the
/// HTTP body on, without the network. For the fuzz targets and tests.
///
/// # Errors
/// The body is not a successful Prometheus API matrix answer.
#[doc(hidden)]
pub fn decode_range_answer(
    metric: &str,
    body: &[u8],
    on_sample: impl FnMut(&Sample),
) -> anyhow::Result<()> {
    let (matrix, _warnings) = api::decode::<Matrix>("query_range", 200, body)?;
    if matrix.result_type != "matrix" {
        bail!(
            "query_range: expected a matrix, got {:?}",
            matrix.result_type
        );
    }
    let family = if metric.starts_with("truthscale_") {
        Family::Truthscale
    } else {
        Family::DcgmExporter
    };
    let mut chunk = Chunk::default();
    chunk.add(family, metric, &matrix);
    chunk.feed(on_sample);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::model::Reading;

    #[test]
    fn selectors() {
        assert_eq!(selector_matchers(None).unwrap(), "");
        assert_eq!(
            selector_matchers(Some(" {namespace=\"prod\",} ")).unwrap(),
            "namespace=\"prod\""
        );
        assert_eq!(
            selector_matchers(Some("pod=~\"llm-.*\"")).unwrap(),
            "pod=~\"llm-.*\""
        );
        assert!(selector_matchers(Some("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"}")).is_err());
        assert!(selector_matchers(Some("{gpu=\"0\"")).is_err());
        assert_eq!(series_query("X", ""), "X");
        assert_eq!(series_query("X", "a=\"b\""), "X{a=\"b\"}");
        assert_eq!(secs(1_700_000_000_005), "1700000000.005");
    }

    /// The regular expression of a split by series matches exactly its values, escaped for
    /// RE2 and for PromQL's string.
    #[test]
    fn split_matchers() {
        let values: Vec<String> = ["GPU-1", "a.b", "q\"x", "b\\s", "(x)|y"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(
            alternation(&values),
            r#"GPU-1|a\\.b|q\"x|b\\\\s|\\(x\\)\\|y"#
        );
        assert_eq!(join_matchers("", "uuid=\"\""), "uuid=\"\"");
        assert_eq!(join_matchers("a=\"b\"", "uuid=\"\""), "a=\"b\",uuid=\"\"");
        assert_eq!(label_name("cluster"), Ok("cluster".to_owned()));
        assert!(label_name("9x").is_err() && label_name("a-b").is_err() && label_name("").is_err());
    }

    type Labels<'a> = &'a [(&'a str, &'a str)];

    fn matrix(series: &[(Labels<'_>, &[(f64, &str)])]) -> Matrix {
        Matrix {
            result_type: "matrix".into(),
            result: series
                .iter()
                .map(|(labels, values)| RangeSeries {
                    metric: labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                    values: values
                        .iter()
                        .map(|(t, v)| (*t, PromValue(v.parse().ok())))
                        .collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn merge_per_timestamp_with_gaps_and_churn() {
        let mut c = Chunk::default();
        let g0: &[(&str, &str)] = &[("gpu", "0"), ("UUID", "GPU-a"), ("pod", "")];
        let g1a: &[(&str, &str)] = &[("gpu", "1"), ("pod", "a")];
        let g1b: &[(&str, &str)] = &[("gpu", "1"), ("pod", "b")];
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_DEV_GPU_UTIL",
            &matrix(&[
                (g0, &[(15.0, "100"), (30.0, "50"), (60.0, "NaN")]),
                (g1a, &[(15.0, "10")]),
                (g1b, &[(45.0, "20")]),
            ]),
        );
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            &matrix(&[(g0, &[(30.0, "0.25")])]),
        );
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_DEV_FB_USED",
            &matrix(&[(g0, &[(15.0, "100")])]),
        );
        c.add(
            Family::DcgmExporter,
            "dcgm_fi_dev_fb_free",
            &matrix(&[(g0, &[(15.0, "300")])]),
        );
        let mut s: Vec<Sample> = Vec::new();
        c.feed(|x| s.push(x.clone()));
        let times: Vec<i64> = s.iter().map(|s| s.taken.0).collect();
        assert_eq!(times, [15_000, 30_000, 45_000, 60_000]);
        assert_eq!(s[0].entities.len(), 2);
        let e = &s[0].entities[0];
        assert_eq!(e.readings.get(Field::ReportedUtil), Reading::Value(1.0));
        // Missing at this step: blank, not zero.
        assert_eq!(e.readings.get(Field::TensorActive), Reading::Blank);
        assert_eq!(
            e.readings.get(Field::MemTotalBytes),
            Reading::Value(400.0 * 1_048_576.0)
        );
        assert_eq!(
            s[1].entities[0].readings.get(Field::TensorActive),
            Reading::Value(0.25)
        );
        assert_eq!(s[1].entities.len(), 1);
        assert_eq!(
            s[2].entities[0].id.pod.as_ref().map(|p| p.pod.as_str()),
            Some("b")
        );
        // NaN is blank.
        assert_eq!(
            s[3].entities[0].readings.get(Field::ReportedUtil),
            Reading::Blank
        );
    }

    /// Own entities that come and go, and change order: each sample holds exactly its
    /// timestamp's entities, in the order of their first points, and nothing of an earlier
    /// timestamp (the samples are built in place of the previous ones).
    #[test]
    fn own_entities_that_come_and_go_carry_nothing_over() {
        let a: Labels<'_> = &[("gpu", "0"), ("uuid", "GPU-a"), ("pod", "a")];
        let b: Labels<'_> = &[("gpu", "1"), ("uuid", "GPU-b"), ("pod", "b")];
        let mut c = Chunk::default();
        c.add(
            Family::Truthscale,
            "truthscale_gpu_tensor_active_ratio",
            &matrix(&[
                (a, &[(1.0, "0.5"), (3.0, "0.6"), (5.0, "0.8"), (6.0, "0.1")]),
                (
                    b,
                    &[
                        (1.0, "0.1"),
                        (2.0, "0.2"),
                        (3.0, "0.3"),
                        (4.0, "0.4"),
                        (5.0, "0.9"),
                    ],
                ),
            ]),
        );
        c.add(
            Family::Truthscale,
            "truthscale_gpu_dram_active_ratio",
            &matrix(&[(a, &[(4.0, "0.7")]), (b, &[(6.0, "0.3")])]),
        );
        let mut got: Vec<Vec<(String, Reading, Reading)>> = Vec::new();
        c.feed(|s| {
            got.push(
                s.entities
                    .iter()
                    .map(|e| {
                        (
                            e.id.pod.as_ref().map(|p| p.pod.clone()).unwrap_or_default(),
                            e.readings.get(Field::TensorActive),
                            e.readings.get(Field::DramActive),
                        )
                    })
                    .collect(),
            );
        });
        let (v, blank) = (Reading::Value, Reading::Blank);
        let e = |p: &str, t, d| (p.to_owned(), t, d);
        assert_eq!(
            got,
            [
                vec![e("a", v(0.5), blank), e("b", v(0.1), blank)],
                vec![e("b", v(0.2), blank)],
                vec![e("a", v(0.6), blank), e("b", v(0.3), blank)],
                vec![e("b", v(0.4), blank), e("a", blank, v(0.7))],
                vec![e("a", v(0.8), blank), e("b", v(0.9), blank)],
                vec![e("a", v(0.1), blank), e("b", blank, v(0.3))],
            ]
        );
    }

    #[test]
    fn merging_on_the_grid_orders_as_the_sort_does() {
        let g0: Labels<'_> = &[("gpu", "0")];
        let g1: Labels<'_> = &[("gpu", "1")];
        let fill = |c: &mut Chunk| {
            c.add(
                Family::DcgmExporter,
                "DCGM_FI_DEV_GPU_UTIL",
                &matrix(&[
                    (g1, &[(15.0, "1"), (30.0, "2"), (60.0, "3")]),
                    (g0, &[(30.0, "4"), (45.0, "5")]),
                ]),
            );
            c.add(
                Family::DcgmExporter,
                "DCGM_FI_DEV_FB_USED",
                &matrix(&[(g0, &[(15.0, "6"), (60.0, "7")])]),
            );
        };
        let groups = |c: &mut Chunk| {
            let mut out: Vec<Vec<(i64, u32, f64)>> = Vec::new();
            c.for_each_time(|g| out.push(g.to_vec()));
            out
        };
        let grid = || Chunk {
            bounds: Some((15_000, 60_000)),
            step: 15_000,
            ..Chunk::default()
        };
        let mut merged = grid();
        let mut sorted = Chunk::default();
        fill(&mut merged);
        fill(&mut sorted);
        let (merged, sorted) = (groups(&mut merged), groups(&mut sorted));
        assert_eq!(merged, sorted);
        let times: Vec<Vec<i64>> = merged
            .iter()
            .map(|g| g.iter().map(|p| p.0).collect())
            .collect();
        assert_eq!(
            times,
            [
                vec![15_000, 15_000],
                vec![30_000, 30_000],
                vec![45_000],
                vec![60_000, 60_000]
            ]
        );
        // Series order within a timestamp: g1's GPU_UTIL (series 0), g0's (1), FB_USED (2).
        assert_eq!(merged[0], [(15_000, 0, 1.0), (15_000, 2, 6.0)]);
        // A point off the grid, or a series out of time order: the sort, the same groups.
        for extra in [(20_000, 2, 1.0), (15_000, 2, 1.0)] {
            let mut off = grid();
            fill(&mut off);
            off.points.push(extra);
            let mut reference = Chunk::default();
            fill(&mut reference);
            reference.points.push(extra);
            let got = groups(&mut off);
            assert_eq!(got, groups(&mut reference));
            assert!(got.iter().flatten().any(|p| *p == extra), "{extra:?}");
            assert!(got.windows(2).all(|w| w[0][0].0 < w[1][0].0));
        }
    }

    #[test]
    fn points_outside_the_chunk_are_dropped() {
        let mut c = Chunk {
            bounds: Some((15_000, 30_000)),
            ..Chunk::default()
        };
        let g0: Labels<'_> = &[("gpu", "0")];
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_DEV_GPU_UTIL",
            &matrix(&[(g0, &[(0.0, "1"), (15.0, "2"), (30.0, "3"), (45.0, "4")])]),
        );
        let mut times = Vec::new();
        c.feed(|s| times.push(s.taken.0));
        assert_eq!(times, [15_000, 30_000]);
    }

    #[test]
    fn own_metrics_map_back() {
        let mut c = Chunk::default();
        let l: &[(&str, &str)] = &[
            ("gpu", "3"),
            ("uuid", "GPU-x"),
            ("model", "Simulated H100 SXM"),
            ("mig_instance", "2"),
            ("mig_profile", "3g.40gb"),
            ("pod", "p"),
            ("namespace", "ns"),
            ("container", ""),
            ("node", "n1"),
        ];
        c.add(
            Family::Truthscale,
            "truthscale_gpu_sm_clock_hertz",
            &matrix(&[(l, &[(1.0, "1830000000")])]),
        );
        c.add(
            Family::Truthscale,
            "truthscale_gpu_tensor_active_ratio",
            &matrix(&[(l, &[(1.0, "0.5")])]),
        );
        let mut s: Vec<Sample> = Vec::new();
        c.feed(|x| s.push(x.clone()));
        assert_eq!(s.len(), 1);
        let e = &s[0].entities[0];
        assert!(e.simulated);
        assert_eq!(e.readings.get(Field::SmClockMhz), Reading::Value(1830.0));
        assert_eq!(e.readings.get(Field::TensorActive), Reading::Value(0.5));
        let want = EntityId {
            gpu: Some(3),
            uuid: Some("GPU-x".into()),
            model: Some("Simulated H100 SXM".into()),
            pci_bus_id: None,
            driver_version: None,
            mig: Some(MigId {
                gpu_instance: 2,
                compute_instance: None,
                profile: Some("3g.40gb".into()),
                ..MigId::default()
            }),
            pod: Some(PodRef {
                pod: "p".into(),
                namespace: Some("ns".into()),
                container: None,
            }),
            node: Some("n1".into()),
        };
        assert_eq!(e.id, want);
    }

    #[test]
    fn own_metrics_are_the_catalogs_readings() {
        // The families read back (those OWN_METRICS listed before the catalog held them),
        // each with its reading and the factor from the exported unit to the reading's.
        let own: Vec<(&str, Field, f64)> = own_names()
            .map(|n| {
                let r = own_metric(n).unwrap();
                (n, r.field, r.read_back(1.0))
            })
            .collect();
        assert_eq!(
            own,
            [
                (
                    catalog::GPU_REPORTED_UTILIZATION.name,
                    Field::ReportedUtil,
                    1.0
                ),
                (catalog::GPU_SM_ACTIVE.name, Field::SmActive, 1.0),
                (catalog::GPU_SM_OCCUPANCY.name, Field::SmOccupancy, 1.0),
                (catalog::GPU_TENSOR_ACTIVE.name, Field::TensorActive, 1.0),
                (catalog::GPU_DRAM_ACTIVE.name, Field::DramActive, 1.0),
                (catalog::GPU_MEMORY_USED.name, Field::MemUsedBytes, 1.0),
                (catalog::GPU_MEMORY_TOTAL.name, Field::MemTotalBytes, 1.0),
                (catalog::GPU_POWER.name, Field::PowerWatts, 1.0),
                (catalog::GPU_POWER_LIMIT.name, Field::PowerLimitWatts, 1.0),
                (catalog::GPU_SM_CLOCK.name, Field::SmClockMhz, 1e-6),
            ]
        );
        for id in NOT_READ_BACK {
            assert!(id.desc().raw.is_some(), "{}", id.desc().name);
        }
        let names = candidate_names();
        assert!(names.iter().any(|n| n == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"));
        assert!(names.iter().any(|n| n == "dcgm_gpu_utilization"));
        assert!(is_dcgm("DCGM_FI_DEV_FB_FREE") && !is_dcgm("DCGM_FI_DEV_XID_ERRORS"));
    }

    #[test]
    fn until_is_a_time_or_a_duration_ago() {
        let at = parse_until("2026-11-30T14:00:00Z").unwrap();
        assert_eq!(at.end_ms(0), 1_796_047_200_000);
        assert_eq!(parse_until("2h").unwrap().end_ms(10_000_000), 2_800_000);
        assert!(parse_until("yesterday").unwrap_err().contains("RFC 3339"));
    }

    /// `--bearer-token-file` is read bounded: `/dev/zero`, a FIFO, a directory and a file
    /// over 64 KiB are refused at once, naming the flag and the file.
    #[test]
    fn bearer_token_file_is_read_bounded() {
        use crate::bounds::{MAX_TOKEN_FILE, hostile};
        let dir = std::env::temp_dir().join(format!("ts-history-token-{}", std::process::id()));
        let t = std::time::Instant::now();
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            p: PrometheusArgs,
        }
        for (path, why) in hostile::files(&dir, MAX_TOKEN_FILE) {
            let args = <Cli as clap::Parser>::try_parse_from([
                "t".as_ref(),
                "--prometheus".as_ref(),
                "http://x".as_ref(),
                "--bearer-token-file".as_ref(),
                path.as_os_str(),
            ])
            .unwrap()
            .p;
            let err = authorization(&args, &[]).unwrap_err();
            assert_eq!(
                format!("{err:#}"),
                format!("cannot read --bearer-token-file {}: {why}", path.display())
            );
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            t.elapsed()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn basic_auth_never_needs_printing() {
        let args = PrometheusArgs {
            prometheus: Some("http://x".into()),
            since: None,
            step: None,
            selector: None,
            bearer_token_file: None,
            basic_auth: Some("user:pa:ss".into()),
            prometheus_timeout: None,
            deadline: None,
            max_requests_per_query: None,
            until: None,
            ca_file: None,
            max_queries_in_flight: None,
            prometheus_retries: None,
            cluster_label: None,
            scrape_interval: None,
            compression: None,
        };
        assert_eq!(
            authorization(&args, &[]).unwrap().as_deref(),
            Some("Basic dXNlcjpwYTpzcw==")
        );
    }

    #[test]
    fn a_coarse_step_summarises_each_reading_by_what_it_is() {
        let own = |n| Summary::of(Family::Truthscale, n);
        let dcgm = |n| Summary::of(Family::DcgmExporter, n);
        // Activity ratios: the mean for use, and their p99 for the sizing.
        assert_eq!(
            own("truthscale_gpu_tensor_active_ratio"),
            (Summary::Mean, true)
        );
        assert_eq!(
            own("truthscale_gpu_reported_utilization_ratio"),
            (Summary::Mean, true)
        );
        assert_eq!(dcgm("DCGM_FI_PROF_DRAM_ACTIVE"), (Summary::Mean, true));
        assert_eq!(dcgm("dcgm_gpu_utilization"), (Summary::Mean, true));
        // Memory: the step's peak; the free framebuffer its least, so used + free stays the
        // total.
        assert_eq!(
            own("truthscale_gpu_memory_used_bytes"),
            (Summary::Max, false)
        );
        assert_eq!(
            own("truthscale_gpu_memory_total_bytes"),
            (Summary::Max, false)
        );
        assert_eq!(dcgm("DCGM_FI_DEV_FB_USED"), (Summary::Max, false));
        assert_eq!(dcgm("DCGM_FI_DEV_FB_FREE"), (Summary::Min, false));
        assert_eq!(dcgm("DCGM_FI_DEV_FB_FREE_BYTES"), (Summary::Min, false));
        assert_eq!(dcgm("DCGM_FI_DEV_FB_USED_BYTES"), (Summary::Max, false));
        assert_eq!(
            dcgm("DCGM_FI_PROF_TENSOR_UTIL_RATIO"),
            (Summary::Mean, true)
        );
        // The cumulative cycle counters: their last value, whose deltas the deriver reads.
        assert_eq!(
            dcgm("DCGM_FI_PROF_MMA_CYCLES_ACTIVE_TOTAL"),
            (Summary::Last, false)
        );
        assert_eq!(
            dcgm("DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL"),
            (Summary::Last, false)
        );
        // A counter's last value, so differences between steps stay exact; bit fields too.
        assert_eq!(
            dcgm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
            (Summary::Last, false)
        );
        assert_eq!(
            dcgm("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
            (Summary::Last, false)
        );
        // Other gauges: the mean.
        assert_eq!(dcgm("DCGM_FI_DEV_POWER_USAGE"), (Summary::Mean, false));
        assert_eq!(dcgm("DCGM_FI_DEV_SM_CLOCK"), (Summary::Mean, false));
        // The query: the step's own window, so steps tile the range.
        assert_eq!(
            Summary::Band(truthscale_core::fleet::P99_BAND).wrap("m{a=\"b\"}", 300_000),
            "quantile_over_time(0.99, m{a=\"b\"}[299999ms])"
        );
        assert_eq!(
            Summary::Band(0).wrap("m", 60_000),
            "quantile_over_time(0.5, m[59999ms])"
        );
        assert_eq!(
            Summary::Band(3).wrap("m", 60_000),
            "max_over_time(m[59999ms])"
        );
        assert_eq!(
            Summary::Max.wrap("m", 120_000),
            "max_over_time(m[119999ms])"
        );
    }
}
