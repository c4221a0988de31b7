//! A user's key permissions merged over all their roles, and the coverage test etcd makes with them.
//!
//! etcd puts every granted range of every role in an interval tree per permission type, and permits a
//! request when the union of those ranges covers the request's whole range (a single key needs only to
//! lie in one of them). Here the ranges are kept sorted by start, and coverage is one sweep.
//!
//! Range forms, as in the rest of the API: an empty `range_end` is the single key, `[key, key\0)`;
//! `range_end == "\0"` is everything from `key` on.

use proto::authpb;

use super::interval_tree::{Bound, Interval, IntervalTree};

/// A half-open key range; `end == None` reaches past every key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Span {
    start: Vec<u8>,
    end: Option<Vec<u8>>,
}

impl Span {
    /// The range a permission or request names (see the module documentation for the forms).
    fn of(key: &[u8], range_end: &[u8]) -> Span {
        let end = match range_end {
            [] => {
                let mut next = key.to_vec();
                next.push(0);
                Some(next)
            }
            [0] => None,
            end => Some(end.to_vec()),
        };
        Span { start: key.to_vec(), end }
    }
}

/// The ranges one user may read and may write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserPerms {
    read: Vec<Span>,
    write: Vec<Span>,
    /// The same ranges in the order etcd inserts them into its interval trees (roles in the user's order,
    /// each role's grants in its order), for the empty and inverted requests whose answer depends on it.
    read_grants: Vec<Interval>,
    write_grants: Vec<Interval>,
}

/// A grant or request as etcd's interval tree holds it: a single key is `[key, key\0)`, `\0` as the end
/// reaches past every key (an empty bound).
fn interval(key: &[u8], range_end: &[u8]) -> Interval {
    let end = match range_end {
        [] => [key, &[0]].concat(),
        [0] => Vec::new(),
        end => end.to_vec(),
    };
    Interval { begin: Bound(key.to_vec()), end: Bound(end) }
}

impl UserPerms {
    /// Merges the permissions of `roles` (roles a user names but that no longer exist are skipped, as etcd).
    pub fn merge<'a>(roles: impl IntoIterator<Item = &'a authpb::Role>) -> UserPerms {
        use authpb::permission::Type;
        let mut perms = UserPerms::default();
        for role in roles {
            for perm in &role.key_permission {
                let span = Span::of(&perm.key, &perm.range_end);
                let grant = interval(&perm.key, &perm.range_end);
                let (read, write) = match Type::try_from(perm.perm_type) {
                    Ok(Type::Read) => (true, false),
                    Ok(Type::Write) => (false, true),
                    Ok(Type::Readwrite) => (true, true),
                    Err(_) => (false, false),
                };
                if read {
                    perms.read.push(span.clone());
                    perms.read_grants.push(grant.clone());
                }
                if write {
                    perms.write.push(span);
                    perms.write_grants.push(grant);
                }
            }
        }
        perms.read.sort();
        perms.write.sort();
        perms
    }

    pub fn can_read(&self, key: &[u8], range_end: &[u8]) -> bool {
        covers(&self.read, &self.read_grants, key, range_end)
    }

    pub fn can_write(&self, key: &[u8], range_end: &[u8]) -> bool {
        covers(&self.write, &self.write_grants, key, range_end)
    }
}

/// Whether the union of `spans` (sorted by start) covers all of `[key, range_end)`.
fn covers(spans: &[Span], grants: &[Interval], key: &[u8], range_end: &[u8]) -> bool {
    let want = Span::of(key, range_end);
    // An empty or inverted request range ([k, k), or an end before the start): etcd's tree search
    // decides, shape and all (see `interval_tree`).
    if want.end.as_ref().is_some_and(|end| *end <= want.start) {
        return IntervalTree::build(grants.iter().cloned()).contains(&interval(key, range_end));
    }
    // `reached`: everything in [want.start, reached) is covered so far.
    let mut reached: Vec<u8> = want.start.clone();
    for span in spans {
        if span.start > reached {
            // A gap: sorted by start, no later span can close it.
            break;
        }
        match &span.end {
            None => return true,
            Some(end) if *end > reached => reached = end.clone(),
            Some(_) => {}
        }
        if want.end.as_ref().is_some_and(|want_end| reached >= *want_end) {
            return true;
        }
    }
    want.end.as_ref().is_some_and(|want_end| reached >= *want_end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use authpb::permission::Type;

    fn role(perms: &[(&str, &str, Type)]) -> authpb::Role {
        authpb::Role {
            name: b"r".to_vec(),
            key_permission: perms
                .iter()
                .map(|(key, end, typ)| authpb::Permission {
                    perm_type: *typ as i32,
                    key: key.as_bytes().to_vec(),
                    range_end: end.as_bytes().to_vec(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_prefix_grant_covers_keys_and_subranges_under_it_and_nothing_else() {
        let perms = UserPerms::merge([&role(&[("/app/", "/app0", Type::Read)])]);
        assert!(perms.can_read(b"/app/x", b""));
        assert!(perms.can_read(b"/app/", b"/app0"));
        assert!(perms.can_read(b"/app/a", b"/app/b"));
        assert!(!perms.can_read(b"/app", b""));
        assert!(!perms.can_read(b"/app/", b"/app1"), "a range reaching past the grant");
        assert!(!perms.can_read(b"/", b"\0"), "everything");
        assert!(!perms.can_write(b"/app/x", b""), "read only");
    }

    #[test]
    fn adjacent_grants_of_two_roles_cover_their_union_and_readwrite_counts_for_both() {
        let a = role(&[("a", "c", Type::Readwrite)]);
        let b = role(&[("c", "e", Type::Read), ("x", "", Type::Write)]);
        let perms = UserPerms::merge([&a, &b]);
        assert!(perms.can_read(b"a", b"e"));
        assert!(!perms.can_read(b"a", b"f"));
        assert!(perms.can_write(b"b", b""));
        assert!(!perms.can_write(b"a", b"e"), "write covers only [a, c)");
        assert!(perms.can_write(b"x", b""));
        assert!(!perms.can_write(b"x", b"y"), "a single-key grant is not a range");
    }

    #[test]
    fn from_key_grants_reach_every_later_key() {
        let perms = UserPerms::merge([&role(&[("m", "\0", Type::Write)])]);
        assert!(perms.can_write(b"m", b"\0"));
        assert!(perms.can_write(b"zzz", b""));
        assert!(!perms.can_write(b"a", b"\0"));
        assert!(!perms.can_write(b"l", b""));
    }

    #[test]
    fn empty_and_inverted_ranges_need_a_grant_holding_their_key() {
        let none = UserPerms::merge(&[]);
        assert!(!none.can_read(b"b", b"a"), "nothing granted: an inverted range is refused, as etcd");
        assert!(!none.can_read(b"k", b"k"));
        let app = UserPerms::merge(&[role(&[("/app/", "/app0", Type::Read)])]);
        assert!(app.can_read(b"/app/z", b"/app/a"), "inside the grant");
        assert!(!app.can_read(b"/b", b"/a"), "outside it");
        assert!(app.can_read(b"/app/k", b"/app/k"));
        assert!(app.can_read(b"/app/", b"/app/"), "a grant holding the key permits it (etcd 3.5.1 does)");
    }
}
