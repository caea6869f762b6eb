//! The memory guard (`--memory-high-water`): a reconcile's run does not start while the operator's
//! memory cgroup would pass its high-water mark with it: its working set now, plus one run's
//! estimate for this run and for each run started in the last [`SETTLE`] (whose processes have not
//! grown yet). The run waits, counted in `ansible_operator_runs_waiting_for_memory`, with one log
//! line; a run always starts when none is in flight, so an operator that alone sits above the mark
//! still works through its CRs one at a time. The estimate is `--run-memory-estimate`, else
//! measured: the growth of the working set over its idle level, per run in flight, sampled every
//! [`SAMPLE`], its highest recent value (ansible-operator-plugins#222: 128 runs at once on a
//! 128-CPU node were killed for memory).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::cgroup::MemoryCgroup;

/// How long a run that just started counts as still to grow.
const SETTLE: Duration = Duration::from_secs(5);
/// How often a held run looks again.
const RECHECK: Duration = Duration::from_millis(250);
/// How often the estimate is measured.
const SAMPLE: Duration = Duration::from_secs(2);
/// The estimate before any run was measured.
const FIRST_ESTIMATE: u64 = 64 << 20;
/// The measured estimate never goes below this.
const LEAST_ESTIMATE: u64 = 16 << 20;
/// Each sample keeps this share of the highest estimate seen (about a minute to halve).
const DECAY: f64 = 0.98;

const MIB: u64 = 1 << 20;

/// The guard of one operator process.
#[derive(Debug)]
pub struct MemoryGuard {
    cgroup: MemoryCgroup,
    /// `--memory-high-water`: the share of the cgroup's limit runs may fill.
    high_water: f64,
    /// `--run-memory-estimate`, when given.
    fixed: Option<u64>,
    state: Mutex<State>,
    in_flight: Arc<AtomicUsize>,
    /// Held runs look one at a time, in arrival order.
    turn: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct State {
    estimate: u64,
    /// The working set when no run was in flight, last seen.
    idle: Option<u64>,
    /// When the runs of the last [`SETTLE`] started.
    started: VecDeque<Instant>,
}

/// A run the guard let start; it counts as in flight until dropped.
#[derive(Debug)]
#[must_use = "the run counts as in flight until this is dropped"]
pub struct Admitted {
    in_flight: Arc<AtomicUsize>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a run waits: the projection and the mark, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Full {
    working_set: u64,
    estimate: u64,
    starting: u64,
    high_water: u64,
}

impl MemoryGuard {
    /// The guard of `cgroup` filling at most `high_water` of its limit (0: no guard), with a fixed
    /// per-run `estimate` or one measured by a task sampling every [`SAMPLE`].
    pub fn start(cgroup: MemoryCgroup, high_water: f64, estimate: Option<u64>) -> Option<Arc<Self>> {
        let guard = Arc::new(MemoryGuard::new(cgroup, high_water, estimate)?);
        if guard.fixed.is_none() {
            tokio::spawn(sample(Arc::downgrade(&guard)));
        }
        Some(guard)
    }

    fn new(cgroup: MemoryCgroup, high_water: f64, estimate: Option<u64>) -> Option<Self> {
        (high_water > 0.0 && high_water <= 1.0).then(|| MemoryGuard {
            cgroup,
            high_water,
            fixed: estimate.filter(|bytes| *bytes > 0),
            state: Mutex::new(State { estimate: FIRST_ESTIMATE, idle: None, started: VecDeque::new() }),
            in_flight: Arc::default(),
            turn: tokio::sync::Mutex::new(()),
        })
    }

    /// Waits until a run fits under the mark (or none is in flight). `waiting` is called only when
    /// the run must wait, and what it returns is held while it does (a gauge guard).
    pub async fn room<G>(&self, waiting: impl FnOnce() -> G) -> Admitted {
        let _turn = self.turn.lock().await;
        let mut waiting = Some(waiting);
        let mut held = None;
        while let Err(full) = self.check() {
            if let Some(waiting) = waiting.take() {
                held = Some(waiting());
                tracing::warn!(
                    working_set_mib = full.working_set / MIB,
                    run_estimate_mib = full.estimate / MIB,
                    runs_starting = full.starting,
                    high_water_mib = full.high_water / MIB,
                    "a run waits for memory: with it the operator's cgroup would pass --memory-high-water"
                );
            }
            tokio::time::sleep(RECHECK).await;
        }
        drop(held);
        let now = Instant::now();
        let mut state = self.lock();
        state.started.retain(|started| now.duration_since(*started) < SETTLE);
        state.started.push_back(now);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Admitted { in_flight: self.in_flight.clone() }
    }

