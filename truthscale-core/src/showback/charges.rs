//! What the shares come to: each charge's use (idle, used, unmeasured, unknown) and price
//! summed per group and period, the periods' rows and their reconciliation with the fleet,
//! and the allocation check against the sizing.

use super::shares::Charge;
use super::{
    GroupCost, GroupHours, Period, PeriodEnergy, SHARE_UNITS, Showback, ShowbackConfig, Window,
};
use crate::fleet::Track;
use std::collections::{BTreeMap, BTreeSet};

/// Check `sb`'s allocation against the sizing of the same report (`fleet`): the GPU-hours
/// the sizing counts as allocated (its allocated GPUs at each step with a reading) must be
/// the physical GPU-hours the showback charged to some group, less those with nothing read.
/// Filled into `sb.allocation`; without pod labels (no allocated series) nothing is checked.
pub fn check_against_sizing(sb: &mut Showback, fleet: &crate::fleet::FleetReport) {
    let hours_per_step = fleet.step_seconds / 3600.0;
    let steps: u64 = fleet
        .series
        .allocated_gpus
        .iter()
        .flatten()
        .map(|&n| u64::from(n))
        .sum();
    if fleet.sizing.allocated_gpus.is_none() && steps == 0 {
        sb.allocation.check =
            "no pod labels: the sizing counts no allocated GPUs to check the showback against"
                .to_owned();
        return;
    }
    let a = &mut sb.allocation;
    let sizing = steps as f64 * hours_per_step;
    let read = a.gpu_hours - a.unread_gpu_hours;
    // Both are whole steps of hours: equal to well within one step.
    let agrees = (sizing - read).abs() < hours_per_step * 1e-6;
    a.sizing_gpu_hours = Some(sizing);
    a.agrees = Some(agrees);
    a.check = if agrees {
        format!(
            "sizing and showback agree on what is allocated: {sizing:.3} GPU-hours on {} GPUs ({:.3} more held with nothing read, charged, not sized)",
            a.gpus, a.unread_gpu_hours
        )
    } else {
        format!(
            "sizing and showback DISAGREE on what is allocated: the sizing counts {sizing:.3} GPU-hours, the showback charged {read:.3} read GPU-hours on {} GPUs: a GPU held with no holder named, or holders named without readings",
            a.gpus
        )
    };
}

/// Integer share units and float sums of one group in one period.
#[derive(Debug, Default, Clone)]
struct Acc {
    workloads: std::collections::BTreeSet<String>,
    allocated: u64,
    used: u64,
    idle: u64,
    unmeasured: u64,
    unknown: u64,
    unavailable: u64,
    /// Units of MIG instances of an unknown profile: an assumed share.
    assumed_share: u64,
    /// Units whose GPU had a health field read: over which `unavailable` was judged.
    health_read: u64,
    busy: f64,
    busy_measured: u64,
    ecf: f64,
    ecf_measured: u64,
    sat: f64,
    sat_measured: u64,
    time_sliced_ecf: Option<f64>,
    ecf_estimate: Option<f64>,
    /// Millijoules of the group's shares, where the GPU's power was read.
    energy_mj: Option<u64>,
    /// Units whose GPU's power was read: over which `energy_mj` was measured.
    energy_measured: u64,
    cost: Option<CostAcc>,
    /// Whether any of its GPU-hours had no price where prices were given: its cost is then
    /// not known (a sum of the priced part alone would bill the rest at 0).
    unpriced: bool,
    /// Whether any of its GPU-hours were of a simulated GPU.
    simulated: bool,
}

#[derive(Debug, Default, Clone)]
struct CostAcc {
    allocated: f64,
    used: f64,
    idle: f64,
    unmeasured: f64,
    unknown: f64,
    unavailable: f64,
    ecf: f64,
}

/// What an allocated step's use was.
#[derive(Debug, Clone, Copy)]
enum Use {
    /// The GPU could take no work ([`crate::health`]): neither idle nor used.
    Unavailable,
    /// A time-sliced GPU's holder: the counters are the device's.
    Unknown,
    /// No reading of use.
    Unmeasured,
    Idle,
    Used,
}

