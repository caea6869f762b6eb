//! The AdmissionReview v1 exchange, pure: what a request asks ([`Request`]), the extra var a
//! validation run gets about it, and the answer a run's report (or our failure to run) becomes.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::runner::Report;

/// The extra var a validation run gets besides the incoming object's usual vars.
pub const ADMISSION_VAR: &str = "ansible_operator_admission";

/// The most bytes of a review body the webhook reads: an object and its old version, each at most
/// the API server's 3 MiB request limit.
pub const BODY_LIMIT: usize = 7 << 20;

/// The longest `request.uid` echoed back (the API server sends a UUID).
const UID_LIMIT: usize = 128;

/// What a review asks about: the operations the webhook is registered for
/// ([`super::configuration`]), and no others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
}

impl Operation {
    /// The name the API server gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The parts of an `AdmissionReview` request a validation reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Echoed in the answer.
    pub uid: String,
    /// `CREATE` or `UPDATE`.
    pub operation: Operation,
    /// The namespace of the request (empty for cluster-scoped objects).
    pub namespace: String,
    /// The incoming object, its namespace filled in from the request when absent.
    pub object: Value,
    /// The object before an UPDATE; `null` otherwise.
    pub old_object: Value,
    /// `request.userInfo`: who asks.
    pub user: Value,
    /// Whether the request is itself a dry run.
    pub dry_run: bool,
}

/// Why a review could not be read. Values are quoted cut short: the caller may be anyone.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body is not an AdmissionReview with a request.
    #[error("the body is not an admission.k8s.io/v1 AdmissionReview with a request: {0}")]
    Malformed(String),
    /// A field holds a value the API server never sends.
    #[error("{field} {value:?} is not {expected}")]
    Field {
        /// The field, e.g. `request.operation`.
        field: &'static str,
        /// What it holds, its first 64 characters.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
}

/// The body as the webhook reads it: every field but the objects decoded, the objects kept as
/// raw JSON (skipped over without recursion) and decoded apart, so a deep object gets an answer.
#[derive(Deserialize)]
struct Review<'a> {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(borrow)]
    request: Option<RawRequest<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRequest<'a> {
    uid: Option<String>,
    operation: Option<String>,
    #[serde(default)]
    namespace: String,
    #[serde(borrow)]
    object: Option<&'a RawValue>,
    #[serde(borrow)]
    old_object: Option<&'a RawValue>,
    #[serde(default)]
    user_info: UserInfo,
    #[serde(default)]
    dry_run: bool,
}

#[derive(Default, Deserialize)]
struct UserInfo {
    #[serde(default)]
    username: String,
    #[serde(default)]
    groups: Vec<String>,
}

/// The `request.uid` of a body, when it can be read at all: the answer to a body that is not a
/// review still echoes it.
pub fn uid_of(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Head {
        request: Option<HeadRequest>,
    }
    #[derive(Deserialize)]
    struct HeadRequest {
        uid: Option<String>,
    }
    let uid = serde_json::from_slice::<Head>(body).ok().and_then(|h| h.request?.uid).unwrap_or_default();
    if uid.len() <= UID_LIMIT { uid } else { String::new() }
}

impl Request {
    /// Reads an `AdmissionReview` body, checking every field the validation gets against what the
    /// API server sends: the operation one the webhook is registered for, names by the API's rules.
    pub fn parse(body: &[u8]) -> Result<Request, Error> {
        let malformed = |what: &str| Error::Malformed(what.to_string());
        let review: Review = serde_json::from_slice(body)
            .map_err(|e| Error::Malformed(format!("not JSON of that shape ({e})")))?;
        if review.api_version.as_deref() != Some("admission.k8s.io/v1")
            || review.kind.as_deref() != Some("AdmissionReview")
        {
            return Err(malformed("apiVersion and kind must be admission.k8s.io/v1 AdmissionReview"));
        }
        let request = review.request.ok_or_else(|| malformed("no request"))?;
        let uid = request.uid.filter(|uid| !uid.is_empty()).ok_or_else(|| malformed("no request.uid"))?;
        if uid.len() > UID_LIMIT {
            return Err(field("request.uid", &uid, "a UID (at most 128 bytes)"));
        }
        let operation = match request.operation.as_deref() {
            Some("CREATE") => Operation::Create,
            Some("UPDATE") => Operation::Update,
            other => {
                return Err(field("request.operation", other.unwrap_or_default(), "CREATE or UPDATE"));
            }
        };
        let namespace = request.namespace;
        if !namespace.is_empty() && !is_dns_label(&namespace) {
            return Err(field("request.namespace", &namespace, "a namespace name"));
        }
        let mut object = decode("request.object", request.object)?;
        let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
            return Err(malformed("no request.object.metadata"));
        };
        let name = metadata.get("name").and_then(Value::as_str).unwrap_or_default();
        if !is_dns_subdomain(name) {
            return Err(field("request.object.metadata.name", name, "an object name (a DNS subdomain)"));
        }
        match metadata.get("namespace") {
            None if !namespace.is_empty() => {
                metadata.insert("namespace".into(), Value::from(namespace.clone()));
            }
            None => {}
            Some(Value::String(own)) if *own == namespace => {}
            Some(own) => {
                return Err(field(
                    "request.object.metadata.namespace",
                    &own.to_string(),
                    "request.namespace",
                ));
            }
        }
        let old_object = match (operation, request.old_object) {
            (Operation::Update, old) => decode("request.oldObject", old)?,
            (Operation::Create, _) => Value::Null,
        };
        let user = json!({"username": request.user_info.username, "groups": request.user_info.groups});
        Ok(Request { uid, operation, namespace, object, old_object, user, dry_run: request.dry_run })
    }

    /// `ansible_operator_admission`: `{operation, old_object, user, dry_run}`; the old object's and
    /// the user's strings wrapped as the watch wraps the CR's (`wrap`).
    pub fn admission_var(&self, wrap: impl Fn(&Value) -> Value) -> Value {
        json!({
            "operation": self.operation.as_str(),
            "old_object": wrap(&self.old_object),
            "user": wrap(&self.user),
            "dry_run": self.dry_run,
        })
    }
}

