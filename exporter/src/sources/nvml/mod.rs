//! NVML in-process: the driver's own counters, including GPM on Hopper and newer.
//!
//! - **Loading.** `libnvidia-ml.so.1` (or `source.library`) is `dlopen`ed at start through
//!   nvml-wrapper 0.13; a machine without the driver fails [`NvmlSource::open`] with a message
//!   that says what to do. Functions nvml-wrapper does not wrap are called through
//!   nvml-wrapper-sys 0.10's symbol fields in `raw`, the exporter's only `unsafe` module.
//! - **Per GPU, each tick.** Busy fraction: the mean of the driver's utilization samples since
//!   the previous tick (`nvmlDeviceGetSamples`), else `nvmlDeviceGetUtilizationRates`. The SM
//!   clock: the mean of the driver's processor-clock samples over the window, else a point
//!   reading that the deriver averages with the previous one. Memory (v2), the energy counter
//!   (the core turns it into ΔE/Δt) and the power gauge, the enforced power limit, the memory
//!   clock, temperature, and clock-event reasons.
//! - **GPM** (Hopper+, `gpm_support()`): the previous sample is kept per GPU (per GPU instance
//!   under MIG) and a new one taken each tick; `nvmlGpmMetricsGet` between them gives SM
//!   active, occupancy, tensor, DRAM, FP pipes, PCIe and NVLink. Two samples must be more than
//!   100 ms apart: a tick closer than that reports the GPU's entities as seen but unchanged,
//!   and the next window covers both ticks. `NO_PERMISSION` turns GPM off for that GPU for
//!   [`GPM_DENIED_RETRY`] (counted as `no_permission`; the GPU is then at the `nvml` tier).
//! - **MIG.** A GPU in MIG mode is exported as one entity per GPU instance (`mig_instance`,
//!   `mig_profile`), with its memory and per-instance GPM (`nvmlGpmMigSampleGet` on the parent).
//!   The busy flag does not exist on MIG, so it stays blank; the GPU-wide power is not split.
//! - **Processes** (every [`PROCESS_EVERY`]): compute processes with their memory, per-process
//!   SM busy (`nvmlDeviceGetProcessesUtilizationInfo`, where the driver has it), and the pod
//!   and container from `/proc/<pid>/cgroup`. They are shown by `truthscale doctor`, logged at
//!   debug, and exported as `truthscale_process_*` series when `source.per_process_series` is
//!   on (opt-in: one series per process).
//! - **Failures.** Every failed call is counted by kind: `gpu_lost` (the GPU's entities go
//!   stale, the others carry on, and it is looked for again every [`LOST_RETRY`]),
//!   `no_permission`, `unsupported` (once per GPU and function: a missing symbol is an older
//!   driver, the value is reported unsupported), `nvml` (anything else; the value is blank).

mod device;
pub(crate) mod raw;

use device::*;

use super::{Produced, SourceError, unix_ms};
use nvml_wrapper::enum_wrappers::device::{Clock, Sampling, TemperatureSensor};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::{Device, GpmSample, Nvml};
use raw::GpmHandle;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};
use truthscale_core::gpus::{self, GpuSpec};
use truthscale_core::model::{
    EntityId, EntityKey, EntitySample, Field, MigId, ProcessReading, Reading, Readings, Sample,
    Throttles, Timestamp,
};

pub use crate::cgroup::Attribution;

/// The library loaded when none is configured.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";
/// A GPU that fell off the bus is looked for again this often.
pub const LOST_RETRY: Duration = Duration::from_secs(10);
/// GPM stays off this long after `NO_PERMISSION`, then is tried again.
pub const GPM_DENIED_RETRY: Duration = Duration::from_secs(60);
/// The least spacing of two GPM samples ("should be greater than 100ms").
pub const GPM_MIN_SPACING: Duration = Duration::from_millis(100);
/// Processes are listed this often.
pub const PROCESS_EVERY: Duration = Duration::from_secs(10);
/// The number of GPUs is checked again this often (hot-plug, or a GPU that was missing).
const ENUMERATE_EVERY: Duration = Duration::from_secs(60);

