//! The messages between the operator and the warm worker (`worker/ansible_operator_worker/protocol.py`
//! is the other side): one JSON object per datagram.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
        /// `warm`, or `cold` when it falls back to exec'ing ansible-playbook.
        mode: String,
        /// Why not warm.
        #[serde(default)]
        reason: String,
    },
    /// A run's playbook process ended (ansible-runner records only its exit status).
    PlaybookEnded {
        /// The run.
        id: String,
        /// The signal that ended it, when one did.
        signal: Option<i32>,
    },
    /// A run's process ended.
    Exited {
        /// The run.
        id: String,
        /// Its exit status, when it exited.
        code: Option<i32>,
        /// The signal that ended it, when one did.
        signal: Option<i32>,
    },
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
    fn run_requests_are_tagged() {
        let request = RunRequest { id: "9", argv: vec!["run".into()], env: BTreeMap::new(), cwd: "/".into() };
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            serde_json::json!({"type": "run", "id": "9", "argv": ["run"], "env": {}, "cwd": "/"})
        );
    }
}
