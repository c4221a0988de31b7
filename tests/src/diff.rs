//! A small line diff for test failure messages (outputs are a few hundred lines at most).

/// Common lines shown around each change.
const CONTEXT: usize = 3;

/// Lines only in `expected` are prefixed `-`, lines only in `actual` `+`, common lines ` `.
/// Common lines further than [`CONTEXT`] from a change become `...`. Returns `None` when the texts
/// are equal.
pub fn line_diff(expected: &str, actual: &str) -> Option<String> {
    if expected == actual {
        return None;
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    // lcs[i][j] = length of the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    // The edit script: (marker, line).
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            (i, j) = (i + 1, j + 1);
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            ops.push(('+', b[j]));
            j += 1;
        } else {
            ops.push(('-', a[i]));
            i += 1;
        }
    }
    // Keep CONTEXT common lines around each change; elide the rest.
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let near = |k: usize| changed.iter().any(|&c| c.abs_diff(k) <= CONTEXT);
    let mut out = String::new();
    let mut elided = false;
    for (k, (marker, line)) in ops.iter().enumerate() {
        if changed.is_empty() {
            break;
        } else if near(k) {
            out.push_str(&format!("{marker}{line}\n"));
            elided = false;
        } else if !elided {
            out.push_str("...\n");
            elided = true;
        }
    }
    if expected.lines().eq(actual.lines()) {
        out.push_str("(the texts differ only in their final newline)\n");
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_lines() {
        let cases = [
            ("a\nb\n", "a\nb\n", None),
            ("a\nb\nc\n", "a\nx\nc\n", Some(" a\n+x\n-b\n c\n")),
            ("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\n5\n6\n7\n8\nx\n", Some("...\n 6\n 7\n 8\n+x\n-9\n")),
            ("a\n", "a\nb\n", Some(" a\n+b\n")),
            ("a\nb\n", "b\n", Some("-a\n b\n")),
            ("a", "a\n", Some("(the texts differ only in their final newline)\n")),
        ];
        for (expected, actual, want) in cases {
            assert_eq!(line_diff(expected, actual).as_deref(), want, "{expected:?} vs {actual:?}");
        }
    }
}