/// Per period: the groups, and the fleet's unallocated, allocation unknown, overallocated
/// and total units.
#[derive(Debug, Default, Clone)]
pub(super) struct PeriodAcc {
    groups: BTreeMap<String, Acc>,
    /// What no pod held (a series of the GPU read, no holder).
    pub(super) unallocated: Unheld,
    /// What no pod held at steps with nothing of the GPU read and no holder named: not
    /// known whether a pod held it.
    pub(super) allocation_unknown: Unheld,
    pub(super) overallocated: u64,
    /// Of `unallocated`, the units at steps with a health field read, and of those the
    /// units at steps the GPU was unavailable.
    pub(super) unallocated_health: (u64, u64),
    /// Of `unallocated`, the units of GPU-steps on which a MIG instance's share was assumed.
    pub(super) unallocated_assumed: u64,
    pub(super) fleet: u64,
    pub(super) energy: EnergyAcc,
    pub(super) funnel: super::funnel::FunnelAcc,
}

/// Share units charged to no group, and what they cost.
#[derive(Debug, Default, Clone)]
pub(super) struct Unheld {
    pub(super) units: u64,
    /// What they cost, at each GPU's price, where priced.
    pub(super) cost: Option<f64>,
    /// Whether any of them had no price where prices were given.
    pub(super) unpriced: bool,
    /// Whether any of them were of a simulated GPU.
    pub(super) simulated: bool,
}

impl Unheld {
    /// `units` share units at `price` (none: `unpriced` where prices were given), of a GPU
    /// that is `simulated` or not.
    pub(super) fn add(
        &mut self,
        units: u64,
        (price, unpriced): (Option<f64>, bool),
        simulated: bool,
        hours_per_step: f64,
    ) {
        self.units += units;
        self.simulated |= simulated && units > 0;
        if let Some(p) = price {
            *self.cost.get_or_insert(0.0) += p * gpu_hours(units, hours_per_step);
        }
        self.unpriced |= unpriced;
    }

    /// What they cost: with prices given, none of them costs 0 (known, not missing); `None`
    /// where any had no price.
    fn cost(&self, priced: bool) -> Option<f64> {
        self.cost
            .or((priced && self.units == 0).then_some(0.0))
            .filter(|_| !self.unpriced)
    }
}

/// A period's energy in millijoules: the fleet's (every GPU's, at the steps its power was
/// read) and what no pod held.
#[derive(Debug, Default, Clone)]
pub(super) struct EnergyAcc {
    pub(super) fleet_mj: u64,
    pub(super) unallocated_mj: u64,
    /// Share units no pod held at steps their GPU's power was read: the unallocated
    /// GPU-hours that `unallocated_mj` covers.
    pub(super) unallocated_measured: u64,
    pub(super) measured: bool,
}

/// Millijoules as kWh.
fn kwh(mj: u64) -> f64 {
    mj as f64 / 3.6e9
}

/// `u` share units over one step, as GPU-hours.
pub(super) fn gpu_hours(u: u64, hours_per_step: f64) -> f64 {
    u as f64 / SHARE_UNITS as f64 * hours_per_step
}

/// The price of one GPU-hour of a track's model: its own, or the default.
pub(super) fn price_of(t: &Track, cfg: &ShowbackConfig) -> Option<f64> {
    model_price(t.model.as_deref(), &cfg.prices, cfg.default_price)
}

/// The price of one GPU-hour of `model` (as reported): its own in `prices`, else `default`;
/// `None` without one, or for a price that is not finite or below 0.
#[must_use]
pub fn model_price(
    model: Option<&str>,
    prices: &[(String, f64)],
    default: Option<f64>,
) -> Option<f64> {
    let own = model
        .and_then(|m| prices.iter().find(|(name, _)| name == m))
        .map(|(_, p)| *p);
    own.or(default).filter(|p| p.is_finite() && *p >= 0.0)
}

