//! `report --by … --format opencost`: the showback in the shape of OpenCost's `/allocation`
//! answer, for tools that read it: `{"code": 200, "data": [ {NAME: allocation, …}, … ]}`,
//! one set per period (the whole window without `--every`), each allocation's fields in
//! camelCase. Only the GPU's figures are there: truthscale reads no CPU, memory or disk.
//!
//! As OpenCost names them: `__idle__` is the capacity no pod held (truthscale's unallocated
//! GPU-hours), `__unallocated__` the pods without the grouping's value (truthscale's
//! `(none)` group). `gpuEfficiency` is in OpenCost's field: the busy flag's
//! (`DCGM_FI_DEV_GPU_UTIL`) GPU-hours over the allocated GPU-hours where it was read (OpenCost
//! itself averages `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, which the report does not read); truthscale's
//! own figures are beside it under names of their own (`truthscaleEffectiveComputeEfficiency`,
//! `truthscaleUsedOverAllocated`, …). An estimate is never under a measured name. An
//! unknown figure is `null`, never 0. An allocation with any GPU-hour of a simulated GPU
//! says so (`truthscaleSimulated: true`).

use super::showback::{By, NONE};
use serde_json::{Map, Value, json};
use truthscale_core::showback::{GroupHours, Period, Showback};

/// OpenCost's name of the capacity no pod held.
pub(crate) const IDLE: &str = "__idle__";
/// OpenCost's name of the allocations without the grouping's value.
pub(crate) const UNALLOCATED: &str = "__unallocated__";
/// truthscale's name of the GPU-hours whose allocation is unknown (nothing of the GPU read,
/// no holder named); OpenCost has none.
pub(crate) const ALLOCATION_UNKNOWN: &str = "__allocation_unknown__";

/// A period's bounds: its RFC 3339 start and end, and its hours.
pub(crate) struct Bounds {
    pub start: String,
    pub end: String,
    pub hours: f64,
}

/// The bounds of each period of `s` (the whole window without periods), with the window's
/// first step at `start_ms` and `step_seconds` per step.
pub(crate) fn periods(s: &Showback, start_ms: i64, step_seconds: f64) -> Vec<(&Period, Bounds)> {
    let at = |step: usize| {
        crate::times::rfc3339(start_ms + (step as f64 * step_seconds * 1000.0) as i64)
    };
    let list: Vec<&Period> = if s.periods.is_empty() {
        vec![&s.total]
    } else {
        s.periods.iter().collect()
    };
    list.into_iter()
        .map(|p| {
            let b = Bounds {
                start: at(p.start_step),
                end: at(p.start_step + p.steps),
                hours: p.steps as f64 * step_seconds / 3600.0,
            };
            (p, b)
        })
        .collect()
}

/// `a / b`, or `null` where `b` is 0.
fn ratio(a: f64, b: f64) -> Value {
    if b > 0.0 { json!(a / b) } else { Value::Null }
}

/// OpenCost's `properties` of a group: the property it groups by.
fn properties(by: &By, group: &str) -> Value {
    match by {
        By::Namespace => json!({ "namespace": group }),
        By::Node => json!({ "node": group }),
        By::Model => json!({ "truthscaleGpuModel": group }),
        By::Label { key, .. } => json!({ "labels": { key.clone(): group } }),
    }
}

/// The fields every allocation has: its name, properties and window.
fn head(name: &str, props: Value, b: &Bounds) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    m.insert("properties".into(), props);
    m.insert("window".into(), json!({ "start": b.start, "end": b.end }));
    m.insert("start".into(), json!(b.start));
    m.insert("end".into(), json!(b.end));
    m.insert("minutes".into(), json!(b.hours * 60.0));
    m
}

/// A group's usage and request in GPUs over the period: usage where the busy flag was read
/// over all its allocated GPU-hours (an unread hour is no idle one). OpenCost's efficiency
/// is usage over request.
fn averages(g: &GroupHours, b: &Bounds) -> (Option<f64>, Option<f64>) {
    let whole = (g.allocated_gpu_hours - g.busy_measured_gpu_hours).abs() <= 1e-9;
    let per_hour = |x: f64| (b.hours > 0.0).then(|| x / b.hours);
    (
        g.busy_gpu_hours.filter(|_| whole).and_then(per_hour),
        g.requested_gpu_hours.and_then(per_hour),
    )
}

