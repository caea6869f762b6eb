//! The CR's own metric series (`--cr-metrics`): the status of each of our conditions as a status
//! write left them, and how its runs end (last success, failures since).

use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};

use super::context::Context;
use crate::metrics::CrRef;
use crate::status::{self, conditions::OURS};

/// The CR as its series name it.
pub fn cr_ref<K: Resource>(ctx: &Context, object: &K) -> CrRef {
    CrRef {
        group: ctx.watch.gvk.group.clone(),
        kind: ctx.watch.gvk.kind.clone(),
        namespace: object.namespace().unwrap_or_default(),
        name: object.name_any(),
    }
}

/// Exposes the conditions of ours that `written` (the CR as a status write returned it) carries.
pub fn conditions(ctx: &Context, written: &DynamicObject) {
    let ours = status::conditions_of(written).iter().filter_map(|condition| {
        let kind = condition["type"].as_str()?;
        let kind = OURS.iter().copied().find(|ours| *ours == kind)?;
        Some((kind, condition["status"] == "True"))
    });
    ctx.metrics.cr_conditions(&cr_ref(ctx, written), ours);
}

/// Counts how a run of `cr` ended.
pub fn concluded(ctx: &Context, cr: &CrRef, succeeded: bool) {
    if succeeded {
        let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
        ctx.metrics.cr_succeeded(cr, now);
    } else {
        ctx.metrics.cr_failed(cr);
    }
}
