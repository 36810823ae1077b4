//! The server side of SCRAM-SHA-256 (RFC 5802, RFC 7677), as PostgreSQL clients speak it,
//! against what the token file keeps: the salt, the iteration count, `StoredKey` and
//! `ServerKey` (as PostgreSQL's `pg_authid` does). Neither the token nor the salted password
//! is kept, so a copy of the file cannot be used to log in: a client proof needs `ClientKey`,
//! of which the file holds only the hash.
//!
//! Channel binding is not offered (there is no TLS yet): the client's GS2 header must be
//! `n,,` (or `y,,`: the client could bind but the server does not advertise it).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::secret::ScramVerifier;

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// A message is not what SCRAM-SHA-256 sends; the text says what is wrong.
    #[error("malformed SCRAM message: {0}")]
    Malformed(String),
    /// The client's proof is wrong: a wrong password, or an unknown user.
    #[error("wrong SCRAM proof")]
    WrongProof,
}

/// A fresh server nonce: 18 random bytes in base64 (printable, no commas).
pub fn server_nonce() -> String {
    let mut bytes = [0u8; 18];
    getrandom::fill(&mut bytes).expect("the operating system provides random bytes");
    STANDARD.encode(bytes)
}

/// `HMAC-SHA-256(key, message)`.
/// `a` XOR `b`, byte by byte (as long as the shorter): a proof from a key and a signature,
/// and back.
fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

pub(crate) fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// `StoredKey` and `ServerKey` of a salted password.
pub(crate) fn keys(salted_password: &[u8]) -> ([u8; 32], [u8; 32]) {
    let client_key = hmac(salted_password, b"Client Key");
    let stored_key: [u8; 32] = Sha256::digest(client_key).into();
    (stored_key, hmac(salted_password, b"Server Key"))
}

/// An exchange after the server's first message: what checking the client's final message
/// needs.
#[derive(Debug)]
pub struct AwaitingFinal {
    verifier: ScramVerifier,
    gs2_header: String,
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

/// Answers the client's first message (`n,,n=<user>,r=<nonce>`) with the server's
/// (`r=<nonce><server nonce>,s=<salt>,i=<iterations>`).
pub fn server_first(
    verifier: ScramVerifier,
    client_first: &[u8],
    server_nonce: &str,
) -> Result<(String, AwaitingFinal), ScramError> {
    let text = std::str::from_utf8(client_first)
        .map_err(|_| ScramError::Malformed("the first message is not UTF-8".into()))?;
    let (gs2_header, bare) = split_gs2_header(text)?;
    let nonce = attribute(bare, 'r')
        .filter(|nonce| {
            !nonce.is_empty()
                && nonce
                    .bytes()
                    .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
        })
        .ok_or_else(|| ScramError::Malformed("the first message has no valid nonce (r=)".into()))?;
    let nonce = format!("{nonce}{server_nonce}");
    let server_first = format!("r={nonce},s={},i={}", verifier.salt, verifier.iterations);
    Ok((
        server_first.clone(),
        AwaitingFinal {
            verifier,
            gs2_header: gs2_header.to_string(),
            nonce,
            client_first_bare: bare.to_string(),
            server_first,
        },
    ))
}

impl AwaitingFinal {
    /// Checks the client's final message (`c=<gs2 header>,r=<nonce>,p=<proof>`) and answers
    /// with the server's signature (`v=...`).
    pub fn finish(&self, client_final: &[u8]) -> Result<String, ScramError> {
        let text = std::str::from_utf8(client_final)
            .map_err(|_| ScramError::Malformed("the final message is not UTF-8".into()))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| ScramError::Malformed("the final message has no proof (p=)".into()))?;
        let binding = attribute(without_proof, 'c')
            .ok_or_else(|| ScramError::Malformed("the final message has no c=".into()))?;
        if STANDARD.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(ScramError::Malformed(
                "channel binding does not match the first message".into(),
            ));
        }
        if attribute(without_proof, 'r') != Some(self.nonce.as_str()) {
            return Err(ScramError::Malformed("the nonce does not match".into()));
        }
        let proof = STANDARD
            .decode(proof)
            .ok()
            .filter(|p| p.len() == 32)
            .ok_or_else(|| ScramError::Malformed("the proof is not 32 bytes of base64".into()))?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let stored_key = self.verifier.stored_key_bytes();
        let client_signature = hmac(&stored_key, auth_message.as_bytes());
        let client_key = xor(&proof, &client_signature);
        let computed: [u8; 32] = Sha256::digest(&client_key).into();
        // slices of different lengths compare unequal
        if !bool::from(computed[..].ct_eq(&stored_key[..])) {
            return Err(ScramError::WrongProof);
        }
        let signature = hmac(&self.verifier.server_key_bytes(), auth_message.as_bytes());
        Ok(format!("v={}", STANDARD.encode(signature)))
    }
}

