//! The per-GPU view that `explain` and `top` share: what the dashboard says against what
//! the counters say, from a replayed capture or a running sidecar's `/metrics`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use truthscale_core::catalog::{GpuMetric, MetricId, RawKind, ServingMetric};
use truthscale_core::derive::DeriveConfig;
use truthscale_core::diag::DiagnosticTally;
use truthscale_core::gpus::{self, GpuSpec};
use truthscale_core::model::{EntityKey, Field, Readings, Sample, ServingSnapshot, Throttles};
use truthscale_core::tracker::{Deriver, EntityWindow};
use truthscale_core::verdict::{self, VerdictConfig, VerdictInputs, VerdictResult};

/// Points of history kept per GPU (for `top`'s sparkline).
pub(crate) const HISTORY: usize = 120;

/// What is known about one GPU, from a replay or a sidecar.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct GpuView {
    /// Sort key and `--gpu` match.
    pub gpu: Option<u32>,
    /// How to name it (`gpu 0 (NVIDIA H100 80GB HBM3)`).
    pub name: String,
    /// Reported utilization (busy flag).
    pub reported: Option<f64>,
    /// Effective compute fraction.
    pub effective: Option<f64>,
    /// Upper bound on effective compute (below the profiling tier).
    pub upper_bound: Option<f64>,
    /// Roofline saturation.
    pub saturation: Option<f64>,
    /// Tensor pipe active.
    pub tensor: Option<f64>,
    /// DRAM active.
    pub dram: Option<f64>,
    /// Phase.
    pub phase: Option<String>,
    /// Clock-event reasons.
    pub throttles: Option<Throttles>,
    /// Serving engine view.
    pub serving: Option<ServingSnapshot>,
    /// The verdict with reasons.
    pub verdict: Option<VerdictResult>,
    /// Recent effective compute values, oldest first (never a bound or saturation).
    pub history: Vec<f64>,
    /// A time-sliced GPU's holders' estimated parts of its effective compute (node mode,
    /// per-process attribution): estimates, never measurements.
    pub pod_estimates: Vec<PodEstimate>,
    /// The readings exported as is (from `/metrics`), which a starved GPU's cause is
    /// decided from.
    pub readings: Readings,
    /// The catalog model, where the model name is known.
    pub spec: Option<&'static GpuSpec>,
    /// The job of a straggler, or of a GPU that waits on one.
    pub job: Option<String>,
    /// The MIG instance (GPU instance id), for a view of one.
    pub mig: Option<u32>,
    /// Simulated data (the simulator's model names, or `source="sim"`).
    pub simulated: bool,
}

/// One holder's estimated part of a shared GPU's effective compute
/// (`truthscale_pod_effective_compute_estimate_ratio`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodEstimate {
    /// `namespace/pod`, or `(no pod found)` for processes whose pod was not found.
    pub pod: String,
    /// The estimate, a fraction of the device.
    pub value: f64,
    /// How it was estimated (`sm_busy_share`).
    pub method: String,
}

/// `namespace/pod` of a pod reference.
fn pod_name(p: Option<&truthscale_core::model::PodRef>) -> String {
    match p {
        Some(p) => match &p.namespace {
            Some(ns) => format!("{ns}/{}", p.pod),
            None => p.pod.clone(),
        },
        None => "(no pod found)".to_string(),
    }
}

/// The estimates the exporter writes for a window: a device no single pod holds, its
/// effective compute split by its processes' share of SM busy time.
fn pod_estimates(w: &EntityWindow) -> Vec<PodEstimate> {
    let attributed = w.id.pod.as_ref().is_some_and(|p| !p.pod.is_empty());
    if attributed || w.allocation.is_none() {
        return Vec::new();
    }
    let (Some(device), Some(parts)) = (
        w.metrics.effective_compute,
        truthscale_core::share::by_pod(&w.processes),
    ) else {
        return Vec::new();
    };
    let weights: Vec<f64> = parts.iter().map(|p| p.sm_busy).collect();
    let values = truthscale_core::share::apportion(device, &weights).unwrap_or_default();
    parts
        .iter()
        .zip(values)
        .map(|(p, value)| PodEstimate {
            pod: pod_name(p.pod),
            value,
            method: "sm_busy_share".to_string(),
        })
        .collect()
}

