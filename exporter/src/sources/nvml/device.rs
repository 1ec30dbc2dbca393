//! One GPU's state between ticks, the NVML calls made on it (each outcome classified), and
//! what is read from a whole GPU each tick: busy flag, memory, energy and power, clocks,
//! temperature, the PCIe link (and its throughput where GPM gives none). GPM, MIG and processes are read by their own modules, as more of
//! [`DevState`]'s methods.

use super::gpm::{GpmMode, GpmState, GpmStep, MISSES_WAITED};
use super::processes::Processes;
use super::raw;
use super::report::Ident;
use crate::sources::SourceError;
use crate::times::unix_ms;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformancePolicy, Sampling, TemperatureSensor,
};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::{FieldValueSample, Sample};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::field_id as fid;
use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};
use truthscale_core::model::{
    EntityId, EntityKey, EntitySample, Field, MigId, Reading, Readings, Throttles, Timestamp,
};

/// `nvmlDeviceGetPcieThroughput` answers in KB/s (a byte counter over a 20 ms sample):
/// bytes per second per KB/s.
const PCIE_KB: f64 = 1000.0;

/// The PCIe byte counters: the rate each makes, and its field id.
const PCIE_COUNTERS: [(Field, u32); 2] = [
    (
        Field::PcieRxBytesPerSec,
        fid::NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
    ),
    (
        Field::PcieTxBytesPerSec,
        fid::NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
    ),
];

/// The ECC totals read, with the call's name (each counted unsupported on its own).
const ECC_TOTALS: [(Field, MemoryError, EccCounter, &str); 3] = [
    (
        Field::EccSbeVolatile,
        MemoryError::Corrected,
        EccCounter::Volatile,
        "nvmlDeviceGetTotalEccErrors(corrected, volatile)",
    ),
    (
        Field::EccDbeVolatile,
        MemoryError::Uncorrected,
        EccCounter::Volatile,
        "nvmlDeviceGetTotalEccErrors(uncorrected, volatile)",
    ),
    (
        Field::EccDbeAggregate,
        MemoryError::Uncorrected,
        EccCounter::Aggregate,
        "nvmlDeviceGetTotalEccErrors(uncorrected, aggregate)",
    ),
];

/// The violation times read, with the call's name.
const VIOLATIONS: [(Field, PerformancePolicy, &str); 2] = [
    (
        Field::PowerViolationNs,
        PerformancePolicy::Power,
        "nvmlDeviceGetViolationStatus(power)",
    ),
    (
        Field::ThermalViolationNs,
        PerformancePolicy::Thermal,
        "nvmlDeviceGetViolationStatus(thermal)",
    ),
];

/// The health fields read as NVML field values (`nvmlDeviceGetFieldValues`, one call for
/// all): the recovery action and the clock-event reasons' times. nvml-wrapper numbers the ids
/// as NVML 12 does and renumbers them for a driver that moved them (NVML 13 update 1).
const FIELD_VALUES: [(Field, u32); 6] = [
    (
        Field::RecoveryAction,
        fid::NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
    ),
    (
        Field::ClockEventSwPowerCapNs,
        fid::NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,
    ),
    (
        Field::ClockEventSyncBoostNs,
        fid::NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST,
    ),
    (
        Field::ClockEventSwThermalNs,
        fid::NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
    ),
    (
        Field::ClockEventHwThermalNs,
        fid::NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
    ),
    (
        Field::ClockEventHwPowerBrakeNs,
        fid::NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
    ),
];

/// The call that registers a GPU's critical XID events.
const REGISTER_XID: &str = "nvmlDeviceRegisterEvents(XID critical error)";

/// The PCIe throughput calls: the field each fills, the counter, and the call's name.
const PCIE_THROUGHPUT: [(Field, PcieUtilCounter, &str); 2] = [
    (
        Field::PcieRxBytesPerSec,
        PcieUtilCounter::Receive,
        "nvmlDeviceGetPcieThroughput(RX)",
    ),
    (
        Field::PcieTxBytesPerSec,
        PcieUtilCounter::Send,
        "nvmlDeviceGetPcieThroughput(TX)",
    ),
];

