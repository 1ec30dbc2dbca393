//! `nvidia-smi --query-gpu=… --format=csv` output.
//!
//! ```text
//! timestamp, index, uuid, name, pci.bus_id, utilization.gpu [%], memory.used [MiB], power.draw [W], clocks.sm [MHz], temperature.gpu
//! 2026/12/03 16:23:40.123, 0, GPU-5c1f…, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 45 %, 1024 MiB, 250.31 W, 1410 MHz, 61
//! ```
//!
//! The header names the columns as nvidia-smi prints them: the query names, each with its
//! unit in brackets where it has one. With `--format=csv` the values carry the unit too
//! (`45 %`, `1024 MiB`); with `csv,nounits` they are bare numbers. Either is read; a unit,
//! in the header or after a value, must be the one nvidia-smi prints for the column (a
//! column whose header declares another is an error and is not read until the next
//! header). The header is required: a capture taken with `noheader` is refused with an
//! error that says to drop it, since the columns cannot be told apart without their names.
//!
//! | column | field |
//! | --- | --- |
//! | `utilization.gpu` | reported utilization (percent to ratio) |
//! | `memory.used`, `memory.total` | memory used and total (MiB to bytes) |
//! | `memory.free` (`memory.reserved`) | completes the total when no `memory.total` is read |
//! | `power.draw` (`power.draw.instant`, `power.draw.average`) | power draw (W; where a row has more than one, the last column's) |
//! | `enforced.power.limit` | power limit (W) |
//! | `power.limit` | power limit (W), when no `enforced.power.limit` is read in the row |
//! | `clocks.sm` (`clocks.current.sm`) | SM clock (MHz), a reading at one instant |
//! | `clocks.mem` (`clocks.current.memory`) | memory clock (MHz) |
//! | `temperature.gpu` | temperature (°C) |
//! | `index`, `uuid`, `name`, `pci.bus_id` | the GPU, its UUID, model and PCI bus id |
//!
//! `utilization.memory` is **not read**: it is the fraction of time the memory controller
//! was busy reading or writing, not the DRAM bandwidth used over the peak (as dmon's
//! `MCUTL` is not read). Any other column is not read either; each is named
//! ([`SmiCsvParser::unread`]), as unread DCGM families are.
//!
//! What nvidia-smi CSV cannot say: it has no tensor, SM or DRAM activity (those are DCGM
//! profiling counters, or NVML GPM, neither of which `--query-gpu` prints). Only the busy
//! flag (`utilization.gpu`, the fraction of time a kernel was resident), power, clocks and
//! memory are read, so the derivation is at the `nvml` tier (`busy_only` without power or
//! clock): effective compute is only bounded, never measured, and no regime that needs
//! tensor or DRAM activity is given.
//!
//! `[N/A]`, `[Not Supported]` (any bracketed word nvidia-smi prints instead of a value),
//! `N/A` and an empty value are blank readings, never 0.
//!
//! Times: a `timestamp` column (`2026/12/03 16:23:40.123`, as nvidia-smi prints it, with or
//! without the milliseconds) stamps the samples. nvidia-smi prints the host's local time
//! without a zone; it is read as **UTC**, so the absolute times are off by the host's
//! offset, and the times between samples are right only while that offset does not change.
//! Across a daylight-saving change they are not: after the clocks go back, the rows of the
//! repeated hour are no later than the samples before it and are skipped
//! (`non_increasing_time`, an hour lost); after they go forward, two samples are an hour
//! apart (a `gap`). Capture with `TZ=UTC nvidia-smi …`, or use a format whose times carry
//! their offset (the JSONL trace's RFC 3339 `taken`). Rows make one sample (a sweep, as in
//! `dcgmi dmon`) until a GPU already in it appears again, or a row is stamped before the
//! sweep's first row or a second or more after it; the sample is stamped with the latest
//! of its rows' times. Without a `timestamp` column, sweep `k` is stamped
//! `start + k * interval`. Blank lines, `#` lines and lines before the header are skipped
//! and counted.

use super::ParseError;
use super::dmon::{self, Acc, Target, Unit, error, nth_time};
use crate::model::{EntityId, EntityKey, EntitySample, Field, Sample, Timestamp};
use std::collections::HashSet;

use Target::Field as F;

/// What one column of the header holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    /// `timestamp`: the row's time.
    Time,
    /// `index`: the GPU index.
    Index,
    /// `uuid`: the GPU UUID.
    Uuid,
    /// `name`: the model name.
    Name,
    /// `pci.bus_id`.
    PciBusId,
    /// A reading, in the unit nvidia-smi prints for it.
    Reading(Target, &'static str),
    /// A column not read (`utilization.memory`, or one this parser does not know).
    Ignored,
}

use Column::Reading as R;

