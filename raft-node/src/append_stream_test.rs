//! An append stream against small peers of its own (a peer of an older version without the stream, one
//! that answers out of order, one that ends the stream): what a sender gets in each case.

use std::net::SocketAddr;

use proto::raftpb::raft_peer_server::{RaftPeer, RaftPeerServer};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Streaming};

use super::*;

/// How a test peer treats an append stream.
#[derive(Clone, Copy)]
enum Peer {
    /// Has no such method (an older version).
    Older,
    /// Answers each pair of appends second first, with the payload reversed.
    Swaps,
    /// Takes one append and ends the stream without an answer.
    Ends,
}

type Answers = UnboundedReceiverStream<Result<raftpb::TaggedMessage, Status>>;

#[tonic::async_trait]
impl RaftPeer for Peer {
    type AppendStreamStream = Answers;

    async fn append_stream(
        &self,
        request: Request<Streaming<raftpb::TaggedMessage>>,
    ) -> Result<Response<Answers>, Status> {
        if matches!(self, Peer::Older) {
            return Err(Status::unimplemented("no such method"));
        }
        let peer = *self;
        let mut appends = request.into_inner();
        let (answers, stream) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let answer = |append: raftpb::TaggedMessage| {
                let payload = append.payload.iter().rev().copied().collect();
                Ok(raftpb::TaggedMessage { id: append.id, payload, error: String::new(), unanswered: false })
            };
            while let Ok(Some(first)) = appends.message().await {
                if matches!(peer, Peer::Ends) {
                    return;
                }
                let Ok(Some(second)) = appends.message().await else { return };
                let _ = answers.send(answer(second));
                let _ = answers.send(answer(first));
            }
        });
        Ok(Response::new(UnboundedReceiverStream::new(stream)))
    }

    async fn append_entries(&self, _: Request<raftpb::RaftMessage>) -> Result<Response<raftpb::RaftMessage>, Status> {
        Err(Status::unimplemented("test peer"))
    }

    async fn vote(&self, _: Request<raftpb::RaftMessage>) -> Result<Response<raftpb::RaftMessage>, Status> {
        Err(Status::unimplemented("test peer"))
    }

    async fn install_snapshot(
        &self,
        _: Request<Streaming<raftpb::SnapshotChunk>>,
    ) -> Result<Response<raftpb::RaftMessage>, Status> {
        Err(Status::unimplemented("test peer"))
    }

    async fn forward(&self, _: Request<raftpb::RaftMessage>) -> Result<Response<raftpb::RaftMessage>, Status> {
        Err(Status::unimplemented("test peer"))
    }

    async fn hash_kv(&self, _: Request<raftpb::RaftMessage>) -> Result<Response<raftpb::RaftMessage>, Status> {
        Err(Status::unimplemented("test peer"))
    }
}

/// A client of a test peer listening on loopback.
async fn client_of(peer: Peer) -> RaftPeerClient<Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RaftPeerServer::new(peer))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("url").connect_lazy();
    RaftPeerClient::new(channel)
}

/// Sends until the stream is open (the first sends find it opening and get their append back).
async fn once_open(stream: &AppendStream, client: &RaftPeerClient<Channel>) {
    for _ in 0..200 {
        if matches!(&*stream.state.lock(), State::Open(_)) {
            return;
        }
        if let Sent::NotOpen(payload) = stream.send(client, b"probe".to_vec(), TTL).await {
            assert_eq!(payload, b"probe", "an append not sent comes back whole");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the stream never opened");
}

const TTL: Duration = Duration::from_secs(5);

#[tokio::test]
async fn answers_out_of_order_reach_the_appends_they_answer() {
    let client = client_of(Peer::Swaps).await;
    let stream = AppendStream::default();
    let first = stream.send(&client, b"first".to_vec(), TTL).await;
    assert!(matches!(first, Sent::NotOpen(_)), "the first append finds no stream yet: {first:?}");
    // The peer answers in pairs: the probes that open it must leave an even count behind.
    once_open(&stream, &client).await;
    let (a, b) = tokio::join!(stream.send(&client, b"abc".to_vec(), TTL), stream.send(&client, b"xyz".to_vec(), TTL));
    let (a, b) = match (a, b) {
        (Sent::Answered(Ok(a)), Sent::Answered(Ok(b))) => (a, b),
        other => panic!("both answered on the stream: {other:?}"),
    };
    assert_eq!((a.as_slice(), b.as_slice()), (&b"cba"[..], &b"zyx"[..]));
    assert!(stream.state.lock().is_open(), "the stream stays open");
}

#[tokio::test]
async fn a_peer_without_the_stream_gets_calls_and_is_not_asked_again_at_once() {
    let client = client_of(Peer::Older).await;
    let stream = AppendStream::default();
    for _ in 0..20 {
        match stream.send(&client, b"append".to_vec(), TTL).await {
            Sent::NotOpen(payload) => assert_eq!(payload, b"append"),
            answered => panic!("no stream on an older peer: {answered:?}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match &*stream.state.lock() {
        State::Failed(until) => assert!(*until > Instant::now() + RETRY_AFTER, "an older peer waits the longer time"),
        other => panic!("failed after Unimplemented, not {other:?}"),
    };
}

#[tokio::test]
async fn an_append_awaited_when_the_stream_ends_gets_an_error_and_the_next_is_a_call() {
    let client = client_of(Peer::Ends).await;
    let stream = AppendStream::default();
    let first = stream.send(&client, b"first".to_vec(), TTL).await;
    assert!(matches!(first, Sent::NotOpen(_)), "{first:?}");
    let waited = Instant::now();
    let mut ended = None;
    while waited.elapsed() < TTL {
        match stream.send(&client, b"lost".to_vec(), TTL).await {
            Sent::NotOpen(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Sent::Answered(answer) => {
                ended = Some(answer);
                break;
            }
        }
    }
    let status = ended.expect("sent on the stream").expect_err("no answer: the stream ended");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(waited.elapsed() < TTL, "the end answered it, not its time running out");
    assert!(!stream.state.lock().is_open(), "an ended stream is not used again");
}

impl State {
    fn is_open(&self) -> bool {
        matches!(self, State::Open(open) if !open.appends.is_closed())
    }
}
