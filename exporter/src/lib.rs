//! # truthscale-exporter
//!
//! The `truthscale` command line and sidecar. All I/O lives here; the derivations live in
//! [`truthscale_core`].
//!
//! - [`sidecar`]: the sampler thread; [`http`]: the axum router, web config, landing page.
//! - [`sources`]: the `Source` trait and the sources: NVML, dcgm-exporter, the simulated GPU,
//!   replays, null; the serving-engine enricher.
//! - [`sinks`]: the Prometheus snapshot encoded once per tick, and OTLP push.
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
//! use truthscale_exporter::{config::Config, http, sidecar::Sidecar};
//! let settings = Config::default().validate(&[]).expect("valid defaults");
//! let sidecar = Sidecar::start(&settings).expect("simulated source");
//! let app: axum::Router = http::router(sidecar.subscribe(), http::RouterLimits::default());
//! // merge `app` into your own router, and read `sidecar.latest()` whenever you like.
//! # drop(app);
//! ```

pub mod capture;
pub mod cli;
pub mod client;
pub mod commands;
pub mod config;
pub mod history;
pub mod http;
pub mod report;
pub mod setting;
pub mod sidecar;
pub mod sinks;
pub mod sources;
pub mod view;

#[cfg(test)]
mod architecture;
