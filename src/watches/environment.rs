//! The process environment the watches file is loaded in: variables, working directory and home.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Everything loading reads from the process, captured once so loading stays a pure function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    vars: HashMap<String, String>,
    cwd: PathBuf,
    home: Option<PathBuf>,
}

impl Environment {
    /// An environment with no variables and no home directory, rooted at `cwd`.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        Self { vars: HashMap::new(), cwd: cwd.into(), home: None }
    }

    /// Captures the running process: its UTF-8 environment variables, current directory and `$HOME`.
    pub fn from_process() -> std::io::Result<Self> {
        let vars: HashMap<String, String> = std::env::vars_os()
            .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
            .collect();
        // Go's os.UserHomeDir: $HOME, and no home at all when it is empty.
        let home = vars.get("HOME").filter(|home| !home.is_empty()).map(PathBuf::from);
        Ok(Self { vars, cwd: std::env::current_dir()?, home })
    }

    /// Returns this environment with `name` set to `value` (as the CLI does for `--ansible-roles-path`).
    #[must_use]
    pub fn with_var(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.vars.insert(name.into(), value.into());
        self
    }

    /// Returns this environment with `home` as the user's home directory.
    #[must_use]
    pub fn with_home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// The value of a variable, `Some("")` when it is set but empty.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// The directory relative playbook paths and `roles/` are resolved against.
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// The user's home directory, if known.
    pub fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }
}
