//! etcdctl's `protobuf` format: the response's own wire encoding, written as it is (no newline).
//!
//! gogo-protobuf and prost both write proto3 fields in field-number order and leave out default
//! values, so the bytes are the same as etcdctl's.

use prost::Message;

use super::AuthResponse;

pub fn auth(resp: &AuthResponse<'_>) -> Vec<u8> {
    match resp {
        AuthResponse::Status(r) => r.encode_to_vec(),
        AuthResponse::UserAdd(_, r) => r.encode_to_vec(),
        AuthResponse::UserGet(_, r) => r.encode_to_vec(),
        AuthResponse::UserList(r) => r.encode_to_vec(),
        AuthResponse::UserDelete(_, r) => r.encode_to_vec(),
        AuthResponse::UserChangePassword(r) => r.encode_to_vec(),
        AuthResponse::UserGrantRole(_, _, r) => r.encode_to_vec(),
        AuthResponse::UserRevokeRole(_, _, r) => r.encode_to_vec(),
        AuthResponse::RoleAdd(_, r) => r.encode_to_vec(),
        AuthResponse::RoleGet(_, r) => r.encode_to_vec(),
        AuthResponse::RoleList(r) => r.encode_to_vec(),
        AuthResponse::RoleDelete(_, r) => r.encode_to_vec(),
        AuthResponse::RoleGrantPermission(_, r) => r.encode_to_vec(),
        AuthResponse::RoleRevokePermission(_, _, _, r) => r.encode_to_vec(),
    }
}
