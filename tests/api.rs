//! The HTTPS API against the real API server and real Ansible, with real ServiceAccount tokens: no
//! token 401, another namespace or a reconcile without `patch` 403, the right data otherwise; a
//! run's log needs `get` on `<plural>/log` besides `get` on the CR; a running playbook's log arrives
//! live before the run ends; a reconcile request starts a run whose record says who asked.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::api::{ApiServer, certificate, grant_log_reading, service_account};
use support::operator::{Operator, OperatorConfig};
use support::setup::Test;

const GROUP: &str = "api.test.example.com";
const KIND: &str = "Served";
const PLURAL: &str = "serveds";
const WAIT: Duration = Duration::from_secs(180);

/// An operator on the api.yml playbook with its API on a free port.
fn operator(namespaces: &str, cert_dir: Option<&std::path::Path>) -> (Operator, ApiServer) {
    let port = support::free_port();
    let mut config =
        OperatorConfig::new(WATCHES.as_str(), namespaces).arg(format!("--api-bind-address=127.0.0.1:{port}"));
    let mut cacert = None;
    if let Some(dir) = cert_dir {
        cacert = Some(certificate(dir));
        config = config.arg(format!("--api-cert-dir={}", dir.display()));
    }
    let operator = config.start();
    let api = ApiServer::localhost(port, cacert);
    api.wait_until_up(WAIT);
    (operator, api)
}

static WATCHES: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| support::playbook_watch(GROUP, KIND, "api.yml"));

fn cr_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/kinds/{GROUP}/{PLURAL}/crs/{namespace}/{name}")
}

/// Waits until the CR's detail (read with `token`) passes `check`.
async fn wait_detail(
    api: &ApiServer,
    path: &str,
    token: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    support::wait_for(what, WAIT, || async {
        let detail = api.get_ok(path, token);
        Ok(if check(&detail) { Ok(detail) } else { Err(format!("detail: {detail}")) })
    })
    .await
}

/// Waits until the CR has succeeded and its run is recorded; its detail.
async fn wait_recorded_success(api: &ApiServer, path: &str, token: &str) -> Value {
    wait_detail(api, path, token, "a recorded run", |d| {
        d["runs"].as_array().is_some_and(|runs| !runs.is_empty()) && d["state"] == "Successful"
    })
    .await
}

