//! `quiver-auth` decides who a request acts for and what it may do, for every protocol alike.
//!
//! - Tokens ([`TokenStore`]): created offline (`quiver token create --admin`) or by an admin
//!   through the API, listed without their secrets, revoked at once (also for the PostgreSQL
//!   sessions and Flight SQL handles they opened). Only digests are stored ([`secret`]).
//! - Grants ([`Permission`]): `db:<name|*>:read|write`, or admin. A [`Principal`] answers the
//!   checks the protocols ask (read every table a statement touches, write a database, admin
//!   operations) and names the result-cache scope and the databases the catalog shows.
//! - Modes ([`AuthMode`]): `loopback` (the default: token-less requests only from loopback
//!   clients), `required`, `disabled`. [`check_startup`] refuses a non-loopback bind with no
//!   token.
//! - PostgreSQL logins ([`scram`]): SCRAM-SHA-256 against StoredKey and ServerKey.
//! - Limits ([`Authenticator`]): per token, requests and written bytes per second; per client
//!   address, failed authentications per minute.
//!
//! The protocol crates only extract credentials ([`Presented`]) and map [`AuthError`]s by
//! their [`quiver_model::ErrorKind`].

mod limits;
mod permission;
mod principal;
pub mod scram;
pub mod secret;
mod store;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use quiver_model::{Classify, ErrorKind};
use serde::{Deserialize, Serialize};

pub use permission::{Action, DatabasePattern, Permission};
pub use principal::{Caller, Principal};
pub use secret::ScramVerifier;
pub use store::{CreatedToken, TokenError, TokenInfo, TokenStore, REFRESH_INTERVAL, TOKEN_FILE};

use limits::{FailedLogins, KeyedRate};
use secret::MAX_CREDENTIAL_BYTES;

/// Who may connect without a token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Token-less requests only from loopback clients (everything else needs a token); a
    /// non-loopback bind with no token configured refuses to start.
    #[default]
    Loopback,
    /// Every request needs a token.
    Required,
    /// No request needs a token and tokens are not checked: for a trusted network only.
    Disabled,
}

impl AuthMode {
    /// The mode's name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::Loopback => "loopback",
            AuthMode::Required => "required",
            AuthMode::Disabled => "disabled",
        }
    }
}

/// Authentication and rate-limit settings (flat configuration keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuthSettings {
    /// Who may connect without a token: `loopback`, `required` or `disabled`.
    pub auth: AuthMode,
    /// Requests per second one token may make (0: no limit).
    pub rate_limit_requests_per_sec: u64,
    /// Bytes per second one token may write (0: no limit).
    pub rate_limit_write_bytes_per_sec: u64,
    /// Failed authentications per minute one client address may make before it is refused
    /// for a while (0: no limit).
    pub max_failed_auth_per_minute: u32,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            auth: AuthMode::Loopback,
            rate_limit_requests_per_sec: 0,
            rate_limit_write_bytes_per_sec: 0,
            max_failed_auth_per_minute: 30,
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    /// No credential where one is needed.
    #[error("a token is required ({0}); create one with `quiver token create` or ask an admin")]
    Missing(&'static str),
    /// The credential is not a token this server knows (or it was revoked).
    #[error("invalid token (unknown or revoked)")]
    InvalidToken,
    /// The credential is not in a form the protocol accepts.
    #[error("malformed credentials: {0}")]
    Malformed(String),
    /// The token was revoked while the session or handle was open.
    #[error("token {0:?} was revoked")]
    Revoked(String),
    /// The token does not grant what the request does.
    #[error("permission denied: token {token:?} lacks {needed}")]
    Forbidden {
        /// The token's name.
        token: String,
        /// What was needed (a permission, or an admin token).
        needed: String,
    },
    /// Too many failed authentications from the client's address.
    #[error("too many failed authentications from this address: retry in {} s", retry_secs(*.0))]
    TooManyFailures(Duration),
    /// One write is larger than the write rate allows in a second.
    #[error("a write of {bytes} bytes is more than rate_limit_write_bytes_per_sec = {limit} allows: send it in smaller parts")]
    WriteTooLarge {
        /// The write's bytes.
        bytes: u64,
        /// `rate_limit_write_bytes_per_sec`.
        limit: u64,
    },
    /// The token is over a rate limit.
    #[error("rate limit exceeded: {what} (retry in {} s)", retry_secs(*.retry_after))]
    RateLimited {
        /// Which limit, with its value and setting.
        what: String,
        /// How long until the request would pass.
        retry_after: Duration,
    },
}

