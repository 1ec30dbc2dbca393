//! Showback: the GPU-hours each group of pods (a namespace, a pod label's value, a node, a
//! GPU model) held over a window, against what they really did with them, reconciled with
//! the fleet's GPU-hours.
//!
//! The input is the fleet's [`Track`]s (one per pod on a GPU, or a GPU without pod labels)
//! and the group of each. A pod holds its GPU from its first reading to its last (its
//! lifetime, as OpenCost counts runtime); a step inside it with no reading of use (neither
//! the busy flag nor effective compute) is *unmeasured*: never idle, never zero.
//!
//! **Allocation policy.** At each step every physical GPU is one GPU-step, split among the
//! pods that hold it then:
//! - a whole GPU held by one pod: all of it;
//! - a time-sliced GPU held by `k` pods: `1/k` each. Their counters are the device's, not
//!   theirs: each one's use is *unknown*, never the device's use copied to each. The
//!   device's measured effective compute is billed to its holders as the GPU is, `1/k`
//!   each ([`GroupHours::time_sliced_effective_compute_gpu_hours`]); per-process
//!   attribution's split by SM-busy share is an *estimate*, shown in a column of its own
//!   ([`GroupHours::effective_compute_estimate_gpu_hours`]) and never billed as measured;
//! - a MIG instance: its compute slices over the GPU's (`3g.40gb` is 3/7 of an H100), the
//!   convention of NVIDIA's and GKE's slice naming; an instance whose profile is not known
//!   takes an equal part with the GPU's other instances at that step. Each instance's use is
//!   its own counters';
//! - what no pod holds is *unallocated*;
//! - a step no series of the GPU covered (between two holders' series, or a gap in the
//!   device's own) is *allocation unknown*: whether a pod held it was not read, so it is
//!   neither unallocated nor any group's.
//!
//! Shares are counted in integer units of 1/[`SHARE_UNITS`] of a GPU-step (a multiple of
//! every split up to 12 ways and of 7 and 4 compute slices), so that the groups plus
//! unallocated plus allocation unknown add up to the fleet exactly, which
//! [`Period::reconciled`] checks.
//!
//! **Use** of a measured step: *idle* when the busy flag (where measured) is below the
//! busy threshold and effective compute (where measured) below its threshold, as the
//! fleet report's idle capacity; *used* otherwise. *Effective compute* and *saturation*
//! GPU-hours are the fraction times the allocated time, over the steps where each was
//! measured (the measured hours are given beside them). The busy flag's GPU-hours are
//! there for comparison: they are what `nvidia-smi` and OpenCost's usage basis count.
//!
//! [`Track`]: crate::fleet::Track

mod by_model;
mod charges;
#[cfg(test)]
mod fraction_tests;
mod funnel;
#[cfg(test)]
mod holder_tests;
mod notes;
mod periods;
mod shares;
#[cfg(test)]
mod tests;

use crate::fleet::{FleetInput, Track};
use charges::{PeriodAcc, period};
use notes::notes;
use serde::Serialize;
use shares::charge_gpu;
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use by_model::{ModelPart, showback_by_model};
pub use charges::{check_against_sizing, model_price};
pub use funnel::Funnel;

/// Units of one GPU-step: lcm(1..=12), so that splits up to 12 ways, and 7 or 4 compute
/// slices, are exact.
pub const SHARE_UNITS: u64 = 27_720;

/// What showback is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct ShowbackConfig {
    /// What groups are (`namespace`, `label:team`, `node`, `model`), for the output.
    pub by: String,
    /// A step is idle when the busy flag (where measured) is below this…
    pub idle_busy_below: f64,
    /// …and effective compute (where measured) below this.
    pub idle_compute_below: f64,
    /// Steps per period (one row per group and period); `None`: the whole window only.
    pub period_steps: Option<usize>,
    /// With periods: the steps before the first period boundary, so that periods fall on
    /// the calendar's (a day's from midnight UTC): the first period is that long, the
    /// others `period_steps`. 0 (or a multiple of `period_steps`): the periods start at the
    /// window's first step.
    pub period_offset: usize,
    /// Price of one GPU-hour of a model without its own price.
    pub default_price: Option<f64>,
    /// Prices of one GPU-hour by model, as reported (`NVIDIA H100 80GB HBM3`).
    pub prices: Vec<(String, f64)>,
    /// Price of one kWh, for the cost of energy.
    pub energy_price_per_kwh: Option<f64>,
}

