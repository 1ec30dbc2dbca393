//! `truthscale report`: the fleet analysis of [`truthscale_core::fleet`] over a Prometheus
//! history, and its three renderings: the terminal ([`text`]), a versioned JSON document
//! ([`Document`]) and a self-contained HTML page ([`html`]).
//!
//! The history is read through [`crate::history`] chunk by chunk; each step's sample is
//! derived at once (the core's [`Deriver`]) and kept only as one quantized point per
//! workload (16 bytes), so memory grows with workloads × steps at that rate and not with
//! the raw series.

mod build;
pub(crate) mod focus;
pub(crate) mod format;
mod fractions;
mod funnel;
#[cfg(test)]
mod golden;
pub(crate) mod html;
mod idle;
pub(crate) mod notes;
pub(crate) mod opencost;
mod owners;
pub(crate) mod sections;
pub(crate) mod showback;
mod showback_html;
pub(crate) mod text;
mod timeline;
mod waits;

use crate::history::{Family, FeedStats, History, NO_CLUSTER, SampleKind};
use crate::times::rfc3339;
pub(crate) use build::{Built, Config, ShowbackArgs, build};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use truthscale_core::derive::DeriveConfig;
use truthscale_core::diag::{Diagnostic, DiagnosticKind};
use truthscale_core::fleet::{FleetConfig, FleetInput, FleetReport, Track};
use truthscale_core::model::{EntityId, EntityKey, EntitySample};
use truthscale_core::tracker::{Deriver, EntityWindow, Slot, SlotIndex};

/// The JSON document's schema name.
pub(crate) const SCHEMA: &str = "truthscale.report";
/// The JSON document's schema version: raised when a field changes meaning or goes away
/// (adding a field does not raise it).
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// Where the history came from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Source {
    /// The Prometheus base URL.
    pub prometheus: String,
    /// `dcgm_exporter` (DCGM_FI_* fields with dcgm-exporter's pod labels) or `truthscale`.
    pub family: &'static str,
    /// The `--selector` matchers, without braces (`None`: everything).
    pub selector: Option<String>,
    /// Start of the window, RFC 3339: where the first point's step begins (a point at `t`
    /// stands for the step `(t − step, t]`).
    pub start: String,
    /// End of the window, RFC 3339.
    pub end: String,
    /// Start of the window, milliseconds since the epoch: step `k` of the points stands for
    /// `[start_ms + k·step, start_ms + (k+1)·step)`.
    pub start_ms: i64,
    /// Seconds per step.
    pub step_seconds: f64,
    /// Each step summarises the raw samples scraped in it (`--step` at least twice
    /// `--scrape-interval`): means for use and idle time, the peak of memory used, and the
    /// bands (p50, p90, p99, largest) of each activity ratio for the sizing. `false`: one
    /// sample per step.
    pub summarized_steps: bool,
    /// Readings that were not measurements (sentinels, NaN, values out of their physical
    /// range), left blank and never counted, by kind (`sentinel`, `non_finite`,
    /// `out_of_range`).
    pub blanked_readings: BTreeMap<&'static str, u64>,
    /// Ratios a little over 1 (up to 1.5, rounding in the source) read as 1.
    pub clamped_ratios: u64,
    /// Steps of `step_seconds` per point of the analysis (`--max-points`): 1, or more when
    /// the grid was finer than the points kept per workload; the analysis' own
    /// `step_seconds` is then this many times the source's.
    pub steps_per_point: usize,
    /// Summarised steps whose p99 was impossible: a raw sample in them was, and their
    /// means averaged it in, so the step is unknown for that workload.
    pub impossible_steps: u64,
}

