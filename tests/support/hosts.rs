//! The SSH test hosts of `hack/test-hosts.sh`: real sshd processes on 127.0.0.11.. with their own
//! login users and homes. Tests read the hosts' files directly (they share this machine's disk).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};

use super::repo;

/// One test host, as `hack/test-hosts.sh up` describes it in `hosts.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Host {
    /// Inventory name (`host1`).
    pub name: String,
    /// Loopback address sshd listens on.
    pub address: String,
    /// sshd port.
    pub port: u16,
    /// Login user.
    pub user: String,
    /// The user's home directory.
    pub home: PathBuf,
}

impl Host {
    /// The host as an entry of a CR's `spec.hosts`.
    pub fn spec(&self) -> Value {
        json!({"name": self.name, "address": self.address, "port": self.port, "user": self.user})
    }

    /// Hosts as a CR's `spec.hosts` (or any list of hosts in a spec).
    pub fn specs(hosts: &[&Host]) -> Value {
        Value::Array(hosts.iter().map(|h| h.spec()).collect())
    }

    /// A path inside the host's home directory.
    pub fn file(&self, relative: &str) -> PathBuf {
        self.home.join(relative)
    }
}

fn state() -> PathBuf {
    repo().join(".local/test-hosts")
}

/// The test hosts, started by `hack/test-hosts.sh up` on first use.
pub fn hosts() -> &'static [Host] {
    static HOSTS: OnceLock<Vec<Host>> = OnceLock::new();
    HOSTS.get_or_init(|| {
        let status = Command::new(repo().join("hack/test-hosts.sh"))
            .arg("up")
            .status()
            .expect("run hack/test-hosts.sh up");
        assert!(status.success(), "hack/test-hosts.sh up failed ({status}); see .local/test-hosts/");
        let text = std::fs::read_to_string(state().join("hosts.json")).expect("read hosts.json");
        serde_json::from_str(&text).expect("hosts.json lists hosts")
    })
}

/// Watch lines (`inventory`, `sshKeySecret`) for CRs whose `spec.hosts` lists test hosts and whose
/// `spec.keySecret` names the key Secret. Every value is pasted in plainly, as a careless template
/// author writes it; `message` is the host variable tests/fixtures/playbooks/ssh_marker.yml writes.
pub const MARKER_INVENTORY: &str = r#"  inventory: |
    targets:
      hosts:
    {% for h in spec.hosts %}
        {{ h.name }}:
          ansible_host: {{ h.address }}
          ansible_port: {{ h.port }}
          ansible_user: {{ h.user }}
          ansible_python_interpreter: /usr/bin/python3
          message: {{ h.message | default("hello") }}
    {% endfor %}
  sshKeySecret: "{{ spec.keySecret }}"
"#;

/// The private key every test host accepts.
pub fn client_key() -> String {
    hosts();
    std::fs::read_to_string(state().join("id_ed25519")).expect("read the test client key")
}

/// known_hosts lines for every test host.
pub fn known_hosts() -> String {
    hosts();
    std::fs::read_to_string(state().join("known_hosts")).expect("read known_hosts")
}

/// A new private key that no test host accepts.
pub fn stranger_key(dir: &Path) -> String {
    let path = dir.join("stranger_key");
    let _ = std::fs::remove_file(&path);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "stranger", "-f"])
        .arg(&path)
        .status()
        .expect("run ssh-keygen");
    assert!(status.success());
    std::fs::read_to_string(path).expect("read the new key")
}

/// The lines of a private key between its armour: what must never leak.
pub fn key_body(key: &str) -> Vec<String> {
    key.lines().filter(|line| !line.starts_with("-----") && line.len() > 20).map(str::to_string).collect()
}

/// The annotation by which a Secret a CR names opts in to the CR's kind (README "Security").
pub const ALLOW_KINDS: &str = "ansible-operator.dev/allow-kinds";

/// Creates a `kubernetes.io/ssh-auth` Secret that every kind may use (`allow-kinds: "*"`): the
/// tests' kinds are many; tests/security_inventory.rs shows the opt-in itself.
pub async fn create_ssh_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
    known_hosts: Option<&str>,
) {
    create_ssh_secret_for(client, namespace, name, key, known_hosts, Some("*")).await;
}

/// Creates a `kubernetes.io/ssh-auth` Secret annotated `allow-kinds: <allow>` (none when `None`).
pub async fn create_ssh_secret_for(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
    known_hosts: Option<&str>,
    allow: Option<&str>,
) {
    let mut data = std::collections::BTreeMap::new();
    data.insert("ssh-privatekey".to_string(), ByteString(key.as_bytes().to_vec()));
    if let Some(known_hosts) = known_hosts {
        data.insert("known_hosts".to_string(), ByteString(known_hosts.as_bytes().to_vec()));
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            annotations: allow.map(|kinds| [(ALLOW_KINDS.to_string(), kinds.to_string())].into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/ssh-auth".into()),
        data: Some(data),
        ..Default::default()
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), &secret).await.expect("create ssh-auth Secret");
}
