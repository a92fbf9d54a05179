//! Grants as the runtime's commands (V2.md section 1; docs/design.md, "Grants"): made directly (and
//! applied to the waiting runs they now clear), read, listed and revoked. The gate reads them through
//! the run's hooks (`hooks.rs`, `GrantReader`).

use crate::{DecideError, DecisionSet, Runtime, ToolInfo};
use std::time::Duration;
use tollgate_agent_core::{
    Actor, Gate, GrantId, GrantMatch, GrantPage, GrantQuery, GrantRecord, GrantScope, Millis, RunId, RunQuery,
    RunStatus, StoreError,
};
use tollgate_agent_protocol::MatchError;

/// `[grants]`: whether grants apply, and how long they last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantSettings {
    /// Grants are made and applied (`[grants] enabled`, default true). Off: none is made, and none
    /// stored allows a call.
    pub enabled: bool,
    /// The life of a grant made without a `ttl` (default 8 hours).
    pub default_ttl: Duration,
    /// The longest life a grant may be given (default 30 days).
    pub max_ttl: Duration,
}

impl Default for GrantSettings {
    fn default() -> Self {
        GrantSettings {
            enabled: true,
            default_ttl: Duration::from_secs(8 * 3600),
            max_ttl: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// A grant to make ([`Runtime::create_grant`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewGrant {
    /// The agent.
    pub agent: String,
    /// One of its tools.
    pub tool: String,
    /// The argument pattern (`{}` when none: any arguments).
    pub pattern: serde_json::Map<String, serde_json::Value>,
    /// Every run of the agent, or one run.
    pub scope: GrantScope,
    /// The run, for scope `run` (required there, refused with scope `agent`).
    pub run_id: Option<RunId>,
    /// How long it lasts (`[grants] default_ttl` when none).
    pub ttl: Option<Duration>,
    /// Why, for the record.
    pub reason: Option<String>,
    /// Also approve every waiting run of the agent whose held calls the grants in force now all allow.
    pub apply_to_waiting: bool,
}

/// Why no grant was made, or one was not found or not revoked.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// `[grants] enabled = false`. Not retryable.
    #[error("grants are disabled on this server ([grants] enabled = false)")]
    Disabled,
    /// No agent has this name. Not retryable.
    #[error("unknown agent `{0}`")]
    UnknownAgent(String),
    /// The agent has no tool of this name. Not retryable.
    #[error("agent `{agent}` has no tool `{tool}`")]
    UnknownTool {
        /// The agent.
        agent: String,
        /// The tool named.
        tool: String,
    },
    /// A policy rule naming the tool says `grantable = false`: its calls ask every time. Not retryable.
    #[error("tool `{tool}` of agent `{agent}` is not grantable: a policy rule says grantable = false")]
    NotGrantable {
        /// The agent.
        agent: String,
        /// The tool.
        tool: String,
    },
    /// A key of `match` is not a JSON pointer. Not retryable.
    #[error(transparent)]
    InvalidMatch(#[from] MatchError),
    /// Scope and run do not fit: a `run_id` with scope `agent`, or scope `run` without one. Not
    /// retryable.
    #[error("{0}")]
    InvalidScope(&'static str),
    /// Scope `run` names a run that does not exist, or a run of another agent. Not retryable.
    #[error("no run `{0}` of this agent")]
    UnknownRun(RunId),
    /// The ttl is zero or longer than `[grants] max_ttl`. Not retryable.
    #[error("ttl must be more than 0 and at most {max} (seconds: {asked})", max = max.as_secs(), asked = asked.as_secs())]
    InvalidTtl {
        /// The ttl asked for.
        asked: Duration,
        /// `[grants] max_ttl`.
        max: Duration,
    },
    /// The store failed (or, reading or revoking, has no such grant, or it is already closed).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl GrantError {
    /// True when the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            GrantError::Store(e) => e.is_retryable(),
            GrantError::Disabled
            | GrantError::UnknownAgent(_)
            | GrantError::UnknownTool { .. }
            | GrantError::NotGrantable { .. }
            | GrantError::InvalidMatch(_)
            | GrantError::InvalidScope(_)
            | GrantError::UnknownRun(_)
            | GrantError::InvalidTtl { .. } => false,
        }
    }
}

/// A grant made, with the waiting runs it was applied to.
#[derive(Clone, Debug, PartialEq)]
pub struct MadeGrant {
    /// The grant as stored.
    pub grant: GrantRecord,
    /// With `apply_to_waiting`: the runs this request decided (each once, by the grant's creator).
    pub applied_to: Option<Vec<RunId>>,
}

/// How many waiting runs `apply_to_waiting` reads per page.
const APPLY_PAGE: u32 = 500;

impl Runtime {
    /// The grant settings this runtime applies.
    pub fn grant_settings(&self) -> GrantSettings {
        self.inner().grants
    }

