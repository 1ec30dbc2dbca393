//! The report page's showback section: each group's allocated GPU-hours as stacked bars of
//! what they were (used, idle, unmeasured, use unknown, unavailable), the table with energy,
//! the checks, the policy and the notes. Layout only, like [`super::html`], which calls it
//! where [`super::sections`] puts it.

use super::format::{
    cost_or_none, cost_priced, hours, hours_or_none, hours_or_unknown, kwh_or_none,
};
use super::html::esc;
use plotters::prelude::*;
use std::fmt::Write as _;

/// The chart's width, as the page's other charts.
const WIDTH: u32 = 960;

/// A chart drawn, or plotters' error.
type Drawn = Result<(), Box<dyn std::error::Error>>;

/// The parts of a group's allocated GPU-hours, in the order they are stacked, with their
/// colours.
const PARTS: [(&str, RGBColor); 5] = [
    ("used", RGBColor(39, 174, 96)),
    ("idle", RGBColor(192, 57, 43)),
    ("unmeasured", RGBColor(170, 170, 170)),
    ("use unknown (time-sliced)", RGBColor(120, 144, 156)),
    ("unavailable (health)", RGBColor(44, 62, 80)),
];

fn parts(g: &truthscale_core::showback::GroupHours) -> [f64; 5] {
    [
        g.used_gpu_hours,
        g.idle_gpu_hours,
        g.unmeasured_gpu_hours,
        g.use_unknown_gpu_hours,
        // Unknown where no health field was read: no bar part (the table says unknown).
        g.unavailable_gpu_hours.unwrap_or(0.0),
    ]
}

/// One stacked bar per group: its allocated GPU-hours split into used, idle, unmeasured and
/// use unknown.
fn showback_chart(s: &truthscale_core::showback::Showback, svg: &mut String) -> Drawn {
    let groups: Vec<_> = s
        .total
        .groups
        .iter()
        .filter(|g| g.allocated_gpu_hours > 0.0)
        .take(20)
        .collect();
    let n = groups.len().max(1);
    let xmax = groups
        .iter()
        .map(|g| g.allocated_gpu_hours)
        .fold(0.0_f64, f64::max)
        .max(1e-9)
        * 1.1;
    let height = 60 + 28 * n as u32;
    let root = SVGBackend::with_string(svg, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let names: Vec<String> = groups.iter().map(|g| g.group.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(28)
        .y_label_area_size(160)
        .build_cartesian_2d(0.0..xmax, 0.0..n as f64)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n * 2 + 1)
        .y_label_formatter(&|y| {
            let i = y.floor() as usize;
            if (y - y.floor() - 0.5).abs() < 0.01 {
                names.get(n - 1 - i.min(n - 1)).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc("GPU-hours")
        .label_style(("sans-serif", 17))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    for (k, g) in groups.iter().enumerate() {
        let y = (n - 1 - k) as f64;
        let mut x0 = 0.0;
        for (v, (_, color)) in parts(g).iter().zip(PARTS) {
            if *v > 0.0 {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x0, y + 0.2), (x0 + v, y + 0.8)],
                    color.filled(),
                )))?;
            }
            x0 += v;
        }
    }
    root.present()?;
    Ok(())
}

/// The showback section: the stacked bars, the table, the check, the policy and notes.
pub(super) fn section(
    w: &mut String,
    s: &truthscale_core::showback::Showback,
    digits: usize,
) -> anyhow::Result<()> {
    let mut svg = String::new();
    showback_chart(s, &mut svg).map_err(|e| anyhow::anyhow!("the showback chart: {e}"))?;
    let legend: Vec<String> = PARTS
        .iter()
        .map(|(name, c)| {
            format!(
                "<span style=\"display:inline-block;width:12px;height:12px;background:rgb({},{},{})\"></span> {name}",
                c.0, c.1, c.2
            )
        })
        .collect();
    let _ = writeln!(
        w,
        "<h2>Showback by {}</h2>\n<p class=\"muted\">Allocated GPU-hours of each group, split into {}.</p><div class=\"chart\" id=\"showback\">{svg}</div>",
        esc(&s.by),
        legend.join(" ")
    );
    let _ = writeln!(
        w,
        "<table id=\"showback-table\"><tr><th>group</th><th>allocated</th><th>requested</th><th>busy (flag)</th><th>effective compute</th><th>used</th><th>idle</th><th>unmeasured</th><th>use unknown</th><th>unavailable</th><th>time-sliced effective compute (device's, 1/k each)</th><th>effective compute estimate (never billed)</th><th>cost</th><th>idle cost</th><th>energy (kWh)</th><th>energy cost</th></tr>"
    );
    let h = |x: f64| hours(x, digits);
    let priced = s.priced;
    for g in &s.total.groups {
        let _ = writeln!(
            w,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&group_name(g)),
            h(g.allocated_gpu_hours),
            hours_or_unknown(g.requested_gpu_hours, digits),
            hours_or_unknown(g.busy_gpu_hours, digits),
            hours_or_unknown(g.effective_compute_gpu_hours, digits),
            h(g.used_gpu_hours),
            h(g.idle_gpu_hours),
            h(g.unmeasured_gpu_hours),
            h(g.use_unknown_gpu_hours),
            hours_or_unknown(g.unavailable_gpu_hours, digits),
            hours_or_none(g.time_sliced_effective_compute_gpu_hours, digits),
            hours_or_none(g.effective_compute_estimate_gpu_hours, digits),
            cost_priced(g.cost.as_ref().map(|c| c.allocated), priced),
            cost_priced(g.cost.as_ref().map(|c| c.idle), priced),
            kwh_or_none(g.energy_kwh),
            cost_or_none(g.energy_cost),
        );
    }
    unallocated_row(w, s, digits);
    let energy = s.total.energy.as_ref();
    if let Some(e) = energy {
        let _ = writeln!(
            w,
            "<p id=\"energy-check\">energy: fleet {} kWh{}; check: {}</p>",
            kwh_or_none(Some(e.fleet_kwh)),
            e.fleet_cost
                .map(|c| format!(" ({})", cost_or_none(Some(c))))
                .unwrap_or_default(),
            esc(&e.check)
        );
    }
    let _ = writeln!(w, "<ul>");
    for p in s.policy.iter().chain(&s.notes) {
        let _ = writeln!(w, "<li>{}</li>", esc(p));
    }
    let _ = writeln!(w, "</ul>");
    Ok(())
}

