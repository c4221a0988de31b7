//! The lease workload's requests: the gRPC clients a worker uses ([`Api`]), how each op is sent
//! (a keep-alive as one round trip on a stream of its own), how its answer or error becomes a
//! completion (`ok`, `fail` or `info`), and the recording of both in the history.

use std::time::Duration;

use proto::etcdserverpb as pb;
use tonic::transport::Channel;
use tonic::Code;

use crate::checker::lease::{LeaseGrant, LeaseKeepAlive, LeaseOp, LeasePut, LeaseRead, LeaseRevoke, Stored};
use crate::client::{self, prefix_end, with_timeout};
use crate::history::{Op, OpType};
use crate::recorder::Recorder;
use crate::workload::failed_kind;

/// The gRPC clients one worker uses.
pub(super) struct Api {
    kv: pb::kv_client::KvClient<Channel>,
    lease: pb::lease_client::LeaseClient<Channel>,
}

impl Api {
    pub(super) fn new(channel: &Channel) -> Api {
        Api {
            kv: pb::kv_client::KvClient::new(channel.clone()),
            lease: pb::lease_client::LeaseClient::new(channel.clone()),
        }
    }
}

/// Runs `op` under `process` and records its invocation and completion; `observe` sees the
/// completion payload and type before the next op is chosen. Returns the completion's type.
pub(super) async fn perform(
    api: &mut Api,
    recorder: &Recorder<LeaseOp>,
    process: u64,
    member: &str,
    op: LeaseOp,
    timeout: Duration,
    observe: impl FnOnce(&LeaseOp, OpType),
) -> OpType {
    recorder.record(|t| Op::invoke(process, op.clone(), t).with_member(member));
    let result = execute(api, &op, timeout).await;
    let (kind, payload, revision, error) = match result {
        Ok(Answer { payload, revision }) => (OpType::Ok, payload, revision, None),
        Err(err) => {
            let read = matches!(op, LeaseOp::Read(_) | LeaseOp::FinalRead(_));
            let kind = failed_kind(read, err.definite);
            (kind, err.payload.unwrap_or_else(|| op.clone()), None, Some(err.text))
        }
    };
    observe(&payload, kind);
    recorder.record(|t| {
        let mut done = Op::new(process, kind, payload, t).with_member(member);
        done.revision = revision;
        done.error = error;
        done
    });
    kind
}

/// An `ok` answer: the completion payload and the header revision.
struct Answer {
    payload: LeaseOp,
    revision: Option<i64>,
}

/// Why an op did not complete `ok`.
struct OpError {
    text: String,
    /// The op certainly had no effect (never sent, or the server refused it).
    definite: bool,
    /// The completion payload, when the error itself is an observation (a put's lease not found).
    payload: Option<LeaseOp>,
}

impl OpError {
    fn of(status: &tonic::Status) -> OpError {
        OpError { text: client::describe(status), definite: client::never_sent(status), payload: None }
    }
}

/// etcd's answer when a lease does not exist: `NotFound: etcdserver: requested lease not found`.
fn lease_not_found(status: &tonic::Status) -> bool {
    status.code() == Code::NotFound && status.message().contains("lease not found")
}

async fn execute(api: &mut Api, op: &LeaseOp, timeout: Duration) -> std::result::Result<Answer, OpError> {
    let header = |h: Option<&pb::ResponseHeader>| h.map(|h| h.revision);
    match op {
        LeaseOp::Grant(grant) => {
            let request = pb::LeaseGrantRequest { ttl: grant.ttl, id: grant.lease };
            let response = with_timeout(timeout, api.lease.lease_grant(request)).await.map_err(|s| OpError::of(&s))?;
            if response.id != grant.lease {
                let text = format!("granted lease {} instead of {}", response.id, grant.lease);
                return Err(OpError { text, definite: false, payload: None });
            }
            let done = LeaseGrant { granted_ttl: Some(response.ttl), ..grant.clone() };
            Ok(Answer { payload: LeaseOp::Grant(done), revision: None })
        }
        LeaseOp::Put(put) => {
            let request = pb::PutRequest {
                key: put.key.as_bytes().to_vec(),
                value: put.value.as_bytes().to_vec(),
                lease: put.lease,
                ..Default::default()
            };
            match with_timeout(timeout, api.kv.put(request)).await {
                Ok(response) => Ok(Answer { payload: op.clone(), revision: header(response.header.as_ref()) }),
                Err(status) if lease_not_found(&status) => {
                    let done = LeasePut { lease_not_found: true, ..put.clone() };
                    Err(OpError { text: client::describe(&status), definite: true, payload: Some(LeaseOp::Put(done)) })
                }
                Err(status) => Err(OpError::of(&status)),
            }
        }
        LeaseOp::Revoke(revoke) => {
            let request = pb::LeaseRevokeRequest { id: revoke.lease };
            let found = match with_timeout(timeout, api.lease.lease_revoke(request)).await {
                Ok(_) => true,
                Err(status) if lease_not_found(&status) => false,
                Err(status) => return Err(OpError::of(&status)),
            };
            Ok(Answer {
                payload: LeaseOp::Revoke(LeaseRevoke { found: Some(found), ..revoke.clone() }),
                revision: None,
            })
        }
        LeaseOp::KeepAlive(keep_alive) => {
            let ttl = keep_alive_once(&mut api.lease, keep_alive.lease, timeout).await.map_err(|s| OpError::of(&s))?;
            Ok(Answer {
                payload: LeaseOp::KeepAlive(LeaseKeepAlive { ttl: Some(ttl), ..keep_alive.clone() }),
                revision: None,
            })
        }
        LeaseOp::Read(read) | LeaseOp::FinalRead(read) => {
            let key = read.key.as_bytes().to_vec();
            let range_end = if read.prefix { prefix_end(&key) } else { Vec::new() };
            let request = pb::RangeRequest { key, range_end, ..Default::default() };
            let response = with_timeout(timeout, api.kv.range(request)).await.map_err(|s| OpError::of(&s))?;
            let found = response
                .kvs
                .iter()
                .map(|kv| Stored {
                    key: String::from_utf8_lossy(&kv.key).into_owned(),
                    value: String::from_utf8_lossy(&kv.value).into_owned(),
                    lease: kv.lease,
                })
                .collect();
            let done = LeaseRead { found: Some(found), ..read.clone() };
            let payload =
                if matches!(op, LeaseOp::FinalRead(_)) { LeaseOp::FinalRead(done) } else { LeaseOp::Read(done) };
            Ok(Answer { payload, revision: header(response.header.as_ref()) })
        }
    }
}

/// One keep-alive request and its answer's TTL, on a stream of its own. The request side stays open
/// until the answer arrives, so the server never sees the stream end before it has answered.
async fn keep_alive_once(
    lease: &mut pb::lease_client::LeaseClient<Channel>,
    id: i64,
    timeout: Duration,
) -> std::result::Result<i64, tonic::Status> {
    let (mut requests, stream) = futures::channel::mpsc::channel(1);
    requests
        .try_send(pb::LeaseKeepAliveRequest { id })
        .map_err(|err| tonic::Status::internal(format!("queue the keep-alive: {err}")))?;
    let round_trip = async {
        let mut answers = lease.lease_keep_alive(stream).await?.into_inner();
        answers.message().await?.ok_or_else(|| tonic::Status::unavailable("keep-alive stream ended without an answer"))
    };
    let answer =
        tokio::time::timeout(timeout, round_trip).await.map_err(|_| tonic::Status::deadline_exceeded("timeout"))??;
    drop(requests);
    Ok(answer.ttl)
}
