//! Every integration test of `tollgate-agent-store` in one test binary: the contract suite run against SQLite
//! and PostgreSQL, and what only one backend has.

#[macro_use]
mod contract;
mod postgres;
mod sqlite;
