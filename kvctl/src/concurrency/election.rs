//! clientv3's `concurrency.Election`: candidates put `<name>/<lease id in hex>` with their
//! proposal as value; the oldest key is the leader. Observers follow the oldest key and its
//! updates.

use proto::etcdserverpb as pb;
use proto::mvccpb::event::EventType;
use proto::mvccpb::KeyValue;

use super::key::{by_create, create_revision_is, delete_op, get_op, put_op, range_kvs, wait_deletes, KvClient};
use super::session::Session;
use super::watcher::{Delivery, WatchStream};
use crate::error::{CliError, EXIT_ERROR};
use crate::global::Conn;
use crate::prefix::prefix_end;

pub struct Election {
    /// `<name>/`.
    prefix: Vec<u8>,
    leader_key: Vec<u8>,
    leader_rev: i64,
    /// The lease of our candidacy; `None` when not campaigning.
    leader_lease: Option<i64>,
}

impl Election {
    pub fn new(name: &str) -> Election {
        Election { prefix: format!("{name}/").into_bytes(), leader_key: Vec::new(), leader_rev: 0, leader_lease: None }
    }

    /// Puts our candidacy with `value` and waits until every older candidate is gone.
    pub async fn campaign(&mut self, conn: &Conn, session: &Session, value: &[u8]) -> Result<(), CliError> {
        let key = [self.prefix.as_slice(), format!("{:x}", session.lease()).as_bytes()].concat();
        let txn = pb::TxnRequest {
            compare: vec![create_revision_is(&key, 0)],
            success: vec![put_op(&key, value, session.lease())],
            failure: vec![get_op(pb::RangeRequest { key: key.clone(), ..Default::default() })],
        };
        let resp = KvClient::new(conn.clone()).txn(txn).await?.into_inner();
        self.leader_key = key;
        self.leader_rev = resp.header.as_ref().map_or(0, |h| h.revision);
        self.leader_lease = Some(session.lease());
        if !resp.succeeded {
            // This session campaigned before: keep its place, update the proposal if it changed.
            let previous = range_kvs(&resp, 0).first().cloned().unwrap_or_default();
            self.leader_rev = previous.create_revision;
            if previous.value != value {
                if let Err(err) = self.proclaim(conn, value).await {
                    let _ = self.resign(conn).await;
                    return Err(err);
                }
            }
        }
        if let Err(err) = wait_deletes(conn, &self.prefix, self.leader_rev - 1).await {
            self.leader_lease = None;
            return Err(err);
        }
        Ok(())
    }

    /// Lets the leader announce a new value without a new election.
    pub async fn proclaim(&mut self, conn: &Conn, value: &[u8]) -> Result<(), CliError> {
        let Some(lease) = self.leader_lease else { return Err(not_leader()) };
        let txn = pb::TxnRequest {
            compare: vec![create_revision_is(&self.leader_key, self.leader_rev)],
            success: vec![put_op(&self.leader_key, value, lease)],
            failure: Vec::new(),
        };
        let resp = KvClient::new(conn.clone()).txn(txn).await?.into_inner();
        if !resp.succeeded {
            self.leader_key.clear();
            return Err(not_leader());
        }
        Ok(())
    }

    /// Gives up leadership (or candidacy): deletes our key if it is still the one we created.
    pub async fn resign(&mut self, conn: &Conn) -> Result<(), CliError> {
        if self.leader_lease.take().is_none() {
            return Ok(());
        }
        let txn = pb::TxnRequest {
            compare: vec![create_revision_is(&self.leader_key, self.leader_rev)],
            success: vec![delete_op(&self.leader_key)],
            failure: Vec::new(),
        };
        let result = KvClient::new(conn.clone()).txn(txn).await;
        self.leader_key.clear();
        result.map(|_| ()).map_err(CliError::from)
    }

    /// Our candidacy key once elected.
    pub fn key(&self) -> &[u8] {
        &self.leader_key
    }

    /// Hands every leader, and every new value of the current leader, to `on_leader` in order, as
    /// clientv3's `Observe` does. Returns `on_leader`'s error, or "elect: observer lost" when a
    /// request or the watch fails (clientv3 just closes the channel then).
    pub async fn observe(
        &self,
        conn: &Conn,
        mut on_leader: impl FnMut(&pb::RangeResponse) -> Result<(), CliError>,
    ) -> Result<(), CliError> {
        let mut kv = KvClient::new(conn.clone());
        loop {
            let mut resp = kv.range(by_create(&self.prefix, true, 0)).await.map_err(|_| observer_lost())?.into_inner();
            let (header, leader) = match resp.kvs.first() {
                Some(leader) => (resp.header.unwrap_or_default(), leader.clone()),
                None => {
                    let revision = resp.header.as_ref().map_or(0, |h| h.revision);
                    self.first_candidate(conn, revision).await?
                }
            };
            // A new leader is reported with just the header and its key (no count); its updates
            // reuse the range response, count and all, as clientv3 does.
            let first = pb::RangeResponse { header: Some(header), kvs: vec![leader.clone()], ..Default::default() };
            on_leader(&first)?;
            follow_leader(conn, &leader.key, header.revision + 1, &mut resp, &mut on_leader).await?;
        }
    }

    /// Waits for the first PUT under the prefix from `revision` on; the header's revision is set
    /// to that PUT's.
    async fn first_candidate(&self, conn: &Conn, revision: i64) -> Result<(pb::ResponseHeader, KeyValue), CliError> {
        let request = pb::WatchCreateRequest {
            key: self.prefix.clone(),
            range_end: prefix_end(&self.prefix),
            start_revision: revision,
            ..Default::default()
        };
        let (mut stream, _) = WatchStream::open(conn, false, request).await.map_err(|_| observer_lost())?;
        while let Some(Delivery::Response(_, resp)) = stream.next().await {
            if resp.err().is_some() {
                break;
            }
            let put = resp.events().iter().find(|e| e.r#type == EventType::Put as i32);
            if let Some(kv) = put.and_then(|e| e.kv.clone()) {
                let header = pb::ResponseHeader { revision: kv.mod_revision, ..resp.header };
                return Ok((header, kv));
            }
        }
        Err(observer_lost())
    }
}

/// Reports every new value of the leader key until it is deleted.
async fn follow_leader(
    conn: &Conn,
    key: &[u8],
    start_revision: i64,
    resp: &mut pb::RangeResponse,
    on_leader: &mut impl FnMut(&pb::RangeResponse) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let request = pb::WatchCreateRequest { key: key.to_vec(), start_revision, ..Default::default() };
    let (mut stream, _) = WatchStream::open(conn, false, request).await.map_err(|_| observer_lost())?;
    while let Some(Delivery::Response(_, update)) = stream.next().await {
        for event in update.events() {
            if event.r#type == EventType::Delete as i32 {
                return Ok(());
            }
            resp.header = Some(update.header);
            resp.kvs = event.kv.clone().into_iter().collect();
            on_leader(resp)?;
        }
    }
    Err(observer_lost())
}

fn not_leader() -> CliError {
    CliError::new(EXIT_ERROR, "election: not leader")
}

fn observer_lost() -> CliError {
    CliError::new(EXIT_ERROR, "elect: observer lost")
}
