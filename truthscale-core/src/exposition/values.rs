//! What each catalog entry's value is: one exhaustive match per group of [`MetricId`]
//! ([`GpuMetric`], [`ServingMetric`], [`ExporterMetric`]) to the value of a GPU entity, of
//! its serving engine, or of the exporter itself. A family that is one reading of the
//! source is written from its catalog entry ([`MetricDesc::raw`]).

use super::{ExporterStatus, ExtraLabels, GpuEntry};
use crate::catalog::{ExporterMetric, GpuMetric, MetricDesc, MetricId, RawKind, ServingMetric};
use crate::causes::Cause;
use crate::energy::PodEnergyMethod;
use crate::health::Health;
use crate::model::{Field, Phase, PodPressure, Readings, ServingSnapshot, SourceKind};
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

/// Every value of family `m`, in exposition order: `push(entity, extra labels, value)`,
/// with `entity` the index in `gpus` of the entity it belongs to (`None`: the exporter's).
pub(super) fn family_values<'a>(
    m: &MetricDesc,
    gpus: &'a [GpuEntry],
    status: &'a ExporterStatus,
    mut push: impl FnMut(Option<usize>, ExtraLabels<'a>, f64),
) {
    match m.id {
        MetricId::Gpu(id) => {
            for (i, g) in gpus.iter().enumerate() {
                gpu_values(m, id, g, |extra, v| push(Some(i), extra, v));
            }
        }
        MetricId::Serving(id) => {
            // A GPU that stopped is written only as truthscale_gpu_up 0.
            for (i, g) in gpus.iter().enumerate().filter(|(_, g)| g.up) {
                serving_values(id, &g.window, |extra, v| push(Some(i), extra, v));
            }
        }
        MetricId::Exporter(id) => exporter_values(id, status, |extra, v| push(None, extra, v)),
    }
}

/// A pass-through family's value: its reading times its scale (the catalog's [`Raw`]).
///
/// [`Raw`]: crate::catalog::Raw
fn raw_value(m: &MetricDesc, r: &crate::model::Readings) -> Option<f64> {
    let raw = m.raw.filter(|raw| raw.kind == RawKind::PassThrough);
    debug_assert!(raw.is_some(), "{} is not a pass-through family", m.name);
    raw.and_then(|raw| r.value(raw.field).map(|v| raw.export(v)))
}

/// `truthscale_gpu_info`'s own labels: simulated data says so, replayed or live; absent is
/// empty (no label, to PromQL), never a made-up value.
fn info_labels(g: &GpuEntry) -> ExtraLabels<'_> {
    let win = &g.window;
    let source = if win.simulated {
        SourceKind::Sim.as_str()
    } else {
        g.source
    };
    vec![
        ("source", source),
        ("fidelity", win.capability.as_str()),
        ("catalog_model", win.spec.map_or("unknown", |s| s.key)),
        ("pci_bus_id", win.id.pci_bus_id.as_deref().unwrap_or("")),
        (
            "driver_version",
            win.id.driver_version.as_deref().unwrap_or(""),
        ),
    ]
}

/// The observed ceilings' age and ratio, by quantity.
fn ceiling_values<'a>(
    id: GpuMetric,
    win: &'a EntityWindow,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    let x = &win.metrics;
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
        let v = if id == GpuMetric::GpuCeilingAge {
            Some(c.age_seconds)
        } else {
            c.ratio(current)
        };
        if let Some(v) = v {
            push(vec![("quantity", quantity)], v);
        }
    }
}

/// The health families: the window's health, the unavailable seconds, and the ECC and
/// violation counters by kind.
fn health_values<'a>(
    id: GpuMetric,
    win: &'a EntityWindow,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    let r = &win.readings;
    match id {
        GpuMetric::GpuHealth => {
            if let Some(h) = win.health {
                for state in Health::ALL {
                    push(vec![("state", state.as_str())], bool_f(state == h.health));
                }
            }
        }
        // Only for entities whose health was read: without it no second could be judged
        // unavailable, and its 0 would read as "never unavailable".
        GpuMetric::GpuUnavailableSeconds => {
            let t = &win.totals;
            if t.health_observed_seconds > 0.0 {
                push(Vec::new(), t.verdict_seconds[Verdict::Unavailable.index()]);
            }
        }
        GpuMetric::GpuEccErrors => {
            for (kind, field) in ECC_SERIES {
                if let Some(v) = r.value(field) {
                    push(vec![("kind", kind), ("scope", "volatile")], v);
                }
            }
        }
        GpuMetric::GpuEccAggregateErrors => {
            if let Some(v) = r.value(Field::EccDbeAggregate) {
                push(vec![("kind", "dbe")], v);
            }
        }
        GpuMetric::GpuClockViolationSeconds | GpuMetric::GpuClockEventSeconds => {
            let reasons: &[(&str, Field)] = if id == GpuMetric::GpuClockViolationSeconds {
                &VIOLATION_SERIES
            } else {
                &CLOCK_EVENT_SERIES
            };
            for &(reason, field) in reasons {
                if let Some(ns) = r.value(field) {
                    push(vec![("reason", reason)], ns / 1e9);
                }
            }
        }
        _ => {}
    }
}

