//! The versions of children a CR's own runs wrote, so that a run's writes do not run its CR again.
//! Upstream's dependent watch sees every change a run makes to its children come back and runs the
//! CR once more, to find nothing to do; here a child's change triggers its owner only when someone
//! else made it. A version is told by its object's UID and resourceVersion, as the write's answer
//! and the watch event both carry them. An event that comes while one of its owner's runs is still
//! going is judged when that run ends: only then is every write of the run known.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::history::ledger::CrKey;

/// How long a written version is remembered: its watch event comes well within this.
const KEEP: Duration = Duration::from_secs(120);

/// Versions remembered per CR; a run that writes more leaves the oldest out (their events then
/// trigger the CR, as upstream's do).
const MAX_VERSIONS: usize = 1000;

/// One version of an object: its UID and resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The object's UID.
    pub uid: String,
    /// Its resourceVersion.
    pub resource_version: String,
}

impl Version {
    /// The version an object (a write's answer, a watch event's object) names; `None` without a
    /// UID or a resourceVersion.
    pub fn of(metadata: &serde_json::Value) -> Option<Version> {
        Some(Version {
            uid: metadata["uid"].as_str().filter(|uid| !uid.is_empty())?.to_string(),
            resource_version: metadata["resourceVersion"].as_str().filter(|rv| !rv.is_empty())?.to_string(),
        })
    }
}

/// Whose change a child's event shows, for one of its owners.
#[derive(Debug)]
pub enum Verdict {
    /// A run of the owner wrote this version.
    Own,
    /// Someone else did: the owner runs.
    Foreign,
    /// A run of the owner is in flight: judge again once the receiver's sender is gone.
    AfterRun(watch::Receiver<()>),
}

/// The owners' runs in flight and the versions their runs wrote.
#[derive(Debug, Default)]
pub struct OwnWrites {
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_cr: HashMap<CrKey, Entry>,
    /// When expired versions were last swept from every entry.
    swept: Option<Instant>,
}

#[derive(Debug, Default)]
struct Entry {
    /// Its runs in flight.
    runs: usize,
    /// Dropped when the last run in flight ends, which wakes the events waiting on it.
    ended: Option<watch::Sender<()>>,
    /// The versions its runs wrote, with when.
    versions: Vec<(Version, Instant)>,
}

impl Entry {
    fn expire(&mut self, now: Instant) {
        self.versions.retain(|(_, at)| now.duration_since(*at) < KEEP);
    }

    fn idle(&self) -> bool {
        self.runs == 0 && self.versions.is_empty()
    }
}

/// A run of a CR in flight; its end (the drop) lets the events that came meanwhile be judged.
#[derive(Debug)]
pub struct OwnRun {
    writes: Arc<OwnWrites>,
    cr: CrKey,
}

impl Drop for OwnRun {
    fn drop(&mut self) {
        let mut entries = self.writes.lock();
        if let Some(entry) = entries.by_cr.get_mut(&self.cr) {
            entry.runs = entry.runs.saturating_sub(1);
            if entry.runs == 0 {
                entry.ended = None;
            }
            if entry.idle() {
                entries.by_cr.remove(&self.cr);
            }
        }
    }
}

impl OwnWrites {
    /// A run of `cr` starts.
    pub fn started(self: &Arc<Self>, cr: CrKey) -> OwnRun {
        let now = Instant::now();
        let mut entries = self.lock();
        if entries.swept.is_none_or(|swept| now.duration_since(swept) >= KEEP) {
            entries.by_cr.values_mut().for_each(|entry| entry.expire(now));
            entries.by_cr.retain(|_, entry| !entry.idle());
            entries.swept = Some(now);
        }
        let entry = entries.by_cr.entry(cr.clone()).or_default();
        entry.runs += 1;
        entry.ended.get_or_insert_with(|| watch::channel(()).0);
        OwnRun { writes: self.clone(), cr }
    }

    /// A run of `cr` in flight wrote `version`.
    pub fn wrote(&self, cr: &CrKey, version: Version) {
        let mut entries = self.lock();
        let Some(entry) = entries.by_cr.get_mut(cr).filter(|entry| entry.runs > 0) else { return };
        if entry.versions.len() >= MAX_VERSIONS {
            entry.versions.remove(0);
        }
        entry.versions.push((version, Instant::now()));
    }

