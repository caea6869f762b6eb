//! One line of ansible-runner's output (`ansible-runner run -j`): a job event or plain text.

use crate::job_event::JobEvent;

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

/// The log a person reads from the runner's stdout (JSON events, one a line), line by line.
pub fn readable_lines(text: &str) -> impl Iterator<Item = String> + '_ {
    text.lines()
        .filter_map(|line| Line::parse(line).readable().map(str::to_string))
        .flat_map(|text| text.lines().map(str::to_string).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

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

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;
    use crate::proptest_support::{config, json, json_map, text};

    /// A runner event as ansible-runner prints it, with arbitrary payload and extra keys.
    fn event_object() -> impl Strategy<Value = (Value, String, Option<String>, String)> {
        ("[a-z_]{0,20}", proptest::option::of("[0-9a-f-]{1,36}"), text(), json_map(), json_map()).prop_map(
            |(name, uuid, stdout, data, extra)| {
                let mut object = json!({"event": name, "event_data": data, "stdout": stdout, "created": "2026-01-01T00:00:00+00:00"});
                if let Some(uuid) = &uuid {
                    object["uuid"] = json!(uuid);
                }
                for (key, value) in extra {
                    if !["event", "event_data", "stdout", "created", "uuid"].contains(&key.as_str()) {
                        object[key] = value;
                    }
                }
                (object, name, uuid, stdout)
            },
        )
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn any_line_is_an_event_or_its_text_without_trailing_whitespace(line in prop_oneof![
            text(),
            json().prop_map(|value| value.to_string()),
            json().prop_map(|value| format!("{value} \r\n")),
        ]) {
            match Line::parse(&line) {
                Line::Text(text) => prop_assert_eq!(text, line.trim_end()),
                Line::Event(event) => {
                    prop_assert!(line.trim_start().starts_with('{'), "{line:?}");
                    prop_assert!(event.uuid.is_some() || !event.event.is_empty());
                }
            }
        }

        #[test]
        fn runner_events_are_read_with_their_fields((object, name, uuid, stdout) in event_object()) {
            let line = format!("{object}\n");
            let parsed = Line::parse(&line);
            if name.is_empty() && uuid.is_none() {
                prop_assert_eq!(parsed, Line::Text(object.to_string()));
                return Ok(());
            }
            let Line::Event(event) = &parsed else {
                return Err(TestCaseError::fail(format!("not an event: {line}")));
            };
            prop_assert_eq!(&event.event, &name);
            prop_assert_eq!(&event.uuid, &uuid);
            prop_assert_eq!(&event.stdout, &stdout);
            // Compared as printed: serde_json reads the last digit of some floats differently.
            let data: Value = serde_json::from_str(&object["event_data"].to_string()).expect("valid JSON");
            prop_assert_eq!(Value::Object(event.event_data.clone()), data);
            prop_assert_eq!(parsed.readable(), Some(stdout.as_str()).filter(|s| !s.is_empty()));
        }

        #[test]
        fn an_event_field_of_the_wrong_type_keeps_the_line_as_text(
            (object, _, _, _) in event_object(),
            field in proptest::sample::select(&["event", "event_data", "stdout", "created", "uuid"][..]),
            value in prop_oneof![any::<i64>().prop_map(Value::from), Just(json!([1])), Just(json!(true))],
        ) {
            let mut object = object;
            object[field] = value;
            let line = object.to_string();
            // A line runner did not print as an event is shown as it was written, never half read.
            prop_assert_eq!(Line::parse(&line), Line::Text(line));
        }
    }
}
