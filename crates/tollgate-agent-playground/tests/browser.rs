//! The playground in a real headless Chromium (`e2e/playground.test.mjs`, driven by playwright-core),
//! against the real `tollgate serve` binary; and the unit tests of its DOM-free JavaScript modules
//! (`e2e/units.test.mjs`).
//!
//! Each server runs in a fresh temporary folder with a `tollgate.toml` that defines the scripted agent
//! `scribe`: turn 1 writes `a.txt` and `b.txt` (two `fs_write` calls, both ask-gated, in one turn;
//! `b.txt` exists already, so its preview is a diff), turn 2 says `done`; and `clerk` (for the
//! keyboard-only walk of `e2e/access.test.mjs`): turn 1 writes `c.txt`, `d.txt` and `e.txt` (three
//! ask-gated `fs_write` calls in one turn), turn 2 says `done`; and `trickster` (issue 31, the marks of
//! invisible and direction-changing characters): turn 1 holds a `shell` call whose argv hides `rm -rf`
//! behind bidi isolates and an `fs_write` whose path holds U+202E, turn 2 says `done`; and `pair` (V2 §4
//! quorum): turn 1 writes `q.txt`, which its policy gives `approvals = 2`, turn 2 says `done`; and `keeper`
//! (V2 §1 grants): turn 1 writes `kept/INPUT.txt` (one ask-gated call, suggested grant `{"/path":
//! "kept/*"}`), turn 2 says `done`, for "Approve and remember" and the Grants page; and `watcher` (V2 §4
//! escalation): turn 1 writes `w1.txt` and `w2.txt` (two ask-gated calls), turn 2 says `done`, and a turn
//! of it held a second is escalated to the Slack notifiers `ops` and `oncall`, which post to a port the
//! browser test listens on (`HOOK_PORT`), so it can follow an Approve link of theirs. `scribe`
//! comes first, so it stays the default agent. The first server also has `talker`, an `openai` agent whose
//! model is a slow streaming server on loopback ([`SlowChatModel`]), for the run page's live text (V2
//! streaming). A second server has auth on (tokens of `alice` and `bob`), for the token prompt, the
//! fetch()-read event stream, and a quorum call approved by two people.
//!
//! `e2e/access.test.mjs` (issue #17) checks the playground against its accessibility promises: no
//! horizontal overflow at phone and tablet widths, no axe-core violation of WCAG 2.1 A/AA in light and
//! dark schemes, touch targets of at least 24×24 px, and a keyboard-only walk through a run.
//!
//! Needs `node`, Chromium (`/usr/bin/chromium`, or `CHROMIUM`), playwright-core and axe-core (installed
//! by `npm ci --prefix .ci/npm`, or `PLAYWRIGHT_CORE` and `AXE_CORE`). Without them the tests say what is
//! missing and pass — unless `CI` is set, where they fail. The run page's screenshot goes to `SCREENSHOT`, default
//! `target/playground-run.png`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tollgate_agent_testkit::SlowChatModel;

/// The scripted agent's turns (docs/configuration.md, "The scripted provider's script").
const SCRIPT: &str = r#"{"turns": [
  {"text": "I will write both notes.", "tool_calls": [
    {"name": "fs_write", "arguments": {"path": "a.txt", "content": "A: {{input}}\n"}},
    {"name": "fs_write", "arguments": {"path": "b.txt", "content": "B: {{input}}\nsecond line\n"}}
  ]},
  {"text": "done"}
]}
"#;

/// The script of `clerk`: three ask-gated calls in one turn (approve one, deny one, edit one).
const CLERK_SCRIPT: &str = r#"{"turns": [
  {"text": "I will write three notes.", "tool_calls": [
    {"name": "fs_write", "arguments": {"path": "c.txt", "content": "C: {{input}}\n"}},
    {"name": "fs_write", "arguments": {"path": "d.txt", "content": "D: {{input}}\n"}},
    {"name": "fs_write", "arguments": {"path": "e.txt", "content": "E: {{input}}\n"}}
  ]},
  {"text": "done"}
]}
"#;

