//! GPM (Hopper+): the metrics requested each tick, the samples kept between ticks (per GPU,
//! per GPU instance under MIG), and the metrics between two samples. `NO_PERMISSION` turns
//! GPM off for a GPU for [`GPM_DENIED_RETRY`].
//!
//! Beside the ratio metrics, each tick asks in a second `nvmlGpmMetricsGet` call for the
//! cumulative cycle counters ([`GPM_COUNTERS`]), through the raw symbol (nvml-wrapper has no
//! id for them). A driver that does not know them refuses that call or answers each one
//! unsupported: the counters stay blank, noted once per GPU, and the ratios stay.

use super::device::{DevState, Lost, classify, is_unsupported};
use super::raw::{self, GpmHandle};
use crate::sources::SourceError;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::struct_wrappers::gpm::GpmMetricResult;
use nvml_wrapper::{GpmSample, Nvml};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use truthscale_core::model::{Field, Reading, Readings};

/// GPM stays off this long after `NO_PERMISSION`, then is tried again.
pub(super) const GPM_DENIED_RETRY: Duration = Duration::from_secs(60);
/// The least spacing of two GPM samples ("should be greater than 100ms").
pub(super) const GPM_MIN_SPACING: Duration = Duration::from_millis(100);

/// How a GPM value is scaled to the model's canonical unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GpmUnit {
    /// 0–100 → 0..1.
    Percent,
    /// MiB/s → bytes/s.
    MibPerSec,
}

/// The GPM metrics requested each tick: id, the field it fills (none: logged and shown by
/// `doctor` only), unit, and NVML's name.
pub(super) const GPM_METRICS: &[(GpmMetricId, Option<Field>, GpmUnit, &str)] = &[
    (
        GpmMetricId::GraphicsUtil,
        Some(Field::GrActive),
        GpmUnit::Percent,
        "GRAPHICS_UTIL",
    ),
    (
        GpmMetricId::SmUtil,
        Some(Field::SmActive),
        GpmUnit::Percent,
        "SM_UTIL",
    ),
    (
        GpmMetricId::SmOccupancy,
        Some(Field::SmOccupancy),
        GpmUnit::Percent,
        "SM_OCCUPANCY",
    ),
    (
        GpmMetricId::AnyTensorUtil,
        Some(Field::TensorActive),
        GpmUnit::Percent,
        "ANY_TENSOR_UTIL",
    ),
    (
        GpmMetricId::HmmaTensorUtil,
        Some(Field::HmmaActive),
        GpmUnit::Percent,
        "HMMA_TENSOR_UTIL",
    ),
    (
        GpmMetricId::ImmaTensorUtil,
        Some(Field::ImmaActive),
        GpmUnit::Percent,
        "IMMA_TENSOR_UTIL",
    ),
    (
        GpmMetricId::DramBwUtil,
        Some(Field::DramActive),
        GpmUnit::Percent,
        "DRAM_BW_UTIL",
    ),
    (
        GpmMetricId::Fp64Util,
        Some(Field::Fp64Active),
        GpmUnit::Percent,
        "FP64_UTIL",
    ),
    (
        GpmMetricId::Fp32Util,
        Some(Field::Fp32Active),
        GpmUnit::Percent,
        "FP32_UTIL",
    ),
    (
        GpmMetricId::Fp16Util,
        Some(Field::Fp16Active),
        GpmUnit::Percent,
        "FP16_UTIL",
    ),
    (
        GpmMetricId::PcieTxPerSec,
        Some(Field::PcieTxBytesPerSec),
        GpmUnit::MibPerSec,
        "PCIE_TX_PER_SEC",
    ),
    (
        GpmMetricId::PcieRxPerSec,
        Some(Field::PcieRxBytesPerSec),
        GpmUnit::MibPerSec,
        "PCIE_RX_PER_SEC",
    ),
    (
        GpmMetricId::NvlinkTotalRxPerSec,
        Some(Field::NvlinkRxBytesPerSec),
        GpmUnit::MibPerSec,
        "NVLINK_TOTAL_RX_PER_SEC",
    ),
    (
        GpmMetricId::NvlinkTotalTxPerSec,
        Some(Field::NvlinkTxBytesPerSec),
        GpmUnit::MibPerSec,
        "NVLINK_TOTAL_TX_PER_SEC",
    ),
];

