//! The token file: `<data_dir>/tokens.json`, holding each token's name, grants, the SHA-256
//! digest of its secret and its SCRAM verifier, never the secret.
//!
//! Every change (create, revoke) takes an exclusive lock on `tokens.json.lock`, re-reads the
//! file, writes the new content to a temporary file, syncs it, renames it over the old one and
//! syncs the directory: a crash leaves the old file or the new one, never a torn one, and the
//! offline `quiver token create` and a running server never lose each other's changes. A
//! running server looks at the file's modification stamp at most every
//! [`REFRESH_INTERVAL`] when a credential is checked (and at once when a credential is not
//! found) and re-reads it when it changed: a token created offline works at once, one revoked
//! offline stops working within that interval, also in open sessions.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use quiver_model::durable_fs::{replace_durably, Access};
use serde::{Deserialize, Serialize};

use crate::permission::Permission;
use crate::principal::{Caller, Principal};
use crate::secret::{new_secret, ScramVerifier, SecretDigest, MAX_CREDENTIAL_BYTES};

/// The token file's name in the data directory.
pub const TOKEN_FILE: &str = "tokens.json";

/// Longest token name.
pub const MAX_TOKEN_NAME_LEN: usize = 64;

/// Most permissions one token may hold.
pub const MAX_PERMISSIONS: usize = 256;

/// How often a running server looks whether the token file changed on disk.
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(100);

/// Why a token operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The name or permissions are not acceptable; the message says why.
    #[error("{0}")]
    Invalid(String),
    /// A token of that name exists.
    #[error("a token named {0:?} exists (revoke it first, or choose another name)")]
    Exists(String),
    /// No token of that name exists.
    #[error("no token named {0:?}")]
    NotFound(String),
    /// The token file could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// The token file is not what Quiver writes.
    #[error("the token file {path} is damaged ({reason}); restore it from a backup, or move it away and create new tokens")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

impl quiver_model::Classify for TokenError {
    fn kind(&self) -> quiver_model::ErrorKind {
        use quiver_model::ErrorKind;
        match self {
            TokenError::Invalid(_) => ErrorKind::Invalid,
            TokenError::Exists(_) => ErrorKind::Conflict,
            TokenError::NotFound(_) => ErrorKind::NotFound,
            TokenError::Io { .. } | TokenError::Damaged { .. } => ErrorKind::Internal,
        }
    }
}

/// A token as the file keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredToken {
    name: String,
    admin: bool,
    permissions: Vec<Permission>,
    /// SHA-256 of the secret, hexadecimal.
    sha256: String,
    /// What PostgreSQL's SCRAM-SHA-256 login checks.
    scram: ScramVerifier,
    /// Seconds since the Unix epoch.
    created_at: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TokenFile {
    version: u32,
    tokens: Vec<StoredToken>,
}

/// What listing tokens shows: never the secret or its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    /// The token's name.
    pub name: String,
    /// True for admin tokens.
    pub admin: bool,
    /// Its permissions (`db:<name|*>:read|write`).
    pub permissions: Vec<String>,
    /// When it was created, seconds since the Unix epoch.
    pub created_at: u64,
}

/// A token just created: its description and its secret, shown once.
#[derive(Debug)]
pub struct CreatedToken {
    /// The token's description.
    pub info: TokenInfo,
    /// The secret: not stored anywhere.
    pub secret: String,
}

/// One loaded token.
struct Entry {
    stored: StoredToken,
    digest: SecretDigest,
    principal: Caller,
}

/// Modification time, length and inode of the token file.
type FileStamp = (SystemTime, u64, u64);

/// The tokens in memory, as of one version of the file.
#[derive(Default)]
struct Loaded {
    /// The file's version when read (`None`: there was no file).
    stamp: Option<FileStamp>,
    by_name: BTreeMap<String, Entry>,
    by_digest: HashMap<SecretDigest, String>,
}

/// The tokens of one data directory.
pub struct TokenStore {
    path: PathBuf,
    lock_path: PathBuf,
    loaded: RwLock<Loaded>,
    /// Held while the file is read and installed, so that a slower reader never installs an
    /// older version over a newer one.
    reloading: Mutex<()>,
    /// When the store was opened: [`TokenStore::next_check_ms`] counts from it.
    opened: Instant,
    /// Milliseconds after `opened` when the file's stamp is next looked at: one atomic load
    /// on every request, a compare-and-swap by the one request that does the look.
    next_check_ms: AtomicU64,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenStore({})", self.path.display())
    }
}

