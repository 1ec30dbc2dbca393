//! GPM (Hopper+): the metrics requested each tick, the samples kept between ticks (per GPU,
//! per GPU instance under MIG), and the metrics between two samples. `NO_PERMISSION` turns
//! GPM off for a GPU for [`GPM_DENIED_RETRY`].

use super::device::{DevState, Lost, classify, is_unsupported};
use super::raw::GpmHandle;
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

/// What a GPM step gave.
#[derive(Debug)]
pub(super) enum GpmStep {
    /// Metrics between the previous sample and this one.
    Metrics(Vec<(usize, Result<f64, NvmlError>)>),
    /// The first sample: nothing to compare with yet.
    First,
    /// GPM is off or failed this tick.
    Off,
}

/// The metrics between two samples, as `nvmlGpmMetricsGet` gave them (`None`: no previous
/// sample).
type Between = Option<Result<Vec<Result<GpmMetricResult, NvmlError>>, NvmlError>>;

/// One GPU's GPM state between ticks: the mode, and the previous sample per slot (the whole
/// GPU, or a GPU instance).
#[derive(Debug)]
pub(super) struct GpmState {
    pub(super) mode: GpmMode,
    /// A sample succeeded at least once.
    pub(super) sampled: bool,
    warned_denied: bool,
    prev: Option<Taken>,
    mig_prev: BTreeMap<u32, Taken>,
}

impl GpmState {
    pub(super) fn new() -> GpmState {
        GpmState {
            mode: GpmMode::Unsupported,
            sampled: false,
            warned_denied: false,
            prev: None,
            mig_prev: BTreeMap::new(),
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
            Err(e) => return self.sample_failed(nvml, slot, what, e, errors),
        };
        let at = Instant::now();
        self.gpm.sampled = true;
        let result = self.gpm.take_slot(slot).map(|p| {
            let before = p.sample.restore(nvml);
            let ids: Vec<GpmMetricId> = GPM_METRICS.iter().map(|m| m.0).collect();
            gpm_metrics_get(nvml, &before, &new, &ids)
        });
        let keep = Taken {
            sample: GpmHandle::keep(new),
            at,
        };
        self.gpm.keep_slot(slot, keep);
        self.metrics_got(nvml, result, errors)
    }

    /// A GPM sample could not be taken: GPM off (denied, unsupported) or this tick's slot
    /// dropped (another error).
    fn sample_failed(
        &mut self,
        nvml: &Nvml,
        slot: Option<u32>,
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
            e => {
                errors.push(classify(&format!("gpu {}: {what}: {e}", self.index), &e));
                self.gpm.drop_slot(nvml, slot);
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
            Some(Ok(values)) => Ok(GpmStep::Metrics(
                values
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| (i, r.map(|m| m.value)))
                    .collect(),
            )),
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
                Ok(GpmStep::Off)
            }
        }
    }

    /// Put GPM metrics into readings; a metric that failed is blank (unsupported when the
    /// GPU cannot report it).
    pub(super) fn apply_gpm(
        &mut self,
        r: &mut Readings,
        values: Vec<(usize, Result<f64, NvmlError>)>,
        errors: &mut Vec<SourceError>,
    ) {
        for (i, v) in values {
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
}
