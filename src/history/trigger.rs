//! Why a run happened, decided from the CR as it is and what the operator remembers of it (the
//! [`Ledger`](super::ledger::Ledger)): created, spec changed, annotations changed (with
//! `watchAnnotationsChanges`), a kind without a generation changed, a dependent object changed, a
//! periodic resync, `requeue_after`, a retry after a failure, the finalizer, a manual trigger, or
//! the operator's start (every CR is reconciled once when the operator starts, as upstream).

use serde::Serialize;

/// A dependent object whose change triggered its owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dependent {
    /// Its kind.
    pub kind: String,
    /// Its namespace, when namespaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// What the operator scheduled when a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduled {
    /// The reconcile period after a success.
    Resync,
    /// The period `operator_sdk.util.requeue_after` asked for.
    RequeueAfter,
    /// A retry after a failure; `attempt` is the number of the coming run (2 for the first retry).
    Retry {
        /// The coming attempt.
        attempt: u32,
    },
}

/// Why a run happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason")]
pub enum Trigger {
    /// The CR's first run.
    Created,
    /// The spec changed (a new generation).
    SpecChanged {
        /// The generation the last run saw.
        #[serde(rename = "fromGeneration")]
        from: i64,
        /// The generation this run sees.
        #[serde(rename = "toGeneration")]
        to: i64,
    },
    /// The annotations changed, and the watch runs on that (`watchAnnotationsChanges`).
    AnnotationsChanged,
    /// The object changed: a kind without a generation (a Secret, a Namespace), where every change
    /// but one of status triggers, as upstream's predicate lets it.
    ObjectChanged,
    /// A dependent object changed or was deleted.
    DependentChanged {
        /// Which one.
        dependent: Dependent,
    },
    /// The periodic resync (`reconcilePeriod`).
    Resync,
    /// `operator_sdk.util.requeue_after`.
    RequeueAfter,
    /// A retry after a failure.
    Retry {
        /// Which attempt this is (2 for the first retry).
        attempt: u32,
    },
    /// The CR is being deleted: the finalizer runs.
    Finalizer,
    /// Someone asked for a run (the API's `reconcile`, or the annotation set by hand).
    Manual {
        /// Who asked, as the API authenticated them (empty when set by hand).
        by: String,
    },
    /// The operator (re)started and reconciles every CR once.
    Startup,
}

impl Trigger {
    /// The reason alone, e.g. `DependentChanged` (printer column, API lists).
    pub fn reason(&self) -> &'static str {
        match self {
            Trigger::Created => "Created",
            Trigger::SpecChanged { .. } => "SpecChanged",
            Trigger::AnnotationsChanged => "AnnotationsChanged",
            Trigger::ObjectChanged => "ObjectChanged",
            Trigger::DependentChanged { .. } => "DependentChanged",
            Trigger::Resync => "Resync",
            Trigger::RequeueAfter => "RequeueAfter",
            Trigger::Retry { .. } => "Retry",
            Trigger::Finalizer => "Finalizer",
            Trigger::Manual { .. } => "Manual",
            Trigger::Startup => "Startup",
        }
    }

    /// Whether a successful run that changed nothing only confirms the last record (periodic and
    /// start-up resyncs), instead of adding one.
    pub fn confirms(&self) -> bool {
        matches!(self, Trigger::Resync | Trigger::Startup)
    }
}

/// What the decision looks at.
#[derive(Debug, Clone, Default)]
pub struct Facts<'a> {
    /// The CR is being deleted and carries the watch's finalizer.
    pub finalizing: bool,
    /// A manual request newer than the last run: who asked.
    pub manual: Option<&'a str>,
    /// The CR's generation now.
    pub generation: Option<i64>,
    /// The generation the last run saw (conditions' `observedGeneration`, or the last record's).
    pub observed_generation: Option<i64>,
    /// The CR has a record already: a kind without a generation was seen before.
    pub recorded: bool,
    /// The annotations differ from those the last run saw, and the watch runs on that.
    pub annotations_changed: bool,
    /// A kind without a generation: the object differs from the one the last run saw.
    pub object_changed: bool,
    /// A dependent object that changed since the last run.
    pub dependent: Option<Dependent>,
    /// What the operator scheduled when the last run ended.
    pub scheduled: Option<Scheduled>,
}

