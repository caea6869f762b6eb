//! Runs over SSH against real sshd test hosts (`hack/test-hosts.sh`): the inventory rendered from
//! the CR, the key from an ssh-auth Secret, the host key policy, the precheck, `status.hosts`, and a
//! private key that shows up nowhere.

use crate::support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::hosts::{self, Host};
use support::operator::{Operator, OperatorConfig};
use support::setup::Test;

const GROUP: &str = "ssh.test.example.com";
const WAIT: Duration = Duration::from_secs(180);

const INVENTORY: &str = hosts::MARKER_INVENTORY;

/// A watch of `kind` running the marker playbook over SSH, with `extra` watch lines.
fn watch(kind: &str, extra: &str) -> String {
    format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {kind}\n  playbook: {{fixtures}}/playbooks/ssh_marker.yml\n{INVENTORY}{extra}"
    )
}

struct Setup {
    client: Client,
    ns: support::TestNamespace,
    operator: Operator,
}

/// A namespace, the CRDs of `kinds`, and an operator on `watches`.
async fn setup(prefix: &str, kinds: &[&str], watches: &str) -> Setup {
    hosts::hosts();
    let test = kinds.iter().fold(Test::setup(prefix), |test, kind| test.kind(GROUP, kind));
    let Test { client, ns, api: _ } = test.build().await;
    let operator = OperatorConfig::new(watches, &ns.name).start();
    Setup { client, ns, operator }
}

fn spec(hosts: &[&Host], secret: &str) -> Value {
    json!({"keySecret": secret, "hosts": hosts.iter().map(|h| h.spec()).collect::<Vec<_>>()})
}

fn marker(host: &Host, namespace: &str, name: &str) -> std::path::PathBuf {
    host.file(&format!("markers/{namespace}-{name}"))
}

fn reason_and_message(object: &kube::api::DynamicObject) -> (String, String) {
    let failure = support::condition(object, "Failure").cloned().unwrap_or_default();
    (failure["reason"].as_str().unwrap_or("").into(), failure["message"].as_str().unwrap_or("").into())
}

/// Waits for a `Failure` condition with `reason`.
async fn wait_for_failure(api: &Api<kube::api::DynamicObject>, name: &str, reason: &str) -> (String, String) {
    support::wait_for(&format!("{name} to fail with {reason}"), WAIT, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let (found, message) = reason_and_message(&object);
        let failed = support::condition(&object, "Failure").is_some_and(|c| c["status"] == "True");
        Ok(if failed && found == reason {
            Ok((found, message))
        } else {
            Err(format!("status {}", object.data["status"]))
        })
    })
    .await
}

/// Every place a key could leak to: the operator log, the namespace's events, the CR, and every
/// file under the runner directory (artifacts included). Panics naming where a key line shows up.
/// Stops the operator first: during a run the key is in `env/ssh_key`, by design.
async fn assert_key_nowhere(setup: &mut Setup, key: &str) {
    setup.operator.stop();
    let mut places: Vec<(String, String)> = vec![("operator log".into(), setup.operator.log())];
    let events: Api<Event> = Api::namespaced(setup.client.clone(), &setup.ns.name);
    let events = events.list(&ListParams::default()).await.unwrap();
    places.push(("events".into(), serde_json::to_string(&events.items).unwrap()));
    for kind in ["Marker", "Checked", "Learner"] {
        let api = support::cr_api(&setup.client, GROUP, kind, &setup.ns.name);
        if let Ok(list) = api.list(&ListParams::default()).await {
            places.push((format!("{kind} CRs"), serde_json::to_string(&list.items).unwrap()));
        }
    }
    support::read_tree(&setup.operator.dir.join("runner"), &mut places);
    assert!(places.len() > 3, "the runner directory has files: {}", places.len());
    for line in hosts::key_body(key) {
        for (place, text) in &places {
            assert!(!text.contains(&line), "a line of the private key is in {place}");
        }
    }
}

