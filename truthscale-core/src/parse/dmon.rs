//! `dcgmi dmon` text output.
//!
//! ```text
//! #Entity    GRACT        SMACT        FP16A
//! ID
//! GPU 0      0.888        N/A          0.001
//! GPU-I 1    0.420        0.400        N/A
//! ```
//!
//! A header names the columns by their dcgmi short names; a later header replaces the
//! columns. Rows carry no timestamps: a sweep ends when an entity already seen in it
//! appears again, and sweep `k` is stamped `start + k * interval`. `N/A` and DCGM's
//! sentinel values become [`Reading::Blank`]. Lines before the first header, blank lines
//! and `#` comments are skipped and counted.
//!
//! `GPU-I n` rows are MIG GPU instances of the last `GPU` row before them (if any), and
//! `GPU-CI n` rows compute instances of the last `GPU-I` row, as dmon lists them.
//!
//! The DCGM-specific pieces shared with the dcgm-exporter parser (unit conversion,
//! sentinels, clock-event bits, framebuffer totals) live here as well.

use super::ParseError;
use crate::model::{
    EntityId, EntityKey, EntitySample, Field, MigId, Reading, Sample, Throttles, Timestamp,
};
use std::collections::HashSet;

/// How a raw DCGM number converts into a [`Field`]'s canonical unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Already canonical.
    Same,
    /// Percent (0–100) to ratio.
    Percent,
    /// Milli-units (mJ) to units (J).
    Milli,
    /// MiB to bytes.
    Mib,
}

impl Unit {
    fn apply(self, v: f64) -> f64 {
        match self {
            Unit::Same => v,
            Unit::Percent => v / 100.0,
            Unit::Milli => v / 1000.0,
            Unit::Mib => v * MIB,
        }
    }
}

const MIB: f64 = 1_048_576.0;

/// What a dmon column or an exporter metric feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// A field, converted from the source unit.
    Field(Field, Unit),
    /// Free framebuffer in MiB: only completes the total.
    FbFree,
    /// Reserved framebuffer in MiB: only completes the total.
    FbReserved,
    /// A power limit that yields to an enforced limit read in the same sample.
    WeakPowerLimit,
    /// The clock-event ("throttle") reasons bitmask.
    Throttles,
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
    ("FBFRE", Target::FbFree),
    ("FBTTL", F(Field::MemTotalBytes, Unit::Mib)),
    ("TMPTR", F(Field::TempCelsius, Unit::Same)),
];

/// A raw DCGM number, or `None` when it is one of DCGM's blank sentinels or not finite.
pub fn dcgm_value(raw: f64) -> Option<f64> {
    const TWO_POW_47: f64 = 140_737_488_355_328.0;
    let int_sentinel = raw.fract() == 0.0
        && ((2_147_483_632.0..=2_147_483_647.0).contains(&raw) || raw == 4_294_967_295.0);
    (raw.is_finite() && !int_sentinel && raw < TWO_POW_47).then_some(raw)
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
    fb_free: Option<f64>,
    fb_reserved: Option<f64>,
}

impl Acc {
    pub(crate) fn new(id: EntityId) -> Acc {
        Acc {
            sample: EntitySample {
                id,
                // dmon rows and dcgm-exporter scrapes read the clock at one instant.
                sm_clock_is_point: true,
                ..EntitySample::default()
            },
            fb_free: None,
            fb_reserved: None,
        }
    }

    /// Record a raw value (`None`: blank) for `target`. Sentinels and values that do not
    /// convert to a finite number stay blank.
    pub(crate) fn apply(&mut self, target: Target, raw: Option<f64>) {
        let v = raw.and_then(dcgm_value);
        let r = &mut self.sample.readings;
        match target {
            // A blank never erases a value an alias of the same field already gave.
            Target::Field(f, unit) => {
                if let Some(v) = v.map(|v| unit.apply(v)).filter(|v| v.is_finite()) {
                    r.set_value(f, v);
                }
            }
            Target::WeakPowerLimit => {
                if let (Reading::Blank, Some(v)) = (r.get(Field::PowerLimitWatts), v) {
                    r.set_value(Field::PowerLimitWatts, v);
                }
            }
            Target::FbFree => self.fb_free = v,
            Target::FbReserved => self.fb_reserved = v,
            Target::Throttles => {
                if let Some(m) = v.filter(|m| *m >= 0.0 && m.fract() == 0.0) {
                    self.sample.throttles = Some(Throttles::from_event_bits(m as u64));
                }
            }
        }
    }