/// The query names read, with what they feed. `utilization.memory` is the memory
/// controller's busy fraction, not DRAM bandwidth: deliberately not read.
#[rustfmt::skip]
const COLUMNS: &[(&str, Column)] = &[
    ("timestamp",             Column::Time),
    ("index",                 Column::Index),
    ("uuid",                  Column::Uuid),
    ("gpu_uuid",              Column::Uuid),
    ("name",                  Column::Name),
    ("gpu_name",              Column::Name),
    ("pci.bus_id",            Column::PciBusId),
    ("gpu_bus_id",            Column::PciBusId),
    ("utilization.gpu",       R(F(Field::ReportedUtil, Unit::Percent), "%")),
    ("utilization.memory",    Column::Ignored),
    ("memory.used",           R(F(Field::MemUsedBytes, Unit::Mib), "MiB")),
    ("memory.total",          R(F(Field::MemTotalBytes, Unit::Mib), "MiB")),
    ("memory.free",           R(Target::FbFree(Unit::Mib), "MiB")),
    ("memory.reserved",       R(Target::FbReserved(Unit::Mib), "MiB")),
    ("power.draw",            R(F(Field::PowerWatts, Unit::Same), "W")),
    ("power.draw.instant",    R(F(Field::PowerWatts, Unit::Same), "W")),
    ("power.draw.average",    R(F(Field::PowerWatts, Unit::Same), "W")),
    ("enforced.power.limit",  R(F(Field::PowerLimitWatts, Unit::Same), "W")),
    ("power.limit",           R(Target::WeakPowerLimit, "W")),
    ("clocks.sm",             R(F(Field::SmClockMhz, Unit::Same), "MHz")),
    ("clocks.current.sm",     R(F(Field::SmClockMhz, Unit::Same), "MHz")),
    ("clocks.mem",            R(F(Field::MemClockMhz, Unit::Same), "MHz")),
    ("clocks.current.memory", R(F(Field::MemClockMhz, Unit::Same), "MHz")),
    ("temperature.gpu",       R(F(Field::TempCelsius, Unit::Same), "C")),
];

/// A row stamped this long after its sweep's first row, or more, starts a new sweep.
const SWEEP_SPAN_MS: i64 = 1_000;

/// What the error for a row before any header says.
const NO_HEADER: &str = "a row before any header: nvidia-smi CSV is read by its header; \
     capture with --format=csv or csv,nounits, without noheader";

/// One column of the current header: its name as printed, and what it holds.
#[derive(Debug, Clone)]
struct Col {
    name: String,
    kind: Column,
}

/// Line-at-a-time parser for `nvidia-smi --query-gpu=… --format=csv` output.
#[derive(Debug)]
pub struct SmiCsvParser {
    file: String,
    interval_secs: f64,
    line: usize,
    skipped: u64,
    /// The current header's columns; `None` until the first header.
    columns: Option<Vec<Col>>,
    /// Whether a row before any header was reported (once; the next are skipped).
    headerless: bool,
    /// The rows of the current sweep, and their entities' keys.
    sweep: Vec<EntitySample>,
    keys: HashSet<EntityKey>,
    /// The first and latest row times of the current sweep (ms), when its rows have them.
    times: Option<(i64, i64)>,
    sweeps: u64,
    /// The time and index of the last sweep with a time (`start`, 0 before any): what a
    /// sweep without one is stamped from.
    anchor: (Timestamp, u64),
    timestamped: bool,
    /// The columns of a header that are not read, named.
    unread: super::names::Unread,
}

impl SmiCsvParser {
    /// A parser for the input named `file`. Samples are stamped with the rows' timestamps;
    /// sweep `k` of a capture without a `timestamp` column is stamped
    /// `start + k * interval_secs`.
    #[must_use]
    pub fn new(file: &str, interval_secs: f64, start: Timestamp) -> Self {
        SmiCsvParser {
            file: file.to_owned(),
            interval_secs,
            line: 0,
            skipped: 0,
            columns: None,
            headerless: false,
            sweep: Vec::new(),
            keys: HashSet::new(),
            times: None,
            sweeps: 0,
            anchor: (start, 0),
            timestamped: false,
            unread: super::names::Unread::default(),
        }
    }

