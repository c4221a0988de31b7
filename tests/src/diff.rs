//! A small line diff for test failure messages (outputs are a few hundred lines at most).

/// Lines only in `expected` are prefixed `-`, lines only in `actual` `+`, common lines ` `.
/// Returns `None` when the texts are equal.
pub fn line_diff(expected: &str, actual: &str) -> Option<String> {
    if expected == actual {
        return None;
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    // lcs[i][j] = length of the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut out = String::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!(" {}\n", a[i]));
            (i, j) = (i + 1, j + 1);
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("+{}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("-{}\n", a[i]));
            i += 1;
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
            ("a\n", "a\nb\n", Some(" a\n+b\n")),
            ("a\nb\n", "b\n", Some("-a\n b\n")),
            ("a", "a\n", Some(" a\n(the texts differ only in their final newline)\n")),
        ];
        for (expected, actual, want) in cases {
            assert_eq!(
                line_diff(expected, actual).as_deref(),
                want,
                "{expected:?} vs {actual:?}"
            );
        }
    }
}
