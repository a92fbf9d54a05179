//! What notifications cost (issue #35; docs/benchmarks.md, "What notifications cost"): workload A's phase
//! 1 in process, with a Tollgate server running beside the runtime, against the same phase with two
//! notifiers configured — a Slack incoming webhook and an SMTP relay, each a loopback receiver in this
//! process — that tell a person of every run that waits. Delivery reads the store's commit log after
//! the commit (V2.md section 4: it never blocks a run), so the run's own path should not notice it.
//!
//! Two sides alike but for the notifiers — a store each (the second SQLite file beside the first), a
//! runtime and a server on `127.0.0.1:0` each, up for the whole sitting — take turns: a round runs A's
//! phase 1 for N runs on one side (start → waiting, `concurrency` in flight) and, on the notified side,
//! waits until both receivers have had a message per run. Rounds alternate, the order swapped every
//! round, so that a machine that speeds up or slows down weighs on both sides.
//!
//! Two rows besides the pair: how long after the last run waited the last message was delivered, and
//! the CPU per run of the notified rounds counted to the last delivery (the receivers included: they run
//! in this process).

use crate::grants::{Tally, pair, start_block};
use crate::{BENCH_ACTOR, BenchError, PhaseReport, bench_agent, bench_runtime, cpu_time, err, phase_report_spent};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tollgate_agent_core::{Actor, Gate, RunStatus};
use tollgate_agent_runtime::Runtime;
use tollgate_agent_server::{
    EmailNotifier, EmailSettings, LinkSecret, Notifier, ServerOptions, SlackNotifier, Transport,
};

/// Rounds of each kind, alternating, when the caller has no reason to choose.
pub const ROUNDS: u32 = 4;

/// The agent of every run.
const AGENT: &str = "bench";
/// How long a round waits for its last message at most.
const DELIVERY_LIMIT: Duration = Duration::from_secs(300);

/// What notifications cost, against the store at `store_url` (use a fresh database): `n` runs per kind
/// and round with `concurrency` in flight, `rounds` alternating rounds. Returns A's phase 1 without
/// notifiers and with two (the second carrying its [`crate::Versus`] the first), then the notified
/// rounds counted to their last delivery.
pub async fn notify_costs(
    store_url: &str,
    n: u64,
    concurrency: usize,
    rounds: u32,
) -> Result<Vec<PhaseReport>, BenchError> {
    let store_url = store_url.to_owned();
    crate::in_own_task(async move { notify_costs_here(&store_url, n, concurrency, rounds).await }).await
}

async fn notify_costs_here(
    store_url: &str,
    n: u64,
    concurrency: usize,
    rounds: u32,
) -> Result<Vec<PhaseReport>, BenchError> {
    if rounds == 0 {
        return Err(BenchError("what notifications cost needs at least one round".into()));
    }
    let slack = Receiver::start(Protocol::Http).await?;
    let smtp = Receiver::start(Protocol::Smtp).await?;
    let notes = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Two of everything, alike but for the notifiers: a store (the second file beside the first), a
    // runtime and a server each, both up for the whole sitting.
    let mut sides = Vec::with_capacity(2);
    for (url, notifiers) in
        [(store_url.to_owned(), Vec::new()), (beside(store_url, "notified"), vec![slack.notifier()?, smtp.notifier()?])]
    {
        let store = crate::open_store(&url).await?;
        let runtime = bench_runtime(store, vec![bench_agent(AGENT, Gate::Ask, notes.clone())?])?;
        let server = Server::start(&runtime, notifiers).await?;
        sides.push((runtime, server));
    }
    let c = concurrency.max(1);
    let mut next = 0;
    let [mut plain, mut notified] = std::array::from_fn(|_| Tally::default());
    let (mut delivered_after, mut to_delivery) = (Vec::new(), Tally::default());
    for round in 0..rounds {
        let order = if round % 2 == 0 { [false, true] } else { [true, false] };
        for with_notifiers in order {
            let runtime = &sides[usize::from(with_notifiers)].0;
            let waiting = RunStatus::WaitingForApproval;
            if !with_notifiers {
                start_block(runtime, AGENT, next..next + n, c, waiting, &mut plain).await?;
            } else {
                let (cpu0, began) = (cpu_time(), Instant::now());
                let expected = (slack.count() + n, smtp.count() + n);
                start_block(runtime, AGENT, next..next + n, c, waiting, &mut notified).await?;
                let waited = Instant::now();
                slack.wait_for(expected.0).await?;
                smtp.wait_for(expected.1).await?;
                delivered_after.push(waited.elapsed());
                let per_run = began.elapsed() / u32::try_from(n.max(1)).unwrap_or(u32::MAX);
                to_delivery.add(began, cpu0, vec![per_run; usize::try_from(n).unwrap_or(0)], 0);
            }
            next += n;
        }
    }
    for (_, server) in sides {
        server.stop().await?;
    }
    if slack.count() != u64::from(rounds) * n || smtp.count() != u64::from(rounds) * n {
        return Err(BenchError(format!(
            "what notifications cost: the Slack receiver had {} messages and the SMTP relay {}; expected {} each",
            slack.count(),
            smtp.count(),
            u64::from(rounds) * n
        )));
    }
    let level = format!("(c={c})");
    let [of, mut with] = pair(
        (format!("A phase 1, no notifiers {level}"), plain),
        (format!("A phase 1, 2 notifiers (Slack, SMTP) {level}"), notified),
        rounds,
        false,
    );
    let last = delivered_after.iter().max().copied().unwrap_or_default();
    with.check = Some(format!(
        "A with notifiers {level}: {rounds} rounds of {n} runs of each kind waited; the Slack receiver and the SMTP \
         relay each had one message per run of the notified side ({} each) and none for the other side's; the \
         last message of a round arrived {:.0} ms after its last run waited",
        u64::from(rounds) * n,
        last.as_secs_f64() * 1e3
    ));
    let spent = to_delivery.spent;
    let wall = to_delivery.wall;
    let counted = u64::from(rounds) * n;
    let delivery = phase_report_spent(
        &format!("A phase 1, 2 notifiers, to the last delivery {level}"),
        wall,
        counted,
        (0.0, 0.0),
        spent,
        None,
    );
    Ok(vec![of, with, delivery])
}

