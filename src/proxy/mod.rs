//! The API proxy playbooks talk to (upstream §7): plain HTTP on 127.0.0.1:`--proxy-port`, forwarding
//! every request to the API server with the operator's credentials. Each run authenticates with a
//! token issued for it alone; creates get the run's CR as owner, and the created kinds are watched.
//! Reads are never cached, so a playbook always reads its own writes.

pub mod credentials;
pub mod dependents;
pub mod kubeconfig;
pub mod owner;
pub mod request_info;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::Client;
use kube::api::ApiResource;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use credentials::{Credentials, Grant};
use dependents::Dependents;
use owner::{Link, Ownership, Prior, Write};
use request_info::RequestInfo;

use crate::history::Touched;
use crate::http_server;

/// Largest request or single-object response body the proxy reads into memory.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// Connections served at once; further ones wait in the listen backlog until one ends. Runs are
/// capped by `--max-concurrent-reconciles`, each with a handful of connections, so this is only
/// reached by a process that opens connections and holds them.
const MAX_CONNECTIONS: usize = 512;

/// Response body type of the proxy.
type Body = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The port is taken or not allowed.
    #[error("listen on 127.0.0.1:{port}")]
    Listen {
        /// The port.
        port: u16,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// The proxy: its credentials, the dependent-watch registry, and the upstream client.
pub struct Proxy {
    client: Client,
    credentials: Arc<Credentials>,
    dependents: Option<Arc<Dependents>>,
    port: u16,
    /// Permits for [`MAX_CONNECTIONS`].
    connections: Arc<tokio::sync::Semaphore>,
}

impl Proxy {
    /// Binds 127.0.0.1:`port`. `dependents` is `None` with `--inject-owner-ref=false`.
    pub async fn bind(
        client: Client,
        port: u16,
        dependents: Option<Arc<Dependents>>,
    ) -> Result<(Arc<Self>, TcpListener), Error> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .map_err(|source| Error::Listen { port, source })?;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
        let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let proxy = Proxy { client, credentials: Arc::default(), dependents, port, connections };
        Ok((Arc::new(proxy), listener))
    }

    /// The port playbooks connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The credential registry runs take their tokens from.
    pub fn credentials(&self) -> &Arc<Credentials> {
        &self.credentials
    }

    /// Serves connections until `shutdown` is cancelled: at most [`MAX_CONNECTIONS`] at once, each
    /// given [`http_server::HEADER_READ_TIMEOUT`] to send a request's headers.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        tracing::info!(port = self.port, inject_owner_ref = self.dependents.is_some(), "proxy listening");
        loop {
            let permit = tokio::select! {
                permit = self.connections.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
                _ = shutdown.cancelled() => return,
            };
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!(%error, "proxy accept failed");
                        continue;
                    }
                },
                _ = shutdown.cancelled() => return,
            };
            let proxy = self.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let proxy = proxy.clone();
                    async move { Ok::<_, Infallible>(proxy.handle(request).await) }
                });
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(http_server::HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "proxy connection ended");
                }
                drop(permit);
            });
        }
    }

    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let Some(grant) = bearer_token(&request).and_then(|token| self.credentials.lookup(token)) else {
            tracing::warn!(%method, path, "proxy request without a valid run credential");
            return status(StatusCode::UNAUTHORIZED, "Unauthorized", "a valid run credential is required");
        };
        match self.forward(request, &grant).await {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%method, path, error = %error, "proxy request failed");
                status(StatusCode::BAD_GATEWAY, "ServiceUnavailable", &error.to_string())
            }
        }
    }

    async fn forward(&self, request: Request<Incoming>, grant: &Grant) -> Result<Response<Body>, ProxyError> {
        if is_upgrade(&request) {
            return self.forward_upgrade(request).await;
        }
        let (mut parts, body) = request.into_parts();
        strip_client_headers(&mut parts.headers);
        parts.uri = path_and_query(&parts.uri)?;
        let info = RequestInfo::parse(parts.uri.path());
        let query = parts.uri.query().unwrap_or_default().to_string();
        let write = info.as_ref().and_then(|info| object_write(&parts.method, &parts.headers, info));

        let body = collect(body).await?;
        let (body, ownership, link) = match (&info, write, self.dependents.is_some()) {
            (Some(info), Some(write), true) => {
                let ownership = self.ownership(write, info, grant, parts.uri.path()).await;
                match ownership {
                    Ownership::Claim | Ownership::Keep => {
                        let (body, link) = self.inject(body, info, grant, &parts.headers)?;
                        (body, Some(ownership), link)
                    }
                    Ownership::Leave => (body, Some(ownership), None),
                }
            }
            _ => (body, None, None),
        };
        if link.is_some() {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        let upstream = Request::from_parts(parts.clone(), kube::client::Body::from(body.clone()));
        let response = self.client.send(upstream).await.map_err(ProxyError::Upstream)?;
        let code = response.status();

        let recorded = info.as_ref().and_then(|info| recorded_verb(&parts.method, &parts.headers, info));
        match (&info, write) {
            (Some(info), Some(write)) => {
                tracing::info!(
                    method = %parts.method,
                    resource = %info.resource,
                    namespace = info.namespace.as_deref().unwrap_or_default(),
                    name = info.name.as_deref().unwrap_or_default(),
                    owner = %grant.owner.resource_annotation(),
                    ownership = ?ownership,
                    injected = ?link,
                    code = code.as_u16(),
                    "proxied write"
                );
                if let (true, Some(link)) = (code.is_success(), link) {
                    // The object appeared between the read and the write: this run did not create it.
                    let lost_race = ownership == Some(Ownership::Claim)
                        && write != Write::Create
                        && code == StatusCode::OK;
                    if lost_race {
                        self.disown(parts.uri.path(), grant, link).await;
                    } else {
                        self.watch_child(&body, info, grant, link);
                    }
                }
                self.pass_write(response, info, recorded, &body, grant).await
            }
            (Some(info), None)
                if parts.method == Method::GET && info.name.is_some() && single_read(info, &query) =>
            {
                tracing::debug!(path = parts.uri.path(), code = code.as_u16(), "proxied read");
                self.read_back(response, info, grant, parts.uri.path()).await
            }
            (Some(info), None) if recorded.is_some() => {
                tracing::debug!(method = %parts.method, path = parts.uri.path(), code = code.as_u16(), "proxied write");
                self.pass_write(response, info, recorded, &body, grant).await
            }
            _ => {
                tracing::debug!(method = %parts.method, path = parts.uri.path(), code = code.as_u16(), "proxied");
                Ok(response.map(box_body))
            }
        }
    }

    /// Passes a write's answer on; a successful one is recorded for the run's history, with the
    /// object's kind and name from the answer (or the request).
    async fn pass_write(
        &self,
        response: Response<kube::client::Body>,
        info: &RequestInfo,
        verb: Option<&'static str>,
        request_body: &Bytes,
        grant: &Grant,
    ) -> Result<Response<Body>, ProxyError> {
        let Some(verb) = verb.filter(|_| response.status().is_success()) else {
            return Ok(response.map(box_body));
        };
        let (parts, body) = response.into_parts();
        let bytes = collect(body).await?;
        let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let sent: Value = serde_json::from_slice(request_body)
            .or_else(|_| serde_saphyr::from_slice(request_body))
            .unwrap_or(Value::Null);
        let object = if answer["kind"].is_string() && answer["kind"] != "Status" { &answer } else { &sent };
        let kind = match (object["kind"].as_str(), &info.subresource) {
            (Some(kind), Some(sub)) => format!("{kind}/{sub}"),
            (Some(kind), None) => kind.to_string(),
            (None, Some(sub)) => format!("{}/{sub}", info.resource),
            (None, None) => info.resource.clone(),
        };
        let name = info.name.clone().or_else(|| object["metadata"]["name"].as_str().map(str::to_string));
        grant.touched(Touched {
            verb,
            kind,
            group: info.group.clone(),
            namespace: info.namespace.clone(),
            name: name.unwrap_or_default(),
        });
        Ok(Response::from_parts(parts, full(bytes)))
    }

    /// Whether a write links its object to the run's CR. A create always does; a replace or apply
    /// reads the object first, and links it only when it is absent (the write creates it) or already
    /// the CR's child.
    async fn ownership(&self, write: Write, info: &RequestInfo, grant: &Grant, path: &str) -> Ownership {
        let namespace = info.namespace.as_deref();
        if write == Write::Create {
            return grant.owner.ownership(write, Prior::Absent, namespace);
        }
        match self.read(path).await {
            Ok(Some(object)) => grant.owner.ownership(write, Prior::Present(&object), namespace),
            Ok(None) => grant.owner.ownership(write, Prior::Absent, namespace),
            Err(error) => {
                tracing::warn!(path, error = %error, "could not read the object before writing it: not linking it to the CR");
                grant.owner.ownership(write, Prior::Unknown, namespace)
            }
        }
    }

    /// The object at `path` as the API server has it now, `None` when there is none.
    async fn read(&self, path: &str) -> Result<Option<Value>, ProxyError> {
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

    /// Takes the run's link off an object that somebody else created between the proxy's read and
    /// the run's write, so it is not garbage-collected with the CR.
    async fn disown(&self, path: &str, grant: &Grant, link: Link) {
        const ATTEMPTS: usize = 5;
        for _ in 0..ATTEMPTS {
            let object = match self.read(path).await {
                Ok(Some(object)) => object,
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(path, error = %error, "could not read an object the run did not create to unlink it");
                    return;
                }
            };
            let Some(patch) = grant.owner.unlink_patch(link, &object) else { return };
            let request = Request::patch(format!("{path}?fieldManager={}", crate::kubeapi::FIELD_MANAGER))
                .header(header::CONTENT_TYPE, "application/merge-patch+json")
                .body(kube::client::Body::from(patch.to_string().into_bytes()))
                .map_err(|_| ProxyError::Path);
            let response = match request {
                Ok(request) => self.client.send(request).await.map(|r| r.status()),
                Err(_) => return,
            };
            match response {
                Ok(code) if code.is_success() => {
                    tracing::info!(
                        path,
                        "object was created by someone else during the write: not linked to the CR"
                    );
                    return;
                }
                Ok(StatusCode::CONFLICT) => continue,
                Ok(code) => {
                    tracing::warn!(
                        path,
                        code = code.as_u16(),
                        "could not unlink an object the run did not create"
                    );
                    return;
                }
                Err(error) => {
                    tracing::warn!(path, error = %error, "could not unlink an object the run did not create");
                    return;
                }
            }
        }
    }

    /// Links the object in a create, replace or apply body to the run's CR.
    fn inject(
        &self,
        body: Bytes,
        info: &RequestInfo,
        grant: &Grant,
        headers: &http::HeaderMap,
    ) -> Result<(Bytes, Option<Link>), ProxyError> {
        let apply = content_type(headers).starts_with("application/apply-patch");
        let mut object: Value = if apply {
            serde_saphyr::from_slice(&body).map_err(|e| ProxyError::Body(e.to_string()))?
        } else {
            serde_json::from_slice(&body).map_err(|e| ProxyError::Body(e.to_string()))?
        };
        let link = grant.owner.inject(&mut object, info.namespace.as_deref());
        let body = serde_json::to_vec(&object).map_err(|e| ProxyError::Body(e.to_string()))?;
        Ok((Bytes::from(body), link))
    }

    /// Starts watching the kind of a child the run just wrote, as the owner's watch entry allows.
    fn watch_child(&self, body: &Bytes, info: &RequestInfo, grant: &Grant, link: Link) {
        let Some(dependents) = &self.dependents else { return };
        if !grant.watch_dependents {
            return;
        }
        let Ok(object) = serde_json::from_slice::<Value>(body) else { return };
        let Some(kind) = object["kind"].as_str() else { return };
        let cluster_scoped = info.namespace.is_none();
        if link == Link::Annotations && cluster_scoped && !grant.watch_cluster_scoped {
            tracing::debug!(kind, "cluster-scoped child is not watched (watchClusterScopedResources: false)");
            return;
        }
        if grant
            .blacklist
            .iter()
            .any(|b| b.group == info.group && b.version == info.version && b.kind == kind)
        {
            tracing::debug!(kind, "child kind is blacklisted: not watched");
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
    async fn read_back(
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
        let bytes = collect(body).await?;
        let mut bytes = bytes;
        if let Ok(object) = serde_json::from_slice::<Value>(&bytes)
            && grant.owner.is_linked(&object)
        {
            let link = grant.owner.link_for(info.namespace.as_deref());
            self.watch_child(&bytes, info, grant, link);
            if let Some(patch) = grant.owner.shard_patch(&object)
                && let Some(relabelled) = self.relabel(path, &patch).await
            {
                // The run reads the child as it now is, so a later write of it does not conflict.
                bytes = relabelled;
            }
        }
        Ok(Response::from_parts(parts, full(bytes)))
    }

    /// With sharding: moves a child created before its CR changed shards to the CR's shard, so the
    /// new owner's dependent watch sees it. Returns the child as written, `None` if that failed.
    async fn relabel(&self, path: &str, patch: &Value) -> Option<Bytes> {
        let request = Request::patch(format!("{path}?fieldManager={}", crate::kubeapi::FIELD_MANAGER))
            .header(header::CONTENT_TYPE, "application/merge-patch+json")
            .body(kube::client::Body::from(patch.to_string().into_bytes()))
            .ok()?;
        match self.client.send(request).await {
            Ok(response) if response.status().is_success() => {
                tracing::info!(path, "relabelled a child for its owner's shard");
                collect(response.into_body()).await.ok()
            }
            Ok(response) => {
                tracing::warn!(
                    path,
                    code = response.status().as_u16(),
                    "could not relabel a child for its owner's shard"
                );
                None
            }
            Err(error) => {
                tracing::warn!(path, %error, "could not relabel a child for its owner's shard");
                None
            }
        }
    }

    /// Exec, attach, port-forward: forward the upgrade, then copy bytes both ways.
    async fn forward_upgrade(&self, mut request: Request<Incoming>) -> Result<Response<Body>, ProxyError> {
        let downstream = hyper::upgrade::on(&mut request);
        let (mut parts, _) = request.into_parts();
        strip_client_headers(&mut parts.headers);
        parts.uri = path_and_query(&parts.uri)?;
        let upstream = Request::from_parts(parts, kube::client::Body::empty());
        let mut response = self.client.send(upstream).await.map_err(ProxyError::Upstream)?;
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let upstream = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                if let (Ok(down), Ok(up)) = (downstream.await, upstream.await) {
                    let _ =
                        tokio::io::copy_bidirectional(&mut TokioIo::new(down), &mut TokioIo::new(up)).await;
                }
            });
        }
        Ok(response.map(box_body))
    }
}

