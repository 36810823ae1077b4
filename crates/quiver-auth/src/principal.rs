//! Who a request acts for once it is authenticated: a [`Principal`] (a token, or the local
//! caller the `loopback` and `disabled` modes let in without one) and the checks every
//! protocol asks of it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use quiver_model::{AccessScope, Classify, Denied, ReadGrants, VisibleDatabases};

use crate::permission::{Action, DatabasePattern, Permission};
use crate::AuthError;

/// An authenticated caller, shared by the requests and sessions it opened.
pub type Caller = Arc<Principal>;

/// A token's identity and grants, or the local caller's.
#[derive(Debug)]
pub struct Principal {
    name: String,
    admin: bool,
    permissions: Vec<Permission>,
    revoked: AtomicBool,
    scope: AccessScope,
    local: bool,
}

impl Principal {
    /// The caller admitted without a token (loopback clients in the `loopback` mode, every
    /// client in the `disabled` mode): allowed everything.
    pub fn local() -> Self {
        Principal {
            name: "local".into(),
            admin: true,
            permissions: Vec::new(),
            revoked: AtomicBool::new(false),
            scope: AccessScope::Everything,
            local: true,
        }
    }

    /// A token's principal.
    pub fn token(name: &str, admin: bool, permissions: &[Permission]) -> Self {
        let mut permissions = permissions.to_vec();
        permissions.sort();
        permissions.dedup();
        let scope = if admin {
            AccessScope::Everything
        } else {
            AccessScope::grants(
                permissions
                    .iter()
                    .map(Permission::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            )
        };
        Principal {
            name: name.to_string(),
            admin,
            permissions,
            revoked: AtomicBool::new(false),
            scope,
            local: false,
        }
    }

    /// What the query layers check before answering: `None` for the local caller (allowed
    /// everything, and not a token the list of queries could name).
    pub fn read_grants(self: &Arc<Self>) -> Option<Arc<dyn ReadGrants>> {
        (!self.local).then(|| self.clone() as Arc<dyn ReadGrants>)
    }

    /// The key of the caller's rate limits: the token's name, or the local caller (token
    /// names hold no `:`, so the two never meet).
    pub fn rate_key(&self) -> String {
        if self.local {
            "local".to_string()
        } else {
            format!("token:{}", self.name)
        }
    }

    /// True for the caller admitted without a token.
    pub fn is_local(&self) -> bool {
        self.local
    }

    /// The token's name (`local` for the local caller).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True for admin tokens and the local caller.
    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// The result-cache scope: callers with the same grants share cached answers, others
    /// never do.
    pub fn scope(&self) -> &AccessScope {
        &self.scope
    }

    /// True once the token is revoked: open sessions and handles check it on every request.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    pub(crate) fn revoke(&self) {
        self.revoked.store(true, Ordering::Release);
    }

    /// Fails if the token was revoked since the session opened.
    pub fn require_active(&self) -> Result<(), AuthError> {
        if self.is_revoked() {
            return Err(AuthError::Revoked(self.name.clone()));
        }
        Ok(())
    }

    /// True if the caller may do `action` on `database`.
    pub fn may(&self, action: Action, database: &str) -> bool {
        self.admin || self.permissions.iter().any(|p| p.allows(action, database))
    }

    /// Fails with [`AuthError::Forbidden`] unless the caller may do `action` on `database`
    /// (and the token is still valid).
    pub fn require(&self, action: Action, database: &str) -> Result<(), AuthError> {
        self.require_active()?;
        if self.may(action, database) {
            return Ok(());
        }
        Err(AuthError::Forbidden {
            token: self.name.clone(),
            needed: Permission {
                database: DatabasePattern::Named(database.to_string()),
                action,
            }
            .to_string(),
        })
    }

    /// Fails with [`AuthError::Forbidden`] unless the caller is an admin.
    pub fn require_admin(&self) -> Result<(), AuthError> {
        self.require_active()?;
        if self.admin {
            return Ok(());
        }
        Err(AuthError::Forbidden {
            token: self.name.clone(),
            needed: "an admin token".into(),
        })
    }

    /// Fails unless the caller may read every database in `databases`.
    pub fn require_read_all<'a>(
        &self,
        databases: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), AuthError> {
        databases
            .into_iter()
            .try_for_each(|database| self.require(Action::Read, database))
    }

    /// The databases the catalog shows the caller: those it may read.
    pub fn visible_databases(&self) -> VisibleDatabases {
        let readable = self.permissions.iter().filter(|p| p.action == Action::Read);
        let mut named = BTreeSet::new();
        for permission in readable {
            match &permission.database {
                DatabasePattern::Any => return VisibleDatabases::All,
                DatabasePattern::Named(name) => {
                    named.insert(name.clone());
                }
            }
        }
        if self.admin {
            return VisibleDatabases::All;
        }
        VisibleDatabases::Only(Arc::new(named))
    }
}

impl ReadGrants for Principal {
    fn check_read(&self, database: &str) -> Result<(), Denied> {
        self.require(Action::Read, database).map_err(|e| Denied {
            kind: e.kind(),
            message: e.to_string(),
        })
    }

    fn caller_name(&self) -> &str {
        &self.name
    }

    fn visible_databases(&self) -> VisibleDatabases {
        Principal::visible_databases(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(permissions: &[&str]) -> Principal {
        let permissions: Vec<Permission> = permissions.iter().map(|p| p.parse().unwrap()).collect();
        Principal::token("t", false, &permissions)
    }

    #[test]
    fn grants_decide_and_errors_name_the_missing_permission() {
        let reader = token(&["db:a:read", "db:*:write"]);
        assert!(reader.require(Action::Read, "a").is_ok());
        assert!(reader.require(Action::Write, "zzz").is_ok());
        let denied = reader.require(Action::Read, "b").unwrap_err().to_string();
        assert!(
            denied.contains("db:b:read") && denied.contains("\"t\""),
            "{denied}"
        );
        assert!(reader.require_admin().is_err());
        assert!(reader.require_read_all(["a", "a"]).is_ok());
        assert!(reader.require_read_all(["a", "b"]).is_err());
        assert!(Principal::local().require(Action::Write, "x").is_ok());
        assert!(Principal::local().require_admin().is_ok());
    }

    #[test]
    fn the_catalog_shows_only_readable_databases() {
        let VisibleDatabases::Only(names) = token(&["db:a:read", "db:b:write"]).visible_databases()
        else {
            panic!("a named grant limits the catalog")
        };
        assert_eq!(names.iter().collect::<Vec<_>>(), ["a"]);
        assert!(matches!(
            token(&["db:*:read"]).visible_databases(),
            VisibleDatabases::All
        ));
        assert!(matches!(
            Principal::token("root", true, &[]).visible_databases(),
            VisibleDatabases::All
        ));
    }

    #[test]
    fn equal_grants_share_a_scope_and_revocation_is_seen() {
        let a = token(&["db:a:read", "db:b:read"]);
        let b = token(&["db:b:read", "db:a:read", "db:a:read"]);
        assert_eq!(a.scope(), b.scope());
        assert_ne!(a.scope(), token(&["db:a:read"]).scope());
        assert_ne!(a.scope(), Principal::local().scope());
        a.revoke();
        assert!(matches!(
            a.require(Action::Read, "a"),
            Err(AuthError::Revoked(_))
        ));
    }
}
