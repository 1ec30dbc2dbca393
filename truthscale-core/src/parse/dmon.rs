//! `dcgmi dmon` text output.
//!
//! ```text
//! #Entity         POWER             TMPTR        GRACT        SMACT
//! ID               W                 C
//! GPU 0           245.318           61           0.888        N/A
//! GPU-I 1         N/A                            0.420        0.400
//! ```
//!
//! A header names the columns by their dcgmi short names; a later header replaces the
//! columns. The line under it (`ID`, then each column's unit under its name: ` W`, ` C`,
//! ` mJ`, `KB/s`, `MB/s`, `Mb/s`, or nothing) is part of the header: it is read by column
//! position, and a unit it declares sets or confirms the scale of that column's values
//! ([`Scanner`]). Rows carry no timestamps: a sweep ends when an entity already seen in it
//! appears again, and sweep `k` is stamped `start + k * interval`. `N/A` and DCGM's
//! sentinel values become [`Reading::Blank`], and so does a field dmon leaves blank (spaces
//! where its value would be, or a row that ends before it): a row with fewer values than
//! columns is read by the columns' positions. Lines before the first header, blank lines
//! and `#` comments are skipped and counted.
//!
//! `GPU-I n` rows are MIG GPU instances of the last `GPU` row before them (if any), and
//! `GPU-CI n` rows compute instances of the last `GPU-I` row, as dmon lists them.
//!
//! The DCGM-specific pieces shared with the dcgm-exporter parser (unit conversion,
//! sentinels, clock-event bits, framebuffer totals) live here as well.

use super::ParseError;
use super::names::Unread;
use crate::model::{EntityId, EntitySample, Field, MigId, Reading, Sample, Throttles, Timestamp};
use std::collections::HashSet;

/// What tells two dmon rows' entities apart: the GPU, GPU instance and compute instance,
/// each present or not, in one number ([`row_key`]): kept in registers, where a tuple of
/// options would be written to memory in parts and read back whole, which stalls.
type RowKey = u128;

/// The [`RowKey`] of a GPU, GPU instance and compute instance: 33 bits each, a presence bit
/// then the id.
#[inline]
fn row_key(gpu: Option<u32>, gi: Option<u32>, ci: Option<u32>) -> RowKey {
    let part = |id: Option<u32>| id.map_or(0, |v| u128::from(v) << 1 | 1);
    part(gpu) | part(gi) << 33 | part(ci) << 66
}

/// How a raw DCGM number converts into a [`Field`]'s canonical unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Already canonical.
    Same,
    /// Percent (0–100) to ratio.
    Percent,
    /// Milli-units (mJ) to units (J): DCGM's energy counter (field 156), an INT64 whose
    /// blanks are the INT64 ones alone (it passes the INT32 band within an hour at 700 W).
    Milli,
    /// MiB to bytes.
    Mib,
    /// Kilo-units (KB/s) to units (B/s): decimal, 10^3.
    Kilo,
    /// Mega-units (MB/s) to units (B/s): decimal, 10^6.
    Mega,
    /// Megabits (Mb/s) to bytes (B/s): 10^6 / 8.
    Megabit,
    /// Hertz to MHz (the DCGM 4.7 base-unit clocks).
    Hertz,
    /// A cumulative INT64 counter, as read: only DCGM's INT64 blanks are blanks.
    Count,
    /// Percent or a 0..1 ratio, as the family's unit is decided
    /// ([`super::names`]); never converted without that decision.
    PercentOrRatio,
}

impl Unit {
    /// A raw DCGM number (`None`: blank) in this unit: `None` for a blank, one of DCGM's
    /// sentinels, or what does not convert to a finite number.
    #[inline]
    pub(crate) fn convert(self, raw: Option<f64>) -> Option<f64> {
        let raw = raw?;
        // Most values lie below the least blank of the unit's rule, and are finite: they
        // pass its rule, which is told without a call then.
        let least_blank = if self.is_int64() {
            crate::derive::INT64_BLANK
        } else {
            crate::derive::INT32_BLANK
        };
        let v = if raw < least_blank && raw > f64::NEG_INFINITY {
            raw
        } else {
            self.blank_rule(raw)?
        };
        Some(self.apply(v)).filter(|v| v.is_finite())
    }

    /// Whether the unit's raw values are DCGM INT64 counters': a cumulative count, or the
    /// energy counter in mJ.
    #[inline]
    const fn is_int64(self) -> bool {
        matches!(self, Unit::Count | Unit::Milli)
    }

    /// The unit's blank rule: [`count_value`] for an INT64 counter, else [`dcgm_value`].
    #[cold]
    #[inline(never)]
    pub(crate) fn blank_rule(self, raw: f64) -> Option<f64> {
        if self.is_int64() {
            count_value(raw)
        } else {
            dcgm_value(raw)
        }
    }

    #[inline]
    fn apply(self, v: f64) -> f64 {
        match self {
            Unit::Same => v,
            Unit::Percent => v / 100.0,
            Unit::Milli => v / 1000.0,
            Unit::Mib => v * MIB,
            Unit::Kilo => v * 1e3,
            Unit::Mega => v * 1e6,
            Unit::Megabit => v * 125_000.0,
            Unit::Hertz => v / 1e6,
            Unit::Count => v,
            // Decided before conversion; undecided is never converted.
            Unit::PercentOrRatio => f64::NAN,
        }
    }
}

const MIB: f64 = 1_048_576.0;

/// What a dmon column or an exporter metric feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// A field, converted from the source unit.
    Field(Field, Unit),
    /// Free framebuffer in the unit given (MiB, or bytes in DCGM 4.7 names): only completes
    /// the total.
    FbFree(Unit),
    /// Reserved framebuffer, likewise.
    FbReserved(Unit),
    /// A power limit that yields to an enforced limit read in the same sample.
    WeakPowerLimit,
    /// The clock-event ("throttle") reasons bitmask.
    Throttles,
    /// One link's value of a per-link counter, summed over the GPU's links (one series a
    /// link): a blank link blanks the sum, never a partial total.
    LinkSum(Field),
    /// One XID's count in the source's window (dcgm-exporter's `DCGM_EXP_XID_ERRORS_COUNT`,
    /// one series an XID, the code in its `xid` label): summed into
    /// [`Field::XidWindowErrors`], the fatal one counted most into [`Field::XidWindowFatal`]
    /// ([`Acc::count_xid`]).
    XidCount,
}

use Target::Field as F;

/// dcgmi short names. `MCUTL` is memory-copy utilization, not DRAM bandwidth, so it is
/// deliberately absent (ignored like any unknown column).
const COLUMNS: &[(&str, Target)] = &[
    ("GPUTL", F(Field::ReportedUtil, Unit::Percent)),
    ("GRACT", F(Field::GrActive, Unit::Same)),
    ("SMACT", F(Field::SmActive, Unit::Same)),
    ("SMOCC", F(Field::SmOccupancy, Unit::Same)),
    ("TENSO", F(Field::TensorActive, Unit::Same)),
    ("DRAMA", F(Field::DramActive, Unit::Same)),
    ("FP64A", F(Field::Fp64Active, Unit::Same)),
    ("FP32A", F(Field::Fp32Active, Unit::Same)),
    ("FP16A", F(Field::Fp16Active, Unit::Same)),
    ("PCITX", F(Field::PcieTxBytesPerSec, Unit::Same)),
    ("PCIRX", F(Field::PcieRxBytesPerSec, Unit::Same)),
    ("NVLTX", F(Field::NvlinkTxBytesPerSec, Unit::Same)),
    ("NVLRX", F(Field::NvlinkRxBytesPerSec, Unit::Same)),
    ("POWER", F(Field::PowerWatts, Unit::Same)),
    ("TOTEC", F(Field::EnergyJoules, Unit::Milli)),
    ("SMCLK", F(Field::SmClockMhz, Unit::Same)),
    ("MMCLK", F(Field::MemClockMhz, Unit::Same)),
    ("FBUSD", F(Field::MemUsedBytes, Unit::Mib)),
    ("FBFRE", Target::FbFree(Unit::Mib)),
    ("FBTTL", F(Field::MemTotalBytes, Unit::Mib)),
    ("TMPTR", F(Field::TempCelsius, Unit::Same)),
    // DCGM 4.6 cumulative counters (fields 1084-1096; `dcgmi dmon` short names from
    // `dcgmlib/src/dcgm_fields.cpp` at v4.6.0).
    ("SMCELAP", F(Field::SmCyclesElapsed, Unit::Count)),
    ("SMCACT", F(Field::SmCyclesActive, Unit::Count)),
    ("MMACACT", F(Field::MmaCyclesActive, Unit::Count)),
    ("HMMACACT", F(Field::HmmaCyclesActive, Unit::Count)),
    ("IMMACACT", F(Field::ImmaCyclesActive, Unit::Count)),
    ("FP64CACT", F(Field::Fp64CyclesActive, Unit::Count)),
    ("FP32CACT", F(Field::Fp32CyclesActive, Unit::Count)),
    ("FP16CACT", F(Field::Fp16CyclesActive, Unit::Count)),
];

/// What a unit measures: a unit declared for a column must measure what the column's field
/// does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quantity {
    Power,
    Temperature,
    Energy,
    Clock,
    Ratio,
    ByteRate,
    Bytes,
}

/// The units a dmon units line may declare, what each measures, and how a value in it
/// converts into the field's canonical unit. DCGM v4.6.0 prints ` C`, ` W`, ` mJ`, `KB/s`,
/// `MB/s` and `Mb/s`; the others only state the canonical scale, and are accepted so that a
/// units line that spells it out is not refused.
const UNITS: &[(&str, Quantity, Unit)] = &[
    ("W", Quantity::Power, Unit::Same),
    ("C", Quantity::Temperature, Unit::Same),
    ("mJ", Quantity::Energy, Unit::Milli),
    ("J", Quantity::Energy, Unit::Same),
    ("MHz", Quantity::Clock, Unit::Same),
    ("Hz", Quantity::Clock, Unit::Hertz),
    ("MiB", Quantity::Bytes, Unit::Mib),
    ("B", Quantity::Bytes, Unit::Same),
    ("%", Quantity::Ratio, Unit::Percent),
    ("B/s", Quantity::ByteRate, Unit::Same),
    ("KB/s", Quantity::ByteRate, Unit::Kilo),
    ("MB/s", Quantity::ByteRate, Unit::Mega),
    ("Mb/s", Quantity::ByteRate, Unit::Megabit),
];

/// What `field` measures, for the units that may be declared for it (`None`: no unit).
fn quantity(field: Field) -> Option<Quantity> {
    match field {
        Field::PowerWatts | Field::PowerLimitWatts => Some(Quantity::Power),
        Field::TempCelsius => Some(Quantity::Temperature),
        Field::MemUsedBytes | Field::MemTotalBytes => Some(Quantity::Bytes),
        Field::EnergyJoules => Some(Quantity::Energy),
        Field::SmClockMhz | Field::MemClockMhz => Some(Quantity::Clock),
        Field::PcieTxBytesPerSec
        | Field::PcieRxBytesPerSec
        | Field::NvlinkTxBytesPerSec
        | Field::NvlinkRxBytesPerSec => Some(Quantity::ByteRate),
        f if f.is_ratio() => Some(Quantity::Ratio),
        _ => None,
    }
}

/// A column's target once the units line declared `unit` (trimmed; empty: none) for it. No
/// unit leaves the column's default scale; a unit sets the scale of its values, and must
/// be one of [`UNITS`] that measures what the column feeds. A column that is not read takes
/// any unit.
fn with_unit(target: Option<Target>, unit: &str) -> Result<Option<Target>, String> {
    let Some(target) = target else {
        return Ok(None);
    };
    if unit.is_empty() {
        return Ok(Some(target));
    }
    let Some(&(_, measures, scale)) = UNITS.iter().find(|(u, ..)| *u == unit) else {
        return Err(format!("unknown unit `{unit}`"));
    };
    match target {
        Target::Field(f, _) if quantity(f) == Some(measures) => Ok(Some(Target::Field(f, scale))),
        Target::Field(f, _) => Err(format!("unit `{unit}` does not fit {}", f.name())),
        Target::FbFree(_) if measures == Quantity::Bytes => Ok(Some(Target::FbFree(scale))),
        _ => Err(format!("unit `{unit}` does not fit this column")),
    }
}

/// A raw DCGM number, or `None` when it is one of DCGM's blank sentinels or not finite.
#[inline]
pub fn dcgm_value(raw: f64) -> Option<f64> {
    const TWO_POW_47: f64 = 140_737_488_355_328.0;
    // Below the smallest sentinel and finite: most values.
    if raw < 2_147_483_632.0 && raw > f64::NEG_INFINITY {
        return Some(raw);
    }
    let int_sentinel = ((2_147_483_632.0..=2_147_483_647.0).contains(&raw)
        || raw == 4_294_967_295.0)
        && raw.fract() == 0.0;
    (raw.is_finite() && !int_sentinel && raw < TWO_POW_47).then_some(raw)
}

/// A raw cumulative INT64 counter, or `None` when it is one of DCGM's INT64 blanks or not
/// finite: a counter passes the INT32 band and 2^47 (the FP64 blank) as it counts.
#[inline]
pub fn count_value(raw: f64) -> Option<f64> {
    (raw.is_finite() && !crate::derive::is_sentinel_of(Field::SmCyclesElapsed, raw)).then_some(raw)
}

/// A [`ParseError`] at `line` of `file`.
pub(crate) fn error(file: &str, line: usize, message: String) -> ParseError {
    ParseError {
        file: file.to_owned(),
        line,
        message,
    }
}

/// The time of sweep or scrape `k`.
pub(crate) fn nth_time(start: Timestamp, k: u64, interval_secs: f64) -> Timestamp {
    let ms = (k as f64 * interval_secs * 1000.0).round() as i64;
    Timestamp(start.0.saturating_add(ms))
}

/// One entity's readings while they are being gathered.
#[derive(Debug)]
pub(crate) struct Acc {
    pub(crate) sample: EntitySample,
    extra: Extra,
}

