//! SSH for one run: the private key in the private data dir (`env/ssh_key`, mode 0600, removed when
//! the run ends), known_hosts files, and the options that hold the host key policy. Connections are
//! multiplexed within a run only: each run has its own control socket directory, and its master
//! connections are closed when it ends, so no run reuses another's authentication.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::{Path, PathBuf};

use super::fs::{remove_if_present, write_private};
use crate::mask::Secrets;
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
    /// Adds the private key to the values masked in the run's output.
    pub fn learn_secrets(&self, secrets: &Secrets) {
        if let Some(PrivateKey(text)) = &self.private_key {
            secrets.add(text.as_bytes());
        }
    }

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
    for args in exit_commands(&control_dir(ident)) {
        let stopped = tokio::process::Command::new("ssh")
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await;
        if let Err(error) = stopped {
            tracing::debug!(%error, "could not stop an ssh master connection");
        }
    }
    forget(dir, ident);
}

/// The arguments of `ssh` that ask each master connection listening in `control` to exit: one
/// command per control socket (other files there are not masters).
pub fn exit_commands(control: &Path) -> Vec<Vec<OsString>> {
    let Ok(entries) = std::fs::read_dir(control) else {
        return Vec::new();
    };
    let mut sockets: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_socket()))
        .map(|entry| entry.path())
        .collect();
    sockets.sort();
    sockets
        .into_iter()
        .map(|socket| {
            let mut control_path = OsString::from("ControlPath=");
            control_path.push(socket);
            vec!["-O".into(), "exit".into(), "-o".into(), control_path, "ansible-operator-run".into()]
        })
        .collect()
}

/// Ends the run's master connections that are still up (a cancelled or timed-out run never got
/// to `ssh -O exit`, and a master detaches from the run's process tree), then removes the key and
/// the control directory. Also called when a run is cancelled, so it does not wait.
pub fn forget(dir: &Path, ident: &str) {
    let control = control_dir(ident);
    if control.exists() {
        let ended = end_masters(&control);
        if !ended.is_empty() {
            tracing::info!(masters = ?ended, "ended the run's ssh master connections");
        }
    }
    if let Err(error) = remove_if_present(&key_path(dir)) {
        tracing::error!(%error, path = %key_path(dir).display(), "could not remove the run's ssh key");
    }
    let _ = std::fs::remove_dir_all(control);
}

/// SIGTERM (on which a master removes its socket and closes its connection) to every ssh process
/// serving a control socket in `control`; returns their pids.
fn end_masters(control: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let masters: Vec<u32> = entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            is_master_of(&cmdline, control).then_some(pid)
        })
        .collect();
    for pid in &masters {
        if let Ok(pid) = i32::try_from(*pid) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        }
    }
    masters
}

/// Whether `/proc/<pid>/cmdline` is an ssh process using a control socket in `control`: a master
/// renames itself `ssh: <control path> [mux]`, a client still has `-o ControlPath=<control path>`.
fn is_master_of(cmdline: &[u8], control: &Path) -> bool {
    let program = cmdline.split(|byte| *byte == 0 || *byte == b' ').next().unwrap_or_default();
    let name = program.rsplit(|byte| *byte == b'/').next().unwrap_or_default();
    if name != b"ssh" && name != b"ssh:" {
        return false;
    }
    let mut needle = control.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    cmdline.windows(needle.len()).any(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_private_key_is_masked_whole_and_line_by_line_and_known_hosts_is_not() {
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n-----END OPENSSH PRIVATE KEY-----";
        let ssh = Ssh {
            private_key: Some(PrivateKey::new(key.into())),
            known_hosts: Some("host1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5".into()),
            policy: HostKeyChecking::Strict,
        };
        let secrets = std::sync::Arc::new(Secrets::default());
        ssh.learn_secrets(&secrets);
        let mut masker = crate::mask::Masker::new(secrets);
        assert_eq!(masker.mask(&format!("{key}\n")), "********");
        assert_eq!(masker.mask("line b3BlbnNzaC1rZXktdjEAAAAABG5vbmU"), "line ********");
        let known = "host1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5";
        assert_eq!(masker.mask(known), known);
    }

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
    fn exit_is_asked_of_each_control_socket_and_nothing_else() {
        let control = control_dir("exit-commands-test");
        std::fs::create_dir_all(&control).unwrap();
        let _first = std::os::unix::net::UnixListener::bind(control.join("b1")).unwrap();
        let _second = std::os::unix::net::UnixListener::bind(control.join("a2")).unwrap();
        std::fs::write(control.join("notes.txt"), "not a socket").unwrap();
        let commands = exit_commands(&control);
        std::fs::remove_dir_all(&control).unwrap();
        let shown: Vec<String> = commands
            .iter()
            .map(|args| args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" "))
            .collect();
        let at = control.display();
        assert_eq!(
            shown,
            [
                format!("-O exit -o ControlPath={at}/a2 ansible-operator-run"),
                format!("-O exit -o ControlPath={at}/b1 ansible-operator-run"),
            ]
        );
        assert!(exit_commands(&control).is_empty(), "no control directory, nothing to close");
    }

    #[test]
    fn masters_are_recognised_by_their_control_path() {
        let control = Path::new("/tmp/ao-ssh-77");
        assert!(is_master_of(b"ssh: /tmp/ao-ssh-77/0f3a9c [mux]\0\0\0", control), "a detached master");
        let client =
            b"/usr/bin/ssh\0-C\0-o\0ControlMaster=auto\0-o\0ControlPath=/tmp/ao-ssh-77/0f3a9c\0host\0";
        assert!(is_master_of(client, control), "a master that has not renamed itself");
        assert!(!is_master_of(b"ssh: /tmp/ao-ssh-778/0f3a9c [mux]\0", control), "another run's directory");
        assert!(!is_master_of(b"ssh: /tmp/ao-ssh-7/0f3a9c [mux]\0", control), "another run's directory");
        assert!(!is_master_of(b"rm\0-rf\0/tmp/ao-ssh-77/0f3a9c\0", control), "not ssh");
        assert!(!is_master_of(b"", control));
    }

    #[tokio::test]
    async fn a_forgotten_run_ends_its_detached_master() {
        // A stand-in for a detached master: named as ssh renames one, in its own session, so it is
        // no descendant of the run, just as a ControlPersist master is not.
        let ident = format!("forget-test-{}", std::process::id());
        let control = control_dir(&ident);
        std::fs::create_dir_all(&control).unwrap();
        let title = format!("ssh: {}/0f3a9c [mux]", control.display());
        let mut master = tokio::process::Command::new("bash")
            .args(["-c", &format!("exec -a '{title}' sleep 300")])
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = master.id().unwrap();
        for _ in 0..100 {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline.starts_with(b"ssh: ") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let dir = std::env::temp_dir().join(&ident);
        forget(&dir, &ident);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), master.wait()).await;
        let status = ended.expect("the master ended").unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(15), "ended by SIGTERM");
        assert!(!control.exists());
    }

    #[test]
    fn debug_output_redacts_the_key() {
        assert!(!format!("{:?}", ssh(HostKeyChecking::Strict, None)).contains("KEY"));
    }
}
