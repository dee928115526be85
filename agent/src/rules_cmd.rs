//! `cepheus rules ...`: check (and later test, graph) rule files.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `cepheus rules check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Rule files or folders (folders: every `*.toml` in them, recursively).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
}

/// Runs `cepheus rules check`.
pub fn check(args: CheckArgs) -> ExitCode {
    eprintln!("rules check is not implemented yet: {:?}", args.paths);
    ExitCode::from(2)
}
