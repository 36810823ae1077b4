//! Who a request acts for, in one shape for every protocol: [`AccessScope`]. The result cache
//! keys answers by it, so callers in different scopes never share a cached answer; the
//! security layer will attach each scope's permissions to it.

use sha2::{Digest, Sha256};

/// The identity a request runs under, as far as caching (and, later, permissions) care.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub enum AccessScope {
    /// No credential was presented.
    #[default]
    Anonymous,
    /// A user named by the client (the PostgreSQL start-up user, the Flight SQL handshake
    /// user).
    User(String),
    /// A credential the protocol does not interpret (an HTTP `Authorization` header), kept only
    /// as its SHA-256 digest salted with a random per-process key: two callers share a scope
    /// exactly when they presented the same credential; the secret is never held, and the
    /// digest is never printed (unsalted, a printed digest of a weak password could be
    /// checked against guesses offline).
    Credential([u8; 32]),
}

impl AccessScope {
    /// The scope of a user name.
    pub fn user(name: impl Into<String>) -> AccessScope {
        AccessScope::User(name.into())
    }

    /// The scope of an opaque credential (kept as its salted digest).
    pub fn credential(secret: &[u8]) -> AccessScope {
        let digest = Sha256::new()
            .chain_update(process_salt())
            .chain_update(secret)
            .finalize();
        AccessScope::Credential(digest.into())
    }

    /// Approximate bytes the scope occupies (for cache accounting).
    pub fn size(&self) -> usize {
        std::mem::size_of::<AccessScope>()
            + match self {
                AccessScope::User(name) => name.len(),
                AccessScope::Anonymous | AccessScope::Credential(_) => 0,
            }
    }
}

/// 16 random bytes from the operating system, chosen once per process, so credential
/// digests differ from one run to the next.
fn process_salt() -> &'static [u8; 16] {
    static SALT: std::sync::OnceLock<[u8; 16]> = std::sync::OnceLock::new();
    SALT.get_or_init(|| {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).expect("the operating system provides random bytes");
        salt
    })
}

impl std::fmt::Debug for AccessScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessScope::Anonymous => f.write_str("anonymous"),
            AccessScope::User(name) => write!(f, "user:{name}"),
            AccessScope::Credential(_) => f.write_str("credential"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_equal_only_when_the_secret_is() {
        let a = AccessScope::credential(b"Bearer one");
        assert_eq!(a, AccessScope::credential(b"Bearer one"));
        assert_ne!(a, AccessScope::credential(b"Bearer two"));
        assert_ne!(AccessScope::user("a"), AccessScope::user("b"));
        assert_ne!(AccessScope::user(""), AccessScope::Anonymous);
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let shown = format!("{:?}", AccessScope::credential(b"Bearer hunter2"));
        assert_eq!(
            shown, "credential",
            "neither the secret nor its digest is shown"
        );
        let AccessScope::Credential(digest) = AccessScope::credential(b"Bearer hunter2") else {
            unreachable!()
        };
        let unsalted: [u8; 32] = Sha256::digest(b"Bearer hunter2").into();
        assert_ne!(digest, unsalted, "the digest is salted");
    }
}