    /// Feed the next line (without its newline). Returns the previous sweep when this
    /// line starts a new one.
    ///
    /// # Errors
    /// A [`ParseError`] for a row with more or fewer values than the header has columns, a
    /// value that is neither a number nor blank, a unit that is not the column's, a
    /// timestamp or GPU index that does not read; for a header that declares a unit
    /// nvidia-smi does not print for a column (that column is then not read); and, once,
    /// for a row before any header (a capture taken with `noheader`). The parser is
    /// unchanged by a bad row and stays usable.
    pub fn push_line(&mut self, line: &str) -> Result<Option<Sample>, ParseError> {
        self.line += 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            self.skipped += 1;
            return Ok(None);
        }
        if let Some(names) = header(t) {
            let r = self.set_header(&names);
            return r
                .map(|()| None)
                .map_err(|m| error(&self.file, self.line, m));
        }
        let Some(columns) = &self.columns else {
            if !self.headerless && is_row(t) {
                self.headerless = true;
                return Err(error(&self.file, self.line, NO_HEADER.to_owned()));
            }
            self.skipped += 1;
            return Ok(None);
        };
        let mut blanks = Vec::new();
        let (time, entity) =
            row(columns, t, &mut blanks).map_err(|m| error(&self.file, self.line, m))?;
        for (name, blank) in blanks {
            match blank {
                Blank::Impossible => self.unread.impossible(&name),
                Blank::Sentinel(v) => self.unread.blank(&name, v),
                Blank::Error => self.unread.error(&name),
            }
        }
        Ok(self.add(time, entity))
    }

    /// End of input: the last sweep.
    pub fn finish(&mut self) -> Option<Sample> {
        self.end_sweep()
    }

    /// Lines skipped as not data: blank lines, `#` lines, and lines before the header.
    #[must_use]
    pub fn skipped_lines(&self) -> u64 {
        self.skipped
    }

    /// The columns seen in a header and not read.
    #[must_use]
    pub fn unread(&self) -> &super::names::Unread {
        &self.unread
    }

    /// Whether a sample returned so far was stamped from its rows' own timestamps rather
    /// than from `start` and the interval.
    #[must_use]
    pub fn timestamped(&self) -> bool {
        self.timestamped
    }

    /// Install a header's columns; `Err` naming the first column whose declared unit is
    /// not the one nvidia-smi prints for it (that column is not read).
    fn set_header(&mut self, names: &[(&str, &str)]) -> Result<(), String> {
        let mut bad = None;
        let columns = names
            .iter()
            .map(|&(name, unit)| {
                let kind = COLUMNS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or(Column::Ignored, |(_, c)| *c);
                if kind == Column::Ignored {
                    self.unread.family(name);
                }
                let kind = match kind {
                    R(_, want) if !unit.is_empty() && unit != want => {
                        bad.get_or_insert_with(|| {
                            format!(
                                "column `{name} [{unit}]`: nvidia-smi prints {name} in {want}, not \
                                 {unit}; the column is not read"
                            )
                        });
                        Column::Ignored
                    }
                    k => k,
                };
                Col {
                    name: name.to_owned(),
                    kind,
                }
            })
            .collect();
        self.columns = Some(columns);
        bad.map_or(Ok(()), Err)
    }

    /// Add a row to the current sweep, closing it first when the row starts a new one;
    /// returns the sweep closed.
    fn add(&mut self, time: Option<i64>, entity: EntitySample) -> Option<Sample> {
        let key = entity.id.key();
        let late = match (time, self.times) {
            (Some(t), Some((first, _))) => t < first || t.saturating_sub(first) >= SWEEP_SPAN_MS,
            _ => false,
        };
        let done = if self.keys.contains(&key) || late {
            self.end_sweep()
        } else {
            None
        };
        self.keys.insert(key);
        self.times = match (self.times, time) {
            (Some((first, last)), Some(t)) => Some((first, last.max(t))),
            (None, Some(t)) => Some((t, t)),
            (times, None) => times,
        };
        self.sweep.push(entity);
        done
    }

    /// Close the current sweep, if it has a row.
    fn end_sweep(&mut self) -> Option<Sample> {
        if self.sweep.is_empty() {
            return None;
        }
        self.keys.clear();
        let k = self.sweeps;
        self.sweeps += 1;
        let own = self.times.take().map(|(_, last)| Timestamp(last));
        let taken = own.unwrap_or_else(|| {
            let (at, j) = self.anchor;
            nth_time(at, k - j, self.interval_secs)
        });
        if own.is_some() {
            self.anchor = (taken, k);
            self.timestamped = true;
        }
        Some(Sample {
            taken,
            entities: std::mem::take(&mut self.sweep),
        })
    }
}

/// The time (ms since the epoch, if the header has a `timestamp` column) and the entity of
/// one row, or what is wrong with it; the columns of its readings left blank for a reason
/// to count (an error printed, a sentinel, a value no GPU gives) go to `blanks`.
fn row(
    columns: &[Col],
    line: &str,
    blanks: &mut Vec<(String, Blank)>,
) -> Result<(Option<i64>, EntitySample), String> {
    let n = line.split(',').count();
    if n != columns.len() {
        return Err(format!(
            "{n} values for the header's {} columns",
            columns.len()
        ));
    }
    let mut acc = Acc::new(EntityId::default());
    let mut id = EntityId::default();
    let mut time = None;
    for (value, col) in line.split(',').map(str::trim).zip(columns) {
        let text = (!is_blank(value)).then(|| value.to_owned());
        match col.kind {
            Column::Time => {
                let t = parse_timestamp(value).ok_or_else(|| {
                    format!("timestamp `{value}` is not YYYY/MM/DD HH:MM:SS[.mmm]")
                })?;
                time = Some(t);
            }
            Column::Index => {
                id.gpu = text
                    .map(|v| v.parse::<u32>())
                    .transpose()
                    .map_err(|_| format!("{}: `{value}` is not a GPU index", col.name))?;
            }
            Column::Uuid => id.uuid = text,
            Column::Name => id.model = text,
            Column::PciBusId => id.pci_bus_id = text,
            Column::Reading(target, unit) => {
                if is_error(value) {
                    blanks.push((col.name.clone(), Blank::Error));
                    continue;
                }
                let v = number(value, unit).map_err(|m| format!("{}: {m}", col.name))?;
                if let Some(raw) = v.filter(|raw| dmon::dcgm_value(*raw).is_none()) {
                    blanks.push((col.name.clone(), Blank::Sentinel(raw)));
                }
                if acc.apply(target, v) {
                    blanks.push((col.name.clone(), Blank::Impossible));
                }
            }
            Column::Ignored => {}
        }
    }
    acc.sample.id = id;
    Ok((time, acc.finish()))
}

