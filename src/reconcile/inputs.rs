//! A run's input directory written for a person to replay it (`ansible-operator replay`, the API's
//! `.../runs/{run}/inputs`): the run composed by [`run_spec`], as the operator composes it, written
//! by the runner's own `input_dir::write`, without its credentials (no proxy token, no SSH key).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use kube::api::DynamicObject;
use serde_json::{Map, Value};

use super::spec::{Inputs, check_reserved, run_spec};
use crate::remote::{self, Hosts, Remote};
use crate::runner::ssh::{Ssh, key_path};
use crate::runner::{self, RunSpec, input_dir};
use crate::watches::Watch;

/// The file that stands in for the SSH key the run read from a Secret.
pub const SSH_KEY_PLACEHOLDER: &str = "env/ssh_key.placeholder";

/// What composes a kind's runs: its watch entry and the process-wide settings.
#[derive(Debug, Clone)]
pub struct Composer {
    /// The watch entry.
    pub watch: Watch,
    /// The settings the operator composes its runs with.
    pub inputs: Inputs,
}

/// Why the inputs could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object is not a Kubernetes object.
    #[error("read the CR")]
    Object(#[source] serde_json::Error),
    /// The CR's spec would set Ansible's own variables: the operator would not run it either.
    #[error("the CR would not run")]
    Reserved(#[source] crate::vars::ReservedVariables),
    /// The watch's inventory or key Secret name did not render.
    #[error("render the hosts of the run")]
    Hosts(#[source] remote::Error),
    /// The directory could not be written.
    #[error("write the input directory {dir}")]
    Write {
        /// The directory.
        dir: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// A run's inputs, written.
#[derive(Debug)]
pub struct Written {
    /// The run as the operator would start it, in the written directory.
    pub spec: RunSpec,
    /// The command that runs it: the operator's, without `-j` (so events print as
    /// `ansible-playbook` prints them).
    pub command: Vec<String>,
    /// What the replay needs that was left out, and how to provide it.
    pub notes: Vec<String>,
}

/// Composes the run of `object` (the finalizer's when `finalizing`) as the operator does and writes
/// its input directory to `dir`: `env/extravars`, `env/envvars`, `env/cmdline`, `inventory/`.
/// Left out: the proxy kubeconfig and its token (the replay uses the user's kubeconfig) and the SSH
/// key (a placeholder says how to provide it).
pub fn write(
    watch: &Watch,
    inputs: &Inputs,
    object: &Value,
    finalizing: bool,
    ident: String,
    dir: &Path,
) -> Result<Written, Error> {
    let cr: DynamicObject = serde_json::from_value(object.clone()).map_err(Error::Object)?;
    let trust = (inputs.trust_cr_templates, inputs.trust_cr_variables);
    check_reserved(watch, trust.0, trust.1, object, finalizing).map_err(Error::Reserved)?;
    let hosts = remote::hosts(&watch.extensions, object).map_err(Error::Hosts)?;
    let secret = hosts.as_ref().and_then(|h| h.ssh_key_secret.clone());
    let remote = hosts.map(|Hosts { inventory, .. }| Remote {
        inventory,
        ssh: Ssh { private_key: None, known_hosts: None, policy: watch.extensions.host_key_checking },
    });
    let mut spec = run_spec(watch, inputs, &cr, object, finalizing, ident, remote.as_ref());
    spec.dir = dir.to_path_buf();
    spec.env_vars = runner::spec_environment(&spec, None)
        .into_iter()
        .map(|(name, value)| (name, Value::from(value)))
        .collect::<Map<String, Value>>();
    let write_error = |source| Error::Write { dir: dir.to_path_buf(), source };
    input_dir::write(&spec).map_err(write_error)?;
    let mut notes = vec![
        "runs with your kubeconfig (KUBECONFIG, else ~/.kube/config) straight against the API server, not through the operator's proxy: your RBAC applies, and objects it creates get no owner references from the proxy".to_string(),
    ];
    if let Some(ssh) = &spec.ssh {
        ssh.write(dir, &spec.ident).map_err(write_error)?;
    }
    if let Some(secret) = secret {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let note = format!(
            "the run read its SSH key from Secret {namespace}/{secret}, which is not copied here: put the key at {key} (mode 0600), e.g. kubectl -n {namespace} get secret {secret} -o jsonpath='{{.data.ssh-privatekey}}' | base64 -d > {key}",
            key = key_path(dir).display(),
        );
        runner::fs::write_private(&dir.join(SSH_KEY_PLACEHOLDER), format!("{note}\n"))
            .map_err(write_error)?;
        notes.push(note);
    }
    let command = command(&spec);
    Ok(Written { spec, command, notes })
}

/// `ansible-runner` and the operator's arguments, without `-j`.
pub fn command(spec: &RunSpec) -> Vec<String> {
    let argv = spec.argv().into_iter().map(|a| a.to_string_lossy().into_owned()).filter(|a| a != "-j");
    std::iter::once("ansible-runner".to_string()).chain(argv).collect()
}

/// A command line a shell reads back as `argv`.
pub fn shell_line(argv: &[String]) -> String {
    let quote = |arg: &String| {
        let plain =
            !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
        if plain { arg.clone() } else { format!("'{}'", arg.replace('\'', r"'\''")) }
    };
    argv.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// The files under `dir` (not its artifacts), by path relative to it, as text.
pub fn files(dir: &Path) -> io::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current)? {
            let path = entry?.path();
            let relative = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned();
            if path.is_dir() {
                if relative != "artifacts" {
                    stack.push(path);
                }
            } else {
                files.insert(relative, String::from_utf8_lossy(&std::fs::read(&path)?).into_owned());
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::runner::Inventory;
    use crate::watches::{self, Defaults, Environment};

    fn watch(extra: &str) -> Watch {
        let text = format!(
            "- group: cache.example.com\n  version: v1alpha1\n  kind: Memcached\n  playbook: Cargo.toml\n{extra}"
        );
        let defaults = Defaults { max_concurrent_reconciles: 1, ansible_verbosity: 2 };
        let env = Environment::new(env!("CARGO_MANIFEST_DIR"));
        watches::parse(&text, Path::new("watches.yaml"), &defaults, &env).expect("a watch").watches.remove(0)
    }

    fn inputs() -> Inputs {
        Inputs {
            runner_dir: "/unused".into(),
            ansible_args: String::new(),
            inventory: Inventory::Localhost { python: None },
            role_skip_facts: false,
            playbook_env: vec![("ANSIBLE_ROLES_PATH".into(), "/roles".into())],
            trust_cr_templates: false,
            trust_cr_variables: false,
            run_timeout: Duration::ZERO,
        }
    }

    fn cr() -> Value {
        json!({"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
               "metadata": {"name": "c", "namespace": "ns"},
               "spec": {"size": 2, "message": "{{ lookup('env', 'HOME') }}", "keys": "keys"}})
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ao-inputs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_cr_that_sets_ansibles_own_variables_is_not_written_for_a_replay_unless_trusted() {
        let dir = temp("reserved");
        let mut cr = cr();
        cr["spec"]["ansibleSshCommonArgs"] = json!("-o ProxyCommand=touch /tmp/owned");
        let refused = write(&watch(""), &inputs(), &cr, false, "8".into(), &dir).unwrap_err();
        assert!(matches!(refused, Error::Reserved(_)), "{refused:?}");
        assert!(!dir.join("env/extravars").exists(), "nothing written");
        let trusted = Inputs { trust_cr_variables: true, ..inputs() };
        write(&watch(""), &trusted, &cr, false, "8".into(), &dir).expect("written when trusted");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_replay_gets_the_operators_extra_vars_and_command_without_json_events() {
        let dir = temp("vars");
        let written = write(&watch(""), &inputs(), &cr(), false, "7".into(), &dir).expect("written");
        let files = files(&dir).unwrap();
        let extra_vars: Value = serde_json::from_str(&files["env/extravars"]).unwrap();
        assert_eq!(extra_vars["size"], 2);
        assert_eq!(extra_vars["message"], json!({"__ansible_unsafe": "{{ lookup('env', 'HOME') }}"}));
        let env: Value = serde_json::from_str(&files["env/envvars"]).unwrap();
        assert_eq!(env, json!({"ANSIBLE_ROLES_PATH": "/roles"}), "no kubeconfig, no token");
        assert!(files.contains_key("inventory/hosts"));
        let dir_text = dir.display().to_string();
        assert_eq!(written.command[..3], ["ansible-runner".to_string(), "run".into(), dir_text]);
        assert!(!written.command.contains(&"-j".to_string()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_ssh_key_from_a_secret_is_left_out_with_a_placeholder_saying_how_to_provide_it() {
        let dir = temp("ssh");
        let watch = watch(
            "  sshKeySecret: \"{{ spec.keys }}\"\n  inventory: |\n    all:\n      hosts:\n        h1:\n",
        );
        let written = write(&watch, &inputs(), &cr(), false, "8".into(), &dir).expect("written");
        assert!(!key_path(&dir).exists());
        let placeholder = std::fs::read_to_string(dir.join(SSH_KEY_PLACEHOLDER)).unwrap();
        assert!(placeholder.contains("Secret ns/keys"), "{placeholder}");
        assert!(written.notes.iter().any(|n| n.contains("kubectl -n ns get secret keys")));
        let env: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("env/envvars")).unwrap()).unwrap();
        assert!(env["ANSIBLE_SSH_ARGS"].as_str().unwrap().contains("StrictHostKeyChecking"));
        assert_eq!(env["ANSIBLE_INVENTORY_UNPARSED_FAILED"], "True");
        assert!(files(&dir).unwrap().contains_key("inventory/hosts.yml"));
        let _ = std::fs::remove_dir_all(crate::runner::ssh::control_dir("8"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_command_line_quotes_what_a_shell_would_split() {
        let argv = ["ansible-runner".to_string(), "run".into(), "/a b".into(), "--x".into(), "it's".into()];
        assert_eq!(shell_line(&argv), r"ansible-runner run '/a b' --x 'it'\''s'");
    }
}
