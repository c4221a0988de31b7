//! Range answers built in their wire form: the key bucket stores each revision as the protobuf encoding
//! of its `KeyValue`, which is exactly what a `RangeResponse` carries in its `kvs` field. A plain Range
//! (no filters, no sort but by key ascending, values wanted) copies the stored bytes into the answer
//! once, instead of decoding them into `KeyValue`s that tonic then encodes again into a buffer grown by
//! doubling: a Range of 200k keys of 1 KiB used to hold about 2.5 times its answer at its peak. A large
//! one also reads its values without the store's lock ([`RangeFetch`]).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use proto::etcdserverpb as pb;
use proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use proto::mvccpb::KeyValue;

use super::entry::ENTRY_PUT;
use super::MvccStore;
use crate::backend::{Backend, Bucket};
use crate::compactor::Paused;
use crate::error::{Error, Result};
use crate::index::KeyRange;
use crate::revision::Revision;
use crate::stats;

/// `RangeResponse.kvs` is field 2, length-delimited.
const KVS_FIELD: u32 = 2;
/// The first chunk's size; each next one doubles, up to [`MAX_CHUNK`]: a one-key answer takes a small
/// buffer, a large one 1 MiB pieces that never move once written.
const FIRST_CHUNK: usize = 4 * 1024;
const MAX_CHUNK: usize = 1024 * 1024;

/// A Range answer whose `kvs` are already encoded; the service adds the header.
#[derive(Debug, Default)]
pub struct EncodedRange {
    /// Encoded `kvs` fields (tag, length, `KeyValue`), in answer order, split into pieces.
    pub kvs: Vec<Bytes>,
    /// Total length of `kvs`.
    pub kvs_len: usize,
    pub more: bool,
    pub count: i64,
    /// The revision of the store the answer was read from (the header's).
    pub revision: i64,
}

impl EncodedRange {
    /// The answer's `more` and `count` fields, encoded as prost encodes them (after `kvs`; absent when
    /// false or zero).
    pub fn tail(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.more {
            prost::encoding::bool::encode(3, &self.more, &mut out);
        }
        if self.count != 0 {
            prost::encoding::int64::encode(4, &self.count, &mut out);
        }
        out
    }
}

/// Appends length-delimited fields to pieces that grow up to [`MAX_CHUNK`] and are never reallocated.
#[derive(Default)]
struct Chunks {
    done: Vec<Bytes>,
    current: BytesMut,
    next_capacity: usize,
    len: usize,
}

impl Chunks {
    /// Room for `n` more bytes in the current piece.
    fn reserve(&mut self, n: usize) {
        if self.current.capacity() - self.current.len() >= n {
            return;
        }
        if !self.current.is_empty() {
            self.done.push(std::mem::take(&mut self.current).freeze());
        }
        let capacity = self.next_capacity.max(FIRST_CHUNK);
        self.next_capacity = (capacity * 2).min(MAX_CHUNK);
        self.current = BytesMut::with_capacity(capacity.max(n));
    }

    /// A `kvs` field whose body is an already encoded `KeyValue`.
    fn push_encoded(&mut self, body: &[u8]) {
        let n =
            prost::encoding::key_len(KVS_FIELD) + prost::encoding::encoded_len_varint(body.len() as u64) + body.len();
        self.reserve(n);
        prost::encoding::encode_key(KVS_FIELD, prost::encoding::WireType::LengthDelimited, &mut self.current);
        prost::encoding::encode_varint(body.len() as u64, &mut self.current);
        self.current.put_slice(body);
        self.len += n;
    }

    /// A `kvs` field from a decoded `KeyValue`.
    fn push(&mut self, kv: &KeyValue) {
        let n = prost::encoding::message::encoded_len(KVS_FIELD, kv);
        self.reserve(n);
        prost::encoding::message::encode(KVS_FIELD, kv, &mut self.current);
        self.len += n;
    }

    fn finish(mut self) -> (Vec<Bytes>, usize) {
        if !self.current.is_empty() {
            self.done.push(self.current.freeze());
        }
        (self.done, self.len)
    }
}

