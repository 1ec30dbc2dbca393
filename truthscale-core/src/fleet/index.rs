//! The search for the first GPU a workload fits on: per-rule minimum trees over the open
//! GPUs' keys, bounded per workload.

use super::packing::{Bin, Item, p99_slack};
use super::track::{Grid, Track};

/// The work one workload spends at most looking for the first GPU it fits, in full checks:
/// each worth `2 · steps` steps of [`Bin::fits`] (memory, then saturation; either may stop
/// early) and one pass over the
/// [`BinIndex`] (`RULES · (⌈log₂ GPUs⌉ + 1)` look-ups), before `first_fit` stops looking.
pub(super) const MAX_BIN_TRIES: usize = 64;
/// The work, in full checks, one workload then spends at most on the GPUs after those that
/// seem to have room for it (see [`Keys::room`]).
const MAX_ROOM_TRIES: usize = 16;
/// Saturation rules of the index: rule `i` takes a bin's summed saturation at
/// `i · steps / SAT_RULES` steps from its bottom (see [`Query::of`]).
const SAT_RULES: usize = 4;
/// Keys that rule a bin out: memory, then the saturation rules.
pub(super) const RULES: usize = 1 + SAT_RULES;

/// What one workload may spend finding its GPU, in full checks (see [`MAX_BIN_TRIES`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    /// On the first-fit search, on the GPUs not ruled out.
    pub(super) tries: usize,
    /// After it, on the GPUs that seem to have room.
    pub(super) room: usize,
}

pub(super) const BUDGET: Budget = Budget {
    tries: MAX_BIN_TRIES,
    room: MAX_ROOM_TRIES,
};

pub(super) fn to_i64(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

/// The `r`-th largest of `v` (`r ≥ 1`), `None` when `v` has fewer; reorders `v`.
fn nth_largest<T: Ord + Copy>(v: &mut [T], r: usize) -> Option<T> {
    if r == 0 || v.len() < r {
        return None;
    }
    let k = v.len() - r;
    Some(*v.select_nth_unstable(k).1)
}

/// The `r`-th largest of `v`, or its largest when it has fewer; `None` when empty.
pub(super) fn top<T: Ord + Copy>(v: &mut [T], r: usize) -> Option<T> {
    let r = r.min(v.len());
    nth_largest(v, r)
}

/// The ranks the index compares, from the window's sub-steps.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ranks {
    /// `G`: the most over-limit weight any bin may have (`max over k ≤ the window's weight
    /// of slack(k)`).
    pub(super) slack: u64,
    /// `G` in sub-steps: the most over-limit sub-steps any bin may have (each weighs at
    /// least the grid's least weight).
    slack_steps: usize,
    /// Per saturation rule, `a`: a bin's summed saturation is taken at its `(a + 1)`-th
    /// smallest sub-step, an unknown one ranking below every value.
    pub(super) below: [usize; SAT_RULES],
    /// The rank from the top at which saturations are taken for room.
    pub(super) room: usize,
    /// The sub-steps of a step.
    grid: Grid,
}

impl Ranks {
    pub(super) fn of(steps: usize, grid: Grid) -> Ranks {
        let subs = steps * grid.m;
        let slack = if grid.is_unit() {
            (0..=steps as u64).map(p99_slack).max().unwrap_or(0)
        } else {
            // `slack(k) ≤ k / 100` for every `k` up to the window's weight.
            grid.weights[..grid.m].iter().sum::<u64>() * steps as u64 / 100 + 1
        };
        let slack_steps = usize::try_from(slack / grid.min_weight()).unwrap_or(usize::MAX);
        Ranks {
            slack,
            slack_steps,
            below: std::array::from_fn(|i| i * subs / SAT_RULES),
            room: slack_steps.saturating_add(1),
            grid,
        }
    }

    /// The workload's rank from the top for saturation rule `i`: `G + a + 1`, `G` in
    /// sub-steps.
    fn rule(&self, i: usize) -> usize {
        self.slack_steps
            .saturating_add(self.below[i])
            .saturating_add(1)
    }
}

/// A bin's keys: it is ruled out for a workload when a `rule` key is above the workload's
/// bound (it certainly cannot take it), and seems to have room when both `room` keys are
/// at most theirs (see [`Query`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Keys {
    /// The least summed memory at any step (MiB); then per saturation rule the summed
    /// saturation at its `(a + 1)`-th smallest step (a step with no live member counting 0),
    /// or `i64::MIN` (never ruled out on it) when that step is unknown: more than `a` are.
    pub(super) rule: [i64; RULES],
    /// The largest summed memory (`max_mem`, MiB), and the summed saturation at rank
    /// `room` from the top (0 where no member is live).
    pub(super) room: [i64; 2],
}

/// A min-tree over the bins' keys: the first bin from a position whose key is at most a
/// bound, in `O(log bins)`.
#[derive(Debug)]
struct MinTree {
    /// Leaves: a power of two, at least `len`.
    width: usize,
    /// Bins keyed.
    len: usize,
    /// `t[1]` the root, `t[width + i]` bin `i`'s key; `i64::MAX` past `len`.
    t: Vec<i64>,
}

