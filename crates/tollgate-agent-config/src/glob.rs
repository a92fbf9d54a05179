//! Glob patterns for tool names (`files__*`) and policy argument values (`notes/**`); the syntax is on
//! [`Glob`]. Matching runs one pass over the text per pattern element, so no pattern can blow up.

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
}

/// A compiled glob pattern. Every string is a valid pattern, of a deliberately small language so that a
/// pattern means the same thing to everyone reading the config:
/// - `?` matches one character other than `/`;
/// - `*` matches any run of characters other than `/` (possibly empty);
/// - `**` matches any run of characters, `/` included (possibly empty);
/// - `**/` at the start of the pattern or right after a `/` matches zero or more whole folders, so
///   `**/*.md` matches `a.md` and `x/y/a.md`, and `a/**/b` matches `a/b` and `a/x/y/b`;
/// - every other character, `[`, `]` and `\` included, matches itself: there are no escapes or classes.
///
/// A match covers the whole text: `notes/*` does not match `notes/a/b`, and `notes/**` does not match
/// `notes` itself.
///
/// ```
/// use tollgate_agent_config::Glob;
/// assert!(Glob::new("files__*").is_match("files__read_file"));
/// assert!(Glob::new("notes/**").is_match("notes/2026/today.md"));
/// assert!(!Glob::new("notes/*").is_match("notes/2026/today.md"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Glob {
    pattern: String,
    tokens: Vec<Token>,
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
                    if at_segment_start && chars.get(i) == Some(&'/') {
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
        Glob { pattern: pattern.to_owned(), tokens }
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
        let text: Vec<char> = text.chars().collect();
        let n = text.len();
        // reach[j]: the pattern elements seen so far can match exactly text[..j].
        let mut reach = vec![false; n + 1];
        reach[0] = true;
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
            }
            std::mem::swap(&mut reach, &mut next);
            if !reach.iter().any(|r| *r) {
                return false;
            }
        }
        reach[n]
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
        check("notes/**", &["notes/a", "notes/a/b/c.txt", "notes/"], &["notes", "notesx/a", "other/notes/a"]);
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
