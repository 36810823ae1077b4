//! Connection startup: protocol negotiation, authentication, the database check, the process
//! id and secret key a client needs to cancel its queries, and the parameters PostgreSQL
//! reports.
//!
//! Authentication (see `quiver_auth::Authenticator::pg_login`): the user name is a token's
//! name and the password its secret, checked with SCRAM-SHA-256 (pgwire's implementation,
//! against the verifier the token file keeps: the secret never crosses the wire). A loopback
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
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::sasl::{SASLState, SCRAM_SHA_256_METHOD};
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata, AuthSource,
    LoginInfo, Password, StartupHandler,
};
use pgwire::api::{
    ClientInfo, PgWireConnectionState, PidSecretKeyGenerator, RandomPidSecretKeyGenerator,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::startup::{Authentication, PasswordMessageFamily};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use quiver_auth::{AuthError, Authenticator, Caller, PgLogin, ScramVerifier};
use quiver_storage::Store;

use super::cancel::CancelRegistry;
use super::errors::{auth_fatal, fatal, sqlstate};
use super::settings::{database_of, user_of, QuiverParameters};

/// A login waiting for the client's SCRAM messages.
struct PendingLogin {
    /// The token whose name the client gave (`None`: no such token; the exchange fails).
    caller: Option<Caller>,
    state: parking_lot::Mutex<SASLState>,
}

/// Admits authenticated connections to existing databases.
pub(super) struct Startup {
    store: Arc<Store>,
    auth: Arc<Authenticator>,
    scram: ScramAuth,
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
            scram: ScramAuth::new(Arc::new(TokenVerifiers(auth.clone()))),
            store,
            auth,
            cancels,
            keys: RandomPidSecretKeyGenerator::default(),
        }
    }

    /// Fails with `3D000` unless `database` exists; the message lists the ones the caller
    /// may see.
    fn check_database(&self, database: &str, caller: &Caller) -> PgWireResult<()> {
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
        let state = std::mem::replace(&mut *pending.state.lock(), SASLState::Finished);
        let (message, state) = match state {
            SASLState::Initial => {
                let initial = message.into_sasl_initial_response()?;
                if initial.auth_method != SCRAM_SHA_256_METHOD {
                    return Err(PgWireError::UnsupportedSASLAuthMethod(initial.auth_method));
                }
                (
                    PasswordMessageFamily::SASLInitialResponse(initial),
                    SASLState::ScramClientFirstReceived,
                )
            }
            state => (
                PasswordMessageFamily::SASLResponse(message.into_sasl_response()?),
                state,
            ),
        };
        let (reply, next) = match self
            .scram
            .process_scram_message(client, message, &state)
            .await
        {
            Ok(step) => step,
            Err(PgWireError::InvalidPassword(_)) => {
                return Err(self.login_failed(client, AuthError::InvalidToken));
            }
            Err(e) => return Err(e),
        };
        client
            .send(PgWireBackendMessage::Authentication(reply))
            .await?;
        if !matches!(next, SASLState::Finished) {
            *pending.state.lock() = next;
            return Ok(());
        }
        match &pending.caller {
            Some(caller) if !caller.is_revoked() => self.admit(client, caller.clone()).await,
            _ => Err(self.login_failed(client, AuthError::InvalidToken)),
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
                    PgLogin::Scram(_, caller) => {
                        client.session_extensions().insert(PendingLogin {
                            caller,
                            state: parking_lot::Mutex::new(SASLState::Initial),
                        });
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        client
                            .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                                vec![SCRAM_SHA_256_METHOD.to_string()],
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

/// The SCRAM verifiers pgwire checks proofs against: the token's of that name, or one nobody
/// passes.
#[derive(Debug)]
struct TokenVerifiers(Arc<Authenticator>);

#[async_trait]
impl AuthSource for TokenVerifiers {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or_default();
        let verifier = self
            .0
            .tokens()
            .scram_login(user)
            .map_or_else(|| ScramVerifier::impossible(user), |(verifier, _)| verifier);
        Ok(Password::new(
            Some(verifier.salt_bytes()),
            verifier.salted_password_bytes(),
        ))
    }
}
