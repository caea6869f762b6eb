//! Test helpers: a temporary directory tree that is removed when dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, deleted on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// Creates a new, empty, uniquely named directory.
    pub(crate) fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = format!("watches-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(unique);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    /// The directory's absolute path.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Creates a directory (and its parents) at `relative`.
    pub(crate) fn dir(&self, relative: &str) {
        std::fs::create_dir_all(self.0.join(relative)).expect("create dir");
    }

    /// Creates an empty file (and its parent directories) at `relative`.
    pub(crate) fn file(&self, relative: &str) {
        self.write(relative, "");
    }

    /// Writes `text` to `relative`, creating parent directories.
    pub(crate) fn write(&self, relative: &str, text: &str) {
        let path = self.0.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent dir");
        }
        std::fs::write(path, text).expect("write file");
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
