//! The lease workload's history payload (`f` and `value`): grants, puts attached to leases,
//! revokes, keep-alives and reads, in the Jepsen shape `history.jsonl` holds, and which completion
//! answers which invocation.

use serde::{Deserialize, Serialize};

/// The lease workload's `f` and `value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", content = "value", rename_all = "kebab-case")]
pub enum LeaseOp {
    Grant(LeaseGrant),
    Put(LeasePut),
    Revoke(LeaseRevoke),
    KeepAlive(LeaseKeepAlive),
    /// A linearizable read during the run.
    Read(LeaseRead),
    /// A linearizable prefix scan after the run, once every lease should have expired.
    FinalRead(LeaseRead),
}

/// LeaseGrant with a client-chosen id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    pub lease: i64,
    /// The TTL asked for, in seconds.
    pub ttl: i64,
    /// The TTL the server granted (`ok` only): etcd raises small ones to its minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_ttl: Option<i64>,
}

/// A Put attached to a lease; every key is put once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasePut {
    pub key: String,
    pub value: String,
    pub lease: i64,
    /// The put failed because the lease was gone ("requested lease not found"): certainly no effect,
    /// and proof that the lease was gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lease_not_found: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRevoke {
    pub lease: i64,
    /// `ok` only: whether the lease still existed (false: "requested lease not found").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<bool>,
}

/// One LeaseKeepAlive request and its answer on a fresh stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseKeepAlive {
    pub lease: i64,
    /// `ok` only: the TTL the answer gave; 0 when the answering member did not know the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<i64>,
}

/// A read of one key, or with `prefix` of every key under it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRead {
    pub key: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prefix: bool,
    /// `ok` only: the keys that were there; a key read and not listed was absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<Vec<Stored>>,
}

/// A key as a read found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    pub key: String,
    pub value: String,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
}

/// Whether a determinate completion answers its invocation (same kind of op, same lease or key).
pub(super) fn answers(invoke: &LeaseOp, done: &LeaseOp) -> bool {
    match (invoke, done) {
        (LeaseOp::Grant(a), LeaseOp::Grant(b)) => a.lease == b.lease,
        (LeaseOp::Put(a), LeaseOp::Put(b)) => (&a.key, &a.value, a.lease) == (&b.key, &b.value, b.lease),
        (LeaseOp::Revoke(a), LeaseOp::Revoke(b)) => a.lease == b.lease,
        (LeaseOp::KeepAlive(a), LeaseOp::KeepAlive(b)) => a.lease == b.lease,
        (LeaseOp::Read(a), LeaseOp::Read(b)) | (LeaseOp::FinalRead(a), LeaseOp::FinalRead(b)) => {
            (&a.key, a.prefix) == (&b.key, b.prefix)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Op;

    #[test]
    fn payloads_keep_jepsen_shape() {
        let op = Op::invoke(3, LeaseOp::KeepAlive(LeaseKeepAlive { lease: 7, ttl: None }), 5);
        let text = serde_json::to_string(&op).expect("encode");
        assert_eq!(text, r#"{"process":3,"type":"invoke","f":"keep-alive","value":{"lease":7},"time_ns":5}"#);
        let back: Op<LeaseOp> = serde_json::from_str(&text).expect("decode");
        assert_eq!(back, op);
    }
}
