//! The fake driver: scenario, state and every exported NVML function but one.
//!
//! Shared by the library (`src/lib.rs`, which adds `nvmlDeviceGetProcessesUtilizationInfo`)
//! and the old-driver build (`examples/old_driver.rs`, which does not).
//!
//! Handles are small integers cast to pointers, never dereferenced by anyone: a whole GPU is
//! `(index + 1) << 8`, a MIG device `((index + 1) << 8) | (slot + 1)`. GPM samples are boxed
//! [`GpmSampleData`], allocated by `nvmlGpmSampleAlloc` and freed by `nvmlGpmSampleFree`.

use nvml_wrapper_sys::bindings as sys;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

pub(crate) type Ret = sys::nvmlReturn_t;

pub(crate) const SUCCESS: Ret = sys::nvmlReturn_enum_NVML_SUCCESS;
const UNINITIALIZED: Ret = sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub(crate) const INVALID_ARGUMENT: Ret = sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub(crate) const NOT_SUPPORTED: Ret = sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const NO_PERMISSION: Ret = sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION;
const NOT_FOUND: Ret = sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub(crate) const INSUFFICIENT_SIZE: Ret = sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const DRIVER_NOT_LOADED: Ret = sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
const GPU_IS_LOST: Ret = sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
pub(crate) const VERSION_MISMATCH: Ret = sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
const UNKNOWN: Ret = sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN;
const TIMEOUT: Ret = sys::nvmlReturn_enum_NVML_ERROR_TIMEOUT;

/// GPM metric names accepted in a scenario, with their NVML ids.
const GPM_IDS: &[(&str, u32)] = &[
    (
        "graphics_util",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_GRAPHICS_UTIL,
    ),
    ("sm_util", sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_UTIL),
    (
        "sm_occupancy",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_OCCUPANCY,
    ),
    (
        "integer_util",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_INTEGER_UTIL,
    ),
    (
        "any_tensor_util",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    ),
    (
        "hmma_tensor_util",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_HMMA_TENSOR_UTIL,
    ),
    (
        "imma_tensor_util",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_IMMA_TENSOR_UTIL,
    ),
    (
        "dram_bw_util",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_DRAM_BW_UTIL,
    ),
    (
        "fp64_util",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_FP64_UTIL,
    ),
    (
        "fp32_util",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_FP32_UTIL,
    ),
    (
        "fp16_util",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_FP16_UTIL,
    ),
    (
        "pcie_tx_per_sec",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    ),
    (
        "pcie_rx_per_sec",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    ),
    (
        "nvlink_total_rx_per_sec",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    ),
    (
        "nvlink_total_tx_per_sec",
        sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
    ),
];

/// The cumulative cycle counters a scenario's `counters` may give (percent of elapsed SM
/// cycles), with their NVML GPM ids. nvml-wrapper-sys 0.10 names none of them: the ids follow
/// NVIDIA's `nvmlGpmMetricId_t` order, DCGM fields 1084–1096 = GPM 248–260.
const COUNTER_IDS: &[(&str, u32)] = &[
    ("sm_cycles_active", 249),
    ("mma_cycles_active", 250),
    ("dmma_cycles_active", 251),
    ("hmma_cycles_active", 252),
    ("imma_cycles_active", 253),
    ("dfma_cycles_active", 254),
    ("integer_cycles_active", 257),
    ("fp64_cycles_active", 258),
    ("fp32_cycles_active", 259),
    ("fp16_cycles_active", 260),
];

/// `NVML_GPM_METRIC_SM_CYCLES_ELAPSED`.
const SM_CYCLES_ELAPSED: u32 = 248;

/// Whether `id` is one of the cumulative counters' ids (248–260).
fn is_counter_id(id: u32) -> bool {
    (SM_CYCLES_ELAPSED..=260).contains(&id)
}

/// Period of the fake busy-flag ring buffer (the driver's is 1/6 s to 1 s).
const UTIL_PERIOD_US: u64 = 166_666;
/// Length of the fake busy-flag ring buffer.
const UTIL_BUFFER_US: u64 = 20_000_000;
/// The most MIG devices a GPU reports (`nvmlDeviceGetMaxMigDeviceCount`).
const MAX_MIG_DEVICES: u32 = 7;

fn default_driver() -> String {
    "550.54.15".into()
}
fn default_nvml() -> String {
    "12.550.54.15".into()
}
fn default_cuda() -> i32 {
    12040
}
fn default_true() -> bool {
    true
}

/// The JSON scenario (`FAKE_NVML_SCENARIO`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Scenario {
    /// Free text saying what the scenario stands for.
    #[serde(default, rename = "_comment")]
    _comment: Option<String>,
    #[serde(default = "default_driver")]
    driver_version: String,
    #[serde(default = "default_nvml")]
    nvml_version: String,
    #[serde(default = "default_cuda")]
    cuda_driver_version: i32,
    /// `nvmlInit_v2` fails: `driver_not_loaded` or `no_permission`.
    #[serde(default)]
    init_error: Option<String>,
    devices: Vec<Device>,
}