/// One group's GPU-hours over a period.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GroupHours {
    /// The group (`(none)` for pods without the attribute).
    pub group: String,
    /// Pod workloads (a pod on a GPU) of the group with a reading in the period.
    pub workloads: usize,
    /// GPU-hours held (allocated by the policy above).
    pub allocated_gpu_hours: f64,
    /// GPU-hours requested (kube-state-metrics' `nvidia_com_gpu` requests), when known.
    pub requested_gpu_hours: Option<f64>,
    /// Allocated GPU-hours at steps whose use was measured and not idle.
    pub used_gpu_hours: f64,
    /// Allocated GPU-hours at idle steps.
    pub idle_gpu_hours: f64,
    /// Allocated GPU-hours at steps with no reading of use.
    pub unmeasured_gpu_hours: f64,
    /// Allocated GPU-hours of a time-sliced GPU whose use per holder is not known.
    pub use_unknown_gpu_hours: f64,
    /// Allocated GPU-hours at steps the GPU was unavailable ([`crate::health`]): held, but
    /// it could take no work; never idle, never used. Judged over
    /// `health_measured_gpu_hours`; `None` where no health field was read in any of its
    /// GPU-hours (unknown, never 0).
    pub unavailable_gpu_hours: Option<f64>,
    /// Allocated GPU-hours whose GPU had a health field read.
    pub health_measured_gpu_hours: f64,
    /// The busy flag × allocated time, where measured (for comparison); `None` where it
    /// never was (no allocated GPU-hour with the busy flag read).
    pub busy_gpu_hours: Option<f64>,
    /// Allocated GPU-hours at which the busy flag was measured.
    pub busy_measured_gpu_hours: f64,
    /// Effective compute × allocated time, where measured; `None` where it never was.
    pub effective_compute_gpu_hours: Option<f64>,
    /// Allocated GPU-hours at which effective compute was measured.
    pub effective_compute_measured_gpu_hours: f64,
    /// Time-sliced GPUs: the device's measured effective compute × this group's allocated
    /// share of it (`1/k` of a GPU `k` pods hold), where measured: the device total billed
    /// as the allocation policy splits the GPU, not the holders' own use; `None` when the
    /// group held no time-sliced GPU whose effective compute was measured.
    pub time_sliced_effective_compute_gpu_hours: Option<f64>,
    /// An **estimate**, never billed: a time-sliced GPU's effective compute split among its
    /// holders by their processes' share of SM busy time
    /// (`truthscale_pod_effective_compute_estimate_ratio`) × time. Each holder's lies between
    /// 0 and the device's measured total. `None` when there was no such split.
    pub effective_compute_estimate_gpu_hours: Option<f64>,
    /// Roofline saturation × allocated time, where measured; `None` where it never was.
    pub saturation_gpu_hours: Option<f64>,
    /// Allocated GPU-hours at which saturation was measured.
    pub saturation_measured_gpu_hours: f64,
    /// The group's energy, kWh: its share of each GPU's energy at each step (the same
    /// shares as its GPU-hours), where the GPU's power was read; `None` where none was.
    pub energy_kwh: Option<f64>,
    /// Allocated GPU-hours at which the GPU's power was read: those `energy_kwh` covers
    /// (below `allocated_gpu_hours`, the energy is a lower bound).
    pub energy_measured_gpu_hours: f64,
    /// What that energy costs, with a price per kWh.
    pub energy_cost: Option<f64>,
    /// The cost of each, with a price.
    pub cost: Option<GroupCost>,
    /// Whether any of these GPU-hours were of a simulated GPU (the simulator's, whose model
    /// reads `Simulated …`): figures of a demo, never a bill.
    pub simulated: bool,
    /// Of `allocated_gpu_hours`, those of MIG instances of an unknown profile, whose share
    /// of their GPU was **assumed** (an equal part with the GPU's other instances), not
    /// read: their hours, and what they cost, would be exact with the profile read.
    pub assumed_share_gpu_hours: f64,
}

