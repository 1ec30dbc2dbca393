//! `truthscale explain`: per GPU, in words, what the dashboard says, what the counters
//! say, the gap, the phase and verdict with reasons, what was not measured, and one
//! suggested action. Reads a replay (any capture `analyze` reads) or a running sidecar's
//! `/metrics`. The view itself ([`crate::view::GpuView`]) is shared with
//! `truthscale top`.

use crate::view::{GpuView, fetch_metrics, views_from_exposition, views_from_replay};
use anyhow::bail;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::model::Field;
use truthscale_core::verdict::VerdictConfig;

fn pct(v: f64) -> String {
    format!("{:.0} %", v * 100.0)
}

/// The explanation of one GPU, in words.
#[must_use]
pub(crate) fn explain(v: &GpuView) -> String {
    let mut o = String::new();
    // Simulated data says so, as `analyze` and `top` mark it.
    let sim = if v.simulated { "  [SIMULATED]" } else { "" };
    let _ = writeln!(o, "{}{sim}", v.name);
    dashboard(&mut o, v);
    counters(&mut o, v);
    pod_estimates(&mut o, v);
    gap(&mut o, v);
    regime(&mut o, v);
    engine(&mut o, v);
    verdict(&mut o, v);
    o
}

/// What the dashboard says: the busy flag.
fn dashboard(o: &mut String, v: &GpuView) {
    let _ = match v.reported {
        Some(u) => writeln!(
            o,
            "  dashboard says: {} utilized (the busy flag nvidia-smi shows: time with any kernel resident)",
            pct(u)
        ),
        // DCGM's graphics-engine activity stands in for the busy flag in the phase and the
        // verdict: said here, so that the verdict's "busy flag" is not a number from nowhere.
        None => match v.readings.value(Field::GrActive) {
            Some(g) => writeln!(
                o,
                "  dashboard says: nothing (no busy flag was read); the graphics engine was active {} of the time (DCGM's GR_ENGINE_ACTIVE), which stands in for the busy flag below",
                pct(g)
            ),
            None => writeln!(o, "  dashboard says: nothing (no busy flag was read)"),
        },
    };
}

/// What the counters say: effective compute and roofline saturation, or the bound.
fn counters(o: &mut String, v: &GpuView) {
    let pipes = match (v.tensor, v.dram) {
        (Some(t), Some(d)) => format!(" (tensor {}, DRAM {})", pct(t), pct(d)),
        (Some(t), None) => format!(" (tensor {})", pct(t)),
        _ => String::new(),
    };
    let _ = match (v.effective, v.saturation, v.upper_bound) {
        (Some(e), Some(s), _) => writeln!(
            o,
            "  counters say:   effective compute {}, roofline saturation {}{pipes}",
            pct(e),
            pct(s)
        ),
        (Some(e), None, _) => writeln!(
            o,
            "  counters say:   effective compute {}{pipes}; roofline saturation not measured (no DRAM reading)",
            pct(e)
        ),
        (None, Some(s), b) if v.tensor.is_some() => writeln!(
            o,
            "  counters say:   roofline saturation {}{pipes}; no effective compute (no SM-clock reading or catalog model to correct the tensor activity by){}",
            pct(s),
            // The bound `top` shows as `≤`: said here too.
            b.map_or(String::new(), |b| format!(
                ", at most {}: an upper bound",
                pct(b)
            ))
        ),
        (_, _, Some(b)) if v.tensor.is_some() => writeln!(
            o,
            "  counters say:   effective compute at most {} (no SM-clock reading or catalog model to correct the tensor activity by: an upper bound){pipes}",
            pct(b)
        ),
        (_, _, Some(b)) => writeln!(
            o,
            "  counters say:   effective compute at most {} (no tensor counter: an upper bound)",
            pct(b)
        ),
        _ => writeln!(o, "  counters say:   nothing beyond the busy flag"),
    };
}

/// The gap between the busy flag and effective compute, or what it cannot be measured
/// without.
fn gap(o: &mut String, v: &GpuView) {
    match (v.reported, v.effective) {
        (Some(u), Some(e)) if u >= 0.05 => {
            let _ = writeln!(
                o,
                "  the gap:        {:.0} points of the {} shown are not compute",
                ((u - e) * 100.0).max(0.0),
                pct(u)
            );
        }
        (Some(_), Some(_)) => {
            let _ = writeln!(o, "  the gap:        none to speak of (idle)");
        }
        (None, _) => {
            let _ = writeln!(
                o,
                "  the gap:        cannot be measured without the busy flag"
            );
        }
        (Some(_), None) if v.tensor.is_some() => {
            let _ = writeln!(
                o,
                "  the gap:        cannot be measured without a clock-corrected tensor counter"
            );
        }
        (Some(_), None) => {
            let _ = writeln!(
                o,
                "  the gap:        cannot be measured without the tensor counter"
            );
        }
    }
}

