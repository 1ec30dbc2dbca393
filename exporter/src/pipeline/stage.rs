//! What a stage is: one step of a tick between the source and the derivation (attribution,
//! enrichment), on the tick's samples in place, with its own health and bookkeeping.

use crate::sources::Produced;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;
use truthscale_core::exposition::SourceHealth;
use truthscale_core::model::EntityKey;

/// One step of a tick after the source has been read and before the samples are derived.
/// It runs on the sampler's thread, works on the tick's samples in place, and counts its own
/// failures in its own health.
pub(crate) trait Stage: Send {
    /// The stage's name in logs.
    fn name(&self) -> &'static str;

    /// Work on this tick's samples.
    fn apply(&mut self, tick: &mut Tick<'_>);

    /// Its health as a source of its own (`truthscale_source_up{source=…}`,
    /// `truthscale_source_errors_total`).
    fn health(&self) -> SourceHealth;

    /// Count one failure of this kind against the stage: the pipeline counts an `overrun`
    /// here when this stage made the tick longer than the interval.
    fn count(&mut self, kind: &str);

    /// Whether it attributes entities (changes their keys): then a device attributed
    /// otherwise from one tick to the next is the same GPU, not a GPU that stopped.
    fn attributes(&self) -> bool {
        false
    }
}

/// One tick, as the stages see it.
#[derive(Debug)]
pub(crate) struct Tick<'a> {
    /// How long an answer stays usable (`source.stale_after`).
    pub stale_after: Duration,
    /// What the source produced, worked on in place.
    pub produced: &'a mut Produced,
    /// The keys of the entities this pod holds, where a stage knows them (the sidecar's own
    /// attribution from the kubelet): a later stage that enriches only this pod's GPUs reads
    /// it. `None`: every entity.
    pub held: Option<HashSet<EntityKey>>,
}

/// A stage's health: whether its last answer is usable, and its failures by kind.
#[derive(Debug, Default, Clone)]
pub(crate) struct Health {
    /// Whether this tick's work came from an answer within the stale period.
    pub up: bool,
    /// Failures by kind.
    pub errors: BTreeMap<String, u64>,
}

impl Health {
    /// Count one failure of this kind.
    pub(crate) fn count(&mut self, kind: &str) {
        *self.errors.entry(kind.to_string()).or_default() += 1;
    }

    /// As the exposition reports it, under `name`.
    #[must_use]
    pub(crate) fn report(&self, name: &str) -> SourceHealth {
        SourceHealth {
            name: name.to_string(),
            up: self.up,
            errors: self.errors.clone(),
        }
    }
}
