//! NVML calls that nvml-wrapper 0.13 does not wrap, and GPM sample handles kept between ticks.
//!
//! # Why `unsafe`
//! The workspace denies `unsafe_code`; this module is the exporter's one exception. The
//! functions here call NVML through the symbol fields of nvml-wrapper-sys 0.10's `NvmlLib`
//! (`nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref()`), which are `unsafe extern "C"` function
//! pointers, and pass `Device::handle()` (an `unsafe fn`). A symbol the loaded driver lacks
//! is a `FailedToLoadSymbol` error, never a panic: the same-named convenience methods of
//! `NvmlLib` panic on a missing symbol and are never called.
//!
//! [`GpmHandle`] keeps a GPM sample from one tick to the next without borrowing the `Nvml`
//! that owns it (a `GpmSample<'nvml>` cannot live in the same struct as its `Nvml`);
//! [`XidEvents`] keeps an event set the same way.

#![expect(
    unsafe_code,
    reason = "raw NVML symbols (not wrapped by nvml-wrapper 0.13) and GPM sample handles"
)]

use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::{Device, GpmSample, Nvml};
use nvml_wrapper_sys::bindings as sys;
use std::ffi::c_uint;

/// A missing symbol as nvml-wrapper reports it.
fn missing(e: &impl std::fmt::Display) -> NvmlError {
    NvmlError::FailedToLoadSymbol(e.to_string())
}

/// `nvmlDeviceGetGpuInstanceId`: the GPU-instance id of a MIG device handle.
///
/// # Errors
/// NVML's error, or `FailedToLoadSymbol` on a driver without the function.
pub(crate) fn gpu_instance_id(nvml: &Nvml, dev: &Device<'_>) -> Result<u32, NvmlError> {
    let f = nvml
        .lib()
        .nvmlDeviceGetGpuInstanceId
        .as_ref()
        .map_err(missing)?;
    let mut id: c_uint = 0;
    // SAFETY: `f` comes from the library `nvml` loaded; the handle was issued by that library;
    // `id` is a valid out-pointer for the call's duration.
    nvml_try(unsafe { f(dev.handle(), &mut id) })?;
    Ok(id)
}

/// `nvmlDeviceGetCurrentClocksEventReasons`: the clock-event ("throttle") reason bits.
///
/// # Errors
/// NVML's error, or `FailedToLoadSymbol` on a driver older than the renamed function.
pub(crate) fn clocks_event_reasons(nvml: &Nvml, dev: &Device<'_>) -> Result<u64, NvmlError> {
    let f = nvml
        .lib()
        .nvmlDeviceGetCurrentClocksEventReasons
        .as_ref()
        .map_err(missing)?;
    let mut bits: std::ffi::c_ulonglong = 0;
    // SAFETY: as in `gpu_instance_id`.
    nvml_try(unsafe { f(dev.handle(), &mut bits) })?;
    Ok(bits)
}

/// What `nvmlDeviceGetRemappedRows` tells of a GPU's memory row remapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemappedRows {
    /// Rows remapped for uncorrectable errors.
    pub(crate) uncorrectable: u32,
    /// A remap waits for a GPU reset.
    pub(crate) pending: bool,
    /// A remap failed.
    pub(crate) failed: bool,
}

/// `nvmlDeviceGetRemappedRows`: the row remapper's counts and flags (Ampere and newer).
///
/// # Errors
/// NVML's error, or `FailedToLoadSymbol` on a driver without the function.
pub(crate) fn remapped_rows(nvml: &Nvml, dev: &Device<'_>) -> Result<RemappedRows, NvmlError> {
    let f = nvml
        .lib()
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .map_err(missing)?;
    let (mut corr, mut unc, mut pending, mut failed): (c_uint, c_uint, c_uint, c_uint) =
        (0, 0, 0, 0);
    // SAFETY: as in `gpu_instance_id`; the four out-pointers are valid for the call.
    nvml_try(unsafe { f(dev.handle(), &mut corr, &mut unc, &mut pending, &mut failed) })?;
    Ok(RemappedRows {
        uncorrectable: unc,
        pending: pending != 0,
        failed: failed != 0,
    })
}

