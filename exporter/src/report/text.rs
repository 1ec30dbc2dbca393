//! The report on the terminal: plain text, widest facts first. Layout only: it walks
//! [`SECTIONS`], and every figure comes formatted from [`super::format`].

use super::format::{
    self, binding, cost, count, gib, gpus, hours, hours_or_none, hours_or_unknown, json_name, pct,
    peak_cost, smaller_cost,
};
use super::sections::{SECTIONS, Section};
use super::{ClusterReport, Document};
use std::io::{Result, Write};
use truthscale_core::fleet::{FleetReport, FleetSum, RightSizing, Summary};
use truthscale_core::showback::Showback;

/// Rows of the right-sizing and co-location tables shown; `--json` has them all.
const SHOWN: usize = 20;
/// Decimals of GPU-hours and hours on the terminal.
const DIGITS: usize = 1;

fn row(out: &mut impl Write, name: &str, s: Option<&Summary>, unit: &str) -> Result<()> {
    match s {
        Some(s) => writeln!(
            out,
            "  {name:<22} {:>8} {:>8} {:>8} {:>8}   {} steps{unit}",
            gpus(Some(s.p50)),
            gpus(Some(s.p95)),
            gpus(Some(s.p99)),
            gpus(Some(s.max)),
            s.steps_known
        ),
        None => writeln!(out, "  {name:<22} {:>8}{unit}", "unknown"),
    }
}

fn sum_row(out: &mut impl Write, name: &str, d: &FleetSum) -> Result<()> {
    let note = if d.unmeasured.is_empty() {
        String::new()
    } else {
        format!(
            "  ({} of {} workloads; unknown for {})",
            d.workloads,
            d.workloads + d.unmeasured.len(),
            d.unmeasured.len()
        )
    };
    row(out, name, d.summary.as_ref(), &note)
}

/// Write the report.
///
/// # Errors
/// Writing fails.
pub(crate) fn write(out: &mut impl Write, doc: &Document) -> Result<()> {
    write_sections(out, doc, &SECTIONS)
}

/// Write `sections` of the report, in the order given.
///
/// # Errors
/// Writing fails.
pub(crate) fn write_sections(
    out: &mut impl Write,
    doc: &Document,
    sections: &[Section],
) -> Result<()> {
    let f = &doc.fleet;
    for &section in sections {
        match section {
            Section::Header => header(out, doc)?,
            Section::Funnel => {
                if let Some(fu) = &doc.funnel {
                    super::funnel::text(out, fu, DIGITS)?;
                }
            }
            Section::Sizing => sizing(out, f)?,
            Section::Colocation => colocation(out, f)?,
            Section::Rightsizing => rightsizing(out, f)?,
            Section::Idle => super::idle::text(out, f, DIGITS)?,
            Section::Waits => super::waits::text(out, f, DIGITS)?,
            Section::Savings => savings(out, f)?,
            Section::Showback => {
                if let Some(s) = &doc.showback {
                    showback(out, s)?;
                }
            }
            Section::Clusters => {
                if let Some(c) = &doc.clusters {
                    clusters(out, c)?;
                }
            }
            Section::Notes => notes(out, f)?,
            Section::Method => {
                writeln!(out)?;
                writeln!(out, "METHOD")?;
                for m in &f.method {
                    writeln!(out, "  {m}")?;
                }
            }
        }
    }
    Ok(())
}

/// Where the history came from, the window, and the simulator's mark.
fn header(out: &mut impl Write, doc: &Document) -> Result<()> {
    let (f, s) = (&doc.fleet, &doc.source);
    writeln!(
        out,
        "truthscale report: {} ({}){}",
        s.prometheus,
        s.family,
        s.selector
            .as_ref()
            .map(|m| format!(", {{{m}}}"))
            .unwrap_or_default()
    )?;
    writeln!(
        out,
        "window {} to {}, every {} s{}: {} of {} steps with data; {}",
        s.start,
        s.end,
        s.step_seconds,
        super::step_reading(s),
        f.steps_with_data,
        f.steps,
        format::scope(f)
    )?;
    if f.simulated {
        writeln!(
            out,
            "[SIMULATED] some of this data comes from the simulator"
        )?;
    }
    Ok(())
}

