//! Memory and CPU of a process and its descendants, read from `/proc`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// Kernel clock ticks per second for `/proc/<pid>/stat` times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// `VmRSS` of a process in bytes.
pub fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    kib_field(&status, "VmRSS:")
}

/// `Pss` of a process in bytes (from `smaps_rollup`).
pub fn pss(pid: u32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    kib_field(&rollup, "Pss:")
}

fn kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with(key))?;
    let kib: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// What `/proc/<pid>/stat` says of one process: its parent and its CPU times in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stat {
    /// The process.
    pub pid: u32,
    /// Its parent.
    pub ppid: u32,
    /// User plus system time of the process itself.
    pub own: f64,
    /// User plus system time of its reaped descendants (`cutime + cstime`: each waited-for child's
    /// own time and its reaped descendants').
    pub reaped: f64,
}

impl Stat {
    /// Parses the text of `/proc/<pid>/stat`.
    pub fn parse(text: &str) -> Option<Self> {
        let pid = text.split_whitespace().next()?.parse().ok()?;
        // Fields after the command name (which may hold spaces and parentheses) start at state
        // (field 3).
        let rest = text.get(text.rfind(')')? + 2..)?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |index: usize| fields.get(index - 3).and_then(|f| f.parse::<f64>().ok());
        let ticks = |a: usize, b: usize| Some((field(a)? + field(b)?) / TICKS_PER_SECOND);
        Some(Self { pid, ppid: field(4)? as u32, own: ticks(14, 15)?, reaped: ticks(16, 17)? })
    }

    /// Reads `/proc/<pid>/stat`.
    pub fn read(pid: u32) -> Option<Self> {
        Self::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }
}

/// Every process in `/proc` now.
pub fn processes() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(Stat::read)
        .collect()
}

/// CPU seconds from `/proc/<pid>/stat`: (the process itself, its reaped descendants).
pub fn cpu_seconds(pid: u32) -> Option<(f64, f64)> {
    Stat::read(pid).map(|stat| (stat.own, stat.reaped))
}

/// The members of `root`'s process tree among `all`, `root` first (absent when `root` is not
/// among them).
fn tree(root: u32, all: &[Stat]) -> Vec<Stat> {
    let mut children: HashMap<u32, Vec<&Stat>> = HashMap::new();
    for stat in all {
        children.entry(stat.ppid).or_default().push(stat);
    }
    let mut found: Vec<Stat> = all.iter().filter(|s| s.pid == root).copied().collect();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            found.push(**child);
            queue.push(child.pid);
        }
    }
    found
}

/// All living descendants of `root` (not `root` itself), from the parent links in `/proc`.
pub fn descendants(root: u32) -> Vec<u32> {
    tree(root, &processes()).into_iter().map(|s| s.pid).filter(|pid| *pid != root).collect()
}

/// CPU seconds of a process tree at one moment; the difference of two readings is the CPU spent
/// in between.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TreeCpu {
    /// The root process's own time.
    pub root: f64,
    /// Everything below it, living or gone: the reaped time of the root and of every living
    /// descendant, plus the own time of every living descendant. A process that ends between two
    /// readings moves from "own" to its parent's "reaped", so nothing is lost or counted twice,
    /// whichever process of the tree (the operator, the warm worker, a run) reaps it.
    pub descendants: f64,
}

impl TreeCpu {
    /// The reading for `root` from a snapshot of every process.
    pub fn of(root: u32, all: &[Stat]) -> Self {
        let members = tree(root, all);
        let own_below: f64 = members.iter().filter(|s| s.pid != root).map(|s| s.own).sum();
        let reaped: f64 = members.iter().map(|s| s.reaped).sum();
        let root = members.iter().find(|s| s.pid == root).map_or(0.0, |s| s.own);
        Self { root, descendants: reaped + own_below }
    }

    /// The reading for `root` now.
    pub fn read(root: u32) -> Self {
        Self::of(root, &processes())
    }

    /// CPU spent from `earlier` to `self`.
    #[must_use]
    pub fn since(self, earlier: Self) -> Self {
        Self { root: self.root - earlier.root, descendants: self.descendants - earlier.descendants }
    }
}

/// Memory of a process tree at one moment (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeMemory {
    /// `VmRSS` of the root.
    pub root_rss: u64,
    /// Sum of `VmRSS` over the root and its living descendants (shared pages counted in each).
    pub tree_rss: u64,
    /// Sum of `Pss` over the tree (shared pages divided among their users); 0 when not read.
    pub tree_pss: u64,
    /// Processes in the tree, the root included.
    pub processes: usize,
}

impl TreeMemory {
    /// Reads the tree of `root` (PSS too when `with_pss`); `None` when `root` is gone.
    pub fn read(root: u32, with_pss: bool) -> Option<Self> {
        let root_rss = rss(root)?;
        let members = descendants(root);
        let tree_rss = root_rss + members.iter().filter_map(|p| rss(*p)).sum::<u64>();
        let tree_pss = if with_pss {
            pss(root).unwrap_or(0) + members.iter().filter_map(|p| pss(*p)).sum::<u64>()
        } else {
            0
        };
        Some(Self { root_rss, tree_rss, tree_pss, processes: members.len() + 1 })
    }

    /// JSON form.
    pub fn json(&self) -> Value {
        json!({
            "operator_rss_bytes": self.root_rss,
            "tree_rss_bytes": self.tree_rss,
            "tree_pss_bytes": self.tree_pss,
            "tree_processes": self.processes,
        })
    }
}

