//! Per-window formulas: effective compute, roofline saturation, inflation, ρ, power proxy.
//!
//! Notation (see `docs/derivations.md`): `u` reported busy fraction, `s` SM active,
//! `τ` tensor active, `d` DRAM active, `κ = f̄ / f_ref` clock correction,
//! `C = τ + φ16·P16/P + φ32·P32/P` the peak-weighted compute term.
//! Every function here is total: it never panics and never returns NaN.

use crate::diag::{Diagnostic, DiagnosticKind};
use crate::gpus::GpuSpec;
use crate::model::{EntityId, Field, Reading, Readings, Throttles};
use crate::phase::PhaseConfig;

/// Tunable constants. Every threshold is a default to calibrate, not a truth.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeriveConfig {
    /// Tensor activity reachable in practice (saturating GEMMs peak near 0.9).
    pub tau_max: f64,
    /// DRAM activity reachable in practice (NVIDIA: about 0.8).
    pub d_max: f64,
    /// The bound on the clock correction κ of a model the catalog does not know (its
    /// effective compute is then bounded by `C × kappa_max`); a catalog model's κ is clamped
    /// at its own maximum clock over its reference clock (1.082 on H100 SXM, 1.156 on H100
    /// and H200 NVL).
    pub kappa_max: f64,
    /// Below this busy fraction, inflation is not defined (the GPU is idle).
    pub inflation_min_util: f64,
    /// A window longer than this many of the source's update intervals is a gap: not
    /// observed, counted in the unobserved seconds (docs/derivations.md, Gaps).
    pub max_gap_intervals: f64,
    /// Headroom for right-sizing and MIG fit (0.15 = 15 %).
    pub headroom: f64,
    /// What the workload is: `auto` (LLM serving when a serving engine is attached),
    /// `llm_serving`, or `other`. Only LLM serving gets the phase names prefill and decode.
    pub workload: WorkloadHint,
    /// Phase classifier thresholds and hysteresis.
    pub phase: PhaseConfig,
}

/// What the configuration says the workload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadHint {
    /// LLM serving when a serving engine is attached, else unknown.
    #[default]
    Auto,
    /// LLM serving, engine or not.
    LlmServing,
    /// Not LLM serving (training, batch jobs): regimes only.
    Other,
}

impl Default for DeriveConfig {
    fn default() -> Self {
        DeriveConfig {
            tau_max: 0.9,
            d_max: 0.8,
            kappa_max: 1.1,
            inflation_min_util: 0.05,
            max_gap_intervals: 5.0,
            headroom: 0.15,
            workload: WorkloadHint::Auto,
            phase: PhaseConfig::default(),
        }
    }
}

impl DeriveConfig {
    /// Every value in range (keys are `<prefix>name`, e.g. `derive.tau_max`).
    ///
    /// # Errors
    /// Each problem, naming its key.
    pub fn validate(&self, prefix: &str) -> Result<(), Vec<crate::phase::InvalidSetting>> {
        let mut c = crate::phase::Checker::new(prefix);
        c.range("tau_max", self.tau_max, 0.01, 1.0);
        c.range("d_max", self.d_max, 0.01, 1.0);
        c.range("kappa_max", self.kappa_max, 1.0, 2.0);
        c.range("inflation_min_util", self.inflation_min_util, 0.0, 1.0);
        c.range("max_gap_intervals", self.max_gap_intervals, 1.0, 1000.0);
        c.range("headroom", self.headroom, 0.0, 0.9);
        c.absorb(self.phase.validate(&format!("{prefix}phase.")));
        c.finish()
    }
}

/// Which counters a value could be computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    /// Cumulative cycle counters exist (DCGM 4.6+ fields 1084–1096, NVML GPM 248–260): each
    /// window's tensor, SM and pipe activity is the counters' delta over the window, exact
    /// at any cadence.
    Cumulative,
    /// Tensor (and usually DRAM) activity counters exist: DCGM profiling or NVML GPM.
    Profiling,
    /// Only the busy flag, power and clocks exist: compute is bounded and estimated.
    Nvml,
    /// Only the busy flag exists.
    BusyOnly,
    /// No usable counter at all.
    None,
}

impl Fidelity {
    /// Label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Fidelity::Cumulative => "cumulative",
            Fidelity::Profiling => "profiling",
            Fidelity::Nvml => "nvml",
            Fidelity::BusyOnly => "busy_only",
            Fidelity::None => "none",
        }
    }
}

/// How a value was obtained. (A bound or an estimate is a value of its own, under its own
/// name: [`WindowMetrics::effective_compute_upper_bound`], [`WindowMetrics::power_proxy`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Read directly from a counter (the power gauge).
    Counter,
    /// Computed exactly from counters (power from the energy counter's increase).
    Derived,
}

/// A derived number with its provenance.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Valued {
    /// The value.
    pub value: f64,
    /// How it was obtained.
    pub method: Method,
}

/// Everything derived for one entity over one window.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WindowMetrics {
    /// Fidelity tier of this window's inputs.
    pub fidelity: Option<Fidelity>,
    /// Reported (busy-flag) utilization `u`.
    pub reported_utilization: Option<f64>,
    /// Effective compute fraction: `clamp(C·κ, 0, 1)` (profiling tier only).
    pub effective_compute: Option<f64>,
    /// Whether `effective_compute` was corrected for the SM clock: always, where it is
    /// given (a window without the correction has [`Self::effective_compute_uncorrected`]).
    pub clock_corrected: bool,
    /// The compute term `C` of a window whose clock correction could not be applied (no
    /// SM-clock reading, or a model the catalog does not know): not an effective compute
    /// fraction, so never integrated or averaged with one.
    pub effective_compute_uncorrected: Option<f64>,
    /// Upper bound on the effective compute of a window that has none: the busy fraction
    /// `u` times `f_max / f_ref` without a tensor counter (its kernels may run above the
    /// window's mean clock); `C × f_max / f_ref` with a tensor counter but no
    /// SM-clock reading (`C × kappa_max`, 1.1 by default, for a model the catalog does not
    /// know), which holds the true ECF at any clock up to the maximum
    /// ([`effective_compute_bound`]). `None` where the effective compute is measured.
    pub effective_compute_upper_bound: Option<f64>,
    /// What the window lacked to measure its effective compute, where
    /// [`Self::effective_compute_upper_bound`] stands in for it.
    pub effective_compute_bound_missing: Option<BoundMissing>,
    /// Where the effective compute is only bounded: the inflation gap is at least
    /// `100·(u − bound)` points, clamped at 0 (only where `u ≥ inflation_min_util`). A
    /// bound on the gap, never the gap itself ([`Self::inflation_gap_points`]).
    pub inflation_gap_points_at_least: Option<f64>,
    /// Busiest-pipe view: `max(τ, φ16, φ32, φ64)`.
    pub busiest_pipe: Option<f64>,
    /// Clock correction `κ = f̄ / f_ref`.
    pub kappa: Option<f64>,
    /// Roofline saturation at the clocks the GPU ran: `max(C, d)`.
    pub roofline_saturation: Option<f64>,
    /// Roofline saturation against the datasheet roofline: `max(C·κ, d)`; `None` where κ
    /// is not known (no ECF), like the ECF itself.
    pub roofline_saturation_spec: Option<f64>,
    /// Saturation against practical ceilings: `max(C/τ_max, d/d_max)`, clamped to 1.
    pub roofline_saturation_practical: Option<f64>,
    /// Inflation gap in points: `100·(u − ECF)`, clamped at 0.
    pub inflation_gap_points: Option<f64>,
    /// Inflation ratio `u / max(ECF, 0.01)`.
    pub inflation_ratio: Option<f64>,
    /// Spatial inflation `u / max(s, 0.01)`.
    pub spatial_inflation: Option<f64>,
    /// Roofline gap `u − S`.
    pub roofline_gap: Option<f64>,
    /// Ridge-normalized intensity `ρ = C / max(d, 0.02)`.
    pub rho: Option<f64>,
    /// Window-average power in watts (from the energy counter when possible).
    pub power_watts: Option<Valued>,
    /// Power proxy `π = (P − P_idle)/(P_cap − P_idle)`, an estimate (not compute).
    pub power_proxy: Option<f64>,
    /// Fraction of allocated memory: `used / total`.
    pub memory_used_fraction: Option<f64>,
}

impl WindowMetrics {
    /// Whether the window had a compute term (tensor activity), corrected or not.
    #[must_use]
    pub fn compute_measured(&self) -> bool {
        self.effective_compute.is_some() || self.effective_compute_uncorrected.is_some()
    }
}

/// What a window lacked to measure its effective compute: the reason an upper bound
/// ([`WindowMetrics::effective_compute_upper_bound`]) stands in for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct BoundMissing {
    /// No tensor counter: the bound is the busy fraction `u` at the model's maximum clock.
    pub tensor_counter: bool,
    /// A tensor counter but no SM-clock reading: the clock correction is bounded by the
    /// model's maximum clock over its reference clock.
    pub sm_clock: bool,
    /// A tensor counter, of a model the catalog does not know: the clock correction is
    /// bounded by `kappa_max` (1.1 by default).
    pub model: bool,
}

/// Turn raw readings into clean ones: NaN, infinities, DCGM/NVML sentinels and readings
/// outside the physical bounds of the model (`spec`; generic bounds without one) become
/// blanks, each with a diagnostic; only a fraction a little above 1 is clamped. The bounds
/// are listed in `docs/derivations.md` (Sanitizing).
pub fn sanitize(
    readings: &mut Readings,
    entity: &EntityId,
    spec: Option<&GpuSpec>,
    diags: &mut Vec<Diagnostic>,
) {
    // Most readings are all clean: told in one pass without a branch a field, against the
    // generic bounds, then the few fields whose bound is the model's or the row's own (a
    // field over its generic bound only sends the row to the field-by-field rules).
    let mut unclean = false;
    for (i, v) in readings.values() {
        unclean |= !(0.0 <= v && v <= CLEAN_MAX[i]);
    }
    sanitize_rest(readings, unclean, entity, spec, diags);
}

/// `*dst = *src` and [`sanitize`] it, the copy and the first pass over the generic bounds
/// in one.
#[inline(always)]
pub fn sanitize_from(
    dst: &mut Readings,
    src: &Readings,
    entity: &EntityId,
    spec: Option<&GpuSpec>,
    diags: &mut Vec<Diagnostic>,
) {
    let unclean = dst.copy_from_within(src, &CLEAN_MAX);
    sanitize_rest(dst, unclean, entity, spec, diags);
}

/// [`sanitize`] after its first pass (`unclean`: a value lay outside its generic bound):
/// the fields bounded by the model or the row, the sentinels of the wide fields, and the
/// field-by-field rules where anything was not clean.
#[inline(always)]
fn sanitize_rest(
    readings: &mut Readings,
    mut unclean: bool,
    entity: &EntityId,
    spec: Option<&GpuSpec>,
    diags: &mut Vec<Diagnostic>,
) {
    // A GPU that reads runs its SMs at some clock, has some memory, is on a link that is up
    // and is limited to some power: a value below its field's floor is no reading; nor is a
    // code, a flag or a count with a fraction.
    unclean |= readings
        .values_in(FLOOR | WHOLE)
        .any(|(i, v)| below_floor(Field::ALL[i], v) || not_whole(Field::ALL[i], v));
    // A row with none of those fields (most of a profiling capture's) has nothing more to
    // tell.
    if !unclean && !readings.any_filled(ROW_OR_WIDE) {
        return;
    }
    let (row, _, _) = Bounds::row(readings, spec);
    for (&f, max) in ROW_BOUND_FIELDS.iter().zip(row) {
        if let Some(v) = readings.value_at(f) {
            unclean |= !(0.0 <= v && v <= max);
        }
    }
    // The integer sentinels lie below the bound of the wide fields only (see `Bounds::new`).
    for &f in WIDE_FIELDS {
        if let Some(v) = readings.value(f) {
            unclean |= in_int_sentinel_band(v);
        }
    }
    if unclean {
        let bounds = Bounds::new(readings, spec);
        sanitize_each(readings, entity, spec, &bounds, diags);
    }
}

