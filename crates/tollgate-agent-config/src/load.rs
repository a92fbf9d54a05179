//! Finding and reading the config file: `--config FILE`, else `TOLLGATE_CONFIG`, else `./tollgate.toml` if
//! present, else the built-in defaults. A file named by `--config` or `TOLLGATE_CONFIG` must exist; only
//! `./tollgate.toml` is optional.

use std::path::{Path, PathBuf};

use toml::Table;

use crate::defaults;
use crate::model::{Config, ConfigSource};
use crate::parse::{Parser, resolve};
use crate::{ConfigError, EnvVars};

/// How the config file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    /// Named by `--config FILE`.
    Flag,
    /// Named by the `TOLLGATE_CONFIG` environment variable.
    EnvVar,
    /// `tollgate.toml` in the current folder.
    CurrentDir,
}

/// The config file the loader will read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// The file, absolute.
    pub path: PathBuf,
    /// The file as it was named (`tollgate.toml`, or the text of `--config` / `TOLLGATE_CONFIG`), which
    /// error messages start with.
    pub name: String,
    /// How it was found.
    pub found_by: FoundBy,
}

/// Loads a [`Config`] from an explicit environment and current folder, so tests need neither the process
/// environment nor `chdir`.
///
/// ```
/// use tollgate_agent_config::{ConfigLoader, EnvVars};
/// let loader = ConfigLoader::new(EnvVars::new().with("TOLLGATE_SERVER_ADDR", "0.0.0.0:9000"), "/srv/app");
/// let config = loader.load_str("/srv/app/tollgate.toml", "[workspace]\nroot = \"files\"\n")?;
/// assert_eq!(config.server.addr.port(), 9000);
/// assert_eq!(config.workspace.root, std::path::Path::new("/srv/app/files"));
/// # Ok::<(), tollgate_agent_config::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ConfigLoader {
    flag: Option<PathBuf>,
    env: EnvVars,
    current_dir: PathBuf,
}

impl ConfigLoader {
    /// A loader reading `env` and resolving relative paths against `current_dir` (which should be absolute).
    pub fn new(env: EnvVars, current_dir: impl Into<PathBuf>) -> ConfigLoader {
        ConfigLoader { flag: None, env, current_dir: current_dir.into() }
    }

    /// A loader for this process: its environment and its current folder.
    pub fn from_process() -> Result<ConfigLoader, ConfigError> {
        let current_dir = std::env::current_dir().map_err(ConfigError::CurrentDir)?;
        Ok(ConfigLoader::new(EnvVars::from_process(), current_dir))
    }

    /// The file given by `--config`, if any; it takes precedence over `TOLLGATE_CONFIG`.
    pub fn with_file(mut self, file: Option<PathBuf>) -> ConfigLoader {
        self.flag = file;
        self
    }

    /// The file [`ConfigLoader::load`] will read, or `None` when it will use the built-in defaults.
    pub fn locate(&self) -> Option<ConfigFile> {
        let named = |path: &Path, found_by| ConfigFile {
            path: resolve(&self.current_dir, path),
            name: path.display().to_string(),
            found_by,
        };
        if let Some(flag) = &self.flag {
            return Some(named(flag, FoundBy::Flag));
        }
        if let Some(path) = self.env.get_non_empty(defaults::CONFIG_ENV) {
            return Some(named(Path::new(path), FoundBy::EnvVar));
        }
        let local = self.current_dir.join(defaults::CONFIG_FILE);
        local.is_file().then(|| ConfigFile {
            path: local,
            name: defaults::CONFIG_FILE.to_owned(),
            found_by: FoundBy::CurrentDir,
        })
    }

    /// Finds, reads, parses and validates the configuration.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let Some(file) = self.locate() else { return self.defaults() };
        let text = std::fs::read_to_string(&file.path).map_err(|source| {
            let origin = match file.found_by {
                FoundBy::Flag => format!("{} (from --config)", file.name),
                FoundBy::EnvVar => format!("{} (from {})", file.name, defaults::CONFIG_ENV),
                FoundBy::CurrentDir => file.name.clone(),
            };
            ConfigError::Read { origin, source }
        })?;
        self.parse(&file.name, &file.path, &text)
    }

    /// Parses `text` as if it were the file at `path` (relative paths in it resolve against `path`'s
    /// folder), with this loader's environment.
    pub fn load_str(&self, path: impl AsRef<Path>, text: &str) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        self.parse(&path.display().to_string(), &resolve(&self.current_dir, path), text)
    }

    /// The built-in defaults with this loader's `TOLLGATE_*` overrides, ignoring any file.
    pub fn defaults(&self) -> Result<Config, ConfigError> {
        let parser = Parser {
            origin: defaults::CONFIG_FILE,
            env: &self.env,
            base_dir: &self.current_dir,
            current_dir: &self.current_dir,
        };
        parser.build(&Table::new(), ConfigSource::Defaults)
    }

    fn parse(&self, name: &str, path: &Path, text: &str) -> Result<Config, ConfigError> {
        let table: Table = text.parse().map_err(|e: toml::de::Error| syntax_error(name, text, &e))?;
        let base_dir = path.parent().unwrap_or(&self.current_dir);
        let parser = Parser { origin: name, env: &self.env, base_dir, current_dir: &self.current_dir };
        parser.build(&table, ConfigSource::File(path.to_path_buf()))
    }
}

/// Loads the configuration of this process: `config_flag` is the `--config` option, if given.
pub fn load(config_flag: Option<&Path>) -> Result<Config, ConfigError> {
    ConfigLoader::from_process()?.with_file(config_flag.map(Path::to_path_buf)).load()
}

fn syntax_error(name: &str, text: &str, error: &toml::de::Error) -> ConfigError {
    let offset = error.span().map_or(0, |span| span.start).min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let message = error.message().trim().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>();
    ConfigError::Syntax { origin: name.to_owned(), line, column, message: message.join("; ") }
}
