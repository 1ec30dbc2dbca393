//! Command-line definitions and dispatch.

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// truthscale: what your GPUs actually do.
///
/// nvidia-smi's "GPU utilization" is the fraction of time at least one kernel was resident.
/// truthscale measures effective compute (tensor-pipe work against the datasheet peak),
/// roofline saturation, how much the reported number is inflated, and the phase
/// (idle, prefill, decode, mixed, stalled, underloaded).
#[derive(Debug, Parser)]
#[command(name = "truthscale", version, about, long_about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Analyze a capture: `dcgmi dmon` output, a dcgm-exporter scrape, or a JSONL trace.
    ///
    /// Prints a table per GPU (or MIG instance, or pod) with the reported utilization, the
    /// effective compute fraction, the inflation gap, roofline saturation and the phase mix.
    /// Malformed lines are reported as FILE:LINE and make the exit status 1.
    Analyze(AnalyzeArgs),
    /// Write a JSONL trace from the simulated GPU, with the ground-truth phase of each window.
    ///
    /// The output says it is simulated (`"source":"sim"` on every line).
    Simulate(SimulateArgs),
}

/// Capture formats on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// Detect from the first lines.
    Auto,
    /// `dcgmi dmon` text output.
    DcgmiDmon,
    /// dcgm-exporter `/metrics` text (one or more scrapes).
    DcgmExporter,
    /// truthscale JSONL trace.
    Jsonl,
}

/// `truthscale analyze`.
#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {
    /// The capture file (`-` for standard input).
    pub file: PathBuf,
    /// Input format.
    #[arg(long, value_enum, default_value = "auto")]
    pub format: FormatArg,
    /// Time between samples, for formats without timestamps (dmon, dcgm-exporter).
    /// For a capture of dcgm-exporter scrapes at its default, pass 30s.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub interval: Duration,
    /// Treat every GPU as this model (a catalog key such as `h100-sxm`, or an NVML name).
    #[arg(long)]
    pub gpu_model: Option<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Include the per-window timeline (in JSON; memory grows with the input).
    #[arg(long)]
    pub timeline: bool,
}

/// `truthscale simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Scenario: llm-serving, decode-only, training, tiny-kernel, idle-allocated.
    #[arg(long, default_value = "llm-serving")]
    pub scenario: String,
    /// Simulated time to cover.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
    pub duration: Duration,
    /// Window length.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "250ms")]
    pub interval: Duration,
    /// Number of GPUs.
    #[arg(long, default_value_t = 1)]
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

/// Parse arguments and run; returns the process exit code.
#[must_use]
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Analyze(a) => crate::analyze::run(&a),
        Command::Simulate(s) => crate::simulate::run(&s).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("truthscale: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
