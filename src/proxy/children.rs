//! The bookkeeping of the children a run writes through the proxy: reading what is there before a
//! write, disowning what the run did not create, relabelling a child for its owner's shard, and
//! watching the kinds of children written or read back.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use kube::Client;
use kube::api::ApiResource;
use serde_json::Value;

use super::credentials::Grant;
use super::dependents::Dependents;
use super::own_writes::Version;
use super::owner::Link;
use super::request_info::RequestInfo;
use super::wire::{Body, ProxyError, box_body, collect, full};

/// The proxy's log lines keep the logger name they had before this file was split off.
const TARGET: &str = "ansible_operator::proxy";

/// What the proxy does to children besides forwarding their writes.
pub struct Children {
    client: Client,
    /// The dependent-watch registry; `None` with `--inject-owner-ref=false`.
    dependents: Option<Arc<Dependents>>,
}

impl Children {
    /// Children of runs, read and patched with `client`, watched through `dependents`.
    pub fn new(client: Client, dependents: Option<Arc<Dependents>>) -> Self {
        Self { client, dependents }
    }

    /// The dependent-watch registry; `None` with `--inject-owner-ref=false`.
    pub fn dependents(&self) -> Option<&Arc<Dependents>> {
        self.dependents.as_ref()
    }

    /// The run wrote `version` of a child: the owner's dependent watch does not run it for that.
    /// Only a run whose children are watched is noted (a plan's never are).
    pub fn wrote(&self, grant: &Grant, version: Version) {
        if let Some(dependents) = self.dependents.as_ref().filter(|_| grant.watch_dependents) {
            dependents.own_writes().wrote(&grant.owner.cr_key(), version);
        }
    }

    /// Whether writes are linked to the run's CR and children watched (`--inject-owner-ref`).
    pub fn linked(&self) -> bool {
        self.dependents.is_some()
    }

