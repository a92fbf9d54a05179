//! Every integration test of `tollgate-agent-config` in one test binary (one link step, one executable on disk);
//! each module was a test file of its own.

mod discovery;
mod errors;
mod example;
mod fuzz_corpus;
mod notify;
mod overrides;
mod support;
