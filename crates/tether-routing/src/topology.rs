//! The router graph (every router's LINK_STATE) and the trees computed from it.
//!
//! Every router holds the same link states once floods settle, and computes from them the
//! same breadth-first tree rooted at each origin, ties broken toward the lowest node id. That
//! one rule makes the whole network agree, without talking about it, on which link each
//! origin's traffic enters a router by (its parent) and which links it leaves by (its
//! children): the reverse-path check that keeps DATA and ANNOUNCE from looping or arriving
//! twice needs exactly that agreement.
//!
//! An edge counts only if both of its routers list each other, so the link state of a router
//! that died (kept until swept) cannot route anything through it. Trees are computed when
//! first asked for and cached until the graph changes; a computation is one breadth-first
//! pass over the graph, so a change costs O(routers × links) for the origins in use.

use std::collections::HashMap;

/// One router's neighbours, as of its sequence number.
#[derive(Debug, Clone)]
struct Lsa {
    seq: u32,
    /// Sorted, without duplicates.
    neighbours: Vec<u64>,
    /// Sweeps this node was found unreachable in a row.
    unreachable_sweeps: u8,
}

/// This router's place in one origin's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tree {
    /// The neighbour toward the origin (`None` at the origin itself).
    pub(crate) parent: Option<u64>,
    /// The neighbours whose parent this router is.
    pub(crate) children: Vec<u64>,
    /// Router hops to the origin.
    pub(crate) depth: u32,
}

/// What [`Topology::offer`] made of a LINK_STATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Newer than what was held: stored; flood it on.
    Newer,
    /// Not newer: dropped.
    Stale,
    /// About this router, and at least as new as its own: re-originate above `seq`.
    OwnNewer(u32),
    /// A new router, and the table is full: dropped.
    Full,
}

#[derive(Debug)]
pub(crate) struct Topology {
    me: u64,
    lsdb: HashMap<u64, Lsa>,
    /// `None` cached for origins this router cannot reach.
    trees: HashMap<u64, Option<Tree>>,
    /// The parent each reachable origin had when [`Topology::changed_parents`] last looked
    /// (`None`: the origin is this router).
    parents: HashMap<u64, Option<u64>>,
    max_nodes: usize,
}

impl Topology {
    pub(crate) fn new(me: u64, max_nodes: usize) -> Self {
        let mut lsdb = HashMap::new();
        lsdb.insert(
            me,
            Lsa {
                seq: 0,
                neighbours: Vec::new(),
                unreachable_sweeps: 0,
            },
        );
        Topology {
            me,
            lsdb,
            trees: HashMap::new(),
            parents: HashMap::new(),
            max_nodes,
        }
    }

    pub(crate) fn nodes(&self) -> usize {
        self.lsdb.len()
    }

    /// Sets this router's own neighbours under `seq`.
    pub(crate) fn set_own(&mut self, seq: u32, mut neighbours: Vec<u64>) {
        neighbours.sort_unstable();
        neighbours.dedup();
        let lsa = self
            .lsdb
            .get_mut(&self.me)
            .expect("own link state is always held");
        lsa.seq = seq;
        lsa.neighbours = neighbours;
        self.trees.clear();
    }

    /// A LINK_STATE received.
    pub(crate) fn offer(
        &mut self,
        origin: u64,
        seq: u32,
        neighbours: impl Iterator<Item = u64>,
    ) -> Offer {
        if origin == self.me {
            let own = self.lsdb[&self.me].seq;
            return if seq >= own {
                Offer::OwnNewer(seq)
            } else {
                Offer::Stale
            };
        }
        match self.lsdb.get(&origin) {
            Some(l) if l.seq >= seq => return Offer::Stale,
            None if self.lsdb.len() >= self.max_nodes => return Offer::Full,
            _ => {}
        }
        let mut n: Vec<u64> = neighbours.collect();
        n.sort_unstable();
        n.dedup();
        self.lsdb.insert(
            origin,
            Lsa {
                seq,
                neighbours: n,
                unreachable_sweeps: 0,
            },
        );
        self.trees.clear();
        Offer::Newer
    }

