//! What travels through the Raft log: the write requests of the etcd API, and the answers apply gives.

use proto::etcdserverpb as pb;
use serde::{Deserialize, Serialize};

use crate::auth::{AuthCommand, AuthOutcome, Caller};

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
    /// `Maintenance.Downgrade` ENABLE or CANCEL.
    Downgrade(pb::DowngradeRequest),
    /// A change of users, roles or the auth flags, or a login.
    Auth(AuthCommand),
    /// A client's request with the caller it came from, sent while auth is enabled: apply checks the
    /// caller's permissions first (see [`crate::auth`]).
    AsUser(Caller, Box<Command>),
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
    Downgrade(pb::DowngradeResponse),
    Auth(AuthOutcome),
}

impl Command {
    /// Whether applying the command can change the store (a txn made only of ranges cannot).
    pub fn is_write(&self) -> bool {
        match self {
            Command::Txn(txn) => !is_read_only(txn),
            Command::AsUser(_, inner) => inner.is_write(),
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
            Command::Downgrade(req) => req.encoded_len(),
            Command::Auth(_) => self.tag_and_bytes().1.len(),
            Command::AsUser(_, inner) => inner.encoded_len(),
        }
    }

    /// The command itself, without the caller it may carry.
    pub fn inner(&self) -> &Command {
        match self {
            Command::AsUser(_, inner) => inner.inner(),
            other => other,
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
            Command::Downgrade(req) => (20, req.encode_to_vec()),
            Command::Auth(cmd) => match cmd {
                AuthCommand::Enable => (7, Vec::new()),
                AuthCommand::Disable => (8, Vec::new()),
                AuthCommand::Authenticate { name, token } => {
                    let mut out = Vec::new();
                    put_bytes(&mut out, name);
                    put_bytes(&mut out, token.as_bytes());
                    (9, out)
                }
                AuthCommand::UserAdd(req) => (10, req.encode_to_vec()),
                AuthCommand::UserDelete(req) => (11, req.encode_to_vec()),
                AuthCommand::UserChangePassword(req) => (12, req.encode_to_vec()),
                AuthCommand::UserGrantRole(req) => (13, req.encode_to_vec()),
                AuthCommand::UserRevokeRole(req) => (14, req.encode_to_vec()),
                AuthCommand::RoleAdd(req) => (15, req.encode_to_vec()),
                AuthCommand::RoleDelete(req) => (16, req.encode_to_vec()),
                AuthCommand::RoleGrantPermission(req) => (17, req.encode_to_vec()),
                AuthCommand::RoleRevokePermission(req) => (18, req.encode_to_vec()),
            },
            Command::AsUser(caller, inner) => {
                let (tag, bytes) = inner.tag_and_bytes();
                let mut out = Vec::with_capacity(caller.user.len() + bytes.len() + 13);
                put_bytes(&mut out, &caller.user);
                out.extend_from_slice(&caller.auth_revision.to_be_bytes());
                out.push(tag);
                out.extend_from_slice(&bytes);
                (19, out)
            }
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
            20 => pb::DowngradeRequest::decode(bytes).map(Command::Downgrade),
            7 => Ok(Command::Auth(AuthCommand::Enable)),
            8 => Ok(Command::Auth(AuthCommand::Disable)),
            9 => {
                let mut rest = bytes;
                let name = take_bytes(&mut rest)?;
                let token = take_str(&mut rest)?;
                return Ok(Command::Auth(AuthCommand::Authenticate { name, token }));
            }
            10 => pb::AuthUserAddRequest::decode(bytes).map(|r| Command::Auth(AuthCommand::UserAdd(r))),
            11 => pb::AuthUserDeleteRequest::decode(bytes).map(|r| Command::Auth(AuthCommand::UserDelete(r))),
            12 => pb::AuthUserChangePasswordRequest::decode(bytes)
                .map(|r| Command::Auth(AuthCommand::UserChangePassword(r))),
            13 => pb::AuthUserGrantRoleRequest::decode(bytes).map(|r| Command::Auth(AuthCommand::UserGrantRole(r))),
            14 => pb::AuthUserRevokeRoleRequest::decode(bytes).map(|r| Command::Auth(AuthCommand::UserRevokeRole(r))),
            15 => pb::AuthRoleAddRequest::decode(bytes).map(|r| Command::Auth(AuthCommand::RoleAdd(r))),
            16 => pb::AuthRoleDeleteRequest::decode(bytes).map(|r| Command::Auth(AuthCommand::RoleDelete(r))),
            17 => pb::AuthRoleGrantPermissionRequest::decode(bytes)
                .map(|r| Command::Auth(AuthCommand::RoleGrantPermission(r))),
            18 => pb::AuthRoleRevokePermissionRequest::decode(bytes)
                .map(|r| Command::Auth(AuthCommand::RoleRevokePermission(r))),
            19 => {
                let mut rest = bytes;
                let user = take_bytes(&mut rest)?;
                let revision = rest.get(..8).ok_or("truncated caller")?;
                let auth_revision = u64::from_be_bytes(revision.try_into().map_err(|_| "truncated caller")?);
                let (&tag, inner) = rest[8..].split_first().ok_or("truncated caller")?;
                let inner = Command::from_tag_and_bytes(tag, inner)?;
                return Ok(Command::AsUser(Caller { user, auth_revision }, Box::new(inner)));
            }
            other => return Err(format!("unknown command kind {other}")),
        };
        decoded.map_err(|e| format!("corrupt command of kind {tag}: {e}"))
    }
}