    /// Makes a grant by `actor` (checked: a known agent and tool, a grantable tool, a pattern of JSON
    /// pointers, a scope that fits, a ttl within `[grants] max_ttl`), and with `apply_to_waiting` decides
    /// every waiting run of the agent whose calls that take a decision the grants in force now all allow:
    /// `approve` by `actor`, as a normal decision on the turn as read, so each run is decided once
    /// however many requests race (a run decided meanwhile is left out).
    pub async fn create_grant(&self, new: NewGrant, actor: &Actor) -> Result<MadeGrant, GrantError> {
        let inner = self.inner();
        let settings = inner.grants;
        if !settings.enabled {
            return Err(GrantError::Disabled);
        }
        let spec = inner.agent(&new.agent).ok_or_else(|| GrantError::UnknownAgent(new.agent.clone()))?;
        let Some(tool) = spec.tools.iter().find(|t| t.name == new.tool) else {
            return Err(GrantError::UnknownTool { agent: new.agent, tool: new.tool });
        };
        if !tool.grantable {
            return Err(GrantError::NotGrantable { agent: new.agent, tool: new.tool });
        }
        let matcher = GrantMatch::new(new.pattern)?;
        let run_id = match (new.scope, new.run_id) {
            (GrantScope::Agent, Some(_)) => return Err(GrantError::InvalidScope("`run_id` goes with scope `run`")),
            (GrantScope::Run, None) => return Err(GrantError::InvalidScope("scope `run` needs a `run_id`")),
            (GrantScope::Agent, None) => None,
            (GrantScope::Run, Some(run)) => match self.get(&run).await {
                Ok(found) if found.agent == new.agent => Some(run),
                Ok(_) | Err(crate::ReadError::NotFound(_)) => return Err(GrantError::UnknownRun(run)),
                Err(crate::ReadError::Store(e)) => return Err(GrantError::Store(e)),
            },
        };
        let ttl = new.ttl.unwrap_or(settings.default_ttl);
        if ttl.is_zero() || ttl > settings.max_ttl {
            return Err(GrantError::InvalidTtl { asked: ttl, max: settings.max_ttl });
        }
        let now = inner.clock.now();
        let grant = GrantRecord {
            id: GrantId::new(uuid::Uuid::now_v7().to_string()),
            agent: new.agent,
            tool: new.tool,
            matcher,
            scope: new.scope,
            run_id,
            reason: new.reason,
            created_by: actor.clone(),
            created_at: now,
            expires_at: now.saturating_add(millis(ttl)),
            revoked: None,
            uses: 0,
        };
        let grant = inner.store.grants.create_grant(grant).await?;
        tracing::info!(grant = %grant.id, agent = %grant.agent, tool = %grant.tool, %actor, "grant made");
        let applied_to = if new.apply_to_waiting { Some(self.apply_to_waiting(&grant, actor).await?) } else { None };
        Ok(MadeGrant { grant, applied_to })
    }

