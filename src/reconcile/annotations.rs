//! Per-CR overrides read from annotations (upstream §3.5, §6.2).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::go_duration;

/// Requeue period after a successful run (Go duration; `0s` disables periodic runs).
pub const RECONCILE_PERIOD: &str = "ansible.sdk.operatorframework.io/reconcile-period";
/// Ansible verbosity for this CR's runs.
pub const VERBOSITY: &str = "ansible.sdk.operatorframework.io/verbosity";
/// Artifacts kept for this CR (`0` keeps all).
pub const MAX_RUNNER_ARTIFACTS: &str = "ansible.sdk.operatorframework.io/max-runner-artifacts";
/// A request for a run now (ours): `{"at": "<RFC 3339>", "by": "<who>"}`, set by the API's
/// `reconcile` (or by hand; then `by` may be missing). Changing it triggers a run.
pub const RECONCILE_REQUESTED: &str = "ansible-operator.dev/reconcile-requested";

/// A manual request: when it was made and by whom.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct ReconcileRequest {
    /// When (RFC 3339).
    pub at: String,
    /// Who, as the API authenticated them.
    #[serde(default)]
    pub by: String,
}

/// The manual request annotation, when it is readable.
pub fn reconcile_request(annotations: &BTreeMap<String, String>) -> Option<ReconcileRequest> {
    annotations.get(RECONCILE_REQUESTED).and_then(|value| serde_json::from_str(value).ok())
}

/// The reconcile-period annotation, when present. An unparsable value is an error.
pub fn reconcile_period(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<Duration>, go_duration::Error> {
    annotations.get(RECONCILE_PERIOD).map(|value| go_duration::parse(value)).transpose()
}

/// The verbosity annotation when it is an integer (upstream ignores invalid values; like upstream
/// there is no range check, beyond Ansible's own cap).
pub fn verbosity(annotations: &BTreeMap<String, String>) -> Option<u8> {
    annotations.get(VERBOSITY).and_then(|value| value.trim().parse().ok())
}

/// The max-runner-artifacts annotation when it is an integer.
pub fn max_runner_artifacts(annotations: &BTreeMap<String, String>) -> Option<u32> {
    annotations.get(MAX_RUNNER_ARTIFACTS).and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn reconcile_period_annotation_is_a_go_duration() {
        assert_eq!(reconcile_period(&annotations(&[])), Ok(None));
        assert_eq!(
            reconcile_period(&annotations(&[(RECONCILE_PERIOD, "5s")])),
            Ok(Some(Duration::from_secs(5)))
        );
        assert_eq!(reconcile_period(&annotations(&[(RECONCILE_PERIOD, "0s")])), Ok(Some(Duration::ZERO)));
        assert!(reconcile_period(&annotations(&[(RECONCILE_PERIOD, "often")])).is_err());
    }

    #[test]
    fn reconcile_requests_are_json_with_a_time_and_an_author() {
        let request = r#"{"at":"2026-11-23T10:00:00Z","by":"alice"}"#;
        assert_eq!(
            reconcile_request(&annotations(&[(RECONCILE_REQUESTED, request)])),
            Some(ReconcileRequest { at: "2026-11-23T10:00:00Z".into(), by: "alice".into() })
        );
        assert_eq!(
            reconcile_request(&annotations(&[(RECONCILE_REQUESTED, r#"{"at":"x"}"#)])).map(|r| r.by),
            Some(String::new())
        );
        assert_eq!(reconcile_request(&annotations(&[(RECONCILE_REQUESTED, "now please")])), None);
    }

    #[test]
    fn invalid_verbosity_and_artifact_annotations_are_ignored() {
        assert_eq!(verbosity(&annotations(&[(VERBOSITY, "4")])), Some(4));
        assert_eq!(verbosity(&annotations(&[(VERBOSITY, "loud")])), None);
        assert_eq!(max_runner_artifacts(&annotations(&[(MAX_RUNNER_ARTIFACTS, "0")])), Some(0));
        assert_eq!(max_runner_artifacts(&annotations(&[(MAX_RUNNER_ARTIFACTS, "-1")])), None);
    }
}
