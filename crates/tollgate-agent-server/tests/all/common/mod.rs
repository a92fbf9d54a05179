//! A real server on 127.0.0.1:0 over a real store, with scripted agents and recording test tools, and a
//! small HTTP client for it. Shared by every test file of this crate.

#![allow(dead_code, reason = "each test file uses a different part of this harness")]

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_agent_core::{Gate, LoopConfig, RunId, RunStore, SystemClock, ToolLoop, ToolRegistry};
use tollgate_agent_providers::{Script, ScriptedModel};
use tollgate_agent_runtime::{AgentSpec, EscalationRule, OnExpiry, Runtime, RuntimeOptions, ToolInfo, UuidV7Ids};
use tollgate_agent_server::{
    ApiToken, LinkSecret, Notifier, NotifyRetry, Role, ServerError, ServerOptions, WebhookRetry, WebhookTarget,
};
use tollgate_agent_testkit::{TestTool, postgres_url, scratch_dir};

/// Which store the server runs on.
#[derive(Clone, Debug, Default)]
pub(crate) enum Backend {
    /// A fresh SQLite file.
    #[default]
    Sqlite,
    /// The test PostgreSQL database (each store in a fresh schema of it, unless the URL names one).
    Postgres(String),
}

/// The backends to run a test on: SQLite always, PostgreSQL when `TOLLGATE_TEST_POSTGRES_URL` is set.
pub(crate) fn backends() -> Vec<Backend> {
    let mut backends = vec![Backend::Sqlite];
    if let Some(url) = postgres_url() {
        backends.push(Backend::Postgres(url));
    }
    backends
}

/// How to start a test server.
#[derive(Clone, Default)]
pub(crate) struct Config {
    /// The store.
    pub backend: Backend,
    /// API tokens (none: auth off).
    pub tokens: Vec<ApiToken>,
    /// Webhook receivers.
    pub webhooks: Vec<WebhookTarget>,
    /// The body limit (0: the default).
    pub max_body_bytes: usize,
    /// Reuse this store (a restart) instead of opening a new one.
    pub store: Option<Arc<dyn RunStore>>,
    /// The SSE keep-alive interval (zero: the default).
    pub sse_keep_alive: Duration,
    /// Adjusts the server's options last (connection limits, timeouts).
    pub tune: Option<fn(&mut ServerOptions)>,
    /// Secrets the runtime redacts (as a configured provider key would be).
    pub secrets: Vec<String>,
    /// Adds [`TALKER`], whose model is the OpenAI-compatible server at this base URL (streamed), tried
    /// again this many times (`max_retries`).
    pub talker: Option<(String, u32)>,
    /// Notifiers (they need `link_secret`).
    pub notifiers: Vec<Notifier>,
    /// The key of signed links: [`LINK_SECRET`] when true.
    pub links: bool,
    /// Adds [`QUORUM`].
    pub quorum: bool,
    /// Escalates [`SCRIBE`]'s held turns (`escalate_after`, `escalate_to`).
    pub escalate: Option<EscalationRule>,
}

/// The link secret of a server started with [`Config::links`].
pub(crate) const LINK_SECRET: &[u8] = b"the test link secret, 32 bytes or more";

/// Tokens for auth tests: `alice` runner, `bob` approver, `carol` runner + approver, `root` admin.
pub(crate) fn tokens() -> Vec<ApiToken> {
    let token = |name: &str, roles: Vec<Role>| ApiToken { name: name.into(), token: format!("{name}-token"), roles };
    vec![
        token("alice", vec![Role::Runner]),
        token("bob", vec![Role::Approver]),
        token("carol", vec![Role::Runner, Role::Approver]),
        token("root", vec![Role::Admin]),
    ]
}

/// The tools every agent here uses, sharing their call logs with the test.
#[derive(Clone)]
pub(crate) struct Tools {
    /// `write`: gate ask, schema `{"text": string}` required, preview `write a note`.
    pub write: TestTool,
    /// `list`: gate allow.
    pub list: TestTool,
    /// `nuke`: gate forbid.
    pub nuke: TestTool,
    /// `write` of [`QUORUM`]: as `write`, but two distinct people must approve a call.
    pub quorum_write: TestTool,
}

