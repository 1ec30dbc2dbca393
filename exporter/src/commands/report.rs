//! `truthscale report`: how many GPUs the fleet needs, which pods can share one, which fit a
//! MIG slice or a smaller model, which sit idle, and what that saves, from the history a
//! Prometheus server holds (truthscale's own series, or dcgm-exporter's with its pod labels).

use crate::history::{DEFAULT_MAX_STEPS, Defaults, History, PrometheusArgs, default_step};
use crate::report;
use anyhow::{Context as _, bail};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use truthscale_core::fleet::{FleetConfig, IDLE_BUSY_BELOW, IDLE_COMPUTE_BELOW};

/// Default window of `report`.
const DEFAULT_SINCE: Duration = Duration::from_secs(14 * 86_400);
/// `report`'s defaults: a window of [`DEFAULT_SINCE`], and [`default_step`] of it.
const DEFAULTS: Defaults = Defaults {
    since: DEFAULT_SINCE,
    step: default_step,
};

fn fraction(max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |s: &str| {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not a number"))?;
        if v.is_finite() && (0.0..=max).contains(&v) {
            Ok(v)
        } else {
            Err(format!("{v} is outside 0..={max}"))
        }
    }
}

/// The highest price taken, of a GPU-hour or a kWh: far above any real one, and low
/// enough that a fleet's costs stay finite (`1e308` made every cost `inf` in the CSV and
/// FOCUS files and `null`, "no price", in the JSON).
const MAX_PRICE: f64 = 1e9;

fn price(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() && (0.0..=MAX_PRICE).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{v}: give a price of 0 or more, at most {MAX_PRICE:e}"
        ))
    }
}

/// A factor above 0, checked as the fleet analysis checks it (`FleetConfig::check`).
fn peak_factor(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    let cfg = FleetConfig {
        max_peak_over_capacity: v,
        ..FleetConfig::default()
    };
    cfg.check().map(|()| v)
}

