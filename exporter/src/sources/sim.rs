//! The simulated GPU as a live source, stepped in real time.

use super::{Produced, unix_ms};
use std::time::SystemTime;
use truthscale_core::gpus::GpuSpec;
use truthscale_core::model::Timestamp;
use truthscale_core::sim::{Scenario, Simulator};

/// Steps the core's simulator by the wall time elapsed since the previous call.
#[derive(Debug)]
pub struct SimSource {
    sim: Simulator,
    last: SystemTime,
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
        SimSource { sim, last: begin }
    }

    /// Advance to `now` and return the window since the previous call.
    pub fn sample(&mut self, now: SystemTime) -> Produced {
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
