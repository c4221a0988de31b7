//! Requests etcd 3.5.1 must not see: what etcd would answer instead, when there is an answer.
//!
//! etcd 3.5.1 panics (and the whole process exits) on a Range, alone or inside a Txn at any depth, whose
//! `sort_target` is not one it knows while it sorts (etcd-io/etcd#13554). Later releases validate the
//! sort options in the gRPC handler, next to the other request checks, and answer `InvalidArgument`
//! "etcdserver: invalid sort option". Such requests go to ours only; etcd's answer is computed here by
//! running today's handler checks in their order (`checkRangeRequest`, `checkTxnRequest`, ...: the empty
//! key comes before the sort options), which is what a later etcd would have said. To stay on the safe
//! side an unknown `sort_order` is held back as well, although 3.5.1 only crashes on the target.
//!
//! Found by this fuzzer: etcd also panics on an Alarm request whose `action` is unknown (its applier
//! returns no response and no error, and the handler reads the missing response's header; the code is
//! the same in later releases), and 3.5.1 panics activating an alarm of an unknown type
//! ("unimplemented alarm activation"). There is no etcd answer to compare those with: they are held
//! back and ours' answers are listed apart.
//!
//! etcd 3.6 refuses a RoleGrantPermission whose range is not one (server/auth/store.go
//! `RoleGrantPermission`, range_perm_cache.go `isValidPermissionRange`, etcd-io/etcd 65eeb7ff1): an empty
//! key, or a `range_end` neither empty, nor `\0`, nor above the key. 3.5.1 grants it, and its roles part
//! from ours for good; such a grant is held back and answered as 3.6. As for the sort options, only when
//! 3.6 would get that far, in its order: the token (`processInternalRaftRequestOnce`), the request size,
//! the admin check (`authApplierV3.Apply`), the missing permission, then the range. The checks before the
//! range need etcd's auth state (is the token still valid, does the user hold the root role), so etcd is
//! asked: the same request without its permission runs them all in 3.5.1 too, changes nothing, and is
//! refused "permission not given" only when it got past them ([`grant_probe`], [`grant_refusal`]). Refused
//! earlier, the grant itself goes to etcd, which refuses it the same way.

use prost_reflect::DynamicMessage;
use tonic::Code;

use super::call::Answer;
use super::field;
use super::request::Request;
use super::rule::Rule36;

/// etcd's `--max-request-bytes` default plus the 512 KiB it lets gRPC take beyond it: a larger message is
/// refused by gRPC itself before any handler check.
const MAX_RECEIVE_BYTES: usize = 1024 * 1024 * 3 / 2 + 512 * 1024;
/// etcd's `--max-request-bytes` default: a larger raft request is refused before the admin check.
const MAX_REQUEST_BYTES: usize = 1024 * 1024 * 3 / 2;
/// What etcd adds to a request before it compares the raft request's size with the limit (its header),
/// with room to spare.
const RAFT_HEADER_ROOM: usize = 1024;
/// etcd's `--max-txn-ops` default.
const MAX_TXN_OPS: usize = 128;

const SORT_ORDERS: std::ops::RangeInclusive<i32> = 0..=2;
const SORT_TARGETS: std::ops::RangeInclusive<i32> = 0..=4;

/// Whether the request holds a Range with an unknown sort option anywhere (a Range, or a Txn's ops at
/// any depth).
pub fn has_unknown_sort(request: &Request) -> bool {
    match request.method.name.as_str() {
        "Range" => range_has_unknown_sort(&request.message),
        "Txn" => txn_has_unknown_sort(&request.message),
        _ => false,
    }
}

/// A request etcd 3.5.1 cannot take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// etcd 3.5.1 crashes on it; later releases answer this.
    AnswerToday(Answer),
    /// etcd 3.5.1 takes it and changes its store (or answers otherwise), where etcd 3.6 refuses it thus, by
    /// that rule.
    AnswerAs36(Answer, Rule36),
    /// etcd crashes on it; why.
    NoAnswer(&'static str),
}

