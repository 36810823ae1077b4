//! Durable changes to a local directory: what a power cut must not undo. A file is written
//! to a temporary name, fsynced and renamed into place, and the directory is fsynced, so a
//! reader finds the old file or the new one, never a part of one. Storage's catalog, its
//! Parquet files and manifests, and the token file are all written so.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The suffix of a file being written (swept at start-up if a crash left one).
pub const TEMP_SUFFIX: &str = ".tmp";

/// A durable change that failed: the file or directory, and the operating system's error.
#[derive(Debug)]
pub struct DurableFsError {
    /// The file or directory.
    pub path: PathBuf,
    /// The operating system's error.
    pub source: std::io::Error,
}

impl fmt::Display for DurableFsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for DurableFsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn failed(path: &Path) -> impl FnOnce(std::io::Error) -> DurableFsError + '_ {
    move |source| DurableFsError {
        path: path.to_path_buf(),
        source,
    }
}

/// Who may read a file written here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// As the process's umask allows.
    Default,
    /// Its owner only (mode 0600 on Unix): secrets such as the token file.
    OwnerOnly,
}

/// Replaces the file `name` in `dir` with `bytes`, atomically (a reader sees the old or the
/// new file, never a part) and durably: written to a temporary file, fsynced, renamed over
/// `name`, and the directory fsynced.
pub fn replace_durably(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    access: Access,
) -> Result<(), DurableFsError> {
    let path = dir.join(name);
    let temp = write_temp(&path, bytes, access)?;
    std::fs::rename(&temp, &path).map_err(failed(&path))?;
    sync_dir(dir)
}

/// Creates the file `path` holding `bytes` (and any missing parent directories), atomically
/// and durably as [`replace_durably`] does; fails if `path` exists already.
pub fn create_durably(path: &Path, bytes: &[u8]) -> Result<(), DurableFsError> {
    let dir = path.parent().expect("a file path has a parent");
    create_dir_durably(dir)?;
    let temp = write_temp(path, bytes, Access::Default)?;
    // a hard link fails if the name exists: the file is created whole or not at all
    let linked = std::fs::hard_link(&temp, path).map_err(failed(path));
    let _ = std::fs::remove_file(&temp);
    linked?;
    sync_dir(dir)
}

/// Writes `bytes` to a new temporary file beside `path` (`<path>.<process>-<n>.tmp`, a name
/// no other writer uses) and fsyncs it; returns the temporary file's path.
fn write_temp(path: &Path, bytes: &[u8], access: Access) -> Result<PathBuf, DurableFsError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut temp = path.as_os_str().to_owned();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    temp.push(format!(".{}-{n}{TEMP_SUFFIX}", std::process::id()));
    let temp = PathBuf::from(temp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if access == Access::OwnerOnly {
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    }
    let written = options.open(&temp).and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_all()
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(failed(&temp)(e));
    }
    Ok(temp)
}

/// Fsyncs a directory so that entries created, renamed or removed in it are durable.
pub fn sync_dir(dir: &Path) -> Result<(), DurableFsError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(failed(dir))
}

/// Creates `dir` and any missing parents, fsyncing each parent whose entries changed, so the
/// new directories survive a power cut.
pub fn create_dir_durably(dir: &Path) -> Result<(), DurableFsError> {
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
            Err(e) => return Err(failed(d)(e)),
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

    fn names(dir: &Path) -> Vec<std::ffi::OsString> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect()
    }

    #[test]
    fn creates_whole_files_once_and_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/c.bin");
        create_durably(&path, b"first").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        // a second creation of the same name fails and leaves the first intact
        let err = create_durably(&path, b"second").unwrap_err();
        assert_eq!(err.source.kind(), std::io::ErrorKind::AlreadyExists);
        assert!(err.to_string().contains("c.bin"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        replace_durably(&dir.path().join("a/b"), "c.bin", b"third", Access::Default).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
        assert_eq!(
            names(&dir.path().join("a/b")),
            vec![std::ffi::OsString::from("c.bin")],
            "no temporary left"
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_owner_only_file_is_readable_by_its_owner_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        replace_durably(dir.path(), "secret.json", b"{}", Access::OwnerOnly).unwrap();
        let mode = std::fs::metadata(dir.path().join("secret.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            names(dir.path()),
            vec![std::ffi::OsString::from("secret.json")]
        );
    }

    #[test]
    fn a_missing_directory_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere");
        let err = replace_durably(&missing, "x", b"1", Access::Default).unwrap_err();
        assert!(err.to_string().contains("nowhere"), "{err}");
    }
}
