//! Push sinks: [`otlp`] (pushed to a collector). Sinks read the snapshots the pipeline
//! publishes ([`crate::publish`]); they never sample. `/metrics` serves the same snapshots
//! (`crate::http`).

pub mod otlp;
