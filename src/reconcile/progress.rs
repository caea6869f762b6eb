//! `statusProgress`: while a CR's run is in flight, its `Running` condition's message names the task
//! the run is at, and how many tasks the CR's last run started, written at most every [`INTERVAL`]
//! (kiali#3468: users stared at "Running reconciliation" for hours).

use std::future::Future;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use tokio::time::MissedTickBehavior;

use super::context::Context;
use super::journal;
use super::judge::Failure;
use super::run::Finished;
use crate::status::{self, Transition, conditions::message};

/// How often the message may change.
pub const INTERVAL: Duration = Duration::from_secs(5);

/// Longest task name written; a longer one is cut.
const MAX_TASK_NAME: usize = 120;

/// Runs `run`, the CR's run, and with `statusProgress` (and `manageStatus`) writes where it is
/// meanwhile. A run that ends records how many tasks it started, the next run's "of N".
pub async fn alongside(
    ctx: &Context,
    api: &Api<DynamicObject>,
    current: &DynamicObject,
    run: impl Future<Output = Result<Finished, Failure>>,
) -> Result<Finished, Failure> {
    if !(ctx.watch.extensions.status_progress && ctx.watch.manage_status) {
        return run.await;
    }
    let cr = journal::cr_key(ctx, current);
    let total = ctx.settings.ledger.tasks(&cr);
    let (uid, name) = (current.uid().unwrap_or_default(), current.name_any());
    let mut ticks = tokio::time::interval(INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut written = None;
    // The write goes beside the run, which reads the run's output meanwhile; one at a time.
    let mut writing: Option<tokio::task::JoinHandle<()>> = None;
    tokio::pin!(run);
    loop {
        tokio::select! {
            finished = &mut run => {
                if let Ok(finished) = &finished {
                    ctx.settings.ledger.ran_tasks(cr, finished.report.outcome.tasks_started);
                }
                if let Some(writing) = writing {
                    writing.abort();
                }
                return finished;
            }
            _ = ticks.tick() => {
                if writing.as_ref().is_some_and(|writing| !writing.is_finished()) {
                    continue;
                }
                let Some((number, task)) = ctx.settings.live.of(&uid).and_then(|run| run.task()) else {
                    continue;
                };
                if written.replace(number) == Some(number) {
                    continue;
                }
                let progress = Transition::Progress(progress_message(number, total, &task));
                let (api, name, conditions) = (api.clone(), name.clone(), ctx.conditions());
                let generation = current.metadata.generation;
                writing = Some(tokio::spawn(async move {
                    if let Err(error) = status::write(&api, &name, conditions, &progress, generation).await {
                        tracing::debug!(error = %crate::logging::error_chain(&error), "could not write the run's progress");
                    }
                }));
            }
        }
    }
}

/// `Running reconciliation: task 3 of 12 ("install etcd")`; without "of N" when the CR's last run is
/// not known or had fewer tasks.
fn progress_message(number: usize, total: Option<usize>, task: &str) -> String {
    let task: String = match task.char_indices().nth(MAX_TASK_NAME) {
        Some((end, _)) => format!("{}...", &task[..end]),
        None => task.to_string(),
    };
    match total.filter(|total| number <= *total) {
        Some(total) => format!("{}: task {number} of {total} ({task:?})", message::RUNNING),
        None => format!("{}: task {number} ({task:?})", message::RUNNING),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_task_and_the_last_runs_count_when_it_fits() {
        assert_eq!(
            progress_message(3, Some(12), "install etcd"),
            "Running reconciliation: task 3 of 12 (\"install etcd\")"
        );
        assert_eq!(progress_message(13, Some(12), "more"), "Running reconciliation: task 13 (\"more\")");
        assert_eq!(progress_message(1, None, "first"), "Running reconciliation: task 1 (\"first\")");
    }

    #[test]
    fn a_long_task_name_is_cut_on_a_character_boundary() {
        let name = "é".repeat(MAX_TASK_NAME + 10);
        let message = progress_message(1, None, &name);
        assert!(message.ends_with(&format!("{}...\")", "é".repeat(MAX_TASK_NAME))), "{message}");
    }
}