/// One GPU.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Device {
    name: String,
    uuid: String,
    #[serde(default)]
    pci_bus_id: Option<String>,
    /// The minor number (`/dev/nvidia<minor>`); absent: the device's index.
    #[serde(default)]
    minor: Option<u32>,
    /// `hopper`, `ampere`, `ada`, `blackwell`, …
    architecture: String,
    memory_total_bytes: u64,
    #[serde(default)]
    memory_used_bytes: u64,
    #[serde(default)]
    memory_reserved_bytes: u64,
    /// Busy flag in percent; absent: not supported (as on a GPU in MIG mode).
    #[serde(default)]
    util_percent: Option<u32>,
    #[serde(default)]
    power_watts: Option<f64>,
    /// What the power gauge (`nvmlDeviceGetPowerUsage`) reads, where it differs from the
    /// energy counter's rate (`power_watts`): a test then tells which of the two a value
    /// came from.
    #[serde(default)]
    power_gauge_watts: Option<f64>,
    #[serde(default)]
    power_limit_watts: Option<f64>,
    /// The energy counter exists (it grows at `power_watts`).
    #[serde(default = "default_true")]
    energy: bool,
    /// The SM clock `nvmlDeviceGetClockInfo` reads now (a point reading).
    #[serde(default)]
    sm_clock_mhz: Option<u32>,
    /// The SM clock in the driver's processor-clock samples (`nvmlDeviceGetSamples` with
    /// `NVML_PROCESSOR_CLK_SAMPLES`), which cover the window; absent: not supported.
    #[serde(default)]
    sm_clock_samples_mhz: Option<u32>,
    /// From `after_ms` after the library loaded, the processor-clock samples read `mhz`
    /// (those stamped before, `sm_clock_samples_mhz`).
    #[serde(default)]
    sm_clock_samples_after: Option<ClockChange>,
    /// `nvmlDeviceGetSamples` answers `UNKNOWN` for calls in this span, in ms after the
    /// library loaded (a driver failing a call now and then).
    #[serde(default)]
    samples_error_between_ms: Option<(u64, u64)>,
    #[serde(default)]
    mem_clock_mhz: Option<u32>,
    #[serde(default)]
    temperature_c: Option<u32>,
    /// Clock-event reason bits.
    #[serde(default)]
    clocks_event_reasons: u64,
    /// The PCIe link's current generation (`nvmlDeviceGetCurrPcieLinkGeneration`); absent:
    /// not supported.
    #[serde(default)]
    pcie_link_gen: Option<u32>,
    /// The PCIe link's current width in lanes (`nvmlDeviceGetCurrPcieLinkWidth`); absent:
    /// not supported.
    #[serde(default)]
    pcie_link_width: Option<u32>,
    /// PCIe receive throughput in KB/s (`nvmlDeviceGetPcieThroughput`, RX); absent: not
    /// supported.
    #[serde(default)]
    pcie_rx_kbps: Option<u32>,
    /// PCIe transmit throughput in KB/s (`nvmlDeviceGetPcieThroughput`, TX); absent: not
    /// supported.
    #[serde(default)]
    pcie_tx_kbps: Option<u32>,
    /// The PCIe byte counters' rates, bytes a second (`NVML_FI_DEV_PCIE_COUNT_RX_BYTES` /
    /// `…TX_BYTES`: they count from 2^40 up at this rate since the library loaded, stamped
    /// with the time they are read); absent: not supported, as on drivers before them.
    #[serde(default)]
    pcie_rx_bytes_per_sec: Option<f64>,
    #[serde(default)]
    pcie_tx_bytes_per_sec: Option<f64>,
    /// Single-bit ECC errors since the driver loaded (`nvmlDeviceGetTotalEccErrors`,
    /// corrected, volatile); absent: not supported (ECC off).
    #[serde(default)]
    ecc_sbe_volatile: Option<u64>,
    /// Double-bit ECC errors since the driver loaded (uncorrected, volatile).
    #[serde(default)]
    ecc_dbe_volatile: Option<u64>,
    /// Double-bit ECC errors over the device's life (uncorrected, aggregate).
    #[serde(default)]
    ecc_dbe_aggregate: Option<u64>,
    /// The row remapper (`nvmlDeviceGetRemappedRows`); absent: not supported (pre-Ampere).
    #[serde(default)]
    row_remap: Option<RowRemap>,
    /// Power violation time in ns (`nvmlDeviceGetViolationStatus`, power); absent: not
    /// supported.
    #[serde(default)]
    power_violation_ns: Option<u64>,
    /// Thermal violation time in ns (`nvmlDeviceGetViolationStatus`, thermal).
    #[serde(default)]
    thermal_violation_ns: Option<u64>,
    /// The recovery action the driver asks for (`nvmlDeviceGetFieldValues`,
    /// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`); absent: that field answers `NOT_SUPPORTED`.
    #[serde(default)]
    recovery_action: Option<u32>,
    /// The clock-event reasons' times in ns, by name (`sw_power_cap`, `sync_boost`,
    /// `sw_thermal`, `hw_thermal`, `hw_power_brake`; field values under NVML 12's ids); a
    /// reason not listed answers `NOT_SUPPORTED` in its own slot.
    #[serde(default)]
    clock_event_ns: BTreeMap<String, u64>,
    /// Critical XID events, each delivered once to every event set the GPU is registered
    /// on, from `after_ms` after `nvmlInit_v2`.
    #[serde(default)]
    xid_events: Vec<XidEvent>,
    /// GPM; absent: not supported (pre-Hopper).
    #[serde(default)]
    gpm: Option<Gpm>,
    /// MIG instances; non-empty means MIG mode is on.
    #[serde(default)]
    mig: Vec<MigInstance>,
    #[serde(default)]
    processes: Vec<Process>,
    /// Every second call of `nvmlDeviceGetMemoryInfo_v2` on the GPU takes this long (a
    /// driver slow to answer now and then): the calls after it in a tick, the energy
    /// counter's read among them, come that much later.
    #[serde(default)]
    memory_stall_ms: Option<u64>,
    /// After this many energy readings every call on this GPU returns `GPU_IS_LOST`.
    #[serde(default)]
    lost_after_samples: Option<u32>,
    /// The GPU falls off the bus at this call instead: the first such call from its time
    /// on answers `GPU_IS_LOST`, the calls of the tick before it having answered.
    #[serde(default)]
    lost_at_call: Option<LostAtCall>,
    /// … for this long, then it answers again (default: for ever).
    #[serde(default)]
    lost_for_ms: Option<u64>,
    /// From this long after the library is loaded, `nvmlDeviceGetHandleByIndex` answers
    /// `NO_PERMISSION` for this GPU (a container that lost its device node).
    #[serde(default)]
    handle_denied_after_ms: Option<u64>,
    /// Until this long after the library is loaded, `nvmlDeviceRegisterEvents` answers
    /// `UNKNOWN` for this GPU (a driver still starting).
    #[serde(default)]
    register_events_failing_ms: Option<u64>,
    /// A driver reload: from `after_ms` after the library is loaded, the volatile ECC counts
    /// read these (they count from 0 again); the aggregate count is kept.
    #[serde(default)]
    ecc_reload: Option<EccReload>,
}

/// The volatile ECC counts after a driver reload, and when it happens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EccReload {
    after_ms: u64,
    sbe_volatile: u64,
    dbe_volatile: u64,
}

/// Where a GPU falls off the bus ([`Device::lost_at_call`]): the call, by its NVML name, and
/// from how long after the library loaded. With `field` (for `nvmlDeviceGetFieldValues`),
/// only that field's entry answers `GPU_IS_LOST`, the call itself succeeding, as the driver
/// answers each field apart. From then on every call on the GPU answers `GPU_IS_LOST`, as
/// after [`Device::lost_after_samples`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LostAtCall {
    call: String,
    #[serde(default)]
    field: Option<String>,
    after_ms: u64,
}

/// One critical XID event.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct XidEvent {
    xid: u64,
    #[serde(default)]
    after_ms: u64,
}

/// The field values a scenario may give, by NVML 12's field id: the recovery action, the
/// clock-event reasons' times by their names in `clock_event_ns`, and the PCIe byte
/// counters.
const FIELD_IDS: &[(u32, &str)] = &[
    (
        sys::field_id::NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
        "recovery_action",
    ),
    (
        sys::field_id::NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,
        "sw_power_cap",
    ),
    (
        sys::field_id::NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST,
        "sync_boost",
    ),
    (
        sys::field_id::NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
        "sw_thermal",
    ),
    (
        sys::field_id::NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
        "hw_thermal",
    ),
    (
        sys::field_id::NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
        "hw_power_brake",
    ),
    (
        sys::field_id::NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
        "pcie_rx_bytes",
    ),
    (
        sys::field_id::NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
        "pcie_tx_bytes",
    ),
];

/// A PCIe byte counter growing at `rate` bytes a second for `secs`: from 2^40.
fn pcie_bytes(rate: Option<f64>, secs: f64) -> Option<u64> {
    rate.map(|r| (1u64 << 40) + (r * secs) as u64)
}

/// An event set: each registered GPU with how many of its XID events were delivered.
#[derive(Debug, Default)]
struct EventSetState {
    devices: Vec<(usize, usize)>,
}

/// The row remapper's answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RowRemap {
    #[serde(default)]
    correctable: u32,
    #[serde(default)]
    uncorrectable: u32,
    #[serde(default)]
    pending: bool,
    #[serde(default)]
    failed: bool,
}

/// GPM behaviour of a GPU or GPU instance.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Gpm {
    /// `nvmlGpmSampleGet` / `nvmlGpmMigSampleGet` fails: `no_permission`, `not_supported`.
    #[serde(default)]
    sample_error: Option<String>,
    /// `[from, to)` milliseconds after the library is loaded: the samples taken then fail
    /// with `UNKNOWN` (a passing failure).
    #[serde(default)]
    sample_error_between_ms: Option<(u64, u64)>,
    /// `[from, to)` milliseconds after the library is loaded: `nvmlGpmMetricsGet` of a pair
    /// whose second sample was taken then fails with `UNKNOWN` (a passing failure).
    #[serde(default)]
    metrics_error_between_ms: Option<(u64, u64)>,
    /// Metric values by name (`sm_util`, `any_tensor_util`, …): percent or MiB/s. A metric
    /// not listed answers `NOT_SUPPORTED` in its own slot.
    #[serde(default)]
    metrics: BTreeMap<String, f64>,
    /// The metrics from some time on (those it lists; the others stay). A pair of samples
    /// reads each metric's mean over its span, as GPM's metrics are, so a pair spanning the
    /// change reads a mix of the two weighted by the time on each side.
    #[serde(default)]
    metrics_after: Option<MetricsAfter>,
    /// The cumulative cycle counters (GPM 248–260); absent: each answers `NOT_SUPPORTED` in
    /// its own slot, like a driver without them.
    #[serde(default)]
    counters: Option<Counters>,
    /// How a counter id the scenario does not give answers: `not_supported` (default) or
    /// `invalid_argument`, as NVML 13.580 (driver 580.159) answered every id of 248–260 on
    /// an H200.
    #[serde(default)]
    counters_error: Option<String>,
}

/// GPM metrics that change at a time.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetricsAfter {
    /// Milliseconds after the library is loaded.
    after_ms: u64,
    metrics: BTreeMap<String, f64>,
}

impl Gpm {
    /// Metric `name`'s mean over the pair of samples taken `t1` and `t2` seconds after the
    /// library loaded: its value, or the time-weighted mean of its values before and after
    /// [`Gpm::metrics_after`]'s change.
    fn metric_between(&self, name: &str, t1: f64, t2: f64) -> Option<f64> {
        let before = self.metrics.get(name).copied();
        let Some(change) = &self.metrics_after else {
            return before;
        };
        let Some(&after) = change.metrics.get(name) else {
            return before;
        };
        let at = change.after_ms as f64 / 1000.0;
        let share_after = ((t2 - at.max(t1)) / (t2 - t1)).clamp(0.0, 1.0);
        Some(before.unwrap_or(after) * (1.0 - share_after) + after * share_after)
    }
}

