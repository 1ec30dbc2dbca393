//! Who holds what share of a GPU over time: each physical GPU's steps split among the pods
//! holding it by the allocation policy (whole, time-sliced `1/k`, MIG compute slices, or the
//! holders node mode names), as [`Charge`]s of what each did with its share.

use super::charges::{PeriodAcc, add_charge, price_of};
use super::{Accs, Fraction, Holding, SHARE_UNITS, Tally, Window, placeholder};
use crate::fleet::Track;

/// One holder's share of one GPU-step, and what it did with it (fractions of its share).
pub(super) struct Charge<'a> {
    pub(super) group: &'a str,
    pub(super) pod: Option<&'a str>,
    /// Whether anything was read at this step.
    pub(super) read: bool,
    pub(super) units: u64,
    /// A time-sliced GPU's holder without a per-process part.
    pub(super) unknown: bool,
    /// A MIG instance of an unknown profile: its share of the GPU (`units`) is assumed.
    pub(super) assumed_share: bool,
    pub(super) busy: Option<f64>,
    pub(super) ecf: Option<f64>,
    pub(super) sat: Option<f64>,
    /// A time-sliced GPU: the device's measured effective compute (a fraction of the GPU),
    /// billed by the holder's share.
    pub(super) time_sliced_ecf: Option<f64>,
    /// A time-sliced GPU: the holder's estimated part of the device's effective compute (a
    /// fraction of the whole GPU), never billed.
    pub(super) ecf_estimate: Option<f64>,
    /// Its part of the GPU's energy at this step, in millijoules (by its share).
    pub(super) energy_mj: Option<u64>,
    /// The GPU was unavailable at this step ([`crate::health`]): neither idle nor used.
    pub(super) down: bool,
    /// Any health field of the GPU was read at this step: whether `down` was judged.
    pub(super) health_read: bool,
    /// The busy flag and effective compute of what it held (the device's on a time-sliced
    /// GPU): whether the GPU was active, for the funnel.
    pub(super) device_use: (Option<f64>, Option<f64>),
    /// The track whose model prices it.
    pub(super) track: &'a Track,
    /// That track's price per GPU-hour ([`price_of`]).
    pub(super) price: Option<f64>,
}

/// The compute slices of a whole GPU of a track's model (7, or 4 on A30): the largest
/// profile's.
fn total_slices(t: &Track) -> Option<u32> {
    t.spec?.mig.iter().map(|p| p.compute_slices).max()
}

/// A MIG instance's share of its GPU in share units: its profile's compute slices over the
/// model's. `None` for an instance of an unknown profile, whose share is assumed (an equal
/// part with the GPU's other instances).
fn profile_share(t: &Track) -> Option<u64> {
    let (p, total) = (t.mig?, total_slices(t)?);
    Some(SHARE_UNITS * u64::from(p.compute_slices) / u64::from(total.max(1)))
}

/// Split `units` among `n` holders, exactly: the first `units % n` take one more.
fn split(units: u64, n: usize, i: usize) -> u64 {
    let n = n.max(1) as u64;
    units / n + u64::from((i as u64) < units % n)
}

/// A GPU's memory in MiB: as read, else its model's.
fn memory_mib(t: &Track) -> Option<f64> {
    t.memory_total_mib
        .map(f64::from)
        .or_else(|| t.spec.map(|s| s.memory_bytes as f64 / 1_048_576.0))
}

/// The share units of a pod's granted fraction of the GPU `t` reads, where it has one.
pub(super) fn fraction_units(
    fractions: &super::Fractions,
    pod: Option<&str>,
    t: &Track,
) -> Option<u64> {
    fractions
        .get(pod?)
        .and_then(|f: &Fraction| f.units(memory_mib(t)))
}

/// The shares of whole-GPU holders whose granted fractions are `fractions`: those with one
/// take it; the others split the rest equally (all of it when none has one).
fn whole_shares(fractions: &[Option<u64>]) -> impl Iterator<Item = u64> + '_ {
    let granted: u64 = fractions.iter().flatten().sum();
    let rest = SHARE_UNITS.saturating_sub(granted);
    let others = fractions.iter().filter(|f| f.is_none()).count();
    let mut j = 0;
    fractions.iter().map(move |f| {
        f.unwrap_or_else(|| {
            j += 1;
            split(rest, others, j - 1)
        })
    })
}

