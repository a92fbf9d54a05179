//! The one redactor: keeps configured secrets — provider keys, bearer tokens, webhook and data keys — out
//! of everything Tollgate stores, serves, prints or logs.
//!
//! A secret is replaced wherever it appears whole, and so is a recognisable fragment of it: the masked
//! echo providers print in their errors (`sk-PRO...3456`, `sk-proj-****3456`, `sk-…3456`), that is a mask
//! (`...`, `…`, or two or more `*`) with a prefix of the secret before it and a suffix after it — at least
//! [`MIN_FRAGMENT`] characters of the secret on the two sides together, at least one on each side that
//! has any. Both become [`REDACTED`].
//!
//! Secrets shorter than [`MIN_SECRET_LEN`] characters are not searched for: they would match ordinary
//! text. The redactor is applied at the boundaries (a tool's result, a run's error, every event before it
//! is stored, log lines), so what reaches the store, the API and the CLI is already clean.

use serde_json::Value;
use std::borrow::Cow;

/// What a secret or a fragment of one is replaced by.
pub const REDACTED: &str = "[redacted]";
/// Secrets shorter than this are not searched for.
pub const MIN_SECRET_LEN: usize = 8;
/// A masked echo must show at least this many characters of the secret to be taken for one.
pub const MIN_FRAGMENT: usize = 4;

/// The configured secrets, and the rule that finds them in text.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Redactor {
    /// Longest first, so a secret that contains another is replaced whole.
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    /// A redactor for these secrets (short and empty ones are dropped).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut secrets: Vec<String> =
            secrets.into_iter().map(Into::into).filter(|s| s.chars().count() >= MIN_SECRET_LEN).collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Self { secrets }
    }

    /// True when there is nothing to look for.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The length of the longest secret, in characters (0 with none).
    pub fn longest_secret(&self) -> usize {
        self.secrets.iter().map(|s| s.chars().count()).max().unwrap_or(0)
    }

    /// `text` with every secret and masked fragment of one replaced; borrowed when nothing was found.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.secrets.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out: Cow<'a, str> = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        if has_mask(&out) {
            let masked = self.redact_fragments(&out);
            if let Some(masked) = masked {
                out = Cow::Owned(masked);
            }
        }
        out
    }

    /// Redacts `text` in place.
    pub fn redact_string(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }

    /// Redacts every string in a JSON value (object keys included), in place.
    pub fn redact_value(&self, value: &mut Value) {
        if self.secrets.is_empty() {
            return;
        }
        match value {
            Value::String(text) => self.redact_string(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.redact_value(item)),
            Value::Object(map) => {
                let dirty_keys = map.keys().any(|k| matches!(self.redact(k), Cow::Owned(_)));
                if dirty_keys {
                    let entries = std::mem::take(map);
                    for (key, mut item) in entries {
                        self.redact_value(&mut item);
                        map.insert(self.redact(&key).into_owned(), item);
                    }
                } else {
                    map.values_mut().for_each(|item| self.redact_value(item));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Replaces `prefix MASK suffix` runs that show a fragment of a secret; `None` when there is none.
    fn redact_fragments(&self, text: &str) -> Option<String> {
        let mut out = String::with_capacity(text.len());
        let mut changed = false;
        let mut rest = text;
        while let Some((start, len)) = next_mask(rest) {
            let before = &rest[..start];
            let after = &rest[start + len..];
            let left_len = before.chars().rev().take_while(|c| is_token_char(*c)).map(char::len_utf8).sum::<usize>();
            let right_len = after.chars().take_while(|c| is_token_char(*c)).map(char::len_utf8).sum::<usize>();
            let left = &before[before.len() - left_len..];
            let right = &after[..right_len];
            if self.shows_fragment(left, right) {
                out.push_str(&before[..before.len() - left_len]);
                out.push_str(REDACTED);
                rest = &after[right_len..];
                changed = true;
            } else {
                out.push_str(&rest[..start + len]);
                rest = after;
            }
        }
        out.push_str(rest);
        changed.then_some(out)
    }

    fn shows_fragment(&self, left: &str, right: &str) -> bool {
        if left.len() + right.len() < MIN_FRAGMENT {
            return false;
        }
        self.secrets.iter().any(|secret| {
            let prefix_ok = left.is_empty() || (secret.starts_with(left) && left.len() < secret.len());
            let suffix_ok = right.is_empty() || (secret.ends_with(right) && right.len() < secret.len());
            prefix_ok && suffix_ok
        })
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

fn has_mask(text: &str) -> bool {
    text.contains("..") || text.contains('…') || text.contains("**")
}

/// The byte offset and length of the next mask run (`..`+, `…`+, `**`+) in `text`.
fn next_mask(text: &str) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let run = |unit: &[u8], min: usize| {
            let mut n = 0;
            while bytes[i + n * unit.len()..].starts_with(unit) {
                n += 1;
            }
            (n >= min).then_some(n * unit.len())
        };
        let found = match bytes[i] {
            b'.' => run(b".", 2),
            b'*' => run(b"*", 2),
            0xE2 => run("…".as_bytes(), 1),
            _ => None,
        };
        if let Some(len) = found {
            return Some((i, len));
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEY: &str = "sk-PROJ-abcdefghij123456";

    fn redactor() -> Redactor {
        Redactor::new([KEY, "tok-en-0987654321", "short"])
    }

    #[test]
    fn whole_secrets_are_replaced() {
        let r = redactor();
        assert_eq!(r.redact(&format!("key={KEY}; again {KEY}")), "key=[redacted]; again [redacted]");
        assert_eq!(r.redact("Bearer tok-en-0987654321"), "Bearer [redacted]");
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        assert_eq!(r.redact("short is too short to look for"), "short is too short to look for");
    }

    #[test]
    fn masked_echoes_are_replaced() {
        let r = redactor();
        for echo in ["sk-PRO...3456", "sk-PROJ-****3456", "sk-…3456", "sk-PROJ-ab**********", "...123456"] {
            let text = format!("Incorrect API key provided: {echo}. See the docs.");
            assert_eq!(r.redact(&text), "Incorrect API key provided: [redacted]. See the docs.", "{echo}");
        }
        for harmless in ["wait...", "a ** b", "sk-ABC...9999", "x...y", "loading…done"] {
            assert_eq!(r.redact(harmless), harmless);
        }
    }

    #[test]
    fn json_values_are_cleaned_everywhere() {
        let r = redactor();
        let mut value = json!({"error": {"message": format!("bad key {KEY}")}, "list": ["sk-PRO...3456", 7],
                               KEY: true});
        r.redact_value(&mut value);
        assert_eq!(
            value,
            json!({"error": {"message": "bad key [redacted]"}, "list": ["[redacted]", 7],
                                 "[redacted]": true})
        );
    }

    #[test]
    fn debug_shows_no_secret() {
        assert_eq!(format!("{:?}", redactor()), "Redactor(2 secrets)");
    }
}