/// The cumulative cycle counters read each tick: NVML's raw metric id, the field it fills
/// (a raw cycle count since boot, the metric's `value`), and NVML's name.
///
/// nvml-wrapper-sys 0.10's bindings stop at id 209 (`NVML_GPM_METRIC_MAX` = 210) and name
/// none of these. The order is NVIDIA's `nvmlGpmMetricId_t` (CUDA 12.9+ headers, as mirrored
/// by cuda-bindings): SM_CYCLES_ELAPSED, SM_CYCLES_ACTIVE, MMA, DMMA, HMMA, IMMA, DFMA,
/// PCIE_TX, PCIE_RX, INTEGER, FP64, FP32, FP16, the same order as DCGM's fields 1084–1096,
/// which DCGM documents as backed by GPM 248–260; the ids below take that mapping. DMMA,
/// DFMA, INTEGER (251, 254, 257) and the PCIe byte counters (255, 256) have no field.
pub(super) const GPM_COUNTERS: &[(u32, Field, &str)] = &[
    (248, Field::SmCyclesElapsed, "SM_CYCLES_ELAPSED"),
    (249, Field::SmCyclesActive, "SM_CYCLES_ACTIVE"),
    (250, Field::MmaCyclesActive, "MMA_CYCLES_ACTIVE"),
    (252, Field::HmmaCyclesActive, "HMMA_CYCLES_ACTIVE"),
    (253, Field::ImmaCyclesActive, "IMMA_CYCLES_ACTIVE"),
    (258, Field::Fp64CyclesActive, "FP64_CYCLES_ACTIVE"),
    (259, Field::Fp32CyclesActive, "FP32_CYCLES_ACTIVE"),
    (260, Field::Fp16CyclesActive, "FP16_CYCLES_ACTIVE"),
];

/// What is noted once (and listed by `doctor`) when the driver refuses the whole counters
/// request or answers every counter unsupported.
const COUNTERS_CALL: &str = "GPM cumulative counters (248-260)";

/// Whether a counter the driver lacks is counted in `truthscale_source_errors_total`. Not,
/// like the other calls with a fallback (the clock samples, the clock-event reasons): the
/// ratio metrics stand in, and every driver before the counters would otherwise count an
/// error on every Hopper GPU. It is logged once per GPU and counter (info level).
const COUNT_UNSUPPORTED_COUNTERS: bool = false;

impl GpmUnit {
    /// Convert a GPM value to the canonical unit.
    #[must_use]
    pub(super) fn convert(self, v: f64) -> f64 {
        match self {
            GpmUnit::Percent => v / 100.0,
            GpmUnit::MibPerSec => v * 1_048_576.0,
        }
    }
}

/// A GPM sample kept until the next tick, and when it was taken.
#[derive(Debug)]
struct Taken {
    sample: GpmHandle,
    at: Instant,
}

/// Whether GPM is in use on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GpmMode {
    Unsupported,
    Active,
    Denied { until: Instant },
}

/// The metrics between two samples: the ratio metrics by index in [`GPM_METRICS`], and the
/// cumulative counters in [`GPM_COUNTERS`]' order (empty: not asked, or the call failed).
#[derive(Debug)]
pub(super) struct GpmValues {
    ratios: Vec<(usize, Result<f64, NvmlError>)>,
    counters: Vec<Result<f64, NvmlError>>,
}

