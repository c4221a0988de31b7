//! Requests the fuzzer sends etcd 3.5.1 on its own account, to learn what 3.6's added auth checks
//! ([`super::guard`]) would find there: who a token belongs to, whether a user may read or write a key or
//! range, which keys a lease holds, whether an alarm is raised. None of them changes etcd's store (or its
//! revision), so the two stores stay in step; none goes to ours.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use proto::etcdserverpb as pb;
use tonic::transport::Channel;

use super::call::{self, Answer, Call};
use super::catalog::Shape;
use super::guard::{Permission, Standing};

/// etcd, where the probes go.
#[derive(Clone, Copy)]
pub struct Probe<'a> {
    pub channel: &'a Channel,
    pub timeout: Duration,
}

impl Probe<'_> {
    /// The answer to a unary request.
    pub async fn ask(&self, path: &str, body: Bytes, token: Option<&str>) -> Answer {
        let call = self.call(path, body, token);
        let answer = call::send(call).await;
        tracing::debug!(path, answer = ?answer, "auth probe");
        answer
    }

    /// The decoded OK response to a unary request; `None` for any other answer.
    async fn fetch<M: Message + Default>(&self, path: &str, body: Bytes, token: Option<&str>) -> Option<M> {
        let bytes = call::response(self.call(path, body, token)).await;
        tracing::debug!(path, answered = bytes.is_ok(), "auth probe");
        M::decode(bytes.ok()?).ok()
    }

    fn call<'c>(&'c self, path: &'c str, body: Bytes, token: Option<&'c str>) -> Call<'c> {
        Call {
            channel: self.channel,
            path,
            shape: Shape::Unary,
            body,
            token,
            timeout: self.timeout,
            requested_watch_id: None,
        }
    }

    /// Who `token` belongs to: an AuthStatus with it (see [`Standing`]).
    pub async fn standing(&self, token: Option<&str>) -> Standing {
        let body = Bytes::from(pb::AuthStatusRequest {}.encode_to_vec());
        Standing::of(&self.ask("/etcdserverpb.Auth/AuthStatus", body, token).await)
    }

    /// Whether `token`'s user may read `key` (to `range_end`): a serializable count-only Range of them,
    /// which runs `IsRangePermitted(key, range_end)` as 3.6's checks do.
    pub async fn read(&self, token: Option<&str>, key: &[u8], range_end: &[u8]) -> Permission {
        let range = pb::RangeRequest {
            key: key.to_vec(),
            range_end: range_end.to_vec(),
            serializable: true,
            count_only: true,
            ..Default::default()
        };
        Permission::of(&self.ask("/etcdserverpb.KV/Range", Bytes::from(range.encode_to_vec()), token).await)
    }

    /// Whether `token`'s user may write `key` (to `range_end`): a Txn without compares whose empty success
    /// branch runs, and whose failure branch puts the key (or deletes the range). 3.5.1's
    /// `checkTxnPermission` checks both branches' ops (`IsPutPermitted`, `IsDeleteRangePermitted`) before
    /// anything runs, so a refusal shows, and nothing is written either way. A single key is put rather
    /// than deleted: while a NOSPACE alarm is raised 3.5.1 checks no permission, and the Put is refused as
    /// NoSpace (unknown) where a DeleteRange would pass as granted.
    pub async fn write(&self, token: Option<&str>, key: &[u8], range_end: &[u8]) -> Permission {
        use pb::request_op::Request;
        let op = if range_end.is_empty() {
            Request::RequestPut(pb::PutRequest { key: key.to_vec(), ..Default::default() })
        } else {
            let delete =
                pb::DeleteRangeRequest { key: key.to_vec(), range_end: range_end.to_vec(), ..Default::default() };
            Request::RequestDeleteRange(delete)
        };
        let txn = pb::TxnRequest { failure: vec![pb::RequestOp { request: Some(op) }], ..Default::default() };
        Permission::of(&self.ask("/etcdserverpb.KV/Txn", Bytes::from(txn.encode_to_vec()), token).await)
    }

    /// Whether etcd has an alarm raised: an Alarm GET without a token. 3.5.1 lists alarms to anyone (no
    /// admin check at apply, `needAdminPermission`; no token is no user, not a refusal), whereas root's
    /// token may have been dropped by a fuzzed request.
    pub async fn alarm_raised(&self) -> Option<bool> {
        let body = Bytes::from(pb::AlarmRequest::default().encode_to_vec());
        let response: pb::AlarmResponse = self.fetch("/etcdserverpb.Maintenance/Alarm", body, None).await?;
        Some(!response.alarms.is_empty())
    }

    /// The keys lease `id` holds (none when it does not exist), asked with `root`'s token.
    pub async fn lease_keys(&self, root: Option<&str>, id: i64) -> Option<Vec<Vec<u8>>> {
        let body = Bytes::from(pb::LeaseTimeToLiveRequest { id, keys: true }.encode_to_vec());
        let response: pb::LeaseTimeToLiveResponse =
            self.fetch("/etcdserverpb.Lease/LeaseTimeToLive", body, root).await?;
        Some(response.keys)
    }

    /// The ids of every lease, asked with `root`'s token.
    pub async fn lease_ids(&self, root: Option<&str>) -> Option<Vec<i64>> {
        let body = Bytes::from(pb::LeaseLeasesRequest {}.encode_to_vec());
        let response: pb::LeaseLeasesResponse = self.fetch("/etcdserverpb.Lease/LeaseLeases", body, root).await?;
        Some(response.leases.iter().map(|lease| lease.id).collect())
    }
}
