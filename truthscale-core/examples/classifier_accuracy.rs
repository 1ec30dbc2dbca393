//! Scores the phase classifier against the simulator's ground truth, per scenario, cadence
//! and hysteresis setting, over several seeds:
//! `cargo run --release -p truthscale-core --example classifier_accuracy`.
//!
//! Agreement is time-weighted: the seconds whose regime matched the truth of their window
//! over the seconds with a truth. The cadences are windows of 100 ms, 250 ms and 1 s, and a
//! 1 s export whose regime seconds come from ten 100 ms samples per export
//! ([`Simulator::step_substeps`]). `--confusion` also prints, per scenario and cadence, the
//! seconds by truth (rows) and classified regime (columns), summed over the seeds.

use truthscale_core::analysis::Analyzer;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::gpus::by_key;
use truthscale_core::model::{Phase, Timestamp};
use truthscale_core::sim::{Scenario, Simulator};
use truthscale_core::tracker::Deriver;

/// How a run is sampled and exported.
#[derive(Clone, Copy)]
struct Cadence {
    name: &'static str,
    /// Export window, seconds.
    export: f64,
    /// Samples per export window.
    per_export: usize,
}

const CADENCES: [Cadence; 4] = [
    Cadence {
        name: "100 ms",
        export: 0.1,
        per_export: 1,
    },
    Cadence {
        name: "250 ms",
        export: 0.25,
        per_export: 1,
    },
    Cadence {
        name: "1 s",
        export: 1.0,
        per_export: 1,
    },
    Cadence {
        name: "1 s / 100 ms",
        export: 1.0,
        per_export: 10,
    },
];

const SEEDS: u64 = 10;

/// The regimes, and the confusion's column of windows left unclassified.
const N: usize = Phase::ALL.len();

/// Seconds by truth (rows) and regime (columns, the last unclassified).
type Confusion = [[f64; N + 1]; N];
const SECONDS: f64 = 600.0;

/// Agreement of one run (`None` when no window had both a truth and a regime: not 0), and
/// its confusion in seconds (`[truth][classified]`, the last column unclassified).
fn run(
    scenario: Scenario,
    cadence: Cadence,
    switch_after: u32,
    seed: u64,
) -> (Option<f64>, Confusion) {
    let spec = by_key("h100-sxm").expect("catalog has h100-sxm");
    let mut cfg = DeriveConfig::default();
    cfg.phase.switch_after = switch_after;
    let sample_dt = cadence.export / cadence.per_export as f64;
    let mut sim = Simulator::new(1, spec, "n", seed, Timestamp(0), |_| scenario);
    let mut a = Analyzer::new(Deriver::new(cfg.clone(), Some(sample_dt)), false);
    // The same windows again, for the confusion (the analyzer keeps none).
    let mut d = Deriver::new(cfg, Some(sample_dt));
    let mut confusion = [[0.0; N + 1]; N];
    for _ in 0..(SECONDS / cadence.export).round() as usize {
        for s in sim.step_substeps(cadence.export, cadence.per_export) {
            a.push(&s);
            for w in d.observe(&s).windows {
                if let Some(truth) = w.truth_phase {
                    let col = w.phase.map_or(N, Phase::index);
                    confusion[truth.index()][col] += w.dt_seconds;
                }
            }
        }
    }
    let e = &a.report().entities[0];
    (e.phase_agreement_with_truth, confusion)
}

fn main() {
    #[expect(
        clippy::disallowed_methods,
        reason = "an example program, not the library: it reads its own command line"
    )]
    let confusion = std::env::args().any(|a| a == "--confusion");
    println!(
        "agreement with the simulator's truth, time-weighted (min / mean over {SEEDS} seeds, {} min each; * where some seeds had no agreement to measure)",
        SECONDS / 60.0
    );
    println!(
        "{:<15} {:>6}  {:^15}  {:^15}  {:^15}  {:^15}",
        "scenario",
        "switch",
        CADENCES[0].name,
        CADENCES[1].name,
        CADENCES[2].name,
        CADENCES[3].name
    );
    let mut matrices = Vec::new();
    for scenario in Scenario::ALL {
        for n in [1, 2] {
            let mut row = format!("{:<15} {:>6}", scenario.as_str(), n);
            for cadence in CADENCES {
                let mut scores = Vec::new();
                let mut total = [[0.0; N + 1]; N];
                for seed in 1..=SEEDS {
                    let (score, m) = run(scenario, cadence, n, seed);
                    scores.extend(score);
                    for (t, r) in total.iter_mut().zip(m) {
                        for (x, y) in t.iter_mut().zip(r) {
                            *x += y;
                        }
                    }
                }
                // A run without an agreement is left out of the figures, and said so.
                if scores.is_empty() {
                    row.push_str(&format!("  {:^13}  ", "not measured"));
                } else {
                    let min = scores.iter().copied().fold(1.0, f64::min);
                    let mean = scores.iter().sum::<f64>() / scores.len() as f64;
                    let missing = if scores.len() < SEEDS as usize {
                        "*"
                    } else {
                        " "
                    };
                    row.push_str(&format!("  {min:.3} / {mean:.3}{missing} "));
                }
                if n == 1 {
                    matrices.push((scenario, cadence.name, total));
                }
            }
            println!("{row}");
        }
    }
    if !confusion {
        return;
    }
    for (scenario, cadence, m) in matrices {
        println!(
            "\n{} at {cadence}, switch_after 1: seconds by truth (rows) and regime (columns)",
            scenario.as_str()
        );
        let mut head = format!("{:<14}", "truth \\ got");
        for p in Phase::ALL {
            head.push_str(&format!("{:>14}", p.as_str()));
        }
        head.push_str(&format!("{:>14}", "unclassified"));
        println!("{head}");
        for p in Phase::ALL {
            let r = &m[p.index()];
            if r.iter().sum::<f64>() == 0.0 {
                continue;
            }
            let mut line = format!("{:<14}", p.as_str());
            for x in r {
                line.push_str(&format!("{x:>14.1}"));
            }
            println!("{line}");
        }
    }
}