/// How a GPM value is scaled to the model's canonical unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpmUnit {
    /// 0–100 → 0..1.
    Percent,
    /// MiB/s → bytes/s.
    MibPerSec,
}

/// The GPM metrics requested each tick: id, the field it fills (none: logged and shown by
/// `doctor` only), unit, and NVML's name.
pub const GPM_METRICS: &[(GpmMetricId, Option<Field>, GpmUnit, &str)] = &[
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
    pub fn convert(self, v: f64) -> f64 {
        match self {
            GpmUnit::Percent => v / 100.0,
            GpmUnit::MibPerSec => v * 1_048_576.0,
        }
    }
}

/// NVML could not be loaded or initialized. The message says what to do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OpenError(pub String);

/// What to do when there is no usable NVML.
const NO_NVML_HINT: &str = "On a GPU node, run where the NVIDIA driver is installed (in Kubernetes: a container \
     that requests nvidia.com/gpu, or the NVIDIA container runtime), point --nvml-library \
     (source.library) at libnvidia-ml.so.1 if it is elsewhere, or read another source: \
     --source dcgm-exporter:URL, or --source sim for a demo";

/// Load the NVML library at `library` and initialize it.
///
/// # Errors
/// An [`OpenError`] naming the library, what went wrong, and what to do.
pub fn open(library: &Path) -> Result<Nvml, OpenError> {
    let shown = library.display();
    Nvml::builder()
        .lib_path(OsStr::new(library.as_os_str()))
        .init()
        .map_err(|e| {
            OpenError(match e {
                NvmlError::LibloadingError(e) => {
                    format!("cannot load the NVML library {shown}: {e}. {NO_NVML_HINT}.")
                }
                NvmlError::FailedToLoadSymbol(e) => {
                    format!("{shown} is not an NVML library ({e}). {NO_NVML_HINT}.")
                }
                NvmlError::DriverNotLoaded => format!(
                    "NVML ({shown}) loaded, but the NVIDIA driver is not running \
                     (NVML_ERROR_DRIVER_NOT_LOADED). {NO_NVML_HINT}."
                ),
                NvmlError::NoPermission => format!(
                    "NVML ({shown}) loaded, but may not talk to the driver \
                     (NVML_ERROR_NO_PERMISSION): give the process access to /dev/nvidia*."
                ),
                e => format!("NVML ({shown}) failed to initialize: {e}. {NO_NVML_HINT}."),
            })
        })
}

/// Driver, NVML and CUDA versions, as far as NVML tells them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Versions {
    /// Driver version (`550.54.15`).
    pub driver: Option<String>,
    /// NVML version (`12.550.54.15`).
    pub nvml: Option<String>,
    /// CUDA driver API version (`12.4`).
    pub cuda: Option<String>,
}

/// Who a GPU is.
#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    /// `GPU-…`.
    pub uuid: String,
    /// `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// `00000000:18:00.0`.
    pub pci_bus_id: Option<String>,
    /// `Hopper`, `Ampere`, …
    pub architecture: Option<String>,
    /// The catalog entry of the name.
    pub spec: Option<&'static GpuSpec>,
}

/// Whether GPM is in use on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpmStatus {
    /// The GPU or driver has no GPM (pre-Hopper, or an NVML without the functions).
    Unsupported,
    /// GPM is used; `sampled` once a sample has succeeded.
    Active {
        /// A sample succeeded at least once.
        sampled: bool,
    },
    /// NVML refused (`NO_PERMISSION`); tried again after [`GPM_DENIED_RETRY`].
    Denied,
}

/// A compute process on a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessInfo {
    /// Process id (host namespace).
    pub pid: u32,
    /// GPU memory it uses, bytes (`None` when the driver cannot tell).
    pub used_memory_bytes: Option<u64>,
    /// Its GPU instance, under MIG.
    pub gpu_instance: Option<u32>,
    /// SM busy fraction (time-based) over the driver's last period, where available.
    pub sm_busy: Option<f64>,
    /// Its pod and container, when `/proc/<pid>/cgroup` is visible and names them.
    pub attribution: Option<Attribution>,
}