/// What a group's GPU-hours cost (each GPU-hour at its model's price).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GroupCost {
    /// Of the allocated GPU-hours.
    pub allocated: f64,
    /// Of the requested GPU-hours (at the default price), when both are known.
    pub requested: Option<f64>,
    /// Of the used GPU-hours.
    pub used: f64,
    /// Of the idle GPU-hours: the cost of idle.
    pub idle: f64,
    /// Of the unmeasured GPU-hours.
    pub unmeasured: f64,
    /// Of the GPU-hours whose use is unknown.
    pub use_unknown: f64,
    /// Of the GPU-hours the GPU was unavailable; `None` where health was never read.
    pub unavailable: Option<f64>,
    /// Of the effective compute GPU-hours; `None` where effective compute was never
    /// measured.
    pub effective_compute: Option<f64>,
}

/// The groups' GPU-hours over one period of the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Period {
    /// First step of the period.
    pub start_step: usize,
    /// Steps in the period.
    pub steps: usize,
    /// Each group, most allocated first.
    pub groups: Vec<GroupHours>,
    /// The period's energy and its reconciliation; `None` where no power was read.
    pub energy: Option<PeriodEnergy>,
    /// GPU-hours no pod held.
    pub unallocated_gpu_hours: f64,
    /// Whether any of the GPU-hours no pod held were of a simulated GPU.
    pub unallocated_simulated: bool,
    /// What the GPU-hours no pod held cost (each GPU's hours at its model's price), with a
    /// price; `None` without one.
    pub unallocated_cost: Option<f64>,
    /// Of the GPU-hours no pod held, those at which a health field of the GPU was read: the
    /// hours `unallocated_unavailable_gpu_hours` was judged over.
    pub unallocated_health_measured_gpu_hours: f64,
    /// Of the GPU-hours no pod held, those at which the GPU was unavailable ([`crate::health`]);
    /// `None` where no health field was read in any of them (unknown, never 0).
    pub unallocated_unavailable_gpu_hours: Option<f64>,
    /// Of the GPU-hours no pod held, those of GPUs on which a MIG instance's share was
    /// assumed (an instance of an unknown profile): what is left of such a GPU depends on
    /// the assumption.
    pub unallocated_assumed_share_gpu_hours: f64,
    /// GPU-hours between a GPU's first reading and its last at steps at which nothing of the
    /// GPU was read and no series names a holder (between two holders' series, or a gap in
    /// the device's own): not known whether a pod held them, so neither unallocated nor any
    /// group's. What no pod held lies between `unallocated_gpu_hours`
    /// and that plus these; reading the GPU's device series at every step (node mode,
    /// dcgm-exporter) makes it exact. A sidecar deployment has no series of a GPU no pod
    /// holds, so its gaps between holders are counted here.
    pub allocation_unknown_gpu_hours: f64,
    /// Whether any of them were of a simulated GPU.
    pub allocation_unknown_simulated: bool,
    /// What they cost (each GPU's hours at its model's price), with a price; `None` without
    /// one.
    pub allocation_unknown_cost: Option<f64>,
    /// The funnel: total → healthy → allocated → active → effective, each loss named.
    pub funnel: Funnel,
    /// The fleet's GPU-hours: each GPU from its first reading to its last.
    pub fleet_gpu_hours: f64,
    /// GPU-hours allocated beyond a whole GPU (pods' shares adding up to more than one):
    /// zero when the policy holds.
    pub overallocated_gpu_hours: f64,
    /// Whether the groups plus unallocated plus allocation unknown are the fleet, exactly
    /// (in share units).
    pub reconciled: bool,
    /// The check, in words.
    pub check: String,
}

