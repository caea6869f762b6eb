//! The set of a watch's paused CRs (a leaf: the context holds it, `pause` keeps it).

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// The keys of a watch's CRs that are paused now.
#[derive(Debug, Default)]
pub struct PausedCrs(Mutex<HashSet<String>>);

impl PausedCrs {
    /// Notes whether `key` is paused; the number of paused CRs when that changed it.
    pub(super) fn note(&self, key: &str, paused: bool) -> Option<usize> {
        let mut keys = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = if paused { keys.insert(key.to_string()) } else { keys.remove(key) };
        changed.then_some(keys.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_changes_only_when_a_cr_pauses_or_resumes() {
        let paused = PausedCrs::default();
        assert_eq!(paused.note("ns/a", true), Some(1));
        assert_eq!(paused.note("ns/a", true), None, "still paused");
        assert_eq!(paused.note("ns/b", true), Some(2));
        assert_eq!(paused.note("ns/a", false), Some(1));
        assert_eq!(paused.note("ns/a", false), None, "was not paused");
        assert_eq!(paused.note("ns/c", false), None);
    }
}
