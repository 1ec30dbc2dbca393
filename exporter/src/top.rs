//! `truthscale top`: one row per GPU with reported vs effective, phase, verdict, KV cache
//! and queue, and a sparkline of recent effective compute. Plain text, redrawn in place on
//! a terminal; `--once` prints one frame and exits.

use crate::explain::{self, GpuView};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use truthscale_core::verdict::VerdictConfig;

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// A sparkline of the last `width` values (0..1).
#[must_use]
pub fn sparkline(values: &[f64], width: usize) -> String {
    let start = values.len().saturating_sub(width);
    values[start..]
        .iter()
        .map(|v| SPARK[((v.clamp(0.0, 1.0) * 7.0).round() as usize).min(7)])
        .collect()
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |v| format!("{:.0}%", v * 100.0))
}

/// One frame as text.
#[must_use]
pub fn frame(views: &[GpuView]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<6} {:>8} {:>9} {:>10} {:<11} {:<9} {:>6} {:>6}  EFFECTIVE (recent)",
        "GPU", "REPORTED", "EFFECTIVE", "SATURATION", "PHASE", "VERDICT", "KV", "QUEUE"
    );
    for v in views {
        let gpu = v.gpu.map_or_else(|| "?".to_string(), |g| g.to_string());
        let effective = match (v.effective, v.upper_bound) {
            (Some(e), _) => pct(Some(e)),
            (None, Some(b)) => format!("≤{}", pct(Some(b))),
            _ => "—".to_string(),
        };
        let sv = v.serving.as_ref().filter(|s| s.absent_reason.is_none());
        let _ = writeln!(
            o,
            "{:<6} {:>8} {:>9} {:>10} {:<11} {:<9} {:>6} {:>6}  {}",
            gpu,
            pct(v.reported),
            effective,
            pct(v.saturation),
            v.phase.as_deref().unwrap_or("—"),
            v.verdict.as_ref().map_or("—", |r| r.verdict.as_str()),
            pct(sv.and_then(|s| s.kv_cache_utilization)),
            sv.and_then(|s| s.queued_requests)
                .map_or_else(|| "—".to_string(), |q| format!("{q:.0}")),
            sparkline(&v.history, 30)
        );
    }
    o
}

/// Run `truthscale top`.
///
/// # Errors
/// The input cannot be read.
pub fn run(args: &crate::cli::TopArgs) -> anyhow::Result<()> {
    let cfg = VerdictConfig::default();
    let tty = std::io::stdout().is_terminal();
    let mut history: std::collections::BTreeMap<Option<u32>, Vec<f64>> = Default::default();
    loop {
        let mut views = explain::load(args.replay.as_deref(), args.url.as_deref(), &cfg)?;
        if args.url.is_some() {
            for v in &mut views {
                let h = history.entry(v.gpu).or_default();
                h.extend(v.history.iter().copied());
                let excess = h.len().saturating_sub(explain::HISTORY);
                h.drain(..excess);
                v.history.clone_from(h);
            }
        }
        let text = frame(&views);
        let mut out = std::io::stdout().lock();
        if tty && !args.once {
            write!(out, "\x1b[H\x1b[2J")?;
        }
        write!(out, "{text}")?;
        out.flush()?;
        if args.once || args.replay.is_some() && !tty {
            return Ok(());
        }
        std::thread::sleep(args.interval);
    }
}