impl Tools {
    fn new() -> Self {
        let schema = json!({"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}},
                            "additionalProperties": false});
        Self {
            write: TestTool::new("write").gate(Gate::Ask).preview("write a note").schema(schema.clone()),
            list: TestTool::new("list"),
            nuke: TestTool::new("nuke").gate(Gate::Forbid),
            quorum_write: TestTool::new("write").gate(Gate::Ask).approvals(2).preview("write a note").schema(schema),
        }
    }

    fn registry(&self) -> Arc<ToolRegistry> {
        let mut registry = ToolRegistry::new();
        for tool in [&self.write, &self.list, &self.nuke] {
            registry.register(tool.shared()).unwrap_or_else(|e| panic!("{e}"));
        }
        Arc::new(registry)
    }
}

/// `scribe` (the default): turn 1 holds `write` (ask) of the input, `list` (allow) and `nuke` (forbid);
/// turn 2 answers `done` (streamed in two deltas, `do` and `ne`), or `Not written.` when the write was
/// denied.
pub(crate) const SCRIBE: &str = "scribe";
/// `scribe-pair`: turn 1 holds two `write` calls (`a`, `b`); turn 2 answers `done`.
pub(crate) const PAIR: &str = "scribe-pair";
/// `scribe-guarded`: as `scribe` with one `write` call, and `forbid_self_approval`.
pub(crate) const GUARDED: &str = "scribe-guarded";
/// `scribe-slow`: turn 1 calls `pause` (allow, takes [`PAUSE`]); turn 2 holds a `write`; then `done`.
pub(crate) const SLOW: &str = "scribe-slow";
/// How long a `pause` call takes.
pub(crate) const PAUSE: Duration = Duration::from_millis(400);
/// `talker` (with [`Config::talker`]): no tools, its model an OpenAI-compatible server, streamed.
pub(crate) const TALKER: &str = "talker";
/// `scribe-quorum` (with [`Config::quorum`]): turn 1 holds one `write` of the input that two distinct
/// people must approve (`approvals = 2`); turn 2 answers `done`.
pub(crate) const QUORUM: &str = "scribe-quorum";

/// An allow-gated tool that takes [`PAUSE`] to answer: a step still in flight when a test acts.
struct Pause {
    schema: Value,
}

impl tollgate_agent_core::Tool for Pause {
    fn name(&self) -> &str {
        "pause"
    }
    fn description(&self) -> &str {
        "waits a moment"
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn call<'a>(
        &'a self,
        _args: Value,
        _ctx: tollgate_agent_core::ToolContext,
    ) -> tollgate_agent_core::BoxFuture<'a, Result<tollgate_agent_core::ToolOutput, tollgate_agent_core::ToolError>>
    {
        Box::pin(async {
            tokio::time::sleep(PAUSE).await;
            Ok(tollgate_agent_core::ToolOutput::text("paused"))
        })
    }
}

fn agent(name: &str, tools: &Tools, script: Value, forbid_self_approval: bool) -> AgentSpec {
    let registry = tools.registry();
    let script = Script::from_value(script).unwrap_or_else(|e| panic!("{e}"));
    let agent_loop = ToolLoop::new(Arc::new(ScriptedModel::new(script)), registry.clone(), LoopConfig::default());
    let mut infos: Vec<ToolInfo> = registry.iter().map(|t| ToolInfo::of(t.tool().as_ref(), "default")).collect();
    if name == SCRIBE {
        // As a policy rule would: the agent's effective gate for `list` differs from its default.
        if let Some(list) = infos.iter_mut().find(|t| t.name == "list") {
            list.gate = Gate::Ask;
            list.why = "policy: tool = \"list\"".into();
        }
    }
    AgentSpec {
        name: name.into(),
        model: "scripted".into(),
        agent_loop: Arc::new(agent_loop),
        tools: infos,
        approval_ttl: None,
        on_expiry: OnExpiry::Deny,
        forbid_self_approval,
        escalation: None,
    }
}

