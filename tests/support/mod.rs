//! Test support: the real local control plane, a fresh namespace per test, CRDs and deadlines.
//!
//! Uses `KUBECONFIG` when it is set; otherwise brings the project's local cluster up once
//! (`hack/local-cluster.sh up`, which is idempotent) and uses its admin kubeconfig.

#![allow(dead_code)]

pub mod api;
pub mod cgroup;
pub mod configmaps;
pub mod etcd;
pub mod hosts;
pub mod node;
pub mod operator;
pub mod setup;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

/// Root of the repository.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Path of the kubeconfig the tests use, bringing the local cluster up if needed.
pub fn kubeconfig() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) {
            return PathBuf::from(path);
        }
        let status = Command::new(repo().join("hack/local-cluster.sh"))
            .arg("up")
            .status()
            .expect("run hack/local-cluster.sh up");
        assert!(status.success(), "hack/local-cluster.sh up failed ({status}); see .local/cluster/logs/");
        repo().join(".local/cluster/kubeconfig")
    })
}

/// A client for the test cluster. Each test makes its own: a client lives on the test's runtime.
pub async fn client() -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig()).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig is usable");
    Client::try_from(config).expect("build client")
}

/// A namespace that exists for one test and is deleted when it goes out of scope, even on panic.
pub struct TestNamespace {
    /// The namespace's name.
    pub name: String,
}

impl TestNamespace {
    /// Creates a namespace named after the test plus a random suffix.
    pub async fn new(client: &Client, prefix: &str) -> Self {
        let suffix: u32 = rand_suffix();
        let name = format!("{}-{suffix:08x}", prefix.replace('_', "-")).chars().take(63).collect::<String>();
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("create test namespace");
        Self { name }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Drop cannot await; kubectl does the deletion synchronously and never blocks on finalizers.
        let _ = Command::new(repo().join(".local/bin/kubectl"))
            .arg("--kubeconfig")
            .arg(kubeconfig())
            .args(["delete", "namespace", &self.name, "--wait=false", "--ignore-not-found"])
            .stdout(std::process::Stdio::null())
            .status();
    }
}

fn rand_suffix() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    hasher.finish() as u32
}

/// Installs deploy/'s `AnsibleRun` CRD, where the run history is kept.
pub async fn install_run_records_crd(client: &Client) {
    let text = std::fs::read_to_string(repo().join("deploy/crds/ansible-operator.dev_ansibleruns.yaml"))
        .expect("read the AnsibleRun CRD");
    install_crd(client, &serde_saphyr::from_str(&text).expect("the AnsibleRun CRD is YAML")).await;
}

/// A namespaced CRD `<plural>.<group>` with version `v1alpha1`, open schemas for spec and status,
/// and optionally the status subresource.
pub fn crd(group: &str, kind: &str, status_subresource: bool) -> Value {
    let plural = format!("{}s", kind.to_lowercase());
    let subresources = if status_subresource { json!({"status": {}}) } else { json!({}) };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": subresources,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    })
}

/// Applies a CRD (server-side apply, so tests may share it) and waits until it is established.
pub async fn install_crd(client: &Client, crd: &Value) {
    let name = crd["metadata"]["name"].as_str().expect("crd has a name").to_string();
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    api.patch(&name, &PatchParams::apply("ansible-operator-tests").force(), &Patch::Apply(crd))
        .await
        .unwrap_or_else(|err| panic!("apply CRD {name}: {err}"));
    wait_for(&format!("CRD {name} to be established"), Duration::from_secs(30), || {
        let api = api.clone();
        let name = name.clone();
        async move {
            let crd = api.get(&name).await.map_err(|e| e.to_string())?;
            let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
            let established = conditions.iter().any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()).ok_or_else(|| format!("conditions {conditions:?}")))
        }
    })
    .await;
    // "Established" can come a moment before the API server serves the new resource.
    let field = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let gvk = GroupVersionKind::gvk(
        &field(&crd["spec"]["group"]),
        &field(&crd["spec"]["versions"][0]["name"]),
        &field(&crd["spec"]["names"]["kind"]),
    );
    let resource = ApiResource::from_gvk_with_plural(&gvk, &field(&crd["spec"]["names"]["plural"]));
    let served: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    wait_for(&format!("CRD {name} to be served"), Duration::from_secs(30), || async {
        let listed = served.list(&ListParams::default().limit(1)).await;
        Ok(listed.map(|_| ()).map_err(|e| e.to_string()))
    })
    .await;
}

