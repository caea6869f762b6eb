//! The etcd the samples install over SSH on the test hosts: the sample operator that does it,
//! where a member lives on its host, whether it runs, and the tests' own etcdctl against it.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube::Client;

use super::hosts::{self, Host};
use super::operator::OperatorConfig;
use super::repo;

/// The sample operator (this repository's own `watches.yaml`) watching `namespace`, with the etcd
/// releases of `hack/` to install from.
pub fn sample_operator(namespace: &str) -> OperatorConfig<'_> {
    OperatorConfig::project(repo().to_path_buf(), namespace)
        .env("ETCD_RELEASES_DIR", repo().join(".local/etcd-releases").display().to_string())
}

/// Creates the `kubernetes.io/ssh-auth` Secret `name` with the key every test host accepts and
/// their known host keys: what the samples' CRs name as `sshKeySecret`.
pub async fn create_hosts_secret(client: &Client, namespace: &str, name: &str) {
    hosts::create_ssh_secret(client, namespace, name, &hosts::client_key(), Some(&hosts::known_hosts()))
        .await;
}

/// Where the sample installs the etcd of CR `namespace/name` on `host`.
pub fn install_dir(host: &Host, namespace: &str, name: &str) -> PathBuf {
    host.file(&format!("etcd-{namespace}-{name}"))
}

/// The PID of the host's etcd member of CR `namespace/name`, when it runs.
pub fn member_pid(host: &Host, namespace: &str, name: &str) -> Option<u32> {
    running_pid(&install_dir(host, namespace, name).join("etcd.pid"))
}

/// The PID in a pid file, when that process runs.
pub fn running_pid(file: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
    PathBuf::from(format!("/proc/{pid}")).exists().then_some(pid)
}

/// The test's own etcdctl against `host`'s client URL on `client_port`; the caller adds arguments.
pub fn etcdctl(host: &Host, client_port: u16) -> Command {
    let mut command = Command::new(repo().join(".local/bin/etcdctl"));
    command.arg(format!("--endpoints=http://{}:{client_port}", host.address));
    command
}