/// [`sanitize`], field by field.
fn sanitize_each(
    readings: &mut Readings,
    entity: &EntityId,
    spec: Option<&GpuSpec>,
    bounds: &Bounds,
    diags: &mut Vec<Diagnostic>,
) {
    for &field in Field::ALL {
        let Reading::Value(v) = readings.get(field) else {
            continue;
        };
        let max = bounds.max[field as usize];
        // Most values are clean: within 0..=the field's bound (NaN fails both comparisons,
        // infinities the second) and not a sentinel of the field's type.
        let sentinel = is_sentinel_of(field, v);
        let floor = below_floor(field, v);
        let fraction = not_whole(field, v);
        if (0.0..=max).contains(&v) && !sentinel && !floor && !fraction {
            continue;
        }
        let mut push = |kind, detail: String| {
            diags.push(Diagnostic {
                kind,
                entity: Some(entity.clone()),
                field: Some(field),
                detail,
            });
        };
        let s = shown(v);
        if !v.is_finite() {
            push(DiagnosticKind::NonFinite, s);
            readings.set(field, Reading::Blank);
        } else if sentinel {
            push(DiagnosticKind::Sentinel, s);
            readings.set(field, Reading::Blank);
        } else if v < 0.0 {
            push(DiagnosticKind::OutOfRange, format!("{s} is negative"));
            readings.set(field, Reading::Blank);
        } else if floor {
            push(DiagnosticKind::OutOfRange, floor_detail(field, &s));
            readings.set(field, Reading::Blank);
        } else if fraction {
            push(
                DiagnosticKind::OutOfRange,
                format!("{s} is not a whole number, and the field is a code, a flag or a count"),
            );
            readings.set(field, Reading::Blank);
        } else if field.is_ratio() {
            let clamped = v <= RATIO_CLAMP_LIMIT && field.clamps_above_one();
            let what = if clamped {
                "clamped to 1"
            } else {
                "is not a fraction"
            };
            push(DiagnosticKind::OutOfRange, format!("{s} {what}"));
            if clamped {
                readings.set_value(field, 1.0);
            } else {
                readings.set(field, Reading::Blank);
            }
        } else {
            // Every bound of a field that is not a fraction is a whole number of its unit.
            let why = bounds.why(field, spec);
            push(
                DiagnosticKind::OutOfRange,
                format!("{s} is above {max:.0}, {why}"),
            );
            readings.set(field, Reading::Blank);
        }
    }
}

/// Whether `v` (0 or more) is still no reading of a GPU that reads ([`FLOOR`]): a
/// memory total below a mebibyte, which no GPU or instance has; an SM clock below
/// [`MIN_SM_CLOCK_MHZ`]; a PCIe link generation or width of 0 (the link is up, or nothing
/// is read); a power limit of 0 W (a board limited to it runs nothing); a power draw of 0 W
/// (a GPU that answers is powered: even idle, it draws tens of watts).
fn below_floor(field: Field, v: f64) -> bool {
    match field {
        Field::MemTotalBytes => (0.0..MIN_MEMORY_TOTAL_BYTES).contains(&v),
        Field::SmClockMhz => (0.0..MIN_SM_CLOCK_MHZ).contains(&v),
        Field::PcieLinkGen | Field::PcieLinkWidth | Field::PowerLimitWatts | Field::PowerWatts => {
            v == 0.0
        }
        _ => false,
    }
}

/// Whether `v` is no reading of a field that is a code, a flag or a count
/// ([`WHOLE`]): it has a fraction (a row remap half pending, XID 79.5).
fn not_whole(field: Field, v: f64) -> bool {
    (1 << field as u64) & WHOLE != 0 && v.fract() != 0.0
}

/// Why a value [`below_floor`] (`s`, as shown) is no reading.
#[cold]
fn floor_detail(field: Field, s: &str) -> String {
    match field {
        // Taken as the GPU's size, it would make every sizing divide by nothing.
        Field::MemTotalBytes => format!("{s} bytes is no memory total of a GPU (below 1 MiB)"),
        // Averaged in, 0 would halve the window's mean clock and κ with it.
        Field::SmClockMhz => {
            format!("{s} MHz is no SM clock of a GPU that reads (below {MIN_SM_CLOCK_MHZ} MHz)")
        }
        f => format!("0 is no {} of a GPU that reads", f.name()),
    }
}

/// Whether `v` is one of DCGM's or NVML's blank values: the FP64 and INT64 blanks (any value
/// from 2^47 up, [`SENTINEL_FLOOR`]), the INT32 blanks (`0x7ffffff0..=0x7fffffff`, i.e.
/// 2147483632..=2147483647, [`INT32_BLANK`]) and NVML's `NVML_VALUE_NOT_AVAILABLE` as an
/// unsigned 32-bit value (`0xFFFFFFFF`, 4294967295). The integer ones only as integers. NaN is
/// not (it is non-finite).
#[must_use]
pub fn is_sentinel(v: f64) -> bool {
    v >= SENTINEL_FLOOR
        || (v.fract() == 0.0
            && ((INT32_BLANK..=f64::from(i32::MAX)).contains(&v) || v == f64::from(u32::MAX)))
}

/// Whether `v` is a blank of `field`'s DCGM type: an INT64 cumulative counter's blanks are
/// the INT64 ones alone ([`INT64_BLANK`] and up), since a counter passes the INT32 band and
/// 2^47 (the FP64 blank) as it counts; every other field's are [`is_sentinel`]'s.
#[must_use]
pub fn is_sentinel_of(field: Field, v: f64) -> bool {
    if field.is_int64_counter() {
        v >= INT64_BLANK
    } else {
        is_sentinel(v)
    }
}

/// A superset of the integer sentinels, told with a few comparisons and no branch (the fast
/// check; [`is_sentinel`] decides).
#[inline]
fn in_int_sentinel_band(v: f64) -> bool {
    (v >= INT32_BLANK) & (v <= f64::from(i32::MAX)) | (v == f64::from(u32::MAX))
}

/// DCGM's INT32 blank (`DCGM_INT32_BLANK`, 0x7ffffff0): it and every value above it up to
/// `i32::MAX` are sentinels.
pub const INT32_BLANK: f64 = 2_147_483_632.0;
/// Values at or above DCGM's FP64 blank (2^47) are sentinels, never measurements (the INT64
/// blanks, from 0x7ffffffffffffff0, and NVML's 64-bit `0xFFFF…FF` lie above it too).
pub const SENTINEL_FLOOR: f64 = 140_737_488_355_328.0;
/// DCGM's INT64 blank (`DCGM_INT64_BLANK`, 0x7ffffffffffffff0) as a double (it rounds to
/// 2^63): it and every value above it are a cumulative counter's blanks.
pub const INT64_BLANK: f64 = 0x7fff_ffff_ffff_fff0_u64 as f64;
/// Ratios that clamp ([`Field::clamps_above_one`]: SM active above 1 is reported on MIG) up to
/// this are clamped to 1; above, and any other ratio above 1, blank.
pub const RATIO_CLAMP_LIMIT: f64 = 1.5;

/// A power reading (and a power limit reading) above this multiple of the board's limit is
/// not physical: boards overshoot their limit for milliseconds, never by 2×.
pub const POWER_BOUND_FACTOR: f64 = 2.0;
/// The power bound without a limit reading or a catalog model: [`POWER_BOUND_FACTOR`] × the
/// largest board limit in the catalog (B200, 1000 W), so 2000 W.
pub const GENERIC_MAX_POWER_WATTS: f64 = {
    let mut max = 0.0;
    let mut i = 0;
    while i < crate::gpus::CATALOG.len() {
        max = f64::max(max, crate::gpus::CATALOG[i].max_power_watts);
        i += 1;
    }
    POWER_BOUND_FACTOR * max
};
/// An SM clock reading may exceed the model's maximum boost clock by this factor
/// (overclocked or factory-boosted boards), no more.
pub const CLOCK_TOLERANCE: f64 = 1.1;
/// The SM clock bound without a catalog model, MHz (every GPU in the catalog boosts below
/// 2600 MHz).
pub const GENERIC_MAX_SM_CLOCK_MHZ: f64 = 5000.0;
/// The memory clock bound, MHz, for every model: the catalog has no memory clocks, and
/// GDDR7 boards already report about 14000 MHz.
pub const GENERIC_MAX_MEM_CLOCK_MHZ: f64 = 20_000.0;
/// Memory readings may exceed the catalog's (decimal-GB) size by this factor: a board's
/// total in MiB is about 7 % above its GB figure (an H100's 81559 MiB against 80 GB).
pub const MEMORY_TOLERANCE: f64 = 1.1;
/// The memory bound without a catalog model, bytes (4 TiB; the catalog's largest is 180 GB).
pub const GENERIC_MAX_MEMORY_BYTES: f64 = 4_398_046_511_104.0;
/// A link's traffic may exceed its nominal rate by this factor (rates averaged over a
/// window whose ends are read apart) before it is impossible: PCIe each way against the
/// model's host link, NVLink each way against half the model's bidirectional peak.
pub const LINK_TOLERANCE: f64 = 1.1;
/// A temperature above this many degrees Celsius is not a reading (GPUs shut down near 100).
pub const MAX_TEMP_CELSIUS: f64 = 200.0;
/// The newest PCIe generation (6.0); a higher one is not a reading.
pub const MAX_PCIE_LINK_GEN: f64 = 6.0;
/// The widest PCIe link, in lanes (x32 in the specification; GPUs use x16).
pub const MAX_PCIE_LINK_WIDTH: f64 = 32.0;
/// An XID above this is not a reading (NVIDIA's catalog numbers them below 200).
pub const MAX_XID: f64 = 65_535.0;
/// A remapped-row count above this is not a reading (an HBM stack has some thousands of
/// spare rows at most).
pub const MAX_REMAPPED_ROWS: f64 = 1_000_000.0;
/// A recovery-action code above this is not a reading (NVML defines 0 to 4).
pub const MAX_RECOVERY_ACTION: f64 = 255.0;
/// More XIDs than this counted in one window of the source is not a reading.
pub const MAX_XID_WINDOW_ERRORS: f64 = 1e9;
/// A fabric health summary above this is not a reading (NVML defines 0 to 3; room is left
/// for values a newer driver adds).
pub const MAX_FABRIC_HEALTH_SUMMARY: f64 = 255.0;
/// A memory total below this (1 MiB) is not a reading: no GPU or MIG instance has so little.
pub const MIN_MEMORY_TOTAL_BYTES: f64 = 1_048_576.0;
/// An SM clock below this (100 MHz) is not a reading of a GPU that reads: NVIDIA's GPUs idle
/// at some hundreds of MHz. Averaged in, 1 MHz would take κ, and effective compute with it,
/// to nearly nothing.
pub const MIN_SM_CLOCK_MHZ: f64 = 100.0;
/// A CPU limit above this many CPUs is not a reading (Linux supports at most 8192 CPUs).
pub const MAX_CPU_LIMIT_CORES: f64 = 8192.0;

/// The fields whose bound can reach the INT32 sentinels, so that the bound alone does not
/// catch them: every other field's bound stays below [`INT32_BLANK`].
const WIDE_FIELDS: &[Field] = &[
    Field::EnergyJoules,
    Field::MemUsedBytes,
    Field::MemTotalBytes,
    Field::PcieTxBytesPerSec,
    Field::PcieRxBytesPerSec,
    Field::NvlinkTxBytesPerSec,
    Field::NvlinkRxBytesPerSec,
    Field::NvlinkTxWaitPerSec,
];

/// The largest value below the INT32 sentinels: a bound of a field not in [`WIDE_FIELDS`]
/// is never above it.
const BELOW_INT32_BLANK: f64 = INT32_BLANK - 1.0;

/// The largest clean value of each field without a model (in the order of [`Field::ALL`]):
/// 1 for a ratio, the generic physical bound where there is one, else the largest value
/// below [`SENTINEL_FLOOR`].
const CLEAN_MAX: [f64; Field::COUNT] = {
    let mut t = [f64::from_bits(SENTINEL_FLOOR.to_bits() - 1); Field::COUNT];
    let mut i = 0;
    while i < Field::COUNT {
        if Field::ALL[i].is_ratio() {
            t[i] = 1.0;
        }
        i += 1;
    }
    t[Field::SmClockMhz as usize] = GENERIC_MAX_SM_CLOCK_MHZ;
    t[Field::MemClockMhz as usize] = GENERIC_MAX_MEM_CLOCK_MHZ;
    t[Field::PowerWatts as usize] = GENERIC_MAX_POWER_WATTS;
    t[Field::PowerLimitWatts as usize] = GENERIC_MAX_POWER_WATTS;
    t[Field::MemUsedBytes as usize] = GENERIC_MAX_MEMORY_BYTES;
    t[Field::MemTotalBytes as usize] = GENERIC_MAX_MEMORY_BYTES;
    t[Field::TempCelsius as usize] = MAX_TEMP_CELSIUS;
    t[Field::PcieLinkGen as usize] = MAX_PCIE_LINK_GEN;
    t[Field::PcieLinkWidth as usize] = MAX_PCIE_LINK_WIDTH;
    t[Field::HolderCpuLimitCores as usize] = MAX_CPU_LIMIT_CORES;
    t[Field::XidLast as usize] = MAX_XID;
    // The row remapper's flags are 0 or 1.
    t[Field::RowRemapPending as usize] = 1.0;
    t[Field::RowRemapFailed as usize] = 1.0;
    t[Field::RowRemapUncorrectable as usize] = MAX_REMAPPED_ROWS;
    t[Field::RecoveryAction as usize] = MAX_RECOVERY_ACTION;
    t[Field::XidWindowFatal as usize] = MAX_XID;
    t[Field::XidWindowErrors as usize] = MAX_XID_WINDOW_ERRORS;
    t[Field::MemoryUnrepairable as usize] = 1.0;
    t[Field::FabricHealthSummary as usize] = MAX_FABRIC_HEALTH_SUMMARY;
    // A cumulative counter counts up to the INT64 blanks.
    let mut i = 0;
    while i < Field::COUNT {
        if Field::ALL[i].is_int64_counter() {
            t[i] = f64::from_bits(INT64_BLANK.to_bits() - 1);
        }
        i += 1;
    }
    t
};

