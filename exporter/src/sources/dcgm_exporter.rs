//! A live dcgm-exporter as the counter source: scrape its `/metrics` each tick.
//!
//! - **Scope.** Only this pod's GPUs are kept: configured UUIDs or indices when given; else
//!   the entities dcgm-exporter attributes to this pod (its `pod`/`namespace` labels); else
//!   the UUIDs in `NVIDIA_VISIBLE_DEVICES`; else every GPU of the node (logged once).
//! - **Repeats.** dcgm-exporter repeats a value for its whole collection interval
//!   (`DCGM_EXPORTER_INTERVAL`, 30 s by default) and its text has no timestamps: each scrape
//!   is stamped with the time it was read, and every scrape is fed, repeated or not. A
//!   repeated reading is still observed time (an idle MIG slice whose readings never change
//!   accrues idle seconds at wall-clock rate); the declared update interval is the sampling
//!   interval, so only scrapes missed for `derive.max_gap_intervals` of them make a gap.
//!   The energy counter, which moves once per collection, gives power over the time since
//!   it last moved (never 0 W in between).
//! - **Bad values.** Sentinels are counted (`kind="sentinel"`) and never exported as data;
//!   scrape failures are counted by kind and the source goes stale.

use super::{BuildError, Context, Produced, Source, SourceError, SourceSettings};
use crate::setting::Invalid;
use crate::times::unix_ms;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};
use truthscale_core::model::{EntityId, EntityKey, EntitySample, Sample, SourceKind, Timestamp};
use truthscale_core::parse::DcgmTextParser;
use truthscale_core::parse::dcgm_text::Refused;
use truthscale_core::parse::names::{MAX_UNREAD_NAMES, Units, Unread};

/// Which GPUs belong to this pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Explicit UUIDs.
    Uuids(Vec<String>),
    /// Explicit GPU indices.
    Indices(Vec<u32>),
    /// dcgm-exporter's pod attribution for this pod (falls back to `visible` when the scrape
    /// carries no attribution).
    Pod {
        /// Pod name.
        pod: String,
        /// Namespace, when known.
        namespace: Option<String>,
        /// `NVIDIA_VISIBLE_DEVICES` UUIDs, as the fallback.
        visible: Vec<String>,
    },
    /// Every GPU the exporter reports.
    All,
}

impl Scope {
    /// Choose the scope from configuration and environment.
    #[must_use]
    pub(crate) fn choose(
        uuids: &[String],
        indices: &[u32],
        pod: Option<&str>,
        namespace: Option<&str>,
        visible_devices: Option<&str>,
    ) -> Scope {
        let visible: Vec<String> = visible_devices
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| s.starts_with("GPU-") || s.starts_with("MIG-"))
            .map(str::to_string)
            .collect();
        if !uuids.is_empty() {
            Scope::Uuids(uuids.to_vec())
        } else if !indices.is_empty() {
            Scope::Indices(indices.to_vec())
        } else if let Some(pod) = pod {
            Scope::Pod {
                pod: pod.to_string(),
                namespace: namespace.map(str::to_string),
                visible,
            }
        } else if !visible.is_empty() {
            Scope::Uuids(visible)
        } else {
            Scope::All
        }
    }

    fn keeps(&self, e: &EntitySample, attributed: bool) -> bool {
        let uuid = e.id.uuid.as_deref().unwrap_or("");
        match self {
            Scope::Uuids(u) => u.iter().any(|x| x == uuid),
            Scope::Indices(i) => e.id.gpu.is_some_and(|g| i.contains(&g)),
            Scope::Pod {
                pod,
                namespace,
                visible,
            } => {
                if attributed {
                    e.id.pod.as_ref().is_some_and(|p| {
                        &p.pod == pod
                            && (namespace.is_none() || p.namespace.as_ref() == namespace.as_ref())
                    })
                } else if visible.is_empty() {
                    true
                } else {
                    visible.iter().any(|x| x == uuid)
                }
            }
            Scope::All => true,
        }
    }
}

