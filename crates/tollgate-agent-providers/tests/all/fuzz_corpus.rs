//! Replays the corpora of the fuzz targets `openai_response`, `anthropic_response`, `openai_stream` and
//! `anthropic_stream`
//! (`fuzz/corpus/<target>/`, seeds and what fuzzing found) through the targets' own checks, so a
//! regression fails `cargo test` without cargo-fuzz.

use std::path::Path;
use tollgate_agent_providers::fuzzing::{
    check_anthropic_response, check_anthropic_stream, check_openai_response, check_openai_stream,
};

fn replay(target: &str, check: fn(&[u8]) -> Result<(), String>) -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut replayed = 0;
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if let Err(broken) = check(&std::fs::read(&path)?) {
            failures.push(format!("{}: {broken}", path.display()));
        }
        replayed += 1;
    }
    assert!(replayed >= 10, "expected the seed corpus in {}, found {replayed} files", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

#[test]
fn the_openai_response_corpus_gives_responses_or_typed_errors() -> std::io::Result<()> {
    replay("openai_response", check_openai_response)
}

#[test]
fn the_anthropic_response_corpus_gives_responses_or_typed_errors() -> std::io::Result<()> {
    replay("anthropic_response", check_anthropic_response)
}

#[test]
fn the_openai_stream_corpus_gives_responses_or_typed_errors() -> std::io::Result<()> {
    replay("openai_stream", check_openai_stream)
}

#[test]
fn the_anthropic_stream_corpus_gives_responses_or_typed_errors() -> std::io::Result<()> {
    replay("anthropic_stream", check_anthropic_stream)
}