/// What completes an entity's readings once they are all read.
#[derive(Debug, Default)]
pub(crate) struct Extra {
    fb_free: Option<f64>,
    fb_reserved: Option<f64>,
    /// A link of the per-link counter (the NVLink transmit wait, the one read) was blank.
    link_blank: bool,
    /// The XIDs counted in the source's window, all together, and the fatal one counted
    /// most with its count (the lowest code on a tie).
    xids: Option<(f64, Option<(u32, f64)>)>,
    /// The fields a series gave a value ([`Acc::apply_series`]), one bit each.
    given: u64,
    /// The fields two series gave values that disagree, one bit each: left blank.
    disagreed: u64,
    /// The links and XIDs a series gave a count of ([`Acc::apply_part`]), by family and its
    /// `link` or `xid` label, with the raw count: a second series of one of them (a second
    /// exporter reading the GPU) is the same count, not one more.
    parts: Vec<(Target, u32, f64)>,
}

/// How one series' reading was taken ([`Acc::apply_series`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Read, or a blank left blank.
    Read,
    /// A value no GPU gives ([`Acc::apply`]), left blank.
    Impossible,
    /// It disagrees with another series' reading of the same field of the same GPU: the
    /// field is left blank, counting the readings (2 at the first disagreement, each one
    /// after it 1).
    Disagrees(u64),
}

/// Whether two readings of one field (each converted to its unit) are one: the same within
/// a thousandth (of the larger, or of 0.1 below it: 0 and 0.0001 agree), so that two
/// families of one reading in different units (MiB and bytes) agree.
fn agree(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-3 * a.abs().max(b.abs()).max(0.1)
}

impl Acc {
    pub(crate) fn new(id: EntityId) -> Acc {
        Acc {
            sample: Acc::blank(id),
            extra: Extra::default(),
        }
    }

    /// An entity's sample before any reading.
    pub(crate) fn blank(id: EntityId) -> EntitySample {
        EntitySample {
            id,
            // dmon rows and dcgm-exporter scrapes read the clock at one instant.
            sm_clock_is_point: true,
            ..EntitySample::default()
        }
    }

    /// Record a raw value (`None`: blank) for `target`. Sentinels and values that do not
    /// convert to a finite number stay blank. Returns whether the value was one no GPU
    /// gives ([`Extra::apply`]), left blank, for the caller to count.
    #[must_use]
    pub(crate) fn apply(&mut self, target: Target, raw: Option<f64>) -> bool {
        self.extra.apply(&mut self.sample, target, raw)
    }

    /// [`Acc::apply`] for one series of a scrape of many: a field another series of the same
    /// GPU already gave (two exporters reading one GPU, say) keeps its reading where the two
    /// agree; where they disagree, neither is known to be the GPU's, and whichever came last
    /// was kept in silence, so the field is left blank for the scrape.
    #[must_use]
    pub(crate) fn apply_series(&mut self, target: Target, raw: f64) -> Taken {
        if let Target::Field(f, unit) = target
            && let Some(v) = unit.convert(Some(raw))
        {
            let bit = 1u64 << f as u32;
            if self.extra.disagreed & bit != 0 {
                return Taken::Disagrees(1);
            }
            if self.extra.given & bit != 0
                && let Some(before) = self.sample.readings.value(f)
                && !agree(before, v)
            {
                self.extra.disagreed |= bit;
                self.sample.readings.set(f, Reading::Blank);
                return Taken::Disagrees(2);
            }
            self.extra.given |= bit;
        }
        if self.apply(target, Some(raw)) {
            Taken::Impossible
        } else {
            Taken::Read
        }
    }

    /// [`Acc::apply_series`] for a series of a family with one series a link or an XID
    /// ([`Target::LinkSum`], [`Target::XidCount`]), `key` its `link` or `xid` label: another
    /// series of the same link or XID of the same GPU (two exporters reading it) is the same
    /// count, not one more, where the two agree; where they disagree, neither is known to be
    /// the GPU's, and the sum is left blank for the scrape. Series without the label cannot
    /// be told apart, and are summed.
    #[must_use]
    pub(crate) fn apply_part(&mut self, target: Target, key: Option<u32>, raw: f64) -> Taken {
        let sum = match target {
            Target::LinkSum(f) => f,
            _ => Field::XidWindowErrors,
        };
        let bit = 1u64 << sum as u32;
        if self.extra.disagreed & bit != 0 {
            return Taken::Disagrees(1);
        }
        if let Some(k) = key.filter(|_| raw.is_finite()) {
            let same = |(t, at, _): &&(Target, u32, f64)| *t == target && *at == k;
            if let Some(&(_, _, before)) = self.extra.parts.iter().find(same) {
                if agree(before, raw) {
                    return Taken::Read;
                }
                self.extra.disagreed |= bit;
                return Taken::Disagrees(2);
            }
            self.extra.parts.push((target, k, raw));
        }
        let impossible = match target {
            Target::XidCount => self.count_xid(key, raw),
            _ => self.apply(target, Some(raw)),
        };
        if impossible {
            Taken::Impossible
        } else {
            Taken::Read
        }
    }

    /// Add one XID's count in the source's window ([`Target::XidCount`]): `xid` from the
    /// series' `xid` label (`None`: none, or not a number, which counts to the total only).
    /// A blank or negative count is left out; returns whether it was negative (no count
    /// is), for the caller to count.
    #[must_use]
    pub(crate) fn count_xid(&mut self, xid: Option<u32>, raw: f64) -> bool {
        let Some(n) = dcgm_value(raw) else {
            return false;
        };
        if n < 0.0 {
            return true;
        }
        let (total, fatal) = self.extra.xids.get_or_insert((0.0, None));
        *total += n;
        let Some(x) = xid.filter(|x| n > 0.0 && crate::health::fatal_xid(f64::from(*x)).is_some())
        else {
            return false;
        };
        let better = match *fatal {
            None => true,
            Some((code, count)) => n > count || (n == count && x < code),
        };
        if better {
            *fatal = Some((x, n));
        }
        false
    }

    /// The finished sample; the total memory is completed from used + free (+ reserved)
    /// when no total was read.
    pub(crate) fn finish(mut self) -> EntitySample {
        self.extra.complete(&mut self.sample);
        self.sample
    }
}

/// Keep a memory size `v` in `slot` where it is one (not negative); else leave the slot
/// blank and say so.
fn possible(slot: &mut Option<f64>, v: Option<f64>) -> bool {
    let negative = v.is_some_and(|v| v < 0.0);
    *slot = v.filter(|_| !negative);
    negative
}

impl Extra {
    /// [`Acc::apply`] on `sample`: whether the value was one no GPU gives (negative free
    /// or reserved memory, a negative link value, a clock-event bitmask that is negative or
    /// no whole number), left blank. A field's own impossible values are
    /// [`crate::derive::sanitize`]'s to find.
    #[inline]
    pub(crate) fn apply(
        &mut self,
        sample: &mut EntitySample,
        target: Target,
        raw: Option<f64>,
    ) -> bool {
        let v = raw.and_then(dcgm_value);
        let r = &mut sample.readings;
        match target {
            // A blank never erases a value an alias of the same field already gave.
            Target::Field(f, unit) => {
                if let Some(v) = unit.convert(raw) {
                    r.set_value(f, v);
                }
            }
            Target::WeakPowerLimit => {
                if let (Reading::Blank, Some(v)) = (r.get(Field::PowerLimitWatts), v) {
                    r.set_value(Field::PowerLimitWatts, v);
                }
            }
            Target::FbFree(unit) => return possible(&mut self.fb_free, unit.convert(raw)),
            Target::FbReserved(unit) => {
                return possible(&mut self.fb_reserved, unit.convert(raw));
            }
            Target::Throttles => match v {
                Some(m) if m >= 0.0 && m.fract() == 0.0 => {
                    sample.throttles = Some(Throttles::from_event_bits(m as u64));
                }
                Some(_) => return true,
                None => {}
            },
            Target::LinkSum(f) => {
                match raw.filter(|x| x.is_finite() && !crate::derive::is_sentinel_of(f, *x)) {
                    Some(x) if x >= 0.0 => {
                        r.set_value(f, r.value(f).unwrap_or(0.0) + x);
                        sample.nvlink_wait_links = sample.nvlink_wait_links.saturating_add(1);
                    }
                    negative => {
                        self.link_blank = true;
                        return negative.is_some();
                    }
                }
            }
            // Needs the series' `xid` label: [`Acc::count_xid`].
            Target::XidCount => {}
        }
        false
    }

    /// [`Acc::finish`] on `sample`.
    pub(crate) fn complete(&self, sample: &mut EntitySample) {
        let r = &mut sample.readings;
        let disagreed = |f: Field| self.disagreed & (1u64 << f as u32) != 0;
        if self.link_blank || disagreed(Field::NvlinkTxWaitTotal) {
            r.set(Field::NvlinkTxWaitTotal, Reading::Blank);
        }
        if let Some((total, fatal)) = self.xids.filter(|_| !disagreed(Field::XidWindowErrors)) {
            r.set_value(Field::XidWindowErrors, total);
            r.set_value(
                Field::XidWindowFatal,
                fatal.map_or(0.0, |(x, _)| f64::from(x)),
            );
        }
        // A negative used memory is no reading (sanitizing blanks and counts it): no total
        // is made of it.
        if let (Reading::Blank, Some(used), Some(free)) = (
            r.get(Field::MemTotalBytes),
            r.value(Field::MemUsedBytes).filter(|u| *u >= 0.0),
            self.fb_free,
        ) {
            // Free and reserved are in bytes; reserved completes the sum where it is read.
            let total = used + free + self.fb_reserved.unwrap_or(0.0);
            if total.is_finite() {
                r.set_value(Field::MemTotalBytes, total);
            }
        }
    }
}

/// The entity kinds `dcgmi dmon` prints for GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gpu,
    GpuInstance,
    ComputeInstance,
}

/// Line-at-a-time parser for `dcgmi dmon` output.
#[derive(Debug)]
pub struct DmonParser {
    file: String,
    interval_secs: f64,
    start: Timestamp,
    line: usize,
    skipped: u64,
    /// The current header's columns; `None` until the first header.
    columns: Option<Vec<Option<Target>>>,
    /// The columns' fields ([`Field::COUNT`]: a column not read), when every column is a
    /// field's or not read, as most are: a row is then written in one step
    /// ([`crate::model::Readings::set_values`]).
    plain: Option<Vec<u8>>,
    /// The rows of the current sweep: the first `rows`; any after them are kept only to be
    /// written over.
    sweep: Vec<EntitySample>,
    rows: usize,
    /// A vector of rows handed back ([`DmonParser::recycle`]) for the next sweep.
    spare: Option<Vec<EntitySample>>,
    /// The values of the line being read.
    values: Vec<f64>,
    /// Scans the lines of [`DmonParser::push_line`].
    scanner: Scanner,
    seen: Seen,
    /// The rows of the longest sweep so far, in the order the capture printed them: a row
    /// at or before the current sweep's last in this order starts the next sweep, though
    /// its entity's row of this one was lost (a malformed line).
    order: Vec<RowKey>,
    /// Where the current sweep's last row lies in `order`.
    order_pos: Option<usize>,
    /// A header came since the sweep being gathered began: a new run may print its rows in
    /// another order, so `order` is learned again from the next sweep, not this one.
    order_stale: bool,
    /// The last GPU row, and the last GPU-I row (its GPU, its id): the parents of the
    /// GPU-I and GPU-CI rows that follow them.
    ctx_gpu: Option<u32>,
    ctx_gi: Option<(Option<u32>, u32)>,
    sweeps: u64,
    /// The columns of the headers seen that are not read, and the readings left blank.
    unread: Unread,
    /// The latest header's column names.
    names: Vec<String>,
}

impl DmonParser {
    /// The header columns seen so far that are not read.
    #[must_use]
    pub fn unread(&self) -> &Unread {
        &self.unread
    }

    /// A parser for the input named `file`; sweep `k` is stamped `start + k * interval_secs`.
    #[must_use]
    pub fn new(file: &str, interval_secs: f64, start: Timestamp) -> Self {
        DmonParser {
            file: file.to_owned(),
            interval_secs,
            start,
            line: 0,
            skipped: 0,
            columns: None,
            plain: None,
            sweep: Vec::new(),
            rows: 0,
            spare: None,
            values: Vec::new(),
            scanner: Scanner::default(),
            seen: Seen::default(),
            order: Vec::new(),
            order_pos: None,
            order_stale: false,
            ctx_gpu: None,
            ctx_gi: None,
            sweeps: 0,
            unread: Unread::default(),
            names: Vec::new(),
        }
    }

    /// Feed the next line (without its newline). Returns the previous sweep when this
    /// line starts a new one.
    ///
    /// # Errors
    /// A [`ParseError`] for a malformed row after a header: more values than columns, or
    /// fewer that do not lie under the header's column names, a value that is neither a
    /// number nor `N/A`, an unknown entity kind, or a `GPU-CI` row with no `GPU-I` row
    /// before it. The parser is unchanged by a bad row and stays usable. A units line that
    /// declares a unit this parser does not know, or one that does not fit its column, is
    /// an error naming the column, whose values are then not read until the next header;
    /// one whose units do not lie under the header's names is an error too, and the
    /// columns keep their default scales.
    pub fn push_line(&mut self, line: &str) -> Result<Option<Sample>, ParseError> {
        let mut values = std::mem::take(&mut self.values);
        values.clear();
        let line = self.scanner.scan(line, &mut values);
        let r = self.push_scanned(line, &values);
        self.values = values;
        r
    }

