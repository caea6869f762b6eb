//! Files and directories the operator alone may read: directories 0700, files 0600 from creation on.

use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// `create_dir_all`, each directory it creates 0700.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).recursive(true).create(dir)
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
