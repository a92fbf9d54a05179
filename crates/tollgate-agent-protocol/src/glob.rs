//! Glob patterns for tool names (`files__*`), policy argument values (`notes/**`) and grant `match`
//! values; the syntax is on [`Glob`]. Matching runs one pass over the text per pattern element, so no pattern can blow up.

use std::fmt;

/// One element of a compiled pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Token {
    /// A character that matches itself.
    Literal(char),
    /// `?`
    AnyChar,
    /// `*`
    AnyInSegment,
    /// `**`
    AnyPath,
    /// `**/` at a segment start: empty, or any text ending in `/`.
    AnyFolders,
    /// `/**` ending the pattern: empty (the folder itself), or `/` and any text.
    SelfOrBelow,
}

/// A compiled glob pattern. Every string is a valid pattern, of a deliberately small language so that a
/// pattern means the same thing to everyone reading the config:
/// - `?` matches one character other than `/`;
/// - `*` matches any run of characters other than `/` (possibly empty);
/// - `**` matches any run of characters, `/` included (possibly empty);
/// - `**/` at the start of the pattern or right after a `/` matches zero or more whole folders, so
///   `**/*.md` matches `a.md` and `x/y/a.md`, and `a/**/b` matches `a/b` and `a/x/y/b`;
/// - `/**` ending the pattern matches the folder itself too: `notes/**` matches `notes`, `notes/` and
///   everything beneath, so a rule on a folder's content also covers the folder;
/// - every other character, `[`, `]` and `\` included, matches itself: there are no escapes or classes.
///
/// A match covers the whole text: `notes/*` does not match `notes/a/b` (nor `notes`).
///
/// ```
/// use tollgate_agent_protocol::Glob;
/// assert!(Glob::new("files__*").is_match("files__read_file"));
/// assert!(Glob::new("notes/**").is_match("notes/2026/today.md"));
/// assert!(Glob::new("notes/**").is_match("notes"));
/// assert!(!Glob::new("notes/*").is_match("notes/2026/today.md"));
/// assert!(Glob::new("keep/x/**").matches_within("keep"), "keep holds keep/x");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Glob {
    pattern: String,
    tokens: Vec<Token>,
    /// The literal text every match starts with (the tokens before the first wildcard): a text
    /// without it is refused before the matcher runs, so a list of patterns that mostly do not match
    /// (a gate checking many grants) costs a comparison each.
    prefix: String,
}

