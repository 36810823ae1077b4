//! The certificate and key a server presents, loaded from PEM files and re-read when the files
//! change (see the crate documentation).

use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use parking_lot::Mutex;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::{TlsError, RELOAD_CHECK_INTERVAL};

/// Larger certificate or key files are refused: a PEM chain is a few kilobytes.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// What identifies a version of the two files: modification time and length of each.
type Stamp = [(Option<SystemTime>, u64); 2];

/// The certificate in use, and the files it came from.
#[derive(Debug)]
pub(crate) struct ReloadingCertificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    current: Arc<CertifiedKey>,
    /// The files' stamp when `current` was loaded, or when a reload last failed (so a bad
    /// renewal is reported once, not on every handshake).
    seen: Stamp,
    checked_at: Instant,
}

impl ReloadingCertificate {
    /// Loads the pair, or says why it cannot serve.
    pub(crate) fn load(
        cert_file: PathBuf,
        key_file: PathBuf,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let seen = stamp(&cert_file, &key_file);
        let current = Arc::new(load_pair(&cert_file, &key_file, &provider)?);
        Ok(ReloadingCertificate {
            cert_file,
            key_file,
            provider,
            state: Mutex::new(State {
                current,
                seen,
                checked_at: Instant::now(),
            }),
        })
    }

    /// A line for the start-up log.
    pub(crate) fn describe(&self) -> String {
        let chain = self.state.lock().current.cert.len();
        format!(
            "{} ({chain} certificate{} in the chain), key {}",
            self.cert_file.display(),
            if chain == 1 { "" } else { "s" },
            self.key_file.display()
        )
    }

    /// The pair to present now: re-read first if the files changed since the last look
    /// (which happens at most every [`RELOAD_CHECK_INTERVAL`]).
    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock();
        if state.checked_at.elapsed() >= RELOAD_CHECK_INTERVAL {
            state.checked_at = Instant::now();
            let now = stamp(&self.cert_file, &self.key_file);
            if now != state.seen {
                state.seen = now;
                match load_pair(&self.cert_file, &self.key_file, &self.provider) {
                    Ok(renewed) => {
                        state.current = Arc::new(renewed);
                        tracing::info!(
                            cert_file = %self.cert_file.display(),
                            "TLS certificate re-read: new connections get the renewed one"
                        );
                    }
                    Err(e) => tracing::warn!(
                        error = %e,
                        "the TLS certificate or key changed but cannot be used: still serving the previous one"
                    ),
                }
            }
        }
        state.current.clone()
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn stamp(cert_file: &Path, key_file: &Path) -> Stamp {
    let of = |path: &Path| {
        std::fs::metadata(path)
            .map(|m: Metadata| (m.modified().ok(), m.len()))
            .unwrap_or((None, 0))
    };
    [of(cert_file), of(key_file)]
}

/// Reads both files and checks the key belongs to the first certificate.
fn load_pair(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = read_chain(cert_file)?;
    let key = read_key(key_file)?;
    let mismatch = |reason: String| TlsError::Mismatch {
        cert: cert_file.to_path_buf(),
        key: key_file.to_path_buf(),
        reason,
    };
    let pair = CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => {
            mismatch("the private key does not belong to the first certificate".into())
        }
        other => mismatch(other.to_string()),
    })?;
    Ok(pair)
}

fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    let read_error = |source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let length = std::fs::metadata(path).map_err(read_error)?.len();
    if length > MAX_PEM_BYTES {
        return Err(invalid(
            path,
            format!("{length} bytes is not a PEM certificate or key (at most {MAX_PEM_BYTES})"),
        ));
    }
    std::fs::read(path).map_err(read_error)
}

