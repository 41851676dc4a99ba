//! The routing information base: routing key → origins and links, laid out for a million
//! routes.
//!
//! Memory is the constraint (the bar is 200 bytes a route at 1,000,000 routes), so a route is
//! a slab entry of 96 bytes (the key, its origins and its links, each inline while there are
//! few) and the index is a `HashTable` of `u32` slab positions: 5 bytes a bucket, where a map
//! from key to route would hold the 32-byte key twice and a route per bucket. The hash is
//! SipHash under a random key (std's `RandomState`): routing keys come from members who could
//! choose them to collide. The hash only places entries; iteration follows the slab, so
//! outputs do not depend on it.

use core::hash::BuildHasher;
use std::hash::RandomState;

use hashbrown::HashTable;

use crate::RouteKey;

/// A vector that holds up to `N` items inline and moves to the heap past that. Routes have one
/// origin and a few links almost always; a `Vec` each would cost 24 bytes and an allocation.
#[derive(Debug, Clone)]
pub(crate) enum Small<T: Copy + Default, const N: usize> {
    Inline(u8, [T; N]),
    Heap(Vec<T>),
}

impl<T: Copy + Default, const N: usize> Default for Small<T, N> {
    fn default() -> Self {
        Small::Inline(0, [T::default(); N])
    }
}

impl<T: Copy + Default, const N: usize> Small<T, N> {
    pub(crate) fn as_slice(&self) -> &[T] {
        match self {
            Small::Inline(n, a) => &a[..*n as usize],
            Small::Heap(v) => v,
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            Small::Inline(n, a) => &mut a[..*n as usize],
            Small::Heap(v) => v,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn push(&mut self, item: T) {
        match self {
            Small::Inline(n, a) if (*n as usize) < N => {
                a[*n as usize] = item;
                *n += 1;
            }
            Small::Inline(_, a) => {
                let mut v = Vec::with_capacity(N * 2);
                v.extend_from_slice(a);
                v.push(item);
                *self = Small::Heap(v);
            }
            Small::Heap(v) => v.push(item),
        }
    }

    /// Keeps the items `keep` says yes to, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        match self {
            Small::Inline(n, a) => {
                let mut w = 0;
                for r in 0..*n as usize {
                    if keep(&a[r]) {
                        a[w] = a[r];
                        w += 1;
                    }
                }
                *n = w as u8;
            }
            Small::Heap(v) => {
                v.retain(|x| keep(x));
                if v.len() <= N {
                    let mut a = [T::default(); N];
                    a[..v.len()].copy_from_slice(v);
                    *self = Small::Inline(v.len() as u8, a);
                }
            }
        }
    }
}

/// One origin router's word on a key (or a participant): its newest sequence number, and
/// whether that was an advertisement or a withdrawal (a tombstone, kept for a while so that a
/// late copy of an older advertisement cannot revive the route).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) node: u64,
    pub(crate) seq: u32,
    /// Router hops the newest advertisement travelled (information, and sent on in syncs).
    pub(crate) hops: u8,
    pub(crate) flags: u8,
}

impl Origin {
    /// The newest word was a withdrawal.
    pub(crate) const WITHDRAWN: u8 = 1;
    /// A tombstone that has lived through one sweep: the next sweep removes it.
    pub(crate) const OLD: u8 = 2;

    pub(crate) fn withdrawn(&self) -> bool {
        self.flags & Self::WITHDRAWN != 0
    }
}

/// A link's part in one route. Links are named by their slot (`u16`), not their `LinkId`,
/// to keep this at 4 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LinkEntry {
    pub(crate) slot: u16,
    pub(crate) flags: u8,
}

impl LinkEntry {
    /// The link subscribed to the key through us (a subscriber session, or a router with
    /// subscribers behind it).
    pub(crate) const DOWN: u8 = 1;
    /// We subscribed to the key on this link (toward a publisher).
    pub(crate) const UP: u8 = 2;
    /// A session on this link publishes the key (it advertised it to us).
    pub(crate) const PUB: u8 = 4;
}

/// One routing key's entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Route {
    pub(crate) key: RouteKey,
    pub(crate) origins: Small<Origin, 1>,
    pub(crate) links: Small<LinkEntry, 4>,
}

impl Route {
    pub(crate) fn origin_mut(&mut self, node: u64) -> Option<&mut Origin> {
        self.origins
            .as_mut_slice()
            .iter_mut()
            .find(|o| o.node == node)
    }

    pub(crate) fn origin(&self, node: u64) -> Option<&Origin> {
        self.origins.as_slice().iter().find(|o| o.node == node)
    }

