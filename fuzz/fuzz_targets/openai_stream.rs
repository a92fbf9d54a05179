//! Event-stream bodies into the OpenAI-compatible adapter's streamed reading (`stream = true`).
//!
//! A value or an error, never a panic or a hang, and live text that is the response's text; the
//! promises checked are `tollgate_agent_providers::fuzzing`'s.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(broken) = tollgate_agent_providers::fuzzing::check_openai_stream(data) {
        panic!("{broken}");
    }
});
