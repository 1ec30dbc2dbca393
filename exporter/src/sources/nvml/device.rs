//! One GPU's state between ticks and everything read from it each tick: busy flag, memory,
//! power, clocks, GPM (per GPU instance under MIG), processes.

use super::*;

/// One tick's value of a call: a value, unsupported, or blank (an error, counted).
#[derive(Debug)]
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

/// Whether an error means "this GPU or driver cannot do it" rather than a failure.
pub(super) fn is_unsupported(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound
    )
}

#[derive(Debug)]
pub(super) struct Taken {
    pub(super) sample: GpmHandle,
    pub(super) at: Instant,
}

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

/// One GPU's state between ticks.
#[derive(Debug)]
pub(super) struct DevState {
    pub(super) index: u32,
    pub(super) ident: Option<Ident>,
    pub(super) retry_at: Instant,
    pub(super) mig: Option<bool>,
    pub(super) unsupported: BTreeSet<String>,
    pub(super) util_last_us: Option<u64>,
    pub(super) clock_last_us: Option<u64>,
    pub(super) proc_util_last_us: Option<u64>,
    pub(super) gpm: GpmMode,
    pub(super) gpm_sampled: bool,
    pub(super) warned_denied: bool,
    pub(super) prev: Option<Taken>,
    pub(super) mig_prev: BTreeMap<u32, Taken>,
    pub(super) procs_due: Instant,
    pub(super) processes: Vec<ProcessInfo>,
    pub(super) last_keys: Vec<EntityKey>,
}

/// The mean of the driver's samples newer than `since_us`, and the newest timestamp; `None`
/// without such samples.
pub(super) fn mean_samples(
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
pub(super) struct Ctx<'a> {
    pub(super) nvml: &'a Nvml,
    pub(super) node: Option<&'a str>,
    pub(super) interval_us: u64,
    pub(super) now: Instant,
    pub(super) gpm_mig_symbol: bool,
}

/// One MIG GPU instance found this tick.
#[derive(Debug)]
pub(super) struct MigDev<'n> {
    pub(super) gi: u32,
    pub(super) dev: Device<'n>,
    pub(super) profile: Option<String>,
    /// The instance's own `MIG-…` UUID (what the device plugin hands out), when NVML gives it.
    pub(super) uuid: Option<String>,
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
    pub(super) fn reset(&mut self, ident: Ident, gpm: GpmMode, now: Instant) {
        let index = self.index;
        *self = DevState::new(index, now);
        self.ident = Some(ident);
        self.gpm = gpm;
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
        self.free_gpm(nvml);
        self.ident = None;
        self.last_keys.clear();
        self.retry_at = now + LOST_RETRY;
    }

    /// Free every GPM sample held.
    pub(super) fn free_gpm(&mut self, nvml: &Nvml) {
        if let Some(t) = self.prev.take() {
            drop(t.sample.restore(nvml));
        }
        for (_, t) in std::mem::take(&mut self.mig_prev) {
            drop(t.sample.restore(nvml));
        }
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

    pub(super) fn call_with<T>(
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
    pub(super) fn gpm_on(&mut self, now: Instant) -> bool {
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
    pub(super) fn deny(&mut self, nvml: &Nvml, errors: &mut Vec<SourceError>) {
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

    pub(super) fn drop_slot(&mut self, nvml: &Nvml, slot: Option<u32>) {
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

    pub(super) fn entity_id(&self, ctx: &Ctx<'_>, mig: Option<MigId>) -> EntityId {
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
    pub(super) fn read<'n>(
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
    pub(super) fn clocks(
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
    pub(super) fn read_gpu<'n>(
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
    /// tick, else the point reading. The first window takes the samples of the last interval
    /// before the newest one, so the driver's timestamp base does not matter.
    pub(super) fn busy(
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
    pub(super) fn mig_devices<'n>(
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
            // An attribute only: a driver that does not name MIG UUIDs leaves it out.
            let uuid = m.uuid().ok().filter(|u| u.starts_with("MIG-"));
            found.push(MigDev {
                gi,
                dev: m,
                profile,
                uuid,
            });
        }
        Ok(found)
    }

    /// A GPU in MIG mode: one entity per GPU instance.
    pub(super) fn read_mig<'n>(
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
                uuid: m.uuid.clone(),
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
    pub(super) fn read_processes<'n>(
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
                attribution: crate::cgroup::of_pid(p.pid),
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
pub(super) fn attach_processes(entities: &mut [EntitySample], processes: &[ProcessInfo]) {
    for e in entities {
        let gi = e.id.mig.as_ref().map(|m| m.gpu_instance);
        e.processes = processes
            .iter()
            .filter(|p| gi.is_none() || p.gpu_instance == gi)
            .map(|p| ProcessReading {
                pod: None,
                pid: p.pid.to_string(),
                used_memory_bytes: p.used_memory_bytes.map(|b| b as f64),
                sm_busy: p.sm_busy,
                pod_uid: p.attribution.as_ref().map(|a| a.pod_uid.clone()),
                container_id: p.attribution.as_ref().and_then(|a| a.container_id.clone()),
            })
            .collect();
    }
}