/// The whole report as `--json` writes it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Document {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Where the history came from.
    pub source: Source,
    /// Where the fleet's GPU-hours went: total → healthy → allocated → active → effective,
    /// each loss named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub funnel: Option<truthscale_core::showback::Funnel>,
    /// The analysis.
    #[serde(flatten)]
    pub fleet: FleetReport,
    /// GPU-hours by group (`--by`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub showback: Option<truthscale_core::showback::Showback>,
    /// Each cluster sized on its own (`--cluster-label`): a GPU is never shared across
    /// clusters there, while the fleet-wide figures above pool them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<ClusterReport>>,
}

/// One cluster's sizing, from the analysis of its workloads alone.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ClusterReport {
    /// The value of `--cluster-label` (`(no cluster)` for series without it).
    pub cluster: String,
    /// Workloads analysed.
    pub workloads: usize,
    /// GPUs holding a workload.
    pub allocated_gpus: Option<truthscale_core::fleet::Summary>,
    /// GPUs with a reading.
    pub gpus_reporting: Option<truthscale_core::fleet::Summary>,
    /// The pooled lower bound, GPUs.
    pub pooled_lower_bound_gpus: Option<u64>,
    /// GPUs needed packed (first-fit decreasing), excluded workloads' GPUs included.
    pub packed_gpus: Option<u64>,
    /// GPUs the packing frees against the peak allocation (or GPUs reporting).
    pub gpus_freed: Option<u64>,
    /// Idle allocated GPU-hours of every workload whose idleness was measured, listed or
    /// not (as the fleet's `idle.idle_gpu_hours`); `None` where no workload's was.
    pub idle_gpu_hours: Option<f64>,
    /// The cluster's own notes.
    pub notes: Vec<String>,
}

/// The cluster of a track read with `--cluster-label`: its node is `CLUSTER/NODE`.
fn cluster_of_track(t: &Track) -> &str {
    t.gpu.split('/').next().unwrap_or(NO_CLUSTER)
}

/// Each cluster's workloads analysed on their own, in cluster order.
#[must_use]
pub(crate) fn by_cluster(input: &FleetInput, cfg: &FleetConfig) -> Vec<ClusterReport> {
    let mut parts: std::collections::BTreeMap<&str, Vec<Track>> = std::collections::BTreeMap::new();
    for t in &input.tracks {
        parts
            .entry(cluster_of_track(t))
            .or_default()
            .push(t.clone());
    }
    parts
        .into_iter()
        .map(|(cluster, tracks)| {
            // The holders of this cluster's GPUs (their keys are the tracks').
            let held = tracks
                .iter()
                .filter_map(|t| input.held.get_key_value(&t.gpu))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let part = FleetInput {
                step_seconds: input.step_seconds,
                steps: input.steps,
                tracks,
                held,
                step_bands: input.step_bands,
            };
            let r = truthscale_core::fleet::analyze(&part, cfg);
            ClusterReport {
                cluster: cluster.to_owned(),
                workloads: r.workloads,
                allocated_gpus: r.sizing.allocated_gpus,
                gpus_reporting: r.sizing.gpus_reporting,
                pooled_lower_bound_gpus: r.sizing.pooled_lower_bound.as_ref().map(|b| b.gpus),
                packed_gpus: r.sizing.packing.as_ref().map(|p| p.gpus),
                gpus_freed: r.savings.as_ref().map(|s| s.gpus_freed),
                idle_gpu_hours: r.idle.idle_gpu_hours,
                notes: r.notes,
            }
        })
        .collect()
}

/// The physical GPU an entity is on: `node/uuid`, or `node/gpu N` without a UUID.
fn gpu_key(id: &EntityId) -> String {
    let node = id.node.as_deref().unwrap_or("?");
    match (&id.uuid, id.gpu) {
        (Some(u), _) => format!("{node}/{u}"),
        (None, Some(g)) => format!("{node}/gpu {g}"),
        (None, None) => format!("{node}/gpu ?"),
    }
}

/// `namespace/pod`, or the pod alone.
fn pod_name(id: &EntityId) -> Option<String> {
    id.pod.as_ref().map(|p| match &p.namespace {
        Some(ns) => format!("{ns}/{}", p.pod),
        None => p.pod.clone(),
    })
}

