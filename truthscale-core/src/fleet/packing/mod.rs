//! Packing: first-fit decreasing of the workloads onto GPUs of the fleet's model, and the
//! co-location groups it makes.

use super::demand::{sizing_quantile, weighted_rank};
use super::index::{
    BUDGET, BinIndex, Budget, Keys, Query, RULES, Ranks, Trees, place, to_i64, top,
};
use super::track::{Grid, MIB, Track, units_to_ratio};
use super::{Colocation, Excluded, PackedGpu, Packing};
use std::collections::BTreeSet;

/// One GPU of the packing while it is being filled.
pub(super) struct Bin {
    grid: Grid,
    members: Vec<usize>,
    /// Per step: summed peak memory of the live members, MiB.
    mem: Vec<u64>,
    max_mem: u64,
    /// Per sub-step (`grid.m` a step): summed saturation units; `SAT_NONE` no live member,
    /// `SAT_UNKNOWN` a live member unmeasured.
    pub(super) sat: Vec<u32>,
    /// The weight of the sub-steps at which the sum is known, and of those over the limit.
    known: u64,
    over: u64,
}

const SAT_NONE: u32 = u32::MAX;
const SAT_UNKNOWN: u32 = u32::MAX - 1;

/// Whether at most a 1 % tail of `known` weight exceeds the limit: nearest-rank p99 ≤ L.
pub(super) fn p99_within(known: u64, over: u64) -> bool {
    over.min(known) <= p99_slack(known)
}

/// How much of `known` weight may exceed the limit with the nearest-rank p99 still within it.
pub(super) fn p99_slack(known: u64) -> u64 {
    known - ((0.99 * known as f64).ceil() as u64).min(known)
}

/// What one workload brings to the packing.
pub(super) struct Item {
    track: usize,
    pub(super) peak_mib: u64,
    p99: u64,
}

impl Bin {
    fn new(steps: usize, grid: Grid) -> Bin {
        Bin {
            grid,
            members: Vec::new(),
            mem: vec![0; steps],
            max_mem: 0,
            sat: vec![SAT_NONE; steps * grid.m],
            known: 0,
            over: 0,
        }
    }

    /// Steps of the window.
    fn steps(&self) -> usize {
        self.mem.len()
    }

    /// The known and over-limit weights once `t` joins.
    fn counts(&self, t: &Track, limit: u32) -> (u64, u64) {
        // Over `u64::MAX`: it never gives up.
        self.counts_within(t, limit, u64::MAX, &mut 0)
            .unwrap_or((self.known, self.over))
    }

    /// [`Bin::counts`], or `None` as soon as more than `give_up` weight is over the limit;
    /// adds the sub-steps it looked at to `visited`.
    fn counts_within(
        &self,
        t: &Track,
        limit: u32,
        give_up: u64,
        visited: &mut usize,
    ) -> Option<(u64, u64)> {
        let (g, m) = (self.grid, self.grid.m);
        let r = t.range();
        let (mut known, mut over) = (self.known, self.over);
        for s in r.start..r.end.min(self.steps()) {
            let p = t.points[s - r.start];
            for j in 0..m {
                *visited += 1;
                let w = g.weights[j];
                let b = self.sat[s * m + j];
                // Remove the bin's own contribution at this sub-step…
                if b < SAT_UNKNOWN {
                    known -= w;
                    if b > limit {
                        over -= w;
                    }
                }
                // …and add the combined one.
                let c = match (b, g.value(p, j)) {
                    (SAT_UNKNOWN, _) | (_, None) => None,
                    (SAT_NONE, Some(x)) => Some(u32::from(x)),
                    (b, Some(x)) => Some(b + u32::from(x)),
                };
                if let Some(c) = c {
                    known += w;
                    if c > limit {
                        over += w;
                        if over > give_up {
                            return None;
                        }
                    }
                }
            }
        }
        Some((known, over))
    }

