//! `truthscale analyze`: stream a capture through the core and summarize it.

use crate::capture::{Capture, CaptureError};
use anyhow::{Context, bail};
use clap::ValueEnum;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;
use truthscale_core::analysis::{Analyzer, EntitySummary, Report, UpperBound};
use truthscale_core::gpus;
use truthscale_core::model::{Sample, Timestamp};
use truthscale_core::parse::dmon::{DmonParser, Scanned, Scanner};
use truthscale_core::parse::{Format, ParseError, Unread};
use truthscale_core::tracker::Deriver;

/// Malformed lines printed individually before the rest are only counted.
const SHOWN_ERRORS: usize = 20;
/// Outcome of reading one input.
#[derive(Debug)]
pub(crate) struct Analysis {
    /// The report.
    pub report: Report,
    /// The detected or given format.
    pub format: Format,
    /// Malformed lines.
    pub errors: Vec<ParseError>,
    /// Total malformed lines (beyond those kept).
    pub error_count: u64,
    /// Lines skipped as not data.
    pub skipped_lines: u64,
    /// What the capture held that is not read.
    pub unread: Unread,
    /// The read that failed and ended the capture early (a truncated compressed file, an
    /// I/O error): the report covers what was read before it.
    /// With the number of the last line read.
    pub stopped: Option<(CaptureError, usize)>,
}

/// Run the command; returns exit code 1 when any line was malformed.
///
/// # Errors
/// The file cannot be read, the format cannot be detected, or `--gpu-model` is unknown.
pub(crate) fn run(args: &AnalyzeArgs, env: &[(String, String)]) -> anyhow::Result<ExitCode> {
    if args.history.prometheus.is_some() {
        return history(args, env);
    }
    if let Some(flag) = args.history.stray_flag() {
        bail!("{flag} reads history from Prometheus: it needs --prometheus URL");
    }
    let Some(file) = &args.file else {
        bail!("give a capture FILE, or --prometheus URL");
    };
    let name = file.display().to_string();
    let (reader, len) = crate::capture::open_path(file)?;
    let progress = (std::io::stderr().is_terminal() && len.is_some()).then(|| {
        let bar = indicatif::ProgressBar::new(len.unwrap_or(0));
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let result = analyze_reader(reader, &name, args, env, progress.as_ref());
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let a = result?;
    if a.report.entities.is_empty() {
        for e in &a.errors {
            crate::stdout::say!("{e}");
        }
        if let Some((e, _)) = a.stopped {
            return Err(e.into());
        }
        bail!(
            "{name}: no GPU readings found as {} ({} malformed and {} non-data line(s)); is it a {} capture?{}",
            a.format.as_str(),
            a.error_count,
            a.skipped_lines,
            a.format.as_str(),
            a.unread
                .summary()
                .map(|s| format!(
                    " It holds {} truthscale does not read ({s}).",
                    crate::capture::fields_heading(a.format).0
                ))
                .unwrap_or_default()
        );
    }
    let mut out = crate::stdout::lock();
    if args.json {
        serde_json::to_writer(&mut out, &JsonReport::of(&a))?;
        writeln!(out)?;
        // The table says it under the report; beside the JSON, stderr does.
        if let Some(s) = a.unread.summary() {
            let (fields, doc) = crate::capture::fields_heading(a.format);
            crate::stdout::say!(
                "truthscale: warning: {name}: {fields} {s} ({doc} lists what is read)"
            );
        }
    } else {
        write_table(&mut out, &a)?;
    }
    Ok(said_and_status(&name, &a))
}

/// What `analyze --json` writes: the report, and beside it what the input held that is
/// not in it (also said on stderr), so that a reader of the JSON alone misses none of it.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    report: &'a Report,
    input: JsonInput<'a>,
}

/// The input's own account: its format, its malformed lines and the lines skipped as not
/// data, the read that ended it early, and what it held that is not read.
#[derive(serde::Serialize)]
struct JsonInput<'a> {
    format: &'a str,
    malformed_lines: u64,
    skipped_lines: u64,
    /// The read that failed and ended the capture (`null`: read to its end).
    stopped: Option<String>,
    /// Fields or keys not read, sentinels, impossible readings (`null`: none).
    not_read: Option<String>,
}

impl<'a> JsonReport<'a> {
    fn of(a: &'a Analysis) -> Self {
        JsonReport {
            report: &a.report,
            input: JsonInput {
                format: a.format.as_str(),
                malformed_lines: a.error_count,
                skipped_lines: a.skipped_lines,
                stopped: a
                    .stopped
                    .as_ref()
                    .map(|(e, line)| format!("{e} (after line {line})")),
                not_read: a.unread.summary(),
            },
        }
    }
}

