//! The manifests under `deploy/` against the real local API server: server-side dry runs of the
//! kustomization, of every manifest file and of the samples; the RBAC applied for real and checked
//! with SubjectAccessReviews (what `kubectl auth can-i --as` asks); the admission policy that keeps the ServiceAccount from minting
//! service-account tokens; the namespaced component; and the sample operator run as the
//! ServiceAccount it grants.
//! Also a static check of the `Dockerfile`; `tests/in_cluster.rs` runs the image it builds.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use support::operator::{OperatorConfig, scratch_dir};
use support::setup::Test;
use support::{describe_output, kubectl, kubectl_ok};

/// The operator's namespace and ServiceAccount, as in deploy/.
const OPERATOR_NAMESPACE: &str = "ansible-operator-system";
const SERVICE_ACCOUNT: &str = "system:serviceaccount:ansible-operator-system:ansible-operator";
/// The groups the API server gives the ServiceAccount's token.
const SERVICE_ACCOUNT_GROUPS: [&str; 3] =
    ["system:serviceaccounts", "system:serviceaccounts:ansible-operator-system", "system:authenticated"];

const WAIT: Duration = Duration::from_secs(180);

/// Tests that create or delete the operator namespace or the RBAC for real take turns.
static CLUSTER_OBJECTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn deploy() -> PathBuf {
    support::repo().join("deploy")
}

/// Manifest files applied for real, deleted again (in reverse order, waiting) when dropped.
/// A file whose object existed before is left alone, so a real installation survives the tests.
#[derive(Default)]
struct RealObjects {
    created: Vec<PathBuf>,
}

impl RealObjects {
    /// Applies each single-object manifest file whose object does not exist yet.
    fn apply(mut self, files: &[PathBuf]) -> Self {
        for file in files {
            let existing = kubectl_ok([
                "get".as_ref(),
                "--ignore-not-found".as_ref(),
                "-o".as_ref(),
                "name".as_ref(),
                "-f".as_ref(),
                file.as_os_str(),
            ]);
            if existing.trim().is_empty() {
                kubectl_ok(["apply".as_ref(), "-f".as_ref(), file.as_os_str()]);
                self.created.push(file.clone());
            }
        }
        self
    }
}

impl Drop for RealObjects {
    fn drop(&mut self) {
        for file in self.created.iter().rev() {
            let _ =
                kubectl(["delete".as_ref(), "--ignore-not-found".as_ref(), "-f".as_ref(), file.as_os_str()]);
        }
    }
}

/// The operator's Namespace, so that namespaced objects in it can be dry-run.
fn operator_namespace() -> RealObjects {
    RealObjects::default().apply(&[deploy().join("namespace.yaml")])
}

/// The files a kustomization lists, in its order.
fn kustomization_files(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(dir.join("kustomization.yaml")).expect("read kustomization.yaml");
    let kustomization: Value = serde_saphyr::from_str(&text).expect("kustomization.yaml is YAML");
    let resources = kustomization["resources"].as_array().expect("resources");
    resources.iter().map(|file| dir.join(file.as_str().expect("a file name"))).collect()
}

/// The Namespace, the ServiceAccount and the RBAC of deploy/, and the admission policies, in
/// dependency order.
fn operator_rbac() -> RealObjects {
    let mut files = vec![deploy().join("namespace.yaml")];
    files.extend(kustomization_files(&deploy().join("rbac")));
    files.extend(kustomization_files(&deploy().join("policy")));
    RealObjects::default().apply(&files)
}

