//! etcd 3.6's answers where they differ from 3.5.1's. Ours answers as etcd 3.6 (the line Kubernetes
//! ships), but the newest etcd binary here is 3.5.1: for these documented changes the fuzzer asks 3.5.1
//! and turns its answer into 3.6's, so that they neither show up as differences nor make the two stores
//! part. Each rule is read from etcd v3.6.14's code; the report counts the requests each one answered.
//!
//! - **Tokens while auth is off.** 3.6's `AuthInfoFromCtx` (server/auth/store.go) returns no user when
//!   auth is disabled, before it reads the token (etcd-io/etcd 17fd2e728): any token, even one no server
//!   issued, is ignored. 3.5.1 checks it and answers "invalid auth token". While etcd has auth off (as
//!   its answers to AuthEnable and AuthDisable tell), requests go to it without their token
//!   ([`ignores_token`]).
//! - **A Watch create refused for auth** (server/etcdserver/api/v3rpc/watch.go, `recvLoop` and
//!   `isWatchPermitted`). 3.6 answers `watch_id` -1 (`InvalidWatchID`), created and canceled, with a
//!   cancel reason by cause: an invalid token, an old auth revision, no user, or else "permission
//!   denied". 3.5.1 echoes the requested `watch_id` and always says "permission denied"
//!   ([`watch_change`]). The cause follows from the caller, except for a token etcd issued: etcd may have
//!   dropped it since (a password change), so etcd is asked ([`refusal_reason`]).
//! - **A Watch from a key to the end** (6643f8060; v3rpc/watch.go `recvLoop`). 3.5.1 turns a `range_end`
//!   of `\0` into "to the end" before `isWatchPermitted`, which then checks `key` alone: a user who may
//!   read just `key` watches every key from it. 3.6 checks the range as sent, `[key, +inf)`, and refuses
//!   as above. When 3.5.1 took such a create from a user other than root while etcd has auth on, etcd is
//!   asked whether the user may read `[key, +inf)` ([`from_key_reason`]); where not, 3.6's refusal stands
//!   in. The watch 3.5.1 opened does not outlive the answer, as for a negative `start_revision`: a stream
//!   call ends its stream after the first response, which cancels it at etcd ([`call::send`]).
//! - **A Watch create with a negative `start_revision`.** 3.6 cancels it before any other check, as
//!   compacted, with `watch_id` -1 (3bb44700e). 3.5.1 creates the watch, then cancels it as compacted
//!   below revision -1 (or keeps it, at -1); its first response says created.
//! - **RoleGrantPermission of a range 3.6 refuses** is held back from etcd: see [`super::known`].
//!
//! 3.6.14's auth hardening (2026 backports), while etcd has auth on; the checks are in [`super::guard`],
//! their verdict in [`super::hardening`]. A request a rule refuses is held back from etcd where 3.5.1
//! would have applied it, and 3.6's refusal stands in:
//!
//! - **Admin only** (7f73a57b8, c99cf0c39; v3rpc/key.go `Compact`, v3rpc/maintenance.go
//!   `authMaintenanceServer`, v3rpc/auth.go `isPermitted`, auth/store.go `IsAdminPermitted`): Compact,
//!   Alarm other than GET, MoveLeader and Downgrade, which 3.5.1 takes from anyone, are refused "user name
//!   is empty" (no token), "invalid auth token", "permission denied" (no root role) or "user name not
//!   found", mapped by `togRPCError`. etcd is asked with an AuthStatus with the caller's token, which
//!   3.5.1 refuses exactly so (v3.5.1 `needAdminPermission`, `AuthServer.AuthStatus`). Defragment,
//!   Snapshot, Hash and HashKV were admin-only in 3.5.1 too, but refused with the bare `auth` error (code
//!   Unknown): that answer is mapped.
//! - **A user required** (7f73a57b8, c99cf0c39, 576a6a00c; v3_server.go `requireAuthInfo`,
//!   `checkLeaseLeases`, `checkLeaseRenew`): Status, Alarm GET, MemberList, LeaseGrant, LeaseRevoke,
//!   LeaseTimeToLive, LeaseLeases and LeaseKeepAlive refuse a request without a token ("user name is
//!   empty") or with one etcd does not know ("invalid auth token"); 3.5.1 granted and revoked leases
//!   without a token.
//! - **A lease's keys** (7f73a57b8; v3_server.go `checkLeaseTimeToLive`, `checkLeaseLeases`,
//!   `checkLeaseRenew`): for a user without the root role, LeaseTimeToLive with `keys` needs read
//!   permission on every key of the lease, LeaseLeases on every key of every lease, a keep-alive write
//!   permission on every key of its lease: else "permission denied". etcd lists the keys (root's token)
//!   and is asked about each key with the user's token.
//! - **A Txn's Puts** (633de82d0; apply/apply_auth.go `checkPutAuth`): a Put in a Txn, at any depth, with
//!   `prev_kv` needs read permission on its key, with a lease write permission on every key of the lease.
//! - **Nested Txns** (apply/apply_auth.go `checkTxnReqsPermission`, its `RequestOp_RequestTxn` case): 3.6
//!   checks a nested Txn, at any depth and in either branch, whether it runs or not, as the top one (read on
//!   compares and Ranges, write on Puts and DeleteRanges, read on a DeleteRange's range for `prev_kv`);
//!   3.5.1's `checkTxnAuth` stops at the top and applies nested ops unchecked. Without a token 3.6 refuses
//!   "user name is empty" a Txn that 3.5.1 does not check at all (nothing but nested Txns at the top).
//!   Each added check is probed with the caller's token ([`super::txn_permission`]).

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use proto::etcdserverpb as pb;
use tonic::transport::Channel;
use tonic::Code;