/// The malformed lines and a read that ended the capture early, said on stderr after the
/// report; exit status 1 where there was either.
fn said_and_status(name: &str, a: &Analysis) -> ExitCode {
    for e in &a.errors {
        crate::stdout::say!("{e}");
    }
    if let Some((e, line)) = &a.stopped {
        crate::stdout::say!(
            "truthscale: {e}: reading stopped after line {line}; the summary covers the lines before it"
        );
    }
    if a.error_count > 0 {
        if a.error_count > a.errors.len() as u64 {
            crate::stdout::say!(
                "… and {} more malformed lines",
                a.error_count - a.errors.len() as u64
            );
        }
        crate::stdout::say!(
            "truthscale: {name}: {} malformed line(s) were not analyzed; the summary covers the rest",
            a.error_count
        );
        return ExitCode::from(1);
    }
    if a.stopped.is_some() {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Samples handed from the reading thread to the analyzing one at a time.
const BATCH: usize = 512;
/// `dcgmi dmon` lines handed over at a time (a hundred bytes or so each, once scanned).
const LINE_BATCH: usize = 2048;
/// Batches on their way between the two: memory stays bounded whatever the input.
const IN_FLIGHT: usize = 4;

/// What the reading thread hands over.
enum Handed {
    /// `dcgmi dmon` lines, each read on its own, for the analyzing thread to parse.
    Lines(Lines),
    /// Samples and malformed lines of any other format, parsed, and the bytes read so far.
    Samples(Vec<Result<Sample, ParseError>>, u64),
    /// The end of the input, with the lines the reading thread's parser skipped as not data.
    End(u64, Unread),
    /// A read failed: the capture ends, with the lines skipped as not data and what was not
    /// read before it, as at the end.
    Failed((CaptureError, usize), u64, Unread),
}

/// `dcgmi dmon` lines as a [`Scanner`] reads them: the costly part of parsing (splitting
/// rows into words and numbers) on the reading thread, the rest (sweeps, entity samples)
/// on the analyzing one, so that what passes between them is a few numbers a line.
#[derive(Debug, Default)]
struct Lines {
    /// Each line's number, what it is, and where its values end in `values`.
    lines: Vec<(usize, Scanned, usize)>,
    values: Vec<f64>,
    /// The lines that are not usable text (each in `lines` as a blank one, for the
    /// parser to count), with why.
    unreadable: Vec<(usize, String)>,
    /// Bytes read by the end of the batch.
    bytes_read: u64,
}

/// Analyze everything `reader` yields. One thread reads the capture, and parses it (a
/// `dcgmi dmon` capture: splits its rows into numbers), while this one derives and
/// analyzes, a bounded queue of batches between them: the same analysis, in the same
/// order, as one thread doing both.
///
/// # Errors
/// I/O errors, an undetectable format, or an unknown `--gpu-model`.
pub(crate) fn analyze_reader(
    reader: impl Read + Send,
    name: &str,
    args: &AnalyzeArgs,
    env: &[(String, String)],
    progress: Option<&indicatif::ProgressBar>,
) -> anyhow::Result<Analysis> {
    let reader = BufReader::with_capacity(1 << 18, reader);
    let interval = args.interval.as_secs_f64();
    let capture = Capture::open(reader, name, args.format.given(), interval)?;
    let format = capture.format();
    let nominal = capture.declared_interval(interval);
    let mut analyzing = Analyzing {
        analyzer: new_analyzer(args, env, nominal)?,
        // The `dcgmi dmon` parser on this thread, fed the lines the reading thread has read.
        dmon: DmonParser::new(name, interval, Timestamp(0)),
        name,
        errors: Vec::new(),
        error_count: 0,
        progress,
        reported: 0,
        unreadable: 0,
        lost: crate::capture::LostLines::of(format),
    };
    let scanning = format == Format::DcgmiDmon;
    let mut stopped = None;
    let (skipped_lines, unread) = std::thread::scope(|scope| -> anyhow::Result<(u64, Unread)> {
        // Made here, so that the receiving ends go away with this closure however it ends,
        // and a reading thread blocked on a full queue then stops.
        let (tx, rx) = mpsc::sync_channel(IN_FLIGHT);
        // Emptied batches of lines go back to the reading thread to be filled again.
        let (back, emptied) = mpsc::channel::<Lines>();
        std::thread::Builder::new()
            .name("capture".into())
            .spawn_scoped(scope, move || {
                read_capture(capture, scanning, &tx, &emptied)
            })?;
        for message in rx {
            match message {
                Handed::Lines(mut batch) => {
                    analyzing.lines(&mut batch);
                    let _ = back.send(batch);
                }
                Handed::Samples(batch, bytes) => analyzing.samples(batch, bytes),
                Handed::End(skipped, unread) if !scanning => return Ok((skipped, unread)),
                Handed::End(..) => return Ok(analyzing.finish_dmon()),
                // What was read before the failed read is analyzed, and the failure said.
                Handed::Failed(e, skipped, unread) => {
                    stopped = Some(e);
                    if scanning {
                        return Ok(analyzing.finish_dmon());
                    }
                    return Ok((skipped, unread));
                }
            }
        }
        anyhow::bail!("{name}: the reading thread stopped without a word");
    })?;
    analyzing.analyzer.finish();
    Ok(Analysis {
        report: analyzing.analyzer.report(),
        format,
        errors: analyzing.errors,
        error_count: analyzing.error_count,
        skipped_lines,
        unread,
        stopped,
    })
}

/// The reading thread: batches of `capture` sent on `tx` until its end or a failed read,
/// or until the analysis stops. A `dcgmi dmon` capture (`scanning`) is sent as scanned
/// lines, in the emptied batches that come back on `emptied`; any other as samples.
fn read_capture<R: BufRead>(
    mut capture: Capture<R>,
    scanning: bool,
    tx: &mpsc::SyncSender<Handed>,
    emptied: &mpsc::Receiver<Lines>,
) {
    let mut scanner = Scanner::default();
    loop {
        let (batch, last) = if scanning {
            read_lines(
                &mut capture,
                &mut scanner,
                emptied.try_recv().unwrap_or_default(),
            )
        } else {
            read_samples(&mut capture)
        };
        // A send fails only when the analysis has stopped: nothing to do then.
        if let Some(batch) = batch
            && tx.send(batch).is_err()
        {
            return;
        }
        if let Some(last) = last {
            let _ = tx.send(last);
            return;
        }
    }
}

/// The next batch of `dcgmi dmon` lines, scanned into `batch`, and the end or the failed
/// read that came after it.
fn read_lines<R: BufRead>(
    capture: &mut Capture<R>,
    scanner: &mut Scanner,
    mut batch: Lines,
) -> (Option<Handed>, Option<Handed>) {
    let read = capture.lines_while(|_, _, line_no, text| {
        let line = match text {
            Ok(t) => scanner.scan(t, &mut batch.values),
            Err(message) => {
                batch.unreadable.push((line_no, message));
                scanner.scan("", &mut batch.values)
            }
        };
        batch.lines.push((line_no, line, batch.values.len()));
        batch.lines.len() < LINE_BATCH
    });
    let last = match read {
        Ok(true) => None,
        Ok(false) => Some(Handed::End(0, Unread::default())),
        Err(e) => Some(Handed::Failed(
            (e, capture.lines_read()),
            0,
            Unread::default(),
        )),
    };
    batch.bytes_read = capture.bytes_read();
    let batch = (!batch.lines.is_empty()).then_some(Handed::Lines(batch));
    (batch, last)
}

/// The next batch of samples of a capture in any other format, and the end (with the
/// lines its parser skipped and what it did not read) or the failed read after it.
fn read_samples<R: BufRead>(capture: &mut Capture<R>) -> (Option<Handed>, Option<Handed>) {
    let mut batch = Vec::with_capacity(BATCH);
    let last = loop {
        match capture.next_sample() {
            Ok(Some(r)) => {
                batch.push(r);
                if batch.len() == BATCH {
                    break None;
                }
            }
            Ok(None) => {
                let unread = capture.unread().cloned().unwrap_or_default();
                break Some(Handed::End(capture.skipped_lines(), unread));
            }
            Err(e) => {
                let unread = capture.unread().cloned().unwrap_or_default();
                let at = (e, capture.lines_read());
                break Some(Handed::Failed(at, capture.skipped_lines(), unread));
            }
        }
    };
    let batch = (!batch.is_empty()).then(|| Handed::Samples(batch, capture.bytes_read()));
    (batch, last)
}

/// The analyzing thread's side: the analyzer, the `dcgmi dmon` parser, the malformed
/// lines kept and counted, and the progress shown.
struct Analyzing<'a> {
    analyzer: Analyzer,
    dmon: DmonParser,
    name: &'a str,
    errors: Vec<ParseError>,
    error_count: u64,
    progress: Option<&'a indicatif::ProgressBar>,
    /// Bytes already shown on `progress`.
    reported: u64,
    /// `dcgmi dmon` lines that were no text: blank lines to the parser, malformed lines here.
    unreadable: u64,
    /// When a malformed line's loss is told to the analyzer.
    lost: crate::capture::LostLines,
}

impl Analyzing<'_> {
    fn malformed(&mut self, e: ParseError) {
        self.error_count += 1;
        if self.errors.len() < SHOWN_ERRORS {
            self.errors.push(e);
        }
    }

    fn progress_to(&mut self, bytes: u64) {
        if let Some(bar) = self.progress {
            bar.inc(bytes - self.reported);
            self.reported = bytes;
        }
    }

    /// A batch of scanned `dcgmi dmon` lines parsed into samples and analyzed; the batch
    /// left empty, to be filled again.
    fn lines(&mut self, batch: &mut Lines) {
        let mut start = 0;
        let mut unreadable = batch.unreadable.drain(..).peekable();
        for (line_no, line, end) in batch.lines.drain(..) {
            let values = batch.values.get(start..end).unwrap_or_default();
            start = end;
            let mut r = self.dmon.push_scanned(line, values);
            // A line that is not text was a blank one to the parser, which counts lines,
            // so that the next ones keep their numbers.
            if let Some((_, message)) = unreadable.next_if(|(n, _)| *n == line_no) {
                self.unreadable += 1;
                r = Err(ParseError {
                    file: self.name.to_string(),
                    line: line_no,
                    message,
                });
            }
            match r {
                Ok(Some(s)) => {
                    self.analyzer.push(&s);
                    self.dmon.recycle(s.entities);
                    if self.lost.handed() {
                        self.analyzer.line_lost();
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    self.malformed(e);
                    if self.lost.malformed() {
                        self.analyzer.line_lost();
                    }
                }
            }
        }
        drop(unreadable);
        batch.values.clear();
        self.progress_to(batch.bytes_read);
    }

    /// A batch of samples and malformed lines, analyzed and counted.
    fn samples(&mut self, batch: Vec<Result<Sample, ParseError>>, bytes: u64) {
        for r in batch {
            match r {
                Ok(s) => self.analyzer.push(&s),
                Err(e) => {
                    self.malformed(e);
                    if self.lost.malformed() {
                        self.analyzer.line_lost();
                    }
                }
            }
        }
        self.progress_to(bytes);
    }

    /// The `dcgmi dmon` capture's end: its last sweep analyzed; the lines its parser
    /// skipped as not data, and what it did not read.
    fn finish_dmon(&mut self) -> (u64, Unread) {
        if let Some(s) = self.dmon.finish() {
            self.analyzer.push(&s);
        }
        // A line that is no text was a blank one to the parser: a malformed line, not one
        // skipped as not data.
        let skipped = self.dmon.skipped_lines().saturating_sub(self.unreadable);
        (skipped, self.dmon.unread().clone())
    }
}

/// The analyzer `args` ask for (`--gpu-model`, `--config`, `--timeline`), with samples
/// `nominal` seconds apart (`None`: learned from the input).
///
/// # Errors
/// An unknown `--gpu-model`, or a configuration file that does not load.
pub(crate) fn new_analyzer(
    args: &AnalyzeArgs,
    env: &[(String, String)],
    nominal: Option<f64>,
) -> anyhow::Result<Analyzer> {
    let spec = match &args.gpu_model {
        Some(m) => Some(gpus::lookup(m).with_context(|| {
            let keys: Vec<_> = gpus::CATALOG.iter().map(|s| s.key).collect();
            format!(
                "--gpu-model {m:?} is not in the catalog; known: {}",
                keys.join(", ")
            )
        })?),
        None => None,
    };
    let (derive_config, verdict_config) =
        crate::config::Config::offline_sections(args.config.as_deref(), env)?;
    let mut deriver = Deriver::new(derive_config, nominal);
    deriver.set_model_override(spec);
    deriver.set_verdict_config(verdict_config);
    Ok(Analyzer::new(deriver, args.timeline))
}

/// What the effective compute stands on, where not every window with a tensor counter
/// could be clock-corrected (only the corrected ones count in it).
fn corrected_note(fraction: Option<f64>) -> String {
    match fraction {
        Some(f) if f < 1.0 => format!(
            "  over the clock-corrected windows only ({} of those with a tensor counter)",
            pct(Some(f))
        ),
        _ => String::new(),
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "—".to_string(), |v| format!("{:.1}%", 100.0 * v))
}

/// The regime mix, largest first, in serving words (prefill, decode) only where the
/// workload is known to be LLM serving; marked when it is a power-heuristic estimate.
fn phases(e: &EntitySummary) -> String {
    let Some(f) = &e.regime_fraction else {
        return "unclassified".into();
    };
    let serving = e.phase_fraction.is_some();
    let (compute, memory) = if serving {
        ("prefill", "decode")
    } else {
        ("compute-bound", "memory-bound")
    };
    let mut v: Vec<(&str, f64)> = vec![
        ("idle", f.idle),
        (compute, f.compute_bound),
        (memory, f.memory_bound),
        ("mixed", f.mixed),
        ("stalled", f.stalled),
        ("underloaded", f.underloaded),
        ("comm-bound", f.comm_bound),
    ];
    v.retain(|(_, x)| *x >= 0.005);
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    if v.is_empty() {
        return "unclassified".into();
    }
    let mix = v
        .iter()
        .map(|(n, x)| format!("{n} {:.0}%", 100.0 * x))
        .collect::<Vec<_>>()
        .join(", ");
    // Shares of the classified seconds: say of how much of the observed time, where not all.
    let mix = match e.regime_classified_share.filter(|x| *x < 0.995) {
        Some(x) => format!(
            "{mix} of the {:.0}% of the time classified (the rest unclassified)",
            100.0 * x
        ),
        None => mix,
    };
    match e.regime_method {
        Some(truthscale_core::phase::PhaseMethod::PowerHeuristic) => {
            format!(
                "{mix} (estimate: busy flag, or graphics-engine activity in its place, and power; no tensor counter)"
            )
        }
        _ => mix,
    }
}

/// The model as reported, and the catalog model `--gpu-model` put in its place, if any.
fn model_text(e: &EntitySummary) -> String {
    let spec = e.catalog_model.and_then(gpus::by_key);
    match (e.model.as_deref(), spec) {
        (Some(m), Some(s)) if gpus::lookup(m).map(|r| r.key) != Some(s.key) => {
            format!("{m} (taken as {}: --gpu-model)", s.name)
        }
        (Some(m), _) => m.to_owned(),
        (None, Some(s)) => format!("{} (--gpu-model)", s.name),
        (None, None) => "unknown model".to_owned(),
    }
}

/// The effective compute and inflation gap lines: the measured figures, and where some
/// windows had none, the upper bound, what it lacked, and the gap it implies.
fn write_effective_compute(out: &mut impl Write, e: &EntitySummary) -> std::io::Result<()> {
    let proxy = e
        .power_proxy
        .map(|p| format!("  power proxy {:.2} (estimate)", p.mean))
        .unwrap_or_default();
    let bound = e.effective_compute_upper_bound.as_ref();
    let why = |b: &UpperBound| {
        let fixes: Vec<&str> = b.missing.iter().map(|m| m.fix.as_str()).collect();
        fixes.join("; ")
    };
    match (e.effective_compute, bound) {
        (Some(ecf), _) => writeln!(
            out,
            "  effective compute  {} (p95 {}){}",
            pct(Some(ecf.mean)),
            pct(Some(ecf.p95)),
            corrected_note(e.clock_corrected)
        )?,
        (None, Some(b)) => writeln!(
            out,
            "  effective compute  ≤ {} over {:.0} s ({}){proxy}",
            pct(Some(b.mean)),
            b.seconds,
            why(b)
        )?,
        // Readings with no time to weigh them by (one sample, a gap) are not "no counter".
        (None, None) => writeln!(
            out,
            "  effective compute  unknown (no tensor counter or busy flag over any observed time; see the diagnostics){proxy}"
        )?,
    }
    if let (Some(_), Some(b)) = (e.effective_compute, bound) {
        writeln!(
            out,
            "  ECF upper bound    ≤ {} over {:.0} s, {:.0} s of them bounded ({}){proxy}",
            pct(Some(b.mean)),
            b.seconds,
            b.bounded_seconds,
            why(b)
        )?;
    }
    if let Some(g) = e.inflation_gap_points {
        // Of the windows with effective compute only, where some had only its bound: the
        // bound's own gap line below covers them all.
        let some = if bound.is_some_and(|b| b.bounded_seconds > 0.0) {
            "  over the windows with effective compute only"
        } else {
            ""
        };
        writeln!(out, "  inflation gap      {:.1} points{some}", g.mean)?;
    }
    if let Some(g) = bound.and_then(|b| b.inflation_gap_points_at_least)
        && g > 0.0
    {
        writeln!(
            out,
            "  inflation gap      at least {g:.1} points (reported utilization over the bound)"
        )?;
    }
    Ok(())
}

/// The verdict that held longest, then each verdict's share of the time (≥ 0.5 %), largest
/// first: `starved (starved 80%, busy 20%)`.
fn verdicts(e: &EntitySummary) -> String {
    let mut v: Vec<(&str, f64)> = e
        .verdict_fraction
        .iter()
        .map(|(n, x)| (*n, *x))
        .filter(|(_, x)| *x >= 0.005)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    if v.is_empty() {
        return e.verdict.as_str().to_string();
    }
    let shares: Vec<String> = v
        .iter()
        .map(|(n, x)| format!("{n} {:.0}%", 100.0 * x))
        .collect();
    format!("{} ({})", e.verdict.as_str(), shares.join(", "))
}

/// Where any time was starved: its causes, largest first, each with its seconds and its
/// share of the starved time (shares under 0.5 % left out): `cpu_throttled 600 s (75%),
/// unknown 200 s (25%)`.
fn starved_causes(e: &EntitySummary) -> Option<String> {
    let starved: f64 = e.starved_cause_seconds.values().sum();
    if starved <= 0.0 {
        return None;
    }
    let mut v: Vec<(&str, f64)> = e
        .starved_cause_seconds
        .iter()
        .map(|(n, s)| (*n, *s))
        .filter(|(_, s)| *s / starved >= 0.005)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let causes: Vec<String> = v
        .iter()
        .map(|(n, s)| format!("{n} {s:.0} s ({:.0}%)", 100.0 * s / starved))
        .collect();
    Some(causes.join(", "))
}

/// The verdict line, and where any time was starved, the line of its causes.
fn write_verdict(out: &mut impl Write, e: &EntitySummary) -> std::io::Result<()> {
    writeln!(out, "  verdict            {}", verdicts(e))?;
    if let Some(causes) = starved_causes(e) {
        writeln!(out, "  starved by cause   {causes}")?;
    }
    Ok(())
}

fn write_table(out: &mut impl Write, a: &Analysis) -> std::io::Result<()> {
    write_report(out, &format!("format: {}", a.format.as_str()), &a.report)?;
    if a.skipped_lines > 0 {
        writeln!(
            out,
            "skipped {} non-data line(s) (comments, blank lines, prompts)",
            a.skipped_lines
        )?;
    }
    if let Some(s) = a.unread.summary() {
        let (fields, doc) = crate::capture::fields_heading(a.format);
        writeln!(out, "{fields} {s} ({doc} lists what is read)")?;
    }
    Ok(())
}

/// The report as a table per entity, after a `header` line saying where it came from.
///
/// # Errors
/// Writing fails.
pub(crate) fn write_report(
    out: &mut impl Write,
    header: &str,
    report: &Report,
) -> std::io::Result<()> {
    writeln!(out, "{header}")?;
    if report.entities.is_empty() {
        writeln!(out, "no GPU readings found")?;
    }
    for e in &report.entities {
        write_entity(out, e)?;
    }
    if !report.diagnostics.is_empty() {
        writeln!(out)?;
        let counts: Vec<String> = report
            .diagnostics
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        writeln!(out, "diagnostics: {}", counts.join(", "))?;
        let shown = report.first_diagnostics.len().min(SHOWN_DIAGNOSTICS);
        for d in &report.first_diagnostics[..shown] {
            writeln!(out, "  {d}")?;
        }
        let total: u64 = report.diagnostics.values().sum();
        let more = total.saturating_sub(shown as u64);
        if more > 0 {
            writeln!(
                out,
                "  … and {more} more (the counts above; --json lists the first {})",
                report.first_diagnostics.len()
            )?;
        }
    }
    Ok(())
}

/// The diagnostics the table writes out in full; the rest are counted.
const SHOWN_DIAGNOSTICS: usize = 5;

/// One entity's table.
fn write_entity(out: &mut impl Write, e: &EntitySummary) -> std::io::Result<()> {
    let sim = if e.simulated { "  [SIMULATED]" } else { "" };
    writeln!(out)?;
    writeln!(out, "{}  {}{sim}", e.entity, model_text(e))?;
    writeln!(
        out,
        "  samples            {}   fidelity {}",
        e.samples,
        e.fidelity.as_str()
    )?;
    if e.unobserved_seconds > 0.0 {
        writeln!(
            out,
            "  not observed       {:.0} s (gaps: left out of every figure below)",
            e.unobserved_seconds
        )?;
    }
    writeln!(
        out,
        "  reported util      {}",
        pct(e.reported_utilization.map(|m| m.mean))
    )?;
    write_effective_compute(out, e)?;
    if let Some(s) = e.spatial_inflation {
        writeln!(out, "  spatial inflation  {:.1}×", s.mean)?;
    }
    writeln!(
        out,
        "  roofline sat.      {}",
        pct(e.roofline_saturation.map(|m| m.mean))
    )?;
    writeln!(
        out,
        "  {}{}",
        if e.phase_fraction.is_some() {
            "phases             "
        } else {
            "regimes            "
        },
        phases(e)
    )?;
    write_verdict(out, e)?;
    write_memory(out, e)?;
    if let Some(agree) = e.phase_agreement_with_truth {
        writeln!(
            out,
            "  phase vs truth     {:.1}% of seconds agree",
            100.0 * agree
        )?;
    }
    Ok(())
}

/// The memory line: peak use, of the total, and the MIG profile it fits, with the
/// constraints the fit could not check (their demand never measured).
fn write_memory(out: &mut impl Write, e: &EntitySummary) -> std::io::Result<()> {
    let Some(m) = &e.memory else {
        return Ok(());
    };
    let name = |c| {
        serde_json::to_value(c)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    let unchecked = if m.mig_unmeasured.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = m.mig_unmeasured.iter().map(|c| name(*c)).collect();
        format!("; {} not measured, not checked", names.join(" and "))
    };
    writeln!(
        out,
        "  memory             peak {:.1} GiB of {:.1} GiB ({}){}",
        m.peak_used_bytes / 1073741824.0,
        m.total_bytes / 1073741824.0,
        pct(Some(m.peak_used_fraction)),
        match (&m.mig_fit, m.mig_binding) {
            (Some(p), Some(b)) => format!(
                "; fits MIG {p} (bound by {}{unchecked}; headroom {:.0}%)",
                name(b),
                100.0 * m.headroom
            ),
            _ => String::new(),
        }
    )?;
    Ok(())
}

/// Capture formats on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum FormatArg {
    /// Detect from the first lines.
    Auto,
    /// `dcgmi dmon` text output.
    DcgmiDmon,
    /// dcgm-exporter `/metrics` text (one or more scrapes).
    DcgmExporter,
    /// truthscale JSONL trace.
    Jsonl,
    /// `nvidia-smi --query-gpu=… --format=csv` output, with its header.
    NvidiaSmiCsv,
}

