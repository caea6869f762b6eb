//! The API proxy playbooks talk to (upstream §7): plain HTTP on 127.0.0.1:`--proxy-port`, forwarding
//! every request to the API server with the operator's credentials. Each run authenticates with a
//! token issued for it alone; creates get the run's CR as owner, and the created kinds are watched.
//! Reads are never cached, so a playbook always reads its own writes. What a request gets is decided
//! in [`classify`]; what the proxy does to the children runs write is in [`children`]. A plan's
//! run (a plan, a validation) writes nothing: each of its requests is rebuilt in [`dry_run`].

pub mod children;
pub mod classify;
pub mod credentials;
pub mod dependents;
pub mod dry_run;
pub mod kubeconfig;
pub mod own_writes;
pub mod owner;
pub mod read_index;
pub mod read_watches;
pub mod reads;
pub mod request_info;
pub mod rights;
pub mod secrets;
pub mod throttle;
pub mod wire;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::Client;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use children::Children;
use classify::{Handling, Settle, classify, classify_plan, settle};
use credentials::{Credentials, Grant};
use dependents::Dependents;
use own_writes::Version;
use owner::{Link, Ownership, Prior, Write};
use read_watches::ReadWatches;
use request_info::RequestInfo;
use throttle::Throttle;
use wire::{Body, ProxyError, box_body, collect, full, status};

use crate::history::Touched;
use crate::http_server;

/// Connections served at once; further ones wait in the listen backlog until one ends. Runs are
/// capped by `--max-concurrent-reconciles`, each with a handful of connections, so this is only
/// reached by a process that opens connections and holds them.
const MAX_CONNECTIONS: usize = 512;

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

/// The proxy: its credentials, the upstream client, and the bookkeeping of runs' children.
pub struct Proxy {
    client: Client,
    credentials: Arc<Credentials>,
    children: Children,
    /// Re-runs of CRs whose reads changed; `None` with `--inject-owner-ref=false` (no owner routes).
    read_watches: Option<Arc<ReadWatches>>,
    port: u16,
    /// Permits for [`MAX_CONNECTIONS`].
    connections: Arc<tokio::sync::Semaphore>,
    /// The rate limits on runs' requests.
    throttle: Throttle,
}

