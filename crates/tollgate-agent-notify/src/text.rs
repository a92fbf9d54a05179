//! The text every renderer shares: what a person is shown passes through core's terminal sanitiser (no
//! control, bidi or format character reaches them raw), is cut to a size with a visible ellipsis at a
//! character boundary, and is escaped for where it goes.

use std::borrow::Cow;

use tollgate_agent_core::display::{terminal_safe, terminal_safe_line};

/// What ends a text that was cut.
pub(crate) const ELLIPSIS: char = '…';

/// `text` cut to at most `max_chars` characters, the last of them an ellipsis when anything was cut.
pub(crate) fn shorten(text: &str, max_chars: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max_chars) {
        None => Cow::Borrowed(text),
        Some(_) => {
            let keep = max_chars.saturating_sub(1);
            let end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
            Cow::Owned(format!("{}{ELLIPSIS}", &text[..end]))
        }
    }
}

/// A block of lines made safe to show: line breaks and tabs kept, every other control or format
/// character a visible escape.
pub(crate) fn block(text: &str) -> Cow<'_, str> {
    terminal_safe(text)
}

/// A text that stays on its line: line breaks and tabs escaped too.
pub(crate) fn line(text: &str) -> Cow<'_, str> {
    terminal_safe_line(text)
}

/// `text` escaped for HTML text and for a double- or single-quoted attribute value.
pub(crate) fn html_escape(text: &str) -> Cow<'_, str> {
    if !text.contains(['&', '<', '>', '"', '\'']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A block of lines, made safe and escaped for HTML.
pub(crate) fn html_block(text: &str) -> String {
    html_escape(&block(text)).into_owned()
}

/// A one-line text, made safe and escaped for HTML.
pub(crate) fn html_line(text: &str) -> String {
    html_escape(&line(text)).into_owned()
}

/// True for an absolute `http:` or `https:` URL without whitespace, control characters or quotes: the
/// only links a message or page carries (never `javascript:` or `data:`).
pub(crate) fn is_web_url(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    let scheme_ok = lower.starts_with("https://") || lower.starts_with("http://");
    let host_given = url.split_once("://").is_some_and(|(_, rest)| !rest.is_empty() && !rest.starts_with('/'));
    scheme_ok
        && host_given
        && !url.chars().any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
        && !url.chars().any(tollgate_agent_core::display::is_unsafe_for_terminal)
}

/// A span of time in the largest unit that states it exactly: `1h`, `90m`, `2d`, `45s`, `1500ms`.
pub(crate) fn duration(span: std::time::Duration) -> String {
    let millis = span.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    let units: [(&str, u128); 5] = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
    for (suffix, per_unit) in units {
        if millis.is_multiple_of(per_unit) {
            return format!("{}{suffix}", millis / per_unit);
        }
    }
    format!("{millis}ms")
}

/// A time for people: `2025-06-15 12:00 UTC` (minutes are enough for an expiry or a wait).
pub(crate) fn time(at: tollgate_agent_core::Millis) -> String {
    let stamp = tollgate_agent_core::rfc3339(at);
    match (stamp.get(..10), stamp.get(11..16)) {
        (Some(date), Some(clock)) if stamp.as_bytes().get(10) == Some(&b'T') => format!("{date} {clock} UTC"),
        _ => stamp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_cuts_at_a_character_boundary_with_an_ellipsis() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcd", 3), "ab…");
        assert_eq!(shorten("ééééé", 4), "ééé…");
        assert_eq!(shorten("🦀🦀🦀🦀", 2), "🦀…");
        assert_eq!(shorten("abc", 0), "…");
        assert!(matches!(shorten("short", 500), Cow::Borrowed(_)));
    }

    #[test]
    fn html_escape_covers_text_and_attributes() {
        assert_eq!(html_escape(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(html_line("a\u{202e}b\nc"), "a\\u{202e}b\\nc");
        assert_eq!(html_block("a\u{1b}[2K<b>\nc"), "a\\x1b[2K&lt;b&gt;\nc");
    }

    #[test]
    fn only_http_urls_are_links() {
        for good in
            ["https://tollgate.example.com/approve/t1.a.b", "http://127.0.0.1:8080/runs/x", "HTTPS://Example.com"]
        {
            assert!(is_web_url(good), "{good}");
        }
        for bad in [
            "javascript:alert(1)",
            "data:text/html,<b>",
            "https://",
            "https:///path",
            "ftp://example.com",
            "https://example.com/a b",
            "https://example.com/\"onclick",
            "https://example.com/\u{202e}",
            "/relative",
            "",
        ] {
            assert!(!is_web_url(bad), "{bad}");
        }
    }

    #[test]
    fn durations_and_times_read_plainly() {
        use std::time::Duration;
        assert_eq!(duration(Duration::from_secs(3_600)), "1h");
        assert_eq!(duration(Duration::from_secs(5_400)), "90m");
        assert_eq!(duration(Duration::from_secs(2 * 86_400)), "2d");
        assert_eq!(duration(Duration::from_millis(1_500)), "1500ms");
        assert_eq!(time(1_750_000_000_000), "2025-06-15 15:06 UTC");
    }
}
