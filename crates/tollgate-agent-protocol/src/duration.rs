//! Durations as people type them in Tollgate: a whole number and one unit — `500ms`, `30s`, `15m`, `24h`,
//! `30d`. No fractions, signs, spaces inside, or compound forms (`1h30m`), so a value reads one way only.
//! The config file, the CLI and the event log (`approval_escalated`'s `after`) share this one parser and
//! its inverse.

use std::time::Duration;

/// The units a duration may carry, longest suffix first so that `ms` is not read as minutes.
const UNITS: [(&str, u64, u64); 5] = [
    // (suffix, seconds per unit, milliseconds per unit)
    ("ms", 0, 1),
    ("s", 1, 1_000),
    ("m", 60, 60_000),
    ("h", 3_600, 3_600_000),
    ("d", 86_400, 86_400_000),
];

/// What a duration must look like, as error messages say it.
pub const EXPECTED_DURATION: &str = r#"a duration like "30s", "15m", "24h" or "30d""#;

/// A text that is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a whole number followed by one of the units `ms`, `s`, `m`, `h`, `d`.
    #[error("expected {EXPECTED_DURATION}, got {text:?}")]
    Invalid {
        /// The text as given.
        text: String,
    },
    /// Well formed, but too large to represent.
    #[error("expected {EXPECTED_DURATION}, got {text:?}, which is too long")]
    TooLarge {
        /// The text as given.
        text: String,
    },
}

/// Parses `N` followed by `ms`, `s`, `m`, `h` or `d` (e.g. `30s`, `15m`, `24h`, `30d`); surrounding
/// whitespace is ignored and `0s` is allowed (callers that need a positive duration check for it).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tollgate_agent_protocol::parse_duration("15m"), Ok(Duration::from_secs(900)));
/// assert!(tollgate_agent_protocol::parse_duration("1.5h").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid { text: text.to_owned() };
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !c.is_ascii_digit()).ok_or_else(invalid)?;
    let (number, unit) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(invalid());
    }
    let (_, seconds, millis) = UNITS.iter().find(|(suffix, _, _)| *suffix == unit).ok_or_else(invalid)?;
    let number: u64 = number.parse().map_err(|_| DurationError::TooLarge { text: text.to_owned() })?;
    let too_large = || DurationError::TooLarge { text: text.to_owned() };
    if *seconds == 0 {
        Ok(Duration::from_millis(number.checked_mul(*millis).ok_or_else(too_large)?))
    } else {
        Ok(Duration::from_secs(number.checked_mul(*seconds).ok_or_else(too_large)?))
    }
}

/// Writes a duration in the largest unit that represents it exactly (`30d`, `90m`, `1500ms`), the inverse
/// of [`parse_duration`]. Below a millisecond the value is rounded down to whole milliseconds.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tollgate_agent_protocol::format_duration(Duration::from_secs(2_592_000)), "30d");
/// ```
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    for (suffix, _, per_unit) in UNITS.iter().rev() {
        let per_unit = u128::from(*per_unit);
        if millis.is_multiple_of(per_unit) {
            return format!("{}{suffix}", millis / per_unit);
        }
    }
    format!("{millis}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(2_592_000)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration(" 7d "), Ok(Duration::from_secs(7 * 86_400)));
    }

    #[test]
    fn rejects_anything_else() {
        for bad in ["", "30", "s", "d", "1.5h", "-1d", "+1d", "3w", "1d2h", "30 s", "30S", "1e3s", "٣s"] {
            assert_eq!(parse_duration(bad), Err(DurationError::Invalid { text: bad.to_owned() }), "{bad:?}");
        }
    }

    #[test]
    fn rejects_overflow() {
        for big in ["99999999999999999999d", "999999999999999999d", "18446744073709551615ms0"] {
            assert!(parse_duration(big).is_err(), "{big}");
        }
        assert!(matches!(parse_duration("999999999999999999d"), Err(DurationError::TooLarge { .. })));
    }

    #[test]
    fn error_message_shows_what_is_expected() {
        assert_eq!(
            parse_duration("soon").map_err(|e| e.to_string()),
            Err(r#"expected a duration like "30s", "15m", "24h" or "30d", got "soon""#.to_owned())
        );
    }

    #[test]
    fn formats_in_the_largest_exact_unit() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(1_500), "1500ms"),
            (Duration::from_secs(45), "45s"),
            (Duration::from_secs(5_400), "90m"),
            (Duration::from_secs(86_400), "1d"),
            (Duration::from_secs(90_000), "25h"),
        ];
        for (duration, text) in cases {
            assert_eq!(format_duration(duration), text);
            assert_eq!(parse_duration(text), Ok(duration));
        }
        assert_eq!(format_duration(Duration::from_micros(1_500)), "1ms");
    }
}