/// Whether the request must be held back from etcd, and what stands in for etcd's answer. `wire_len` is
/// the length of the encoded request.
pub fn known(request: &Request, wire_len: usize) -> Option<Known> {
    if let Some(reason) = alarm_crash(request) {
        return Some(Known::NoAnswer(reason));
    }
    if wire_len <= MAX_RECEIVE_BYTES && password_too_long(request) {
        let message = "bcrypt: password length exceeds 72 bytes".to_string();
        return Some(Known::AnswerAs36(Answer::Status { code: Code::Unknown, message }, Rule36::PasswordTooLong));
    }
    etcd_answer_today(request, wire_len).map(Known::AnswerToday)
}

/// The longest password bcrypt hashes. etcd 3.6 (golang.org/x/crypto v0.52) refuses longer ones in
/// UserAdd and UserChangePassword before anything else (server/etcdserver/v3_server.go `UserAdd`,
/// `UserChangePassword`: the hash comes before the raft request); 3.5.1 (x/crypto of 2020) hashed their
/// first 72 bytes.
const BCRYPT_MAX_PASSWORD: usize = 72;

/// Whether etcd 3.6 would hash the request's password and find it too long: a UserAdd without
/// `no_password`, or a UserChangePassword with a password.
fn password_too_long(request: &Request) -> bool {
    let hashes = match request.method.name.as_str() {
        "UserAdd" => {
            !field::message(&request.message, "options").is_some_and(|options| field::boolean(options, "no_password"))
        }
        "UserChangePassword" => true,
        _ => return false,
    };
    hashes && field::text_len(&request.message, "password") > BCRYPT_MAX_PASSWORD
}

/// Why an Alarm request would crash etcd, if it would.
fn alarm_crash(request: &Request) -> Option<&'static str> {
    if request.method.name != "Alarm" {
        return None;
    }
    let (action, alarm) =
        (field::enum_number(&request.message, "action"), field::enum_number(&request.message, "alarm"));
    if !(0..=2).contains(&action) {
        return Some("etcd panics on an unknown Alarm action (a nil response); later releases too");
    }
    // ACTIVATE = 1; alarm types NONE, NOSPACE, CORRUPT = 0..=2.
    if action == 1 && !(0..=2).contains(&alarm) {
        return Some("etcd 3.5.1 panics activating an alarm of an unknown type");
    }
    None
}

/// etcd's answer from the table when the request holds an unknown sort option; `None` otherwise.
fn etcd_answer_today(request: &Request, wire_len: usize) -> Option<Answer> {
    if !has_unknown_sort(request) {
        return None;
    }
    if wire_len > MAX_RECEIVE_BYTES {
        let message = format!("grpc: received message larger than max ({wire_len} vs. {MAX_RECEIVE_BYTES})");
        return Some(Answer::Status { code: Code::ResourceExhausted, message });
    }
    let refusal = match request.method.name.as_str() {
        "Range" => check_range(&request.message),
        _ => check_txn(&request.message, MAX_TXN_OPS),
    };
    // A request with an unknown sort option always fails one of the checks.
    let message = refusal.unwrap_or(INVALID_SORT);
    Some(Answer::Status { code: Code::InvalidArgument, message: message.to_string() })
}

/// Whether etcd may refuse a request of `wire_len` bytes as too large once it is a raft request: that check
/// comes after the token's and before any permission check.
pub fn may_be_too_large(wire_len: usize) -> bool {
    wire_len + RAFT_HEADER_ROOM > MAX_REQUEST_BYTES
}

/// For a RoleGrantPermission whose range 3.6 refuses, its probe: the same request without its
/// permission. `None` for other requests, and for a grant too large for etcd (refused before any auth
/// check, by 3.5.1 as by 3.6).
pub fn grant_probe(request: &Request, wire_len: usize) -> Option<Request> {
    if request.method.name != "RoleGrantPermission" || may_be_too_large(wire_len) {
        return None;
    }
    let perm = field::message(&request.message, "perm")?;
    if valid_permission_range(&field::bytes(perm, "key"), &field::bytes(perm, "range_end")) {
        return None;
    }
    let mut probe = request.clone();
    probe.message.clear_field_by_name("perm");
    Some(probe)
}

