//! Since when this member has reached each peer without a break (etcd's `ActiveSince` of a peer
//! stream), from the answers to its Raft messages. A leader sends every peer a heartbeat each heartbeat
//! interval, so on the leader, where membership changes are decided, this is fresh; etcd's
//! `--strict-reconfig-check` refuses changes while the members that matter have not been connected for
//! long enough.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::typ::NodeId;

/// The peers' links, shared by the network (which records answers) and the leader (which reads them).
#[derive(Clone, Debug, Default)]
pub struct Connectivity {
    links: Arc<Mutex<HashMap<NodeId, Link>>>,
}

#[derive(Clone, Copy, Debug)]
struct Link {
    since: Instant,
    last: Instant,
}

/// A gap without answers longer than this breaks a link (heartbeats come every 100 ms by default; a
/// message that failed breaks it at once).
const BREAK: Duration = Duration::from_secs(1);

impl Connectivity {
    /// `peer` answered a message.
    pub fn answered(&self, peer: NodeId) {
        let now = Instant::now();
        let mut links = self.links.lock();
        let link = links.entry(peer).or_insert(Link { since: now, last: now });
        if now.duration_since(link.last) > BREAK {
            link.since = now;
        }
        link.last = now;
    }

    /// A message to `peer` failed.
    pub fn failed(&self, peer: NodeId) {
        self.links.lock().remove(&peer);
    }

    /// Since when `peer` has been reachable without a break, if it is now.
    pub fn active_since(&self, peer: NodeId) -> Option<Instant> {
        let now = Instant::now();
        self.links.lock().get(&peer).filter(|link| now.duration_since(link.last) <= BREAK).map(|link| link.since)
    }

    /// Whether `peer` has been reachable since `at` or before.
    pub fn connected_since(&self, peer: NodeId, at: Instant) -> bool {
        self.active_since(peer).is_some_and(|since| since <= at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_breaks_the_link_and_an_answer_starts_a_new_one() {
        let links = Connectivity::default();
        assert_eq!(links.active_since(7), None);
        links.answered(7);
        let since = links.active_since(7).expect("active");
        links.answered(7);
        assert_eq!(links.active_since(7), Some(since), "a steady link keeps its start");
        assert!(links.connected_since(7, Instant::now()));
        assert!(!links.connected_since(7, since - Duration::from_millis(1)));
        links.failed(7);
        assert_eq!(links.active_since(7), None);
    }
}
