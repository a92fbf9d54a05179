//! `shell` with the network off: no socket of any family leaves the sandbox. Real processes against real
//! listeners of this test: PostgreSQL through its Unix socket (the attack of issue 31), UDP, TCP, a Unix
//! socket by path and an abstract one, and io_uring — each refused inside the sandbox while the same
//! command outside it (`[sandbox] mode = "off"`, or the network on) gets through, so the sandbox is what
//! stopped it. Ordinary commands, pipes and socket pairs still work.
//!
//! The tests skip, saying why, only where the kernel has no Landlock or this machine lacks `python3` or
//! a local PostgreSQL; with `CI` set a missing `python3`, `psql` or PostgreSQL fails them instead.

use crate::support::{Fixture, assert_refused, call};
use serde_json::{Value, json};
use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::Path;
use std::sync::Arc;
use tollgate_agent_core::{IntoTool, Tool, ToolOutput};
use tollgate_agent_tools::{SandboxMode, SandboxSupport, SeccompSupport, Shell, ShellOptions, Workspace};

/// PostgreSQL's socket folder on this machine (Debian's).
const POSTGRES_SOCKET_DIR: &str = "/var/run/postgresql";

fn shell_with(fx: &Fixture, sandbox: SandboxMode, network: bool) -> Arc<dyn Tool> {
    Shell::with_options(Workspace::new(&fx.root), ShellOptions { sandbox, network }).into_tool()
}

/// The default tool (sandbox `auto`, network off), the same command unconfined, and with the network on.
struct Shells {
    closed: Arc<dyn Tool>,
    unconfined: Arc<dyn Tool>,
    network_on: Arc<dyn Tool>,
}

impl Shells {
    fn new(fx: &Fixture) -> Self {
        Self {
            closed: fx.tool("shell"),
            unconfined: shell_with(fx, SandboxMode::Off, false),
            network_on: shell_with(fx, SandboxMode::Auto, true),
        }
    }
}

/// True when this machine confines sockets fully (Landlock and the seccomp filter); otherwise says why the
/// test is skipped — or, in CI, fails it when only the filter is missing.
fn sandbox_here() -> bool {
    match tollgate_agent_tools::sandbox_support() {
        SandboxSupport::Full { .. } => true,
        SandboxSupport::Unavailable { reason } => {
            println!("skipped: no Landlock on this machine ({reason})");
            false
        }
        partial @ SandboxSupport::Partial { .. } => {
            assert!(std::env::var_os("CI").is_none(), "CI runs on a kernel the sandbox fully confines: {partial}");
            println!("skipped: {partial}");
            false
        }
    }
}

/// `name` in a system folder the sandbox lets a command run from (a `python3` under `/root/.pyenv` would be
/// out of its reach), or `None`, said, when this machine lacks it. In CI a missing program fails the test.
fn system_program(name: &str) -> Option<String> {
    let found =
        ["/usr/local/bin", "/usr/bin", "/bin"].iter().map(|dir| Path::new(dir).join(name)).find(|p| p.is_file());
    match found {
        Some(path) => Some(path.display().to_string()),
        None if std::env::var_os("CI").is_some() => panic!("CI must have {name} in /usr/bin or /usr/local/bin"),
        None => {
            println!("skipped: no {name} in /usr/bin or /usr/local/bin");
            None
        }
    }
}

/// A workspace, its shells and `python3`, where this machine can run a sandboxed network test; `None`
/// (said, or a failure in CI) where it cannot.
fn with_python() -> Option<(Fixture, Shells, String)> {
    if !sandbox_here() {
        return None;
    }
    let python3 = system_program("python3")?;
    let fx = Fixture::new();
    let shells = Shells::new(&fx);
    Some((fx, shells, python3))
}

async fn run(tool: &Arc<dyn Tool>, argv: Value) -> ToolOutput {
    call(tool, json!({"argv": argv, "timeout_secs": 20})).await
}

/// `python3 -c code` through `env` (a program named by an absolute path would be taken for a workspace
/// path).
fn python(python3: &str, code: &str) -> Value {
    json!(["env", python3, "-c", code])
}

/// Asserts a sandboxed command failed because the filter refused its socket.
fn assert_refused_socket(out: &ToolOutput, what: &str) {
    assert!(out.is_error, "{what} ran: {out:?}");
    assert!(out.content.contains("Operation not permitted"), "{what} failed otherwise: {out:?}");
}

