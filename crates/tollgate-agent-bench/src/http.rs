//! Workload A of docs/benchmarks.md through the HTTP API: a Tollgate server started in this process on
//! `127.0.0.1:0` over the store at a URL, and `clients` concurrent HTTP clients on loopback.
//!
//! Phase 1 sends `POST /v1/runs` with `wait: true` for each of N runs (answered once the run's suspension
//! is committed); phase 2 sends `POST /v1/runs/{id}/decisions` approving its one call with `wait: true`
//! (the server loads the run fresh from the store, records the decision, resumes, and answers once the
//! run completed). Latencies are per request, seen by the client; CPU time and peak RSS are the whole
//! process's (clients and server together). The end checks are those of the in-process workload: N
//! completed runs, the tool ran exactly N times, each text once. Bounded: N requests per phase, and the
//! whole run gives up with an error after `time_limit`.

use crate::{BenchError, PhaseReport, approval_runtime, cpu_time, err, report};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tollgate_agent_core::{RunId, RunStatus};

/// One request's bound.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Workload A over HTTP against the store at `store_url` (use a fresh database), with `clients`
/// requests in flight, giving up after `time_limit`.
pub async fn approval_cycle_http(
    store_url: &str,
    n: u64,
    clients: usize,
    time_limit: Duration,
) -> Result<Vec<PhaseReport>, BenchError> {
    let deadline = Instant::now() + time_limit;
    let store = crate::open_store(store_url).await?;
    let notes = Arc::new(Mutex::new(Vec::new()));
    let runtime = approval_runtime(store.clone(), notes.clone())?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(err)?;
    let addr = listener.local_addr().map_err(err)?;
    let options = tollgate_agent_server::ServerOptions { addr, ..tollgate_agent_server::ServerOptions::default() };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(tollgate_agent_server::serve_on(listener, runtime.clone(), options, async move {
        let _ = stopped.await;
    }));
    let base = format!("http://{addr}");
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(clients.max(1))
        .build()
        .map_err(err)?;

    let result = phases(&client, &base, store.as_ref(), n, clients.max(1), deadline).await;
    let _ = stop.send(());
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(err(format!("the server failed: {e}"))),
        Err(e) => return Err(err(format!("the server task failed: {e}"))),
    }
    let mut reports = result?;

    let notes = notes.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut distinct = notes.clone();
    distinct.sort();
    distinct.dedup();
    if notes.len() as u64 != n || distinct.len() as u64 != n {
        return Err(BenchError(format!(
            "workload A over HTTP: the tool ran {} times with {} distinct texts; expected {n} and {n}",
            notes.len(),
            distinct.len()
        )));
    }
    if let Some(stray) = notes.iter().find(|text| !crate::is_note_text(text, n)) {
        return Err(BenchError(format!("workload A over HTTP: the tool wrote {stray:?}, not a text \"hello {{i}}\"")));
    }
    if let Some(last) = reports.last_mut() {
        last.check = Some(format!("A/HTTP (c={clients}): {n} runs completed, {}", crate::tool_ran_once_each(n)));
    }
    Ok(reports)
}

