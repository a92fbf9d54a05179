//! Signed decision links (V2.md section 4; docs/api.md, "Signed decision links"): `GET /approve/{token}`
//! shows what the link would decide and decides nothing — mail scanners and chat unfurlers fetch links —
//! and only the page's `POST /approve/{token}` decides, once, as the link's actor.
//!
//! These routes are outside `/v1` and take no bearer token: the token is the capability, signed with
//! `[server] link_secret` and bound to one run, held turn, call, action, actor and expiry. A link is
//! checked in this order, and the first refusal answers, deciding nothing: tampered (403), expired
//! (410), the run not found (404), used — a `decision` event records its id (409), stale — the run no
//! longer waits on that turn or that call no longer takes a decision (409), and, with tokens
//! configured, an actor that no longer holds a token with the `approver` role (422). A `POST` whose
//! decision the runtime refuses is checked again for used and stale (so a link followed twice at once
//! decides once, and the other answer says used); any other refusal — a denial without a reason,
//! self-approval, a quorum rule — is 422 with the runtime's reason. Every answer is an HTML page of
//! `tollgate_agent_notify::page` with [`CONTENT_SECURITY_POLICY`], `Cache-Control: no-store`,
//! `Referrer-Policy: no-referrer`, `X-Frame-Options: DENY` and `X-Content-Type-Options: nosniff`.

use crate::AppState;
use crate::input::read_limited;
use crate::notify::Links;
use crate::problem::http_status;
use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use std::sync::Arc;
use tollgate_agent_core::{Decision, RunId, RunStatus};
use tollgate_agent_notify::link::{LinkAction, LinkClaims, LinkError, link_id};
use tollgate_agent_notify::page::{CONTENT_SECURITY_POLICY, ConfirmPage, Outcome, confirm, outcome};
use tollgate_agent_protocol::{Call, Run};
use tollgate_agent_runtime::view::run_view;
use tollgate_agent_runtime::{DecideError, ReadError};

/// The largest form a link's page posts (its `reason`): 16 KiB.
pub(crate) const MAX_FORM_BYTES: usize = 16 * 1024;

/// The routes of signed links, merged into the server's router.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/approve/{token}", get(show).post(decide))
}

