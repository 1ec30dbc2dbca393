//! `fleet::analyze` cost by fleet size: 1 000 to 8 000 workloads over 6 h at a 60 s step
//! (360 steps), on H100s of 80 GiB; and the showback (which the report's funnel runs too)
//! over the same fleets, grouped by namespace.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use truthscale_core::fleet::{FleetConfig, FleetInput, Point, Track, analyze};
use truthscale_core::gpus::by_key;
use truthscale_core::showback::{Holders, ShowbackConfig, showback};

const STEPS: usize = 360;
const GIB: f64 = 1_073_741_824.0;

/// A deterministic xorshift: the same fleet on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` pods, one per GPU: steady ones at varied saturation, bursty ones, idle notebooks,
/// short-lived jobs, and a few with a missed scrape; peak memory 5–40 GiB.
fn fleet(n: usize) -> FleetInput {
    let spec = by_key("h100-sxm").expect("catalog has h100-sxm");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ n as u64);
    let tracks = (0..n)
        .map(|i| {
            let mut t = Track::new(
                Some(format!("ns{}/pod-{i}", i % 50)),
                format!("node-{}/gpu {}", i / 8, i % 8),
            );
            t.spec = Some(spec);
            t.model = Some(spec.name.to_owned());
            t.memory_total_mib = Some(80 * 1024);
            let peak = 5.0 + 35.0 * rng.unit();
            let level = 0.02 + 0.58 * rng.unit();
            let kind = i % 10;
            let (start, end) = if kind == 9 {
                let a = (rng.unit() * STEPS as f64) as usize;
                let b = a + 1 + (rng.unit() * (STEPS - a) as f64) as usize;
                (a, b.min(STEPS))
            } else {
                (0, STEPS)
            };
            let phase = (rng.unit() * 60.0) as usize;
            let missed = (i % 97 == 0).then(|| start + (end - start) / 2);
            for s in start..end {
                if Some(s) == missed {
                    continue;
                }
                let sat = match kind {
                    6 | 7 => {
                        if ((s + phase) / 30).is_multiple_of(2) {
                            level + 0.2
                        } else {
                            0.01
                        }
                    }
                    8 => 0.002,
                    _ => level * (0.9 + 0.2 * rng.unit()),
                };
                let mem = if s == start {
                    peak
                } else {
                    peak * (0.8 + 0.2 * rng.unit())
                };
                t.record(
                    s,
                    Point::new(
                        Some(sat),
                        Some((sat * 2.0).min(1.0)),
                        Some(sat),
                        Some(mem * GIB),
                    )
                    .with_pipes(Some(sat), Some(sat / 2.0)),
                );
            }
            t
        })
        .collect();
    FleetInput {
        step_seconds: 60.0,
        steps: STEPS,
        tracks,
        held: Default::default(),
        step_bands: None,
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("fleet_analyze");
    g.sample_size(10);
    for n in [1_000, 2_000, 4_000, 8_000] {
        let input = fleet(n);
        g.throughput(Throughput::Elements((n * STEPS) as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &input, |b, input| {
            b.iter(|| black_box(analyze(black_box(input), &FleetConfig::default())));
        });
    }
    g.finish();
}

fn bench_showback(c: &mut Criterion) {
    let mut g = c.benchmark_group("showback");
    g.sample_size(10);
    let cfg = ShowbackConfig {
        by: "namespace".into(),
        idle_busy_below: 0.05,
        idle_compute_below: 0.01,
        period_steps: Some(60),
        period_offset: 0,
        default_price: Some(2.5),
        prices: Vec::new(),
        energy_price_per_kwh: None,
    };
    for n in [2_000, 8_000] {
        let input = fleet(n);
        let groups: Vec<Option<String>> = input
            .tracks
            .iter()
            .map(|t| {
                t.pod
                    .as_deref()
                    .and_then(|p| p.split_once('/'))
                    .map(|(ns, _)| ns.to_owned())
            })
            .collect();
        let none = (Holders::new(), std::collections::BTreeMap::new());
        g.throughput(Throughput::Elements((n * STEPS) as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &input, |b, input| {
            b.iter(|| black_box(showback(black_box(input), &groups, &none.0, &none.1, &cfg)));
        });
    }
    g.finish();
}

criterion_group!(benches, bench, bench_showback);
criterion_main!(benches);
