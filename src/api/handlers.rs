//! The JSON endpoints. Each one authenticates the caller, authorises the verb on the CR's own
//! resource, then reads with the operator's client.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State as Extract};
use axum::response::IntoResponse;
use http::{HeaderMap, StatusCode, header};
use kube::api::{Api, DynamicObject, ListParams, Patch, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Error, Kind, State, views};
use crate::access::{Action, User};
use crate::decoded::Decoded;
use crate::history::record;
use crate::ident::Ident;
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
    let mut runs = state.history.runs(uid, namespace(&path)).await?;
    // A record the operator did not write (its ident is not one it makes) is not listed: each of
    // its routes would refuse it anyway.
    runs.retain(|record| match record::ident_of(record) {
        Ok(_) => true,
        Err(foreign) => {
            tracing::warn!(record = %foreign.record, namespace = %path.namespace, "a run record with a foreign ident is not listed");
            false
        }
    });
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
        Found::Record(record, _) => Ok(Json(views::run_detail(&record))),
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

/// Largest body a plan takes: a CR.
const MAX_PLAN_BODY: usize = 3 << 20;

/// `POST .../crs/{namespace}/{name}/plan` with the proposed object (or just its spec) as the body:
/// what the change would do (`update` on the CR, as for the change itself). The CR's playbook or
/// role runs in check mode with every write a server-side dry run; nothing is written, and the
/// CR's status and run history stay as they are.
pub async fn plan(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<CrPath>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, Error> {
    let (kind, user, object) = authorized_cr(&state, &path, &headers, "update").await?;
    let spec = proposed_spec(&body, &path)?;
    let live: DynamicObject = serde_json::from_value(object)
        .map_err(|error| Error::BadRequest(format!("the CR cannot be read as an object: {error}")))?;
    let spec = admitted_spec(&state, kind, &path, &live, spec).await?;
    let planned = kind.planner.plan(&live, spec, &user.name).await;
    tracing::info!(user = %user.name, kind = %kind.resource.kind, namespace = %path.namespace, name = %path.name, result = planned.result, "plan made through the API");
    Ok(Json(serde_json::to_value(planned).unwrap_or(Value::Null)))
}

/// A plural and namespace, as kubectl names a CR.
#[derive(Debug, Deserialize)]
pub struct PluralPath {
    namespace: String,
    plural: String,
    name: String,
}

/// `POST /api/v1/namespaces/{namespace}/{plural}/{name}/plan`: [`plan`], the kind found by its
/// plural among the watched kinds.
pub async fn plan_by_plural(
    state: Extract<Arc<State>>,
    Path(path): Path<PluralPath>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, Error> {
    let mut groups = state.kinds.iter().filter(|k| k.resource.plural == path.plural);
    let (Some(kind), None) = (groups.next(), groups.next()) else {
        return Err(Error::NotFound(format!("one watched kind with the plural {}", path.plural)));
    };
    let group = if kind.resource.group.is_empty() { "core".to_string() } else { kind.resource.group.clone() };
    let cr = CrPath { group, plural: path.plural, namespace: path.namespace, name: path.name };
    plan(state, Path(cr), headers, body).await
}

/// The spec a plan proposes: the body's `spec` when it is an object with one, else the body. A
/// body that names another CR is refused.
fn proposed_spec(body: &[u8], path: &CrPath) -> Result<Value, Error> {
    if body.len() > MAX_PLAN_BODY {
        return Err(Error::BadRequest(format!("a plan's body is at most {MAX_PLAN_BODY} bytes")));
    }
    let body: Value = serde_json::from_slice(body)
        .or_else(|_| serde_saphyr::from_slice(body))
        .map_err(|error| Error::BadRequest(format!("the body is not a JSON or YAML object: {error}")))?;
    let Value::Object(mut object) = body else {
        return Err(Error::BadRequest("the body is the proposed object or its spec: a JSON object".into()));
    };
    let Some(spec) = object.remove("spec") else { return Ok(Value::Object(object)) };
    let named = |key: &str| object.get("metadata").and_then(|m| m.get(key)).and_then(Value::as_str);
    if named("name").is_some_and(|name| name != path.name)
        || named("namespace").is_some_and(|ns| Some(ns) != namespace(path))
    {
        return Err(Error::BadRequest("the proposed object names another CR than the path".into()));
    }
    Ok(spec)
}

/// The spec the API server would store for `spec`: the CR replaced in a server-side dry run, so
/// its schema (pruning, defaults, validation) and admission (webhooks, policies, a watch's own
/// `validate`) apply before a plan runs, and the plan runs what would be stored. The dry run is the
/// operator's; the caller's right to update the CR was checked before.
async fn admitted_spec(
    state: &State,
    kind: &Kind,
    path: &CrPath,
    live: &DynamicObject,
    spec: Value,
) -> Result<Value, Error> {
    let mut proposed = live.clone();
    proposed.data["spec"] = spec;
    let params = PostParams { dry_run: true, field_manager: Some(crate::kubeapi::FIELD_MANAGER.into()) };
    match with_timeout(cr_api(state, kind, path).replace(&path.name, &params, &proposed)).await {
        Ok(admitted) => {
            Ok(admitted.data.get("spec").cloned().unwrap_or_else(|| Value::Object(Default::default())))
        }
        Err(kubeapi::Error::Kube(kube::Error::Api(status))) => Err(Error::Refused {
            what: format!("spec of {}", path.name()),
            code: status.code,
            message: status.message,
        }),
        Err(source) => Err(api_error(source, path, "dry-run the proposed spec of")),
    }
}

/// A run of a CR, recorded (with its ident, checked) or in flight.
pub(super) enum Found {
    Record(Value, Ident),
    Live(Arc<crate::history::live::LiveRun>),
}

/// The run `path.run` of the CR `uid`: its record, or the run in flight with that ident. A record
/// whose ident the operator does not make is refused here, for every route: nothing is read or
/// written under its name.
pub(super) async fn find_run(state: &State, path: &RunPath, uid: &str) -> Result<Found, Error> {
    if let Some(live) = state.live.of(uid).filter(|run| run.ident == path.run) {
        return Ok(Found::Live(live));
    }
    let cr = path.cr();
    let record = state.history.run(namespace(&cr), &path.run).await?;
    match record {
        Some(record) if record["spec"]["owner"]["uid"] == uid => match record::ident_of(&record) {
            Ok(ident) => Ok(Found::Record(record, ident)),
            Err(foreign) => {
                tracing::warn!(record = %foreign.record, namespace = %path.namespace, "refused a run record with a foreign ident");
                Err(Error::BadRequest(format!("run {} of {}: {foreign}", path.run, cr.name())))
            }
        },
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn path() -> CrPath {
        CrPath { group: "g".into(), plural: "things".into(), namespace: "ns".into(), name: "a".into() }
    }

    #[test]
    fn a_plan_takes_the_proposed_objects_spec_or_the_spec_itself() {
        let object = json!({"apiVersion": "g/v1", "kind": "Thing", "metadata": {"name": "a", "namespace": "ns"}, "spec": {"size": 3}});
        assert_eq!(proposed_spec(object.to_string().as_bytes(), &path()).unwrap(), json!({"size": 3}));
        assert_eq!(proposed_spec(b"{\"size\": 3}", &path()).unwrap(), json!({"size": 3}));
        assert_eq!(proposed_spec(b"spec:\n  size: 3\n", &path()).unwrap(), json!({"size": 3}), "YAML too");
    }

    #[test]
    fn a_plan_of_another_cr_or_of_no_object_is_a_bad_request() {
        let other = json!({"metadata": {"name": "b"}, "spec": {}});
        assert!(matches!(proposed_spec(other.to_string().as_bytes(), &path()), Err(Error::BadRequest(_))));
        let elsewhere = json!({"metadata": {"name": "a", "namespace": "other"}, "spec": {}});
        assert!(matches!(
            proposed_spec(elsewhere.to_string().as_bytes(), &path()),
            Err(Error::BadRequest(_))
        ));
        assert!(matches!(proposed_spec(b"[1]", &path()), Err(Error::BadRequest(_))));
        assert!(matches!(proposed_spec(b"{not json: [", &path()), Err(Error::BadRequest(_))));
    }
}
