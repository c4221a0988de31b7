//! etcd's periodic corruption check (`--experimental-corrupt-check-time`): every interval the leader
//! compares its `HashKV` at its current revision with every other member's at the same revision, and
//! raises the CORRUPT alarm (through the log, so every member refuses requests from then on) for a
//! member that reports the same compacted revision but a different hash, as etcd 3.4's
//! `checkHashKV` does.
//!
//! With `--experimental-initial-corrupt-check` a member makes the same comparison once before it
//! serves clients, and refuses to start on a mismatch.
//!
//! The other members are asked on their peer URLs (`RaftPeer.HashKv`), as etcd asks its peers' HTTP
//! endpoints: client auth and client TLS do not apply there.

use std::sync::Arc;
use std::time::Duration;

use kv_api::{Command, Consensus, SharedStore};
use proto::etcdserverpb as pb;
use proto::raftpb::{self, raft_peer_client::RaftPeerClient};
use tracing::{debug, error, warn};

use crate::consensus::RaftConsensus;
use crate::dial::PeerDialer;
use crate::peer_service::PeerHash;
use crate::storage::{decode, encode};

/// How long a member has to answer the leader's hash request.
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the check every `interval` while this member leads, forever.
pub async fn check_periodically(
    consensus: Arc<RaftConsensus>,
    store: SharedStore,
    dialer: PeerDialer,
    interval: Duration,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        if let Err(err) = check_once(&consensus, &store, &dialer).await {
            warn!(%err, "corruption check failed");
        }
    }
}

/// One pass; returns the member ids found corrupt (and raises the alarm for each).
pub async fn check_once(
    consensus: &RaftConsensus,
    store: &SharedStore,
    dialer: &PeerDialer,
) -> anyhow::Result<Vec<u64>> {
    let own_id = consensus.header().member_id;
    if consensus.raft_status().leader != own_id {
        return Ok(Vec::new());
    }
    let corrupt = diverged_members(consensus, store, dialer).await?;
    for &member_id in &corrupt {
        let raise = Command::Alarm(pb::AlarmRequest {
            action: pb::alarm_request::AlarmAction::Activate as i32,
            member_id,
            alarm: pb::AlarmType::Corrupt as i32,
        });
        consensus.propose(raise).await?;
    }
    Ok(corrupt)
}

/// etcd's `--experimental-initial-corrupt-check`: before this member serves clients, its hash at its
/// revision must match every reachable member's at the same revision and compacted revision.
pub async fn check_initially(
    consensus: &RaftConsensus,
    store: &SharedStore,
    dialer: &PeerDialer,
) -> anyhow::Result<()> {
    let diverged = diverged_members(consensus, store, dialer).await?;
    if !diverged.is_empty() {
        let ids: Vec<String> = diverged.iter().map(|id| format!("{id:x}")).collect();
        anyhow::bail!("found data inconsistency with peers {}", ids.join(","));
    }
    tracing::info!("initial corruption check passed: no corruption found");
    Ok(())
}

/// The members whose `HashKV` at this member's current revision differs from this member's while they
/// report the same compacted revision; members that cannot answer are skipped (with a warning).
async fn diverged_members(
    consensus: &RaftConsensus,
    store: &SharedStore,
    dialer: &PeerDialer,
) -> anyhow::Result<Vec<u64>> {
    let own_id = consensus.header().member_id;
    // This member's hash and every other's at once, at the revision this member's hash fixes first:
    // each takes seconds for a million revisions, and the peers used to be asked one after the other
    // once this member was done.
    let (fixed_tx, fixed_rx) = tokio::sync::oneshot::channel();
    let local = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            kv_api::hash::hash_kv_shared_then(&store, 0, |revision| {
                let _ = fixed_tx.send(revision);
            })
        })
    };
    let Ok(revision) = fixed_rx.await else {
        // The local hash failed before it fixed a revision: its error is the answer.
        local.await??;
        anyhow::bail!("the local hash ended without a revision");
    };
    let peers = consensus.members().into_iter().filter(|member| member.id != own_id).filter_map(|member| {
        let url = member.peer_ur_ls.first()?.clone();
        Some(async move { (member.id, tokio::time::timeout(PEER_TIMEOUT, peer_hash(dialer, &url, revision)).await) })
    });
    let (local, peers) = tokio::join!(local, futures::future::join_all(peers));
    let local = local??;
    let mut diverged = Vec::new();
    for (member_id, answer) in peers {
        let peer = match answer {
            Ok(Ok(peer)) => peer,
            Ok(Err(err)) => {
                warn!(member_id = format!("{member_id:x}"), %err, "cannot fetch a member's hash");
                continue;
            }
            Err(_) => {
                warn!(member_id = format!("{member_id:x}"), "a member's hash did not come in time");
                continue;
            }
        };
        if peer.compact_revision == local.compact_revision && peer.hash != local.hash {
            error!(
                member_id = format!("{member_id:x}"),
                revision = local.current_revision,
                compact_revision = local.compact_revision,
                local_hash = local.hash,
                member_hash = peer.hash,
                "found data inconsistency with a member"
            );
            diverged.push(member_id);
        } else {
            debug!(member_id = format!("{member_id:x}"), hash = peer.hash, "member hash matches");
        }
    }
    Ok(diverged)
}

/// A member's hash at `revision` and its compacted revision, asked on its peer URL.
async fn peer_hash(dialer: &PeerDialer, url: &str, revision: i64) -> anyhow::Result<PeerKvHash> {
    let channel = dialer.channel(url).ok_or_else(|| anyhow::anyhow!("cannot dial {url}"))?;
    let mut client = RaftPeerClient::new(channel);
    let request = raftpb::RaftMessage { payload: encode(&revision)? };
    let answer: PeerHash = decode(&client.hash_kv(request).await?.into_inner().payload)?;
    let (hash, _, compact_revision) = answer.map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(PeerKvHash { hash, compact_revision })
}

struct PeerKvHash {
    hash: u32,
    compact_revision: i64,
}
