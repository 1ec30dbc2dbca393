//! Fleet sizing: how many GPUs a set of workloads needs, which can share a GPU, which fit a
//! MIG slice or a smaller model, which hold a GPU while idle, and what that is worth.
//!
//! The input is one [`Track`] per workload (a pod on a GPU, or a GPU without pod labels):
//! its readings on a common grid of steps, quantized to integers so that sums, percentiles
//! and comparisons are exact (ratios in units of 10⁻⁴, memory in MiB). Everything below is
//! computed from the tracks by [`analyze`]; nothing reads a clock or does I/O.
//!
//! **Absent is never zero.** A step inside a workload's lifetime (from its first to its last
//! reading) at which a quantity was not measured is *unknown*: a fleet sum at that step is
//! unknown too and left out of its percentiles, never summed as 0. A workload whose
//! saturation or memory was never measured is left out of the packing, with the reason. A
//! step outside a workload's lifetime is one at which it did not run: it contributes nothing.
//!
//! **Percentiles** are nearest-rank: `pq` of `n` values is the `⌈q·n⌉`-th smallest.
//!
//! **Pooled lower bound.** `max(⌈p99(compute demand) / (1 − h)⌉, ⌈max(memory demand)⌉)`,
//! where compute demand at a step is the summed roofline saturation of the workloads (in
//! GPU-equivalents) and memory demand the summed memory over one GPU's memory. No packing of
//! whole workloads onto whole GPUs can use fewer; workloads whose demand was not measured
//! are left out of the sums, which keeps it a lower bound.
//!
//! **Packing.** First-fit decreasing onto GPUs of the fleet's model: workloads sorted by
//! their larger share (`peak memory / GPU memory` or `p99 saturation / (1 − h)`), each put on
//! the first GPU where (a) memory holds, each workload reserving its peak memory for its
//! whole lifetime, and (b) the time-aligned sum of saturations has a p99 (over the steps at
//! which it is known) of at most `1 − h`. Workloads whose busy periods do not overlap share a
//! GPU that their percentiles alone would refuse them. Saturations are summed as fractions
//! of the fleet's model (work assumed to add linearly on one GPU). The search for the first
//! GPU is bounded per workload (see `first_fit`): exact while the packing is small, a valid
//! packing that may use a few more GPUs on a very large fleet.

use crate::derive::{DeriveConfig, WindowContext, WindowMetrics};
use crate::diag::Diagnostic;
use crate::gpus::{self, GpuSpec, MigProfile};
use crate::model::{EntitySample, Field, Reading, Readings};
use crate::rightsizing::{self, Constraint, Demand};
use crate::tracker::EntityWindow;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Ratio units per 1.0: ratios are stored as integers of 10⁻⁴.
pub const RATIO_UNITS: u32 = 10_000;
const NO_RATIO: u16 = u16::MAX;
const NO_MIB: u32 = u32::MAX;
const MIB: f64 = 1_048_576.0;
/// Default threshold of the busy flag below which a step is idle (the idle regime's).
pub const IDLE_BUSY_BELOW: f64 = 0.05;
/// Default threshold of effective compute below which a step is idle.
pub const IDLE_COMPUTE_BELOW: f64 = 0.01;
/// The practical DRAM ceiling the bandwidth checks use (as the MIG fit does).
pub const D_MAX: f64 = 0.8;

/// A ratio as ratio units (rounded), `None` for a missing, negative or non-finite value.
#[must_use]
pub fn ratio_units(x: Option<f64>) -> Option<u16> {
    let x = x.filter(|x| x.is_finite() && *x >= 0.0)?;
    let u = (x * f64::from(RATIO_UNITS)).round();
    // Saturation is a ratio of at most ~1.1; anything beyond the range is clamped.
    Some(u.min(f64::from(NO_RATIO - 1)) as u16)
}

/// Bytes as MiB (rounded), `None` for a missing, negative or non-finite value.
#[must_use]
pub fn mib(bytes: Option<f64>) -> Option<u32> {
    let b = bytes.filter(|b| b.is_finite() && *b >= 0.0)?;
    Some((b / MIB).round().min(f64::from(NO_MIB - 1)) as u32)
}

fn units_to_ratio(u: u64) -> f64 {
    u as f64 / f64::from(RATIO_UNITS)
}

/// The bands a coarse step's raw samples are read in for the sizing ([`STEP_QUANTILES`]).
pub const BANDS: usize = 4;
/// The quantiles of a coarse step's raw samples the sizing reads: each is the upper edge of
/// a band of the step's time (the lowest half, the next 40 %, the next 9 %, the top 1 %),
/// held for that band's share of the step ([`StepBands`]).
pub const STEP_QUANTILES: [f64; BANDS] = [0.5, 0.9, 0.99, 1.0];
/// The units of a step's weight in [`StepBands`]: 10⁻⁴ of a step.
pub const STEP_WEIGHT_UNITS: u32 = 10_000;
/// The band of [`STEP_QUANTILES`] that is the step's p99.
pub const P99_BAND: usize = 2;

/// How a coarse step's time is shared between its [`STEP_QUANTILES`]: band `j` holds the
/// quantile `STEP_QUANTILES[j]` of the step's raw samples for `weights[j]` of the step, in
/// [`STEP_WEIGHT_UNITS`]. Every raw sample is at most its band's upper edge, so the time a
/// workload spends above any level is never counted short by more than one raw sample a
/// step, and a burst shorter than a step weighs about its real duration, not the whole
/// step's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StepBands {
    /// Each band's share of the step, in [`STEP_WEIGHT_UNITS`] (they add up to one step).
    pub weights: [u32; BANDS],
}

impl StepBands {
    /// The bands of a step holding about `samples` raw samples (the step over the scrape
    /// interval): each band's share is the quantiles' difference, and the top band's at
    /// least one raw sample's (taken from the bands below it, from the top down), since the
    /// highest sample holds that much of the step whatever the quantile says.
    #[must_use]
    pub fn for_samples(samples: f64) -> StepBands {
        let mut weights = [0u32; BANDS];
        let mut below = 0u32;
        for (w, q) in weights.iter_mut().zip(STEP_QUANTILES) {
            let upper = (q * f64::from(STEP_WEIGHT_UNITS)).round() as u32;
            *w = upper - below;
            below = upper;
        }
        let one = if samples.is_finite() && samples >= 1.0 {
            (f64::from(STEP_WEIGHT_UNITS) / samples).ceil() as u32
        } else {
            STEP_WEIGHT_UNITS
        };
        let mut need = one
            .min(STEP_WEIGHT_UNITS)
            .saturating_sub(weights[BANDS - 1]);
        weights[BANDS - 1] += need;
        for w in weights[..BANDS - 1].iter_mut().rev() {
            let take = need.min(*w);
            *w -= take;
            need -= take;
        }
        StepBands { weights }
    }
}

/// One step of one workload. Each field is optional; an unmeasured one is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    saturation: u16,
    /// The saturation the sizing uses in each band of a coarse step ([`STEP_QUANTILES`]:
    /// the step's quantiles of the raw samples in it): [`NO_RATIO`] where not read (a fine
    /// step's one sample is its every band).
    bands: [u16; BANDS],
    busiest_pipe: u16,
    dram: u16,
    busy: u16,
    effective_compute: u16,
    memory_mib: u32,
}

impl Point {
    /// A step at which nothing was measured.
    pub const NONE: Point = Point {
        saturation: NO_RATIO,
        bands: [NO_RATIO; BANDS],
        busiest_pipe: NO_RATIO,
        dram: NO_RATIO,
        busy: NO_RATIO,
        effective_compute: NO_RATIO,
        memory_mib: NO_MIB,
    };

    /// A point from its values (ratios as fractions, memory in bytes); `None` is unmeasured.
    #[must_use]
    pub fn new(
        saturation: Option<f64>,
        busy: Option<f64>,
        effective_compute: Option<f64>,
        memory_bytes: Option<f64>,
    ) -> Point {
        Point {
            saturation: ratio_units(saturation).unwrap_or(NO_RATIO),
            busy: ratio_units(busy).unwrap_or(NO_RATIO),
            effective_compute: ratio_units(effective_compute).unwrap_or(NO_RATIO),
            memory_mib: mib(memory_bytes).unwrap_or(NO_MIB),
            ..Point::NONE
        }
    }

    /// The same point with the busiest pipe and DRAM activity (for the MIG fit).
    #[must_use]
    pub fn with_pipes(mut self, busiest_pipe: Option<f64>, dram: Option<f64>) -> Point {
        self.busiest_pipe = ratio_units(busiest_pipe).unwrap_or(NO_RATIO);
        self.dram = ratio_units(dram).unwrap_or(NO_RATIO);
        self
    }

    /// The step's saturation: its mean over the step, for sums of use over time.
    pub(crate) fn sat(self) -> Option<u16> {
        (self.saturation != NO_RATIO).then_some(self.saturation)
    }
    /// The saturation the sizing uses in band `j` of the step (percentiles, packing): the
    /// band's quantile where one was read ([`Track::observe_peak_sample`]), else the step's
    /// sample.
    pub(crate) fn band(self, j: usize) -> Option<u16> {
        match self.bands[j] {
            NO_RATIO => self.sat(),
            b => Some(b),
        }
    }

    /// The step's highest saturation: its top band (the largest raw sample of a coarse
    /// step), else its sample.
    pub(crate) fn sat_peak(self) -> Option<u16> {
        self.band(BANDS - 1)
    }

    /// The bands made whole once every band is read: each at least the bands below it (a
    /// higher quantile is never lower), a band not read taking the next read one above it,
    /// and the top at least the step's mean. Nothing where no band was read.
    fn settle_bands(&mut self) {
        if self.bands.iter().all(|&b| b == NO_RATIO) || self.saturation == NO_RATIO {
            if self.saturation == NO_RATIO {
                self.bands = [NO_RATIO; BANDS];
            }
            return;
        }
        let mut above = self.saturation;
        for b in self.bands.iter_mut().rev() {
            if *b == NO_RATIO {
                *b = above;
            }
            above = *b;
        }
        self.bands[BANDS - 1] = self.bands[BANDS - 1].max(self.saturation);
        for j in 1..BANDS {
            self.bands[j] = self.bands[j].max(self.bands[j - 1]);
        }
    }
    pub(crate) fn mem(self) -> Option<u32> {
        (self.memory_mib != NO_MIB).then_some(self.memory_mib)
    }
    pub(crate) fn busy(self) -> Option<u16> {
        (self.busy != NO_RATIO).then_some(self.busy)
    }
    pub(crate) fn ecf(self) -> Option<u16> {
        (self.effective_compute != NO_RATIO).then_some(self.effective_compute)
    }
    pub(crate) fn pipe(self) -> Option<u16> {
        (self.busiest_pipe != NO_RATIO).then_some(self.busiest_pipe)
    }
    pub(crate) fn dram(self) -> Option<u16> {
        (self.dram != NO_RATIO).then_some(self.dram)
    }
    pub(crate) fn any(self) -> bool {
        self != Point::NONE
    }
}

/// One workload's readings on the report's steps, from its first reading to its last.
#[derive(Debug, Clone)]
pub struct Track {
    /// `namespace/pod` when the GPU was attributed to a pod; `None` for a GPU without pod
    /// labels.
    pub pod: Option<String>,
    /// The physical GPU (`node/uuid`, or `node/gpu N`): MIG instances name their parent.
    pub gpu: String,
    /// The model as reported.
    pub model: Option<String>,
    /// The catalog entry of the model.
    pub spec: Option<&'static GpuSpec>,
    /// The MIG profile, when this workload ran on a MIG instance of a known profile.
    pub mig: Option<&'static MigProfile>,
    /// Whether the entity is a MIG instance (profile known or not).
    pub is_mig: bool,
    /// Largest total memory seen (of the GPU, or of the MIG instance), MiB.
    pub memory_total_mib: Option<u32>,
    /// Simulated data.
    pub simulated: bool,
    first: usize,
    points: Vec<Point>,
    /// Steps per point: 1, or more for a grid finer than the points kept
    /// ([`Track::with_steps_per_point`]).
    per: usize,
    /// With `per` > 1, the point its steps are being combined into, and its index.
    open: Option<(usize, Combine)>,
    /// With `per` > 1, the last step recorded.
    last: Option<usize>,
}

