//! Attack: a provider's masked echo of the API key (`sk-PRO...3456`) and a secret a tool read reached
//! `error.message`, stored events, `show --json` and logs. Configured secrets are planted here, the real
//! binary runs against a fake provider on loopback, and every surface is searched: stdout and stderr of
//! each command (logs at `-vv` included) and the raw bytes of the database file.

use anyhow::{Context as _, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use tollgate_agent_testkit::scratch_dir;

use crate::support::Outcome;

const PROVIDER_KEY: &str = "sk-PROJ-abcdefghij1234563456";
const MASKED_ECHO: &str = "sk-PRO...3456";
const API_TOKEN: &str = "tok-alice-5f1e2d3c4b5a69788796";
const WEBHOOK_SECRET: &str = "whsec-0a1b2c3d4e5f60718293";

/// A model provider that refuses every request with OpenAI's wording for a bad key, masked echo included.
fn refusing_provider() -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let answer = format!(
                r#"{{"error":{{"message":"Incorrect API key provided: {MASKED_ECHO}. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}}}"#
            );
            let response = format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = reader.get_mut().write_all(response.as_bytes());
        }
    });
    Ok(format!("http://{addr}/v1"))
}

fn write_config(dir: &Path, base_url: &str) -> Result<PathBuf> {
    let script = dir.join("leak.json");
    std::fs::write(
        &script,
        r#"{"turns": [{"tool_calls": [{"name": "fs_read", "arguments": {"path": "leak.txt"}}]}, {"text": "read it"}]}"#,
    )?;
    std::fs::create_dir_all(dir.join("workspace"))?;
    // A file in the workspace holding the provider key, read by an allow-gated tool.
    std::fs::write(dir.join("workspace/leak.txt"), format!("OPENAI_API_KEY={PROVIDER_KEY}\n"))?;
    let config = dir.join("tollgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[auth.tokens]]
name = "alice"
token = "env:TEST_API_TOKEN"
roles = ["runner", "approver", "admin"]

[[providers]]
name = "cloud"
kind = "openai"
base_url = "{base_url}"
api_key = "env:TEST_PROVIDER_KEY"
max_retries = 0

[[providers]]
name = "script"
kind = "scripted"
script = "leak.json"

[[agents]]
name = "cloud"
provider = "cloud"
model = "gpt-test"

[[agents]]
name = "reader"
provider = "script"
tools = ["fs_read"]

[[webhooks]]
url = "http://127.0.0.1:9/hook"
secret = "env:TEST_WEBHOOK_SECRET"
"#
        ),
    )?;
    Ok(config)
}

fn tollgate(dir: &Path, args: &[&str]) -> Result<Outcome> {
    let secrets =
        [("TEST_PROVIDER_KEY", PROVIDER_KEY), ("TEST_API_TOKEN", API_TOKEN), ("TEST_WEBHOOK_SECRET", WEBHOOK_SECRET)];
    tollgate_with(dir, args, &secrets)
}

fn tollgate_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Outcome> {
    crate::support::tollgate_in(dir, args, env)
}

/// Every way a secret could show: whole, its masked echo, or the echo's two halves next to a mask.
fn leaks(text: &str) -> Vec<&'static str> {
    [PROVIDER_KEY, MASKED_ECHO, API_TOKEN, WEBHOOK_SECRET, "sk-PRO...", "...3456"]
        .into_iter()
        .filter(|needle| text.contains(needle))
        .collect()
}

