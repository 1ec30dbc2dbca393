//! DCGM's name generations and the cumulative counters, against truth computed here from
//! the workload that was rendered, never from the code under test.

use truthscale_core::derive::{DeriveConfig, Fidelity};
use truthscale_core::model::{Field, Sample, Timestamp};
use truthscale_core::parse::{Format, LineParser};
use truthscale_core::tracker::Deriver;

/// One GPU's readings at scrape `k` of the workload: integer percent utilisation, tensor,
/// SM and DRAM activity, SM clock in MHz, power in W, the energy counter in mJ, memory in
/// MiB, PCIe in B/s.
struct Point {
    util_pct: f64,
    tensor: f64,
    sm: f64,
    dram: f64,
    clock_mhz: f64,
    power_w: f64,
    energy_mj: f64,
    used_mib: f64,
    free_mib: f64,
    pcie: f64,
}

fn point(gpu: u32, k: u32) -> Point {
    let g = f64::from(gpu);
    let k = f64::from(k);
    Point {
        util_pct: (37.0 + 7.0 * k + 11.0 * g) % 100.0,
        tensor: 0.05 + 0.03 * (k % 7.0) + 0.1 * g,
        sm: 0.4 + 0.02 * (k % 5.0),
        dram: 0.3 + 0.01 * (k % 9.0),
        clock_mhz: 1755.0 + 10.0 * (k % 5.0),
        power_w: 300.0 + 5.0 * k + g,
        energy_mj: 1.0e9 + 15.0 * 1000.0 * (300.0 * k + 2.5 * k * k) + g,
        used_mib: 40_000.0 + 16.0 * k,
        free_mib: 41_000.0 - 16.0 * k,
        pcie: 1.0e9 + 1.0e6 * k,
    }
}

/// The dcgm-exporter generations the test renders.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Generation {
    /// 2.x–4.8: legacy names, legacy units, `Hostname`.
    V48,
    /// 4.9: DCGM 4.7's canonical names in base units, `hostname`.
    V49,
    /// 4.10: as 4.9, with the PCIe rate renamed `…_BYTES_PER_SECOND`.
    V410,
}

/// The series of one GPU at one scrape, in `generation`'s names and units.
fn series(generation: Generation, p: &Point) -> Vec<(&'static str, f64)> {
    const MIB: f64 = 1_048_576.0;
    match generation {
        Generation::V48 => vec![
            ("DCGM_FI_DEV_GPU_UTIL", p.util_pct),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", p.tensor),
            ("DCGM_FI_PROF_SM_ACTIVE", p.sm),
            ("DCGM_FI_PROF_DRAM_ACTIVE", p.dram),
            ("DCGM_FI_DEV_SM_CLOCK", p.clock_mhz),
            ("DCGM_FI_DEV_POWER_USAGE", p.power_w),
            ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", p.energy_mj),
            ("DCGM_FI_DEV_FB_USED", p.used_mib),
            ("DCGM_FI_DEV_FB_FREE", p.free_mib),
            ("DCGM_FI_PROF_PCIE_TX_BYTES", p.pcie),
            ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 0.0),
        ],
        Generation::V49 | Generation::V410 => vec![
            ("DCGM_FI_DEV_GPU_UTIL_RATIO", p.util_pct / 100.0),
            ("DCGM_FI_PROF_TENSOR_UTIL_RATIO", p.tensor),
            ("DCGM_FI_PROF_SM_UTIL_RATIO", p.sm),
            ("DCGM_FI_PROF_DRAM_UTIL_RATIO", p.dram),
            ("DCGM_FI_DEV_SM_CLOCK_HERTZ", p.clock_mhz * 1e6),
            ("DCGM_FI_DEV_BOARD_POWER_WATTS", p.power_w),
            ("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", p.energy_mj / 1000.0),
            ("DCGM_FI_DEV_FB_USED_BYTES", p.used_mib * MIB),
            ("DCGM_FI_DEV_FB_FREE_BYTES", p.free_mib * MIB),
            (
                if generation == Generation::V49 {
                    "DCGM_FI_PROF_PCIE_TX_BYTES"
                } else {
                    "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"
                },
                p.pcie,
            ),
            ("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", 0.0),
        ],
    }
}

/// Twenty scrapes of two H100s, 15 s apart, with exposition timestamps.
fn render(generation: Generation) -> String {
    let host = if generation == Generation::V48 {
        "Hostname"
    } else {
        "hostname"
    };
    let mut text = String::new();
    if generation != Generation::V48 {
        text.push_str("# HELP DCGM_FI_DEV_GPU_UTIL_RATIO GPU utilization (ratio, 0-1).\n");
    }
    for k in 0..20 {
        let ms = 1_767_225_600_000_i64 + i64::from(k) * 15_000;
        for gpu in 0..2 {
            let p = point(gpu, k);
            for (name, v) in series(generation, &p) {
                text.push_str(&format!(
                    "{name}{{gpu=\"{gpu}\",UUID=\"GPU-{gpu}\",{host}=\"node-a\",modelName=\"NVIDIA H100 80GB HBM3\"}} {v} {ms}\n"
                ));
            }
        }
    }
    text
}

