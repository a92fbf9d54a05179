//! Replays the fuzz target `api_bodies`' corpus (`fuzz/corpus/api_bodies/`, seeds and what fuzzing found)
//! through the protocol's half of its check (the server's tests replay it through the whole check), so a
//! regression fails `cargo test` without cargo-fuzz.

use std::path::Path;
use tollgate_agent_protocol::fuzzing::check_request_body;

#[test]
fn the_api_bodies_corpus_reads_or_errs_and_round_trips() -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/api_bodies");
    let mut replayed = 0;
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if let Err(broken) = check_request_body(&std::fs::read(&path)?) {
            failures.push(format!("{}: {broken}", path.display()));
        }
        replayed += 1;
    }
    assert!(replayed >= 10, "expected the seed corpus in {}, found {replayed} files", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
