//! An axum service of your own that embeds Tollgate: customers ask for refunds in plain words, an agent
//! turns them into `refund` calls, and refunds over 50.00 wait for your support staff, who decide them
//! through this service's own endpoints. Tollgate's whole HTTP API and playground are mounted under
//! `/tollgate` as well.
//!
//! ```sh
//! cargo run -p example-axum-service -- 127.0.0.1:3000
//! curl -s -X POST localhost:3000/refunds -H 'content-type: application/json' \
//!      -d '{"customer": "c-42", "request": "My order arrived broken, please refund it"}'
//! curl -s localhost:3000/approvals
//! curl -s -X POST localhost:3000/approvals/RUN_ID -H 'content-type: application/json' \
//!      -d '{"digest": "sha256:…", "approve": true}'
//! ```

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tollgate::{
    Agent, Gate, ListQuery, Model, RunId, RunStatus, Tollgate, ToolContext, ToolError, ToolOutput, TypedTool,
};

/// Refunds an order.
#[derive(Deserialize, JsonSchema)]
struct RefundArgs {
    /// The order.
    order: String,
    /// How much, in cents.
    cents: u64,
}

struct Refund;

impl TypedTool for Refund {
    type Args = RefundArgs;

    const NAME: &str = "refund";

    const DESCRIPTION: &str = "Refunds an order to the customer's card.";

    const GATE: Gate = Gate::Ask;

    fn gate(&self, args: &RefundArgs, _ctx: &ToolContext) -> Gate {
        if args.cents > 5_000 { Gate::Ask } else { Gate::Allow }
    }

    async fn call(&self, args: RefundArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        // The customer comes from the run's metadata, set by this service, never from the model.
        let customer = ctx.metadata.get("customer").and_then(Value::as_str).unwrap_or("unknown");
        Ok(format!("refunded {} cents on order {} to customer {customer}", args.cents, args.order).into())
    }
}

const SCRIPT: &str = r#"{"turns": [
  {"tool_calls": [{"name": "refund", "arguments": {"order": "A-1001", "cents": 7999}}]},
  {"when_approved": {"text": "Your refund is on its way."},
   "when_denied": {"text": "Support could not approve this refund."}}
]}"#;

/// The runtime: SQLite in a file of its own (`TOLLGATE_EXAMPLE_DB`, default `refunds.db`).
async fn tollgate() -> Result<Tollgate, tollgate::BuildError> {
    let db = std::env::var("TOLLGATE_EXAMPLE_DB").unwrap_or_else(|_| "refunds.db".into());
    Tollgate::builder()
        .store(format!("sqlite://{db}"))
        .agent(Agent::new("support").model(Model::scripted_json(SCRIPT)).tool(Refund))
        .build()
        .await
}

/// The service's routes over a runtime.
fn app(tollgate: Tollgate) -> Router {
    Router::new()
        .route("/refunds", post(ask_refund))
        .route("/approvals", get(approvals))
        .route("/approvals/{run_id}", post(decide))
        .with_state(tollgate.clone())
        .nest("/tollgate", tollgate.router())
}

#[derive(Deserialize)]
struct RefundRequest {
    customer: String,
    request: String,
}

async fn ask_refund(State(tollgate): State<Tollgate>, Json(body): Json<RefundRequest>) -> Response {
    let started = tollgate.start(body.request).metadata("customer", body.customer).by("web").wait().await;
    match started {
        Ok(run) => (StatusCode::CREATED, Json(json!({"run": run.id, "status": run.status, "answer": run.output})))
            .into_response(),
        Err(error) => failure(StatusCode::UNPROCESSABLE_ENTITY, error),
    }
}

/// Every run waiting for a decision, with what it would do.
async fn approvals(State(tollgate): State<Tollgate>) -> Response {
    let page = match tollgate.list(ListQuery::status(RunStatus::WaitingForApproval)).await {
        Ok(page) => page,
        Err(error) => return failure(StatusCode::SERVICE_UNAVAILABLE, error),
    };
    let mut waiting = Vec::new();
    for run in page.runs {
        let Ok(held) = tollgate.pending(&run.id).await else { continue };
        let calls: Vec<Value> = held
            .awaiting()
            .map(|c| json!({"call": c.call_id, "tool": c.tool, "arguments": c.arguments, "preview": c.preview}))
            .collect();
        waiting.push(
            json!({"run": run.id, "digest": held.digest, "customer": run.metadata.get("customer"), "calls": calls}),
        );
    }
    Json(json!({"waiting": waiting})).into_response()
}

#[derive(Deserialize)]
struct DecisionBody {
    /// The digest the approver saw (from `GET /approvals`).
    digest: String,
    approve: bool,
    #[serde(default)]
    reason: Option<String>,
}

async fn decide(
    State(tollgate): State<Tollgate>,
    Path(run_id): Path<RunId>,
    Json(body): Json<DecisionBody>,
) -> Response {
    let held = match tollgate.pending(&run_id).await {
        Ok(held) if held.digest == body.digest => held,
        Ok(_) => return failure(StatusCode::CONFLICT, "the run moved on: look again"),
        Err(tollgate::PendingError::NotFound(_)) => return failure(StatusCode::NOT_FOUND, "no such run"),
        Err(error) => return failure(StatusCode::CONFLICT, error),
    };
    let decisions = if body.approve {
        held.approve_all()
    } else {
        held.deny_all(body.reason.unwrap_or_else(|| "declined by support".into()))
    };
    match tollgate.decide(decisions).by("support-desk").wait().await {
        Ok(run) => Json(json!({"run": run.id, "status": run.status, "answer": run.output})).into_response(),
        Err(error) => failure(StatusCode::CONFLICT, error),
    }
}

fn failure(status: StatusCode, error: impl std::fmt::Display) -> Response {
    (status, Json(json!({"error": error.to_string()}))).into_response()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:3000".into());
    let tollgate = tollgate().await?;
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    // The bound address on the first line (port 0 picks a free one): the example's test reads it.
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app(tollgate.clone()))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    tollgate.shutdown().await;
    Ok(())
}
