//! Response bodies into the Anthropic adapter, as a 2xx answer and under each failure status.
//!
//! A value or an error, never a panic or a hang; the promises checked are `tollgate_agent_providers::fuzzing`'s.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(broken) = tollgate_agent_providers::fuzzing::check_anthropic_response(data) {
        panic!("{broken}");
    }
});