use super::call::{self, Answer, Call};
use super::catalog::Shape;
use super::names::USERS;
use super::request::{Caller, Request};

/// 3.6's `clientv3.InvalidWatchID`.
const INVALID_WATCH_ID: i64 = -1;
/// `rpctypes.ErrCompacted.Error()`: an `EtcdError`, whose text is its description alone.
const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
/// What 3.5.1 says about every watch it refuses for auth, and 3.6 about the causes it does not name.
const PERMISSION_DENIED: (Code, &str) = (Code::PermissionDenied, "etcdserver: permission denied");
const INVALID_TOKEN: (Code, &str) = (Code::Unauthenticated, "etcdserver: invalid auth token");
const OLD_REVISION: (Code, &str) = (Code::InvalidArgument, "etcdserver: revision of auth store is old");
const USER_EMPTY: (Code, &str) = (Code::InvalidArgument, "etcdserver: user name is empty");
/// The causes 3.6's `recvLoop` names (`auth.ErrInvalidAuthToken`, `ErrAuthOldRevision`, `ErrUserEmpty`).
const NAMED_CAUSES: [(Code, &str); 3] = [INVALID_TOKEN, OLD_REVISION, USER_EMPTY];
/// The `range_end` that means "to the end of the keyspace".
const FROM_KEY: &[u8] = b"\0";
/// The user holding etcd's root role in the auth-on setup ([`super::auth`]).
const ROOT: &str = "root";

/// Whether etcd is sent the request without `token`: auth is off, and 3.6 reads no token then.
pub fn ignores_token(auth_enabled: bool, token: Option<&str>) -> bool {
    !auth_enabled && token.is_some()
}

/// What etcd was given to tell who calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    NoToken,
    /// A token no server issued.
    Garbage,
    /// A token etcd issued (it may have dropped it since).
    Token,
}

impl Credential {
    /// From the request's caller and the token etcd was sent.
    pub fn of(caller: Caller, token: Option<&str>) -> Credential {
        match (caller, token) {
            (_, None) => Credential::NoToken,
            (Caller::Garbage, Some(_)) => Credential::Garbage,
            (_, Some(_)) => Credential::Token,
        }
    }
}

/// The fields of a Watch create that 3.6's first checks read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchCreate {
    /// `\0` for an empty key, as etcd sets it before any check.
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    pub start_revision: i64,
    pub watch_id: i64,
}

impl WatchCreate {
    /// The create of a Watch request; `None` for other requests.
    pub fn of(request: &Request) -> Option<WatchCreate> {
        if request.method.name != "Watch" || !request.message.has_field_by_name("create_request") {
            return None;
        }
        let create = request.message.get_field_by_name("create_request")?;
        let create = create.as_message()?;
        let bytes = |name: &str| create.get_field_by_name(name).and_then(|v| v.as_bytes().map(|b| b.to_vec()));
        let int = |name: &str| create.get_field_by_name(name).and_then(|v| v.as_i64()).unwrap_or(0);
        let key = bytes("key").filter(|k| !k.is_empty()).unwrap_or_else(|| vec![0]);
        Some(WatchCreate {
            key,
            range_end: bytes("range_end").unwrap_or_default(),
            start_revision: int("start_revision"),
            watch_id: int("watch_id"),
        })
    }