/// A page: its status and HTML.
struct Page {
    status: StatusCode,
    html: String,
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.html).into_response();
        let headers = response.headers_mut();
        for (name, value) in [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        // The rest of a body too slow to arrive is never read: the connection cannot carry another request.
        if self.status == StatusCode::REQUEST_TIMEOUT {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// An outcome page about `run` (when known), with its review link.
fn outcome_page(status: StatusCode, what: &Outcome, run: Option<&RunId>, links: Option<&Links>) -> Page {
    let review = run.zip(links).map(|(run, links)| links.review_url(run));
    Page { status, html: outcome(what, run, review.as_deref()) }
}

/// A refusal page with `message`.
fn refused(status: StatusCode, message: impl Into<String>, run: Option<&RunId>, links: Option<&Links>) -> Page {
    outcome_page(status, &Outcome::Refused { message: message.into() }, run, links)
}

/// A link that passed every check: its claims, the run as `GET /v1/runs/{id}` shows it, and its call.
struct Live {
    claims: LinkClaims,
    run: Run,
    call: Call,
}

/// The checks of the module's header, in its order, up to the actor's: the link's run and call, or the
/// page that refuses it.
async fn check(state: &AppState, links: &Links, token: &str) -> Result<Live, Page> {
    let now = state.runtime.clock().now();
    let claims = match links.verify(token, now) {
        Ok(claims) => claims,
        Err(LinkError::Tampered) => return Err(outcome_page(StatusCode::FORBIDDEN, &Outcome::Tampered, None, None)),
        Err(LinkError::Expired { claims }) => {
            return Err(outcome_page(StatusCode::GONE, &Outcome::Expired, Some(&claims.run), Some(links)));
        }
    };
    let (run, call) = current(state, links, token, &claims).await?;
    if !state.auth.may_decide(&claims.actor) {
        let message =
            format!("{} no longer holds a token with the approver role, so this link decides nothing", claims.actor);
        return Err(refused(StatusCode::UNPROCESSABLE_ENTITY, message, Some(&claims.run), Some(links)));
    }
    Ok(Live { claims, run, call })
}

/// The link's run and call when the link is unused and the call still waits for it; else the page saying
/// the run is gone (404), the link used (409) or stale (409), or the store failed.
async fn current(state: &AppState, links: &Links, token: &str, claims: &LinkClaims) -> Result<(Run, Call), Page> {
    let page = |status, what: Outcome| outcome_page(status, &what, Some(&claims.run), Some(links));
    let record = match state.runtime.get(&claims.run).await {
        Ok(record) => record,
        Err(ReadError::NotFound(_)) => return Err(page(StatusCode::NOT_FOUND, Outcome::NotFound)),
        Err(ReadError::Store(error)) => return Err(store_failed(&error.into(), claims, links)),
    };
    match state.runtime.link_used(&claims.run, &link_id(token)).await {
        Ok(false) => {}
        Ok(true) => return Err(page(StatusCode::CONFLICT, Outcome::Used)),
        Err(ReadError::NotFound(_)) => return Err(page(StatusCode::NOT_FOUND, Outcome::NotFound)),
        Err(ReadError::Store(error)) => return Err(store_failed(&error.into(), claims, links)),
    }
    let run = run_view(&record);
    let call = run
        .pending
        .as_ref()
        .filter(|pending| run.status == RunStatus::WaitingForApproval && pending.turn_digest == claims.digest)
        .and_then(|pending| pending.calls.iter().find(|call| call.call_id == claims.call && call.takes_decision))
        .cloned();
    match call {
        Some(call) => Ok((run, call)),
        None => Err(page(StatusCode::CONFLICT, Outcome::Stale)),
    }
}

/// The page for a store that failed: its problem's status (503, 507, 500) and a sentence that names no
/// store detail (the log has it).
fn store_failed(error: &crate::problem::ApiError, claims: &LinkClaims, links: &Links) -> Page {
    let message = format!("{} Nothing was decided; try the link again later.", error.detail);
    refused(http_status(error.kind), message, Some(&claims.run), Some(links))
}

/// `GET /approve/{token}`: the confirm page of a live link (200), or the page refusing it. Decides nothing.
async fn show(State(state): State<AppState>, Path(token): Path<String>) -> Page {
    let Some(links) = state.links.clone() else { return no_links() };
    let live = match check(&state, &links, &token).await {
        Ok(live) => live,
        Err(page) => return page,
    };
    let review_url = links.review_url(&live.run.id);
    let html = confirm(&ConfirmPage {
        action: live.claims.action,
        agent: &live.run.agent,
        run_id: &live.run.id,
        tool: &live.call.tool,
        call_id: &live.call.call_id,
        preview: live.call.preview.as_deref().unwrap_or_default(),
        actor: &live.claims.actor,
        expires_at: live.claims.expires_at,
        review_url: &review_url,
    });
    Page { status: StatusCode::OK, html }
}

/// Without a link secret no link is valid: the tampered page.
fn no_links() -> Page {
    outcome_page(StatusCode::FORBIDDEN, &Outcome::Tampered, None, None)
}

/// The form the confirm page posts.
#[derive(Debug, Default, Deserialize)]
struct LinkForm {
    /// Why the call is denied (the deny page's required field; ignored on approve).
    reason: Option<String>,
}

/// `POST /approve/{token}`: decides the link's call as its actor (200), or the page refusing it.
async fn decide(State(state): State<AppState>, Path(token): Path<String>, request: Request) -> Page {
    let Some(links) = state.links.clone() else { return no_links() };
    let form = match read_form(&state, request).await {
        Ok(form) => form,
        Err(page) => return page,
    };
    let live = match check(&state, &links, &token).await {
        Ok(live) => live,
        Err(page) => return page,
    };
    let LinkClaims { run, digest, call, action, actor, .. } = &live.claims;
    let decision = match action {
        LinkAction::Approve => Decision::Approve,
        LinkAction::Deny => match form.reason.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
            Some(reason) => Decision::Deny { reason: reason.to_owned() },
            None => {
                let message = "a denial needs a reason: write why in the Reason box";
                return refused(StatusCode::UNPROCESSABLE_ENTITY, message, Some(run), Some(&links));
            }
        },
    };
    match state.runtime.decide_by_link(run, digest, call, decision, actor, &link_id(&token)).await {
        Ok(_) => outcome_page(StatusCode::OK, &Outcome::Decided { action: *action }, Some(run), Some(&links)),
        Err(error) => refusal(&state, &links, &token, &live.claims, error).await,
    }
}

/// The page for a decision the runtime refused: used or stale when the link now is (another use of it,
/// or another decision, came first), else the refusal with its reason.
async fn refusal(state: &AppState, links: &Arc<Links>, token: &str, claims: &LinkClaims, error: DecideError) -> Page {
    if let Err(page) = current(state, links, token, claims).await {
        return page;
    }
    let status = match &error {
        DecideError::Store(_) => {
            tracing::warn!(run = %claims.run, %error, "a signed link's decision failed in the store");
            return store_failed(&error.into(), claims, links);
        }
        DecideError::LostRace { .. } => StatusCode::CONFLICT,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    refused(status, error.to_string(), Some(&claims.run), Some(links))
}

/// The posted form: a body of at most [`MAX_FORM_BYTES`] within `[server] body_timeout`; a body must
/// be `application/x-www-form-urlencoded` (none at all is an empty form).
async fn read_form(state: &AppState, request: Request) -> Result<LinkForm, Page> {
    let form_type = request.headers().get(header::CONTENT_TYPE).map(|value| {
        let essence = value.to_str().ok().and_then(|v| v.split(';').next()).unwrap_or_default();
        essence.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded")
    });
    let body = read_limited(request, MAX_FORM_BYTES, state.body_timeout)
        .await
        .map_err(|error| refused(http_status(error.kind), error.detail, None, None))?;
    if body.is_empty() {
        return Ok(LinkForm::default());
    }
    if form_type != Some(true) {
        let message = "the form must be sent as application/x-www-form-urlencoded, as the page sends it";
        return Err(refused(StatusCode::UNSUPPORTED_MEDIA_TYPE, message, None, None));
    }
    // The body read and bounded above, parsed as the form it declares.
    let form = Request::builder()
        .method("POST")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .map_err(|e| refused(StatusCode::BAD_REQUEST, e.to_string(), None, None))?;
    axum::Form::<LinkForm>::from_request(form, &())
        .await
        .map(|axum::Form(form)| form)
        .map_err(|e| refused(StatusCode::BAD_REQUEST, format!("the form does not read: {}", e.body_text()), None, None))
}
