//! When a converged CR runs again: the jitter that spreads periodic resyncs (`--resync-jitter`),
//! and, with `--startup-resync=due`, whether the first look at a CR after the operator starts runs
//! it or schedules its resync at its last confirmation plus its period.

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;

use super::annotations;
use crate::cached::Cached;

/// `--startup-resync`: what the operator does with each CR when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum StartupResync {
    /// Every CR runs once (upstream's contract).
    #[default]
    All,
    /// A converged CR runs when its period comes due; every other CR runs at once.
    Due,
}

/// `--resync-jitter`: a periodic resync comes after `period × (1 + U[0, fraction])`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jitter(f64);

/// A jitter fraction outside `[0, 1]`.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("the resync jitter must be a fraction from 0 to 1 (0 turns it off), got {0}")]
pub struct JitterError(String);

impl Jitter {
    /// No jitter: resyncs come exactly at their period.
    pub const NONE: Jitter = Jitter(0.0);

    /// A jitter of `fraction` of the period, which must lie in `[0, 1]`.
    pub fn new(fraction: f64) -> Result<Self, JitterError> {
        if (0.0..=1.0).contains(&fraction) {
            Ok(Jitter(fraction))
        } else {
            Err(JitterError(fraction.to_string()))
        }
    }

    /// A draw from `U[0, fraction]`, for [`Jitter::stretch`] and [`at_startup`].
    pub fn draw(self) -> f64 {
        if self.0 == 0.0 { 0.0 } else { rand::random_range(0.0..=self.0) }
    }

    /// `period` with a fresh draw of jitter added.
    pub fn stretch(self, period: Duration) -> Duration {
        stretched(period, self.draw())
    }
}

impl FromStr for Jitter {
    type Err = JitterError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fraction: f64 = text.trim().parse().map_err(|_| JitterError(text.to_string()))?;
        Jitter::new(fraction)
    }
}

/// `period × (1 + draw)`.
fn stretched(period: Duration, draw: f64) -> Duration {
    period.mul_f64(1.0 + draw)
}

/// What the first look at a CR after the operator started does, with `--startup-resync=due`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Startup {
    /// New, changed, failed, being deleted, asked for or never confirmed: run at once.
    Run,
    /// Converged and its resync is past due: run now, as the resync it is.
    Overdue,
    /// Converged: nothing runs now; come back after this long.
    Later(Duration),
    /// Converged with no period: nothing runs until the CR changes.
    OnChange,
}

/// Decides the first look at `cr` from its status, its reconcile `period` and a jitter `draw`
/// (see [`Jitter::draw`]), at `now`.
pub fn at_startup(cr: &Cached, period: Duration, draw: f64, now: Timestamp) -> Startup {
    let Some(confirmed) = settled(cr) else { return Startup::Run };
    if period.is_zero() {
        return Startup::OnChange;
    }
    // A confirmation in the future (clock skew) counts as now.
    let elapsed = Duration::try_from(now.duration_since(confirmed)).unwrap_or_default();
    match stretched(period, draw).checked_sub(elapsed).filter(|wait| !wait.is_zero()) {
        Some(wait) => Startup::Later(wait),
        None => Startup::Overdue,
    }
}

/// Whether the CR's last run succeeded for its current generation and it is not being deleted.
pub fn converged(cr: &Cached) -> bool {
    cr.metadata.deletion_timestamp.is_none() && cr.standing.successful()
}

/// When a converged CR was last confirmed (see [`crate::cached::Standing`]). `None` when it is not converged,
/// has no such time, or a manual request for a run came after it.
pub fn settled(cr: &Cached) -> Option<Timestamp> {
    if !converged(cr) {
        return None;
    }
    let confirmed = cr.standing.confirmed()?;
    let asked = annotations::reconcile_request(cr.annotations())
        .and_then(|request| request.at.parse::<Timestamp>().ok())
        .is_some_and(|at| at > confirmed);
    (!asked).then_some(confirmed)
}