#[test]
fn planted_secrets_reach_no_surface() -> Result<()> {
    let dir = scratch_dir("secrets");
    let config = write_config(&dir, &refusing_provider()?)?;
    let config = config.to_string_lossy().into_owned();
    let mut seen = Vec::new();

    // A run whose model call fails with the masked echo of the key.
    let failed = tollgate(&dir, &["--config", &config, "-vv", "run", "--agent", "cloud", "hello", "--json"])?;
    let run = failed.json()?;
    let id = run["id"].as_str().context("the run's id")?.to_owned();
    assert_eq!(run["status"], "failed", "{failed:?}");
    let message = run["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("[redacted]"), "the echo reached the message, redacted: {message}");
    seen.push(failed);

    // A run whose tool read a file holding the key.
    let read = tollgate(&dir, &["--config", &config, "-vv", "run", "--agent", "reader", "show me", "--json"])?;
    let reader_id = read.json()?["id"].as_str().context("the run's id")?.to_owned();
    seen.push(read);

    for args in [
        vec!["show", id.as_str(), "--json"],
        vec!["show", id.as_str()],
        vec!["show", reader_id.as_str(), "--json"],
        vec!["runs", "--json"],
        vec!["verify", id.as_str()],
        vec!["verify", reader_id.as_str()],
        vec!["tools", "--agent", "reader"],
    ] {
        let mut full = vec!["--config", config.as_str(), "-vv"];
        full.extend(args);
        seen.push(tollgate(&dir, &full)?);
    }
    for outcome in &seen {
        assert_eq!(leaks(&outcome.stdout), Vec::<&str>::new(), "stdout: {outcome:?}");
        assert_eq!(leaks(&outcome.stderr), Vec::<&str>::new(), "stderr: {outcome:?}");
    }
    for verified in &seen[seen.len() - 3..seen.len() - 1] {
        assert_eq!(verified.code, 0, "the chain over what is stored verifies: {verified:?}");
    }

    // Nothing on disk either: the database file and its WAL, read whole. The tool's result is there,
    // redacted (so the search above looked where the secret would have been).
    let mut on_disk = String::new();
    for file in ["tollgate.db", "tollgate.db-wal"] {
        if let Ok(bytes) = std::fs::read(dir.join(file)) {
            on_disk.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    assert_eq!(leaks(&on_disk), Vec::<&str>::new());
    assert!(on_disk.contains("OPENAI_API_KEY=[redacted]"), "the tool's result is stored, redacted");
    Ok(())
}

/// `[[privacy.keys]]`: held turns and events are stored encrypted; the right key reads them, a wrong or
/// missing key is a clear error naming the run and the key id, never a panic.
#[test]
fn encrypted_runs_need_their_key() -> Result<()> {
    let dir = scratch_dir("encrypted");
    let key = "00112233445566778899aabbccddeeff".repeat(2);
    let wrong = "ffeeddccbbaa99887766554433221100".repeat(2);
    let with_key = |key: &str, args: &[&str]| -> Result<Outcome> {
        std::fs::write(dir.join("tollgate.toml"), "[[privacy.keys]]\nid = \"k1\"\nkey = \"env:TEST_DATA_KEY\"\n")?;
        tollgate_with(&dir, args, &[("TEST_DATA_KEY", key)])
    };
    let started = with_key(&key, &["run", "hello"])?;
    let id = started.waiting_id()?;
    let shown = with_key(&key, &["show", &id, "--json"])?;
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(shown.stdout.contains("create note.txt (5 bytes)"), "the held call reads back: {shown:?}");
    assert_eq!(with_key(&key, &["verify", &id])?.code, 0);

    let mut raw = String::new();
    for file in ["tollgate.db", "tollgate.db-wal"] {
        if let Ok(bytes) = std::fs::read(dir.join(file)) {
            raw.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    assert!(raw.contains("enc:v2:k1:"), "values are stored in the envelope");
    assert!(!raw.contains("create note.txt"), "the preview is not stored in the clear");

    let refused = with_key(&wrong, &["show", &id])?;
    assert_ne!(refused.code, 0, "{refused:?}");
    assert!(refused.stderr.contains(&id) && refused.stderr.contains("k1"), "names the run and the key: {refused:?}");
    assert!(!refused.stderr.contains("panicked"), "{refused:?}");
    assert!(!refused.stderr.contains(&wrong) && !refused.stderr.contains(&key), "no key material: {refused:?}");
    Ok(())
}
