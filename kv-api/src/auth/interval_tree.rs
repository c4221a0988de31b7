//! etcd's permission check for an empty or inverted request range (`[k, k)`, or an end before the key),
//! where the answer depends on the shape of etcd's interval tree.
//!
//! etcd keeps a user's granted ranges in a red-black interval tree (Cormen et al., chapter 14.3), built
//! by inserting every grant of every role in order, and permits a range when the grants its search
//! visits cover it. For an ordinary range the search finds exactly the grants that overlap it, which
//! [`super::perm`] computes with a sweep. For an empty or inverted range `[start, end)` a grant "overlaps"
//! when it contains `start`, but the search skips a subtree when the subtree's span `[begin, max)` does
//! not overlap the query as an ordinary interval comparison sees it (begin at or after `end`): a grant
//! holding `start` below such a node is not found, and the range is refused. The same grants can thus
//! permit or refuse the same range depending on the order they were granted in. This module builds the
//! same tree from the grants in etcd's order and runs the same search, so the answers agree.

use std::cmp::Ordering;

/// A range bound as etcd compares them: bytes, where the empty string stands for "past every key".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound(pub Vec<u8>);

impl Ord for Bound {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.0.is_empty(), other.0.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => self.0.cmp(&other.0),
        }
    }
}

impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A half-open interval `[begin, end)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    pub begin: Bound,
    pub end: Bound,
}

impl Interval {
    /// etcd's interval comparison: -1 when `self` lies left of `other`, 1 when right of it, 0 when they
    /// overlap (for inverted intervals this is not symmetric, which is the point).
    fn compare(&self, other: &Interval) -> Ordering {
        if self.begin < other.begin && self.end <= other.begin {
            Ordering::Less
        } else if self.begin >= other.end {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    }
}

/// Index 0 is the sentinel (black, no interval), as the leaves of the textbook tree.
const NIL: usize = 0;

struct Node {
    interval: Interval,
    /// The largest end in this node's subtree.
    max: Bound,
    left: usize,
    right: usize,
    parent: usize,
    red: bool,
}

/// A red-black interval tree with etcd's insertion and search.
pub struct IntervalTree {
    nodes: Vec<Node>,
    root: usize,
}

impl IntervalTree {
    /// The tree of `intervals` inserted in order.
    pub fn build(intervals: impl IntoIterator<Item = Interval>) -> IntervalTree {
        let sentinel = Node {
            interval: Interval { begin: Bound(Vec::new()), end: Bound(Vec::new()) },
            max: Bound(Vec::new()),
            left: NIL,
            right: NIL,
            parent: NIL,
            red: false,
        };
        let mut tree = IntervalTree { nodes: vec![sentinel], root: NIL };
        for interval in intervals {
            tree.insert(interval);
        }
        if tree.root != NIL {
            tree.compute_max(tree.root);
        }
        tree
    }

    fn insert(&mut self, interval: Interval) {
        let z = self.nodes.len();
        let (mut parent, mut at) = (NIL, self.root);
        while at != NIL {
            parent = at;
            at =
                if interval.begin < self.nodes[at].interval.begin { self.nodes[at].left } else { self.nodes[at].right };
        }
        let goes_left = parent != NIL && interval.begin < self.nodes[parent].interval.begin;
        self.nodes.push(Node { max: interval.end.clone(), interval, left: NIL, right: NIL, parent, red: true });
        if parent == NIL {
            self.root = z;
        } else if goes_left {
            self.nodes[parent].left = z;
        } else {
            self.nodes[parent].right = z;
        }
        self.fix_after_insert(z);
    }

    fn fix_after_insert(&mut self, mut z: usize) {
        while self.nodes[self.nodes[z].parent].red {
            let parent = self.nodes[z].parent;
            let grand = self.nodes[parent].parent;
            let parent_is_left = parent == self.nodes[grand].left;
            let uncle = if parent_is_left { self.nodes[grand].right } else { self.nodes[grand].left };
            if self.nodes[uncle].red {
                self.nodes[uncle].red = false;
                self.nodes[parent].red = false;
                self.nodes[grand].red = true;
                z = grand;
                continue;
            }
            let inner = if parent_is_left { self.nodes[parent].right } else { self.nodes[parent].left };
            if z == inner {
                z = parent;
                self.rotate(z, parent_is_left);
            }
            let parent = self.nodes[z].parent;
            let grand = self.nodes[parent].parent;
            self.nodes[parent].red = false;
            self.nodes[grand].red = true;
            self.rotate(grand, !parent_is_left);
        }
        let root = self.root;
        self.nodes[root].red = false;
    }

    /// Rotates `x` down to the left (its right child takes its place) or to the right.
    fn rotate(&mut self, x: usize, to_left: bool) {
        let y = if to_left { self.nodes[x].right } else { self.nodes[x].left };
        if y == NIL {
            return;
        }
        let moved = if to_left { self.nodes[y].left } else { self.nodes[y].right };
        if to_left {
            self.nodes[x].right = moved;
        } else {
            self.nodes[x].left = moved;
        }
        if moved != NIL {
            self.nodes[moved].parent = x;
        }
        let parent = self.nodes[x].parent;
        self.nodes[y].parent = parent;
        if parent == NIL {
            self.root = y;
        } else if x == self.nodes[parent].left {
            self.nodes[parent].left = y;
        } else {
            self.nodes[parent].right = y;
        }
        if to_left {
            self.nodes[y].left = x;
        } else {
            self.nodes[y].right = x;
        }
        self.nodes[x].parent = y;
    }

    fn compute_max(&mut self, at: usize) -> Bound {
        let (left, right) = (self.nodes[at].left, self.nodes[at].right);
        let mut max = self.nodes[at].interval.end.clone();
        for child in [left, right] {
            if child != NIL {
                max = max.max(self.compute_max(child));
            }
        }
        self.nodes[at].max = max.clone();
        max
    }

    /// etcd's `Contains`: whether the grants the search for `query` visits, in order, leave no gap and
    /// reach from at or before its begin to at or past its end.
    pub fn contains(&self, query: &Interval) -> bool {
        let mut visited = Vec::new();
        self.visit(self.root, query, &mut visited);
        let Some((first, rest)) = visited.split_first() else {
            return false;
        };
        let mut max_end = &self.nodes[*first].interval.end;
        for node in rest {
            let interval = &self.nodes[*node].interval;
            if *max_end < interval.begin {
                return false;
            }
            max_end = max_end.max(&interval.end);
        }
        *max_end >= query.end && self.nodes[*first].interval.begin <= query.begin
    }

    /// The in-order search of etcd's `visit`, pruning as it does.
    fn visit(&self, at: usize, query: &Interval, out: &mut Vec<usize>) {
        if at == NIL {
            return;
        }
        let node = &self.nodes[at];
        match query.compare(&node.interval) {
            Ordering::Less => self.visit(node.left, query, out),
            Ordering::Greater => {
                let span = Interval { begin: node.interval.begin.clone(), end: node.max.clone() };
                if span.compare(query) == Ordering::Equal {
                    self.visit(node.left, query, out);
                    self.visit(node.right, query, out);
                }
            }
            Ordering::Equal => {
                self.visit(node.left, query, out);
                out.push(at);
                self.visit(node.right, query, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(begin: &str, end: &str) -> Interval {
        Interval { begin: Bound(begin.as_bytes().to_vec()), end: Bound(end.as_bytes().to_vec()) }
    }

    /// Answers real etcd 3.5.1 gave for a user granted, in this order, read on [/app/, /app0),
    /// [/x/b, /x/c) and [/x/a, /x/a0) (etcdctl get with those ranges).
    #[test]
    fn empty_and_inverted_ranges_get_etcd_351s_answers() {
        let tree =
            IntervalTree::build([interval("/app/", "/app0"), interval("/x/b", "/x/c"), interval("/x/a", "/x/a0")]);
        let cases = [
            ("/app/", "/app/", true),
            ("/app/z", "/app/a", true),
            ("/app0", "/app0", false),
            ("/app/k", "/app/k", true),
            ("/b", "/a", false),
            // /x/b lies in a grant, but the search prunes the subtree that holds it.
            ("/x/b", "/x/a", false),
            ("/x/b", "/a", false),
            ("/x/c", "/x/b", false),
            ("/x/b", "/x/b", true),
            ("/x/a", "/x/a", true),
            ("/x/a0", "/x/a", false),
        ];
        for (begin, end, want) in cases {
            assert_eq!(tree.contains(&interval(begin, end)), want, "[{begin}, {end})");
        }
    }

    #[test]
    fn ordinary_ranges_need_contiguous_grants_and_nothing_is_granted_by_an_empty_tree() {
        let tree = IntervalTree::build([interval("a", "c"), interval("c", "e"), interval("f", "g")]);
        assert!(tree.contains(&interval("b", "d")));
        assert!(tree.contains(&interval("a", "e")));
        assert!(!tree.contains(&interval("b", "f")), "a gap between e and f");
        assert!(!tree.contains(&interval("f", "")), "up to the end of the key space");
        assert!(!IntervalTree::build([]).contains(&interval("b", "a")));
        // An empty end is past every key.
        assert!(IntervalTree::build([interval("k", "")]).contains(&interval("z", "")));
    }

    #[test]
    fn the_tree_stays_balanced_and_ordered() {
        let tree = IntervalTree::build((0..64u8).map(|i| interval(&format!("k{i:02}"), &format!("k{i:02}z"))));
        fn depth(tree: &IntervalTree, at: usize) -> usize {
            if at == NIL {
                0
            } else {
                1 + depth(tree, tree.nodes[at].left).max(depth(tree, tree.nodes[at].right))
            }
        }
        assert!(depth(&tree, tree.root) <= 12, "a red-black tree of 64 nodes is at most 2·log2(65) deep");
        assert!(!tree.nodes[tree.root].red);
        assert!(tree.contains(&interval("k10", "k10z")));
    }
}
