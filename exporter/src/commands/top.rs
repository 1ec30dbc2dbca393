//! `truthscale top`: one row per GPU (or pod) with reported vs effective, phase, verdict, KV
//! cache and queue, and a sparkline of recent effective compute.
//!
//! On a terminal it is a live ratatui view (`q`, `Esc` or `Ctrl-C` quits) fed by a running
//! sidecar (`--url`), NVML directly (`--nvml-library`) or a replay played back one sample
//! per `--interval`. When stdout is not a terminal, or with `--once`, it prints plain text:
//! `--once` prints one frame and exits (with a replay, the newest sample per GPU).

use crate::sources::Source as _;
use crate::view::{self, GpuView, Stepper};
use anyhow::bail;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use std::time::SystemTime;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::model::Sample;
use truthscale_core::verdict::VerdictConfig;

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// A sparkline of the last `width` values (0..1).
#[must_use]
pub(crate) fn sparkline(values: &[f64], width: usize) -> String {
    let start = values.len().saturating_sub(width);
    values[start..]
        .iter()
        .map(|v| {
            if v.is_nan() {
                // A window without the value: a hole, never the lowest bar.
                ' '
            } else {
                SPARK[((v.clamp(0.0, 1.0) * 7.0).round() as usize).min(7)]
            }
        })
        .collect()
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |v| format!("{:.0}%", v * 100.0))
}

fn effective_text(v: &GpuView) -> String {
    match (v.effective, v.upper_bound) {
        (Some(e), _) => pct(Some(e)),
        (None, Some(b)) => format!("≤{}", pct(Some(b))),
        _ => "—".to_string(),
    }
}

fn kv_text(v: &GpuView) -> String {
    pct(v
        .serving
        .as_ref()
        .filter(|s| s.absent_reason.is_none())
        .and_then(|s| s.kv_cache_utilization))
}

fn queue_text(v: &GpuView) -> String {
    v.serving
        .as_ref()
        .filter(|s| s.absent_reason.is_none())
        .and_then(|s| s.queued_requests)
        .map_or_else(|| "—".to_string(), |q| format!("{q:.0}"))
}

/// A starved GPU's cause, `—` for any other verdict.
fn cause_text(v: &GpuView) -> &'static str {
    v.verdict
        .as_ref()
        .and_then(|r| r.cause)
        .map_or("—", |c| c.as_str())
}

/// The GPU's index (`?` unknown), its MIG instance (`0/2`), and `*` for simulated data.
fn gpu_text(v: &GpuView) -> String {
    let gpu = v.gpu.map_or_else(|| "?".to_string(), |g| g.to_string());
    let mig = v.mig.map(|i| format!("/{i}")).unwrap_or_default();
    let sim = if v.simulated { "*" } else { "" };
    format!("{gpu}{mig}{sim}")
}

/// The plain table's columns: title, least width, and whether right-aligned.
const PLAIN_COLUMNS: [(&str, usize, bool); 9] = [
    ("GPU", 6, false),
    ("REPORTED", 8, true),
    ("EFFECTIVE", 9, true),
    ("SATURATION", 10, true),
    ("PHASE", 13, false),
    ("VERDICT", 9, false),
    ("CAUSE", 14, false),
    ("KV", 6, true),
    ("QUEUE", 6, true),
];

/// One frame as text: each column as wide as its widest cell (a phase marked
/// `(estimate)` included), so that no cell pushes the ones after it out of their column.
#[must_use]
pub(crate) fn frame(views: &[GpuView]) -> String {
    let mut o = String::new();
    if views.iter().any(|v| v.simulated) {
        let _ = writeln!(o, "[SIMULATED] GPU* is simulated data, not a real GPU");
    }
    let rows: Vec<[String; 9]> = views
        .iter()
        .map(|v| {
            [
                gpu_text(v),
                pct(v.reported),
                effective_text(v),
                pct(v.saturation),
                v.phase.clone().unwrap_or_else(|| "—".into()),
                v.verdict
                    .as_ref()
                    .map_or("—", |r| r.verdict.as_str())
                    .to_string(),
                cause_text(v).to_string(),
                kv_text(v),
                queue_text(v),
            ]
        })
        .collect();
    let widths: Vec<usize> = PLAIN_COLUMNS
        .iter()
        .enumerate()
        .map(|(i, (_, least, _))| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .fold(*least, usize::max)
        })
        .collect();
    let line = |o: &mut String, cells: [&str; 9], tail: &str| {
        for (i, cell) in cells.iter().enumerate() {
            let (w, right) = (widths[i], PLAIN_COLUMNS[i].2);
            let sep = if i == 0 { "" } else { " " };
            let _ = if right {
                write!(o, "{sep}{cell:>w$}")
            } else {
                write!(o, "{sep}{cell:<w$}")
            };
        }
        let _ = writeln!(o, "  {tail}");
    };
    line(&mut o, PLAIN_COLUMNS.map(|c| c.0), "EFFECTIVE (recent)");
    for (v, r) in views.iter().zip(&rows) {
        line(
            &mut o,
            r.each_ref().map(String::as_str),
            &sparkline(&v.history, 30),
        );
    }
    o
}

