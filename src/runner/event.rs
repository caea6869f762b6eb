//! One ansible-runner job event, as printed by `ansible-runner run -j` (one JSON object a line).

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

/// One line of ansible-runner's output: an event, or text it printed outside any event.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// A job event.
    Event(Box<JobEvent>),
    /// Anything that is not a JSON event: runner errors, Python tracebacks, warnings.
    Text(String),
}

impl Line {
    /// Classifies one line of output.
    pub fn parse(line: &str) -> Self {
        let trimmed = line.trim_end();
        if trimmed.starts_with('{')
            && let Ok(event) = serde_json::from_str::<JobEvent>(trimmed)
            && (event.uuid.is_some() || !event.event.is_empty())
        {
            return Line::Event(Box::new(event));
        }
        Line::Text(trimmed.to_string())
    }

    /// What a person reads of this line in the run's log: an event's stdout (nothing when empty),
    /// or the text itself.
    pub fn readable(&self) -> Option<&str> {
        match self {
            Line::Event(event) if event.stdout.is_empty() => None,
            Line::Event(event) => Some(&event.stdout),
            Line::Text(text) => Some(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_event_lines_become_events() {
        let line = r#"{"uuid":"u1","event":"runner_on_ok","event_data":{"task":"t","res":{"msg":"hi"}},"stdout":"ok: [localhost]","created":"2026-01-01T00:00:00.5+00:00"}"#;
        let Line::Event(event) = Line::parse(line) else { panic!("expected an event") };
        assert_eq!(event.event, "runner_on_ok");
        assert_eq!(event.data_str("task"), Some("t"));
        assert_eq!(event.result().and_then(|r| r.get("msg")), Some(&Value::from("hi")));
    }

    #[test]
    fn other_lines_are_kept_as_text() {
        assert_eq!(
            Line::parse("ERROR! the playbook could not be found\n"),
            Line::Text("ERROR! the playbook could not be found".into())
        );
        assert_eq!(Line::parse("{not json"), Line::Text("{not json".into()));
        assert_eq!(Line::parse("{\"status\": 1}"), Line::Text("{\"status\": 1}".into()));
    }
}
