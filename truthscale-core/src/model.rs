//! The typed model: who a reading belongs to, and what was read.
//!
//! A [`Sample`] is a timestamp plus per-entity [`Readings`]. Each reading is a
//! [`Reading`]: a value, unsupported, or blank. Values are never strings, and a
//! blank is never the same as zero.

use std::fmt;

/// Milliseconds since the Unix epoch. The core never reads the clock: time is an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Seconds from `earlier` to `self` (negative when `earlier` is later).
    #[must_use]
    pub fn seconds_since(self, earlier: Timestamp) -> f64 {
        match self.0.checked_sub(earlier.0) {
            Some(ms) => ms as f64 / 1000.0,
            // Times at the ends of the i64 range: in i128, where any two differ by a
            // representable amount (slower, so only here).
            None => (i128::from(self.0) - i128::from(earlier.0)) as f64 / 1000.0,
        }
    }

    /// This timestamp moved forward by `seconds`.
    #[must_use]
    pub fn plus_seconds(self, seconds: f64) -> Timestamp {
        Timestamp(self.0 + (seconds * 1000.0).round() as i64)
    }
}

/// Where raw counters came from. Simulated data is always labelled as such.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// The built-in simulated GPU (not real hardware).
    Sim,
    /// A replayed capture file.
    Replay,
    /// NVML, read in-process.
    Nvml,
    /// A live dcgm-exporter scrape.
    DcgmExporter,
    /// A `dcgmi dmon` capture.
    DcgmiDmon,
    /// A truthscale JSONL trace.
    Trace,
}

impl SourceKind {
    /// The label value used for this source.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Sim => "sim",
            SourceKind::Replay => "replay",
            SourceKind::Nvml => "nvml",
            SourceKind::DcgmExporter => "dcgm_exporter",
            SourceKind::DcgmiDmon => "dcgmi_dmon",
            SourceKind::Trace => "trace",
        }
    }
}

/// A MIG GPU instance (and optionally compute instance) on a parent GPU.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MigId {
    /// GPU-instance id.
    pub gpu_instance: u32,
    /// Compute-instance id, when the source reports one.
    pub compute_instance: Option<u32>,
    /// Profile name, such as `3g.40gb`.
    pub profile: Option<String>,
    /// The MIG device's own UUID (`MIG-…`), when the source reports it.
    pub uuid: Option<String>,
}

/// The Kubernetes workload a GPU is attributed to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PodRef {
    /// Pod name.
    pub pod: String,
    /// Namespace, when known.
    pub namespace: Option<String>,
    /// Container, when known.
    pub container: Option<String>,
}

impl PodRef {
    /// Whether `other` names the same pod: its name and namespace, whatever the container.
    #[must_use]
    pub fn same_pod(&self, other: &PodRef) -> bool {
        self.pod == other.pod && self.namespace == other.namespace
    }
}

/// Identity of one measured entity: a whole GPU or a MIG instance, possibly attributed to a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EntityId {
    /// GPU index as the driver numbers it.
    pub gpu: Option<u32>,
    /// GPU UUID (`GPU-…`); for MIG rows, the parent's UUID.
    pub uuid: Option<String>,
    /// Model name as NVML/DCGM report it (e.g. `NVIDIA H100 80GB HBM3`).
    pub model: Option<String>,
    /// PCI bus id, when known.
    pub pci_bus_id: Option<String>,
    /// The NVIDIA driver's version (`550.54.15`), when the source says: an attribute, like
    /// the model and the PCI id, that never splits an entity.
    pub driver_version: Option<String>,
    /// MIG instance, when this entity is one.
    pub mig: Option<MigId>,
    /// Pod attribution, when known.
    pub pod: Option<PodRef>,
    /// Node (host) name, when known.
    pub node: Option<String>,
    /// The device's minor number (`/dev/nvidia<minor>`), when the source reads it: how a
    /// DRA driver names a GPU (`gpu-<minor>`), which need not be its index. An attribute,
    /// never part of the key.
    pub minor: Option<u32>,
}

/// The part of an [`EntityId`] that decides whether two readings are the same entity.
///
/// The node is part of it: `gpu 0` of two nodes are two GPUs, with or without UUIDs. The
/// model name, PCI id and MIG profile are attributes and do not split an entity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityKey {
    node: Option<String>,
    gpu: Option<u32>,
    uuid: Option<String>,
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
    pod: Option<PodRef>,
}

impl EntityId {
    /// The key that identifies this entity across samples.
    #[must_use]
    pub fn key(&self) -> EntityKey {
        EntityKey {
            node: self.node.clone(),
            gpu: self.gpu,
            uuid: self.uuid.clone(),
            gpu_instance: self.mig.as_ref().map(|m| m.gpu_instance),
            compute_instance: self.mig.as_ref().and_then(|m| m.compute_instance),
            pod: self.pod.clone(),
        }
    }
}

impl EntityKey {
    /// Whether `id` has this key (`id.key() == *self`, without building the key).
    #[must_use]
    #[inline(always)]
    pub fn is_key_of(&self, id: &EntityId) -> bool {
        self.gpu == id.gpu
            && self.gpu_instance == id.mig.as_ref().map(|m| m.gpu_instance)
            && self.compute_instance == id.mig.as_ref().and_then(|m| m.compute_instance)
            && self.node == id.node
            && self.uuid == id.uuid
            && self.pod == id.pod
    }
}

impl EntityId {
    /// Whether `other`, an id with the same [`EntityKey`], has the same attributes too
    /// (model, PCI id, driver version, MIG profile and UUID): `*self == *other`, comparing
    /// only what the key leaves out.
    #[must_use]
    #[inline(always)]
    pub fn same_attributes(&self, other: &EntityId) -> bool {
        let mig = match (&self.mig, &other.mig) {
            (None, None) => true,
            (Some(a), Some(b)) => a.profile == b.profile && a.uuid == b.uuid,
            _ => false,
        };
        mig && self.model == other.model
            && self.pci_bus_id == other.pci_bus_id
            && self.driver_version == other.driver_version
    }
}

impl fmt::Display for EntityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.gpu, &self.uuid) {
            (Some(i), _) => write!(f, "gpu {i}")?,
            (None, Some(u)) => write!(f, "{u}")?,
            (None, None) => write!(f, "gpu ?")?,
        }
        if let Some(n) = &self.node {
            write!(f, " on {n}")?;
        }
        if let Some(m) = &self.mig {
            write!(f, " gi {}", m.gpu_instance)?;
            if let Some(ci) = m.compute_instance {
                write!(f, " ci {ci}")?;
            }
        }
        if let Some(p) = &self.pod {
            match &p.namespace {
                Some(ns) => write!(f, " ({ns}/{})", p.pod)?,
                None => write!(f, " ({})", p.pod)?,
            }
        }
        Ok(())
    }
}