fn samples(format: Format, text: &str) -> (Vec<Sample>, LineParser) {
    let mut p = LineParser::new(format, "capture", 15.0, Timestamp(0));
    let mut out = Vec::new();
    for line in text.lines() {
        out.extend(p.push_line(line).expect("parses"));
    }
    out.extend(p.finish());
    (out, p)
}

/// Each window's derived series: ECF, busy, saturation, power, energy, κ, clock, memory
/// and PCIe.
fn derived(samples: &[Sample]) -> Vec<[Option<f64>; 9]> {
    let mut d = Deriver::new(DeriveConfig::default(), None);
    let mut out = Vec::new();
    for s in samples {
        for w in d.observe(s).windows {
            let m = &w.metrics;
            out.push([
                m.effective_compute,
                m.reported_utilization,
                m.roofline_saturation,
                m.power_watts.map(|p| p.value),
                Some(w.totals.energy_joules),
                m.kappa,
                w.readings.value(Field::SmClockMhz),
                w.readings.value(Field::MemTotalBytes),
                w.readings.value(Field::PcieTxBytesPerSec),
            ]);
        }
    }
    out
}

#[test]
fn every_name_generation_gives_the_same_derived_series() {
    let (legacy, _) = samples(Format::DcgmExporter, &render(Generation::V48));
    let base = derived(&legacy);
    assert_eq!(base.len(), 40);
    // Truth from the workload: the last window of GPU 1, scrape 19.
    let p = point(1, 19);
    let last = base[39];
    assert!((last[1].unwrap() - p.util_pct / 100.0).abs() < 1e-12);
    let kappa = (0.5 * (p.clock_mhz + point(1, 18).clock_mhz)) / 1830.0;
    assert!((last[5].unwrap() - kappa).abs() < 1e-9, "{last:?}");
    assert!(
        (last[0].unwrap() - p.tensor * kappa).abs() < 1e-9,
        "{last:?}"
    );
    // dcgm-exporter holds its counters between collections, so its first reading has no
    // known time: the windows up to the counter's first change, and that change's own, from
    // the power gauge over the 15 s spacing; the counter's deltas after it.
    let energy = (point(1, 19).energy_mj - point(1, 1).energy_mj) / 1000.0
        + (point(1, 0).power_w + point(1, 1).power_w) * 15.0;
    assert!((last[4].unwrap() - energy).abs() < 1e-6, "{last:?}");
    assert!((last[7].unwrap() - 81_000.0 * 1_048_576.0).abs() < 1e-3);
    for generation in [Generation::V49, Generation::V410] {
        let (s, parser) = samples(Format::DcgmExporter, &render(generation));
        let got = derived(&s);
        assert_eq!(got.len(), base.len(), "{generation:?}");
        for (w, (a, b)) in got.iter().zip(&base).enumerate() {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                match (x, y) {
                    (Some(x), Some(y)) => assert!(
                        (x - y).abs() <= 1e-9 * y.abs().max(1.0),
                        "{generation:?} window {w} series {i}: {x} vs {y}"
                    ),
                    _ => assert_eq!(x, y, "{generation:?} window {w} series {i}"),
                }
            }
        }
        let unread = parser.unread().expect("dcgm-exporter names DCGM fields");
        assert_eq!(
            unread.families.iter().collect::<Vec<_>>(),
            ["dcgm_fi_dev_pcie_replay_total"],
            "the family not read is named"
        );
        assert!(unread.ambiguous.is_empty());
    }
}

