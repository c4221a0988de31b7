//! etcdctl's `simple` format (`printer_simple.go`): key and value on their own lines.

use std::fmt::Write;

use proto::etcdserverpb as pb;
use proto::mvccpb;

pub fn get(resp: &pb::RangeResponse, hex: bool, value_only: bool) -> String {
    let mut out = String::new();
    for kv in &resp.kvs {
        push_kv(&mut out, kv, hex, value_only);
    }
    out
}

pub fn put(resp: &pb::PutResponse, hex: bool, value_only: bool) -> String {
    let mut out = String::from("OK\n");
    if let Some(kv) = &resp.prev_kv {
        push_kv(&mut out, kv, hex, value_only);
    }
    out
}

pub fn del(resp: &pb::DeleteRangeResponse, hex: bool, value_only: bool) -> String {
    let mut out = format!("{}\n", resp.deleted);
    for kv in &resp.prev_kvs {
        push_kv(&mut out, kv, hex, value_only);
    }
    out
}

/// go-humanize's `Bytes`: SI units, one decimal below 10.
pub fn humanize_bytes(size: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if size < 10 {
        return format!("{size} B");
    }
    let size = size as f64;
    let exp = (size.ln() / 1000f64.ln()).floor();
    let unit = UNITS[(exp as usize).min(UNITS.len() - 1)];
    let value = (size / 1000f64.powf(exp) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.0} {unit}")
    }
}

/// etcdctl's `printKV`: Go's `string([]byte)` passes bytes through unchanged; we can only hold
/// UTF-8 in a `String`, so invalid sequences are replaced (use `--hex` for binary data).
fn push_kv(out: &mut String, kv: &mvccpb::KeyValue, hex: bool, value_only: bool) {
    let render = |bytes: &[u8]| if hex { hex_escaped(bytes) } else { String::from_utf8_lossy(bytes).into_owned() };
    if !value_only {
        out.push_str(&render(&kv.key));
        out.push('\n');
    }
    out.push_str(&render(&kv.value));
    out.push('\n');
}

/// etcdctl's `addHexPrefix(hex.EncodeToString(b))`: every byte as `\xNN`, lowercase.
pub fn hex_escaped(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 4);
    for b in bytes {
        let _ = write!(out, "\\x{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str) -> mvccpb::KeyValue {
        mvccpb::KeyValue { key: key.into(), value: value.into(), ..Default::default() }
    }

    #[test]
    fn humanized() {
        let cases = [(0, "0 B"), (9, "9 B"), (999, "999 B"), (1000, "1.0 kB"), (28672, "29 kB"), (1_550_000, "1.6 MB")];
        for (size, want) in cases {
            assert_eq!(humanize_bytes(size), want, "{size}");
        }
    }

    #[test]
    fn formats() {
        let range = pb::RangeResponse { kvs: vec![kv("k1", "v1"), kv("k2", "")], ..Default::default() };
        assert_eq!(get(&range, false, false), "k1\nv1\nk2\n\n");
        assert_eq!(get(&range, false, true), "v1\n\n");
        assert_eq!(get(&range, true, false), "\\x6b\\x31\n\\x76\\x31\n\\x6b\\x32\n\n");
        let put_resp = pb::PutResponse { prev_kv: Some(kv("foo", "bar")), ..Default::default() };
        assert_eq!(put(&put_resp, false, false), "OK\nfoo\nbar\n");
        assert_eq!(put(&pb::PutResponse::default(), false, false), "OK\n");
        let del_resp = pb::DeleteRangeResponse { deleted: 1, prev_kvs: vec![kv("a", "b")], ..Default::default() };
        assert_eq!(del(&del_resp, false, false), "1\na\nb\n");
    }
}
