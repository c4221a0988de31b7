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

/// Packages whose messages are stored in the Raft log and so need serde.
const SERDE_PACKAGES: &[&str] = &[".etcdserverpb", ".mvccpb", ".authpb"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");

    let fds = protox::compile(PROTOS, ["proto"])?;

    // Kept for gRPC reflection; exposed as `proto::FILE_DESCRIPTOR_SET`.
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out_dir.join("descriptor.bin"), fds.encode_to_vec())?;

    let mut builder = tonic_prost_build::configure().build_client(true).build_server(true);
    for package in SERDE_PACKAGES {
        builder = builder.type_attribute(package, "#[derive(serde::Serialize, serde::Deserialize)]");
    }
    builder.compile_fds(fds)?;
    Ok(())
}
