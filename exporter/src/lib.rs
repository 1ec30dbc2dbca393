//! # truthscale-exporter
//!
//! The `truthscale` command line and sidecar. All I/O lives here; the derivations live in
//! [`truthscale_core`].
//!
//! - [`sidecar`]: the sampler thread and its snapshots; [`http`]: the axum router.
//! - [`sources`]: NVML, dcgm-exporter, the simulated GPU and replays.
//! - [`config`]: defaults < file < environment < flags.
//! - [`otlp`]: the same metrics pushed over OTLP (gRPC or HTTP/protobuf).
//! - [`commands`]: one file per verb (analyze, serve, simulate, explain, top, doctor, config);
//!   [`cli`] only dispatches. [`view`]: the per-GPU view `explain` and `top` share.
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
pub mod sidecar;
pub mod sinks;
pub mod sources;
pub mod view;

#[cfg(test)]
mod architecture;
