//! Every integration test of `tollgate-agent-tools` in one test binary (one link step, one executable on disk);
//! each module was a test file of its own.

mod approval_binding;
mod deep_trees;
mod fs_search;
mod fs_security;
mod fs_tools;
mod grant_suggestions;
mod http_request;
mod schemas;
mod shell;
mod shell_network;
mod shell_security;
mod support;
mod time_now;