impl GpuView {
    /// The view of one derived window.
    pub(crate) fn from_window(w: &EntityWindow) -> GpuView {
        let m = &w.metrics;
        GpuView {
            gpu: w.id.gpu,
            name: match &w.id.model {
                Some(model) => format!("{} ({model})", w.id),
                None => w.id.to_string(),
            },
            reported: m.reported_utilization,
            effective: m.effective_compute,
            upper_bound: m.effective_compute_upper_bound,
            saturation: m.roofline_saturation,
            tensor: w
                .readings
                .value(truthscale_core::model::Field::TensorActive),
            dram: w.readings.value(truthscale_core::model::Field::DramActive),
            // Serving words only where the workload is LLM serving; an estimate says so.
            phase: phase_shown(w),
            throttles: w.throttles,
            serving: w.serving.clone(),
            verdict: Some(w.verdict.explain()),
            history: Vec::new(),
            pod_estimates: pod_estimates(w),
            readings: w.readings,
            spec: w.spec,
            job: w.job.clone(),
            mig: w.id.mig.as_ref().map(|m| m.gpu_instance),
            simulated: w.simulated,
        }
    }

    /// Decide the verdict from the view's own values (for views read from `/metrics`).
    pub(crate) fn decide(&mut self, cfg: &VerdictConfig) {
        let r = verdict::decide(
            &VerdictInputs {
                util: self.reported,
                saturation: self.saturation,
                tensor: self.tensor,
                dram: self.dram,
                throttles: self.throttles,
                serving: self.serving.as_ref(),
                readings: Some((&self.readings, self.spec)),
                // The levels only: a view has one window, so no rise.
                health: truthscale_core::health::classify(
                    &truthscale_core::health::HealthInputs::from_readings(&self.readings),
                    &cfg.health,
                ),
            },
            cfg,
        );
        self.verdict = Some(r);
    }
}

/// Malformed lines of a capture printed individually before the rest are only counted.
const SHOWN_ERRORS: usize = 5;

/// Stream every sample of a capture file (any format `analyze` reads), its samples
/// `spacing` seconds apart where its format has no timestamps (dmon, dcgm-exporter scrapes,
/// as `analyze --interval`): `start` gets the nominal interval of its format and makes the
/// state that `each` feeds (`None` for a malformed line: a sample lost); nothing is held
/// beyond one sample. Malformed lines are reported on stderr (`file:line: …`) and skipped,
/// and what the parser left unread (families, sentinels, impossible readings) is said there
/// too, as `analyze` says it. Returns the state and the number of malformed lines
/// (and 1 for a read that failed after samples were read, which ends the capture there),
/// which the commands turn into exit status 1, as `analyze` does.
///
/// # Errors
/// The file cannot be read or its format cannot be told.
pub(crate) fn read_capture<S>(
    (path, spacing): (&Path, f64),
    start: impl FnOnce(Option<f64>) -> S,
    mut each: impl FnMut(&mut S, Option<Sample>),
) -> anyhow::Result<(S, usize)> {
    let name = path.display().to_string();
    let (reader, _) = crate::capture::open_path(path)?;
    let mut capture =
        crate::capture::Capture::open(std::io::BufReader::new(reader), &name, None, spacing)?;
    let mut state = start(capture.declared_interval(spacing));
    let (mut malformed, mut read, mut stopped) = (0usize, 0usize, false);
    let mut lost = crate::capture::LostLines::of(capture.format());
    loop {
        let r = match capture.next_sample() {
            Ok(Some(r)) => r,
            Ok(None) => break,
            // A read that fails after samples were read (a compressed capture cut short)
            // ends the capture there, said, and makes the exit status 1 as a malformed line.
            Err(e) if read > 0 => {
                crate::stdout::say!(
                    "truthscale: {e}: reading stopped after line {}; what is shown covers the lines before it",
                    capture.lines_read()
                );
                stopped = true;
                break;
            }
            Err(e) => return Err(e.into()),
        };
        match r {
            Ok(s) => {
                read += 1;
                each(&mut state, Some(s));
                if lost.handed() {
                    each(&mut state, None);
                }
            }
            Err(e) => {
                if lost.malformed() {
                    each(&mut state, None);
                }
                malformed += 1;
                if malformed <= SHOWN_ERRORS {
                    crate::stdout::say!("{e}");
                }
            }
        }
    }
    if malformed > 0 {
        crate::stdout::say!("truthscale: {name}: {malformed} malformed line(s) skipped");
    }
    if let Some(s) = capture
        .unread()
        .and_then(truthscale_core::parse::Unread::summary)
    {
        let (fields, _) = crate::capture::fields_heading(capture.format());
        crate::stdout::say!("truthscale: {name}: {fields} {s}");
    }
    Ok((state, malformed + usize::from(stopped)))
}

