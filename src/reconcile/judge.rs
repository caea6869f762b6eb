//! What a reconcile's runs mean for the CR, decided from their reports alone: a [`Failure`] (the
//! condition to write, whether `manageStatus` gates it, and the error to retry on) or, for a main
//! run that finished, the conditions it earned ([`Ran`]).

use std::time::Duration;

use serde_json::{Map, Value};

use super::annotations;
use super::context::Error;
use crate::go_duration;
use crate::logging::error_chain;
use crate::remote;
use crate::runner;
use crate::status::Transition;
use crate::status::conditions::reason;
use crate::vars;

/// Reason of the `Failure` condition when the precheck fails.
pub const PRECHECK_FAILED: &str = "PrecheckFailed";

/// Reason of the `Failure` condition when a run took longer than its timeout.
pub const RUN_TIMED_OUT: &str = "RunTimedOut";

/// Reason of the `Failure` condition when the spec would set Ansible's own variables.
pub const RESERVED_VARIABLE: &str = "ReservedVariable";

/// Upstream's status message when the run could not start.
pub const UNABLE_TO_RUN: &str = "Unable to run reconciliation";

/// Whether a failure's condition is written when the watch does not manage the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Always, as upstream's `markError` writes it whatever `manageStatus` says.
    Always,
    /// Only with `manageStatus: true`.
    WhenManaged,
}

/// Why a reconcile ends without a run to conclude from.
#[derive(Debug)]
#[must_use]
pub struct Failure {
    /// The `Failure` condition's reason.
    pub reason: &'static str,
    /// The `Failure` condition's message.
    pub message: String,
    /// Whether `manageStatus` gates the condition.
    pub written: Written,
    /// Per-host results for `status.hosts` (a precheck over an inventory).
    pub hosts: Option<Map<String, Value>>,
    /// What the reconcile returns, so the CR is retried with backoff (boxed: a failure travels
    /// through plans and verdicts, and most of them never fail).
    pub error: Box<Error>,
}

impl Failure {
    /// A failure with upstream's `Failed` reason, written whatever `manageStatus` says.
    fn failed(message: String, error: Error) -> Self {
        Failure {
            reason: reason::FAILED,
            message,
            written: Written::Always,
            hosts: None,
            error: Box::new(error),
        }
    }

    /// The reconcile-period annotation is not a duration.
    pub fn period_annotation(key: &str, source: go_duration::Error) -> Self {
        let message = format!("Unable to parse reconcile period annotation: {source}");
        let annotation = annotations::RECONCILE_PERIOD;
        Failure::failed(message, Error::Annotation { annotation, key: key.into(), source })
    }

    /// The spec would set Ansible's own variables, so nothing runs.
    pub fn reserved_variables(key: &str, source: vars::ReservedVariables) -> Self {
        Failure {
            reason: RESERVED_VARIABLE,
            message: source.to_string(),
            written: Written::WhenManaged,
            hosts: None,
            error: Box::new(Error::ReservedVariables { key: key.into(), source }),
        }
    }

    /// The hosts could not be prepared (inventory, SSH key Secret): the error names its own reason.
    pub fn remote(key: &str, source: remote::Error) -> Self {
        Failure {
            reason: source.reason(),
            message: source.to_string(),
            written: Written::WhenManaged,
            hosts: None,
            error: Box::new(Error::Remote { key: key.into(), source }),
        }
    }

    /// ansible-runner could not run (upstream's message).
    pub fn unable_to_run(key: &str, source: runner::Error) -> Self {
        let message = format!("{UNABLE_TO_RUN}: {}", error_chain(&source));
        Failure::failed(message, Error::Runner { key: key.into(), source })
    }

    /// A run was stopped at its timeout; a finalizer stays until a run succeeds.
    fn timed_out(key: &str, timed_out: &runner::TimedOut) -> Self {
        let message = timed_out.message();
        Failure {
            reason: RUN_TIMED_OUT,
            error: Box::new(Error::TimedOut { key: key.into(), message: message.clone() }),
            message,
            written: Written::Always,
            hosts: None,
        }
    }

    /// Whether the condition is written, given the watch's `manageStatus`.
    pub fn is_written(&self, manage_status: bool) -> bool {
        self.written == Written::Always || manage_status
    }

    /// The condition transition this failure writes.
    pub fn transition(&self) -> Transition {
        Transition::Failed { reason: self.reason.into(), message: self.message.clone(), stats: None }
    }
}

/// A main run that got as far as its stats: what its conditions become.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Ran {
    /// `Successful` with the stats, or `Failure` with the failed tasks and the stats.
    pub transition: Transition,
    /// Per-host results for `status.hosts` (a run over an inventory).
    pub hosts: Option<Map<String, Value>>,
    /// Whether no task failed.
    pub succeeded: bool,
    /// The period `requeue_after` asked for.
    pub requeue_after: Option<Duration>,
    /// A `requeue_after` period that is not a duration.
    pub bad_requeue_period: Option<String>,
}

