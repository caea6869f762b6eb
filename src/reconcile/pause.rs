//! A paused CR (its annotation, see `plan::paused`): nothing runs and no resync is scheduled, the
//! `Paused` condition is written once when it becomes paused (when the status is managed), and the
//! watch's paused CRs are counted (`ansible_operator_paused_crs`). No reconcile is counted and no run
//! record written: pausing happens before any of that.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::context::{Context, Error, Next};
use super::cr::api_for;
use crate::status::{self, Transition, conditions};

/// The keys of a watch's CRs that are paused now.
#[derive(Debug, Default)]
pub struct PausedCrs(Mutex<HashSet<String>>);

impl PausedCrs {
    /// Notes whether `key` is paused; the number of paused CRs when that changed it.
    fn note(&self, key: &str, paused: bool) -> Option<usize> {
        let mut keys = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = if paused { keys.insert(key.to_string()) } else { keys.remove(key) };
        changed.then_some(keys.len())
    }
}

/// Notes whether the CR `key` is paused, updating the watch's gauge when that changed (a deleted
/// CR is noted as not paused).
pub fn note(ctx: &Context, key: &str, paused: bool) {
    if let Some(count) = ctx.paused.note(key, paused) {
        ctx.metrics.set_paused_crs(&ctx.gvk_label, i64::try_from(count).unwrap_or(i64::MAX));
    }
}

/// The reconcile of a paused CR: its `Paused` condition (once), and nothing else until it changes.
pub async fn pause(object: &DynamicObject, ctx: &Context, key: &str) -> Result<Next, Error> {
    note(ctx, key, true);
    ctx.backoff.reset(key);
    if ctx.watch.manage_status && !is_marked(object) {
        let api = api_for(ctx, object);
        status::write(&api, &object.name_any(), &Transition::Paused, object.metadata.generation).await?;
        tracing::info!("paused: nothing runs until the annotation is removed");
    } else {
        tracing::debug!("paused: nothing runs");
    }
    Ok(Next::AwaitChange)
}

/// Whether the CR's `Paused` condition is already `True`.
fn is_marked(object: &DynamicObject) -> bool {
    status::conditions_of(object).iter().any(|c| c["type"] == conditions::PAUSED && c["status"] == "True")
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
