//! What each line ansible-runner prints on stdout means for the run, decided without I/O:
//! [`Follower::handle`] folds a line into the outcome, the output tail and the debug transcript,
//! and says what to show live and which event to log.

use std::collections::VecDeque;

use super::event::Line;
use super::{push_bounded, strip_ansi};
use crate::job_event::JobEvent;
use crate::mask::Masker;
use crate::outcome::Outcome;

/// What to do with one line, besides what the follower keeps.
#[must_use]
#[derive(Debug, Default, PartialEq)]
pub struct Step {
    /// Text for the run's live log.
    pub live: Option<String>,
    /// An event for the event logger.
    pub event: Option<Box<JobEvent>>,
}

/// What the run's stdout has said so far, its secret values masked.
#[derive(Debug)]
pub struct Follower {
    /// The fold of the run's events.
    pub outcome: Outcome,
    /// The last lines printed outside events, and verbose and error events' text.
    pub output: VecDeque<String>,
    /// Every event's text, when `ANSIBLE_DEBUG_LOGS` asks for it.
    pub transcript: Option<String>,
    /// Masks each line as it comes, so that nothing downstream sees a secret value.
    masker: Masker,
    /// The run's span, under which each task ends as a span of its own (when traces are on).
    pub trace: opentelemetry::Context,
}

impl Follower {
    /// A follower that keeps a transcript when `debug_logs` is set, and masks with `masker`.
    pub fn new(debug_logs: bool, masker: Masker) -> Self {
        Follower {
            outcome: Outcome::default(),
            output: VecDeque::new(),
            transcript: debug_logs.then(String::new),
            masker,
            trace: opentelemetry::Context::new(),
        }
    }

    /// Takes in one line of stdout.
    pub fn handle(&mut self, line: &str) -> Step {
        let mut line = Line::parse(line);
        match &mut line {
            Line::Event(event) => {
                self.masker.mask_string(&mut event.stdout);
                self.masker.mask_map(&mut event.event_data);
            }
            Line::Text(text) => self.masker.mask_string(text),
        }
        let live = line.readable().map(strip_ansi);
        match line {
            Line::Event(event) => {
                if let Some(transcript) = self.transcript.as_mut().filter(|_| !event.stdout.is_empty()) {
                    transcript.push_str(&strip_ansi(&event.stdout));
                    transcript.push('\n');
                }
                if matches!(event.event.as_str(), "verbose" | "error") {
                    push_bounded(&mut self.output, strip_ansi(event.stdout.trim_end()));
                }
                self.outcome.observe(&event);
                crate::telemetry::task(&self.trace, &event);
                Step { live, event: Some(event) }
            }
            Line::Text(text) => {
                push_bounded(&mut self.output, strip_ansi(&text));
                Step { live, event: None }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK_STARTED: &str = r#"{"uuid":"1","event":"playbook_on_task_start","event_data":{"task":"greet"},"stdout":"\u001b[0;32mTASK [greet]\u001b[0m"}"#;

    #[test]
    fn an_event_is_shown_without_colour_folded_into_the_outcome_and_handed_to_the_logger() {
        let mut follower = Follower::new(false, Masker::none());
        let step = follower.handle(TASK_STARTED);
        assert_eq!(step.live.as_deref(), Some("TASK [greet]"));
        assert_eq!(step.event.map(|e| e.event), Some("playbook_on_task_start".to_string()));
        assert_eq!(follower.outcome.last_task_started.as_deref(), Some("greet"));
        assert!(follower.output.is_empty(), "only verbose and error events count as output");
    }

    #[test]
    fn text_outside_events_is_kept_as_output_and_shown() {
        let mut follower = Follower::new(false, Masker::none());
        let step = follower.handle("Traceback (most recent call last):\r\n");
        assert_eq!(step, Step { live: Some("Traceback (most recent call last):".into()), event: None });
        assert_eq!(follower.output, ["Traceback (most recent call last):"]);
    }

    #[test]
    fn verbose_and_error_events_count_as_output() {
        let mut follower = Follower::new(false, Masker::none());
        let _ = follower
            .handle(r#"{"uuid":"2","event":"verbose","stdout":"ERROR! the role 'x' was not found\n"}"#);
        assert_eq!(follower.output, ["ERROR! the role 'x' was not found"]);
    }

    #[test]
    fn the_transcript_keeps_every_events_text_only_when_asked() {
        let mut quiet = Follower::new(false, Masker::none());
        let _ = quiet.handle(TASK_STARTED);
        assert_eq!(quiet.transcript, None);
        let mut debug = Follower::new(true, Masker::none());
        let _ = debug.handle(TASK_STARTED);
        let _ = debug.handle(r#"{"uuid":"3","event":"runner_on_start","stdout":""}"#);
        assert_eq!(debug.transcript.as_deref(), Some("TASK [greet]\n"));
    }

    #[test]
    fn a_secret_value_is_masked_in_what_is_shown_logged_folded_and_kept() {
        let secrets = std::sync::Arc::new(crate::mask::Secrets::default());
        secrets.add(b"hunter22");
        let mut follower = Follower::new(true, Masker::new(secrets));
        let failed = r#"{"uuid":"4","event":"runner_on_failed","event_data":{"task":"t hunter22","host":"h","res":{"msg":"bad hunter22"}},"stdout":"fatal: [h]: FAILED! => {\"msg\": \"bad hunter22\"}"}"#;
        let step = follower.handle(failed);
        assert_eq!(step.live.as_deref(), Some(r#"fatal: [h]: FAILED! => {"msg": "bad ********"}"#));
        let event = step.event.expect("an event");
        assert_eq!(
            event.result().and_then(|res| res.get("msg")),
            Some(&serde_json::Value::from("bad ********"))
        );
        assert_eq!(follower.outcome.failure_message(), "bad ********");
        assert_eq!(follower.outcome.failures[0].task, "t ********");
        let _ = follower.handle("Traceback: hunter22");
        assert_eq!(follower.output, ["Traceback: ********"]);
        assert!(!follower.transcript.unwrap_or_default().contains("hunter22"));
    }
}
