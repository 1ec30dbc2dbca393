//! NVML in-process: the driver's own counters, including GPM on Hopper and newer.
//!
//! - **Loading.** `libnvidia-ml.so.1` (or `source.library`) is `dlopen`ed at start through
//!   nvml-wrapper 0.13; a machine without the driver fails `NvmlSource::open` with a message
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
//!   `GPM_DENIED_RETRY` (counted as `no_permission`; the GPU is then at the `nvml` tier).
//! - **MIG.** A GPU in MIG mode is exported as one entity per GPU instance (`mig_instance`,
//!   `mig_profile`), with its memory and per-instance GPM (`nvmlGpmMigSampleGet` on the parent).
//!   The busy flag does not exist on MIG, so it stays blank; the GPU-wide power is not split.
//! - **Processes** (every `PROCESS_EVERY`): compute processes with their memory, per-process
//!   SM busy (`nvmlDeviceGetProcessesUtilizationInfo`, where the driver has it), and the pod
//!   and container from `/proc/<pid>/cgroup`. They are shown by `truthscale doctor`, logged at
//!   debug, and exported as `truthscale_process_*` series when `source.per_process_series` is
//!   on (opt-in: one series per process).
//! - **Failures.** Every failed call is counted by kind: `gpu_lost` (the GPU's entities go
//!   stale, the others carry on, and it is looked for again every `LOST_RETRY`),
//!   `no_permission`, `unsupported` (once per GPU and function: a missing symbol is an older
//!   driver, the value is reported unsupported), `nvml` (anything else; the value is blank).
//!
//! The parts: `device` (one GPU's state, its calls classified, a whole GPU's counters),
//! `gpm`, `mig`, `processes` (listing and attribution through `crate::cgroup`), `report`
//! (what `truthscale doctor` reads: versions, identity, `DeviceReport`) and `raw` (the only
//! `unsafe`); this module opens NVML and runs the tick over every GPU.

mod device;
mod gpm;
mod mig;
mod processes;
pub(crate) mod raw;
mod report;
mod xids;

pub(crate) use device::LOST_RETRY;
pub(crate) use processes::ProcessInfo;
pub(crate) use report::{DeviceReport, GpmStatus, Ident, Versions, identify};

use super::{Produced, SourceError};
use crate::setting::Invalid;
use crate::times::unix_ms;
use device::{Ctx, DevState, Emitted, Lost, classify};
use gpm::GpmMode;
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;
use processes::attach_processes;
use serde::{Deserialize, Serialize};
use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};
use truthscale_core::model::{EntityKey, Sample, Timestamp};

/// The library loaded when none is configured.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";
/// The number of GPUs is checked again this often (hot-plug, or a GPU that was missing).
const ENUMERATE_EVERY: Duration = Duration::from_secs(60);

/// NVML could not be loaded or initialized. The message says what to do.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct OpenError {
    /// What went wrong, naming the library, and what to do.
    pub message: String,
    /// Why there is no driver, when there is none: the library did not load (not installed,
    /// or not where it was looked for), or it loaded and says the driver is not running.
    /// `None` when a driver is there and something else failed.
    pub no_driver: Option<String>,
}

impl OpenError {
    fn new(message: String) -> OpenError {
        OpenError {
            message,
            no_driver: None,
        }
    }
}

/// What to do when there is no usable NVML.
const NO_NVML_HINT: &str = "On a GPU node, run where the NVIDIA driver is installed (in Kubernetes: a container \
     that requests nvidia.com/gpu, or the NVIDIA container runtime), point --nvml-library \
     (source.library) at libnvidia-ml.so.1 if it is elsewhere, or read another source: \
     --source dcgm-exporter:URL, --source replay:FILE, or --source sim for the simulated GPU";

/// The sources to choose from when `auto` (no source configured) finds no driver.
const CHOICES: &str = "pass --source nvml (with --nvml-library PATH where the library is \
     elsewhere), --source dcgm-exporter:URL, --source replay:FILE, or --source sim for the \
     simulated GPU";

/// `auto`'s start error: no driver (naming the choices), or a driver whose NVML is unusable.
fn auto_error(e: OpenError) -> crate::sources::BuildError {
    crate::sources::BuildError::Nvml(match e.no_driver {
        Some(why) => {
            format!("no GPU source configured and no NVIDIA driver found ({why}): {CHOICES}")
        }
        None => format!(
            "no GPU source configured (source.kind auto reads NVML when a driver is present), \
             and this driver's NVML is not usable: {}",
            e.message
        ),
    })
}

/// Load the NVML library at `library` and initialize it.
///
/// # Errors
/// An [`OpenError`] naming the library, what went wrong, and what to do.
pub(crate) fn open(library: &Path) -> Result<Nvml, OpenError> {
    let shown = library.display();
    Nvml::builder()
        .lib_path(OsStr::new(library.as_os_str()))
        .init()
        .map_err(|e| {
            let no_driver = match &e {
                NvmlError::LibloadingError(e) => {
                    Some(format!("cannot load the NVML library {shown}: {e}"))
                }
                NvmlError::DriverNotLoaded => Some(format!(
                    "NVML ({shown}) loaded, but the NVIDIA driver is not running \
                     (NVML_ERROR_DRIVER_NOT_LOADED)"
                )),
                _ => None,
            };
            if let Some(why) = no_driver {
                return OpenError {
                    message: format!("{why}. {NO_NVML_HINT}."),
                    no_driver: Some(why),
                };
            }
            OpenError::new(match e {
                NvmlError::FailedToLoadSymbol(e) => {
                    format!("{shown} is not an NVML library ({e}). {NO_NVML_HINT}.")
                }
                NvmlError::NoPermission => format!(
                    "NVML ({shown}) loaded, but may not talk to the driver \
                     (NVML_ERROR_NO_PERMISSION): give the process access to /dev/nvidia*."
                ),
                e => format!("NVML ({shown}) failed to initialize: {e}. {NO_NVML_HINT}."),
            })
        })
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
    ) -> Result<Box<dyn crate::sources::Source>, OpenError> {
        NvmlSource::open_with(
            &self.library,
            context.interval,
            context.node.clone(),
            self.per_process_series,
        )
        .map(|s| Box::new(s) as Box<dyn crate::sources::Source>)
    }
}