impl FormatArg {
    /// The format given, `None` for `auto` (detected from the first lines).
    fn given(self) -> Option<Format> {
        match self {
            FormatArg::DcgmiDmon => Some(Format::DcgmiDmon),
            FormatArg::DcgmExporter => Some(Format::DcgmExporter),
            FormatArg::Jsonl => Some(Format::Jsonl),
            FormatArg::NvidiaSmiCsv => Some(Format::NvidiaSmiCsv),
            FormatArg::Auto => None,
        }
    }
}

/// `truthscale analyze`.
#[derive(Debug, clap::Args)]
pub(crate) struct AnalyzeArgs {
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
    #[arg(long, value_parser = crate::setting::duration_flag(Duration::from_millis(1), Duration::from_secs(3600)), default_value = "1s", conflicts_with = "prometheus")]
    pub interval: Duration,
    /// Treat every GPU as this model (a catalog key such as `h100-sxm`, or an NVML name).
    #[arg(long)]
    pub gpu_model: Option<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Include the per-window timeline in the JSON (memory grows with the input).
    #[arg(long, requires = "json")]
    pub timeline: bool,
    /// Configuration file (TOML) whose `[derive]` section sets thresholds and hysteresis and
    /// whose `[verdict]` section the verdict's (see `truthscale config defaults`);
    /// `TRUTHSCALE_DERIVE__…` and `TRUTHSCALE_VERDICT__…` variables override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// History from a Prometheus server instead of a capture file.
    #[command(flatten)]
    pub history: crate::history::PrometheusArgs,
}

