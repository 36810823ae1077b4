//! Connection startup: protocol negotiation, the database check, the process id and secret key
//! a client needs to cancel its queries, and the parameters PostgreSQL reports.
//!
//! Until tokens with scopes exist, every user is admitted without a password (the server binds
//! to loopback by default); the user name is the caller's result-cache scope. A database that
//! does not exist is refused at startup with `3D000`, as PostgreSQL does.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    StartupHandler,
};
use pgwire::api::{ClientInfo, PidSecretKeyGenerator, RandomPidSecretKeyGenerator};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use quiver_storage::Store;

use super::cancel::CancelRegistry;
use super::errors::{fatal, sqlstate};
use super::settings::{database_of, QuiverParameters};

/// Admits connections to existing databases.
pub(super) struct Startup {
    store: Arc<Store>,
    cancels: Arc<CancelRegistry>,
    keys: RandomPidSecretKeyGenerator,
}

impl Startup {
    pub(super) fn new(store: Arc<Store>, cancels: Arc<CancelRegistry>) -> Self {
        Startup {
            store,
            cancels,
            keys: RandomPidSecretKeyGenerator::default(),
        }
    }

    /// Fails with `3D000` unless `database` exists; the message lists the ones that do.
    fn check_database(&self, database: &str) -> PgWireResult<()> {
        if self.store.database(database).is_some() {
            return Ok(());
        }
        let mut known = self.store.database_names();
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
        let PgWireFrontendMessage::Startup(ref startup) = message else {
            return Ok(());
        };
        protocol_negotiation(client, startup).await?;
        save_startup_parameters_to_metadata(client, startup);
        let database = database_of(client);
        self.check_database(&database)?;
        let (pid, secret) = self.keys.generate(client);
        client.set_pid_and_secret_key(pid, secret.clone());
        let registration = self.cancels.register(pid, &secret);
        client.session_extensions().insert(registration);
        tracing::debug!(database, pid, addr = %client.socket_addr(), "PostgreSQL session");
        finish_authentication(client, &QuiverParameters).await
    }
}
