//! `null`: a source that never produces a sample. For tests and for embedding truthscale
//! where the GPUs are fed by other means; `/metrics` then shows only the exporter's own
//! series, and `truthscale_source_up{source="null"}` is 0 once the stale period passes.

use super::{BuildError, Context, Produced, Source, SourceSettings};
use crate::setting::Invalid;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

/// `kind = "null"` takes no settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NullConfig {}

impl SourceSettings for NullConfig {
    const ARG: Option<&'static str> = None;

    fn check(&self) -> Result<(), Invalid> {
        Ok(())
    }

    fn build(&self, _: &Context, _now: SystemTime) -> Result<Box<dyn Source>, BuildError> {
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

    fn update_interval(&self) -> Option<Duration> {
        None
    }

    fn sample(&mut self, _now: SystemTime) -> Produced {
        Produced::default()
    }
}
