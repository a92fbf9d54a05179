//! Which file is read (`--config`, `TOLLGATE_CONFIG`, `./tollgate.toml`, none), the built-in defaults, and
//! relative paths resolved against the config file's folder — on real files in a temp folder.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::TempDir;
use tollgate_agent_config::{ConfigError, ConfigLoader, ConfigSource, EnvVars, FoundBy, McpCommand, StoreBackend};

fn loader_in(dir: &TempDir, env: &[(&str, &str)]) -> ConfigLoader {
    ConfigLoader::new(env.iter().copied().collect::<EnvVars>(), dir.path())
}

#[test]
fn defaults_without_a_file() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let loader = loader_in(&dir, &[]);
    assert_eq!(loader.locate(), None);
    let config = loader.load()?;
    assert_eq!(config.source, ConfigSource::Defaults);
    assert_eq!(config.base_dir, dir.path());
    let db = dir.path().join("tollgate.db");
    assert_eq!(config.store.url, format!("sqlite://{}", db.display()));
    assert_eq!(config.store.backend, StoreBackend::Sqlite { path: db });
    assert_eq!(config.store.connect_timeout, Duration::from_secs(5));
    assert_eq!(config.server.addr.to_string(), "127.0.0.1:8080");
    assert_eq!(config.server.max_body_bytes, 1_048_576);
    assert_eq!(config.server.lease, Duration::from_secs(30));
    assert_eq!(config.server.header_read_timeout, Duration::from_secs(10));
    assert_eq!(config.server.idle_timeout, Duration::from_secs(60));
    assert_eq!(config.server.body_timeout, Duration::from_secs(30));
    assert_eq!(config.server.ready_timeout, Duration::from_secs(2));
    assert_eq!(config.server.max_connections, 10_000);
    assert_eq!(config.server.max_streams_per_client, 16);
    assert_eq!(config.retention.terminal_after, Duration::from_secs(30 * 86_400));
    assert_eq!(config.retention.waiting_after, Duration::from_secs(90 * 86_400));
    assert_eq!(config.workspace.root, dir.path().join("workspace"));
    assert!(config.grants.enabled);
    assert_eq!(config.grants.default_ttl, Duration::from_secs(8 * 3_600));
    assert_eq!(config.grants.max_ttl, Duration::from_secs(30 * 86_400));
    assert!(config.auth.tokens.is_empty());
    assert!(config.providers.is_empty());
    assert!(config.mcp_servers.is_empty());
    assert!(config.webhooks.is_empty());
    assert!(!config.defines_agents(), "the caller adds the demo agent");
    Ok(())
}

#[test]
fn an_empty_file_means_the_defaults() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    dir.write("tollgate.toml", "")?;
    let from_file = loader_in(&dir, &[]).load()?;
    let defaults = loader_in(&dir, &[]).defaults()?;
    assert_eq!(from_file.source, ConfigSource::File(dir.path().join("tollgate.toml")));
    assert_eq!(
        (from_file.store, from_file.server, from_file.workspace),
        (defaults.store, defaults.server, defaults.workspace)
    );
    Ok(())
}

#[test]
fn finds_tollgate_toml_in_the_current_folder() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let path = dir.write("tollgate.toml", "[server]\naddr = \"127.0.0.1:9001\"\n")?;
    let loader = loader_in(&dir, &[]);
    let located = loader.locate().ok_or_else(|| anyhow::anyhow!("not found"))?;
    assert_eq!(
        (located.path.as_path(), located.name.as_str(), located.found_by),
        (path.as_path(), "tollgate.toml", FoundBy::CurrentDir)
    );
    assert_eq!(loader.load()?.server.addr.port(), 9001);
    Ok(())
}

