//! Replays a capture at its recorded pace, optionally in a loop.
//!
//! The file is read line by line as time passes, so a long capture costs no memory.
//! Recorded times are shifted onto the wall clock: the first sample is served at start, and
//! every later one as far after it as the capture says (its own timestamps: JSONL `taken`,
//! exposition timestamps; `spacing` apart for a format without them).

use super::{BuildError, Context, Produced, Source, SourceError, SourceSettings};
use crate::capture::{Capture, CaptureError, LostLines};
use crate::setting::Invalid;
use crate::times::unix_ms;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use truthscale_core::model::{Sample, SourceKind, Timestamp};
use truthscale_core::parse::Format;
use truthscale_core::parse::names::{MAX_UNREAD_NAMES, Unread};

/// A capture replayed against the wall clock.
#[derive(Debug)]
pub struct ReplaySource {
    path: PathBuf,
    format: Format,
    interval: Duration,
    looping: bool,
    /// The capture being read (`None` once it ended or failed).
    capture: Option<Capture<BufReader<File>>>,
    /// The next sample, not yet due, and whether a line was lost before it.
    pending: Option<(Sample, bool)>,
    /// When a malformed line's loss is told ([`Produced::lost_before`]).
    lost: LostLines,
    /// A line was lost since the last sample read: its time is not the next one's.
    lost_before: bool,
    /// Recorded time of the first sample of the current pass.
    base: Option<i64>,
    /// Wall time (ms) at which the current pass began.
    pass_start_ms: i64,
    /// Recorded time of the last sample handed out.
    last_recorded: Option<i64>,
    /// The capture's own spacing before its last sample handed out (ms): the seam between
    /// two passes, as long as the capture's last window.
    last_spacing: Option<i64>,
    finished: bool,
    /// Samples handed out, every pass together.
    handed: u64,
    /// Recorded time of the first sample handed out.
    first_recorded: Option<i64>,
    /// What the capture's parser has left unread so far this pass, as already counted.
    counted: Unread,
    /// The families already named (once each, every pass together).
    named: std::collections::BTreeSet<String>,
}

/// Count what the capture's parser left unread since `counted` (then brought up to date), as
/// the live dcgm-exporter source does: a family not read, named once (`named`); each
/// reading refused for an ambiguous unit; each blank sentinel; each value not finite, and
/// each error printed in place of a value (counted with the sentinels: none is data); each
/// reading no GPU gives; each reading of a series that names no GPU, and each that
/// disagreed with another series of the same GPU (not read).
fn count_unread(
    now: &Unread,
    counted: &mut Unread,
    named: &mut std::collections::BTreeSet<String>,
    errors: &mut Vec<SourceError>,
) {
    let total = |u: &Unread| {
        u.count()
            + u.ambiguous.values().sum::<u64>()
            + u.sentinels.values().sum::<u64>()
            + u.non_finite.values().sum::<u64>()
            + u.errors.values().sum::<u64>()
            + u.impossible.values().sum::<u64>()
            + u.unnamed.values().sum::<u64>()
            + u.disagreeing.values().sum::<u64>()
    };
    if total(now) == total(counted) {
        return;
    }
    for f in &now.families {
        if named.len() < MAX_UNREAD_NAMES && named.insert(f.clone()) {
            errors.push(SourceError::UnreadFamily(format!("replay: {f}")));
        }
    }
    let new = |now: &std::collections::BTreeMap<String, u64>,
               was: &std::collections::BTreeMap<String, u64>| {
        now.iter()
            .map(|(f, n)| (f.clone(), n - was.get(f).copied().unwrap_or(0).min(*n)))
            .filter(|(_, n)| *n > 0)
            .collect::<Vec<_>>()
    };
    for (f, n) in new(&now.impossible, &counted.impossible) {
        errors.extend(
            (0..n).map(|_| SourceError::Impossible(format!("replay: {f}: a reading no GPU gives"))),
        );
    }
    let refused = Unread {
        ambiguous: new(&now.ambiguous, &counted.ambiguous)
            .into_iter()
            .collect(),
        unnamed: new(&now.unnamed, &counted.unnamed).into_iter().collect(),
        disagreeing: new(&now.disagreeing, &counted.disagreeing)
            .into_iter()
            .collect(),
        ..Unread::default()
    };
    super::refused_readings("replay", &refused, errors);
    let sentinels = new(&now.sentinels, &counted.sentinels);
    let non_finite = new(&now.non_finite, &counted.non_finite);
    let printed = new(&now.errors, &counted.errors);
    for (f, n, what) in sentinels
        .into_iter()
        .map(|(f, n)| (f, n, "a DCGM blank sentinel"))
        .chain(
            non_finite
                .into_iter()
                .map(|(f, n)| (f, n, "not a finite number")),
        )
        .chain(printed.into_iter().map(|(f, n)| {
            (
                f,
                n,
                "an error the capture's tool printed in place of a value",
            )
        }))
    {
        errors.extend((0..n).map(|_| SourceError::Sentinel(format!("replay: {f}: {what}"))));
    }
    counted.clone_from(now);
}