/// `truthscale report`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// The history to read: --prometheus URL is required here; --since defaults to 14d for
    /// this command, and --step to 60s, or for a window longer than 3 days the finest of
    /// 2m, 5m, 10m, 15m, 30m, 1h… that keeps it under 5 000 steps (14 days: 5m), each step
    /// then summarising the raw samples in it.
    #[command(flatten)]
    pub history: PrometheusArgs,
    /// Headroom h: summed saturation is kept under 1 − h on a shared GPU (0 to 0.9).
    #[arg(long, allow_negative_numbers = true, default_value = "0.2", value_parser = fraction(0.9))]
    pub headroom: f64,
    /// Price of one GPU-hour, for the savings estimate (in your currency).
    #[arg(long, allow_negative_numbers = true, value_name = "PRICE", value_parser = price)]
    pub cost_per_gpu_hour: Option<f64>,
    /// List a workload as idle allocated capacity when idle more than this share of its
    /// measured time (0 to 1).
    #[arg(long, allow_negative_numbers = true, default_value = "0.5", value_parser = fraction(1.0))]
    pub idle_share: f64,
    /// A step is idle when the busy flag is below this (where measured)…
    #[arg(long, allow_negative_numbers = true, default_value_t = IDLE_BUSY_BELOW, value_parser = fraction(1.0))]
    pub idle_busy_below: f64,
    /// …and effective compute below this (where measured).
    #[arg(long, allow_negative_numbers = true, default_value_t = IDLE_COMPUTE_BELOW, value_parser = fraction(1.0))]
    pub idle_compute_below: f64,
    /// Propose a smaller model only where the workload's observed peak is at most this many
    /// times its capacity (1: the peak must fit; 8: a burst may run up to 8× longer).
    #[arg(long, allow_negative_numbers = true, value_name = "FACTOR", default_value = "1.0", value_parser = peak_factor)]
    pub max_peak_over_capacity: f64,
    /// The most points kept per workload: a finer grid (an explicit --step over a long
    /// window) is combined, each point then holding as many steps as it takes (their means
    /// for use, their peaks for memory and the sizing), so memory stays bounded whatever
    /// the step. At least 100.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_STEPS, value_parser = clap::value_parser!(u64).range(100..))]
    pub max_points: u64,
    /// What to print: `text`, `json` (the versioned JSON document, docs/report.md) or, with
    /// --by, `opencost` (the showback in the shape of OpenCost's /allocation answer,
    /// docs/report.md).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Print the versioned JSON document: --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Print only the reclaimable capacity: the holders idle most of their measured time,
    /// most idle GPU-hours first, each with its owner, namespace, how long it has been idle,
    /// the memory it holds, the cost of its idle hours and the command that would suspend
    /// it (truthscale runs nothing). The JSON has it as `idle`.
    #[arg(long, conflicts_with_all = ["json", "format"])]
    pub idle: bool,
    /// Also write the report as a self-contained HTML page to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Showback: GPU-hours by group, allocated against really used: namespace, node, model,
    /// or a pod label's key (team, label:app.kubernetes.io/name), read from
    /// kube-state-metrics' kube_pod_labels or truthscale's allocation info in the same
    /// Prometheus.
    #[arg(long, value_name = "GROUP", value_parser = report::showback::By::parse)]
    pub by: Option<report::showback::By>,
    /// With --by: also one row per group and period of this length (1d, 1h) in the JSON and
    /// the CSV.
    #[arg(long, value_name = "DURATION", requires = "by", value_parser = crate::setting::duration_flag(Duration::ZERO, Duration::from_secs(315_576_000)))]
    pub every: Option<Duration>,
    /// With --by: the price of one GPU-hour of a model, as reported (repeatable), for
    /// example --gpu-hour-price "NVIDIA H100 80GB HBM3=4.10"; other models take
    /// --cost-per-gpu-hour.
    #[arg(long, value_name = "MODEL=PRICE", requires = "by", value_parser = model_price)]
    pub gpu_hour_price: Vec<(String, f64)>,
    /// With --by: the price of one kWh, for the cost of each group's energy (its share of
    /// each GPU's measured energy, as its GPU-hours are shared).
    #[arg(long, allow_negative_numbers = true, value_name = "PRICE", requires = "by", value_parser = price)]
    pub energy_price_per_kwh: Option<f64>,
    /// With --by: write the showback as CSV (one row per group and period) to FILE.
    #[arg(long, value_name = "FILE", requires = "by")]
    pub csv: Option<PathBuf>,
    /// With --by: write the showback as a FOCUS 1.2 cost and usage CSV to FILE (every group,
    /// one row per group and period, and one for the capacity no pod held); every row needs
    /// a price.
    #[arg(long, value_name = "FILE", requires_all = ["by", "currency"])]
    pub focus: Option<PathBuf>,
    /// The currency of the prices, an ISO 4217 code (USD, EUR), for --focus's
    /// BillingCurrency: required with --focus, never assumed.
    #[arg(long, value_name = "CODE", value_parser = report::focus::currency)]
    pub currency: Option<String>,
    /// With --by: the text, the CSV and the HTML list the N most allocated groups of each
    /// period and sum the others in one row, `(the rest: K groups)`; the JSON lists every
    /// group.
    #[arg(long, value_name = "N", requires = "by", default_value_t = report::showback::DEFAULT_TOP as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub top: u64,
}

/// What `report` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// The text report.
    Text,
    /// The versioned JSON document.
    Json,
    /// With --by: the showback shaped as OpenCost's /allocation answer.
    Opencost,
}

fn model_price(s: &str) -> Result<(String, f64), String> {
    let (model, p) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?}: give MODEL=PRICE"))?;
    let model = model.trim();
    if model.is_empty() {
        return Err(format!("{s:?}: the model is empty"));
    }
    Ok((model.to_string(), price(p)?))
}