/// The point of a step in a [`Track`] ([`Track::point_of`]).
enum PointOf<'a> {
    /// The point being combined.
    Open(&'a mut Combine),
    /// A closed point.
    Closed(&'a mut Point),
}

/// The steps of one point being combined ([`Track::with_steps_per_point`]): the means'
/// sums and counts (in ratio units) over the steps that measured them, and the peaks of the
/// rest. A step that measured nothing adds nothing, never a 0.
#[derive(Debug, Clone, Copy, Default)]
struct Combine {
    sat: (u64, u64),
    busy: (u64, u64),
    ecf: (u64, u64),
    /// Per band, the highest of the steps' (each band of the point holds at least what
    /// that band held in any of its steps, so no time above a level is lost).
    bands: [Option<u16>; BANDS],
    pipe: Option<u16>,
    dram: Option<u16>,
    mem: Option<u32>,
    /// A step of it held an impossible raw sample: the point is unknown.
    impossible: bool,
}

impl Combine {
    fn add(&mut self, p: Point) {
        let mean = |acc: &mut (u64, u64), x: Option<u16>| {
            if let Some(x) = x {
                acc.0 += u64::from(x);
                acc.1 += 1;
            }
        };
        mean(&mut self.sat, p.sat());
        mean(&mut self.busy, p.busy());
        mean(&mut self.ecf, p.ecf());
        for j in 0..BANDS {
            self.raise_band(j, p.band(j));
        }
        self.raise_pipes(p.pipe(), p.dram());
        self.mem = self.mem.max(p.mem());
    }

    /// Raise band `j`'s saturation.
    fn raise_band(&mut self, j: usize, x: Option<u16>) {
        self.bands[j] = self.bands[j].max(x);
    }

    /// Raise the peaks of the busiest pipe and DRAM activity.
    fn raise_pipes(&mut self, pipe: Option<u16>, dram: Option<u16>) {
        self.pipe = self.pipe.max(pipe);
        self.dram = self.dram.max(dram);
    }

    fn point(&self) -> Point {
        if self.impossible {
            return Point::NONE;
        }
        let mean = |(sum, n): (u64, u64)| {
            (sum + n / 2)
                .checked_div(n)
                .and_then(|m| u16::try_from(m).ok())
                .unwrap_or(NO_RATIO)
        };
        let saturation = mean(self.sat);
        let band = |b: Option<u16>| match b {
            Some(b) if saturation != NO_RATIO => b,
            _ => NO_RATIO,
        };
        Point {
            saturation,
            bands: self.bands.map(band),
            busiest_pipe: self.pipe.unwrap_or(NO_RATIO),
            dram: self.dram.unwrap_or(NO_RATIO),
            busy: mean(self.busy),
            effective_compute: mean(self.ecf),
            memory_mib: self.mem.unwrap_or(NO_MIB),
        }
    }
}

impl Track {
    /// An empty track for a workload on `gpu`.
    #[must_use]
    pub fn new(pod: Option<String>, gpu: String) -> Track {
        Track {
            pod,
            gpu,
            model: None,
            spec: None,
            mig: None,
            is_mig: false,
            memory_total_mib: None,
            simulated: false,
            first: 0,
            points: Vec::new(),
            per: 1,
            open: None,
            last: None,
        }
    }

    /// This track keeping one point per `per` steps of the grid it is fed (steps
    /// `k·per … k·per + per − 1` make point `k`), so that its memory is that of the points
    /// kept, whatever the step: each point's saturation, busy fraction and effective compute
    /// are their means over the steps that measured them, its memory and its peaks (of
    /// saturation for the sizing, busiest pipe, DRAM activity) the highest. Its
    /// [`Track::first_step`] and [`Track::lifetime_steps`] are then in points; call
    /// [`Track::finish`] after the last step.
    #[must_use]
    pub fn with_steps_per_point(mut self, per: usize) -> Track {
        self.per = per.max(1);
        self
    }

    /// Take `other`, another holder's copy of the same device's counters, into this track:
    /// a step either knows is known, this track's point first where both do (the copies
    /// are the same readings).
    fn merge_copy(&mut self, other: &Track) {
        let first = self.first.min(other.first);
        let end = (self.first + self.points.len()).max(other.first + other.points.len());
        let at = |t: &Track, s: usize| {
            s.checked_sub(t.first)
                .and_then(|i| t.points.get(i).copied())
                .filter(|p| p.any())
        };
        self.points = (first..end)
            .map(|s| at(self, s).or_else(|| at(other, s)).unwrap_or(Point::NONE))
            .collect();
        self.first = first;
        self.memory_total_mib = self.memory_total_mib.max(other.memory_total_mib);
        self.simulated |= other.simulated;
    }

    /// Close the point still being combined from its steps (with more than one step per
    /// point); nothing otherwise.
    pub fn finish(&mut self) {
        if let Some((at, c)) = self.open.take() {
            self.push(at, c.point());
        }
        for p in &mut self.points {
            p.settle_bands();
        }
    }

    /// Record the point of step `step`. Steps must increase; a step not after the last one
    /// recorded is ignored. Steps skipped in between are unknown. With more than one step
    /// per point, the step is combined into its point.
    pub fn record(&mut self, step: usize, point: Point) {
        if self.per == 1 {
            self.push(step, point);
            return;
        }
        let at = step / self.per;
        match &mut self.open {
            _ if self.last.is_some_and(|last| step <= last) => {}
            Some((open, c)) if *open == at => {
                c.add(point);
                self.last = Some(step);
            }
            _ => {
                self.finish();
                let mut c = Combine::default();
                c.add(point);
                self.open = Some((at, c));
                self.last = Some(step);
            }
        }
    }

    /// Put `point` at step (or point) `step` of the points.
    fn push(&mut self, step: usize, point: Point) {
        if self.points.is_empty() {
            self.first = step;
        } else if step < self.first + self.points.len() {
            return;
        }
        let at = step - self.first;
        if at > self.points.len() {
            self.points.resize(at, Point::NONE);
        }
        self.points.push(point);
    }

    /// Record a derived window at `step`: roofline saturation (for a MIG instance of a known
    /// profile, in whole-GPU terms: compute by its SM share, DRAM by its memory-slice share),
    /// busy flag, effective compute, memory used, busiest pipe and DRAM activity; and the
    /// identity (model, MIG profile, total memory, simulated).
    pub fn observe(&mut self, step: usize, w: &EntityWindow) {
        if self.model.is_none() {
            self.model.clone_from(&w.id.model);
        }
        if self.spec.is_none() {
            self.spec = w.spec;
        }
        self.simulated |= w.simulated;
        if let Some(m) = &w.id.mig {
            self.is_mig = true;
            if self.mig.is_none()
                && let (Some(spec), Some(name)) = (w.spec, m.profile.as_deref())
            {
                self.mig = spec.mig.iter().find(|p| p.name == name);
            }
        }
        if let Some(t) = mib(w.readings.value(Field::MemTotalBytes)) {
            self.memory_total_mib = Some(self.memory_total_mib.map_or(t, |m| m.max(t)));
        }
        let m = &w.metrics;
        let saturation = self.saturation_of(&w.readings, &w.metrics);
        let p = Point::new(
            saturation,
            m.reported_utilization,
            m.effective_compute,
            w.readings.value(Field::MemUsedBytes),
        )
        .with_pipes(m.busiest_pipe, w.readings.value(Field::DramActive));
        self.record(step, p);
    }

    /// Set band `j` of the point of `step`, recorded by [`Track::observe`] from the step's
    /// means: `readings` (sanitized) and `metrics` ([`crate::derive::window`] of them, with
    /// the track's own model) are the same step from the quantile `STEP_QUANTILES[j]` of
    /// the raw samples in it, so the percentiles and the packing weigh a one-minute burst
    /// inside a five-minute step by its own share of the step. The p99 band's busiest pipe
    /// and DRAM activity (only ever used as percentiles) replace the means' where higher. A
    /// step not recorded is left unknown.
    fn observe_peak(
        &mut self,
        step: usize,
        j: usize,
        readings: &Readings,
        metrics: &WindowMetrics,
    ) {
        let saturation = ratio_units(self.saturation_of(readings, metrics));
        let (pipe, dram) = if j == P99_BAND {
            (
                ratio_units(metrics.busiest_pipe),
                ratio_units(readings.value(Field::DramActive)),
            )
        } else {
            (None, None)
        };
        let p = match self.point_of(step) {
            None => return,
            Some(PointOf::Open(c)) => {
                c.raise_band(j, saturation);
                c.raise_pipes(pipe, dram);
                return;
            }
            Some(PointOf::Closed(p)) if *p == Point::NONE => return,
            Some(PointOf::Closed(p)) => p,
        };
        let raise = |mean: u16, peak: Option<u16>| match (mean, peak) {
            (NO_RATIO, _) | (_, None) => mean,
            (mean, Some(peak)) => mean.max(peak),
        };
        if p.saturation != NO_RATIO
            && let Some(x) = saturation
        {
            p.bands[j] = if p.bands[j] == NO_RATIO {
                x
            } else {
                p.bands[j].max(x)
            };
        }
        p.busiest_pipe = raise(p.busiest_pipe, pipe);
        p.dram = raise(p.dram, dram);
    }

    /// Where the point of `step` is: still being combined, or closed; `None` before the
    /// track's first point or past its last.
    fn point_of(&mut self, step: usize) -> Option<PointOf<'_>> {
        let point = step / self.per;
        match &mut self.open {
            Some((open, c)) if *open == point => Some(PointOf::Open(c)),
            _ => point
                .checked_sub(self.first)
                .and_then(|at| self.points.get_mut(at))
                .map(PointOf::Closed),
        }
    }

    /// Set band `band` of the point of `step` from the entity's quantile sample `e` (a
    /// coarse step's quantile `STEP_QUANTILES[band]` of each activity ratio): its readings
    /// sanitized (what that notices appended to `diags`) and derived with the track's
    /// model, without the state of a tracker (a quantile is not a later window, and has no
    /// energy or idle power of its own).
    ///
    /// A quantile that sanitizing blanks (a sentinel, or a ratio past
    /// [`crate::derive::RATIO_CLAMP_LIMIT`]) says the step held an impossible raw sample,
    /// which its mean has averaged in: the step is then unknown, mean and bands, and this
    /// returns `true`. (The top band is the step's largest raw sample, so any raw sample
    /// over the limit is seen.)
    pub fn observe_peak_sample(
        &mut self,
        step: usize,
        band: usize,
        e: &EntitySample,
        cfg: &DeriveConfig,
        diags: &mut Vec<Diagnostic>,
    ) -> bool {
        let mut readings = e.readings;
        crate::derive::sanitize(&mut readings, &e.id, self.spec, diags);
        let blanked = Field::ALL.iter().any(|&f| {
            matches!(e.readings.get(f), Reading::Value(_))
                && !matches!(readings.get(f), Reading::Value(_))
        });
        if blanked {
            match self.point_of(step) {
                Some(PointOf::Open(c)) => c.impossible = true,
                Some(PointOf::Closed(p)) => *p = Point::NONE,
                None => {}
            }
            return true;
        }
        let ctx = WindowContext {
            spec: self.spec,
            energy_power_watts: None,
            idle_power_watts: None,
            throttles: e.throttles,
            activity_from_counters: false,
        };
        let metrics = crate::derive::window(&readings, &ctx, cfg);
        self.observe_peak(step, band.min(BANDS - 1), &readings, &metrics);
        false
    }

    /// Roofline saturation of a window, in whole-GPU terms for a MIG instance of a known
    /// profile (compute by its SM share, DRAM by its memory-slice share); `None` for an
    /// instance whose share is not known.
    fn saturation_of(&self, readings: &Readings, metrics: &WindowMetrics) -> Option<f64> {
        if self.is_mig {
            match (self.mig, self.spec) {
                (Some(p), Some(spec)) => {
                    let sm = f64::from(p.sms) / f64::from(spec.sms.max(1));
                    let slices = f64::from(p.memory_slices) / f64::from(p.memory_slices_total);
                    let c = crate::derive::compute_term(readings, Some(spec)).map(|c| c * sm);
                    let d = readings.value(Field::DramActive).map(|d| d * slices);
                    match (c, d) {
                        (Some(c), Some(d)) => Some(c.max(d)),
                        (c, d) => c.or(d),
                    }
                }
                // The instance's share of the GPU is not known: its saturation is not a
                // share of a whole GPU, so it is not counted.
                _ => None,
            }
        } else {
            metrics.roofline_saturation
        }
    }

    /// The first step of the lifetime.
    #[must_use]
    pub fn first_step(&self) -> usize {
        self.first
    }

    /// The points from the first step on, one per step (`Point::NONE` where nothing was
    /// read).
    #[must_use]
    pub(crate) fn points(&self) -> &[Point] {
        &self.points
    }

    /// Steps from the first reading to the last.
    #[must_use]
    pub fn lifetime_steps(&self) -> usize {
        self.points.len()
    }

    fn range(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.points.len()
    }

    fn has_saturation(&self) -> bool {
        self.points.iter().any(|p| p.sat().is_some())
    }
    fn has_memory(&self) -> bool {
        self.points.iter().any(|p| p.mem().is_some())
    }
}

/// What the analysis is asked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetConfig {
    /// Headroom `h` in [0, 0.9]: summed saturation is kept under `1 − h`; the MIG fit and
    /// the smaller-model check keep the same headroom.
    pub headroom: f64,
    /// A workload is listed as idle allocated capacity when idle more than this share of
    /// the time its busy flag or effective compute was measured.
    pub idle_share: f64,
    /// A step is idle when the busy flag (where measured) is below this…
    pub idle_busy_below: f64,
    /// …and effective compute (where measured) is below this.
    pub idle_compute_below: f64,
    /// Price of one GPU-hour, for the savings estimate.
    pub cost_per_gpu_hour: Option<f64>,
    /// A smaller model is proposed only where the workload's observed peak is at most this
    /// many times the model's capacity (1.0: the peak must fit); above 1, the peak runs that
    /// much slower on it. Finite and positive ([`FleetConfig::check`]).
    pub max_peak_over_capacity: f64,
}

impl FleetConfig {
    /// Check the knobs the analysis does not clamp itself: `max_peak_over_capacity` must
    /// be finite and positive.
    ///
    /// # Errors
    ///
    /// A sentence naming the knob and its value.
    pub fn check(&self) -> Result<(), String> {
        let f = self.max_peak_over_capacity;
        if f.is_finite() && f > 0.0 {
            Ok(())
        } else {
            Err(format!(
                "max_peak_over_capacity must be a finite number above 0, got {f}"
            ))
        }
    }
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            headroom: 0.2,
            idle_share: 0.5,
            idle_busy_below: IDLE_BUSY_BELOW,
            idle_compute_below: IDLE_COMPUTE_BELOW,
            cost_per_gpu_hour: None,
            max_peak_over_capacity: 1.0,
        }
    }
}

/// The input of [`analyze`]: every track on a grid of `steps` steps of `step_seconds`.
#[derive(Debug, Clone, Default)]
pub struct FleetInput {
    /// Seconds per step.
    pub step_seconds: f64,
    /// Steps in the window.
    pub steps: usize,
    /// One per workload.
    pub tracks: Vec<Track>,
    /// The holders (`namespace/pod`) of each GPU (by its track's `gpu` key) whose own series
    /// carry no pod, where node mode's allocation info names them: a time-sliced GPU's
    /// counters are the device's, written without pod labels, and the device is its
    /// holders' one workload in the sizing.
    pub held: BTreeMap<String, Vec<String>>,
    /// How each step's time is shared between its bands, where the steps are coarse and
    /// their bands were read ([`Track::observe_peak_sample`]); `None`: one value a step.
    pub step_bands: Option<StepBands>,
}

/// Percentiles of a series over the steps at which it is known.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest value.
    pub max: f64,
    /// Steps at which the series is known (the percentiles' denominator).
    pub steps_known: usize,
}

/// Nearest-rank percentile `q` of sorted values.
fn rank(sorted: &[u64], q: f64) -> u64 {
    let n = sorted.len();
    let k = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[k - 1]
}

/// Nearest-rank p50, p95, p99 and max of `values` (integers), scaled by `scale`.
fn summarize(mut values: Vec<u64>, scale: impl Fn(u64) -> f64) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(Summary {
        p50: scale(rank(&values, 0.50)),
        p95: scale(rank(&values, 0.95)),
        p99: scale(rank(&values, 0.99)),
        max: scale(values[values.len() - 1]),
        steps_known: values.len(),
    })
}

/// [`summarize`] of weighted values (each a sub-step of a step, weighted by its share):
/// weighted nearest-rank p50, p95, p99 and the max, over `steps_known` steps.
fn summarize_weighted(
    mut values: Vec<(u64, u64)>,
    steps_known: usize,
    scale: impl Fn(u64) -> f64,
) -> Option<Summary> {
    let max = values.iter().map(|x| x.0).max()?;
    let mut q = |q: f64| weighted_rank(&mut values, q).map(&scale);
    Some(Summary {
        p50: q(0.50)?,
        p95: q(0.95)?,
        p99: q(0.99)?,
        max: scale(max),
        steps_known,
    })
}

/// Nearest-rank percentile `q` of the known values of one field of a track.
fn track_quantile(t: &Track, q: f64, f: impl Fn(Point) -> Option<u64>) -> Option<u64> {
    let mut v: Vec<u64> = t.points.iter().filter_map(|p| f(*p)).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(rank(&v, q))
}

/// The fleet-level series, one value per step (`None`: unknown or no data).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FleetSeries {
    /// GPUs holding at least one pod (only when pods are labelled).
    pub allocated_gpus: Vec<Option<u32>>,
    /// GPUs with any reading.
    pub gpus_reporting: Vec<Option<u32>>,
    /// Summed busy flag, GPU-equivalents.
    pub busy_claim_gpus: Vec<Option<f64>>,
    /// Summed roofline saturation, GPU-equivalents.
    pub compute_demand_gpus: Vec<Option<f64>>,
    /// Summed memory over one GPU's memory.
    pub memory_demand_gpus: Vec<Option<f64>>,
}

/// A sum over the workloads that have the quantity, and those that never had it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetSum {
    /// Percentiles over the steps at which every live workload that has it was measured.
    pub summary: Option<Summary>,
    /// Workloads summed.
    pub workloads: usize,
    /// Workloads that never had the quantity measured: not in the sum (never as 0).
    pub unmeasured: Vec<String>,
}

/// Which of the two terms decided the pooled bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Binding {
    /// p99 compute demand over `1 − h`.
    Compute,
    /// Peak memory demand.
    Memory,
}

/// `max(⌈p99 compute / (1 − h)⌉, ⌈peak memory⌉)`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PooledBound {
    /// GPUs: no packing can use fewer.
    pub gpus: u64,
    /// `p99(compute demand) / (1 − h)`, GPU-equivalents (`None`: not measured).
    pub compute_gpus: Option<f64>,
    /// Peak memory demand, GPU-equivalents (`None`: not measured).
    pub memory_gpus: Option<f64>,
    /// The term that decided.
    pub binding: Binding,
}

/// One GPU of the packing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PackedGpu {
    /// The workloads on it, in the order they were placed.
    pub workloads: Vec<String>,
    /// Largest time-aligned sum of the members' peak memory, bytes.
    pub peak_memory_bytes: f64,
    /// p99 of the time-aligned summed saturation.
    pub saturation_p99: Option<f64>,
}

/// A workload left out of the packing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Excluded {
    /// The workload.
    pub workload: String,
    /// Why.
    pub reason: String,
}

/// The first-fit-decreasing packing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Packing {
    /// GPUs the packing uses.
    pub packed_gpus: u64,
    /// Distinct GPUs the excluded workloads held: assumed kept as they are.
    pub excluded_gpus: u64,
    /// `packed_gpus + excluded_gpus`.
    pub gpus: u64,
    /// The GPUs and their workloads.
    pub bins: Vec<PackedGpu>,
    /// Workloads not packed (demand not measured), with the reason.
    pub excluded: Vec<Excluded>,
}

/// GPUs needed, two ways.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sizing {
    /// GPUs holding a pod (`None` when no pod labels).
    pub allocated_gpus: Option<Summary>,
    /// GPUs with readings.
    pub gpus_reporting: Option<Summary>,
    /// What the busy flag claims, GPU-equivalents.
    pub busy_claim_gpus: FleetSum,
    /// Compute demand: summed roofline saturation.
    pub compute_demand_gpus: FleetSum,
    /// Memory demand: summed memory over one GPU's memory.
    pub memory_demand_gpus: FleetSum,
    /// The pooled lower bound (`None` when neither demand was measured).
    pub pooled_lower_bound: Option<PooledBound>,
    /// The packable answer (`None` when no workload has both demands measured).
    pub packing: Option<Packing>,
}

/// A group of workloads that fit one GPU together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Colocation {
    /// The workloads.
    pub workloads: Vec<String>,
    /// Distinct GPUs they hold now.
    pub gpus_held: u64,
    /// GPUs freed by putting them on one.
    pub gpus_freed: u64,
    /// Largest time-aligned sum of their peak memory, bytes.
    pub peak_memory_bytes: f64,
    /// p99 of their time-aligned summed saturation.
    pub saturation_p99: Option<f64>,
    /// Sum of each one's own p99 saturation.
    pub sum_of_p99s: f64,
    /// Their busy periods interleave: the sum of their p99s exceeds `1 − h`, the aligned sum
    /// does not.
    pub interleaved: bool,
}

/// The smallest MIG profile that fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigChoice {
    /// Profile name.
    pub profile: &'static str,
    /// The constraint that ruled out the smaller profiles.
    pub binding: Constraint,
    /// Constraints not checked because their demand was not measured.
    pub unmeasured: Vec<Constraint>,
    /// What it costs the workload's observed peak, its capacity the profile's share of the
    /// GPU's SMs (`None`: saturation was not measured).
    pub peak: Option<PeakCost>,
}

/// A smaller catalog model that covers the demand.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SmallerGpu {
    /// Catalog key.
    pub key: &'static str,
    /// Model name.
    pub name: &'static str,
    /// Whether compute was checked too (it was measured).
    pub compute_checked: bool,
    /// What it costs the workload's observed peak (`None`: saturation was not measured).
    pub peak: Option<PeakCost>,
}