fn field(field: &'static str, value: &str, expected: &'static str) -> Error {
    Error::Field { field, value: value.chars().take(64).collect(), expected }
}

/// One of the review's objects: a JSON object, decoded within serde_json's depth limit.
fn decode(name: &'static str, raw: Option<&RawValue>) -> Result<Value, Error> {
    let raw = raw.ok_or_else(|| Error::Malformed(format!("no {name}")))?;
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(Error::Malformed(format!("{name} is not an object"))),
        Err(error) => Err(Error::Malformed(format!("{name} could not be decoded ({error})"))),
    }
}

/// A DNS-1123 label: what a namespace name is.
fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && is_dns_part(name)
}

/// A DNS-1123 subdomain: what a custom resource's name is.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_part)
}

fn is_dns_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    edge(bytes.first()) && edge(bytes.last()) && bytes.iter().all(inner)
}

/// What a validation decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Verdict {
    /// Every task passed.
    Allowed,
    /// A task failed, or we could not run the validation: the message says which.
    Denied(String),
}

/// The verdict of a validation run's report: the first failed task's message denies; a run that
/// timed out, was killed or ended without stats denies saying so.
pub fn verdict(report: &Report) -> Verdict {
    if let Some(timed_out) = &report.timed_out {
        return Verdict::Denied(format!("validation {}", timed_out.message().replacen("run ", "", 1)));
    }
    if let Some(killed) = &report.killed {
        return Verdict::Denied(format!("validation did not finish: {}", killed.message()));
    }
    if let Some(failure) = report.outcome.failures.first() {
        return Verdict::Denied(failure.message.clone());
    }
    match &report.outcome.stats {
        Some(_) if report.exit.code.is_none_or(|code| code == 0) => Verdict::Allowed,
        Some(_) => Verdict::Denied(format!(
            "validation did not finish: ansible-runner exited with code {}",
            report.exit.code.unwrap_or_default()
        )),
        None => Verdict::Denied(format!("validation did not finish: {}", report.error_text())),
    }
}

