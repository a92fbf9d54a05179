//! The fuzz target `config`'s entry point (`fuzz/`), shared with the test that replays its corpus
//! (`tests/all/fuzz_corpus.rs`). Not part of the API.
//!
//! `tollgate.toml` is text a person wrote, so the loader takes any text: [`ConfigLoader::load_str`] gives a
//! [`Config`](crate::Config) or a [`ConfigError`](crate::ConfigError), never a panic, and touches no file.
//! A secret read from the environment is never printed: neither the error nor the `Debug` output of the
//! config quotes one (unless the text itself spelled it out).

use crate::{ConfigLoader, EnvVars};

/// The environment every check loads with: the variables the example config's `env:NAME` secrets name.
const SECRETS: [(&str, &str); 6] = [
    ("ALICE_TOKEN", "fuzz-alice-token-value"),
    ("OPENAI_API_KEY", "sk-fuzz-openai-key-value"),
    ("ANTHROPIC_API_KEY", "sk-ant-fuzz-key-value"),
    ("HOOK_SECRET", "fuzz-hook-secret-value"),
    ("DATABASE_URL", "postgres://tollgate:fuzz-db-password@db:5432/tollgate"),
    ("DATA_KEY", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"),
];

/// `TOLLGATE_*` overrides the second load applies on top of the same secrets.
const OVERRIDES: [(&str, &str); 4] = [
    ("TOLLGATE_SERVER_ADDR", "0.0.0.0:9000"),
    ("TOLLGATE_RETENTION_TERMINAL_AFTER", "7d"),
    ("TOLLGATE_WORKSPACE_ROOT", "files"),
    ("TOLLGATE_PRIVACY_LEVEL", "redacted"),
];

/// Loads `data` as `/srv/app/tollgate.toml`, without and with overrides, and checks that no secret
/// leaks; `Err` says which promise broke.
pub fn check_config(data: &[u8]) -> Result<(), String> {
    // A config file that is not UTF-8 is refused before parsing (`read_to_string`).
    let Ok(text) = std::str::from_utf8(data) else { return Ok(()) };
    let secrets: EnvVars = SECRETS.into_iter().collect();
    let overridden: EnvVars = SECRETS.into_iter().chain(OVERRIDES).collect();
    for env in [secrets, overridden] {
        let printed = match ConfigLoader::new(env, "/srv/app").load_str("tollgate.toml", text) {
            Ok(config) => format!("{config:?}"),
            Err(error) => error.to_string(),
        };
        for (name, value) in SECRETS {
            if printed.contains(value) && !text.contains(value) {
                return Err(format!("the secret in {name} is printed:\n{printed}"));
            }
        }
    }
    Ok(())
}
