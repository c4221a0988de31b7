//! What a rolling restart costs the clients: writers on the followers put without pause, the leader
//! gets SIGTERM (as systemd or an operator stops a member), and the probe reports the longest time no
//! write was acknowledged around the stop. etcd hands its leadership over before it exits
//! (`TryTransferLeadershipOnShutdown`); a server that does not leaves its clients waiting out an
//! election timeout and an election.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::etcdserverpb as pb;
use serde::Serialize;
use tonic::transport::Channel;
use tracing::info;

use super::stats::ms;
use super::workload::{connect_all, VALUE_SIZE};
use crate::cluster::Cluster;
use crate::error::Result;

/// Writers, each with one put outstanding, spread over the followers.
const WRITERS: usize = 10;
/// How long the writers run before the stop.
const BEFORE: Duration = Duration::from_secs(1);
/// How long they go on after the old leader exited.
const AFTER: Duration = Duration::from_secs(2);
/// How long the leader may take to exit before it is killed (etcd's transfer waits up to an election
/// timeout for the transferee to catch up).
const GRACE: Duration = Duration::from_secs(20);
/// A writer whose put failed waits this long before the next, so that a refusing member is not spun on.
const ERROR_PAUSE: Duration = Duration::from_millis(10);

/// One stop of the leader.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeaderStop {
    pub member: String,
    /// The longest time without an acknowledged write, from the last ack before the SIGTERM to the end.
    pub held_ms: f64,
    /// From the SIGTERM until the process was gone.
    pub exit_ms: f64,
    /// Whether it exited by itself within the grace period.
    pub clean: bool,
    /// Puts that failed (or timed out) after the SIGTERM.
    pub errors: u64,
    /// What the first of them got.
    pub first_error: Option<String>,
}

/// Stops `leader` with SIGTERM under writes to the other members. The member stays stopped.
pub async fn run(cluster: &mut Cluster, leader: usize, timeout: Duration) -> Result<LeaderStop> {
    let urls: Vec<String> = cluster
        .members
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, member)| super::client_url(member))
        .collect();
    let channels = connect_all(&urls, WRITERS).await?;
    let acks = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = channels
        .into_iter()
        .enumerate()
        .map(|(writer, channel)| {
            tokio::spawn(write(writer, channel, timeout, Arc::clone(&acks), Arc::clone(&errors), Arc::clone(&stop)))
        })
        .collect();
    tokio::time::sleep(BEFORE).await;
    let errors_before = lock(&errors).len();
    let member = &mut cluster.members[leader];
    let sent = Instant::now();
    let clean = member.terminate(GRACE).await?;
    let exit_ms = ms(sent.elapsed());
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        let _ = writer.await;
    }
    let end = Instant::now();
    let acks = std::mem::take(&mut *lock(&acks));
    let held_ms = ms(longest_gap(acks, sent, end));
    let after: Vec<String> = lock(&errors).split_off(errors_before);
    let (errors, first_error) = (after.len() as u64, after.into_iter().next());
    info!(member = %member.name, held_ms, exit_ms, clean, errors, first_error, "stopped the leader under writes");
    Ok(LeaderStop { member: member.name.clone(), held_ms, exit_ms, clean, errors, first_error })
}

async fn write(
    writer: usize,
    channel: Channel,
    timeout: Duration,
    acks: Arc<Mutex<Vec<Instant>>>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) {
    let mut kv = pb::kv_client::KvClient::new(channel);
    let value = vec![b'v'; VALUE_SIZE];
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("leader-stop/{writer}/{n}").into_bytes();
        n += 1;
        let put = kv.put(pb::PutRequest { key, value: value.clone(), ..Default::default() });
        match tokio::time::timeout(timeout, put).await {
            Ok(Ok(_)) => lock(&acks).push(Instant::now()),
            failed => {
                let text = match failed {
                    Ok(Err(status)) => crate::client::describe(&status),
                    _ => format!("no answer within {timeout:?}"),
                };
                lock(&errors).push(text);
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The longest stretch without an ack between the last ack before `from` (or `from` itself) and `end`.
fn longest_gap(mut acks: Vec<Instant>, from: Instant, end: Instant) -> Duration {
    acks.sort_unstable();
    let start = acks.iter().rev().find(|&&at| at <= from).copied().unwrap_or(from);
    let mut previous = start;
    let mut longest = Duration::ZERO;
    for at in acks.into_iter().filter(|&at| at > from).chain([end]) {
        longest = longest.max(at.saturating_duration_since(previous));
        previous = previous.max(at);
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_runs_from_the_last_ack_before_the_stop_to_the_first_after_or_the_end() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Acks every 10 ms, a stop at 100, nothing from 95 to 400, then acks again until the end at 600.
        let mut acks: Vec<Instant> = (0..10).map(|i| at(i * 10 + 5)).collect();
        acks.extend((40..60).map(|i| at(i * 10)));
        assert_eq!(longest_gap(acks.clone(), at(100), at(600)), Duration::from_millis(305));
        // No ack after the stop: the gap runs to the end.
        let before: Vec<Instant> = acks.iter().copied().filter(|&a| a <= at(100)).collect();
        assert_eq!(longest_gap(before, at(100), at(600)), Duration::from_millis(505));
        // Order does not matter, and a gap before the stop does not count.
        let mut shuffled = vec![at(0), at(90), at(120), at(110), at(130)];
        shuffled.reverse();
        assert_eq!(longest_gap(shuffled, at(100), at(135)), Duration::from_millis(20));
        // No ack at all.
        assert_eq!(longest_gap(Vec::new(), at(100), at(300)), Duration::from_millis(200));
    }
}