    /// [`DmonParser::push_line`] for a line already read by a [`Scanner`] (fed the same
    /// lines), with the values it appended for it.
    ///
    /// # Errors
    /// As [`DmonParser::push_line`].
    pub fn push_scanned(
        &mut self,
        line: Scanned,
        values: &[f64],
    ) -> Result<Option<Sample>, ParseError> {
        self.line += 1;
        let blanked = line.blanked();
        let Some((kind, n)) = self.row_of(line)? else {
            return Ok(None);
        };
        let expected = self.columns.as_ref().map_or(0, Vec::len);
        if values.len() != expected {
            let m = format!("expected {expected} values, found {}", values.len());
            return Err(error(&self.file, self.line, m));
        }
        let mig = self.mig_of(kind, n)?;
        if blanked {
            count_blanked(&mut self.unread, &self.names, values);
        }
        // The row is well formed from here on. An entity already in the sweep starts the
        // next one.
        let key = match mig {
            None => row_key(Some(n), None, None),
            Some((gpu, gi, ci)) => row_key(gpu, Some(gi), ci),
        };
        let done = self.sweep_of(key);
        // The row is gathered where it lies in the sweep, over a row kept there when there
        // is one.
        let columns = self.columns.as_deref().unwrap_or_default();
        let sample = match self.sweep.get_mut(self.rows) {
            Some(row) => {
                clear_row(row);
                row
            }
            None => {
                self.sweep.push(Acc::blank(EntityId::default()));
                let Some(row) = self.sweep.last_mut() else {
                    return Ok(done);
                };
                row
            }
        };
        if let Some(fields) = &self.plain {
            // Every column a field's value, converted by the scanner (NaN when blank): no
            // column completes the readings.
            sample.readings.set_values(fields, values);
        } else {
            let unread = (&self.names[..], &mut self.unread);
            gather_columns(sample, columns, values, unread).complete(sample);
        }
        let id = &mut sample.id;
        (id.gpu, id.mig) = match mig {
            None => (Some(n), None),
            Some((gpu, gpu_instance, compute_instance)) => (
                gpu,
                Some(MigId {
                    gpu_instance,
                    compute_instance,
                    profile: None,
                    uuid: None,
                }),
            ),
        };
        match kind {
            Kind::Gpu => (self.ctx_gpu, self.ctx_gi) = (Some(n), None),
            Kind::GpuInstance => self.ctx_gi = Some((self.ctx_gpu, n)),
            Kind::ComputeInstance => {}
        }
        self.rows += 1;
        self.seen.insert(key);
        Ok(done)
    }

    /// Read the rows that follow under `columns`.
    fn set_columns(&mut self, columns: Vec<Option<Target>>) {
        self.plain = columns
            .iter()
            .map(|target| match target {
                Some(Target::Field(f, _)) => u8::try_from(*f as usize).ok(),
                None => u8::try_from(Field::COUNT).ok(),
                Some(_) => None,
            })
            .collect();
        self.columns = Some(columns);
    }

    /// What a scanned line is to the parser: a row's kind and number, or `None` for a
    /// structure line (a header or units line sets the columns) or one skipped.
    #[inline]
    fn row_of(&mut self, line: Scanned) -> Result<Option<(Kind, u32)>, ParseError> {
        match line.line() {
            Line::Header(columns, names) => {
                for (name, _) in names.iter().zip(&columns).filter(|(_, t)| t.is_none()) {
                    self.unread.family(name);
                }
                self.set_columns(columns);
                self.names = names;
                (self.order_pos, self.order_stale) = (None, self.rows > 0);
                self.order.clear();
                Ok(None)
            }
            Line::Units(columns, problem) => {
                self.set_columns(columns);
                match problem {
                    None => Ok(None),
                    Some(m) => Err(error(&self.file, self.line, m)),
                }
            }
            _ if self.columns.is_none() => {
                self.skipped += 1;
                Ok(None)
            }
            Line::Blank => {
                self.skipped += 1;
                Ok(None)
            }
            Line::Id => Ok(None),
            Line::Bad(m) => Err(error(&self.file, self.line, m)),
            Line::Row(kind, n) => Ok(Some((kind, n))),
        }
    }

    /// A MIG row's GPU, GPU instance and compute instance, from the rows before it (`None`
    /// for a GPU row).
    #[inline]
    #[expect(
        clippy::type_complexity,
        reason = "the three parts of a MIG row's place"
    )]
    fn mig_of(
        &self,
        kind: Kind,
        n: u32,
    ) -> Result<Option<(Option<u32>, u32, Option<u32>)>, ParseError> {
        Ok(match kind {
            Kind::Gpu => None,
            Kind::GpuInstance => Some((self.ctx_gpu, n, None)),
            Kind::ComputeInstance => match self.ctx_gi {
                Some((gpu, gi)) => Some((gpu, gi, Some(n))),
                None => {
                    let m = "gpu-ci row without a preceding gpu-i row".to_string();
                    return Err(error(&self.file, self.line, m));
                }
            },
        })
    }

    /// Hand back the entities of a sample this parser gave: their memory is written over
    /// for the sweeps to come instead of new memory taken.
    pub fn recycle(&mut self, entities: Vec<EntitySample>) {
        if entities.capacity() > self.sweep.capacity() / 2 {
            self.spare = Some(entities);
        }
    }

    /// End of input: the last, possibly partial, sweep.
    pub fn finish(&mut self) -> Option<Sample> {
        self.end_sweep()
    }

    /// Lines skipped as not data: anything before the first header, blank lines and
    /// comments, rows of entities other than GPUs and their instances (switches, CPUs,
    /// ConnectX cards, vGPUs), and dmon's closing message after a signal. Header and `ID`
    /// (units) lines are structure and not counted.
    #[must_use]
    pub fn skipped_lines(&self) -> u64 {
        self.skipped
    }

    /// The sweep row `key` ends, where it starts the next one (an entity already in it, or
    /// one that comes before its last row in `order`), with the row placed in `order`.
    #[inline(always)]
    fn sweep_of(&mut self, key: RowKey) -> Option<Sample> {
        // Most rows come where `order` expects them: then not in the sweep yet (its rows
        // lie at or before the last in `order`, or are not in it), so not looked for.
        let next = self.order_pos.map_or(0, |p| p + 1);
        let expected = self.order.get(next) == Some(&key);
        if expected {
            self.order_pos = Some(next);
            return None;
        }
        let done = if self.seen.contains(&key) || self.comes_before(key) {
            self.end_sweep()
        } else {
            None
        };
        self.place(key, done.is_some());
        done
    }

    /// Whether row `key`, not the one `order` expects next, lies at or before the current
    /// sweep's last row in [`DmonParser`]'s `order`: a row of the next sweep.
    #[cold]
    fn comes_before(&self, key: RowKey) -> bool {
        self.order_pos
            .is_some_and(|p| self.order.get(..=p).is_some_and(|o| o.contains(&key)))
    }

    /// Row `key` placed in `order` where it is not the row expected next (the first of a
    /// sweep where `new_sweep`): where it lies there, or the last place kept for a row the
    /// order does not hold.
    #[cold]
    fn place(&mut self, key: RowKey, new_sweep: bool) {
        self.order_pos = match self.order.iter().position(|k| *k == key) {
            Some(q) => Some(q),
            None if new_sweep => None,
            None => self.order_pos,
        };
    }

    /// The sweep so far, as a sample; its rows teach `order` where it is the longest yet
    /// (not one that straddles a header).
    fn end_sweep(&mut self) -> Option<Sample> {
        let stale = std::mem::take(&mut self.order_stale);
        if !stale && self.seen.rows.len() >= self.order.len() && self.seen.rows != self.order {
            self.order.clone_from(&self.seen.rows);
        }
        self.order_pos = None;
        self.seen.clear();
        if self.rows == 0 {
            return None;
        }
        let taken = nth_time(self.start, self.sweeps, self.interval_secs);
        self.sweeps += 1;
        // The next sweep most likely has as many rows.
        let next = match self.spare.take() {
            Some(v) => v,
            None => Vec::with_capacity(self.rows),
        };
        let mut entities = std::mem::replace(&mut self.sweep, next);
        entities.truncate(self.rows);
        self.rows = 0;
        Some(Sample { taken, entities })
    }
}

/// A row kept for reuse, made blank again.
fn clear_row(row: &mut EntitySample) {
    if row.id.uuid.is_some()
        || row.id.model.is_some()
        || row.id.pci_bus_id.is_some()
        || row.id.pod.is_some()
        || row.id.node.is_some()
        || row.serving.is_some()
        || !row.processes.is_empty()
        || row.allocation.is_some()
    {
        *row = Acc::blank(EntityId::default());
        return;
    }
    row.readings.clear();
    row.throttles = None;
    row.truth_phase = None;
    row.truth_workload = None;
    row.truth_effective_compute = None;
    row.simulated = false;
    row.sm_clock_is_point = true;
}

/// One line of `dcgmi dmon` output as a [`Scanner`] read it: the first of the parser's two
/// steps, [`Scanner::scan`] then [`DmonParser::push_scanned`], which a reader may take on
/// another thread than the second.
///
/// Two words, what is rare behind the pointer: it is returned in registers, not written to
/// memory and read back at once (a read that waits for the writes to land when it spans
/// more than one of them).
#[derive(Debug, Clone, PartialEq)]
pub struct Scanned {
    /// What the line is ([`Scanned::line`]), and a row's entity: the kind in the second
    /// byte, the id in the upper half.
    word: u64,
    /// A header's columns, or why a row does not read.
    rare: Option<Box<Rare>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Rare {
    Header(Vec<Option<Target>>, Vec<String>),
    Units(Vec<Option<Target>>, Option<String>),
    Bad(String),
}

/// What a line is.
#[derive(Debug, Clone, PartialEq)]
enum Line {
    /// A header: the columns' targets and names (a column without one is not read).
    Header(Vec<Option<Target>>, Vec<String>),
    /// The units line under a header: the header's columns with the units it declares,
    /// and what in it does not read (those columns are not read).
    Units(Vec<Option<Target>>, Option<String>),
    /// Blank, or a comment.
    Blank,
    /// An `ID` line with no units.
    Id,
    /// A row, its values appended.
    Row(Kind, u32),
    /// A row that does not read.
    Bad(String),
}

impl Scanned {
    const BLANK: u64 = 0;
    const ID: u64 = 1;
    const ROW: u64 = 2;
    const RARE: u64 = 3;
    /// On a row: a value of it was refused by its unit's blank rule (handed on as
    /// [`SENTINEL`]), for the parser to count.
    const BLANKED: u64 = 1 << 16;

    fn of(line: Line) -> Scanned {
        let (word, rare) = match line {
            Line::Blank => (Scanned::BLANK, None),
            Line::Id => (Scanned::ID, None),
            Line::Row(kind, n) => (Scanned::ROW | (kind as u64) << 8 | u64::from(n) << 32, None),
            Line::Header(columns, names) => (Scanned::RARE, Some(Rare::Header(columns, names))),
            Line::Units(columns, m) => (Scanned::RARE, Some(Rare::Units(columns, m))),
            Line::Bad(m) => (Scanned::RARE, Some(Rare::Bad(m))),
        };
        Scanned {
            word,
            rare: rare.map(Box::new),
        }
    }

    /// Whether the line is a row that reads.
    #[inline]
    fn is_row(&self) -> bool {
        self.word & 0xff == Scanned::ROW
    }

    /// Whether the line is a row with a value its unit's blank rule refused.
    #[inline]
    fn blanked(&self) -> bool {
        self.is_row() && self.word & Scanned::BLANKED != 0
    }

    fn line(self) -> Line {
        match (self.word & 0xff, self.rare) {
            (_, Some(rare)) => match *rare {
                Rare::Header(columns, names) => Line::Header(columns, names),
                Rare::Units(columns, m) => Line::Units(columns, m),
                Rare::Bad(m) => Line::Bad(m),
            },
            (Scanned::ROW, None) => {
                let kind = match (self.word >> 8) & 0xff {
                    0 => Kind::Gpu,
                    1 => Kind::GpuInstance,
                    _ => Kind::ComputeInstance,
                };
                Line::Row(kind, (self.word >> 32) as u32)
            }
            (Scanned::ID, None) => Line::Id,
            _ => Line::Blank,
        }
    }
}

/// The first of the parser's two steps, [`Scanner::scan`] then
/// [`DmonParser::push_scanned`], which a reader may take on another thread than the second:
/// each line read on its own, and a row's values converted into their fields' units as the
/// latest header's columns (and the units line under it) say.
///
/// dmon lays its columns out by position: each field's name, its unit on the line under it,
/// and its values lie in the same span of columns. The header's spans are kept to read the
/// units line, and a row with fewer values than columns (a field dmon left blank); rows with
/// a value for every column, nearly all of them, are read by their words alone.
#[derive(Debug, Default)]
pub struct Scanner {
    columns: Option<Vec<Option<Target>>>,
    /// The latest header's column names, each with its byte offset in the header line.
    names: Vec<(usize, String)>,
    /// Whether the line before was a header, which the units line follows.
    after_header: bool,
}

impl Scanner {
    /// Read `line` (without its newline) on its own. A row's values are appended to
    /// `values`, converted as they are: each value of a field's column into the field's
    /// unit, NaN when it is `N/A`, blank, one of DCGM's blank sentinels or not finite once
    /// converted; other columns' values as read (`N/A` and blank as NaN). Nothing is
    /// appended for any other line, or for a row that does not read.
    pub fn scan(&mut self, line: &str, values: &mut Vec<f64>) -> Scanned {
        if self.after_header {
            self.after_header = false;
            if let Some(scanned) = self.units_line(line) {
                return scanned;
            }
        }
        let start = values.len();
        let columns = self.columns.as_deref().unwrap_or_default();
        let mut blanked = false;
        let mut scanned = scan_with(line, values, columns, &mut blanked);
        if values.len() - start < columns.len() && scanned.is_row() {
            scan_by_position(line, &self.names, columns, values, (start, &mut blanked));
        }
        if scanned.rare.is_some() {
            scanned = self.rare_line(line, values, (start, &mut blanked), scanned);
        }
        if blanked && scanned.is_row() {
            scanned.word |= Scanned::BLANKED;
        }
        scanned
    }

    /// A header (its columns kept for the rows under it), or a row that does not read, read
    /// again where its columns not read hold text ([`scan_text_columns`]).
    #[cold]
    #[inline(never)]
    fn rare_line(
        &mut self,
        line: &str,
        values: &mut Vec<f64>,
        at: (usize, &mut bool),
        scanned: Scanned,
    ) -> Scanned {
        match scanned.rare.as_deref() {
            Some(Rare::Header(columns, _)) => {
                self.columns = Some(columns.clone());
                self.names = column_names(line);
                self.after_header = true;
            }
            Some(Rare::Bad(_)) => {
                let columns = self.columns.as_deref().unwrap_or_default();
                if let Some((kind, n)) = scan_text_columns(line, &self.names, columns, values, at) {
                    return Scanned::of(Line::Row(kind, n));
                }
            }
            _ => {}
        }
        scanned
    }

