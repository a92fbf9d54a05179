//! Replays the fuzz target `config`'s corpus (`fuzz/corpus/config/`, seeds and what fuzzing found)
//! through the target's own check, so a regression fails `cargo test` without cargo-fuzz.

use std::path::Path;
use tollgate_agent_config::fuzzing::check_config;

#[test]
fn the_config_corpus_loads_or_errs_without_printing_secrets() -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/config");
    let mut replayed = 0;
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if let Err(broken) = check_config(&std::fs::read(&path)?) {
            failures.push(format!("{}: {broken}", path.display()));
        }
        replayed += 1;
    }
    assert!(replayed >= 10, "expected the seed corpus in {}, found {replayed} files", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
