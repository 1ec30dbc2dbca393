//! Why a starved GPU waits: the cause of each `starved` window, decided from its holder
//! pods' CPU and I/O pressure and the GPU's own transfer and engine counters.
//!
//! Pure, like [`crate::verdict`]: the signals are readings of the window (the holder
//! pressure fields are put on the GPU by the node agent, from cgroup v2 files; the link
//! fields by the source). The first rule that holds names the cause (see
//! `docs/verdicts.md`, "Why a GPU is starved"):
//!
//! | cause | when (defaults) |
//! |---|---|
//! | `cpu_throttled` | a holder pod was CFS-throttled in `≥ 25 %` of its periods |
//! | `cpu_contended` | some task of a holder pod waited for a CPU `≥ 20 %` of the window (PSI) |
//! | `io_stalled` | some task waited on I/O `≥ 20 %` of the window, or all did `≥ 10 %` (PSI) |
//! | `host_to_device` | PCIe receive `≥ 70 %` of the link's capacity with SM activity `< 50 %`, transmit (where read) under half of it |
//! | `launch_bound` | graphics engine active `≥ 50 %` with SM activity `< 25 %`, NVLink not `≥ 50 %` of its peak nor its transmit wait rising, and read where the model has NVLink |
//! | `comm_bound` | NVLink `≥ 50 %` of the model's peak, or its transmit wait rising, with tensor activity `< 10 %` |
//!
//! One thing comes before every rule: a GPU whose job has a straggler
//! ([`crate::stragglers`], not this GPU) waits on it, `comm_bound`, whatever its own
//! signals say.
//! | `unknown` | none of these, or none could be read |

use crate::gpus::GpuSpec;
use crate::model::{Field, Readings};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a starved window waited, in the order the rules are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The holder pod hit its CPU limit: CFS throttled it.
    CpuThrottled,
    /// The holder pod's tasks waited for a CPU (pressure, not a limit).
    CpuContended,
    /// The holder pod's tasks waited on I/O (storage or network reads).
    IoStalled,
    /// Host-to-device copies fill the PCIe link while the SMs wait.
    HostToDevice,
    /// The engine is busy launching tiny kernels (or synchronizing): few SMs are used.
    LaunchBound,
    /// The GPU waits on NVLink traffic (collectives) while the tensor pipes idle.
    CommBound,
    /// No rule held, or its signals were not read.
    Unknown,
}

impl Cause {
    /// Every cause, in rule order (the label order).
    pub const ALL: [Cause; 7] = [
        Cause::CpuThrottled,
        Cause::CpuContended,
        Cause::IoStalled,
        Cause::HostToDevice,
        Cause::LaunchBound,
        Cause::CommBound,
        Cause::Unknown,
    ];

    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::CpuThrottled => "cpu_throttled",
            Cause::CpuContended => "cpu_contended",
            Cause::IoStalled => "io_stalled",
            Cause::HostToDevice => "host_to_device",
            Cause::LaunchBound => "launch_bound",
            Cause::CommBound => "comm_bound",
            Cause::Unknown => "unknown",
        }
    }

    /// Index into [`Cause::ALL`].
    #[must_use]
    pub fn index(self) -> usize {
        self as usize
    }

    /// Parse a label value.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Cause> {
        Cause::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The thresholds of the cause rules (defaults to calibrate; `docs/verdicts.md` says where
/// each comes from).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CauseConfig {
    /// `cpu_throttled`: share of CFS periods throttled (kubernetes-mixin's
    /// `CPUThrottlingHigh` fires at 25 %).
    pub cpu_throttled_ratio: f64,
    /// `cpu_contended`: share of the window some task waited for a CPU (`cpu.pressure` some).
    pub cpu_waiting_ratio: f64,
    /// `io_stalled`: share of the window some task waited on I/O (`io.pressure` some).
    pub io_waiting_ratio: f64,
    /// `io_stalled`: share of the window every task waited on I/O (`io.pressure` full).
    pub io_stalled_ratio: f64,
    /// `host_to_device`: PCIe receive over the link's capacity per direction.
    pub pcie_rx_share: f64,
    /// `host_to_device`: SM activity below this is low.
    pub host_to_device_sm_below: f64,
    /// `launch_bound`: graphics engine active at or above this.
    pub launch_gr_active: f64,
    /// `launch_bound`: SM activity below this.
    pub launch_sm_below: f64,
    /// `comm_bound`: NVLink traffic (both directions) over the model's peak.
    pub nvlink_share: f64,
    /// `comm_bound`: tensor activity below this.
    pub comm_tensor_below: f64,
    /// `comm_bound`: the NVLink transmit wait rising faster than this, ticks per second
    /// (0: any rise), also decides it.
    pub nvlink_tx_wait_per_sec: f64,
}

