//! The end-to-end tests, linked into one test binary (`it`): one module per area, each
//! driving the real `truthscale` binary (see the crate's `src/lib.rs` for the helpers).
//!
//! Run one module with `cargo test -p truthscale-e2e --test it serve::`, or with nextest
//! `cargo nextest run -p truthscale-e2e -E 'test(/^serve::/)'`.

mod autoscaling;
mod causes;
mod causes_gpu;
mod cli;
mod clock_bound;
mod dcgm_joins;
mod dcgm_source;
mod docker;
mod engine;
mod explain_top;
mod faults;
mod finops;
mod health;
mod history;
mod holder_gap;
mod hygiene;
mod idle_owner;
mod manifests;
mod node;
mod node_manifests;
mod nvml;
mod observability;
mod otlp;
mod prometheus_rules;
mod report;
mod report_limits;
mod report_steps;
mod serve;
mod sharing;
mod showback;
mod sidecar_get;
mod tiers;
mod unavailable;