/// The `AdmissionReview` answer to request `uid`.
pub fn answer(uid: &str, verdict: &Verdict) -> Value {
    let mut response = Map::new();
    response.insert("uid".into(), Value::from(uid));
    match verdict {
        Verdict::Allowed => {
            response.insert("allowed".into(), Value::Bool(true));
        }
        Verdict::Denied(message) => {
            response.insert("allowed".into(), Value::Bool(false));
            response.insert("status".into(), json!({"code": 403, "reason": "Forbidden", "message": message}));
        }
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::outcome::{Failure, Stats};
    use crate::runner::TimedOut;

    fn review() -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "operation": "UPDATE", "namespace": "ns",
            "userInfo": {"username": "alice", "groups": ["dev"], "uid": "x"},
            "object": {"apiVersion": "a.example.com/v1", "kind": "K", "metadata": {"name": "k"}, "spec": {"masters": 2}},
            "oldObject": {"metadata": {"name": "k"}, "spec": {"masters": "{{ 1 }}"}}}})
    }

    fn parse(review: &Value) -> Result<Request, Error> {
        Request::parse(review.to_string().as_bytes())
    }

    fn refusal(pointer: &str, value: Value) -> String {
        let mut review = review();
        *review.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer}")) = value;
        parse(&review).expect_err("refused").to_string()
    }

    fn finished(failures: Vec<Failure>) -> Report {
        let mut report = Report::default();
        report.outcome.stats = Some(Stats::default());
        report.outcome.failures = failures;
        report.exit.code = Some(if report.outcome.failures.is_empty() { 0 } else { 2 });
        report
    }

    #[test]
    fn a_request_gets_its_namespace_on_the_object_and_the_admission_var_names_operation_old_object_and_user()
    {
        let request = parse(&review()).expect("a request");
        assert_eq!(request.object["metadata"]["namespace"], "ns");
        let var = request.admission_var(|v| v.clone());
        assert_eq!(
            var,
            json!({"operation": "UPDATE", "dry_run": false,
                   "old_object": {"metadata": {"name": "k"}, "spec": {"masters": "{{ 1 }}"}},
                   "user": {"username": "alice", "groups": ["dev"]}})
        );
    }

    #[test]
    fn a_body_without_a_request_or_uid_is_malformed() {
        assert!(parse(&json!({"kind": "AdmissionReview"})).is_err());
        assert!(parse(&json!({"request": {"object": {}}})).is_err());
        assert!(Request::parse(b"not json").is_err());
        let mut review = review();
        review["request"].as_object_mut().unwrap().remove("uid");
        assert!(parse(&review).is_err());
    }

    #[test]
    fn an_operation_the_webhook_is_not_registered_for_is_refused_whatever_it_holds() {
        for operation in ["DELETE", "CONNECT", "create", "", "{{ lookup('pipe', 'id') }}", "CREATE\n"] {
            let message = refusal("/request/operation", json!(operation));
            assert!(
                message.starts_with("request.operation ") && message.ends_with("is not CREATE or UPDATE"),
                "{message}"
            );
        }
        assert!(refusal("/request/operation", json!(7)).contains("not JSON of that shape"));
    }

    #[test]
    fn names_and_namespaces_must_follow_the_apis_rules() {
        for name in ["{{ x }}", "A", "-a", "a-", "a..b", "", "a b", "é", &"a".repeat(254)] {
            let message = refusal("/request/object/metadata/name", json!(name));
            assert!(message.starts_with("request.object.metadata.name "), "{message}");
        }
        for namespace in ["{{ x }}", "a.b", &"a".repeat(64)] {
            assert!(refusal("/request/namespace", json!(namespace)).starts_with("request.namespace "));
        }
        let message = refusal("/request/object/metadata", json!({"name": "k", "namespace": "other"}));
        assert!(message.starts_with("request.object.metadata.namespace "), "{message}");
        for name in ["k", "a.b-c", "0", &"a".repeat(253)] {
            let mut review = review();
            review["request"]["object"]["metadata"]["name"] = json!(name);
            assert!(parse(&review).is_ok(), "{name}");
        }
    }

    #[test]
    fn a_refusal_quotes_at_most_64_characters_of_the_value() {
        let message = refusal("/request/operation", json!("x".repeat(10_000)));
        assert!(message.len() < 200, "{message}");
    }

    #[test]
    fn an_object_too_deep_to_decode_is_refused_with_the_uid_still_known() {
        let deep = (0..200).fold(json!(1), |inner, _| json!({"a": inner}));
        let mut review = review();
        review["request"]["object"]["spec"] = deep;
        let body = review.to_string();
        let message = Request::parse(body.as_bytes()).expect_err("too deep").to_string();
        assert!(message.contains("request.object could not be decoded"), "{message}");
        assert_eq!(uid_of(body.as_bytes()), "u-1");
    }

    #[test]
    fn a_create_has_no_old_object_and_the_user_is_only_name_and_groups() {
        let mut review = review();
        review["request"]["operation"] = json!("CREATE");
        let request = parse(&review).expect("a request");
        assert_eq!(request.old_object, Value::Null);
        assert_eq!(request.user, json!({"username": "alice", "groups": ["dev"]}));
    }

    #[test]
    fn a_failed_task_denies_with_its_message_and_a_passing_run_allows() {
        let failure = Failure {
            host: "localhost".into(),
            task: "t".into(),
            message: "masters must be odd".into(),
            unreachable: false,
        };
        assert_eq!(verdict(&finished(vec![failure])), Verdict::Denied("masters must be odd".into()));
        assert_eq!(verdict(&finished(vec![])), Verdict::Allowed);
    }

    #[test]
    fn a_run_that_timed_out_or_never_finished_denies_saying_why() {
        let mut report = finished(vec![]);
        report.timed_out = Some(TimedOut { after: Duration::from_secs(5), task: Some("slow".into()) });
        assert_eq!(
            verdict(&report),
            Verdict::Denied("validation timed out after 5s while running task \"slow\"".into())
        );
        let report =
            Report { output: vec!["ERROR! the playbook could not be found".into()], ..Default::default() };
        assert_eq!(
            verdict(&report),
            Verdict::Denied("validation did not finish: ERROR! the playbook could not be found".into())
        );
    }

    #[test]
    fn the_answer_echoes_the_uid_and_carries_the_message_when_denied() {
        let denied = answer("u-1", &Verdict::Denied("no".into()));
        assert_eq!(denied["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(
            denied["response"],
            json!({"uid": "u-1", "allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "no"}})
        );
        assert_eq!(answer("u-2", &Verdict::Allowed)["response"], json!({"uid": "u-2", "allowed": true}));
    }
}
