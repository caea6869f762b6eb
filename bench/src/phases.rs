//! Where the time of one run goes, from the files ansible-runner leaves behind: the input's mtime
//! (written just before the spawn), `artifacts/<ident>/command` (ansible-runner has started),
//! the job events' `created` times (ansible-playbook is running), and `rc` (ansible-runner is done).

use std::path::Path;
use std::time::UNIX_EPOCH;

use serde_json::{Value, json};

/// Unix times of one run's milestones.
#[derive(Debug, Clone, Copy, Default)]
pub struct Phases {
    /// `inventory/hosts` written: the last input file the operator writes before spawning.
    pub input_written: f64,
    /// `artifacts/<ident>/command` written: ansible-runner's Python is up.
    pub runner_started: f64,
    /// Earliest job event: ansible-playbook prints its first line.
    pub first_event: f64,
    /// `playbook_on_stats`: the play is over.
    pub stats: f64,
    /// `artifacts/<ident>/rc` written: ansible-runner is about to exit.
    pub runner_done: f64,
}

impl Phases {
    /// JSON form.
    pub fn json(&self) -> Value {
        json!({
            "input_written": self.input_written,
            "runner_started": self.runner_started,
            "first_event": self.first_event,
            "stats": self.stats,
            "runner_done": self.runner_done,
        })
    }
}

fn mtime(path: &Path) -> Option<f64> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(modified.duration_since(UNIX_EPOCH).ok()?.as_secs_f64())
}

fn parse_time(text: &str) -> Option<f64> {
    let ts: jiff::Timestamp = text.parse().ok()?;
    Some(ts.as_nanosecond() as f64 / 1e9)
}

/// Reads the milestones of run `ident` in the runner data dir `dir`; with no `ident`, of the run
/// that finished last.
pub fn read(dir: &Path, ident: Option<&str>) -> Option<Phases> {
    let artifacts = dir.join("artifacts");
    let run = match ident {
        Some(ident) => artifacts.join(ident),
        None => {
            std::fs::read_dir(&artifacts)
                .ok()?
                .flatten()
                .filter(|e| e.file_name() != "latest" && e.path().is_dir())
                .filter_map(|e| Some((mtime(&e.path().join("rc"))?, e.path())))
                .max_by(|a, b| a.0.total_cmp(&b.0))?
                .1
        }
    };
    let mut first_event = f64::INFINITY;
    let mut stats = None;
    for entry in std::fs::read_dir(run.join("job_events")).ok()?.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
        let Ok(event) = serde_json::from_str::<Value>(&text) else { continue };
        let Some(created) = event["created"].as_str().and_then(parse_time) else { continue };
        first_event = first_event.min(created);
        if event["event"] == "playbook_on_stats" {
            stats = Some(created);
        }
    }
    Some(Phases {
        input_written: mtime(&dir.join("inventory/hosts"))?,
        runner_started: mtime(&run.join("command"))?,
        first_event: first_event.is_finite().then_some(first_event)?,
        stats: stats?,
        runner_done: mtime(&run.join("rc"))?,
    })
}
