//! Bounded disk use for runner artifacts: ansible-runner rotates each CR's artifacts, this keeps a
//! cap across all CRs (ansible-operator-plugins#47, #231), removing the oldest first.

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Deepest level below the runner dir where `artifacts/` can be:
/// `<group>/<version>/<kind>/<namespace>/<name>/artifacts`.
const MAX_DEPTH: usize = 6;

/// Removes the oldest run artifacts under `root` until at most `keep` remain. Returns how many
/// were removed.
pub fn prune(root: &Path, keep: usize) -> io::Result<usize> {
    let mut runs = Vec::new();
    collect(root, 0, &mut runs)?;
    if runs.len() <= keep {
        return Ok(0);
    }
    runs.sort_by_key(|(modified, _)| *modified);
    let excess = runs.len() - keep;
    for (_, dir) in runs.iter().take(excess) {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(excess)
}

fn collect(dir: &Path, depth: usize, runs: &mut Vec<(SystemTime, PathBuf)>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let path = entry.path();
        if entry.file_name() == "artifacts" {
            for run in std::fs::read_dir(&path)? {
                let run = run?;
                if run.file_type()?.is_dir() {
                    runs.push((run.metadata()?.modified()?, run.path()));
                }
            }
        } else if depth < MAX_DEPTH {
            collect(&path, depth + 1, runs)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn oldest_artifacts_across_crs_are_removed_first() {
        let root = std::env::temp_dir().join(format!("artifacts-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let a = root.join("g/v1/K/ns/a/artifacts");
        let b = root.join("g/v1/K/ns/b/artifacts");
        for (dir, ident) in [(&a, "1"), (&b, "2"), (&a, "3"), (&b, "4")] {
            std::fs::create_dir_all(dir.join(ident)).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        std::os::unix::fs::symlink("3", a.join("latest")).unwrap();

        assert_eq!(prune(&root, 2).unwrap(), 2);
        assert!(!a.join("1").exists() && !b.join("2").exists());
        assert!(a.join("3").exists() && b.join("4").exists());
        assert_eq!(prune(&root, 2).unwrap(), 0);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_missing_root_has_nothing_to_prune() {
        assert_eq!(prune(Path::new("/nonexistent/runner"), 0).unwrap(), 0);
    }
}