impl TokenStore {
    /// The tokens of `data_dir` (created if missing), read from its token file.
    pub fn open(data_dir: &Path) -> Result<Self, TokenError> {
        fs::create_dir_all(data_dir).map_err(io_context(format!(
            "cannot create the data directory {}",
            data_dir.display()
        )))?;
        let store = TokenStore {
            path: data_dir.join(TOKEN_FILE),
            lock_path: data_dir.join(format!("{TOKEN_FILE}.lock")),
            loaded: RwLock::new(Loaded::default()),
            reloading: Mutex::new(()),
            opened: Instant::now(),
            next_check_ms: AtomicU64::new(REFRESH_INTERVAL.as_millis() as u64),
        };
        store.reload()?;
        Ok(store)
    }

    /// True if at least one token exists.
    pub fn has_tokens(&self) -> bool {
        self.reload_if_changed();
        !self.loaded.read().by_name.is_empty()
    }

    /// Re-reads the file if it changed on disk, looking at most every [`REFRESH_INTERVAL`]:
    /// a token revoked by another process is then revoked here too.
    pub fn refresh(&self) {
        let due = self.next_check_ms.load(Ordering::Relaxed);
        let now = self.opened.elapsed().as_millis() as u64;
        if now < due {
            return;
        }
        let next = now + REFRESH_INTERVAL.as_millis() as u64;
        if self
            .next_check_ms
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.reload_if_changed();
        }
    }

    /// The token whose secret is `secret`, if any (compared by digest, in constant time).
    pub fn authenticate(&self, secret: &str) -> Option<Caller> {
        if secret.len() > MAX_CREDENTIAL_BYTES {
            return None;
        }
        self.refresh();
        let digest = SecretDigest::of(secret);
        if let Some(found) = self.find(&digest) {
            return Some(found);
        }
        self.reload_if_changed();
        self.find(&digest)
    }

    fn find(&self, digest: &SecretDigest) -> Option<Caller> {
        let loaded = self.loaded.read();
        let name = loaded.by_digest.get(digest)?;
        let entry = loaded.by_name.get(name)?;
        entry
            .digest
            .matches(digest)
            .then(|| entry.principal.clone())
    }

    /// The SCRAM verifier and principal of the token named `name`, if any.
    pub fn scram_login(&self, name: &str) -> Option<(ScramVerifier, Caller)> {
        let find = |loaded: &Loaded| {
            loaded
                .by_name
                .get(name)
                .map(|entry| (entry.stored.scram.clone(), entry.principal.clone()))
        };
        self.refresh();
        if let Some(found) = find(&self.loaded.read()) {
            return Some(found);
        }
        self.reload_if_changed();
        find(&self.loaded.read())
    }

    /// Every token, by name.
    pub fn list(&self) -> Vec<TokenInfo> {
        self.reload_if_changed();
        self.loaded
            .read()
            .by_name
            .values()
            .map(|entry| info(&entry.stored))
            .collect()
    }

    /// Creates a token named `name` with `permissions` (or an admin token) and returns its
    /// secret, which is not kept.
    pub fn create(
        &self,
        name: &str,
        admin: bool,
        permissions: &[Permission],
    ) -> Result<CreatedToken, TokenError> {
        validate_name(name)?;
        if permissions.len() > MAX_PERMISSIONS {
            return Err(TokenError::Invalid(format!(
                "a token holds at most {MAX_PERMISSIONS} permissions"
            )));
        }
        if !admin && permissions.is_empty() {
            return Err(TokenError::Invalid(
                "a token needs at least one permission (`db:<name|*>:read|write`), or admin".into(),
            ));
        }
        let secret = new_secret();
        let stored = StoredToken {
            name: name.to_string(),
            admin,
            permissions: if admin {
                Vec::new()
            } else {
                permissions.to_vec()
            },
            sha256: SecretDigest::of(&secret).to_hex(),
            scram: ScramVerifier::new(&secret),
            created_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        let created = info(&stored);
        self.change(|file| {
            if file.tokens.iter().any(|t| t.name == name) {
                return Err(TokenError::Exists(name.to_string()));
            }
            file.tokens.push(stored);
            Ok(())
        })?;
        Ok(CreatedToken {
            info: created,
            secret,
        })
    }

    /// Revokes the token named `name`: it stops working at once, also for the sessions and
    /// handles it opened.
    pub fn revoke(&self, name: &str) -> Result<(), TokenError> {
        self.change(|file| {
            let before = file.tokens.len();
            file.tokens.retain(|t| t.name != name);
            if file.tokens.len() == before {
                return Err(TokenError::NotFound(name.to_string()));
            }
            Ok(())
        })
    }

    /// The token file as stored (names, grants and digests of the secrets, never a secret),
    /// for query nodes to take over with [`TokenStore::replace_all`]; no file yet exports
    /// as no tokens (so that tokens shared earlier stop working too).
    pub fn export(&self) -> Result<Vec<u8>, TokenError> {
        let mut file = read_file(&self.path)?.unwrap_or_default();
        file.version = 1;
        encode(&file)
    }

    /// Makes the tokens exactly those of `exported` (another server's
    /// [`TokenStore::export`]) unless they are already; says whether anything changed.
    /// Bytes that are not a token file change nothing and are an error.
    pub fn replace_all(&self, exported: &[u8]) -> Result<bool, TokenError> {
        let incoming = parse(exported, Path::new("the writer's token file"))?;
        let wanted = encode(&incoming)?;
        let current = read_file(&self.path)?
            .map(|file| encode(&file))
            .transpose()?;
        if current.as_deref() == Some(wanted.as_slice()) {
            return Ok(false);
        }
        self.change(|file| {
            *file = incoming;
            Ok(())
        })?;
        Ok(true)
    }

    /// Applies `edit` to the file under the lock, writes it atomically and loads the result.
    fn change(
        &self,
        edit: impl FnOnce(&mut TokenFile) -> Result<(), TokenError>,
    ) -> Result<(), TokenError> {
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock_path)
            .map_err(io_context(format!(
                "cannot open the lock file {}",
                self.lock_path.display()
            )))?;
        lock.lock().map_err(io_context(format!(
            "cannot lock {}",
            self.lock_path.display()
        )))?;
        let mut file = read_file(&self.path)?.unwrap_or_default();
        edit(&mut file)?;
        file.version = 1;
        write_atomically(&self.path, &file)?;
        self.reload()
        // the lock is released when `lock` is dropped
    }

    /// Reads the file if it changed since it was last read; a file that cannot be read is
    /// logged and the tokens already loaded stay in force.
    fn reload_if_changed(&self) {
        let stamp = stamp_of(&self.path);
        if stamp == self.loaded.read().stamp {
            return;
        }
        if let Err(e) = self.reload() {
            tracing::error!(error = %e, "cannot re-read the token file: the tokens loaded earlier stay in force");
        }
    }

    /// Reads the file and replaces the loaded tokens; a token no longer in the file is
    /// revoked (its open sessions see it), one still there keeps its principal.
    fn reload(&self) -> Result<(), TokenError> {
        let _reloading = self.reloading.lock();
        let stamp = stamp_of(&self.path);
        let file = read_file(&self.path)?.unwrap_or_default();
        let mut loaded = self.loaded.write();
        let mut previous = std::mem::take(&mut loaded.by_name);
        loaded.by_digest.clear();
        for stored in file.tokens {
            let digest = SecretDigest::from_hex(&stored.sha256).ok_or_else(|| {
                self.damaged(format!("token {:?} has no valid sha256", stored.name))
            })?;
            if !stored.scram.is_well_formed() {
                return Err(self.damaged(format!(
                    "token {:?} has no valid scram verifier",
                    stored.name
                )));
            }
            let principal = match previous.remove(&stored.name) {
                Some(old) if old.digest == digest => old.principal,
                Some(old) => {
                    old.principal.revoke();
                    Arc::new(Principal::token(
                        &stored.name,
                        stored.admin,
                        &stored.permissions,
                    ))
                }
                None => Arc::new(Principal::token(
                    &stored.name,
                    stored.admin,
                    &stored.permissions,
                )),
            };
            loaded.by_digest.insert(digest, stored.name.clone());
            loaded.by_name.insert(
                stored.name.clone(),
                Entry {
                    stored,
                    digest,
                    principal,
                },
            );
        }
        for gone in previous.values() {
            gone.principal.revoke();
        }
        loaded.stamp = stamp;
        Ok(())
    }

    fn damaged(&self, reason: String) -> TokenError {
        TokenError::Damaged {
            path: self.path.clone(),
            reason,
        }
    }
}

