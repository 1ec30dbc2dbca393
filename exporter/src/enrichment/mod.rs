//! Enrichment: what the GPUs' own counters cannot say, added to each tick's samples as a
//! stage of the pipeline. `Engine`: the serving engine's figures (vLLM, SGLang, TGI), read
//! by [`engine`] every interval on a thread of its own (`pipeline::Background`, as the
//! kubelet is read): a slow or hung engine never slows sampling nor blanks a GPU.
//! `HolderPressure` (`pressure`, node mode): the CPU and I/O pressure of the pods holding
//! each GPU, from their cgroup v2 files, read on the sampler's thread (bounded, non-blocking).

pub mod engine;
pub(crate) mod pressure;

use crate::pipeline::{Answer, Background, Health, LogLimiter, Stage, Tick};
use crate::times::unix_ms;
use engine::{EngineScraper, EngineSettings};
pub(crate) use pressure::HolderPressure;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use truthscale_core::exposition::SourceHealth;
use truthscale_core::gpus;
use truthscale_core::model::{EntitySample, ServingSnapshot};
use truthscale_core::serving::{self, ModelParams};

/// The `source` label of the serving engine's health.
const ENGINE: &str = "engine";

impl Answer for ServingSnapshot {}

/// Why the engine's last read gave no reading, until a read does: written by the reader's
/// thread, read by the stage.
type Failing = Arc<Mutex<Option<String>>>;

/// The serving engine's figures on the GPUs it runs on: with the kubelet's answer for this
/// pod ([`Tick::held`]), only the GPUs the pod holds. The engine is read every interval on a
/// thread of its own; a tick takes the last answer while it is fresh (`source.stale_after`).
#[derive(Debug)]
pub(crate) struct Engine {
    reader: Background<ServingSnapshot>,
    failing: Failing,
    model: Option<ModelParams>,
    url: String,
    timeout: Duration,
    /// When the reader started: until its first read ends, the engine is not yet known.
    started: Instant,
    /// Up, and the reader's failures by kind, as of this tick.
    health: Health,
    /// Failures the pipeline counted against this stage (overruns).
    own: Health,
}

impl Engine {
    /// Read the engine these settings name every `every`, starting now.
    #[must_use]
    pub(crate) fn new(settings: EngineSettings, every: Duration) -> Engine {
        let model = settings.model;
        // Shown in reasons (a label on /metrics): never its password.
        let url = crate::client::redact_userinfo(&settings.url);
        let timeout = settings.timeout;
        let mut scraper = EngineScraper::new(settings);
        let failing = Failing::default();
        let written = Arc::clone(&failing);
        let mut log = LogLimiter::default();
        let mut was_failing = false;
        let reader = Background::start(
            "truthscale-engine",
            every,
            move || {
                let read = scraper.scrape(unix_ms(SystemTime::now()));
                let reason = read.as_ref().err().map(|f| f.reason.clone());
                *written.lock().unwrap_or_else(PoisonError::into_inner) = reason;
                read.map_err(|f| f.error)
            },
            move |answer| match answer {
                Ok(_) => {
                    if std::mem::take(&mut was_failing) {
                        tracing::info!(source = ENGINE, "Reading the serving engine again.");
                    }
                }
                Err(e) => {
                    was_failing = true;
                    if log.allow(e.kind()) {
                        tracing::warn!(
                            source = ENGINE,
                            kind = e.kind(),
                            error = %e,
                            "Cannot read the serving engine; its series are absent (truthscale_serving_engine_up 0 with the reason) until it answers; the GPUs' own series are not affected (counted in truthscale_source_errors_total{{source=\"engine\"}}; repeats logged every 30 s)."
                        );
                    }
                }
            },
        );
        Engine {
            reader,
            failing,
            model,
            url,
            timeout,
            started: Instant::now(),
            health: Health::default(),
            own: Health::default(),
        }
    }

