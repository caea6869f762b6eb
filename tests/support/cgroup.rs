//! A memory cgroup of a test's own, below the test process's: an operator started in it (see
//! `OperatorConfig::in_cgroup`) sees its limit, as one in a container with `resources.limits.memory`.

use std::path::{Path, PathBuf};

use ansible_operator::cgroup::MemoryCgroup;

/// The cgroup, removed when dropped (once its processes are gone).
pub struct TestCgroup {
    dir: PathBuf,
    v2: bool,
}

impl TestCgroup {
    /// A new cgroup named after `label` with a memory limit of `limit` bytes.
    pub fn create(label: &str, limit: u64) -> Self {
        let own = MemoryCgroup::of_self().expect("the test process is in a memory cgroup it can read");
        let dir = own.dir().join(format!("ansible-operator-test-{label}"));
        let v2 = own.is_v2();
        if v2 {
            // The memory controller must be enabled for the children of the test's cgroup.
            let _ = std::fs::write(own.dir().join("cgroup.subtree_control"), "+memory");
        }
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create the cgroup {}: {e}", dir.display()));
        let cgroup = TestCgroup { dir, v2 };
        assert!(
            cgroup.dir.join(cgroup.limit_file()).exists(),
            "{} has no memory controller: the memory guard's test needs one (cgroup v1, or v2 with memory \
             delegated to the test's cgroup)",
            cgroup.dir.display()
        );
        cgroup.set_limit(limit);
        cgroup
    }

    fn limit_file(&self) -> &'static str {
        if self.v2 { "memory.max" } else { "memory.limit_in_bytes" }
    }

    /// Its directory (processes join it by writing their pid to `cgroup.procs`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sets its memory limit.
    pub fn set_limit(&self, bytes: u64) {
        let file = self.dir.join(self.limit_file());
        std::fs::write(&file, bytes.to_string()).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
    }

    /// Its working set, as the operator reads it.
    pub fn working_set(&self) -> u64 {
        MemoryCgroup::at(&self.dir, self.v2).working_set().expect("the cgroup's working set")
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
