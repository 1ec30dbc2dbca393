//! `truthscale config`: print the defaults, or check a file.

use clap::Subcommand;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// `truthscale config`.
#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the full default configuration as TOML.
    Defaults,
    /// Validate a configuration file (with the current environment) and exit. Without a
    /// source kind (auto), also whether this machine has the NVIDIA driver it would read.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
}

/// Run `truthscale config`.
///
/// # Errors
/// A configuration that does not load or validate.
pub(crate) fn run(c: &ConfigCommand, env: &[(String, String)]) -> anyhow::Result<ExitCode> {
    match c {
        ConfigCommand::Defaults => {
            let toml = crate::config::Config::default().to_toml()?;
            write!(crate::stdout::lock(), "{toml}")?;
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Check { file } => {
            let cfg = crate::config::Config::load(Some(file), env, &[])?;
            let settings = cfg.validate_at(Some(file), env, &[])?;
            // The web config as `serve` reads it: its TLS certificate and key too.
            crate::compose::web_config(&settings)
                .map_err(|e| anyhow::anyhow!("invalid web config: {e}"))?;
            // What the start would meet where the source depends on this machine.
            let found = settings.source.probe()?;
            let found = found.map(|f| format!(" ({f})")).unwrap_or_default();
            writeln!(crate::stdout::lock(), "{}: ok{found}", file.display())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
