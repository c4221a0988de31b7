//! The one error type of the etcd API, and the one table that turns it into a gRPC status with etcd's code
//! and exact message (clients match on the text).

use serde::{Deserialize, Serialize};
use tonic::{Code, Status};

/// Everything a request can fail with. Variants that a request can cause travel back through Raft, so
/// the type is serializable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum Error {
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    #[error("etcdserver: key not found")]
    KeyNotFound,
    #[error("etcdserver: value is provided")]
    ValueProvided,
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    #[error("etcdserver: too many operations in txn request")]
    TooManyOps,
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    #[error("etcdserver: request is too large")]
    RequestTooLarge,
    /// A Range's `sort_order` or `sort_target` outside its enum (etcd 3.6 checks it first; 3.5 panics).
    #[error("etcdserver: invalid sort option")]
    InvalidSortOption,
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted,
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRevision,
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
    #[error("etcdserver: no leader")]
    NoLeader,
    #[error("etcdserver: not capable")]
    NotCapable,
    #[error("etcdserver: server stopped")]
    Stopped,
    #[error("etcdserver: request timed out")]
    Timeout,
    #[error("etcdserver: leader changed")]
    LeaderChanged,
    #[error("etcdserver: not leader")]
    NotLeader,
    #[error("etcdserver: rpc not supported for learner")]
    NotSupportedForLearner,
    #[error("etcdserver: bad leader transferee")]
    BadLeaderTransferee,
    #[error("etcdserver: member ID already exist")]
    MemberExists,
    #[error("etcdserver: too many learner members in cluster")]
    TooManyLearners,
    #[error("etcdserver: Peer URLs already exists")]
    PeerUrlExists,
    #[error("etcdserver: given member URLs are invalid")]
    MemberBadUrls,
    #[error("etcdserver: member not found")]
    MemberNotFound,
    #[error("etcdserver: can only promote a learner member")]
    MemberNotLearner,
    #[error("etcdserver: can only promote a learner member which is in sync with leader")]
    LearnerNotReady,
    #[error("etcdserver: wrong downgrade target version format")]
    WrongDowngradeVersionFormat,
    #[error("etcdserver: invalid downgrade target version")]
    InvalidDowngradeTargetVersion,
    #[error("etcdserver: cluster has a downgrade job in progress")]
    DowngradeInProcess,
    #[error("etcdserver: no inflight downgrade job")]
    NoInflightDowngrade,
    /// `--strict-reconfig-check`: the change would leave fewer started voters than a quorum.
    #[error("etcdserver: re-configuration failed due to not enough started members")]
    NotEnoughStartedMembers,
    /// `--strict-reconfig-check`: the members the change needs have not all been reachable for a while.
    #[error("etcdserver: unhealthy cluster")]
    Unhealthy,
    /// The backend passed `--quota-backend-bytes`, or the NOSPACE alarm is active.
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    /// The CORRUPT alarm is active: a member's data disagrees with the others'.
    #[error("etcdserver: corrupt cluster")]
    Corrupt,
    #[error("etcdserver: root user does not exist")]
    RootUserNotExist,
    #[error("etcdserver: root user does not have root role")]
    RootRoleNotExist,
    #[error("etcdserver: user name already exists")]
    UserExists,
    #[error("etcdserver: user name is empty")]
    UserEmpty,
    #[error("etcdserver: user name not found")]
    UserNotFound,
    #[error("etcdserver: role name already exists")]
    RoleExists,
    #[error("etcdserver: role name not found")]
    RoleNotFound,
    #[error("etcdserver: role name is empty")]
    RoleEmpty,
    #[error("etcdserver: authentication failed, invalid user ID or password")]
    AuthFailed,
    /// etcd has no gRPC status of its own for it: its text passes through with code Unknown.
    #[error("auth: authentication failed, password was given for no password user")]
    NoPasswordUser,
    /// A password past bcrypt's 72 bytes: etcd 3.6's bcrypt (golang.org/x/crypto ≥ 0.3) refuses to hash
    /// it, and etcd passes the text through with code Unknown.
    #[error("bcrypt: password length exceeds 72 bytes")]
    PasswordTooLong,
    #[error("etcdserver: permission denied")]
    PermissionDenied,
    #[error("etcdserver: role is not granted to the user")]
    RoleNotGranted,
    #[error("etcdserver: permission is not granted to the role")]
    PermissionNotGranted,
    /// RoleGrantPermission without its `perm`.
    #[error("etcdserver: permission not given")]
    PermissionNotGiven,
    #[error("etcdserver: authentication is not enabled")]
    AuthNotEnabled,
    #[error("etcdserver: invalid auth token")]
    InvalidAuthToken,
    #[error("etcdserver: invalid auth management")]
    InvalidAuthMgmt,
    #[error("etcdserver: revision of auth store is old")]
    AuthOldRevision,
    /// Leader on an election nobody holds (etcd's `concurrency.ErrElectionNoLeader`).
    #[error("election: no leader")]
    ElectionNoLeader,
    /// Proclaim with a leader key that no longer leads (etcd's `concurrency.ErrElectionNotLeader`).
    #[error("election: not leader")]
    ElectionNotLeader,
    /// Proclaim or Resign without their `leader` field (etcd's `v3election.ErrMissingLeaderKey`).
    #[error("\"leader\" field must be provided")]
    MissingLeaderKey,
    /// A Lock waited its turn but its own key was gone by then: its lease expired meanwhile (etcd 3.5's
    /// `concurrency.ErrSessionExpired`).
    #[error("session expired")]
    SessionExpired,
    /// The store or the consensus layer failed in a way no request caused (disk error, broken invariant).
    #[error("etcdserver: {0}")]
    Internal(String),
}

