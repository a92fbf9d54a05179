//! Local mode's owner: with no `[[auth.tokens]]`, only the OS user who started the server may use it
//! (docs/api.md, "Authentication and roles").
//!
//! The invariant: with auth off, a `/v1` request (and `/metrics`) is served only on a connection the
//! kernel attributes to the server's own effective uid; every other connection — another user, root
//! when the server is not root's, or one whose user cannot be found out — gets 403 `forbidden` naming
//! why. The server listens on TCP only, and only on loopback with auth off, so the attribution is the
//! kernel's socket table: the row of `/proc/net/tcp` (or `tcp6`) whose local address is the peer's
//! address and port and whose remote address is ours is the client's own socket, and its `uid` column
//! is the user who created it. Two connections cannot share that pair of addresses, so a user cannot
//! pass for another. A row with no inode is a socket its process already closed (an orphan, or a
//! `TIME_WAIT` entry), whose `uid` the kernel may print as 0: such a connection is refused, or a user
//! could send a request, close at once and pass for root. It is looked up once per connection, when it
//! is accepted, off the async workers.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// The kernel's tables of TCP sockets in this network namespace, IPv4 then IPv6.
const TCP_TABLES: [&str; 2] = ["/proc/net/tcp", "/proc/net/tcp6"];

/// The user who owns a server running without tokens: the effective uid of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    uid: u32,
}

impl Owner {
    /// The user this process runs as.
    pub(crate) fn of_this_process() -> Self {
        Self { uid: rustix::process::geteuid().as_raw() }
    }

    /// Whether the TCP connection from `peer` to our `local` address may use the API. The kernel's
    /// socket tables are read on a blocking thread, so a large table holds up no other connection.
    pub(crate) async fn judge_connection(self, peer: SocketAddr, local: io::Result<SocketAddr>) -> Verdict {
        let local = match local {
            Ok(local) => local,
            Err(e) => return self.judge(Err(format!("the connection's own address is unknown: {e}"))),
        };
        match tokio::task::spawn_blocking(move || self.judge_tcp(peer, local)).await {
            Ok(verdict) => verdict,
            Err(e) => self.judge(Err(format!("looking it up failed: {e}"))),
        }
    }

    /// [`Owner::judge_connection`], on this thread.
    fn judge_tcp(self, peer: SocketAddr, local: SocketAddr) -> Verdict {
        self.judge(tcp_peer_uid(peer, local))
    }

    /// The verdict for a connection whose user is `found` (or could not be found out, and why).
    fn judge(self, found: Result<u32, String>) -> Verdict {
        let owner = self.uid;
        match found {
            Ok(uid) if uid == owner => Verdict::Owner,
            Ok(uid) => Verdict::Refused(Arc::from(format!(
                "this server has no tokens configured, so only the user who started it (uid {owner}) may use it; \
                 this connection is from uid {uid} (configure [[auth.tokens]] to let other users in)"
            ))),
            Err(why) => Verdict::Refused(Arc::from(format!(
                "this server has no tokens configured, so only the user who started it (uid {owner}) may use it, \
                 and the user of this connection cannot be told: {why}"
            ))),
        }
    }
}

/// Whether one connection to a server without tokens may use the API: decided when it is accepted,
/// carried on each of its requests (as a request extension) to [`crate::auth`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The connection is the owner's: its requests act as `local`.
    Owner,
    /// Anyone else's, or nobody knows whose: its requests get 403 with this detail.
    Refused(Arc<str>),
}

/// The uid of the socket at the other end of the TCP connection from `peer` to our `local` address.
fn tcp_peer_uid(peer: SocketAddr, local: SocketAddr) -> Result<u32, String> {
    let wanted = (unmapped(peer), unmapped(local));
    let mut unreadable = Vec::new();
    for table in TCP_TABLES {
        match find_in_table(table, wanted) {
            Ok(Some(row)) if row.inode == 0 => {
                return Err(format!("the client's socket ({peer}) was closed before its user could be read"));
            }
            Ok(Some(row)) => return Ok(row.uid),
            Ok(None) => {}
            // `tcp6` is missing on a kernel without IPv6; the other table may still have the row.
            Err(e) => unreadable.push(format!("cannot read {table}: {e}")),
        }
    }
    if unreadable.len() == TCP_TABLES.len() {
        return Err(unreadable.join("; "));
    }
    Err(format!("no socket from {peer} to {local} is in {}", TCP_TABLES.join(" or ")))
}

fn find_in_table(table: &str, wanted: (SocketAddr, SocketAddr)) -> io::Result<Option<SocketRow>> {
    let mut lines = BufReader::new(File::open(table)?);
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        if let Some(row) = SocketRow::parse(&line)
            && (unmapped(row.local), unmapped(row.remote)) == wanted
        {
            return Ok(Some(row));
        }
    }
}

/// One row of `/proc/net/tcp` or `/proc/net/tcp6`: the socket's own address, the address it is
/// connected to, the user who created it, and its inode (0 once no process holds it).
#[derive(Debug, PartialEq, Eq)]
struct SocketRow {
    local: SocketAddr,
    remote: SocketAddr,
    uid: u32,
    inode: u64,
}

