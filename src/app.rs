//! The program: dispatches subcommands and maps failures to upstream's exit codes.

use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Version string printed by `ansible-operator version` and exported as build info.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs the parsed command line and returns the process exit code (1 on any failure, as upstream).
pub fn main(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Version => {
            println!("ansible-operator version: \"{VERSION}\"");
            ExitCode::SUCCESS
        }
        Command::Run(args) => {
            crate::logging::init(&args.log);
            tracing::error!("the reconcile loop is not built yet");
            ExitCode::FAILURE
        }
    }
}
