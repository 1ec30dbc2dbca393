//! The report on the terminal: plain text, widest facts first.

use super::{Document, gib, gpus, pct};
use std::io::Write;
use truthscale_core::fleet::{FleetSum, Summary};

/// Rows of the right-sizing and co-location tables shown; `--json` has them all.
const SHOWN: usize = 20;

fn row(out: &mut impl Write, name: &str, s: Option<&Summary>, unit: &str) -> std::io::Result<()> {
    match s {
        Some(s) => writeln!(
            out,
            "  {name:<22} {:>8.2} {:>8.2} {:>8.2} {:>8.2}   {} steps{unit}",
            s.p50, s.p95, s.p99, s.max, s.steps_known
        ),
        None => writeln!(out, "  {name:<22} {:>8}{unit}", "unknown"),
    }
}

fn sum_row(out: &mut impl Write, name: &str, d: &FleetSum) -> std::io::Result<()> {
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
pub(crate) fn write(out: &mut impl Write, doc: &Document) -> std::io::Result<()> {
    let f = &doc.fleet;
    let s = &doc.source;
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
        "window {} to {}, every {} s{}: {} of {} steps with data; {} {}s on {}",
        s.start,
        s.end,
        s.step_seconds,
        super::step_reading(s),
        f.steps_with_data,
        f.steps,
        f.workloads,
        f.workload_unit,
        f.gpu_model.as_deref().unwrap_or("an unknown model")
    )?;
    if f.simulated {
        writeln!(
            out,
            "[SIMULATED] some of this data comes from the simulator"
        )?;
    }

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
            "GPUs needed, pooled lower bound: {}  (compute {} / memory {}; bound by {})",
            b.gpus,
            gpus(b.compute_gpus),
            gpus(b.memory_gpus),
            match b.binding {
                truthscale_core::fleet::Binding::Compute => "compute",
                truthscale_core::fleet::Binding::Memory => "memory",
            }
        )?,
        None => writeln!(
            out,
            "GPUs needed, pooled lower bound: unknown (no demand measured)"
        )?,
    }
    match &z.packing {
        Some(p) => {
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
        }
        None => writeln!(out, "GPUs needed, packed: unknown (see notes)")?,
    }

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

    writeln!(out)?;
    writeln!(out, "RIGHT-SIZING")?;
    for r in f.rightsizing.iter().take(SHOWN) {
        let mig = match (&r.mig_fit, &r.mig_fit_note) {
            (Some(m), _) => format!(
                "MIG {}{} (bound by {}){}",
                m.profile,
                peak_cost(m.peak, m.profile),
                serde_json::to_value(m.binding)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                if m.unmeasured.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {} not checked",
                        m.unmeasured
                            .iter()
                            .filter_map(|c| serde_json::to_value(c)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned)))
                            .collect::<Vec<_>>()
                            .join(" and ")
                    )
                }
            ),
            (None, Some(n)) => format!("no MIG: {n}"),
            (None, None) => "no MIG".to_owned(),
        };
        let smaller = r
            .smaller_gpu
            .as_ref()
            .map(|g| format!("; a smaller model fits: {}{}", g.name, smaller_cost(g)))
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
            "  {}: idle {} of {:.1} h measured, {:.1} idle GPU-hours",
            w.workload,
            pct(Some(w.idle_share)),
            w.measured_hours,
            w.idle_gpu_hours
        )?;
    }
    let left = f.idle.not_listed;
    if left.workloads > 0 {
        writeln!(
            out,
            "  … {} more idle at most {} of their time, {:.1} idle GPU-hours, not listed",
            left.workloads,
            pct(Some(f.idle.idle_share_above)),
            left.gpu_hours
        )?;
    }
    writeln!(
        out,
        "  idle GPU-hours of every workload measured: {:.1}",
        f.idle.idle_gpu_hours
    )?;

    writeln!(out)?;
    match &f.savings {
        Some(sv) => {
            writeln!(
                out,
                "SAVINGS (estimate): {} GPUs freed ({} today, {} needed) × {:.1} h = {:.1} GPU-hours{}",
                sv.gpus_freed,
                sv.baseline_gpus,
                sv.needed_gpus,
                sv.hours,
                sv.gpu_hours,
                sv.cost
                    .zip(sv.cost_per_gpu_hour)
                    .map(|(c, p)| format!(" × {p} per GPU-hour = {c:.2}"))
                    .unwrap_or_default()
            )?;
            for a in &sv.assumptions {
                writeln!(out, "  assumes {a}")?;
            }
        }
        None => writeln!(out, "SAVINGS: unknown (no packing)")?,
    }

    if let Some(s) = &doc.showback {
        showback(out, s)?;
    }
    if let Some(c) = &doc.clusters {
        clusters(out, c)?;
    }

    if !f.notes.is_empty() {
        writeln!(out)?;
        writeln!(out, "NOTES")?;
        for n in &f.notes {
            writeln!(out, "  {n}")?;
        }
    }
    writeln!(out)?;
    writeln!(out, "METHOD")?;
    for m in &f.method {
        writeln!(out, "  {m}")?;
    }
    Ok(())
}

