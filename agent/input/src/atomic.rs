//! Files written whole or not at all.

use std::fs::File;
use std::path::{Path, PathBuf};

/// A file being written to a temporary file beside its destination; it
/// replaces the destination on [`commit`](AtomicFile::commit), and nothing is
/// left behind if it is dropped before.
pub struct AtomicFile {
    tmp: tempfile::NamedTempFile,
    path: PathBuf,
}

impl AtomicFile {
    /// Starts writing `path`.
    pub fn create(path: &Path) -> std::io::Result<AtomicFile> {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Ok(AtomicFile {
            tmp: tempfile::NamedTempFile::new_in(dir)?,
            path: path.to_path_buf(),
        })
    }

    /// The temporary file, to write to.
    pub fn file(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    /// Renames the temporary file over the destination.
    pub fn commit(self) -> std::io::Result<()> {
        self.tmp.persist(&self.path).map(drop).map_err(|e| e.error)
    }
}
