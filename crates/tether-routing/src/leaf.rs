//! [`Leaf`]: what a session runs on its side of its links to routers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::frame::{
    Advertise, Announce, Data, Frame, Hello, HostRoute, LINK_VERSION, Unicast, Withdraw,
};
use crate::{LinkError, LinkId, NodeId, ParticipantId, Role, RouteKey};

/// What a router sent that the session's engine must handle: the engine's datagrams, from
/// the participant `src` (a driver hands them to `handle_datagram` from the participant's
/// virtual address).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// A datagram of a writer of `key`.
    Data {
        /// The routing key it was sent on.
        key: RouteKey,
        /// The sending participant.
        src: ParticipantId,
        /// The datagram.
        datagram: Bytes,
    },
    /// A datagram for one of this session's participants.
    Unicast {
        /// The destination participant.
        dst: ParticipantId,
        /// The sending participant.
        src: ParticipantId,
        /// The datagram.
        datagram: Bytes,
    },
    /// A discovery datagram.
    Announce {
        /// The announcing participant.
        src: ParticipantId,
        /// The datagram.
        datagram: Bytes,
    },
}

/// A session's side of its router links, **sans-IO**: which keys it publishes and subscribes
/// (reference-counted, so a key goes on the wire once whatever the number of writers or
/// readers), which participants it hosts, and what each router told it is wanted.
///
/// A router restarted with its state lost, or a link re-established after a failure, gets
/// everything back: [`Leaf::link_up`] queues HELLO and then every participant, advertisement
/// and subscription currently held. Sessions never receive advertisements (the global table
/// is the routers' business); they receive SUBSCRIBE / UNSUBSCRIBE for keys they advertised,
/// telling them whether anyone beyond the router wants that key's data ([`Leaf::is_wanted`]),
/// so a publisher can skip sending DATA nobody asked for.
///
/// ```
/// use tether_routing::{Frame, Leaf, LinkId, NodeId, RouteKey};
/// let mut leaf = Leaf::new(NodeId(9), 0);
/// leaf.subscribe(RouteKey([1; 32]));
/// leaf.link_up(LinkId(1));
/// let (_, hello) = leaf.poll_transmit().unwrap();
/// assert!(matches!(hello, Frame::Hello(_)));
/// let (_, sub) = leaf.poll_transmit().unwrap();
/// assert_eq!(sub, Frame::Subscribe(RouteKey([1; 32])));
/// ```
#[derive(Debug)]
pub struct Leaf {
    node: NodeId,
    domain: u32,
    /// Links up, in the order they came up.
    links: Vec<LinkId>,
    advertised: BTreeMap<RouteKey, u32>,
    subscribed: BTreeMap<RouteKey, u32>,
    participants: BTreeSet<ParticipantId>,
    /// Keys a router asked for on a link.
    wanted: BTreeSet<(LinkId, RouteKey)>,
    seq: u32,
    out: VecDeque<(LinkId, Frame)>,
}

impl Leaf {
    /// A session's leaf with node id `node` (non-zero, unique) in `domain`.
    pub fn new(node: NodeId, domain: u32) -> Self {
        Leaf {
            node,
            domain,
            links: Vec::new(),
            advertised: BTreeMap::new(),
            subscribed: BTreeMap::new(),
            participants: BTreeSet::new(),
            wanted: BTreeSet::new(),
            seq: 0,
            out: VecDeque::new(),
        }
    }

    /// This session's node id.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The HELLO this session sends first on a link ([`Leaf::link_up`] queues it).
    pub fn hello(&self) -> Frame {
        Frame::Hello(Hello {
            version: LINK_VERSION,
            role: Role::Session,
            node: self.node,
            domain: self.domain,
        })
    }

    /// Links up.
    pub fn links(&self) -> &[LinkId] {
        &self.links
    }

    /// Keys advertised (at least one writer), in order.
    pub fn advertised(&self) -> impl Iterator<Item = &RouteKey> {
        self.advertised.keys()
    }

    /// Keys subscribed (at least one reader), in order.
    pub fn subscribed(&self) -> impl Iterator<Item = &RouteKey> {
        self.subscribed.keys()
    }

    /// Participants hosted, in order.
    pub fn participants(&self) -> impl Iterator<Item = &ParticipantId> {
        self.participants.iter()
    }

    /// A link to a router is up: queues HELLO, then every participant, advertisement and
    /// subscription held (in key order), so the router learns everything again.
    pub fn link_up(&mut self, link: LinkId) {
        if !self.links.contains(&link) {
            self.links.push(link);
        }
        self.out.push_back((link, self.hello()));
        let ps: Vec<ParticipantId> = self.participants.iter().copied().collect();
        for p in ps {
            let f = Frame::Participant(self.host_route(p));
            self.out.push_back((link, f));
        }
        let keys: Vec<RouteKey> = self.advertised.keys().copied().collect();
        for key in keys {
            let f = self.advertise_frame(key);
            self.out.push_back((link, f));
        }
        for &key in self.subscribed.keys() {
            self.out.push_back((link, Frame::Subscribe(key)));
        }
    }