/// The samples of one instant of a replay, each with whether a line of the capture was
/// malformed and lost before it (its time is then not the sample's: `Deriver::line_lost`).
type Step = Vec<(bool, Sample)>;

/// Every sample of a capture (any format `analyze` reads) grouped by time, the nominal
/// interval, and the number of malformed lines.
type Replayed = ((Vec<Step>, Option<f64>), usize);

/// Every sample of a capture grouped by time (see [`Replayed`]).
fn read_replay(path: &Path, spacing: f64) -> anyhow::Result<Replayed> {
    // Played back on a terminal, so held: one step per instant (a JSONL capture has a
    // sample per GPU with the same time).
    let ((steps, nominal, _), malformed) = view::read_capture(
        (path, spacing),
        |nominal| (Vec::new(), nominal, false),
        |(steps, _, lost): &mut (Vec<Step>, Option<f64>, bool), s| match (s, steps.last_mut()) {
            (Some(s), Some(step)) if step[0].1.taken == s.taken => {
                step.push((std::mem::take(lost), s));
            }
            (Some(s), _) => steps.push(vec![(std::mem::take(lost), s)]),
            (None, _) => *lost = true,
        },
    )?;
    Ok(((steps, nominal), malformed))
}

/// Where the views come from.
#[derive(Debug)]
enum Feed {
    /// A capture, played back one sample per tick.
    Replay {
        name: String,
        samples: Vec<Step>,
        next: usize,
        stepper: Stepper,
        /// Malformed lines skipped (each said on stderr): exit status 1 at the end.
        malformed: usize,
    },
    /// A running sidecar's `/metrics`.
    Url {
        url: String,
        scrapes: u64,
        error: Option<String>,
        views: Vec<GpuView>,
        history: BTreeMap<String, Vec<f64>>,
    },
    /// NVML, read directly.
    Nvml {
        library: String,
        source: Box<crate::sources::NvmlSource>,
        ticks: u64,
        error: Option<String>,
        stepper: Stepper,
    },
}

impl Feed {
    fn open(args: &TopArgs, derive: &DeriveConfig, cfg: &VerdictConfig) -> anyhow::Result<Feed> {
        match (&args.replay, &args.url, &args.nvml_library) {
            (Some(p), None, None) => {
                let ((samples, nominal), malformed) = read_replay(p, args.spacing.as_secs_f64())?;
                // As `analyze` and `explain` end: an empty table would pass for no GPU busy.
                if samples.is_empty() {
                    anyhow::bail!("{}: no GPU in the input", p.display());
                }
                Ok(Feed::Replay {
                    name: p.display().to_string(),
                    samples,
                    next: 0,
                    malformed,
                    stepper: Stepper::new(derive, cfg, nominal),
                })
            }
            (None, Some(u), None) => Ok(Feed::Url {
                url: u.clone(),
                scrapes: 0,
                error: None,
                views: Vec::new(),
                history: BTreeMap::new(),
            }),
            (None, None, lib) => {
                let lib = lib
                    .as_deref()
                    .unwrap_or(Path::new(crate::sources::nvml::DEFAULT_LIBRARY));
                let source =
                    crate::sources::NvmlSource::open(lib, args.interval, None).map_err(|e| {
                        anyhow::anyhow!("{}", no_nvml(e.no_driver.as_deref().unwrap_or(&e.message)))
                    })?;
                Ok(Feed::Nvml {
                    library: lib.display().to_string(),
                    source: Box::new(source),
                    ticks: 0,
                    error: None,
                    stepper: Stepper::new(derive, cfg, None),
                })
            }
            _ => {
                bail!("give one of --replay FILE, --url http://SIDECAR:PORT or --nvml-library PATH")
            }
        }
    }

