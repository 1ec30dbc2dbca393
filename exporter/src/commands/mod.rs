//! One file per verb. Each owns its clap arguments and its run function; no command
//! imports another, and nothing outside `commands/` (sources, sinks, http) imports a command.

pub(crate) mod analyze;
pub(crate) mod config;
pub(crate) mod doctor;
pub(crate) mod explain;
pub(crate) mod report;
pub(crate) mod serve;
pub(crate) mod simulate;
pub(crate) mod top;