impl Error {
    /// The gRPC code etcd answers with for this error.
    pub fn code(&self) -> Code {
        match self {
            Error::EmptyKey
            | Error::KeyNotFound
            | Error::ValueProvided
            | Error::LeaseProvided
            | Error::TooManyOps
            | Error::DuplicateKey
            | Error::RequestTooLarge
            | Error::InvalidSortOption
            | Error::PermissionNotGiven
            | Error::MemberBadUrls
            | Error::UserEmpty
            | Error::RoleEmpty
            | Error::AuthFailed
            | Error::InvalidAuthMgmt
            | Error::AuthOldRevision
            | Error::WrongDowngradeVersionFormat
            | Error::InvalidDowngradeTargetVersion => Code::InvalidArgument,
            Error::Compacted | Error::FutureRevision | Error::LeaseTtlTooLarge => Code::OutOfRange,
            Error::LeaseNotFound | Error::MemberNotFound => Code::NotFound,
            Error::NotLeader
            | Error::LeaseExists
            | Error::BadLeaderTransferee
            | Error::MemberExists
            | Error::TooManyLearners
            | Error::PeerUrlExists
            | Error::MemberNotLearner
            | Error::LearnerNotReady
            | Error::NotEnoughStartedMembers
            | Error::DowngradeInProcess
            | Error::NoInflightDowngrade
            | Error::RootUserNotExist
            | Error::RootRoleNotExist
            | Error::UserExists
            | Error::UserNotFound
            | Error::RoleExists
            | Error::RoleNotFound
            | Error::RoleNotGranted
            | Error::PermissionNotGranted
            | Error::AuthNotEnabled => Code::FailedPrecondition,
            Error::PermissionDenied => Code::PermissionDenied,
            Error::InvalidAuthToken => Code::Unauthenticated,
            Error::NoLeader
            | Error::NotCapable
            | Error::Stopped
            | Error::Timeout
            | Error::LeaderChanged
            | Error::NotSupportedForLearner
            | Error::Unhealthy => Code::Unavailable,
            Error::NoSpace => Code::ResourceExhausted,
            Error::Corrupt => Code::DataLoss,
            Error::ElectionNoLeader
            | Error::ElectionNotLeader
            | Error::MissingLeaderKey
            | Error::SessionExpired
            | Error::NoPasswordUser
            | Error::PasswordTooLong
            | Error::Internal(_) => Code::Unknown,
        }
    }
}

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        Status::new(err.code(), err.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_etcd_codes_and_texts() {
        let cases = [
            (Error::EmptyKey, Code::InvalidArgument, "etcdserver: key is not provided"),
            (Error::Compacted, Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted"),
            (Error::FutureRevision, Code::OutOfRange, "etcdserver: mvcc: required revision is a future revision"),
            (Error::TooManyOps, Code::InvalidArgument, "etcdserver: too many operations in txn request"),
            (Error::DuplicateKey, Code::InvalidArgument, "etcdserver: duplicate key given in txn request"),
            (Error::RequestTooLarge, Code::InvalidArgument, "etcdserver: request is too large"),
            (Error::InvalidSortOption, Code::InvalidArgument, "etcdserver: invalid sort option"),
            (Error::PermissionNotGiven, Code::InvalidArgument, "etcdserver: permission not given"),
            (Error::LeaseNotFound, Code::NotFound, "etcdserver: requested lease not found"),
            (Error::NoLeader, Code::Unavailable, "etcdserver: no leader"),
            (Error::MemberNotFound, Code::NotFound, "etcdserver: member not found"),
            (Error::PeerUrlExists, Code::FailedPrecondition, "etcdserver: Peer URLs already exists"),
            (Error::MemberNotLearner, Code::FailedPrecondition, "etcdserver: can only promote a learner member"),
            (Error::TooManyLearners, Code::FailedPrecondition, "etcdserver: too many learner members in cluster"),
            (Error::NoSpace, Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded"),
            (Error::Corrupt, Code::DataLoss, "etcdserver: corrupt cluster"),
            (Error::UserEmpty, Code::InvalidArgument, "etcdserver: user name is empty"),
            (Error::UserNotFound, Code::FailedPrecondition, "etcdserver: user name not found"),
            (Error::PermissionDenied, Code::PermissionDenied, "etcdserver: permission denied"),
            (Error::InvalidAuthToken, Code::Unauthenticated, "etcdserver: invalid auth token"),
            (Error::AuthOldRevision, Code::InvalidArgument, "etcdserver: revision of auth store is old"),
            (
                Error::AuthFailed,
                Code::InvalidArgument,
                "etcdserver: authentication failed, invalid user ID or password",
            ),
            (Error::ElectionNoLeader, Code::Unknown, "election: no leader"),
            (Error::ElectionNotLeader, Code::Unknown, "election: not leader"),
            (Error::MissingLeaderKey, Code::Unknown, "\"leader\" field must be provided"),
        ];
        for (err, code, text) in cases {
            let status = Status::from(err);
            assert_eq!(status.code(), code);
            assert_eq!(status.message(), text);
        }
    }
}
