//! # truthscale-exporter
//!
//! The `truthscale` command line and sidecar. All I/O lives here; the derivations live in
//! [`truthscale_core`].
//!
//! - [`sidecar`]: the sampler thread and its snapshots; [`http`]: the axum router.
//! - [`sources`]: NVML, dcgm-exporter, the simulated GPU and replays.
//! - [`doctor`]: what this machine's NVML offers, and which fidelity tier it gives.
//! - [`config`]: defaults < file < environment < flags.
//! - [`otlp`]: the same metrics pushed over OTLP (gRPC or HTTP/protobuf).
//! - [`analyze`], [`simulate`]: the offline commands.
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

pub mod analyze;
pub mod cli;
pub mod config;
pub mod doctor;
pub mod engine;
pub mod explain;
pub mod history;
pub mod http;
pub mod landing;
pub mod otlp;
pub mod serve;
pub mod sidecar;
pub mod simulate;
pub mod sources;
pub mod top;
pub mod web;