/// Deletes an object and ignores "not found".
pub async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(err) => panic!("delete {name}: {err}"),
    }
}

/// Polls `check` every 100 ms until it yields a value or the deadline passes.
///
/// `check` returns `Ok(Ok(value))` when done, `Ok(Err(seen))` to keep waiting (with a description of
/// what it saw), and `Err(error)` for a transient error. On timeout the test fails with what was
/// expected and what was last seen.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Result<T, String>, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last_seen = match check().await {
            Ok(Ok(value)) => return value,
            Ok(Err(seen)) => seen,
            Err(error) => format!("error: {error}"),
        };
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {last_seen}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Namespaced API for a test kind (version `v1alpha1`).
pub fn cr_api(client: &Client, group: &str, kind: &str, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1alpha1", kind));
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Creates a CR with the given metadata extras (labels, annotations) and spec.
pub async fn create_cr(
    api: &Api<DynamicObject>,
    group: &str,
    kind: &str,
    name: &str,
    spec: Value,
) -> DynamicObject {
    create_cr_with(api, group, kind, json!({"name": name}), spec).await
}

/// Creates a CR from a full metadata object and a spec.
pub async fn create_cr_with(
    api: &Api<DynamicObject>,
    group: &str,
    kind: &str,
    metadata: Value,
    spec: Value,
) -> DynamicObject {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1alpha1"),
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    }))
    .expect("valid CR");
    api.create(&PostParams::default(), &object).await.expect("create CR")
}

/// The condition of a type on a CR, if present.
pub fn condition<'a>(object: &'a DynamicObject, kind: &str) -> Option<&'a Value> {
    object.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

/// Waits until the CR has condition `kind` with `status`, and returns the CR.
pub async fn wait_for_condition(
    api: &Api<DynamicObject>,
    name: &str,
    kind: &str,
    status: &str,
    timeout: Duration,
) -> DynamicObject {
    wait_for(&format!("{name} to have condition {kind}={status}"), timeout, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let found = condition(&object, kind).is_some_and(|c| c["status"] == status);
        Ok(if found { Ok(object) } else { Err(format!("status {}", object.data["status"])) })
    })
    .await
}

/// Whether the CR's `Successful` condition is True for generation `generation`.
pub fn successful_at(object: &DynamicObject, generation: i64) -> bool {
    condition(object, "Successful")
        .is_some_and(|c| c["status"] == "True" && c["observedGeneration"] == generation)
}

/// Whether the CR's last run succeeded on its current generation.
pub fn converged(object: &DynamicObject) -> bool {
    successful_at(object, object.metadata.generation.unwrap_or_default())
}

/// Waits until generation `generation` of the CR is Successful, and returns the CR.
pub async fn wait_for_generation(
    api: &Api<DynamicObject>,
    name: &str,
    generation: i64,
    timeout: Duration,
) -> DynamicObject {
    wait_for(&format!("{name} generation {generation} to succeed"), timeout, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        Ok(if successful_at(&object, generation) {
            Ok(object)
        } else {
            Err(format!("status {}", object.data["status"]))
        })
    })
    .await
}

/// Waits until the object no longer exists.
pub async fn wait_for_absent<K>(api: &Api<K>, name: &str, timeout: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} to be gone"), timeout, || async {
        let found = api.get_opt(name).await.map_err(|e| e.to_string())?;
        Ok(match found {
            None => Ok(()),
            Some(object) => Err(format!("still there: {:?}", object.meta())),
        })
    })
    .await
}

/// Creates, with kubectl, a `<group>/v1alpha1 <kind>` CR whose spec nests `depth` objects deep:
/// deeper than 128, serde_json (and so kube's client) cannot decode it; the API server and kubectl
/// take it. Its JSON is written to `dir`.
pub fn create_deep_cr(dir: &Path, group: &str, kind: &str, namespace: &str, name: &str, depth: usize) {
    let spec = format!("{}\"bottom\"{}", r#"{"level":"#.repeat(depth), "}".repeat(depth));
    let text = format!(
        r#"{{"apiVersion":"{group}/v1alpha1","kind":"{kind}","metadata":{{"name":"{name}","namespace":"{namespace}"}},"spec":{spec}}}"#
    );
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, text).expect("write the CR");
    kubectl_ok(["create", "-f", file.to_str().expect("a UTF-8 path")]);
}

