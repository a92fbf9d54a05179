//! Canonical JSON (RFC 8785, the JSON Canonicalization Scheme) and the sha256 digests built on it.
//!
//! Digests that a person's decision or an audit record depends on (`turn_digest`, schema hashes, the event
//! hash chain) must not change with key order or number spelling, so they are computed over this form:
//! object keys sorted by UTF-16 code units, no whitespace, numbers in ECMAScript notation.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// The RFC 8785 canonical text of a JSON value.
pub fn to_canonical_string(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

/// Lowercase hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Lowercase hex sha256 of the canonical text of a value.
pub fn canonical_sha256(value: &Value) -> String {
    let mut hasher = Hashing(Sha256::new());
    write_value(value, &mut hasher);
    hex::encode(hasher.0.finalize())
}

/// Where canonical text goes: a string, or straight into a digest (no text is kept).
pub(crate) trait Sink {
    /// Appends text.
    fn push_str(&mut self, text: &str);
}

impl Sink for String {
    fn push_str(&mut self, text: &str) {
        String::push_str(self, text);
    }
}

/// Canonical text fed to a sha256 as it is written.
pub(crate) struct Hashing(pub(crate) Sha256);

impl Sink for Hashing {
    fn push_str(&mut self, text: &str) {
        self.0.update(text.as_bytes());
    }
}

/// Writes `value`'s canonical text.
pub(crate) fn write_value(value: &Value, out: &mut impl Sink) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push_str("[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(",");
                }
                write_value(item, out);
            }
            out.push_str("]");
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // UTF-16 code unit order; for ASCII keys (nearly all) that is plain byte order.
            if entries.iter().all(|(key, _)| key.is_ascii()) {
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            } else {
                entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            }
            out.push_str("{");
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(",");
                }
                write_string(key, out);
                out.push_str(":");
                write_value(item, out);
            }
            out.push_str("}");
        }
    }
}

fn write_number(n: &serde_json::Number, out: &mut impl Sink) {
    if let Some(i) = n.as_i64() {
        out.push_str(&i.to_string());
    } else if let Some(u) = n.as_u64() {
        out.push_str(&u.to_string());
    } else if let Some(f) = n.as_f64() {
        let mut text = String::new();
        write_f64(f, &mut text);
        out.push_str(&text);
    } else {
        out.push_str(&n.to_string());
    }
}

/// ECMAScript's Number::toString for finite doubles (JSON has no NaN or infinity).
fn write_f64(f: f64, out: &mut String) {
    if f == 0.0 {
        out.push('0');
        return;
    }
    // `{:e}` gives the shortest round-trip digits: "d.ddde±x".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    let n = exp + 1; // position of the decimal point relative to the digits
    if f < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        let _ = write!(out, "{}", (n - 1).abs());
    }
}

/// Writes a JSON string: runs of characters that need no escape go out whole.
pub(crate) fn write_string(s: &str, out: &mut impl Sink) {
    out.push_str("\"");
    let mut plain = 0;
    for (i, byte) in s.bytes().enumerate() {
        // Only ASCII bytes are escaped, and those never occur inside a multi-byte character.
        let escape = match byte {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            0x08 => Some("\\b"),
            0x0C => Some("\\f"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x00..=0x1F => None,
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        match escape {
            Some(escape) => out.push_str(escape),
            None => out.push_str(&format!("\\u{byte:04x}")),
        }
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push_str("\"");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sorts_keys_by_utf16_and_drops_whitespace() {
        let v = json!({"b": 1, "a": [true, null, "x"], "\u{e9}": 2, "\u{1f600}": 3, "\u{ff61}": 4});
        // U+1F600 is a surrogate pair (0xD83D...) and sorts before U+FF61 in UTF-16 order.
        assert_eq!(
            to_canonical_string(&v),
            "{\"a\":[true,null,\"x\"],\"b\":1,\"\u{e9}\":2,\"\u{1f600}\":3,\"\u{ff61}\":4}"
        );
    }

    #[test]
    fn numbers_follow_ecmascript() {
        let cases = [
            (json!(1.0), "1"),
            (json!(-0.0), "0"),
            (json!(1.5), "1.5"),
            (json!(1e21), "1e+21"),
            (json!(1e20), "100000000000000000000"),
            (json!(0.000001), "0.000001"),
            (json!(0.0000001), "1e-7"),
            (json!(-123.456), "-123.456"),
            (json!(4.5e-10), "4.5e-10"),
            (json!(u64::MAX), "18446744073709551615"),
        ];
        for (value, text) in cases {
            assert_eq!(to_canonical_string(&value), text, "{value:?}");
        }
    }

    #[test]
    fn escapes_control_characters() {
        assert_eq!(to_canonical_string(&json!("a\"\\\n\u{1}")), "\"a\\\"\\\\\\n\\u0001\"");
    }

    #[test]
    fn digest_ignores_key_order() {
        assert_eq!(canonical_sha256(&json!({"a": 1, "b": 2})), canonical_sha256(&json!({"b": 2, "a": 1})));
        assert_ne!(canonical_sha256(&json!({"a": 1})), canonical_sha256(&json!({"a": 2})));
    }
}
