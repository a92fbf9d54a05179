//! The commands that only read, or change only what the store already holds, run in a folder without
//! its SQLite file: each answers as on an empty store and leaves the folder exactly as it was (no
//! `tollgate.db`, no `-wal`, no workspace). `run` creates the file, which shows the check can tell.

use crate::support::tollgate_in;
use anyhow::Result;
use std::path::Path;
use tollgate_agent_testkit::scratch_dir;

/// A well-formed run id no store holds.
const ID: &str = "0193b0c6-2b1a-7c3d-8e4f-5a6b7c8d9e0f";

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Result<Vec<String>> {
    let mut names = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<Vec<_>, _>>()?;
    names.sort();
    Ok(names)
}

#[test]
fn commands_that_need_runs_leave_a_folder_without_a_store_as_it_was() -> Result<()> {
    let no_run = format!("no run matches `{ID}`");
    // (arguments, exit code, what stdout or stderr says)
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["runs"], 0, "no runs"),
        (vec!["runs", "--json"], 0, "\"runs\": []"),
        (vec!["runs", "--status", "waiting_for_approval"], 0, "no runs"),
        (vec!["show", ID], 1, &no_run),
        (vec!["show", ID, "--events"], 1, &no_run),
        (vec!["show", "0193b0c6"], 1, "no run matches `0193b0c6`"),
        (vec!["verify", ID], 1, &no_run),
        (vec!["grants"], 0, "no active grants"),
        (vec!["grants", "--all"], 0, "no grants"),
        (vec!["tools"], 0, "fs_write"),
        (vec!["tools", "--agent", "demo"], 0, "fs_write"),
        (vec!["doctor"], 0, "runs checked: 0"),
        (vec!["purge"], 0, "purged 0 run(s)"),
        (vec!["approve", ID], 1, &no_run),
        (vec!["deny", ID, "--reason", "no"], 1, &no_run),
        (vec!["edit", ID, "--call", "call_1", "--args", "{}"], 1, &no_run),
        (vec!["respond", ID, "--call", "call_1", "--result", "done"], 1, &no_run),
        (vec!["cancel", ID], 1, &no_run),
        (vec!["revoke", "0193b0d2"], 1, "no grant matches `0193b0d2`"),
        (vec!["seal"], 2, "needs [[privacy.keys]]"),
    ];
    let dir = scratch_dir("no-store");
    for (args, code, says) in &cases {
        let outcome = tollgate_in(&dir, args, &[])?;
        assert_eq!(outcome.code, *code, "tollgate {}: {outcome:?}", args.join(" "));
        assert!(
            outcome.stdout.contains(says) || outcome.stderr.contains(says),
            "tollgate {} should say `{says}`: {outcome:?}",
            args.join(" ")
        );
        assert_eq!(listing(&dir)?, Vec::<String>::new(), "tollgate {} left files behind", args.join(" "));
    }

    // The same with the store named by a config file beside it (a path of its own, under a folder that
    // does not exist either), and `seal` with a data key, which would otherwise open the file to seal it.
    std::fs::write(
        dir.join("tollgate.toml"),
        "[store]\nurl = \"sqlite://data/runs.db\"\n\n[[privacy.keys]]\nid = \"k1\"\nkey = \"".to_owned()
            + &"ab".repeat(32)
            + "\"\n",
    )?;
    for (args, code, says) in [(vec!["runs"], 0, "no runs"), (vec!["seal"], 0, "runs checked: 0")] {
        let outcome = tollgate_in(&dir, &args, &[])?;
        assert_eq!(outcome.code, code, "tollgate {}: {outcome:?}", args.join(" "));
        assert!(outcome.stdout.contains(says) || outcome.stderr.contains(says), "{says}: {outcome:?}");
        assert_eq!(listing(&dir)?, ["tollgate.toml"], "tollgate {} left files behind", args.join(" "));
    }
    std::fs::remove_file(dir.join("tollgate.toml"))?;

    // `run` adds a run: it creates the store (and the workspace its tools work in).
    let started = tollgate_in(&dir, &["run", "--detach", "hello"], &[])?;
    assert_eq!(started.code, 3, "{started:?}");
    assert!(dir.join("tollgate.db").is_file(), "{:?}", listing(&dir)?);
    // Once the file exists, the same commands read it.
    let id = started.waiting_id()?;
    let shown = tollgate_in(&dir, &["show", &id], &[])?;
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(shown.stdout.contains("waiting_for_approval"), "{shown:?}");
    Ok(())
}
