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
    sha256_hex(to_canonical_string(value).as_bytes())
}

fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(item, out);
            }
            out.push('}');
        }
    }
}

fn write_number(n: &serde_json::Number, out: &mut String) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        write_f64(f, out);
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

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
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