impl Use {
    /// The use of a charge's step, by the idle thresholds of `cfg`.
    fn of(c: &Charge<'_>, cfg: &ShowbackConfig) -> Use {
        let (busy, ecf) = (c.busy, c.ecf);
        if c.down {
            Use::Unavailable
        } else if c.unknown {
            Use::Unknown
        } else if busy.is_none() && ecf.is_none() {
            Use::Unmeasured
        } else if busy.is_none_or(|b| b < cfg.idle_busy_below)
            && ecf.is_none_or(|e| e < cfg.idle_compute_below)
        {
            Use::Idle
        } else {
            Use::Used
        }
    }
}

/// Adds one charge to the window's and its period's accumulators; a model without a price
/// (where prices were given) goes to `unpriced`. `new_pod`: the charge's pod may not be
/// among its group's workloads yet (a pod read at an earlier step of the same GPU and
/// period is).
pub(super) fn add_charge(
    c: &Charge<'_>,
    w: &Window<'_>,
    accs: [&mut PeriodAcc; 2],
    new_pod: bool,
    unpriced: &mut BTreeSet<String>,
) {
    let hours = gpu_hours(c.units, w.hours_per_step);
    let price = c.price;
    let missing = w.priced && price.is_none() && c.units > 0;
    if missing {
        unpriced.insert(c.track.model.clone().unwrap_or_else(|| "unknown".into()));
    }
    let class = Use::of(c, w.cfg);
    for acc in accs {
        // Found by the name before one is allocated: a group and its pods are charged every
        // step, and added once.
        let a = match acc.groups.get_mut(c.group) {
            Some(a) => a,
            None => acc.groups.entry(c.group.to_owned()).or_default(),
        };
        if new_pod
            && let Some(pod) = c.pod
            && !a.workloads.contains(pod)
        {
            a.workloads.insert(pod.to_owned());
        }
        a.add(c, class, hours, w.hours_per_step);
        a.unpriced |= missing;
        if let Some(e) = c.energy_mj {
            *a.energy_mj.get_or_insert(0) += e;
            a.energy_measured += c.units;
        }
        if let Some(pr) = price {
            let ca = a.cost.get_or_insert_with(CostAcc::default);
            ca.add(class, pr * hours, c.ecf);
        }
    }
}

impl Acc {
    /// Adds a charge of `hours` GPU-hours (`hours_per_step` a whole GPU-step's) of use
    /// `class`.
    fn add(&mut self, c: &Charge<'_>, class: Use, hours: f64, hours_per_step: f64) {
        let u = c.units;
        self.allocated += u;
        self.simulated |= c.track.simulated && u > 0;
        if c.assumed_share {
            self.assumed_share += u;
        }
        if c.health_read {
            self.health_read += u;
        }
        *match class {
            Use::Unavailable => &mut self.unavailable,
            Use::Unknown => &mut self.unknown,
            Use::Unmeasured => &mut self.unmeasured,
            Use::Idle => &mut self.idle,
            Use::Used => &mut self.used,
        } += u;
        if let Some(e) = c.time_sliced_ecf {
            *self.time_sliced_ecf.get_or_insert(0.0) += e * hours;
        }
        if let Some(e) = c.ecf_estimate {
            // GPU-relative: over the whole GPU's time, whatever the share.
            *self.ecf_estimate.get_or_insert(0.0) += e * hours_per_step;
        }
        // A device's readings are its holder's but where the GPU could take no work or is
        // time-sliced; a step with neither use reading (`Unmeasured`) may still have
        // measured its saturation.
        if !matches!(class, Use::Unavailable | Use::Unknown) {
            if let Some(b) = c.busy {
                self.busy += b * hours;
                self.busy_measured += u;
            }
            if let Some(e) = c.ecf {
                self.ecf += e * hours;
                self.ecf_measured += u;
            }
            if let Some(x) = c.sat {
                // A MIG instance's saturation is in whole-GPU terms (the sizing's): a
                // fraction of the whole GPU's time, not of its share's.
                self.sat += x * if c.track.is_mig {
                    hours_per_step
                } else {
                    hours
                };
                self.sat_measured += u;
            }
        }
    }
}