    /// A link is lost: nothing more is sent on it, frames still queued for it are dropped,
    /// and what its router wanted is forgotten.
    pub fn link_down(&mut self, link: LinkId) {
        self.links.retain(|&l| l != link);
        self.out.retain(|(l, _)| *l != link);
        self.wanted.retain(|(l, _)| *l != link);
    }

    /// A writer of `key` appeared. True if it is the first (an ADVERTISE is queued on every
    /// link).
    pub fn advertise(&mut self, key: RouteKey) -> bool {
        let n = self.advertised.entry(key).or_insert(0);
        *n += 1;
        if *n > 1 {
            return false;
        }
        let f = self.advertise_frame(key);
        self.send_all(f);
        true
    }

    /// A writer of `key` went. True if it was the last (a WITHDRAW_ADVERTISE is queued on
    /// every link); false also if `key` was not advertised.
    pub fn withdraw(&mut self, key: RouteKey) -> bool {
        if !release(&mut self.advertised, key) {
            return false;
        }
        self.seq = self.seq.saturating_add(1);
        let f = Frame::WithdrawAdvertise(Withdraw {
            key,
            origin: self.node,
            seq: self.seq,
        });
        self.send_all(f);
        true
    }

    /// A reader of `key` appeared. True if it is the first (a SUBSCRIBE is queued).
    pub fn subscribe(&mut self, key: RouteKey) -> bool {
        let n = self.subscribed.entry(key).or_insert(0);
        *n += 1;
        if *n > 1 {
            return false;
        }
        self.send_all(Frame::Subscribe(key));
        true
    }

    /// A reader of `key` went. True if it was the last (an UNSUBSCRIBE is queued).
    pub fn unsubscribe(&mut self, key: RouteKey) -> bool {
        if !release(&mut self.subscribed, key) {
            return false;
        }
        self.send_all(Frame::Unsubscribe(key));
        true
    }

    /// This session hosts participant `p` (queues PARTICIPANT, so UNICAST to `p` finds it).
    pub fn add_participant(&mut self, p: ParticipantId) {
        if self.participants.insert(p) {
            let f = Frame::Participant(self.host_route(p));
            self.send_all(f);
        }
    }

    /// Participant `p` is gone (queues PARTICIPANT_GONE).
    pub fn remove_participant(&mut self, p: ParticipantId) {
        if self.participants.remove(&p) {
            let f = Frame::ParticipantGone(self.host_route(p));
            self.send_all(f);
        }
    }

    /// Whether the router on `link` asked for `key`'s data (some subscriber beyond it wants
    /// it). Data sent while this is false is dropped by the router and counted there.
    pub fn is_wanted(&self, link: LinkId, key: &RouteKey) -> bool {
        self.wanted.contains(&(link, *key))
    }

    /// A frame from a router. Returns what the engine must handle, if anything; an error
    /// means the router broke the protocol (close the link).
    pub fn handle_frame(
        &mut self,
        link: LinkId,
        frame: Frame,
    ) -> Result<Option<Delivery>, LinkError> {
        Ok(match frame {
            Frame::Hello(h) => {
                if h.domain != self.domain {
                    return Err(LinkError::WrongDomain {
                        ours: self.domain,
                        theirs: h.domain,
                    });
                }
                if h.role != Role::Router {
                    return Err(LinkError::Unexpected(crate::FrameType::Hello));
                }
                None
            }
            Frame::Subscribe(key) => {
                self.wanted.insert((link, key));
                None
            }
            Frame::Unsubscribe(key) => {
                self.wanted.remove(&(link, key));
                None
            }
            Frame::Data(d) => Some(Delivery::Data {
                key: d.key,
                src: d.src,
                datagram: d.datagram,
            }),
            Frame::Unicast(u) => Some(Delivery::Unicast {
                dst: u.dst,
                src: u.src,
                datagram: u.datagram,
            }),
            Frame::Announce(a) => Some(Delivery::Announce {
                src: a.src,
                datagram: a.datagram,
            }),
            other => return Err(LinkError::Unexpected(other.frame_type())),
        })
    }

    /// The next frame to send, and its link.
    pub fn poll_transmit(&mut self) -> Option<(LinkId, Frame)> {
        self.out.pop_front()
    }

    /// A DATA frame carrying `datagram` of a writer of `key` from participant `src`.
    pub fn data(&self, key: RouteKey, src: ParticipantId, datagram: Bytes) -> Frame {
        Frame::Data(Data {
            key,
            origin: self.node,
            src,
            hops: 0,
            datagram,
        })
    }

    /// A UNICAST frame carrying `datagram` from `src` to participant `dst`; `key` is the
    /// routing key of the writer whose datagram it is (all zero for none).
    pub fn unicast(
        &self,
        dst: ParticipantId,
        src: ParticipantId,
        key: RouteKey,
        datagram: Bytes,
    ) -> Frame {
        Frame::Unicast(Unicast {
            dst,
            src,
            hops: 0,
            key,
            reader: false,
            datagram,
        })
    }

