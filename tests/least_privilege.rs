//! Least privilege (README "Least privilege"), against the real API server and real Ansible: a
//! kind's runs do what its `permissions` declare and nothing else, the refusal naming the request
//! and the rule to declare; with `--kind-identities` the API server itself sees each kind's runs as
//! the kind's own ServiceAccount, and refuses what that account was not granted.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::TestNamespace;
use support::operator::OperatorConfig;
use support::setup::Test;

const WAIT: Duration = Duration::from_secs(180);

/// The test kind's watch: its playbook, with `permissions` when given.
fn watch(group: &str, kind: &str, permissions: &str) -> String {
    format!("{}{permissions}", support::playbook_watch(group, kind, "least_privilege.yml"))
}

/// Whether a ConfigMap or Secret exists.
fn exists(namespace: &str, resource: &str, name: &str) -> bool {
    support::kubectl(["-n", namespace, "get", resource, name]).status.success()
}

#[tokio::test]
async fn a_kind_does_what_its_permissions_declare_and_a_request_outside_them_fails_its_cr_by_name() {
    const GROUP: &str = "declared.test.example.com";
    const KIND: &str = "Declared";
    let Test { client, ns, api: crs } = Test::setup("least-privilege").kind(GROUP, KIND).build().await;
    let other = TestNamespace::new(&client, "least-privilege-other").await;
    let permissions =
        "  permissions:\n    - {apiGroups: [\"\"], resources: [configmaps], verbs: [get, create, patch]}\n";
    let operator = OperatorConfig::new(&watch(GROUP, KIND, permissions), &ns.name).start();

    // Within the declared rules: the ConfigMap is written, the CR succeeds.
    support::create_cr(&crs, GROUP, KIND, "within", json!({"attempt": "none"})).await;
    support::wait_for_condition(&crs, "within", "Successful", "True", WAIT).await;
    assert!(exists(&ns.name, "configmap", "within-declared"));

    // Outside them, one way each: another namespace, another resource, a verb not granted.
    let other_namespace = other.name.clone();
    let attempts = [
        ("namespace", format!("get configmaps \"namespace-elsewhere\" in namespace \"{other_namespace}\"")),
        ("resource", format!("get secrets \"resource-secret\" in namespace \"{}\"", ns.name)),
        ("verb", format!("delete configmaps \"verb-declared\" in namespace \"{}\"", ns.name)),
    ];
    for (attempt, _) in &attempts {
        let spec = json!({"attempt": attempt, "otherNamespace": other_namespace});
        support::create_cr(&crs, GROUP, KIND, attempt, spec).await;
    }
    for (attempt, request) in &attempts {
        let cr = support::wait_for_condition(&crs, attempt, "Failure", "True", WAIT).await;
        let failure =
            support::condition(&cr, "Failure").unwrap()["message"].as_str().unwrap_or_default().to_string();
        // The message passes through the module's repr of the API's answer: quotes may be escaped.
        let plain = failure.replace('\\', "");
        assert!(plain.contains(&format!("do not allow {request}")), "{attempt}: {failure}");
        assert!(plain.contains("to allow it, declare in its permissions:"), "{attempt}: {failure}");
        // The declared write went through before it.
        assert!(exists(&ns.name, "configmap", &format!("{attempt}-declared")), "{attempt}");
        let log = operator.log();
        let said = log.lines().any(|line| {
            line.contains("refused a run's request: its watch's permissions do not allow it")
                && line.replace('\\', "").contains(request.as_str())
        });
        assert!(said, "the operator's log names the refused request of {attempt}:\n{log}");
    }
    // The API server shows nothing of what was refused.
    assert!(!exists(&other_namespace, "configmap", "namespace-elsewhere"));
    assert!(!exists(&ns.name, "secret", "resource-secret"));
    assert!(exists(&ns.name, "configmap", "verb-declared"), "the undeclared delete deleted it");
}

#[tokio::test]
async fn with_kind_identities_the_api_server_sees_the_kinds_own_account_and_refuses_what_it_lacks() {
    const GROUP: &str = "identity.test.example.com";
    const KIND: &str = "Identified";
    let Test { client, ns, api: crs } = Test::setup("kind-identity").kind(GROUP, KIND).build().await;
    let other = TestNamespace::new(&client, "kind-identity-other").await;
    // The kind's account, in the operator's namespace (out of a cluster, the first one watched),
    // may write ConfigMaps in the CR's namespace only.
    let account = format!("run-{}.{GROUP}", KIND.to_lowercase());
    let user = format!("system:serviceaccount:{}:{account}", ns.name);
    let create = PostParams::default();
    let service_account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": account}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), &ns.name)
        .create(&create, &service_account)
        .await
        .unwrap();
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "configmaps"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}],
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), &ns.name).create(&create, &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "configmaps"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmaps"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns.name}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), &ns.name).create(&create, &binding).await.unwrap();

    // What the API server's RBAC says of that account.
    let may = |namespace: &str| {
        let review: SubjectAccessReview = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.clone()),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{}", ns.name),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_string()),
                    verb: Some("create".into()),
                    resource: Some("configmaps".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = Api::<SubjectAccessReview>::all(client.clone());
        async move { api.create(&PostParams::default(), &review).await.unwrap().status.unwrap().allowed }
    };
    // The API server's authorizer learns of a new binding from its own watch, a moment later.
    support::wait_for("the account's binding to take effect", WAIT, || async {
        Ok(if may(&ns.name).await { Ok(()) } else { Err("not allowed yet".to_string()) })
    })
    .await;
    assert!(!may(&other.name).await);

    // No permissions key: the proxy lets the requests through, the API server decides as the kind.
    let operator = OperatorConfig::new(&watch(GROUP, KIND, ""), &ns.name).arg("--kind-identities").start();
    support::create_cr(&crs, GROUP, KIND, "within", json!({"attempt": "none"})).await;
    support::wait_for_condition(&crs, "within", "Successful", "True", WAIT).await;
    assert!(exists(&ns.name, "configmap", "within-declared"));

    let spec = json!({"attempt": "namespace", "otherNamespace": other.name});
    support::create_cr(&crs, GROUP, KIND, "elsewhere", spec).await;
    let cr = support::wait_for_condition(&crs, "elsewhere", "Failure", "True", WAIT).await;
    let failure =
        support::condition(&cr, "Failure").unwrap()["message"].as_str().unwrap_or_default().replace('\\', "");
    assert!(failure.contains(&format!("User \"{user}\" cannot get resource \"configmaps\"")), "{failure}");
    assert!(failure.contains(&format!("in the namespace \"{}\"", other.name)), "{failure}");
    assert!(!exists(&other.name, "configmap", "elsewhere-elsewhere"));
    assert!(operator.log().contains(&user), "the start names the kind's identity:\n{}", operator.log());
}
