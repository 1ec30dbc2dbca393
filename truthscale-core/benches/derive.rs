//! `derive` cost per entity-sample: the deriver (sanitize, formulas, phase, integrals).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::gpus::by_key;
use truthscale_core::model::Timestamp;
use truthscale_core::sim::Simulator;
use truthscale_core::tracker::Deriver;

fn bench(c: &mut Criterion) {
    let spec = by_key("h100-sxm").expect("catalog has h100-sxm");
    let mut sim = Simulator::new(8, spec, "bench", 1, Timestamp(0), Simulator::demo_scenario);
    let samples: Vec<_> = (0..1000).map(|_| sim.step(0.1)).collect();
    let mut g = c.benchmark_group("derive");
    g.throughput(Throughput::Elements(8));
    g.bench_function("observe_8_gpus", |b| {
        let mut d = Deriver::new(DeriveConfig::default(), Some(0.1));
        let mut i = 0;
        b.iter(|| {
            // Replay the recorded samples with increasing time so no window is skipped.
            let mut s = samples[i % samples.len()].clone();
            s.taken = Timestamp(i as i64 * 100);
            i += 1;
            black_box(d.observe(black_box(&s)));
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