    /// The line right after a header, when it is a units line (`ID`, then at least one
    /// unit): the header's columns with the units it declares under their names.
    #[cold]
    #[inline(never)]
    fn units_line(&mut self, line: &str) -> Option<Scanned> {
        let mut words = line.split_whitespace();
        if !words.next()?.eq_ignore_ascii_case("ID") || words.next().is_none() {
            return None;
        }
        let columns = self.columns.as_deref()?;
        let (columns, problem) = read_units(line, &self.names, columns);
        self.columns = Some(columns.clone());
        Some(Scanned::of(Line::Units(columns, problem)))
    }
}

/// The words of `line`, split as `str::split_whitespace` splits them, each with its byte
/// offset in the line.
fn words_at(line: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut rest = line;
    std::iter::from_fn(move || {
        let word = rest.trim_start();
        if word.is_empty() {
            return None;
        }
        let at = line.len() - word.len();
        let (word, after) = word.split_at(word.find(char::is_whitespace).unwrap_or(word.len()));
        rest = after;
        Some((at, word))
    })
}

/// A header's column names (the words after `#Entity` or `# Entity`, as the header is read),
/// each with its byte offset in the line.
fn column_names(line: &str) -> Vec<(usize, String)> {
    let t = line.trim_start();
    let rest = t.strip_prefix('#').unwrap_or(t).trim_start();
    let rest = rest.strip_prefix("Entity").unwrap_or_default();
    let skip = line.len() - rest.len();
    words_at(rest)
        .map(|(at, w)| (skip + at, w.to_owned()))
        .collect()
}

/// The column (its index) whose span holds byte `at` of a line: from its name's offset to
/// the next name's. `None` before the first name.
fn column_at(names: &[(usize, String)], at: usize) -> Option<usize> {
    names
        .partition_point(|(start, _)| *start <= at)
        .checked_sub(1)
}

/// Where column `k`'s span ends (exclusive).
fn column_end(names: &[(usize, String)], k: usize) -> usize {
    names.get(k + 1).map_or(usize::MAX, |(start, _)| *start)
}

/// The words of a line after its label (the words before the first column), each with the
/// column whose span holds it, when every word lies in one column's span and no two in the
/// same one; `None` otherwise, or when the label is not `label` words.
fn words_in_columns<'a>(
    line: &'a str,
    names: &[(usize, String)],
    label: usize,
) -> Option<Vec<(usize, &'a str)>> {
    let first = names.first().map_or(usize::MAX, |(start, _)| *start);
    let mut labels = 0;
    let mut out: Vec<(usize, &str)> = Vec::new();
    for (at, word) in words_at(line) {
        let end = at + word.len();
        let Some(k) = column_at(names, at) else {
            labels += 1;
            if end > first {
                return None;
            }
            continue;
        };
        if end > column_end(names, k) || out.last().is_some_and(|(last, _)| *last >= k) {
            return None;
        }
        out.push((k, word));
    }
    (labels == label).then_some(out)
}

/// A units line's units read under the header's column names: the columns with the scale
/// each declares ([`with_unit`]), and what does not read. A column whose unit does not read
/// is not read; when the units do not lie under the names, the columns are left as they are.
fn read_units(
    line: &str,
    names: &[(usize, String)],
    columns: &[Option<Target>],
) -> (Vec<Option<Target>>, Option<String>) {
    let mut out = columns.to_vec();
    let Some(units) = words_in_columns(line, names, 1) else {
        let m = "units line: its units do not lie under the column names of the header above";
        return (out, Some(m.to_owned()));
    };
    let mut problems = Vec::new();
    for (k, unit) in units {
        let (Some(target), Some((_, name))) = (out.get_mut(k), names.get(k)) else {
            continue;
        };
        match with_unit(*target, unit) {
            Ok(t) => *target = t,
            Err(m) => {
                *target = None;
                problems.push(format!("column {name}: {m}; its values are not read"));
            }
        }
    }
    (out, (!problems.is_empty()).then(|| problems.join("; ")))
}

/// A row with fewer values than columns, read again by the columns' positions: each word
/// the value of the column whose span holds it, and a column without one blank. The values
/// appended from `start` are replaced when every word lies in one column's span after the
/// entity; otherwise they are left as they are (and the parser reports the count).
#[cold]
#[inline(never)]
fn scan_by_position(
    line: &str,
    names: &[(usize, String)],
    columns: &[Option<Target>],
    values: &mut Vec<f64>,
    (start, blanked): (usize, &mut bool),
) {
    if names.len() != columns.len() {
        return;
    }
    let Some(words) = words_in_columns(line, names, 2) else {
        return;
    };
    let mut raw = vec![NA; columns.len()];
    for (k, word) in words {
        let v = match word {
            "N/A" => NA,
            w => match number(w) {
                Some(v) => v,
                None => return,
            },
        };
        if let Some(slot) = raw.get_mut(k) {
            *slot = v;
        }
    }
    values.truncate(start);
    for (k, v) in raw.into_iter().enumerate() {
        push_value(values, columns, k, v, blanked);
    }
}

/// A row whose columns not read hold text (`dcgmi dmon -e` with a text field: the UUID, the
/// driver version, the model name, whose words are several): read by position under the
/// header's names, every word in the span of a column not read skipped, and each read
/// column's one word a number or `N/A`. `None` where the words do not lie so.
#[cold]
#[inline(never)]
fn scan_text_columns(
    line: &str,
    names: &[(usize, String)],
    columns: &[Option<Target>],
    values: &mut Vec<f64>,
    (start, blanked): (usize, &mut bool),
) -> Option<(Kind, u32)> {
    if names.len() != columns.len() || !columns.iter().any(Option::is_none) {
        return None;
    }
    let entity = entity(&mut line.split_whitespace()).ok()?;
    let first = names.first()?.0;
    let (mut labels, mut raw) = (0, vec![NA; columns.len()]);
    let mut filled = vec![false; columns.len()];
    for (at, word) in words_at(line) {
        let Some(k) = column_at(names, at) else {
            labels += 1;
            if at + word.len() > first {
                return None;
            }
            continue;
        };
        if columns.get(k)?.is_none() {
            continue;
        }
        if at + word.len() > column_end(names, k) || std::mem::replace(&mut filled[k], true) {
            return None;
        }
        raw[k] = match word {
            "N/A" => NA,
            w => number(w)?,
        };
    }
    if labels != 2 {
        return None;
    }
    values.truncate(start);
    for (k, v) in raw.into_iter().enumerate() {
        push_value(values, columns, k, v, blanked);
    }
    Some(entity)
}

/// Append value `k` of a row, converted when `columns` says it is a field's; `blanked` is
/// set when its unit's blank rule refuses it.
#[inline(always)]
fn push_value(
    values: &mut Vec<f64>,
    columns: &[Option<Target>],
    k: usize,
    raw: f64,
    blanked: &mut bool,
) {
    values.push(match columns.get(k) {
        Some(Some(Target::Field(_, unit))) => convert(raw, *unit, blanked),
        _ => raw,
    });
}

/// [`Unit::convert`] with NaN for a blank, in and out: [`NA`] for `N/A`, [`SENTINEL`]
/// (`blanked` set) for what the unit's blank rule refuses.
#[inline]
fn convert(raw: f64, unit: Unit, blanked: &mut bool) -> f64 {
    if raw.is_nan() {
        return NA;
    }
    match unit.convert(Some(raw)) {
        Some(v) => v,
        None => refused(unit, blanked),
    }
}

/// A value its unit's blank rule refused, handed on as [`SENTINEL`]. A row's numbers are
/// finite ([`number`]), and each unit takes a number below its rule's blanks to a finite
/// one, so what is refused is one of DCGM's blank sentinels.
#[cold]
#[inline(never)]
fn refused(unit: Unit, blanked: &mut bool) -> f64 {
    if unit == Unit::PercentOrRatio {
        // Never converted without its decision: no reading refused.
        return NA;
    }
    *blanked = true;
    SENTINEL
}

/// [`Scanner::scan`] with `columns` the latest header's (none: values as read).
fn scan_with(
    line: &str,
    values: &mut Vec<f64>,
    columns: &[Option<Target>],
    blanked: &mut bool,
) -> Scanned {
    let ascii = is_ascii(line.as_bytes());
    let t = if ascii {
        trim_ascii_space(line)
    } else {
        line.trim()
    };
    if t.starts_with("#Entity") || t.starts_with("# Entity") {
        let names = t.strip_prefix('#').unwrap_or(t).trim_start();
        let names: Vec<String> = names
            .strip_prefix("Entity")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let columns = names
            .iter()
            .map(|n| {
                COLUMNS
                    .iter()
                    .find(|(c, _)| c.eq_ignore_ascii_case(n))
                    .map(|c| c.1)
            })
            .collect();
        return Scanned::of(Line::Header(columns, names));
    }
    if t.is_empty() || t.starts_with('#') {
        return Scanned::of(Line::Blank);
    }
    if t.eq_ignore_ascii_case("id") {
        return Scanned::of(Line::Id);
    }
    let start = values.len();
    let row = if ascii {
        scan_ascii_row(t, values, columns, blanked)
    } else {
        scan_row(t.split_whitespace(), values, columns, blanked)
    };
    match row {
        Ok((kind, n)) => Scanned::of(Line::Row(kind, n)),
        Err(m) => {
            values.truncate(start);
            not_a_row(t, m)
        }
    }
}

/// A line that does not read as a row: one `dcgmi dmon` prints that this parser does not
/// read ([`not_read_here`]), skipped as not data, else a malformed row.
#[cold]
#[inline(never)]
fn not_a_row(t: &str, m: String) -> Scanned {
    Scanned::of(if not_read_here(t) {
        Line::Blank
    } else {
        Line::Bad(m)
    })
}

/// `str::trim` for an ASCII line.
fn trim_ascii_space(line: &str) -> &str {
    let b = line.as_bytes();
    let start = b
        .iter()
        .position(|&c| !SPACE[usize::from(c)])
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|&c| !SPACE[usize::from(c)])
        .map_or(start, |e| e + 1);
    // Both ends are at ASCII bytes, so at character boundaries.
    line.get(start..end).unwrap_or_default()
}

/// `<[u8]>::is_ascii`, eight bytes at a time.
#[inline]
fn is_ascii(b: &[u8]) -> bool {
    let (chunks, tail) = b.as_chunks::<8>();
    let high = chunks.iter().fold(0, |acc, c| acc | u64::from_le_bytes(*c)) & 0x8080_8080_8080_8080;
    high == 0 && tail.is_ascii()
}

/// Gather a row's `values` under `columns` that are not all fields' into `sample`: what
/// completes it once gathered, and the blanks and impossible values of columns that are no
/// field's counted in `unread` by the column's name in `names`.
fn gather_columns(
    sample: &mut EntitySample,
    columns: &[Option<Target>],
    values: &[f64],
    (names, unread): (&[String], &mut Unread),
) -> Extra {
    let mut extra = Extra::default();
    for (k, (target, &v)) in columns.iter().zip(values).enumerate() {
        match *target {
            Some(Target::Field(f, _)) if !v.is_nan() => sample.readings.set_value(f, v),
            Some(Target::Field(..)) | None => {}
            Some(target) => {
                let name = names.get(k).map_or("?", String::as_str);
                if !v.is_nan() && is_blank_for(Some(target), v) {
                    unread.sentinel(name);
                }
                if extra.apply(sample, target, (!v.is_nan()).then_some(v)) {
                    unread.impossible(name);
                }
            }
        }
    }
    extra
}

/// Count the values of a row its columns' units refused ([`SENTINEL`]) as sentinels of
/// their columns in `unread`.
#[cold]
#[inline(never)]
fn count_blanked(unread: &mut Unread, names: &[String], values: &[f64]) {
    for (k, v) in values.iter().enumerate() {
        if v.to_bits() == SENTINEL.to_bits() {
            unread.sentinel(names.get(k).map_or("?", String::as_str));
        }
    }
}

/// Whether raw value `v` of a column or series feeding `target` (`None`: one not read) is a
/// blank by the field's type: a cumulative INT64 counter past 2^47 (DCGM's FP64 blank) is a
/// reading; a column or series of no field's takes the FP64 and INT32 rules.
pub(crate) fn is_blank_for(target: Option<Target>, v: f64) -> bool {
    if dcgm_value(v).is_some() {
        return false;
    }
    match target {
        Some(Target::Field(_, unit)) => unit.blank_rule(v).is_none(),
        // One link's value of a per-link counter: a blank of the field's type, as the
        // parser reads it.
        Some(Target::LinkSum(field)) => !v.is_finite() || crate::derive::is_sentinel_of(field, v),
        _ => true,
    }
}

/// The entities of the current sweep.
#[derive(Debug, Default)]
struct Seen {
    rows: Vec<RowKey>,
    /// The same keys, once there are more than a few to look through.
    set: HashSet<RowKey>,
}

impl Seen {
    /// Rows looked through one by one before a hash set is used.
    const FEW: usize = 32;

    fn contains(&self, key: &RowKey) -> bool {
        if self.rows.len() <= Self::FEW {
            self.rows.contains(key)
        } else {
            self.set.contains(key)
        }
    }

    fn insert(&mut self, key: RowKey) {
        self.rows.push(key);
        if self.rows.len() == Self::FEW + 1 {
            self.set.extend(self.rows.iter().copied());
        } else if self.rows.len() > Self::FEW {
            self.set.insert(key);
        }
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.set.clear();
    }
}

/// The whitespace `char::is_whitespace` knows in ASCII.
const fn is_ascii_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// [`is_ascii_space`] by byte.
const SPACE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = is_ascii_space(i as u8 as char);
        i += 1;
    }
    t
};

/// The words of an ASCII line, split as `str::split_whitespace` splits them.
struct AsciiWords<'a>(&'a str);

impl<'a> Iterator for AsciiWords<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let b = self.0.as_bytes();
        // dmon pads its columns with runs of spaces: skip them eight at a time.
        let mut i = 0;
        while let Some(chunk) = b.get(i..i + 8) {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            let other = u64::from_le_bytes(word) ^ 0x2020_2020_2020_2020;
            if other != 0 {
                i += (other.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        while i < b.len() && SPACE[usize::from(b[i])] {
            i += 1;
        }
        if i == b.len() {
            self.0 = "";
            return None;
        }
        let start = i;
        while i < b.len() && !SPACE[usize::from(b[i])] {
            i += 1;
        }
        // Both ends are at ASCII bytes, so at character boundaries.
        let word = self.0.get(start..i);
        self.0 = self.0.get(i..).unwrap_or_default();
        word
    }
}

/// Split a row into its entity and its values, appended to `values` (`N/A` as NaN).
fn scan_row<'a>(
    mut words: impl Iterator<Item = &'a str>,
    values: &mut Vec<f64>,
    columns: &[Option<Target>],
    blanked: &mut bool,
) -> Result<(Kind, u32), String> {
    let entity = entity(&mut words)?;
    for (k, v) in words.enumerate() {
        let raw = match v {
            "N/A" => NA,
            _ => number(v).ok_or_else(|| format!("bad value `{v}`"))?,
        };
        push_value(values, columns, k, raw, blanked);
    }
    Ok(entity)
}