/// Appends a length-prefixed byte string (a name or a token).
fn put_bytes(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(&(text.len() as u32).to_be_bytes());
    out.extend_from_slice(text);
}

/// Takes a byte string [`put_bytes`] wrote off the front of `bytes`.
fn take_bytes(bytes: &mut &[u8]) -> Result<Vec<u8>, String> {
    let len = bytes.get(..4).ok_or("truncated string")?;
    let len = u32::from_be_bytes(len.try_into().map_err(|_| "truncated string")?) as usize;
    let text = bytes.get(4..4 + len).ok_or("truncated string")?.to_vec();
    *bytes = &bytes[4 + len..];
    Ok(text)
}

/// Takes a UTF-8 string [`put_bytes`] wrote (a token, which this member generated).
fn take_str(bytes: &mut &[u8]) -> Result<String, String> {
    String::from_utf8(take_bytes(bytes)?).map_err(|_| "a token that is not UTF-8".to_string())
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

/// True when every operation of both branches is a range: etcd's `isTxnReadonly`, which serves such a
/// txn locally and sends every other one through the log — one with a nested txn (even one that only
/// reads) or an empty operation too, so that it meets the log's checks (`request is too large` first).
pub fn is_read_only(req: &pb::TxnRequest) -> bool {
    use pb::request_op::Request;
    req.success.iter().chain(&req.failure).all(|op| matches!(op.request, Some(Request::RequestRange(_))))
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
                success: vec![pb::RequestOp { request: Some(pb::request_op::Request::RequestPut(put.clone())) }],
                ..Default::default()
            }),
            Command::Compact(pb::CompactionRequest { revision: 5, physical: true }),
            Command::LeaseGrant(pb::LeaseGrantRequest { ttl: 10, id: 42 }),
            Command::LeaseRevoke(pb::LeaseRevokeRequest { id: 42 }),
            Command::Alarm(pb::AlarmRequest { action: 1, member_id: 7, alarm: 1 }),
            Command::Downgrade(pb::DowngradeRequest { action: 1, version: "3.5".into() }),
            Command::Auth(AuthCommand::Enable),
            Command::Auth(AuthCommand::Authenticate { name: "ünï".into(), token: "abc.42".into() }),
            Command::Auth(AuthCommand::RoleGrantPermission(pb::AuthRoleGrantPermissionRequest {
                name: "r".into(),
                perm: Some(proto::authpb::Permission { perm_type: 2, key: b"a".to_vec(), range_end: b"b".to_vec() }),
            })),
            Command::AsUser(
                Caller { user: "alice".into(), auth_revision: 9 },
                Box::new(Command::AsUser(Caller::default(), Box::new(Command::Put(put.clone())))),
            ),
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
    fn a_truncated_caller_is_an_error_not_a_panic() {
        let (tag, bytes) = Command::AsUser(
            Caller { user: "bob".into(), auth_revision: 3 },
            Box::new(Command::Auth(AuthCommand::Enable)),
        )
        .tag_and_bytes();
        assert!(Command::from_tag_and_bytes(tag, &bytes).is_ok());
        for cut in 0..bytes.len() {
            assert!(Command::from_tag_and_bytes(tag, &bytes[..cut]).is_err(), "cut at {cut}");
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