/// What stands in for etcd's answer to a grant [`grant_probe`] picked, from etcd's answer to the probe:
/// 3.6's refusal when the probe got as far as the missing permission; `None` when an earlier check
/// refused it.
pub fn grant_refusal(probe_answer: &Answer) -> Option<Known> {
    let got_that_far = matches!(probe_answer, Answer::Status { code: Code::InvalidArgument, message }
        if message == "etcdserver: permission not given");
    got_that_far.then(|| {
        let message = "etcdserver: invalid auth management".to_string();
        Known::AnswerAs36(Answer::Status { code: Code::InvalidArgument, message }, Rule36::GrantInvalidRange)
    })
}

/// etcd 3.6's `isValidPermissionRange`.
fn valid_permission_range(key: &[u8], range_end: &[u8]) -> bool {
    !key.is_empty() && (range_end.is_empty() || key < range_end || range_end == b"\0")
}

const EMPTY_KEY: &str = "etcdserver: key is not provided";
const INVALID_SORT: &str = "etcdserver: invalid sort option";

fn range_has_unknown_sort(range: &DynamicMessage) -> bool {
    !SORT_ORDERS.contains(&field::enum_number(range, "sort_order"))
        || !SORT_TARGETS.contains(&field::enum_number(range, "sort_target"))
}

fn txn_has_unknown_sort(txn: &DynamicMessage) -> bool {
    ["success", "failure"].iter().any(|branch| {
        field::messages(txn, branch).iter().any(|op| {
            field::message(op, "request_range").is_some_and(range_has_unknown_sort)
                || field::message(op, "request_txn").is_some_and(txn_has_unknown_sort)
        })
    })
}

/// etcd's `checkRangeRequest`.
fn check_range(range: &DynamicMessage) -> Option<&'static str> {
    if field::bytes(range, "key").is_empty() {
        return Some(EMPTY_KEY);
    }
    if range_has_unknown_sort(range) {
        return Some(INVALID_SORT);
    }
    None
}

/// etcd's `checkTxnRequest`: the op count, then every compare's key, then the success ops, then the
/// failure ops, each with `checkRequestOp`.
fn check_txn(txn: &DynamicMessage, max_ops: usize) -> Option<&'static str> {
    let compares = field::messages(txn, "compare");
    let (success, failure) = (field::messages(txn, "success"), field::messages(txn, "failure"));
    let ops = compares.len().max(success.len()).max(failure.len());
    if ops > max_ops {
        return Some("etcdserver: too many operations in txn request");
    }
    if compares.iter().any(|c| field::bytes(c, "key").is_empty()) {
        return Some(EMPTY_KEY);
    }
    success.iter().chain(failure.iter()).find_map(|op| check_op(op, max_ops - ops))
}

