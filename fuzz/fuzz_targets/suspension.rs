//! Stored suspension text into `Suspension::from_json`; what it accepts round-trips through
//! `to_stored`.
//!
//! A value or an error, never a panic or a hang; the promises checked are `tollgate_agent_core::fuzzing`'s.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(broken) = tollgate_agent_core::fuzzing::check_suspension(data) {
        panic!("{broken}");
    }
});
