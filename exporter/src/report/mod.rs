//! `truthscale report`: the fleet analysis of [`truthscale_core::fleet`] over a Prometheus
//! history, and its three renderings: the terminal ([`text`]), a versioned JSON document
//! ([`Document`]) and a self-contained HTML page ([`html`]).
//!
//! The history is read through [`crate::history`] chunk by chunk; each step's sample is
//! derived at once (the core's [`Deriver`]) and kept only as one quantized point per
//! workload (16 bytes), so memory grows with workloads × steps at that rate and not with
//! the raw series.

pub(crate) mod html;
pub(crate) mod showback;
pub(crate) mod text;

use crate::history::{Family, FeedStats, History, rfc3339};
use serde::Serialize;
use std::collections::HashMap;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::fleet::{FleetConfig, FleetInput, FleetReport, Track};
use truthscale_core::model::{EntityId, EntityKey};
use truthscale_core::tracker::Deriver;

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
    /// First step, RFC 3339.
    pub start: String,
    /// End of the window, RFC 3339.
    pub end: String,
    /// First step, milliseconds since the epoch.
    pub start_ms: i64,
    /// Seconds per step.
    pub step_seconds: f64,
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
    /// The analysis.
    #[serde(flatten)]
    pub fleet: FleetReport,
    /// GPU-hours by group (`--by`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub showback: Option<truthscale_core::showback::Showback>,
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

/// Read the history and build the fleet's tracks: each step's sample goes through the
/// deriver, and each entity's window becomes one point of its track.
///
/// # Errors
/// As [`History::feed_stats`].
pub(crate) fn collect(history: History) -> anyhow::Result<(FleetInput, Source, FeedStats)> {
    let range = history.range();
    let step_seconds = history.step_seconds();
    let source = Source {
        prometheus: history.base_url().to_owned(),
        family: match history.family() {
            Family::DcgmExporter => "dcgm_exporter",
            Family::Truthscale => "truthscale",
        },
        selector: Some(history.matchers().to_owned()).filter(|m| !m.is_empty()),
        start: rfc3339(range.start),
        end: rfc3339(range.end),
        start_ms: range.start,
        step_seconds,
    };
    let steps = usize::try_from(range.points()).unwrap_or(0);
    let mut deriver = Deriver::new(DeriveConfig::default(), Some(step_seconds));
    let mut index: HashMap<EntityKey, usize> = HashMap::new();
    let mut tracks: Vec<Track> = Vec::new();
    let stats = history.feed_stats(|sample| {
        let Ok(step) = usize::try_from((sample.taken.0 - range.start) / range.step) else {
            return;
        };
        if step >= steps {
            return;
        }
        let d = deriver.observe(sample);
        for w in &d.windows {
            let i = *index.entry(w.id.key()).or_insert_with(|| {
                tracks.push(Track::new(pod_name(&w.id), gpu_key(&w.id)));
                tracks.len() - 1
            });
            tracks[i].observe(step, w);
        }
    })?;
    Ok((
        FleetInput {
            step_seconds,
            steps,
            tracks,
        },
        source,
        stats,
    ))
}

/// Analyze what [`collect`] read.
#[must_use]
pub(crate) fn document(input: &FleetInput, source: Source, cfg: &FleetConfig) -> Document {
    Document {
        schema: SCHEMA,
        schema_version: SCHEMA_VERSION,
        source,
        fleet: truthscale_core::fleet::analyze(input, cfg),
        showback: None,
    }
}

/// A ratio as a percentage with one decimal, or `unknown`.
pub(crate) fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "unknown".to_owned(), |v| format!("{:.1}%", 100.0 * v))
}

/// Bytes as GiB with one decimal, or `unknown`.
pub(crate) fn gib(x: Option<f64>) -> String {
    x.map_or_else(
        || "unknown".to_owned(),
        |v| format!("{:.1} GiB", v / 1_073_741_824.0),
    )
}

/// A GPU-equivalent count with two decimals, or `unknown`.
pub(crate) fn gpus(x: Option<f64>) -> String {
    x.map_or_else(|| "unknown".to_owned(), |v| format!("{v:.2}"))
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
        assert_eq!(pct(None), "unknown");
        assert_eq!(pct(Some(0.25)), "25.0%");
        assert_eq!(gib(Some(32_212_254_720.0)), "30.0 GiB");
    }
}
