//! [`AppendStream`]: a connection's appends to a peer on one long-lived gRPC stream
//! (`raftpb.RaftPeer/AppendStream`), matched with their answers by id.
//!
//! A call of its own costs an append a new HTTP/2 stream: its HEADERS frame, then its DATA in a second
//! write once the connection has given the new stream its flow-control window (so the follower wakes
//! twice), and trailers with the answer. On a stream that stays open an append is one DATA frame each
//! way, one write and one wake-up; it is how etcd's members send each other Raft messages too (one
//! long-lived stream per peer). Ordering is as before: each append that arrives goes to Raft in a task of
//! its own, as a call of its own did, and Raft tolerates reordering.
//!
//! A stream is opened in the background on first use; until it is open, and whenever it is not (the
//! connection failed, or the peer is a version without the stream and answered `Unimplemented`), an
//! append goes as a call of its own ([`Sent::NotOpen`]). An append waiting for its answer when the stream
//! ends gets the stream's error, as a call would have got its connection's.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use proto::raftpb;
use proto::raftpb::raft_peer_client::RaftPeerClient;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::Status;

/// How long a stream that could not be opened is not tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The same, after the peer answered that it has no such stream (it runs an older version; a rolling
/// upgrade may bring it).
const RETRY_UNIMPLEMENTED_AFTER: Duration = Duration::from_secs(30);

/// What became of an append given to [`AppendStream::send`].
#[derive(Debug)]
pub(crate) enum Sent {
    /// Sent on the stream: the peer's encoded answer, or why none came.
    Answered(Result<Vec<u8>, Status>),
    /// No stream is open: the append, to send as a call of its own.
    NotOpen(Vec<u8>),
}

/// The append stream of one connection to a peer.
#[derive(Debug, Default)]
pub(crate) struct AppendStream {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Closed,
    /// Not tried again before this instant.
    Failed(Instant),
    Opening,
    Open(Arc<Open>),
}

/// An open stream: where appends go, and the answers awaited.
#[derive(Debug)]
struct Open {
    appends: mpsc::UnboundedSender<raftpb::TaggedMessage>,
    next_id: AtomicU64,
    /// `None` once the stream ended: nothing more is awaited on it.
    awaited: Mutex<Option<HashMap<u64, Answer>>>,
}

/// Where the answer to one append goes: its encoded response, or the stream's failure.
type Answer = oneshot::Sender<Result<Vec<u8>, Status>>;

impl AppendStream {
    /// Sends `payload`, an encoded append, on the stream and waits up to `ttl` for its answer; or, while
    /// no stream is open, gives it back (and opens one on `client`'s connection in the background).
    pub(crate) async fn send(&self, client: &RaftPeerClient<Channel>, payload: Vec<u8>, ttl: Duration) -> Sent {
        let Some(open) = self.open_or_start(client) else { return Sent::NotOpen(payload) };
        let id = open.next_id.fetch_add(1, Relaxed);
        let (answer_tx, answer) = oneshot::channel();
        match open.awaited.lock().as_mut() {
            Some(awaited) => awaited.insert(id, answer_tx),
            None => return Sent::NotOpen(payload),
        };
        if let Err(unsent) =
            open.appends.send(raftpb::TaggedMessage { id, payload, error: String::new(), unanswered: false })
        {
            open.forget(id);
            return Sent::NotOpen(unsent.0.payload);
        }
        crate::metrics::metrics().peer_stream_appends.fetch_add(1, Relaxed);
        // Out of time or dropped (openraft's own timeout): the answer is no longer awaited.
        let awaiting = Awaiting { open: &open, id };
        let answered = match tokio::time::timeout(ttl, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(Status::unavailable("the append stream ended")),
            Err(_) => Err(Status::deadline_exceeded("no answer on the append stream in time")),
        };
        drop(awaiting);
        Sent::Answered(answered)
    }

    /// Sends `payload`, an encoded append, on the stream, asking the peer for no answer (one it sends all
    /// the same, at an older version, is ignored: its id is not awaited); or, while no stream is open,
    /// gives it back (and opens one on `client`'s connection in the background).
    pub(crate) fn send_unanswered(&self, client: &RaftPeerClient<Channel>, payload: Vec<u8>) -> Result<(), Vec<u8>> {
        let Some(open) = self.open_or_start(client) else { return Err(payload) };
        let id = open.next_id.fetch_add(1, Relaxed);
        let append = raftpb::TaggedMessage { id, payload, error: String::new(), unanswered: true };
        open.appends.send(append).map_err(|unsent| unsent.0.payload)?;
        crate::metrics::metrics().peer_stream_appends.fetch_add(1, Relaxed);
        Ok(())
    }

    /// The open stream, or `None` after starting to open one (unless one is opening, or failed lately).
    fn open_or_start(&self, client: &RaftPeerClient<Channel>) -> Option<Arc<Open>> {
        let mut state = self.state.lock();
        match &*state {
            State::Open(open) if !open.appends.is_closed() => return Some(open.clone()),
            State::Opening => return None,
            State::Failed(until) if Instant::now() < *until => return None,
            _ => {}
        }
        *state = State::Opening;
        tokio::spawn(run(self.state.clone(), client.clone()));
        None
    }
}

/// Opens a stream on `client`'s connection and delivers its answers until it ends.
async fn run(state: Arc<Mutex<State>>, mut client: RaftPeerClient<Channel>) {
    let (appends, outgoing) = mpsc::unbounded_channel();
    let mut answers = match client.append_stream(UnboundedReceiverStream::new(outgoing)).await {
        Ok(answers) => answers.into_inner(),
        Err(status) => {
            let wait =
                if status.code() == tonic::Code::Unimplemented { RETRY_UNIMPLEMENTED_AFTER } else { RETRY_AFTER };
            *state.lock() = State::Failed(Instant::now() + wait);
            return;
        }
    };
    let open = Arc::new(Open { appends, next_id: AtomicU64::new(0), awaited: Mutex::new(Some(HashMap::new())) });
    *state.lock() = State::Open(open.clone());
    crate::metrics::metrics().peer_append_streams.fetch_add(1, Relaxed);
    let ended = loop {
        match answers.message().await {
            Ok(Some(answer)) => {
                let waiting = open.awaited.lock().as_mut().and_then(|awaited| awaited.remove(&answer.id));
                if let Some(waiting) = waiting {
                    let _ = waiting.send(if answer.error.is_empty() {
                        Ok(answer.payload)
                    } else {
                        Err(Status::invalid_argument(answer.error))
                    });
                }
            }
            Ok(None) => break Status::unavailable("the peer ended the append stream"),
            Err(status) => break status,
        }
    };
    {
        let mut state = state.lock();
        if matches!(&*state, State::Open(current) if Arc::ptr_eq(current, &open)) {
            *state = State::Closed;
        }
    }
    // Appends still awaited get the stream's end; later ones are not taken.
    for (_, waiting) in open.awaited.lock().take().into_iter().flatten() {
        let _ = waiting.send(Err(ended.clone()));
    }
}

impl Open {
    fn forget(&self, id: u64) {
        if let Some(awaited) = self.awaited.lock().as_mut() {
            awaited.remove(&id);
        }
    }
}

/// An append whose answer is awaited; forgotten when the wait ends, however it ends.
struct Awaiting<'a> {
    open: &'a Open,
    id: u64,
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.open.forget(self.id);
    }
}

#[cfg(test)]
#[path = "append_stream_test.rs"]
mod tests;