/// Why a reading of a row was left blank, counted under its column.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Blank {
    /// A value no GPU gives (negative free memory).
    Impossible,
    /// One of DCGM's blank sentinels (by the field's type), as read.
    Sentinel(f64),
    /// An error nvidia-smi printed in place of the value (`[Unknown Error]`).
    Error,
}

/// Whether a value is an error nvidia-smi printed in place of it: a bracketed word other
/// than its words for no value, `[N/A]` and `[Not Supported]` (`[Unknown Error]`, `[GPU is
/// lost]`, `[Insufficient Permissions]`).
fn is_error(value: &str) -> bool {
    value.starts_with('[') && value.ends_with(']') && !matches!(value, "[N/A]" | "[Not Supported]")
}

/// Whether a value is one of nvidia-smi's words for no value: `[N/A]`, `[Not Supported]`,
/// any other bracketed word (an error, counted apart: [`is_error`]), `N/A`, or nothing.
fn is_blank(value: &str) -> bool {
    value.is_empty() || value == "N/A" || (value.starts_with('[') && value.ends_with(']'))
}

/// A value in `unit` (`None`: blank): a number, then the unit or nothing.
fn number(value: &str, unit: &str) -> Result<Option<f64>, String> {
    if is_blank(value) {
        return Ok(None);
    }
    let (num, got) = match value.split_once(' ') {
        Some((num, got)) => (num, got.trim()),
        None => (value, ""),
    };
    if !got.is_empty() && got != unit {
        return Err(format!("`{value}`: unit `{got}`, not {unit}"));
    }
    num.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .map(Some)
        .ok_or_else(|| format!("`{value}` is not a number"))
}

/// The columns a header line names, each with the unit it declares in brackets (empty:
/// none); `None` when the line is not a header: not a list of query names, or none of
/// them one this parser knows.
fn header(line: &str) -> Option<Vec<(&str, &str)>> {
    let mut known = false;
    let mut names = Vec::new();
    for field in line.split(',').map(str::trim) {
        let (name, unit) = match field.split_once('[') {
            Some((name, rest)) => (name.trim_end(), rest.strip_suffix(']')?.trim()),
            None => (field, ""),
        };
        let query_name = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_');
        if !query_name {
            return None;
        }
        known |= COLUMNS.iter().any(|(n, _)| *n == name);
        names.push((name, unit));
    }
    known.then_some(names)
}

