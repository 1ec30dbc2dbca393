//! dcgm-exporter `/metrics` text (Prometheus exposition format).
//!
//! Every label and naming convention dcgm-exporter has used is read: `UUID`/`uuid`,
//! `modelName`/`model_name`, `Hostname`/`hostname` (the node), `pci_bus_id`,
//! `GPU_I_ID`/`GPU_I_PROFILE` (MIG), `pod`/`namespace`/`container` and the old
//! `pod_name`/`pod_namespace`/`container_name`, where an empty value means "not
//! attributed". Metric names match case-insensitively, which covers the lowercase
//! `dcgm_fi_*` names of `--use-old-namespace`; the 1.x `dcgm_*` names are mapped too.
//! Unknown metrics are ignored.
//!
//! Several scrapes may follow one another: a new sample begins when a series (metric name
//! and label set) already in the current one appears again. A scrape whose lines carry
//! exposition timestamps (milliseconds since the epoch) is stamped with them, as written:
//! a scrape's lines normally share one; when they differ, the latest, since the sample
//! describes the window ending then. Scrape `k` of a capture without timestamps is stamped
//! `start + k * interval`. In a mixed capture a scrape without a timestamp is stamped
//! `n * interval` after the last one, `n` scrapes before, that had a timestamp (from `start`
//! before any had), so made-up stamps continue from real ones and never run back from them;
//! real stamps are never altered, and one earlier than the stamp before it reaches the
//! analysis as written, which reports non-increasing time.
//! [`DcgmTextParser::timestamped`] tells whether the samples carried their own timestamps.
//! Blank lines and `#` lines (`HELP`, `TYPE`, comments) are skipped and counted. `NaN`/`Inf`
//! and DCGM's sentinel values become [`Reading::Blank`](crate::model::Reading::Blank).
//!
//! A reader of a peer it does not trust (the live dcgm-exporter source) sets [`Limits`]:
//! a line with a label value over the byte cap or more labels than the cap, and every line
//! of an entity past the entity cap, is left out and counted in [`Refused`], so that what is
//! kept, and its memory, is bounded by the caps and not by the size of the answer.

use super::ParseError;
use super::dmon::{Acc, Taken, Target, Unit, dcgm_value, error, nth_time};
use super::names::{Scale, Units, Unread};
use super::prom_text;
use crate::model::{EntityId, EntityKey, EntitySample, Field, MigId, PodRef, Sample, Timestamp};
use std::collections::{HashMap, HashSet};

use Target::Field as F;

/// Lowercase metric names, every generation in one table: dcgm-exporter 1.x (`dcgm_*`),
/// 2.x–4.8 (DCGM's legacy `DCGM_FI_*` names), 4.9 (DCGM 4.7's canonical names, base units)
/// and 4.10 (`…_BYTES_PER_SECOND`), and DCGM 4.6's cumulative counters. Each name carries
/// its unit; a name that does not prove it (`DCGM_FI_DEV_GPU_UTIL_RATIO`: percent under
/// DCGM 4.6, a 0..1 ratio from dcgm-exporter 4.9) is decided per source
/// ([`super::names`]). `docs/dcgm-compatibility.md` lists them by generation with their
/// sources. `DCGM_FI_DEV_MEM_COPY_UTIL` / `dcgm_mem_copy_utilization` are memory-copy
/// utilization, not DRAM bandwidth, and are deliberately absent.
#[rustfmt::skip]
const METRICS: &[(&str, Target)] = &[
    // Legacy names (dcgm-exporter 2.x-4.8) and the 1.x ones.
    ("dcgm_fi_dev_gpu_util",                 F(Field::ReportedUtil, Unit::Percent)),
    ("dcgm_gpu_utilization",                 F(Field::ReportedUtil, Unit::Percent)),
    ("dcgm_fi_prof_gr_engine_active",        F(Field::GrActive, Unit::Same)),
    ("dcgm_fi_prof_sm_active",               F(Field::SmActive, Unit::Same)),
    ("dcgm_fi_prof_sm_occupancy",            F(Field::SmOccupancy, Unit::Same)),
    ("dcgm_fi_prof_pipe_tensor_active",      F(Field::TensorActive, Unit::Same)),
    ("dcgm_fi_prof_pipe_tensor_hmma_active", F(Field::HmmaActive, Unit::Same)),
    ("dcgm_fi_prof_pipe_tensor_imma_active", F(Field::ImmaActive, Unit::Same)),
    ("dcgm_fi_prof_dram_active",             F(Field::DramActive, Unit::Same)),
    ("dcgm_fi_prof_pipe_fp16_active",        F(Field::Fp16Active, Unit::Same)),
    ("dcgm_fi_prof_pipe_fp32_active",        F(Field::Fp32Active, Unit::Same)),
    ("dcgm_fi_prof_pipe_fp64_active",        F(Field::Fp64Active, Unit::Same)),
    ("dcgm_fi_dev_sm_clock",                 F(Field::SmClockMhz, Unit::Same)),
    ("dcgm_sm_clock",                        F(Field::SmClockMhz, Unit::Same)),
    ("dcgm_fi_dev_mem_clock",                F(Field::MemClockMhz, Unit::Same)),
    ("dcgm_memory_clock",                    F(Field::MemClockMhz, Unit::Same)),
    ("dcgm_fi_dev_power_usage",              F(Field::PowerWatts, Unit::Same)),
    ("dcgm_power_usage",                     F(Field::PowerWatts, Unit::Same)),
    ("dcgm_fi_dev_enforced_power_limit",     F(Field::PowerLimitWatts, Unit::Same)),
    ("dcgm_fi_dev_power_mgmt_limit",         Target::WeakPowerLimit),
    ("dcgm_fi_dev_total_energy_consumption", F(Field::EnergyJoules, Unit::Milli)),
    ("dcgm_total_energy_consumption",        F(Field::EnergyJoules, Unit::Milli)),
    ("dcgm_fi_dev_fb_used",                  F(Field::MemUsedBytes, Unit::Mib)),
    ("dcgm_fb_used",                         F(Field::MemUsedBytes, Unit::Mib)),
    ("dcgm_fi_dev_fb_total",                 F(Field::MemTotalBytes, Unit::Mib)),
    ("dcgm_fi_dev_fb_free",                  Target::FbFree(Unit::Mib)),
    ("dcgm_fb_free",                         Target::FbFree(Unit::Mib)),
    ("dcgm_fi_dev_fb_reserved",              Target::FbReserved(Unit::Mib)),
    ("dcgm_fi_prof_pcie_tx_bytes",           F(Field::PcieTxBytesPerSec, Unit::Same)),
    ("dcgm_fi_prof_pcie_rx_bytes",           F(Field::PcieRxBytesPerSec, Unit::Same)),
    ("dcgm_fi_prof_nvlink_tx_bytes",         F(Field::NvlinkTxBytesPerSec, Unit::Same)),
    ("dcgm_fi_dev_nvlink_ppcnt_ibpc_tx_wait_total", Target::LinkSum(Field::NvlinkTxWaitTotal)),
    ("dcgm_fi_dev_nvlink_ppcnt_ibpc_port_xmit_wait", Target::LinkSum(Field::NvlinkTxWaitTotal)),
    ("dcgm_fi_prof_nvlink_rx_bytes",         F(Field::NvlinkRxBytesPerSec, Unit::Same)),
    // The PCIe link now (fields 237, 238): one name in every generation (DCGM 4.7 kept it).
    ("dcgm_fi_dev_pcie_link_gen",            F(Field::PcieLinkGen, Unit::Same)),
    ("dcgm_fi_dev_pcie_link_width",          F(Field::PcieLinkWidth, Unit::Same)),
    ("dcgm_fi_dev_gpu_temp",                 F(Field::TempCelsius, Unit::Same)),
    ("dcgm_gpu_temp",                        F(Field::TempCelsius, Unit::Same)),
    ("dcgm_fi_dev_clock_throttle_reasons",   Target::Throttles),
    ("dcgm_fi_dev_clocks_event_reasons",     Target::Throttles),
    // DCGM 4.6 canonical names (same ids and units as the legacy ones) and the DCGM 4.7
    // base-unit fields (new ids 1600-1612), as dcgm-exporter 4.9 emits them.
    ("dcgm_fi_dev_gpu_util_ratio",           F(Field::ReportedUtil, Unit::PercentOrRatio)),
    ("dcgm_fi_prof_gr_engine_util_ratio",    F(Field::GrActive, Unit::Same)),
    ("dcgm_fi_prof_sm_util_ratio",           F(Field::SmActive, Unit::Same)),
    ("dcgm_fi_prof_sm_occupancy_ratio",      F(Field::SmOccupancy, Unit::Same)),
    ("dcgm_fi_prof_tensor_util_ratio",       F(Field::TensorActive, Unit::Same)),
    ("dcgm_fi_prof_hmma_util_ratio",         F(Field::HmmaActive, Unit::Same)),
    ("dcgm_fi_prof_imma_util_ratio",         F(Field::ImmaActive, Unit::Same)),
    ("dcgm_fi_prof_dram_util_ratio",         F(Field::DramActive, Unit::Same)),
    ("dcgm_fi_prof_fp16_util_ratio",         F(Field::Fp16Active, Unit::Same)),
    ("dcgm_fi_prof_fp32_util_ratio",         F(Field::Fp32Active, Unit::Same)),
    ("dcgm_fi_prof_fp64_util_ratio",         F(Field::Fp64Active, Unit::Same)),
    ("dcgm_fi_dev_sm_clock_hertz",           F(Field::SmClockMhz, Unit::Hertz)),
    ("dcgm_fi_dev_memory_clock_hertz",       F(Field::MemClockMhz, Unit::Hertz)),
    ("dcgm_fi_dev_board_power_watts",        F(Field::PowerWatts, Unit::Same)),
    ("dcgm_fi_dev_board_power_limit_enforced_watts", F(Field::PowerLimitWatts, Unit::Same)),
    ("dcgm_fi_dev_board_power_limit_requested_watts", Target::WeakPowerLimit),
    ("dcgm_fi_dev_gpu_energy_joules_total",  F(Field::EnergyJoules, Unit::Same)),
    // Framebuffer in bytes: `FB_CAPACITY_BYTES` is collected by default from 4.9.0; the
    // used/free/total bytes names are read where they appear (unverified, see the docs).
    ("dcgm_fi_dev_fb_capacity_bytes",        F(Field::MemTotalBytes, Unit::Same)),
    ("dcgm_fi_dev_fb_total_bytes",           F(Field::MemTotalBytes, Unit::Same)),
    ("dcgm_fi_dev_fb_used_bytes",            F(Field::MemUsedBytes, Unit::Same)),
    ("dcgm_fi_dev_fb_free_bytes",            Target::FbFree(Unit::Same)),
    ("dcgm_fi_dev_fb_reserved_bytes",        Target::FbReserved(Unit::Same)),
    ("dcgm_fi_dev_gpu_temp_celsius",         F(Field::TempCelsius, Unit::Same)),
    // dcgm-exporter 4.10 (DCGM 4.8): the PCIe and NVLink rates, still bytes per second.
    ("dcgm_fi_prof_pcie_tx_bytes_per_second",   F(Field::PcieTxBytesPerSec, Unit::Same)),
    ("dcgm_fi_prof_pcie_rx_bytes_per_second",   F(Field::PcieRxBytesPerSec, Unit::Same)),
    ("dcgm_fi_prof_nvlink_tx_bytes_per_second", F(Field::NvlinkTxBytesPerSec, Unit::Same)),
    ("dcgm_fi_prof_nvlink_rx_bytes_per_second", F(Field::NvlinkRxBytesPerSec, Unit::Same)),
    // Health: the last XID (230), ECC totals (310, 311, 313), row remapping (393, 395,
    // 396), unrepairable memory (1507), the recovery action (1523), the fabric's health
    // summary (175), the violation times (240, 241) and the clock-event reasons' times
    // (1420-1424), under the legacy names and DCGM 4.6's canonical ones where they differ;
    // and dcgm-exporter's own count of each XID in its window.
    ("dcgm_fi_dev_xid_errors",               F(Field::XidLast, Unit::Same)),
    ("dcgm_fi_dev_xid_error",                F(Field::XidLast, Unit::Same)),
    ("dcgm_fi_dev_ecc_sbe_vol_total",        F(Field::EccSbeVolatile, Unit::Count)),
    ("dcgm_fi_dev_ecc_dbe_vol_total",        F(Field::EccDbeVolatile, Unit::Count)),
    ("dcgm_fi_dev_ecc_dbe_agg_total",        F(Field::EccDbeAggregate, Unit::Count)),
    ("dcgm_fi_dev_uncorrectable_remapped_rows",  F(Field::RowRemapUncorrectable, Unit::Same)),
    ("dcgm_fi_dev_row_remap_uncorrectable_total", F(Field::RowRemapUncorrectable, Unit::Same)),
    ("dcgm_fi_dev_row_remap_failure",        F(Field::RowRemapFailed, Unit::Same)),
    ("dcgm_fi_dev_row_remap_failed",         F(Field::RowRemapFailed, Unit::Same)),
    ("dcgm_fi_dev_row_remap_pending",        F(Field::RowRemapPending, Unit::Same)),
    ("dcgm_fi_dev_get_gpu_recovery_action",  F(Field::RecoveryAction, Unit::Same)),
    ("dcgm_fi_dev_gpu_recovery_action",      F(Field::RecoveryAction, Unit::Same)),
    ("dcgm_fi_dev_power_violation",          F(Field::PowerViolationNs, Unit::Count)),
    ("dcgm_fi_dev_thermal_violation",        F(Field::ThermalViolationNs, Unit::Count)),
    ("dcgm_fi_dev_memory_unrepairable_flag", F(Field::MemoryUnrepairable, Unit::Same)),
    ("dcgm_fi_dev_memory_unrepairable",      F(Field::MemoryUnrepairable, Unit::Same)),
    ("dcgm_fi_dev_fabric_health_summary",    F(Field::FabricHealthSummary, Unit::Same)),
    ("dcgm_fi_dev_clocks_event_reason_sw_power_cap_ns",  F(Field::ClockEventSwPowerCapNs, Unit::Count)),
    ("dcgm_fi_dev_clocks_event_reason_sync_boost_ns",    F(Field::ClockEventSyncBoostNs, Unit::Count)),
    ("dcgm_fi_dev_clocks_event_reason_sw_therm_slowdown_ns", F(Field::ClockEventSwThermalNs, Unit::Count)),
    ("dcgm_fi_dev_clocks_event_reason_hw_therm_slowdown_ns", F(Field::ClockEventHwThermalNs, Unit::Count)),
    ("dcgm_fi_dev_clocks_event_reason_hw_power_brake_slowdown_ns", F(Field::ClockEventHwPowerBrakeNs, Unit::Count)),
    ("dcgm_exp_xid_errors_count",            Target::XidCount),
    // DCGM 4.6 cumulative counters (fields 1084-1096, INT64, since boot).
    ("dcgm_fi_prof_sm_cycles_elapsed_total",   F(Field::SmCyclesElapsed, Unit::Count)),
    ("dcgm_fi_prof_sm_cycles_active_total",    F(Field::SmCyclesActive, Unit::Count)),
    ("dcgm_fi_prof_mma_cycles_active_total",   F(Field::MmaCyclesActive, Unit::Count)),
    ("dcgm_fi_prof_hmma_cycles_active_total",  F(Field::HmmaCyclesActive, Unit::Count)),
    ("dcgm_fi_prof_imma_cycles_active_total",  F(Field::ImmaCyclesActive, Unit::Count)),
    ("dcgm_fi_prof_fp64_cycles_active_total",  F(Field::Fp64CyclesActive, Unit::Count)),
    ("dcgm_fi_prof_fp32_cycles_active_total",  F(Field::Fp32CyclesActive, Unit::Count)),
    ("dcgm_fi_prof_fp16_cycles_active_total",  F(Field::Fp16CyclesActive, Unit::Count)),
];