/// What the main run means.
#[derive(Debug)]
#[must_use]
pub enum Verdict {
    /// It finished: conclude from the CR as it is now.
    Ran(Ran),
    /// It failed before it could finish, or could not run.
    Failed(Failure),
}

/// Judges the precheck: `None` when it passed and the main target may run.
pub fn precheck(report: &runner::Report, inventory_hosts: Option<&[String]>, key: &str) -> Option<Failure> {
    if report.outcome.succeeded() {
        return None;
    }
    if let Some(timed_out) = &report.timed_out {
        return Some(Failure::timed_out(key, timed_out));
    }
    Some(Failure {
        reason: PRECHECK_FAILED,
        message: precheck_message(report),
        written: Written::WhenManaged,
        hosts: inventory_hosts.map(|hosts| report.outcome.host_results(hosts)),
        error: Box::new(Error::PrecheckFailed { key: key.into() }),
    })
}

/// Judges the main run: stopped at its timeout, killed by a signal, ended without stats, or ran.
pub fn main(report: &runner::Report, inventory_hosts: Option<&[String]>, key: &str) -> Verdict {
    if let Some(timed_out) = &report.timed_out {
        return Verdict::Failed(Failure::timed_out(key, timed_out));
    }
    let outcome = &report.outcome;
    if let Some(killed) = &report.killed {
        let message = killed.message();
        let error = Error::PlaybookKilled { key: key.into(), message: message.clone() };
        return Verdict::Failed(Failure::failed(message, error));
    }
    let Some(stats) = outcome.stats.clone() else {
        let output = report.error_text();
        let message = format!("did not receive playbook_on_stats event: {output}");
        return Verdict::Failed(Failure::failed(message, Error::NoStats { key: key.into(), output }));
    };
    let succeeded = outcome.succeeded();
    Verdict::Ran(Ran {
        transition: if succeeded {
            Transition::Succeeded(stats)
        } else {
            Transition::failed(outcome.failure_message(), Some(stats))
        },
        hosts: inventory_hosts.map(|hosts| outcome.host_results(hosts)),
        succeeded,
        requeue_after: outcome.requeue_after,
        bad_requeue_period: outcome.bad_requeue_period.clone(),
    })
}