impl Glob {
    /// Compiles `pattern`.
    pub fn new(pattern: &str) -> Glob {
        let chars: Vec<char> = pattern.chars().collect();
        let mut tokens = Vec::with_capacity(chars.len());
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '*' => {
                    let start = i;
                    while i < chars.len() && chars[i] == '*' {
                        i += 1;
                    }
                    if i - start == 1 {
                        tokens.push(Token::AnyInSegment);
                        continue;
                    }
                    let at_segment_start = start == 0 || chars[start - 1] == '/';
                    if i == chars.len() && tokens.last() == Some(&Token::Literal('/')) {
                        // The `/` before was pushed as a literal: it is part of this token.
                        tokens.pop();
                        tokens.push(Token::SelfOrBelow);
                    } else if at_segment_start && chars.get(i) == Some(&'/') {
                        tokens.push(Token::AnyFolders);
                        i += 1;
                    } else {
                        tokens.push(Token::AnyPath);
                    }
                    continue;
                }
                '?' => tokens.push(Token::AnyChar),
                c => tokens.push(Token::Literal(c)),
            }
            i += 1;
        }
        let prefix = tokens
            .iter()
            .map_while(|token| match token {
                Token::Literal(c) => Some(*c),
                _ => None,
            })
            .collect();
        Glob { pattern: pattern.to_owned(), tokens, prefix }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether the pattern has no wildcard, i.e. matches exactly one text: itself. A tool list can use this
    /// to tell a name that must exist from a pattern that may match nothing.
    pub fn is_literal(&self) -> bool {
        self.tokens.iter().all(|t| matches!(t, Token::Literal(_)))
    }

    /// Whether the pattern matches the whole of `text`.
    pub fn is_match(&self, text: &str) -> bool {
        if !text.starts_with(&self.prefix) {
            return false;
        }
        if self.prefix.len() == self.pattern.len() {
            // No wildcard at all: the pattern is its one match.
            return text.len() == self.prefix.len();
        }
        let text: Vec<char> = text.chars().collect();
        let mut matched = false;
        self.run(&text, |reach| matched = reach);
        matched
    }

    /// Whether the pattern matches the path `folder` or any path beneath it (`folder/…`): what a rule
    /// must ask of a call that acts on a whole folder, such as a recursive delete. `.` and the empty
    /// path stand for the root, beneath which every path lies, so any pattern matches within them.
    pub fn matches_within(&self, folder: &str) -> bool {
        if folder.is_empty() || folder == "." || self.is_match(folder) {
            return true;
        }
        // Some path beneath matches when the pattern's elements up to some point match `folder/`
        // exactly: every rest of a pattern matches some text, which completes the path.
        let text: Vec<char> = folder.chars().chain(['/']).collect();
        let mut reached = false;
        self.run(&text, |reach| reached |= reach);
        reached
    }

    /// Runs the pattern's elements over `text` one after the other, telling `whole` after each (and
    /// before the first) whether the elements so far match all of `text`; stops early once they can
    /// match no prefix of it.
    fn run(&self, text: &[char], mut whole: impl FnMut(bool)) {
        let n = text.len();
        // reach[j]: the pattern elements seen so far can match exactly text[..j].
        let mut reach = vec![false; n + 1];
        reach[0] = true;
        whole(n == 0);
        let mut next = vec![false; n + 1];
        for token in &self.tokens {
            next.iter_mut().for_each(|r| *r = false);
            match token {
                Token::Literal(c) => {
                    for j in 0..n {
                        next[j + 1] = reach[j] && text[j] == *c;
                    }
                }
                Token::AnyChar => {
                    for j in 0..n {
                        next[j + 1] = reach[j] && text[j] != '/';
                    }
                }
                Token::AnyInSegment => {
                    let mut open = false;
                    for j in 0..=n {
                        open |= reach[j];
                        next[j] = open;
                        if j < n && text[j] == '/' {
                            open = false;
                        }
                    }
                }
                Token::AnyPath => {
                    let mut open = false;
                    for j in 0..=n {
                        open |= reach[j];
                        next[j] = open;
                    }
                }
                Token::AnyFolders => {
                    let mut open = false;
                    for j in 0..=n {
                        next[j] = reach[j] || (open && j > 0 && text[j - 1] == '/');
                        open |= reach[j];
                    }
                }
                Token::SelfOrBelow => {
                    let mut below = false;
                    for j in 0..=n {
                        next[j] = reach[j] || below;
                        below |= j < n && reach[j] && text[j] == '/';
                    }
                }
            }
            std::mem::swap(&mut reach, &mut next);
            whole(reach[n]);
            if !reach.iter().any(|r| *r) {
                // Every later element starts where this one ended: none can match any more.
                return;
            }
        }
    }
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Glob").field(&self.pattern).finish()
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

impl From<&str> for Glob {
    fn from(pattern: &str) -> Self {
        Glob::new(pattern)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pattern: &str, yes: &[&str], no: &[&str]) {
        let glob = Glob::new(pattern);
        for text in yes {
            assert!(glob.is_match(text), "{pattern:?} should match {text:?}");
        }
        for text in no {
            assert!(!glob.is_match(text), "{pattern:?} should not match {text:?}");
        }
    }

