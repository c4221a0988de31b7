//! Compiles the `.proto` files with the pure-Rust `protox` compiler (no system
//! `protoc` needed) and generates prost messages plus tonic clients/servers.

use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTOS: &[&str] = &[
    "mvccpb/kv.proto",
    "authpb/auth.proto",
    "etcdserverpb/rpc.proto",
    "v3electionpb/v3election.proto",
    "v3lockpb/v3lock.proto",
    "raftpb/raft.proto",
];

/// String fields that name users and roles or carry passwords, generated as `Vec<u8>` (the wire is the
/// same). etcd (Go) takes any bytes in a proto3 `string` and stores them as they came: a user or role
/// whose name is not UTF-8 exists there, so it must exist here too, where prost would refuse the whole
/// request (`failed to decode Protobuf message`). The descriptor kept for reflection and the JSON
/// gateway still says `string`, as etcd's does, so JSON clients write plain strings.
const NAME_FIELDS: &[(&str, &[&str])] = &[
    ("etcdserverpb.AuthenticateRequest", &["name", "password"]),
    ("etcdserverpb.AuthUserAddRequest", &["name", "password", "hashedPassword"]),
    ("etcdserverpb.AuthUserGetRequest", &["name"]),
    ("etcdserverpb.AuthUserDeleteRequest", &["name"]),
    ("etcdserverpb.AuthUserChangePasswordRequest", &["name", "password", "hashedPassword"]),
    ("etcdserverpb.AuthUserGrantRoleRequest", &["user", "role"]),
    ("etcdserverpb.AuthUserRevokeRoleRequest", &["name", "role"]),
    ("etcdserverpb.AuthRoleAddRequest", &["name"]),
    ("etcdserverpb.AuthRoleGetRequest", &["role"]),
    ("etcdserverpb.AuthRoleDeleteRequest", &["role"]),
    ("etcdserverpb.AuthRoleGrantPermissionRequest", &["name"]),
    ("etcdserverpb.AuthRoleRevokePermissionRequest", &["role"]),
    ("etcdserverpb.AuthUserGetResponse", &["roles"]),
    ("etcdserverpb.AuthUserListResponse", &["users"]),
    ("etcdserverpb.AuthRoleListResponse", &["roles"]),
    ("authpb.User", &["roles"]),
];

/// Packages whose messages are stored in the Raft log and so need serde.
const SERDE_PACKAGES: &[&str] = &[".etcdserverpb", ".mvccpb", ".authpb"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");

    let fds = protox::compile(PROTOS, ["proto"])?;

    // Kept for gRPC reflection; exposed as `proto::FILE_DESCRIPTOR_SET`.
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out_dir.join("descriptor.bin"), fds.encode_to_vec())?;

    let mut builder = tonic_prost_build::configure().build_client(true).build_server(true);
    let mut fds = fds;
    names_as_bytes(&mut fds);
    for package in SERDE_PACKAGES {
        builder = builder.type_attribute(package, "#[derive(serde::Serialize, serde::Deserialize)]");
    }
    builder.compile_fds(fds)?;
    Ok(())
}

/// Retypes [`NAME_FIELDS`] as `bytes` in the descriptors the Rust code is generated from; every one must
/// exist and be a string, so a renamed field cannot slip through unnoticed.
fn names_as_bytes(fds: &mut prost_types::FileDescriptorSet) {
    use prost_types::field_descriptor_proto::Type;
    for (message, fields) in NAME_FIELDS {
        let (package, name) = message.split_once('.').expect("package.Message");
        let descriptor = fds
            .file
            .iter_mut()
            .filter(|file| file.package() == package)
            .flat_map(|file| file.message_type.iter_mut())
            .find(|m| m.name() == name)
            .unwrap_or_else(|| panic!("no message {message}"));
        for field in *fields {
            let field = descriptor
                .field
                .iter_mut()
                .find(|f| f.name() == *field)
                .unwrap_or_else(|| panic!("no field {message}.{field}"));
            assert_eq!(field.r#type(), Type::String, "{message}.{} is not a string", field.name());
            field.set_type(Type::Bytes);
        }
    }
}
