//! The AdmissionReview v1 exchange, pure: what a request asks ([`Request`]), the extra var a
//! validation run gets about it, and the answer a run's report (or our failure to run) becomes.

use serde_json::{Map, Value, json};

use crate::runner::Report;

/// The extra var a validation run gets besides the incoming object's usual vars.
pub const ADMISSION_VAR: &str = "ansible_operator_admission";

/// The parts of an `AdmissionReview` request a validation reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Echoed in the answer.
    pub uid: String,
    /// `CREATE`, `UPDATE`, ...
    pub operation: String,
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

/// Why a review could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body is not an AdmissionReview with a request.
    #[error("the body is not an admission.k8s.io/v1 AdmissionReview with a request: {0}")]
    Malformed(&'static str),
}

impl Request {
    /// Reads an `AdmissionReview` body.
    pub fn parse(review: &Value) -> Result<Request, Error> {
        let request =
            review.get("request").filter(|r| r.is_object()).ok_or(Error::Malformed("no request"))?;
        let text = |name: &str| request.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
        let uid = text("uid");
        if uid.is_empty() {
            return Err(Error::Malformed("no request.uid"));
        }
        let namespace = text("namespace");
        let mut object = request.get("object").cloned().unwrap_or(Value::Null);
        if !object.is_object() {
            return Err(Error::Malformed("no request.object"));
        }
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut)
            && !namespace.is_empty()
            && !metadata.contains_key("namespace")
        {
            metadata.insert("namespace".into(), Value::from(namespace.clone()));
        }
        Ok(Request {
            uid,
            operation: text("operation"),
            namespace,
            object,
            old_object: request.get("oldObject").cloned().unwrap_or(Value::Null),
            user: request.get("userInfo").cloned().unwrap_or(Value::Null),
            dry_run: request.get("dryRun").and_then(Value::as_bool).unwrap_or(false),
        })
    }

    /// `ansible_operator_admission`: `{operation, old_object, user, dry_run}`; the old object's
    /// strings wrapped as the watch wraps the CR's (`wrap`).
    pub fn admission_var(&self, wrap: impl Fn(&Value) -> Value) -> Value {
        let user = json!({
            "username": self.user.get("username").cloned().unwrap_or(Value::from("")),
            "groups": self.user.get("groups").cloned().unwrap_or(json!([])),
        });
        json!({
            "operation": self.operation,
            "old_object": wrap(&self.old_object),
            "user": wrap(&user),
            "dry_run": self.dry_run,
        })
    }
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
        let request = Request::parse(&review()).expect("a request");
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
        assert!(Request::parse(&json!({"kind": "AdmissionReview"})).is_err());
        assert!(Request::parse(&json!({"request": {"object": {}}})).is_err());
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
