//! The Ansible toolchain playbooks run with: the Python that `ansible-runner` starts on, and the
//! ansible-core and ansible-runner versions installed there, as `version` and the start-up log
//! report them.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Asks the interpreter for its version and the installed distributions' versions without
/// importing Ansible (a few tens of milliseconds).
const PROBE: &str = r#"
import importlib.metadata as m, platform
for name in ("ansible-core", "ansible-runner"):
    try:
        print(m.version(name))
    except m.PackageNotFoundError:
        print("not installed")
print(platform.python_version())
"#;

/// Versions of the toolchain in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// The interpreter `ansible-runner` runs on.
    pub python_path: PathBuf,
    /// ansible-core's version.
    pub ansible_core: String,
    /// ansible-runner's version.
    pub ansible_runner: String,
    /// Python's version.
    pub python: String,
}

impl fmt::Display for Toolchain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ansible-core: {:?}, ansible-runner: {:?}, python: {:?}",
            self.ansible_core, self.ansible_runner, self.python
        )
    }
}

/// Why the toolchain could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `ansible-runner` is not on `PATH`.
    #[error("ansible-runner is not on PATH")]
    NoRunner,
    /// The runner script does not start with a `#!` line naming its interpreter.
    #[error("{path} does not name its Python interpreter in a #! line")]
    NoInterpreter {
        /// The runner script.
        path: PathBuf,
    },
    /// The interpreter could not be run, or said something unexpected.
    #[error("ask {python} for versions: {reason}")]
    Probe {
        /// The interpreter.
        python: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// Reads the versions of the toolchain behind `runner` (an `ansible-runner` path or a name on
/// `PATH`).
pub fn probe(runner: &Path) -> Result<Toolchain, Error> {
    let runner = resolve(runner).ok_or(Error::NoRunner)?;
    let script = std::fs::read(&runner).map_err(|_| Error::NoRunner)?;
    let python = interpreter(&script).ok_or_else(|| Error::NoInterpreter { path: runner.clone() })?;
    let output = Command::new(&python)
        .args(["-I", "-c", PROBE])
        .output()
        .map_err(|e| Error::Probe { python: python.clone(), reason: e.to_string() })?;
    if !output.status.success() {
        let reason = String::from_utf8_lossy(&output.stderr).trim().to_string();
        return Err(Error::Probe { python, reason });
    }
    parse(python.clone(), &String::from_utf8_lossy(&output.stdout))
        .ok_or_else(|| Error::Probe { python, reason: "unexpected output".into() })
}

/// The interpreter of a `#!` line: `#!/venv/bin/python3` or `#!/usr/bin/env python3`.
fn interpreter(script: &[u8]) -> Option<PathBuf> {
    let first = script.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(first).ok()?.strip_prefix("#!")?;
    let mut words = line.split_whitespace();
    let program = words.next()?;
    match program.rsplit('/').next()? {
        "env" => resolve(Path::new(words.next()?)),
        name if name.starts_with("python") => Some(PathBuf::from(program)),
        _ => None,
    }
}

fn parse(python_path: PathBuf, stdout: &str) -> Option<Toolchain> {
    let mut lines = stdout.lines().map(str::trim);
    Some(Toolchain {
        python_path,
        ansible_core: lines.next()?.to_string(),
        ansible_runner: lines.next()?.to_string(),
        python: lines.next()?.to_string(),
    })
}

/// `program` itself when it is a path, else its first match on `PATH`.
pub fn resolve(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_path_buf());
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreter_comes_from_the_shebang() {
        assert_eq!(interpreter(b"#!/venv/bin/python3\nimport x\n"), Some(PathBuf::from("/venv/bin/python3")));
        assert_eq!(interpreter(b"#!/bin/sh\nexec x\n"), None);
        assert_eq!(interpreter(b"no shebang"), None);
    }

    #[test]
    fn probe_output_is_three_lines() {
        let toolchain = parse(PathBuf::from("/p"), "2.18.19\n2.4.3\n3.11.7\n").unwrap();
        assert_eq!(toolchain.ansible_core, "2.18.19");
        assert_eq!(
            toolchain.to_string(),
            r#"ansible-core: "2.18.19", ansible-runner: "2.4.3", python: "3.11.7""#
        );
        assert_eq!(parse(PathBuf::from("/p"), "2.18.19\n"), None);
    }
}