/// What the report is asked, from the flags.
fn config(args: &ReportArgs, clusters: bool) -> report::Config {
    report::Config {
        fleet: FleetConfig {
            headroom: args.headroom,
            idle_share: args.idle_share,
            idle_busy_below: args.idle_busy_below,
            idle_compute_below: args.idle_compute_below,
            cost_per_gpu_hour: args.cost_per_gpu_hour,
            max_peak_over_capacity: args.max_peak_over_capacity,
        },
        max_points: args.max_points,
        showback: args.by.clone().map(|by| report::ShowbackArgs {
            by,
            every: args.every,
            prices: args.gpu_hour_price.clone(),
            energy_price_per_kwh: args.energy_price_per_kwh,
            top: usize::try_from(args.top).unwrap_or(usize::MAX),
            by_model: args.focus.is_some(),
        }),
        clusters,
    }
}

/// Each file the flags ask to write, where it cannot be: a folder that does not exist, or
/// a folder in its place. Checked before Prometheus is read, which may take minutes.
///
/// # Errors
/// The first such file, naming its flag.
fn check_outputs(args: &ReportArgs) -> anyhow::Result<()> {
    let files = [
        ("--focus", &args.focus),
        ("--csv", &args.csv),
        ("--html", &args.html),
    ];
    for (flag, path) in files {
        let Some(path) = path else { continue };
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        if !folder.is_dir() {
            bail!(
                "cannot write {flag} {}: no folder {}",
                path.display(),
                folder.display()
            );
        }
        if path.is_dir() {
            bail!("cannot write {flag} {}: it is a folder", path.display());
        }
    }
    Ok(())
}

/// Writes the files the flags ask for (`--focus`, `--csv`, `--html`); what could not be
/// written, each naming its flag, for the report to be printed before the command fails.
fn write_outputs(args: &ReportArgs, built: &report::Built) -> Vec<anyhow::Error> {
    let mut failed = Vec::new();
    if let (Some(path), Some(by)) = (&args.focus, &args.by) {
        // Clap requires --currency with --focus.
        let currency = args.currency.as_deref().unwrap_or_default();
        if let Err(e) = write_focus(path, built, by, currency) {
            failed.push(e);
        }
    }
    if let Some(path) = &args.csv {
        let cannot = || format!("cannot write --csv {}", path.display());
        let written = std::fs::File::create(path).and_then(|f| {
            let mut f = std::io::BufWriter::new(f);
            built.write_csv(&mut f).and_then(|()| f.flush())
        });
        if let Err(e) = written.with_context(cannot) {
            failed.push(e);
        }
    }
    if let Some(path) = &args.html {
        let written = report::html::render(&built.doc).and_then(|page| {
            std::fs::write(path, page)
                .with_context(|| format!("cannot write --html {}", path.display()))
        });
        if let Err(e) = written {
            failed.push(e);
        }
    }
    failed
}