/// Whether a line before any header is a data row of a capture without one: its first
/// value a timestamp or a GPU index, and more after it.
fn is_row(line: &str) -> bool {
    line.split_once(',').is_some_and(|(first, _)| {
        let first = first.trim();
        parse_timestamp(first).is_some()
            || (!first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Whether a line (trimmed) shows nvidia-smi CSV: a header with a timestamp or a reading
/// column, or a row of a capture taken
/// with `noheader` that starts with a timestamp (read as this format, to be refused with
/// a message that says why).
pub(crate) fn detects(line: &str) -> bool {
    let read = |name: &str| {
        COLUMNS
            .iter()
            .any(|(n, c)| *n == name && matches!(c, R(..) | Column::Time))
    };
    header(line).is_some_and(|names| names.iter().any(|(n, _)| read(n)))
        || line
            .split_once(',')
            .is_some_and(|(first, _)| parse_timestamp(first.trim()).is_some())
}

/// Whether the first header among `lines` names a `timestamp` column, so that the samples
/// carry their own times rather than being stamped an interval apart.
///
/// ```
/// use truthscale_core::parse::smi_csv::header_has_timestamp;
/// assert!(header_has_timestamp(["# note", "timestamp, index, utilization.gpu [%]"]));
/// assert!(!header_has_timestamp(["index, utilization.gpu [%]", "timestamp, index"]));
/// ```
pub fn header_has_timestamp<'a>(lines: impl IntoIterator<Item = &'a str>) -> bool {
    lines
        .into_iter()
        .find_map(|l| header(l.trim()))
        .is_some_and(|names| names.iter().any(|(n, _)| *n == "timestamp"))
}

/// A timestamp as nvidia-smi prints it, `YYYY/MM/DD HH:MM:SS` with or without a fraction
/// of a second (`.123`), read as UTC: milliseconds since the Unix epoch.
///
/// ```
/// use truthscale_core::parse::smi_csv::parse_timestamp;
/// assert_eq!(parse_timestamp("2026/12/03 16:23:40.123"), Some(1_796_315_020_123));
/// assert_eq!(parse_timestamp("1970/01/01 00:00:01"), Some(1_000));
/// assert_eq!(parse_timestamp("2026-12-03 16:23:40"), None);
/// ```
#[must_use]
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let (date, clock) = s.split_once(' ')?;
    let (clock, frac) = match clock.split_once('.') {
        Some((_, "")) => return None,
        Some(parts) => parts,
        None => (clock, ""),
    };
    let [year, month, day] = fields::<3>(date, '/')?;
    let [hour, minute, second] = fields::<3>(clock, ':')?;
    let four_digit_year = date.find('/') == Some(4);
    if !four_digit_year || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let milli = format!("{frac:0<3}").get(..3)?.parse::<u16>().ok()?;
    let small = |v: u32| u8::try_from(v).ok();
    let month = time::Month::try_from(small(month)?).ok()?;
    let day = time::Date::from_calendar_date(i32::try_from(year).ok()?, month, small(day)?);
    let at = time::Time::from_hms_milli(small(hour)?, small(minute)?, small(second)?, milli);
    let at = time::PrimitiveDateTime::new(day.ok()?, at.ok()?).assume_utc();
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// `N` numbers of one to four digits separated by `sep`.
fn fields<const N: usize>(s: &str, sep: char) -> Option<[u32; N]> {
    let mut out = [0; N];
    let mut parts = s.split(sep);
    for slot in &mut out {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 4 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = part.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Reading;
    use crate::parse::Format;

    const MIB: f64 = 1_048_576.0;
    /// 2026-12-03T16:23:40Z in milliseconds.
    const T0: i64 = 1_796_315_020_000;

    fn parse(text: &str, interval: f64) -> (Vec<Sample>, Vec<String>, SmiCsvParser) {
        let mut p = SmiCsvParser::new("s.csv", interval, Timestamp(5_000));
        let (mut out, mut errors) = (Vec::new(), Vec::new());
        for l in text.lines() {
            match p.push_line(l) {
                Ok(s) => out.extend(s),
                Err(e) => errors.push(e.to_string()),
            }
        }
        out.extend(p.finish());
        (out, errors, p)
    }

    /// Assert exact readings: `Some(v)` a value, `None` blank.
    fn check(e: &EntitySample, want: &[(Field, Option<f64>)]) {
        for &(f, v) in want {
            let expected = v.map_or(Reading::Blank, Reading::Value);
            assert_eq!(e.readings.get(f), expected, "{} {}", e.id, f.name());
        }
    }

    const HEADER: &str = "timestamp, index, uuid, name, pci.bus_id, utilization.gpu [%], \
        utilization.memory [%], memory.used [MiB], memory.total [MiB], memory.free [MiB], \
        power.draw [W], power.limit [W], clocks.sm [MHz], clocks.mem [MHz], temperature.gpu";

    const UNITS: &str = "\
2026/12/03 16:23:40.123, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 45 %, 12 %, 1024 MiB, 81559 MiB, 80535 MiB, 250.31 W, 700.00 W, 1410 MHz, 2619 MHz, 61
2026/12/03 16:23:40.125, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 0 %, 0 %, 0 MiB, 81559 MiB, 81559 MiB, 70.12 W, 700.00 W, 345 MHz, 2619 MHz, 33
2026/12/03 16:23:41.123, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 100 %, 40 %, 2048 MiB, 81559 MiB, 79511 MiB, 690.50 W, 700.00 W, 1980 MHz, 2619 MHz, 70
2026/12/03 16:23:41.124, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 0 %, 0 %, 0 MiB, 81559 MiB, 81559 MiB, 70.05 W, 700.00 W, 345 MHz, 2619 MHz, 33
";

    /// `--format=csv`: every column read, in its unit, the header's units and the values'.
    #[test]
    fn reads_a_capture_with_units() {
        let text = format!("# source: constructed\n{HEADER}\n{UNITS}");
        let (samples, errors, p) = parse(&text, 1.0);
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!((samples.len(), p.skipped_lines()), (2, 1));
        assert!(p.timestamped());
        // Each sweep stamped with its latest row.
        assert_eq!(samples[0].taken, Timestamp(T0 + 125));
        assert_eq!(samples[1].taken, Timestamp(T0 + 1_124));
        let g0 = &samples[0].entities[0];
        let want = EntityId {
            gpu: Some(0),
            uuid: Some("GPU-aaaa".into()),
            model: Some("NVIDIA H100 80GB HBM3".into()),
            pci_bus_id: Some("00000000:18:00.0".into()),
            ..EntityId::default()
        };
        assert_eq!(g0.id, want);
        assert!(g0.sm_clock_is_point);
        check(
            g0,
            &[
                (Field::ReportedUtil, Some(0.45)),
                (Field::MemUsedBytes, Some(1024.0 * MIB)),
                (Field::MemTotalBytes, Some(81_559.0 * MIB)),
                (Field::PowerWatts, Some(250.31)),
                (Field::PowerLimitWatts, Some(700.0)),
                (Field::SmClockMhz, Some(1410.0)),
                (Field::MemClockMhz, Some(2619.0)),
                (Field::TempCelsius, Some(61.0)),
                // utilization.memory is not DRAM activity: not read.
                (Field::DramActive, None),
                (Field::TensorActive, None),
                (Field::SmActive, None),
            ],
        );
        let g1 = &samples[1].entities[1];
        assert_eq!(
            (g1.id.gpu, g1.id.pci_bus_id.as_deref()),
            (Some(1), Some("00000000:2A:00.0"))
        );
        check(
            g1,
            &[
                (Field::ReportedUtil, Some(0.0)),
                (Field::MemUsedBytes, Some(0.0)),
                (Field::PowerWatts, Some(70.05)),
                (Field::SmClockMhz, Some(345.0)),
            ],
        );
        check(&samples[1].entities[0], &[(Field::ReportedUtil, Some(1.0))]);
    }

    /// `csv,nounits`: the same readings from bare numbers.
    #[test]
    fn nounits_reads_the_same() {
        let bare: String = UNITS
            .replace(" %", "")
            .replace(" MiB", "")
            .replace(" W", "")
            .replace(" MHz", "");
        assert!(!bare.contains("MiB"));
        let with_units = parse(&format!("{HEADER}\n{UNITS}"), 1.0).0;
        let (samples, errors, _) = parse(&format!("{HEADER}\n{bare}"), 1.0);
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(samples, with_units);
    }

    /// Negative free memory is no size: blank, counted under its column, and no total is
    /// made of it; the next row's is read.
    #[test]
    fn negative_free_memory_is_impossible_and_counted() {
        let text = "\
timestamp, index, memory.used [MiB], memory.free [MiB]
2026/12/03 16:23:40, 0, 1000 MiB, -900 MiB
2026/12/03 16:23:41, 0, 1000 MiB, 3000 MiB
";
        let (samples, errors, p) = parse(text, 1.0);
        assert_eq!(errors, Vec::<String>::new());
        let total = |k: usize| samples[k].entities[0].readings.value(Field::MemTotalBytes);
        assert_eq!(total(0), None);
        assert_eq!(total(1), Some(4000.0 * 1_048_576.0));
        assert_eq!(
            p.unread().impossible,
            std::collections::BTreeMap::from([("memory.free".to_string(), 1)])
        );
    }

    /// A DCGM blank sentinel (INT32's, as a clock) and an error nvidia-smi printed in place
    /// of a value are blanks, each counted under its column, never read and never dropped
    /// in silence; `[N/A]` and `[Not Supported]` are no value, not counted.
    #[test]
    fn sentinels_and_error_words_are_blank_and_counted() {
        let text = "\
timestamp, index, clocks.sm [MHz], utilization.gpu [%], power.draw [W]
2026/12/03 16:23:40, 0, 2147483647 MHz, [Unknown Error], [N/A]
2026/12/03 16:23:41, 0, 1980 MHz, [GPU is lost], [Not Supported]
";
        let (samples, errors, p) = parse(text, 1.0);
        assert_eq!(errors, Vec::<String>::new());
        let r = |k: usize, f| samples[k].entities[0].readings.value(f);
        assert_eq!(r(0, Field::SmClockMhz), None);
        assert_eq!(r(1, Field::SmClockMhz), Some(1980.0));
        assert_eq!(r(0, Field::ReportedUtil), None);
        let u = p.unread();
        assert_eq!(
            u.sentinels,
            std::collections::BTreeMap::from([("clocks.sm".to_string(), 1)])
        );
        assert_eq!(
            u.errors,
            std::collections::BTreeMap::from([("utilization.gpu".to_string(), 2)])
        );
        assert!(u.non_finite.is_empty() && u.impossible.is_empty());
        assert_eq!(
            u.summary().as_deref(),
            Some(
                "1 reading(s) of clocks.sm were DCGM's blank sentinel: left blank, never data; 2 reading(s) of utilization.gpu were an error the tool printed in place of a value: left blank, never data"
            )
        );
    }

    /// `power.draw.average` is the power draw; a column not read is named, never dropped in
    /// silence.
    #[test]
    fn average_power_is_read_and_other_columns_are_named() {
        let text = "\
timestamp, index, power.draw.average [W], fan.speed [%], utilization.memory [%]
2026/12/03 16:23:40, 0, 250 W, 30 %, 5 %
";
        let (samples, errors, p) = parse(text, 1.0);
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(
            samples[0].entities[0].readings.value(Field::PowerWatts),
            Some(250.0)
        );
        assert_eq!(
            p.unread().families.iter().collect::<Vec<_>>(),
            ["fan.speed", "utilization.memory"]
        );
    }

    /// `[N/A]`, `[Not Supported]`, `N/A` and nothing are blanks; free memory completes the
    /// total; `power.limit` yields to `enforced.power.limit`, before or after it.
    #[test]
    fn blanks_free_memory_and_power_limits() {
        let text = "\
timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.free [MiB], power.draw [W], enforced.power.limit [W], power.limit [W], clocks.sm [MHz], temperature.gpu
2026/12/03 16:23:40, 0, Tesla T4, [N/A], 15 MiB, 15095 MiB, [Not Supported], 70.00 W, 60.00 W, N/A, 
2026/12/03 16:23:40, 1, [N/A], 7 %, [N/A], 100 MiB, 27.5 W, [N/A], 60.00 W, 585 MHz, 40
";
        let (samples, errors, _) = parse(text, 1.0);
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].taken, Timestamp(T0));
        let [g0, g1] = &samples[0].entities[..] else {
            panic!("{samples:?}")
        };
        assert_eq!(g0.id.model.as_deref(), Some("Tesla T4"));
        check(
            g0,
            &[
                (Field::ReportedUtil, None),
                (Field::MemUsedBytes, Some(15.0 * MIB)),
                (Field::MemTotalBytes, Some(15_110.0 * MIB)),
                (Field::PowerWatts, None),
                (Field::PowerLimitWatts, Some(70.0)),
                (Field::SmClockMhz, None),
                (Field::TempCelsius, None),
            ],
        );
        assert_eq!(g1.id.model, None);
        check(
            g1,
            &[
                (Field::ReportedUtil, Some(0.07)),
                (Field::MemUsedBytes, None),
                // No used memory: free alone makes no total.
                (Field::MemTotalBytes, None),
                (Field::PowerWatts, Some(27.5)),
                (Field::PowerLimitWatts, Some(60.0)),
                (Field::SmClockMhz, Some(585.0)),
                (Field::TempCelsius, Some(40.0)),
            ],
        );
    }

    /// Without a timestamp column, a sweep ends when a GPU appears again; sweep `k` is
    /// `start + k * interval`.
    #[test]
    fn without_timestamps_sweeps_are_an_interval_apart() {
        let text = "index, utilization.gpu [%]\n0, 10 %\n1, 20 %\n0, 30 %\n1, 40 %\n0, 50 %\n";
        let (samples, errors, p) = parse(text, 0.5);
        assert_eq!(errors, Vec::<String>::new());
        assert!(!p.timestamped());
        let got: Vec<_> = samples
            .iter()
            .map(|s| (s.taken, s.entities.len()))
            .collect();
        assert_eq!(
            got,
            [
                (Timestamp(5_000), 2),
                (Timestamp(5_500), 2),
                (Timestamp(6_000), 1)
            ]
        );
        check(&samples[2].entities[0], &[(Field::ReportedUtil, Some(0.5))]);
    }

    /// Rows group by time: those within a second of the sweep's first row go together
    /// (stamped with the latest), one a second or more later, or earlier, starts a new one.
    #[test]
    fn timestamps_group_rows_into_sweeps() {
        let text = "\
timestamp, index, utilization.gpu [%]
2026/12/03 16:23:40.000, 0, 10 %
2026/12/03 16:23:41.000, 1, 20 %
2026/12/03 16:23:42.000, 0, 30 %
2026/12/03 16:23:42.900, 1, 40 %
2026/12/03 16:23:42.950, 0, 50 %
2026/12/03 16:23:41.500, 1, 60 %
";
        let (samples, errors, _) = parse(text, 1.0);
        assert_eq!(errors, Vec::<String>::new());
        let got: Vec<_> = samples
            .iter()
            .map(|s| {
                let gpus: Vec<_> = s.entities.iter().filter_map(|e| e.id.gpu).collect();
                (s.taken.0 - T0, gpus)
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, vec![0]),
                (1_000, vec![1]),
                (2_900, vec![0, 1]),
                (2_950, vec![0]),
                (1_500, vec![1]),
            ]
        );
    }

    /// Each bad line is an error naming the file and line; the parser goes on.
    #[test]
    fn bad_lines_are_errors_and_the_parser_goes_on() {
        let text = "\
timestamp, index, utilization.gpu [%], memory.used [GiB], power.draw [W]
2026/12/03 16:23:40, 0, 10 %, 3 GiB, 100 W
2026/12/03 16:23:40, 1, 10 %, 3 GiB
2026/12/03 16:23:40, 1, 10 W, 3 GiB, 100 W
2026/12/03 16:23:40, 1, ten %, 3 GiB, 100 W
2026/13/03 16:23:40, 1, 10 %, 3 GiB, 100 W
2026/12/03 16:23:40, x, 10 %, 3 GiB, 100 W
2026/12/03 16:23:40, 1, inf %, 3 GiB, 100 W
2026/12/03 16:23:40, 1, 20 %, 3 GiB, 120 W
";
        let (samples, errors, _) = parse(text, 1.0);
        assert_eq!(
            errors,
            [
                "s.csv:1: column `memory.used [GiB]`: nvidia-smi prints memory.used in MiB, \
                 not GiB; the column is not read",
                "s.csv:3: 4 values for the header's 5 columns",
                "s.csv:4: utilization.gpu: `10 W`: unit `W`, not %",
                "s.csv:5: utilization.gpu: `ten %` is not a number",
                "s.csv:6: timestamp `2026/13/03 16:23:40` is not YYYY/MM/DD HH:MM:SS[.mmm]",
                "s.csv:7: index: `x` is not a GPU index",
                "s.csv:8: utilization.gpu: `inf %` is not a number",
            ]
        );
        assert_eq!(samples.len(), 1);
        let [g0, g1] = &samples[0].entities[..] else {
            panic!("{samples:?}")
        };
        check(
            g0,
            &[
                (Field::ReportedUtil, Some(0.1)),
                (Field::MemUsedBytes, None),
                (Field::PowerWatts, Some(100.0)),
            ],
        );
        check(
            g1,
            &[
                (Field::ReportedUtil, Some(0.2)),
                (Field::PowerWatts, Some(120.0)),
            ],
        );
    }

    /// A capture taken with `noheader`: one error that says to drop it, the rest skipped.
    #[test]
    fn noheader_is_refused_once_with_the_fix() {
        let text = "\
$ nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader -lms 1000
2026/12/03 16:23:40.123, 0, 45 %
2026/12/03 16:23:41.123, 0, 46 %
";
        assert_eq!(Format::detect(text), Some(Format::NvidiaSmiCsv));
        let (samples, errors, p) = parse(text, 1.0);
        assert_eq!(samples, []);
        assert_eq!(
            errors,
            [
                "s.csv:2: a row before any header: nvidia-smi CSV is read by its header; \
              capture with --format=csv or csv,nounits, without noheader"
            ]
        );
        assert_eq!(p.skipped_lines(), 2);
    }

    #[test]
    fn detection() {
        let detect = |t: &str| Format::detect(t);
        assert_eq!(
            detect("# source: x\ntimestamp, index, name, utilization.gpu [%]\n"),
            Some(Format::NvidiaSmiCsv)
        );
        assert_eq!(
            detect("index, memory.used [MiB]\n0, 1 MiB\n"),
            Some(Format::NvidiaSmiCsv)
        );
        // Identity columns alone, or no known column, are not enough.
        assert_eq!(detect("index, name\n0, T4\n"), None);
        assert_eq!(detect("hello\nworld\n"), None);
        assert_eq!(detect("index\n"), None);
        // The other formats are still theirs.
        assert_eq!(
            detect("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-1\"} 5\n"),
            Some(Format::DcgmExporter)
        );
        assert_eq!(detect("#Entity   GRACT\n"), Some(Format::DcgmiDmon));
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("2026/12/03 16:23:40.1"), Some(T0 + 100));
        assert_eq!(
            parse_timestamp("2026/12/03 16:23:40.123456"),
            Some(T0 + 123)
        );
        assert_eq!(parse_timestamp("2026/12/03 16:23:40"), Some(T0));
        for bad in [
            "2026/02/30 00:00:00",
            "2026/12/03 24:00:00",
            "2026/12/03 16:23:40.",
            "2026/12/03 16:23:40.1234567890",
            "26/12/03 16:23:40",
            "2026/12/03/01 16:23:40",
            "2026/12/03 16:23",
            "2026/+1/03 16:23:40",
            "2026/300/03 16:23:40",
            "",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    /// Odd lines never panic, and each is an error or skipped.
    #[test]
    fn odd_lines_do_not_panic() {
        let mut p = SmiCsvParser::new("s.csv", 1.0, Timestamp(0));
        for line in [
            ",",
            "[",
            "utilization.gpu [%",
            "utilization.gpu [%], ",
            "9999/99/99 99:99:99.999, 0",
            ",,,,",
            "1e400, 5",
            "\u{feff}, ü",
            "timestamp, index, utilization.gpu [%]",
            "9999/12/31 23:59:59.999, 4294967295, 1e308 %",
            "0001/01/01 00:00:00, 0, -0 %",
            ", , ",
        ] {
            let _ = p.push_line(line);
        }
        let s = p.finish();
        assert_eq!(s.map(|s| s.entities.len()), Some(1));
    }
}