impl Default for CauseConfig {
    fn default() -> Self {
        CauseConfig {
            cpu_throttled_ratio: 0.25,
            cpu_waiting_ratio: 0.2,
            io_waiting_ratio: 0.2,
            io_stalled_ratio: 0.1,
            pcie_rx_share: 0.7,
            host_to_device_sm_below: 0.5,
            launch_gr_active: 0.5,
            launch_sm_below: 0.25,
            nvlink_share: 0.5,
            comm_tensor_below: 0.1,
            nvlink_tx_wait_per_sec: 0.0,
        }
    }
}

impl CauseConfig {
    /// Every threshold a fraction (keys are `<prefix>name`).
    ///
    /// # Errors
    /// Each problem, naming its key.
    pub fn validate(&self, prefix: &str) -> Result<(), Vec<crate::phase::InvalidSetting>> {
        let mut c = crate::phase::Checker::new(prefix);
        for (key, v) in [
            ("cpu_throttled_ratio", self.cpu_throttled_ratio),
            ("cpu_waiting_ratio", self.cpu_waiting_ratio),
            ("io_waiting_ratio", self.io_waiting_ratio),
            ("io_stalled_ratio", self.io_stalled_ratio),
            ("pcie_rx_share", self.pcie_rx_share),
            ("host_to_device_sm_below", self.host_to_device_sm_below),
            ("launch_gr_active", self.launch_gr_active),
            ("launch_sm_below", self.launch_sm_below),
            ("nvlink_share", self.nvlink_share),
            ("comm_tensor_below", self.comm_tensor_below),
        ] {
            c.range(key, v, 0.0, 1.0);
        }
        c.range(
            "nvlink_tx_wait_per_sec",
            self.nvlink_tx_wait_per_sec,
            0.0,
            1e18,
        );
        c.finish()
    }
}

/// What the cause of a window is decided from: each `None` where it was not read.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CauseSignals {
    /// Share of the holder pods' CFS periods throttled (the worst holder).
    pub cpu_throttled: Option<f64>,
    /// The holder pods' CPU limit in CPUs, where one is set (the throttled holder's).
    pub cpu_limit_cores: Option<f64>,
    /// Share of the window some holder task waited for a CPU.
    pub cpu_waiting: Option<f64>,
    /// Share of the window some holder task waited on I/O.
    pub io_waiting: Option<f64>,
    /// Share of the window every holder task waited on I/O.
    pub io_stalled: Option<f64>,
    /// Share of the window every holder task waited on memory (shown, not a rule).
    pub memory_stalled: Option<f64>,
    /// PCIe receive over the link's capacity per direction.
    pub pcie_rx_share: Option<f64>,
    /// PCIe transmit over the same capacity: traffic as heavy both ways is peers' or a
    /// NIC's (a ring all-reduce over PCIe), not the host feeding the GPU.
    pub pcie_tx_share: Option<f64>,
    /// The link capacity used, bytes per second per direction, and whether it was measured
    /// (the current generation and width) or the model's maximum (a bound: the share is
    /// then at most what it is on the real link).
    pub pcie_capacity: Option<(f64, bool)>,
    /// SM activity.
    pub sm_active: Option<f64>,
    /// Graphics engine activity.
    pub gr_active: Option<f64>,
    /// Tensor activity.
    pub tensor: Option<f64>,
    /// NVLink traffic, both directions, over the model's bidirectional peak.
    pub nvlink_share: Option<f64>,
    /// The model has NVLink and its traffic was not read: a window on few SMs may then be
    /// collectives, so `launch_bound` is not told.
    pub nvlink_unread: bool,
    /// The gap of the straggler of this GPU's job it waits on ([`crate::stragglers`]).
    pub waiting_on_straggler: Option<f64>,
    /// The NVLink transmit wait's rise per second.
    pub nvlink_tx_wait: Option<f64>,
}