/// One group's allocation.
fn allocation(name: &str, props: Value, g: &GroupHours, b: &Bounds) -> Value {
    let cost = g.cost.as_ref();
    let mut m = head(name, props, b);
    let gpu_cost = json!(cost.map(|c| c.allocated));
    let (usage, request) = averages(g, b);
    // No adjustment and no idle cost shared in: 0 where there is a cost, else unknown.
    let zero = json!(cost.map(|_| 0.0));
    let fields = [
        ("gpuCount", ratio(g.allocated_gpu_hours, b.hours)),
        ("gpuHours", json!(g.allocated_gpu_hours)),
        ("gpuCost", gpu_cost.clone()),
        ("gpuCostIdle", zero.clone()),
        ("gpuCostAdjustment", zero),
        (
            "gpuEfficiency",
            usage.zip(request).map_or(Value::Null, |(u, r)| ratio(u, r)),
        ),
        (
            "gpuAllocation",
            json!({
                "gpuRequestAverage": request,
                "gpuUsageAverage": usage,
            }),
        ),
        ("totalCost", gpu_cost),
    ];
    for (k, v) in fields.into_iter().chain(own_fields(g)) {
        m.insert(k.into(), v);
    }
    simulated(&mut m, g.simulated);
    Value::Object(m)
}

/// A group's figures under truthscale's own names, beside OpenCost's.
fn own_fields(g: &GroupHours) -> Vec<(&'static str, Value)> {
    let cost = g.cost.as_ref();
    vec![
        (
            "truthscaleEffectiveComputeEfficiency",
            g.effective_compute_gpu_hours.map_or(Value::Null, |e| {
                ratio(e, g.effective_compute_measured_gpu_hours)
            }),
        ),
        // Over the allocated hours whose use was measured: an hour unread (unmeasured, use
        // unknown, down) is neither used nor idle, never counted as unused.
        (
            "truthscaleUsedOverAllocated",
            ratio(g.used_gpu_hours, g.used_gpu_hours + g.idle_gpu_hours),
        ),
        ("truthscaleWorkloads", json!(g.workloads)),
        ("truthscaleRequestedGpuHours", json!(g.requested_gpu_hours)),
        ("truthscaleUsedGpuHours", json!(g.used_gpu_hours)),
        ("truthscaleIdleGpuHours", json!(g.idle_gpu_hours)),
        ("truthscaleIdleCost", json!(cost.map(|c| c.idle))),
        (
            "truthscaleUnmeasuredGpuHours",
            json!(g.unmeasured_gpu_hours),
        ),
        (
            "truthscaleUseUnknownGpuHours",
            json!(g.use_unknown_gpu_hours),
        ),
        (
            "truthscaleUnavailableGpuHours",
            json!(g.unavailable_gpu_hours),
        ),
        (
            "truthscaleUnavailableCost",
            json!(cost.and_then(|c| c.unavailable)),
        ),
        // Each sum over the GPU-hours it was measured in, given beside it: a sum over fewer
        // hours than the allocation's is no lower use.
        ("truthscaleBusyGpuHours", json!(g.busy_gpu_hours)),
        (
            "truthscaleBusyMeasuredGpuHours",
            json!(g.busy_measured_gpu_hours),
        ),
        (
            "truthscaleEffectiveComputeGpuHours",
            json!(g.effective_compute_gpu_hours),
        ),
        (
            "truthscaleEffectiveComputeMeasuredGpuHours",
            json!(g.effective_compute_measured_gpu_hours),
        ),
        (
            "truthscaleEffectiveComputeEstimateGpuHours",
            json!(g.effective_compute_estimate_gpu_hours),
        ),
        (
            "truthscaleAssumedShareGpuHours",
            json!(g.assumed_share_gpu_hours),
        ),
        // The group's share of its GPUs' measured energy and its cost: not in `totalCost`,
        // which is the GPU-hours' alone, as OpenCost's is of the resources it prices.
        ("truthscaleEnergyKwh", json!(g.energy_kwh)),
        (
            "truthscaleEnergyMeasuredGpuHours",
            json!(g.energy_measured_gpu_hours),
        ),
        ("truthscaleEnergyCost", json!(g.energy_cost)),
    ]
}

/// Marks an allocation with any GPU-hour of a simulated GPU (`truthscaleSimulated`):
/// simulated data says so. Absent on real data.
fn simulated(m: &mut Map<String, Value>, simulated: bool) {
    if simulated {
        m.insert("truthscaleSimulated".into(), json!(true));
    }
}