fn default_counters_start() -> f64 {
    // 2^48 cycles: days of uptime, far past the FP64 blank 2^47.
    281_474_976_710_656.0
}

/// Cumulative cycle counters, computed at each `nvmlGpmMetricsGet` from the time since
/// `nvmlInit_v2`: elapsed = start + SMs × clock × t, each active counter = its percent of
/// that (the start too), so every delta's ratio is the percent exactly.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Counters {
    /// SMs the elapsed cycles are summed over (the GPU's, or the instance's).
    sms: u32,
    /// The SM clock the cycles count at; default: the device's `sm_clock_samples_mhz`, else
    /// its `sm_clock_mhz`.
    #[serde(default)]
    clock_mhz: Option<f64>,
    /// The elapsed counter at `nvmlInit_v2`.
    #[serde(default = "default_counters_start")]
    start_cycles: f64,
    /// Active cycles in percent of elapsed, by name (`mma_cycles_active`, …; see
    /// `COUNTER_IDS`). A counter not listed answers `NOT_SUPPORTED` in its own slot.
    #[serde(default)]
    active_percent: BTreeMap<String, f64>,
}

impl Counters {
    /// The value of counter `id` `secs` seconds after init; `None`: not in the scenario.
    fn value(&self, d: &Device, id: u32, secs: f64) -> Option<f64> {
        let mhz = self
            .clock_mhz
            .or_else(|| d.sm_clock_samples_mhz.or(d.sm_clock_mhz).map(f64::from))?;
        let elapsed = self.start_cycles + f64::from(self.sms) * mhz * 1e6 * secs;
        if id == SM_CYCLES_ELAPSED {
            return Some(elapsed);
        }
        let (name, _) = COUNTER_IDS.iter().find(|(_, i)| *i == id)?;
        self.active_percent.get(*name).map(|p| elapsed * p / 100.0)
    }
}

/// One MIG GPU instance (one compute instance spanning it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MigInstance {
    gpu_instance_id: u32,
    #[serde(default)]
    compute_instance_id: u32,
    /// GPU-instance slices (the `3` of `3g.40gb`).
    slices: u32,
    sms: u32,
    memory_mb: u64,
    #[serde(default)]
    memory_used_bytes: u64,
    #[serde(default)]
    gpm: Option<Gpm>,
    #[serde(default)]
    processes: Vec<Process>,
}

/// A process with a compute context.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Process {
    pid: u32,
    used_memory_bytes: u64,
    /// Per-process SM busy percent (`nvmlDeviceGetProcessesUtilizationInfo`).
    #[serde(default)]
    sm_util: Option<u32>,
}

/// A GPM sample as the fake keeps it.
#[derive(Debug)]
pub(crate) struct GpmSampleData {
    taken: Option<(usize, Option<u32>, Instant)>,
}

/// Per-GPU run-time state.
#[derive(Debug, Default, Clone, Copy)]
struct DeviceState {
    energy_reads: u32,
    memory_reads: u32,
    lost_at: Option<Instant>,
}

/// The loaded scenario and run-time state.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) scenario: Scenario,
    started: Instant,
    devices: Vec<DeviceState>,
    /// Event sets by handle − 1; `None` once freed.
    event_sets: Vec<Option<EventSetState>>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

pub(crate) fn lock() -> MutexGuard<'static, Option<State>> {
    STATE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Which GPU (and MIG slot) a handle names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    pub(crate) gpu: usize,
    pub(crate) mig: Option<usize>,
}

fn handle_of(gpu: usize, mig: Option<usize>) -> sys::nvmlDevice_t {
    let v = ((gpu + 1) << 8) | mig.map_or(0, |m| m + 1);
    v as sys::nvmlDevice_t
}

fn target_of(h: sys::nvmlDevice_t) -> Option<Target> {
    let v = h as usize;
    let gpu = (v >> 8).checked_sub(1)?;
    let mig = (v & 0xff).checked_sub(1);
    Some(Target { gpu, mig })
}

impl State {
    /// The GPU a handle names, or the error NVML would give (invalid, lost).
    pub(crate) fn device(&self, h: sys::nvmlDevice_t) -> Result<(Target, &Device), Ret> {
        let t = target_of(h).ok_or(INVALID_ARGUMENT)?;
        let d = self.scenario.devices.get(t.gpu).ok_or(INVALID_ARGUMENT)?;
        if let Some(m) = t.mig
            && m >= d.mig.len()
        {
            return Err(INVALID_ARGUMENT);
        }
        if self.is_lost(t.gpu) {
            return Err(GPU_IS_LOST);
        }
        Ok((t, d))
    }

    /// Whether `call` on `gpu` (`field`: one field value's entry) is the one that loses the
    /// GPU now ([`Device::lost_at_call`]); the GPU is then lost from this instant.
    fn loses_at(&mut self, gpu: usize, call: &str, field: Option<&str>) -> bool {
        let due = self
            .scenario
            .devices
            .get(gpu)
            .and_then(|d| d.lost_at_call.as_ref())
            .is_some_and(|at| {
                at.call == call
                    && at.field.as_deref() == field
                    && self.started.elapsed() >= Duration::from_millis(at.after_ms)
            });
        match self.devices.get_mut(gpu) {
            Some(st) if due && st.lost_at.is_none() => {
                st.lost_at = Some(Instant::now());
                true
            }
            _ => false,
        }
    }

    /// [`State::loses_at`] for the GPU a handle names (a MIG handle: its GPU's).
    fn loses_by(&mut self, h: sys::nvmlDevice_t, call: &str) -> bool {
        target_of(h).is_some_and(|t| self.loses_at(t.gpu, call, None))
    }

    fn is_lost(&self, gpu: usize) -> bool {
        let Some(lost_at) = self.devices.get(gpu).and_then(|s| s.lost_at) else {
            return false;
        };
        let lost_for = self
            .scenario
            .devices
            .get(gpu)
            .and_then(|d| d.lost_for_ms)
            .map(Duration::from_millis);
        lost_for.is_none_or(|f| lost_at.elapsed() < f)
    }
}

/// The processes visible through a handle: a MIG device's own, or all on a GPU.
fn processes(t: Target, d: &Device) -> Vec<(&Process, Option<(u32, u32)>)> {
    match t.mig {
        Some(m) => d.mig[m]
            .processes
            .iter()
            .map(|p| {
                let mi = &d.mig[m];
                (p, Some((mi.gpu_instance_id, mi.compute_instance_id)))
            })
            .collect(),
        None => d
            .processes
            .iter()
            .map(|p| (p, None))
            .chain(d.mig.iter().flat_map(|mi| {
                mi.processes
                    .iter()
                    .map(|p| (p, Some((mi.gpu_instance_id, mi.compute_instance_id))))
            }))
            .collect(),
    }
}

/// Run `f` on the loaded state, or answer `UNINITIALIZED`.
pub(crate) fn with_state(f: impl FnOnce(&mut State) -> Ret) -> Ret {
    match lock().as_mut() {
        Some(s) => f(s),
        None => UNINITIALIZED,
    }
}

/// Run `f` on the GPU a handle names.
fn with_device(h: sys::nvmlDevice_t, f: impl FnOnce(Target, &Device) -> Ret) -> Ret {
    with_state(|s| match s.device(h) {
        Ok((t, d)) => f(t, d),
        Err(e) => e,
    })
}

