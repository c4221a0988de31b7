//! Key prefixes as clientv3 turns them into ranges.

/// clientv3's `getPrefix`: the smallest key greater than every key starting with `key`; `\0`
/// ("to the end of the keyspace") when no such key exists.
pub fn prefix_end(key: &[u8]) -> Vec<u8> {
    let mut end = key.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        let cases: [(&[u8], &[u8]); 4] = [(b"abc", b"abd"), (b"a\xff", b"b"), (b"\xff\xff", b"\0"), (b"", b"\0")];
        for (key, want) in cases {
            assert_eq!(prefix_end(key), want, "{key:?}");
        }
    }
}
