//! Enrichment: what the GPUs' own counters cannot say, added to each tick's samples as a
//! stage of the pipeline. `Engine`: the serving engine's figures (vLLM, SGLang, TGI), read
//! by [`engine`] on the sampler's thread with the GPU sample's clock.

pub mod engine;

use crate::pipeline::{Health, Stage, Tick};
use crate::sources::unix_ms;
use engine::{EngineScraper, EngineSettings};
use truthscale_core::exposition::SourceHealth;
use truthscale_core::gpus;
use truthscale_core::model::EntitySample;

/// The `source` label of the serving engine's health.
const ENGINE: &str = "engine";

/// The serving engine's figures on the GPUs it runs on: with the kubelet's answer for this
/// pod ([`Tick::held`]), only the GPUs the pod holds.
#[derive(Debug)]
pub(crate) struct Engine {
    scraper: EngineScraper,
    health: Health,
}

impl Engine {
    /// Scrape the engine these settings name.
    #[must_use]
    pub(crate) fn new(settings: EngineSettings) -> Engine {
        Engine {
            scraper: EngineScraper::new(settings),
            health: Health::default(),
        }
    }
}

impl Stage for Engine {
    fn name(&self) -> &'static str {
        ENGINE
    }

    fn apply(&mut self, tick: &mut Tick<'_>) {
        let Tick {
            now,
            produced,
            held,
            ..
        } = tick;
        let serving = self.scraper.scrape(unix_ms(*now));
        self.health.up = self.scraper.failed().is_none();
        if let Some(kind) = self.scraper.failed() {
            self.health.count(kind);
        }
        let model = self.scraper.model();
        let holds = |e: &EntitySample| held.as_ref().is_none_or(|h| h.contains(&e.id.key()));
        for sample in &mut produced.samples {
            let n = sample.entities.iter().filter(|e| holds(e)).count();
            for e in &mut sample.entities {
                if !holds(e) {
                    continue;
                }
                let mut sv = serving.clone();
                let spec = e.id.model.as_deref().and_then(gpus::lookup);
                if let Some(m) = &model {
                    truthscale_core::serving::add_utilization(&mut sv, m, spec, n);
                }
                truthscale_core::serving::add_engine_estimates(
                    &mut sv,
                    spec,
                    model.as_ref().map(|m| m.dtype),
                );
                e.serving = Some(sv);
            }
        }
    }

    fn health(&self) -> SourceHealth {
        self.health.report(ENGINE)
    }

    fn count(&mut self, kind: &str) {
        self.health.count(kind);
    }
}
