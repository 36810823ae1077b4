//! `quiver-tls` serves Quiver's three protocols over TLS (rustls, with the `ring` provider).
//!
//! - [`ServerTls`]: the certificate chain and private key of `tls_cert_file` / `tls_key_file`
//!   (PEM), checked to belong together at start-up. A running server re-reads both files every
//!   [`RELOAD_CHECK_INTERVAL`] in the background, so a renewed certificate takes effect
//!   without a restart; a renewal that does not load keeps the certificate in use and says why
//!   in the log.
//! - [`ServerTls::acceptor`]: a `tokio_rustls` acceptor for one [`Protocol`], which fixes the
//!   ALPN identifiers clients negotiate (`h2` or `http/1.1` on the HTTP port, `h2` for gRPC,
//!   `postgresql`).
//! - [`TlsIncoming`]: the encrypted connections of a TCP listener. Handshakes run apart from
//!   the accept loop, each bounded by [`HANDSHAKE_TIMEOUT`], so a client that connects and
//!   says nothing holds up no one. It is an `axum` listener (HTTP) and a stream of
//!   [`TlsConnection`]s that tonic serves (Flight SQL, with the client's address). PostgreSQL
//!   negotiates TLS inside its own protocol (`SSLRequest`), so its crate uses the acceptor.

mod certificate;
mod listener;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::ServerConfig;

pub use listener::{TlsConnection, TlsIncoming};
pub use tokio_rustls::{server::TlsStream, TlsAcceptor};

/// How often a running server looks whether the certificate or key file changed.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How long a client may take to finish its TLS handshake before it is disconnected.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file is not what its setting needs.
    #[error("{}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key does not belong to the certificate, or rustls refused the pair.
    #[error("{} and {} cannot serve TLS: {reason}", cert.display(), key.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why not.
        reason: String,
    },
}

/// The protocol a listener speaks inside TLS: it names the ALPN identifier negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 (the HTTP API) or HTTP/2 (the same, and gRPC on the HTTP port: what the
    /// InfluxDB 3 client libraries send to the host they write to).
    Http,
    /// HTTP/2 (gRPC: Arrow Flight SQL). gRPC clients require `h2` to be negotiated.
    Grpc,
    /// The PostgreSQL wire protocol (`postgresql`, as PostgreSQL 17 names it).
    Postgres,
}

impl Protocol {
    /// Counts a failed or timed-out handshake on this protocol
    /// (`quiver_tls_handshake_failures_total`).
    pub fn handshake_failed(self) {
        let protocol = match self {
            Protocol::Http => "http",
            Protocol::Grpc => "flight",
            Protocol::Postgres => "postgres",
        };
        metrics::counter!("quiver_tls_handshake_failures_total", "protocol" => protocol)
            .increment(1);
    }

    /// The ALPN identifiers offered, preferred first.
    fn alpn(self) -> &'static [&'static [u8]] {
        match self {
            Protocol::Http => &[b"h2", b"http/1.1"],
            Protocol::Grpc => &[b"h2"],
            Protocol::Postgres => &[b"postgresql"],
        }
    }
}

/// The server's TLS identity: its certificate chain and key, re-read when their files change.
#[derive(Debug, Clone)]
pub struct ServerTls {
    provider: Arc<CryptoProvider>,
    certificate: Arc<certificate::ReloadingCertificate>,
}

impl ServerTls {
    /// Loads the PEM certificate chain in `cert_file` (the server's certificate first, then
    /// any intermediates) and the PEM private key in `key_file` (PKCS #8, PKCS #1 or SEC1),
    /// and checks that the key belongs to the certificate. From then on a task on the current
    /// tokio runtime looks for renewals (see the crate documentation).
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certificate = certificate::ReloadingCertificate::load(
            cert_file.to_path_buf(),
            key_file.to_path_buf(),
            provider.clone(),
        )?;
        let certificate = Arc::new(certificate);
        certificate.watch();
        Ok(ServerTls {
            provider,
            certificate,
        })
    }

    /// The subject names the loaded certificate is valid for, for the start-up log.
    pub fn describe(&self) -> String {
        self.certificate.describe()
    }

    /// An acceptor for connections speaking `protocol`: TLS 1.2 and 1.3 with rustls' safe
    /// defaults, no client certificates.
    pub fn acceptor(&self, protocol: Protocol) -> TlsAcceptor {
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(self.certificate.clone());
        config.alpn_protocols = protocol.alpn().iter().map(|id| id.to_vec()).collect();
        TlsAcceptor::from(Arc::new(config))
    }
}
