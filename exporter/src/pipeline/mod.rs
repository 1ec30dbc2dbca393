//! The sampling pipeline: a thread that, each tick, reads the source, runs the stages
//! (attribution, enrichment), derives, and publishes one encoded snapshot; and the
//! [`Sampler`] handle through which HTTP handlers, push sinks and embedding services read it.
//!
//! ```text
//! source.sample → stage.apply … → Served::derive → Publisher::publish → Snapshot
//! ```
//!
//! Sampling runs on its own thread at its own interval. A scrape never samples: it serves
//! the bytes encoded at the last tick, so scrape cost does not depend on how many scrapers
//! there are. The pipeline never sees the configuration's source table: it is handed a
//! built source and built stages (the composition root, `compose`, builds them from the
//! settings).

mod background;
mod served;
mod stage;

pub(crate) use crate::logging::LogLimiter;
pub(crate) use background::{Answer, Background};
pub(crate) use stage::{Health, Stage, Tick};

use crate::publish::{Published, Publisher, SinkErrors, Snapshot, VERSION};
use crate::sources::{Produced, Source, SourceError};
use crate::times::unix_ms;
use served::Served;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::exposition::{ExporterStatus, Identity, SourceHealth};
use truthscale_core::tracker::Deriver;
use truthscale_core::verdict::VerdictConfig;

/// The `source` label of what a pipeline samples, handed to it at start by the composition
/// root: written on every series and in the status, never compared. The pipeline cannot ask
/// which source it runs (it has no `PartialEq`, and the pipeline never reads its source's
/// name).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SourceLabel(&'static str);

impl SourceLabel {
    /// The label `name` (the composition root reads it off the source it built).
    pub(crate) fn new(name: &'static str) -> SourceLabel {
        SourceLabel(name)
    }

