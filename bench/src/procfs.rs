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

/// CPU seconds from `/proc/<pid>/stat`: (the process itself, its reaped descendants).
pub fn cpu_seconds(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at state (field 3).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |index: usize| fields.get(index - 3).and_then(|f| f.parse::<f64>().ok());
    let (utime, stime, cutime, cstime) = (tick(14)?, tick(15)?, tick(16)?, tick(17)?);
    Some(((utime + stime) / TICKS_PER_SECOND, (cutime + cstime) / TICKS_PER_SECOND))
}

/// All living descendants of `root` (not `root` itself), from the parent links in `/proc`.
pub fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let parent = stat
            .rfind(')')
            .and_then(|end| stat[end + 2..].split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<u32>().ok());
        if let Some(parent) = parent {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            found.push(*child);
            queue.push(*child);
        }
    }
    found
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
                    if let Some(operator) = rss(pid) {
                        let members = descendants(pid);
                        let tree_rss = operator + members.iter().filter_map(|p| rss(*p)).sum::<u64>();
                        let tree_pss = if with_pss {
                            pss(pid).unwrap_or(0) + members.iter().filter_map(|p| pss(*p)).sum::<u64>()
                        } else {
                            0
                        };
                        let mut peaks = peaks.lock().unwrap();
                        peaks.samples += 1;
                        rss_sum += operator as f64;
                        peaks.mean_operator_rss = rss_sum / peaks.samples as f64;
                        peaks.last_operator_rss = operator;
                        peaks.operator_rss = peaks.operator_rss.max(operator);
                        peaks.tree_rss = peaks.tree_rss.max(tree_rss);
                        peaks.tree_pss = peaks.tree_pss.max(tree_pss);
                        peaks.tree_processes = peaks.tree_processes.max(members.len() + 1);
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