/// Where `history` comes from, before anything is read: no reading blanked yet, one step
/// per point.
fn source_of(history: &History) -> Source {
    let range = history.range();
    Source {
        prometheus: history.base_url().to_owned(),
        family: match history.family() {
            Family::DcgmExporter => "dcgm_exporter",
            Family::Truthscale => "truthscale",
        },
        selector: Some(history.matchers().to_owned()).filter(|m| !m.is_empty()),
        start: rfc3339(range.covered_from()),
        end: rfc3339(range.end),
        start_ms: range.covered_from(),
        step_seconds: history.step_seconds(),
        summarized_steps: history.summarizes(),
        blanked_readings: BTreeMap::new(),
        clamped_ratios: 0,
        steps_per_point: 1,
        impossible_steps: 0,
    }
}

/// Steps of `range` combined into one point, so that each workload keeps at most
/// `max_points` points, whatever the step.
pub(crate) fn steps_per_point(range: crate::history::Range, max_points: u64) -> usize {
    let steps = usize::try_from(range.points()).unwrap_or(0);
    steps
        .div_ceil(usize::try_from(max_points.max(1)).unwrap_or(usize::MAX))
        .max(1)
}

/// Read the history and build the fleet's tracks: each step's sample goes through the
/// deriver, and each entity's window becomes one point of its track.
///
/// # Errors
/// As [`History::feed_stats`].
pub(crate) fn collect(
    history: &mut History,
    max_points: u64,
) -> anyhow::Result<(FleetInput, Source, FeedStats)> {
    history.read_peaks();
    // The holder pods' CPU and I/O pressure from cAdvisor, for the starved windows' causes.
    history.read_holders();
    let step_bands = history.step_bands();
    let range = history.range();
    let step_seconds = history.step_seconds();
    let mut source = source_of(history);
    let steps = usize::try_from(range.points()).unwrap_or(0);
    let per = steps_per_point(range, max_points);
    source.steps_per_point = per;
    let mut deriver = Deriver::new(DeriveConfig::default(), Some(step_seconds));
    // The report reads no observed ceilings.
    deriver.set_ceilings(false);
    let mut diagnostics = Vec::new();
    let mut found = Found {
        per,
        ..Found::default()
    };
    let mut tracks: Vec<Track> = Vec::new();
    let stats = history.feed_stats(|sample, kind| {
        let Ok(step) = usize::try_from((sample.taken.0 - range.start) / range.step) else {
            return;
        };
        if step >= steps {
            return;
        }
        if let SampleKind::Peak(band) = kind {
            observe_band(
                &sample.entities,
                step,
                band,
                &mut found,
                &mut tracks,
                &mut source,
                &mut diagnostics,
            );
            return;
        }
        // Each window as it is derived, not a copy.
        let mut j = 0;
        let at = (step, sample.taken.0);
        deriver.observe_each_slot(sample, &mut diagnostics, |slot, w| {
            found.observe((slot, j), w, at, &mut tracks);
            j += 1;
        });
        count_blanks(&mut source, &mut diagnostics);
    })?;
    count_refused(&stats, &mut source);
    for t in &mut tracks {
        t.finish();
    }
    // In the order of their GPUs and pods, whatever order the answers came in (a query
    // split for a server limit brings its series in another).
    tracks.sort_by(|a, b| (&a.gpu, &a.pod).cmp(&(&b.gpu, &b.pod)));
    Ok((
        FleetInput {
            step_seconds: step_seconds * per as f64,
            steps: steps.div_ceil(per),
            tracks,
            held: Default::default(),
            step_bands,
        },
        source,
        stats,
    ))
}