/// The violation-time series: reason and the reading each is.
const VIOLATION_SERIES: [(&str, Field); 2] = [
    ("power", Field::PowerViolationNs),
    ("thermal", Field::ThermalViolationNs),
];

/// The clock-event time series: reason and the reading each is.
const CLOCK_EVENT_SERIES: [(&str, Field); 5] = [
    ("sw_power_cap", Field::ClockEventSwPowerCapNs),
    ("sync_boost", Field::ClockEventSyncBoostNs),
    ("sw_thermal", Field::ClockEventSwThermalNs),
    ("hw_thermal", Field::ClockEventHwThermalNs),
    ("hw_power_brake", Field::ClockEventHwPowerBrakeNs),
];

/// The ECC series since the driver loaded (`scope="volatile"`): kind and the reading each
/// is. The count over the device's life is a family of its own (it holds these).
const ECC_SERIES: [(&str, Field); 2] = [
    ("sbe", Field::EccSbeVolatile),
    ("dbe", Field::EccDbeVolatile),
];

fn gpu_values<'a>(
    m: &MetricDesc,
    id: GpuMetric,
    g: &'a GpuEntry,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    if id == GpuMetric::GpuUp {
        push(Vec::new(), bool_f(g.up));
        return;
    }
    if !g.up {
        return;
    }
    let win = &g.window;
    // The readings exported as is (the catalog says which), and the one-series metrics.
    let one = if m.raw.is_some_and(|raw| raw.kind == RawKind::PassThrough) {
        Some(raw_value(m, &win.readings))
    } else {
        one_value(id, win)
    };
    if let Some(v) = one {
        if let Some(v) = v {
            push(Vec::new(), v);
        }
        return;
    }
    let listed = g.list_cap.unwrap_or(usize::MAX);
    match id {
        GpuMetric::GpuInfo => push(info_labels(g), 1.0),
        GpuMetric::GpuRegimeSeconds
        | GpuMetric::GpuPhaseSeconds
        | GpuMetric::GpuRegime
        | GpuMetric::GpuPhase => regime_values(id, win, push),
        GpuMetric::GpuEnergyPart
        | GpuMetric::GpuIdleFloor
        | GpuMetric::GpuUnallocatedEnergy
        | GpuMetric::PodEnergy
        | GpuMetric::PodEnergyEstimate => energy_values(id, win, push),
        GpuMetric::GpuClockEvent | GpuMetric::GpuVerdict | GpuMetric::GpuStarvedSeconds => {
            judged_values(id, win, push);
        }
        GpuMetric::GpuCeilingAge | GpuMetric::GpuCeilingRatio => ceiling_values(id, win, push),
        GpuMetric::GpuHealth
        | GpuMetric::GpuUnavailableSeconds
        | GpuMetric::GpuEccErrors
        | GpuMetric::GpuEccAggregateErrors
        | GpuMetric::GpuClockViolationSeconds
        | GpuMetric::GpuClockEventSeconds => health_values(id, win, push),
        GpuMetric::ProcessMemoryUsed
        | GpuMetric::ProcessSmBusy
        | GpuMetric::GpuPods
        | GpuMetric::GpuAllocation
        | GpuMetric::PodEffectiveCompute => holder_values(id, win, listed, push),
        GpuMetric::PodEffectiveComputeEstimate | GpuMetric::PodMemoryUsed => {
            pod_share_values(id, win, push);
        }
        GpuMetric::GpuStragglerGap | GpuMetric::GpuWaitingOnStraggler => {
            straggler_values(id, win, push);
        }
        GpuMetric::PodCpuThrottled
        | GpuMetric::PodCpuLimit
        | GpuMetric::PodCpuWaiting
        | GpuMetric::PodIoWaiting
        | GpuMetric::PodIoStalled
        | GpuMetric::PodMemoryStalled => pod_pressure_values(id, win, push),
        // Written above: up for a GPU that stopped too, the readings exported as is and
        // the one-series metrics.
        _ => {}
    }
}

