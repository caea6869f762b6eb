//! What the warm worker's messages mean for the runs one connection serves, decided without I/O:
//! [`Follower::handle`] is fed one message and says what to tell whom.

use std::collections::HashMap;

use super::launch::Exit;
use super::protocol::{Fallback, Message};
use crate::executor_mode::Executor;

/// What to do about one message from the worker.
#[must_use]
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Tell the run's starter its process exists (`Ok(pid)`) or could not be forked.
    Started {
        /// The run.
        id: String,
        /// Its pid, or why the worker could not fork it.
        result: Result<u32, String>,
    },
    /// Count how a run's playbook runs; a cold one fell back for `fallback`.
    Mode {
        /// The run.
        id: String,
        /// Where its playbook runs.
        executor: Executor,
        /// Why not warm, when cold.
        fallback: Option<(Fallback, String)>,
    },
    /// Tell the run's waiter its process ended.
    Exited {
        /// The run.
        id: String,
        /// How it ended.
        exit: Exit,
    },
    /// Nothing to do (a run no longer followed, or a note kept for later).
    Nothing,
}

/// The runs of one connection that are still followed, and what they have said so far.
#[derive(Debug, Default)]
pub struct Follower {
    runs: HashMap<String, Followed>,
}

/// What a followed run has said so far.
#[derive(Debug, Default)]
struct Followed {
    /// Its playbook runs in the run's own process.
    one_process: bool,
    /// The signal that ended its playbook, once the worker reported the playbook's end.
    playbook_ended: Option<Option<i32>>,
}

impl Follower {
    /// Starts following run `id`.
    pub fn admit(&mut self, id: &str) {
        self.runs.insert(id.to_string(), Followed::default());
    }

    /// Stops following run `id` (its handle is gone).
    pub fn forget(&mut self, id: &str) {
        self.runs.remove(id);
    }

    /// Stops following every run (the worker ended); the ids that were followed.
    pub fn drain(&mut self) -> Vec<String> {
        self.runs.drain().map(|(id, _)| id).collect()
    }

