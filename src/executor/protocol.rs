//! The messages between the operator and the warm worker (`worker/ansible_operator_worker/protocol.py`
//! is the other side): one JSON object per datagram.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::executor_mode::Executor;

/// Operator → worker: start a run. The run's stdout and stderr travel with it as descriptors.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "run")]
pub struct RunRequest<'a> {
    /// The run's id (its ansible-runner ident).
    pub id: &'a str,
    /// ansible-runner's arguments after the program name.
    pub argv: Vec<String>,
    /// The whole environment of the run, as ansible-runner would be started with it.
    pub env: BTreeMap<String, String>,
    /// The working directory ansible-runner would be started in.
    pub cwd: String,
}

/// Worker → operator.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// The worker has imported everything and serves runs.
    Ready {
        /// The worker's (zygote's) pid.
        pid: u32,
        /// Versions of the toolchain it imported.
        versions: Versions,
        /// How long the imports took.
        preload_seconds: f64,
        /// Optional libraries that are not installed.
        #[serde(default)]
        not_preloaded: Vec<String>,
    },
    /// A run's process exists.
    Started {
        /// The run.
        id: String,
        /// Its pid (the root of its process tree).
        pid: u32,
    },
    /// A run could not be started.
    SpawnFailed {
        /// The run.
        id: String,
        /// Why.
        error: String,
    },
    /// How the run's playbook process runs.
    Mode {
        /// The run.
        id: String,
        /// Warm, or cold when it falls back to exec'ing ansible-playbook (`mode` on the wire).
        #[serde(rename = "mode")]
        executor: Executor,
        /// Why not warm (empty when warm).
        #[serde(default)]
        reason: Reason,
        /// Whether the playbook runs in the run's own process (every warm run but one with an SSH
        /// agent): the run process ended by a signal is then the playbook ended by it.
        #[serde(default)]
        one_process: bool,
    },
    /// A run's playbook process ended (ansible-runner records only its exit status).
    PlaybookEnded {
        /// The run.
        id: String,
        /// The signal that ended it, when one did.
        signal: Option<i32>,
    },
    /// A run's process ended. Sent twice for a run that exits: first by the run process itself
    /// as it exits (before it gives its memory back), then by the worker once it has reaped it;
    /// the first counts. A run a signal ended is told once, by the worker.
    Exited {
        /// The run.
        id: String,
        /// Its exit status, when it exited.
        code: Option<i32>,
        /// The signal that ended it, when one did.
        signal: Option<i32>,
    },
}

/// Why a run's playbook does not run warm: the worker's words, and the kind of reason they name.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(from = "String")]
pub struct Reason {
    /// The kind, for the fallback metric's label.
    pub fallback: Fallback,
    /// The worker's explanation, for the log.
    pub text: String,
}

impl From<String> for Reason {
    fn from(text: String) -> Self {
        Reason { fallback: Fallback::of(&text), text }
    }
}

/// The kinds of reason a warm run falls back to cold (few, so they can label a metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fallback {
    /// Ansible settings read at import differ for the run.
    Settings,
    /// Variables Python reads at start-up differ for the run.
    Environment,
    /// The run's ansible-playbook runs on another interpreter.
    Interpreter,
    /// ansible-runner runs something other than ansible-playbook, or cannot find it.
    Command,
    /// Anything else (the worker's decision failed).
    #[default]
    Other,
}

impl Fallback {
    /// The kind of `reason`, as the worker words it (`worker/ansible_operator_worker/playbook.py`).
    fn of(reason: &str) -> Self {
        if reason.starts_with("Ansible settings") {
            Fallback::Settings
        } else if reason.starts_with("variables Python reads") {
            Fallback::Environment
        } else if reason.contains(" runs on ") {
            Fallback::Interpreter
        } else if reason.starts_with("ansible-runner") || reason.contains("not on PATH") {
            Fallback::Command
        } else {
            Fallback::Other
        }
    }

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Settings => "settings",
            Fallback::Environment => "environment",
            Fallback::Interpreter => "interpreter",
            Fallback::Command => "command",
            Fallback::Other => "other",
        }
    }
}

/// Versions the worker reports.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Versions {
    /// ansible-core.
    pub ansible_core: String,
    /// ansible-runner.
    pub ansible_runner: String,
    /// Python.
    pub python: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_messages_decode() {
        let ready: Message = serde_json::from_str(
            r#"{"type":"ready","pid":7,"versions":{"ansible_core":"2.18.19","ansible_runner":"2.4.3","python":"3.11.7"},"preload_seconds":0.5}"#,
        )
        .unwrap();
        assert!(matches!(ready, Message::Ready { pid: 7, .. }));
        let exited: Message =
            serde_json::from_str(r#"{"type":"exited","id":"1","code":null,"signal":9}"#).unwrap();
        assert_eq!(exited, Message::Exited { id: "1".into(), code: None, signal: Some(9) });
        let ended: Message =
            serde_json::from_str(r#"{"type":"playbook_ended","id":"1","code":null,"signal":9}"#).unwrap();
        assert_eq!(ended, Message::PlaybookEnded { id: "1".into(), signal: Some(9) });
        assert!(serde_json::from_str::<Message>(r#"{"type":"surprise"}"#).is_err());
    }

    #[test]
    fn mode_messages_decode_to_an_executor_and_a_reason() {
        let warm: Message =
            serde_json::from_str(r#"{"type":"mode","id":"1","mode":"warm","reason":""}"#).unwrap();
        assert_eq!(
            warm,
            Message::Mode {
                id: "1".into(),
                executor: Executor::Warm,
                reason: Reason::default(),
                one_process: false
            }
        );
        let text = "ansible-playbook is not on PATH";
        let cold: Message =
            serde_json::from_str(&format!(r#"{{"type":"mode","id":"2","mode":"cold","reason":"{text}"}}"#))
                .unwrap();
        let reason = Reason { fallback: Fallback::Command, text: text.into() };
        assert_eq!(
            cold,
            Message::Mode { id: "2".into(), executor: Executor::Cold, reason, one_process: false }
        );
    }

    #[test]
    fn fallback_reasons_map_to_few_labels() {
        let fallback_reason = |reason: &str| Fallback::of(reason).as_str();
        assert_eq!(
            fallback_reason("Ansible settings copied at import differ from the worker's: DEFAULT_TIMEOUT"),
            "settings"
        );
        assert_eq!(
            fallback_reason("variables Python reads at start-up differ from the worker's: LANG"),
            "environment"
        );
        assert_eq!(
            fallback_reason("/x/ansible-playbook runs on /usr/bin/python3, the worker on /v/python"),
            "interpreter"
        );
        assert_eq!(fallback_reason("ansible-runner runs ansible, not ansible-playbook"), "command");
        assert_eq!(fallback_reason("deciding failed: KeyError"), "other");
    }

    #[test]
    fn run_requests_are_tagged() {
        let request = RunRequest { id: "9", argv: vec!["run".into()], env: BTreeMap::new(), cwd: "/".into() };
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            serde_json::json!({"type": "run", "id": "9", "argv": ["run"], "env": {}, "cwd": "/"})
        );
    }
}
