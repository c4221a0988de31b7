//! The wire contract: etcd v3's public gRPC API (as of etcd 3.5) and our
//! internal peer protocol, generated from `proto/**/*.proto` at build time.
//!
//! # Layout
//!
//! - [`etcdserverpb`]: the `KV`, `Watch`, `Lease`, `Cluster`, `Maintenance`
//!   and `Auth` services with their messages (`proto/etcdserverpb/rpc.proto`).
//! - [`mvccpb`]: `KeyValue` and `Event`, the stored record and the watch event.
//! - [`authpb`]: `User`, `Role` and `Permission`.
//! - [`v3electionpb`]: the `Election` service.
//! - [`v3lockpb`]: the `Lock` service.
//! - [`raftpb`]: the `RaftPeer` service between members; not part of etcd's
//!   API. Its messages carry bincode-encoded openraft requests and responses.
//! - [`FILE_DESCRIPTOR_SET`]: every file above as an encoded
//!   `FileDescriptorSet`, for gRPC reflection.
//!
//! Names and field numbers in `etcdserverpb`, `mvccpb`, `authpb`,
//! `v3electionpb` and `v3lockpb` match etcd's exactly, so stock etcd clients
//! work. Messages of `etcdserverpb`, `mvccpb` and `authpb` also derive serde,
//! because the Raft log stores them.

// Generated code is not held to the workspace lints.

/// etcd's KV, Watch, Lease, Cluster, Maintenance and Auth services.
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}

/// Stored key-values and watch events.
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}

/// Users, roles and permissions.
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod authpb {
    tonic::include_proto!("authpb");
}

/// The Election service.
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod v3electionpb {
    tonic::include_proto!("v3electionpb");
}

/// The Lock service.
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod v3lockpb {
    tonic::include_proto!("v3lockpb");
}

/// The internal Raft peer service.
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod raftpb {
    tonic::include_proto!("raftpb");
}

/// Encoded `google.protobuf.FileDescriptorSet` of every `.proto` in this crate.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptor.bin"));

#[cfg(test)]
mod tests {
    use prost::Message;
    use prost_types::FileDescriptorSet;

    use super::{etcdserverpb as pb, mvccpb};

    /// Fields whose numbers are unusual in etcd and easy to get wrong.
    #[test]
    fn odd_field_numbers_are_on_the_wire() {
        let compare = pb::Compare { range_end: b"z".to_vec(), ..Default::default() };
        // Field 64, wire type 2: key varint 0x0202 = [0x82, 0x04].
        assert_eq!(compare.encode_to_vec(), [0x82, 0x04, 0x01, b'z']);

        let watch = pb::WatchResponse { events: vec![mvccpb::Event::default()], ..Default::default() };
        // Field 11, wire type 2: key 0x5a, then an empty Event.
        assert_eq!(watch.encode_to_vec(), [0x5a, 0x00]);

        let grant = pb::LeaseGrantRequest { ttl: 5, id: 7 };
        assert_eq!(grant.encode_to_vec(), [0x08, 5, 0x10, 7]);

        let members = pb::MemberListRequest { linearizable: true };
        assert_eq!(members.encode_to_vec(), [0x08, 1]);
    }

    #[test]
    fn range_request_round_trips() {
        let request = pb::RangeRequest {
            key: b"a".to_vec(),
            range_end: b"b".to_vec(),
            limit: 10,
            revision: 42,
            sort_order: pb::range_request::SortOrder::Descend as i32,
            sort_target: pb::range_request::SortTarget::Mod as i32,
            serializable: true,
            keys_only: true,
            count_only: false,
            min_mod_revision: 1,
            max_mod_revision: 2,
            min_create_revision: 3,
            max_create_revision: 4,
        };
        let decoded = pb::RangeRequest::decode(request.encode_to_vec().as_slice()).expect("decode");
        assert_eq!(decoded, request);
    }

    #[test]
    fn raft_log_types_derive_serde() {
        fn is_serde<T: serde::Serialize + serde::de::DeserializeOwned>() {}
        is_serde::<pb::TxnRequest>();
        is_serde::<pb::request_op::Request>();
        is_serde::<pb::compare::TargetUnion>();
        is_serde::<pb::LeaseGrantRequest>();
        is_serde::<pb::AuthUserAddRequest>();
        is_serde::<mvccpb::KeyValue>();
        is_serde::<super::authpb::Role>();
    }

