//! The web console: one page of plain HTML, CSS and JavaScript embedded in the binary (no CDN, no
//! build step). It calls the JSON API with the token the user pastes, kept in the tab's session
//! storage only.

use std::sync::Arc;

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::get;
use http::{HeaderValue, header};

use super::State;

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// Only this origin's own files; no inline script, no framing.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                      img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// `/`, `/console.js`, `/console.css`.
pub fn routes() -> Router<Arc<State>> {
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", INDEX) }))
        .route("/console.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/console.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY)),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
}
