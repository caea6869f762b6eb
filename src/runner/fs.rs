//! Files and directories the operator alone may read: directories 0700, files 0600 from creation on.

use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// `create_dir_all`, each directory it creates 0700.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).recursive(true).create(dir)
}

/// A directory this process created, 0700, under the system's temporary directory with a name no
/// one chose (a fresh ident), and removed with what it holds when dropped. Creating it fails rather
/// than reuse a path that is already there, so what it removes is only ever its own.
#[derive(Debug)]
pub struct PrivateTempDir(PathBuf);

impl PrivateTempDir {
    /// Creates a new one named `<prefix><fresh ident>`.
    pub fn create(prefix: &str) -> io::Result<Self> {
        let mut tries = 0;
        loop {
            let path = std::env::temp_dir().join(format!("{prefix}{}", crate::ident::Ident::generate()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(PrivateTempDir(path)),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
                Err(error) => return Err(error),
            }
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateTempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a new file, 0600 from its creation on (an earlier one is replaced, whatever its mode).
pub(crate) fn write_private(path: &Path, contents: impl AsRef<[u8]>) -> io::Result<()> {
    remove_if_present(path)?;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(contents.as_ref())
}

/// Removes a file; one that is not there is fine.
pub(crate) fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_private_temp_dir_is_new_0700_and_gone_when_dropped() {
        let dir = PrivateTempDir::create("ao-fs-test-").unwrap();
        let other = PrivateTempDir::create("ao-fs-test-").unwrap();
        assert_ne!(dir.path(), other.path());
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
    }
}