fn load() -> Result<State, Ret> {
    let Some(path) = std::env::var_os("FAKE_NVML_SCENARIO") else {
        return Err(DRIVER_NOT_LOADED);
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        eprintln!("fake-nvml: cannot read {}: {e}", path.to_string_lossy());
        UNKNOWN
    })?;
    let scenario: Scenario = serde_json::from_str(&text).map_err(|e| {
        eprintln!("fake-nvml: {}: {e}", path.to_string_lossy());
        UNKNOWN
    })?;
    match scenario.init_error.as_deref() {
        None => {}
        Some("driver_not_loaded") => return Err(DRIVER_NOT_LOADED),
        Some("no_permission") => return Err(NO_PERMISSION),
        Some(_) => return Err(UNKNOWN),
    }
    for d in &scenario.devices {
        for name in d
            .gpm
            .iter()
            .chain(d.mig.iter().filter_map(|m| m.gpm.as_ref()))
            .flat_map(|g| g.metrics.keys())
        {
            if !GPM_IDS.iter().any(|(n, _)| n == name) {
                eprintln!("fake-nvml: unknown GPM metric {name:?}");
                return Err(UNKNOWN);
            }
        }
        for name in d
            .gpm
            .iter()
            .chain(d.mig.iter().filter_map(|m| m.gpm.as_ref()))
            .filter_map(|g| g.counters.as_ref())
            .flat_map(|c| c.active_percent.keys())
        {
            if !COUNTER_IDS.iter().any(|(n, _)| n == name) {
                eprintln!("fake-nvml: unknown GPM counter {name:?}");
                return Err(UNKNOWN);
            }
        }
    }
    let devices = vec![DeviceState::default(); scenario.devices.len()];
    for d in &scenario.devices {
        if let Some(name) = d
            .clock_event_ns
            .keys()
            .find(|n| !FIELD_IDS.iter().any(|(_, f)| f == n))
        {
            eprintln!("fake-nvml: unknown clock-event reason {name:?}");
            return Err(UNKNOWN);
        }
    }
    Ok(State {
        scenario,
        started: Instant::now(),
        devices,
        event_sets: Vec::new(),
    })
}