/// Bytes per second, per direction, of a PCIe link of `generation` and `lanes`: the
/// transfer rate times the lanes, less the line encoding (8b/10b up to Gen 2, 128b/130b
/// from Gen 3; Gen 6's FLIT mode is counted as 242/256), over 8 bits.
#[must_use]
pub fn pcie_bytes_per_sec(generation: u32, lanes: u32) -> Option<f64> {
    let (gts, encoding) = match generation {
        1 => (2.5, 0.8),
        2 => (5.0, 0.8),
        3 => (8.0, 128.0 / 130.0),
        4 => (16.0, 128.0 / 130.0),
        5 => (32.0, 128.0 / 130.0),
        6 => (64.0, 242.0 / 256.0),
        _ => return None,
    };
    (lanes > 0).then(|| gts * 1e9 * f64::from(lanes) * encoding / 8.0)
}

impl CauseSignals {
    /// The signals of a window's sanitized readings; `spec` gives the NVLink peak and the
    /// link's maximum where the current generation and width were not read.
    #[must_use]
    pub fn from_readings(r: &Readings, spec: Option<&GpuSpec>) -> CauseSignals {
        let measured_link = match (r.value(Field::PcieLinkGen), r.value(Field::PcieLinkWidth)) {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "sanitized to 0..=6 and 0..=32"
            )]
            (Some(g), Some(w)) => pcie_bytes_per_sec(g.round() as u32, w.round() as u32),
            _ => None,
        };
        let link = spec.and_then(GpuSpec::interconnect);
        let pcie_capacity = measured_link.map(|c| (c, true)).or_else(|| {
            link.and_then(|l| pcie_bytes_per_sec(l.pcie_gen, l.pcie_lanes))
                .map(|c| (c, false))
        });
        let share = |f| r.value(f).zip(pcie_capacity).map(|(v, (cap, _))| v / cap);
        let pcie_rx_share = share(Field::PcieRxBytesPerSec);
        let pcie_tx_share = share(Field::PcieTxBytesPerSec);
        let nvlink_share = nvlink_share(r, link);
        let has_nvlink = link
            .and_then(|l| l.nvlink_bytes_per_sec)
            .is_some_and(|p| p > 0.0);
        CauseSignals {
            cpu_throttled: r.value(Field::HolderCpuThrottledRatio),
            cpu_limit_cores: r.value(Field::HolderCpuLimitCores),
            cpu_waiting: r.value(Field::HolderCpuWaitingRatio),
            io_waiting: r.value(Field::HolderIoWaitingRatio),
            io_stalled: r.value(Field::HolderIoStalledRatio),
            memory_stalled: r.value(Field::HolderMemoryStalledRatio),
            pcie_rx_share,
            pcie_tx_share,
            pcie_capacity,
            sm_active: r.value(Field::SmActive),
            gr_active: r.value(Field::GrActive),
            tensor: r.value(Field::TensorActive),
            nvlink_share,
            nvlink_unread: has_nvlink && nvlink_share.is_none(),
            waiting_on_straggler: r.value(Field::StragglerWaitGap),
            nvlink_tx_wait: r.value(Field::NvlinkTxWaitPerSec),
        }
    }
}

