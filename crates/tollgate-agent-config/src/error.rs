//! [`ConfigError`]: everything that makes a configuration unusable. Each message names where the bad value
//! came from (the file as it was given, or the `TOLLGATE_*` variable that overrode it), the key as a dotted
//! path (`agents[1].on_expiry`) and what was expected. No message ever contains a secret's value. None of
//! these errors is retryable: the program should exit (the CLI exits 2) before doing anything.

use std::io;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file (from `--config`, `TOLLGATE_CONFIG` or `./tollgate.toml`) could not be read.
    #[error("{origin}: cannot read the config file: {source}")]
    Read {
        /// The file as it was named, and how (e.g. `conf.toml (from TOLLGATE_CONFIG)`).
        origin: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The file is not valid TOML.
    #[error("{origin}:{line}:{column}: invalid TOML: {message}")]
    Syntax {
        /// The file as it was named.
        origin: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column (in characters) of the error.
        column: usize,
        /// The parser's description.
        message: String,
    },
    /// A key that the contract does not define (a typo, or a key of another kind of provider).
    #[error("{origin}: {key}: unknown key (known keys here: {known})")]
    UnknownKey {
        /// The file, or the environment variable.
        origin: String,
        /// The dotted path of the unknown key.
        key: String,
        /// The keys allowed at that place, comma-separated.
        known: String,
    },
    /// A required key is absent.
    #[error("{origin}: {key}: missing, expected {expected}")]
    MissingKey {
        /// The file.
        origin: String,
        /// The dotted path of the missing key.
        key: String,
        /// What the key should hold.
        expected: String,
    },
    /// A key holds a value of the wrong type or outside what is allowed, or contradicts another key.
    #[error("{origin}: {key}: {problem}")]
    Invalid {
        /// The file, or the environment variable that supplied the value.
        origin: String,
        /// The dotted path of the key.
        key: String,
        /// What was expected and what was found, e.g. `expected "deny" or "cancel", got "maybe"`.
        problem: String,
    },
    /// A secret says `env:NAME` and `NAME` is not set.
    #[error("{origin}: {key}: environment variable {variable} is not set")]
    MissingEnvVar {
        /// The file.
        origin: String,
        /// The dotted path of the key holding `env:NAME`.
        key: String,
        /// `NAME`.
        variable: String,
    },
    /// The current folder, against which relative paths are resolved, is unavailable.
    #[error("cannot determine the current folder: {0}")]
    CurrentDir(#[source] io::Error),
}

impl ConfigError {
    /// The dotted path of the key at fault, when one is.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey { key, .. }
            | ConfigError::MissingKey { key, .. }
            | ConfigError::Invalid { key, .. }
            | ConfigError::MissingEnvVar { key, .. } => Some(key),
            ConfigError::Read { .. } | ConfigError::Syntax { .. } | ConfigError::CurrentDir(_) => None,
        }
    }

    /// Where the bad value came from: the file as it was named, or an environment variable's name.
    pub fn origin(&self) -> Option<&str> {
        match self {
            ConfigError::Read { origin, .. }
            | ConfigError::Syntax { origin, .. }
            | ConfigError::UnknownKey { origin, .. }
            | ConfigError::MissingKey { origin, .. }
            | ConfigError::Invalid { origin, .. }
            | ConfigError::MissingEnvVar { origin, .. } => Some(origin),
            ConfigError::CurrentDir(_) => None,
        }
    }
}