/// Scrapes dcgm-exporter.
#[derive(Debug)]
pub struct DcgmExporterSource {
    url: String,
    /// The URL as messages and logs show it: a user and password in it are never shown.
    shown: String,
    agent: ureq::Agent,
    scope: Scope,
    /// The sampling interval (the source's declared update interval).
    interval: Duration,
    warned_scope: bool,
    /// Whether the scrapes since the last that kept a GPU were said to keep none.
    warned_empty: bool,
    /// The families not read that were already counted and named (at most
    /// [`MAX_UNREAD_NAMES`]).
    unread_seen: BTreeSet<String>,
    /// The units decided for the answer's percent-or-ratio families, kept from one scrape's
    /// parser to the next: an idle scrape's whole values are read in the unit an earlier
    /// one decided.
    units: Units,
    /// The node each GPU is labelled with.
    nodes: Nodes,
}

/// The node a GPU is labelled with: this node's name where it is known (`NODE_NAME`,
/// `identity.node`: the GPUs a node agent or sidecar reads are its node's, as its kubelet's
/// attribution takes them to be), else the first `Hostname` dcgm-exporter gave the GPU (by
/// UUID). dcgm-exporter labels GPUs with its own host name where `NODE_NAME` is not in its
/// environment: in a pod, the pod's name, which a restart changes; read as it is, a GPU would
/// become a second one on another "node", its counts split between the two.
#[derive(Debug, Default)]
struct Nodes {
    /// This node's name, when known.
    own: Option<String>,
    /// Each GPU's first node, by UUID (at most [`Nodes::MAX`]).
    first: HashMap<String, Option<String>>,
    /// Whether a `Hostname` not the node's was logged.
    warned: bool,
}

impl Nodes {
    /// GPUs whose first node is kept: past it, a new GPU's node is read as it is.
    const MAX: usize = 1 << 16;

    /// Label `id` with its node; say once where that is not the `Hostname` read.
    fn place(&mut self, url: &str, id: &mut EntityId) {
        let read = id.node.take();
        id.node = match (&self.own, &id.uuid) {
            (Some(own), _) => Some(own.clone()),
            (None, Some(uuid)) if self.first.len() < Self::MAX || self.first.contains_key(uuid) => {
                self.first
                    .entry(uuid.clone())
                    .or_insert_with(|| read.clone())
                    .clone()
            }
            (None, _) => read.clone(),
        };
        if read.is_some() && id.node != read && !std::mem::replace(&mut self.warned, true) {
            let (read, node) = (
                read.unwrap_or_default(),
                id.node.clone().unwrap_or_default(),
            );
            tracing::warn!(
                url,
                uuid = id.uuid.as_deref().unwrap_or_default(),
                hostname = %read,
                node = %node,
                "dcgm-exporter labels a GPU with a Hostname that is not its node's (its pod's name, where dcgm-exporter runs without NODE_NAME, changes when it restarts): the GPU is labelled with {}, so that its counts are not split. Set NODE_NAME in dcgm-exporter's environment (Downward API spec.nodeName) to have it name the node. Said once.",
                if self.own.is_some() { "this node's name (NODE_NAME)" } else { "the first Hostname it had" }
            );
        }
    }
}

impl DcgmExporterSource {
    /// Say, once until a scrape keeps a GPU again, that dcgm-exporter reported `reported`
    /// GPUs and this pod's scope kept none of them: the source then has no sample, goes
    /// stale, and the log says why and what to set.
    fn warn_when_out_of_scope(&mut self, reported: usize, kept: usize) {
        if kept > 0 || reported == 0 {
            self.warned_empty = false;
            return;
        }
        if std::mem::replace(&mut self.warned_empty, true) {
            return;
        }
        tracing::warn!(
            url = %self.shown,
            gpus = reported,
            scope = ?self.scope,
            "None of the GPUs dcgm-exporter reports is in this pod's scope, so none is exported and the source goes stale. Name them with source.gpu_uuids or source.gpu_indices, or run dcgm-exporter with pod mapping (-k). dcgm-exporter labels a MIG instance with its parent GPU's UUID, so a MIG-… UUID in NVIDIA_VISIBLE_DEVICES matches none: name the parent GPU-… UUID."
        );
    }

