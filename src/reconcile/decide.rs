//! What a reconcile does with a CR, decided from its metadata alone (upstream §6.2 steps 3 and 11).

use kube::api::ObjectMeta;

/// The decision before a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Before {
    /// The CR is being deleted and carries no finalizer of ours: nothing to do.
    SkipTerminating,
    /// Run the main playbook or role; first add our finalizer when `add_finalizer`.
    Run {
        /// The finalizer is configured but not on the CR yet.
        add_finalizer: bool,
    },
    /// The CR is being deleted and carries our finalizer: run the finalizer.
    Finalize,
}

/// Decides from the CR's metadata and the configured finalizer name.
pub fn before(meta: &ObjectMeta, finalizer: Option<&str>) -> Before {
    let has_ours = finalizer.is_some_and(|name| has_finalizer(meta, name));
    match (meta.deletion_timestamp.is_some(), has_ours) {
        (true, true) => Before::Finalize,
        (true, false) => Before::SkipTerminating,
        (false, _) => Before::Run { add_finalizer: finalizer.is_some() && !has_ours },
    }
}

/// The decision after a run, from the CR as re-read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum After {
    /// Nothing to change on the CR's metadata.
    Nothing,
    /// The finalizer run succeeded: remove our finalizer so the deletion completes.
    RemoveFinalizer,
    /// The CR started terminating during the run: come back soon to run the finalizer.
    RunFinalizerSoon,
}

/// Decides what follows a run: `finalized` when this was the finalizer run.
pub fn after(meta: &ObjectMeta, finalizer: Option<&str>, finalized: bool, succeeded: bool) -> After {
    let Some(name) = finalizer else {
        return After::Nothing;
    };
    if !has_finalizer(meta, name) {
        return After::Nothing;
    }
    match (finalized, meta.deletion_timestamp.is_some()) {
        (true, _) if succeeded => After::RemoveFinalizer,
        (false, true) => After::RunFinalizerSoon,
        _ => After::Nothing,
    }
}

/// Whether the CR lists the finalizer.
pub fn has_finalizer(meta: &ObjectMeta, name: &str) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == name)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    const F: &str = "example.com/finalizer";

    fn meta(deleting: bool, finalizers: &[&str]) -> ObjectMeta {
        ObjectMeta {
            deletion_timestamp: deleting.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
            finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn live_cr_without_finalizer_config_just_runs() {
        assert_eq!(before(&meta(false, &[]), None), Before::Run { add_finalizer: false });
    }

    #[test]
    fn live_cr_gets_the_configured_finalizer_first() {
        assert_eq!(before(&meta(false, &[]), Some(F)), Before::Run { add_finalizer: true });
        assert_eq!(before(&meta(false, &[F]), Some(F)), Before::Run { add_finalizer: false });
    }

    #[test]
    fn terminating_cr_with_our_finalizer_is_finalized() {
        assert_eq!(before(&meta(true, &[F]), Some(F)), Before::Finalize);
    }

    #[test]
    fn terminating_cr_without_our_finalizer_is_skipped() {
        assert_eq!(before(&meta(true, &["other"]), Some(F)), Before::SkipTerminating);
        assert_eq!(before(&meta(true, &[]), None), Before::SkipTerminating);
    }

    #[test]
    fn finalizer_is_removed_only_after_a_successful_finalizer_run() {
        assert_eq!(after(&meta(true, &[F]), Some(F), true, true), After::RemoveFinalizer);
        assert_eq!(after(&meta(true, &[F]), Some(F), true, false), After::Nothing);
    }

    #[test]
    fn cr_deleted_during_a_normal_run_gets_its_finalizer_run_soon() {
        assert_eq!(after(&meta(true, &[F]), Some(F), false, true), After::RunFinalizerSoon);
        assert_eq!(after(&meta(false, &[F]), Some(F), false, true), After::Nothing);
    }
}
