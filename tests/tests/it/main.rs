//! One integration test binary (one link) holding every end-to-end test.
//!
//! Each test starts its own member (`KV_TEST_SERVER=etcd|ours`) on free ports, so tests run in
//! parallel. Every expectation is what real etcd 3.4 does.

mod auth;
mod auth_jwt;
mod bad_input;
mod client_error;
mod client_kv;
mod client_txn;
mod cluster_check_quorum;
mod cluster_early_appends;
mod cluster_failover;
mod cluster_follower_catchup;
mod cluster_followers_serve;
mod cluster_forwarded_writes;
mod cluster_isolation;
mod cluster_membership;
mod cluster_no_disruption;
mod cluster_shutdown;
mod cluster_slow_disk;
mod cluster_writer;
mod crash;
mod deploy;
mod etcdctl_kv;
mod etcdctl_script;
mod http_endpoints;
mod lease_client;
mod lease_etcdctl;
mod lease_expiry;
mod lock_election;
mod maintenance;
mod maintenance_compaction;
mod maintenance_quota;
mod membership_rules;
mod memory_gauges;
mod snapshot;
mod snapshot_etcd;
mod store_values_apart;
mod tls;
mod tls_policy;
mod util;
mod watch_client;
mod watch_cluster;
mod watch_etcdctl;
mod watch_gauges;
mod watch_random;
mod watch_util;
