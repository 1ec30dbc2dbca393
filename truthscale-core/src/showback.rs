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
//! - what no pod holds is *unallocated*.
//!
//! Shares are counted in integer units of 1/[`SHARE_UNITS`] of a GPU-step (a multiple of
//! every split up to 12 ways and of 7 and 4 compute slices), so that the groups plus
//! unallocated add up to the fleet exactly, which [`Period::reconciled`] checks.
//!
//! **Use** of a measured step: *idle* when the busy flag (where measured) is below the
//! busy threshold and effective compute (where measured) below its threshold, as the
//! fleet report's idle capacity; *used* otherwise. *Effective compute* and *saturation*
//! GPU-hours are the fraction times the allocated time, over the steps where each was
//! measured (the measured hours are given beside them). The busy flag's GPU-hours are
//! there for comparison: they are what `nvidia-smi` and OpenCost's usage basis count.

use crate::fleet::{FleetInput, Track};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

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
    /// Price of one GPU-hour of a model without its own price.
    pub default_price: Option<f64>,
    /// Prices of one GPU-hour by model, as reported (`NVIDIA H100 80GB HBM3`).
    pub prices: Vec<(String, f64)>,
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
    /// The busy flag × allocated time, where measured (for comparison).
    pub busy_gpu_hours: f64,
    /// Allocated GPU-hours at which the busy flag was measured.
    pub busy_measured_gpu_hours: f64,
    /// Effective compute × allocated time, where measured.
    pub effective_compute_gpu_hours: f64,
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
    /// Roofline saturation × allocated time, where measured.
    pub saturation_gpu_hours: f64,
    /// Allocated GPU-hours at which saturation was measured.
    pub saturation_measured_gpu_hours: f64,
    /// The cost of each, with a price.
    pub cost: Option<GroupCost>,
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
    /// Of the effective compute GPU-hours.
    pub effective_compute: f64,
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
    /// GPU-hours no pod held.
    pub unallocated_gpu_hours: f64,
    /// The fleet's GPU-hours: each GPU from its first reading to its last.
    pub fleet_gpu_hours: f64,
    /// GPU-hours allocated beyond a whole GPU (pods' shares adding up to more than one):
    /// zero when the policy holds.
    pub overallocated_gpu_hours: f64,
    /// Whether the groups plus unallocated are the fleet, exactly (in share units).
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
    busy: f64,
    busy_measured: u64,
    ecf: f64,
    ecf_measured: u64,
    sat: f64,
    sat_measured: u64,
    time_sliced_ecf: Option<f64>,
    ecf_estimate: Option<f64>,
    cost: Option<CostAcc>,
}

#[derive(Debug, Default, Clone)]
struct CostAcc {
    allocated: f64,
    used: f64,
    idle: f64,
    unmeasured: f64,
    unknown: f64,
    ecf: f64,
}

/// One holder's share of one GPU-step, and what it did with it (fractions of its share).
struct Charge<'a> {
    group: &'a str,
    pod: Option<&'a str>,
    /// Whether anything was read at this step.
    read: bool,
    units: u64,
    /// A time-sliced GPU's holder without a per-process part.
    unknown: bool,
    busy: Option<f64>,
    ecf: Option<f64>,
    sat: Option<f64>,
    /// A time-sliced GPU: the device's measured effective compute (a fraction of the GPU),
    /// billed by the holder's share.
    time_sliced_ecf: Option<f64>,
    /// A time-sliced GPU: the holder's estimated part of the device's effective compute (a
    /// fraction of the whole GPU), never billed.
    ecf_estimate: Option<f64>,
    /// The track whose model prices it.
    track: &'a Track,
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

/// What an allocated step's use was.
#[derive(Debug, Clone, Copy)]
enum Use {
    /// A time-sliced GPU's holder: the counters are the device's.
    Unknown,
    /// No reading of use.
    Unmeasured,
    Idle,
    Used,
}

/// Per period: the groups, and the fleet's unallocated, overallocated and total units.
#[derive(Debug, Default, Clone)]
struct PeriodAcc {
    groups: BTreeMap<String, Acc>,
    unallocated: u64,
    overallocated: u64,
    fleet: u64,
}

/// The compute slices of a whole GPU of a track's model (7, or 4 on A30): the largest
/// profile's.
fn total_slices(t: &Track) -> Option<u32> {
    t.spec?.mig.iter().map(|p| p.compute_slices).max()
}

/// Split `units` among `n` holders, exactly: the first `units % n` take one more.
fn split(units: u64, n: usize, i: usize) -> u64 {
    let n = n.max(1) as u64;
    units / n + u64::from((i as u64) < units % n)
}