/// A period's energy: the groups', what no pod held, the fleet's, reconciled exactly.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PeriodEnergy {
    /// The groups' energy, kWh (the sum of their `energy_kwh`).
    pub groups_kwh: f64,
    /// The energy no pod held, kWh: a GPU no pod holds, all of it (its idle floor with it);
    /// a GPU partly held, the rest of its shares.
    pub unallocated_kwh: f64,
    /// The unallocated GPU-hours whose power was read: those `unallocated_kwh` covers.
    pub unallocated_measured_gpu_hours: f64,
    /// The fleet's energy, kWh: each GPU's mean power times the step, at the steps read.
    pub fleet_kwh: f64,
    /// What the unallocated energy costs, with a price per kWh.
    pub unallocated_cost: Option<f64>,
    /// What the fleet's energy costs, with a price per kWh.
    pub fleet_cost: Option<f64>,
    /// Whether the groups plus unallocated are the fleet, exactly (in millijoules).
    pub reconciled: bool,
    /// The check, in words.
    pub check: String,
}

/// Showback over the window, and per period when asked.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Showback {
    /// What groups are.
    pub by: String,
    /// The whole window.
    pub total: Period,
    /// Each period, when asked (`ShowbackConfig::period_steps`).
    pub periods: Vec<Period>,
    /// The allocation policy and the definitions, in words.
    pub policy: Vec<String>,
    /// What was missing or is to be read with care, in words.
    pub notes: Vec<String>,
    /// The physical GPUs and GPU-hours charged to any group, against the sizing's
    /// ([`check_against_sizing`]).
    pub allocation: Allocation,
    /// Whether prices were given: a cost that is `None` is then unknown (a model without a
    /// price), not one that does not apply.
    #[serde(skip)]
    pub priced: bool,
}

/// What the showback allocated, physical GPU by physical GPU, and whether the sizing of the
/// same report counts the same.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Allocation {
    /// Physical GPUs some group was charged for.
    pub gpus: usize,
    /// Physical GPU-hours in which some group held the GPU (a MIG GPU's hour counts once,
    /// whatever its instances).
    pub gpu_hours: f64,
    /// Of them, the hours with nothing read of the GPU (held, unmeasured): the sizing
    /// counts a GPU only where something was read.
    pub unread_gpu_hours: f64,
    /// The sizing's allocated GPU-hours (its allocated GPUs at each step), once checked.
    pub sizing_gpu_hours: Option<f64>,
    /// Whether the sizing counts exactly the read hours the showback charged.
    pub agrees: Option<bool>,
    /// The check, in words.
    pub check: String,
}

/// A holder of a GPU whose own series name no pod: node mode's allocation info, read from
/// truthscale's history (a time-sliced GPU's device series carry no pod).
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    /// `namespace/pod`.
    pub pod: String,
    /// Its group.
    pub group: String,
    /// Its estimated part of the device's effective compute, as a fraction of the whole
    /// GPU, when per-process attribution split the device by SM-busy share
    /// (`truthscale_pod_effective_compute_estimate_ratio`): an estimate, never billed.
    pub effective_compute_estimate: Option<f64>,
    /// How the estimate was made (the series' `method`).
    pub method: Option<String>,
}

/// The holders of each GPU (by its track's `gpu` key) at each step.
pub type Holders = HashMap<String, BTreeMap<usize, Vec<Holding>>>;

/// A pod's fraction of a GPU as its scheduler granted it: HAMi's `nvidia.com/gpucores`
/// (percent of the compute), `nvidia.com/gpumem` (MiB) and `nvidia.com/gpumem-percentage`
/// requests, KAI's `gpu-fraction` and `gpu-memory` (MiB) annotations. A holder with a
/// fraction is charged it, not `1/k`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Fraction {
    /// Of the GPU's compute, above 0 up to 1 (gpucores / 100, gpu-fraction): the share.
    pub compute: Option<f64>,
    /// Of the GPU's memory, MiB: the share where no compute part is given, over the GPU's
    /// memory.
    pub memory_mib: Option<f64>,
    /// Of the GPU's memory, above 0 up to 1 (HAMi's gpumem-percentage / 100): the share
    /// where neither a compute part nor a memory size over a known total is given.
    pub memory_share: Option<f64>,
    /// A placeholder holding the device for its tenants (KAI's reservation pod): never a
    /// tenant, never charged.
    pub placeholder: bool,
}

/// Each pod's (`namespace/pod`) fraction of the GPUs it holds.
pub type Fractions = HashMap<String, Fraction>;

