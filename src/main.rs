//! The `ansible-operator` binary: parse the command line and hand over to the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match ansible_operator::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // Upstream exits 1 on every bad invocation; help and version still exit 0.
            let code = if err.use_stderr() { 1 } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    ansible_operator::app::main(cli)
}