impl SocketRow {
    /// `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode …`;
    /// `None` for the header or anything else that is not such a row.
    fn parse(line: &str) -> Option<Self> {
        let mut fields = line.split_whitespace();
        let _slot = fields.next()?.strip_suffix(':')?;
        let local = parse_address(fields.next()?)?;
        let remote = parse_address(fields.next()?)?;
        let uid = fields.nth(4)?.parse().ok()?;
        let inode = fields.nth(1)?.parse().ok()?;
        Some(Self { local, remote, uid, inode })
    }
}

/// `HEX_ADDRESS:HEX_PORT`. The kernel prints an address as 32-bit words in the machine's byte order
/// (one word for IPv4, four for IPv6) and the port as a number.
fn parse_address(text: &str) -> Option<SocketAddr> {
    let (address, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |hex: &str| u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes);
    let ip = match address.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(address)?)),
        32 => {
            let mut octets = [0u8; 16];
            for (i, chunk) in octets.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(address.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`, an IPv6 socket talking IPv4) as the IPv4 address it
/// is, so that both ends' spellings compare equal.
fn unmapped(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines as a little-endian kernel prints them (this machine's and CI's).
    #[cfg(target_endian = "little")]
    #[test]
    fn rows_of_both_tables_are_read_with_mapped_addresses() {
        let v4 = "   3: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 123456 1 0000000000000000 20 4 30 10 -1";
        assert_eq!(
            SocketRow::parse(v4),
            Some(SocketRow {
                local: "127.0.0.1:41394".parse().unwrap_or_else(|e| panic!("{e}")),
                remote: "127.0.0.1:8080".parse().unwrap_or_else(|e| panic!("{e}")),
                uid: 1000,
                inode: 123456,
            })
        );
        let v6 = "   0: 00000000000000000000000001000000:C350 00000000000000000000000001000000:1F90 01 00000000:00000000 00:00000000 00000000 65534        0 2345 1 0000000000000000 20 4 0 10 -1";
        let row = SocketRow::parse(v6).unwrap_or_else(|| panic!("an IPv6 row"));
        assert_eq!((row.local, row.remote, row.uid), (sock("[::1]:50000"), sock("[::1]:8080"), 65534));
        // An IPv6 client socket connected to an IPv4 server: both ends as mapped addresses.
        let mapped = "   1: 0000000000000000FFFF00000100007F:D431 0000000000000000FFFF00000100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 7 1 0000000000000000 20 4 0 10 -1";
        let row = SocketRow::parse(mapped).unwrap_or_else(|| panic!("a mapped row"));
        assert_eq!(row.local, sock("[::ffff:127.0.0.1]:54321"));
        assert_eq!((unmapped(row.local), unmapped(row.remote)), (sock("127.0.0.1:54321"), sock("127.0.0.1:8080")));
        assert_eq!(row.uid, 0);
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";
        assert_eq!(SocketRow::parse(header), None);
        assert_eq!(SocketRow::parse("   4: 0100007F:1F90 0100007F"), None, "a cut row is no row");
        // A socket its process closed: no inode, and (TIME_WAIT) uid 0 whoever made it.
        let closed = "   5: 0100007F:C926 0100007F:1F90 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000";
        assert_eq!(SocketRow::parse(closed).map(|row| (row.uid, row.inode)), Some((0, 0)));
    }

    fn sock(text: &str) -> SocketAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_real_loopback_connection_is_attributed_to_this_process_s_user() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let local = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let _client = std::net::TcpStream::connect(local).unwrap_or_else(|e| panic!("{e}"));
        let (_accepted, peer) = listener.accept().unwrap_or_else(|e| panic!("{e}"));
        let owner = Owner::of_this_process();
        assert_eq!(tcp_peer_uid(peer, local), Ok(owner.uid));
        assert_eq!(owner.judge_tcp(peer, local), Verdict::Owner);
        // A connection that is not in the table (long gone, or never made) is refused, not let in.
        let gone = SocketAddr::new(peer.ip(), 1);
        let Verdict::Refused(why) = owner.judge_tcp(gone, local) else { panic!("an unknown peer is refused") };
        assert!(why.contains("cannot be told") && why.contains(&format!("from {gone}")), "{why}");
        // A client that sent its request and closed at once: its socket has no owner left to read (the
        // kernel may print uid 0 for it), so it is refused rather than taken for root.
        let closing = std::net::TcpStream::connect(local).unwrap_or_else(|e| panic!("{e}"));
        drop(closing);
        let (_accepted, peer) = listener.accept().unwrap_or_else(|e| panic!("{e}"));
        let Verdict::Refused(why) = owner.judge_tcp(peer, local) else { panic!("a closed client is refused") };
        assert!(why.contains("was closed before its user could be read"), "{why}");
    }

    #[test]
    fn only_the_owner_s_uid_is_let_in_root_included() {
        let owner = Owner { uid: 1000 };
        assert_eq!(owner.judge(Ok(1000)), Verdict::Owner);
        for other in [0, 65534, 1001] {
            let Verdict::Refused(why) = owner.judge(Ok(other)) else { panic!("uid {other} is not the owner") };
            assert!(why.contains("(uid 1000)") && why.contains(&format!("from uid {other} ")), "{why}");
        }
    }
}
