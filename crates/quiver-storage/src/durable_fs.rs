//! Durable changes to a local directory: what a power cut must not undo. A file is written
//! to a temporary name, fsynced and renamed into place, and the directory is fsynced, so a
//! reader finds the old file or the new one, never a part of one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::StorageError;

/// The suffix of a file being written (swept at start-up if a crash left one).
pub(crate) const TEMP_SUFFIX: &str = ".tmp";

/// Replaces the file `name` in `dir` with `bytes`, atomically (a reader sees the old or the
/// new file, never a part) and durably: written to `<name>.tmp`, fsynced, renamed over
/// `name`, and the directory fsynced.
pub(crate) fn replace_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
    let path = dir.join(name);
    let temp = write_temp(&path, bytes)?;
    std::fs::rename(&temp, &path).map_err(|e| StorageError::io(&path, e))?;
    sync_dir(dir)
}

/// Creates the file `path` holding `bytes` (and any missing parent directories), atomically
/// and durably as [`replace_durably`] does; fails if `path` exists already.
pub(crate) fn create_durably(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let dir = path.parent().expect("a file path has a parent");
    create_dir_durably(dir)?;
    let temp = write_temp(path, bytes)?;
    // a hard link fails if the name exists: the file is created whole or not at all
    let linked = std::fs::hard_link(&temp, path).map_err(|e| StorageError::io(path, e));
    let _ = std::fs::remove_file(&temp);
    linked?;
    sync_dir(dir)
}

/// Writes `bytes` to a new temporary file beside `path` (`<path>.<process>-<n>.tmp`, a name
/// no other writer uses) and fsyncs it; returns the temporary file's path.
fn write_temp(path: &Path, bytes: &[u8]) -> Result<PathBuf, StorageError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut temp = path.as_os_str().to_owned();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    temp.push(format!(".{}-{n}{TEMP_SUFFIX}", std::process::id()));
    let temp = PathBuf::from(temp);
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp);
    let written = created.and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_all()
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(StorageError::io(&temp, e));
    }
    Ok(temp)
}

/// Fsyncs a directory so that entries created, renamed or removed in it are durable.
pub fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io(dir, e))
}

/// Creates `dir` and any missing parents, fsyncing each parent whose entries changed, so the
/// new directories survive a power cut.
pub fn create_dir_durably(dir: &Path) -> Result<(), StorageError> {
    let mut missing: Vec<PathBuf> = Vec::new();
    let mut cursor = Some(dir);
    while let Some(d) = cursor {
        if d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        cursor = d.parent();
    }
    for d in missing.iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StorageError::io(d, e)),
        }
        if let Some(parent) = d.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_whole_files_once_and_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/c.bin");
        create_durably(&path, b"first").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        // a second creation of the same name fails and leaves the first intact
        let err = create_durably(&path, b"second").unwrap_err().to_string();
        assert!(err.contains("c.bin"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        replace_durably(&dir.path().join("a/b"), "c.bin", b"third").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("c.bin")],
            "no temporary left"
        );
    }
}