/// One reading: a value, unsupported by the device or source, or blank this time.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Reading {
    /// A measured value, in the field's canonical unit.
    Value(f64),
    /// The device or source cannot provide this field.
    Unsupported,
    /// No value this time (not reported, `N/A`, `null`, or a sentinel).
    #[default]
    Blank,
}

impl Reading {
    /// The value, if there is one.
    #[must_use]
    pub fn value(self) -> Option<f64> {
        match self {
            Reading::Value(v) => Some(v),
            _ => None,
        }
    }
}

macro_rules! fields {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal ),+ $(,)?) => {
        /// Every raw counter truthscale understands, each in one canonical unit.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Field { $( $(#[$doc])* $variant ),+ }

        impl Field {
            /// All fields, in declaration order.
            pub const ALL: &'static [Field] = &[$(Field::$variant),+];
            /// Number of fields.
            pub const COUNT: usize = Field::ALL.len();

            /// The field's name, as used in traces and diagnostics.
            #[must_use]
            pub fn name(self) -> &'static str {
                match self { $(Field::$variant => $name),+ }
            }

            /// The field with this trace name.
            #[must_use]
            pub fn from_name(name: &str) -> Option<Field> {
                match name { $($name => Some(Field::$variant),)+ _ => None }
            }
        }
    };
}

