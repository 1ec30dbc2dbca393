//! Enrichment: what the GPUs' own counters cannot say, added to each tick's samples as a
//! stage of the pipeline. [`Engine`]: the serving engine's figures (vLLM, SGLang, TGI), read
//! by [`engine`] on the sampler's thread with the GPU sample's clock.

pub mod engine;

use crate::pipeline::{Stage, Tick};
use crate::sources::unix_ms;
use engine::{EngineScraper, EngineSettings};
use truthscale_core::gpus;
use truthscale_core::model::EntitySample;

/// The serving engine's figures on the GPUs it runs on: with the kubelet's answer for this
/// pod ([`Tick::held`]), only the GPUs the pod holds.
#[derive(Debug)]
pub struct Engine {
    scraper: EngineScraper,
}

impl Engine {
    /// Scrape the engine these settings name.
    #[must_use]
    pub fn new(settings: EngineSettings) -> Engine {
        Engine {
            scraper: EngineScraper::new(settings),
        }
    }
}

impl Stage for Engine {
    fn name(&self) -> &'static str {
        "engine"
    }

    fn apply(&mut self, tick: &mut Tick<'_>) {
        let Tick {
            now,
            produced,
            held,
            ..
        } = tick;
        let serving = self.scraper.scrape(unix_ms(*now));
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
}