/// Decides why a run happens; the most telling reason wins.
#[must_use]
pub fn decide(facts: Facts<'_>) -> Trigger {
    if facts.finalizing {
        return Trigger::Finalizer;
    }
    if let Some(by) = facts.manual {
        return Trigger::Manual { by: by.to_string() };
    }
    match (facts.observed_generation, facts.generation) {
        // A kind without a generation has none to observe: its record says it ran before.
        (None, _) if !facts.recorded || facts.generation.is_some() => return Trigger::Created,
        (Some(from), Some(to)) if from != to => return Trigger::SpecChanged { from, to },
        _ => {}
    }
    if facts.annotations_changed {
        return Trigger::AnnotationsChanged;
    }
    if facts.object_changed {
        return Trigger::ObjectChanged;
    }
    if let Some(dependent) = facts.dependent {
        return Trigger::DependentChanged { dependent };
    }
    match facts.scheduled {
        Some(Scheduled::Retry { attempt }) => Trigger::Retry { attempt },
        Some(Scheduled::RequeueAfter) => Trigger::RequeueAfter,
        Some(Scheduled::Resync) => Trigger::Resync,
        None => Trigger::Startup,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn seen(generation: i64) -> Facts<'static> {
        Facts { generation: Some(generation), observed_generation: Some(generation), ..Facts::default() }
    }

    #[test]
    fn first_run_and_spec_changes_come_from_generations() {
        assert_eq!(decide(Facts { generation: Some(1), ..Facts::default() }), Trigger::Created);
        let changed = Facts { observed_generation: Some(1), ..seen(2) };
        assert_eq!(decide(changed), Trigger::SpecChanged { from: 1, to: 2 });
    }

    #[test]
    fn finalizer_and_manual_requests_outrank_everything() {
        let facts = Facts { finalizing: true, manual: Some("alice"), ..Facts::default() };
        assert_eq!(decide(facts), Trigger::Finalizer);
        let facts = Facts { manual: Some("alice"), observed_generation: Some(1), ..seen(2) };
        assert_eq!(decide(facts), Trigger::Manual { by: "alice".into() });
    }

    #[test]
    fn without_a_spec_change_the_ledger_says_why() {
        let dependent =
            Dependent { kind: "ConfigMap".into(), namespace: Some("ns".into()), name: "c".into() };
        let facts =
            Facts { dependent: Some(dependent.clone()), scheduled: Some(Scheduled::Resync), ..seen(1) };
        assert_eq!(decide(facts), Trigger::DependentChanged { dependent });
        assert_eq!(
            decide(Facts { scheduled: Some(Scheduled::Retry { attempt: 3 }), ..seen(1) }),
            Trigger::Retry { attempt: 3 }
        );
        assert_eq!(
            decide(Facts { scheduled: Some(Scheduled::RequeueAfter), ..seen(1) }),
            Trigger::RequeueAfter
        );
        assert_eq!(decide(Facts { scheduled: Some(Scheduled::Resync), ..seen(1) }), Trigger::Resync);
        assert_eq!(decide(seen(1)), Trigger::Startup, "nothing remembered: the operator started");
    }

    #[test]
    fn an_annotation_change_is_told_apart_from_a_resync_or_the_start() {
        let changed = Facts { annotations_changed: true, scheduled: Some(Scheduled::Resync), ..seen(1) };
        assert_eq!(decide(changed), Trigger::AnnotationsChanged, "not the resync the last run scheduled");
        assert_eq!(decide(Facts { annotations_changed: true, ..seen(1) }), Trigger::AnnotationsChanged);
        let both = Facts { annotations_changed: true, observed_generation: Some(1), ..seen(2) };
        assert_eq!(decide(both), Trigger::SpecChanged { from: 1, to: 2 }, "a spec change tells more");
        let dependent = Dependent { kind: "ConfigMap".into(), namespace: None, name: "c".into() };
        let with_dependent = Facts { annotations_changed: true, dependent: Some(dependent), ..seen(1) };
        assert_eq!(decide(with_dependent), Trigger::AnnotationsChanged, "the CR's own change first");
    }

    #[test]
    fn a_kind_without_a_generation_is_created_once_then_changed_or_resynced() {
        let never_ran = Facts::default();
        assert_eq!(decide(never_ran), Trigger::Created);
        let ran = Facts { recorded: true, ..Facts::default() };
        assert_eq!(decide(ran.clone()), Trigger::Startup, "ran before the operator started");
        assert_eq!(decide(Facts { object_changed: true, ..ran.clone() }), Trigger::ObjectChanged);
        assert_eq!(decide(Facts { scheduled: Some(Scheduled::Resync), ..ran.clone() }), Trigger::Resync);
        let annotated = Facts { annotations_changed: true, object_changed: true, ..ran };
        assert_eq!(decide(annotated), Trigger::AnnotationsChanged);
        let first_run_of_a_generation = Facts { generation: Some(1), recorded: true, ..Facts::default() };
        assert_eq!(decide(first_run_of_a_generation), Trigger::Created, "no generation observed yet");
    }

    #[test]
    fn triggers_serialize_with_their_details() {
        let dependent = Dependent { kind: "ConfigMap".into(), namespace: None, name: "c".into() };
        assert_eq!(
            serde_json::to_value(Trigger::DependentChanged { dependent }).unwrap(),
            json!({"reason": "DependentChanged", "dependent": {"kind": "ConfigMap", "name": "c"}})
        );
        assert_eq!(
            serde_json::to_value(Trigger::SpecChanged { from: 1, to: 2 }).unwrap(),
            json!({"reason": "SpecChanged", "fromGeneration": 1, "toGeneration": 2})
        );
        assert!(Trigger::Resync.confirms() && Trigger::Startup.confirms() && !Trigger::Created.confirms());
    }
}
