//! `cepheus flows FILE...`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `cepheus flows`.
#[derive(clap::Args, Debug)]
pub struct FlowsArgs {
    /// pcap or pcapng files.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs `cepheus flows`.
pub fn run(args: FlowsArgs) -> ExitCode {
    eprintln!("flows is not implemented yet: {:?}", args.files);
    ExitCode::from(2)
}
