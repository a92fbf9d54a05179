//! What tracing costs (issue #36; docs/benchmarks.md, "What tracing costs"): workload A's phase 1 in
//! process with OpenTelemetry tracing off, on with every run sampled, and on with 1 % of the runs
//! sampled. The traced sides send their spans as `tollgate serve` does (`[telemetry]`: the SDK's batch
//! processor and the OTLP/HTTP exporter of `tollgate_agent_app::telemetry`) to a loopback OTLP/HTTP
//! receiver in this process, which reads each request's body, counts its spans and answers `200` with an
//! empty body.
//!
//! Three sides alike but for their telemetry — a store each (the second and third SQLite files beside
//! the first) — take turns: a round runs A's phase 1 for N runs on one side (start → waiting,
//! `concurrency` in flight) and, on a traced side, shuts its exporter down, which sends the spans still
//! queued and waits for the answer, so that a round's CPU holds the export of its own spans and of no
//! other round's. The exporter cannot be flushed and go on, so each round has an exporter and a runtime
//! of its own, made before the round's clock starts (the untraced side gets a fresh runtime too, alike).
//! The order turns by one every round, so that each side comes first, second and third as often as the
//! others in [`ROUNDS`], and a machine that speeds up or slows down weighs on all three.
//!
//! The receiver's CPU is counted with the traced sides' (it is this process's): reading a request and
//! walking its protobuf for the spans, small beside the exporter's encoding and sending.
//!
//! What it promises: every run waited; with every run sampled, the receiver had one trace per run (a
//! span without a parent: its first segment) and the same number of spans for each; with 1 %, as many
//! spans for each trace it had; no request's body failed to read as OTLP protobuf.

use crate::grants::{Tally, pair, start_runs};
use crate::notify::{beside, listen, serve_http};
use crate::{BenchError, PhaseReport, bench_agent, cpu_time, err, traced_runtime};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tollgate_agent_config::TelemetryConfig;
use tollgate_agent_core::{Gate, RunStatus, RunStore};

/// Rounds of each side, taking turns, when the caller has no reason to choose: each side first twice,
/// second twice and third twice.
pub const ROUNDS: u32 = 6;

/// The agent of every run.
const AGENT: &str = "bench";
/// The sampling ratio of the side that samples some runs.
const SOME: f64 = 0.01;
/// The answer of the OTLP receiver to every request: success, no partial rejection.
const ACCEPTED: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";

/// What tracing costs, against the store at `store_url` (use a fresh database): `n` runs per side and
/// round with `concurrency` in flight, `rounds` rounds taking turns. Returns A's phase 1 with tracing
/// off, on with every run sampled and on with 1 % sampled, each summed over its rounds; the traced two
/// carry their [`crate::Versus`] the first and the spans their runs sent ([`PhaseReport::spans`]).
pub async fn trace_costs(
    store_url: &str,
    n: u64,
    concurrency: usize,
    rounds: u32,
) -> Result<Vec<PhaseReport>, BenchError> {
    let store_url = store_url.to_owned();
    crate::in_own_task(async move { trace_costs_here(&store_url, n, concurrency, rounds).await }).await
}

/// One side of the comparison.
struct Side {
    store: Arc<dyn RunStore>,
    /// The sampling ratio and the receiver of its spans; `None`: tracing off.
    traced: Option<(f64, Receiver)>,
    tally: Tally,
}