/// The largest clean value of each field for one row: [`CLEAN_MAX`] with the model's bounds
/// and those that follow from the row's own power limit and memory total.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    max: [f64; Field::COUNT],
    /// The power bound is [`POWER_BOUND_FACTOR`] × the row's own power limit (no model).
    power_by_limit: bool,
    /// The memory-used bound is the row's own memory total.
    used_by_total: bool,
}

/// The fields whose bound is the model's or the row's own rather than [`CLEAN_MAX`]'s: the
/// SM clock, power, power limit, memory used and memory total, in that order.
const ROW_BOUND_FIELDS: [usize; 9] = [
    Field::SmClockMhz as usize,
    Field::PowerWatts as usize,
    Field::PowerLimitWatts as usize,
    Field::MemUsedBytes as usize,
    Field::MemTotalBytes as usize,
    Field::PcieRxBytesPerSec as usize,
    Field::PcieTxBytesPerSec as usize,
    Field::NvlinkRxBytesPerSec as usize,
    Field::NvlinkTxBytesPerSec as usize,
];

/// The fields with a floor above 0 (or at it) below which a value is no reading
/// ([`below_floor`]), one bit each.
const FLOOR: u64 = Field::set_of(&[
    Field::MemTotalBytes,
    Field::SmClockMhz,
    Field::PcieLinkGen,
    Field::PcieLinkWidth,
    Field::PowerLimitWatts,
    Field::PowerWatts,
]);

/// The fields that are codes, flags or counts, whole numbers ([`not_whole`]), one bit each:
/// the health levels ([`Field::is_health_level`]; a summary keeps their largest reading,
/// never a mean) and the PCIe link's generation and width.
const WHOLE: u64 = Field::set_of(&[
    Field::XidLast,
    Field::XidWindowErrors,
    Field::XidWindowFatal,
    Field::RowRemapPending,
    Field::RowRemapFailed,
    Field::RowRemapUncorrectable,
    Field::MemoryUnrepairable,
    Field::RecoveryAction,
    Field::FabricHealthSummary,
    Field::PcieLinkGen,
    Field::PcieLinkWidth,
]);

/// The link traffic fields of [`ROW_BOUND_FIELDS`], one bit each.
const LINK_FIELDS: u64 = Field::set_of(&[
    Field::PcieRxBytesPerSec,
    Field::PcieTxBytesPerSec,
    Field::NvlinkRxBytesPerSec,
    Field::NvlinkTxBytesPerSec,
]);

/// [`ROW_BOUND_FIELDS`] and [`WIDE_FIELDS`], one bit each ([`Field::set_of`]).
const ROW_OR_WIDE: u64 = {
    let mut set = Field::set_of(WIDE_FIELDS);
    let mut i = 0;
    while i < ROW_BOUND_FIELDS.len() {
        set |= 1 << ROW_BOUND_FIELDS[i];
        i += 1;
    }
    set
};

impl Bounds {
    #[inline]
    fn new(r: &Readings, spec: Option<&GpuSpec>) -> Bounds {
        let (row, power_by_limit, used_by_total) = Bounds::row(r, spec);
        let mut max = CLEAN_MAX;
        for (&f, b) in ROW_BOUND_FIELDS.iter().zip(row) {
            max[f] = b;
        }
        Bounds {
            max,
            power_by_limit,
            used_by_total,
        }
    }

    /// The bounds of [`ROW_BOUND_FIELDS`] for this row, whether the power is bounded by the
    /// row's own limit, and whether the memory used is by the row's own total.
    #[inline]
    fn row(r: &Readings, spec: Option<&GpuSpec>) -> ([f64; 9], bool, bool) {
        let [mut sm, mut power, mut limit, mut used, mut total, ..] =
            ROW_BOUND_FIELDS.map(|f| CLEAN_MAX[f]);
        let (pcie, nvlink) = link_bounds(r, spec);
        if let Some(s) = spec {
            // `min`: a spec's bounds never reach the INT32 sentinels (nor is a NaN one kept).
            sm = (s.max_sm_clock_mhz * CLOCK_TOLERANCE).min(BELOW_INT32_BLANK);
            power = (s.max_power_watts * POWER_BOUND_FACTOR).min(BELOW_INT32_BLANK);
            limit = power;
            let memory = s.max_memory_bytes as f64 * MEMORY_TOLERANCE;
            used = memory;
            total = memory;
        }
        // Without a model, a clean power limit (not zero) bounds the power: with one, the
        // model's board limit does, so a reading taken just after an administrator lowered
        // the limit is not blanked. A clean memory total bounds the memory used (a MIG
        // instance's total is its own).
        let read_limit = r
            .value(Field::PowerLimitWatts)
            .filter(|&l| spec.is_none() && 0.0 < l && l <= limit);
        if let Some(l) = read_limit {
            power = (l * POWER_BOUND_FACTOR).min(BELOW_INT32_BLANK);
        }
        let read_total = r
            .value(Field::MemTotalBytes)
            .filter(|&t| MIN_MEMORY_TOTAL_BYTES <= t && t <= total && !is_sentinel(t));
        if let Some(t) = read_total {
            used = t;
        }
        (
            [sm, power, limit, used, total, pcie, pcie, nvlink, nvlink],
            read_limit.is_some(),
            read_total.is_some(),
        )
    }

    /// Where the bound of `field` comes from, for a diagnostic.
    fn why(&self, field: Field, spec: Option<&GpuSpec>) -> String {
        let model = |what: &str| match spec {
            Some(s) => format!("{what} of the {}", s.name),
            None => "the bound without a known model".to_owned(),
        };
        match field {
            Field::PowerWatts if self.power_by_limit => {
                format!("{POWER_BOUND_FACTOR} × the power limit reading")
            }
            Field::PowerWatts | Field::PowerLimitWatts => {
                model(&format!("{POWER_BOUND_FACTOR} × the board limit"))
            }
            Field::SmClockMhz => model(&format!("{CLOCK_TOLERANCE} × the maximum clock")),
            Field::MemUsedBytes if self.used_by_total => "the memory total reading".to_owned(),
            Field::MemUsedBytes | Field::MemTotalBytes => {
                model(&format!("{MEMORY_TOLERANCE} × the memory"))
            }
            Field::PcieRxBytesPerSec | Field::PcieTxBytesPerSec => model(&format!(
                "{LINK_TOLERANCE} × the PCIe host link's rate each way"
            )),
            Field::NvlinkRxBytesPerSec | Field::NvlinkTxBytesPerSec => model(&format!(
                "{LINK_TOLERANCE} × the NVLink rate each way (half the bidirectional peak)"
            )),
            _ => "the physical bound".to_owned(),
        }
    }
}

/// The bounds of a model's link traffic, each way, B/s (`CLEAN_MAX`'s without a model, or
/// for NVLink without one on the model): [`LINK_TOLERANCE`] × its PCIe host link's rate,
/// and × half its NVLink peak. The rate of the link read at the window's end is no bound: a
/// link trained down at idle reads a lower generation than the window's traffic ran at. The
/// model's links are looked up only for a row `r` with link traffic.
fn link_bounds(r: &Readings, spec: Option<&GpuSpec>) -> (f64, f64) {
    let link = spec
        .filter(|_| r.any_filled(LINK_FIELDS))
        .and_then(GpuSpec::interconnect);
    let pcie = link
        .and_then(|l| crate::causes::pcie_bytes_per_sec(l.pcie_gen, l.pcie_lanes))
        .map_or(CLEAN_MAX[Field::PcieRxBytesPerSec as usize], |c| {
            c * LINK_TOLERANCE
        });
    let nvlink = link
        .and_then(|l| l.nvlink_bytes_per_sec)
        .filter(|p| *p > 0.0)
        .map_or(CLEAN_MAX[Field::NvlinkRxBytesPerSec as usize], |p| {
            p / 2.0 * LINK_TOLERANCE
        });
    (pcie, nvlink)
}

/// The DRAM activity below which ρ divides by this floor instead; where the compute term
/// is below it too, there is no ρ.
pub(crate) const RHO_FLOOR: f64 = 0.02;

/// The most power a row's board can draw, W: [`POWER_BOUND_FACTOR`] × the model's board limit
/// (or the row's own limit reading without a model, or [`GENERIC_MAX_POWER_WATTS`]), the bound
/// a power reading is held to, and so an energy counter's moves.
pub(crate) fn power_bound(r: &Readings, spec: Option<&GpuSpec>) -> f64 {
    Bounds::row(r, spec).0[1]
}

/// Inputs to [`window`] beyond the readings themselves.
#[derive(Debug, Clone, Copy, Default)]
pub struct WindowContext<'a> {
    /// The model's datasheet values, when the model is known.
    pub spec: Option<&'a GpuSpec>,
    /// Window-average power from the energy counter, when it could be computed.
    pub energy_power_watts: Option<f64>,
    /// Idle power to use for the power proxy.
    pub idle_power_watts: Option<f64>,
    /// Clock-event reasons in the window.
    pub throttles: Option<Throttles>,
    /// Whether the readings' activity ratios are the cumulative cycle counters' deltas over
    /// the window (the [`Fidelity::Cumulative`] tier).
    pub activity_from_counters: bool,
}

fn clamp01(x: f64) -> f64 {
    x.clamp(0.0, 1.0)
}