/// The most events one [`XidEvents::poll`] takes: the set is polled every tick, and a driver
/// that keeps delivering is not waited on for ever (the rest wait for the next tick).
const MAX_EVENTS_PER_POLL: usize = 64;

/// An event set registered for one GPU's critical XID events (`nvmlEventTypeXidCriticalError`),
/// kept between ticks: the raw handle, owned. Free it with [`XidEvents::free`]; one dropped
/// without it leaks one small allocation in the driver, nothing worse.
#[derive(Debug)]
pub(crate) struct XidEvents(sys::nvmlEventSet_t);

// SAFETY: the handle is an opaque pointer owned by exactly one `XidEvents`, used only by the
// thread that owns it; nvml-wrapper declares `EventSet` (its owner there) `Send` likewise.
unsafe impl Send for XidEvents {}

impl XidEvents {
    /// `nvmlEventSetCreate`, then `nvmlDeviceRegisterEvents` of `dev`'s critical XID events
    /// on the set (freed again when registering fails).
    ///
    /// # Errors
    /// NVML's error, or `FailedToLoadSymbol` on a driver without the functions.
    pub(crate) fn register(nvml: &Nvml, dev: &Device<'_>) -> Result<XidEvents, NvmlError> {
        let l = nvml.lib();
        let create = l.nvmlEventSetCreate.as_ref().map_err(missing)?;
        let register = l.nvmlDeviceRegisterEvents.as_ref().map_err(missing)?;
        let free = l.nvmlEventSetFree.as_ref().map_err(missing)?;
        l.nvmlEventSetWait_v2.as_ref().map_err(missing)?;
        let mut set: sys::nvmlEventSet_t = std::ptr::null_mut();
        // SAFETY: `create` comes from the library `nvml` loaded; `set` is a valid out-pointer.
        nvml_try(unsafe { create(&mut set) })?;
        let events = std::ffi::c_ulonglong::from(sys::nvmlEventTypeXidCriticalError);
        // SAFETY: as in `gpu_instance_id`; `set` was just created by this library.
        if let Err(e) = nvml_try(unsafe { register(dev.handle(), events, set) }) {
            // SAFETY: `set` was created above and is freed once, here, and never used again.
            let _ = unsafe { free(set) };
            return Err(e);
        }
        Ok(XidEvents(set))
    }

