//! etcd's peer prober: every few seconds each member times a small request to every other member over
//! the peer connection, and records the round trip in `etcd_network_peer_round_trip_time_seconds`.
//!
//! etcd probes `/raft/probing` on the peer port; we ask the gRPC health service the peer server carries,
//! over the same channel (and so from the same source address) as Raft's own messages.

use std::time::{Duration, Instant};

use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::metrics::metrics;
use crate::network::PeerNetwork;
use crate::typ::{NodeId, Raft};

/// How often each peer is probed (etcd: every 4 s, its read timeout less a second).
const PROBE_INTERVAL: Duration = Duration::from_secs(4);
/// A probe not answered within this is a failed one, and records nothing.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Probes every peer in the membership until Raft stops.
pub async fn probe_peers(network: PeerNetwork, raft: Raft, own: NodeId) {
    let mut watch = raft.server_metrics();
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        if watch.has_changed().is_err() {
            return;
        }
        let peers: Vec<(NodeId, String)> = {
            let metrics = watch.borrow_and_update();
            let membership = metrics.membership_config.membership();
            membership
                .nodes()
                .filter(|(id, _)| **id != own)
                .filter_map(|(id, node)| Some((*id, node.peer_urls.first()?.clone())))
                .collect()
        };
        for (id, url) in peers {
            let Some(channel) = network.channel(&url) else { continue };
            // One task per probe: a peer that does not answer delays no other's probe.
            tokio::spawn(async move {
                let mut request = tonic::Request::new(HealthCheckRequest { service: String::new() });
                request.set_timeout(PROBE_TIMEOUT);
                let start = Instant::now();
                if let Ok(Ok(_)) = tokio::time::timeout(PROBE_TIMEOUT, HealthClient::new(channel).check(request)).await
                {
                    metrics().peer_rtt(id).observe(start.elapsed());
                }
            });
        }
    }
}