/// Whether the answer is the range's keys in key order with their values, so that stored entries go
/// into it as they are.
fn is_plain(req: &pb::RangeRequest) -> bool {
    let filtered = req.min_mod_revision != 0
        || req.max_mod_revision != 0
        || req.min_create_revision != 0
        || req.max_create_revision != 0;
    let in_key_order =
        req.sort_target() == SortTarget::Key && matches!(req.sort_order(), SortOrder::None | SortOrder::Ascend);
    !filtered && in_key_order && !req.keys_only && !req.count_only
}

/// Plain answers of at least this many keys read their values from the backend after the store's lock
/// is released (see [`RangeRead::Fetch`]).
const FETCH_UNLOCKED_KEYS: usize = 256;

/// A Range answer, or what is left to read for it without the store's lock.
pub enum RangeRead {
    Done(EncodedRange),
    Fetch(RangeFetch),
}

/// The values of a large plain Range, to read from the backend after the store's lock is released, so
/// that applies (every write) do not wait for them. Key bucket entries never change once written, and
/// only the compactor deletes them, which stays paused until this is dropped; the backend's content is
/// not replaced meanwhile either (an install waits for the pause to end). Values still staged when the
/// lock was held are copied.
pub struct RangeFetch {
    backend: Arc<dyn Backend>,
    /// The answer's revisions, in answer order.
    revisions: Vec<Revision>,
    staged: HashMap<Revision, KeyValue>,
    more: bool,
    count: i64,
    revision: i64,
    _paused: Paused,
}

impl RangeFetch {
    /// How many values are left to read.
    pub fn values(&self) -> usize {
        self.revisions.len()
    }

    /// Reads and encodes the values.
    pub fn run(self) -> Result<EncodedRange> {
        let (kvs, kvs_len) = encode_values(&self.revisions, &self.staged, &*self.backend)?;
        Ok(EncodedRange { kvs, kvs_len, more: self.more, count: self.count, revision: self.revision })
    }
}

impl MvccStore {
    /// [`MvccStore::range`], answered in wire form (see the module doc): at once, or, for a large plain
    /// Range, with the values left to read once the store's lock is released.
    pub fn range_encoded(&self, req: &pb::RangeRequest) -> Result<RangeRead> {
        if !is_plain(req) {
            let resp = self.range(req)?;
            let mut kvs = Chunks::default();
            resp.kvs.iter().for_each(|kv| kvs.push(kv));
            let (kvs, kvs_len) = kvs.finish();
            let (more, count, revision) = (resp.more, resp.count, self.current);
            return Ok(RangeRead::Done(EncodedRange { kvs, kvs_len, more, count, revision }));
        }
        stats::count(&stats::RANGES);
        let at = self.read_revision(req, self.current)?;
        let limit = usize::try_from(req.limit).ok().filter(|limit| *limit > 0);
        let mut count = 0usize;
        let mut revisions = Vec::new();
        for (_, found) in self.index.range(KeyRange::new(&req.key, &req.range_end), at) {
            if limit.is_none_or(|limit| count < limit) {
                revisions.push(found.modified);
            }
            count += 1;
        }
        let more = limit.is_some_and(|limit| count > limit);
        let (count, revision) = (count as i64, self.current);
        // Waiting for the compactor's batch here would hold the lock: read under it instead.
        let paused = (revisions.len() >= FETCH_UNLOCKED_KEYS).then(|| self.compactor.try_pause()).flatten();
        let Some(paused) = paused else {
            let (kvs, kvs_len) = encode_values(&revisions, &self.staged, &*self.backend)?;
            return Ok(RangeRead::Done(EncodedRange { kvs, kvs_len, more, count, revision }));
        };
        let staged = revisions.iter().filter_map(|rev| self.staged.get(rev).map(|kv| (*rev, kv.clone()))).collect();
        let backend = self.backend.clone();
        Ok(RangeRead::Fetch(RangeFetch { backend, revisions, staged, more, count, revision, _paused: paused }))
    }
}

