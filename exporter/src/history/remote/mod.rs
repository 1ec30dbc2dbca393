//! Reading a plain series by Prometheus' remote-read API, its raw samples streamed as
//! XOR chunks, and evaluating it at each step here exactly as the server's range query
//! would (ADR 0008): the server skips PromQL's evaluation and the JSON, and truthscale
//! skips parsing it. Used where the server shows how it evaluates (`--remote-read`);
//! `query_range` otherwise, and for every query that is more than a series' name and
//! matchers.

mod wire;

use super::History;
use super::api::{Budget, Client, GetError, Matrix, PromValue, RangeSeries};
use super::args::RemoteRead;
use super::columns::Column;
use super::read::CHUNK_BUDGET;
use super::selector::Matcher;
use anyhow::{Context, bail};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use wire::LabelMatcher;

/// The path of the remote-read API.
const READ_PATH: &str = "/api/v1/read";
/// A stale marker's bits (Prometheus' `value.StaleNaN`): the series ended there.
const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// How the server evaluates a plain selector in a range query, as it says itself: what
/// lets its raw samples be evaluated here exactly as it would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Evaluation {
    /// `--query.lookback-delta`, in milliseconds: how far back a step takes the newest
    /// sample from.
    pub(super) lookback: i64,
    /// Prometheus 3 leaves a sample exactly `lookback` before a step out (the lookback is
    /// left-open); Prometheus 2 takes it.
    pub(super) left_open: bool,
    /// The server's version, for the log.
    pub(super) version: String,
    /// `--selector`'s matchers, for the requests.
    pub(super) matchers: Vec<Matcher>,
}

/// `/api/v1/status/buildinfo`'s `data`.
#[derive(serde::Deserialize)]
struct BuildInfo {
    version: String,
    /// Set by servers that serve Prometheus' API without being Prometheus (Mimir).
    application: Option<String>,
}

/// `/api/v1/status/config`'s `data`.
#[derive(serde::Deserialize)]
struct Config {
    yaml: String,
}

/// What the server says of itself, or why its raw samples cannot be evaluated here as it
/// would: not Prometheus 2.13 or later (the first with streamed chunks), no lookback flag
/// listed, or external labels (which remote-read adds to every series and a range query
/// does not).
fn learn(client: &Client, matchers: &str) -> Result<Evaluation, String> {
    let info: BuildInfo = client
        .get_once("/api/v1/status/buildinfo")
        .map_err(|e| format!("{e:#}"))?;
    if let Some(app) = info.application.filter(|a| a != "Prometheus") {
        return Err(format!("the server is {app}, not Prometheus"));
    }
    let version = info.version;
    let mut parts = version
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u32>().ok());
    let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next()) else {
        return Err(format!(
            "the server's version {version:?} is not Prometheus'"
        ));
    };
    if (major, minor) < (2, 13) {
        return Err(format!(
            "the server's version {version} is older than Prometheus 2.13, the first to stream chunks"
        ));
    }
    let lookback = lookback(client)?;
    let config: Config = client
        .get_once("/api/v1/status/config")
        .map_err(|e| format!("{e:#}"))?;
    if has_external_labels(&config.yaml) {
        return Err(
            "the server has external labels, which remote-read adds to every series".into(),
        );
    }
    if reads_remote_stores(&config.yaml) {
        return Err(
            "the server reads remote_read stores, whose partial answers remote-read cannot report (the server keeps their warnings in its own log; a range query returns them)".into(),
        );
    }
    let matchers =
        super::selector::matchers(matchers).ok_or("--selector is not a list of label matchers")?;
    Ok(Evaluation {
        lookback,
        left_open: major >= 3,
        version,
        matchers,
    })
}

/// Whether a Prometheus configuration sets external labels: the global section's key, not a
/// `remote_read` entry's `filter_external_labels`.
fn has_external_labels(yaml: &str) -> bool {
    yaml.lines()
        .any(|l| l.trim_start().starts_with("external_labels:"))
}

/// Whether a Prometheus configuration reads remote stores (a top-level `remote_read` with
/// an entry): their failures reach a range query's answer as warnings, never a streamed
/// remote-read's.
fn reads_remote_stores(yaml: &str) -> bool {
    yaml.lines().any(|l| {
        l.strip_prefix("remote_read:")
            .is_some_and(|rest| !matches!(rest.trim(), "[]" | "null" | "~"))
    })
}

