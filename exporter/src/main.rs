//! The `truthscale` binary: a thin shell over [`truthscale_exporter::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    truthscale_exporter::cli::main()
}
