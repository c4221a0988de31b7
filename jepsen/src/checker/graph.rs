//! A transaction dependency graph (Adya's ww/wr/rw plus real-time edges), its strongly connected
//! components, and the weakest cycle inside one.
//!
//! A cycle is named after the edges it needs, weakest first, as Elle does: only ww is G0, ww/wr is
//! G1c, exactly one rw is G-single, more is G2-item; a `-realtime` suffix means it also needs a
//! real-time edge (one transaction completed before the other was invoked).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The kinds of dependency, as bits of an edge's mask.
pub const WW: u8 = 1;
pub const WR: u8 = 2;
pub const RW: u8 = 4;
pub const RT: u8 = 8;

/// A directed graph over nodes `0..n`; each edge carries the mask of its dependency kinds.
#[derive(Clone, Debug, Default)]
pub struct DepGraph {
    adj: Vec<BTreeMap<usize, u8>>,
}

impl DepGraph {
    pub fn new(nodes: usize) -> Self {
        DepGraph { adj: vec![BTreeMap::new(); nodes] }
    }

    /// Adds `kind` to the edge `from -> to`; self-loops are ignored.
    pub fn add(&mut self, from: usize, to: usize, kind: u8) {
        if from != to {
            *self.adj[from].entry(to).or_insert(0) |= kind;
        }
    }

    pub fn edge(&self, from: usize, to: usize) -> u8 {
        self.adj[from].get(&to).copied().unwrap_or(0)
    }

    /// Adds a real-time edge `a -> b` whenever `a` completed before `b` was invoked, through a
    /// transitive reduction: `b` gets edges only from the "frontier" of completed ops not already
    /// followed by another completed op. `spans[i]` is `(invoke, completion)`; `None` leaves a node
    /// out, and an op without completion only ever follows others.
    pub fn add_realtime(&mut self, spans: &[Option<(u64, Option<u64>)>]) {
        // (time, completion?, node); at equal times invocations go first: touching ops are concurrent.
        let mut events: Vec<(u64, bool, usize)> = Vec::new();
        for (node, span) in spans.iter().enumerate() {
            if let Some((start, end)) = span {
                events.push((*start, false, node));
                if let Some(end) = end {
                    events.push((*end, true, node));
                }
            }
        }
        events.sort_unstable();
        let mut frontier: BTreeSet<usize> = BTreeSet::new();
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
        for (_, completion, node) in events {
            if completion {
                for p in &preds[node] {
                    frontier.remove(p);
                }
                frontier.insert(node);
            } else {
                preds[node] = frontier.iter().copied().collect();
                for &p in &preds[node] {
                    self.add(p, node, RT);
                }
            }
        }
    }

    /// Strongly connected components with more than one node (Tarjan's algorithm, iterative so deep
    /// graphs cannot overflow the stack), each sorted.
    pub fn sccs(&self, mask: u8) -> Vec<Vec<usize>> {
        let n = self.adj.len();
        let succ: Vec<Vec<usize>> =
            self.adj.iter().map(|m| m.iter().filter(|(_, &k)| k & mask != 0).map(|(&t, _)| t).collect()).collect();
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut next_index = 0;
        let mut sccs = Vec::new();
        for root in 0..n {
            if index[root] != usize::MAX {
                continue;
            }
            // (node, position of the next successor to visit)
            let mut calls: Vec<(usize, usize)> = vec![(root, 0)];
            index[root] = next_index;
            low[root] = next_index;
            next_index += 1;
            stack.push(root);
            on_stack[root] = true;
            while let Some(&mut (v, ref mut pos)) = calls.last_mut() {
                if let Some(&w) = succ[v].get(*pos) {
                    *pos += 1;
                    if index[w] == usize::MAX {
                        index[w] = next_index;
                        low[w] = next_index;
                        next_index += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        calls.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                calls.pop();
                if let Some(&(parent, _)) = calls.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        component.sort_unstable();
                        sccs.push(component);
                    }
                }
            }
        }
        sccs
    }

