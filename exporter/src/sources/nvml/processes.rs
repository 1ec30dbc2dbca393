//! Processes (every [`PROCESS_EVERY`]): compute processes with their memory, per-process SM
//! busy (`nvmlDeviceGetProcessesUtilizationInfo`, where the driver has it), and the pod and
//! container each belongs to, from `/proc/<pid>/cgroup` ([`crate::cgroup`]).

use super::device::{Ctx, DevState, Got, Lost};
use super::mig::MigDev;
use super::raw;
use crate::bounds::MAX_PROCESSES;
use crate::cgroup::Attribution;
use crate::sources::SourceError;
use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::struct_wrappers::device::ProcessInfo as Listed;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use truthscale_core::model::{EntitySample, ProcessReading};

/// Processes are listed this often.
pub(super) const PROCESS_EVERY: Duration = Duration::from_secs(10);

/// A compute process on a GPU.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProcessInfo {
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

/// One GPU's processes between listings.
#[derive(Debug)]
pub(super) struct Processes {
    /// When they are listed next.
    next_at: Instant,
    /// The newest per-process utilization sample seen, µs.
    util_last_us: Option<u64>,
    /// At the last listing.
    pub(super) listed: Vec<ProcessInfo>,
}

impl Processes {
    pub(super) fn new(now: Instant) -> Processes {
        Processes {
            next_at: now,
            util_last_us: None,
            listed: Vec::new(),
        }
    }

    /// Whether they are to be listed this tick (then the next listing is scheduled).
    pub(super) fn due(&mut self, now: Instant) -> bool {
        let due = now >= self.next_at;
        if due {
            self.next_at = now + PROCESS_EVERY;
        }
        due
    }
}

/// pid → (timestamp, SM busy) of its newest utilization sample; `None`: an impossible one
/// (above 100 %), blank.
type SmBusyByPid = BTreeMap<u32, (u64, Option<f64>)>;

/// A process's SM busy from NVML's `smUtil` (percent): `None` above 100 %, which no process
/// can be (NVML's `u32` "not available", 0xFFFFFFFF, among them).
fn sm_busy_of(sm_util: u32) -> Option<f64> {
    (sm_util <= 100).then(|| f64::from(sm_util) / 100.0)
}

impl DevState {
    /// List compute processes (per GPU instance under MIG), with per-process SM busy where
    /// the driver has it and the pod each belongs to; keep them for `doctor`, log at debug.
    pub(super) fn read_processes<'n>(
        &mut self,
        ctx: &Ctx<'n>,
        dev: &Device<'n>,
        migs: Option<&[MigDev<'n>]>,
        errors: &mut Vec<SourceError>,
    ) -> Result<(), Lost> {
        let mut listed = self.compute_processes(dev, migs, errors)?;
        if listed.len() > MAX_PROCESSES {
            let mut left_out = crate::bounds::LeftOut::default();
            left_out.add(
                format!("processes past the first {MAX_PROCESSES} of one GPU"),
                (listed.len() - MAX_PROCESSES) as u64,
            );
            listed.truncate(MAX_PROCESSES);
            errors.extend(
                left_out
                    .message("NVML's process list")
                    .map(SourceError::OverLimit),
            );
        }
        // Per-process utilization is not supported on MIG.
        let util = match migs {
            None => self.sm_busy_by_pid(ctx, dev, errors)?,
            Some(_) => None,
        };
        self.procs.listed = listed
            .into_iter()
            .map(|p| ProcessInfo {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
                gpu_instance: p.gpu_instance_id,
                // The driver keeps samples of processes active since the last call: where
                // the call answered, a listed process without one was not busy (0); where it
                // did not, or its sample was impossible, its SM busy is unknown.
                sm_busy: util
                    .as_ref()
                    .and_then(|u| u.get(&p.pid).map_or(Some(0.0), |u| u.1)),
                attribution: crate::cgroup::of_pid(p.pid),
            })
            .collect();
        self.log_processes();
        Ok(())
    }

    /// The compute processes NVML lists: the GPU's, or each GPU instance's under MIG.
    fn compute_processes(
        &mut self,
        dev: &Device<'_>,
        migs: Option<&[MigDev<'_>]>,
        errors: &mut Vec<SourceError>,
    ) -> Result<Vec<Listed>, Lost> {
        let mut listed = Vec::new();
        match migs {
            Some(migs) => {
                // Every compute instance of each GPU instance: NVML lists on a MIG handle
                // only the processes of its own compute instance.
                for d in migs
                    .iter()
                    .flat_map(|m| std::iter::once(&m.dev).chain(&m.more))
                {
                    if let Got::Value(p) = self.call(
                        "nvmlDeviceGetComputeRunningProcesses_v3 (MIG)",
                        errors,
                        || d.running_compute_processes(),
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
        Ok(listed)
    }

    /// Each process's newest utilization sample since the last listing; `None` where the
    /// driver did not answer.
    fn sm_busy_by_pid(
        &mut self,
        ctx: &Ctx<'_>,
        dev: &Device<'_>,
        errors: &mut Vec<SourceError>,
    ) -> Result<Option<SmBusyByPid>, Lost> {
        let mut util = SmBusyByPid::new();
        let since = self.procs.util_last_us.unwrap_or(0);
        let Got::Value(u) = self.call("nvmlDeviceGetProcessesUtilizationInfo", errors, || {
            raw::process_utilization(ctx.nvml, dev, since)
        })?
        else {
            return Ok(None);
        };
        for p in &u {
            self.procs.util_last_us =
                Some(self.procs.util_last_us.unwrap_or(0).max(p.timestamp_us));
            let e = util.entry(p.pid).or_insert((0, Some(0.0)));
            if p.timestamp_us >= e.0 {
                *e = (p.timestamp_us, sm_busy_of(p.sm_util));
            }
        }
        // An impossible sample is blank, its process's share unknown (never a weight), and
        // counted.
        for (pid, (_, busy)) in &util {
            if busy.is_none() {
                errors.push(SourceError::Sentinel(format!(
                    "GPU {}: process {pid}: SM utilization above 100 %, left blank",
                    self.index
                )));
            }
        }
        Ok(Some(util))
    }

    fn log_processes(&self) {
        for p in &self.procs.listed {
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
