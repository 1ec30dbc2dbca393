//! What each catalog entry's value is: one exhaustive match from [`MetricId`] to the value
//! of a GPU entity or of the exporter itself.

use super::{ExporterStatus, GpuEntry};
use crate::catalog::{MetricDesc, MetricId};
use crate::model::{Field, Phase, SourceKind};
use crate::phase::PhaseMethod;
use crate::tracker::EntityWindow;
use crate::verdict::Verdict;

const CLOCK_REASONS: [&str; 5] = [
    "power",
    "thermal",
    "sync_boost",
    "hw_slowdown",
    "sw_power_cap",
];

/// The label of the regime families (`regime`, regime names) or of the serving-phase
/// families (`phase`, prefill and decode), and whether the names are the serving ones.
fn naming(serving_family: bool) -> (&'static str, bool) {
    if serving_family {
        ("phase", true)
    } else {
        ("regime", false)
    }
}

/// `value` when its input was measured for some time, else nothing (never a fake zero).
fn measured(observed_seconds: f64, value: f64) -> Option<f64> {
    (observed_seconds > 0.0).then_some(value)
}

fn bool_f(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

pub(super) fn gpu_values<'a>(
    m: &MetricDesc,
    g: &'a GpuEntry,
    mut push: impl FnMut(Vec<(&'static str, &'a str)>, f64),
) {
    let id = m.id;
    if id == MetricId::GpuUp {
        push(Vec::new(), bool_f(g.up));
        return;
    }
    if !g.up {
        return;
    }
    let win = &g.window;
    let x = &win.metrics;
    let r = &win.readings;
    let t = &win.totals;
    let mut one = |v: Option<f64>| {
        if let Some(v) = v {
            push(Vec::new(), v);
        }
    };
    match id {
        MetricId::GpuInfo => {
            // Simulated data says so, replayed or live.
            let source = if win.simulated {
                SourceKind::Sim.as_str()
            } else {
                g.source
            };
            push(
                vec![
                    ("source", source),
                    ("fidelity", win.capability.as_str()),
                    ("catalog_model", win.spec.map_or("unknown", |s| s.key)),
                ],
                1.0,
            );
        }
        MetricId::GpuReportedUtilization => one(x.reported_utilization),
        MetricId::GpuEffectiveCompute => one(x.effective_compute),
        MetricId::GpuEffectiveComputeUpperBound => one(x.effective_compute_upper_bound),
        MetricId::GpuRooflineSaturation => one(x.roofline_saturation),
        MetricId::GpuInflationGap => one(x.inflation_gap_points.map(|p| p / 100.0)),
        MetricId::GpuSpatialInflation => one(x.spatial_inflation),
        MetricId::GpuIntensityRidge => one(x.rho),
        MetricId::GpuPowerProxy => one(x.power_proxy),
        MetricId::GpuClockCorrection => one(x.kappa),
        MetricId::GpuSmActive => one(r.value(Field::SmActive)),
        MetricId::GpuSmOccupancy => one(r.value(Field::SmOccupancy)),
        MetricId::GpuTensorActive => one(r.value(Field::TensorActive)),
        MetricId::GpuHmmaActive => one(r.value(Field::HmmaActive)),
        MetricId::GpuImmaActive => one(r.value(Field::ImmaActive)),
        MetricId::GpuDramActive => one(r.value(Field::DramActive)),
        MetricId::GpuObservedSeconds => one(Some(t.observed_seconds)),
        // Counted from the entity's first window: 0 is a measurement (nothing was missed).
        MetricId::GpuUnobservedSeconds => one(Some(t.unobserved_seconds)),
        // An integral is written only for an entity that had its input; its denominator
        // beside it, so that increase(x) / increase(denominator) is the exact mean.
        MetricId::GpuBusySeconds => {
            one(measured(t.busy_observed_seconds, t.busy_seconds));
        }
        MetricId::GpuBusyObservedSeconds => {
            one(measured(t.busy_observed_seconds, t.busy_observed_seconds));
        }
        MetricId::GpuEffectiveComputeSeconds => {
            one(measured(
                t.effective_compute_observed_seconds,
                t.effective_compute_seconds,
            ));
        }
        MetricId::GpuEffectiveComputeObservedSeconds => one(measured(
            t.effective_compute_observed_seconds,
            t.effective_compute_observed_seconds,
        )),
        MetricId::SimTruthEffectiveComputeSeconds => {
            one(t.truth_effective_compute_seconds);
        }
        MetricId::GpuRegimeSeconds | MetricId::GpuPhaseSeconds => {
            // Serving words only where the workload is LLM serving.
            if id == MetricId::GpuPhaseSeconds && !win.llm_serving {
                return;
            }
            let (label, serving) = naming(id == MetricId::GpuPhaseSeconds);
            for method in PhaseMethod::ALL {
                let secs = &t.phase_seconds[method.index()];
                // Only the methods this entity was classified by: none is a fake zero.
                if secs.iter().all(|s| *s == 0.0) && win.phase_method != Some(method) {
                    continue;
                }
                for p in Phase::ALL {
                    push(
                        vec![(label, p.name_for(serving)), ("method", method.as_str())],
                        secs[p.index()],
                    );
                }
            }
        }
        MetricId::GpuRegime | MetricId::GpuPhase => {
            if id == MetricId::GpuPhase && !win.llm_serving {
                return;
            }
            let (label, serving) = naming(id == MetricId::GpuPhase);
            if let (Some(cur), Some(method)) = (win.phase, win.phase_method) {
                for p in Phase::ALL {
                    push(
                        vec![(label, p.name_for(serving)), ("method", method.as_str())],
                        bool_f(p == cur),
                    );
                }
            }
        }
        MetricId::GpuMemoryUsed => one(r.value(Field::MemUsedBytes)),
        MetricId::GpuMemoryTotal => one(r.value(Field::MemTotalBytes)),
        MetricId::GpuPower => one(x.power_watts.map(|p| p.value)),
        MetricId::GpuPowerLimit => one(r.value(Field::PowerLimitWatts)),
        MetricId::GpuEnergy => {
            one(measured(t.energy_observed_seconds, t.energy_joules));
        }
        MetricId::GpuEnergyObservedSeconds => one(measured(
            t.energy_observed_seconds,
            t.energy_observed_seconds,
        )),
        MetricId::GpuSmClock => one(r.value(Field::SmClockMhz).map(|f| f * 1e6)),
        MetricId::GpuTemperature => one(r.value(Field::TempCelsius)),
        MetricId::GpuClockEvent => {
            if let Some(th) = &win.throttles {
                let on = th.names();
                for reason in CLOCK_REASONS {
                    push(vec![("reason", reason)], bool_f(on.contains(&reason)));
                }
            }
        }
        MetricId::GpuVerdict => {
            let cur = win.verdict.verdict;
            for v in Verdict::ALL {
                push(vec![("verdict", v.as_str())], bool_f(v == cur));
            }
        }
        MetricId::GpuCeilingRooflineSaturation => {
            one(win.ceilings.roofline_saturation.map(|c| c.value));
        }
        MetricId::GpuCeilingOutputTokens => {
            one(win.ceilings.output_tokens_per_second.map(|c| c.value));
        }
        MetricId::GpuCeilingAge | MetricId::GpuCeilingRatio => {
            let tokens = win
                .serving
                .as_ref()
                .filter(|s| s.absent_reason.is_none())
                .and_then(|s| s.output_tokens_per_sec);
            for (quantity, ceiling, current) in [
                (
                    "roofline_saturation",
                    win.ceilings.roofline_saturation,
                    x.roofline_saturation,
                ),
                (
                    "output_tokens_per_second",
                    win.ceilings.output_tokens_per_second,
                    tokens,
                ),
            ] {
                let Some(c) = ceiling else { continue };
                let v = if id == MetricId::GpuCeilingAge {
                    Some(c.age_seconds)
                } else {
                    c.ratio(current)
                };
                if let Some(v) = v {
                    push(vec![("quantity", quantity)], v);
                }
            }
        }
        MetricId::ServingEngineUp
        | MetricId::ServingKvCacheUsage
        | MetricId::ServingRequestsRunning
        | MetricId::ServingRequestsWaiting
        | MetricId::ServingQueueSeconds
        | MetricId::ServingPromptTokens
        | MetricId::ServingOutputTokens
        | MetricId::ServingBatchSize
        | MetricId::ServingTokensPerEffectiveCompute
        | MetricId::ServingMfu
        | MetricId::ServingMbu
        | MetricId::ServingEngineMfu
        | MetricId::ServingEngineMbu
        | MetricId::ServingComputeAgreement
        | MetricId::ServingBandwidthAgreement
        | MetricId::ServingPhaseComparedSeconds
        | MetricId::ServingPhaseAgreedSeconds => {
            serving_values(id, win, push);
        }
        MetricId::ProcessMemoryUsed | MetricId::ProcessSmBusy => {
            for p in &win.processes {
                let v = if id == MetricId::ProcessMemoryUsed {
                    p.used_memory_bytes
                } else {
                    p.sm_busy
                };
                if let Some(v) = v {
                    push(
                        vec![
                            ("pid", p.pid.as_str()),
                            ("pod_uid", p.pod_uid.as_deref().unwrap_or("")),
                            ("container_id", p.container_id.as_deref().unwrap_or("")),
                        ],
                        v,
                    );
                }
            }
        }
        MetricId::GpuPods => {
            if let Some(a) = &win.allocation {
                push(Vec::new(), a.len() as f64);
            }
        }
        MetricId::GpuAllocation => {
            let attributed = win.id.pod.as_ref().is_some_and(|p| !p.pod.is_empty());
            for h in win.allocation.iter().flatten() {
                let mut labels = Vec::with_capacity(5);
                // An entity attributed to its one holder has the holder's pod labels already.
                if !attributed {
                    labels.push(("pod", h.pod.pod.as_str()));
                    if let Some(n) = &h.pod.namespace {
                        labels.push(("namespace", n.as_str()));
                    }
                    if let Some(c) = &h.pod.container {
                        labels.push(("container", c.as_str()));
                    }
                }
                labels.push(("resource", h.resource.as_str()));
                if let Some(r) = &h.replica {
                    labels.push(("replica", r.as_str()));
                }
                // The holder's pod's allowlisted labels (node.pod_labels), only those it has.
                labels.extend(
                    h.labels
                        .iter()
                        .filter(|(_, v)| !v.is_empty())
                        .map(|(k, v)| (*k, v.as_str())),
                );
                push(labels, 1.0);
            }
        }
        MetricId::PodEffectiveCompute | MetricId::PodMemoryUsed => {
            pod_share_values(id, win, push);
        }
        // Not per GPU (or handled above): nothing here.
        MetricId::GpuUp
        | MetricId::BuildInfo
        | MetricId::SourceUp
        | MetricId::SourceErrors
        | MetricId::SampleDuration
        | MetricId::Diagnostics
        | MetricId::SnapshotTimestamp
        | MetricId::ScrapeBody
        | MetricId::SinkErrors
        | MetricId::SeriesDropped => {}
    }
}