/// A failed proxied request.
#[derive(Debug, thiserror::Error)]
enum ProxyError {
    #[error("request to the API server failed: {0}")]
    Upstream(#[source] kube::Error),
    #[error("could not read the body: {0}")]
    Body(String),
    #[error("invalid request path")]
    Path,
    #[error("the API server answered {0}")]
    Read(StatusCode),
}

/// The verb a write is recorded under in the run history: writes of objects and of their status;
/// other subresources (logs, exec, scale) are not objects the run changed.
fn recorded_verb(method: &Method, headers: &http::HeaderMap, info: &RequestInfo) -> Option<&'static str> {
    if info.subresource.as_deref().is_some_and(|sub| sub != "status") {
        return None;
    }
    match *method {
        Method::POST if info.name.is_none() => Some("create"),
        Method::PUT if info.name.is_some() => Some("update"),
        Method::PATCH if content_type(headers).starts_with("application/apply-patch") => Some("apply"),
        Method::PATCH => Some("patch"),
        Method::DELETE if info.name.is_some() => Some("delete"),
        Method::DELETE => Some("deletecollection"),
        _ => None,
    }
}

/// Requests that may create an object: POST to a collection, PUT of an object, and server-side
/// apply. Subresources are left alone.
fn object_write(method: &Method, headers: &http::HeaderMap, info: &RequestInfo) -> Option<Write> {
    if info.subresource.is_some() {
        return None;
    }
    match *method {
        Method::POST if info.name.is_none() => Some(Write::Create),
        Method::PUT if info.name.is_some() => Some(Write::Replace),
        Method::PATCH if content_type(headers).starts_with("application/apply-patch") => Some(Write::Apply),
        _ => None,
    }
}

