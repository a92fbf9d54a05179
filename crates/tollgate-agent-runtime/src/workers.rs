//! The worker pool: how many runs this process drives at once, and the loop that claims queued runs.
//!
//! Every drive holds a worker (a slot) of the pool from its start to its next durable state, so a process
//! never drives more than `workers` runs at once, whatever starts them: a run started here, a
//! decision that completes a held turn, a takeover, or a claim of a queued run. When no slot is free,
//! work is not refused and not dropped: a run is created `queued`, completing decisions queue the run
//! (with its held turn), a takeover waits for the next sweep, and the claim loop waits for a slot.
//! Queued runs are claimed by the loop of whichever node has a free slot first
//! ([`RunQueue::claim_queued`](tollgate_agent_core::RunQueue::claim_queued): `FOR UPDATE SKIP LOCKED`
//! on PostgreSQL), oldest queued first — new runs and resumes by when each began to wait — and as many
//! at once as the node has free workers (up to [`CLAIM_BATCH`] in one statement), so that after a
//! burst the queue drains at the speed of the workers rather than of one claim after another. A look
//! at a queue that may be empty holds one worker; only once a claim found as many runs as it had
//! workers for does the next take every free one.
//!
//! At shutdown ([`Runtime::stop_taking_work`]) the pool takes nothing new: the claim loop ends, starts
//! and decisions queue their runs for other nodes, and every run driven here is given back — released
//! to `queued` at its next step boundary, with what the segment did so far — so another node's worker
//! continues it at once instead of waiting for the lease to expire.

use crate::{Inner, Runtime, recovery};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, broadcast};
use tollgate_agent_core::{Millis, RunStatus};

/// How long the claim loop waits for a notice before it looks at the queue again while no notice of
/// other processes' commits can reach this node (a store that announces nothing, a lost listening
/// connection): the bound on how long a queued run then waits for a free worker. While the store
/// announces them, the loop waits on notices, looking at the queue every [`QUEUE_SWEEP`] anyway.
pub const QUEUE_POLL: Duration = Duration::from_secs(1);
/// How often the claim loop looks at the queue while every commit is announced: for the one run no
/// notice names again — queued, then locked by another node's claim that failed (its node crashed
/// mid-claim), so the row is queued still.
pub const QUEUE_SWEEP: Duration = Duration::from_secs(10);
/// The most queued runs one claim takes (one statement of the store); a pool with more free workers
/// claims again at once.
pub const CLAIM_BATCH: usize = 64;
/// How long the claim loop waits after the store failed before it tries again.
const CLAIM_RETRY: Duration = Duration::from_secs(1);
/// Upper bounds (seconds) of the claim-latency histogram's buckets.
pub const CLAIM_LATENCY_BUCKETS: [f64; 12] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0];

/// The default pool size for `cores` CPU cores: a drive mostly waits (on the model, on tools), so
/// many more runs than cores are driven at once.
pub fn default_workers(cores: usize) -> usize {
    cores.max(1).saturating_mul(32)
}

/// One worker of the pool, held by a drive until it ends.
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
}

/// The pool of one runtime.
pub(crate) struct Pool {
    size: usize,
    permits: Arc<Semaphore>,
    /// False once the process stops taking work.
    accepting: AtomicBool,
    /// Wakes the claim loop: a run was queued here, or the process stops taking work.
    wake: Arc<Notify>,
    started: AtomicBool,
    claims: AtomicU64,
    latency: Mutex<LatencyHistogram>,
}

#[derive(Clone, Debug, Default)]
struct LatencyHistogram {
    buckets: [u64; CLAIM_LATENCY_BUCKETS.len()],
    count: u64,
    sum_secs: f64,
}

/// The pool as `/metrics` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerStats {
    /// How many runs this process drives at most at once (`[runtime] workers`).
    pub size: usize,
    /// How many it drives now.
    pub busy: usize,
    /// Whether it still takes work (false once it is shutting down).
    pub accepting: bool,
    /// Queued runs this process's workers claimed.
    pub claims: u64,
    /// Claim latency (from queued to claimed), cumulative counts per bound of [`CLAIM_LATENCY_BUCKETS`].
    pub claim_latency_buckets: Vec<(f64, u64)>,
    /// The sum of the claim latencies, seconds.
    pub claim_latency_sum_secs: f64,
}