/// The capacity no pod held in period `p`: OpenCost's `__idle__`.
fn idle(p: &Period, priced: bool, b: &Bounds) -> Value {
    let hours = (p.unallocated_gpu_hours, p.unallocated_cost);
    let mut m = unheld(IDLE, hours, true, priced, b);
    m.insert(
        "truthscaleUnavailableGpuHours".into(),
        json!(p.unallocated_unavailable_gpu_hours),
    );
    m.insert(
        "truthscaleAssumedShareGpuHours".into(),
        json!(p.unallocated_assumed_share_gpu_hours),
    );
    // The GPU-hours charged beyond the GPUs' own (fractions held past one): what makes the
    // allocations add up to more than the fleet, which OpenCost's shape cannot say.
    m.insert(
        "truthscaleOverallocatedGpuHours".into(),
        json!(p.overallocated_gpu_hours),
    );
    let energy = p.energy.as_ref();
    m.insert(
        "truthscaleEnergyKwh".into(),
        json!(energy.map(|e| e.unallocated_kwh)),
    );
    m.insert(
        "truthscaleEnergyMeasuredGpuHours".into(),
        json!(energy.map(|e| e.unallocated_measured_gpu_hours)),
    );
    m.insert(
        "truthscaleEnergyCost".into(),
        json!(energy.and_then(|e| e.unallocated_cost)),
    );
    simulated(&mut m, p.unallocated_simulated);
    Value::Object(m)
}

/// The GPU-hours of period `p` at which nothing of the GPU was read and no holder named
/// (`__allocation_unknown__`, truthscale's own): not known whether a pod held them, so
/// neither idle nor any allocation's; `None` where there were none.
fn allocation_unknown(p: &Period, priced: bool, b: &Bounds) -> Option<Value> {
    if p.allocation_unknown_gpu_hours == 0.0 {
        return None;
    }
    let hours = (p.allocation_unknown_gpu_hours, p.allocation_unknown_cost);
    let mut m = unheld(ALLOCATION_UNKNOWN, hours, false, priced, b);
    simulated(&mut m, p.allocation_unknown_simulated);
    Some(Value::Object(m))
}

/// An entry of GPU-hours no group is charged, `(hours, cost)`, the cost of idle where they
/// are known `idle`.
fn unheld(
    name: &str,
    (hours, cost): (f64, Option<f64>),
    idle: bool,
    priced: bool,
    b: &Bounds,
) -> Map<String, Value> {
    // Unknown (null) where none of the GPU-hours had a price, never 0.
    let cost = if priced { json!(cost) } else { Value::Null };
    let mut m = head(name, json!({}), b);
    let fields = [
        ("gpuCount", ratio(hours, b.hours)),
        ("gpuHours", json!(hours)),
        ("gpuCost", cost.clone()),
        ("gpuCostIdle", if idle { cost.clone() } else { Value::Null }),
        (
            "gpuCostAdjustment",
            if priced { json!(0.0) } else { Value::Null },
        ),
        ("gpuEfficiency", Value::Null),
        ("totalCost", cost),
    ];
    for (k, v) in fields {
        m.insert(k.into(), v);
    }
    m
}

/// Whether `s` was priced: some group has a cost, or the capacity no pod held has one.
fn priced(s: &Showback) -> bool {
    s.total.groups.iter().any(|g| g.cost.is_some()) || s.total.unallocated_cost.is_some()
}

/// The `/allocation`-shaped document of `s` (every group), `by` its grouping.
#[must_use]
pub(crate) fn document(s: &Showback, by: &By, start_ms: i64, step_seconds: f64) -> Value {
    let priced = priced(s);
    let sets: Vec<Value> = periods(s, start_ms, step_seconds)
        .into_iter()
        .map(|(p, b)| {
            let mut set = Map::new();
            let mut none = None;
            for g in &p.groups {
                if g.group == NONE {
                    none = Some(g);
                    continue;
                }
                let a = allocation(&g.group, properties(by, &g.group), g, &b);
                set.insert(g.group.clone(), a);
            }
            let empty = GroupHours {
                cost: priced.then(Default::default),
                ..GroupHours::default()
            };
            let none = none.unwrap_or(&empty);
            set.insert(
                UNALLOCATED.into(),
                allocation(UNALLOCATED, json!({}), none, &b),
            );
            set.insert(IDLE.into(), idle(p, priced, &b));
            if let Some(a) = allocation_unknown(p, priced, &b) {
                set.insert(ALLOCATION_UNKNOWN.into(), a);
            }
            Value::Object(set)
        })
        .collect();
    let mut doc = json!({ "code": 200, "status": "success", "data": sets });
    round_figures(&mut doc);
    doc
}