/// What a smaller model costs a workload's observed peak: the peak in the source GPU's
/// terms and in the target's, and how long its longest burst above the target's capacity
/// would run there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PeakCost {
    /// The workload's observed peak saturation, of its own GPU: the highest step.
    pub peak_saturation: f64,
    /// The target's capacity in the source's terms: a model's dense BF16 tensor peak over
    /// the source's; a MIG profile's share of the GPU's SMs.
    pub capacity_ratio: f64,
    /// The peak in the target's terms, `peak_saturation / capacity_ratio`: above 1 it is
    /// more than the target can do, and runs that many times longer.
    pub peak_on_target: f64,
    /// The longest run of steps whose saturation is above the target's capacity, seconds
    /// (`None`: the peak fits).
    pub burst_seconds: Option<f64>,
    /// How long that burst would run on the target at its full capacity:
    /// `burst_seconds × peak_on_target` (`None`: the peak fits).
    pub burst_on_target_seconds: Option<f64>,
}

/// Right-sizing of one workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RightSizing {
    /// The workload.
    pub workload: String,
    /// The GPU it ran on.
    pub gpu: String,
    /// Model as reported.
    pub model: Option<String>,
    /// MIG profile, when it ran on a MIG instance.
    pub mig_profile: Option<&'static str>,
    /// Simulated data.
    pub simulated: bool,
    /// Peak memory used, bytes (`None`: not measured).
    pub memory_peak_bytes: Option<f64>,
    /// p99 memory used, bytes.
    pub memory_p99_bytes: Option<f64>,
    /// Total memory of its GPU (or instance), bytes.
    pub memory_total_bytes: Option<f64>,
    /// `peak / total`.
    pub memory_peak_fraction: Option<f64>,
    /// p99 roofline saturation (of its GPU or instance).
    pub saturation_p99: Option<f64>,
    /// Share of its lifetime's steps at which saturation was measured.
    pub saturation_measured_share: f64,
    /// Smallest MIG profile of its model that fits the measured demand.
    pub mig_fit: Option<MigChoice>,
    /// Why there is no MIG fit, when there is none.
    pub mig_fit_note: Option<String>,
    /// A smaller catalog model whose memory and bandwidth cover the p99 demand.
    pub smaller_gpu: Option<SmallerGpu>,
    /// Why there is no smaller model, when there is none.
    pub smaller_gpu_note: Option<String>,
}

/// One workload that held a GPU while idle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleWorkload {
    /// The workload.
    pub workload: String,
    /// Idle steps over measured steps.
    pub idle_share: f64,
    /// Hours it held the GPU (steps with readings).
    pub held_hours: f64,
    /// Hours in which the busy flag or effective compute was measured.
    pub measured_hours: f64,
    /// Idle hours (GPU-hours for a whole GPU).
    pub idle_gpu_hours: f64,
}

/// Idle allocated capacity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Idle {
    /// Listed when idle more than this share.
    pub idle_share_above: f64,
    /// Idle step: busy flag below this…
    pub busy_below: f64,
    /// …and effective compute below this (each where measured).
    pub effective_compute_below: f64,
    /// The workloads idle more than `idle_share_above` of their measured time, most idle
    /// GPU-hours first.
    pub workloads: Vec<IdleWorkload>,
    /// The idle GPU-hours of every workload whose idleness was measured, listed or not: a
    /// total never depends on the listing's threshold.
    pub idle_gpu_hours: f64,
    /// Of them, the idle GPU-hours of the workloads listed.
    pub listed_idle_gpu_hours: f64,
    /// The workloads with idle time that the threshold leaves out of the list, and their
    /// idle GPU-hours together.
    pub not_listed: NotListed,
    /// Workloads with neither busy flag nor effective compute: their idleness is unknown.
    pub unmeasured: Vec<String>,
}

/// What a list's threshold leaves out of it: how many, and how much.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NotListed {
    /// Workloads left out of the list (with any of the quantity).
    pub workloads: usize,
    /// Their GPU-hours together.
    pub gpu_hours: f64,
}

/// The savings estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Savings {
    /// Always true: this is an estimate.
    pub estimate: bool,
    /// GPUs today: peak allocated (or peak reporting without pod labels).
    pub baseline_gpus: u64,
    /// GPUs the packing needs (excluded workloads keep theirs).
    pub needed_gpus: u64,
    /// `baseline − needed`, at least 0.
    pub gpus_freed: u64,
    /// Hours of the window with data.
    pub hours: f64,
    /// `gpus_freed × hours`.
    pub gpu_hours: f64,
    /// Price of one GPU-hour, when given.
    pub cost_per_gpu_hour: Option<f64>,
    /// `gpu_hours × cost_per_gpu_hour`.
    pub cost: Option<f64>,
    /// What the estimate assumes.
    pub assumptions: Vec<String>,
}

/// The whole analysis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetReport {
    /// `pod`, or `gpu` when no GPU carried pod labels (each GPU is then one workload).
    pub workload_unit: &'static str,
    /// Steps in the window.
    pub steps: usize,
    /// Steps with any reading.
    pub steps_with_data: usize,
    /// Seconds per step.
    pub step_seconds: f64,
    /// Headroom.
    pub headroom: f64,
    /// The fleet's model (the most common), on which the packing places workloads.
    pub gpu_model: Option<String>,
    /// Its memory, bytes (measured where possible, else the catalog's).
    pub gpu_memory_bytes: Option<f64>,
    /// Workloads analyzed.
    pub workloads: usize,
    /// GPUs without pod labels, left out of the pod analysis (when some GPUs had pods).
    pub gpus_without_pods: Vec<String>,
    /// Whether any data was simulated.
    pub simulated: bool,
    /// Fleet sizing.
    pub sizing: Sizing,
    /// Co-location groups, most GPUs freed first.
    pub colocation: Vec<Colocation>,
    /// Per-workload right-sizing.
    pub rightsizing: Vec<RightSizing>,
    /// Idle allocated capacity.
    pub idle: Idle,
    /// Savings estimate (`None` without a packing).
    pub savings: Option<Savings>,
    /// The method and its assumptions, in words.
    pub method: Vec<String>,
    /// What was missing or left out, in words.
    pub notes: Vec<String>,
    /// The fleet series per step.
    pub series: FleetSeries,
}

/// The workload's display names, unique: a pod on several GPUs is named with its GPU.
fn names(tracks: &[&Track]) -> Vec<String> {
    let base: Vec<String> = tracks
        .iter()
        .map(|t| t.pod.clone().unwrap_or_else(|| t.gpu.clone()))
        .collect();
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for b in &base {
        *count.entry(b.as_str()).or_default() += 1;
    }
    tracks
        .iter()
        .zip(&base)
        .map(|(t, b)| {
            if count[b.as_str()] > 1 && t.pod.is_some() {
                format!("{b} on {}", t.gpu)
            } else {
                b.clone()
            }
        })
        .collect()
}

/// A sum over tracks per step, known where every live track that has the quantity was
/// measured. `value` is `None` for an unmeasured point.
fn sum_series(
    tracks: &[&Track],
    steps: usize,
    has: impl Fn(&Track) -> bool,
    value: impl Fn(Point) -> Option<u64>,
) -> (Vec<Option<u64>>, usize) {
    let mut sum: Vec<Option<u64>> = vec![None; steps];
    let mut live = vec![false; steps];
    let mut unknown = vec![false; steps];
    let mut n = 0;
    for t in tracks.iter().filter(|t| has(t)) {
        n += 1;
        for (i, p) in t.points.iter().enumerate() {
            let s = t.first + i;
            if s >= steps {
                break;
            }
            live[s] = true;
            match value(*p) {
                Some(v) => *sum[s].get_or_insert(0) += v,
                None => unknown[s] = true,
            }
        }
    }
    for s in 0..steps {
        if unknown[s] || !live[s] {
            sum[s] = None;
        }
    }
    (sum, n)
}

/// [`sum_series`] of the saturation per sub-step of `grid` (`steps · grid.m` of them):
/// each workload's band `j` added to sub-step `j` of its step.
fn sum_sub_steps(tracks: &[&Track], steps: usize, grid: Grid) -> Vec<Option<u64>> {
    let subs = steps * grid.m;
    let mut sum: Vec<Option<u64>> = vec![None; subs];
    let mut unknown = vec![false; subs];
    for t in tracks.iter().filter(|t| t.has_saturation()) {
        for (i, p) in t.points.iter().enumerate() {
            let s = t.first + i;
            if s >= steps {
                break;
            }
            for j in 0..grid.m {
                let u = s * grid.m + j;
                match grid.value(*p, j) {
                    Some(v) => *sum[u].get_or_insert(0) += u64::from(v),
                    None => unknown[u] = true,
                }
            }
        }
    }
    for (x, &unknown) in sum.iter_mut().zip(&unknown) {
        if unknown {
            *x = None;
        }
    }
    sum
}

/// Distinct GPUs with a reading per step, among `tracks`: the tracks grouped by GPU, a step
/// counts a GPU once however many of its tracks read then (`O(n log n + n · steps)`).
fn gpu_count(tracks: &[&Track], steps: usize) -> Vec<Option<u32>> {
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    for t in tracks {
        let n = ids.len();
        ids.entry(t.gpu.as_str()).or_insert(n);
    }
    let mut by_gpu: Vec<(usize, &Track)> =
        tracks.iter().map(|t| (ids[t.gpu.as_str()], *t)).collect();
    by_gpu.sort_by_key(|&(g, _)| g);
    let mut count = vec![0u32; steps];
    // The last GPU counted at each step: its tracks come one after the other.
    let mut last = vec![usize::MAX; steps];
    for (g, t) in by_gpu {
        for (i, p) in t.points.iter().enumerate() {
            let s = t.first + i;
            if s >= steps {
                break;
            }
            if p.any() && last[s] != g {
                last[s] = g;
                count[s] += 1;
            }
        }
    }
    count.into_iter().map(|c| (c > 0).then_some(c)).collect()
}

fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

/// The sub-steps the sizing weighs each step by: one a step (a fine step's sample), or
/// the bands of a coarse step that have a share of it ([`StepBands`]), each with its
/// share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grid {
    /// Sub-steps a step: 1 to [`BANDS`].
    m: usize,
    /// The band each sub-step reads.
    band: [usize; BANDS],
    /// Each sub-step's weight (never 0).
    weights: [u64; BANDS],
}

impl Grid {
    fn of(bands: Option<StepBands>) -> Grid {
        let mut g = Grid {
            m: 0,
            band: [BANDS - 1; BANDS],
            weights: [1; BANDS],
        };
        match bands {
            None => g.m = 1,
            Some(b) => {
                for (j, &w) in b.weights.iter().enumerate().filter(|(_, w)| **w > 0) {
                    (g.band[g.m], g.weights[g.m]) = (j, u64::from(w));
                    g.m += 1;
                }
                if g.m == 0 {
                    g.m = 1;
                }
            }
        }
        g
    }

    /// One sub-step a step, of weight 1: the counts are steps.
    fn is_unit(&self) -> bool {
        self.m == 1 && self.weights[0] == 1
    }

    /// The saturation of point `p` at its sub-step `j`.
    fn value(&self, p: Point, j: usize) -> Option<u16> {
        p.band(self.band[j])
    }

    /// The (value, weight) of each sub-step of `p`, where its saturation is known.
    fn weighted(&self, p: Point) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.m).filter_map(move |j| self.value(p, j).map(|x| (u64::from(x), self.weights[j])))
    }

    /// The least weight of a sub-step.
    fn min_weight(&self) -> u64 {
        self.weights[..self.m].iter().copied().min().unwrap_or(1)
    }
}

/// Nearest-rank quantile `q` of weighted values: the least value such that those at most it
/// weigh at least `⌈q · total⌉` (with unit weights, the `⌈q·n⌉`-th smallest). Reorders `v`.
fn weighted_rank(v: &mut [(u64, u64)], q: f64) -> Option<u64> {
    let total: u64 = v.iter().map(|x| x.1).sum();
    if total == 0 {
        return None;
    }
    v.sort_unstable();
    let k = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut below = 0;
    v.iter()
        .find(|&&(_, w)| {
            below += w;
            below >= k
        })
        .map(|x| x.0)
}

/// Nearest-rank quantile `q` of a track's sizing saturation over its known sub-steps, each
/// weighted by its share of its step.
fn sizing_quantile(t: &Track, q: f64, grid: Grid) -> Option<u64> {
    let mut v: Vec<(u64, u64)> = t.points.iter().flat_map(|&p| grid.weighted(p)).collect();
    weighted_rank(&mut v, q)
}

/// One GPU of the packing while it is being filled.
struct Bin {
    grid: Grid,
    members: Vec<usize>,
    /// Per step: summed peak memory of the live members, MiB.
    mem: Vec<u64>,
    max_mem: u64,
    /// Per sub-step (`grid.m` a step): summed saturation units; `SAT_NONE` no live member,
    /// `SAT_UNKNOWN` a live member unmeasured.
    sat: Vec<u32>,
    /// The weight of the sub-steps at which the sum is known, and of those over the limit.
    known: u64,
    over: u64,
}

const SAT_NONE: u32 = u32::MAX;
const SAT_UNKNOWN: u32 = u32::MAX - 1;

/// Whether at most a 1 % tail of `known` weight exceeds the limit: nearest-rank p99 ≤ L.
fn p99_within(known: u64, over: u64) -> bool {
    over.min(known) <= p99_slack(known)
}

/// How much of `known` weight may exceed the limit with the nearest-rank p99 still within it.
fn p99_slack(known: u64) -> u64 {
    known - ((0.99 * known as f64).ceil() as u64).min(known)
}

