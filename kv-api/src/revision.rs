//! Revisions: the logical clock of the MVCC store.
//!
//! Every change to the store happens at a `(main, sub)` revision. `main` is the store revision a request
//! (Put, DeleteRange or Txn) takes; `sub` numbers the changes inside that request, starting at 0, so the
//! puts and deletes of one txn share a `main` and differ in `sub`.

/// Length of a revision encoded as a backend key.
pub const REVISION_BYTES: usize = 16;

/// A `(main, sub)` revision; ordered by `main`, then `sub`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision {
    pub main: i64,
    pub sub: i64,
}

impl Revision {
    pub fn new(main: i64, sub: i64) -> Self {
        Self { main, sub }
    }

    /// Big-endian bytes, so that the byte order of encoded revisions is their numeric order
    /// (revisions are never negative).
    pub fn to_bytes(self) -> [u8; REVISION_BYTES] {
        let mut out = [0u8; REVISION_BYTES];
        out[..8].copy_from_slice(&self.main.to_be_bytes());
        out[8..].copy_from_slice(&self.sub.to_be_bytes());
        out
    }

    /// Decodes [`Revision::to_bytes`]; `None` when the slice has the wrong length.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != REVISION_BYTES {
            return None;
        }
        let main = i64::from_be_bytes(bytes[..8].try_into().ok()?);
        let sub = i64::from_be_bytes(bytes[8..].try_into().ok()?);
        Some(Self { main, sub })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_order_is_revision_order() {
        let revs = [Revision::new(1, 0), Revision::new(1, 5), Revision::new(2, 0), Revision::new(256, 1)];
        for pair in revs.windows(2) {
            assert!(pair[0].to_bytes() < pair[1].to_bytes(), "{:?} vs {:?}", pair[0], pair[1]);
        }
        for rev in revs {
            assert_eq!(Revision::from_bytes(&rev.to_bytes()), Some(rev));
        }
        assert_eq!(Revision::from_bytes(&[1, 2, 3]), None);
    }
}
