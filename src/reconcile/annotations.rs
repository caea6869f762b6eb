//! Per-CR overrides read from annotations (upstream §3.5, §6.2), within the bounds the operator
//! sets: a CR author may slow its runs down or quiet them, not turn them into a busy loop, a
//! verbose log or unbounded disk use.

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

/// `"true"` pauses the CR (upstream has no pause; ours, under upstream's own prefix beside
/// `reconcile-period`): no runs and no resyncs until it is removed or set to anything else. A CR
/// being deleted is still finalized.
pub const PAUSED: &str = "ansible.sdk.operatorframework.io/paused";

/// The shortest reconcile period an annotation may ask for (`0s`, no periodic runs, stays allowed).
pub const MIN_RECONCILE_PERIOD: Duration = Duration::from_secs(1);

/// An annotation's value after its floor or cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounded<T> {
    /// What the run uses.
    pub value: T,
    /// What the annotation asked for, when it was out of bounds (then `value` differs from it).
    pub asked: Option<T>,
}

impl<T: PartialEq + Copy> Bounded<T> {
    fn new(asked: T, value: T) -> Self {
        Bounded { value, asked: (asked != value).then_some(asked) }
    }
}

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

/// Whether the pause annotation says `"true"` (any other value, or none, is not paused).
pub fn paused(annotations: &BTreeMap<String, String>) -> bool {
    annotations.get(PAUSED).is_some_and(|value| value == "true")
}

/// The reconcile-period annotation, when present. An unparsable value is an error. A period under
/// [`MIN_RECONCILE_PERIOD`] is raised to it (upstream takes any period, so a CR asking for `100ms`
/// keeps running, just not in a loop that starves every other CR); `0s` stays `0s`.
pub fn reconcile_period(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<Bounded<Duration>>, go_duration::Error> {
    let Some(text) = annotations.get(RECONCILE_PERIOD) else { return Ok(None) };
    let asked = go_duration::parse(text)?;
    let value = if asked.is_zero() { asked } else { asked.max(MIN_RECONCILE_PERIOD) };
    Ok(Some(Bounded::new(asked, value)))
}

/// The verbosity annotation when it is an integer (upstream ignores invalid values), at most `max`:
/// the kind's own verbosity (`--ansible-verbosity` or `ANSIBLE_VERBOSITY_<KIND>_<GROUP>`). A CR may
/// quiet its runs; only the operator may make them print more (`-vvv` prints task arguments and
/// results, which the run log serves).
pub fn verbosity(annotations: &BTreeMap<String, String>, max: u8) -> Option<Bounded<u8>> {
    let asked: u8 = annotations.get(VERBOSITY).and_then(|value| value.trim().parse().ok())?;
    Some(Bounded::new(asked, asked.min(max)))
}

/// The max-runner-artifacts annotation when it is an integer, at most `max`: the watch's
/// `maxRunnerArtifacts` (`0`, keep all, is the largest value, so an annotation of `0` gets `max`).
pub fn max_runner_artifacts(annotations: &BTreeMap<String, String>, max: u32) -> Option<Bounded<u32>> {
    let asked: u32 = annotations.get(MAX_RUNNER_ARTIFACTS).and_then(|value| value.trim().parse().ok())?;
    let value = match (asked, max) {
        (_, 0) => asked,
        (0, _) => max,
        _ => asked.min(max),
    };
    Some(Bounded::new(asked, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn within(value: u32) -> Option<Bounded<u32>> {
        Some(Bounded { value, asked: None })
    }

    #[test]
    fn reconcile_period_annotation_is_a_go_duration() {
        assert_eq!(reconcile_period(&annotations(&[])), Ok(None));
        assert_eq!(
            reconcile_period(&annotations(&[(RECONCILE_PERIOD, "5s")])),
            Ok(Some(Bounded { value: Duration::from_secs(5), asked: None }))
        );
        assert_eq!(
            reconcile_period(&annotations(&[(RECONCILE_PERIOD, "0s")])),
            Ok(Some(Bounded { value: Duration::ZERO, asked: None })),
            "0s turns periodic runs off, it is no busy loop"
        );
        assert!(reconcile_period(&annotations(&[(RECONCILE_PERIOD, "often")])).is_err());
    }

    #[test]
    fn a_reconcile_period_under_a_second_is_raised_to_one_second() {
        for asked in ["1ns", "100ms", "999ms"] {
            let bounded = reconcile_period(&annotations(&[(RECONCILE_PERIOD, asked)])).unwrap().unwrap();
            assert_eq!(bounded.value, MIN_RECONCILE_PERIOD, "{asked}");
            assert_eq!(bounded.asked, Some(go_duration::parse(asked).unwrap()), "{asked}");
        }
        assert_eq!(
            reconcile_period(&annotations(&[(RECONCILE_PERIOD, "1s")])),
            Ok(Some(Bounded { value: MIN_RECONCILE_PERIOD, asked: None }))
        );
    }

    #[test]
    fn the_verbosity_annotation_may_lower_the_kinds_verbosity_but_not_raise_it() {
        let asked = |value: &str| verbosity(&annotations(&[(VERBOSITY, value)]), 2);
        assert_eq!(asked("0"), Some(Bounded { value: 0, asked: None }));
        assert_eq!(asked("2"), Some(Bounded { value: 2, asked: None }));
        assert_eq!(asked("7"), Some(Bounded { value: 2, asked: Some(7) }));
        assert_eq!(asked("255"), Some(Bounded { value: 2, asked: Some(255) }));
        assert_eq!(verbosity(&annotations(&[(VERBOSITY, "7")]), 7), Some(Bounded { value: 7, asked: None }));
    }

    #[test]
    fn the_artifacts_annotation_is_capped_by_the_watch_and_zero_means_the_cap() {
        let asked =
            |value: &str, max| max_runner_artifacts(&annotations(&[(MAX_RUNNER_ARTIFACTS, value)]), max);
        assert_eq!(asked("5", 20), within(5));
        assert_eq!(asked("20", 20), within(20));
        assert_eq!(asked("1000000", 20), Some(Bounded { value: 20, asked: Some(1_000_000) }));
        assert_eq!(asked("0", 20), Some(Bounded { value: 20, asked: Some(0) }), "0 would keep every run");
        assert_eq!(asked("0", 0), within(0), "the watch keeps every run: so may the CR");
        assert_eq!(asked("7", 0), within(7));
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
    fn only_the_value_true_pauses() {
        assert!(paused(&annotations(&[(PAUSED, "true")])));
        for value in ["false", "True", "yes", "", " true"] {
            assert!(!paused(&annotations(&[(PAUSED, value)])), "{value:?}");
        }
        assert!(!paused(&annotations(&[])));
    }

    #[test]
    fn invalid_verbosity_and_artifact_annotations_are_ignored() {
        assert_eq!(verbosity(&annotations(&[(VERBOSITY, "4")]), 7).map(|v| v.value), Some(4));
        assert_eq!(verbosity(&annotations(&[(VERBOSITY, "loud")]), 7), None);
        assert_eq!(verbosity(&annotations(&[(VERBOSITY, "-1")]), 7), None);
        assert_eq!(max_runner_artifacts(&annotations(&[(MAX_RUNNER_ARTIFACTS, "3")]), 20), within(3));
        assert_eq!(max_runner_artifacts(&annotations(&[(MAX_RUNNER_ARTIFACTS, "-1")]), 20), None);
    }
}
