//! The ansible-runner process tree: started in its own process group, and ended as a whole.
//!
//! ansible-runner starts ansible-playbook through a pty in a new session, so the process group
//! alone does not reach it; the tree is found through `/proc` parent links instead.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long a process tree gets between SIGTERM and SIGKILL when it is ended (a run that timed
/// out, or one still in flight when the graceful shutdown has run out).
pub const TERMINATION_GRACE: Duration = Duration::from_secs(5);

/// A running process tree. Dropping it kills every process still in the tree.
#[derive(Debug)]
pub struct ProcessTree {
    root: u32,
    finished: bool,
}

impl ProcessTree {
    /// Adopts the tree rooted at `root` (the spawned ansible-runner).
    pub fn new(root: u32) -> Self {
        Self { root, finished: false }
    }

    /// Marks the root as exited; descendants it left behind are still killed on drop.
    pub fn root_exited(&mut self) {
        self.finished = true;
    }

    /// SIGTERM to the whole tree, then SIGKILL to whatever is left after `grace`.
    pub async fn terminate(&self, grace: Duration) {
        let members = self.members();
        signal_all(&members, Signal::SIGTERM);
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline && members.iter().any(|pid| alive(*pid)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        signal_all(&self.members(), Signal::SIGKILL);
    }

    /// SIGKILL to the whole tree now.
    pub fn kill(&self) {
        signal_all(&self.members(), Signal::SIGKILL);
    }

    /// The root (unless it has exited) and all its living descendants.
    fn members(&self) -> Vec<u32> {
        let mut members = descendants(self.root);
        if !self.finished {
            members.push(self.root);
        }
        members
    }
}

impl Drop for ProcessTree {
    fn drop(&mut self) {
        self.kill();
    }
}

fn signal_all(pids: &[u32], signal: Signal) {
    for pid in pids {
        if let Ok(pid) = i32::try_from(*pid) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }
}

fn alive(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|pid| kill(Pid::from_raw(pid), None).is_ok())
}

/// All living descendants of `root`, from the parent links in `/proc/<pid>/stat`.
pub fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(parent) =
            std::fs::read_to_string(entry.path().join("stat")).ok().and_then(|s| parent_of(&s))
        {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if seen.insert(*child) {
                found.push(*child);
                queue.push(*child);
            }
        }
    }
    found
}

/// The parent pid from a `/proc/<pid>/stat` line; the command name may contain spaces and parens.
fn parent_of(stat: &str) -> Option<u32> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_pid_is_read_after_the_command_name() {
        assert_eq!(parent_of("1234 (ansible-playbook) S 77 1234 1234 0 -1"), Some(77));
        assert_eq!(parent_of("9 (odd ) name) R 3 9 9"), Some(3));
        assert_eq!(parent_of("garbage"), None);
    }

    #[tokio::test]
    async fn terminate_reaches_grandchildren_in_another_session() {
        // sh starts a grandchild in its own session, as ansible-runner does with ansible-playbook.
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "setsid sleep 300 & wait"])
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        let root = child.id().expect("pid");
        let mut grandchildren = Vec::new();
        for _ in 0..100 {
            grandchildren = descendants(root);
            if !grandchildren.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!grandchildren.is_empty(), "sleep was started");
        ProcessTree::new(root).terminate(Duration::from_secs(2)).await;
        let _ = child.wait().await;
        for _ in 0..100 {
            if !grandchildren.iter().any(|pid| running(*pid)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("grandchildren {grandchildren:?} survived");
    }

    /// Alive and not a zombie waiting for a reaper.
    fn running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
            state != Some("Z")
        })
    }
}