fn agents(tools: &Tools) -> Vec<AgentSpec> {
    let scribe = json!({"turns": [
        {"tool_calls": [
            {"name": "write", "arguments": {"text": "{{input}}"}},
            {"name": "list", "arguments": {}},
            {"name": "nuke", "arguments": {}}
        ]},
        {"when_denied": {"text": "Not written."}, "when_approved": {"text": "done", "stream_chunks": 2}}
    ]});
    let pair = json!({"turns": [
        {"tool_calls": [
            {"name": "write", "arguments": {"text": "a"}},
            {"name": "write", "arguments": {"text": "b"}}
        ]},
        {"text": "done"}
    ]});
    let guarded = json!({"turns": [
        {"tool_calls": [{"name": "write", "arguments": {"text": "{{input}}"}}]},
        {"text": "done"}
    ]});
    let slow = json!({"turns": [
        {"tool_calls": [{"name": "pause", "arguments": {}}]},
        {"tool_calls": [{"name": "write", "arguments": {"text": "{{input}}"}}]},
        {"text": "done"}
    ]});
    let mut registry = ToolRegistry::new();
    registry.register(Arc::new(Pause { schema: json!({"type": "object"}) })).unwrap_or_else(|e| panic!("{e}"));
    registry.register(tools.write.shared()).unwrap_or_else(|e| panic!("{e}"));
    let script = Script::from_value(slow).unwrap_or_else(|e| panic!("{e}"));
    let registry = Arc::new(registry);
    let slow_loop = ToolLoop::new(Arc::new(ScriptedModel::new(script)), registry.clone(), LoopConfig::default());
    let slow = AgentSpec {
        name: SLOW.into(),
        model: "scripted".into(),
        agent_loop: Arc::new(slow_loop),
        tools: registry.iter().map(|t| ToolInfo::of(t.tool().as_ref(), "default")).collect(),
        approval_ttl: None,
        on_expiry: OnExpiry::Deny,
        forbid_self_approval: false,
        escalation: None,
    };
    vec![
        agent(SCRIBE, tools, scribe, false),
        agent(PAIR, tools, pair, false),
        agent(GUARDED, tools, guarded, true),
        slow,
    ]
}

/// [`QUORUM`].
fn quorum(tools: &Tools) -> AgentSpec {
    let mut registry = ToolRegistry::new();
    registry.register(tools.quorum_write.shared()).unwrap_or_else(|e| panic!("{e}"));
    let registry = Arc::new(registry);
    let script = json!({"turns": [
        {"tool_calls": [{"name": "write", "arguments": {"text": "{{input}}"}}]},
        {"text": "done"}
    ]});
    let script = Script::from_value(script).unwrap_or_else(|e| panic!("{e}"));
    let agent_loop = ToolLoop::new(Arc::new(ScriptedModel::new(script)), registry.clone(), LoopConfig::default());
    AgentSpec {
        name: QUORUM.into(),
        model: "scripted".into(),
        agent_loop: Arc::new(agent_loop),
        tools: registry.iter().map(|t| ToolInfo::of(t.tool().as_ref(), "default")).collect(),
        approval_ttl: None,
        on_expiry: OnExpiry::Deny,
        forbid_self_approval: false,
        escalation: None,
    }
}

/// [`TALKER`]: an `openai` provider at `base_url`, streamed, with a short backoff.
fn talker(base_url: &str, max_retries: u32) -> AgentSpec {
    let settings = tollgate_agent_providers::ProviderSettings {
        base_url: Some(base_url.to_owned()),
        max_retries,
        initial_backoff: Duration::from_millis(10),
        stream: true,
        ..Default::default()
    };
    let model = tollgate_agent_providers::OpenAiModel::new(settings).unwrap_or_else(|e| panic!("{e}"));
    let agent_loop = ToolLoop::new(Arc::new(model), Arc::new(ToolRegistry::new()), LoopConfig::default());
    AgentSpec {
        name: TALKER.into(),
        model: "mock".into(),
        agent_loop: Arc::new(agent_loop),
        tools: Vec::new(),
        approval_ttl: None,
        on_expiry: OnExpiry::Deny,
        forbid_self_approval: false,
        escalation: None,
    }
}

