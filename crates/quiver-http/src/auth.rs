//! Who an HTTP request acts for, and the token API.
//!
//! Every request but `/health` and `/ping` is authenticated first ([`authenticate`]): the
//! token comes from `Authorization: Bearer|Token <t>`, `Basic` (the token as password) or
//! InfluxDB 1's `?p=<t>`; a request without one is the local caller where the `auth` mode
//! admits it. The caller ([`Caller`]) is then in the request's extensions, and counted
//! against its rate limit. Admin routes also pass [`require_admin`]. A credential is never
//! logged or echoed: errors say what was wrong with it, not what it was.
//!
//! The token API (admin): `POST /api/v3/configure/token` `{"name", "permissions"}` answers
//! `{"name", "token"}` (the secret, shown once); `GET` lists names and permissions;
//! `DELETE ?name=` revokes.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use quiver_auth::{Action, Caller, Permission, Presented};
use serde::Deserialize;
use serde_json::{json, Value};

use super::blocking::off_the_workers;
use super::error::ApiError;
use super::AppState;
use crate::params::{check_params, required};

/// Authenticates a request and counts it against its token's rate limit (see the module
/// documentation).
pub(crate) async fn authenticate(
    State(app): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip());
    let caller = match request.headers().get(header::AUTHORIZATION) {
        Some(value) => app.auth.authenticate_header(Some(value.as_bytes()), peer)?,
        None => match v1_password(&request) {
            Some(token) => app.auth.authenticate(Presented::Token(&token), peer)?,
            None => app.auth.authenticate(Presented::Nothing, peer)?,
        },
    };
    app.auth.admit_request(&caller)?;
    request.extensions_mut().insert(caller);
    Ok(next.run(request).await)
}

/// InfluxDB 1's `?p=<token>` (with or without `u=`), if given and not empty.
fn v1_password(request: &Request) -> Option<String> {
    request.uri().query()?;
    let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(request.uri()).ok()?;
    pairs
        .into_iter()
        .find(|(key, _)| key == "p")
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// Lets only admins through (after [`authenticate`]).
pub(crate) async fn require_admin(
    Extension(caller): Extension<Caller>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    Ok(next.run(request).await)
}

/// Fails unless `caller` may write `database`; checked before the body is read.
pub(crate) fn require_write(caller: &Caller, database: &str) -> Result<(), ApiError> {
    Ok(caller.require(Action::Write, database)?)
}

/// Counts `bytes` of a write against the caller's write rate.
pub(crate) fn admit_write_bytes(
    app: &AppState,
    caller: &Caller,
    bytes: usize,
) -> Result<(), ApiError> {
    Ok(app.auth.admit_write(caller, bytes as u64)?)
}

/// The body of `POST /api/v3/configure/token`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenRequest {
    name: String,
    #[serde(default)]
    permissions: Vec<String>,
    /// An admin token instead of scoped permissions.
    #[serde(default)]
    admin: bool,
}

/// `POST /api/v3/configure/token` `{"name", "permissions": ["db:<name|*>:read|write", ...]}`
/// (or `"admin": true`): `201` with `{"name", "token", "permissions"}`.
pub async fn create_token(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: TokenRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "body must be JSON like {{\"name\": \"dashboards\", \"permissions\": [\"db:metrics:read\"]}}: {e}"
        ))
    })?;
    let permissions = request
        .permissions
        .iter()
        .map(|p| p.parse::<Permission>().map_err(ApiError::bad_request))
        .collect::<Result<Vec<_>, _>>()?;
    if request.admin && !permissions.is_empty() {
        return Err(ApiError::bad_request(
            "an admin token may do everything: give \"admin\": true or permissions, not both",
        ));
    }
    tokens_are_kept_here(&app)?;
    let tokens = app.auth.tokens().clone();
    let name = request.name.clone();
    let created = off_the_workers("token creation", move || {
        Ok(tokens.create(&request.name, request.admin, &permissions)?)
    })
    .await?;
    tracing::info!(token = %name, by = %caller.name(), admin = created.info.admin, permissions = ?created.info.permissions, "token created");
    Ok((
        StatusCode::CREATED,
        [(header::CACHE_CONTROL, "no-store")],
        Json(json!({
            "name": created.info.name,
            "token": created.secret,
            "admin": created.info.admin,
            "permissions": created.info.permissions,
        })),
    )
        .into_response())
}

/// Fails on a query node: its tokens are the writer's, taken over every second.
fn tokens_are_kept_here(app: &AppState) -> Result<(), ApiError> {
    match app.store.access() {
        quiver_storage::StoreAccess::Writer => Ok(()),
        quiver_storage::StoreAccess::Follower => Err(ApiError::classified(
            &quiver_storage::StorageError::QueryNode {
                what: "token changes",
            },
        )),
    }
}

/// `GET /api/v3/configure/token`: every token's name, permissions and creation time.
pub async fn list_tokens(State(app): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({ "tokens": app.auth.tokens().list() }))
}

/// `DELETE /api/v3/configure/token?name=`: revokes at once.
pub async fn revoke_token(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &["name"])?;
    let name = required(&params, "name")?;
    tokens_are_kept_here(&app)?;
    let tokens = app.auth.tokens().clone();
    let revoked = name.clone();
    off_the_workers("token revocation", move || Ok(tokens.revoke(&revoked)?)).await?;
    tracing::info!(token = %name, by = %caller.name(), "token revoked");
    Ok(Json(json!({ "revoked": name })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_password_is_read_from_the_query_string() {
        let request = |uri: &str| {
            Request::builder()
                .uri(uri)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        assert_eq!(
            v1_password(&request("/write?db=x&u=me&p=qv_a%2Bb")).as_deref(),
            Some("qv_a+b")
        );
        assert_eq!(v1_password(&request("/write?db=x&p=")), None);
        assert_eq!(v1_password(&request("/write?db=x")), None);
        assert_eq!(v1_password(&request("/write")), None);
    }
}