/// The newest view per GPU of a capture file (its samples `spacing` seconds apart where
/// its format has no timestamps), with history, read as a stream, and the number of
/// malformed lines skipped.
///
/// # Errors
/// The file cannot be read or its format cannot be told.
pub(crate) fn views_from_replay(
    (path, spacing): (&Path, f64),
    derive: &DeriveConfig,
    cfg: &VerdictConfig,
) -> anyhow::Result<(Vec<GpuView>, usize)> {
    let (stepper, malformed) = read_capture(
        (path, spacing),
        |nominal| Stepper::new(derive, cfg, nominal),
        |st, s| match s {
            Some(s) => st.observe(&s),
            // Its time is not the next sample's.
            None => st.line_lost(),
        },
    )?;
    // A reading left blank (impossible, a sentinel) is said, as `analyze` says it, never
    // read as "no reading" in silence.
    if let Some(note) = stepper.diagnostics_note() {
        crate::stdout::say!("truthscale: {}: {note}", path.display());
    }
    Ok((stepper.views(), malformed))
}

/// Append `x` to `history`, a time axis: a window without the value (not measured, or not
/// observed) is a NaN, drawn as a hole, never left out (which drew the windows on either
/// side of it as neighbours).
pub(crate) fn push_history(history: &mut Vec<f64>, x: Option<f64>) {
    history.push(x.unwrap_or(f64::NAN));
    let excess = history.len().saturating_sub(HISTORY);
    history.drain(..excess);
}

/// A window's phase as shown: serving words only where the workload is LLM serving, and
/// `(estimate)` after one guessed from power, as `/metrics` labels it
/// `method="power_heuristic"`.
pub(crate) fn phase_shown(w: &EntityWindow) -> Option<String> {
    w.phase.map(|p| {
        let name = p.name_for(w.llm_serving);
        match w.phase_method {
            Some(truthscale_core::phase::PhaseMethod::PowerHeuristic) => {
                format!("{name} (estimate)")
            }
            _ => name.to_string(),
        }
    })
}

/// Each view read afresh given its history from the views read before, by its name (a MIG
/// instance's apart from its GPU's): its effective compute appended, never a bound or
/// saturation, which plotted under the effective compute's title would pass for it.
pub(crate) fn carry_histories(histories: &mut BTreeMap<String, Vec<f64>>, fresh: &mut [GpuView]) {
    for v in fresh {
        let h = histories.entry(v.name.clone()).or_default();
        push_history(h, v.effective);
        v.history.clone_from(h);
    }
}

/// Derives views sample by sample (replay and NVML), keeping each GPU's history.
#[derive(Debug)]
pub(crate) struct Stepper {
    deriver: Deriver,
    views: BTreeMap<EntityKey, GpuView>,
    /// The derivation's diagnostics (a reading left blank, a gap).
    diagnostics: DiagnosticTally,
}

impl Stepper {
    pub(crate) fn new(derive: &DeriveConfig, cfg: &VerdictConfig, nominal: Option<f64>) -> Stepper {
        let mut deriver = Deriver::new(derive.clone(), nominal);
        deriver.set_verdict_config(cfg.clone());
        Stepper {
            deriver,
            views: BTreeMap::new(),
            diagnostics: DiagnosticTally::keeping(SHOWN_ERRORS),
        }
    }

    /// What the derivation refused or met, in one line (`None`: nothing): the counts by
    /// kind and the first few, as `analyze` writes them.
    pub(crate) fn diagnostics_note(&self) -> Option<String> {
        if self.diagnostics.is_empty() {
            return None;
        }
        let counts: Vec<String> = self
            .diagnostics
            .counts()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        Some(format!(
            "diagnostics: {} (first: {})",
            counts.join(", "),
            self.diagnostics.first().join("; ")
        ))
    }

    /// A line of the input was malformed and lost: its time is not the next sample's.
    pub(crate) fn line_lost(&mut self) {
        self.deriver.line_lost();
    }

    pub(crate) fn observe(&mut self, s: &Sample) {
        let derived = self.deriver.observe(s);
        for d in &derived.diagnostics {
            self.diagnostics.add(d);
        }
        for w in derived.windows {
            let mut v = GpuView::from_window(&w);
            let mut history = self
                .views
                .remove(&w.id.key())
                .map(|o| o.history)
                .unwrap_or_default();
            // Effective compute alone: a bound or saturation under its name would be an estimate
            // shown as a measurement (the column says EFFECTIVE).
            push_history(&mut history, v.effective);
            v.history = history;
            self.views.insert(w.id.key(), v);
        }
    }

