//! The Raft log as earlier builds kept it, in the sled tree `logs`, read once to move it into the
//! segment files of [`crate::storage::wal`] (see [`crate::storage::log_store`]).
//!
//! The tree maps an index (big-endian u64, so sled's order is the log's) to the bincode entry; an
//! entry of more than 2 KiB (8 KiB in older builds) is stored in pieces instead, under the index followed by the
//! piece's number (big-endian u32), the first piece carrying the count (see [`Chunks`]). sled keeps a
//! prefix of its writes, so a crash can leave only the last entry unfinished; it was never reported
//! persisted and is left out.

use std::io;

use openraft::StorageIOError;

use crate::storage::decode;
use crate::storage::scan::Forward;
use crate::typ::{Entry, StorageError};

/// The name of the tree.
pub(crate) const LOGS: &str = "logs";
/// The size of the pieces the last builds wrote (the first piece tells how many, not how large).
#[cfg(test)]
pub(crate) const CHUNK_BYTES: usize = 2 << 10;

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn decode_entry(index: &[u8], bytes: &[u8]) -> Result<Entry, StorageError> {
    let entry: Entry = decode(bytes).map_err(|e| StorageIOError::read_logs(&e))?;
    if index != index_key(entry.log_id.index) {
        return Err(corrupt_log(&format!("log entry {} under another index", entry.log_id)));
    }
    Ok(entry)
}

/// The whole entries of `tree` from index `start` on, at most `limit` of them, each with its encoded
/// bytes; an unfinished last one is left out.
pub(crate) fn read(tree: &sled::Tree, start: u64, limit: usize) -> Result<Vec<(Entry, Vec<u8>)>, StorageError> {
    let mut entries = Vec::new();
    let mut chunks: Option<Chunks> = None;
    let read_err = |e: sled::Error| StorageError::from(StorageIOError::read_logs(&e));
    let whole = |index: u64, bytes: Vec<u8>| -> Result<(Entry, Vec<u8>), StorageError> {
        Ok((decode_entry(&index_key(index), &bytes)?, bytes))
    };
    for item in Forward::from(tree, &index_key(start)) {
        let (key, value) = item.map_err(read_err)?;
        // A whole entry, or the first piece of one, ends the entry read before it.
        if key.len() == 8 || key.get(8..12) == Some(&[0, 0, 0, 0][..]) {
            if let Some(done) = chunks.take() {
                let index = done.index;
                let (_, bytes) = done
                    .finish()
                    .ok_or_else(|| corrupt_log(&format!("an unfinished entry {index} before later ones")))?;
                entries.push(whole(index, bytes)?);
            }
            if entries.len() >= limit {
                return Ok(entries);
            }
        }
        if key.len() == 8 {
            entries.push(whole(index_of(&key)?, value.to_vec())?);
        } else {
            chunks.get_or_insert_with(Chunks::default).push(&key, &value)?;
        }
    }
    if let Some((index, bytes)) = chunks.and_then(Chunks::finish) {
        entries.push(whole(index, bytes)?);
    }
    Ok(entries)
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