    /// 3.6's first response when it cancels the create with `reason`.
    pub fn canceled(&self, reason: &str) -> Answer {
        self.first_response(INVALID_WATCH_ID, reason)
    }

    fn first_response(&self, watch_id: i64, reason: &str) -> Answer {
        let response = pb::WatchResponse {
            created: true,
            canceled: true,
            watch_id,
            cancel_reason: reason.to_string(),
            ..Default::default()
        };
        Answer::Ok { revision: None, detail: Some(call::watch_detail(&response, Some(self.watch_id))) }
    }
}

/// How 3.6's answer to a Watch create differs from 3.5.1's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchChange {
    /// A negative `start_revision`: 3.6's answer.
    NegativeStart(Answer),
    /// 3.5.1 refused it for auth; 3.6's cancel reason depends on the cause ([`refusal_reason`]).
    RefusedForAuth,
    /// 3.5.1 took a watch from `key` to the end having checked `key` alone; 3.6 refuses it unless the
    /// caller may read `[key, +inf)` ([`from_key_reason`]).
    FromKey,
}

/// Whether 3.6 answers the create otherwise than 3.5.1 did with `etcd`. `auth_caller` is the caller when
/// etcd has auth on (`None` while it is off: then neither version checks a watch).
pub fn watch_change(create: &WatchCreate, etcd: &Answer, auth_caller: Option<Caller>) -> Option<WatchChange> {
    if create.start_revision < 0 {
        // The check comes first in 3.6, so whatever 3.5.1 made of the create, 3.6 refuses it thus.
        return etcd.is_ok().then(|| WatchChange::NegativeStart(create.canceled(COMPACTED)));
    }
    let refused = create.first_response(create.watch_id, &grpc_error_text(PERMISSION_DENIED.0, PERMISSION_DENIED.1));
    if *etcd == refused {
        return Some(WatchChange::RefusedForAuth);
    }
    // Any first response past 3.5.1's check: 3.6 runs its own check before the watch is made. Only a
    // user's token gets that far with auth on (no token or a garbage one is refused by 3.5.1 too), and
    // root may read every range.
    let user = matches!(auth_caller, Some(Caller::User(user)) if USERS.get(user) != Some(&ROOT));
    (create.range_end == FROM_KEY && etcd.is_ok() && user).then_some(WatchChange::FromKey)
}

/// 3.6's cancel reason for a create refused for auth, by what etcd was given: no token means no user, a
/// garbage token is invalid, and a token etcd issued is checked again by a serializable Range over the
/// watched keys with that token. That Range runs what 3.6's `isWatchPermitted` runs (`AuthInfoFromCtx`,
/// then `IsRangePermitted(key, range_end)` with the `range_end` as sent: 3.5.1's watch checks it only after
/// turning `\0` into "to the end" and then checks a single key) and changes nothing. `None` when that
/// Range passes or does not answer: then 3.6's cause is not known.
pub async fn refusal_reason(
    create: &WatchCreate,
    credential: Credential,
    channel: &Channel,
    token: Option<&str>,
    timeout: Duration,
) -> Option<String> {
    let (code, message) = match credential {
        Credential::NoToken => USER_EMPTY,
        Credential::Garbage => INVALID_TOKEN,
        Credential::Token => {
            let refused = probe_status(create, channel, token, timeout).await;
            return refused.map(|(code, message)| reason_for(code, &message));
        }
    };
    Some(grpc_error_text(code, message))
}

/// 3.6's cancel reason for a watch from `key` to the end that 3.5.1 took: etcd's serializable Range over
/// `[key, +inf)` with the caller's `token`. 3.5.1's Range checks that range whole (`IsRangePermitted` with
/// `range_end` `\0`: `checkKeyInterval` reads it as "to the end", server/auth/range_perm_cache.go), as
/// 3.6's `isWatchPermitted` does. `None` when the Range passes, or fails for no auth cause (a timeout):
/// then 3.5.1's answer stands.
pub async fn from_key_reason(
    create: &WatchCreate,
    channel: &Channel,
    token: Option<&str>,
    timeout: Duration,
) -> Option<String> {
    let (code, message) = probe_status(create, channel, token, timeout).await?;
    auth_cause(code, &message)
}

