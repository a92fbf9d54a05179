//! Notifications and signed decision links (V2.md section 4) against a real server: a receiver on
//! loopback stands in for Slack (the Block Kit message, and its links followed); a real SMTP server
//! (`python -m aiosmtpd` from `.ci/python/venv`) receives the mail, whose links are followed; every
//! refusal page; a link followed twice at once; a quorum call; notifiers that are down; escalation.

use crate::common::{self, Backend, Config, GUARDED, LINK_SECRET, QUORUM, SCRIBE, Server, backends, digest, id};
use crate::webhooks::{Received, eventually, hanging_receiver, receiver};
use axum::http::StatusCode;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tollgate_agent_core::{Actor, RunId};
use tollgate_agent_notify::link::{LinkAction, LinkClaims, link_id, sign, verify};
use tollgate_agent_runtime::EscalationRule;
use tollgate_agent_server::{EmailNotifier, EmailSettings, Notifier, SlackNotifier, Transport};

/// A Slack notifier posting to `url`, deciding as `actor`, told of the requests of `agents`.
fn slack(name: &str, url: &str, actor: &str, agents: &[&str], timeout: Duration) -> Notifier {
    Notifier {
        name: name.into(),
        transport: Transport::Slack(SlackNotifier::new(url.into(), timeout).unwrap_or_else(|e| panic!("{e}"))),
        actor: Actor::from(actor),
        agents: agents.iter().map(|a| (*a).to_owned()).collect(),
    }
}

/// Two Slack notifiers, `first` and `second` (name, actor, agents), each posting to a receiver of its own
/// that answers 200; their receivers, in that order.
async fn two_slacks(first: (&str, &str, &[&str]), second: (&str, &str, &[&str])) -> (Vec<Notifier>, [Received; 2]) {
    let mut notifiers = Vec::new();
    let mut received = Vec::new();
    for (name, actor, agents) in [first, second] {
        let (url, hook) = receiver(StatusCode::OK).await;
        notifiers.push(slack(name, &url, actor, agents, Duration::from_secs(5)));
        received.push(hook);
    }
    let received: [Received; 2] = received.try_into().unwrap_or_else(|_| panic!("two receivers"));
    (notifiers, received)
}

/// A server on `backend` with signed links on and these notifiers.
async fn server(backend: &Backend, notifiers: Vec<Notifier>) -> Server {
    Server::start(Config { backend: backend.clone(), notifiers, links: true, quorum: true, ..Default::default() }).await
}

/// A server on `backend` with signed links on and no notifier, and a run of `agent` waiting on `input`.
async fn waiting(backend: &Backend, agent: &str, input: &str) -> (Server, Value, RunId) {
    let server = server(backend, Vec::new()).await;
    let run = server.waiting_run(agent, input).await;
    let run_id = id(&run);
    (server, run, run_id)
}

/// The JSON bodies a receiver got, in order.
fn messages(received: &Received) -> Vec<Value> {
    received.all().iter().map(|(_, body)| serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}"))).collect()
}

