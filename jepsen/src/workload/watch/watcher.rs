//! One watcher of the watch workload: its plan (what it watches, where its first stream starts),
//! and its task, which follows one stream after another, resuming after every break, stall or
//! lifetime on the next member, and records every response for the checker.

use std::sync::Arc;
use std::time::Duration;

use proto::etcdserverpb as pb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch as signal;
use tokio::time::Instant;
use tonic::transport::Channel;

use super::{last_matching, Phase, KEYS, KEY_PREFIX};
use crate::checker::watch::{Event, WatchResponse, WatchStream};
use crate::recorder::Clock;
use crate::workload::truth;
use crate::workload::watch_client::{self, AckedRevision, Stall, WatchConn};

/// Watchers start this far apart, so that "a little in the past" means something.
const STAGGER: Duration = Duration::from_millis(700);
/// Without faults a stream is moved to the next member after a random lifetime in this range (ms).
const LIFETIME_MS: std::ops::Range<u64> = 3_000..10_000;

/// Whether progress notifications of this server version are ordered with its events: etcd#15220
/// was fixed in 3.4.25 and 3.5.8. Versions that do not parse are assumed fixed.
fn progress_is_ordered(version: &str) -> bool {
    let parts: Vec<u64> = version.split('.').map_while(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [3, 4, patch, ..] => *patch >= 25,
        [3, 5, patch, ..] => *patch >= 8,
        [major, minor, ..] => (*major, *minor) >= (3, 6),
        _ => true,
    }
}

/// What one watcher watches and how it starts.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    index: usize,
    key: String,
    range_end: String,
    /// The member of the first stream.
    member: usize,
    first_start: FirstStart,
    seed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FirstStart {
    Now,
    Beginning,
    /// This many revisions before the latest acknowledged write.
    Past(i64),
}

impl Plan {
    pub(super) fn new(index: usize, members: usize, seed: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed ^ (0x7761_7463_6865_7200 + index as u64));
        let (key, range_end) = match index % 3 {
            0 => (KEY_PREFIX.to_string(), truth::prefix_end(KEY_PREFIX)),
            1 => (format!("{KEY_PREFIX}k{}", rng.gen_range(0..KEYS)), String::new()),
            _ => (format!("{KEY_PREFIX}k1"), format!("{KEY_PREFIX}k3")),
        };
        let first_start = match rng.gen_range(0..3) {
            0 => FirstStart::Now,
            1 => FirstStart::Beginning,
            _ => FirstStart::Past(rng.gen_range(1..30)),
        };
        Plan { index, key, range_end, member: index % members.max(1), first_start, seed }
    }
}

/// Where a watcher's next stream resumes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Position {
    /// Every event up to this revision has been received (or is gone by compaction); 0: nothing
    /// known, so a new stream starts as planned.
    through: i64,
}

impl Position {
    fn advance(&mut self, revision: i64) {
        self.through = self.through.max(revision);
    }

    /// The start revision of the next stream, once something is known.
    fn resume_from(self) -> Option<i64> {
        (self.through > 0).then_some(self.through + 1)
    }
}

/// What one watcher saw over the run.
#[derive(Debug)]
pub(super) struct WatcherLog {
    pub(super) index: usize,
    pub(super) key: String,
    pub(super) range_end: String,
    pub(super) streams: Vec<WatchStream>,
    /// Its position when it stopped.
    pub(super) reached: i64,
    pub(super) trusted_progress: bool,
    pub(super) version: String,
}

/// Why a stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// Broken, stalled or moved: resume on the next member.
    Resume,
    /// Caught up, or told to stop.
    Done,
}

/// A watcher task.
pub(super) struct Watcher {
    pub(super) plan: Plan,
    pub(super) members: Vec<(String, Channel)>,
    pub(super) clock: Clock,
    pub(super) acked: Arc<AckedRevision>,
    pub(super) phase: signal::Receiver<Phase>,
    pub(super) op_timeout: Duration,
}

