//! The pages a signed link opens: the confirm page its `GET` shows (a `GET` never decides: mail scanners
//! and chat unfurlers fetch links) and the outcome pages its `POST` or a refused link show.
//!
//! Each is a whole HTML document as a `String`, made of pure functions of what it shows. The invariant:
//! every text in a page came through core's terminal sanitiser and then HTML escaping, so no markup and
//! no control, bidi or format character of a run's data reaches the reader raw; the only links are
//! `http(s)` URLs. The pages have no script and load nothing (inline CSS only), which
//! [`CONTENT_SECURITY_POLICY`] lets the server enforce; they read on a 390-pixel-wide phone, a long
//! preview scrolling sideways inside its box. Status codes and headers are the server's.

use std::fmt::Write as _;

use tollgate_agent_core::{Actor, CallId, Millis, RunId};

use crate::link::LinkAction;
use crate::text::{html_block, html_escape, html_line, is_web_url, time};

/// The `Content-Security-Policy` to send with every page of this module: nothing may load or run, inline
/// styles apply, and the form posts only to the page's own origin.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A preview line longer than this many characters will not fit a phone's width, so the page says the
/// box scrolls.
const PHONE_LINE: usize = 36;

/// What the confirm page of a link shows.
#[derive(Clone, Copy, Debug)]
pub struct ConfirmPage<'a> {
    /// The decision the link makes.
    pub action: LinkAction,
    /// The agent of the run.
    pub agent: &'a str,
    /// The run waiting at the gate.
    pub run_id: &'a RunId,
    /// The held call's tool.
    pub tool: &'a str,
    /// The held call.
    pub call_id: &'a CallId,
    /// The call's preview, as the tool made it.
    pub preview: &'a str,
    /// Whom the decision is recorded as.
    pub actor: &'a Actor,
    /// When the link expires, in milliseconds since the Unix epoch.
    pub expires_at: Millis,
    /// The run's page in the playground (shown as a link when it is an `http(s)` URL).
    pub review_url: &'a str,
}

/// The page a link shows after it was used, or instead of deciding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The decision was recorded.
    Decided {
        /// The decision made.
        action: LinkAction,
    },
    /// The link had already decided its call.
    Used,
    /// The link expired.
    Expired,
    /// The link is not one Tollgate signed, or was changed.
    Tampered,
    /// The run moved on: the call no longer waits for this decision.
    Stale,
    /// The decision was refused, for the reason given.
    Refused {
        /// Why, for a person.
        message: String,
    },
    /// The run does not exist (any more).
    NotFound,
}

/// The confirm page: what the call is, its preview and one button. The approve page says whom the approval
/// is recorded as; the deny page asks for the reason (a required `reason` field). The form posts to the
/// page's own URL.
pub fn confirm(page: &ConfirmPage<'_>) -> String {
    let (verb, heading) = match page.action {
        LinkAction::Approve => ("Approve", "Approve this call?"),
        LinkAction::Deny => ("Deny", "Deny this call?"),
    };
    let tool = html_line(page.tool);
    let actor = html_line(page.actor.as_str());
    let mut body = String::with_capacity(4096 + page.preview.len() * 2);
    let _ = write!(
        body,
        "<h1>{heading}</h1>\n<p>Agent <strong>{agent}</strong> is waiting for a decision on a call to \
         <code>{tool}</code>.</p>\n<dl>\n<dt>Tool</dt><dd><code>{tool}</code></dd>\n\
         <dt>Call</dt><dd><code>{call}</code></dd>\n<dt>Run</dt><dd><code>{run}</code></dd>\n\
         <dt>Agent</dt><dd>{agent}</dd>\n<dt>Link valid until</dt><dd>{expires}</dd>\n</dl>\n",
        agent = html_line(page.agent),
        call = html_line(page.call_id.as_str()),
        run = html_line(page.run_id.as_str()),
        expires = html_escape(&time(page.expires_at)),
    );
    preview_section(&mut body, page.preview);
    body.push_str("<form method=\"post\">\n");
    match page.action {
        LinkAction::Approve => {
            let _ = writeln!(body, "<p>Your approval will be recorded as <strong>{actor}</strong>.</p>");
        }
        LinkAction::Deny => {
            let _ = write!(
                body,
                "<label for=\"reason\">Reason</label>\n<p class=\"hint\" id=\"reason-hint\">The agent is told \
                 the call was denied, and why.</p>\n<textarea id=\"reason\" name=\"reason\" rows=\"4\" required \
                 aria-describedby=\"reason-hint\"></textarea>\n<p>Your denial will be recorded as \
                 <strong>{actor}</strong>.</p>\n"
            );
        }
    }
    let _ = write!(body, "<button type=\"submit\" class=\"{}\">{verb}</button>\n</form>\n", page.action.as_str());
    review_link(&mut body, page.review_url);
    document(&format!("{verb} {}?", page.tool), &body)
}

