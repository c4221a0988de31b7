//! The auth checks etcd 3.6.14 runs where 3.5.1 runs fewer, or answers them unmapped: the 2026 hardening
//! (etcd-io/etcd 7f73a57b8, c99cf0c39, 576a6a00c, 633de82d0) and the permission checks inside nested Txns.
//! Which check guards each request ([`guard`]), and how etcd's answers to the probes of [`super::probe`]
//! read ([`Standing`], [`Permission`], [`txn_refusal`]). No I/O here; [`super::hardening`] puts probes and
//! checks together.

use tonic::Code;

use super::call::Answer;
use super::field;
use super::request::Request;
use super::txn_permission::TxnChecks;

/// `rpctypes` errors as 3.6's `togRPCError` maps them.
pub const USER_EMPTY: (Code, &str) = (Code::InvalidArgument, "etcdserver: user name is empty");
pub const INVALID_TOKEN: (Code, &str) = (Code::Unauthenticated, "etcdserver: invalid auth token");
pub const PERMISSION_DENIED: (Code, &str) = (Code::PermissionDenied, "etcdserver: permission denied");
pub const USER_NOT_FOUND: (Code, &str) = (Code::FailedPrecondition, "etcdserver: user name not found");
const OLD_REVISION: (Code, &str) = (Code::InvalidArgument, "etcdserver: revision of auth store is old");
/// 3.5.1's `authMaintenanceServer` returns the `auth` package's errors as they are (gRPC code Unknown,
/// their text as the message); 3.6 maps them. The errors `IsAdminPermitted` and `AuthInfoFromCtx` return.
const UNMAPPED: [(&str, (Code, &str)); 4] = [
    ("auth: user name is empty", USER_EMPTY),
    ("auth: invalid auth token", INVALID_TOKEN),
    ("auth: permission denied", PERMISSION_DENIED),
    ("auth: user not found", USER_NOT_FOUND),
];
/// `AlarmRequest_GET`.
const ALARM_GET: i32 = 0;

pub fn status((code, message): (Code, &str)) -> Answer {
    Answer::Status { code, message: message.to_string() }
}

/// The check 3.6.14 runs first on a request, with auth on, where 3.5.1 differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// `AuthAdmin.isPermitted` (v3rpc/auth.go): the caller must hold the root role. 3.5.1 checked nothing,
    /// beyond the token when the request goes through raft (`etcd_checks_token`).
    Admin { etcd_checks_token: bool },
    /// The same check, which 3.5.1's `authMaintenanceServer` ran too but answered unmapped.
    AdminUnmapped,
    /// `requireAuthInfo` (v3_server.go, v3rpc/auth.go): a valid token of some user, then `then`.
    User { etcd_checks_token: bool, then: Option<KeyCheck> },
    /// `checkTxnPermission` (apply/apply_auth.go) where it checks more than 3.5.1's: a Txn's Puts, and
    /// everything inside its nested Txns.
    Txn(TxnChecks),
}

/// The per-key checks of the lease requests, for a user without the root role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyCheck {
    /// `checkLeaseTimeToLive` (with `keys` set): read on every key of the lease.
    ReadLeaseKeys(i64),
    /// `checkLeaseLeases`: read on every key of every lease.
    ReadAllLeaseKeys,
    /// `checkLeaseRenew` (a keep-alive): write on every key of the lease.
    WriteLeaseKeys(i64),
}