/// Opens a store for a backend.
pub(crate) async fn open_store(backend: &Backend) -> Arc<dyn RunStore> {
    let url = match backend {
        Backend::Sqlite => format!("sqlite://{}", scratch_dir("server").join("tollgate.db").display()),
        // A schema of its own: the worker pools of tests running side by side claim only their own runs.
        Backend::Postgres(url) => {
            // Once per test process: the schemas of earlier runs of these tests (kept by the store
            // handles the tests leave open) are dropped after a day.
            tollgate_agent_store::ScratchSchema::sweep_once(url, "tollgate_test_server", Duration::from_secs(86_400))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            tollgate_agent_store::ScratchSchema::create(url, "tollgate_test_server")
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .url()
        }
    };
    tollgate_agent_store::open(&url).await.unwrap_or_else(|e| panic!("{e}"))
}

/// A running server.
pub(crate) struct Server {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// A plain client.
    pub client: reqwest::Client,
    /// The runtime behind the server.
    pub runtime: Runtime,
    /// The store behind the runtime.
    pub store: Arc<dyn RunStore>,
    /// The tools' call logs.
    pub tools: Tools,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), ServerError>>>,
}

impl Server {
    /// Starts a server.
    pub(crate) async fn start(config: Config) -> Server {
        let store = match &config.store {
            Some(store) => store.clone(),
            None => open_store(&config.backend).await,
        };
        let tools = Tools::new();
        let catalog: Vec<ToolInfo> =
            tools.registry().iter().map(|t| ToolInfo::of(t.tool().as_ref(), "default")).collect();
        let redactor = tollgate_agent_core::Redactor::new(config.secrets.iter().map(String::as_str));
        let options = RuntimeOptions { catalog, redactor, ..RuntimeOptions::default() };
        let mut agents = agents(&tools);
        agents.extend(config.talker.as_ref().map(|(base_url, max_retries)| talker(base_url, *max_retries)));
        if config.quorum {
            agents.push(quorum(&tools));
        }
        if let Some(scribe) = agents.iter_mut().find(|agent| agent.name == SCRIBE) {
            scribe.escalation = config.escalate.clone();
        }
        let runtime = Runtime::new(store.clone(), agents, Arc::new(SystemClock), Arc::new(UuidV7Ids), options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let mut options = ServerOptions {
            addr,
            tokens: config.tokens.clone(),
            webhooks: config.webhooks.clone(),
            webhook_retry: WebhookRetry {
                attempts: 3,
                first_delay: Duration::from_millis(50),
                timeout: Duration::from_secs(2),
            },
            shutdown_grace: Duration::from_secs(10),
            notifiers: config.notifiers.clone(),
            notify_retry: NotifyRetry { attempts: 3, first_delay: Duration::from_millis(50) },
            link_secret: config.links.then(|| LinkSecret::new(LINK_SECRET).unwrap_or_else(|e| panic!("{e}"))),
            ..ServerOptions::default()
        };
        if config.max_body_bytes > 0 {
            options.max_body_bytes = config.max_body_bytes;
        }
        if !config.sse_keep_alive.is_zero() {
            options.sse_keep_alive = config.sse_keep_alive;
        }
        if let Some(tune) = config.tune {
            tune(&mut options);
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(tollgate_agent_server::serve_on(listener, runtime.clone(), options, async move {
            let _ = stopped.await;
        }));
        let client =
            reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap_or_else(|e| panic!("{e}"));
        Server { base: format!("http://{addr}"), client, runtime, store, tools, stop: Some(stop), handle: Some(handle) }
    }

    /// The URL of a path.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Shuts the server down gracefully and checks it returned cleanly.
    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            let result = tokio::time::timeout(Duration::from_secs(20), handle)
                .await
                .unwrap_or_else(|_| panic!("the server did not shut down within 20 s"));
            result.unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// Sends a request with an optional token and JSON body; returns the status, headers and body
    /// (parsed as JSON when it is JSON, else a string).
    pub(crate) async fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let mut request = self.client.request(method, self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Reply::from(request.send().await.unwrap_or_else(|e| panic!("{path}: {e}"))).await
    }

    /// GET without a token.
    pub(crate) async fn get(&self, path: &str) -> Reply {
        self.call("GET", path, None, None).await
    }

    /// POST JSON without a token.
    pub(crate) async fn post(&self, path: &str, body: Value) -> Reply {
        self.call("POST", path, None, Some(body)).await
    }

    /// POST raw bytes with a content type.
    pub(crate) async fn post_raw(&self, path: &str, content_type: Option<&str>, body: Vec<u8>) -> Reply {
        let mut request = self.client.post(self.url(path)).body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        Reply::from(request.send().await.unwrap_or_else(|e| panic!("{path}: {e}"))).await
    }

    /// Starts a run of `agent` with `wait: true` and returns it (it is waiting for approval).
    /// `POST /v1/runs/{id}/decisions` approving every held call of `run` (as read), with `wait`.
    pub(crate) async fn approve_and_wait(&self, run: &Value) -> Reply {
        self.post(
            &format!("/v1/runs/{}/decisions", id(run)),
            json!({"turn_digest": digest(run), "approve_all": true, "wait": true}),
        )
        .await
    }

    pub(crate) async fn waiting_run(&self, agent: &str, input: &str) -> Value {
        let reply = self.post("/v1/runs", json!({"agent": agent, "input": input, "wait": true})).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        assert_eq!(reply.body["status"], "waiting_for_approval", "{}", reply.body);
        reply.body
    }

    /// How many runs the store holds (at most 500).
    pub(crate) async fn run_count(&self) -> usize {
        let page = self
            .store
            .list(tollgate_agent_core::RunQuery { limit: 500, ..Default::default() })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        page.runs.len()
    }

    /// Waits (bounded) until the run is terminal and returns it.
    pub(crate) async fn settled(&self, id: &RunId) -> Value {
        let run = tokio::time::timeout(Duration::from_secs(20), self.runtime.wait_settled(id))
            .await
            .unwrap_or_else(|_| panic!("run {id} did not settle within 20 s"))
            .unwrap_or_else(|e| panic!("{e}"));
        tollgate_agent_runtime::view::run_json(&run)
    }

    /// The kinds of a run's events, in order.
    pub(crate) async fn event_kinds(&self, id: &str) -> Vec<String> {
        let reply = self.get(&format!("/v1/runs/{id}/events")).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.body["events"]
            .as_array()
            .map(|events| events.iter().map(|e| e["kind"].as_str().unwrap_or_default().to_owned()).collect())
            .unwrap_or_default()
    }
}

/// An answer.
#[derive(Debug)]
pub(crate) struct Reply {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body: JSON when it parses, else a JSON string of the text.
    pub body: Value,
}

impl Reply {
    async fn from(response: reqwest::Response) -> Reply {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Reply { status, headers, body }
    }

    /// The content type.
    pub(crate) fn content_type(&self) -> &str {
        self.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    /// Asserts a problem+json answer with this status and type slug.
    pub(crate) fn assert_problem(&self, status: u16, slug: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(self.content_type(), "application/problem+json", "{}", self.body);
        assert_eq!(self.body["type"], format!("https://tollgate.dev/problems/{slug}"), "{}", self.body);
        assert_eq!(self.body["status"], status, "{}", self.body);
        assert!(self.body["title"].is_string() && self.body["detail"].is_string(), "{}", self.body);
    }
}

/// The turn digest of a waiting run's JSON.
pub(crate) fn digest(run: &Value) -> String {
    run["pending"]["turn_digest"].as_str().unwrap_or_default().to_owned()
}

/// The id of a run's JSON.
pub(crate) fn id(run: &Value) -> RunId {
    RunId::from(run["id"].as_str().unwrap_or_default())
}

/// The Python of the venv holding the test tools, if it imports every one of `modules`
/// ([`tollgate_agent_testkit::test_python`]: `None` with a note outside CI, a panic under CI).
pub(crate) fn python(modules: &[&str]) -> Option<PathBuf> {
    tollgate_agent_testkit::test_python(modules)
}

/// Runs `command`, failing the test with its output when it fails; answers its standard output.
pub(crate) fn run_command(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