    /// Advance by one tick: the next replay sample, a scrape, or an NVML sample. Errors of
    /// a live input are kept for the status line, not returned.
    fn tick(&mut self, cfg: &VerdictConfig) {
        match self {
            Feed::Replay {
                samples,
                next,
                stepper,
                ..
            } => {
                if let Some(step) = samples.get(*next) {
                    for (lost, s) in step {
                        if *lost {
                            stepper.line_lost();
                        }
                        stepper.observe(s);
                    }
                    *next += 1;
                }
            }
            Feed::Url {
                url,
                scrapes,
                error,
                views,
                history,
            } => match view::fetch_metrics(url) {
                Ok(body) => {
                    *scrapes += 1;
                    let read = view::views_from_exposition(&body, cfg);
                    // A source that is down leaves no GPU row: the table says why.
                    *error = read.source_down.or_else(|| read.skipped.note());
                    let mut fresh = read.views;
                    view::carry_histories(history, &mut fresh);
                    *views = fresh;
                }
                Err(e) => {
                    // No GPU row outlives the scrape that read it: a failed one shows none.
                    *error = Some(format!("{e:#}"));
                    views.clear();
                }
            },
            Feed::Nvml {
                source,
                ticks,
                error,
                stepper,
                ..
            } => {
                let produced = source.sample(SystemTime::now());
                *ticks += 1;
                *error = produced.errors.first().map(ToString::to_string);
                for s in &produced.samples {
                    stepper.observe(s);
                }
            }
        }
    }

    /// Play a replay to its end (the newest sample per GPU).
    fn finish(&mut self, cfg: &VerdictConfig) {
        while let Feed::Replay { samples, next, .. } = self {
            if *next >= samples.len() {
                break;
            }
            self.tick(cfg);
        }
    }

    fn views(&self) -> Vec<GpuView> {
        match self {
            Feed::Replay { stepper, .. } | Feed::Nvml { stepper, .. } => stepper.views(),
            Feed::Url { views, .. } => views.clone(),
        }
    }

    /// The status line: input, progress and the last error.
    fn status(&self) -> String {
        match self {
            Feed::Replay {
                name,
                samples,
                next,
                ..
            } => {
                let at = match (
                    samples.first(),
                    next.checked_sub(1).and_then(|i| samples.get(i)),
                ) {
                    (Some(first), Some(s)) => {
                        format!(" at t+{:.0}s", s[0].1.taken.seconds_since(first[0].1.taken))
                    }
                    _ => String::new(),
                };
                let end = if *next >= samples.len() {
                    " (end of replay)"
                } else {
                    ""
                };
                format!("replay {name}: sample {next}/{}{at}{end}", samples.len())
            }
            Feed::Url {
                url,
                scrapes,
                error,
                ..
            } => {
                let e = error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(" — {e}"));
                format!("sidecar {url}: scrape {scrapes}{e}")
            }
            Feed::Nvml {
                library,
                ticks,
                error,
                ..
            } => {
                let e = error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(" — {e}"));
                format!("NVML {library}: sample {ticks}{e}")
            }
        }
    }

    fn is_live(&self) -> bool {
        !matches!(self, Feed::Replay { .. })
    }

    /// The last read's error, for a live feed (a replay's malformed lines are said as read).
    fn error(&self) -> Option<&str> {
        match self {
            Feed::Url { error, .. } | Feed::Nvml { error, .. } => error.as_deref(),
            Feed::Replay { .. } => None,
        }
    }
}

/// Run `truthscale top`; exit status 1 when a replayed capture had malformed lines (each
/// said on stderr), as `analyze` exits.
///
/// # Errors
/// The input cannot be opened, or the terminal cannot be set up.
pub(crate) fn run(args: &TopArgs, env: &[(String, String)]) -> anyhow::Result<ExitCode> {
    // The `[derive]` and `[verdict]` sections, as `analyze` and `explain` read them.
    let (derive, cfg) = crate::config::Config::offline_sections(args.config.as_deref(), env)?;
    let mut feed = Feed::open(args, &derive, &cfg)?;
    let mut failed = false;
    if args.once || !std::io::stdout().is_terminal() {
        failed = plain(args, &cfg, &mut feed)?;
    } else {
        tui::run(&mut feed, &cfg, args.interval)?;
    }
    Ok(match feed {
        Feed::Replay { malformed: 1.., .. } => ExitCode::from(1),
        _ if failed => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    })
}

