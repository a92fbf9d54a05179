//! # tollgate-agent-playground
//!
//! The web playground and approvals inbox that `tollgate serve` shows at `/`, embedded in the binary: this
//! crate answers "which bytes, of which type" for a path, and the server serves them.
//!
//! ```rust
//! use tollgate_agent_playground::{ASSETS_PREFIX, INDEX, asset, paths};
//! # fn main() -> Result<(), &'static str> {
//!
//! // `GET /`: the page.
//! let (content_type, body) = asset("/").ok_or("the index is not embedded")?;
//! assert_eq!(content_type, "text/html; charset=utf-8");
//! assert!(body.starts_with(b"<!doctype html>"));
//!
//! // `GET /assets/{path}`: the files the page loads.
//! let script = "/assets/app.js".strip_prefix(ASSETS_PREFIX).and_then(asset);
//! let (content_type, _script) = script.ok_or("app.js is not embedded")?;
//! assert_eq!(content_type, "text/javascript; charset=utf-8");
//! assert!(paths().any(|path| path == INDEX));
//! assert!(asset("../Cargo.toml").is_none()); // nothing outside the embedded set
//! # Ok(()) }
//! ```
//!
//! The page starts a run, watches its steps live over SSE, lists the waiting runs, and per held call shows
//! the preview (diffs shown as diffs), approve, edit (checked against the tool's schema before sending),
//! deny with a reason, respond, approve and remember (a grant, V2 §1), and approve-all / deny-all; a
//! Grants page lists the grants in force and past ones and revokes them. It is a client of the HTTP API
//! of docs/api.md and nothing else: every state it shows comes from `/v1`, so a reload shows the same
//! history.
//!
//! What it promises:
//! - **Every asset is in the binary.** The files of `assets/` (plain HTML, CSS and JavaScript modules,
//!   no build step) are embedded at compile time in every profile, so the playground works offline and
//!   loads nothing from elsewhere: no CDN, no font service.
//! - **Text stays text, drawn as it reads.** Every text from the API goes into the page as text nodes
//!   (no asset sets HTML from a string), and every invisible or direction-changing character in it
//!   (bidi controls, zero-width characters, the soft hyphen, other format characters, C0/C1 controls
//!   but newline and tab) is drawn as a visible `⟨U+2067⟩` mark, never raw, so what a person reads is
//!   what runs (`assets/dom.js`, `assets/invisible.js`; docs/playground.md).
//! - **Paths are relative.** `index.html` loads `assets/…` and calls `v1/…` relative to itself, so the
//!   server mounts the index at `/` and the files under `/assets/` ([`ASSETS_PREFIX`]).
//!
//! The server owns routing and headers.

use rust_embed::RustEmbed;
use std::borrow::Cow;

/// The files of `assets/`, embedded at compile time (rust-embed's `debug-embed` makes debug builds embed
/// them too, instead of reading the folder at run time).
#[derive(RustEmbed)]
#[folder = "assets/"]
struct Assets;

/// The page served for `""` and `"/"`.
pub const INDEX: &str = "index.html";

/// Where the page expects its static files: `GET /assets/{path}` answers [`asset`]`(path)`.
pub const ASSETS_PREFIX: &str = "/assets/";

/// The content type and bytes of an embedded asset, or `None` when there is no such file.
///
/// `path` is relative to the assets folder, with or without a leading `/`; `""` and `"/"` give
/// [`INDEX`]. Nothing outside the embedded set can be reached: `..` and the like name no embedded file.
///
/// ```
/// let (content_type, body) = tollgate_agent_playground::asset("/").unwrap_or_else(|| panic!("no index"));
/// assert_eq!(content_type, "text/html; charset=utf-8");
/// assert!(body.starts_with(b"<!doctype html>"));
/// assert!(tollgate_agent_playground::asset("app.js").is_some());
/// assert!(tollgate_agent_playground::asset("../Cargo.toml").is_none());
/// ```
pub fn asset(path: &str) -> Option<(&'static str, Cow<'static, [u8]>)> {
    let path = path.trim_start_matches('/');
    let path = if path.is_empty() { INDEX } else { path };
    let file = Assets::get(path)?;
    Some((content_type(path), file.data))
}

/// The paths of every embedded asset, relative to the assets folder.
pub fn paths() -> impl Iterator<Item = Cow<'static, str>> {
    Assets::iter()
}

