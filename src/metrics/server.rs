//! The `/metrics` endpoint: OpenMetrics text, plain or (`--metrics-secure`) over HTTPS with the
//! caller's token and RBAC checked (`--metrics-require-rbac`).

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::Metrics;
use crate::access::{self, Access, Action};
use crate::http_server::{Body, method_not_allowed, not_found, respond, serve, text};

/// Content type of [`Metrics::encode`] output: prometheus-client writes OpenMetrics text.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How `/metrics` is served with `--metrics-secure`: over HTTPS, and with `--metrics-require-rbac`
/// only to callers whose bearer token may `get` the path (as controller-runtime's metrics filter).
pub struct Secure {
    /// The certificate (`--metrics-cert-dir`, or self-signed).
    pub tls: crate::tls::Server,
    /// Token and RBAC checks, with `--metrics-require-rbac`.
    pub access: Option<Arc<Access>>,
}

/// Serves `GET /metrics` with [`Metrics::encode`] until `shutdown` is cancelled.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    secure: Option<Secure>,
    shutdown: CancellationToken,
) {
    let (tls, access) = match secure {
        Some(Secure { tls, access }) => {
            let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
            tracing::info!(server = "metrics", %address, fingerprint = %tls.fingerprint, rbac = access.is_some(), "serving metrics over HTTPS");
            (Some(TlsAcceptor::from(tls.config)), access)
        }
        None => (None, None),
    };
    serve("metrics", listener, tls, shutdown, move |request| {
        let (metrics, access) = (metrics.clone(), access.clone());
        async move {
            if let Some(access) = access
                && let Err(denied) = authorize(&access, &request).await
            {
                return denied;
            }
            metrics_response(&metrics, request.method(), request.uri().path())
        }
    })
    .await;
}

/// Lets the request through when its bearer token may `get` its path; else 401, 403, or 500 when
/// the API server could not answer.
async fn authorize(access: &Access, request: &Request<Incoming>) -> Result<(), Response<Body>> {
    let authorization = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let checked = match access.authenticate(authorization).await {
        Ok(user) => {
            access
                .authorize(&user, Action::Path { verb: "get", path: request.uri().path().to_string() })
                .await
        }
        Err(error) => Err(error),
    };
    checked.map_err(|error| match error {
        access::Error::Unauthenticated(_) => text(StatusCode::UNAUTHORIZED, "Unauthorized"),
        access::Error::Forbidden { .. } => text(StatusCode::FORBIDDEN, &format!("Forbidden: {error}")),
        access::Error::Review { .. } => {
            tracing::warn!(error = %crate::logging::error_chain(&error), "could not check a metrics caller");
            text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
        }
    })
}

fn metrics_response(metrics: &Metrics, method: &Method, path: &str) -> Response<Body> {
    match (path, method) {
        ("/metrics", &Method::GET | &Method::HEAD) => {
            respond(StatusCode::OK, OPENMETRICS_CONTENT_TYPE, metrics.encode())
        }
        ("/metrics", _) => method_not_allowed("GET"),
        _ => not_found(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_server::test_client::{listener, request};

    #[tokio::test]
    async fn metrics_endpoint_serves_openmetrics_text() {
        let metrics = Metrics::new("1.2.3", "abc");
        let (listener, address) = listener().await;
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve_metrics(listener, metrics, None, shutdown.clone()));

        let reply = request(address, "GET", "/metrics", "").await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("content-type"), Some(OPENMETRICS_CONTENT_TYPE));
        assert!(reply.body.contains("ansible_operator_build_info{commit=\"abc\",version=\"1.2.3\"} 1\n"));
        assert!(reply.body.ends_with("# EOF\n"));

        assert_eq!(request(address, "GET", "/other", "").await.status, 404);
        assert_eq!(request(address, "POST", "/metrics", "").await.status, 405);

        shutdown.cancel();
        server.await.unwrap();
    }
}
