//! The simulated GPU as a live source, stepped in real time.

use super::{BuildError, Common, Produced, Source, unix_ms};
use std::time::SystemTime;
use truthscale_core::gpus::GpuSpec;
use truthscale_core::model::{SourceKind, Timestamp};
use truthscale_core::sim::{Scenario, Simulator};

/// Steps the core's simulator by the wall time elapsed since the previous call.
#[derive(Debug)]
pub struct SimSource {
    sim: Simulator,
    last: SystemTime,
    interval: std::time::Duration,
}

/// `sim[:SCENARIO]`: the simulated GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Simulated GPUs.
    pub gpus: u32,
    /// The model simulated.
    pub model: &'static GpuSpec,
    /// Seed.
    pub seed: u64,
    /// One scenario for every GPU, or the contrasting demo mix.
    pub scenario: Option<Scenario>,
    /// Node name on the series.
    pub node: String,
    /// Sampling interval (the window each sample covers).
    pub interval: std::time::Duration,
}

impl SimConfig {
    pub(crate) fn from_spec(arg: Option<&str>, c: &Common) -> Result<SimConfig, String> {
        let scenario = match arg {
            None => None,
            Some(name) => match Scenario::from_name(name) {
                Some(s) => Some(s),
                None => {
                    let names: Vec<_> = Scenario::ALL.iter().map(|s| s.as_str()).collect();
                    return Err(format!(
                        "unknown scenario {name:?}; choose one of {}",
                        names.join(", ")
                    ));
                }
            },
        };
        Ok(SimConfig {
            gpus: c.sim_gpus,
            model: c.sim_gpu_model,
            seed: c.seed,
            scenario,
            node: c.node.clone().unwrap_or_else(|| "sim-node".into()),
            interval: c.interval,
        })
    }

    pub(crate) fn build(&self, now: SystemTime) -> Result<Box<dyn Source>, BuildError> {
        Ok(Box::new(SimSource::new(
            self.gpus,
            self.model,
            self.seed,
            self.scenario,
            &self.node,
            now,
            self.interval,
        )))
    }
}

impl SimSource {
    /// `gpus` simulated GPUs; all run `scenario`, or a contrasting mix when it is `None`.
    /// The first call to [`SimSource::sample`] at `now` returns a window of `interval`.
    #[must_use]
    pub fn new(
        gpus: u32,
        spec: &'static GpuSpec,
        seed: u64,
        scenario: Option<Scenario>,
        node: &str,
        now: SystemTime,
        interval: std::time::Duration,
    ) -> SimSource {
        // The first window ends now and began one interval ago.
        let begin = now.checked_sub(interval).unwrap_or(now);
        let start = Timestamp(unix_ms(begin));
        let sim = Simulator::new(gpus, spec, node, seed, start, |i| {
            scenario.unwrap_or_else(|| Simulator::demo_scenario(i))
        });
        SimSource {
            sim,
            last: begin,
            interval,
        }
    }
}

impl Source for SimSource {
    fn name(&self) -> &'static str {
        SourceKind::Sim.as_str()
    }

    /// The simulator's windows are the sampling interval.
    fn window(&self) -> Option<std::time::Duration> {
        Some(self.interval)
    }

    /// Advance to `now` and return the window since the previous call.
    fn sample(&mut self, now: SystemTime) -> Produced {
        let dt = now
            .duration_since(self.last)
            .map_or(0.0, |d| d.as_secs_f64());
        if dt < 0.01 {
            return Produced::default();
        }
        self.last = now;
        Produced {
            samples: vec![self.sim.step(dt)],
            ..Produced::default()
        }
    }
}