#[tokio::test]
async fn psql_cannot_reach_postgresql_through_its_unix_socket() {
    if !sandbox_here() {
        return;
    }
    let Some(psql) = system_program("psql") else { return };
    let fx = Fixture::new();
    let shells = Shells::new(&fx);
    let query = json!(["env", psql, "-h", POSTGRES_SOCKET_DIR, "-U", "postgres", "-d", "test", "-tAc", "select 4242"]);

    let outside = run(&shells.unconfined, query.clone()).await;
    if outside.is_error || !outside.content.contains("4242") {
        assert!(std::env::var_os("CI").is_none(), "CI must have PostgreSQL on {POSTGRES_SOCKET_DIR}: {outside:?}");
        println!("skipped: no PostgreSQL on {POSTGRES_SOCKET_DIR} ({outside:?})");
        return;
    }
    let inside = run(&shells.closed, query.clone()).await;
    assert_refused_socket(&inside, "psql over the Unix socket");
    assert!(!inside.content.contains("4242"), "{inside:?}");
    let preview = shells.closed.preview(&json!({"argv": query})).await.unwrap_or_default();
    assert!(preview.contains("network: off — no socket of any family)"), "{preview}");

    let required = shell_with(&fx, SandboxMode::Required, false);
    assert_refused_socket(&run(&required, query).await, "psql under mode = required");
}

#[tokio::test]
async fn udp_does_not_leave_the_sandbox() {
    let Some((_workspace, shells, python3)) = with_python() else { return };
    let listener = std::net::UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    listener.set_nonblocking(true).unwrap_or_else(|e| panic!("{e}"));
    let port = listener.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
    let send = python(
        &python3,
        &format!(
            "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'out', ('127.0.0.1', {port}))"
        ),
    );
    let mut datagram = [0u8; 16];

    assert_refused_socket(&run(&shells.closed, send.clone()).await, "a UDP send");
    // A datagram to 127.0.0.1 is queued before `sendto` returns: had one been sent, it would be here.
    let received = listener.recv(&mut datagram).map_err(|e| e.kind());
    assert_eq!(received, Err(ErrorKind::WouldBlock), "a datagram left the sandbox");

    let out = run(&shells.network_on, send).await;
    assert!(!out.is_error, "{out:?}");
    let received = listener.recv(&mut datagram).map_err(|e| e.kind());
    assert_eq!(received.map(|n| datagram[..n].to_vec()), Ok(b"out".to_vec()), "the network on lets it out");
}

#[tokio::test]
async fn tcp_is_refused_and_allowed_with_the_network_on() {
    let Some((_workspace, shells, python3)) = with_python() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    listener.set_nonblocking(true).unwrap_or_else(|e| panic!("{e}"));
    let port = listener.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
    let connect =
        python(&python3, &format!("import socket; socket.create_connection(('127.0.0.1', {port})).send(b'x')"));

    // Landlock (ABI 4) and the filter both refuse it; either will do.
    let out = run(&shells.closed, connect.clone()).await;
    assert!(out.is_error && out.content.contains("PermissionError"), "{out:?}");
    assert_eq!(listener.accept().map(drop).map_err(|e| e.kind()), Err(ErrorKind::WouldBlock), "a connection arrived");

    let preview = shells.network_on.preview(&json!({"argv": connect})).await.unwrap_or_default();
    assert!(
        preview.contains("network: on; open: TCP, UDP, Unix sockets by path, other socket families"),
        "the preview lists what the network option opens: {preview}"
    );
    let out = run(&shells.network_on, connect).await;
    assert!(!out.is_error, "{out:?}");
    assert!(listener.accept().is_ok(), "the connection arrived");
}

