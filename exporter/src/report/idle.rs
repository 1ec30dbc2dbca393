//! The report's idle allocated capacity, in both layouts: the workloads held idle, how long
//! they had been idle at their last reading, who owns them and the command that would
//! suspend them (truthscale runs none), the others summed, the total.

use super::format::{cost, gib, hours, hours_or_unknown, pct};
use super::html::esc;
use std::fmt::Write as _;
use std::io::{Result, Write};
use truthscale_core::fleet::{FleetReport, IdleWorkload};

/// `Deployment ml/notebook-a`, or `owner unknown`.
fn owner(w: &IdleWorkload) -> String {
    match &w.owner {
        Some(o) => format!("{} {}", o.kind, o.name),
        None => "owner unknown".into(),
    }
}

/// The section on the terminal.
///
/// # Errors
/// Writing fails.
pub(super) fn text(out: &mut impl Write, f: &FleetReport, digits: usize) -> Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "IDLE ALLOCATED CAPACITY (idle more than {} of the measured time)",
        pct(Some(f.idle.idle_share_above))
    )?;
    if f.idle.workloads.is_empty() {
        writeln!(out, "  none")?;
    }
    for w in &f.idle.workloads {
        writeln!(
            out,
            "  {}: idle {} of {} h measured, {} idle GPU-hours{}; idle for the last {} h, holding {}; {}",
            w.workload,
            pct(Some(w.idle_share)),
            hours(w.measured_hours, digits),
            hours(w.idle_gpu_hours, digits),
            w.idle_cost
                .map(|c| format!(" ({})", cost(c)))
                .unwrap_or_default(),
            hours_or_unknown(w.idle_for_hours, digits),
            w.memory_held_bytes
                .map_or("unknown memory".into(), |b| gib(Some(b))),
            owner(w)
        )?;
        if let Some(c) = &w.command {
            writeln!(out, "    to suspend it: {c}")?;
        }
    }
    let left = f.idle.not_listed;
    if left.workloads > 0 {
        writeln!(
            out,
            "  … {} more idle at most {} of their time, {} idle GPU-hours, not listed",
            left.workloads,
            pct(Some(f.idle.idle_share_above)),
            hours(left.gpu_hours, digits)
        )?;
    }
    writeln!(
        out,
        "  idle GPU-hours of every workload measured: {}",
        hours_or_unknown(f.idle.idle_gpu_hours, digits)
    )?;
    if let Some(line) = unmeasured(f) {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

/// The workloads whose idle GPU-hours are unknown (neither the busy flag nor effective
/// compute read, or a MIG instance of a profile the catalog lacks), which no list or total
/// above counts; `None` when there are none.
fn unmeasured(f: &FleetReport) -> Option<String> {
    let u = &f.idle.unmeasured;
    (!u.is_empty()).then(|| {
        format!(
            "idle GPU-hours not known (neither the busy flag nor effective compute read, or a MIG instance of a profile the catalog lacks), so neither listed nor counted: {} workload(s): {}",
            u.len(),
            u.join(", ")
        )
    })
}

/// The section on the page.
pub(super) fn html(h: &mut String, f: &FleetReport, digits: usize) {
    let _ = writeln!(
        h,
        "<h2>Idle allocated capacity</h2>\n<p class=\"muted\">Idle more than {} of the measured time (busy flag below {}, effective compute below {}, each where measured). truthscale recommends; it changes nothing in the cluster.</p>\n",
        pct(Some(f.idle.idle_share_above)),
        pct(Some(f.idle.busy_below)),
        pct(Some(f.idle.effective_compute_below)),
    );
    // No table with only its header.
    if !f.idle.workloads.is_empty() {
        let _ = writeln!(
            h,
            "<table><tr><th>workload</th><th>owner</th><th>idle</th><th>measured hours</th><th>idle GPU-hours</th><th>idle for (h)</th><th>memory held</th><th>to suspend it</th></tr>"
        );
    }
    for w in &f.idle.workloads {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td><code>{}</code></td></tr>",
            esc(&w.workload),
            esc(&owner(w)),
            pct(Some(w.idle_share)),
            hours(w.measured_hours, digits),
            hours(w.idle_gpu_hours, digits),
            hours_or_unknown(w.idle_for_hours, digits),
            w.memory_held_bytes
                .map_or("unknown".into(), |b| gib(Some(b))),
            esc(w.command.as_deref().unwrap_or(""))
        );
    }
    if !f.idle.workloads.is_empty() {
        let _ = writeln!(h, "</table>");
    }
    let left = f.idle.not_listed;
    if let Some(line) = unmeasured(f) {
        let _ = writeln!(h, "<p>{}.</p>", esc(&line));
    }
    let _ = writeln!(
        h,
        "<p>Idle GPU-hours of every workload measured: {}{}.</p>",
        hours_or_unknown(f.idle.idle_gpu_hours, digits),
        if left.workloads > 0 {
            format!(
                " ({} more workloads idle at most {} of their time, {} idle GPU-hours, not listed)",
                left.workloads,
                pct(Some(f.idle.idle_share_above)),
                hours(left.gpu_hours, digits)
            )
        } else {
            String::new()
        }
    );
}