/// Single-object GETs of the object itself (not watches, not subresources such as logs).
fn single_read(info: &RequestInfo, query: &str) -> bool {
    info.subresource.is_none() && !query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1")
}

fn content_type(headers: &http::HeaderMap) -> &str {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

fn is_upgrade(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("upgrade"))
}

/// Drops what must not reach the API server from a playbook: its credential and host (the
/// operator's client sets its own), and every `Impersonate-*` header (`-User`, `-Group`, `-Uid`,
/// `-Extra-*`). The operator's identity may be allowed to impersonate; a run must not borrow that.
fn strip_client_headers(headers: &mut http::HeaderMap) {
    headers.remove(header::AUTHORIZATION);
    headers.remove(header::HOST);
    let impersonating: Vec<http::HeaderName> =
        headers.keys().filter(|name| name.as_str().starts_with("impersonate-")).cloned().collect();
    if !impersonating.is_empty() {
        let names: Vec<&str> = impersonating.iter().map(http::HeaderName::as_str).collect();
        tracing::warn!(headers = ?names, "proxy dropped a run's impersonation headers: it acts as the operator");
    }
    for name in impersonating {
        headers.remove(name);
    }
}

fn bearer_token<B>(request: &Request<B>) -> Option<&str> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")).map(str::trim)
}