#[test]
fn a_legacy_percent_beside_an_undecided_ratio_refuses_the_ambiguous_one() {
    // No `# HELP`: the canonical name's 1 cannot be told percent (1 %) from ratio (100 %).
    let text = "\
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 37 1000
DCGM_FI_DEV_GPU_UTIL_RATIO{gpu=\"1\"} 1 1000
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 38 2000
DCGM_FI_DEV_GPU_UTIL_RATIO{gpu=\"1\"} 1 2000
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 39 3000
DCGM_FI_DEV_GPU_UTIL_RATIO{gpu=\"1\"} 0 3000
";
    let (s, parser) = samples(Format::DcgmExporter, text);
    assert_eq!(s.len(), 3);
    for sample in &s[..2] {
        let by_gpu = |g| sample.entities.iter().find(|e| e.id.gpu == Some(g));
        assert!(
            by_gpu(0)
                .unwrap()
                .readings
                .value(Field::ReportedUtil)
                .is_some()
        );
        // GPU 1's only reading was refused: no entity, or one with no busy flag.
        assert!(by_gpu(1).is_none_or(|e| e.readings.value(Field::ReportedUtil).is_none()));
    }
    assert_eq!(
        s[1].entities[0].readings.value(Field::ReportedUtil),
        Some(0.38)
    );
    // 0 is 0 in either unit: read, deciding nothing.
    let gpu1 = s[2].entities.iter().find(|e| e.id.gpu == Some(1)).unwrap();
    assert_eq!(gpu1.readings.value(Field::ReportedUtil), Some(0.0));
    let unread = parser.unread().unwrap();
    assert_eq!(unread.ambiguous.get("dcgm_fi_dev_gpu_util_ratio"), Some(&2));
    let said = unread.summary().unwrap();
    assert!(
        said.contains("2 reading(s) of dcgm_fi_dev_gpu_util_ratio refused"),
        "{said}"
    );
    // A reading that decides it (a fraction) makes the later 0 and 1 readable.
    let (s, _) = samples(
        Format::DcgmExporter,
        "DCGM_FI_DEV_GPU_UTIL_RATIO{gpu=\"1\"} 0.25 1000\nDCGM_FI_DEV_GPU_UTIL_RATIO{gpu=\"1\"} 1 2000\n",
    );
    assert_eq!(
        s[1].entities[0].readings.value(Field::ReportedUtil),
        Some(1.0)
    );
}

/// The workload of the cumulative test: tensor activity that changes every 3 s (a step
/// function), at a constant clock, on one H100 whose counters start after days of uptime.
fn tensor_at(t: f64) -> f64 {
    let step = (t / 3.0).floor() as u64;
    [0.05, 0.9, 0.3, 0.0, 0.7, 0.15, 0.55][(step % 7) as usize]
}

/// SM cycles a second (132 SMs × 1 980 MHz, summed over SMs) and the counters' start.
const CYCLES_PER_SECOND: f64 = 132.0 * 1.98e9;
const START: f64 = 3.0e17; // far past 2^47: days of uptime

/// The MMA counter at `t` seconds: the integral of the workload, exact on its 3 s steps.
fn mma_at(t: f64) -> f64 {
    let whole = (t / 3.0).floor();
    let mut sum = 0.0;
    for s in 0..whole as u64 {
        sum += tensor_at(s as f64 * 3.0) * 3.0;
    }
    sum += tensor_at(t) * (t - whole * 3.0);
    START / 4.0 + (sum * CYCLES_PER_SECOND).round()
}

/// A `dcgmi dmon` capture of the workload at the sample times `at` (seconds), with the SM
/// clock and either the cumulative counters alone or the tensor ratio gauge alone (a point
/// sample at each sweep).
fn dmon_capture(at: &[f64], counters: bool) -> String {
    let mut text = if counters {
        String::from("#Entity   SMCLK        SMCELAP              MMACACT\nID\n")
    } else {
        String::from("#Entity   SMCLK        TENSO\nID\n")
    };
    for &t in at {
        let elapsed = START + (t * CYCLES_PER_SECOND).round();
        if counters {
            text.push_str(&format!(
                "GPU 0     1980         {elapsed:.0}   {:.0}\n",
                mma_at(t)
            ));
        } else {
            text.push_str(&format!("GPU 0     1980         {:.3}\n", tensor_at(t)));
        }
    }
    text
}

/// ∫ ECF dt over the capture, and the fidelity of its last window.
fn ecf_seconds(text: &str, times: &[f64]) -> (f64, Option<Fidelity>) {
    // dmon stamps sweeps by an interval: each sweep is given its own time.
    let (mut s, _) = samples(Format::DcgmiDmon, text);
    assert_eq!(s.len(), times.len());
    for (sample, &t) in s.iter_mut().zip(times) {
        sample.taken = Timestamp((t * 1000.0).round() as i64);
    }
    let mut d = Deriver::new(DeriveConfig::default(), None);
    d.set_model_override(truthscale_core::gpus::lookup("h100-sxm"));
    let mut total = 0.0;
    let mut fidelity = None;
    for sample in &s {
        for w in d.observe(sample).windows {
            total = w.totals.effective_compute_seconds;
            fidelity = w.metrics.fidelity;
        }
    }
    (total, fidelity)
}

#[test]
fn cumulative_counters_give_the_same_effective_compute_at_any_cadence() {
    // κ at 1980 MHz over the H100 SXM's 1830 MHz reference clock (typed in).
    let kappa = 1980.0 / 1830.0;
    let end = 600.0;
    for (name, times) in [
        ("1 s", (0..=600).map(f64::from).collect::<Vec<_>>()),
        ("10 s", (0..=60).map(|k| f64::from(k) * 10.0).collect()),
        ("30 s", (0..=20).map(|k| f64::from(k) * 30.0).collect()),
        (
            "mixed",
            [0.0, 1.0, 11.0, 13.0, 43.0, 50.0, 80.0, 81.0, 111.0, 140.0]
                .into_iter()
                .chain((5..=20).map(|k| f64::from(k) * 30.0))
                .collect(),
        ),
    ] {
        // Truth from the workload: ∫ τ κ dt over the capture (its first window has no
        // delta before it, and no tensor reading, so nothing is integrated for it).
        let truth: f64 = (0..6000)
            .map(|i| (f64::from(i) + 0.5) * 0.1)
            .filter(|t| *t <= end)
            .map(|t| tensor_at(t) * kappa * 0.1)
            .sum();
        let (got, fidelity) = ecf_seconds(&dmon_capture(&times, true), &times);
        assert!(
            (got - truth).abs() <= 1e-3 * truth,
            "{name}: {got} effective-compute seconds against the workload's {truth}"
        );
        assert_eq!(fidelity, Some(Fidelity::Cumulative), "{name}");
    }
    // The ratio gauge alone, sampled every 30 s, is off by far more: the reason for the tier.
    let times: Vec<f64> = (0..=20).map(|k| f64::from(k) * 30.0).collect();
    let gauge_only = dmon_capture(&times, false);
    let (gauge, fidelity) = ecf_seconds(&gauge_only, &times);
    assert_eq!(fidelity, Some(Fidelity::Profiling));
    let (exact, _) = ecf_seconds(&dmon_capture(&times, true), &times);
    assert!((gauge - exact).abs() > 0.05 * exact, "{gauge} vs {exact}");
}

/// Every cumulative counter's name, in dcgm-exporter's exposition and in `dcgmi dmon`'s
/// columns, fills its own field: each is given a value no other has (typed in here from
/// DCGM's field list, fields 1084–1096), and the sample read back holds each value in the
/// field of its name. A swapped pair of names (FP16 read as FP32) would pass every test
/// that sets the two to the same value, and change the effective compute in silence.
#[test]
fn every_cumulative_counter_name_fills_its_own_field() {
    let counters = [
        (
            "DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL",
            "SMCELAP",
            Field::SmCyclesElapsed,
        ),
        (
            "DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL",
            "SMCACT",
            Field::SmCyclesActive,
        ),
        (
            "DCGM_FI_PROF_MMA_CYCLES_ACTIVE_TOTAL",
            "MMACACT",
            Field::MmaCyclesActive,
        ),
        (
            "DCGM_FI_PROF_HMMA_CYCLES_ACTIVE_TOTAL",
            "HMMACACT",
            Field::HmmaCyclesActive,
        ),
        (
            "DCGM_FI_PROF_IMMA_CYCLES_ACTIVE_TOTAL",
            "IMMACACT",
            Field::ImmaCyclesActive,
        ),
        (
            "DCGM_FI_PROF_FP64_CYCLES_ACTIVE_TOTAL",
            "FP64CACT",
            Field::Fp64CyclesActive,
        ),
        (
            "DCGM_FI_PROF_FP32_CYCLES_ACTIVE_TOTAL",
            "FP32CACT",
            Field::Fp32CyclesActive,
        ),
        (
            "DCGM_FI_PROF_FP16_CYCLES_ACTIVE_TOTAL",
            "FP16CACT",
            Field::Fp16CyclesActive,
        ),
    ];
    // Values past 2^47, each its own.
    let value = |i: usize| 3.0e17 + 1.0e15 * i as f64;
    let mut exposition = String::new();
    let mut header = String::from("#Entity");
    let mut row = String::from("GPU 0");
    for (i, (metric, column, _)) in counters.iter().enumerate() {
        exposition.push_str(&format!(
            "{metric}{{gpu=\"0\",UUID=\"GPU-0\",modelName=\"NVIDIA H100 80GB HBM3\"}} {:.0} 1767225600000\n",
            value(i)
        ));
        header.push_str(&format!("   {column:>20}"));
        row.push_str(&format!("   {:>20.0}", value(i)));
    }
    let dmon = format!("{header}\nID\n{row}\n");
    for (format, text) in [
        (Format::DcgmExporter, exposition),
        (Format::DcgmiDmon, dmon),
    ] {
        let (s, _) = samples(format, &text);
        assert_eq!(s.len(), 1, "{format:?}");
        let r = &s[0].entities[0].readings;
        for (i, (metric, column, field)) in counters.iter().enumerate() {
            assert_eq!(
                r.value(*field),
                Some(value(i)),
                "{format:?} {metric} / {column}"
            );
        }
    }
}