/// A watches.yaml entry for `<group>/v1alpha1 <kind>` running a fixture playbook.
pub fn playbook_watch(group: &str, kind: &str, playbook: &str) -> String {
    format!(
        "- version: v1alpha1\n  group: {group}\n  kind: {kind}\n  playbook: {{fixtures}}/playbooks/{playbook}\n"
    )
}

/// A TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Status code and body of a plain HTTP GET to 127.0.0.1:`port``path`, with an optional
/// Authorization header; `None` while nothing answers.
pub fn http_get(port: u16, path: &str, authorization: Option<&str>) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default();
    Some((code, body))
}

/// `controller_runtime_reconcile_total` of `controller` (e.g. `memcached-v1alpha1-controller`) in
/// the operator's `/metrics` on `port`, summed over results (or only `result`); `None` while
/// nothing answers.
pub fn reconciles_counted(port: u16, controller: &str, result: Option<&str>) -> Option<f64> {
    let (200, text) = http_get(port, "/metrics", None)? else { return None };
    let controller = format!("controller=\"{controller}\"");
    let result = result.map(|result| format!("result=\"{result}\""));
    Some(
        text.lines()
            .filter(|l| l.starts_with("controller_runtime_reconcile_total{") && l.contains(&controller))
            .filter(|l| result.as_ref().is_none_or(|result| l.contains(result)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// A copy of the admin kubeconfig in `dir` that impersonates `user` in `groups` (as that identity's
/// own token would act). It holds the admin's client key: remove it when done.
pub fn impersonating_kubeconfig(dir: &Path, user: &str, groups: &[&str]) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig()).expect("read kubeconfig");
    let mut config: Value = serde_saphyr::from_str(&text).expect("kubeconfig is YAML");
    for entry in config["users"].as_array_mut().expect("kubeconfig has users") {
        entry["user"]["as"] = json!(user);
        entry["user"]["as-groups"] = json!(groups);
    }
    let path = dir.join("impersonating.kubeconfig");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).expect("write kubeconfig");
    path
}

/// The sample operator's kinds, as `kubectl` names their resources (`<plural>.<group>`).
pub const SAMPLE_RESOURCES: [&str; 5] = [
    "memcacheds.cache.example.com",
    "etcdbackups.etcd.example.com",
    "etcdclusters.etcd.example.com",
    "etcdrestores.etcd.example.com",
    "kubernetesclusters.platform.example.com",
];

/// Installs the sample operator's CRDs from `deploy/crds/`.
pub async fn install_sample_crds(client: &Client) {
    for file in [
        "cache.example.com_memcacheds.yaml",
        "etcd.example.com_etcdbackups.yaml",
        "etcd.example.com_etcdclusters.yaml",
        "etcd.example.com_etcdrestores.yaml",
        "platform.example.com_kubernetesclusters.yaml",
    ] {
        let text = std::fs::read_to_string(repo().join("deploy/crds").join(file)).expect("read CRD");
        let crd: Value = serde_saphyr::from_str(&text).expect("CRD is YAML");
        install_crd(client, &crd).await;
    }
}

/// Every file under `dir`, recursively, as (path, text): where a secret must not be found.
pub fn read_tree(dir: &Path, into: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            read_tree(&path, into);
        } else if let Ok(bytes) = std::fs::read(&path) {
            into.push((path.display().to_string(), String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
}

/// kubectl against the test cluster.
pub fn kubectl<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    kubectl_at(kubeconfig(), args)
}

/// kubectl against the cluster of another kubeconfig.
pub fn kubectl_at<I, S>(kubeconfig: &Path, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(repo().join(".local/bin/kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl")
}

/// Runs kubectl, fails the test unless it succeeds, and returns its stdout.
pub fn kubectl_ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_os_string()).collect();
    let output = kubectl(&args);
    assert!(output.status.success(), "kubectl {args:?} failed: {}", describe_output(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A command's exit status, stdout and stderr, for failure messages.
pub fn describe_output(output: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
