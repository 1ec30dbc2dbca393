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
//! **Pooled lower bound.** `max(B, ⌈max(memory demand)⌉)`, where compute demand at a step
//! is the summed roofline saturation of the workloads (in GPU-equivalents), memory demand the
//! summed memory over one GPU's memory, and `B` the fewest GPUs whose `B × (1 − h)` the
//! compute demand's nearest-rank quantile at `1 − B/100` stays within: each packed GPU may
//! be over its limit at 1 % of the steps, so `B` GPUs let the sum over `B × (1 − h)` at no
//! more than `B` % of them (a p99 of a sum is not the sum of p99s). Both terms are true
//! bounds: no packing can use fewer. `compute_gpus` is still `p99(compute demand) / (1 − h)`.
//! Workloads whose demand was not measured are left out.
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

mod demand;
mod idle;
mod index;
mod packing;
mod sizing;
#[cfg(test)]
mod test_support;
mod track;
pub mod waits;
mod workloads;

use crate::rightsizing::Constraint;
use demand::{Series, demand_sums, gap_note, gpu_summary, pooled_bound};
use idle::{idle_capacity, savings};
use packing::packing;
use serde::Serialize;
use sizing::{PeakLimit, right_size_each};
use std::collections::{BTreeMap, BTreeSet};
use track::{Grid, MIB};
use workloads::{devices, fleet_gpu, gpus_without_pods, names, workloads};

pub use track::{
    BANDS, P99_BAND, Point, RATIO_UNITS, STEP_QUANTILES, STEP_WEIGHT_UNITS, StepBands, Track, mib,
    ratio_units,
};

/// Default threshold of the busy flag below which a step is idle (the idle regime's).
pub const IDLE_BUSY_BELOW: f64 = 0.05;
/// Default threshold of effective compute below which a step is idle.
pub const IDLE_COMPUTE_BELOW: f64 = 0.01;
/// The practical DRAM ceiling the bandwidth checks use (as the MIG fit does).
pub const D_MAX: f64 = 0.8;

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

/// A GPU's holders as node mode's allocation info names them ([`FleetInput::held`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldBy {
    /// Each holder (`namespace/pod`) and the points (indices on the tracks' grid) at which
    /// it held the GPU: the GPU's own pod-less series is its holders' at these, and the
    /// GPU's free time elsewhere.
    pub pods: BTreeMap<String, BTreeSet<usize>>,
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
    /// The holders of each GPU (by its track's `gpu` key) whose own series carry no pod,
    /// where node mode's allocation info names them: a time-sliced GPU's counters are the
    /// device's, written without pod labels, and the device is its holders' one workload in
    /// the sizing while they held it.
    pub held: BTreeMap<String, HeldBy>,
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

/// `max(B, ⌈peak memory⌉)`, `B` the fewest GPUs the summed compute demand allows
/// (module documentation).
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
    /// GPUs freed by putting them on one: of those they hold, the ones they vacate (every
    /// workload on it among them), less the one they need.
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
    /// (`None`: the peak fits). Steps with nothing measured neither end a run nor count in
    /// it: the measured seconds above of the longest run a gap may have split.
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
    /// Share of its lifetime's steps at which saturation was measured (`None`: a workload
    /// with no steps in the window, whose share is unknown, not 0).
    pub saturation_measured_share: Option<f64>,
    /// Steps at which saturation was measured: what its p99 and its sizing rest on (below
    /// [`FEW_STEPS`], a note names the workload).
    pub saturation_steps: usize,
    /// Smallest MIG profile of its model that fits the measured demand.
    pub mig_fit: Option<MigChoice>,
    /// Why there is no MIG fit, when there is none; beside a fit, why a smaller profile
    /// than it was withheld, when one was.
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
    /// The model of the GPU it held, as reported, where known.
    pub model: Option<String>,
    /// Idle steps over measured steps.
    pub idle_share: f64,
    /// Hours it held the GPU (steps with readings).
    pub held_hours: f64,
    /// Hours in which the busy flag or effective compute was measured.
    pub measured_hours: f64,
    /// Idle GPU-hours: its idle hours times the share of the GPU it holds (a MIG
    /// instance's compute slices over its model's).
    pub idle_gpu_hours: f64,
    /// `idle_gpu_hours` at the price of a GPU-hour, where one is given (an estimate of what
    /// holding it idle cost): [`FleetConfig::cost_per_gpu_hour`], or its model's own price
    /// where the caller has one ([`crate::showback::model_price`]).
    pub idle_cost: Option<f64>,
    /// How long it had been idle at its last reading: its trailing idle steps' hours;
    /// `None` where that reading measured no use (no busy flag or effective compute).
    pub idle_for_hours: Option<f64>,
    /// The most memory it held over those trailing idle steps, bytes, where read.
    pub memory_held_bytes: Option<f64>,
    /// The workload behind the pod (kube-state-metrics' `kube_pod_owner`, or truthscale's
    /// allocation info), where the history names it.
    pub owner: Option<crate::model::PodOwner>,
    /// What would suspend it (truthscale changes nothing in the cluster), where its owner
    /// is known: [`suspend_command`].
    pub command: Option<String>,
}