/// The readings the answers held that were left blank where the samples were built, among
/// the source's blanked readings: values not finite, DCGM's blank sentinels, and readings no
/// GPU gives (negative free memory, say: out of the physical range, as the derivation's
/// own are).
fn count_refused(stats: &FeedStats, source: &mut Source) {
    for (kind, n) in [
        (DiagnosticKind::NonFinite, stats.non_finite),
        (DiagnosticKind::Sentinel, stats.sentinels),
        (DiagnosticKind::OutOfRange, stats.impossible),
    ] {
        if n > 0 {
            *source.blanked_readings.entry(kind.as_str()).or_default() += n;
        }
    }
}

/// A coarse step's band samples (`band`: which quantile of the raw samples in `step`), each
/// entity's observed on its track (never a new one); their blanks counted into `source`.
fn observe_band(
    entities: &[EntitySample],
    step: usize,
    band: usize,
    found: &mut Found,
    tracks: &mut [Track],
    source: &mut Source,
    diagnostics: &mut Vec<Diagnostic>,
) {
    // The band samples (a coarse step's quantiles) are the same steps again, not later ones:
    // derived without the tracker's state.
    let peak_config = DeriveConfig::default();
    // A raw sample that is no measurement is in the top band (the largest) whatever the
    // others, and in a band below where the answer's reading left a sentinel blank: a step
    // is counted once, by the first band that tells it. The blanks are counted from the top
    // band's alone (each band is the same raw samples again).
    let top = band + 1 == truthscale_core::fleet::BANDS;
    for (j, e) in entities.iter().enumerate() {
        if let Some(i) = found.track(j, &e.id, None)
            && tracks[i].observe_peak_sample(step, band, e, &peak_config, diagnostics)
        {
            source.impossible_steps += 1;
        }
        if !top {
            diagnostics.clear();
        }
    }
    count_blanks(source, diagnostics);
}

/// Count the readings `diagnostics` blanked by kind, and the ratios it clamped, into
/// `source`; and empty it.
fn count_blanks(source: &mut Source, diagnostics: &mut Vec<Diagnostic>) {
    for d in diagnostics.drain(..) {
        match d.kind {
            DiagnosticKind::OutOfRange if d.detail.ends_with("clamped to 1") => {
                source.clamped_ratios += 1;
            }
            DiagnosticKind::Sentinel | DiagnosticKind::NonFinite | DiagnosticKind::OutOfRange => {
                *source.blanked_readings.entry(d.kind.as_str()).or_default() += 1;
            }
            _ => {}
        }
    }
}

/// The track of each entity, found without building its key when it is where it was in the
/// previous sample (the samples of a chunk list their entities in the same order).
#[derive(Default)]
struct Found {
    /// Steps per point of the tracks it makes.
    per: usize,
    index: HashMap<EntityKey, usize>,
    keys: Vec<EntityKey>,
    /// The track of the entity at each place of the previous sample.
    last: Vec<usize>,
    /// The track of each of the deriver's slots.
    by_slot: SlotIndex,
    /// The device (a GPU, or a MIG instance) each track reads, by index into `counted_at`:
    /// a time-sliced GPU's holders' tracks read one device.
    device_of: Vec<usize>,
    devices: HashMap<DeviceKey, usize>,
    /// The time (ms) of the sample whose window of each device was counted last.
    counted_at: Vec<i64>,
}

/// A device: its GPU ([`gpu_key`]) and, for a MIG instance, its GPU and compute instance.
type DeviceKey = (String, Option<(u32, Option<u32>)>);

impl Found {
    /// Observe window `w` of the deriver's `slot` (the `j`-th of its sample) on its track,
    /// at `step` of the sample taken at `taken` (ms); as a copy where another track counted
    /// the same device's window of that sample.
    fn observe(
        &mut self,
        (slot, j): (Slot, usize),
        w: &EntityWindow,
        (step, taken): (usize, i64),
        tracks: &mut Vec<Track>,
    ) {
        if let Some(i) = self.track_of_slot(slot, j, &w.id, tracks) {
            if self.copy(i, taken) {
                tracks[i].observe_copy(step, w);
            } else {
                tracks[i].observe(step, w);
            }
        }
    }

