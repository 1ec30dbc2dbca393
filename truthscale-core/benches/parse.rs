//! Parse throughput in bytes per second: `dcgmi dmon` text and JSONL traces.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::fmt::Write as _;
use std::hint::black_box;
use truthscale_core::gpus::by_key;
use truthscale_core::model::Timestamp;
use truthscale_core::parse::{Format, jsonl, parse_str};
use truthscale_core::sim::Simulator;

/// 8 GPUs × 20 000 sweeps of a 12-field dmon capture.
fn dmon_text() -> String {
    let mut s = String::from(
        "#Entity   GPUTL  GRACT  SMACT  SMOCC  TENSO  DRAMA  FP32A  FP16A  POWER   TOTEC        SMCLK  FBUSD\nID\n",
    );
    for sweep in 0..20_000u64 {
        for gpu in 0..8u64 {
            let x = ((sweep * 7 + gpu * 13) % 1000) as f64 / 1000.0;
            let _ = writeln!(
                s,
                "GPU {gpu}     {:>3}    {x:.3}  {x:.3}  0.211  {:.3}  N/A    0.010  0.000  {:.2}  {}  1980   73000",
                (x * 100.0) as u32,
                x / 2.0,
                300.0 + x * 100.0,
                1_000_000 + sweep * 300
            );
        }
    }
    s
}

#[expect(
    clippy::disallowed_methods,
    reason = "the benchmark keeps its input on disk, so that `wc -l` can be timed on the same bytes"
)]
fn bench(c: &mut Criterion) {
    let dmon = dmon_text();
    // Kept on disk so `wc -l` can be timed on the same bytes.
    let _ = std::fs::write(
        concat!(env!("CARGO_TARGET_TMPDIR"), "/bench-dmon.txt"),
        &dmon,
    );
    let mut g = c.benchmark_group("parse");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(dmon.len() as u64));
    g.bench_function("dmon", |b| {
        b.iter(|| black_box(parse_str(Format::DcgmiDmon, "bench", black_box(&dmon), 0.1)))
    });

    let spec = by_key("h100-sxm").expect("catalog has h100-sxm");
    let mut sim = Simulator::new(8, spec, "bench", 1, Timestamp(0), Simulator::demo_scenario);
    let mut trace = String::new();
    for _ in 0..2_000 {
        let s = sim.step(0.1);
        for e in &s.entities {
            trace.push_str(&jsonl::to_line(s.taken, e));
            trace.push('\n');
        }
    }
    g.throughput(Throughput::Bytes(trace.len() as u64));
    g.bench_function("jsonl", |b| {
        b.iter(|| black_box(parse_str(Format::Jsonl, "bench", black_box(&trace), 0.1)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