/// NVLink traffic, both directions, over the model's bidirectional peak (`link`'s), when
/// both directions were read and the model has NVLink.
#[must_use]
pub fn nvlink_share(r: &Readings, link: Option<crate::gpus::Interconnect>) -> Option<f64> {
    let peak = link?.nvlink_bytes_per_sec.filter(|p| *p > 0.0)?;
    let tx = r.value(Field::NvlinkTxBytesPerSec)?;
    let rx = r.value(Field::NvlinkRxBytesPerSec)?;
    Some((tx + rx) / peak)
}

/// A cause and the signal that decided it: its name, the value read and the threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finding {
    /// The cause.
    pub cause: Cause,
    /// The deciding signal, what it read and the threshold it crossed (`None` for
    /// `unknown`).
    pub evidence: Option<(&'static str, f64, f64)>,
    /// The holder's CPU limit, for `cpu_throttled`'s advice.
    pub cpu_limit_cores: Option<f64>,
}

/// The cause of a starved window: the first rule, in [`Cause::ALL`]'s order, that holds.
#[must_use]
pub fn cause(s: &CauseSignals, cfg: &CauseConfig) -> Finding {
    let at_least = |v: Option<f64>, t: f64| v.filter(|v| *v >= t);
    let below = |v: Option<f64>, t: f64| v.is_some_and(|v| v < t);
    let found = |cause, name, v, t| Finding {
        cause,
        evidence: Some((name, v, t)),
        cpu_limit_cores: s.cpu_limit_cores,
    };
    if let Some(gap) = s.waiting_on_straggler {
        return found(Cause::CommBound, "waiting_on_straggler_gap_ratio", gap, 0.0);
    }
    if let Some(v) = at_least(s.cpu_throttled, cfg.cpu_throttled_ratio) {
        return found(
            Cause::CpuThrottled,
            "cpu_throttled_ratio",
            v,
            cfg.cpu_throttled_ratio,
        );
    }
    if let Some(v) = at_least(s.cpu_waiting, cfg.cpu_waiting_ratio) {
        return found(
            Cause::CpuContended,
            "cpu_pressure_waiting_ratio",
            v,
            cfg.cpu_waiting_ratio,
        );
    }
    if let Some(v) = at_least(s.io_stalled, cfg.io_stalled_ratio) {
        return found(
            Cause::IoStalled,
            "io_pressure_stalled_ratio",
            v,
            cfg.io_stalled_ratio,
        );
    }
    if let Some(v) = at_least(s.io_waiting, cfg.io_waiting_ratio) {
        return found(
            Cause::IoStalled,
            "io_pressure_waiting_ratio",
            v,
            cfg.io_waiting_ratio,
        );
    }
    // Receive must dominate: as heavy both ways, the traffic is peers' (collectives over
    // PCIe, RDMA), which the host's copies are not.
    if let Some(v) = at_least(s.pcie_rx_share, cfg.pcie_rx_share)
        && below(s.sm_active, cfg.host_to_device_sm_below)
        && s.pcie_tx_share.is_none_or(|tx| tx < v / 2.0)
    {
        return found(
            Cause::HostToDevice,
            "pcie_rx_share_of_link",
            v,
            cfg.pcie_rx_share,
        );
    }
    // Collectives run on few SMs too: a window whose NVLink is near its peak, or whose
    // transmit wait rises, is left to `comm_bound`, whose evidence is direct; on a model
    // with NVLink whose traffic was not read, nothing tells the two apart.
    let tx_wait = s.nvlink_tx_wait.filter(|w| *w > cfg.nvlink_tx_wait_per_sec);
    if at_least(s.gr_active, cfg.launch_gr_active).is_some()
        && !s.nvlink_unread
        && at_least(s.nvlink_share, cfg.nvlink_share).is_none()
        && tx_wait.is_none()
        && let Some(sm) = s.sm_active.filter(|v| *v < cfg.launch_sm_below)
    {
        return found(Cause::LaunchBound, "sm_active", sm, cfg.launch_sm_below);
    }
    if below(s.tensor, cfg.comm_tensor_below)
        && let Some((name, v, t)) = comm_evidence(s, cfg, tx_wait)
    {
        return found(Cause::CommBound, name, v, t);
    }
    Finding {
        cause: Cause::Unknown,
        evidence: None,
        cpu_limit_cores: s.cpu_limit_cores,
    }
}