/// The per-pod parts of a shared GPU (node mode, per-process attribution on): only for a
/// device no single pod holds, with its processes listed.
fn pod_share_values<'a>(
    id: MetricId,
    win: &'a EntityWindow,
    mut push: impl FnMut(Vec<(&'static str, &'a str)>, f64),
) {
    let attributed = win.id.pod.as_ref().is_some_and(|p| !p.pod.is_empty());
    if attributed || win.allocation.is_none() || win.processes.is_empty() {
        return;
    }
    let Some(parts) = crate::share::by_pod(&win.processes) else {
        return;
    };
    let labels = |pod: Option<&'a crate::model::PodRef>| {
        let mut l = Vec::with_capacity(4);
        if let Some(p) = pod {
            l.push(("pod", p.pod.as_str()));
            if let Some(n) = &p.namespace {
                l.push(("namespace", n.as_str()));
            }
            if let Some(c) = &p.container {
                l.push(("container", c.as_str()));
            }
        }
        l
    };
    if id == MetricId::PodMemoryUsed {
        for part in &parts {
            if let Some(m) = part.memory_bytes {
                push(labels(part.pod), m);
            }
        }
        return;
    }
    let Some(device) = win.metrics.effective_compute else {
        return;
    };
    let weights: Vec<f64> = parts.iter().map(|p| p.sm_busy).collect();
    if let Some(values) = crate::share::apportion(device, &weights) {
        for (part, v) in parts.iter().zip(values) {
            let mut l = labels(part.pod);
            l.push(("method", "sm_busy_share"));
            push(l, v);
        }
    }
}

