//! The JSON endpoints. Each one authenticates the caller, authorises the verb on the CR's own
//! resource, then reads with the operator's client.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State as Extract};
use axum::response::IntoResponse;
use http::{HeaderMap, StatusCode, header};
use kube::api::{Api, DynamicObject, ListParams, Patch};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Error, Kind, State, views};
use crate::access::{Action, User};
use crate::decoded::Decoded;
use crate::kubeapi::{self, with_timeout};
use crate::reconcile::annotations::{PAUSED, RECONCILE_REQUESTED, ReconcileRequest};

/// The path of one CR: `{group}/{plural}/crs/{namespace}/{name}`, `-` as the namespace of a
/// cluster-scoped CR, `core` as the core group.
#[derive(Debug, Clone, Deserialize)]
pub struct CrPath {
    group: String,
    plural: String,
    namespace: String,
    name: String,
}

/// A run's path: its CR's, then the run.
#[derive(Debug, Deserialize)]
pub struct RunPath {
    group: String,
    plural: String,
    namespace: String,
    name: String,
    /// The run's record name, or its ident while in flight.
    pub(super) run: String,
}

/// A kind's path.
#[derive(Debug, Deserialize)]
pub struct KindPath {
    group: String,
    plural: String,
}

/// `?namespace=` of a CR list.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    namespace: Option<String>,
}

/// `GET /api/v1/kinds`: the watched kinds (any authenticated user).
pub async fn kinds(Extract(state): Extract<Arc<State>>, headers: HeaderMap) -> Result<Json<Value>, Error> {
    authenticate(&state, &headers).await?;
    let kinds: Vec<Value> = state.kinds.iter().map(views::kind).collect();
    Ok(Json(json!({"kinds": kinds, "history": views::history(&state.history.store())})))
}

/// `GET /api/v1/kinds/{group}/{plural}/crs[?namespace=]`: the CRs of a kind with their state and
/// latest run (`list` on the kind, in the namespace or in all).
pub async fn crs(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<KindPath>,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    let kind = find_kind(&state, &path.group, &path.plural)?;
    let namespace = query.namespace.filter(|n| !n.is_empty() && kind.namespaced);
    let user = authenticate(&state, &headers).await?;
    state.access.authorize(&user, action(kind, "list", namespace.clone(), None)).await?;
    // Each CR decoded on its own: one too deep to decode is listed by its metadata alone.
    let api = match &namespace {
        Some(namespace) => Api::<Decoded>::namespaced_with(state.client.clone(), namespace, &kind.resource),
        None => Api::all_with(state.client.clone(), &kind.resource),
    };
    let listed = with_timeout(api.list(&ListParams::default()))
        .await
        .map_err(|source| Error::Api { action: format!("list {}", kind.resource.plural), source })?;
    let records = state.history.all_runs(namespace.as_deref()).await?;
    let mut items = Vec::new();
    for object in listed.items {
        let object = match object {
            Decoded::Object(object) => serde_json::to_value(&object),
            Decoded::Undecodable(undecodable) => serde_json::to_value(undecodable.stand_in()),
        };
        let object = object.unwrap_or(Value::Null);
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
        let latest = records.iter().find(|r| r["spec"]["owner"]["uid"] == uid);
        items.push(views::cr_summary(&object, latest, state.live.of(uid).as_deref()));
    }
    items.sort_by_key(|cr| (cr["namespace"].to_string(), cr["name"].to_string()));
    Ok(Json(json!({"kind": views::kind(kind), "items": items})))
}

/// `GET .../crs/{namespace}/{name}`: one CR with its conditions and runs (`get` on it).
pub async fn cr(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<CrPath>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    let (_, _, object) = authorized_cr(&state, &path, &headers, "get").await?;
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    let runs = state.history.runs(uid, namespace(&path)).await?;
    Ok(Json(views::cr_detail(&object, &runs, state.live.of(uid).as_deref())))
}

/// `GET .../crs/{namespace}/{name}/runs/{run}`: one run of the CR with its tasks and objects, by
/// its record's name, or by ident while it is in flight.
pub async fn run(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<RunPath>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    let (_, _, object) = authorized_cr(&state, &path.cr(), &headers, "get").await?;
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    match find_run(&state, &path, uid).await? {
        Found::Record(record) => Ok(Json(views::run_detail(&record))),
        Found::Live(run) => Ok(Json(views::live_run(&run))),
    }
}