impl MinTree {
    fn new() -> MinTree {
        MinTree {
            width: 1,
            len: 0,
            t: vec![i64::MAX; 2],
        }
    }

    fn key(&self, i: usize) -> i64 {
        self.t[self.width + i]
    }

    /// Set bin `i`'s key (`i ≤ len`: bins are keyed in order); `O(log bins)` amortized.
    fn set(&mut self, i: usize, key: i64) {
        if i >= self.width {
            let width = (i + 1).next_power_of_two();
            let mut t = vec![i64::MAX; 2 * width];
            t[width..width + self.len].copy_from_slice(&self.t[self.width..self.width + self.len]);
            for k in (1..width).rev() {
                t[k] = t[2 * k].min(t[2 * k + 1]);
            }
            (self.width, self.t) = (width, t);
        }
        self.len = self.len.max(i + 1);
        let mut k = self.width + i;
        self.t[k] = key;
        while k > 1 {
            k /= 2;
            self.t[k] = self.t[2 * k].min(self.t[2 * k + 1]);
        }
    }

    /// The first bin at or after `from` whose key is at most `bound`.
    fn first_at_most(&self, from: usize, bound: i64) -> Option<usize> {
        self.first(1, 0, self.width, from, bound)
    }

    fn first(&self, k: usize, lo: usize, hi: usize, from: usize, bound: i64) -> Option<usize> {
        if hi <= from || lo >= self.len || self.t[k] > bound {
            return None;
        }
        if hi - lo == 1 {
            return Some(lo);
        }
        let mid = lo.midpoint(hi);
        self.first(2 * k, lo, mid, from, bound)
            .or_else(|| self.first(2 * k + 1, mid, hi, from, bound))
    }
}

/// `K` keys of the bins: the first bin from a position whose every key is at most its
/// bound, leapfrogging from one tree to the next.
#[derive(Debug)]
pub(super) struct Trees<const K: usize>([MinTree; K]);

impl<const K: usize> Trees<K> {
    pub(super) fn new() -> Trees<K> {
        Trees(std::array::from_fn(|_| MinTree::new()))
    }

    fn set(&mut self, b: usize, keys: [i64; K]) {
        for (t, k) in self.0.iter_mut().zip(keys) {
            t.set(b, k);
        }
    }

    pub(super) fn admits(&self, b: usize, bounds: &[i64; K]) -> bool {
        self.0.iter().zip(bounds).all(|(t, &x)| t.key(b) <= x)
    }

    /// The first bin at or after `from` whose keys are within `bounds`, each pass (`K`
    /// look-ups) taking `pass` from `work`. A pass ends on a bin past the previous pass's, or
    /// ends the search.
    fn next(&self, mut from: usize, bounds: &[i64; K], work: &mut usize, pass: usize) -> Search {
        loop {
            if *work < pass {
                return Search::Exhausted(from);
            }
            *work -= pass;
            for (t, &x) in self.0.iter().zip(bounds) {
                match t.first_at_most(from, x) {
                    Some(b) => from = b,
                    None => return Search::None,
                }
            }
            if self.admits(from, bounds) {
                return Search::Found(from);
            }
        }
    }
}

/// A workload's bounds on the bins' [`Keys`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Query {
    /// `cap − peak`, then per saturation rule `limit − x`, `x` the workload's saturation at
    /// the rank that makes the rule a necessary condition (`i64::MAX`: no such rank).
    pub(super) rule: [i64; RULES],
    /// `cap − peak`, and `limit − x`, `x` the workload's saturation at rank `room` from the
    /// top.
    room: [i64; 2],
}

