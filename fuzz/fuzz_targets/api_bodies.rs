//! HTTP API request bodies into the protocol's types and the server's own reading and validation.
//!
//! A value or an error, never a panic or a hang; the promises checked are `tollgate_agent_server::fuzzing`'s.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(broken) = tollgate_agent_server::fuzzing::check_request_body(data) {
        panic!("{broken}");
    }
});
