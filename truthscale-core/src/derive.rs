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
    /// Upper clamp of the clock correction κ.
    pub kappa_max: f64,
    /// Below this busy fraction, inflation is not defined (the GPU is idle).
    pub inflation_min_util: f64,
    /// A gap longer than this many intervals integrates only one interval.
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
            Fidelity::Profiling => "profiling",
            Fidelity::Nvml => "nvml",
            Fidelity::BusyOnly => "busy_only",
            Fidelity::None => "none",
        }
    }
}

/// How a value was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Read directly from a counter.
    Counter,
    /// Computed exactly from counters.
    Derived,
    /// An upper bound, not a measurement.
    Bound,
    /// A heuristic estimate (power proxy).
    Estimate,
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
    /// Upper bound on effective compute when no tensor counter exists (`≤ u`).
    pub effective_compute_upper_bound: Option<f64>,
    /// Busiest-pipe view: `max(τ, φ16, φ32, φ64)`.
    pub busiest_pipe: Option<f64>,
    /// Clock correction `κ = f̄ / f_ref`.
    pub kappa: Option<f64>,
    /// Roofline saturation at the clocks the GPU ran: `max(C, d)`.
    pub roofline_saturation: Option<f64>,
    /// Roofline saturation against the datasheet roofline: `max(C·κ, d)`.
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

/// Turn raw readings into clean ones: NaN, infinities, sentinels and out-of-range
/// values become blanks or are clamped, each with a diagnostic.
pub fn sanitize(readings: &mut Readings, entity: &EntityId, diags: &mut Vec<Diagnostic>) {
    // Most readings are all clean: told in one pass without a branch a field.
    let mut unclean = false;
    for (r, max) in readings.all().iter().zip(&CLEAN_MAX) {
        if let Reading::Value(v) = *r {
            unclean |= !(0.0 <= v && v <= *max);
        }
    }
    if unclean {
        sanitize_each(readings, entity, diags);
    }
}

/// [`sanitize`], field by field.
fn sanitize_each(readings: &mut Readings, entity: &EntityId, diags: &mut Vec<Diagnostic>) {
    for &field in Field::ALL {
        let Reading::Value(v) = readings.get(field) else {
            continue;
        };
        // Most values are clean: finite, not negative, below the sentinels, a ratio within
        // 0..1 (NaN fails the first comparison, infinities the second).
        if (0.0..SENTINEL_FLOOR).contains(&v) && (v <= 1.0 || !field.is_ratio()) {
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
        if !v.is_finite() {
            push(DiagnosticKind::NonFinite, format!("{v}"));
            readings.set(field, Reading::Blank);
        } else if v >= SENTINEL_FLOOR {
            push(DiagnosticKind::Sentinel, format!("{v}"));
            readings.set(field, Reading::Blank);
        } else if v < 0.0 {
            push(DiagnosticKind::OutOfRange, format!("{v} is negative"));
            readings.set(field, Reading::Blank);
        } else if field.is_ratio() && v > 1.0 {
            if v <= RATIO_CLAMP_LIMIT {
                push(DiagnosticKind::OutOfRange, format!("{v} clamped to 1"));
                readings.set_value(field, 1.0);
            } else {
                push(DiagnosticKind::OutOfRange, format!("{v} is not a fraction"));
                readings.set(field, Reading::Blank);
            }
        }
    }
}

/// The largest clean value of each field (in the order of [`Field::ALL`]): 1 for a
/// ratio, the largest below [`SENTINEL_FLOOR`] for any other.
const CLEAN_MAX: [f64; Field::COUNT] = {
    let mut t = [f64::from_bits(SENTINEL_FLOOR.to_bits() - 1); Field::COUNT];
    let mut i = 0;
    while i < Field::COUNT {
        if Field::ALL[i].is_ratio() {
            t[i] = 1.0;
        }
        i += 1;
    }
    t
};

/// Values at or above DCGM's FP64 blank (2^47) are sentinels, never measurements.
pub const SENTINEL_FLOOR: f64 = 140_737_488_355_328.0;
/// Ratios up to this are clamped to 1 (SM active above 1 is reported on MIG); above, dropped.
pub const RATIO_CLAMP_LIMIT: f64 = 1.5;

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
}

