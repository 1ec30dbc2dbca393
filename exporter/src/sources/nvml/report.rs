//! What `truthscale doctor` reads from NVML: the driver, NVML and CUDA versions, each GPU's
//! identity, MIG mode and GPM status, its processes, and what it does not support.

use super::device::DevState;
use super::gpm::{GpmMode, GpmState};
use super::processes::ProcessInfo;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use truthscale_core::gpus::{self, GpuSpec};

/// Driver, NVML and CUDA versions, as far as NVML tells them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Versions {
    /// Driver version (`550.54.15`).
    pub driver: Option<String>,
    /// NVML version (`12.550.54.15`).
    pub nvml: Option<String>,
    /// CUDA driver API version (`12.4`).
    pub cuda: Option<String>,
}

impl Versions {
    /// Ask `nvml`; a version it cannot tell is `None`.
    pub(super) fn read(nvml: &Nvml) -> Versions {
        Versions {
            driver: nvml.sys_driver_version().ok(),
            nvml: nvml.sys_nvml_version().ok(),
            cuda: nvml.sys_cuda_driver_version().ok().map(|v| {
                format!(
                    "{}.{}",
                    nvml_wrapper::cuda_driver_version_major(v),
                    nvml_wrapper::cuda_driver_version_minor(v)
                )
            }),
        }
    }
}

/// Who a GPU is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ident {
    /// `GPU-…`.
    pub uuid: String,
    /// `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// `00000000:18:00.0`.
    pub pci_bus_id: Option<String>,
    /// `Hopper`, `Ampere`, …
    pub architecture: Option<String>,
    /// The device's minor number (`/dev/nvidia<minor>`): how a DRA driver names it.
    pub minor: Option<u32>,
    /// The catalog entry of the name.
    pub spec: Option<&'static GpuSpec>,
}

/// Read a GPU's identity: UUID and name are required, PCI id, architecture and minor number
/// optional.
///
/// # Errors
/// The UUID or name cannot be read (`GpuLost` when it fell off the bus).
pub(crate) fn identify(dev: &Device<'_>) -> Result<Ident, NvmlError> {
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
    let minor = match dev.minor_number() {
        Ok(m) => Some(m),
        Err(NvmlError::GpuLost) => return Err(NvmlError::GpuLost),
        Err(_) => None,
    };
    Ok(Ident {
        spec: gpus::lookup(&name),
        uuid,
        name,
        pci_bus_id,
        architecture,
        minor,
    })
}

/// Whether GPM is in use on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GpmStatus {
    /// The GPU or driver has no GPM (pre-Hopper, or an NVML without the functions).
    Unsupported,
    /// GPM is used; `sampled` once a sample has succeeded.
    Active {
        /// A sample succeeded at least once.
        sampled: bool,
    },
    /// NVML refused (`NO_PERMISSION`); tried again after
    /// [`GPM_DENIED_RETRY`](super::GPM_DENIED_RETRY).
    Denied,
}

impl GpmStatus {
    fn of(gpm: &GpmState) -> GpmStatus {
        match gpm.mode {
            GpmMode::Unsupported => GpmStatus::Unsupported,
            GpmMode::Active => GpmStatus::Active {
                sampled: gpm.sampled,
            },
            GpmMode::Denied { .. } => GpmStatus::Denied,
        }
    }
}

/// What the source knows about one GPU, for `doctor` and logs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeviceReport {
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

impl DevState {
    /// What is known about this GPU.
    pub(super) fn report(&self) -> DeviceReport {
        DeviceReport {
            index: self.index,
            ident: self.ident.clone(),
            mig: self.mig,
            gpm: GpmStatus::of(&self.gpm),
            processes: self.procs.listed.clone(),
            unsupported: self.unsupported.iter().cloned().collect(),
        }
    }
}