/// Whether `path` is a FIFO (a named pipe), which opening waits on until a writer opens it.
fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

fn open_capture(
    path: &Path,
    format: Option<Format>,
    interval: Duration,
) -> Result<Capture<BufReader<File>>, BuildError> {
    let name = path.display().to_string();
    if is_fifo(path) {
        tracing::info!(path = %name, "The capture is a FIFO: waiting for a writer to open it.");
    }
    let file = File::open(path).map_err(|e| BuildError::Replay {
        path: name.clone(),
        message: format!("cannot open: {e}"),
    })?;
    Capture::open(BufReader::new(file), &name, format, interval.as_secs_f64()).map_err(|e| {
        BuildError::Replay {
            path: name.clone(),
            message: match e {
                // The formats it reads and how to capture one, as `analyze` says it.
                CaptureError::Unknown { lines, .. } => crate::capture::unknown_format(lines),
                CaptureError::Read { error, .. } => format!("cannot read: {error}"),
            },
        }
    })
}

/// `kind = "replay"`: a capture replayed at its recorded pace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayConfig {
    /// The capture: a `dcgmi dmon` capture, a dcgm-exporter scrape or a JSONL trace.
    pub path: PathBuf,
    /// Start again from the top when it ends.
    #[serde(rename = "loop")]
    pub looping: bool,
    /// Time between samples of a capture that has no timestamps (dmon, dcgm-exporter).
    pub spacing: String,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            path: PathBuf::new(),
            looping: false,
            spacing: "1s".into(),
        }
    }
}

impl ReplayConfig {
    fn spacing(&self) -> Result<Duration, Invalid> {
        crate::setting::duration(
            "source.spacing",
            &self.spacing,
            Duration::from_millis(1),
            Duration::from_secs(3600),
        )
    }
}

impl SourceSettings for ReplayConfig {
    const ARG: Option<&'static str> = Some("source.path");

    fn check(&self) -> Result<(), Invalid> {
        if self.path.as_os_str().is_empty() {
            return Err(Invalid::new(
                "source.path",
                "replay needs a capture: set source.path, or --source replay:PATH",
            ));
        }
        self.spacing()?;
        Ok(())
    }

    /// The capture opened and its format told, as the start would (`config check`). A FIFO
    /// is not opened: that would wait for a writer, and read what `serve` is to read.
    fn probe(&self) -> Result<Option<String>, BuildError> {
        if is_fifo(&self.path) {
            return Ok(Some(format!(
                "{}: a FIFO, not opened here (its format is told when serve reads it)",
                self.path.display()
            )));
        }
        let capture = open_capture(&self.path, None, self.spacing().map_err(BuildError::from)?)?;
        Ok(Some(format!(
            "{}: a {} capture",
            self.path.display(),
            capture.format().as_str()
        )))
    }

    fn build(&self, _: &Context, now: SystemTime) -> Result<Box<dyn Source>, BuildError> {
        self.check().map_err(BuildError::from)?;
        let spacing = self.spacing().map_err(BuildError::from)?;
        Ok(Box::new(ReplaySource::open(
            &self.path,
            spacing,
            self.looping,
            now,
        )?))
    }
}

