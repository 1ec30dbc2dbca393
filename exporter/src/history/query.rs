//! The query text: the time range and its parameters, `--selector`'s matchers, the
//! matchers and escaping of a split by series, and how a coarse step summarises each series.

use super::{Family, own_metric};
use anyhow::{Context, bail};
use truthscale_core::fleet::{BANDS, STEP_QUANTILES};
use truthscale_core::model::Field;
use truthscale_core::parse::dcgm_text;

/// The time range, in milliseconds since the epoch: evaluation at `start + k·step ≤ end`.
/// The point at `t` stands for the step `(t − step, t]` (a coarse step summarises the raw
/// samples of that window: [`Summary`]), so the points tile `(start − step, end]`.
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
    /// `since` back from `now`: the first point is the first multiple of `step` after
    /// `now − since`, so that the steps the points stand for begin at or just before it
    /// (`since` of 2 h at 60 s: 120 points, not 121, each step counted once); at least one
    /// point.
    #[must_use]
    pub(crate) fn back_from(now: i64, since: i64, step: i64) -> Range {
        let step = step.max(1);
        let first = (now - since).div_euclid(step) * step + step;
        Range {
            start: first.min(now.div_euclid(step) * step),
            end: now,
            step,
        }
    }

    /// Where the step of the first point begins: the window the points stand for starts here.
    #[must_use]
    pub(crate) fn covered_from(&self) -> i64 {
        self.start - self.step
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
pub(super) fn secs(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

/// The label matchers of `--selector`, without braces: `{a="b"}` or `a="b"`.
///
/// # Errors
/// A selector with a metric name or unbalanced braces, or that is not a PromQL label
/// matcher list (naming the column, [`super::selector::check`]).
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
    let inner = inner.trim().trim_end_matches(',').trim();
    super::selector::check(s, inner)?;
    Ok(inner.to_owned())
}

/// `NAME{matchers}` for one metric.
pub(super) fn series_query(name: &str, matchers: &str) -> String {
    if matchers.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{matchers}}}")
    }
}

/// `text` as a PromQL double-quoted string: its backslashes, double quotes and line
/// breaks escaped.
pub(super) fn promql_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `matchers` with one more matcher.
pub(super) fn join_matchers(matchers: &str, more: &str) -> String {
    if matchers.is_empty() {
        more.to_owned()
    } else {
        format!("{matchers},{more}")
    }
}

/// A regular expression matching exactly the `values` (Prometheus anchors it), escaped
/// for RE2 and for a PromQL double-quoted string.
pub(super) fn alternation(values: &[String]) -> String {
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

/// How a step coarser than the scrape
/// ([`History::summarizes`](super::History::summarizes)) summarises the raw samples
/// scraped in it: one `*_over_time` function over the step's own window, `[step − 1ms]`
/// back from its time `t`, so the windows tile the range and every raw sample is in exactly
/// one step, whether the server's ranges include their start (Prometheus 2: the window is
/// `[t − step + 1ms, t]`) or not (Prometheus 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Summary {
    /// `avg_over_time`: activity ratios, clocks, power, rates.
    Mean,
    /// `max_over_time`: memory used and total (a step's peak is what must fit), and the
    /// health levels (a step with one unhealthy reading stays unhealthy,
    /// [`Field::is_health_level`]).
    Max,
    /// `min_over_time`: dcgm-exporter's free framebuffer (with the peak used, the total).
    Min,
    /// `last_over_time`: counters (energy, the cycle counters, the ECC totals, the
    /// violation and clock-event times: the differences between steps stay exact) and bit
    /// fields (throttle reasons).
    Last,
    /// The upper edge of band `j` of the step's raw samples of an activity ratio
    /// ([`STEP_QUANTILES`]): `quantile_over_time(q, …)`, the top band `max_over_time`; read
    /// beside the mean for the sizing ([`SampleKind::Peak`](super::SampleKind::Peak)).
    Band(usize),
}