    /// The track of the window of the deriver's `slot`, the `j`-th of its sample, `id`: the
    /// one found for the slot before, else looked up (a new one in `tracks`).
    fn track_of_slot(
        &mut self,
        slot: Slot,
        j: usize,
        id: &EntityId,
        tracks: &mut Vec<Track>,
    ) -> Option<usize> {
        if let Some(i) = *self.by_slot.entry(slot) {
            return Some(i);
        }
        let i = self.track(j, id, Some(tracks))?;
        *self.by_slot.entry(slot) = Some(i);
        Some(i)
    }

    /// The device of the track just made for `id`.
    fn add_device(&mut self, id: &EntityId) {
        let mig = id
            .mig
            .as_ref()
            .map(|m| (m.gpu_instance, m.compute_instance));
        let next = self.counted_at.len();
        let device = *self.devices.entry((gpu_key(id), mig)).or_insert(next);
        if device == next {
            self.counted_at.push(i64::MIN);
        }
        self.device_of.push(device);
    }

    /// Whether the window at `taken` of track `i`'s device was counted already (another
    /// holder's track read it at the same time); counted now when not.
    fn copy(&mut self, i: usize, taken: i64) -> bool {
        let Some(at) = self
            .device_of
            .get(i)
            .and_then(|&d| self.counted_at.get_mut(d))
        else {
            return false;
        };
        let copy = *at == taken;
        *at = taken;
        copy
    }

    /// The track of the `j`-th entity of a sample, `id`; a new one in `tracks` when given
    /// (else `None` for an entity not seen).
    fn track(&mut self, j: usize, id: &EntityId, tracks: Option<&mut Vec<Track>>) -> Option<usize> {
        let i = match self.last.get(j) {
            Some(&i) if self.keys[i].is_key_of(id) => i,
            _ => {
                let key = id.key();
                match (self.index.get(&key), tracks) {
                    (Some(&i), _) => i,
                    (None, Some(tracks)) => {
                        tracks.push(
                            Track::new(pod_name(id), gpu_key(id)).with_steps_per_point(self.per),
                        );
                        self.add_device(id);
                        self.keys.push(key.clone());
                        self.index.insert(key, tracks.len() - 1);
                        tracks.len() - 1
                    }
                    (None, None) => return None,
                }
            }
        };
        if let Some(slot) = self.last.get_mut(j) {
            *slot = i;
        } else {
            self.last.push(i);
        }
        Some(i)
    }
}

/// Analyze what [`collect`] read.
#[must_use]
pub(crate) fn document(input: &FleetInput, source: Source, cfg: &FleetConfig) -> Document {
    Document {
        schema: SCHEMA,
        schema_version: SCHEMA_VERSION,
        source,
        funnel: None,
        fleet: truthscale_core::fleet::analyze(input, cfg),
        showback: None,
        clusters: None,
    }
}

/// How each step was read, after its length: nothing for one sample per step.
pub(crate) fn step_reading(s: &Source) -> String {
    let mut out = String::new();
    if s.summarized_steps {
        out.push_str(" (each step summarises the raw samples in it)");
    }
    if s.steps_per_point > 1 {
        out.push_str(&format!(", {} steps per point", s.steps_per_point));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::model::PodRef;

    #[test]
    fn names_of_gpus_and_pods() {
        let mut id = EntityId {
            gpu: Some(3),
            node: Some("n1".into()),
            ..EntityId::default()
        };
        assert_eq!(gpu_key(&id), "n1/gpu 3");
        assert_eq!(pod_name(&id), None);
        id.uuid = Some("GPU-x".into());
        id.pod = Some(PodRef {
            pod: "p".into(),
            namespace: Some("ns".into()),
            container: None,
        });
        assert_eq!(gpu_key(&id), "n1/GPU-x");
        assert_eq!(pod_name(&id).as_deref(), Some("ns/p"));
    }
}