impl Query {
    /// The bounds for item `it` (track `t`), `O(steps)`. Those that rule out are necessary
    /// conditions of [`Bin::fits`], so the index never rules out a bin that would take the
    /// workload:
    ///
    /// - memory: when the workload's range (within the window) is not empty, `fits` refuses a
    ///   bin when `max_mem + peak > cap` and some step of the range has `mem + peak > cap`;
    ///   both hold at once when the least `mem` of the window is above `cap − peak`;
    /// - saturation (over sub-steps: one a step, or a coarse step's bands): `fits` needs the
    ///   combined over-limit weight `o′ ≤ slack(k′)`, `k′` at most the window's weight, so
    ///   `o′ ≤ G`, and so at most `G / w_min` sub-steps over the limit (`G` below, in
    ///   sub-steps). Take the bin's summed saturation `β` at its `(a + 1)`-th smallest
    ///   sub-step of the window, unknown ones ranking lowest (so at most `a` are unknown or
    ///   below `β`; no `β` when more than `a` are unknown), and the workload's `j`-th largest
    ///   known saturation `x` in its range, `j = G + a + 1`. Of the `j` sub-steps at which
    ///   the workload is at least `x`, at most `a` have the bin unknown or below `β`: at the
    ///   others, at least `G + 1`, the sum is known and at least `β + x`. So a bin that fits
    ///   has `β + x ≤ limit`. With fewer known values than `j` there is no bound.
    ///
    /// A bin seems to have room when `max_mem ≤ cap − peak` (memory then holds) and its
    /// summed saturation and the workload's, each at rank `room` from the top, add up to at
    /// most `limit` (likely, not certain: [`Bin::fits`] decides).
    pub(super) fn of(
        t: &Track,
        it: &Item,
        cap: u64,
        limit: u32,
        ranks: &Ranks,
        steps: usize,
        scratch: &mut Vec<u32>,
    ) -> Query {
        let range = t.range();
        let end = range.end.min(steps);
        if range.start >= end {
            // Nothing of it in the window: memory always holds and saturation is the bin's own.
            return Query {
                rule: [i64::MAX; RULES],
                room: [i64::MAX; 2],
            };
        }
        let mem = cap.checked_sub(it.peak_mib).map_or(-1, to_i64);
        scratch.clear();
        let g = ranks.grid;
        scratch.extend(
            t.points[..end - range.start]
                .iter()
                .flat_map(|&p| (0..g.m).filter_map(move |j| g.value(p, j)))
                .map(u32::from),
        );
        let limit = i64::from(limit);
        let mut rule = [mem; RULES];
        for (i, bound) in rule[1..].iter_mut().enumerate() {
            *bound = nth_largest(scratch, ranks.rule(i)).map_or(i64::MAX, |x| limit - i64::from(x));
        }
        let room = top(scratch, ranks.room).unwrap_or(0);
        Query {
            rule,
            room: [mem, limit - i64::from(room)],
        }
    }
}

/// Where a search of the [`BinIndex`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    /// A bin within the bounds.
    Found(usize),
    /// No bin left within the bounds.
    None,
    /// Out of work, at this position.
    Exhausted(usize),
}

/// The bins' [`Keys`]: to skip those that certainly cannot take a workload, and to find
/// those that seem to have room for it.
#[derive(Debug)]
pub(super) struct BinIndex {
    pub(super) rule: Trees<RULES>,
    pub(super) room: Trees<2>,
}

impl BinIndex {
    pub(super) fn set(&mut self, b: usize, k: Keys) {
        self.rule.set(b, k.rule);
        self.room.set(b, k.room);
    }
}

/// The GPU item `it` (track `t`, bounds `q`) goes on, with its known and over-limit counts
/// there; `None` for a GPU of its own. First fit among the bins the index does not rule out,
/// within `budget.tries`; past those, first fit among the next that seem to have room,
/// within `budget.room`.
pub(super) fn place(
    bins: &[Bin],
    index: &BinIndex,
    (t, it, q): (&Track, &Item, &Query),
    check: (u64, u32, u64),
    budget: Budget,
) -> Option<(usize, (u64, u64))> {
    let steps = bins.first().map_or(0, |b| b.sat.len());
    // One pass over the index: each tree's look-up visits about two nodes per level.
    let levels = (usize::BITS - bins.len().leading_zeros()) as usize + 1;
    let (pass, room_pass) = (RULES * levels, 2 * levels);
    let mut work = budget.tries.saturating_mul(2 * steps + pass);
    let mut from = 0;
    loop {
        match index.rule.next(from, &q.rule, &mut work, pass) {
            Search::Found(b) => {
                let mut visited = 0;
                let fit = bins[b].fits(t, it, check, &mut visited);
                if let Some(c) = fit {
                    return Some((b, c));
                }
                work = work.saturating_sub(visited);
                from = b + 1;
            }
            // No bin can take it: exactly first fit's answer.
            Search::None => return None,
            Search::Exhausted(at) => {
                from = at;
                break;
            }
        }
    }
    // Out of work at `from`: the bins after it that seem to have room.
    let mut work = budget.room.saturating_mul(2 * steps + room_pass);
    loop {
        match index.room.next(from, &q.room, &mut work, room_pass) {
            Search::Found(b) => {
                if index.rule.admits(b, &q.rule) {
                    let mut visited = 0;
                    if let Some(c) = bins[b].fits(t, it, check, &mut visited) {
                        return Some((b, c));
                    }
                    work = work.saturating_sub(visited);
                }
                from = b + 1;
            }
            Search::None | Search::Exhausted(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_min_tree_finds_the_first_key_within_a_bound() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut tree = MinTree::new();
        let mut keys: Vec<i64> = Vec::new();
        for _ in 0..300 {
            // Mostly new bins, sometimes a key changed.
            let i = if keys.is_empty() || rng.random_bool(0.7) {
                keys.push(0);
                keys.len() - 1
            } else {
                rng.random_range(0..keys.len())
            };
            keys[i] = rng.random_range(-5..50);
            tree.set(i, keys[i]);
            for _ in 0..5 {
                let from = rng.random_range(0..keys.len() + 2);
                let bound = rng.random_range(-6..52);
                let want = (from..keys.len()).find(|&j| keys[j] <= bound);
                assert_eq!(tree.first_at_most(from, bound), want);
            }
        }
        assert_eq!(tree.first_at_most(0, i64::MAX), Some(0));
        assert_eq!(tree.first_at_most(keys.len(), i64::MAX), None);
    }
}
