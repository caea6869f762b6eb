//! The ConversionReview v1 exchange, pure: what a request asks ([`Request`]), the extra var a
//! conversion run gets, and the answer a run's report (or our failure to run) becomes. A convert
//! playbook answers with `set_stats: {data: {objects: [...]}}`, one object per object it was given,
//! in order; the operator keeps each object's identity whatever the playbook returns.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::runner::Report;

/// The extra var a conversion run gets: `{desired_api_version, objects}`.
pub const CONVERSION_VAR: &str = "ansible_operator_conversion";

/// The `set_stats` key a convert playbook answers with.
pub const ANSWER_KEY: &str = "objects";

/// The most bytes of a review body the webhook reads: a list of objects converted together may be
/// long, but the API server pages lists it converts.
pub const BODY_LIMIT: usize = 32 << 20;

/// The longest `request.uid` echoed back (the API server sends a UUID).
const UID_LIMIT: usize = 128;

/// The parts of a `ConversionReview` request a conversion reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Echoed in the answer.
    pub uid: String,
    /// `request.desiredAPIVersion`: `<group>/<version>` of the kind's group.
    pub desired_api_version: String,
    /// The objects to convert, each of the kind's group and kind.
    pub objects: Vec<Value>,
}

/// Why a review could not be read. Values are quoted cut short: the caller may be anyone.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body is not a ConversionReview with a request.
    #[error("the body is not an apiextensions.k8s.io/v1 ConversionReview with a request: {0}")]
    Malformed(String),
    /// A field holds a value the API server never sends for this kind.
    #[error("{field} {value:?} is not {expected}")]
    Field {
        /// The field, e.g. `request.desiredAPIVersion`.
        field: String,
        /// What it holds, its first 64 characters.
        value: String,
        /// What it must be.
        expected: String,
    },
}

#[derive(Deserialize)]
struct Review<'a> {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(borrow)]
    request: Option<RawRequest<'a>>,
}

#[derive(Deserialize)]
struct RawRequest<'a> {
    uid: Option<String>,
    #[serde(rename = "desiredAPIVersion")]
    desired_api_version: Option<String>,
    #[serde(borrow, default)]
    objects: Vec<&'a RawValue>,
}

/// The `request.uid` of a body (a ConversionReview's is where an AdmissionReview's is).
pub use super::review::uid_of;

