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
    /// only the source's key), and when the source last named it. Forgotten once the
    /// source has not named it for as long as a stopped GPU is kept: a source whose own key
    /// changes while the served one does not (dcgm-exporter's pod labels on a shared GPU,
    /// served without a pod) would otherwise leave one entry a pod.
    attributed_keys: HashMap<EntityKey, (EntityKey, Instant)>,
    last_data: Option<Instant>,
    /// Derivation diagnostics by kind.
    pub(crate) diagnostics: BTreeMap<String, u64>,
    /// The entities (and kinds) whose impossible readings or gaps were logged: once each.
    logged_diagnostics: HashSet<(EntityKey, DiagnosticKind)>,
    /// Entities no longer served because their device is now attributed otherwise, with
    /// when: their deriver state is forgotten at once, what was logged of them once they
    /// have been gone as long as a stopped GPU is kept.
    retired: HashMap<EntityKey, Instant>,
    /// How long a stopped GPU is still listed after it went stale ([`FORGET_STOPPED_AFTER`];
    /// shorter in tests).
    stopped_kept: Duration,
    /// When `retired` was last swept (once per stale period).
    last_sweep: Option<Instant>,
}

/// How many entries each per-entity map of [`Served`] holds, for tests of the bound.
#[cfg(test)]
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) served: usize,
    pub(crate) deriver: usize,
    pub(crate) retired: usize,
    pub(crate) attributed_keys: usize,
    pub(crate) logged_diagnostics: usize,
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
            retired: HashMap::new(),
            stopped_kept: FORGET_STOPPED_AFTER,
            last_sweep: None,
        }
    }

    /// Keep a stopped GPU listed this long (tests shorten the 10 minutes).
    #[cfg(test)]
    pub(crate) fn set_stopped_kept(&mut self, kept: Duration) {
        self.stopped_kept = kept;
    }

    /// How many entries each per-entity map holds.
    #[cfg(test)]
    pub(crate) fn held(&self) -> Held {
        Held {
            served: self.entities.len(),
            deriver: self.deriver.tracked(),
            retired: self.retired.len(),
            attributed_keys: self.attributed_keys.len(),
            logged_diagnostics: self.logged_diagnostics.len(),
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
    /// will report as unchanged by the key it had before (read at `t0`).
    pub(crate) fn remember_attribution(
        &mut self,
        source_keys: Vec<EntityKey>,
        produced: &Produced,
        t0: Instant,
    ) {
        let attributed = produced.samples.iter().flat_map(|s| &s.entities);
        for (from, e) in source_keys.into_iter().zip(attributed) {
            if e.id.key() == from {
                self.attributed_keys.remove(&from);
            } else {
                self.attributed_keys.insert(from, (e.id.key(), t0));
            }
        }
    }

    /// Derive the tick's samples (read at `t0`) and update what is served. `attributes`: a
    /// stage attributes entities, so a device attributed otherwise is the same GPU.
    pub(crate) fn derive(&mut self, produced: &Produced, t0: Instant, attributes: bool) {
        let mut lost = produced.lost_before.iter().peekable();
        for (i, sample) in produced.samples.iter().enumerate() {
            if lost.next_if(|&&l| l == i).is_some() {
                self.deriver.line_lost();
            }
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
                // as a GPU that stopped. Its deriver state goes too: were the attribution to
                // come back, its next window would span the time the device was counted
                // under the other one, and count those seconds twice.
                let devices: HashSet<_> = d.windows.iter().map(|w| device_of(&w.id)).collect();
                let fresh: HashSet<_> = d.windows.iter().map(|w| w.id.key()).collect();
                let (retired, deriver) = (&mut self.retired, &mut self.deriver);
                self.entities.retain(|k, s| {
                    let keep = fresh.contains(k) || !devices.contains(&device_of(&s.window.id));
                    if !keep {
                        deriver.forget(k);
                        retired.insert(k.clone(), t0);
                    }
                    keep
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
            let key = match self.attributed_keys.get_mut(key) {
                Some((to, seen)) => {
                    *seen = t0;
                    &*to
                }
                None => key,
            };
            if let Some(s) = self.entities.get_mut(key) {
                s.last_seen = t0;
            }
        }
        if !produced.unchanged.is_empty() {
            self.last_data = Some(t0);
        }
        self.forget_gone(t0);
    }

    /// A GPU that stopped (stale) is kept as `truthscale_gpu_up 0` for a while, then
    /// forgotten: its served entry, its deriver state and what was logged of it. What was
    /// logged of entities retired by a change of attribution is forgotten as long after,
    /// swept once per stale period. Nothing goes before it would have stopped being listed.
    fn forget_gone(&mut self, t0: Instant) {
        let limit = self.stale_after + self.stopped_kept;
        let deriver = &mut self.deriver;
        let mut forgot = 0_usize;
        self.entities.retain(|k, s| {
            let keep = t0.saturating_duration_since(s.last_seen) <= limit;
            if !keep {
                deriver.forget(k);
                forgot += 1;
            }
            keep
        });
        let due = self
            .last_sweep
            .is_none_or(|t| t0.saturating_duration_since(t) >= self.stale_after);
        if due {
            self.last_sweep = Some(t0);
            let served = &self.entities;
            self.retired.retain(|k, at| {
                let keep = !served.contains_key(k) && t0.saturating_duration_since(*at) <= limit;
                if !keep && !served.contains_key(k) {
                    deriver.forget(k);
                    forgot += 1;
                }
                keep
            });
            if self.retired.capacity() > 4 * self.retired.len().max(16) {
                self.retired.shrink_to_fit();
            }
        }
        if forgot > 0 {
            let (served, retired) = (&self.entities, &self.retired);
            self.logged_diagnostics
                .retain(|(k, _)| served.contains_key(k) || retired.contains_key(k));
        }
        if !self.attributed_keys.is_empty() {
            let served = &self.entities;
            self.attributed_keys.retain(|_, (to, seen)| {
                served.contains_key(to) && t0.saturating_duration_since(*seen) <= limit
            });
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

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::derive::DeriveConfig;
    use truthscale_core::model::{EntitySample, Field, PodRef, Readings, Sample, Timestamp};

    /// An H100 at index `gpu` with `uuid`, held by `pod` if any, its power past any
    /// datasheet (a diagnostic logged once per entity).
    fn entity(gpu: u32, uuid: &str, pod: Option<&str>, i: u64) -> EntitySample {
        let mut r = Readings::default();
        r.set_value(Field::ReportedUtil, (i % 10) as f64 / 10.0);
        r.set_value(Field::PowerWatts, 1.0e6);
        EntitySample {
            id: EntityId {
                gpu: Some(gpu),
                uuid: Some(uuid.into()),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                pod: pod.map(|p| PodRef {
                    pod: p.into(),
                    namespace: Some("batch".into()),
                    container: None,
                }),
                ..Default::default()
            },
            readings: r,
            ..Default::default()
        }
    }

    fn produced(i: u64, entities: Vec<EntitySample>) -> Produced {
        Produced {
            samples: vec![Sample {
                taken: Timestamp(1_000 * i as i64),
                entities,
            }],
            ..Default::default()
        }
    }

    /// Stale after 5 s, a stopped GPU listed 10 s more.
    fn served() -> Served {
        let mut s = Served::new(
            Deriver::new(DeriveConfig::default(), Some(1.0)),
            Duration::from_secs(5),
        );
        s.set_stopped_kept(Duration::from_secs(10));
        s
    }

    #[test]
    fn pods_churning_on_attributed_gpus_keep_every_map_bounded() {
        // Node mode: 4 GPUs, each given to a new pod every 5 ticks (a second apart), for
        // 2 000 ticks; the stage attributes the source's keys (no pod) to the pod.
        let mut s = served();
        let base = Instant::now();
        for i in 0..2_000_u64 {
            let pod = format!("job-{}", i / 5);
            let bare: Vec<_> = (0..4)
                .map(|g| entity(g, &format!("GPU-{g}"), None, i))
                .collect();
            let keys = Served::source_keys(&produced(i, bare), true);
            let held: Vec<_> = (0..4)
                .map(|g| entity(g, &format!("GPU-{g}"), Some(&pod), i))
                .collect();
            let p = produced(i, held);
            let t0 = base + Duration::from_secs(i);
            s.remember_attribution(keys, &p, t0);
            s.derive(&p, t0, true);
            if i >= 20 {
                // Served: the 4 current holders, the deriver's state of them alone (a
                // holder's goes when it is retired); what was logged of the 4 GPUs' 4
                // previous holders is kept (retired within 15 s, swept every 5 s).
                let want = Held {
                    served: 4,
                    deriver: 4,
                    retired: 16,
                    attributed_keys: 4,
                    logged_diagnostics: 20,
                };
                assert_eq!(s.held(), want, "tick {i}");
            }
        }
        let pods: Vec<_> = s
            .gpus("test")
            .into_iter()
            .map(|g| g.window.id.pod.map(|p| p.pod))
            .collect();
        assert_eq!(pods, vec![Some("job-399".to_string()); 4]);
    }

    /// A source whose own key names a new pod every 5 ticks (dcgm-exporter's pod labels on
    /// a shared GPU) while the GPU is served without one: the keys it no longer names are
    /// forgotten 15 s after it last named them (stale after 5 s, a stopped GPU listed 10 s
    /// more), so 4 are held at any time, not one for each pod ever seen. The one it names
    /// still finds the GPU when reported unchanged.
    #[test]
    fn source_keys_naming_pods_that_left_are_forgotten() {
        let mut s = served();
        let base = Instant::now();
        for i in 0..2_000_u64 {
            let pod = format!("job-{}", i / 5);
            let named = vec![entity(0, "GPU-0", Some(&pod), i)];
            let keys = Served::source_keys(&produced(i, named), true);
            let t0 = base + Duration::from_secs(i);
            if i % 5 == 4 {
                // Unchanged: only the source's key, which finds the GPU served.
                let p = Produced {
                    unchanged: keys,
                    ..Default::default()
                };
                s.derive(&p, t0, true);
            } else {
                let p = produced(i, vec![entity(0, "GPU-0", None, i)]);
                s.remember_attribution(keys, &p, t0);
                s.derive(&p, t0, true);
            }
            assert!(s.gpus("test")[0].up, "tick {i}");
            if i >= 20 {
                assert_eq!(s.held().attributed_keys, 4, "tick {i}");
            }
        }
    }

    /// A line the source lost before a sample (a replay's malformed line) is told to the
    /// deriver before that sample: samples each second from 0 s to 4 s, the one at 3 s
    /// lost, so the window ending at 4 s is 1 s observed and 1 s not (it read as 2 s
    /// observed).
    #[test]
    fn a_lost_line_is_told_before_the_sample_after_it() {
        let mut s = served();
        let mut p = Produced::default();
        for i in [0, 1, 2, 4] {
            p.samples
                .extend(produced(i, vec![entity(0, "GPU-0", None, i)]).samples);
        }
        p.lost_before = vec![3];
        s.derive(&p, Instant::now(), false);
        let totals = s.gpus("test")[0].window.totals;
        assert_eq!(totals.observed_seconds, 4.0);
        assert_eq!(totals.unobserved_seconds, 1.0);
    }

    /// A GPU whose attribution flips every second (a pod's, then none, then the pod's again:
    /// a kubelet answer that comes and goes) is counted one second a second: the
    /// attribution that comes back starts a window of its own, never one spanning the
    /// second the device was counted under the other.
    #[test]
    fn an_attribution_that_comes_back_does_not_count_the_time_between_twice() {
        let mut s = served();
        let base = Instant::now();
        let mut counted = 0.0;
        for i in 0..10_u64 {
            let keys = Served::source_keys(&produced(i, vec![entity(0, "GPU-0", None, i)]), true);
            let pod = (i % 2 == 1).then_some("job-a");
            let p = produced(i, vec![entity(0, "GPU-0", pod, i)]);
            let t0 = base + Duration::from_secs(i);
            s.remember_attribution(keys, &p, t0);
            s.derive(&p, t0, true);
            let served = s.gpus("test");
            assert_eq!(served.len(), 1, "tick {i}: one GPU served");
            assert_eq!(
                served[0].window.id.pod.as_ref().map(|p| p.pod.as_str()),
                pod
            );
            counted += served[0].window.dt_seconds;
        }
        assert_eq!(counted, 10.0, "ten seconds observed in ten");
    }

    #[test]
    fn new_uuids_every_tick_are_forgotten_after_the_stopped_gpus_are_unlisted() {
        // A GPU with a new UUID every tick beside two that stay, for 2 000 ticks; the two
        // are served exactly as by a deriver that never saw the churn.
        let (mut s, mut steady) = (served(), served());
        let base = Instant::now();
        for i in 0..2_000_u64 {
            let stable = vec![entity(0, "GPU-a", None, i), entity(1, "GPU-b", None, i)];
            let mut all = stable.clone();
            all.push(entity(2, &format!("GPU-new-{i}"), None, i));
            let t0 = base + Duration::from_secs(i);
            s.derive(&produced(i, all), t0, false);
            steady.derive(&produced(i, stable), t0, false);
            if i >= 15 {
                // The new GPU of each of the last 16 ticks (stale after 5 s, listed 10 s
                // more), and the two that stay.
                let want = Held {
                    served: 18,
                    deriver: 18,
                    retired: 0,
                    attributed_keys: 0,
                    logged_diagnostics: 18,
                };
                assert_eq!(s.held(), want, "tick {i}");
            }
        }
        let listed: Vec<_> = s
            .gpus("test")
            .into_iter()
            .filter_map(|g| g.window.id.uuid)
            .collect();
        let mut want: Vec<_> = (1984..2000).map(|i| format!("GPU-new-{i}")).collect();
        want.extend(["GPU-a".to_string(), "GPU-b".to_string()]);
        want.sort();
        let mut listed_sorted = listed.clone();
        listed_sorted.sort();
        assert_eq!(listed_sorted, want);
        let stable: Vec<_> = s
            .gpus("test")
            .into_iter()
            .filter(|g| g.window.id.gpu != Some(2))
            .map(|g| g.window)
            .collect();
        let alone: Vec<_> = steady.gpus("test").into_iter().map(|g| g.window).collect();
        assert_eq!(stable, alone);
    }
}
