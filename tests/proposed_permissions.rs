//! `rbac --from-history` against the real API server and real Ansible: the sample Memcached role's
//! runs are recorded, and the `permissions:` proposed from their records hold what the role wrote,
//! in the CR's own namespace, and nothing the sample's own `permissions:` does not grant it; an
//! operator whose watch carries exactly the proposal converges a CR under the proxy's check.

use crate::support;

use std::path::Path;
use std::time::Duration;

use ansible_operator::rbac::from_history;
use ansible_operator::watches::permissions::{Rule, Scope};
use ansible_operator::watches::{self, Defaults, Environment};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::json;
use support::operator::OperatorConfig;
use support::setup::Test;

const WAIT: Duration = Duration::from_secs(180);
const DEFAULTS: Defaults = Defaults { max_concurrent_reconciles: 1, ansible_verbosity: 2 };
const COMMENT: &str = "# cache.example.com/v1alpha1 Memcached\n";

/// The Memcached watch of the sample's watches.yaml, with `extra` (indented) under it.
fn memcached_watch(extra: &str) -> String {
    let role = support::repo().join("roles/memcached");
    let extra: String = extra.lines().map(|line| format!("  {line}\n")).collect();
    format!(
        "- version: v1alpha1\n  group: cache.example.com\n  kind: Memcached\n  role: {}\n  finalizer:\n    \
         name: cache.example.com/finalizer\n    vars:\n      state: absent\n{extra}",
        role.display()
    )
}

/// The rules a proposal's Memcached snippet reads back as, pasted under the watch.
fn pasted_rules(proposal: &str) -> Vec<Rule> {
    let snippet =
        proposal.split_once(COMMENT).unwrap_or_else(|| panic!("no Memcached snippet:\n{proposal}")).1;
    // Kinds are apart by a blank line.
    let snippet = snippet.split("\n\n").next().unwrap_or_default();
    let text = memcached_watch(snippet);
    let loaded =
        watches::parse(&text, Path::new("watches.yaml"), &DEFAULTS, &Environment::new(support::repo()))
            .unwrap_or_else(|error| panic!("the proposal does not load: {error}\n{text}"));
    loaded.watches[0].extensions.permissions.clone().unwrap_or_else(|| panic!("no permissions:\n{text}"))
}

/// The verbs the sample's own `permissions:` (written by hand in watches.yaml) grant on a group
/// and resource.
fn declared_verbs(declared: &[Rule], group: &str, resource: &str) -> Vec<String> {
    declared
        .iter()
        .filter(|rule| {
            rule.api_groups.iter().any(|g| g == group) && rule.resources.iter().any(|r| r == resource)
        })
        .flat_map(|rule| rule.verbs.clone())
        .collect()
}

#[tokio::test]
async fn memcached_role_runs_propose_its_writes_in_the_crs_own_namespace_and_nothing_wider() {
    let Test { client, ns, api } =
        Test::setup("from-history").sample("cache.example.com", "Memcached").run_records().build().await;
    support::node::require_ready_node(&client).await;
    let operator = OperatorConfig::project(support::repo().to_path_buf(), &ns.name).start();
    let spec = json!({"size": 1, "image": support::node::MEMCACHED_IMAGE});
    let created = support::create_cr(&api, "cache.example.com", "Memcached", "cache", spec.clone()).await;
    support::wait_for_condition(&api, "cache", "Successful", "True", WAIT).await;
    // A spec change: its run patches the children the first one created, as every later run does.
    let change = json!({"spec": {"memoryLimitMb": 32}});
    api.patch("cache", &PatchParams::default(), &Patch::Merge(&change)).await.expect("change the spec");
    support::wait_for_generation(&api, "cache", 2, WAIT).await;

    let uid = created.metadata.uid.clone().expect("a uid");
    let gvk = GroupVersionKind::gvk("ansible-operator.dev", "v1alpha1", "AnsibleRun");
    let runs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "ansibleruns"),
    );
    support::wait_for("records of the runs that created and patched the children", WAIT, || async {
        let params = ListParams::default().labels(&format!("ansible-operator.dev/owner-uid={uid}"));
        let records = runs.list(&params).await.map_err(|e| e.to_string())?;
        let wrote = |verb: &str| {
            records.items.iter().any(|r| {
                r.data["spec"]["objects"].as_array().is_some_and(|o| o.iter().any(|o| o["verb"] == verb))
            })
        };
        let seen = wrote("create") && wrote("patch");
        Ok(if seen { Ok(()) } else { Err(format!("{} records, no create and patch", records.items.len())) })
    })
    .await;

    let watches =
        watches::load(&support::repo().join("watches.yaml"), &DEFAULTS, &Environment::new(support::repo()))
            .expect("the sample's watches load")
            .watches;
    let memcached = watches.iter().find(|w| w.gvk.kind == "Memcached").expect("the sample's Memcached watch");
    let proposal = from_history::propose(&client, &watches, std::slice::from_ref(&ns.name))
        .await
        .expect("a proposal from the records");
    println!("{proposal}");
    assert!(
        proposal.contains("# etcd.example.com/v1alpha1 EtcdBackup\n# no run records"),
        "kinds without runs in the namespace get no rules:\n{proposal}"
    );
    let rules = pasted_rules(&proposal);
    let wrote = |group: &str, resource: &str| {
        rules.iter().any(|rule| {
            rule.api_groups == [group]
                && rule.resources == [resource]
                && rule.scope == Scope::Own
                && rule.verbs.iter().any(|verb| verb == "create")
        })
    };
    assert!(wrote("", "configmaps"), "the ConfigMap the role created:\n{proposal}");
    assert!(wrote("apps", "deployments"), "the Deployment the role created:\n{proposal}");
    for rule in &rules {
        assert_eq!(rule.scope, Scope::Own, "every request was in the CR's namespace:\n{proposal}");
        assert!(rule.resource_names.is_empty(), "{proposal}");
        let (group, resource) = (&rule.api_groups[0], &rule.resources[0]);
        assert!(
            matches!((group.as_str(), resource.as_str()), ("", "configmaps") | ("apps", "deployments")),
            "only the role's children, never its own CR or status:\n{proposal}"
        );
        let declared =
            memcached.extensions.permissions.as_deref().expect("the sample declares its permissions");
        let declared = declared_verbs(declared, group, resource);
        for verb in &rule.verbs {
            assert!(
                declared.contains(verb),
                "{verb} on {resource} is wider than the sample's own permissions in watches.yaml:\n{proposal}"
            );
        }
    }

    // The same kind run by an operator whose watch carries exactly the proposed permissions, which
    // the proxy enforces: the proposal is enough for the role's runs.
    drop(operator);
    let snippet = proposal.split_once(COMMENT).expect("a Memcached snippet").1;
    let snippet = snippet.split("\n\n").next().unwrap_or_default().to_string();
    let watches_yaml = memcached_watch(&snippet);
    let operator = OperatorConfig::new(&watches_yaml, &ns.name).start();
    support::create_cr(&api, "cache.example.com", "Memcached", "cache-2", spec).await;
    support::wait_for_condition(&api, "cache-2", "Successful", "True", WAIT).await;

    // The CRs' finalizer runs would delete the children, which no run of the first operator did
    // (a deleted CR's records go with it): the proposal holds no delete. The finalizers are taken
    // off instead, and the namespace's deletion takes the rest.
    drop(operator);
    let unfinalized = json!({"metadata": {"finalizers": null}});
    for name in ["cache", "cache-2"] {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&unfinalized))
            .await
            .expect("remove finalizer");
    }
}
