//! What a reconcile does with the CR it read, decided from the CR, the watch and the flags alone:
//! the requeue period, skip or run (the finalizer or the main target), whether our finalizer goes on
//! first, whether the spec is refused for setting Ansible's own variables, and whether the CR is
//! paused (its annotation says so and it is not being finalized).

use std::time::Duration;

use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::annotations::{self, Bounded};
use super::context::Settings;
use super::cr::key_of;
use super::decide::{self, Before};
use super::judge::Failure;
use super::spec::check_reserved;
use crate::watches::Watch;

/// The process-wide flags a plan depends on (a watch's own setting wins over each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flags {
    /// `--reconcile-period`.
    pub reconcile_period: Duration,
    /// `--trust-cr-templates`.
    pub trust_cr_templates: bool,
    /// `--trust-cr-variables`.
    pub trust_cr_variables: bool,
}

impl Flags {
    /// The flags among the settings.
    pub fn of(settings: &Settings) -> Self {
        Flags {
            reconcile_period: settings.reconcile_period,
            trust_cr_templates: settings.trust_cr_templates,
            trust_cr_variables: settings.trust_cr_variables,
        }
    }
}

/// What a reconcile does with the CR.
#[derive(Debug)]
#[must_use]
pub struct Plan {
    /// The requeue period after a successful run: the annotation's, else the watch's, else the flag's.
    pub period: Duration,
    /// What the reconcile-period annotation asked for when it was below the minimum.
    pub period_asked: Option<Duration>,
    /// Skip or run.
    pub step: Step,
}

/// Whether anything runs.
#[derive(Debug)]
#[must_use]
pub enum Step {
    /// The CR is being deleted and carries no finalizer of ours: nothing to do.
    Skip,
    /// The CR is paused: nothing runs, no resync is scheduled.
    Paused,
    /// Run the finalizer or the main target.
    Run(Run),
}

/// A run to admit.
#[derive(Debug)]
#[must_use]
pub struct Run {
    /// The CR is being deleted and carries our finalizer: run the finalizer.
    pub finalizing: bool,
    /// Our finalizer is configured but not on the CR yet: add it first.
    pub add_finalizer: bool,
    /// The spec would set Ansible's own variables: once admitted (so the refusal is recorded),
    /// nothing runs.
    pub refusal: Option<Failure>,
}

/// Plans the reconcile of `object`. A reconcile-period annotation that is not a duration fails it
/// before anything else.
pub fn plan(object: &DynamicObject, watch: &Watch, flags: Flags) -> Result<Plan, Failure> {
    let key = key_of(object);
    let period = annotations::reconcile_period(object.annotations())
        .map_err(|source| Failure::period_annotation(&key, source))?;
    let period_asked = period.and_then(|p| p.asked);
    let period = period_or_default(period, watch, flags);
    let finalizer = watch.finalizer.as_ref().map(|f| f.name.as_str());
    let run = |finalizing, add_finalizer| {
        let refusal = refusal(object, watch, flags, finalizing, &key);
        Step::Run(Run { finalizing, add_finalizer, refusal })
    };
    let step = match decide::before(&object.metadata, finalizer) {
        Before::SkipTerminating => Step::Skip,
        Before::Finalize => run(true, false),
        Before::Run { .. } if annotations::paused(object.annotations()) => Step::Paused,
        Before::Run { add_finalizer } => run(false, add_finalizer),
    };
    Ok(Plan { period, period_asked, step })
}

/// Whether `object` is paused: its annotation says so, and it is not being deleted with our
/// finalizer on it (a paused CR is still finalized). Needs no more than the cached copy, so the
/// reconcile decides it before it counts as one.
pub fn paused<K: Resource>(object: &K, watch: &Watch) -> bool {
    let finalizer = watch.finalizer.as_ref().map(|f| f.name.as_str());
    annotations::paused(object.annotations())
        && matches!(decide::before(object.meta(), finalizer), Before::Run { .. })
}