/// The value of a metric that is one series without labels of its own: `Some(None)` where
/// the entity has none, `None` for a metric of any other shape.
fn one_value(id: GpuMetric, win: &EntityWindow) -> Option<Option<f64>> {
    let x = &win.metrics;
    let t = &win.totals;
    Some(match id {
        GpuMetric::GpuEffectiveCompute => x.effective_compute,
        GpuMetric::GpuEffectiveComputeUpperBound => x.effective_compute_upper_bound,
        GpuMetric::GpuRooflineSaturation => x.roofline_saturation,
        GpuMetric::GpuInflationGap => x.inflation_gap_points.map(|p| p / 100.0),
        GpuMetric::GpuInflationGapLowerBound => x.inflation_gap_points_at_least.map(|p| p / 100.0),
        GpuMetric::GpuSpatialInflation => x.spatial_inflation,
        GpuMetric::GpuIntensityRidge => x.rho,
        GpuMetric::GpuPowerProxy => x.power_proxy,
        GpuMetric::GpuClockCorrection => x.kappa,
        GpuMetric::GpuObservedSeconds => Some(t.observed_seconds),
        GpuMetric::GpuIdleSeconds => win.idle_seconds,
        GpuMetric::GpuMemoryUtilization => memory_utilization(&win.readings),
        // Counted from the entity's first window: 0 is a measurement (nothing was missed).
        GpuMetric::GpuUnobservedSeconds => Some(t.unobserved_seconds),
        // An integral is written only for an entity that had its input; its denominator
        // beside it, so that increase(x) / increase(denominator) is the exact mean.
        GpuMetric::GpuBusySeconds => measured(t.busy_observed_seconds, t.busy_seconds),
        GpuMetric::GpuBusyObservedSeconds => {
            measured(t.busy_observed_seconds, t.busy_observed_seconds)
        }
        GpuMetric::GpuEffectiveComputeSeconds => measured(
            t.effective_compute_observed_seconds,
            t.effective_compute_seconds,
        ),
        GpuMetric::GpuSaturationObservedSeconds => {
            measured(t.saturation_observed_seconds, t.saturation_observed_seconds)
        }
        GpuMetric::GpuStarvedJudgedSeconds => {
            measured(t.starved_judged_seconds, t.starved_judged_seconds)
        }
        GpuMetric::GpuEffectiveComputeObservedSeconds => measured(
            t.effective_compute_observed_seconds,
            t.effective_compute_observed_seconds,
        ),
        GpuMetric::SimTruthEffectiveComputeSeconds => t.truth_effective_compute_seconds,
        GpuMetric::GpuPower => x.power_watts.map(|p| p.value),
        GpuMetric::GpuEnergy => measured(t.energy_observed_seconds, t.energy_joules),
        GpuMetric::GpuEnergyObservedSeconds => {
            measured(t.energy_observed_seconds, t.energy_observed_seconds)
        }
        GpuMetric::GpuCeilingRooflineSaturation => {
            win.ceilings.roofline_saturation.map(|c| c.value)
        }
        GpuMetric::GpuCeilingOutputTokens => win.ceilings.output_tokens_per_second.map(|c| c.value),
        // The share of its physical GPU the entity is: 1 for a whole GPU, a MIG instance's
        // compute slices over the GPU's; none for a MIG instance whose profile is not known.
        GpuMetric::GpuShare => match &win.id.mig {
            None => Some(1.0),
            Some(m) => win
                .spec
                .zip(m.profile.as_deref())
                .and_then(|(spec, name)| spec.share_of_profile(name)),
        },
        GpuMetric::GpuPcieReceiveSaturation
        | GpuMetric::GpuPcieReceiveSaturationLowerBound
        | GpuMetric::GpuNvlinkSaturation => link_saturation(id, win),
        _ => return None,
    })
}