    /// Name, once each, the families of the answer truthscale does not read, and count
    /// every blank reading and every reading refused for an ambiguous unit.
    fn count_unread(&mut self, unread: &Unread, errors: &mut Vec<SourceError>) {
        let mut new = Vec::new();
        for f in &unread.families {
            if self.unread_seen.len() < MAX_UNREAD_NAMES && self.unread_seen.insert(f.clone()) {
                errors.push(SourceError::UnreadFamily(format!("{}: {f}", self.shown)));
                new.push(f.as_str());
            }
        }
        if !new.is_empty() {
            tracing::info!(
                url = %self.shown,
                families = %new.join(", "),
                "dcgm-exporter families truthscale does not read (each counted once, kind=\"unread_family\"); see docs/dcgm-compatibility.md"
            );
        }
        // Blanks of the families read (DCGM's sentinels by the field's type, values that
        // are no finite number), never those of families not read (a Go runtime's
        // `go_gc_gomemlimit_bytes` at 2^63 is no DCGM blank).
        for (f, n) in unread.sentinels.iter().chain(&unread.non_finite) {
            for _ in 0..*n {
                errors.push(SourceError::Sentinel(format!("{}: {f}", self.shown)));
            }
        }
        for (f, n) in &unread.impossible {
            for _ in 0..*n {
                errors.push(SourceError::Impossible(format!("{}: {f}", self.shown)));
            }
        }
        super::refused_readings(&self.shown, unread, errors);
    }
}

/// `kind = "dcgm-exporter"`: a live dcgm-exporter, this pod's GPUs only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DcgmExporterConfig {
    /// Its `/metrics` URL; unset: `http://$NODE_IP:9400/metrics`, else localhost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Timeout of one scrape, at most the stale period's whole intervals less half an
    /// interval. Empty: that, at most 5 s.
    pub scrape_timeout: String,
    /// Keep only these GPU UUIDs. Empty: the GPUs dcgm-exporter attributes to this pod,
    /// else the UUIDs in `NVIDIA_VISIBLE_DEVICES`, else all.
    pub gpu_uuids: Vec<String>,
    /// Keep only these GPU indices.
    pub gpu_indices: Vec<u32>,
}

/// The longest scrape when `source.scrape_timeout` is not set (and the stale period allows
/// a longer one).
const DEFAULT_SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

impl DcgmExporterConfig {
    /// `source.scrape_timeout` as set; `None` when it is not.
    fn timeout(&self) -> Result<Option<Duration>, Invalid> {
        if self.scrape_timeout.trim().is_empty() {
            return Ok(None);
        }
        crate::setting::duration(
            "source.scrape_timeout",
            &self.scrape_timeout,
            Duration::from_millis(10),
            Duration::from_secs(300),
        )
        .map(Some)
    }

    /// The timeout of one scrape: as set, else [`super::longest_read`], at most
    /// [`DEFAULT_SCRAPE_TIMEOUT`]. A scrape that hangs then ends, as a `timeout`, before the
    /// tick is served stale: a hung dcgm-exporter reads as down, never as stale and fresh
    /// by turns.
    fn effective_timeout(
        &self,
        interval: Duration,
        stale_after: Duration,
    ) -> Result<Duration, Invalid> {
        Ok(self
            .timeout()?
            .unwrap_or(DEFAULT_SCRAPE_TIMEOUT.min(super::longest_read(interval, stale_after))))
    }
}

impl SourceSettings for DcgmExporterConfig {
    const ARG: Option<&'static str> = Some("source.url");

    fn check(&self) -> Result<(), Invalid> {
        if let Some(u) = &self.url {
            let shown = crate::client::redact_userinfo(u);
            crate::setting::http_url("source.url", u, &shown)?;
        }
        self.timeout()?;
        if let Some(u) = self
            .gpu_uuids
            .iter()
            .find(|u| u.is_empty() || u.trim() != u.as_str())
        {
            return Err(Invalid::new(
                "source.gpu_uuids",
                format!(
                    "{u:?}: a UUID is written without spaces around it, as dcgm-exporter labels it (GPU-…)"
                ),
            ));
        }
        for i in &self.gpu_indices {
            crate::setting::GPU_INDICES.check(*i)?;
        }
        Ok(())
    }

    /// A scrape must end within [`super::longest_read`]: one that hangs longer would have
    /// each tick served stale, then fresh, by turns (and `/readyz` flap with it).
    fn check_within(&self, interval: Duration, stale_after: Duration) -> Result<(), Invalid> {
        let longest = super::longest_read(interval, stale_after);
        match self.timeout()? {
            Some(t) if t > longest => Err(Invalid::new(
                "source.scrape_timeout",
                format!(
                    "{} is longer than {} (the stale period {}, source.stale_after, in whole intervals of {}, less half an interval): a scrape that hangs that long would be served stale, then fresh, by turns; set it to at most {}, or leave it unset",
                    humantime::format_duration(t),
                    humantime::format_duration(longest),
                    humantime::format_duration(stale_after),
                    humantime::format_duration(interval),
                    humantime::format_duration(longest),
                ),
            )),
            _ => Ok(()),
        }
    }