/// Plain text: one frame with `--once` or a replay, else a frame per interval. A live
/// feed's last error is said on stderr with each frame; returns whether the last frame had
/// no GPU row and such an error (with `--once`, exit status 1).
fn plain(args: &TopArgs, cfg: &VerdictConfig, feed: &mut Feed) -> anyhow::Result<bool> {
    loop {
        match feed {
            Feed::Replay { .. } => {
                feed.finish(cfg);
                // A reading left blank (impossible, a sentinel) is said, as `explain` and
                // `analyze` say it.
                if let Feed::Replay { stepper, name, .. } = feed
                    && let Some(note) = stepper.diagnostics_note()
                {
                    crate::stdout::say!("truthscale: {name}: {note}");
                }
            }
            Feed::Url { .. } => {
                feed.tick(cfg);
                if let Feed::Url {
                    error: Some(e),
                    scrapes: 0,
                    ..
                } = feed
                {
                    bail!("{e}");
                }
            }
            Feed::Nvml { ticks, .. } => {
                // A window needs two samples: the first only sets the baseline.
                if *ticks == 0 {
                    feed.tick(cfg);
                    std::thread::sleep(args.interval);
                }
                feed.tick(cfg);
            }
        }
        let views = feed.views();
        if feed.error().is_some() {
            crate::stdout::say!("truthscale: {}", feed.status());
        }
        let mut out = crate::stdout::lock();
        write!(out, "{}", frame(&views))?;
        out.flush()?;
        if args.once || !feed.is_live() {
            return Ok(views.is_empty() && feed.error().is_some());
        }
        drop(out);
        std::thread::sleep(args.interval);
    }
}

/// A column of the terminal table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Col {
    Name,
    Reported,
    Effective,
    Saturation,
    Phase,
    Verdict,
    Kv,
    Queue,
    Recent,
}

impl Col {
    /// Every column, in the order shown.
    const ORDER: [Col; 9] = [
        Col::Name,
        Col::Reported,
        Col::Effective,
        Col::Saturation,
        Col::Phase,
        Col::Verdict,
        Col::Kv,
        Col::Queue,
        Col::Recent,
    ];

    /// Its header: whole words, each within the column's width.
    fn header(self) -> &'static str {
        match self {
            Col::Name => "GPU",
            Col::Reported => "REPORTED",
            Col::Effective => "EFFECTIVE",
            Col::Saturation => "SATURATION",
            Col::Phase => "PHASE",
            Col::Verdict => "VERDICT",
            Col::Kv => "KV",
            Col::Queue => "QUEUE",
            Col::Recent => "RECENT",
        }
    }

    /// Its width (the name's and the sparkline's are decided by [`columns`]).
    fn width(self) -> u16 {
        match self {
            Col::Reported => 8,
            Col::Effective => 9,
            Col::Saturation => 10,
            Col::Phase => 13,
            Col::Verdict => 11,
            Col::Kv | Col::Queue => 5,
            Col::Name | Col::Recent => 0,
        }
    }
}

/// The columns that fit a table `width` cells wide (borders and one space between columns
/// included), with their widths, in the order shown. The name takes what it needs up to a
/// quarter of the width (at least 12); the others join by what they tell, most first
/// (reported and effective, the verdict, saturation, the phase, KV and queue), each whole or
/// not at all; the sparkline of recent effective compute takes what is left, when 8 cells
/// or more are.
fn columns(width: u16, name_width: usize) -> Vec<(Col, u16)> {
    const BY_WORTH: [Col; 7] = [
        Col::Reported,
        Col::Effective,
        Col::Verdict,
        Col::Saturation,
        Col::Phase,
        Col::Kv,
        Col::Queue,
    ];
    let cap = usize::from(width / 4).max(12);
    let name = u16::try_from(name_width.clamp(3, cap)).unwrap_or(12);
    // Borders (2), the name.
    let mut used = 2 + name;
    let mut chosen = vec![Col::Name];
    for c in BY_WORTH {
        if used + 1 + c.width() <= width {
            used += 1 + c.width();
            chosen.push(c);
        }
    }
    let left = width.saturating_sub(used + 1);
    let mut out: Vec<(Col, u16)> = Col::ORDER
        .iter()
        .filter(|c| chosen.contains(c))
        .map(|&c| (c, if c == Col::Name { name } else { c.width() }))
        .collect();
    if left >= 8 {
        out.push((Col::Recent, left));
    }
    out
}

