//! The derive step: each tick's samples through the deriver, and the GPUs being served, with
//! their staleness.

use crate::sources::Produced;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};
use truthscale_core::diag::{Diagnostic, DiagnosticKind};
use truthscale_core::exposition::GpuEntry;
use truthscale_core::model::{EntityId, EntityKey};
use truthscale_core::tracker::{Deriver, EntityWindow};

/// How long a stopped GPU is still listed (as `truthscale_gpu_up 0`) after it went stale.
const FORGET_STOPPED_AFTER: Duration = Duration::from_secs(600);

/// How many (entity, kind) pairs are remembered as logged; past it, nothing more is logged
/// at warning level (every diagnostic is still counted).
const LOGGED_DIAGNOSTICS_MAX: usize = 10_000;

struct Entity {
    window: EntityWindow,
    last_seen: Instant,
}

/// The deriver and what it serves.
pub(crate) struct Served {
    deriver: Deriver,
    stale_after: Duration,
    entities: BTreeMap<EntityKey, Entity>,
    /// Where stages attribute: the key a source names an entity by → the key it is served
    /// under once attributed, for the entities a source reports as unchanged (which carry
    /// only the source's key).
    attributed_keys: HashMap<EntityKey, EntityKey>,
    last_data: Option<Instant>,
    /// Derivation diagnostics by kind.
    pub(crate) diagnostics: BTreeMap<String, u64>,
    /// The entities (and kinds) whose impossible readings or gaps were logged: once each.
    logged_diagnostics: HashSet<(EntityKey, DiagnosticKind)>,
}

/// A device whatever its attribution: node, index, UUID and MIG instance.
fn device_of(id: &EntityId) -> (Option<String>, Option<u32>, Option<String>, Option<u32>) {
    (
        id.node.clone(),
        id.gpu,
        id.uuid.clone(),
        id.mig.as_ref().map(|m| m.gpu_instance),
    )
}

impl Served {
    pub(crate) fn new(deriver: Deriver, stale_after: Duration) -> Served {
        Served {
            deriver,
            stale_after,
            entities: BTreeMap::new(),
            attributed_keys: HashMap::new(),
            last_data: None,
            diagnostics: BTreeMap::new(),
            logged_diagnostics: HashSet::new(),
        }
    }

    /// The keys of what the source produced, before any stage attributes it (only where a
    /// stage attributes: otherwise nothing to remember).
    pub(crate) fn source_keys(produced: &Produced, attributes: bool) -> Vec<EntityKey> {
        if !attributes {
            return Vec::new();
        }
        produced
            .samples
            .iter()
            .flat_map(|s| &s.entities)
            .map(|e| e.id.key())
            .collect()
    }

    /// Remember which key each attributed entity is served under, for the entities a source
    /// will report as unchanged by the key it had before.
    pub(crate) fn remember_attribution(
        &mut self,
        source_keys: Vec<EntityKey>,
        produced: &Produced,
    ) {
        let attributed = produced.samples.iter().flat_map(|s| &s.entities);
        for (from, e) in source_keys.into_iter().zip(attributed) {
            if e.id.key() == from {
                self.attributed_keys.remove(&from);
            } else {
                self.attributed_keys.insert(from, e.id.key());
            }
        }
    }

    /// Derive the tick's samples (read at `t0`) and update what is served. `attributes`: a
    /// stage attributes entities, so a device attributed otherwise is the same GPU.
    pub(crate) fn derive(&mut self, produced: &Produced, t0: Instant, attributes: bool) {
        for sample in &produced.samples {
            let d = self.deriver.observe(sample);
            for diag in d.diagnostics {
                *self
                    .diagnostics
                    .entry(diag.kind.as_str().to_string())
                    .or_default() += 1;
                self.log_diagnostic(&diag);
            }
            if attributes && !d.windows.is_empty() {
                // A device now attributed otherwise (its pod ended, it became shared, the
                // answer came or went) is the same GPU; its old attribution goes at once, not
                // as a GPU that stopped.
                let devices: HashSet<_> = d.windows.iter().map(|w| device_of(&w.id)).collect();
                let fresh: HashSet<_> = d.windows.iter().map(|w| w.id.key()).collect();
                self.entities.retain(|k, s| {
                    fresh.contains(k) || !devices.contains(&device_of(&s.window.id))
                });
            }
            for w in d.windows {
                self.entities.insert(
                    w.id.key(),
                    Entity {
                        window: w,
                        last_seen: t0,
                    },
                );
            }
            self.last_data = Some(t0);
        }
        // An unchanged entity keeps its attribution until its readings next change.
        for key in &produced.unchanged {
            let key = self.attributed_keys.get(key).unwrap_or(key);
            if let Some(s) = self.entities.get_mut(key) {
                s.last_seen = t0;
            }
        }
        if !produced.unchanged.is_empty() {
            self.last_data = Some(t0);
        }
        let stale_after = self.stale_after;
        // A GPU that stopped (stale) is kept as `truthscale_gpu_up 0` for a while, then
        // forgotten.
        self.entities
            .retain(|_, s| s.last_seen.elapsed() <= stale_after + FORGET_STOPPED_AFTER);
        if !self.attributed_keys.is_empty() {
            let served = &self.entities;
            self.attributed_keys.retain(|_, to| served.contains_key(to));
        }
    }

    /// Whether the source produced data within the stale period.
    pub(crate) fn up(&self) -> bool {
        self.last_data
            .is_some_and(|t| t.elapsed() <= self.stale_after)
    }

    /// The GPUs being served, from `source`; a stale one has `up == false`.
    pub(crate) fn gpus(&self, source: &'static str) -> Vec<GpuEntry> {
        self.entities
            .values()
            .map(|s| GpuEntry {
                window: s.window.clone(),
                source,
                up: s.last_seen.elapsed() <= self.stale_after,
                list_cap: None,
            })
            .collect()
    }

    /// Log a diagnostic: an impossible reading or a gap at warning level once per entity
    /// and kind (each is counted in `truthscale_derivation_diagnostics_total` anyway), the
    /// rest at debug level.
    fn log_diagnostic(&mut self, diag: &Diagnostic) {
        let once = matches!(
            diag.kind,
            DiagnosticKind::OutOfRange | DiagnosticKind::Sentinel | DiagnosticKind::Gap
        );
        let first = once
            && self.logged_diagnostics.len() < LOGGED_DIAGNOSTICS_MAX
            && diag
                .entity
                .as_ref()
                .is_some_and(|e| self.logged_diagnostics.insert((e.key(), diag.kind)));
        if first {
            tracing::warn!(
                diagnostic = %diag,
                kind = diag.kind.as_str(),
                "Reading not used as a measurement; counted in truthscale_derivation_diagnostics_total (logged once per GPU and kind)."
            );
        } else {
            tracing::debug!(diagnostic = %diag, "Derivation diagnostic.");
        }
    }
}
