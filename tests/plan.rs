//! A plan of a CR change, through the API against the real API server and real Ansible: a
//! Memcached-like CR converged at size 2, planned at size 3, shows the Deployment's `spec.replicas`
//! 2 → 3 and its `command` task as not checked, while nothing changes (the Deployment keeps 2
//! replicas; tasks that run even in check mode write a ConfigMap and the CR's status only as
//! server-side dry runs; the CR's status, generation and run history stay); a spec that fails a
//! task reports the failure with its message; a caller without `update` on the CR is refused.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use support::api::{ApiServer, service_account};
use support::operator::OperatorConfig;
use support::setup::Test;

const GROUP: &str = "plan.test.example.com";
const KIND: &str = "Planned";
const PLURAL: &str = "planneds";
const WAIT: Duration = Duration::from_secs(180);

fn task<'p>(plan: &'p Value, name: &str) -> &'p Value {
    plan["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["name"] == name))
        .unwrap_or_else(|| panic!("no task {name} in the plan: {plan}"))
}

async fn replicas(deployments: &Api<Deployment>, name: &str) -> Option<i32> {
    deployments.get(name).await.expect("read the Deployment").spec.and_then(|s| s.replicas)
}

#[tokio::test]
async fn a_plan_shows_what_a_change_would_do_and_changes_nothing() {
    let Test { client, ns, api: crs } = Test::setup("plan").kind(GROUP, KIND).run_records().build().await;
    let resource = format!("{PLURAL}.{GROUP}");
    let updater = service_account(&ns.name, "updater", "get,list,update", &resource);
    let reader = service_account(&ns.name, "reader", "get,list", &resource);
    let port = support::free_port();
    let watches = support::playbook_watch(GROUP, KIND, "plan.yml");
    let operator =
        OperatorConfig::new(&watches, &ns.name).arg(format!("--api-bind-address=127.0.0.1:{port}")).start();
    let api = ApiServer::localhost(port, None);
    api.wait_until_up(WAIT);

    support::create_cr(&crs, GROUP, KIND, "cache", json!({"size": 2})).await;
    support::wait_for_generation(&crs, "cache", 1, WAIT).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    assert_eq!(replicas(&deployments, "cache-app").await, Some(2));
    let cr_path = format!("/api/v1/kinds/{GROUP}/{PLURAL}/crs/{}/cache", ns.name);
    // The deployment controller's first writes to the new Deployment trigger one more run: the CR
    // is settled once its status and run history stay the same for a while.
    let (converged, runs_before) = support::wait_for("the CR to settle", WAIT, || async {
        let snapshot = || async {
            let object = crs.get("cache").await.map_err(|e| e.to_string())?;
            let detail = api.get_ok(&cr_path, &reader);
            Ok::<_, String>((object, detail))
        };
        let (first, detail) = snapshot().await?;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let (second, again) = snapshot().await?;
        let runs = again["runs"].clone();
        // A run admitted but waiting for the run budget has written `Running` without being in
        // flight yet: settled is `Successful` too.
        let successful = support::condition(&second, "Successful").is_some_and(|c| c["status"] == "True");
        let settled = first.data["status"] == second.data["status"]
            && successful
            && detail["runs"] == runs
            && runs.as_array().is_some_and(|r| !r.is_empty())
            && again["inFlight"].is_null();
        Ok(if settled { Ok((second, runs)) } else { Err(format!("still changing: {again}")) })
    })
    .await;

    // The cluster is shared: a test of an older tree may have applied its AnsibleRun CRD since the
    // setup, one without `spec.kind`. This tree's goes back on before the plans are recorded.
    support::install_run_records_crd(&client).await;
    let records = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("ansible-operator.dev", "v1alpha1", "AnsibleRun"),
            "ansibleruns",
        ),
    );
    // Records are written with server-side apply, which refuses a field the schema lacks.
    let probe = json!({"apiVersion": "ansible-operator.dev/v1alpha1", "kind": "AnsibleRun",
                       "metadata": {"name": "schema-probe"}, "spec": {"kind": "Plan"}});
    let dry_run = PatchParams::apply("plan-test").dry_run();
    support::wait_for("the AnsibleRun schema with spec.kind to be served", WAIT, || async {
        let applied = records.patch("schema-probe", &dry_run, &Patch::Apply(&probe)).await;
        Ok(applied.map(|_| ()).map_err(|e| e.to_string()))
    })
    .await;

    // Size 3: the Deployment would go from 2 to 3 replicas; the command cannot be checked.
    let proposed = json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": KIND,
                          "metadata": {"name": "cache", "namespace": ns.name}, "spec": {"size": 3}});
    let reply = api.request_with_body("POST", &format!("{cr_path}/plan"), Some(&updater), Some(&proposed));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let plan = reply.body;
    assert_eq!(plan["result"], "Successful", "{plan}");
    let expected_executor =
        std::env::var("ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR").unwrap_or_else(|_| "warm".to_string());
    assert_eq!(plan["executor"], expected_executor.as_str(), "{plan}");
    let deployment = task(&plan, "apply the deployment");
    assert_eq!(deployment["verdict"], "changed", "{plan}");
    assert_eq!(deployment["object"], format!("Deployment {}/cache-app", ns.name));
    assert!(
        deployment["diff"]
            .as_array()
            .unwrap()
            .contains(&json!({"type": "field", "path": "spec.replicas", "before": 2, "after": 3})),
        "{plan}"
    );
    let command = task(&plan, "note the size");
    assert_eq!(command["verdict"], "notChecked", "{plan}");
    assert_eq!(command["message"], "Command would have run if not in check mode");
    assert_eq!(task(&plan, "refuse more than five")["verdict"], "skipped", "{plan}");
    assert!(plan["record"].is_string(), "the plan is kept: {plan}");

    // Nothing changed: the Deployment, the CR's generation and status, its run history. The tasks
    // that ran despite check mode wrote through the plan-only credential: dry runs only.
    assert_eq!(replicas(&deployments, "cache-app").await, Some(2), "the dry run wrote nothing");
    let config_map = task(&plan, "keep the size in a config map, even in check mode");
    assert!(
        config_map["diff"].as_array().unwrap().contains(
            &json!({"type": "field", "path": "data.size", "before": "2 replicas", "after": "3 replicas"})
        ),
        "the API server's dry-run answer: {plan}"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let kept = config_maps.get("cache-size").await.expect("the run's ConfigMap");
    assert_eq!(kept.data.unwrap_or_default().get("size").map(String::as_str), Some("2 replicas"));
    let after = crs.get("cache").await.expect("read the CR");
    assert_eq!(after.metadata.generation, converged.metadata.generation);
    assert_eq!(after.data["spec"], json!({"size": 2}));
    assert_eq!(after.data["status"], converged.data["status"], "the plan wrote no status");
    assert_eq!(api.get_ok(&cr_path, &reader)["runs"], runs_before, "a plan is not a run of the CR");

    // The same from the command line, printed for people.
    let file = support::operator::scratch_dir("plan-cli").join("cache.yaml");
    std::fs::write(&file, proposed.to_string()).expect("write the proposed CR");
    let output = support::operator::command(&std::env::temp_dir())
        .args(["plan", "-f", file.to_str().unwrap(), "--api", &format!("https://localhost:{port}"), "-k"])
        .args(["--token", &updater])
        .output()
        .expect("run ansible-operator plan");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}{}", String::from_utf8_lossy(&output.stderr));
    assert!(printed.contains("changed      apply the deployment [localhost]"), "{printed}");
    assert!(printed.contains("    spec.replicas: 2 -> 3\n"), "{printed}");
    assert!(printed.contains("not checked  note the size [localhost]"), "{printed}");
    assert_eq!(replicas(&deployments, "cache-app").await, Some(2));

    // Size 9: the size check fails, with its message (through the kubectl-style path).
    let plural_path = format!("/api/v1/namespaces/{}/{PLURAL}/cache/plan", ns.name);
    let reply = api.request_with_body("POST", &plural_path, Some(&updater), Some(&json!({"size": 9})));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let failing = reply.body;
    assert_eq!(failing["result"], "Failure", "{failing}");
    let refused = task(&failing, "refuse more than five");
    assert_eq!(refused["verdict"], "failed", "{failing}");
    assert_eq!(refused["message"], "size 9 is more than 5");
    assert_eq!(replicas(&deployments, "cache-app").await, Some(2));

    // The plans are kept as AnsibleRuns of kind Plan, apart from the runs.
    let plans = support::kubectl_ok([
        "-n",
        &ns.name,
        "get",
        "ansibleruns.ansible-operator.dev",
        "-l",
        "ansible-operator.dev/plan=true",
        "-o",
        "json",
    ]);
    let plans: Value = serde_json::from_str(&plans).expect("kubectl's JSON");
    let kinds: Vec<&Value> = plans["items"].as_array().unwrap().iter().map(|p| &p["spec"]["kind"]).collect();
    assert_eq!(kinds, [&json!("Plan"), &json!("Plan"), &json!("Plan")], "{plans}");

    // Without `update` on the CR: refused.
    let reply = api.request_with_body("POST", &format!("{cr_path}/plan"), Some(&reader), Some(&proposed));
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert!(reply.body["message"].as_str().unwrap().contains("may not update"), "{}", reply.body);
    drop(operator);
}