#[tokio::test]
async fn unix_sockets_by_path_and_abstract_are_refused() {
    let Some((fx, shells, python3)) = with_python() else { return };
    // A socket file outside the workspace, as PostgreSQL's is.
    let by_path = UnixListener::bind(fx.outside.join("service.sock")).unwrap_or_else(|e| panic!("{e}"));
    let name = format!("tollgate-test-{}-abstract", std::process::id());
    let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let abstract_listener = UnixListener::bind_addr(&address).unwrap_or_else(|e| panic!("{e}"));
    for listener in [&by_path, &abstract_listener] {
        listener.set_nonblocking(true).unwrap_or_else(|e| panic!("{e}"));
    }
    let connect = |address: String| {
        python(
            &python3,
            &format!("import socket; s = socket.socket(socket.AF_UNIX); s.connect({address}); s.send(b'x')"),
        )
    };
    let to_path = connect(format!("{:?}", fx.outside.join("service.sock").display().to_string()));
    let to_abstract = connect(format!("'\\0{name}'"));

    for (argv, listener, what) in [(&to_path, &by_path, "by path"), (&to_abstract, &abstract_listener, "abstract")] {
        assert_refused_socket(&run(&shells.closed, argv.clone()).await, &format!("a Unix socket {what}"));
        let accepted = listener.accept().map(drop).map_err(|e| e.kind());
        assert_eq!(accepted, Err(ErrorKind::WouldBlock), "a Unix socket {what} was reached");
        let out = run(&shells.unconfined, argv.clone()).await;
        assert!(!out.is_error, "unconfined, the Unix socket {what} is reachable: {out:?}");
        assert!(listener.accept().is_ok(), "{what}");
    }
}

#[tokio::test]
async fn io_uring_is_refused() {
    let Some((_workspace, shells, python3)) = with_python() else { return };
    // io_uring_setup is 425 on x86_64 and aarch64 alike; it prints the fd (or -1) and errno.
    let setup = python(
        &python3,
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True); params = ctypes.create_string_buffer(120); \
         fd = libc.syscall(425, 4, params); print(fd, ctypes.get_errno())",
    );
    let outside = run(&shells.unconfined, setup.clone()).await;
    if outside.content.contains("\n-1 ") {
        println!("skipped: io_uring is turned off on this machine already ({outside:?})");
        return;
    }
    let inside = run(&shells.closed, setup).await;
    assert_eq!(inside, ToolOutput::text("exit code 0\n--- stdout ---\n-1 1\n"), "EPERM");
}

#[tokio::test]
async fn ordinary_commands_pipes_and_socket_pairs_still_work() {
    let Some((fx, shells, python3)) = with_python() else { return };
    fx.put("listed.txt", "x");
    let shell = shells.closed;
    let out = run(&shell, json!(["ls"])).await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\nlisted.txt\n"));
    let out = run(&shell, json!(["sh", "-c", "echo a | cat"])).await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\na\n"));
    let out = run(&shell, python(&python3, "print(1)")).await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\n1\n"));
    // A stream socket pair and a child process talking over pipes, as test runners and build tools do.
    let code = "import socket, subprocess; a, b = socket.socketpair(); a.sendall(b'pair'); print(b.recv(4).decode()); \
                print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout.strip())";
    let out = run(&shell, python(&python3, code)).await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\npair\nchild\n"));
}

#[tokio::test]
async fn required_refuses_when_this_machine_cannot_close_a_channel() {
    let fx = Fixture::new();
    let no_filter = SandboxSupport::new(7, SeccompSupport::Unavailable { reason: "a test kernel".to_owned() });
    let with = |sandbox, network| {
        Shell::with_sandbox_support(Workspace::new(&fx.root), ShellOptions { sandbox, network }, no_filter.clone())
            .into_tool()
    };
    let needle = "cannot close: UDP, Unix sockets by path, other socket families (netlink, packet, …)";
    assert_refused(&with(SandboxMode::Required, false), json!({"argv": ["touch", "made.txt"]}), needle).await;
    assert_eq!(fx.read("made.txt"), None, "nothing ran");

    // `auto` runs it, and its preview lists what stays open.
    let preview = with(SandboxMode::Auto, false).preview(&json!({"argv": ["true"]})).await.unwrap_or_default();
    assert!(
        preview.ends_with(
            "\nsandbox: landlock ABI 7 (writes: workspace and a private TMPDIR only; network: off; open: UDP, Unix \
             sockets by path, other socket families (netlink, packet, …))"
        ),
        "{preview}"
    );
    // With the network on nothing it should close is missing: the sockets are open on purpose.
    let preview = with(SandboxMode::Required, true).preview(&json!({"argv": ["true"]})).await.unwrap_or_default();
    assert!(preview.contains("network: on; open: TCP, UDP, Unix sockets by path"), "{preview}");
}
