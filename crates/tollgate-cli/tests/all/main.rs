//! Every integration test of `tollgate-cli` in one test binary (one link step, one executable on disk);
//! each module was a test file of its own.

mod bench;
mod cli;
mod disk_full;
mod doctor;
mod frozen_v1;
mod frozen_v2;
mod grants;
mod no_store;
mod nodes;
mod outputs;
mod pg_failover;
mod pg_restart;
mod prompt;
mod quorum;
mod readme;
mod refused_edit;
mod remote;
mod sandboxed_daemon;
mod sealed;
mod secrets;
mod serve_owner;
mod soak;
mod support;
mod telemetry;