/// The most one scrape keeps (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entities per scrape.
    pub max_entities: usize,
    /// Bytes of one label value.
    pub max_label_bytes: usize,
    /// Labels of one line.
    pub max_labels: usize,
}

impl Limits {
    /// No caps: for inputs the user chose (a capture file, their own Prometheus).
    pub const NONE: Limits = Limits {
        max_entities: usize::MAX,
        max_label_bytes: usize::MAX,
        max_labels: usize::MAX,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::NONE
    }
}

/// Lines left out by the [`Limits`], by cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refused {
    /// Lines of entities past the entity cap.
    pub entities: u64,
    /// Lines with a label value over the byte cap.
    pub long_values: u64,
    /// Lines with more labels than the cap.
    pub label_sets: u64,
    /// Lines of a one-answer parser ([`DcgmTextParser::one_answer`]) repeating a series the
    /// answer already gave: the first reading is kept.
    pub repeated: u64,
}

impl Refused {
    /// Whether nothing was left out.
    #[must_use]
    pub fn none(&self) -> bool {
        *self == Refused::default()
    }
}

/// A series' identity: its lowercase name and its labels, sorted.
fn series_key<K: AsRef<str> + Ord, V: AsRef<str> + Ord>(name: &str, labels: &[(K, V)]) -> String {
    let mut sorted: Vec<_> = labels.iter().collect();
    sorted.sort();
    let mut series = name.to_owned();
    for (k, v) in sorted {
        series.push_str("\0{");
        series.push_str(k.as_ref());
        series.push('\0');
        series.push_str(v.as_ref());
    }
    series
}

/// Line-at-a-time parser for dcgm-exporter text.
#[derive(Debug)]
pub struct DcgmTextParser {
    file: String,
    interval_secs: f64,
    line: usize,
    skipped: u64,
    scrapes: u64,
    /// Series (lowercase name + sorted labels) of the current scrape's kept entities.
    seen: HashSet<String>,
    scrape: Scrape,
    /// The latest exposition timestamp (ms) of the current scrape's lines.
    scrape_ms: Option<i64>,
    /// The distinct exposition timestamps of the current scrape's lines (a few at most are
    /// kept: more is a scrape of mixed timestamps).
    scrape_stamps: Vec<i64>,
    /// Whether every scrape closed so far by a repeated series had one timestamp on all its
    /// lines before the repeat's (`None` before one closed): then a line of another
    /// timestamp starts the next scrape, even a series the scrape has not seen (a pod that
    /// came, a GPU missing once), which would otherwise join the scrape before it. A
    /// capture whose scrapes mix timestamps (a federation's targets) ends a scrape by a
    /// repeated series alone.
    uniform: Option<bool>,
    /// The time and index of the last scrape with a timestamp (`start`, 0 before any):
    /// what a scrape without one is stamped from.
    anchor: (Timestamp, u64),
    /// Whether a sample was stamped from its lines' timestamps.
    timestamped: bool,
    /// Whether the input is one answer ([`Self::one_answer`]): a repeated series is then
    /// counted and skipped, never the start of another scrape.
    one_answer: bool,
}

impl DcgmTextParser {
    /// A parser for the input named `file`. A scrape whose lines carry timestamps is stamped
    /// with them; scrape `k` of a capture without any is stamped `start + k * interval_secs`
    /// (see the [module docs](self) for a mixed capture).
    #[must_use]
    pub fn new(file: &str, interval_secs: f64, start: Timestamp) -> Self {
        DcgmTextParser {
            file: file.to_owned(),
            interval_secs,
            line: 0,
            skipped: 0,
            scrapes: 0,
            seen: HashSet::new(),
            scrape: Scrape::default(),
            scrape_ms: None,
            scrape_stamps: Vec::new(),
            uniform: None,
            anchor: (start, 0),
            timestamped: false,
            one_answer: false,
        }
    }

    /// This parser for one live answer, which is one scrape: a line repeating a series the
    /// answer already gave is counted ([`Refused::repeated`]) and skipped, the first reading
    /// kept; it never starts another scrape (which would keep a copy of every entity per
    /// repeat, and hand on the scrape before it as a sample of its own).
    #[must_use]
    pub fn one_answer(mut self) -> Self {
        self.one_answer = true;
        self
    }