/// What the source knows about one GPU, for `doctor` and logs.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceReport {
    /// NVML index.
    pub index: u32,
    /// Identity, `None` while it is lost or could not be read.
    pub ident: Option<Ident>,
    /// MIG mode, when it could be read.
    pub mig: Option<bool>,
    /// GPM.
    pub gpm: GpmStatus,
    /// Processes at the last listing.
    pub processes: Vec<ProcessInfo>,
    /// NVML functions (or GPM metrics) this GPU or driver does not support.
    pub unsupported: Vec<String>,
}

/// Reads NVML each tick.
#[derive(Debug)]
pub struct NvmlSource {
    nvml: Nvml,
    library: String,
    versions: Versions,
    interval: Duration,
    node: Option<String>,
    devices: Vec<DevState>,
    enumerate_at: Instant,
    gpm_symbols: bool,
    gpm_mig_symbol: bool,
    /// Errors met while opening, counted with the first tick.
    pending: Vec<SourceError>,
    /// Attach the process list to each entity (per-process series; high cardinality).
    per_process: bool,
}

/// `kind = "nvml"`: NVML in-process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NvmlConfig {
    /// The NVML library to load: a file name looked up by the dynamic loader, or a path.
    pub library: std::path::PathBuf,
    /// Export per-process series: memory and SM busy per process, labelled with pid, pod
    /// UID and container id. High cardinality: off by default.
    pub per_process_series: bool,
}

impl Default for NvmlConfig {
    fn default() -> Self {
        NvmlConfig {
            library: DEFAULT_LIBRARY.into(),
            per_process_series: false,
        }
    }
}

impl NvmlConfig {
    fn open(
        &self,
        context: &crate::sources::Context,
        prefix: &str,
    ) -> Result<Box<dyn crate::sources::Source>, crate::sources::BuildError> {
        NvmlSource::open_with(
            &self.library,
            context.interval,
            context.node.clone(),
            self.per_process_series,
        )
        .map(|s| Box::new(s) as Box<dyn crate::sources::Source>)
        .map_err(|e| crate::sources::BuildError::Nvml(format!("{prefix}{e}")))
    }
}

impl crate::sources::SourceSettings for NvmlConfig {
    const ARG: Option<&'static str> = None;

    fn check(&self) -> Result<(), crate::setting::Invalid> {
        if self.library.as_os_str().is_empty() {
            return Err((
                "source.library",
                format!("must name the NVML library (default {DEFAULT_LIBRARY})"),
            ));
        }
        Ok(())
    }

    fn build(
        &self,
        context: &crate::sources::Context,
        _now: SystemTime,
    ) -> Result<Box<dyn crate::sources::Source>, crate::sources::BuildError> {
        self.open(context, "")
    }
}

/// `kind = "auto"`: NVML when the library loads; the error names the other sources.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AutoConfig(pub NvmlConfig);

impl crate::sources::SourceSettings for AutoConfig {
    const ARG: Option<&'static str> = None;

    fn check(&self) -> Result<(), crate::setting::Invalid> {
        crate::sources::SourceSettings::check(&self.0)
    }

    fn build(
        &self,
        context: &crate::sources::Context,
        _now: SystemTime,
    ) -> Result<Box<dyn crate::sources::Source>, crate::sources::BuildError> {
        self.0.open(
            context,
            "--source auto found no usable NVML (it reads NVML when the library loads): ",
        )
    }
}

impl NvmlSource {
    /// Load NVML from `library`, count and identify the GPUs. `interval` is the sampling
    /// interval (the first window's busy average covers that much); `node` labels entities.
    ///
    /// # Errors
    /// NVML cannot be loaded or initialized, or cannot count the GPUs.
    pub fn open(
        library: &Path,
        interval: Duration,
        node: Option<String>,
    ) -> Result<NvmlSource, OpenError> {
        Self::open_with(library, interval, node, false)
    }