/// Each pod's (`namespace/pod`) own measured use of its GPU at each step, as a fraction of
/// the whole GPU (HAMi's per-container utilization over 100): where present, a shared GPU's
/// holder's use is this, not unknown.
pub type MeasuredUse = HashMap<String, BTreeMap<usize, f64>>;

/// Namespaces whose pods only reserve a GPU for fractional tenants (KAI scheduler's
/// reservation pods): placeholders, never charged.
pub const RESERVATION_NAMESPACES: [&str; 2] = ["kai-resource-reservation", "runai-reservation"];

impl Fraction {
    /// Its share units of a GPU of `total_mib` MiB (`None`: no fraction given, or only a
    /// memory size on a GPU of unknown memory).
    #[must_use]
    pub fn units(&self, total_mib: Option<f64>) -> Option<u64> {
        let valid = |x: &f64| x.is_finite() && *x > 0.0;
        let of_total = |m: f64| total_mib.filter(valid).map(|t| m / t);
        let share = self
            .compute
            .filter(valid)
            .or_else(|| self.memory_mib.filter(valid).and_then(of_total))
            .or_else(|| self.memory_share.filter(valid))?;
        Some((share.min(1.0) * SHARE_UNITS as f64).round() as u64)
    }
}

/// The share of its GPU the pod of `track` was granted, as the showback charges it (its
/// fraction in share units, over [`SHARE_UNITS`]); 0 for a placeholder (KAI's reservation
/// pod, never charged); `None` where it has none.
#[must_use]
pub fn granted_share(fractions: &Fractions, track: &Track) -> Option<f64> {
    if track
        .pod
        .as_deref()
        .is_some_and(|p| placeholder(fractions, p))
    {
        return Some(0.0);
    }
    shares::fraction_units(fractions, track.pod.as_deref(), track)
        .map(|u| u as f64 / SHARE_UNITS as f64)
}

/// Whether `pod` (`namespace/pod`) is a placeholder: in a reservation namespace, or so
/// marked.
fn placeholder(fractions: &Fractions, pod: &str) -> bool {
    let ns = pod.split_once('/').map_or("", |(ns, _)| ns);
    RESERVATION_NAMESPACES.contains(&ns) || fractions.get(pod).is_some_and(|f| f.placeholder)
}

/// What charging the window's steps reads: the request, and the window's steps and periods.
struct Window<'a> {
    input: &'a FleetInput,
    group: &'a [Option<String>],
    holders: &'a Holders,
    fractions: &'a Fractions,
    measured: &'a MeasuredUse,
    cfg: &'a ShowbackConfig,
    hours_per_step: f64,
    /// Steps per period.
    per: usize,
    /// Steps before the first period boundary (below `per`; 0: none).
    offset: usize,
    /// Whether any price was given.
    priced: bool,
    /// What each track's own pod and model decide, worked out once (not at every step).
    facts: Vec<Facts>,
}

/// What a track's pod and model decide for all its steps.
struct Facts {
    /// Its price per GPU-hour ([`charges::price_of`]).
    price: Option<f64>,
    /// Its pod is a placeholder ([`placeholder`]).
    placeholder: bool,
    /// Its pod's granted fraction of the GPU, in share units.
    fraction: Option<u64>,
}

/// The whole window's accumulator and each period's.
struct Accs {
    total: PeriodAcc,
    each: Vec<PeriodAcc>,
}

impl Accs {
    /// The whole window's and the period's of `period` (the last for any beyond it).
    fn both(&mut self, period: usize) -> [&mut PeriodAcc; 2] {
        let last = self.each.len() - 1;
        [&mut self.total, &mut self.each[period.min(last)]]
    }
}

/// What the steps leave to the notes and the allocation check.
#[derive(Default)]
struct Tally {
    unknown_profile: bool,
    shared_gpus: usize,
    split_by_processes: BTreeSet<String>,
    /// Pods charged a fraction, and placeholders left uncharged.
    fractional: BTreeSet<String>,
    placeholders: BTreeSet<String>,
    unpriced: BTreeSet<String>,
    /// GPUs charged at some step, GPU-steps charged, and those with nothing read.
    allocation: (usize, u64, u64),
    /// GPU-steps charged with their power read, and without.
    energy_steps: (u64, u64),
    /// GPU-steps no pod held (something of the GPU read) with their power read, and
    /// without.
    unheld_energy_steps: (u64, u64),
    /// GPUs with steps whose allocation is unknown (nothing of the GPU read, no holder
    /// named), and those GPU-steps.
    allocation_unknown: (usize, u64),
}

