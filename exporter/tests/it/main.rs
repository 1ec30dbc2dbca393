//! The integration tests of `truthscale-exporter`, linked into one test binary (`it`).
//!
//! Run one module with `cargo test -p truthscale-exporter --test it web::`.

mod http;
mod web;
