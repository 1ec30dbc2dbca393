//! The report's funnel ([`truthscale_core::showback::Funnel`]): where the fleet's GPU-hours
//! went, from all of them to the effective compute done. Its stages do not depend on how
//! pods are grouped, so it is the showback's own where `--by` asked for one, else the
//! showback of every holder in one group.

use super::format::{UNKNOWN, hours, hours_or_unknown, pct};
use super::html::esc;
use super::showback::{Held, holders_in};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::io::{Result, Write};
use truthscale_core::fleet::{FleetConfig, FleetInput};
use truthscale_core::showback::{Funnel, Holders, ShowbackConfig, showback};

/// The group every holder is put in: the funnel's stages do not depend on groups.
pub(crate) const ALL: &str = "all";

/// The funnel of `input`, with node mode's holders `held` of GPUs whose series name no pod
/// (`per` steps per point) and the idle thresholds of `cfg`.
pub(crate) fn funnel(input: &FleetInput, held: &[Held], cfg: &FleetConfig, per: usize) -> Funnel {
    of_holders(input, &holders_in(held, per, |_| ALL.to_owned()), cfg)
}

/// The funnel of `input` with `holders` (in group [`ALL`]).
pub(crate) fn of_holders(input: &FleetInput, holders: &Holders, cfg: &FleetConfig) -> Funnel {
    let groups: Vec<Option<String>> = input
        .tracks
        .iter()
        .map(|t| t.pod.as_ref().map(|_| ALL.to_owned()))
        .collect();
    let sb = showback(
        input,
        &groups,
        holders,
        &Default::default(),
        &ShowbackConfig {
            by: ALL.into(),
            idle_busy_below: cfg.idle_busy_below,
            idle_compute_below: cfg.idle_compute_below,
            period_steps: None,
            period_offset: 0,
            default_price: None,
            prices: Vec::new(),
            energy_price_per_kwh: None,
        },
    );
    sb.total.funnel
}