/// The GS2 header (`n,,` or `y,,`) and the bare message after it.
fn split_gs2_header(text: &str) -> Result<(&str, &str), ScramError> {
    for header in ["n,,", "y,,"] {
        if let Some(bare) = text.strip_prefix(header) {
            return Ok((header, bare));
        }
    }
    Err(ScramError::Malformed(
        "channel binding and authorization identities are not supported: the message must start with n,,".into(),
    ))
}

/// The value of attribute `name` (`name=value`) in a comma-separated message.
fn attribute(message: &str, name: char) -> Option<&str> {
    message.split(',').find_map(|part| {
        let mut chars = part.chars();
        (chars.next() == Some(name) && chars.next() == Some('=')).then(|| &part[2..])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example exchange: user "user", password "pencil".
    #[test]
    fn rfc_7677_example() {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let verifier = ScramVerifier::with_salt("pencil", &salt, 4096);
        let (first, awaiting) = server_first(
            verifier,
            b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        )
        .unwrap();
        assert_eq!(
            first,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let last = awaiting
            .finish(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert_eq!(last, "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        // a wrong proof, a changed nonce, another binding
        assert_eq!(
            awaiting.finish(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="),
            Err(ScramError::WrongProof)
        );
        assert!(matches!(
            awaiting.finish(b"c=biws,r=other,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            awaiting.finish(b"c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="),
            Err(ScramError::Malformed(_))
        ));
    }

    #[test]
    fn malformed_first_messages_are_refused() {
        let verifier = ScramVerifier::new("secret");
        for bad in [
            &b""[..],
            b"p=tls-server-end-point,,n=u,r=x",
            b"n,a=admin,n=u,r=x",
            b"n,,n=u",
            b"n,,n=u,r=",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(
                    server_first(verifier.clone(), bad, "s"),
                    Err(ScramError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_verifier_logs_in_only_with_its_secret() {
        // a client computing its proof from the secret, as libpq does
        let secret = "qv_example";
        let verifier = ScramVerifier::new(secret);
        let salt = STANDARD.decode(&verifier.salt).unwrap();
        let login = |password: &str| {
            let (first, awaiting) = server_first(verifier.clone(), b"n,,n=t,r=abc", "def").unwrap();
            let mut salted = [0u8; 32];
            pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), &salt, 4096, &mut salted);
            let client_key = hmac(&salted, b"Client Key");
            let stored_key: [u8; 32] = Sha256::digest(client_key).into();
            let without_proof = "c=biws,r=abcdef";
            let auth_message = format!("n=t,r=abc,{first},{without_proof}");
            let signature = hmac(&stored_key, auth_message.as_bytes());
            let proof = xor(&client_key, &signature);
            awaiting.finish(format!("{without_proof},p={}", STANDARD.encode(proof)).as_bytes())
        };
        assert!(login(secret).is_ok());
        assert_eq!(login("qv_wrong"), Err(ScramError::WrongProof));
    }
}
