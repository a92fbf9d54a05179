//! Runs docs/benchmarks.md workload A (or C) in process and prints the table.
//!
//! `cargo run --release -p tollgate-agent-bench --example approval_cycle -- STORE_URL N CONCURRENCY [deny]`

use std::process::ExitCode;

/// The same allocator as the `tollgate` binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args.first().cloned().unwrap_or_else(|| "sqlite://bench.db".into());
    let n = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let concurrency = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1);
    let deny = args.get(3).is_some_and(|a| a == "deny");
    let floor = if concurrency == 1 { tollgate_agent_bench::sqlite_commit_floor(&url, n) } else { Ok(None) };
    match tollgate_agent_bench::approval_cycle(&url, n, concurrency, deny).await.and_then(|mut reports| {
        reports.extend(floor?);
        Ok(reports)
    }) {
        Ok(reports) => {
            print!("{}", tollgate_agent_bench::table(&reports));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}