/// The content type for a file name, by its extension.
fn content_type(path: &str) -> &'static str {
    let extension = path.rsplit_once('.').map(|(_, ext)| ext.to_ascii_lowercase()).unwrap_or_default();
    match extension.as_str() {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn text(path: &str) -> String {
        let (_, body) = asset(path).unwrap_or_else(|| panic!("{path} is not embedded"));
        String::from_utf8(body.into_owned()).unwrap_or_else(|e| panic!("{path} is not UTF-8: {e}"))
    }

    fn embedded() -> BTreeSet<String> {
        paths().map(|p| p.into_owned()).collect()
    }

    #[test]
    fn the_root_is_the_index_page() {
        for path in ["", "/", "index.html", "/index.html"] {
            let (content_type, body) = asset(path).unwrap_or_else(|| panic!("{path:?} has no page"));
            assert_eq!(content_type, "text/html; charset=utf-8", "{path:?}");
            assert!(body.starts_with(b"<!doctype html>"), "{path:?}");
        }
    }

    #[test]
    fn unknown_paths_and_escapes_are_not_found() {
        for path in ["nope.js", "../Cargo.toml", "/../src/lib.rs", "assets/app.js", "app.js/"] {
            assert!(asset(path).is_none(), "{path:?} should not be served");
        }
    }

    #[test]
    fn every_embedded_file_has_a_known_content_type() {
        let files = embedded();
        assert!(files.len() >= 10, "{files:?}");
        for path in &files {
            let (content_type, body) = asset(path).unwrap_or_else(|| panic!("{path} listed but not served"));
            assert_ne!(content_type, "application/octet-stream", "{path}");
            assert!(!body.is_empty(), "{path} is empty");
        }
        assert_eq!(asset("app.js").map(|a| a.0), Some("text/javascript; charset=utf-8"));
        assert_eq!(asset("style.css").map(|a| a.0), Some("text/css; charset=utf-8"));
    }

    /// Every `src`/`href` of the page and every module import resolves to an embedded file: a typo
    /// or a forgotten file would break the page only in a browser otherwise.
    #[test]
    fn every_reference_resolves_to_an_embedded_file() {
        let files = embedded();
        let index = text(INDEX);
        for attribute in ["src=\"", "href=\""] {
            for reference in index.split(attribute).skip(1).filter_map(|rest| rest.split('"').next()) {
                if reference.starts_with('#') {
                    continue;
                }
                let file =
                    reference.strip_prefix("assets/").unwrap_or_else(|| panic!("{reference} is not under assets/"));
                assert!(files.contains(file), "index.html refers to {reference}, which is not embedded");
            }
        }
        for module in files.iter().filter(|f| f.ends_with(".js")) {
            let source = text(module);
            for import in source.split(" from '").skip(1).filter_map(|rest| rest.split('\'').next()) {
                let file = import.strip_prefix("./").unwrap_or_else(|| panic!("{module} imports {import}"));
                assert!(files.contains(file), "{module} imports {import}, which is not embedded");
            }
        }
    }

    /// Text goes in as text: no asset turns a string into markup, which would let a model's text run as
    /// script (and would bypass the marks of `dom.js`).
    #[test]
    fn no_asset_parses_strings_as_html() {
        for path in embedded().iter().filter(|p| p.ends_with(".js")) {
            let source = text(path);
            for needle in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "createContextualFragment",
                "DOMParser",
            ] {
                assert!(!source.contains(needle), "{path} uses {needle}");
            }
        }
    }

    /// The assets themselves hold no character they would mark (a bidi control in a comment or a
    /// string is the same deception in our own source): they write `\u2067`.
    #[test]
    fn no_asset_holds_an_invisible_or_direction_changing_character() {
        let marked = |c: char| {
            (c.is_control() && c != '\n' && c != '\t')
                || matches!(c, '\u{ad}' | '\u{61c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}')
                || matches!(c, '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
        };
        for path in embedded() {
            let source = text(&path);
            if let Some((line, _)) = source.lines().enumerate().find(|(_, line)| line.chars().any(marked)) {
                panic!("{path}:{} holds an invisible or direction-changing character", line + 1);
            }
        }
    }

    /// Works offline: nothing is loaded from another origin.
    #[test]
    fn nothing_is_loaded_from_elsewhere() {
        for path in embedded() {
            let source = text(&path).replace("http://www.w3.org/2000/svg", "");
            for needle in ["http://", "https://", "//cdn", "@import url("] {
                assert!(!source.contains(needle), "{path} refers to another origin ({needle})");
            }
        }
    }
}