/// The check 3.6 runs on `request` that 3.5.1 does not run (or answers otherwise); `None` when they agree.
pub fn guard(request: &Request) -> Option<Guard> {
    let message = &request.message;
    let user = |etcd_checks_token, then| Some(Guard::User { etcd_checks_token, then });
    match (request.method.service.as_str(), request.method.name.as_str()) {
        // Compact and Alarm go through raft in 3.5.1, which checks the token; MoveLeader and Downgrade do not.
        (_, "Compact") => Some(Guard::Admin { etcd_checks_token: true }),
        (_, "Alarm") if field::enum_number(message, "action") != ALARM_GET => {
            Some(Guard::Admin { etcd_checks_token: true })
        }
        (_, "MoveLeader" | "Downgrade") => Some(Guard::Admin { etcd_checks_token: false }),
        (_, "Defragment" | "Snapshot" | "Hash" | "HashKV") => Some(Guard::AdminUnmapped),
        (_, "Alarm" | "LeaseGrant" | "LeaseRevoke") => user(true, None),
        (_, "Status" | "MemberList") => user(false, None),
        (_, "LeaseTimeToLive") => {
            let id = field::int64(message, "ID");
            user(false, field::boolean(message, "keys").then_some(KeyCheck::ReadLeaseKeys(id)))
        }
        (_, "LeaseLeases") => user(false, Some(KeyCheck::ReadAllLeaseKeys)),
        (_, "LeaseKeepAlive") => user(false, Some(KeyCheck::WriteLeaseKeys(field::int64(message, "ID")))),
        ("etcdserverpb.KV", "Txn") => {
            let checks = TxnChecks::of(message);
            (!checks.added.is_empty()).then_some(Guard::Txn(checks))
        }
        _ => None,
    }
}

/// 3.6's mapped error for 3.5.1's unmapped answer to an admin-only maintenance request.
pub fn mapped(etcd: &Answer) -> Option<Answer> {
    let Answer::Status { code: Code::Unknown, message } = etcd else { return None };
    UNMAPPED.iter().find(|(text, _)| text == message).map(|(_, mapped)| status(*mapped))
}

/// Who the caller is at etcd, from etcd 3.5.1's answer to an AuthStatus with the caller's token. That
/// request is admin-only in 3.5.1 (`needAdminPermission`), its token checked on the way into raft
/// (`processInternalRaftRequestOnce`) and its error mapped (`AuthServer.AuthStatus`): it is refused exactly
/// as 3.6's `isPermitted` refuses, and changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Admin,
    /// A user without the root role (or no longer there): 3.6's refusal of an admin-only request.
    NotAdmin(Answer),
    /// No user, or a token etcd does not know: the refusal of any check that wants a user.
    NoUser(Answer),
    /// Any other answer (a timeout, a raised alarm): nothing is known.
    Unknown,
}

impl Standing {
    pub fn of(auth_status: &Answer) -> Standing {
        match auth_status {
            Answer::Ok { .. } => Standing::Admin,
            Answer::Status { code, message } => {
                let is = |(c, m): (Code, &str)| *code == c && message == m;
                if is(PERMISSION_DENIED) || is(USER_NOT_FOUND) {
                    Standing::NotAdmin(auth_status.clone())
                } else if is(USER_EMPTY) || is(INVALID_TOKEN) {
                    Standing::NoUser(auth_status.clone())
                } else {
                    Standing::Unknown
                }
            }
            _ => Standing::Unknown,
        }
    }
}

/// Whether etcd granted a key permission, from its answer to a probe with the user's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permission {
    Granted,
    /// 3.6's refusal (`isOpPermitted`'s errors, mapped).
    Refused(Answer),
    Unknown,
}

impl Permission {
    pub fn of(probe: &Answer) -> Permission {
        match probe {
            Answer::Ok { .. } => Permission::Granted,
            Answer::Status { code, message }
                if [PERMISSION_DENIED, OLD_REVISION].iter().any(|(c, m)| code == c && message == m) =>
            {
                Permission::Refused(probe.clone())
            }
            _ => Permission::Unknown,
        }
    }
}

