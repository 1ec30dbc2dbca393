//! MIG: a GPU in MIG mode is one entity per GPU instance (`mig_instance`, `mig_profile`),
//! with its memory and per-instance GPM (`nvmlGpmMigSampleGet` on the parent). The busy flag
//! does not exist on MIG, so it stays blank; clocks are the parent's; the GPU-wide power is
//! not split.

use super::device::{Ctx, DevState, Emitted, Lost, classify};
use super::gpm::{GpmMode, GpmStep, MISSES_WAITED};
use super::raw;
use crate::sources::SourceError;
use nvml_wrapper::Device;
use nvml_wrapper::error::NvmlError;
use truthscale_core::gpus::GpuSpec;
use truthscale_core::health;
use truthscale_core::model::{EntityId, EntitySample, Field, MigId, Readings};

/// What each instance takes from its GPU's readings: the clocks, and health (ECC, row
/// remaps, XIDs, recovery action, violation times): a GPU that cannot take work has no
/// instance that can.
const FROM_THE_GPU: u64 =
    Field::set_of(&[Field::SmClockMhz, Field::MemClockMhz]) | health::INPUT_FIELDS;

/// One MIG GPU instance found this tick.
#[derive(Debug)]
pub(super) struct MigDev<'n> {
    pub(super) gi: u32,
    pub(super) dev: Device<'n>,
    profile: Option<String>,
    /// The instance's own `MIG-…` UUID (what the device plugin hands out), when NVML gives it.
    uuid: Option<String>,
    /// The GPU instance's other compute instances: their processes are its too.
    pub(super) more: Vec<Device<'n>>,
}

