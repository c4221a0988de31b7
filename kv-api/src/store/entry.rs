//! How the key bucket stores one revision: a kind byte (put or tombstone), then the protobuf
//! encoding of the `KeyValue` as a Range answers it.

use prost::bytes::Buf;
use prost::encoding::{decode_key, decode_varint, WireType};
use prost::Message;
use proto::mvccpb::KeyValue;

use crate::error::{Error, Result};

pub(crate) const ENTRY_PUT: u8 = 0;
pub(crate) const ENTRY_TOMBSTONE: u8 = 1;

/// Encodes a revision's entry for the key bucket: a kind byte, then the `KeyValue`.
pub(crate) fn encode_entry(tombstone: bool, kv: &KeyValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + kv.encoded_len());
    out.push(if tombstone { ENTRY_TOMBSTONE } else { ENTRY_PUT });
    kv.encode(&mut out).expect("a Vec grows as needed");
    out
}

pub(crate) fn decode_entry(bytes: &[u8]) -> Result<(bool, KeyValue)> {
    let (kind, rest) = bytes.split_first().ok_or_else(|| Error::Internal("empty key bucket entry".into()))?;
    let kv = KeyValue::decode(rest).map_err(|e| Error::Internal(format!("corrupt key bucket entry: {e}")))?;
    Ok((*kind == ENTRY_TOMBSTONE, kv))
}

/// What rebuilding the key index needs of an entry, read in place: no copy of the key or the value.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct EntryHead<'a> {
    pub key: &'a [u8],
    pub create_revision: i64,
    pub version: i64,
    pub lease: i64,
}

/// [`decode_entry`] for a member's start, which reads every stored revision: the fields of
/// [`EntryHead`], skipping the value. Fields follow `mvccpb.KeyValue`'s numbering.
pub(crate) fn decode_entry_head(bytes: &[u8]) -> Result<(bool, EntryHead<'_>)> {
    let corrupt = |what: &str| Error::Internal(format!("corrupt key bucket entry: {what}"));
    let (kind, mut rest) = bytes.split_first().ok_or_else(|| Error::Internal("empty key bucket entry".into()))?;
    let mut head = EntryHead::default();
    while rest.has_remaining() {
        let (field, wire_type) = decode_key(&mut rest).map_err(|e| corrupt(&e.to_string()))?;
        match wire_type {
            WireType::Varint => {
                let value = decode_varint(&mut rest).map_err(|e| corrupt(&e.to_string()))? as i64;
                match field {
                    2 => head.create_revision = value,
                    4 => head.version = value,
                    6 => head.lease = value,
                    _ => {}
                }
            }
            WireType::LengthDelimited => {
                let len = decode_varint(&mut rest).map_err(|e| corrupt(&e.to_string()))?;
                let len =
                    usize::try_from(len).ok().filter(|len| *len <= rest.len()).ok_or_else(|| corrupt("cut short"))?;
                let (body, after) = rest.split_at(len);
                if field == 1 {
                    head.key = body;
                }
                rest = after;
            }
            other => return Err(corrupt(&format!("field {field} has wire type {other:?}"))),
        }
    }
    Ok((*kind == ENTRY_TOMBSTONE, head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_read_what_a_full_decode_reads() {
        let kvs = [
            KeyValue { key: b"k".to_vec(), ..Default::default() },
            KeyValue {
                key: b"some/key".to_vec(),
                create_revision: 300,
                mod_revision: 9_000_000_000,
                version: 129,
                value: vec![7; 5000],
                lease: 0x7fff_0000_1234,
            },
            KeyValue {
                key: vec![0xff; 300],
                create_revision: 1,
                mod_revision: 1,
                version: 1,
                value: Vec::new(),
                lease: -1,
            },
        ];
        for tombstone in [false, true] {
            for kv in &kvs {
                let entry = encode_entry(tombstone, kv);
                let (dead, head) = decode_entry_head(&entry).expect("decodes");
                assert_eq!(dead, tombstone);
                let expected = EntryHead {
                    key: &kv.key,
                    create_revision: kv.create_revision,
                    version: kv.version,
                    lease: kv.lease,
                };
                assert_eq!(head, expected);
                assert_eq!(decode_entry(&entry).expect("decodes"), (tombstone, kv.clone()));
            }
        }
    }

    #[test]
    fn damaged_entries_are_errors_not_panics() {
        let entry = encode_entry(false, &KeyValue { key: b"key".to_vec(), value: vec![1; 100], ..Default::default() });
        assert!(decode_entry_head(&[]).is_err());
        for cut in 2..entry.len() {
            // A cut inside the key or the value leaves a length past the end.
            if cut < 1 + 2 + 3 || cut > 1 + 2 + 3 + 2 {
                assert!(decode_entry_head(&entry[..cut]).is_err(), "cut at {cut}");
            }
        }
        assert!(decode_entry_head(&[ENTRY_PUT, 0x0d, 1, 2, 3, 4]).is_err(), "a fixed32 field");
    }
}
