//! Connection startup: protocol negotiation, authentication, the database check, the process
//! id and secret key a client needs to cancel its queries, and the parameters PostgreSQL
//! reports.
//!
//! Authentication (see `quiver_auth::Authenticator::pg_login`): the user name is a token's
//! name and the password its secret, checked with SCRAM-SHA-256 (`quiver_auth::scram`,
//! against the StoredKey and ServerKey the token file keeps: the secret never crosses the
//! wire, and the file cannot be used to log in). A loopback
//! client in the default `loopback` mode whose user name is not a token's logs in without a
//! password (as the local caller); in the `disabled` mode everyone does. A wrong password,
//! or an unknown user where a password is needed, is `28P01` after the whole exchange (an
//! unknown user runs against a verifier nobody passes, so names cannot be probed); failed
//! logins count against the client address's limit. A database that does not exist is
//! refused after authentication with `3D000`, as PostgreSQL does.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    StartupHandler,
};
use pgwire::api::{
    ClientInfo, PgWireConnectionState, PidSecretKeyGenerator, RandomPidSecretKeyGenerator,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::startup::{Authentication, PasswordMessageFamily};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use quiver_auth::scram::{self, AwaitingFinal, ScramError};
use quiver_auth::{Action, AuthError, Authenticator, Caller, PgLogin, ScramVerifier};
use quiver_storage::Store;

use super::cancel::CancelRegistry;
use super::errors::{auth_fatal, fatal, sqlstate};
use super::settings::{database_of, user_of, QuiverParameters};

/// The SASL mechanism offered.
const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

/// A login waiting for the client's SCRAM messages.
struct PendingLogin {
    /// The token whose name the client gave (`None`: no such token; the exchange fails).
    caller: Option<Caller>,
    state: parking_lot::Mutex<LoginState>,
}

/// Where a SCRAM exchange is.
enum LoginState {
    /// The client's first message is next, to be checked against this verifier.
    AwaitingFirst(ScramVerifier),
    /// The client's final message is next.
    AwaitingFinal(Box<AwaitingFinal>),
    /// Over (or failed).
    Done,
}

/// Admits authenticated connections to existing databases.
pub(super) struct Startup {
    store: Arc<Store>,
    auth: Arc<Authenticator>,
    cancels: Arc<CancelRegistry>,
    keys: RandomPidSecretKeyGenerator,
}

impl Startup {
    pub(super) fn new(
        store: Arc<Store>,
        auth: Arc<Authenticator>,
        cancels: Arc<CancelRegistry>,
    ) -> Self {
        Startup {
            store,
            auth,
            cancels,
            keys: RandomPidSecretKeyGenerator::default(),
        }
    }

    /// Fails with `3D000` unless `database` exists; the message lists the ones the caller
    /// may see.
    fn check_database(&self, database: &str, caller: &Caller) -> PgWireResult<()> {
        // a database the caller may not read is refused the same way whether it exists or
        // not: names cannot be probed by logging in
        caller
            .require(Action::Read, database)
            .map_err(|e| auth_fatal(&e))?;
        if self.store.database(database).is_some() {
            return Ok(());
        }
        let visible = caller.visible_databases();
        let mut known = self.store.database_names();
        known.retain(|name| visible.shows(name));
        known.sort();
        let hint = if known.is_empty() {
            "there are none yet: a database is created by its first write".to_string()
        } else {
            format!("databases: {}", known.join(", "))
        };
        Err(fatal(
            sqlstate::INVALID_CATALOG_NAME,
            format!("database \"{database}\" does not exist ({hint})"),
        ))
    }

    /// Admits `caller`: the database check, the cancel key, the session's caller, the
    /// parameters.
    async fn admit<C>(&self, client: &mut C, caller: Caller) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let database = database_of(client);
        self.check_database(&database, &caller)?;
        let (pid, secret) = self.keys.generate(client);
        client.set_pid_and_secret_key(pid, secret.clone());
        let registration = self.cancels.register(pid, &secret);
        client.session_extensions().insert(registration);
        tracing::debug!(database, pid, caller = caller.name(), addr = %client.socket_addr(), "PostgreSQL session");
        client.session_extensions().insert(caller);
        finish_authentication(client, &QuiverParameters).await
    }

    /// One SCRAM message of a pending login; admits the client once the exchange succeeds.
    async fn continue_login<C>(
        &self,
        client: &mut C,
        pending: &PendingLogin,
        message: PasswordMessageFamily,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // a login started before its address was blocked does not get to guess
        self.auth
            .check_not_blocked(client.socket_addr().ip())
            .map_err(|e| auth_fatal(&e))?;
        let state = std::mem::replace(&mut *pending.state.lock(), LoginState::Done);
        match state {
            LoginState::AwaitingFirst(verifier) => {
                let initial = message.into_sasl_initial_response()?;
                if initial.auth_method != SCRAM_SHA_256 {
                    return Err(PgWireError::UnsupportedSASLAuthMethod(initial.auth_method));
                }
                let data = initial.data.unwrap_or_default();
                let (first, awaiting) =
                    scram::server_first(verifier, &data, &scram::server_nonce())
                        .map_err(scram_error)?;
                *pending.state.lock() = LoginState::AwaitingFinal(Box::new(awaiting));
                client
                    .send(PgWireBackendMessage::Authentication(
                        Authentication::SASLContinue(first.into_bytes().into()),
                    ))
                    .await?;
                Ok(())
            }
            LoginState::AwaitingFinal(awaiting) => {
                let response = message.into_sasl_response()?;
                let last = match awaiting.finish(&response.data) {
                    Ok(last) => last,
                    Err(ScramError::WrongProof) => {
                        return Err(self.login_failed(client, AuthError::InvalidToken))
                    }
                    Err(e) => return Err(scram_error(e)),
                };
                match &pending.caller {
                    Some(caller) if !caller.is_revoked() => {
                        client
                            .send(PgWireBackendMessage::Authentication(
                                Authentication::SASLFinal(last.into_bytes().into()),
                            ))
                            .await?;
                        self.admit(client, caller.clone()).await
                    }
                    _ => Err(self.login_failed(client, AuthError::InvalidToken)),
                }
            }
            LoginState::Done => Err(PgWireError::InvalidSASLState),
        }
    }

    /// The error for a failed login (counted against the client's address).
    fn login_failed<C: ClientInfo>(&self, client: &C, error: AuthError) -> PgWireError {
        let error = self.auth.failed(client.socket_addr().ip(), error);
        match error {
            AuthError::InvalidToken => fatal(
                sqlstate::INVALID_PASSWORD,
                format!(
                    "password authentication failed for user \"{}\" (the user is a token's name, the password its secret)",
                    user_of(client)
                ),
            ),
            other => auth_fatal(&other),
        }
    }
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                let login = self
                    .auth
                    .pg_login(&user_of(client), client.socket_addr().ip())
                    .map_err(|e| auth_fatal(&e))?;
                match login {
                    PgLogin::Trusted(caller) => self.admit(client, caller).await,
                    PgLogin::Scram(verifier, caller) => {
                        client.session_extensions().insert(PendingLogin {
                            caller,
                            state: parking_lot::Mutex::new(LoginState::AwaitingFirst(verifier)),
                        });
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        client
                            .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                                vec![SCRAM_SHA_256.to_string()],
                            )))
                            .await?;
                        Ok(())
                    }
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                let pending = client
                    .session_extensions()
                    .get::<PendingLogin>()
                    .ok_or(PgWireError::InvalidSASLState)?;
                self.continue_login(client, &pending, message).await
            }
            _ => Ok(()),
        }
    }
}

/// A malformed SCRAM message: a protocol violation (`08P01`), fatal.
fn scram_error(e: ScramError) -> PgWireError {
    PgWireError::InvalidScramMessage(e.to_string())
}