impl ReplaySource {
    /// Open `path`, detecting its format from the first lines.
    ///
    /// # Errors
    /// The file cannot be read or its format cannot be told.
    pub fn open(
        path: &Path,
        interval: Duration,
        looping: bool,
        now: SystemTime,
    ) -> Result<ReplaySource, BuildError> {
        let capture = open_capture(path, None, interval)?;
        let format = capture.format();
        Ok(ReplaySource {
            path: path.to_path_buf(),
            format,
            interval,
            looping,
            capture: Some(capture),
            pending: None,
            lost: LostLines::of(format),
            lost_before: false,
            base: None,
            pass_start_ms: unix_ms(now),
            last_recorded: None,
            last_spacing: None,
            finished: false,
            handed: 0,
            first_recorded: None,
            counted: Unread::default(),
            named: std::collections::BTreeSet::new(),
        })
    }

    /// The detected format.
    #[must_use]
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether a non-looping replay has run out.
    #[must_use]
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The next recorded sample, and whether a line was lost before it.
    fn next_recorded(&mut self, errors: &mut Vec<SourceError>) -> Option<(Sample, bool)> {
        if let Some(s) = self.pending.take() {
            return Some(s);
        }
        let capture = self.capture.as_mut()?;
        loop {
            match capture.next_sample() {
                Ok(Some(Ok(s))) => {
                    if let Some(u) = capture.unread() {
                        count_unread(u, &mut self.counted, &mut self.named, errors);
                    }
                    let lost = std::mem::replace(&mut self.lost_before, self.lost.handed());
                    return Some((s, lost));
                }
                Ok(Some(Err(e))) => {
                    self.lost_before |= self.lost.malformed();
                    errors.push(SourceError::Parse(e.to_string()));
                }
                Ok(None) => {
                    self.capture = None;
                    return None;
                }
                Err(e) => {
                    errors.push(SourceError::Io(e.to_string()));
                    self.capture = None;
                    return None;
                }
            }
        }
    }

    /// The line logged when a replay that does not loop reaches its end: the file, the
    /// samples handed out and the recorded time they span.
    fn ended(&self) -> String {
        let span_ms = match (self.first_recorded, self.last_recorded) {
            (Some(f), Some(l)) => (l - f).max(0),
            _ => 0,
        };
        format!(
            "replay of {} ended after {} samples ({:.1} s)",
            self.path.display(),
            self.handed,
            span_ms as f64 / 1000.0
        )
    }

    /// Open the capture again for the next pass; where that fails (the file removed,
    /// rotated or unreadable), the error is counted and the replay waits, trying again on
    /// the next tick.
    fn restart(&mut self, errors: &mut Vec<SourceError>) -> bool {
        let c = match open_capture(&self.path, Some(self.format), self.interval) {
            Ok(c) => c,
            Err(e) => {
                errors.push(SourceError::Io(format!("cannot loop the replay: {e}")));
                return false;
            }
        };
        self.capture = Some(c);
        self.counted = Unread::default();
        // The next pass starts the capture's own last spacing after the last sample of this
        // one (`source.spacing` for a capture of one sample).
        let span = match (self.base, self.last_recorded) {
            (Some(b), Some(l)) => l - b,
            _ => 0,
        };
        let seam = self
            .last_spacing
            .unwrap_or(self.interval.as_millis() as i64);
        self.pass_start_ms += span + seam;
        self.base = None;
        true
    }
}

impl Source for ReplaySource {
    fn name(&self) -> &'static str {
        SourceKind::Replay.as_str()
    }

    /// None: a replay's windows are as long as its recorded spacing, the first one too (the
    /// capture's own timestamps; `source.spacing` for a format without them).
    fn update_interval(&self) -> Option<Duration> {
        None
    }

    /// Every recorded sample due by `now`, restamped onto the wall clock.
    fn sample(&mut self, now: SystemTime) -> Produced {
        let mut out = Produced::default();
        let now_ms = unix_ms(now);
        let mut restarts = 0;
        while !self.finished {
            let Some((s, lost)) = self.next_recorded(&mut out.errors) else {
                if self.looping
                    && restarts == 0
                    && self.last_recorded.is_some()
                    && self.restart(&mut out.errors)
                {
                    restarts += 1;
                    continue;
                }
                self.finished = !self.looping;
                if self.finished {
                    tracing::info!("{}", self.ended());
                }
                break;
            };
            let base = *self.base.get_or_insert(s.taken.0);
            let due = self.pass_start_ms + (s.taken.0 - base);
            if due > now_ms {
                self.pending = Some((s, lost));
                break;
            }
            if let Some(prev) = self.last_recorded.filter(|&p| s.taken.0 > p) {
                self.last_spacing = Some(s.taken.0 - prev);
            }
            self.last_recorded = Some(s.taken.0);
            self.first_recorded.get_or_insert(s.taken.0);
            self.handed += 1;
            if lost {
                out.lost_before.push(out.samples.len());
            }
            out.samples.push(restamped(s, due));
        }
        out
    }
}

