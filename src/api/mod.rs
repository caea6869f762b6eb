//! The operator's HTTPS API and web console on `--api-bind-address`: the watched kinds, their CRs
//! with a status summary, each CR's conditions and run history, a run's tasks and log (live while
//! it runs), and a request to reconcile a CR now, or to pause or resume it. Every request carries a bearer token the API
//! server reviews (`TokenReview`), and is allowed only as far as the user's RBAC on the CR's own
//! resource goes (`SubjectAccessReview`: reading needs `get`/`list`; a reconcile, a pause or a resume
//! `patch`; a plan `update`).

mod admission;
pub use admission::Gate;
mod console;
mod handlers;
mod inputs;
mod log;
mod views;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::StatusCode;
use kube::Client;
use kube::api::ApiResource;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::access::{self, Access};
use crate::history::{History, LiveRuns};
use crate::kubeapi;
use crate::{http_server, tls};

/// A watched kind, as the API serves it.
#[derive(Debug, Clone)]
pub struct Kind {
    /// Its API resource (group, version, kind, plural).
    pub resource: ApiResource,
    /// Whether it is namespaced.
    pub namespaced: bool,
    /// What composes its runs (for a run's inputs).
    pub composer: Arc<crate::reconcile::inputs::Composer>,
    /// Runs plans of its CRs.
    pub planner: crate::reconcile::Planner,
}

/// What the API reads from and writes to.
pub struct State {
    /// The operator's client.
    pub client: Client,
    /// Authentication and authorisation.
    pub access: Access,
    /// The run records.
    pub history: Arc<History>,
    /// The runs in flight.
    pub live: Arc<LiveRuns>,
    /// The watched kinds.
    pub kinds: Vec<Kind>,
    /// `--runner-dir`: where the runs' artifacts (and so their logs) are.
    pub runner_dir: PathBuf,
    /// The validate playbooks' runner, when a watch has one.
    pub validator: Option<Arc<crate::admission::Validator>>,
    /// The convert playbooks' runner, when a watch has one.
    pub converter: Option<Arc<crate::admission::Converter>>,
    /// Who may call the webhook, and how often.
    pub gate: admission::Gate,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").field("kinds", &self.kinds.len()).finish_non_exhaustive()
    }
}

/// Why a request failed, as its JSON answer says.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not authenticated, or not allowed.
    #[error(transparent)]
    Access(#[from] access::Error),
    /// No such kind, CR or run.
    #[error("{0} not found")]
    NotFound(String),
    /// The request's body is not what the endpoint takes.
    #[error("{0}")]
    BadRequest(String),
    /// The API server refused a proposed object (its schema, an admission policy, a conflict),
    /// with its own code and message.
    #[error("the API server refused the proposed {what}: {message}")]
    Refused {
        /// What was proposed.
        what: String,
        /// The API server's code.
        code: u16,
        /// The API server's message.
        message: String,
    },
    /// The API server failed.
    #[error("{action}")]
    Api {
        /// What was attempted.
        action: String,
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
    /// The run history could not be read.
    #[error(transparent)]
    History(#[from] crate::history::Error),
    /// The run's record holds no inputs.
    #[error(transparent)]
    NoInputs(#[from] crate::history::record::NoInput),
    /// The run's inputs could not be composed.
    #[error("compose the run's inputs")]
    Inputs(#[source] crate::reconcile::inputs::Error),
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = match &self {
            Error::Access(access::Error::Unauthenticated(_)) => StatusCode::UNAUTHORIZED,
            Error::Access(access::Error::Forbidden { .. }) => StatusCode::FORBIDDEN,
            Error::NotFound(_) | Error::NoInputs(_) => StatusCode::NOT_FOUND,
            Error::Inputs(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::Refused { code, .. } => {
                StatusCode::from_u16(*code).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY)
            }
            Error::Access(access::Error::Review { .. }) | Error::Api { .. } | Error::History(_) => {
                StatusCode::BAD_GATEWAY
            }
        };
        if status == StatusCode::BAD_GATEWAY || status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::warn!(error = %crate::logging::error_chain(&self), "API request failed");
        }
        let reason = status.canonical_reason().unwrap_or_default();
        let body =
            json!({"code": status.as_u16(), "reason": reason, "message": crate::logging::error_chain(&self)});
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The routes: JSON under `/api/v1/`, the console at `/`.
fn router(state: Arc<State>) -> Router {
    let cr = "/api/v1/kinds/{group}/{plural}/crs/{namespace}/{name}";
    Router::new()
        .route("/api/v1/kinds", get(handlers::kinds))
        .route("/api/v1/kinds/{group}/{plural}/crs", get(handlers::crs))
        .route(cr, get(handlers::cr))
        .route(&format!("{cr}/runs/{{run}}"), get(handlers::run))
        .route(&format!("{cr}/runs/{{run}}/log"), get(log::log))
        .route(&format!("{cr}/runs/{{run}}/inputs"), get(inputs::inputs))
        .route(&format!("{cr}/reconcile"), post(handlers::reconcile))
        .route(&format!("{cr}/pause"), post(handlers::pause))
        .route(&format!("{cr}/resume"), post(handlers::resume))
        .route(&format!("{cr}/plan"), post(handlers::plan))
        .route("/api/v1/namespaces/{namespace}/{plural}/{name}/plan", post(handlers::plan_by_plural))
        .route(
            "/validate/{group}/{version}/{kind}",
            post(admission::validate).layer(DefaultBodyLimit::max(crate::admission::review::BODY_LIMIT)),
        )
        .route(
            "/convert/{group}/{kind}",
            post(admission::convert).layer(DefaultBodyLimit::max(crate::admission::conversion::BODY_LIMIT)),
        )
        .merge(console::routes())
        .fallback(|| async { Error::NotFound("no such endpoint".into()) })
        .with_state(state)
}

/// Serves HTTPS on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, tls: tls::Server, state: Arc<State>, shutdown: CancellationToken) {
    let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(server = "api", %address, fingerprint = %tls.fingerprint, "listening (HTTPS)");
    let router = router(state);
    http_server::serve("api", listener, Some(TlsAcceptor::from(tls.config)), shutdown, move |request| {
        let router = router.clone();
        async move {
            match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        }
    })
    .await;
}
