//! Reading the range: chunks of at most [`CHUNK_POINTS`] steps, each chunk's queries in
//! flight together, and a query the server refuses for a limit split in time, then by
//! series, within one budget of requests.

use super::History;
use super::api::{Budget, GetError, Limit, Matrix, PromValue};
use super::columns::Column;
use super::query::{Range, alternation, join_matchers, secs, series_query};
use anyhow::bail;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Steps per `query_range` request: Prometheus refuses more than 11 000 points per series.
pub(crate) const CHUNK_POINTS: i64 = 10_000;
/// Steps of the first chunk, before the number of series is known: few, so that even a
/// fleet of 10 000 GPUs holds no more than [`CHUNK_BUDGET`] points in it (50 000 series ×
/// 10 steps is a third of the budget); each next chunk is sized from the series seen.
pub(crate) const FIRST_CHUNK_POINTS: i64 = 10;
/// The longest chunk read while no series has been seen yet (the window starts before the
/// data): the chunk where the data begins stays short, whatever the budget per series.
pub(crate) const EMPTY_CHUNK_POINTS: i64 = 40;
/// Points (steps × series, all names together) one chunk may hold: after the first chunk,
/// the chunk length is this over the number of series seen, so memory stays bounded
/// whatever the number of GPUs.
pub(crate) const CHUNK_BUDGET: i64 = 1_500_000;
const _: () = assert!(CHUNK_POINTS <= 11_000, "Prometheus' limit per series");

/// The labels a metric's series are split by when one step of all of them is refused: the
/// first with two values or more in the range.
const SPLIT_LABELS: &[&str] = &["uuid", "UUID", "node", "Hostname", "instance", "gpu", "pod"];

/// One series of [`History::series_by_step`]: its labels, and its values by step index.
pub(crate) type StepSeries = (BTreeMap<String, String>, Vec<(usize, f64)>);

impl History {
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
    pub(super) fn read(
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
    /// most [`CHUNK_POINTS`] steps: each series' labels and its values by step index (NaN,
    /// infinities and values that are no number kept, for the reader to refuse or leave
    /// out; points outside the times asked for counted for the read's warnings,
    /// [`by_step`]). For attributes of pods (kube-state-metrics' requests and labels) beside
    /// the GPU series; the selector does not apply, but for what the query itself holds
    /// ([`History::pod_selector`]).
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
                let Matrix { result, values, .. } = matrix;
                for series in result {
                    let into = out.entry(series.metric).or_default();
                    let values = values.get(series.values).unwrap_or_default();
                    let outside = by_step(range, (first, last), values, into);
                    self.outside.fetch_add(outside, Ordering::Relaxed);
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

    /// The label sets of the series a PromQL `query` gives at the range's last step alone
    /// (one sample a series: the attributes of what is there at the end, at the cost of one
    /// small query, whatever the range).
    ///
    /// # Errors
    /// As the GPU series' reads.
    pub(crate) fn series_at_end(
        &self,
        query: &str,
    ) -> anyhow::Result<Vec<BTreeMap<String, String>>> {
        let end = self.range.end;
        let mut out = Vec::new();
        for matrix in self.read(query, None, end, end)? {
            out.extend(matrix.result.into_iter().map(|s| s.metric));
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

/// One series' `values` from a query over `[first, last]` of `range`, by step index,
/// appended to `into`: NaN and infinities too (a value that is no number is NaN,
/// [`PromValue`]), for each reader to refuse or leave out (a GPU request that is not a
/// number is refused, never dropped in silence). A point outside `[first, last]` (a hostile
/// or confused answer; Prometheus answers none) is no step asked for: left out, and
/// counted in what is returned.
pub(super) fn by_step(
    range: Range,
    (first, last): (i64, i64),
    values: &[(f64, PromValue)],
    into: &mut Vec<(usize, f64)>,
) -> u64 {
    let mut outside = 0;
    for &(t, PromValue(v)) in values {
        let ms = super::merge::millis(t);
        let step = ms
            .checked_sub(range.start)
            .filter(|_| (first..=last).contains(&ms))
            .and_then(|d| usize::try_from(d / range.step).ok());
        match step {
            Some(step) => into.push((step, v)),
            None => outside += 1,
        }
    }
    outside
}
