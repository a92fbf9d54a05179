//! `/v1/grants` (V2.md section 1; docs/api.md, "Grants"): make, list, read and revoke grants. Making and
//! revoking need the `approver` role; reading needs a token of any role.

use crate::auth::{Caller, Role};
use crate::input::{RawBody, is_run_id, parse_json, parse_query, uuid_path};
use crate::problem::ApiError;
use crate::routes::{ApiResult, MAX_LIMIT};
use crate::{AppState, duration};
use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use serde::Deserialize;
use tollgate_agent_core::{GrantId, GrantQuery};
use tollgate_agent_protocol::{CreateGrantRequest, Grant, GrantPage, Problem};
use tollgate_agent_runtime::{GrantError, NewGrant, wire};
use utoipa::IntoParams;

/// `limit` of a grant listing when none is given.
pub(crate) const DEFAULT_GRANT_LIMIT: u32 = 50;

/// Make a grant.
#[utoipa::path(
    post, path = "/v1/grants", tag = "grants", request_body = CreateGrantRequest,
    responses(
        (status = 201, description = "The grant (with `applied_to` when `apply_to_waiting` was true)", body = Grant),
        (status = 403, description = "Lacks the approver role, or grants are disabled", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown agent, tool or run", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A `match` key that is not a JSON pointer, a ttl over `max_ttl`, a scope and run that do not fit, a tool policy keeps from grants, or unknown fields", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn create_grant(State(state): State<AppState>, caller: Caller, RawBody(body): RawBody) -> ApiResult {
    caller.require(Role::Approver, "make grants")?;
    let request: CreateGrantRequest = parse_json(&body)?;
    let ttl = match request.ttl.as_deref() {
        None => None,
        Some(text) => Some(duration::parse(text).map_err(|e| ApiError::invalid(format!("`ttl`: {e}")))?),
    };
    let new = NewGrant {
        agent: request.agent,
        tool: request.tool,
        pattern: request.r#match.unwrap_or_default(),
        scope: request.scope.unwrap_or_default(),
        run_id: request.run_id,
        ttl,
        reason: request.reason,
        apply_to_waiting: request.apply_to_waiting.unwrap_or(false),
    };
    let made = state.runtime.create_grant(new, &caller.actor).await.map_err(grant_refused)?;
    let mut grant = wire::grant(&made.grant);
    grant.applied_to = made.applied_to;
    Ok((StatusCode::CREATED, Json(grant)).into_response())
}

/// The query of `GET /v1/grants`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct GrantListQuery {
    /// Only this agent's grants.
    agent: Option<String>,
    /// Only this tool's grants.
    tool: Option<String>,
    /// Only active grants (default true); `false` lists every grant, active or not.
    active: Option<bool>,
    /// At most this many (1–500, default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page (a grant id).
    #[param(pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    cursor: Option<String>,
}

/// List grants, newest first.
#[utoipa::path(
    get, path = "/v1/grants", tag = "grants", params(GrantListQuery),
    responses(
        (status = 200, description = "A page of grants", body = GrantPage),
        (status = 422, description = "Bad query parameters", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list_grants(State(state): State<AppState>, _caller: Caller, uri: Uri) -> ApiResult {
    let query: GrantListQuery = parse_query(&uri)?;
    let limit = query.limit.unwrap_or(DEFAULT_GRANT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(format!("limit must be between 1 and {MAX_LIMIT}, not {limit}")));
    }
    if let Some(cursor) = &query.cursor
        && !is_run_id(cursor)
    {
        return Err(ApiError::invalid(format!("`{cursor}` is not a cursor from a previous page")));
    }
    let active_at = query.active.unwrap_or(true).then(|| chrono::Utc::now().timestamp_millis());
    let page = state
        .runtime
        .list_grants(GrantQuery { agent: query.agent, tool: query.tool, active_at, limit, cursor: query.cursor })
        .await?;
    let grants = page.grants.iter().map(wire::grant).collect();
    Ok(Json(GrantPage { grants, next_cursor: page.next_cursor }).into_response())
}

/// A grant id from the path: a lowercase, hyphenated UUID, else 404.
pub(crate) struct GrantPath(GrantId);

impl FromRequestParts<AppState> for GrantPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        uuid_path(parts, state, "grant").await.map(|id| GrantPath(GrantId::from(id)))
    }
}

/// Read one grant.
#[utoipa::path(
    get, path = "/v1/grants/{id}", tag = "grants",
    params(("id" = String, Path, description = "The grant's id")),
    responses(
        (status = 200, description = "The grant", body = Grant),
        (status = 404, description = "No such grant", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_grant(State(state): State<AppState>, _caller: Caller, GrantPath(id): GrantPath) -> ApiResult {
    let grant = state.runtime.grant(&id).await?;
    Ok(Json(wire::grant(&grant)).into_response())
}

/// Revoke a grant: from now on it allows nothing, on every node.
#[utoipa::path(
    delete, path = "/v1/grants/{id}", tag = "grants",
    params(("id" = String, Path, description = "The grant's id")),
    responses(
        (status = 200, description = "The grant, revoked", body = Grant),
        (status = 403, description = "Lacks the approver role", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such grant", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already revoked or expired", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn revoke_grant(State(state): State<AppState>, caller: Caller, GrantPath(id): GrantPath) -> ApiResult {
    caller.require(Role::Approver, "revoke grants")?;
    let grant = state.runtime.revoke_grant(&id, &caller.actor).await?;
    Ok(Json(wire::grant(&grant)).into_response())
}

/// A refused grant as its problem: every variant named, so a new one does not compile until its status
/// is chosen here.
fn grant_refused(error: GrantError) -> ApiError {
    match error {
        GrantError::Disabled => ApiError::forbidden(error.to_string()),
        GrantError::UnknownAgent(_) | GrantError::UnknownTool { .. } | GrantError::UnknownRun(_) => {
            ApiError::not_found(error.to_string())
        }
        GrantError::NotGrantable { .. }
        | GrantError::InvalidMatch(_)
        | GrantError::InvalidScope(_)
        | GrantError::InvalidTtl { .. } => ApiError::invalid(error.to_string()),
        GrantError::Store(e) => ApiError::from(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_agent_core::{RunId, StoreError};

    #[test]
    fn each_refusal_has_its_status() {
        let status = |e: GrantError| grant_refused(e).into_response().status().as_u16();
        assert_eq!(status(GrantError::Disabled), 403);
        assert_eq!(status(GrantError::UnknownAgent("a".into())), 404);
        assert_eq!(status(GrantError::UnknownRun(RunId::from("r"))), 404);
        assert_eq!(status(GrantError::InvalidScope("x")), 422);
        assert_eq!(status(GrantError::Store(StoreError::GrantNotFound(GrantId::from("g")))), 404);
        let closed =
            StoreError::GrantClosed { id: GrantId::from("g"), status: tollgate_agent_core::GrantStatus::Revoked };
        assert_eq!(status(GrantError::Store(closed)), 409);
    }
}