    /// Decides each waiting run of `grant`'s agent whose calls that take a decision the grants in force
    /// for it now all allow (the new grant among them): `approve` by `actor`. Answers the runs decided.
    async fn apply_to_waiting(&self, grant: &GrantRecord, actor: &Actor) -> Result<Vec<RunId>, GrantError> {
        let inner = self.inner();
        let Some(spec) = inner.agent(&grant.agent) else { return Ok(Vec::new()) };
        let mut applied = Vec::new();
        let mut cursor = None;
        loop {
            let query = RunQuery {
                status: Some(RunStatus::WaitingForApproval),
                agent: Some(grant.agent.clone()),
                limit: APPLY_PAGE,
                cursor: cursor.take(),
            };
            let page = inner.store.rows.list(query).await?;
            for run in &page.runs {
                let Some(held) = run.held_turn() else { continue };
                if !grant.covers(&run.agent, &run.id) {
                    continue;
                }
                let Ok(suspension) = held.suspension.parse() else { continue };
                let reader = crate::hooks::GrantReader::new(run, spec.forbid_self_approval, inner.grants.enabled);
                let in_force =
                    reader.read(&inner.grant_cache, &*inner.store.grants, &run.id, inner.clock.now()).await?;
                let all_allowed =
                    suspension.decidable_calls().all(|call| spec.agent_loop.granted(call, &in_force).is_some());
                if !all_allowed {
                    continue;
                }
                match self.decide(&run.id, held.turn_digest.as_str(), DecisionSet::ApproveAll, actor).await {
                    Ok(_) => applied.push(run.id.clone()),
                    // Decided, moved on or taken by another request meanwhile: not this request's to decide.
                    Err(
                        DecideError::NotWaiting { .. }
                        | DecideError::StaleDigest { .. }
                        | DecideError::AlreadyDecided { .. }
                        | DecideError::NothingToDecide
                        | DecideError::Vote(_)
                        | DecideError::LostRace { .. }
                        | DecideError::NotFound(_)
                        | DecideError::SelfApprovalForbidden { .. },
                    ) => {}
                    Err(DecideError::Store(e)) => return Err(GrantError::Store(e)),
                    Err(other) => {
                        tracing::warn!(run = %run.id, grant = %grant.id, error = %other, "a waiting run the grant clears could not be decided");
                    }
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(applied),
            }
        }
    }

    /// Agent `name`'s tools with their effective gates (`GET /v1/tools?agent=`, `tollgate tools
    /// --agent`): a tool whose every call an active grant of scope `agent` allows (`match` = `{}`) is
    /// `allow`, why `grant ID` (the newest such grant); any other tool as its policy has it. `None` for an
    /// unknown agent.
    pub async fn effective_tools(&self, name: &str) -> Result<Option<Vec<ToolInfo>>, StoreError> {
        let inner = self.inner();
        let Some(spec) = inner.agent(name) else { return Ok(None) };
        let granted = if inner.grants.enabled {
            let now = inner.clock.now();
            let query =
                GrantQuery { agent: Some(name.to_owned()), active_at: Some(now), limit: 1000, ..GrantQuery::default() };
            inner.store.grants.list_grants(query).await?.grants
        } else {
            Vec::new()
        };
        let tools = spec
            .tools
            .iter()
            .map(|tool| {
                let mut listed = tool.clone();
                // Newest first: the first grant on any call of the tool is the newest.
                let every_call =
                    granted.iter().find(|g| g.tool == tool.name && g.matcher.is_any() && g.scope == GrantScope::Agent);
                if let Some(grant) = every_call.filter(|_| tool.gate == Gate::Ask && tool.grantable) {
                    listed.gate = Gate::Allow;
                    listed.why = format!("grant {}", grant.id);
                }
                listed
            })
            .collect();
        Ok(Some(tools))
    }

    /// The grant with this id.
    pub async fn grant(&self, id: &GrantId) -> Result<GrantRecord, StoreError> {
        self.inner().store.grants.grant(id).await
    }

    /// A page of grants, newest first.
    pub async fn list_grants(&self, query: GrantQuery) -> Result<GrantPage, StoreError> {
        self.inner().store.grants.list_grants(query).await
    }

    /// Revokes an active grant by `actor`: from now on it allows nothing, on every node.
    /// [`StoreError::GrantNotFound`]; [`StoreError::GrantClosed`] when already revoked or expired.
    pub async fn revoke_grant(&self, id: &GrantId, actor: &Actor) -> Result<GrantRecord, StoreError> {
        let now = self.inner().clock.now();
        let revoked = self.inner().store.grants.revoke_grant(id, actor, now).await?;
        tracing::info!(grant = %id, %actor, "grant revoked");
        Ok(revoked)
    }
}

/// A duration in milliseconds, saturating.
fn millis(duration: Duration) -> Millis {
    Millis::try_from(duration.as_millis()).unwrap_or(Millis::MAX)
}