/// The seconds in each regime (or serving phase) by method, or the regime the entity is in
/// now; the serving words only where the workload is LLM serving.
fn regime_values<'a>(
    id: GpuMetric,
    win: &'a EntityWindow,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    let serving_words = matches!(id, GpuMetric::GpuPhaseSeconds | GpuMetric::GpuPhase);
    if serving_words && !win.llm_serving {
        return;
    }
    let (label, serving) = naming(serving_words);
    if matches!(id, GpuMetric::GpuRegime | GpuMetric::GpuPhase) {
        if let (Some(cur), Some(method)) = (win.phase, win.phase_method) {
            for p in Phase::ALL {
                push(
                    vec![(label, p.name_for(serving)), ("method", method.as_str())],
                    bool_f(p == cur),
                );
            }
        }
        return;
    }
    for method in PhaseMethod::ALL {
        let secs = &win.totals.phase_seconds[method.index()];
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

/// The clock events of the window, the verdict, and the starved seconds by cause (only for
/// an entity whose windows were judged: no judged second, no zero).
fn judged_values<'a>(
    id: GpuMetric,
    win: &'a EntityWindow,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    match id {
        GpuMetric::GpuClockEvent => {
            if let Some(th) = &win.throttles {
                let on = th.names();
                for reason in CLOCK_REASONS {
                    push(vec![("reason", reason)], bool_f(on.contains(&reason)));
                }
            }
        }
        GpuMetric::GpuVerdict => {
            let cur = win.verdict.verdict;
            for v in Verdict::ALL {
                push(vec![("verdict", v.as_str())], bool_f(v == cur));
            }
        }
        // Only for entities with a second that could be judged starved: a 0 for one that
        // could not (a MIG instance, without a busy flag) would be no measurement.
        GpuMetric::GpuStarvedSeconds if win.totals.starved_judged_seconds > 0.0 => {
            for c in Cause::ALL {
                push(
                    vec![("cause", c.as_str())],
                    win.totals.starved_cause_seconds[c.index()],
                );
            }
        }
        _ => {}
    }
}

/// Who holds the GPU: the pods it is allocated to (how many, and each), the sole holder's
/// effective compute, and each listed process's memory or SM busy fraction where read.
fn holder_values<'a>(
    id: GpuMetric,
    win: &'a EntityWindow,
    listed: usize,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    match id {
        GpuMetric::GpuPods => {
            if let Some(a) = &win.allocation {
                push(Vec::new(), a.len() as f64);
            }
        }
        GpuMetric::GpuAllocation => allocation_values(win, listed, push),
        GpuMetric::PodEffectiveCompute => {
            if sole_holder(win)
                && let Some(v) = win.metrics.effective_compute
            {
                push(vec![("method", "sole_holder")], v);
            }
        }
        GpuMetric::ProcessMemoryUsed | GpuMetric::ProcessSmBusy => {
            for p in win.processes.iter().take(listed) {
                let v = if id == GpuMetric::ProcessMemoryUsed {
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
        _ => {}
    }
}

/// A link's saturation: PCIe receive over the link read from the device (or, under the
/// bound's name, over the model's maximum link), NVLink over the model's peak.
fn link_saturation(id: GpuMetric, win: &EntityWindow) -> Option<f64> {
    let r = &win.readings;
    let link = win.spec.and_then(crate::gpus::GpuSpec::interconnect);
    if id == GpuMetric::GpuNvlinkSaturation {
        return crate::causes::nvlink_share(r, link);
    }
    let s = crate::causes::CauseSignals::from_readings(r, win.spec);
    let (_, measured) = s.pcie_capacity?;
    let bound = id == GpuMetric::GpuPcieReceiveSaturationLowerBound;
    (measured != bound).then_some(s.pcie_rx_share).flatten()
}

/// Memory used over total, where both were read and the total is positive.
fn memory_utilization(r: &Readings) -> Option<f64> {
    let used = r.value(Field::MemUsedBytes)?;
    let total = r.value(Field::MemTotalBytes).filter(|t| *t > 0.0)?;
    Some(used / total)
}

/// A straggler's gaps by signal, or the gap a GPU waits on, labelled with the job.
fn straggler_values<'a>(
    id: GpuMetric,
    win: &'a EntityWindow,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    let Some(job) = win.job.as_deref() else {
        return;
    };
    let r = &win.readings;
    if id == GpuMetric::GpuWaitingOnStraggler {
        if let Some(g) = r.value(Field::StragglerWaitGap) {
            push(vec![("job_group", job)], g);
        }
        return;
    }
    for (signal, f) in [
        ("sm_clock", Field::StragglerClockGap),
        ("effective_compute", Field::StragglerComputeGap),
    ] {
        if let Some(g) = r.value(f) {
            push(vec![("job_group", job), ("signal", signal)], g);
        }
    }
}