    pub(crate) fn views(&self) -> Vec<GpuView> {
        self.views.values().cloned().collect()
    }
}

/// One series of a text exposition.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The lines of an exposition that did not read as samples, skipped: how many, and the
/// first [`SHOWN_ERRORS`] of them (`line N: why`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Skipped {
    pub(crate) count: usize,
    pub(crate) first: Vec<String>,
}

impl Skipped {
    /// One line saying what was skipped, with the first line's reason; `None` when nothing
    /// was.
    pub(crate) fn note(&self) -> Option<String> {
        let first = self.first.first()?;
        Some(format!(
            "{} malformed line(s) of /metrics skipped ({first})",
            self.count
        ))
    }
}

/// The series of a text exposition, and the lines skipped.
fn parse_series(body: &str) -> (Vec<Series>, Skipped) {
    let mut skipped = Skipped::default();
    let mut series = Vec::new();
    for (line, s) in truthscale_core::parse::prom_text::samples(body) {
        match s {
            Ok(s) => series.push(Series {
                name: s.name.to_string(),
                labels: s
                    .labels
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                value: s.value,
            }),
            Err(why) => {
                skipped.count += 1;
                if skipped.first.len() < SHOWN_ERRORS {
                    skipped.first.push(format!("line {line}: {why}"));
                }
            }
        }
    }
    (series, skipped)
}

/// Views from a sidecar's `/metrics` text, and the lines that did not read.
#[derive(Debug, Clone)]
pub(crate) struct FromExposition {
    pub(crate) views: Vec<GpuView>,
    pub(crate) skipped: Skipped,
    /// Where the exporter said its source is down (`truthscale_source_up` 0), in words:
    /// why its GPUs' series are gone.
    pub(crate) source_down: Option<String>,
}

/// Views from a sidecar's `/metrics` text (verdicts decided with `cfg`); lines that do not
/// read as samples are skipped and counted.
#[must_use]
pub(crate) fn views_from_exposition(body: &str, cfg: &VerdictConfig) -> FromExposition {
    // A GPU, or one MIG instance of it (its series carry the parent's `gpu` and `uuid`).
    let mut views: BTreeMap<(Option<u32>, String, Option<u32>), GpuView> = BTreeMap::new();
    let (series, skipped) = parse_series(body);
    let mut source_down = None;
    for s in series {
        if s.name == truthscale_core::catalog::SOURCE_UP.name && s.value == 0.0 {
            source_down = Some(source_down_note(s.labels.get("source").map(String::as_str)));
        }
        // The catalog's reverse map: a renamed metric breaks this at compile time.
        let Some(id) = MetricId::from_name(&s.name) else {
            continue;
        };
        let gpu = s.labels.get("gpu").and_then(|g| g.parse().ok());
        let Some(uuid) = s.labels.get("uuid").or(s.labels.get("gpu")).cloned() else {
            continue;
        };
        let mig = s.labels.get("mig_instance").and_then(|m| m.parse().ok());
        let v = views
            .entry((gpu, uuid, mig))
            .or_insert_with(|| new_view(gpu, mig, &s));
        gpu_series(v, id, &s);
    }
    let mut out: Vec<GpuView> = views.into_values().collect();
    for v in &mut out {
        v.decide(cfg);
        if let Some(x) = v.effective {
            v.history.push(x);
        }
    }
    FromExposition {
        views: out,
        skipped,
        source_down,
    }
}

/// Why a sidecar serves no GPU: its source (`source`, its label) is down.
fn source_down_note(source: Option<&str>) -> String {
    format!(
        "the exporter's source{} is down ({} 0), so its GPUs' series are gone; its log and {} say why",
        source.map_or(String::new(), |s| format!(" {s}")),
        truthscale_core::catalog::SOURCE_UP.name,
        truthscale_core::catalog::SOURCE_ERRORS.name,
    )
}

