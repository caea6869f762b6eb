//! Client-side timestamps of every CR's status transitions, from a watch (condition
//! `lastTransitionTime` has only second precision).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::watch;

use crate::now;

/// What the watch saw of one CR. Times are Unix seconds on this machine's clock.
#[derive(Debug, Clone, Default)]
pub struct Track {
    /// First time the CR was seen.
    pub seen: Option<f64>,
    /// Each time `Running` became True with reason `Running` (a run started).
    pub running: Vec<f64>,
    /// Each time `Successful` became True.
    pub successful: Vec<f64>,
    /// Each time `Failure` became True.
    pub failed: Vec<f64>,
    /// Each time a condition's `ansibleResult.completion` took a new value (a run finished; its
    /// stats event's time).
    pub completions: Vec<f64>,
    last_completion: Option<String>,
    last_running: bool,
    last_successful: bool,
    last_failed: bool,
}

impl Track {
    /// First `Successful` at or after `since`.
    pub fn successful_since(&self, since: f64) -> Option<f64> {
        self.successful.iter().copied().find(|t| *t >= since)
    }

    /// First `Running` at or after `since`.
    pub fn running_since(&self, since: f64) -> Option<f64> {
        self.running.iter().copied().find(|t| *t >= since)
    }

    /// Runs started (`Running` became True with reason `Running`) in `[from, to]`.
    pub fn runs_between(&self, from: f64, to: f64) -> usize {
        self.running.iter().filter(|t| (from..=to).contains(*t)).count()
    }

    /// Whether the last status seen has a run in progress (`Running` True with reason `Running`).
    pub fn is_running(&self) -> bool {
        self.last_running
    }
}

/// A watch on the CRs of one namespace, recording transitions as they arrive.
pub struct Tracker {
    tracks: Arc<Mutex<HashMap<String, Track>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Tracker {
    /// Starts watching and returns once the initial list is done (the watch is live).
    pub async fn start(api: Api<DynamicObject>) -> anyhow::Result<Self> {
        let tracks: Arc<Mutex<HashMap<String, Track>>> = Arc::default();
        let (ready_tx, mut ready_rx) = watch::channel(false);
        let task = {
            let tracks = tracks.clone();
            tokio::spawn(async move {
                let mut stream = watcher(api, watcher::Config::default()).boxed();
                while let Some(event) = stream.next().await {
                    let at = now();
                    match event {
                        Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                            observe(&mut tracks.lock().unwrap(), &object, at);
                        }
                        Ok(watcher::Event::InitDone) => {
                            let _ = ready_tx.send(true);
                        }
                        Ok(_) => {}
                        Err(error) => {
                            eprintln!("bench: watch error (retrying): {error}");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            })
        };
        tokio::time::timeout(Duration::from_secs(30), ready_rx.wait_for(|ready| *ready)).await??;
        Ok(Self { tracks, task })
    }

    /// A copy of one CR's track.
    pub fn get(&self, name: &str) -> Track {
        self.tracks.lock().unwrap().get(name).cloned().unwrap_or_default()
    }

    /// Copies of the tracks of `names`.
    pub fn get_all(&self, names: &[String]) -> Vec<Track> {
        let tracks = self.tracks.lock().unwrap();
        names.iter().map(|name| tracks.get(name).cloned().unwrap_or_default()).collect()
    }

    /// Waits until every CR of `names` has become `Successful` at or after `since`; returns how
    /// many had when it returned (all of them unless `timeout` passed).
    pub async fn wait_successful(&self, names: &[String], since: f64, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let done = self.count_successful(names, since);
            if done == names.len() || tokio::time::Instant::now() >= deadline {
                return done;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How many of `names` have become `Successful` at or after `since`.
    pub fn count_successful(&self, names: &[String], since: f64) -> usize {
        let tracks = self.tracks.lock().unwrap();
        names
            .iter()
            .filter(|name| tracks.get(*name).and_then(|t| t.successful_since(since)).is_some())
            .count()
    }

    /// How many of `names` have a run in progress, by the last status seen.
    pub fn count_running(&self, names: &[String]) -> usize {
        let tracks = self.tracks.lock().unwrap();
        names.iter().filter(|name| tracks.get(*name).is_some_and(Track::is_running)).count()
    }

    /// How many of `names` have failed at least once since `since`.
    pub fn count_failed(&self, names: &[String], since: f64) -> usize {
        let tracks = self.tracks.lock().unwrap();
        names
            .iter()
            .filter(|name| tracks.get(*name).is_some_and(|t| t.failed.iter().any(|f| *f >= since)))
            .count()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn condition<'a>(object: &'a DynamicObject, kind: &str) -> Option<&'a Value> {
    object.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

fn observe(tracks: &mut HashMap<String, Track>, object: &DynamicObject, at: f64) {
    let track = tracks.entry(object.name_any()).or_default();
    track.seen.get_or_insert(at);
    let is_true = |kind: &str| condition(object, kind).is_some_and(|c| c["status"] == "True");
    let running =
        condition(object, "Running").is_some_and(|c| c["status"] == "True" && c["reason"] == "Running");
    let successful = is_true("Successful");
    let failed = is_true("Failure");
    let completion = object.data["status"]["conditions"].as_array().and_then(|conditions| {
        conditions.iter().find_map(|c| c["ansibleResult"]["completion"].as_str().filter(|s| !s.is_empty()))
    });
    if completion.is_some() && completion != track.last_completion.as_deref() {
        // The first sight of a CR that already ran (the watch's initial list) is not a new run.
        if track.seen != Some(at) || track.last_completion.is_some() {
            track.completions.push(at);
        }
        track.last_completion = completion.map(str::to_string);
    }
    if running && !track.last_running {
        track.running.push(at);
    }
    if successful && !track.last_successful {
        track.successful.push(at);
    }
    if failed && !track.last_failed {
        track.failed.push(at);
    }
    (track.last_running, track.last_successful, track.last_failed) = (running, successful, failed);
}