/// Entity kinds `dcgmi dmon` prints beside GPUs and their instances (`-e … -i` over
/// switches, CPUs, ConnectX cards, vGPUs): rows this parser does not read.
const OTHER_ENTITY_KINDS: [&str; 7] = ["Switch", "NvSwitch", "Link", "CPU", "Core", "CX", "vGPU"];

/// Whether a line that is no GPU row is one `dcgmi dmon` prints that this parser does not
/// read: a row of another entity kind ([`OTHER_ENTITY_KINDS`]), or dmon's own closing
/// message after a signal (`dmon was stopped due to receiving a signal`; "do to" before
/// DCGM 4). Skipped and counted as not data, never a malformed row.
fn not_read_here(t: &str) -> bool {
    let first = t.split_whitespace().next().unwrap_or_default();
    t.starts_with("dmon was stopped")
        || OTHER_ENTITY_KINDS
            .iter()
            .any(|k| first.eq_ignore_ascii_case(k))
}

/// `N/A` among a row's values: a value read is never NaN.
const NA: f64 = f64::NAN;

/// A value of a field's column that was one of DCGM's blank sentinels, as the scanner hands
/// it on: a NaN, blank to every reader, that the parser tells from [`NA`] to count it.
const SENTINEL: f64 = f64::from_bits(0x7ff8_0000_5e17_0001);

/// The entity kind and id, the first two words of a row.
fn entity<'a>(words: &mut impl Iterator<Item = &'a str>) -> Result<(Kind, u32), String> {
    let kind = match words.next().unwrap_or_default() {
        k if k.eq_ignore_ascii_case("GPU") => Kind::Gpu,
        k if k.eq_ignore_ascii_case("GPU-I") => Kind::GpuInstance,
        k if k.eq_ignore_ascii_case("GPU-CI") => Kind::ComputeInstance,
        k if k.eq_ignore_ascii_case("ID") => {
            return Err(
                "a units line (`ID`, then units) not right under a `#Entity` header".into(),
            );
        }
        k => return Err(format!("unknown entity kind `{k}`")),
    };
    let id = words.next().unwrap_or_default();
    let n = id.parse().map_err(|_| format!("bad entity id `{id}`"))?;
    Ok((kind, n))
}

/// [`scan_row`] for an ASCII row: its values are read in one pass ([`scan_values`]).
fn scan_ascii_row(
    t: &str,
    values: &mut Vec<f64>,
    columns: &[Option<Target>],
    blanked: &mut bool,
) -> Result<(Kind, u32), String> {
    // Most rows: `GPU`, one space, an id of at most nine digits, whitespace.
    if let Some(rest) = t.strip_prefix("GPU ") {
        let b = rest.as_bytes();
        let digits = b.iter().take(10).take_while(|c| c.is_ascii_digit()).count();
        if (1..10).contains(&digits) && b.get(digits).is_some_and(|&c| SPACE[usize::from(c)]) {
            let n = b[..digits]
                .iter()
                .fold(0, |n, &c| n * 10 + u32::from(c - b'0'));
            scan_values(rest.get(digits..).unwrap_or_default(), |k, value| {
                push_value(values, columns, k, value.unwrap_or(NA), blanked);
            })?;
            return Ok((Kind::Gpu, n));
        }
    }
    let mut words = AsciiWords(t);
    let entity = entity(&mut words)?;
    scan_values(words.0, |k, value| {
        push_value(values, columns, k, value.unwrap_or(NA), blanked);
    })?;
    Ok(entity)
}

/// Eight ASCII bytes of `b` from `i`, spaces past its end.
fn word_at(b: &[u8], i: usize) -> u64 {
    if let Some(&w) = b.get(i..).and_then(|b| b.first_chunk::<8>()) {
        return u64::from_le_bytes(w);
    }
    // The last bytes, gathered in a register: through memory, the one wide load after
    // narrow stores would wait for them.
    let mut w = b' ' as u64 * ONES;
    for (k, &c) in b.iter().skip(i).take(8).enumerate() {
        w = (w & !(0xff << (8 * k))) | u64::from(c) << (8 * k);
    }
    w
}

const ONES: u64 = 0x0101_0101_0101_0101;

/// The values of ASCII `row` (the rest of a row after its entity), split as
/// `str::split_whitespace` splits them, handed to `value` with their index (`None`: `N/A`);
/// returns how many. Runs of spaces are skipped eight bytes at a time, and a plain decimal
/// is read as it is scanned, exactly as [`number`] reads it.
fn scan_values(row: &str, mut value: impl FnMut(usize, Option<f64>)) -> Result<usize, String> {
    let b = row.as_bytes();
    let n = b.len();
    let (mut i, mut found) = (0, 0);
    const SPACES: u64 = b' ' as u64 * ONES;
    loop {
        // Spaces, eight at a time, then any other whitespace; `w`, the eight bytes from `i`,
        // is read again only when `i` moved within it.
        let mut w = word_at(b, i);
        while w == SPACES && i < n {
            i += 8;
            w = word_at(b, i);
        }
        let lead = ((w ^ SPACES).trailing_zeros() / 8) as usize;
        if lead > 0 && i < n {
            i += lead;
            w = word_at(b, i);
        }
        if SPACE[(w & 0xff) as usize] {
            while b.get(i).is_some_and(|&c| SPACE[usize::from(c)]) {
                i += 1;
            }
            w = word_at(b, i);
        }
        if i >= n {
            return Ok(found);
        }
        let start = i;
        // What dmon writes most: a ratio with three decimals, or `N/A`, then a space.
        if let Some(v) = ratio(w) {
            value(found, Some(v));
            found += 1;
            i += 5;
            continue;
        }
        if w & 0xffff_ffff == u64::from(u32::from_le_bytes(*b"N/A ")) {
            value(found, None);
            found += 1;
            i += 3;
            continue;
        }
        // A short plain decimal (at most seven bytes of digits and at most one point, then
        // whitespace or the end) is read in one register.
        if let Some((v, len)) = short_decimal(w) {
            value(found, Some(v));
            found += 1;
            i += len;
            continue;
        }
        // A long integer (a cumulative counter: 15 digits and more) in two or three words.
        if let Some((v, len)) = long_integer(b, i, w) {
            value(found, Some(v));
            found += 1;
            i += len;
            continue;
        }
        let v;
        (v, i) = any_value(row, start)?;
        value(found, v);
        found += 1;
    }
}

/// The value of the word of `row` that starts at `start`, and where it ends: a plain
/// decimal read as it is scanned ([`direct`]), anything else through [`number`]; `N/A` is
/// `None`.
#[inline]
fn any_value(row: &str, start: usize) -> Result<(Option<f64>, usize), String> {
    let b = row.as_bytes();
    let mut i = start;
    // Digits with at most one point: at most 19 of them, so they fit a u64. A long integer
    // (a cumulative counter: 15 digits and more) eight digits at a time first.
    let (mut m, mut digits, mut point) = (0u64, 0usize, None);
    while digits + 8 <= 19
        && let Some(w) = b.get(i..i + 8).and_then(|w| <[u8; 8]>::try_from(w).ok())
        && let Some(x) = eight_digits(u64::from_le_bytes(w))
    {
        m = m * 100_000_000 + x;
        digits += 8;
        i += 8;
    }
    // Then the last digits of an integer, fewer than eight, when a space follows them.
    if let Some(w) = b.get(i..i + 8).and_then(|w| <[u8; 8]>::try_from(w).ok())
        && let Some((x, n)) = digits_then_space(u64::from_le_bytes(w))
        && digits + n <= 19
    {
        m = m * POW10_U64[n] + x;
        digits += n;
        i += n;
    }
    while let Some(&c) = b.get(i) {
        let d = c.wrapping_sub(b'0');
        if d < 10 && digits < 19 {
            m = m * 10 + u64::from(d);
            digits += 1;
        } else if c == b'.' && point.is_none() {
            point = Some(i);
        } else {
            break;
        }
        i += 1;
    }
    let decimals = point.map_or(0, |p| i - p - 1);
    let end = b.get(i).is_none_or(|&c| SPACE[usize::from(c)]);
    if let Some(x) = direct(m, digits, decimals).filter(|_| end) {
        return Ok((Some(x), i));
    }
    while b.get(i).is_some_and(|&c| !SPACE[usize::from(c)]) {
        i += 1;
    }
    let v = match row.get(start..i).unwrap_or_default() {
        "N/A" => None,
        w => Some(number(w).ok_or_else(|| format!("bad value `{w}`"))?),
    };
    Ok((v, i))
}

/// The integer of 8 to 19 digits at `b[i..]` (`w` its first eight bytes) when whitespace
/// or the row's end follows it, and its length: the value [`number`] reads. `None`
/// otherwise ([`any_value`] decides then).
#[inline(always)]
fn long_integer(b: &[u8], i: usize, w: u64) -> Option<(f64, usize)> {
    let high = eight_digits(w)?;
    let w = word_at(b, i + 8);
    if SPACE[(w & 0xff) as usize] {
        return Some((high as f64, 8));
    }
    if let Some((low, n)) = digits_then_space(w) {
        return Some(((high * POW10_U64[n] + low) as f64, 8 + n));
    }
    let m = high * 100_000_000 + eight_digits(w)?;
    let w = word_at(b, i + 16);
    if SPACE[(w & 0xff) as usize] {
        return Some((m as f64, 16));
    }
    // At most three more digits: 19 in all fit a u64.
    let (low, n) = digits_then_space(w).filter(|&(_, n)| n <= 3)?;
    Some(((m * POW10_U64[n] + low) as f64, 16 + n))
}

/// Eight ASCII digits in `w` (eight bytes of a row, the first lowest), as the number they
/// write; `None` when any byte is not a digit.
#[inline(always)]
fn eight_digits(w: u64) -> Option<u64> {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Digits become 0..=9; any other byte sets its high bit here.
    let t = w ^ (b'0' as u64 * ONES);
    if (((t & !HIGH) + 0x7676_7676_7676_7676) | t) & HIGH != 0 {
        return None;
    }
    // Pairs, then fours, then the eight (the first digit the most significant).
    let d = t.wrapping_mul(2561) >> 8;
    let d = (d & 0x00ff_00ff_00ff_00ff).wrapping_mul(6_553_601) >> 16;
    Some((d & 0x0000_ffff_0000_ffff).wrapping_mul(42_949_672_960_001) >> 32)
}

/// `10^n` for the digits [`digits_then_space`] reads.
const POW10_U64: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// The one to seven digits at the start of `w` (eight bytes of a row, the first lowest)
/// when whitespace follows them, as a number and their count; `None` otherwise.
#[inline(always)]
fn digits_then_space(w: u64) -> Option<(u64, usize)> {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let t = w ^ (b'0' as u64 * ONES);
    let other = (((t & !HIGH) + 0x7676_7676_7676_7676) | t) & HIGH;
    let n = (other.trailing_zeros() / 8) as usize;
    if n == 0 || n == 8 || !SPACE[usize::from((w >> (8 * n)) as u8)] {
        return None;
    }
    // The digits as the last `n` of eight (the bytes after them shifted out), then eight
    // digits to a number.
    let d = t << (64 - 8 * n);
    let d = d.wrapping_mul(2561) >> 8;
    let d = (d & 0x00ff_00ff_00ff_00ff).wrapping_mul(6_553_601) >> 16;
    Some((
        (d & 0x0000_ffff_0000_ffff).wrapping_mul(42_949_672_960_001) >> 32,
        n,
    ))
}

/// `d.ddd` then a space at the start of `w` (eight bytes of a row, spaces past its end):
/// the value [`number`] reads.
#[inline(always)]
fn ratio(w: u64) -> Option<f64> {
    // The point and the space where they must be; the other four bytes digits: each
    // becomes 0..=9, which stays below 0x80 with 0x76 added (the row is ASCII).
    const FIXED: u64 = 0x0000_ff00_0000_ff00;
    const DIGITS: u64 = 0x0000_0080_8080_0080;
    let t = w ^ (b'0' as u64 * ONES);
    if w & FIXED != 0x0000_2000_0000_2e00 || (t + 0x7676_7676_7676_7676) & DIGITS != 0 {
        return None;
    }
    // The four digits without the point, the first lowest; pairs, then the four (as in
    // [`eight_digits`]).
    let x = (t & 0xff) | ((t >> 8) & 0xffff_ff00);
    let d = (x.wrapping_mul(2561) >> 8) & 0x00ff_00ff;
    let m = (d.wrapping_mul(6_553_601) >> 16) & 0xffff;
    Some(quotient(m, 3))
}

/// The plain decimal at the start of `w` (eight bytes of a row, spaces past its end) and
/// its length, when it is digits with at most one point among them that end within `w` at
/// whitespace: the value [`number`] reads, `m / 10^decimals`.
#[inline(always)]
fn short_decimal(w: u64) -> Option<(f64, usize)> {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Digits become 0..=9; any other byte 10 or more.
    let t = w ^ (b'0' as u64 * ONES);
    let other = (((t & !HIGH) + 0x7676_7676_7676_7676) | t) & HIGH;
    if other == 0 {
        return None;
    }
    let p1 = (other.trailing_zeros() / 8) as usize;
    let (end, decimals) = if (w >> (8 * p1)) as u8 == b'.' {
        let rest = if p1 == 7 {
            0
        } else {
            other & (!0u64 << (8 * (p1 + 1)))
        };
        if rest == 0 {
            return None;
        }
        let p2 = (rest.trailing_zeros() / 8) as usize;
        (p2, p2 - p1 - 1)
    } else {
        (p1, 0)
    };
    let digits = end - usize::from(end != p1);
    if digits == 0 || !SPACE[usize::from((w >> (8 * end)) as u8)] {
        return None;
    }
    // The digits without the point (the bytes after it moved down by one), as the last of
    // eight after leading zeros (what follows them shifted out); then eight digits to a
    // number.
    let low = (1u64 << (8 * p1)) - 1;
    let mut d = ((t & low) | ((t >> 8) & !low)) << (64 - 8 * digits);
    d = (d & 0x0f0f_0f0f_0f0f_0f0f).wrapping_mul(2561) >> 8;
    d = (d & 0x00ff_00ff_00ff_00ff).wrapping_mul(6_553_601) >> 16;
    d = (d & 0x0000_ffff_0000_ffff).wrapping_mul(42_949_672_960_001) >> 32;
    Some((quotient(d, decimals), end))
}