/// 3.6's answer to a Txn whose added permission checks refuse it with `refusal`, from 3.5.1's answer to
/// the same Txn sent with a token no server issued. The gRPC handler's checks (`checkTxnRequest`,
/// `checkIntervals`, the same in both) come first; then 3.5.1 stops at the token, before anything is
/// applied, where 3.6 goes on to the permission checks. `None` when the handler refuses it (etcd refuses
/// the Txn itself the same way, so it goes there) or the probe says neither.
pub fn txn_refusal(garbage_probe: &Answer, refusal: Answer) -> Option<Answer> {
    match garbage_probe {
        Answer::Status { code, message } if (*code, message.as_str()) == INVALID_TOKEN => Some(refusal),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use prost_reflect::{DynamicMessage, Value};

    use super::super::catalog::Catalog;
    use super::super::request::Caller;
    use super::super::txn_permission::Need;
    use super::*;

    fn build(catalog: &Catalog, message_name: &str, fields: Vec<(&str, Value)>) -> DynamicMessage {
        let descriptor = catalog.pool.get_message_by_name(message_name).expect("message");
        let mut message = DynamicMessage::new(descriptor);
        for (name, value) in fields {
            message.set_field_by_name(name, value);
        }
        message
    }

    fn request(catalog: &Catalog, service: &str, method: &str, fields: Vec<(&str, Value)>) -> Request {
        let method = catalog.method(service, method).expect("method");
        let message = build(catalog, method.input.full_name(), fields);
        Request { method, message, caller: Caller::User(1), invalid_utf8_field: None }
    }

    fn put(catalog: &Catalog, key: &'static [u8], prev_kv: bool, lease: i64) -> Value {
        let fields = vec![
            ("key", Value::Bytes(Bytes::from_static(key))),
            ("prev_kv", Value::Bool(prev_kv)),
            ("lease", Value::I64(lease)),
        ];
        let put = build(catalog, "etcdserverpb.PutRequest", fields);
        Value::Message(build(catalog, "etcdserverpb.RequestOp", vec![("request_put", Value::Message(put))]))
    }

    #[test]
    fn each_hardened_method_gets_its_check() {
        let catalog = Catalog::load().expect("descriptors");
        let m = "etcdserverpb.Maintenance";
        let alarm = |action| request(&catalog, m, "Alarm", vec![("action", Value::EnumNumber(action))]);
        assert_eq!(guard(&alarm(0)), Some(Guard::User { etcd_checks_token: true, then: None }));
        for action in [1, 2, 7] {
            assert_eq!(guard(&alarm(action)), Some(Guard::Admin { etcd_checks_token: true }), "{action}");
        }
        let compact = request(&catalog, "etcdserverpb.KV", "Compact", vec![]);
        assert_eq!(guard(&compact), Some(Guard::Admin { etcd_checks_token: true }));
        for name in ["Defragment", "Hash", "HashKV"] {
            assert_eq!(guard(&request(&catalog, m, name, vec![])), Some(Guard::AdminUnmapped), "{name}");
        }
        let status = request(&catalog, m, "Status", vec![]);
        assert_eq!(guard(&status), Some(Guard::User { etcd_checks_token: false, then: None }));
        let lease = "etcdserverpb.Lease";
        let ttl = |keys| {
            request(&catalog, lease, "LeaseTimeToLive", vec![("ID", Value::I64(3)), ("keys", Value::Bool(keys))])
        };
        assert_eq!(guard(&ttl(false)), Some(Guard::User { etcd_checks_token: false, then: None }));
        let read = Some(KeyCheck::ReadLeaseKeys(3));
        assert_eq!(guard(&ttl(true)), Some(Guard::User { etcd_checks_token: false, then: read }));
        let keep_alive = request(&catalog, lease, "LeaseKeepAlive", vec![("ID", Value::I64(2))]);
        let write = Some(KeyCheck::WriteLeaseKeys(2));
        assert_eq!(guard(&keep_alive), Some(Guard::User { etcd_checks_token: false, then: write }));
        let grant = request(&catalog, lease, "LeaseGrant", vec![]);
        assert_eq!(guard(&grant), Some(Guard::User { etcd_checks_token: true, then: None }));
        assert_eq!(guard(&request(&catalog, "etcdserverpb.KV", "Range", vec![])), None);
        assert_eq!(guard(&request(&catalog, "etcdserverpb.Auth", "AuthStatus", vec![])), None);
    }

    #[test]
    fn a_txn_is_guarded_when_3_6_checks_more_of_it() {
        let catalog = Catalog::load().expect("descriptors");
        let txn = |fields| build(&catalog, "etcdserverpb.TxnRequest", fields);
        let nested = txn(vec![("failure", Value::List(vec![put(&catalog, b"k3", false, 0)]))]);
        let nested_op = build(&catalog, "etcdserverpb.RequestOp", vec![("request_txn", Value::Message(nested))]);
        let outer = txn(vec![
            ("success", Value::List(vec![put(&catalog, b"k1", true, 0), put(&catalog, b"k2", false, 0)])),
            ("failure", Value::List(vec![Value::Message(nested_op)])),
        ]);
        let method = catalog.method("etcdserverpb.KV", "Txn").expect("Txn");
        let request = Request { method, message: outer, caller: Caller::User(1), invalid_utf8_field: None };
        let Some(Guard::Txn(checks)) = guard(&request) else { panic!("a Txn guard") };
        let needs: Vec<_> = checks.added.iter().map(|check| (check.need.clone(), check.nested)).collect();
        let read_k1 = Need::Read { key: b"k1".to_vec(), range_end: vec![] };
        let write_k3 = Need::Write { key: b"k3".to_vec(), range_end: vec![] };
        assert_eq!(needs, vec![(read_k1, false), (write_k3, true)]);
        let plain = txn(vec![("success", Value::List(vec![put(&catalog, b"k2", false, 0)]))]);
        assert_eq!(guard(&Request { message: plain, ..request }), None);
    }

    #[test]
    fn unmapped_auth_errors_are_mapped_and_nothing_else_is() {
        let unknown = |m: &str| Answer::Status { code: Code::Unknown, message: m.to_string() };
        assert_eq!(mapped(&unknown("auth: permission denied")), Some(status(PERMISSION_DENIED)));
        assert_eq!(mapped(&unknown("auth: user name is empty")), Some(status(USER_EMPTY)));
        assert_eq!(mapped(&unknown("auth: invalid auth token")), Some(status(INVALID_TOKEN)));
        assert_eq!(mapped(&unknown("auth: user not found")), Some(status(USER_NOT_FOUND)));
        assert_eq!(mapped(&unknown("auth: role not found")), None);
        assert_eq!(mapped(&status(PERMISSION_DENIED)), None);
        assert_eq!(mapped(&Answer::Ok { revision: Some(1), detail: None }), None);
    }

    #[test]
    fn probe_answers_read_as_standing_permission_and_txn_refusal() {
        let ok = Answer::Ok { revision: Some(4), detail: None };
        assert_eq!(Standing::of(&ok), Standing::Admin);
        assert_eq!(Standing::of(&status(PERMISSION_DENIED)), Standing::NotAdmin(status(PERMISSION_DENIED)));
        assert_eq!(Standing::of(&status(USER_NOT_FOUND)), Standing::NotAdmin(status(USER_NOT_FOUND)));
        assert_eq!(Standing::of(&status(INVALID_TOKEN)), Standing::NoUser(status(INVALID_TOKEN)));
        assert_eq!(Standing::of(&status(USER_EMPTY)), Standing::NoUser(status(USER_EMPTY)));
        assert_eq!(Standing::of(&status((Code::Unavailable, "etcdserver: request timed out"))), Standing::Unknown);
        assert_eq!(Standing::of(&Answer::Timeout), Standing::Unknown);

        assert_eq!(Permission::of(&ok), Permission::Granted);
        assert_eq!(Permission::of(&status(PERMISSION_DENIED)), Permission::Refused(status(PERMISSION_DENIED)));
        assert_eq!(Permission::of(&status(OLD_REVISION)), Permission::Refused(status(OLD_REVISION)));
        let no_space = status((Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded"));
        assert_eq!(Permission::of(&no_space), Permission::Unknown);

        let denied = status(PERMISSION_DENIED);
        assert_eq!(txn_refusal(&status(INVALID_TOKEN), denied.clone()), Some(denied.clone()));
        let duplicate = status((Code::InvalidArgument, "etcdserver: duplicate key given in txn request"));
        assert_eq!(txn_refusal(&duplicate, denied.clone()), None);
        assert_eq!(txn_refusal(&ok, denied.clone()), None);
        assert_eq!(txn_refusal(&Answer::Timeout, denied), None);
    }
}