impl Request {
    /// Reads a `ConversionReview` body for `group`'s `kind`: the desired version one of that group,
    /// every object of that group and kind.
    pub fn parse(body: &[u8], group: &str, kind: &str) -> Result<Request, Error> {
        let malformed = |what: &str| Error::Malformed(what.to_string());
        let review: Review = serde_json::from_slice(body)
            .map_err(|e| Error::Malformed(format!("not JSON of that shape ({e})")))?;
        if review.api_version.as_deref() != Some("apiextensions.k8s.io/v1")
            || review.kind.as_deref() != Some("ConversionReview")
        {
            return Err(malformed("apiVersion and kind must be apiextensions.k8s.io/v1 ConversionReview"));
        }
        let request = review.request.ok_or_else(|| malformed("no request"))?;
        let uid = request.uid.filter(|uid| !uid.is_empty()).ok_or_else(|| malformed("no request.uid"))?;
        if uid.len() > UID_LIMIT {
            return Err(field("request.uid", &uid, "a UID (at most 128 bytes)"));
        }
        let desired = request.desired_api_version.unwrap_or_default();
        if !is_version_of(&desired, group) {
            return Err(field("request.desiredAPIVersion", &desired, &format!("a version of {group}")));
        }
        let objects = request
            .objects
            .iter()
            .enumerate()
            .map(|(index, raw)| {
                let at = format!("request.objects[{index}]");
                let object = match serde_json::from_str::<Value>(raw.get()) {
                    Ok(object @ Value::Object(_)) => object,
                    Ok(_) => return Err(Error::Malformed(format!("{at} is not an object"))),
                    Err(error) => {
                        return Err(Error::Malformed(format!("{at} could not be decoded ({error})")));
                    }
                };
                let api_version = object["apiVersion"].as_str().unwrap_or_default();
                if !is_version_of(api_version, group) {
                    return Err(field(
                        &format!("{at}.apiVersion"),
                        api_version,
                        &format!("a version of {group}"),
                    ));
                }
                let own_kind = object["kind"].as_str().unwrap_or_default();
                if own_kind != kind {
                    return Err(field(&format!("{at}.kind"), own_kind, kind));
                }
                Ok(object)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Request { uid, desired_api_version: desired, objects })
    }

    /// `ansible_operator_conversion`: the desired `apiVersion` and the objects, each wrapped as the
    /// watch wraps its CRs' strings (`wrap`).
    pub fn conversion_var(&self, wrap: impl Fn(&Value) -> Value) -> Value {
        json!({
            "desired_api_version": self.desired_api_version,
            "objects": self.objects.iter().map(wrap).collect::<Vec<_>>(),
        })
    }
}

/// `<group>/<version>` with a version that is a DNS label.
fn is_version_of(api_version: &str, group: &str) -> bool {
    api_version.strip_prefix(group).and_then(|rest| rest.strip_prefix('/')).is_some_and(|version| {
        !version.is_empty()
            && version.len() <= 63
            && version.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

fn field(field: &str, value: &str, expected: &str) -> Error {
    Error::Field {
        field: field.to_string(),
        value: value.chars().take(64).collect(),
        expected: expected.to_string(),
    }
}

/// The converted objects a run's report answers `request` with, or why there are none: the first
/// failed task's message; a run that timed out, was killed or ended without stats says so; a
/// playbook that set no `objects`, or not one object per object given, says what it set.
///
/// Each answer keeps its object's identity: `apiVersion` is the desired one, `kind` and `metadata`
/// are the object's own but for the labels and annotations the playbook set (all the API server
/// lets a conversion change in metadata).
pub fn converted(report: &Report, request: &Request) -> Result<Vec<Value>, String> {
    if let Some(timed_out) = &report.timed_out {
        return Err(format!("conversion {}", timed_out.message().replacen("run ", "", 1)));
    }
    if let Some(killed) = &report.killed {
        return Err(format!("conversion did not finish: {}", killed.message()));
    }
    if let Some(failure) = report.outcome.failures.first() {
        return Err(failure.message.clone());
    }
    if report.outcome.stats.is_none() || report.exit.code.is_some_and(|code| code != 0) {
        return Err(format!("conversion did not finish: {}", report.error_text()));
    }
    let answer = report.outcome.stats_data.as_ref().and_then(|data| data.get(ANSWER_KEY));
    let Some(Value::Array(answers)) = answer else {
        return Err(format!(
            "the convert playbook answered with no list: it must end with set_stats data {ANSWER_KEY}: [one converted object per object in {CONVERSION_VAR}.objects]"
        ));
    };
    if answers.len() != request.objects.len() {
        return Err(format!(
            "the convert playbook answered {} object(s) for {} given: set_stats data {ANSWER_KEY} must hold one per object, in order",
            answers.len(),
            request.objects.len()
        ));
    }
    request
        .objects
        .iter()
        .zip(answers)
        .enumerate()
        .map(|(index, (given, answer))| {
            let Value::Object(answer) = answer else {
                return Err(format!("the convert playbook's {ANSWER_KEY}[{index}] is not an object"));
            };
            Ok(Value::Object(keep_identity(given, answer.clone(), &request.desired_api_version)))
        })
        .collect()
}

/// `answer` with `given`'s kind and metadata, but for the labels and annotations `answer` sets.
fn keep_identity(
    given: &Value,
    mut answer: Map<String, Value>,
    desired_api_version: &str,
) -> Map<String, Value> {
    let mut metadata = given["metadata"].as_object().cloned().unwrap_or_default();
    if let Some(Value::Object(answered)) = answer.get("metadata") {
        for key in ["labels", "annotations"] {
            if let Some(value @ Value::Object(_)) = answered.get(key) {
                metadata.insert(key.into(), value.clone());
            }
        }
    }
    answer.insert("apiVersion".into(), Value::from(desired_api_version));
    answer.insert("kind".into(), given["kind"].clone());
    answer.insert("metadata".into(), Value::Object(metadata));
    answer
}

/// The `ConversionReview` answer to request `uid`.
pub fn answer(uid: &str, converted: Result<Vec<Value>, String>) -> Value {
    let response = match converted {
        Ok(objects) => json!({"uid": uid, "convertedObjects": objects, "result": {"status": "Success"}}),
        Err(message) => {
            json!({"uid": uid, "convertedObjects": [], "result": {"status": "Failure", "message": message}})
        }
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Failure, Stats};

    const GROUP: &str = "cache.example.com";

    fn object(version: &str, spec: Value) -> Value {
        json!({"apiVersion": format!("{GROUP}/{version}"), "kind": "Memcached",
               "metadata": {"name": "m", "namespace": "ns", "uid": "u", "resourceVersion": "7", "labels": {"a": "1"}},
               "spec": spec, "status": {"conditions": []}})
    }

    fn review(objects: Vec<Value>) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
               "request": {"uid": "r-1", "desiredAPIVersion": format!("{GROUP}/v2"), "objects": objects}})
    }

    fn parse(review: &Value) -> Result<Request, Error> {
        Request::parse(review.to_string().as_bytes(), GROUP, "Memcached")
    }

    fn answered(objects: Option<Value>) -> Report {
        let mut report = Report::default();
        report.outcome.stats = Some(Stats::default());
        report.outcome.stats_data =
            objects.map(|objects| [(ANSWER_KEY.to_string(), objects)].into_iter().collect());
        report.exit.code = Some(0);
        report
    }

    #[test]
    fn a_review_gives_the_desired_version_and_the_objects_and_the_var_wraps_them() {
        let request = parse(&review(vec![object("v1", json!({"size": 3}))])).expect("a request");
        assert_eq!(request.uid, "r-1");
        assert_eq!(request.desired_api_version, "cache.example.com/v2");
        let var = request.conversion_var(|v| json!({"wrapped": v["spec"]}));
        assert_eq!(
            var,
            json!({"desired_api_version": "cache.example.com/v2", "objects": [{"wrapped": {"size": 3}}]})
        );
    }

    #[test]
    fn a_version_or_object_of_another_group_or_kind_is_refused_naming_the_field() {
        let mut other_group = review(vec![]);
        other_group["request"]["desiredAPIVersion"] = json!("apps/v1");
        let message = parse(&other_group).expect_err("refused").to_string();
        assert_eq!(message, "request.desiredAPIVersion \"apps/v1\" is not a version of cache.example.com");
        for bad in
            ["cache.example.com/", "cache.example.com/V2", "cache.example.com/v2/x", "cache.example.comx/v2"]
        {
            let mut review = review(vec![]);
            review["request"]["desiredAPIVersion"] = json!(bad);
            assert!(parse(&review).is_err(), "{bad}");
        }
        let mut secret = object("v1", json!({}));
        secret["kind"] = json!("Secret");
        let message = parse(&review(vec![secret])).expect_err("refused").to_string();
        assert_eq!(message, "request.objects[0].kind \"Secret\" is not Memcached");
        let message = parse(&review(vec![json!("x")])).expect_err("refused").to_string();
        assert!(message.ends_with("request.objects[0] is not an object"), "{message}");
        assert!(Request::parse(b"{}", GROUP, "Memcached").is_err());
        let mut admission = review(vec![]);
        admission["kind"] = json!("AdmissionReview");
        assert!(parse(&admission).is_err());
    }

    #[test]
    fn the_answer_keeps_each_objects_identity_but_for_labels_and_annotations() {
        let request = parse(&review(vec![object("v1", json!({"size": 3}))])).expect("a request");
        let answer = json!([{"apiVersion": "x/v9", "kind": "Other", "spec": {"replicas": 3}, "status": {"conditions": []},
                             "metadata": {"name": "renamed", "uid": "forged", "labels": {"b": "2"}, "annotations": {"c": "3"}}}]);
        let converted = converted(&answered(Some(answer)), &request).expect("converted");
        assert_eq!(
            converted,
            vec![json!({"apiVersion": "cache.example.com/v2", "kind": "Memcached", "spec": {"replicas": 3},
                        "status": {"conditions": []},
                        "metadata": {"name": "m", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                                     "labels": {"b": "2"}, "annotations": {"c": "3"}}})]
        );
    }

    #[test]
    fn a_failed_task_a_missing_or_short_answer_fails_the_conversion_saying_why() {
        let request =
            parse(&review(vec![object("v1", json!({})), object("v1", json!({}))])).expect("a request");
        let mut failed = answered(None);
        failed.outcome.failures.push(Failure {
            host: "localhost".into(),
            task: "t".into(),
            message: "size must not be negative".into(),
            unreachable: false,
        });
        assert_eq!(converted(&failed, &request), Err("size must not be negative".into()));
        let none = converted(&answered(None), &request).expect_err("no answer");
        assert!(none.contains("set_stats data objects"), "{none}");
        let short = converted(&answered(Some(json!([{}]))), &request).expect_err("one of two");
        assert!(short.starts_with("the convert playbook answered 1 object(s) for 2 given"), "{short}");
        let not_objects = converted(&answered(Some(json!([{}, 1]))), &request).expect_err("not an object");
        assert_eq!(not_objects, "the convert playbook's objects[1] is not an object");
        let unfinished = Report { output: vec!["ERROR! no playbook".into()], ..Default::default() };
        assert_eq!(
            converted(&unfinished, &request),
            Err("conversion did not finish: ERROR! no playbook".into())
        );
    }

    #[test]
    fn the_answer_echoes_the_uid_with_success_or_the_failure_message() {
        let ok = answer("r-1", Ok(vec![json!({"a": 1})]));
        assert_eq!(ok["kind"], "ConversionReview");
        assert_eq!(
            ok["response"],
            json!({"uid": "r-1", "convertedObjects": [{"a": 1}], "result": {"status": "Success"}})
        );
        let failed = answer("r-2", Err("no".into()));
        assert_eq!(failed["response"]["result"], json!({"status": "Failure", "message": "no"}));
    }
}
