//! A fake `libnvidia-ml.so` for the NVML source's end-to-end tests.
//!
//! `truthscale serve --source nvml --nvml-library target/debug/libfake_nvml.so` loads this
//! library instead of NVIDIA's. Its answers come from a JSON scenario named by the
//! `FAKE_NVML_SCENARIO` environment variable, read at `nvmlInit_v2` (without it, init answers
//! `NVML_ERROR_DRIVER_NOT_LOADED`, like a machine without the driver). See `docs/nvml.md` for
//! the scenario format.
//!
//! It exports, with NVML's C names and the struct layouts of `nvml-wrapper-sys` 0.10, every
//! function truthscale calls. The same source built as the example `old_driver`
//! (`target/debug/examples/libold_driver.so`) leaves out `nvmlDeviceGetProcessesUtilizationInfo`,
//! so that a missing symbol (an older driver) is a real `dlsym` failure, not an error code.
//!
//! # Why `unsafe`
//! The workspace denies `unsafe_code`. This crate exists to be called through raw pointers
//! from C: every export is `#[unsafe(no_mangle)] unsafe extern "C"`, writes through caller
//! pointers, and hands out GPM samples as raw boxes. Each `unsafe` block states what it
//! relies on; the rules are NVML's own (valid out-pointers, samples from `nvmlGpmSampleAlloc`).
#![expect(
    unsafe_code,
    reason = "a C ABI library: exports are no_mangle and write through caller pointers"
)]

mod fake;

/// The v1 per-process utilization call: present in current drivers only.
///
/// # Safety
/// `info` must be valid; its `procUtilArray` null or `processSamplesCount` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessesUtilizationInfo(
    device: nvml_wrapper_sys::bindings::nvmlDevice_t,
    info: *mut nvml_wrapper_sys::bindings::nvmlProcessesUtilizationInfo_t,
) -> fake::Ret {
    // SAFETY: forwarded from the caller.
    unsafe { fake::processes_utilization_info(device, info) }
}
