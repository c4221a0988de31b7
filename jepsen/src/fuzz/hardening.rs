//! etcd 3.6.14's auth hardening (the 2026 backports etcd-io/etcd 7f73a57b8, c99cf0c39, 576a6a00c,
//! 633de82d0) and its permission checks inside nested Txns as 3.6 rules: while etcd has auth on, a request
//! one of [`super::guard`]'s checks refuses in 3.6 is held back from etcd and 3.6's refusal stands in for
//! its answer, so that 3.5.1 neither answers otherwise nor applies what 3.6 refuses (a lease granted, a
//! compaction, an alarm, a Txn). Whether a check refuses depends on etcd's auth state (is the token still
//! valid, does the user hold the root role, may it read or write a key, a range, a lease's keys), so etcd
//! is asked ([`super::probe`]). When a probe gets no clear answer the request goes to etcd as before. With
//! auth off every one of these checks passes in 3.6: nothing changes.

use bytes::Bytes;

use super::call::Answer;
use super::etcd36::Credential;
use super::guard::{self, Guard, KeyCheck, Permission, Standing, INVALID_TOKEN, USER_EMPTY};
use super::known;
use super::probe::Probe;
use super::request::Request;
use super::rule::Rule36;
use super::txn_permission::{Need, TxnChecks};

/// What the rules know of the caller, and where to ask the rest.
pub struct Context<'a> {
    pub probe: Probe<'a>,
    /// What etcd is given to tell who calls.
    pub credential: Credential,
    /// The caller's token at etcd.
    pub token: Option<&'a str>,
    /// Root's token at etcd: to list leases and their keys whatever the caller may see.
    pub root: Option<&'a str>,
    /// A token no server issued: to run etcd's handler checks on a request without applying it.
    pub garbage: Option<&'a str>,
}

/// 3.6's refusal of the request and the rule that refuses it, when etcd must not get it; `None` when it
/// goes to etcd (3.6 would not refuse it, or it is not known whether it would).
pub async fn held_back(request: &Request, body: &Bytes, cx: &Context<'_>) -> Option<(Answer, Rule36)> {
    match guard::guard(request)? {
        // 3.5.1 runs that check itself; only its answer is turned into 3.6's ([`mapped`]).
        Guard::AdminUnmapped => None,
        Guard::Admin { etcd_checks_token } => admin(cx, etcd_checks_token).await.map(|a| (a, Rule36::AdminRequired)),
        Guard::User { etcd_checks_token, then } => user(cx, etcd_checks_token, then).await,
        Guard::Txn(checks) => txn(request, body, &checks, cx).await,
    }
}

/// 3.6's answer for etcd's answer to an admin-only maintenance request, where 3.5.1 left the refusal
/// unmapped.
pub fn mapped(request: &Request, etcd: &Answer) -> Option<Answer> {
    if guard::guard(request) != Some(Guard::AdminUnmapped) {
        return None;
    }
    guard::mapped(etcd)
}

/// `isPermitted`: no token is no user, a garbage token is invalid, a token etcd issued is asked about.
async fn admin(cx: &Context<'_>, etcd_checks_token: bool) -> Option<Answer> {
    match cx.credential {
        Credential::NoToken => Some(guard::status(USER_EMPTY)),
        // 3.5.1 refuses the same token the same way, before anything is applied.
        Credential::Garbage if etcd_checks_token => None,
        Credential::Garbage => Some(guard::status(INVALID_TOKEN)),
        Credential::Token => match cx.probe.standing(cx.token).await {
            Standing::NotAdmin(refusal) | Standing::NoUser(refusal) => Some(refusal),
            Standing::Admin | Standing::Unknown => None,
        },
    }
}

/// `requireAuthInfo`, then the lease's key checks for a user without the root role.
async fn user(cx: &Context<'_>, etcd_checks_token: bool, then: Option<KeyCheck>) -> Option<(Answer, Rule36)> {
    let refused = |answer| Some((answer, Rule36::UserRequired));
    match cx.credential {
        Credential::NoToken => return refused(guard::status(USER_EMPTY)),
        Credential::Garbage if etcd_checks_token => return None,
        Credential::Garbage => return refused(guard::status(INVALID_TOKEN)),
        Credential::Token if etcd_checks_token && then.is_none() => return None,
        Credential::Token => {}
    }
    match cx.probe.standing(cx.token).await {
        Standing::NoUser(refusal) => refused(refusal),
        Standing::NotAdmin(_) => key_refusal(cx, then?).await.map(|a| (a, Rule36::LeaseKeys)),
        // An admin skips the key checks (`IsAdminPermitted` comes first in each).
        Standing::Admin | Standing::Unknown => None,
    }
}

/// The first refusal of the key checks, in the lessor's order; `None` when all pass or one is not known.
async fn key_refusal(cx: &Context<'_>, check: KeyCheck) -> Option<Answer> {
    let (ids, write) = match check {
        KeyCheck::ReadLeaseKeys(id) => (vec![id], false),
        KeyCheck::WriteLeaseKeys(id) => (vec![id], true),
        KeyCheck::ReadAllLeaseKeys => (cx.probe.lease_ids(cx.root).await?, false),
    };
    for id in ids {
        for key in cx.probe.lease_keys(cx.root, id).await? {
            let permission = if write {
                cx.probe.write(cx.token, &key, &[]).await
            } else {
                cx.probe.read(cx.token, &key, &[]).await
            };
            if let Some(verdict) = first_refusal(permission) {
                return verdict;
            }
        }
    }
    None
}

