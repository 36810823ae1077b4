//! The certificate and key a server presents, loaded from PEM files and re-read when the files
//! change (see the crate documentation).
//!
//! Handshakes only read the pair in use ([`ReloadingCertificate::resolve`] clones a pointer).
//! Looking at the files is [`ReloadingCertificate::check_for_renewal`]'s job, which a
//! background task runs on a blocking thread every [`RELOAD_CHECK_INTERVAL`]: it reads both
//! files (a few kilobytes) and loads them only when their bytes differ from the last ones seen,
//! so a rewrite is noticed whatever happens to the files' times and sizes.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::{TlsError, RELOAD_CHECK_INTERVAL};

/// Larger certificate or key files are refused: a PEM chain is a few kilobytes.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// The certificate in use, and the files it came from.
#[derive(Debug)]
pub(crate) struct ReloadingCertificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The files' contents when `current` was loaded, or when a reload last failed (so a bad
    /// renewal is reported once, not at every check).
    seen: Mutex<[Vec<u8>; 2]>,
}

impl ReloadingCertificate {
    /// Loads the pair, or says why it cannot serve.
    pub(crate) fn load(
        cert_file: PathBuf,
        key_file: PathBuf,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let files = [read_pem(&cert_file)?, read_pem(&key_file)?];
        let current = Arc::new(load_pair(&cert_file, &key_file, &files, &provider)?);
        Ok(ReloadingCertificate {
            cert_file,
            key_file,
            provider,
            current: RwLock::new(current),
            seen: Mutex::new(files),
        })
    }

    /// A line for the start-up log.
    pub(crate) fn describe(&self) -> String {
        let chain = self.current.read().cert.len();
        format!(
            "{} ({chain} certificate{} in the chain), key {}",
            self.cert_file.display(),
            if chain == 1 { "" } else { "s" },
            self.key_file.display()
        )
    }

    /// The pair handshakes present now.
    fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().clone()
    }

    /// Re-reads both files and, if either changed since the last look, serves the new pair
    /// from now on; a pair that does not load keeps the one in use (logged once per change).
    /// Blocking file I/O: run it off the async workers.
    pub(crate) fn check_for_renewal(&self) {
        let files = match (read_pem(&self.cert_file), read_pem(&self.key_file)) {
            (Ok(cert), Ok(key)) => [cert, key],
            // mid-rename or gone for a moment: the next look decides
            _ => return,
        };
        let mut seen = self.seen.lock();
        if *seen == files {
            return;
        }
        match load_pair(&self.cert_file, &self.key_file, &files, &self.provider) {
            Ok(renewed) => {
                *self.current.write() = Arc::new(renewed);
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
        *seen = files;
    }

    /// Checks for a renewal every [`RELOAD_CHECK_INTERVAL`] on the current tokio runtime,
    /// until the certificate is no longer used.
    pub(crate) fn watch(self: &Arc<Self>) {
        let certificate: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(RELOAD_CHECK_INTERVAL);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await; // the first tick is immediate: just loaded
            loop {
                interval.tick().await;
                let Some(certificate) = certificate.upgrade() else {
                    return;
                };
                let checked =
                    tokio::task::spawn_blocking(move || certificate.check_for_renewal()).await;
                if checked.is_err() {
                    return; // the runtime is shutting down
                }
            }
        });
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Parses the two files' contents and checks the key belongs to the first certificate.
fn load_pair(
    cert_file: &Path,
    key_file: &Path,
    [cert, key]: &[Vec<u8>; 2],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = parse_chain(cert_file, cert)?;
    let key = parse_key(key_file, key)?;
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

/// A regular file's bytes, at most [`MAX_PEM_BYTES`] of them.
fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    let read_error = |source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    if !file.metadata().map_err(read_error)?.is_file() {
        return Err(invalid(path, "not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(invalid(
            path,
            format!("over {MAX_PEM_BYTES} bytes is not a PEM certificate or key"),
        ));
    }
    Ok(bytes)
}

fn invalid(path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn parse_chain(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(pem)
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

fn parse_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
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

    #[test]
    fn a_renewed_pair_is_picked_up_and_a_broken_renewal_keeps_the_old_one() {
        let pair = write_pair(&["localhost"]);
        let loaded = load(&pair).unwrap();
        let first = loaded.current();

        // unchanged files: the same pair
        loaded.check_for_renewal();
        assert!(Arc::ptr_eq(&first, &loaded.current()));

        // a renewal
        let renewed = write_pair(&["localhost", "quiver.example"]);
        std::fs::copy(&renewed.cert, &pair.cert).unwrap();
        std::fs::copy(&renewed.key, &pair.key).unwrap();
        loaded.check_for_renewal();
        let second = loaded.current();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(
            second.cert[0],
            CertificateDer::from_pem_file(&renewed.cert).unwrap()
        );

        // half a renewal (the certificate without its key) keeps the working pair
        let third = write_pair(&["localhost"]);
        std::fs::copy(&third.cert, &pair.cert).unwrap();
        loaded.check_for_renewal();
        assert!(Arc::ptr_eq(&second, &loaded.current()));
        // and once the key arrives too (same length, moments later), the new pair is served
        std::fs::copy(&third.key, &pair.key).unwrap();
        loaded.check_for_renewal();
        let fourth = loaded.current();
        assert!(!Arc::ptr_eq(&second, &fourth));
        assert_eq!(
            fourth.cert[0],
            CertificateDer::from_pem_file(&third.cert).unwrap()
        );

        // a file gone for a moment (mid-rename) changes nothing
        std::fs::remove_file(&pair.key).unwrap();
        loaded.check_for_renewal();
        assert!(Arc::ptr_eq(&fourth, &loaded.current()));
    }

    #[test]
    fn only_regular_files_are_read() {
        let pair = write_pair(&["localhost"]);
        let error =
            ReloadingCertificate::load(pair.dir.path().to_path_buf(), pair.key.clone(), provider())
                .unwrap_err()
                .to_string();
        assert!(error.contains("not a regular file"), "{error}");
    }
}
