//! What goes into a run and what comes out of it, on either executor: the [`Launch`] and the
//! [`Exit`].

use std::ffi::OsString;
use std::path::Path;

/// One run to start: ansible-runner with these arguments, in the operator's environment plus `env`.
#[derive(Debug)]
pub struct Launch<'a> {
    /// The run's id (its ansible-runner ident).
    pub id: &'a str,
    /// The `ansible-runner` program.
    pub program: &'a Path,
    /// Its arguments.
    pub argv: Vec<OsString>,
    /// Variables added to the operator's environment.
    pub env: Vec<(String, String)>,
    /// Variables of the operator's environment the run does not get.
    pub env_removed: &'a [String],
}

/// How a run's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exit {
    /// The exit status, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// The signal that ended its `ansible-playbook`, when the executor saw one (the warm worker
    /// does; a cold run's ansible-runner keeps it to itself).
    pub playbook_signal: Option<i32>,
}

impl From<std::process::ExitStatus> for Exit {
    fn from(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        Exit { code: status.code(), signal: status.signal(), playbook_signal: None }
    }
}
