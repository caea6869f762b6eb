//! `POST /validate/{group}/{version}/{kind}`: the validating webhook the API server calls with an
//! `AdmissionReview` (no bearer token: the API server's call is not a user's; the answer only says
//! allowed or why not). Every answer is an `AdmissionReview`; an error of ours denies.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State as Extract};
use serde::Deserialize;
use serde_json::Value;

use super::State;
use crate::admission::{Verdict, review};
use crate::watches::Gvk;

/// The kind a webhook validates.
#[derive(Debug, Deserialize)]
pub struct KindPath {
    group: String,
    version: String,
    kind: String,
}

/// Runs the kind's validate playbook on the request and answers. The body is taken as bytes (at
/// most [`review::BODY_LIMIT`], see the route) and read by the validator, which answers a body it
/// cannot read with an `AdmissionReview` too.
pub async fn validate(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<KindPath>,
    body: Bytes,
) -> Json<Value> {
    let gvk = Gvk { group: path.group, version: path.version, kind: path.kind };
    Json(match &state.validator {
        Some(validator) => validator.review(&gvk, &body).await,
        None => review::answer(
            &review::uid_of(&body),
            &Verdict::Denied(format!("the operator has no validate playbook for {gvk}")),
        ),
    })
}
