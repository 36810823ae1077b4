//! Flight's session actions (`SetSessionOptions`, `GetSessionOptions`, `CloseSession`, from
//! `Flight.proto`), which `arrow-flight` does not implement: ADBC's Flight SQL driver sends
//! `CloseSession` whenever a connection closes, and a client may ask which options a session
//! has. Quiver has no per-session options yet: setting one answers `INVALID_NAME` for it (the
//! per-option refusal the protocol defines; the call itself succeeds), getting them answers
//! none. Closing a session forgets the Handshake handle the call presented, if any (a later
//! call with it must authenticate again); a call authenticated with a token has nothing to
//! forget and is answered `CLOSED` too.

use std::collections::HashMap;

use arrow_flight::{Action, ActionType};
use prost::Message;
use tonic::{Request, Status};

use crate::QuiverFlightSql;

/// `SetSessionOptions`: set options of the caller's session.
pub(crate) const SET_SESSION_OPTIONS: &str = "SetSessionOptions";
/// `GetSessionOptions`: the options of the caller's session.
pub(crate) const GET_SESSION_OPTIONS: &str = "GetSessionOptions";
/// `CloseSession`: end the caller's session.
pub(crate) const CLOSE_SESSION: &str = "CloseSession";

/// The session actions as `ListActions` announces them.
pub(crate) fn action_types() -> Vec<ActionType> {
    [
        (
            SET_SESSION_OPTIONS,
            "Set session options (Quiver has none: each is refused by name)",
        ),
        (GET_SESSION_OPTIONS, "Get the session's options (none)"),
        (
            CLOSE_SESSION,
            "End the session (forgets the Handshake handle presented)",
        ),
    ]
    .into_iter()
    .map(|(name, description)| ActionType {
        r#type: name.to_string(),
        description: description.to_string(),
    })
    .collect()
}

/// `arrow.flight.protocol.SessionOptionValue`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SessionOptionValue {
    /// The value (string, bool, int64, double or string list).
    #[prost(oneof = "OptionValue", tags = "1, 2, 3, 4, 5")]
    pub option_value: Option<OptionValue>,
}

/// The value of a [`SessionOptionValue`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum OptionValue {
    /// A string.
    #[prost(string, tag = "1")]
    String(String),
    /// A boolean.
    #[prost(bool, tag = "2")]
    Bool(bool),
    /// A 64-bit integer.
    #[prost(sfixed64, tag = "3")]
    Int64(i64),
    /// A double.
    #[prost(double, tag = "4")]
    Double(f64),
    /// A list of strings.
    #[prost(message, tag = "5")]
    StringList(StringList),
}

/// `SessionOptionValue.StringListValue`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct StringList {
    /// The strings.
    #[prost(string, repeated, tag = "1")]
    pub values: Vec<String>,
}

/// `arrow.flight.protocol.SetSessionOptionsRequest`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SetSessionOptionsRequest {
    /// The options to set, by name.
    #[prost(map = "string, message", tag = "1")]
    pub session_options: HashMap<String, SessionOptionValue>,
}

/// `arrow.flight.protocol.SetSessionOptionsResult`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SetSessionOptionsResult {
    /// The options that were not set, by name.
    #[prost(map = "string, message", tag = "1")]
    pub errors: HashMap<String, SetSessionOptionsError>,
}

/// `SetSessionOptionsResult.Error`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SetSessionOptionsError {
    /// Why (`SetSessionOptionsResult.ErrorValue`).
    #[prost(int32, tag = "1")]
    pub value: i32,
}

/// `SetSessionOptionsResult.ErrorValue.INVALID_NAME`.
pub(crate) const INVALID_NAME: i32 = 1;

/// `arrow.flight.protocol.GetSessionOptionsResult`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct GetSessionOptionsResult {
    /// The session's options, by name.
    #[prost(map = "string, message", tag = "1")]
    pub session_options: HashMap<String, SessionOptionValue>,
}

/// `arrow.flight.protocol.CloseSessionResult`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct CloseSessionResult {
    /// `CloseSessionResult.Status`.
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `CloseSessionResult.Status.CLOSED`.
pub(crate) const CLOSED: i32 = 1;

impl QuiverFlightSql {
    /// Answers a session action (one of the names above), authenticated like every call; the
    /// body of its one result, or `None` if `request` is no session action.
    pub(crate) fn session_action(
        &self,
        request: &Request<Action>,
    ) -> Option<Result<bytes::Bytes, Status>> {
        let action = request.get_ref();
        let answer = match action.r#type.as_str() {
            SET_SESSION_OPTIONS => self.caller(request).and_then(|_| {
                let asked =
                    SetSessionOptionsRequest::decode(action.body.as_ref()).map_err(|e| {
                        Status::invalid_argument(format!("not a SetSessionOptionsRequest: {e}"))
                    })?;
                let errors = asked
                    .session_options
                    .into_keys()
                    .map(|name| {
                        let error = SetSessionOptionsError {
                            value: INVALID_NAME,
                        };
                        (name, error)
                    })
                    .collect();
                Ok(SetSessionOptionsResult { errors }.encode_to_vec())
            }),
            GET_SESSION_OPTIONS => self
                .caller(request)
                .map(|_| GetSessionOptionsResult::default().encode_to_vec()),
            CLOSE_SESSION => self.caller(request).map(|_| {
                if let Some(handle) = crate::presented_handle(request.metadata()) {
                    // later calls presenting it must authenticate again
                    self.sessions.invalidate(handle);
                }
                CloseSessionResult { status: CLOSED }.encode_to_vec()
            }),
            _ => return None,
        };
        Some(answer.map(bytes::Bytes::from))
    }
}
