//! Every integration test of `tollgate-agent-server` in one test binary (one link step, one executable on disk);
//! each module was a test file of its own.

mod api;
mod auth;
mod common;
mod concurrency;
mod fuzz_corpus;
mod grants;
mod limits;
mod local_owner;
mod malformed;
mod nodes;
mod notify;
mod openapi;
mod openapi_statuses;
mod openapi_tools;
mod outage;
mod promtool;
mod shutdown;
mod sse;
mod store_failures;
mod webhooks;