/// A GPU that fell off the bus is looked for again this often.
pub(crate) const LOST_RETRY: Duration = Duration::from_secs(10);

/// One tick's value of a call: a value, unsupported, or blank (an error, counted).
#[derive(Debug, Clone, Copy)]
pub(super) enum Got<T> {
    Value(T),
    Unsupported,
    Blank,
}

impl<T> Got<T> {
    pub(super) fn reading(self, f: impl FnOnce(T) -> f64) -> Reading {
        match self {
            Got::Value(v) => Reading::Value(f(v)),
            Got::Unsupported => Reading::Unsupported,
            Got::Blank => Reading::Blank,
        }
    }

    pub(super) fn value(self) -> Option<T> {
        match self {
            Got::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// The GPU fell off the bus during this tick.
#[derive(Debug)]
pub(super) struct Lost(pub(super) String);

/// A PCIe byte counter's rate, bytes a second, between its reading `before` (bytes, the
/// driver's µs) and `now`: `None` without an earlier reading or where no time passed;
/// `Err` with the earlier count where it went backwards (wrapped, or reset with the driver).
fn pcie_step(before: Option<(u64, i64)>, now: (u64, i64)) -> Result<Option<f64>, u64> {
    let Some((b0, t0)) = before else {
        return Ok(None);
    };
    let (bytes, at) = now;
    if bytes < b0 {
        return Err(b0);
    }
    Ok((at > t0).then(|| (bytes - b0) as f64 / ((at - t0) as f64 / 1e6)))
}

/// A field value as a byte count: any integer type the driver answers with, not a double or
/// a negative number.
fn byte_count(v: &SampleValue) -> Option<u64> {
    match v {
        SampleValue::U64(b) => Some(*b),
        SampleValue::U32(b) => Some(u64::from(*b)),
        SampleValue::I64(b) => u64::try_from(*b).ok(),
        SampleValue::F64(_) => None,
    }
}

#[cfg(test)]
#[test]
fn a_byte_count_is_any_non_negative_integer() {
    assert_eq!(byte_count(&SampleValue::U64(7)), Some(7));
    assert_eq!(byte_count(&SampleValue::U32(u32::MAX)), Some(4_294_967_295));
    assert_eq!(byte_count(&SampleValue::I64(5)), Some(5));
    assert_eq!(byte_count(&SampleValue::I64(-1)), None);
    assert_eq!(byte_count(&SampleValue::F64(1.0)), None);
}

/// Whether an error means "this GPU or driver cannot do it" rather than a failure.
pub(super) fn is_unsupported(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound
    )
}

/// A `SourceError` of the right kind for an NVML error.
pub(super) fn classify(what: &str, e: &NvmlError) -> SourceError {
    match e {
        NvmlError::GpuLost => SourceError::GpuLost(what.to_string()),
        NvmlError::NoPermission => SourceError::NoPermission(what.to_string()),
        e if is_unsupported(e) => SourceError::Unsupported(what.to_string()),
        _ => SourceError::Nvml(what.to_string()),
    }
}

/// One GPU's state between ticks.
#[derive(Debug)]
pub(super) struct DevState {
    pub(super) index: u32,
    pub(super) ident: Option<Ident>,
    pub(super) retry_at: Instant,
    pub(super) mig: Option<bool>,
    pub(super) unsupported: BTreeSet<String>,
    util_last_us: Option<u64>,
    clock_last_us: Option<u64>,
    pub(super) gpm: GpmState,
    pub(super) procs: Processes,
    pub(super) last_keys: Vec<EntityKey>,
    /// The GPU's critical XID events, once registered.
    xid_events: Option<raw::XidEvents>,
    /// When a failed registration of the XID events is tried again.
    xid_retry_at: Option<Instant>,
    /// The last XID the events told of (0 once registered, before any).
    xid_last: Option<f64>,
    /// Every XID the events told of in the last five minutes.
    xid_window: super::xids::XidWindow,
    /// The PCIe byte counters' last readings (bytes, the driver's timestamp in µs), receive
    /// then transmit; `None` where a rate has no earlier reading to start from.
    pcie_bytes: [Option<(u64, i64)>; 2],
    /// Whether this driver lacks the PCIe byte counters: the throughput snapshot then.
    pcie_bytes_unsupported: bool,
}

/// The mean of the driver's samples newer than `since_us`, and the newest timestamp; `None`
/// without such samples.
fn mean_samples(samples: &[Sample], since_us: u64) -> Option<(f64, u64)> {
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

/// What a window's busy fraction is read from.
#[derive(Debug, PartialEq)]
enum BusyFrom {
    /// The mean of the driver's samples since the last tick (percent), and the newest one's
    /// timestamp.
    Samples(f64, u64),
    /// No sample since the last tick's, though the driver keeps them: blank. The point
    /// reading is then the driver's last sample, which the last window already averaged;
    /// counting it again would weigh it twice.
    NoneNew,
    /// The point reading: the samples call failed, or the driver never gave a sample.
    Point,
}

/// What the window's busy fraction is read from, given what the samples call `answered`
/// (`None`: it failed), the newest sample read before (`last_us`) and the tick's interval.
fn busy_from(answered: Option<&[Sample]>, last_us: Option<u64>, interval_us: u64) -> BusyFrom {
    let Some(s) = answered else {
        return BusyFrom::Point;
    };
    let from = last_us.unwrap_or_else(|| {
        s.iter()
            .map(|x| x.timestamp)
            .max()
            .map_or(0, |newest| newest.saturating_sub(interval_us))
    });
    match (mean_samples(s, from), last_us) {
        (Some((percent, newest)), _) => BusyFrom::Samples(percent, newest),
        (None, Some(_)) => BusyFrom::NoneNew,
        (None, None) => BusyFrom::Point,
    }
}

/// Per-tick inputs shared by all GPUs.
#[derive(Debug)]
pub(super) struct Ctx<'a> {
    pub(super) nvml: &'a Nvml,
    pub(super) node: Option<&'a str>,
    /// The driver's version, as NVML tells it (the same for every GPU).
    pub(super) driver_version: Option<&'a str>,
    pub(super) interval_us: u64,
    pub(super) now: Instant,
    pub(super) gpm_mig_symbol: bool,
}

/// What the GPUs gave this tick.
#[derive(Debug, Default)]
pub(super) struct Emitted {
    pub(super) entities: Vec<EntitySample>,
    pub(super) unchanged: Vec<EntityKey>,
}

impl DevState {
    pub(super) fn new(index: u32, now: Instant) -> DevState {
        DevState {
            index,
            ident: None,
            retry_at: now,
            mig: None,
            unsupported: BTreeSet::new(),
            util_last_us: None,
            clock_last_us: None,
            gpm: GpmState::new(),
            procs: Processes::new(now),
            last_keys: Vec::new(),
            xid_events: None,
            xid_retry_at: None,
            xid_last: None,
            xid_window: super::xids::XidWindow::default(),
            pcie_bytes: [None; 2],
            pcie_bytes_unsupported: false,
        }
    }

    /// Free what this GPU holds in the driver between ticks: GPM samples and the XID event
    /// set.
    pub(super) fn free(&mut self, nvml: &Nvml) {
        self.gpm.free(nvml);
        if let Some(set) = self.xid_events.take() {
            set.free(nvml);
        }
    }

    /// Start over with a (re)identified GPU.
    pub(super) fn reset(&mut self, ident: Ident, gpm: GpmMode, now: Instant) {
        let index = self.index;
        *self = DevState::new(index, now);
        self.ident = Some(ident);
        self.gpm.mode = gpm;
    }

    /// The GPU fell off the bus: count it, forget its samples, look for it later.
    pub(super) fn lose(
        &mut self,
        nvml: &Nvml,
        now: Instant,
        what: &str,
        errors: &mut Vec<SourceError>,
    ) {
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
        self.free(nvml);
        self.ident = None;
        self.last_keys.clear();
        self.retry_at = now + LOST_RETRY;
    }

    /// Note once that `what` is unsupported here; count it when `count` is set.
    pub(super) fn note_unsupported(
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
    pub(super) fn call<T>(
        &mut self,
        what: &str,
        errors: &mut Vec<SourceError>,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Result<Got<T>, Lost> {
        self.call_with(what, true, errors, f)
    }

    /// [`DevState::call`], counting an unsupported call only when `count_unsupported` is set.
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

    pub(super) fn entity_id(&self, ctx: &Ctx<'_>, mig: Option<MigId>) -> EntityId {
        let ident = self.ident.as_ref();
        EntityId {
            gpu: Some(self.index),
            uuid: ident.map(|i| i.uuid.clone()),
            model: ident.map(|i| i.name.clone()),
            pci_bus_id: ident.and_then(|i| i.pci_bus_id.clone()),
            driver_version: ctx.driver_version.map(str::to_string),
            mig,
            pod: None,
            node: ctx.node.map(str::to_string),
            minor: ident.and_then(|i| i.minor),
        }
    }

    /// Read this GPU: its entities, or the keys of those seen but not re-read.
    pub(super) fn read<'n>(
        &mut self,
        ctx: &Ctx<'n>,
        emit: &mut Emitted,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        let dev = match ctx.nvml.device_by_index(self.index) {
            Ok(d) => d,
            Err(NvmlError::GpuLost) => return Err(Lost("nvmlDeviceGetHandleByIndex".into())),
            // Not read: nothing is reported, so its entities go stale and then absent (never
            // their last values served as live), and come back when the handle does.
            Err(e) => {
                errors.push(classify(
                    &format!("gpu {}: nvmlDeviceGetHandleByIndex: {e}", self.index),
                    &e,
                ));
                return Ok(());
            }
        };
        let mig = self.read_mig_mode(ctx, &dev, errors)?;
        let gpm_on = self.gpm.on(Instant::now());
        // GPM's 100 ms rule: too soon after the previous sample, report the GPU as seen and
        // unchanged; the next tick closes a window over both.
        if gpm_on && self.gpm.too_soon(Instant::now()) {
            emit.unchanged.extend(self.last_keys.iter().cloned());
            return Ok(());
        }
        let processes_due = self.procs.due(ctx.now);
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

    /// The MIG mode; a change forgets the GPU's GPM samples and its entities.
    fn read_mig_mode(
        &mut self,
        ctx: &Ctx<'_>,
        dev: &Device<'_>,
        errors: &mut Vec<SourceError>,
    ) -> Result<Option<bool>, Lost> {
        let mig = match self.call("nvmlDeviceGetMigMode", errors, || dev.mig_mode())? {
            Got::Value(m) => Some(m.current == nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_ENABLE),
            Got::Unsupported => None,
            // A failed read (counted) is no change of mode: the GPU keeps the one it had.
            Got::Blank => self.mig,
        };
        if mig != self.mig && self.mig.is_some() {
            tracing::info!(gpu = self.index, mig = ?mig, "NVML: MIG mode changed.");
            self.gpm.free(ctx.nvml);
            self.last_keys.clear();
        }
        self.mig = mig;
        Ok(mig)
    }

    /// Clocks and clock-event reasons (GPU-wide, shared by MIG instances). The SM clock is
    /// the window's mean from the driver's clock samples where it keeps them; else a point
    /// reading, which the deriver averages with the previous one (the returned flag).
    pub(super) fn clocks(
        &mut self,
        ctx: &Ctx<'_>,
        dev: &Device<'_>,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<(Option<Throttles>, bool), Lost> {
        let point = !self.sm_clock_samples(ctx, dev, r, errors)?;
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
        let bits = self.clock_event_bits(ctx, dev, errors)?;
        Ok((bits.map(Throttles::from_event_bits), point))
    }

    /// The SM clock as the mean of the driver's processor-clock samples over the window;
    /// `false` when there are none.
    fn sm_clock_samples(
        &mut self,
        ctx: &Ctx<'_>,
        dev: &Device<'_>,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<bool, Lost> {
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
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The clock-event reason bits: the current function's name first; drivers before it
    /// have only the deprecated one.
    fn clock_event_bits(
        &mut self,
        ctx: &Ctx<'_>,
        dev: &Device<'_>,
        errors: &mut Vec<SourceError>,
    ) -> Result<Option<u64>, Lost> {
        Ok(
            match self.call_with(
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
            },
        )
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
                // Nothing to compare with yet: the first window starts here. A GPU already
                // reported (GPM back after an outage or a refusal) has its window now,
                // without GPM: the next pair spans the next window alone.
                GpmStep::First if self.last_keys.is_empty() => return Ok(()),
                GpmStep::First => {}
                // A passing failure: reported unchanged (its tier kept), a few ticks at most.
                GpmStep::Missed if self.gpm.missed < MISSES_WAITED => {
                    self.gpm.missed += 1;
                    emit.unchanged.extend(self.last_keys.iter().cloned());
                    return Ok(());
                }
                GpmStep::Metrics(m) => {
                    self.gpm.missed = 0;
                    self.apply_gpm(&mut r, m, errors);
                }
                // Past the wait, the windows go out without GPM: the sample before the
                // outage is dropped, so no pair spans it.
                GpmStep::Missed => self.gpm.drop_slot(ctx.nvml, None),
                GpmStep::Off => {}
            }
        }
        r.set(Field::ReportedUtil, self.busy(ctx, dev, errors)?);
        self.memory(dev, "nvmlDeviceGetMemoryInfo_v2", &mut r, errors)?;
        let energy_read_at = self.power(dev, &mut r, errors)?;
        self.pcie(dev, &mut r, errors)?;
        let temp = self.call("nvmlDeviceGetTemperature", errors, || {
            dev.temperature(TemperatureSensor::Gpu)
        })?;
        r.set(Field::TempCelsius, temp.reading(f64::from));
        let (throttles, sm_clock_is_point) = self.clocks(ctx, dev, &mut r, errors)?;
        self.health(ctx.nvml, dev, &mut r, errors)?;
        emit.entities.push(EntitySample {
            id: self.entity_id(ctx, None),
            readings: r,
            throttles,
            sm_clock_is_point,
            energy_read_at,
            ..EntitySample::default()
        });
        Ok(())
    }

    /// The energy counter, the power gauge and the enforced power limit. Returns when the
    /// counter was read (the middle of its call), where it was: the GPUs are read one after
    /// another, and a slow call before this one moves it within the tick.
    fn power(
        &mut self,
        dev: &Device<'_>,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<Option<Timestamp>, Lost> {
        let before = SystemTime::now();
        let energy = self.call("nvmlDeviceGetTotalEnergyConsumption", errors, || {
            dev.total_energy_consumption()
        })?;
        let read_at = matches!(energy, Got::Value(_)).then(|| {
            let after = SystemTime::now();
            let half = after.duration_since(before).unwrap_or_default() / 2;
            Timestamp(unix_ms(before + half))
        });
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
        Ok(read_at)
    }

    /// The health fields: ECC totals (`nvmlDeviceGetTotalEccErrors`, with ECC on), the row
    /// remapper (`nvmlDeviceGetRemappedRows`, Ampere and newer) and the power and thermal
    /// violation times (`nvmlDeviceGetViolationStatus`); the recovery action and the
    /// clock-event reasons' times as field values ([`DevState::field_values`]) and the last XID
    /// from the critical XID events ([`DevState::xid`]).
    pub(super) fn health(
        &mut self,
        nvml: &Nvml,
        dev: &Device<'_>,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        for (field, error, counter, what) in ECC_TOTALS {
            let n = self.call(what, errors, || dev.total_ecc_errors(error, counter))?;
            r.set(field, n.reading(|n| n as f64));
        }
        let rows = self.call("nvmlDeviceGetRemappedRows", errors, || {
            raw::remapped_rows(nvml, dev)
        })?;
        r.set(
            Field::RowRemapUncorrectable,
            rows.reading(|m| f64::from(m.uncorrectable)),
        );
        r.set(
            Field::RowRemapPending,
            rows.reading(|m| f64::from(u8::from(m.pending))),
        );
        r.set(
            Field::RowRemapFailed,
            rows.reading(|m| f64::from(u8::from(m.failed))),
        );
        for (field, policy, what) in VIOLATIONS {
            let v = self.call(what, errors, || dev.violation_status(policy))?;
            r.set(field, v.reading(|v| v.violation_time as f64));
        }
        self.field_values(dev, r, errors)?;
        self.xid(nvml, dev, r, errors)
    }

    /// The [`FIELD_VALUES`], in one `nvmlDeviceGetFieldValues` call: each value, or its own
    /// error (a field this driver does not know is unsupported alone).
    fn field_values(
        &mut self,
        dev: &Device<'_>,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        let ids = FIELD_VALUES.map(|(_, id)| FieldId(id));
        let got = self.call("nvmlDeviceGetFieldValues", errors, || {
            dev.field_values_for(&ids)
        })?;
        match got {
            Got::Value(samples) => {
                for ((field, _), sample) in FIELD_VALUES.iter().zip(samples) {
                    let reading = self.field_reading(*field, sample, errors)?;
                    r.set(*field, reading);
                }
            }
            Got::Unsupported => {
                for (field, _) in FIELD_VALUES {
                    r.set(field, Reading::Unsupported);
                }
            }
            Got::Blank => {}
        }
        Ok(())
    }

    /// One field value's reading: its number; unsupported where the driver says so for that
    /// field alone (noted once, so `doctor` lists it, not counted as an error); else blank,
    /// the error counted. A field that says the GPU is lost loses it.
    fn field_reading(
        &mut self,
        field: Field,
        sample: Result<FieldValueSample, NvmlError>,
        errors: &mut Vec<SourceError>,
    ) -> Result<Reading, Lost> {
        let what = || format!("nvmlDeviceGetFieldValues({})", field.name());
        Ok(match sample.and_then(|s| s.value) {
            Ok(v) => Reading::Value(match v {
                SampleValue::F64(v) => v,
                SampleValue::U32(v) => f64::from(v),
                SampleValue::U64(v) => v as f64,
                SampleValue::I64(v) => v as f64,
            }),
            Err(NvmlError::GpuLost) => return Err(Lost(what())),
            // A field a GPU does not have is no error: noted (for `doctor`), not counted.
            Err(e) if is_unsupported(&e) => {
                if !self.unsupported.contains(&what()) {
                    self.note_unsupported(&what(), &e, false, errors);
                }
                Reading::Unsupported
            }
            Err(e) => {
                errors.push(classify(
                    &format!("gpu {}: {}: {e}", self.index, what()),
                    &e,
                ));
                Reading::Blank
            }
        })
    }

    /// The last XID, and the XIDs of the last five minutes (their count, and the fatal one
    /// counted most): the GPU's critical XID events, registered on an event set at the first
    /// tick and polled without waiting at each (`nvmlEventSetWait_v2`, timeout 0). 0 until
    /// an XID arrives: NVML tells of XIDs after the registration only (as DCGM does of those
    /// after it started watching). Left blank where the events cannot be registered, and the
    /// window's counts at a tick whose poll failed (not known whether an XID came).
    fn xid(
        &mut self,
        nvml: &Nvml,
        dev: &Device<'_>,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        let due = self.xid_retry_at.is_none_or(|at| Instant::now() >= at);
        if self.xid_events.is_none() && due {
            match self.call(REGISTER_XID, errors, || raw::XidEvents::register(nvml, dev))? {
                Got::Value(set) => {
                    self.xid_events = Some(set);
                    self.xid_last = Some(0.0);
                    self.xid_retry_at = None;
                }
                // A failure (counted) is tried again every LOST_RETRY, not every tick: the
                // last XID stays blank until the events are registered.
                Got::Blank => self.xid_retry_at = Some(Instant::now() + LOST_RETRY),
                // A driver without the events: `call` notes it once and asks no more.
                Got::Unsupported => {}
            }
        }
        let Some(set) = &self.xid_events else {
            return Ok(());
        };
        match set.poll(nvml) {
            Ok(xids) => {
                if let Some(&x) = xids.last() {
                    tracing::warn!(
                        gpu = self.index,
                        xids = ?xids,
                        "NVML: critical XID event(s). Some call for draining the GPU's workloads and resetting it (79: fallen off the bus; 48, 94, 95: uncorrectable memory errors): docs/runbooks.md, TruthscaleGPUUnavailable, says what each calls for; `dmesg | grep -i xid` shows the driver's view."
                    );
                    self.xid_last = Some(x as f64);
                }
                let now = Instant::now();
                self.xid_window.add(now, &xids);
                let (errors, fatal) = self.xid_window.counts(now);
                r.set_value(Field::XidWindowErrors, errors);
                r.set_value(Field::XidWindowFatal, fatal);
            }
            Err(NvmlError::GpuLost) => return Err(Lost("nvmlEventSetWait_v2".to_string())),
            Err(e) => {
                let what = format!("gpu {}: nvmlEventSetWait_v2: {e}", self.index);
                errors.push(classify(&what, &e));
            }
        }
        if let Some(x) = self.xid_last {
            r.set_value(Field::XidLast, x);
        }
        Ok(())
    }

    /// The PCIe link's current generation and width, and its receive and transmit rates
    /// where GPM gave none (GPM's own values win): `nvmlDeviceGetPcieThroughput`, KB/s over
    /// a 20 ms sample the call waits for, converted to bytes per second.
    fn pcie(
        &mut self,
        dev: &Device<'_>,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        let link_gen = self.call("nvmlDeviceGetCurrPcieLinkGeneration", errors, || {
            dev.current_pcie_link_gen()
        })?;
        r.set(Field::PcieLinkGen, link_gen.reading(f64::from));
        let width = self.call("nvmlDeviceGetCurrPcieLinkWidth", errors, || {
            dev.current_pcie_link_width()
        })?;
        r.set(Field::PcieLinkWidth, width.reading(f64::from));
        if PCIE_THROUGHPUT.iter().all(|(f, ..)| r.value(*f).is_some()) {
            // GPM gave both rates: a later rate from the counters starts afresh.
            self.pcie_bytes = [None; 2];
            return Ok(());
        }
        if !self.pcie_bytes_unsupported && self.pcie_rates(dev, r, errors)? {
            return Ok(());
        }
        // A driver without the byte counters: the 20 ms snapshot NVML's throughput call
        // takes, the best it has.
        for (field, counter, what) in PCIE_THROUGHPUT {
            if r.value(field).is_some() {
                continue;
            }
            let kbps = match self.call(what, errors, || dev.pcie_throughput(counter))? {
                // NVML's "not available" (0xFFFFFFFF) is no rate: scaled to bytes it would
                // pass every bound and read as a link carrying a hundred times its capacity.
                Got::Value(u32::MAX) => {
                    errors.push(SourceError::Sentinel(format!(
                        "gpu {}: {what}: 4294967295 KB/s is NVML's \"not available\", left blank",
                        self.index
                    )));
                    Got::Blank
                }
                got => got,
            };
            r.set(field, kbps.reading(|kb| f64::from(kb) * PCIE_KB));
        }
        Ok(())
    }