    /// The object at `path` as the API server has it now, `None` when there is none.
    pub async fn read(&self, path: &str) -> Result<Option<Value>, ProxyError> {
        let request = Request::get(path).body(kube::client::Body::empty()).map_err(|_| ProxyError::Path)?;
        let response = self.client.send(request).await.map_err(ProxyError::Upstream)?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            code if code.is_success() => {
                let bytes = collect(response.into_body()).await?;
                serde_json::from_slice(&bytes).map(Some).map_err(|e| ProxyError::Body(e.to_string()))
            }
            code => Err(ProxyError::Read(code)),
        }
    }

    /// Sends `patch` as a JSON merge patch of the object at `path`, under the operator's field manager.
    async fn merge_patch(
        &self,
        path: &str,
        patch: &Value,
    ) -> Result<Response<kube::client::Body>, ProxyError> {
        let request = Request::patch(format!("{path}?fieldManager={}", crate::kubeapi::FIELD_MANAGER))
            .header(header::CONTENT_TYPE, "application/merge-patch+json")
            .body(kube::client::Body::from(patch.to_string().into_bytes()))
            .map_err(|_| ProxyError::Path)?;
        self.client.send(request).await.map_err(ProxyError::Upstream)
    }

    /// Takes the run's link off an object that somebody else created between the proxy's read and
    /// the run's write, so it is not garbage-collected with the CR.
    pub async fn disown(&self, path: &str, grant: &Grant, link: Link) {
        const ATTEMPTS: usize = 5;
        for _ in 0..ATTEMPTS {
            let object = match self.read(path).await {
                Ok(Some(object)) => object,
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(target: TARGET, path, error = %error, "could not read an object the run did not create to unlink it");
                    return;
                }
            };
            let Some(patch) = grant.owner.unlink_patch(link, &object) else { return };
            match self.merge_patch(path, &patch).await.map(|response| response.status()) {
                Ok(code) if code.is_success() => {
                    tracing::info!(
                        target: TARGET,
                        path,
                        "object was created by someone else during the write: not linked to the CR"
                    );
                    return;
                }
                Ok(StatusCode::CONFLICT) => continue,
                Ok(code) => {
                    tracing::warn!(
                        target: TARGET,
                        path,
                        code = code.as_u16(),
                        "could not unlink an object the run did not create"
                    );
                    return;
                }
                Err(ProxyError::Upstream(error)) => {
                    tracing::warn!(target: TARGET, path, error = %error, "could not unlink an object the run did not create");
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// Starts watching the kind of a child the run just wrote, as the owner's watch entry allows.
    pub fn watch(&self, body: &Bytes, info: &RequestInfo, grant: &Grant, link: Link) {
        let Some(dependents) = &self.dependents else { return };
        if !grant.watch_dependents {
            return;
        }
        let Ok(object) = serde_json::from_slice::<Value>(body) else { return };
        let Some(kind) = object["kind"].as_str() else { return };
        let cluster_scoped = info.namespace.is_none();
        if link == Link::Annotations && cluster_scoped && !grant.watch_cluster_scoped {
            tracing::debug!(
                target: TARGET,
                kind,
                "cluster-scoped child is not watched (watchClusterScopedResources: false)"
            );
            return;
        }
        if grant
            .blacklist
            .iter()
            .any(|b| b.group == info.group && b.version == info.version && b.kind == kind)
        {
            tracing::debug!(target: TARGET, kind, "child kind is blacklisted: not watched");
            return;
        }
        let resource = ApiResource {
            group: info.group.clone(),
            version: info.version.clone(),
            api_version: info.api_version(),
            kind: kind.to_string(),
            plural: info.resource.clone(),
        };
        let owner = (grant.owner.gvk.group.clone(), grant.owner.gvk.kind.clone());
        dependents.ensure(&resource, !cluster_scoped, owner);
    }

    /// A single-object read: when the object belongs to the run's CR, make sure its kind is watched
    /// (this is how dependent watches come back after an operator restart).
    pub async fn read_back(
        &self,
        response: Response<kube::client::Body>,
        info: &RequestInfo,
        grant: &Grant,
        path: &str,
    ) -> Result<Response<Body>, ProxyError> {
        if !response.status().is_success() || self.dependents.is_none() || !grant.watch_dependents {
            return Ok(response.map(box_body));
        }
        let (parts, body) = response.into_parts();
        let mut bytes = collect(body).await?;
        if let Ok(object) = serde_json::from_slice::<Value>(&bytes)
            && grant.owner.is_linked(&object)
        {
            let link = grant.owner.link_for(info.namespace.as_deref());
            self.watch(&bytes, info, grant, link);
            if let Some(patch) = grant.owner.shard_patch(&object)
                && let Some(relabelled) = self.relabel(path, &patch).await
            {
                if let Some(version) = serde_json::from_slice::<Value>(&relabelled)
                    .ok()
                    .and_then(|object| Version::of(&object["metadata"]))
                {
                    self.wrote(grant, version);
                }
                // The run reads the child as it now is, so a later write of it does not conflict.
                bytes = relabelled;
            }
        }
        Ok(Response::from_parts(parts, full(bytes)))
    }

    /// With sharding: moves a child created before its CR changed shards to the CR's shard, so the
    /// new owner's dependent watch sees it. Returns the child as written, `None` if that failed.
    async fn relabel(&self, path: &str, patch: &Value) -> Option<Bytes> {
        match self.merge_patch(path, patch).await {
            Ok(response) if response.status().is_success() => {
                tracing::info!(target: TARGET, path, "relabelled a child for its owner's shard");
                collect(response.into_body()).await.ok()
            }
            Ok(response) => {
                tracing::warn!(
                    target: TARGET,
                    path,
                    code = response.status().as_u16(),
                    "could not relabel a child for its owner's shard"
                );
                None
            }
            Err(ProxyError::Upstream(error)) => {
                tracing::warn!(target: TARGET, path, %error, "could not relabel a child for its owner's shard");
                None
            }
            Err(_) => None,
        }
    }
}
