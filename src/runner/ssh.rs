//! SSH for one run: the private key in the private data dir (`env/ssh_key`, mode 0600, removed when
//! the run ends), known_hosts files, and the options that hold the host key policy. Connections are
//! multiplexed within a run only: each run has its own control socket directory, and its master
//! connections are closed when it ends, so no run reuses another's authentication.

use std::fmt;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::input_dir::remove_if_present;
use crate::watches::HostKeyChecking;

/// A private key; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKey(String);

impl PrivateKey {
    /// Wraps key material. A missing final newline is added (OpenSSH rejects keys without one).
    pub fn new(mut text: String) -> Self {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        Self(text)
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(<redacted>)")
    }
}

/// How one run reaches its hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ssh {
    /// The key from the Secret; `None` leaves SSH to its own defaults (agent, `~/.ssh`).
    pub private_key: Option<PrivateKey>,
    /// `known_hosts` from the Secret.
    pub known_hosts: Option<String>,
    /// The watch's host key policy.
    pub policy: HostKeyChecking,
}

/// Where ansible-runner reads the key from.
pub fn key_path(dir: &Path) -> PathBuf {
    dir.join("env").join("ssh_key")
}

/// The Secret's known_hosts, rewritten every run.
fn secret_known_hosts(dir: &Path) -> PathBuf {
    dir.join("ssh").join("known_hosts.secret")
}

/// Host keys learned under `accept-new`; kept across the CR's runs, removed with its directory.
pub fn learned_known_hosts(dir: &Path) -> PathBuf {
    dir.join("ssh").join("known_hosts")
}

/// The run's control socket directory: short (socket paths are limited to 108 bytes) and unique.
pub fn control_dir(ident: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ao-ssh-{ident}"))
}

impl Ssh {
    /// Writes the key (0600) and known_hosts files into the CR's directory and creates the run's
    /// control socket directory (0700).
    pub fn write(&self, dir: &Path, ident: &str) -> io::Result<()> {
        let ssh_dir = dir.join("ssh");
        std::fs::create_dir_all(&ssh_dir)?;
        std::fs::create_dir_all(dir.join("env"))?;
        match &self.private_key {
            Some(PrivateKey(text)) => write_private(&key_path(dir), text)?,
            None => remove_if_present(&key_path(dir))?,
        }
        match &self.known_hosts {
            Some(text) => std::fs::write(secret_known_hosts(dir), text)?,
            None => remove_if_present(&secret_known_hosts(dir))?,
        }
        if self.policy == HostKeyChecking::AcceptNew && !learned_known_hosts(dir).exists() {
            std::fs::write(learned_known_hosts(dir), "")?;
        }
        std::fs::DirBuilder::new().mode(0o700).recursive(true).create(control_dir(ident))
    }

    /// Environment for the run. `inherited` is the operator's own `ANSIBLE_SSH_ARGS`, kept after
    /// ours (for SSH the first value of an option wins, so the host key policy cannot be undone).
    pub fn env(&self, dir: &Path, ident: &str, inherited: Option<&str>) -> Vec<(String, String)> {
        let strict = match self.policy {
            HostKeyChecking::Strict => "yes",
            HostKeyChecking::AcceptNew => "accept-new",
        };
        let mut files = Vec::new();
        if self.policy == HostKeyChecking::AcceptNew {
            files.push(learned_known_hosts(dir));
        }
        if self.known_hosts.is_some() {
            files.push(secret_known_hosts(dir));
        }
        let mut args =
            format!("-C -o ControlMaster=auto -o ControlPersist=30s -o StrictHostKeyChecking={strict}");
        if !files.is_empty() {
            let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            args.push_str(&format!(" -o 'UserKnownHostsFile={}'", files.join(" ")));
        }
        if let Some(inherited) = inherited.filter(|a| !a.trim().is_empty()) {
            args.push(' ');
            args.push_str(inherited);
        }
        vec![
            ("ANSIBLE_SSH_ARGS".into(), args),
            ("ANSIBLE_HOST_KEY_CHECKING".into(), "True".into()),
            ("ANSIBLE_SSH_CONTROL_PATH_DIR".into(), control_dir(ident).display().to_string()),
        ]
    }
}

