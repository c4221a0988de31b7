//! What travels through the Raft log: the write requests of the etcd API, and the answers apply gives.

use proto::etcdserverpb as pb;
use serde::{Deserialize, Serialize};

/// A write request, as proposed to consensus and applied by every member in log order.
///
/// Serialized as its variant and the request's protobuf encoding as one byte string: the generated
/// serde of the requests writes every byte of a key or value as a sequence element, which cost the
/// log and the peer network more than the rest of encoding together.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Put(pb::PutRequest),
    DeleteRange(pb::DeleteRangeRequest),
    Txn(pb::TxnRequest),
    Compact(pb::CompactionRequest),
    /// A grant whose ID and TTL the proposer already settled (a free ID chosen, the minimum TTL applied).
    LeaseGrant(pb::LeaseGrantRequest),
    LeaseRevoke(pb::LeaseRevokeRequest),
    /// Raises or disarms an alarm (ACTIVATE or DEACTIVATE; GET is answered without the log).
    Alarm(pb::AlarmRequest),
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
    Alarm(pb::AlarmResponse),
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
            Command::Alarm(req) => req.encoded_len(),
        }
    }
}

impl Command {
    fn tag_and_bytes(&self) -> (u8, Vec<u8>) {
        use prost::Message;
        match self {
            Command::Put(req) => (0, req.encode_to_vec()),
            Command::DeleteRange(req) => (1, req.encode_to_vec()),
            Command::Txn(req) => (2, req.encode_to_vec()),
            Command::Compact(req) => (3, req.encode_to_vec()),
            Command::LeaseGrant(req) => (4, req.encode_to_vec()),
            Command::LeaseRevoke(req) => (5, req.encode_to_vec()),
            Command::Alarm(req) => (6, req.encode_to_vec()),
        }
    }

    fn from_tag_and_bytes(tag: u8, bytes: &[u8]) -> Result<Self, String> {
        use prost::Message;
        let decoded = match tag {
            0 => pb::PutRequest::decode(bytes).map(Command::Put),
            1 => pb::DeleteRangeRequest::decode(bytes).map(Command::DeleteRange),
            2 => pb::TxnRequest::decode(bytes).map(Command::Txn),
            3 => pb::CompactionRequest::decode(bytes).map(Command::Compact),
            4 => pb::LeaseGrantRequest::decode(bytes).map(Command::LeaseGrant),
            5 => pb::LeaseRevokeRequest::decode(bytes).map(Command::LeaseRevoke),
            6 => pb::AlarmRequest::decode(bytes).map(Command::Alarm),
            other => return Err(format!("unknown command kind {other}")),
        };
        decoded.map_err(|e| format!("corrupt command of kind {tag}: {e}"))
    }
}

/// Bytes that serialize as one byte string.
struct ByteString(Vec<u8>);

impl Serialize for ByteString {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for ByteString {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = ByteString;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<ByteString, E> {
                Ok(ByteString(bytes.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<ByteString, E> {
                Ok(ByteString(bytes))
            }
            // Formats without a byte string type (JSON) give a sequence of numbers.
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<ByteString, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(byte) = seq.next_element()? {
                    bytes.push(byte);
                }
                Ok(ByteString(bytes))
            }
        }
        deserializer.deserialize_byte_buf(Visit)
    }
}

impl Serialize for Command {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (tag, bytes) = self.tag_and_bytes();
        (tag, ByteString(bytes)).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (tag, ByteString(bytes)) = <(u8, ByteString)>::deserialize(deserializer)?;
        Command::from_tag_and_bytes(tag, &bytes).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Command> {
        let put = pb::PutRequest { key: b"k".to_vec(), value: vec![0, 255, 7], lease: 9, ..Default::default() };
        vec![
            Command::Put(put.clone()),
            Command::DeleteRange(pb::DeleteRangeRequest {
                key: b"a".to_vec(),
                range_end: b"b".to_vec(),
                prev_kv: true,
            }),
            Command::Txn(pb::TxnRequest {
                success: vec![pb::RequestOp { request: Some(pb::request_op::Request::RequestPut(put)) }],
                ..Default::default()
            }),
            Command::Compact(pb::CompactionRequest { revision: 5, physical: true }),
            Command::LeaseGrant(pb::LeaseGrantRequest { ttl: 10, id: 42 }),
            Command::LeaseRevoke(pb::LeaseRevokeRequest { id: 42 }),
            Command::Alarm(pb::AlarmRequest { action: 1, member_id: 7, alarm: 1 }),
        ]
    }

    #[test]
    fn every_command_survives_bincode_and_json() {
        let config = bincode::config::standard();
        for command in every_kind() {
            let bytes = bincode::serde::encode_to_vec(&command, config).expect("encode");
            let (back, _): (Command, usize) = bincode::serde::decode_from_slice(&bytes, config).expect("decode");
            assert_eq!(back, command);
            let json = serde_json::to_string(&command).expect("json");
            assert_eq!(serde_json::from_str::<Command>(&json).expect("from json"), command);
        }
    }

    #[test]
    fn an_unknown_kind_is_an_error() {
        let bytes =
            bincode::serde::encode_to_vec((9u8, ByteString(vec![])), bincode::config::standard()).expect("encode");
        let decoded: Result<(Command, usize), _> =
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard());
        assert!(decoded.is_err());
    }
}
