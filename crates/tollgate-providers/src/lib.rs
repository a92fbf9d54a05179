//! # tollgate-providers
//!
//! Model providers behind [`tollgate_core::ModelClient`]. Each adapter translates Tollgate's own transcript
//! types to a provider's wire format and back; nothing of a provider's format is ever persisted.
//!
//! - [`scripted`]: replays a JSON script, for tests, benchmarks and the offline demo.

pub mod scripted;

pub use scripted::{Script, ScriptError, ScriptedModel};