/// How far back Prometheus looks for a series' sample at an instant (milliseconds), from its
/// `query.lookback-delta` flag.
///
/// # Errors
/// The server lists no such flag (Thanos and Mimir list none), or it is no duration, in
/// words.
pub(super) fn lookback(client: &Client) -> Result<i64, String> {
    let flags: BTreeMap<String, String> = client
        .get_once("/api/v1/status/flags")
        .map_err(|e| format!("{e:#}"))?;
    let lookback = flags
        .get("query.lookback-delta")
        .ok_or("the server lists no query.lookback-delta flag")?;
    let lookback = prometheus_duration(lookback).ok_or_else(|| {
        format!("the server's query.lookback-delta {lookback:?} is not a duration")
    })?;
    Ok(engine_lookback(lookback))
}

/// The lookback Prometheus' engine evaluates with, from its flag (milliseconds): a flag of 0
/// is its default, 5 minutes.
fn engine_lookback(flag_ms: i64) -> i64 {
    if flag_ms <= 0 { 300_000 } else { flag_ms }
}

/// A duration as Prometheus writes one (`5m`, `1h30m`, `90s`, `500ms`; units y, w, d, h,
/// m, s, ms), in milliseconds.
fn prometheus_duration(text: &str) -> Option<i64> {
    let mut rest = text.trim();
    let mut total = 0i64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let ms = match &rest[..unit] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "y" => 365 * 86_400_000,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(ms)?)?;
        rest = &rest[unit..];
    }
    Some(total)
}

impl History {
    /// Decide how the GPU series are read, as `--remote-read` says: by remote-read where
    /// the server shows how it evaluates (`auto`; `always` fails naming why not), by
    /// `query_range` otherwise.
    ///
    /// # Errors
    /// `--remote-read always` and the server does not show how it evaluates.
    pub(super) fn choose_remote_read(&mut self, when: RemoteRead) -> anyhow::Result<()> {
        if when == RemoteRead::Never {
            return Ok(());
        }
        match learn(&self.client, &self.matchers) {
            Ok(e) => {
                tracing::info!(
                    "reading the GPU series by remote-read from Prometheus {} (lookback {} ms{})",
                    e.version,
                    e.lookback,
                    if e.left_open { ", left-open" } else { "" }
                );
                self.remote = Some(e);
            }
            Err(why) if when == RemoteRead::Always => {
                bail!("--remote-read always: {}: {why}", self.client.base)
            }
            Err(why) => tracing::info!("reading the GPU series by query_range: {why}"),
        }
        Ok(())
    }

