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
//! - [`capture::Capture`] reads the capture formats `analyze` reads.
//! - [`cli::main`] is the whole `truthscale` binary (the `truthscale` target calls it).
//!
//! The most used of these are re-exported here: [`Config`], [`Settings`], [`start`],
//! [`Sampler`], [`Snapshot`] and [`router`].
//!
//! Two features open hooks that are not a stable API: `testing` (the kubelet's PodResources
//! API for a test kubelet, `BasicAuth::check` and `BasicAuth::user_count`) for truthscale's
//! own tests, and `fuzzing` (the readers' entry points, `history::decode_range_answer`) for
//! its fuzz targets. Everything else is the crate's own (ARCHITECTURE.md, "API boundary").
//!
//! Embedding in a Rust service:
//!
//! ```no_run
//! use truthscale_exporter::{Config, http, router, start};
//! let settings = Config::default().validate(&[]).expect("valid defaults");
//! // The default source: NVML where a driver is present (`Config::source` chooses another).
//! let sampler = start(&settings).expect("an NVIDIA driver");
//! let app: axum::Router = router(sampler.subscribe(), http::RouterLimits::default());
//! // merge `app` into your own router, and read `sampler.latest()` whenever you like.
//! # drop(app);
//! ```

#![warn(missing_docs)]

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
pub(crate) mod stdout;
pub(crate) mod times;
pub(crate) mod view;

pub use compose::start;
pub use config::{Config, Settings};
pub use http::router;
pub use pipeline::Sampler;
pub use publish::Snapshot;