impl CostAcc {
    /// Adds the `cost` of a charge of use `class` with effective compute `ecf`.
    fn add(&mut self, class: Use, cost: f64, ecf: Option<f64>) {
        self.allocated += cost;
        *match class {
            Use::Unavailable => &mut self.unavailable,
            Use::Unknown => &mut self.unknown,
            Use::Unmeasured => &mut self.unmeasured,
            Use::Idle => &mut self.idle,
            Use::Used => &mut self.used,
        } += cost;
        if matches!(class, Use::Idle | Use::Used)
            && let Some(e) = ecf
        {
            self.ecf += e * cost;
        }
    }
}

/// One group's row of a period, from its accumulator.
fn group_hours(g: &str, a: &Acc, requested: &BTreeMap<String, f64>, w: &Window<'_>) -> GroupHours {
    let hours = |u: u64| gpu_hours(u, w.hours_per_step);
    GroupHours {
        group: g.to_owned(),
        workloads: a.workloads.len(),
        allocated_gpu_hours: hours(a.allocated),
        requested_gpu_hours: requested.get(g).copied(),
        used_gpu_hours: hours(a.used),
        idle_gpu_hours: hours(a.idle),
        unmeasured_gpu_hours: hours(a.unmeasured),
        use_unknown_gpu_hours: hours(a.unknown),
        unavailable_gpu_hours: (a.health_read > 0).then(|| hours(a.unavailable)),
        health_measured_gpu_hours: hours(a.health_read),
        busy_gpu_hours: (a.busy_measured > 0).then_some(a.busy),
        busy_measured_gpu_hours: hours(a.busy_measured),
        effective_compute_gpu_hours: (a.ecf_measured > 0).then_some(a.ecf),
        effective_compute_measured_gpu_hours: hours(a.ecf_measured),
        time_sliced_effective_compute_gpu_hours: a.time_sliced_ecf,
        effective_compute_estimate_gpu_hours: a.ecf_estimate,
        saturation_gpu_hours: (a.sat_measured > 0).then_some(a.sat),
        saturation_measured_gpu_hours: hours(a.sat_measured),
        energy_kwh: a.energy_mj.map(kwh),
        energy_measured_gpu_hours: hours(a.energy_measured),
        energy_cost: a
            .energy_mj
            .zip(w.cfg.energy_price_per_kwh)
            .map(|(e, p)| kwh(e) * p),
        simulated: a.simulated,
        assumed_share_gpu_hours: hours(a.assumed_share),
        cost: a.cost.as_ref().filter(|_| !a.unpriced).map(|c| GroupCost {
            allocated: c.allocated,
            requested: requested
                .get(g)
                .zip(w.cfg.default_price)
                .map(|(h, p)| h * p),
            used: c.used,
            idle: c.idle,
            unmeasured: c.unmeasured,
            use_unknown: c.unknown,
            unavailable: (a.health_read > 0).then_some(c.unavailable),
            effective_compute: (a.ecf_measured > 0).then_some(c.ecf),
        }),
    }
}