async fn trace_costs_here(
    store_url: &str,
    n: u64,
    concurrency: usize,
    rounds: u32,
) -> Result<Vec<PhaseReport>, BenchError> {
    if rounds == 0 {
        return Err(BenchError("what tracing costs needs at least one round".into()));
    }
    let mut sides = Vec::with_capacity(3);
    for (url, ratio) in [
        (store_url.to_owned(), None),
        (beside(store_url, "traced-100"), Some(1.0)),
        (beside(store_url, "traced-1"), Some(SOME)),
    ] {
        let traced = match ratio {
            Some(ratio) => Some((ratio, Receiver::start().await?)),
            None => None,
        };
        sides.push(Side { store: crate::open_store(&url).await?, traced, tally: Tally::default() });
    }
    let c = concurrency.max(1);
    let mut next = 0;
    for round in 0..rounds {
        for k in 0..sides.len() {
            let turn = (usize::try_from(round).unwrap_or(0) + k) % sides.len();
            let side = &mut sides[turn];
            // The round's runtime, and its exporter on a traced side, before its clock starts.
            let agent = bench_agent(AGENT, Gate::Ask, Arc::new(Mutex::new(Vec::new())))?;
            let (telemetry, exporter) = match &side.traced {
                Some((ratio, receiver)) => {
                    let (telemetry, exporter) = receiver.exporter(*ratio)?;
                    (Some(telemetry), Some(exporter))
                }
                None => (None, None),
            };
            let runtime = traced_runtime(Arc::clone(&side.store), vec![agent], telemetry)?;
            let (cpu0, began) = (cpu_time(), Instant::now());
            let (_, latencies) = start_runs(&runtime, AGENT, next..next + n, c, RunStatus::WaitingForApproval).await?;
            if let Some(exporter) = exporter {
                exporter.shutdown().await;
            }
            side.tally.add(began, cpu0, latencies, 0);
            next += n;
        }
    }

    let [off, all, one] = <[Side; 3]>::try_from(sides).map_err(|_| BenchError("three sides".into()))?;
    let per_side = u64::from(rounds) * n;
    let received = |side: &Side| side.traced.as_ref().map(|(_, receiver)| receiver.received()).unwrap_or_default();
    let (all_spans, one_spans) = (received(&all), received(&one));
    let per_trace = check_spans(&all_spans, &one_spans, per_side)?;
    check_sampled(one_spans.traces, per_side, SOME)?;
    let level = format!("(c={c})");
    let off_name = format!("A phase 1, tracing off {level}");
    let [untraced, mut all] = pair(
        (off_name.clone(), off.tally.clone()),
        (format!("A phase 1, tracing on, 100 % sampled {level}"), all.tally),
        rounds,
        false,
    );
    let [_, mut one] =
        pair((off_name, off.tally), (format!("A phase 1, tracing on, 1 % sampled {level}"), one.tally), rounds, false);
    all.spans = Some(all_spans.spans);
    one.spans = Some(one_spans.spans);
    one.check = Some(format!(
        "A with tracing {level}: {rounds} rounds of {n} runs per side waited, each traced round counted to its \
         exporter's shutdown; at 100 % the OTLP receiver had {} traces of {per_trace} spans, one per run, at 1 % \
         {} traces of {per_trace} spans for {per_side} runs; the receiver runs in this process (its \
         CPU, small, is in the traced sides')",
        all_spans.traces, one_spans.traces
    ));
    Ok(vec![untraced, all, one])
}

/// The spans per trace, after checking that with every run sampled (`all`) the receiver had a trace per
/// run (`runs`), and that both sides' traces came whole: the same number of spans each, none unreadable.
fn check_spans(all: &Received, one: &Received, runs: u64) -> Result<u64, BenchError> {
    let failed = |what: String| Err(BenchError(format!("what tracing costs: {what}")));
    if all.unreadable + one.unreadable > 0 {
        return failed(format!("{} request bodies did not read as OTLP protobuf", all.unreadable + one.unreadable));
    }
    if all.traces != runs {
        return failed(format!(
            "with every run sampled the receiver had {} traces for {runs} runs (the batch processor drops spans \
             past its queue of 2,048: OTEL_BSP_MAX_QUEUE_SIZE)",
            all.traces
        ));
    }
    let per_trace = all.spans / runs.max(1);
    if per_trace == 0 || all.spans != per_trace * runs || one.spans != per_trace * one.traces {
        return failed(format!(
            "the traces did not all come whole: {} spans in {} traces with every run sampled, {} in {} with 1 %",
            all.spans, all.traces, one.spans, one.traces
        ));
    }
    Ok(per_trace)
}

/// Checks that `traces` of `runs` runs sampled at `ratio` are within five standard deviations of the
/// share (and one trace), so that a sampler that keeps none, or all, of the runs fails the bench rather
/// than make tracing look cheap.
fn check_sampled(traces: u64, runs: u64, ratio: f64) -> Result<(), BenchError> {
    let expected = runs as f64 * ratio;
    let bound = 5.0 * (expected * (1.0 - ratio)).sqrt() + 1.0;
    if (traces as f64 - expected).abs() > bound {
        return Err(BenchError(format!(
            "what tracing costs: sampled at {} %, the receiver had {traces} traces of {runs} runs, where {expected:.0} \
             ± {bound:.0} were expected: the runtime does not sample that share of the runs",
            ratio * 100.0
        )));
    }
    Ok(())
}

