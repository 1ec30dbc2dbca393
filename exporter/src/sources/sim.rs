//! The simulated GPU as a live source, stepped in real time.
//!
//! Each tick's elapsed time is simulated as sub-windows of at most `source.sample_every`
//! (100 ms by default), each its own sample: regime seconds are decided per sub-window, so
//! a change of workload inside a tick is not read as the tick's average (the regime then
//! agrees with the simulator's truth ≥ 0.95 in every scenario at the default 1 s interval).
//! The gauges show the latest sub-window; the counters integrate every one.

use super::{BuildError, Context, Produced, Source, SourceSettings};
use crate::setting::Invalid;
use crate::times::unix_ms;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};
use truthscale_core::gpus::GpuSpec;
use truthscale_core::model::{SourceKind, Timestamp};
use truthscale_core::sim::{Scenario, Simulator};

/// Steps the core's simulator by the wall time elapsed since the previous call.
#[derive(Debug)]
pub struct SimSource {
    sim: Simulator,
    last: SystemTime,
    /// The longest sub-window a tick is simulated in.
    sample_every: Duration,
    /// Whether a tick was simulated: the first is at least two sub-windows, so that each
    /// GPU's first window, as long as the spacing to its next sample, is decided in it.
    started: bool,
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
    /// The longest sub-window each tick is simulated in (10 ms..=the interval is sensible;
    /// a value above the interval gives one sample a tick).
    pub sample_every: String,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            scenario: None,
            gpus: 4,
            gpu_model: "h100-sxm".into(),
            seed: 1,
            sample_every: "100ms".into(),
        }
    }
}

impl SimConfig {
    fn sample_every(&self) -> Result<Duration, Invalid> {
        crate::setting::duration(
            "source.sample_every",
            &self.sample_every,
            Duration::from_millis(10),
            Duration::from_secs(3600),
        )
    }

    fn model(&self) -> Result<&'static GpuSpec, Invalid> {
        truthscale_core::gpus::lookup(&self.gpu_model).ok_or_else(|| {
            let keys: Vec<_> = truthscale_core::gpus::CATALOG
                .iter()
                .map(|s| s.key)
                .collect();
            Invalid::new(
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
                Invalid::new(
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
        crate::setting::SIM_GPUS.check(self.gpus)?;
        crate::setting::SIM_SEED.check(self.seed)?;
        self.model()?;
        self.scenario()?;
        self.sample_every()?;
        Ok(())
    }

    fn build(&self, context: &Context, now: SystemTime) -> Result<Box<dyn Source>, BuildError> {
        Ok(Box::new(SimSource::new(
            self.gpus,
            self.model().map_err(BuildError::from)?,
            self.seed,
            self.scenario().map_err(BuildError::from)?,
            context.node.as_deref().unwrap_or("sim-node"),
            now,
            context.interval,
            self.sample_every().map_err(BuildError::from)?,
        )))
    }
}

impl SimSource {
    /// `gpus` simulated GPUs; all run `scenario`, or a contrasting mix when it is `None`.
    /// The first call to [`SimSource::sample`] at `now` returns a window of `interval`,
    /// simulated in sub-windows of at most `sample_every`.
    #[must_use]
    #[expect(
        clippy::too_many_arguments,
        reason = "each a setting of the simulation"
    )]
    pub fn new(
        gpus: u32,
        spec: &'static GpuSpec,
        seed: u64,
        scenario: Option<Scenario>,
        node: &str,
        now: SystemTime,
        interval: Duration,
        sample_every: Duration,
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
            sample_every: sample_every.max(Duration::from_millis(10)),
            started: false,
        }
    }
}