    /// The PCIe rates from the byte counters (`NVML_FI_DEV_PCIE_COUNT_RX_BYTES` / `…TX_BYTES`),
    /// each its rise over the span between its own readings' timestamps: the window's mean,
    /// where the throughput call is a 20 ms snapshot. The first reading, and one below the
    /// last (NVML says the counters may wrap), start afresh without a rate. `false` where
    /// this driver has no such counters (noted once; the snapshot from then on).
    fn pcie_rates(
        &mut self,
        dev: &Device<'_>,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<bool, Lost> {
        const WHAT: &str = "nvmlDeviceGetFieldValues(PCIe bytes)";
        let ids = PCIE_COUNTERS.map(|(_, id)| FieldId(id));
        let samples = match self.call_with(WHAT, false, errors, || dev.field_values_for(&ids))? {
            Got::Value(samples) => samples,
            Got::Unsupported => {
                self.pcie_bytes_unsupported = true;
                return Ok(false);
            }
            Got::Blank => return Ok(true),
        };
        for (k, ((field, _), sample)) in PCIE_COUNTERS.iter().zip(samples).enumerate() {
            match sample.and_then(|s| s.value.map(|v| (v, s.timestamp))) {
                // A count in whatever integer type the driver answers with (NVML's
                // `unsigned long` is 32 bits on some platforms).
                Ok((v, at)) if let Some(bytes) = byte_count(&v) => {
                    let rate = match pcie_step(self.pcie_bytes[k], (bytes, at)) {
                        Ok(rate) => rate,
                        Err(b0) => {
                            errors.push(SourceError::Reset(format!(
                                "gpu {}: {WHAT}: {field:?} went from {b0} to {bytes} bytes (wrapped or reset); no rate across it",
                                self.index
                            )));
                            None
                        }
                    };
                    self.pcie_bytes[k] = Some((bytes, at));
                    // A rate GPM gave for this direction wins, as over the snapshot.
                    if let (Some(v), None) = (rate, r.value(*field)) {
                        r.set_value(*field, v);
                    }
                }
                Ok((v, _)) => {
                    // A double or a negative count is no byte counter: noted once, and the
                    // snapshot read from then on (it was blank on every tick, uncounted).
                    errors.push(SourceError::Unsupported(format!(
                        "gpu {}: {WHAT}: answered {v:?}, not a byte count; reading the throughput snapshot instead",
                        self.index
                    )));
                    self.pcie_bytes = [None; 2];
                    self.pcie_bytes_unsupported = true;
                    return Ok(false);
                }
                Err(NvmlError::GpuLost) => return Err(Lost(WHAT.into())),
                Err(e) if is_unsupported(&e) => {
                    self.note_unsupported(WHAT, &e, false, errors);
                    self.pcie_bytes_unsupported = true;
                    return Ok(false);
                }
                // The counter's last reading stays: the next one's rate spans this tick.
                Err(e) => {
                    errors.push(classify(&format!("gpu {}: {WHAT}: {e}", self.index), &e));
                }
            }
        }
        Ok(true)
    }