/// A Tollgate server on `127.0.0.1:0` over the runtime, until stopped.
struct Server {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), tollgate_agent_server::ServerError>>,
}

impl Server {
    async fn start(runtime: &Runtime, notifiers: Vec<Notifier>) -> Result<Server, BenchError> {
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(err)?;
        let addr = listener.local_addr().map_err(err)?;
        let link_secret = if notifiers.is_empty() { None } else { Some(LinkSecret::new(vec![7; 32]).map_err(err)?) };
        let options = ServerOptions { addr, notifiers, link_secret, ..ServerOptions::default() };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let notified = !options.notifiers.is_empty();
        let task = tokio::spawn(tollgate_agent_server::serve_on(listener, runtime.clone(), options, async move {
            let _ = stopped.await;
        }));
        if notified {
            reading(addr).await?;
        }
        Ok(Server { stop, task })
    }

    async fn stop(self) -> Result<(), BenchError> {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(err(format!("the server failed: {e}"))),
            Err(e) => Err(err(format!("the server task failed: {e}"))),
        }
    }
}

/// Waits until the server at `addr` holds the commit log's `notifications` reader (its `/metrics` say
/// so): a reader taken for the first time starts at the end of the log, so a run committed before it
/// is positioned would never be told of.
async fn reading(addr: std::net::SocketAddr) -> Result<(), BenchError> {
    let client = reqwest::Client::new();
    let began = Instant::now();
    loop {
        let metrics = match client.get(format!("http://{addr}/metrics")).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if metrics.lines().any(|line| line == "tollgate_notification_reader_held 1") {
            return Ok(());
        }
        if began.elapsed() > DELIVERY_LIMIT {
            return Err(BenchError("what notifications cost: the server never took the notifications reader".into()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a loopback receiver speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// HTTP/1.1: every request answered `200 ok` (a Slack incoming webhook).
    Http,
    /// SMTP: every message taken (a relay).
    Smtp,
}

/// A loopback receiver counting the messages it took.
struct Receiver {
    protocol: Protocol,
    port: u16,
    count: Arc<AtomicU64>,
}

impl Receiver {
    async fn start(protocol: Protocol) -> Result<Receiver, BenchError> {
        let count = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&count);
        let port = listen(move |stream| {
            let counted = Arc::clone(&counted);
            async move {
                match protocol {
                    Protocol::Http => {
                        serve_http(stream, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", |_| {
                            counted.fetch_add(1, Ordering::AcqRel);
                        })
                        .await
                    }
                    Protocol::Smtp => serve_smtp(stream, &counted).await,
                }
            }
        })
        .await?;
        Ok(Receiver { protocol, port, count })
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Waits until the receiver has taken `expected` messages.
    async fn wait_for(&self, expected: u64) -> Result<(), BenchError> {
        let began = Instant::now();
        while self.count() < expected {
            if began.elapsed() > DELIVERY_LIMIT {
                return Err(BenchError(format!(
                    "what notifications cost: {} of {expected} messages arrived in {DELIVERY_LIMIT:?}",
                    self.count()
                )));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    /// A notifier sending to this receiver, covering the notified agent.
    fn notifier(&self) -> Result<Notifier, BenchError> {
        let timeout = Duration::from_secs(10);
        let (name, transport) = match self.protocol {
            Protocol::Http => {
                let url = format!("http://127.0.0.1:{}/services/T0/B0/bench", self.port);
                ("slack", Transport::Slack(SlackNotifier::new(url, timeout).map_err(err)?))
            }
            Protocol::Smtp => {
                let settings = EmailSettings {
                    host: "127.0.0.1".into(),
                    port: self.port,
                    starttls: false,
                    credentials: None,
                    from: "Tollgate <tollgate@example.com>".into(),
                    to: vec!["ops@example.com".into()],
                    timeout,
                };
                ("mail", Transport::Email(EmailNotifier::new(settings).map_err(err)?))
            }
        };
        Ok(Notifier { name: name.into(), transport, actor: Actor::new(BENCH_ACTOR), agents: vec![AGENT.into()] })
    }
}

/// Listens on a free loopback port, each connection answered by `serve` in a task of its own (until
/// it fails or ends); returns the port.
pub(crate) async fn listen<F, Fut>(serve: F) -> Result<u16, BenchError>
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(err)?;
    let port = listener.local_addr().map_err(err)?.port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    Ok(port)
}

/// Answers every HTTP/1.1 request on `stream` with `answer` (a whole response) once `take` has had its
/// body (read to its `content-length`).
pub(crate) async fn serve_http(
    stream: tokio::net::TcpStream,
    answer: &[u8],
    mut take: impl FnMut(&[u8]),
) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if stream.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await?;
        take(&body);
        stream.get_mut().write_all(answer).await?;
    }
}

/// Takes every message sent on `stream` (the commands lettre sends, without extensions), counting each.
async fn serve_smtp(stream: tokio::net::TcpStream, count: &AtomicU64) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    stream.get_mut().write_all(b"220 bench ESMTP\r\n").await?;
    let mut line = String::new();
    loop {
        line.clear();
        if stream.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let verb = line.get(..4).unwrap_or_default().to_ascii_uppercase();
        let answer: &[u8] = match verb.as_str() {
            "EHLO" | "HELO" => b"250 bench\r\n",
            "DATA" => {
                stream.get_mut().write_all(b"354 go on\r\n").await?;
                loop {
                    line.clear();
                    if stream.read_line(&mut line).await? == 0 {
                        return Ok(());
                    }
                    if line == ".\r\n" {
                        break;
                    }
                }
                count.fetch_add(1, Ordering::AcqRel);
                b"250 taken\r\n"
            }
            "QUIT" => {
                stream.get_mut().write_all(b"221 bye\r\n").await?;
                return Ok(());
            }
            _ => b"250 ok\r\n",
        };
        stream.get_mut().write_all(answer).await?;
    }
}

/// A second database beside the one at `store_url`: a SQLite file's name with `-{label}` before its
/// extension; a PostgreSQL URL's database as it is (the second side then shares it: its runs are of the
/// same agent, and the commit log reader of the notified side reads the other side's commits too).
pub(crate) fn beside(store_url: &str, label: &str) -> String {
    match store_url.strip_suffix(".db") {
        Some(stem) if store_url.starts_with("sqlite:") => format!("{stem}-{label}.db"),
        _ => store_url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny sitting: both kinds waited, every notified run reached both receivers, and the pair and
    /// the delivery row come out in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_notified_runs_reach_both_receivers_and_compare_with_the_plain_ones() {
        let url = crate::scratch_store("bench-notify");
        let reports = notify_costs(&url, 6, 2, 2).await.unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "A phase 1, no notifiers (c=2)",
                "A phase 1, 2 notifiers (Slack, SMTP) (c=2)",
                "A phase 1, 2 notifiers, to the last delivery (c=2)"
            ]
        );
        assert_eq!(reports[1].versus.as_ref().map(|v| v.rounds), Some(2));
        assert!(reports[1].check.as_deref().is_some_and(|c| c.contains("12 each")), "{:?}", reports[1].check);
    }
}