/// The script of `trickster` (issue 31): one turn with a `shell` call whose argument hides, by bidi
/// isolates, that `rm -rf notes` runs (`echo build done \u{2067}\u{2066}&& rm -rf notes\u{2069} #\u{2069}`
/// displays as `echo build done # && rm -rf notes`), and an `fs_write` whose path holds U+202E
/// (`invoice\u{202e}fdp.sh` displays as `invoicehs.pdf`). Written as JSON escapes: no source file holds
/// the characters themselves.
const TRICKSTER_SCRIPT: &str = r#"{"turns": [
  {"text": "Cleaning up.", "tool_calls": [
    {"name": "shell", "arguments": {"argv": ["sh", "-c", "echo build done \u2067\u2066&& rm -rf notes\u2069 #\u2069"]}},
    {"name": "fs_write", "arguments": {"path": "invoice\u202efdp.sh", "content": "echo paid\n"}}
  ]},
  {"text": "done"}
]}
"#;

/// The script of `keeper` (V2 §1 grants): one ask-gated `fs_write` into `kept/` per run, named by the input,
/// so its suggested grant is `{"/path": "kept/*"}` and "Approve and remember" covers its later runs.
const KEEPER_SCRIPT: &str = r#"{"turns": [
  {"text": "I will keep a note.", "tool_calls": [
    {"name": "fs_write", "arguments": {"path": "kept/{{input}}.txt", "content": "K: {{input}}\n"}}
  ]},
  {"text": "done"}
]}
"#;

/// The script of `pair`: one `fs_write` that two people must approve (its agent's policy says `approvals = 2`).
const PAIR_SCRIPT: &str = r#"{"turns": [
  {"text": "I will write the note two people must approve.", "tool_calls": [
    {"name": "fs_write", "arguments": {"path": "q.txt", "content": "Q: {{input}}\n"}}
  ]},
  {"text": "done"}
]}
"#;

const CONFIG: &str = r#"[[providers]]
name = "script"
kind = "scripted"
script = "script.json"

[[agents]]
name = "scribe"
provider = "script"
system_prompt = "You write two notes."
tools = ["fs_write"]
max_iterations = 5

[[providers]]
name = "clerk-script"
kind = "scripted"
script = "clerk.json"

[[agents]]
name = "clerk"
provider = "clerk-script"
system_prompt = "You write three notes."
tools = ["fs_write"]
max_iterations = 5

[[providers]]
name = "trickster-script"
kind = "scripted"
script = "trickster.json"

[[agents]]
name = "trickster"
provider = "trickster-script"
system_prompt = "You tidy up."
tools = ["shell", "fs_write"]
max_iterations = 5

[[providers]]
name = "pair-script"
kind = "scripted"
script = "pair.json"

[[agents]]
name = "pair"
provider = "pair-script"
system_prompt = "You write one note that two people approve."
tools = ["fs_write"]
max_iterations = 5

[[agents.policy]]
tool = "fs_write"
gate = "ask"
approvals = 2

[[providers]]
name = "keeper-script"
kind = "scripted"
script = "keeper.json"

[[agents]]
name = "keeper"
provider = "keeper-script"
system_prompt = "You keep one note per run."
tools = ["fs_write"]
max_iterations = 5
"#;

/// The script of `watcher` (V2 §4 escalation): two ask-gated `fs_write` calls in one turn (one approved
/// through a signed link, one denied in the page), then `done`.
const WATCHER_SCRIPT: &str = r#"{"turns": [
  {"text": "I will write two notes someone watches.", "tool_calls": [
    {"name": "fs_write", "arguments": {"path": "w1.txt", "content": "W1: {{input}}\n"}},
    {"name": "fs_write", "arguments": {"path": "w2.txt", "content": "W2: {{input}}\n"}}
  ]},
  {"text": "done"}
]}
"#;

