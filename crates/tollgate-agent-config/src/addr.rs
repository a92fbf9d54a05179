//! Listen addresses (`server.addr`, `serve --addr`): `IP:PORT`, or `localhost:PORT` for `127.0.0.1:PORT`.
//! Host names other than `localhost` are refused rather than resolved, so loading a config never touches
//! DNS and the server can tell a loopback address from a public one.

use std::net::{Ipv4Addr, SocketAddr};

/// A text that is not a listen address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(r#"expected an address like "127.0.0.1:8080" or "[::1]:8080", got {text:?}"#)]
pub struct AddrError {
    /// The text as given.
    pub text: String,
}

/// Parses `IP:PORT` (`127.0.0.1:8080`, `0.0.0.0:80`, `[::1]:8080`) or `localhost:PORT`.
///
/// ```
/// use tollgate_agent_config::parse_addr;
/// assert_eq!(parse_addr("localhost:8080").map(|a| a.to_string()), Ok("127.0.0.1:8080".to_owned()));
/// assert!(parse_addr("example.com:80").is_err());
/// ```
pub fn parse_addr(text: &str) -> Result<SocketAddr, AddrError> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    text.strip_prefix("localhost:")
        .and_then(|port| port.parse::<u16>().ok())
        .map(|port| SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .ok_or_else(|| AddrError { text: text.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ip_and_port_or_localhost() {
        for (text, expected) in [
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("0.0.0.0:80", "0.0.0.0:80"),
            ("[::1]:8080", "[::1]:8080"),
            ("localhost:9000", "127.0.0.1:9000"),
        ] {
            assert_eq!(parse_addr(text).map(|a| a.to_string()), Ok(expected.to_owned()), "{text}");
        }
    }

    #[test]
    fn refuses_the_rest() {
        for text in ["", "8080", "127.0.0.1", "127.0.0.1:99999", "localhost", "localhost:http", "example.com:80"] {
            assert_eq!(parse_addr(text), Err(AddrError { text: text.to_owned() }), "{text}");
        }
    }
}
