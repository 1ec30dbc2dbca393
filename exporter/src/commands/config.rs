//! `truthscale config`: print the defaults, or check a file.

use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;

/// `truthscale config`.
#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the full default configuration as TOML.
    Defaults,
    /// Validate a configuration file (with the current environment) and exit.
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
            print!("{}", crate::config::Config::default().to_toml()?);
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Check { file } => {
            let cfg = crate::config::Config::load(Some(file), env, &[])?;
            cfg.validate(env)?;
            println!("{}: ok", file.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