    /// [`NvmlSource::open`], choosing whether entities carry their process lists
    /// (per-process series: opt-in, high cardinality).
    ///
    /// # Errors
    /// As [`NvmlSource::open`].
    pub fn open_with(
        library: &Path,
        interval: Duration,
        node: Option<String>,
        per_process: bool,
    ) -> Result<NvmlSource, OpenError> {
        let nvml = open(library)?;
        let versions = Versions {
            driver: nvml.sys_driver_version().ok(),
            nvml: nvml.sys_nvml_version().ok(),
            cuda: nvml.sys_cuda_driver_version().ok().map(|v| {
                format!(
                    "{}.{}",
                    nvml_wrapper::cuda_driver_version_major(v),
                    nvml_wrapper::cuda_driver_version_minor(v)
                )
            }),
        };
        let count = nvml.device_count().map_err(|e| {
            OpenError(format!(
                "NVML ({}) loaded but cannot count the GPUs: {e}",
                library.display()
            ))
        })?;
        let now = Instant::now();
        let mut source = NvmlSource {
            gpm_symbols: raw::gpm_symbols_present(&nvml),
            gpm_mig_symbol: raw::gpm_mig_symbol_present(&nvml),
            nvml,
            library: library.display().to_string(),
            versions,
            interval,
            node,
            devices: (0..count).map(|i| DevState::new(i, now)).collect(),
            enumerate_at: now + ENUMERATE_EVERY,
            pending: Vec::new(),
            per_process,
        };
        tracing::info!(
            library = %source.library,
            driver = source.versions.driver.as_deref().unwrap_or("?"),
            nvml = source.versions.nvml.as_deref().unwrap_or("?"),
            gpus = count,
            gpm_functions = source.gpm_symbols,
            "Reading NVML."
        );
        if count == 0 {
            tracing::warn!("NVML sees no GPU; /metrics will have no GPU series.");
        }
        let mut errors = Vec::new();
        source.identify_due(now, &mut errors);
        for e in &errors {
            tracing::warn!(error = %e, "NVML: a GPU could not be identified; retrying later.");
        }
        source.pending = errors;
        Ok(source)
    }

    /// The library path as configured.
    #[must_use]
    pub fn library(&self) -> &str {
        &self.library
    }

    /// Driver, NVML and CUDA versions.
    #[must_use]
    pub fn versions(&self) -> &Versions {
        &self.versions
    }

    /// What is known about each GPU.
    #[must_use]
    pub fn report(&self) -> Vec<DeviceReport> {
        self.devices
            .iter()
            .map(|d| DeviceReport {
                index: d.index,
                ident: d.ident.clone(),
                mig: d.mig,
                gpm: match d.gpm {
                    GpmMode::Unsupported => GpmStatus::Unsupported,
                    GpmMode::Active => GpmStatus::Active {
                        sampled: d.gpm_sampled,
                    },
                    GpmMode::Denied { .. } => GpmStatus::Denied,
                },
                processes: d.processes.clone(),
                unsupported: d.unsupported.iter().cloned().collect(),
            })
            .collect()
    }
}

impl crate::sources::Source for NvmlSource {
    fn name(&self) -> &'static str {
        truthscale_core::model::SourceKind::Nvml.as_str()
    }

    /// NVML is read every sampling interval.
    fn update_interval(&self) -> Option<Duration> {
        Some(self.interval)
    }

    /// Read every GPU once.
    fn sample(&mut self, now: SystemTime) -> Produced {
        let mut out = Produced {
            errors: std::mem::take(&mut self.pending),
            ..Produced::default()
        };
        let tick = Instant::now();
        self.enumerate(tick, &mut out.errors);
        self.identify_due(tick, &mut out.errors);
        let mut entities = Vec::new();
        let ctx = Ctx {
            nvml: &self.nvml,
            node: self.node.as_deref(),
            interval_us: self.interval.as_micros() as u64,
            now: tick,
            gpm_mig_symbol: self.gpm_mig_symbol,
        };
        for d in &mut self.devices {
            if d.ident.is_none() {
                continue;
            }
            let mut emit = Emitted::default();
            match d.read(&ctx, &mut emit, &mut out.errors) {
                Ok(()) => {
                    if self.per_process {
                        attach_processes(&mut emit.entities, &d.processes);
                    }
                    for e in &emit.entities {
                        let key = e.id.key();
                        if !d.last_keys.contains(&key) {
                            d.last_keys.push(key);
                        }
                    }
                    out.unchanged.extend(emit.unchanged);
                    entities.extend(emit.entities);
                }
                Err(Lost(what)) => d.lose(&self.nvml, tick, &what, &mut out.errors),
            }
        }
        if !entities.is_empty() {
            out.samples.push(Sample {
                taken: Timestamp(unix_ms(now)),
                entities,
            });
        }
        out
    }
}