/// What one workload brings to the packing.
struct Item {
    track: usize,
    peak_mib: u64,
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
    fn fits(
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

/// The headroom in [0, 0.9], NaN as 0.
fn sane(h: f64) -> f64 {
    if h.is_nan() { 0.0 } else { h.clamp(0.0, 0.9) }
}

/// Analyze the fleet.
#[must_use]
pub fn analyze(input: &FleetInput, cfg: &FleetConfig) -> FleetReport {
    let h = sane(cfg.headroom);
    // The limit on summed saturation, in ratio units: 1 − h.
    let limit = RATIO_UNITS - (h * f64::from(RATIO_UNITS)).round() as u32;
    let steps = input.steps;
    let hours_per_step = input.step_seconds / 3600.0;
    let mut notes = Vec::new();

    let merged = devices(input, &mut notes);
    let (unit, work) = workloads(input, &merged, &mut notes);
    let gpus_without_pods = gpus_without_pods(input, unit, &work, &mut notes);
    let names = names(&work);
    let (fleet_spec, gpu_mib) = fleet_gpu(&work, &mut notes);
    let grid = Grid::of(input.step_bands);
    let series = Series::of(input, unit, &work, steps, grid);
    let steps_with_data = series.reporting.iter().filter(|x| x.is_some()).count();
    let [busy_claim, compute_demand, memory_demand] =
        demand_sums(&work, &names, &series, gpu_mib, &mut notes);
    let pooled = pooled_bound(series.compute_weighted(), &series.memory.0, gpu_mib, limit);

    let (packing, colocation) = packing(&work, &names, gpu_mib, limit, (steps, grid), &mut notes);

    let rightsizing = work
        .iter()
        .zip(&names)
        .map(|(t, n)| {
            let limit = PeakLimit {
                max_over: cfg.max_peak_over_capacity,
                seconds_per_point: input.step_seconds,
                grid,
            };
            right_size(t, n, h, limit)
        })
        .collect();
    let idle = idle_capacity(&work, &names, cfg, hours_per_step);
    let allocated_summary = gpu_summary(&series.allocated);
    let reporting_summary = gpu_summary(&series.reporting);
    let baseline = if unit == "pod" {
        allocated_summary
    } else {
        reporting_summary
    };
    let savings = packing.as_ref().and_then(|p| {
        savings(
            p,
            unit,
            baseline,
            steps_with_data as f64 * hours_per_step,
            cfg.cost_per_gpu_hour,
        )
    });

    let simulated = input.tracks.iter().any(|t| t.simulated);
    if steps_with_data < steps {
        notes.push(format!(
            "{} of {} steps had no data at all (a gap in the history): they are left out, never counted as idle or 0",
            steps - steps_with_data,
            steps
        ));
    }
    FleetReport {
        workload_unit: unit,
        steps,
        steps_with_data,
        step_seconds: input.step_seconds,
        headroom: h,
        gpu_model: fleet_spec.map(|s| s.name.to_owned()),
        gpu_memory_bytes: gpu_mib.map(|g| g as f64 * MIB),
        workloads: work.len(),
        gpus_without_pods,
        simulated,
        sizing: Sizing {
            allocated_gpus: allocated_summary,
            gpus_reporting: reporting_summary,
            busy_claim_gpus: busy_claim,
            compute_demand_gpus: compute_demand,
            memory_demand_gpus: memory_demand,
            pooled_lower_bound: pooled,
            packing,
        },
        colocation,
        rightsizing,
        idle,
        savings,
        method: method_text(h),
        notes,
        series: series.into_fleet_series(gpu_mib),
    }
}

/// The devices held by several pods, each one workload ([`devices`]), keyed by GPU.
struct Merged {
    tracks: Vec<Track>,
    gpus: BTreeSet<String>,
}

/// One physical GPU, one place in the sizing. A whole GPU's tracks under several pods are
/// one device's counters read once per holder (dcgm-exporter, and each holder's sidecar,
/// write a time-sliced GPU's series once per pod): merged into one workload named by its
/// holders, its demand counted once. A GPU whose own series carry no pod but whose holders
/// node mode's allocation info names ([`FleetInput::held`]) is that workload too. MIG
/// instances are devices of their own and never merged.
fn devices(input: &FleetInput, notes: &mut Vec<String>) -> Merged {
    let mut by_gpu: BTreeMap<&str, Vec<&Track>> = BTreeMap::new();
    for t in input.tracks.iter().filter(|t| !t.is_mig) {
        if t.pod.is_some() || input.held.contains_key(&t.gpu) {
            by_gpu.entry(t.gpu.as_str()).or_default().push(t);
        }
    }
    let mut merged = Merged {
        tracks: Vec::new(),
        gpus: BTreeSet::new(),
    };
    for (gpu, tracks) in by_gpu {
        let holders: BTreeSet<&str> = tracks
            .iter()
            .filter_map(|t| t.pod.as_deref())
            .chain(
                input
                    .held
                    .get(gpu)
                    .into_iter()
                    .flatten()
                    .map(String::as_str),
            )
            .collect();
        let pod_tracks = tracks.iter().filter(|t| t.pod.is_some()).count();
        let pod_less = tracks.len() - pod_tracks;
        if !(pod_tracks > 1 || (pod_less > 0 && !holders.is_empty())) {
            continue;
        }
        // The device's own pod-less series first, then its holders' copies (and any
        // sole holder's steps before or after the sharing).
        let mut device = tracks;
        device.sort_by_key(|t| t.pod.is_some());
        let mut one = device[0].clone();
        for t in &device[1..] {
            one.merge_copy(t);
        }
        one.pod = Some(holders.into_iter().collect::<Vec<_>>().join(" + "));
        merged.gpus.insert(gpu.to_owned());
        merged.tracks.push(one);
    }
    if !merged.gpus.is_empty() {
        notes.push(format!(
            "{} GPU(s) held by several pods at once, or time-sliced under node mode, are sized once each, as one workload named by their holders: {}",
            merged.gpus.len(),
            merged.gpus.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    merged
}

/// The workloads: one per device ([`devices`]), the tracks with a pod when any has one
/// (unit `pod`), else every GPU as one workload (unit `gpu`, with a note that allocation is
/// then unknown).
fn workloads<'a>(
    input: &'a FleetInput,
    merged: &'a Merged,
    notes: &mut Vec<String>,
) -> (&'static str, Vec<&'a Track>) {
    // Each merged device where its GPU's first track was.
    let mut emitted = BTreeSet::new();
    let mut with_pod: Vec<&Track> = Vec::new();
    for t in &input.tracks {
        if t.is_mig || !merged.gpus.contains(&t.gpu) {
            if t.pod.is_some() {
                with_pod.push(t);
            }
        } else if emitted.insert(t.gpu.as_str())
            && let Some(m) = merged.tracks.iter().find(|m| m.gpu == t.gpu)
        {
            with_pod.push(m);
        }
    }
    if with_pod.is_empty() {
        if !input.tracks.is_empty() {
            notes.push(
                "no GPU carried pod labels (pod, namespace): each GPU is treated as one workload, allocation is unknown, and savings are counted against the GPUs reporting".to_owned(),
            );
        }
        ("gpu", input.tracks.iter().collect())
    } else {
        ("pod", with_pod)
    }
}

/// In the pod analysis, the GPUs that never carried a pod (sorted, each once): left out of
/// it, and named in a note.
fn gpus_without_pods(
    input: &FleetInput,
    unit: &str,
    work: &[&Track],
    notes: &mut Vec<String>,
) -> Vec<String> {
    let mut gpus_without_pods: Vec<String> = if unit == "pod" {
        let pod_gpus: BTreeSet<&str> = work.iter().map(|t| t.gpu.as_str()).collect();
        input
            .tracks
            .iter()
            .filter(|t| t.pod.is_none() && !pod_gpus.contains(t.gpu.as_str()))
            .map(|t| t.gpu.clone())
            .collect()
    } else {
        Vec::new()
    };
    gpus_without_pods.sort();
    gpus_without_pods.dedup();
    if !gpus_without_pods.is_empty() {
        notes.push(format!(
            "{} GPU(s) never carried pod labels and are left out of the pod analysis (counted in gpus_reporting only): {}",
            gpus_without_pods.len(),
            gpus_without_pods.join(", ")
        ));
    }
    gpus_without_pods
}

/// The fleet's model (the most common among the workloads) and one GPU's memory in MiB:
/// the largest total measured on a whole GPU of that model, else the catalog's figure, else
/// the largest total measured on any whole GPU.
fn fleet_gpu(work: &[&Track], notes: &mut Vec<String>) -> (Option<&'static GpuSpec>, Option<u64>) {
    let mut models: BTreeMap<&str, (usize, &'static GpuSpec)> = BTreeMap::new();
    for t in work {
        if let Some(s) = t.spec {
            models.entry(s.key).or_insert((0, s)).0 += 1;
        }
    }
    let fleet_spec = models
        .values()
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.key.cmp(a.1.key)))
        .map(|x| x.1);
    if models.len() > 1 {
        notes.push(format!(
            "the fleet mixes {} models; packing places every workload on the most common one, {}, and sums saturations as fractions of it",
            models.len(),
            fleet_spec.map_or("?", |s| s.name)
        ));
    }
    let measured_total = work
        .iter()
        .filter(|t| !t.is_mig && t.spec.map(|s| s.key) == fleet_spec.map(|s| s.key))
        .filter_map(|t| t.memory_total_mib)
        .max();
    let gpu_mib: Option<u64> = measured_total
        .map(u64::from)
        .or_else(|| fleet_spec.map(|s| s.memory_bytes / (1 << 20)))
        .or_else(|| {
            work.iter()
                .filter(|t| !t.is_mig)
                .filter_map(|t| t.memory_total_mib)
                .max()
                .map(u64::from)
        });
    if measured_total.is_none() && gpu_mib.is_some() && fleet_spec.is_some() {
        notes.push("no total-memory series for the fleet's model: one GPU's memory is the catalog's figure".to_owned());
    }
    (fleet_spec, gpu_mib)
}

/// The fleet-level series per step, in integer units, with the number of workloads each
/// sum is over.
struct Series {
    /// GPUs with a reading, among all tracks.
    reporting: Vec<Option<u32>>,
    /// GPUs holding a workload (unknown without pod labels).
    allocated: Vec<Option<u32>>,
    /// Summed busy flag, ratio units.
    busy: (Vec<Option<u64>>, usize),
    /// Summed saturation, ratio units: the step's (a coarse step's p99 band).
    compute: (Vec<Option<u64>>, usize),
    /// Summed saturation per sub-step of `grid` (the bands of a workload summed band by
    /// band: within a step, their busiest times taken as at once), for the percentiles.
    compute_subs: Vec<Option<u64>>,
    grid: Grid,
    /// Summed memory, MiB.
    memory: (Vec<Option<u64>>, usize),
}

impl Series {
    /// The series of `work` (and, for `reporting`, of every track) over `steps` steps.
    fn of(input: &FleetInput, unit: &str, work: &[&Track], steps: usize, grid: Grid) -> Series {
        let all: Vec<&Track> = input.tracks.iter().collect();
        let reporting = gpu_count(&all, steps);
        let allocated = if unit == "pod" {
            gpu_count(work, steps)
        } else {
            vec![None; steps]
        };
        let busy = sum_series(work, steps, has_busy, |p| p.busy().map(u64::from));
        let step_band = if grid.m == 1 { BANDS - 1 } else { P99_BAND };
        let compute = sum_series(work, steps, Track::has_saturation, |p| {
            p.band(step_band).map(u64::from)
        });
        let compute_subs = if grid.is_unit() {
            compute.0.clone()
        } else {
            sum_sub_steps(work, steps, grid)
        };
        let memory = sum_series(work, steps, Track::has_memory, |p| p.mem().map(u64::from));
        Series {
            reporting,
            allocated,
            busy,
            compute,
            compute_subs,
            grid,
            memory,
        }
    }

    /// The summed saturation's sub-steps where known, with their weights.
    fn compute_weighted(&self) -> Vec<(u64, u64)> {
        let m = self.grid.m;
        self.compute_subs
            .iter()
            .enumerate()
            .filter_map(|(u, x)| x.map(|x| (x, self.grid.weights[u % m])))
            .collect()
    }

    /// The report's series: ratios as fractions, memory over one GPU's memory (`gpu_mib`).
    fn into_fleet_series(self, gpu_mib: Option<u64>) -> FleetSeries {
        let ratio_series = |v: &[Option<u64>]| v.iter().map(|x| x.map(units_to_ratio)).collect();
        FleetSeries {
            allocated_gpus: self.allocated,
            gpus_reporting: self.reporting,
            busy_claim_gpus: ratio_series(&self.busy.0),
            compute_demand_gpus: ratio_series(&self.compute.0),
            memory_demand_gpus: self
                .memory
                .0
                .iter()
                .map(|m| m.and_then(|m| gpu_mib.map(|g| m as f64 / g as f64)))
                .collect(),
        }
    }
}

/// Whether the track's busy flag was ever measured.
fn has_busy(t: &Track) -> bool {
    t.points.iter().any(|p| p.busy().is_some())
}

/// The busy claim, compute demand and memory demand as percentiles, each with the
/// workloads it never measured; a note names those whose demand is unknown.
fn demand_sums(
    work: &[&Track],
    names: &[String],
    series: &Series,
    gpu_mib: Option<u64>,
    notes: &mut Vec<String>,
) -> [FleetSum; 3] {
    let unmeasured = |has: &dyn Fn(&Track) -> bool| -> Vec<String> {
        work.iter()
            .zip(names)
            .filter(|(t, _)| !has(t))
            .map(|(_, n)| n.clone())
            .collect()
    };
    let (busy, busy_n) = &series.busy;
    let (compute, compute_n) = &series.compute;
    let (memory, memory_n) = &series.memory;
    let busy_claim = FleetSum {
        summary: summarize(busy.iter().flatten().copied().collect(), units_to_ratio),
        workloads: *busy_n,
        unmeasured: unmeasured(&has_busy),
    };
    let compute_demand = FleetSum {
        summary: summarize_weighted(
            series.compute_weighted(),
            compute.iter().flatten().count(),
            units_to_ratio,
        ),
        workloads: *compute_n,
        unmeasured: unmeasured(&Track::has_saturation),
    };
    let memory_demand = FleetSum {
        summary: gpu_mib.and_then(|g| {
            summarize(memory.iter().flatten().copied().collect(), |m| {
                m as f64 / g as f64
            })
        }),
        workloads: *memory_n,
        unmeasured: unmeasured(&Track::has_memory),
    };
    for (what, d) in [
        ("saturation (compute demand)", &compute_demand),
        ("memory", &memory_demand),
    ] {
        if !d.unmeasured.is_empty() {
            notes.push(format!(
                "{what} was never measured for {}: unknown, not counted as 0 and not packed",
                d.unmeasured.join(", ")
            ));
        }
    }
    [busy_claim, compute_demand, memory_demand]
}

/// The pooled lower bound from the summed saturation (ratio units, over `limit`) and the
/// summed memory (MiB, over one GPU's `gpu_mib`); `None` when neither was measured. Memory
/// binds on a tie.
fn pooled_bound(
    mut compute: Vec<(u64, u64)>,
    memory: &[Option<u64>],
    gpu_mib: Option<u64>,
    limit: u32,
) -> Option<PooledBound> {
    let compute_p99_units = weighted_rank(&mut compute, 0.99);
    let memory_peak_mib = memory.iter().flatten().copied().max();
    let compute_term =
        compute_p99_units.map(|u| (u as f64 / f64::from(limit), ceil_div(u, u64::from(limit))));
    let memory_term = match (memory_peak_mib, gpu_mib) {
        (Some(m), Some(g)) => Some((m as f64 / g as f64, ceil_div(m, g))),
        _ => None,
    };
    match (compute_term, memory_term) {
        (None, None) => None,
        (c, m) => {
            let cg = c.map_or(0, |x| x.1);
            let mg = m.map_or(0, |x| x.1);
            Some(PooledBound {
                gpus: cg.max(mg),
                compute_gpus: c.map(|x| x.0),
                memory_gpus: m.map(|x| x.0),
                binding: if m.is_some() && (mg >= cg || c.is_none()) {
                    Binding::Memory
                } else {
                    Binding::Compute
                },
            })
        }
    }
}

/// The first-fit-decreasing packing onto GPUs of `gpu_mib` MiB, and its co-location
/// groups; no packing (and a note saying why) without one GPU's memory or without a
/// workload whose demands were both measured.
fn packing(
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

/// The work one workload spends at most looking for the first GPU it fits, in full checks:
/// each worth `2 · steps` steps of [`Bin::fits`] (memory, then saturation; either may stop
/// early) and one pass over the
/// [`BinIndex`] (`RULES · (⌈log₂ GPUs⌉ + 1)` look-ups), before [`first_fit`] stops looking.
const MAX_BIN_TRIES: usize = 64;
/// The work, in full checks, one workload then spends at most on the GPUs after those that
/// seem to have room for it (see [`Keys::room`]).
const MAX_ROOM_TRIES: usize = 16;
/// Saturation rules of the index: rule `i` takes a bin's summed saturation at
/// `i · steps / SAT_RULES` steps from its bottom (see [`Query::of`]).
const SAT_RULES: usize = 4;
/// Keys that rule a bin out: memory, then the saturation rules.
const RULES: usize = 1 + SAT_RULES;

/// What one workload may spend finding its GPU, in full checks (see [`MAX_BIN_TRIES`]).
#[derive(Debug, Clone, Copy)]
struct Budget {
    /// On the first-fit search, on the GPUs not ruled out.
    tries: usize,
    /// After it, on the GPUs that seem to have room.
    room: usize,
}

const BUDGET: Budget = Budget {
    tries: MAX_BIN_TRIES,
    room: MAX_ROOM_TRIES,
};

fn to_i64(x: u64) -> i64 {
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
fn top<T: Ord + Copy>(v: &mut [T], r: usize) -> Option<T> {
    let r = r.min(v.len());
    nth_largest(v, r)
}

/// The ranks the index compares, from the window's sub-steps.
#[derive(Debug, Clone, Copy)]
struct Ranks {
    /// `G`: the most over-limit weight any bin may have (`max over k ≤ the window's weight
    /// of slack(k)`).
    slack: u64,
    /// `G` in sub-steps: the most over-limit sub-steps any bin may have (each weighs at
    /// least the grid's least weight).
    slack_steps: usize,
    /// Per saturation rule, `a`: a bin's summed saturation is taken at its `(a + 1)`-th
    /// smallest sub-step, an unknown one ranking below every value.
    below: [usize; SAT_RULES],
    /// The rank from the top at which saturations are taken for room.
    room: usize,
    /// The sub-steps of a step.
    grid: Grid,
}

impl Ranks {
    fn of(steps: usize, grid: Grid) -> Ranks {
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
struct Keys {
    /// The least summed memory at any step (MiB); then per saturation rule the summed
    /// saturation at its `(a + 1)`-th smallest step (a step with no live member counting 0),
    /// or `i64::MIN` (never ruled out on it) when that step is unknown: more than `a` are.
    rule: [i64; RULES],
    /// The largest summed memory (`max_mem`, MiB), and the summed saturation at rank
    /// `room` from the top (0 where no member is live).
    room: [i64; 2],
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
struct Trees<const K: usize>([MinTree; K]);

impl<const K: usize> Trees<K> {
    fn new() -> Trees<K> {
        Trees(std::array::from_fn(|_| MinTree::new()))
    }

    fn set(&mut self, b: usize, keys: [i64; K]) {
        for (t, k) in self.0.iter_mut().zip(keys) {
            t.set(b, k);
        }
    }

    fn admits(&self, b: usize, bounds: &[i64; K]) -> bool {
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
struct Query {
    /// `cap − peak`, then per saturation rule `limit − x`, `x` the workload's saturation at
    /// the rank that makes the rule a necessary condition (`i64::MAX`: no such rank).
    rule: [i64; RULES],
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
    fn of(
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
struct BinIndex {
    rule: Trees<RULES>,
    room: Trees<2>,
}

impl BinIndex {
    fn set(&mut self, b: usize, k: Keys) {
        self.rule.set(b, k.rule);
        self.room.set(b, k.room);
    }
}

/// The GPU item `it` (track `t`, bounds `q`) goes on, with its known and over-limit counts
/// there; `None` for a GPU of its own. First fit among the bins the index does not rule out,
/// within `budget.tries`; past those, first fit among the next that seem to have room,
/// within `budget.room`.
fn place(
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

/// First-fit decreasing: sorts `items` by their larger share (of `cap` MiB or of `limit`),
/// ties by name, and puts each on the first GPU it fits, or on a GPU of its own.
///
/// **Bounded.** A [`BinIndex`] over the GPUs skips, in `O(log GPUs)` a pass, those that
/// certainly cannot take the workload (memory above `cap − peak` at every step, or summed
/// saturation too high where the workload's is high: see [`Query::of`]); [`Bin::fits`]
/// stays the final word on the others, and stops early once they certainly fail. Each
/// workload spends on this first-fit search at most the work of [`MAX_BIN_TRIES`] full
/// checks (`2 · steps` steps of checks and one pass over the index each); past that, at most
/// that of [`MAX_ROOM_TRIES`] on the next GPUs that seem to have room for it (`max_mem + peak
/// ≤ cap`, and high-rank saturations that add up within the limit), in order; then it takes
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
fn excluded_gpus(work: &[&Track], names: &[String], excluded: &[Excluded]) -> u64 {
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
/// interleaved when only the time-aligned sum lets them share.
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
            let sum_p99: u64 = bin.members.iter().filter_map(|&m| p99_of[m]).sum();
            let p99 = bin.p99();
            colocation.push(Colocation {
                workloads: bin.members.iter().map(|&m| names[m].clone()).collect(),
                gpus_held: held.len() as u64,
                gpus_freed: held.len() as u64 - 1,
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

/// The workloads idle more than `cfg.idle_share` of their measured steps (a step is idle
/// when the busy flag and effective compute, each where measured, are under their
/// thresholds), most idle hours first; and those whose idleness was never measured.
fn idle_capacity(
    work: &[&Track],
    names: &[String],
    cfg: &FleetConfig,
    hours_per_step: f64,
) -> Idle {
    let busy_max = ratio_units(Some(cfg.idle_busy_below)).unwrap_or(0);
    let ecf_max = ratio_units(Some(cfg.idle_compute_below)).unwrap_or(0);
    let mut idle_list = Vec::new();
    let mut idle_unmeasured = Vec::new();
    let (mut total, mut not_listed) = (
        0.0,
        NotListed {
            workloads: 0,
            gpu_hours: 0.0,
        },
    );
    for (t, n) in work.iter().zip(names) {
        let (mut measured, mut idle, mut held) = (0usize, 0usize, 0usize);
        for p in &t.points {
            if p.any() {
                held += 1;
            }
            let (b, e) = (p.busy(), p.ecf());
            if b.is_none() && e.is_none() {
                continue;
            }
            measured += 1;
            if b.is_none_or(|b| b < busy_max) && e.is_none_or(|e| e < ecf_max) {
                idle += 1;
            }
        }
        if measured == 0 {
            idle_unmeasured.push(n.clone());
            continue;
        }
        let share = idle as f64 / measured as f64;
        total += idle as f64 * hours_per_step;
        if share <= cfg.idle_share && idle > 0 {
            not_listed.workloads += 1;
            not_listed.gpu_hours += idle as f64 * hours_per_step;
        }
        if share > cfg.idle_share {
            idle_list.push(IdleWorkload {
                workload: n.clone(),
                idle_share: share,
                held_hours: held as f64 * hours_per_step,
                measured_hours: measured as f64 * hours_per_step,
                idle_gpu_hours: idle as f64 * hours_per_step,
            });
        }
    }
    idle_list.sort_by(|a, b| {
        b.idle_gpu_hours
            .total_cmp(&a.idle_gpu_hours)
            .then_with(|| a.workload.cmp(&b.workload))
    });
    Idle {
        idle_share_above: cfg.idle_share,
        busy_below: cfg.idle_busy_below,
        effective_compute_below: cfg.idle_compute_below,
        idle_gpu_hours: total,
        listed_idle_gpu_hours: idle_list.iter().map(|w| w.idle_gpu_hours).sum(),
        not_listed,
        workloads: idle_list,
        unmeasured: idle_unmeasured,
    }
}

/// Percentiles of a GPU count over the steps at which it is known.
fn gpu_summary(counts: &[Option<u32>]) -> Option<Summary> {
    summarize(
        counts.iter().flatten().map(|&x| u64::from(x)).collect(),
        |x| x as f64,
    )
}

/// The savings of packing `p` against the peak of `baseline` (allocated GPUs for pods,
/// GPUs reporting otherwise) over `hours` with data; `None` without a baseline. A price
/// counts only when finite and not negative.
fn savings(
    p: &Packing,
    unit: &str,
    baseline: Option<Summary>,
    hours: f64,
    cost_per_gpu_hour: Option<f64>,
) -> Option<Savings> {
    let baseline = baseline.map(|s| s.max as u64)?;
    let freed = baseline.saturating_sub(p.gpus);
    let gpu_hours = freed as f64 * hours;
    let cost = cost_per_gpu_hour.filter(|c| c.is_finite() && *c >= 0.0);
    let mut assumptions = vec![
        format!("the fleet is re-packed as proposed for the whole window ({hours:.2} h with data)"),
        format!("baseline: the peak of {} over the window", if unit == "pod" { "allocated GPUs" } else { "GPUs reporting (allocation unknown)" }),
        "each workload keeps its peak memory and its measured saturation; work adds linearly on a shared GPU".to_owned(),
        "workloads with unmeasured demand keep the GPUs they held".to_owned(),
    ];
    if cost.is_none() {
        assumptions.push("no --cost-per-gpu-hour: GPU-hours only".to_owned());
    }
    Some(Savings {
        estimate: true,
        baseline_gpus: baseline,
        needed_gpus: p.gpus,
        gpus_freed: freed,
        hours,
        gpu_hours,
        cost_per_gpu_hour: cost,
        cost: cost.map(|c| c * gpu_hours),
        assumptions,
    })
}

fn method_text(h: f64) -> Vec<String> {
    let cap = 1.0 - h;
    vec![
        "Percentiles are nearest-rank over the steps at which a series is known; a step at which a live workload's reading is missing is unknown, never 0.".to_owned(),
        "Compute demand: the workloads' roofline saturation max(compute, DRAM activity), summed per step, in GPU-equivalents. Memory demand: their memory used, summed per step, over one GPU's memory. The busy flag's claim is the summed reported utilization, for comparison only.".to_owned(),
        format!("Pooled lower bound: max(ceil(p99 compute demand / {cap:.2}), ceil(peak memory demand)). It assumes work could be spread over GPUs freely, so no packing of whole workloads can use fewer GPUs."),
        format!("Packed: first-fit decreasing onto GPUs of the fleet's model; each workload reserves its peak memory for its lifetime (a hard limit) and the time-aligned summed saturation must stay at or below {cap:.2} at p99. Work is assumed to add linearly on a shared GPU, and interference between co-located workloads is not modelled."),
        "Co-location groups are the packed GPUs holding workloads from two or more GPUs today; interleaved groups share only because their busy periods do not overlap.".to_owned(),
        format!("MIG fit: the smallest profile of the workload's model whose memory holds peak × {:.2}, whose SM share covers p95(busiest pipe) / {cap:.2} and whose memory-slice share covers p95(DRAM) / ({D_MAX} × {cap:.2}); constraints whose counter was not read are not checked and are named.", 1.0 + h),
        format!("Smaller model: a catalog GPU with less memory and less bandwidth than the workload's own whose memory holds p99 memory × {:.2}, whose bandwidth covers p99 DRAM traffic at {D_MAX} × {cap:.2} of its peak and, when measured, whose tensor peak covers p99 busiest-pipe work at {cap:.2}.", 1.0 + h),
        "NVML and DCGM see allocated memory, not needed memory: inference engines pre-allocate their KV cache, so memory figures are upper bounds on need.".to_owned(),
    ]
}

/// How far a workload's peak may exceed a smaller model's capacity, and how long a point
/// of its track lasts.
#[derive(Debug, Clone, Copy)]
struct PeakLimit {
    /// [`FleetConfig::max_peak_over_capacity`].
    max_over: f64,
    /// Seconds per point of the track.
    seconds_per_point: f64,
    /// How a point's time is shared between its bands.
    grid: Grid,
}

/// What model `c` costs the peak of track `t`, which ran on `spec`: the peak, and the
/// longest burst above `c`'s capacity (consecutive points, each counting the share of its
/// time its bands were above: a three-minute burst in an hour's point counts the bands it
/// filled, not the hour).
fn peak_cost(t: &Track, spec: &GpuSpec, c: &GpuSpec, limit: &PeakLimit) -> Option<PeakCost> {
    peak_cost_at(t, c.bf16_dense_tflops / spec.bf16_dense_tflops, limit)
}

/// [`peak_cost`] on a target of capacity `ratio` in the track's own terms (a fraction of a
/// whole GPU of its model).
fn peak_cost_at(t: &Track, ratio: f64, limit: &PeakLimit) -> Option<PeakCost> {
    let peak = t.points.iter().filter_map(|p| p.sat_peak()).max()?;
    let peak = units_to_ratio(u64::from(peak));
    if !(ratio.is_finite() && ratio > 0.0) {
        return None;
    }
    let g = limit.grid;
    let whole: u64 = g.weights[..g.m].iter().sum();
    let (mut longest, mut run) = (0u64, 0u64);
    for &p in &t.points {
        let above: u64 = (0..g.m)
            .filter(|&j| {
                g.value(p, j)
                    .is_some_and(|x| units_to_ratio(u64::from(x)) > ratio)
            })
            .map(|j| g.weights[j])
            .sum();
        run = if above > 0 { run + above } else { 0 };
        longest = longest.max(run);
    }
    let on_target = peak / ratio;
    let burst =
        (longest > 0).then(|| longest as f64 / whole.max(1) as f64 * limit.seconds_per_point);
    Some(PeakCost {
        peak_saturation: peak,
        capacity_ratio: ratio,
        peak_on_target: on_target,
        burst_seconds: burst,
        burst_on_target_seconds: burst.map(|b| b * on_target),
    })
}

/// The smallest catalog model with less memory and bandwidth than the workload's own that
/// covers its p99 demand and whose capacity its peak exceeds by at most `limit.max_over`;
/// else why there is none (naming the cheapest model its peak alone ruled out, and the cost).
fn smaller_gpu(
    t: &Track,
    mem_p99: Option<u64>,
    dram_p99: Option<f64>,
    pipe_p99: Option<f64>,
    h: f64,
    limit: PeakLimit,
) -> (Option<SmallerGpu>, Option<String>) {
    let (spec, m, d) = match (t.spec, mem_p99, dram_p99) {
        _ if t.is_mig => return (None, Some("runs on a MIG instance".to_owned())),
        (None, _, _) => return (None, Some("model not in the catalog".to_owned())),
        (_, None, _) => return (None, Some("memory was not measured".to_owned())),
        (_, _, None) => {
            return (
                None,
                Some("bandwidth was not measured (no DRAM counter)".to_owned()),
            );
        }
        (Some(spec), Some(m), Some(d)) => (spec, m, d),
    };
    let need_mem = f64::from(m as u32) * MIB * (1.0 + h);
    let need_bw = d * spec.bandwidth_bytes_per_sec;
    let need_flops = pipe_p99.map(|c| c * spec.bf16_dense_tflops);
    let mut fits: Vec<&'static GpuSpec> = gpus::CATALOG
        .iter()
        .filter(|c| {
            c.memory_bytes < spec.memory_bytes
                && c.bandwidth_bytes_per_sec < spec.bandwidth_bytes_per_sec
                && c.memory_bytes as f64 >= need_mem
                && c.bandwidth_bytes_per_sec * D_MAX * (1.0 - h) >= need_bw
                && need_flops.is_none_or(|f| c.bf16_dense_tflops * (1.0 - h) >= f)
        })
        .collect();
    fits.sort_by(|a, b| {
        a.bandwidth_bytes_per_sec
            .total_cmp(&b.bandwidth_bytes_per_sec)
            .then(a.memory_bytes.cmp(&b.memory_bytes))
            .then(a.key.cmp(b.key))
    });
    let costed = fits.iter().map(|c| (c, peak_cost(t, spec, c, &limit)));
    let mut withheld = None;
    for (c, cost) in costed {
        if let Some(k) = cost
            && k.peak_on_target > limit.max_over
        {
            withheld.get_or_insert((c, k));
            continue;
        }
        let proposal = SmallerGpu {
            key: c.key,
            name: c.name,
            compute_checked: need_flops.is_some(),
            peak: cost,
        };
        return (Some(proposal), None);
    }
    let note = match withheld {
        Some((c, k)) => withheld_note(c, &k, limit.max_over),
        None => "no smaller catalog model covers its p99 demand".to_owned(),
    };
    (None, Some(note))
}

/// The smallest MIG profile of `spec` that covers `demand` and whose share of the SMs the
/// workload's observed peak exceeds by at most `limit.max_over`, with what it costs the
/// peak; else why there is none (naming the profile its peak alone ruled out).
fn mig_choice(
    t: &Track,
    spec: &GpuSpec,
    demand: Demand,
    h: f64,
    limit: &PeakLimit,
) -> (Option<MigChoice>, Option<String>) {
    let share = |p: &MigProfile| f64::from(p.sms) / f64::from(spec.sms.max(1));
    let choice = |f: rightsizing::MigFit| MigChoice {
        profile: f.profile.name,
        binding: f.binding,
        unmeasured: f.unmeasured(),
        peak: peak_cost_at(t, share(f.profile), limit),
    };
    let Some(first) = rightsizing::mig_fit(spec, &demand, h, D_MAX).map(choice) else {
        return (
            None,
            Some("no MIG profile fits: it needs the whole GPU".to_owned()),
        );
    };
    let Some(k) = first.peak.filter(|k| k.peak_on_target > limit.max_over) else {
        return (Some(first), None);
    };
    // The peak needs a share of at least peak / max_over: ask for it as compute.
    let need = k.peak_saturation / limit.max_over * (1.0 - sane(h));
    let bumped = Demand {
        compute: Some(demand.compute.map_or(need, |c| c.max(need))),
        ..demand
    };
    let why = format!(
        "MIG {} covers its p99 demand, but its peak saturation {:.2} is {:.2}× the {}'s capacity ({:.3} of the GPU), above the {:.2}× allowed{}",
        first.profile,
        k.peak_saturation,
        k.peak_on_target,
        first.profile,
        k.capacity_ratio,
        limit.max_over,
        match (k.burst_seconds, k.burst_on_target_seconds) {
            (Some(b), Some(on)) => format!(": its longest burst, {b:.0} s, would run {on:.0} s there"),
            _ => String::new(),
        }
    );
    match rightsizing::mig_fit(spec, &bumped, h, D_MAX).map(choice) {
        Some(c) if c.profile != first.profile => (Some(c), Some(why)),
        _ => (None, Some(format!("{why}; no larger profile fits"))),
    }
}

/// Why a model that covers the p99 demand is not proposed: its peak would exceed it.
fn withheld_note(c: &GpuSpec, k: &PeakCost, max_over: f64) -> String {
    let burst = match (k.burst_seconds, k.burst_on_target_seconds) {
        (Some(b), Some(on)) => format!(": its longest burst, {b:.0} s, would run {on:.0} s there"),
        _ => String::new(),
    };
    format!(
        "the {} covers its p99 demand, but its peak saturation {:.2} is {:.2}× the {}'s capacity ({:.3} of its own GPU), above the {max_over:.2}× allowed{burst}",
        c.name, k.peak_saturation, k.peak_on_target, c.name, k.capacity_ratio
    )
}

/// Right-size one workload.
fn right_size(t: &Track, name: &str, h: f64, limit: PeakLimit) -> RightSizing {
    let mem_peak = t.points.iter().filter_map(|p| p.mem()).max();
    let mem_p99 = track_quantile(t, 0.99, |p| p.mem().map(u64::from));
    let sat_p99 = sizing_quantile(t, 0.99, limit.grid);
    let pipe_p95 = track_quantile(t, 0.95, |p| p.pipe().map(u64::from)).map(units_to_ratio);
    let dram_p95 = track_quantile(t, 0.95, |p| p.dram().map(u64::from)).map(units_to_ratio);
    let pipe_p99 = track_quantile(t, 0.99, |p| p.pipe().map(u64::from)).map(units_to_ratio);
    let dram_p99 = track_quantile(t, 0.99, |p| p.dram().map(u64::from)).map(units_to_ratio);
    let sat_known = t.points.iter().filter(|p| p.sat().is_some()).count();
    let total = t.memory_total_mib.map(|m| f64::from(m) * MIB);
    let peak_b = mem_peak.map(|m| f64::from(m) * MIB);
    let (mig_fit, mig_fit_note) = match (t.spec, peak_b) {
        (None, _) => (None, Some("model not in the catalog".to_owned())),
        (_, None) => (None, Some("memory was not measured".to_owned())),
        (Some(spec), Some(peak)) if !spec.mig.is_empty() => {
            let demand = Demand {
                memory_bytes: peak,
                compute: pipe_p95,
                bandwidth: dram_p95,
            };
            let demand = match (t.is_mig, t.mig) {
                (true, Some(p)) => Some(demand.of_instance(spec, p)),
                (true, None) => None,
                (false, _) => Some(demand),
            };
            match demand {
                None => (None, Some("MIG instance of an unknown profile".to_owned())),
                Some(d) => mig_choice(t, spec, d, h, &limit),
            }
        }
        (Some(spec), _) => (None, Some(format!("the {} has no MIG", spec.name))),
    };
    let (smaller_gpu, smaller_gpu_note) = smaller_gpu(t, mem_p99, dram_p99, pipe_p99, h, limit);
    RightSizing {
        workload: name.to_owned(),
        gpu: t.gpu.clone(),
        model: t.model.clone(),
        mig_profile: t.mig.map(|p| p.name),
        simulated: t.simulated,
        memory_peak_bytes: peak_b,
        memory_p99_bytes: mem_p99.map(|m| m as f64 * MIB),
        memory_total_bytes: total,
        memory_peak_fraction: match (peak_b, total) {
            (Some(p), Some(t)) if t > 0.0 => Some(p / t),
            _ => None,
        },
        saturation_p99: sat_p99.map(units_to_ratio),
        saturation_measured_share: if t.points.is_empty() {
            0.0
        } else {
            sat_known as f64 / t.points.len() as f64
        },
        mig_fit,
        mig_fit_note,
        smaller_gpu,
        smaller_gpu_note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = 1_073_741_824.0;

    fn h100() -> &'static GpuSpec {
        gpus::by_key("h100-sxm").unwrap()
    }

    /// A pod on its own H100 of 80 GiB, with `f(step)` = (saturation, busy, memory GiB).
    fn pod(
        name: &str,
        gpu: &str,
        steps: std::ops::Range<usize>,
        f: impl Fn(usize) -> (Option<f64>, Option<f64>, Option<f64>),
    ) -> Track {
        let mut t = Track::new(Some(name.to_owned()), gpu.to_owned());
        t.spec = Some(h100());
        t.model = Some("NVIDIA H100 80GB HBM3".to_owned());
        t.memory_total_mib = Some(80 * 1024);
        for s in steps {
            let (sat, busy, mem) = f(s);
            t.record(
                s,
                Point::new(sat, busy, sat, mem.map(|g| g * GIB))
                    .with_pipes(sat, sat.map(|x| x / 2.0)),
            );
        }
        t
    }

    /// A sample of one H100 at `ms`: tensor activity `tensor`, DRAM a quarter of it, busy.
    fn tensor_sample(ms: i64, tensor: f64) -> crate::model::Sample {
        crate::tracker::tests::sample(
            ms,
            &[
                (Field::TensorActive, tensor),
                (Field::DramActive, tensor / 4.0),
                (Field::SmClockMhz, h100().f_ref_mhz),
                (Field::ReportedUtil, 1.0),
            ],
        )
    }

    /// The same quantile sample as each band of a step, as a step whose raw samples were
    /// all alike reads; `true` where it was impossible.
    fn every_band(
        t: &mut Track,
        step: usize,
        e: &EntitySample,
        cfg: &DeriveConfig,
        diags: &mut Vec<Diagnostic>,
    ) -> bool {
        (0..BANDS).any(|j| t.observe_peak_sample(step, j, e, cfg, diags))
    }

    /// A coarse step read twice: its means feed the sums of use, its peaks the sizing.
    #[test]
    fn a_steps_peak_sizes_it_while_its_mean_sums_its_use() {
        use crate::tracker::Deriver;
        let sample = tensor_sample;
        let cfg = DeriveConfig::default();
        let mut diags = Vec::new();
        let mut means = Deriver::new(cfg.clone(), Some(300.0));
        let mut t = Track::new(Some("ns/p".into()), "n/gpu 0".into());
        for step in 0..4 {
            let ms = step as i64 * 300_000;
            for w in &means.observe(&sample(ms, 0.2)).windows {
                t.observe(step, w);
            }
            assert!(!every_band(
                &mut t,
                step,
                &sample(ms, 0.8).entities[0],
                &cfg,
                &mut diags
            ));
        }
        let p = t.points()[2];
        assert_eq!(p.sat(), Some(2_000), "the mean: 0.2 of the tensor pipe");
        assert_eq!(p.sat_peak(), Some(8_000), "the step's p99: 0.8");
        assert_eq!(p.pipe(), Some(8_000));
        assert_eq!(p.dram(), Some(2_000));
        // The sizing takes the peak: p99 saturation 0.8, not 0.2.
        let limit = PeakLimit {
            max_over: 1.0,
            seconds_per_point: 300.0,
            grid: Grid::of(None),
        };
        let r = right_size(&t, "ns/p", 0.2, limit);
        assert_eq!(r.saturation_p99, Some(0.8));
        // A peak never lowers a point, and a step without a mean stays unknown.
        let idle = sample(1_200_000, 0.0);
        assert!(!every_band(&mut t, 3, &idle.entities[0], &cfg, &mut diags));
        assert!(!every_band(&mut t, 9, &idle.entities[0], &cfg, &mut diags));
        assert_eq!(t.points()[3].sat_peak(), Some(8_000));
        assert!(diags.is_empty(), "{diags:?}");
        // A sentinel, or a p99 no fraction can be, is not a peak: the step held an
        // impossible raw sample that its mean averaged in, so the step is unknown.
        for (step, bad) in [(3, 9.223_372_036_854_776e18), (2, 2.89)] {
            let mut blank = sample(step as i64 * 300_000, 0.9);
            blank.entities[0]
                .readings
                .set_value(Field::TensorActive, bad);
            assert!(every_band(
                &mut t,
                step,
                &blank.entities[0],
                &cfg,
                &mut diags
            ));
            assert_eq!(t.points()[step], Point::NONE);
        }
        assert_eq!(diags.len(), 2);
        assert_eq!(t.points()[1].sat_peak(), Some(8_000));
        assert_eq!(t.lifetime_steps(), 4);
    }

    /// Three steps a point: each point's means are over the steps that measured them (an
    /// unmeasured step is not a 0), memory and the sizing's saturation are the highest, and a
    /// summarised step's peak raises its point whether that point is still open or closed.
    #[test]
    fn steps_combined_into_points_keep_means_over_what_was_measured_and_the_peaks() {
        let gib = 1_073_741_824.0;
        let p =
            |sat: f64, mem: f64| Point::new(Some(sat), Some(1.0), Some(sat / 2.0), Some(mem * gib));
        let mut t = Track::new(Some("ns/p".into()), "n/gpu 0".into()).with_steps_per_point(3);
        t.record(0, p(0.2, 10.0));
        t.record(1, Point::NONE);
        t.record(2, p(0.4, 30.0));
        t.record(3, p(0.5, 20.0));
        // Step 4 not read at all; step 3 again is ignored.
        t.record(3, p(0.9, 70.0));
        t.record(5, p(0.1, 20.0));
        t.record(7, p(0.6, 5.0));
        t.finish();
        assert_eq!(t.first_step(), 0);
        assert_eq!(t.lifetime_steps(), 3);
        let pts = t.points();
        assert_eq!(
            pts[0].sat(),
            Some(3_000),
            "the mean of 0.2 and 0.4, not of 0.2, 0, 0.4"
        );
        assert_eq!(pts[0].sat_peak(), Some(4_000));
        assert_eq!(pts[0].ecf(), Some(1_500));
        assert_eq!(pts[0].busy(), Some(10_000));
        assert_eq!(pts[0].mem(), Some(30 * 1024));
        assert_eq!(pts[1].sat(), Some(3_000));
        assert_eq!(pts[1].sat_peak(), Some(5_000));
        assert_eq!(pts[1].mem(), Some(20 * 1024));
        assert_eq!(pts[2].sat(), Some(6_000));
        assert_eq!(pts[2].sat_peak(), Some(6_000));

        // A track that starts later starts at its point; peaks raise open and closed points.
        use crate::tracker::Deriver;
        let sample = tensor_sample;
        let cfg = DeriveConfig::default();
        let mut diags = Vec::new();
        let mut means = Deriver::new(cfg.clone(), Some(60.0));
        let mut t = Track::new(Some("ns/q".into()), "n/gpu 1".into()).with_steps_per_point(2);
        for step in 3..7 {
            for w in &means.observe(&sample(step as i64 * 60_000, 0.2)).windows {
                t.observe(step, w);
            }
        }
        // Points 1 (step 3), 2 (steps 4, 5) closed, 3 (step 6) open.
        assert!(!every_band(
            &mut t,
            4,
            &sample(240_000, 0.8).entities[0],
            &cfg,
            &mut diags
        ));
        assert!(!every_band(
            &mut t,
            6,
            &sample(360_000, 0.7).entities[0],
            &cfg,
            &mut diags
        ));
        let mut bad = sample(180_000, 0.9);
        bad.entities[0].readings.set_value(Field::TensorActive, 2.9);
        assert!(every_band(&mut t, 3, &bad.entities[0], &cfg, &mut diags));
        t.finish();
        assert_eq!(t.first_step(), 1);
        let pts = t.points();
        assert_eq!(pts.len(), 3);
        assert_eq!(
            pts[0],
            Point::NONE,
            "an impossible peak: the point is unknown"
        );
        assert_eq!(
            (pts[1].sat(), pts[1].sat_peak()),
            (Some(2_000), Some(8_000))
        );
        assert_eq!(
            (pts[2].sat(), pts[2].sat_peak()),
            (Some(2_000), Some(7_000))
        );
        assert_eq!(pts[2].pipe(), Some(7_000));
    }

    fn steady(i: usize, steps: usize) -> Track {
        pod(
            &format!("steady/p{i}"),
            &format!("node-a/gpu {i}"),
            0..steps,
            |_| (Some(0.2), Some(0.9), Some(30.0)),
        )
    }

    fn input(tracks: Vec<Track>, steps: usize) -> FleetInput {
        FleetInput {
            step_seconds: 60.0,
            steps,
            tracks,
            held: Default::default(),
            step_bands: None,
        }
    }

    /// Each band's share is the quantiles' difference, the top band at least one raw
    /// sample's (taken from the bands below it), and the shares add up to one step.
    #[test]
    fn step_bands_share_a_step_with_one_sample_in_the_top_band() {
        for (samples, want) in [
            (60.0, [5_000, 4_000, 833, 167]),
            (15.0, [5_000, 4_000, 333, 667]),
            (5.0, [5_000, 3_000, 0, 2_000]),
            (2.0, [5_000, 0, 0, 5_000]),
            (1.0, [0, 0, 0, 10_000]),
            (1_000.0, [5_000, 4_000, 900, 100]),
            (f64::NAN, [0, 0, 0, 10_000]),
        ] {
            let b = StepBands::for_samples(samples);
            assert_eq!(b.weights, want, "{samples} samples a step");
            assert_eq!(b.weights.iter().sum::<u32>(), STEP_WEIGHT_UNITS);
        }
        // Zero shares are not sub-steps of the sizing.
        let g = Grid::of(Some(StepBands::for_samples(5.0)));
        assert_eq!(
            (g.m, &g.band[..3], &g.weights[..3]),
            (3, &[0, 1, 3][..], &[5_000, 3_000, 2_000][..])
        );
        assert_eq!(Grid::of(None).m, 1);
    }

    /// Weighted nearest rank: with unit weights the `⌈q·n⌉`-th smallest; a value holding 1 %
    /// of the weight or less is above the p99 only when more than 1 % is above it.
    #[test]
    fn weighted_ranks() {
        let mut v: Vec<(u64, u64)> = (1..=100).map(|x| (x, 1)).collect();
        assert_eq!(weighted_rank(&mut v, 0.99), Some(99));
        let mut v = vec![(950, 100), (50, 9_900)];
        assert_eq!(weighted_rank(&mut v, 0.99), Some(50));
        let mut v = vec![(950, 101), (50, 9_899)];
        assert_eq!(weighted_rank(&mut v, 0.99), Some(950));
        assert_eq!(weighted_rank(&mut [], 0.99), None);
    }

    /// A pod at 0.05 but for a burst to 0.95 that fills the top two bands of one hour-long
    /// step a day (p99 and max: 10 % of that hour, 6 minutes), beside four at 0.35: sized
    /// in bands it shares a GPU with two of them (its 0.95 over 0.25 % of the day), as its
    /// minutes would; held for the hour (4 % of the day) its p99 would be 0.95 and it
    /// would take a GPU of its own.
    #[test]
    fn a_burst_in_the_top_bands_of_a_coarse_step_weighs_its_share_of_the_step() {
        let steps = 24;
        let bands = StepBands::for_samples(60.0);
        let mut tracks = Vec::new();
        let mut bursty = pod("team/bursty", "n/gpu 9", 0..steps, |_| {
            (Some(0.05), Some(1.0), Some(10.0))
        });
        for j in 0..BANDS {
            let x = if j >= P99_BAND { 9_500 } else { 500 };
            bursty.points[10].bands[j] = x;
        }
        bursty.finish();
        assert_eq!(bursty.points[10].sat_peak(), Some(9_500));
        tracks.push(bursty);
        for i in 0..4 {
            tracks.push(pod(
                &format!("team/s{i}"),
                &format!("n/gpu {i}"),
                0..steps,
                |_| (Some(0.35), Some(1.0), Some(10.0)),
            ));
        }
        let mut fleet = FleetInput {
            step_seconds: 3_600.0,
            step_bands: Some(bands),
            ..input(tracks, steps)
        };
        let r = analyze(&fleet, &FleetConfig::default());
        let a = r
            .rightsizing
            .iter()
            .find(|w| w.workload == "team/bursty")
            .unwrap();
        assert_eq!(a.saturation_p99, Some(0.05));
        assert_eq!(r.sizing.packing.as_ref().map(|p| p.gpus), Some(2));
        assert_eq!(
            r.sizing.pooled_lower_bound.as_ref().map(|b| b.gpus),
            Some(2)
        );
        // The same points, each step one value (its top band held for the hour).
        fleet.step_bands = None;
        let r = analyze(&fleet, &FleetConfig::default());
        let a = r
            .rightsizing
            .iter()
            .find(|w| w.workload == "team/bursty")
            .unwrap();
        assert_eq!(a.saturation_p99, Some(0.95));
        assert_eq!(r.sizing.packing.as_ref().map(|p| p.gpus), Some(3));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let s = summarize((1..=100).collect(), |x| x as f64).unwrap();
        assert_eq!(
            (s.p50, s.p95, s.p99, s.max, s.steps_known),
            (50.0, 95.0, 99.0, 100.0, 100)
        );
        let s = summarize(vec![7], |x| x as f64).unwrap();
        assert_eq!((s.p50, s.p99), (7.0, 7.0));
        assert_eq!(summarize(Vec::new(), |x| x as f64), None);
        // p99 ≤ L with at most ⌊1 % of n⌋ values above it.
        assert!(p99_within(100, 1));
        assert!(!p99_within(100, 2));
        assert!(p99_within(99, 0) && !p99_within(99, 1));
    }

    #[test]
    fn quantizing_is_exact_and_never_invents_a_value() {
        assert_eq!(ratio_units(Some(0.2)), Some(2000));
        assert_eq!(ratio_units(Some(f64::NAN)), None);
        assert_eq!(ratio_units(Some(-0.1)), None);
        assert_eq!(ratio_units(None), None);
        assert_eq!(mib(Some(30.0 * GIB)), Some(30_720));
        assert_eq!(Point::new(None, None, None, None), Point::NONE);
    }

    /// A time-sliced GPU is one device in the sizing, whichever way its history names its
    /// holders: dcgm-exporter writes its series once per holder (two copies), node mode
    /// without pods (its holders in the allocation info). With a sole holder's GPU beside it:
    /// busy claim 2 GPUs, compute 0.5 + 0.2 = 0.7, memory (20 + 10) / 80 = 0.375 GPUs, packed
    /// onto 1 GPU of the 2 allocated, 1 freed. Counted per holder, the shared GPU read 1.7
    /// compute and 3 busy GPUs.
    #[test]
    fn a_time_sliced_gpu_is_sized_once_however_its_holders_are_written() {
        let steps = 60;
        let shared = |name: &str| {
            pod(name, "n/gpu 0", 0..steps, |_| {
                (Some(0.5), Some(1.0), Some(20.0))
            })
        };
        let sole = pod("ns/c", "n/gpu 1", 0..steps, |_| {
            (Some(0.2), Some(1.0), Some(10.0))
        });
        let per_holder = input(vec![shared("ns/a"), shared("ns/b"), sole.clone()], steps);
        let mut node_mode = input(vec![shared("x"), sole], steps);
        node_mode.tracks[0].pod = None;
        node_mode
            .held
            .insert("n/gpu 0".into(), vec!["ns/a".into(), "ns/b".into()]);
        for (how, fleet) in [("per holder", per_holder), ("node mode", node_mode)] {
            let r = analyze(&fleet, &FleetConfig::default());
            let s = &r.sizing;
            assert_eq!(r.workloads, 2, "{how}");
            assert!(r.gpus_without_pods.is_empty(), "{how}");
            assert_eq!(s.allocated_gpus.unwrap().p99, 2.0, "{how}");
            assert_eq!(s.busy_claim_gpus.summary.unwrap().p99, 2.0, "{how}");
            assert_eq!(s.compute_demand_gpus.summary.unwrap().p99, 0.7, "{how}");
            assert_eq!(s.memory_demand_gpus.summary.unwrap().p99, 0.375, "{how}");
            let p = s.packing.as_ref().unwrap();
            assert_eq!(p.gpus, 1, "{how}");
            let names: Vec<&str> = p.bins[0].workloads.iter().map(String::as_str).collect();
            assert!(names.contains(&"ns/a + ns/b"), "{how}: {names:?}");
            let sv = r.savings.unwrap();
            assert_eq!(
                (sv.baseline_gpus, sv.needed_gpus, sv.gpus_freed),
                (2, 1, 1),
                "{how}"
            );
            assert!(
                r.notes.iter().any(|n| n.contains("sized once each")),
                "{how}"
            );
        }
    }

    /// The issue's example: 8 GPUs of 80 GiB, one pod each at 20 % saturation and 30 GiB.
    #[test]
    fn eight_pods_need_three_pooled_and_four_packed() {
        let steps = 120;
        let r = analyze(
            &input((0..8).map(|i| steady(i, steps)).collect(), steps),
            &FleetConfig {
                cost_per_gpu_hour: Some(2.5),
                ..FleetConfig::default()
            },
        );
        assert_eq!(r.workload_unit, "pod");
        assert_eq!(r.steps_with_data, 120);
        let s = &r.sizing;
        assert_eq!(s.allocated_gpus.unwrap().p99, 8.0);
        assert_eq!(s.busy_claim_gpus.summary.unwrap().p50, 7.2);
        assert_eq!(s.compute_demand_gpus.summary.unwrap().p99, 1.6);
        assert_eq!(s.memory_demand_gpus.summary.unwrap().max, 3.0);
        let pooled = s.pooled_lower_bound.as_ref().unwrap();
        // Compute: 1.6 / 0.8 = 2 GPUs; memory: 240 / 80 = 3 GPUs.
        assert_eq!(pooled.gpus, 3);
        assert_eq!(pooled.compute_gpus, Some(2.0));
        assert_eq!(pooled.memory_gpus, Some(3.0));
        assert_eq!(pooled.binding, Binding::Memory);
        let p = s.packing.as_ref().unwrap();
        // Two per GPU: 60 GiB fits 80, 90 does not.
        assert_eq!((p.packed_gpus, p.gpus, p.excluded_gpus), (4, 4, 0));
        assert!(p.bins.iter().all(|b| b.workloads.len() == 2));
        assert_eq!(p.bins[0].peak_memory_bytes, 60.0 * GIB);
        assert_eq!(p.bins[0].saturation_p99, Some(0.4));
        assert_eq!(r.colocation.len(), 4);
        assert!(
            r.colocation
                .iter()
                .all(|c| c.gpus_freed == 1 && !c.interleaved)
        );
        let sv = r.savings.unwrap();
        assert_eq!((sv.baseline_gpus, sv.needed_gpus, sv.gpus_freed), (8, 4, 4));
        assert_eq!(sv.hours, 2.0);
        assert_eq!(sv.gpu_hours, 8.0);
        assert_eq!(sv.cost, Some(20.0));
        assert!(sv.estimate);
    }

    /// Two pods busy at alternate times: each one's p99 is 0.7, the sum of p99s 1.4 would
    /// refuse them a shared GPU; aligned in time, the sum never exceeds 0.7.
    #[test]
    fn pods_busy_at_alternate_times_share_a_gpu() {
        let steps = 120;
        let busy_a = |s: usize| (s / 30).is_multiple_of(2);
        let a = pod("alt/a", "node-b/gpu 0", 0..steps, |s| {
            (
                Some(if busy_a(s) { 0.7 } else { 0.0 }),
                Some(if busy_a(s) { 1.0 } else { 0.0 }),
                Some(30.0),
            )
        });
        let b = pod("alt/b", "node-b/gpu 1", 0..steps, |s| {
            (
                Some(if busy_a(s) { 0.0 } else { 0.7 }),
                Some(if busy_a(s) { 0.0 } else { 1.0 }),
                Some(30.0),
            )
        });
        let r = analyze(
            &input(vec![a.clone(), b.clone()], steps),
            &FleetConfig::default(),
        );
        let p = r.sizing.packing.as_ref().unwrap();
        assert_eq!(p.gpus, 1);
        assert_eq!(r.sizing.compute_demand_gpus.summary.unwrap().p99, 0.7);
        assert_eq!(r.colocation.len(), 1);
        let c = &r.colocation[0];
        assert_eq!(c.workloads, ["alt/a", "alt/b"]);
        assert_eq!((c.gpus_held, c.gpus_freed), (2, 1));
        assert_eq!(c.sum_of_p99s, 1.4);
        assert_eq!(c.saturation_p99, Some(0.7));
        assert!(c.interleaved);
        // Both idle half of the time: listed above a 0.4 share, with their idle hours.
        let r = analyze(
            &input(vec![a.clone(), b.clone()], steps),
            &FleetConfig {
                idle_share: 0.4,
                ..FleetConfig::default()
            },
        );
        assert_eq!(r.idle.workloads.len(), 2);
        assert_eq!(r.idle.workloads[0].idle_share, 0.5);
        assert_eq!(r.idle.workloads[0].idle_gpu_hours, 1.0);
        assert_eq!(r.idle.workloads[0].held_hours, 2.0);
        assert_eq!(
            (r.idle.idle_gpu_hours, r.idle.listed_idle_gpu_hours),
            (2.0, 2.0)
        );
        // Above a 0.5 share neither is listed, and the total is the same 2 idle GPU-hours
        // (one hour each, from their 120 one-minute steps): the listing says what it left.
        let r = analyze(
            &input(vec![a.clone(), b.clone()], steps),
            &FleetConfig::default(),
        );
        assert!(r.idle.workloads.is_empty());
        assert_eq!(r.idle.idle_gpu_hours, 2.0);
        assert_eq!(r.idle.listed_idle_gpu_hours, 0.0);
        assert_eq!(
            r.idle.not_listed,
            NotListed {
                workloads: 2,
                gpu_hours: 2.0
            }
        );
        // In phase, the same two pods need two GPUs.
        let b2 = pod("alt/a2", "node-b/gpu 0", 0..steps, |s| {
            (Some(if busy_a(s) { 0.0 } else { 0.7 }), None, Some(30.0))
        });
        let r = analyze(&input(vec![b, b2], steps), &FleetConfig::default());
        assert_eq!(r.sizing.packing.unwrap().gpus, 2);
        assert!(r.colocation.is_empty());
    }

    #[test]
    fn unmeasured_demand_is_unknown_and_not_packed() {
        let steps = 10;
        let blind = pod("x/blind", "node-c/gpu 0", 0..steps, |_| {
            (None, Some(0.9), Some(10.0))
        });
        let r = analyze(
            &input(vec![steady(0, steps), blind], steps),
            &FleetConfig::default(),
        );
        let s = &r.sizing;
        assert_eq!(s.compute_demand_gpus.unmeasured, ["x/blind"]);
        assert_eq!(s.compute_demand_gpus.workloads, 1);
        // The blind pod's memory is measured and counted: (30 + 10) / 80.
        assert_eq!(s.memory_demand_gpus.summary.unwrap().max, 0.5);
        let p = s.packing.as_ref().unwrap();
        assert_eq!((p.packed_gpus, p.excluded_gpus, p.gpus), (1, 1, 2));
        assert_eq!(p.excluded[0].workload, "x/blind");
        assert!(p.excluded[0].reason.contains("saturation was not measured"));
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("x/blind") && n.contains("not counted as 0"))
        );
        // Nothing freed: the blind pod keeps its GPU.
        assert_eq!(r.savings.unwrap().gpus_freed, 0);
        let rs = r
            .rightsizing
            .iter()
            .find(|x| x.workload == "x/blind")
            .unwrap();
        assert_eq!(rs.saturation_p99, None);
        assert_eq!(rs.saturation_measured_share, 0.0);
        assert_eq!(
            rs.mig_fit.as_ref().unwrap().unmeasured,
            [Constraint::Compute, Constraint::Bandwidth]
        );
        assert!(rs.smaller_gpu.is_none());
    }

    #[test]
    fn a_gap_is_unknown_and_a_pod_that_did_not_run_adds_nothing() {
        let steps = 10;
        // p0 misses steps 3 and 4 inside its lifetime; p1 runs only from step 5.
        let mut p0 = Track::new(Some("g/p0".into()), "n/gpu 0".into());
        p0.memory_total_mib = Some(81_920);
        for s in (0..10).filter(|s| !(3..5).contains(s)) {
            p0.record(s, Point::new(Some(0.5), None, None, Some(GIB)));
        }
        let mut p1 = Track::new(Some("g/p1".into()), "n/gpu 1".into());
        p1.memory_total_mib = Some(81_920);
        for s in 5..10 {
            p1.record(s, Point::new(Some(0.25), None, None, Some(GIB)));
        }
        let r = analyze(&input(vec![p0, p1], steps), &FleetConfig::default());
        let c = &r.series.compute_demand_gpus;
        assert_eq!(
            &c[..6],
            &[Some(0.5), Some(0.5), Some(0.5), None, None, Some(0.75)]
        );
        let s = r.sizing.compute_demand_gpus.summary.unwrap();
        assert_eq!((s.steps_known, s.p50, s.max), (8, 0.75, 0.75));
        assert_eq!(r.steps_with_data, 8);
        assert!(
            r.notes
                .iter()
                .any(|n| n.starts_with("2 of 10 steps had no data"))
        );
        assert_eq!(r.series.allocated_gpus[3], None);
        assert_eq!(r.series.allocated_gpus[5], Some(2));
    }

    #[test]
    fn gpus_without_pod_labels_are_their_own_workloads() {
        let mut g = Track::new(None, "n/gpu 0".into());
        g.record(0, Point::new(Some(0.3), Some(0.5), None, Some(GIB)));
        let r = analyze(&input(vec![g.clone()], 1), &FleetConfig::default());
        assert_eq!(r.workload_unit, "gpu");
        assert_eq!(r.sizing.allocated_gpus, None);
        assert!(r.notes[0].starts_with("no GPU carried pod labels"));
        // Beside pods, such a GPU is left out of the pod analysis and named.
        let r = analyze(&input(vec![g, steady(0, 1)], 1), &FleetConfig::default());
        assert_eq!(r.workloads, 1);
        assert_eq!(r.gpus_without_pods, ["n/gpu 0"]);
        assert_eq!(r.sizing.gpus_reporting.unwrap().max, 2.0);
        assert_eq!(r.sizing.allocated_gpus.unwrap().max, 1.0);
    }

    /// A pod at 0.05 of an H100 all day but for a 3-minute burst to 0.95 (its p99 is 0.05),
    /// and a pod at a steady 0.05, each with 10 GiB, at 60 s steps. The L4 covers both p99
    /// demands; its dense peak is about 1/8 of the H100's, so the burst's peak is 0.95 ÷
    /// (L4 ÷ H100) of it and would run that many times longer: withheld at the default
    /// factor, proposed with its cost at a permissive one; the steady pod's peak fits.
    #[test]
    fn a_smaller_model_states_what_it_costs_the_peak() {
        let steps = 1440;
        let burst = 600..603;
        let bursting = pod("ml/burst", "n/gpu 0", 0..steps, |s| {
            let sat = if burst.contains(&s) { 0.95 } else { 0.05 };
            (Some(sat), Some(1.0), Some(10.0))
        });
        let steady = pod("ml/steady", "n/gpu 1", 0..steps, |_| {
            (Some(0.05), Some(1.0), Some(10.0))
        });
        let l4 = gpus::by_key("l4").unwrap();
        let ratio = l4.bf16_dense_tflops / h100().bf16_dense_tflops;
        assert!((ratio - 1.0 / 8.0).abs() < 0.01, "about 1/8: {ratio}");
        let tracks = vec![bursting, steady];
        let run = |max_over| {
            let cfg = FleetConfig {
                max_peak_over_capacity: max_over,
                ..FleetConfig::default()
            };
            analyze(&input(tracks.clone(), steps), &cfg).rightsizing
        };

        let r = run(1.0);
        let (b, s) = (&r[0], &r[1]);
        assert_eq!(b.saturation_p99, Some(0.05));
        assert_eq!(b.smaller_gpu, None, "0.95 of an H100 is above an L4");
        let note = b.smaller_gpu_note.as_deref().unwrap();
        assert!(note.starts_with("the L4 covers its p99 demand"), "{note}");
        assert!(note.contains(&format!("{:.2}×", 0.95 / ratio)), "{note}");
        assert!(note.contains("180 s"), "{note}");
        let fit = s.smaller_gpu.as_ref().unwrap();
        assert_eq!(fit.key, "l4");
        let cost = fit.peak.unwrap();
        assert_eq!(cost.peak_saturation, 0.05);
        assert_eq!(cost.capacity_ratio, ratio);
        assert_eq!(cost.peak_on_target, 0.05 / ratio);
        assert!(cost.peak_on_target < 1.0);
        assert_eq!(
            (cost.burst_seconds, cost.burst_on_target_seconds),
            (None, None)
        );

        // A MIG profile too: the smallest that holds 10 GiB with headroom (12 GiB) is
        // 1g.20gb, 16 of the H100's 132 SMs; the steady pod's peak fits it, the burst's is
        // 0.95 ÷ (16/132) = 7.8× it, so the burst is offered the profile its peak fits.
        let one = h100().mig.iter().find(|p| p.name == "1g.20gb").unwrap();
        let share = f64::from(one.sms) / f64::from(h100().sms);
        let m = s.mig_fit.as_ref().unwrap();
        assert_eq!(m.profile, "1g.20gb");
        let k = m.peak.unwrap();
        assert_eq!((k.capacity_ratio, k.peak_on_target), (share, 0.05 / share));
        let m = b.mig_fit.as_ref().unwrap();
        assert_eq!(m.profile, "7g.80gb", "the only profile with the SMs for 0.95");
        assert_eq!(m.peak.unwrap().burst_seconds, None);
        let note = b.mig_fit_note.as_deref().unwrap();
        assert!(note.starts_with("MIG 1g.20gb covers its p99 demand"), "{note}");
        assert!(note.contains(&format!("{:.2}×", 0.95 / share)), "{note}");
        assert!(note.contains("180 s"), "{note}");

        let r = run(10.0);
        let m = r[0].mig_fit.as_ref().unwrap();
        assert_eq!(m.profile, "1g.20gb", "7.8× is within 10×");
        let k = m.peak.unwrap();
        assert_eq!(k.burst_seconds, Some(180.0));
        let on = k.burst_on_target_seconds.unwrap();
        assert!((on - 180.0 * 0.95 / share).abs() < 1e-9, "{on}");
        let fit = r[0].smaller_gpu.as_ref().unwrap();
        assert_eq!(fit.key, "l4");
        let cost = fit.peak.unwrap();
        assert_eq!(cost.peak_saturation, 0.95);
        assert_eq!(cost.peak_on_target, 0.95 / ratio);
        assert_eq!(cost.burst_seconds, Some(180.0));
        let on_l4 = cost.burst_on_target_seconds.unwrap();
        assert_eq!(on_l4, 180.0 * 0.95 / ratio);
        assert!(
            (on_l4 / 180.0 - 8.0).abs() < 0.5,
            "about 8× longer: {on_l4} s"
        );

        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let cfg = FleetConfig {
                max_peak_over_capacity: bad,
                ..FleetConfig::default()
            };
            assert!(cfg.check().is_err(), "{bad}");
        }
        assert_eq!(FleetConfig::default().check(), Ok(()));
    }

    #[test]
    fn right_sizing_names_a_mig_profile_and_a_smaller_model() {
        let steps = 20;
        let notebook = pod("dev/notebook", "n/gpu 1", 0..steps, |_| {
            (Some(0.0), Some(0.0), Some(2.0))
        });
        let r = analyze(
            &input(vec![steady(0, steps), notebook], steps),
            &FleetConfig::default(),
        );
        let s = &r.rightsizing[0];
        assert_eq!(s.workload, "steady/p0");
        assert_eq!(s.memory_peak_bytes, Some(30.0 * GIB));
        assert_eq!(s.memory_peak_fraction, Some(0.375));
        // 30 GiB × 1.2 = 36 GiB needs 3g.40gb (39.5 GiB); SMs 0.2 / 0.8 and DRAM fit it.
        let mig = s.mig_fit.as_ref().unwrap();
        assert_eq!((mig.profile, mig.binding), ("3g.40gb", Constraint::Memory));
        assert!(mig.unmeasured.is_empty());
        // 36 GiB: an L40S (48 GB, 0.864 TB/s ≥ 0.1 × 3.35 / 0.64, 362 TFLOPS ≥ 0.2 × 989 / 0.8).
        assert_eq!(s.smaller_gpu.as_ref().unwrap().key, "l40s");
        let n = &r.rightsizing[1];
        assert_eq!(n.mig_fit.as_ref().unwrap().profile, "1g.10gb");
        assert_eq!(n.smaller_gpu.as_ref().unwrap().name, "L4");
        // The notebook never worked: idle all the time it held its GPU.
        assert_eq!(r.idle.workloads.len(), 1);
        assert_eq!(r.idle.workloads[0].workload, "dev/notebook");
        assert_eq!(r.idle.workloads[0].idle_share, 1.0);
        assert_eq!(r.idle.workloads[0].idle_gpu_hours, 20.0 / 60.0);
    }

    #[test]
    fn a_pod_too_big_to_share_takes_a_gpu_of_its_own() {
        let steps = 5;
        let big = pod("b/big", "n/gpu 0", 0..steps, |_| {
            (Some(0.95), Some(1.0), Some(40.0))
        });
        let r = analyze(
            &input(vec![big, steady(1, steps)], steps),
            &FleetConfig::default(),
        );
        let p = r.sizing.packing.unwrap();
        assert_eq!(p.gpus, 2);
        assert_eq!(p.bins[0].workloads, ["b/big"]);
        // 0.95 + 0.2 over 0.8: pooled compute is ⌈1.15 / 0.8⌉ = 2.
        let pooled = r.sizing.pooled_lower_bound.unwrap();
        assert_eq!((pooled.gpus, pooled.binding), (2, Binding::Compute));
        assert_eq!(pooled.compute_gpus, Some(1.4375));
    }

    /// Pins `analyze` on a small fleet that takes the branches the tests above do not: a
    /// pod on two GPUs, mixed models, one GPU's memory from the catalog, a MIG instance, a
    /// GPU without pod labels, both exclusion reasons, idleness unmeasured, a gap step and
    /// savings without a price.
    #[test]
    fn a_mixed_fleet_takes_every_note() {
        let steps = 5;
        let spec = |t: &mut Track, key| {
            t.spec = gpus::by_key(key);
            t.model = t.spec.map(|s| s.name.to_owned());
        };
        let mut a = Track::new(Some("a/x".into()), "n/gpu 0".into());
        spec(&mut a, "h100-sxm");
        let mut b = Track::new(Some("a/x".into()), "n/gpu 1".into());
        spec(&mut b, "l4");
        let mut blind = Track::new(Some("b/blind".into()), "n/gpu 2".into());
        spec(&mut blind, "h100-sxm");
        let mut nomem = Track::new(Some("b/nomem".into()), "n/gpu 3".into());
        spec(&mut nomem, "h100-sxm");
        nomem.is_mig = true;
        // A MIG instance's total is not one GPU's memory.
        nomem.memory_total_mib = Some(40_000);
        for s in 0..4 {
            a.record(
                s,
                Point::new(Some(0.5), Some(0.9), Some(0.4), Some(10.0 * GIB)),
            );
            b.record(s, Point::new(Some(0.1), Some(0.5), Some(0.1), Some(GIB)));
            blind.record(s, Point::new(None, Some(0.0), None, None));
            nomem.record(s, Point::new(Some(0.2), None, None, None));
        }
        let mut bare = Track::new(None, "m/gpu 0".into());
        bare.record(0, Point::new(Some(0.3), None, None, None));
        let r = analyze(
            &input(vec![a, b, blind, nomem, bare], steps),
            &FleetConfig::default(),
        );
        assert_eq!(
            (r.workload_unit, r.workloads, r.steps_with_data),
            ("pod", 4, 4)
        );
        assert_eq!(r.gpus_without_pods, ["m/gpu 0"]);
        // The catalog's 80 GB, in whole MiB.
        assert_eq!(r.gpu_memory_bytes, Some(76_293.0 * MIB));
        let notes: Vec<&str> = r.notes.iter().map(|n| &n[..24]).collect();
        assert_eq!(
            notes,
            [
                "1 GPU(s) never carried p",
                "the fleet mixes 2 models",
                "no total-memory series f",
                "saturation (compute dema",
                "memory was never measure",
                "1 of 5 steps had no data",
            ]
        );
        assert!(r.notes[4].contains("for b/blind, b/nomem:"));
        let s = &r.sizing;
        assert_eq!(s.allocated_gpus.unwrap().max, 4.0);
        assert_eq!(s.gpus_reporting.unwrap().max, 5.0);
        assert_eq!(s.compute_demand_gpus.summary.unwrap().p99, 0.8);
        assert_eq!(
            (
                s.busy_claim_gpus.workloads,
                s.busy_claim_gpus.unmeasured.len()
            ),
            (3, 1)
        );
        assert_eq!(
            s.memory_demand_gpus.summary.unwrap().max,
            11_264.0 / 76_293.0
        );
        let pooled = s.pooled_lower_bound.as_ref().unwrap();
        assert_eq!(
            (pooled.gpus, pooled.compute_gpus, pooled.binding),
            (1, Some(1.0), Binding::Memory)
        );
        let p = s.packing.as_ref().unwrap();
        assert_eq!((p.packed_gpus, p.excluded_gpus, p.gpus), (1, 2, 3));
        assert_eq!(p.bins[0].workloads, ["a/x on n/gpu 0", "a/x on n/gpu 1"]);
        let reasons: Vec<(&str, &str)> = p
            .excluded
            .iter()
            .map(|e| (e.workload.as_str(), e.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                ("b/blind", "neither saturation nor memory was measured"),
                ("b/nomem", "memory was not measured"),
            ]
        );
        let c = &r.colocation[0];
        assert_eq!((c.gpus_held, c.gpus_freed, c.interleaved), (2, 1, false));
        assert_eq!((c.sum_of_p99s, c.saturation_p99), (0.6, Some(0.6)));
        assert_eq!(r.idle.workloads.len(), 1);
        assert_eq!(r.idle.workloads[0].workload, "b/blind");
        assert_eq!(r.idle.workloads[0].idle_gpu_hours, 4.0 / 60.0);
        assert_eq!(r.idle.unmeasured, ["b/nomem"]);
        assert_eq!(r.rightsizing.len(), 4);
        let sv = r.savings.as_ref().unwrap();
        assert_eq!((sv.baseline_gpus, sv.gpus_freed, sv.cost), (4, 1, None));
        assert_eq!(sv.gpu_hours, 4.0 / 60.0);
        assert_eq!(
            sv.assumptions.last().unwrap(),
            "no --cost-per-gpu-hour: GPU-hours only"
        );
        assert_eq!(r.series.memory_demand_gpus[4], None);
        assert_eq!(r.series.busy_claim_gpus[0], Some(1.4));
    }

    /// Without pod labels, savings count against the GPUs reporting; without one GPU's
    /// memory, or without a workload whose demand was measured, there is no packing.
    #[test]
    fn gpus_pack_against_those_reporting_and_no_packing_says_why() {
        let gpu = |name: &str, p: Point| {
            let mut t = Track::new(None, name.to_owned());
            t.memory_total_mib = Some(81_920);
            for s in 0..3 {
                t.record(s, p);
            }
            t
        };
        let p = Point::new(Some(0.2), Some(0.5), None, Some(GIB));
        let r = analyze(
            &input(vec![gpu("n/gpu 0", p), gpu("n/gpu 1", p)], 3),
            &FleetConfig {
                cost_per_gpu_hour: Some(3.0),
                ..FleetConfig::default()
            },
        );
        assert_eq!(r.gpu_model, None);
        assert_eq!(r.gpu_memory_bytes, Some(80.0 * GIB));
        let sv = r.savings.as_ref().unwrap();
        assert_eq!((sv.baseline_gpus, sv.needed_gpus, sv.gpus_freed), (2, 1, 1));
        assert_eq!((sv.hours, sv.cost), (0.05, Some(0.15000000000000002)));
        assert!(sv.assumptions[1].contains("GPUs reporting (allocation unknown)"));
        // No total memory and no catalog model: one GPU's memory is not known.
        let mut t = gpu("n/gpu 0", p);
        t.memory_total_mib = None;
        let r = analyze(&input(vec![t], 3), &FleetConfig::default());
        assert_eq!(r.sizing.packing, None);
        assert_eq!(r.savings, None);
        assert!(
            r.notes
                .last()
                .unwrap()
                .starts_with("no packing: one GPU's memory")
        );
        assert_eq!(r.sizing.memory_demand_gpus.summary, None);
        assert_eq!(r.sizing.pooled_lower_bound.as_ref().unwrap().gpus, 1);
        // Memory known, but no workload with both demands.
        let blind = Point::new(None, Some(0.5), None, Some(GIB));
        let r = analyze(
            &input(vec![gpu("n/gpu 0", blind)], 3),
            &FleetConfig::default(),
        );
        assert_eq!(r.sizing.packing, None);
        assert_eq!(
            r.notes.last().unwrap(),
            "no packing: no workload had both saturation and memory measured"
        );
        let pooled = r.sizing.pooled_lower_bound.unwrap();
        assert_eq!(
            (pooled.compute_gpus, pooled.binding),
            (None, Binding::Memory)
        );
    }

    /// A seeded fleet on 80 GiB H100s: steady pods at varied saturation, bursty ones, idle
    /// ones, short-lived ones; a few steps missed or with saturation unmeasured, a few pods
    /// too big to share; peaks 5–40 GiB.
    fn random_fleet(seed: u64, n: usize, steps: usize) -> Vec<Track> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|i| {
                let mut t = Track::new(
                    Some(format!("r{seed}/p{i}")),
                    format!("n{}/gpu {}", i / 8, i % 8),
                );
                t.spec = Some(h100());
                t.memory_total_mib = Some(80 * 1024);
                let peak = if i % 97 == 5 {
                    85.0
                } else {
                    rng.random_range(5.0..40.0)
                };
                let level = if i % 89 == 7 {
                    0.95
                } else {
                    rng.random_range(0.0..0.7)
                };
                let kind = rng.random_range(0..5);
                let (start, end) = if kind == 4 {
                    let a = rng.random_range(0..steps);
                    (a, rng.random_range(a + 1..=steps))
                } else {
                    (0, steps)
                };
                let phase = rng.random_range(0..steps);
                for s in start..end {
                    if rng.random_bool(0.03) {
                        continue;
                    }
                    let sat = match kind {
                        1 => Some(if ((s + phase) / 5).is_multiple_of(2) {
                            level + 0.1
                        } else {
                            0.0
                        }),
                        2 => Some(0.001),
                        _ => Some(level * rng.random_range(0.85..1.15)),
                    };
                    let sat = sat.filter(|_| !rng.random_bool(0.02));
                    let mem = if s == start {
                        peak
                    } else {
                        peak * rng.random_range(0.7..1.0)
                    };
                    t.record(s, Point::new(sat, Some(0.5), None, Some(mem * GIB)));
                }
                t
            })
            .collect()
    }

    const CAP: u64 = 80 * 1024;
    const LIMIT: u32 = 8_000;

    /// The first-fit decreasing of before the index: every bin tried in order. On the way,
    /// checks that the index never rules out a bin that takes the workload, and that the
    /// check stopping early answers as the whole check does.
    fn first_fit_exhaustive(tracks: &[Track], steps: usize, grid: Grid) -> Vec<Vec<usize>> {
        let work: Vec<&Track> = tracks.iter().collect();
        let names = names(&work);
        let (mut items, _) = packing_items(&work, &names, grid);
        sort_items(&names, &mut items, CAP, LIMIT);
        let ranks = Ranks::of(steps, grid);
        let mut bins: Vec<Bin> = Vec::new();
        let mut index = BinIndex {
            rule: Trees::new(),
            room: Trees::new(),
        };
        let mut scratch = Vec::new();
        for it in &items {
            let t = work[it.track];
            let q = Query::of(t, it, CAP, LIMIT, &ranks, steps, &mut scratch);
            let mut placed = None;
            for (b, bin) in bins.iter().enumerate() {
                let whole = bin.fits(t, it, (CAP, LIMIT, u64::MAX), &mut 0);
                let early = bin.fits(t, it, (CAP, LIMIT, ranks.slack), &mut 0);
                assert_eq!(whole, early);
                if whole.is_some() {
                    assert!(
                        index.rule.admits(b, &q.rule),
                        "{} ruled out of {b}",
                        names[it.track]
                    );
                    placed = placed.or(whole.map(|c| (b, c)));
                }
            }
            let b = join_or_open(&mut bins, placed, t, it, (steps, grid), LIMIT);
            index.set(b, bins[b].keys(&ranks, &mut scratch));
        }
        bins.into_iter().map(|b| b.members).collect()
    }

    /// The bounded first-fit decreasing's bins (track indices), and the packable tracks.
    fn first_fit_bounded(
        tracks: &[Track],
        steps: usize,
        budget: Budget,
        grid: Grid,
    ) -> (Vec<Vec<usize>>, Vec<usize>) {
        let work: Vec<&Track> = tracks.iter().collect();
        let names = names(&work);
        let (mut items, _) = packing_items(&work, &names, grid);
        let bins = first_fit_within(&work, &names, &mut items, (CAP, LIMIT, steps, grid), budget);
        let packable = items.iter().map(|it| it.track).collect();
        (bins.into_iter().map(|b| b.members).collect(), packable)
    }

    /// Checks from the tracks alone that every GPU shared by two or more workloads holds
    /// them (each reserving its peak memory over its lifetime, never over the GPU's memory
    /// unless only one is live; summed saturation, unknown where a live one's is, at most
    /// the limit at p99), and that every packable workload is on exactly one GPU.
    fn assert_valid(tracks: &[Track], steps: usize, bins: &[Vec<usize>], packable: &[usize]) {
        let mut placed: Vec<usize> = bins.iter().flatten().copied().collect();
        placed.sort_unstable();
        let mut want = packable.to_vec();
        want.sort_unstable();
        assert_eq!(placed, want, "every packable workload placed exactly once");
        for members in bins.iter().filter(|m| m.len() >= 2) {
            let mut sums = Vec::new();
            for s in 0..steps {
                let live: Vec<&Track> = members
                    .iter()
                    .map(|&m| &tracks[m])
                    .filter(|t| t.range().contains(&s))
                    .collect();
                let mem: u64 = live
                    .iter()
                    .map(|t| u64::from(t.points.iter().filter_map(|p| p.mem()).max().unwrap()))
                    .sum();
                // One workload too big to share may be over on its own.
                assert!(
                    mem <= CAP || live.len() == 1,
                    "{members:?} at step {s}: {mem} MiB"
                );
                let sat: Option<u64> = live
                    .iter()
                    .map(|t| t.points[s - t.first].sat_peak().map(u64::from))
                    .sum();
                if let (false, Some(x)) = (live.is_empty(), sat) {
                    sums.push(x);
                }
            }
            if let Some(p) = summarize(sums, |x| x as f64) {
                assert!(p.p99 <= f64::from(LIMIT), "{members:?}: p99 {}", p.p99);
            }
        }
    }

    #[test]
    fn bounded_first_fit_is_first_fit_while_the_packing_is_small() {
        for seed in 0..24 {
            let steps = [20, 50, 150][seed as usize % 3];
            let tracks = random_fleet(seed, 30 + seed as usize * 3, steps);
            let exhaustive = first_fit_exhaustive(&tracks, steps, Grid::of(None));
            assert!(
                exhaustive.len() < MAX_BIN_TRIES,
                "seed {seed}: a small packing"
            );
            let (bounded, packable) = first_fit_bounded(&tracks, steps, BUDGET, Grid::of(None));
            assert_eq!(bounded, exhaustive, "seed {seed}");
            assert_valid(&tracks, steps, &bounded, &packable);
        }
    }

    /// With no bound on the work, the index's skips alone leave the packing as it was, on a
    /// packing of many more GPUs than the budget's checks.
    #[test]
    fn the_index_never_rules_out_a_gpu_that_fits() {
        let unbounded = Budget {
            tries: usize::MAX,
            room: 0,
        };
        for (seed, steps) in [(100, 120), (101, 40)] {
            let tracks = random_fleet(seed, 400, steps);
            let exhaustive = first_fit_exhaustive(&tracks, steps, Grid::of(None));
            assert!(exhaustive.len() > 2 * MAX_BIN_TRIES);
            let (bounded, _) = first_fit_bounded(&tracks, steps, unbounded, Grid::of(None));
            assert_eq!(bounded, exhaustive, "seed {seed}");
        }
        // And in the bands of coarse steps: each step's bands spread below and above its
        // value (p50 lower, the max higher), weighted as a step of 15 samples.
        let grid = Grid::of(Some(StepBands::for_samples(15.0)));
        let mut tracks = random_fleet(102, 400, 60);
        for t in &mut tracks {
            for (k, p) in t.points.iter_mut().enumerate() {
                if let Some(x) = p.sat() {
                    let spread = [
                        x / 2,
                        x,
                        x.saturating_add(1_500),
                        x.saturating_add(4_000 + (k as u16 % 7) * 500),
                    ];
                    p.bands = spread.map(|b| b.min(NO_RATIO - 1));
                }
            }
        }
        let exhaustive = first_fit_exhaustive(&tracks, 60, grid);
        let (bounded, _) = first_fit_bounded(&tracks, 60, unbounded, grid);
        assert_eq!(bounded, exhaustive, "in bands");
    }

    /// 3 000 workloads × 50 steps within the default budget: a valid packing.
    #[test]
    fn a_large_fleet_packs_validly_within_the_budget() {
        let steps = 50;
        let tracks = random_fleet(7, 3_000, steps);
        let (bins, packable) = first_fit_bounded(&tracks, steps, BUDGET, Grid::of(None));
        assert!(packable.len() > 2_990);
        assert_valid(&tracks, steps, &bins, &packable);
        // Shared GPUs, not one per workload.
        assert!(bins.len() < 1_500, "{} GPUs", bins.len());
        // And the same through `analyze`.
        let r = analyze(&input(tracks, steps), &FleetConfig::default());
        let p = r.sizing.packing.unwrap();
        assert_eq!(p.packed_gpus, bins.len() as u64);
        assert_eq!(p.excluded.len(), 3_000 - packable.len());
    }

    /// However small the budget, the packing is valid: the check has the final word.
    #[test]
    fn a_tiny_budget_still_packs_validly() {
        let steps = 30;
        let tracks = random_fleet(3, 500, steps);
        let exhaustive = first_fit_exhaustive(&tracks, steps, Grid::of(None)).len();
        for budget in [
            Budget { tries: 0, room: 0 },
            Budget { tries: 1, room: 0 },
            Budget { tries: 0, room: 1 },
            Budget { tries: 2, room: 2 },
        ] {
            let (bins, packable) = first_fit_bounded(&tracks, steps, budget, Grid::of(None));
            assert_valid(&tracks, steps, &bins, &packable);
            assert!(bins.len() >= exhaustive / 2, "{budget:?}: {}", bins.len());
        }
    }

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

    /// A GPU read by two workloads at once counts once; a step at which nothing was read
    /// counts nothing.
    #[test]
    fn a_gpu_read_by_two_workloads_counts_once() {
        let p = Point::new(Some(0.1), None, None, Some(GIB));
        let mut a = Track::new(Some("x/a".into()), "n/gpu 0".into());
        let mut b = Track::new(Some("x/b".into()), "n/gpu 0".into());
        let mut c = Track::new(Some("x/c".into()), "n/gpu 1".into());
        for s in 0..4 {
            a.record(s, p);
            b.record(s + 2, if s == 1 { Point::NONE } else { p });
            c.record(s + 1, p);
        }
        let counts = gpu_count(&[&a, &c, &b], 6);
        assert_eq!(
            counts,
            [Some(1), Some(2), Some(2), Some(2), Some(2), Some(1)]
        );
        assert_eq!(gpu_count(&[], 2), [None, None]);
    }
}