/// A Txn that 3.6 refuses at one of the permission checks it adds ([`super::txn_permission`]), where
/// 3.5.1 may take (and apply) it. 3.6 gets there last, after the handler's checks, the token, the request
/// size and the alarms; every check before refuses the same way for one caller (`isOpPermitted`: no
/// user, an old auth revision, else "permission denied"), so the first refusal of the added checks is
/// 3.6's answer whatever 3.5.1 would make of the others.
///
/// - No token: 3.6's first check refuses "user name is empty"; 3.5.1 refuses so too unless it checks
///   nothing, which is when the rule applies.
/// - A token etcd issued, of a user without the root role: etcd is asked about each added check.
/// - A garbage token, a token etcd dropped, an admin: 3.5.1 answers as 3.6 (or checks pass in both).
/// - Near etcd's size limit: 3.6 refuses it as too large, between the token and the permissions, where
///   the probe with a garbage token stops at the token; it goes to etcd, which answers the same.
async fn txn(request: &Request, body: &Bytes, checks: &TxnChecks, cx: &Context<'_>) -> Option<(Answer, Rule36)> {
    if known::may_be_too_large(body.len()) {
        return None;
    }
    let (refusal, rule) = match cx.credential {
        Credential::NoToken if checks.refused_only_without_user_by_36() => {
            (guard::status(USER_EMPTY), Rule36::TxnNested)
        }
        Credential::Token => {
            let Standing::NotAdmin(_) = cx.probe.standing(cx.token).await else { return None };
            txn_check_refusal(cx, checks).await?
        }
        Credential::NoToken | Credential::Garbage => return None,
    };
    // An alarm changes the apply chain: 3.6 refuses writes as NoSpace (corrupt: everything) before the
    // permission checks, and 3.5.1 checks no permission while one is raised, so its write probes say
    // nothing. Asked only now, as alarms are rare and refusals few.
    if cx.probe.alarm_raised().await != Some(false) {
        return None;
    }
    let probe = cx.probe.ask(&request.method.path(), body.clone(), cx.garbage).await;
    guard::txn_refusal(&probe, refusal).map(|answer| (answer, rule))
}

/// The first refusal of the added checks, in 3.6's order, with the rule it answers for; `None` when all
/// pass or one is not known.
async fn txn_check_refusal(cx: &Context<'_>, checks: &TxnChecks) -> Option<(Answer, Rule36)> {
    for check in &checks.added {
        let verdict = match &check.need {
            Need::Read { key, range_end } => first_refusal(cx.probe.read(cx.token, key, range_end).await),
            Need::Write { key, range_end } => first_refusal(cx.probe.write(cx.token, key, range_end).await),
            Need::WriteLeaseKeys(id) => lease_refusal(cx, *id).await,
        };
        if let Some(refusal) = verdict {
            return refusal.map(|answer| (answer, check.rule()));
        }
    }
    None
}

/// `checkLeasePuts`: write on every key of the lease, in the lessor's order; [`first_refusal`]'s verdict.
async fn lease_refusal(cx: &Context<'_>, id: i64) -> Option<Option<Answer>> {
    let Some(keys) = cx.probe.lease_keys(cx.root, id).await else { return Some(None) };
    for key in keys {
        if let Some(verdict) = first_refusal(cx.probe.write(cx.token, &key, &[]).await) {
            return Some(verdict);
        }
    }
    None
}

/// Whether the checks stop at this permission, and with what: `Some(Some(refusal))` refused,
/// `Some(None)` not known (so nothing is), `None` granted (go on).
fn first_refusal(permission: Permission) -> Option<Option<Answer>> {
    match permission {
        Permission::Granted => None,
        Permission::Refused(refusal) => Some(Some(refusal)),
        Permission::Unknown => Some(None),
    }
}

#[cfg(test)]
mod tests {
    use prost_reflect::{DynamicMessage, Value};
    use tonic::Code;

    use super::super::catalog::Catalog;
    use super::super::request::Caller;
    use super::*;

    #[test]
    fn a_refused_permission_stops_the_checks_and_an_unknown_one_drops_the_rule() {
        let denied = guard::status(guard::PERMISSION_DENIED);
        assert_eq!(first_refusal(Permission::Granted), None);
        assert_eq!(first_refusal(Permission::Refused(denied.clone())), Some(Some(denied)));
        assert_eq!(first_refusal(Permission::Unknown), Some(None));
    }

    #[test]
    fn only_admin_maintenance_answers_are_mapped() {
        let catalog = Catalog::load().expect("descriptors");
        let request = |service: &str, name: &str| {
            let method = catalog.method(service, name).expect("method");
            let message = DynamicMessage::new(method.input.clone());
            Request { method, message, caller: Caller::User(1), invalid_utf8_field: None }
        };
        let unmapped = Answer::Status { code: Code::Unknown, message: "auth: permission denied".into() };
        let hash_kv = request("etcdserverpb.Maintenance", "HashKV");
        assert_eq!(mapped(&hash_kv, &unmapped), Some(guard::status(guard::PERMISSION_DENIED)));
        assert_eq!(mapped(&request("etcdserverpb.KV", "Range"), &unmapped), None);
        let ok = Answer::Ok { revision: Some(1), detail: None };
        assert_eq!(mapped(&hash_kv, &ok), None);
        let mut alarm = request("etcdserverpb.Maintenance", "Alarm");
        alarm.message.set_field_by_name("action", Value::EnumNumber(1));
        assert_eq!(mapped(&alarm, &unmapped), None);
    }
}
