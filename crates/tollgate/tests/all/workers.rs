//! Workers only where the builder asks: a process that reads and decides never takes on a run that
//! another process started and queued.

use super::*;
use std::sync::Mutex;
use tokio::sync::Semaphore;
use tollgate::RunStatus;

/// What to do.
#[derive(Deserialize, JsonSchema)]
struct StepArgs {
    /// `ask` asks a person, `block` waits until the test releases it, anything else just runs.
    what: String,
}

/// Records, per process, which steps it ran.
#[derive(Clone)]
struct Step {
    ran: Arc<Mutex<Vec<String>>>,
    release: Arc<Semaphore>,
}

impl Step {
    fn new(release: &Arc<Semaphore>) -> Self {
        Self { ran: Arc::default(), release: Arc::clone(release) }
    }

    fn ran(&self) -> Vec<String> {
        self.ran.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl TypedTool for Step {
    type Args = StepArgs;

    const NAME: &str = "step";

    const DESCRIPTION: &str = "Does a step.";

    const GATE: Gate = Gate::Ask;

    fn gate(&self, args: &StepArgs, _ctx: &ToolContext) -> Gate {
        if args.what == "ask" { Gate::Ask } else { Gate::Allow }
    }

    async fn call(&self, args: StepArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        if args.what == "block" {
            self.release.acquire().await?.forget();
        }
        self.ran.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(args.what);
        Ok("done".into())
    }
}

const STEP: &str = r#"{"turns": [
  {"tool_calls": [{"name": "step", "arguments": {"what": "{{input}}"}}]},
  {"text": "done"}
]}"#;

fn builder(url: &str, step: &Step) -> tollgate::Builder {
    Tollgate::builder().store(url).agent(Agent::new("ops").model(Model::scripted_json(STEP)).tool(step.clone()))
}

#[tokio::test]
async fn a_process_that_only_decides_never_claims_a_run_another_process_queued() {
    let (_dir, url) = temp_db();
    let release = Arc::new(Semaphore::new(0));
    let (owned, approving) = (Step::new(&release), Step::new(&release));
    let owner = builder(&url, &owned).workers(1).build().await.unwrap_or_else(|e| panic!("{e}"));

    let waiting = owner.start("ask").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(waiting.status, RunStatus::WaitingForApproval);
    let busy = owner.start("block").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(busy.status, RunStatus::Running, "it holds the owner's only worker");
    let queued = owner.start("quick").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(queued.status, RunStatus::Queued);

    // A second process on the same file that only decides: it drives the run its decision resumes...
    let approver = builder(&url, &approving).build().await.unwrap_or_else(|e| panic!("{e}"));
    let held = approver.pending(&waiting.id).await.unwrap_or_else(|e| panic!("{e}"));
    let resumed = approver.decide(held.approve_all()).by("alice").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resumed.status, RunStatus::Completed);
    assert_eq!(approving.ran(), ["ask"]);
    // ... and never the run the owner queued, which stays queued for the owner's worker.
    let still = approver.get(&queued.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(still.status, RunStatus::Queued);

    release.add_permits(1);
    for id in [&busy.id, &queued.id] {
        let run = owner.wait(id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.status, RunStatus::Completed, "{id}");
    }
    assert_eq!(owned.ran(), ["block", "quick"]);
    assert_eq!(approving.ran(), ["ask"], "the approver ran nothing of the owner's runs");
    approver.shutdown().await;
    owner.shutdown().await;
}