/// 3.6's cancel reason when the Range over the watched keys failed for an auth cause; `None` for others.
fn auth_cause(code: Code, message: &str) -> Option<String> {
    let cause = (code, message);
    (cause == PERMISSION_DENIED || NAMED_CAUSES.contains(&cause)).then(|| reason_for(code, message))
}

/// The status etcd refuses a serializable count-only Range over the watched keys (`range_end` as sent)
/// with `token` with; `None` when it passes or does not answer. The Range changes nothing.
async fn probe_status(
    create: &WatchCreate,
    channel: &Channel,
    token: Option<&str>,
    timeout: Duration,
) -> Option<(Code, String)> {
    let probe = pb::RangeRequest {
        key: create.key.clone(),
        range_end: create.range_end.clone(),
        serializable: true,
        count_only: true,
        ..Default::default()
    };
    let body = Bytes::from(probe.encode_to_vec());
    let path = "/etcdserverpb.KV/Range";
    let call = Call { channel, path, shape: Shape::Unary, body, token, timeout, requested_watch_id: None };
    match call::send(call).await {
        Answer::Status { code, message } => Some((code, message)),
        _ => None,
    }
}

/// 3.6's `recvLoop` switch: the causes it names keep their gRPC error, every other one is "permission
/// denied".
fn reason_for(code: Code, message: &str) -> String {
    let (code, message) =
        NAMED_CAUSES.iter().copied().find(|cause| *cause == (code, message)).unwrap_or(PERMISSION_DENIED);
    grpc_error_text(code, message)
}

/// A gRPC status error as Go prints it (`status.Error(...).Error()`).
fn grpc_error_text(code: Code, message: &str) -> String {
    format!("rpc error: code = {code:?} desc = {message}")
}

#[cfg(test)]
mod tests {
    use prost_reflect::{DynamicMessage, Value};

    use super::super::catalog::Catalog;
    use super::*;

    fn watch(catalog: &Catalog, fields: &[(&str, Value)]) -> Request {
        let method = catalog.method("etcdserverpb.Watch", "Watch").expect("Watch");
        let descriptor = catalog.pool.get_message_by_name("etcdserverpb.WatchCreateRequest").expect("create");
        let mut create = DynamicMessage::new(descriptor);
        for (name, value) in fields {
            create.set_field_by_name(name, value.clone());
        }
        let mut message = DynamicMessage::new(method.input.clone());
        message.set_field_by_name("create_request", Value::Message(create));
        Request { method, message, caller: Caller::Nobody, invalid_utf8_field: None }
    }

    fn first(created: bool, canceled: bool, watch_id: i64, reason: &str) -> Answer {
        let response =
            pb::WatchResponse { created, canceled, watch_id, cancel_reason: reason.to_string(), ..Default::default() };
        Answer::Ok { revision: None, detail: Some(call::watch_detail(&response, Some(7))) }
    }

    #[test]
    fn tokens_are_left_off_only_while_auth_is_off() {
        assert!(ignores_token(false, Some("t")));
        assert!(!ignores_token(false, None));
        assert!(!ignores_token(true, Some("t")));
        assert_eq!(Credential::of(Caller::User(1), None), Credential::NoToken);
        assert_eq!(Credential::of(Caller::Garbage, Some("g")), Credential::Garbage);
        assert_eq!(Credential::of(Caller::User(0), Some("t")), Credential::Token);
    }

    #[test]
    fn a_watch_refused_for_auth_gets_3_6_s_id_and_reason() {
        let catalog = Catalog::load().expect("descriptors");
        let request = watch(&catalog, &[("watch_id", Value::I64(7))]);
        let create = WatchCreate::of(&request).expect("a create");
        assert_eq!(create.key, b"\0");
        let denied = "rpc error: code = PermissionDenied desc = etcdserver: permission denied";
        let user = Some(Caller::User(1));
        assert_eq!(watch_change(&create, &first(true, true, 7, denied), user), Some(WatchChange::RefusedForAuth));
        assert_eq!(watch_change(&create, &first(true, true, 7, denied), None), Some(WatchChange::RefusedForAuth));
        assert_eq!(watch_change(&create, &first(true, false, 7, ""), user), None);
        assert_eq!(watch_change(&create, &first(true, true, -1, "mvcc: watcher range is empty"), user), None);
        assert_eq!(
            create.canceled(&reason_for(Code::InvalidArgument, "etcdserver: user name is empty")),
            first(true, true, -1, "rpc error: code = InvalidArgument desc = etcdserver: user name is empty")
        );
        assert_eq!(reason_for(Code::PermissionDenied, "etcdserver: permission denied"), denied);
        assert_eq!(reason_for(Code::Unavailable, "etcdserver: request timed out"), denied);
        assert_eq!(
            reason_for(Code::Unauthenticated, "etcdserver: invalid auth token"),
            "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"
        );
    }

