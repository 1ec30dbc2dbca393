//! The report as one self-contained HTML page: inline CSS, charts as inline SVG drawn with
//! plotters' SVG backend, no script, no external font or image. Layout only: it walks
//! [`SECTIONS`], and every figure comes formatted from [`super::format`].

use super::Document;
use super::format::{self, binding, count, gib, gpus, json_name, pct, peak_cost, smaller_cost};
use super::sections::{SECTIONS, Section};
use plotters::prelude::*;
use std::fmt::Write as _;
use truthscale_core::fleet::{FleetReport, RightSizing, Sizing, Summary};

/// Escape text for HTML.
pub(super) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const WIDTH: u32 = 960;

type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Bars: GPUs allocated, what the busy flag claims, and the two answers.
fn bar_chart(doc: &Document, svg: &mut String) -> Drawn {
    let z = &doc.fleet.sizing;
    // Without pods, allocation is unknown: the GPUs reporting, named as such.
    let (first, peak) = match z.allocated_gpus {
        Some(a) => ("allocated (peak)", Some(a.max)),
        None => ("GPUs reporting (peak)", z.gpus_reporting.map(|s| s.max)),
    };
    let bars: Vec<(&str, Option<f64>, RGBColor)> = vec![
        (first, peak, RGBColor(90, 90, 90)),
        (
            "busy flag (p99)",
            z.busy_claim_gpus.summary.map(|s| s.p99),
            RGBColor(230, 126, 34),
        ),
        (
            "pooled lower bound",
            z.pooled_lower_bound.as_ref().map(|b| b.gpus as f64),
            RGBColor(39, 174, 96),
        ),
        (
            "packed",
            z.packing.as_ref().map(|p| p.gpus as f64),
            RGBColor(192, 57, 43),
        ),
    ];
    let ymax = bars.iter().filter_map(|b| b.1).fold(1.0_f64, f64::max) * 1.2;
    let root = SVGBackend::with_string(svg, (WIDTH, 280)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = bars.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..n, 0.0..ymax)?;
    let names: Vec<String> = bars.iter().map(|b| b.0.to_owned()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("GPUs")
        .label_style(("sans-serif", 17))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    for (i, (_, v, color)) in bars.iter().enumerate() {
        if let Some(v) = v {
            let x = i as f64;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x + 0.2, 0.0), (x + 0.8, *v)],
                color.filled(),
            )))?;
            // The same figure as the numbers above and the table, formatted as they are:
            // GPU counts as counts, the busy flag's GPU-equivalents with two decimals.
            let label = if i == 1 {
                gpus(Some(*v))
            } else {
                count(Some(*v))
            };
            chart.draw_series(std::iter::once(Text::new(
                label,
                (x + 0.42, *v + ymax * 0.08),
                ("sans-serif", 17),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}

/// Decimals of GPU-hours and hours on the page.
const DIGITS: usize = 2;

/// The page.
///
/// # Errors
/// A chart could not be drawn.
pub(crate) fn render(doc: &Document) -> anyhow::Result<String> {
    let f = &doc.fleet;
    let mut h = String::new();
    let w = &mut h;
    head(w);
    for section in SECTIONS {
        match section {
            Section::Header => header(w, doc),
            Section::Funnel => {
                if let Some(fu) = &doc.funnel {
                    super::funnel::html(w, fu, DIGITS)?;
                }
            }
            Section::Sizing => sizing(w, doc)?,
            Section::Colocation => colocation(w, f),
            Section::Rightsizing => rightsizing(w, f),
            Section::Idle => super::idle::html(w, f, DIGITS),
            Section::Waits => super::waits::html(w, f, DIGITS),
            Section::Savings => savings(w, f),
            Section::Showback => {
                if let Some(s) = &doc.showback {
                    super::showback_html::section(w, s, DIGITS)?;
                }
            }
            // The page has no table of clusters: the JSON and the text have it.
            Section::Clusters => {}
            Section::Notes => notes(w, f),
            Section::Method => {
                let _ = writeln!(w, "<h2>Method and assumptions</h2><ul>");
                for m in &f.method {
                    let _ = writeln!(w, "<li>{}</li>", esc(m));
                }
                let _ = writeln!(w, "</ul>");
            }
        }
    }
    let _ = writeln!(w, "</body></html>");
    Ok(h)
}

/// The document's head, its inline style, and the body's start.
fn head(w: &mut String) {
    let _ = writeln!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>truthscale report</title><style>\
body{{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;max-width:1000px}}\
h1{{font-size:22px;margin:0 0 4px}}h2{{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}}\
table{{border-collapse:collapse;font-size:13px}}td,th{{padding:3px 8px;border-bottom:1px solid #eee;text-align:left}}\
th{{background:#f6f6f6}}td.n{{text-align:right;font-variant-numeric:tabular-nums}}\
.sim{{background:#c0392b;color:#fff;padding:2px 8px;border-radius:3px;font-weight:bold}}\
.big{{font-size:28px;font-weight:bold}}.muted{{color:#666;font-size:13px}}\
.chart svg{{max-width:100%;height:auto}}\
.legend{{font-size:14px}}.key{{margin-right:18px;white-space:nowrap}}.swatch{{display:inline-block;width:28px;margin-right:6px;vertical-align:middle}}</style></head><body>"
    );
}

/// The title, the simulator's mark, where the history came from and the window.
fn header(w: &mut String, doc: &Document) {
    let (f, s) = (&doc.fleet, &doc.source);
    let _ = writeln!(
        w,
        "<h1>truthscale report{}</h1>\n<p class=\"muted\">{} ({}){} &middot; {} to {} &middot; every {} s{} &middot; {} of {} steps with data &middot; {} &middot; schema {} v{}</p>",
        if f.simulated {
            " <span class=\"sim\">SIMULATED</span>"
        } else {
            ""
        },
        esc(&s.prometheus),
        esc(s.family),
        s.selector
            .as_ref()
            .map(|m| format!(", {{{}}}", esc(m)))
            .unwrap_or_default(),
        esc(&s.start),
        esc(&s.end),
        s.step_seconds,
        super::step_reading(s),
        f.steps_with_data,
        f.steps,
        esc(&format::scope(f)),
        super::SCHEMA,
        super::SCHEMA_VERSION,
    );
}

/// The answers (GPUs needed against allocated), the two charts, the table of
/// GPU-equivalents, the pooled lower bound and the workloads left out of the packing.
fn sizing(w: &mut String, doc: &Document) -> anyhow::Result<()> {
    let timeline = super::timeline::html(doc)?;
    let mut bar_svg = String::new();
    bar_chart(doc, &mut bar_svg).map_err(|e| anyhow::anyhow!("drawing the bar chart: {e}"))?;
    let z = &doc.fleet.sizing;
    let _ = write!(w, "<h2>GPUs needed vs allocated</h2>\n<p>");
    let _ = writeln!(
        w,
        "allocated (peak): <span class=\"big\">{}</span> &nbsp; pooled lower bound: <span class=\"big\" id=\"pooled\">{}</span> &nbsp; packed: <span class=\"big\" id=\"packed\">{}</span></p>",
        count(z.allocated_gpus.map(|a| a.max)),
        count(z.pooled_lower_bound.as_ref().map(|b| b.gpus)),
        count(z.packing.as_ref().map(|p| p.gpus)),
    );
    let _ = writeln!(w, "<div class=\"chart\" id=\"bars\">{bar_svg}</div>");
    let _ = writeln!(w, "<h2>Demand over time</h2>{timeline}");
    sizing_table(w, z);
    if let Some(b) = &z.pooled_lower_bound {
        let _ = writeln!(
            w,
            "<p>Pooled lower bound {}: compute {} GPUs, memory {} GPUs (bound by {}).</p>",
            b.gpus,
            gpus(b.compute_gpus),
            gpus(b.memory_gpus),
            binding(b.binding)
        );
    }
    if let Some(p) = &z.packing {
        for e in &p.excluded {
            let _ = writeln!(
                w,
                "<p class=\"muted\">Not packed: {}: {}.</p>",
                esc(&e.workload),
                esc(&e.reason)
            );
        }
    }
    Ok(())
}

/// The table of GPU-equivalents: allocated, reporting, and the three demands.
fn sizing_table(w: &mut String, z: &Sizing) {
    let _ = writeln!(
        w,
        "<table><tr><th>GPU-equivalents</th><th>p50</th><th>p95</th><th>p99</th><th>max</th><th>steps known</th><th>unknown for</th></tr>"
    );
    let rows: [(&str, Option<&Summary>, &[String]); 5] = [
        ("allocated GPUs", z.allocated_gpus.as_ref(), &[]),
        ("GPUs reporting", z.gpus_reporting.as_ref(), &[]),
        (
            "busy flag claims",
            z.busy_claim_gpus.summary.as_ref(),
            &z.busy_claim_gpus.unmeasured,
        ),
        (
            "compute demand",
            z.compute_demand_gpus.summary.as_ref(),
            &z.compute_demand_gpus.unmeasured,
        ),
        (
            "memory demand",
            z.memory_demand_gpus.summary.as_ref(),
            &z.memory_demand_gpus.unmeasured,
        ),
    ];
    for (name, sum, unknown) in rows {
        let _ = match sum {
            Some(x) => writeln!(
                w,
                "<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>",
                esc(name),
                gpus(Some(x.p50)),
                gpus(Some(x.p95)),
                gpus(Some(x.p99)),
                gpus(Some(x.max)),
                x.steps_known,
                esc(&unknown.join(", "))
            ),
            None => writeln!(
                w,
                "<tr><td>{}</td><td colspan=5>unknown</td><td>{}</td></tr>",
                esc(name),
                esc(&unknown.join(", "))
            ),
        };
    }
    let _ = writeln!(w, "</table>");
}

/// The co-location candidates, every one.
fn colocation(w: &mut String, f: &FleetReport) {
    if f.colocation.is_empty() {
        let _ = writeln!(
            w,
            "<h2>Co-location candidates</h2>\n<p class=\"muted\">None: no two workloads fit one GPU together (their time-aligned p99 saturation and peak memory).</p>"
        );
        return;
    }
    let _ = writeln!(
        w,
        "<h2>Co-location candidates</h2>\n<table><tr><th>workloads</th><th>GPUs freed</th><th>peak memory</th><th>p99 saturation</th><th>sum of p99s</th><th>interleaved</th></tr>"
    );
    for c in &f.colocation {
        let _ = writeln!(
            w,
            "<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>",
            esc(&c.workloads.join(" + ")),
            c.gpus_freed,
            gib(Some(c.peak_memory_bytes)),
            pct(c.saturation_p99),
            pct(Some(c.sum_of_p99s)),
            if c.interleaved { "yes" } else { "" }
        );
    }
    let _ = writeln!(w, "</table>");
}

/// A workload's MIG fit in the page's words, or why none fits.
fn mig_words(r: &RightSizing) -> String {
    match (&r.mig_fit, &r.mig_fit_note) {
        // A fit beside a note: a smaller profile was withheld, and why is said.
        (Some(m), note) => format!(
            "{}{} ({}{}){}",
            m.profile,
            peak_cost(m.peak, m.profile),
            json_name(m.binding),
            if m.unmeasured.is_empty() {
                ""
            } else {
                "; not all checked"
            },
            note.as_ref().map(|n| format!("; {n}")).unwrap_or_default()
        ),
        (None, Some(n)) => n.clone(),
        _ => String::new(),
    }
}

/// The right-sizing table, every workload.
fn rightsizing(w: &mut String, f: &FleetReport) {
    let _ = writeln!(
        w,
        "<h2>Right-sizing</h2>\n<table><tr><th>workload</th><th>GPU</th><th>memory peak</th><th>memory p99</th><th>of</th><th>p99 saturation</th><th>MIG fit</th><th>smaller model</th></tr>"
    );
    for r in &f.rightsizing {
        let smaller = r
            .smaller_gpu
            .as_ref()
            .map(|g| format!("{}{}", g.name, smaller_cost(g)))
            .or_else(|| r.smaller_gpu_note.clone())
            .unwrap_or_default();
        let _ = writeln!(
            w,
            "<tr><td>{}{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.workload),
            if r.simulated {
                " <span class=\"sim\">SIM</span>"
            } else {
                ""
            },
            esc(&r.gpu),
            gib(r.memory_peak_bytes),
            gib(r.memory_p99_bytes),
            gib(r.memory_total_bytes),
            pct(r.saturation_p99),
            esc(&mig_words(r)),
            esc(&smaller),
        );
    }
    let _ = writeln!(w, "</table>");
}

/// The savings estimate and its assumptions.
fn savings(w: &mut String, f: &FleetReport) {
    let _ = writeln!(w, "<h2>Savings (estimate)</h2>");
    let Some(sv) = &f.savings else {
        let _ = writeln!(w, "<p>unknown: no packing.</p>");
        return;
    };
    let _ = writeln!(
        w,
        "<p>{}.</p><ul>",
        format::savings_sentence(sv, "&times;", ("<b>", "</b>"), DIGITS)
    );
    for a in &sv.assumptions {
        let _ = writeln!(w, "<li>assumes {}</li>", esc(a));
    }
    let _ = writeln!(w, "</ul>");
}

/// The notes, when there are any.
fn notes(w: &mut String, f: &FleetReport) {
    if !f.notes.is_empty() {
        let _ = writeln!(w, "<h2>Notes</h2><ul>");
        for n in &f.notes {
            let _ = writeln!(w, "<li>{}</li>", esc(n));
        }
        let _ = writeln!(w, "</ul>");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
