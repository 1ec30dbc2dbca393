//! The sidecar: a sampler thread that produces one encoded snapshot per tick, and the
//! handle through which HTTP handlers (and embedding services) read it.
//!
//! Sampling runs on its own thread at its own interval. A scrape never samples: it
//! serves the bytes encoded at the last tick, so scrape cost does not depend on how many
//! scrapers there are.

use crate::config::Settings;
use crate::sinks::prometheus::{GzipDemand, SinkErrors, Snapshot, VERSION};
use crate::sources::apiserver::{self, ApiServer, PodLabelReader};
use crate::sources::engine::EngineScraper;
use crate::sources::kubelet::{Allocations, Kubelet};
use crate::sources::{BuildError, Produced, Source, SourceError, unix_ms};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;
use truthscale_core::diag::{Diagnostic, DiagnosticKind};
use truthscale_core::exposition::{self, ExporterStatus, Format, GpuEntry, Identity, SourceHealth};
use truthscale_core::gpus;
use truthscale_core::model::{EntityKey, PodRef};
use truthscale_core::tracker::{Deriver, EntityWindow};

/// A running sampler. Dropping it stops the thread.
#[derive(Debug)]
pub struct Sidecar {
    rx: watch::Receiver<Arc<Snapshot>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    source: String,
    sinks: SinkErrors,
}

impl Sidecar {
    /// Build the source and start sampling.
    ///
    /// # Errors
    /// The source cannot be built (not built yet, or a replay file that cannot be used), or
    /// node mode's pod labels are asked for and the API server's CA or token cannot be read.
    pub fn start(settings: &Settings) -> Result<Sidecar, BuildError> {
        let source = settings
            .source
            .build(&settings.source_context, SystemTime::now())?;
        let api = pod_label_client(settings)?;
        Ok(Sidecar::launch(settings, source, api))
    }

    /// Start sampling from an already built source. Node mode's pod labels, when asked for
    /// and their API server client cannot be made, are left out with an error logged.
    #[must_use]
    pub fn with_source(settings: &Settings, source: Box<dyn Source>) -> Sidecar {
        let api = pod_label_client(settings).unwrap_or_else(|e| {
            tracing::error!(
                error = %e,
                "Pod labels are not read: the API server client cannot be made; allocation info is exported without them."
            );
            None
        });
        Sidecar::launch(settings, source, api)
    }

    fn launch(settings: &Settings, source: Box<dyn Source>, api: Option<ApiServer>) -> Sidecar {
        let name = source.name().to_string();
        let (tx, rx) = watch::channel(Arc::new(Snapshot {
            source: name.clone(),
            taken_at: Some(Instant::now()),
            ..Snapshot::default()
        }));
        let (stop_tx, stop_rx) = mpsc::channel();
        let sinks = SinkErrors::default();
        let mut state = Sampler::new(settings, source, api);
        state.sinks = sinks.clone();
        let interval = settings.interval;
        let thread = std::thread::Builder::new()
            .name("truthscale-sampler".into())
            .spawn(move || run(state, interval, &tx, &stop_rx))
            .ok();
        if thread.is_none() {
            tracing::error!("Could not start the sampler thread; /metrics will stay empty.");
        }
        Sidecar {
            rx,
            stop: Some(stop_tx),
            thread,
            source: name,
            sinks,
        }
    }