/// `watcher` (V2 §4): a turn of it held a second is escalated to the notifiers `ops` and `oncall`, Slack
/// notifiers posting to `http://127.0.0.1:{hook_port}/ops` and `/oncall` (the browser test listens
/// there; the accessibility test does not, and their messages fail, which holds up nothing). Their
/// signed links decide as `ops-desk`.
fn watcher_config(hook_port: u16) -> String {
    format!(
        r#"
[server]
link_secret = "0123456789abcdef0123456789abcdef0123456789abcdef"

[[notify]]
name = "ops"
kind = "slack"
url = "http://127.0.0.1:{hook_port}/ops"
as = "ops-desk"
on = ["escalation"]

[[notify]]
name = "oncall"
kind = "slack"
url = "http://127.0.0.1:{hook_port}/oncall"
as = "ops-desk"
on = ["escalation"]

[[providers]]
name = "watcher-script"
kind = "scripted"
script = "watcher.json"

[[agents]]
name = "watcher"
provider = "watcher-script"
system_prompt = "You write two notes someone watches."
tools = ["fs_write"]
max_iterations = 5
escalate_after = "1s"
escalate_to = ["ops", "oncall"]
"#
    )
}

/// `talker` (V2 streaming): an `openai` provider at a [`SlowChatModel`], which streams its answer a piece
/// at a time, so the run page shows the text growing before the stored turn replaces it.
fn talker_config(base_url: &str) -> String {
    format!(
        r#"
[[providers]]
name = "slow"
kind = "openai"
base_url = "{base_url}"
model = "mock"
max_retries = 0

[[agents]]
name = "talker"
provider = "slow"
system_prompt = "You talk."
tools = []
max_iterations = 2
"#
    )
}

/// What `talker`'s slow model streams: a piece every [`SLOW_PIECE`], the first after [`SLOW_START`].
const SLOW_PIECES: &[&str] = &["Streaming ", "words ", "one ", "by ", "one."];
const SLOW_START: Duration = Duration::from_millis(1500);
const SLOW_PIECE: Duration = Duration::from_millis(400);

const AUTH: &str = r#"
[[auth.tokens]]
name = "alice"
token = "alice-secret"
roles = ["runner", "approver"]

[[auth.tokens]]
name = "bob"
token = "bob-secret"
roles = ["approver"]
"#;

const BROWSER_TIMEOUT: Duration = Duration::from_secs(240);

/// `e2e/access.test.mjs` takes some 15 s here (it must stay under 90 s); this leaves room for a slow machine.
const ACCESS_TIMEOUT: Duration = Duration::from_secs(240);

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn repo_dir() -> PathBuf {
    crate_dir().join("../..")
}

/// `target/<profile>`: this test executable lives in its `deps/` folder.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("cannot find this test's executable: {e}"));
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("{} has no profile folder", exe.display()))
}

/// What the browser test needs from outside Cargo, or why it cannot run.
fn javascript_tools(need_browser: bool, need_axe: bool) -> Result<(), String> {
    let node = Command::new("node").arg("--version").output();
    if !node.as_ref().is_ok_and(|o| o.status.success()) {
        return Err("`node` is not on PATH (Debian: apt-get install nodejs)".into());
    }
    if need_browser {
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        if !Path::new(&chromium).exists() {
            return Err(format!("no Chromium at {chromium} (Debian: apt-get install chromium)"));
        }
        let playwright = npm_package("PLAYWRIGHT_CORE", "playwright-core");
        if !playwright.join("package.json").exists() {
            return Err(format!(
                "playwright-core is not installed at {} (npm ci --prefix .ci/npm)",
                playwright.display()
            ));
        }
    }
    if need_axe {
        let axe = npm_package("AXE_CORE", "axe-core");
        if !axe.join("axe.min.js").exists() {
            return Err(format!("axe-core is not installed at {} (npm ci --prefix .ci/npm)", axe.display()));
        }
    }
    Ok(())
}

/// The folder of an npm package of `.ci/npm`, or the one the environment variable `env` names.
fn npm_package(env: &str, name: &str) -> PathBuf {
    std::env::var(env).map(PathBuf::from).unwrap_or_else(|_| repo_dir().join(".ci/npm/node_modules").join(name))
}