    #[test]
    fn a_negative_start_revision_is_canceled_as_compacted_before_anything_else() {
        let catalog = Catalog::load().expect("descriptors");
        let request = watch(&catalog, &[("watch_id", Value::I64(7)), ("start_revision", Value::I64(-5))]);
        let create = WatchCreate::of(&request).expect("a create");
        let compacted = first(true, true, -1, "etcdserver: mvcc: required revision has been compacted");
        for etcd in [first(true, false, 7, ""), first(true, true, 7, "anything")] {
            assert_eq!(watch_change(&create, &etcd, None), Some(WatchChange::NegativeStart(compacted.clone())));
        }
        assert_eq!(watch_change(&create, &Answer::Timeout, None), None);
        let mut progress = request.clone();
        progress.message = DynamicMessage::new(request.method.input.clone());
        assert_eq!(WatchCreate::of(&progress), None);
    }

    #[test]
    fn a_watch_to_the_end_that_3_5_1_took_is_checked_again_for_users_only() {
        let catalog = Catalog::load().expect("descriptors");
        let fields = |range_end: &[u8]| {
            [
                ("key", Value::Bytes(Bytes::from_static(b"k5"))),
                ("range_end", Value::Bytes(Bytes::copy_from_slice(range_end))),
                ("start_revision", Value::I64(7)),
                ("watch_id", Value::I64(7)),
            ]
        };
        let from_key = WatchCreate::of(&watch(&catalog, &fields(b"\0"))).expect("a create");
        let created = first(true, false, 7, "");
        let user = Some(Caller::User(2));
        assert_eq!(watch_change(&from_key, &created, user), Some(WatchChange::FromKey));
        // Whatever 3.5.1 did past its check (here, a cancel for compaction), 3.6 checks first.
        let compacted = first(true, true, 7, "etcdserver: mvcc: required revision has been compacted");
        assert_eq!(watch_change(&from_key, &compacted, user), Some(WatchChange::FromKey));
        // Auth off, root, no token, a garbage token: nothing to check again (3.5.1 refused the last two).
        for caller in [None, Some(Caller::User(0)), Some(Caller::Nobody), Some(Caller::Garbage)] {
            assert_eq!(watch_change(&from_key, &created, caller), None, "{caller:?}");
        }
        let unavailable = Answer::Status { code: Code::Unavailable, message: "x".into() };
        for answer in [Answer::Timeout, Answer::Ended, unavailable] {
            assert_eq!(watch_change(&from_key, &answer, user), None, "{answer:?}");
        }
        // Any other range_end was checked by 3.5.1 as sent, a single key or a range.
        for range_end in [&b""[..], b"k6", b"\0\0"] {
            let create = WatchCreate::of(&watch(&catalog, &fields(range_end))).expect("a create");
            assert_eq!(watch_change(&create, &created, user), None, "{range_end:?}");
        }
    }

    #[test]
    fn only_an_auth_cause_refuses_a_watch_to_the_end() {
        let denied = "rpc error: code = PermissionDenied desc = etcdserver: permission denied";
        assert_eq!(auth_cause(Code::PermissionDenied, "etcdserver: permission denied").as_deref(), Some(denied));
        assert_eq!(
            auth_cause(Code::InvalidArgument, "etcdserver: revision of auth store is old").as_deref(),
            Some("rpc error: code = InvalidArgument desc = etcdserver: revision of auth store is old")
        );
        assert_eq!(auth_cause(Code::Unavailable, "etcdserver: request timed out"), None);
        assert_eq!(auth_cause(Code::PermissionDenied, "something else"), None);
        // The refusal as 3.6 answers it: watch_id -1, created and canceled, the reason.
        let catalog = Catalog::load().expect("descriptors");
        let create = WatchCreate::of(&watch(&catalog, &[("watch_id", Value::I64(7))])).expect("a create");
        assert_eq!(create.canceled(denied), first(true, true, -1, denied));
    }
}