/// FLEET SIZING: the GPU-equivalents, the pooled lower bound and the packing.
fn sizing(out: &mut impl Write, f: &FleetReport) -> Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "FLEET SIZING (GPU-equivalents)       p50      p95      p99      max"
    )?;
    let z = &f.sizing;
    row(out, "allocated GPUs", z.allocated_gpus.as_ref(), "")?;
    row(out, "GPUs reporting", z.gpus_reporting.as_ref(), "")?;
    sum_row(out, "busy flag claims", &z.busy_claim_gpus)?;
    sum_row(out, "compute demand", &z.compute_demand_gpus)?;
    sum_row(out, "memory demand", &z.memory_demand_gpus)?;
    writeln!(out)?;
    match &z.pooled_lower_bound {
        Some(b) => writeln!(
            out,
            "GPUs needed, pooled lower bound: {}  (compute p99 {} / memory {}; bound by {})",
            b.gpus,
            gpus(b.compute_gpus),
            gpus(b.memory_gpus),
            binding(b.binding)
        )?,
        None => writeln!(
            out,
            "GPUs needed, pooled lower bound: unknown (no demand measured)"
        )?,
    }
    let Some(p) = &z.packing else {
        return writeln!(out, "GPUs needed, packed: unknown (see notes)");
    };
    writeln!(
        out,
        "GPUs needed, packed (first-fit decreasing): {}{}",
        p.gpus,
        if p.excluded_gpus > 0 {
            format!(
                "  ({} packed + {} kept by {} workload(s) with unmeasured demand)",
                p.packed_gpus,
                p.excluded_gpus,
                p.excluded.len()
            )
        } else {
            String::new()
        }
    )?;
    for e in &p.excluded {
        writeln!(out, "  not packed: {}: {}", e.workload, e.reason)?;
    }
    Ok(())
}

/// CO-LOCATION CANDIDATES, the first [`SHOWN`].
fn colocation(out: &mut impl Write, f: &FleetReport) -> Result<()> {
    writeln!(out)?;
    writeln!(out, "CO-LOCATION CANDIDATES (most GPUs freed first)")?;
    if f.colocation.is_empty() {
        writeln!(out, "  none")?;
    }
    for c in f.colocation.iter().take(SHOWN) {
        writeln!(
            out,
            "  frees {}: {}  (peak memory {}, p99 saturation {}{})",
            c.gpus_freed,
            c.workloads.join(" + "),
            gib(Some(c.peak_memory_bytes)),
            pct(c.saturation_p99),
            if c.interleaved {
                format!(
                    "; interleaved: their p99s add to {}",
                    pct(Some(c.sum_of_p99s))
                )
            } else {
                String::new()
            }
        )?;
    }
    if f.colocation.len() > SHOWN {
        writeln!(out, "  … {} more in --json", f.colocation.len() - SHOWN)?;
    }
    Ok(())
}

/// A workload's MIG fit in words: the profile, what it costs the peak, the binding
/// resource and what was not checked; or why none fits.
fn mig_words(r: &RightSizing) -> String {
    match (&r.mig_fit, &r.mig_fit_note) {
        // A fit beside a note: a smaller profile was withheld, and why is said.
        (Some(m), note) => format!(
            "MIG {}{} (bound by {}){}{}",
            m.profile,
            peak_cost(m.peak, m.profile),
            json_name(m.binding),
            if m.unmeasured.is_empty() {
                String::new()
            } else {
                let unchecked: Vec<String> = m.unmeasured.iter().map(json_name).collect();
                let unchecked: Vec<String> =
                    unchecked.into_iter().filter(|c| !c.is_empty()).collect();
                format!(", {} not checked", unchecked.join(" and "))
            },
            note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
        ),
        (None, Some(n)) => format!("no MIG: {n}"),
        (None, None) => "no MIG".to_owned(),
    }
}

/// RIGHT-SIZING, the first [`SHOWN`].
fn rightsizing(out: &mut impl Write, f: &FleetReport) -> Result<()> {
    writeln!(out)?;
    writeln!(out, "RIGHT-SIZING")?;
    for r in f.rightsizing.iter().take(SHOWN) {
        let mig = mig_words(r);
        let smaller = r
            .smaller_gpu
            .as_ref()
            .map(|g| format!("; a smaller model fits: {}{}", g.name, smaller_cost(g)))
            .or_else(|| r.smaller_gpu_note.as_ref().map(|n| format!("; {n}")))
            .unwrap_or_default();
        writeln!(
            out,
            "  {}{}: memory peak {} p99 {} of {}; p99 saturation {}; {mig}{smaller}",
            r.workload,
            if r.simulated { " [SIMULATED]" } else { "" },
            gib(r.memory_peak_bytes),
            gib(r.memory_p99_bytes),
            gib(r.memory_total_bytes),
            pct(r.saturation_p99),
        )?;
    }
    if f.rightsizing.len() > SHOWN {
        writeln!(out, "  … {} more in --json", f.rightsizing.len() - SHOWN)?;
    }
    Ok(())
}

/// SAVINGS: GPUs freed × hours, priced where a price was given, and the assumptions.
fn savings(out: &mut impl Write, f: &FleetReport) -> Result<()> {
    writeln!(out)?;
    let Some(sv) = &f.savings else {
        return writeln!(out, "SAVINGS: unknown (no packing)");
    };
    writeln!(
        out,
        "SAVINGS (estimate): {}",
        format::savings_sentence(sv, "×", ("", ""), DIGITS)
    )?;
    for a in &sv.assumptions {
        writeln!(out, "  assumes {a}")?;
    }
    Ok(())
}