    /// The label's value, to write.
    pub(crate) fn value(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Display for SourceLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// What the pipeline runs by, besides its source and stages.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Sampling interval.
    pub interval: Duration,
    /// How long a source's (and a stage's) last answer stays usable.
    pub stale_after: Duration,
    /// Derivation thresholds.
    pub derive: DeriveConfig,
    /// Verdict thresholds.
    pub verdict: VerdictConfig,
    /// The labels every GPU series carries (this pod's, the node's).
    pub identity: Identity,
    /// The most GPU series written to `/metrics`.
    pub max_series: usize,
}

/// A running sampler: the pipeline's thread, its watchdog and its latest snapshot. Dropping
/// it stops both threads.
#[derive(Debug)]
pub struct Sampler {
    rx: watch::Receiver<Arc<Snapshot>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// Hangs up when the pipeline's thread has ended (whether it returned or panicked).
    ended: mpsc::Receiver<()>,
    watchdog: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    source: String,
    sinks: SinkErrors,
}

/// The longest [`Sampler::shutdown`] waits for a tick in flight. A read that hangs past it
/// (a blocked replay file, an engine that never answers) is left behind: the process can
/// still exit within its grace period.
pub(crate) const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

impl Sampler {
    /// Start sampling `source`, labelled `label`, through `stages`, in order.
    #[must_use]
    pub(crate) fn start(
        config: &Config,
        label: SourceLabel,
        source: Box<dyn Source>,
        stages: Vec<Box<dyn Stage>>,
    ) -> Sampler {
        let name = label.to_string();
        let (tx, rx) = watch::channel(Arc::new(Snapshot {
            source: name.clone(),
            taken_at: Some(Instant::now()),
            ..Snapshot::default()
        }));
        let (stop_tx, stop_rx) = mpsc::channel();
        let (ended_tx, ended) = mpsc::channel::<()>();
        let sinks = SinkErrors::default();
        let pipeline = Pipeline::new(config, (label, source), stages, sinks.clone());
        let at = Arc::clone(&pipeline.at);
        let interval = config.interval;
        // The pipeline's thread holds the only sender: when it ends, the channel closes
        // (which `/healthz` reports); the watchdog only borrows it while it lives.
        let tx = Arc::new(tx);
        let watched = Arc::downgrade(&tx);
        let to_pipeline = tx;
        let thread = std::thread::Builder::new()
            .name("truthscale-sampler".into())
            .spawn(move || {
                let _ended = ended_tx;
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(pipeline, interval, &to_pipeline, &stop_rx);
                }));
                if ran.is_err() {
                    ended_by_panic(&to_pipeline);
                }
            })
            .ok();
        if thread.is_none() {
            tracing::error!("Could not start the sampler thread; /metrics will stay empty.");
        }
        let limit = config.stale_after + interval;
        let (watch_stop, watch_stopped) = mpsc::channel();
        let watchdog = std::thread::Builder::new()
            .name("truthscale-watchdog".into())
            .spawn(move || watchdog(&watched, &at, limit, &watch_stopped))
            .ok()
            .map(|t| (watch_stop, t));
        Sampler {
            rx,
            stop: Some(stop_tx),
            thread,
            ended,
            watchdog,
            source: name,
            sinks,
        }
    }

    /// The sink failure counters this sampler exposes; push sinks (OTLP) add to them.
    #[must_use]
    pub(crate) fn sink_errors(&self) -> SinkErrors {
        self.sinks.clone()
    }

    /// The latest snapshot.
    #[must_use]
    pub fn latest(&self) -> Arc<Snapshot> {
        self.rx.borrow().clone()
    }

    /// A receiver that changes at every tick.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.rx.clone()
    }

    /// The source label.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Stop sampling and wait for the tick in flight, at most 3 s (a read that hangs is left
    /// behind).
    pub fn shutdown(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        self.stop.take();
        if let Some((stop, t)) = self.watchdog.take() {
            drop(stop);
            let _ = t.join();
        }
        let Some(t) = self.thread.take() else {
            return;
        };
        match self.ended.recv_timeout(SHUTDOWN_WAIT) {
            Err(mpsc::RecvTimeoutError::Timeout) => tracing::warn!(
                waited_s = SHUTDOWN_WAIT.as_secs(),
                "The tick in flight did not end in time (a read that hangs); stopping without it."
            ),
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// What the pipeline's thread is doing, for the watchdog to name: [`IDLE`], [`READING`] the
/// source, or running stage `i` (`STAGE + i`).
type At = Arc<AtomicUsize>;
const IDLE: usize = 0;
const READING: usize = 1;
const STAGE: usize = 2;

/// While a tick is stuck (a read that hangs), the snapshot it would have replaced is served
/// stale once it was published longer than `limit` ago (the stale limit plus an interval): every source down
/// and every GPU only `truthscale_gpu_up 0`, and `/readyz` 503. The next tick that ends
/// replaces it.
fn watchdog(
    tx: &std::sync::Weak<watch::Sender<Arc<Snapshot>>>,
    at: &At,
    limit: Duration,
    stop: &mpsc::Receiver<()>,
) {
    let every = (limit / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut warned = 0;
    loop {
        match stop.recv_timeout(every) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        // The pipeline's thread has ended: nothing is left to watch.
        let Some(tx) = tx.upgrade() else { return };
        let mut age = Duration::ZERO;
        let marked = tx.send_if_modified(|snap| {
            age = snap.published_at.map_or(Duration::ZERO, |t| t.elapsed());
            if !snap.ready() || age <= limit {
                return false;
            }
            *snap = Arc::new(snap.stale());
            true
        });
        if marked && warned != tx.borrow().tick {
            warned = tx.borrow().tick;
            let part = match at.load(Ordering::Relaxed) {
                IDLE => "between ticks".to_string(),
                READING => "reading the source".to_string(),
                i => format!("in stage {}", i - STAGE + 1),
            };
            tracing::warn!(
                age_s = age.as_secs(),
                limit_ms = limit.as_millis(),
                stuck = %part,
                "The tick in flight has run past the stale limit (a read that hangs?): /metrics now serves the last data as stale (truthscale_source_up 0, only truthscale_gpu_up 0 per GPU) and /readyz answers 503 until a tick ends."
            );
        }
    }
}

/// The pipeline's thread panicked: its last snapshot is served stale from now on (every
/// source down, every GPU only `truthscale_gpu_up 0`), never as live data, and the log says
/// so. `/healthz` and `/readyz` answer 503 once the thread has ended.
fn ended_by_panic(tx: &watch::Sender<Arc<Snapshot>>) {
    tx.send_if_modified(|snap| {
        if snap.tick == 0 || snap.stale {
            return false;
        }
        *snap = Arc::new(snap.stale());
        true
    });
    tracing::error!(
        "The sampler thread panicked (its message is above): sampling has stopped. /metrics serves the last data as stale (truthscale_source_up 0, only truthscale_gpu_up 0 per GPU), /healthz and /readyz answer 503; restart the process, and report the panic."
    );
}

fn run(
    mut p: Pipeline,
    interval: Duration,
    tx: &watch::Sender<Arc<Snapshot>>,
    stop: &mpsc::Receiver<()>,
) {
    let start = Instant::now();
    let mut k: u32 = 0;
    loop {
        let snap = p.tick(SystemTime::now());
        let _ = tx.send(Arc::new(snap));
        k = k.saturating_add(1);
        // After a tick that overran (counted as `overrun`), skip the slots it missed instead
        // of running them back to back.
        let behind = Instant::now().saturating_duration_since(start);
        if behind > interval * k {
            k = u32::try_from(behind.as_nanos() / interval.as_nanos().max(1) + 1)
                .unwrap_or(u32::MAX);
        }
        let next = start + interval * k;
        let wait = next.saturating_duration_since(Instant::now());
        match stop.recv_timeout(wait) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The part of a tick that took longest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slowest {
    /// Reading the source.
    Read,
    /// Stage `.0`, which took `.1`.
    Stage(usize, Duration),
    /// Deriving and publishing the GPUs.
    Derived,
}

/// Which of a tick's parts took longest: the source's `read`, one of the `stages` (the
/// first of equals), or the derivation and publication (`derived`); a tie goes to the
/// earlier part.
fn slowest(read: Duration, stages: &[Duration], derived: Duration) -> Slowest {
    let mut out = (Slowest::Read, read);
    for (i, &d) in stages.iter().enumerate() {
        if d > out.1 {
            out = (Slowest::Stage(i, d), d);
        }
    }
    if derived > out.1 {
        out = (Slowest::Derived, derived);
    }
    out.0
}

/// The pipeline's state, owned by its thread.
struct Pipeline {
    source: Box<dyn Source>,
    /// The source's label, handed at start.
    label: SourceLabel,
    /// The source's health: failures by kind (up is the served data's freshness).
    errors: BTreeMap<String, u64>,
    log: LogLimiter,
    stages: Vec<Box<dyn Stage>>,
    /// Whether a stage attributes entities (changes their keys).
    attributes: bool,
    served: Served,
    publisher: Publisher,
    sinks: SinkErrors,
    interval: Duration,
    stale_after: Duration,
    /// What the tick is doing now (for the watchdog).
    at: At,
}

impl Pipeline {
    fn new(
        config: &Config,
        (label, source): (SourceLabel, Box<dyn Source>),
        stages: Vec<Box<dyn Stage>>,
        sinks: SinkErrors,
    ) -> Pipeline {
        // The source declares how often it updates (or lets the deriver tell each entity's
        // cadence from its timestamps).
        let update = source.update_interval().map(|w| w.as_secs_f64());
        let mut deriver = Deriver::new(config.derive.clone(), update);
        deriver.set_verdict_config(config.verdict.clone());
        Pipeline {
            source,
            label,
            errors: BTreeMap::new(),
            log: LogLimiter::default(),
            attributes: stages.iter().any(|s| s.attributes()),
            stages,
            served: Served::new(deriver, config.stale_after),
            publisher: Publisher::new(config.identity.clone(), config.max_series),
            sinks,
            interval: config.interval,
            stale_after: config.stale_after,
            at: At::default(),
        }
    }

    /// One tick: sample, each stage, derive, publish.
    fn tick(&mut self, now: SystemTime) -> Snapshot {
        let started = Instant::now();
        self.at.store(READING, Ordering::Relaxed);
        let mut produced = self.source.sample(now);
        let read = started.elapsed();
        let source_keys = Served::source_keys(&produced, self.attributes);
        let mut tick = Tick {
            stale_after: self.stale_after,
            produced: &mut produced,
            held: None,
        };
        let mut took = Vec::with_capacity(self.stages.len());
        for (i, stage) in self.stages.iter_mut().enumerate() {
            self.at.store(STAGE + i, Ordering::Relaxed);
            let begun = Instant::now();
            stage.apply(&mut tick);
            took.push(begun.elapsed());
        }
        self.at.store(IDLE, Ordering::Relaxed);
        self.served
            .remember_attribution(source_keys, &produced, started + read);
        let before_derive = started.elapsed();
        let counted = self.count_overrun(before_derive, read, &took, &mut produced);
        self.count_errors(&produced);
        // The data is as fresh as its read's end: a read slower than the stale period
        // published its own data as stale, every GPU down.
        self.served
            .derive(&produced, started + read, self.attributes);
        let source = self.label.value();
        let source_up = self.served.up();
        let status = self.status(now, started, source_up);
        let tick = Published {
            now,
            started,
            source,
            source_up,
        };
        let snapshot = self
            .publisher
            .publish(self.served.gpus(source), status, &tick);
        if !counted {
            let derived = started.elapsed().saturating_sub(before_derive);
            self.count_late_overrun(started.elapsed(), (read, &took, derived));
        }
        snapshot
    }

    /// A tick longer than the interval by the end of its stages slipped the cadence: the
    /// overrun is counted against the part that took longest ([`slowest`]), the source
    /// (`read`, in this tick's errors) or a stage. Returns whether it was counted.
    fn count_overrun(
        &mut self,
        total: Duration,
        read: Duration,
        stages: &[Duration],
        produced: &mut Produced,
    ) -> bool {
        if total <= self.interval {
            return false;
        }
        match slowest(read, stages, Duration::ZERO) {
            Slowest::Stage(i, d) => self.count_stage_overrun(i, d, total),
            _ => produced.errors.push(SourceError::Overrun(format!(
                "the tick took {} ms, longer than the {} ms interval, {} ms of it reading the source: the cadence slipped (a slow or hung endpoint, or too much to read per tick)",
                total.as_millis(),
                self.interval.as_millis(),
                read.as_millis()
            ))),
        }
        true
    }

    /// A tick that became longer than the interval only once its GPUs were derived and
    /// published (`parts`: the read, the stages, then the derivation and publication): the
    /// overrun is counted against the part that took longest, the derivation's under the
    /// source (its GPUs), where the next tick's snapshot shows it.
    fn count_late_overrun(&mut self, total: Duration, parts: (Duration, &[Duration], Duration)) {
        if total <= self.interval {
            return;
        }
        let (read, stages, derived) = parts;
        let message = match slowest(read, stages, derived) {
            Slowest::Stage(i, d) => return self.count_stage_overrun(i, d, total),
            Slowest::Read => format!("{} ms of it reading the source", read.as_millis()),
            Slowest::Derived => format!(
                "{} ms of it deriving and publishing the GPUs (a longer interval, or fewer GPUs per agent)",
                derived.as_millis()
            ),
        };
        *self.errors.entry("overrun".to_string()).or_default() += 1;
        if self.log.allow("overrun") {
            tracing::warn!(
                source = %self.label,
                kind = "overrun",
                "Source reported a problem; it is counted in truthscale_source_errors_total (repeats of this kind are logged at most every 30 s): the tick took {} ms, longer than the {} ms interval, {message}: the cadence slipped.",
                total.as_millis(),
                self.interval.as_millis(),
            );
        }
    }

    /// Count an overrun against stage `i`, which took `took` of the tick's `total`.
    fn count_stage_overrun(&mut self, i: usize, took: Duration, total: Duration) {
        let stage = &mut self.stages[i];
        stage.count("overrun");
        if self.log.allow(stage.name()) {
            tracing::warn!(
                stage = stage.name(),
                took_ms = took.as_millis(),
                tick_ms = total.as_millis(),
                interval_ms = self.interval.as_millis(),
                "A stage made the tick longer than the interval and the cadence slipped; counted as truthscale_source_errors_total{{kind=\"overrun\"}} under the stage's source (repeats logged at most every 30 s)."
            );
        }
    }

    /// Count the source's failures by kind, and log each kind at most every 30 s.
    fn count_errors(&mut self, produced: &Produced) {
        for e in &produced.errors {
            *self.errors.entry(e.kind().to_string()).or_default() += 1;
            if self.log.allow(e.kind()) {
                tracing::warn!(
                    source = %self.label,
                    kind = e.kind(),
                    error = %e,
                    what_to_do = e.advice().unwrap_or("see the error; docs/reliability.md lists each kind"),
                    "Source reported a problem; it is counted in truthscale_source_errors_total (repeats of this kind are logged at most every 30 s)."
                );
            }
        }
    }

    /// The exporter's own status at this tick: the source's health and each stage's.
    fn status(&self, now: SystemTime, started: Instant, source_up: bool) -> ExporterStatus {
        let source = SourceHealth {
            name: self.label.to_string(),
            up: source_up,
            errors: self.errors.clone(),
        };
        ExporterStatus {
            version: VERSION.to_string(),
            sources: std::iter::once(source)
                .chain(self.stages.iter().map(|s| s.health()))
                .collect(),
            sample_duration_seconds: Some(started.elapsed().as_secs_f64()),
            diagnostics: self.served.diagnostics.clone(),
            snapshot_unix_seconds: unix_ms(now) as f64 / 1000.0,
            sinks: self.sinks.health(),
            // The body size and the series dropped are the publisher's to say.
            ..ExporterStatus::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread::sleep;

    /// A source or stage that takes `delay` each tick.
    #[derive(Debug)]
    struct Slow {
        delay: Duration,
        health: Health,
    }

    impl Slow {
        fn new(ms: u64) -> Slow {
            Slow {
                delay: Duration::from_millis(ms),
                health: Health::default(),
            }
        }
    }

    impl Source for Slow {
        fn name(&self) -> &'static str {
            "null"
        }
        fn update_interval(&self) -> Option<Duration> {
            None
        }
        fn sample(&mut self, _now: SystemTime) -> Produced {
            sleep(self.delay);
            Produced::default()
        }
    }

    impl Stage for Slow {
        fn name(&self) -> &'static str {
            "kubelet"
        }
        fn apply(&mut self, _tick: &mut Tick<'_>) {
            sleep(self.delay);
        }
        fn health(&self) -> SourceHealth {
            self.health.report("kubelet")
        }
        fn count(&mut self, kind: &str) {
            self.health.count(kind);
        }
    }

    /// A pipeline sampling every `interval_ms`, whose source and one stage each take the
    /// time given.
    fn pipeline(interval_ms: u64, source_ms: u64, stage_ms: u64) -> Pipeline {
        let config = Config {
            interval: Duration::from_millis(interval_ms),
            stale_after: Duration::from_secs(10),
            derive: DeriveConfig::default(),
            verdict: VerdictConfig::default(),
            identity: Identity::default(),
            max_series: 100,
        };
        let stages: Vec<Box<dyn Stage>> = vec![Box::new(Slow::new(stage_ms))];
        let source = Box::new(Slow::new(source_ms));
        Pipeline::new(
            &config,
            (SourceLabel::new("null"), source),
            stages,
            SinkErrors::default(),
        )
    }

    fn overruns(snap: &Snapshot, source: &str) -> u64 {
        let h = snap.status.sources.iter().find(|s| s.name == source);
        h.and_then(|h| h.errors.get("overrun").copied())
            .unwrap_or_default()
    }

    /// A stage that makes the tick longer than the interval is counted, not the source: a
    /// hung kubelet is not blamed on the GPUs. (The other part of each tick stays under the
    /// 250 ms delay on a loaded machine too, and the tick with no delay has a 10 s interval.)
    #[test]
    fn an_overrun_is_counted_against_the_stage_that_caused_it() {
        let mut p = pipeline(100, 0, 250);
        let snap = p.tick(SystemTime::now());
        assert_eq!(overruns(&snap, "kubelet"), 1);
        assert_eq!(overruns(&snap, "null"), 0);

        let mut p = pipeline(100, 250, 0);
        let snap = p.tick(SystemTime::now());
        assert_eq!(overruns(&snap, "null"), 1);
        assert_eq!(overruns(&snap, "kubelet"), 0);

        let mut p = pipeline(10_000, 0, 0);
        let snap = p.tick(SystemTime::now());
        assert_eq!(overruns(&snap, "null") + overruns(&snap, "kubelet"), 0);
    }

    /// The part that took longest; a tie goes to the earlier part.
    #[test]
    fn the_slowest_part_of_a_tick() {
        let ms = Duration::from_millis;
        assert_eq!(slowest(ms(5), &[ms(3)], ms(1)), Slowest::Read);
        assert_eq!(
            slowest(ms(5), &[ms(3), ms(9), ms(9)], ms(1)),
            Slowest::Stage(1, ms(9))
        );
        assert_eq!(slowest(ms(5), &[ms(3)], ms(30)), Slowest::Derived);
        assert_eq!(slowest(ms(5), &[], ms(5)), Slowest::Read);
    }

    /// A tick that overran only once its GPUs were derived and published is counted too
    /// (it slipped the cadence as much), against the part that took longest: the derivation
    /// under the source, else a stage; shown by the next tick's snapshot. One within the
    /// interval is not counted.
    #[test]
    fn an_overrun_by_the_derivation_is_counted_under_the_source() {
        let ms = Duration::from_millis;
        // A 10 s interval: the tick that shows the count never overruns by itself.
        let mut p = pipeline(10_000, 0, 0);
        p.count_late_overrun(ms(15_000), (ms(1), &[ms(2)], ms(14_997)));
        let snap = p.tick(SystemTime::now());
        assert_eq!(overruns(&snap, "null"), 1);
        assert_eq!(overruns(&snap, "kubelet"), 0);

        let mut p = pipeline(10_000, 0, 0);
        p.count_late_overrun(ms(15_000), (ms(1), &[ms(8_750)], ms(6_249)));
        let snap = p.tick(SystemTime::now());
        assert_eq!(
            (overruns(&snap, "null"), overruns(&snap, "kubelet")),
            (0, 1)
        );

        let mut p = pipeline(10_000, 0, 0);
        p.count_late_overrun(ms(9_750), (ms(1), &[ms(2)], ms(9_747)));
        let snap = p.tick(SystemTime::now());
        assert_eq!(overruns(&snap, "null") + overruns(&snap, "kubelet"), 0);
    }

    /// A source whose every read answers one GPU's reading after `delay`.
    #[derive(Debug)]
    struct SlowData {
        delay: Duration,
    }

    impl Source for SlowData {
        fn name(&self) -> &'static str {
            "null"
        }
        fn update_interval(&self) -> Option<Duration> {
            None
        }
        fn sample(&mut self, now: SystemTime) -> Produced {
            sleep(self.delay);
            let mut e = truthscale_core::model::EntitySample::default();
            e.id.gpu = Some(0);
            e.readings
                .set_value(truthscale_core::model::Field::ReportedUtil, 0.5);
            let taken = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
            Produced {
                samples: vec![truthscale_core::model::Sample {
                    taken: truthscale_core::model::Timestamp(taken),
                    entities: vec![e],
                }],
                ..Produced::default()
            }
        }
    }

    /// A read slower than the stale period publishes its own data fresh: the GPU it read is
    /// up, and the source too (they were published down, every GPU, on every such tick).
    #[test]
    fn a_slow_reads_own_data_is_fresh() {
        // The read takes four stale periods; what follows it has the whole stale period.
        let config = Config {
            interval: Duration::from_millis(400),
            stale_after: Duration::from_millis(300),
            derive: DeriveConfig::default(),
            verdict: VerdictConfig::default(),
            identity: Identity::default(),
            max_series: 100,
        };
        let source = Box::new(SlowData {
            delay: Duration::from_millis(1_200),
        });
        let mut p = Pipeline::new(
            &config,
            (SourceLabel::new("null"), source),
            Vec::new(),
            SinkErrors::default(),
        );
        let snap = p.tick(SystemTime::now());
        assert!(snap.source_up);
        assert_eq!(
            snap.gpus.iter().map(|g| g.up).collect::<Vec<_>>(),
            vec![true]
        );
    }

    /// A source that answers once, then hangs for `hang`.
    #[derive(Debug)]
    struct HangsAfterOne {
        hang: Duration,
        ticks: u32,
    }

    impl Source for HangsAfterOne {
        fn name(&self) -> &'static str {
            "null"
        }
        fn update_interval(&self) -> Option<Duration> {
            None
        }
        fn sample(&mut self, _now: SystemTime) -> Produced {
            self.ticks += 1;
            if self.ticks == 2 {
                sleep(self.hang);
            }
            Produced::default()
        }
    }

    /// A source that answers once, then panics.
    #[derive(Debug)]
    struct PanicsAfterOne {
        ticks: u32,
    }

    impl Source for PanicsAfterOne {
        fn name(&self) -> &'static str {
            "null"
        }
        fn update_interval(&self) -> Option<Duration> {
            None
        }
        fn sample(&mut self, _now: SystemTime) -> Produced {
            self.ticks += 1;
            assert!(
                self.ticks < 2,
                "a source that fails in a way no error covers"
            );
            Produced::default()
        }
    }

    /// A panic in the pipeline's thread leaves no live-looking data behind: the last snapshot
    /// is served stale at once (every source down), and the sampler's channel is closed,
    /// which `/healthz` and `/readyz` read as stopped.
    #[test]
    fn a_panicking_tick_leaves_its_data_stale() {
        let config = Config {
            interval: Duration::from_millis(30),
            stale_after: Duration::from_secs(60),
            derive: DeriveConfig::default(),
            verdict: VerdictConfig::default(),
            identity: Identity::default(),
            max_series: 100,
        };
        let source = PanicsAfterOne { ticks: 0 };
        let sampler = Sampler::start(
            &config,
            SourceLabel::new("null"),
            Box::new(source),
            Vec::new(),
        );
        let rx = sampler.subscribe();
        let t0 = Instant::now();
        while rx.has_changed().is_ok() {
            assert!(t0.elapsed() < Duration::from_secs(10), "timed out");
            sleep(Duration::from_millis(5));
        }
        // Well before the 60 s stale limit: the panic, not the watchdog, made it stale.
        let snap = sampler.latest();
        assert_eq!(snap.tick, 1);
        assert!(snap.stale && !snap.ready() && !snap.source_up);
        let text = String::from_utf8_lossy(&snap.text).into_owned();
        assert!(
            text.contains("truthscale_source_up{source=\"null\"} 0"),
            "{text}"
        );
        sampler.shutdown();
    }

    /// While a tick hangs, the last snapshot is served stale once older than the stale limit
    /// plus an interval (not before), the next tick to end replaces it, and shutdown does not
    /// wait for a hung read longer than `SHUTDOWN_WAIT`.
    #[test]
    fn a_stuck_tick_is_served_stale_and_shutdown_is_bounded() {
        let config = Config {
            interval: Duration::from_millis(50),
            stale_after: Duration::from_millis(150),
            derive: DeriveConfig::default(),
            verdict: VerdictConfig::default(),
            identity: Identity::default(),
            max_series: 100,
        };
        let source = HangsAfterOne {
            hang: Duration::from_millis(1200),
            ticks: 0,
        };
        // Before the start: the first tick is published after it, so the bounds below hold
        // however late this thread runs again.
        let t0 = Instant::now();
        let sampler = Sampler::start(
            &config,
            SourceLabel::new("null"),
            Box::new(source),
            Vec::new(),
        );
        let wait = |f: &dyn Fn(&Snapshot) -> bool| {
            while !f(&sampler.latest()) {
                assert!(t0.elapsed() < Duration::from_secs(10), "timed out");
                sleep(Duration::from_millis(5));
            }
            t0.elapsed()
        };
        wait(&|s| s.tick == 1);
        let stale_at = wait(&|s| s.stale);
        let snap = sampler.latest();
        assert_eq!(snap.tick, 1);
        assert!(!snap.ready() && !snap.source_up);
        assert!(snap.status.sources.iter().all(|s| !s.up));
        let text = String::from_utf8_lossy(&snap.text).into_owned();
        assert!(
            text.contains("truthscale_source_up{source=\"null\"} 0"),
            "{text}"
        );
        // Published at about 0 ms: stale after the 200 ms limit, not before.
        assert!(stale_at >= Duration::from_millis(200), "{stale_at:?}");
        let fresh_at = wait(&|s| s.tick == 2);
        assert!(sampler.latest().ready());
        assert!(fresh_at >= Duration::from_millis(1200), "{fresh_at:?}");
        drop(sampler);

        let hung = HangsAfterOne {
            hang: Duration::from_secs(30),
            ticks: 0,
        };
        let sampler = Sampler::start(
            &config,
            SourceLabel::new("null"),
            Box::new(hung),
            Vec::new(),
        );
        while sampler.latest().tick < 1 {
            sleep(Duration::from_millis(5));
        }
        sleep(Duration::from_millis(100));
        let t = Instant::now();
        sampler.shutdown();
        let took = t.elapsed();
        assert!(
            took >= SHUTDOWN_WAIT && took < SHUTDOWN_WAIT + Duration::from_secs(2),
            "{took:?}"
        );
    }
}
