//! The scripted provider: [`tollgate_agent_core::scripted`]'s model (Tollgate's own script format, replayed
//! without I/O), plus reading a script from a file for the `scripted` provider kind of the configuration.

pub use tollgate_agent_core::scripted::{Script, ScriptError, ScriptedModel, demo_script};

use std::path::Path;

/// Reads and parses a script file.
pub fn from_file(path: &Path) -> Result<Script, ScriptError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ScriptError::Read { path: path.display().to_string(), message: e.to_string() })?;
    Script::from_json(&text)
}