    /// This parser with `limits` on each scrape.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.scrape.limits = limits;
        self
    }

    /// What was seen and not read so far ([`Scrape::unread`]).
    #[must_use]
    pub fn unread(&self) -> &Unread {
        self.scrape.unread()
    }

    /// This parser with the units already decided for the source's percent-or-ratio
    /// families (by an earlier parser of the same source, [`Self::take_units`]).
    #[must_use]
    pub fn with_units(mut self, units: Units) -> Self {
        self.scrape.units = units;
        self
    }

    /// The units decided so far, for the next parser of the same source; this parser's
    /// are then undecided.
    pub fn take_units(&mut self) -> Units {
        std::mem::take(&mut self.scrape.units)
    }

    /// What the limits left out so far.
    #[must_use]
    pub fn refused(&self) -> Refused {
        self.scrape.refused
    }

    /// Feed the next line (without its newline). Returns the previous scrape when this
    /// line starts a new one.
    ///
    /// # Errors
    /// A [`ParseError`] for a line that is not a valid sample line: no metric name, an
    /// unterminated label set, a bad escape, a missing or unparseable value. The parser is
    /// unchanged by a bad line and stays usable.
    pub fn push_line(&mut self, line: &str) -> Result<Option<Sample>, ParseError> {
        self.line += 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            if let Some((name, text)) = t
                .strip_prefix("# HELP ")
                .and_then(|h| h.trim_start().split_once(' '))
            {
                self.scrape.help(name, text);
            }
            self.skipped += 1;
            return Ok(None);
        }
        let prom_text::PromSample {
            name,
            labels,
            value,
            timestamp_ms,
        } = prom_text::parse_sample(t).map_err(|m| error(&self.file, self.line, m))?;
        let limits = self.scrape.limits;
        if labels.len() > limits.max_labels {
            self.scrape.refused.label_sets += 1;
            return Ok(None);
        }
        if labels.iter().any(|(_, v)| v.len() > limits.max_label_bytes) {
            self.scrape.refused.long_values += 1;
            return Ok(None);
        }
        let name = name.to_ascii_lowercase();
        if let Some(m) = self.scrape.bad_index(&name, &labels) {
            return Err(error(&self.file, self.line, m));
        }
        let series = series_key(&name, &labels);
        if self.one_answer && self.seen.contains(&series) {
            self.scrape.refused.repeated += 1;
            return Ok(None);
        }
        let moved = self.uniform == Some(true)
            && matches!((timestamp_ms, self.scrape_ms), (Some(t), Some(m)) if t != m);
        let done = if moved {
            self.end_scrape()
        } else if self.seen.contains(&series) {
            self.learn_uniform(timestamp_ms);
            self.end_scrape()
        } else {
            None
        };
        // `None` orders below any timestamp: the scrape keeps its latest.
        self.scrape_ms = self.scrape_ms.max(timestamp_ms);
        if let Some(t) = timestamp_ms
            && self.scrape_stamps.len() < 4
            && !self.scrape_stamps.contains(&t)
        {
            self.scrape_stamps.push(t);
        }
        let refused = self.scrape.refused.entities;
        self.scrape.push(&name, &labels, value);
        // Only the series of entities kept are remembered: an answer of entities past the
        // cap costs no memory per line (a kept entity's series repeating still ends the
        // scrape).
        if self.scrape.refused.entities == refused {
            self.seen.insert(series);
        }
        Ok(done)
    }

    /// End of input: the last scrape.
    pub fn finish(&mut self) -> Option<Sample> {
        if self.seen.is_empty() {
            None
        } else {
            self.end_scrape()
        }
    }

    /// Lines skipped as not data: blank lines and `#` lines.
    #[must_use]
    pub fn skipped_lines(&self) -> u64 {
        self.skipped
    }

    /// Whether the samples' times come from the lines' own exposition timestamps rather
    /// than from `start` and the interval: a scrape had one, whether it yielded a sample or
    /// only anchored the scrapes after it (whose stamps then count on from a real one, and
    /// may be earlier than a made-up stamp before it).
    #[must_use]
    pub fn timestamped(&self) -> bool {
        self.timestamped
    }

    /// What the scrape a repeated series of timestamp `closing` ends says of the capture:
    /// its lines before that timestamp all had one (a line of the closing timestamp or later
    /// belongs with the repeat, to the next scrape), or not.
    fn learn_uniform(&mut self, closing: Option<i64>) {
        let Some(closing) = closing else { return };
        let mut before = self.scrape_stamps.iter().filter(|t| **t < closing);
        let Some(first) = before.next() else { return };
        let one = self.scrape_stamps.len() < 4 && before.all(|t| t == first);
        self.uniform = Some(self.uniform.unwrap_or(true) && one);
    }

    /// Close the current scrape; one with no known metric yields no sample but still
    /// takes its time slot (and, with a timestamp, anchors the scrapes after it).
    fn end_scrape(&mut self) -> Option<Sample> {
        self.seen.clear();
        let k = self.scrapes;
        self.scrapes += 1;
        self.scrape_stamps.clear();
        let own = self.scrape_ms.take().map(Timestamp);
        let taken = own.unwrap_or_else(|| {
            let (at, j) = self.anchor;
            nth_time(at, k - j, self.interval_secs)
        });
        if own.is_some() {
            self.anchor = (taken, k);
            self.timestamped = true;
        }
        let entities = self.scrape.finish();
        (!entities.is_empty()).then_some(Sample { taken, entities })
    }
}

/// The metric names this parser maps (lowercase; matched case-insensitively), each with
/// the field it feeds. `None` is the clock-event reasons bitmask, which is not a field;
/// free and reserved framebuffer feed the total, an advisory power limit the power limit,
/// dcgm-exporter's XID counts the window's XID total (and the fatal XID counted).
pub fn mapped_metrics() -> impl Iterator<Item = (&'static str, Option<Field>)> {
    METRICS.iter().map(|(name, target)| {
        let field = match target {
            Target::Field(f, _) | Target::LinkSum(f) => Some(*f),
            Target::XidCount => Some(Field::XidWindowErrors),
            Target::FbFree(_) | Target::FbReserved(_) => Some(Field::MemTotalBytes),
            Target::WeakPowerLimit => Some(Field::PowerLimitWatts),
            Target::Throttles => None,
        };
        (*name, field)
    })
}

/// One scrape's values gathered into per-entity readings with this parser's mapping:
/// metric names (case-insensitive, old names too), units, sentinels, label conventions, and
/// the framebuffer total completed from used + free (+ reserved). The text parser fills one
/// per scrape; a reader of the same series from elsewhere (a Prometheus server's history)
/// fills one per timestamp.
///
/// ```
/// use truthscale_core::model::{Field, Reading};
/// use truthscale_core::parse::dcgm_text::Scrape;
/// let mut s = Scrape::default();
/// assert!(s.push("DCGM_FI_DEV_GPU_UTIL", &[("gpu", "0"), ("pod", "")], 91.0));
/// assert!(!s.push("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", &[("gpu", "0")], 0.0));
/// let e = s.finish();
/// assert_eq!(e[0].readings.get(Field::ReportedUtil), Reading::Value(0.91));
/// assert_eq!((e[0].id.gpu, &e[0].id.pod), (Some(0), &None));
/// ```
#[derive(Debug, Default)]
pub struct Scrape {
    /// The units decided for the families whose name does not prove it: kept from one
    /// scrape to the next, like the families left unread.
    units: Units,
    unread: Unread,
    /// The targets of the names seen so far (at most [`MAX_CACHED_NAMES`]): one hash
    /// lookup a reading, where the table holds every generation's names.
    targets: HashMap<String, Option<Target>>,
    entities: Vec<Acc>,
    /// Entities by key without the node: a line without a node label belongs to the entity
    /// of the same GPU, while the same GPU of another node is another entity.
    index: HashMap<EntityKey, Vec<usize>>,
    limits: Limits,
    refused: Refused,
}

impl Scrape {
    /// Add the value of series `name{labels}`. Returns false, and ignores the value, when
    /// the name is not one this parser maps.
    pub fn push<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        name: &str,
        labels: &[(K, V)],
        raw: f64,
    ) -> bool {
        let Some(target) = self.target(name) else {
            self.note_unread(name);
            return false;
        };
        let Some(target) = self.decide_unit(name, target, raw) else {
            return true;
        };
        let id = entity_of(labels);
        // An entity is keyed by its index or UUID: a PCI id or minor number alone would
        // key every such GPU as one.
        if id.gpu.is_none() && id.uuid.is_none() {
            self.unread.unnamed(&name.to_ascii_lowercase());
            return true;
        }
        let (key, found) = self.find(&id);
        let i = match found {
            Some(i) => i,
            // Past the cap a new entity is counted, and nothing of it is kept.
            None if self.entities.len() >= self.limits.max_entities => {
                self.refused.entities += 1;
                return true;
            }
            None => {
                let mut acc = Acc::new(id.clone());
                // dcgm-exporter repeats its last collection between collections.
                acc.sample.counters_held = true;
                self.entities.push(acc);
                let i = self.entities.len() - 1;
                self.index.entry(key).or_default().push(i);
                i
            }
        };
        if is_blank_value(name, raw) {
            self.unread.blank(&name.to_ascii_lowercase(), raw);
        }
        if let Some(acc) = self.entities.get_mut(i) {
            fill_attributes(&mut acc.sample.id, id);
            let taken = match target {
                Target::XidCount => acc.apply_part(target, label_u32(labels, "xid"), raw),
                Target::LinkSum(_) => acc.apply_part(target, link_of(labels), raw),
                _ => acc.apply_series(target, raw),
            };
            match taken {
                Taken::Read => {}
                Taken::Impossible => self.unread.impossible(&name.to_ascii_lowercase()),
                Taken::Disagrees(n) => {
                    for _ in 0..n {
                        self.unread.disagreeing(&name.to_ascii_lowercase());
                    }
                }
            }
        }
        true
    }

    /// Add `value` as `field` to the entity `labels` name, when a mapped series has already
    /// named it in this scrape: a reading from beside the exporter's own series (a Prometheus
    /// history's holder-pod signals, joined onto the GPU's series). Never creates an entity;
    /// returns whether the value was kept (a non-finite value stays blank).
    pub fn push_field<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        field: Field,
        labels: &[(K, V)],
        value: f64,
    ) -> bool {
        let Some(i) = self.find(&entity_of(labels)).1 else {
            return false;
        };
        if !value.is_finite() {
            return false;
        }
        // A field's value: never refused here (sanitizing judges it).
        let _ = self.entities[i].apply(Target::Field(field, Unit::Same), Some(value));
        true
    }

    /// The key of `id` without its node, and the entity of this scrape it is: the same key,
    /// and the same node where both name one.
    fn find(&self, id: &EntityId) -> (EntityKey, Option<usize>) {
        let key = EntityId {
            node: None,
            ..id.clone()
        }
        .key();
        let entities = &self.entities;
        let found = self.index.get(&key).and_then(|candidates| {
            candidates.iter().copied().find(|&i| {
                let node = &entities[i].sample.id.node;
                node.is_none() || id.node.is_none() || *node == id.node
            })
        });
        (key, found)
    }

    /// The `# HELP` text of family `name`: decides the unit of a family whose name does not
    /// prove it (see [`super::names`]). Other families' help is not kept.
    pub fn help(&mut self, name: &str, text: &str) {
        if is_percent_or_ratio(name) {
            self.units.help(name, text);
        }
    }

    /// What was seen and not read so far: DCGM families truthscale does not map, and
    /// readings refused for an ambiguous unit.
    #[must_use]
    pub fn unread(&self) -> &Unread {
        &self.unread
    }

    /// What was seen and not read so far, taken: the scrape starts counting again.
    pub fn take_unread(&mut self) -> Unread {
        std::mem::take(&mut self.unread)
    }

    /// Read on with `units` decided (a previous part of the same source's answers).
    pub fn set_units(&mut self, units: Units) {
        self.units = units;
    }

    /// The units decided so far, for the next part of the same source's answers; this
    /// scrape's are then undecided.
    pub fn take_units(&mut self) -> Units {
        std::mem::take(&mut self.units)
    }

    /// [`target_of`] `name`, remembered.
    #[inline]
    fn target(&mut self, name: &str) -> Option<Target> {
        if let Some(t) = self.targets.get(name) {
            return *t;
        }
        let t = target_of(name);
        if self.targets.len() < MAX_CACHED_NAMES {
            self.targets.insert(name.to_owned(), t);
        }
        t
    }

    /// Why a line of a family read (`name`) names no entity: a `gpu` or `GPU_I_ID` label
    /// that is no index, which would otherwise be read as absent, and the line as another
    /// entity's; `None` where it names one.
    fn bad_index<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        name: &str,
        labels: &[(K, V)],
    ) -> Option<String> {
        let (k, v) = labels.iter().find(|(k, v)| {
            let v = v.as_ref();
            matches!(k.as_ref(), "gpu" | "GPU_I_ID") && !v.is_empty() && v.parse::<u32>().is_err()
        })?;
        self.target(name)?;
        Some(format!(
            "label {}={:?} is not an index: the line names no GPU or instance",
            k.as_ref(),
            v.as_ref()
        ))
    }

    #[cold]
    fn note_unread(&mut self, name: &str) {
        self.unread.dcgm_family(name);
    }

    /// `target` with its unit decided for reading `raw` (see [`super::names`]); `None`:
    /// refused, and counted, as ambiguous.
    fn decide_unit(&mut self, name: &str, target: Target, raw: f64) -> Option<Target> {
        let Target::Field(field, Unit::PercentOrRatio) = target else {
            return Some(target);
        };
        // A blank is blank whatever the unit.
        let Some(v) = dcgm_value(raw) else {
            return Some(Target::Field(field, Unit::Same));
        };
        match self.units.resolve(name, v) {
            Some(Scale::Percent) => Some(Target::Field(field, Unit::Percent)),
            Some(Scale::Ratio) => Some(Target::Field(field, Unit::Same)),
            None => {
                self.unread.refuse(&name.to_ascii_lowercase());
                None
            }
        }
    }

    /// The entities read, in first-seen order; the scrape is empty afterwards.
    pub fn finish(&mut self) -> Vec<EntitySample> {
        self.index.clear();
        self.entities.drain(..).map(Acc::finish).collect()
    }
}

