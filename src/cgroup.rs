//! The operator's own memory cgroup (v1 or v2), found from `/proc/self/cgroup` and
//! `/proc/self/mountinfo`: its limit and its working set, as the kubelet counts it (usage less the
//! inactive file cache, which the kernel reclaims before it kills).

use std::path::{Path, PathBuf};

use procfs::ProcessCGroups;
use procfs::process::{MountInfos, Process};

/// The operator's memory cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryCgroup {
    dir: PathBuf,
    version: Version,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

impl MemoryCgroup {
    /// The cgroup of this process, when one is mounted where the process can read it.
    pub fn of_self() -> Option<Self> {
        let process = Process::myself().ok()?;
        let found = find(&process.cgroups().ok()?, &process.mountinfo().ok()?)?;
        found.dir.is_dir().then_some(found)
    }

    /// The cgroup in `dir`, as the kernel's version `2` or `1` lays it out (tests).
    pub fn at(dir: &Path, v2: bool) -> Self {
        MemoryCgroup { dir: dir.to_path_buf(), version: if v2 { Version::V2 } else { Version::V1 } }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether it is in the unified (v2) hierarchy.
    pub fn is_v2(&self) -> bool {
        self.version == Version::V2
    }

    /// Its memory limit in bytes; `None` when it has none (`max`, or v1's page-rounded maximum).
    pub fn limit(&self) -> Option<u64> {
        let file = match self.version {
            Version::V2 => "memory.max",
            Version::V1 => "memory.limit_in_bytes",
        };
        let limit = read_number(&self.dir.join(file))?;
        // v1 says "no limit" with the largest page-aligned i64 (v2 with "max", which is no number).
        (limit < 1 << 62).then_some(limit)
    }

    /// Its working set in bytes: usage less inactive file pages.
    pub fn working_set(&self) -> Option<u64> {
        let (usage, inactive) = match self.version {
            Version::V2 => ("memory.current", "inactive_file"),
            Version::V1 => ("memory.usage_in_bytes", "total_inactive_file"),
        };
        let usage = read_number(&self.dir.join(usage))?;
        let stat = std::fs::read_to_string(self.dir.join("memory.stat")).ok()?;
        let inactive = stat
            .lines()
            .find_map(|line| line.strip_prefix(inactive)?.strip_prefix(' ')?.trim().parse::<u64>().ok())
            .unwrap_or(0);
        Some(usage.saturating_sub(inactive))
    }
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The memory cgroup's directory: v2's unified hierarchy, else v1's `memory` controller, at its
/// mount point plus the process's path below the mount's root.
fn find(cgroups: &ProcessCGroups, mounts: &MountInfos) -> Option<MemoryCgroup> {
    let in_hierarchy = |v2: bool| {
        cgroups.into_iter().find(|cgroup| match v2 {
            true => cgroup.hierarchy == 0,
            false => cgroup.controllers.iter().any(|c| c == "memory"),
        })
    };
    let mount = |v2: bool| {
        mounts.iter().find(|mount| match v2 {
            true => mount.fs_type == "cgroup2",
            false => mount.fs_type == "cgroup" && mount.super_options.contains_key("memory"),
        })
    };
    // A v1 memory controller wins over a v2 hierarchy without it (hybrid layouts).
    [false, true].into_iter().find_map(|v2| {
        let (cgroup, mount) = (in_hierarchy(v2)?, mount(v2)?);
        let below = Path::new(&cgroup.pathname).strip_prefix(&mount.root).ok()?;
        let dir = mount.mount_point.join(below);
        let version = if v2 { Version::V2 } else { Version::V1 };
        Some(MemoryCgroup { dir, version })
    })
}

#[cfg(test)]
mod tests {
    use procfs::FromBufRead;

    use super::*;

    fn parse(cgroup: &str, mountinfo: &str) -> Option<MemoryCgroup> {
        let cgroups = ProcessCGroups::from_buf_read(cgroup.as_bytes()).unwrap();
        let mounts = MountInfos::from_buf_read(mountinfo.as_bytes()).unwrap();
        find(&cgroups, &mounts)
    }

    const V1_MOUNTS: &str = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
";

    #[test]
    fn v1_takes_the_memory_controllers_mount_and_path() {
        let found = parse("4:memory:/pods/a\n1:cpu:/pods/a\n0::/\n", V1_MOUNTS);
        assert_eq!(found, Some(MemoryCgroup::at(Path::new("/sys/fs/cgroup/memory/pods/a"), false)));
    }

    #[test]
    fn v2_takes_the_unified_hierarchy_below_a_namespaced_root() {
        let mounts = "40 25 0:30 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let found = parse("0::/kubepods/pod1/c1\n", mounts);
        assert_eq!(found, Some(MemoryCgroup::at(Path::new("/sys/fs/cgroup/c1"), true)));
    }

    #[test]
    fn no_memory_cgroup_mounted_is_none() {
        assert_eq!(parse("1:cpu:/a\n", "31 25 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"), None);
    }

    #[test]
    fn limit_and_working_set_read_as_the_kubelet_counts_them() {
        let dir = std::env::temp_dir().join(format!("cgroup-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.max"), "max\n").unwrap();
        std::fs::write(dir.join("memory.current"), "1000000\n").unwrap();
        std::fs::write(dir.join("memory.stat"), "anon 600000\ninactive_file 300000\nactive_file 100000\n")
            .unwrap();
        let v2 = MemoryCgroup::at(&dir, true);
        assert_eq!((v2.limit(), v2.working_set()), (None, Some(700_000)));
        std::fs::write(dir.join("memory.max"), "536870912\n").unwrap();
        assert_eq!(v2.limit(), Some(536_870_912));

        std::fs::write(dir.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        std::fs::write(dir.join("memory.usage_in_bytes"), "2000000\n").unwrap();
        std::fs::write(dir.join("memory.stat"), "cache 5\ntotal_inactive_file 500000\n").unwrap();
        let v1 = MemoryCgroup::at(&dir, false);
        assert_eq!((v1.limit(), v1.working_set()), (None, Some(1_500_000)));
        std::fs::write(dir.join("memory.limit_in_bytes"), "268435456\n").unwrap();
        assert_eq!(v1.limit(), Some(268_435_456));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
