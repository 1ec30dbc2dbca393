//! Every note the report adds to the analysis' own, in one place: how each step was read
//! (summarised, combined), the readings left out, the clusters pooled, and how the history
//! was read (warnings, split queries, retries).

use super::Source;
use crate::history::FeedStats;

/// The note in place of the funnel where no GPU names a pod and no holder was read.
pub(crate) fn funnel_allocation_unknown() -> String {
    format!(
        "no funnel: no GPU carried pod labels and no holder was read (node mode's {}), so which hours were allocated, and so active and effective under a holder, is unknown, never 0 or unallocated",
        truthscale_core::catalog::GPU_ALLOCATION.name
    )
}

/// The notes on how the steps of `s` were read, in the report's order: a summarised step,
/// points combining several steps, readings that were not measurements.
pub(crate) fn source_notes(s: &Source) -> Vec<String> {
    let mut notes = Vec::new();
    if s.summarized_steps {
        notes.push(summarized_note(s.step_seconds));
    }
    if s.steps_per_point > 1 {
        notes.push(combined_note(s));
    }
    notes.extend(blanks_note(s));
    notes
}

/// The note on a summarised step: what each figure is of.
pub(crate) fn summarized_note(step_seconds: f64) -> String {
    format!(
        "each {step_seconds} s step summarises the raw samples scraped in it: use and idle time from the mean of each activity ratio, memory from its peak, and the sizing (percentiles, packing, smaller models) from four bands of the raw samples in the step (their p50, p90, p99 and largest, each held for its share of the step: 50 %, 40 %, 9 % and 1 %, the top band at least one scrape), so a burst shorter than a step is sized by its own duration, neither averaged away nor stretched to the step; within a step, workloads' busiest bands are taken as coinciding, so a coarser step can only add to the sizing, by at most a band's share of each step"
    )
}

/// The report's note on points that combine several steps (`--max-points`).
pub(crate) fn combined_note(s: &Source) -> String {
    format!(
        "each point combines {} steps of {} s (--max-points keeps each workload's points bounded): use and idle time from their mean over the steps that measured them, memory and the sizing from their peak",
        s.steps_per_point, s.step_seconds
    )
}

/// The report's note on readings that were not measurements, when there were any.
pub(crate) fn blanks_note(s: &Source) -> Option<String> {
    let readings: u64 = s.blanked_readings.values().sum();
    let mut parts = Vec::new();
    if readings > 0 {
        let kinds: Vec<String> = s
            .blanked_readings
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        parts.push(format!(
            "{readings} readings were not measurements ({}) and were left out, never counted as 0",
            kinds.join(", ")
        ));
    }
    if s.impossible_steps > 0 {
        parts.push(format!(
            "{} workload steps held an impossible raw sample (a band of the step was) and are unknown, their means too",
            s.impossible_steps
        ));
    }
    if s.clamped_ratios > 0 {
        parts.push(format!(
            "{} ratios a little over 1 were read as 1",
            s.clamped_ratios
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The note on the fleet-wide figures of `clusters` clusters read with `--cluster-label`:
/// none for a single cluster.
pub(crate) fn clusters_note(clusters: usize) -> Option<String> {
    (clusters > 1).then(|| {
        format!(
            "the fleet-wide figures pool the {clusters} clusters as one; BY CLUSTER sizes each on its own, a GPU never shared across clusters"
        )
    })
}

/// The report's notes on how the history was read: the answers' warnings (a Thanos or Mimir
/// partial answer is one), queries split for a server limit, requests tried again.
pub(crate) fn history_notes(stats: &FeedStats) -> Vec<String> {
    let mut notes: Vec<String> = stats
        .warnings
        .iter()
        .map(|w| format!("Prometheus warned (the answer may be partial): {w}"))
        .chain(stats.answer_notes.iter().cloned())
        .collect();
    if stats.splits > 0 {
        notes.push(format!(
            "{} queries were refused for a server limit (samples or time per query) and read as smaller ones, shorter in time or over fewer series: the same data",
            stats.splits
        ));
    }
    if stats.retries > 0 {
        notes.push(format!(
            "{} requests to Prometheus failed for a passing reason and were tried again",
            stats.retries
        ));
    }
    notes
}

/// Where the time went, for the terminal's standard error: what was read, then the queries
/// and the seconds of each part (`total`: since the command started; `analysis`: the
/// analysis and the report's assembly).
pub(crate) fn timings(stats: &FeedStats, total: f64, analysis: f64) -> [String; 2] {
    let ours = stats.decoding_seconds + stats.consuming_seconds + analysis;
    [
        stats.summary.clone(),
        format!(
            "{} queries ({} by remote-read, {} retried, {} split for a server limit) in {} chunks (at most {} series per chunk), {:.2} s in all: waiting for Prometheus {:.2} s ({:.0}%), truthscale {:.2} s (decoding {:.2} s, deriving {:.2} s, analysis {:.2} s)",
            stats.queries,
            stats.remote_reads,
            stats.retries,
            stats.splits,
            stats.chunks,
            stats.max_series,
            total,
            stats.waiting_seconds,
            100.0 * stats.waiting_seconds / total.max(1e-9),
            ours,
            stats.decoding_seconds,
            stats.consuming_seconds,
            analysis
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's warnings are said to be its own; what truthscale found wrong with the
    /// answers (points outside the times asked for) is said in its own words.
    #[test]
    fn the_servers_warnings_and_truthscales_own_are_told_apart() {
        let stats = FeedStats {
            warnings: vec!["remote_read: partial".into()],
            answer_notes: vec!["2 points of the answers lay outside the time range asked for and were left out, not read (Prometheus answers none there: a compatible server or a proxy in front of it did)".into()],
            ..FeedStats::default()
        };
        assert_eq!(
            history_notes(&stats),
            [
                "Prometheus warned (the answer may be partial): remote_read: partial",
                "2 points of the answers lay outside the time range asked for and were left out, not read (Prometheus answers none there: a compatible server or a proxy in front of it did)",
            ]
        );
    }
}