/// `m / 10^d`, rounded once: the ratios dmon writes with three decimals from a table.
#[inline]
fn quotient(m: u64, d: usize) -> f64 {
    match THOUSANDTHS.get(m as usize) {
        Some(&x) if d == 3 => x,
        _ => m as f64 / POW10[d],
    }
}

/// `m / 1000` for `m` up to 1000.
static THOUSANDTHS: [f64; 1001] = {
    let mut t = [0.0; 1001];
    let mut m = 0;
    while m < 1001 {
        t[m] = m as f64 / 1000.0;
        m += 1;
    }
    t
};

/// Powers of ten that are exact in an `f64`.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// A finite number, exactly as `str::parse::<f64>` reads it. The plain decimals dmon writes
/// (`0.888`, `15152422938`, a counter past 2^53) are read directly ([`direct`]). Anything
/// else goes to `str::parse`.
pub(crate) fn number(v: &str) -> Option<f64> {
    let b = v.as_bytes();
    let (negative, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        _ => (false, b),
    };
    let (mut m, mut count, mut decimals, mut point) = (0u64, 0usize, 0usize, false);
    for &c in digits {
        match c {
            b'0'..=b'9' if count < 19 => {
                m = m * 10 + u64::from(c - b'0');
                count += 1;
                decimals += usize::from(point);
            }
            b'.' if !point => point = true,
            _ => return v.parse::<f64>().ok().filter(|x| x.is_finite()),
        }
    }
    let Some(x) = direct(m, count, decimals) else {
        return v.parse::<f64>().ok().filter(|x| x.is_finite());
    };
    Some(if negative { -x } else { x })
}

