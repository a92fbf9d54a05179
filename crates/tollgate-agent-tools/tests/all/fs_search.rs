//! `fs_search` through the `Tool` port: matching lines with paths and line numbers, bounded results,
//! skipped files, bad patterns, paths that would lead out of the workspace, and symlinks (never followed).

use crate::support::{Fixture, assert_refused, call};
use serde_json::json;
use tollgate_agent_core::{Gate, ToolContext, ToolOutput};
use tollgate_agent_tools::search::{MAX_FILE_BYTES, MAX_LINE_BYTES};

fn lines(out: &ToolOutput) -> Vec<&str> {
    out.content.lines().collect()
}

#[tokio::test]
async fn finds_matching_lines_with_paths_and_line_numbers() {
    let fx = Fixture::new();
    fx.put("README.md", "# demo\nfn is not code here\n");
    fx.put("src/lib.rs", "pub fn alpha() {}\n\nfn beta() -> u8 {\n    7\n}\n");
    fx.put("src/deep/mod.rs", "// nothing\nasync fn gamma() {}\n");
    let search = fx.tool("fs_search");
    assert_eq!(search.gate(&json!({"pattern": "x"}), &ToolContext::listing()), Gate::Allow);

    let out = call(&search, json!({"pattern": r"fn \w+\("})).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        lines(&out),
        [
            "src/deep/mod.rs:2: async fn gamma() {}",
            "src/lib.rs:1: pub fn alpha() {}",
            "src/lib.rs:3: fn beta() -> u8 {"
        ]
    );
    // Narrowed to a folder, then to a single file.
    let out = call(&search, json!({"pattern": r"fn \w+\(", "path": "src/deep"})).await;
    assert_eq!(out, ToolOutput::text("src/deep/mod.rs:2: async fn gamma() {}"));
    let out = call(&search, json!({"pattern": "^fn", "path": "./src/lib.rs"})).await;
    assert_eq!(out, ToolOutput::text("src/lib.rs:3: fn beta() -> u8 {"));
    let out = call(&search, json!({"pattern": "zebra"})).await;
    assert_eq!(out, ToolOutput::text("no matches for `zebra` in `.`"));
    let out = call(&search, json!({"pattern": "x", "path": "missing"})).await;
    assert!(out.is_error && out.content.contains("cannot search `missing`"), "{out:?}");
}

#[tokio::test]
async fn skips_binary_non_utf8_and_oversized_files() {
    let fx = Fixture::new();
    fx.put("text.txt", "needle in text\n");
    fx.put("nul.bin", b"needle\0in binary\n");
    fx.put("latin1.txt", b"needle caf\xe9\n");
    let big_len = usize::try_from(MAX_FILE_BYTES).unwrap_or(usize::MAX) + 1;
    let mut big = b"needle at the top\n".to_vec();
    big.resize(big_len, b'x');
    fx.put("big.log", big);

    let out = call(&fx.tool("fs_search"), json!({"pattern": "needle"})).await;
    assert_eq!(
        out,
        ToolOutput::text(format!(
            "text.txt:1: needle in text\n[skipped 2 binary or non-UTF-8 file(s), 1 file(s) over {MAX_FILE_BYTES} bytes]"
        ))
    );
}

