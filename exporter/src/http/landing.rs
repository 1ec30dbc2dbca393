//! The landing page at `/`: per GPU, reported against effective, phase and fidelity.

use std::fmt::Write as _;
use truthscale_core::exposition::GpuEntry;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "—".to_string(), |v| format!("{:.1}%", v * 100.0))
}

/// Render the page for one snapshot.
#[must_use]
pub(crate) fn render(gpus: &[GpuEntry], source: &str, up: bool, taken_unix_ms: i64) -> String {
    let mut rows = String::new();
    for g in gpus.iter().filter(|g| g.up) {
        let w = &g.window;
        let m = &w.metrics;
        let effective = match (m.effective_compute, m.effective_compute_upper_bound) {
            (Some(e), _) => pct(Some(e)),
            (None, Some(b)) => format!("≤ {}", pct(Some(b))),
            _ => "—".into(),
        };
        // A bar only for a measured value: an absent one is no bar, never a bar at 0.
        let bar = |class: &str, v: Option<f64>| {
            v.map_or_else(String::new, |v| {
                format!(
                    "<div class=\"{class}\" style=\"width:{:.1}%\"></div>",
                    v.clamp(0.0, 1.0) * 100.0
                )
            })
        };
        let sim = if w.simulated {
            " <span class=\"sim\">SIMULATED</span>"
        } else {
            ""
        };
        let _ = writeln!(
            rows,
            "<tr><td>{}</td><td>{}{sim}</td><td>{}</td>\
             <td><div class=\"bar\">{}{}</div></td>\
             <td class=\"phase {}\">{}</td><td>{}</td></tr>",
            esc(&w.id.to_string()),
            esc(w.id.model.as_deref().unwrap_or("unknown")),
            format_args!("{} / {}", pct(m.reported_utilization), effective),
            bar("rep", m.reported_utilization),
            bar("eff", m.effective_compute),
            w.phase.map_or("unknown", |p| p.as_str()),
            // Serving words (prefill, decode) only where the workload is LLM serving.
            w.phase.map_or("unknown", |p| p.name_for(w.llm_serving)),
            w.capability.as_str(),
        );
    }
    if !gpus.iter().any(|g| g.up) {
        rows.push_str("<tr><td colspan=\"6\">No GPU readings yet.</td></tr>\n");
    }
    let status = if up { "up" } else { "stale" };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>truthscale</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #1d1d1f; }}
table {{ border-collapse: collapse; }}
td, th {{ padding: .4em .8em; border-bottom: 1px solid #ddd; text-align: left; }}
.bar {{ position: relative; width: 220px; height: 14px; background: #eee; }}
.rep {{ position: absolute; height: 14px; background: #f4b183; }}
.eff {{ position: absolute; height: 14px; background: #2e75b6; }}
.sim {{ background: #ffd966; padding: 0 .3em; font-size: .8em; }}
.phase.stalled {{ color: #c00000; font-weight: bold; }}
</style></head><body>
<h1>truthscale</h1>
<p>Source <b>{source}</b> ({status}). Reported utilization is the busy flag nvidia-smi shows;
effective is tensor work against the datasheet peak. <a href="/metrics">Metrics</a></p>
<table>
<tr><th>GPU</th><th>Model</th><th>Reported / effective</th><th>(orange reported, blue effective)</th><th>Phase</th><th>Fidelity</th></tr>
{rows}</table>
<p><small>Snapshot taken {taken}. The page refreshes every 5 seconds.</small></p>
</body></html>
"#,
        source = esc(source),
        taken = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH
                + std::time::Duration::from_millis(taken_unix_ms.max(0).unsigned_abs())
        ),
    )
}
