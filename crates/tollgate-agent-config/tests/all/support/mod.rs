//! Helpers shared by this crate's integration tests: a throwaway folder and a loader rooted in a fixed,
//! fictional current folder (parsing from a string touches no file).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use tollgate_agent_config::{Config, ConfigError, ConfigLoader, EnvVars};

/// The current folder of [`loader`]; nothing is read from it.
pub(crate) const CWD: &str = "/srv/app";

/// A loader with `env` and the current folder [`CWD`].
pub(crate) fn loader(env: &[(&str, &str)]) -> ConfigLoader {
    ConfigLoader::new(env.iter().copied().collect::<EnvVars>(), CWD)
}

/// Parses `text` as `/srv/app/tollgate.toml` with an empty environment.
pub(crate) fn parse(text: &str) -> Result<Config, ConfigError> {
    loader(&[]).load_str("tollgate.toml", text)
}

/// The message of the error parsing `text` must give; panics when it parses.
pub(crate) fn error(text: &str) -> String {
    match parse(text) {
        Ok(config) => panic!("expected an error, parsed {config:#?}"),
        Err(error) => error.to_string(),
    }
}

/// Parses each `(name, text, expected)` case and checks its error message is `expected` exactly; reports
/// every mismatch at once.
pub(crate) fn check(cases: &[(&str, String, &str)]) {
    let mut failures = Vec::new();
    for (name, text, expected) in cases {
        let got = error(text);
        if got != *expected {
            failures.push(format!("{name}:\n  expected: {expected}\n       got: {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A folder under the system temp folder, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new() -> anyhow::Result<TempDir> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("tollgate-agent-config-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        // Canonical, so paths the loader builds from it compare equal on systems where temp is a symlink.
        Ok(TempDir(path.canonicalize()?))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `relative` (creating folders) and returns the file's path.
    pub(crate) fn write(&self, relative: &str, text: &str) -> anyhow::Result<PathBuf> {
        let path = self.0.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text)?;
        Ok(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