/// `s` within `w` characters: whole, or cut with `…` at the end.
fn fit(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
    out.push('…');
    out
}

mod tui {
    use super::{Col, Feed, GpuView, effective_text, kv_text, pct, queue_text, sparkline};
    use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    use ratatui::Frame;
    use ratatui::layout::{Constraint, Layout};
    use ratatui::style::{Color, Modifier, Style};
    use ratatui::text::Line;
    use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    use truthscale_core::verdict::VerdictConfig;

    /// Restores the terminal however `run` ends.
    struct Restore;

    impl Drop for Restore {
        fn drop(&mut self) {
            ratatui::restore();
        }
    }

    fn verdict_style(v: &str) -> Style {
        let c = match v {
            "busy" => Color::Green,
            "idle" => Color::DarkGray,
            "starved" => Color::Yellow,
            "blocked" => Color::Magenta,
            "throttled" | "unavailable" => Color::Red,
            _ => Color::Reset,
        };
        Style::default().fg(c).add_modifier(Modifier::BOLD)
    }

    /// One cell of `v` in column `c` of width `w`: a name longer than its column ends in `…`.
    fn cell(c: Col, w: u16, v: &GpuView) -> Cell<'static> {
        let w = usize::from(w);
        match c {
            Col::Name => Cell::from(super::fit(&v.name, w)),
            Col::Reported => Cell::from(format!("{:>w$}", pct(v.reported))),
            Col::Effective => Cell::from(format!("{:>w$}", effective_text(v))),
            Col::Saturation => Cell::from(format!("{:>w$}", pct(v.saturation))),
            Col::Phase => Cell::from(super::fit(v.phase.as_deref().unwrap_or("—"), w)),
            Col::Verdict => {
                let verdict = v.verdict.as_ref().map_or("—", |r| r.verdict.as_str());
                Cell::from(verdict.to_string()).style(verdict_style(verdict))
            }
            Col::Kv => Cell::from(format!("{:>w$}", kv_text(v))),
            Col::Queue => Cell::from(format!("{:>w$}", queue_text(v))),
            Col::Recent => {
                Cell::from(sparkline(&v.history, w)).style(Style::default().fg(Color::Cyan))
            }
        }
    }

    fn draw(f: &mut Frame<'_>, views: &[GpuView], status: &str) {
        let [title, table, why, help] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(3),
            Constraint::Length(u16::try_from(views.len().min(8)).unwrap_or(8) + 2),
            Constraint::Length(1),
        ])
        .areas(f.area());
        f.render_widget(
            Paragraph::new(Line::from(format!("truthscale top — {status}")))
                .style(Style::default().add_modifier(Modifier::BOLD)),
            title,
        );
        let name_width = views
            .iter()
            .map(|v| v.name.chars().count())
            .max()
            .unwrap_or(0);
        let cols = super::columns(table.width, name_width);
        let widths: Vec<Constraint> = cols.iter().map(|c| Constraint::Length(c.1)).collect();
        let header = Row::new(cols.iter().map(|c| c.0.header()))
            .style(Style::default().add_modifier(Modifier::REVERSED));
        let rows = views
            .iter()
            .map(|v| Row::new(cols.iter().map(|&(c, w)| cell(c, w, v))));
        f.render_widget(
            Table::new(rows, widths)
                .header(header)
                .block(Block::bordered().title(" GPUs: reported vs effective ")),
            table,
        );
        let lines: Vec<Line<'_>> = views
            .iter()
            .filter_map(|v| {
                let r = v.verdict.as_ref()?;
                Some(Line::from(format!(
                    "{}: {} — {}",
                    v.name,
                    r.verdict.as_str(),
                    r.reasons.join("; ")
                )))
            })
            .collect();
        f.render_widget(
            Paragraph::new(lines).block(Block::bordered().title(" why ")),
            why,
        );
        f.render_widget(
            Paragraph::new("q quit").style(Style::default().fg(Color::DarkGray)),
            help,
        );
    }

    /// Whether a key asks to quit.
    fn quit(ev: &Event) -> bool {
        let Event::Key(k) = ev else { return false };
        k.kind == KeyEventKind::Press
            && (matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                || k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
    }

    /// Set once SIGTERM, SIGINT or SIGHUP arrives (another process's `kill`: in raw mode
    /// Ctrl-C is a key), so that the loop ends and the terminal is restored before exit.
    /// Where the loop has not ended a second later, the process ends from here: on a
    /// terminal that is gone (its window closed, its SSH session dropped: SIGHUP), crossterm's
    /// poll reads the dead terminal again and again without returning (crossterm issue 793),
    /// so the loop never looks at the flag, and `top` had stayed, spinning a core, for good.
    fn watch_signals() -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        let set = Arc::clone(&flag);
        let watching = move || {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let (Ok(mut t), Ok(mut i), Ok(mut h)) = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::hangup()),
                ) else {
                    return;
                };
                tokio::select! {
                    _ = t.recv() => {}
                    _ = i.recv() => {}
                    _ = h.recv() => {}
                }
                set.store(true, Ordering::SeqCst);
            });
            if set.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_secs(1));
                // The loop would have ended the process by now: it is held in crossterm.
                ratatui::restore();
                #[expect(
                    clippy::exit,
                    clippy::disallowed_methods,
                    reason = "the thread that would return the ExitCode is held in crossterm's poll for good"
                )]
                std::process::exit(1);
            }
        };
        // Without the thread the signals end the process as before.
        let _ = std::thread::Builder::new()
            .name("top-signals".into())
            .spawn(watching);
        flag
    }

    pub(super) fn run(
        feed: &mut Feed,
        cfg: &VerdictConfig,
        interval: Duration,
    ) -> anyhow::Result<()> {
        let stop = watch_signals();
        let mut terminal = ratatui::try_init()?;
        let _restore = Restore;
        loop {
            feed.tick(cfg);
            let views = feed.views();
            let status = feed.status();
            terminal.draw(|f| draw(f, &views, &status))?;
            let until = Instant::now() + interval;
            loop {
                if stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                // A signal is looked for at least every 100 ms.
                if event::poll(left.min(Duration::from_millis(100)))? {
                    let ev = event::read()?;
                    if quit(&ev) {
                        return Ok(());
                    }
                    if matches!(ev, Event::Resize(..)) {
                        terminal.draw(|f| draw(f, &views, &status))?;
                    }
                }
            }
        }
    }
}