    /// A shortest cycle through `scc[0]` using only edges in `mask` between members of `scc`.
    fn cycle_in(&self, scc: &[usize], mask: u8) -> Option<Vec<usize>> {
        let members: BTreeSet<usize> = scc.iter().copied().collect();
        let start = *scc.first()?;
        let mut parent: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for (&w, &kind) in &self.adj[v] {
                if kind & mask == 0 || !members.contains(&w) {
                    continue;
                }
                if w == start {
                    let mut path = vec![v];
                    let mut at = v;
                    while at != start {
                        at = parent[&at];
                        path.push(at);
                    }
                    path.reverse();
                    return Some(path);
                }
                if let std::collections::btree_map::Entry::Vacant(e) = parent.entry(w) {
                    e.insert(v);
                    queue.push_back(w);
                }
            }
        }
        None
    }

    /// The weakest cycle inside a strongly connected component: it tries ww edges alone, then adds
    /// wr, rw and real-time edges. Returns the cycle's nodes (the first is not repeated at the end).
    pub fn weakest_cycle(&self, scc: &[usize]) -> Option<Vec<usize>> {
        let sub = self.restricted(scc);
        for mask in [WW, WW | WR, WW | WR | RW, WW | WR | RW | RT] {
            if let Some(component) = sub.sccs(mask).first() {
                let nodes: Vec<usize> = component.iter().map(|&i| scc[i]).collect();
                return self.cycle_in(&nodes, mask);
            }
        }
        None
    }

    /// The subgraph induced by `nodes`, renumbered `0..nodes.len()`.
    fn restricted(&self, nodes: &[usize]) -> DepGraph {
        let position: BTreeMap<usize, usize> = nodes.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let mut sub = DepGraph::new(nodes.len());
        for (i, &v) in nodes.iter().enumerate() {
            for (w, &kind) in &self.adj[v] {
                if let Some(&j) = position.get(w) {
                    sub.add(i, j, kind);
                }
            }
        }
        sub
    }

    /// Names a cycle (see the module doc) and spells it out with `name` for nodes, e.g.
    /// `G-single: op 3 -rw-> op 7 -wr-> op 3`.
    pub fn describe_cycle(&self, cycle: &[usize], name: impl Fn(usize) -> String) -> String {
        let mut labels = Vec::new();
        for (i, &from) in cycle.iter().enumerate() {
            let to = cycle[(i + 1) % cycle.len()];
            let kind = self.edge(from, to);
            labels.push(match kind {
                k if k & WW != 0 => "ww",
                k if k & WR != 0 => "wr",
                k if k & RW != 0 => "rw",
                _ => "rt",
            });
        }
        let count = |l: &str| labels.iter().filter(|&&x| x == l).count();
        let class = match (count("wr"), count("rw")) {
            (0, 0) => "G0",
            (_, 0) => "G1c",
            (_, 1) => "G-single",
            _ => "G2-item",
        };
        let suffix = if count("rt") > 0 { "-realtime" } else { "" };
        let mut text = format!("{class}{suffix}: {}", name(cycle[0]));
        for (i, label) in labels.iter().enumerate() {
            text.push_str(&format!(" -{label}-> {}", name(cycle[(i + 1) % cycle.len()])));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(n: usize, edges: &[(usize, usize, u8)]) -> DepGraph {
        let mut g = DepGraph::new(n);
        for &(a, b, k) in edges {
            g.add(a, b, k);
        }
        g
    }

    #[test]
    fn sccs_and_classes() {
        let all = WW | WR | RW | RT;
        type Case = (&'static str, DepGraph, Vec<Vec<usize>>, Option<&'static str>);
        let cases: Vec<Case> = vec![
            ("acyclic", graph(3, &[(0, 1, WW), (1, 2, WR)]), vec![], None),
            ("self loop ignored", graph(1, &[(0, 0, WW)]), vec![], None),
            ("G0", graph(2, &[(0, 1, WW), (1, 0, WW)]), vec![vec![0, 1]], Some("G0: t0 -ww-> t1 -ww-> t0")),
            ("G1c", graph(2, &[(0, 1, WW), (1, 0, WR)]), vec![vec![0, 1]], Some("G1c: t0 -ww-> t1 -wr-> t0")),
            (
                "G-single",
                graph(3, &[(0, 1, RW), (1, 2, WR), (2, 0, WW)]),
                vec![vec![0, 1, 2]],
                Some("G-single: t0 -rw-> t1 -wr-> t2 -ww-> t0"),
            ),
            ("G2-item", graph(2, &[(0, 1, RW), (1, 0, RW)]), vec![vec![0, 1]], Some("G2-item: t0 -rw-> t1 -rw-> t0")),
            (
                "prefers the weakest cycle",
                graph(3, &[(0, 1, RW), (1, 0, RW), (1, 2, WW), (2, 1, WW)]),
                vec![vec![0, 1, 2]],
                Some("G0: t1 -ww-> t2 -ww-> t1"),
            ),
            (
                "realtime",
                graph(2, &[(0, 1, RT), (1, 0, RW)]),
                vec![vec![0, 1]],
                Some("G-single-realtime: t0 -rt-> t1 -rw-> t0"),
            ),
        ];
        for (name, g, want_sccs, want_cycle) in cases {
            let sccs = g.sccs(all);
            assert_eq!(sccs, want_sccs, "{name}");
            let cycle = sccs.first().and_then(|scc| g.weakest_cycle(scc));
            let text = cycle.map(|c| g.describe_cycle(&c, |i| format!("t{i}")));
            assert_eq!(text.as_deref(), want_cycle, "{name}");
        }
    }

    #[test]
    fn deep_chain_does_not_overflow() {
        let n = 200_000;
        let mut g = DepGraph::new(n);
        for i in 0..n {
            g.add(i, (i + 1) % n, WW);
        }
        assert_eq!(g.sccs(WW).len(), 1);
    }

    #[test]
    fn realtime_edges_are_a_transitive_reduction() {
        // 0: [0,1]  1: [2,3]  2: [2,10]  3: [4,5]  4: [11, -]
        let spans = [Some((0, Some(1))), Some((2, Some(3))), Some((2, Some(10))), Some((4, Some(5))), Some((11, None))];
        let mut g = DepGraph::new(spans.len());
        g.add_realtime(&spans);
        let edges: Vec<(usize, usize)> =
            (0..5).flat_map(|a| (0..5).map(move |b| (a, b))).filter(|&(a, b)| g.edge(a, b) & RT != 0).collect();
        assert_eq!(edges, vec![(0, 1), (0, 2), (1, 3), (2, 4), (3, 4)]);
    }
}
