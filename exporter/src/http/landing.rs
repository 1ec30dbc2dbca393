//! The landing page at `/`: per GPU, reported against effective, phase, fidelity and the
//! verdict (a starved GPU with its cause and what to do).

use std::fmt::Write as _;
use truthscale_core::exposition::GpuEntry;
use truthscale_core::tracker::EntityWindow;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "—".to_string(), |v| format!("{:.1}%", v * 100.0))
}

/// One GPU's row: reported against effective, phase, fidelity, and the verdict (a starved
/// GPU's cause with the number behind it, and what to do).
fn row(w: &EntityWindow, rows: &mut String) {
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
    let verdict = match w.verdict.cause() {
        Some(c) => format!(
            "{}: {}<br><span class=\"why\">{}</span>",
            w.verdict.verdict,
            esc(&c.to_string()),
            esc(&c.advice())
        ),
        None => w.verdict.verdict.to_string(),
    };
    let _ = writeln!(
        rows,
        "<tr><td>{}</td><td>{}{sim}</td><td>{}</td>\
         <td><div class=\"bar\">{}{}</div></td>\
         <td class=\"phase {}\">{}</td><td>{}</td><td>{verdict}</td></tr>",
        esc(&w.id.to_string()),
        esc(w.id.model.as_deref().unwrap_or("unknown")),
        format_args!("{} / {}", pct(m.reported_utilization), effective),
        bar("rep", m.reported_utilization),
        bar("eff", m.effective_compute),
        w.phase.map_or("unknown", |p| p.as_str()),
        // Serving words (prefill, decode) only where the workload is LLM serving; one
        // guessed from power says it is an estimate.
        crate::view::phase_shown(w).unwrap_or_else(|| "unknown".into()),
        w.capability.as_str(),
    );
}

/// Render the page for one snapshot.
#[must_use]
pub(crate) fn render(gpus: &[GpuEntry], source: &str, up: bool, taken_unix_ms: i64) -> String {
    let mut rows = String::new();
    for g in gpus {
        if g.up {
            row(&g.window, &mut rows);
        } else {
            // A GPU that stopped is named, never left off as if it were not there.
            let _ = writeln!(
                rows,
                "<tr><td>{}</td><td>{}</td><td colspan=\"5\">down: no data within the stale period</td></tr>",
                esc(&g.window.id.to_string()),
                esc(g.window.id.model.as_deref().unwrap_or("unknown")),
            );
        }
    }
    if gpus.is_empty() {
        rows.push_str("<tr><td colspan=\"7\">No GPU readings yet.</td></tr>\n");
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
.why {{ color: #555; font-size: .85em; }}
</style></head><body>
<h1>truthscale</h1>
<p>Source <b>{source}</b> ({status}). Reported utilization is the busy flag nvidia-smi shows;
effective is tensor work against the datasheet peak. <a href="/metrics">Metrics</a></p>
<table>
<tr><th>GPU</th><th>Model</th><th>Reported / effective</th><th>(orange reported, blue effective)</th><th>Phase</th><th>Fidelity</th><th>Verdict</th></tr>
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

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::derive::DeriveConfig;
    use truthscale_core::model::{EntityId, EntitySample, Field, Readings, Sample, Timestamp};
    use truthscale_core::tracker::Deriver;

    /// H100 number `n` with the readings `pairs`.
    fn h100(n: u32, pairs: &[(Field, f64)]) -> EntitySample {
        let mut r = Readings::default();
        for &(f, v) in pairs {
            r.set_value(f, v);
        }
        EntitySample {
            id: EntityId {
                gpu: Some(n),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                ..EntityId::default()
            },
            readings: r,
            ..EntitySample::default()
        }
    }

    /// The windows of the third of three samples a second apart, each of `entities()`.
    fn three_windows(
        entities: impl Fn() -> Vec<EntitySample>,
    ) -> Vec<truthscale_core::tracker::EntityWindow> {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut windows = Vec::new();
        for t in 0..3 {
            windows = d
                .observe(&Sample {
                    taken: Timestamp(t * 1000),
                    entities: entities(),
                })
                .windows;
        }
        windows
    }

    /// A starved H100 whose pod is CFS-throttled in 60 % of its periods under a 2-CPU
    /// limit shows its cause, the number behind it and what to do; a busy one shows none.
    #[test]
    fn a_starved_gpu_shows_its_cause_and_what_to_do() {
        let gpu = |n: u32, tensor: f64, throttled: f64| {
            h100(
                n,
                &[
                    (Field::ReportedUtil, 0.97),
                    (Field::SmActive, 0.5),
                    (Field::TensorActive, tensor),
                    (Field::DramActive, 0.1),
                    (Field::HolderCpuThrottledRatio, throttled),
                    (Field::HolderCpuLimitCores, 2.0),
                ],
            )
        };
        let windows = three_windows(|| vec![gpu(0, 0.05, 0.6), gpu(1, 0.7, 0.6)]);
        let entries: Vec<GpuEntry> = windows
            .into_iter()
            .map(|window| GpuEntry {
                window,
                source: "nvml",
                up: true,
                list_cap: None,
            })
            .collect();
        let page = render(&entries, "nvml", true, 0);
        assert!(
            page.contains(
                "<td>starved: cpu_throttled (cpu_throttled_ratio 0.60, at or above 0.25)<br>\
                 <span class=\"why\">raise the pod's CPU limit from 2"
            ),
            "{page}"
        );
        assert!(page.contains("<td>busy</td></tr>"), "{page}");
    }

    /// A phase guessed from power (no SM or tensor counter read) says it is an estimate,
    /// as `/metrics` labels it; a GPU that stopped is named as down, not left off, and the
    /// page does not say no GPU was read.
    #[test]
    fn a_phase_from_power_is_an_estimate_and_a_stopped_gpu_is_named() {
        let gpu = |n: u32| {
            h100(
                n,
                &[(Field::ReportedUtil, 0.97), (Field::PowerWatts, 650.0)],
            )
        };
        let windows = three_windows(|| vec![gpu(0), gpu(1)]);
        assert_eq!(
            windows[0].phase_method,
            Some(truthscale_core::phase::PhaseMethod::PowerHeuristic)
        );
        let name = windows[0].phase.unwrap().name_for(windows[0].llm_serving);
        let entries: Vec<GpuEntry> = windows
            .into_iter()
            .enumerate()
            .map(|(i, window)| GpuEntry {
                window,
                source: "nvml",
                up: i == 0,
                list_cap: None,
            })
            .collect();
        let page = render(&entries, "nvml", true, 0);
        assert!(page.contains(&format!(">{name} (estimate)</td>")), "{page}");
        assert!(
            page.contains(
                "<tr><td>gpu 1</td><td>NVIDIA H100 80GB HBM3</td><td colspan=\"5\">down: no data within the stale period</td></tr>"
            ),
            "{page}"
        );
        assert!(!page.contains("No GPU readings yet."), "{page}");
    }
}
