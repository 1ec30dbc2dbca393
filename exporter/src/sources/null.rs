//! `null`: a source that never produces a sample. For tests and for embedding truthscale
//! where the GPUs are fed by other means; `/metrics` then shows only the exporter's own
//! series, and `truthscale_source_up{source="null"}` is 0 once the stale period passes.

use super::{BuildError, Common, Produced, Source};
use std::time::{Duration, SystemTime};

/// `null` takes no settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NullConfig;

impl NullConfig {
    pub(crate) fn from_spec(arg: Option<&str>, _: &Common) -> Result<NullConfig, String> {
        match arg {
            None => Ok(NullConfig),
            Some(a) => Err(format!("null:{a}: null takes no argument")),
        }
    }

    pub(crate) fn build(&self, _now: SystemTime) -> Result<Box<dyn Source>, BuildError> {
        Ok(Box::new(NullSource))
    }
}

/// Produces nothing, ever.
#[derive(Debug)]
pub struct NullSource;

impl Source for NullSource {
    fn name(&self) -> &'static str {
        "null"
    }

    fn window(&self) -> Option<Duration> {
        None
    }

    fn sample(&mut self, _now: SystemTime) -> Produced {
        Produced::default()
    }
}