/// Copy `s` and a NUL into a C buffer of `len` bytes.
///
/// # Safety
/// `buf` must be valid for `len` bytes of writes.
pub(crate) unsafe fn copy_str(s: &str, buf: *mut c_char, len: c_uint) -> Ret {
    if buf.is_null() {
        return INVALID_ARGUMENT;
    }
    let bytes = s.as_bytes();
    if bytes.len() + 1 > len as usize {
        return INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller gave `len` writable bytes and we write `bytes.len() + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    SUCCESS
}

/// Write `v` through `out` when it is not null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, v: T) -> Ret {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: not null, and the caller promises it is valid.
    unsafe { out.write(v) };
    SUCCESS
}

// ---------------------------------------------------------------------------------------------
// Initialisation and system queries.

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlInit_v2() -> Ret {
    match load() {
        Ok(s) => {
            *lock() = Some(s);
            SUCCESS
        }
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlShutdown() -> Ret {
    match lock().take() {
        Some(_) => SUCCESS,
        None => UNINITIALIZED,
    }
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlErrorString(result: Ret) -> *const c_char {
    let s: &'static std::ffi::CStr = match result {
        SUCCESS => c"Success",
        UNINITIALIZED => c"Uninitialized",
        INVALID_ARGUMENT => c"Invalid Argument",
        NOT_SUPPORTED => c"Not Supported",
        NO_PERMISSION => c"Insufficient Permissions",
        NOT_FOUND => c"Not Found",
        INSUFFICIENT_SIZE => c"Insufficient Size",
        DRIVER_NOT_LOADED => c"Driver Not Loaded",
        GPU_IS_LOST => c"GPU is lost",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

/// # Safety
/// `version` must be valid for `length` bytes.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> Ret {
    // SAFETY: forwarded from the caller.
    with_state(|s| unsafe { copy_str(&s.scenario.driver_version, version, length) })
}

/// # Safety
/// `version` must be valid for `length` bytes.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> Ret {
    // SAFETY: forwarded from the caller.
    with_state(|s| unsafe { copy_str(&s.scenario.nvml_version, version, length) })
}

/// # Safety
/// `v` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> Ret {
    // SAFETY: forwarded from the caller.
    with_state(|s| unsafe { put(v, s.scenario.cuda_driver_version) })
}

/// # Safety
/// `count` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> Ret {
    // SAFETY: forwarded from the caller.
    with_state(|s| unsafe { put(count, s.scenario.devices.len() as c_uint) })
}

/// # Safety
/// `device` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut sys::nvmlDevice_t,
) -> Ret {
    with_state(|s| {
        if s.loses_at(index as usize, "nvmlDeviceGetHandleByIndex_v2", None) {
            return GPU_IS_LOST;
        }
        let Some(d) = s.scenario.devices.get(index as usize) else {
            return INVALID_ARGUMENT;
        };
        if d.handle_denied_after_ms
            .is_some_and(|ms| s.started.elapsed().as_millis() >= u128::from(ms))
        {
            return NO_PERMISSION;
        }
        // SAFETY: forwarded from the caller.
        unsafe { put(device, handle_of(index as usize, None)) }
    })
}

// ---------------------------------------------------------------------------------------------
// Identity.

/// # Safety
/// `index` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetIndex(
    device: sys::nvmlDevice_t,
    index: *mut c_uint,
) -> Ret {
    // SAFETY: forwarded from the caller.
    with_device(device, |t, _| unsafe { put(index, t.gpu as c_uint) })
}

/// # Safety
/// `minor` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: sys::nvmlDevice_t,
    minor: *mut c_uint,
) -> Ret {
    with_device(device, |t, d| {
        let m = d.minor.unwrap_or(t.gpu as c_uint);
        // SAFETY: forwarded from the caller.
        unsafe { put(minor, m) }
    })
}

/// # Safety
/// `name` must be valid for `length` bytes.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetName(
    device: sys::nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> Ret {
    with_device(device, |t, d| {
        let n = match t.mig {
            Some(m) => format!(
                "{} MIG {}g.{}gb",
                d.name,
                d.mig[m].slices,
                d.mig[m].memory_mb.div_ceil(1024)
            ),
            None => d.name.clone(),
        };
        // SAFETY: forwarded from the caller.
        unsafe { copy_str(&n, name, length) }
    })
}

/// # Safety
/// `uuid` must be valid for `length` bytes.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetUUID(
    device: sys::nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> Ret {
    with_device(device, |t, d| {
        let u = match t.mig {
            Some(m) => format!(
                "MIG-{}-{}",
                d.uuid.trim_start_matches("GPU-"),
                d.mig[m].gpu_instance_id
            ),
            None => d.uuid.clone(),
        };
        // SAFETY: forwarded from the caller.
        unsafe { copy_str(&u, uuid, length) }
    })
}

/// # Safety
/// `pci` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: sys::nvmlDevice_t,
    pci: *mut sys::nvmlPciInfo_t,
) -> Ret {
    with_device(device, |_, d| {
        let Some(id) = &d.pci_bus_id else {
            return NOT_SUPPORTED;
        };
        let mut info = sys::nvmlPciInfo_t {
            busIdLegacy: [0; 16],
            domain: 0,
            bus: 0,
            device: 0,
            pciDeviceId: 0x2330_10de,
            pciSubSystemId: 0x16c1_10de,
            busId: [0; 32],
        };
        let parts: Vec<&str> = id.split([':', '.']).collect();
        if let [dom, bus, dev, _] = parts[..] {
            info.domain = u32::from_str_radix(dom, 16).unwrap_or(0);
            info.bus = u32::from_str_radix(bus, 16).unwrap_or(0);
            info.device = u32::from_str_radix(dev, 16).unwrap_or(0);
        }
        // SAFETY: the arrays are 32 and 16 bytes long.
        let r = unsafe { copy_str(id, info.busId.as_mut_ptr(), 32) };
        if r != SUCCESS {
            return r;
        }
        let legacy = id.get(id.len().saturating_sub(12)..).unwrap_or(id);
        // SAFETY: as above.
        let _ = unsafe { copy_str(legacy, info.busIdLegacy.as_mut_ptr(), 16) };
        // SAFETY: forwarded from the caller.
        unsafe { put(pci, info) }
    })
}

/// # Safety
/// `arch` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetArchitecture(
    device: sys::nvmlDevice_t,
    arch: *mut sys::nvmlDeviceArchitecture_t,
) -> Ret {
    with_device(device, |_, d| {
        let a = match d.architecture.to_ascii_lowercase().as_str() {
            "volta" => sys::NVML_DEVICE_ARCH_VOLTA,
            "turing" => sys::NVML_DEVICE_ARCH_TURING,
            "ampere" => sys::NVML_DEVICE_ARCH_AMPERE,
            "ada" => sys::NVML_DEVICE_ARCH_ADA,
            "hopper" => sys::NVML_DEVICE_ARCH_HOPPER,
            "blackwell" => sys::NVML_DEVICE_ARCH_BLACKWELL,
            _ => sys::NVML_DEVICE_ARCH_UNKNOWN,
        };
        // SAFETY: forwarded from the caller.
        unsafe { put(arch, a) }
    })
}

// ---------------------------------------------------------------------------------------------
// Telemetry.

/// # Safety
/// `utilization` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: sys::nvmlDevice_t,
    utilization: *mut sys::nvmlUtilization_t,
) -> Ret {
    with_device(device, |t, d| match (t.mig, d.util_percent) {
        (None, Some(u)) if d.mig.is_empty() => {
            let v = sys::nvmlUtilization_t {
                gpu: u,
                memory: u / 2,
            };
            // SAFETY: forwarded from the caller.
            unsafe { put(utilization, v) }
        }
        _ => NOT_SUPPORTED,
    })
}

/// A change of the SM clock the driver's samples read.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClockChange {
    after_ms: u64,
    mhz: u32,
}

/// The busy-flag ring buffer: one sample every [`UTIL_PERIOD_US`] of wall time, newer than
/// `last_seen` and at most [`UTIL_BUFFER_US`] old, each `value_at` its timestamp (µs).
fn util_samples(last_seen: u64, value_at: impl Fn(u64) -> u32) -> Vec<sys::nvmlSample_t> {
    let now = now_us();
    let oldest = now.saturating_sub(UTIL_BUFFER_US).max(last_seen + 1);
    let first = oldest.div_ceil(UTIL_PERIOD_US);
    let last = now / UTIL_PERIOD_US;
    (first..=last)
        .map(|k| sys::nvmlSample_t {
            timeStamp: k * UTIL_PERIOD_US,
            sampleValue: sys::nvmlValue_t {
                uiVal: value_at(k * UTIL_PERIOD_US),
            },
        })
        .collect()
}

/// # Safety
/// Pointers must be valid as NVML documents: `samples` null or `*count` entries.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetSamples(
    device: sys::nvmlDevice_t,
    type_: sys::nvmlSamplingType_t,
    last_seen: c_ulonglong,
    value_type: *mut sys::nvmlValueType_t,
    count: *mut c_uint,
    samples: *mut sys::nvmlSample_t,
) -> Ret {
    with_state(|s| {
        let now_ms = s.started.elapsed().as_millis();
        let (t, d) = match s.device(device) {
            Ok(found) => found,
            Err(e) => return e,
        };
        if d.samples_error_between_ms
            .is_some_and(|(from, to)| (u128::from(from)..u128::from(to)).contains(&now_ms))
        {
            return UNKNOWN;
        }
        let value = match type_ {
            sys::nvmlSamplingType_enum_NVML_GPU_UTILIZATION_SAMPLES => {
                d.util_percent.filter(|_| d.mig.is_empty())
            }
            sys::nvmlSamplingType_enum_NVML_PROCESSOR_CLK_SAMPLES => d.sm_clock_samples_mhz,
            _ => None,
        };
        let (None, Some(u)) = (t.mig, value) else {
            return NOT_SUPPORTED;
        };
        if count.is_null() || value_type.is_null() {
            return INVALID_ARGUMENT;
        }
        // The wall clock's µs when the library loaded: a clock change is stamped from it.
        let loaded_us = now_us().saturating_sub(s.started.elapsed().as_micros() as u64);
        let change = (type_ == sys::nvmlSamplingType_enum_NVML_PROCESSOR_CLK_SAMPLES)
            .then_some(d.sm_clock_samples_after)
            .flatten();
        let all = util_samples(last_seen, |ts| match change {
            Some(c) if ts >= loaded_us + c.after_ms * 1000 => c.mhz,
            _ => u,
        });
        // SAFETY: checked not null; valid per the caller.
        unsafe {
            value_type.write(sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT);
            if all.is_empty() {
                count.write(0);
                return NOT_FOUND;
            }
            if samples.is_null() {
                count.write(all.len() as c_uint);
                return SUCCESS;
            }
            let n = all.len().min(*count as usize);
            std::ptr::copy_nonoverlapping(all.as_ptr(), samples, n);
            count.write(n as c_uint);
        }
        SUCCESS
    })
}

/// # Safety
/// `memory` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: sys::nvmlDevice_t,
    memory: *mut sys::nvmlMemory_v2_t,
) -> Ret {
    // The stall is slept once the state is unlocked, as a slow driver holds no lock of ours.
    let mut stall = None;
    let ret = with_state(|s| {
        if s.loses_by(device, "nvmlDeviceGetMemoryInfo_v2") {
            return GPU_IS_LOST;
        }
        let (t, stall_ms) = match s.device(device) {
            Ok((t, d)) => (t, d.memory_stall_ms),
            Err(e) => return e,
        };
        if let (None, Some(ms)) = (t.mig, stall_ms) {
            let st = &mut s.devices[t.gpu];
            st.memory_reads += 1;
            if st.memory_reads % 2 == 0 {
                stall = Some(Duration::from_millis(ms));
            }
        }
        match s.device(device) {
            Ok((t, d)) => memory_info(t, d, memory),
            Err(e) => e,
        }
    });
    if let Some(stall) = stall {
        std::thread::sleep(stall);
    }
    ret
}

/// `nvmlDeviceGetMemoryInfo_v2` on target `t` of GPU `d`, but for its stall.
fn memory_info(t: Target, d: &Device, memory: *mut sys::nvmlMemory_v2_t) -> Ret {
    if memory.is_null() {
        return INVALID_ARGUMENT;
    }
    let expected = (std::mem::size_of::<sys::nvmlMemory_v2_t>() as u32) | (2 << 24);
    // SAFETY: not null; valid per the caller.
    if unsafe { (*memory).version } != expected {
        return VERSION_MISMATCH;
    }
    let (total, used, reserved) = match t.mig {
        Some(m) => (d.mig[m].memory_mb << 20, d.mig[m].memory_used_bytes, 0u64),
        None => (
            d.memory_total_bytes,
            d.memory_used_bytes,
            d.memory_reserved_bytes,
        ),
    };
    let v = sys::nvmlMemory_v2_t {
        version: expected,
        total,
        reserved,
        free: total.saturating_sub(used + reserved),
        used,
    };
    // SAFETY: forwarded from the caller.
    unsafe { put(memory, v) }
}

/// # Safety
/// `energy` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: sys::nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> Ret {
    with_state(|s| {
        let (t, d) = match s.device(device) {
            Ok(x) => x,
            Err(e) => return e,
        };
        if t.mig.is_some() || !d.energy {
            return NOT_SUPPORTED;
        }
        let Some(p) = d.power_watts else {
            return NOT_SUPPORTED;
        };
        let lost_after = d.lost_after_samples;
        // mJ = W · ms, from a non-zero start as a real counter has.
        let ms = s.started.elapsed().as_secs_f64() * 1000.0;
        let mj = 1_000_000_000.0 + p * ms;
        let st = &mut s.devices[t.gpu];
        st.energy_reads += 1;
        if st.lost_at.is_none() && lost_after.is_some_and(|n| st.energy_reads > n) {
            st.lost_at = Some(Instant::now());
            return GPU_IS_LOST;
        }
        // SAFETY: forwarded from the caller.
        unsafe { put(energy, mj as c_ulonglong) }
    })
}

/// # Safety
/// `power` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: sys::nvmlDevice_t,
    power: *mut c_uint,
) -> Ret {
    with_device(device, |t, d| {
        match (t.mig, d.power_gauge_watts.or(d.power_watts)) {
            // SAFETY: forwarded from the caller.
            (None, Some(p)) => unsafe { put(power, (p * 1000.0) as c_uint) },
            _ => NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `limit` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: sys::nvmlDevice_t,
    limit: *mut c_uint,
) -> Ret {
    with_device(device, |t, d| match (t.mig, d.power_limit_watts) {
        // SAFETY: forwarded from the caller.
        (None, Some(p)) => unsafe { put(limit, (p * 1000.0) as c_uint) },
        _ => NOT_SUPPORTED,
    })
}

/// # Safety
/// `clock` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: sys::nvmlDevice_t,
    type_: sys::nvmlClockType_t,
    clock: *mut c_uint,
) -> Ret {
    with_device(device, |_, d| {
        let v = match type_ {
            sys::nvmlClockType_enum_NVML_CLOCK_SM => d.sm_clock_mhz,
            sys::nvmlClockType_enum_NVML_CLOCK_MEM => d.mem_clock_mhz,
            _ => None,
        };
        match v {
            // SAFETY: forwarded from the caller.
            Some(v) => unsafe { put(clock, v) },
            None => NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `temp` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: sys::nvmlDevice_t,
    sensor: sys::nvmlTemperatureSensors_t,
    temp: *mut c_uint,
) -> Ret {
    with_device(device, |t, d| {
        match (
            sensor == sys::nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU,
            t.mig,
            d.temperature_c,
        ) {
            // SAFETY: forwarded from the caller.
            (true, None, Some(c)) => unsafe { put(temp, c) },
            _ => NOT_SUPPORTED,
        }
    })
}

/// `value` through `out` for a whole GPU; `NOT_SUPPORTED` for a MIG device or without one.
///
/// # Safety
/// `out` must be null or valid for a write.
unsafe fn put_gpu_value(t: Target, value: Option<c_uint>, out: *mut c_uint) -> Ret {
    match (t.mig, value) {
        // SAFETY: forwarded from the caller.
        (None, Some(v)) => unsafe { put(out, v) },
        _ => NOT_SUPPORTED,
    }
}

/// # Safety
/// `link_gen` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    device: sys::nvmlDevice_t,
    link_gen: *mut c_uint,
) -> Ret {
    // SAFETY: forwarded from the caller.
    with_device(device, |t, d| unsafe {
        put_gpu_value(t, d.pcie_link_gen, link_gen)
    })
}

/// # Safety
/// `count` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: sys::nvmlDevice_t,
    error_type: sys::nvmlMemoryErrorType_t,
    counter_type: sys::nvmlEccCounterType_t,
    count: *mut std::ffi::c_ulonglong,
) -> Ret {
    with_state(|s| {
        let (t, d) = match s.device(device) {
            Ok(found) => found,
            Err(e) => return e,
        };
        let reloaded = d
            .ecc_reload
            .as_ref()
            .filter(|r| s.started.elapsed() >= Duration::from_millis(r.after_ms));
        let v = match (error_type, counter_type) {
            (
                sys::nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED,
                sys::nvmlEccCounterType_enum_NVML_VOLATILE_ECC,
            ) => reloaded.map_or(d.ecc_sbe_volatile, |r| Some(r.sbe_volatile)),
            (
                sys::nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                sys::nvmlEccCounterType_enum_NVML_VOLATILE_ECC,
            ) => reloaded.map_or(d.ecc_dbe_volatile, |r| Some(r.dbe_volatile)),
            (
                sys::nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                sys::nvmlEccCounterType_enum_NVML_AGGREGATE_ECC,
            ) => d.ecc_dbe_aggregate,
            _ => None,
        };
        match (t.mig, v) {
            // SAFETY: forwarded from the caller.
            (None, Some(v)) => unsafe { put(count, v) },
            _ => NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// The four pointers must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: sys::nvmlDevice_t,
    corr: *mut c_uint,
    unc: *mut c_uint,
    pending: *mut c_uint,
    failed: *mut c_uint,
) -> Ret {
    with_device(device, |t, d| match (t.mig, &d.row_remap) {
        (None, Some(rr)) => {
            for (out, v) in [
                (corr, rr.correctable),
                (unc, rr.uncorrectable),
                (pending, c_uint::from(rr.pending)),
                (failed, c_uint::from(rr.failed)),
            ] {
                // SAFETY: forwarded from the caller.
                let rc = unsafe { put(out, v) };
                if rc != SUCCESS {
                    return rc;
                }
            }
            SUCCESS
        }
        _ => NOT_SUPPORTED,
    })
}

/// # Safety
/// `time` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetViolationStatus(
    device: sys::nvmlDevice_t,
    policy: sys::nvmlPerfPolicyType_t,
    time: *mut sys::nvmlViolationTime_t,
) -> Ret {
    with_device(device, |t, d| {
        let v = match policy {
            sys::nvmlPerfPolicyType_enum_NVML_PERF_POLICY_POWER => d.power_violation_ns,
            sys::nvmlPerfPolicyType_enum_NVML_PERF_POLICY_THERMAL => d.thermal_violation_ns,
            _ => None,
        };
        match (t.mig, v) {
            // SAFETY: forwarded from the caller.
            (None, Some(ns)) => unsafe {
                put(
                    time,
                    sys::nvmlViolationTime_t {
                        referenceTime: 0,
                        violationTime: ns,
                    },
                )
            },
            _ => NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `values` must be valid for `count` entries.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: sys::nvmlDevice_t,
    count: c_int,
    values: *mut sys::nvmlFieldValue_t,
) -> Ret {
    let Ok(n) = usize::try_from(count) else {
        return INVALID_ARGUMENT;
    };
    if values.is_null() || n == 0 {
        return INVALID_ARGUMENT;
    }
    with_state(|s| {
        if s.loses_by(device, "nvmlDeviceGetFieldValues") {
            return GPU_IS_LOST;
        }
        let (t, d) = match s.device(device) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let secs = s.started.elapsed().as_secs_f64();
        // SAFETY: the caller gave `count` valid entries.
        let values = unsafe { std::slice::from_raw_parts_mut(values, n) };
        for v in values.iter_mut() {
            let value = FIELD_IDS
                .iter()
                .find(|(id, _)| *id == v.fieldId)
                .and_then(|(_, name)| match *name {
                    "recovery_action" => d.recovery_action.map(u64::from),
                    "pcie_rx_bytes" => pcie_bytes(d.pcie_rx_bytes_per_sec, secs),
                    "pcie_tx_bytes" => pcie_bytes(d.pcie_tx_bytes_per_sec, secs),
                    reason => d.clock_event_ns.get(reason).copied(),
                })
                .filter(|_| t.mig.is_none());
            v.timestamp = now_us() as i64;
            v.latencyUsec = 0;
            v.valueType = sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            match value {
                Some(x) => {
                    v.nvmlReturn = SUCCESS;
                    v.value = sys::nvmlValue_t { ullVal: x };
                }
                None => v.nvmlReturn = NOT_SUPPORTED,
            }
        }
        // The field the GPU falls off the bus at answers that alone.
        for v in values {
            let name = FIELD_IDS.iter().find(|(id, _)| *id == v.fieldId);
            if name
                .is_some_and(|(_, name)| s.loses_at(t.gpu, "nvmlDeviceGetFieldValues", Some(name)))
            {
                v.nvmlReturn = GPU_IS_LOST;
            }
        }
        SUCCESS
    })
}

/// # Safety
/// `set` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlEventSetCreate(set: *mut sys::nvmlEventSet_t) -> Ret {
    with_state(|s| {
        s.event_sets.push(Some(EventSetState::default()));
        let handle = s.event_sets.len() as sys::nvmlEventSet_t;
        // SAFETY: forwarded from the caller.
        unsafe { put(set, handle) }
    })
}

/// The event set a handle names, when it is live.
fn event_set(
    sets: &mut [Option<EventSetState>],
    set: sys::nvmlEventSet_t,
) -> Option<&mut EventSetState> {
    let i = (set as usize).checked_sub(1)?;
    sets.get_mut(i)?.as_mut()
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlDeviceRegisterEvents(
    device: sys::nvmlDevice_t,
    types: c_ulonglong,
    set: sys::nvmlEventSet_t,
) -> Ret {
    with_state(|s| {
        let t = match s.device(device) {
            Ok((t, _)) => t,
            Err(e) => return e,
        };
        // Critical XIDs only, on whole GPUs, as the source asks.
        if t.mig.is_some() || types != c_ulonglong::from(sys::nvmlEventTypeXidCriticalError) {
            return NOT_SUPPORTED;
        }
        if s.scenario.devices[t.gpu]
            .register_events_failing_ms
            .is_some_and(|ms| s.started.elapsed() < Duration::from_millis(ms))
        {
            return UNKNOWN;
        }
        match event_set(&mut s.event_sets, set) {
            Some(es) => {
                es.devices.push((t.gpu, 0));
                SUCCESS
            }
            None => INVALID_ARGUMENT,
        }
    })
}

/// # Safety
/// `data` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlEventSetWait_v2(
    set: sys::nvmlEventSet_t,
    data: *mut sys::nvmlEventData_t,
    _timeout_ms: c_uint,
) -> Ret {
    with_state(|s| {
        let registered: Vec<usize> = event_set(&mut s.event_sets, set)
            .map(|es| es.devices.iter().map(|&(gpu, _)| gpu).collect())
            .unwrap_or_default();
        if registered
            .into_iter()
            .any(|gpu| s.loses_at(gpu, "nvmlEventSetWait_v2", None))
        {
            return GPU_IS_LOST;
        }
        let elapsed = s.started.elapsed();
        let devices = &s.scenario.devices;
        let lost: Vec<bool> = (0..devices.len()).map(|g| s.is_lost(g)).collect();
        let Some(es) = event_set(&mut s.event_sets, set) else {
            return INVALID_ARGUMENT;
        };
        for (gpu, delivered) in &mut es.devices {
            if lost[*gpu] {
                return GPU_IS_LOST;
            }
            let Some(e) = devices[*gpu].xid_events.get(*delivered) else {
                continue;
            };
            if elapsed < Duration::from_millis(e.after_ms) {
                continue;
            }
            *delivered += 1;
            let event = sys::nvmlEventData_t {
                device: handle_of(*gpu, None),
                eventType: c_ulonglong::from(sys::nvmlEventTypeXidCriticalError),
                eventData: e.xid,
                gpuInstanceId: c_uint::MAX,
                computeInstanceId: c_uint::MAX,
            };
            // SAFETY: forwarded from the caller.
            return unsafe { put(data, event) };
        }
        // Nothing waiting: the fake never sleeps, whatever the timeout.
        TIMEOUT
    })
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn nvmlEventSetFree(set: sys::nvmlEventSet_t) -> Ret {
    with_state(|s| {
        let Some(slot) = (set as usize)
            .checked_sub(1)
            .and_then(|i| s.event_sets.get_mut(i))
        else {
            return INVALID_ARGUMENT;
        };
        match slot.take() {
            Some(_) => SUCCESS,
            None => INVALID_ARGUMENT,
        }
    })
}

/// # Safety
/// `width` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(
    device: sys::nvmlDevice_t,
    width: *mut c_uint,
) -> Ret {
    // SAFETY: forwarded from the caller.
    with_device(device, |t, d| unsafe {
        put_gpu_value(t, d.pcie_link_width, width)
    })
}

/// KB/s, as NVML answers (without the driver's 20 ms wait).
///
/// # Safety
/// `value` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: sys::nvmlDevice_t,
    counter: sys::nvmlPcieUtilCounter_t,
    value: *mut c_uint,
) -> Ret {
    with_device(device, |t, d| {
        let kbps = match counter {
            sys::nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_RX_BYTES => d.pcie_rx_kbps,
            sys::nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_TX_BYTES => d.pcie_tx_kbps,
            _ => return INVALID_ARGUMENT,
        };
        // SAFETY: forwarded from the caller.
        unsafe { put_gpu_value(t, kbps, value) }
    })
}

fn clock_reasons(device: sys::nvmlDevice_t, reasons: *mut c_ulonglong) -> Ret {
    // SAFETY: forwarded from the caller of the exported function.
    with_device(device, |_, d| unsafe {
        put(reasons, d.clocks_event_reasons)
    })
}

/// # Safety
/// `reasons` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: sys::nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> Ret {
    clock_reasons(device, reasons)
}

/// # Safety
/// `reasons` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: sys::nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> Ret {
    clock_reasons(device, reasons)
}

// ---------------------------------------------------------------------------------------------
// Processes.

/// # Safety
/// `count` valid for read and write; `infos` null or `*count` entries.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: sys::nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut sys::nvmlProcessInfo_t,
) -> Ret {
    with_state(|s| {
        let (t, d) = match s.device(device) {
            Ok(x) => x,
            Err(e) => return e,
        };
        if count.is_null() {
            return INVALID_ARGUMENT;
        }
        let procs = processes(t, d);
        // SAFETY: checked not null; valid per the caller.
        unsafe {
            let room = *count as usize;
            count.write(procs.len() as c_uint);
            if procs.is_empty() {
                return SUCCESS;
            }
            if infos.is_null() || room < procs.len() {
                return INSUFFICIENT_SIZE;
            }
            for (i, (p, mig)) in procs.iter().enumerate() {
                infos.add(i).write(sys::nvmlProcessInfo_t {
                    pid: p.pid,
                    usedGpuMemory: p.used_memory_bytes,
                    gpuInstanceId: mig.map_or(u32::MAX, |m| m.0),
                    computeInstanceId: mig.map_or(u32::MAX, |m| m.1),
                });
            }
        }
        SUCCESS
    })
}

/// The body of `nvmlDeviceGetProcessesUtilizationInfo`, which only the current-driver build
/// exports.
///
/// # Safety
/// `info` must be null or valid, its `procUtilArray` null or `processSamplesCount` entries.
#[allow(
    dead_code,
    reason = "the old-driver build does not export the function that calls this"
)]
pub(crate) unsafe fn processes_utilization_info(
    device: sys::nvmlDevice_t,
    info: *mut sys::nvmlProcessesUtilizationInfo_t,
) -> Ret {
    with_state(|s| {
        let (t, d) = match s.device(device) {
            Ok(x) => x,
            Err(e) => return e,
        };
        if t.mig.is_some() || !d.mig.is_empty() {
            return NOT_SUPPORTED;
        }
        if info.is_null() {
            return INVALID_ARGUMENT;
        }
        let expected =
            (std::mem::size_of::<sys::nvmlProcessesUtilizationInfo_v1_t>() as u32) | (1 << 24);
        let samples: Vec<sys::nvmlProcessUtilizationInfo_v1_t> = d
            .processes
            .iter()
            .filter_map(|p| {
                p.sm_util.map(|u| sys::nvmlProcessUtilizationInfo_v1_t {
                    timeStamp: now_us(),
                    pid: p.pid,
                    smUtil: u,
                    memUtil: u / 2,
                    encUtil: 0,
                    decUtil: 0,
                    jpgUtil: 0,
                    ofaUtil: 0,
                })
            })
            .collect();
        // SAFETY: checked not null; valid per the caller.
        unsafe {
            let i = &mut *info;
            if i.version != expected {
                return VERSION_MISMATCH;
            }
            let room = i.processSamplesCount as usize;
            i.processSamplesCount = samples.len() as c_uint;
            if samples.is_empty() {
                return NOT_FOUND;
            }
            if i.procUtilArray.is_null() || room < samples.len() {
                return INSUFFICIENT_SIZE;
            }
            std::ptr::copy_nonoverlapping(samples.as_ptr(), i.procUtilArray, samples.len());
            i.lastSeenTimeStamp = now_us();
        }
        SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// MIG.

/// # Safety
/// `current` and `pending` must be valid for writes.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: sys::nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Ret {
    with_device(device, |t, d| {
        if t.mig.is_some() {
            return NOT_SUPPORTED;
        }
        let on = c_uint::from(!d.mig.is_empty());
        // SAFETY: forwarded from the caller.
        unsafe {
            let r = put(current, on);
            if r != SUCCESS {
                return r;
            }
            put(pending, on)
        }
    })
}

/// # Safety
/// `count` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: sys::nvmlDevice_t,
    count: *mut c_uint,
) -> Ret {
    with_device(device, |t, d| {
        if t.mig.is_some() || d.mig.is_empty() {
            return NOT_SUPPORTED;
        }
        // SAFETY: forwarded from the caller.
        unsafe { put(count, MAX_MIG_DEVICES) }
    })
}

/// # Safety
/// `mig_device` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: sys::nvmlDevice_t,
    index: c_uint,
    mig_device: *mut sys::nvmlDevice_t,
) -> Ret {
    with_state(|s| {
        if s.loses_by(device, "nvmlDeviceGetMigDeviceHandleByIndex") {
            return GPU_IS_LOST;
        }
        let (t, d) = match s.device(device) {
            Ok(x) => x,
            Err(e) => return e,
        };
        if t.mig.is_some() || d.mig.is_empty() {
            return NOT_SUPPORTED;
        }
        if index >= MAX_MIG_DEVICES {
            return INVALID_ARGUMENT;
        }
        if index as usize >= d.mig.len() {
            return NOT_FOUND;
        }
        // SAFETY: forwarded from the caller.
        unsafe { put(mig_device, handle_of(t.gpu, Some(index as usize))) }
    })
}

/// # Safety
/// `parent` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    device: sys::nvmlDevice_t,
    parent: *mut sys::nvmlDevice_t,
) -> Ret {
    with_device(device, |t, _| match t.mig {
        // SAFETY: forwarded from the caller.
        Some(_) => unsafe { put(parent, handle_of(t.gpu, None)) },
        None => INVALID_ARGUMENT,
    })
}

/// # Safety
/// `is_mig` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: sys::nvmlDevice_t,
    is_mig: *mut c_uint,
) -> Ret {
    // SAFETY: forwarded from the caller.
    with_device(device, |t, _| unsafe {
        put(is_mig, c_uint::from(t.mig.is_some()))
    })
}

/// # Safety
/// `id` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: sys::nvmlDevice_t,
    id: *mut c_uint,
) -> Ret {
    with_device(device, |t, d| match t.mig {
        // SAFETY: forwarded from the caller.
        Some(m) => unsafe { put(id, d.mig[m].gpu_instance_id) },
        None => INVALID_ARGUMENT,
    })
}

/// # Safety
/// `id` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: sys::nvmlDevice_t,
    id: *mut c_uint,
) -> Ret {
    with_device(device, |t, d| match t.mig {
        // SAFETY: forwarded from the caller.
        Some(m) => unsafe { put(id, d.mig[m].compute_instance_id) },
        None => INVALID_ARGUMENT,
    })
}

/// # Safety
/// `attributes` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlDeviceGetAttributes_v2(
    device: sys::nvmlDevice_t,
    attributes: *mut sys::nvmlDeviceAttributes_t,
) -> Ret {
    with_device(device, |t, d| {
        let Some(m) = t.mig else {
            return NOT_SUPPORTED;
        };
        let mi = &d.mig[m];
        let a = sys::nvmlDeviceAttributes_t {
            multiprocessorCount: mi.sms,
            sharedCopyEngineCount: mi.slices,
            sharedDecoderCount: mi.slices / 2,
            sharedEncoderCount: 0,
            sharedJpegCount: 0,
            sharedOfaCount: 0,
            gpuInstanceSliceCount: mi.slices,
            computeInstanceSliceCount: mi.slices,
            memorySizeMB: mi.memory_mb,
        };
        // SAFETY: forwarded from the caller.
        unsafe { put(attributes, a) }
    })
}

// ---------------------------------------------------------------------------------------------
// GPM.

/// # Safety
/// `support` must be valid for reads and writes.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: sys::nvmlDevice_t,
    support: *mut sys::nvmlGpmSupport_t,
) -> Ret {
    with_device(device, |_, d| {
        if support.is_null() {
            return INVALID_ARGUMENT;
        }
        // SAFETY: not null; valid per the caller.
        unsafe {
            if (*support).version != sys::NVML_GPM_SUPPORT_VERSION {
                return VERSION_MISMATCH;
            }
            (*support).isSupportedDevice =
                c_uint::from(d.gpm.is_some() || d.mig.iter().any(|m| m.gpm.is_some()));
        }
        SUCCESS
    })
}

/// # Safety
/// `sample` must be valid for a write.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut sys::nvmlGpmSample_t) -> Ret {
    with_state(|_| {
        let b = Box::new(GpmSampleData { taken: None });
        // SAFETY: forwarded from the caller.
        unsafe { put(sample, Box::into_raw(b).cast::<sys::nvmlGpmSample_st>()) }
    })
}

/// # Safety
/// `sample` must come from `nvmlGpmSampleAlloc` and not be freed yet.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlGpmSampleFree(sample: sys::nvmlGpmSample_t) -> Ret {
    if sample.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: allocated by `nvmlGpmSampleAlloc` as a `Box<GpmSampleData>`.
    drop(unsafe { Box::from_raw(sample.cast::<GpmSampleData>()) });
    SUCCESS
}

fn gpm_of(d: &Device, gi: Option<u32>) -> Option<&Gpm> {
    match gi {
        None => d.gpm.as_ref().filter(|_| d.mig.is_empty()),
        Some(gi) => d
            .mig
            .iter()
            .find(|m| m.gpu_instance_id == gi)
            .and_then(|m| m.gpm.as_ref()),
    }
}

fn fill_sample(device: sys::nvmlDevice_t, gi: Option<u32>, sample: sys::nvmlGpmSample_t) -> Ret {
    with_state(|s| {
        let call = if gi.is_some() {
            "nvmlGpmMigSampleGet"
        } else {
            "nvmlGpmSampleGet"
        };
        if s.loses_by(device, call) {
            return GPU_IS_LOST;
        }
        let (t, d) = match s.device(device) {
            Ok(found) => found,
            Err(e) => return e,
        };
        if t.mig.is_some() || sample.is_null() {
            return INVALID_ARGUMENT;
        }
        let Some(g) = gpm_of(d, gi) else {
            return NOT_SUPPORTED;
        };
        let now_ms = s.started.elapsed().as_millis();
        if g.sample_error_between_ms
            .is_some_and(|(from, to)| (u128::from(from)..u128::from(to)).contains(&now_ms))
        {
            return UNKNOWN;
        }
        match g.sample_error.as_deref() {
            None => {}
            Some("no_permission") => return NO_PERMISSION,
            Some("not_supported") => return NOT_SUPPORTED,
            Some(_) => return UNKNOWN,
        }
        // SAFETY: allocated by `nvmlGpmSampleAlloc` and not freed (the caller's promise).
        unsafe { (*sample.cast::<GpmSampleData>()).taken = Some((t.gpu, gi, Instant::now())) };
        SUCCESS
    })
}

/// # Safety
/// `sample` must come from `nvmlGpmSampleAlloc`.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlGpmSampleGet(
    device: sys::nvmlDevice_t,
    sample: sys::nvmlGpmSample_t,
) -> Ret {
    fill_sample(device, None, sample)
}

/// # Safety
/// `sample` must come from `nvmlGpmSampleAlloc`.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlGpmMigSampleGet(
    device: sys::nvmlDevice_t,
    gpu_instance_id: c_uint,
    sample: sys::nvmlGpmSample_t,
) -> Ret {
    fill_sample(device, Some(gpu_instance_id), sample)
}

/// Strict like the documentation: both samples filled from the same GPU (or GPU instance),
/// the second more than 100 ms after the first, else `INVALID_ARGUMENT`.
///
/// # Safety
/// `request` must be valid; its samples from `nvmlGpmSampleAlloc`.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn nvmlGpmMetricsGet(request: *mut sys::nvmlGpmMetricsGet_t) -> Ret {
    with_state(|s| {
        if request.is_null() {
            return INVALID_ARGUMENT;
        }
        // SAFETY: not null; valid per the caller.
        let req = unsafe { &mut *request };
        if req.version != sys::NVML_GPM_METRICS_GET_VERSION {
            return VERSION_MISMATCH;
        }
        if req.numMetrics as usize > req.metrics.len()
            || req.sample1.is_null()
            || req.sample2.is_null()
        {
            return INVALID_ARGUMENT;
        }
        // SAFETY: both allocated by `nvmlGpmSampleAlloc` (the caller's promise).
        let (a, b) = unsafe {
            (
                (*req.sample1.cast::<GpmSampleData>()).taken,
                (*req.sample2.cast::<GpmSampleData>()).taken,
            )
        };
        let (Some((g1, gi1, t1)), Some((g2, gi2, t2))) = (a, b) else {
            return INVALID_ARGUMENT;
        };
        if g1 != g2 || gi1 != gi2 || t2.saturating_duration_since(t1) <= Duration::from_millis(100)
        {
            return INVALID_ARGUMENT;
        }
        if s.loses_at(g1, "nvmlGpmMetricsGet", None) {
            return GPU_IS_LOST;
        }
        let handle = handle_of(g1, None);
        let (_, d) = match s.device(handle) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let Some(g) = gpm_of(d, gi1) else {
            return NOT_SUPPORTED;
        };
        // The counters are read at the second sample.
        let secs = t2.saturating_duration_since(s.started).as_secs_f64();
        let first = t1.saturating_duration_since(s.started).as_secs_f64();
        if g.metrics_error_between_ms
            .is_some_and(|(from, to)| (from as f64..to as f64).contains(&(secs * 1000.0)))
        {
            return UNKNOWN;
        }
        for m in req.metrics.iter_mut().take(req.numMetrics as usize) {
            let counter = g
                .counters
                .as_ref()
                .and_then(|c| c.value(d, m.metricId, secs));
            let value = GPM_IDS
                .iter()
                .find(|(_, id)| *id == m.metricId)
                .and_then(|(name, _)| g.metric_between(name, first, secs))
                .or(counter);
            m.metricInfo = sys::nvmlGpmMetric_t__bindgen_ty_1 {
                shortName: std::ptr::null_mut(),
                longName: std::ptr::null_mut(),
                unit: std::ptr::null_mut(),
            };
            match value {
                Some(v) => {
                    m.value = v;
                    m.nvmlReturn = SUCCESS;
                }
                None => {
                    m.value = 0.0;
                    m.nvmlReturn = if is_counter_id(m.metricId)
                        && g.counters_error.as_deref() == Some("invalid_argument")
                    {
                        INVALID_ARGUMENT
                    } else {
                        NOT_SUPPORTED
                    };
                }
            }
        }
        SUCCESS
    })
}