/// What charging the window's steps reads: the request, and the window's steps and periods.
struct Window<'a> {
    input: &'a FleetInput,
    group: &'a [Option<String>],
    holders: &'a Holders,
    cfg: &'a ShowbackConfig,
    hours_per_step: f64,
    /// Steps per period.
    per: usize,
    /// Whether any price was given.
    priced: bool,
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
    unpriced: BTreeSet<String>,
    /// GPUs charged at some step, GPU-steps charged, and those with nothing read.
    allocation: (usize, u64, u64),
}

/// `u` share units over one step, as GPU-hours.
fn gpu_hours(u: u64, hours_per_step: f64) -> f64 {
    u as f64 / SHARE_UNITS as f64 * hours_per_step
}

/// A ratio unit of the fleet's tracks as a fraction.
fn ratio(x: u16) -> f64 {
    f64::from(x) / f64::from(crate::fleet::RATIO_UNITS)
}

/// The price of one GPU-hour of a track's model: its own, or the default.
fn price_of(t: &Track, cfg: &ShowbackConfig) -> Option<f64> {
    let own = t
        .model
        .as_deref()
        .and_then(|m| cfg.prices.iter().find(|(name, _)| name == m))
        .map(|(_, p)| *p);
    own.or(cfg.default_price)
        .filter(|p| p.is_finite() && *p >= 0.0)
}

/// Showback of `input`, with `group[i]` the group of track `i` (`None`: no pod holds it),
/// `holders` the holders of GPUs whose own series name no pod, and `requested` the requested
/// GPU-hours by group over the whole window.
#[must_use]
pub fn showback(
    input: &FleetInput,
    group: &[Option<String>],
    holders: &Holders,
    requested: &BTreeMap<String, f64>,
    cfg: &ShowbackConfig,
) -> Showback {
    let steps = input.steps;
    let w = Window {
        input,
        group,
        holders,
        cfg,
        hours_per_step: input.step_seconds / 3600.0,
        per: cfg.period_steps.filter(|p| *p > 0).unwrap_or(steps.max(1)),
        priced: cfg.default_price.is_some() || !cfg.prices.is_empty(),
    };
    let per = w.per;
    let periods = steps.div_ceil(per).max(1);
    let mut accs = Accs {
        total: PeriodAcc::default(),
        each: vec![PeriodAcc::default(); periods],
    };
    let mut tally = Tally::default();
    let mut by_gpu: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, t) in input.tracks.iter().enumerate() {
        if t.lifetime_steps() > 0 {
            by_gpu.entry(t.gpu.as_str()).or_default().push(i);
        }
    }
    let mut gpus: Vec<(&str, Vec<usize>)> = by_gpu.into_iter().collect();
    gpus.sort_by(|a, b| a.0.cmp(b.0));
    for (_, members) in &gpus {
        charge_gpu(&w, members, &mut accs, &mut tally);
    }
    let hours_per_step = w.hours_per_step;
    let total = period(&accs.total, 0, steps, Some(requested), &w);
    let periods: Vec<Period> = if cfg.period_steps.is_some() {
        accs.each
            .iter()
            .enumerate()
            .map(|(k, acc)| {
                let start = k * per;
                period(acc, start, per.min(steps.saturating_sub(start)), None, &w)
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
        notes: notes(tally, cfg, requested),
        allocation: Allocation {
            gpus: allocation.0,
            gpu_hours: allocation.1 as f64 * hours_per_step,
            unread_gpu_hours: allocation.2 as f64 * hours_per_step,
            ..Allocation::default()
        },
    }
}

/// Charges each step of one physical GPU (the tracks `members` read it) to its holders.
fn charge_gpu(w: &Window<'_>, members: &[usize], accs: &mut Accs, tally: &mut Tally) {
    let input = w.input;
    let mut charged = false;
    let tracks: Vec<&Track> = members.iter().map(|&i| &input.tracks[i]).collect();
    let first = tracks.iter().map(|t| t.first_step()).min().unwrap_or(0);
    let end = tracks
        .iter()
        .map(|t| t.first_step() + t.lifetime_steps())
        .max()
        .unwrap_or(0)
        .min(input.steps);
    let mut was_shared = false;
    for s in first..end {
        let (covering, mut shares, shared) = step_shares(w, members, s, &mut tally.unknown_profile);
        was_shared |= shared;
        let mut charges = track_charges(w, &shares, s, shared);
        // A GPU whose own series name no pod, held per node mode's allocation info (a
        // time-sliced GPU's device series carry none): its holders take its shares.
        let device = covering
            .iter()
            .map(|&i| &input.tracks[i])
            .find(|t| !t.is_mig && t.pod.is_none());
        if let (true, Some(dev)) = (shares.is_empty(), device)
            && let Some(hs) = w.holders.get(dev.gpu.as_str()).and_then(|m| m.get(&s))
            && !hs.is_empty()
        {
            was_shared |= hs.len() > 1;
            let by_processes = &mut tally.split_by_processes;
            holder_charges(dev, hs, s, (&mut shares, &mut charges), by_processes);
        }
        let sum: u64 = shares.iter().map(|(_, u)| u).sum();
        if !charges.is_empty() {
            charged = true;
            tally.allocation.1 += 1;
            tally.allocation.2 += u64::from(!charges.iter().any(|c| c.read));
        }
        let period = s / w.per;
        for acc in accs.both(period) {
            acc.fleet += SHARE_UNITS;
            acc.unallocated += SHARE_UNITS.saturating_sub(sum);
            acc.overallocated += sum.saturating_sub(SHARE_UNITS);
        }
        for c in &charges {
            add_charge(c, w, accs.both(period), &mut tally.unpriced);
        }
    }
    tally.shared_gpus += usize::from(was_shared);
    tally.allocation.0 += usize::from(charged);
}

/// The tracks of `members` covering step `s`, the shares of those a group holds (by the
/// allocation policy), and whether whole-GPU holders time-slice it.
fn step_shares(
    w: &Window<'_>,
    members: &[usize],
    s: usize,
    unknown_profile: &mut bool,
) -> (Vec<usize>, Vec<(usize, u64)>, bool) {
    let tracks = &w.input.tracks;
    let covering: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&i| {
            let t = &tracks[i];
            (t.first_step()..t.first_step() + t.lifetime_steps()).contains(&s)
        })
        .collect();
    let held: Vec<usize> = covering
        .iter()
        .copied()
        .filter(|&i| w.group[i].is_some())
        .collect();
    let mig_covering = covering.iter().filter(|&&i| tracks[i].is_mig).count();
    let whole: Vec<usize> = held
        .iter()
        .copied()
        .filter(|&i| !tracks[i].is_mig)
        .collect();
    let shared = whole.len() > 1;
    let mut shares: Vec<(usize, u64)> = Vec::with_capacity(held.len());
    for (j, &i) in whole.iter().enumerate() {
        shares.push((i, split(SHARE_UNITS, whole.len(), j)));
    }
    let unknown_migs: Vec<usize> = held
        .iter()
        .copied()
        .filter(|&i| {
            let t = &tracks[i];
            t.is_mig && (t.mig.is_none() || total_slices(t).is_none())
        })
        .collect();
    for &i in &held {
        let t = &tracks[i];
        if !t.is_mig {
            continue;
        }
        let u = match (t.mig, total_slices(t)) {
            (Some(p), Some(total)) => {
                SHARE_UNITS * u64::from(p.compute_slices) / u64::from(total.max(1))
            }
            _ => {
                *unknown_profile = true;
                let j = unknown_migs.iter().position(|&x| x == i).unwrap_or(0);
                split(SHARE_UNITS, mig_covering.max(1), j)
            }
        };
        shares.push((i, u));
    }
    (covering, shares, shared)
}