    /// Whose change `version` of one of `cr`'s children is. A version found is forgotten: its
    /// event comes once.
    pub fn judge(&self, cr: &CrKey, version: &Version) -> Verdict {
        let mut entries = self.lock();
        let Some(entry) = entries.by_cr.get_mut(cr) else { return Verdict::Foreign };
        entry.expire(Instant::now());
        if let Some(found) = entry.versions.iter().position(|(written, _)| written == version) {
            entry.versions.swap_remove(found);
            if entry.idle() {
                entries.by_cr.remove(cr);
            }
            return Verdict::Own;
        }
        match &entry.ended {
            Some(ended) => Verdict::AfterRun(ended.subscribe()),
            None => Verdict::Foreign,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cr(name: &str) -> CrKey {
        ("example.com".into(), "Note".into(), Some("ns".into()), name.into())
    }

    fn version(rv: &str) -> Version {
        Version { uid: "u1".into(), resource_version: rv.into() }
    }

    #[test]
    fn a_version_the_run_wrote_is_its_own_once() {
        let writes = Arc::new(OwnWrites::default());
        let run = writes.started(cr("a"));
        writes.wrote(&cr("a"), version("10"));
        drop(run);
        assert!(matches!(writes.judge(&cr("a"), &version("10")), Verdict::Own));
        assert!(matches!(writes.judge(&cr("a"), &version("10")), Verdict::Foreign), "an event comes once");
        assert!(matches!(writes.judge(&cr("a"), &version("11")), Verdict::Foreign));
        assert!(writes.lock().by_cr.is_empty(), "nothing is kept of a CR with nothing left to match");
    }

    #[test]
    fn another_crs_run_or_a_version_of_another_object_is_foreign() {
        let writes = Arc::new(OwnWrites::default());
        let _run = writes.started(cr("a"));
        writes.wrote(&cr("a"), version("10"));
        assert!(matches!(writes.judge(&cr("b"), &version("10")), Verdict::Foreign));
        let other = Version { uid: "u2".into(), resource_version: "10".into() };
        assert!(matches!(writes.judge(&cr("a"), &other), Verdict::AfterRun(_)));
    }

    #[tokio::test]
    async fn an_event_during_a_run_is_judged_when_the_run_ends() {
        let writes = Arc::new(OwnWrites::default());
        let run = writes.started(cr("a"));
        let Verdict::AfterRun(mut ended) = writes.judge(&cr("a"), &version("10")) else {
            panic!("a run is in flight")
        };
        // The event came before the proxy saw the write's answer.
        writes.wrote(&cr("a"), version("10"));
        drop(run);
        assert!(ended.changed().await.is_err(), "the run's end wakes the event");
        assert!(matches!(writes.judge(&cr("a"), &version("10")), Verdict::Own));
    }

    #[test]
    fn the_event_waits_for_the_last_of_two_runs() {
        let writes = Arc::new(OwnWrites::default());
        let first = writes.started(cr("a"));
        let second = writes.started(cr("a"));
        let Verdict::AfterRun(ended) = writes.judge(&cr("a"), &version("10")) else { panic!() };
        drop(first);
        assert!(ended.has_changed().is_ok(), "a run is still in flight");
        drop(second);
        assert!(ended.has_changed().is_err());
    }

    #[test]
    fn a_write_outside_a_run_is_not_remembered() {
        let writes = Arc::new(OwnWrites::default());
        writes.wrote(&cr("a"), version("10"));
        assert!(matches!(writes.judge(&cr("a"), &version("10")), Verdict::Foreign));
    }

    #[test]
    fn versions_name_a_uid_and_a_resource_version() {
        let metadata = serde_json::json!({"uid": "u1", "resourceVersion": "7"});
        assert_eq!(Version::of(&metadata), Some(Version { uid: "u1".into(), resource_version: "7".into() }));
        assert_eq!(Version::of(&serde_json::json!({"uid": "u1"})), None);
        assert_eq!(Version::of(&serde_json::json!({"uid": "", "resourceVersion": "7"})), None);
    }
}
