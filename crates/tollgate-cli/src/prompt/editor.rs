//! Editing a held call's arguments in the person's editor: `$EDITOR` (else `vi`) on a temporary `.json`
//! file holding the arguments as pretty JSON. Only the text comes back; checking it is the caller's job.

use std::io::Write;
use std::process::Command;
use tollgate_agent_protocol::CallId;

/// The editor when `$EDITOR` is unset or empty.
const FALLBACK_EDITOR: &str = "vi";

/// Opens the editor on `text` for call `call_id` and returns the file's content once the editor exits
/// successfully. The file is removed afterwards. Blocks until the editor exits.
pub(super) fn edit_text(call_id: &CallId, text: &str) -> Result<String, String> {
    let safe_id: String = call_id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').collect();
    let mut file = tempfile::Builder::new()
        .prefix(&format!("tollgate-{safe_id}-"))
        .suffix(".json")
        .tempfile()
        .map_err(|e| format!("cannot create a temporary file for the arguments: {e}"))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.flush())
        .map_err(|e| format!("cannot write the arguments to {}: {e}", file.path().display()))?;
    let editor = editor();
    let status = editor_command(&editor, file.path())
        .status()
        .map_err(|e| format!("cannot start the editor `{editor}` (set EDITOR): {e}"))?;
    if !status.success() {
        return Err(format!("the editor `{editor}` exited with {status}; nothing was changed"));
    }
    // Read by path: many editors save by writing a new file and renaming it over the old one.
    std::fs::read_to_string(file.path())
        .map_err(|e| format!("cannot read the edited arguments back from {}: {e}", file.path().display()))
}

fn editor() -> String {
    std::env::var("EDITOR").ok().filter(|e| !e.trim().is_empty()).unwrap_or_else(|| FALLBACK_EDITOR.to_owned())
}

/// As git runs it: through the shell, so `EDITOR="code --wait"` or a quoted path works.
#[cfg(unix)]
fn editor_command(editor: &str, path: &std::path::Path) -> Command {
    let mut command = Command::new("sh");
    command.arg("-c").arg(format!("{editor} \"$@\"")).arg(editor).arg(path);
    command
}

#[cfg(not(unix))]
fn editor_command(editor: &str, path: &std::path::Path) -> Command {
    let mut words = editor.split_whitespace();
    let mut command = Command::new(words.next().unwrap_or(FALLBACK_EDITOR));
    command.args(words).arg(path);
    command
}
