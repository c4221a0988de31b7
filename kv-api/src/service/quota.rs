//! etcd's quota check at the gRPC layer (`v3rpc/quota.go`): before a request that takes space is
//! proposed, this member's backend size plus etcd's charge for the request is compared with
//! `--quota-backend-bytes`; past it, the NOSPACE alarm is raised through the log (so every member
//! refuses such writes from then on, and the alarm survives restarts) and the request is refused.

use proto::etcdserverpb as pb;
use tracing::warn;

use crate::alarm;
use crate::command::Command;
use crate::consensus::Consensus;
use crate::error::{Error, Result};
use crate::store::SharedStore;

/// etcd's default quota (`--quota-backend-bytes` 0): 2 GiB.
pub const DEFAULT_QUOTA_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// Refuses `command` with [`Error::NoSpace`], raising the alarm, when it would take the backend past
/// `quota_bytes` (`None`: no quota).
pub(crate) async fn check<C: Consensus>(
    consensus: &C,
    store: &SharedStore,
    quota_bytes: Option<u64>,
    command: &Command,
) -> Result<()> {
    let cost = alarm::quota_cost(command);
    let Some(quota_bytes) = quota_bytes else { return Ok(()) };
    if cost == 0 {
        return Ok(());
    }
    let size = store.read().backend().size_bytes();
    if size.saturating_add(cost) < quota_bytes {
        return Ok(());
    }
    let member_id = consensus.header().member_id;
    warn!(size, quota_bytes, member_id = format!("{member_id:x}"), "backend quota exceeded; raising NOSPACE");
    let raise = Command::Alarm(pb::AlarmRequest {
        action: pb::alarm_request::AlarmAction::Activate as i32,
        member_id,
        alarm: pb::AlarmType::Nospace as i32,
    });
    // As etcd, the request is refused whether or not the alarm could be raised now; the next request
    // past the quota tries again.
    if let Err(err) = consensus.propose(raise).await {
        warn!(%err, "cannot raise the NOSPACE alarm");
    }
    Err(Error::NoSpace)
}
