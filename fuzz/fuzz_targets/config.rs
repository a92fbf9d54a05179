//! `tollgate.toml` text into `ConfigLoader::load_str`, with a fixed environment.
//!
//! A value or an error, never a panic or a hang; the promises checked are `tollgate_agent_config::fuzzing`'s.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(broken) = tollgate_agent_config::fuzzing::check_config(data) {
        panic!("{broken}");
    }
});
