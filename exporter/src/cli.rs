//! The command line: the verbs, each defined in its own file under `commands/`, and the
//! dispatch. Nothing else lives here.

use crate::commands::{analyze, config, doctor, explain, report, serve, simulate, top};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// truthscale: what your GPUs actually do.
///
/// nvidia-smi's "GPU utilization" is the fraction of time at least one kernel was resident.
/// truthscale measures effective compute (tensor-pipe work against the datasheet peak),
/// roofline saturation, how much the reported number is inflated, and the phase
/// (idle, prefill, decode, mixed, stalled, underloaded).
#[derive(Debug, Parser)]
#[command(name = "truthscale", version, about, long_about)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Analyze a capture: `dcgmi dmon` output, a dcgm-exporter scrape, `nvidia-smi
    /// --format=csv` output or a JSONL trace; or the DCGM history a Prometheus server holds
    /// (--prometheus URL).
    ///
    /// Prints a table per GPU (or MIG instance, or pod) with the reported utilization, the
    /// effective compute fraction, the inflation gap, roofline saturation and the phase mix.
    /// Malformed lines are reported as FILE:LINE and make the exit status 1.
    Analyze(analyze::AnalyzeArgs),
    /// Write a JSONL trace from the simulated GPU, with the ground-truth phase of each window.
    ///
    /// The output says it is simulated (`"source":"sim"` on every line).
    Simulate(simulate::SimulateArgs),
    /// Run the sidecar: sample counters on an interval and serve /metrics.
    ///
    /// Configuration: built-in defaults < --config FILE (TOML) < TRUTHSCALE_… environment
    /// (e.g. TRUTHSCALE_SOURCE__INTERVAL=500ms) < flags. Pod labels come from the Downward
    /// API variables POD_NAME, POD_NAMESPACE, CONTAINER_NAME and NODE_NAME unless configured.
    /// Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) for more.
    Serve(serve::ServeArgs),
    /// Print the default configuration, or check a configuration file.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Check this machine's NVML: driver and NVML versions, and per GPU the MIG mode, whether
    /// GPM is supported and permitted, the fidelity tier truthscale gets, and how to get a
    /// better one. Exits 1 when there is no usable NVML or no GPU.
    Doctor(doctor::DoctorArgs),
    /// Explain, per GPU and in words: what the dashboard says, what the counters say, the
    /// gap, the phase and verdict with reasons, what was not measured, and one action.
    Explain(explain::ExplainArgs),
    /// A terminal view: one row per GPU with reported vs effective, phase, verdict, KV
    /// cache and queue, and a sparkline. Plain text when stdout is not a terminal.
    Top(top::TopArgs),
    /// Fleet report from Prometheus history: GPUs needed (pooled lower bound and packed),
    /// co-location candidates, right-sizing (MIG, smaller models), idle allocated capacity
    /// and the savings estimate. Terminal text, --json (a versioned schema) or --html FILE.
    Report(report::ReportArgs),
}

/// Parse arguments and run; returns the process exit code.
#[must_use]
pub fn main() -> ExitCode {
    install_panic_hook();
    let cli = Cli::parse();
    // The process environment, read once, here: every command that reads a variable reads
    // it from this.
    let env = match crate::config::environment() {
        Ok(env) => env,
        Err(e) => {
            crate::stdout::say!("truthscale: error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Analyze(a) => analyze::run(&a, &env),
        Command::Simulate(s) => simulate::run(&s).map(|()| ExitCode::SUCCESS),
        Command::Serve(s) => serve::main(&s, &env).map(|()| ExitCode::SUCCESS),
        Command::Config(c) => config::run(&c, &env),
        Command::Doctor(d) => doctor::run(&d, &env),
        Command::Explain(e) => explain::run(&e, &env),
        Command::Top(t) => top::run(&t, &env),
        Command::Report(r) => report::run(&r, &env),
    };
    match result {
        Ok(code) => code,
        // The reader of the output went away (`… | head`): what it read was whole lines,
        // and nothing is wrong to report.
        Err(_) if crate::stdout::reader_left() => ExitCode::SUCCESS,
        Err(e) => {
            crate::stdout::say!("truthscale: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Make a panic on any thread end the process, after the usual panic message and a line
/// saying what happened: a sampler that died while the HTTP server lives on would serve
/// stale answers forever, so the process exits (SIGABRT) and its supervisor restarts it.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        let thread = std::thread::current();
        crate::stdout::say!(
            "truthscale: internal error: thread '{}' panicked (message above); exiting so that the process is restarted. Please report it with the message and the configuration.",
            thread.name().unwrap_or("unnamed")
        );
        std::process::abort();
    }));
}
