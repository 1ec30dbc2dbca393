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
    /// Analyze a capture: `dcgmi dmon` output, a dcgm-exporter scrape, or a JSONL trace;
    /// or the DCGM history a Prometheus server holds (--prometheus URL).
    ///
    /// Prints a table per GPU (or MIG instance, or pod) with the reported utilization, the
    /// effective compute fraction, the inflation gap, roofline saturation and the phase mix.
    /// Malformed lines are reported as FILE:LINE and make the exit status 1.
    Analyze(AnalyzeArgs),
    /// Write a JSONL trace from the simulated GPU, with the ground-truth phase of each window.
    ///
    /// The output says it is simulated (`"source":"sim"` on every line).
    Simulate(SimulateArgs),
    /// Run the sidecar: sample counters on an interval and serve /metrics.
    ///
    /// Configuration: built-in defaults < --config FILE (TOML) < TRUTHSCALE_… environment
    /// (e.g. TRUTHSCALE_SOURCE__INTERVAL=500ms) < flags. Pod labels come from the Downward
    /// API variables POD_NAME, POD_NAMESPACE, CONTAINER_NAME and NODE_NAME unless configured.
    /// Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) for more.
    Serve(ServeArgs),
    /// Print the default configuration, or check a configuration file.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Check this machine's NVML: driver and NVML versions, and per GPU the MIG mode, whether
    /// GPM is supported and permitted, the fidelity tier truthscale gets, and how to get a
    /// better one. Exits 1 when there is no usable NVML or no GPU.
    Doctor(DoctorArgs),
    /// Explain, per GPU and in words: what the dashboard says, what the counters say, the
    /// gap, the phase and verdict with reasons, what was not measured, and one action.
    Explain(ExplainArgs),
    /// A terminal view: one row per GPU with reported vs effective, phase, verdict, KV
    /// cache and queue, and a sparkline. Plain text when stdout is not a terminal.
    Top(TopArgs),
}

/// `truthscale explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// A capture to replay (JSONL trace, dcgm-exporter scrape or dmon output); the newest
    /// window per GPU is explained.
    #[arg(long, conflicts_with = "url", required_unless_present = "url")]
    pub replay: Option<PathBuf>,
    /// A running sidecar (`http://HOST:PORT`, `/metrics` is added).
    #[arg(long)]
    pub url: Option<String>,
    /// Only this GPU index.
    #[arg(long)]
    pub gpu: Option<u32>,
    /// Configuration file whose `[verdict]` section sets the thresholds.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// `truthscale top`.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// A capture to replay: on a terminal it plays back one sample per --interval; with
    /// --once or without a terminal, one frame of the newest sample per GPU.
    #[arg(
        long,
        conflicts_with_all = ["url", "nvml_library"],
        required_unless_present_any = ["url", "nvml_library"]
    )]
    pub replay: Option<PathBuf>,
    /// A running sidecar (`http://HOST:PORT`).
    #[arg(long, conflicts_with = "nvml_library")]
    pub url: Option<String>,
    /// Read NVML directly from this library (e.g. `/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1`).
    #[arg(long)]
    pub nvml_library: Option<PathBuf>,
    /// Print one frame and exit (with NVML, after two samples one --interval apart).
    #[arg(long)]
    pub once: bool,
    /// Refresh interval (and, with a replay on a terminal, the time per replayed sample).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub interval: Duration,
}

/// `truthscale config`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the full default configuration as TOML.
    Defaults,
    /// Validate a configuration file (with the current environment) and exit.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
}

