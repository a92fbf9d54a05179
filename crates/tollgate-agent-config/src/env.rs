//! [`EnvVars`]: the environment the loader reads (`TOLLGATE_CONFIG`, `TOLLGATE_<SECTION>_<KEY>` overrides,
//! `env:NAME` secrets), passed in rather than read from the process so tests control it completely.

use std::collections::BTreeMap;
use std::fmt;

/// A set of environment variables.
///
/// ```
/// use tollgate_agent_config::EnvVars;
/// let env = EnvVars::new().with("TOLLGATE_SERVER_ADDR", "0.0.0.0:9000");
/// assert_eq!(env.get("TOLLGATE_SERVER_ADDR"), Some("0.0.0.0:9000"));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EnvVars {
    vars: BTreeMap<String, String>,
}

impl EnvVars {
    /// No variables at all.
    pub fn new() -> EnvVars {
        EnvVars::default()
    }

    /// The current process's environment. Variables whose name or value is not valid Unicode are left out.
    pub fn from_process() -> EnvVars {
        std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect()
    }

    /// Adds (or replaces) a variable.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> EnvVars {
        self.set(name, value);
        self
    }

    /// Adds (or replaces) a variable.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.vars.insert(name.into(), value.into());
    }

    /// The value of `name`, if set (possibly empty).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// The value of `name` if set and not empty: the loader treats `TOLLGATE_X=` like an unset `TOLLGATE_X`
    /// for discovery and overrides, so a blank variable in a compose file or CI matrix changes nothing.
    pub(crate) fn get_non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.is_empty())
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for EnvVars {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        EnvVars { vars: iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect() }
    }
}

/// Lists the names only: values may be secrets.
impl fmt::Debug for EnvVars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}
