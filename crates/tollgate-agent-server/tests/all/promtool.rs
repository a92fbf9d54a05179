//! `/metrics` as Prometheus itself reads it: `promtool check metrics` (from Debian's `prometheus`
//! package; `TOLLGATE_TEST_PROMTOOL` names another binary) finds no problem in what a server exposes
//! once it has runs, decisions, tool and model calls, webhook deliveries, notifications, an approval's
//! wait and a live-event stream, and what a node on PostgreSQL adds (its store's hosts).

use crate::common::{Backend, Config, SCRIBE, Server, id};
use crate::webhooks::{eventually, receiver};
use axum::http::StatusCode;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tollgate_agent_server::{Notifier, SlackNotifier, Transport, WebhookTarget};
use tollgate_agent_store::{PostgresStore, ScratchSchema};
use tollgate_agent_testkit::postgres_url;

/// promtool: `TOLLGATE_TEST_PROMTOOL`, else `promtool` on PATH. Missing, the test skips with a note, or
/// fails under CI (`.ci/run` installs it).
fn promtool() -> Option<PathBuf> {
    let promtool = std::env::var_os("TOLLGATE_TEST_PROMTOOL").map_or_else(|| PathBuf::from("promtool"), PathBuf::from);
    let runs = Command::new(&promtool).arg("--version").output().is_ok_and(|out| out.status.success());
    if runs {
        return Some(promtool);
    }
    let note = format!(
        "no promtool at {} (Debian: sudo apt-get install prometheus; or set TOLLGATE_TEST_PROMTOOL)",
        promtool.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{note}; CI runs this test");
    }
    eprintln!("skipped: {note}");
    None
}

#[tokio::test]
async fn promtool_finds_no_problem_in_the_metrics() {
    let Some(promtool) = promtool() else { return };
    let (url, hooks) = receiver(StatusCode::OK).await;
    let webhooks =
        vec![WebhookTarget { url, secret: "s".into(), events: vec![tollgate_agent_core::EventKind::RunCompleted] }];
    let (slack_url, slack) = receiver(StatusCode::OK).await;
    let transport = SlackNotifier::new(slack_url, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{e}"));
    let notifier = Notifier {
        name: "ops".into(),
        transport: Transport::Slack(transport),
        actor: "alice".into(),
        agents: vec![SCRIBE.into()],
    };
    let server = Server::start(Config { webhooks, notifiers: vec![notifier], links: true, ..Default::default() }).await;
    let run = server.waiting_run(SCRIBE, "metrics").await;
    eventually("the run's notification sent", || !slack.all().is_empty()).await;
    let stream = server
        .client
        .get(server.url(&format!("/v1/runs/{}/events", id(&run))))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let done = server.approve_and_wait(&run).await;
    assert_eq!(done.body["status"], "completed", "{}", done.body);
    eventually("the run's webhook delivered", || !hooks.all().is_empty()).await;
    let metrics = server.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    let text = metrics.body.as_str().unwrap_or_default().to_owned();
    assert!(text.contains("tollgate_webhook_deliveries_total{outcome=\"delivered\"} 1"), "{text}");
    assert!(text.contains("tollgate_approval_wait_seconds_count 1"), "{text}");
    assert!(text.contains("tollgate_notifications_total{notifier=\"ops\",outcome=\"skipped\"} 0"), "{text}");
    drop(stream);
    check(promtool, text).await;
    server.stop().await;
}

/// A node on PostgreSQL adds its store's hosts (`tollgate_store_host{host}`, the moves and failed
/// looks); Prometheus reads those too.
#[tokio::test]
async fn promtool_finds_no_problem_in_the_metrics_of_a_node_on_postgresql() {
    let Some(base) = postgres_url() else { return };
    let Some(promtool) = promtool() else { return };
    let schema = ScratchSchema::create(&base, "tollgate_promtool").await.unwrap_or_else(|e| panic!("{e}"));
    let url = schema.url();
    let store = PostgresStore::open(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let server = Server::start(Config {
        backend: Backend::Postgres(url.clone()),
        store: Some(Arc::new(store)),
        ..Default::default()
    })
    .await;
    let run = server.waiting_run(SCRIBE, "metrics").await;
    let done = server.approve_and_wait(&run).await;
    assert_eq!(done.body["status"], "completed", "{}", done.body);
    let metrics = server.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    let text = metrics.body.as_str().unwrap_or_default().to_owned();
    // The test database's one host, as `host:port`, is the one in use.
    let authority = base.split_once("://").map_or("", |(_, rest)| rest.split(['/', '?']).next().unwrap_or(""));
    let host = authority.rsplit('@').next().unwrap_or(authority);
    let host = if host.contains(':') { host.to_owned() } else { format!("{host}:5432") };
    assert!(text.contains(&format!("tollgate_store_host{{host=\"{host}\"}} 1\n")), "{text}");
    assert!(text.contains("tollgate_store_host_moves_total 0\n"), "{text}");
    assert!(text.contains("tollgate_store_host_none_would_do_total 0\n"), "{text}");
    check(promtool, text).await;
    server.stop().await;
    schema.drop_all().await.unwrap_or_else(|e| panic!("{e}"));
}

/// `promtool check metrics` on `text` says nothing and succeeds.
async fn check(promtool: PathBuf, text: String) {
    let checked = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("promtool: {e}"));
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        }
        child.wait_with_output().unwrap_or_else(|e| panic!("{e}"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let said = format!("{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
    assert!(checked.status.success() && said.trim().is_empty(), "promtool check metrics: {said}");
}