/// Below this effective compute fraction, tokens per effective-compute second is not
/// published (the ratio would only amplify noise).
const MIN_ECF_FOR_TOKENS: f64 = 0.01;

fn serving_values<'a>(
    id: MetricId,
    win: &'a EntityWindow,
    mut push: impl FnMut(Vec<(&'static str, &'a str)>, f64),
) {
    let Some(sv) = &win.serving else { return };
    let engine = sv.engine.as_deref().unwrap_or("");
    if id == MetricId::ServingEngineUp {
        match &sv.absent_reason {
            Some(r) => push(vec![("engine", engine), ("absent_reason", r.as_str())], 0.0),
            None => push(vec![("engine", engine), ("absent_reason", "")], 1.0),
        }
        return;
    }
    if sv.absent_reason.is_some() {
        return;
    }
    let t = &win.totals;
    if matches!(
        id,
        MetricId::ServingPhaseComparedSeconds | MetricId::ServingPhaseAgreedSeconds
    ) {
        if t.phase_compared_seconds > 0.0 {
            let v = if id == MetricId::ServingPhaseComparedSeconds {
                t.phase_compared_seconds
            } else {
                t.phase_agreed_seconds
            };
            push(vec![("engine", engine)], v);
        }
        return;
    }
    let value = match id {
        MetricId::ServingKvCacheUsage => sv.kv_cache_utilization,
        MetricId::ServingRequestsRunning => sv.running_requests,
        MetricId::ServingRequestsWaiting => sv.queued_requests,
        MetricId::ServingQueueSeconds => sv.queue_seconds,
        MetricId::ServingPromptTokens => sv.prompt_tokens_per_sec,
        MetricId::ServingOutputTokens => sv.output_tokens_per_sec,
        MetricId::ServingBatchSize => sv.batch_size,
        MetricId::ServingTokensPerEffectiveCompute => {
            // Both rates or none: a missing one is not a zero.
            let tokens = match (sv.prompt_tokens_per_sec, sv.output_tokens_per_sec) {
                (Some(p), Some(o)) => Some(p + o),
                _ => None,
            };
            match (tokens, win.metrics.effective_compute) {
                (Some(t), Some(e)) if e >= MIN_ECF_FOR_TOKENS => Some(t / e),
                _ => None,
            }
        }
        MetricId::ServingEngineMfu | MetricId::ServingEngineMbu => {
            let v = if id == MetricId::ServingEngineMfu {
                sv.engine_mfu
            } else {
                sv.engine_mbu
            };
            if let Some(v) = v {
                let a = sv.engine_assumptions.as_deref().unwrap_or("");
                push(vec![("engine", engine), ("assumptions", a)], v);
            }
            return;
        }
        MetricId::ServingComputeAgreement | MetricId::ServingBandwidthAgreement => {
            let (estimate, measured, labels) = if id == MetricId::ServingComputeAgreement {
                (
                    sv.engine_mfu,
                    win.metrics.effective_compute,
                    ("engine_flops", "effective_compute"),
                )
            } else {
                (
                    sv.engine_mbu,
                    win.readings.value(Field::DramActive),
                    ("engine_bytes", "dram_active"),
                )
            };
            if let (Some(e), Some(m)) = (estimate, measured)
                && m >= MIN_ECF_FOR_TOKENS
            {
                push(
                    vec![
                        ("engine", engine),
                        ("estimate", labels.0),
                        ("measure", labels.1),
                    ],
                    e / m,
                );
            }
            return;
        }
        MetricId::ServingMfu | MetricId::ServingMbu => {
            let v = if id == MetricId::ServingMfu {
                sv.mfu
            } else {
                sv.mbu
            };
            if let Some(v) = v {
                let a = sv.assumptions.as_deref().unwrap_or("");
                push(vec![("engine", engine), ("assumptions", a)], v);
            }
            return;
        }
        // Handled above, or not a serving metric (never routed here).
        MetricId::GpuInfo
        | MetricId::GpuUp
        | MetricId::GpuReportedUtilization
        | MetricId::GpuEffectiveCompute
        | MetricId::GpuEffectiveComputeUpperBound
        | MetricId::GpuRooflineSaturation
        | MetricId::GpuInflationGap
        | MetricId::GpuSpatialInflation
        | MetricId::GpuIntensityRidge
        | MetricId::GpuPowerProxy
        | MetricId::GpuClockCorrection
        | MetricId::GpuSmActive
        | MetricId::GpuSmOccupancy
        | MetricId::GpuTensorActive
        | MetricId::GpuHmmaActive
        | MetricId::GpuImmaActive
        | MetricId::GpuDramActive
        | MetricId::GpuObservedSeconds
        | MetricId::GpuUnobservedSeconds
        | MetricId::GpuBusySeconds
        | MetricId::GpuBusyObservedSeconds
        | MetricId::GpuEffectiveComputeSeconds
        | MetricId::GpuEffectiveComputeObservedSeconds
        | MetricId::GpuRegimeSeconds
        | MetricId::GpuRegime
        | MetricId::GpuPhaseSeconds
        | MetricId::GpuPhase
        | MetricId::GpuMemoryUsed
        | MetricId::GpuMemoryTotal
        | MetricId::GpuPower
        | MetricId::GpuPowerLimit
        | MetricId::GpuEnergy
        | MetricId::GpuEnergyObservedSeconds
        | MetricId::GpuSmClock
        | MetricId::GpuTemperature
        | MetricId::GpuClockEvent
        | MetricId::GpuVerdict
        | MetricId::GpuCeilingRooflineSaturation
        | MetricId::GpuCeilingOutputTokens
        | MetricId::GpuCeilingAge
        | MetricId::GpuCeilingRatio
        | MetricId::SimTruthEffectiveComputeSeconds
        | MetricId::ProcessMemoryUsed
        | MetricId::ProcessSmBusy
        | MetricId::GpuPods
        | MetricId::GpuAllocation
        | MetricId::PodEffectiveCompute
        | MetricId::PodMemoryUsed
        | MetricId::BuildInfo
        | MetricId::SourceUp
        | MetricId::SourceErrors
        | MetricId::SampleDuration
        | MetricId::Diagnostics
        | MetricId::SnapshotTimestamp
        | MetricId::ScrapeBody
        | MetricId::SinkErrors
        | MetricId::SeriesDropped
        | MetricId::ServingEngineUp
        | MetricId::ServingPhaseAgreedSeconds
        | MetricId::ServingPhaseComparedSeconds => None,
    };
    if let Some(v) = value {
        push(vec![("engine", engine)], v);
    }
}

