//! The runner's private data directory and command line (upstream §3.4–3.5): a pure description,
//! then one function that writes it.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::ssh::Ssh;
use crate::watches::Target;

/// Everything one run of ansible-runner needs.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The CR's private data directory, re-used across its runs.
    pub dir: PathBuf,
    /// Playbook or role to run.
    pub target: Target,
    /// Contents of `env/extravars`.
    pub extra_vars: Map<String, Value>,
    /// Environment for the playbook, written to `env/envvars` (and set on the process).
    pub env_vars: Map<String, Value>,
    /// `-v` count (0 adds no flag).
    pub verbosity: u8,
    /// `--rotate-artifacts` (0 keeps everything).
    pub rotate_artifacts: u32,
    /// Unique id of this run; names `artifacts/<ident>`.
    pub ident: String,
    /// `--ansible-args`, written to `env/cmdline` when not empty.
    pub ansible_args: String,
    /// Where the inventory comes from.
    pub inventory: Inventory,
    /// Add `--role-skip-facts` in role mode (`ANSIBLE_GATHERING=explicit`).
    pub role_skip_facts: bool,
    /// Key, known_hosts and host key policy for runs that reach hosts over SSH.
    pub ssh: Option<Ssh>,
    /// The watch's `executor`; `None` runs on `--ansible-executor`.
    pub executor: Option<crate::executor::Executor>,
    /// Longest the run may take before its process tree is ended; `None`: no limit.
    pub timeout: Option<std::time::Duration>,
}

/// The runner's inventory.
#[derive(Debug, Clone)]
pub enum Inventory {
    /// Upstream's default: localhost over the local connection with this interpreter.
    Localhost {
        /// `$VIRTUAL_ENV/bin/python3`, or Ansible's own interpreter when `None`.
        python: Option<PathBuf>,
    },
    /// `ANSIBLE_INVENTORY`: a file copied to `inventory/hosts`, or a directory copied into `inventory/`.
    Copy(PathBuf),
    /// The watch's `inventory` template rendered from the CR, written to `inventory/hosts.yml`.
    /// Localhost stays Ansible's implicit one (local connection, the runner's Python).
    Rendered(String),
}

impl RunSpec {
    /// `artifacts/<ident>` of this run.
    pub fn artifact_dir(&self) -> PathBuf {
        self.dir.join("artifacts").join(&self.ident)
    }

    /// Arguments for `ansible-runner` (upstream's, plus `-j` for the JSON event stream).
    pub fn argv(&self) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec!["run".into(), self.dir.clone().into()];
        argv.extend(["--rotate-artifacts".into(), self.rotate_artifacts.to_string().into()]);
        match &self.target {
            Target::Playbook(path) => argv.extend(["-p".into(), path.clone().into()]),
            Target::Role(path) => {
                let name = path.file_name().map(OsString::from).unwrap_or_default();
                let mut roles_path = path.parent().map(OsString::from).unwrap_or_default();
                roles_path.push("/");
                argv.extend(["--role".into(), name, "--roles-path".into(), roles_path]);
                let hosts =
                    if matches!(self.inventory, Inventory::Rendered(_)) { "all" } else { "localhost" };
                argv.extend(["--hosts".into(), hosts.into()]);
            }
        }
        argv.extend(["-i".into(), self.ident.clone().into(), "-j".into()]);
        if self.verbosity > 0 {
            argv.push(format!("-{}", "v".repeat(self.verbosity.into())).into());
        }
        if self.role_skip_facts && matches!(self.target, Target::Role(_)) {
            argv.push("--role-skip-facts".into());
        }
        argv
    }
}

/// `env/cmdline` content: upstream strips one pair of outer single quotes.
pub fn cmdline(ansible_args: &str) -> Option<String> {
    if ansible_args.is_empty() {
        return None;
    }
    let quoted = ansible_args.len() >= 2 && ansible_args.starts_with('\'') && ansible_args.ends_with('\'');
    Some(if quoted { ansible_args[1..ansible_args.len() - 1].to_string() } else { ansible_args.to_string() })
}

/// Upstream's generated `inventory/hosts`.
pub fn localhost_inventory(python: Option<&Path>) -> String {
    let interpreter = match python {
        Some(path) => path.display().to_string(),
        None => "{{ansible_playbook_python}}".to_string(),
    };
    format!("localhost ansible_connection=local ansible_python_interpreter={interpreter}\n")
}

