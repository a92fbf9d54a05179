//! Every integration test of `tollgate-agent-protocol` in one test binary (one link step, one executable on disk);
//! each module was a test file of its own.

mod frozen_wire;
mod fuzz_corpus;
mod openapi;
mod shapes;