/// Whether the unit of metric `name` (any case) is not proven by its name: a percent or a
/// 0..1 ratio, decided from its help text or its values ([`super::names`]).
#[must_use]
pub fn is_percent_or_ratio(name: &str) -> bool {
    matches!(
        target_of(name),
        Some(Target::Field(_, Unit::PercentOrRatio))
    )
}

/// The most metric names a [`Scrape`] remembers the targets of: far above the families a
/// dcgm-exporter writes, and a bound on what a hostile one costs.
const MAX_CACHED_NAMES: usize = 1024;

/// The target of metric `name` (any case).
fn target_of(name: &str) -> Option<Target> {
    METRICS
        .iter()
        .find(|(m, _)| m.eq_ignore_ascii_case(name))
        .map(|m| m.1)
}

/// Whether `v` is a blank for metric `name`: by the field's type, so a cumulative INT64
/// counter past 2^47 (DCGM's FP64 blank) is a reading. Unknown names take the FP64 and
/// INT32 rules.
#[must_use]
pub fn is_blank_value(name: &str, v: f64) -> bool {
    // Every counter blank is a blank of the other fields too: most values need no name.
    dcgm_value(v).is_none() && super::dmon::is_blank_for(target_of(name), v)
}

/// Attributes (model, PCI id, driver version, node, minor number, MIG profile) a later
/// line of the same entity adds.
fn fill_attributes(id: &mut EntityId, other: EntityId) {
    id.model = id.model.take().or(other.model);
    id.pci_bus_id = id.pci_bus_id.take().or(other.pci_bus_id);
    id.driver_version = id.driver_version.take().or(other.driver_version);
    id.node = id.node.take().or(other.node);
    id.minor = id.minor.or(other.minor);
    if let (Some(m), Some(o)) = (id.mig.as_mut(), other.mig) {
        m.profile = m.profile.take().or(o.profile);
    }
}

/// The link a link entity's series is of: dcgm-exporter's `nvlink` label, else `link`.
fn link_of<K: AsRef<str>, V: AsRef<str>>(labels: &[(K, V)]) -> Option<u32> {
    label_u32(labels, "nvlink").or_else(|| label_u32(labels, "link"))
}

/// The value of label `name`, as a number.
fn label_u32<K: AsRef<str>, V: AsRef<str>>(labels: &[(K, V)], name: &str) -> Option<u32> {
    labels
        .iter()
        .find(|(k, _)| k.as_ref() == name)
        .and_then(|(_, v)| v.as_ref().trim().parse().ok())
}