/// The serving engine's line, where one is attached.
fn engine(o: &mut String, v: &GpuView) {
    if let Some(sv) = &v.serving {
        let _ = match &sv.absent_reason {
            Some(r) => writeln!(o, "  engine:         absent ({r})"),
            None => {
                let mut parts = Vec::new();
                if let Some(kv) = sv.kv_cache_utilization {
                    parts.push(format!("KV cache {}", pct(kv)));
                }
                if let Some(r) = sv.running_requests {
                    parts.push(format!("{r:.0} running"));
                }
                if let Some(q) = sv.queued_requests {
                    parts.push(format!("{q:.0} queued"));
                }
                if let (Some(p), Some(t)) = (sv.prompt_tokens_per_sec, sv.output_tokens_per_sec) {
                    parts.push(format!("{p:.0} prompt + {t:.0} output tokens/s"));
                }
                let name = sv.engine.as_deref().filter(|e| !e.is_empty());
                let read = if parts.is_empty() {
                    "read, nothing it reported usable".to_string()
                } else {
                    parts.join(", ")
                };
                match name {
                    Some(e) => writeln!(o, "  engine:         {e}: {read}"),
                    None => writeln!(o, "  engine:         {read}"),
                }
            }
        };
    }
}

/// The verdict, its reasons, what was not measured and the suggestion.
fn verdict(o: &mut String, v: &GpuView) {
    if let Some(r) = &v.verdict {
        let _ = writeln!(o, "  verdict:        {}", r.verdict);
        for reason in &r.reasons {
            let _ = writeln!(o, "    because {reason}");
        }
        if !r.missing.is_empty() {
            let _ = writeln!(o, "  not measured:");
            for m in &r.missing {
                let _ = writeln!(o, "    - {m}");
            }
        }
        let _ = writeln!(o, "  suggestion:     {}", r.action);
    }
}

/// The regime line, and the straggler line: this GPU holds its job back, or waits on the
/// one that does.
fn regime(o: &mut String, v: &GpuView) {
    let _ = writeln!(
        o,
        "  phase:          {}",
        v.phase.as_deref().unwrap_or("undecided")
    );
    let Some(job) = &v.job else { return };
    let r = &v.readings;
    let gaps: Vec<String> = [
        ("SM clock", Field::StragglerClockGap),
        ("effective compute", Field::StragglerComputeGap),
    ]
    .into_iter()
    .filter_map(|(what, f)| {
        r.value(f)
            .map(|g| format!("its {what} {} under the job's median", pct(g)))
    })
    .collect();
    if !gaps.is_empty() {
        let _ = writeln!(
            o,
            "  straggler:      of job {job}: {}; the job's other GPUs wait on it (comm_bound)",
            gaps.join(", ")
        );
    } else if let Some(g) = r.value(Field::StragglerWaitGap) {
        let _ = writeln!(
            o,
            "  straggler:      waits on a straggler of job {job} ({} behind the job's median): comm_bound, not starved on its own",
            pct(g)
        );
    }
}

/// A time-sliced GPU's holders' parts of its effective compute, said to be estimates and
/// why: the counters are the device's, so no holder's own part is measured.
fn pod_estimates(o: &mut String, v: &GpuView) {
    if v.pod_estimates.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "  per pod:        ESTIMATES, not measurements: this GPU is shared (time-sliced) and its counters are the device's, so no holder's own effective compute is measured; each part below is the device's effective compute split by the pod's processes' share of SM busy time, and lies between 0 and the device's {} (showback bills the device's measured total 1/k to each of k holders, never these)",
        v.effective.map_or_else(|| "total".to_string(), pct)
    );
    for e in &v.pod_estimates {
        let _ = writeln!(
            o,
            "    - {}: about {} (estimate, method {})",
            e.pod,
            pct(e.value),
            e.method
        );
    }
}