/// An outcome page: a title and a sentence saying what happened, the run it concerns when known, and a
/// link to review it in the playground when one is given.
pub fn outcome(outcome: &Outcome, run: Option<&RunId>, review_url: Option<&str>) -> String {
    let (title, sentence) = match outcome {
        Outcome::Decided { action: LinkAction::Approve } => {
            ("Approved", "The call was approved. The run goes on as soon as every call of its turn is decided.")
        }
        Outcome::Decided { action: LinkAction::Deny } => {
            ("Denied", "The call was denied. The agent is told so, with your reason, when the run goes on.")
        }
        Outcome::Used => ("Link already used", "This link has already made its decision. A link decides only once."),
        Outcome::Expired => ("Link expired", "This link has expired, so it decides nothing."),
        Outcome::Tampered => {
            ("Invalid link", "This link is not valid: it may have been cut short or changed. It decides nothing.")
        }
        Outcome::Stale => (
            "Decision no longer needed",
            "The run has moved on: this call is no longer waiting for this decision. Nothing was decided.",
        ),
        Outcome::Refused { .. } => ("Decision refused", "Tollgate refused this decision. Nothing was decided."),
        Outcome::NotFound => {
            ("Run not found", "The run this link is for does not exist any more. Nothing was decided.")
        }
    };
    let mut body = format!("<h1>{title}</h1>\n<p>{sentence}</p>\n");
    if let Outcome::Refused { message } = outcome {
        let _ = writeln!(body, "<p class=\"reason\">{}</p>", html_block(message));
    }
    if let Some(run) = run {
        let _ = writeln!(body, "<p>Run <code>{}</code></p>", html_line(run.as_str()));
    }
    if let Some(url) = review_url {
        review_link(&mut body, url);
    }
    document(title, &body)
}

/// The preview in a box that scrolls sideways (keyboard-focusable), saying so when its lines are long.
fn preview_section(body: &mut String, preview: &str) {
    body.push_str("<h2 id=\"preview-title\">Preview</h2>\n");
    if preview.trim().is_empty() {
        body.push_str("<p class=\"hint\">The tool gave no preview.</p>\n");
        return;
    }
    let safe = html_block(preview);
    let _ = writeln!(body, "<pre tabindex=\"0\" aria-labelledby=\"preview-title\">{safe}</pre>");
    if crate::text::block(preview).lines().any(|line| line.chars().count() > PHONE_LINE) {
        body.push_str("<p class=\"hint\">Long lines scroll sideways. ⇆</p>\n");
    }
}

/// The playground link, when `url` is an `http(s)` URL.
fn review_link(body: &mut String, url: &str) {
    if is_web_url(url) {
        let _ = writeln!(body, "<p><a href=\"{}\">Review in the playground</a></p>", html_escape(url));
    }
}

/// The whole document around `body` (already HTML), titled `title` (plain text).
fn document(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n<meta name=\"robots\" content=\"noindex, nofollow\">\n\
         <title>{} · Tollgate</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n\
         <p class=\"brand\">Tollgate</p>\n{body}</main>\n</body>\n</html>\n",
        html_line(title)
    )
}