/// After a run: closes its master connections, removes its control directory and the key.
pub async fn finish(dir: &Path, ident: &str) {
    let control = control_dir(ident);
    if let Ok(entries) = std::fs::read_dir(&control) {
        for socket in entries.flatten() {
            let stopped = tokio::process::Command::new("ssh")
                .args(["-O", "exit", "-o"])
                .arg(format!("ControlPath={}", socket.path().display()))
                .arg("ansible-operator-run")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .await;
            if let Err(error) = stopped {
                tracing::debug!(%error, "could not stop an ssh master connection");
            }
        }
    }
    forget(dir, ident);
}

/// Removes the key and the control directory (also when a run is cancelled).
pub fn forget(dir: &Path, ident: &str) {
    if let Err(error) = remove_if_present(&key_path(dir)) {
        tracing::error!(%error, path = %key_path(dir).display(), "could not remove the run's ssh key");
    }
    let _ = std::fs::remove_dir_all(control_dir(ident));
}

fn write_private(path: &Path, text: &str) -> io::Result<()> {
    remove_if_present(path)?;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn ssh(policy: HostKeyChecking, known_hosts: Option<&str>) -> Ssh {
        Ssh {
            private_key: Some(PrivateKey::new("KEY".into())),
            known_hosts: known_hosts.map(str::to_string),
            policy,
        }
    }

    fn args(ssh: &Ssh, inherited: Option<&str>) -> String {
        let env = ssh.env(Path::new("/r/cr"), "7", inherited);
        env.into_iter().find(|(k, _)| k == "ANSIBLE_SSH_ARGS").unwrap().1
    }

    #[test]
    fn strict_with_secret_known_hosts_checks_only_against_them() {
        let args = args(&ssh(HostKeyChecking::Strict, Some("h ssh-ed25519 AAAA")), None);
        assert_eq!(
            args,
            "-C -o ControlMaster=auto -o ControlPersist=30s -o StrictHostKeyChecking=yes -o 'UserKnownHostsFile=/r/cr/ssh/known_hosts.secret'"
        );
    }

    #[test]
    fn strict_without_known_hosts_keeps_ssh_default_files() {
        let args = args(&ssh(HostKeyChecking::Strict, None), Some("-o ProxyJump=bastion"));
        assert_eq!(
            args,
            "-C -o ControlMaster=auto -o ControlPersist=30s -o StrictHostKeyChecking=yes -o ProxyJump=bastion"
        );
    }

    #[test]
    fn accept_new_learns_into_the_cr_file_first() {
        let args = args(&ssh(HostKeyChecking::AcceptNew, Some("x")), Some("-o StrictHostKeyChecking=no"));
        assert!(args.contains("-o StrictHostKeyChecking=accept-new -o 'UserKnownHostsFile=/r/cr/ssh/known_hosts /r/cr/ssh/known_hosts.secret'"), "{args}");
        assert!(args.ends_with("-o StrictHostKeyChecking=no"), "ours come first, so they win: {args}");
    }

    #[test]
    fn key_is_written_0600_and_forgotten() {
        let dir = std::env::temp_dir().join(format!("ssh-test-{}", std::process::id()));
        let ssh = ssh(HostKeyChecking::AcceptNew, Some("known"));
        ssh.write(&dir, "test-ident").unwrap();
        let mode = std::fs::metadata(key_path(&dir)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(key_path(&dir)).unwrap(), "KEY\n");
        assert_eq!(std::fs::read_to_string(secret_known_hosts(&dir)).unwrap(), "known");
        assert!(learned_known_hosts(&dir).exists());
        forget(&dir, "test-ident");
        assert!(!key_path(&dir).exists());
        assert!(!control_dir("test-ident").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn debug_output_redacts_the_key() {
        assert!(!format!("{:?}", ssh(HostKeyChecking::Strict, None)).contains("KEY"));
    }
}
