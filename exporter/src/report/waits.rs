//! The report's "why GPUs wait" section, in both layouts: starved time by cause and the
//! stragglers of jobs ([`truthscale_core::fleet::waits`]). Layout only, like
//! [`super::text`] and [`super::html`], which call it where [`super::sections`] puts it.

use super::format::{hours, pct};
use super::html::esc;
use std::fmt::Write as _;
use std::io::{Result, Write};
use truthscale_core::causes::Cause;
use truthscale_core::fleet::FleetReport;
use truthscale_core::fleet::waits::{CauseHours, Waits};

/// Starved hours by cause, the causes with any: `cpu_throttled 8.0 h, io_stalled 4.0 h`.
fn by_cause(h: &[CauseHours], digits: usize) -> String {
    let parts: Vec<String> = h
        .iter()
        .filter(|c| c.hours > 0.0)
        .map(|c| format!("{} {} h", c.cause, hours(c.hours, digits)))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// What the section says when no window had a verdict.
const NOT_JUDGED: &str =
    "no window was judged: a verdict needs the busy flag and the tensor or DRAM counters";

fn starved_total(w: &Waits) -> f64 {
    w.starved_gpu_hours.iter().map(|c| c.hours).sum()
}

/// What the totals leave out: the starved hours of MIG instances whose share of the GPU is
/// not known; `None` when there are none.
fn unknown_share(w: &Waits, digits: usize) -> Option<String> {
    (w.starved_hours_of_unknown_share > 0.0).then(|| {
        format!(
            "{} starved hours of MIG instances of an unknown profile are in their rows, not in the GPU-hours (their share of the GPU is not known)",
            hours(w.starved_hours_of_unknown_share, digits)
        )
    })
}

/// The section on the terminal.
///
/// # Errors
/// Writing fails.
pub(super) fn text(out: &mut impl Write, f: &FleetReport, digits: usize) -> Result<()> {
    let w = &f.waits;
    writeln!(out)?;
    writeln!(
        out,
        "WHY GPUS WAIT (starved: busy flag high, roofline saturation low; cause per window, docs/verdicts.md)"
    )?;
    let Some(judged) = w.judged_gpu_hours else {
        return writeln!(out, "  {NOT_JUDGED}");
    };
    writeln!(
        out,
        "  starved GPU-hours: {} of {} judged; by cause: {}",
        hours(starved_total(w), digits),
        hours(judged, digits),
        by_cause(&w.starved_gpu_hours, digits)
    )?;
    if let Some(u) = unknown_share(w, digits) {
        writeln!(out, "  {u}")?;
    }
    for r in &w.starved {
        writeln!(
            out,
            "  {} on {}: starved {} h ({} of its judged time), mostly {}: {}",
            r.workload,
            r.gpu,
            hours(r.starved_hours, digits),
            pct(Some(r.starved_share)),
            r.main_cause,
            r.action
        )?;
    }
    let left = w.starved_not_listed;
    if left.workloads > 0 {
        writeln!(
            out,
            "  … {} more starved workloads, {} starved hours, not listed",
            left.workloads,
            hours(left.gpu_hours, digits)
        )?;
    }
    for s in &w.stragglers {
        writeln!(
            out,
            "  straggler {} on {} (job {}): {} h, up to {} behind the job's median; the job's other GPUs wait on it",
            s.workload,
            s.gpu,
            s.job.as_deref().unwrap_or("?"),
            hours(s.straggler_hours, digits),
            pct(Some(s.gap_max))
        )?;
    }
    if let Some(more) = stragglers_not_listed(w, digits) {
        writeln!(out, "  … {more}")?;
    }
    Ok(())
}

/// The section on the page.
pub(super) fn html(h: &mut String, f: &FleetReport, digits: usize) {
    let w = &f.waits;
    let Some(judged) = w.judged_gpu_hours else {
        let _ = writeln!(h, "<h2>Why GPUs wait</h2>\n<p>{NOT_JUDGED}.</p>");
        return;
    };
    let _ = writeln!(
        h,
        "<h2>Why GPUs wait</h2>\n<p class=\"muted\">Starved: busy flag high, roofline saturation low; the cause is decided per window by the rules of docs/verdicts.md. {} of {} judged GPU-hours starved; by cause: {}.</p>",
        hours(starved_total(w), digits),
        hours(judged, digits),
        esc(&by_cause(&w.starved_gpu_hours, digits))
    );
    if let Some(u) = unknown_share(w, digits) {
        let _ = writeln!(h, "<p>{}.</p>", esc(&u));
    }
    // No table with only its header: the sentence above says none was starved.
    if !w.starved.is_empty() {
        starved_table(h, w, digits);
    }
    if w.starved_not_listed.workloads > 0 {
        let _ = writeln!(
            h,
            "<p>{} more starved workloads, {} starved hours, not listed.</p>",
            w.starved_not_listed.workloads,
            hours(w.starved_not_listed.gpu_hours, digits)
        );
    }
    for s in &w.stragglers {
        let _ = writeln!(
            h,
            "<p>Straggler {} on {} (job {}): {} h, up to {} behind the job's median; the job's other GPUs wait on it ({}).</p>",
            esc(&s.workload),
            esc(&s.gpu),
            esc(s.job.as_deref().unwrap_or("?")),
            hours(s.straggler_hours, digits),
            pct(Some(s.gap_max)),
            Cause::CommBound
        );
    }
    if let Some(more) = stragglers_not_listed(w, digits) {
        let _ = writeln!(h, "<p>{more}.</p>");
    }
}

/// The stragglers past the list, in words; `None` when all are listed.
fn stragglers_not_listed(w: &Waits, digits: usize) -> Option<String> {
    let left = w.stragglers_not_listed;
    let unknown = left.hours_of_unknown_share.map_or(String::new(), |h| {
        format!(
            " (and {} hours of MIG instances of an unknown profile, their share of the GPU not known)",
            hours(h, digits)
        )
    });
    (left.workloads > 0).then(|| {
        format!(
            "{} more stragglers, {} GPU-hours as a straggler{unknown}, not listed",
            left.workloads,
            hours(left.gpu_hours, digits)
        )
    })
}

/// The table of starved workloads, on the page.
fn starved_table(h: &mut String, w: &Waits, digits: usize) {
    let _ = writeln!(
        h,
        "<table><tr><th>workload</th><th>GPU</th><th>starved hours</th><th>share</th><th>mostly</th><th>what to do</th></tr>"
    );
    for r in &w.starved {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.workload),
            esc(&r.gpu),
            hours(r.starved_hours, digits),
            pct(Some(r.starved_share)),
            r.main_cause,
            esc(&r.action)
        );
    }
    let _ = writeln!(h, "</table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::fleet::NotListed;

    /// The starved hours the totals leave out (MIG instances of an unknown profile) are
    /// said beside them; nothing is said when there are none.
    #[test]
    fn hours_left_out_of_the_totals_are_said() {
        let mut w = Waits {
            starved_gpu_hours: Vec::new(),
            judged_gpu_hours: Some(1.0),
            starved_hours_of_unknown_share: 1.5,
            starved: Vec::new(),
            starved_not_listed: NotListed {
                workloads: 0,
                gpu_hours: 0.0,
                hours_of_unknown_share: None,
            },
            stragglers: Vec::new(),
            stragglers_not_listed: NotListed {
                workloads: 0,
                gpu_hours: 0.0,
                hours_of_unknown_share: None,
            },
        };
        assert_eq!(stragglers_not_listed(&w, 1), None);
        w.stragglers_not_listed = NotListed {
            workloads: 3,
            gpu_hours: 1.25,
            hours_of_unknown_share: None,
        };
        assert_eq!(
            stragglers_not_listed(&w, 2).as_deref(),
            Some("3 more stragglers, 1.25 GPU-hours as a straggler, not listed")
        );
        w.stragglers_not_listed.hours_of_unknown_share = Some(0.5);
        assert_eq!(
            stragglers_not_listed(&w, 2).as_deref(),
            Some(
                "3 more stragglers, 1.25 GPU-hours as a straggler (and 0.50 hours of MIG instances of an unknown profile, their share of the GPU not known), not listed"
            )
        );
        assert_eq!(
            unknown_share(&w, 1).as_deref(),
            Some(
                "1.5 starved hours of MIG instances of an unknown profile are in their rows, not in the GPU-hours (their share of the GPU is not known)"
            )
        );
        w.starved_hours_of_unknown_share = 0.0;
        assert_eq!(unknown_share(&w, 1), None);
    }
}
