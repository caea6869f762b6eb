//! A paused CR (its annotation, see `plan::paused`): nothing runs and no resync is scheduled, the
//! `Paused` condition is written once when it becomes paused (when the status is managed), and the
//! watch's paused CRs are counted (`ansible_operator_paused_crs`). No reconcile is counted and no run
//! record written: pausing happens before any of that.

use kube::ResourceExt;

use super::context::{Context, Error, Next};
use super::cr::api_for;
use crate::cached::Cached;
use crate::status::{self, Transition};

/// Notes whether the CR `key` is paused, updating the watch's gauge when that changed (a deleted
/// CR is noted as not paused).
pub fn note(ctx: &Context, key: &str, paused: bool) {
    if let Some(count) = ctx.paused.note(key, paused) {
        ctx.metrics.set_paused_crs(&ctx.gvk_label, i64::try_from(count).unwrap_or(i64::MAX));
    }
}

/// The reconcile of a paused CR: its `Paused` condition (once), and nothing else until it changes.
pub async fn pause(object: &Cached, ctx: &Context, key: &str) -> Result<Next, Error> {
    note(ctx, key, true);
    ctx.backoff.reset(key);
    if ctx.watch.manage_status && !object.standing.paused() {
        let api = api_for(ctx, object);
        let written = status::write(
            &api,
            &object.name_any(),
            ctx.conditions(),
            &Transition::Paused,
            object.metadata.generation,
        )
        .await?;
        if let Some(written) = written {
            super::series::conditions(ctx, &written);
        }
        tracing::info!("paused: nothing runs until the annotation is removed");
    } else {
        tracing::debug!("paused: nothing runs");
    }
    Ok(Next::AwaitChange)
}
