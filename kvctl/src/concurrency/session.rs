//! clientv3's `concurrency.Session`: a lease kept alive in the background for as long as the
//! client runs. Keys a recipe writes are attached to it, so they vanish when the client dies.

use std::time::Duration;

use proto::etcdserverpb as pb;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::CliError;
use crate::global::Conn;

/// clientv3's `defaultSessionTTL`, in seconds.
pub const DEFAULT_TTL: i64 = 60;

/// How long to wait before re-opening a broken keep-alive stream.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

pub struct Session {
    conn: Conn,
    lease: i64,
    ttl: i64,
    keep_alive: JoinHandle<()>,
}

impl Session {
    /// Grants a lease of `ttl` seconds (clientv3's `WithTTL` ignores values below 1) and starts
    /// keeping it alive.
    pub async fn new(conn: &Conn, ttl: i64) -> Result<Session, CliError> {
        let ttl = if ttl > 0 { ttl } else { DEFAULT_TTL };
        let mut leases = pb::lease_client::LeaseClient::new(conn.clone());
        let granted = leases.lease_grant(pb::LeaseGrantRequest { ttl, id: 0 }).await?.into_inner();
        if !granted.error.is_empty() {
            return Err(CliError::new(crate::error::EXIT_ERROR, granted.error));
        }
        let keep_alive = tokio::spawn(keep_alive(conn.clone(), granted.id, granted.ttl));
        Ok(Session { conn: conn.clone(), lease: granted.id, ttl, keep_alive })
    }

    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// Resolves when the lease can no longer be kept alive (it expired or the cluster was out
    /// of reach for longer than its TTL): clientv3's `Session.Done()`.
    pub async fn done(&mut self) {
        let _ = (&mut self.keep_alive).await;
    }

    /// Stops the keep-alives and revokes the lease, which deletes every key attached to it.
    /// Bounded by the TTL: past it the lease is gone anyway.
    pub async fn close(self) -> Result<(), CliError> {
        self.keep_alive.abort();
        let mut leases = pb::lease_client::LeaseClient::new(self.conn.clone());
        let revoke = leases.lease_revoke(pb::LeaseRevokeRequest { id: self.lease });
        match tokio::time::timeout(Duration::from_secs(self.ttl.unsigned_abs()), revoke).await {
            Ok(result) => result.map(|_| ()).map_err(CliError::from),
            Err(_) => Ok(()),
        }
    }
}

/// Sends a keep-alive every third of the TTL, as clientv3's lessor does; ends once a response
/// says the lease is gone, or no response renewed it before its deadline.
async fn keep_alive(conn: Conn, lease: i64, ttl: i64) {
    let mut deadline = Instant::now() + secs(ttl);
    while Instant::now() < deadline {
        match keep_alive_stream(&conn, lease, &mut deadline).await {
            Renewals::LeaseGone => return,
            Renewals::StreamBroke => tokio::time::sleep(RETRY_PAUSE).await,
        }
    }
}

enum Renewals {
    LeaseGone,
    StreamBroke,
}

/// One LeaseKeepAlive call, renewing `deadline` with every response.
async fn keep_alive_stream(conn: &Conn, lease: i64, deadline: &mut Instant) -> Renewals {
    let (tx, rx) = mpsc::channel(1);
    let request = pb::LeaseKeepAliveRequest { id: lease };
    if tx.try_send(request).is_err() {
        return Renewals::StreamBroke;
    }
    let mut client = pb::lease_client::LeaseClient::new(conn.clone());
    let Ok(responses) = client.lease_keep_alive(ReceiverStream::new(rx)).await else {
        return Renewals::StreamBroke;
    };
    let mut responses = responses.into_inner();
    loop {
        let resp = match tokio::time::timeout_at(*deadline, responses.message()).await {
            Ok(Ok(Some(resp))) => resp,
            Err(_) => return Renewals::LeaseGone,
            Ok(_) => return Renewals::StreamBroke,
        };
        if resp.ttl <= 0 {
            return Renewals::LeaseGone;
        }
        *deadline = Instant::now() + secs(resp.ttl);
        tokio::time::sleep(secs(resp.ttl) / 3).await;
        if tx.send(request).await.is_err() {
            return Renewals::StreamBroke;
        }
    }
}

fn secs(seconds: i64) -> Duration {
    Duration::from_secs(seconds.unsigned_abs())
}