impl Tally {
    /// A GPU-step charged to `charges` (none read: nothing read of it), or none (`seen`:
    /// something of the GPU read, so no pod held it), its power read or not.
    fn count_step(&mut self, charges: &[shares::Charge<'_>], seen: bool, power_read: bool) {
        let energy = if !charges.is_empty() {
            self.allocation.1 += 1;
            self.allocation.2 += u64::from(!charges.iter().any(|c| c.read));
            &mut self.energy_steps
        } else if seen {
            &mut self.unheld_energy_steps
        } else {
            return;
        };
        if power_read {
            energy.0 += 1;
        } else {
            energy.1 += 1;
        }
    }
}

/// GPU-hours requested, by group and by point (an index on the tracks' grid).
pub type Requested = BTreeMap<String, BTreeMap<usize, f64>>;

/// Showback of `input`, with `group[i]` the group of track `i` (`None`: no pod holds it),
/// `holders` the holders of GPUs whose own series name no pod, and `requested` the requested
/// GPU-hours by group and point.
#[must_use]
pub fn showback(
    input: &FleetInput,
    group: &[Option<String>],
    holders: &Holders,
    requested: &Requested,
    cfg: &ShowbackConfig,
) -> Showback {
    let none = (&Fractions::new(), &MeasuredUse::new());
    showback_with(input, group, holders, requested, none, cfg)
}

/// [`showback`] with each pod's granted fraction of its GPU and its own measured use
/// (`fractions`, `measured`): a holder with a fraction is charged it, a placeholder nothing;
/// a holder whose use was measured has that use at those steps.
#[must_use]
pub fn showback_with(
    input: &FleetInput,
    group: &[Option<String>],
    holders: &Holders,
    requested: &Requested,
    (fractions, measured): (&Fractions, &MeasuredUse),
    cfg: &ShowbackConfig,
) -> Showback {
    let w = window(input, group, holders, (fractions, measured), cfg);
    of_gpus(&w, &gpus_of(input), requested)
}

/// What every step of the showback reads: the input, each track's price and share, the
/// period length.
fn window<'a>(
    input: &'a FleetInput,
    group: &'a [Option<String>],
    holders: &'a Holders,
    (fractions, measured): (&'a Fractions, &'a MeasuredUse),
    cfg: &'a ShowbackConfig,
) -> Window<'a> {
    Window {
        input,
        group,
        holders,
        fractions,
        measured,
        cfg,
        hours_per_step: input.step_seconds / 3600.0,
        per: cfg
            .period_steps
            .filter(|p| *p > 0)
            .unwrap_or(input.steps.max(1)),
        offset: cfg
            .period_steps
            .filter(|p| *p > 0)
            .map_or(0, |p| cfg.period_offset % p),
        priced: cfg.default_price.is_some() || !cfg.prices.is_empty(),
        facts: input
            .tracks
            .iter()
            .map(|t| Facts {
                price: charges::price_of(t, cfg),
                placeholder: t.pod.as_deref().is_some_and(|p| placeholder(fractions, p)),
                fraction: shares::fraction_units(fractions, t.pod.as_deref(), t),
            })
            .collect(),
    }
}

/// A physical GPU (its tracks' `gpu` key) and its tracks with any step (their indices).
type GpuTracks<'a> = (&'a str, Vec<usize>);

/// Each physical GPU of `input` and its tracks, in the key's order.
fn gpus_of(input: &FleetInput) -> Vec<GpuTracks<'_>> {
    let mut by_gpu: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, t) in input.tracks.iter().enumerate() {
        if t.lifetime_steps() > 0 {
            by_gpu.entry(t.gpu.as_str()).or_default().push(i);
        }
    }
    let mut gpus: Vec<GpuTracks<'_>> = by_gpu.into_iter().collect();
    gpus.sort_by(|a, b| a.0.cmp(b.0));
    gpus
}