/// One series per holder of the entity (node mode), labelled with its pod (unless the
/// entity's own labels name it), resource, replica, owner and allowlisted pod labels.
fn allocation_values<'a>(
    win: &'a EntityWindow,
    listed: usize,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    let attributed = win.id.pod.as_ref().is_some_and(|p| !p.pod.is_empty());
    for h in win.allocation.iter().flatten().take(listed) {
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
        if let Some(o) = &h.owner {
            labels.push(("owner_kind", o.kind.as_str()));
            labels.push(("owner_name", o.name.as_str()));
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

/// Whether one container holds this GPU or MIG instance alone, as the kubelet says (node
/// mode), its series labelled with that holder: then the device's counters are the
/// holder's own, and its effective compute a measurement of the holder's.
fn sole_holder(win: &EntityWindow) -> bool {
    let attributed = win.id.pod.as_ref().is_some_and(|p| !p.pod.is_empty());
    attributed && win.allocation.as_ref().is_some_and(|a| a.len() == 1)
}

/// The per-pod parts of a shared GPU (node mode, per-process attribution on): only for a
/// device no single pod holds, with its processes listed. Effective compute is split by SM
/// busy share, an estimate (`truthscale_pod_effective_compute_estimate_ratio`), never the
/// measured family.
fn pod_share_values<'a>(
    id: GpuMetric,
    win: &'a EntityWindow,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
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
    if id == GpuMetric::PodMemoryUsed {
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

/// The `part="unsplit"` series, beside `labels`: the joules counted while no floor was known
/// ([`crate::energy`]), only where there were any.
fn unsplit<'a>(
    joules: f64,
    mut labels: ExtraLabels<'a>,
    push: &mut impl FnMut(ExtraLabels<'a>, f64),
) {
    if joules > 0.0 {
        labels.insert(0, ("part", "unsplit"));
        push(labels, joules);
    }
}

/// Where the entity's energy went ([`crate::energy`]): its two parts and its floor, and in
/// node mode its holders' parts and what no pod held. Only for an entity whose energy was
/// measured and split at a floor.
fn energy_values<'a>(
    id: GpuMetric,
    win: &'a EntityWindow,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    let t = &win.totals;
    let Some(floor) = win.idle_floor else { return };
    if t.energy_observed_seconds <= 0.0 {
        return;
    }
    let h = &win.energy_holders;
    let attributed = win.id.pod.as_ref().filter(|p| !p.pod.is_empty());
    match id {
        GpuMetric::GpuIdleFloor => push(vec![("floor", floor.source.as_str())], floor.watts),
        GpuMetric::GpuEnergyPart => {
            push(vec![("part", "active")], t.active_energy_joules);
            push(vec![("part", "idle_floor")], t.idle_floor_joules);
            unsplit(t.unsplit_energy_joules, Vec::new(), &mut push);
        }
        GpuMetric::GpuUnallocatedEnergy if h.node_mode => {
            push(vec![("part", "active")], h.unallocated.1);
            push(vec![("part", "idle_floor")], h.unallocated.0);
            unsplit(h.unallocated_unsplit, Vec::new(), &mut push);
        }
        GpuMetric::PodEnergy => {
            let Some(pod) = attributed else { return };
            let own = h
                .pods
                .iter()
                .find(|p| p.method == PodEnergyMethod::SoleHolder && p.pod.as_ref() == Some(pod));
            if let Some(p) = own {
                let m = ("method", p.method.as_str());
                push(vec![("part", "active"), m], p.active_joules);
                push(vec![("part", "idle_floor"), m], p.idle_floor_joules);
                unsplit(p.unsplit_joules, vec![m], &mut push);
            }
        }
        GpuMetric::PodEnergyEstimate if attributed.is_none() => {
            // Only the pods that hold the device now or whose processes run there now (and
            // processes whose pod was not found, while such processes run).
            let holds = |pod: Option<&crate::model::PodRef>| match pod {
                Some(p) => {
                    win.allocation.iter().flatten().any(|h| h.pod.same_pod(p))
                        || win
                            .processes
                            .iter()
                            .any(|q| q.pod.as_ref().is_some_and(|q| q.same_pod(p)))
                }
                None => win.processes.iter().any(|p| p.pod.is_none()),
            };
            for p in h
                .pods
                .iter()
                .filter(|p| p.method == PodEnergyMethod::SmBusyShare)
            {
                if !holds(p.pod.as_ref()) {
                    continue;
                }
                let mut l = Vec::with_capacity(4);
                if let Some(pod) = &p.pod {
                    l.push(("pod", pod.pod.as_str()));
                    if let Some(n) = &pod.namespace {
                        l.push(("namespace", n.as_str()));
                    }
                    if let Some(c) = &pod.container {
                        l.push(("container", c.as_str()));
                    }
                }
                l.push(("method", p.method.as_str()));
                push(l, p.active_joules);
            }
        }
        _ => {}
    }
}

/// Node mode: each holder pod's own pressure share (`truthscale_pod_cpu_…`, `…_io_…`,
/// `…_memory_…`), labelled with its pod and namespace; only what was measured. On an entity
/// already attributed to its one holder, only that pod's, without the labels its series
/// already carry (another pod's would need a second `pod` label, so it is left out).
fn pod_pressure_values<'a>(
    id: GpuMetric,
    win: &'a EntityWindow,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    let share: fn(&PodPressure) -> Option<f64> = match id {
        GpuMetric::PodCpuThrottled => |p| p.cpu_throttled_ratio,
        GpuMetric::PodCpuLimit => |p| p.cpu_limit_cores,
        GpuMetric::PodCpuWaiting => |p| p.cpu_waiting_ratio,
        GpuMetric::PodIoWaiting => |p| p.io_waiting_ratio,
        GpuMetric::PodIoStalled => |p| p.io_stalled_ratio,
        GpuMetric::PodMemoryStalled => |p| p.memory_stalled_ratio,
        _ => return,
    };
    let attributed = win.id.pod.as_ref().filter(|p| !p.pod.is_empty());
    for p in &win.holder_pressure {
        let Some(v) = share(p) else { continue };
        match attributed {
            Some(a) if a.same_pod(&p.pod) => {
                push(Vec::new(), v);
            }
            Some(_) => {}
            None => {
                let mut labels = vec![("pod", p.pod.pod.as_str())];
                if let Some(n) = &p.pod.namespace {
                    labels.push(("namespace", n.as_str()));
                }
                push(labels, v);
            }
        }
    }
}