/// The `PrecheckFailed` message: each failing host and task, or why the precheck did not finish.
fn precheck_message(report: &runner::Report) -> String {
    let outcome = &report.outcome;
    if outcome.stats.is_none() {
        return format!("precheck did not finish: {}", report.error_text());
    }
    let lines: Vec<String> = outcome
        .failures
        .iter()
        .map(|f| {
            let what = if f.unreachable { "unreachable" } else { "failed" };
            format!("precheck {what} on host {}: task {:?}: {}", f.host, f.task, f.message)
        })
        .collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::outcome::{self, HostCounts, Outcome, Stats};
    use crate::runner::{Killed, Report, TimedOut};

    const KEY: &str = "ns/cr";

    fn stats(failures: i64) -> Stats {
        Stats { ok: 2, changed: 1, failures, ..Stats::default() }
    }

    fn task_failure(host: &str, task: &str, message: &str) -> outcome::Failure {
        outcome::Failure { host: host.into(), task: task.into(), message: message.into(), unreachable: false }
    }

    /// A run that finished, with these task failures.
    fn finished(failures: Vec<outcome::Failure>) -> Report {
        let stats = stats(failures.len() as i64);
        let hosts = [("a".to_string(), HostCounts { ok: 2, ..HostCounts::default() })].into();
        Report {
            outcome: Outcome { stats: Some(stats), failures, hosts, ..Outcome::default() },
            ..Report::default()
        }
    }

    fn inventory() -> Vec<String> {
        vec!["a".to_string(), "b".to_string()]
    }

    fn timed_out() -> TimedOut {
        TimedOut { after: Duration::from_secs(90), task: Some("wait".into()) }
    }

    fn failed(verdict: Verdict) -> Failure {
        match verdict {
            Verdict::Failed(failure) => failure,
            Verdict::Ran(ran) => panic!("expected a failure, got {ran:?}"),
        }
    }

    #[test]
    fn a_precheck_that_succeeded_lets_the_main_target_run() {
        assert!(precheck(&finished(vec![]), Some(&inventory()), KEY).is_none());
    }

    #[test]
    fn a_failed_precheck_names_each_failing_host_and_task_when_the_status_is_managed() {
        let report = finished(vec![task_failure("b", "ping", "no route")]);
        let failure = precheck(&report, Some(&inventory()), KEY).expect("a failure");
        assert_eq!(failure.reason, PRECHECK_FAILED);
        assert_eq!(failure.message, "precheck failed on host b: task \"ping\": no route");
        assert_eq!(failure.written, Written::WhenManaged);
        assert!(!failure.is_written(false));
        assert_eq!(failure.hosts, Some(report.outcome.host_results(&inventory())));
        assert!(matches!(*failure.error, Error::PrecheckFailed { ref key } if key == KEY));
    }

    #[test]
    fn a_precheck_that_did_not_finish_says_why() {
        let report = Report { output: vec!["ERROR! no playbook".into()], ..Report::default() };
        let failure = precheck(&report, None, KEY).expect("a failure");
        assert_eq!(failure.reason, PRECHECK_FAILED);
        assert_eq!(failure.message, "precheck did not finish: ERROR! no playbook");
        assert_eq!(failure.hosts, None);
    }

    #[test]
    fn a_precheck_stopped_at_its_timeout_fails_with_run_timed_out_whatever_manage_status_says() {
        let report = Report { timed_out: Some(timed_out()), ..Report::default() };
        let failure = precheck(&report, Some(&inventory()), KEY).expect("a failure");
        assert_eq!(failure.reason, RUN_TIMED_OUT);
        assert_eq!(failure.message, timed_out().message());
        assert!(failure.is_written(false));
        assert_eq!(failure.hosts, None);
        assert!(
            matches!(*failure.error, Error::TimedOut { ref message, .. } if *message == timed_out().message())
        );
    }

    #[test]
    fn hosts_that_cannot_be_prepared_fail_with_the_reason_of_their_error_when_the_status_is_managed() {
        let source = remote::Error::SecretNotFound { namespace: "ns".into(), name: "key".into() };
        let failure = Failure::remote(KEY, source);
        assert_eq!(failure.reason, "SSHKeySecretNotFound");
        assert_eq!(failure.message, "sshKeySecret: Secret ns/key not found");
        assert_eq!(failure.written, Written::WhenManaged);
        assert!(matches!(*failure.error, Error::Remote { .. }));
        assert_eq!(
            failure.transition(),
            Transition::Failed {
                reason: "SSHKeySecretNotFound".into(),
                message: failure.message.clone(),
                stats: None
            }
        );
    }

    #[test]
    fn a_run_that_could_not_start_fails_with_upstreams_message_whatever_manage_status_says() {
        let source = runner::Error::WriteInput {
            dir: PathBuf::from("/runner/x"),
            source: std::io::Error::other("disk full"),
        };
        let failure = Failure::unable_to_run(KEY, source);
        assert_eq!(failure.reason, reason::FAILED);
        assert_eq!(
            failure.message,
            "Unable to run reconciliation: write the runner input in /runner/x: disk full"
        );
        assert!(failure.is_written(false));
        assert!(matches!(*failure.error, Error::Runner { .. }));
    }

    #[test]
    fn a_main_run_stopped_at_its_timeout_fails_with_run_timed_out() {
        let report = Report { timed_out: Some(timed_out()), ..finished(vec![]) };
        let failure = failed(main(&report, None, KEY));
        assert_eq!(failure.reason, RUN_TIMED_OUT);
        assert_eq!(failure.message, "run timed out after 1m30s while running task \"wait\"");
        assert_eq!(failure.written, Written::Always);
    }

    #[test]
    fn a_killed_playbook_fails_with_the_signal_and_the_task() {
        let killed = Killed { signal: Some(9), task: Some("install".into()) };
        let report = Report { killed: Some(killed.clone()), ..Report::default() };
        let failure = failed(main(&report, None, KEY));
        assert_eq!(failure.reason, reason::FAILED);
        assert_eq!(failure.message, killed.message());
        assert_eq!(failure.written, Written::Always);
        assert!(
            matches!(*failure.error, Error::PlaybookKilled { ref message, .. } if *message == killed.message())
        );
    }

    #[test]
    fn a_run_without_stats_fails_with_what_the_runner_printed() {
        let report = Report { output: vec!["Traceback".into()], ..Report::default() };
        let failure = failed(main(&report, Some(&inventory()), KEY));
        assert_eq!(failure.reason, reason::FAILED);
        assert_eq!(failure.message, "did not receive playbook_on_stats event: Traceback");
        assert_eq!(failure.written, Written::Always);
        assert_eq!(failure.hosts, None);
        assert!(matches!(*failure.error, Error::NoStats { ref output, .. } if output == "Traceback"));
    }

    #[test]
    fn a_failed_task_gives_a_failure_condition_with_the_task_message_and_the_stats() {
        let report = finished(vec![task_failure("a", "install", "no space")]);
        let Verdict::Ran(ran) = main(&report, Some(&inventory()), KEY) else {
            panic!("expected a ran outcome")
        };
        assert!(!ran.succeeded);
        assert_eq!(ran.transition, Transition::failed("no space", Some(stats(1))));
        assert_eq!(ran.hosts, Some(report.outcome.host_results(&inventory())));
    }

    #[test]
    fn a_successful_run_gives_successful_with_its_stats_and_requeue_period() {
        let mut report = finished(vec![]);
        report.outcome.requeue_after = Some(Duration::from_secs(30));
        report.outcome.bad_requeue_period = Some("soon".into());
        let Verdict::Ran(ran) = main(&report, None, KEY) else { panic!("expected a ran outcome") };
        assert_eq!(
            ran,
            Ran {
                transition: Transition::Succeeded(stats(0)),
                hosts: None,
                succeeded: true,
                requeue_after: Some(Duration::from_secs(30)),
                bad_requeue_period: Some("soon".into()),
            }
        );
    }
}
