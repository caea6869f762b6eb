//! The runner's private data directory and command line (upstream §3.4–3.5): a pure description,
//! then one function that writes it. Everything it writes is the operator's alone: directories
//! 0700, files 0600 (extra vars and kubeconfigs hold what the CR's author may not read).

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::fs::{create_private_dir, remove_if_present, write_private};
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
    pub executor: Option<crate::executor_mode::Executor>,
    /// Longest the run may take before its process tree is ended; `None`: no limit.
    pub timeout: Option<std::time::Duration>,
    /// Variables of the operator's environment the run does not get (set by the run's door).
    pub env_removed: Vec<String>,
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

/// Why `--runner-dir` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// Another user owns it: they could read the runs' extra vars and kubeconfigs and change the
    /// files a run reads.
    #[error(
        "runner directory {dir} is owned by uid {owner}, not by this operator's uid {uid}: another user could read and change its runs' files; choose another --runner-dir or give it to uid {uid}"
    )]
    Foreign {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// The operator's effective uid.
        uid: u32,
    },
    /// It could not be created or read.
    #[error("prepare the runner directory {dir}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// Makes `--runner-dir` ready at start: created 0700 when missing; refused when another user owns
/// it; an existing one of ours is narrowed to 0700.
pub fn prepare_root(dir: &Path) -> Result<(), RootError> {
    let io_error = |source| RootError::Io { dir: dir.to_path_buf(), source };
    create_private_dir(dir).map_err(io_error)?;
    let metadata = std::fs::metadata(dir).map_err(io_error)?;
    let uid = nix::unistd::geteuid().as_raw();
    check_owner(dir, metadata.uid(), uid)?;
    if metadata.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io_error)?;
    }
    Ok(())
}

/// `dir` may be used only when `uid` owns it.
fn check_owner(dir: &Path, owner: u32, uid: u32) -> Result<(), RootError> {
    match owner == uid {
        true => Ok(()),
        false => Err(RootError::Foreign { dir: dir.to_path_buf(), owner, uid }),
    }
}

/// Writes the data directory for a run (files the runner reads; artifacts are its own).
pub fn write(spec: &RunSpec) -> io::Result<()> {
    let env = spec.dir.join("env");
    create_private_dir(&env)?;
    // Directories an earlier version made with the umask's mode.
    for dir in [&spec.dir, &env] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let latest = spec.dir.join("artifacts").join("latest");
    if latest.is_symlink() && !latest.exists() {
        remove_if_present(&latest)?;
    }
    write_json(&env.join("extravars"), &spec.extra_vars)?;
    write_json(&env.join("envvars"), &spec.env_vars)?;
    match cmdline(&spec.ansible_args) {
        Some(line) => write_private(&env.join("cmdline"), line)?,
        None => remove_if_present(&env.join("cmdline"))?,
    }
    let inventory = spec.dir.join("inventory");
    if inventory.exists() {
        std::fs::remove_dir_all(&inventory)?;
    }
    create_private_dir(&inventory)?;
    match &spec.inventory {
        Inventory::Localhost { python } => {
            write_private(&inventory.join("hosts"), localhost_inventory(python.as_deref()))?
        }
        Inventory::Copy(source) if source.is_dir() => copy_dir(source, &inventory)?,
        Inventory::Copy(source) => write_private(&inventory.join("hosts"), std::fs::read(source)?)?,
        Inventory::Rendered(text) => write_private(&inventory.join("hosts.yml"), text)?,
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
    write_private(path, text)
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    create_private_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            write_private(&target, std::fs::read(entry.path())?)?;
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
            env_removed: Vec::new(),
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

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_data_directory_is_the_operators_alone() {
        let root = std::env::temp_dir().join(format!("ao-input-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut spec = spec(Target::Playbook("/p.yml".into()));
        spec.dir = root.join("g/v1/Kind/ns/name");
        spec.ansible_args = "--tags a".into();
        // A file an earlier run left readable by all is narrowed too.
        std::fs::create_dir_all(spec.dir.join("env")).unwrap();
        std::fs::write(spec.dir.join("env/extravars"), "{}").unwrap();
        std::fs::set_permissions(spec.dir.join("env/extravars"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        std::fs::set_permissions(&spec.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        write(&spec).unwrap();
        for dir in [spec.dir.clone(), spec.dir.join("env"), spec.dir.join("inventory")] {
            assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        }
        for file in ["env/extravars", "env/envvars", "env/cmdline", "inventory/hosts"] {
            assert_eq!(mode(&spec.dir.join(file)), 0o600, "{file}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_runner_root_is_created_private_and_an_open_one_is_narrowed() {
        let root = std::env::temp_dir().join(format!("ao-runner-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        prepare_root(&root.join("runner")).unwrap();
        assert_eq!(mode(&root.join("runner")), 0o700);
        std::fs::set_permissions(root.join("runner"), std::fs::Permissions::from_mode(0o777)).unwrap();
        prepare_root(&root.join("runner")).unwrap();
        assert_eq!(mode(&root.join("runner")), 0o700);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_runner_root_owned_by_another_user_is_refused_with_both_uids() {
        let dir = Path::new("/var/lib/runner");
        assert!(check_owner(dir, 1001, 1001).is_ok());
        let error = check_owner(dir, 0, 1001).unwrap_err();
        assert_eq!(
            error.to_string(),
            "runner directory /var/lib/runner is owned by uid 0, not by this operator's uid 1001: another user could read and change its runs' files; choose another --runner-dir or give it to uid 1001"
        );
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
