//! # truthscale-exporter
//!
//! truthscale's sampler, `/metrics` router and OTLP instruments, for a Rust service that
//! wants its GPUs' honest figures in-process, and the `truthscale` command line built on
//! them. The derivations themselves live in [`truthscale_core`].
//!
//! The surface, in the order a service meets it:
//!
//! - [`config::Config`]: the same settings as the binary's TOML file and
//!   `TRUTHSCALE_…` variables; [`Config::validate`](config::Config::validate) checks them
//!   into [`config::Settings`].
//! - [`compose::start`]: the sampler for those settings, on a thread of its own
//!   ([`pipeline::Sampler`]); [`compose::start_with_source`] runs your own
//!   [`sources::Source`] instead.
//! - [`pipeline::Sampler::subscribe`] and [`pipeline::Sampler::latest`]: every tick's
//!   [`publish::Snapshot`], with the per-GPU windows and both encodings of `/metrics`.
//! - [`http::router`]: the `/metrics`, `/healthz`, `/readyz` and landing page routes, to
//!   merge into your own axum app; [`http::web`] adds the Prometheus web config (TLS, basic
//!   auth).
//! - [`sinks::otlp::register`]: the same figures as instruments on your own OpenTelemetry
//!   meter.
//! - [`capture::Capture`] reads the capture formats `analyze` reads;
//!   [`history::decode_range_answer`] decodes a Prometheus range answer into samples;
//!   [`attribution::kubelet::proto`] is the kubelet's PodResources API (for a test kubelet).
//! - [`cli::main`] is the whole `truthscale` binary.
//!
//! Everything else is the crate's own (ARCHITECTURE.md, "API boundary").
//!
//! Embedding in a Rust service:
//!
//! ```no_run
//! use truthscale_exporter::{compose, config::Config, http};
//! let settings = Config::default().validate(&[]).expect("valid defaults");
//! // The default source: NVML where a driver is present (`Config::source` chooses another).
//! let sampler = compose::start(&settings).expect("an NVIDIA driver");
//! let app: axum::Router = http::router(sampler.subscribe(), http::RouterLimits::default());
//! // merge `app` into your own router, and read `sampler.latest()` whenever you like.
//! # drop(app);
//! ```

pub mod attribution;
pub(crate) mod bounds;
pub mod capture;
pub(crate) mod cgroup;
pub mod cli;
pub(crate) mod client;
pub(crate) mod commands;
pub mod compose;
pub mod config;
pub mod enrichment;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod history;
pub mod http;
pub(crate) mod logging;
pub mod pipeline;
pub mod publish;
pub(crate) mod report;
pub(crate) mod setting;
pub mod sinks;
pub mod sources;
pub(crate) mod view;

#[cfg(test)]
mod architecture;