    /// Used and total memory (v2) of a GPU or MIG device.
    pub(super) fn memory(
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
    /// tick ([`busy_from`]), else the point reading. The first window takes the samples of
    /// the last interval before the newest one, so the driver's timestamp base does not
    /// matter.
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
        let answered = match &samples {
            Got::Value(s) => Some(s.as_slice()),
            _ => None,
        };
        match busy_from(answered, self.util_last_us, ctx.interval_us) {
            BusyFrom::Samples(percent, newest) => {
                self.util_last_us = Some(newest);
                return Ok(Reading::Value(percent / 100.0));
            }
            BusyFrom::NoneNew => return Ok(Reading::Blank),
            BusyFrom::Point => {}
        }
        let rates = self.call("nvmlDeviceGetUtilizationRates", errors, || {
            dev.utilization_rates()
        })?;
        Ok(rates.reading(|u| f64::from(u.gpu) / 100.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 GB in 1 s (the driver's µs) is 1e9 B/s; a counter that went from 5 GB to 1 kB
    /// gives no rate and says so; no earlier reading, or no time passed, gives none.
    #[test]
    fn a_pcie_counter_gone_backwards_gives_no_rate() {
        assert_eq!(
            pcie_step(Some((1_000_000_000, 0)), (2_000_000_000, 1_000_000)),
            Ok(Some(1e9))
        );
        assert_eq!(
            pcie_step(Some((5_000_000_000, 1_000_000)), (1_000, 2_000_000)),
            Err(5_000_000_000)
        );
        assert_eq!(pcie_step(None, (1_000, 2_000_000)), Ok(None));
        assert_eq!(pcie_step(Some((1_000, 5)), (2_000, 5)), Ok(None));
    }

    /// A driver sample counts in one window only: a tick with no sample since the last
    /// one's is blank, never the point reading (the same last sample again); the point
    /// reading stands in only where the samples call failed or no sample was ever given.
    #[test]
    fn a_busy_sample_counts_in_one_window_only() {
        let at = |us: u64, v: u32| Sample {
            timestamp: us,
            value: SampleValue::U32(v),
        };
        let first = [at(500_000, 0), at(1_000_000, 100)];
        assert_eq!(
            busy_from(Some(&first), None, 1_000_000),
            BusyFrom::Samples(50.0, 1_000_000)
        );
        assert_eq!(
            busy_from(Some(&[]), Some(1_000_000), 1_000_000),
            BusyFrom::NoneNew
        );
        let next = [at(2_000_000, 0), at(3_000_000, 0)];
        assert_eq!(
            busy_from(Some(&next), Some(1_000_000), 1_000_000),
            BusyFrom::Samples(0.0, 3_000_000)
        );
        assert_eq!(busy_from(None, Some(1_000_000), 1_000_000), BusyFrom::Point);
        assert_eq!(busy_from(Some(&[]), None, 1_000_000), BusyFrom::Point);
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
