//! Feeding the samples: each chunk's answers merged into samples and handed over in time
//! order while the next chunk is read, and what the read cost ([`FeedStats`]).

use super::History;
use super::api::Matrix;
use super::columns::SampleKind;
use super::merge::Chunk;
use super::read::{CHUNK_POINTS, EMPTY_CHUNK_POINTS, FIRST_CHUNK_POINTS};
use crate::times::rfc3339;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::Duration;
use truthscale_core::fleet::BANDS;
use truthscale_core::model::Sample;

/// What reading the history cost, and where the time went.
#[derive(Debug, Clone, Default)]
pub(crate) struct FeedStats {
    /// One line saying what was read.
    pub summary: String,
    /// Requests answered: `query_range`, label and remote-read ones.
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
    /// Requests answered by remote-read (of `queries`).
    pub remote_reads: u64,
    /// Queries refused for a server limit and split into smaller ones.
    pub splits: u64,
    /// The answers' warnings (Prometheus', or Thanos' and Mimir's partial answers), capped
    /// and summarised: for the report's notes.
    pub warnings: Vec<String>,
    /// What truthscale itself found wrong with the answers (DCGM fields it does not read,
    /// points outside the times asked for): for the report's notes, in its own words.
    pub answer_notes: Vec<String>,
    /// Values of GPU series that are not finite (NaN, ±Inf) or no number at all, left
    /// blank.
    pub non_finite: u64,
    /// DCGM readings that were one of its blank sentinels, left blank.
    pub sentinels: u64,
    /// DCGM readings no GPU gives (negative free memory, a clock-event bitmask that is no
    /// whole number), left blank.
    pub impossible: u64,
}