/// The charges of the tracks holding `shares` of a GPU at step `s` (`shared`: whole-GPU
/// holders time-slice it, so their use is unknown).
fn track_charges<'a>(
    w: &Window<'a>,
    shares: &[(usize, u64)],
    s: usize,
    shared: bool,
) -> Vec<Charge<'a>> {
    let mut charges: Vec<Charge<'a>> = Vec::with_capacity(shares.len());
    for &(i, u) in shares {
        let t = &w.input.tracks[i];
        let Some(g) = &w.group[i] else { continue };
        let p = t.points()[s - t.first_step()];
        charges.push(Charge {
            group: g,
            pod: t.pod.as_deref(),
            read: p.any(),
            units: u,
            unknown: shared && !t.is_mig,
            busy: p.busy().map(ratio),
            ecf: p.ecf().map(ratio),
            sat: p.sat().map(ratio),
            // Each holder's series is the device's: its value, by the holder's share.
            time_sliced_ecf: p.ecf().map(ratio).filter(|_| shared && !t.is_mig),
            ecf_estimate: None,
            track: t,
        });
    }
    charges
}

/// The shares and charges of the holders `hs` of a GPU whose own series `dev` names no pod,
/// at step `s`; the methods of per-process parts go to `by_processes`.
fn holder_charges<'a>(
    dev: &'a Track,
    hs: &'a [Holding],
    s: usize,
    (shares, charges): (&mut Vec<(usize, u64)>, &mut Vec<Charge<'a>>),
    by_processes: &mut BTreeSet<String>,
) {
    let p = dev.points()[s - dev.first_step()];
    let k = hs.len();
    for (j, h) in hs.iter().enumerate() {
        let u = split(SHARE_UNITS, k, j);
        shares.push((usize::MAX, u));
        let part = h
            .effective_compute_estimate
            .filter(|e| e.is_finite() && *e >= 0.0 && k > 1);
        if part.is_some() {
            by_processes.extend(h.method.iter().cloned());
        }
        charges.push(Charge {
            group: &h.group,
            pod: Some(&h.pod),
            read: p.any(),
            units: u,
            // One holder: the device's use is its own. Several: unknown; the device's
            // measured effective compute is billed by the holder's share, and the
            // per-process split is an estimate apart.
            unknown: k > 1,
            busy: p.busy().map(ratio).filter(|_| k == 1),
            ecf: p.ecf().map(ratio).filter(|_| k == 1),
            sat: p.sat().map(ratio).filter(|_| k == 1),
            time_sliced_ecf: p.ecf().map(ratio).filter(|_| k > 1),
            ecf_estimate: part,
            track: dev,
        });
    }
}

