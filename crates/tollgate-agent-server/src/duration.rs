//! Durations as config and docs/api.md write them: a whole number and a unit, `30s`, `15m`, `24h`, `30d`.

use std::time::Duration;

/// Parses `N` + `s` / `m` / `h` / `d`: the durations of the configuration
/// ([`tollgate_agent_protocol::parse_duration`]) as the API document's pattern narrows them (no `ms`, at
/// most 14 digits, so that even days cannot overflow).
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || format!("`{text}` is not a duration like 30s, 15m, 24h or 30d");
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    if digits > 14 || text.ends_with("ms") {
        return Err(bad());
    }
    tollgate_agent_protocol::parse_duration(text).map_err(|_| bad())
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