fn info(stored: &StoredToken) -> TokenInfo {
    TokenInfo {
        name: stored.name.clone(),
        admin: stored.admin,
        permissions: stored
            .permissions
            .iter()
            .map(Permission::to_string)
            .collect(),
        created_at: stored.created_at,
    }
}

/// A token name: 1 to 64 ASCII letters, digits, `_`, `.` or `-`, not starting with `-` (it
/// is also the PostgreSQL user name).
fn validate_name(name: &str) -> Result<(), TokenError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_TOKEN_NAME_LEN
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid {
        return Ok(());
    }
    Err(TokenError::Invalid(format!(
        "invalid token name {name:?}: 1 to {MAX_TOKEN_NAME_LEN} ASCII letters, digits, `_`, `.` or `-`, not starting with `-`"
    )))
}

/// What tells one version of the file from another: its modification time, its length and
/// (on Unix) its inode, which every atomic replacement changes (the new file is created while
/// the old one still exists), however fast two changes follow each other.
fn stamp_of(path: &Path) -> Option<FileStamp> {
    let metadata = fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&metadata);
    #[cfg(not(unix))]
    let inode = 0;
    Some((metadata.modified().ok()?, metadata.len(), inode))
}

/// The file's tokens; `None` if there is no file.
fn read_file(path: &Path) -> Result<Option<TokenFile>, TokenError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(TokenError::Io {
                context: format!("cannot read the token file {}", path.display()),
                source: e,
            })
        }
    };
    parse(&bytes, path).map(Some)
}