/// True when the test can run; otherwise a note (or, under CI, a failure) saying what is missing.
fn can_run(need_browser: bool, need_axe: bool) -> bool {
    match javascript_tools(need_browser, need_axe) {
        Ok(()) => true,
        Err(missing) if std::env::var_os("CI").is_some() => panic!("CI must run the playground's tests: {missing}"),
        Err(missing) => {
            eprintln!("note: skipping the playground's JavaScript tests: {missing}");
            false
        }
    }
}

/// The `tollgate` binary of this profile, built first if it is missing or older than the playground's
/// assets (so the browser never sees a page other than the one in this tree).
fn tollgate_binary() -> PathBuf {
    let binary = profile_dir().join(format!("tollgate{}", std::env::consts::EXE_SUFFIX));
    if is_stale(&binary) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "tollgate-cli", "--bin", "tollgate"]).current_dir(repo_dir());
        if profile_dir().file_name().is_some_and(|p| p == "release") {
            build.arg("--release");
        }
        let status = build.status().unwrap_or_else(|e| panic!("cannot run cargo to build tollgate: {e}"));
        assert!(status.success(), "cargo build -p tollgate-cli failed");
    }
    assert!(binary.exists(), "{} is missing after the build", binary.display());
    binary
}

fn is_stale(binary: &Path) -> bool {
    let Ok(built) = binary.metadata().and_then(|m| m.modified()) else { return true };
    let assets = crate_dir().join("assets");
    let newest = std::fs::read_dir(&assets)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", assets.display()))
        .filter_map(|entry| entry.ok()?.metadata().ok()?.modified().ok())
        .max();
    newest.is_some_and(|newest| newest > built)
}

/// A `tollgate serve` in its own temporary folder, stopped on drop.
struct Server {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Server {
    /// A server; with `talker`, also the agent `talker` on that slow model; with `hook_port`, also the
    /// agent `watcher`, whose notifiers post there.
    fn start(binary: &Path, auth: bool, talker: Option<&SlowChatModel>, hook_port: Option<u16>) -> Server {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("no temporary folder: {e}"));
        let mut config = if auth { format!("{CONFIG}{AUTH}") } else { CONFIG.to_owned() };
        if let Some(model) = talker {
            config.push_str(&talker_config(&model.base_url()));
        }
        if let Some(port) = hook_port {
            config.push_str(&watcher_config(port));
        }
        write(&dir.path().join("tollgate.toml"), &config);
        write(&dir.path().join("script.json"), SCRIPT);
        write(&dir.path().join("clerk.json"), CLERK_SCRIPT);
        write(&dir.path().join("trickster.json"), TRICKSTER_SCRIPT);
        write(&dir.path().join("pair.json"), PAIR_SCRIPT);
        write(&dir.path().join("keeper.json"), KEEPER_SCRIPT);
        write(&dir.path().join("watcher.json"), WATCHER_SCRIPT);
        std::fs::create_dir_all(dir.path().join("workspace/kept")).unwrap_or_else(|e| panic!("no workspace: {e}"));
        write(&dir.path().join("workspace/b.txt"), "B: old\nsecond line\n");

        let port = free_port();
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap_or_else(|e| panic!("no log file: {e}"));
        let err = log.try_clone().unwrap_or_else(|e| panic!("no log file: {e}"));
        let mut command = Command::new(binary);
        command
            .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        // The temporary folder's tollgate.toml decides everything, whatever this shell has set.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("TOLLGATE_") {
                command.env_remove(name);
            }
        }
        let child = command.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut server = Server { child, url: format!("http://127.0.0.1:{port}/"), dir };
        server.wait_healthy(port);
        server
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn wait_healthy(&mut self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("tollgate serve exited ({status}) before it was healthy:\n{}", self.log());
            }
            if healthz(port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("tollgate serve did not answer /healthz within 30 s:\n{}", self.log());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// A port that was free a moment ago (bound to port 0, then released for the server).
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap_or_else(|e| panic!("cannot bind: {e}"));
    listener.local_addr().unwrap_or_else(|e| panic!("no local address: {e}")).port()
}