    fn build(&self, context: &Context, _now: SystemTime) -> Result<Box<dyn Source>, BuildError> {
        self.check().map_err(BuildError::from)?;
        let url = self
            .url
            .clone()
            .unwrap_or_else(|| super::default_dcgm_url(context.node_ip.as_deref()));
        let scope = Scope::choose(
            &self.gpu_uuids,
            &self.gpu_indices,
            context.pod.as_deref(),
            context.namespace.as_deref(),
            context.nvidia_visible_devices.as_deref(),
        );
        tracing::info!(url = %crate::client::redact_userinfo(&url), scope = ?scope, "Reading dcgm-exporter.");
        Ok(Box::new(
            DcgmExporterSource::new(
                &url,
                self.effective_timeout(context.interval, context.stale_after)
                    .map_err(BuildError::from)?,
                context.interval,
                scope,
            )
            .on_node(context.node.clone()),
        ))
    }
}

impl DcgmExporterSource {
    /// A source reading `url` with `timeout` per scrape, every `interval`.
    #[must_use]
    pub fn new(
        url: &str,
        timeout: Duration,
        interval: Duration,
        scope: Scope,
    ) -> DcgmExporterSource {
        let agent = crate::client::agent(timeout);
        DcgmExporterSource {
            url: url.to_string(),
            shown: crate::client::redact_userinfo(url),
            agent,
            scope,
            interval,
            warned_scope: false,
            warned_empty: false,
            unread_seen: BTreeSet::new(),
            units: Units::default(),
            nodes: Nodes::default(),
        }
    }

    /// Label every GPU with `node`, this node's name (`NODE_NAME`). Without it, a GPU keeps
    /// the first `Hostname` dcgm-exporter gave it (by UUID): dcgm-exporter without `NODE_NAME`
    /// labels GPUs with its pod's name, which a restart changes.
    #[must_use]
    pub fn on_node(mut self, node: Option<String>) -> DcgmExporterSource {
        self.nodes.own = node.filter(|n| !n.is_empty());
        self
    }

    /// What the parser left out of one answer: over its caps (`over_limit`), and series the
    /// answer repeated (no exposition does: a `parse` error, the first reading kept).
    fn count_refused(&self, refused: Refused, errors: &mut Vec<SourceError>) {
        errors.extend(
            crate::bounds::LeftOut::of_scrape(refused)
                .message(&self.shown)
                .map(SourceError::OverLimit),
        );
        if refused.repeated > 0 {
            errors.push(SourceError::Parse(format!(
                "{}: {} lines repeat a series already in the answer; the first reading of each was kept",
                self.shown, refused.repeated
            )));
        }
    }

    /// Read one answer, line by line as it arrives (never held whole: memory is the
    /// parser's, within its caps, whatever the body's size), into `parser`'s samples; and
    /// the bytes read.
    fn read(
        &self,
        parser: &mut DcgmTextParser,
        samples: &mut Vec<Sample>,
    ) -> Result<(u64, usize), SourceError> {
        use crate::client::{MAX_METRICS_BODY, for_each_line};
        let mut data_lines = 0usize;
        let mut failed = None;
        let bytes = for_each_line(
            &self.agent,
            &self.url,
            "text/plain",
            MAX_METRICS_BODY,
            |line| {
                let t = line.trim();
                if !t.is_empty() && !t.starts_with('#') {
                    data_lines += 1;
                }
                match parser.push_line(line) {
                    Ok(Some(s)) => samples.push(s),
                    Ok(None) => {}
                    Err(e) => {
                        // A body that does not parse is not data: the whole scrape is dropped.
                        failed = Some(SourceError::Parse(e.to_string()));
                        return false;
                    }
                }
                true
            },
        )
        .map_err(SourceError::from)?;
        match failed {
            Some(e) => Err(e),
            None => Ok((bytes, data_lines)),
        }
    }
}

