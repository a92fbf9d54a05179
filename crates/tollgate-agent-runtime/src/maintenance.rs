//! The one maintenance scheduler: approval deadlines (`on_expiry`), takeovers of runs whose lease
//! expired, renewal of this process's leases, and retention — each due on the runtime's injected
//! [`Clock`](tollgate_agent_core::Clock), so a test with a manual clock decides when they come due.
//!
//! `tollgate serve` and every local CLI command run the same scheduler ([`Runtime::spawn_maintenance`])
//! and differ only in their [`Schedule`]: [`Schedule::server`] sweeps every second and applies
//! retention hourly; [`Schedule::command_line`] sweeps every five seconds (the command swept once as it
//! opened the store) and leaves retention to `purge`. Both renew leases every third of the lease, and
//! at shutdown both wind down to renewal alone while the runs in flight commit.

use crate::error::SweepError;
use crate::telemetry::WaitEnd;
use crate::{DecisionSet, OnExpiry, Runtime, events, recovery};
use std::sync::PoisonError;
use std::time::Duration;
use tokio::sync::watch;
use tollgate_agent_core::{Actor, RunId};
use tollgate_agent_core::{Guard, Millis, RunRecord, RunStatus, StoreError, Transition};

pub(crate) const SYSTEM_ACTOR: &str = "system";
const EXPIRY_REASON: &str = "approval deadline passed";
/// The longest the scheduler sleeps before it looks at the clock again (a manual clock may jump).
const LOOK_AGAIN: Duration = Duration::from_secs(1);
/// Due runs handled per sweep (the rest on the next).
const SWEEP_BATCH: u32 = 100;
/// Runs deleted per purge batch.
const PURGE_BATCH: u32 = 500;
/// How far before its first window the escalation sweep of a process looks (docs/design.md,
/// "Escalation"): a turn that came due while no process swept is escalated if it came due within this.
const ESCALATION_LOOKBACK_MS: Millis = 24 * 60 * 60 * 1000;

/// How long a run's terminal and waiting states are kept (`[retention]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Terminal runs finished longer ago than this are purged.
    pub terminal_after: Duration,
    /// Waiting runs untouched for longer than this are purged.
    pub waiting_after: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self { terminal_after: Duration::from_secs(30 * 86_400), waiting_after: Duration::from_secs(90 * 86_400) }
    }
}

/// Which maintenance a process does, and how often.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// How often due deadlines are applied and abandoned runs taken over.
    pub sweep_every: Duration,
    /// Whether the first sweep is due at once (else after `sweep_every`: the caller swept already).
    pub sweep_at_start: bool,
    /// Retention and how often it is applied (the first time at once); `None`: never.
    pub retention: Option<(Retention, Duration)>,
}

impl Schedule {
    /// `tollgate serve`: sweep every second from the start; retention at once and then hourly.
    pub fn server(retention: Retention) -> Self {
        Self {
            sweep_every: Duration::from_secs(1),
            sweep_at_start: true,
            retention: Some((retention, Duration::from_secs(3600))),
        }
    }

    /// A local CLI command: it sweeps once before acting, then every five seconds while it waits (a run
    /// another process abandoned is taken over); no retention (that is `purge`).
    pub fn command_line() -> Self {
        Self { sweep_every: Duration::from_secs(5), sweep_at_start: false, retention: None }
    }
}

/// One piece of maintenance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duty {
    /// Renew the leases of the runs this process drives.
    RenewLeases,
    /// Apply due deadlines and take over runs whose lease expired.
    Sweep,
    /// Purge what retention lets go.
    Retention,
}

/// When each duty is next due, on the runtime's clock. Pure: the loop asks it what is due now.
#[derive(Clone, Debug)]
pub struct Scheduler {
    renew_every: Millis,
    sweep_every: Millis,
    retention_every: Option<Millis>,
    next_renew: Millis,
    next_sweep: Millis,
    next_retention: Option<Millis>,
}

fn millis(duration: Duration) -> Millis {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX).max(1)
}

