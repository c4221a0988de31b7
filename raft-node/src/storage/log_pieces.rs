//! The pieces of a Raft log entry too large to store whole (see [`crate::storage::log_store`] for why):
//! their keys, splitting an encoded entry, and putting it together again as read in key order.

use std::io;

use openraft::StorageIOError;

use crate::storage::log_store::CHUNK_BYTES;
use crate::typ::StorageError;

/// The key of piece `piece` of the entry at `index`: after the index's own key and before the next
/// index's, in sled's order.
fn piece_key(index: u64, piece: u32) -> [u8; 12] {
    let mut key = [0; 12];
    key[..8].copy_from_slice(&index.to_be_bytes());
    key[8..].copy_from_slice(&piece.to_be_bytes());
    key
}

/// The pieces of an entry stored in pieces, as read back in key order: the first one starts with the
/// number of pieces (big-endian u32). A crash while they were written leaves a prefix of them, which
/// [`Chunks::finish`] tells apart from a whole entry.
#[derive(Default)]
pub(crate) struct Chunks {
    pub(crate) index: u64,
    expected: u32,
    got: u32,
    bytes: Vec<u8>,
}

impl Chunks {
    /// Splits `bytes` (the entry at `index`, encoded) into its keys and pieces.
    pub(crate) fn split(index: u64, bytes: &[u8]) -> Vec<([u8; 12], Vec<u8>)> {
        let pieces = bytes.chunks(CHUNK_BYTES);
        let count = u32::try_from(pieces.len()).unwrap_or(u32::MAX);
        pieces
            .enumerate()
            .map(|(n, piece)| {
                let n = n as u32;
                let value = if n == 0 { [&count.to_be_bytes()[..], piece].concat() } else { piece.to_vec() };
                (piece_key(index, n), value)
            })
            .collect()
    }

    /// Takes the piece under `key` (12 bytes); a piece of another entry, or out of order, is an error.
    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        let index = index_of(key)?;
        let piece = key.get(8..12).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
        let piece = piece.ok_or_else(|| corrupt_log("a short piece key"))?;
        if piece == 0 {
            let count = value.get(..4).ok_or_else(|| corrupt_log("a first piece without its count"))?;
            *self = Chunks {
                index,
                expected: u32::from_be_bytes(count.try_into().map_err(|_| corrupt_log("a bad piece count"))?),
                got: 1,
                bytes: value[4..].to_vec(),
            };
            return Ok(());
        }
        if index != self.index || piece != self.got {
            return Err(corrupt_log(&format!("piece {piece} of log entry {index} out of order")));
        }
        self.got += 1;
        self.bytes.extend_from_slice(value);
        Ok(())
    }

    /// The whole encoded entry, or `None` when pieces are missing (an append cut short by a crash).
    pub(crate) fn finish(self) -> Option<(u64, Vec<u8>)> {
        (self.got > 0 && self.got == self.expected).then_some((self.index, self.bytes))
    }
}

/// The index a key of the tree `logs` belongs to (its first 8 bytes).
pub(crate) fn index_of(key: &[u8]) -> Result<u64, StorageError> {
    let index = key.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
    index.ok_or_else(|| corrupt_log("a key shorter than an index"))
}

pub(crate) fn corrupt_log(what: &str) -> StorageError {
    let err = io::Error::new(io::ErrorKind::InvalidData, format!("the Raft log holds {what}"));
    StorageIOError::read_logs(&err).into()
}