impl Source for DcgmExporterSource {
    fn name(&self) -> &'static str {
        SourceKind::DcgmExporter.as_str()
    }

    /// The sampling interval: each scrape is read at its own time.
    fn update_interval(&self) -> Option<Duration> {
        Some(self.interval)
    }

    /// Scrape once.
    fn sample(&mut self, now: SystemTime) -> Produced {
        let mut out = Produced::default();
        let mut parser = DcgmTextParser::new(&self.shown, 1.0, Timestamp(unix_ms(now)))
            .with_limits(crate::bounds::DCGM_EXPORTER)
            .with_units(std::mem::take(&mut self.units))
            .one_answer();
        let mut samples: Vec<Sample> = Vec::new();
        let read = self.read(&mut parser, &mut samples);
        self.units = parser.take_units();
        let (bytes, data_lines) = match read {
            Ok(read) => read,
            Err(e) => {
                out.errors.push(e);
                return out;
            }
        };
        samples.extend(parser.finish());
        self.count_unread(parser.unread(), &mut out.errors);
        self.count_refused(parser.refused(), &mut out.errors);
        // The parser's buffers (an entity's worth per GPU) go before the merge below makes
        // one more copy of every entity: a scrape at the entity cap peaks lower.
        drop(parser);
        if data_lines == 0 || samples.is_empty() {
            out.errors.push(SourceError::Parse(format!(
                "{}: no DCGM metrics in the response ({bytes} bytes); is this a dcgm-exporter endpoint?",
                self.shown
            )));
            return out;
        }
        // One scrape is one sample (a repeated series is counted, never a scrape of its
        // own): merge entities the parser kept apart that are one entity here, keeping the
        // last reading of each.
        // Linear: one index lookup per entity (a 15 000-GPU feed used to take seconds).
        let n = samples.iter().map(|s| s.entities.len()).sum();
        let mut entities: Vec<EntitySample> = Vec::with_capacity(n);
        let mut index: HashMap<EntityKey, usize> = HashMap::with_capacity(n);
        for mut e in samples.into_iter().flat_map(|s| s.entities) {
            self.nodes.place(&self.shown, &mut e.id);
            match index.entry(e.id.key()) {
                std::collections::hash_map::Entry::Occupied(i) => entities[*i.get()] = e,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(entities.len());
                    entities.push(e);
                }
            }
        }
        let attributed = entities.iter().any(|e| e.id.pod.is_some());
        if !attributed && matches!(self.scope, Scope::Pod { .. }) && !self.warned_scope {
            self.warned_scope = true;
            tracing::warn!(
                url = %self.shown,
                "dcgm-exporter does not attribute GPUs to pods (run it with pod mapping, -k); falling back to NVIDIA_VISIBLE_DEVICES or every GPU."
            );
        }
        if matches!(self.scope, Scope::All) && !self.warned_scope {
            self.warned_scope = true;
            tracing::warn!(url = %self.shown, "No GPU scope (no pod identity, UUIDs or NVIDIA_VISIBLE_DEVICES): exporting every GPU dcgm-exporter reports.");
        }
        let reported = entities.len();
        entities.retain(|e| self.scope.keeps(e, attributed));
        self.warn_when_out_of_scope(reported, entities.len());
        if !entities.is_empty() {
            out.samples.push(Sample {
                taken: Timestamp(unix_ms(now)),
                entities,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::model::{Field, Reading};

    /// Unset, a scrape lasts at most the stale period's whole intervals less half an
    /// interval (and 5 s): a hung dcgm-exporter reads as down before its tick would be
    /// served stale. Set, it is as set.
    #[test]
    fn an_unset_scrape_timeout_ends_within_the_stale_period_at_most_5s() {
        let unset = DcgmExporterConfig::default();
        let ms = Duration::from_millis;
        // 200 ms interval, 600 ms stale period: 3 intervals less 100 ms.
        assert_eq!(unset.effective_timeout(ms(200), ms(600)).unwrap(), ms(500));
        assert_eq!(
            unset.effective_timeout(ms(1000), ms(3000)).unwrap(),
            ms(2500)
        );
        // A stale period of one interval: half of it.
        assert_eq!(
            unset.effective_timeout(ms(1000), ms(1000)).unwrap(),
            ms(500)
        );
        // 2.5 intervals: the two whole ones, less half.
        assert_eq!(
            unset.effective_timeout(ms(1000), ms(2500)).unwrap(),
            ms(1500)
        );
        assert_eq!(
            unset.effective_timeout(ms(1000), ms(90_000)).unwrap(),
            ms(5000)
        );
        let set = DcgmExporterConfig {
            scrape_timeout: "2s".into(),
            ..DcgmExporterConfig::default()
        };
        assert_eq!(
            set.effective_timeout(ms(1000), ms(90_000)).unwrap(),
            ms(2000)
        );
    }

    /// At the bound, two publications of ticks whose reads all hang are at most the stale
    /// period apart, an interval short of the watchdog's limit, and a quick tick followed by
    /// the first that hangs is inside it too; at the old bound (the stale period itself)
    /// they were the limit apart. Walked here with the sampler's own slot rule, by hand: a
    /// tick starts on a slot and ends `read + work` later; the next starts on the first
    /// slot after.
    #[test]
    fn at_the_longest_read_publications_stay_within_the_stale_period() {
        // Every tick reads for `read` and works for `work`: the next starts on the first
        // slot after one ends, so two publications are that many whole intervals apart.
        let gap =
            |interval: f64, read: f64, work: f64| ((read + work) / interval).ceil() * interval;
        for (i, s) in [(0.2, 0.6), (1.0, 3.0), (1.0, 1.0), (1.0, 2.5), (0.5, 30.0)] {
            let longest =
                super::super::longest_read(Duration::from_secs_f64(i), Duration::from_secs_f64(s))
                    .as_secs_f64();
            for work in [0.0001, 0.01, 0.4 * i] {
                let g = gap(i, longest, work);
                assert!(g <= s + 1e-9 && g < s + i, "{i} {s} {work}: {g}");
                // The onset: a quick tick on one slot, the first hung one on the next.
                let onset = i + longest + work;
                assert!(onset < s + i, "{i} {s} {work}: {onset}");
            }
            // The stale period itself as the read, where it is whole intervals: the
            // watchdog's limit apart.
            if (s / i - (s / i).round()).abs() < 1e-9 {
                assert!(gap(i, s, 0.01) >= s + i - 1e-9, "{i} {s}");
            }
        }
    }

    /// Blanks are counted for the families read: DCGM's INT32 blank in the busy fraction and
    /// a NaN power, never a Go runtime's metrics at 2^63 and 2^64 (dcgm-exporter's
    /// `--enable-exporter-metrics`), which are no DCGM fields.
    #[test]
    fn blanks_of_the_families_read_are_counted_and_no_others() {
        let mut parser = DcgmTextParser::new("t", 1.0, Timestamp(0));
        for line in [
            "go_gc_gomemlimit_bytes 9.223372036854776e+18",
            "process_virtual_memory_max_bytes 1.8446744073709552e+19",
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 4294967295",
            "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\"} NaN",
        ] {
            parser.push_line(line).unwrap();
        }
        let mut source = DcgmExporterSource::new(
            "http://127.0.0.1:9/metrics",
            Duration::from_secs(1),
            Duration::from_secs(1),
            Scope::All,
        );
        let mut errors = Vec::new();
        source.count_unread(parser.unread(), &mut errors);
        let sentinels: Vec<String> = errors
            .iter()
            .filter(|e| e.kind() == "sentinel")
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            sentinels,
            vec![
                "sentinel value dropped: http://127.0.0.1:9/metrics: dcgm_fi_dev_gpu_util",
                "sentinel value dropped: http://127.0.0.1:9/metrics: dcgm_fi_dev_power_usage",
            ]
        );
    }

    /// Serves `body` once at `http://127.0.0.1:PORT/metrics`, and the URL.
    fn serve_once(body: String) -> (String, std::thread::JoinHandle<()>) {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            let mut stream = reader.into_inner();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(body.as_bytes()).unwrap();
        });
        (url, server)
    }

    /// A live answer repeating a series (no exposition does) is read once: every reading of
    /// the GPU stays, the first of the repeated series is kept, and the repeats are counted
    /// as a parse error naming them. It used to end a "scrape" at each repeat, keep a copy of
    /// the GPU for each (a 31 MiB answer of one repeated line took 1.2 GB) and replace the
    /// GPU with its last copy, which held the repeated series alone.
    #[test]
    fn a_live_answer_repeating_a_series_is_read_once() {
        let mut body = String::from(
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 40\n\
             DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\"} 300\n\
             DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\"} 1024\n",
        );
        for _ in 0..3 {
            body.push_str("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 99\n");
        }
        let (url, server) = serve_once(body);
        let mut source = DcgmExporterSource::new(
            &url,
            Duration::from_secs(1),
            Duration::from_secs(2),
            Scope::All,
        );
        let out = source.sample(SystemTime::now());
        server.join().unwrap();
        assert_eq!(out.samples.len(), 1, "{:?}", out.errors);
        let gpus = &out.samples[0].entities;
        assert_eq!(gpus.len(), 1);
        let r = &gpus[0].readings;
        assert_eq!(r.get(Field::ReportedUtil), Reading::Value(0.4));
        assert_eq!(r.get(Field::PowerWatts), Reading::Value(300.0));
        assert!(matches!(r.get(Field::MemUsedBytes), Reading::Value(_)));
        let errors: Vec<(String, String)> = out
            .errors
            .iter()
            .map(|e| (e.kind().to_owned(), e.to_string()))
            .collect();
        assert_eq!(
            errors,
            [(
                "parse".to_owned(),
                format!(
                    "{url}: 3 lines repeat a series already in the answer; the first reading of each was kept"
                )
            )]
        );
    }

    /// A user and password in the URL reach no error, diagnostic or log line: a scrape that
    /// fails names the URL without them.
    #[test]
    fn a_failed_scrape_never_shows_the_url_s_password() {
        let mut source = DcgmExporterSource::new(
            "http://scraper:s3cret@127.0.0.1:9/metrics",
            Duration::from_secs(1),
            Duration::from_secs(1),
            Scope::All,
        );
        let out = source.sample(SystemTime::now());
        assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
        let shown = out.errors[0].to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("http://…@127.0.0.1:9/metrics"), "{shown}");
        let bad = DcgmExporterConfig {
            url: Some("ftp://scraper:s3cret@host/metrics".into()),
            ..DcgmExporterConfig::default()
        };
        let refused = bad.check().unwrap_err().to_string();
        assert!(!refused.contains("s3cret"), "{refused}");
    }

    #[test]
    fn scope_choice() {
        let u = vec!["GPU-a".to_string()];
        assert_eq!(
            Scope::choose(&u, &[], Some("p"), None, None),
            Scope::Uuids(u.clone())
        );
        assert_eq!(
            Scope::choose(&[], &[1], Some("p"), None, None),
            Scope::Indices(vec![1])
        );
        assert_eq!(
            Scope::choose(&[], &[], Some("p"), Some("ns"), Some("GPU-x,GPU-y")),
            Scope::Pod {
                pod: "p".into(),
                namespace: Some("ns".into()),
                visible: vec!["GPU-x".into(), "GPU-y".into()]
            }
        );
        assert_eq!(Scope::choose(&[], &[], None, None, Some("all")), Scope::All);
        assert_eq!(
            Scope::choose(&[], &[], None, None, Some("GPU-x")),
            Scope::Uuids(vec!["GPU-x".into()])
        );
    }

    fn id(uuid: Option<&str>, hostname: Option<&str>) -> EntityId {
        EntityId {
            gpu: Some(0),
            uuid: uuid.map(str::to_string),
            node: hostname.map(str::to_string),
            ..EntityId::default()
        }
    }

    /// dcgm-exporter restarted without `NODE_NAME`: its new pod name is a new `Hostname`, and
    /// the GPU keeps the node it had first (by UUID); a GPU without a UUID is read as it is.
    /// Where this node's name is known, every GPU takes it.
    #[test]
    fn a_gpu_keeps_one_node_when_dcgm_exporter_s_hostname_changes() {
        let mut nodes = Nodes::default();
        let mut placed = |uuid, hostname| {
            let mut i = id(uuid, hostname);
            nodes.place("http://dcgm", &mut i);
            i.node
        };
        let first = Some("dcgm-exporter-7f9c4".to_string());
        assert_eq!(placed(Some("GPU-1"), Some("dcgm-exporter-7f9c4")), first);
        assert_eq!(placed(Some("GPU-1"), Some("dcgm-exporter-k2m8x")), first);
        assert_eq!(placed(Some("GPU-1"), None), first);
        assert_eq!(
            placed(Some("GPU-2"), Some("dcgm-exporter-k2m8x")).as_deref(),
            Some("dcgm-exporter-k2m8x")
        );
        assert_eq!(placed(None, Some("h")).as_deref(), Some("h"));
        let mut own = Nodes {
            own: Some("gpu-node-3".into()),
            ..Nodes::default()
        };
        for (uuid, hostname) in [(Some("GPU-1"), Some("dcgm-exporter-7f9c4")), (None, None)] {
            let mut i = id(uuid, hostname);
            own.place("http://dcgm", &mut i);
            assert_eq!(i.node.as_deref(), Some("gpu-node-3"));
        }
    }
}