    /// The XIDs delivered since the last poll, oldest first: `nvmlEventSetWait_v2` with a
    /// timeout of 0 until it times out (no event waiting), at most [`MAX_EVENTS_PER_POLL`].
    ///
    /// # Errors
    /// NVML's error other than the timeout (`GpuLost` for a GPU fallen off the bus).
    pub(crate) fn poll(&self, nvml: &Nvml) -> Result<Vec<u64>, NvmlError> {
        let wait = nvml.lib().nvmlEventSetWait_v2.as_ref().map_err(missing)?;
        let mut xids = Vec::new();
        for _ in 0..MAX_EVENTS_PER_POLL {
            // SAFETY: every field of the event data is an integer or a raw pointer, for
            // which zero bytes are valid.
            let mut data: sys::nvmlEventData_t = unsafe { std::mem::zeroed() };
            // SAFETY: `wait` comes from the library `nvml` loaded; the set is this
            // library's and still owned; `data` is valid for a write.
            match nvml_try(unsafe { wait(self.0, &mut data, 0) }) {
                Ok(()) => {
                    if data.eventType
                        == std::ffi::c_ulonglong::from(sys::nvmlEventTypeXidCriticalError)
                    {
                        xids.push(data.eventData);
                    }
                }
                Err(NvmlError::Timeout) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(xids)
    }

    /// `nvmlEventSetFree`: `nvml` must be the `Nvml` the set was created by (each source owns
    /// exactly one, and its sets never leave it).
    pub(crate) fn free(self, nvml: &Nvml) {
        if let Ok(free) = nvml.lib().nvmlEventSetFree.as_ref() {
            // SAFETY: the set was created by this library and is freed once (`self` is
            // moved).
            let _ = unsafe { free(self.0) };
        }
    }
}

/// One process's utilization over the driver's last sample period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcessUtil {
    /// Process id (as the driver sees it: the host's PID namespace).
    pub(crate) pid: u32,
    /// SM (3D/compute) busy percent: time-based, like the device busy flag.
    pub(crate) sm_util: u32,
    /// Frame-buffer memory busy percent.
    pub(crate) mem_util: u32,
    /// CPU timestamp of the sample, µs.
    pub(crate) timestamp_us: u64,
}

/// The most process samples one GPU's answer is given room for: far past the processes a
/// GPU runs ([`crate::bounds::MAX_PROCESSES`] are kept), and a bound on what a driver's
/// count costs.
const MAX_PROCESS_SAMPLES: usize = 16 * crate::bounds::MAX_PROCESSES;

fn empty_process_util() -> sys::nvmlProcessUtilizationInfo_v1_t {
    sys::nvmlProcessUtilizationInfo_v1_t {
        timeStamp: 0,
        pid: 0,
        smUtil: 0,
        memUtil: 0,
        encUtil: 0,
        decUtil: 0,
        jpgUtil: 0,
        ofaUtil: 0,
    }
}

/// `nvmlDeviceGetProcessesUtilizationInfo` (v1 struct), samples newer than `last_seen_us`,
/// with the two-call pattern (size query, then fill; retried if the list grew in between).
/// No samples is an empty list, not an error.
///
/// # Errors
/// NVML's error, or `FailedToLoadSymbol` on a driver without the function.
pub(crate) fn process_utilization(
    nvml: &Nvml,
    dev: &Device<'_>,
    last_seen_us: u64,
) -> Result<Vec<ProcessUtil>, NvmlError> {
    let f = nvml
        .lib()
        .nvmlDeviceGetProcessesUtilizationInfo
        .as_ref()
        .map_err(missing)?;
    // NVML_STRUCT_VERSION(ProcessesUtilizationInfo, 1); bindgen does not emit the macro.
    let version = (size_of::<sys::nvmlProcessesUtilizationInfo_v1_t>() as u32) | (1 << 24);
    let mut buf: Vec<sys::nvmlProcessUtilizationInfo_v1_t> = Vec::new();
    for _ in 0..3 {
        let mut info = sys::nvmlProcessesUtilizationInfo_v1_t {
            version,
            processSamplesCount: buf.len() as c_uint,
            lastSeenTimeStamp: last_seen_us,
            procUtilArray: if buf.is_empty() {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr()
            },
        };
        // SAFETY: as in `gpu_instance_id`; `procUtilArray` is null or points at
        // `processSamplesCount` initialized entries that outlive the call.
        let rc = unsafe { f(dev.handle(), &mut info) };
        match rc {
            sys::nvmlReturn_enum_NVML_SUCCESS => {
                buf.truncate(info.processSamplesCount as usize);
                return Ok(buf
                    .iter()
                    .map(|p| ProcessUtil {
                        pid: p.pid,
                        sm_util: p.smUtil,
                        mem_util: p.memUtil,
                        timestamp_us: p.timeStamp,
                    })
                    .collect());
            }
            sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE => {
                // Room for a few more, in case processes start between the two calls; a
                // count past any real one is not trusted with memory (the call then fails).
                let n = (info.processSamplesCount as usize).min(MAX_PROCESS_SAMPLES) + 4;
                buf = vec![empty_process_util(); n];
            }
            sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND => return Ok(Vec::new()),
            other => {
                nvml_try(other)?;
                return Ok(Vec::new());
            }
        }
    }
    Err(NvmlError::InsufficientSize(None))
}

/// Whether the loaded library has every GPM function truthscale uses (a driver from before
/// GPM lacks them; `GpmSample`'s `Drop` would panic without `nvmlGpmSampleFree`).
#[must_use]
pub(crate) fn gpm_symbols_present(nvml: &Nvml) -> bool {
    let l = nvml.lib();
    l.nvmlGpmQueryDeviceSupport.is_ok()
        && l.nvmlGpmSampleAlloc.is_ok()
        && l.nvmlGpmSampleFree.is_ok()
        && l.nvmlGpmSampleGet.is_ok()
        && l.nvmlGpmMetricsGet.is_ok()
}

/// The most metrics one [`gpm_metrics_raw`] call asks for: `NVML_GPM_METRIC_MAX` of the
/// oldest header with GPM (the drivers' struct holds at least that many).
const GPM_RAW_MAX: usize = 98;

/// `nvmlGpmMetricsGet` between two samples for raw metric ids, including ids that
/// nvml-wrapper's `GpmMetricId` lacks (and that nvml-wrapper-sys 0.10's bindings do not
/// name, such as the cumulative counters 248–260). Each metric's value or its own NVML error,
/// in the order of `ids`.
///
/// # Errors
/// The call's own error (a driver that does not know an id may refuse the whole request),
/// `InvalidArg` for more than [`GPM_RAW_MAX`] ids, or `FailedToLoadSymbol`.
pub(crate) fn gpm_metrics_raw(
    nvml: &Nvml,
    sample1: &GpmSample<'_>,
    sample2: &GpmSample<'_>,
    ids: &[u32],
) -> Result<Vec<Result<f64, NvmlError>>, NvmlError> {
    if ids.len() > GPM_RAW_MAX {
        return Err(NvmlError::InvalidArg);
    }
    let f = nvml.lib().nvmlGpmMetricsGet.as_ref().map_err(missing)?;
    // SAFETY: every field of the request is an integer, a float or a raw pointer, for all of
    // which zero bytes are a valid value (null pointers: NVML fills in the names).
    let mut request: sys::nvmlGpmMetricsGet_t = unsafe { std::mem::zeroed() };
    request.version = sys::NVML_GPM_METRICS_GET_VERSION;
    request.numMetrics = ids.len() as c_uint;
    // SAFETY: the handles are borrowed for the call only; both samples outlive it and keep
    // ownership (nothing here frees or rebuilds a `GpmSample` from them).
    (request.sample1, request.sample2) = unsafe { (sample1.handle(), sample2.handle()) };
    for (m, &id) in request.metrics.iter_mut().zip(ids) {
        m.metricId = id;
    }
    // SAFETY: `f` comes from the library `nvml` loaded; the samples were allocated by it;
    // `request` is a valid, initialized struct for the call's duration.
    nvml_try(unsafe { f(&mut request) })?;
    Ok(request
        .metrics
        .iter()
        .take(ids.len())
        .map(|m| nvml_try(m.nvmlReturn).map(|()| m.value))
        .collect())
}

/// Whether the library has `nvmlGpmMigSampleGet` (per-GPU-instance GPM).
#[must_use]
pub(crate) fn gpm_mig_symbol_present(nvml: &Nvml) -> bool {
    nvml.lib().nvmlGpmMigSampleGet.is_ok()
}

/// A GPM sample kept between ticks: the raw handle of a `GpmSample`, owned.
///
/// Turn it back into a `GpmSample` with [`GpmHandle::restore`] (dropping that frees it). A
/// handle dropped without being restored leaks one small allocation in the driver, nothing
/// worse; the source restores every handle it holds when it is dropped.
#[derive(Debug)]
pub(crate) struct GpmHandle(sys::nvmlGpmSample_t);

// SAFETY: the handle is an opaque pointer owned by exactly one `GpmHandle`, used only by
// the thread that owns it; nvml-wrapper declares `GpmSample` (its owner) `Send` likewise.
unsafe impl Send for GpmHandle {}

impl GpmHandle {
    /// Take ownership of a sample's handle.
    #[must_use]
    pub(crate) fn keep(sample: GpmSample<'_>) -> GpmHandle {
        GpmHandle(sample.into_handle())
    }

    /// Back into a `GpmSample` of `nvml`, which must be the `Nvml` the sample was allocated
    /// from: each source owns exactly one `Nvml`, and its handles never leave it.
    #[must_use]
    pub(crate) fn restore(self, nvml: &Nvml) -> GpmSample<'_> {
        // SAFETY: the handle came from `GpmSample::into_handle` of a sample allocated by
        // this `nvml` (the caller's invariant) and is restored exactly once (`self` is moved).
        unsafe { GpmSample::from_handle(nvml, self.0) }
    }
}