/// Run the command.
///
/// # Errors
/// Bad flags; Prometheus unreachable, slow or answering errors; no GPU series; the CSV,
/// FOCUS or HTML file cannot be written (said after the report is printed).
pub(crate) fn run(args: &ReportArgs, env: &[(String, String)]) -> anyhow::Result<ExitCode> {
    if args.history.prometheus.is_none() {
        bail!("report reads the history a Prometheus server holds: give --prometheus URL");
    }
    check_outputs(args)?;
    // RUST_LOG=truthscale::prometheus=debug lists each request to Prometheus.
    crate::logging::init(env);
    let started = Instant::now();
    let resolved = args.history.resolve(&DEFAULTS, env)?;
    let format = if args.json { Format::Json } else { args.format };
    if format == Format::Opencost && args.by.is_none() {
        bail!("--format opencost writes the showback: give --by GROUP");
    }
    let config = config(args, resolved.cluster_label.is_some());
    let built = report::build(&config, History::open(&resolved)?)?;
    let failed = write_outputs(args, &built);
    let (stats, analysis) = (built.stats.clone(), built.analysis_seconds);
    let mut out = crate::stdout::lock();
    if format == Format::Opencost
        && let (Some(sb), Some(by)) = (&built.every_group, &args.by)
    {
        let doc =
            report::opencost::document(sb, by, built.doc.source.start_ms, built.point_seconds);
        serde_json::to_writer(&mut out, &doc)?;
        writeln!(out)?;
        // OpenCost's shape has no place for them: what the showback met is said beside it
        // (a period's requests unknown, time-sliced GPUs, models without a price).
        for note in &sb.notes {
            crate::stdout::say!("truthscale: note: {note}");
        }
    } else if format == Format::Json {
        serde_json::to_writer(&mut out, &built.into_json_document())?;
        writeln!(out)?;
    } else if args.idle {
        report::text::write_sections(&mut out, &built.doc, &report::sections::IDLE_ONLY)?;
    } else {
        report::text::write(&mut out, &built.doc)?;
    }
    let total = started.elapsed().as_secs_f64();
    for line in report::notes::timings(&stats, total, analysis) {
        crate::stdout::say!("truthscale: {line}");
    }
    // The report is printed whatever file could not be written; then the command fails.
    let mut failed = failed.into_iter();
    if let Some(first) = failed.next() {
        for e in failed {
            crate::stdout::say!("truthscale: error: {e:#}");
        }
        return Err(first);
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the FOCUS CSV of the showback (every group) to `path`.
///
/// # Errors
/// A row without a price; the file cannot be written.
fn write_focus(
    path: &std::path::Path,
    built: &report::Built,
    by: &report::showback::By,
    currency: &str,
) -> anyhow::Result<()> {
    let Some(parts) = &built.by_model else {
        return Ok(());
    };
    let args = report::focus::FocusArgs {
        currency: currency.to_string(),
    };
    let mut buf = Vec::new();
    report::focus::write(
        &mut buf,
        parts,
        by,
        &args,
        built.doc.source.start_ms,
        built.point_seconds,
    )?;
    std::fs::write(path, buf).with_context(|| format!("cannot write --focus {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        report: ReportArgs,
    }

    /// The error `truthscale report … FLAG VALUE` stops with.
    fn refused(flag: &str, value: &str) -> String {
        use clap::Parser as _;
        let args = [
            "report",
            "--prometheus",
            "http://p:9090",
            "--by",
            "namespace",
            flag,
            value,
        ];
        match Cli::try_parse_from(args) {
            Ok(_) => panic!("{flag} {value} was taken"),
            Err(e) => e.to_string(),
        }
    }

    /// A file to write in a folder that does not exist, or a folder in its place, is
    /// refused before Prometheus is read (which may take minutes), naming its flag; a file
    /// in an existing folder, or in the working one, passes.
    #[test]
    fn output_files_are_checked_before_the_read() {
        use clap::Parser as _;
        let parse = |extra: &[&str]| {
            let mut args = vec![
                "report",
                "--prometheus",
                "http://p:9090",
                "--by",
                "namespace",
            ];
            args.extend_from_slice(extra);
            Cli::try_parse_from(args).unwrap().report
        };
        let dir = std::env::temp_dir();
        let folder = dir.to_str().unwrap();
        let e = check_outputs(&parse(&["--html", "/nonexistent-folder/x.html"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot write --html /nonexistent-folder/x.html: no folder /nonexistent-folder"
        );
        let e = check_outputs(&parse(&["--csv", folder])).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot write --csv {folder}: it is a folder")
        );
        let file = dir.join("report.csv");
        check_outputs(&parse(&[
            "--csv",
            file.to_str().unwrap(),
            "--html",
            "r.html",
        ]))
        .unwrap();
    }

    /// A negative price is told the range, not taken for an unknown flag, and a price so
    /// large that the costs would overflow is refused; the bound itself is taken.
    #[test]
    fn prices_are_refused_with_their_range() {
        for flag in ["--cost-per-gpu-hour", "--energy-price-per-kwh"] {
            let e = refused(flag, "-1");
            assert!(
                e.contains("-1: give a price of 0 or more, at most 1e9"),
                "{e}"
            );
            let e = refused(flag, "1e308");
            assert!(e.contains("give a price of 0 or more, at most 1e9"), "{e}");
        }
        let e = refused("--headroom", "-0.1");
        assert!(e.contains("-0.1 is outside 0..=0.9"), "{e}");
        assert_eq!(price("1e9"), Ok(1e9));
        assert!(model_price("H100=-2").unwrap_err().contains("at most 1e9"));
    }
}