    /// `column`'s answer over `[first, last]` by remote-read, where it is used and the
    /// column is a plain series: `None` otherwise, or when a remote-read failed under
    /// `auto` (said once; `query_range` from then on).
    pub(super) fn read_remote(
        &self,
        column: &Column,
        first: i64,
        last: i64,
    ) -> Option<anyhow::Result<Matrix>> {
        use std::sync::atomic::Ordering;
        let e = self.remote_in_use()?;
        if column.summary.is_some() || column.holder.is_some() {
            return None;
        }
        let budget = Budget::new(self.requests_per_query);
        match self.remote_matrix(e, &column.name, first, last, &budget) {
            Ok(m) => Some(Ok(m)),
            Err(err) if self.remote_when == RemoteRead::Always => Some(Err(err.into())),
            Err(err) => {
                if !self.remote_failed.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "remote-read failed, reading by query_range from now on: {:#}",
                        anyhow::Error::from(err)
                    );
                }
                None
            }
        }
    }

    /// The series `name{--selector}` over `[first, last]` at the range's step, as the
    /// server's range query would answer them: from the span held for `name` where it
    /// covers them, else from a new span read by one remote-read request, [`SPAN_CHUNKS`]
    /// times as long as `[first, last]` (to the range's end), then held in its place.
    fn remote_matrix(
        &self,
        e: &Evaluation,
        name: &str,
        first: i64,
        last: i64,
        budget: &Budget,
    ) -> Result<Matrix, GetError> {
        let step = self.range.step;
        let held = self.held().remove(name);
        let span = match held {
            Some(span) if span.first <= first && last <= span.last => span,
            passed => {
                // The span before is let go before the next is read.
                drop(passed);
                let long = first.saturating_add(SPAN_CHUNKS.saturating_mul(last - first + step));
                let end = (long - step).min(self.range.end).max(last);
                self.read_span(e, name, first, end, budget)?
            }
        };
        let started = std::time::Instant::now();
        let matrix = span.evaluate((first, last, step), e);
        self.client.counters().decoding += started.elapsed();
        self.held().insert(name.to_owned(), span);
        matrix.map_err(GetError::Other)
    }

    /// The points a chunk of the feed may hold: a quarter of [`CHUNK_BUDGET`] where the
    /// series are read by remote-read, whose requests each read [`SPAN_CHUNKS`] chunks ahead
    /// (so the smaller chunks, which hold less at once, cost the server no more requests),
    /// all of it otherwise.
    pub(super) fn chunk_budget(&self) -> i64 {
        if self.remote_in_use().is_some() {
            CHUNK_BUDGET / 4
        } else {
            CHUNK_BUDGET
        }
    }

    /// How the server evaluates, while the plain series are read by remote-read: `None`
    /// where it is not used, or after a remote-read failed under `auto`.
    fn remote_in_use(&self) -> Option<&Evaluation> {
        use std::sync::atomic::Ordering;
        self.remote
            .as_ref()
            .filter(|_| !self.remote_failed.load(Ordering::Relaxed))
    }

    /// Let every span held go (the feed has read its last chunk).
    pub(super) fn let_spans_go(&self) {
        self.held().clear();
    }

    /// The spans held, whatever a panicking thread left.
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Span>> {
        self.remote_held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The series `name{--selector}` with samples in `[first - lookback, last]`, as one
    /// remote-read request gives them: their chunks, not decoded.
    fn read_span(
        &self,
        e: &Evaluation,
        name: &str,
        first: i64,
        last: i64,
        budget: &Budget,
    ) -> Result<Span, GetError> {
        let request = request(e, name, first.saturating_sub(e.lookback), last);
        self.client
            .post_read(READ_PATH, &request, Some(budget), |body| {
                let mut span = Span::new(first, last);
                wire::frames(body, |frame| {
                    for s in frame.chunked_series {
                        span.add(s)?;
                    }
                    Ok(())
                })?;
                tracing::debug!(
                    target: "truthscale::prometheus",
                    "{name}: {} series, {} bytes of chunks and labels held for the steps to {last}",
                    span.series.len(),
                    span.data.len() + span.text.len()
                );
                Ok(span)
            })
    }
}

/// How many feed chunks one remote-read request reads ahead (16 chunks of the full
/// [`CHUNK_BUDGET`]): the server looks each series up once for them all (its cost is mostly
/// per series and request, not per sample), and the samples wait here still compressed (a
/// few bytes each).
const SPAN_CHUNKS: i64 = 64;

/// One name's series over the steps `[first, last]` as remote-read gave them, still
/// compressed: each chunk of the feed within it is evaluated from it.
#[derive(Debug)]
pub(super) struct Span {
    first: i64,
    last: i64,
    /// Each series' labels (a range of `labels`) and chunks (a range of `chunks`), in the
    /// answer's order.
    series: Vec<(Range<usize>, Range<usize>)>,
    /// Every series' labels: where each name and value lie in `text` (the name `a..b`, the
    /// value `b..c`), one buffer for them all rather than two strings a label.
    labels: Vec<[usize; 3]>,
    text: String,
    /// Every series' chunks: their first and last times (ms) and where their bytes lie in
    /// `data` (one buffer for them all, not one allocation a chunk).
    chunks: Vec<(i64, i64, Range<usize>)>,
    data: Vec<u8>,
}

impl Span {
    /// An empty span over the steps `[first, last]`.
    fn new(first: i64, last: i64) -> Span {
        Span {
            first,
            last,
            series: Vec::new(),
            labels: Vec::new(),
            text: String::new(),
            chunks: Vec::new(),
            data: Vec::new(),
        }
    }

