//! Durations as config and docs/api.md write them: a whole number and a unit, `30s`, `15m`, `24h`, `30d`.

use std::time::Duration;

/// Parses `N` + `s` / `m` / `h` / `d`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || format!("`{text}` is not a duration like 30s, 15m, 24h or 30d");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    // At most 14 digits (the document's pattern says so): even days cannot overflow then.
    if number.len() > 14 {
        return Err(bad());
    }
    let n: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(seconds).map(Duration::from_secs).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_units_only() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        for bad in ["", "d", "30", "-1d", "1.5h", "30 d", "1w", "99999999999999999999d", "000000000000001s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