/// The error of `top` when NVML cannot be read (`why`): its three sources.
fn no_nvml(why: &str) -> String {
    format!(
        "top reads NVML on this machine unless told otherwise, and NVML cannot be read here: \
         {why}\ntop has three sources: NVML on this machine (--nvml-library PATH where the \
         library is elsewhere), --replay FILE (a capture), or --url http://HOST:PORT (a running \
         truthscale)"
    )
}

/// `truthscale top`.
#[derive(Debug, clap::Args)]
pub(crate) struct TopArgs {
    /// A capture to replay (`-` reads standard input): on a terminal it plays back one
    /// sample per --interval; with
    /// --once or without a terminal, one frame of the newest sample per GPU. Without
    /// --replay or --url, top reads NVML on this machine.
    #[arg(long, conflicts_with_all = ["url", "nvml_library"])]
    pub replay: Option<PathBuf>,
    /// A running sidecar (`http://HOST:PORT`).
    #[arg(long, conflicts_with = "nvml_library")]
    pub url: Option<String>,
    /// Read NVML directly from this library (e.g. `/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1`)
    /// [default: libnvidia-ml.so.1, when neither --replay nor --url is given].
    #[arg(long)]
    pub nvml_library: Option<PathBuf>,
    /// Print one frame and exit (with NVML, after two samples one --interval apart).
    #[arg(long)]
    pub once: bool,
    /// Refresh interval (and, with a replay on a terminal, the time per replayed sample).
    #[arg(long, value_parser = crate::setting::duration_flag(Duration::from_millis(100), Duration::from_secs(3600)), default_value = "1s")]
    pub interval: Duration,
    /// Time between a replay's samples, for formats without timestamps (dmon,
    /// dcgm-exporter), as `analyze --interval`: the windows' lengths, not the playback's.
    /// For a capture of dcgm-exporter scrapes at its default, pass 30s.
    #[arg(long, value_parser = crate::setting::duration_flag(Duration::from_millis(1), Duration::from_secs(3600)), default_value = "1s", requires = "replay")]
    pub spacing: Duration,
    /// Configuration file whose `[verdict]` section sets the verdict's thresholds and whose
    /// `[derive]` section the phase's, for a replay and NVML (a sidecar's `--url` phase is
    /// its own), as `explain --config`; `TRUTHSCALE_DERIVE__…` and `TRUTHSCALE_VERDICT__…`
    /// variables override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scrape that fails leaves no GPU row of the one before it, shown as if live: the
    /// table is empty and the error is the feed's (said on stderr in plain text).
    #[test]
    fn a_failed_scrape_shows_no_row_of_the_last_one() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let mut feed = Feed::Url {
            url,
            scrapes: 3,
            error: None,
            views: vec![GpuView {
                gpu: Some(0),
                ..GpuView::default()
            }],
            history: BTreeMap::new(),
        };
        feed.tick(&VerdictConfig::default());
        assert!(feed.views().is_empty());
        assert!(feed.error().is_some());
        assert!(feed.status().contains(" — "), "{}", feed.status());
    }

    /// A replay's malformed line is told to the derivation before the sample after it: in
    /// a 1 s trace whose line at 3 s is cut, the window ending at 4 s is 1 s long and the
    /// second before it is a gap, said, where it was read as part of a 2 s window.
    #[test]
    fn a_replayed_lines_time_is_not_the_next_samples() {
        let dir = std::env::temp_dir().join(format!("top-lost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        let line = |t: u32| {
            format!(
                "{{\"taken\":\"2026-01-01T00:00:0{t}Z\",\"gpu\":0,\"model\":\"NVIDIA H100 80GB HBM3\",\"gpu_util\":0.5}}\n"
            )
        };
        let text = format!("{}{}{{\"taken\n{}{}", line(1), line(2), line(4), line(5));
        std::fs::write(&path, text).unwrap();
        let ((samples, nominal), malformed) = read_replay(&path, 1.0).unwrap();
        assert_eq!(malformed, 1);
        let lost: Vec<bool> = samples.iter().flatten().map(|(l, _)| *l).collect();
        assert_eq!(lost, [false, false, true, false]);
        let cfg = VerdictConfig::default();
        let mut feed = Feed::Replay {
            name: "t.jsonl".into(),
            samples,
            next: 0,
            stepper: Stepper::new(&DeriveConfig::default(), &cfg, nominal),
            malformed,
        };
        feed.finish(&cfg);
        let Feed::Replay { stepper, .. } = &feed else {
            unreachable!()
        };
        let note = stepper.diagnostics_note().unwrap();
        assert!(
            note.starts_with("diagnostics: gap 1 (first: gap [gpu 0]"),
            "{note}"
        );
        assert!(
            note.contains("1 s before this sample were a malformed line's"),
            "{note}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Simulated data is marked, on its row and above the table, and a MIG instance's row
    /// names its instance.
    #[test]
    fn a_frame_marks_simulated_data_and_names_mig_instances() {
        let views = [
            GpuView {
                gpu: Some(0),
                mig: Some(2),
                simulated: true,
                ..GpuView::default()
            },
            GpuView {
                gpu: Some(1),
                ..GpuView::default()
            },
        ];
        let text = frame(&views);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "[SIMULATED] GPU* is simulated data, not a real GPU"
        );
        assert!(lines[1].starts_with("GPU "), "{text}");
        assert!(lines[2].starts_with("0/2* "), "{text}");
        assert!(lines[3].starts_with("1 "), "{text}");
        assert!(!frame(&views[1..]).contains("SIMULATED"));
    }

    /// A phase marked as an estimate, wider than its column's title, widens the column: the
    /// verdict and every column after it start where their titles do, on every row.
    #[test]
    fn a_long_phase_widens_its_column_and_keeps_the_rest_aligned() {
        let views = [
            GpuView {
                gpu: Some(0),
                phase: Some("compute_bound (estimate)".into()),
                reported: Some(0.5),
                ..GpuView::default()
            },
            GpuView {
                gpu: Some(1),
                phase: Some("idle".into()),
                ..GpuView::default()
            },
        ];
        let text = frame(&views);
        let lines: Vec<&str> = text.lines().collect();
        let at = |line: &str, word: &str| line.find(word).map(|b| line[..b].chars().count());
        let verdict = at(lines[0], "VERDICT").unwrap();
        // "0", the 6-wide GPU column, then REPORTED, EFFECTIVE, SATURATION and the phase.
        assert_eq!(verdict, 7 + 9 + 10 + 11 + 25, "{text}");
        for row in &lines[1..] {
            let cells: Vec<char> = row.chars().collect();
            assert_eq!(cells[verdict - 1], ' ', "{text}");
            assert_eq!(cells[verdict], '—', "the verdict under its title: {text}");
        }
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>()[..6],
            ["0", "50%", "—", "—", "compute_bound", "(estimate)"]
        );
        // Short cells keep the least widths the table always had.
        let short = frame(&views[1..]);
        assert!(
            short.starts_with("GPU    REPORTED EFFECTIVE SATURATION PHASE         VERDICT   CAUSE"),
            "{short}"
        );
    }

    /// Without --replay or --url, top reads NVML on this machine; where it cannot, its error
    /// names the three sources.
    #[test]
    fn top_without_a_source_reads_nvml_and_names_the_three_sources() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            top: TopArgs,
        }
        use clap::Parser as _;
        let cli = Cli::try_parse_from(["top", "--once"]).unwrap();
        assert!(cli.top.replay.is_none() && cli.top.url.is_none());
        let msg = no_nvml("cannot load the NVML library libnvidia-ml.so.1: not found");
        assert_eq!(
            msg,
            "top reads NVML on this machine unless told otherwise, and NVML cannot be read \
             here: cannot load the NVML library libnvidia-ml.so.1: not found\ntop has three \
             sources: NVML on this machine (--nvml-library PATH where the library is \
             elsewhere), --replay FILE (a capture), or --url http://HOST:PORT (a running \
             truthscale)"
        );
    }

    #[test]
    fn at_80_columns_every_header_fits_whole() {
        for (width, name) in [(80u16, 28usize), (80, 4), (100, 40), (200, 30), (40, 10)] {
            let cols = columns(width, name);
            let total: u16 = 2 + cols.iter().map(|c| c.1).sum::<u16>() + (cols.len() as u16 - 1);
            assert!(total <= width, "{width}: {cols:?} take {total}");
            for (c, w) in &cols {
                assert!(
                    c.header().chars().count() <= usize::from(*w),
                    "{width}: {} cut in {w}",
                    c.header()
                );
            }
            assert_eq!(cols[0].0, Col::Name);
        }
        // 80 columns: the name (a quarter: 20), reported, effective, the verdict,
        // saturation and the phase whole (78 cells); KV, queue and the sparkline left out.
        let cols = columns(80, 28);
        let names: Vec<Col> = cols.iter().map(|c| c.0).collect();
        assert_eq!(
            names,
            [
                Col::Name,
                Col::Reported,
                Col::Effective,
                Col::Saturation,
                Col::Phase,
                Col::Verdict,
            ]
        );
        assert_eq!(cols[0].1, 20);
        // 120 columns: KV and queue join, the sparkline takes the 21 cells left.
        assert_eq!(columns(120, 28).last(), Some(&(Col::Recent, 21)));
        // Wide: every column, the sparkline the rest.
        assert_eq!(columns(200, 30).len(), 9);
        assert_eq!(fit("gpu 0 (NVIDIA H100 80GB HBM3)", 12), "gpu 0 (NVID…");
        assert_eq!(fit("gpu 0", 12), "gpu 0");
    }

    #[test]
    fn sparkline_scales_and_keeps_the_newest() {
        assert_eq!(sparkline(&[0.0, 0.5, 1.0, 2.0, -1.0], 5), "▁▅██▁");
        assert_eq!(sparkline(&[0.0, 1.0, 0.0], 2), "█▁");
        // A window without the value is a hole, never the lowest bar.
        assert_eq!(sparkline(&[0.5, f64::NAN, 1.0], 3), "▅ █");
    }
}
