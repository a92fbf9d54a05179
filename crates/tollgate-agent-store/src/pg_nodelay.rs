//! `TCP_NODELAY` on the PostgreSQL store's connections, which sqlx does not set.
//!
//! Without it a statement whose message is longer than one TLS record (16 KiB of plaintext: a run
//! with a large tool result, a grouped write) waits about 40 ms before the server sees all of it.
//! sqlx hands rustls a socket that writes one record per system call; the first record leaves at once,
//! Nagle's algorithm holds each further one until the first is acknowledged, and the server, which
//! cannot answer an incomplete message, acknowledges only when its delayed-acknowledgement timer
//! fires. PostgreSQL sets the option on its side of every connection; libpq does on the client's.
//!
//! sqlx gives no access to its socket, and this workspace has no `unsafe` code to borrow a raw file
//! descriptor with. So once a connection is open the store looks for it among the process's sockets:
//! each descriptor listed in `/proc/self/fd` is duplicated with `pidfd_getfd(2)` (an owned copy of
//! the same socket, so the option set on the copy is the socket's), and every TCP socket whose peer is
//! the server's port gets the option (setting it on one that has it already changes nothing). This is
//! Linux only, needs kernel 5.6, and is best effort: where it cannot be done (another system, a
//! seccomp profile without `pidfd_getfd`) the connection works as before, and a debug line says why.

#[cfg(target_os = "linux")]
mod linux {
    use rustix::fd::OwnedFd;
    use rustix::net::SocketAddrAny;
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};
    use std::collections::HashSet;
    use std::io;
    use std::net::SocketAddr;

    /// A socket's IP address and port, if it is an IP socket.
    pub(crate) fn inet(address: Option<SocketAddrAny>) -> Option<SocketAddr> {
        SocketAddr::try_from(address?).ok()
    }

    /// This process's connected TCP sockets whose peer's port is `port`, as duplicates of their
    /// descriptors. Blocks on `/proc`: call it off the async workers.
    #[cfg(test)]
    pub(crate) fn tcp_sockets_to(port: u16) -> io::Result<Vec<OwnedFd>> {
        let mut found = Vec::new();
        each_tcp_socket_to(port, |fd| {
            found.push(fd);
            Ok(())
        })?;
        Ok(found)
    }

    /// Calls `each` once per connected TCP socket of this process whose peer's port is `port`, with a
    /// duplicate of its descriptor. The descriptors are listed first: the duplicates are descriptors
    /// too, and a listing read while they are made would show them, to be duplicated again without
    /// end. A socket is known by its inode, not its descriptor: another thread's scan holds duplicates
    /// of the same sockets for a moment, and those are not sockets of their own.
    fn each_tcp_socket_to(port: u16, mut each: impl FnMut(OwnedFd) -> io::Result<()>) -> io::Result<()> {
        let pidfd = pidfd_open(getpid(), PidfdFlags::empty())?;
        let mut numbers = Vec::new();
        for entry in std::fs::read_dir("/proc/self/fd")? {
            if let Some(number) = entry?.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) {
                numbers.push(number);
            }
        }
        let mut seen = HashSet::new();
        for number in numbers {
            // A descriptor closed since the listing, or not a socket: not one of ours to look at.
            let Ok(fd) = pidfd_getfd(&pidfd, number, PidfdGetfdFlags::empty()) else { continue };
            let Some(peer) = rustix::net::getpeername(&fd).ok().and_then(inet) else { continue };
            if peer.port() != port
                || rustix::net::sockopt::socket_type(&fd).ok() != Some(rustix::net::SocketType::STREAM)
            {
                continue;
            }
            let Ok(stat) = rustix::fs::fstat(&fd) else { continue };
            if seen.insert((stat.st_dev, stat.st_ino)) {
                each(fd)?;
            }
        }
        Ok(())
    }

    /// Sets `TCP_NODELAY` on every TCP socket of this process connected to port `port`; answers how
    /// many did not have it.
    pub(crate) fn set_nodelay_to(port: u16) -> io::Result<usize> {
        let mut set = 0;
        each_tcp_socket_to(port, |socket| {
            if !rustix::net::sockopt::tcp_nodelay(&socket)? {
                rustix::net::sockopt::set_tcp_nodelay(&socket, true)?;
                set += 1;
            }
            Ok(())
        })?;
        Ok(set)
    }
}