impl Source for SimSource {
    fn name(&self) -> &'static str {
        SourceKind::Sim.as_str()
    }

    /// None: a sub-window is at most `sample_every` long, not exactly (a tick's time split
    /// as evenly as whole milliseconds go, one sample a tick where `sample_every` is longer
    /// than the interval), so each entity's first window is as long as the spacing to its
    /// next sample, its own timestamps', never a declared length it may not have.
    fn update_interval(&self) -> Option<Duration> {
        None
    }

    /// Advance to `now` and return the time since the previous call, as equal sub-windows
    /// of at most `sample_every`, oldest first.
    fn sample(&mut self, now: SystemTime) -> Produced {
        let dt = now
            .duration_since(self.last)
            .map_or(0.0, |d| d.as_secs_f64());
        if dt < 0.01 {
            return Produced::default();
        }
        // Whole milliseconds, as the samples' timestamps are, split as evenly as they go;
        // the time consumed is exactly what the samples span, so simulated time never
        // drifts from the wall clock.
        let ms = (dt * 1000.0).floor() as u64;
        self.last += Duration::from_millis(ms);
        let every = (self.sample_every.as_millis() as u64).max(1);
        let least = if std::mem::replace(&mut self.started, true) {
            1
        } else {
            2
        };
        let n = ms.div_ceil(every).clamp(least.min(ms), 100_000);
        let samples = (0..n)
            .map(|i| {
                let sub = ms / n + u64::from(i < ms % n);
                self.sim.step(sub as f64 / 1000.0)
            })
            .collect();
        Produced {
            samples,
            ..Produced::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::analysis::Analyzer;
    use truthscale_core::derive::DeriveConfig;
    use truthscale_core::tracker::Deriver;

    /// At the default settings (1 s ticks, `sample_every` 100 ms), the regime the live
    /// simulated source is classified into agrees with what it ran ≥ 0.95 of the time in
    /// every scenario, and the regime seconds sum to wall time. (One sample a tick reads a
    /// tick that straddles a change of workload as its average: 0.943 and 0.883 for
    /// llm-serving and training.)
    #[test]
    fn regimes_agree_with_the_simulators_truth_at_the_default_settings() {
        let config = SimConfig::default();
        let every = config.sample_every().unwrap();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let interval = Duration::from_secs(1);
        for scenario in Scenario::ALL {
            let mut src = SimSource::new(
                1,
                config.model().unwrap(),
                config.seed,
                Some(scenario),
                "n",
                t0,
                interval,
                every,
            );
            let declared = src.update_interval().map(|d| d.as_secs_f64());
            assert_eq!(declared, None);
            let mut a = Analyzer::new(Deriver::new(DeriveConfig::default(), declared), false);
            let mut d = Deriver::new(DeriveConfig::default(), declared);
            let mut totals = Default::default();
            for tick in 0..300 {
                let produced = src.sample(t0 + interval * tick);
                assert_eq!(produced.samples.len(), 10);
                for s in &produced.samples {
                    a.push(s);
                    totals = d.observe(s).windows[0].totals;
                }
            }
            let e = &a.report().entities[0];
            let agree = e.phase_agreement_with_truth.unwrap();
            assert!(agree >= 0.95, "{}: {agree}", scenario.as_str());
            let t: truthscale_core::tracker::Totals = totals;
            let regimes: f64 =
                t.phase_seconds.iter().flatten().sum::<f64>() + t.unclassified_seconds;
            // 300 ticks of 1 s: the first covers the interval before the first tick.
            assert!(
                (regimes - 300.0).abs() < 1e-6,
                "{}: {regimes}",
                scenario.as_str()
            );
            assert!((t.observed_seconds - 300.0).abs() < 1e-6);
        }
    }

    /// Each window is as long as its own samples say, the first too: with `sample_every`
    /// longer than the interval (one sample a tick of 1 s), six ticks are 6 s observed,
    /// never a first window of the 10 s `sample_every` (15 s).
    #[test]
    fn the_first_window_is_as_long_as_its_samples_say() {
        let config = SimConfig::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let interval = Duration::from_secs(1);
        let mut src = SimSource::new(
            1,
            config.model().unwrap(),
            config.seed,
            Some(Scenario::Training),
            "n",
            t0,
            interval,
            Duration::from_secs(10),
        );
        let mut d = Deriver::new(
            DeriveConfig::default(),
            src.update_interval().map(|d| d.as_secs_f64()),
        );
        let mut totals = truthscale_core::tracker::Totals::default();
        for tick in 0..6 {
            let produced = src.sample(t0 + interval * tick);
            assert_eq!(produced.samples.len(), if tick == 0 { 2 } else { 1 });
            for s in &produced.samples {
                totals = d.observe(s).windows[0].totals;
            }
        }
        // The first tick in two samples of 500 ms (its first window decided by their
        // spacing), then one sample a second: the 6 s from the second before t0.
        assert!((totals.observed_seconds - 6.0).abs() < 1e-9, "{totals:?}");
    }
}