impl DevState {
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
        // A count past any GPU's instances is not walked whole.
        for i in 0..count.min(crate::bounds::MAX_ENTITIES as u32) {
            let Some((m, gi)) = self.mig_slot(ctx, dev, i, errors)? else {
                continue;
            };
            // A further compute instance of a GPU instance already found: one entity, its
            // processes listed with the first's.
            if let Some(f) = found.iter_mut().find(|f| f.gi == gi) {
                f.more.push(m);
                continue;
            }
            found.push(self.describe_mig(m, gi, spec, errors)?);
        }
        Ok(found)
    }

    /// The MIG device in slot `i` and its GPU-instance id; `None` for an empty slot or one
    /// that could not be read.
    fn mig_slot<'n>(
        &mut self,
        ctx: &Ctx<'n>,
        dev: &Device<'n>,
        i: u32,
        errors: &mut Vec<SourceError>,
    ) -> Result<Option<(Device<'n>, u32)>, Lost> {
        let m = match dev.mig_device_by_index(i) {
            Ok(m) => m,
            // Empty slots answer NOT_FOUND (or INVALID_ARGUMENT on some drivers).
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => return Ok(None),
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
                return Ok(None);
            }
        };
        let gi = self
            .call("nvmlDeviceGetGpuInstanceId", errors, || {
                raw::gpu_instance_id(ctx.nvml, &m)
            })?
            .value();
        Ok(gi.map(|gi| (m, gi)))
    }

    /// A GPU instance with its profile name and UUID.
    fn describe_mig<'n>(
        &mut self,
        m: Device<'n>,
        gi: u32,
        spec: Option<&GpuSpec>,
        errors: &mut Vec<SourceError>,
    ) -> Result<MigDev<'n>, Lost> {
        let profile = self
            .call("nvmlDeviceGetAttributes_v2", errors, || m.attributes())?
            .value()
            .map(|a| mig_profile_name(spec, a.gpu_instance_slice_count, a.memory_size_mb));
        // An attribute only: a driver that does not name MIG UUIDs leaves it out.
        let uuid = m.uuid().ok().filter(|u| u.starts_with("MIG-"));
        Ok(MigDev {
            gi,
            dev: m,
            profile,
            uuid,
            more: Vec::new(),
        })
    }

    /// A GPU in MIG mode: one entity per GPU instance. GPM is stepped first: the GPU's
    /// clocks and health are read only for a tick whose windows go out, so that a tick whose
    /// instances are all reported unchanged leaves the clock samples to the next window,
    /// which spans it.
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
        let present: Vec<u32> = migs.iter().map(|m| m.gi).collect();
        self.gpm.forget_gone(ctx.nvml, &present);
        // A passing GPM failure this tick, and a GPM window: the GPU's count of misses in a
        // row moves once a tick.
        let (mut missed, mut measured) = (false, false);
        let mut out = Vec::with_capacity(migs.len());
        for m in migs {
            let mig_id = MigId {
                gpu_instance: m.gi,
                compute_instance: None,
                profile: m.profile.clone(),
                uuid: m.uuid.clone(),
            };
            let id = self.entity_id(ctx, Some(mig_id));
            let reported = self.last_keys.contains(&id.key());
            let mut r = Readings::default();
            match self.mig_gpm(ctx, dev, m.gi, gpm_on, reported, &mut r, errors)? {
                MigStep::Goes { measured: m_ } => {
                    measured |= m_;
                    out.push((m, id, r));
                }
                MigStep::Waits => {
                    missed = true;
                    if reported {
                        emit.unchanged.push(id.key());
                    }
                }
                MigStep::First => {}
            }
        }
        if missed {
            self.gpm.missed += 1;
        } else if measured {
            self.gpm.missed = 0;
        }
        self.emit_mig(ctx, dev, out, emit, errors)
    }

    /// The windows of the GPU instances `out` that go out this tick: the GPU's clocks and
    /// health (read now, only where any goes out), and each one's memory.
    fn emit_mig<'n>(
        &mut self,
        ctx: &Ctx<'n>,
        dev: &Device<'n>,
        out: Vec<(&MigDev<'n>, EntityId, Readings)>,
        emit: &mut Emitted,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        if out.is_empty() {
            return Ok(());
        }
        let mut shared = Readings::default();
        let (throttles, sm_clock_is_point) = self.clocks(ctx, dev, &mut shared, errors)?;
        // Health is the GPU's (ECC, row remaps, XIDs, recovery action, violation times): a
        // GPU that cannot take work has no instance that can. Each instance carries it.
        self.health(ctx.nvml, dev, &mut shared, errors)?;
        for (m, id, mut r) in out {
            r.copy_fields(&shared, FROM_THE_GPU);
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

    /// Step GPU instance `gi`'s GPM into `r` (`reported`: its window went out before). An
    /// instance not yet reported waits for its first pair; one already reported has its
    /// window without GPM when GPM comes back (after an outage or a refusal). A passing
    /// failure reports it unchanged, a few ticks at most; past that, the sample before the
    /// outage is dropped, so no pair spans it.
    #[expect(
        clippy::too_many_arguments,
        reason = "one instance's step, its state beside"
    )]
    fn mig_gpm(
        &mut self,
        ctx: &Ctx<'_>,
        dev: &Device<'_>,
        gi: u32,
        gpm_on: bool,
        reported: bool,
        r: &mut Readings,
        errors: &mut Vec<SourceError>,
    ) -> Result<MigStep, Lost> {
        // A NO_PERMISSION on one instance turns GPM off for the others too.
        if !(gpm_on && ctx.gpm_mig_symbol && self.gpm.mode == GpmMode::Active) {
            return Ok(MigStep::Goes { measured: false });
        }
        Ok(
            match self.gpm_step(ctx.nvml, Some(gi), || dev.gpm_mig_sample(gi), errors)? {
                GpmStep::First if reported => MigStep::Goes { measured: false },
                GpmStep::First => MigStep::First,
                GpmStep::Missed if self.gpm.missed < MISSES_WAITED => MigStep::Waits,
                GpmStep::Metrics(v) => {
                    self.apply_gpm(r, v, errors);
                    MigStep::Goes { measured: true }
                }
                GpmStep::Missed => {
                    self.gpm.drop_slot(ctx.nvml, Some(gi));
                    MigStep::Goes { measured: false }
                }
                GpmStep::Off => MigStep::Goes { measured: false },
            },
        )
    }
}

/// What a GPU instance's GPM step makes of its window this tick.
enum MigStep {
    /// It goes out, with GPM's values where `measured`.
    Goes { measured: bool },
    /// A passing failure: reported unchanged, waiting.
    Waits,
    /// Its first pair not yet taken: nothing to report.
    First,
}

/// The MIG profile name of a GPU instance, such as `3g.40gb`: the catalog profile of the
/// parent model with this many slices and the nearest memory, else `{slices}g.{GiB rounded
/// up}gb`.
#[must_use]
pub(super) fn mig_profile_name(spec: Option<&GpuSpec>, slices: u32, memory_mb: u64) -> String {
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
}
