//! What travels through the Raft log: the write requests of the etcd API, and the answers apply gives.

use proto::etcdserverpb as pb;
use serde::{Deserialize, Serialize};

/// A write request, as proposed to consensus and applied by every member in log order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    Put(pb::PutRequest),
    DeleteRange(pb::DeleteRangeRequest),
    Txn(pb::TxnRequest),
    Compact(pb::CompactionRequest),
    /// A grant whose ID and TTL the proposer already settled (a free ID chosen, the minimum TTL applied).
    LeaseGrant(pb::LeaseGrantRequest),
    LeaseRevoke(pb::LeaseRevokeRequest),
}

/// The response apply produced for a [`Command`]; headers carry only the revision (the serving member
/// fills in the rest).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CommandResponse {
    Put(pb::PutResponse),
    DeleteRange(pb::DeleteRangeResponse),
    Txn(pb::TxnResponse),
    Compact(pb::CompactionResponse),
    LeaseGrant(pb::LeaseGrantResponse),
    LeaseRevoke(pb::LeaseRevokeResponse),
}

impl Command {
    /// Whether applying the command can change the store (a txn made only of ranges cannot).
    pub fn is_write(&self) -> bool {
        match self {
            Command::Txn(txn) => !crate::txn::is_read_only(txn),
            _ => true,
        }
    }

    /// The request's size in bytes as etcd's request limit counts it (its protobuf encoding).
    pub fn encoded_len(&self) -> usize {
        use prost::Message;
        match self {
            Command::Put(req) => req.encoded_len(),
            Command::DeleteRange(req) => req.encoded_len(),
            Command::Txn(req) => req.encoded_len(),
            Command::Compact(req) => req.encoded_len(),
            Command::LeaseGrant(req) => req.encoded_len(),
            Command::LeaseRevoke(req) => req.encoded_len(),
        }
    }
}