fn invalid(path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_pem(path)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(path, format!("not valid PEM: {e}")))?;
    if chain.is_empty() {
        return Err(invalid(
            path,
            "no certificate in it (tls_cert_file wants PEM `-----BEGIN CERTIFICATE-----` blocks, the server's first)",
        ));
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_pem(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => invalid(
            path,
            "no private key in it (tls_key_file wants a PEM `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` block)",
        ),
        other => invalid(path, format!("not a valid PEM private key: {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pair {
        dir: tempfile::TempDir,
        cert: PathBuf,
        key: PathBuf,
    }

    fn write_pair(names: &[&str]) -> Pair {
        let dir = tempfile::tempdir().unwrap();
        let generated = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, generated.cert.pem()).unwrap();
        std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
        Pair { dir, cert, key }
    }

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn load(pair: &Pair) -> Result<ReloadingCertificate, TlsError> {
        ReloadingCertificate::load(pair.cert.clone(), pair.key.clone(), provider())
    }

    #[test]
    fn a_matching_pair_loads() {
        let pair = write_pair(&["localhost"]);
        let loaded = load(&pair).unwrap();
        assert_eq!(loaded.current().cert.len(), 1);
        assert!(loaded.describe().contains("1 certificate in the chain"));
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let pair = write_pair(&["localhost"]);
        let other = write_pair(&["localhost"]);
        std::fs::copy(&other.key, &pair.key).unwrap();
        let error = load(&pair).unwrap_err().to_string();
        assert!(
            error.contains("does not belong to the first certificate"),
            "{error}"
        );
    }

    #[test]
    fn missing_empty_swapped_and_huge_files_say_what_is_wrong() {
        let pair = write_pair(&["localhost"]);
        let missing = pair.dir.path().join("nope.pem");
        let error = ReloadingCertificate::load(missing.clone(), pair.key.clone(), provider())
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!("cannot read {}", missing.display())),
            "{error}"
        );

        let empty = pair.dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let error = ReloadingCertificate::load(empty.clone(), pair.key.clone(), provider())
            .unwrap_err()
            .to_string();
        assert!(error.contains("no certificate in it"), "{error}");
        let error = ReloadingCertificate::load(pair.cert.clone(), empty, provider())
            .unwrap_err()
            .to_string();
        assert!(error.contains("no private key in it"), "{error}");

        // the two settings swapped
        let error = ReloadingCertificate::load(pair.key.clone(), pair.cert.clone(), provider())
            .unwrap_err()
            .to_string();
        assert!(error.contains("no certificate in it"), "{error}");

        let huge = pair.dir.path().join("huge.pem");
        std::fs::write(&huge, vec![b'A'; (MAX_PEM_BYTES + 1) as usize]).unwrap();
        let error = ReloadingCertificate::load(huge, pair.key.clone(), provider())
            .unwrap_err()
            .to_string();
        assert!(error.contains("is not a PEM certificate or key"), "{error}");

        let garbage = pair.dir.path().join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let error = ReloadingCertificate::load(garbage, pair.key.clone(), provider())
            .unwrap_err()
            .to_string();
        assert!(error.contains("not valid PEM"), "{error}");
    }

    fn force_check(loaded: &ReloadingCertificate) {
        loaded.state.lock().checked_at = Instant::now() - RELOAD_CHECK_INTERVAL;
    }

    #[test]
    fn a_renewed_pair_is_picked_up_and_a_broken_renewal_keeps_the_old_one() {
        let pair = write_pair(&["localhost"]);
        let loaded = load(&pair).unwrap();
        let first = loaded.current();

        // unchanged files: the same pair, even after the interval
        force_check(&loaded);
        assert!(Arc::ptr_eq(&first, &loaded.current()));

        // a renewal
        let renewed = write_pair(&["localhost", "quiver.example"]);
        std::fs::copy(&renewed.cert, &pair.cert).unwrap();
        std::fs::copy(&renewed.key, &pair.key).unwrap();
        // not before the interval has passed
        assert!(Arc::ptr_eq(&first, &loaded.current()));
        force_check(&loaded);
        let second = loaded.current();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(
            second.cert[0],
            CertificateDer::from_pem_file(&renewed.cert).unwrap()
        );

        // half a renewal (the certificate without its key) keeps the working pair
        let third = write_pair(&["localhost"]);
        std::fs::copy(&third.cert, &pair.cert).unwrap();
        force_check(&loaded);
        assert!(Arc::ptr_eq(&second, &loaded.current()));
        // and once the key arrives too, the new pair is served
        std::fs::copy(&third.key, &pair.key).unwrap();
        force_check(&loaded);
        assert!(!Arc::ptr_eq(&second, &loaded.current()));
    }
}