    /// The flags of `slot` in this route (0 if absent).
    pub(crate) fn flags(&self, slot: u16) -> u8 {
        self.links
            .as_slice()
            .iter()
            .find(|l| l.slot == slot)
            .map_or(0, |l| l.flags)
    }

    /// Sets or clears `flag` for `slot`; returns true if a link entry was added or removed
    /// (the caller counts the link's references).
    pub(crate) fn set_flag(&mut self, slot: u16, flag: u8, on: bool) -> RefChange {
        if let Some(l) = self
            .links
            .as_mut_slice()
            .iter_mut()
            .find(|l| l.slot == slot)
        {
            if on {
                l.flags |= flag;
                return RefChange::None;
            }
            l.flags &= !flag;
            if l.flags == 0 {
                self.links.retain(|l| l.slot != slot);
                return RefChange::Removed;
            }
            RefChange::None
        } else if on {
            self.links.push(LinkEntry { slot, flags: flag });
            RefChange::Added
        } else {
            RefChange::None
        }
    }

    pub(crate) fn has_publisher_link(&self) -> bool {
        self.links
            .as_slice()
            .iter()
            .any(|l| l.flags & LinkEntry::PUB != 0)
    }

    /// Nothing left worth keeping: no origin (not even a tombstone) and no link.
    pub(crate) fn is_empty(&self) -> bool {
        self.origins.is_empty() && self.links.is_empty()
    }
}

/// Whether [`Route::set_flag`] added or removed a link entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefChange {
    None,
    Added,
    Removed,
}

/// The table: a slab of routes, a hash index over it, and a free list.
#[derive(Debug)]
pub(crate) struct Rib {
    slab: Vec<Option<Route>>,
    free: Vec<u32>,
    index: HashTable<u32>,
    hasher: RandomState,
    len: usize,
}

