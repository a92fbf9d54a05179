//! Secret values (bearer tokens, API keys, webhook secrets, MCP server env values). A [`Secret`] never
//! shows itself through `Debug` or `Display`, so a config can be logged or printed in an error whole.

use std::fmt;

/// A secret string, resolved from `env:NAME` or given literally. `Debug` and `Display` print `***`; the value
/// is reachable only through [`Secret::expose`].
///
/// ```
/// use tollgate_agent_config::Secret;
/// let token = Secret::new("s3cr3t");
/// assert_eq!(format!("{token} {token:?}"), "*** ***");
/// assert_eq!(token.expose(), "s3cr3t");
/// ```
#[derive(Clone, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself. Call it where the value is used (a header, a comparison), never to print it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the value is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Compares with `candidate` in time that does not depend on where they first differ (it does depend on
    /// the lengths), for checking a presented bearer token.
    pub fn matches(&self, candidate: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), candidate.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.matches(&other.0)
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_value() {
        let secret = Secret::new("hunter2");
        assert_eq!(secret.to_string(), "***");
        assert_eq!(format!("{secret:?}"), "***");
        assert_eq!(format!("{:?}", Some(&secret)), "Some(***)");
    }

    #[test]
    fn compares_by_value() {
        let secret = Secret::new("hunter2");
        assert!(secret.matches("hunter2"));
        assert!(!secret.matches("hunter3"));
        assert!(!secret.matches("hunter"));
        assert!(!secret.matches(""));
        assert_eq!(secret, Secret::new("hunter2"));
        assert_ne!(secret, Secret::new("other"));
        assert!(Secret::default().is_empty());
    }
}