/// One GPU series read back onto its view: the derived values, the readings exported as
/// is, the straggler gaps, the phase, the clock events and the serving engine's.
fn gpu_series(v: &mut GpuView, id: MetricId, s: &Series) {
    let x = Some(s.value);
    // The readings exported as is, read back (the catalog says which).
    if let Some(raw) = id.desc().raw.filter(|r| r.kind == RawKind::PassThrough) {
        v.readings.set_value(raw.field, raw.read_back(s.value));
    }
    let label = |k: &str| s.labels.get(k).map(String::as_str).unwrap_or("");
    match id {
        MetricId::Gpu(GpuMetric::GpuReportedUtilization) => v.reported = x,
        MetricId::Gpu(GpuMetric::GpuEffectiveCompute) => v.effective = x,
        MetricId::Gpu(GpuMetric::GpuEffectiveComputeUpperBound) => v.upper_bound = x,
        MetricId::Gpu(GpuMetric::GpuRooflineSaturation) => v.saturation = x,
        MetricId::Gpu(GpuMetric::GpuTensorActive) => v.tensor = x,
        MetricId::Gpu(GpuMetric::GpuDramActive) => v.dram = x,
        MetricId::Gpu(GpuMetric::PodEffectiveComputeEstimate) => {
            v.pod_estimates.push(estimate_of(s));
        }
        MetricId::Gpu(GpuMetric::GpuStragglerGap | GpuMetric::GpuWaitingOnStraggler) => {
            let field = match label("signal") {
                "sm_clock" => Field::StragglerClockGap,
                "effective_compute" => Field::StragglerComputeGap,
                _ => Field::StragglerWaitGap,
            };
            v.readings.set_value(field, s.value);
            v.job = Some(label("job_group").to_string());
        }
        // The regime for every GPU; the serving phase (written after it) where serving.
        MetricId::Gpu(GpuMetric::GpuRegime | GpuMetric::GpuPhase) if s.value == 1.0 => {
            let name = label(if id == MetricId::Gpu(GpuMetric::GpuRegime) {
                "regime"
            } else {
                "phase"
            });
            v.phase = Some(if label("method") == "power_heuristic" {
                format!("{name} (estimate)")
            } else {
                name.to_string()
            });
        }
        MetricId::Gpu(GpuMetric::GpuClockEvent) => {
            let t = v.throttles.get_or_insert_with(Throttles::default);
            if s.value == 1.0 {
                t.set_by_name(label("reason"));
            }
        }
        MetricId::Serving(sm) => serving_series(v, sm, s),
        _ => {}
    }
}

/// A serving engine's series read back onto the view (the engine's entry made by the
/// first of them).
fn serving_series(v: &mut GpuView, id: ServingMetric, s: &Series) {
    use ServingMetric as M;
    let label = |k: &str| s.labels.get(k).map(String::as_str).unwrap_or("");
    let x = Some(s.value);
    fn set<'a>(v: &'a mut GpuView, s: &Series) -> &'a mut ServingSnapshot {
        let engine = s.labels.get("engine").map_or("", String::as_str);
        v.serving.get_or_insert_with(|| v_serving(engine))
    }
    match id {
        M::ServingEngineUp if s.value == 0.0 => {
            set(v, s).absent_reason = Some(label("absent_reason").to_string());
        }
        M::ServingEngineUp => {
            set(v, s);
        }
        M::ServingKvCacheUsage => set(v, s).kv_cache_utilization = x,
        M::ServingRequestsRunning => set(v, s).running_requests = x,
        M::ServingRequestsWaiting => set(v, s).queued_requests = x,
        M::ServingPromptTokens => set(v, s).prompt_tokens_per_sec = x,
        M::ServingOutputTokens => set(v, s).output_tokens_per_sec = x,
        _ => {}
    }
}

/// A GPU's view from the labels of its first series.
fn new_view(gpu: Option<u32>, mig: Option<u32>, s: &Series) -> GpuView {
    let model = s.labels.get("model");
    // As a derived window's entity names it: `gpu 0 gi 2`.
    let instance = mig.map(|i| format!(" gi {i}")).unwrap_or_default();
    GpuView {
        gpu,
        name: match (gpu, model) {
            (Some(g), Some(m)) => format!("gpu {g}{instance} ({m})"),
            (Some(g), None) => format!("gpu {g}{instance}"),
            (None, _) => s.labels.get("uuid").cloned().unwrap_or_default() + &instance,
        },
        spec: model.and_then(|m| gpus::lookup(m)),
        mig,
        simulated: s.labels.get("source").is_some_and(|x| x == "sim")
            || model.is_some_and(|m| m.starts_with("Simulated ")),
        ..GpuView::default()
    }
}

/// A holder's estimate read from its `truthscale_pod_effective_compute_estimate_ratio`.
fn estimate_of(s: &Series) -> PodEstimate {
    let get = |k: &str| s.labels.get(k).filter(|v| !v.is_empty()).cloned();
    let pod = get("pod").map(|pod| truthscale_core::model::PodRef {
        pod,
        namespace: get("namespace"),
        container: None,
    });
    PodEstimate {
        pod: pod_name(pod.as_ref()),
        value: s.value,
        method: get("method").unwrap_or_default(),
    }
}

