//! Ansible task progress in the operator's log, per `--ansible-log-events` (upstream §4.3), with
//! structured fields. Task arguments and results are not logged: they may carry secrets.

use clap::ValueEnum;

use crate::job_event::JobEvent;
use crate::outcome::Outcome;
use crate::runner::Settings;

/// How much of Ansible's event stream goes to the operator's log (`--ansible-log-events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
#[value(rename_all = "PascalCase")]
pub enum LogEvents {
    /// Log nothing.
    Nothing,
    /// Log task starts, debug output and failures.
    #[default]
    Tasks,
    /// Log every event.
    Everything,
}

/// Logs the events of one run; the caller's span carries the CR and job.
pub struct Logger {
    mode: LogEvents,
    raw_stdout: bool,
    recap: Option<String>,
}

impl Logger {
    /// A logger for one run.
    pub fn new(settings: &Settings) -> Self {
        Self { mode: settings.log_events, raw_stdout: settings.log_raw_stdout, recap: None }
    }

    /// Logs one event as the mode asks.
    pub fn log(&mut self, event: &JobEvent) {
        if event.event == "playbook_on_stats" {
            self.recap = Some(super::strip_ansi(event.stdout.trim()));
        }
        let task = event.data_str("task");
        match self.mode {
            LogEvents::Nothing => {}
            LogEvents::Everything => tracing::info!(
                event_type = %event.event,
                task = task.unwrap_or_default(),
                host = event.data_str("host").unwrap_or_default(),
                stdout = %event.stdout.trim(),
                "ansible event"
            ),
            LogEvents::Tasks if task.is_none() => {}
            LogEvents::Tasks if self.raw_stdout => {
                if !event.stdout.trim().is_empty() {
                    tracing::info!(event_type = %event.event, stdout = %event.stdout.trim(), "ansible output");
                }
            }
            LogEvents::Tasks => log_task(event, task.unwrap_or_default()),
        }
    }

    /// Logs the play recap once the run has ended.
    pub fn finish(&self, outcome: &Outcome) {
        if self.mode == LogEvents::Nothing {
            return;
        }
        match (&self.recap, &outcome.stats) {
            (Some(recap), Some(stats)) => tracing::info!(
                ok = stats.ok,
                changed = stats.changed,
                skipped = stats.skipped,
                failures = stats.failures,
                recap = %recap,
                "ansible run finished"
            ),
            _ => tracing::warn!("ansible run ended without a play recap"),
        }
    }
}

fn log_task(event: &JobEvent, task: &str) {
    let action = event.data_str("task_action").unwrap_or_default();
    let host = event.data_str("host").unwrap_or_default();
    match event.event.as_str() {
        "playbook_on_task_start"
            if !matches!(
                action,
                "set_fact" | "debug" | "ansible.builtin.set_fact" | "ansible.builtin.debug"
            ) =>
        {
            tracing::info!(task, action, "[playbook task start]")
        }
        "runner_on_ok" if matches!(action, "debug" | "ansible.builtin.debug") => {
            let msg = event.result().and_then(|res| res.get("msg")).map(ToString::to_string);
            tracing::info!(task, host, msg = msg.unwrap_or_default(), "[playbook debug]")
        }
        "runner_on_failed" => {
            let msg = event.result().and_then(|res| res.get("msg")).and_then(|m| m.as_str());
            let ignored = event.event_data.get("ignore_errors").and_then(|v| v.as_bool()) == Some(true);
            tracing::error!(
                task,
                action,
                host,
                ignored,
                msg = msg.unwrap_or_default(),
                "[playbook task failed]"
            )
        }
        "runner_on_unreachable" => {
            let msg = event.result().and_then(|res| res.get("msg")).and_then(|m| m.as_str());
            tracing::error!(task, host, msg = msg.unwrap_or_default(), "[playbook host unreachable]")
        }
        _ => {}
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::proptest_support::{config, json, text};

    const EVENTS: [&str; 8] = [
        "playbook_on_stats",
        "playbook_on_task_start",
        "runner_on_ok",
        "runner_on_failed",
        "runner_on_unreachable",
        "runner_on_skipped",
        "verbose",
        "",
    ];

    /// Events with the fields the operator reads, each holding a plausible or an arbitrary value.
    fn event() -> impl Strategy<Value = JobEvent> {
        let field = || prop_oneof![2 => text().prop_map(Value::from), 1 => json()];
        let res = prop_oneof![
            Just(json!({"msg": "boom"})),
            text().prop_map(|msg| json!({"msg": msg, "_ansible_no_log": false})),
            json(),
        ];
        let counters = proptest::collection::btree_map(
            "[a-z]{1,4}",
            prop_oneof![any::<u32>().prop_map(Value::from), json()],
            0..3,
        )
        .prop_map(|map| Value::Object(map.into_iter().collect()));
        (
            proptest::sample::select(&EVENTS[..]),
            (field(), field(), field(), res),
            proptest::collection::vec(counters, 5),
            any::<bool>(),
            text(),
        )
            .prop_map(|(name, (task, host, action, res), counters, ignore, stdout)| {
                let mut data = Map::new();
                data.insert("task".into(), task);
                data.insert("host".into(), host);
                data.insert("task_action".into(), action);
                data.insert("res".into(), res);
                data.insert("ignore_errors".into(), Value::Bool(ignore));
                for (key, value) in ["ok", "changed", "failures", "dark", "skipped"].iter().zip(counters) {
                    data.insert((*key).into(), value);
                }
                JobEvent {
                    event: name.to_string(),
                    event_data: data,
                    stdout,
                    created: String::new(),
                    uuid: None,
                }
            })
    }

    fn mode() -> impl Strategy<Value = (LogEvents, bool)> {
        (
            prop_oneof![Just(LogEvents::Nothing), Just(LogEvents::Tasks), Just(LogEvents::Everything)],
            any::<bool>(),
        )
    }

    proptest! {
        #![proptest_config(config(96))]

        #[test]
        fn any_event_stream_is_logged_and_folded_without_panicking(
            events in proptest::collection::vec(event(), 0..12),
            (mode, raw_stdout) in mode(),
        ) {
            let subscriber = tracing_subscriber::fmt().with_writer(std::io::sink).finish();
            let outcome = tracing::subscriber::with_default(subscriber, || {
                let mut logger = Logger { mode, raw_stdout, recap: None };
                let mut outcome = Outcome::default();
                for event in &events {
                    logger.log(event);
                    outcome.observe(event);
                }
                logger.finish(&outcome);
                outcome
            });
            let saw_stats = events.iter().any(|event| event.event == "playbook_on_stats");
            prop_assert_eq!(outcome.stats.is_some(), saw_stats);
            let unreachable = events.iter().filter(|event| event.event == "runner_on_unreachable").count();
            prop_assert!(outcome.failures.iter().filter(|failure| failure.unreachable).count() == unreachable);
            prop_assert!(!outcome.succeeded() || (saw_stats && unreachable == 0));
        }
    }
}
