//! clientv3's `concurrency.Mutex`: every contender puts `<name>/<lease id in hex>` under its
//! session's lease; the key with the oldest create revision holds the lock, the others wait for
//! the deletion of the key created just before theirs (no thundering herd).

use proto::etcdserverpb as pb;

use super::key::{by_create, create_revision_is, get_op, put_op, range_kvs, wait_deletes, KvClient};
use super::session::Session;
use crate::error::CliError;
use crate::global::Conn;

pub struct Mutex {
    /// `<name>/`.
    prefix: Vec<u8>,
    key: Vec<u8>,
    rev: i64,
    header: Option<pb::ResponseHeader>,
}

impl Mutex {
    pub fn new(name: &str) -> Mutex {
        Mutex { prefix: format!("{name}/").into_bytes(), key: Vec::new(), rev: -1, header: None }
    }

    /// Waits until this session holds the lock. Dropping the future abandons the wait; the
    /// caller then removes the key with [`Mutex::unlock`] (or by revoking the session).
    pub async fn lock(&mut self, conn: &Conn, session: &Session) -> Result<(), CliError> {
        self.key = [self.prefix.as_slice(), format!("{:x}", session.lease()).as_bytes()].concat();
        let owner = get_op(by_create(&self.prefix, true, 0));
        let txn = pb::TxnRequest {
            compare: vec![create_revision_is(&self.key, 0)],
            // Put ourselves in line; the oldest waiter holds the lock.
            success: vec![put_op(&self.key, b"", session.lease()), owner.clone()],
            // The session already waits (or holds it): keep our place in line.
            failure: vec![get_op(pb::RangeRequest { key: self.key.clone(), ..Default::default() }), owner],
        };
        let resp = KvClient::new(conn.clone()).txn(txn).await?.into_inner();
        self.rev = resp.header.as_ref().map_or(0, |h| h.revision);
        if !resp.succeeded {
            self.rev = range_kvs(&resp, 0).first().map_or(self.rev, |kv| kv.create_revision);
        }
        let holder = range_kvs(&resp, 1).first().map(|kv| kv.create_revision);
        if holder.is_none() || holder == Some(self.rev) {
            self.header = resp.header;
            return Ok(());
        }
        match wait_deletes(conn, &self.prefix, self.rev - 1).await {
            Ok(header) => {
                self.header = Some(header);
                Ok(())
            }
            Err(err) => {
                let _ = self.unlock(conn).await;
                Err(err)
            }
        }
    }

    pub async fn unlock(&mut self, conn: &Conn) -> Result<(), CliError> {
        let delete = pb::DeleteRangeRequest { key: self.key.clone(), ..Default::default() };
        KvClient::new(conn.clone()).delete_range(delete).await?;
        self.key = b"\0".to_vec();
        self.rev = -1;
        Ok(())
    }

    /// The key this session waits on or holds the lock with.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The header of the response that granted the lock.
    pub fn header(&self) -> Option<&pb::ResponseHeader> {
        self.header.as_ref()
    }
}