/// Below this effective compute fraction, tokens per effective-compute second is not
/// published (the ratio would only amplify noise).
const MIN_ECF_FOR_TOKENS: f64 = 0.01;

fn serving_values<'a>(
    id: ServingMetric,
    win: &'a EntityWindow,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    let Some(sv) = &win.serving else { return };
    let engine = sv.engine.as_deref().unwrap_or("");
    if id == ServingMetric::ServingEngineUp {
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
        ServingMetric::ServingPhaseComparedSeconds | ServingMetric::ServingPhaseAgreedSeconds
    ) {
        if t.phase_compared_seconds > 0.0 {
            let v = if id == ServingMetric::ServingPhaseComparedSeconds {
                t.phase_compared_seconds
            } else {
                t.phase_agreed_seconds
            };
            push(vec![("engine", engine)], v);
        }
        return;
    }
    let value = match id {
        ServingMetric::ServingKvCacheUsage => sv.kv_cache_utilization,
        ServingMetric::ServingRequestsRunning => sv.running_requests,
        ServingMetric::ServingRequestsWaiting => sv.queued_requests,
        ServingMetric::ServingQueueSeconds => sv.queue_seconds,
        ServingMetric::ServingPromptTokens => sv.prompt_tokens_per_sec,
        ServingMetric::ServingOutputTokens => sv.output_tokens_per_sec,
        ServingMetric::ServingBatchSize => sv.batch_size,
        // This GPU's power over its share of the engine's tokens (tensor parallel: the
        // engine's over its GPUs).
        ServingMetric::ServingEnergyPerOutputToken => crate::energy::joules_per_output_token(
            win.metrics.power_watts.map(|p| p.value),
            sv.output_tokens_per_sec.map(|o| o / gpus_of(sv)),
        ),
        ServingMetric::ServingTokensPerEffectiveCompute => {
            // Both rates or none: a missing one is not a zero. A sum or quotient past the
            // largest double is absent, as every engine value is: never an infinity.
            match (
                sv.prompt_tokens_per_sec,
                sv.output_tokens_per_sec,
                win.metrics.effective_compute,
            ) {
                (Some(p), Some(o), Some(e)) if e >= MIN_ECF_FOR_TOKENS => {
                    Some((p + o) / gpus_of(sv) / e).filter(|v| v.is_finite())
                }
                _ => None,
            }
        }
        ServingMetric::ServingEngineMfu
        | ServingMetric::ServingEngineMbu
        | ServingMetric::ServingMfu
        | ServingMetric::ServingMbu
        | ServingMetric::ServingComputeAgreement
        | ServingMetric::ServingBandwidthAgreement => {
            estimate_values(id, win, sv, push);
            return;
        }
        // Written above.
        ServingMetric::ServingEngineUp
        | ServingMetric::ServingPhaseAgreedSeconds
        | ServingMetric::ServingPhaseComparedSeconds => None,
    };
    if let Some(v) = value {
        push(vec![("engine", engine)], v);
    }
}