impl Rib {
    pub(crate) fn new() -> Self {
        Rib {
            slab: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hasher: RandomState::new(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Slots in the slab (live or free): iteration bounds for a sync cursor.
    pub(crate) fn slots(&self) -> usize {
        self.slab.len()
    }

    pub(crate) fn find(&self, key: &RouteKey) -> Option<u32> {
        let h = self.hasher.hash_one(key);
        let slab = &self.slab;
        self.index
            .find(h, |&i| {
                slab[i as usize].as_ref().is_some_and(|r| r.key == *key)
            })
            .copied()
    }

    /// The route of `key`, created if absent and fewer than `max` routes exist.
    pub(crate) fn find_or_insert(&mut self, key: &RouteKey, max: usize) -> Option<u32> {
        if let Some(i) = self.find(key) {
            return Some(i);
        }
        if self.len >= max || self.len >= u32::MAX as usize {
            return None;
        }
        let route = Route {
            key: *key,
            ..Route::default()
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(route);
                i
            }
            None => {
                self.slab.push(Some(route));
                (self.slab.len() - 1) as u32
            }
        };
        let h = self.hasher.hash_one(key);
        let (slab, hasher) = (&self.slab, &self.hasher);
        self.index.insert_unique(h, i, |&j| {
            hasher.hash_one(slab[j as usize].as_ref().map(|r| r.key).unwrap_or_default())
        });
        self.len += 1;
        Some(i)
    }

    pub(crate) fn get(&self, i: u32) -> Option<&Route> {
        self.slab.get(i as usize).and_then(Option::as_ref)
    }

    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut Route> {
        self.slab.get_mut(i as usize).and_then(Option::as_mut)
    }

    /// Removes route `i` if it holds nothing any more.
    pub(crate) fn remove_if_empty(&mut self, i: u32) {
        let Some(route) = self.get(i) else { return };
        if !route.is_empty() {
            return;
        }
        let h = self.hasher.hash_one(route.key);
        if let Ok(e) = self.index.find_entry(h, |&j| j == i) {
            e.remove();
        }
        self.slab[i as usize] = None;
        self.free.push(i);
        self.len -= 1;
    }

    /// Gives memory back after many routes went: once three quarters of the slab or more
    /// is empty, the live routes move together (positions change: callers hold none across
    /// calls) and the slab, free list and index are rebuilt to their size. A table that
    /// shrinks a little never pays for it.
    pub(crate) fn compact(&mut self) {
        if self.slab.len() <= 64 || self.len * 4 > self.slab.len() {
            return;
        }
        let live: Vec<Option<Route>> = self.slab.drain(..).filter(Option::is_some).collect();
        self.slab = live;
        self.free = Vec::new();
        let mut index = HashTable::with_capacity(self.slab.len());
        let (slab, hasher) = (&self.slab, &self.hasher);
        let rehash = |&j: &u32| {
            hasher.hash_one(slab[j as usize].as_ref().map(|r| r.key).unwrap_or_default())
        };
        for (i, r) in slab.iter().enumerate() {
            let key = r.as_ref().map(|r| r.key).unwrap_or_default();
            index.insert_unique(hasher.hash_one(key), i as u32, rehash);
        }
        self.index = index;
    }

    /// Heap bytes the table holds (slab, index, free list and spilled small vectors): what
    /// the memory-per-route measurement counts besides the allocator's own overhead.
    pub(crate) fn heap_bytes(&self) -> usize {
        let spilled: usize = self
            .slab
            .iter()
            .flatten()
            .map(|r| {
                let o = match &r.origins {
                    Small::Heap(v) => v.capacity() * size_of::<Origin>(),
                    Small::Inline(..) => 0,
                };
                let l = match &r.links {
                    Small::Heap(v) => v.capacity() * size_of::<LinkEntry>(),
                    Small::Inline(..) => 0,
                };
                o + l
            })
            .sum();
        self.slab.capacity() * size_of::<Option<Route>>()
            + self.free.capacity() * 4
            + self.index.allocation_size()
            + spilled
    }

    /// Every live route's position, for a full pass (link down, tree change, sweep).
    pub(crate) fn positions(&self) -> impl Iterator<Item = u32> + '_ {
        self.slab
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_some())
            .map(|(i, _)| i as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes the memory budget is built on; a change here changes bytes per route.
    #[test]
    fn a_route_is_small() {
        assert_eq!(size_of::<Origin>(), 16);
        assert_eq!(size_of::<LinkEntry>(), 4);
        assert!(
            size_of::<Option<Route>>() <= 96,
            "{}",
            size_of::<Option<Route>>()
        );
    }

    /// A table that held many routes and lost them gives the memory back, and still finds
    /// and takes routes after.
    #[test]
    fn an_emptied_table_gives_its_memory_back() {
        let mut rib = Rib::new();
        let key = |k: u32| {
            let mut b = [0u8; 32];
            b[..4].copy_from_slice(&k.to_le_bytes());
            RouteKey(b)
        };
        for k in 0..20_000 {
            rib.find_or_insert(&key(k), usize::MAX).unwrap();
        }
        let full = rib.heap_bytes();
        for k in 0..19_990 {
            let i = rib.find(&key(k)).unwrap();
            rib.remove_if_empty(i);
        }
        rib.compact();
        assert!(
            rib.heap_bytes() * 20 < full,
            "{} of {full} bytes kept for 10 routes",
            rib.heap_bytes()
        );
        for k in 19_990..20_000 {
            assert!(rib.find(&key(k)).is_some(), "route {k} kept");
        }
        let i = rib.find_or_insert(&key(7), usize::MAX).unwrap();
        assert_eq!(rib.find(&key(7)), Some(i));
        assert_eq!(rib.len(), 11);
    }

    #[test]
    fn small_vec_spills_and_returns() {
        let mut s: Small<LinkEntry, 4> = Small::default();
        for i in 0..6 {
            s.push(LinkEntry { slot: i, flags: 1 });
        }
        assert!(matches!(s, Small::Heap(_)));
        assert_eq!(s.len(), 6);
        s.retain(|l| l.slot % 2 == 0);
        assert!(matches!(s, Small::Inline(3, _)));
        assert_eq!(
            s.as_slice().iter().map(|l| l.slot).collect::<Vec<_>>(),
            [0, 2, 4]
        );
    }

    #[test]
    fn insert_find_remove_reuses_slots() {
        let mut rib = Rib::new();
        let k = |i: u8| RouteKey([i; 32]);
        let a = rib.find_or_insert(&k(1), 10).unwrap();
        let b = rib.find_or_insert(&k(2), 10).unwrap();
        assert_ne!(a, b);
        assert_eq!(rib.find(&k(1)), Some(a));
        assert_eq!(rib.find_or_insert(&k(1), 10), Some(a));
        assert_eq!(rib.len(), 2);
        rib.remove_if_empty(a);
        assert_eq!(rib.find(&k(1)), None);
        assert_eq!(rib.len(), 1);
        let c = rib.find_or_insert(&k(3), 10).unwrap();
        assert_eq!(c, a, "a freed slot is reused");
        assert_eq!(rib.find(&k(2)), Some(b));
        // A route that holds something stays.
        rib.get_mut(b).unwrap().set_flag(0, LinkEntry::DOWN, true);
        rib.remove_if_empty(b);
        assert_eq!(rib.find(&k(2)), Some(b));
        // The limit refuses new keys, not known ones.
        assert_eq!(rib.find_or_insert(&k(9), 2), None);
        assert_eq!(rib.find_or_insert(&k(3), 2), Some(c));
    }
}