fields! {
    /// Reported utilization: the fraction of time at least one kernel was resident (0..1).
    ReportedUtil => "gpu_util",
    /// Graphics/compute engine active fraction (0..1).
    GrActive => "gr_engine_active",
    /// SM active: fraction of SM cycles with at least one warp (0..1).
    SmActive => "sm_active",
    /// SM occupancy: resident warps over the theoretical maximum (0..1).
    SmOccupancy => "sm_occupancy",
    /// Any-tensor pipe active (0..1).
    TensorActive => "tensor_active",
    /// HMMA (half-precision tensor) pipe active (0..1).
    HmmaActive => "hmma_active",
    /// IMMA (integer tensor) pipe active (0..1).
    ImmaActive => "imma_active",
    /// DRAM bandwidth used over the theoretical maximum (0..1).
    DramActive => "dram_active",
    /// Non-tensor FP16 pipe active (0..1).
    Fp16Active => "fp16_active",
    /// FP32 pipe active (0..1).
    Fp32Active => "fp32_active",
    /// FP64 pipe active (0..1).
    Fp64Active => "fp64_active",
    /// SM clock in MHz.
    SmClockMhz => "sm_clock_mhz",
    /// Memory clock in MHz.
    MemClockMhz => "mem_clock_mhz",
    /// Power draw in watts.
    PowerWatts => "power_watts",
    /// Enforced power limit in watts.
    PowerLimitWatts => "power_limit_watts",
    /// Energy counter in joules (monotonic, may reset).
    EnergyJoules => "energy_joules",
    /// Allocated device memory in bytes.
    MemUsedBytes => "memory_used_bytes",
    /// Total device memory in bytes.
    MemTotalBytes => "memory_total_bytes",
    /// PCIe transmit rate in bytes per second.
    PcieTxBytesPerSec => "pcie_tx_bytes_per_sec",
    /// PCIe receive rate in bytes per second.
    PcieRxBytesPerSec => "pcie_rx_bytes_per_sec",
    /// NVLink transmit rate in bytes per second.
    NvlinkTxBytesPerSec => "nvlink_tx_bytes_per_sec",
    /// NVLink receive rate in bytes per second.
    NvlinkRxBytesPerSec => "nvlink_rx_bytes_per_sec",
    /// NVLink port transmit wait, summed over the GPU's links, cumulative (DCGM field 1509,
    /// `DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL`, `…_IBPC_PORT_XMIT_WAIT` before DCGM
    /// 4.7): ticks in which a port had data to send and could not.
    NvlinkTxWaitTotal => "nvlink_tx_wait_total",
    /// The transmit wait's rise per second over the window, from [`Field::NvlinkTxWaitTotal`]'s
    /// delta (derived; blank for a first reading, a reset or a blank).
    NvlinkTxWaitPerSec => "nvlink_tx_wait_per_sec",
    /// The PCIe link's current generation (1..6; DCGM field 237, NVML
    /// `nvmlDeviceGetCurrPcieLinkGeneration`): with the width, the link's capacity.
    PcieLinkGen => "pcie_link_gen",
    /// The PCIe link's current width in lanes (DCGM field 238, NVML
    /// `nvmlDeviceGetCurrPcieLinkWidth`).
    PcieLinkWidth => "pcie_link_width",
    /// Of the CFS periods of the GPU's holder pods in the window, the share in which the
    /// pod was throttled (`nr_throttled / nr_periods` of cgroup v2 `cpu.stat`; the worst
    /// holder), 0..1.
    HolderCpuThrottledRatio => "holder_cpu_throttled_ratio",
    /// The CPU limit of the holder pod that was throttled most, in CPUs (cgroup v2
    /// `cpu.max`: quota over period); absent where no limit is set.
    HolderCpuLimitCores => "holder_cpu_limit_cores",
    /// The share of the window in which some task of a holder pod waited for a CPU
    /// (`cpu.pressure` "some"; the worst holder), 0..1.
    HolderCpuWaitingRatio => "holder_cpu_pressure_waiting_ratio",
    /// The share of the window in which some task of a holder pod waited on I/O
    /// (`io.pressure` "some"; the worst holder), 0..1.
    HolderIoWaitingRatio => "holder_io_pressure_waiting_ratio",
    /// The share of the window in which every task of a holder pod waited on I/O
    /// (`io.pressure` "full"; the worst holder), 0..1.
    HolderIoStalledRatio => "holder_io_pressure_stalled_ratio",
    /// The share of the window in which every task of a holder pod waited on memory
    /// (`memory.pressure` "full"; the worst holder), 0..1.
    HolderMemoryStalledRatio => "holder_memory_pressure_stalled_ratio",
    /// A sustained straggler of its job ([`crate::stragglers`]): how far its SM clock sits
    /// below the job's median, as a share of the median, 0..1. Absent for any other GPU.
    StragglerClockGap => "straggler_sm_clock_gap_ratio",
    /// A sustained straggler of its job: how far its effective compute (the compute term)
    /// sits below the job's median, as a share of the median, 0..1.
    StragglerComputeGap => "straggler_effective_compute_gap_ratio",
    /// A GPU whose job has a sustained straggler (not this GPU): the straggler's largest
    /// gap, 0..1. The GPU then waits on it (`comm_bound`), not starved on its own.
    StragglerWaitGap => "waiting_on_straggler_gap_ratio",
    /// GPU temperature in degrees Celsius.
    TempCelsius => "temp_celsius",
    /// SM cycles elapsed since boot, summed as DCGM counts them (field 1084, NVML GPM 248):
    /// the denominator of every cumulative activity ratio.
    SmCyclesElapsed => "sm_cycles_elapsed_total",
    /// SM cycles with at least one warp resident since boot (field 1085, GPM 249).
    SmCyclesActive => "sm_cycles_active_total",
    /// Cycles with any tensor (MMA) pipe active since boot (field 1086, GPM 250).
    MmaCyclesActive => "mma_cycles_active_total",
    /// Cycles with the HMMA (half-precision tensor) pipe active since boot (field 1088).
    HmmaCyclesActive => "hmma_cycles_active_total",
    /// Cycles with the IMMA (integer tensor) pipe active since boot (field 1089).
    ImmaCyclesActive => "imma_cycles_active_total",
    /// Cycles with the FP64 pipe active since boot (field 1094).
    Fp64CyclesActive => "fp64_cycles_active_total",
    /// Cycles with the FP32 pipe active since boot (field 1095).
    Fp32CyclesActive => "fp32_cycles_active_total",
    /// Cycles with the FP16 pipe active since boot (field 1096).
    Fp16CyclesActive => "fp16_cycles_active_total",
    /// The last XID error the driver reported (DCGM field 230, `DCGM_FI_DEV_XID_ERRORS`,
    /// `DCGM_FI_DEV_XID_ERROR` from DCGM 4.6): its code, 0 for none. NVML reports XIDs only as
    /// events (`nvmlEventSetWait`): the NVML source reads the last one it was told of.
    XidLast => "xid_last",
    /// Single-bit (corrected) ECC errors since the driver loaded (DCGM field 310,
    /// `DCGM_FI_DEV_ECC_SBE_VOL_TOTAL`; NVML `nvmlDeviceGetTotalEccErrors`, corrected,
    /// volatile). An INT64 counter.
    EccSbeVolatile => "ecc_sbe_volatile_total",
    /// Double-bit (uncorrected) ECC errors since the driver loaded (DCGM field 311,
    /// `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`; NVML `nvmlDeviceGetTotalEccErrors`, uncorrected,
    /// volatile). An INT64 counter.
    EccDbeVolatile => "ecc_dbe_volatile_total",
    /// Double-bit ECC errors over the device's life (DCGM field 313,
    /// `DCGM_FI_DEV_ECC_DBE_AGG_TOTAL`; NVML `nvmlDeviceGetTotalEccErrors`, uncorrected,
    /// aggregate). An INT64 counter.
    EccDbeAggregate => "ecc_dbe_aggregate_total",
    /// A row remap is pending: 1 until the GPU is reset, else 0 (DCGM field 396,
    /// `DCGM_FI_DEV_ROW_REMAP_PENDING`; NVML `nvmlDeviceGetRemappedRows`, `isPending`).
    RowRemapPending => "row_remap_pending",
    /// A row remap failed: 1, else 0 (DCGM field 395, `DCGM_FI_DEV_ROW_REMAP_FAILURE`,
    /// `DCGM_FI_DEV_ROW_REMAP_FAILED` from DCGM 4.6; NVML `nvmlDeviceGetRemappedRows`,
    /// `failureOccurred`).
    RowRemapFailed => "row_remap_failed",
    /// Rows remapped for uncorrectable errors (DCGM field 393,
    /// `DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`, `…_ROW_REMAP_UNCORRECTABLE_TOTAL` from DCGM
    /// 4.6; NVML `nvmlDeviceGetRemappedRows`, `uncRows`).
    RowRemapUncorrectable => "row_remap_uncorrectable_rows",
    /// The recovery the driver asks for (DCGM field 1523, `DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION`,
    /// `DCGM_FI_DEV_GPU_RECOVERY_ACTION` from DCGM 4.6; NVML's `nvmlDeviceGpuRecoveryAction_t`):
    /// 0 none, 1 GPU reset, 2 node reboot, 3 drain peer-to-peer, 4 drain and reset.
    RecoveryAction => "gpu_recovery_action",
    /// Time the clocks were held down by the power limit since the driver loaded, in
    /// nanoseconds (DCGM field 240, `DCGM_FI_DEV_POWER_VIOLATION`; NVML
    /// `nvmlDeviceGetViolationStatus`, `NVML_PERF_POLICY_POWER`). An INT64 counter.
    PowerViolationNs => "power_violation_ns_total",
    /// Time the clocks were held down by temperature since the driver loaded, in nanoseconds
    /// (DCGM field 241, `DCGM_FI_DEV_THERMAL_VIOLATION`; NVML `nvmlDeviceGetViolationStatus`,
    /// `NVML_PERF_POLICY_THERMAL`). An INT64 counter.
    ThermalViolationNs => "thermal_violation_ns_total",
    /// Time the clocks were held down by the software power cap since the driver loaded, in
    /// nanoseconds (DCGM field 1420, `DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS`; NVML
    /// field `NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP`). An INT64 counter.
    ClockEventSwPowerCapNs => "clock_event_sw_power_cap_ns_total",
    /// Time the clocks were held to the slowest of their sync-boost group, in nanoseconds
    /// (DCGM field 1421, `…_SYNC_BOOST_NS`; NVML `…_SYNC_BOOST`). An INT64 counter.
    ClockEventSyncBoostNs => "clock_event_sync_boost_ns_total",
    /// Time the clocks were held down to keep the GPU and memory under their operating
    /// temperatures, in nanoseconds (DCGM field 1422, `…_SW_THERM_SLOWDOWN_NS`; NVML
    /// `…_SW_THERM_SLOWDOWN`). An INT64 counter.
    ClockEventSwThermalNs => "clock_event_sw_thermal_ns_total",
    /// Time the hardware slowed the clocks for temperature, in nanoseconds (DCGM field 1423,
    /// `…_HW_THERM_SLOWDOWN_NS`; NVML `…_HW_THERM_SLOWDOWN`). An INT64 counter.
    ClockEventHwThermalNs => "clock_event_hw_thermal_ns_total",
    /// Time the hardware power brake slowed the clocks, in nanoseconds (DCGM field 1424,
    /// `…_HW_POWER_BRAKE_SLOWDOWN_NS`; NVML `…_HW_POWER_BRAKE_SLOWDOWN`). An INT64 counter.
    ClockEventHwPowerBrakeNs => "clock_event_hw_power_brake_ns_total",
    /// XID errors the source counted in its own window, all XIDs together (dcgm-exporter's
    /// `DCGM_EXP_XID_ERRORS_COUNT{xid,window_size_in_ms}`, summed over `xid`).
    XidWindowErrors => "xid_window_errors",
    /// A fatal XID ([`crate::health::FATAL_XIDS`]) the source counted in its own window: the
    /// one counted most (the lowest on a tie), 0 for none (from
    /// `DCGM_EXP_XID_ERRORS_COUNT`).
    XidWindowFatal => "xid_window_fatal",
    /// The GPU's memory cannot be repaired in the field: 1, else 0 (DCGM field 1507,
    /// `DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG`, `DCGM_FI_DEV_MEMORY_UNREPAIRABLE` from DCGM 4.6).
    MemoryUnrepairable => "memory_unrepairable",
    /// The GPU fabric's health summary (DCGM field 175, `DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY`,
    /// NVML's `NVML_GPU_FABRIC_HEALTH_SUMMARY_*`): 0 not supported, 1 healthy, 2 unhealthy,
    /// 3 limited capacity.
    FabricHealthSummary => "fabric_health_summary",
}