/// Writes the data directory for a run (files the runner reads; artifacts are its own).
pub fn write(spec: &RunSpec) -> io::Result<()> {
    let env = spec.dir.join("env");
    std::fs::create_dir_all(&env)?;
    let latest = spec.dir.join("artifacts").join("latest");
    if latest.is_symlink() && !latest.exists() {
        remove_if_present(&latest)?;
    }
    write_json(&env.join("extravars"), &spec.extra_vars)?;
    write_json(&env.join("envvars"), &spec.env_vars)?;
    match cmdline(&spec.ansible_args) {
        Some(line) => std::fs::write(env.join("cmdline"), line)?,
        None => remove_if_present(&env.join("cmdline"))?,
    }
    let inventory = spec.dir.join("inventory");
    if inventory.exists() {
        std::fs::remove_dir_all(&inventory)?;
    }
    std::fs::create_dir_all(&inventory)?;
    match &spec.inventory {
        Inventory::Localhost { python } => {
            std::fs::write(inventory.join("hosts"), localhost_inventory(python.as_deref()))?
        }
        Inventory::Copy(source) if source.is_dir() => copy_dir(source, &inventory)?,
        Inventory::Copy(source) => {
            std::fs::copy(source, inventory.join("hosts"))?;
        }
        Inventory::Rendered(text) => std::fs::write(inventory.join("hosts.yml"), text)?,
    }
    Ok(())
}

/// Points `artifacts/latest` at this run's artifacts, as upstream does after every run. A run that
/// left no artifacts leaves no link: ansible-runner's artifact rotation fails on a dangling one.
pub fn link_latest(spec: &RunSpec) -> io::Result<()> {
    let latest = spec.dir.join("artifacts").join("latest");
    remove_if_present(&latest)?;
    if spec.artifact_dir().is_dir() {
        std::os::unix::fs::symlink(&spec.ident, latest)?;
    }
    Ok(())
}

fn write_json(path: &Path, value: &Map<String, Value>) -> io::Result<()> {
    let text = serde_json::to_vec(value).map_err(io::Error::other)?;
    std::fs::write(path, text)
}

/// Removes a file; one that is not there is fine.
pub(super) fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(target: Target) -> RunSpec {
        RunSpec {
            dir: PathBuf::from("/tmp/r/g/v1/Kind/ns/name"),
            target,
            extra_vars: Map::new(),
            env_vars: Map::new(),
            verbosity: 2,
            rotate_artifacts: 20,
            ident: "42".into(),
            ansible_args: String::new(),
            inventory: Inventory::Localhost { python: None },
            role_skip_facts: true,
            ssh: None,
            executor: None,
            timeout: None,
        }
    }

    fn strings(argv: Vec<OsString>) -> Vec<String> {
        argv.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn playbook_mode_argv_matches_upstream_plus_json_output() {
        let argv = strings(spec(Target::Playbook("/opt/ansible/playbooks/site.yml".into())).argv());
        assert_eq!(
            argv,
            [
                "run",
                "/tmp/r/g/v1/Kind/ns/name",
                "--rotate-artifacts",
                "20",
                "-p",
                "/opt/ansible/playbooks/site.yml",
                "-i",
                "42",
                "-j",
                "-vv"
            ]
        );
    }

    #[test]
    fn role_mode_argv_names_role_and_its_parent_with_a_trailing_slash() {
        let argv = strings(spec(Target::Role("/opt/ansible/roles/memcached".into())).argv());
        assert_eq!(
            argv,
            [
                "run",
                "/tmp/r/g/v1/Kind/ns/name",
                "--rotate-artifacts",
                "20",
                "--role",
                "memcached",
                "--roles-path",
                "/opt/ansible/roles/",
                "--hosts",
                "localhost",
                "-i",
                "42",
                "-j",
                "-vv",
                "--role-skip-facts"
            ]
        );
    }

    #[test]
    fn role_mode_with_a_rendered_inventory_runs_on_all_hosts() {
        let mut spec = spec(Target::Role("/opt/ansible/roles/etcd".into()));
        spec.inventory = Inventory::Rendered("etcd:\n  hosts:\n    a:\n".into());
        let argv = strings(spec.argv());
        let at = argv.iter().position(|a| a == "--hosts").unwrap();
        assert_eq!(argv[at + 1], "all");
    }

    #[test]
    fn verbosity_zero_adds_no_flag() {
        let mut spec = spec(Target::Playbook("/p.yml".into()));
        spec.verbosity = 0;
        assert!(!strings(spec.argv()).iter().any(|a| a.starts_with("-v")));
    }

    #[test]
    fn cmdline_strips_one_pair_of_outer_single_quotes() {
        assert_eq!(cmdline(""), None);
        assert_eq!(cmdline("--tags a"), Some("--tags a".into()));
        assert_eq!(cmdline("'--tags \"a,b\"'"), Some("--tags \"a,b\"".into()));
    }

    #[test]
    fn inventory_uses_the_virtualenv_python_when_set() {
        assert_eq!(
            localhost_inventory(None),
            "localhost ansible_connection=local ansible_python_interpreter={{ansible_playbook_python}}\n"
        );
        assert_eq!(
            localhost_inventory(Some(Path::new("/venv/bin/python3"))),
            "localhost ansible_connection=local ansible_python_interpreter=/venv/bin/python3\n"
        );
    }
}
