//! The pieces of Go text handling etcdctl's txn reader is built on, reproduced because their quirks
//! decide what users may type: `argify` (a regexp split plus `%q` unquoting), `strconv.Unquote`,
//! and the `fmt.Sscanf` scanner behind comparisons.

use super::Abort;
use crate::error::{CliError, EXIT_INVALID_INPUT};

/// etcdctl's `argify`: splits an op line into words with the regexp
/// `"(?:[^"\\]|\\.)*"|'[^']*'|[^'"\s]\S*[^'"\s]?`, unquotes double-quoted words with Go's rules,
/// and strips single-quoted ones with its slicing bug: `word[1 : len(words)-1]` (the number of
/// words, not the word's length), so `put 'abcd' v` puts key `a`, and a mismatch panics.
pub fn argify(line: &str) -> Result<Vec<String>, Abort> {
    let words = split_words(line);
    let high = words.len().saturating_sub(1);
    words
        .iter()
        .map(|word| match word.as_bytes().first() {
            Some(b'\'') => slice_like_go(word.as_bytes(), 1, high).map(|b| String::from_utf8_lossy(b).into_owned()),
            Some(b'"') => {
                let unquoted = unquote(word).ok_or_else(|| Abort::Exit(invalid_syntax()))?;
                Ok(String::from_utf8_lossy(&unquoted).into_owned())
            }
            _ => Ok(word.to_string()),
        })
        .collect()
}

fn invalid_syntax() -> CliError {
    CliError::new(EXIT_INVALID_INPUT, "invalid syntax")
}

/// Go's `s[low:high]`, with the runtime's panic texts.
fn slice_like_go(bytes: &[u8], low: usize, high: usize) -> Result<&[u8], Abort> {
    if high > bytes.len() {
        return Err(Abort::Panic(format!(
            "runtime error: slice bounds out of range [:{high}] with length {}",
            bytes.len()
        )));
    }
    if low > high {
        return Err(Abort::Panic(format!("runtime error: slice bounds out of range [{low}:{high}]")));
    }
    Ok(&bytes[low..high])
}

/// The leftmost-first matches of argify's regexp, in order.
fn split_words(line: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut at = 0;
    while let Some(c) = line[at..].chars().next() {
        match word_len(&line[at..]) {
            Some(len) => {
                words.push(&line[at..at + len]);
                at += len;
            }
            None => at += c.len_utf8(),
        }
    }
    words
}

/// The length of the regexp's match starting exactly at the beginning of `rest`, if any.
fn word_len(rest: &str) -> Option<usize> {
    let mut chars = rest.char_indices();
    let (_, first) = chars.next()?;
    match first {
        '"' => {
            let mut escaped = false;
            for (at, c) in chars {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => return Some(at + 1),
                    _ => {}
                }
            }
            None
        }
        '\'' => rest[1..].find('\'').map(|at| at + 2),
        c if is_regexp_space(c) => None,
        _ => Some(rest.find(is_regexp_space).unwrap_or(rest.len())),
    }
}

/// Go's regexp `\s` is ASCII-only (no `\v`, no Unicode spaces).
fn is_regexp_space(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\x0c' | '\r' | ' ')
}

/// `strconv.Unquote` of a double-quoted Go string literal (quotes included). Escapes may produce
/// bytes that are not UTF-8 (`\xff`), hence bytes. `None` is Go's `invalid syntax`.
pub fn unquote(literal: &str) -> Option<Vec<u8>> {
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\n') {
        return None;
    }
    let mut out = Vec::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return None,
            '\\' => unescape(&mut chars, &mut out)?,
            c => push_char(&mut out, c),
        }
    }
    Some(out)
}

/// One escape after a backslash, as `strconv.UnquoteChar` reads it inside double quotes.
fn unescape(chars: &mut std::str::Chars<'_>, out: &mut Vec<u8>) -> Option<()> {
    let simple = |b: u8| Some(vec![b]);
    let bytes = match chars.next()? {
        'a' => simple(0x07),
        'b' => simple(0x08),
        'f' => simple(0x0c),
        'n' => simple(b'\n'),
        'r' => simple(b'\r'),
        't' => simple(b'\t'),
        'v' => simple(0x0b),
        '\\' => simple(b'\\'),
        '"' => simple(b'"'),
        'x' => simple(u8::try_from(digits(chars, 2, 16)?).ok()?),
        'u' => char_bytes(digits(chars, 4, 16)?),
        'U' => char_bytes(digits(chars, 8, 16)?),
        first @ '0'..='7' => {
            let value = (first as u32 - '0' as u32) << 6 | digits(chars, 2, 8)?;
            simple(u8::try_from(value).ok()?)
        }
        _ => None,
    }?;
    out.extend_from_slice(&bytes);
    Some(())
}

/// Exactly `count` digits in `radix`.
fn digits(chars: &mut std::str::Chars<'_>, count: usize, radix: u32) -> Option<u32> {
    (0..count).try_fold(0u32, |value, _| Some(value * radix + chars.next()?.to_digit(radix)?))
}