/// The CRs a controller has looked at since the operator started.
#[derive(Debug, Default)]
pub struct Seen(Mutex<HashSet<String>>);

impl Seen {
    /// Whether this is the first look at `key`; it is remembered from now on.
    pub fn first(&self, key: &str) -> bool {
        self.lock().insert(key.to_string())
    }

    /// Forgets a CR that was deleted: a CR of that name later is new.
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use kube::api::DynamicObject;
    use serde_json::{Value, json};

    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);
    const COMPLETION: &str = "2026-11-21T05:20:01.1234+00:00";

    fn at(time: &str) -> Timestamp {
        time.parse().expect("a timestamp")
    }

    /// A CR at generation 2 with these conditions and extra metadata, as the cache keeps it.
    fn cr(conditions: Value, metadata: Value) -> Cached {
        let mut meta = json!({"name": "a", "namespace": "ns", "generation": 2});
        meta.as_object_mut().unwrap().extend(metadata.as_object().cloned().unwrap_or_default());
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "K",
            "metadata": meta, "status": {"conditions": conditions},
        }))
        .expect("a CR");
        Cached::from(object)
    }

    fn succeeded(generation: i64) -> Value {
        json!([
            {"type": "Running", "status": "True", "reason": "Successful", "observedGeneration": generation,
             "lastTransitionTime": "2026-11-21T05:00:00Z",
             "ansibleResult": {"ok": 1, "changed": 0, "skipped": 0, "failures": 0, "completion": COMPLETION}},
            {"type": "Successful", "status": "True", "observedGeneration": generation,
             "lastTransitionTime": "2026-11-21T04:00:00Z"},
        ])
    }

    fn converged_cr() -> Cached {
        cr(succeeded(2), json!({}))
    }

    #[test]
    fn a_converged_cr_is_scheduled_at_its_last_confirmation_plus_its_period_and_jitter() {
        let now = at("2026-11-21T05:50:01.1234Z");
        assert_eq!(at_startup(&converged_cr(), HOUR, 0.0, now), Startup::Later(Duration::from_secs(30 * 60)));
        assert_eq!(
            at_startup(&converged_cr(), HOUR, 0.1, now),
            Startup::Later(Duration::from_secs(36 * 60)),
            "a tenth of the period later"
        );
    }

    #[test]
    fn a_converged_cr_past_its_period_runs_now() {
        let now = at("2026-11-21T06:30:00Z");
        assert_eq!(at_startup(&converged_cr(), HOUR, 0.0, now), Startup::Overdue);
        assert_eq!(at_startup(&converged_cr(), HOUR, 0.1, now), Startup::Overdue);
    }

    #[test]
    fn a_converged_cr_without_a_period_waits_for_a_change() {
        assert_eq!(at_startup(&converged_cr(), Duration::ZERO, 0.1, at(COMPLETION)), Startup::OnChange);
    }

    #[test]
    fn a_cr_whose_generation_changed_since_its_success_runs_at_once() {
        let changed = cr(succeeded(1), json!({}));
        assert_eq!(at_startup(&changed, HOUR, 0.0, at(COMPLETION)), Startup::Run);
        assert!(!converged(&changed));
    }

    #[test]
    fn a_failed_cr_runs_at_once() {
        let failed = cr(
            json!([
                {"type": "Running", "status": "False", "observedGeneration": 2},
                {"type": "Successful", "status": "False", "observedGeneration": 2},
                {"type": "Failure", "status": "True", "observedGeneration": 2},
            ]),
            json!({}),
        );
        assert_eq!(at_startup(&failed, HOUR, 0.0, at(COMPLETION)), Startup::Run);
    }

    #[test]
    fn a_cr_being_deleted_runs_at_once() {
        let deleting = cr(succeeded(2), json!({"deletionTimestamp": "2026-11-21T05:30:00Z"}));
        assert_eq!(at_startup(&deleting, HOUR, 0.0, at(COMPLETION)), Startup::Run);
        assert!(!converged(&deleting));
    }

    #[test]
    fn a_new_cr_runs_at_once() {
        assert_eq!(at_startup(&cr(json!([]), json!({})), HOUR, 0.0, at(COMPLETION)), Startup::Run);
    }

    #[test]
    fn a_cr_without_a_completion_time_falls_back_to_when_it_became_successful_or_runs_at_once() {
        let without_completion = json!([{"type": "Successful", "status": "True", "observedGeneration": 2,
                                         "lastTransitionTime": "2026-11-21T05:00:00Z"}]);
        assert_eq!(
            at_startup(&cr(without_completion, json!({})), HOUR, 0.0, at("2026-11-21T05:10:00Z")),
            Startup::Later(Duration::from_secs(50 * 60))
        );
        let never_confirmed = json!([{"type": "Successful", "status": "True", "observedGeneration": 2}]);
        assert_eq!(at_startup(&cr(never_confirmed, json!({})), HOUR, 0.0, at(COMPLETION)), Startup::Run);
    }

    #[test]
    fn a_manual_request_after_the_last_run_runs_at_once() {
        let request = |time: &str| json!({"annotations": {(annotations::RECONCILE_REQUESTED): format!("{{\"at\":\"{time}\"}}")}});
        let asked = cr(succeeded(2), request("2026-11-21T05:30:00Z"));
        assert_eq!(at_startup(&asked, HOUR, 0.0, at("2026-11-21T05:40:00Z")), Startup::Run);
        let served = cr(succeeded(2), request("2026-11-21T05:00:00Z"));
        assert!(matches!(at_startup(&served, HOUR, 0.0, at("2026-11-21T05:40:00Z")), Startup::Later(_)));
    }

    #[test]
    fn the_standing_says_whether_the_cr_is_marked_paused() {
        let paused = json!([{"type": "Paused", "status": "True", "observedGeneration": 2}]);
        assert!(cr(paused, json!({})).standing.paused());
        let resumed = json!([{"type": "Paused", "status": "False", "observedGeneration": 2}]);
        assert!(!cr(resumed, json!({})).standing.paused());
        assert!(!converged_cr().standing.paused());
    }

    #[test]
    fn a_completion_that_is_not_a_time_leaves_the_cr_unconfirmed() {
        let mut conditions = succeeded(2);
        conditions[0]["ansibleResult"]["completion"] = json!("soon");
        let unconfirmed = cr(conditions, json!({}));
        assert!(converged(&unconfirmed));
        assert_eq!(settled(&unconfirmed), None);
        assert_eq!(at_startup(&unconfirmed, HOUR, 0.0, at(COMPLETION)), Startup::Run);
    }

    #[test]
    fn jitter_spreads_a_period_within_its_fraction() {
        let jitter = Jitter::new(0.1).unwrap();
        let draws: Vec<Duration> = (0..200).map(|_| jitter.stretch(HOUR)).collect();
        assert!(draws.iter().all(|d| *d >= HOUR && *d <= HOUR.mul_f64(1.1)), "{draws:?}");
        let first = draws[0];
        assert!(draws.iter().any(|d| *d != first), "the spread is not constant");
        assert_eq!(Jitter::NONE.stretch(HOUR), HOUR);
    }

    #[test]
    fn jitter_is_a_fraction_from_zero_to_one() {
        assert_eq!("0".parse::<Jitter>(), Ok(Jitter::NONE));
        assert_eq!("1".parse::<Jitter>(), Ok(Jitter(1.0)));
        assert_eq!("0.25".parse::<Jitter>(), Ok(Jitter(0.25)));
        for bad in ["1.5", "-0.1", "NaN", "lots"] {
            let error = bad.parse::<Jitter>().expect_err(bad).to_string();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn a_deleted_cr_is_first_seen_again() {
        let seen = Seen::default();
        assert!(seen.first("ns/a"));
        assert!(!seen.first("ns/a"));
        seen.forget("ns/a");
        assert!(seen.first("ns/a"));
    }
}
