//! Replays the fuzz target `suspension`'s corpus (`fuzz/corpus/suspension/`, seeds and what fuzzing found)
//! through the target's own check, so a regression fails `cargo test` without cargo-fuzz.

use std::path::Path;
use tollgate_agent_core::fuzzing::check_suspension;

#[test]
fn the_suspension_corpus_reads_or_errs_and_round_trips() -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/suspension");
    let mut replayed = 0;
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if let Err(broken) = check_suspension(&std::fs::read(&path)?) {
            failures.push(format!("{}: {broken}", path.display()));
        }
        replayed += 1;
    }
    assert!(replayed >= 10, "expected the seed corpus in {}, found {replayed} files", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