/// `POST .../crs/{namespace}/{name}/reconcile`: asks for a run now (`patch` on the CR). The request
/// is an annotation on the CR, so whichever replica leads runs it, and the API server's audit log
/// shows it.
pub async fn reconcile(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<CrPath>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, Error> {
    let (kind, user, _) = authorized_cr(&state, &path, &headers, "patch").await?;
    let request = ReconcileRequest { at: jiff::Timestamp::now().to_string(), by: user.name.clone() };
    let value = serde_json::to_string(&request).unwrap_or_default();
    annotate(&state, kind, &path, json!({RECONCILE_REQUESTED: value})).await?;
    tracing::info!(user = %user.name, kind = %kind.resource.kind, namespace = %path.namespace, name = %path.name, "reconcile requested through the API");
    Ok((StatusCode::ACCEPTED, Json(json!({"requested": request.at, "by": request.by}))))
}

/// `POST .../crs/{namespace}/{name}/pause`: pauses the CR (`patch` on it) by setting its
/// `ansible.sdk.operatorframework.io/paused` annotation to `"true"`, as `kubectl annotate` would.
pub async fn pause(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<CrPath>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    set_paused(&state, &path, &headers, true).await
}

/// `POST .../crs/{namespace}/{name}/resume`: removes the pause annotation (`patch` on the CR), so
/// the CR runs once at once.
pub async fn resume(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<CrPath>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    set_paused(&state, &path, &headers, false).await
}

async fn set_paused(
    state: &State,
    path: &CrPath,
    headers: &HeaderMap,
    paused: bool,
) -> Result<Json<Value>, Error> {
    let (kind, user, _) = authorized_cr(state, path, headers, "patch").await?;
    let value = if paused { json!("true") } else { Value::Null };
    annotate(state, kind, path, json!({PAUSED: value})).await?;
    tracing::info!(user = %user.name, kind = %kind.resource.kind, namespace = %path.namespace, name = %path.name, paused, "pause set through the API");
    Ok(Json(json!({"paused": paused, "by": user.name})))
}

/// Merges `annotations` into the CR's (a `null` value removes one) with the operator's client.
async fn annotate(state: &State, kind: &Kind, path: &CrPath, annotations: Value) -> Result<(), Error> {
    let patch = json!({"metadata": {"annotations": annotations}});
    with_timeout(cr_api(state, kind, path).patch(
        &path.name,
        &kubeapi::patch_params(),
        &Patch::Merge(&patch),
    ))
    .await
    .map_err(|source| api_error(source, path, "annotate"))?;
    Ok(())
}

/// A run of a CR, recorded or in flight.
pub(super) enum Found {
    Record(Value),
    Live(Arc<crate::history::live::LiveRun>),
}

/// The run `path.run` of the CR `uid`: its record, or the run in flight with that ident.
pub(super) async fn find_run(state: &State, path: &RunPath, uid: &str) -> Result<Found, Error> {
    if let Some(live) = state.live.of(uid).filter(|run| run.ident == path.run) {
        return Ok(Found::Live(live));
    }
    let cr = path.cr();
    let record = state.history.run(namespace(&cr), &path.run).await?;
    match record {
        Some(record) if record["spec"]["owner"]["uid"] == uid => Ok(Found::Record(record)),
        _ => Err(Error::NotFound(format!("run {} of {}", path.run, cr.name()))),
    }
}

impl RunPath {
    /// The CR's path.
    pub(super) fn cr(&self) -> CrPath {
        CrPath {
            group: self.group.clone(),
            plural: self.plural.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl CrPath {
    fn name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Authenticates the caller, lets them `verb` the CR, and reads it (as JSON).
pub(super) async fn authorized_cr<'s>(
    state: &'s State,
    path: &CrPath,
    headers: &HeaderMap,
    verb: &'static str,
) -> Result<(&'s Kind, User, Value), Error> {
    let kind = find_kind(state, &path.group, &path.plural)?;
    let user = authenticate(state, headers).await?;
    let namespace = namespace(path).map(str::to_string);
    state.access.authorize(&user, action(kind, verb, namespace, Some(path.name.clone()))).await?;
    let object = with_timeout(cr_api(state, kind, path).get_opt(&path.name))
        .await
        .map_err(|source| api_error(source, path, "read"))?
        .ok_or_else(|| Error::NotFound(format!("{} {}", kind.resource.kind, path.name())))?;
    Ok((kind, user, serde_json::to_value(&object).unwrap_or(Value::Null)))
}

fn cr_api(state: &State, kind: &Kind, path: &CrPath) -> Api<DynamicObject> {
    match namespace(path) {
        Some(namespace) => Api::namespaced_with(state.client.clone(), namespace, &kind.resource),
        None => Api::all_with(state.client.clone(), &kind.resource),
    }
}

fn api_error(source: kubeapi::Error, path: &CrPath, action: &str) -> Error {
    Error::Api { action: format!("{action} {}", path.name()), source }
}

/// The CR's namespace (`None` for `-`, a cluster-scoped CR).
pub(super) fn namespace(path: &CrPath) -> Option<&str> {
    Some(path.namespace.as_str()).filter(|n| *n != "-")
}

async fn authenticate(state: &State, headers: &HeaderMap) -> Result<User, Error> {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    Ok(state.access.authenticate(authorization).await?)
}

fn find_kind<'s>(state: &'s State, group: &str, plural: &str) -> Result<&'s Kind, Error> {
    let group = if group == "core" { "" } else { group };
    state
        .kinds
        .iter()
        .find(|k| k.resource.group == group && k.resource.plural == plural)
        .ok_or_else(|| Error::NotFound(format!("watched kind {plural}.{group}")))
}

fn action(kind: &Kind, verb: &'static str, namespace: Option<String>, name: Option<String>) -> Action {
    Action::Resource {
        verb,
        group: kind.resource.group.clone(),
        resource: kind.resource.plural.clone(),
        subresource: None,
        namespace: namespace.filter(|_| kind.namespaced),
        name,
    }
}

/// Lets `user` read the run logs of the CR at `path`: `get` on `<plural>/log`, as `kubectl logs`
/// needs `get` on `pods/log`. A log prints task results, which `get` on the CR alone must not show.
pub(super) async fn authorize_log(
    state: &State,
    kind: &Kind,
    path: &CrPath,
    user: &User,
) -> Result<(), Error> {
    let namespace = namespace(path).map(str::to_string);
    let mut action = action(kind, "get", namespace, Some(path.name.clone()));
    if let Action::Resource { subresource, .. } = &mut action {
        *subresource = Some("log".into());
    }
    Ok(state.access.authorize(user, action).await?)
}
