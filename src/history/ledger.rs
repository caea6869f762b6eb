//! What the operator remembers between runs of a CR, to say why the next one happens: the
//! dependent object that changed, what it scheduled when the last run ended, and what the last run
//! saw of the CR (its annotations and, for kinds without a generation, its content). In memory only: after
//! a restart every CR's first run is a start-up run (with `--startup-resync=due`, a converged CR's
//! first run is the resync scheduled when it was first seen).

use std::collections::HashMap;
use std::sync::Mutex;

use super::trigger::{Dependent, Scheduled};

/// A CR, as `(group, kind, namespace, name)`.
pub type CrKey = (String, String, Option<String>, String);

#[derive(Debug, Default, Clone)]
struct Entry {
    dependent: Option<Dependent>,
    scheduled: Option<Scheduled>,
    /// Kept across runs (a run's start replaces it), unlike the two above, which a run takes.
    seen: Option<Seen>,
    /// With `statusProgress`: the tasks the last run that ended started (kept across runs).
    tasks: Option<usize>,
    /// The time of the last manual request a run saw (kept across runs).
    served: Option<String>,
}

/// What a run saw of its CR, as hashes: enough to tell that the CR changed since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Its annotations.
    pub annotations: u64,
    /// Everything but its status and the metadata the API server moves (resourceVersion,
    /// managedFields): the change a kind without a generation runs on.
    pub content: u64,
}

/// The remembered reasons, per CR: one entry each, as a converged CR has its scheduled resync and
/// what its last run saw.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: Mutex<HashMap<CrKey, Entry>>,
}

impl Ledger {
    /// A dependent object of the CR changed (the first one since the last run is kept).
    pub fn dependent_changed(&self, cr: CrKey, dependent: Dependent) {
        self.lock().entry(cr).or_default().dependent.get_or_insert(dependent);
    }

    /// The run that just ended scheduled the next one.
    pub fn scheduled(&self, cr: CrKey, scheduled: Scheduled) {
        self.lock().entry(cr).or_default().scheduled = Some(scheduled);
    }

    /// Takes what is remembered of the CR, as a run starts.
    pub fn take(&self, cr: &CrKey) -> (Option<Dependent>, Option<Scheduled>) {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(cr) else { return (None, None) };
        let taken = (entry.dependent.take(), entry.scheduled.take());
        if entry.seen.is_none() && entry.tasks.is_none() && entry.served.is_none() {
            entries.remove(cr);
        }
        taken
    }

    /// Whether the CR's next run is a plain periodic resync: the last run scheduled one and no
    /// dependent object changed since.
    pub fn resync_scheduled(&self, cr: &CrKey) -> bool {
        self.lock()
            .get(cr)
            .is_some_and(|entry| entry.dependent.is_none() && entry.scheduled == Some(Scheduled::Resync))
    }

    /// A run starts on the CR as `seen`; returns what the previous run saw (`None`: none since
    /// the operator started).
    pub fn saw(&self, cr: CrKey, seen: Seen) -> Option<Seen> {
        self.lock().entry(cr).or_default().seen.replace(seen)
    }

    /// A run of the CR starts, seeing the manual request made at `at`; returns whether no run saw
    /// it before: `None` when no run saw one since the operator started (the caller then judges by
    /// the last record's start).
    pub fn serve_request(&self, cr: CrKey, at: &str) -> Option<bool> {
        let mut entries = self.lock();
        let served = &mut entries.entry(cr).or_default().served;
        let fresh = served.as_deref().map(|before| before != at);
        *served = Some(at.to_string());
        fresh
    }

    /// The run of the CR that just ended started `tasks` tasks.
    pub fn ran_tasks(&self, cr: CrKey, tasks: usize) {
        self.lock().entry(cr).or_default().tasks = Some(tasks);
    }

    /// How many tasks the CR's last run that ended started.
    pub fn tasks(&self, cr: &CrKey) -> Option<usize> {
        self.lock().get(cr).and_then(|entry| entry.tasks)
    }

    /// Forgets a CR that is gone.
    pub fn forget(&self, cr: &CrKey) {
        self.lock().remove(cr);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CrKey, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_request_is_served_once_whatever_runs_started_since_it_was_made() {
        let ledger = Ledger::default();
        assert_eq!(ledger.serve_request(key(), "10:00:00"), None, "none seen since the start");
        assert_eq!(ledger.serve_request(key(), "10:00:00"), Some(false), "the same request again");
        assert_eq!(ledger.serve_request(key(), "10:00:05"), Some(true), "a new one");
        let _ = ledger.take(&key());
        assert_eq!(ledger.serve_request(key(), "10:00:05"), Some(false), "kept across runs");
    }

    fn key() -> CrKey {
        ("g".into(), "K".into(), Some("ns".into()), "n".into())
    }

    #[test]
    fn a_run_takes_what_was_remembered_once() {
        let ledger = Ledger::default();
        let first = Dependent { kind: "ConfigMap".into(), namespace: None, name: "a".into() };
        ledger.dependent_changed(key(), first.clone());
        ledger.dependent_changed(key(), Dependent { name: "b".into(), ..first.clone() });
        ledger.scheduled(key(), Scheduled::Resync);
        assert_eq!(ledger.take(&key()), (Some(first), Some(Scheduled::Resync)));
        assert_eq!(ledger.take(&key()), (None, None));
    }

    #[test]
    fn each_run_learns_what_the_previous_one_saw_until_the_cr_is_forgotten() {
        let ledger = Ledger::default();
        let first = Seen { annotations: 1, content: 10 };
        let second = Seen { annotations: 2, content: 10 };
        assert_eq!(ledger.saw(key(), first), None, "no run since the operator started");
        let _ = ledger.take(&key());
        assert_eq!(ledger.saw(key(), second), Some(first), "a run's take leaves it");
        ledger.forget(&key());
        assert_eq!(ledger.saw(key(), first), None);
    }

    #[test]
    fn only_a_scheduled_resync_without_a_dependent_change_is_a_plain_resync() {
        let ledger = Ledger::default();
        assert!(!ledger.resync_scheduled(&key()));
        ledger.scheduled(key(), Scheduled::Resync);
        assert!(ledger.resync_scheduled(&key()));
        ledger.dependent_changed(
            key(),
            Dependent { kind: "ConfigMap".into(), namespace: None, name: "a".into() },
        );
        assert!(!ledger.resync_scheduled(&key()));
        let _ = ledger.take(&key());
        ledger.scheduled(key(), Scheduled::RequeueAfter);
        assert!(!ledger.resync_scheduled(&key()));
    }
}
