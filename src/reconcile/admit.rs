//! Admitting a planned run: our finalizer goes on first, the journal decides why the run happens,
//! a refused spec stops here, and the CR is marked `Running` (when the status is managed).

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};

use super::context::{Context, Error};
use super::cr::set_finalizer;
use super::journal::Journal;
use super::judge::Failure;
use super::plan::Run;
use super::series;
use crate::status::{self, Transition};

/// What admission leaves.
#[derive(Debug)]
#[must_use]
pub enum Admission {
    /// The CR is gone.
    Gone,
    /// The spec is refused: conclude with this failure.
    Refused(Failure),
    /// The run goes ahead with the CR as admission left it.
    Admitted,
}

/// Admits `run` of `current`, updating `current` to the copy the run gets: the one the finalizer
/// patch or the `Running` write returned.
pub async fn admit(
    ctx: &Context,
    api: &Api<DynamicObject>,
    key: &str,
    current: &mut DynamicObject,
    run: Run,
    journal: &mut Journal,
) -> Result<Admission, Error> {
    if let (true, Some(finalizer)) = (run.add_finalizer, &ctx.watch.finalizer) {
        match set_finalizer(api, current, &finalizer.name, true, key).await? {
            Some(updated) => *current = updated,
            None => return Ok(Admission::Gone),
        }
    }
    journal.start(ctx, current, run.finalizing).await;
    if let Some(refusal) = run.refusal {
        return Ok(Admission::Refused(refusal));
    }
    if ctx.watch.manage_status {
        let name = current.name_any();
        let generation = current.metadata.generation;
        let fresh = Some(current.clone());
        let running = Transition::Running;
        match status::write_with_hosts(api, &name, ctx.conditions(), &running, generation, None, fresh)
            .await?
        {
            Some(updated) => *current = updated,
            None => return Ok(Admission::Gone),
        }
        // The spec may have changed since the read: the run gets this copy, so its status and
        // record name this copy's generation.
        journal.run_on(current.metadata.generation);
        series::conditions(ctx, current);
    }
    Ok(Admission::Admitted)
}