impl NvmlSource {
    /// Check the number of GPUs again when it is due.
    fn enumerate(&mut self, now: Instant, errors: &mut Vec<SourceError>) {
        if now < self.enumerate_at {
            return;
        }
        self.enumerate_at = now + ENUMERATE_EVERY;
        match self.nvml.device_count() {
            Ok(n) => {
                let have = self.devices.len() as u32;
                if n > have {
                    tracing::info!(before = have, now = n, "NVML: more GPUs than before.");
                    self.devices
                        .extend((have..n).map(|i| DevState::new(i, now)));
                }
            }
            Err(e) => errors.push(classify(&format!("nvmlDeviceGetCount: {e}"), &e)),
        }
    }

    /// Identify GPUs not identified yet (new, or lost) whose retry time has come.
    fn identify_due(&mut self, now: Instant, errors: &mut Vec<SourceError>) {
        let (nvml, gpm_symbols) = (&self.nvml, self.gpm_symbols);
        for d in &mut self.devices {
            if d.ident.is_some() || now < d.retry_at {
                continue;
            }
            match identify_index(nvml, d.index, gpm_symbols) {
                Ok((ident, gpm)) => {
                    tracing::info!(
                        gpu = d.index,
                        name = %ident.name,
                        uuid = %ident.uuid,
                        pci = ident.pci_bus_id.as_deref().unwrap_or("?"),
                        architecture = ident.architecture.as_deref().unwrap_or("?"),
                        catalog = ident.spec.map_or("unknown", |s| s.key),
                        gpm = gpm == GpmMode::Active,
                        "NVML: GPU ready."
                    );
                    d.reset(ident, gpm, now);
                }
                Err(e) => {
                    d.retry_at = now + LOST_RETRY;
                    let what = format!("gpu {}: identify: {e}", d.index);
                    errors.push(match e {
                        NvmlError::GpuLost => SourceError::GpuLost(what),
                        e => classify(&what, &e),
                    });
                }
            }
        }
    }
}

impl Drop for NvmlSource {
    fn drop(&mut self) {
        for d in &mut self.devices {
            d.free_gpm(&self.nvml);
        }
    }
}

/// A `SourceError` of the right kind for an NVML error.
fn classify(what: &str, e: &NvmlError) -> SourceError {
    match e {
        NvmlError::GpuLost => SourceError::GpuLost(what.to_string()),
        NvmlError::NoPermission => SourceError::NoPermission(what.to_string()),
        e if is_unsupported(e) => SourceError::Unsupported(what.to_string()),
        _ => SourceError::Nvml(what.to_string()),
    }
}

/// Read a GPU's identity and whether it has GPM.
fn identify_index(
    nvml: &Nvml,
    index: u32,
    gpm_symbols: bool,
) -> Result<(Ident, GpmMode), NvmlError> {
    let dev = nvml.device_by_index(index)?;
    let ident = identify(&dev)?;
    let gpm = if gpm_symbols && matches!(dev.gpm_support(), Ok(true)) {
        GpmMode::Active
    } else {
        GpmMode::Unsupported
    };
    Ok((ident, gpm))
}

/// Read a GPU's identity: UUID and name are required, PCI id and architecture optional.
///
/// # Errors
/// The UUID or name cannot be read (`GpuLost` when it fell off the bus).
pub fn identify(dev: &Device<'_>) -> Result<Ident, NvmlError> {
    let uuid = dev.uuid()?;
    let name = dev.name()?;
    let pci_bus_id = match dev.pci_info() {
        Ok(p) => Some(p.bus_id),
        Err(NvmlError::GpuLost) => return Err(NvmlError::GpuLost),
        Err(_) => None,
    };
    let architecture = match dev.architecture() {
        Ok(a) => Some(a.to_string()),
        Err(NvmlError::GpuLost) => return Err(NvmlError::GpuLost),
        Err(_) => None,
    };
    Ok(Ident {
        spec: gpus::lookup(&name),
        uuid,
        name,
        pci_bus_id,
        architecture,
    })
}