    /// What this tick shows of the engine, and its health: the last answer while it is
    /// younger than `stale_after` and no read has failed since; else absent, with the last
    /// failure's reason, or with the answer's staleness while a read is in flight (a hung
    /// engine). `None` while the first read is in flight, for at most `stale_after`: not yet
    /// known, neither figures nor an absence.
    fn current(&self, stale_after: Duration) -> (Option<ServingSnapshot>, Health) {
        let (answer, errors) = self.reader.current(stale_after);
        let failing = self
            .failing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let serving = match (failing, answer) {
            (Some(reason), _) => serving::absent(reason),
            (None, Some(a)) => (*a).clone(),
            (None, None) if self.started.elapsed() <= stale_after => {
                return (None, Health { up: false, errors });
            }
            (None, None) => serving::absent(format!(
                "{}: no answer within the stale period ({} ms; a read waits up to engine.timeout, {} ms)",
                self.url,
                stale_after.as_millis(),
                self.timeout.as_millis()
            )),
        };
        let up = serving.absent_reason.is_none();
        (Some(serving), Health { up, errors })
    }
}

impl Stage for Engine {
    fn name(&self) -> &'static str {
        ENGINE
    }

    fn apply(&mut self, tick: &mut Tick<'_>) {
        let (serving, health) = self.current(tick.stale_after);
        self.health = health;
        let Tick { produced, held, .. } = tick;
        let model = self.model;
        let holds = |e: &EntitySample| held.as_ref().is_none_or(|h| h.contains(&e.id.key()));
        for sample in &mut produced.samples {
            let n = sample.entities.iter().filter(|e| holds(e)).count();
            for e in &mut sample.entities {
                if !holds(e) {
                    continue;
                }
                let Some(mut sv) = serving.clone() else {
                    // Not yet known: no figures, not even the source's own.
                    e.serving = None;
                    continue;
                };
                // A MIG instance's peaks are its share of its GPU's; one of a profile the
                // catalog lacks has none (no utilization rather than the whole GPU's).
                let gpu = e.id.model.as_deref().and_then(gpus::lookup);
                let instance = match &e.id.mig {
                    None => gpu.copied(),
                    Some(m) => gpu
                        .zip(m.profile.as_deref())
                        .and_then(|(g, p)| g.of_profile(p)),
                };
                let spec = instance.as_ref();
                if let Some(m) = &model {
                    serving::add_utilization(&mut sv, m, spec, n);
                }
                serving::add_engine_estimates(&mut sv, spec, model.as_ref().map(|m| m.dtype));
                sv.gpus = u32::try_from(n).ok().filter(|n| *n > 0);
                e.serving = Some(sv);
            }
        }
    }

    fn health(&self) -> SourceHealth {
        let mut h = self.health.report(ENGINE);
        for (kind, n) in &self.own.errors {
            *h.errors.entry(kind.clone()).or_default() += n;
        }
        h
    }

    fn count(&mut self, kind: &str) {
        self.own.count(kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An engine that accepts connections and never answers: asking the stage is immediate;
    /// not yet known for the stale period, then absent with its staleness as the reason
    /// (never zeros), and once the read's timeout passes, counted as the engine's `timeout`
    /// with that reason.
    #[test]
    fn a_hung_engine_is_absent_without_holding_up_the_tick() {
        let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", hung.local_addr().unwrap());
        let engine = Engine::new(
            EngineSettings {
                url: url.clone(),
                timeout: Duration::from_secs(3),
                model: None,
            },
            Duration::from_millis(20),
        );
        // A stale period of 1 s and a read timeout of 3 s: each step below has a second or
        // more to spare on a loaded machine.
        let stale = Duration::from_secs(1);
        let asked = Instant::now();
        let (serving, health) = engine.current(stale);
        assert!(asked.elapsed() < Duration::from_millis(500));
        assert!(serving.is_none(), "{serving:?}");
        assert!(!health.up);
        std::thread::sleep(stale);
        let (serving, health) = engine.current(stale);
        assert!(!health.up);
        let serving = serving.expect("absent, with the reason");
        assert_eq!(serving.kv_cache_utilization, None);
        let reason = serving.absent_reason.unwrap();
        assert!(
            reason.starts_with(&format!("{url}: no answer within the stale period")),
            "{reason}"
        );
        let t = Instant::now();
        loop {
            let (serving, health) = engine.current(stale);
            if health.errors.contains_key("timeout") {
                assert!(!health.up);
                let reason = serving.and_then(|s| s.absent_reason).unwrap();
                assert!(reason.contains("no complete answer within"), "{reason}");
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(8), "no timeout counted");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(hung);
    }
}
