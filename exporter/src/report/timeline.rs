//! The page's demand-over-time chart: the fleet's series per step on a clock-time axis (UTC),
//! with the two answers as horizontal lines. Series that coincide stay visible: each has a
//! width and dash of its own, the widest drawn first, and the legend sits below the plot,
//! never over it. Layout only, like [`super::html`], which calls it.

use super::Document;
use super::format::count;
use super::html::esc;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use truthscale_core::fleet::FleetReport;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 360;
/// Axis text and descriptions (plotters writes a size of 17 as 13.7 px in the SVG).
const FONT: u32 = 17;

/// How a line is drawn: its width, and its dash and gap (`None`: solid).
#[derive(Clone, Copy)]
struct Stroke {
    color: RGBColor,
    width: u32,
    dash: Option<(u32, u32)>,
}

/// A series of the chart: its name, its values per step, and its stroke.
struct Line {
    name: String,
    values: Vec<Option<f64>>,
    stroke: Stroke,
}

/// Contiguous runs of known values as `(hours, value)` points.
fn segments(values: &[Option<f64>], hours_per_step: f64) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut cur = Vec::new();
    for (i, v) in values.iter().enumerate() {
        match v {
            Some(v) => cur.push((i as f64 * hours_per_step, *v)),
            None if !cur.is_empty() => out.push(std::mem::take(&mut cur)),
            None => {}
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The fleet's series, widest first: GPUs allocated (or reporting, without pods), what the
/// busy flag claims, and the two demands; then the two answers, flat over the window.
fn lines(f: &FleetReport) -> Vec<Line> {
    let s = &f.series;
    let (name, allocated): (&str, Vec<Option<f64>>) = if f.workload_unit == "pod" {
        let a = s.allocated_gpus.iter().map(|x| x.map(f64::from)).collect();
        ("allocated GPUs", a)
    } else {
        let a = s.gpus_reporting.iter().map(|x| x.map(f64::from)).collect();
        ("GPUs reporting", a)
    };
    let stroke = |c: (u8, u8, u8), width, dash| Stroke {
        color: RGBColor(c.0, c.1, c.2),
        width,
        dash,
    };
    let flat = |v: Option<f64>| vec![v; f.steps.max(2)];
    let mut out = vec![
        (name.to_owned(), allocated, stroke((170, 170, 170), 7, None)),
        (
            "busy flag claims".into(),
            s.busy_claim_gpus.clone(),
            stroke((230, 126, 34), 4, Some((10, 6))),
        ),
        (
            "compute demand".into(),
            s.compute_demand_gpus.clone(),
            stroke((41, 128, 185), 2, None),
        ),
        (
            "memory demand".into(),
            s.memory_demand_gpus.clone(),
            stroke((142, 68, 173), 2, Some((3, 4))),
        ),
    ];
    // The two answers are often equal: the pooled bound wide and long-dashed below, the
    // packed answer thin and short-dashed over it, so both stay visible.
    let answers = [
        (
            "pooled lower bound",
            f.sizing.pooled_lower_bound.as_ref().map(|b| b.gpus as f64),
            stroke((39, 174, 96), 6, Some((16, 6))),
        ),
        (
            "packed",
            f.sizing.packing.as_ref().map(|p| p.gpus as f64),
            stroke((192, 57, 43), 2, Some((6, 4))),
        ),
    ];
    for (name, v, st) in answers {
        if let Some(v) = v {
            out.push((format!("{name}: {}", count(Some(v))), flat(Some(v)), st));
        }
    }
    out.into_iter()
        .map(|(name, values, stroke)| Line {
            name,
            values,
            stroke,
        })
        .collect()
}

/// The clock time (UTC) of `hours` after the window's start (`start_ms`): `HH:MM`, with the
/// day (`MM-DD HH:MM`) over a window longer than a day.
fn clock(start_ms: i64, hours: f64, long: bool) -> String {
    let t = crate::times::rfc3339(start_ms + (hours * 3_600_000.0).round() as i64);
    // RFC 3339: `YYYY-MM-DDTHH:MM:SSZ`.
    let (from, to) = if long { (5, 16) } else { (11, 16) };
    t.get(from..to).map_or(t.clone(), |s| s.replace('T', " "))
}

type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Draw the chart into `svg`.
fn draw(doc: &Document, lines: &[Line], svg: &mut String) -> Drawn {
    let f = &doc.fleet;
    let hps = f.step_seconds / 3600.0;
    let ymax = lines
        .iter()
        .flat_map(|l| l.values.iter().flatten().copied())
        .fold(1.0_f64, f64::max)
        * 1.15;
    let xmax = ((f.steps.max(2) - 1) as f64 * hps).max(hps);
    let long = xmax > 24.0;
    let start = doc.source.start_ms;
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_labels(8)
        .x_label_formatter(&|h| clock(start, *h, long))
        .x_desc("time (UTC)")
        .y_desc("GPUs (equivalents)")
        .label_style(("sans-serif", FONT))
        .axis_desc_style(("sans-serif", FONT))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    for l in lines {
        let st = l.stroke;
        let style = st.color.stroke_width(st.width);
        for seg in segments(&l.values, hps) {
            match st.dash {
                None => {
                    chart.draw_series(LineSeries::new(seg, style))?;
                }
                Some((dash, gap)) => {
                    chart.draw_series(std::iter::once(DashedPathElement::new(
                        seg, dash, gap, style,
                    )))?;
                }
            }
        }
    }
    root.present()?;
    Ok(())
}

/// The legend, below the plot: each series' stroke as a swatch, and its name.
fn legend(lines: &[Line]) -> String {
    let items: Vec<String> = lines
        .iter()
        .map(|l| {
            let s = l.stroke;
            let kind = if s.dash.is_some_and(|(d, _)| d <= 3) {
                "dotted"
            } else if s.dash.is_some() {
                "dashed"
            } else {
                "solid"
            };
            format!(
                "<span class=\"key\"><span class=\"swatch\" style=\"border-top:{}px {kind} rgb({},{},{})\"></span>{}</span>",
                s.width.max(2),
                s.color.0,
                s.color.1,
                s.color.2,
                esc(&l.name)
            )
        })
        .collect();
    format!("<p class=\"legend\">{}</p>", items.join(" "))
}

/// The chart and its legend, as the page places them.
///
/// # Errors
/// The chart could not be drawn.
pub(super) fn html(doc: &Document) -> anyhow::Result<String> {
    let lines = lines(&doc.fleet);
    let mut svg = String::new();
    draw(doc, &lines, &mut svg).map_err(|e| anyhow::anyhow!("drawing the time chart: {e}"))?;
    Ok(format!(
        "<div class=\"chart\" id=\"timeline\">{svg}</div>{}",
        legend(&lines)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_the_runs_of_known_values() {
        let s = segments(&[Some(1.0), None, Some(2.0), Some(3.0)], 0.5);
        assert_eq!(s, vec![vec![(0.0, 1.0)], vec![(1.0, 2.0), (1.5, 3.0)]]);
    }

    #[test]
    fn the_axis_reads_clock_time() {
        // 2025-01-06T00:00:00Z.
        let start = 1_736_121_600_000;
        assert_eq!(clock(start, 0.0, false), "00:00");
        assert_eq!(clock(start, 1.5, false), "01:30");
        assert_eq!(clock(start, 25.25, true), "01-07 01:15");
    }
}