/// The GPU-hours `requested` by each group at the points `from..to`: the groups with a
/// request there only (a group whose requests fall elsewhere has none known here).
fn requested_in(requested: &Requested, from: usize, to: usize) -> BTreeMap<String, f64> {
    requested
        .iter()
        .filter_map(|(g, by)| {
            let mut hours = by.range(from..to).map(|(_, h)| *h).peekable();
            hours.peek()?;
            Some((g.clone(), hours.sum()))
        })
        .collect()
}

/// The showback of the GPUs `gpus` of `w`'s input, with `requested` the requested GPU-hours
/// by group and point.
fn of_gpus(w: &Window<'_>, gpus: &[GpuTracks<'_>], requested: &Requested) -> Showback {
    let (steps, cfg) = (w.input.steps, w.cfg);
    let periods = w.periods(steps);
    let mut accs = Accs {
        total: PeriodAcc::default(),
        each: vec![PeriodAcc::default(); periods],
    };
    let mut tally = Tally::default();
    for (_, members) in gpus {
        charge_gpu(w, members, &mut accs, &mut tally);
    }
    let hours_per_step = w.hours_per_step;
    let total = period(
        &accs.total,
        0,
        steps,
        &requested_in(requested, 0, usize::MAX),
        w,
    );
    let periods: Vec<Period> = if cfg.period_steps.is_some() {
        accs.each
            .iter()
            .enumerate()
            .map(|(k, acc)| {
                let (start, next) = (w.period_start(k), w.period_start(k + 1));
                let asked = requested_in(requested, start, next);
                period(acc, start, next.min(steps).saturating_sub(start), &asked, w)
            })
            .collect()
    } else {
        Vec::new()
    };
    let allocation = tally.allocation;
    Showback {
        by: cfg.by.clone(),
        total,
        periods,
        policy: policy(cfg),
        notes: notes(tally, hours_per_step),
        allocation: Allocation {
            gpus: allocation.0,
            gpu_hours: allocation.1 as f64 * hours_per_step,
            unread_gpu_hours: allocation.2 as f64 * hours_per_step,
            ..Allocation::default()
        },
        priced: w.priced,
    }
}

/// The allocation policy, as the report states it.
fn policy(cfg: &ShowbackConfig) -> Vec<String> {
    vec![
        "a GPU is held by a pod from its first reading to its last; a whole GPU held by one pod counts 1 GPU-hour an hour".into(),
        "a time-sliced GPU held by k pods counts 1/k to each; a MIG instance its compute slices over the GPU's (3g.40gb on an H100: 3/7)".into(),
        "a pod granted a fraction counts that fraction: HAMi's nvidia.com/gpucores over 100 (else nvidia.com/gpumem over the GPU's memory), KAI's gpu-fraction (else gpu-memory over the GPU's memory); pods without one on the same GPU share what is left equally; what no pod holds is unallocated; KAI's reservation pods are placeholders, never charged".into(),
        "a step at which nothing of a GPU was read and no series names a holder (between two holders' series) is allocation unknown: never unallocated, never any group's".into(),
        format!(
            "a step is idle when the busy flag is below {} and effective compute below {} (each where measured); unmeasured when neither was measured",
            cfg.idle_busy_below, cfg.idle_compute_below
        ),
        "effective compute and saturation GPU-hours are the fraction times the allocated time where measured (a holder's own: a GPU or MIG instance it holds alone); busy GPU-hours (the flag) for comparison".into(),
        "a time-sliced GPU's measured effective compute is billed to its holders 1/k each (time-sliced effective compute); the split by SM-busy share is an estimate, never billed".into(),
        "a step at which the GPU was judged unavailable (a pending or failed row remap, a fatal XID, a recovery action asked for) is unavailable: held, charged, but neither idle nor used".into(),
        "a GPU's energy at a step (its mean power times the step) is shared as its GPU-hours are; the energy of a GPU no pod holds, its idle floor with it, is unallocated; groups plus unallocated are the fleet's energy exactly".into(),
    ]
}
