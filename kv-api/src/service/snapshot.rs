//! `Maintenance.Snapshot`'s stream: a [`SnapshotFile`] the consensus layer wrote, sent as etcd sends its
//! backend — 32 KiB chunks whose `remaining_bytes` counts down to 0, then the SHA-256 digest in a message
//! of its own.

use std::pin::Pin;

use futures::Stream;
use proto::etcdserverpb as pb;
use tokio::io::AsyncReadExt;
use tonic::Status;

use crate::consensus::SnapshotFile;
use crate::error::Error;

/// etcd's `snapshotSendBufferSize`.
pub const CHUNK_BYTES: u64 = 32 * 1024;
/// The SHA-256 digest that ends every snapshot.
pub const DIGEST_BYTES: u64 = 32;

pub type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotResponse, Status>> + Send>>;

/// Streams `snapshot`. Each chunk is read only when tonic asks for the next message, so a slow client
/// holds one chunk in memory, not the file. `version` is the storage version the file carries (empty for a 3.5 schema), sent in every chunk.
pub fn stream(snapshot: SnapshotFile, version: String) -> SnapshotStream {
    let body = snapshot.size.saturating_sub(DIGEST_BYTES);
    let file = tokio::fs::File::from_std(snapshot.file);
    Box::pin(futures::stream::try_unfold((file, 0u64), move |(mut file, sent)| {
        let version = version.clone();
        async move {
            if sent >= snapshot.size {
                return Ok(None);
            }
            let (len, remaining_bytes) = if sent < body {
                let len = CHUNK_BYTES.min(body - sent);
                (len, body - sent - len)
            } else {
                (snapshot.size - sent, 0)
            };
            let mut blob = vec![0; len as usize];
            file.read_exact(&mut blob).await.map_err(|e| Status::from(Error::Internal(format!("snapshot: {e}"))))?;
            // etcd 3.4 sends no header in snapshot responses; 3.6 names its storage version in each.
            Ok(Some((pb::SnapshotResponse { header: None, remaining_bytes, blob, version }, (file, sent + len))))
        }
    }))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use futures::TryStreamExt;

    use super::*;

    async fn chunks(size: u64) -> Vec<pb::SnapshotResponse> {
        let mut file = tempfile::tempfile().expect("temp file");
        let content: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        file.write_all(&content).expect("write");
        std::io::Seek::rewind(&mut file).expect("rewind");
        let sent: Vec<_> = stream(SnapshotFile { file, size }, "3.6.0".into()).try_collect().await.expect("streams");
        let joined: Vec<u8> = sent.iter().flat_map(|c| c.blob.clone()).collect();
        assert_eq!(joined, content, "the stream carries the file unchanged");
        sent
    }

    #[tokio::test]
    async fn chunks_like_etcd_then_the_digest_alone() {
        // Two full chunks, a short one, then the digest.
        let sent = chunks(2 * CHUNK_BYTES + 512 + 32).await;
        let shape: Vec<_> = sent.iter().map(|c| (c.blob.len() as u64, c.remaining_bytes)).collect();
        assert_eq!(shape, vec![(CHUNK_BYTES, CHUNK_BYTES + 512), (CHUNK_BYTES, 512), (512, 0), (32, 0)]);
        assert!(sent.iter().all(|c| c.header.is_none()));
        // A body of whole chunks ends without an empty chunk.
        let shape: Vec<_> =
            chunks(CHUNK_BYTES + 32).await.iter().map(|c| (c.blob.len() as u64, c.remaining_bytes)).collect();
        assert_eq!(shape, vec![(CHUNK_BYTES, 0), (32, 0)]);
    }

    #[tokio::test]
    async fn a_file_shorter_than_announced_fails_the_stream() {
        let file = tempfile::tempfile().expect("temp file");
        let result: Result<Vec<_>, Status> =
            stream(SnapshotFile { file, size: 544 }, "3.6.0".into()).try_collect().await;
        let status = result.expect_err("the file is empty");
        assert_eq!(status.code(), tonic::Code::Unknown);
        assert!(status.message().starts_with("etcdserver: snapshot: "), "{}", status.message());
    }
}
