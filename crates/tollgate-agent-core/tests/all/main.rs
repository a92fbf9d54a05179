//! Every integration test of `tollgate-agent-core` in one test binary (one link step, one executable on disk);
//! each module was a test file of its own.

mod approvals;
mod frozen_v1;
mod fuzz_corpus;
mod grants;
mod loop_rules;
mod properties;
mod transcripts;
mod typed_tools;
