//! The methods `jepsen fuzz` calls, read from our own protobuf descriptors (`proto::FILE_DESCRIPTOR_SET`),
//! so that a field added to the `.proto` files is fuzzed without touching this harness.

use prost_reflect::{DescriptorPool, MessageDescriptor};

use crate::error::{Error, Result};

/// The services whose methods are fuzzed.
const SERVICES: [&str; 6] = [
    "etcdserverpb.KV",
    "etcdserverpb.Watch",
    "etcdserverpb.Lease",
    "etcdserverpb.Cluster",
    "etcdserverpb.Maintenance",
    "etcdserverpb.Auth",
];

/// Methods never fuzzed: membership changes would break the single-member servers, Snapshot is a
/// long download, MoveLeader and Downgrade mean nothing on one member, and auth is switched on and off
/// only by the setup (a fuzzed AuthDisable would end the auth-on session's point).
const EXCLUDED: [&str; 9] = [
    "MemberAdd",
    "MemberRemove",
    "MemberUpdate",
    "MemberPromote",
    "Snapshot",
    "MoveLeader",
    "Downgrade",
    "AuthEnable",
    "AuthDisable",
];

/// How a method is called and its answer read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Unary,
    /// One request on a fresh Watch stream; the first response (or status) is the answer.
    Watch,
    /// One request on a fresh LeaseKeepAlive stream; the first response (or status) is the answer.
    KeepAlive,
}

/// One gRPC method and the message it takes.
#[derive(Debug, Clone)]
pub struct Method {
    /// `etcdserverpb.KV`.
    pub service: String,
    /// `Range`.
    pub name: String,
    pub shape: Shape,
    /// How often it is picked, relative to the others.
    pub weight: u32,
    pub input: MessageDescriptor,
}

impl Method {
    /// The HTTP/2 path, `/etcdserverpb.KV/Range`.
    pub fn path(&self) -> String {
        format!("/{}/{}", self.service, self.name)
    }

    /// `KV/Range`, for the report.
    pub fn label(&self) -> String {
        let service = self.service.rsplit('.').next().unwrap_or(&self.service);
        format!("{service}/{}", self.name)
    }
}

/// The descriptors and the methods to fuzz.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub pool: DescriptorPool,
    /// The fuzzed methods, in the order of the `.proto` files.
    pub methods: Vec<Method>,
}

impl Catalog {
    pub fn load() -> Result<Catalog> {
        let pool = DescriptorPool::decode(proto::FILE_DESCRIPTOR_SET)
            .map_err(|err| Error::Setup(format!("cannot decode the protobuf descriptors: {err}")))?;
        let mut methods = Vec::new();
        for service in SERVICES {
            let descriptor = pool
                .get_service_by_name(service)
                .ok_or_else(|| Error::Setup(format!("no service {service} in the descriptors")))?;
            for method in descriptor.methods() {
                if EXCLUDED.contains(&method.name()) {
                    continue;
                }
                let streaming = method.is_client_streaming() || method.is_server_streaming();
                let shape = match method.name() {
                    "Watch" => Shape::Watch,
                    "LeaseKeepAlive" => Shape::KeepAlive,
                    _ if streaming => continue,
                    _ => Shape::Unary,
                };
                methods.push(Method {
                    service: service.to_string(),
                    name: method.name().to_string(),
                    shape,
                    weight: weight(method.name()),
                    input: method.input(),
                });
            }
        }
        Ok(Catalog { pool, methods })
    }

    /// Any method of the descriptors, fuzzed or not (the auth setup calls AuthEnable).
    pub fn method(&self, service: &str, name: &str) -> Result<Method> {
        let method = self
            .pool
            .get_service_by_name(service)
            .and_then(|s| s.methods().find(|m| m.name() == name))
            .ok_or_else(|| Error::Setup(format!("no method {service}/{name} in the descriptors")))?;
        Ok(Method {
            service: service.to_string(),
            name: name.to_string(),
            shape: Shape::Unary,
            weight: 0,
            input: method.input(),
        })
    }
}

/// The data path gets most of the requests; the auth and maintenance calls, most of which only read
/// or touch a little state, one share each.
fn weight(method: &str) -> u32 {
    match method {
        "Range" | "Put" | "Txn" => 8,
        "DeleteRange" | "Watch" => 4,
        "LeaseGrant" => 3,
        "LeaseRevoke" | "LeaseTimeToLive" | "LeaseKeepAlive" | "RoleGrantPermission" => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_holds_every_fuzzed_method_and_nothing_excluded() {
        let catalog = Catalog::load().expect("descriptors load");
        let labels: Vec<String> = catalog.methods.iter().map(Method::label).collect();
        for expected in ["KV/Range", "KV/Txn", "KV/Compact", "Lease/LeaseGrant", "Cluster/MemberList", "Auth/UserAdd"] {
            assert!(labels.iter().any(|l| l == expected), "{expected} missing from {labels:?}");
        }
        for excluded in ["MemberAdd", "Snapshot", "MoveLeader", "Downgrade", "AuthEnable", "AuthDisable"] {
            assert!(!catalog.methods.iter().any(|m| m.name == excluded), "{excluded} must not be fuzzed");
        }
        let shape = |name: &str| catalog.methods.iter().find(|m| m.name == name).map(|m| m.shape);
        assert_eq!(shape("Watch"), Some(Shape::Watch));
        assert_eq!(shape("LeaseKeepAlive"), Some(Shape::KeepAlive));
        assert_eq!(shape("Range"), Some(Shape::Unary));
        let enable = catalog.method("etcdserverpb.Auth", "AuthEnable").expect("AuthEnable exists");
        assert_eq!(enable.path(), "/etcdserverpb.Auth/AuthEnable");
    }
}