impl Field {
    /// `fields` as a set: bit `i` for the field whose index is `i`, as
    /// [`Readings::any_filled`] reads it.
    #[must_use]
    pub const fn set_of(fields: &[Field]) -> u64 {
        let mut set = 0;
        let mut i = 0;
        while i < fields.len() {
            set |= 1 << fields[i] as usize;
            i += 1;
        }
        set
    }

    /// The cumulative cycle counters and the activity ratio each one's delta over
    /// [`Field::SmCyclesElapsed`]'s gives over a window.
    pub const CYCLE_COUNTERS: [(Field, Field); 7] = [
        (Field::SmCyclesActive, Field::SmActive),
        (Field::MmaCyclesActive, Field::TensorActive),
        (Field::HmmaCyclesActive, Field::HmmaActive),
        (Field::ImmaCyclesActive, Field::ImmaActive),
        (Field::Fp64CyclesActive, Field::Fp64Active),
        (Field::Fp32CyclesActive, Field::Fp32Active),
        (Field::Fp16CyclesActive, Field::Fp16Active),
    ];

    /// Whether the field is a cumulative INT64 counter of cycles or ticks (the SM and pipe
    /// cycle counters, the NVLink transmit wait): its blanks are DCGM's INT64 ones only (a
    /// counter passes 2^47, the FP64 blank, within minutes of boot).
    #[must_use]
    pub const fn is_cycle_counter(self) -> bool {
        matches!(
            self,
            Field::NvlinkTxWaitTotal
                | Field::SmCyclesElapsed
                | Field::SmCyclesActive
                | Field::MmaCyclesActive
                | Field::HmmaCyclesActive
                | Field::ImmaCyclesActive
                | Field::Fp64CyclesActive
                | Field::Fp32CyclesActive
                | Field::Fp16CyclesActive
        )
    }

    /// Whether the field is one of DCGM's INT64 counters, whose blanks are the INT64 ones
    /// alone: the cycle counters, the ECC error totals and the violation times (in
    /// nanoseconds, past 2^47 after 39 hours of capping).
    #[must_use]
    pub const fn is_int64_counter(self) -> bool {
        self.is_cycle_counter()
            || matches!(
                self,
                Field::EccSbeVolatile
                    | Field::EccDbeVolatile
                    | Field::EccDbeAggregate
                    | Field::PowerViolationNs
                    | Field::ThermalViolationNs
                    | Field::ClockEventSwPowerCapNs
                    | Field::ClockEventSyncBoostNs
                    | Field::ClockEventSwThermalNs
                    | Field::ClockEventHwThermalNs
                    | Field::ClockEventHwPowerBrakeNs
            )
    }

    /// Whether the field is a health level: a code or a flag whose non-zero value says
    /// something is wrong (the last XID, a fatal XID and the XIDs counted in the source's
    /// window, row remap pending, failed and rows, unrepairable memory, the recovery action,
    /// the fabric's health summary). A summary of several readings keeps their largest, so
    /// that one unhealthy reading is never averaged away.
    #[must_use]
    pub const fn is_health_level(self) -> bool {
        matches!(
            self,
            Field::XidLast
                | Field::XidWindowErrors
                | Field::XidWindowFatal
                | Field::RowRemapPending
                | Field::RowRemapFailed
                | Field::RowRemapUncorrectable
                | Field::MemoryUnrepairable
                | Field::RecoveryAction
                | Field::FabricHealthSummary
        )
    }

    /// Whether a reading of this fraction a little above 1 is clamped to 1 rather than
    /// refused: SM active and graphics-engine active, which DCGM normalizes to a MIG
    /// instance's GPCs and has been seen to report above 100 % there (counter-science.md
    /// §3.2: clamp and flag); and the ratios truthscale forms from two counters read at
    /// slightly different times (the holder pods' cgroup ratios, the straggler gaps). Any
    /// other fraction above 1 (a pipe active on more than every cycle, a busy flag over
    /// 100 %) is impossible: blank.
    #[must_use]
    pub const fn clamps_above_one(self) -> bool {
        matches!(
            self,
            Field::GrActive
                | Field::SmActive
                | Field::HolderCpuThrottledRatio
                | Field::HolderCpuWaitingRatio
                | Field::HolderIoWaitingRatio
                | Field::HolderIoStalledRatio
                | Field::HolderMemoryStalledRatio
                | Field::StragglerClockGap
                | Field::StragglerComputeGap
                | Field::StragglerWaitGap
        )
    }

    /// Whether the field is a 0..1 fraction.
    #[must_use]
    pub const fn is_ratio(self) -> bool {
        self.clamps_above_one()
            || matches!(
                self,
                Field::ReportedUtil
                    | Field::SmOccupancy
                    | Field::TensorActive
                    | Field::HmmaActive
                    | Field::ImmaActive
                    | Field::DramActive
                    | Field::Fp16Active
                    | Field::Fp32Active
                    | Field::Fp64Active
            )
    }
}

/// One reading per [`Field`]: each field's value where it has one, and which fields have a
/// value and which are unsupported, one bit each (a row of a capture fills a few of its 63
/// fields: sanitizing, copying and clearing touch only those). A blank is both bits clear:
/// clearing writes no value, and a value left where a field is blank is never read.
#[derive(Clone, Copy)]
pub struct Readings {
    values: [f64; Field::COUNT],
    /// Bit `i` set: field `i` is [`Reading::Value`] (`values[i]`).
    valued: u64,
    /// Bit `i` set: field `i` is [`Reading::Unsupported`] (never with its `valued` bit).
    unsupported: u64,
}

// One bit a field.
const _: () = assert!(Field::COUNT <= 64);

impl Default for Readings {
    /// Every field blank.
    fn default() -> Self {
        Readings {
            values: [0.0; Field::COUNT],
            valued: 0,
            unsupported: 0,
        }
    }
}

impl PartialEq for Readings {
    /// The same reading in every field (the values compared as `f64`: NaN is never equal).
    fn eq(&self, other: &Readings) -> bool {
        self.valued == other.valued
            && self.unsupported == other.unsupported
            && Bits(self.valued).all(|i| self.values[i] == other.values[i])
    }
}

impl std::fmt::Debug for Readings {
    /// The fields that are not blank, with their readings.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.filled().map(|i| (Field::ALL[i], self.reading_at(i))))
            .finish()
    }
}

impl Readings {
    /// The reading of field `i` (its index in [`Field::ALL`]).
    #[inline]
    fn reading_at(&self, i: usize) -> Reading {
        if self.valued >> i & 1 != 0 {
            Reading::Value(self.values[i])
        } else if self.unsupported >> i & 1 != 0 {
            Reading::Unsupported
        } else {
            Reading::Blank
        }
    }