async fn phases(
    client: &reqwest::Client,
    base: &str,
    store: &dyn tollgate_agent_core::RunStore,
    n: u64,
    clients: usize,
    deadline: Instant,
) -> Result<Vec<PhaseReport>, BenchError> {
    // Phase 1: start N runs; each answers once its suspension is committed.
    let cpu0 = cpu_time();
    let started = Instant::now();
    let results: Vec<Result<(RunId, String, Duration), BenchError>> = crate::in_flight(0..n, clients, |i| {
        let url = format!("{base}/v1/runs");
        async move {
            before_deadline(deadline)?;
            let t = Instant::now();
            let body = json!({"input": format!("Save a note saying hello {i}"), "wait": true});
            let run = send(client.post(url).json(&body), 201).await?;
            if run["status"] != RunStatus::WaitingForApproval.as_str() {
                return Err(BenchError(format!("run {} answered {} instead of waiting", run["id"], run["status"])));
            }
            let digest = run["pending"]["turn_digest"].as_str().unwrap_or_default().to_owned();
            Ok((served_id(&run), digest, t.elapsed()))
        }
    })
    .await;
    let mut held = Vec::with_capacity(results.len());
    let mut latencies = Vec::with_capacity(results.len());
    for result in results {
        let (id, digest, latency) = result?;
        held.push((id, digest));
        latencies.push(latency);
    }
    let phase1 =
        report(&format!("A/HTTP phase 1: POST /v1/runs → waiting (c={clients})"), started, cpu0, latencies, None);

    // Not timed: the mean size of the persisted suspensions, read from the store.
    let mut bytes = 0usize;
    for (id, _) in &held {
        let run = store.get(id).await.map_err(err)?;
        bytes += run.held_turn().map_or(0, |p| p.suspension.as_str().len());
    }
    let mean_bytes = bytes as f64 / held.len().max(1) as f64;

    // Phase 2: approve each run's call; the answer comes once the run completed.
    let cpu0 = cpu_time();
    let started = Instant::now();
    let results: Vec<Result<Duration, BenchError>> = crate::in_flight(held, clients, |(id, digest)| {
        let url = format!("{base}/v1/runs/{id}/decisions");
        async move {
            before_deadline(deadline)?;
            let t = Instant::now();
            approve_until_completed(client.post(url), &id, &digest).await?;
            Ok(t.elapsed())
        }
    })
    .await;
    let latencies = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    let phase2 = report(
        &format!("A/HTTP phase 2: POST decisions → completed (c={clients})"),
        started,
        cpu0,
        latencies,
        Some(mean_bytes),
    );
    Ok(vec![phase1, phase2])
}

pub(crate) fn before_deadline(deadline: Instant) -> Result<(), BenchError> {
    if Instant::now() > deadline {
        return Err(BenchError("workload A over HTTP ran past its time limit; stopped".into()));
    }
    Ok(())
}

/// Workload A's decision over HTTP: `request` (a POST to the run's decisions) approves the held call
/// of the turn `digest` with `wait: true`; the answer must be 200 with run `id` completed.
pub(crate) async fn approve_until_completed(
    request: reqwest::RequestBuilder,
    id: &RunId,
    digest: &str,
) -> Result<(), BenchError> {
    let body = json!({"turn_digest": digest, "decisions": [{"call_id": "call_1", "action": "approve"}], "wait": true});
    let run = send(request.json(&body), 200).await?;
    if run["status"] != RunStatus::Completed.as_str() {
        return Err(BenchError(format!("run {id} answered {} instead of completed", run["status"])));
    }
    Ok(())
}

/// The id of a run as the API served it (`""` when it has none: reading that run then fails).
pub(crate) fn served_id(run: &Value) -> RunId {
    RunId::from(run["id"].as_str().unwrap_or_default())
}

pub(crate) async fn send(request: reqwest::RequestBuilder, expected: u16) -> Result<Value, BenchError> {
    let response = request.send().await.map_err(err)?;
    let status = response.status().as_u16();
    let body: Value = response.json().await.map_err(err)?;
    if status != expected {
        return Err(BenchError(format!("answered {status} instead of {expected}: {body}")));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_url(label: &str) -> String {
        format!("sqlite://{}", tollgate_agent_testkit::scratch_dir(label).join("bench.db").display())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_run_completes_and_checks_out() {
        let reports = approval_cycle_http(&sqlite_url("bench-http"), 64, 32, Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reports.iter().map(|r| r.count).collect::<Vec<_>>(), vec![64, 64]);
        assert!(reports[1].suspension_bytes.is_some_and(|b| b > 100.0));
    }

    /// `TOLLGATE_BENCH_N=10000 cargo test --release -p tollgate-agent-bench --lib http::tests::workload_a_over_http -- --ignored --nocapture`
    #[tokio::test(flavor = "multi_thread")]
    #[ignore = "a benchmark: run by hand in --release (TOLLGATE_BENCH_N, default 1000)"]
    async fn workload_a_over_http() {
        let n = std::env::var("TOLLGATE_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
        let reports = approval_cycle_http(&sqlite_url("bench-http-a"), n, 32, Duration::from_secs(600))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        println!("{}", crate::table(&reports));
    }
}