/// The pages' one stylesheet: a single readable column, large tap targets, and a preview box whose edges
/// shade while there is more to scroll to.
const STYLE: &str = "\
:root{color-scheme:light dark;--bg:#f5f6f8;--fg:#1c2230;--muted:#596170;--box:#fff;--line:#d3d7de;\
--shade:rgba(0,0,0,.22);--link:#0b57d0}\
@media (prefers-color-scheme:dark){:root{--bg:#15181e;--fg:#e6e8ec;--muted:#a3aab6;--box:#1f232b;\
--line:#3a404b;--shade:rgba(0,0,0,.7);--link:#8ab4f8}}\
*{box-sizing:border-box}\
body{margin:0;background:var(--bg);color:var(--fg);font:17px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}\
main{max-width:42rem;margin:0 auto;padding:1rem 1rem 2.5rem}\
.brand{margin:0;color:var(--muted);font-size:.9rem;font-weight:600;letter-spacing:.04em}\
h1{font-size:1.5rem;line-height:1.25;margin:.4rem 0 1rem}\
h2{font-size:1.1rem;margin:1.5rem 0 .5rem}\
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em}\
code,dd,.reason{overflow-wrap:anywhere}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem .8rem;margin:0 0 1rem}\
dt{color:var(--muted)}dd{margin:0;min-width:0}\
pre{margin:0;padding:.75rem;max-height:60vh;overflow:auto;white-space:pre;border:1px solid var(--line);\
border-radius:6px;background:linear-gradient(to right,var(--box) 40%,transparent) left/2rem 100% no-repeat local,\
linear-gradient(to left,var(--box) 40%,transparent) right/2rem 100% no-repeat local,\
radial-gradient(farthest-side at 0 50%,var(--shade),transparent) left/.8rem 100% no-repeat scroll,\
radial-gradient(farthest-side at 100% 50%,var(--shade),transparent) right/.8rem 100% no-repeat scroll;\
background-color:var(--box)}\
pre:focus-visible,textarea:focus-visible,button:focus-visible,a:focus-visible{outline:3px solid var(--link);\
outline-offset:2px}\
.hint{color:var(--muted);font-size:.9rem;margin:.4rem 0}\
.reason{padding:.6rem .75rem;border-left:4px solid var(--line);background:var(--box);white-space:pre-wrap}\
form{margin:1.5rem 0}\
label{display:block;font-weight:600}\
textarea{display:block;width:100%;min-height:6rem;padding:.5rem;font:inherit;color:inherit;background:var(--box);\
border:1px solid var(--line);border-radius:6px}\
button{display:block;width:100%;min-height:3rem;margin-top:1rem;border:0;border-radius:8px;color:#fff;\
font:inherit;font-size:1.1rem;font-weight:600;cursor:pointer}\
.approve{background:#1a7f37}.deny{background:#b42318}\
a{color:var(--link)}";

#[cfg(test)]
mod tests {
    use super::*;

    fn page(action: LinkAction, preview: &str) -> String {
        let run = RunId::new("run-1");
        let call = CallId::new("call_1");
        let actor = Actor::new("alice");
        confirm(&ConfirmPage {
            action,
            agent: "notes",
            run_id: &run,
            tool: "fs_write",
            call_id: &call,
            preview,
            actor: &actor,
            expires_at: 1_750_000_000_000,
            review_url: "https://tollgate.example.com/#/runs/run-1",
        })
    }

    /// Checks what every page must have: a whole document, its landmarks, no script, nothing loaded.
    fn assert_well_formed(html: &str) {
        assert!(html.starts_with("<!doctype html>\n<html lang=\"en\">"), "{html}");
        assert!(html.contains("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"));
        assert_eq!(html.matches("<title>").count(), 1);
        assert_eq!(html.matches("<h1>").count(), 1);
        assert_eq!(html.matches("<main>").count(), 1);
        assert!(html.trim_end().ends_with("</html>"));
        for absent in ["<script", "<img", "<link", "<iframe", "src=", "javascript:", "onclick", "@import", "url("] {
            assert!(!html.contains(absent), "{absent} in {html}");
        }
    }

    #[test]
    fn the_approve_page_names_the_call_and_whom_it_records() {
        let html = page(LinkAction::Approve, "write notes/a.txt\n+hello");
        assert_well_formed(&html);
        assert!(html.contains("<title>Approve fs_write? · Tollgate</title>"));
        assert!(html.contains("<h1>Approve this call?</h1>"));
        assert!(html.contains("<form method=\"post\">"));
        assert!(html.contains("<button type=\"submit\" class=\"approve\">Approve</button>"));
        assert!(html.contains("recorded as <strong>alice</strong>"));
        assert!(html.contains("<code>call_1</code>") && html.contains("<code>run-1</code>"));
        assert!(html.contains(">write notes/a.txt\n+hello</pre>"));
        assert!(html.contains("2025-06-15 15:06 UTC"));
        assert!(html.contains("<a href=\"https://tollgate.example.com/#/runs/run-1\">Review in the playground</a>"));
        assert!(!html.contains("<textarea") && !html.contains("name=\"reason\""));
        assert_eq!(html.matches("<button").count(), 1);
    }

