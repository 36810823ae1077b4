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
    /// as its SHA-256 digest: two callers share a scope exactly when they presented the same
    /// credential, and the secret itself is never held or printed.
    Credential([u8; 32]),
}

impl AccessScope {
    /// The scope of a user name.
    pub fn user(name: impl Into<String>) -> AccessScope {
        AccessScope::User(name.into())
    }

    /// The scope of an opaque credential (kept as its digest).
    pub fn credential(secret: &[u8]) -> AccessScope {
        AccessScope::Credential(Sha256::digest(secret).into())
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

impl std::fmt::Debug for AccessScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessScope::Anonymous => f.write_str("anonymous"),
            AccessScope::User(name) => write!(f, "user:{name}"),
            AccessScope::Credential(digest) => {
                f.write_str("credential:")?;
                digest[..4].iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
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
        assert!(shown.starts_with("credential:"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(shown.len(), "credential:".len() + 8);
    }
}
