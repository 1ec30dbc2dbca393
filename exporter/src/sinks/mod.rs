//! Where snapshots go: [`prometheus`] (encoded once per tick, served by `http`) and [`otlp`]
//! (pushed to a collector). Sinks read snapshots; they never sample.

pub mod otlp;
pub mod prometheus;