impl AuthError {
    /// How long the caller should wait before retrying, for rate limits.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            AuthError::TooManyFailures(wait) => Some(*wait),
            AuthError::RateLimited { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}

/// Whole seconds to wait, at least 1 (what `Retry-After` carries).
pub fn retry_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

impl Classify for AuthError {
    fn kind(&self) -> ErrorKind {
        match self {
            AuthError::Missing(_)
            | AuthError::InvalidToken
            | AuthError::Malformed(_)
            | AuthError::Revoked(_) => ErrorKind::Unauthenticated,
            AuthError::Forbidden { .. } => ErrorKind::PermissionDenied,
            AuthError::WriteTooLarge { .. } => ErrorKind::TooLarge,
            AuthError::TooManyFailures(_) | AuthError::RateLimited { .. } => ErrorKind::RateLimited,
        }
    }
}

/// The credential a request presented, as its protocol carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presented<'a> {
    /// None.
    Nothing,
    /// A token secret.
    Token(&'a str),
}

/// The token an `Authorization` header value carries: `Bearer <t>`, `Token <t>` (InfluxDB's
/// spelling) or `Basic base64(user:<t>)` (the password is the token; InfluxDB 1 clients and
/// Flight SQL handshakes send it so). The scheme is case-insensitive. `None`: `Basic` with an
/// empty password, or `Bearer` / `Token` with nothing after it, which present no token (a
/// client that must send a user name but has no token; the InfluxDB 3 client libraries
/// configured with an empty token).
pub fn token_from_authorization(value: &[u8]) -> Result<Option<String>, AuthError> {
    if value.len() > MAX_CREDENTIAL_BYTES * 2 {
        return Err(AuthError::Malformed(format!(
            "the Authorization header is longer than {} bytes",
            MAX_CREDENTIAL_BYTES * 2
        )));
    }
    let value = std::str::from_utf8(value)
        .map_err(|_| AuthError::Malformed("the Authorization header is not UTF-8".into()))?
        .trim();
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let rest = rest.trim();
    let token = match scheme.to_ascii_lowercase().as_str() {
        "bearer" | "token" if rest.is_empty() => return Ok(None),
        "bearer" | "token" => rest.to_string(),
        "basic" => match basic_password(rest)? {
            password if password.is_empty() => return Ok(None),
            password => password,
        },
        _ => {
            return Err(AuthError::Malformed(
                "Authorization must be `Bearer <token>`, `Token <token>` or `Basic` with the token as the password".into(),
            ))
        }
    };
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(AuthError::Malformed(
            "the token is empty or holds spaces or control characters".into(),
        ));
    }
    Ok(Some(token))
}

/// The password of `Basic` credentials (`base64(user:password)`, padded or not).
fn basic_password(encoded: &str) -> Result<String, AuthError> {
    let decoded = STANDARD
        .decode(encoded)
        .or_else(|_| STANDARD_NO_PAD.decode(encoded))
        .map_err(|_| AuthError::Malformed("Basic credentials are not base64".into()))?;
    let decoded = String::from_utf8(decoded)
        .map_err(|_| AuthError::Malformed("Basic credentials are not UTF-8".into()))?;
    let (_, password) = decoded
        .split_once(':')
        .ok_or_else(|| AuthError::Malformed("Basic credentials are `user:token`".into()))?;
    Ok(password.to_string())
}

/// How a PostgreSQL client logs in.
#[derive(Debug)]
pub enum PgLogin {
    /// Without a password (the local caller).
    Trusted(Caller),
    /// With SCRAM-SHA-256 against this verifier; the principal when it succeeds (`None` for an
    /// unknown user: the exchange runs against a verifier nobody passes, and fails).
    Scram(ScramVerifier, Option<Caller>),
}

