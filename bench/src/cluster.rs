//! The local control plane: client, the benchmark CRD, namespaces and CRs.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

/// Group of the benchmark's kind.
pub const GROUP: &str = "bench.example.com";
/// Version of the benchmark's kind.
pub const VERSION: &str = "v1alpha1";
/// The benchmark's kind.
pub const KIND: &str = "Bench";
const PLURAL: &str = "benches";

/// A client for the cluster of `kubeconfig`, with a QPS high enough for bursts of creates.
pub async fn client(kubeconfig: &Path) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).context("read kubeconfig")?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// The benchmark kind's API resource.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// The CRs of one namespace.
pub fn crs(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &resource())
}

/// Installs (server-side apply) the `Bench` CRD with a status subresource and waits until served.
pub async fn install_crd(client: &Client) -> anyhow::Result<()> {
    let name = format!("{PLURAL}.{GROUP}");
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "plural": PLURAL, "singular": "bench", "listKind": "BenchList"},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    });
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.patch(&name, &PatchParams::apply("ansible-operator-bench").force(), &Patch::Apply(&crd))
        .await
        .with_context(|| format!("apply CRD {name}"))?;
    let served: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if served.list(&ListParams::default().limit(1)).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("CRD {name} not served after 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a namespace `<prefix>-<random>` and returns its name.
pub async fn create_namespace(client: &Client, prefix: &str) -> anyhow::Result<String> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
    let name = format!("{prefix}-{:06x}", (nanos as u64 ^ u64::from(std::process::id())) & 0xff_ffff);
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await?;
    Ok(name)
}

/// Deletes a namespace and waits (up to `wait`) until it is gone.
pub async fn delete_namespace(client: &Client, name: &str, wait: Duration) {
    let api = Api::<Namespace>::all(client.clone());
    if let Err(error) = api.delete(name, &DeleteParams::background()).await {
        eprintln!("bench: delete namespace {name}: {error}");
        return;
    }
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        match api.get_opt(name).await {
            Ok(None) => return,
            Ok(Some(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    eprintln!("bench: namespace {name} still terminating after {wait:?}; moving on");
}

/// A `Bench` CR.
pub fn cr(name: &str, index: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {"index": index, "payload": "benchmark"}
    }))
    .expect("a valid CR")
}

/// Creates one CR.
pub async fn create_cr(api: &Api<DynamicObject>, name: &str, index: usize) -> anyhow::Result<()> {
    api.create(&PostParams::default(), &cr(name, index))
        .await
        .with_context(|| format!("create CR {name}"))?;
    Ok(())
}

/// Creates `names` with up to `parallel` requests in flight; returns the seconds it took.
pub async fn create_many(api: &Api<DynamicObject>, names: &[String], parallel: usize) -> anyhow::Result<f64> {
    let start = Instant::now();
    futures::stream::iter(names.iter().enumerate())
        .map(|(index, name)| create_cr(api, name, index))
        .buffer_unordered(parallel)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(start.elapsed().as_secs_f64())
}
