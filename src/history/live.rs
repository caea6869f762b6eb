//! The runs in flight and their output so far, for the API: which CR is running now (its record
//! exists only once the run ends) and its log line by line, so a reader can follow it live. The
//! lines are the runner's stdout as its events carry it; a run's log is bounded, and once it ends
//! the artifacts have the whole of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use tokio::sync::watch;

/// Lines kept of one run's log; after that, readers are pointed at the artifacts.
const MAX_LINES: usize = 20_000;

/// The runs in flight, by the uid of their CR.
#[derive(Debug, Default)]
pub struct LiveRuns {
    runs: Mutex<HashMap<String, Arc<LiveRun>>>,
}

/// One run in flight.
#[derive(Debug)]
pub struct LiveRun {
    /// The run's ident (its record's and artifacts' name).
    pub ident: String,
    /// When it started.
    pub started: Timestamp,
    /// Why it runs (a [`Trigger`](super::Trigger), as its record will say).
    pub trigger: serde_json::Value,
    lines: Mutex<Vec<String>>,
    /// The task it is at: how many tasks it has started, and the last one's name.
    task: Mutex<Option<(usize, String)>>,
    /// Lines so far, and whether the run ended.
    progress: watch::Sender<(usize, bool)>,
}

/// A reader's position in a run's log.
#[derive(Debug)]
pub struct Follower {
    run: Arc<LiveRun>,
    next: usize,
    progress: watch::Receiver<(usize, bool)>,
}

/// Registers a run; ends it (and forgets it) when dropped.
#[derive(Debug)]
pub struct Registration {
    runs: Arc<LiveRuns>,
    owner_uid: String,
    run: Arc<LiveRun>,
}

impl LiveRuns {
    /// Notes that a run of the CR `owner_uid` started.
    pub fn start(self: &Arc<Self>, owner_uid: &str, ident: &str, trigger: serde_json::Value) -> Registration {
        let run = Arc::new(LiveRun {
            ident: ident.to_string(),
            started: Timestamp::now(),
            trigger,
            lines: Mutex::default(),
            task: Mutex::default(),
            progress: watch::Sender::new((0, false)),
        });
        lock(&self.runs).insert(owner_uid.to_string(), run.clone());
        Registration { runs: self.clone(), owner_uid: owner_uid.to_string(), run }
    }

    /// The CR's run in flight.
    pub fn of(&self, owner_uid: &str) -> Option<Arc<LiveRun>> {
        lock(&self.runs).get(owner_uid).cloned()
    }

    /// A run in flight by its ident.
    pub fn find(&self, ident: &str) -> Option<Arc<LiveRun>> {
        lock(&self.runs).values().find(|run| run.ident == ident).cloned()
    }
}

impl Registration {
    /// The run started its `number`th task, `name`.
    pub fn task_started(&self, number: usize, name: &str) {
        *lock(&self.run.task) = Some((number, name.to_string()));
    }

    /// Adds output of the run (one or more lines).
    pub fn write(&self, text: &str) {
        let mut lines = lock(&self.run.lines);
        let before = lines.len();
        for line in text.lines() {
            match lines.len() {
                n if n < MAX_LINES => lines.push(line.to_string()),
                n if n == MAX_LINES => lines.push("... (the rest is in the run's artifacts)".to_string()),
                _ => break,
            }
        }
        let count = lines.len();
        drop(lines);
        if count != before {
            self.run.progress.send_replace((count, false));
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let count = lock(&self.run.lines).len();
        self.run.progress.send_replace((count, true));
        let mut runs = lock(&self.runs.runs);
        if runs.get(&self.owner_uid).is_some_and(|run| Arc::ptr_eq(run, &self.run)) {
            runs.remove(&self.owner_uid);
        }
    }
}

impl LiveRun {
    /// The task the run is at: how many it has started, and the last one's name.
    pub fn task(&self) -> Option<(usize, String)> {
        lock(&self.task).clone()
    }

    /// Follows the log from its first line.
    pub fn follow(self: &Arc<Self>) -> Follower {
        Follower { run: self.clone(), next: 0, progress: self.progress.subscribe() }
    }
}

impl Follower {
    /// The lines written so far that were not read yet, without waiting.
    pub fn snapshot(&mut self) -> Vec<String> {
        let (count, _) = *self.progress.borrow_and_update();
        let lines = lock(&self.run.lines)[self.next..count].to_vec();
        self.next = count;
        lines
    }

    /// The lines written since the last call, waiting for some; `None` once the run has ended and
    /// everything was read.
    pub async fn next_lines(&mut self) -> Option<Vec<String>> {
        loop {
            let (count, ended) = *self.progress.borrow_and_update();
            if count > self.next {
                let lines = lock(&self.run.lines)[self.next..count].to_vec();
                self.next = count;
                return Some(lines);
            }
            if ended {
                return None;
            }
            if self.progress.changed().await.is_err() {
                return None;
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn followers_read_what_was_written_then_the_rest_as_it_comes_until_the_run_ends() {
        let runs = Arc::new(LiveRuns::default());
        let registration = runs.start("uid-1", "run-1", serde_json::json!({"reason": "Created"}));
        registration.write("PLAY [x]\n\nTASK [a]");
        let run = runs.of("uid-1").expect("in flight");
        assert_eq!(runs.find("run-1").map(|r| r.ident.clone()), Some("run-1".to_string()));
        let mut follower = run.follow();
        assert_eq!(follower.next_lines().await.unwrap(), ["PLAY [x]", "", "TASK [a]"]);
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(lines) = follower.next_lines().await {
                seen.extend(lines);
            }
            seen
        });
        registration.write("ok: [localhost]");
        drop(registration);
        assert_eq!(reader.await.unwrap(), ["ok: [localhost]"]);
        assert!(runs.of("uid-1").is_none(), "an ended run is no longer in flight");
    }

    #[test]
    fn the_run_says_which_task_it_is_at() {
        let runs = Arc::new(LiveRuns::default());
        let registration = runs.start("uid", "run", serde_json::Value::Null);
        let run = runs.of("uid").expect("in flight");
        assert_eq!(run.task(), None, "no task yet");
        registration.task_started(1, "a");
        registration.task_started(2, "b");
        assert_eq!(run.task(), Some((2, "b".to_string())));
    }

    #[test]
    fn a_long_log_is_cut_with_a_note() {
        let runs = Arc::new(LiveRuns::default());
        let registration = runs.start("uid", "run", serde_json::Value::Null);
        for _ in 0..(MAX_LINES + 5) {
            registration.write("line");
        }
        let lines = lock(&registration.run.lines);
        assert_eq!(lines.len(), MAX_LINES + 1);
        assert!(lines.last().unwrap().contains("artifacts"));
    }
}