fn v_serving(engine: &str) -> ServingSnapshot {
    ServingSnapshot {
        engine: (!engine.is_empty()).then(|| engine.to_string()),
        ..ServingSnapshot::default()
    }
}

/// `GET url` (a sidecar's `/metrics`; a bare `http://host:port` gets `/metrics` added).
///
/// # Errors
/// Unreachable, or not HTTP 200.
pub(crate) fn fetch_metrics(url: &str) -> anyhow::Result<String> {
    let url = if url.trim_end_matches('/').matches('/').count() <= 2 {
        format!("{}/metrics", url.trim_end_matches('/'))
    } else {
        url.to_string()
    };
    let agent = crate::client::agent(Duration::from_secs(5));
    Ok(crate::client::get_text(
        &agent,
        &url,
        "text/plain",
        crate::client::MAX_METRICS_BODY,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sidecar whose source is down serves no GPU series: the views say why, naming the
    /// source; one that is up says nothing of it.
    #[test]
    fn a_source_that_is_down_is_said() {
        let down = "truthscale_source_up{source=\"dcgm-exporter\"} 0\n";
        let read = views_from_exposition(down, &VerdictConfig::default());
        assert!(read.views.is_empty());
        assert_eq!(
            read.source_down.as_deref(),
            Some(
                "the exporter's source dcgm-exporter is down (truthscale_source_up 0), so its GPUs' series are gone; its log and truthscale_source_errors_total say why"
            )
        );
        let up = "truthscale_source_up{source=\"sim\"} 1\n";
        assert_eq!(
            views_from_exposition(up, &VerdictConfig::default()).source_down,
            None
        );
    }

    /// A `dcgmi dmon` row lost as the first of its sweep is told after the sweep gathered
    /// before it (its entities' windows are decided first), never before: the lost line's
    /// time is then the GPU's next window's, not observed. Another format's is told where
    /// it lies.
    #[test]
    fn a_lost_dmon_row_is_told_after_the_sweep_before_it() {
        let dir = std::env::temp_dir().join(format!("view-lost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let events = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            let (got, malformed) = read_capture(
                (&path, 1.0),
                |_| Vec::new(),
                |got: &mut Vec<Option<usize>>, s| got.push(s.map(|s| s.entities.len())),
            )
            .unwrap();
            assert_eq!(malformed, 1);
            got
        };
        let dmon =
            "#Entity GPUTL\nID\nGPU 0 10\nGPU 1 20\nGPU 0 1x\nGPU 1 21\nGPU 0 12\nGPU 1 22\n";
        assert_eq!(events("d.txt", dmon), [Some(2), None, Some(1), Some(2)]);
        let jsonl = "{\"taken\":\"2026-01-01T00:00:01Z\",\"gpu\":0}\n{\"taken\n{\"taken\":\"2026-01-01T00:00:03Z\",\"gpu\":0}\n";
        assert_eq!(events("t.jsonl", jsonl), [Some(1), None, Some(1)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The history is a time axis: a window without effective compute (here its clock a
    /// sentinel, so only a bound) is a hole, drawn blank, where it had been left out and
    /// the windows on either side of it drawn as neighbours.
    #[test]
    fn a_window_without_effective_compute_is_a_hole_in_the_history() {
        let dir = std::env::temp_dir().join(format!("view-hole-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = |t: u32, clock: f64| {
            format!(
                "{{\"gpu\":0,\"model\":\"NVIDIA H100 80GB HBM3\",\"taken\":\"2026-01-01T00:00:{t:02}Z\",\"gpu_util\":0.9,\"tensor_active\":0.5,\"dram_active\":0.1,\"sm_clock_mhz\":{clock}}}\n"
            )
        };
        let trace: String = (1..=5)
            .map(|t| line(t, if t == 3 { 2_147_483_647.0 } else { 1830.0 }))
            .collect();
        let path = dir.join("hole.jsonl");
        std::fs::write(&path, trace).unwrap();
        let derive = DeriveConfig::default();
        let (v, malformed) =
            views_from_replay((&path, 1.0), &derive, &VerdictConfig::default()).unwrap();
        assert_eq!(malformed, 0);
        let h = &v[0].history;
        assert_eq!(h.len(), 5, "{h:?}");
        assert!(h[2].is_nan(), "{h:?}");
        for k in [0, 1, 3, 4] {
            assert!((h[k] - 0.5).abs() < 1e-9, "{h:?}");
        }
        assert_eq!(crate::commands::top::sparkline(h, 5), "▅▅ ▅▅");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn labels_with_escapes() {
        let (s, skipped) =
            parse_series(r#"truthscale_gpu_up{gpu="0",model="a \"b\"",absent_reason="x, y"} 1"#);
        assert_eq!(skipped, Skipped::default());
        assert_eq!(s[0].labels["model"], "a \"b\"");
        assert_eq!(s[0].labels["absent_reason"], "x, y");
    }

    /// Lines of a sidecar's `/metrics` that do not read as samples are skipped, counted and
    /// named by line; the rest is read.
    #[test]
    fn malformed_exposition_lines_are_counted_not_dropped() {
        let body = "truthscale_gpu_effective_compute_ratio{gpu=\"0\",model=\"M\"} 0.25\n\
            truthscale_gpu_tensor_active_ratio{gpu=\"0\",model=\"M\"} 0.4abc\n\
            # a comment\n\
            truthscale_gpu_dram_active_ratio{gpu=\"0\",model=\"M\",uuid=\"GPU-x\\q\"} 0.1\n";
        let read = views_from_exposition(body, &VerdictConfig::default());
        assert_eq!(read.views.len(), 1);
        assert_eq!(read.views[0].effective, Some(0.25));
        assert_eq!(read.views[0].tensor, None);
        assert_eq!(read.skipped.count, 2);
        assert!(
            read.skipped.first[0].starts_with("line 2: "),
            "{:?}",
            read.skipped
        );
        assert!(
            read.skipped.first[1].starts_with("line 4: "),
            "{:?}",
            read.skipped
        );
        let note = read.skipped.note().unwrap();
        assert!(
            note.starts_with("2 malformed line(s) of /metrics skipped (line 2: "),
            "{note}"
        );
    }

    #[test]
    fn exposition_round_trip_gives_the_verdict() {
        let body = "truthscale_gpu_reported_utilization_ratio{gpu=\"0\",model=\"M\"} 0.99\n\
            truthscale_gpu_effective_compute_ratio{gpu=\"0\",model=\"M\"} 0.015\n\
            truthscale_gpu_roofline_saturation_ratio{gpu=\"0\",model=\"M\"} 0.19\n\
            truthscale_gpu_tensor_active_ratio{gpu=\"0\",model=\"M\"} 0.015\n\
            truthscale_gpu_dram_active_ratio{gpu=\"0\",model=\"M\"} 0.19\n\
            truthscale_serving_engine_up{gpu=\"0\",model=\"M\",engine=\"\",absent_reason=\"cannot reach x\"} 0\n";
        let v = views_from_exposition(body, &VerdictConfig::default()).views;
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].name, "gpu 0 (M)");
        let r = v[0].verdict.as_ref().unwrap();
        assert_eq!(r.verdict.as_str(), "starved");
        assert!(
            r.missing
                .contains(&"serving engine: cannot reach x".to_string())
        );
        // Nothing says why: the cause is unknown, not guessed.
        assert_eq!(r.cause, Some(truthscale_core::causes::Cause::Unknown));
    }

    /// The EFFECTIVE sparkline holds effective compute alone: a GPU read through its
    /// busy flag (an upper bound) or its saturation alone gets no point, never one of those
    /// under effective's name.
    #[test]
    fn the_sparkline_holds_effective_compute_alone() {
        let body = "truthscale_gpu_effective_compute_ratio{gpu=\"0\",model=\"M\"} 0.25\n\
            truthscale_gpu_effective_compute_upper_bound_ratio{gpu=\"1\",model=\"M\"} 0.9\n\
            truthscale_gpu_roofline_saturation_ratio{gpu=\"1\",model=\"M\"} 0.4\n";
        let v = views_from_exposition(body, &VerdictConfig::default()).views;
        let history = |name: &str| {
            v.iter()
                .find(|g| g.name == name)
                .map(|g| g.history.clone())
                .unwrap()
        };
        assert_eq!(history("gpu 0 (M)"), [0.25]);
        assert!(history("gpu 1 (M)").is_empty());
    }

    /// Read again and again (`top --url`), each view's history holds its own effective
    /// compute alone: a GPU with a bound and saturation only has none, and the MIG
    /// instances of one GPU each keep their own.
    #[test]
    fn histories_carried_over_scrapes_hold_each_views_effective_compute() {
        let mut histories = BTreeMap::new();
        let bound = "truthscale_gpu_effective_compute_upper_bound_ratio{gpu=\"1\",model=\"M\"} 0.9\n\
            truthscale_gpu_roofline_saturation_ratio{gpu=\"1\",model=\"M\"} 0.4\n";
        let l = |i: u32| format!("gpu=\"0\",uuid=\"GPU-a\",mig_instance=\"{i}\",model=\"M\"");
        let migs = format!(
            "truthscale_gpu_effective_compute_ratio{{{}}} 0.1\n\
             truthscale_gpu_effective_compute_ratio{{{}}} 0.7\n",
            l(1),
            l(2)
        );
        let body = format!("{bound}{migs}");
        let mut last = Vec::new();
        for _ in 0..2 {
            last = views_from_exposition(&body, &VerdictConfig::default()).views;
            carry_histories(&mut histories, &mut last);
        }
        let history = |name: &str| {
            last.iter()
                .find(|g| g.name == name)
                .map(|g| g.history.clone())
                .unwrap()
        };
        let h = history("gpu 1 (M)");
        assert!(h.len() == 2 && h.iter().all(|x| x.is_nan()), "{h:?}");
        assert_eq!(history("gpu 0 gi 1 (M)"), [0.1, 0.1]);
        assert_eq!(history("gpu 0 gi 2 (M)"), [0.7, 0.7]);
    }

    /// The MIG instances of one GPU are views of their own (their series carry the
    /// parent's `gpu` and `uuid`), each with its own values.
    #[test]
    fn each_mig_instance_is_a_view_of_its_own() {
        let l = |i: u32| format!("gpu=\"0\",uuid=\"GPU-a\",mig_instance=\"{i}\",model=\"M\"");
        let body = format!(
            "truthscale_gpu_effective_compute_ratio{{{}}} 0.1\n\
             truthscale_gpu_effective_compute_ratio{{{}}} 0.7\n\
             truthscale_gpu_effective_compute_ratio{{gpu=\"1\",uuid=\"GPU-b\",model=\"M\"}} 0.3\n",
            l(1),
            l(2)
        );
        let v = views_from_exposition(&body, &VerdictConfig::default()).views;
        let got: Vec<(&str, Option<f64>)> =
            v.iter().map(|v| (v.name.as_str(), v.effective)).collect();
        assert_eq!(
            got,
            [
                ("gpu 0 gi 1 (M)", Some(0.1)),
                ("gpu 0 gi 2 (M)", Some(0.7)),
                ("gpu 1 (M)", Some(0.3))
            ]
        );
    }

    /// `top` on a sidecar's `/metrics` decides a starved GPU's cause from the gauges it
    /// reads back: PCIe receive at 0.9 of a Gen4 x16 link (31.5 GB/s) with the SMs waiting.
    #[test]
    fn exposition_round_trip_gives_the_cause() {
        let rx = 0.9 * 16e9 * 16.0 * 128.0 / 130.0 / 8.0;
        let body = format!(
            "truthscale_gpu_reported_utilization_ratio{{gpu=\"0\",model=\"NVIDIA H100 80GB HBM3\"}} 0.99\n\
             truthscale_gpu_roofline_saturation_ratio{{gpu=\"0\",model=\"NVIDIA H100 80GB HBM3\"}} 0.1\n\
             truthscale_gpu_sm_active_ratio{{gpu=\"0\",model=\"NVIDIA H100 80GB HBM3\"}} 0.3\n\
             truthscale_gpu_pcie_receive_bytes_per_second{{gpu=\"0\",model=\"NVIDIA H100 80GB HBM3\"}} {rx}\n\
             truthscale_gpu_pcie_link_generation{{gpu=\"0\",model=\"NVIDIA H100 80GB HBM3\"}} 4\n\
             truthscale_gpu_pcie_link_width{{gpu=\"0\",model=\"NVIDIA H100 80GB HBM3\"}} 16\n"
        );
        let v = views_from_exposition(&body, &VerdictConfig::default()).views;
        let r = v[0].verdict.as_ref().unwrap();
        assert_eq!(r.verdict.as_str(), "starved");
        assert_eq!(r.cause, Some(truthscale_core::causes::Cause::HostToDevice));
        assert!(
            r.action
                .starts_with("copies from the host fill the PCIe link")
        );
        assert_eq!(
            r.reasons[1],
            "the wait is host_to_device (pcie_rx_share_of_link 0.90, at or above 0.70)"
        );
    }
}