/// Every figure of `v` to six decimals, as the CSV and FOCUS files write them: sums of
/// per-step shares carry binary noise (2 GPU-hours at 3 read 5.999999999999987), which would
/// make the three exports disagree on the same cost.
fn round_figures(v: &mut Value) {
    match v {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            // A figure past 1e302 has no decimals to round (and its product would overflow).
            if let Some(x) = n.as_f64().filter(|x| (x * 1e6).is_finite()) {
                *v = json!((x * 1e6).round() / 1e6);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(round_figures),
        Value::Object(m) => m.values_mut().for_each(round_figures),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::showback::GroupCost;

    /// 2025-01-06T00:00:00Z.
    const START_MS: i64 = 1_736_121_600_000;

    /// A 2 h window (120 steps of 60 s): `ml` held 4 GPU-hours (2 pods, 6 requested), busy 3
    /// of the 4 measured, effective compute 1 of 4; one pod without a namespace held 1
    /// GPU-hour whose use is unknown; 1 GPU-hour no pod held, 0.5 GPU-hours down without a
    /// holder. At $2 a GPU-hour when `priced`.
    fn showback(priced: bool) -> Showback {
        let cost = |allocated: f64, idle: f64, unavailable: Option<f64>| {
            priced.then_some(GroupCost {
                allocated,
                idle,
                unavailable,
                ..GroupCost::default()
            })
        };
        let ml = GroupHours {
            group: "ml".into(),
            workloads: 2,
            allocated_gpu_hours: 4.0,
            requested_gpu_hours: Some(6.0),
            used_gpu_hours: 3.0,
            idle_gpu_hours: 1.0,
            busy_gpu_hours: Some(3.0),
            busy_measured_gpu_hours: 4.0,
            effective_compute_gpu_hours: Some(1.0),
            effective_compute_measured_gpu_hours: 4.0,
            // Its GPUs' health read throughout, none of it down.
            unavailable_gpu_hours: Some(0.0),
            health_measured_gpu_hours: 4.0,
            // Power read over 3 of its 4 GPU-hours: 0.9 kWh of those 3, said beside it.
            energy_kwh: Some(0.9),
            energy_measured_gpu_hours: 3.0,
            cost: cost(8.0, 2.0, Some(0.0)),
            ..GroupHours::default()
        };
        let none = GroupHours {
            group: NONE.into(),
            workloads: 1,
            allocated_gpu_hours: 1.0,
            use_unknown_gpu_hours: 1.0,
            // Half of it a MIG instance of an unknown profile's assumed share.
            assumed_share_gpu_hours: 0.5,
            // Its GPU's health never read: unknown, never 0.
            cost: cost(2.0, 0.0, None),
            ..GroupHours::default()
        };
        let mut total = Period {
            steps: 120,
            groups: vec![ml, none],
            unallocated_gpu_hours: 1.0,
            unallocated_cost: priced.then_some(2.0),
            ..Period::default()
        };
        // Of the hour no pod held, half was unavailable, judged over the whole hour.
        total.unallocated_unavailable_gpu_hours = Some(0.5);
        total.unallocated_health_measured_gpu_hours = 1.0;
        // A quarter of it what was left of a GPU with an assumed MIG share.
        total.unallocated_assumed_share_gpu_hours = 0.25;
        Showback {
            total,
            ..Showback::default()
        }
    }

    fn window() -> Value {
        json!({ "start": "2025-01-06T00:00:00Z", "end": "2025-01-06T02:00:00Z" })
    }

    /// The document of known inputs, every figure worked out by hand.
    #[test]
    fn a_priced_showback_is_opencosts_allocation_shape() {
        let doc = document(&showback(true), &By::Namespace, START_MS, 60.0);
        let (s, e) = ("2025-01-06T00:00:00Z", "2025-01-06T02:00:00Z");
        let want = json!({
            "code": 200,
            "status": "success",
            "data": [{
                "ml": {
                    "name": "ml", "properties": { "namespace": "ml" }, "window": window(),
                    "start": s, "end": e, "minutes": 120.0,
                    "gpuCount": 2.0,          // 4 GPU-hours over 2 h
                    "gpuHours": 4.0,
                    "gpuCost": 8.0,           // 4 × $2
                    "gpuCostIdle": 0.0,
                    "gpuCostAdjustment": 0.0,
                    "gpuEfficiency": 0.5,     // usage 1.5 / request 3 (OpenCost's)
                    "gpuAllocation": { "gpuRequestAverage": 3.0, "gpuUsageAverage": 1.5 },
                    "totalCost": 8.0,
                    "truthscaleEffectiveComputeEfficiency": 0.25, // 1 / 4
                    "truthscaleUsedOverAllocated": 0.75,          // 3 / (3 + 1)
                    "truthscaleWorkloads": 2,
                    "truthscaleRequestedGpuHours": 6.0,
                    "truthscaleUsedGpuHours": 3.0,
                    "truthscaleIdleGpuHours": 1.0,
                    "truthscaleIdleCost": 2.0,
                    "truthscaleUnmeasuredGpuHours": 0.0,
                    "truthscaleUseUnknownGpuHours": 0.0,
                    "truthscaleUnavailableGpuHours": 0.0,
                    "truthscaleUnavailableCost": 0.0,
                    "truthscaleBusyGpuHours": 3.0,
                    "truthscaleBusyMeasuredGpuHours": 4.0,
                    "truthscaleEffectiveComputeGpuHours": 1.0,
                    "truthscaleEffectiveComputeMeasuredGpuHours": 4.0,
                    "truthscaleEffectiveComputeEstimateGpuHours": null,
                    "truthscaleAssumedShareGpuHours": 0.0,
                    // Over the 3 GPU-hours of the 4 whose power was read.
                    "truthscaleEnergyKwh": 0.9,
                    "truthscaleEnergyMeasuredGpuHours": 3.0,
                    "truthscaleEnergyCost": null,
                },
                "__unallocated__": {
                    "name": "__unallocated__", "properties": {}, "window": window(),
                    "start": s, "end": e, "minutes": 120.0,
                    "gpuCount": 0.5,
                    "gpuHours": 1.0,
                    "gpuCost": 2.0,
                    "gpuCostIdle": 0.0,
                    "gpuCostAdjustment": 0.0,
                    "gpuEfficiency": null,    // the busy flag never read
                    // The busy flag never read: no usage, not a usage of 0.
                    "gpuAllocation": { "gpuRequestAverage": null, "gpuUsageAverage": null },
                    "totalCost": 2.0,
                    "truthscaleEffectiveComputeEfficiency": null,
                    // No allocated hour's use measured: unknown, not 0.
                    "truthscaleUsedOverAllocated": null,
                    "truthscaleWorkloads": 1,
                    "truthscaleRequestedGpuHours": null,
                    "truthscaleUsedGpuHours": 0.0,
                    "truthscaleIdleGpuHours": 0.0,
                    "truthscaleIdleCost": 0.0,
                    "truthscaleUnmeasuredGpuHours": 0.0,
                    "truthscaleUseUnknownGpuHours": 1.0,
                    "truthscaleUnavailableGpuHours": null,
                    "truthscaleUnavailableCost": null,
                    "truthscaleBusyGpuHours": null,
                    "truthscaleBusyMeasuredGpuHours": 0.0,
                    "truthscaleEffectiveComputeGpuHours": null,
                    "truthscaleEffectiveComputeMeasuredGpuHours": 0.0,
                    "truthscaleEffectiveComputeEstimateGpuHours": null,
                    "truthscaleAssumedShareGpuHours": 0.5,
                    "truthscaleEnergyKwh": null,
                    "truthscaleEnergyMeasuredGpuHours": 0.0,
                    "truthscaleEnergyCost": null,
                },
                "__idle__": {
                    "name": "__idle__", "properties": {}, "window": window(),
                    "start": s, "end": e, "minutes": 120.0,
                    "gpuCount": 0.5,
                    "gpuHours": 1.0,
                    "gpuCost": 2.0,
                    "gpuCostIdle": 2.0,
                    "gpuCostAdjustment": 0.0,
                    "gpuEfficiency": null,
                    "totalCost": 2.0,
                    "truthscaleUnavailableGpuHours": 0.5,
                    "truthscaleAssumedShareGpuHours": 0.25,
                    "truthscaleEnergyKwh": null,
                    "truthscaleEnergyMeasuredGpuHours": null,
                    "truthscaleEnergyCost": null,
                    "truthscaleOverallocatedGpuHours": 0.0,
                },
            }]
        });
        assert_eq!(doc, want);
    }

    /// Without a price every cost is unknown: `null`, never 0.
    /// Two HAMi pods held 75 % and 50 % of one GPU for 2 h at 2 a GPU-hour: 2.5 GPU-hours
    /// charged for a GPU that had 2, the 0.5 over said on `__idle__`; and the sums' binary
    /// noise (2.9999999999999933 GPU-hours, 5.999999999999987) written to six decimals, as
    /// the CSV and FOCUS files write them.
    #[test]
    fn overallocation_is_said_and_the_figures_rounded() {
        let g = |name: &str, hours: f64, cost: f64| GroupHours {
            group: name.into(),
            workloads: 1,
            allocated_gpu_hours: hours,
            cost: Some(GroupCost {
                allocated: cost,
                ..GroupCost::default()
            }),
            ..GroupHours::default()
        };
        let s = Showback {
            total: Period {
                steps: 120,
                groups: vec![
                    g("ha", 2.999_999_999_999_993_3, 5.999_999_999_999_987),
                    g("hb", 1.0, 2.0),
                ],
                unallocated_cost: Some(0.0),
                overallocated_gpu_hours: 0.5,
                ..Period::default()
            },
            ..Showback::default()
        };
        let doc = document(&s, &By::Namespace, START_MS, 60.0);
        let set = &doc["data"][0];
        assert_eq!(set["ha"]["gpuHours"], json!(3.0));
        assert_eq!(set["ha"]["gpuCost"], json!(6.0));
        assert_eq!(set[IDLE]["truthscaleOverallocatedGpuHours"], json!(0.5));
        assert_eq!(set[IDLE]["gpuHours"], json!(0.0));
    }

    #[test]
    fn an_unpriced_showback_has_null_costs() {
        let doc = document(&showback(false), &By::Namespace, START_MS, 60.0);
        let set = &doc["data"][0];
        for name in ["ml", UNALLOCATED, IDLE] {
            for key in ["gpuCost", "gpuCostIdle", "gpuCostAdjustment", "totalCost"] {
                assert_eq!(set[name][key], Value::Null, "{name}.{key}");
            }
        }
        assert_eq!(set["ml"]["truthscaleIdleCost"], Value::Null);
        assert_eq!(set["ml"]["gpuEfficiency"], json!(0.5));
    }

    /// Usage is the busy flag's GPUs only where it was read over all the allocated hours: a
    /// group with an unread hour has no usage average (an unread hour is no idle one), and
    /// so no efficiency.
    #[test]
    fn usage_needs_the_whole_allocation_read() {
        let mut s = showback(true);
        s.total.groups[0].busy_measured_gpu_hours = 3.0;
        let doc = document(&s, &By::Namespace, START_MS, 60.0);
        let ml = &doc["data"][0]["ml"];
        assert_eq!(ml["gpuAllocation"]["gpuUsageAverage"], Value::Null);
        assert_eq!(ml["gpuEfficiency"], Value::Null);
        assert_eq!(ml["gpuAllocation"]["gpuRequestAverage"], json!(3.0));
    }

    /// Simulated data says so: `truthscaleSimulated` on an allocation with any GPU-hour of a
    /// simulated GPU, absent on real data.
    #[test]
    fn simulated_allocations_are_marked() {
        let real = document(&showback(true), &By::Namespace, START_MS, 60.0);
        for name in ["ml", UNALLOCATED, IDLE] {
            assert_eq!(
                real["data"][0][name].get("truthscaleSimulated"),
                None,
                "{name}"
            );
        }
        let mut s = showback(true);
        s.total.groups[0].simulated = true;
        s.total.unallocated_simulated = true;
        let doc = document(&s, &By::Namespace, START_MS, 60.0);
        let set = &doc["data"][0];
        assert_eq!(set["ml"]["truthscaleSimulated"], json!(true));
        assert_eq!(set[IDLE]["truthscaleSimulated"], json!(true));
        assert_eq!(set[UNALLOCATED].get("truthscaleSimulated"), None);
    }
}