/// Recorded sample `s` moved onto the wall clock at `due`, each entity's energy reading time
/// with it: the energy counter's span is taken between those times, so they must be on the
/// sample's own clock.
fn restamped(mut s: Sample, due: i64) -> Sample {
    let shift = due - s.taken.0;
    for e in &mut s.entities {
        if let Some(at) = &mut e.energy_read_at {
            at.0 += shift;
        }
    }
    s.taken = Timestamp(due);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ts-replay-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const DMON: &str = "#Entity   GPUTL  TENSO  DRAMA\nID\nGPU 0     100    0.5    0.2\nGPU 0     100    0.4    0.2\nGPU 0     100    0.3    0.2\n";

    #[test]
    fn replays_at_recorded_pace() {
        let p = write("a.txt", DMON);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut r = ReplaySource::open(&p, Duration::from_secs(1), false, t0).unwrap();
        assert_eq!(r.format(), Format::DcgmiDmon);
        let got = r.sample(t0);
        assert_eq!(got.samples.len(), 1);
        assert_eq!(got.samples[0].taken, Timestamp(1_000_000));
        assert!(r.sample(t0 + Duration::from_millis(500)).samples.is_empty());
        let got = r.sample(t0 + Duration::from_millis(2_500));
        assert_eq!(got.samples.len(), 2);
        assert_eq!(got.samples[1].taken, Timestamp(1_002_000));
        assert!(r.sample(t0 + Duration::from_secs(10)).samples.is_empty());
        assert!(r.finished());
        // What is logged at info when it ends.
        assert_eq!(
            r.ended(),
            format!("replay of {} ended after 3 samples (2.0 s)", p.display())
        );
    }

    /// `config check` on a FIFO says what it is and opens nothing: opening would wait for
    /// a writer (it hung), and read what `serve` is to read.
    #[test]
    fn config_check_leaves_a_fifo_unopened() {
        let dir = std::env::temp_dir().join(format!("ts-replay-{}-fifo", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("capture");
        let _ = std::fs::remove_file(&fifo);
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let config = ReplayConfig {
            path: fifo.clone(),
            ..ReplayConfig::default()
        };
        assert_eq!(
            config.probe().unwrap(),
            Some(format!(
                "{}: a FIFO, not opened here (its format is told when serve reads it)",
                fifo.display()
            ))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A JSONL trace at `cadence` (seconds per window, `(count, seconds, busy)` runs) and
    /// what replaying it integrates, through the deriver as the sampler builds it.
    fn replay_totals(name: &str, runs: &[(u32, u32, bool)]) -> truthscale_core::tracker::Totals {
        let mut text = String::new();
        let mut t = 0;
        for &(count, seconds, busy) in runs {
            for _ in 0..count {
                t += seconds;
                let (h, m, s) = (t / 3600, t / 60 % 60, t % 60);
                text.push_str(&format!(
                    "{{\"taken\":\"2026-01-01T{h:02}:{m:02}:{s:02}Z\",\"gpu\":0,\"model\":\"NVIDIA H100 80GB HBM3\",\"gpu_util\":{}}}\n",
                    if busy { 1.0 } else { 0.0 }
                ));
            }
        }
        totals_of(name, &text, t)
    }

    /// What replaying `text` integrates over `seconds` of 1 s ticks, through the deriver as
    /// the sidecar's pipeline feeds it (a lost line told before the sample after it).
    fn totals_of(name: &str, text: &str, seconds: u32) -> truthscale_core::tracker::Totals {
        let mut totals = Default::default();
        replayed(name, text, seconds, |w| totals = w.totals);
        totals
    }

    /// Each window of replaying `text` over `seconds` of the sampler's 1 s ticks, derived as
    /// the sidecar's pipeline derives them (a lost line told before the sample after it),
    /// to the end of the replay.
    fn replayed(
        name: &str,
        text: &str,
        seconds: u32,
        mut each: impl FnMut(&truthscale_core::tracker::EntityWindow),
    ) {
        use truthscale_core::derive::DeriveConfig;
        use truthscale_core::tracker::Deriver;
        let p = write(name, text);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut r = ReplaySource::open(&p, Duration::from_secs(1), false, t0).unwrap();
        let mut d = Deriver::new(
            DeriveConfig::default(),
            r.update_interval().map(|i| i.as_secs_f64()),
        );
        for tick in 0..=u64::from(seconds) {
            let produced = r.sample(t0 + Duration::from_secs(tick));
            for (i, s) in produced.samples.iter().enumerate() {
                if produced.lost_before.contains(&i) {
                    d.line_lost();
                }
                d.observe(s).windows.iter().for_each(&mut each);
            }
        }
        assert!(r.finished());
    }

    /// A malformed line's time is not the next sample's. A 1 s trace idle but at 7 s, whose
    /// line at 6 s is cut: the window ending at 7 s is 1 s long (the trace's cadence), not
    /// the 2 s since 5 s, so 1 busy second, not 2, of 9 observed, and 1 s not observed.
    #[test]
    fn a_malformed_lines_time_is_not_the_next_samples() {
        let line = |t: u32, util: f64| {
            format!(
                "{{\"taken\":\"2026-01-01T00:00:{t:02}Z\",\"gpu\":0,\"model\":\"NVIDIA H100 80GB HBM3\",\"gpu_util\":{util}}}\n"
            )
        };
        let mut text = String::new();
        for t in 1..=10 {
            let l = line(t, if t == 7 { 1.0 } else { 0.0 });
            text.push_str(if t == 6 { &l[..20] } else { &l });
            if t == 6 {
                text.push('\n');
            }
        }
        let t = totals_of("lost.jsonl", &text, 10);
        assert_eq!(t.busy_seconds, 1.0);
        assert_eq!(t.observed_seconds, 9.0);
        assert_eq!(t.unobserved_seconds, 1.0);
    }

    /// In `dcgmi dmon`, a lost row is told after the sweep gathered before it: GPU 0's row
    /// of the third sweep is lost, so the third sweep is GPU 1's alone and GPU 0's fourth
    /// window is cut to the 1 s cadence (1 s not observed). Told before the second sweep
    /// (handed once the lost row's sweep began) it would cut GPU 0's second window instead,
    /// which is 1 s long anyway, and leave its fourth 2 s long.
    #[test]
    fn a_lost_dmon_row_is_told_after_the_sweep_before_it() {
        let text = "#Entity   GPUTL\nID\nGPU 0     0\nGPU 1     0\nGPU 0     0\nGPU 1     0\nGPU 0     1x0\nGPU 1     0\nGPU 0     100\nGPU 1     0\n";
        let mut gpu0 = Default::default();
        replayed("lost-row.txt", text, 5, |w| {
            if w.id.gpu == Some(0) {
                gpu0 = w.totals;
            }
        });
        assert_eq!(gpu0.observed_seconds, 3.0);
        assert_eq!(gpu0.unobserved_seconds, 1.0);
        assert_eq!(gpu0.busy_seconds, 1.0);
    }

    #[test]
    fn a_slow_trace_replays_with_its_own_window_lengths() {
        // 10 s windows: busy for a minute, idle for a minute. Every window, the first too,
        // counts its own 10 s (it used to count the 1 s replay spacing: 10× low).
        let t = replay_totals("slow.jsonl", &[(6, 10, true), (6, 10, false)]);
        assert_eq!(t.observed_seconds, 120.0);
        assert_eq!(t.busy_seconds, 60.0);
        assert_eq!(t.unobserved_seconds, 0.0);
        assert_eq!(t.windows, 12);
    }

    #[test]
    fn a_change_of_cadence_replays_as_observed_time() {
        // 1 s windows busy for a minute, then 10 s windows idle for five: busy 60 of 360 s.
        let t = replay_totals("mixed.jsonl", &[(60, 1, true), (30, 10, false)]);
        assert_eq!(t.observed_seconds, 360.0);
        assert_eq!(t.busy_seconds, 60.0);
        assert_eq!(t.unobserved_seconds, 0.0);
        let regimes: f64 = t.phase_seconds.iter().flatten().sum::<f64>() + t.unclassified_seconds;
        assert_eq!(regimes, 360.0);
    }

    /// What a dcgm-exporter capture holds and is not read is counted, as the live source
    /// counts it: a family not read (once), a sentinel, a NaN (each as it is read).
    #[test]
    fn what_a_replay_does_not_read_is_counted() {
        let scrape = |t: u64| {
            format!(
                "DCGM_FI_DEV_POWER_USAGE{{gpu=\"0\"}} 140737488355328 {t}\nDCGM_FI_DEV_GPU_TEMP{{gpu=\"0\"}} NaN {t}\nDCGM_FI_DEV_PCIE_REPLAY_COUNTER{{gpu=\"0\"}} 0 {t}\nDCGM_FI_DEV_GPU_UTIL{{gpu=\"0\"}} 40 {t}\nDCGM_FI_DEV_SM_CLOCK{{Hostname=\"x\"}} 1400 {t}\nDCGM_FI_PROF_DRAM_ACTIVE{{gpu=\"0\",pci_bus_id=\"a\"}} 0.2 {t}\nDCGM_FI_PROF_DRAM_ACTIVE{{gpu=\"0\",pci_bus_id=\"b\"}} 0.6 {t}\n"
            )
        };
        let p = write(
            "unread.txt",
            &(scrape(1_767_225_600_000) + &scrape(1_767_225_601_000)),
        );
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut r = ReplaySource::open(&p, Duration::from_secs(1), false, t0).unwrap();
        let mut kinds = std::collections::BTreeMap::<&str, u64>::new();
        for tick in 0..5 {
            for e in r.sample(t0 + Duration::from_secs(tick)).errors {
                *kinds.entry(e.kind()).or_default() += 1;
            }
        }
        // Two scrapes: the family once, a sentinel and a NaN a scrape; a clock of no GPU
        // and two DRAM readings of one GPU that disagree a scrape (parse: 3 each).
        assert!(r.finished());
        assert_eq!(kinds.get("unread_family"), Some(&1), "{kinds:?}");
        assert_eq!(kinds.get("sentinel"), Some(&4), "{kinds:?}");
        assert_eq!(kinds.get("parse"), Some(&6), "{kinds:?}");
    }

    #[test]
    fn loops_on_request() {
        let p = write("b.txt", DMON);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut r = ReplaySource::open(&p, Duration::from_secs(1), true, t0).unwrap();
        let got = r.sample(t0 + Duration::from_millis(5_500));
        // Pass 1 at 0,1,2 s; pass 2 at 3,4,5 s.
        let times: Vec<i64> = got.samples.iter().map(|s| s.taken.0 - 1_000_000).collect();
        assert_eq!(times, vec![0, 1000, 2000, 3000, 4000, 5000]);
        assert!(!r.finished());
    }

    /// A looping trace with timestamps of its own starts each pass its own last spacing (10 s)
    /// after the last sample, never `source.spacing` (1 s), which would cut 9 s out of each
    /// seam's window.
    #[test]
    fn a_looping_trace_keeps_its_own_spacing_at_the_seam() {
        let line = |s: u32| {
            format!("{{\"taken\":\"2026-01-01T00:00:{s:02}Z\",\"gpu\":0,\"gpu_util\":1.0}}\n")
        };
        let p = write("loop10.jsonl", &(line(0) + &line(10) + &line(20)));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut r = ReplaySource::open(&p, Duration::from_secs(1), true, t0).unwrap();
        let mut times = Vec::new();
        for tick in 0..=55 {
            for s in r.sample(t0 + Duration::from_secs(tick)).samples {
                times.push(s.taken.0 - 1_000_000);
            }
        }
        assert_eq!(times, [0, 10_000, 20_000, 30_000, 40_000, 50_000]);
    }

    /// A replayed sample's energy reading time moves onto the wall clock with it: 131 ms
    /// after its sample in the trace, 131 ms after it replayed (it stayed in the trace's
    /// clock, months apart, and the counter's span was thrown away as too long).
    #[test]
    fn an_energy_reading_time_moves_with_its_sample() {
        let line = |s: u32, at: &str| {
            format!(
                "{{\"taken\":\"2024-05-01T12:00:0{s}Z\",\"gpu\":0,\"power_watts\":250.0,\"energy_joules\":{}{at}}}\n",
                1000 + 300 * s
            )
        };
        let at = |s: u32| format!(",\"energy_read_at\":\"2024-05-01T12:00:0{s}.131Z\"");
        let text = line(0, &at(0)) + &line(1, "") + &line(2, &at(2));
        let p = write("energy-at.jsonl", &text);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut r = ReplaySource::open(&p, Duration::from_secs(1), false, t0).unwrap();
        let got = r.sample(t0 + Duration::from_secs(5)).samples;
        let offsets: Vec<Option<i64>> = got
            .iter()
            .map(|s| s.entities[0].energy_read_at.map(|a| a.0 - s.taken.0))
            .collect();
        assert_eq!(offsets, [Some(131), None, Some(131)]);
        assert_eq!(got[2].taken.0, 1_800_000_002_000);
    }

    /// A looping replay whose file is gone when it starts its next pass counts the error
    /// each tick (it used to wait in silence), and goes on once the file is back.
    #[test]
    fn a_loop_that_cannot_reopen_its_file_says_so() {
        let p = write("gone.txt", DMON);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut r = ReplaySource::open(&p, Duration::from_secs(1), true, t0).unwrap();
        // Pass 1 is read, and pass 2 opened, by 2.5 s; pass 2 ends at 5 s.
        assert_eq!(r.sample(t0 + Duration::from_millis(2_500)).samples.len(), 3);
        std::fs::remove_file(&p).unwrap();
        let got = r.sample(t0 + Duration::from_millis(5_500));
        assert_eq!(got.samples.len(), 3);
        let errors: Vec<String> = got.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("cannot loop the replay")
                && errors[0].contains("gone.txt: cannot open"),
            "{errors:?}"
        );
        assert_eq!(r.sample(t0 + Duration::from_millis(6_500)).errors.len(), 1);
        std::fs::write(&p, DMON).unwrap();
        let got = r.sample(t0 + Duration::from_millis(9_500));
        assert!(got.errors.is_empty() && !got.samples.is_empty(), "{got:?}");
    }

    /// `config check` opens the capture as the start would: one that is not a capture is
    /// refused there, named, and one that is says its format.
    #[test]
    fn the_probe_opens_the_capture() {
        let config = |path: PathBuf| ReplayConfig {
            path,
            ..ReplayConfig::default()
        };
        let p = write("probe.txt", DMON);
        assert_eq!(
            config(p.clone()).probe().unwrap(),
            Some(format!("{}: a dcgmi-dmon capture", p.display()))
        );
        let bad = write("probe-bad.txt", "hello\n");
        let err = config(bad).probe().unwrap_err().to_string();
        assert!(
            err.contains("probe-bad.txt: cannot tell the format"),
            "{err}"
        );
    }

    #[test]
    fn bad_files_are_named() {
        let p = write("c.txt", "hello\nworld\n");
        let err =
            ReplaySource::open(&p, Duration::from_secs(1), false, SystemTime::now()).unwrap_err();
        let err = err.to_string();
        assert!(
            err.contains("c.txt: cannot tell the format from the first")
                && err.contains("nvidia-smi-csv")
                && err.contains("dcgmi dmon -e"),
            "{err}"
        );
        let err = ReplaySource::open(
            Path::new("/nonexistent/x"),
            Duration::from_secs(1),
            false,
            SystemTime::now(),
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("/nonexistent/x: cannot open"));
    }
}