    /// Take one streamed series (or the next part of the last one).
    fn add(&mut self, s: wire::ChunkedSeries) -> anyhow::Result<()> {
        if let Some(c) = s.chunks.iter().find(|c| c.r#type != wire::XOR) {
            bail!("a chunk of encoding {} (not XOR: a histogram?)", c.r#type);
        }
        let from = self.chunks.len();
        for c in s.chunks {
            let at = self.data.len();
            self.data.extend_from_slice(&c.data);
            self.chunks
                .push((c.min_time_ms, c.max_time_ms, at..self.data.len()));
        }
        let to = self.chunks.len();
        let same = self.series.last().is_some_and(|(labels, _)| {
            self.labels_of(labels.clone())
                .eq(s.labels.iter().map(|l| (l.name.as_str(), l.value.as_str())))
        });
        match self.series.last_mut() {
            Some((_, chunks)) if same => chunks.end = to,
            _ => {
                let first = self.labels.len();
                for l in &s.labels {
                    let a = self.text.len();
                    self.text.push_str(&l.name);
                    let b = self.text.len();
                    self.text.push_str(&l.value);
                    self.labels.push([a, b, self.text.len()]);
                }
                self.series.push((first..self.labels.len(), from..to));
            }
        }
        Ok(())
    }

    /// The labels in `range` of `labels`, as names and values.
    fn labels_of(&self, range: Range<usize>) -> impl Iterator<Item = (&str, &str)> {
        let text = &self.text;
        self.labels[range].iter().map(move |&[a, b, c]| {
            (
                text.get(a..b).unwrap_or_default(),
                text.get(b..c).unwrap_or_default(),
            )
        })
    }

    /// Its series at the steps `first, first + step, … ≤ last` (within the span), as the
    /// server's range query would answer them.
    ///
    /// # Errors
    /// A chunk cut short or malformed.
    fn evaluate(&self, steps: (i64, i64, i64), e: &Evaluation) -> anyhow::Result<Matrix> {
        let mut matrix = Series::default();
        // No step takes a sample older than the lookback before the first step, or after
        // the last.
        let (first, last, step) = steps;
        let needed = (first.saturating_sub(e.lookback), last);
        // Most series with a chunk in range have a value at each step: the values are
        // allocated once, for those series alone (an answer may list series without one),
        // and never more than a chunk of the feed holds up front.
        let each = usize::try_from((last - first) / step.max(1) + 1).unwrap_or(0);
        let overlaps =
            |(min, max, _): &(i64, i64, Range<usize>)| *max >= needed.0 && *min <= needed.1;
        let with_data = self
            .series
            .iter()
            .filter(|(_, c)| self.chunks[c.clone()].iter().any(overlaps))
            .count();
        let _ = matrix.values.try_reserve(
            with_data
                .saturating_mul(each)
                .min(usize::try_from(CHUNK_BUDGET).unwrap_or(0)),
        );
        let _ = matrix.result.try_reserve(with_data);
        for (labels, chunks) in &self.series {
            for chunk @ (_, _, bytes) in &self.chunks[chunks.clone()] {
                if overlaps(chunk) {
                    wire::xor_samples(&self.data[bytes.clone()], needed, &mut matrix.samples)
                        .with_context(|| {
                            let series: Vec<String> = self
                                .labels_of(labels.clone())
                                .map(|(n, v)| format!("{n}={v:?}"))
                                .collect();
                            format!("remote-read: series {{{}}}", series.join(","))
                        })?;
                }
            }
            matrix.flush(steps, e, || {
                self.labels_of(labels.clone())
                    .map(|(n, v)| (n.to_owned(), v.to_owned()))
                    .collect()
            });
        }
        Ok(matrix.into_matrix())
    }
}

/// The remote-read request for `name` and the selector over `[start, end]` (ms), as its
/// snappy block.
fn request(e: &Evaluation, name: &str, start: i64, end: i64) -> Vec<u8> {
    use prost::Message as _;
    let op = |op: &str| match op {
        "!=" => 1,
        "=~" => 2,
        "!~" => 3,
        _ => 0,
    };
    let mut matchers = vec![LabelMatcher {
        r#type: 0,
        name: "__name__".into(),
        value: name.into(),
    }];
    matchers.extend(e.matchers.iter().map(|m| LabelMatcher {
        r#type: op(m.op),
        name: m.name.clone(),
        value: m.value.clone(),
    }));
    let req = wire::ReadRequest {
        queries: vec![wire::Query {
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            matchers,
        }],
        accepted_response_types: vec![wire::STREAMED_XOR_CHUNKS],
    };
    wire::snappy_literal(&req.encode_to_vec())
}

/// A matrix built series by series: the samples of the series being evaluated, and the
/// series done.
#[derive(Default)]
struct Series {
    samples: Vec<(i64, f64)>,
    result: Vec<RangeSeries>,
    values: Vec<(f64, PromValue)>,
}

impl Series {
    /// The series being read evaluated at each step, with the labels `metric` gives; left
    /// out, as a range query leaves it, when no step has a value.
    fn flush(
        &mut self,
        steps: (i64, i64, i64),
        e: &Evaluation,
        metric: impl FnOnce() -> BTreeMap<String, String>,
    ) {
        let mut samples = std::mem::take(&mut self.samples);
        if !samples.windows(2).all(|w| w[0].0 < w[1].0) {
            // Overlapping chunks: time order, the later of two at one time kept.
            samples.sort_by_key(|s| s.0);
            samples.reverse();
            samples.dedup_by_key(|s| s.0);
            samples.reverse();
        }
        let start = self.values.len();
        evaluate(&samples, steps, e, &mut self.values);
        if self.values.len() > start {
            self.result.push(RangeSeries {
                metric: metric(),
                values: start..self.values.len(),
            });
        }
        samples.clear();
        self.samples = samples;
    }