/// The token file in `bytes`, read from `path` (which errors name).
fn parse(bytes: &[u8], path: &Path) -> Result<TokenFile, TokenError> {
    let file: TokenFile = serde_json::from_slice(bytes).map_err(|e| TokenError::Damaged {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if file.version != 1 {
        return Err(TokenError::Damaged {
            path: path.to_path_buf(),
            reason: format!("version {} is not one this build reads (1)", file.version),
        });
    }
    Ok(file)
}

/// The bytes `file` is stored as.
fn encode(file: &TokenFile) -> Result<Vec<u8>, TokenError> {
    serde_json::to_vec_pretty(file).map_err(|e| TokenError::Io {
        context: "cannot encode the token file".into(),
        source: io::Error::other(e),
    })
}

/// Writes `file` to `path` atomically and durably (`quiver_model::durable_fs`), readable by
/// its owner only.
fn write_atomically(path: &Path, file: &TokenFile) -> Result<(), TokenError> {
    let bytes = encode(file)?;
    let (directory, name) = match (path.parent(), path.file_name()) {
        (Some(directory), Some(name)) => (directory, name.to_string_lossy()),
        _ => {
            return Err(TokenError::Io {
                context: format!("{} is not a file path", path.display()),
                source: io::Error::from(io::ErrorKind::InvalidInput),
            })
        }
    };
    replace_durably(directory, &name, &bytes, Access::OwnerOnly).map_err(|e| TokenError::Io {
        context: format!("cannot write the token file {}", e.path.display()),
        source: e.source,
    })
}

fn io_context(context: impl Into<String>) -> impl FnOnce(io::Error) -> TokenError {
    let context = context.into();
    move |source| TokenError::Io { context, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permission::Action;

    fn permissions(texts: &[&str]) -> Vec<Permission> {
        texts.iter().map(|p| p.parse().unwrap()).collect()
    }

    #[test]
    fn tokens_authenticate_by_secret_and_are_stored_only_as_digests() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::open(dir.path()).unwrap();
        assert!(!store.has_tokens());
        let admin = store.create("root", true, &[]).unwrap();
        let reader = store
            .create("dash", false, &permissions(&["db:m:read"]))
            .unwrap();
        assert!(store.authenticate(&admin.secret).unwrap().is_admin());
        let caller = store.authenticate(&reader.secret).unwrap();
        assert_eq!(caller.name(), "dash");
        assert!(caller.may(Action::Read, "m") && !caller.may(Action::Write, "m"));
        assert!(store.authenticate("qv_nope").is_none());
        assert!(store.authenticate(&"x".repeat(100_000)).is_none());
        let text = fs::read_to_string(dir.path().join(TOKEN_FILE)).unwrap();
        assert!(!text.contains(&admin.secret) && !text.contains(&reader.secret));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.path().join(TOKEN_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "only the owner reads the token file");
        }
        let listed = store.list();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].name, "dash");
        assert_eq!(listed[0].permissions, ["db:m:read"]);
    }

    #[test]
    fn a_query_node_takes_over_the_writers_tokens_exactly() {
        let (writer_dir, node_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (writer, node) = (
            TokenStore::open(writer_dir.path()).unwrap(),
            TokenStore::open(node_dir.path()).unwrap(),
        );
        let nothing = writer.export().unwrap();
        let reader = writer
            .create("dash", false, &permissions(&["db:m:read"]))
            .unwrap();
        let local = node.create("local-only", true, &[]).unwrap();
        let exported = writer.export().unwrap();
        assert!(!String::from_utf8_lossy(&exported).contains(&reader.secret));
        assert!(node.replace_all(&exported).unwrap());
        assert_eq!(node.authenticate(&reader.secret).unwrap().name(), "dash");
        assert!(
            node.authenticate(&local.secret).is_none(),
            "only the writer's tokens"
        );
        assert!(
            !node.replace_all(&exported).unwrap(),
            "unchanged: nothing written"
        );
        // bytes that are not a token file change nothing
        assert!(matches!(
            node.replace_all(b"{\"version\": 1, \"tok"),
            Err(TokenError::Damaged { .. })
        ));
        assert_eq!(node.authenticate(&reader.secret).unwrap().name(), "dash");
        writer.revoke("dash").unwrap();
        assert!(node.replace_all(&writer.export().unwrap()).unwrap());
        assert!(node.authenticate(&reader.secret).is_none());
        // a writer without a token file shares no tokens
        node.create("stray", true, &[]).unwrap();
        assert!(node.replace_all(&nothing).unwrap());
        assert!(!node.has_tokens());
    }

    #[test]
    fn names_and_permissions_are_validated() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::open(dir.path()).unwrap();
        for bad in ["", "-x", "a b", "é", &"n".repeat(65), "a\0"] {
            assert!(
                matches!(store.create(bad, true, &[]), Err(TokenError::Invalid(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            store.create("x", false, &[]),
            Err(TokenError::Invalid(_))
        ));
        store.create("x", true, &[]).unwrap();
        assert!(matches!(
            store.create("x", true, &[]),
            Err(TokenError::Exists(_))
        ));
        assert!(matches!(
            store.revoke("nobody"),
            Err(TokenError::NotFound(_))
        ));
    }

    #[test]
    fn revocation_is_seen_by_held_principals_and_by_other_stores() {
        let dir = tempfile::tempdir().unwrap();
        let server = TokenStore::open(dir.path()).unwrap();
        // a token created by another process (the offline CLI) works at once
        let offline = TokenStore::open(dir.path()).unwrap();
        let created = offline.create("ops", true, &[]).unwrap();
        let held = server
            .authenticate(&created.secret)
            .expect("re-read on a miss");
        assert!(server.scram_login("ops").is_some());
        // revoked elsewhere: the server sees it at its next check, without a miss first
        offline.revoke("ops").unwrap();
        std::thread::sleep(REFRESH_INTERVAL);
        assert!(server.authenticate(&created.secret).is_none());
        assert!(held.is_revoked());
        assert!(server.list().is_empty());
        // revoked here: at once
        let again = server.create("ops", true, &[]).unwrap();
        let held = server.authenticate(&again.secret).unwrap();
        server.revoke("ops").unwrap();
        assert!(held.is_revoked() && server.authenticate(&again.secret).is_none());
    }

    #[test]
    fn a_damaged_file_is_refused_with_its_path_and_a_remedy() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(TOKEN_FILE), b"{not json").unwrap();
        let error = TokenStore::open(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains(TOKEN_FILE) && error.contains("backup"),
            "{error}"
        );
    }
}