impl History {
    /// Read the range in chunks, as [`History::feed_stats`], and return the one-line summary:
    /// `analyze --prometheus`'s read, with the holder pods' signals from cAdvisor's series
    /// ([`History::read_holders`]).
    ///
    /// # Errors
    /// As [`History::open`], for any chunk.
    pub(crate) fn feed(mut self, mut on_sample: impl FnMut(&Sample)) -> anyhow::Result<String> {
        self.read_holders();
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
    /// [`FIRST_CHUNK_POINTS`] steps; each next one holds about [`History::chunk_budget`]
    /// points for the number of series seen so far (at most [`CHUNK_POINTS`] steps, and no
    /// more than a split query was answered for), so memory does not grow with GPUs × steps.
    /// A chunk's queries (one per name) run up to `--max-queries-in-flight` at once, and the
    /// next chunk is read and merged on a thread of its own while this one is handed over.
    /// Returns what was read and where the time went.
    ///
    /// # Errors
    /// As [`History::open`], for any chunk.
    pub(crate) fn feed_stats(
        &self,
        mut on_sample: impl FnMut(&Sample, SampleKind),
    ) -> anyhow::Result<FeedStats> {
        let progress = std::io::stderr().is_terminal().then(progress_bar);
        let range = self.range;
        let names = self.columns.len() as u64;
        let bands = if self.columns.iter().any(|c| c.band.is_some()) {
            BANDS
        } else {
            0
        };
        let mut tally = Tally {
            units: self.units.clone(),
            ..Tally::default()
        };
        let this = self;
        let bar = progress.as_ref();
        let result = std::thread::scope(|scope| -> anyhow::Result<()> {
            let chunks = this.start_merging(scope, bar, bands);
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
            let mut pending = None;
            if range.start <= range.end {
                chunks.ask(range.start, last)?;
                pending = Some((range.start, last));
            }
            while let Some((first, end)) = pending.take() {
                let merged = chunks.next()?;
                tally.merging += merged.took;
                // Series per step (a split query brings its series more than once).
                let chunk_steps = (end - first) / range.step + 1;
                let held = merged.points();
                let series = (held as i64 + chunk_steps - 1) / chunk_steps;
                tally.max_series = tally.max_series.max(series as u64);
                per = if series == 0 {
                    // Nothing yet to size a chunk by (the window starts before the data):
                    // probe on in chunks a little longer each time, up to 40 steps (the
                    // chunk where the data begins holds at most 40 steps of every series).
                    (per * 2).min(EMPTY_CHUNK_POINTS)
                } else {
                    (this.chunk_budget() / series)
                        .min(this.steps_answered.load(Ordering::Relaxed))
                        .clamp(1, CHUNK_POINTS)
                };
                expect(end, per);
                // The next grid point, where one is left before the range's end (an end off
                // the grid lies within the last step: asking past it is a bad request).
                let next = end + range.step;
                if next <= range.end {
                    let last = (next + (per - 1) * range.step).min(range.end);
                    chunks.ask(next, last)?;
                    pending = Some((next, last));
                }
                let t = std::time::Instant::now();
                let spent = hand_over(merged, this.summarizes, &mut on_sample, &mut tally);
                tally.merging += t.elapsed().saturating_sub(spent);
                tally.consuming += spent;
                tally.chunks += 1;
            }
            Ok(())
        });
        if let Some(bar) = progress {
            bar.finish_and_clear();
        }
        result?;
        Ok(self.stats(&tally))
    }

    /// Start the thread that reads and merges each chunk asked of it (its queries sent to
    /// the reading threads, [`History::start_readers`], their answers merged,
    /// [`History::merge_chunk`]), while the chunk before is handed over on this one.
    fn start_merging<'scope, 'env>(
        &'env self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        bar: Option<&'env indicatif::ProgressBar>,
        bands: usize,
    ) -> Merging {
        let (asks, asked) = std::sync::mpsc::channel::<(i64, i64)>();
        let (done, merged) = std::sync::mpsc::channel();
        scope.spawn(move || {
            let readers = self.start_readers(scope, bar);
            for (first, end) in asked {
                let chunk = readers.submit(first, end).and_then(|()| {
                    let answers = readers.collect()?;
                    let t = std::time::Instant::now();
                    let mut merged = self.merge_chunk(first, end, bands, answers);
                    merged.took = t.elapsed();
                    Ok(merged)
                });
                let failed = chunk.is_err();
                if done.send(chunk).is_err() || failed {
                    break;
                }
            }
            // Every chunk is read: the remote-read spans are let go before the last ones
            // are handed over and analyzed.
            self.let_spans_go();
        });
        Merging { asks, merged }
    }

    /// One chunk's answers (one list per column, as [`super::readers::Readers::collect`] returns them)
    /// merged into the chunk of its step samples and, with `bands`, one chunk per band; each
    /// chunk's points allocated once, at their count.
    fn merge_chunk(&self, first: i64, end: i64, bands: usize, answers: Vec<Vec<Matrix>>) -> Merged {
        let new_chunk = || Chunk {
            bounds: Some((first, end)),
            step: self.range.step,
            cluster_label: self.cluster_label.clone(),
            ..Chunk::default()
        };
        let mut chunk = new_chunk();
        let mut banded: Vec<Chunk> = (0..bands).map(|_| new_chunk()).collect();
        let mut evidence = self.columns.iter().any(|c| c.evidence).then(new_chunk);
        // Each chunk's points allocated once, at their count.
        let count = |kind: SampleKind| -> usize {
            self.columns
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
        for (column, matrices) in self.columns.iter().zip(answers) {
            for matrix in &matrices {
                if let Some(h) = &column.holder {
                    chunk.add_holder(h.signal.field(), matrix);
                    continue;
                }
                if let Some(e) = evidence.as_mut().filter(|_| column.evidence) {
                    e.add(self.family, &column.name, matrix);
                    continue;
                }
                for (j, b) in banded.iter_mut().enumerate() {
                    if column.feeds(SampleKind::Peak(j)) {
                        let counted = b.outside;
                        b.add(self.family, &column.name, matrix);
                        if column.feeds(SampleKind::Step) {
                            // A shared column's points outside: counted once, by the steps.
                            b.outside = counted;
                        }
                    }
                }
                if column.feeds(SampleKind::Step) {
                    chunk.add(self.family, &column.name, matrix);
                }
            }
        }
        Merged {
            chunk,
            banded,
            evidence,
            took: Duration::ZERO,
        }
    }

    /// What the read cost, once every chunk is handed over: the counters of the client and of
    /// `tally`, the answers' warnings (printed), and the one-line summary.
    fn stats(&self, tally: &Tally) -> FeedStats {
        let step = self.step();
        let holders = self.holders_read();
        let History {
            client,
            range,
            matchers,
            family,
            splits,
            summarizes,
            unread,
            ..
        } = self;
        let c = client.counters();
        let warnings = c.warnings.lines();
        let mut unread = unread.clone();
        for (family, n) in &tally.ambiguous {
            *unread.ambiguous.entry(family.clone()).or_default() += n;
        }
        for (family, n) in &tally.unnamed {
            *unread.unnamed.entry(family.clone()).or_default() += n;
        }
        for (family, n) in &tally.disagreeing {
            *unread.disagreeing.entry(family.clone()).or_default() += n;
        }
        let mut answer_notes: Vec<String> = unread
            .summary()
            .map(|s| format!("DCGM fields {s} (docs/dcgm-compatibility.md lists what is read)"))
            .into_iter()
            .collect();
        // Points answered outside the times asked for: left out, said so.
        let outside = tally.outside + self.outside.load(Ordering::Relaxed);
        answer_notes.extend(outside_warning(outside));
        for w in warnings.iter().chain(&answer_notes) {
            crate::stdout::say!("truthscale: warning: {}: {w}", client.base);
        }
        let summary = format!(
            "prometheus {}: {}, {} steps with data, every {}{} from {} to {}{}{holders}",
            client.base,
            family.describe(),
            tally.steps,
            humantime::format_duration(step),
            if *summarizes {
                " (summaries of the raw samples in each)"
            } else {
                ""
            },
            rfc3339(range.covered_from()),
            rfc3339(range.end),
            if matchers.is_empty() {
                String::new()
            } else {
                format!(", {{{matchers}}}")
            }
        );
        FeedStats {
            summary,
            queries: c.queries,
            chunks: tally.chunks,
            waiting_seconds: c.waiting.as_secs_f64(),
            decoding_seconds: (c.decoding + tally.merging).as_secs_f64(),
            consuming_seconds: tally.consuming.as_secs_f64(),
            max_series: tally.max_series,
            retries: c.retries,
            remote_reads: c.remote_reads,
            splits: splits.load(std::sync::atomic::Ordering::Relaxed),
            warnings,
            answer_notes,
            non_finite: tally.non_finite,
            sentinels: tally.sentinels,
            impossible: tally.impossible,
        }
    }
}

/// The warning on `outside` points answered outside the times asked for, when any.
pub(super) fn outside_warning(outside: u64) -> Option<String> {
    (outside > 0).then(|| {
        format!(
            "{outside} points of the answers lay outside the time range asked for and were left out, not read (Prometheus answers none there: a compatible server or a proxy in front of it did)"
        )
    })
}

/// The thread that reads and merges the chunks ([`History::start_merging`]): a chunk asked
/// of it, and the chunks merged, in the order asked.
struct Merging {
    asks: std::sync::mpsc::Sender<(i64, i64)>,
    merged: std::sync::mpsc::Receiver<anyhow::Result<Merged>>,
}

/// A chunk's step samples, its bands', its units' evidence ([`Column::evidence`]) and the
/// time merging them took.
struct Merged {
    chunk: Chunk,
    banded: Vec<Chunk>,
    evidence: Option<Chunk>,
    took: Duration,
}

impl Merged {
    /// The points held.
    fn points(&self) -> usize {
        let all = std::iter::once(&self.chunk)
            .chain(&self.banded)
            .chain(&self.evidence);
        all.map(|c| c.points.len()).sum()
    }
}

impl Merging {
    /// Read and merge the chunk `[first, last]`.
    fn ask(&self, first: i64, last: i64) -> anyhow::Result<()> {
        self.asks
            .send((first, last))
            .map_err(|_| anyhow::anyhow!("the history's merging thread ended"))
    }

    /// The next chunk asked, merged.
    fn next(&self) -> anyhow::Result<Merged> {
        self.merged
            .recv()
            .map_err(|_| anyhow::anyhow!("the history's merging thread ended"))?
    }
}

/// What [`History::feed_stats`] counts as it goes.
#[derive(Debug, Default)]
struct Tally {
    /// Step samples handed over.
    steps: u64,
    /// Chunks read.
    chunks: u64,
    /// Largest number of series one chunk held.
    max_series: u64,
    /// Time spent in the caller's hand-over function.
    consuming: Duration,
    /// Time spent merging the answers into samples.
    merging: Duration,
    /// DCGM readings refused for an ambiguous unit, by family (warned with the rest).
    ambiguous: BTreeMap<String, u64>,
    /// DCGM readings of series that name no GPU, by family (warned with the rest).
    unnamed: BTreeMap<String, u64>,
    /// DCGM readings that disagreed with another series of the same GPU, by family (warned
    /// with the rest).
    disagreeing: BTreeMap<String, u64>,
    /// The units decided so far (percent or 0..1), carried from chunk to chunk: decided
    /// once for the read, so that where chunks start never changes a value.
    units: truthscale_core::parse::names::Units,
    /// Values of GPU series that are not finite, left blank.
    non_finite: u64,
    /// DCGM readings that were one of its blank sentinels, left blank.
    sentinels: u64,
    /// DCGM readings no GPU gives, left blank.
    impossible: u64,
    /// Points outside the chunks' times, left out.
    outside: u64,
}

/// The progress bar of a read on a terminal: queries done of the total, the rate.
fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} queries ({per_sec}) {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// Hand a chunk's step samples to `on_sample` in time order (counting them in `steps`),
/// then each band's peak samples; returns the time spent in `on_sample`. The units'
/// evidence (each step's largest raw sample) decides first; the samples are the means of
/// the raw ones when `summarized`.
fn hand_over(
    merged: Merged,
    summarized: bool,
    on_sample: &mut impl FnMut(&Sample, SampleKind),
    tally: &mut Tally,
) -> Duration {
    let Merged {
        chunk,
        banded,
        evidence,
        ..
    } = merged;
    if let Some(e) = evidence {
        // Raw samples' evidence: what it leaves undecided is refused at the samples.
        tally.units.set_means(false);
        tally.outside += e.feed(&mut tally.units, |_| {}).outside;
    }
    tally.units.set_means(summarized);
    let mut spent = Duration::ZERO;
    let steps = &mut tally.steps;
    let refused = chunk.feed(&mut tally.units, |sample| {
        let c = std::time::Instant::now();
        on_sample(sample, SampleKind::Step);
        spent += c.elapsed();
        *steps += 1;
    });
    // A band's samples are the same readings' peaks: their blanks counted once, from the
    // steps. Their queries' points outside are their own (a shared column's are counted by
    // the steps alone, `History::merge_chunk`).
    for (j, b) in banded.into_iter().enumerate() {
        let peaks = b.feed(&mut tally.units, |sample| {
            let c = std::time::Instant::now();
            on_sample(sample, SampleKind::Peak(j));
            spent += c.elapsed();
        });
        tally.outside += peaks.outside;
    }
    tally.non_finite += refused.non_finite;
    tally.outside += refused.outside;
    tally.sentinels += refused.sentinels;
    tally.impossible += refused.impossible;
    for (family, n) in refused.ambiguous {
        *tally.ambiguous.entry(family).or_default() += n;
    }
    for (family, n) in refused.unnamed {
        *tally.unnamed.entry(family).or_default() += n;
    }
    for (family, n) in refused.disagreeing {
        *tally.disagreeing.entry(family).or_default() += n;
    }
    spent
}
