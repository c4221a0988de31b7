//! Who this member is: its id and its cluster's, fixed at first boot — computed from `--initial-cluster`
//! for a new cluster, or learned from the running cluster for a member added with `member add` — and the
//! membership a new cluster starts with.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::bail;
use tracing::warn;

use crate::config::Config;
use crate::forward::Forwarder;
use crate::identity::Identity;
use crate::leader_wire::{LeaderReply, LeaderRequest};
use crate::member_id::{cluster_id, member_id};
use crate::typ::{MemberNode, NodeId};

/// This member's identity: the one saved in `member_dir` (a restarted member ignores the bootstrap flags,
/// as etcd's does), or a new one, saved before anything else happens.
pub async fn identity(
    config: &Config,
    bootstrap: &BTreeMap<NodeId, MemberNode>,
    forwarder: &Forwarder,
    member_dir: &Path,
) -> anyhow::Result<Identity> {
    if let Some(identity) = Identity::load(member_dir)? {
        return Ok(identity);
    }
    let identity = match config.initial_cluster_state.as_str() {
        "new" => Identity {
            member_id: member_id(&config.initial_advertise_peer_urls, &config.initial_cluster_token),
            cluster_id: cluster_id(bootstrap.keys().copied()),
        },
        _ => join_identity(config, bootstrap, forwarder).await?,
    };
    identity.save(member_dir)?;
    Ok(identity)
}

/// The voters a new cluster starts with, from `--initial-cluster`. Every member must propose exactly the
/// same membership, so client URLs are left out here: each member publishes its own once running.
pub fn initial_members(
    config: &Config,
    initial_cluster: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<NodeId, MemberNode> {
    initial_cluster
        .iter()
        .map(|(name, peer_urls)| {
            let node = MemberNode { name: name.clone(), peer_urls: peer_urls.clone(), client_urls: Vec::new() };
            (member_id(peer_urls, &config.initial_cluster_token), node)
        })
        .collect()
}

/// A member joining a running cluster (`--initial-cluster-state existing`, after `member add`) learns its id
/// and the cluster's from the other members listed in `--initial-cluster`.
async fn join_identity(
    config: &Config,
    bootstrap: &BTreeMap<NodeId, MemberNode>,
    forwarder: &Forwarder,
) -> anyhow::Result<Identity> {
    let mut own_urls = config.initial_advertise_peer_urls.clone();
    own_urls.sort();
    let peers: Vec<&MemberNode> = bootstrap.values().filter(|node| node.name != config.name).collect();
    if peers.is_empty() {
        bail!("--initial-cluster-state existing needs the other members in --initial-cluster");
    }
    for attempt in 0..30 {
        for peer in &peers {
            match forwarder.send(peer, &LeaderRequest::ClusterInfo, Duration::from_secs(2)).await {
                Ok(LeaderReply::ClusterInfo { cluster_id, members }) => {
                    let own = members.iter().find(|m| {
                        let mut urls = m.peer_ur_ls.clone();
                        urls.sort();
                        urls == own_urls
                    });
                    match own {
                        Some(member) => return Ok(Identity { member_id: member.id, cluster_id }),
                        None => bail!(
                            "this member ({}) is not in the cluster: add it first with `etcdctl member add`",
                            own_urls.join(",")
                        ),
                    }
                }
                Ok(other) => warn!(?other, "unexpected answer to a cluster info request"),
                Err(err) => warn!(peer = %peer, %err, attempt, "cannot reach a member of the cluster yet"),
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    bail!("could not reach any member of the existing cluster listed in --initial-cluster")
}
