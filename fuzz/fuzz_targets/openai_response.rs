//! Response bodies into the OpenAI-compatible adapter, as a 2xx answer and under each failure
//! status.
//!
//! A value or an error, never a panic or a hang; the promises checked are `tollgate_agent_providers::fuzzing`'s.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(broken) = tollgate_agent_providers::fuzzing::check_openai_response(data) {
        panic!("{broken}");
    }
});