/// The path and query only: kube's client adds the API server's address.
fn path_and_query(uri: &http::Uri) -> Result<http::Uri, ProxyError> {
    uri.path_and_query().map(|pq| pq.as_str()).unwrap_or("/").parse().map_err(|_| ProxyError::Path)
}

async fn collect<B>(body: B) -> Result<Bytes, ProxyError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let limited = http_body_util::Limited::new(body, MAX_BODY);
    limited.collect().await.map(|c| c.to_bytes()).map_err(|e| ProxyError::Body(e.to_string()))
}

fn box_body<B>(body: B) -> Body
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    body.map_err(Into::into).boxed_unsync()
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed_unsync()
}

/// A Kubernetes `Status` response, as the API server would send it.
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    let mut response = Response::new(full(Bytes::from(body.to_string())));
    *response.status_mut() = code;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn headers(content_type: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
        headers
    }

    #[test]
    fn creates_replaces_and_applies_are_writes_of_an_object() {
        let collection = RequestInfo::parse("/api/v1/namespaces/ns/configmaps").unwrap();
        let object = RequestInfo::parse("/api/v1/namespaces/ns/configmaps/c").unwrap();
        let status = RequestInfo::parse("/apis/g/v1/namespaces/ns/things/t/status").unwrap();
        let json = headers("application/json");
        assert_eq!(object_write(&Method::POST, &json, &collection), Some(Write::Create));
        assert_eq!(object_write(&Method::PUT, &json, &object), Some(Write::Replace));
        assert_eq!(
            object_write(&Method::PATCH, &headers("application/apply-patch+yaml"), &object),
            Some(Write::Apply)
        );
        assert_eq!(object_write(&Method::PATCH, &headers("application/merge-patch+json"), &object), None);
        assert_eq!(object_write(&Method::PUT, &json, &status), None);
        assert_eq!(object_write(&Method::GET, &json, &object), None);
    }

    #[test]
    fn writes_of_objects_and_their_status_are_recorded() {
        let object = RequestInfo::parse("/api/v1/namespaces/ns/configmaps/c").unwrap();
        let status = RequestInfo::parse("/apis/g/v1/namespaces/ns/things/t/status").unwrap();
        let exec = RequestInfo::parse("/api/v1/namespaces/ns/pods/p/exec").unwrap();
        let collection = RequestInfo::parse("/api/v1/namespaces/ns/configmaps").unwrap();
        let json = headers("application/merge-patch+json");
        assert_eq!(recorded_verb(&Method::PATCH, &json, &object), Some("patch"));
        assert_eq!(
            recorded_verb(&Method::PATCH, &headers("application/apply-patch+yaml"), &object),
            Some("apply")
        );
        assert_eq!(recorded_verb(&Method::PATCH, &json, &status), Some("patch"));
        assert_eq!(recorded_verb(&Method::DELETE, &json, &object), Some("delete"));
        assert_eq!(recorded_verb(&Method::POST, &json, &collection), Some("create"));
        assert_eq!(recorded_verb(&Method::POST, &json, &exec), None);
        assert_eq!(recorded_verb(&Method::GET, &json, &object), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_slow_to_send_its_headers_is_cut_off_and_connections_beyond_the_cap_wait() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (listener, address) = http_server::test_client::listener().await;
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let connections = Arc::new(tokio::sync::Semaphore::new(1));
        let proxy = Proxy {
            client,
            credentials: Arc::default(),
            dependents: None,
            port: address.port(),
            connections,
        };
        let shutdown = CancellationToken::new();
        tokio::spawn(Arc::new(proxy).serve(listener, shutdown.clone()));
        let start = tokio::time::Instant::now();

        // Holds the only connection with half a request.
        let mut slow = tokio::net::TcpStream::connect(address).await.unwrap();
        slow.write_all(b"GET /api HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        // Waits in the backlog, then gets its answer once the slow one is cut off.
        let waiting = http_server::test_client::request(address, "GET", "/api", "");
        let reply =
            tokio::time::timeout(Duration::from_secs(60), waiting).await.expect("served after the timeout");
        assert_eq!(reply.status, 401);
        assert!(start.elapsed() >= http_server::HEADER_READ_TIMEOUT, "{:?}", start.elapsed());
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(1), slow.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "the slow connection was closed");
        shutdown.cancel();
    }

    #[test]
    fn impersonation_credentials_and_host_never_reach_the_api_server() {
        let mut headers = http::HeaderMap::new();
        for (name, value) in [
            ("Authorization", "Bearer run-token"),
            ("Host", "127.0.0.1:8888"),
            ("Impersonate-User", "admin"),
            ("Impersonate-Group", "system:masters"),
            ("impersonate-group", "other"),
            ("Impersonate-Uid", "1"),
            ("Impersonate-Extra-Scopes", "all"),
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ] {
            headers.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
        }
        strip_client_headers(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(http::HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["accept", "content-type"]);
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        let request = Request::builder().header("Authorization", "Bearer abc").body(()).unwrap();
        assert_eq!(bearer_token(&request), Some("abc"));
        let basic = Request::builder().header("Authorization", "Basic Zm9vOmJhcg==").body(()).unwrap();
        assert_eq!(bearer_token(&basic), None);
    }

    #[test]
    fn watches_are_not_single_reads() {
        let object = RequestInfo::parse("/api/v1/namespaces/ns/configmaps/c").unwrap();
        assert!(single_read(&object, ""));
        assert!(!single_read(&object, "watch=true&fieldSelector=x"));
    }
}
