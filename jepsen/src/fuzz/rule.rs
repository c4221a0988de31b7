//! The 3.6 rules that stand in for etcd's answer, by name: the rules' files say which one applied, the
//! report counts each apart.

/// A rule of [`super::etcd36`] (or [`super::known`], [`super::hardening`]) that gave etcd 3.6's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule36 {
    /// A RoleGrantPermission of a range 3.6 refuses, held back ([`super::known`]).
    GrantInvalidRange,
    /// A request 3.6 takes from admins only, refused: held back, 3.6's refusal stands in.
    AdminRequired,
    /// An admin-only request 3.5.1 refused too, its unmapped error turned into 3.6's mapped one.
    AdminMapped,
    /// A request 3.6 takes from a user only (no token, an unknown token), refused.
    UserRequired,
    /// A lease request refused for a key of the lease the user may not read (or write).
    LeaseKeys,
    /// A Txn refused for a top-level Put's `prev_kv` or `lease` (etcd-io/etcd 633de82d0).
    TxnPut,
    /// A Txn refused for something inside a nested Txn, which 3.5.1 does not check.
    TxnNested,
    /// A UserAdd or UserChangePassword whose password is past bcrypt's 72 bytes: 3.6's bcrypt refuses to
    /// hash it, 3.5.1's hashed the first 72 bytes.
    PasswordTooLong,
}