/// The MIG profile name of a GPU instance, such as `3g.40gb`: the catalog profile of the
/// parent model with this many slices and the nearest memory, else `{slices}g.{GiB rounded
/// up}gb`.
#[must_use]
pub fn mig_profile_name(spec: Option<&GpuSpec>, slices: u32, memory_mb: u64) -> String {
    let bytes = memory_mb as f64 * 1_048_576.0;
    let best = spec.and_then(|s| {
        s.mig
            .iter()
            .filter(|p| p.compute_slices == slices)
            .map(|p| {
                (
                    p,
                    (p.memory_bytes as f64 - bytes).abs() / p.memory_bytes as f64,
                )
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
    });
    match best {
        Some((p, off)) if off < 0.2 => p.name.to_string(),
        _ => format!("{slices}g.{}gb", memory_mb.div_ceil(1024)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::gpus::by_key;

    #[test]
    fn mig_profile_names() {
        let h100 = by_key("h100-sxm");
        // nvidia-smi mig -lgip on an H100 80GB: 1g.10gb is 9.5 GiB, 7g.80gb 79.25 GiB.
        assert_eq!(mig_profile_name(h100, 1, 9728), "1g.10gb");
        assert_eq!(mig_profile_name(h100, 1, 19968), "1g.20gb");
        assert_eq!(mig_profile_name(h100, 3, 40320), "3g.40gb");
        assert_eq!(mig_profile_name(h100, 7, 81152), "7g.80gb");
        let h200 = by_key("h200-sxm");
        assert_eq!(mig_profile_name(h200, 1, 16896), "1g.18gb");
        // An unknown model: slices and GiB rounded up.
        assert_eq!(mig_profile_name(None, 2, 20096), "2g.20gb");
        assert_eq!(mig_profile_name(None, 1, 4864), "1g.5gb");
    }

    #[test]
    fn clock_event_bits() {
        let t = Throttles::from_event_bits(0x4 | 0x40);
        assert!(t.sw_power_cap && t.thermal && !t.hw_slowdown && !t.power);
        let t = Throttles::from_event_bits(0x8 | 0x10 | 0x80);
        assert!(t.hw_slowdown && t.sync_boost && t.power && !t.thermal);
        assert_eq!(Throttles::from_event_bits(0x1), Throttles::default());
    }

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
    fn mean_of_new_samples_only() {
        use nvml_wrapper::struct_wrappers::device::Sample as S;
        let s = |t, v| S {
            timestamp: t,
            value: SampleValue::U32(v),
        };
        let samples = [s(100, 0), s(200, 100), s(300, 50)];
        assert_eq!(mean_samples(&samples, 100), Some((75.0, 300)));
        assert_eq!(mean_samples(&samples, 300), None);
        assert_eq!(mean_samples(&[], 0), None);
    }

    #[test]
    fn missing_library_says_what_to_do() {
        let e = open(Path::new("/nonexistent/libnvidia-ml.so.1")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent/libnvidia-ml.so.1"), "{msg}");
        assert!(msg.contains("--nvml-library"), "{msg}");
        assert!(msg.contains("dcgm-exporter"), "{msg}");
    }

    #[test]
    fn errors_are_classified() {
        assert_eq!(classify("x", &NvmlError::GpuLost).kind(), "gpu_lost");
        assert_eq!(
            classify("x", &NvmlError::NoPermission).kind(),
            "no_permission"
        );
        assert_eq!(
            classify("x", &NvmlError::NotSupported).kind(),
            "unsupported"
        );
        assert_eq!(
            classify("x", &NvmlError::FailedToLoadSymbol("s".into())).kind(),
            "unsupported"
        );
        assert_eq!(classify("x", &NvmlError::Unknown).kind(), "nvml");
    }
}
