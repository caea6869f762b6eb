//! The proxy's bodies and failures on the wire: bodies read within a limit, answers boxed for hyper,
//! and the API-style `Status` a failed request gets.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::json;

/// Largest request or single-object response body the proxy reads into memory.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// Response body type of the proxy.
pub type Body = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A failed proxied request.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The API server could not be reached or did not answer.
    #[error("request to the API server failed: {0}")]
    Upstream(#[source] kube::Error),
    /// A body was too large, unreadable or not what its content type says.
    #[error("could not read the body: {0}")]
    Body(String),
    /// The request's path is not one the proxy can send on.
    #[error("invalid request path")]
    Path,
    /// The kind's identity (`--kind-identities`) cannot be sent as a header.
    #[error("the kind's identity {0:?} is not a header value")]
    Identity(String),
    /// The proxy's own read of an object was refused.
    #[error("the API server answered {0}")]
    Read(StatusCode),
}

/// Reads a whole body, up to [`MAX_BODY`].
pub async fn collect<B>(body: B) -> Result<Bytes, ProxyError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let limited = http_body_util::Limited::new(body, MAX_BODY);
    limited.collect().await.map(|c| c.to_bytes()).map_err(|e| ProxyError::Body(e.to_string()))
}

/// Passes a body on as it streams.
pub fn box_body<B>(body: B) -> Body
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A body already read.
pub fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed_unsync()
}

/// A Kubernetes `Status` response, as the API server would send it.
pub fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    let mut response = Response::new(full(Bytes::from(body.to_string())));
    *response.status_mut() = code;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