/// What a receiver has had.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Received {
    /// Spans.
    spans: u64,
    /// Spans without a parent: a run's first segment, one per trace.
    traces: u64,
    /// Request bodies that were not an OTLP `ExportTraceServiceRequest` in protobuf.
    unreadable: u64,
}

/// A loopback OTLP/HTTP receiver of traces, counting the spans of the requests it answered.
struct Receiver {
    port: u16,
    counted: Arc<Counters>,
}

/// [`Received`] as the receiver's connections count it.
#[derive(Default)]
struct Counters {
    spans: AtomicU64,
    traces: AtomicU64,
    unreadable: AtomicU64,
}

impl Receiver {
    async fn start() -> Result<Receiver, BenchError> {
        let counted = Arc::new(Counters::default());
        let counters = Arc::clone(&counted);
        let port = listen(move |stream| {
            let counters = Arc::clone(&counters);
            async move {
                serve_http(stream, ACCEPTED, |body| match count_spans(body) {
                    Some((spans, traces)) => {
                        counters.spans.fetch_add(spans, Ordering::AcqRel);
                        counters.traces.fetch_add(traces, Ordering::AcqRel);
                    }
                    None => {
                        counters.unreadable.fetch_add(1, Ordering::AcqRel);
                    }
                })
                .await
            }
        })
        .await?;
        Ok(Receiver { port, counted })
    }

    fn received(&self) -> Received {
        Received {
            spans: self.counted.spans.load(Ordering::Acquire),
            traces: self.counted.traces.load(Ordering::Acquire),
            unreadable: self.counted.unreadable.load(Ordering::Acquire),
        }
    }

    /// The telemetry of a runtime sampling `ratio` of its runs, and its exporter sending to this receiver.
    fn exporter(
        &self,
        ratio: f64,
    ) -> Result<(tollgate_agent_runtime::Telemetry, tollgate_agent_app::telemetry::Exporter), BenchError> {
        let config = TelemetryConfig {
            endpoint: Some(format!("http://127.0.0.1:{}/v1/traces", self.port)),
            service_name: "tollgate-bench".into(),
            sample_ratio: ratio,
            ..TelemetryConfig::default()
        };
        tollgate_agent_app::telemetry::start(&config)
            .map_err(err)?
            .ok_or_else(|| BenchError("what tracing costs: the telemetry was off with an endpoint set".into()))
    }
}

/// The spans, and of them those without a parent, of an OTLP `ExportTraceServiceRequest` in protobuf
/// (`resource_spans` = 1 → `scope_spans` = 2 → `spans` = 2, a span's `parent_span_id` = 4); `None` when
/// `body` is not well-formed protobuf.
fn count_spans(body: &[u8]) -> Option<(u64, u64)> {
    let (mut spans, mut roots) = (0, 0);
    for resource in fields(body, 1)? {
        for scope in fields(resource, 2)? {
            for span in fields(scope, 2)? {
                spans += 1;
                if fields(span, 4)?.iter().all(|parent| parent.is_empty()) {
                    roots += 1;
                }
            }
        }
    }
    Some((spans, roots))
}

/// The values of the length-delimited fields numbered `number` of the protobuf message `message`, in
/// order; `None` when the message is not well formed.
fn fields(message: &[u8], number: u64) -> Option<Vec<&[u8]>> {
    let mut found = Vec::new();
    let mut rest = message;
    while !rest.is_empty() {
        let key = varint(&mut rest)?;
        rest = match key & 7 {
            0 => {
                varint(&mut rest)?;
                rest
            }
            1 => rest.get(8..)?,
            2 => {
                let length = usize::try_from(varint(&mut rest)?).ok()?;
                if key >> 3 == number {
                    found.push(rest.get(..length)?);
                }
                rest.get(length..)?
            }
            5 => rest.get(4..)?,
            // Groups (3, 4) are not in OTLP; 6 and 7 are no wire type.
            _ => return None,
        };
    }
    Some(found)
}