/// Run `truthscale explain`; exit status 1 when a replayed capture had malformed lines (each
/// said on stderr), as `analyze` exits.
///
/// # Errors
/// Neither or both of `--replay` and `--url`, an unreadable input, or no such GPU.
pub(crate) fn run(args: &ExplainArgs, env: &[(String, String)]) -> anyhow::Result<ExitCode> {
    // The `[derive]` (the phase's thresholds) and `[verdict]` sections, as `analyze` reads them.
    let (derive, cfg) = crate::config::Config::offline_sections(args.config.as_deref(), env)?;
    let replay = args
        .replay
        .as_deref()
        .map(|p| (p, args.interval.as_secs_f64()));
    let (views, malformed) = load(replay, args.url.as_deref(), &derive, &cfg)?;
    let views: Vec<&GpuView> = views
        .iter()
        .filter(|v| args.gpu.is_none() || v.gpu == args.gpu)
        .collect();
    if views.is_empty() {
        match args.gpu {
            Some(g) => bail!("no GPU {g} in the input"),
            None => bail!("no GPU in the input"),
        }
    }
    let text: Vec<String> = views.iter().map(|v| explain(v)).collect();
    write!(crate::stdout::lock(), "{}", text.join("\n"))?;
    Ok(if malformed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Views from `--replay FILE` (its samples this many seconds apart where its format has no
/// timestamps) or `--url URL` (exactly one), and the replay's malformed lines.
///
/// # Errors
/// Neither or both given, or the input cannot be read.
pub(crate) fn load(
    replay: Option<(&Path, f64)>,
    url: Option<&str>,
    derive: &DeriveConfig,
    cfg: &VerdictConfig,
) -> anyhow::Result<(Vec<GpuView>, usize)> {
    match (replay, url) {
        (Some(p), None) => views_from_replay(p, derive, cfg),
        (None, Some(u)) => {
            let read = views_from_exposition(&fetch_metrics(u)?, cfg);
            for line in &read.skipped.first {
                crate::stdout::say!("truthscale: {u}: {line}");
            }
            if let Some(note) = read.skipped.note() {
                crate::stdout::say!("truthscale: {u}: {note}");
            }
            if let (true, Some(down)) = (read.views.is_empty(), &read.source_down) {
                bail!("{u}: no GPU: {down}");
            }
            Ok((read.views, 0))
        }
        _ => bail!("give one of --replay FILE or --url http://SIDECAR:PORT"),
    }
}

/// `truthscale explain`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExplainArgs {
    /// A capture to replay (JSONL trace, dcgm-exporter scrape, dmon or `nvidia-smi
    /// --format=csv` output; `-` reads standard input); the newest window per GPU is
    /// explained. Or --url.
    #[arg(long, conflicts_with = "url", required_unless_present = "url")]
    pub replay: Option<PathBuf>,
    /// A running sidecar (`http://HOST:PORT`, `/metrics` is added).
    #[arg(long)]
    pub url: Option<String>,
    /// Only this GPU index.
    #[arg(long, allow_negative_numbers = true)]
    pub gpu: Option<u32>,
    /// Configuration file whose `[verdict]` section sets the verdict's thresholds and whose
    /// `[derive]` section a replay's phase's (a sidecar's `--url` phase is its own);
    /// `TRUTHSCALE_DERIVE__…` and `TRUTHSCALE_VERDICT__…` variables override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Time between a replay's samples, for formats without timestamps (dmon,
    /// dcgm-exporter), as `analyze --interval`. For a capture of dcgm-exporter scrapes at
    /// its default, pass 30s.
    #[arg(long, value_parser = crate::setting::duration_flag(std::time::Duration::from_millis(1), std::time::Duration::from_secs(3600)), default_value = "1s", conflicts_with = "url")]
    pub interval: std::time::Duration,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::views_from_exposition;

    /// Issue 34: a spinning pod (SM busy 0.6, no tensor work) beside a GEMM pod (SM busy
    /// 0.2) on one time-sliced GPU whose measured effective compute is 0.30, all the GEMM
    /// pod's. The sidecar writes the SM-busy split, 0.225 and 0.075; explain shows it as
    /// estimates, says why, and names the device's measured total as their bound.
    #[test]
    fn a_shared_gpus_parts_are_said_to_be_estimates_and_why() {
        let (device, spin_sm, gemm_sm) = (0.30, 0.6, 0.2);
        let spin = device * spin_sm / (spin_sm + gemm_sm);
        let gemm = device - spin;
        let l = "gpu=\"0\",uuid=\"GPU-0\",model=\"M\"";
        let body = format!(
            "truthscale_gpu_reported_utilization_ratio{{{l}}} 1\n\
             truthscale_gpu_effective_compute_ratio{{{l}}} {device}\n\
             truthscale_pod_effective_compute_estimate_ratio{{{l},pod=\"notebook\",namespace=\"spin\",container=\"main\",method=\"sm_busy_share\"}} {spin}\n\
             truthscale_pod_effective_compute_estimate_ratio{{{l},pod=\"train\",namespace=\"gemm\",container=\"main\",method=\"sm_busy_share\"}} {gemm}\n"
        );
        let v = views_from_exposition(&body, &VerdictConfig::default()).views;
        assert_eq!(v.len(), 1);
        let text = explain(&v[0]);
        assert!(
            text.contains("per pod:        ESTIMATES, not measurements: this GPU is shared (time-sliced) and its counters are the device's"),
            "{text}"
        );
        assert!(
            text.contains("lies between 0 and the device's 30 %"),
            "{text}"
        );
        assert!(
            text.contains("    - spin/notebook: about 22 % (estimate, method sm_busy_share)\n"),
            "{text}"
        );
        assert!(
            text.contains("    - gemm/train: about 8 % (estimate, method sm_busy_share)\n"),
            "{text}"
        );
        // A GPU without a split says nothing of estimates.
        let alone = views_from_exposition(
            &format!("truthscale_gpu_effective_compute_ratio{{{l}}} {device}\n"),
            &VerdictConfig::default(),
        )
        .views;
        assert!(!explain(&alone[0]).contains("per pod:"));
    }

    /// Saturation measured, effective compute not (no clock to correct the tensor activity
    /// by), and its bound known: the bound is said, as `top` shows it (`≤45%`).
    #[test]
    fn a_bound_beside_saturation_is_said() {
        let v = GpuView {
            saturation: Some(0.5),
            tensor: Some(0.4),
            dram: Some(0.5),
            upper_bound: Some(0.45),
            ..GpuView::default()
        };
        let mut o = String::new();
        counters(&mut o, &v);
        assert_eq!(
            o,
            "  counters say:   roofline saturation 50 % (tensor 40 %, DRAM 50 %); no effective compute (no SM-clock reading or catalog model to correct the tensor activity by), at most 45 %: an upper bound\n"
        );
    }

    /// Without the busy flag, DCGM's graphics-engine activity stands in for it: the
    /// dashboard line says so, with its value, beside the verdict that quotes it.
    #[test]
    fn the_graphics_engine_standing_in_for_the_busy_flag_is_said() {
        let mut v = GpuView::default();
        v.readings.set_value(Field::GrActive, 0.89);
        let mut o = String::new();
        dashboard(&mut o, &v);
        assert_eq!(
            o,
            "  dashboard says: nothing (no busy flag was read); the graphics engine was active 89 % of the time (DCGM's GR_ENGINE_ACTIVE), which stands in for the busy flag below\n"
        );
        let mut o = String::new();
        dashboard(&mut o, &GpuView::default());
        assert_eq!(o, "  dashboard says: nothing (no busy flag was read)\n");
    }

    /// Effective compute measured without a DRAM reading (so no roofline saturation) is
    /// said, with the tensor activity, never "nothing beyond the busy flag".
    #[test]
    fn effective_compute_without_dram_is_said() {
        let l = "gpu=\"0\",uuid=\"GPU-0\",model=\"M\"";
        let body = format!(
            "truthscale_gpu_reported_utilization_ratio{{{l}}} 0.9\n\
             truthscale_gpu_effective_compute_ratio{{{l}}} 0.3\n\
             truthscale_gpu_tensor_active_ratio{{{l}}} 0.35\n"
        );
        let v = views_from_exposition(&body, &VerdictConfig::default()).views;
        let text = explain(&v[0]);
        assert!(
            text.contains("  counters say:   effective compute 30 % (tensor 35 %); roofline saturation not measured (no DRAM reading)\n"),
            "{text}"
        );
        assert!(
            text.contains("60 points of the 90 % shown are not compute"),
            "{text}"
        );
    }

    /// A bound with the tensor counter read (no SM clock, no DRAM counter) is said to be
    /// for want of the clock, not of the tensor counter.
    #[test]
    fn a_bound_says_what_it_lacks() {
        let l = "gpu=\"0\",uuid=\"GPU-0\",model=\"M\"";
        let said = |tensor: bool| {
            let mut body = format!(
                "truthscale_gpu_reported_utilization_ratio{{{l}}} 0.9\n\
                 truthscale_gpu_effective_compute_upper_bound_ratio{{{l}}} 0.65\n"
            );
            if tensor {
                body.push_str(&format!("truthscale_gpu_tensor_active_ratio{{{l}}} 0.6\n"));
            }
            let v = views_from_exposition(&body, &VerdictConfig::default()).views;
            explain(&v[0])
        };
        let with = said(true);
        assert!(
            with.contains("effective compute at most 65 % (no SM-clock reading or catalog model to correct the tensor activity by: an upper bound)"),
            "{with}"
        );
        let without = said(false);
        assert!(
            without.contains("effective compute at most 65 % (no tensor counter: an upper bound)"),
            "{without}"
        );
    }
}