    /// Whether one more run fits now.
    fn check(&self) -> Result<(), Full> {
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        let (Some(limit), Some(working_set)) = (self.cgroup.limit(), self.cgroup.working_set()) else {
            return Ok(());
        };
        let high_water = (limit as f64 * self.high_water) as u64;
        let now = Instant::now();
        let (estimate, starting) = {
            let state = self.lock();
            let starting =
                state.started.iter().filter(|started| now.duration_since(**started) < SETTLE).count();
            (self.fixed.unwrap_or(state.estimate), starting as u64)
        };
        let projected = working_set.saturating_add(estimate.saturating_mul(starting + 1));
        match projected <= high_water {
            true => Ok(()),
            false => Err(Full { working_set, estimate, starting, high_water }),
        }
    }

    /// Folds one sample of the working set into the estimate.
    fn observe(&self, working_set: u64) {
        let in_flight = self.in_flight.load(Ordering::SeqCst) as u64;
        let mut state = self.lock();
        if in_flight == 0 {
            state.idle = Some(working_set);
            return;
        }
        let Some(idle) = state.idle else { return };
        let per_run = working_set.saturating_sub(idle) / in_flight;
        let decayed = (state.estimate as f64 * DECAY) as u64;
        state.estimate = per_run.max(decayed).max(LEAST_ESTIMATE);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Measures the estimate until the guard is gone.
async fn sample(guard: Weak<MemoryGuard>) {
    let mut ticks = tokio::time::interval(SAMPLE);
    loop {
        ticks.tick().await;
        let Some(guard) = guard.upgrade() else { return };
        if let Some(working_set) = guard.cgroup.working_set() {
            guard.observe(working_set);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    /// A v2 cgroup directory with a 1000 MiB limit and `working_set` MiB in use.
    struct FakeCgroup(PathBuf);

    impl FakeCgroup {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("memory-guard-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("memory.max"), (1000 * MIB).to_string()).unwrap();
            std::fs::write(dir.join("memory.stat"), "inactive_file 0\n").unwrap();
            let fake = FakeCgroup(dir);
            fake.use_mib(0);
            fake
        }

        fn use_mib(&self, mib: u64) {
            std::fs::write(self.0.join("memory.current"), (mib * MIB).to_string()).unwrap();
        }

        fn cgroup(&self) -> MemoryCgroup {
            MemoryCgroup::at(Path::new(&self.0), true)
        }
    }

    impl Drop for FakeCgroup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_that_would_pass_the_mark_waits_until_memory_frees() {
        let fake = FakeCgroup::new("waits");
        let guard = Arc::new(MemoryGuard::new(fake.cgroup(), 0.5, Some(100 * MIB)).expect("a guard"));
        fake.use_mib(300);
        let first = guard.room(|| panic!("nothing in flight: the first run never waits")).await;
        fake.use_mib(420);
        tokio::time::advance(SETTLE).await;
        let waited = Arc::new(AtomicUsize::new(0));
        let second = tokio::spawn({
            let (guard, waited) = (guard.clone(), waited.clone());
            async move { guard.room(|| waited.fetch_add(1, Ordering::SeqCst)).await }
        });
        tokio::time::sleep(RECHECK * 4).await;
        assert!(!second.is_finished(), "420 + 100 MiB is past 500 MiB: it waits");
        assert_eq!(waited.load(Ordering::SeqCst), 1);
        fake.use_mib(350);
        let second = tokio::time::timeout(RECHECK * 4, second).await.expect("it starts once memory frees");
        assert_eq!(guard.in_flight.load(Ordering::SeqCst), 2);
        drop((first, second));
        assert_eq!(guard.in_flight.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn runs_that_just_started_count_before_they_have_grown() {
        let fake = FakeCgroup::new("starting");
        let guard = MemoryGuard::new(fake.cgroup(), 0.5, Some(100 * MIB)).expect("a guard");
        fake.use_mib(250);
        let _a = guard.room(|| ()).await;
        let _b = guard.room(|| panic!("250 MiB + two runs' 100 MiB fits under 500 MiB")).await;
        assert!(guard.check().is_err(), "250 MiB + three runs' 100 MiB is past 500 MiB");
        tokio::time::advance(SETTLE).await;
        assert_eq!(guard.check(), Ok(()), "settled: 250 + 100 MiB fits");
    }

    #[tokio::test(start_paused = true)]
    async fn the_estimate_is_the_growth_per_run_over_the_idle_level_and_decays() {
        let fake = FakeCgroup::new("learns");
        let guard = MemoryGuard::new(fake.cgroup(), 0.9, None).expect("a guard");
        guard.observe(100 * MIB);
        let _a = guard.room(|| ()).await;
        let _b = guard.room(|| ()).await;
        guard.observe(400 * MIB);
        assert_eq!(guard.lock().estimate, 150 * MIB, "(400 - 100) / 2 runs");
        guard.observe(150 * MIB);
        assert_eq!(guard.lock().estimate, (150.0 * MIB as f64 * DECAY) as u64, "the highest, decaying");
    }

    #[test]
    fn no_share_is_no_guard() {
        let fake = FakeCgroup::new("off");
        assert!(MemoryGuard::new(fake.cgroup(), 0.0, None).is_none());
        assert!(MemoryGuard::new(fake.cgroup(), 1.5, None).is_none());
    }
}
