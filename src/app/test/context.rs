//! What a failed scenario's report shows beside the failed step: each CR's conditions, the
//! namespace's newest warning Events and the newest failed run's task and output.

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::Value;

use super::stage::Stage;
use crate::runner::event::readable_lines;
use crate::scenario::name_of;

/// Warning Events of the namespace shown.
const WARNINGS: usize = 10;
/// Lines shown of a failed run's output, or of a failed verify playbook's.
pub(super) const LOG_LINES: usize = 25;

impl Stage<'_> {
    /// The context of a failed scenario, as lines.
    pub async fn context(&self) -> String {
        let mut lines = Vec::new();
        for cr in self.crs().await {
            lines.push(format!("{}:", name_of(&cr)));
            for condition in cr["status"]["conditions"].as_array().into_iter().flatten() {
                let message = condition["message"].as_str().unwrap_or_default();
                let reason = condition["reason"].as_str().filter(|r| !r.is_empty());
                let reason = reason.map(|r| format!(" ({r})")).unwrap_or_default();
                lines.push(format!(
                    "  {}={}{reason} {}",
                    condition["type"].as_str().unwrap_or_default(),
                    condition["status"].as_str().unwrap_or_default(),
                    message.lines().next().unwrap_or_default()
                ));
            }
        }
        lines.extend(self.warnings().await);
        let runs = self.history.all_runs(Some(self.namespace)).await.unwrap_or_default();
        if let Some(run) = runs.iter().find(|run| run["spec"]["result"] != "Successful") {
            let owner = &run["spec"]["owner"];
            lines.push(format!(
                "newest failed run: {} of {}/{}{}",
                record_name(run),
                owner["kind"].as_str().unwrap_or_default(),
                owner["name"].as_str().unwrap_or_default(),
                failed(run)
            ));
        }
        lines.join("\n")
    }

    /// The newest warning Events in the scenario's namespace (a Pod that cannot start, an image
    /// that cannot be pulled), oldest first.
    async fn warnings(&self) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), self.namespace);
        let Ok(list) = api.list(&ListParams::default().fields("type=Warning")).await else {
            return Vec::new();
        };
        let mut events = list.items;
        events.sort_by_key(|event| {
            let last = event.last_timestamp.as_ref().map(|time| time.0);
            last.or(event.event_time.as_ref().map(|time| time.0))
        });
        let start = events.len().saturating_sub(WARNINGS);
        let mut lines: Vec<String> = events[start..]
            .iter()
            .map(|event| {
                let about = &event.involved_object;
                // The first line: a failed run's is its output, shown below.
                let message = event.message.as_deref().unwrap_or_default().trim();
                format!(
                    "  {}/{}: {} {}",
                    about.kind.as_deref().unwrap_or_default(),
                    about.name.as_deref().unwrap_or_default(),
                    event.reason.as_deref().unwrap_or_default(),
                    message.lines().next().unwrap_or_default()
                )
            })
            .collect();
        if !lines.is_empty() {
            lines.insert(0, "warning events in the namespace:".to_string());
        }
        lines
    }
}

/// A failed run's task, message and output's end, as lines after a colon.
pub(super) fn failed(record: &Value) -> String {
    let spec = &record["spec"];
    let mut text = String::new();
    if let Some(task) = spec["failedTask"].as_object() {
        text.push_str(&format!(
            "\n  task {:?} on {}: {}",
            task.get("task").and_then(Value::as_str).unwrap_or_default(),
            task.get("host").and_then(Value::as_str).unwrap_or_default(),
            task.get("message").and_then(Value::as_str).unwrap_or_default()
        ));
    }
    if let Some(message) = spec["message"].as_str() {
        text.push_str(&format!("\n  {message}"));
    }
    // The record names the run's output file while its artifacts are kept.
    if let Some(log) = spec["log"].as_str() {
        match std::fs::read_to_string(log) {
            Ok(output) => {
                let output: Vec<String> = readable_lines(&output).collect();
                text.push_str(&format!(
                    "\n  output ({log}), last lines:\n{}",
                    tail(&output.join("\n"), LOG_LINES)
                ));
            }
            Err(_) => text.push_str(&format!("\n  output: {log}")),
        }
    }
    text
}

/// The last `count` non-empty lines, indented.
pub(super) fn tail(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(count);
    lines[start..].iter().map(|line| format!("    {line}")).collect::<Vec<_>>().join("\n")
}

pub(super) fn record_name(record: &Value) -> String {
    record["metadata"]["name"].as_str().unwrap_or_default().to_string()
}