impl crate::sources::SourceSettings for NvmlConfig {
    const ARG: Option<&'static str> = None;

    fn check(&self) -> Result<(), Invalid> {
        if self.library.as_os_str().is_empty() {
            return Err(Invalid::new(
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
        self.open(context)
            .map_err(|e| crate::sources::BuildError::Nvml(e.to_string()))
    }
}

/// `kind = "auto"`, the default: NVML when the library loads (a driver is present); else
/// the error names the other sources. Never the simulator.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AutoConfig(pub NvmlConfig);

impl crate::sources::SourceSettings for AutoConfig {
    const ARG: Option<&'static str> = None;

    fn check(&self) -> Result<(), Invalid> {
        crate::sources::SourceSettings::check(&self.0)
    }

    fn build(
        &self,
        context: &crate::sources::Context,
        _now: SystemTime,
    ) -> Result<Box<dyn crate::sources::Source>, crate::sources::BuildError> {
        self.0.open(context).map_err(auto_error)
    }

    /// Whether a driver is here: NVML loaded and initialized, its version read.
    fn probe(&self) -> Result<Option<String>, crate::sources::BuildError> {
        let nvml = open(&self.0.library).map_err(auto_error)?;
        let driver = match nvml.sys_driver_version() {
            Ok(v) => format!(", driver {v}"),
            Err(_) => String::new(),
        };
        Ok(Some(format!(
            "no source configured: auto reads NVML ({}{driver})",
            self.0.library.display()
        )))
    }
}

impl NvmlSource {
    /// Load NVML from `library`, count and identify the GPUs. `interval` is the sampling
    /// interval (the first window's busy average covers that much); `node` labels entities.
    ///
    /// # Errors
    /// NVML cannot be loaded or initialized, or cannot count the GPUs.
    pub(crate) fn open(
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
    pub(crate) fn open_with(
        library: &Path,
        interval: Duration,
        node: Option<String>,
        per_process: bool,
    ) -> Result<NvmlSource, OpenError> {
        let nvml = open(library)?;
        let versions = Versions::read(&nvml);
        let count = nvml.device_count().map_err(|e| {
            OpenError::new(format!(
                "NVML ({}) loaded but cannot count the GPUs: {e}",
                library.display()
            ))
        })?;
        let count = at_most_entities(count);
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
    pub(crate) fn library(&self) -> &str {
        &self.library
    }

    /// Driver, NVML and CUDA versions.
    #[must_use]
    pub(crate) fn versions(&self) -> &Versions {
        &self.versions
    }

    /// What is known about each GPU.
    #[must_use]
    pub(crate) fn report(&self) -> Vec<DeviceReport> {
        self.devices.iter().map(DevState::report).collect()
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
            driver_version: self.versions.driver.as_deref(),
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
                        attach_processes(&mut emit.entities, &d.procs.listed);
                    }
                    // A read that reported entities lists all the GPU has now: a key neither
                    // reported nor unchanged (a destroyed MIG instance) is forgotten, and
                    // never again declared unchanged.
                    let keys: Vec<EntityKey> = emit.entities.iter().map(|e| e.id.key()).collect();
                    if !keys.is_empty() {
                        d.last_keys
                            .retain(|k| keys.contains(k) || emit.unchanged.contains(k));
                    }
                    for key in keys {
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
                let n = at_most_entities(n);
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
            d.free(&self.nvml);
        }
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
    // A failed query (not "unsupported") is no answer: GPM is tried, and its first sample
    // tells (unsupported, or denied, each noted then), rather than the GPU left at the
    // `nvml` tier for its life on one transient error.
    let gpm = match (gpm_symbols, dev.gpm_support()) {
        (true, Ok(true)) => GpmMode::Active,
        (true, Err(e)) if !device::is_unsupported(&e) => GpmMode::Active,
        _ => GpmMode::Unsupported,
    };
    Ok((ident, gpm))
}

/// A GPU count from the driver, at most [`MAX_ENTITIES`](crate::bounds::MAX_ENTITIES): the
/// rest are not read, and the log says so.
fn at_most_entities(count: u32) -> u32 {
    let max = crate::bounds::MAX_ENTITIES as u32;
    if count > max {
        tracing::warn!(
            count,
            read = max,
            "NVML counts more GPUs than truthscale reads; the first ones are read."
        );
    }
    count.min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_says_what_to_do() {
        let e = open(Path::new("/nonexistent/libnvidia-ml.so.1")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent/libnvidia-ml.so.1"), "{msg}");
        assert!(msg.contains("--nvml-library"), "{msg}");
        assert!(msg.contains("dcgm-exporter"), "{msg}");
    }
}