/// The lists one GPU-step is worked out in, kept from step to step: a fleet's report has
/// millions of GPU-steps, and lists allocated afresh cost about seven allocations each.
#[derive(Default)]
struct Scratch {
    /// The tracks covering the step.
    covering: Vec<usize>,
    /// The shares of those a group holds.
    shares: Vec<(usize, u64)>,
    /// Those a group holds (placeholders left out), and of them the whole-GPU holders.
    held: Vec<usize>,
    whole: Vec<usize>,
    /// The whole-GPU holders' granted fractions.
    fractions: Vec<Option<u64>>,
}

/// A ratio unit of the fleet's tracks as a fraction.
fn ratio(x: u16) -> f64 {
    f64::from(x) / f64::from(crate::fleet::RATIO_UNITS)
}

/// Charges each step of one physical GPU (the tracks `members` read it) to its holders.
pub(super) fn charge_gpu(w: &Window<'_>, members: &[usize], accs: &mut Accs, tally: &mut Tally) {
    let input = w.input;
    let mut charged = false;
    let tracks: Vec<&Track> = members.iter().map(|&i| &input.tracks[i]).collect();
    let (first, end) = lifetime(&tracks, input.steps);
    let mut was_shared = false;
    let mut scratch = Scratch::default();
    let mut charges = Vec::new();
    // The (period, group, pod) whose pod is already among its group's workloads: a GPU's
    // holders are charged at every step, and looked up in a set of every pod once.
    let mut listed: Vec<(usize, &str, &str)> = Vec::new();
    // One physical GPU, one model: its price from any of its tracks, so that a step between
    // two of them (no track covering it) is priced too.
    let price = members.iter().find_map(|&i| w.facts[i].price);
    let simulated = tracks.iter().any(|t| t.simulated);
    let mut unseen = 0u64;
    for s in first..end {
        let shared = step_shares(w, members, s, tally, &mut scratch);
        let (covering, shares) = (&scratch.covering, &mut scratch.shares);
        was_shared |= shared;
        track_charges(w, shares, s, shared, &mut charges);
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
            holder_charges(w, dev, hs, s, (shares, &mut charges), tally);
        }
        let sum: u64 = shares.iter().map(|(_, u)| u).sum();
        let health = step_health(w, covering, s);
        for c in &mut charges {
            (c.down, c.health_read) = health;
        }
        let energy = step_energy_mj(w, covering, s);
        let unallocated_mj = energy.map(|e| share_energy(e, &mut charges));
        charged |= !charges.is_empty();
        let period = w.period_of(s);
        let free = SHARE_UNITS.saturating_sub(sum);
        // Nothing of the GPU read, and no series names a holder: whether a pod held it is
        // unknown, never unallocated.
        let seen = !charges.is_empty() || covering.iter().any(|&i| read_at(&input.tracks[i], s));
        tally.count_step(&charges, seen, energy.is_some());
        let unpriced = note_unpriced(w, (price, free), &tracks, tally);
        unseen += u64::from(!seen);
        let step = GpuStep {
            held: sum,
            seen,
            price: (price, unpriced),
            simulated,
            energy: energy.zip(unallocated_mj),
            health,
        };
        for acc in accs.both(period) {
            step.add_to(acc, &charges, w);
        }
        for c in &charges {
            let new_pod = unlisted(&mut listed, period, c);
            add_charge(c, w, accs.both(period), new_pod, &mut tally.unpriced);
        }
    }
    tally.shared_gpus += usize::from(was_shared);
    tally.allocation_unknown.0 += usize::from(unseen > 0);
    tally.allocation_unknown.1 += unseen;
    tally.allocation.0 += usize::from(charged);
}

/// The steps from the first of `tracks` to the end of the last's life, within `steps`.
fn lifetime(tracks: &[&Track], steps: usize) -> (usize, usize) {
    let first = tracks.iter().map(|t| t.first_step()).min().unwrap_or(0);
    let end = tracks
        .iter()
        .map(|t| t.first_step() + t.lifetime_steps())
        .max()
        .unwrap_or(0)
        .min(steps);
    (first, end)
}