    #[test]
    fn the_deny_page_asks_for_a_reason() {
        let html = page(LinkAction::Deny, "rm notes");
        assert_well_formed(&html);
        assert!(html.contains("<h1>Deny this call?</h1>"));
        assert!(html.contains("<label for=\"reason\">Reason</label>"));
        assert!(html.contains("<textarea id=\"reason\" name=\"reason\" rows=\"4\" required"));
        assert!(html.contains("<button type=\"submit\" class=\"deny\">Deny</button>"));
        assert!(html.contains("recorded as <strong>alice</strong>"));
    }

    #[test]
    fn every_text_is_escaped_and_sanitised() {
        let run = RunId::new("run<script>");
        let call = CallId::new("c\"1");
        let actor = Actor::new("<b>eve</b>");
        let html = confirm(&ConfirmPage {
            action: LinkAction::Deny,
            agent: "<script>alert(1)</script>",
            run_id: &run,
            tool: "fs_write\u{202e}txt.exe",
            call_id: &call,
            preview: "ls \u{2067}# && rm -rf notes\u{2069}\n<script>x</script>\r\u{1b}[2K",
            actor: &actor,
            expires_at: 0,
            review_url: "javascript:alert(1)",
        });
        assert_well_formed(&html);
        assert!(!html.contains("<script>") && !html.contains("<b>eve"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("fs_write\\u{202e}txt.exe"));
        assert!(
            html.contains("ls \\u{2067}# &amp;&amp; rm -rf notes\\u{2069}\n&lt;script&gt;x&lt;/script&gt;\\r\\x1b[2K")
        );
        assert!(html.contains("<code>c&quot;1</code>"));
        assert!(!html.contains("Review in the playground"), "a javascript: URL is no link");
        assert!(!html.chars().any(|c| tollgate_agent_core::display::is_unsafe_for_terminal(c) && c != '\n'));
    }

    #[test]
    fn a_long_preview_scrolls_with_a_visible_cue() {
        let long = page(LinkAction::Approve, &"x".repeat(200));
        assert!(long.contains("<pre tabindex=\"0\" aria-labelledby=\"preview-title\">"));
        assert!(long.contains("Long lines scroll sideways."));
        assert!(STYLE.contains("overflow:auto") && STYLE.contains("white-space:pre;"));
        assert!(!page(LinkAction::Approve, "short\nlines").contains("scroll sideways"));
        assert!(page(LinkAction::Approve, " ").contains("The tool gave no preview."));
    }

    #[test]
    fn each_outcome_has_its_own_title_and_sentence() {
        let run = RunId::new("run-9");
        let outcomes = [
            (Outcome::Decided { action: LinkAction::Approve }, "Approved"),
            (Outcome::Decided { action: LinkAction::Deny }, "Denied"),
            (Outcome::Used, "Link already used"),
            (Outcome::Expired, "Link expired"),
            (Outcome::Tampered, "Invalid link"),
            (Outcome::Stale, "Decision no longer needed"),
            (Outcome::Refused { message: "no".into() }, "Decision refused"),
            (Outcome::NotFound, "Run not found"),
        ];
        let mut seen = std::collections::HashSet::new();
        for (outcome_, title) in outcomes {
            let html = outcome(&outcome_, Some(&run), Some("https://tollgate.example.com/"));
            assert_well_formed(&html);
            assert!(html.contains(&format!("<title>{title} · Tollgate</title>")), "{html}");
            assert!(html.contains(&format!("<h1>{title}</h1>")), "{html}");
            assert!(html.contains("<code>run-9</code>"));
            assert!(html.contains("Review in the playground"));
            assert!(!html.contains("<form"));
            assert!(seen.insert(title));
        }
        let bare = outcome(&Outcome::Tampered, None, None);
        assert!(!bare.contains("Run <code>") && !bare.contains("<a "));
    }

    #[test]
    fn a_refusal_shows_its_message_safely() {
        let html = outcome(&Outcome::Refused { message: "edit is refused <here>\u{202e}".into() }, None, None);
        assert!(html.contains("<p class=\"reason\">edit is refused &lt;here&gt;\\u{202e}</p>"), "{html}");
    }

    #[test]
    fn the_policy_allows_no_script_and_no_loads() {
        assert!(CONTENT_SECURITY_POLICY.starts_with("default-src 'none';"));
        assert!(CONTENT_SECURITY_POLICY.contains("form-action 'self'"));
        assert!(!CONTENT_SECURITY_POLICY.contains("script-src"));
    }
}
