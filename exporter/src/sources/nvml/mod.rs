//! NVML in-process: the driver's own counters, including GPM on Hopper and newer.
//!
//! - **Loading.** `libnvidia-ml.so.1` (or `source.nvml_library`) is `dlopen`ed at start through
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

mod cgroup;
pub(crate) mod raw;

use super::{Produced, SourceError, unix_ms};
use nvml_wrapper::enum_wrappers::device::{Clock, Sampling, TemperatureSensor};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::{Device, GpmSample, Nvml};
use raw::GpmHandle;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};
use truthscale_core::gpus::{self, GpuSpec};
use truthscale_core::model::{
    EntityId, EntityKey, EntitySample, Field, MigId, ProcessReading, Reading, Readings, Sample,
    Throttles, Timestamp,
};

pub use cgroup::Attribution;

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
     (source.nvml_library) at libnvidia-ml.so.1 if it is elsewhere, or read another source: \
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

/// One tick's value of a call: a value, unsupported, or blank (an error, counted).
#[derive(Debug)]
enum Got<T> {
    Value(T),
    Unsupported,
    Blank,
}

impl<T> Got<T> {
    fn reading(self, f: impl FnOnce(T) -> f64) -> Reading {
        match self {
            Got::Value(v) => Reading::Value(f(v)),
            Got::Unsupported => Reading::Unsupported,
            Got::Blank => Reading::Blank,
        }
    }