/// Whether `free` share units of a GPU of `price` have none where prices were given (its
/// model then noted in `tally`).
fn note_unpriced(
    w: &Window<'_>,
    (price, free): (Option<f64>, u64),
    tracks: &[&Track],
    tally: &mut Tally,
) -> bool {
    let unpriced = w.priced && price.is_none() && free > 0;
    if unpriced {
        let model = tracks.iter().find_map(|t| t.model.clone());
        tally
            .unpriced
            .insert(model.unwrap_or_else(|| "unknown".into()));
    }
    unpriced
}

/// One step of one physical GPU, as the period's totals count it.
struct GpuStep {
    /// Share units its holders held.
    held: u64,
    /// Whether anything of the GPU was read or a holder named: what no pod held is then
    /// unallocated, else its allocation is unknown.
    seen: bool,
    /// The GPU's price, and whether it had none where prices were given.
    price: (Option<f64>, bool),
    simulated: bool,
    /// The GPU's energy and the part no pod held, millijoules, where its power was read.
    energy: Option<(u64, u64)>,
    /// Whether it was unavailable, and whether any health field of it was read.
    health: (bool, bool),
}

impl GpuStep {
    /// Adds the step, its holders' `charges`, to a period's totals.
    fn add_to(&self, acc: &mut PeriodAcc, charges: &[Charge<'_>], w: &Window<'_>) {
        acc.fleet += SHARE_UNITS;
        let unheld = if self.seen {
            &mut acc.unallocated
        } else {
            &mut acc.allocation_unknown
        };
        let free = SHARE_UNITS.saturating_sub(self.held);
        unheld.add(free, self.price, self.simulated, w.hours_per_step);
        if let (true, (down, true)) = (self.seen, self.health) {
            acc.unallocated_health.0 += free;
            acc.unallocated_health.1 += if down { free } else { 0 };
        }
        if self.seen && charges.iter().any(|c| c.assumed_share) {
            acc.unallocated_assumed += free;
        }
        acc.overallocated += self.held.saturating_sub(SHARE_UNITS);
        if let Some((e, u)) = self.energy {
            acc.energy.fleet_mj += e;
            acc.energy.unallocated_mj += u;
            acc.energy.unallocated_measured += free;
            acc.energy.measured = true;
        }
        acc.funnel
            .add_step((self.health, self.seen), charges, w.cfg, w.hours_per_step);
    }
}

/// Whether anything of track `t` was read at step `s` (a step of its lifetime).
fn read_at(t: &Track, s: usize) -> bool {
    t.points()[s - t.first_step()].any()
}

/// Whether the charge `c` of `period` reads a pod not yet in `listed` (which then lists
/// it): only then may the pod be missing from its group's workloads.
fn unlisted<'a>(
    listed: &mut Vec<(usize, &'a str, &'a str)>,
    period: usize,
    c: &Charge<'a>,
) -> bool {
    let Some(pod) = c.pod.filter(|_| c.read) else {
        return false;
    };
    let key = (period, c.group, pod);
    let new = !listed.contains(&key);
    if new {
        listed.push(key);
    }
    new
}

/// Whether the GPU was unavailable at step `s` (any entity of it judged so: health is the
/// device's), and whether any health field of it was read.
fn step_health(w: &Window<'_>, covering: &[usize], s: usize) -> (bool, bool) {
    let tracks = &w.input.tracks;
    let health = covering
        .iter()
        .map(|&i| &tracks[i])
        .filter_map(|t| t.points()[s - t.first_step()].health())
        .max();
    (
        health == Some(crate::health::Health::Unavailable),
        health.is_some(),
    )
}

/// The GPU's energy at step `s`, in millijoules: its mean power over the step times the
/// step, read from the device's own track (a whole GPU's), else from a MIG instance's (whose
/// power is the GPU's); `None` where no covering track read power.
fn step_energy_mj(w: &Window<'_>, covering: &[usize], s: usize) -> Option<u64> {
    let tracks = &w.input.tracks;
    let power = |t: &Track| t.points()[s - t.first_step()].power_dw();
    let dw = covering
        .iter()
        .map(|&i| &tracks[i])
        .filter(|t| !t.is_mig)
        .find_map(power)
        .or_else(|| covering.iter().map(|&i| &tracks[i]).find_map(power))?;
    // Deciwatts × seconds × 100 = millijoules.
    let mj = f64::from(dw) * 100.0 * w.input.step_seconds;
    (mj.is_finite() && mj >= 0.0).then(|| mj.round() as u64)
}