    /// (name, client streaming, server streaming).
    type Rpc = (&'static str, bool, bool);

    /// Every service and RPC of etcd 3.5 (gRPC path `/{service}/{method}`),
    /// with (client streaming, server streaming).
    const SERVICES: &[(&str, &[Rpc])] = &[
        (
            "etcdserverpb.KV",
            &[
                ("Range", false, false),
                ("Put", false, false),
                ("DeleteRange", false, false),
                ("Txn", false, false),
                ("Compact", false, false),
            ],
        ),
        ("etcdserverpb.Watch", &[("Watch", true, true)]),
        (
            "etcdserverpb.Lease",
            &[
                ("LeaseGrant", false, false),
                ("LeaseRevoke", false, false),
                ("LeaseKeepAlive", true, true),
                ("LeaseTimeToLive", false, false),
                ("LeaseLeases", false, false),
            ],
        ),
        (
            "etcdserverpb.Cluster",
            &[
                ("MemberAdd", false, false),
                ("MemberRemove", false, false),
                ("MemberUpdate", false, false),
                ("MemberList", false, false),
                ("MemberPromote", false, false),
            ],
        ),
        (
            "etcdserverpb.Maintenance",
            &[
                ("Alarm", false, false),
                ("Status", false, false),
                ("Defragment", false, false),
                ("Hash", false, false),
                ("HashKV", false, false),
                ("Snapshot", false, true),
                ("MoveLeader", false, false),
                ("Downgrade", false, false),
            ],
        ),
        (
            "etcdserverpb.Auth",
            &[
                ("AuthEnable", false, false),
                ("AuthDisable", false, false),
                ("AuthStatus", false, false),
                ("Authenticate", false, false),
                ("UserAdd", false, false),
                ("UserGet", false, false),
                ("UserList", false, false),
                ("UserDelete", false, false),
                ("UserChangePassword", false, false),
                ("UserGrantRole", false, false),
                ("UserRevokeRole", false, false),
                ("RoleAdd", false, false),
                ("RoleGet", false, false),
                ("RoleList", false, false),
                ("RoleDelete", false, false),
                ("RoleGrantPermission", false, false),
                ("RoleRevokePermission", false, false),
            ],
        ),
        (
            "v3electionpb.Election",
            &[
                ("Campaign", false, false),
                ("Proclaim", false, false),
                ("Leader", false, false),
                ("Observe", false, true),
                ("Resign", false, false),
            ],
        ),
        ("v3lockpb.Lock", &[("Lock", false, false), ("Unlock", false, false)]),
        (
            "raftpb.RaftPeer",
            &[
                ("AppendEntries", false, false),
                ("AppendStream", true, true),
                ("Vote", false, false),
                ("InstallSnapshot", true, false),
                ("Forward", false, false),
                ("HashKv", false, false),
            ],
        ),
    ];

    /// (name, client streaming, server streaming) for each RPC.
    type Methods = Vec<(String, bool, bool)>;

    #[test]
    fn descriptor_set_lists_every_service_and_rpc() {
        let fds = FileDescriptorSet::decode(super::FILE_DESCRIPTOR_SET).expect("decode descriptor set");
        let mut found = Vec::new();
        for file in &fds.file {
            for service in &file.service {
                let methods: Methods = service
                    .method
                    .iter()
                    .map(|m| (m.name().to_owned(), m.client_streaming(), m.server_streaming()))
                    .collect();
                found.push((format!("{}.{}", file.package(), service.name()), methods));
            }
        }
        let mut expected: Vec<(String, Methods)> = SERVICES
            .iter()
            .map(|(service, methods)| {
                let methods = methods.iter().map(|(m, c, s)| ((*m).to_owned(), *c, *s)).collect();
                ((*service).to_owned(), methods)
            })
            .collect();
        found.sort();
        expected.sort();
        assert_eq!(found, expected);
    }

    #[test]
    fn generated_service_names_match_grpc_paths() {
        assert_eq!(pb::kv_server::SERVICE_NAME, "etcdserverpb.KV");
        assert_eq!(pb::watch_server::SERVICE_NAME, "etcdserverpb.Watch");
        assert_eq!(pb::lease_server::SERVICE_NAME, "etcdserverpb.Lease");
        assert_eq!(pb::cluster_server::SERVICE_NAME, "etcdserverpb.Cluster");
        assert_eq!(pb::maintenance_server::SERVICE_NAME, "etcdserverpb.Maintenance");
        assert_eq!(pb::auth_server::SERVICE_NAME, "etcdserverpb.Auth");
        assert_eq!(super::v3electionpb::election_server::SERVICE_NAME, "v3electionpb.Election");
        assert_eq!(super::v3lockpb::lock_server::SERVICE_NAME, "v3lockpb.Lock");
        assert_eq!(super::raftpb::raft_peer_server::SERVICE_NAME, "raftpb.RaftPeer");
    }
}