    /// Whether `item` (track `t`) fits; and the new known/over weights. `slack` is at least
    /// [`p99_slack`] of any weight of the window (`G`): the check stops once more than
    /// `slack + over` weight is over the limit, since only the bin's own `over` can leave
    /// the count, and p99 can allow no more than `slack`. Adds the steps it looked at to
    /// `visited`.
    pub(super) fn fits(
        &self,
        t: &Track,
        item: &Item,
        (cap, limit, slack): (u64, u32, u64),
        visited: &mut usize,
    ) -> Option<(u64, u64)> {
        let r = t.range();
        if self.max_mem + item.peak_mib > cap
            && (r.start..r.end.min(self.steps())).any(|s| {
                *visited += 1;
                self.mem[s] + item.peak_mib > cap
            })
        {
            return None;
        }
        let give_up = slack.saturating_add(self.over);
        let (known, over) = self.counts_within(t, limit, give_up, visited)?;
        p99_within(known, over).then_some((known, over))
    }

    fn add(&mut self, idx: usize, t: &Track, item: &Item, counts: (u64, u64)) {
        let (g, m) = (self.grid, self.grid.m);
        let r = t.range();
        for s in r.start..r.end.min(self.steps()) {
            self.mem[s] += item.peak_mib;
            self.max_mem = self.max_mem.max(self.mem[s]);
            let p = t.points[s - r.start];
            for j in 0..m {
                let b = self.sat[s * m + j];
                self.sat[s * m + j] = match (b, g.value(p, j)) {
                    (SAT_UNKNOWN, _) | (_, None) => SAT_UNKNOWN,
                    (SAT_NONE, Some(x)) => u32::from(x),
                    (b, Some(x)) => b + u32::from(x),
                };
            }
        }
        self.known = counts.0;
        self.over = counts.1;
        self.members.push(idx);
    }

    /// The bin's keys in the [`BinIndex`] (see [`Keys`]), `O(steps)`.
    fn keys(&self, ranks: &Ranks, scratch: &mut Vec<u32>) -> Keys {
        scratch.clear();
        let mut unknown = 0usize;
        for &b in &self.sat {
            match b {
                SAT_UNKNOWN => unknown += 1,
                SAT_NONE => scratch.push(0),
                b => scratch.push(b),
            }
        }
        let mut rule = [0; RULES];
        rule[0] = to_i64(self.mem.iter().min().copied().unwrap_or(0));
        // Unknown sub-steps rank below every value: the `(a + 1)`-th smallest sub-step is
        // then the `(a + 1 − unknown)`-th smallest value.
        for (key, &a) in rule[1..].iter_mut().zip(&ranks.below) {
            *key = match a.checked_sub(unknown) {
                None => i64::MIN,
                Some(k) if k < scratch.len() => i64::from(*scratch.select_nth_unstable(k).1),
                Some(_) => 0,
            };
        }
        let room_sat = top(scratch, ranks.room).map_or(0, i64::from);
        Keys {
            rule,
            room: [to_i64(self.max_mem), room_sat],
        }
    }

    /// The p99 of the summed saturation over the sub-steps at which it is known, weighted.
    fn p99(&self) -> Option<u64> {
        let m = self.grid.m;
        let mut v: Vec<(u64, u64)> = self
            .sat
            .iter()
            .enumerate()
            .filter(|&(_, &x)| x < SAT_UNKNOWN)
            .map(|(u, &x)| (u64::from(x), self.grid.weights[u % m]))
            .collect();
        weighted_rank(&mut v, 0.99)
    }
}

/// The first-fit-decreasing packing onto GPUs of `gpu_mib` MiB, and its co-location
/// groups; no packing (and a note saying why) without one GPU's memory or without a
/// workload whose demands were both measured.
pub(super) fn packing(
    work: &[&Track],
    names: &[String],
    gpu_mib: Option<u64>,
    limit: u32,
    (steps, grid): (usize, Grid),
    notes: &mut Vec<String>,
) -> (Option<Packing>, Vec<Colocation>) {
    let (mut items, excluded) = packing_items(work, names, grid);
    let mut colocation = Vec::new();
    let packing = gpu_mib.filter(|_| !items.is_empty()).map(|cap| {
        let bins = first_fit(work, names, &mut items, cap, limit, (steps, grid));
        colocation = colocations(&bins, work, names, &items, limit);
        packing_of(
            &bins,
            excluded_gpus(work, names, &excluded),
            names,
            excluded,
        )
    });
    if packing.is_none() {
        notes.push(if gpu_mib.is_none() {
            "no packing: one GPU's memory is not known (no total-memory series and no catalog model)".to_owned()
        } else {
            "no packing: no workload had both saturation and memory measured".to_owned()
        });
    }
    (packing, colocation)
}

