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
mod showback_props;
mod time;

use truthscale_core::exposition::GpuEntry;
use truthscale_core::model::SourceKind;
use truthscale_core::tracker::EntityWindow;

/// The exposition's entries for `windows`, each up and uncapped, from `source`.
fn gpu_entries(windows: Vec<EntityWindow>, source: SourceKind) -> Vec<GpuEntry> {
    let source = source.as_str();
    windows
        .into_iter()
        .map(|window| GpuEntry {
            window,
            source,
            up: true,
            list_cap: None,
        })
        .collect()
}