fn clamp01(x: f64) -> f64 {
    x.clamp(0.0, 1.0)
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
    let mut m = WindowMetrics {
        fidelity: Some(fidelity(r)),
        ..WindowMetrics::default()
    };
    let u = r.value(Field::ReportedUtil);
    let s = r.value(Field::SmActive);
    let d = r.value(Field::DramActive);
    let c = compute_term(r, ctx.spec);
    m.reported_utilization = u;

    m.kappa = match (r.value(Field::SmClockMhz), ctx.spec) {
        (Some(f), Some(spec)) if f > 0.0 && spec.f_ref_mhz > 0.0 => {
            // min then max, not clamp: no configured bound can panic.
            Some((f / spec.f_ref_mhz).min(cfg.kappa_max).max(0.0))
        }
        _ => None,
    };

    if let Some(c) = c {
        match m.kappa {
            Some(k) => {
                m.effective_compute = Some(clamp01(c * k));
                m.clock_corrected = true;
            }
            None => m.effective_compute_uncorrected = Some(c),
        }
        let pipes = [
            Field::TensorActive,
            Field::Fp16Active,
            Field::Fp32Active,
            Field::Fp64Active,
        ];
        m.busiest_pipe = pipes.iter().filter_map(|&f| r.value(f)).reduce(f64::max);
    } else if let Some(u) = u {
        m.effective_compute_upper_bound = Some(u);
    }

    if let (Some(c), Some(d)) = (c, d) {
        m.roofline_saturation = Some(clamp01(c.max(d)));
        let ck = m.effective_compute.unwrap_or(c);
        m.roofline_saturation_spec = Some(clamp01(ck.max(d)));
        if cfg.tau_max > 0.0 && cfg.d_max > 0.0 {
            m.roofline_saturation_practical = Some(clamp01((c / cfg.tau_max).max(d / cfg.d_max)));
        }
        m.rho = Some(c / d.max(0.02));
    }

    if let Some(u) = u.filter(|&u| u >= cfg.inflation_min_util) {
        if let Some(ecf) = m.effective_compute {
            m.inflation_gap_points = Some((100.0 * (u - ecf)).max(0.0));
            m.inflation_ratio = Some(u / ecf.max(0.01));
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
    m
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
        assert!(m.spatial_inflation.unwrap() >= 100.0);
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
        // No busy flag: inflation is not defined.
        assert_eq!(m.inflation_gap_points, None);
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
        assert!(close(m.effective_compute_upper_bound, 0.9));
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
    }

    #[test]
    fn non_tensor_pipes_are_peak_weighted() {
        let h100 = by_key("h100-sxm").unwrap();
        let r = readings(&[(Field::TensorActive, 0.0), (Field::Fp32Active, 0.5)]);
        let c = compute_term(&r, Some(h100)).unwrap();
        assert!((c - 0.5 * 67.0 / 989.0).abs() < 1e-12);
    }

    #[test]
    fn the_one_pass_check_leaves_alone_only_what_is_clean() {
        use rand::{Rng, SeedableRng};
        let values = [
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
        ];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        for _ in 0..20_000 {
            let mut r = Readings::default();
            for &f in Field::ALL {
                match rng.random_range(0..4) {
                    0 => r.set(f, Reading::Unsupported),
                    1 => {}
                    _ => r.set_value(f, values[rng.random_range(0..values.len())]),
                }
            }
            let (mut fast, mut each) = (r, r);
            let (mut d1, mut d2) = (Vec::new(), Vec::new());
            sanitize(&mut fast, &EntityId::default(), &mut d1);
            sanitize_each(&mut each, &EntityId::default(), &mut d2);
            let text = |d: &[Diagnostic]| d.iter().map(ToString::to_string).collect::<Vec<_>>();
            assert_eq!(fast, each, "{r:?}");
            assert_eq!(text(&d1), text(&d2), "{r:?}");
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
        sanitize(&mut r, &EntityId::default(), &mut d);
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
}