    /// The reading of `field`.
    #[must_use]
    #[inline]
    pub fn get(&self, field: Field) -> Reading {
        self.reading_at(field as usize)
    }

    /// The value of `field`, if it has one.
    #[must_use]
    #[inline]
    pub fn value(&self, field: Field) -> Option<f64> {
        self.value_at(field as usize)
    }

    /// The value of field `i` (its index in [`Field::ALL`]), if it has one.
    #[must_use]
    #[inline]
    pub fn value_at(&self, i: usize) -> Option<f64> {
        (self.valued >> i & 1 != 0).then(|| self.values[i])
    }

    /// Set the reading of `field`.
    #[inline]
    pub fn set(&mut self, field: Field, reading: Reading) {
        let i = field as usize;
        let bit = 1 << i;
        match reading {
            Reading::Value(v) => {
                self.values[i] = v;
                self.valued |= bit;
                self.unsupported &= !bit;
            }
            Reading::Unsupported => {
                self.valued &= !bit;
                self.unsupported |= bit;
            }
            Reading::Blank => {
                self.valued &= !bit;
                self.unsupported &= !bit;
            }
        }
    }

    /// Set `field` to a value.
    #[inline]
    pub fn set_value(&mut self, field: Field, value: f64) {
        self.set(field, Reading::Value(value));
    }

    /// The value of `field`, NaN where it has none.
    #[must_use]
    #[inline]
    pub fn value_or_nan(&self, field: Field) -> f64 {
        let i = field as usize;
        if self.valued >> i & 1 != 0 {
            self.values[i]
        } else {
            f64::NAN
        }
    }

    /// Set field `fields[k]` (its index in [`Field::ALL`]) to `values[k]` for each `k` whose
    /// value is not NaN, in order: the same as [`Readings::set_value`] for each. An index
    /// of [`Field::COUNT`] or more is no field, and its value is not read. Returns the
    /// fields set, one bit each.
    #[inline]
    pub fn set_values(&mut self, fields: &[u8], values: &[f64]) -> u64 {
        let mut set = 0;
        for (&f, &v) in fields.iter().zip(values) {
            let i = usize::from(f);
            if i < Field::COUNT && !v.is_nan() {
                self.values[i] = v;
                set |= 1 << i;
            }
        }
        self.valued |= set;
        self.unsupported &= !set;
        set
    }

    /// Whether any field of `set` ([`Field::set_of`]) is not blank.
    #[must_use]
    #[inline]
    pub fn any_filled(&self, set: u64) -> bool {
        (self.valued | self.unsupported) & set != 0
    }

    /// The fields that are not blank, as indices into [`Field::ALL`] in order.
    pub fn filled(&self) -> impl Iterator<Item = usize> + use<> {
        Bits(self.valued | self.unsupported)
    }

    /// The fields that have a value, as indices into [`Field::ALL`] in order, with it.
    pub fn values(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.values_in(u64::MAX)
    }

    /// [`Readings::values`] of the fields in `set` ([`Field::set_of`]) alone.
    pub fn values_in(&self, set: u64) -> impl Iterator<Item = (usize, f64)> + '_ {
        Bits(self.valued & set).map(|i| (i, self.values[i]))
    }

    /// Take `other`'s readings of the fields in `set` ([`Field::set_of`]): values, blanks and
    /// unsupported alike, as [`Readings::set`] with each would; the other fields stay.
    pub fn copy_fields(&mut self, other: &Readings, set: u64) {
        for i in Bits(other.valued & set) {
            self.values[i] = other.values[i];
        }
        self.valued = (self.valued & !set) | (other.valued & set);
        self.unsupported = (self.unsupported & !set) | (other.unsupported & set);
    }

    /// Become `other`, copying only the values it has (the same as `*self = *other`).
    pub fn copy_from(&mut self, other: &Readings) {
        self.copy_from_within(other, &[f64::INFINITY; Field::COUNT]);
    }

    /// [`Readings::copy_from`], telling in the same pass whether any value copied lies
    /// outside `0..=max[i]` of its field `i` (NaN does).
    #[inline]
    pub fn copy_from_within(&mut self, other: &Readings, max: &[f64; Field::COUNT]) -> bool {
        let mut outside = false;
        for i in Bits(other.valued) {
            let v = other.values[i];
            self.values[i] = v;
            outside |= !(0.0 <= v && v <= max[i]);
        }
        self.valued = other.valued;
        self.unsupported = other.unsupported;
        outside
    }

    /// Make every field blank (no value is written).
    #[inline]
    pub fn clear(&mut self) {
        self.valued = 0;
        self.unsupported = 0;
    }

    /// Every reading, in the order of [`Field::ALL`] (built: the readings are held as values
    /// and masks).
    #[must_use]
    pub fn all(&self) -> [Reading; Field::COUNT] {
        std::array::from_fn(|i| self.reading_at(i))
    }

    /// Iterate over `(field, reading)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (Field, Reading)> + '_ {
        Field::ALL.iter().map(|&f| (f, self.get(f)))
    }
}

/// The set bits of a mask, lowest first.
struct Bits(u64);

impl Iterator for Bits {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let i = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(i)
    }
}

/// Clock-event ("throttle") reasons active during a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Throttles {
    /// Software power cap.
    pub sw_power_cap: bool,
    /// Hardware slowdown (thermal or power brake).
    pub hw_slowdown: bool,
    /// Thermal slowdown (software or hardware).
    pub thermal: bool,
    /// Sync boost.
    pub sync_boost: bool,
    /// Power brake or other power-related capping.
    pub power: bool,
}

impl Throttles {
    /// Decode NVML's clock-event reason bitmask (`nvmlClocksEventReason*`, the same bits
    /// DCGM reports as `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` and dmon as `CLKRS`): 0x4
    /// software power cap, 0x8 hardware slowdown, 0x10 sync boost, 0x20 and 0x40 software
    /// and hardware thermal slowdown, 0x80 hardware power brake. The one decoder of it.
    #[must_use]
    pub fn from_event_bits(bits: u64) -> Throttles {
        Throttles {
            sw_power_cap: bits & 0x4 != 0,
            hw_slowdown: bits & 0x8 != 0,
            sync_boost: bits & 0x10 != 0,
            thermal: bits & 0x60 != 0,
            power: bits & 0x80 != 0,
        }
    }

    /// Whether any reason that costs compute throughput is set.
    #[must_use]
    pub fn capping(&self) -> bool {
        self.sw_power_cap || self.hw_slowdown || self.thermal || self.power
    }

    /// Set a reason by its trace name; returns false for an unknown name.
    pub fn set_by_name(&mut self, name: &str) -> bool {
        match name {
            "power" => self.power = true,
            "thermal" => self.thermal = true,
            "sync_boost" => self.sync_boost = true,
            "hw_slowdown" => self.hw_slowdown = true,
            "sw_power_cap" => self.sw_power_cap = true,
            _ => return false,
        }
        true
    }