/// What each workload brings to the packing (p99 saturation and peak memory), or why it is
/// left out: a demand that was never measured.
fn packing_items(work: &[&Track], names: &[String], grid: Grid) -> (Vec<Item>, Vec<Excluded>) {
    let mut excluded = Vec::new();
    let mut items = Vec::new();
    for (i, t) in work.iter().enumerate() {
        let sat = sizing_quantile(t, 0.99, grid);
        let peak = t.points.iter().filter_map(|p| p.mem()).max();
        match (sat, peak) {
            (Some(p99), Some(peak)) => items.push(Item {
                track: i,
                peak_mib: u64::from(peak),
                p99,
            }),
            (s, m) => excluded.push(Excluded {
                workload: names[i].clone(),
                reason: match (s, m) {
                    (None, None) => "neither saturation nor memory was measured",
                    (None, _) => "saturation was not measured (no tensor or DRAM counter)",
                    _ => "memory was not measured",
                }
                .to_owned(),
            }),
        }
    }
    (items, excluded)
}

/// First-fit decreasing: sorts `items` by their larger share (of `cap` MiB or of `limit`),
/// ties by name, and puts each on the first GPU it fits, or on a GPU of its own.
///
/// **Bounded.** A [`BinIndex`] over the GPUs skips, in `O(log GPUs)` a pass, those that
/// certainly cannot take the workload (memory above `cap − peak` at every step, or summed
/// saturation too high where the workload's is high: see [`Query::of`]); [`Bin::fits`]
/// stays the final word on the others, and stops early once they certainly fail. Each
/// workload spends on this first-fit search at most the work of
/// [`MAX_BIN_TRIES`](super::index::MAX_BIN_TRIES) full checks (`2 · steps` steps of checks
/// and one pass over the index each); past that, at most that of `MAX_ROOM_TRIES` on the
/// next GPUs that seem to have room for it (`max_mem + peak ≤ cap`, and high-rank
/// saturations that add up within the limit), in order; then it takes
/// a GPU of its own. So the packing is exactly first-fit decreasing whenever the search
/// reaches each workload's first fit within that work, always while the packing has fewer
/// than `MAX_BIN_TRIES` GPUs (at most one check per GPU and `GPUs + 1` passes), and
/// otherwise a valid packing that may use more GPUs. Cost per workload:
/// `O((MAX_BIN_TRIES + MAX_ROOM_TRIES) · (steps + RULES · log n))`; in all
/// `O(n log n + n · steps)` time, and `O(GPUs · steps)` memory (the bins' per-step sums).
fn first_fit(
    work: &[&Track],
    names: &[String],
    items: &mut [Item],
    cap: u64,
    limit: u32,
    (steps, grid): (usize, Grid),
) -> Vec<Bin> {
    first_fit_within(work, names, items, (cap, limit, steps, grid), BUDGET)
}

/// [`first_fit`] within a budget; `(cap, limit, steps)` as there.
fn first_fit_within(
    work: &[&Track],
    names: &[String],
    items: &mut [Item],
    (cap, limit, steps, grid): (u64, u32, usize, Grid),
    budget: Budget,
) -> Vec<Bin> {
    sort_items(names, items, cap, limit);
    let ranks = Ranks::of(steps, grid);
    let mut bins: Vec<Bin> = Vec::new();
    let mut index = BinIndex {
        rule: Trees::new(),
        room: Trees::new(),
    };
    let mut scratch = Vec::new();
    for it in items.iter() {
        let t = work[it.track];
        let q = Query::of(t, it, cap, limit, &ranks, steps, &mut scratch);
        let found = place(
            &bins,
            &index,
            (t, it, &q),
            (cap, limit, ranks.slack),
            budget,
        );
        let b = join_or_open(&mut bins, found, t, it, (steps, grid), limit);
        index.set(b, bins[b].keys(&ranks, &mut scratch));
    }
    bins
}