impl Pool {
    pub(crate) fn new(size: usize) -> Self {
        let size = size.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            size,
            permits: Arc::new(Semaphore::new(size)),
            accepting: AtomicBool::new(true),
            wake: Arc::new(Notify::new()),
            started: AtomicBool::new(false),
            claims: AtomicU64::new(0),
            latency: Mutex::new(LatencyHistogram::default()),
        }
    }

    /// A free worker, if there is one and the process still takes work.
    pub(crate) fn try_slot(&self) -> Option<Slot> {
        if !self.accepting() {
            return None;
        }
        Arc::clone(&self.permits).try_acquire_owned().ok().map(|permit| Slot { _permit: permit })
    }

    /// Up to `more` further free workers, taken now (none is waited for).
    fn free_slots(&self, more: usize) -> Vec<Slot> {
        std::iter::from_fn(|| self.try_slot()).take(more).collect()
    }

    /// The next free worker; `None` once the process stops taking work.
    async fn slot(&self) -> Option<Slot> {
        loop {
            // Created before the check, so that a stop between the two still wakes it.
            let woken = self.wake.notified();
            if !self.accepting() {
                return None;
            }
            tokio::select! {
                permit = Arc::clone(&self.permits).acquire_owned() => {
                    return permit.ok().map(|permit| Slot { _permit: permit });
                }
                // A run queued meanwhile needs no other wake-up: the loop claims once it has a worker.
                () = woken => {}
            }
        }
    }

    pub(crate) fn accepting(&self) -> bool {
        self.accepting.load(Ordering::Acquire)
    }

    /// A run was queued here: the claim loop looks at the queue.
    pub(crate) fn queued(&self) {
        self.wake.notify_one();
    }

    fn stop(&self) {
        self.accepting.store(false, Ordering::Release);
        self.wake.notify_waiters();
        self.wake.notify_one();
    }

    fn claimed(&self, latency_ms: Millis) {
        self.claims.fetch_add(1, Ordering::Relaxed);
        let secs = latency_ms.max(0) as f64 / 1000.0;
        let mut histogram = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        for (bound, count) in CLAIM_LATENCY_BUCKETS.iter().zip(histogram.buckets.iter_mut()) {
            if secs <= *bound {
                *count += 1;
            }
        }
        histogram.count += 1;
        histogram.sum_secs += secs;
    }

    fn stats(&self) -> WorkerStats {
        let histogram = self.latency.lock().unwrap_or_else(PoisonError::into_inner).clone();
        WorkerStats {
            size: self.size,
            busy: self.size.saturating_sub(self.permits.available_permits()),
            accepting: self.accepting(),
            claims: self.claims.load(Ordering::Relaxed),
            claim_latency_buckets: CLAIM_LATENCY_BUCKETS.iter().copied().zip(histogram.buckets).collect(),
            claim_latency_sum_secs: histogram.sum_secs,
        }
    }
}

impl Runtime {
    /// Starts this process's claim loop (once; later calls do nothing): while the process takes work,
    /// each free worker claims the oldest queued run of the store, as notices of queued runs arrive
    /// (this process's, and other nodes' on a store that announces them) and, while the store does not
    /// announce other processes' commits, at least every [`QUEUE_POLL`] (else every [`QUEUE_SWEEP`]).
    /// `tollgate serve` and the library's runtime run it, and a process that queues a run starts it
    /// then (its pool was full); a one-shot CLI command, which never queues, does not (it would take on
    /// others' runs it cannot see through). Needs a tokio runtime.
    pub fn start_workers(&self) {
        if self.inner().pool.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            self.inner().pool.started.store(false, Ordering::Release);
            return;
        };
        let notices = self.subscribe();
        handle.spawn(claim_loop(Arc::downgrade(self.inner()), notices));
    }

    /// From now on this process takes no new work: the claim loop ends, runs started here and
    /// decisions that complete a held turn are queued for other nodes' workers, and every run this
    /// process drives is given back (released to `queued`, lease dropped) at its next step boundary,
    /// once the model call or tool call under way has returned. [`Runtime::drain`] then waits for
    /// those releases. For a graceful shutdown.
    pub fn stop_taking_work(&self) {
        self.inner().pool.stop();
    }

    /// The worker pool as `/metrics` shows it.
    pub fn workers(&self) -> WorkerStats {
        self.inner().pool.stats()
    }

    /// How long the run that has waited longest in the queue (of any agent, for any node) has waited
    /// by this process's clock — from when it was queued ([`RunQueue::oldest_queued`]) — or `None` when
    /// no run is queued. `/metrics` shows it as `tollgate_queue_oldest_seconds`: a queue whose oldest
    /// run keeps ageing is not being drained (no node has a free worker, or none has its agent).
    ///
    /// [`RunQueue::oldest_queued`]: tollgate_agent_core::RunQueue::oldest_queued
    pub async fn oldest_queued_wait(&self) -> Result<Option<Duration>, tollgate_agent_core::StoreError> {
        let inner = self.inner();
        let oldest = inner.store.queue.oldest_queued().await?;
        let now = inner.clock.now();
        Ok(oldest.map(|queued_at| Duration::from_millis(u64::try_from(now.saturating_sub(queued_at)).unwrap_or(0))))
    }
}