/// The URLs of a Block Kit message's buttons labelled `label`, in order.
fn buttons(message: &Value, label: &str) -> Vec<String> {
    message["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|block| block["type"] == "actions")
        .flat_map(|block| block["elements"].as_array().into_iter().flatten())
        .filter(|button| button["text"]["text"] == label)
        .map(|button| button["url"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A page: its status, headers and HTML.
struct Page {
    status: u16,
    headers: reqwest::header::HeaderMap,
    html: String,
}

/// GETs a link's page.
async fn get(server: &Server, url: &str) -> Page {
    page(server.client.get(url)).await
}

/// POSTs a link's form (`reason`, when given, urlencoded as a browser sends it).
async fn post(server: &Server, url: &str, reason: Option<&str>) -> Page {
    let body = reason.map(|r| format!("reason={}", r.replace(' ', "+"))).unwrap_or_default();
    page(server.client.post(url).header("content-type", "application/x-www-form-urlencoded").body(body)).await
}

async fn page(request: reqwest::RequestBuilder) -> Page {
    let response = request.send().await.unwrap_or_else(|e| panic!("{e}"));
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let html = response.text().await.unwrap_or_else(|e| panic!("{e}"));
    let page = Page { status, headers, html };
    page.assert_headers();
    page
}

impl Page {
    /// Every page carries the same security headers, and is HTML.
    fn assert_headers(&self) {
        let header = |name: &str| self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert_eq!(header("content-type"), "text/html; charset=utf-8", "{}", self.html);
        assert_eq!(header("content-security-policy"), tollgate_agent_notify::page::CONTENT_SECURITY_POLICY);
        assert_eq!(header("cache-control"), "no-store");
        assert_eq!(header("referrer-policy"), "no-referrer");
        assert_eq!(header("x-frame-options"), "DENY");
        assert_eq!(header("x-content-type-options"), "nosniff");
        assert!(self.html.starts_with("<!doctype html>"), "{}", self.html);
    }

    /// The page answered `status` with the title `title`.
    fn assert(&self, status: u16, title: &str) {
        assert_eq!(self.status, status, "{}", self.html);
        assert!(self.html.contains(&format!("<h1>{title}</h1>")), "expected `{title}`: {}", self.html);
    }
}

/// How many `decision` events the run has.
async fn decisions(server: &Server, run: &RunId) -> Vec<Value> {
    let reply = server.get(&format!("/v1/runs/{run}/events")).await;
    reply.body["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == "decision")
        .map(|e| e["data"].clone())
        .collect()
}

/// The run as the API shows it.
async fn run_json(server: &Server, run: &RunId) -> Value {
    server.get(&format!("/v1/runs/{run}")).await.body
}

/// The claims of a link to `action` the first call awaiting a decision of the waiting `run`, as `actor`.
fn claims(run: &Value, action: LinkAction, actor: &str) -> LinkClaims {
    let call = run["pending"]["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["takes_decision"] == true)
        .map(|c| c["call_id"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("no call awaits a decision: {run}"));
    LinkClaims {
        run: id(run),
        digest: digest(run),
        call: call.into(),
        action,
        actor: actor.into(),
        expires_at: now() + 3_600_000,
        notifier: "test".into(),
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The URL of a link signed with the server's secret.
fn link(server: &Server, claims: &LinkClaims) -> String {
    server.url(&format!("/approve/{}", sign(LINK_SECRET, claims)))
}

/// The value of a metric line `name` (with its labels) of `/metrics`.
async fn metric(server: &Server, name: &str) -> Option<f64> {
    let text = server.get("/metrics").await.body.as_str().unwrap_or_default().to_owned();
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Waits (bounded) until `/metrics` shows `name` at `value`.
async fn metric_reaches(server: &Server, name: &str, value: f64) {
    for _ in 0..200 {
        if metric(server, name).await == Some(value) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name} did not reach {value} within 10 s (it is {:?})", metric(server, name).await);
}

#[tokio::test]
async fn slack_gets_block_kit_and_its_links_decide_once() {
    for backend in backends() {
        let (notifiers, [slack_hook, other_hook]) =
            two_slacks(("ops", "alice", &[SCRIBE]), ("pairs", "bob", &[common::PAIR])).await;
        let server = server(&backend, notifiers).await;
        let run = server.waiting_run(SCRIBE, "hello <world> & all").await;
        let run_id = id(&run);
        eventually("the Slack message", || !slack_hook.all().is_empty()).await;
        let message = messages(&slack_hook).remove(0);

        // The Block Kit message: agent, run, input (escaped), the held call with its preview, and links.
        let text = message["text"].as_str().unwrap_or_default();
        assert!(text.contains("scribe is waiting for approval") && text.contains(run_id.as_str()), "{message}");
        assert_eq!(message["blocks"][0]["type"], "header");
        assert_eq!(message["blocks"][0]["text"]["text"], "scribe is waiting for approval");
        let all = message.to_string();
        assert!(all.contains("hello &lt;world&gt; &amp; all"), "the input, Slack-escaped: {all}");
        assert!(all.contains("`write`") && all.contains("write a note"), "the call and its preview: {all}");
        assert!(!all.contains("`nuke`"), "a forbidden call takes no decision and is not listed: {all}");
        assert_eq!(buttons(&message, "Review"), vec![server.url(&format!("/#/runs/{run_id}"))]);
        let approve = buttons(&message, "Approve");
        let deny = buttons(&message, "Deny");
        assert_eq!((approve.len(), deny.len()), (1, 1), "{message}");
        let token = approve[0].strip_prefix(&server.url("/approve/")).unwrap_or_else(|| panic!("{}", approve[0]));
        let bound = verify(LINK_SECRET, token, now()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((bound.run.as_str(), bound.digest.as_str()), (run_id.as_str(), digest(&run).as_str()));
        assert_eq!(
            (bound.action, bound.actor.as_str(), bound.notifier.as_str()),
            (LinkAction::Approve, "alice", "ops")
        );
        assert!(bound.expires_at > now() + 6 * 86_400_000, "no deadline: seven days");

        // GET shows the confirm page and decides nothing.
        let shown = get(&server, &approve[0]).await;
        shown.assert(200, "Approve this call?");
        assert!(shown.html.contains("recorded as <strong>alice</strong>") && shown.html.contains("write a note"));
        assert!(decisions(&server, &run_id).await.is_empty(), "a GET decides nothing");
        assert_eq!(run_json(&server, &run_id).await["status"], "waiting_for_approval");

        // POST decides, as alice, through this link.
        post(&server, &approve[0], None).await.assert(200, "Approved");
        let done = server.settled(&run_id).await;
        assert_eq!(done["status"], "completed", "{done}");
        let decided = decisions(&server, &run_id).await;
        assert_eq!(decided.len(), 1, "{decided:?}");
        assert_eq!(
            (decided[0]["actor"].as_str(), decided[0]["link"].as_str()),
            (Some("alice"), Some(&*link_id(token)))
        );

        // The link again: used. The other link of the call: the run moved on.
        post(&server, &approve[0], None).await.assert(409, "Link already used");
        get(&server, &approve[0]).await.assert(409, "Link already used");
        get(&server, &deny[0]).await.assert(409, "Decision no longer needed");
        assert_eq!(decisions(&server, &run_id).await.len(), 1);

        // Only the notifier of this agent was told; both are counted; the wait was measured.
        metric_reaches(&server, "tollgate_notifications_total{notifier=\"ops\",outcome=\"sent\"}", 1.0).await;
        assert!(other_hook.all().is_empty(), "a notifier of another agent is not told");
        assert_eq!(
            metric(&server, "tollgate_notifications_total{notifier=\"pairs\",outcome=\"sent\"}").await,
            Some(0.0)
        );
        assert_eq!(metric(&server, "tollgate_approval_wait_seconds_count").await, Some(1.0));
        server.stop().await;
    }
}

/// `python -m aiosmtpd` on loopback, writing each mail it receives into a maildir; stopped on drop.
struct SmtpSink {
    port: u16,
    maildir: PathBuf,
    python: PathBuf,
    process: Child,
}

impl SmtpSink {
    /// Starts the sink, or `None` (with a note) without the venv outside CI; fails in CI.
    async fn start() -> Option<SmtpSink> {
        let python = common::python(&["aiosmtpd"])?;
        let maildir = tollgate_agent_testkit::scratch_dir("smtp").join("maildir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(&python)
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}"), "-c", "aiosmtpd.handlers.Mailbox"])
            .arg(&maildir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start aiosmtpd: {e}"));
        let sink = SmtpSink { port, maildir, python, process: child };
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(started.elapsed() < Duration::from_secs(20), "aiosmtpd did not listen on {port} within 20 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(sink)
    }

    /// The mails received so far, each as its subject and decoded plain-text part (read by Python's
    /// `email` package, which undoes the transfer encoding; the subject unfolded as RFC 5322 says).
    fn mails(&self) -> Vec<(String, String)> {
        let Ok(entries) = std::fs::read_dir(self.maildir.join("new")) else { return Vec::new() };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        let script = "import email, sys\n\
            m = email.message_from_binary_file(open(sys.argv[1], 'rb'))\n\
            text = [p.get_payload(decode=True).decode() for p in m.walk() if p.get_content_type() == 'text/plain']\n\
            html = [p for p in m.walk() if p.get_content_type() == 'text/html']\n\
            assert len(text) == 1 and len(html) == 1, 'a text and an HTML part'\n\
            print(m['subject'].replace('\\r', '').replace('\\n', ''))\n\
            print(text[0])\n";
        paths
            .iter()
            .map(|path| {
                let out = common::run_command(Command::new(&self.python).args(["-c", script]).arg(path));
                let (subject, text) = out.split_once('\n').unwrap_or_default();
                (subject.to_owned(), text.to_owned())
            })
            .collect()
    }
}

impl Drop for SmtpSink {
    /// Stops the server (it would outlive the test otherwise).
    fn drop(&mut self) {
        if self.process.kill().is_ok() {
            let _ = self.process.wait();
        }
    }
}

/// The links of a plain-text mail, labelled `Approve:` / `Deny:`.
fn mail_links(text: &str, label: &str) -> Vec<String> {
    text.lines().filter_map(|line| line.strip_prefix(label)?.strip_prefix(": ")).map(str::to_owned).collect()
}

#[tokio::test]
async fn a_mail_reaches_a_real_smtp_server_and_its_links_decide() {
    let Some(sink) = SmtpSink::start().await else { return };
    for backend in backends() {
        let email = EmailNotifier::new(EmailSettings {
            host: "127.0.0.1".into(),
            port: sink.port,
            starttls: false,
            credentials: None,
            from: "Tollgate <tollgate@example.com>".into(),
            to: vec!["ops@example.com".into()],
            timeout: Duration::from_secs(5),
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let notifier = Notifier {
            name: "mail".into(),
            transport: Transport::Email(email),
            actor: "carol".into(),
            agents: vec![SCRIBE.into()],
        };
        let server = server(&backend, vec![notifier]).await;
        let run = server.waiting_run(SCRIBE, "mail me").await;
        let run_id = id(&run);
        // The maildir's file names do not sort by arrival (their microseconds are not zero-padded), so the
        // mail is found by its run, and there must be exactly one.
        let mut mail = Vec::new();
        for _ in 0..200 {
            mail = sink.mails().into_iter().filter(|(subject, _)| subject.contains(run_id.as_str())).collect();
            if !mail.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(mail.len(), 1, "one mail for run {run_id} within 10 s: {mail:?}");
        let (subject, text) = mail.remove(0);
        assert_eq!(subject, format!("[Tollgate] scribe is waiting for approval (1 call, run {run_id})"));
        assert!(text.contains("mail me") && text.contains("write a note"), "{text}");
        assert!(text.contains(&format!("Review in the playground: {}", server.url(&format!("/#/runs/{run_id}")))));
        let deny = mail_links(&text, "Deny");
        assert_eq!((mail_links(&text, "Approve").len(), deny.len()), (1, 1), "{text}");

        // The deny link: its page asks for a reason and decides nothing; a POST without one is refused.
        let shown = get(&server, &deny[0]).await;
        shown.assert(200, "Deny this call?");
        assert!(shown.html.contains("name=\"reason\"") && shown.html.contains("recorded as <strong>carol</strong>"));
        post(&server, &deny[0], None).await.assert(422, "Decision refused");
        post(&server, &deny[0], Some("  ")).await.assert(422, "Decision refused");
        assert!(decisions(&server, &run_id).await.is_empty(), "nothing decided yet");

        post(&server, &deny[0], Some("not today")).await.assert(200, "Denied");
        let done = server.settled(&run_id).await;
        assert_eq!((done["status"].as_str(), done["output"].as_str()), (Some("completed"), Some("Not written.")));
        let decided = decisions(&server, &run_id).await;
        assert_eq!(decided.len(), 1);
        assert_eq!((decided[0]["action"].as_str(), decided[0]["reason"].as_str()), (Some("deny"), Some("not today")));
        assert_eq!(decided[0]["actor"], "carol");
        metric_reaches(&server, "tollgate_notifications_total{notifier=\"mail\",outcome=\"sent\"}", 1.0).await;
        server.stop().await;
    }
}

/// A token like `token` with one character of its signature changed.
fn tampered(token: &str) -> String {
    let mut bytes = token.as_bytes().to_vec();
    let last = bytes.len() - 2;
    bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap_or_default()
}

#[tokio::test]
async fn every_refused_link_says_why_and_decides_nothing() {
    for backend in backends() {
        let (server, run, run_id) = waiting(&backend, SCRIBE, "refusals").await;
        let approve = claims(&run, LinkAction::Approve, "alice");

        // Tampered: any change, or not a token at all (403). Expired: a genuine token past its time (410).
        let token = sign(LINK_SECRET, &approve);
        get(&server, &server.url(&format!("/approve/{}", tampered(&token)))).await.assert(403, "Invalid link");
        post(&server, &server.url("/approve/not-a-token"), None).await.assert(403, "Invalid link");
        let foreign = sign(b"another secret, also of 32 bytes or more", &approve);
        post(&server, &server.url(&format!("/approve/{foreign}")), None).await.assert(403, "Invalid link");
        let expired = LinkClaims { expires_at: now() - 1, ..approve.clone() };
        let page = post(&server, &link(&server, &expired), None).await;
        page.assert(410, "Link expired");
        assert!(page.html.contains(run_id.as_str()), "the expired page names its run");

        // Not found (404); stale: another turn's digest, or a call that takes no decision (409).
        let missing = LinkClaims { run: "0193b0c6-0000-7000-8000-000000000001".into(), ..approve.clone() };
        post(&server, &link(&server, &missing), None).await.assert(404, "Run not found");
        let other_turn = LinkClaims { digest: format!("sha256:{}", "0".repeat(64)), ..approve.clone() };
        post(&server, &link(&server, &other_turn), None).await.assert(409, "Decision no longer needed");
        let nuke = run["pending"]["calls"][2]["call_id"].as_str().unwrap_or_default();
        assert_eq!(run["pending"]["calls"][2]["tool"], "nuke");
        let forbidden = LinkClaims { call: nuke.into(), ..approve.clone() };
        get(&server, &link(&server, &forbidden)).await.assert(409, "Decision no longer needed");

        // A form that is not a form (415), or too large (413).
        let url = link(&server, &approve);
        let json = server.client.post(&url).header("content-type", "application/json").body("{\"reason\":\"x\"}");
        page_status(json, 415).await;
        let huge = format!("reason={}", "x".repeat(20 * 1024));
        let large = server.client.post(&url).header("content-type", "application/x-www-form-urlencoded").body(huge);
        page_status(large, 413).await;
        assert!(decisions(&server, &run_id).await.is_empty(), "no refusal decided anything");
        assert_eq!(run_json(&server, &run_id).await["status"], "waiting_for_approval");

        // Used (409): once decided through, the link says so, and so does every later use.
        post(&server, &url, None).await.assert(200, "Approved");
        server.settled(&run_id).await;
        post(&server, &url, None).await.assert(409, "Link already used");

        // Refused (422): self-approval, where the agent forbids it (auth off: every run is `local`'s).
        let guarded = server.waiting_run(GUARDED, "mine").await;
        let own = link(&server, &claims(&guarded, LinkAction::Approve, "local"));
        let page = post(&server, &own, None).await;
        page.assert(422, "Decision refused");
        assert!(page.html.contains("forbids self-approval"), "{}", page.html);
        assert!(decisions(&server, &id(&guarded)).await.is_empty());
        server.stop().await;
    }
}

async fn page_status(request: reqwest::RequestBuilder, status: u16) {
    let page = page(request).await;
    assert_eq!(page.status, status, "{}", page.html);
    page.assert(status, "Decision refused");
}

#[tokio::test]
async fn without_a_link_secret_no_link_is_valid() {
    let server = Server::start(Config::default()).await;
    let run = server.waiting_run(SCRIBE, "no links").await;
    get(&server, &link(&server, &claims(&run, LinkAction::Approve, "local"))).await.assert(403, "Invalid link");
    server.stop().await;
}

#[tokio::test]
async fn with_tokens_a_link_decides_only_as_an_approver() {
    let server = Server::start(Config { tokens: common::tokens(), links: true, ..Default::default() }).await;
    let started = server.call(
        "POST",
        "/v1/runs",
        Some("alice-token"),
        Some(json!({"agent": SCRIBE, "input": "x", "wait": true})),
    );
    let run = started.await.body;
    // The link needs no bearer token; its actor must hold the approver role.
    let runner = post(&server, &link(&server, &claims(&run, LinkAction::Approve, "alice")), None).await;
    runner.assert(422, "Decision refused");
    assert!(runner.html.contains("approver role"), "{}", runner.html);
    let unknown = get(&server, &link(&server, &claims(&run, LinkAction::Approve, "mallory"))).await;
    unknown.assert(422, "Decision refused");
    assert!(decisions(&server, &id(&run)).await.is_empty());
    post(&server, &link(&server, &claims(&run, LinkAction::Approve, "bob")), None).await.assert(200, "Approved");
    assert_eq!(server.settled(&id(&run)).await["status"], "completed");
    server.stop().await;
}

#[tokio::test]
async fn a_link_followed_twice_at_once_decides_once() {
    for backend in backends() {
        let server = server(&backend, Vec::new()).await;
        for action in [LinkAction::Approve, LinkAction::Deny] {
            let run = server.waiting_run(SCRIBE, "twice").await;
            let url = link(&server, &claims(&run, action, "alice"));
            let pages = futures_util::future::join_all((0..8).map(|_| post(&server, &url, Some("no")))).await;
            let mut statuses: Vec<u16> = pages.iter().map(|p| p.status).collect();
            statuses.sort_unstable();
            assert_eq!(statuses, [vec![200], vec![409; 7]].concat(), "one decides, the others are told");
            for page in pages.iter().filter(|p| p.status == 409) {
                assert!(
                    page.html.contains("<h1>Link already used</h1>")
                        || page.html.contains("<h1>Decision no longer needed</h1>"),
                    "{}",
                    page.html
                );
            }
            server.settled(&id(&run)).await;
            assert_eq!(decisions(&server, &id(&run)).await.len(), 1, "exactly one decision");
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn a_quorum_calls_link_counts_one_approval_by_its_actor() {
    for backend in backends() {
        let (server, run, run_id) = waiting(&backend, QUORUM, "two people").await;
        assert_eq!(run["pending"]["calls"][0]["approvals"], json!({"required": 2, "given": []}));
        let alice = claims(&run, LinkAction::Approve, "alice");
        post(&server, &link(&server, &alice), None).await.assert(200, "Approved");
        let after = run_json(&server, &run_id).await;
        assert_eq!(after["status"], "waiting_for_approval", "one approval of two: still waiting");
        assert_eq!(after["pending"]["calls"][0]["approvals"], json!({"required": 2, "given": ["alice"]}));
        // alice's other link for the same call: a second approval by one person is refused.
        let again = LinkClaims { expires_at: alice.expires_at + 1, ..alice.clone() };
        let page = post(&server, &link(&server, &again), None).await;
        page.assert(422, "Decision refused");
        assert!(page.html.contains("distinct people"), "{}", page.html);
        // Another person's link completes it.
        post(&server, &link(&server, &claims(&after, LinkAction::Approve, "carol")), None)
            .await
            .assert(200, "Approved");
        assert_eq!(server.settled(&run_id).await["status"], "completed");
        let actors: Vec<Value> = decisions(&server, &run_id).await.iter().map(|d| d["actor"].clone()).collect();
        assert_eq!(actors, vec![json!("alice"), json!("carol")]);
        server.stop().await;
    }
}

/// A port nothing listens on.
fn closed_port_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    format!("http://127.0.0.1:{port}/hook")
}

/// The median time from `POST /v1/runs` (`wait: true`) to the answer `waiting_for_approval`.
async fn median_time_to_waiting(server: &Server, runs: usize) -> Duration {
    let mut times = Vec::new();
    for n in 0..runs {
        let started = Instant::now();
        server.waiting_run(SCRIBE, &format!("fast {n}")).await;
        times.push(started.elapsed());
    }
    times.sort_unstable();
    times[runs / 2]
}

#[tokio::test]
async fn a_notifier_that_is_down_never_delays_a_run() {
    const RUNS: usize = 5;
    let quiet = server(&Backend::Sqlite, Vec::new()).await;
    let baseline = median_time_to_waiting(&quiet, RUNS).await;
    quiet.stop().await;

    let (failing_url, failing) = receiver(StatusCode::INTERNAL_SERVER_ERROR).await;
    let (refusing_url, refusing) = receiver(StatusCode::NOT_FOUND).await;
    let (hanging_url, hanging) = hanging_receiver().await;
    let notifiers = vec![
        slack("refused", &closed_port_url(), "alice", &[SCRIBE], Duration::from_secs(2)),
        slack("failing", &failing_url, "alice", &[SCRIBE], Duration::from_secs(2)),
        slack("gone", &refusing_url, "alice", &[SCRIBE], Duration::from_secs(2)),
        slack("hanging", &hanging_url, "alice", &[SCRIBE], Duration::from_millis(300)),
    ];
    let server = server(&Backend::Sqlite, notifiers).await;
    let with_notifiers = median_time_to_waiting(&server, RUNS).await;
    assert!(
        with_notifiers <= baseline * 3 + Duration::from_millis(100),
        "start → waiting took {with_notifiers:?} with notifiers that are down, {baseline:?} without"
    );
    // Each is tried: 5xx, a refused connection and a timeout three times (the test's retry), a 404 once.
    let runs = RUNS as f64;
    for (notifier, outcome) in [("refused", "failed"), ("failing", "failed"), ("gone", "failed"), ("hanging", "failed")]
    {
        let name = format!("tollgate_notifications_total{{notifier=\"{notifier}\",outcome=\"{outcome}\"}}");
        metric_reaches(&server, &name, runs).await;
    }
    assert_eq!(failing.all().len(), 3 * RUNS, "a 500 is tried again");
    assert_eq!(hanging.all().len(), 3 * RUNS, "a timeout is tried again");
    assert_eq!(refusing.all().len(), RUNS, "a 404 will not pass: not tried again");
    // The runs wait on, decidable as ever.
    let run = server.waiting_run(SCRIBE, "still fine").await;
    assert_eq!(server.approve_and_wait(&run).await.body["status"], "completed");
    server.stop().await;
}

#[tokio::test]
async fn an_escalation_is_sent_to_the_notifiers_it_names() {
    for backend in backends() {
        // boss is told of escalations only (its `on` leaves out approval_requested).
        let (notifiers, [ops, boss]) = two_slacks(("ops", "alice", &[SCRIBE]), ("boss", "bob", &[])).await;
        // The runtime's sweep escalates a turn held a second, naming boss and a notifier no one has.
        let escalate = EscalationRule::new(Duration::from_secs(1), vec!["boss".into(), "nobody".into()]);
        let config =
            Config { backend: backend.clone(), notifiers, links: true, escalate: Some(escalate), ..Default::default() };
        let server = Server::start(config).await;
        let run = server.waiting_run(SCRIBE, "escalate me").await;
        let run_id = id(&run);
        eventually("the request to ops", || ops.all().len() == 1).await;

        eventually("the escalation to boss", || boss.all().len() == 1).await;
        let escalated: Vec<Value> = server.get(&format!("/v1/runs/{run_id}/events")).await.body["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["kind"] == "approval_escalated")
            .map(|e| e["data"].clone())
            .collect();
        assert_eq!(
            escalated,
            vec![json!({"turn_digest": digest(&run), "after": "1s", "notified": ["boss", "nobody"]})]
        );
        let message = messages(&boss).remove(0);
        assert_eq!(message["blocks"][0]["text"]["text"], "scribe is still waiting after 1s", "{message}");
        let approve = buttons(&message, "Approve");
        let shown = get(&server, &approve[0]).await;
        shown.assert(200, "Approve this call?");
        assert!(shown.html.contains("recorded as <strong>bob</strong>"), "boss's links decide as bob");
        post(&server, &approve[0], None).await.assert(200, "Approved");
        assert_eq!(server.settled(&run_id).await["status"], "completed");
        metric_reaches(&server, "tollgate_notifications_total{notifier=\"boss\",outcome=\"sent\"}", 1.0).await;
        assert_eq!(ops.all().len(), 1, "ops is not named by the escalation: told once, of the request");
        server.stop().await;
    }
}

/// `tollgate_approval_wait_seconds` counts a turn held before this process started (its request read from
/// the run's log), from the request to the resume, and a turn held here from what the feed saw.
#[tokio::test]
async fn the_approval_wait_is_measured_from_the_request_even_across_a_restart() {
    for backend in backends() {
        let first = Server::start(Config { backend: backend.clone(), ..Default::default() }).await;
        let store = first.store.clone();
        let held_before = first.waiting_run(SCRIBE, "held before a restart").await;
        first.stop().await;
        // The turn waits for more than a second before anyone decides it.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let second = Server::start(Config { backend: backend.clone(), store: Some(store), ..Default::default() }).await;
        assert_eq!(metric(&second, "tollgate_approval_wait_seconds_count").await, Some(0.0));
        assert_eq!(second.approve_and_wait(&held_before).await.body["status"], "completed");
        metric_reaches(&second, "tollgate_approval_wait_seconds_count", 1.0).await;
        let waited = metric(&second, "tollgate_approval_wait_seconds_sum").await.unwrap_or_default();
        assert!((1.1..60.0).contains(&waited), "waited {waited} s");
        assert_eq!(metric(&second, "tollgate_approval_wait_seconds_bucket{le=\"1\"}").await, Some(0.0));
        assert_eq!(metric(&second, "tollgate_approval_wait_seconds_bucket{le=\"5\"}").await, Some(1.0));

        let held_here = second.waiting_run(SCRIBE, "held here").await;
        assert_eq!(second.approve_and_wait(&held_here).await.body["status"], "completed");
        metric_reaches(&second, "tollgate_approval_wait_seconds_count", 2.0).await;
        assert_eq!(metric(&second, "tollgate_approval_wait_seconds_bucket{le=\"1\"}").await, Some(1.0), "a quick one");
        second.stop().await;
    }
}