impl Use {
    /// The use of a charge's step, by the idle thresholds of `cfg`.
    fn of(c: &Charge<'_>, cfg: &ShowbackConfig) -> Use {
        let (busy, ecf) = (c.busy, c.ecf);
        if c.unknown {
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
/// (where prices were given) goes to `unpriced`.
fn add_charge(
    c: &Charge<'_>,
    w: &Window<'_>,
    accs: [&mut PeriodAcc; 2],
    unpriced: &mut BTreeSet<String>,
) {
    let hours = gpu_hours(c.units, w.hours_per_step);
    let price = price_of(c.track, w.cfg);
    if w.priced && price.is_none() {
        unpriced.insert(c.track.model.clone().unwrap_or_else(|| "unknown".into()));
    }
    let class = Use::of(c, w.cfg);
    for acc in accs {
        let a = acc.groups.entry(c.group.to_string()).or_default();
        if c.read
            && let Some(pod) = c.pod
        {
            a.workloads.insert(pod.to_string());
        }
        a.add(c, class, hours, w.hours_per_step);
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
        *match class {
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
        if matches!(class, Use::Idle | Use::Used) {
            if let Some(b) = c.busy {
                self.busy += b * hours;
                self.busy_measured += u;
            }
            if let Some(e) = c.ecf {
                self.ecf += e * hours;
                self.ecf_measured += u;
            }
            if let Some(x) = c.sat {
                self.sat += x * hours;
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
fn group_hours(
    g: &str,
    a: &Acc,
    requested: Option<&BTreeMap<String, f64>>,
    w: &Window<'_>,
) -> GroupHours {
    let hours = |u: u64| gpu_hours(u, w.hours_per_step);
    GroupHours {
        group: g.to_owned(),
        workloads: a.workloads.len(),
        allocated_gpu_hours: hours(a.allocated),
        requested_gpu_hours: requested.and_then(|r| r.get(g).copied()),
        used_gpu_hours: hours(a.used),
        idle_gpu_hours: hours(a.idle),
        unmeasured_gpu_hours: hours(a.unmeasured),
        use_unknown_gpu_hours: hours(a.unknown),
        busy_gpu_hours: a.busy,
        busy_measured_gpu_hours: hours(a.busy_measured),
        effective_compute_gpu_hours: a.ecf,
        effective_compute_measured_gpu_hours: hours(a.ecf_measured),
        time_sliced_effective_compute_gpu_hours: a.time_sliced_ecf,
        effective_compute_estimate_gpu_hours: a.ecf_estimate,
        saturation_gpu_hours: a.sat,
        saturation_measured_gpu_hours: hours(a.sat_measured),
        cost: a.cost.as_ref().map(|c| GroupCost {
            allocated: c.allocated,
            requested: requested
                .and_then(|r| r.get(g))
                .zip(w.cfg.default_price)
                .map(|(h, p)| h * p),
            used: c.used,
            idle: c.idle,
            unmeasured: c.unmeasured,
            use_unknown: c.unknown,
            effective_compute: c.ecf,
        }),
    }
}

/// A period of `steps` steps from `start_step`, from its accumulator: its groups (and those
/// in `requested` that held nothing), largest first, and whether they reconcile.
fn period(
    acc: &PeriodAcc,
    start_step: usize,
    steps: usize,
    requested: Option<&BTreeMap<String, f64>>,
    w: &Window<'_>,
) -> Period {
    let hours = |u: u64| gpu_hours(u, w.hours_per_step);
    let mut groups: Vec<GroupHours> = acc
        .groups
        .iter()
        .map(|(g, a)| group_hours(g, a, requested, w))
        .collect();
    // Requested by groups that held nothing.
    if let Some(r) = requested {
        for (g, h) in r {
            if !acc.groups.contains_key(g) {
                groups.push(GroupHours {
                    group: g.clone(),
                    requested_gpu_hours: Some(*h),
                    ..GroupHours::default()
                });
            }
        }
    }
    groups.sort_by(|a, b| {
        b.allocated_gpu_hours
            .total_cmp(&a.allocated_gpu_hours)
            .then_with(|| a.group.cmp(&b.group))
    });
    let allocated: u64 = acc.groups.values().map(|a| a.allocated).sum();
    let reconciled =
        allocated + acc.unallocated == acc.fleet + acc.overallocated && acc.overallocated == 0;
    let check = format!(
        "groups {:.3} + unallocated {:.3} = fleet {:.3} GPU-hours{}",
        hours(allocated),
        hours(acc.unallocated),
        hours(acc.fleet),
        if reconciled {
            String::new()
        } else {
            format!(
                ": does not reconcile, {:.3} GPU-hours allocated beyond whole GPUs",
                hours(acc.overallocated)
            )
        }
    );
    Period {
        start_step,
        steps,
        groups,
        unallocated_gpu_hours: hours(acc.unallocated),
        fleet_gpu_hours: hours(acc.fleet),
        overallocated_gpu_hours: hours(acc.overallocated),
        reconciled,
        check,
    }
}

/// The notes on what the steps met: time-sliced GPUs, per-process estimates, MIG instances
/// of unknown profiles, models without a price, requests over periods.
fn notes(tally: Tally, cfg: &ShowbackConfig, requested: &BTreeMap<String, f64>) -> Vec<String> {
    let mut notes = Vec::new();
    let shared_gpus = tally.shared_gpus;
    if shared_gpus > 0 {
        notes.push(format!(
            "{shared_gpus} GPU(s) were time-sliced between pods: each holder is charged its share of the GPU and the same share of the device's measured effective compute (time-sliced effective compute); its own use is unknown (the counters are the device's)"
        ));
    }
    if !tally.split_by_processes.is_empty() {
        notes.push(format!(
            "per-process attribution estimated each holder's part of shared GPUs' effective compute (method {}): an estimate, shown apart (effective compute estimate) and never billed as measured",
            tally.split_by_processes.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if tally.unknown_profile {
        notes.push("a MIG instance of an unknown profile took an equal part with its GPU's other instances".into());
    }
    if !tally.unpriced.is_empty() {
        notes.push(format!(
            "no price for {}: those GPU-hours have no cost",
            tally.unpriced.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if cfg.period_steps.is_some() && !requested.is_empty() {
        notes.push("requested GPU-hours are given for the whole window only".into());
    }
    notes
}

/// The allocation policy, as the report states it.
fn policy(cfg: &ShowbackConfig) -> Vec<String> {
    vec![
        "a GPU is held by a pod from its first reading to its last; a whole GPU held by one pod counts 1 GPU-hour an hour".into(),
        "a time-sliced GPU held by k pods counts 1/k to each; a MIG instance its compute slices over the GPU's (3g.40gb on an H100: 3/7)".into(),
        format!(
            "a step is idle when the busy flag is below {} and effective compute below {} (each where measured); unmeasured when neither was measured",
            cfg.idle_busy_below, cfg.idle_compute_below
        ),
        "effective compute and saturation GPU-hours are the fraction times the allocated time where measured (a holder's own: a GPU or MIG instance it holds alone); busy GPU-hours (the flag) for comparison".into(),
        "a time-sliced GPU's measured effective compute is billed to its holders 1/k each (time-sliced effective compute); the split by SM-busy share is an estimate, never billed".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::Point;

    fn cfg(by: &str) -> ShowbackConfig {
        ShowbackConfig {
            by: by.into(),
            idle_busy_below: 0.05,
            idle_compute_below: 0.01,
            period_steps: None,
            default_price: None,
            prices: Vec::new(),
        }
    }

    fn track(pod: Option<&str>, gpu: &str, points: &[Option<(f64, f64)>]) -> Track {
        let mut t = Track::new(pod.map(str::to_string), gpu.into());
        t.model = Some("NVIDIA H100 80GB HBM3".into());
        t.spec = crate::gpus::lookup("NVIDIA H100 80GB HBM3");
        for (s, p) in points.iter().enumerate() {
            let p = p.map_or(Point::NONE, |(busy, ecf)| {
                Point::new(Some(ecf), Some(busy), Some(ecf), Some(1e9))
            });
            t.record(s, p);
        }
        t
    }

    /// A whole GPU, a time-sliced one, a MIG instance and a GPU no pod holds, each over a
    /// few 60 s steps: every figure is counted by hand from the steps below.
    #[test]
    fn gpu_hours_by_group_reconcile_with_the_fleet() {
        let used = Some((0.9, 0.3));
        let idle = Some((0.0, 0.0));
        let a = track(
            Some("ml/a"),
            "n/g1",
            &[
                used,
                used,
                used,
                used,
                used,
                idle,
                idle,
                idle,
                None,
                Some((1.0, 0.5)),
            ],
        );
        let b = track(Some("ml/b"), "n/g2", &[used; 6]);
        let c = track(Some("web/c"), "n/g2", &[used; 6]);
        let mut d = track(Some("web/d"), "n/g3", &[Some((0.5, 0.2)); 7]);
        d.is_mig = true;
        d.mig = d
            .spec
            .and_then(|s| s.mig.iter().find(|p| p.name == "3g.40gb"));
        assert!(d.mig.is_some());
        let e = track(None, "n/g4", &[used; 4]);
        let input = FleetInput {
            step_seconds: 60.0,
            steps: 10,
            tracks: vec![a, b, c, d, e],
            held: Default::default(),
            step_bands: None,
        };
        let group = |t: &Track| {
            t.pod
                .as_deref()
                .map(|p| p.split('/').next().unwrap().to_string())
        };
        let groups: Vec<Option<String>> = input.tracks.iter().map(group).collect();
        let requested = BTreeMap::from([("ml".to_string(), 0.5), ("batch".to_string(), 0.25)]);
        let s = showback(
            &input,
            &groups,
            &Holders::new(),
            &requested,
            &cfg("namespace"),
        );
        let h = |steps: f64| steps / 60.0;
        let near = |x: f64, y: f64| assert!((x - y).abs() < 1e-9, "{x} != {y}");
        let t = &s.total;
        assert!(t.reconciled, "{}", t.check);
        near(t.fleet_gpu_hours, h(10.0 + 6.0 + 7.0 + 4.0));
        near(t.unallocated_gpu_hours, h(4.0 + 4.0));
        assert_eq!(
            t.check,
            "groups 0.317 + unallocated 0.133 = fleet 0.450 GPU-hours"
        );
        let g = |name: &str| t.groups.iter().find(|g| g.group == name).unwrap();
        let ml = g("ml");
        assert_eq!(ml.workloads, 2);
        near(ml.allocated_gpu_hours, h(10.0 + 3.0));
        near(ml.used_gpu_hours, h(6.0));
        near(ml.idle_gpu_hours, h(3.0));
        near(ml.unmeasured_gpu_hours, h(1.0));
        near(ml.use_unknown_gpu_hours, h(3.0));
        near(ml.effective_compute_gpu_hours, h(5.0 * 0.3 + 0.5));
        near(ml.effective_compute_measured_gpu_hours, h(9.0));
        near(ml.busy_gpu_hours, h(5.0 * 0.9 + 1.0));
        // Half of the time-sliced device's measured 0.3 over its 6 steps, not its own use.
        near(
            ml.time_sliced_effective_compute_gpu_hours.unwrap(),
            h(6.0 * 0.3 / 2.0),
        );
        assert_eq!(ml.effective_compute_estimate_gpu_hours, None);
        assert_eq!(ml.requested_gpu_hours, Some(0.5));
        let web = g("web");
        near(web.allocated_gpu_hours, h(3.0 + 7.0 * 3.0 / 7.0));
        near(web.use_unknown_gpu_hours, h(3.0));
        // The MIG instance's own counters: 3/7 of the GPU-time, at its measured fractions.
        near(web.used_gpu_hours, h(3.0));
        near(web.effective_compute_gpu_hours, h(3.0 * 0.2));
        assert!(web.requested_gpu_hours.is_none());
        let batch = g("batch");
        assert_eq!(batch.allocated_gpu_hours, 0.0);
        assert_eq!(batch.requested_gpu_hours, Some(0.25));
        assert_eq!(t.groups[0].group, "ml", "most allocated first");
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("1 GPU(s) were time-sliced")),
            "{:?}",
            s.notes
        );
    }

    /// Prices by model and a default: the cost of each part, and of idle; a model without a
    /// price is named, not charged at 0.
    #[test]
    fn costs_by_model_and_periods() {
        let used = Some((0.9, 0.3));
        let idle = Some((0.0, 0.0));
        let a = track(Some("ml/a"), "n/g1", &[used, idle, used, idle]);
        let mut b = track(Some("ml/b"), "n/g2", &[used, used, used, used]);
        b.model = Some("Tesla T4".into());
        b.spec = crate::gpus::lookup("Tesla T4");
        let input = FleetInput {
            step_seconds: 3600.0,
            steps: 4,
            tracks: vec![a, b],
            held: Default::default(),
            step_bands: None,
        };
        let groups = vec![Some("ml".to_string()), Some("ml".to_string())];
        let mut c = cfg("namespace");
        c.prices = vec![("NVIDIA H100 80GB HBM3".into(), 4.0)];
        c.period_steps = Some(2);
        let s = showback(&input, &groups, &Holders::new(), &BTreeMap::new(), &c);
        let ml = &s.total.groups[0];
        let cost = ml.cost.as_ref().unwrap();
        assert_eq!(
            cost.allocated, 16.0,
            "only the H100's 4 GPU-hours are priced"
        );
        assert_eq!(cost.idle, 8.0);
        assert_eq!(cost.used, 8.0);
        assert!((cost.effective_compute - 2.0 * 0.3 * 4.0).abs() < 1e-9);
        assert!(
            s.notes.iter().any(|n| n.contains("no price for Tesla T4")),
            "{:?}",
            s.notes
        );
        assert_eq!(s.periods.len(), 2);
        for p in &s.periods {
            assert!(p.reconciled, "{}", p.check);
            assert_eq!(p.fleet_gpu_hours, 4.0);
            assert_eq!(p.groups[0].idle_gpu_hours, 1.0);
        }
    }
}

#[cfg(test)]
mod holder_tests {
    use super::*;
    use crate::fleet::Point;

    fn cfg() -> ShowbackConfig {
        ShowbackConfig {
            by: "namespace".into(),
            idle_busy_below: 0.05,
            idle_compute_below: 0.01,
            period_steps: None,
            default_price: None,
            prices: Vec::new(),
        }
    }

    fn holding(pod: &str, estimate: Option<f64>) -> Holding {
        Holding {
            pod: pod.into(),
            group: pod.split('/').next().unwrap().into(),
            effective_compute_estimate: estimate,
            method: estimate.map(|_| "sm_busy_share".to_string()),
        }
    }

    /// A time-sliced GPU whose device series name no pod (truthscale's own history): its two
    /// holders from the allocation info take half each, and half each of the device's
    /// measured effective compute (0.3) as time-sliced effective compute; the one with a
    /// per-process estimate (0.06 of the GPU) has it shown apart, never billed; both holders'
    /// use is unknown. A step with one holder charges it the device's own use.
    #[test]
    fn holders_of_a_device_without_pods_take_its_shares() {
        let mut dev = Track::new(None, "n/g2".into());
        for s in 0..4 {
            dev.record(s, Point::new(Some(0.4), Some(1.0), Some(0.3), Some(1e9)));
        }
        let input = FleetInput {
            step_seconds: 3600.0,
            steps: 4,
            tracks: vec![dev],
            held: Default::default(),
            step_bands: None,
        };
        let mut steps = BTreeMap::new();
        for s in 0..3 {
            steps.insert(
                s,
                vec![holding("a/chat-a", Some(0.06)), holding("b/chat-b", None)],
            );
        }
        steps.insert(3, vec![holding("a/chat-a", None)]);
        let holders = Holders::from([("n/g2".to_string(), steps)]);
        let s = showback(&input, &[None], &holders, &BTreeMap::new(), &cfg());
        assert!(s.total.reconciled, "{}", s.total.check);
        assert_eq!(s.total.unallocated_gpu_hours, 0.0);
        let g = |n: &str| s.total.groups.iter().find(|g| g.group == n).unwrap();
        let a = g("a");
        assert_eq!(a.allocated_gpu_hours, 1.5 + 1.0);
        assert!(
            (a.effective_compute_gpu_hours - 0.3).abs() < 1e-12,
            "the step alone"
        );
        assert_eq!(a.effective_compute_measured_gpu_hours, 1.0);
        let sliced = a.time_sliced_effective_compute_gpu_hours.unwrap();
        assert!((sliced - 3.0 * 0.3 / 2.0).abs() < 1e-12, "{sliced}");
        assert!((a.effective_compute_estimate_gpu_hours.unwrap() - 3.0 * 0.06).abs() < 1e-12);
        assert_eq!(a.used_gpu_hours, 1.0);
        assert_eq!(a.use_unknown_gpu_hours, 1.5);
        assert_eq!(a.busy_gpu_hours, 1.0, "only the step it held alone");
        let b = g("b");
        assert_eq!(b.allocated_gpu_hours, 1.5);
        assert_eq!(b.use_unknown_gpu_hours, 1.5);
        assert_eq!(b.effective_compute_gpu_hours, 0.0);
        assert_eq!(b.effective_compute_measured_gpu_hours, 0.0);
        assert!((b.time_sliced_effective_compute_gpu_hours.unwrap() - 1.5 * 0.3).abs() < 1e-12);
        assert_eq!(b.effective_compute_estimate_gpu_hours, None);
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("method sm_busy_share") && n.contains("never billed")),
            "{:?}",
            s.notes
        );
    }

    /// The report's check that its two halves count the same allocation: a time-sliced
    /// device held at its 4 read hours is 4 GPU-hours on 1 GPU in both; with no holder named
    /// for its last hour the showback charges 3 while the sizing (the device is one
    /// workload all 4 hours) counts 4, and the check says they disagree.
    #[test]
    fn the_allocation_check_compares_the_sizing_and_the_showback() {
        let mut dev = Track::new(None, "n/g2".into());
        for s in 0..4 {
            dev.record(s, Point::new(Some(0.4), Some(1.0), Some(0.3), Some(1e9)));
        }
        let pods = vec!["a/chat-a".to_string(), "b/chat-b".to_string()];
        let input = FleetInput {
            step_seconds: 3600.0,
            steps: 4,
            tracks: vec![dev],
            held: BTreeMap::from([("n/g2".to_string(), pods)]),
            step_bands: None,
        };
        let fleet = crate::fleet::analyze(&input, &crate::fleet::FleetConfig::default());
        for (named, agrees, charged) in [(4, true, 4.0), (3, false, 3.0)] {
            let steps: BTreeMap<usize, Vec<Holding>> = (0..named)
                .map(|s| {
                    (
                        s,
                        vec![holding("a/chat-a", None), holding("b/chat-b", None)],
                    )
                })
                .collect();
            let holders = Holders::from([("n/g2".to_string(), steps)]);
            let mut s = showback(&input, &[None], &holders, &BTreeMap::new(), &cfg());
            check_against_sizing(&mut s, &fleet);
            let a = &s.allocation;
            assert_eq!((a.gpus, a.gpu_hours, a.unread_gpu_hours), (1, charged, 0.0));
            assert_eq!(a.sizing_gpu_hours, Some(4.0));
            assert_eq!(a.agrees, Some(agrees), "{}", a.check);
            assert_eq!(a.check.contains("DISAGREE"), !agrees, "{}", a.check);
        }
    }

    /// Issue 34: a pod spinning one block (SM busy 0.6, no tensor work) beside a pod doing
    /// GEMMs (tensor 0.30, SM busy 0.2) on one time-sliced H100 for 2 h. Truth from the
    /// workload: the device's effective compute is the GEMM pod's tensor activity, 0.30; the
    /// spin pod's own is 0. The SM-busy split gives the spin pod 0.30 × 0.6/0.8 = 0.225 and
    /// the GEMM pod 0.075: that estimate is shown apart and never billed as measured; each
    /// holder is billed half the GPU and half the device's measured 0.30.
    #[test]
    fn a_spinning_pod_is_never_billed_its_neighbours_gemms() {
        let (spin_sm, gemm_sm, gemm_tensor) = (0.6, 0.2, 0.30);
        let device_ecf = gemm_tensor; // the spin pod does no tensor or FP work
        let hours = 2.0;
        let mut dev = Track::new(None, "n/g0".into());
        for s in 0..2 {
            let busy = Some(1.0);
            dev.record(
                s,
                Point::new(Some(device_ecf), busy, Some(device_ecf), Some(1e9)),
            );
        }
        let input = FleetInput {
            step_seconds: 3600.0,
            steps: 2,
            tracks: vec![dev],
            held: Default::default(),
            step_bands: None,
        };
        // The estimate as the exporter writes it: the device value split by SM busy.
        let total_sm = spin_sm + gemm_sm;
        let (spin_est, gemm_est) = (
            device_ecf * spin_sm / total_sm,
            device_ecf * gemm_sm / total_sm,
        );
        let at = vec![
            holding("gemm/train", Some(gemm_est)),
            holding("spin/notebook", Some(spin_est)),
        ];
        let holders = Holders::from([(
            "n/g0".to_string(),
            BTreeMap::from([(0, at.clone()), (1, at)]),
        )]);
        let s = showback(&input, &[None], &holders, &BTreeMap::new(), &cfg());
        assert!(s.total.reconciled, "{}", s.total.check);
        let g = |n: &str| s.total.groups.iter().find(|g| g.group == n).unwrap();
        let near = |x: f64, y: f64| assert!((x - y).abs() < 1e-12, "{x} != {y}");
        for (name, est) in [("spin", 0.225), ("gemm", 0.075)] {
            let h = g(name);
            near(h.allocated_gpu_hours, hours / 2.0);
            // No measured effective compute is billed to either holder of the shared GPU:
            // neither holds it alone.
            assert_eq!(h.effective_compute_gpu_hours, 0.0, "{name}");
            assert_eq!(h.effective_compute_measured_gpu_hours, 0.0, "{name}");
            assert_eq!(h.used_gpu_hours, 0.0, "{name}");
            near(h.use_unknown_gpu_hours, hours / 2.0);
            // The device's measured total, billed as the GPU is: half each.
            near(
                h.time_sliced_effective_compute_gpu_hours.unwrap(),
                device_ecf / 2.0 * hours,
            );
            // The estimate, in its own column.
            near(h.effective_compute_estimate_gpu_hours.unwrap(), est * hours);
        }
        near(spin_est, 0.225);
        near(gemm_est, 0.075);
        // The billed parts add up to the device's measured total.
        let billed: f64 = s
            .total
            .groups
            .iter()
            .filter_map(|g| g.time_sliced_effective_compute_gpu_hours)
            .sum();
        near(billed, device_ecf * hours);
    }
}
