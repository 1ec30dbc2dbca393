//! Scores the phase classifier against the simulator's ground truth, per scenario, window
//! length and hysteresis setting, over several seeds:
//! `cargo run --release -p truthscale-core --example classifier_accuracy`.

use truthscale_core::analysis::Analyzer;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::gpus::by_key;
use truthscale_core::model::Timestamp;
use truthscale_core::sim::{Scenario, Simulator};
use truthscale_core::tracker::Deriver;

fn main() {
    let spec = by_key("h100-sxm").expect("catalog has h100-sxm");
    println!(
        "scenario        window  switch_after  agreement (min / mean over 10 seeds, 10 min each)"
    );
    for scenario in Scenario::ALL {
        for dt in [0.25, 1.0] {
            for n in [1, 2] {
                let mut scores = Vec::new();
                for seed in 1..=10 {
                    let mut cfg = DeriveConfig::default();
                    cfg.phase.switch_after = n;
                    let mut sim = Simulator::new(1, spec, "n", seed, Timestamp(0), |_| scenario);
                    let mut a = Analyzer::new(Deriver::new(cfg, Some(dt)), false);
                    for _ in 0..(600.0 / dt) as usize {
                        a.push(&sim.step(dt));
                    }
                    let e = &a.report().entities[0];
                    scores.push(e.phase_agreement_with_truth.unwrap_or(0.0));
                }
                let min = scores.iter().copied().fold(1.0, f64::min);
                let mean = scores.iter().sum::<f64>() / scores.len() as f64;
                println!(
                    "{:<15} {:>5}s  {:>12}  {:.3} / {:.3}",
                    scenario.as_str(),
                    dt,
                    n,
                    min,
                    mean
                );
            }
        }
    }
}