/// The GPUs an engine's tokens are spread over (1 where not known).
fn gpus_of(sv: &crate::model::ServingSnapshot) -> f64 {
    f64::from(sv.gpus.unwrap_or(1).max(1))
}

/// The utilization estimates (the engine's, and truthscale's from the engine's tokens),
/// with their assumptions, and each engine estimate over the counters' measure.
fn estimate_values<'a>(
    id: ServingMetric,
    win: &'a EntityWindow,
    sv: &'a ServingSnapshot,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    let engine = sv.engine.as_deref().unwrap_or("");
    match id {
        ServingMetric::ServingEngineMfu
        | ServingMetric::ServingEngineMbu
        | ServingMetric::ServingMfu
        | ServingMetric::ServingMbu => {
            let (v, a) = match id {
                ServingMetric::ServingEngineMfu => (sv.engine_mfu, &sv.engine_assumptions),
                ServingMetric::ServingEngineMbu => (sv.engine_mbu, &sv.engine_assumptions),
                ServingMetric::ServingMfu => (sv.mfu, &sv.assumptions),
                _ => (sv.mbu, &sv.assumptions),
            };
            if let Some(v) = v {
                let a = a.as_deref().unwrap_or("");
                push(vec![("engine", engine), ("assumptions", a)], v);
            }
        }
        ServingMetric::ServingComputeAgreement | ServingMetric::ServingBandwidthAgreement => {
            let (estimate, measured, labels) = if id == ServingMetric::ServingComputeAgreement {
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
        }
        _ => {}
    }
}

fn exporter_values<'a>(
    id: ExporterMetric,
    s: &'a ExporterStatus,
    mut push: impl FnMut(ExtraLabels<'a>, f64),
) {
    match id {
        ExporterMetric::BuildInfo => push(vec![("version", s.version.as_str())], 1.0),
        ExporterMetric::SourceUp => {
            for src in &s.sources {
                push(vec![("source", src.name.as_str())], bool_f(src.up));
            }
        }
        ExporterMetric::SourceErrors => {
            for src in &s.sources {
                for (kind, count) in &src.errors {
                    push(
                        vec![("source", src.name.as_str()), ("kind", kind.as_str())],
                        *count as f64,
                    );
                }
            }
        }
        ExporterMetric::SampleDuration => {
            if let Some(d) = s.sample_duration_seconds {
                push(Vec::new(), d);
            }
        }
        ExporterMetric::Diagnostics => {
            for (kind, count) in &s.diagnostics {
                push(vec![("kind", kind.as_str())], *count as f64);
            }
        }
        ExporterMetric::SnapshotTimestamp => push(Vec::new(), s.snapshot_unix_seconds),
        ExporterMetric::SeriesDropped => push(Vec::new(), s.series_dropped as f64),
        ExporterMetric::SinkErrors => {
            for sink in &s.sinks {
                for (kind, count) in &sink.errors {
                    push(
                        vec![("sink", sink.name.as_str()), ("kind", kind.as_str())],
                        *count as f64,
                    );
                }
            }
        }
        ExporterMetric::ScrapeBody => {
            if let Some(b) = s.previous_body_bytes {
                push(Vec::new(), b as f64);
            }
        }
    }
}