/// A reading as a diagnostic quotes it: as written, but in exponent form from 1e15 up and
/// below 1e-6, so that a 309-digit value (`1e308`, a sentinel) or a denormal (`5e-324`) is
/// not spelled out digit by digit.
fn shown(v: f64) -> String {
    if v.is_finite() && (v.abs() >= 1e15 || (v != 0.0 && v.abs() < 1e-6)) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// The peak-weighted compute term `C = τ + φ16·P16/P + φ32·P32/P` (`τ` alone without a spec).
#[must_use]
pub fn compute_term(r: &Readings, spec: Option<&GpuSpec>) -> Option<f64> {
    let tau = r.value(Field::TensorActive)?;
    let Some(spec) = spec else {
        return Some(tau);
    };
    let p = spec.bf16_dense_tflops;
    let f16 = r.value(Field::Fp16Active).unwrap_or(0.0) * spec.fp16_tflops / p;
    let f32 = r.value(Field::Fp32Active).unwrap_or(0.0) * spec.fp32_tflops / p;
    Some(clamp01(tau + f16 + f32))
}

/// The largest clock correction a window of `spec` can have: the model's maximum (boost)
/// clock over its reference clock, `f_max / f_ref` (1.082 on H100 SXM, 1.156 on H100 NVL);
/// for a model the catalog does not know, `kappa_max` (1.1 by default), the clamp of κ
/// itself. Never below 1 (every catalog model's maximum clock is at least its reference
/// clock) and never NaN, whatever the configuration.
#[must_use]
pub fn kappa_bound(spec: Option<&GpuSpec>, cfg: &DeriveConfig) -> f64 {
    let ratio = spec
        .filter(|s| s.f_ref_mhz > 0.0)
        .map_or(cfg.kappa_max, |s| s.max_sm_clock_mhz / s.f_ref_mhz);
    // `max` returns 1 for a NaN ratio.
    ratio.max(1.0)
}

/// The upper bound on the effective compute of a window with the compute term `c` but no
/// clock correction: `C × κ_bound` ([`kappa_bound`]), at most 1. Since `C·κ ≤ C·κ_bound`
/// whatever the clock between the lowest and the maximum, it is never below the true ECF;
/// and never below `C` itself. Never NaN.
#[must_use]
pub fn effective_compute_bound(c: f64, spec: Option<&GpuSpec>, cfg: &DeriveConfig) -> f64 {
    let b = c * kappa_bound(spec, cfg);
    // A NaN product (0 × ∞ from a bad configuration) gives 1, a bound still.
    if b.is_nan() { 1.0 } else { b.clamp(0.0, 1.0) }
}

/// The clock correction κ; effective compute where it is measured (`C·κ`); where it is
/// not, the upper bound that stands in for it and what was missing (`docs/derivations.md`,
/// The bound where the clock is missing); and the busiest pipe.
#[inline(always)]
fn effective_compute(
    m: &mut WindowMetrics,
    r: &Readings,
    c: Option<f64>,
    spec: Option<&GpuSpec>,
    cfg: &DeriveConfig,
) {
    m.kappa = match (r.value(Field::SmClockMhz), spec) {
        (Some(f), Some(spec)) if f > 0.0 && spec.f_ref_mhz > 0.0 => {
            // Up to the model's own maximum (f_max / f_ref: 1.082 on H100 SXM, 1.156 on H100
            // NVL), the clamp the bound takes too ([`kappa_bound`]): no clock the part runs
            // at is above it, so a reading over it (the sanitizer lets 10 % past) is read at
            // it, and no measured ECF exceeds the bound of the same window without its
            // clock. min then max, not clamp: no configured bound can panic.
            let cap = kappa_bound(Some(spec), cfg);
            Some((f / spec.f_ref_mhz).min(cap).max(0.0))
        }
        _ => None,
    };
    match (c, m.kappa) {
        (Some(c), Some(k)) => {
            m.effective_compute = Some(clamp01(c * k));
            m.clock_corrected = true;
        }
        (Some(c), None) => {
            m.effective_compute_uncorrected = Some(c);
            // Never the busy fraction here: `u` can lie below `τ·κ` (τ is a share of
            // cycles, `u` of time), and the bound must hold the truth.
            m.effective_compute_upper_bound = Some(effective_compute_bound(c, spec, cfg));
            m.effective_compute_bound_missing = Some(BoundMissing {
                tensor_counter: false,
                sm_clock: r.value(Field::SmClockMhz).is_none_or(|f| f <= 0.0),
                model: spec.is_none(),
            });
        }
        (None, _) => {
            // Tensor work runs only while a kernel is resident, and never above the model's
            // maximum clock: `ECF ≤ u · f_max / f_ref`. Not `u` at the window's mean clock: a
            // GPU idles at a low clock and runs its kernels at a high one, so its busy time
            // runs above the mean (busy half a window at 1980 MHz, idle at 345: u·κ̄ 0.318, the
            // truth up to 0.541); and not the busy fraction alone, below a boosted GPU's truth.
            if let Some(u) = r.value(Field::ReportedUtil) {
                m.effective_compute_upper_bound = Some(effective_compute_bound(u, spec, cfg));
                m.effective_compute_bound_missing = Some(BoundMissing {
                    tensor_counter: true,
                    ..BoundMissing::default()
                });
            }
        }
    }
    if c.is_some() {
        let pipes = [
            Field::TensorActive,
            Field::Fp16Active,
            Field::Fp32Active,
            Field::Fp64Active,
        ];
        m.busiest_pipe = pipes.iter().filter_map(|&f| r.value(f)).reduce(f64::max);
    }
}

/// The fidelity tier readings allow.
#[must_use]
pub fn fidelity(r: &Readings) -> Fidelity {
    if r.value(Field::TensorActive).is_some() {
        Fidelity::Profiling
    } else if r.value(Field::ReportedUtil).is_some()
        && (r.value(Field::PowerWatts).is_some() || r.value(Field::SmClockMhz).is_some())
    {
        Fidelity::Nvml
    } else if r.value(Field::ReportedUtil).is_some() {
        Fidelity::BusyOnly
    } else {
        Fidelity::None
    }
}

/// Derive one window's metrics from sanitized readings. Pure and total.
///
/// ```
/// use truthscale_core::derive::{window, WindowContext, DeriveConfig};
/// use truthscale_core::model::{Field, Readings};
/// let mut r = Readings::default();
/// r.set_value(Field::ReportedUtil, 1.0);
/// r.set_value(Field::SmActive, 1.0 / 132.0);
/// r.set_value(Field::TensorActive, 0.0);
/// r.set_value(Field::DramActive, 0.0);
/// let m = window(&r, &WindowContext::default(), &DeriveConfig::default());
/// assert!(m.spatial_inflation.unwrap() >= 100.0);
/// // No SM clock and no model: the compute term cannot be clock-corrected.
/// assert_eq!(m.effective_compute, None);
/// assert_eq!(m.effective_compute_uncorrected, Some(0.0));
/// ```
#[must_use]
#[inline]
pub fn window(r: &Readings, ctx: &WindowContext<'_>, cfg: &DeriveConfig) -> WindowMetrics {
    let mut m = WindowMetrics::default();
    window_into(&mut m, r, ctx, cfg);
    m
}

/// [`window`], written over `m` (a window derived in place of the one before, without the
/// metrics moved).
#[inline(always)]
pub fn window_into(
    m: &mut WindowMetrics,
    r: &Readings,
    ctx: &WindowContext<'_>,
    cfg: &DeriveConfig,
) {
    let tier = match fidelity(r) {
        Fidelity::Profiling if ctx.activity_from_counters => Fidelity::Cumulative,
        tier => tier,
    };
    *m = WindowMetrics {
        fidelity: Some(tier),
        ..WindowMetrics::default()
    };
    let u = r.value(Field::ReportedUtil);
    let s = r.value(Field::SmActive);
    let d = r.value(Field::DramActive);
    let c = compute_term(r, ctx.spec);
    m.reported_utilization = u;
    effective_compute(m, r, c, ctx.spec, cfg);

    if let (Some(c), Some(d)) = (c, d) {
        m.roofline_saturation = Some(clamp01(c.max(d)));
        m.roofline_saturation_spec = m.effective_compute.map(|ck| clamp01(ck.max(d)));
        if cfg.tau_max > 0.0 && cfg.d_max > 0.0 {
            m.roofline_saturation_practical = Some(clamp01((c / cfg.tau_max).max(d / cfg.d_max)));
        }
        // Two readings both below the floor are no intensity: 0 / 0.02 would read as the
        // most memory-bound window there is, of a GPU whose memory is idle.
        m.rho = (c.max(d) >= RHO_FLOOR).then(|| c / d.max(RHO_FLOOR));
    }

    if let Some(u) = u.filter(|&u| u >= cfg.inflation_min_util) {
        if let Some(ecf) = m.effective_compute {
            m.inflation_gap_points = Some((100.0 * (u - ecf)).max(0.0));
            m.inflation_ratio = Some(u / ecf.max(0.01));
        } else if let Some(bound) = m.effective_compute_upper_bound {
            m.inflation_gap_points_at_least = Some((100.0 * (u - bound)).max(0.0));
        }
        if let Some(s) = s {
            m.spatial_inflation = Some(u / s.max(0.01));
        }
        if let Some(sat) = m.roofline_saturation {
            m.roofline_gap = Some(u - sat);
        }
    }

    m.power_watts = match (ctx.energy_power_watts, r.value(Field::PowerWatts)) {
        (Some(p), _) => Some(Valued {
            value: p,
            method: Method::Derived,
        }),
        (None, Some(p)) => Some(Valued {
            value: p,
            method: Method::Counter,
        }),
        _ => None,
    };
    if c.is_none() {
        let cap = r
            .value(Field::PowerLimitWatts)
            .or(ctx.spec.map(|s| s.max_power_watts));
        let idle = ctx
            .idle_power_watts
            .or(ctx.spec.map(|s| s.idle_power_watts));
        if let (Some(p), Some(cap), Some(idle)) = (m.power_watts, cap, idle)
            && cap > idle
        {
            m.power_proxy = Some(clamp01((p.value - idle) / (cap - idle)));
        }
    }
    if let (Some(used), Some(total)) = (r.value(Field::MemUsedBytes), r.value(Field::MemTotalBytes))
        && total > 0.0
    {
        m.memory_used_fraction = Some(clamp01(used / total));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpus::by_key;

    fn readings(pairs: &[(Field, f64)]) -> Readings {
        let mut r = Readings::default();
        for &(f, v) in pairs {
            r.set_value(f, v);
        }
        r
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    /// Link traffic beyond what the model's links carry is no reading: an H100 SXM's host
    /// link is PCIe Gen5 ×16, 32 GT/s × 16 lanes × 128/130 / 8 = 63.015 GB/s each way
    /// (bound 1.1 × that, 69.317 GB/s); its NVLink 900 GB/s both ways, 450 each (bound
    /// 495). GPM's 100 000 MiB/s received over PCIe (104.858 GB/s) is blanked and counted;
    /// without a model nothing bounds it below the sentinels. By hand.
    #[test]
    fn link_traffic_beyond_the_models_links_is_no_reading() {
        let h100 = by_key("h100-sxm");
        let id = EntityId::default();
        for (f, v, spec, kept) in [
            (Field::PcieRxBytesPerSec, 69.3e9, h100, true),
            (Field::PcieTxBytesPerSec, 69.4e9, h100, false),
            (Field::PcieRxBytesPerSec, 104_857_600_000.0, h100, false),
            (Field::PcieRxBytesPerSec, 104_857_600_000.0, None, true),
            (Field::NvlinkRxBytesPerSec, 494e9, h100, true),
            (Field::NvlinkTxBytesPerSec, 496e9, h100, false),
            (Field::NvlinkRxBytesPerSec, 943_718_400_000.0, h100, false),
        ] {
            let mut r = readings(&[(f, v), (Field::TensorActive, 0.5)]);
            let mut diags = Vec::new();
            sanitize(&mut r, &id, spec, &mut diags);
            assert_eq!(r.value(f).is_some(), kept, "{} = {v}: {diags:?}", f.name());
            assert_eq!(r.value(Field::TensorActive), Some(0.5));
            assert_eq!(diags.len(), usize::from(!kept), "{diags:?}");
            if !kept {
                assert_eq!(diags[0].kind, DiagnosticKind::OutOfRange);
                assert!(diags[0].detail.contains("1.1 ×"), "{diags:?}");
            }
        }
    }

    /// A GPU that reads is on a link that is up, limited to some power, and draws some: a
    /// link generation or width of 0, a power limit of 0 W or a power draw of 0 W, is no
    /// reading, blank and said (each alone); Gen5 ×16 under a 700 W limit drawing 0.5 W
    /// stays (a bound of the physics, not of a datasheet).
    #[test]
    fn a_link_or_power_of_zero_is_no_reading() {
        let h100 = by_key("h100-sxm");
        let id = EntityId::default();
        let all = [
            (Field::PcieLinkGen, 5.0),
            (Field::PcieLinkWidth, 16.0),
            (Field::PowerLimitWatts, 700.0),
            (Field::PowerWatts, 0.5),
        ];
        for (f, _) in all {
            let mut r = readings(&all);
            r.set_value(f, 0.0);
            let mut diags = Vec::new();
            sanitize(&mut r, &id, h100, &mut diags);
            assert_eq!(r.get(f), Reading::Blank, "{}", f.name());
            assert_eq!(diags.len(), 1, "{diags:?}");
            assert_eq!(diags[0].kind, DiagnosticKind::OutOfRange);
            assert_eq!(
                diags[0].detail,
                format!("0 is no {} of a GPU that reads", f.name())
            );
            assert!(
                all.iter()
                    .filter(|&&(g, _)| g != f)
                    .all(|&(g, v)| r.value(g) == Some(v))
            );
        }
        let mut r = readings(&all);
        let mut diags = Vec::new();
        sanitize(&mut r, &id, h100, &mut diags);
        assert!(diags.is_empty(), "{diags:?}");
    }

    /// An SM clock of 0 MHz, or any below 100 MHz, is blank and said, never a clock:
    /// averaged with 1980 MHz, 0 would read 990 MHz and halve κ. 210 MHz, an idle GPU's, is
    /// kept; so is the rest of the row.
    #[test]
    fn a_stopped_sm_clock_is_no_reading() {
        let h100 = by_key("h100-sxm");
        let id = EntityId::default();
        let mut diags = Vec::new();
        let mut r = readings(&[(Field::SmClockMhz, 0.0), (Field::TensorActive, 0.5)]);
        sanitize(&mut r, &id, h100, &mut diags);
        assert_eq!(r.get(Field::SmClockMhz), Reading::Blank);
        assert_eq!(r.value(Field::TensorActive), Some(0.5));
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert_eq!(diags[0].kind, DiagnosticKind::OutOfRange);
        assert_eq!(diags[0].field, Some(Field::SmClockMhz));
        let mut r = readings(&[(Field::SmClockMhz, 210.0)]);
        sanitize(&mut r, &id, h100, &mut diags);
        assert_eq!(r.value(Field::SmClockMhz), Some(210.0));
        assert_eq!(diags.len(), 1);
        // 1 MHz, or a denormal, would take κ to nearly nothing: no reading either, shown
        // as the number it was.
        for (clock, said) in [(1.0, "1 MHz"), (1e-300, "1e-300 MHz"), (99.5, "99.5 MHz")] {
            let mut r = readings(&[(Field::SmClockMhz, clock), (Field::TensorActive, 0.6)]);
            let mut diags = Vec::new();
            sanitize(&mut r, &id, h100, &mut diags);
            assert_eq!(r.get(Field::SmClockMhz), Reading::Blank, "{clock}");
            assert_eq!(r.value(Field::TensorActive), Some(0.6));
            assert_eq!(diags.len(), 1, "{diags:?}");
            assert!(diags[0].detail.starts_with(said), "{diags:?}");
        }
        let mut r = readings(&[(Field::SmClockMhz, MIN_SM_CLOCK_MHZ)]);
        sanitize(&mut r, &id, h100, &mut diags);
        assert_eq!(r.value(Field::SmClockMhz), Some(100.0));
    }

    /// A memory total of 0 (or below 1 MiB) is blank and said, never the GPU's size: the
    /// fleet's sizing divides by it. 80 GiB is kept, and so is the memory used beside it.
    #[test]
    fn a_memory_total_below_a_mebibyte_is_no_reading() {
        let id = EntityId::default();
        for spec in [None, by_key("h100-sxm")] {
            for zero in [0.0, 1000.0] {
                let mut diags = Vec::new();
                let mut r = readings(&[(Field::MemTotalBytes, zero), (Field::MemUsedBytes, 4e10)]);
                sanitize(&mut r, &id, spec, &mut diags);
                assert_eq!(r.get(Field::MemTotalBytes), Reading::Blank);
                assert_eq!(r.value(Field::MemUsedBytes), Some(4e10));
                assert_eq!(diags.len(), 1, "{diags:?}");
                assert_eq!(diags[0].kind, DiagnosticKind::OutOfRange);
                assert_eq!(diags[0].field, Some(Field::MemTotalBytes));
            }
            let mut diags = Vec::new();
            let total = 80.0 * 1_073_741_824.0;
            let mut r = readings(&[(Field::MemTotalBytes, total)]);
            sanitize(&mut r, &id, spec, &mut diags);
            assert_eq!(r.value(Field::MemTotalBytes), Some(total));
            assert!(diags.is_empty(), "{diags:?}");
        }
    }

    /// A code, a flag or a count with a fraction is no reading: a row remap pending 0.5 and
    /// an XID of 79.5 are blank and said; 1 and 79 are kept, and so is a ratio of 0.5 beside
    /// them (it needs no whole number).
    #[test]
    fn a_fraction_of_a_code_flag_or_count_is_no_reading() {
        let id = EntityId::default();
        for (field, bad, good) in [
            (Field::RowRemapPending, 0.5, 1.0),
            (Field::XidLast, 79.5, 79.0),
            (Field::PcieLinkWidth, 15.5, 16.0),
            (Field::XidWindowErrors, 2.25, 3.0),
        ] {
            let mut diags = Vec::new();
            let mut r = readings(&[(field, bad), (Field::SmActive, 0.5)]);
            sanitize(&mut r, &id, None, &mut diags);
            assert_eq!(r.get(field), Reading::Blank, "{field:?}");
            assert_eq!(r.value(Field::SmActive), Some(0.5));
            assert_eq!(diags.len(), 1, "{diags:?}");
            assert_eq!(diags[0].kind, DiagnosticKind::OutOfRange);
            assert_eq!(diags[0].field, Some(field));
            assert!(
                diags[0]
                    .detail
                    .starts_with(&format!("{bad} is not a whole number")),
                "{diags:?}"
            );
            let mut diags = Vec::new();
            let mut r = readings(&[(field, good)]);
            sanitize(&mut r, &id, None, &mut diags);
            assert_eq!(r.value(field), Some(good));
            assert!(diags.is_empty(), "{diags:?}");
        }
    }

    /// A diagnostic quotes a huge reading in exponent form, never spelled out in its 309
    /// digits; an ordinary one as written.
    #[test]
    fn a_huge_reading_is_quoted_in_exponent_form() {
        assert_eq!(shown(1e308), "1e308");
        assert_eq!(shown(-2.5e20), "-2.5e20");
        assert_eq!(shown(1.5), "1.5");
        assert_eq!(shown(8e10), "80000000000");
        assert_eq!(shown(f64::INFINITY), "inf");
        let mut r = readings(&[(Field::PowerWatts, 1e300)]);
        let mut diags = Vec::new();
        sanitize(&mut r, &EntityId::default(), None, &mut diags);
        assert_eq!(diags[0].detail, "1e300", "a sentinel, as read");
    }

    #[test]
    fn one_sm_kernel_is_spatially_inflated_and_computes_nothing() {
        let h100 = by_key("h100-sxm");
        let r = readings(&[
            (Field::ReportedUtil, 1.0),
            (Field::SmActive, 1.0 / 132.0),
            (Field::TensorActive, 0.0),
            (Field::DramActive, 0.0),
            (Field::SmClockMhz, 1980.0),
        ]);
        let ctx = WindowContext {
            spec: h100,
            ..Default::default()
        };
        let m = window(&r, &ctx, &DeriveConfig::default());
        // SM active 1/132 = 0.0076 is under the 0.01 floor: 1 / 0.01 = 100 exactly.
        assert!(close(m.spatial_inflation, 100.0));
        assert!(close(m.effective_compute, 0.0));
        assert!(close(m.inflation_gap_points, 100.0));
        assert!(close(m.inflation_ratio, 100.0));
        assert_eq!(m.fidelity, Some(Fidelity::Profiling));
    }

    #[test]
    fn ecf_is_clock_corrected_tensor_activity() {
        let h100 = by_key("h100-sxm").unwrap();
        // τ = 0.5 at 1464 MHz: κ = 1464/1830 = 0.8, ECF = 0.4.
        let r = readings(&[
            (Field::ReportedUtil, 1.0),
            (Field::TensorActive, 0.5),
            (Field::DramActive, 0.2),
            (Field::SmClockMhz, 1464.0),
        ]);
        let ctx = WindowContext {
            spec: Some(h100),
            ..Default::default()
        };
        let m = window(&r, &ctx, &DeriveConfig::default());
        assert!(close(m.kappa, 0.8));
        assert!(close(m.effective_compute, 0.4));
        assert!(m.clock_corrected);
        assert!(close(m.roofline_saturation, 0.5));
        assert!(close(m.roofline_saturation_spec, 0.4));
        assert!(close(m.roofline_saturation_practical, 0.5 / 0.9));
        assert!(close(m.rho, 2.5));
        assert!(close(m.inflation_gap_points, 60.0));
        assert!(close(m.inflation_ratio, 2.5));
        assert!(close(m.roofline_gap, 0.5));
    }

    /// The FP16 and FP32 pipes count in the compute term weighted by their peaks over the
    /// tensor peak (H100 SXM: 134 and 67 over 989 TFLOP/s, typed in), and ρ and the
    /// saturation read that term, uncorrected by the clock:
    /// decode, τ 0.02, φ16 0.01, φ32 0.03, d 0.6: C = 0.02 + 0.01 × 134/989 + 0.03 × 67/989
    /// = 0.023 387, ρ = C / 0.6 = 0.038 979, S = 0.6;
    /// prefill, τ 0.5, φ16 0.02, φ32 0.05, d 0.2: C = 0.506 097, ρ = 2.530 485 (τ/d alone
    /// would be 2.5), S = C; at 1980 MHz ECF = C × 1980/1830 = 0.547 580.
    #[test]
    fn the_pipes_count_in_rho_and_saturation_by_their_peaks() {
        let h100 = crate::gpus::by_key("h100-sxm").unwrap();
        let ctx = WindowContext {
            spec: Some(h100),
            ..Default::default()
        };
        let m = |tau: f64, f16: f64, f32: f64, d: f64| {
            let r = readings(&[
                (Field::TensorActive, tau),
                (Field::Fp16Active, f16),
                (Field::Fp32Active, f32),
                (Field::DramActive, d),
                (Field::SmClockMhz, 1980.0),
            ]);
            window(&r, &ctx, &DeriveConfig::default())
        };
        let near = |x: Option<f64>, want: f64| x.is_some_and(|x| (x - want).abs() < 5e-7);
        let decode = m(0.02, 0.01, 0.03, 0.6);
        assert!(near(decode.rho, 0.038_979), "{decode:?}");
        assert!(near(decode.roofline_saturation, 0.6), "{decode:?}");
        // ECF = C × 1980/1830 = 0.025 304.
        assert!(near(decode.effective_compute, 0.025_304), "{decode:?}");
        let prefill = m(0.5, 0.02, 0.05, 0.2);
        assert!(near(prefill.rho, 2.530_485), "{prefill:?}");
        assert!(near(prefill.roofline_saturation, 0.506_097), "{prefill:?}");
        assert!(near(prefill.effective_compute, 0.547_580), "{prefill:?}");
    }

    /// ρ is the compute term over the DRAM activity floored at 0.02: 0.1 over an idle
    /// memory is 5; a window whose compute and memory are both below the floor has none
    /// (not 0, the most memory-bound reading).
    #[test]
    fn rho_needs_either_side_busy() {
        let ctx = WindowContext::default();
        let rho = |tau: f64, dram: f64| {
            let r = readings(&[(Field::TensorActive, tau), (Field::DramActive, dram)]);
            window(&r, &ctx, &DeriveConfig::default()).rho
        };
        assert!(close(rho(0.1, 0.0), 5.0));
        assert!(close(rho(0.0, 0.5), 0.0));
        assert!(close(rho(0.01, 0.02), 0.5));
        assert_eq!(rho(0.0, 0.0), None);
        assert_eq!(rho(0.019, 0.019), None);
    }

    #[test]
    fn without_a_clock_the_compute_term_is_uncorrected_and_no_ecf() {
        let r = readings(&[(Field::TensorActive, 0.3), (Field::DramActive, 0.6)]);
        let m = window(&r, &WindowContext::default(), &DeriveConfig::default());
        assert_eq!(m.effective_compute, None);
        assert!(close(m.effective_compute_uncorrected, 0.3));
        assert!(!m.clock_corrected);
        assert!(m.compute_measured());
        // A known model without an SM-clock reading is uncorrected too.
        let h100 = by_key("h100-sxm").unwrap();
        let ctx = WindowContext {
            spec: Some(h100),
            ..WindowContext::default()
        };
        let m = window(&r, &ctx, &DeriveConfig::default());
        assert_eq!(m.effective_compute, None);
        assert!(close(m.effective_compute_uncorrected, 0.3));
        assert!(close(m.rho, 0.5));
        // Saturation at the clocks it ran is max(0.3, 0.6); against the datasheet it needs
        // κ, as the ECF does: none, not max(0.3, 0.6) under its name.
        assert!(close(m.roofline_saturation, 0.6));
        assert_eq!(m.roofline_saturation_spec, None);
        // No busy flag: inflation is not defined.
        assert_eq!(m.inflation_gap_points, None);
    }

    /// A window with the tensor counter and no SM clock gets the tightest upper bound: the
    /// compute term times the model's maximum over reference clock (H100 SXM: 1980 and
    /// 1830 MHz in the catalog), or × 1.1 (`kappa_max`) for a model the catalog does not
    /// know; the measured ECF never moves to the bound's name, and a window with a clock
    /// is unchanged.
    #[test]
    fn without_a_clock_the_bound_is_the_maximum_clock_over_the_reference() {
        let h100 = by_key("h100-sxm");
        let cfg = DeriveConfig::default();
        let ctx = WindowContext {
            spec: h100,
            ..WindowContext::default()
        };
        let r = readings(&[(Field::ReportedUtil, 0.9), (Field::TensorActive, 0.2)]);
        let m = window(&r, &ctx, &cfg);
        assert_eq!(m.effective_compute, None);
        assert_eq!(m.effective_compute_uncorrected, Some(0.2));
        assert_eq!(
            m.effective_compute_upper_bound,
            Some(0.2 * (1980.0 / 1830.0))
        );
        let only_clock = BoundMissing {
            sm_clock: true,
            ..BoundMissing::default()
        };
        assert_eq!(m.effective_compute_bound_missing, Some(only_clock));
        // The gap is at least u − bound: 100 × (0.9 − 0.2 × 1980 / 1830) = 68.36… points.
        assert_eq!(
            m.inflation_gap_points_at_least,
            Some(100.0 * (0.9 - 0.2 * (1980.0 / 1830.0)))
        );
        assert_eq!(m.inflation_gap_points, None);
        // Never the busy fraction where the tensor counter exists: u = 0.2 is below the
        // bound, and the truth at the maximum clock would be above it.
        let r = readings(&[(Field::ReportedUtil, 0.2), (Field::TensorActive, 0.2)]);
        let m = window(&r, &ctx, &cfg);
        assert_eq!(
            m.effective_compute_upper_bound,
            Some(0.2 * (1980.0 / 1830.0))
        );
        assert_eq!(m.inflation_gap_points_at_least, Some(0.0));
        // The FP32 pipe counts, peak-weighted: C = 0.2 + 0.5 × 67 / 989.
        let r = readings(&[(Field::TensorActive, 0.2), (Field::Fp32Active, 0.5)]);
        let m = window(&r, &ctx, &cfg);
        let c = 0.2 + 0.5 * 67.0 / 989.0;
        assert!(close(
            m.effective_compute_upper_bound,
            c * (1980.0 / 1830.0)
        ));
        // A bound at most 1: τ = 0.95 × 1.082 = 1.028.
        let r = readings(&[(Field::TensorActive, 0.95)]);
        assert_eq!(
            window(&r, &ctx, &cfg).effective_compute_upper_bound,
            Some(1.0)
        );
        // H100 NVL: 1785 / 1544, above the κ clamp of 1.1: the bound holds the truth.
        let nvl = WindowContext {
            spec: by_key("h100-nvl"),
            ..WindowContext::default()
        };
        let r = readings(&[(Field::TensorActive, 0.5)]);
        let m = window(&r, &nvl, &cfg);
        assert_eq!(
            m.effective_compute_upper_bound,
            Some(0.5 * (1785.0 / 1544.0))
        );
    }

    #[test]
    fn an_unknown_model_is_bounded_by_kappa_max() {
        let cfg = DeriveConfig::default();
        assert_eq!(cfg.kappa_max, 1.1);
        let none = WindowContext::default();
        // No model and no clock: both missing, τ × 1.1.
        let r = readings(&[(Field::ReportedUtil, 0.5), (Field::TensorActive, 0.3)]);
        let m = window(&r, &none, &cfg);
        assert_eq!(m.effective_compute, None);
        assert_eq!(m.effective_compute_upper_bound, Some(0.3 * 1.1));
        let both = BoundMissing {
            tensor_counter: false,
            sm_clock: true,
            model: true,
        };
        assert_eq!(m.effective_compute_bound_missing, Some(both));
        assert_eq!(
            m.inflation_gap_points_at_least,
            Some(100.0 * (0.5 - 0.3 * 1.1))
        );
        // A clock but no model: only the model is missing (no f_ref to divide by).
        let r = readings(&[(Field::TensorActive, 0.3), (Field::SmClockMhz, 1700.0)]);
        let m = window(&r, &none, &cfg);
        assert_eq!(m.kappa, None);
        assert_eq!(m.effective_compute_upper_bound, Some(0.3 * 1.1));
        let model = BoundMissing {
            model: true,
            ..BoundMissing::default()
        };
        assert_eq!(m.effective_compute_bound_missing, Some(model));
        // kappa_max is the configured one.
        let wide = DeriveConfig {
            kappa_max: 1.3,
            ..DeriveConfig::default()
        };
        let r = readings(&[(Field::TensorActive, 0.5)]);
        assert_eq!(
            window(&r, &none, &wide).effective_compute_upper_bound,
            Some(0.5 * 1.3)
        );
    }

    #[test]
    fn a_measured_window_has_no_bound_and_no_tensor_means_the_busy_flag() {
        let ctx = WindowContext {
            spec: by_key("h100-sxm"),
            ..WindowContext::default()
        };
        // τ = 0.5 at 1464 MHz: ECF = 0.5 × 1464 / 1830 = 0.4, as before; no bound.
        let r = readings(&[
            (Field::ReportedUtil, 1.0),
            (Field::TensorActive, 0.5),
            (Field::SmClockMhz, 1464.0),
        ]);
        let m = window(&r, &ctx, &DeriveConfig::default());
        assert!(close(m.effective_compute, 0.4));
        assert_eq!(m.effective_compute_upper_bound, None);
        assert_eq!(m.effective_compute_bound_missing, None);
        assert_eq!(m.inflation_gap_points_at_least, None);
        assert!(close(m.inflation_gap_points, 60.0));
        // No tensor counter: the busy fraction at the model's maximum clock, whatever the
        // window's mean clock (tensor cycles run only while a kernel is resident; the H100
        // SXM boosts to 1980 MHz, its peak quoted at 1830). A window busy for its first
        // half at 1980 MHz with the tensor pipe full, idle for the second at 345 MHz: u 0.5,
        // mean clock 1162.5 MHz, effective compute 0.5 × 1980 / 1830 = 0.541 (by hand). The
        // bound holds it; the busy fraction at the mean clock (0.318) would not.
        let r = readings(&[(Field::ReportedUtil, 0.5), (Field::SmClockMhz, 1162.5)]);
        let m = window(&r, &ctx, &DeriveConfig::default());
        assert!(close(
            m.effective_compute_upper_bound,
            0.5 * 1980.0 / 1830.0
        ));
        let tensor = BoundMissing {
            tensor_counter: true,
            ..BoundMissing::default()
        };
        assert_eq!(m.effective_compute_bound_missing, Some(tensor));
        // The busy fraction is below its bound: no gap can be claimed.
        assert_eq!(m.inflation_gap_points_at_least, Some(0.0));
        // Nothing at all: no bound.
        let m = window(&Readings::default(), &ctx, &DeriveConfig::default());
        assert_eq!(m.effective_compute_upper_bound, None);
        assert_eq!(m.effective_compute_bound_missing, None);
    }

    /// For random compute activity, pipes and a random true clock between a floor of
    /// 210 MHz and the model's maximum, the bound of the window without the clock holds the
    /// true ECF, `clamp01(C × f / f_ref)` computed here, and the ECF `window` gives when
    /// the clock is read; and it is never below `τ` (so never below `τ × κ_min` whatever the
    /// lowest clock, at most `f_ref` on every catalog model).
    #[test]
    fn the_bound_holds_the_truth_at_any_clock_up_to_the_maximum() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(33);
        let cfg = DeriveConfig::default();
        for _ in 0..20_000 {
            let spec = &crate::gpus::CATALOG[rng.random_range(0..crate::gpus::CATALOG.len())];
            let tau: f64 = rng.random_range(0.0..=1.0);
            let fp16: f64 = rng.random_range(0.0..=0.3);
            let fp32: f64 = rng.random_range(0.0..=0.3);
            let f: f64 = rng.random_range(210.0..=spec.max_sm_clock_mhz);
            let c = (tau
                + fp16 * spec.fp16_tflops / spec.bf16_dense_tflops
                + fp32 * spec.fp32_tflops / spec.bf16_dense_tflops)
                .min(1.0);
            let truth = (c * f / spec.f_ref_mhz).min(1.0);
            let pipes = [
                (Field::TensorActive, tau),
                (Field::Fp16Active, fp16),
                (Field::Fp32Active, fp32),
            ];
            let ctx = WindowContext {
                spec: Some(spec),
                ..WindowContext::default()
            };
            let b = window(&readings(&pipes), &ctx, &cfg)
                .effective_compute_upper_bound
                .unwrap();
            assert!(
                b >= truth - 1e-12,
                "{} τ {tau} f {f}: {b} < {truth}",
                spec.key
            );
            assert!(b >= tau, "{} τ {tau}: {b}", spec.key);
            let mut clocked = readings(&pipes);
            clocked.set_value(Field::SmClockMhz, f);
            let ecf = window(&clocked, &ctx, &cfg).effective_compute.unwrap();
            assert!(b >= ecf, "{} τ {tau} f {f}: {b} < ECF {ecf}", spec.key);
        }
        // An unknown model whose maximum clock is at most 1.1 × its reference clock.
        for _ in 0..5_000 {
            let tau: f64 = rng.random_range(0.0..=1.0);
            let kappa: f64 = rng.random_range(0.1..=1.1);
            let r = readings(&[(Field::TensorActive, tau)]);
            let b = window(&r, &WindowContext::default(), &cfg)
                .effective_compute_upper_bound
                .unwrap();
            assert!(
                b >= (tau * kappa).min(1.0) - 1e-12,
                "τ {tau} κ {kappa}: {b}"
            );
        }
    }

    #[test]
    fn decode_is_not_roofline_inflated() {
        let h100 = by_key("h100-sxm").unwrap();
        let r = readings(&[
            (Field::ReportedUtil, 1.0),
            (Field::TensorActive, 0.01),
            (Field::DramActive, 0.6),
            (Field::SmClockMhz, h100.f_ref_mhz),
        ]);
        let ctx = WindowContext {
            spec: Some(h100),
            ..WindowContext::default()
        };
        let m = window(&r, &ctx, &DeriveConfig::default());
        assert!(close(m.roofline_saturation, 0.6));
        assert!(close(m.roofline_gap, 0.4));
        assert!(close(m.inflation_gap_points, 99.0));
        assert!(close(m.roofline_saturation_practical, 0.75));
    }

    #[test]
    fn nvml_tier_gives_bound_and_power_proxy() {
        let h100 = by_key("h100-sxm").unwrap();
        let r = readings(&[
            (Field::ReportedUtil, 0.9),
            (Field::PowerWatts, 380.0),
            (Field::SmClockMhz, 1900.0),
        ]);
        let ctx = WindowContext {
            spec: Some(h100),
            ..Default::default()
        };
        let m = window(&r, &ctx, &DeriveConfig::default());
        assert_eq!(m.fidelity, Some(Fidelity::Nvml));
        assert_eq!(m.effective_compute, None);
        // The busy fraction at the model's maximum clock: 0.9 × 1980 / 1830 MHz.
        assert!(close(
            m.effective_compute_upper_bound,
            0.9 * 1980.0 / 1830.0
        ));
        // (380 − 75) / (700 − 75) = 0.488
        assert!(close(m.power_proxy, 305.0 / 625.0));
        assert_eq!(m.inflation_gap_points, None);
        let busy_only = readings(&[(Field::ReportedUtil, 0.9)]);
        assert_eq!(fidelity(&busy_only), Fidelity::BusyOnly);
        assert_eq!(fidelity(&Readings::default()), Fidelity::None);
    }

    #[test]
    fn energy_power_beats_the_gauge() {
        let r = readings(&[(Field::PowerWatts, 300.0)]);
        let ctx = WindowContext {
            energy_power_watts: Some(310.0),
            ..Default::default()
        };
        let m = window(&r, &ctx, &DeriveConfig::default());
        assert_eq!(
            m.power_watts,
            Some(Valued {
                value: 310.0,
                method: Method::Derived
            })
        );
        // Without the energy counter's power, the gauge, marked as such.
        let m = window(&r, &WindowContext::default(), &DeriveConfig::default());
        assert_eq!(
            m.power_watts,
            Some(Valued {
                value: 300.0,
                method: Method::Counter
            })
        );
    }

    #[test]
    fn non_tensor_pipes_are_peak_weighted() {
        let h100 = by_key("h100-sxm").unwrap();
        let r = readings(&[(Field::TensorActive, 0.0), (Field::Fp32Active, 0.5)]);
        let c = compute_term(&r, Some(h100)).unwrap();
        assert!((c - 0.5 * 67.0 / 989.0).abs() < 1e-12);
    }

    /// Every DCGM/NVML sentinel as `f64` (the INT64 ones round to the same double).
    fn sentinels() -> Vec<f64> {
        let mut v: Vec<f64> = (0x7fff_fff0_u32..=0x7fff_ffff).map(f64::from).collect();
        v.push(f64::from(u32::MAX));
        v.extend((0x7fff_ffff_ffff_fff0_u64..=0x7fff_ffff_ffff_fff3).map(|x| x as f64));
        v.extend((0..4).map(|i| SENTINEL_FLOOR + f64::from(i)));
        v.push(u64::MAX as f64);
        v
    }

    /// A clean row for `spec` (or an unknown model).
    fn plausible(spec: Option<&GpuSpec>) -> Readings {
        let mut r = Readings::default();
        for &f in Field::ALL {
            if f.is_ratio() {
                r.set_value(f, 0.5);
            }
        }
        let limit = spec.map_or(300.0, |s| s.max_power_watts);
        let total = spec.map_or(80e9, |s| s.memory_bytes as f64);
        for (f, v) in [
            (Field::SmClockMhz, 1200.0),
            (Field::MemClockMhz, 1593.0),
            (Field::PowerWatts, limit / 2.0),
            (Field::PowerLimitWatts, limit),
            (Field::EnergyJoules, 123_456_789.0),
            (Field::MemUsedBytes, total / 2.0),
            (Field::MemTotalBytes, total),
            (Field::PcieTxBytesPerSec, 1e9),
            (Field::PcieRxBytesPerSec, 2e9),
            // Within every model's NVLink each way (the A30's bridge: 100 GB/s).
            (Field::NvlinkTxBytesPerSec, 3e10),
            (Field::NvlinkRxBytesPerSec, 4e10),
            (Field::TempCelsius, 55.0),
        ] {
            r.set_value(f, v);
        }
        r
    }

    fn specs() -> Vec<Option<&'static GpuSpec>> {
        std::iter::once(None)
            .chain(crate::gpus::CATALOG.iter().map(Some))
            .collect()
    }

    #[test]
    fn a_cycle_counter_past_the_fp64_blank_is_a_reading() {
        // Days of uptime: an H100's SM cycles elapsed pass 2^47 within minutes of boot.
        let values = [
            SENTINEL_FLOOR,
            SENTINEL_FLOOR * 3.0,
            INT32_BLANK,
            f64::from(u32::MAX),
            1.0e18,
        ];
        for &f in Field::ALL.iter().filter(|f| f.is_cycle_counter()) {
            for v in values {
                let mut r = Readings::default();
                r.set_value(f, v);
                let mut d = Vec::new();
                sanitize(&mut r, &EntityId::default(), None, &mut d);
                assert_eq!(r.get(f), Reading::Value(v), "{} = {v}", f.name());
                assert!(d.is_empty(), "{d:?}");
            }
            for v in [INT64_BLANK, u64::MAX as f64] {
                let mut r = Readings::default();
                r.set_value(f, v);
                let mut d = Vec::new();
                sanitize(&mut r, &EntityId::default(), None, &mut d);
                assert_eq!(r.get(f), Reading::Blank, "{} = {v}", f.name());
                assert_eq!(d[0].kind, DiagnosticKind::Sentinel);
            }
        }
        // Every other field keeps the FP64 blank rule.
        assert!(is_sentinel_of(Field::TensorActive, SENTINEL_FLOOR));
        assert!(!is_sentinel_of(Field::MmaCyclesActive, SENTINEL_FLOOR));
    }

    #[test]
    fn every_sentinel_in_every_field_is_blank() {
        for spec in specs() {
            let clean = plausible(spec);
            let mut r = clean;
            let mut d = Vec::new();
            sanitize(&mut r, &EntityId::default(), spec, &mut d);
            assert!(d.is_empty(), "{spec:?}: {d:?}");
            for &f in Field::ALL {
                // A cumulative counter's blanks are the INT64 ones alone.
                let of_type = |v: &f64| !f.is_int64_counter() || *v >= INT64_BLANK;
                for v in sentinels().into_iter().filter(of_type) {
                    assert!(is_sentinel(v), "{v}");
                    let mut r = clean;
                    r.set_value(f, v);
                    let mut d = Vec::new();
                    sanitize(&mut r, &EntityId::default(), spec, &mut d);
                    assert_eq!(r.get(f), Reading::Blank, "{} = {v}", f.name());
                    assert_eq!(d.len(), 1, "{} = {v}: {d:?}", f.name());
                    assert_eq!(d[0].kind, DiagnosticKind::Sentinel, "{} = {v}", f.name());
                    assert_eq!(d[0].field, Some(f));
                    // Nothing else changed.
                    for &g in Field::ALL.iter().filter(|&&g| g != f) {
                        assert_eq!(r.get(g), clean.get(g), "{} = {v}", f.name());
                    }
                }
            }
        }
        // Next to the sentinels, not one.
        for v in [
            2_147_483_631.0,
            2_147_483_648.0,
            4_294_967_294.0,
            2_147_483_640.5,
        ] {
            assert!(!is_sentinel(v), "{v}");
        }
    }

    #[test]
    fn impossible_power_is_out_of_range() {
        let h100 = by_key("h100-sxm");
        for (spec, limit) in [
            (None, None),
            (h100, None),
            (None, Some(700.0)),
            (h100, Some(700.0)),
        ] {
            let mut r = readings(&[(Field::PowerWatts, 4_294_967_294.0)]);
            if let Some(l) = limit {
                r.set_value(Field::PowerLimitWatts, l);
            }
            let mut d = Vec::new();
            sanitize(&mut r, &EntityId::default(), spec, &mut d);
            assert_eq!(r.get(Field::PowerWatts), Reading::Blank);
            assert_eq!(r.value(Field::PowerLimitWatts), limit);
            assert_eq!(d.len(), 1, "{d:?}");
            assert_eq!(d[0].kind, DiagnosticKind::OutOfRange);
            assert_eq!(d[0].field, Some(Field::PowerWatts));
            let m = window(
                &r,
                &WindowContext {
                    spec,
                    ..Default::default()
                },
                &DeriveConfig::default(),
            );
            assert_eq!(m.power_watts, None);
        }
        // Without a model, the row's own limit bounds the power: 2 × 300 W.
        let mut r = readings(&[(Field::PowerWatts, 650.0), (Field::PowerLimitWatts, 300.0)]);
        let mut d = Vec::new();
        sanitize(&mut r, &EntityId::default(), None, &mut d);
        assert_eq!(r.get(Field::PowerWatts), Reading::Blank);
        assert!(d[0].to_string().contains("power limit reading"), "{}", d[0]);
        // With one, the model's board limit does (the limit may just have been lowered).
        let mut r = readings(&[(Field::PowerWatts, 650.0), (Field::PowerLimitWatts, 300.0)]);
        let mut d = Vec::new();
        sanitize(&mut r, &EntityId::default(), by_key("h100-sxm"), &mut d);
        assert_eq!(r.value(Field::PowerWatts), Some(650.0));
        assert!(d.is_empty(), "{d:?}");
        // An impossible limit is blank itself, and the power is bounded by the model's.
        let mut r = readings(&[
            (Field::PowerWatts, 650.0),
            (Field::PowerLimitWatts, 4_294_967_294.0),
        ]);
        let mut d = Vec::new();
        sanitize(&mut r, &EntityId::default(), by_key("h100-sxm"), &mut d);
        assert_eq!(r.value(Field::PowerWatts), Some(650.0));
        assert_eq!(r.get(Field::PowerLimitWatts), Reading::Blank);
        assert_eq!(d[0].kind, DiagnosticKind::OutOfRange);
        assert_eq!(GENERIC_MAX_POWER_WATTS, 2000.0);
    }

    #[test]
    fn kappa_reaches_the_models_maximum_and_no_further() {
        // H100 NVL: reference 1544 MHz, boost up to 1785 (its datasheet): κ up to 1.156,
        // above the default clamp of 1.1. At 1785 MHz with tensor activity 0.6 the GPU
        // delivers 0.6 × 1785 / 1544 of its peak.
        let ctx = WindowContext {
            spec: by_key("h100-nvl"),
            ..Default::default()
        };
        let r = readings(&[
            (Field::ReportedUtil, 1.0),
            (Field::TensorActive, 0.6),
            (Field::SmClockMhz, 1785.0),
        ]);
        let m = window(&r, &ctx, &DeriveConfig::default());
        assert!(close(m.kappa, 1785.0 / 1544.0), "{:?}", m.kappa);
        assert!(close(m.effective_compute, 0.6 * 1785.0 / 1544.0));
        // A reading above the model's maximum (2100 MHz on an H100 SXM, whose maximum is
        // 1980: within the sanitizer's 10 % tolerance) is read at the maximum, 1980 / 1830,
        // not at kappa_max's 1.1: no measured ECF exceeds the bound the same window gets
        // without its clock (it used to: 0.9 × 1.1 = 0.99 measured against a bound of
        // 0.9 × 1.082 = 0.974).
        let ctx = WindowContext {
            spec: by_key("h100-sxm"),
            ..Default::default()
        };
        let r = readings(&[(Field::TensorActive, 0.9), (Field::SmClockMhz, 2100.0)]);
        let m = window(&r, &ctx, &DeriveConfig::default());
        assert!(close(m.kappa, 1980.0 / 1830.0), "{:?}", m.kappa);
        let unclocked = window(
            &readings(&[(Field::TensorActive, 0.9)]),
            &ctx,
            &DeriveConfig::default(),
        );
        let bound = unclocked.effective_compute_upper_bound.unwrap();
        assert!(close(Some(bound), 0.9 * 1980.0 / 1830.0), "{bound}");
        assert!(m.effective_compute.unwrap() <= bound);
    }

    #[test]
    fn impossible_sm_clock_is_blank_and_gives_no_kappa() {
        let h100 = by_key("h100-sxm");
        for v in [4_294_967_294.0, 2200.0] {
            let mut r = readings(&[
                (Field::ReportedUtil, 1.0),
                (Field::TensorActive, 0.5),
                (Field::SmClockMhz, v),
            ]);
            let mut d = Vec::new();
            sanitize(&mut r, &EntityId::default(), h100, &mut d);
            assert_eq!(r.get(Field::SmClockMhz), Reading::Blank, "{v}");
            assert_eq!(d.len(), 1);
            assert_eq!(d[0].kind, DiagnosticKind::OutOfRange);
            let ctx = WindowContext {
                spec: h100,
                ..Default::default()
            };
            let m = window(&r, &ctx, &DeriveConfig::default());
            assert_eq!(m.kappa, None);
            assert!(!m.clock_corrected);
            // Without a clock the tensor activity is not an effective compute fraction.
            assert_eq!(m.effective_compute, None);
            assert!(close(m.effective_compute_uncorrected, 0.5));
        }
        // Without a model, only the generic bound.
        let mut r = readings(&[(Field::SmClockMhz, 4_294_967_294.0)]);
        let mut d = Vec::new();
        sanitize(&mut r, &EntityId::default(), None, &mut d);
        assert_eq!(r.get(Field::SmClockMhz), Reading::Blank);
        let mut r = readings(&[(Field::SmClockMhz, 2200.0)]);
        sanitize(&mut r, &EntityId::default(), None, &mut d);
        assert_eq!(r.value(Field::SmClockMhz), Some(2200.0));
    }

    #[test]
    fn plausible_values_up_to_each_bound_stay() {
        for spec in specs() {
            let name = spec.map_or("unknown", |s| s.key);
            let base = plausible(spec);
            let limit = base.value(Field::PowerLimitWatts).unwrap();
            let total = base.value(Field::MemTotalBytes).unwrap();
            let model_power = spec.map_or(GENERIC_MAX_POWER_WATTS, |s| {
                s.max_power_watts * POWER_BOUND_FACTOR
            });
            let model_memory = spec.map_or(GENERIC_MAX_MEMORY_BYTES, |s| {
                s.max_memory_bytes as f64 * MEMORY_TOLERANCE
            });
            let sm = spec.map_or(GENERIC_MAX_SM_CLOCK_MHZ, |s| {
                s.max_sm_clock_mhz * CLOCK_TOLERANCE
            });
            // (field, bound, field blanked in the row first)
            let cases = [
                (Field::SmClockMhz, sm, None),
                (Field::MemClockMhz, GENERIC_MAX_MEM_CLOCK_MHZ, None),
                (Field::PowerWatts, limit * POWER_BOUND_FACTOR, None),
                (Field::PowerWatts, model_power, Some(Field::PowerLimitWatts)),
                (Field::PowerLimitWatts, model_power, None),
                (Field::MemUsedBytes, total, None),
                (
                    Field::MemUsedBytes,
                    model_memory,
                    Some(Field::MemTotalBytes),
                ),
                (
                    Field::MemTotalBytes,
                    model_memory,
                    Some(Field::MemUsedBytes),
                ),
                (Field::TempCelsius, MAX_TEMP_CELSIUS, None),
            ];
            for (f, bound, without) in cases {
                let mut row = base;
                if let Some(g) = without {
                    row.set(g, Reading::Unsupported);
                }
                for v in [bound * 0.999, bound] {
                    let mut r = row;
                    r.set_value(f, v);
                    let mut d = Vec::new();
                    sanitize(&mut r, &EntityId::default(), spec, &mut d);
                    assert!(d.is_empty(), "{name} {} = {v}: {d:?}", f.name());
                    assert_eq!(r, {
                        let mut x = row;
                        x.set_value(f, v);
                        x
                    });
                }
                let v = bound.next_up();
                let mut r = row;
                r.set_value(f, v);
                let mut d = Vec::new();
                sanitize(&mut r, &EntityId::default(), spec, &mut d);
                assert_eq!(r.get(f), Reading::Blank, "{name} {} = {v}", f.name());
                let kinds: Vec<_> = d.iter().map(|d| (d.kind, d.field)).collect();
                assert_eq!(
                    kinds,
                    vec![(DiagnosticKind::OutOfRange, Some(f))],
                    "{name} {} = {v}",
                    f.name()
                );
            }
        }
        // The datasheet clocks themselves are clean, e.g. an H100 SXM at 1980 MHz.
        for s in crate::gpus::CATALOG {
            let mut r = readings(&[(Field::SmClockMhz, s.max_sm_clock_mhz)]);
            let mut d = Vec::new();
            sanitize(&mut r, &EntityId::default(), Some(s), &mut d);
            assert!(d.is_empty(), "{}", s.key);
        }
        // An energy counter is not bounded by power: only by the sentinels.
        let mut r = readings(&[(Field::EnergyJoules, 1e13), (Field::PowerWatts, 100.0)]);
        let mut d = Vec::new();
        sanitize(&mut r, &EntityId::default(), by_key("t4"), &mut d);
        assert!(d.is_empty());
    }

    #[test]
    fn memory_used_above_total_is_out_of_range() {
        let h100 = by_key("h100-sxm");
        // A MIG instance: its own total (10 GB) bounds its memory used.
        let mut r = readings(&[(Field::MemUsedBytes, 11e9), (Field::MemTotalBytes, 10e9)]);
        let mut d = Vec::new();
        sanitize(&mut r, &EntityId::default(), h100, &mut d);
        assert_eq!(r.get(Field::MemUsedBytes), Reading::Blank);
        assert_eq!(r.value(Field::MemTotalBytes), Some(10e9));
        assert_eq!(d[0].kind, DiagnosticKind::OutOfRange);
        assert!(
            d[0].to_string().contains("memory total reading"),
            "{}",
            d[0]
        );
        // Without a total, the whole GPU's memory (80 GB × 1.1).
        let mut r = readings(&[(Field::MemUsedBytes, 85.5e9)]);
        sanitize(&mut r, &EntityId::default(), h100, &mut d);
        assert_eq!(r.value(Field::MemUsedBytes), Some(85.5e9));
        let mut r = readings(&[(Field::MemUsedBytes, 89e9)]);
        sanitize(&mut r, &EntityId::default(), h100, &mut d);
        assert_eq!(r.get(Field::MemUsedBytes), Reading::Blank);
        // A total above the model's is blank, and used is then bounded by the model's.
        let mut r = readings(&[(Field::MemUsedBytes, 60e9), (Field::MemTotalBytes, 200e9)]);
        let mut d = Vec::new();
        sanitize(&mut r, &EntityId::default(), h100, &mut d);
        assert_eq!(r.value(Field::MemUsedBytes), Some(60e9));
        assert_eq!(r.get(Field::MemTotalBytes), Reading::Blank);
        assert_eq!(d.len(), 1);
        // GH200's 144 GB variant is within its entry's bound.
        let mut r = readings(&[(Field::MemTotalBytes, 146e9)]);
        let mut d = Vec::new();
        sanitize(&mut r, &EntityId::default(), by_key("gh200"), &mut d);
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn only_wide_fields_have_bounds_reaching_the_int32_sentinels() {
        let mut r = Readings::default();
        for spec in specs() {
            for (limit, total) in [(0.0, 0.0), (1e9, 1e13), (700.0, 80e9), (f64::MAX, f64::MAX)] {
                r.set_value(Field::PowerLimitWatts, limit);
                r.set_value(Field::MemTotalBytes, total);
                let b = Bounds::new(&r, spec);
                for &f in Field::ALL {
                    // An INT64 counter has no INT32 blanks to catch.
                    if !WIDE_FIELDS.contains(&f) && !f.is_int64_counter() {
                        assert!(b.max[f as usize] < INT32_BLANK, "{}", f.name());
                    }
                }
            }
        }
    }

    #[test]
    fn the_one_pass_check_leaves_alone_only_what_is_clean() {
        use rand::{Rng, SeedableRng};
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            f64::from_bits(1.0f64.to_bits() + 1),
            0.5,
            -1e-300,
            f64::MIN_POSITIVE,
            SENTINEL_FLOOR,
            f64::from_bits(SENTINEL_FLOOR.to_bits() - 1),
            RATIO_CLAMP_LIMIT,
            1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            42.0,
            // Next to the integer sentinels.
            2_147_483_631.0,
            2_147_483_640.5,
            2_147_483_648.0,
            4_294_967_294.0,
            f64::from(u32::MAX).next_up(),
            // Next to the bounds.
            MAX_TEMP_CELSIUS,
            MAX_TEMP_CELSIUS.next_up(),
            GENERIC_MAX_SM_CLOCK_MHZ.next_up(),
            GENERIC_MAX_MEM_CLOCK_MHZ,
            GENERIC_MAX_POWER_WATTS,
            GENERIC_MAX_POWER_WATTS.next_up(),
            GENERIC_MAX_MEMORY_BYTES.next_up(),
            350.0,
            700.0,
            1400.0,
            1400.0f64.next_up(),
            2178.0,
            2179.0,
            10e9,
            80e9,
            88e9,
            90e9,
        ];
        values.extend(sentinels());
        let specs = specs();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        // Half the rows are a few readings without the row-bounded and wide fields, which
        // end the check early: some clean, some not.
        let mut sparse_rows = [0, 0];
        for k in 0..40_000 {
            let spec = specs[rng.random_range(0..specs.len())];
            let mut r = Readings::default();
            let sparse = k % 2 == 1;
            for &f in Field::ALL {
                if sparse && ROW_OR_WIDE >> (f as usize) & 1 != 0 {
                    continue;
                }
                match rng.random_range(0..if sparse { 40 } else { 4 }) {
                    0 => r.set(f, Reading::Unsupported),
                    2 | 3 => r.set_value(f, values[rng.random_range(0..values.len())]),
                    _ => {}
                }
            }
            let (mut fast, mut each) = (r, r);
            let (mut d1, mut d2) = (Vec::new(), Vec::new());
            sanitize(&mut fast, &EntityId::default(), spec, &mut d1);
            sanitize_each(
                &mut each,
                &EntityId::default(),
                spec,
                &Bounds::new(&r, spec),
                &mut d2,
            );
            let text = |d: &[Diagnostic]| d.iter().map(ToString::to_string).collect::<Vec<_>>();
            assert_eq!(fast, each, "{r:?}");
            assert_eq!(text(&d1), text(&d2), "{r:?}");
            if sparse {
                sparse_rows[usize::from(d1.is_empty())] += 1;
            }
            // Clean readings stay clean: a second pass changes nothing, says nothing.
            let mut again = fast;
            let mut d3 = Vec::new();
            sanitize_each(
                &mut again,
                &EntityId::default(),
                spec,
                &Bounds::new(&fast, spec),
                &mut d3,
            );
            assert_eq!(again, fast, "{r:?}");
            assert!(d3.is_empty(), "{r:?}: {d3:?}");
        }
        assert!(sparse_rows.iter().all(|&n| n > 2_000), "{sparse_rows:?}");
    }

    /// The one-pass check misses no row the field-by-field rules would change: on random rows
    /// of the fields whose bounds are the model's or the row's own (values around every
    /// bound), with and without a model, `sanitize` gives what the rules give run always.
    #[test]
    fn the_one_pass_check_misses_no_row_the_rules_would_change() {
        let fields = ROW_BOUND_FIELDS.map(|i| Field::ALL[i]);
        let magnitudes = [
            0.0, 50.0, 300.0, 700.0, 1_000.0, 2_500.0, 8e10, 9e10, 2e11, 4.2e9,
        ];
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(34);
        let mut next = |n: usize| rng.random_range(0..n);
        for spec in [None, by_key("h100-sxm"), by_key("t4")] {
            for _ in 0..20_000 {
                let mut r = Readings::default();
                for &f in &fields {
                    if next(3) > 0 {
                        let scale = 0.9 + 0.05 * next(5) as f64;
                        r.set_value(f, magnitudes[next(magnitudes.len())] * scale);
                    }
                }
                let mut fast = r;
                sanitize(&mut fast, &EntityId::default(), spec, &mut Vec::new());
                let mut each = r;
                let bounds = Bounds::new(&r, spec);
                sanitize_each(
                    &mut each,
                    &EntityId::default(),
                    spec,
                    &bounds,
                    &mut Vec::new(),
                );
                assert_eq!(fast, each, "{r:?} with {:?}", spec.map(|s| s.name));
            }
        }
    }

    #[test]
    fn sanitize_drops_and_clamps_with_diagnostics() {
        let mut r = readings(&[
            (Field::ReportedUtil, f64::NAN),
            (Field::SmActive, 1.2),
            (Field::TensorActive, 7.0),
            (Field::EnergyJoules, 9.223_372_036_854_776e15),
            (Field::PowerWatts, -1.0),
            (Field::DramActive, f64::INFINITY),
        ]);
        let mut d = Vec::new();
        sanitize(&mut r, &EntityId::default(), None, &mut d);
        assert_eq!(r.get(Field::ReportedUtil), Reading::Blank);
        assert_eq!(r.value(Field::SmActive), Some(1.0));
        assert_eq!(r.get(Field::TensorActive), Reading::Blank);
        assert_eq!(r.get(Field::EnergyJoules), Reading::Blank);
        assert_eq!(r.get(Field::PowerWatts), Reading::Blank);
        assert_eq!(r.get(Field::DramActive), Reading::Blank);
        let kinds: Vec<_> = d.iter().map(|d| d.kind).collect();
        assert_eq!(
            kinds,
            vec![
                DiagnosticKind::NonFinite,
                DiagnosticKind::OutOfRange,
                DiagnosticKind::OutOfRange,
                DiagnosticKind::NonFinite,
                DiagnosticKind::OutOfRange,
                DiagnosticKind::Sentinel,
            ]
        );
    }

    /// A pipe active on more than every cycle, or a busy flag over 100 %, is impossible:
    /// blank, counted, never a full pipe. SM and graphics-engine active, which DCGM
    /// normalizes to a MIG instance's GPCs, are clamped and flagged (counter-science.md
    /// §3.2), as are the ratios of two counters read apart (holder CPU throttling).
    #[test]
    fn only_the_mig_normalized_and_two_counter_ratios_clamp() {
        let mut r = readings(&[
            (Field::TensorActive, 1.3),
            (Field::DramActive, 1.01),
            (Field::ReportedUtil, 1.2),
            (Field::Fp16Active, 1.1),
            (Field::SmOccupancy, 1.2),
            (Field::SmActive, 1.3),
            (Field::GrActive, 1.1),
            (Field::HolderCpuThrottledRatio, 1.04),
        ]);
        let mut d = Vec::new();
        sanitize(&mut r, &EntityId::default(), None, &mut d);
        for f in [
            Field::TensorActive,
            Field::DramActive,
            Field::ReportedUtil,
            Field::Fp16Active,
            Field::SmOccupancy,
        ] {
            assert_eq!(r.get(f), Reading::Blank, "{f:?}");
        }
        for f in [
            Field::SmActive,
            Field::GrActive,
            Field::HolderCpuThrottledRatio,
        ] {
            assert_eq!(r.value(f), Some(1.0), "{f:?}");
        }
        assert_eq!(d.len(), 8);
        assert!(d.iter().all(|d| d.kind == DiagnosticKind::OutOfRange));
        let blanked = d.iter().filter(|d| d.detail.ends_with("is not a fraction"));
        assert_eq!(blanked.count(), 5);
    }

    /// Copying and sanitizing in one pass leaves what a copy then [`sanitize`] leave: the
    /// same readings and the same diagnostics, over clean values, values past every kind of
    /// bound, NaN, infinities and sentinels, with and without a model, into a destination
    /// that held other readings.
    #[test]
    fn sanitizing_while_copying_is_copying_then_sanitizing() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(218);
        let odd = [
            f64::NAN,
            f64::INFINITY,
            -1.0,
            -0.0,
            1.02,
            1.5,
            3_000.0,
            4_294_967_294.0,
            2_147_483_632.0,
            SENTINEL_FLOOR,
            1e30,
        ];
        let random = |rng: &mut rand_chacha::ChaCha8Rng| {
            let mut r = Readings::default();
            for _ in 0..rng.random_range(0..14) {
                let f = Field::ALL[rng.random_range(0..Field::COUNT)];
                let reading = match rng.random_range(0..8) {
                    0 => Reading::Blank,
                    1 => Reading::Unsupported,
                    2 => Reading::Value(odd[rng.random_range(0..odd.len())]),
                    3 => Reading::Value(rng.random_range(0.0..2e11)),
                    _ => Reading::Value(rng.random_range(0.0..1.0)),
                };
                r.set(f, reading);
            }
            r
        };
        let (mut unclean, mut clean) = (0, 0);
        for k in 0..20_000 {
            let spec = [None, by_key("h100-sxm"), by_key("a100-40-sxm")][k % 3];
            let (src, before) = (random(&mut rng), random(&mut rng));
            let (mut a, mut b) = (before, before);
            let (mut da, mut db) = (Vec::new(), Vec::new());
            a.copy_from(&src);
            sanitize(&mut a, &EntityId::default(), spec, &mut da);
            sanitize_from(&mut b, &src, &EntityId::default(), spec, &mut db);
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{src:?}");
            assert_eq!(da, db, "{src:?}");
            if da.is_empty() {
                clean += 1
            } else {
                unclean += 1
            }
        }
        assert!(
            clean > 1_000 && unclean > 1_000,
            "{clean} clean, {unclean} not"
        );
    }
}
