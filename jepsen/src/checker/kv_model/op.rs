//! The mixed (and watch) workload's history payload: Put, single-key DeleteRange, Range and Txn
//! as `history.jsonl` holds them (the Jepsen `f` and `value`), with the puts and deletes each asks
//! for.

use serde::{Deserialize, Serialize};

/// A key as a Range returns it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Kv {
    pub key: String,
    pub value: String,
    pub mod_revision: i64,
    pub create_revision: i64,
    pub version: i64,
}

/// An op of the mixed (and watch) workload: the history's `f` and `value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", content = "value", rename_all = "kebab-case")]
pub enum KvOp {
    Put(Put),
    Delete(Delete),
    Txn(Txn),
    Range(Range),
}

/// `Put key=value`; the header revision is the write's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Put {
    pub key: String,
    pub value: String,
}

/// `DeleteRange` of one key; `deleted` is the response's count (completions only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delete {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<i64>,
}

/// `Range` of one key (empty `range_end`) or of `[key, range_end)`; `kvs` on completion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub range_end: String,
    #[serde(default)]
    pub serializable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvs: Option<Vec<Kv>>,
}

/// What a compare expects of a key (always with `EQUAL`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// The key's `mod_revision`; 0 means the key does not exist.
    ModRevision(i64),
    /// The key's value; etcd fails a value compare on a missing key.
    Value(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    pub key: String,
    pub expect: Expect,
}

/// One write of a txn's success branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxnWrite {
    Put(Put),
    Delete(Delete),
}

/// `Txn`: if every compare holds, the `success` writes (with each delete's count on completion);
/// otherwise one single-key Range per `failure` key, whose results land in `reads`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    pub compare: Vec<Compare>,
    pub success: Vec<TxnWrite>,
    #[serde(default)]
    pub failure: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<bool>,
    /// The failure branch's reads, one per `failure` key (`None`: the key did not exist).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<Option<Kv>>,
}

impl KvOp {
    /// The puts this op asks for (whatever branch a txn takes).
    pub(super) fn puts(&self) -> Vec<&Put> {
        match self {
            KvOp::Put(put) => vec![put],
            KvOp::Txn(txn) => txn
                .success
                .iter()
                .filter_map(|w| match w {
                    TxnWrite::Put(put) => Some(put),
                    TxnWrite::Delete(_) => None,
                })
                .collect(),
            KvOp::Delete(_) | KvOp::Range(_) => Vec::new(),
        }
    }

    /// The keys this op may delete.
    pub(super) fn deletes(&self) -> Vec<&str> {
        match self {
            KvOp::Delete(delete) => vec![delete.key.as_str()],
            KvOp::Txn(txn) => txn
                .success
                .iter()
                .filter_map(|w| match w {
                    TxnWrite::Delete(delete) => Some(delete.key.as_str()),
                    TxnWrite::Put(_) => None,
                })
                .collect(),
            KvOp::Put(_) | KvOp::Range(_) => Vec::new(),
        }
    }

    pub(super) fn is_write(&self) -> bool {
        !matches!(self, KvOp::Range(_))
    }
}

/// Whether `key` lies in `[start, range_end)`, or equals `start` when `range_end` is empty.
pub fn in_range(start: &str, range_end: &str, key: &str) -> bool {
    if range_end.is_empty() {
        key == start
    } else {
        key >= start && key < range_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::kv_model::tests::delete;
    use crate::history::Op;

    #[test]
    fn ops_keep_their_jsonl_shape() {
        let op = Op::invoke(1, delete("k", None), 3);
        let text = serde_json::to_string(&op).expect("encode");
        assert_eq!(text, r#"{"process":1,"type":"invoke","f":"delete","value":{"key":"k"},"time_ns":3}"#);
        let back: Op<KvOp> = serde_json::from_str(&text).expect("decode");
        assert_eq!(back, op);
    }
}