impl Proxy {
    /// Binds 127.0.0.1:`port`. `dependents` is `None` with `--inject-owner-ref=false`.
    pub async fn bind(
        client: Client,
        port: u16,
        dependents: Option<Arc<Dependents>>,
        throttle: Throttle,
    ) -> Result<(Arc<Self>, TcpListener), Error> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .map_err(|source| Error::Listen { port, source })?;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
        let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let read_watches = dependents.clone().map(|dependents| ReadWatches::new(client.clone(), dependents));
        let children = Children::new(client.clone(), dependents);
        let proxy = Proxy {
            client,
            credentials: Arc::default(),
            children,
            read_watches,
            port,
            connections,
            throttle,
        };
        Ok((Arc::new(proxy), listener))
    }

    /// What re-runs CRs when objects their runs read change; `None` with `--inject-owner-ref=false`.
    pub fn read_watches(&self) -> Option<&Arc<ReadWatches>> {
        self.read_watches.as_ref()
    }

    /// The port playbooks connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Marks a run of `cr` in flight until the returned value is dropped, so that its writes to
    /// its children do not trigger it again; `None` when children are not watched.
    pub fn own_run(&self, cr: crate::history::ledger::CrKey) -> Option<own_writes::OwnRun> {
        self.children.dependents().map(|dependents| dependents.own_writes().started(cr))
    }

    /// The credential registry runs take their tokens from.
    pub fn credentials(&self) -> &Arc<Credentials> {
        &self.credentials
    }

    /// Serves connections until `shutdown` is cancelled: at most [`MAX_CONNECTIONS`] at once, each
    /// given [`http_server::HEADER_READ_TIMEOUT`] to send a request's headers.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        tracing::info!(port = self.port, inject_owner_ref = self.children.linked(), "proxy listening");
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
        if let Err(refused) = self.throttle.admit(&grant.bucket).await {
            tracing::warn!(
                kind = %grant.owner.gvk,
                namespace = grant.owner.namespace.as_deref().unwrap_or_default(),
                name = %grant.owner.name,
                %method,
                path,
                limit = refused.limit.as_str(),
                retry_after_ms = u64::try_from(refused.retry_after.as_millis()).unwrap_or(u64::MAX),
                "refused a run's request: the proxy's rate limit is reached (429)"
            );
            return refused.response();
        }
        let span = crate::telemetry::request_span(&grant.trace, method.as_str(), &path);
        let response = match self.forward(request, &grant).instrument(span.clone()).await {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%method, path, error = %error, "proxy request failed");
                status(StatusCode::BAD_GATEWAY, "ServiceUnavailable", &error.to_string())
            }
        };
        span.record("http.response.status_code", response.status().as_u16());
        response
    }

    /// Forwards a request; an answer about Secrets is asked for as JSON and tapped on its way to the
    /// run, so that the run's output is masked. One the tap cannot read is not passed on.
    async fn forward(
        &self,
        mut request: Request<Incoming>,
        grant: &Grant,
    ) -> Result<Response<Body>, ProxyError> {
        let uri = request.uri();
        if let Err(denied) = grant.rights.check(request.method(), uri.path(), uri.query(), &grant.owner) {
            tracing::warn!(
                kind = %grant.owner.gvk,
                namespace = grant.owner.namespace.as_deref().unwrap_or_default(),
                name = %grant.owner.name,
                method = %request.method(),
                path = uri.path(),
                denied = %denied,
                "refused a run's request: its watch's permissions do not allow it"
            );
            return Ok(status(StatusCode::FORBIDDEN, "Forbidden", &denied.to_string()));
        }
        let carries_secrets = secrets::carries_secrets(request.uri().path());
        if carries_secrets {
            secrets::ask_for_json(request.headers_mut());
        }
        let path = request.uri().path().to_string();
        let response = self.route(request, grant).await?;
        if !carries_secrets || !response.status().is_success() {
            return Ok(response);
        }
        if !secrets::readable(response.headers()) {
            tracing::warn!(
                path,
                content_type = ?response.headers().get(header::CONTENT_TYPE),
                content_encoding = ?response.headers().get(header::CONTENT_ENCODING),
                "an answer about Secrets is not plain JSON: it is not passed on"
            );
            return Ok(status(
                StatusCode::BAD_GATEWAY,
                "ServiceUnavailable",
                "the proxy passes answers about Secrets only as uncompressed JSON, which it reads to mask their values",
            ));
        }
        let learned = grant.secrets.clone();
        Ok(response.map(|body| box_body(secrets::Tap::new(body, learned))))
    }

    async fn route(&self, request: Request<Incoming>, grant: &Grant) -> Result<Response<Body>, ProxyError> {
        let handling = if grant.plan_only {
            classify_plan(request.headers())
        } else {
            classify(request.method(), request.headers(), request.uri(), self.children.linked())
        };
        match handling {
            Handling::Upgrade => self.forward_upgrade(request, grant).await,
            Handling::Refuse => {
                let message = "a plan's run may not send this request: an upgrade (exec, attach, port-forward) \
                               reaches a running container, which a dry run cannot hold back";
                tracing::warn!(path = request.uri().path(), "refused a plan's upgrade");
                Ok(status(StatusCode::FORBIDDEN, "Forbidden", message))
            }
            Handling::Rebuild => self.rebuilt(request, grant).await,
            Handling::Write { info, write, link, verb } => {
                self.write(request, &info, write, link, verb, grant).await
            }
            Handling::ReadBack { info } => {
                let (parts, body) = prepare(request, grant).await?;
                let response = self.send(&parts, body).await?;
                tracing::debug!(path = parts.uri.path(), code = response.status().as_u16(), "proxied read");
                let response = note_read(response, &info, &parts, grant).await?;
                self.children.read_back(response, &info, grant, parts.uri.path()).await
            }
            Handling::List { info } => {
                let (parts, body) = prepare(request, grant).await?;
                let response = self.send(&parts, body).await?;
                let code = response.status();
                tracing::debug!(path = parts.uri.path(), code = code.as_u16(), "proxied list");
                // Lists stream through unread (they may be large): the read is kept without its kind.
                let query = parts.uri.query().unwrap_or_default();
                if let Some(read) = reads::read_of(&info, query, code, &Value::Null, &grant.owner) {
                    grant.read(read);
                }
                Ok(response.map(box_body))
            }
            Handling::Record { info, verb } => {
                let (parts, body) = prepare(request, grant).await?;
                let response = self.send(&parts, body.clone()).await?;
                let code = response.status().as_u16();
                tracing::debug!(method = %parts.method, path = parts.uri.path(), code, "proxied write");
                self.pass_write(response, &info, verb, &body, grant).await
            }
            Handling::Pass => {
                let (parts, body) = prepare(request, grant).await?;
                let response = self.send(&parts, body).await?;
                let code = response.status().as_u16();
                tracing::debug!(method = %parts.method, path = parts.uri.path(), code, "proxied");
                Ok(response.map(box_body))
            }
        }
    }

    /// A plan's request sent as [`dry_run::rebuild`] rebuilds it: a write as a server-side dry run,
    /// with the path, query and options body the proxy wrote; or refused with the reason.
    async fn rebuilt(&self, request: Request<Incoming>, grant: &Grant) -> Result<Response<Body>, ProxyError> {
        let (mut parts, body) = prepare(request, grant).await?;
        let rebuilt =
            dry_run::rebuild(&parts.method, parts.uri.path(), parts.uri.query(), &parts.headers, &body);
        let rebuilt = match rebuilt {
            Ok(rebuilt) => rebuilt,
            Err(refusal) => {
                tracing::warn!(
                    method = %parts.method,
                    path = parts.uri.path(),
                    reason = %refusal.reason,
                    "refused a plan's request"
                );
                return Ok(status(StatusCode::FORBIDDEN, "Forbidden", &refusal.to_string()));
            }
        };
        parts.uri = rebuilt.path_and_query.parse().map_err(|_| ProxyError::Path)?;
        let body = match rebuilt.body {
            Some(options) => {
                // The options the proxy wrote replace the run's body, as JSON, whatever it was sent as.
                let headers = &mut parts.headers;
                headers.insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                headers.remove(header::CONTENT_ENCODING);
                headers.remove(header::TRANSFER_ENCODING);
                headers.insert(header::CONTENT_LENGTH, http::HeaderValue::from(options.len()));
                options
            }
            None => body,
        };
        let response = self.send(&parts, body).await?;
        let code = response.status().as_u16();
        let (method, path, write) = (&parts.method, parts.uri.path(), rebuilt.write);
        tracing::debug!(%method, path, write, code, "proxied a plan's request, a write as a dry run");
        Ok(response.map(box_body))
    }

    /// A create, replace or apply: its object linked to the run's CR when `link` and the ownership
    /// allow, the write logged and recorded, and the child watched or disowned once answered.
    async fn write(
        &self,
        request: Request<Incoming>,
        info: &RequestInfo,
        write: Write,
        link: bool,
        verb: &'static str,
        grant: &Grant,
    ) -> Result<Response<Body>, ProxyError> {
        let (mut parts, body) = prepare(request, grant).await?;
        let (body, ownership, injected) = if link {
            let ownership = self.ownership(write, info, grant, parts.uri.path()).await;
            match ownership {
                Ownership::Claim | Ownership::Keep => {
                    let (body, injected) = inject(body, info, grant, &parts.headers)?;
                    (body, Some(ownership), injected)
                }
                Ownership::Leave => (body, Some(ownership), None),
            }
        } else {
            (body, None, None)
        };
        if injected.is_some() {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        let response = self.send(&parts, body.clone()).await?;
        let code = response.status();
        tracing::info!(
            method = %parts.method,
            resource = %info.resource,
            namespace = info.namespace.as_deref().unwrap_or_default(),
            name = info.name.as_deref().unwrap_or_default(),
            owner = %grant.owner.resource_annotation(),
            ownership = ?ownership,
            injected = ?injected,
            code = code.as_u16(),
            "proxied write"
        );
        match settle(write, ownership, injected, code) {
            Settle::Disown(link) => self.children.disown(parts.uri.path(), grant, link).await,
            Settle::Watch(link) => self.children.watch(&body, info, grant, link),
            Settle::Nothing => {}
        }
        self.pass_write(response, info, verb, &body, grant).await
    }

    /// Sends a prepared request on to the API server.
    async fn send(&self, parts: &Parts, body: Bytes) -> Result<Response<kube::client::Body>, ProxyError> {
        let upstream = Request::from_parts(parts.clone(), kube::client::Body::from(body));
        self.client.send(upstream).await.map_err(ProxyError::Upstream)
    }

    /// Passes a write's answer on; a successful one is recorded for the run's history, with the
    /// object's kind and name from the answer (or the request).
    async fn pass_write(
        &self,
        response: Response<kube::client::Body>,
        info: &RequestInfo,
        verb: &'static str,
        request_body: &Bytes,
        grant: &Grant,
    ) -> Result<Response<Body>, ProxyError> {
        if !response.status().is_success() {
            return Ok(response.map(box_body));
        }
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
        if let Some(version) = Version::of(&answer["metadata"]) {
            self.children.wrote(grant, version);
        }
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
        match self.children.read(path).await {
            Ok(Some(object)) => grant.owner.ownership(write, Prior::Present(&object), namespace),
            Ok(None) => grant.owner.ownership(write, Prior::Absent, namespace),
            Err(error) => {
                tracing::warn!(path, error = %error, "could not read the object before writing it: not linking it to the CR");
                grant.owner.ownership(write, Prior::Unknown, namespace)
            }
        }
    }

    /// Exec, attach, port-forward: forward the upgrade, then copy bytes both ways.
    async fn forward_upgrade(
        &self,
        mut request: Request<Incoming>,
        grant: &Grant,
    ) -> Result<Response<Body>, ProxyError> {
        let downstream = hyper::upgrade::on(&mut request);
        let (mut parts, _) = request.into_parts();
        strip_client_headers(&mut parts.headers);
        act_as(&mut parts.headers, grant)?;
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

/// Records a single-object GET in the run's read-set (unless the object is the run's own), and
/// hands the answer on.
async fn note_read(
    response: Response<kube::client::Body>,
    info: &RequestInfo,
    parts: &Parts,
    grant: &Grant,
) -> Result<Response<kube::client::Body>, ProxyError> {
    let code = response.status();
    if !(code.is_success() || code == StatusCode::NOT_FOUND) {
        return Ok(response);
    }
    let (head, body) = response.into_parts();
    let bytes = collect(body).await?;
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let query = parts.uri.query().unwrap_or_default();
    if let Some(read) = reads::read_of(info, query, code, &answer, &grant.owner) {
        grant.read(read);
    }
    Ok(Response::from_parts(head, kube::client::Body::from(bytes.to_vec())))
}

/// Links the object in a create, replace or apply body to the run's CR.
fn inject(
    body: Bytes,
    info: &RequestInfo,
    grant: &Grant,
    headers: &http::HeaderMap,
) -> Result<(Bytes, Option<Link>), ProxyError> {
    let mut object: Value = if classify::is_apply(headers) {
        serde_saphyr::from_slice(&body).map_err(|e| ProxyError::Body(e.to_string()))?
    } else {
        serde_json::from_slice(&body).map_err(|e| ProxyError::Body(e.to_string()))?
    };
    let link = grant.owner.inject(&mut object, info.namespace.as_deref());
    let body = serde_json::to_vec(&object).map_err(|e| ProxyError::Body(e.to_string()))?;
    Ok((Bytes::from(body), link))
}

/// A request as it goes on: without what must not reach the API server, as the run's kind's
/// identity when it has one, with only its path and query, and its body read.
async fn prepare(request: Request<Incoming>, grant: &Grant) -> Result<(Parts, Bytes), ProxyError> {
    let (mut parts, body) = request.into_parts();
    strip_client_headers(&mut parts.headers);
    act_as(&mut parts.headers, grant)?;
    parts.uri = path_and_query(&parts.uri)?;
    let body = collect(body).await?;
    Ok((parts, body))
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

/// With `--kind-identities`, the run's request is sent as its kind's ServiceAccount
/// (`Impersonate-User`; the API server adds the account's groups itself).
fn act_as(headers: &mut http::HeaderMap, grant: &Grant) -> Result<(), ProxyError> {
    if let Some(identity) = &grant.rights.identity {
        let value =
            http::HeaderValue::from_str(identity).map_err(|_| ProxyError::Identity(identity.clone()))?;
        headers.insert(http::HeaderName::from_static("impersonate-user"), value);
    }
    Ok(())
}

fn bearer_token<B>(request: &Request<B>) -> Option<&str> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")).map(str::trim)
}

/// The path and query only: kube's client adds the API server's address.
fn path_and_query(uri: &http::Uri) -> Result<http::Uri, ProxyError> {
    uri.path_and_query().map(|pq| pq.as_str()).unwrap_or("/").parse().map_err(|_| ProxyError::Path)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_client_slow_to_send_its_headers_is_cut_off_and_connections_beyond_the_cap_wait() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (listener, address) = http_server::test_client::listener().await;
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let connections = Arc::new(tokio::sync::Semaphore::new(1));
        let proxy = Proxy {
            client: client.clone(),
            credentials: Arc::default(),
            children: Children::new(client, None),
            read_watches: None,
            port: address.port(),
            connections,
            throttle: Throttle::unlimited(),
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
}