/// `analyze --prometheus`: the same analysis over a Prometheus history.
fn history(args: &AnalyzeArgs, env: &[(String, String)]) -> anyhow::Result<ExitCode> {
    // Warnings (remote-read given up for query_range) reach stderr, as `report`'s do;
    // RUST_LOG=truthscale::prometheus=debug lists each request.
    crate::logging::init(env);
    let resolved = args
        .history
        .resolve(&crate::history::Defaults::ANALYZE, env)?;
    let h = crate::history::History::open(&resolved)?;
    let base = h.base_url().to_owned();
    let mut analyzer = new_analyzer(args, env, Some(h.step_seconds()))?;
    let summary = h.feed(|s| analyzer.push(s))?;
    analyzer.finish();
    let report = analyzer.report();
    // As a capture without readings, and as `report`: an error, never an empty success.
    if report.entities.is_empty() {
        bail!(
            "{base}: the GPU series hold no readings in the window ({summary}); check --since, --until and --selector"
        );
    }
    let mut out = crate::stdout::lock();
    if args.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
        crate::stdout::say!("truthscale: {summary}");
    } else {
        write_report(&mut out, &format!("source: {summary}"), &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compressed capture cut short (a copy interrupted) is analyzed up to where its
    /// stream ends, and the failed read said with the last line read: the whole analysis
    /// was thrown away, although every line before the cut was whole.
    #[test]
    fn a_truncated_compressed_capture_is_analyzed_up_to_the_cut() {
        use std::io::Write as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            analyze: AnalyzeArgs,
        }
        use clap::Parser as _;
        let mut text = String::new();
        for s in 0..4000 {
            text += &format!(
                "{{\"taken\":\"2026-01-01T{:02}:{:02}:{:02}Z\",\"gpu\":0,\"gpu_util\":0.5,\"x\":{s}}}\n",
                s / 3600,
                s / 60 % 60,
                s % 60
            );
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        let whole = gz.finish().unwrap();
        let cut = &whole[..whole.len() / 2];
        let cli = Cli::try_parse_from(["analyze", "x.gz"]).unwrap();
        let a = analyze_reader(cut, "x.gz", &cli.analyze, &[], None).unwrap();
        let (e, line) = a.stopped.expect("the failed read is kept");
        assert!(e.to_string().starts_with("cannot read x.gz: "), "{e}");
        assert!((1..4000).contains(&line), "{line}");
        let samples = a.report.entities[0].samples;
        assert!(
            samples > 0 && samples <= line as u64,
            "{samples} of {line} lines"
        );
        assert_eq!(a.report.entities[0].reported_utilization.unwrap().mean, 0.5);
    }

    /// A malformed line's time is not the next sample's: a JSONL trace at 1 s of busy 0.1
    /// whose line at 6 s is cut short, then 0.9 at 7 s, reads 1.7 / 9 s (the window of 7 s
    /// is its cadence, 1 s; the second before it is not observed), not 2.5 / 10 s; a
    /// `dcgmi dmon` capture of two GPUs at 1 s whose GPU 1 row of the second sweep and GPU 0
    /// row of the fourth (the first of its sweep) are malformed likewise: GPU 0 reads 0.1,
    /// 0.1, 0.1, (lost), 0.9 and GPU 1 0.2, (lost), 0.8, 0.2, 0.2 over 4 s each, 1 s not
    /// observed. By hand.
    #[test]
    fn a_malformed_lines_time_is_not_the_next_samples() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            analyze: AnalyzeArgs,
        }
        use clap::Parser as _;
        let mut jsonl = String::new();
        for t in 1..=10 {
            let util = if t == 7 { 0.9 } else { 0.1 };
            jsonl += &if t == 6 {
                "{\"taken\":\"2026-01-01T00:00:06Z\",\"gpu\":0,\"gpu_ut\n".to_string()
            } else {
                format!(
                    "{{\"taken\":\"2026-01-01T00:00:{t:02}Z\",\"gpu\":0,\"gpu_util\":{util}}}\n"
                )
            };
        }
        let cli = Cli::try_parse_from(["analyze", "x"]).unwrap();
        let a = analyze_reader(jsonl.as_bytes(), "x", &cli.analyze, &[], None).unwrap();
        let e = &a.report.entities[0];
        assert_eq!(a.error_count, 1);
        let mean = e.reported_utilization.unwrap().mean;
        assert!((mean - 1.7 / 9.0).abs() < 1e-12, "{mean}");
        assert_eq!(e.unobserved_seconds, 1.0);
        let dmon = "#Entity   GPUTL\nID\nGPU 0     10\nGPU 1     20\nGPU 0     10\nGPU 1     2x\nGPU 0     10\nGPU 1     80\nGPU 0     1y\nGPU 1     20\nGPU 0     90\nGPU 1     20\n";
        let cli = Cli::try_parse_from(["analyze", "--format", "dcgmi-dmon", "x"]).unwrap();
        let a = analyze_reader(dmon.as_bytes(), "x", &cli.analyze, &[], None).unwrap();
        assert_eq!(a.error_count, 2);
        let got: Vec<(f64, f64)> = a
            .report
            .entities
            .iter()
            .map(|e| (e.reported_utilization.unwrap().mean, e.unobserved_seconds))
            .collect();
        let want = [
            ((0.1 * 3.0 + 0.9) / 4.0, 1.0),
            ((0.2 * 3.0 + 0.8) / 4.0, 1.0),
        ];
        for (g, w) in got.iter().zip(want) {
            assert!((g.0 - w.0).abs() < 1e-12 && g.1 == w.1, "{got:?}");
        }
    }

    /// A line lost before a GPU's cadence is known (between its first two samples, in a
    /// trace that declares no interval) leaves the window after it waiting for the next
    /// spacing: a 1 s trace of 0.5 at 1 s, its line at 2 s cut, 0.9 at 3 s and 0.1 at 4 s and
    /// 5 s reads (0.9 + 0.1 + 0.1) / 3 s with 1 s not observed (the first sample's time is
    /// unknown), where it read (2 × 0.5 + 2 × 0.9 + 0.1 + 0.1) / 6 s = 0.5, every second
    /// observed. Cut after 3 s, no second is observed: its 2 s are unobserved, the mean
    /// blank. By hand.
    #[test]
    fn a_line_lost_before_the_cadence_is_known_waits_for_it() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            analyze: AnalyzeArgs,
        }
        use clap::Parser as _;
        let line = |t: u32, util: f64| {
            format!("{{\"taken\":\"2026-01-01T00:00:{t:02}Z\",\"gpu\":0,\"gpu_util\":{util}}}\n")
        };
        let head = line(1, 0.5) + "{\"taken\":\"2026-01-01T00:00:02Z\",\"gpu\n" + &line(3, 0.9);
        let cli = Cli::try_parse_from(["analyze", "x"]).unwrap();
        let whole = head.clone() + &line(4, 0.1) + &line(5, 0.1);
        let a = analyze_reader(whole.as_bytes(), "x", &cli.analyze, &[], None).unwrap();
        let e = &a.report.entities[0];
        let mean = e.reported_utilization.unwrap().mean;
        assert!((mean - 1.1 / 3.0).abs() < 1e-12, "{mean}");
        assert_eq!(e.unobserved_seconds, 1.0);
        let a = analyze_reader(head.as_bytes(), "x", &cli.analyze, &[], None).unwrap();
        let e = &a.report.entities[0];
        assert!(e.reported_utilization.is_none());
        assert_eq!(e.unobserved_seconds, 2.0);
    }

    /// A line that is no text is one malformed line, not also a line skipped as not data:
    /// "2 malformed and 2 non-data line(s)" was said of a capture of two such lines. One
    /// comment and one line of bytes that are no UTF-8 among readings, as JSONL and as
    /// `dcgmi dmon` (read on two threads, its count taken on the analyzing one).
    #[test]
    fn a_line_that_is_no_text_is_malformed_not_skipped() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            analyze: AnalyzeArgs,
        }
        use clap::Parser as _;
        let jsonl = b"# a comment\n{\"taken\":\"2026-01-01T00:00:00Z\",\"gpu\":0,\"gpu_util\":0.5}\n\xff\xfe\n{\"taken\":\"2026-01-01T00:00:01Z\",\"gpu\":0,\"gpu_util\":0.5}\n";
        let dmon = b"#Entity   GPUTL\nID\nGPU 0     50\n\xff\xfe\nGPU 0     60\n";
        for (format, bytes, skipped) in [("jsonl", &jsonl[..], 1), ("dcgmi-dmon", &dmon[..], 0)] {
            let cli = Cli::try_parse_from(["analyze", "--format", format, "x"]).unwrap();
            let a = analyze_reader(bytes, "x", &cli.analyze, &[], None).unwrap();
            assert_eq!((a.error_count, a.skipped_lines), (1, skipped), "{format}");
            assert_eq!(a.errors[0].line, if format == "jsonl" { 3 } else { 4 });
        }
    }

    /// Eight diagnostics, five written out: the other three are said, never dropped in
    /// silence; five or fewer need no such line.
    #[test]
    fn diagnostics_past_the_first_five_are_counted() {
        let report = |n: u64| Report {
            entities: Vec::new(),
            diagnostics: [("gap".to_string(), n)].into(),
            first_diagnostics: (0..n.min(20)).map(|i| format!("gap {i}")).collect(),
        };
        let mut out = Vec::new();
        write_report(&mut out, "format: jsonl", &report(8)).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("  gap 4\n") && !text.contains("  gap 5\n"),
            "{text}"
        );
        assert!(
            text.ends_with("  … and 3 more (the counts above; --json lists the first 8)\n"),
            "{text}"
        );
        let mut out = Vec::new();
        write_report(&mut out, "format: jsonl", &report(5)).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("more"));
    }
}
