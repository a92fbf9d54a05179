//! Attack (issue 31, item 5): with no tokens, `serve` lets in the user who started it as `local`; an agent
//! whose `shell` may use the network (`shell_network = true`) runs its commands as that same user, so an
//! approved command left a daemon that approved the run's next held call over the API. Now `serve`
//! refuses that combination at start, naming the agent and the fix; with `[[auth.tokens]]` it serves.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tollgate_agent_testkit::scratch_dir;

use crate::support::serve_in;

/// A folder whose agent `ops` offers `shell` with `shell_network = true`, and `extra` appended.
fn folder(extra: &str) -> Result<PathBuf> {
    let dir = scratch_dir("serve-owner");
    std::fs::write(dir.join("script.json"), r#"{"turns": [{"text": "nothing to do"}]}"#)?;
    std::fs::write(
        dir.join("tollgate.toml"),
        format!(
            "[[providers]]\nname = \"script\"\nkind = \"scripted\"\nscript = \"script.json\"\n\n\
             [[agents]]\nname = \"reader\"\nprovider = \"script\"\ntools = [\"fs_read\"]\n\n\
             [[agents]]\nname = \"ops\"\nprovider = \"script\"\ntools = [\"shell\"]\nshell_network = true\n{extra}"
        ),
    )?;
    Ok(dir)
}

#[test]
fn serve_refuses_a_networked_shell_without_tokens() -> Result<()> {
    let dir = folder("")?;
    let mut serve = serve_in(&dir, "127.0.0.1:0").stderr(Stdio::piped()).spawn()?;
    // A watchdog, not a timing: a `serve` that does not refuse would serve until killed.
    let exited = (0..600).find_map(|_| match serve.try_wait() {
        Ok(None) => {
            std::thread::sleep(std::time::Duration::from_millis(50));
            None
        }
        Ok(Some(status)) => Some(Ok(status)),
        Err(e) => Some(Err(e)),
    });
    let Some(status) = exited else {
        let _ = serve.kill();
        let _ = serve.wait();
        panic!("serve started instead of refusing the configuration");
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().context("stderr")?, &mut stderr)?;
    assert_eq!(status?.code(), Some(2), "a configuration error: {stderr}");
    for needle in ["agents[1] (`ops`)", "shell_network = true", "configure [[auth.tokens]]", "tollgate.toml"] {
        assert!(stderr.contains(needle), "the refusal names {needle}: {stderr}");
    }
    assert!(!stderr.contains("serving the API"), "nothing was served: {stderr}");
    Ok(())
}

fn healthz(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

fn serve_until_healthy(dir: &Path) -> Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut server = serve_in(dir, &format!("127.0.0.1:{port}")).spawn()?;
    // Polled until it answers (bounded): the server's start-up time is not what is tested.
    let health = (0..200).find_map(|_| {
        if server.try_wait().ok().flatten().is_some() {
            return Some(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        healthz(port).map(Some)
    });
    let _ = server.kill();
    let _ = server.wait();
    health.flatten().context("the server with tokens never answered (or exited)")
}

#[test]
fn serve_runs_a_networked_shell_behind_tokens() -> Result<()> {
    let dir = folder("\n[[auth.tokens]]\nname = \"ops-admin\"\ntoken = \"a-long-test-token\"\nroles = [\"admin\"]\n")?;
    let health = serve_until_healthy(&dir)?;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    Ok(())
}