    /// The names of the reasons that are set, in a fixed order.
    #[must_use]
    pub fn names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for (on, name) in [
            (self.power, "power"),
            (self.thermal, "thermal"),
            (self.sync_boost, "sync_boost"),
            (self.hw_slowdown, "hw_slowdown"),
            (self.sw_power_cap, "sw_power_cap"),
        ] {
            if on {
                v.push(name);
            }
        }
        v
    }
}

/// What the inference server in the pod reported for the same window.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct ServingSnapshot {
    /// Engine name (`vllm`, `sglang`, `tgi`).
    #[serde(default)]
    pub engine: Option<String>,
    /// KV-cache utilization (0..1).
    #[serde(default)]
    pub kv_cache_utilization: Option<f64>,
    /// Requests running.
    #[serde(default)]
    pub running_requests: Option<f64>,
    /// Requests queued.
    #[serde(default)]
    pub queued_requests: Option<f64>,
    /// Seconds requests spent queued.
    #[serde(default)]
    pub queue_seconds: Option<f64>,
    /// Prompt tokens per second.
    #[serde(default)]
    pub prompt_tokens_per_sec: Option<f64>,
    /// Output tokens per second.
    #[serde(default)]
    pub output_tokens_per_sec: Option<f64>,
    /// Current batch size.
    #[serde(default)]
    pub batch_size: Option<f64>,
    /// Maximum batch size.
    #[serde(default)]
    pub max_batch_size: Option<f64>,
    /// Engine steps (forward passes) per second, where the engine counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_per_sec: Option<f64>,
    /// Model FLOP utilization, `2·params·tokens/s ÷ peak` (see `assumptions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mfu: Option<f64>,
    /// Model bandwidth utilization, `weight bytes · steps/s ÷ peak bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mbu: Option<f64>,
    /// The assumptions MFU and MBU rest on (parameters, dtype, peak, GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assumptions: Option<String>,
    /// The engine's own FLOPs per second per GPU (vLLM's and SGLang's
    /// `estimated_flops_per_gpu_total`), where it exports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_flops_per_sec: Option<f64>,
    /// The engine's own bytes read plus written per second per GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_bytes_per_sec: Option<f64>,
    /// [`Self::engine_flops_per_sec`] over the GPU's datasheet peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_mfu: Option<f64>,
    /// [`Self::engine_bytes_per_sec`] over the GPU's DRAM bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_mbu: Option<f64>,
    /// What the engine-estimate ratios rest on (which peak).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_assumptions: Option<String>,
    /// Why there is no engine data (unreachable, not an engine, …); `None` when there is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absent_reason: Option<String>,
    /// The GPUs the engine's tokens are spread over (the GPUs its pod holds, tensor
    /// parallel), where known: a GPU's share of the tokens is the engine's over these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

/// The counter regime of a GPU window: what its counters say the work was bound by.
///
/// The names are counter words (`compute_bound`, `memory_bound`), true of any workload.
/// Where the workload is known to be LLM serving, [`Phase::serving_name`] gives the serving
/// words: compute-bound serving is prefill, memory-bound serving is decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Nothing resident.
    Idle,
    /// Compute-bound (right of the roofline ridge); prefill in LLM serving.
    ComputeBound,
    /// Memory-bound (left of the ridge); decode in LLM serving.
    MemoryBound,
    /// Both, or alternating within the window.
    Mixed,
    /// Busy flag on, but neither compute nor memory doing anything.
    Stalled,
    /// Busy, but neither pipe nor memory meaningfully used.
    Underloaded,
    /// Waiting on the interconnect: NVLink near its peak, or a straggler of its job to wait
    /// on ([`crate::stragglers`]), while the tensor pipes idle. Never idle, never busy.
    CommBound,
}

impl Phase {
    /// All regimes, in a fixed order.
    pub const ALL: [Phase; 7] = [
        Phase::Idle,
        Phase::ComputeBound,
        Phase::MemoryBound,
        Phase::Mixed,
        Phase::Stalled,
        Phase::Underloaded,
        Phase::CommBound,
    ];

    /// The regime's label value (`regime="…"`), the same for every workload.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::ComputeBound => "compute_bound",
            Phase::MemoryBound => "memory_bound",
            Phase::Mixed => "mixed",
            Phase::Stalled => "stalled",
            Phase::Underloaded => "underloaded",
            Phase::CommBound => "comm_bound",
        }
    }

    /// The LLM-serving phase name (`phase="…"`): `prefill` for compute-bound, `decode`
    /// for memory-bound, the regime name otherwise. Only for workloads known to be serving.
    #[must_use]
    pub fn serving_name(self) -> &'static str {
        match self {
            Phase::ComputeBound => "prefill",
            Phase::MemoryBound => "decode",
            p => p.as_str(),
        }
    }

    /// The name to show: the serving phase name where the workload is LLM serving, the
    /// regime name otherwise.
    #[must_use]
    pub fn name_for(self, llm_serving: bool) -> &'static str {
        if llm_serving {
            self.serving_name()
        } else {
            self.as_str()
        }
    }

    /// Parse a regime name, or a serving phase name (`prefill`, `decode`).
    #[must_use]
    pub fn from_name(s: &str) -> Option<Phase> {
        match s {
            "prefill" => Some(Phase::ComputeBound),
            "decode" => Some(Phase::MemoryBound),
            _ => Phase::ALL.into_iter().find(|p| p.as_str() == s),
        }
    }

    /// Index into [`Phase::ALL`].
    #[must_use]
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What a simulated GPU actually ran: the ground truth the classifier is scored against.
/// It comes from the simulator's own workload, never from the classifier's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// Nothing running.
    Idle,
    /// An LLM prefill (prompt) forward pass: large GEMMs.
    Prefill,
    /// An LLM decode step: every weight read once for a few tokens.
    Decode,
    /// A training step's forward and backward GEMMs.
    TrainingStep,
    /// A collective (all-reduce) on a few SMs, moving data over the interconnect.
    AllReduce,
    /// The input pipeline loading data; no kernel resident.
    DataLoading,
    /// One tiny kernel spinning on one SM.
    Spin,
}

impl Workload {
    /// All workloads, in a fixed order.
    pub const ALL: [Workload; 7] = [
        Workload::Idle,
        Workload::Prefill,
        Workload::Decode,
        Workload::TrainingStep,
        Workload::AllReduce,
        Workload::DataLoading,
        Workload::Spin,
    ];

