//! Typed identifiers: a run's id, a call's id, an actor and an approval's id are four types, so one cannot
//! be passed where another is meant, and each is the same plain JSON string on the wire and on disk as the
//! bare `String` it replaces (`#[serde(transparent)]`).
//!
//! ```rust
//! use tollgate_agent_protocol::{CallId, RunId};
//!
//! let run = RunId::new("0193b0c6-0000-7000-8000-000000000001");
//! let call = CallId::from("call_1");
//! assert_eq!(serde_json::to_string(&call)?, r#""call_1""#);
//! assert_eq!(run.as_str(), "0193b0c6-0000-7000-8000-000000000001");
//! assert_eq!(call, "call_1");
//! # Ok::<(), serde_json::Error>(())
//! ```
//!
//! ```compile_fail
//! use tollgate_agent_protocol::{CallId, RunId};
//!
//! fn cancel(_run: &RunId) {}
//! cancel(&CallId::from("call_1")); // a call id is not a run id
//! ```

use serde::{Deserialize, Serialize};

/// Declares one string identifier type with the conversions every id shares.
macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The identifier with this text.
            pub fn new(id: impl Into<String>) -> $name {
                $name(id.into())
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The identifier's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> $name {
                $name(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> $name {
                $name(id.to_owned())
            }
        }

        impl From<&String> for $name {
            fn from(id: &String) -> $name {
                $name(id.clone())
            }
        }

        impl From<&$name> for $name {
            fn from(id: &$name) -> $name {
                id.clone()
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

string_id! {
    /// A run's id: a UUIDv7, given when the run starts.
    RunId
}

string_id! {
    /// A tool call's id, as the model named it (`call_1`, `toolu_…`): unique within its turn.
    CallId
}

string_id! {
    /// Who acted: a token's actor name, `local` for the CLI and a server without tokens, `system` for an
    /// expiry.
    Actor
}

string_id! {
    /// An approval's id: a UUIDv7 given when its turn is held (`{run}/{call}` for an approval carried over
    /// from a decision recorded before approvals were records).
    ApprovalId
}

string_id! {
    /// A grant's id: a UUIDv7 given when the grant is made.
    GrantId
}