/// What a GPM step gave.
#[derive(Debug)]
pub(super) enum GpmStep {
    /// Metrics between the previous sample and this one.
    Metrics(GpmValues),
    /// The first sample: nothing to compare with yet.
    First,
    /// GPM is off (unsupported, denied), or failed more ticks in a row than are waited for.
    Off,
    /// GPM failed this tick (a passing error): the GPU is reported unchanged, so that its
    /// tier does not flip for one window (at most [`MISSES_WAITED`] ticks in a row).
    Missed,
}

/// Ticks in a row a passing GPM failure is waited out (the GPU reported unchanged) before
/// its windows are reported without GPM.
pub(super) const MISSES_WAITED: u32 = 3;

/// The metrics between two samples, as `nvmlGpmMetricsGet` gave them (`None`: no previous
/// sample).
type Between = Option<Result<Vec<Result<GpmMetricResult, NvmlError>>, NvmlError>>;

/// The cumulative counters between two samples (`None`: not asked).
type CountersBetween = Option<Result<Vec<Result<f64, NvmlError>>, NvmlError>>;

/// One GPU's GPM state between ticks: the mode, and the previous sample per slot (the whole
/// GPU, or a GPU instance).
#[derive(Debug)]
pub(super) struct GpmState {
    pub(super) mode: GpmMode,
    /// A sample succeeded at least once.
    pub(super) sampled: bool,
    warned_denied: bool,
    /// The driver refused the cumulative counters request: not asked again.
    counters_off: bool,
    prev: Option<Taken>,
    mig_prev: BTreeMap<u32, Taken>,
    /// Passing failures in a row (whole GPU).
    pub(super) missed: u32,
}

impl GpmState {
    pub(super) fn new() -> GpmState {
        GpmState {
            mode: GpmMode::Unsupported,
            sampled: false,
            warned_denied: false,
            counters_off: false,
            prev: None,
            mig_prev: BTreeMap::new(),
            missed: 0,
        }
    }

    /// Whether GPM is to be used this tick (a denied GPU is tried again when its time comes).
    pub(super) fn on(&mut self, now: Instant) -> bool {
        match self.mode {
            GpmMode::Active => true,
            GpmMode::Denied { until } if now >= until => {
                self.mode = GpmMode::Active;
                true
            }
            _ => false,
        }
    }

    /// GPM's 100 ms rule: whether a sample held was taken too recently to take another.
    pub(super) fn too_soon(&self, now: Instant) -> bool {
        self.prev
            .iter()
            .chain(self.mig_prev.values())
            .any(|t| now.saturating_duration_since(t.at) <= GPM_MIN_SPACING)
    }

    /// Free every GPM sample held.
    pub(super) fn free(&mut self, nvml: &Nvml) {
        if let Some(t) = self.prev.take() {
            drop(t.sample.restore(nvml));
        }
        for (_, t) in std::mem::take(&mut self.mig_prev) {
            drop(t.sample.restore(nvml));
        }
    }

    /// Free the sample of one slot (`None`: the whole GPU; `Some`: a GPU instance).
    pub(super) fn drop_slot(&mut self, nvml: &Nvml, slot: Option<u32>) {
        if let Some(t) = self.take_slot(slot) {
            drop(t.sample.restore(nvml));
        }
    }

    /// Free the samples of GPU instances not in `present`.
    pub(super) fn forget_gone(&mut self, nvml: &Nvml, present: &[u32]) {
        let gone: Vec<u32> = self
            .mig_prev
            .keys()
            .filter(|gi| !present.contains(gi))
            .copied()
            .collect();
        for gi in gone {
            self.drop_slot(nvml, Some(gi));
        }
    }

    fn take_slot(&mut self, slot: Option<u32>) -> Option<Taken> {
        match slot {
            None => self.prev.take(),
            Some(gi) => self.mig_prev.remove(&gi),
        }
    }

    fn keep_slot(&mut self, slot: Option<u32>, taken: Taken) {
        match slot {
            None => self.prev = Some(taken),
            Some(gi) => {
                self.mig_prev.insert(gi, taken);
            }
        }
    }
}

