//! The simulated GPU as a live source, stepped in real time.

use super::{BuildError, Context, Produced, Source, SourceSettings, unix_ms};
use crate::setting::Invalid;
use serde::{Deserialize, Serialize};
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

/// `kind = "sim"`: the simulated GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// One scenario for every GPU (`llm-serving`, `training`, `decode-only`, `tiny-kernel`,
    /// `idle-allocated`); unset: GPU *i* runs scenario *i* mod 5, a contrasting demo mix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Simulated GPUs (1..=64).
    pub gpus: u32,
    /// The model simulated: a catalog key or NVML name.
    pub gpu_model: String,
    /// Simulator seed.
    pub seed: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            scenario: None,
            gpus: 4,
            gpu_model: "h100-sxm".into(),
            seed: 1,
        }
    }
}

impl SimConfig {
    fn model(&self) -> Result<&'static GpuSpec, Invalid> {
        truthscale_core::gpus::lookup(&self.gpu_model).ok_or_else(|| {
            let keys: Vec<_> = truthscale_core::gpus::CATALOG
                .iter()
                .map(|s| s.key)
                .collect();
            (
                "source.gpu_model",
                format!(
                    "{:?} is not in the catalog; known: {}",
                    self.gpu_model,
                    keys.join(", ")
                ),
            )
        })
    }

    fn scenario(&self) -> Result<Option<Scenario>, Invalid> {
        match &self.scenario {
            None => Ok(None),
            Some(name) => Scenario::from_name(name).map(Some).ok_or_else(|| {
                let names: Vec<_> = Scenario::ALL.iter().map(|s| s.as_str()).collect();
                (
                    "source.scenario",
                    format!(
                        "unknown scenario {name:?}; choose one of {}",
                        names.join(", ")
                    ),
                )
            }),
        }
    }
}

impl SourceSettings for SimConfig {
    const ARG: Option<&'static str> = Some("source.scenario");

    fn check(&self) -> Result<(), Invalid> {
        if self.gpus == 0 || self.gpus > 64 {
            return Err((
                "source.gpus",
                format!("{} is out of range 1..=64", self.gpus),
            ));
        }
        self.model()?;
        self.scenario()?;
        Ok(())
    }

    fn build(&self, context: &Context, now: SystemTime) -> Result<Box<dyn Source>, BuildError> {
        let invalid = |(key, message): Invalid| BuildError::Invalid { key, message };
        Ok(Box::new(SimSource::new(
            self.gpus,
            self.model().map_err(invalid)?,
            self.seed,
            self.scenario().map_err(invalid)?,
            context.node.as_deref().unwrap_or("sim-node"),
            now,
            context.interval,
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
    fn update_interval(&self) -> Option<std::time::Duration> {
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