/// A period of `steps` steps from `start_step`, from its accumulator: its groups (and those
/// in `requested` that held nothing), largest first, and whether they reconcile.
pub(super) fn period(
    acc: &PeriodAcc,
    start_step: usize,
    steps: usize,
    requested: &BTreeMap<String, f64>,
    w: &Window<'_>,
) -> Period {
    let hours = |u: u64| gpu_hours(u, w.hours_per_step);
    let mut groups: Vec<GroupHours> = acc
        .groups
        .iter()
        .map(|(g, a)| group_hours(g, a, requested, w))
        .collect();
    // Requested by groups that held nothing.
    for (g, h) in requested {
        if !acc.groups.contains_key(g) {
            // It held nothing: where prices were given, that costs exactly 0.
            let cost = w.priced.then(|| GroupCost {
                requested: w.cfg.default_price.map(|p| h * p),
                ..GroupCost::default()
            });
            groups.push(GroupHours {
                group: g.clone(),
                requested_gpu_hours: Some(*h),
                cost,
                ..GroupHours::default()
            });
        }
    }
    groups.sort_by(|a, b| {
        b.allocated_gpu_hours
            .total_cmp(&a.allocated_gpu_hours)
            .then_with(|| a.group.cmp(&b.group))
    });
    let allocated: u64 = acc.groups.values().map(|a| a.allocated).sum();
    let (unallocated, unknown) = (&acc.unallocated, &acc.allocation_unknown);
    let (reconciled, check) = reconcile(acc, allocated, w.hours_per_step);
    Period {
        start_step,
        steps,
        groups,
        energy: period_energy(acc, w),
        unallocated_gpu_hours: hours(unallocated.units),
        unallocated_simulated: unallocated.simulated,
        unallocated_cost: unallocated.cost(w.priced),
        unallocated_health_measured_gpu_hours: hours(acc.unallocated_health.0),
        unallocated_unavailable_gpu_hours: (acc.unallocated_health.0 > 0)
            .then(|| hours(acc.unallocated_health.1)),
        unallocated_assumed_share_gpu_hours: hours(acc.unallocated_assumed),
        allocation_unknown_gpu_hours: hours(unknown.units),
        allocation_unknown_simulated: unknown.simulated,
        allocation_unknown_cost: unknown.cost(w.priced),
        funnel: acc.funnel.funnel(w.hours_per_step),
        fleet_gpu_hours: hours(acc.fleet),
        overallocated_gpu_hours: hours(acc.overallocated),
        reconciled,
        check,
    }
}

/// Whether the groups' `allocated` units, the unallocated and those whose allocation is
/// unknown are the fleet's exactly, and the check in words.
fn reconcile(acc: &PeriodAcc, allocated: u64, hours_per_step: f64) -> (bool, String) {
    let hours = |u: u64| gpu_hours(u, hours_per_step);
    let (unallocated, unknown) = (acc.unallocated.units, acc.allocation_unknown.units);
    let reconciled = allocated + unallocated + unknown == acc.fleet + acc.overallocated
        && acc.overallocated == 0;
    let unknown = if unknown > 0 {
        format!(" + allocation unknown {:.3}", hours(unknown))
    } else {
        String::new()
    };
    let broken = if reconciled {
        String::new()
    } else {
        format!(
            ": does not reconcile, {:.3} GPU-hours allocated beyond whole GPUs",
            hours(acc.overallocated)
        )
    };
    let check = format!(
        "groups {:.3} + unallocated {:.3}{unknown} = fleet {:.3} GPU-hours{broken}",
        hours(allocated),
        hours(unallocated),
        hours(acc.fleet),
    );
    (reconciled, check)
}

/// A period's energy: the groups' (their shares of each GPU's energy), what no pod held (a
/// GPU no pod holds: all of its energy, its idle floor with it) and the fleet's, and whether
/// they add up exactly (in millijoules); `None` where no power was read.
fn period_energy(acc: &PeriodAcc, w: &Window<'_>) -> Option<PeriodEnergy> {
    let e = &acc.energy;
    if !e.measured {
        return None;
    }
    let groups: u64 = acc.groups.values().filter_map(|a| a.energy_mj).sum();
    let reconciled = groups + e.unallocated_mj == e.fleet_mj;
    let check = format!(
        "groups {:.6} + unallocated {:.6} {} fleet {:.6} kWh",
        kwh(groups),
        kwh(e.unallocated_mj),
        if reconciled { "=" } else { "!=" },
        kwh(e.fleet_mj)
    );
    let price = w.cfg.energy_price_per_kwh;
    Some(PeriodEnergy {
        groups_kwh: kwh(groups),
        unallocated_kwh: kwh(e.unallocated_mj),
        unallocated_measured_gpu_hours: gpu_hours(e.unallocated_measured, w.hours_per_step),
        fleet_kwh: kwh(e.fleet_mj),
        unallocated_cost: price.map(|p| kwh(e.unallocated_mj) * p),
        fleet_cost: price.map(|p| kwh(e.fleet_mj) * p),
        reconciled,
        check,
    })
}