/// `GET /healthz` answered 200.
fn healthz(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// Runs `node --test FILE` in this crate's folder with `envs`, within `timeout`; panics with its output
/// if it fails.
fn node_test(file: &str, envs: &[(&str, String)], timeout: Duration) {
    let out = tempfile::tempdir().unwrap_or_else(|e| panic!("no temporary folder: {e}"));
    let stdout = std::fs::File::create(out.path().join("stdout")).unwrap_or_else(|e| panic!("{e}"));
    let stderr = std::fs::File::create(out.path().join("stderr")).unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new("node")
        .args(["--test", file])
        .current_dir(crate_dir())
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap_or_else(|e| panic!("cannot wait for node: {e}")) {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = format!(
        "{}{}",
        std::fs::read_to_string(out.path().join("stdout")).unwrap_or_default(),
        std::fs::read_to_string(out.path().join("stderr")).unwrap_or_default()
    );
    // Shown by the test harness when the test fails (or with --nocapture).
    println!("{output}");
    match status {
        Some(status) if status.success() => {}
        Some(status) => panic!("node --test {file} failed ({status}):\n{output}"),
        None => panic!("node --test {file} did not finish within {timeout:?}:\n{output}"),
    }
}

#[test]
fn javascript_modules_pass_their_unit_tests() {
    if !can_run(false, false) {
        return;
    }
    node_test("e2e/units.test.mjs", &[], Duration::from_secs(60));
}

#[test]
fn playground_in_headless_chromium() {
    if !can_run(true, false) {
        return;
    }
    let binary = tollgate_binary();
    let slow = SlowChatModel::start(SLOW_PIECES, SLOW_START, SLOW_PIECE).unwrap_or_else(|e| panic!("{e}"));
    let hook_port = free_port();
    let open = Server::start(&binary, false, Some(&slow), Some(hook_port));
    let guarded = Server::start(&binary, true, None, None);
    let screenshot = std::env::var("SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| profile_dir().join("..").join("playground-run.png"));
    let mut envs = vec![
        ("BASE_URL", open.url.clone()),
        ("WORKSPACE", open.workspace().display().to_string()),
        ("AUTH_BASE_URL", guarded.url.clone()),
        ("AUTH_TOKEN", "alice-secret".to_owned()),
        ("AUTH_TOKEN_2", "bob-secret".to_owned()),
        ("AUTH_WORKSPACE", guarded.workspace().display().to_string()),
        ("SCREENSHOT", screenshot.display().to_string()),
        ("HOOK_PORT", hook_port.to_string()),
    ];
    if let Ok(path) = std::env::var("PLAYWRIGHT_CORE") {
        envs.push(("PLAYWRIGHT_CORE", path));
    }
    node_test("e2e/playground.test.mjs", &envs, BROWSER_TIMEOUT);
    assert!(screenshot.exists(), "the test wrote no screenshot at {}", screenshot.display());
    println!("screenshot of the run page: {}", screenshot.display());
}

/// Issue #17: phone and tablet widths without horizontal overflow, axe-core (WCAG 2.1 A and AA) in light
/// and dark, touch targets of 24×24 px, and a keyboard-only walk through a run of `clerk` (approve one
/// call, deny one with a reason, edit one) with the focus checked after every key.
#[test]
fn playground_accessibility_in_headless_chromium() {
    if !can_run(true, true) {
        return;
    }
    let binary = tollgate_binary();
    // Nothing listens on the hook port: the escalations' messages fail, the runs are escalated all the same.
    let server = Server::start(&binary, false, None, Some(free_port()));
    let mut envs = vec![("BASE_URL", server.url.clone()), ("WORKSPACE", server.workspace().display().to_string())];
    for name in ["PLAYWRIGHT_CORE", "AXE_CORE"] {
        if let Ok(path) = std::env::var(name) {
            envs.push((name, path));
        }
    }
    node_test("e2e/access.test.mjs", &envs, ACCESS_TIMEOUT);
}
