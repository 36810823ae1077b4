//! Token secrets and what is stored instead of them: a new secret is 32 random bytes
//! (`qv_` + base64url); the server keeps only its SHA-256 digest (enough for a secret that
//! cannot be guessed: there is nothing to brute-force) and, for PostgreSQL's SCRAM-SHA-256,
//! the salt, StoredKey and ServerKey a SCRAM server checks proofs against (as PostgreSQL
//! stores them). None gives the secret back, and none lets its holder log in.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The prefix of every token Quiver issues (it makes a leaked token recognisable to secret
/// scanners).
pub const TOKEN_PREFIX: &str = "qv_";

/// PBKDF2 iterations of the SCRAM verifier (PostgreSQL's default; RFC 7677's minimum).
pub const SCRAM_ITERATIONS: u32 = 4096;

/// Longest credential looked at: anything longer is refused before it is hashed.
pub const MAX_CREDENTIAL_BYTES: usize = 1024;

/// The SHA-256 digest of a token secret.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SecretDigest(pub [u8; 32]);

impl SecretDigest {
    /// The digest of `secret`.
    pub fn of(secret: &str) -> Self {
        SecretDigest(Sha256::digest(secret.as_bytes()).into())
    }

    /// Compares in constant time.
    pub fn matches(&self, other: &SecretDigest) -> bool {
        self.0.ct_eq(&other.0).into()
    }

    /// Hexadecimal, as stored in the token file.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses [`SecretDigest::to_hex`].
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut digest = [0u8; 32];
        for (i, byte) in digest.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(SecretDigest(digest))
    }
}

impl std::fmt::Debug for SecretDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretDigest(..)")
    }
}

/// What a SCRAM-SHA-256 server needs to check a client's proof (RFC 5802): the salt, the
/// iteration count, `StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and
/// `ServerKey = HMAC(SaltedPassword, "Server Key")`, where
/// `SaltedPassword = PBKDF2-HMAC-SHA-256(secret, salt, iterations)`.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScramVerifier {
    /// Random salt, base64 (standard alphabet, as SCRAM sends it).
    pub salt: String,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// StoredKey, base64.
    pub stored_key: String,
    /// ServerKey, base64.
    pub server_key: String,
}

impl std::fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScramVerifier(..)")
    }
}

impl ScramVerifier {
    /// A verifier for `secret` with a fresh random salt.
    pub fn new(secret: &str) -> Self {
        let salt = random_bytes::<16>();
        ScramVerifier::with_salt(secret, &salt, SCRAM_ITERATIONS)
    }

    /// A verifier nobody can pass, for the unknown user `user`: refused the same way, after
    /// the same exchange, as a wrong secret. Its salt is the same for every attempt as `user`
    /// (derived from it and a key chosen once per process), as a real token's is, so that
    /// comparing salts does not tell which names exist.
    pub fn impossible(user: &str) -> Self {
        static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
        let key = KEY.get_or_init(random_bytes::<32>);
        let derived = crate::scram::hmac(key, user.as_bytes());
        let salt = &derived[..16];
        ScramVerifier {
            salt: STANDARD.encode(salt),
            iterations: SCRAM_ITERATIONS,
            stored_key: STANDARD.encode(random_bytes::<32>()),
            server_key: STANDARD.encode(random_bytes::<32>()),
        }
    }

    pub(crate) fn with_salt(secret: &str, salt: &[u8], iterations: u32) -> Self {
        let mut salted = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(secret.as_bytes(), salt, iterations, &mut salted);
        let (stored_key, server_key) = crate::scram::keys(&salted);
        ScramVerifier {
            salt: STANDARD.encode(salt),
            iterations,
            stored_key: STANDARD.encode(stored_key),
            server_key: STANDARD.encode(server_key),
        }
    }

    /// StoredKey's bytes.
    pub fn stored_key_bytes(&self) -> Vec<u8> {
        STANDARD.decode(&self.stored_key).unwrap_or_default()
    }

    /// ServerKey's bytes.
    pub fn server_key_bytes(&self) -> Vec<u8> {
        STANDARD.decode(&self.server_key).unwrap_or_default()
    }

    /// True if the stored fields decode (a hand-edited file may break them).
    pub fn is_well_formed(&self) -> bool {
        let key = |text: &str| STANDARD.decode(text).is_ok_and(|k| k.len() == 32);
        STANDARD.decode(&self.salt).is_ok_and(|s| !s.is_empty())
            && key(&self.stored_key)
            && key(&self.server_key)
            && self.iterations >= SCRAM_ITERATIONS
    }
}

/// A new token secret: `qv_` and 32 random bytes in base64url.
pub fn new_secret() -> String {
    format!(
        "{TOKEN_PREFIX}{}",
        URL_SAFE_NO_PAD.encode(random_bytes::<32>())
    )
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system provides random bytes");
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_fresh_and_digests_match_only_their_secret() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == 3 + 43);
        assert!(SecretDigest::of(&a).matches(&SecretDigest::of(&a)));
        assert!(!SecretDigest::of(&a).matches(&SecretDigest::of(&b)));
        let digest = SecretDigest::of(&a);
        assert_eq!(SecretDigest::from_hex(&digest.to_hex()), Some(digest));
        assert_eq!(SecretDigest::from_hex("zz"), None);
        assert_eq!(SecretDigest::from_hex(&"é".repeat(32)), None);
        assert!(!format!("{digest:?}").contains(&digest.to_hex()[..8]));
    }

    #[test]
    fn scram_verifier_is_rfc_7677s_salted_password() {
        // deterministic for one salt, different for another secret or salt; that real
        // clients accept it is tested end to end (psql and psycopg log in with SCRAM)
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let one = ScramVerifier::with_salt("pencil", &salt, 4096);
        let two = ScramVerifier::with_salt("pencil", &salt, 4096);
        assert_eq!(one, two);
        assert!(one.is_well_formed());
        assert_ne!(one, ScramVerifier::with_salt("pencil2", &salt, 4096));
        assert_ne!(
            ScramVerifier::new("pencil").salt,
            ScramVerifier::new("pencil").salt
        );
        assert!(ScramVerifier::impossible("x").is_well_formed());
    }
}