    fn value(self) -> Option<T> {
        match self {
            Got::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// The GPU fell off the bus during this tick.
#[derive(Debug)]
struct Lost(String);

/// Whether an error means "this GPU or driver cannot do it" rather than a failure.
fn is_unsupported(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound
    )
}

#[derive(Debug)]
struct Taken {
    sample: GpmHandle,
    at: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GpmMode {
    Unsupported,
    Active,
    Denied { until: Instant },
}

/// What a GPM step gave.
#[derive(Debug)]
enum GpmStep {
    /// Metrics between the previous sample and this one.
    Metrics(Vec<(usize, Result<f64, NvmlError>)>),
    /// The first sample: nothing to compare with yet.
    First,
    /// GPM is off or failed this tick.
    Off,
}

/// One GPU's state between ticks.
#[derive(Debug)]
struct DevState {
    index: u32,
    ident: Option<Ident>,
    retry_at: Instant,
    mig: Option<bool>,
    unsupported: BTreeSet<String>,
    util_last_us: Option<u64>,
    clock_last_us: Option<u64>,
    proc_util_last_us: Option<u64>,
    gpm: GpmMode,
    gpm_sampled: bool,
    warned_denied: bool,
    prev: Option<Taken>,
    mig_prev: BTreeMap<u32, Taken>,
    procs_due: Instant,
    processes: Vec<ProcessInfo>,
    last_keys: Vec<EntityKey>,
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

/// `nvml` (or `auto`, NVML when the library loads): NVML in-process.
#[derive(Debug, Clone, PartialEq)]
pub struct NvmlConfig {
    /// The library to load.
    pub library: std::path::PathBuf,
    /// Sampling interval.
    pub interval: Duration,
    /// Node name on the series.
    pub node: Option<String>,
    /// Attach process lists (per-process series).
    pub per_process: bool,
    /// Chosen by `auto`: the error says so.
    pub auto: bool,
}

impl NvmlConfig {
    pub(crate) fn from_spec(
        auto: bool,
        arg: Option<&str>,
        c: &crate::sources::Common,
    ) -> Result<NvmlConfig, String> {
        if let Some(a) = arg {
            let kind = if auto { "auto" } else { "nvml" };
            return Err(format!(
                "{kind}:{a}: {kind} takes no argument; set the library with source.nvml_library"
            ));
        }
        Ok(NvmlConfig {
            library: c.nvml_library.clone(),
            interval: c.interval,
            node: c.node.clone(),
            per_process: c.per_process_series,
            auto,
        })
    }

    pub(crate) fn build(
        &self,
        _now: SystemTime,
    ) -> Result<Box<dyn crate::sources::Source>, crate::sources::BuildError> {
        let prefix = if self.auto {
            "--source auto found no usable NVML (it reads NVML when the library loads): "
        } else {
            ""
        };
        NvmlSource::open_with(
            &self.library,
            self.interval,
            self.node.clone(),
            self.per_process,
        )
        .map(|s| Box::new(s) as Box<dyn crate::sources::Source>)
        .map_err(|e| crate::sources::BuildError::Nvml(format!("{prefix}{e}")))
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
    fn window(&self) -> Option<Duration> {
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

/// The mean of the driver's samples newer than `since_us`, and the newest timestamp; `None`
/// without such samples.
fn mean_samples(
    samples: &[nvml_wrapper::struct_wrappers::device::Sample],
    since_us: u64,
) -> Option<(f64, u64)> {
    let mut sum = 0.0;
    let mut n = 0u32;
    let mut newest = since_us;
    for s in samples.iter().filter(|s| s.timestamp > since_us) {
        let v = match s.value {
            SampleValue::F64(v) => v,
            SampleValue::U32(v) => f64::from(v),
            SampleValue::U64(v) => v as f64,
            SampleValue::I64(v) => v as f64,
        };
        sum += v;
        n += 1;
        newest = newest.max(s.timestamp);
    }
    (n > 0).then(|| (sum / f64::from(n), newest))
}

/// Per-tick inputs shared by all GPUs.
#[derive(Debug)]
struct Ctx<'a> {
    nvml: &'a Nvml,
    node: Option<&'a str>,
    interval_us: u64,
    now: Instant,
    gpm_mig_symbol: bool,
}

/// One MIG GPU instance found this tick.
#[derive(Debug)]
struct MigDev<'n> {
    gi: u32,
    dev: Device<'n>,
    profile: Option<String>,
}

/// What the GPUs gave this tick.
#[derive(Debug, Default)]
struct Emitted {
    entities: Vec<EntitySample>,
    unchanged: Vec<EntityKey>,
}

impl DevState {
    fn new(index: u32, now: Instant) -> DevState {
        DevState {
            index,
            ident: None,
            retry_at: now,
            mig: None,
            unsupported: BTreeSet::new(),
            util_last_us: None,
            clock_last_us: None,
            proc_util_last_us: None,
            gpm: GpmMode::Unsupported,
            gpm_sampled: false,
            warned_denied: false,
            prev: None,
            mig_prev: BTreeMap::new(),
            procs_due: now,
            processes: Vec::new(),
            last_keys: Vec::new(),
        }
    }

    /// Start over with a (re)identified GPU.
    fn reset(&mut self, ident: Ident, gpm: GpmMode, now: Instant) {
        let index = self.index;
        *self = DevState::new(index, now);
        self.ident = Some(ident);
        self.gpm = gpm;
    }

    /// The GPU fell off the bus: count it, forget its samples, look for it later.
    fn lose(&mut self, nvml: &Nvml, now: Instant, what: &str, errors: &mut Vec<SourceError>) {
        let uuid = self
            .ident
            .as_ref()
            .map_or("?", |i| i.uuid.as_str())
            .to_string();
        tracing::warn!(
            gpu = self.index,
            uuid = %uuid,
            call = what,
            "NVML: GPU is lost (fell off the bus); its series go stale, the other GPUs carry on. Looking for it again every {}s.",
            LOST_RETRY.as_secs()
        );
        errors.push(SourceError::GpuLost(format!(
            "gpu {} ({uuid}): {what}: GPU is lost",
            self.index
        )));
        self.free_gpm(nvml);
        self.ident = None;
        self.last_keys.clear();
        self.retry_at = now + LOST_RETRY;
    }

    /// Free every GPM sample held.
    fn free_gpm(&mut self, nvml: &Nvml) {
        if let Some(t) = self.prev.take() {
            drop(t.sample.restore(nvml));
        }
        for (_, t) in std::mem::take(&mut self.mig_prev) {
            drop(t.sample.restore(nvml));
        }
    }

    /// Note once that `what` is unsupported here; count it when `count` is set.
    fn note_unsupported(
        &mut self,
        what: &str,
        e: &NvmlError,
        count: bool,
        errors: &mut Vec<SourceError>,
    ) {
        if self.unsupported.insert(what.to_string()) {
            tracing::info!(gpu = self.index, call = what, error = %e, "NVML: not available on this GPU or driver; reported as unsupported.");
            if count {
                errors.push(SourceError::Unsupported(format!(
                    "gpu {}: {what}: {e}",
                    self.index
                )));
            }
        }
    }

    /// Call `f` unless `what` is known unsupported, and classify the result.
    fn call<T>(
        &mut self,
        what: &str,
        errors: &mut Vec<SourceError>,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Result<Got<T>, Lost> {
        self.call_with(what, true, errors, f)
    }

    fn call_with<T>(
        &mut self,
        what: &str,
        count_unsupported: bool,
        errors: &mut Vec<SourceError>,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Result<Got<T>, Lost> {
        if self.unsupported.contains(what) {
            return Ok(Got::Unsupported);
        }
        match f() {
            Ok(v) => Ok(Got::Value(v)),
            Err(NvmlError::GpuLost) => Err(Lost(what.to_string())),
            Err(e) if is_unsupported(&e) => {
                self.note_unsupported(what, &e, count_unsupported, errors);
                Ok(Got::Unsupported)
            }
            Err(e) => {
                errors.push(classify(&format!("gpu {}: {what}: {e}", self.index), &e));
                Ok(Got::Blank)
            }
        }
    }

    /// Whether GPM is to be used this tick (a denied GPU is tried again when its time comes).
    fn gpm_on(&mut self, now: Instant) -> bool {
        match self.gpm {
            GpmMode::Active => true,
            GpmMode::Denied { until } if now >= until => {
                self.gpm = GpmMode::Active;
                true
            }
            _ => false,
        }
    }

    /// GPM said `NO_PERMISSION`: count it, say so (once), and turn GPM off for a while.
    fn deny(&mut self, nvml: &Nvml, errors: &mut Vec<SourceError>) {
        let msg = format!(
            "gpu {}: nvmlGpmSampleGet: NVML_ERROR_NO_PERMISSION; GPM metrics off for {}s \
             (run the container privileged or with CAP_SYS_ADMIN to read GPM)",
            self.index,
            GPM_DENIED_RETRY.as_secs()
        );
        if self.warned_denied {
            tracing::debug!("{msg}");
        } else {
            self.warned_denied = true;
            tracing::warn!("{msg}; this GPU is at the nvml fidelity tier until then.");
        }
        errors.push(SourceError::NoPermission(msg));
        self.free_gpm(nvml);
        self.gpm = GpmMode::Denied {
            until: Instant::now() + GPM_DENIED_RETRY,
        };
    }

    /// Take a GPM sample (`slot` None: the whole GPU; Some: a GPU instance) and, with the
    /// slot's previous one, get the metrics between them.
    fn gpm_step<'n>(
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
            Err(NvmlError::NoPermission) => {
                self.deny(nvml, errors);
                return Ok(GpmStep::Off);
            }
            Err(NvmlError::GpuLost) => return Err(Lost(what.to_string())),
            Err(e) if is_unsupported(&e) => {
                self.note_unsupported(what, &e, true, errors);
                self.free_gpm(nvml);
                self.gpm = GpmMode::Unsupported;
                return Ok(GpmStep::Off);
            }
            Err(e) => {
                errors.push(classify(&format!("gpu {}: {what}: {e}", self.index), &e));
                self.drop_slot(nvml, slot);
                return Ok(GpmStep::Off);
            }
        };
        let at = Instant::now();
        self.gpm_sampled = true;
        let previous = match slot {
            None => self.prev.take(),
            Some(gi) => self.mig_prev.remove(&gi),
        };
        let result = previous.map(|p| {
            let before = p.sample.restore(nvml);
            let ids: Vec<GpmMetricId> = GPM_METRICS.iter().map(|m| m.0).collect();
            gpm_metrics_get(nvml, &before, &new, &ids)
        });
        let keep = Taken {
            sample: GpmHandle::keep(new),
            at,
        };
        match slot {
            None => self.prev = Some(keep),
            Some(gi) => {
                self.mig_prev.insert(gi, keep);
            }
        }
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

    fn drop_slot(&mut self, nvml: &Nvml, slot: Option<u32>) {
        let t = match slot {
            None => self.prev.take(),
            Some(gi) => self.mig_prev.remove(&gi),
        };
        if let Some(t) = t {
            drop(t.sample.restore(nvml));
        }
    }

    /// Put GPM metrics into readings; a metric that failed is blank (unsupported when the
    /// GPU cannot report it).
    fn apply_gpm(
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

    fn entity_id(&self, ctx: &Ctx<'_>, mig: Option<MigId>) -> EntityId {
        let ident = self.ident.as_ref();
        EntityId {
            gpu: Some(self.index),
            uuid: ident.map(|i| i.uuid.clone()),
            model: ident.map(|i| i.name.clone()),
            pci_bus_id: ident.and_then(|i| i.pci_bus_id.clone()),
            mig,
            pod: None,
            node: ctx.node.map(str::to_string),
        }
    }

    /// Read this GPU: its entities, or the keys of those seen but not re-read.
    fn read<'n>(
        &mut self,
        ctx: &Ctx<'n>,
        emit: &mut Emitted,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        let dev = match ctx.nvml.device_by_index(self.index) {
            Ok(d) => d,
            Err(NvmlError::GpuLost) => return Err(Lost("nvmlDeviceGetHandleByIndex".into())),
            Err(e) => {
                errors.push(classify(
                    &format!("gpu {}: nvmlDeviceGetHandleByIndex: {e}", self.index),
                    &e,
                ));
                emit.unchanged.extend(self.last_keys.iter().cloned());
                return Ok(());
            }
        };
        let mig = self
            .call("nvmlDeviceGetMigMode", errors, || dev.mig_mode())?
            .value()
            .map(|m| m.current == nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_ENABLE);
        if mig != self.mig && self.mig.is_some() {
            tracing::info!(gpu = self.index, mig = ?mig, "NVML: MIG mode changed.");
            self.free_gpm(ctx.nvml);
            self.last_keys.clear();
        }
        self.mig = mig;
        let gpm_on = self.gpm_on(Instant::now());
        // GPM's 100 ms rule: too soon after the previous sample, report the GPU as seen and
        // unchanged; the next tick closes a window over both.
        let now = Instant::now();
        if gpm_on
            && self
                .prev
                .iter()
                .chain(self.mig_prev.values())
                .any(|t| now.saturating_duration_since(t.at) <= GPM_MIN_SPACING)
        {
            emit.unchanged.extend(self.last_keys.iter().cloned());
            return Ok(());
        }
        let processes_due = ctx.now >= self.procs_due;
        if processes_due {
            self.procs_due = ctx.now + PROCESS_EVERY;
        }
        if mig == Some(true) {
            let migs = self.mig_devices(ctx, &dev, errors)?;
            self.read_mig(ctx, &dev, &migs, gpm_on, emit, errors)?;
            if processes_due {
                self.read_processes(ctx, &dev, Some(&migs), errors)?;
            }
        } else {
            self.read_gpu(ctx, &dev, gpm_on, emit, errors)?;
            if processes_due {
                self.read_processes(ctx, &dev, None, errors)?;
            }
        }
        Ok(())
    }

    /// Clocks and clock-event reasons (GPU-wide, shared by MIG instances). The SM clock is
    /// the window's mean from the driver's clock samples where it keeps them; else a point
    /// reading, which the deriver averages with the previous one (the returned flag).
    fn clocks(
        &mut self,
        ctx: &Ctx<'_>,
        dev: &Device<'_>,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<(Option<Throttles>, bool), Lost> {
        let since = self.clock_last_us.unwrap_or(0);
        let samples = self.call_with(
            "nvmlDeviceGetSamples(PROCESSOR_CLK)",
            false,
            errors,
            || match dev.samples(Sampling::ProcessorClock, since) {
                Err(NvmlError::NotFound) => Ok(Vec::new()),
                r => r,
            },
        )?;
        let mut point = true;
        if let Got::Value(s) = &samples {
            let from = self.clock_last_us.unwrap_or_else(|| {
                s.iter()
                    .map(|x| x.timestamp)
                    .max()
                    .map_or(0, |newest| newest.saturating_sub(ctx.interval_us))
            });
            if let Some((mhz, newest)) = mean_samples(s, from) {
                self.clock_last_us = Some(newest);
                r.set_value(Field::SmClockMhz, mhz);
                point = false;
            }
        }
        if point {
            let sm = self.call("nvmlDeviceGetClockInfo(SM)", errors, || {
                dev.clock_info(Clock::SM)
            })?;
            r.set(Field::SmClockMhz, sm.reading(f64::from));
        }
        let mem = self.call("nvmlDeviceGetClockInfo(MEM)", errors, || {
            dev.clock_info(Clock::Memory)
        })?;
        r.set(Field::MemClockMhz, mem.reading(f64::from));
        // The current name first; drivers before it have only the deprecated one.
        let bits = match self.call_with(
            "nvmlDeviceGetCurrentClocksEventReasons",
            false,
            errors,
            || raw::clocks_event_reasons(ctx.nvml, dev),
        )? {
            Got::Unsupported => self
                .call("nvmlDeviceGetCurrentClocksThrottleReasons", errors, || {
                    dev.current_throttle_reasons().map(|t| t.bits())
                })?
                .value(),
            g => g.value(),
        };
        Ok((bits.map(Throttles::from_event_bits), point))
    }

    /// A whole GPU (not in MIG mode).
    fn read_gpu<'n>(
        &mut self,
        ctx: &Ctx<'n>,
        dev: &Device<'n>,
        gpm_on: bool,
        emit: &mut Emitted,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        let mut r = Readings::default();
        if gpm_on {
            match self.gpm_step(ctx.nvml, None, || dev.gpm_sample(), errors)? {
                GpmStep::First => {
                    // Nothing to compare with yet: the first window starts here.
                    emit.unchanged.extend(self.last_keys.iter().cloned());
                    return Ok(());
                }
                GpmStep::Metrics(m) => self.apply_gpm(&mut r, m, errors),
                GpmStep::Off => {}
            }
        }
        r.set(Field::ReportedUtil, self.busy(ctx, dev, errors)?);
        self.memory(dev, "nvmlDeviceGetMemoryInfo_v2", &mut r, errors)?;
        let energy = self.call("nvmlDeviceGetTotalEnergyConsumption", errors, || {
            dev.total_energy_consumption()
        })?;
        r.set(Field::EnergyJoules, energy.reading(|mj| mj as f64 / 1000.0));
        let power = self.call("nvmlDeviceGetPowerUsage", errors, || dev.power_usage())?;
        r.set(
            Field::PowerWatts,
            power.reading(|mw| f64::from(mw) / 1000.0),
        );
        let limit = self.call("nvmlDeviceGetEnforcedPowerLimit", errors, || {
            dev.enforced_power_limit()
        })?;
        r.set(
            Field::PowerLimitWatts,
            limit.reading(|mw| f64::from(mw) / 1000.0),
        );
        let temp = self.call("nvmlDeviceGetTemperature", errors, || {
            dev.temperature(TemperatureSensor::Gpu)
        })?;
        r.set(Field::TempCelsius, temp.reading(f64::from));
        let (throttles, sm_clock_is_point) = self.clocks(ctx, dev, &mut r, errors)?;
        emit.entities.push(EntitySample {
            id: self.entity_id(ctx, None),
            readings: r,
            throttles,
            sm_clock_is_point,
            ..EntitySample::default()
        });
        Ok(())
    }

    /// Used and total memory (v2) of a GPU or MIG device.
    fn memory(
        &mut self,
        dev: &Device<'_>,
        what: &str,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        match self.call(what, errors, || dev.memory_info())? {
            Got::Value(m) => {
                r.set_value(Field::MemUsedBytes, m.used as f64);
                r.set_value(Field::MemTotalBytes, m.total as f64);
            }
            g => {
                let reading = g.reading(|_| 0.0);
                r.set(Field::MemUsedBytes, reading);
                r.set(Field::MemTotalBytes, reading);
            }
        }
        Ok(())
    }

    /// The busy fraction over the window: the mean of the driver's samples since the last
    /// tick, else the point reading. The first window takes the samples of the last interval
    /// before the newest one, so the driver's timestamp base does not matter.
    fn busy(
        &mut self,
        ctx: &Ctx<'_>,
        dev: &Device<'_>,
        errors: &mut Vec<SourceError>,
    ) -> Result<Reading, Lost> {
        let since = self.util_last_us.unwrap_or(0);
        let samples = self.call(
            "nvmlDeviceGetSamples(GPU_UTILIZATION)",
            errors,
            || match dev.samples(Sampling::GpuUtilization, since) {
                Err(NvmlError::NotFound) => Ok(Vec::new()),
                r => r,
            },
        )?;
        if let Got::Value(s) = &samples {
            let from = self.util_last_us.unwrap_or_else(|| {
                s.iter()
                    .map(|x| x.timestamp)
                    .max()
                    .map_or(0, |newest| newest.saturating_sub(ctx.interval_us))
            });
            if let Some((percent, newest)) = mean_samples(s, from) {
                self.util_last_us = Some(newest);
                return Ok(Reading::Value(percent / 100.0));
            }
        }
        let rates = self.call("nvmlDeviceGetUtilizationRates", errors, || {
            dev.utilization_rates()
        })?;
        Ok(rates.reading(|u| f64::from(u.gpu) / 100.0))
    }

    /// The GPU instances of a GPU in MIG mode (one per instance, whatever its compute
    /// instances).
    fn mig_devices<'n>(
        &mut self,
        ctx: &Ctx<'n>,
        dev: &Device<'n>,
        errors: &mut Vec<SourceError>,
    ) -> Result<Vec<MigDev<'n>>, Lost> {
        let Some(count) = self
            .call("nvmlDeviceGetMaxMigDeviceCount", errors, || {
                dev.mig_device_count()
            })?
            .value()
        else {
            return Ok(Vec::new());
        };
        let spec = self.ident.as_ref().and_then(|i| i.spec);
        let mut found: Vec<MigDev<'n>> = Vec::new();
        for i in 0..count {
            let m = match dev.mig_device_by_index(i) {
                Ok(m) => m,
                // Empty slots answer NOT_FOUND (or INVALID_ARGUMENT on some drivers).
                Err(NvmlError::NotFound | NvmlError::InvalidArg) => continue,
                Err(NvmlError::GpuLost) => {
                    return Err(Lost("nvmlDeviceGetMigDeviceHandleByIndex".into()));
                }
                Err(e) => {
                    errors.push(classify(
                        &format!(
                            "gpu {}: nvmlDeviceGetMigDeviceHandleByIndex({i}): {e}",
                            self.index
                        ),
                        &e,
                    ));
                    continue;
                }
            };
            let Some(gi) = self
                .call("nvmlDeviceGetGpuInstanceId", errors, || {
                    raw::gpu_instance_id(ctx.nvml, &m)
                })?
                .value()
            else {
                continue;
            };
            if found.iter().any(|f| f.gi == gi) {
                continue;
            }
            let profile = self
                .call("nvmlDeviceGetAttributes_v2", errors, || m.attributes())?
                .value()
                .map(|a| mig_profile_name(spec, a.gpu_instance_slice_count, a.memory_size_mb));
            found.push(MigDev {
                gi,
                dev: m,
                profile,
            });
        }
        Ok(found)
    }

    /// A GPU in MIG mode: one entity per GPU instance.
    fn read_mig<'n>(
        &mut self,
        ctx: &Ctx<'n>,
        dev: &Device<'n>,
        migs: &[MigDev<'n>],
        gpm_on: bool,
        emit: &mut Emitted,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        // Forget the samples of instances that are gone.
        let gone: Vec<u32> = self
            .mig_prev
            .keys()
            .filter(|gi| !migs.iter().any(|m| m.gi == **gi))
            .copied()
            .collect();
        for gi in gone {
            self.drop_slot(ctx.nvml, Some(gi));
        }
        let mut shared = Readings::default();
        let (throttles, sm_clock_is_point) = self.clocks(ctx, dev, &mut shared, errors)?;
        for m in migs {
            let mig_id = MigId {
                gpu_instance: m.gi,
                compute_instance: None,
                profile: m.profile.clone(),
            };
            let id = self.entity_id(ctx, Some(mig_id));
            let mut r = Readings::default();
            r.set(Field::SmClockMhz, shared.get(Field::SmClockMhz));
            r.set(Field::MemClockMhz, shared.get(Field::MemClockMhz));
            // A NO_PERMISSION on one instance turns GPM off for the others too.
            if gpm_on && ctx.gpm_mig_symbol && self.gpm == GpmMode::Active {
                match self.gpm_step(ctx.nvml, Some(m.gi), || dev.gpm_mig_sample(m.gi), errors)? {
                    GpmStep::First => {
                        let key = id.key();
                        if self.last_keys.contains(&key) {
                            emit.unchanged.push(key);
                        }
                        continue;
                    }
                    GpmStep::Metrics(v) => self.apply_gpm(&mut r, v, errors),
                    GpmStep::Off => {}
                }
            }
            // The busy flag does not exist on MIG: `ReportedUtil` stays blank.
            self.memory(&m.dev, "nvmlDeviceGetMemoryInfo_v2 (MIG)", &mut r, errors)?;
            emit.entities.push(EntitySample {
                id,
                readings: r,
                throttles,
                sm_clock_is_point,
                ..EntitySample::default()
            });
        }
        Ok(())
    }

    /// List compute processes (per GPU instance under MIG), with per-process SM busy where
    /// the driver has it and the pod each belongs to; keep them for `doctor`, log at debug.
    fn read_processes<'n>(
        &mut self,
        ctx: &Ctx<'n>,
        dev: &Device<'n>,
        migs: Option<&[MigDev<'n>]>,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        let mut listed = Vec::new();
        match migs {
            Some(migs) => {
                for m in migs {
                    if let Got::Value(p) = self.call(
                        "nvmlDeviceGetComputeRunningProcesses_v3 (MIG)",
                        errors,
                        || m.dev.running_compute_processes(),
                    )? {
                        listed.extend(p);
                    }
                }
            }
            None => {
                if let Got::Value(p) =
                    self.call("nvmlDeviceGetComputeRunningProcesses_v3", errors, || {
                        dev.running_compute_processes()
                    })?
                {
                    listed = p;
                }
            }
        }
        // pid → (timestamp, SM busy) of its newest sample.
        let mut util: BTreeMap<u32, (u64, f64)> = BTreeMap::new();
        // Per-process utilization is not supported on MIG.
        if migs.is_none() {
            let since = self.proc_util_last_us.unwrap_or(0);
            if let Got::Value(u) =
                self.call("nvmlDeviceGetProcessesUtilizationInfo", errors, || {
                    raw::process_utilization(ctx.nvml, dev, since)
                })?
            {
                for p in &u {
                    self.proc_util_last_us =
                        Some(self.proc_util_last_us.unwrap_or(0).max(p.timestamp_us));
                    let e = util.entry(p.pid).or_insert((0, 0.0));
                    if p.timestamp_us >= e.0 {
                        *e = (p.timestamp_us, f64::from(p.sm_util) / 100.0);
                    }
                }
            }
        }
        self.processes = listed
            .into_iter()
            .map(|p| ProcessInfo {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
                gpu_instance: p.gpu_instance_id,
                sm_busy: util.get(&p.pid).map(|u| u.1),
                attribution: cgroup::of_pid(p.pid),
            })
            .collect();
        for p in &self.processes {
            tracing::debug!(
                gpu = self.index,
                pid = p.pid,
                memory_bytes = ?p.used_memory_bytes,
                gpu_instance = ?p.gpu_instance,
                sm_busy = ?p.sm_busy,
                pod_uid = p.attribution.as_ref().map_or("", |a| a.pod_uid.as_str()),
                container_id = p
                    .attribution
                    .as_ref()
                    .and_then(|a| a.container_id.as_deref())
                    .unwrap_or(""),
                "NVML: compute process."
            );
        }
        Ok(())
    }
}

/// Give each entity the processes running on it: all of them for a whole GPU, those of its
/// GPU instance for a MIG entity.
fn attach_processes(entities: &mut [EntitySample], processes: &[ProcessInfo]) {
    for e in entities {
        let gi = e.id.mig.as_ref().map(|m| m.gpu_instance);
        e.processes = processes
            .iter()
            .filter(|p| gi.is_none() || p.gpu_instance == gi)
            .map(|p| ProcessReading {
                pid: p.pid.to_string(),
                used_memory_bytes: p.used_memory_bytes.map(|b| b as f64),
                sm_busy: p.sm_busy,
                pod_uid: p.attribution.as_ref().map(|a| a.pod_uid.clone()),
                container_id: p.attribution.as_ref().and_then(|a| a.container_id.clone()),
            })
            .collect();
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