/// The requeue period of `object`; `None` when its annotation is not a duration (its run fails).
pub fn period<K: Resource>(object: &K, watch: &Watch, flags: Flags) -> Option<Duration> {
    let annotation = annotations::reconcile_period(object.annotations()).ok()?;
    Some(period_or_default(annotation, watch, flags))
}

/// The annotation's period, else the watch's, else the flag's.
fn period_or_default(annotation: Option<Bounded<Duration>>, watch: &Watch, flags: Flags) -> Duration {
    let default = watch.reconcile_period.unwrap_or(flags.reconcile_period);
    annotation.map_or(default, |p| p.value)
}

/// A CR whose spec would set Ansible's own variables does not run, unless the watch trusts its CRs'
/// variables.
fn refusal(
    object: &DynamicObject,
    watch: &Watch,
    flags: Flags,
    finalizing: bool,
    key: &str,
) -> Option<Failure> {
    let object_json = serde_json::to_value(object).unwrap_or(Value::Null);
    let trust = (flags.trust_cr_templates, flags.trust_cr_variables);
    let source = check_reserved(watch, trust.0, trust.1, &object_json, finalizing).err()?;
    Some(Failure::reserved_variables(key, source))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::reconcile::context::Error;
    use crate::reconcile::judge::{RESERVED_VARIABLE, Written};
    use crate::status::conditions::reason;
    use crate::watches::{self, Defaults, Environment};

    const FINALIZER: &str = "cache.example.com/finalizer";

    const FLAGS: Flags = Flags {
        reconcile_period: Duration::from_secs(36000),
        trust_cr_templates: false,
        trust_cr_variables: false,
    };

    /// A watch of `Memcached` with these extra lines; its playbook is any file that exists.
    fn watch(extra: &str) -> Watch {
        let text = format!(
            "- group: cache.example.com\n  version: v1alpha1\n  kind: Memcached\n  playbook: Cargo.toml\n{extra}"
        );
        let defaults = Defaults { max_concurrent_reconciles: 1, ansible_verbosity: 2 };
        let env = Environment::new(env!("CARGO_MANIFEST_DIR"));
        let mut loaded = watches::parse(&text, Path::new("watches.yaml"), &defaults, &env).expect("a watch");
        loaded.watches.remove(0)
    }

    fn with_finalizer() -> Watch {
        watch(&format!("  finalizer:\n    name: {FINALIZER}\n    vars:\n      state: absent\n"))
    }

    fn cr(metadata: Value, spec: Value) -> DynamicObject {
        let mut metadata = metadata;
        metadata["name"] = json!("cache");
        metadata["namespace"] = json!("ns");
        serde_json::from_value(json!({
            "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
            "metadata": metadata, "spec": spec,
        }))
        .expect("a CR")
    }

    fn run_of(plan: Plan) -> Run {
        match plan.step {
            Step::Run(run) => run,
            Step::Skip | Step::Paused => panic!("expected a run"),
        }
    }

    fn planned(object: &DynamicObject, watch: &Watch, flags: Flags) -> Plan {
        plan(object, watch, flags).expect("a plan")
    }

    #[test]
    fn a_live_cr_runs_with_the_flags_period_unless_the_watch_sets_one() {
        let object = cr(json!({}), json!({"size": 1}));
        let plan = planned(&object, &watch(""), FLAGS);
        assert_eq!(plan.period, FLAGS.reconcile_period);
        assert_eq!(plan.period_asked, None);
        let run = run_of(plan);
        assert!(!run.finalizing && !run.add_finalizer && run.refusal.is_none());

        let plan = planned(&object, &watch("  reconcilePeriod: 30s\n"), FLAGS);
        assert_eq!(plan.period, Duration::from_secs(30));
        assert_eq!(period(&object, &watch("  reconcilePeriod: 30s\n"), FLAGS), Some(Duration::from_secs(30)));
    }

    #[test]
    fn the_period_annotation_wins_and_is_raised_to_the_minimum() {
        let annotations = json!({"annotations": {(annotations::RECONCILE_PERIOD): "100ms"}});
        let plan = planned(&cr(annotations, json!({})), &watch("  reconcilePeriod: 30s\n"), FLAGS);
        assert_eq!(plan.period, annotations::MIN_RECONCILE_PERIOD);
        assert_eq!(plan.period_asked, Some(Duration::from_millis(100)));
    }

    #[test]
    fn a_period_annotation_that_is_not_a_duration_fails_whatever_manage_status_says() {
        let annotations = json!({"annotations": {(annotations::RECONCILE_PERIOD): "soon"}});
        let failure = plan(&cr(annotations, json!({})), &watch("  manageStatus: false\n"), FLAGS)
            .expect_err("a failure");
        assert_eq!(failure.reason, reason::FAILED);
        assert!(
            failure.message.starts_with("Unable to parse reconcile period annotation: "),
            "{}",
            failure.message
        );
        assert_eq!(failure.written, Written::Always);
        assert!(matches!(*failure.error, Error::Annotation { ref key, .. } if key == "ns/cache"));
    }

    #[test]
    fn a_live_cr_gets_the_configured_finalizer_first() {
        let run = run_of(planned(&cr(json!({}), json!({})), &with_finalizer(), FLAGS));
        assert!(run.add_finalizer && !run.finalizing);

        let run =
            run_of(planned(&cr(json!({"finalizers": [FINALIZER]}), json!({})), &with_finalizer(), FLAGS));
        assert!(!run.add_finalizer);
    }

    #[test]
    fn a_terminating_cr_runs_the_finalizer_only_when_it_carries_ours() {
        let deleting = |finalizers: Value| {
            cr(json!({"deletionTimestamp": "2026-11-25T10:00:00Z", "finalizers": finalizers}), json!({}))
        };
        let run = run_of(planned(&deleting(json!([FINALIZER])), &with_finalizer(), FLAGS));
        assert!(run.finalizing && !run.add_finalizer);
        let skipped = planned(&deleting(json!(["other"])), &with_finalizer(), FLAGS);
        assert!(matches!(skipped.step, Step::Skip));
    }

    #[test]
    fn a_spec_that_sets_ansible_variables_is_refused_when_the_status_is_managed() {
        let object = cr(json!({}), json!({"ansibleConnection": "local"}));
        let refusal = run_of(planned(&object, &watch(""), FLAGS)).refusal.expect("a refusal");
        assert_eq!(refusal.reason, RESERVED_VARIABLE);
        assert!(
            refusal
                .message
                .contains("spec.ansibleConnection would set the Ansible variable ansible_connection")
        );
        assert_eq!(refusal.written, Written::WhenManaged);
        assert!(matches!(*refusal.error, Error::ReservedVariables { .. }));

        let trusted = Flags { trust_cr_variables: true, ..FLAGS };
        assert!(run_of(planned(&object, &watch(""), trusted)).refusal.is_none());
        let trusting_watch = watch("  trustCRVariables: true\n");
        assert!(run_of(planned(&object, &trusting_watch, FLAGS)).refusal.is_none());
    }

    #[test]
    fn a_paused_cr_does_not_run_but_is_still_finalized() {
        let paused = json!({(annotations::PAUSED): "true"});
        let object = cr(json!({"annotations": paused}), json!({}));
        assert!(matches!(planned(&object, &with_finalizer(), FLAGS).step, Step::Paused));
        assert!(super::paused(&object, &with_finalizer()));

        let deleting = cr(
            json!({"annotations": paused, "deletionTimestamp": "2026-11-25T10:00:00Z",
                   "finalizers": [FINALIZER]}),
            json!({}),
        );
        assert!(run_of(planned(&deleting, &with_finalizer(), FLAGS)).finalizing);
        assert!(!super::paused(&deleting, &with_finalizer()));

        let resumed = cr(json!({"annotations": {(annotations::PAUSED): "false"}}), json!({}));
        assert!(!run_of(planned(&resumed, &watch(""), FLAGS)).finalizing);
        assert!(!super::paused(&resumed, &watch("")));
    }
}