    /// An ANNOUNCE frame carrying discovery `datagram` from `src`.
    pub fn announce(&self, src: ParticipantId, datagram: Bytes) -> Frame {
        Frame::Announce(Announce {
            src,
            origin: self.node,
            hops: 0,
            key: RouteKey::default(),
            reader: false,
            datagram,
        })
    }

    fn send_all(&mut self, f: Frame) {
        for &l in &self.links {
            self.out.push_back((l, f.clone()));
        }
    }

    fn advertise_frame(&mut self, key: RouteKey) -> Frame {
        self.seq = self.seq.saturating_add(1);
        Frame::Advertise(Advertise {
            key,
            origin: self.node,
            seq: self.seq,
            hops: 0,
        })
    }

    fn host_route(&mut self, p: ParticipantId) -> HostRoute {
        self.seq = self.seq.saturating_add(1);
        HostRoute {
            participant: p,
            origin: self.node,
            seq: self.seq,
        }
    }
}

/// Drops one reference to `key`; true if it was the last.
fn release(map: &mut BTreeMap<RouteKey, u32>, key: RouteKey) -> bool {
    match map.get_mut(&key) {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        Some(_) => {
            map.remove(&key);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(leaf: &mut Leaf) -> Vec<(LinkId, Frame)> {
        core::iter::from_fn(|| leaf.poll_transmit()).collect()
    }

    /// Two readers of a key cost one SUBSCRIBE and one UNSUBSCRIBE.
    #[test]
    fn refcounts_put_a_key_on_the_wire_once() {
        let mut leaf = Leaf::new(NodeId(5), 0);
        leaf.link_up(LinkId(1));
        drain(&mut leaf);
        let k = RouteKey([3; 32]);
        assert!(leaf.subscribe(k));
        assert!(!leaf.subscribe(k));
        assert!(!leaf.unsubscribe(k));
        assert!(leaf.unsubscribe(k));
        assert!(!leaf.unsubscribe(k), "not subscribed any more");
        let frames: Vec<Frame> = drain(&mut leaf).into_iter().map(|(_, f)| f).collect();
        assert_eq!(frames, vec![Frame::Subscribe(k), Frame::Unsubscribe(k)]);
        assert!(leaf.advertise(k));
        assert!(!leaf.advertise(k));
        assert!(!leaf.withdraw(k));
        assert!(leaf.withdraw(k));
        let frames = drain(&mut leaf);
        assert_eq!(frames.len(), 2);
        assert!(matches!(frames[0].1, Frame::Advertise(_)));
        assert!(matches!(frames[1].1, Frame::WithdrawAdvertise(_)));
    }

    /// A link that comes up (again) gets HELLO and everything current, nothing withdrawn.
    #[test]
    fn link_up_resends_everything() {
        let mut leaf = Leaf::new(NodeId(5), 0);
        let (a, b, c) = (RouteKey([1; 32]), RouteKey([2; 32]), RouteKey([3; 32]));
        leaf.advertise(a);
        leaf.advertise(b);
        leaf.withdraw(b);
        leaf.subscribe(c);
        leaf.add_participant(ParticipantId(77));
        assert!(drain(&mut leaf).is_empty(), "no link: nothing to send");
        leaf.link_up(LinkId(4));
        let frames = drain(&mut leaf);
        assert!(frames.iter().all(|(l, _)| *l == LinkId(4)));
        let kinds: Vec<crate::FrameType> = frames.iter().map(|(_, f)| f.frame_type()).collect();
        use crate::FrameType::*;
        assert_eq!(kinds, vec![Hello, Participant, Advertise, Subscribe]);
        // Down and up again: the same again.
        leaf.link_down(LinkId(4));
        leaf.link_up(LinkId(4));
        assert_eq!(drain(&mut leaf).len(), 4);
    }

    #[test]
    fn wanted_follows_the_router() {
        let mut leaf = Leaf::new(NodeId(5), 7);
        let k = RouteKey([9; 32]);
        leaf.link_up(LinkId(1));
        let hello = Frame::Hello(Hello {
            version: LINK_VERSION,
            role: Role::Router,
            node: NodeId(1),
            domain: 7,
        });
        assert_eq!(leaf.handle_frame(LinkId(1), hello), Ok(None));
        leaf.handle_frame(LinkId(1), Frame::Subscribe(k)).unwrap();
        assert!(leaf.is_wanted(LinkId(1), &k));
        leaf.link_down(LinkId(1));
        assert!(!leaf.is_wanted(LinkId(1), &k));
        let wrong = Frame::Hello(Hello {
            version: LINK_VERSION,
            role: Role::Router,
            node: NodeId(1),
            domain: 8,
        });
        assert!(leaf.handle_frame(LinkId(2), wrong).is_err());
        assert_eq!(
            leaf.handle_frame(LinkId(2), Frame::Query(k)),
            Err(LinkError::Unexpected(crate::FrameType::Query))
        );
    }
}