/// Checks credentials and limits for every protocol.
pub struct Authenticator {
    settings: AuthSettings,
    tokens: Arc<TokenStore>,
    local: Caller,
    failures: FailedLogins,
    requests: Option<KeyedRate<String>>,
    write_bytes: Option<KeyedRate<String>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Authenticator({:?}, {:?})",
            self.settings.auth, self.tokens
        )
    }
}

impl Authenticator {
    /// An authenticator with `settings` over `tokens`.
    pub fn new(settings: AuthSettings, tokens: Arc<TokenStore>) -> Self {
        Authenticator {
            failures: FailedLogins::per_minute(settings.max_failed_auth_per_minute),
            requests: KeyedRate::per_second(settings.rate_limit_requests_per_sec),
            write_bytes: KeyedRate::per_second(settings.rate_limit_write_bytes_per_sec),
            settings,
            tokens,
            local: Arc::new(Principal::local()),
        }
    }

    /// The token store (for the admin API).
    pub fn tokens(&self) -> &Arc<TokenStore> {
        &self.tokens
    }

    /// Who a request from `peer` presenting `presented` acts for.
    pub fn authenticate(
        &self,
        presented: Presented<'_>,
        peer: IpAddr,
    ) -> Result<Caller, AuthError> {
        if self.settings.auth == AuthMode::Disabled {
            return Ok(self.local.clone());
        }
        match presented {
            Presented::Nothing => self.tokenless(peer).inspect_err(|_| {
                metrics::counter!("quiver_auth_failures_total", "reason" => "missing").increment(1);
            }),
            Presented::Token(secret) => {
                if let Some(wait) = self.failures.blocked_for(peer) {
                    return Err(AuthError::TooManyFailures(wait));
                }
                match self.tokens.authenticate(secret) {
                    Some(caller) => Ok(caller),
                    None => Err(self.failed(peer, AuthError::InvalidToken)),
                }
            }
        }
    }

    /// Like [`Authenticator::authenticate`] for an `Authorization` header value (`None`:
    /// no header).
    pub fn authenticate_header(
        &self,
        authorization: Option<&[u8]>,
        peer: IpAddr,
    ) -> Result<Caller, AuthError> {
        match authorization {
            None => self.authenticate(Presented::Nothing, peer),
            Some(_) if self.settings.auth == AuthMode::Disabled => Ok(self.local.clone()),
            Some(value) => match token_from_authorization(value) {
                Ok(Some(token)) => self.authenticate(Presented::Token(&token), peer),
                Ok(None) => self.authenticate(Presented::Nothing, peer),
                Err(e) => Err(self.failed(peer, e)),
            },
        }
    }

    /// Counts a failed authentication from `peer` and returns the error to give (the limit's
    /// once the address is blocked).
    pub fn failed(&self, peer: IpAddr, error: AuthError) -> AuthError {
        let reason = match &error {
            AuthError::Missing(_) => "missing",
            AuthError::Malformed(_) => "malformed",
            _ => "invalid_token",
        };
        metrics::counter!("quiver_auth_failures_total", "reason" => reason).increment(1);
        match self.failures.record(peer) {
            Some(wait) => {
                metrics::counter!("quiver_rate_limited_total", "limit" => "failed_auth")
                    .increment(1);
                AuthError::TooManyFailures(wait)
            }
            None => error,
        }
    }

    /// Fails if `peer` is blocked for too many failed authentications (checked again before a
    /// PostgreSQL client's proof is verified: a login started before the block does not get
    /// to guess).
    pub fn check_not_blocked(&self, peer: IpAddr) -> Result<(), AuthError> {
        match self.failures.blocked_for(peer) {
            Some(wait) => Err(AuthError::TooManyFailures(wait)),
            None => Ok(()),
        }
    }

    /// Admits a Flight SQL handle's `caller` for a call from `peer`: a handle of the local
    /// caller works only where a token-less call from `peer` would.
    pub fn admit_handle(&self, caller: &Caller, peer: IpAddr) -> Result<(), AuthError> {
        if caller.is_local() {
            self.tokenless(peer)?;
        }
        Ok(())
    }

