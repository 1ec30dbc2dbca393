//! One file per verb. Each owns its clap arguments and its run function; no command
//! imports another, and nothing outside `commands/` (sources, sinks, http) imports a command.

pub mod analyze;
pub mod config;
pub mod doctor;
pub mod explain;
pub mod report;
pub mod serve;
pub mod simulate;
pub mod top;
