//! The store as the runtime holds it: one handle per concern ([`RunRows`], [`EventLog`], [`RunQueue`],
//! [`Schedules`], [`StoreHealth`], [`ChangeFeed`]), each part of the runtime using the one it needs.
//!
//! Only [`RunRows`] writes events (with every create, transition and append), so it alone passes the
//! privacy layer ([`crate::privacy`]): no other handle can write around it. The server and the CLI get
//! the read-only concerns they serve from ([`Runtime::event_log`](crate::Runtime::event_log),
//! [`Runtime::health`](crate::Runtime::health), [`Runtime::change_feed`](crate::Runtime::change_feed)),
//! never the rows: every write goes through the runtime's commands.

use crate::privacy::{self, PrivacyLevel};
use std::sync::Arc;
use tollgate_agent_core::redact::Redactor;
use tollgate_agent_core::{ChangeFeed, EventLog, Grants, RunQueue, RunRows, RunStore, Schedules, StoreHealth};

/// One store, by concern.
pub(crate) struct Stores {
    /// Run rows and their transitions; the privacy level and the redactor apply to what they write.
    pub(crate) rows: Arc<dyn RunRows>,
    /// Event logs, read.
    pub(crate) log: Arc<dyn EventLog>,
    /// The queue of runs waiting for a worker.
    pub(crate) queue: Arc<dyn RunQueue>,
    /// Deadlines, expired leases and retention.
    pub(crate) schedules: Arc<dyn Schedules>,
    /// Write probes, integrity and counts.
    pub(crate) health: Arc<dyn StoreHealth>,
    /// Other processes' commits, the commit log and this process's tap.
    pub(crate) feed: Arc<dyn ChangeFeed>,
    /// Grants: standing approvals, read at the gate. Kept whole at every privacy level: a grant is a
    /// person's standing decision, not a run's content.
    pub(crate) grants: Arc<dyn Grants>,
}

impl Stores {
    /// `store` split by concern, its rows behind the privacy layer of `level` and `redactor`.
    pub(crate) fn new(store: Arc<dyn RunStore>, level: PrivacyLevel, redactor: Redactor) -> Stores {
        Stores {
            rows: privacy::filtered(store.clone(), level, redactor),
            log: store.clone(),
            queue: store.clone(),
            schedules: store.clone(),
            health: store.clone(),
            grants: store.clone(),
            feed: store,
        }
    }
}