/// GPU-hours with one decimal.
fn h(x: f64) -> String {
    format!("{x:.1}")
}

/// The showback table: one row per group, the check line, the policy and its notes.
fn showback(out: &mut impl Write, s: &truthscale_core::showback::Showback) -> std::io::Result<()> {
    let t = &s.total;
    writeln!(out)?;
    writeln!(
        out,
        "SHOWBACK BY {} (GPU-hours over the window)",
        s.by.to_uppercase()
    )?;
    let priced = t.groups.iter().any(|g| g.cost.is_some());
    // Time-sliced GPUs: the device's measured total billed by share, and the SM-busy split,
    // an estimate, each in a column of its own (only where some group has them).
    let sliced = t.groups.iter().any(|g| {
        g.time_sliced_effective_compute_gpu_hours.is_some()
            || g.effective_compute_estimate_gpu_hours.is_some()
    });
    let opt = |x: Option<f64>| x.map_or_else(|| "—".to_string(), h);
    writeln!(
        out,
        "  {:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}{}{}",
        "group",
        "allocated",
        "requested",
        "busy",
        "effective",
        "used",
        "idle",
        "unmeasured",
        "unknown",
        if sliced { "  t-sliced  estimate" } else { "" },
        if priced { "       cost  idle cost" } else { "" }
    )?;
    for g in &t.groups {
        writeln!(
            out,
            "  {:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}{}{}",
            g.group,
            h(g.allocated_gpu_hours),
            g.requested_gpu_hours.map_or_else(|| "unknown".into(), h),
            h(g.busy_gpu_hours),
            h(g.effective_compute_gpu_hours),
            h(g.used_gpu_hours),
            h(g.idle_gpu_hours),
            h(g.unmeasured_gpu_hours),
            h(g.use_unknown_gpu_hours),
            if sliced {
                format!(
                    " {:>9} {:>9}",
                    opt(g.time_sliced_effective_compute_gpu_hours),
                    opt(g.effective_compute_estimate_gpu_hours)
                )
            } else {
                String::new()
            },
            g.cost
                .as_ref()
                .map(|c| format!(" {:>10.2} {:>10.2}", c.allocated, c.idle))
                .unwrap_or_default()
        )?;
    }
    writeln!(
        out,
        "  {:<24} {:>9}",
        "(unallocated)",
        h(t.unallocated_gpu_hours)
    )?;
    writeln!(
        out,
        "  check: {}{}",
        t.check,
        if t.reconciled { " (reconciled)" } else { "" }
    )?;
    if !s.allocation.check.is_empty() {
        writeln!(out, "  check: {}", s.allocation.check)?;
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
fn clusters(out: &mut impl Write, clusters: &[super::ClusterReport]) -> std::io::Result<()> {
    let num = |x: Option<u64>| x.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
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
            "  {:<24} {:>9} {:>14} {:>13} {:>7} {:>6} {:>11.1}",
            c.cluster,
            c.workloads,
            c.allocated_gpus
                .map_or_else(|| "unknown".to_owned(), |s| format!("{}", s.max)),
            num(c.pooled_lower_bound_gpus),
            num(c.packed_gpus),
            num(c.gpus_freed),
            c.idle_gpu_hours
        )?;
    }
    Ok(())
}

/// What a proposed smaller model costs the workload's peak, after its name: the peak in
/// its own GPU's terms and in the model's, and how long its burst above the model's
/// capacity would run there; nothing where saturation was not measured.
pub(super) fn smaller_cost(g: &truthscale_core::fleet::SmallerGpu) -> String {
    peak_cost(g.peak, g.name)
}

/// What a proposal (`name`: a model or a MIG profile) costs the workload's peak, in words.
pub(super) fn peak_cost(k: Option<truthscale_core::fleet::PeakCost>, name: &str) -> String {
    let Some(k) = k else {
        return String::new();
    };
    let burst = match (k.burst_seconds, k.burst_on_target_seconds) {
        (Some(b), Some(on)) => format!(", its {b:.0} s burst would run {on:.0} s"),
        _ => String::new(),
    };
    format!(
        " (peak {:.2} of its GPU, {:.2} of the {}{burst})",
        k.peak_saturation, k.peak_on_target, name
    )
}
