//! End to end: `jepsen test`, `jepsen campaign` and `jepsen bench` against our three-member
//! cluster, each run in private network and PID namespaces; `jepsen fuzz` against one member of ours
//! and one of etcd 3.5.1 (plain processes, no namespaces). One test binary for all (one link);
//! each module covers one part of the harness, and a run must both come out right and show that
//! its faults acted.
//!
//! They need root (`unshare --net --pid`), nftables and a built `raft-node` next to the `jepsen`
//! binary (`cargo build -p raft-node`); without them they skip with a message, or fail when the run
//! requires them (`CI`, `scripts/test`). The runs share two
//! cores with everything else, so they run one at a time and stay short.

mod common;

mod bench;
mod campaign;
mod cluster_faults;
mod fuzz;
mod lease;
mod net_faults;
mod register;
mod scale;
mod set_append;
mod watch_mixed;