    /// What `message` means.
    pub fn handle(&mut self, message: Message) -> Step {
        match message {
            Message::Started { id, pid } if self.runs.contains_key(&id) => {
                Step::Started { id, result: Ok(pid) }
            }
            Message::SpawnFailed { id, error } if self.runs.contains_key(&id) => {
                Step::Started { id, result: Err(error) }
            }
            Message::Mode { id, executor, reason, one_process } => {
                if let Some(run) = self.runs.get_mut(&id) {
                    run.one_process = one_process;
                }
                let fallback = (executor == Executor::Cold).then_some((reason.fallback, reason.text));
                Step::Mode { id, executor, fallback }
            }
            Message::PlaybookEnded { id, signal } => {
                if let Some(run) = self.runs.get_mut(&id) {
                    run.playbook_ended = Some(signal);
                }
                Step::Nothing
            }
            Message::Exited { id, code, signal } => match self.runs.get(&id) {
                Some(run) => {
                    // A playbook in the run's own process that did not end before it ended with it.
                    let playbook_signal = match run.playbook_ended {
                        Some(ended) => ended,
                        None if run.one_process => signal,
                        None => None,
                    };
                    Step::Exited { id, exit: Exit { code, signal, playbook_signal } }
                }
                None => Step::Nothing,
            },
            Message::Started { .. } | Message::SpawnFailed { .. } | Message::Ready { .. } => Step::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::protocol::Reason;

    fn following(id: &str) -> Follower {
        let mut follower = Follower::default();
        follower.admit(id);
        follower
    }

    #[test]
    fn a_started_or_failed_fork_is_told_to_the_runs_starter() {
        let mut follower = following("1");
        assert_eq!(
            follower.handle(Message::Started { id: "1".into(), pid: 42 }),
            Step::Started { id: "1".into(), result: Ok(42) }
        );
        assert_eq!(
            follower.handle(Message::SpawnFailed { id: "1".into(), error: "fork: EAGAIN".into() }),
            Step::Started { id: "1".into(), result: Err("fork: EAGAIN".into()) }
        );
    }

    #[test]
    fn the_exit_carries_the_playbook_signal_reported_before_it() {
        let mut follower = following("1");
        assert_eq!(
            follower.handle(Message::PlaybookEnded { id: "1".into(), signal: Some(9) }),
            Step::Nothing
        );
        assert_eq!(
            follower.handle(Message::Exited { id: "1".into(), code: Some(1), signal: None }),
            Step::Exited {
                id: "1".into(),
                exit: Exit { code: Some(1), signal: None, playbook_signal: Some(9) }
            }
        );
    }

    #[test]
    fn an_exit_without_a_playbook_signal_has_none() {
        let mut follower = following("1");
        assert_eq!(
            follower.handle(Message::Exited { id: "1".into(), code: None, signal: Some(15) }),
            Step::Exited {
                id: "1".into(),
                exit: Exit { code: None, signal: Some(15), playbook_signal: None }
            }
        );
    }

    #[test]
    fn messages_about_runs_no_longer_followed_do_nothing() {
        let mut follower = following("1");
        follower.forget("1");
        assert_eq!(follower.handle(Message::Started { id: "1".into(), pid: 42 }), Step::Nothing);
        assert_eq!(
            follower.handle(Message::PlaybookEnded { id: "1".into(), signal: Some(9) }),
            Step::Nothing
        );
        assert_eq!(
            follower.handle(Message::Exited { id: "1".into(), code: Some(0), signal: None }),
            Step::Nothing
        );
    }

    #[test]
    fn a_cold_mode_names_its_fallback_and_a_warm_one_none() {
        let mut follower = following("1");
        let reason = Reason::from("ansible-playbook is not on PATH".to_string());
        assert_eq!(
            follower.handle(Message::Mode {
                id: "1".into(),
                executor: Executor::Cold,
                reason,
                one_process: false
            }),
            Step::Mode {
                id: "1".into(),
                executor: Executor::Cold,
                fallback: Some((Fallback::Command, "ansible-playbook is not on PATH".into())),
            }
        );
        let warm = Message::Mode {
            id: "1".into(),
            executor: Executor::Warm,
            reason: Reason::default(),
            one_process: false,
        };
        assert_eq!(
            follower.handle(warm),
            Step::Mode { id: "1".into(), executor: Executor::Warm, fallback: None }
        );
    }

    #[test]
    fn a_run_whose_playbook_runs_in_its_own_process_ended_by_a_signal_is_its_playbook_ended_by_it() {
        let exit = |follower: &mut Follower, id: &str| {
            let one_process = id == "here";
            let mode = Message::Mode {
                id: id.into(),
                executor: Executor::Warm,
                reason: Reason::default(),
                one_process,
            };
            let _ = follower.handle(mode);
            follower.handle(Message::Exited { id: id.into(), code: None, signal: Some(9) })
        };
        let mut follower = following("here");
        follower.admit("forked");
        follower.admit("ended");
        let killed = Exit { code: None, signal: Some(9), playbook_signal: Some(9) };
        assert_eq!(exit(&mut follower, "here"), Step::Exited { id: "here".into(), exit: killed });
        let runner_killed = Exit { code: None, signal: Some(9), playbook_signal: None };
        assert_eq!(exit(&mut follower, "forked"), Step::Exited { id: "forked".into(), exit: runner_killed });
        // Its playbook had ended (and said so) before the run process was killed.
        let _ = follower.handle(Message::Mode {
            id: "ended".into(),
            executor: Executor::Warm,
            reason: Reason::default(),
            one_process: true,
        });
        let _ = follower.handle(Message::PlaybookEnded { id: "ended".into(), signal: None });
        assert_eq!(
            follower.handle(Message::Exited { id: "ended".into(), code: None, signal: Some(9) }),
            Step::Exited { id: "ended".into(), exit: runner_killed }
        );
    }

    #[test]
    fn draining_forgets_every_run() {
        let mut follower = following("1");
        follower.admit("2");
        let mut drained = follower.drain();
        drained.sort();
        assert_eq!(drained, ["1", "2"]);
        assert_eq!(
            follower.handle(Message::Exited { id: "1".into(), code: Some(0), signal: None }),
            Step::Nothing
        );
    }
}