/// What says the links hold the GPU back: NVLink near its peak, else its transmit wait
/// rising (`tx_wait`, already over its threshold).
fn comm_evidence(
    s: &CauseSignals,
    cfg: &CauseConfig,
    tx_wait: Option<f64>,
) -> Option<(&'static str, f64, f64)> {
    match s.nvlink_share.filter(|v| *v >= cfg.nvlink_share) {
        Some(v) => Some(("nvlink_share_of_peak", v, cfg.nvlink_share)),
        None => tx_wait.map(|w| ("nvlink_tx_wait_per_sec", w, cfg.nvlink_tx_wait_per_sec)),
    }
}

impl Finding {
    /// What to do about it, in one line.
    #[must_use]
    pub fn advice(&self) -> String {
        match self.cause {
            Cause::CpuThrottled => match self.cpu_limit_cores {
                Some(limit) => format!(
                    "raise the pod's CPU limit from {} (or remove it) until throttling falls under the threshold, or move preprocessing off the pod",
                    trim(limit)
                ),
                None => "raise the pod's CPU limit (or remove it), or move preprocessing off the pod".into(),
            },
            Cause::CpuContended => "the pod's threads wait for a CPU: raise its CPU request, pin it away from busy neighbours, or use fewer, larger data-loader processes".into(),
            Cause::IoStalled => "the pod waits on reads: more data-loader workers with prefetching, a local cache of the dataset, or faster storage".into(),
            Cause::HostToDevice => "copies from the host fill the PCIe link: pin host memory, overlap copies with compute, keep data on the GPU, or use larger batches".into(),
            Cause::LaunchBound => "tiny kernels and synchronizations: larger batches, CUDA graphs, fused kernels, fewer host syncs".into(),
            Cause::CommBound if self.evidence.is_some_and(|(n, _, _)| n == "waiting_on_straggler_gap_ratio") => format!("a straggler of its job holds it back: fix that GPU (its clock, power or thermal cap, its pod's input), not this one; {} names it", crate::catalog::GPU_STRAGGLER_GAP.name),
            Cause::CommBound => "the GPU waits on collectives over NVLink: overlap communication with compute, larger per-GPU batches, or check for a straggler".into(),
            Cause::Unknown => "none of the cause signals crossed its threshold (or none was read): in node mode truthscale reads the holder pods' cgroups; the PCIe and NVLink counters need DCGM profiling fields or NVML GPM".into(),
        }
    }
}

/// A number without a needless fraction: 2 → `2`, 1.5 → `1.5`.
fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.evidence {
            Some(("waiting_on_straggler_gap_ratio", gap, _)) => write!(
                f,
                "{} (waiting on a straggler of its job, {:.0} % behind the job's median)",
                self.cause,
                gap * 100.0
            ),
            Some((name, v, t)) if self.cause == Cause::LaunchBound => write!(
                f,
                "{} ({name} {v:.2}, below {t:.2}, while the graphics engine is active)",
                self.cause
            ),
            Some((name, v, t)) => write!(f, "{} ({name} {v:.2}, at or above {t:.2})", self.cause),
            None => write!(f, "{} (no cause signal crossed its threshold)", self.cause),
        }
    }
}

#[cfg(test)]
mod tests;