#[tokio::test]
async fn a_proposal_the_api_server_would_refuse_is_refused_before_any_plan_runs() {
    const SAMPLE_GROUP: &str = "cache.example.com";
    let Test { client: _, ns, api: crs } =
        Test::setup("plan-schema").sample(SAMPLE_GROUP, "Memcached").build().await;
    let updater =
        service_account(&ns.name, "updater", "get,list,update", &format!("memcacheds.{SAMPLE_GROUP}"));
    let port = support::free_port();
    let watches = support::playbook_watch(SAMPLE_GROUP, "Memcached", "marker.yml");
    let operator =
        OperatorConfig::new(&watches, &ns.name).arg(format!("--api-bind-address=127.0.0.1:{port}")).start();
    let api = ApiServer::localhost(port, None);
    api.wait_until_up(WAIT);
    support::create_cr(&crs, SAMPLE_GROUP, "Memcached", "cache", json!({"size": 1})).await;
    support::wait_for_condition(&crs, "cache", "Successful", "True", WAIT).await;

    // The CRD says `size` is an integer of at least 0: the API server would refuse both.
    let cr_path = format!("/api/v1/kinds/{SAMPLE_GROUP}/memcacheds/crs/{}/cache/plan", ns.name);
    for spec in [json!({"size": "three"}), json!({"size": -1})] {
        let reply = api.request_with_body("POST", &cr_path, Some(&updater), Some(&json!({"spec": spec})));
        assert_eq!(reply.status, 422, "{}", reply.body);
        let message = reply.body["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("the API server refused the proposed spec of"), "{message}");
        assert!(message.contains("spec.size"), "{message}");
    }
    assert!(!operator.log().contains("plan asked for"), "a plan ran: {}", operator.log());
}