#[tokio::test]
async fn a_run_over_ssh_reaches_the_listed_hosts_fills_status_hosts_and_leaks_no_key() {
    let mut setup = setup("ssh-run", &["Marker"], &watch("Marker", "")).await;
    let (ns, all) = (&setup.ns.name, hosts::hosts());
    let key = hosts::client_key();
    hosts::create_ssh_secret(&setup.client, ns, "keys", &key, Some(&hosts::known_hosts())).await;
    let api = support::cr_api(&setup.client, GROUP, "Marker", ns);

    support::create_cr(&api, GROUP, "Marker", "two", spec(&[&all[0], &all[1]], "keys")).await;
    let done = support::wait_for_condition(&api, "two", "Successful", "True", WAIT).await;
    assert!(marker(&all[0], ns, "two").exists() && marker(&all[1], ns, "two").exists());
    assert!(!marker(&all[2], ns, "two").exists(), "host3 is not in the spec");
    let status_hosts = &done.data["status"]["hosts"];
    for host in ["host1", "host2"] {
        let result = &status_hosts[host];
        assert_eq!(
            (&result["ok"], &result["failed"], &result["unreachable"]),
            (&json!(2), &json!(0), &json!(0))
        );
        assert!(result["changed"].as_i64().is_some_and(|n| n >= 1), "the marker is new: {status_hosts}");
    }
    assert_eq!(status_hosts.as_object().unwrap().len(), 2);

    let runner = setup.operator.runner_dir(GROUP, "Marker", ns, "two");
    assert!(!runner.join("env/ssh_key").exists(), "the key is removed when the run ends");
    assert!(runner.join("inventory/hosts.yml").exists());

    // Drop host2: it leaves status.hosts; an unchanged host1 reports no change.
    let patch = json!({"spec": spec(&[&all[0]], "keys")});
    api.patch("two", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let status_hosts = support::wait_for("status.hosts to list host1 only", WAIT, || async {
        let object = api.get("two").await.map_err(|e| e.to_string())?;
        let status_hosts = object.data["status"]["hosts"].clone();
        let ok =
            status_hosts.as_object().is_some_and(|h| h.len() == 1) && status_hosts["host1"]["changed"] == 0;
        Ok(if ok { Ok(status_hosts) } else { Err(format!("status {}", object.data["status"])) })
    })
    .await;
    assert_eq!(status_hosts["host1"], json!({"ok": 2, "changed": 0, "failed": 0, "unreachable": 0}));
    assert_key_nowhere(&mut setup, &key).await;
}

#[tokio::test]
async fn a_key_the_hosts_do_not_accept_fails_the_run_naming_each_host() {
    let mut setup = setup("ssh-wrong-key", &["Marker"], &watch("Marker", "")).await;
    let (ns, all) = (&setup.ns.name, hosts::hosts());
    let stranger = hosts::stranger_key(&setup.operator.dir);
    hosts::create_ssh_secret(&setup.client, ns, "stranger", &stranger, Some(&hosts::known_hosts())).await;
    let api = support::cr_api(&setup.client, GROUP, "Marker", ns);

    support::create_cr(&api, GROUP, "Marker", "denied", spec(&[&all[0], &all[1]], "stranger")).await;
    let (_, message) = wait_for_failure(&api, "denied", "Failed").await;
    for host in ["host1", "host2"] {
        assert!(message.contains(&format!("host {host} unreachable")), "{message}");
    }
    assert!(message.contains("Permission denied"), "{message}");
    let object = api.get("denied").await.unwrap();
    assert_eq!(object.data["status"]["hosts"]["host1"]["unreachable"], 1, "{}", object.data["status"]);
    assert!(!marker(&all[0], ns, "denied").exists());
    assert_key_nowhere(&mut setup, &stranger).await;
}

#[tokio::test]
async fn unknown_host_keys_fail_under_the_strict_policy_and_are_learned_with_accept_new() {
    let watches = format!("{}{}", watch("Marker", ""), watch("Learner", "  hostKeyChecking: accept-new\n"));
    let setup = setup("ssh-hostkeys", &["Marker", "Learner"], &watches).await;
    let (ns, all) = (&setup.ns.name, hosts::hosts());
    let key = hosts::client_key();
    let only_host4: String = hosts::known_hosts().lines().filter(|l| l.contains(&all[3].address)).collect();
    hosts::create_ssh_secret(&setup.client, ns, "pinned", &key, Some(&only_host4)).await;
    hosts::create_ssh_secret(&setup.client, ns, "bare", &key, None).await;

    let strict = support::cr_api(&setup.client, GROUP, "Marker", ns);
    support::create_cr(&strict, GROUP, "Marker", "strict", spec(&[&all[0]], "pinned")).await;
    let (_, message) = wait_for_failure(&strict, "strict", "Failed").await;
    assert!(message.contains("host host1 unreachable"), "{message}");
    assert!(message.contains("Host key verification failed"), "{message}");
    assert!(!marker(&all[0], ns, "strict").exists());

    let learner = support::cr_api(&setup.client, GROUP, "Learner", ns);
    support::create_cr(&learner, GROUP, "Learner", "first-use", spec(&[&all[0]], "bare")).await;
    support::wait_for_condition(&learner, "first-use", "Successful", "True", WAIT).await;
    let learned = setup.operator.runner_dir(GROUP, "Learner", ns, "first-use").join("ssh/known_hosts");
    let learned = std::fs::read_to_string(learned).unwrap();
    let host1_key = hosts::known_hosts().lines().find(|l| l.contains(&all[0].address)).unwrap().to_string();
    let key_part = host1_key.split_whitespace().nth(2).unwrap();
    assert!(learned.contains(key_part), "accept-new remembers host1's key: {learned}");
}

#[tokio::test]
async fn a_failing_precheck_keeps_the_main_playbook_from_running() {
    let watches = watch("Checked", "  precheck: {fixtures}/playbooks/ssh_precheck.yml\n");
    let setup = setup("ssh-precheck", &["Checked"], &watches).await;
    let (ns, all) = (&setup.ns.name, hosts::hosts());
    hosts::create_ssh_secret(&setup.client, ns, "keys", &hosts::client_key(), Some(&hosts::known_hosts()))
        .await;
    let api = support::cr_api(&setup.client, GROUP, "Checked", ns);

    let mut cr_spec = spec(&[&all[0], &all[1]], "keys");
    cr_spec["ready"] = json!(false);
    support::create_cr(&api, GROUP, "Checked", "gated", cr_spec).await;
    let (_, message) = wait_for_failure(&api, "gated", "PrecheckFailed").await;
    for host in ["host1", "host2"] {
        assert!(
            message.contains(&format!(
                "precheck failed on host {host}: task \"Check the host is ready\": {host} is not ready"
            )),
            "{message}"
        );
        assert!(!marker(&all[0], ns, "gated").exists(), "the main playbook did not run");
    }
    let object = api.get("gated").await.unwrap();
    assert_eq!(object.data["status"]["hosts"]["host2"]["failed"], 1, "{}", object.data["status"]);
    assert!(!all[0].file("markers").join(format!("{ns}-gated")).exists());

    let patch = json!({"spec": {"ready": true}});
    api.patch("gated", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    support::wait_for_condition(&api, "gated", "Successful", "True", WAIT).await;
    assert!(marker(&all[0], ns, "gated").exists() && marker(&all[1], ns, "gated").exists());
}

#[tokio::test]
async fn a_missing_secret_a_wrong_secret_and_a_bad_inventory_say_which() {
    let setup = setup("ssh-setup-errors", &["Marker"], &watch("Marker", "")).await;
    let (ns, all) = (&setup.ns.name, hosts::hosts());
    let api = support::cr_api(&setup.client, GROUP, "Marker", ns);
    let secrets: Api<Secret> = Api::namespaced(setup.client.clone(), ns);
    let opaque: Secret = serde_json::from_value(json!({
        "metadata": {"name": "opaque", "annotations": {hosts::ALLOW_KINDS: "*"}},
        "type": "Opaque", "stringData": {"id_rsa": "x"}
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &opaque).await.unwrap();

    support::create_cr(&api, GROUP, "Marker", "later", spec(&[&all[0]], "later-keys")).await;
    support::create_cr(&api, GROUP, "Marker", "opaque", spec(&[&all[0]], "opaque")).await;
    support::create_cr(&api, GROUP, "Marker", "nohosts", json!({"keySecret": "later-keys"})).await;

    let (_, message) = wait_for_failure(&api, "later", "SSHKeySecretNotFound").await;
    assert_eq!(message, format!("sshKeySecret: Secret {ns}/later-keys not found"));
    let (_, message) = wait_for_failure(&api, "opaque", "SSHKeySecretInvalid").await;
    assert_eq!(
        message,
        format!("sshKeySecret: Secret {ns}/opaque has type \"Opaque\", not \"kubernetes.io/ssh-auth\"")
    );
    let (_, message) = wait_for_failure(&api, "nohosts", "InventoryError").await;
    assert!(message.starts_with("inventory: template line 3: undefined value"), "{message}");

    // The Secret appears: the retry picks it up without a change to the CR.
    hosts::create_ssh_secret(
        &setup.client,
        ns,
        "later-keys",
        &hosts::client_key(),
        Some(&hosts::known_hosts()),
    )
    .await;
    support::wait_for_condition(&api, "later", "Successful", "True", WAIT).await;
    assert!(marker(&all[0], ns, "later").exists());
}

/// Processes of SSH whose command line names a control socket of run `ident` (a master renames
/// itself `ssh: <control path> [mux]`; a client carries `ControlPath=<control path>`).
fn ssh_processes_of_run(ident: &str) -> Vec<u32> {
    let control = format!("{}/", std::env::temp_dir().join(format!("ao-ssh-{ident}")).display());
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let cmdline =
                String::from_utf8_lossy(&std::fs::read(entry.path().join("cmdline")).ok()?).into_owned();
            let program = cmdline.split(['\0', ' ']).next().unwrap_or_default();
            let is_ssh = program.rsplit('/').next().is_some_and(|name| name.starts_with("ssh"));
            (is_ssh && cmdline.contains(&control)).then_some(pid)
        })
        .collect()
}

/// The CR's first run: its oldest artifact directory.
fn first_run(runner: &Path) -> Option<String> {
    let entries = std::fs::read_dir(runner.join("artifacts")).ok()?;
    let mut runs: Vec<(std::time::SystemTime, String)> = entries
        .flatten()
        .filter(|entry| entry.file_name() != "latest")
        .filter_map(|entry| {
            Some((entry.metadata().ok()?.modified().ok()?, entry.file_name().into_string().ok()?))
        })
        .collect();
    runs.sort();
    runs.into_iter().next().map(|(_, ident)| ident)
}

#[tokio::test]
async fn a_timed_out_ssh_run_closes_its_master_connections_at_once() {
    let watches = format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: Hanger\n  playbook: {{fixtures}}/playbooks/ssh_hang.yml\n  runTimeout: 20s\n{INVENTORY}"
    );
    let setup = setup("ssh-timeout", &["Hanger"], &watches).await;
    let (ns, all) = (&setup.ns.name, hosts::hosts());
    hosts::create_ssh_secret(&setup.client, ns, "keys", &hosts::client_key(), Some(&hosts::known_hosts()))
        .await;
    let api = support::cr_api(&setup.client, GROUP, "Hanger", ns);
    let runner = setup.operator.runner_dir(GROUP, "Hanger", ns, "stuck");

    support::create_cr(&api, GROUP, "Hanger", "stuck", spec(&[&all[0], &all[1]], "keys")).await;
    let ident = support::wait_for("the first run to start", WAIT, || async {
        Ok(first_run(&runner).ok_or_else(|| "no run yet".to_string()))
    })
    .await;
    let masters = support::wait_for("the run's ssh connections to be up", WAIT, || async {
        let found = ssh_processes_of_run(&ident);
        Ok(if found.is_empty() { Err("no ssh process yet".into()) } else { Ok(found) })
    })
    .await;

    let (_, message) = wait_for_failure(&api, "stuck", "RunTimedOut").await;
    assert_eq!(message, "run timed out after 20s while running task \"hang on the host\"");
    support::wait_for("the timed-out run's ssh processes to end", Duration::from_secs(5), || async {
        let left = ssh_processes_of_run(&ident);
        Ok(if left.is_empty() { Ok(()) } else { Err(format!("{left:?} left of {masters:?}")) })
    })
    .await;
    assert!(!std::env::temp_dir().join(format!("ao-ssh-{ident}")).exists(), "control directory removed");
}
