//! # truthscale-exporter
//!
//! The `truthscale` command line and sidecar. All I/O lives here; the derivations live in
//! [`truthscale_core`].
//!
//! - [`pipeline`]: the sampler thread, a pipeline of stages (sample → stages → derive →
//!   publish), and the [`pipeline::Sampler`] handle; [`compose`] builds it from the settings.
//! - [`sources`]: the `Source` trait and the sources: NVML, dcgm-exporter, the simulated GPU,
//!   replays, null.
//! - [`attribution`]: the kubelet and API server stages (which pods hold each GPU);
//!   [`enrichment`]: the serving-engine stage.
//! - [`publish`]: the snapshot encoded once per tick; [`sinks`]: OTLP push;
//!   [`http`]: the axum router, web config, landing page.
//! - [`config`]: defaults < file < environment < flags.
//! - [`capture`]: the one capture reader; [`client`]: the one HTTP client builder;
//!   [`history`]: a Prometheus range as samples.
//! - [`commands`]: one file per verb (analyze, serve, simulate, explain, top, doctor, config,
//!   report); [`cli`] only dispatches. [`view`]: the per-GPU view `explain` and `top` share;
//!   [`report`]: the fleet report's collection from history and its renderings.
//!
//! Embedding in a Rust service:
//!
//! ```no_run
//! use truthscale_exporter::{compose, config::Config, http};
//! let settings = Config::default().validate(&[]).expect("valid defaults");
//! let sampler = compose::start(&settings).expect("simulated source");
//! let app: axum::Router = http::router(sampler.subscribe(), http::RouterLimits::default());
//! // merge `app` into your own router, and read `sampler.latest()` whenever you like.
//! # drop(app);
//! ```

pub mod attribution;
pub mod capture;
pub(crate) mod cgroup;
pub mod cli;
pub mod client;
pub mod commands;
pub mod compose;
pub mod config;
pub mod enrichment;
pub mod history;
pub mod http;
pub mod logging;
pub mod pipeline;
pub mod publish;
pub mod report;
pub mod setting;
pub mod sinks;
pub mod sources;
pub mod view;

#[cfg(test)]
mod architecture;