impl DevState {
    /// GPM said `NO_PERMISSION`: count it, say so (once), and turn GPM off for a while.
    fn deny(&mut self, nvml: &Nvml, errors: &mut Vec<SourceError>) {
        let msg = format!(
            "gpu {}: nvmlGpmSampleGet: NVML_ERROR_NO_PERMISSION; GPM metrics off for {}s \
             (run the container privileged or with CAP_SYS_ADMIN to read GPM)",
            self.index,
            GPM_DENIED_RETRY.as_secs()
        );
        if self.gpm.warned_denied {
            tracing::debug!("{msg}");
        } else {
            self.gpm.warned_denied = true;
            tracing::warn!("{msg}; this GPU is at the nvml fidelity tier until then.");
        }
        errors.push(SourceError::NoPermission(msg));
        self.gpm.free(nvml);
        self.gpm.mode = GpmMode::Denied {
            until: Instant::now() + GPM_DENIED_RETRY,
        };
    }

    /// Take a GPM sample (`slot` None: the whole GPU; Some: a GPU instance) and, with the
    /// slot's previous one, get the metrics between them.
    pub(super) fn gpm_step<'n>(
        &mut self,
        nvml: &'n Nvml,
        slot: Option<u32>,
        take: impl FnOnce() -> Result<GpmSample<'n>, NvmlError>,
        errors: &mut Vec<SourceError>,
    ) -> Result<GpmStep, Lost> {
        let what = if slot.is_some() {
            "nvmlGpmMigSampleGet"
        } else {
            "nvmlGpmSampleGet"
        };
        let new = match take() {
            Ok(s) => s,
            Err(e) => return self.sample_failed(nvml, what, e, errors),
        };
        let at = Instant::now();
        self.gpm.sampled = true;
        let counters_on = !self.gpm.counters_off;
        // A passing failure of the metrics while the GPU is reported unchanged (the caller
        // waits `MISSES_WAITED` ticks) keeps the earlier sample, as a failed sample does: the
        // next pair spans the window the other readings will, not its last part.
        let waits = self.gpm.missed < MISSES_WAITED;
        let (result, counters, kept) = match self.gpm.take_slot(slot) {
            None => (None, None, None),
            Some(p) => {
                let before = p.sample.restore(nvml);
                let ids: Vec<GpmMetricId> = GPM_METRICS.iter().map(|m| m.0).collect();
                let ratios = gpm_metrics_get(nvml, &before, &new, &ids);
                let ids: Vec<u32> = GPM_COUNTERS.iter().map(|c| c.0).collect();
                let counters = (counters_on && ratios.is_ok())
                    .then(|| raw::gpm_metrics_raw(nvml, &before, &new, &ids));
                let passing = matches!(&ratios, Err(e)
                    if !matches!(e, NvmlError::NoPermission | NvmlError::GpuLost));
                let kept = (passing && waits).then(|| Taken {
                    sample: GpmHandle::keep(before),
                    at: p.at,
                });
                (Some(ratios), counters, kept)
            }
        };
        let keep = kept.unwrap_or_else(|| Taken {
            sample: GpmHandle::keep(new),
            at,
        });
        self.gpm.keep_slot(slot, keep);
        let step = self.metrics_got(nvml, result, errors)?;
        let counters = self.counters_got(counters, errors)?;
        Ok(match step {
            GpmStep::Metrics(mut v) => {
                v.counters = counters;
                GpmStep::Metrics(v)
            }
            other => other,
        })
    }

    /// The counters `nvmlGpmMetricsGet` gave; a refused request is the driver not knowing
    /// them: noted once, not asked again on this GPU.
    fn counters_got(
        &mut self,
        got: CountersBetween,
        errors: &mut Vec<SourceError>,
    ) -> Result<Vec<Result<f64, NvmlError>>, Lost> {
        match got {
            None => Ok(Vec::new()),
            Some(Ok(values)) => Ok(values),
            Some(Err(NvmlError::GpuLost)) => Err(Lost(COUNTERS_CALL.into())),
            Some(Err(e)) if is_unsupported(&e) || matches!(e, NvmlError::InvalidArg) => {
                self.note_unsupported(COUNTERS_CALL, &e, COUNT_UNSUPPORTED_COUNTERS, errors);
                self.gpm.counters_off = true;
                Ok(Vec::new())
            }
            // Any other failure is this tick's (counted): the counters are asked again.
            Some(Err(e)) => {
                errors.push(classify(
                    &format!("gpu {}: {COUNTERS_CALL}: {e}", self.index),
                    &e,
                ));
                Ok(Vec::new())
            }
        }
    }

    /// A GPM sample could not be taken: GPM off (denied, unsupported), or this tick missed
    /// (another error: the previous sample is kept, so the next pair spans the miss).
    fn sample_failed(
        &mut self,
        nvml: &Nvml,
        what: &str,
        e: NvmlError,
        errors: &mut Vec<SourceError>,
    ) -> Result<GpmStep, Lost> {
        match e {
            NvmlError::NoPermission => self.deny(nvml, errors),
            NvmlError::GpuLost => return Err(Lost(what.to_string())),
            e if is_unsupported(&e) => {
                self.note_unsupported(what, &e, true, errors);
                self.gpm.free(nvml);
                self.gpm.mode = GpmMode::Unsupported;
            }
            // A passing failure: the previous sample is kept, so the next pair spans the
            // ticks this one missed.
            e => {
                errors.push(classify(&format!("gpu {}: {what}: {e}", self.index), &e));
                return Ok(GpmStep::Missed);
            }
        }
        Ok(GpmStep::Off)
    }

    /// The step that `nvmlGpmMetricsGet`'s outcome makes.
    fn metrics_got(
        &mut self,
        nvml: &Nvml,
        result: Between,
        errors: &mut Vec<SourceError>,
    ) -> Result<GpmStep, Lost> {
        match result {
            None => Ok(GpmStep::First),
            Some(Ok(values)) => Ok(GpmStep::Metrics(GpmValues {
                ratios: values
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| (i, r.map(|m| m.value)))
                    .collect(),
                counters: Vec::new(),
            })),
            Some(Err(NvmlError::NoPermission)) => {
                self.deny(nvml, errors);
                Ok(GpmStep::Off)
            }
            Some(Err(NvmlError::GpuLost)) => Err(Lost("nvmlGpmMetricsGet".into())),
            Some(Err(e)) => {
                errors.push(classify(
                    &format!("gpu {}: nvmlGpmMetricsGet: {e}", self.index),
                    &e,
                ));
                Ok(GpmStep::Missed)
            }
        }
    }

    /// Put GPM metrics into readings; a metric that failed is blank (unsupported when the
    /// GPU cannot report it).
    pub(super) fn apply_gpm(
        &mut self,
        r: &mut Readings,
        values: GpmValues,
        errors: &mut Vec<SourceError>,
    ) {
        self.apply_counters(r, values.counters, errors);
        for (i, v) in values.ratios {
            let Some(&(_, field, unit, name)) = GPM_METRICS.get(i) else {
                continue;
            };
            let reading = match v {
                Ok(v) => {
                    if field.is_none() {
                        tracing::debug!(gpu = self.index, metric = name, value = v, "GPM.");
                    }
                    Reading::Value(unit.convert(v))
                }
                Err(e) if is_unsupported(&e) => {
                    self.note_unsupported(&format!("GPM {name}"), &e, true, errors);
                    Reading::Unsupported
                }
                Err(e) => {
                    errors.push(classify(
                        &format!("gpu {}: GPM {name}: {e}", self.index),
                        &e,
                    ));
                    Reading::Blank
                }
            };
            if let Some(field) = field {
                r.set(field, reading);
            }
        }
    }
}

