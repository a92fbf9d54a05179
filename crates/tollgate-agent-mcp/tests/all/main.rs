//! Every integration test of `tollgate-agent-mcp` in one test binary (one link step, one executable on disk);
//! each module was a test file of its own.

mod filesystem_server;
mod test_server;