impl Scheduler {
    /// A schedule starting at `now`, renewing every `renew_every`.
    pub fn new(schedule: &Schedule, renew_every: Duration, now: Millis) -> Self {
        let renew_every = millis(renew_every);
        let sweep_every = millis(schedule.sweep_every);
        let retention_every = schedule.retention.map(|(_, every)| millis(every));
        Self {
            renew_every,
            sweep_every,
            retention_every,
            next_renew: now.saturating_add(renew_every),
            next_sweep: if schedule.sweep_at_start { now } else { now.saturating_add(sweep_every) },
            next_retention: retention_every.map(|_| now),
        }
    }

    /// The duties due at `now` (renewal first: a long sweep must not cost a lease), each rescheduled a
    /// period after `now` (a missed period is not made up). With `renew_only`, only renewal comes due.
    pub fn due(&mut self, now: Millis, renew_only: bool) -> Vec<Duty> {
        let mut due = Vec::new();
        if now >= self.next_renew {
            self.next_renew = now.saturating_add(self.renew_every);
            due.push(Duty::RenewLeases);
        }
        if renew_only {
            return due;
        }
        if now >= self.next_sweep {
            self.next_sweep = now.saturating_add(self.sweep_every);
            due.push(Duty::Sweep);
        }
        if let (Some(next), Some(every)) = (self.next_retention, self.retention_every)
            && now >= next
        {
            self.next_retention = Some(now.saturating_add(every));
            due.push(Duty::Retention);
        }
        due
    }

    /// When the next duty comes due (renewal alone with `renew_only`).
    pub fn next_due(&self, renew_only: bool) -> Millis {
        if renew_only {
            return self.next_renew;
        }
        [Some(self.next_renew), Some(self.next_sweep), self.next_retention]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.next_renew)
    }
}