impl DevState {
    /// Put the cumulative counters into readings: the raw count, or blank (never 0) where
    /// NVML has none; a counter the GPU cannot report is noted once.
    fn apply_counters(
        &mut self,
        r: &mut Readings,
        values: Vec<Result<f64, NvmlError>>,
        errors: &mut Vec<SourceError>,
    ) {
        let none = values
            .iter()
            .all(|v| v.as_ref().is_err_and(counter_unknown));
        if none && !values.is_empty() {
            // Not asked again on this GPU: the ratio metrics stand in.
            self.gpm.counters_off = true;
        }
        for (&(_, field, name), v) in GPM_COUNTERS.iter().zip(values) {
            let reading = match v {
                Ok(v) if v.is_finite() && v >= 0.0 => Reading::Value(v),
                Ok(v) => {
                    // No counter can read negative or not a number: blank, and counted.
                    errors.push(SourceError::Sentinel(format!(
                        "gpu {}: GPM {name}: {v} is no count, left blank",
                        self.index
                    )));
                    Reading::Blank
                }
                Err(e) if counter_unknown(&e) => {
                    // A driver without any of them is one note, not eight.
                    let what = if none {
                        COUNTERS_CALL.to_string()
                    } else {
                        format!("GPM {name}")
                    };
                    self.note_unsupported(&what, &e, COUNT_UNSUPPORTED_COUNTERS, errors);
                    Reading::Blank
                }
                Err(e) => {
                    errors.push(classify(
                        &format!("gpu {}: GPM {name}: {e}", self.index),
                        &e,
                    ));
                    Reading::Blank
                }
            };
            r.set(field, reading);
        }
    }
}