/// `digits` digits read as the integer `m` with `decimals` of them after the point, where
/// that is exactly what `str::parse` gives: an integer of any size (a cumulative counter,
/// past 2^53 within days of boot; the conversion rounds to nearest as parsing does), or
/// digits below 2^53 over an exact power of ten (one correctly rounded division). `None`:
/// not read directly.
#[inline]
fn direct(m: u64, digits: usize, decimals: usize) -> Option<f64> {
    if digits == 0 || decimals >= POW10.len() {
        None
    } else if decimals == 0 {
        Some(m as f64)
    } else {
        (m <= 1 << 53).then(|| m as f64 / POW10[decimals])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn parse(text: &str) -> Result<(Vec<Sample>, u64), ParseError> {
        let mut p = DmonParser::new("cap.txt", 2.0, Timestamp(1_000));
        let mut out = Vec::new();
        for l in text.lines() {
            out.extend(p.push_line(l)?);
        }
        out.extend(p.finish());
        Ok((out, p.skipped_lines()))
    }

    /// A row lost to a malformed line leaves the sweeps where they are: GPU 0's row of
    /// the third sweep cut short, GPU 1's of the fourth, the rows after them are in their own
    /// sweeps (GPU 0's next row, printed after GPU 1's, starts the fourth: it lies before
    /// GPU 1 in the order the capture prints its rows), never a sweep early.
    #[test]
    fn a_lost_row_leaves_the_sweeps_where_they_are() {
        let text = "#Entity GPUTL\nID\nGPU 0 10\nGPU 1 20\nGPU 0 11\nGPU 1 21\nGPU 0 1x\nGPU 1 22\nGPU 0 13\nGPU 1 2x\nGPU 0 14\nGPU 1 24\n";
        let mut p = DmonParser::new("cap.txt", 2.0, Timestamp(0));
        let (mut out, mut errors) = (Vec::new(), 0);
        for l in text.lines() {
            match p.push_line(l) {
                Ok(s) => out.extend(s),
                Err(_) => errors += 1,
            }
        }
        out.extend(p.finish());
        assert_eq!(errors, 2);
        let sweeps: Vec<(i64, Vec<(u32, f64)>)> = out
            .iter()
            .map(|s| {
                let rows = s
                    .entities
                    .iter()
                    .map(|e| {
                        let v = e.readings.value(Field::ReportedUtil).unwrap();
                        (e.id.gpu.unwrap(), (v * 100.0).round())
                    })
                    .collect();
                (s.taken.0, rows)
            })
            .collect();
        assert_eq!(
            sweeps,
            [
                (0, vec![(0, 10.0), (1, 20.0)]),
                (2_000, vec![(0, 11.0), (1, 21.0)]),
                (4_000, vec![(1, 22.0)]),
                (6_000, vec![(0, 13.0)]),
                (8_000, vec![(0, 14.0), (1, 24.0)]),
            ]
        );
    }

    /// A new run's header (the rows printed in another order after it) makes the order be
    /// learned again: GPU 1 then GPU 0 after it are each sweep's two rows, never a sweep
    /// each, as the order before the header would have it.
    #[test]
    fn a_new_header_makes_the_order_learned_again() {
        let text = "#Entity GPUTL\nID\nGPU 0 10\nGPU 1 20\nGPU 0 11\nGPU 1 21\n#Entity GPUTL\nID\nGPU 1 50\nGPU 0 60\nGPU 1 51\nGPU 0 61\nGPU 1 52\nGPU 0 62\n";
        let (samples, _) = parse(text).unwrap();
        let sweeps: Vec<Vec<u32>> = samples
            .iter()
            .map(|s| s.entities.iter().map(|e| e.id.gpu.unwrap()).collect())
            .collect();
        assert_eq!(
            sweeps,
            [vec![0, 1], vec![0, 1], vec![1, 0], vec![1, 0], vec![1, 0]]
        );
    }

    /// The samples of `text`, both ways (each line parsed at once; scanned first, then
    /// parsed, as `analyze` does on two threads), and what each left unread, which must
    /// be the same.
    fn parse_unread(text: &str) -> (Vec<Sample>, Unread) {
        let mut p = DmonParser::new("cap.txt", 2.0, Timestamp(1_000));
        let (mut scanner, mut two_steps) = (
            Scanner::default(),
            DmonParser::new("cap.txt", 2.0, Timestamp(1_000)),
        );
        let (mut out, mut out2) = (Vec::new(), Vec::new());
        for l in text.lines() {
            out.extend(p.push_line(l).unwrap());
            let mut values = Vec::new();
            let line = scanner.scan(l, &mut values);
            out2.extend(two_steps.push_scanned(line, &values).unwrap());
        }
        out.extend(p.finish());
        out2.extend(two_steps.finish());
        assert_eq!(out, out2);
        assert_eq!(p.unread(), two_steps.unread());
        (out, p.unread().clone())
    }

    /// A value that is a sentinel in a row read by its words, in one read by position
    /// (fewer values than columns), in one whose other columns hold text, and in a column
    /// that is no field's (free memory): each blank, counted once under its column; `N/A`
    /// and the values kept are not counted. 1e306 lies past DCGM's FP64 blank (2^47).
    #[test]
    fn every_blank_a_rule_refuses_is_counted_once() {
        let text = "\
#Entity   FBUSD        FBFRE        POWER        DRVER
GPU 0     2147483647   4294967295   N/A          570.1
GPU 1     1000         2000         4294967295   570.1
GPU 2     1000                      2147483632
GPU 3     1e306        10           300          NVIDIA 570.1
";
        let (s, unread) = parse_unread(text);
        let expected = [("FBFRE", 1), ("FBUSD", 2), ("POWER", 2)];
        assert!(unread.impossible.is_empty());
        assert_eq!(
            unread.sentinels,
            expected.map(|(k, n)| (k.to_string(), n)).into()
        );
        assert!(unread.non_finite.is_empty());
        let e = &s[0].entities;
        assert_eq!(e[0].readings.get(Field::MemUsedBytes), Reading::Blank);
        assert_eq!(e[0].readings.get(Field::MemTotalBytes), Reading::Blank);
        assert_eq!(e[1].readings.get(Field::PowerWatts), Reading::Blank);
        assert_eq!(
            e[1].readings.get(Field::MemTotalBytes),
            Reading::Value(3000.0 * MIB)
        );
        assert_eq!(e[2].readings.get(Field::PowerWatts), Reading::Blank);
        assert_eq!(e[3].readings.get(Field::MemUsedBytes), Reading::Blank);
        assert_eq!(e[3].readings.get(Field::PowerWatts), Reading::Value(300.0));
    }

    /// Negative free memory is no size: blank, counted under its column, no total made of
    /// it.
    #[test]
    fn negative_free_memory_is_impossible_and_counted() {
        let text = "#Entity   FBUSD        FBFRE\nGPU 0     1000         -900\nGPU 1     1000         3000\n";
        let (s, unread) = parse_unread(text);
        let e = &s[0].entities;
        assert_eq!(e[0].readings.get(Field::MemTotalBytes), Reading::Blank);
        assert_eq!(
            e[1].readings.get(Field::MemTotalBytes),
            Reading::Value(4000.0 * MIB)
        );
        assert_eq!(
            unread.impossible,
            BTreeMap::from([("FBFRE".to_string(), 1)])
        );
        assert!(unread.sentinels.is_empty());
    }

    fn val(s: &Sample, i: usize, f: Field) -> Reading {
        s.entities[i].readings.get(f)
    }

    #[test]
    fn cumulative_counters_past_2_pow_47_and_unread_columns() {
        // Days of uptime: the counters are far past 2^47 and read as they are; the DMMA
        // counter and the XID column are not read, and named.
        let text = "\
#Entity   SMCELAP              MMACACT              DMMACACT   XIDER   SMCLK
ID                                                                      Hz
GPU 0     300000000000000000   75000000000000000    12         0       1980000000
";
        let mut p = DmonParser::new("cap.txt", 1.0, Timestamp(0));
        let mut out = Vec::new();
        for l in text.lines() {
            out.extend(p.push_line(l).unwrap());
        }
        out.extend(p.finish());
        assert_eq!(
            val(&out[0], 0, Field::SmCyclesElapsed),
            Reading::Value(3.0e17)
        );
        assert_eq!(
            val(&out[0], 0, Field::MmaCyclesActive),
            Reading::Value(7.5e16)
        );
        assert_eq!(
            val(&out[0], 0, Field::SmClockMhz),
            Reading::Value(1980.0),
            "Hz read as MHz"
        );
        let names: Vec<&str> = p.unread().families.iter().map(String::as_str).collect();
        assert_eq!(names, ["DMMACACT", "XIDER"]);
        // An INT64 blank is blank.
        let text = "#Entity   SMCELAP\nID\nGPU 0     9223372036854775807\n";
        let (s, _) = parse(text).unwrap();
        assert_eq!(val(&s[0], 0, Field::SmCyclesElapsed), Reading::Blank);
    }

    #[test]
    fn several_headers_and_unit_conversions() {
        let text = "\
[root@h ~]# dcgmi dmon -e 203,155,156
#Entity   GPUTL  POWER   TOTEC      MCUTL  XYZZY
ID
GPU 0     91     68.244  15152422938  73   5
GPU 1     0      30.5    1000       0      5

# Entity  SMACT  FBUSD  FBFRE  SMCLK
Id
GPU 0     0.5    5120   9791   660
GPU 1     N/A    1      2      N/A
";
        let (s, skipped) = parse(text).unwrap();
        assert_eq!(skipped, 2);
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].taken, s[1].taken),
            (Timestamp(1_000), Timestamp(3_000))
        );
        assert_eq!(val(&s[0], 0, Field::ReportedUtil), Reading::Value(0.91));
        assert_eq!(val(&s[0], 0, Field::PowerWatts), Reading::Value(68.244));
        assert_eq!(
            val(&s[0], 0, Field::EnergyJoules),
            Reading::Value(15_152_422.938)
        );
        assert_eq!(val(&s[0], 1, Field::EnergyJoules), Reading::Value(1.0));
        assert_eq!(
            val(&s[0], 0, Field::DramActive),
            Reading::Blank,
            "MCUTL is not DRAM"
        );
        assert_eq!(val(&s[1], 0, Field::ReportedUtil), Reading::Blank);
        assert_eq!(val(&s[1], 0, Field::SmActive), Reading::Value(0.5));
        assert_eq!(
            val(&s[1], 0, Field::MemUsedBytes),
            Reading::Value(5120.0 * MIB)
        );
        assert_eq!(
            val(&s[1], 0, Field::MemTotalBytes),
            Reading::Value(14_911.0 * MIB)
        );
        assert_eq!(val(&s[1], 0, Field::SmClockMhz), Reading::Value(660.0));
        assert_eq!(val(&s[1], 1, Field::SmActive), Reading::Blank);
        assert_eq!(
            val(&s[1], 1, Field::MemTotalBytes),
            Reading::Value(3.0 * MIB)
        );
        assert_eq!(
            s[1].entities[1].id,
            EntityId {
                gpu: Some(1),
                ..EntityId::default()
            }
        );
    }

    /// A line in the layout of DCGM v4.6.0's dmon: `label` padded to 16 columns, then each
    /// cell left-aligned in its field's format width + 6, plus 2.
    fn laid_out(label: &str, cells: &[(&str, usize)]) -> String {
        let mut line = format!("{label:<16}");
        for (cell, width) in cells {
            line.push_str(&format!("{cell:<w$}", w = width + 8));
        }
        line
    }

    /// A header, its units line and `rows` in the v4.6.0 layout: `(name, format width,
    /// unit)` per column, and each row's label and cells.
    fn capture(columns: &[(&str, usize, &str)], rows: &[(&str, &[&str])]) -> String {
        let names: Vec<_> = columns.iter().map(|(n, w, _)| (*n, *w)).collect();
        let units: Vec<_> = columns.iter().map(|(_, w, u)| (*u, *w)).collect();
        let mut text = laid_out("#Entity", &names) + "\n" + &laid_out("ID", &units) + "\n";
        for (label, cells) in rows {
            let cells: Vec<_> = cells
                .iter()
                .zip(&names)
                .map(|(c, (_, w))| (*c, *w))
                .collect();
            text += &(laid_out(label, &cells) + "\n");
        }
        text
    }

    const REAL: &[(&str, usize, &str)] = &[
        ("POWER", 10, " W"),
        ("TOTEC", 16, " mJ"),
        ("TMPTR", 5, " C"),
        ("SMCLK", 5, ""),
        ("GRACT", 5, ""),
        ("TENSO", 5, ""),
    ];

    #[test]
    fn units_line_is_part_of_the_header() {
        let rows: &[(&str, &[&str])] = &[
            (
                "GPU 0",
                &["245.318", "15152422938", "61", "1980", "0.888", "0.178"],
            ),
            ("GPU 1", &["N/A", "1000", "58", "1410", "N/A", "0.000"]),
        ];
        // The header and units line again between sweeps, as dmon repeats them.
        let block = capture(REAL, rows);
        let text = format!("{block}{block}{block}");
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .starts_with("ID               W ")
        );
        let (s, skipped) = parse(&text).unwrap();
        assert_eq!((s.len(), skipped), (3, 0));
        for s in &s {
            assert_eq!(s.entities.len(), 2);
            assert_eq!(val(s, 0, Field::PowerWatts), Reading::Value(245.318));
            assert_eq!(
                val(s, 0, Field::EnergyJoules),
                Reading::Value(15_152_422.938)
            );
            assert_eq!(val(s, 0, Field::TempCelsius), Reading::Value(61.0));
            assert_eq!(val(s, 0, Field::SmClockMhz), Reading::Value(1980.0));
            assert_eq!(val(s, 0, Field::GrActive), Reading::Value(0.888));
            assert_eq!(val(s, 0, Field::TensorActive), Reading::Value(0.178));
            assert_eq!(val(s, 1, Field::PowerWatts), Reading::Blank);
            assert_eq!(val(s, 1, Field::EnergyJoules), Reading::Value(1.0));
            assert_eq!(val(s, 1, Field::TempCelsius), Reading::Value(58.0));
            assert_eq!(val(s, 1, Field::SmClockMhz), Reading::Value(1410.0));
            assert_eq!(val(s, 1, Field::GrActive), Reading::Blank);
            assert_eq!(val(s, 1, Field::TensorActive), Reading::Value(0.0));
        }
    }

    #[test]
    fn declared_units_set_the_scale() {
        let one = |name: &str, width: usize, unit: &str, v: &str, f: Field| {
            let (s, _) = parse(&capture(&[(name, width, unit)], &[("GPU 0", &[v])])).unwrap();
            val(&s[0], 0, f)
        };
        let v = Reading::Value;
        let cases = [
            (("TOTEC", 16, " mJ", "2500"), Field::EnergyJoules, v(2.5)),
            (("TOTEC", 16, " J", "2500"), Field::EnergyJoules, v(2500.0)),
            (("TOTEC", 16, "", "2500"), Field::EnergyJoules, v(2.5)),
            (
                ("PCITX", 5, "", "2500"),
                Field::PcieTxBytesPerSec,
                v(2500.0),
            ),
            (
                ("PCITX", 5, "B/s", "2500"),
                Field::PcieTxBytesPerSec,
                v(2500.0),
            ),
            (
                ("PCITX", 5, "KB/s", "2500"),
                Field::PcieTxBytesPerSec,
                v(2.5e6),
            ),
            (
                ("PCIRX", 5, "MB/s", "2.5"),
                Field::PcieRxBytesPerSec,
                v(2.5e6),
            ),
            (
                ("NVLTX", 5, "Mb/s", "8"),
                Field::NvlinkTxBytesPerSec,
                v(1e6),
            ),
            (("GRACT", 5, "%", "50"), Field::GrActive, v(0.5)),
            (("GPUTL", 5, "%", "50"), Field::ReportedUtil, v(0.5)),
            (("GPUTL", 5, "", "50"), Field::ReportedUtil, v(0.5)),
            (("SMCLK", 5, "MHz", "1980"), Field::SmClockMhz, v(1980.0)),
            (
                ("POWER", 10, " W", "N/A"),
                Field::PowerWatts,
                Reading::Blank,
            ),
        ];
        for ((name, width, unit, raw), f, want) in cases {
            assert_eq!(
                one(name, width, unit, raw, f),
                want,
                "{name} {unit:?} {raw}"
            );
        }
    }

    #[test]
    fn a_unit_that_does_not_read_is_an_error_naming_its_column() {
        let cols = [("POWER", 10, " W"), ("TMPTR", 5, " F"), ("XYZZY", 5, "#")];
        let text = capture(&cols, &[("GPU 0", &["245.318", "61", "7"])]);
        let mut p = DmonParser::new("cap.txt", 1.0, Timestamp(0));
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(p.push_line(lines[0]), Ok(None));
        assert_eq!(
            p.push_line(lines[1]).unwrap_err().to_string(),
            "cap.txt:2: column TMPTR: unknown unit `F`; its values are not read",
            "an ignored column (XYZZY) may have any unit"
        );
        assert_eq!(p.push_line(lines[2]), Ok(None));
        let s = p.finish().unwrap();
        assert_eq!(val(&s, 0, Field::PowerWatts), Reading::Value(245.318));
        assert_eq!(
            val(&s, 0, Field::TempCelsius),
            Reading::Blank,
            "not misread"
        );

        let cases = [
            (
                [("TMPTR", 5, " W"), ("POWER", 10, " W")],
                "cap.txt:2: column TMPTR: unit `W` does not fit temp_celsius; its values are not read",
            ),
            (
                [("TOTEC", 16, " MJ"), ("FBFRE", 5, " W")],
                "cap.txt:2: column TOTEC: unknown unit `MJ`; its values are not read; \
                 column FBFRE: unit `W` does not fit this column; its values are not read",
            ),
        ];
        for (cols, want) in cases {
            let err = parse(&capture(&cols, &[])).unwrap_err();
            assert_eq!(err.to_string(), want);
        }
        // Units that do not lie under the names: the columns keep their default scales.
        let text = "#Entity GRACT  TOTEC\nID  W  mJ\nGPU 0 0.5 2500\n";
        let mut p = DmonParser::new("cap.txt", 1.0, Timestamp(0));
        let got: Vec<_> = text
            .lines()
            .map(|l| p.push_line(l).map_err(|e| e.to_string()))
            .collect();
        assert_eq!(
            got,
            [
                Ok(None),
                Err(
                    "cap.txt:2: units line: its units do not lie under the column names \
                     of the header above"
                        .into()
                ),
                Ok(None)
            ]
        );
        assert_eq!(
            val(&p.finish().unwrap(), 0, Field::EnergyJoules),
            Reading::Value(2.5)
        );
    }

    #[test]
    fn a_units_line_away_from_its_header_is_an_error() {
        let text = capture(REAL, &[("GPU 0", &["1", "2", "3", "4", "0.5", "0.5"])]);
        let units = text.lines().nth(1).unwrap();
        let text = format!("{text}{units}\n");
        assert_eq!(
            parse(&text).unwrap_err().to_string(),
            "cap.txt:4: a units line (`ID`, then units) not right under a `#Entity` header"
        );
        // A bare `ID` line is structure wherever it is.
        let (s, skipped) = parse("#Entity GRACT\nID\nGPU 0 0.5\nID\nGPU 0 0.6\n").unwrap();
        assert_eq!((s.len(), skipped), (2, 0));
    }

    #[test]
    fn blank_space_fields_are_blank_for_their_column_only() {
        let rows: &[(&str, &[&str])] = &[
            // A field left as blank space, in the middle and at the start.
            (
                "GPU 0",
                &["245.318", "15152422938", "", "1980", "0.888", "0.178"],
            ),
            ("GPU 1", &["", "1000", "58", "1410", "N/A", "0.000"]),
            // The row ends before its last two fields.
            ("GPU-I 3", &["12.000", "2000", "57", "1410"]),
        ];
        let text = capture(REAL, rows);
        let (s, _) = parse(&text).unwrap();
        let e = &s[0].entities;
        assert_eq!(e.len(), 3);
        let rows = [
            [
                Some(245.318),
                Some(15_152_422.938),
                None,
                Some(1980.0),
                Some(0.888),
                Some(0.178),
            ],
            [None, Some(1.0), Some(58.0), Some(1410.0), None, Some(0.0)],
            [Some(12.0), Some(2.0), Some(57.0), Some(1410.0), None, None],
        ];
        let fields = [
            Field::PowerWatts,
            Field::EnergyJoules,
            Field::TempCelsius,
            Field::SmClockMhz,
            Field::GrActive,
            Field::TensorActive,
        ];
        for (i, want) in rows.iter().enumerate() {
            for (f, w) in fields.iter().zip(want) {
                let w = w.map_or(Reading::Blank, Reading::Value);
                assert_eq!(e[i].readings.get(*f), w, "row {i} {}", f.name());
            }
        }
        // Fewer values that do not lie under the names are still a miscount.
        let text = "#Entity         POWER             TMPTR        \nGPU 0  245.318\n";
        assert_eq!(
            parse(text).unwrap_err().to_string(),
            "cap.txt:2: expected 2 values, found 1"
        );
        // The same through the two steps: the scanner's values are one per column.
        let mut scanner = Scanner::default();
        let mut values = Vec::new();
        let short: &[(&str, &[&str])] = &[("GPU 0", &["1.000", "2000", "57", "1410"])];
        for l in capture(REAL, short).lines() {
            values.clear();
            let _ = scanner.scan(l, &mut values);
        }
        let bits: Vec<_> = values.iter().map(|v| v.to_bits()).collect();
        let want: Vec<_> = [1.0, 2.0, 57.0, 1410.0, NA, NA]
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(bits, want);
    }

    #[test]
    fn fbttl_wins_over_used_plus_free() {
        let (s, _) = parse("#Entity FBUSD FBFRE FBTTL\nGPU 0 1 2 16\n").unwrap();
        assert_eq!(
            val(&s[0], 0, Field::MemTotalBytes),
            Reading::Value(16.0 * MIB)
        );
    }

    #[test]
    fn mig_rows() {
        let text = "\
# Entity  GRACT
      Id
    GPU 0  0.845
  GPU-I 1  0.430
 GPU-CI 2  0.200
  GPU-I 5  0.415
    GPU 0  0.5
";
        let (s, _) = parse(text).unwrap();
        assert_eq!(s.len(), 2);
        let e = &s[0].entities;
        assert_eq!(e.len(), 4);
        let mig = |gi, ci| {
            Some(MigId {
                uuid: None,
                gpu_instance: gi,
                compute_instance: ci,
                profile: None,
            })
        };
        assert_eq!(e[1].id.gpu, Some(0));
        assert_eq!(e[1].id.mig, mig(1, None));
        assert_eq!(e[2].id.mig, mig(1, Some(2)));
        assert_eq!(e[3].id.mig, mig(5, None));
        assert_eq!(e[2].readings.get(Field::GrActive), Reading::Value(0.2));
        assert_eq!(
            s[1].entities[0].readings.get(Field::GrActive),
            Reading::Value(0.5)
        );
    }

    #[test]
    fn gpu_ci_needs_a_gpu_instance() {
        let err = parse("#Entity GRACT\nGPU-CI 2 0.1\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "cap.txt:2: gpu-ci row without a preceding gpu-i row"
        );
    }

    #[test]
    fn malformed_rows() {
        let cases = [
            ("GPU 1 0.5", "cap.txt:4: expected 2 values, found 1"),
            ("GPU 1 0.5 1 2", "cap.txt:4: expected 2 values, found 3"),
            ("GPU 1 0.5 abc", "cap.txt:4: bad value `abc`"),
            ("GPU 1 0.5 NaN", "cap.txt:4: bad value `NaN`"),
            ("Widget 1 0.5 2", "cap.txt:4: unknown entity kind `Widget`"),
            ("GPU x 0.5 2", "cap.txt:4: bad entity id `x`"),
        ];
        for (row, want) in cases {
            let text = format!("#Entity GRACT POWER\nID\nGPU 0 0.1 1\n{row}\n");
            assert_eq!(parse(&text).unwrap_err().to_string(), want, "{row}");
        }
    }

    /// A text field among `-e`'s (the UUID, the model name of several words) is a column not
    /// read: its words are skipped by position, and the numbers beside it read.
    #[test]
    fn text_columns_are_skipped_by_position() {
        let row = |a: &str, b: &str, c: &str, d: &str| format!("{a:<10}{b:<45}{c:<9}{d}");
        let text = [
            row("#Entity", "UUID#", "POWER", "TENSO"),
            row("ID", "", "W", ""),
            row(
                "GPU 0",
                "GPU-6bf47ca9-ad3e-15db-beed-1079a7d74116",
                "250.5",
                "0.400",
            ),
            row("#Entity", "DVNAM", "POWER", "TENSO"),
            row("ID", "", "W", ""),
            row("GPU 0", "NVIDIA H100 80GB HBM3", "260.5", "N/A"),
        ]
        .join("\n");
        let (samples, _) = parse(&text).unwrap();
        let read: Vec<_> = samples
            .iter()
            .map(|s| (val(s, 0, Field::PowerWatts), val(s, 0, Field::TensorActive)))
            .collect();
        assert_eq!(
            read,
            vec![
                (Reading::Value(250.5), Reading::Value(0.4)),
                (Reading::Value(260.5), Reading::Blank)
            ]
        );
        // A word that is no number in a column read is still a malformed row.
        let bad = [
            row("#Entity", "UUID#", "POWER", "TENSO"),
            row(
                "GPU 0",
                "GPU-6bf47ca9-ad3e-15db-beed-1079a7d74116",
                "hot",
                "0.400",
            ),
        ]
        .join("\n");
        assert!(parse(&bad).unwrap_err().to_string().contains("bad value"));
    }

    /// What `dcgmi dmon` prints beside GPU rows: other entities' rows and its closing
    /// message after Ctrl-C (DCGM 4's spelling and the older one) are skipped and counted,
    /// and the GPU rows around them read.
    #[test]
    fn other_entities_and_the_closing_message_are_skipped_and_counted() {
        let text = "#Entity GRACT POWER\nID\nGPU 0 0.1 100\nSwitch 0 0.5 2\nCPU 1 0.2 50\n\
                    CPU Core 3 0.2 N/A\nCX 0 N/A N/A\nGPU 0 0.3 120\n\
                    dmon was stopped due to receiving a signal\n\
                    dmon was stopped do to receiving a signal\n";
        let (samples, skipped) = parse(text).unwrap();
        let tensor: Vec<_> = samples
            .iter()
            .map(|s| s.entities[0].readings.get(Field::GrActive))
            .collect();
        assert_eq!(tensor, vec![Reading::Value(0.1), Reading::Value(0.3)]);
        assert_eq!(skipped, 6);
    }

    #[test]
    fn parser_survives_a_bad_row() {
        let mut p = DmonParser::new("cap.txt", 1.0, Timestamp(0));
        for l in ["#Entity GRACT", "GPU 0 0.1"] {
            assert_eq!(p.push_line(l).unwrap(), None);
        }
        assert!(p.push_line("GPU 0 zzz").is_err());
        let s = p.push_line("GPU 0 0.2").unwrap().unwrap();
        assert_eq!(s.entities.len(), 1);
        assert_eq!(
            s.entities[0].readings.get(Field::GrActive),
            Reading::Value(0.1)
        );
        let s = p.finish().unwrap();
        assert_eq!(
            (s.taken, s.entities[0].readings.get(Field::GrActive)),
            (Timestamp(1_000), Reading::Value(0.2))
        );
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn sentinels_are_blank() {
        let text = "#Entity POWER\n\
            GPU 0 2147483632\nGPU 1 2147483647\nGPU 2 4294967295\nGPU 3 9223372036854775794\n\
            GPU 4 140737488355328.0\nGPU 5 2147483631\nGPU 6 4294967294\nGPU 7 140737488355327\n";
        let (s, _) = parse(text).unwrap();
        // Each blank counted, by its column: five sentinels, the three values kept not.
        let (_, unread) = parse_unread(text);
        assert_eq!(unread.sentinels, BTreeMap::from([("POWER".to_string(), 5)]));
        assert!(unread.non_finite.is_empty());
        let got: Vec<_> = (0..8).map(|i| val(&s[0], i, Field::PowerWatts)).collect();
        let b = Reading::Blank;
        let v = Reading::Value;
        assert_eq!(
            got,
            [
                b,
                b,
                b,
                b,
                b,
                v(2_147_483_631.0),
                v(4_294_967_294.0),
                v(140_737_488_355_327.0)
            ]
        );
    }

    /// A conversion's quick test for a value below the least blank gives what the unit's
    /// blank rule gives, at each edge of the blanks and past them, for every unit.
    #[test]
    fn conversion_keeps_each_units_blank_rule() {
        let next_down = |x: f64| f64::from_bits(x.to_bits() - 1);
        let int64_blank = 0x7fff_ffff_ffff_fff0_u64 as f64;
        let edges = [
            f64::NEG_INFINITY,
            -1e300,
            -1.0,
            0.0,
            0.5,
            2_147_483_631.0,
            next_down(2_147_483_632.0),
            2_147_483_632.0,
            2_147_483_632.5,
            2_147_483_647.0,
            2_147_483_648.0,
            4_294_967_295.0,
            4_294_967_295.5,
            140_737_488_355_327.0,
            140_737_488_355_328.0,
            284_349_936_710_656.0,
            next_down(int64_blank),
            int64_blank,
            1e300,
            f64::INFINITY,
            f64::NAN,
        ];
        let units = [
            Unit::Same,
            Unit::Percent,
            Unit::Milli,
            Unit::Mib,
            Unit::Kilo,
            Unit::Mega,
            Unit::Megabit,
            Unit::Hertz,
            Unit::Count,
            Unit::PercentOrRatio,
        ];
        let mut told = [0; 2];
        for unit in units {
            for raw in edges {
                let rule = if matches!(unit, Unit::Count | Unit::Milli) {
                    count_value
                } else {
                    dcgm_value
                };
                let want = rule(raw).map(|v| unit.apply(v)).filter(|v| v.is_finite());
                let got = unit.convert(Some(raw));
                assert_eq!(
                    got.map(f64::to_bits),
                    want.map(f64::to_bits),
                    "{unit:?} {raw}"
                );
                told[usize::from(want.is_some())] += 1;
            }
            assert_eq!(unit.convert(None), None);
        }
        // Both outcomes occur: blanks and values.
        assert!(told[0] > 40 && told[1] > 60, "{told:?}");
        // DCGM's energy counter (field 156, INT64 mJ) in the INT32 band, 35 min into 1 kW:
        // a reading, not a blank; a percent there is one of the INT32 blanks.
        let mj = 2_147_483_640.0;
        assert_eq!(Unit::Milli.convert(Some(mj)), Some(2_147_483.64));
        assert_eq!(
            Unit::Milli.convert(Some(4_294_967_295.0)),
            Some(4_294_967.295)
        );
        assert_eq!(Unit::Milli.convert(Some(int64_blank)), None);
        assert_eq!(Unit::Percent.convert(Some(mj)), None);
    }

    /// The direct reading of plain decimals gives the very bits `str::parse` gives, and
    /// everything else goes to `str::parse`.
    #[test]
    fn numbers_read_as_str_parse_reads_them() {
        use rand::{Rng, SeedableRng};
        let want = |v: &str| v.parse::<f64>().ok().filter(|x| x.is_finite());
        let mut cases: Vec<String> = [
            "0",
            "-0",
            "+0",
            "0.0",
            "-0.0",
            ".5",
            "5.",
            "+.5",
            "-.5",
            ".",
            "-",
            "+",
            "",
            "1e3",
            "1E-3",
            "inf",
            "-inf",
            "NaN",
            "infinity",
            "0x10",
            "1.2.3",
            "1..2",
            "--1",
            "+-1",
            "9007199254740992",
            "9007199254740993",
            "9007199254740993.0",
            "90071992547409921",
            "0.1234567890123456789",
            "1234567890123456789",
            "12345678901234567890",
            "0.0000000000000000000001",
            "0.00000000000000000000001",
            "00.5",
            "1_000",
            " 1",
            "1 ",
            "\u{663}",
            "15152422938",
            "2147483647",
            "140737488355328.0",
            "1e400",
            // Cumulative counters past 2^53, the INT64 blank, and one digit too many.
            "300000000000000000",
            "98765432109876543",
            "9223372036854775807",
            "-9223372036854775807",
            "9999999999999999999",
            "18446744073709551615",
            "12345678901234567.",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(244);
        for k in 0..200_000 {
            let digits = if k % 2 == 0 {
                rng.random_range(1..=7)
            } else {
                rng.random_range(1..=24)
            };
            let mut v = String::new();
            match rng.random_range(0..6) {
                0 => v.push('-'),
                1 => v.push('+'),
                _ => {}
            }
            let point = rng.random_range(0..=digits + 1);
            for i in 0..digits {
                if i == point {
                    v.push('.');
                }
                v.push(char::from(b'0' + rng.random_range(0..10u8)));
            }
            cases.push(v);
        }
        for v in &cases {
            assert_eq!(
                number(v).map(f64::to_bits),
                want(v).map(f64::to_bits),
                "{v:?}"
            );
            // Read in a row, it reads the same.
            if v.is_empty() || v.contains(' ') {
                continue;
            }
            let row = format!("{v} 1");
            let mut got = Vec::new();
            let n = scan_values(&row, |_, x| got.push(x.map(f64::to_bits)));
            match want(v) {
                Some(x) => {
                    assert_eq!(n, Ok(2), "{v:?}");
                    assert_eq!(got, [Some(x.to_bits()), Some(1.0f64.to_bits())], "{v:?}");
                }
                None if v == "N/A" => assert_eq!(got[0], None),
                None => assert_eq!(n, Err(format!("bad value `{v}`")), "{v:?}"),
            }
        }
    }

    /// The three-decimal table and the division give the same bits.
    #[test]
    fn quotients_as_one_division_rounds_them() {
        for (d, p) in POW10.iter().enumerate().take(7) {
            for m in 0..20_000 {
                let want = m as f64 / p;
                assert_eq!(quotient(m, d).to_bits(), want.to_bits(), "{m} / 10^{d}");
            }
        }
    }

    /// Short decimals read eight bytes at a time give what reading each word gives.
    #[test]
    fn short_decimals_read_as_word_by_word() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(10);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for _ in 0..50_000 {
            let mut row = String::from("GPU 0");
            for _ in 0..rng.random_range(1..4) {
                row.push_str([" ", "  ", "\t", "          "][rng.random_range(0..4)]);
                for _ in 0..rng.random_range(1..11) {
                    let c = b"0123456789.9x"[rng.random_range(0..13)];
                    row.push(char::from(c));
                }
            }
            if rng.random_bool(0.5) {
                row.push(' ');
            }
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            let got = scan_ascii_row(&row, &mut fast, &[], &mut false);
            let want = scan_row(row.split_whitespace(), &mut slow, &[], &mut false);
            assert_eq!(got, want, "{row:?}");
            assert_eq!(bits(&fast), bits(&slow), "{row:?}");
        }
    }

    /// Every `d.ddd` word dmon can write reads as `str::parse` reads it, followed by a
    /// space or at the row's end; with anything else in the four digits' places, or no
    /// space after them, the word is not read as a ratio.
    #[test]
    fn every_ratio_word_reads_as_str_parse() {
        let word = |s: &str| {
            let mut b = [b' '; 8];
            b[..s.len()].copy_from_slice(s.as_bytes());
            u64::from_le_bytes(b)
        };
        for m in 0..10_000 {
            let text = format!("{}.{:03}", m / 1000, m % 1000);
            let want = text.parse::<f64>().unwrap().to_bits();
            assert_eq!(ratio(word(&text)).map(f64::to_bits), Some(want), "{text}");
            assert_eq!(ratio(word(&format!("{text}1"))), None, "{text}1");
        }
        for text in [
            "/.000", ":.999", "0,500", "0.5/0", "0.50:", "0.500x", "0.5 0",
        ] {
            assert_eq!(ratio(word(text)), None, "{text}");
        }
    }

    /// An ASCII row read in one pass gives what splitting it into words and reading each
    /// gives: the same values, bit for bit, or the same error.
    #[test]
    fn one_pass_rows_read_as_word_by_word() {
        use rand::{Rng, SeedableRng};
        let words = [
            "0.888",
            "N/A",
            "15152422938",
            "5.",
            ".5",
            "+1",
            "-0.0",
            "1e3",
            "abc",
            "0.1\x01",
            "N/A/",
            "007",
            "0.12345678901234567890",
            "2147483647",
            "inf",
            "\x1c",
            "9.9",
            "1.234",
            "9.999",
            "0.000",
            "1.001",
            "1.23.",
            "1.2345",
            "1.2a4",
            "1..23",
            "N/A5",
            "N/AN/A",
            // Integers of 8 digits and more: cumulative counters, one digit too many, and
            // ones that are not integers.
            "12345678",
            "123456789",
            "281474976710656",
            "1234567890123456",
            "12345678901234567",
            "1234567890123456789",
            "12345678901234567890",
            "1234567890123456.5",
            "12345678x",
            "1234567890123456x",
        ];
        let gaps = [
            " ", "   ", "        ", "\t", " \x0b ", "\x0c", "\r", "  \t  ",
        ];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for _ in 0..20_000 {
            let mut row = String::from(
                [
                    "GPU 0",
                    "GPU-I 3",
                    "gpu 1",
                    "GPU x",
                    "GPU 12",
                    "GPU  7",
                    "GPU 4294967295",
                ][rng.random_range(0..7)],
            );
            for _ in 0..rng.random_range(0..10) {
                row.push_str(gaps[rng.random_range(0..gaps.len())]);
                row.push_str(words[rng.random_range(0..words.len())]);
            }
            if rng.random_bool(0.3) {
                row.push_str(gaps[rng.random_range(0..gaps.len())]);
            }
            let (mut fast, mut slow, mut whole) = (Vec::new(), Vec::new(), Vec::new());
            let got = scan_ascii_row(&row, &mut fast, &[], &mut false);
            let want = scan_row(row.split_whitespace(), &mut slow, &[], &mut false);
            assert_eq!(got, want, "{row:?}");
            let line = match want.clone() {
                Ok((kind, n)) => Line::Row(kind, n),
                Err(m) => Line::Bad(m),
            };
            assert_eq!(
                scan_with(&row, &mut whole, &[], &mut false),
                Scanned::of(line),
                "{row:?}"
            );
            assert_eq!(whole.len(), if got.is_ok() { slow.len() } else { 0 });
            if got.is_ok() {
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fast), bits(&slow), "{row:?}");
            }
        }
    }

    #[test]
    fn row_keys_tell_apart_what_their_parts_do() {
        let ids = [
            None,
            Some(0),
            Some(1),
            Some(7),
            Some(u32::MAX - 1),
            Some(u32::MAX),
        ];
        let mut keys = std::collections::HashMap::new();
        for &g in &ids {
            for &i in &ids {
                for &c in &ids {
                    assert_eq!(
                        keys.insert(row_key(g, i, c), (g, i, c)),
                        None,
                        "{g:?} {i:?} {c:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn words_at_read_eight_bytes_then_spaces() {
        let row = b"GPU 0      0.888        N/A";
        for len in 0..=row.len() {
            let b = &row[..len];
            for i in 0..len + 10 {
                let mut want = [b' '; 8];
                for (k, c) in b.iter().skip(i).take(8).enumerate() {
                    want[k] = *c;
                }
                assert_eq!(word_at(b, i), u64::from_le_bytes(want), "{len} {i}");
            }
        }
    }

    #[test]
    fn ascii_words_split_as_split_whitespace() {
        use rand::{Rng, SeedableRng};
        let alphabet = [' ', '\t', '\n', '\x0b', '\x0c', '\r', '\x1c', 'a', '1', '.'];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..20_000 {
            let n = rng.random_range(0..20);
            let line: String = (0..n)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            let got: Vec<&str> = AsciiWords(&line).collect();
            let want: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(got, want, "{line:?}");
            assert_eq!(line.trim_matches(is_ascii_space), line.trim(), "{line:?}");
        }
    }

    #[test]
    fn sentinel_helper_and_throttle_bits() {
        assert_eq!(dcgm_value(2_147_483_640.5), Some(2_147_483_640.5));
        assert_eq!(dcgm_value(f64::NAN), None);
        assert_eq!(dcgm_value(-1.0), Some(-1.0));
        let t = Throttles::from_event_bits(0x4 | 0x40 | 0x80);
        assert!(t.sw_power_cap && t.thermal && t.power && !t.hw_slowdown && !t.sync_boost);
        let t = Throttles::from_event_bits(0x8 | 0x10 | 0x20);
        assert!(t.hw_slowdown && t.sync_boost && t.thermal && !t.power && !t.sw_power_cap);
    }
}