#[test]
fn tollgate_config_names_the_file_and_the_flag_wins_over_it() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    dir.write("tollgate.toml", "[server]\naddr = \"127.0.0.1:9001\"\n")?;
    dir.write("env.toml", "[server]\naddr = \"127.0.0.1:9002\"\n")?;
    let flag = dir.write("flag.toml", "[server]\naddr = \"127.0.0.1:9003\"\n")?;

    let by_env = loader_in(&dir, &[("TOLLGATE_CONFIG", "env.toml")]);
    assert_eq!(by_env.locate().map(|f| f.found_by), Some(FoundBy::EnvVar));
    let config = by_env.load()?;
    assert_eq!(config.server.addr.port(), 9002);
    assert_eq!(config.source, ConfigSource::File(dir.path().join("env.toml")));

    let by_flag = by_env.clone().with_file(Some(flag));
    assert_eq!(by_flag.locate().map(|f| f.found_by), Some(FoundBy::Flag));
    assert_eq!(by_flag.load()?.server.addr.port(), 9003);

    // A blank TOLLGATE_CONFIG is no TOLLGATE_CONFIG.
    assert_eq!(loader_in(&dir, &[("TOLLGATE_CONFIG", "")]).load()?.server.addr.port(), 9001);
    Ok(())
}

#[test]
fn a_named_file_must_exist() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let by_flag = loader_in(&dir, &[]).with_file(Some(PathBuf::from("missing.toml"))).load();
    let Err(error @ ConfigError::Read { .. }) = by_flag else {
        anyhow::bail!("expected a read error, got {by_flag:?}")
    };
    assert!(error.to_string().starts_with("missing.toml (from --config): cannot read the config file: "), "{error}");

    let by_env = loader_in(&dir, &[("TOLLGATE_CONFIG", "gone.toml")]).load();
    let Err(error) = by_env else { anyhow::bail!("expected an error, got {by_env:?}") };
    assert!(
        error.to_string().starts_with("gone.toml (from TOLLGATE_CONFIG): cannot read the config file: "),
        "{error}"
    );
    Ok(())
}

#[test]
fn relative_paths_resolve_against_the_config_files_folder() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let conf = dir.path().join("conf");
    let text = r#"
[store]
url = "sqlite://./data/tollgate.db"

[workspace]
root = "files"

[[providers]]
name = "script"
kind = "scripted"
script = "scripts/demo.json"

[[mcp_servers]]
name = "local"
command = "./bin/server"
args = ["--root", "../shared", ".", "/abs/path", "plain"]

[[mcp_servers]]
name = "npx"
command = "npx"
"#;
    let file = dir.write("conf/tollgate.toml", text)?;
    // The current folder is elsewhere: it must not matter.
    let elsewhere = TempDir::new()?;
    let config = loader_in(&elsewhere, &[]).with_file(Some(file)).load()?;
    assert_eq!(config.base_dir, conf);
    assert_eq!(config.store.url, format!("sqlite://{}", conf.join("data/tollgate.db").display()));
    assert_eq!(config.workspace.root, conf.join("files"));
    let script = match &config.providers[0].kind {
        tollgate_agent_config::ProviderKind::Scripted(scripted) => scripted.script.clone(),
        other => anyhow::bail!("expected a scripted provider, got {other:?}"),
    };
    assert_eq!(script, conf.join("scripts/demo.json"));
    let server = &config.mcp_servers[0];
    assert_eq!(server.command, McpCommand::Path(conf.join("bin/server")));
    let expected_args = [
        "--root".to_owned(),
        conf.join("../shared").display().to_string(),
        conf.display().to_string(),
        "/abs/path".into(),
        "plain".into(),
    ];
    assert_eq!(server.args, expected_args);
    assert_eq!(config.mcp_servers[1].command, McpCommand::Program("npx".into()));
    Ok(())
}

#[test]
fn a_relative_config_path_is_relative_to_the_current_folder() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    dir.write("sub/app.toml", "[store]\nurl = \"sqlite:///var/lib/tollgate.db\"\n")?;
    let config = loader_in(&dir, &[]).with_file(Some(PathBuf::from("./sub/app.toml"))).load()?;
    assert_eq!(config.source, ConfigSource::File(dir.path().join("sub/app.toml")));
    assert_eq!(config.base_dir, dir.path().join("sub"));
    assert_eq!(config.store.url, "sqlite:///var/lib/tollgate.db", "an absolute SQLite file stays as it is");
    Ok(())
}

#[test]
fn syntax_errors_name_the_file_as_given_with_line_and_column() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    dir.write("tollgate.toml", "[server]\naddr = \"127.0.0.1:8080\n")?;
    let result = loader_in(&dir, &[]).load();
    let Err(ConfigError::Syntax { origin, line, column, .. }) = result else { anyhow::bail!("{result:?}") };
    assert_eq!((origin.as_str(), line), ("tollgate.toml", 2));
    assert!(column > 1);
    Ok(())
}