/// Whether a counter's own answer says the driver does not know it: unsupported, or (as
/// NVML 13.580, driver 580.159, answered every id of 248–260 on an H200) an invalid argument
/// for an id it does not have.
fn counter_unknown(e: &NvmlError) -> bool {
    is_unsupported(e) || matches!(e, NvmlError::InvalidArg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpm_units() {
        assert!((GpmUnit::Percent.convert(0.76) - 0.0076).abs() < 1e-12);
        assert_eq!(GpmUnit::MibPerSec.convert(2.0), 2_097_152.0);
        for (id, field, unit, _) in GPM_METRICS {
            if let Some(f) = field {
                assert_eq!(f.is_ratio(), *unit == GpmUnit::Percent, "{id:?}");
            }
        }
        assert!(
            GPM_METRICS.len() <= 98,
            "keep numMetrics within the oldest header's MAX"
        );
    }

    #[test]
    fn counter_ids_follow_dcgm_1084_to_1096() {
        // DCGM field 1084 + k is GPM 248 + k: the counters' names in that order.
        let dcgm = [
            "SM_CYCLES_ELAPSED",
            "SM_CYCLES_ACTIVE",
            "MMA_CYCLES_ACTIVE",
            "DMMA_CYCLES_ACTIVE",
            "HMMA_CYCLES_ACTIVE",
            "IMMA_CYCLES_ACTIVE",
            "DFMA_CYCLES_ACTIVE",
            "PCIE_TX_BYTES",
            "PCIE_RX_BYTES",
            "INTEGER_CYCLES_ACTIVE",
            "FP64_CYCLES_ACTIVE",
            "FP32_CYCLES_ACTIVE",
            "FP16_CYCLES_ACTIVE",
        ];
        for &(id, field, name) in GPM_COUNTERS {
            assert_eq!(dcgm[(id - 248) as usize], name, "{id}");
            assert!(field.is_cycle_counter(), "{field:?}");
        }
        let fields: Vec<Field> = GPM_COUNTERS.iter().map(|c| c.1).collect();
        assert_eq!(fields[0], Field::SmCyclesElapsed);
        for (counter, _) in Field::CYCLE_COUNTERS {
            assert!(fields.contains(&counter), "{counter:?} not read");
        }
    }
}