impl Watcher {
    pub(super) async fn run(mut self) -> WatcherLog {
        let mut rng = StdRng::seed_from_u64(self.plan.seed.wrapping_add(1_000 + self.plan.index as u64));
        let delay = STAGGER * u32::try_from(self.plan.index).unwrap_or(0);
        let version = self.version().await;
        let mut log = WatcherLog {
            index: self.plan.index,
            key: self.plan.key.clone(),
            range_end: self.plan.range_end.clone(),
            streams: Vec::new(),
            reached: 0,
            trusted_progress: version.as_deref().is_some_and(progress_is_ordered),
            version: version.unwrap_or_else(|| "unknown".to_string()),
        };
        let mut position = Position::default();
        let mut member = self.plan.member;
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = self.phase.wait_for(|p| !matches!(p, Phase::Run)) => {}
        }
        while !self.finished(position) {
            let start = match position.resume_from() {
                Some(revision) => revision,
                None => match self.plan.first_start {
                    FirstStart::Now => 0,
                    FirstStart::Beginning => 1,
                    FirstStart::Past(lag) => (self.acked.get() - lag).max(1),
                },
            };
            let (name, channel) = self.members[member].clone();
            member = (member + 1) % self.members.len();
            let create = pb::WatchCreateRequest {
                key: self.plan.key.as_bytes().to_vec(),
                range_end: self.plan.range_end.as_bytes().to_vec(),
                start_revision: start,
                prev_kv: true,
                ..Default::default()
            };
            let Ok(mut conn) = WatchConn::open(channel, create, true, self.op_timeout).await else {
                tokio::time::sleep(watch_client::RETRY_PAUSE).await;
                continue;
            };
            let mut stream = WatchStream {
                id: (self.plan.index * 1000 + log.streams.len()) as u64,
                member: Some(name),
                key: self.plan.key.clone(),
                range_end: self.plan.range_end.clone(),
                start_revision: start,
                prev_kv: true,
                responses: Vec::new(),
            };
            let lifetime = Duration::from_millis(rng.gen_range(LIFETIME_MS));
            let ended = self.follow(&mut conn, &mut stream, &mut position, lifetime, log.trusted_progress).await;
            log.streams.push(stream);
            if ended == Ended::Done {
                break;
            }
        }
        log.reached = position.through;
        log
    }

    /// The server's version, from the first member that answers.
    async fn version(&self) -> Option<String> {
        for (_, channel) in &self.members {
            let mut client = pb::maintenance_client::MaintenanceClient::new(channel.clone());
            if let Ok(status) = crate::client::with_timeout(self.op_timeout, client.status(pb::StatusRequest {})).await
            {
                return Some(status.version);
            }
        }
        None
    }

    /// Whether the watcher is done: told to stop, or caught up with the truth.
    fn finished(&self, position: Position) -> bool {
        if self.phase.has_changed().is_err() {
            return true; // the workload is gone
        }
        match &*self.phase.borrow() {
            Phase::Run => false,
            Phase::Stop => true,
            Phase::CatchUp(truth) => {
                let last = last_matching(truth, &self.plan.key, &self.plan.range_end);
                last == 0 || position.through >= last
            }
        }
    }

    /// Records one stream's responses until it breaks, stalls, outlives `lifetime` or is done.
    async fn follow(
        &mut self,
        conn: &mut WatchConn,
        stream: &mut WatchStream,
        position: &mut Position,
        lifetime: Duration,
        trusted_progress: bool,
    ) -> Ended {
        let retire = Instant::now() + lifetime;
        let mut stall = Stall::default();
        let mut seen = 0;
        let mut ticker = tokio::time::interval(watch_client::TICK);
        loop {
            let response = tokio::select! {
                changed = self.phase.changed() => {
                    if changed.is_err() || self.finished(*position) {
                        return Ended::Done;
                    }
                    continue;
                }
                _ = ticker.tick() => {
                    if self.finished(*position) {
                        return Ended::Done;
                    }
                    let now = Instant::now();
                    if stall.stalled(seen, self.acked.get(), now, watch_client::STALL_AFTER) {
                        return Ended::Resume;
                    }
                    if now >= retire && matches!(*self.phase.borrow(), Phase::Run) {
                        return Ended::Resume;
                    }
                    conn.request_progress();
                    continue;
                }
                response = conn.next() => response,
            };
            let Ok(Some(response)) = response else { return Ended::Resume };
            let header = response.header.as_ref().map_or(0, |h| h.revision);
            seen = seen.max(header);
            if response.compact_revision > 0 {
                // The history up to it is gone: resume after it (the checker judges each stream
                // from its own start). Not at it: a compaction at C drops a tombstone made at C, so
                // a watch from C does not deliver that delete (etcd and ours alike).
                position.advance(response.compact_revision);
                return Ended::Resume;
            }
            if response.canceled {
                return Ended::Resume;
            }
            if response.created {
                if stream.start_revision == 0 {
                    // A watch "from now" delivers every event after the revision of its creation.
                    position.advance(header);
                }
                continue;
            }
            let events: Vec<Event> = response.events.iter().map(watch_client::event).collect();
            let progress_notify = events.is_empty() && trusted_progress;
            if let Some(last) = events.iter().map(|e| e.revision).max() {
                position.advance(last);
            } else if progress_notify {
                position.advance(header);
            }
            stream.responses.push(WatchResponse {
                time_ns: self.clock.now_ns(),
                header_revision: header,
                events,
                progress_notify,
            });
            if self.finished(*position) {
                return Ended::Done;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_versions_order_progress_with_events() {
        let cases = [
            ("3.4.23", false),
            ("3.4.25", true),
            ("3.5.7", false),
            ("3.5.17", true),
            ("3.6.0", true),
            ("4.0.1", true),
            ("dev", true),
        ];
        for (version, ordered) in cases {
            assert_eq!(progress_is_ordered(version), ordered, "{version}");
        }
    }

    #[test]
    fn watchers_cover_every_shape_and_start() {
        let plans: Vec<Plan> = (0..6).map(|i| Plan::new(i, 3, 1)).collect();
        assert!(plans.iter().any(|p| p.range_end == truth::prefix_end(KEY_PREFIX)));
        assert!(plans.iter().any(|p| p.range_end.is_empty()));
        assert!(plans.iter().any(|p| p.range_end.ends_with("k3")));
        assert_eq!(plans.iter().map(|p| p.member).collect::<Vec<_>>(), vec![0, 1, 2, 0, 1, 2]);
        let starts: std::collections::HashSet<String> =
            (0..30).map(|i| format!("{:?}", Plan::new(i, 3, 7).first_start).chars().take(3).collect()).collect();
        assert_eq!(starts.len(), 3, "{starts:?}");
    }

    #[test]
    fn positions_resume_after_what_was_received() {
        let mut position = Position::default();
        assert_eq!(position.resume_from(), None);
        position.advance(7);
        position.advance(5);
        assert_eq!(position.resume_from(), Some(8));
    }
}
