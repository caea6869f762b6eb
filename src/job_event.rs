//! One ansible-runner job event: the fields the runner's output and the outcome fold read.

use serde::Deserialize;
use serde_json::{Map, Value};

/// The fields of a runner job event the operator reads; everything else stays in `event_data`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct JobEvent {
    /// Event name: `playbook_on_stats`, `runner_on_failed`, `verbose`, ...
    #[serde(default)]
    pub event: String,
    /// Event payload: task, host, `res`, counters, ...
    #[serde(default)]
    pub event_data: Map<String, Value>,
    /// What ansible-playbook printed for this event.
    #[serde(default)]
    pub stdout: String,
    /// UTC timestamp, `2026-01-02T03:04:05.123456+00:00`.
    #[serde(default)]
    pub created: String,
    /// Event id; runner status messages have none.
    #[serde(default)]
    pub uuid: Option<String>,
}

impl JobEvent {
    /// A string field of `event_data`.
    pub fn data_str(&self, key: &str) -> Option<&str> {
        self.event_data.get(key).and_then(Value::as_str)
    }

    /// The task's result (`event_data.res`), when it is an object.
    pub fn result(&self) -> Option<&Map<String, Value>> {
        self.event_data.get("res").and_then(Value::as_object)
    }
}
