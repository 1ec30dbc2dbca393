//! The fake NVML library as an older driver would ship it: every export of `libfake_nvml.so`
//! except `nvmlDeviceGetProcessesUtilizationInfo`. Built as a `cdylib` example,
//! `target/debug/examples/libold_driver.so`.
#![expect(
    unsafe_code,
    reason = "a C ABI library: exports are no_mangle and write through caller pointers"
)]

#[path = "../src/fake.rs"]
mod fake;