impl Summary {
    /// The summary of `selector` over each step of `step_ms`.
    pub(super) fn wrap(self, selector: &str, step_ms: i64) -> String {
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
    pub(super) fn of(family: Family, name: &str) -> (Summary, bool) {
        let lower = name.to_ascii_lowercase();
        if family == Family::DcgmExporter
            && (lower.ends_with("fb_free") || lower.ends_with("fb_free_bytes"))
        {
            return (Summary::Min, false);
        }
        match field_of(family, name) {
            Some(f) if f.is_ratio() => (Summary::Mean, true),
            Some(Field::MemUsedBytes | Field::MemTotalBytes) => (Summary::Max, false),
            // A health level's largest: one unhealthy reading is never averaged away.
            Some(f) if f.is_health_level() => (Summary::Max, false),
            // Counters: their last value in each step, whose deltas the deriver reads.
            Some(Field::EnergyJoules) | None => (Summary::Last, false),
            Some(f) if f.is_int64_counter() => (Summary::Last, false),
            Some(_) => (Summary::Mean, false),
        }
    }
}

/// The reading a series of `family` is (dcgm-exporter's free framebuffer: the total it
/// completes).
pub(super) fn field_of(family: Family, name: &str) -> Option<Field> {
    match family {
        Family::Truthscale => own_metric(name).map(|r| r.field),
        Family::DcgmExporter => dcgm_text::mapped_metrics()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, f)| f),
    }
}

/// The activity ratios the sizing's saturation and busiest pipe are derived from: read in
/// bands at a coarse step ([`History::read_peaks`](super::History::read_peaks)).
pub(super) const SIZING_RATIOS: [Field; 7] = [
    Field::TensorActive,
    Field::HmmaActive,
    Field::ImmaActive,
    Field::Fp16Active,
    Field::Fp32Active,
    Field::Fp64Active,
    Field::DramActive,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// 2 h back from 12:00 at 60 s: points at 10:01 … 12:00, 120 of them, each standing for
    /// the minute up to it, so the window is exactly (10:00, 12:00]; an end off the step
    /// still covers the window's start; a window shorter than the step keeps one point.
    #[test]
    fn a_window_is_its_steps_each_once() {
        let h = 3_600_000;
        let r = Range::back_from(12 * h, 2 * h, 60_000);
        assert_eq!((r.start, r.end, r.points()), (10 * h + 60_000, 12 * h, 120));
        assert_eq!(r.covered_from(), 10 * h);
        let r = Range::back_from(12 * h + 30_000, 2 * h, 60_000);
        assert_eq!((r.start, r.points()), (10 * h + 60_000, 120));
        assert!(r.covered_from() <= 12 * h + 30_000 - 2 * h);
        let r = Range::back_from(12 * h, 30_000, 60_000);
        assert_eq!((r.start, r.points()), (12 * h, 1));
    }

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
        // The health counters (ECC totals, violation and clock-event times, INT64): their
        // last value, under every name generation.
        for name in [
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
            "DCGM_FI_DEV_POWER_VIOLATION",
            "DCGM_FI_DEV_THERMAL_VIOLATION",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST_NS",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS",
        ] {
            assert_eq!(dcgm(name), (Summary::Last, false), "{name}");
        }
        // The health levels, the exporter's XID counts in its window and truthscale's own
        // level gauges: the step's largest, so a step with a pending remap stays pending.
        for name in [
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_XID_ERROR",
            "DCGM_EXP_XID_ERRORS_COUNT",
            "DCGM_FI_DEV_ROW_REMAP_PENDING",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "DCGM_FI_DEV_ROW_REMAP_FAILED",
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
            "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
            "DCGM_FI_DEV_GPU_RECOVERY_ACTION",
            "DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG",
            "DCGM_FI_DEV_MEMORY_UNREPAIRABLE",
            "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY",
        ] {
            assert_eq!(dcgm(name), (Summary::Max, false), "{name}");
        }
        for name in [
            "truthscale_gpu_xid_last",
            "truthscale_gpu_xid_window_errors",
            "truthscale_gpu_xid_window_fatal",
            "truthscale_gpu_row_remap_pending",
            "truthscale_gpu_row_remap_failed",
            "truthscale_gpu_row_remap_uncorrectable_rows",
            "truthscale_gpu_recovery_action",
            "truthscale_gpu_memory_unrepairable",
            "truthscale_gpu_fabric_health",
        ] {
            assert_eq!(own(name), (Summary::Max, false), "{name}");
        }
        assert_eq!(
            Summary::Max.wrap("DCGM_FI_DEV_ROW_REMAP_PENDING{gpu=\"0\"}", 300_000),
            "max_over_time(DCGM_FI_DEV_ROW_REMAP_PENDING{gpu=\"0\"}[299999ms])"
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