/// The entity a label set names. Empty label values count as absent.
fn entity_of<K: AsRef<str>, V: AsRef<str>>(labels: &[(K, V)]) -> EntityId {
    let get = |names: &[&str]| {
        labels
            .iter()
            .find(|(k, v)| names.contains(&k.as_ref()) && !v.as_ref().is_empty())
            .map(|(_, v)| v.as_ref().to_owned())
    };
    let num = |names: &[&str]| get(names).and_then(|v| v.parse::<u32>().ok());
    EntityId {
        gpu: num(&["gpu"]),
        // dcgm-exporter's link entities (its `linkMetricsFormat`: one series a link, field
        // 1509 among them) name their GPU `gpu_uuid`, its model `model_name`.
        uuid: get(&["UUID", "uuid", "gpu_uuid"]),
        model: get(&["modelName", "model_name"]),
        pci_bus_id: get(&["pci_bus_id"]),
        // The driver-version field as a label (`DCGM_FI_DRIVER_VERSION`), under the name
        // dcgm-exporter 4.9 gave it (`DCGM_FI_SYSTEM_DRIVER_VERSION`) too.
        driver_version: get(&["DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION"]),
        mig: num(&["GPU_I_ID"]).map(|gpu_instance| MigId {
            uuid: None,
            gpu_instance,
            compute_instance: None,
            profile: get(&["GPU_I_PROFILE"]),
        }),
        pod: get(&["pod", "pod_name"]).map(|pod| PodRef {
            pod,
            namespace: get(&["namespace", "pod_namespace"]),
            container: get(&["container", "container_name"]),
        }),
        // The node: dcgm-exporter's own label, else a relabelled `node`, else (in a
        // Prometheus history) the scrape target, so gpu 0 of two nodes is two GPUs.
        node: get(&["Hostname", "hostname", "node", "instance"]),
        // dcgm-exporter's `device` label, `nvidia<minor>`: the name a DRA driver gives the
        // GPU (`gpu-<minor>`).
        minor: get(&["device"]).and_then(|d| d.strip_prefix("nvidia")?.parse().ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dcgm-exporter's `device` label, `nvidia<minor>`, is the GPU's minor number (the name a
    /// DRA claim gives it), which need not be its index; anything else there is none.
    #[test]
    fn the_device_label_gives_the_minor_number() {
        let minor =
            |device: &str| entity_of(&[("gpu", "0"), ("UUID", "GPU-a"), ("device", device)]).minor;
        assert_eq!(minor("nvidia3"), Some(3));
        assert_eq!(minor("nvidia"), None);
        assert_eq!(minor("gpu3"), None);
        assert_eq!(entity_of(&[("gpu", "0")]).minor, None);
    }
    use crate::model::{Reading, Throttles};

    fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
        let mut p = DcgmTextParser::new("m.txt", 15.0, Timestamp(0));
        let mut out = Vec::new();
        for l in text.lines() {
            out.extend(p.push_line(l)?);
        }
        out.extend(p.finish());
        Ok(out)
    }

    fn one(text: &str) -> EntitySample {
        let mut s = parse(text).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].entities.len(), 1);
        s.remove(0).entities.remove(0)
    }

    /// A series with no gpu or UUID label names no GPU: its readings are not read and are
    /// counted under their family, never merged into one "gpu ?" with another unnamed GPU's
    /// (the busy flags 90 % and 10 % below would have read as one GPU at 10 %). A PCI bus id
    /// alone keys no GPU either (two would be one); a UUID alone does.
    #[test]
    fn a_series_that_names_no_gpu_is_not_read() {
        let mut p = DcgmTextParser::new("m.txt", 15.0, Timestamp(0));
        for l in [
            "DCGM_FI_DEV_GPU_UTIL{Hostname=\"a\"} 90",
            "DCGM_FI_DEV_GPU_UTIL{Hostname=\"b\"} 10",
            "DCGM_FI_DEV_GPU_UTIL{pci_bus_id=\"00000000:3B:00.0\"} 40",
            "DCGM_FI_DEV_GPU_UTIL{UUID=\"GPU-a\"} 30",
        ] {
            assert!(p.push_line(l).unwrap().is_none());
        }
        let s = p.finish().unwrap();
        assert_eq!(s.entities.len(), 1);
        assert_eq!(s.entities[0].id.uuid.as_deref(), Some("GPU-a"));
        assert_eq!(
            s.entities[0].readings.get(Field::ReportedUtil),
            Reading::Value(0.3)
        );
        let u = p.unread();
        assert_eq!(u.unnamed.get("dcgm_fi_dev_gpu_util"), Some(&3));
        assert!(
            u.summary()
                .unwrap()
                .contains("3 reading(s) of dcgm_fi_dev_gpu_util named no GPU"),
            "{:?}",
            u.summary()
        );
    }

    /// Two series of one GPU in one scrape (two exporters reading it) that disagree leave the
    /// field blank, counted: tensor 0.2 and 0.8 were read as whichever came last, so the
    /// sizing followed the instances' names. Two that agree (the same value, or one reading
    /// in MiB and in bytes) are read; a third that disagrees again is counted once more.
    #[test]
    fn two_series_of_one_gpu_that_disagree_leave_it_blank() {
        let mut p = DcgmTextParser::new("m.txt", 15.0, Timestamp(0));
        for l in [
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"n1\",instance=\"a\"} 0.2",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"n1\",instance=\"b\"} 0.8",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"n1\",instance=\"c\"} 0.2",
            "DCGM_FI_PROF_DRAM_ACTIVE{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"n1\",instance=\"a\"} 0.4",
            "DCGM_FI_PROF_DRAM_ACTIVE{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"n1\",instance=\"b\"} 0.4",
            "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"n1\",instance=\"a\"} 10240",
            "DCGM_FI_DEV_FB_USED_BYTES{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"n1\",instance=\"b\"} 10737500000",
        ] {
            assert!(p.push_line(l).unwrap().is_none());
        }
        let s = p.finish().unwrap();
        assert_eq!(s.entities.len(), 1);
        let r = &s.entities[0].readings;
        assert_eq!(r.get(Field::TensorActive), Reading::Blank);
        assert_eq!(r.get(Field::DramActive), Reading::Value(0.4));
        assert_eq!(r.get(Field::MemUsedBytes), Reading::Value(10_737_500_000.0));
        let u = p.unread();
        assert_eq!(
            u.disagreeing.get("dcgm_fi_prof_pipe_tensor_active"),
            Some(&3)
        );
        assert_eq!(u.disagreeing.len(), 1);
        assert!(
            u.summary().unwrap().contains(
                "3 reading(s) of dcgm_fi_prof_pipe_tensor_active disagreed with another series of the same GPU"
            ),
            "{:?}",
            u.summary()
        );
    }

    /// Two exporters reading one GPU give each link's and each XID's series twice, and the
    /// sums were doubled: NVLink wait 2 × (5 000 + 7 000), XIDs 2 × (2 + 1). A series of a
    /// link or an XID another already gave is now counted once where the two agree; where
    /// one link's (or one XID's) two disagree, the sum is left blank for the scrape, counted.
    #[test]
    fn a_link_or_an_xid_read_by_two_exporters_is_counted_once() {
        let mut p = DcgmTextParser::new("m.txt", 15.0, Timestamp(0));
        let series = |family: &str, gpu: &str, label: &str, instance: &str, v: u32| {
            format!(
                "{family}{{gpu=\"{gpu}\",UUID=\"GPU-{gpu}\",Hostname=\"n1\",{label},instance=\"{instance}\"}} {v}"
            )
        };
        let wait = "DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL";
        let xids = "DCGM_EXP_XID_ERRORS_COUNT";
        let mut lines = Vec::new();
        for instance in ["a", "b"] {
            lines.push(series(wait, "0", "link=\"0\"", instance, 5000));
            lines.push(series(wait, "0", "link=\"1\"", instance, 7000));
            lines.push(series(xids, "0", "xid=\"79\"", instance, 2));
            lines.push(series(xids, "0", "xid=\"13\"", instance, 1));
        }
        for (instance, n) in [("a", 100), ("b", 300)] {
            lines.push(series(wait, "1", "link=\"0\"", instance, n));
            lines.push(series(xids, "1", "xid=\"79\"", instance, n / 100));
        }
        for l in &lines {
            assert!(p.push_line(l).unwrap().is_none());
        }
        let s = p.finish().unwrap();
        assert_eq!(s.entities.len(), 2);
        let (r0, r1) = (&s.entities[0].readings, &s.entities[1].readings);
        assert_eq!(r0.get(Field::NvlinkTxWaitTotal), Reading::Value(12_000.0));
        assert_eq!(s.entities[0].nvlink_wait_links, 2);
        assert_eq!(r0.get(Field::XidWindowErrors), Reading::Value(3.0));
        assert_eq!(r0.get(Field::XidWindowFatal), Reading::Value(79.0));
        for f in [
            Field::NvlinkTxWaitTotal,
            Field::XidWindowErrors,
            Field::XidWindowFatal,
        ] {
            assert_eq!(r1.get(f), Reading::Blank, "{f:?}");
        }
        let u = p.unread();
        assert_eq!(
            u.disagreeing
                .get("dcgm_fi_dev_nvlink_ppcnt_ibpc_tx_wait_total"),
            Some(&2)
        );
        assert_eq!(u.disagreeing.get("dcgm_exp_xid_errors_count"), Some(&2));
        assert_eq!(u.disagreeing.len(), 2);
    }

    /// One scrape of a parser of its own, after `units` from the scrapes before: the busy
    /// flag read, and the units to hand on.
    fn scrape_with(units: Units, util: &str) -> (Reading, u64, Units) {
        let mut p = DcgmTextParser::new("m.txt", 15.0, Timestamp(0)).with_units(units);
        p.push_line(&format!("dcgm_fi_dev_gpu_util_ratio{{gpu=\"0\"}} {util}"))
            .unwrap();
        let read = p
            .finish()
            .map(|s| s.entities[0].readings.get(Field::ReportedUtil));
        let refused = p
            .unread()
            .ambiguous
            .get("dcgm_fi_dev_gpu_util_ratio")
            .copied()
            .unwrap_or_default();
        (read.unwrap_or(Reading::Blank), refused, p.take_units())
    }

    #[test]
    fn a_unit_decided_in_one_scrape_reads_the_next_scrapes_whole_values() {
        // Without a HELP line, 1 alone cannot tell a percent from a ratio: refused. 0 is
        // 0 in either unit, and decides nothing.
        let (read, refused, units) = scrape_with(Units::default(), "1");
        assert_eq!((read, refused), (Reading::Blank, 1));
        let (read, refused, units) = scrape_with(units, "0");
        assert_eq!((read, refused), (Reading::Value(0.0), 0));
        // 37 is a percent; the next parser, handed the units, reads 0 and 1 as percents.
        let (read, refused, units) = scrape_with(units, "37");
        assert_eq!((read, refused), (Reading::Value(0.37), 0));
        let (read, refused, units) = scrape_with(units, "0");
        assert_eq!((read, refused), (Reading::Value(0.0), 0));
        let (read, refused, units) = scrape_with(units, "1");
        assert_eq!((read, refused), (Reading::Value(0.01), 0));
        // A parser without them starts undecided again.
        drop(units);
        let (read, refused, _) = scrape_with(Units::default(), "1");
        assert_eq!((read, refused), (Reading::Blank, 1));
    }

    #[test]
    fn a_link_counter_past_the_fp64_blank_is_no_sentinel() {
        let name = "DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL";
        // 2^47 and up are FP64 blanks for other fields; an INT64 counter passes them.
        for v in [140_737_488_355_328.0, 4_294_967_295.0, 2_147_483_632.0] {
            assert!(!is_blank_value(name, v), "{v}");
        }
        assert!(is_blank_value(name, 9_223_372_036_854_775_792.0));
        assert!(is_blank_value(
            "DCGM_FI_DEV_GPU_TEMP",
            140_737_488_355_328.0
        ));
    }

    #[test]
    fn sentinels_and_non_finite_are_blank() {
        for v in [
            "4294967295",
            "9223372036854775794",
            "2147483632",
            "140737488355328",
            "NaN",
            "+Inf",
        ] {
            let e = one(&format!("DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\"}} {v}"));
            assert_eq!(e.readings.get(Field::ReportedUtil), Reading::Blank, "{v}");
        }
        let e = one("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 91");
        assert_eq!(e.readings.get(Field::ReportedUtil), Reading::Value(0.91));
    }

    #[test]
    fn nvlink_transmit_wait_is_summed_over_links_and_a_blank_link_blanks_it() {
        // One series a link (DCGM's link entities), under both names of field 1509.
        let e = one(
            "DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL{gpu=\"0\",UUID=\"GPU-a\",link=\"0\"} 5000000000\n\
             DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL{gpu=\"0\",UUID=\"GPU-a\",link=\"1\"} 7000\n\
             DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL{gpu=\"0\",UUID=\"GPU-a\",link=\"2\"} 3000",
        );
        assert_eq!(
            e.readings.get(Field::NvlinkTxWaitTotal),
            Reading::Value(5_000_010_000.0)
        );
        assert_eq!(e.nvlink_wait_links, 3);
        let e = one("DCGM_FI_DEV_NVLINK_PPCNT_IBPC_PORT_XMIT_WAIT{gpu=\"0\",link=\"0\"} 12");
        assert_eq!(
            e.readings.get(Field::NvlinkTxWaitTotal),
            Reading::Value(12.0)
        );
        assert_eq!(e.nvlink_wait_links, 1);
        // An INT64 blank on one link: no total, never the other links' partial sum.
        let e = one(
            "DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL{gpu=\"0\",link=\"0\"} 7000\n\
             DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL{gpu=\"0\",link=\"1\"} 9223372036854775792",
        );
        assert_eq!(e.readings.get(Field::NvlinkTxWaitTotal), Reading::Blank);
    }

    /// dcgm-exporter writes a link entity's series with its own labels (its
    /// `linkMetricsFormat`: `nvlink`, `gpu`, `gpu_uuid`, `pci_bus_id`, `device`,
    /// `model_name`, `hostname`), the GPU's with `UUID` and `modelName`: they are one GPU,
    /// its transmit wait the sum of its links (1 000 000 + 2 000 000), never a second GPU
    /// without a UUID; a link read by two exporters counts once.
    #[test]
    fn dcgm_exporter_link_series_are_their_gpus() {
        let gpu = "gpu=\"0\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\"";
        let link = |n: u32, v: u64, exporter: &str| {
            format!(
                "DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL{{nvlink=\"{n}\",{gpu},\
                 gpu_uuid=\"GPU-a\",model_name=\"NVIDIA H100 80GB HBM3\",hostname=\"n1\",\
                 instance=\"{exporter}\"}} {v}\n"
            )
        };
        let text = format!(
            "DCGM_FI_DEV_GPU_UTIL{{{gpu},UUID=\"GPU-a\",modelName=\"NVIDIA H100 80GB HBM3\",\
             Hostname=\"n1\"}} 90\n{}{}{}",
            link(0, 1_000_000, "a:9400"),
            link(1, 2_000_000, "a:9400"),
            link(1, 2_000_000, "b:9400"),
        );
        let e = one(&text);
        assert_eq!(e.id.uuid.as_deref(), Some("GPU-a"));
        assert_eq!(e.readings.get(Field::ReportedUtil), Reading::Value(0.9));
        assert_eq!(
            e.readings.get(Field::NvlinkTxWaitTotal),
            Reading::Value(3_000_000.0)
        );
        assert_eq!(e.nvlink_wait_links, 2);
    }

    #[test]
    fn pcie_link_generation_and_width() {
        let e = one("DCGM_FI_DEV_PCIE_LINK_GEN{gpu=\"0\",UUID=\"GPU-a\"} 4\n\
             DCGM_FI_DEV_PCIE_LINK_WIDTH{gpu=\"0\",UUID=\"GPU-a\"} 16");
        assert_eq!(e.readings.get(Field::PcieLinkGen), Reading::Value(4.0));
        assert_eq!(e.readings.get(Field::PcieLinkWidth), Reading::Value(16.0));
        // DCGM's INT32 blank is blank, never a generation.
        let e = one("DCGM_FI_DEV_PCIE_LINK_GEN{gpu=\"0\"} 2147483632");
        assert_eq!(e.readings.get(Field::PcieLinkGen), Reading::Blank);
        assert_eq!(e.readings.get(Field::PcieLinkWidth), Reading::Blank);
    }

    /// Every health field, once under its legacy name and once under DCGM 4.6's canonical
    /// one (the same where the rename table keeps it): `(legacy, canonical, value)`.
    const HEALTH_NAMES: [(&str, &str, &str); 17] = [
        ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", "13"),
        (
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "3",
        ),
        (
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "0",
        ),
        (
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
            "2",
        ),
        (
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
            "1",
        ),
        (
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "DCGM_FI_DEV_ROW_REMAP_FAILED",
            "0",
        ),
        (
            "DCGM_FI_DEV_ROW_REMAP_PENDING",
            "DCGM_FI_DEV_ROW_REMAP_PENDING",
            "0",
        ),
        (
            "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
            "DCGM_FI_DEV_GPU_RECOVERY_ACTION",
            "0",
        ),
        (
            "DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG",
            "DCGM_FI_DEV_MEMORY_UNREPAIRABLE",
            "1",
        ),
        (
            "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY",
            "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY",
            "1",
        ),
        (
            "DCGM_FI_DEV_POWER_VIOLATION",
            "DCGM_FI_DEV_POWER_VIOLATION",
            "281474976710656",
        ),
        (
            "DCGM_FI_DEV_THERMAL_VIOLATION",
            "DCGM_FI_DEV_THERMAL_VIOLATION",
            "5000",
        ),
        (
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS",
            "700",
        ),
        (
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST_NS",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST_NS",
            "11",
        ),
        (
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS",
            "22",
        ),
        (
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS",
            "33",
        ),
        (
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS",
            "44",
        ),
    ];

    /// A scrape of GPU 0 with the health fields under the legacy or the canonical names, each value
    /// replaced where `with` names the field's legacy name.
    fn health_scrape(canonical: bool, with: &[(&str, &str)]) -> EntitySample {
        let mut text = String::new();
        for (legacy, new, v) in HEALTH_NAMES {
            let v = with.iter().find(|(n, _)| *n == legacy).map_or(v, |w| w.1);
            let name = if canonical { new } else { legacy };
            text.push_str(&format!("{name}{{gpu=\"0\",UUID=\"GPU-a\"}} {v}\n"));
        }
        one(&text)
    }

    #[test]
    fn health_fields_under_every_name_read_the_same() {
        use crate::health::{self, Health, HealthConfig, HealthInputs, HealthReason};
        let legacy = health_scrape(false, &[]);
        let canonical = health_scrape(true, &[]);
        assert_eq!(legacy.readings, canonical.readings);
        let r = &legacy.readings;
        for (f, v) in [
            (Field::XidLast, 13.0),
            (Field::EccSbeVolatile, 3.0),
            (Field::EccDbeVolatile, 0.0),
            (Field::EccDbeAggregate, 2.0),
            (Field::RowRemapUncorrectable, 1.0),
            (Field::RowRemapFailed, 0.0),
            (Field::RowRemapPending, 0.0),
            (Field::RecoveryAction, 0.0),
            (Field::MemoryUnrepairable, 1.0),
            (Field::FabricHealthSummary, 1.0),
            // An INT64 counter past 2^47 (the FP64 blank) is a reading.
            (Field::PowerViolationNs, 281_474_976_710_656.0),
            (Field::ThermalViolationNs, 5000.0),
            (Field::ClockEventSwPowerCapNs, 700.0),
            (Field::ClockEventSyncBoostNs, 11.0),
            (Field::ClockEventSwThermalNs, 22.0),
            (Field::ClockEventHwThermalNs, 33.0),
            (Field::ClockEventHwPowerBrakeNs, 44.0),
        ] {
            assert_eq!(r.get(f), Reading::Value(v), "{f:?}");
        }
        // The same verdict under both generations, for each field that decides one: the
        // unrepairable memory first; then, with it 0, each other rule.
        let judge = |e: &EntitySample| {
            health::classify(
                &HealthInputs::from_readings(&e.readings),
                &HealthConfig::default(),
            )
            .map(|f| (f.health, f.reason))
        };
        let unrepairable = Some((Health::Unavailable, HealthReason::MemoryUnrepairable));
        assert_eq!(judge(&legacy), unrepairable);
        assert_eq!(judge(&canonical), unrepairable);
        let repaired = ("DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG", "0");
        for (field, value, expected) in [
            (
                "DCGM_FI_DEV_ROW_REMAP_PENDING",
                "1",
                HealthReason::RowRemapPending,
            ),
            (
                "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                "1",
                HealthReason::RowRemapFailed,
            ),
            (
                "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
                "2",
                HealthReason::RecoveryAction(2.0),
            ),
            (
                "DCGM_FI_DEV_XID_ERRORS",
                "79",
                HealthReason::FatalXid(79, "GPU has fallen off the bus"),
            ),
            (
                "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY",
                "2",
                HealthReason::FabricUnhealthy,
            ),
            (
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                "4",
                HealthReason::DoubleBitErrors(4.0),
            ),
            (
                "DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG",
                "0",
                HealthReason::Clean,
            ),
        ] {
            let with = [repaired, (field, value)];
            let (l, c) = (health_scrape(false, &with), health_scrape(true, &with));
            assert_eq!(l.readings, c.readings, "{field}");
            let health = if expected == HealthReason::Clean {
                Health::Ok
            } else {
                Health::Unavailable
            };
            assert_eq!(judge(&l), Some((health, expected)), "{field}");
            assert_eq!(judge(&c), Some((health, expected)), "{field}");
        }
        // DCGM's blanks stay blanks.
        let e = one("DCGM_FI_DEV_XID_ERRORS{gpu=\"0\"} 2147483632\n\
             DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=\"0\"} 9223372036854775792\n\
             DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS{gpu=\"0\"} 9223372036854775792\n\
             DCGM_FI_DEV_MEMORY_UNREPAIRABLE{gpu=\"0\"} 2147483632");
        assert_eq!(e.readings.get(Field::XidLast), Reading::Blank);
        assert_eq!(e.readings.get(Field::EccDbeVolatile), Reading::Blank);
        assert_eq!(e.readings.get(Field::ClockEventHwThermalNs), Reading::Blank);
        assert_eq!(e.readings.get(Field::MemoryUnrepairable), Reading::Blank);
    }

    #[test]
    fn the_exporters_xid_counts_give_the_window_total_and_the_fatal_xid() {
        let window = "window_size_in_ms=\"300000\"";
        let e = one(&format!(
            "DCGM_EXP_XID_ERRORS_COUNT{{gpu=\"0\",UUID=\"GPU-a\",xid=\"13\",{window}}} 5\n\
             DCGM_EXP_XID_ERRORS_COUNT{{gpu=\"0\",UUID=\"GPU-a\",xid=\"79\",{window}}} 1\n\
             DCGM_EXP_XID_ERRORS_COUNT{{gpu=\"0\",UUID=\"GPU-a\",xid=\"48\",{window}}} 2\n\
             DCGM_EXP_XID_ERRORS_COUNT{{gpu=\"0\",UUID=\"GPU-a\",xid=\"94\",{window}}} 2\n\
             DCGM_FI_DEV_XID_ERRORS{{gpu=\"0\",UUID=\"GPU-a\"}} 13"
        ));
        let r = &e.readings;
        // 5 + 1 + 2 + 2 XIDs; of the fatal ones 48 and 94 were counted most (2 each): the
        // lower code.
        assert_eq!(r.get(Field::XidWindowErrors), Reading::Value(10.0));
        assert_eq!(r.get(Field::XidWindowFatal), Reading::Value(48.0));
        let f = crate::health::classify(
            &crate::health::HealthInputs::from_readings(r),
            &crate::health::HealthConfig::default(),
        )
        .unwrap();
        // The last XID (13) is not fatal; one counted in the window is.
        assert_eq!(f.health, crate::health::Health::Unavailable);
        assert_eq!(
            f.reason,
            crate::health::HealthReason::FatalXidInWindow(48, "double-bit ECC error")
        );
        // Only the application's XIDs, a fatal one counted 0 times, a blank count and an
        // unnamed XID: the total of the read counts, no fatal XID.
        let e = one(&format!(
            "DCGM_EXP_XID_ERRORS_COUNT{{gpu=\"0\",xid=\"13\",{window}}} 3\n\
             DCGM_EXP_XID_ERRORS_COUNT{{gpu=\"0\",xid=\"79\",{window}}} 0\n\
             DCGM_EXP_XID_ERRORS_COUNT{{gpu=\"0\",xid=\"95\",{window}}} NaN\n\
             DCGM_EXP_XID_ERRORS_COUNT{{gpu=\"0\",xid=\"x\",{window}}} 4"
        ));
        assert_eq!(e.readings.get(Field::XidWindowErrors), Reading::Value(7.0));
        assert_eq!(e.readings.get(Field::XidWindowFatal), Reading::Value(0.0));
        // Without the exporter's counts neither is read.
        let e = one("DCGM_FI_DEV_XID_ERRORS{gpu=\"0\"} 79");
        assert_eq!(e.readings.get(Field::XidWindowErrors), Reading::Blank);
        assert_eq!(e.readings.get(Field::XidWindowFatal), Reading::Blank);
    }

    #[test]
    fn two_scrapes() {
        let text = "\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 10
DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\"} 20
DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",UUID=\"GPU-a\"} 0.25

DCGM_FI_DEV_GPU_UTIL{UUID=\"GPU-a\",gpu=\"0\"} 30
DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\"} 40
";
        let mut p = DcgmTextParser::new("m.txt", 15.0, Timestamp(0));
        let mut s = Vec::new();
        for l in text.lines() {
            s.extend(p.push_line(l).unwrap());
        }
        s.extend(p.finish());
        assert_eq!(p.skipped_lines(), 3);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].taken, s[1].taken), (Timestamp(0), Timestamp(15_000)));
        assert_eq!(s[0].entities.len(), 2);
        assert_eq!(
            s[0].entities[0].readings.get(Field::SmActive),
            Reading::Value(0.25)
        );
        assert_eq!(
            s[1].entities[0].readings.get(Field::SmActive),
            Reading::Blank
        );
        assert_eq!(
            s[1].entities[0].readings.get(Field::ReportedUtil),
            Reading::Value(0.3)
        );
        assert_eq!(
            s[1].entities[1].readings.get(Field::ReportedUtil),
            Reading::Value(0.4)
        );
        assert_eq!(s[1].entities[1].id.uuid.as_deref(), Some("GPU-b"));
    }

    /// Each sample's time, and whether the parser saw timestamps.
    fn takens(text: &str, interval_secs: f64) -> (Vec<i64>, bool) {
        let mut p = DcgmTextParser::new("m.txt", interval_secs, Timestamp(0));
        let mut s = Vec::new();
        for l in text.lines() {
            s.extend(p.push_line(l).unwrap());
        }
        s.extend(p.finish());
        (s.iter().map(|s| s.taken.0).collect(), p.timestamped())
    }

    /// Scrapes of two GPUs, scrape `i` with suffix `ts[i]` ("" for none).
    fn scrapes(ts: &[&str]) -> String {
        ts.iter()
            .map(|t| {
                format!(
                    "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\"}} 10 {t}\nDCGM_FI_DEV_GPU_UTIL{{gpu=\"1\"}} 20 {t}\n"
                )
            })
            .collect()
    }

    #[test]
    fn exposition_timestamps_stamp_the_scrapes() {
        let ts = ["1767225600000", "1767225610000", "1767225620000"];
        assert_eq!(
            takens(&scrapes(&ts), 1.0),
            (
                vec![1_767_225_600_000, 1_767_225_610_000, 1_767_225_620_000],
                true
            )
        );
    }

    /// A pod comes to GPU 0 at the third scrape: its series is new, and comes first. With
    /// one timestamp a scrape (learned from the first scrape a repeat ended), the timestamp
    /// ends the scrape, not only a repeated series: every scrape keeps its own readings and
    /// time (before, the new series joined the scrape before it, and every later scrape was
    /// cut one line late).
    #[test]
    fn a_new_series_first_in_a_timestamped_scrape_starts_it() {
        let mut text = String::new();
        for i in 0..6i64 {
            let t = 1_767_225_600_000 + i * 30_000;
            let pod = if i < 2 { "" } else { ",pod=\"train-1\"" };
            text.push_str(&format!(
                "DCGM_FI_DEV_SM_CLOCK{{gpu=\"0\"{pod}}} 1000 {t}\nDCGM_FI_DEV_GPU_UTIL{{gpu=\"0\"{pod}}} {i} {t}\nDCGM_FI_DEV_SM_CLOCK{{gpu=\"1\"}} 1000 {t}\nDCGM_FI_DEV_GPU_UTIL{{gpu=\"1\"}} {} {t}\n",
                10 + i
            ));
        }
        let mut p = DcgmTextParser::new("m.txt", 30.0, Timestamp(0));
        let mut s = Vec::new();
        for l in text.lines() {
            s.extend(p.push_line(l).unwrap());
        }
        s.extend(p.finish());
        assert_eq!(s.len(), 6);
        for (i, sample) in s.iter().enumerate() {
            assert_eq!(sample.taken.0, 1_767_225_600_000 + i as i64 * 30_000);
            assert_eq!(sample.entities.len(), 2, "scrape {i}");
            let gpu1 = sample
                .entities
                .iter()
                .find(|e| e.id.gpu == Some(1))
                .unwrap();
            assert_eq!(
                gpu1.readings.get(Field::ReportedUtil),
                Reading::Value((10 + i) as f64 / 100.0),
                "scrape {i}"
            );
        }
    }

    /// Blanks are counted by family, never read: a sentinel of the field's type (power's FP64
    /// blank, temperature's INT32 blank) and a NaN; a counter past 2^47 is a reading.
    #[test]
    fn blanks_are_counted_by_family() {
        let text = "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 140737488355328\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 2147483632\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} NaN\nDCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL{gpu=\"0\"} 281474976710656\n";
        let mut p = DcgmTextParser::new("m.txt", 1.0, Timestamp(0));
        for l in text.lines() {
            p.push_line(l).unwrap();
        }
        let s = p.finish().unwrap();
        assert_eq!(
            s.entities[0].readings.get(Field::PowerWatts),
            Reading::Blank
        );
        let u = p.unread();
        assert_eq!(
            u.sentinels
                .iter()
                .map(|(f, n)| (f.as_str(), *n))
                .collect::<Vec<_>>(),
            [("dcgm_fi_dev_gpu_temp", 1), ("dcgm_fi_dev_power_usage", 1)]
        );
        assert_eq!(
            u.non_finite
                .iter()
                .map(|(f, n)| (f.as_str(), *n))
                .collect::<Vec<_>>(),
            [("dcgm_fi_dev_gpu_util", 1)]
        );
        assert!(
            u.summary()
                .unwrap()
                .contains("1 reading(s) of dcgm_fi_dev_power_usage were DCGM's blank sentinel")
        );
    }

    /// A `gpu` or `GPU_I_ID` label that is no index names no entity: the line is an error
    /// naming it, never read as another GPU's (two such lines were one entity, the second
    /// value over the first); an unread family's line is not looked at, nor an empty label.
    #[test]
    fn a_gpu_label_that_is_no_index_is_an_error() {
        let mut p = DcgmTextParser::new("m.txt", 1.0, Timestamp(0));
        let err = p
            .push_line("DCGM_FI_DEV_POWER_USAGE{gpu=\"a\"} 100")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "m.txt:1: label gpu=\"a\" is not an index: the line names no GPU or instance"
        );
        let err = p
            .push_line("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",GPU_I_ID=\"x\"} 100")
            .unwrap_err();
        assert!(
            err.to_string().starts_with("m.txt:2: label GPU_I_ID=\"x\""),
            "{err}"
        );
        for ok in [
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu=\"b\"} 0",
            "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",GPU_I_ID=\"\"} 300",
        ] {
            p.push_line(ok).unwrap();
        }
        let s = p.finish().unwrap();
        assert_eq!(s.entities.len(), 1);
        assert_eq!(s.entities[0].id.gpu, Some(0));
        assert_eq!(s.entities[0].readings.value(Field::PowerWatts), Some(300.0));
    }

    /// A negative used memory makes no total with the free: used −5 MiB beside 41 000 MiB
    /// free had served a total of 40 995 MiB, half the GPU's, while the used reading itself
    /// was refused. The total stays blank; the used reading is left for sanitizing to blank
    /// and count.
    #[test]
    fn a_negative_used_memory_makes_no_total() {
        let e = one("DCGM_FI_DEV_FB_USED{gpu=\"0\"} -5\nDCGM_FI_DEV_FB_FREE{gpu=\"0\"} 41000");
        assert_eq!(e.readings.get(Field::MemTotalBytes), Reading::Blank);
        assert_eq!(
            e.readings.get(Field::MemUsedBytes),
            Reading::Value(-5.0 * 1_048_576.0)
        );
        let e = one("DCGM_FI_DEV_FB_USED{gpu=\"0\"} 0\nDCGM_FI_DEV_FB_FREE{gpu=\"0\"} 41000");
        assert_eq!(
            e.readings.get(Field::MemTotalBytes),
            Reading::Value(41_000.0 * 1_048_576.0)
        );
    }

    /// Readings no GPU gives (a negative or fractional clock-event bitmask, a negative XID
    /// count, negative free memory, a negative link value) are blank and counted by family;
    /// a link's NaN is counted as not finite. Nothing of them is read: no throttle reasons,
    /// no XID count, no total from used + free, no link sum.
    #[test]
    fn impossible_readings_are_blank_and_counted() {
        let text = "\
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu=\"0\"} -4
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu=\"1\"} 3.5
DCGM_EXP_XID_ERRORS_COUNT{gpu=\"0\",xid=\"79\"} -3
DCGM_FI_DEV_FB_USED{gpu=\"0\"} 1000
DCGM_FI_DEV_FB_FREE{gpu=\"0\"} -900
DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL{gpu=\"0\",link=\"0\"} -5
DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL{gpu=\"1\",link=\"0\"} NaN
DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL{gpu=\"1\",link=\"1\"} 7
";
        let mut p = DcgmTextParser::new("m.txt", 1.0, Timestamp(0));
        for l in text.lines() {
            p.push_line(l).unwrap();
        }
        let s = p.finish().unwrap();
        for e in &s.entities {
            assert_eq!(e.throttles, None, "{:?}", e.id);
            let r = &e.readings;
            assert_eq!(r.get(Field::XidWindowErrors), Reading::Blank);
            assert_eq!(r.get(Field::MemTotalBytes), Reading::Blank);
            assert_eq!(r.get(Field::NvlinkTxWaitTotal), Reading::Blank);
        }
        let u = p.unread();
        let counts = |m: &std::collections::BTreeMap<String, u64>| {
            m.iter().map(|(f, n)| (f.clone(), *n)).collect::<Vec<_>>()
        };
        let named = |v: &[(&str, u64)]| {
            v.iter()
                .map(|(f, n)| ((*f).to_string(), *n))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            counts(&u.impossible),
            named(&[
                ("dcgm_exp_xid_errors_count", 1),
                ("dcgm_fi_dev_clock_throttle_reasons", 2),
                ("dcgm_fi_dev_fb_free", 1),
                ("dcgm_fi_dev_nvlink_ppcnt_ibpc_tx_wait_total", 1),
            ])
        );
        assert_eq!(
            counts(&u.non_finite),
            named(&[("dcgm_fi_dev_nvlink_ppcnt_ibpc_tx_wait_total", 1)])
        );
        assert!(u.sentinels.is_empty());
        assert!(
            u.summary()
                .unwrap()
                .contains("2 reading(s) of dcgm_fi_dev_clock_throttle_reasons were impossible")
        );
    }

    /// One live answer is one scrape: a series it repeats is counted and skipped, the first
    /// reading kept, and every other reading of the GPU stays (a capture's parser would end a
    /// scrape there and hand on a GPU of the one reading after it). 100 000 repeats keep no
    /// copy of anything.
    #[test]
    fn one_answer_counts_a_repeated_series_and_keeps_the_first_reading() {
        let lines = [
            r#"DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 40"#,
            r#"DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a"} 300"#,
            r#"DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a"} 0.5"#,
            r#"DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b"} 10"#,
        ];
        let repeat = r#"DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 99"#;
        let mut p = DcgmTextParser::new("live", 1.0, Timestamp(0)).one_answer();
        for l in lines {
            assert_eq!(p.push_line(l).unwrap(), None);
        }
        for _ in 0..100_000 {
            assert_eq!(p.push_line(repeat).unwrap(), None, "no scrape ends");
        }
        let s = p.finish().expect("the answer");
        assert_eq!(s.entities.len(), 2);
        let a = &s.entities[0].readings;
        assert_eq!(a.get(Field::ReportedUtil), Reading::Value(0.4));
        assert_eq!(a.get(Field::PowerWatts), Reading::Value(300.0));
        assert_eq!(a.get(Field::SmActive), Reading::Value(0.5));
        assert_eq!(p.refused().repeated, 100_000);
        assert!(p.finish().is_none(), "one answer, one sample");
        // A capture's parser reads the repeat as the next scrape's first line.
        let mut p = DcgmTextParser::new("capture", 1.0, Timestamp(0));
        let mut scrapes = 0;
        for l in lines.iter().chain([&repeat]) {
            scrapes += usize::from(p.push_line(l).unwrap().is_some());
        }
        assert_eq!((scrapes, p.refused().repeated), (1, 0));
    }

    /// A federation's scrape mixes its targets' timestamps: a repeated series alone ends it.
    #[test]
    fn mixed_timestamps_in_a_scrape_end_it_by_repeats() {
        let scrape = |t: i64| {
            format!(
                "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",Hostname=\"a\"}} 10 {t}\nDCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",Hostname=\"b\"}} 20 {}\n",
                t + 20_000
            )
        };
        let text: String = (0..3)
            .map(|i| scrape(1_767_225_600_000 + i * 30_000))
            .collect();
        let (t, _) = takens(&text, 30.0);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn exposition_timestamps_keep_the_real_spacing() {
        let ts = ["1767225600000", "1767225601000", "1767225611000"];
        let (t, stamped) = takens(&scrapes(&ts), 1.0);
        assert!(stamped);
        assert_eq!(
            t.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(),
            [1_000, 10_000]
        );
    }

    #[test]
    fn without_timestamps_scrape_k_is_k_intervals() {
        assert_eq!(
            takens(&scrapes(&["", "", ""]), 2.5),
            (vec![0, 2_500, 5_000], false)
        );
    }

    #[test]
    fn a_scrape_with_differing_timestamps_takes_the_latest() {
        let text = "\
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 10 1767225600000
DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} 20 1767225600250
DCGM_FI_DEV_FB_USED{gpu=\"1\"} 5
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 10 1767225601000
";
        assert_eq!(
            takens(text, 15.0),
            (vec![1_767_225_600_250, 1_767_225_601_000], true)
        );
    }

    #[test]
    fn mixed_captures_continue_from_the_last_timestamp() {
        let ts = ["", "", "1767225600000", "", "", "1767225630000", ""];
        assert_eq!(
            takens(&scrapes(&ts), 10.0),
            (
                vec![
                    0,
                    10_000,
                    1_767_225_600_000,
                    1_767_225_610_000,
                    1_767_225_620_000,
                    1_767_225_630_000,
                    1_767_225_640_000,
                ],
                true
            )
        );
        // A timestamped scrape of unknown metrics only yields no sample, but still anchors
        // the one after it, which the replay counter repeat begins: its time counts on from
        // a real stamp, so the capture is timestamped.
        let text = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu=\"0\"} 0 1767225600000\nDCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu=\"0\"} 0\n";
        let text = format!("{text}{}", scrapes(&[""]));
        assert_eq!(takens(&text, 1.0), (vec![1_767_225_601_000], true));
        // A real stamp earlier than the made-up ones before it is kept (a step back the
        // deriver reports), and the scrapes after it count on from it.
        let unknown = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu=\"0\"} 0 -500\n";
        let text = format!("{}{unknown}{}", scrapes(&["", "", ""]), scrapes(&[""]));
        assert_eq!(takens(&text, 1.0), (vec![0, 1_000, -500, 500], true));
    }

    #[test]
    fn label_escaping() {
        let e =
            one(r#"DCGM_FI_DEV_GPU_TEMP{gpu="0",pod="a\"b\\c\nd",namespace="",container="x"} 40"#);
        let pod = e.id.pod.unwrap();
        assert_eq!(pod.pod, "a\"b\\c\nd");
        assert_eq!((pod.namespace, pod.container.as_deref()), (None, Some("x")));
        assert_eq!(e.readings.get(Field::TempCelsius), Reading::Value(40.0));
    }

    #[test]
    fn malformed_lines() {
        let cases = [
            (
                "> DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 1",
                "m.txt:2: expected a metric name",
            ),
            (
                "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\" 1",
                "m.txt:2: expected `,` or `}` in a label set",
            ),
            (
                "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",",
                "m.txt:2: unterminated label set",
            ),
            (
                "DCGM_FI_DEV_GPU_UTIL{gpu=\"0",
                "m.txt:2: unterminated label set",
            ),
            (
                r#"DCGM_FI_DEV_GPU_UTIL{gpu="\t"} 1"#,
                "m.txt:2: bad escape `\\t` in a label value",
            ),
            (
                "DCGM_FI_DEV_GPU_UTIL{gpu=0} 1",
                "m.txt:2: expected a quoted label value",
            ),
            ("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"}", "m.txt:2: missing value"),
            (
                "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 1,5",
                "m.txt:2: bad value `1,5`",
            ),
            (
                "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 1 12.5.3",
                "m.txt:2: bad timestamp `12.5.3` (milliseconds, or OpenMetrics' seconds, from year 1 to 9999)",
            ),
            (
                "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 1 12 x",
                "m.txt:2: unexpected `x` after the value",
            ),
        ];
        for (line, want) in cases {
            let text = format!("# c\n{line}\n");
            assert_eq!(parse(&text).unwrap_err().to_string(), want, "{line}");
        }
    }

    #[test]
    fn old_names_and_labels() {
        let text = "\
dcgm_fi_prof_gr_engine_active{gpu=\"2\",uuid=\"GPU-x\",model_name=\"A100\",hostname=\"n1\",pod_name=\"p\",pod_namespace=\"ns\",container_name=\"c\"} 0.5
dcgm_fb_used{gpu=\"2\",uuid=\"GPU-x\",pod_name=\"p\",pod_namespace=\"ns\",container_name=\"c\"} 100
dcgm_fb_free{gpu=\"2\",uuid=\"GPU-x\",pod_name=\"p\",pod_namespace=\"ns\",container_name=\"c\"} 300
dcgm_mem_copy_utilization{gpu=\"2\",uuid=\"GPU-x\",pod_name=\"p\",pod_namespace=\"ns\",container_name=\"c\"} 50
";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 1);
        let e = &s[0].entities[0];
        let want = EntityId {
            gpu: Some(2),
            uuid: Some("GPU-x".into()),
            model: Some("A100".into()),
            node: Some("n1".into()),
            pod: Some(PodRef {
                pod: "p".into(),
                namespace: Some("ns".into()),
                container: Some("c".into()),
            }),
            ..EntityId::default()
        };
        assert_eq!(e.id, want);
        assert_eq!(e.readings.get(Field::GrActive), Reading::Value(0.5));
        assert_eq!(
            e.readings.get(Field::MemUsedBytes),
            Reading::Value(100.0 * 1_048_576.0)
        );
        assert_eq!(
            e.readings.get(Field::MemTotalBytes),
            Reading::Value(400.0 * 1_048_576.0)
        );
        assert_eq!(e.readings.get(Field::DramActive), Reading::Blank);
    }

    #[test]
    fn memory_total_power_limit_throttles_mig() {
        let l = r#"{gpu="0",GPU_I_ID="3",GPU_I_PROFILE="3g.40gb",Hostname="h"}"#;
        let text = [
            "DCGM_FI_DEV_FB_USED{L} 10",
            "DCGM_FI_DEV_FB_FREE{L} 20",
            "DCGM_FI_DEV_FB_RESERVED{L} 5",
            "DCGM_FI_DEV_ENFORCED_POWER_LIMIT{L} 300",
            "DCGM_FI_DEV_POWER_MGMT_LIMIT{L} 350",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS{L} 136",
            "DCGM_FI_PROF_NVLINK_TX_BYTES{L} 1000 1700000000000",
        ]
        .map(|t| t.replace("{L}", l))
        .join("\n");
        let e = one(&text);
        let mig = MigId {
            uuid: None,
            gpu_instance: 3,
            compute_instance: None,
            profile: Some("3g.40gb".into()),
        };
        assert_eq!(
            (e.id.gpu, e.id.mig, e.id.node.as_deref()),
            (Some(0), Some(mig), Some("h"))
        );
        assert_eq!(
            e.readings.get(Field::MemTotalBytes),
            Reading::Value(35.0 * 1_048_576.0)
        );
        assert_eq!(
            e.readings.get(Field::PowerLimitWatts),
            Reading::Value(300.0)
        );
        assert_eq!(
            e.readings.get(Field::NvlinkTxBytesPerSec),
            Reading::Value(1000.0)
        );
        let t = Throttles {
            hw_slowdown: true,
            power: true,
            ..Throttles::default()
        };
        assert_eq!(e.throttles, Some(t));

        let e = one(
            "DCGM_FI_DEV_FB_TOTAL{gpu=\"0\"} 80\nDCGM_FI_DEV_FB_USED{gpu=\"0\"} 1\nDCGM_FI_DEV_FB_FREE{gpu=\"0\"} 2\nDCGM_FI_DEV_POWER_MGMT_LIMIT{gpu=\"0\"} 350",
        );
        assert_eq!(
            e.readings.get(Field::MemTotalBytes),
            Reading::Value(80.0 * 1_048_576.0)
        );
        assert_eq!(
            e.readings.get(Field::PowerLimitWatts),
            Reading::Value(350.0)
        );
        assert_eq!(e.throttles, None);
    }

    #[test]
    fn unknown_metrics_alone_make_no_sample() {
        assert_eq!(
            parse("DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu=\"0\"} 0\nfoo 1\nfoo 2\n").unwrap(),
            vec![]
        );
        assert_eq!(parse("").unwrap(), vec![]);
    }

    #[test]
    fn gpu_zero_of_two_nodes_is_two_entities() {
        let text = "\
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",Hostname=\"a\"} 100
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",Hostname=\"b\"} 50
DCGM_FI_DEV_FB_USED{gpu=\"0\",Hostname=\"b\"} 10
DCGM_FI_DEV_FB_USED{gpu=\"0\"} 20
";
        let s = parse(text).unwrap();
        let e = &s[0].entities;
        assert_eq!(e.len(), 2, "{e:#?}");
        assert_eq!(e[0].id.node.as_deref(), Some("a"));
        assert_eq!(e[1].id.node.as_deref(), Some("b"));
        assert_eq!(e[1].readings.value(Field::ReportedUtil), Some(0.5));
        assert_eq!(
            e[1].readings.value(Field::MemUsedBytes),
            Some(10.0 * 1_048_576.0)
        );
        // A line without a node belongs to the first entity of that GPU.
        assert_eq!(
            e[0].readings.value(Field::MemUsedBytes),
            Some(20.0 * 1_048_576.0)
        );
    }

    /// Past the caps, lines are left out and counted: entities past the entity cap (the
    /// entities already kept still take their later lines), a label value over the byte
    /// cap, a line with more labels than the cap. Nothing of a refused line is kept.
    #[test]
    fn limits_leave_out_and_count() {
        let limits = Limits {
            max_entities: 2,
            max_label_bytes: 8,
            max_labels: 3,
        };
        let mut p = DcgmTextParser::new("m.txt", 1.0, Timestamp(0)).with_limits(limits);
        let lines = [
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 10",
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} 11",
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"2\"} 12",
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"3\"} 13",
            "DCGM_FI_PROF_SM_ACTIVE{gpu=\"1\"} 0.5",
            "DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",pod=\"123456789\"} 0.5",
            "DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",a=\"1\",b=\"2\",c=\"3\"} 0.5",
        ];
        for l in lines {
            assert_eq!(p.push_line(l), Ok(None), "{l}");
        }
        let s = p.finish().expect("a scrape");
        let kept: Vec<_> = s.entities.iter().map(|e| e.id.gpu).collect();
        assert_eq!(kept, [Some(0), Some(1)]);
        assert_eq!(
            s.entities[1].readings.get(Field::SmActive),
            Reading::Value(0.5)
        );
        assert_eq!(s.entities[0].readings.get(Field::SmActive), Reading::Blank);
        assert_eq!(s.entities[0].id.pod, None);
        assert_eq!(
            p.refused(),
            Refused {
                entities: 2,
                long_values: 1,
                label_sets: 1,
                repeated: 0,
            }
        );
        // Without limits every line is kept (the pod's line is an entity of its own).
        let mut p = DcgmTextParser::new("m.txt", 1.0, Timestamp(0));
        for l in lines {
            p.push_line(l).unwrap();
        }
        assert_eq!(p.finish().unwrap().entities.len(), 5);
        assert!(p.refused().none());
    }
}
