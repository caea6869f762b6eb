//! Runs left behind by an operator that died without ending them (SIGKILL, OOM kill, a crash).
//! Every process of a run (cold: ansible-runner and what it starts; warm: the worker and its forks)
//! carries [`MARKER`] in its environment, naming the operator instance that started it: its pid and
//! that process's start time, so a reused pid is not mistaken for the old operator. At start, the
//! operator ends every marked process whose instance is gone; runs of other live operators on the
//! same machine are left alone, and so is every process of another pid namespace (a container's,
//! seen from the host: the pid in its marker means nothing here). Each run's processes also carry [`RUN_MARKER`] with the run's ident,
//! so what a run whose playbook was killed leaves behind (orphans the kernel handed to init) can be
//! found and ended too.

use std::path::Path;
use std::sync::OnceLock;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The environment variable that names the operator instance a run's processes belong to.
pub const MARKER: &str = "ANSIBLE_OPERATOR_INSTANCE";

/// The environment variable that names the run (its ident) a process belongs to.
pub const RUN_MARKER: &str = "ANSIBLE_OPERATOR_RUN";

/// This operator's instance: `<pid>.<start time in clock ticks since boot>` (read once).
pub fn instance() -> String {
    static INSTANCE: OnceLock<String> = OnceLock::new();
    INSTANCE
        .get_or_init(|| {
            let pid = std::process::id();
            format!("{pid}.{}", start_time(pid).unwrap_or_default())
        })
        .clone()
}

/// SIGKILLs every process marked with an instance that no longer runs; returns their pids.
pub fn end_orphans() -> Vec<u32> {
    end_marked(MARKER, |instance| !alive(instance))
}

/// SIGKILLs every process left of the run `ident`; returns their pids.
pub fn end_run(ident: &str) -> Vec<u32> {
    end_marked(RUN_MARKER, |run| run == ident)
}

/// SIGKILLs every other process whose environment sets `variable` to a value `matches` accepts.
fn end_marked(variable: &str, matches: impl Fn(&str) -> bool) -> Vec<u32> {
    let proc = Path::new("/proc");
    let me = std::process::id();
    let here = pid_namespace("self");
    let Ok(entries) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let ended: Vec<u32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| pid_namespace(&pid.to_string()).is_some_and(|ns| Some(&ns) == here.as_ref()))
        .filter(|pid| {
            let environ = std::fs::read(proc.join(pid.to_string()).join("environ")).unwrap_or_default();
            marked(&environ, variable).is_some_and(|value| matches(&value))
        })
        .collect();
    for pid in &ended {
        if let Ok(pid) = i32::try_from(*pid) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    ended
}

/// The pid namespace of `/proc/<process>` (`pid:[<inode>]`), when it can be read.
fn pid_namespace(process: &str) -> Option<std::path::PathBuf> {
    std::fs::read_link(Path::new("/proc").join(process).join("ns/pid")).ok()
}

/// The value a process's `/proc/<pid>/environ` gives `variable`, if it sets it.
fn marked(environ: &[u8], variable: &str) -> Option<String> {
    let prefix = format!("{variable}=");
    environ
        .split(|byte| *byte == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .map(|value| String::from_utf8_lossy(value).into_owned())
}

/// Whether the operator instance `pid.start` still runs.
fn alive(instance: &str) -> bool {
    let Some((pid, start)) = instance.split_once('.') else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    start_time(pid).is_some_and(|now| now.to_string() == start)
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_read_from_a_processes_environment() {
        let environ = format!("PATH=/bin\0{MARKER}=12.345\0HOME=/root\0");
        assert_eq!(marked(environ.as_bytes(), MARKER).as_deref(), Some("12.345"));
        assert_eq!(marked(b"PATH=/bin\0HOME=/root\0", MARKER), None);
        assert_eq!(marked(format!("X{MARKER}=1.2\0").as_bytes(), MARKER), None);
    }

    #[test]
    fn this_instance_is_alive_and_a_reused_pid_or_a_gone_one_is_not() {
        assert!(alive(&instance()));
        let pid = std::process::id();
        let start = start_time(pid).unwrap();
        assert!(!alive(&format!("{pid}.{}", start + 1)), "same pid, another start: a reused pid");
        assert!(!alive("4194304.1"), "above the largest pid Linux gives");
        assert!(!alive("garbage"));
    }

    /// Waits until the child `pid` has exec'd with `marker` in its environment (before, /proc shows
    /// the test's own environment).
    fn exec_done(pid: u32, marker: &str) {
        for _ in 0..200 {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if marked(&environ, marker).is_some() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("process {pid} never showed {marker} in its environment");
    }

    #[test]
    fn only_processes_of_a_gone_instance_are_ended() {
        let mut orphan =
            std::process::Command::new("sleep").arg("600").env(MARKER, "4194304.1").spawn().unwrap();
        let mut ours =
            std::process::Command::new("sleep").arg("600").env(MARKER, instance()).spawn().unwrap();
        exec_done(orphan.id(), MARKER);
        exec_done(ours.id(), MARKER);
        let ended = end_orphans();
        assert!(ended.contains(&orphan.id()), "the gone instance's process is ended: {ended:?}");
        assert!(!ended.contains(&ours.id()), "a live instance's process is left alone");
        let status = orphan.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
        assert!(ours.try_wait().unwrap().is_none(), "still running");
        ours.kill().unwrap();
        ours.wait().unwrap();
    }

    #[test]
    fn a_process_of_another_pid_namespace_is_left_alone_whatever_its_marker_says() {
        // A container's run, seen from the host: its own pid namespace, a marker whose pid is gone here.
        let mut elsewhere = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "env", &format!("{MARKER}=4194304.1"), "sleep", "600"])
            .spawn()
            .unwrap();
        let sleeper = (0..200)
            .find_map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                let children =
                    std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", elsewhere.id()));
                children.ok()?.split_whitespace().next()?.parse::<u32>().ok()
            })
            .expect("unshare started sleep in a new pid namespace (needs root)");
        exec_done(sleeper, MARKER);
        assert_ne!(pid_namespace(&sleeper.to_string()), pid_namespace("self"));
        let ended = end_orphans();
        assert!(!ended.contains(&sleeper), "a process of another pid namespace was ended: {ended:?}");
        assert!(std::path::Path::new(&format!("/proc/{sleeper}")).exists(), "still runs");
        elsewhere.kill().unwrap();
        elsewhere.wait().unwrap();
        let _ = kill(Pid::from_raw(i32::try_from(sleeper).unwrap()), Signal::SIGKILL);
    }

    #[test]
    fn only_the_named_runs_processes_are_ended() {
        let mut left = std::process::Command::new("sleep").arg("600").env(RUN_MARKER, "41").spawn().unwrap();
        let mut other =
            std::process::Command::new("sleep").arg("600").env(RUN_MARKER, "411").spawn().unwrap();
        exec_done(left.id(), RUN_MARKER);
        exec_done(other.id(), RUN_MARKER);
        assert_eq!(end_run("41"), [left.id()]);
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&left.wait().unwrap()), Some(9));
        assert!(other.try_wait().unwrap().is_none(), "another run's process is left alone");
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