    /// Every link state held, as (origin, seq, neighbours), for a new neighbour.
    pub(crate) fn all(&self) -> impl Iterator<Item = (u64, u32, &[u64])> {
        self.lsdb
            .iter()
            .filter(|(_, l)| l.seq != 0)
            .map(|(&o, l)| (o, l.seq, l.neighbours.as_slice()))
    }

    /// This router's place in `origin`'s tree, `None` if it cannot reach `origin`.
    pub(crate) fn tree(&mut self, origin: u64) -> Option<&Tree> {
        if !self.trees.contains_key(&origin) {
            let t = self.compute(origin);
            self.trees.insert(origin, t);
        }
        self.trees.get(&origin).and_then(Option::as_ref)
    }

    /// The origins whose parent (or reachability) changed since the last call: the routes
    /// that name them must move their subscriptions.
    pub(crate) fn changed_parents(&mut self) -> Vec<u64> {
        let mut origins: Vec<u64> = self.lsdb.keys().copied().collect();
        origins.extend(self.parents.keys().copied());
        origins.sort_unstable();
        origins.dedup();
        let mut changed = Vec::new();
        for o in origins {
            let now = if self.lsdb.contains_key(&o) {
                self.tree(o).map(|t| t.parent)
            } else {
                None
            };
            if self.parents.get(&o).copied() != now {
                changed.push(o);
                match now {
                    Some(p) => self.parents.insert(o, p),
                    None => self.parents.remove(&o),
                };
            }
        }
        changed
    }

    /// Marks unreachable routers; returns those unreachable at two sweeps in a row, after
    /// forgetting their link state (the caller forgets their routes).
    pub(crate) fn sweep(&mut self) -> Vec<u64> {
        let mut nodes: Vec<u64> = self
            .lsdb
            .keys()
            .copied()
            .filter(|&n| n != self.me)
            .collect();
        nodes.sort_unstable();
        let mut purged = Vec::new();
        for n in nodes {
            let reachable = self.tree(n).is_some();
            let lsa = self.lsdb.get_mut(&n).expect("listed above");
            if reachable {
                lsa.unreachable_sweeps = 0;
            } else if lsa.unreachable_sweeps >= 1 {
                self.lsdb.remove(&n);
                self.trees.clear();
                purged.push(n);
            } else {
                lsa.unreachable_sweeps += 1;
            }
        }
        purged
    }

    /// Whether `a` and `b` list each other.
    fn edge(&self, a: u64, b: u64) -> bool {
        let has = |x: u64, y: u64| {
            self.lsdb
                .get(&x)
                .is_some_and(|l| l.neighbours.binary_search(&y).is_ok())
        };
        has(a, b) && has(b, a)
    }