    fn into_matrix(self) -> Matrix {
        Matrix {
            result_type: "matrix".into(),
            result: self.result,
            values: self.values,
        }
    }
}

/// The values a range query of one series gives at `first, first + step, … ≤ last` from
/// its raw `samples` (time order): at each step the newest sample at or before it, if
/// within the lookback and not a stale marker.
fn evaluate(
    samples: &[(i64, f64)],
    (first, last, step): (i64, i64, i64),
    e: &Evaluation,
    out: &mut Vec<(f64, PromValue)>,
) {
    let mut next = 0;
    let mut t = first;
    while t <= last {
        while next < samples.len() && samples[next].0 <= t {
            next += 1;
        }
        if let Some(&(at, v)) = next.checked_sub(1).and_then(|i| samples.get(i)) {
            let oldest = t - e.lookback;
            let within = if e.left_open {
                at > oldest
            } else {
                at >= oldest
            };
            if within && v.to_bits() != STALE_NAN {
                out.push((t as f64 / 1000.0, PromValue(v)));
            }
        }
        t += step;
    }
}

pub(crate) use wire::StreamEnded;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use wire::frame;

/// A streamed remote-read answer read as a read does (its frames, chunks and steps: every
/// minute over ten hours from time 0, a Prometheus 2 lookback of five minutes): the series
/// and values it gives. Panics when a series' values are not at increasing steps on the
/// grid. For the fuzz target.
///
/// # Errors
/// The answer's frames or chunks are malformed.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn evaluate_answer(body: &[u8]) -> anyhow::Result<(usize, usize)> {
    let e = Evaluation {
        lookback: 300_000,
        left_open: false,
        version: String::new(),
        matchers: Vec::new(),
    };
    let steps = (0, 36_000_000, 60_000);
    let mut span = Span::new(steps.0, steps.1);
    wire::frames(body, |frame| {
        for s in frame.chunked_series {
            span.add(s)?;
        }
        Ok(())
    })?;
    let m = span.evaluate(steps, &e)?;
    for s in &m.result {
        let v = m.values_of(s);
        assert!(!v.is_empty(), "a series without values is left out");
        assert!(v.windows(2).all(|w| w[0].0 < w[1].0), "steps go forward");
        assert!(
            v.iter().all(|(t, _)| (t * 1000.0) % 60_000.0 == 0.0),
            "on the grid"
        );
    }
    Ok((m.result.len(), m.values.len()))
}

#[cfg(test)]
mod tests;