/// A stage: its name, its GPU-hours (`None`: unknown), and the loss before it (named, its
/// hours `None` where unknown), `None` for the first.
type Stage = (
    &'static str,
    Option<f64>,
    Option<(&'static str, Option<f64>)>,
);

/// Each stage with its GPU-hours and the loss before it.
fn stages(f: &Funnel) -> [Stage; 5] {
    [
        ("total", Some(f.total_gpu_hours), None),
        (
            "healthy",
            Some(f.healthy_gpu_hours),
            Some(("unavailable", f.unavailable_gpu_hours)),
        ),
        (
            "allocated",
            Some(f.allocated_gpu_hours),
            Some(("unallocated", Some(f.unallocated_gpu_hours))),
        ),
        (
            "active (busy)",
            Some(f.active_gpu_hours),
            Some(("idle held", Some(f.idle_held_gpu_hours))),
        ),
        (
            // Where some active hours' effective compute was not measured, the figure is a
            // lower bound, and says so.
            if f.effective_unmeasured_gpu_hours > 0.0 {
                "effective ≥"
            } else {
                "effective"
            },
            f.effective_gpu_hours,
            Some(("busy but not computing", f.busy_not_computing_gpu_hours)),
        ),
    ]
}

/// The loss of a stage, in words: `−0.10 h unavailable`, with the hours whose use was not
/// measured beside the idle ones (they are lost to the active stage too, unknown how).
fn loss_words(f: &Funnel, loss: Option<(&str, Option<f64>)>, digits: usize) -> String {
    let Some((name, h)) = loss else {
        return String::new();
    };
    let mut s = match h {
        Some(h) => format!("−{} h {name}", hours(h, digits)),
        None => format!("{name} {UNKNOWN}"),
    };
    if name == "idle held" && f.use_unmeasured_gpu_hours > 0.0 {
        s.push_str(&format!(
            ", −{} h use not measured",
            hours(f.use_unmeasured_gpu_hours, digits)
        ));
    }
    if name == "unallocated" && f.allocation_unknown_gpu_hours > 0.0 {
        s.push_str(&format!(
            ", −{} h allocation unknown",
            hours(f.allocation_unknown_gpu_hours, digits)
        ));
    }
    if name == "busy but not computing" && f.effective_unmeasured_gpu_hours > 0.0 {
        s.push_str(&format!(
            ", −{} h effective compute not measured",
            hours(f.effective_unmeasured_gpu_hours, digits)
        ));
    }
    s
}

/// Where effective compute was not read for some active hours, the bound it leaves, in
/// words.
fn effective_bound(f: &Funnel, digits: usize) -> Option<String> {
    (f.effective_unmeasured_gpu_hours > 0.0).then(|| {
        format!(
            "effective compute was not measured for {} of the active GPU-hours (no tensor activity read, or no SM clock or catalog model to correct it): effective is at least {} and at most {} GPU-hours (each such hour at most a whole GPU's); the tensor activity and the SM clock of a catalog model make it exact",
            hours(f.effective_unmeasured_gpu_hours, digits),
            hours(f.effective_gpu_hours.unwrap_or(0.0), digits),
            hours(
                f.effective_gpu_hours.unwrap_or(0.0) + f.effective_unmeasured_gpu_hours,
                digits
            )
        )
    })
}

/// The section on the terminal.
///
/// # Errors
/// Writing fails.
pub(super) fn text(out: &mut impl Write, f: &Funnel, digits: usize) -> Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "WHERE THE GPU-HOURS WENT (total → healthy → allocated → active → effective)"
    )?;
    for (name, h, loss) in stages(f) {
        let share = h
            .filter(|_| f.total_gpu_hours > 0.0)
            .map(|h| h / f.total_gpu_hours);
        let loss = loss_words(f, loss, digits);
        let sep = if loss.is_empty() { "" } else { "   " };
        writeln!(
            out,
            "  {name:<14} {:>10} GPU-hours {:>6}{sep}{loss}",
            hours_or_unknown(h, digits),
            pct(share)
        )?;
    }
    writeln!(out, "  check: {}", f.check)?;
    if let Some(bound) = effective_bound(f, digits) {
        writeln!(out, "  {bound}")?;
    }
    if f.health_unread_gpu_hours > 0.0 {
        writeln!(
            out,
            "  {} GPU-hours with no health field read are counted healthy",
            hours(f.health_unread_gpu_hours, digits)
        )?;
    }
    Ok(())
}

/// Bar colours, stage by stage.
const COLORS: [RGBColor; 5] = [
    RGBColor(90, 90, 90),
    RGBColor(52, 152, 219),
    RGBColor(142, 68, 173),
    RGBColor(230, 126, 34),
    RGBColor(39, 174, 96),
];

/// One horizontal bar per stage, labelled with its GPU-hours and the loss before it.
fn chart(
    f: &Funnel,
    svg: &mut String,
    digits: usize,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let st = stages(f);
    let n = st.len();
    let xmax = f.total_gpu_hours.max(1e-9) * 1.6;
    let root = SVGBackend::with_string(svg, (960, 60 + 40 * n as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let names: Vec<&str> = st.iter().map(|s| s.0).collect();
    let mut c = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(130)
        .build_cartesian_2d(0.0..xmax, 0.0..n as f64)?;
    c.configure_mesh()
        .disable_y_mesh()
        .y_labels(n * 2 + 1)
        .y_label_formatter(&|y| {
            let i = y.floor() as usize;
            let mid = (y - y.floor() - 0.5).abs() < 0.01;
            let name = names.get(n - 1 - i.min(n - 1)).copied().unwrap_or("");
            if mid { name.to_owned() } else { String::new() }
        })
        .label_style(("sans-serif", 17))
        .axis_desc_style(("sans-serif", 17))
        .x_desc("GPU-hours")
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    for (k, ((_, h, loss), color)) in st.iter().zip(COLORS).enumerate() {
        let y = (n - 1 - k) as f64;
        // An unknown stage has no bar: its label says so.
        let width = h.unwrap_or(0.0);
        c.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y + 0.2), (width, y + 0.8)],
            color.filled(),
        )))?;
        let shown = h.map_or_else(|| UNKNOWN.to_owned(), |h| format!("{} h", hours(h, digits)));
        let label = format!("{shown}  {}", loss_words(f, *loss, digits));
        c.draw_series(std::iter::once(Text::new(
            label,
            (width + xmax * 0.01, y + 0.62),
            ("sans-serif", 17),
        )))?;
    }
    root.present()?;
    Ok(())
}