    /// How a PostgreSQL client named `user` connecting from `peer` logs in: loopback clients
    /// in the `loopback` mode (and everyone in the `disabled` mode) without a password unless
    /// `user` names a token; everyone else with SCRAM-SHA-256, the token's name as user and
    /// its secret as password.
    pub fn pg_login(&self, user: &str, peer: IpAddr) -> Result<PgLogin, AuthError> {
        if self.settings.auth == AuthMode::Disabled {
            return Ok(PgLogin::Trusted(self.local.clone()));
        }
        self.check_not_blocked(peer)?;
        match self.tokens.scram_login(user) {
            Some((verifier, caller)) => Ok(PgLogin::Scram(verifier, Some(caller))),
            None if self.settings.auth == AuthMode::Loopback && is_loopback(peer) => {
                Ok(PgLogin::Trusted(self.local.clone()))
            }
            None => Ok(PgLogin::Scram(ScramVerifier::impossible(user), None)),
        }
    }

    /// The local caller, or why a token-less request from `peer` is refused.
    fn tokenless(&self, peer: IpAddr) -> Result<Caller, AuthError> {
        match self.settings.auth {
            AuthMode::Disabled => Ok(self.local.clone()),
            AuthMode::Loopback if is_loopback(peer) => Ok(self.local.clone()),
            AuthMode::Loopback => Err(AuthError::Missing(
                "auth = loopback admits token-less requests from this machine only",
            )),
            AuthMode::Required => Err(AuthError::Missing("auth = required")),
        }
    }

    /// Admits one request of `caller`: its token is still valid (a token revoked by another
    /// process is seen within [`store::REFRESH_INTERVAL`]) and within its request rate.
    pub fn admit_request(&self, caller: &Principal) -> Result<(), AuthError> {
        if !caller.is_local() {
            self.tokens.refresh();
        }
        caller.require_active()?;
        let Some(requests) = &self.requests else {
            return Ok(());
        };
        requests
            .take(&caller.rate_key(), 1)
            .inspect_err(|_| {
                metrics::counter!("quiver_rate_limited_total", "limit" => "requests").increment(1);
            })
            .map_err(|retry_after| AuthError::RateLimited {
                what: format!(
                    "token {:?} may make {} requests per second (rate_limit_requests_per_sec)",
                    caller.name(),
                    self.settings.rate_limit_requests_per_sec
                ),
                retry_after,
            })
    }

    /// Counts `bytes` written (as received: compressed, if the request is) against
    /// `caller`'s write rate limit. A write larger than one second's allowance never fits:
    /// refused as too large, so that it cannot take more than its share by arriving whole.
    pub fn admit_write(&self, caller: &Principal, bytes: u64) -> Result<(), AuthError> {
        metrics::counter!("quiver_ingest_bytes_total").increment(bytes);
        let Some(write_bytes) = &self.write_bytes else {
            return Ok(());
        };
        let limit = self.settings.rate_limit_write_bytes_per_sec;
        if bytes > limit {
            return Err(AuthError::WriteTooLarge { bytes, limit });
        }
        write_bytes
            .take(&caller.rate_key(), bytes)
            .inspect_err(|_| {
                metrics::counter!("quiver_rate_limited_total", "limit" => "write_bytes")
                    .increment(1);
            })
            .map_err(|retry_after| AuthError::RateLimited {
                what: format!(
                    "token {:?} may write {} bytes per second (rate_limit_write_bytes_per_sec)",
                    caller.name(),
                    self.settings.rate_limit_write_bytes_per_sec
                ),
                retry_after,
            })
    }
}

/// True for loopback addresses, IPv4-mapped ones included (`::ffff:127.0.0.1`: a local IPv4
/// client of a dual-stack `[::]` listener).
pub fn is_loopback(peer: IpAddr) -> bool {
    peer.to_canonical().is_loopback()
}

