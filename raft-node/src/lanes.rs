//! [`Lanes`]: several connections to one peer, of which requests use one at a time, moving on to the next
//! when the one in use stalls. TCP delivers in order, so one lost segment holds up everything sent after
//! it on its connection while Linux retransmits it (at least 200 ms, doubling each time the copy is lost
//! too); requests moved to another connection do not queue behind it. Who decides that a connection
//! stalled: `network` (a Raft RPC ran out of time) and `forward` (a forwarded request waited with no
//! answer on its connection).

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use tonic::transport::Channel;

use crate::dial::PeerDialer;

/// Connections per peer.
pub(crate) const LANES: usize = 3;

/// A client per connection, and the one requests use now.
#[derive(Debug)]
pub(crate) struct Lanes<C> {
    clients: Vec<C>,
    current: AtomicUsize,
}

impl<C: Clone> Lanes<C> {
    pub(crate) fn new(clients: Vec<C>) -> Self {
        Self { clients, current: AtomicUsize::new(0) }
    }

    /// The lane requests use now.
    pub(crate) fn current(&self) -> usize {
        self.current.load(Relaxed)
    }

    /// Lane `pinned`, or the lane requests use now, and its client.
    pub(crate) fn client(&self, pinned: Option<usize>) -> (usize, C) {
        let lane = pinned.unwrap_or_else(|| self.current());
        (lane, self.clients[lane].clone())
    }

    /// Moves requests from `lane` to the next one, unless another request that stalled on `lane` already
    /// moved them; returns the next lane when this call moved them.
    pub(crate) fn move_on(&self, lane: usize) -> Option<usize> {
        let next = (lane + 1) % self.clients.len();
        self.current.compare_exchange(lane, next, Relaxed, Relaxed).ok().map(|_| next)
    }
}

/// [`LANES`] channels to `url`, each connecting on first use, or `None` when the URL cannot be dialled.
pub(crate) fn channels(dialer: &PeerDialer, url: &str) -> Option<Vec<Channel>> {
    (0..LANES).map(|_| dialer.channel(url)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_moves_requests_on_once_and_round_the_lanes() {
        let lanes = Lanes::new(vec!['a', 'b', 'c']);
        assert_eq!(lanes.client(None), (0, 'a'));
        assert_eq!(lanes.move_on(0), Some(1));
        // A second request that stalled on the first lane too moves nothing on.
        assert_eq!(lanes.move_on(0), None);
        assert_eq!(lanes.client(None), (1, 'b'));
        assert_eq!(lanes.move_on(1), Some(2));
        assert_eq!(lanes.move_on(2), Some(0));
        assert_eq!(lanes.client(Some(2)), (2, 'c'), "a pinned lane whatever is in use");
    }
}
