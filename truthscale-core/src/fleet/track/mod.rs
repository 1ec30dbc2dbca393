//! Tracks: one workload's readings quantized onto the report's steps ([`Point`], [`Track`]),
//! the bands of a coarse step ([`StepBands`]) and the grid the sizing reads them on.

use crate::derive::{DeriveConfig, WindowContext, WindowMetrics};
use crate::diag::Diagnostic;
use crate::gpus::{GpuSpec, MigProfile};
use crate::health::Health;
use crate::model::{EntitySample, Field, Reading, Readings};
use crate::tracker::EntityWindow;
use std::collections::BTreeSet;

mod bands;
mod combine;
pub use bands::{BANDS, P99_BAND, STEP_QUANTILES, STEP_WEIGHT_UNITS, StepBands};
use combine::Combine;

/// Ratio units per 1.0: ratios are stored as integers of 10⁻⁴.
pub const RATIO_UNITS: u32 = 10_000;
pub(super) const NO_RATIO: u16 = u16::MAX;
const NO_MIB: u32 = u32::MAX;
/// No memory at a step, in a point's 24 bits of MiB.
const NO_POINT_MIB: u32 = (1 << 24) - 1;
const NO_POWER: u16 = u16::MAX;
// A sanitized reading fits a point: memory in 24 bits of MiB (16 TiB), power in 16 bits of
// deciwatts (6 553 W); the largest power a reading may have is the bound times a limit
// reading, itself at most the generic bound.
const _: () = assert!(crate::derive::GENERIC_MAX_MEMORY_BYTES / MIB < NO_POINT_MIB as f64);
const _: () = assert!(
    crate::derive::POWER_BOUND_FACTOR * crate::derive::GENERIC_MAX_POWER_WATTS * 10.0
        < NO_POWER as f64
);
pub(super) const MIB: f64 = 1_048_576.0;

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

/// MiB as a point holds them: 24 bits, [`NO_POINT_MIB`] for none (the largest sanitized
/// reading, 4 TiB, is well inside).
fn point_mib(mib: Option<u32>) -> u32 {
    mib.map_or(NO_POINT_MIB, |m| m.min(NO_POINT_MIB - 1))
}

/// A point's memory (24 bits of MiB) and health rank in one word.
const fn pack(mib: u32, health: u8) -> u32 {
    (mib & NO_POINT_MIB) | ((health as u32) << 24)
}

pub(super) fn units_to_ratio(u: u64) -> f64 {
    u as f64 / f64::from(RATIO_UNITS)
}

/// One step of one workload. Each field is optional; an unmeasured one is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    saturation: u16,
    /// The saturation the sizing uses in each band of a coarse step ([`STEP_QUANTILES`]:
    /// the step's quantiles of the raw samples in it): [`NO_RATIO`] where not read (a fine
    /// step's one sample is its every band).
    pub(super) bands: [u16; BANDS],
    busiest_pipe: u16,
    dram: u16,
    busy: u16,
    effective_compute: u16,
    /// The step's memory in MiB, the low 24 bits ([`NO_POINT_MIB`] where not read), and its
    /// health, the high 8 bits: [`NO_HEALTH`] where none of its fields was read, else the
    /// worst window's ([`Health::rank`]). One word for both: a report holds a point per
    /// workload and step (2 000 GPUs × 14 days at 5 minutes: 8 M points), 24 bytes each.
    memory_health: u32,
    /// Mean power over the step, in deciwatts.
    power_dw: u16,
}

/// No health field read at the step.
const NO_HEALTH: u8 = u8::MAX;
const _: () = assert!(std::mem::size_of::<Point>() == 24, "a point is 24 bytes");

