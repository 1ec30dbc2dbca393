//! The integration tests of `truthscale-core`, linked into one test binary (`it`).
//!
//! Each module was its own binary under `tests/`; one binary links once instead of once per
//! file. Data stays where it was: `tests/fixtures/dcgm/` and `tests/golden/`.
//! Run one module with `cargo test -p truthscale-core --test it golden::`.

mod clock_bound;
mod derive_props;
mod docs;
mod fixtures;
mod fuzz_regressions;
mod generations;
mod golden;
mod idle_since;
mod parse_props;
mod time;