/// Sets `TCP_NODELAY` on this process's connections to the PostgreSQL server on `port` (see the
/// module's documentation), on a blocking thread. Never fails: a reason it could not is logged.
pub(crate) async fn set_nodelay_to(port: u16) {
    #[cfg(target_os = "linux")]
    match tokio::task::spawn_blocking(move || linux::set_nodelay_to(port)).await {
        Ok(Ok(set)) => tracing::trace!(port, set, "TCP_NODELAY set on the connections to PostgreSQL"),
        Ok(Err(error)) => tracing::debug!(port, %error, "cannot set TCP_NODELAY on the connections to PostgreSQL"),
        Err(error) => tracing::debug!(port, %error, "the task setting TCP_NODELAY failed"),
    }
    #[cfg(not(target_os = "linux"))]
    tracing::debug!(port, "TCP_NODELAY is not set on the connections to PostgreSQL on this system");
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::linux::{inet, tcp_sockets_to};
    use crate::postgres::{PostgresStore, ScratchSchema};

    /// The connection a store's statement runs on has `TCP_NODELAY`, found by the local port the
    /// server reports for that very connection (sqlx itself leaves the option off).
    #[tokio::test]
    async fn a_store_statement_runs_on_a_connection_with_nodelay() {
        let Some(base) = tollgate_agent_testkit::postgres_url() else { return };
        let schema = ScratchSchema::create(&base, "tollgate_nodelay").await.unwrap_or_else(|e| panic!("{e}"));
        let store = PostgresStore::open(&schema.url()).await.unwrap_or_else(|e| panic!("{e}"));
        let port: i32 = store.client_port().await.unwrap_or_else(|e| panic!("{e}"));
        let server_port = url::port_of(&base);
        let sockets = tokio::task::spawn_blocking(move || tcp_sockets_to(server_port))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("cannot list this process's sockets: {e}"));
        // Only the sockets that were there, each once: holding the duplicates, the listing does not
        // find them too, nor a socket twice through another test's scan (its duplicates for a moment).
        let descriptors = std::fs::read_dir("/proc/self/fd").map(Iterator::count).unwrap_or_else(|e| panic!("{e}"));
        assert!(sockets.len() < descriptors, "{} sockets among {descriptors} descriptors", sockets.len());
        let inodes: std::collections::HashSet<_> = sockets
            .iter()
            .map(|fd| rustix::fs::fstat(fd).map(|stat| stat.st_ino).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        assert_eq!(inodes.len(), sockets.len(), "a socket was found twice");
        let local_port =
            |fd: &rustix::fd::OwnedFd| inet(rustix::net::getsockname(fd).ok()).map(|address| i32::from(address.port()));
        let ours: Vec<_> = sockets.iter().filter(|fd| local_port(fd) == Some(port)).collect();
        assert_eq!(ours.len(), 1, "one of the {} sockets to the server has local port {port}", sockets.len());
        assert!(rustix::net::sockopt::tcp_nodelay(ours[0]).unwrap_or_else(|e| panic!("{e}")), "TCP_NODELAY is off");
        store.close().await;
        schema.drop_all().await.unwrap_or_else(|e| panic!("{e}"));
    }

    mod url {
        /// The port of a `postgres://` URL (5432 when it names none).
        pub(super) fn port_of(url: &str) -> u16 {
            let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap_or_else(|e| panic!("{e}"));
            options.get_port()
        }
    }
}
