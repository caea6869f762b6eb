//! The operator's version and the Ansible toolchain's: printed by `version`, logged at start.

use std::path::Path;

use crate::toolchain;

/// The zap logger of these lines: `app`, as before they moved into this file.
const TARGET: &str = "ansible_operator::app";

/// The program runs are started with, looked up on `PATH`.
pub(super) const RUNNER: &str = "ansible-runner";

/// Version string printed by `ansible-operator version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Commit the binary was built from, when the build says (`ANSIBLE_OPERATOR_COMMIT`).
pub const COMMIT: &str = match option_env!("ANSIBLE_OPERATOR_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

/// `ansible-operator version`: the operator's version and commit, and the toolchain's.
pub(super) fn print() {
    let toolchain = match toolchain::probe(Path::new(RUNNER)) {
        Ok(toolchain) => toolchain.to_string(),
        Err(error) => format!("ansible: {:?}", error.to_string()),
    };
    println!("ansible-operator version: \"{VERSION}\", commit: \"{COMMIT}\", {toolchain}");
}

/// Logs the operator's version and the Ansible toolchain's, as upstream logs its own at start, and
/// returns the toolchain (the warm worker runs on its Python).
pub(super) async fn log_versions() -> Option<toolchain::Toolchain> {
    let probed = tokio::task::spawn_blocking(|| toolchain::probe(Path::new(RUNNER))).await;
    match probed {
        Ok(Ok(toolchain)) => {
            tracing::info!(
                target: TARGET,
                version = VERSION,
                commit = COMMIT,
                ansible_core = toolchain.ansible_core,
                ansible_runner = toolchain.ansible_runner,
                python = toolchain.python,
                python_path = %toolchain.python_path.display(),
                "version"
            );
            return Some(toolchain);
        }
        Ok(Err(toolchain::Error::NoRunner)) => {
            tracing::info!(target: TARGET, version = VERSION, commit = COMMIT, "version");
            tracing::error!(
                target: TARGET,
                "ansible-runner is not on PATH: every reconcile will fail until it is installed"
            );
        }
        Ok(Err(error)) => {
            tracing::info!(target: TARGET, version = VERSION, commit = COMMIT, "version");
            tracing::warn!(
                target: TARGET,
                error = %crate::logging::error_chain(&error), "could not read the Ansible toolchain's versions"
            );
        }
        Err(_) => tracing::info!(target: TARGET, version = VERSION, commit = COMMIT, "version"),
    }
    None
}
