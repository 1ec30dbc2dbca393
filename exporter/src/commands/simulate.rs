//! `truthscale simulate`: write a JSONL trace from the simulated GPU.

use anyhow::{Context, bail};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Duration;
use truthscale_core::gpus;
use truthscale_core::model::Timestamp;
use truthscale_core::parse::jsonl;
use truthscale_core::sim::{Scenario, Simulator};

/// Trace start: 2026-01-01T00:00:00Z. Fixed so that the same seed gives the same file.
const START_MS: i64 = 1_767_225_600_000;

/// Run the command.
///
/// # Errors
/// Unknown scenario or model, a bad interval, or an unwritable output.
pub(crate) fn run(args: &SimulateArgs) -> anyhow::Result<()> {
    let scenario = Scenario::from_name(&args.scenario).with_context(|| {
        let names: Vec<_> = Scenario::ALL.iter().map(|s| s.as_str()).collect();
        format!(
            "unknown scenario {:?}; choose one of {}",
            args.scenario,
            names.join(", ")
        )
    })?;
    let spec = gpus::lookup(&args.gpu_model).with_context(|| {
        let keys: Vec<_> = gpus::CATALOG.iter().map(|s| s.key).collect();
        format!(
            "--gpu-model {:?} is not in the catalog; known: {}",
            args.gpu_model,
            keys.join(", ")
        )
    })?;
    let dt = args.interval.as_secs_f64();
    if dt < 0.01 {
        bail!("--interval must be at least 10ms (got {:?})", args.interval);
    }
    // The trace's timestamps are whole milliseconds: a step of any other length would be
    // stamped shorter or longer than the time it simulates.
    if !args.interval.subsec_nanos().is_multiple_of(1_000_000) {
        bail!(
            "--interval must be a whole number of milliseconds, the trace's timestamps' resolution (got {:?})",
            args.interval
        );
    }
    let windows = (args.duration.as_secs_f64() / dt).round() as u64;
    // A window is the time between two samples: fewer than two is a trace with nothing in it.
    if windows < 2 {
        bail!(
            "--duration {} is shorter than two --interval {}: the trace would hold no window to analyze",
            humantime::format_duration(args.duration),
            humantime::format_duration(args.interval)
        );
    }
    let out: Box<dyn Write> = if args.output.as_os_str() == "-" {
        Box::new(crate::stdout::lock())
    } else {
        let f = File::create(&args.output)
            .with_context(|| format!("cannot create {}", args.output.display()))?;
        Box::new(f)
    };
    let mut out = BufWriter::new(out);
    let mut sim = Simulator::new(
        args.gpus,
        spec,
        "sim-node",
        args.seed,
        Timestamp(START_MS),
        |_| scenario,
    );
    let written = || format!("cannot write {}", args.output.display());
    writeln!(
        out,
        "# truthscale simulated trace: scenario {}, {} × {}, interval {}, seed {} (SIMULATED, not hardware)",
        scenario.as_str(),
        args.gpus,
        spec.name,
        humantime::format_duration(args.interval),
        args.seed
    )
    .with_context(written)?;
    for _ in 0..windows {
        let s = sim.step(dt);
        for e in &s.entities {
            writeln!(out, "{}", jsonl::to_line(s.taken, e)).with_context(written)?;
        }
    }
    out.flush().with_context(written)?;
    Ok(())
}

/// `truthscale simulate`.
#[derive(Debug, clap::Args)]
pub(crate) struct SimulateArgs {
    /// Scenario: llm-serving, decode-only, training, tiny-kernel, idle-allocated.
    #[arg(long, default_value = "llm-serving")]
    pub scenario: String,
    /// Simulated time to cover.
    #[arg(long, value_parser = crate::setting::duration_flag(Duration::from_millis(10), Duration::from_secs(30 * 86_400)), default_value = "10m")]
    pub duration: Duration,
    /// Window length.
    #[arg(long, value_parser = crate::setting::duration_flag(Duration::from_millis(10), Duration::from_secs(3600)), default_value = "250ms")]
    pub interval: Duration,
    /// Number of GPUs, 1 to 1024.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub gpus: u32,
    /// GPU model (catalog key or NVML name).
    #[arg(long, default_value = "h100-sxm")]
    pub gpu_model: String,
    /// Random seed; the same seed gives the same trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (`-` for standard output).
    #[arg(short = 'o', long)]
    pub output: PathBuf,
}