/// `ansible-operator rbac` on the sample watches (plurals from deploy/crds) into `dir`, with
/// `args`; its stderr.
fn render_rbac(dir: &Path, args: &[&str]) -> String {
    let _ = std::fs::remove_dir_all(dir);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ansible-operator"))
        .current_dir(support::repo())
        .args(["rbac", "--watches-file=watches.yaml", "--crds=deploy/crds"])
        .arg(format!("--output-dir={}", dir.display()))
        .args(args)
        .env_remove("WATCH_NAMESPACE")
        .env_remove("ANSIBLE_OPERATOR_WATCHES_FILE")
        .output()
        .expect("run ansible-operator rbac");
    assert!(output.status.success(), "ansible-operator rbac: {}", describe_output(&output));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The RBAC `ansible-operator rbac --namespace <namespace>` renders for the sample watches, and
/// the admission policies, applied for real: the operator's rights held in that namespace only.
fn rbac_rendered_for(namespace: &str) -> RealObjects {
    let dir = scratch_dir(&format!("{namespace}-rbac"));
    render_rbac(&dir, &[&format!("--namespace={namespace}")]);
    let mut files = vec![deploy().join("namespace.yaml")];
    files.extend(kustomization_files(&dir));
    files.extend(kustomization_files(&deploy().join("policy")));
    RealObjects::default().apply(&files)
}

#[test]
fn deploy_rbac_is_exactly_what_ansible_operator_rbac_renders_from_the_sample_watches() {
    let dir = scratch_dir("rendered-deploy-rbac");
    let stderr = render_rbac(&dir, &[]);
    assert!(!stderr.contains("warning"), "every sample declares its permissions: {stderr}");
    let names = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read the rbac dir")
            .map(|entry| entry.expect("dir entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let shipped = deploy().join("rbac");
    assert_eq!(
        names(&shipped),
        names(&dir),
        "deploy/rbac has other files than the command writes: run `make rbac`"
    );
    for name in names(&dir) {
        let rendered = std::fs::read_to_string(dir.join(&name)).unwrap();
        let there = std::fs::read_to_string(shipped.join(&name)).unwrap();
        assert!(
            rendered == there,
            "deploy/rbac/{name} differs from what `ansible-operator rbac` renders: run `make rbac`"
        );
    }
}

/// `kubectl apply --dry-run=server -k <dir>`, which must succeed and name each of `objects`; its
/// output.
fn dry_run_kustomization(dir: &Path, objects: &[&str]) -> Output {
    let output = kubectl(["apply".as_ref(), "--dry-run=server".as_ref(), "-k".as_ref(), dir.as_os_str()]);
    assert!(
        output.status.success(),
        "kubectl apply --dry-run=server -k {}: {}",
        dir.display(),
        describe_output(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    for object in objects {
        assert!(stdout.contains(object), "{object} missing from the dry run: {}", describe_output(&output));
    }
    output
}

/// Every YAML file below `dir`, sorted, except kustomization files and kustomize components (their
/// files name the scaffold's namespace `system`, which a project's config/default renames).
fn manifest_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read deploy dir") {
        let path = entry.expect("dir entry").path();
        if is_component(&path) {
            continue;
        }
        if path.is_dir() {
            files.extend(manifest_files(&path));
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml")
            && path.file_name().is_some_and(|n| n != "kustomization.yaml")
        {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// Whether `dir` is a kustomize Component.
fn is_component(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("kustomization.yaml")).is_ok_and(|text| text.contains("kind: Component"))
}

#[tokio::test]
async fn kustomization_passes_server_side_dry_run_and_meets_the_restricted_pod_security_standard() {
    let _turn = CLUSTER_OBJECTS.lock().await;
    let _namespace = operator_namespace();

    let output = dry_run_kustomization(
        &deploy(),
        &[
            "namespace/ansible-operator-system",
            "customresourcedefinition.apiextensions.k8s.io/memcacheds.cache.example.com",
            "customresourcedefinition.apiextensions.k8s.io/etcdbackups.etcd.example.com",
            "customresourcedefinition.apiextensions.k8s.io/etcdclusters.etcd.example.com",
            "customresourcedefinition.apiextensions.k8s.io/etcdrestores.etcd.example.com",
            "customresourcedefinition.apiextensions.k8s.io/kubernetesclusters.platform.example.com",
            "serviceaccount/ansible-operator",
            "clusterrole.rbac.authorization.k8s.io/ansible-operator-manager",
            "clusterrolebinding.rbac.authorization.k8s.io/ansible-operator-manager",
            "role.rbac.authorization.k8s.io/ansible-operator-leader-election",
            "rolebinding.rbac.authorization.k8s.io/ansible-operator-leader-election",
            "deployment.apps/ansible-operator-controller-manager",
            "validatingadmissionpolicy.admissionregistration.k8s.io/ansible-operator-no-service-account-tokens",
            "validatingadmissionpolicybinding.admissionregistration.k8s.io/ansible-operator-no-service-account-tokens",
            "validatingadmissionpolicy.admissionregistration.k8s.io/ansible-operator-limits",
            "validatingadmissionpolicybinding.admissionregistration.k8s.io/ansible-operator-limits",
            "clusterrole.rbac.authorization.k8s.io/ansible-operator-run-kubernetescluster.platform.example.com",
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("memcached-sample"), "the samples are not part of the kustomization");
    // The namespace carries pod-security.kubernetes.io/warn=restricted: a violation would be a warning.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("PodSecurity"),
        "the dry run warned about pod security: {}",
        describe_output(&output)
    );
}

#[tokio::test]
async fn sharded_overlay_runs_three_sharding_replicas_under_a_disruption_budget() {
    let _turn = CLUSTER_OBJECTS.lock().await;
    let _rbac = operator_rbac();
    let overlay = deploy().join("sharded");
    let output = dry_run_kustomization(
        &overlay,
        &[
            "deployment.apps/ansible-operator-controller-manager",
            "poddisruptionbudget.policy/ansible-operator-controller-manager",
            "role.rbac.authorization.k8s.io/ansible-operator-leader-election",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("PodSecurity"),
        "the dry run warned about pod security: {}",
        describe_output(&output)
    );

    let rendered = kubectl_ok(["kustomize".as_ref(), overlay.as_os_str()]);
    let deployment = rendered
        .split("\n---\n")
        .find(|doc| doc.contains("kind: Deployment"))
        .expect("the overlay renders the Deployment");
    assert!(deployment.contains("replicas: 3"), "{deployment}");
    assert!(deployment.contains("- --sharding"), "{deployment}");
    assert!(
        deployment.contains("name: POD_NAME") && deployment.contains("fieldPath: metadata.name"),
        "{deployment}"
    );
    assert!(rendered.contains("maxUnavailable: 1"), "{rendered}");

    // What the sharder and the shards do: label the watched kinds, keep their Leases.
    assert!(service_account_can("patch", "memcacheds.cache.example.com", Some("default")).await);
    for verb in ["get", "list", "watch", "create", "update"] {
        assert!(
            service_account_can(verb, "leases.coordination.k8s.io", Some(OPERATOR_NAMESPACE)).await,
            "{verb} leases"
        );
    }
}

#[tokio::test]
async fn every_manifest_file_under_deploy_passes_server_side_dry_run_on_its_own() {
    let _turn = CLUSTER_OBJECTS.lock().await;
    let client = support::client().await;
    support::install_sample_crds(&client).await;
    let _namespace = operator_namespace();

    let files = manifest_files(&deploy());
    assert!(files.len() >= 10, "found only {files:?}");
    for file in &files {
        let output =
            kubectl(["apply".as_ref(), "--dry-run=server".as_ref(), "-f".as_ref(), file.as_os_str()]);
        assert!(output.status.success(), "dry run of {}: {}", file.display(), describe_output(&output));
    }
}

#[tokio::test]
async fn samples_pass_server_side_dry_run_once_the_sample_crds_are_installed() {
    let client = support::client().await;
    support::install_sample_crds(&client).await;

    let samples = deploy().join("samples");
    let stdout =
        kubectl_ok(["apply".as_ref(), "--dry-run=server".as_ref(), "-f".as_ref(), samples.as_os_str()]);
    assert!(stdout.contains("memcached.cache.example.com/memcached-sample"), "{stdout}");
    assert!(stdout.contains("etcdbackup.etcd.example.com/etcdbackup-sample"), "{stdout}");
    assert!(stdout.contains("etcdrestore.etcd.example.com/etcdrestore-sample"), "{stdout}");
    assert!(stdout.contains("kubernetescluster.platform.example.com/kubernetescluster-sample"), "{stdout}");
}

/// Whether the operator's ServiceAccount may `verb` the `resource` (`<resource>[.<group>]`, as
/// `kubectl auth can-i` names it, plus `/<subresource>`) in `namespace`, or in all namespaces: a
/// SubjectAccessReview for its user and groups, the question `kubectl auth can-i --as` asks (one
/// request instead of a kubectl process; the samples' check asks about a hundred).
async fn service_account_can(verb: &str, resource: &str, namespace: Option<&str>) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((resource, subresource)) => (resource, Some(subresource.to_string())),
        None => (resource, None),
    };
    let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(SERVICE_ACCOUNT.into()),
            groups: Some(SERVICE_ACCOUNT_GROUPS.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                namespace: Some(namespace.unwrap_or_default().into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviews: Api<SubjectAccessReview> = Api::all(support::client().await);
    let answer = reviews.create(&PostParams::default(), &review).await;
    let answer = answer.unwrap_or_else(|e| panic!("review {verb} {resource} in {namespace:?}: {e}"));
    answer.status.is_some_and(|status| status.allowed)
}

#[tokio::test]
async fn operator_service_account_may_do_exactly_what_the_samples_need() {
    let _turn = CLUSTER_OBJECTS.lock().await;
    let _rbac = operator_rbac();
    support::install_sample_crds(&support::client().await).await;

    let k8s_module_verbs = ["get", "list", "watch", "create", "update", "patch", "delete"];
    let mut allowed: Vec<(&str, &str, Option<&str>)> = Vec::new();
    let crs = support::SAMPLE_RESOURCES;
    for cr in crs {
        for verb in ["get", "update", "patch"] {
            allowed.push((verb, cr, Some("default")));
        }
        for verb in ["list", "watch"] {
            allowed.push((verb, cr, None));
        }
    }
    let subresources: Vec<(String, String)> =
        crs.iter().map(|cr| (format!("{cr}/status"), format!("{cr}/finalizers"))).collect();
    for (status, finalizers) in &subresources {
        for verb in ["get", "update", "patch"] {
            allowed.push((verb, status, Some("default")));
        }
        allowed.push(("update", finalizers, Some("default")));
    }
    // A KubernetesCluster's certificates and admin kubeconfig.
    for verb in ["get", "create", "update", "patch"] {
        allowed.push((verb, "secrets", Some("default")));
    }
    for verb in ["create", "delete"] {
        allowed.push((verb, "etcdclusters.etcd.example.com", Some("default")));
    }
    for child in ["configmaps", "deployments.apps"] {
        for verb in k8s_module_verbs {
            allowed.push((verb, child, Some("some-app")));
        }
        allowed.push(("watch", child, None));
    }
    allowed.push(("create", "events", Some("some-app")));
    allowed.push(("patch", "events", Some("some-app")));
    for verb in k8s_module_verbs {
        allowed.push((verb, "leases.coordination.k8s.io", Some(OPERATOR_NAMESPACE)));
    }
    for verb in ["get", "list", "create", "patch", "delete"] {
        allowed.push((verb, "ansibleruns.ansible-operator.dev", Some("some-app")));
    }
    allowed.push(("patch", "ansibleruns.ansible-operator.dev/status", Some("some-app")));
    allowed.push(("create", "tokenreviews.authentication.k8s.io", None));
    allowed.push(("create", "subjectaccessreviews.authorization.k8s.io", None));

    let denied = [
        ("create", "memcacheds.cache.example.com", Some("default")),
        ("delete", "etcdbackups.etcd.example.com", Some("default")),
        ("list", "secrets", None),
        ("watch", "secrets", Some("default")),
        ("delete", "secrets", Some("default")),
        ("create", "pods", Some("default")),
        ("list", "pods", None),
        ("get", "services", Some("default")),
        ("create", "statefulsets.apps", Some("default")),
        ("get", "events", Some("default")),
        ("delete", "events", Some("default")),
        ("create", "events.events.k8s.io", Some("default")),
        ("get", "leases.coordination.k8s.io", Some("default")),
        ("list", "namespaces", None),
        ("create", "clusterroles.rbac.authorization.k8s.io", None),
        ("update", "ansibleruns.ansible-operator.dev", Some("some-app")),
        ("get", "tokenreviews.authentication.k8s.io", None),
        ("delete", "validatingwebhookconfigurations.admissionregistration.k8s.io", None),
        // No sample validates: no webhook configuration at all.
        ("get", "validatingwebhookconfigurations.admissionregistration.k8s.io", None),
        ("create", "validatingwebhookconfigurations.admissionregistration.k8s.io", None),
        ("watch", "ansibleruns.ansible-operator.dev", Some("some-app")),
        ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", None),
    ];

    let mut wrong: Vec<String> = Vec::new();
    for (verb, resource, namespace) in allowed {
        if !service_account_can(verb, resource, namespace).await {
            wrong.push(format!("denied {verb} {resource} in {namespace:?}"));
        }
    }
    for (verb, resource, namespace) in denied {
        if service_account_can(verb, resource, namespace).await {
            wrong.push(format!("allowed {verb} {resource} in {namespace:?}"));
        }
    }
    assert!(wrong.is_empty(), "the ServiceAccount's permissions differ from the samples' needs: {wrong:#?}");
}

/// `kubectl <args> --dry-run=server` as the operator's ServiceAccount: `Ok(stdout)` or `Err(stderr)`.
fn as_service_account(args: &[&str]) -> Result<String, String> {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    all.extend(["--dry-run=server".to_string(), format!("--as={SERVICE_ACCOUNT}")]);
    all.extend(SERVICE_ACCOUNT_GROUPS.iter().map(|g| format!("--as-group={g}")));
    let output = kubectl(&all);
    match output.status.success() {
        true => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
    }
}

/// A Secret manifest for `kubectl create -f -`-less use: written to `dir`, its path.
fn secret_file(dir: &Path, name: &str, namespace: &str, kind: &str, annotations: Value) -> PathBuf {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": kind,
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "stringData": {"note": "test"},
    });
    let file = dir.join(format!("{name}-{namespace}.json"));
    std::fs::write(&file, secret.to_string()).expect("write the Secret manifest");
    file
}

#[tokio::test]
async fn the_service_account_is_refused_service_account_token_secrets_and_may_still_write_opaque_ones() {
    let _turn = CLUSTER_OBJECTS.lock().await;
    let _rbac = operator_rbac();
    let client = support::client().await;
    let ns = support::TestNamespace::new(&client, "deploy-tokens").await;
    let dir = scratch_dir(&format!("{}-secrets", ns.name));
    let token_for = |name: &str, namespace: &str| {
        let annotations = json!({"kubernetes.io/service-account.name": "default"});
        secret_file(&dir, name, namespace, "kubernetes.io/service-account-token", annotations)
    };
    let create = |file: &Path| as_service_account(&["create", "-f", file.to_str().unwrap()]);

    // One in a watched namespace, then one in the operator's own (the policy takes a moment to
    // load). Not kube-system: ansible-operator-limits refuses every write there, and which of two
    // refusing policies the API server names is not fixed.
    let watched = token_for("minted", &ns.name);
    let refused = support::wait_for("the policy to refuse a token Secret", WAIT, || async {
        Ok(match create(&watched) {
            Err(error) if error.contains("ansible-operator-no-service-account-tokens") => Ok(error),
            other => Err(format!("{other:?}")),
        })
    })
    .await;
    assert!(refused.contains("kubernetes.io/service-account-token"), "{refused}");
    let own = create(&token_for("minted", OPERATOR_NAMESPACE)).expect_err("a token Secret in its namespace");
    assert!(own.contains("ansible-operator-no-service-account-tokens"), "{own}");

    // The annotation that names a ServiceAccount is refused on any Secret, created or added later.
    let annotated = secret_file(
        &dir,
        "annotated",
        &ns.name,
        "Opaque",
        json!({"kubernetes.io/service-account.name": "default"}),
    );
    let error = create(&annotated).expect_err("an Opaque Secret naming a ServiceAccount");
    assert!(error.contains("kubernetes.io/service-account.name"), "{error}");

    // Ordinary Secrets stay allowed where the ClusterRole allows them (a KubernetesCluster's PKI).
    let opaque = secret_file(&dir, "pki", &ns.name, "Opaque", json!({}));
    create(&opaque).expect("an Opaque Secret is still allowed");
    kubectl_ok(["create", "-f", opaque.to_str().unwrap()]);
    let target = "secret/pki";
    as_service_account(&["-n", &ns.name, "annotate", target, "team=a"])
        .expect("other annotations are allowed");
    let error = as_service_account(&[
        "-n",
        &ns.name,
        "annotate",
        target,
        "kubernetes.io/service-account.name=default",
    ])
    .expect_err("adding the ServiceAccount annotation");
    assert!(error.contains("ansible-operator-no-service-account-tokens"), "{error}");
    // Nobody else is affected: the admin may still make one.
    kubectl_ok(["create", "--dry-run=server", "-f", token_for("admins", &ns.name).to_str().unwrap()]);
}

#[tokio::test]
async fn the_namespaced_component_turns_the_cluster_role_into_a_role_of_the_operators_namespace() {
    let _turn = CLUSTER_OBJECTS.lock().await;
    let _namespace = operator_namespace();
    // An overlay as a user writes it: deploy/ plus the component (kustomize wants relative paths).
    let overlay = support::repo().join("target/test-output/namespaced-overlay");
    std::fs::create_dir_all(&overlay).expect("create the overlay dir");
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "resources:\n  - ../../../deploy\ncomponents:\n  - ../../../deploy/namespaced\n",
    )
    .expect("write the overlay");
    let output = dry_run_kustomization(
        &overlay,
        &[
            "role.rbac.authorization.k8s.io/ansible-operator-manager",
            "rolebinding.rbac.authorization.k8s.io/ansible-operator-manager",
            "clusterrole.rbac.authorization.k8s.io/ansible-operator-manager-cluster",
            "clusterrolebinding.rbac.authorization.k8s.io/ansible-operator-manager-cluster",
            "role.rbac.authorization.k8s.io/ansible-operator-run-memcached.cache.example.com",
            "validatingadmissionpolicy.admissionregistration.k8s.io/ansible-operator-no-service-account-tokens",
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    for object in [
        "clusterrole.rbac.authorization.k8s.io/ansible-operator-manager ",
        "clusterrolebinding.rbac.authorization.k8s.io/ansible-operator-manager ",
        "clusterrole.rbac.authorization.k8s.io/ansible-operator-run-memcached.cache.example.com ",
    ] {
        assert!(!stdout.contains(object), "{object} is still there: {}", describe_output(&output));
    }

    let rendered = kubectl_ok(["kustomize".as_ref(), overlay.as_os_str()]);
    let docs: Vec<&str> = rendered.split("\n---\n").collect();
    let manager_role = docs
        .iter()
        .find(|d| d.contains("kind: Role\n") && d.contains("name: ansible-operator-manager\n"))
        .expect("the manager Role");
    assert!(manager_role.contains(&format!("namespace: {OPERATOR_NAMESPACE}")), "{manager_role}");
    assert!(manager_role.contains("- memcacheds"), "the same rules: {manager_role}");
    let deployment = docs.iter().find(|d| d.contains("kind: Deployment")).expect("the Deployment");
    let watch = deployment.split("- name: WATCH_NAMESPACE").nth(1).expect("WATCH_NAMESPACE is set");
    assert!(
        watch.trim_start().starts_with("valueFrom:\n") && watch.contains("fieldPath: metadata.namespace"),
        "WATCH_NAMESPACE is the pod's namespace: {deployment}"
    );
    let _ = std::fs::remove_dir_all(&overlay);
}

#[tokio::test]
async fn the_network_policy_component_lets_only_labelled_namespaces_and_the_api_servers_reach_the_api_port() {
    let _turn = CLUSTER_OBJECTS.lock().await;
    let _namespace = operator_namespace();
    let overlay = support::repo().join("target/test-output/network-policy-overlay");
    std::fs::create_dir_all(&overlay).expect("create the overlay dir");
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "resources:\n  - ../../../deploy\ncomponents:\n  - ../../../deploy/network-policy\n",
    )
    .expect("write the overlay");
    dry_run_kustomization(
        &overlay,
        &[
            "networkpolicy.networking.k8s.io/ansible-operator-allow-api",
            "networkpolicy.networking.k8s.io/ansible-operator-allow-metrics",
        ],
    );
    let rendered = kubectl_ok([
        "apply".as_ref(),
        "--dry-run=client".as_ref(),
        "-o".as_ref(),
        "json".as_ref(),
        "-k".as_ref(),
        overlay.as_os_str(),
    ]);
    let _ = std::fs::remove_dir_all(&overlay);
    let list: Value = serde_json::from_str(&rendered).expect("kustomize's JSON");
    let items = list["items"].as_array().expect("items");
    let find = |kind: &str, name: &str| {
        items
            .iter()
            .find(|i| i["kind"] == kind && i["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let deployment = find("Deployment", "ansible-operator-controller-manager");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let port = |name: &str| {
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["containerPort"].clone())
    };
    let api = find("NetworkPolicy", "ansible-operator-allow-api");
    for (key, value) in api["spec"]["podSelector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&pod_labels[key], value, "the policy selects the operator's Pods");
    }
    let rules = api["spec"]["ingress"].as_array().unwrap();
    assert_eq!(rules[0]["ports"][0]["port"], port("api").unwrap(), "the API port");
    let from = &rules[0]["from"];
    assert_eq!(from[0]["namespaceSelector"]["matchLabels"]["ansible-operator.dev/api-access"], "allowed");
    assert!(from[1]["ipBlock"]["cidr"].is_string(), "the API servers' addresses: {from}");
    assert_eq!(rules[1]["ports"][0]["port"], port("health").unwrap(), "probes");
    assert!(rules[1].get("from").is_none(), "probes from anywhere");
    let metrics = find("NetworkPolicy", "ansible-operator-allow-metrics");
    assert_eq!(metrics["spec"]["ingress"][0]["ports"][0]["port"], port("metrics").unwrap());
}

/// Dropped after the operator stops and before the test namespace goes: removes the finalizers a
/// failed test left on the sample CRs (nothing would run them any more, and the namespace would
/// hang in Terminating) and the impersonating kubeconfig (it holds the admin's client key).
struct AfterOperator {
    namespace: String,
    kubeconfig: PathBuf,
}

impl Drop for AfterOperator {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
        let patch = r#"{"metadata":{"finalizers":null}}"#;
        for object in ["memcached.cache.example.com/cache", "etcdbackup.etcd.example.com/nightly"] {
            let _ = kubectl(["-n", &self.namespace, "patch", object, "--type=merge", "-p", patch]);
        }
    }
}

#[tokio::test]
async fn samples_reconcile_and_finalize_as_the_service_account_with_only_the_rbac_rendered_for_their_namespace()
 {
    let _turn = CLUSTER_OBJECTS.lock().await;
    let Test { client, ns, api: memcacheds } =
        Test::setup("deploy-rbac").sample("cache.example.com", "Memcached").build().await;
    // The rules `ansible-operator rbac --namespace <ns>` renders, and the admission policies: the
    // memcached Deployment the operator writes as the ServiceAccount passes them.
    let _rbac = rbac_rendered_for(&ns.name);
    support::node::require_ready_node(&client).await;

    let dir = scratch_dir(&format!("{}-identity", ns.name));
    let kubeconfig = support::impersonating_kubeconfig(&dir, SERVICE_ACCOUNT, &SERVICE_ACCOUNT_GROUPS);
    let _after_operator = AfterOperator { namespace: ns.name.clone(), kubeconfig: kubeconfig.clone() };
    let who =
        kubectl_ok(["--kubeconfig".as_ref(), kubeconfig.as_os_str(), "auth".as_ref(), "whoami".as_ref()]);
    assert!(who.contains(SERVICE_ACCOUNT), "the kubeconfig acts as the ServiceAccount: {who}");

    let backup_dir = scratch_dir(&format!("{}-backups", ns.name));
    let operator = OperatorConfig::project(support::repo().to_path_buf(), &ns.name)
        .env("KUBECONFIG", kubeconfig.display().to_string())
        .env("ETCD_BACKUP_DIR", backup_dir.display().to_string())
        .start();
    let backups = support::cr_api(&client, "etcd.example.com", "EtcdBackup", &ns.name);
    let endpoint =
        format!("http://127.0.0.1:{}", std::env::var("ETCD_PORT").unwrap_or_else(|_| "12379".into()));

    let spec = json!({"size": 1, "image": support::node::MEMCACHED_IMAGE});
    support::create_cr(&memcacheds, "cache.example.com", "Memcached", "cache", spec).await;
    support::create_cr(&backups, "etcd.example.com", "EtcdBackup", "nightly", json!({"endpoint": endpoint}))
        .await;
    let memcached = support::wait_for_condition(&memcacheds, "cache", "Successful", "True", WAIT).await;
    assert_eq!(memcached.data["status"]["deployment"], "cache-memcached", "k8s_status wrote the status");
    assert_eq!(memcached.data["status"]["readyReplicas"], 1, "the role's wait on its Deployment was allowed");
    let backup = support::wait_for_condition(&backups, "nightly", "Successful", "True", WAIT).await;
    let snapshot =
        backup.data["status"]["snapshot"]["path"].as_str().expect("status.snapshot.path").to_string();
    assert!(Path::new(&snapshot).exists(), "{snapshot}");

    memcacheds.delete("cache", &DeleteParams::default()).await.expect("delete Memcached");
    backups.delete("nightly", &DeleteParams::default()).await.expect("delete EtcdBackup");
    support::wait_for_absent(&memcacheds, "cache", WAIT).await;
    support::wait_for_absent(&backups, "nightly", WAIT).await;
    assert!(!Path::new(&snapshot).exists(), "the finalizer removed {snapshot}");
    let log = operator.log();
    assert!(!log.to_lowercase().contains("forbidden"), "the operator hit a permission error:\n{log}");
}

/// A Deployment manifest (one `busybox` container) with `pod_spec` merged into its Pod spec,
/// written to `dir`; its path.
fn deployment_file(dir: &Path, name: &str, namespace: &str, pod_spec: Value) -> PathBuf {
    let mut spec =
        json!({"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]});
    for (key, value) in pod_spec.as_object().expect("a mapping") {
        spec[key] = value.clone();
    }
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    });
    let file = dir.join(format!("{name}-{namespace}.json"));
    std::fs::write(&file, deployment.to_string()).expect("write the Deployment manifest");
    file
}

#[tokio::test]
async fn the_rendered_rbac_keeps_the_operator_out_of_kube_system_and_the_policy_refuses_it_pods_that_reach_the_node()
 {
    let _turn = CLUSTER_OBJECTS.lock().await;
    let client = support::client().await;
    let ns = support::TestNamespace::new(&client, "deploy-limits").await;
    let _rbac = rbac_rendered_for(&ns.name);

    // RBAC: what the samples need, in the watched namespace only.
    let mut wrong = Vec::new();
    for (verb, resource, namespace, expected) in [
        ("create", "deployments.apps", Some(ns.name.as_str()), true),
        ("create", "secrets", Some(ns.name.as_str()), true),
        ("list", "memcacheds.cache.example.com", Some(ns.name.as_str()), true),
        ("create", "tokenreviews.authentication.k8s.io", None, true),
        ("create", "deployments.apps", Some("kube-system"), false),
        ("get", "deployments.apps", Some("kube-system"), false),
        ("get", "secrets", Some("kube-system"), false),
        ("create", "secrets", Some("kube-system"), false),
        ("list", "secrets", None, false),
        ("list", "memcacheds.cache.example.com", None, false),
        ("create", "deployments.apps", Some("default"), false),
    ] {
        if service_account_can(verb, resource, namespace).await != expected {
            wrong.push(format!("{verb} {resource} in {namespace:?}: expected allowed={expected}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");

    // The policy: a Deployment RBAC allows is refused when its Pods would reach the node or run as
    // another ServiceAccount (the policy takes a moment to load); an ordinary one is not.
    let dir = scratch_dir(&format!("{}-deployments", ns.name));
    let create = |file: &Path| as_service_account(&["create", "-f", file.to_str().unwrap()]);
    let host_path = deployment_file(
        &dir,
        "host-path",
        &ns.name,
        json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
    );
    let refused = support::wait_for("the policy to refuse a hostPath Deployment", WAIT, || async {
        Ok(match create(&host_path) {
            Err(error) if error.contains("ansible-operator-limits") => Ok(error),
            other => Err(format!("{other:?}")),
        })
    })
    .await;
    assert!(refused.contains("hostPath"), "{refused}");
    let privileged = json!({"containers": [{"name": "main", "image": "busybox", "securityContext": {"privileged": true}}]});
    for (name, pod_spec, says) in [
        ("host-network", json!({"hostNetwork": true}), "network"),
        ("host-pid", json!({"hostPID": true}), "PID"),
        ("privileged", privileged, "privileged"),
        ("other-account", json!({"serviceAccountName": "admin"}), "ServiceAccount"),
    ] {
        let error = create(&deployment_file(&dir, name, &ns.name, pod_spec)).expect_err(name);
        assert!(error.contains("ansible-operator-limits") && error.contains(says), "{name}: {error}");
    }
    let ordinary = deployment_file(&dir, "ordinary", &ns.name, json!({"serviceAccountName": "default"}));
    create(&ordinary).expect("an ordinary Deployment in the watched namespace is allowed");
    // Only the operator's identities: the admin may still create the hostPath Deployment.
    kubectl_ok(["create", "--dry-run=server", "-f", host_path.to_str().unwrap()]);
}

/// A project's config/ as `operator-sdk init --plugins=ansible` lays it out (the parts the history
/// component touches), its config/default naming `namespace` and the component.
fn scaffolded_config(dir: &Path, namespace: &str) -> PathBuf {
    let config = dir.join("config");
    let files = [
        ("rbac/kustomization.yaml", "resources: [service_account.yaml]\n".to_string()),
        (
            "rbac/service_account.yaml",
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: controller-manager, namespace: system}\n"
                .to_string(),
        ),
        ("manager/kustomization.yaml", "resources: [manager.yaml]\n".to_string()),
        (
            "manager/manager.yaml",
            "apiVersion: apps/v1\nkind: Deployment\n\
             metadata: {name: controller-manager, namespace: system, labels: {control-plane: controller-manager}}\n\
             spec:\n  selector: {matchLabels: {control-plane: controller-manager}}\n  template:\n\
             \x20   metadata: {labels: {control-plane: controller-manager}}\n    spec:\n\
             \x20     serviceAccountName: controller-manager\n      containers:\n\
             \x20       - name: manager\n          image: controller:latest\n\
             \x20         args: [--leader-elect, --health-probe-bind-address=:6789]\n"
                .to_string(),
        ),
        (
            "default/kustomization.yaml",
            format!(
                "namespace: {namespace}\nnamePrefix: demo-\nresources: [../rbac, ../manager]\n\
                 components: [../../ansible-operator/deploy/history]\n"
            ),
        ),
    ];
    for (path, text) in files {
        let path = config.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    // kustomize takes a component by relative path only.
    let _ = std::fs::remove_file(dir.join("ansible-operator"));
    std::os::unix::fs::symlink(support::repo(), dir.join("ansible-operator")).unwrap();
    config.join("default")
}

#[tokio::test]
async fn history_component_gives_a_scaffolded_project_the_crd_rbac_api_service_and_flag() {
    let client = support::client().await;
    let ns = support::TestNamespace::new(&client, "history-component").await;
    let default = scaffolded_config(&scratch_dir(&ns.name), &ns.name);

    let rendered = kubectl_ok(["kustomize".as_ref(), default.as_os_str()]);
    let docs: Vec<serde_json::Value> =
        rendered.split("\n---\n").map(|doc| serde_saphyr::from_str(doc).expect("rendered YAML")).collect();
    let find = |kind: &str| {
        docs.iter().find(|doc| doc["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in:\n{rendered}"))
    };
    assert_eq!(find("CustomResourceDefinition")["metadata"]["name"], "ansibleruns.ansible-operator.dev");
    let rules = serde_json::to_string(&find("ClusterRole")["rules"]).unwrap();
    for needed in ["ansibleruns", "ansibleruns/status", "tokenreviews", "subjectaccessreviews"] {
        assert!(rules.contains(&format!("\"{needed}\"")), "{needed} in {rules}");
    }
    let binding = find("ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], find("ClusterRole")["metadata"]["name"]);
    assert_eq!(
        binding["subjects"][0],
        json!({"kind": "ServiceAccount", "name": "demo-controller-manager", "namespace": ns.name}),
        "bound to the project's own ServiceAccount"
    );
    let service = find("Service");
    assert_eq!(service["metadata"]["namespace"], ns.name.as_str());
    assert_eq!(service["spec"]["ports"][0]["port"], 8082);
    let args = &find("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(
        args,
        &json!(["--leader-elect", "--health-probe-bind-address=:6789", "--api-bind-address=:8082"]),
        "the scaffold's flags kept, the API's added"
    );

    let output = kubectl(["apply".as_ref(), "--dry-run=server".as_ref(), "-k".as_ref(), default.as_os_str()]);
    assert!(
        output.status.success(),
        "dry run of the scaffold with the component: {}",
        describe_output(&output)
    );
}

/// `COPY` sources (build context paths) of the Dockerfile, without `--from` copies.
fn dockerfile_copy_sources(dockerfile: &str) -> Vec<String> {
    let joined = dockerfile.replace("\\\n", " ");
    let mut sources = Vec::new();
    for line in joined.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("COPY ") else { continue };
        let words: Vec<&str> = rest.split_whitespace().collect();
        if words.iter().any(|w| w.starts_with("--from=")) {
            continue;
        }
        let paths: Vec<&str> = words.into_iter().filter(|w| !w.starts_with("--")).collect();
        sources.extend(paths[..paths.len() - 1].iter().map(|p| p.to_string()));
    }
    sources
}

#[test]
fn dockerfile_copies_only_files_that_exist_and_installs_the_same_toolchain_as_the_install_script() {
    let dockerfile = std::fs::read_to_string(support::repo().join("Dockerfile")).expect("read Dockerfile");
    let sources = dockerfile_copy_sources(&dockerfile);
    for expected in
        ["src", "hack/kube/", "hack/toolchains/${ANSIBLE_TOOLCHAIN}/", "watches.yaml", "roles/", "playbooks/"]
    {
        assert!(sources.iter().any(|s| s == expected), "Dockerfile does not copy {expected}: {sources:?}");
    }
    // A BINARIES=prebuilt build copies what hack/images.sh builds on the host into .local/image/.
    let prebuilt = ".local/image/";
    assert!(sources.iter().any(|s| s == prebuilt), "Dockerfile does not copy {prebuilt}: {sources:?}");
    let images_script =
        std::fs::read_to_string(support::repo().join("hack/images.sh")).expect("read hack/images.sh");
    assert!(images_script.contains(r#"local out="$repo/.local/image""#), "hack/images.sh fills {prebuilt}");
    for source in sources.iter().filter(|s| *s != prebuilt) {
        let source = source.replace("${ANSIBLE_TOOLCHAIN}", "2.18");
        assert!(support::repo().join(&source).exists(), "COPY source {source} does not exist");
    }
    // Both sources of the binaries feed the one runtime stage.
    for line in [
        "FROM scratch AS binaries-source\n",
        "FROM scratch AS binaries-prebuilt\n",
        "FROM binaries-${BINARIES} AS binaries\n",
        "ARG BINARIES=source\n",
        "COPY --from=binaries /out/ansible-operator /usr/local/bin/ansible-operator\n",
    ] {
        assert!(dockerfile.contains(line), "Dockerfile lacks {line:?}");
    }

    // Every COPY source is re-included by the allowlist in .dockerignore.
    let ignore = std::fs::read_to_string(support::repo().join(".dockerignore")).expect("read .dockerignore");
    let allowed: Vec<&str> =
        ignore.lines().filter_map(|l| l.trim().strip_prefix('!')).map(|p| p.trim_end_matches('/')).collect();
    for source in &sources {
        let source = source.trim_end_matches('/');
        assert!(
            allowed.iter().any(|a| source == *a || source.starts_with(&format!("{a}/"))),
            ".dockerignore leaves {source} out of the build context"
        );
    }

    // The image installs one toolchain directory, as hack/install-ansible.sh does, defaulting to
    // the same one.
    let script =
        std::fs::read_to_string(support::repo().join("hack/install-ansible.sh")).expect("read script");
    assert!(script.contains(r#"toolchain="${ANSIBLE_TOOLCHAIN:-2.18}""#), "the script's default toolchain");
    assert!(dockerfile.contains("ARG ANSIBLE_TOOLCHAIN=2.18\n"), "the image's default toolchain");
    assert!(dockerfile.contains("COPY hack/toolchains/${ANSIBLE_TOOLCHAIN}/ /tmp/toolchain/"));
    for toolchain in ["2.18", "2.19", "2.21"] {
        let dir = support::repo().join("hack/toolchains").join(toolchain);
        let bundle = std::fs::read_to_string(dir.join("bundle")).expect("read bundle");
        for variable in ["ANSIBLE_BUNDLE_VERSION=", "ANSIBLE_BUNDLE_SHA256="] {
            assert!(bundle.lines().any(|l| l.starts_with(variable)), "{toolchain}/bundle sets {variable}");
        }
        assert!(dir.join("requirements.txt").exists());
    }
    // The base image is upstream's layout (tini at /tini) and the sample image is built FROM it.
    assert!(
        dockerfile.contains(
            r#"ENTRYPOINT ["/tini", "--", "/usr/local/bin/ansible-operator", "run", "--watches-file=./watches.yaml"]"#
        ),
        "upstream's entrypoint"
    );
    assert!(dockerfile.contains("ln -s /usr/bin/tini /tini"), "tini at /tini, as upstream's base image");
    let base = dockerfile.find(" AS base\n").expect("a base target");
    let sample = dockerfile.find("FROM base AS sample\n").expect("the sample image FROM the base");
    assert!(
        base < sample && dockerfile.trim_end().ends_with("${HOME}/playbooks/"),
        "the sample image is last"
    );
    assert!(
        !dockerfile[base..sample].contains("COPY --chown=1001:0 roles/"),
        "no sample operator in the base"
    );
}