/// Sorts `items` by their larger share (of `cap` MiB or of `limit`), largest first, ties by
/// name.
/// Put `it` (track `t`) on the GPU `found` (with its new known/over counts), or on a GPU
/// of its own when none was found (a workload too big to share still takes one); the index
/// of the GPU it went to.
fn join_or_open(
    bins: &mut Vec<Bin>,
    found: Option<(usize, (u64, u64))>,
    t: &Track,
    it: &Item,
    (steps, grid): (usize, Grid),
    limit: u32,
) -> usize {
    match found {
        Some((b, c)) => {
            bins[b].add(it.track, t, it, c);
            b
        }
        None => {
            let mut bin = Bin::new(steps, grid);
            let c = bin.counts(t, limit);
            bin.add(it.track, t, it, c);
            bins.push(bin);
            bins.len() - 1
        }
    }
}

fn sort_items(names: &[String], items: &mut [Item], cap: u64, limit: u32) {
    let size = |it: &Item| (it.peak_mib as f64 / cap as f64).max(it.p99 as f64 / f64::from(limit));
    items.sort_by(|a, b| {
        size(b)
            .total_cmp(&size(a))
            .then_with(|| names[a.track].cmp(&names[b.track]))
    });
}

/// Distinct GPUs held by the excluded workloads: they keep them.
pub(super) fn excluded_gpus(work: &[&Track], names: &[String], excluded: &[Excluded]) -> u64 {
    let excluded: BTreeSet<&str> = excluded.iter().map(|e| e.workload.as_str()).collect();
    let gpus: BTreeSet<&str> = work
        .iter()
        .zip(names)
        .filter(|(_, n)| excluded.contains(n.as_str()))
        .map(|(t, _)| t.gpu.as_str())
        .collect();
    gpus.len() as u64
}

/// The packed GPUs that hold workloads from two or more GPUs today, most GPUs freed first;
/// interleaved when only the time-aligned sum lets them share. A GPU the group holds today
/// is freed by it only where every workload on it (another MIG instance's, one left out of
/// the packing, another group's) is in the group: the group itself needs one of them.
fn colocations(
    bins: &[Bin],
    work: &[&Track],
    names: &[String],
    items: &[Item],
    limit: u32,
) -> Vec<Colocation> {
    let mut p99_of: Vec<Option<u64>> = vec![None; work.len()];
    for it in items {
        p99_of[it.track] = Some(it.p99);
    }
    let mut colocation = Vec::new();
    for bin in bins {
        let held: BTreeSet<&str> = bin.members.iter().map(|&m| work[m].gpu.as_str()).collect();
        if bin.members.len() >= 2 && held.len() >= 2 {
            let vacated = held
                .iter()
                .filter(|&&g| (0..work.len()).all(|i| work[i].gpu != g || bin.members.contains(&i)))
                .count() as u64;
            let sum_p99: u64 = bin.members.iter().filter_map(|&m| p99_of[m]).sum();
            let p99 = bin.p99();
            colocation.push(Colocation {
                workloads: bin.members.iter().map(|&m| names[m].clone()).collect(),
                gpus_held: held.len() as u64,
                gpus_freed: vacated.saturating_sub(1),
                peak_memory_bytes: bin.max_mem as f64 * MIB,
                saturation_p99: p99.map(units_to_ratio),
                sum_of_p99s: units_to_ratio(sum_p99),
                interleaved: sum_p99 > u64::from(limit)
                    && p99.is_some_and(|p| p <= u64::from(limit)),
            });
        }
    }
    colocation.sort_by(|a, b| {
        b.gpus_freed
            .cmp(&a.gpus_freed)
            .then_with(|| a.workloads.cmp(&b.workloads))
    });
    colocation
}

/// The packing as reported: the packed GPUs, and the excluded workloads with their GPUs.
fn packing_of(
    bins: &[Bin],
    excluded_gpus: u64,
    names: &[String],
    excluded: Vec<Excluded>,
) -> Packing {
    Packing {
        packed_gpus: bins.len() as u64,
        excluded_gpus,
        gpus: bins.len() as u64 + excluded_gpus,
        bins: bins
            .iter()
            .map(|b| PackedGpu {
                workloads: b.members.iter().map(|&m| names[m].clone()).collect(),
                peak_memory_bytes: b.max_mem as f64 * MIB,
                saturation_p99: b.p99().map(units_to_ratio),
            })
            .collect(),
        excluded,
    }
}

#[cfg(test)]
mod tests;