/// NOTES, when there are any.
fn notes(out: &mut impl Write, f: &FleetReport) -> Result<()> {
    if !f.notes.is_empty() {
        writeln!(out)?;
        writeln!(out, "NOTES")?;
        for n in &f.notes {
            writeln!(out, "  {n}")?;
        }
    }
    Ok(())
}

/// The showback table: one row per group, the check line, the policy and its notes.
fn showback(out: &mut impl Write, s: &Showback) -> Result<()> {
    let t = &s.total;
    writeln!(out)?;
    writeln!(
        out,
        "SHOWBACK BY {} (GPU-hours over the window)",
        s.by.to_uppercase()
    )?;
    let priced = s.priced;
    // Time-sliced GPUs: the device's measured total billed by share, and the SM-busy split,
    // an estimate, each in a column of its own (only where some group has them).
    let sliced = t.groups.iter().any(|g| {
        g.time_sliced_effective_compute_gpu_hours.is_some()
            || g.effective_compute_estimate_gpu_hours.is_some()
    });
    // GPUs lost to health: their held hours in a column of their own, where any.
    let down = t
        .groups
        .iter()
        .any(|g| g.unavailable_gpu_hours.is_some_and(|h| h > 0.0));
    writeln!(
        out,
        "  {:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}{}{}{}",
        "group",
        "allocated",
        "requested",
        "busy",
        "effective",
        "used",
        "idle",
        "unmeasured",
        "unknown",
        if down { " unavailable" } else { "" },
        if sliced { "  t-sliced  estimate" } else { "" },
        if priced { "       cost  idle cost" } else { "" }
    )?;
    for g in &t.groups {
        showback_row(out, g, (sliced, down, priced))?;
    }
    // What no pod held, and with prices what it cost, under the groups' cost column; what
    // no one knows was held or not, apart.
    let pad = 7 * 10 + if down { 12 } else { 0 } + if sliced { 20 } else { 0 };
    let unheld = [
        (
            "(unallocated)",
            t.unallocated_gpu_hours,
            t.unallocated_cost,
            t.unallocated_simulated,
        ),
        (
            "(allocation unknown)",
            t.allocation_unknown_gpu_hours,
            t.allocation_unknown_cost,
            t.allocation_unknown_simulated,
        ),
    ];
    for (k, (name, h, c, simulated)) in unheld.into_iter().enumerate() {
        if k > 0 && h == 0.0 {
            continue;
        }
        let cost = if priced {
            format!("{:pad$} {:>10}", "", c.map_or_else(|| "?".to_owned(), cost))
        } else {
            String::new()
        };
        let mark = if simulated { " [SIMULATED]" } else { "" };
        writeln!(out, "  {name:<24} {:>9}{cost}{mark}", hours(h, DIGITS))?;
    }
    showback_footer(out, s, sliced)
}

/// A group's name as the terminal shows it: a label value may hold a line break or
/// another control character, which would split its row; each is written escaped (`\n`).
fn group_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.chars().any(char::is_control) {
        name.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        name.into()
    }
}

/// One group's row of the showback table.
fn showback_row(
    out: &mut impl Write,
    g: &truthscale_core::showback::GroupHours,
    (sliced, down, priced): (bool, bool, bool),
) -> Result<()> {
    let h = |x: f64| hours(x, DIGITS);
    writeln!(
        out,
        "  {:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}{}{}{}{}",
        group_name(&g.group),
        h(g.allocated_gpu_hours),
        hours_or_unknown(g.requested_gpu_hours, DIGITS),
        hours_or_unknown(g.busy_gpu_hours, DIGITS),
        hours_or_unknown(g.effective_compute_gpu_hours, DIGITS),
        h(g.used_gpu_hours),
        h(g.idle_gpu_hours),
        h(g.unmeasured_gpu_hours),
        h(g.use_unknown_gpu_hours),
        if down {
            format!(" {:>11}", hours_or_unknown(g.unavailable_gpu_hours, DIGITS))
        } else {
            String::new()
        },
        if sliced {
            format!(
                " {:>9} {:>9}",
                hours_or_none(g.time_sliced_effective_compute_gpu_hours, DIGITS),
                hours_or_none(g.effective_compute_estimate_gpu_hours, DIGITS)
            )
        } else {
            String::new()
        },
        match (&g.cost, priced) {
            (Some(c), _) => format!(" {:>10} {:>10}", cost(c.allocated), cost(c.idle)),
            // Priced, but not this group's GPUs (a model without a price): unknown.
            (None, true) => format!(" {:>10} {:>10}", "?", "?"),
            (None, false) => String::new(),
        },
        if g.simulated { " [SIMULATED]" } else { "" },
    )
}