/// The section on the page: the chart first, then the check.
///
/// # Errors
/// The chart could not be drawn.
pub(super) fn html(w: &mut String, f: &Funnel, digits: usize) -> anyhow::Result<()> {
    let mut svg = String::new();
    chart(f, &mut svg, digits).map_err(|e| anyhow::anyhow!("the funnel chart: {e}"))?;
    let _ = writeln!(
        w,
        "<h2>Where the GPU-hours went</h2>\n<p class=\"muted\">Total → healthy → allocated → active (busy) → effective compute, in GPU-hours, each stage's loss named.</p><div class=\"chart\" id=\"funnel\">{svg}</div><p class=\"muted\" id=\"funnel-check\">check: {}</p>",
        esc(&f.check)
    );
    if f.health_unread_gpu_hours > 0.0 {
        let _ = writeln!(
            w,
            "<p class=\"muted\">{} GPU-hours with no health field read are counted healthy.</p>",
            hours(f.health_unread_gpu_hours, digits)
        );
    }
    if let Some(bound) = effective_bound(f, digits) {
        let _ = writeln!(w, "<p class=\"muted\">{}.</p>", esc(&bound));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where no active hour had effective compute read, the effective stage and the loss
    /// before it are unknown, never 0, and the bound is said.
    #[test]
    fn effective_compute_read_nowhere_is_unknown_not_zero() {
        let f = Funnel {
            total_gpu_hours: 10.0,
            healthy_gpu_hours: 10.0,
            allocated_gpu_hours: 10.0,
            active_gpu_hours: 8.0,
            effective_gpu_hours: None,
            idle_held_gpu_hours: 2.0,
            busy_not_computing_gpu_hours: None,
            effective_unmeasured_gpu_hours: 8.0,
            adds_up: true,
            ..Funnel::default()
        };
        let mut out = Vec::new();
        text(&mut out, &f, 1).unwrap();
        let out = String::from_utf8(out).unwrap();
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with("effective "))
            .unwrap();
        assert!(
            line.contains("unknown GPU-hours unknown   busy but not computing unknown, −8.0 h effective compute not measured"),
            "{line}"
        );
        assert!(!out.contains(" 0.0 GPU-hours"), "{out}");
        assert!(
            out.contains("effective is at least 0.0 and at most 8.0 GPU-hours"),
            "{out}"
        );
        let mut page = String::new();
        html(&mut page, &f, 1).unwrap();
        assert!(
            page.contains("unknown  busy but not computing unknown"),
            "{page}"
        );
    }

    /// Active hours whose effective compute was not read are named beside the busy flag's
    /// inflation, and the effective hours are given as the bound they are.
    #[test]
    fn effective_compute_not_read_is_a_bound_in_words() {
        let f = Funnel {
            total_gpu_hours: 10.0,
            healthy_gpu_hours: 10.0,
            allocated_gpu_hours: 10.0,
            active_gpu_hours: 8.0,
            effective_gpu_hours: Some(1.5),
            idle_held_gpu_hours: 2.0,
            busy_not_computing_gpu_hours: Some(2.5),
            effective_unmeasured_gpu_hours: 4.0,
            adds_up: true,
            ..Funnel::default()
        };
        let mut out = Vec::new();
        text(&mut out, &f, 1).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("−2.5 h busy but not computing, −4.0 h effective compute not measured"),
            "{out}"
        );
        assert!(
            out.contains("effective is at least 1.5 and at most 5.5 GPU-hours"),
            "{out}"
        );
        let mut page = String::new();
        html(&mut page, &f, 1).unwrap();
        assert!(page.contains("at most 5.5 GPU-hours"), "{page}");
        // Read everywhere: no such line.
        let read = Funnel {
            effective_unmeasured_gpu_hours: 0.0,
            ..f
        };
        let mut out = Vec::new();
        text(&mut out, &read, 1).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("not measured"));
    }
}