    /// The sink failure counters this sidecar exposes; push sinks (OTLP) add to them.
    #[must_use]
    pub fn sink_errors(&self) -> SinkErrors {
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

    /// Stop sampling and wait for the thread.
    pub fn shutdown(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

fn run(
    mut s: Sampler,
    interval: Duration,
    tx: &watch::Sender<Arc<Snapshot>>,
    stop: &mpsc::Receiver<()>,
) {
    let start = Instant::now();
    let mut k: u32 = 0;
    loop {
        let snap = s.tick(SystemTime::now());
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

struct Served {
    window: EntityWindow,
    last_seen: Instant,
}

/// The sampler's state: source, deriver, and what is being served.
struct Sampler {
    source: Box<dyn Source>,
    deriver: Deriver,
    identity: Identity,
    stale_after: Duration,
    interval: Duration,
    entities: BTreeMap<EntityKey, Served>,
    /// Node mode and the sidecar's own pod: the key a source names an entity by → the key it
    /// is served under once attributed, for the entities a source reports as unchanged
    /// (which carry only the source's key).
    attributed_keys: HashMap<EntityKey, EntityKey>,
    last_data: Option<Instant>,
    errors: BTreeMap<String, u64>,
    diagnostics: BTreeMap<String, u64>,
    /// The entities (and kinds) whose impossible readings or gaps were logged: once each.
    logged_diagnostics: std::collections::HashSet<(EntityKey, DiagnosticKind)>,
    tick: u64,
    previous_body: Option<usize>,
    last_error_log: HashMap<&'static str, Instant>,
    sinks: SinkErrors,
    engine: Option<EngineScraper>,
    node: Option<NodeState>,
    own_pod: Option<OwnPod>,
    max_series: usize,
    series_dropped: u64,
    warned_cap: bool,
    /// Which formats scrapers want gzipped (shared with every snapshot).
    gzip: Arc<GzipDemand>,
}

/// Node mode: the kubelet client and its health as a source of its own, and the pod-label
/// reader (its own thread) when `node.pod_labels` asks for labels.
struct NodeState {
    kubelet: Kubelet,
    proc_root: std::path::PathBuf,
    /// Whether this tick's attribution came from an answer within the stale period.
    up: bool,
    errors: BTreeMap<String, u64>,
    pod_labels: Option<PodLabelReader>,
    /// The pod-label reader's health at this tick: an answer young enough, and its errors.
    pod_labels_health: Option<(bool, BTreeMap<String, u64>)>,
}

/// Sidecar mode with `sidecar.pod_resources`: the kubelet's answer to `Get` for this pod says
/// which of the GPUs this container sees are the pod's. Only those take the pod's labels
/// (from the answer); the others are exported without any. While no answer is known (the
/// kubelet unreadable, or without `Get`), every GPU takes this pod's identity, as without the
/// setting.
struct OwnPod {
    kubelet: Kubelet,
    /// This pod's identity (`identity.*`, the Downward API): the labels of every GPU while
    /// the kubelet's answer is not known.
    own: PodRef,
    /// Whether this tick's attribution came from an answer within the stale period.
    up: bool,
    errors: BTreeMap<String, u64>,
    /// Whether "the kubelet does not serve Get" was logged since the last answer.
    told_unsupported: bool,
}

impl OwnPod {
    /// Read this pod's allocations and attribute `produced` with them: the answer's GPUs
    /// only, or, while no answer is known, every GPU to this pod. Counts and logs a failure.
    /// The allocations used, when known.
    fn attribute(
        &mut self,
        produced: &mut Produced,
        stale_after: Duration,
        last_error_log: &mut HashMap<&'static str, Instant>,
    ) -> Option<Allocations> {
        let (allocations, error) = self.kubelet.current(stale_after);
        match &error {
            None => self.told_unsupported = false,
            Some(e @ SourceError::Unsupported(_)) => {
                if !self.told_unsupported {
                    self.told_unsupported = true;
                    tracing::warn!(
                        source = "kubelet",
                        kind = e.kind(),
                        error = %e,
                        "The kubelet does not serve Get (Kubernetes before 1.27, or the feature gate KubeletPodResourcesGet off, its default before 1.34); GPUs stay labelled with this pod, as without sidecar.pod_resources (counted in truthscale_source_errors_total{{source=\"kubelet\",kind=\"unsupported\"}}; logged once)."
                    );
                }
            }
            Some(e) => {
                let last = last_error_log.get("kubelet");
                if last.is_none_or(|t| t.elapsed() >= ERROR_LOG_EVERY) {
                    last_error_log.insert("kubelet", Instant::now());
                    tracing::warn!(
                        source = "kubelet",
                        kind = e.kind(),
                        error = %e,
                        "Cannot read this pod's resources from the kubelet; the last answer is used for up to the stale period, then every GPU this container sees is labelled with this pod, as without sidecar.pod_resources, until it answers (counted in truthscale_source_errors_total{{source=\"kubelet\"}}; repeats logged every 30 s)."
                    );
                }
            }
        }
        if let Some(e) = error {
            *self.errors.entry(e.kind().to_string()).or_default() += 1;
        }
        self.up = allocations.is_some();
        match &allocations {
            Some(a) => a.attribute_own(produced),
            None => {
                for e in produced.samples.iter_mut().flat_map(|s| &mut s.entities) {
                    e.id.pod.get_or_insert_with(|| self.own.clone());
                }
            }
        }
        allocations
    }
}

/// The API server client for node mode's pod labels, when they are asked for.
fn pod_label_client(settings: &Settings) -> Result<Option<ApiServer>, BuildError> {
    settings
        .node
        .as_ref()
        .and_then(|n| n.pod_labels.clone())
        .map(ApiServer::new)
        .transpose()
}

/// A device whatever its attribution: node, index, UUID and MIG instance.
fn device_of(
    id: &truthscale_core::model::EntityId,
) -> (Option<String>, Option<u32>, Option<String>, Option<u32>) {
    (
        id.node.clone(),
        id.gpu,
        id.uuid.clone(),
        id.mig.as_ref().map(|m| m.gpu_instance),
    )
}

/// How long a stopped GPU is still listed (as `truthscale_gpu_up 0`) after it went stale.
const FORGET_STOPPED_AFTER: Duration = Duration::from_secs(600);

/// Repeated errors of one kind are logged at most this often.
const ERROR_LOG_EVERY: Duration = Duration::from_secs(30);

/// How many (entity, kind) pairs are remembered as logged; past it, nothing more is logged
/// at warning level (every diagnostic is still counted).
const LOGGED_DIAGNOSTICS_MAX: usize = 10_000;

impl Sampler {
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

    fn new(settings: &Settings, source: Box<dyn Source>, api: Option<ApiServer>) -> Sampler {
        // The source declares how often it updates (or lets the deriver tell each entity's
        // cadence from its timestamps).
        let window = source.update_interval().map(|w| w.as_secs_f64());
        Sampler {
            source,
            deriver: {
                let mut d = Deriver::new(settings.derive.clone(), window);
                d.set_verdict_config(settings.verdict.clone());
                d
            },
            // With the kubelet's answer, attribution is per GPU: a GPU the answer does not give
            // this pod must not fall back to its identity when encoded.
            identity: if settings.pod_resources.is_some() {
                Identity {
                    pod: None,
                    namespace: None,
                    container: None,
                    node: settings.identity.node.clone(),
                }
            } else {
                settings.identity.clone()
            },
            stale_after: settings.stale_after,
            interval: settings.interval,
            entities: BTreeMap::new(),
            attributed_keys: HashMap::new(),
            last_data: None,
            errors: BTreeMap::new(),
            diagnostics: BTreeMap::new(),
            logged_diagnostics: std::collections::HashSet::new(),
            tick: 0,
            previous_body: None,
            last_error_log: HashMap::new(),
            sinks: SinkErrors::default(),
            engine: settings.engine.clone().map(EngineScraper::new),
            node: settings.node.clone().map(|n| NodeState {
                proc_root: n.proc_root.clone(),
                kubelet: Kubelet::new(n.kubelet()),
                up: false,
                errors: BTreeMap::new(),
                pod_labels: api.map(PodLabelReader::start),
                pod_labels_health: None,
            }),
            own_pod: settings.pod_resources.clone().map(|p| {
                tracing::info!(
                    pod = %p.pod,
                    namespace = %p.namespace,
                    socket = %p.kubelet.socket.display(),
                    "Asking the kubelet (PodResources Get) which GPUs are this pod's: only those are labelled with it, the others this container sees are exported without pod labels."
                );
                OwnPod {
                    kubelet: Kubelet::for_pod(p.kubelet, &p.pod, &p.namespace),
                    own: PodRef {
                        pod: p.pod,
                        namespace: Some(p.namespace),
                        container: settings.identity.container.clone(),
                    },
                    up: false,
                    errors: BTreeMap::new(),
                    told_unsupported: false,
                }
            }),
            gzip: Arc::default(),
            max_series: settings.max_series,
            series_dropped: 0,
            warned_cap: false,
        }
    }

    /// The entities that fit the series cap, the text body and the status that counts what
    /// was left out. Entities are left out whole, the last first; the exporter's own series
    /// always stay. Counting costs one extra encoding per entity, only when over the cap.
    fn capped(
        &mut self,
        mut gpus: Vec<GpuEntry>,
        mut status: ExporterStatus,
    ) -> (Vec<GpuEntry>, String, ExporterStatus) {
        let samples = |body: &str| {
            body.lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .count()
        };
        status.series_dropped = self.series_dropped;
        let text = exposition::encode(&gpus, &self.identity, &status, Format::Text);
        let all = samples(&text);
        // Under the cap even with the exporter's own series counted: no second encoding.
        if all <= self.max_series {
            return (gpus, text, status);
        }
        let own = samples(&exposition::encode(
            &[],
            &self.identity,
            &status,
            Format::Text,
        ));
        if all - own <= self.max_series {
            return (gpus, text, status);
        }
        let mut total = 0;
        let mut dropped = 0;
        gpus.retain(|g| {
            let n = samples(&exposition::encode(
                std::slice::from_ref(g),
                &self.identity,
                &status,
                Format::Text,
            )) - own;
            if total + n <= self.max_series {
                total += n;
                true
            } else {
                dropped += n;
                false
            }
        });
        self.series_dropped += dropped as u64;
        if !self.warned_cap {
            self.warned_cap = true;
            tracing::warn!(
                max_series = self.max_series,
                dropped,
                "More GPU series than max_series: whole entities are left out of /metrics (counted in truthscale_series_dropped_total). Raise max_series, or turn per-process series off."
            );
        }
        status.series_dropped = self.series_dropped;
        let text = exposition::encode(&gpus, &self.identity, &status, Format::Text);
        (gpus, text, status)
    }

    fn tick(&mut self, now: SystemTime) -> Snapshot {
        let t0 = Instant::now();
        let mut produced = self.source.sample(now);
        // The engine is read on this thread, right after the GPUs, with the same clock.
        let engine = self
            .engine
            .as_mut()
            .map(|e| (e.scrape(unix_ms(now)), e.model()));
        let attributes = self.node.is_some() || self.own_pod.is_some();
        let source_keys: Vec<EntityKey> = if attributes {
            produced
                .samples
                .iter()
                .flat_map(|s| &s.entities)
                .map(|e| e.id.key())
                .collect()
        } else {
            Vec::new()
        };
        if let Some(node) = &mut self.node {
            let (allocations, error) = node.kubelet.current(self.stale_after);
            if let Some(e) = error {
                *node.errors.entry(e.kind().to_string()).or_default() += 1;
                let last = self.last_error_log.get("kubelet");
                if last.is_none_or(|t| t.elapsed() >= ERROR_LOG_EVERY) {
                    self.last_error_log.insert("kubelet", Instant::now());
                    tracing::warn!(
                        source = "kubelet",
                        kind = e.kind(),
                        error = %e,
                        "Cannot read the kubelet's pod resources; GPUs are exported without pod attribution until it answers (counted in truthscale_source_errors_total{{source=\"kubelet\"}}; repeats logged every 30 s)."
                    );
                }
            }
            node.up = allocations.is_some();
            if let Some(a) = allocations {
                a.attribute(&mut produced, &node.proc_root);
            }
            // The pod labels the reader's thread read last (never read here).
            node.pod_labels_health = node.pod_labels.as_ref().map(|r| {
                let (labels, errors) = r.current();
                if let Some(l) = &labels {
                    l.apply(&mut produced);
                }
                (labels.is_some(), errors)
            });
        }
        let own_allocations = match &mut self.own_pod {
            Some(own) => own.attribute(&mut produced, self.stale_after, &mut self.last_error_log),
            None => None,
        };
        // Attribution changes an entity's key; what the source will call it when unchanged is
        // the key it had before.
        let attributed = produced.samples.iter().flat_map(|s| &s.entities);
        for (from, e) in source_keys.into_iter().zip(attributed) {
            if e.id.key() == from {
                self.attributed_keys.remove(&from);
            } else {
                self.attributed_keys.insert(from, e.id.key());
            }
        }
        // The engine's figures go to the GPUs it runs on: with the kubelet's answer for this
        // pod, only the GPUs the pod holds.
        if let Some((serving, model)) = engine {
            let engines = |e: &truthscale_core::model::EntitySample| {
                own_allocations.as_ref().is_none_or(|a| a.holds(e))
            };
            for sample in &mut produced.samples {
                let n = sample.entities.iter().filter(|e| engines(e)).count();
                for e in &mut sample.entities {
                    if !engines(e) {
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
        let took = t0.elapsed();
        if took > self.interval {
            produced.errors.push(SourceError::Overrun(format!(
                "reading the source took {} ms, longer than the {} ms interval: the cadence slipped (a slow or hung endpoint, or too much to read per tick)",
                took.as_millis(),
                self.interval.as_millis()
            )));
        }
        for e in &produced.errors {
            *self.errors.entry(e.kind().to_string()).or_default() += 1;
            let last = self.last_error_log.get(e.kind());
            if last.is_none_or(|t| t.elapsed() >= ERROR_LOG_EVERY) {
                self.last_error_log.insert(e.kind(), Instant::now());
                tracing::warn!(
                    source = self.source.name(),
                    kind = e.kind(),
                    error = %e,
                    "Source reported a problem; it is counted in truthscale_source_errors_total (repeats of this kind are logged at most every 30 s)."
                );
            }
        }
        for sample in &produced.samples {
            let d = self.deriver.observe(sample);
            for diag in d.diagnostics {
                *self
                    .diagnostics
                    .entry(diag.kind.as_str().to_string())
                    .or_default() += 1;
                self.log_diagnostic(&diag);
            }
            if (self.node.is_some() || self.own_pod.is_some()) && !d.windows.is_empty() {
                // Node mode, and the sidecar with the kubelet's answer: a device now
                // attributed otherwise (its pod ended, it became shared, the answer came or
                // went) is the same GPU; its old attribution goes at once, not as a GPU that
                // stopped.
                let devices: std::collections::HashSet<_> =
                    d.windows.iter().map(|w| device_of(&w.id)).collect();
                let fresh: std::collections::HashSet<_> =
                    d.windows.iter().map(|w| w.id.key()).collect();
                self.entities.retain(|k, s| {
                    fresh.contains(k) || !devices.contains(&device_of(&s.window.id))
                });
            }
            for w in d.windows {
                self.entities.insert(
                    w.id.key(),
                    Served {
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
        let up = self.last_data.is_some_and(|t| t.elapsed() <= stale_after);
        let kind = self.source.name();
        let gpus: Vec<GpuEntry> = self
            .entities
            .values()
            .map(|s| GpuEntry {
                window: s.window.clone(),
                source: kind,
                up: s.last_seen.elapsed() <= stale_after,
            })
            .collect();
        self.tick += 1;
        let status = ExporterStatus {
            version: VERSION.to_string(),
            sources: std::iter::once(SourceHealth {
                name: kind.to_string(),
                up,
                errors: self.errors.clone(),
            })
            .chain(self.node.as_ref().map(|n| SourceHealth {
                name: "kubelet".to_string(),
                up: n.up,
                errors: n.errors.clone(),
            }))
            .chain(self.own_pod.as_ref().map(|o| SourceHealth {
                name: "kubelet".to_string(),
                up: o.up,
                errors: o.errors.clone(),
            }))
            .chain(
                self.node
                    .as_ref()
                    .and_then(|n| n.pod_labels_health.clone())
                    .map(|(up, errors)| SourceHealth {
                        name: apiserver::SOURCE.to_string(),
                        up,
                        errors,
                    }),
            )
            .collect(),
            sample_duration_seconds: Some(t0.elapsed().as_secs_f64()),
            diagnostics: self.diagnostics.clone(),
            snapshot_unix_seconds: unix_ms(now) as f64 / 1000.0,
            previous_body_bytes: self.previous_body,
            sinks: self.sinks.health(),
            series_dropped: self.series_dropped,
        };
        let (gpus, text, status) = self.capped(gpus, status);
        let openmetrics = exposition::encode(&gpus, &self.identity, &status, Format::OpenMetrics);
        self.previous_body = Some(text.len());
        let now_ms = unix_ms(now);
        let text_gzip = self
            .gzip
            .compress_if_wanted(Format::Text, text.as_bytes(), now_ms);
        let openmetrics_gzip =
            self.gzip
                .compress_if_wanted(Format::OpenMetrics, openmetrics.as_bytes(), now_ms);
        Snapshot {
            tick: self.tick,
            taken_unix_ms: unix_ms(now),
            taken_at: Some(t0),
            gpus,
            source_up: up,
            source: kind.to_string(),
            text: text.into(),
            openmetrics: openmetrics.into(),
            text_gzip,
            openmetrics_gzip,
            gzip_demand: Arc::clone(&self.gzip),
            status,
            identity: self.identity.clone(),
        }
    }
}