/// Refuses to start a server that would accept token-less requests from the network with no
/// way to authenticate: `auth = loopback` with a non-loopback bind and no token, or
/// `auth = required` with no token. The message says how to create one.
pub fn check_startup(
    mode: AuthMode,
    binds: &[SocketAddr],
    tokens: &TokenStore,
    data_dir: &std::path::Path,
) -> Result<(), String> {
    if mode == AuthMode::Disabled || tokens.has_tokens() {
        return Ok(());
    }
    let create = format!(
        "create an admin token first: `quiver token create --admin --data-dir {}` (it prints the token once), then start the server again",
        data_dir.display()
    );
    match mode {
        AuthMode::Required => Err(format!("auth = required but no token exists: {create}")),
        AuthMode::Loopback => match binds.iter().find(|addr| !addr.ip().is_loopback()) {
            Some(exposed) => Err(format!(
                "{exposed} is reachable from the network and no token exists: {create}; or set auth = \"disabled\" to serve without authentication (only on a trusted network)"
            )),
            None => Ok(()),
        },
        AuthMode::Disabled => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator(mode: AuthMode) -> (tempfile::TempDir, Authenticator, String) {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Arc::new(TokenStore::open(dir.path()).unwrap());
        let secret = tokens
            .create("reader", false, &["db:a:read".parse().unwrap()])
            .unwrap()
            .secret;
        let settings = AuthSettings {
            auth: mode,
            max_failed_auth_per_minute: 5,
            ..AuthSettings::default()
        };
        (dir, Authenticator::new(settings, tokens), secret)
    }

    const LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    const REMOTE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7));

    #[test]
    fn modes_decide_who_needs_a_token() {
        let (_d, loopback, secret) = authenticator(AuthMode::Loopback);
        assert!(loopback
            .authenticate(Presented::Nothing, LOOPBACK)
            .unwrap()
            .is_admin());
        assert!(matches!(
            loopback.authenticate(Presented::Nothing, REMOTE),
            Err(AuthError::Missing(_))
        ));
        let caller = loopback
            .authenticate(Presented::Token(&secret), REMOTE)
            .unwrap();
        assert_eq!(caller.name(), "reader");
        assert!(matches!(
            loopback.authenticate(Presented::Token("qv_wrong"), LOOPBACK),
            Err(AuthError::InvalidToken)
        ));
        let (_d, required, _) = authenticator(AuthMode::Required);
        assert!(required.authenticate(Presented::Nothing, LOOPBACK).is_err());
        let (_d, disabled, _) = authenticator(AuthMode::Disabled);
        assert!(disabled
            .authenticate(Presented::Token("junk"), REMOTE)
            .unwrap()
            .is_admin());
    }

    #[test]
    fn authorization_headers_in_every_spelling() {
        let token = |value: &str| token_from_authorization(value.as_bytes()).unwrap();
        assert_eq!(token("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(token("token  abc ").as_deref(), Some("abc"));
        // Basic, padded or not; an empty password presents no token
        let padded = STANDARD.encode("user:ab");
        assert!(padded.ends_with('='));
        assert_eq!(token(&format!("Basic {padded}")).as_deref(), Some("ab"));
        assert_eq!(
            token(&format!("basic {}", padded.trim_end_matches('='))).as_deref(),
            Some("ab")
        );
        assert_eq!(token(&format!("Basic {}", STANDARD.encode("user:"))), None);
        // so does a scheme without a token (the InfluxDB 3 clients' empty token)
        assert_eq!(token("Token "), None);
        assert_eq!(token("Bearer"), None);
        for bad in [
            &b"Bearer a b"[..],
            b"Digest x",
            b"Basic !!!",
            b"Basic YWJj", // "abc": no `user:` part
            b"\xff\xfe",
            b"Bearer \x01",
        ] {
            assert!(
                matches!(token_from_authorization(bad), Err(AuthError::Malformed(_))),
                "{bad:?}"
            );
        }
        let huge = format!("Bearer {}", "a".repeat(10_000));
        assert!(token_from_authorization(huge.as_bytes()).is_err());
    }

    #[test]
    fn guessing_is_limited_per_address_even_for_a_right_guess() {
        let (_d, auth, secret) = authenticator(AuthMode::Required);
        for _ in 0..5 {
            assert!(matches!(
                auth.authenticate(Presented::Token("qv_guess"), REMOTE),
                Err(AuthError::InvalidToken)
            ));
        }
        let limited = auth
            .authenticate(Presented::Token("qv_guess"), REMOTE)
            .unwrap_err();
        assert!(matches!(limited, AuthError::TooManyFailures(_)));
        assert_eq!(limited.kind(), ErrorKind::RateLimited);
        assert!(matches!(
            auth.authenticate(Presented::Token(&secret), REMOTE),
            Err(AuthError::TooManyFailures(_))
        ));
        assert!(
            auth.authenticate(Presented::Token(&secret), LOOPBACK)
                .is_ok(),
            "other addresses are not blocked"
        );
    }

    #[test]
    fn postgres_logins() {
        let (_d, auth, _) = authenticator(AuthMode::Loopback);
        assert!(matches!(
            auth.pg_login("postgres", LOOPBACK),
            Ok(PgLogin::Trusted(_))
        ));
        assert!(matches!(
            auth.pg_login("reader", LOOPBACK),
            Ok(PgLogin::Scram(_, Some(_)))
        ));
        assert!(matches!(
            auth.pg_login("postgres", REMOTE),
            Ok(PgLogin::Scram(_, None))
        ));
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert!(matches!(
            auth.pg_login("postgres", mapped),
            Ok(PgLogin::Trusted(_))
        ));
        // an unknown user's salt is the same every time, as a real token's is
        let salt = |user: &str| match auth.pg_login(user, REMOTE) {
            Ok(PgLogin::Scram(verifier, _)) => verifier.salt,
            other => panic!("{other:?}"),
        };
        assert_eq!(salt("nobody"), salt("nobody"));
        assert_ne!(salt("nobody"), salt("somebody"));
        // and looks like a real token's (same length), so its shape gives nothing away
        let decoded = |salt: String| STANDARD.decode(salt).unwrap().len();
        assert_eq!(decoded(salt("nobody")), decoded(salt("reader")));
    }

    #[test]
    fn rate_limits_name_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Arc::new(TokenStore::open(dir.path()).unwrap());
        let settings = AuthSettings {
            rate_limit_requests_per_sec: 2,
            rate_limit_write_bytes_per_sec: 100,
            ..AuthSettings::default()
        };
        let auth = Authenticator::new(settings, tokens);
        let caller = Principal::token("t", true, &[]);
        auth.admit_request(&caller).unwrap();
        auth.admit_request(&caller).unwrap();
        let error = auth.admit_request(&caller).unwrap_err();
        assert!(
            error.to_string().contains("rate_limit_requests_per_sec"),
            "{error}"
        );
        assert!(error.retry_after().is_some());
        auth.admit_write(&caller, 100).unwrap();
        assert!(auth
            .admit_write(&caller, 1)
            .unwrap_err()
            .to_string()
            .contains("rate_limit_write_bytes_per_sec"));
        let too_large = auth.admit_write(&caller, 101).unwrap_err();
        assert_eq!(too_large.kind(), ErrorKind::TooLarge, "{too_large}");
    }

    #[test]
    fn exposed_servers_need_a_token_to_start() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = TokenStore::open(dir.path()).unwrap();
        let local: SocketAddr = "127.0.0.1:8086".parse().unwrap();
        let exposed: SocketAddr = "0.0.0.0:8086".parse().unwrap();
        assert!(check_startup(AuthMode::Loopback, &[local], &tokens, dir.path()).is_ok());
        let refused =
            check_startup(AuthMode::Loopback, &[local, exposed], &tokens, dir.path()).unwrap_err();
        assert!(refused.contains("quiver token create --admin"), "{refused}");
        assert!(check_startup(AuthMode::Required, &[local], &tokens, dir.path()).is_err());
        assert!(check_startup(AuthMode::Disabled, &[exposed], &tokens, dir.path()).is_ok());
        tokens.create("root", true, &[]).unwrap();
        assert!(check_startup(AuthMode::Loopback, &[exposed], &tokens, dir.path()).is_ok());
    }
}
