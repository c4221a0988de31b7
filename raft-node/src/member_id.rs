//! etcd-style member and cluster ids: stable u64s derived from what the operator configured.
//!
//! As etcd does, a member's id is the first 8 bytes (big-endian) of the SHA-1 of its sorted peer URLs
//! concatenated with the cluster token, and the cluster id is the same over the sorted member ids, so every
//! member computes the same ids from the same `--initial-cluster` and they survive restarts.

/// The id of a member with these peer URLs in the cluster named by `token`.
pub fn member_id(peer_urls: &[String], token: &str) -> u64 {
    member_id_at(peer_urls, token, None)
}

/// The id of a member added at `unix_secs` (etcd mixes the time into the id of members added at run time,
/// so a member re-added with the same URLs gets a new id); `None` for members of the initial cluster.
pub fn member_id_at(peer_urls: &[String], token: &str, unix_secs: Option<u64>) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let mut bytes = urls.concat().into_bytes();
    bytes.extend_from_slice(token.as_bytes());
    if let Some(secs) = unix_secs {
        bytes.extend_from_slice(secs.to_string().as_bytes());
    }
    first_u64(&bytes)
}

/// The id of a cluster made of these members.
pub fn cluster_id(member_ids: impl IntoIterator<Item = u64>) -> u64 {
    let mut ids: Vec<u64> = member_ids.into_iter().collect();
    ids.sort_unstable();
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_be_bytes()).collect();
    first_u64(&bytes)
}

fn first_u64(bytes: &[u8]) -> u64 {
    let digest = sha1_smol::Sha1::from(bytes).digest().bytes();
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_order_free() {
        let a = member_id(&["http://127.0.0.1:2380".into()], "etcd-cluster");
        assert_eq!(a, member_id(&["http://127.0.0.1:2380".into()], "etcd-cluster"));
        assert_ne!(a, member_id(&["http://127.0.0.1:2380".into()], "other-token"));
        let two = member_id(&["http://b:1".into(), "http://a:1".into()], "t");
        assert_eq!(two, member_id(&["http://a:1".into(), "http://b:1".into()], "t"));
        assert_eq!(cluster_id([1, 2, 3]), cluster_id([3, 1, 2]));
        assert_ne!(cluster_id([1, 2]), cluster_id([1, 3]));
    }

    #[test]
    fn same_ids_as_etcd_for_its_defaults() {
        // What etcd 3.4.23 reports when started with no flags at all.
        let member = member_id(&["http://localhost:2380".into()], "etcd-cluster");
        assert_eq!(member, 0x8e9e05c52164694d);
        assert_eq!(cluster_id([member]), 0xcdf818194e3a8c32);
    }
}