impl Point {
    /// A step at which nothing was measured.
    pub const NONE: Point = Point {
        saturation: NO_RATIO,
        bands: [NO_RATIO; BANDS],
        busiest_pipe: NO_RATIO,
        dram: NO_RATIO,
        busy: NO_RATIO,
        effective_compute: NO_RATIO,
        memory_health: pack(NO_POINT_MIB, NO_HEALTH),
        power_dw: NO_POWER,
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
            memory_health: pack(point_mib(mib(memory_bytes)), NO_HEALTH),
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

    /// The same point with the step's mean power in watts (for energy, at 0.1 W).
    #[must_use]
    pub fn with_power(mut self, watts: Option<f64>) -> Point {
        self.power_dw = watts
            .filter(|w| w.is_finite() && *w >= 0.0)
            .map_or(NO_POWER, |w| {
                (w * 10.0).round().min(f64::from(NO_POWER - 1)) as u16
            });
        self
    }

    /// The same point with the step's health (its worst window's), where read.
    #[must_use]
    pub fn with_health(mut self, health: Option<Health>) -> Point {
        self.memory_health = pack(
            self.memory_health & NO_POINT_MIB,
            health.map_or(NO_HEALTH, Health::rank),
        );
        self
    }

    /// The step's health, where read.
    #[must_use]
    pub fn health(self) -> Option<Health> {
        Health::of_rank((self.memory_health >> 24) as u8)
    }

    /// Whether the GPU could take no work at the step: never idle, never used.
    pub(crate) fn unavailable(self) -> bool {
        self.health() == Some(Health::Unavailable)
    }

    /// The step's mean power, in deciwatts.
    pub(crate) fn power_dw(self) -> Option<u32> {
        (self.power_dw != NO_POWER).then_some(u32::from(self.power_dw))
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
        let mib = self.memory_health & NO_POINT_MIB;
        (mib != NO_POINT_MIB).then_some(mib)
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
    /// The share of its GPU a scheduler granted its pod (HAMi's `nvidia.com/gpucores`, KAI's
    /// `gpu-fraction`, …), above 0 up to 1, where the report read one
    /// ([`crate::showback::granted_share`]): the part of the GPU it holds, as the showback
    /// charges it. `None`: the whole GPU (or a MIG instance's profile).
    pub granted: Option<f64>,
    /// Its starved seconds by cause and straggler seconds, from the windows observed.
    pub waits: super::waits::WaitTally,
    pub(super) first: usize,
    pub(super) points: Vec<Point>,
    /// Steps per point: 1, or more for a finer grid ([`Track::with_steps_per_point`]).
    per: usize,
    /// With `per` > 1, the point its steps are being combined into, and its index.
    open: Option<(usize, Combine)>,
    /// With `per` > 1, the last step recorded.
    last: Option<usize>,
    /// The steps a band showed an impossible raw sample in, each counted once.
    impossible: BTreeSet<usize>,
}

/// The point of a step in a [`Track`] ([`Track::point_of`]).
enum PointOf<'a> {
    /// The point being combined.
    Open(&'a mut Combine),
    /// A closed point.
    Closed(&'a mut Point),
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
            granted: None,
            waits: super::waits::WaitTally::default(),
            first: 0,
            points: Vec::new(),
            per: 1,
            open: None,
            last: None,
            impossible: BTreeSet::new(),
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
    /// Whether the two tracks were both present (a point with any reading) at some step:
    /// the same device read at once under both, not one after the other.
    pub(in crate::fleet) fn overlaps(&self, other: &Track) -> bool {
        let present = |t: &Track, s: usize| {
            s.checked_sub(t.first)
                .and_then(|i| t.points.get(i).copied())
                .is_some_and(Point::any)
        };
        let from = self.first.max(other.first);
        let to = (self.first + self.points.len()).min(other.first + other.points.len());
        (from..to).any(|s| present(self, s) && present(other, s))
    }

    /// This track with its points outside `at` (indices on its grid) made blank, or `None`
    /// where no point with a reading is left.
    pub(in crate::fleet) fn only_at(
        &self,
        at: &std::collections::BTreeSet<usize>,
    ) -> Option<Track> {
        let mut t = self.clone();
        for (i, p) in t.points.iter_mut().enumerate() {
            if !at.contains(&(t.first + i)) {
                *p = Point::NONE;
            }
        }
        t.points.iter().any(|p| p.any()).then_some(t)
    }

    pub(super) fn merge_copy(&mut self, other: &Track) {
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
        self.observe_window(step, w, false);
    }

    /// As [`Track::observe`], for a window of a device whose same window another track
    /// counted already (a time-sliced GPU's holders each read the one device): the fleet's
    /// wait totals count that second once ([`WaitTally::copied_starved_seconds`]).
    ///
    /// [`WaitTally::copied_starved_seconds`]: super::waits::WaitTally::copied_starved_seconds
    pub fn observe_copy(&mut self, step: usize, w: &EntityWindow) {
        self.observe_window(step, w, true);
    }

    fn observe_window(&mut self, step: usize, w: &EntityWindow, copy: bool) {
        if self.model.is_none() {
            self.model.clone_from(&w.id.model);
        }
        if self.spec.is_none() {
            self.spec = w.spec;
        }
        self.simulated |= w.simulated;
        self.waits.observe(w, copy);
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
        .with_pipes(m.busiest_pipe, w.readings.value(Field::DramActive))
        .with_power(m.power_watts.map(|p| p.value))
        .with_health(w.health.map(|h| h.health));
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
    /// model, without a tracker's state (a quantile is no later window). A quantile that sanitizing blanks (a sentinel, or a ratio past
    /// [`crate::derive::RATIO_CLAMP_LIMIT`]) says the step held an impossible raw sample,
    /// which its mean has averaged in: the step is then unknown, mean and bands, and this
    /// returns `true` the first time for the step, whichever band tells it (a sentinel in
    /// the top band is left blank where the answer is read: a band below shows it).
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
            return self.impossible.insert(step);
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
    /// instance whose share is not known, or without both terms (as for a whole GPU: one
    /// term alone is a lower bound, not the saturation).
    fn saturation_of(&self, readings: &Readings, metrics: &WindowMetrics) -> Option<f64> {
        if self.is_mig {
            match (self.mig, self.spec) {
                (Some(p), Some(spec)) => {
                    let sm = f64::from(p.sms) / f64::from(spec.sms.max(1));
                    let slices = f64::from(p.memory_slices) / f64::from(p.memory_slices_total);
                    let c = crate::derive::compute_term(readings, Some(spec)).map(|c| c * sm);
                    let d = readings.value(Field::DramActive).map(|d| d * slices);
                    c.zip(d).map(|(c, d)| c.max(d))
                }
                // The instance's share of the GPU is not known: its saturation is not a
                // share of a whole GPU, so it is not counted.
                _ => None,
            }
        } else {
            metrics.roofline_saturation
        }
    }

    /// The share of its GPU the workload holds, as the showback charges it: the fraction
    /// its pod was granted ([`Track::granted`]), else 1 for a whole GPU; a MIG instance's
    /// compute slices over its model's; `None` for an instance of an unknown profile.
    #[must_use]
    pub fn gpu_share(&self) -> Option<f64> {
        if !self.is_mig {
            return Some(self.granted.unwrap_or(1.0));
        }
        self.device_share()
    }

    /// The share of the GPU the device it reads is: 1 for a whole GPU (whoever holds it), a
    /// MIG instance's compute slices over its model's; `None` for an instance of an
    /// unknown profile.
    #[must_use]
    pub fn device_share(&self) -> Option<f64> {
        if !self.is_mig {
            return Some(1.0);
        }
        self.spec?.share_of_profile(self.mig?.name)
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

    pub(super) fn range(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.points.len()
    }

    pub(super) fn has_saturation(&self) -> bool {
        self.points.iter().any(|p| p.sat().is_some())
    }
    pub(super) fn has_memory(&self) -> bool {
        self.points.iter().any(|p| p.mem().is_some())
    }
}

/// The sub-steps the sizing weighs each step by: one a step (a fine step's sample), or
/// the bands of a coarse step that have a share of it ([`StepBands`]), each with its
/// share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Grid {
    /// Sub-steps a step: 1 to [`BANDS`].
    pub(super) m: usize,
    /// The band each sub-step reads.
    band: [usize; BANDS],
    /// Each sub-step's weight (never 0).
    pub(super) weights: [u64; BANDS],
}

impl Grid {
    pub(super) fn of(bands: Option<StepBands>) -> Grid {
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
    pub(super) fn is_unit(&self) -> bool {
        self.m == 1 && self.weights[0] == 1
    }

    /// The saturation of point `p` at its sub-step `j`.
    pub(super) fn value(&self, p: Point, j: usize) -> Option<u16> {
        p.band(self.band[j])
    }

    /// The (value, weight) of each sub-step of `p`, where its saturation is known.
    pub(super) fn weighted(&self, p: Point) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.m).filter_map(move |j| self.value(p, j).map(|x| (u64::from(x), self.weights[j])))
    }

    /// The least weight of a sub-step.
    pub(super) fn min_weight(&self) -> u64 {
        self.weights[..self.m].iter().copied().min().unwrap_or(1)
    }
}

#[cfg(test)]
mod tests;