/// Each charge's part of `energy` millijoules by its share units (rounded down, so the parts
/// never exceed their shares); returns the rest, the unallocated part (the whole energy of a
/// step no pod holds). Integer parts: the groups plus unallocated are the GPU's exactly.
fn share_energy(energy: u64, charges: &mut [Charge<'_>]) -> u64 {
    let mut given = 0u64;
    for c in charges.iter_mut() {
        let part = u128::from(energy) * u128::from(c.units) / u128::from(SHARE_UNITS);
        let part = u64::try_from(part).unwrap_or(u64::MAX).min(energy - given);
        given += part;
        c.energy_mj = Some(part);
    }
    energy - given
}

/// The tracks of `members` covering step `s` and the shares of those a group holds (by the
/// allocation policy), into `scratch`; whether whole-GPU holders time-slice the GPU.
fn step_shares(
    w: &Window<'_>,
    members: &[usize],
    s: usize,
    tally: &mut Tally,
    scratch: &mut Scratch,
) -> bool {
    let tracks = &w.input.tracks;
    let Scratch {
        covering,
        shares,
        held,
        whole,
        fractions,
    } = scratch;
    covering.clear();
    covering.extend(members.iter().copied().filter(|&i| {
        let t = &tracks[i];
        (t.first_step()..t.first_step() + t.lifetime_steps()).contains(&s)
    }));
    held.clear();
    held.extend(
        covering
            .iter()
            .copied()
            .filter(|&i| w.group[i].is_some())
            .filter(|&i| match tracks[i].pod.as_deref() {
                Some(p) if w.facts[i].placeholder => {
                    if !tally.placeholders.contains(p) {
                        tally.placeholders.insert(p.to_string());
                    }
                    false
                }
                _ => true,
            }),
    );
    let mig_covering = covering.iter().filter(|&&i| tracks[i].is_mig).count();
    whole.clear();
    whole.extend(held.iter().copied().filter(|&i| !tracks[i].is_mig));
    let shared = whole.len() > 1;
    shares.clear();
    fractions.clear();
    fractions.extend(whole.iter().map(|&i| w.facts[i].fraction));
    for (&i, f) in whole.iter().zip(fractions.iter()) {
        if let (Some(_), Some(p)) = (f, &tracks[i].pod)
            && !tally.fractional.contains(p)
        {
            tally.fractional.insert(p.clone());
        }
    }
    shares.extend(whole.iter().copied().zip(whole_shares(fractions)));
    // A MIG instance of an unknown profile takes an equal part: the j-th of them (in the
    // order held) the j-th part.
    let mut unknown = 0;
    for &i in held.iter() {
        let t = &tracks[i];
        if !t.is_mig {
            continue;
        }
        let u = match profile_share(t) {
            Some(u) => u,
            None => {
                tally.unknown_profile = true;
                unknown += 1;
                split(SHARE_UNITS, mig_covering.max(1), unknown - 1)
            }
        };
        shares.push((i, u));
    }
    shared
}

/// The charges of the tracks holding `shares` of a GPU at step `s` (`shared`: whole-GPU
/// holders time-slice it, so their use is unknown).
fn track_charges<'a>(
    w: &Window<'a>,
    shares: &[(usize, u64)],
    s: usize,
    shared: bool,
    charges: &mut Vec<Charge<'a>>,
) {
    charges.clear();
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
            assumed_share: t.is_mig && profile_share(t).is_none(),
            busy: p.busy().map(ratio),
            ecf: p
                .ecf()
                .map(|e| if t.is_mig { ratio(e) } else { own(ratio(e), u) }),
            sat: p.sat().map(ratio),
            // Each holder's series is the device's: its value, by the holder's share.
            time_sliced_ecf: p.ecf().map(ratio).filter(|_| shared && !t.is_mig),
            ecf_estimate: None,
            energy_mj: None,
            down: false,
            health_read: false,
            device_use: (p.busy().map(ratio), p.ecf().map(ratio)),
            track: t,
            price: w.facts[i].price,
        });
        if let Some(c) = charges.last_mut().filter(|_| !t.is_mig) {
            apply_measured(
                c,
                measured_use(w, t.pod.as_deref(), s, u),
                shares.len() == 1,
            );
        }
    }
}