/// Reads a base-128 varint off the front of `rest`.
fn varint(rest: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, after) = rest.split_first()?;
        *rest = after;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited field.
    fn field(number: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2];
        let mut length = value.len();
        while length >= 0x80 {
            out.push(u8::try_from(length & 0x7f).unwrap_or(0) | 0x80);
            length >>= 7;
        }
        out.push(u8::try_from(length).unwrap_or(0));
        out.extend_from_slice(value);
        out
    }

    /// Spans are found under their resource and scope, past fields of every wire type; a span with a
    /// parent is no trace; a body cut short or of another wire type is unreadable.
    #[test]
    fn spans_and_traces_are_counted_in_the_protobuf() {
        let root = [field(1, &[7; 16]), field(2, &[1; 8]), field(5, b"invoke_agent bench")].concat();
        let child = [field(1, &[7; 16]), field(4, &[1; 8]), vec![7 << 3 | 1], vec![0; 8], field(5, b"chat")].concat();
        // A scope (field 1), then the spans; a fixed32 and a varint field before them.
        let scope = [field(1, b"tollgate"), vec![9 << 3 | 5, 0, 0, 0, 0], vec![8 << 3, 0x96, 0x01]].concat();
        let scope = [scope, field(2, &root), field(2, &child), field(2, &root)].concat();
        let resource = [field(1, b"service.name"), field(2, &scope)].concat();
        let body = [field(1, &resource), field(1, &field(2, &field(2, &child)))].concat();
        assert_eq!(count_spans(&body), Some((4, 2)));
        assert_eq!(count_spans(&[]), Some((0, 0)));
        assert_eq!(count_spans(&body[..body.len() - 1]), None);
        assert_eq!(count_spans(&[1 << 3 | 3]), None);
        assert_eq!(count_spans(&[0x80; 11]), None);
    }

    /// The traces must be one per run with every run sampled, and whole on both sides.
    #[test]
    fn lost_or_cut_traces_fail_the_check() {
        let received = |spans, traces| Received { spans, traces, unreadable: 0 };
        assert_eq!(check_spans(&received(20, 10), &received(4, 2), 10).ok(), Some(2));
        assert_eq!(check_spans(&received(20, 10), &received(0, 0), 10).ok(), Some(2));
        for (all, one) in [
            (received(18, 9), received(0, 0)),
            (received(19, 10), received(0, 0)),
            (received(20, 10), received(3, 2)),
            (received(20, 10), Received { unreadable: 1, ..received(0, 0) }),
        ] {
            assert!(check_spans(&all, &one, 10).is_err(), "{all:?} {one:?}");
        }
    }

    /// A share far from the ratio fails, within chance it passes.
    #[test]
    fn a_sampler_that_keeps_another_share_fails_the_check() {
        for (traces, runs) in [(30, 3000), (10, 3000), (55, 3000), (0, 30), (2, 30), (0, 100)] {
            assert!(check_sampled(traces, runs, 0.01).is_ok(), "{traces} of {runs}");
        }
        for (traces, runs) in [(0, 3000), (3000, 3000), (70, 3000), (5, 30)] {
            assert!(check_sampled(traces, runs, 0.01).is_err(), "{traces} of {runs}");
        }
    }

    /// A tiny sitting: the three sides in order, each summed over its rounds, the traced two set against
    /// the untraced one, and the spans of every sampled run received.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_sampled_run_sends_its_trace_and_the_sides_compare() {
        let url = crate::scratch_store("bench-traces");
        let reports = trace_costs(&url, 10, 2, 3).await.unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "A phase 1, tracing off (c=2)",
                "A phase 1, tracing on, 100 % sampled (c=2)",
                "A phase 1, tracing on, 1 % sampled (c=2)",
            ]
        );
        for report in &reports {
            assert_eq!(report.count, 30, "{report:?}");
        }
        assert_eq!(reports[0].spans, None);
        let all = reports[1].spans.unwrap_or_default();
        assert!(all >= 30 && all % 30 == 0, "every run sent whole traces: {all}");
        for traced in &reports[1..] {
            let versus = traced.versus.as_ref().unwrap_or_else(|| panic!("{traced:?}"));
            assert_eq!((versus.of.as_str(), versus.rounds, versus.cpu_ratios.len()), (names[0], 3, 3));
        }
        let check = reports[2].check.as_deref().unwrap_or_default();
        assert!(check.contains("at 100 % the OTLP receiver had 30 traces of"), "{check}");
        let table = crate::table(&reports);
        let line = format!("A phase 1, tracing on, 100 % sampled (c=2): {all} spans sent, ");
        assert!(table.contains(&line), "{table}");
    }
}