/// The showback's energy: each group's kWh (and cost, with a price), what no pod held, and
/// the check that they add up to the fleet's.
fn energy_lines(
    out: &mut impl Write,
    s: &Showback,
    e: &truthscale_core::showback::PeriodEnergy,
) -> Result<()> {
    let with_cost = |kwh: f64, c: Option<f64>| match c {
        Some(c) => format!("{} kWh ({})", format::kwh(kwh), cost(c)),
        None => format!("{} kWh", format::kwh(kwh)),
    };
    let groups: Vec<String> = s
        .total
        .groups
        .iter()
        .filter_map(|g| {
            Some(format!(
                "{} {}",
                group_name(&g.group),
                with_cost(g.energy_kwh?, g.energy_cost)
            ))
        })
        .collect();
    writeln!(out, "  energy: {}", groups.join(", "))?;
    writeln!(
        out,
        "  energy: (unallocated) {}; check: {}{}",
        with_cost(e.unallocated_kwh, e.unallocated_cost),
        e.check,
        if e.reconciled { " (reconciled)" } else { "" }
    )
}

/// The showback's check lines, the legend of the time-sliced columns, the policy and the
/// notes.
fn showback_footer(out: &mut impl Write, s: &Showback, sliced: bool) -> Result<()> {
    let t = &s.total;
    writeln!(
        out,
        "  check: {}{}",
        t.check,
        if t.reconciled { " (reconciled)" } else { "" }
    )?;
    if !s.allocation.check.is_empty() {
        writeln!(out, "  check: {}", s.allocation.check)?;
    }
    if let Some(e) = &t.energy {
        energy_lines(out, s, e)?;
    }
    if sliced {
        writeln!(
            out,
            "  effective: each group's own measured effective compute; t-sliced: time-sliced GPUs' measured effective compute, billed 1/k to each of k holders; estimate: the SM-busy split, an ESTIMATE, never billed"
        )?;
    }
    for p in &s.policy {
        writeln!(out, "  {p}")?;
    }
    for n in &s.notes {
        writeln!(out, "  note: {n}")?;
    }
    Ok(())
}

/// The BY CLUSTER table: each cluster sized on its own.
fn clusters(out: &mut impl Write, clusters: &[ClusterReport]) -> Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "BY CLUSTER (each on its own: a GPU is never shared across clusters)"
    )?;
    writeln!(
        out,
        "  {:<24} {:>9} {:>14} {:>13} {:>7} {:>6} {:>11}",
        "cluster", "workloads", "allocated max", "pooled bound", "packed", "frees", "idle GPU-h"
    )?;
    for c in clusters {
        writeln!(
            out,
            "  {:<24} {:>9} {:>14} {:>13} {:>7} {:>6} {:>11}",
            c.cluster,
            c.workloads,
            count(c.allocated_gpus.map(|s| s.max)),
            count(c.pooled_lower_bound_gpus),
            count(c.packed_gpus),
            count(c.gpus_freed),
            hours_or_unknown(c.idle_gpu_hours, DIGITS)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group named by a label value with a line break keeps its row: the break is
    /// written escaped, as are other control characters; other names are as given.
    #[test]
    fn a_group_name_with_a_line_break_keeps_its_row() {
        assert_eq!(super::group_name("line\nbreak"), "line\\nbreak");
        assert_eq!(super::group_name("tab\there\r"), "tab\\there\\r");
        assert_eq!(super::group_name("a,b \"q\" é"), "a,b \"q\" é");
    }
    use truthscale_core::showback::{GroupHours, Period};

    /// Prices were given, but none for the fleet's model: every cost is unknown, and the
    /// table says so (`?`), never leaving the cost columns out as a run without prices does.
    #[test]
    fn an_unknown_cost_of_a_priced_run_is_a_question_mark() {
        let group = GroupHours {
            group: "ml".into(),
            allocated_gpu_hours: 2.0,
            ..GroupHours::default()
        };
        let mut s = Showback {
            by: "namespace".into(),
            total: Period {
                groups: vec![group],
                unallocated_gpu_hours: 1.0,
                ..Period::default()
            },
            priced: true,
            ..Showback::default()
        };
        let mut out = Vec::new();
        showback(&mut out, &s).unwrap();
        let text = String::from_utf8(out).unwrap();
        let row = |name: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(name))
                .unwrap_or_else(|| panic!("{name}: {text}"))
                .to_owned()
        };
        assert!(text.contains("cost  idle cost"), "{text}");
        assert!(row("ml").trim_end().ends_with("?          ?"), "{text}");
        assert!(row("(unallocated)").trim_end().ends_with('?'), "{text}");
        s.priced = false;
        let mut out = Vec::new();
        showback(&mut out, &s).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("cost"), "no prices, no cost columns: {text}");
    }
}