/// `truthscale serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Counter source (see `--help`).
    #[arg(
        long,
        help = "Counter source: sim[:SCENARIO], replay:PATH, nvml, dcgm-exporter[:URL] or auto \
                [default: sim]. auto reads NVML when the library loads"
    )]
    pub source: Option<String>,
    /// Address to serve on [default: 0.0.0.0:9488].
    #[arg(long)]
    pub listen: Option<String>,
    /// Sampling interval, at least 100ms [default: 1s].
    #[arg(long)]
    pub interval: Option<String>,
    /// Number of simulated GPUs (sim only) [default: 4].
    #[arg(long)]
    pub sim_gpus: Option<u32>,
    /// After this long without data, series disappear and truthscale_source_up is 0
    /// [default: three intervals].
    #[arg(long)]
    pub stale_after: Option<String>,
    /// Replay the capture again from the start when it ends (replay only).
    #[arg(long)]
    pub replay_loop: bool,
    /// Web config file (exporter-toolkit style YAML) for TLS and basic auth.
    #[arg(long)]
    pub web_config: Option<PathBuf>,
    /// Configuration file (TOML); see `truthscale config defaults`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Also push metrics over OTLP to this collector (http://HOST:4317 for gRPC,
    /// http://HOST:4318 for HTTP/protobuf; choose with OTEL_EXPORTER_OTLP_PROTOCOL or
    /// otlp.protocol). OTEL_EXPORTER_OTLP_ENDPOINT turns OTLP on too; see docs/otlp.md.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The NVML library to load for --source nvml or auto [default: libnvidia-ml.so.1].
    #[arg(long, value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
}

impl ServeArgs {
    /// The flags that were given, as configuration overrides.
    #[must_use]
    pub fn overrides(&self) -> Vec<(&'static str, String)> {
        let mut o = Vec::new();
        if let Some(v) = &self.source {
            o.push(("source.spec", v.clone()));
        }
        if let Some(v) = &self.listen {
            o.push(("listen_address", v.clone()));
        }
        if let Some(v) = &self.interval {
            o.push(("source.interval", v.clone()));
        }
        if let Some(v) = self.sim_gpus {
            o.push(("source.sim_gpus", v.to_string()));
        }
        if let Some(v) = &self.stale_after {
            o.push(("source.stale_after", v.clone()));
        }
        if self.replay_loop {
            o.push(("source.replay_loop", "true".into()));
        }
        if let Some(v) = &self.web_config {
            o.push(("web_config_file", v.display().to_string()));
        }
        if let Some(v) = &self.otlp_endpoint {
            o.push(("otlp.endpoint", v.clone()));
        }
        if let Some(v) = &self.nvml_library {
            o.push(("source.nvml_library", v.display().to_string()));
        }
        o
    }
}

/// `truthscale doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The NVML library to load [default: libnvidia-ml.so.1].
    #[arg(long, value_name = "PATH", env = "TRUTHSCALE_SOURCE__NVML_LIBRARY")]
    pub nvml_library: Option<PathBuf>,
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
    /// The capture file (`-` for standard input); or --prometheus URL instead.
    #[arg(required_unless_present = "prometheus", conflicts_with = "prometheus")]
    pub file: Option<PathBuf>,
    /// Input format.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        conflicts_with = "prometheus"
    )]
    pub format: FormatArg,
    /// Time between samples, for formats without timestamps (dmon, dcgm-exporter).
    /// For a capture of dcgm-exporter scrapes at its default, pass 30s.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s", conflicts_with = "prometheus")]
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
    /// Configuration file (TOML) whose `[derive]` section sets thresholds and hysteresis
    /// (see `truthscale config defaults`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// History from a Prometheus server instead of a capture file.
    #[command(flatten)]
    pub history: crate::history::PrometheusArgs,
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
        Command::Serve(s) => serve(&s).map(|()| ExitCode::SUCCESS),
        Command::Config(c) => config(&c),
        Command::Doctor(d) => crate::doctor::run(&d),
        Command::Explain(e) => crate::explain::run(&e).map(|()| ExitCode::SUCCESS),
        Command::Top(t) => crate::top::run(&t).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("truthscale: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    init_logging();
    let env: Vec<(String, String)> = std::env::vars().collect();
    let overrides = args.overrides();
    let overrides: Vec<(&str, String)> = overrides.iter().map(|(k, v)| (*k, v.clone())).collect();
    let config = crate::config::Config::load(args.config.as_deref(), &env, &overrides)?;
    crate::serve::run(&config)
}

fn config(c: &ConfigCommand) -> anyhow::Result<ExitCode> {
    match c {
        ConfigCommand::Defaults => {
            print!("{}", crate::config::Config::default().to_toml()?);
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Check { file } => {
            let env: Vec<(String, String)> = std::env::vars().collect();
            let cfg = crate::config::Config::load(Some(file), &env, &[])?;
            cfg.validate(&env)?;
            println!("{}: ok", file.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
