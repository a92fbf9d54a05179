//! Every integration test of `tollgate-agent-providers` in one test binary (one link step, one executable on disk);
//! each module was a test file of its own.

mod anthropic_wire;
mod fuzz_corpus;
mod openai_wire;
mod resume_snapshots;
mod secrets;
mod streaming;
mod support;
mod tool_images;
