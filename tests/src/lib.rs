//! Helpers for the end-to-end tests: locate (building if needed) the `truthscale` binary and
//! the shared fixtures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The workspace root.
#[must_use]
pub fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
}

/// The `truthscale` binary, built once per test process with the same profile.
///
/// # Panics
/// When the build fails: an end-to-end test cannot run without the binary, and must not skip.
pub fn truthscale() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "truthscale-exporter",
                "--bin",
                "truthscale",
            ])
            .current_dir(workspace())
            .status()
            .expect("run cargo build for the truthscale binary");
        assert!(status.success(), "building the truthscale binary failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| workspace().join("target"), PathBuf::from);
        let bin = target.join("debug").join("truthscale");
        assert!(bin.exists(), "{} missing after build", bin.display());
        bin
    })
}

/// Run `truthscale` with `args`.
///
/// # Panics
/// When the process cannot be started.
#[must_use]
pub fn run(args: &[&str]) -> Output {
    Command::new(truthscale())
        .args(args)
        .output()
        .expect("start truthscale")
}

/// A fixture copied from real captures, by file name.
#[must_use]
pub fn fixture(name: &str) -> PathBuf {
    workspace()
        .join("truthscale-core/tests/fixtures/dcgm")
        .join(name)
}