/// The table's `(unallocated)` row, marked `[SIMULATED]` as the text table's is where any of
/// its GPU-hours were a simulated GPU's, and the `(allocation unknown)` row where any
/// GPU-hours were; the table's end and its checks.
fn unallocated_row(w: &mut String, s: &truthscale_core::showback::Showback, digits: usize) {
    let t = &s.total;
    let energy = t.energy.as_ref();
    let mark = |simulated| if simulated { " [SIMULATED]" } else { "" };
    let _ = write!(
        w,
        "<tr><td>(unallocated){}</td><td>{}</td><td colspan=\"10\"></td><td>{}</td><td></td><td>{}</td><td>{}</td></tr>",
        mark(t.unallocated_simulated),
        hours(t.unallocated_gpu_hours, digits),
        cost_priced(t.unallocated_cost, s.priced),
        kwh_or_none(energy.map(|e| e.unallocated_kwh)),
        cost_or_none(energy.and_then(|e| e.unallocated_cost)),
    );
    // Nothing of the GPU read: no energy either.
    if t.allocation_unknown_gpu_hours > 0.0 {
        let _ = write!(
            w,
            "<tr><td>(allocation unknown){}</td><td>{}</td><td colspan=\"10\"></td><td>{}</td><td></td><td>{}</td><td>{}</td></tr>",
            mark(t.allocation_unknown_simulated),
            hours(t.allocation_unknown_gpu_hours, digits),
            cost_priced(t.allocation_unknown_cost, s.priced),
            kwh_or_none(None),
            cost_or_none(None),
        );
    }
    let _ = writeln!(
        w,
        "</table>\n<p id=\"showback-check\">check: {}</p><p id=\"allocation-check\">{}</p>",
        esc(&t.check),
        esc(&s.allocation.check)
    );
}

/// A group's name as the table shows it: marked `[SIMULATED]` where any of its GPU-hours
/// were of a simulated GPU.
fn group_name(g: &truthscale_core::showback::GroupHours) -> String {
    if g.simulated {
        format!("{} [SIMULATED]", g.group)
    } else {
        g.group.clone()
    }
}

#[cfg(test)]
mod tests {
    use truthscale_core::showback::{Period, Showback};

    /// The page's `(unallocated)` row is marked `[SIMULATED]` where any of its GPU-hours
    /// were a simulated GPU's, as the text table's is; not otherwise.
    #[test]
    fn the_unallocated_row_says_simulated() {
        let page = |simulated| {
            let s = Showback {
                by: "namespace".into(),
                total: Period {
                    unallocated_gpu_hours: 1.0,
                    unallocated_simulated: simulated,
                    ..Period::default()
                },
                ..Showback::default()
            };
            let mut w = String::new();
            super::section(&mut w, &s, 1).expect("the section renders");
            w
        };
        assert!(page(true).contains("<td>(unallocated) [SIMULATED]</td>"));
        assert!(page(false).contains("<td>(unallocated)</td>"));
    }

    /// GPU-hours whose allocation is unknown have a row of their own, priced, with no energy
    /// (nothing of the GPU was read); none where there were none.
    #[test]
    fn allocation_unknown_has_a_row_of_its_own() {
        let page = |hours: f64| {
            let s = Showback {
                by: "namespace".into(),
                total: Period {
                    unallocated_gpu_hours: 1.0,
                    unallocated_cost: Some(4.0),
                    allocation_unknown_gpu_hours: hours,
                    allocation_unknown_cost: Some(hours * 4.0),
                    ..Period::default()
                },
                priced: true,
                ..Showback::default()
            };
            let mut w = String::new();
            super::section(&mut w, &s, 1).expect("the section renders");
            w
        };
        let row = "<tr><td>(allocation unknown)</td><td>0.5</td><td colspan=\"10\"></td><td>2.00</td><td></td><td>—</td><td>—</td></tr></table>";
        assert!(page(0.5).contains(row), "{}", page(0.5));
        assert!(!page(0.0).contains("(allocation unknown)"));
    }
}