/// etcd's `checkRequestOp`.
fn check_op(op: &DynamicMessage, max_ops: usize) -> Option<&'static str> {
    if let Some(range) = field::message(op, "request_range") {
        return check_range(range);
    }
    if let Some(put) = field::message(op, "request_put") {
        if field::bytes(put, "key").is_empty() {
            return Some(EMPTY_KEY);
        }
        if field::boolean(put, "ignore_value") && !field::bytes(put, "value").is_empty() {
            return Some("etcdserver: value is provided");
        }
        if field::boolean(put, "ignore_lease") && field::int64(put, "lease") != 0 {
            return Some("etcdserver: lease is provided");
        }
        return None;
    }
    if let Some(delete) = field::message(op, "request_delete_range") {
        return field::bytes(delete, "key").is_empty().then_some(EMPTY_KEY);
    }
    if let Some(txn) = field::message(op, "request_txn") {
        return check_txn(txn, max_ops);
    }
    // An empty op.
    Some("etcdserver: key not found")
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use prost_reflect::Value;

    use super::super::catalog::Catalog;
    use super::super::request::Caller;
    use super::*;

    fn build(catalog: &Catalog, message_name: &str, fields: &[(&str, Value)]) -> DynamicMessage {
        let descriptor = catalog.pool.get_message_by_name(message_name).expect("message");
        let mut message = DynamicMessage::new(descriptor);
        for (name, value) in fields {
            message.set_field_by_name(name, value.clone());
        }
        message
    }

    fn range(catalog: &Catalog, key: &'static [u8], target: i32) -> DynamicMessage {
        let fields = [("key", Value::Bytes(Bytes::from_static(key))), ("sort_target", Value::EnumNumber(target))];
        build(catalog, "etcdserverpb.RangeRequest", &fields)
    }

    fn op(catalog: &Catalog, case: &str, inner: DynamicMessage) -> Value {
        Value::Message(build(catalog, "etcdserverpb.RequestOp", &[(case, Value::Message(inner))]))
    }

    fn txn(catalog: &Catalog, branch: &str, ops: Vec<Value>) -> DynamicMessage {
        build(catalog, "etcdserverpb.TxnRequest", &[(branch, Value::List(ops))])
    }

    fn request(catalog: &Catalog, method: &str, message: DynamicMessage) -> Request {
        let method = catalog.method("etcdserverpb.KV", method).expect("method");
        Request { method, message, caller: Caller::Nobody, invalid_utf8_field: None }
    }

    fn answer(request: &Request) -> Option<String> {
        known(request, request.encode().len()).map(|k| match k {
            Known::AnswerToday(Answer::Status { code, message }) => format!("{code:?}: {message}"),
            other => format!("{other:?}"),
        })
    }

    #[test]
    fn unknown_sort_options_are_found_in_a_range_and_at_any_depth_of_a_txn() {
        let catalog = Catalog::load().expect("descriptors");
        let plain = request(&catalog, "Range", range(&catalog, b"k", 0));
        assert!(!has_unknown_sort(&plain) && answer(&plain).is_none());
        let bad = request(&catalog, "Range", range(&catalog, b"k", 7));
        assert_eq!(answer(&bad).as_deref(), Some("InvalidArgument: etcdserver: invalid sort option"));
        let empty_key = request(&catalog, "Range", range(&catalog, b"", 7));
        assert_eq!(answer(&empty_key).as_deref(), Some("InvalidArgument: etcdserver: key is not provided"));

        // Txn { failure: [Txn { success: [Range(sort_target 1000)] }] }
        let inner = txn(&catalog, "success", vec![op(&catalog, "request_range", range(&catalog, b"k", 1000))]);
        let outer = txn(&catalog, "failure", vec![op(&catalog, "request_txn", inner)]);
        let nested = request(&catalog, "Txn", outer);
        assert!(has_unknown_sort(&nested));
        assert_eq!(answer(&nested).as_deref(), Some("InvalidArgument: etcdserver: invalid sort option"));

        // An empty op before the bad range is refused first, as etcd checks ops in order.
        let empty_op = Value::Message(build(&catalog, "etcdserverpb.RequestOp", &[]));
        let ordered = txn(&catalog, "success", vec![empty_op, op(&catalog, "request_range", range(&catalog, b"k", 9))]);
        assert_eq!(
            answer(&request(&catalog, "Txn", ordered)).as_deref(),
            Some("InvalidArgument: etcdserver: key not found")
        );
        let harmless = txn(&catalog, "success", vec![op(&catalog, "request_range", range(&catalog, b"k", 4))]);
        assert!(!has_unknown_sort(&request(&catalog, "Txn", harmless)));
    }

    #[test]
    fn passwords_past_72_bytes_get_etcd_36s_bcrypt_refusal() {
        let catalog = Catalog::load().expect("descriptors");
        let call = |method: &str, password: usize, no_password: bool| {
            let method = catalog.method("etcdserverpb.Auth", method).expect("method");
            let mut message = DynamicMessage::new(method.input.clone());
            message.set_field_by_name("name", Value::String("u".into()));
            message.set_field_by_name("password", Value::String("p".repeat(password)));
            if no_password {
                let options = build(&catalog, "authpb.UserAddOptions", &[("no_password", Value::Bool(true))]);
                message.set_field_by_name("options", Value::Message(options));
            }
            let request = Request { method, message, caller: Caller::Nobody, invalid_utf8_field: None };
            known(&request, request.encode().len())
        };
        let refused = Some(Known::AnswerAs36(
            Answer::Status { code: Code::Unknown, message: "bcrypt: password length exceeds 72 bytes".into() },
            Rule36::PasswordTooLong,
        ));
        assert_eq!(call("UserAdd", 73, false), refused);
        assert_eq!(call("UserChangePassword", 100, false), refused);
        assert_eq!(call("UserAdd", 72, false), None);
        assert_eq!(call("UserAdd", 73, true), None, "a user without a password is not hashed");
    }

    #[test]
    fn alarms_etcd_crashes_on_are_held_back_without_an_answer() {
        let catalog = Catalog::load().expect("descriptors");
        let alarm = |action: i32, alarm: i32| {
            let fields = [("action", Value::EnumNumber(action)), ("alarm", Value::EnumNumber(alarm))];
            let method = catalog.method("etcdserverpb.Maintenance", "Alarm").expect("Alarm");
            let message = build(&catalog, "etcdserverpb.AlarmRequest", &fields);
            let request = Request { method, message, caller: Caller::Nobody, invalid_utf8_field: None };
            known(&request, 0)
        };
        assert!(matches!(alarm(7, 0), Some(Known::NoAnswer(_))));
        assert!(matches!(alarm(-1, 1), Some(Known::NoAnswer(_))));
        assert!(matches!(alarm(1, 1000), Some(Known::NoAnswer(_))));
        assert_eq!(alarm(1, 1), None);
        assert_eq!(alarm(2, 1000), None);
        assert_eq!(alarm(0, 7), None);
    }

    #[test]
    fn grants_of_ranges_3_6_refuses_are_probed_without_their_permission() {
        let catalog = Catalog::load().expect("descriptors");
        let method = catalog.method("etcdserverpb.Auth", "RoleGrantPermission").expect("RoleGrantPermission");
        let grant = |perm: Option<(&'static [u8], &'static [u8])>| {
            let mut message = build(&catalog, "etcdserverpb.AuthRoleGrantPermissionRequest", &[]);
            message.set_field_by_name("name", Value::String("r1".into()));
            if let Some((key, range_end)) = perm {
                let fields = [
                    ("key", Value::Bytes(Bytes::from_static(key))),
                    ("range_end", Value::Bytes(Bytes::from_static(range_end))),
                ];
                message.set_field_by_name("perm", Value::Message(build(&catalog, "authpb.Permission", &fields)));
            }
            Request { method: method.clone(), message, caller: Caller::User(0), invalid_utf8_field: None }
        };
        let probed = |perm| grant_probe(&grant(perm), 100).map(|probe| probe.message.has_field_by_name("perm"));
        for refused in [(&b""[..], &b""[..]), (b"", b"\0"), (b"k5", b"k1"), (b"k5", b"k5"), (b"k5", b"\0\0")] {
            assert_eq!(probed(Some(refused)), Some(false), "{refused:?}");
        }
        for valid in [(&b"k5"[..], &b""[..]), (b"k5", b"\0"), (b"k5", b"k6"), (b"\0", b"\0")] {
            assert_eq!(probed(Some(valid)), None, "{valid:?}");
        }
        assert_eq!(probed(None), None);
        assert!(grant_probe(&grant(Some((b"k5", b"k1"))), MAX_REQUEST_BYTES).is_none());

        let status = |code, message: &str| Answer::Status { code, message: message.to_string() };
        assert_eq!(
            grant_refusal(&status(Code::InvalidArgument, "etcdserver: permission not given")),
            Some(Known::AnswerAs36(
                status(Code::InvalidArgument, "etcdserver: invalid auth management"),
                Rule36::GrantInvalidRange
            ))
        );
        assert_eq!(grant_refusal(&status(Code::PermissionDenied, "etcdserver: permission denied")), None);
        assert_eq!(grant_refusal(&status(Code::InvalidArgument, "etcdserver: user name is empty")), None);
    }
}