/// Claims queued runs while the process takes work; ends with the runtime or at shutdown.
async fn claim_loop(inner: Weak<Inner>, mut notices: broadcast::Receiver<crate::RunNotice>) {
    let agents: Vec<String> = match inner.upgrade() {
        Some(strong) => strong.agents.iter().map(|agent| agent.name.clone()).collect(),
        None => return,
    };
    // Whether the last claim found as many runs as it had workers for: the queue may hold more, so the
    // next takes every free worker. Otherwise a look at the queue holds one worker only, so that a run
    // started or resumed here meanwhile finds the others free instead of being queued.
    let mut draining = false;
    loop {
        let Some(strong) = inner.upgrade() else { return };
        let Some(first) = strong.pool.slot().await else { return };
        let mut slots = vec![first];
        if draining {
            slots.extend(strong.pool.free_slots(CLAIM_BATCH - 1));
        }
        let now = strong.clock.now();
        let limit = u32::try_from(slots.len()).unwrap_or(1);
        let claim = strong.store.queue.claim_queued(&agents, limit, strong.lease(now), now).await;
        draining = claim.as_ref().is_ok_and(|claimed| claimed.len() == slots.len());
        match claim {
            Ok(claimed) if !claimed.is_empty() => {
                // Workers left over (fewer runs were queued) go back to the pool with `slots`; the loop
                // looks again at once, and waits once a claim finds nothing.
                let mut slots = slots.into_iter();
                for (claimed, slot) in claimed.into_iter().zip(slots.by_ref()) {
                    strong.pool.claimed(now.saturating_sub(claimed.queued_at));
                    strong.notify(&claimed.run);
                    let runtime = Runtime::from_inner(Arc::clone(&strong));
                    tokio::spawn(async move { recovery::continue_claimed(&runtime, claimed.run, slot).await });
                }
            }
            Ok(_) => {
                drop(slots);
                let wake = Arc::clone(&strong.pool.wake);
                let poll = strong.announced_poll(QUEUE_POLL).unwrap_or(QUEUE_SWEEP);
                drop(strong);
                wait_for_work(wake.notified(), &mut notices, poll).await;
            }
            Err(error) => {
                drop(slots);
                tracing::warn!(%error, "could not claim queued runs; trying again shortly");
                let wake = Arc::clone(&strong.pool.wake);
                drop(strong);
                tokio::select! {
                    () = tokio::time::sleep(CLAIM_RETRY) => {}
                    () = wake.notified() => {}
                }
            }
        }
    }
}

/// Waits until a run may be queued: a notice of a queued run (or a resync), a wake-up, or `poll`.
async fn wait_for_work(
    wake: impl Future<Output = ()>,
    notices: &mut broadcast::Receiver<crate::RunNotice>,
    poll: Duration,
) {
    let noticed = async {
        loop {
            match notices.recv().await {
                Ok(notice) if notice.status == RunStatus::Queued || notice.origin == crate::Origin::Resync => return,
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => return std::future::pending().await,
            }
        }
    };
    tokio::select! {
        () = wake => {}
        () = noticed => {}
        () = tokio::time::sleep(poll) => {}
    }
}
