//! # truthscale-exporter
//!
//! The `truthscale` command line and sidecar. All I/O lives here; the derivations live in
//! [`truthscale_core`].
//!
//! - [`analyze`]: run the core over a capture file (`dcgmi dmon`, dcgm-exporter text, JSONL).
//! - [`simulate`]: write JSONL traces from the simulated GPU.

pub mod analyze;
pub mod cli;
pub mod simulate;
