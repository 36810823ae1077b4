//! What a token may do: [`Permission`]s of the form `db:<name|*>:read|write`, written and
//! parsed in that one text form (the admin API, the token file and error messages all use it).

use std::fmt;
use std::str::FromStr;

/// What a permission allows on a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Queries that read the database's tables (and see it in the catalog).
    Read,
    /// Writes to the database (line protocol, MessagePack, Arrow, Flight SQL bulk ingest).
    Write,
}

impl Action {
    /// The action's name in a permission (`read` or `write`).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Write => "write",
        }
    }
}

/// Which databases a permission covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DatabasePattern {
    /// Every database, including those created later (`*`).
    Any,
    /// One database by its exact name.
    Named(String),
}

impl DatabasePattern {
    /// True if the pattern covers `database`.
    pub fn covers(&self, database: &str) -> bool {
        match self {
            DatabasePattern::Any => true,
            DatabasePattern::Named(name) => name == database,
        }
    }
}

/// One grant: `db:<name|*>:read|write`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Permission {
    /// The databases it covers.
    pub database: DatabasePattern,
    /// What it allows on them.
    pub action: Action,
}

impl Permission {
    /// True if the permission allows `action` on `database`.
    pub fn allows(&self, action: Action, database: &str) -> bool {
        self.action == action && self.database.covers(database)
    }
}

/// Longest permission text accepted (a database name is at most a few hundred bytes).
const MAX_PERMISSION_LEN: usize = 512;

impl FromStr for Permission {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let shape = "a permission is `db:<name|*>:read|write`";
        if text.len() > MAX_PERMISSION_LEN {
            return Err(format!(
                "a permission is at most {MAX_PERMISSION_LEN} bytes; {shape}"
            ));
        }
        let rest = text
            .strip_prefix("db:")
            .ok_or_else(|| format!("{text:?} is not a permission: {shape}"))?;
        let (database, action) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?} names no action: {shape}"))?;
        let action = match action {
            "read" => Action::Read,
            "write" => Action::Write,
            other => {
                return Err(format!(
                    "{text:?}: unknown action {other:?} (read or write); {shape}"
                ))
            }
        };
        let database = match database {
            "*" => DatabasePattern::Any,
            "" => return Err(format!("{text:?} names no database: {shape}")),
            name if name.chars().any(char::is_control) => {
                return Err(format!(
                    "{text:?}: a database name has no control characters; {shape}"
                ))
            }
            name => DatabasePattern::Named(name.to_string()),
        };
        Ok(Permission { database, action })
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.database {
            DatabasePattern::Any => write!(f, "db:*:{}", self.action.as_str()),
            DatabasePattern::Named(name) => write!(f, "db:{name}:{}", self.action.as_str()),
        }
    }
}

impl serde::Serialize for Permission {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Permission {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn permissions_parse_and_match() {
        let read: Permission = "db:metrics:read".parse().unwrap();
        assert!(read.allows(Action::Read, "metrics"));
        assert!(!read.allows(Action::Write, "metrics"));
        assert!(!read.allows(Action::Read, "metrics2"));
        let any: Permission = "db:*:write".parse().unwrap();
        assert!(any.allows(Action::Write, "anything"));
        assert!(!any.allows(Action::Read, "anything"));
        // a database name may hold a colon: the action is after the last one
        let colon: Permission = "db:a:b:read".parse().unwrap();
        assert!(colon.allows(Action::Read, "a:b"));
    }

    #[test]
    fn malformed_permissions_are_refused_with_the_shape() {
        for bad in [
            "",
            "db",
            "db:",
            "db::read",
            "db:x",
            "db:x:admin",
            "db:x:READ",
            "table:x:read",
            "db:x\n:read",
        ] {
            let error = bad.parse::<Permission>().unwrap_err();
            assert!(error.contains("db:<name|*>:read|write"), "{bad:?}: {error}");
        }
        let long = format!("db:{}:read", "x".repeat(600));
        assert!(long.parse::<Permission>().is_err());
    }

    proptest! {
        #[test]
        fn display_parses_back(name in "[a-zA-Z0-9_:.*-]{1,40}", write in any::<bool>()) {
            let text = format!("db:{name}:{}", if write { "write" } else { "read" });
            let parsed: Permission = text.parse().unwrap();
            prop_assert_eq!(parsed.to_string(), text.clone());
            let again: Permission = parsed.to_string().parse().unwrap();
            prop_assert_eq!(again, parsed);
        }
    }
}
