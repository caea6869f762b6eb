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
use hyper_util::rt::TokioIo;
use kube::Client;
use kube::api::ApiResource;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use credentials::{Credentials, Grant};
use dependents::Dependents;
use owner::Link;
use request_info::RequestInfo;

/// Largest request or single-object response body the proxy reads into memory.
const MAX_BODY: usize = 16 * 1024 * 1024;

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
        let proxy = Proxy { client, credentials: Arc::default(), dependents, port };
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

    /// Serves connections until `shutdown` is cancelled.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        tracing::info!(port = self.port, inject_owner_ref = self.dependents.is_some(), "proxy listening");
        loop {
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
                let connection =
                    http1::Builder::new().serve_connection(TokioIo::new(stream), service).with_upgrades();
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "proxy connection ended");
                }
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
        parts.headers.remove(header::AUTHORIZATION);
        parts.headers.remove(header::HOST);
        parts.uri = path_and_query(&parts.uri)?;
        let info = RequestInfo::parse(parts.uri.path());
        let query = parts.uri.query().unwrap_or_default().to_string();
        let creates = info.as_ref().is_some_and(|info| writes_object(&parts.method, &parts.headers, info));

        let body = collect(body).await?;
        let (body, link) = match (&info, creates && self.dependents.is_some()) {
            (Some(info), true) => self.inject(body, info, grant, &parts.headers)?,
            _ => (body, None),
        };
        if link.is_some() {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        let upstream = Request::from_parts(parts.clone(), kube::client::Body::from(body.clone()));
        let response = self.client.send(upstream).await.map_err(ProxyError::Upstream)?;
        let code = response.status();

        match &info {
            Some(info) if creates => {
                tracing::info!(
                    method = %parts.method,
                    resource = %info.resource,
                    namespace = info.namespace.as_deref().unwrap_or_default(),
                    name = info.name.as_deref().unwrap_or_default(),
                    owner = %grant.owner.resource_annotation(),
                    injected = ?link,
                    code = code.as_u16(),
                    "proxied write"
                );
                if code.is_success()
                    && let Some(link) = link
                {
                    self.watch_child(&body, info, grant, link);
                }
                Ok(response.map(box_body))
            }
            Some(info) if parts.method == Method::GET && info.name.is_some() && single_read(info, &query) => {
                tracing::debug!(path = parts.uri.path(), code = code.as_u16(), "proxied read");
                self.read_back(response, info, grant).await
            }
            _ => {
                tracing::debug!(method = %parts.method, path = parts.uri.path(), code = code.as_u16(), "proxied");
                Ok(response.map(box_body))
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
    ) -> Result<Response<Body>, ProxyError> {
        if !response.status().is_success() || self.dependents.is_none() || !grant.watch_dependents {
            return Ok(response.map(box_body));
        }
        let (parts, body) = response.into_parts();
        let bytes = collect(body).await?;
        if let Ok(object) = serde_json::from_slice::<Value>(&bytes)
            && grant.owner.is_linked(&object)
        {
            let link = grant.owner.link_for(info.namespace.as_deref());
            self.watch_child(&bytes, info, grant, link);
        }
        Ok(Response::from_parts(parts, full(bytes)))
    }

    /// Exec, attach, port-forward: forward the upgrade, then copy bytes both ways.
    async fn forward_upgrade(&self, mut request: Request<Incoming>) -> Result<Response<Body>, ProxyError> {
        let downstream = hyper::upgrade::on(&mut request);
        let (mut parts, _) = request.into_parts();
        parts.headers.remove(header::AUTHORIZATION);
        parts.headers.remove(header::HOST);
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
}

/// True for requests that create or replace an object: POST to a collection, PUT of an object, and
/// server-side apply. Subresources are left alone.
fn writes_object(method: &Method, headers: &http::HeaderMap, info: &RequestInfo) -> bool {
    if info.subresource.is_some() {
        return false;
    }
    match *method {
        Method::POST => info.name.is_none(),
        Method::PUT => info.name.is_some(),
        Method::PATCH => content_type(headers).starts_with("application/apply-patch"),
        _ => false,
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
        assert!(writes_object(&Method::POST, &json, &collection));
        assert!(writes_object(&Method::PUT, &json, &object));
        assert!(writes_object(&Method::PATCH, &headers("application/apply-patch+yaml"), &object));
        assert!(!writes_object(&Method::PATCH, &headers("application/merge-patch+json"), &object));
        assert!(!writes_object(&Method::PUT, &json, &status));
        assert!(!writes_object(&Method::GET, &json, &object));
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