/// The command that would suspend a workload held idle, by its owner's kind: scale a
/// Deployment or StatefulSet to 0, stop a Kubeflow Notebook (its stop annotation), let a
/// KServe InferenceService scale to zero, delete a finished Job's pods. `None` for a kind
/// truthscale has no command for. It is a recommendation: truthscale runs nothing.
#[must_use]
pub fn suspend_command(namespace: &str, owner: &crate::model::PodOwner) -> Option<String> {
    let (ns, name) = (namespace, owner.name.as_str());
    Some(match owner.kind.as_str() {
        "Deployment" => format!("kubectl -n {ns} scale deployment/{name} --replicas=0"),
        "StatefulSet" => format!("kubectl -n {ns} scale statefulset/{name} --replicas=0"),
        "Notebook" => format!(
            "kubectl -n {ns} annotate notebook/{name} kubeflow-resource-stopped=\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\" --overwrite"
        ),
        "InferenceService" => format!(
            "kubectl -n {ns} patch inferenceservice/{name} --type merge -p '{{\"spec\":{{\"predictor\":{{\"minReplicas\":0}}}}}}'"
        ),
        "Job" => format!("kubectl -n {ns} delete job/{name}"),
        "ScaledObject" => format!(
            "kubectl -n {ns} patch scaledobject/{name} --type merge -p '{{\"spec\":{{\"minReplicaCount\":0}}}}'"
        ),
        _ => return None,
    })
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
    /// total never depends on the listing's threshold. `None` where no workload's idleness
    /// was measured (never 0 for that).
    pub idle_gpu_hours: Option<f64>,
    /// Of them, the idle GPU-hours of the workloads listed.
    pub listed_idle_gpu_hours: f64,
    /// The workloads with idle time that the threshold leaves out of the list, and their
    /// idle GPU-hours together.
    pub not_listed: NotListed,
    /// Workloads with neither busy flag nor effective compute, and MIG instances of an
    /// unknown profile (their share of a GPU is not known): their idle GPU-hours are unknown.
    pub unmeasured: Vec<String>,
}

/// What a list's threshold leaves out of it: how many, and how much.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NotListed {
    /// Workloads left out of the list (with any of the quantity).
    pub workloads: usize,
    /// Their GPU-hours together.
    pub gpu_hours: f64,
    /// Hours of the workloads left out whose share of the GPU is not known (MIG instances of
    /// an unknown profile): not in `gpu_hours`. Written only where there are such.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hours_of_unknown_share: Option<f64>,
}

/// Below this many steps with saturation measured, a workload's p99 is its largest reading
/// or near it, and its right-sizing rests on few samples: a note names it.
pub const FEW_STEPS: usize = 30;

/// The note naming the workloads whose saturation was measured at fewer than [`FEW_STEPS`]
/// steps (but at some), the first five by name; `None` where there are none.
fn few_steps_note(rightsizing: &[RightSizing]) -> Option<String> {
    let few: Vec<&RightSizing> = rightsizing
        .iter()
        .filter(|r| (1..FEW_STEPS).contains(&r.saturation_steps))
        .collect();
    if few.is_empty() {
        return None;
    }
    let mut names: Vec<String> = few
        .iter()
        .take(5)
        .map(|r| format!("{} ({} steps)", r.workload, r.saturation_steps))
        .collect();
    if few.len() > 5 {
        names.push(format!("{} more", few.len() - 5));
    }
    Some(format!(
        "{} workload(s) had their saturation measured at fewer than {FEW_STEPS} steps: their p99 is their largest reading or near it, and their right-sizing, MIG fit and packing rest on few samples: {}",
        few.len(),
        names.join(", ")
    ))
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
    /// `baseline − needed`, at least 0: at the peak.
    pub gpus_freed: u64,
    /// Hours of the window with data.
    pub hours: f64,
    /// Σ over the steps of (the baseline's GPUs at the step − needed, at least 0) × the step:
    /// at most `gpus_freed × hours`, and that only where the peak held all along.
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
    /// Why GPUs wait: starved time by cause, and the stragglers of jobs.
    pub waits: waits::Waits,
}

