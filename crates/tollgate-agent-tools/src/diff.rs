//! A small line diff for previews: what an approver reads before a file is overwritten.
//!
//! Common leading and trailing lines are trimmed first; the rest is compared with a longest-common-
//! subsequence table, which is quadratic, so a change whose middle part is too large for it is summarised
//! as "replace N bytes with M bytes" instead. The output is a unified diff with three lines of context.

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// The largest LCS table (old lines × new lines of the changed middle) computed for a preview.
const MAX_CELLS: usize = 4_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Keep,
    Remove,
    Add,
}

/// A unified diff from `old` to `new` for the file `path`, or `None` when the change is too large to
/// diff line by line (the caller summarises it).
pub(crate) fn unified_diff(path: &str, old: &str, new: &str) -> Option<String> {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let ops = line_ops(&a, &b)?;
    let mut out = format!("--- a/{path}\n+++ b/{path}\n");
    for hunk in hunks(&ops) {
        write_hunk(&mut out, &ops[hunk.0..hunk.1], &a, &b, &ops[..hunk.0]);
    }
    Some(out)
}

/// The edit script turning `a` into `b`, one op per line.
fn line_ops(a: &[&str], b: &[&str]) -> Option<Vec<Op>> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (mid_a, mid_b) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let (n, m) = (mid_a.len(), mid_b.len());
    if n.saturating_mul(m) > MAX_CELLS {
        return None;
    }
    // lcs[i][j]: length of the LCS of mid_a[i..] and mid_b[j..], flattened.
    let width = m + 1;
    let mut lcs = vec![0u32; (n + 1) * width];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i * width + j] = if mid_a[i] == mid_b[j] {
                lcs[(i + 1) * width + j + 1] + 1
            } else {
                lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
            };
        }
    }
    let mut ops = vec![Op::Keep; prefix];
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && mid_a[i] == mid_b[j] {
            ops.push(Op::Keep);
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i * width + j + 1] >= lcs[(i + 1) * width + j]) {
            ops.push(Op::Add);
            j += 1;
        } else {
            ops.push(Op::Remove);
            i += 1;
        }
    }
    ops.extend(std::iter::repeat_n(Op::Keep, suffix));
    // Within each changed block, show removals before additions, as unified diffs conventionally do.
    let mut k = 0;
    while k < ops.len() {
        if ops[k] == Op::Keep {
            k += 1;
            continue;
        }
        let end = ops[k..].iter().position(|o| *o == Op::Keep).map_or(ops.len(), |p| k + p);
        ops[k..end].sort_by_key(|o| *o != Op::Remove);
        k = end;
    }
    Some(ops)
}

/// Ranges of ops, each a change with up to [`CONTEXT`] kept lines around it; nearby changes merge.
fn hunks(ops: &[Op]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (k, op) in ops.iter().enumerate() {
        if *op == Op::Keep {
            continue;
        }
        let start = k.saturating_sub(CONTEXT);
        let end = (k + 1 + CONTEXT).min(ops.len());
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => out.push((start, end)),
        }
    }
    out
}

fn write_hunk(out: &mut String, ops: &[Op], a: &[&str], b: &[&str], before: &[Op]) {
    let old_start = before.iter().filter(|o| **o != Op::Add).count();
    let new_start = before.iter().filter(|o| **o != Op::Remove).count();
    let old_len = ops.iter().filter(|o| **o != Op::Add).count();
    let new_len = ops.iter().filter(|o| **o != Op::Remove).count();
    out.push_str(&format!("@@ -{} +{} @@\n", range(old_start, old_len), range(new_start, new_len)));
    let (mut i, mut j) = (old_start, new_start);
    for op in ops {
        let (sign, line) = match op {
            Op::Keep => {
                i += 1;
                j += 1;
                (' ', a[i - 1])
            }
            Op::Remove => {
                i += 1;
                ('-', a[i - 1])
            }
            Op::Add => {
                j += 1;
                ('+', b[j - 1])
            }
        };
        out.push(sign);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

/// A hunk range in unified-diff notation: 1-based start, length omitted when 1, start 0 when empty.
fn range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_changed_line_with_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\n";
        let diff = unified_diff("x.txt", old, new).unwrap_or_default();
        assert_eq!(diff, "--- a/x.txt\n+++ b/x.txt\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n");
    }

    #[test]
    fn far_apart_changes_make_two_hunks() {
        let old: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let new = old.replace("2\n", "two\n").replace("19\n", "nineteen\n");
        let diff = unified_diff("n", &old, &new).unwrap_or_default();
        assert_eq!(diff.matches("@@ -").count(), 2, "{diff}");
        assert!(diff.contains("@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n"), "{diff}");
        assert!(diff.contains("-19\n+nineteen\n 20\n"), "{diff}");
    }

    #[test]
    fn additions_to_an_empty_file_and_missing_newline() {
        assert_eq!(
            unified_diff("e", "", "hi").unwrap_or_default(),
            "--- a/e\n+++ b/e\n@@ -0,0 +1 @@\n+hi\n\\ No newline at end of file\n"
        );
        assert_eq!(unified_diff("e", "old\n", "").unwrap_or_default(), "--- a/e\n+++ b/e\n@@ -1 +0,0 @@\n-old\n");
    }

    #[test]
    fn removals_come_before_additions() {
        let diff = unified_diff("f", "a\nb\nc\n", "x\ny\nc\n").unwrap_or_default();
        assert_eq!(diff, "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n-a\n-b\n+x\n+y\n c\n");
    }

    #[test]
    fn huge_changes_are_not_diffed() {
        let old: String = (0..3000).map(|i| format!("old {i}\n")).collect();
        let new: String = (0..3000).map(|i| format!("new {i}\n")).collect();
        assert_eq!(unified_diff("big", &old, &new), None);
        let same_prefix = format!("{old}tail\n");
        assert!(unified_diff("big", &old, &same_prefix).is_some(), "a trimmed middle is small");
    }
}