/// A `\u`/`\U` escape: a valid Unicode scalar value, UTF-8 encoded.
fn char_bytes(value: u32) -> Option<Vec<u8>> {
    char::from_u32(value).map(|c| c.to_string().into_bytes())
}

fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

/// The subset of `fmt.Sscanf` that `parseCompare`'s format `%q) %s %q` exercises. Go's scanner
/// counts as space exactly what `char::is_whitespace` does.
pub struct Scanner {
    chars: Vec<char>,
    at: usize,
}

impl Scanner {
    pub fn new(input: &str) -> Scanner {
        Scanner { chars: input.chars().collect(), at: 0 }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn next_char(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += 1;
        Some(c)
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    /// A literal character of the format.
    pub fn literal(&mut self, want: char) -> Option<()> {
        (self.next_char()? == want).then_some(())
    }

    /// A lone space of the format: at least one space of input, or the end of it.
    pub fn format_space(&mut self) -> Option<()> {
        match self.peek() {
            None => Some(()),
            Some(c) if c.is_whitespace() => {
                self.skip_space();
                Some(())
            }
            Some(_) => None,
        }
    }

    /// `%s`: the next run of non-space characters.
    pub fn word(&mut self) -> Option<String> {
        self.skip_space();
        self.peek()?;
        let start = self.at;
        while self.peek().is_some_and(|c| !c.is_whitespace()) {
            self.at += 1;
        }
        Some(self.chars[start..self.at].iter().collect())
    }

    /// `%q`: a back-quoted string taken as is, or a double-quoted one unquoted by Go's rules.
    pub fn quoted(&mut self) -> Option<Vec<u8>> {
        self.skip_space();
        match self.next_char()? {
            '`' => {
                let mut raw = String::new();
                loop {
                    match self.next_char()? {
                        '`' => return Some(raw.into_bytes()),
                        c => raw.push(c),
                    }
                }
            }
            '"' => {
                let mut literal = String::from('"');
                loop {
                    let c = self.next_char()?;
                    literal.push(c);
                    if c == '\\' {
                        literal.push(self.next_char()?);
                    } else if c == '"' {
                        return unquote(&literal);
                    }
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_argify() {
        let cases: [(&str, &[&str]); 7] = [
            ("put k v", &["put", "k", "v"]),
            ("  put   k\tv  ", &["put", "k", "v"]),
            (r#"put "a b" "c\td""#, &["put", "a b", "c\td"]),
            // Single quotes: Go slices `[1 : len(words)-1]`.
            ("put 'ab' 'cd'", &["put", "a", "c"]),
            ("put 'abcdefg' 'cdefgh' --prev-kv", &["put", "ab", "cd", "--prev-kv"]),
            // An unterminated quote matches nothing; the scan moves on by one character.
            (r#"put "a v"#, &["put", "a", "v"]),
            ("get --prefix=\"x\" k", &["get", "--prefix=\"x\"", "k"]),
        ];
        for (line, want) in cases {
            assert_eq!(argify(line), Ok(want.iter().map(|w| w.to_string()).collect()), "{line}");
        }
    }

    #[test]
    fn argify_failures() {
        assert_eq!(argify(r#"put "a\q" v"#), Err(Abort::Exit(invalid_syntax())));
        assert_eq!(
            argify("put 'a' v x y"),
            Err(Abort::Panic("runtime error: slice bounds out of range [:4] with length 3".into()))
        );
        assert_eq!(argify("'abc'"), Err(Abort::Panic("runtime error: slice bounds out of range [1:0]".into())));
    }

    #[test]
    fn unquotes_like_go() {
        let cases: [(&str, Option<&[u8]>); 11] = [
            (r#""plain""#, Some(b"plain")),
            (r#""a\tb\n\\\"""#, Some(b"a\tb\n\\\"")),
            (r#""\x41\101\u00e9""#, Some("AAé".as_bytes())),
            (r#""\xff""#, Some(b"\xff")),
            (r#""\U0001F600""#, Some("😀".as_bytes())),
            (r#""\'""#, None),
            (r#""\q""#, None),
            (r#""\400""#, None),
            (r#""\ud800""#, None),
            (r#""\x4""#, None),
            ("\"a\nb\"", None),
        ];
        for (literal, want) in cases {
            assert_eq!(unquote(literal).as_deref(), want, "{literal}");
        }
    }

    #[test]
    fn scans_like_sscanf() {
        let mut s = Scanner::new(r#" "k\"1") =  `raw\n` tail"#);
        assert_eq!(s.quoted().as_deref(), Some(&b"k\"1"[..]));
        assert_eq!(s.literal(')'), Some(()));
        assert_eq!(s.format_space(), Some(()));
        assert_eq!(s.word().as_deref(), Some("="));
        assert_eq!(s.format_space(), Some(()));
        assert_eq!(s.quoted().as_deref(), Some(&b"raw\\n"[..]));

        let mut s = Scanner::new(r#"k")"#);
        assert_eq!(s.quoted(), None);
        let mut s = Scanner::new(r#""unterminated"#);
        assert_eq!(s.quoted(), None);
        let mut s = Scanner::new("=\"v\"");
        assert_eq!(s.format_space(), None);
    }
}