#[tokio::test]
async fn the_api_answers_as_far_as_the_tokens_rbac_goes() {
    let Test { client, ns: mine, api: crs } =
        Test::setup("api-mine").kind(GROUP, KIND).run_records().build().await;
    let other = support::TestNamespace::new(&client, "api-other").await;
    let resource = format!("{PLURAL}.{GROUP}");
    let reader = service_account(&mine.name, "reader", "get,list", &resource);
    let operator_user = service_account(&mine.name, "operator-user", "get,list,patch", &resource);
    grant_log_reading(&mine.name, "reader", &resource);
    let cert_dir = support::operator::scratch_dir("api-cert");
    let (_operator, api) = operator(&format!("{},{}", mine.name, other.name), Some(&cert_dir));

    support::create_cr(&crs, GROUP, KIND, "mine", json!({"pause": 0})).await;
    let theirs = support::cr_api(&client, GROUP, KIND, &other.name);
    support::create_cr(&theirs, GROUP, KIND, "theirs", json!({"pause": 0})).await;
    let mine_path = cr_path(&mine.name, "mine");
    let detail = wait_recorded_success(&api, &mine_path, &reader).await;

    // Without a token, or with one the API server rejects: 401 with a JSON body.
    let anonymous = api.request("GET", "/api/v1/kinds", None);
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    assert_eq!(anonymous.body["code"], 401);
    assert_eq!(anonymous.body["reason"], "Unauthorized");
    assert_eq!(api.request("GET", &mine_path, Some("not-a-token")).status, 401);

    // The reader sees its namespace, and only that.
    let kinds = api.get_ok("/api/v1/kinds", &reader);
    assert!(
        kinds["kinds"].as_array().unwrap().iter().any(|k| k["kind"] == KIND && k["plural"] == PLURAL),
        "{kinds}"
    );
    assert_eq!(kinds["history"], json!({"stored": "cluster"}), "the AnsibleRun CRD is installed");
    let listed = api.get_ok(&format!("/api/v1/kinds/{GROUP}/{PLURAL}/crs?namespace={}", mine.name), &reader);
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(items[0]["name"], "mine");
    assert_eq!(items[0]["state"], "Successful");
    assert_eq!(items[0]["lastRun"]["trigger"]["reason"], "Created");
    for forbidden in [
        format!("/api/v1/kinds/{GROUP}/{PLURAL}/crs"),
        format!("/api/v1/kinds/{GROUP}/{PLURAL}/crs?namespace={}", other.name),
        cr_path(&other.name, "theirs"),
    ] {
        let reply = api.request("GET", &forbidden, Some(&reader));
        assert_eq!(reply.status, 403, "GET {forbidden}: {}", reply.body);
        assert!(reply.body["message"].as_str().unwrap().contains("system:serviceaccount:"), "{}", reply.body);
    }

    // One CR: its conditions and runs; one run: its tasks; its log from the artifacts.
    assert_eq!(detail["name"], "mine");
    assert!(detail["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Successful"), "{detail}");
    let run_name = detail["runs"][0]["name"].as_str().unwrap().to_string();
    let run = api.get_ok(&format!("{mine_path}/runs/{run_name}"), &reader);
    let tasks: Vec<&str> =
        run["tasks"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(tasks, ["say hello", "wait a moment", "say goodbye"]);
    assert!(run["tasks"][0]["durationSeconds"].is_number());
    assert_eq!(run["result"], "Successful");
    assert!(run.get("log").is_none(), "no file paths: {run}");
    let log = api.request("GET", &format!("{mine_path}/runs/{run_name}/log"), Some(&reader));
    assert_eq!(log.status, 200);
    let text = log.body.as_str().unwrap();
    assert!(text.contains("TASK [say hello]") && text.contains("first line of mine"), "{text}");
    assert!(!text.contains("\"uuid\""), "the log is what Ansible printed, not its events: {text}");
    assert_eq!(api.request("GET", &format!("{mine_path}/runs/nope"), Some(&reader)).status, 404);

    // A reconcile needs patch; with it, the run happens and its record says who asked.
    let denied = api.request("POST", &format!("{mine_path}/reconcile"), Some(&reader));
    assert_eq!(denied.status, 403, "{}", denied.body);
    let accepted = api.request("POST", &format!("{mine_path}/reconcile"), Some(&operator_user));
    assert_eq!(accepted.status, 202, "{}", accepted.body);
    let who = format!("system:serviceaccount:{}:operator-user", mine.name);
    assert_eq!(accepted.body["by"], who.as_str());
    let detail = wait_detail(&api, &mine_path, &reader, "the requested run", |d| {
        d["runs"][0]["trigger"]["reason"] == "Manual"
    })
    .await;
    assert_eq!(detail["runs"][0]["trigger"]["by"], who.as_str());
}

#[tokio::test]
async fn a_running_playbooks_log_arrives_live_before_the_run_ends() {
    let Test { client: _, ns, api: crs } =
        Test::setup("api-live").kind(GROUP, KIND).run_records().build().await;
    let token = service_account(&ns.name, "watcher", "get,list", &format!("{PLURAL}.{GROUP}"));
    grant_log_reading(&ns.name, "watcher", &format!("{PLURAL}.{GROUP}"));
    let (_operator, api) = operator(&ns.name, None);
    support::create_cr(&crs, GROUP, KIND, "slow", json!({"pause": 8})).await;
    let path = cr_path(&ns.name, "slow");

    let detail =
        wait_detail(&api, &path, &token, "the run in flight", |d| d["inFlight"]["ident"].is_string()).await;
    assert_eq!(detail["state"], "Running");
    let ident = detail["inFlight"]["ident"].as_str().unwrap().to_string();
    let stream = api.follow(&format!("{path}/runs/{ident}/log"), &token);

    let mut first = None;
    let deadline = Instant::now() + WAIT;
    let ended = loop {
        let (kind, data, at) = stream
            .events
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the log stream ended early or stalled");
        if kind == "line" && data.contains("first line of slow") && first.is_none() {
            first = Some(at);
            let now = api.get_ok(&path, &token);
            assert_eq!(now["inFlight"]["ident"], ident.as_str(), "the run is still in flight: {now}");
        }
        if kind == "line" && data.contains("last line of slow") {
            assert!(first.is_some(), "the first line came first");
        }
        if kind == "end" {
            break at;
        }
    };
    let first = first.expect("the first line arrived");
    assert!(
        ended.duration_since(first) >= Duration::from_secs(5),
        "the first line came {:?} before the end: it was streamed, not replayed",
        ended.duration_since(first)
    );

    // Afterwards the record is there, and its log comes from the artifacts.
    let detail =
        wait_detail(&api, &path, &token, "the record", |d| d["runs"][0]["ident"] == ident.as_str()).await;
    let name = detail["runs"][0]["name"].as_str().unwrap();
    let log = api.request("GET", &format!("{path}/runs/{name}/log"), Some(&token));
    let text = log.body.as_str().unwrap_or_default();
    assert!(text.contains("first line of slow") && text.contains("last line of slow"), "{text}");
}

#[tokio::test]
async fn a_runs_log_needs_get_on_the_log_subresource_while_its_tasks_need_get_on_the_cr() {
    let Test { client: _, ns, api: crs } =
        Test::setup("api-log").kind(GROUP, KIND).run_records().build().await;
    let resource = format!("{PLURAL}.{GROUP}");
    let reader = service_account(&ns.name, "reader", "get,list", &resource);
    let (_operator, api) = operator(&ns.name, None);
    support::create_cr(&crs, GROUP, KIND, "logged", json!({"pause": 0})).await;
    let path = cr_path(&ns.name, "logged");
    let detail = wait_recorded_success(&api, &path, &reader).await;
    let run_name = detail["runs"][0]["name"].as_str().unwrap().to_string();

    // `get` on the CR: its conditions, runs, tasks and times, not the log.
    assert!(detail["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Successful"), "{detail}");
    let run = api.get_ok(&format!("{path}/runs/{run_name}"), &reader);
    assert_eq!(run["tasks"].as_array().map(Vec::len), Some(3), "{run}");
    assert!(run["tasks"][0]["durationSeconds"].is_number(), "{run}");
    let log_path = format!("{path}/runs/{run_name}/log");
    let refused = api.request("GET", &log_path, Some(&reader));
    assert_eq!(refused.status, 403, "{}", refused.body);
    let message = refused.body["message"].as_str().unwrap();
    let expected = format!(
        "system:serviceaccount:{}:reader may not get {resource}/log in namespace {}",
        ns.name, ns.name
    );
    assert_eq!(message, expected);
    assert!(!refused.body.to_string().contains("first line of logged"), "{}", refused.body);

    // A Role granting `get` on `<plural>/log`: the log (once the cached refusal expires, 10 s).
    grant_log_reading(&ns.name, "reader", &resource);
    let text = support::wait_for("the log, once granted", WAIT, || async {
        let reply = api.request("GET", &log_path, Some(&reader));
        Ok(match reply.status {
            200 => Ok(reply.body.as_str().unwrap_or_default().to_string()),
            status => Err(format!("{status}: {}", reply.body)),
        })
    })
    .await;
    assert!(text.contains("TASK [say hello]") && text.contains("first line of logged"), "{text}");
}

/// A record a namespace tenant wrote with an ident the operator never makes (a path, a look-alike)
/// is refused by every per-run route with a clear message, is not listed, and nothing on disk is
/// touched: a canary directory that a traversal ident names survives. The operator's own record
/// of the same run still serves its inputs.
#[tokio::test]
async fn a_record_with_a_foreign_ident_is_refused_by_every_run_route_and_nothing_on_disk_is_touched() {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};

    let Test { client, ns, api: crs } =
        Test::setup("api-ident").kind(GROUP, KIND).run_records().build().await;
    let resource = format!("{PLURAL}.{GROUP}");
    let reader = service_account(&ns.name, "reader", "get,list", &resource);
    grant_log_reading(&ns.name, "reader", &resource);
    let port = support::free_port();
    let _operator = OperatorConfig::new(WATCHES.as_str(), &ns.name)
        .arg(format!("--api-bind-address=127.0.0.1:{port}"))
        .arg("--record-run-inputs")
        .start();
    let api = ApiServer::localhost(port, None);
    api.wait_until_up(WAIT);
    let created = support::create_cr(&crs, GROUP, KIND, "mine", json!({"pause": 0})).await;
    let uid = created.metadata.uid.clone().unwrap();
    let path = cr_path(&ns.name, "mine");
    let detail = wait_recorded_success(&api, &path, &reader).await;
    let own = detail["runs"][0]["name"].as_str().unwrap().to_string();

    // What the old inputs endpoint removed: `<tmp>/ao-ssh-replay-<ident>`, which `<ns>/../<canary>`
    // turns into the canary once `<tmp>/ao-ssh-replay-<ns>` exists.
    let tmp = std::env::temp_dir();
    let canary = tmp.join(format!("ao-canary-{}", ns.name));
    std::fs::create_dir_all(&canary).unwrap();
    std::fs::write(canary.join("keep"), "still here").unwrap();
    let stepping_stone = tmp.join(format!("ao-ssh-replay-{}", ns.name));
    std::fs::create_dir_all(&stepping_stone).unwrap();

    let gvk = GroupVersionKind::gvk("ansible-operator.dev", "v1alpha1", "AnsibleRun");
    let records: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "ansibleruns"),
    );
    let selector = format!("ansible-operator.dev/owner-uid={uid}");
    let real = records.list(&ListParams::default().labels(&selector)).await.unwrap().items.remove(0);
    let corpus = [
        format!("{}/../ao-canary-{}", ns.name, ns.name),
        format!("../../../../../..{}", canary.display()),
        canary.display().to_string(),
        "../x".to_string(),
        "0123".to_string(),
        "１２３".to_string(),
        "9".repeat(400),
    ];
    for (at, ident) in corpus.iter().enumerate() {
        let name = format!("mine-forged-{at}");
        let mut forged = real.clone();
        forged.metadata = serde_json::from_value(json!({
            "name": name, "namespace": ns.name, "labels": real.metadata.labels,
        }))
        .unwrap();
        forged.data["spec"]["ident"] = json!(ident);
        forged.data.as_object_mut().unwrap().remove("status");
        records.create(&PostParams::default(), &forged).await.unwrap_or_else(|e| panic!("write {name}: {e}"));
        for route in ["", "/log", "/inputs"] {
            let url = format!("{path}/runs/{name}{route}");
            let reply = api.request("GET", &url, Some(&reader));
            assert_eq!(reply.status, 400, "GET {url} ({ident:?}): {}", reply.body);
            let message = reply.body["message"].as_str().unwrap_or_default();
            assert!(message.contains("ident the operator does not make"), "GET {url}: {message}");
        }
    }
    let listed = api.get_ok(&path, &reader);
    let names: Vec<&str> =
        listed["runs"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    assert!(names.iter().all(|name| !name.contains("forged")), "a forged record is listed: {names:?}");
    assert_eq!(std::fs::read_to_string(canary.join("keep")).unwrap(), "still here", "the canary survives");
    assert!(stepping_stone.exists());

    // The operator's own record still serves its inputs, written in a directory of its own.
    let inputs = api.get_ok(&format!("{path}/runs/{own}/inputs"), &reader);
    assert!(inputs["files"]["env/extravars"].is_string(), "{inputs}");
    assert!(!inputs.to_string().contains("ao-inputs-"), "the private directory is not named: {inputs}");
    let _ = std::fs::remove_dir_all(&canary);
    let _ = std::fs::remove_dir_all(&stepping_stone);
}