    /// The finished sample; the total memory is completed from used + free (+ reserved)
    /// when no total was read.
    pub(crate) fn finish(mut self) -> EntitySample {
        let r = &mut self.sample.readings;
        if let (Reading::Blank, Some(used), Some(free)) = (
            r.get(Field::MemTotalBytes),
            r.value(Field::MemUsedBytes),
            self.fb_free,
        ) {
            let total = used + (free + self.fb_reserved.unwrap_or(0.0)) * MIB;
            if total.is_finite() {
                r.set_value(Field::MemTotalBytes, total);
            }
        }
        self.sample
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
    sweep: Vec<EntitySample>,
    seen: HashSet<EntityKey>,
    /// The last GPU row, and the last GPU-I row (its GPU, its id): the parents of the
    /// GPU-I and GPU-CI rows that follow them.
    ctx_gpu: Option<u32>,
    ctx_gi: Option<(Option<u32>, u32)>,
    sweeps: u64,
}

impl DmonParser {
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
            sweep: Vec::new(),
            seen: HashSet::new(),
            ctx_gpu: None,
            ctx_gi: None,
            sweeps: 0,
        }
    }

    /// Feed the next line (without its newline). Returns the previous sweep when this
    /// line starts a new one.
    ///
    /// # Errors
    /// A [`ParseError`] for a malformed row after a header: wrong number of values, a
    /// value that is neither a number nor `N/A`, an unknown entity kind, or a `GPU-CI`
    /// row with no `GPU-I` row before it. The parser is unchanged by a bad row and stays
    /// usable.
    pub fn push_line(&mut self, line: &str) -> Result<Option<Sample>, ParseError> {
        self.line += 1;
        let t = line.trim();
        if t.starts_with("#Entity") || t.starts_with("# Entity") {
            let names = t.strip_prefix('#').unwrap_or(t).trim_start();
            let cols = names
                .strip_prefix("Entity")
                .unwrap_or_default()
                .split_whitespace()
                .map(|n| {
                    COLUMNS
                        .iter()
                        .find(|(c, _)| c.eq_ignore_ascii_case(n))
                        .map(|c| c.1)
                })
                .collect();
            self.columns = Some(cols);
            return Ok(None);
        }
        let Some(columns) = &self.columns else {
            self.skipped += 1;
            return Ok(None);
        };
        if t.is_empty() || t.starts_with('#') {
            self.skipped += 1;
            return Ok(None);
        }
        if t.eq_ignore_ascii_case("id") {
            return Ok(None);
        }
        let (kind, n, values) = parse_row(t, columns.len()).map_err(|m| self.error(m))?;
        let id = match kind {
            Kind::Gpu => EntityId {
                gpu: Some(n),
                ..EntityId::default()
            },
            Kind::GpuInstance => mig_id(self.ctx_gpu, n, None),
            Kind::ComputeInstance => match self.ctx_gi {
                Some((gpu, gi)) => mig_id(gpu, gi, Some(n)),
                None => return Err(self.error("gpu-ci row without a preceding gpu-i row".into())),
            },
        };
        let mut acc = Acc::new(id);
        for (target, v) in columns.iter().zip(values) {
            if let Some(target) = target {
                acc.apply(*target, v);
            }
        }
        match kind {
            Kind::Gpu => (self.ctx_gpu, self.ctx_gi) = (Some(n), None),
            Kind::GpuInstance => self.ctx_gi = Some((self.ctx_gpu, n)),
            Kind::ComputeInstance => {}
        }
        let key = acc.sample.id.key();
        let done = if self.seen.contains(&key) {
            self.end_sweep()
        } else {
            None
        };
        self.seen.insert(key);
        self.sweep.push(acc.finish());
        Ok(done)
    }

    /// End of input: the last, possibly partial, sweep.
    pub fn finish(&mut self) -> Option<Sample> {
        self.end_sweep()
    }

    /// Lines skipped as not data: anything before the first header, blank lines and
    /// comments. Header and `ID` lines are structure and not counted.
    #[must_use]
    pub fn skipped_lines(&self) -> u64 {
        self.skipped
    }

    fn error(&self, message: String) -> ParseError {
        error(&self.file, self.line, message)
    }

    fn end_sweep(&mut self) -> Option<Sample> {
        self.seen.clear();
        if self.sweep.is_empty() {
            return None;
        }
        let taken = nth_time(self.start, self.sweeps, self.interval_secs);
        self.sweeps += 1;
        Some(Sample {
            taken,
            entities: std::mem::take(&mut self.sweep),
        })
    }
}

fn mig_id(gpu: Option<u32>, gpu_instance: u32, compute_instance: Option<u32>) -> EntityId {
    EntityId {
        gpu,
        mig: Some(MigId {
            uuid: None,
            gpu_instance,
            compute_instance,
            profile: None,
        }),
        ..EntityId::default()
    }
}

/// Split a row into its entity and its values (`None`: `N/A`).
fn parse_row(t: &str, ncols: usize) -> Result<(Kind, u32, Vec<Option<f64>>), String> {
    let mut tokens = t.split_whitespace();
    let kind = match tokens.next().unwrap_or_default() {
        k if k.eq_ignore_ascii_case("GPU") => Kind::Gpu,
        k if k.eq_ignore_ascii_case("GPU-I") => Kind::GpuInstance,
        k if k.eq_ignore_ascii_case("GPU-CI") => Kind::ComputeInstance,
        k => return Err(format!("unknown entity kind `{k}`")),
    };
    let id = tokens.next().unwrap_or_default();
    let n = id.parse().map_err(|_| format!("bad entity id `{id}`"))?;
    let values = tokens
        .map(|v| match v {
            "N/A" => Ok(None),
            _ => v
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| format!("bad value `{v}`")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if values.len() != ncols {
        return Err(format!("expected {ncols} values, found {}", values.len()));
    }
    Ok((kind, n, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(Vec<Sample>, u64), ParseError> {
        let mut p = DmonParser::new("cap.txt", 2.0, Timestamp(1_000));
        let mut out = Vec::new();
        for l in text.lines() {
            out.extend(p.push_line(l)?);
        }
        out.extend(p.finish());
        Ok((out, p.skipped_lines()))
    }

    fn val(s: &Sample, i: usize, f: Field) -> Reading {
        s.entities[i].readings.get(f)
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
            ("Switch 1 0.5 2", "cap.txt:4: unknown entity kind `Switch`"),
            ("GPU x 0.5 2", "cap.txt:4: bad entity id `x`"),
        ];
        for (row, want) in cases {
            let text = format!("#Entity GRACT POWER\nID\nGPU 0 0.1 1\n{row}\n");
            assert_eq!(parse(&text).unwrap_err().to_string(), want, "{row}");
        }
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