/// The shares and charges of the holders `hs` of a GPU whose own series `dev` names no pod,
/// at step `s` (a holder with a granted fraction takes it; a placeholder nothing); the
/// methods of per-process parts go to the tally.
fn holder_charges<'a>(
    w: &Window<'_>,
    dev: &'a Track,
    hs: &'a [Holding],
    s: usize,
    (shares, charges): (&mut Vec<(usize, u64)>, &mut Vec<Charge<'a>>),
    tally: &mut Tally,
) {
    let p = dev.points()[s - dev.first_step()];
    let hs: Vec<&Holding> = hs
        .iter()
        .filter(|h| {
            let ph = placeholder(w.fractions, &h.pod);
            if ph {
                tally.placeholders.insert(h.pod.clone());
            }
            !ph
        })
        .collect();
    let k = hs.len();
    let fractions: Vec<Option<u64>> = hs
        .iter()
        .map(|h| fraction_units(w.fractions, Some(&h.pod), dev))
        .collect();
    let price = price_of(dev, w.cfg);
    for ((h, u), f) in hs.iter().zip(whole_shares(&fractions)).zip(&fractions) {
        if f.is_some() {
            tally.fractional.insert(h.pod.clone());
        }
        shares.push((usize::MAX, u));
        let part = h
            .effective_compute_estimate
            .filter(|e| e.is_finite() && *e >= 0.0 && k > 1);
        if part.is_some() {
            tally.split_by_processes.extend(h.method.iter().cloned());
        }
        charges.push(Charge {
            group: &h.group,
            pod: Some(&h.pod),
            read: p.any(),
            units: u,
            // One holder: the device's use is its own (over its share, where granted a
            // fraction). Several: unknown; the device's measured effective compute is
            // billed by the holder's share, and the per-process split is an estimate apart.
            unknown: k > 1,
            assumed_share: false,
            busy: p.busy().map(ratio).filter(|_| k == 1),
            ecf: p.ecf().map(|e| own(ratio(e), u)).filter(|_| k == 1),
            sat: p.sat().map(ratio).filter(|_| k == 1),
            time_sliced_ecf: p.ecf().map(ratio).filter(|_| k > 1),
            ecf_estimate: part,
            energy_mj: None,
            down: false,
            health_read: false,
            device_use: (p.busy().map(ratio), p.ecf().map(ratio)),
            track: dev,
            price,
        });
        if let Some(c) = charges.last_mut() {
            apply_measured(c, measured_use(w, Some(&h.pod), s, u), k == 1);
        }
    }
}

/// A holder's own measured use at step `s` (a fraction of the whole GPU), as the busy flag
/// of its share of `units`, where measured.
fn measured_use(w: &Window<'_>, pod: Option<&str>, s: usize, units: u64) -> Option<f64> {
    let m = *w.measured.get(pod?)?.get(&s)?;
    (m.is_finite() && m >= 0.0).then(|| own(m.min(1.0), units))
}

/// Where the holder's own use was measured (HAMi's per-container utilization): its use is
/// that, no longer unknown. The device's counters are not its where it shares the GPU; a
/// `lone` holder's are (all the device did is its), and are kept.
fn apply_measured(c: &mut Charge<'_>, m: Option<f64>, lone: bool) {
    if let Some(m) = m {
        c.unknown = false;
        c.busy = Some(m);
        if !lone {
            c.ecf = None;
            c.sat = None;
        }
    }
}

/// A lone holder's effective compute (the device's, a fraction of the whole GPU) as a
/// fraction of its share of `units`: all the device did is its, up to all of its share.
fn own(device: f64, units: u64) -> f64 {
    if units == 0 || units >= SHARE_UNITS {
        return device;
    }
    (device * SHARE_UNITS as f64 / units as f64).min(1.0)
}
