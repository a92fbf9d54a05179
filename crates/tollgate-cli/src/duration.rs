//! Durations as people type them in Tollgate: a whole number and one unit, `30s`, `15m`, `24h`, `30d`.
//! Written back the same way.

use std::time::Duration;

/// Parses `N` followed by `s`, `m`, `h` or `d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration `{text}`: expected a number and a unit, e.g. 30s, 15m, 24h, 30d");
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(invalid)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(invalid()),
    };
    number.checked_mul(seconds).map(Duration::from_secs).ok_or_else(invalid)
}

/// A duration as [`parse_duration`] reads it, in the largest unit that divides it: `8h`, `90m`, `30d`,
/// `45s`.
pub fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        s if s > 0 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_in_the_largest_unit_that_divides_it() {
        for (seconds, text) in [(28_800, "8h"), (5400, "90m"), (2_592_000, "30d"), (45, "45s"), (0, "0s")] {
            assert_eq!(format_duration(Duration::from_secs(seconds)), text);
            assert_eq!(parse_duration(text), Ok(Duration::from_secs(seconds)));
        }
    }

    #[test]
    fn units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(2_592_000)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_anything_else() {
        for bad in ["", "30", "d", "1.5h", "-1d", "3w", "1d2h", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