/// The running scheduler of [`Runtime::spawn_maintenance`]. Dropping it stops the scheduler.
pub struct Maintenance {
    renew_only: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Maintenance {
    /// From now on only renew leases: no new work is taken on (no sweep, no retention), while the runs
    /// in flight keep their leases until they commit. For shutdown.
    pub fn wind_down(&self) {
        let _ = self.renew_only.send(true);
    }

    /// Stops the scheduler.
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Runtime {
    /// Starts the maintenance scheduler with `schedule`, until the returned handle is stopped or dropped.
    pub fn spawn_maintenance(&self, schedule: Schedule) -> Maintenance {
        let runtime = self.clone();
        let renew_every = Duration::from_millis(u64::try_from(self.inner().lease_ms / 3).unwrap_or(0).max(100));
        let (renew_only, mut mode) = watch::channel(false);
        let task = tokio::spawn(async move {
            let clock = runtime.clock().clone();
            let mut scheduler = Scheduler::new(&schedule, renew_every, clock.now());
            loop {
                let winding_down = *mode.borrow_and_update();
                for duty in scheduler.due(clock.now(), winding_down) {
                    runtime.perform(duty, &schedule).await;
                }
                let wait = scheduler.next_due(winding_down).saturating_sub(clock.now());
                let wait = Duration::from_millis(u64::try_from(wait).unwrap_or(0).max(1)).min(LOOK_AGAIN);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    changed = mode.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Maintenance { renew_only, task }
    }

    async fn perform(&self, duty: Duty, schedule: &Schedule) {
        match duty {
            Duty::RenewLeases => self.renew_leases().await,
            Duty::Sweep => {
                if let Err(error) = self.sweep().await {
                    tracing::warn!(%error, "could not apply due deadlines");
                }
                if let Err(error) = self.escalate_due().await {
                    tracing::warn!(%error, "could not escalate waiting runs");
                }
            }
            Duty::Retention => {
                let Some((retention, _)) = schedule.retention else { return };
                match self.apply_retention(retention.terminal_after, retention.waiting_after).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(deleted_runs = n, "retention applied"),
                    Err(error) => tracing::warn!(%error, "retention failed; trying again later"),
                }
            }
        }
    }

    /// Applies due deadlines (`on_expiry`) and takes over runs whose lease expired. Returns how many runs
    /// it acted on. A run someone else acted on first is simply no longer due; any other failure on one
    /// run is logged and the sweep goes on.
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        let now = self.clock().now();
        let due = self.inner().store.schedules.due(now, SWEEP_BATCH).await?;
        let mut acted = 0;
        for run in due {
            let result = match run.status() {
                RunStatus::WaitingForApproval => self.expire(&run).await,
                RunStatus::Running => recovery::take_over(self, &run).await,
                RunStatus::Queued
                | RunStatus::Completed
                | RunStatus::Failed
                | RunStatus::Cancelled
                | RunStatus::Expired => Ok(()),
            };
            match result {
                Ok(()) => acted += 1,
                Err(e) if e.is_overtaken() => {}
                Err(e) => tracing::warn!(run = %run.id, error = %e, "sweep could not act on a due run"),
            }
        }
        Ok(acted)
    }

    /// Escalates the held turns that waited their agent's `escalate_after` since their last change and
    /// were not escalated yet (docs/design.md, "Escalation"), reading for each distinct `escalate_after`
    /// the window of waiting runs changed since its last sweep. Returns how many it escalated. A turn
    /// someone escalated, decided or moved first is passed over; another failure on one run is logged.
    pub async fn escalate_due(&self) -> Result<usize, StoreError> {
        let inner = self.inner();
        let mut afters: Vec<Duration> =
            inner.agents.iter().filter_map(|agent| agent.escalation.as_ref().map(|rule| rule.after)).collect();
        afters.sort_unstable();
        afters.dedup();
        let mut escalated = 0;
        for after in afters {
            let now = inner.clock.now();
            let until = now.saturating_sub(millis(after));
            let start = inner.escalation_windows.lock().unwrap_or_else(PoisonError::into_inner).get(&after).cloned();
            let (mut at, mut id) =
                start.unwrap_or_else(|| (until.saturating_sub(ESCALATION_LOOKBACK_MS), RunId::default()));
            loop {
                let page = inner.store.schedules.waiting_changed((at, id.as_str()), until, SWEEP_BATCH).await?;
                for run in &page {
                    match self.escalate(run, after).await {
                        Ok(true) => escalated += 1,
                        Ok(false) => {}
                        Err(error) if error.is_overtaken() => {}
                        Err(error) => tracing::warn!(run = %run.id, %error, "could not escalate a waiting run"),
                    }
                }
                if let Some(last) = page.last() {
                    (at, id) = (last.updated_at, last.id.clone());
                }
                if page.len() < SWEEP_BATCH as usize {
                    break;
                }
            }
            // Everything changed up to `until` was read: the next window starts there.
            if at < until {
                (at, id) = (until, RunId::default());
            }
            inner.escalation_windows.lock().unwrap_or_else(PoisonError::into_inner).insert(after, (at, id));
        }
        Ok(escalated)
    }

    /// Escalates `run`'s held turn if its agent escalates after `after` and no open approval of the turn
    /// was escalated yet: one compare-and-set, with the `approval_escalated` event.
    async fn escalate(&self, run: &RunRecord, after: Duration) -> Result<bool, SweepError> {
        let inner = self.inner();
        let spec = inner.agent(&run.agent).ok_or_else(|| SweepError::UnknownAgent(run.agent.clone()))?;
        let Some(rule) = spec.escalation.as_ref().filter(|rule| rule.after == after) else { return Ok(false) };
        let Some(held) = run.held_turn() else { return Ok(false) };
        let mut open = held.approvals.iter().filter(|approval| approval.is_pending());
        if open.clone().next().is_none() || open.any(|approval| approval.escalated().is_some()) {
            return Ok(false);
        }
        let now = inner.clock.now();
        let event = events::approval_escalated(now, run.iterations, held.turn_digest.as_str(), rule);
        let transition = Transition::Escalate { at: now, notified: rule.notify.clone() };
        let next =
            inner.store.rows.transition(&run.id, Guard::Version(run.version), transition, vec![event], now).await?;
        tracing::info!(run = %run.id, after = %rule.after_text, notified = ?rule.notify, "held turn escalated");
        inner.notify(&next);
        Ok(true)
    }

    async fn expire(&self, run: &RunRecord) -> Result<(), SweepError> {
        let inner = self.inner();
        let spec = inner.agent(&run.agent).ok_or_else(|| SweepError::UnknownAgent(run.agent.clone()))?;
        let Some(pending) = run.held_turn() else { return Ok(()) };
        match spec.on_expiry {
            OnExpiry::Deny => {
                self.decide(
                    &run.id,
                    pending.turn_digest.as_str(),
                    DecisionSet::DenyAll { reason: EXPIRY_REASON.into() },
                    &Actor::from(SYSTEM_ACTOR),
                )
                .await?;
            }
            OnExpiry::Cancel => {
                let now = inner.clock.now();
                let deadline = pending.expires_at.unwrap_or(now);
                let event = events::run_expired(now, run.iterations, deadline);
                let next = inner
                    .store
                    .rows
                    .transition(&run.id, Guard::Version(run.version), Transition::Expire, vec![event], now)
                    .await?;
                inner.notify(&next);
                if let Some(tracing) = &inner.tracing {
                    tracing.wait_ended(run, pending, WaitEnd::Expired, now);
                }
            }
        }
        Ok(())
    }

    /// Renews the leases of the runs this process drives (the scheduler does it every third of the lease).
    pub async fn renew_leases(&self) {
        let inner = self.inner();
        let ids: Vec<RunId> = inner.in_flight.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect();
        for id in ids {
            let until = inner.clock.now() + inner.lease_ms;
            if let Err(e) = inner.store.rows.append(&id, &inner.node, Vec::new(), until).await {
                tracing::debug!(run = %id, error = %e, "lease not renewed");
            }
        }
    }

    /// Deletes terminal runs finished before `terminal_before` and waiting runs untouched since
    /// `waiting_before`, in batches. Returns how many went.
    pub async fn purge(&self, terminal_before: Millis, waiting_before: Millis) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let n = self.inner().store.schedules.purge(terminal_before, waiting_before, PURGE_BATCH).await?;
            total += n;
            if n < u64::from(PURGE_BATCH) {
                return Ok(total);
            }
        }
    }

    /// Purges terminal runs finished more than `terminal_after` ago and waiting runs untouched for more
    /// than `waiting_after`, on the runtime's clock. Returns how many went.
    pub async fn apply_retention(&self, terminal_after: Duration, waiting_after: Duration) -> Result<u64, StoreError> {
        let now = self.clock().now();
        let before = |window: Duration| now.saturating_sub(i64::try_from(window.as_millis()).unwrap_or(i64::MAX));
        self.purge(before(terminal_after), before(waiting_after)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Millis = 1_796_000_000_000;

    #[test]
    fn the_server_schedule_sweeps_and_applies_retention_at_once_then_each_on_its_period() {
        let mut scheduler = Scheduler::new(&Schedule::server(Retention::default()), Duration::from_secs(10), T0);
        assert_eq!(scheduler.due(T0, false), vec![Duty::Sweep, Duty::Retention]);
        assert_eq!(scheduler.due(T0 + 999, false), Vec::<Duty>::new());
        assert_eq!(scheduler.next_due(false), T0 + 1000);
        assert_eq!(scheduler.due(T0 + 1000, false), vec![Duty::Sweep]);
        assert_eq!(scheduler.due(T0 + 10_000, false), vec![Duty::RenewLeases, Duty::Sweep]);
        assert_eq!(scheduler.due(T0 + 3_600_000, false), vec![Duty::RenewLeases, Duty::Sweep, Duty::Retention]);
    }

    #[test]
    fn the_command_line_schedule_leaves_the_first_sweep_to_the_command_and_never_purges() {
        let mut scheduler = Scheduler::new(&Schedule::command_line(), Duration::from_secs(10), T0);
        assert_eq!(scheduler.due(T0, false), Vec::<Duty>::new());
        assert_eq!(scheduler.next_due(false), T0 + 5000);
        assert_eq!(scheduler.due(T0 + 5000, false), vec![Duty::Sweep]);
        assert_eq!(scheduler.due(T0 + 365 * 86_400_000, false), vec![Duty::RenewLeases, Duty::Sweep]);
    }

    #[test]
    fn winding_down_renews_only_and_missed_periods_are_not_made_up() {
        let mut scheduler = Scheduler::new(&Schedule::server(Retention::default()), Duration::from_secs(10), T0);
        assert_eq!(scheduler.due(T0 + 60_000, true), vec![Duty::RenewLeases]);
        assert_eq!(scheduler.next_due(true), T0 + 70_000);
        // Six periods of renewal were missed; one renewal, then the next a period later.
        assert_eq!(scheduler.due(T0 + 60_001, true), Vec::<Duty>::new());
        assert_eq!(scheduler.due(T0 + 60_001, false), vec![Duty::Sweep, Duty::Retention]);
    }
}