/// The `kvs` fields of `revisions`, from `staged` when there, else from the backend.
fn encode_values(
    revisions: &[Revision],
    staged: &HashMap<Revision, KeyValue>,
    backend: &dyn Backend,
) -> Result<(Vec<Bytes>, usize)> {
    let mut kvs = Chunks::default();
    for rev in revisions {
        match staged.get(rev) {
            Some(kv) => kvs.push(kv),
            None => encode_stored(backend, *rev, &mut kvs)?,
        }
    }
    Ok(kvs.finish())
}

/// Appends the value stored at `rev` as a `kvs` field.
fn encode_stored(backend: &dyn Backend, rev: Revision, out: &mut Chunks) -> Result<()> {
    let mut corrupt = false;
    let found = backend.read(Bucket::Key, &rev.to_bytes(), &mut |entry| match entry.split_first() {
        Some((&ENTRY_PUT, body)) => out.push_encoded(body),
        _ => corrupt = true,
    })?;
    if !found {
        return Err(Error::Internal(format!("revision {rev:?} is indexed but not stored")));
    }
    if corrupt {
        return Err(Error::Internal(format!("revision {rev:?} is indexed as a value but stored as a tombstone")));
    }
    Ok(())
}

/// The wire form of a whole answer, for tests: what prost would encode for the same response.
#[cfg(test)]
fn encoded_answer(answer: &EncodedRange, header: &pb::ResponseHeader) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::message::encode(1, header, &mut out);
    answer.kvs.iter().for_each(|piece| out.extend_from_slice(piece));
    out.extend(answer.tail());
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use prost::Message;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::backend::MemBackend;
    use crate::command::Command;

    fn answer(store: &MvccStore, req: &pb::RangeRequest) -> Result<EncodedRange> {
        match store.range_encoded(req)? {
            RangeRead::Done(answer) => Ok(answer),
            RangeRead::Fetch(fetch) => fetch.run(),
        }
    }

    fn put(store: &mut MvccStore, key: &[u8], value: Vec<u8>) {
        let req = pb::PutRequest { key: key.to_vec(), value, ..Default::default() };
        store.apply(&Command::Put(req)).expect("put applies");
    }

    /// Every form of Range answers, byte for byte, what prost encodes from [`MvccStore::range`], with
    /// some revisions committed to the backend and others still staged.
    #[test]
    fn answers_are_byte_for_byte_prost_encodings() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(21);
        let mut store = MvccStore::open(Arc::new(MemBackend::default())).expect("opens");
        for round in 0..400 {
            let key = format!("k{:03}", rng.gen_range(0..60u32));
            let value = vec![b'v'; rng.gen_range(0..3000usize)];
            put(&mut store, key.as_bytes(), value);
            if round % 7 == 0 {
                let req = pb::DeleteRangeRequest {
                    key: format!("k{:03}", rng.gen_range(0..60u32)).into_bytes(),
                    ..Default::default()
                };
                store.apply(&Command::DeleteRange(req)).expect("delete applies");
            }
            if round % 50 == 0 {
                store.commit().expect("commits");
            }
        }
        let current = store.current_revision();
        let mut requests = Vec::new();
        for (start, end) in [(&b"k"[..], &b"l"[..]), (b"k010", b"k030"), (b"k005", b""), (b"\0", b"\0"), (b"z", b"\0")]
        {
            for limit in [0, 1, 5, 1000] {
                for revision in [0, current - 30, current] {
                    let base = pb::RangeRequest {
                        key: start.to_vec(),
                        range_end: end.to_vec(),
                        limit,
                        revision,
                        ..Default::default()
                    };
                    requests.push(base.clone());
                    requests.push(pb::RangeRequest { sort_order: SortOrder::Descend as i32, ..base.clone() });
                    requests.push(pb::RangeRequest { sort_order: SortOrder::Ascend as i32, ..base.clone() });
                    requests.push(pb::RangeRequest { sort_target: SortTarget::Value as i32, ..base.clone() });
                    requests.push(pb::RangeRequest { keys_only: true, ..base.clone() });
                    requests.push(pb::RangeRequest { count_only: true, ..base.clone() });
                    requests.push(pb::RangeRequest { min_mod_revision: current - 40, ..base.clone() });
                }
            }
        }
        let mut plain = 0;
        for req in &requests {
            let expected = store.range(req).expect("ranges");
            let answer = answer(&store, req).expect("ranges encoded");
            plain += usize::from(is_plain(req) && !expected.kvs.is_empty());
            assert_eq!(answer.kvs_len, answer.kvs.iter().map(Bytes::len).sum::<usize>(), "{req:?}");
            let header = expected.header.clone().expect("a header");
            assert_eq!(answer.revision, header.revision, "{req:?}");
            assert_eq!(encoded_answer(&answer, &header), expected.encode_to_vec(), "{req:?}");
        }
        assert!(plain > 20, "only {plain} plain ranges found values");
    }

    /// A large Range's values are read after the store's lock is released: writes, a compaction and
    /// its deletions in between change nothing in the answer, and the deletions wait for it.
    #[test]
    fn large_answers_read_after_the_lock_are_the_answer_at_the_lock() {
        let mut store = MvccStore::open(Arc::new(MemBackend::default())).expect("opens");
        for k in 0..400 {
            put(&mut store, format!("k{k:03}").as_bytes(), vec![b'a'; k]);
        }
        store.commit().expect("commits");
        for k in 0..100 {
            put(&mut store, format!("k{k:03}").as_bytes(), vec![b'b'; k]);
        }
        let req = pb::RangeRequest { key: b"k".to_vec(), range_end: b"l".to_vec(), ..Default::default() };
        let expected = store.range(&req).expect("ranges");
        let RangeRead::Fetch(fetch) = store.range_encoded(&req).expect("ranges encoded") else {
            panic!("400 keys are read after the lock");
        };
        assert_eq!(fetch.values(), 400);
        for k in 0..400 {
            put(&mut store, format!("k{k:03}").as_bytes(), vec![b'c'; 3]);
        }
        let current = store.current_revision();
        store.apply(&Command::Compact(pb::CompactionRequest { revision: current, physical: false })).expect("compacts");
        store.commit().expect("commits");
        store.finish_index_compaction();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let answer = fetch.run().expect("reads");
        let header = expected.header.clone().expect("a header");
        assert_eq!(encoded_answer(&answer, &header), expected.encode_to_vec());
        drop(answer);
        store.wait_compacted();
        let mut stored = 0;
        store
            .backend()
            .scan(Bucket::Key, &mut |_, _| {
                stored += 1;
                true
            })
            .expect("scans");
        assert_eq!(stored, 400, "once the read is done, the compactor deletes what it freed");
        let left = store.range(&pb::RangeRequest { revision: current - 1, ..req }).map(|_| ());
        assert!(matches!(left, Err(Error::Compacted)));
    }

    #[test]
    fn errors_are_the_plain_range_errors() {
        let mut store = MvccStore::open(Arc::new(MemBackend::default())).expect("opens");
        put(&mut store, b"a", b"1".to_vec());
        let future = pb::RangeRequest { key: b"a".to_vec(), revision: 99, ..Default::default() };
        assert!(matches!(answer(&store, &future), Err(Error::FutureRevision)));
    }

    #[test]
    fn large_answers_come_in_pieces_that_never_grow_past_their_size() {
        let mut chunks = Chunks::default();
        let body = vec![7u8; 1000];
        for _ in 0..5000 {
            chunks.push_encoded(&body);
        }
        let (pieces, len) = chunks.finish();
        assert_eq!(len, 5000 * (1 + 2 + 1000));
        assert_eq!(pieces.iter().map(Bytes::len).sum::<usize>(), len);
        assert!(pieces.iter().all(|piece| piece.len() <= MAX_CHUNK), "a piece grew past its size");
        assert!(pieces.len() > 3 && pieces[0].len() <= FIRST_CHUNK);
    }
}