    /// The trace name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Workload::Idle => "idle",
            Workload::Prefill => "prefill",
            Workload::Decode => "decode",
            Workload::TrainingStep => "training_step",
            Workload::AllReduce => "all_reduce",
            Workload::DataLoading => "data_loading",
            Workload::Spin => "spin",
        }
    }

    /// Parse a trace name.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.as_str() == s)
    }

    /// Index into [`Workload::ALL`].
    #[must_use]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The regime this work is, by what it does (not by its counters): GEMMs are
    /// compute-bound, a decode step is memory-bound, a collective moving data over the
    /// interconnect is comm-bound, a spin is a stall, no kernel is idle.
    #[must_use]
    pub fn regime(self) -> Phase {
        match self {
            Workload::Idle | Workload::DataLoading => Phase::Idle,
            Workload::Prefill | Workload::TrainingStep => Phase::ComputeBound,
            Workload::Decode => Phase::MemoryBound,
            Workload::AllReduce => Phase::CommBound,
            Workload::Spin => Phase::Stalled,
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The regime of a window from the time each workload ran in it: `Mixed` when
/// compute-bound and memory-bound work each took at least a quarter of the window (phase
/// alternation inside one window), else the regime that took most of the window.
#[must_use]
pub fn regime_of_shares(seconds: &[f64; 7]) -> Option<Phase> {
    let total: f64 = seconds.iter().sum();
    if total <= 0.0 {
        return None;
    }
    let mut by_regime = [0.0; Phase::ALL.len()];
    for w in Workload::ALL {
        by_regime[w.regime().index()] += seconds[w.index()];
    }
    let share = |p: Phase| by_regime[p.index()] / total;
    if share(Phase::ComputeBound) >= 0.25 && share(Phase::MemoryBound) >= 0.25 {
        return Some(Phase::Mixed);
    }
    Phase::ALL
        .into_iter()
        .max_by(|a, b| share(*a).total_cmp(&share(*b)))
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One process using a GPU (or MIG instance), as the driver lists it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProcessReading {
    /// Process id in the host's namespace, as decimal text (it is only ever a label).
    pub pid: String,
    /// GPU memory the process uses, in bytes.
    pub used_memory_bytes: Option<f64>,
    /// The process's SM busy fraction (time-based, like the busy flag), where available.
    pub sm_busy: Option<f64>,
    /// The pod UID from the process's cgroup, when visible.
    pub pod_uid: Option<String>,
    /// The container id from the process's cgroup, when visible.
    pub container_id: Option<String>,
    /// The pod the process was found to belong to (node mode), when found.
    pub pod: Option<PodRef>,
}

/// The workload behind a pod: its controller's kind and name (a ReplicaSet's pods are
/// named by their Deployment).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default, Hash, serde::Serialize)]
pub struct PodOwner {
    /// `Deployment`, `StatefulSet`, `Job`, `Notebook`, `InferenceService`, …
    pub kind: String,
    /// Its name, in the pod's namespace.
    pub name: String,
}

/// The pod label Kubeflow's notebook controller gives a Notebook's pods: the Notebook's
/// name. The controller runs each Notebook as a StatefulSet of the same name, with the
/// Notebook as its controller owner, and puts `notebook-name: <name>` (and
/// `statefulset: <name>`) on the pod template (kubeflow/kubeflow,
/// components/notebook-controller, `generateStatefulSet`).
pub const NOTEBOOK_NAME_LABEL: &str = "notebook-name";

impl PodOwner {
    /// The workload to name for a pod whose controller is `self` and whose
    /// [`NOTEBOOK_NAME_LABEL`] label is `notebook`: a StatefulSet whose name is that label's
    /// value is a Kubeflow Notebook's, so the Notebook (what stops it: scaling the
    /// StatefulSet alone, the notebook controller would scale it back); anything else
    /// unchanged. Both come with the pod, so no further request is needed.
    #[must_use]
    pub fn through_notebook(self, notebook: Option<&str>) -> PodOwner {
        match notebook {
            Some(n) if self.kind == "StatefulSet" && !n.is_empty() && self.name == n => PodOwner {
                kind: "Notebook".into(),
                name: self.name,
            },
            _ => self,
        }
    }
}

/// One container the kubelet gave a GPU or MIG instance to (node mode).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Holder {
    /// The pod, namespace and container.
    pub pod: PodRef,
    /// The resource it was allocated as (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, or
    /// `dra:<driver>` for a DRA claim).
    pub resource: String,
    /// The replica of a shared (time-sliced) GPU (`2` for `GPU-…::2`), when the id names one.
    pub replica: Option<String>,
    /// The allowlisted labels of the holder's pod (`node.pod_labels`), as Prometheus label
    /// names (`label_<key>`, [`crate::catalog::pod_label_name`]) with their values, in
    /// allowlist order. A label the pod does not have is left out, never written empty.
    pub labels: Vec<(&'static str, String)>,
    /// The pod's owner, from the API server (node mode with the pod reader on).
    pub owner: Option<PodOwner>,
}

/// Node mode: one pod's own CPU, I/O and memory pressure over the last tick, from its
/// cgroup v2 files: the pod that holds a GPU, named as its processes are (pod and
/// namespace; the files are the pod's, so no container). Each share is `None` where it was
/// not measured (a first read, a counter that went backwards, a file that could not be
/// read): never a zero nobody measured.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodPressure {
    /// The pod (its `container` always `None`).
    pub pod: PodRef,
    /// Of its CFS periods, the share throttled (`cpu.stat` `nr_throttled / nr_periods`).
    pub cpu_throttled_ratio: Option<f64>,
    /// Its CPU limit in CPUs (`cpu.max`; `None` where it is `max`).
    pub cpu_limit_cores: Option<f64>,
    /// The share of the tick some of its tasks waited for a CPU (`cpu.pressure` some).
    pub cpu_waiting_ratio: Option<f64>,
    /// The share of the tick some of its tasks waited on I/O (`io.pressure` some).
    pub io_waiting_ratio: Option<f64>,
    /// The share of the tick all of its tasks waited on I/O (`io.pressure` full).
    pub io_stalled_ratio: Option<f64>,
    /// The share of the tick all of its tasks waited on memory (`memory.pressure` full).
    pub memory_stalled_ratio: Option<f64>,
}

/// One entity's readings at one time.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EntitySample {
    /// Who.
    pub id: EntityId,
    /// What was read.
    pub readings: Readings,
    /// Clock-event reasons, when the source reports them.
    pub throttles: Option<Throttles>,
    /// The serving engine's view, when present.
    pub serving: Option<ServingSnapshot>,
    /// For simulated data: the regime of the work the simulator ran in the window, from
    /// the time each workload ran ([`regime_of_shares`]), never from the classifier.
    pub truth_phase: Option<Phase>,
    /// For simulated data: the workload that ran longest in the window.
    pub truth_workload: Option<Workload>,
    /// For simulated data: the true effective compute fraction of the window.
    pub truth_effective_compute: Option<f64>,
    /// Whether these readings come from a simulator rather than hardware.
    pub simulated: bool,
    /// Whether the SM clock is a reading at one instant (the window's end) rather than the
    /// window's mean. The deriver then uses the mean of the window's two end readings.
    pub sm_clock_is_point: bool,
    /// Whether the counters are held between the source's own collections (dcgm-exporter
    /// repeats its last collection until the next, up to 30 s): a first reading then has no
    /// known time, and the energy counter's deltas are paired with its own moves only. A
    /// source that reads its counters when sampled (NVML, the simulator) leaves it false.
    pub counters_held: bool,
    /// When the energy counter ([`Field::EnergyJoules`]) was read, where the source reads
    /// its entities one after another within a sample (NVML: GPU by GPU, a slow call
    /// delaying those after it); `None`: at the sample's `taken`. The counter's deltas are
    /// divided by the time between its own reads.
    pub energy_read_at: Option<Timestamp>,
    /// How many NVLink links' counters [`Field::NvlinkTxWaitTotal`] sums (0: not a sum of
    /// links). A source that leaves out a blank link's series (dcgm-exporter) sums fewer
    /// for that reading: a sum of another set of links is no move of the counter.
    pub nvlink_wait_links: u16,
    /// Processes on this entity, when the source lists them and per-process series are on.
    pub processes: Vec<ProcessReading>,
    /// Node mode: the containers the kubelet allocated this entity to (empty: none, idle
    /// capacity); `None` where that is not known (sidecar mode, or the kubelet unread).
    pub allocation: Option<Vec<Holder>>,
    /// The job of a straggler, or of a GPU that waits on one ([`crate::stragglers`]);
    /// `None` for any other GPU.
    pub job: Option<String>,
    /// Node mode: the own pressure of each pod holding this entity whose processes name it
    /// (empty: none measured, or not node mode). The entity's `Holder*` readings are the
    /// worst of all its pods.
    pub holder_pressure: Vec<PodPressure>,
}

/// A timestamp plus per-entity readings.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sample {
    /// When the readings were taken (end of the window they describe).
    pub taken: Timestamp,
    /// The entities read.
    pub entities: Vec<EntitySample>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `copy_fields` is `set` of each field in the set, and leaves the others: a value, a
    /// blank over a value, and an unsupported field copied; a field outside the set kept.
    #[test]
    fn copy_fields_is_set_of_each_field_in_the_set() {
        let mut from = Readings::default();
        from.set_value(Field::SmClockMhz, 1410.0);
        from.set(Field::MemClockMhz, Reading::Unsupported);
        from.set_value(Field::PowerWatts, 300.0);
        let mut to = Readings::default();
        to.set_value(Field::TempCelsius, 40.0);
        to.set_value(Field::XidLast, 79.0);
        let mut by_hand = to;
        let set = Field::set_of(&[Field::SmClockMhz, Field::MemClockMhz, Field::XidLast]);
        for f in [Field::SmClockMhz, Field::MemClockMhz, Field::XidLast] {
            by_hand.set(f, from.get(f));
        }
        to.copy_fields(&from, set);
        for &f in Field::ALL {
            assert_eq!(to.get(f), by_hand.get(f), "{f:?}");
        }
        assert_eq!(to.get(Field::SmClockMhz), Reading::Value(1410.0));
        assert_eq!(to.get(Field::MemClockMhz), Reading::Unsupported);
        assert_eq!(to.get(Field::XidLast), Reading::Blank);
        assert_eq!(to.get(Field::PowerWatts), Reading::Blank);
        assert_eq!(to.get(Field::TempCelsius), Reading::Value(40.0));
    }

    /// An entity is named with its node where it has one: two nodes' GPU 0 are told apart
    /// in `analyze`, `explain`, `top` and the diagnostics.
    #[test]
    fn an_entity_is_named_with_its_node() {
        let mut id = EntityId {
            gpu: Some(0),
            ..EntityId::default()
        };
        assert_eq!(id.to_string(), "gpu 0");
        id.node = Some("node-a".into());
        id.pod = Some(PodRef {
            pod: "llm".into(),
            namespace: Some("prod".into()),
            container: None,
        });
        assert_eq!(id.to_string(), "gpu 0 on node-a (prod/llm)");
        let other = EntityId {
            node: Some("node-b".into()),
            ..id.clone()
        };
        assert_ne!(other.to_string(), id.to_string());
    }

    /// A readings value written field by field, the way the parsers write one.
    fn random_readings(next: &mut impl FnMut(usize) -> usize) -> Readings {
        let mut r = Readings::default();
        for _ in 0..next(12) {
            let f = Field::ALL[next(Field::COUNT)];
            let reading = match next(4) {
                0 => Reading::Blank,
                1 => Reading::Unsupported,
                _ => Reading::Value(next(1000) as f64 / 7.0),
            };
            r.set(f, reading);
        }
        r
    }

    /// The filled fields are exactly those not blank, however they were written; copying
    /// the filled fields gives the whole copy, and clearing them the blank readings.
    #[test]
    fn filled_fields_copy_and_clear_as_the_whole() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(35);
        let mut next = |n: usize| rng.random_range(0..n);
        for _ in 0..5_000 {
            let a = random_readings(&mut next);
            let b = random_readings(&mut next);
            let filled: Vec<usize> = a.filled().collect();
            let not_blank: Vec<usize> = (0..Field::COUNT)
                .filter(|&i| a.get(Field::ALL[i]) != Reading::Blank)
                .collect();
            assert_eq!(filled, not_blank);
            for &f in Field::ALL {
                let v = a.value(f).unwrap_or(f64::NAN);
                assert_eq!(a.value_or_nan(f).to_bits(), v.to_bits(), "{f:?}");
            }
            let mut c = b;
            c.copy_from(&a);
            assert_eq!(c, a);
            let readings = |r: &Readings| r.iter().collect::<Vec<_>>();
            assert_eq!(readings(&c), readings(&a));
            assert_eq!(c.all(), a.all());
            c.clear();
            assert_eq!(c, Readings::default());
            assert!(readings(&c).iter().all(|(_, r)| *r == Reading::Blank));
        }
    }

    /// A row written in one step is the row written value by value, over any readings:
    /// NaN skipped, an index past the fields not read, a field twice the last value.
    #[test]
    fn set_values_is_set_value_for_each() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(36);
        let mut next = |n: usize| rng.random_range(0..n);
        let mut written = [0_usize; 3];
        for _ in 0..5_000 {
            let before = random_readings(&mut next);
            let n = next(16);
            let fields: Vec<u8> = (0..n)
                .map(|_| u8::try_from(next(Field::COUNT + 4)).unwrap_or(u8::MAX))
                .collect();
            let values: Vec<f64> = (0..n)
                .map(|_| match next(4) {
                    0 => f64::NAN,
                    1 => -0.0,
                    _ => next(1000) as f64 / 3.0,
                })
                .collect();
            let mut one_step = before;
            one_step.set_values(&fields, &values);
            let mut each = before;
            for (&f, &v) in fields.iter().zip(&values) {
                let Some(&field) = Field::ALL.get(usize::from(f)) else {
                    written[0] += 1;
                    continue;
                };
                if v.is_nan() {
                    written[1] += 1;
                } else {
                    each.set_value(field, v);
                    written[2] += 1;
                }
            }
            assert_eq!(format!("{one_step:?}"), format!("{each:?}"));
            assert_eq!(one_step, each);
        }
        // Every kind of column came up often.
        assert!(written.iter().all(|&k| k > 1_000), "{written:?}");
    }
}
