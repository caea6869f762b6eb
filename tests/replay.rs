//! `ansible-operator replay` against the real API server and real Ansible: a CR's run rebuilt as
//! the operator composed it (the same extra vars, unsafe wrapping included, no token), run once with
//! the user's kubeconfig, an older recorded run's spec, and the API's copy of the same files.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use support::api::{ApiServer, service_account};
use support::operator::{Operator, OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "replay.test.example.com";
const KIND: &str = "Replayed";
const PLURAL: &str = "replayeds";
const WAIT: Duration = Duration::from_secs(180);
/// A CR string holding a template: it reaches the playbook as unsafe text, so it stays literal.
const MESSAGE: &str = "{{ 7 * 6 }}";

/// `ansible-operator replay` in the operator's directory (its watches.yaml), with the test cluster's
/// kubeconfig and the project's venv.
fn replay(operator: &Operator, args: &[&str]) -> Output {
    support::operator::command(&operator.dir).arg("replay").args(args).output().expect("run replay")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("JSON")
}

/// Every file of an input directory, by relative path (its artifacts left out).
fn tree(dir: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    support::read_tree(dir, &mut files);
    let prefix = format!("{}/", dir.display());
    files
        .into_iter()
        .map(|(path, text)| (path.strip_prefix(&prefix).unwrap_or(&path).to_string(), text))
        .filter(|(path, _)| !path.starts_with("artifacts"))
        .collect()
}

/// What the run of generation `generation` saw, from its ConfigMap.
async fn seen(client: &kube::Client, namespace: &str, name: &str, generation: i64) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    support::wait_for("the run's ConfigMap", WAIT, || async {
        let found = api.get_opt(&format!("{name}-seen-{generation}")).await.map_err(|e| e.to_string())?;
        Ok(found.ok_or_else(|| "not yet".to_string()))
    })
    .await
}

fn data<'a>(config_map: &'a ConfigMap, key: &str) -> &'a str {
    config_map.data.as_ref().and_then(|d| d.get(key)).map(String::as_str).unwrap_or_default()
}

#[tokio::test]
async fn a_replay_writes_the_runs_inputs_without_a_token_runs_them_and_rebuilds_an_older_run() {
    let Test { client, ns, api } = Test::setup("replay").kind(GROUP, KIND).run_records().build().await;
    let port = support::free_port();
    let watches = support::playbook_watch(GROUP, KIND, "replay.yml");
    let operator = OperatorConfig::new(&watches, &ns.name)
        .arg(format!("--api-bind-address=127.0.0.1:{port}"))
        .arg("--record-run-inputs")
        .start();
    let name = "cache";
    support::create_cr(&api, GROUP, KIND, name, json!({"size": 1, "message": MESSAGE})).await;
    support::wait_for_generation(&api, name, 1, WAIT).await;
    let first_seen = seen(&client, &ns.name, name, 1).await;
    let patch = json!({"spec": {"size": 2}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("change the spec");
    support::wait_for_generation(&api, name, 2, WAIT).await;
    let second_seen = seen(&client, &ns.name, name, 2).await;
    let target = format!("{}/{name}", ns.name);
    let var = "_replay_test_example_com_replayed";

    // The CR as it is now: the extra vars the latest run used, unsafe wrapping included.
    let out = scratch_dir("replay-now");
    let dir = out.join("inputs");
    let output = replay(&operator, &[&target, "--output", dir.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    let printed = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(printed.contains(&format!("ansible-runner run {}", dir.display())), "{printed}");
    let extra_vars = read_json(&dir.join("env/extravars"));
    assert_eq!(extra_vars["size"].to_string(), data(&second_seen, "size"));
    assert_eq!(extra_vars["message"], json!({"__ansible_unsafe": MESSAGE}), "CR templates stay unsafe");
    assert_eq!(data(&second_seen, "message"), MESSAGE, "and the run saw them literally");
    let spec: Value = serde_json::from_str(data(&second_seen, "spec")).unwrap();
    assert_eq!(extra_vars[format!("{var}_spec")]["size"], spec["size"]);
    let unsafe_text = |text: &str| json!({"__ansible_unsafe": text});
    assert_eq!(
        extra_vars["ansible_operator_meta"],
        json!({"name": unsafe_text(name), "namespace": unsafe_text(&ns.name)}),
        "the CR's name and namespace are its author's strings too"
    );
    let files = tree(&dir);
    let names: Vec<&str> = files.iter().map(|(path, _)| path.as_str()).collect();
    assert!(names.contains(&"inventory/hosts"), "{names:?}");
    for (path, text) in &files {
        assert!(!text.contains("token") && !text.contains("KUBECONFIG"), "{path} holds a credential: {text}");
    }
    assert!(!dir.join("kubeconfig").exists());

    // Run once with the user's kubeconfig: the play, printed as ansible-playbook prints it.
    let output = replay(&operator, &[&target, "--output", dir.to_str().unwrap(), "--execute"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", text(&output));
    assert!(stdout.contains("PLAY RECAP") && stdout.contains("note what this run saw"), "{stdout}");
    let again = seen(&client, &ns.name, name, 2).await;
    assert_eq!(data(&again, "message"), MESSAGE, "the replay kept the CR's template unsafe too");

    // An older recorded run: that run's spec, and the CR exactly as it saw it.
    let runs = support::kubectl_ok(["-n", &ns.name, "get", "ansibleruns", "-o", "json"]);
    let runs: Value = serde_json::from_str(&runs).unwrap();
    let first = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["spec"]["owner"]["generation"] == 1)
        .expect("the first run's record")
        .clone();
    let ident = first["spec"]["ident"].as_str().unwrap();
    let old = out.join("first");
    let output = replay(&operator, &[&target, "--run", ident, "--output", old.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    let old_vars = read_json(&old.join("env/extravars"));
    assert_eq!(old_vars["size"].to_string(), data(&first_seen, "size"));
    assert_eq!(old_vars["size"], 1);
    assert_eq!(old_vars[var]["metadata"]["generation"], 1);
    assert_eq!(old_vars[var]["spec"]["message"], json!({"__ansible_unsafe": MESSAGE}));

    // The API's copy: the same files, for a reader of the CR.
    let token = service_account(&ns.name, "reader", "get,list", &format!("{PLURAL}.{GROUP}"));
    let server = ApiServer::localhost(port, None);
    server.wait_until_up(WAIT);
    let record = first["metadata"]["name"].as_str().unwrap();
    let path = format!("/api/v1/kinds/{GROUP}/{PLURAL}/crs/{}/{name}/runs/{record}/inputs", ns.name);
    let bundle = server.get_ok(&path, &token);
    let served: Value = serde_json::from_str(bundle["files"]["env/extravars"].as_str().unwrap()).unwrap();
    assert_eq!(served, old_vars, "the API serves the files replay --run writes");
    assert!(bundle["command"].as_str().unwrap().starts_with("ansible-runner run "), "{bundle}");
    assert_eq!(server.request("GET", &path, None).status, 401);
    drop(operator);
    drop(ns);
    drop(client);
}