    /// Neighbours of `x` over two-way edges, lowest id first.
    fn two_way(&self, x: u64) -> impl Iterator<Item = u64> + '_ {
        self.lsdb
            .get(&x)
            .map(|l| l.neighbours.as_slice())
            .unwrap_or(&[])
            .iter()
            .copied()
            .filter(move |&y| self.edge(x, y))
    }

    fn compute(&self, origin: u64) -> Option<Tree> {
        if origin == self.me {
            let children = self.two_way(self.me).collect();
            return Some(Tree {
                parent: None,
                children,
                depth: 0,
            });
        }
        if !self.lsdb.contains_key(&origin) {
            return None;
        }
        // Breadth first from the origin, far enough to know this router's depth and the
        // depths of its neighbours (one level past it).
        let mut dist: HashMap<u64, u32> = HashMap::new();
        dist.insert(origin, 0);
        let mut frontier = vec![origin];
        let mut my_depth = None;
        let mut d = 0;
        while !frontier.is_empty() {
            if my_depth.is_some_and(|m| d > m) {
                break;
            }
            let mut next = Vec::new();
            for &x in &frontier {
                if x == self.me {
                    my_depth = Some(d);
                }
                for y in self.two_way(x) {
                    if let std::collections::hash_map::Entry::Vacant(e) = dist.entry(y) {
                        e.insert(d + 1);
                        next.push(y);
                    }
                }
            }
            frontier = next;
            d += 1;
        }
        let depth = my_depth?;
        // The parent of a node at depth k is its lowest-id neighbour at depth k - 1.
        let parent_of = |x: u64, kx: u32| {
            self.two_way(x)
                .find(|y| kx > 0 && dist.get(y) == Some(&(kx - 1)))
        };
        let parent = parent_of(self.me, depth);
        let children = self
            .two_way(self.me)
            .filter(|c| {
                dist.get(c) == Some(&(depth + 1)) && parent_of(*c, depth + 1) == Some(self.me)
            })
            .collect();
        Some(Tree {
            parent,
            children,
            depth,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The graph of `edges` as seen from `me`, every link state at seq 1.
    fn graph(me: u64, edges: &[(u64, u64)]) -> Topology {
        let mut t = Topology::new(me, 100);
        let mut nodes: Vec<u64> = edges.iter().flat_map(|&(a, b)| [a, b]).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for n in nodes {
            let nb = edges
                .iter()
                .filter_map(|&(a, b)| (a == n).then_some(b).or((b == n).then_some(a)));
            if n == me {
                t.set_own(1, nb.collect());
            } else {
                assert_eq!(t.offer(n, 1, nb), Offer::Newer);
            }
        }
        t
    }

    /// On a ring, the tree from an origin splits at the far side, the same way at every node.
    #[test]
    fn ring_trees_agree() {
        let ring = [(1, 2), (2, 3), (3, 4), (4, 1)];
        // Rooted at 1: 2 and 4 at depth 1; 3 at depth 2 with parent min(2, 4) = 2.
        let mut t3 = graph(3, &ring);
        let tree = t3.tree(1).unwrap().clone();
        assert_eq!((tree.parent, tree.depth), (Some(2), 2));
        assert!(tree.children.is_empty());
        let mut t2 = graph(2, &ring);
        assert_eq!(t2.tree(1).unwrap().children, vec![3]);
        let mut t4 = graph(4, &ring);
        assert!(
            t4.tree(1).unwrap().children.is_empty(),
            "3 hangs off 2, not 4"
        );
        let mut t1 = graph(1, &ring);
        assert_eq!(t1.tree(1).unwrap().children, vec![2, 4]);
    }

    /// An edge listed by one side only does not count; a node behind it is unreachable.
    #[test]
    fn one_sided_edges_do_not_route() {
        let mut t = Topology::new(1, 10);
        t.set_own(1, vec![2]);
        assert_eq!(t.offer(2, 1, [3].into_iter()), Offer::Newer);
        assert_eq!(t.offer(3, 1, [2].into_iter()), Offer::Newer);
        assert!(t.tree(3).is_none());
        assert_eq!(t.offer(2, 2, [1, 3].into_iter()), Offer::Newer);
        assert_eq!(t.tree(3).unwrap().parent, Some(2));
        assert_eq!(t.offer(2, 2, [1].into_iter()), Offer::Stale);
        assert_eq!(t.offer(1, 5, [].into_iter()), Offer::OwnNewer(5));
    }

    #[test]
    fn changed_parents_and_sweep() {
        let mut t = graph(1, &[(1, 2), (2, 3)]);
        assert_eq!(t.changed_parents(), vec![1, 2, 3]);
        assert!(t.changed_parents().is_empty());
        // 2 drops its link to 3: 3 becomes unreachable.
        assert_eq!(t.offer(2, 2, [1].into_iter()), Offer::Newer);
        assert_eq!(t.changed_parents(), vec![3]);
        assert!(t.sweep().is_empty(), "first sweep only marks");
        assert_eq!(t.sweep(), vec![3]);
        assert_eq!(t.nodes(), 2);
    }
}