/// Peaks seen by a [`Sampler`].
#[derive(Debug, Clone, Default)]
pub struct Peaks {
    /// Samples taken.
    pub samples: usize,
    /// Largest operator RSS (bytes).
    pub operator_rss: u64,
    /// Largest sum of RSS over the operator and all its descendants (bytes; shared pages counted in
    /// every process).
    pub tree_rss: u64,
    /// Largest sum of PSS over the tree (bytes; shared pages divided among their users).
    pub tree_pss: u64,
    /// Most processes in the tree at once (operator included).
    pub tree_processes: usize,
    /// Operator RSS at the last sample.
    pub last_operator_rss: u64,
    /// Mean operator RSS over the samples.
    pub mean_operator_rss: f64,
}

impl Peaks {
    /// JSON form (bytes).
    pub fn json(&self) -> Value {
        json!({
            "samples": self.samples,
            "operator_rss_peak_bytes": self.operator_rss,
            "operator_rss_last_bytes": self.last_operator_rss,
            "operator_rss_mean_bytes": self.mean_operator_rss,
            "tree_rss_peak_bytes": self.tree_rss,
            "tree_pss_peak_bytes": self.tree_pss,
            "tree_processes_peak": self.tree_processes,
        })
    }
}

/// Samples a process tree's memory on a thread until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    peaks: Arc<Mutex<Peaks>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `pid` every `interval`; PSS of the tree is read too when `with_pss`.
    pub fn start(pid: u32, interval: Duration, with_pss: bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peaks = Arc::new(Mutex::new(Peaks::default()));
        let thread = {
            let (stop, peaks) = (stop.clone(), peaks.clone());
            std::thread::spawn(move || {
                let mut rss_sum = 0.0;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(sample) = TreeMemory::read(pid, with_pss) {
                        let mut peaks = peaks.lock().unwrap();
                        peaks.samples += 1;
                        rss_sum += sample.root_rss as f64;
                        peaks.mean_operator_rss = rss_sum / peaks.samples as f64;
                        peaks.last_operator_rss = sample.root_rss;
                        peaks.operator_rss = peaks.operator_rss.max(sample.root_rss);
                        peaks.tree_rss = peaks.tree_rss.max(sample.tree_rss);
                        peaks.tree_pss = peaks.tree_pss.max(sample.tree_pss);
                        peaks.tree_processes = peaks.tree_processes.max(sample.processes);
                    }
                    std::thread::sleep(interval);
                }
            })
        };
        Self { stop, peaks, thread: Some(thread) }
    }

    /// Stops sampling and returns the peaks.
    pub fn finish(mut self) -> Peaks {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.peaks.lock().unwrap().clone()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What the machine is: CPU count and model, load, memory, kernel.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|m| m.trim().to_string())
        .unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    json!({
        "cpus": std::thread::available_parallelism().map_or(1, usize::from),
        "cpu_model": model,
        "loadavg": loadavg(),
        "mem_total_bytes": kib_field(&meminfo, "MemTotal:"),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
    })
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut values = text.split_whitespace().map(|v| v.parse::<f64>().unwrap_or(f64::NAN));
    [values.next().unwrap_or(f64::NAN), values.next().unwrap_or(f64::NAN), values.next().unwrap_or(f64::NAN)]
}

#[cfg(test)]
mod tests {
    use super::{Stat, TreeCpu};

    fn stat(pid: u32, ppid: u32, own: f64, reaped: f64) -> Stat {
        Stat { pid, ppid, own, reaped }
    }

    #[test]
    fn stat_parses_a_command_name_with_spaces_and_parentheses() {
        let text = "4242 (python (worker) x) S 17 4242 11 0 -1 4194304 99 0 0 0 250 50 30 20 20 0 1 0 \
                    516361 3133440 383 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(Stat::parse(text), Some(stat(4242, 17, 3.0, 0.5)));
    }

    #[test]
    fn tree_cpu_counts_the_descendants_living_and_reaped_but_not_the_root_or_strangers() {
        let all = [
            stat(1, 0, 100.0, 100.0),
            stat(10, 1, 1.0, 2.0),    // the operator: own 1, reaped (cold runs) 2
            stat(11, 10, 0.5, 4.0),   // the warm worker: reaped run processes 4
            stat(12, 11, 0.25, 0.0),  // a run in flight
            stat(13, 12, 0.125, 0.0), // its module fork
            stat(20, 1, 9.0, 9.0),    // not in the tree
        ];
        let cpu = TreeCpu::of(10, &all);
        assert_eq!(cpu, TreeCpu { root: 1.0, descendants: 2.0 + 4.0 + 0.5 + 0.25 + 0.125 });
    }

    #[test]
    fn a_run_that_ends_between_readings_is_counted_once() {
        let before =
            TreeCpu::of(10, &[stat(10, 1, 1.0, 0.0), stat(11, 10, 0.5, 0.0), stat(12, 11, 2.0, 0.0)]);
        // The run (12) used 1 s more, exited and was reaped by the worker (11).
        let after = TreeCpu::of(10, &[stat(10, 1, 1.25, 0.0), stat(11, 10, 0.5, 3.0)]);
        assert_eq!(after.since(before), TreeCpu { root: 0.25, descendants: 1.0 });
    }

    #[test]
    fn tree_cpu_of_a_gone_root_is_zero() {
        assert_eq!(TreeCpu::of(10, &[stat(20, 1, 9.0, 9.0)]), TreeCpu::default());
    }
}
