//! etcd's auto compaction on the leader (`--auto-compaction-mode`, `--auto-compaction-retention`):
//!
//! - **periodic**: keep `retention` of history (a plain number is hours, else a Go duration such as
//!   `30m`). The current revision is sampled every tenth of the retention (of an hour at most); every
//!   retention (an hour at most) the leader compacts to the revision sampled a retention ago.
//! - **revision**: keep the last `retention` revisions: every 5 minutes the leader compacts to the
//!   current revision less the retention.
//!
//! Compactions go through the log like a client's `Compact`, so every member compacts at the same
//! place. Followers only sample; the samples start over when leadership moves, as etcd's compactor
//! pauses and resumes.

use std::collections::VecDeque;
use std::time::Duration;

use proto::etcdserverpb as pb;
use tracing::{info, warn};

use crate::config::parse_duration;
use crate::leader::Leader;
use crate::leader_wire::{LeaderReply, LeaderRequest};

/// etcd's revision compactor checks this often.
const REVISION_CHECK: Duration = Duration::from_secs(300);

/// The compaction policy the flags ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Periodic(Duration),
    Revision(i64),
}

/// `--auto-compaction-mode` and `--auto-compaction-retention` as etcd reads them; `None` when disabled
/// (a retention of 0).
pub fn policy(mode: &str, retention: &str) -> Result<Option<Policy>, String> {
    let bad = || format!("invalid --auto-compaction-retention {retention:?} for mode {mode:?}");
    match mode {
        "revision" => match retention.parse::<i64>().map_err(|_| bad())? {
            0 => Ok(None),
            keep if keep > 0 => Ok(Some(Policy::Revision(keep))),
            _ => Err(bad()),
        },
        "periodic" => {
            let period = match retention.parse::<u64>() {
                Ok(hours) => Duration::from_secs(hours * 3600),
                Err(_) => parse_duration(retention).map_err(|_| bad())?,
            };
            Ok((!period.is_zero()).then_some(Policy::Periodic(period)))
        }
        other => Err(format!("unknown auto-compaction-mode {other:?}")),
    }
}

/// Runs the compactor until the process ends.
pub async fn run(leader: Leader, policy: Policy) {
    match policy {
        Policy::Periodic(period) => periodic(leader, period).await,
        Policy::Revision(keep) => revision(leader, keep).await,
    }
}

fn leading(leader: &Leader) -> bool {
    leader.raft.metrics().borrow().current_leader == Some(leader.member_id)
}

async fn periodic(leader: Leader, period: Duration) {
    let interval = period.min(Duration::from_secs(3600));
    let sample_every = interval / 10;
    // One sample per tick over a whole retention, plus the current one.
    let window = (period.as_nanos() / sample_every.as_nanos().max(1)) as usize + 1;
    info!(retention = ?period, "starting auto periodic compaction");
    let mut samples: VecDeque<i64> = VecDeque::with_capacity(window + 1);
    let mut ticker = tokio::time::interval(sample_every);
    let mut since_compaction = Duration::ZERO;
    loop {
        ticker.tick().await;
        if !leading(&leader) {
            samples.clear();
            since_compaction = Duration::ZERO;
            continue;
        }
        samples.push_back(leader.store.read().current_revision());
        if samples.len() > window {
            samples.pop_front();
        }
        since_compaction += sample_every;
        // A full window means the oldest sample is a retention old.
        if samples.len() < window || since_compaction < interval {
            continue;
        }
        since_compaction = Duration::ZERO;
        if let Some(&revision) = samples.front() {
            compact(&leader, revision, "periodic").await;
        }
    }
}

async fn revision(leader: Leader, keep: i64) {
    info!(retention = keep, "starting auto revision compaction");
    let mut ticker = tokio::time::interval(REVISION_CHECK);
    loop {
        ticker.tick().await;
        if !leading(&leader) {
            continue;
        }
        let target = leader.store.read().current_revision() - keep;
        if target > leader.store.read().compacted_revision() {
            compact(&leader, target, "revision").await;
        }
    }
}

async fn compact(leader: &Leader, revision: i64, mode: &'static str) {
    if revision <= leader.store.read().compacted_revision() {
        return;
    }
    info!(compact_revision = revision, mode, "starting auto compaction");
    let request = kv_api::Command::Compact(pb::CompactionRequest { revision, physical: false });
    match leader.handle(LeaderRequest::Write(request)).await {
        Ok(LeaderReply::Written { applied: Ok(_), .. }) => {
            info!(compact_revision = revision, mode, "completed auto compaction")
        }
        Ok(LeaderReply::Written { applied: Err(err), .. }) | Err(err) => {
            warn!(compact_revision = revision, mode, %err, "failed auto compaction")
        }
        Ok(other) => warn!(compact_revision = revision, mode, ?other, "failed auto compaction"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_reads_as_etcd_reads_it() {
        assert_eq!(policy("periodic", "0"), Ok(None));
        assert_eq!(policy("periodic", "1"), Ok(Some(Policy::Periodic(Duration::from_secs(3600)))));
        assert_eq!(policy("periodic", "30m"), Ok(Some(Policy::Periodic(Duration::from_secs(1800)))));
        assert_eq!(policy("revision", "1000"), Ok(Some(Policy::Revision(1000))));
        assert_eq!(policy("revision", "0"), Ok(None));
        assert!(policy("revision", "1h").is_err());
        assert!(policy("periodic", "soon").is_err());
    }
}