/// The headroom in [0, 0.9], NaN as 0.
fn sane(h: f64) -> f64 {
    if h.is_nan() { 0.0 } else { h.clamp(0.0, 0.9) }
}

/// The steps the packing would save over: for pods, those at which any GPU was held (steps
/// before the first pod, or after the last, hold nothing to re-pack); else those with data.
fn saving_steps(unit: &str, series: &Series, steps_with_data: usize) -> usize {
    if unit == "pod" {
        series
            .allocated
            .iter()
            .filter(|x| x.is_some_and(|n| n > 0))
            .count()
    } else {
        steps_with_data
    }
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
    let pooled = pooled_bound(
        series.compute_weighted(),
        (&series.memory.0, series.compute_known_anywhere),
        gpu_mib,
        limit,
    );

    let (packing, colocation) = packing(&work, &names, gpu_mib, limit, (steps, grid), &mut notes);

    let peak_limit = PeakLimit {
        max_over: cfg.max_peak_over_capacity,
        seconds_per_point: input.step_seconds,
        grid,
    };
    let rightsizing = right_size_each(&work, &names, h, peak_limit);
    notes.extend(few_steps_note(&rightsizing));
    let idle = idle_capacity(&work, &names, cfg, hours_per_step);
    let allocated_summary = gpu_summary(&series.allocated);
    let reporting_summary = gpu_summary(&series.reporting);
    let baseline = if unit == "pod" {
        (allocated_summary, series.allocated.as_slice())
    } else {
        (reporting_summary, series.reporting.as_slice())
    };
    let savings = packing.as_ref().and_then(|p| {
        let hours = saving_steps(unit, &series, steps_with_data) as f64 * hours_per_step;
        let hours = (hours, hours_per_step);
        savings(p, unit, baseline, hours, cfg.cost_per_gpu_hour)
    });

    let simulated = input.tracks.iter().any(|t| t.simulated);
    notes.extend(gap_note(steps_with_data, steps));
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
        waits: waits::waits(&input.tracks),
    }
}

fn method_text(h: f64) -> Vec<String> {
    let cap = 1.0 - h;
    vec![
        "Percentiles are nearest-rank over the steps at which a series is known; a step at which a live workload's reading is missing is unknown, never 0.".to_owned(),
        "Compute demand: the workloads' roofline saturation max(compute, DRAM activity), summed per step, in GPU-equivalents. Memory demand: their memory used, summed per step, over one GPU's memory. The busy flag's claim is the summed reported utilization, for comparison only.".to_owned(),
        format!("Pooled lower bound: max(B, ceil(peak memory demand)), B the fewest GPUs such that the compute demand stays within B × {cap:.2} at all but B % of the steps (each packed GPU may be over its limit at 1 % of them). It assumes work could be spread over GPUs freely, so no packing of whole workloads can use fewer GPUs."),
        format!("Packed: first-fit decreasing onto GPUs of the fleet's model; each workload reserves its peak memory for its lifetime (a hard limit) and the time-aligned summed saturation must stay at or below {cap:.2} at p99. Work is assumed to add linearly on a shared GPU, and interference between co-located workloads is not modelled."),
        "Co-location groups are the packed GPUs holding workloads from two or more GPUs today; interleaved groups share only because their busy periods do not overlap.".to_owned(),
        format!("MIG fit: the smallest profile of the workload's model whose memory holds peak × {:.2}, whose SM share covers p95(busiest pipe) / {cap:.2} and whose memory-slice share covers p95(DRAM) / ({D_MAX} × {cap:.2}); constraints whose counter was not read are not checked and are named.", 1.0 + h),
        format!("Smaller model: a catalog GPU with less memory and less bandwidth than the workload's own whose memory holds peak memory × {:.2}, whose bandwidth covers p99 DRAM traffic at {D_MAX} × {cap:.2} of its peak and, when measured, whose tensor peak covers p99 busiest-pipe work at {cap:.2}.", 1.0 + h),
        "NVML and DCGM see allocated memory, not needed memory: inference engines pre-allocate their KV cache, so memory figures are upper bounds on need.".to_owned(),
    ]
}

#[cfg(test)]
mod tests;
