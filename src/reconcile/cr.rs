//! The reconciled CR through the API: which `Api` reaches it, reading it, setting or dropping our
//! finalizer, and where its status goes.

use kube::api::{Api, DynamicObject, Patch};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::context::{Context, Error};
use crate::kubeapi::{self, with_timeout};

/// The zap logger of these lines: `reconcile`, as before they moved into this file.
const TARGET: &str = "ansible_operator::reconcile";

/// The CR a reconcile writes its status to.
pub struct StatusTarget<'a> {
    /// The CR's API.
    pub api: &'a Api<DynamicObject>,
    /// The CR's name.
    pub name: &'a str,
    /// namespace/name, for errors.
    pub key: &'a str,
    /// The generation the run saw.
    pub generation: Option<i64>,
    /// The resourceVersion the run saw.
    pub resource_version: Option<String>,
    /// The CR as its metric series name it.
    pub cr: crate::metrics::CrRef,
}

/// The API of the CR's kind, in its namespace when the kind is namespaced.
pub fn api_for<K: Resource>(ctx: &Context, object: &K) -> Api<DynamicObject> {
    match object.namespace().filter(|_| ctx.namespaced) {
        Some(namespace) => Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.resource),
        None => Api::all_with(ctx.client.clone(), &ctx.resource),
    }
}

/// `namespace/name` (or `name` for cluster-scoped CRs).
pub fn key_of<K: Resource>(object: &K) -> String {
    match object.namespace() {
        Some(namespace) => format!("{namespace}/{}", object.name_any()),
        None => object.name_any(),
    }
}

/// Reads the CR; `None` when it is gone.
pub async fn get(api: &Api<DynamicObject>, name: &str, key: &str) -> Result<Option<DynamicObject>, Error> {
    with_timeout(api.get_opt(name)).await.map_err(|source| Error::Api {
        action: "read",
        key: key.into(),
        source,
    })
}

/// Adds or removes our finalizer with a merge patch guarded by the resourceVersion read. Returns the
/// updated CR, or `None` when it is gone.
pub async fn set_finalizer(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    finalizer: &str,
    present: bool,
    key: &str,
) -> Result<Option<DynamicObject>, Error> {
    let mut finalizers: Vec<String> =
        object.finalizers().iter().filter(|f| *f != finalizer).cloned().collect();
    if present {
        finalizers.push(finalizer.to_string());
    }
    let patch = json!({"metadata": {"resourceVersion": object.resource_version(), "finalizers": finalizers}});
    let action = if present { "add the finalizer to" } else { "remove the finalizer from" };
    match with_timeout(api.patch(&object.name_any(), &kubeapi::patch_params(), &Patch::Merge(&patch))).await {
        Ok(updated) => {
            tracing::info!(target: TARGET, finalizer, present, "updated finalizers");
            Ok(Some(updated))
        }
        Err(err) if err.is_not_found() => Ok(None),
        Err(source) => Err(Error::Api { action, key: key.into(), source }),
    }
}