pub(super) fn exporter_values<'a>(
    id: MetricId,
    s: &'a ExporterStatus,
    mut push: impl FnMut(Vec<(&'static str, &'a str)>, f64),
) {
    match id {
        MetricId::BuildInfo => push(vec![("version", s.version.as_str())], 1.0),
        MetricId::SourceUp => {
            for src in &s.sources {
                push(vec![("source", src.name.as_str())], bool_f(src.up));
            }
        }
        MetricId::SourceErrors => {
            for src in &s.sources {
                for (kind, count) in &src.errors {
                    push(
                        vec![("source", src.name.as_str()), ("kind", kind.as_str())],
                        *count as f64,
                    );
                }
            }
        }
        MetricId::SampleDuration => {
            if let Some(d) = s.sample_duration_seconds {
                push(Vec::new(), d);
            }
        }
        MetricId::Diagnostics => {
            for (kind, count) in &s.diagnostics {
                push(vec![("kind", kind.as_str())], *count as f64);
            }
        }
        MetricId::SnapshotTimestamp => push(Vec::new(), s.snapshot_unix_seconds),
        MetricId::SeriesDropped => push(Vec::new(), s.series_dropped as f64),
        MetricId::SinkErrors => {
            for sink in &s.sinks {
                for (kind, count) in &sink.errors {
                    push(
                        vec![("sink", sink.name.as_str()), ("kind", kind.as_str())],
                        *count as f64,
                    );
                }
            }
        }
        MetricId::ScrapeBody => {
            if let Some(b) = s.previous_body_bytes {
                push(Vec::new(), b as f64);
            }
        }
        // Per GPU: written by gpu_values.
        MetricId::GpuInfo
        | MetricId::GpuUp
        | MetricId::GpuReportedUtilization
        | MetricId::GpuEffectiveCompute
        | MetricId::GpuEffectiveComputeUpperBound
        | MetricId::GpuRooflineSaturation
        | MetricId::GpuInflationGap
        | MetricId::GpuSpatialInflation
        | MetricId::GpuIntensityRidge
        | MetricId::GpuPowerProxy
        | MetricId::GpuClockCorrection
        | MetricId::GpuSmActive
        | MetricId::GpuSmOccupancy
        | MetricId::GpuTensorActive
        | MetricId::GpuHmmaActive
        | MetricId::GpuImmaActive
        | MetricId::GpuDramActive
        | MetricId::GpuObservedSeconds
        | MetricId::GpuUnobservedSeconds
        | MetricId::GpuBusySeconds
        | MetricId::GpuBusyObservedSeconds
        | MetricId::GpuEffectiveComputeSeconds
        | MetricId::GpuEffectiveComputeObservedSeconds
        | MetricId::GpuRegimeSeconds
        | MetricId::GpuRegime
        | MetricId::GpuPhaseSeconds
        | MetricId::GpuPhase
        | MetricId::GpuMemoryUsed
        | MetricId::GpuMemoryTotal
        | MetricId::GpuPower
        | MetricId::GpuPowerLimit
        | MetricId::GpuEnergy
        | MetricId::GpuEnergyObservedSeconds
        | MetricId::GpuSmClock
        | MetricId::GpuTemperature
        | MetricId::GpuClockEvent
        | MetricId::GpuVerdict
        | MetricId::GpuCeilingRooflineSaturation
        | MetricId::GpuCeilingOutputTokens
        | MetricId::GpuCeilingAge
        | MetricId::GpuCeilingRatio
        | MetricId::ServingEngineUp
        | MetricId::ServingKvCacheUsage
        | MetricId::ServingRequestsRunning
        | MetricId::ServingRequestsWaiting
        | MetricId::ServingQueueSeconds
        | MetricId::ServingPromptTokens
        | MetricId::ServingOutputTokens
        | MetricId::ServingBatchSize
        | MetricId::ServingTokensPerEffectiveCompute
        | MetricId::ServingMfu
        | MetricId::ServingMbu
        | MetricId::ServingEngineMfu
        | MetricId::ServingEngineMbu
        | MetricId::ServingComputeAgreement
        | MetricId::ServingBandwidthAgreement
        | MetricId::ServingPhaseComparedSeconds
        | MetricId::ServingPhaseAgreedSeconds
        | MetricId::SimTruthEffectiveComputeSeconds
        | MetricId::ProcessMemoryUsed
        | MetricId::ProcessSmBusy
        | MetricId::GpuPods
        | MetricId::GpuAllocation
        | MetricId::PodEffectiveCompute
        | MetricId::PodMemoryUsed => {}
    }
}