    #[test]
    fn literal_matches_only_itself() {
        check("fs_write", &["fs_write"], &["fs_writes", "fs_writ", "", "FS_WRITE"]);
        assert!(Glob::new("fs_write").is_literal());
        assert!(!Glob::new("fs_*").is_literal());
        assert!(!Glob::new("fs_?").is_literal());
    }

    #[test]
    fn star_matches_a_tool_name_family() {
        check("files__*", &["files__", "files__read_file", "files__a-b"], &["files_read", "other__read", "xfiles__a"]);
        check("fs_*", &["fs_read", "fs_write"], &["shell", "fs"]);
        check("*", &["", "anything", "fs_write"], &["a/b"]);
        check("*_write", &["fs_write", "_write"], &["fs_writer"]);
    }

    #[test]
    fn star_stays_within_one_folder() {
        check("notes/*", &["notes/a.md", "notes/"], &["notes/2026/a.md", "notes", "other/a.md"]);
        check("*.md", &["a.md", ".md"], &["x/a.md", "a.txt"]);
    }

    #[test]
    fn double_star_crosses_folders() {
        check("notes/**", &["notes", "notes/a", "notes/a/b/c.txt", "notes/"], &["note", "notesx/a", "other/notes/a"]);
        check("/**", &["", "/", "/a/b"], &["a"]);
        check("**", &["", "a", "a/b/c"], &[]);
        check("a**b", &["ab", "axb", "a/x/b"], &["a/x/c"]);
    }

    #[test]
    fn double_star_slash_matches_zero_or_more_folders() {
        check("**/*.md", &["a.md", "x/a.md", "x/y/a.md"], &["a.txt", "x/a.txt"]);
        check("a/**/b", &["a/b", "a/x/b", "a/x/y/b"], &["ab", "a/xb", "b", "a/x/y/c"]);
        check("src/**/mod.rs", &["src/mod.rs", "src/a/mod.rs"], &["src/amod.rs"]);
    }

    #[test]
    fn question_mark_is_one_character_but_not_a_slash() {
        check("fs_???", &["fs_abc"], &["fs_ab", "fs_abcd", "fs_a/c"]);
        check("é?", &["éa", "éé"], &["é", "éab"]);
    }

    #[test]
    fn other_characters_are_literal() {
        check("[ab]", &["[ab]"], &["a", "b"]);
        check(r"a\*", &[r"a\", r"a\x"], &["a*x", "a"]);
    }

    #[test]
    fn a_folder_matches_within_when_it_or_a_path_beneath_it_matches() {
        let within = |pattern: &str, folder: &str| Glob::new(pattern).matches_within(folder);
        for (pattern, folder) in [
            ("keep/**", "keep"),
            ("keep/**", "keep/x"),
            ("keep/**", "."),
            ("keep/x", "keep"),
            ("keep/x/**", "keep"),
            ("**/*.rs", "src"),
            ("*.md", ""),
            ("a/*/c", "a"),
            ("ke**", "keep"),
            ("src/**/mod.rs", "src/a"),
        ] {
            assert!(within(pattern, folder), "{pattern:?} should match within {folder:?}");
        }
        for (pattern, folder) in [
            ("keep/**", "kee"),
            ("keep/**", "other"),
            ("notes/*.md", "notes/sub"),
            ("*", "keep/x"),
            ("keep/x", "keep/y"),
        ] {
            assert!(!within(pattern, folder), "{pattern:?} should not match within {folder:?}");
        }
    }

    #[test]
    fn many_stars_do_not_explode() {
        let glob = Glob::new("*a*a*a*a*a*a*a*a*b");
        assert!(!glob.is_match(&"a".repeat(5_000)));
    }

    #[test]
    fn shows_its_pattern() {
        let glob = Glob::new("notes/**");
        assert_eq!(glob.to_string(), "notes/**");
        assert_eq!(glob.as_str(), "notes/**");
        assert_eq!(format!("{glob:?}"), r#"Glob("notes/**")"#);
    }
}