#[tokio::test]
async fn results_are_bounded_with_a_marker() {
    let fx = Fixture::new();
    let many: String = (1..=1200).map(|i| format!("hit {i}\n")).collect();
    fx.put("many.txt", &many);
    let search = fx.tool("fs_search");

    let out = call(&search, json!({"pattern": "hit"})).await;
    let got = lines(&out);
    assert_eq!(got.len(), 101, "100 results by default, then the marker");
    assert_eq!(got[99], "many.txt:100: hit 100");
    assert!(got[100].starts_with("[more matches not shown: stopped at 100 results"), "{}", got[100]);

    let out = call(&search, json!({"pattern": "hit", "max_results": 2})).await;
    assert_eq!(lines(&out)[..2], ["many.txt:1: hit 1", "many.txt:2: hit 2"]);
    assert!(out.content.contains("[more matches not shown: stopped at 2 results"), "{out:?}");

    // Above the hard cap, the cap applies.
    let out = call(&search, json!({"pattern": "hit", "max_results": 5000})).await;
    assert_eq!(lines(&out).len(), 1001);
    assert!(out.content.contains("stopped at 1000 results"), "{out:?}");

    // Exactly as many matches as asked for: no marker.
    let out = call(&search, json!({"pattern": "^hit 1[0-9]$", "max_results": 10})).await;
    assert_eq!(lines(&out).len(), 10);
    assert!(!out.content.contains("more matches"), "{out:?}");

    // A very long matching line is cut.
    fx.put("wide.txt", format!("wide {}\n", "é".repeat(2000)));
    let out = call(&search, json!({"pattern": "wide", "path": "wide.txt"})).await;
    assert!(out.content.ends_with('…'), "{out:?}");
    assert!(out.content.len() <= "wide.txt:1: ".len() + MAX_LINE_BYTES + '…'.len_utf8(), "{}", out.content.len());
}

#[tokio::test]
async fn bad_arguments_are_refused_naming_the_problem() {
    let fx = Fixture::new();
    let search = fx.tool("fs_search");
    let registry = fx.registry();
    let check = |args| registry.get("fs_search").map(|t| t.check_arguments(&args).is_ok());
    assert_eq!(check(json!({"pattern": "a", "path": "src", "max_results": 5})), Some(true));
    assert_eq!(check(json!({})), Some(false), "pattern is required");
    assert_eq!(check(json!({"pattern": 3})), Some(false));
    assert_eq!(check(json!({"pattern": "a", "max_results": 0})), Some(false));
    assert_eq!(check(json!({"pattern": "a", "glob": "*.rs"})), Some(false));

    // An invalid regex: the message quotes the pattern and says what is wrong with it.
    let refused = search.validate(&json!({"pattern": "fn (unclosed"})).await;
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("invalid regex `fn (unclosed`") && e.contains("unclosed group"))
    );
    let out = call(&search, json!({"pattern": "fn (unclosed"})).await;
    assert!(out.is_error && out.content.contains("unclosed group"), "{out:?}");

    for args in [json!({}), json!({"pattern": "a", "max_results": 0}), json!({"pattern": "a", "glob": "*.rs"})] {
        assert!(search.validate(&args).await.is_err(), "{args}");
        assert!(call(&search, args).await.is_error);
    }
}

#[tokio::test]
async fn paths_that_escape_are_refused() {
    let fx = Fixture::new();
    fx.plant_link("exit", &fx.outside);
    fx.plant_link("secret-link.txt", &fx.outside.join("secret.txt"));
    let search = fx.tool("fs_search");
    for path in ["..", "../outside", "/etc", "sub/../../outside"] {
        assert_refused(&search, json!({"pattern": "secret", "path": path}), "escapes the workspace").await;
    }
    for path in ["exit", "exit/secret.txt", "secret-link.txt"] {
        assert_refused(&search, json!({"pattern": "secret", "path": path}), "never follow a symlink").await;
    }
}

#[tokio::test]
async fn the_walk_follows_no_symlink_and_does_not_loop() {
    let fx = Fixture::new();
    fx.put("notes/plan.txt", "the secret plan\n");
    fx.plant_link("exit", &fx.outside);
    fx.plant_link("secret-link.txt", &fx.outside.join("secret.txt"));
    fx.plant_link("dangling", &fx.outside.join("nowhere"));
    // Links that stay inside are not followed either (one back to the root would loop).
    fx.plant_link("alias.txt", &fx.root.join("notes/plan.txt"));
    std::os::unix::fs::symlink(&fx.root, fx.root.join("notes/up")).unwrap_or_else(|e| panic!("{e}"));

    let out = call(&fx.tool("fs_search"), json!({"pattern": "secret"})).await;
    assert_eq!(out, ToolOutput::text("notes/plan.txt:1: the secret plan\n[skipped 5 symlink(s) (never followed)]"));
    assert!(!out.content.contains("top secret"));
}
