//! Link frames: what routers and sessions say to each other over a link (`docs/wire.md`,
//! section "Router links").
//!
//! A link is one reliable, ordered byte stream (a QUIC stream). It carries frames back to back,
//! each `type u8 | length u32 | body`, all integers big-endian (network order: unlike the
//! datagram, this layout is read by routers, not by the engine):
//!
//! ```text
//!  0       1                               5
//! +-------+-------------------------------+---------------------------+
//! | type  |      body length (u32 BE)     |  body (length bytes) ...  |
//! +-------+-------------------------------+---------------------------+
//! ```
//!
//! | type | frame | body |
//! |---|---|---|
//! | 0x01 | HELLO | `version u8 (1)`, `role u8 (0 session, 1 router)`, `node u64`, `domain u32` (14 B) |
//! | 0x02 | ADVERTISE | `key [32]`, `origin u64`, `seq u32`, `hops u8` (45 B) |
//! | 0x03 | WITHDRAW_ADVERTISE | `key [32]`, `origin u64`, `seq u32` (44 B) |
//! | 0x04 | SUBSCRIBE | `key [32]` |
//! | 0x05 | UNSUBSCRIBE | `key [32]` |
//! | 0x06 | QUERY | `key [32]` |
//! | 0x07 | PARTICIPANT | `participant u64`, `origin u64`, `seq u32` (20 B) |
//! | 0x08 | PARTICIPANT_GONE | `participant u64`, `origin u64`, `seq u32` (20 B) |
//! | 0x09 | DATA | `key [32]`, `origin u64`, `src u64`, `hops u8`, `datagram` (49 B + datagram) |
//! | 0x0A | UNICAST | `dst u64`, `src u64`, `hops u8`, `datagram` (17 B + datagram) |
//! | 0x0B | ANNOUNCE | `src u64`, `origin u64`, `hops u8`, `datagram` (17 B + datagram) |
//! | 0x0C | LINK_STATE | `origin u64`, `seq u32`, `count u16`, `count × neighbour u64` (14 B + 8 × count) |
//!
//! Two refinements of the issue-19 contract, both for loop suppression: LINK_STATE, a
//! router's list of neighbours, flooded so that every router computes the same trees (see
//! the crate docs); and an `origin` router in DATA and ANNOUNCE (the router the sending
//! session is attached to; a session writes its own node id and its router replaces it), by
//! which ANNOUNCE is accepted only from the parent in the origin's tree (DATA follows its
//! key's tree; its origin tells a receiver where it entered the router network). DATA,
//! UNICAST and ANNOUNCE carry a `hops` count, a backstop that ends any loop while routes
//! converge.
//!
//! Parsing never panics and never allocates: a frame's variable parts (datagram, neighbour
//! list) are [`Bytes`] slices of the input. Every length is checked against the bytes present
//! and against the fixed size of its type before a field is read.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use core::fmt;

use crate::{NodeId, ParticipantId, Role, RouteKey};

/// Length of a frame header: type (1) and body length (4).
pub const FRAME_HEADER_LEN: usize = 5;
/// Largest body a frame may carry: 16 MiB. Engine datagrams are at most 64 KiB; the margin
/// is for LINK_STATE and for future frames, and a peer announcing more is cut off.
pub const MAX_FRAME_BODY: usize = 16 * 1024 * 1024;
/// Largest whole frame, header included.
pub const MAX_FRAME_LEN: usize = MAX_FRAME_BODY + FRAME_HEADER_LEN;
/// The only link protocol version this crate speaks.
pub const LINK_VERSION: u8 = 1;
/// Most neighbours a LINK_STATE may list (a router never has more links than this).
pub const MAX_NEIGHBOURS: usize = u16::MAX as usize;
/// Fixed part of a DATA body, before the datagram.
pub const DATA_FIXED_LEN: usize = 32 + 8 + 8 + 1;
/// Fixed part of a UNICAST body, before the datagram.
pub const UNICAST_FIXED_LEN: usize = 8 + 8 + 1 + 32 + 1;
/// Fixed part of an ANNOUNCE body, before the datagram.
pub const ANNOUNCE_FIXED_LEN: usize = 8 + 8 + 1 + 32 + 1;
/// The flags byte of UNICAST and ANNOUNCE: the key is a reader's (the datagram announces a
/// reader of it). Other bits are zero.
pub const FLAG_READER: u8 = 0x01;

/// The frame types of link version 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// First frame each way: version, role, node id, domain.
    Hello = 0x01,
    /// An origin router has a publisher of a key.
    Advertise = 0x02,
    /// An origin router no longer has a publisher of a key.
    WithdrawAdvertise = 0x03,
    /// The sender wants the data of a key.
    Subscribe = 0x04,
    /// The sender no longer wants the data of a key.
    Unsubscribe = 0x05,
    /// Who publishes this key?
    Query = 0x06,
    /// A participant is reachable through an origin router (a host route).
    Participant = 0x07,
    /// A participant is no longer reachable through an origin router.
    ParticipantGone = 0x08,
    /// An engine datagram for every subscriber of a key.
    Data = 0x09,
    /// An engine datagram for one participant.
    Unicast = 0x0A,
    /// A discovery datagram for every session.
    Announce = 0x0B,
    /// A router's neighbours (its link state), flooded to every router.
    LinkState = 0x0C,
}

impl FrameType {
    /// The type for a wire byte, if it is one of version 1.
    pub fn from_u8(b: u8) -> Option<FrameType> {
        use FrameType::*;
        Some(match b {
            0x01 => Hello,
            0x02 => Advertise,
            0x03 => WithdrawAdvertise,
            0x04 => Subscribe,
            0x05 => Unsubscribe,
            0x06 => Query,
            0x07 => Participant,
            0x08 => ParticipantGone,
            0x09 => Data,
            0x0A => Unicast,
            0x0B => Announce,
            0x0C => LinkState,
            _ => return None,
        })
    }

    /// The body length a frame of this type must have exactly, or the least it may have
    /// (`exact == false`) for the types with a variable tail.
    fn body_len(self) -> (usize, bool) {
        use FrameType::*;
        match self {
            Hello => (14, true),
            Advertise => (45, true),
            WithdrawAdvertise => (44, true),
            Subscribe | Unsubscribe | Query => (32, true),
            Participant | ParticipantGone => (20, true),
            Data => (DATA_FIXED_LEN, false),
            Unicast => (UNICAST_FIXED_LEN, false),
            Announce => (ANNOUNCE_FIXED_LEN, false),
            LinkState => (14, false),
        }
    }
}

/// Why bytes are not a valid frame. Every variant is the peer's fault: the link that sent it
/// is broken (a stream cannot resynchronise after a bad frame) and should be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// Fewer bytes than the header or the declared length needs.
    Truncated,
    /// A type byte that link version 1 does not define.
    UnknownType(u8),
    /// A body length outside what the type allows.
    BadLength {
        /// The frame's type.
        frame: FrameType,
        /// The declared body length.
        len: usize,
    },
    /// A body longer than [`MAX_FRAME_BODY`].
    TooLarge(usize),
    /// A field holds a value outside its range; the string names the field.
    BadValue(&'static str),
    /// A HELLO of a link version this crate does not speak.
    UnsupportedVersion(u8),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Truncated => f.write_str("link frame truncated"),
            FrameError::UnknownType(t) => write!(f, "unknown link frame type {t:#04x}"),
            FrameError::BadLength { frame, len } => {
                write!(f, "{frame:?} frame with a body of {len} bytes")
            }
            FrameError::TooLarge(len) => write!(
                f,
                "link frame body of {len} bytes (at most {MAX_FRAME_BODY})"
            ),
            FrameError::BadValue(field) => write!(f, "invalid value in field `{field}`"),
            FrameError::UnsupportedVersion(v) => write!(f, "unsupported link version {v}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// HELLO: the first frame each way on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Link protocol version; [`LINK_VERSION`].
    pub version: u8,
    /// What the sender is.
    pub role: Role,
    /// The sender's node id (non-zero).
    pub node: NodeId,
    /// The tether domain; a link between domains is refused.
    pub domain: u32,
}

/// ADVERTISE: `origin` has a publisher of `key`, as of its sequence number `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advertise {
    /// The routing key.
    pub key: RouteKey,
    /// The router with the publisher (a session writes its own node id).
    pub origin: NodeId,
    /// The origin's sequence number for this key (non-zero); newer wins.
    pub seq: u32,
    /// Router hops travelled so far (information only).
    pub hops: u8,
}

/// WITHDRAW_ADVERTISE: `origin` no longer has a publisher of `key`, as of `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Withdraw {
    /// The routing key.
    pub key: RouteKey,
    /// The router that had the publisher (a session writes its own node id).
    pub origin: NodeId,
    /// The origin's sequence number (non-zero), newer than the advertisement it withdraws.
    pub seq: u32,
}

/// PARTICIPANT and PARTICIPANT_GONE: a host route for UNICAST.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostRoute {
    /// The participant (non-zero).
    pub participant: ParticipantId,
    /// The router the participant's session is attached to (a session writes its own id).
    pub origin: NodeId,
    /// The origin's sequence number (non-zero); newer wins.
    pub seq: u32,
}

/// DATA: one engine datagram for every subscriber of `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data {
    /// The routing key of the writer that sent the datagram.
    pub key: RouteKey,
    /// The origin router (a session writes its own node id; its router replaces it).
    pub origin: NodeId,
    /// The sending participant.
    pub src: ParticipantId,
    /// Router hops travelled so far; at [`crate::MAX_HOPS`] the frame is dropped.
    pub hops: u8,
    /// The engine datagram, untouched (a slice of the received frame).
    pub datagram: Bytes,
}

/// UNICAST: one engine datagram for one participant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unicast {
    /// The destination participant.
    pub dst: ParticipantId,
    /// The sending participant.
    pub src: ParticipantId,
    /// Router hops travelled so far; at [`crate::MAX_HOPS`] the frame is dropped.
    pub hops: u8,
    /// The routing key of the writer whose datagram this is (a repair, a late joiner's
    /// history, its announcement), or of the reader it announces (`reader`), all zero for
    /// others (acknowledgements, authentication, discovery): what an export list decides a
    /// unicast by.
    pub key: RouteKey,
    /// The key is a reader's: the datagram announces a reader of it (its data flows the
    /// other way, which is how an export list judges it).
    pub reader: bool,
    /// The engine datagram, untouched.
    pub datagram: Bytes,
}

/// ANNOUNCE: a discovery datagram flooded to every session once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announce {
    /// The announcing participant.
    pub src: ParticipantId,
    /// The origin router (a session writes its own node id; its router replaces it).
    pub origin: NodeId,
    /// Router hops travelled so far; at [`crate::MAX_HOPS`] the frame is dropped.
    pub hops: u8,
    /// The routing key of the endpoint the datagram announces (all zero: none, a
    /// participant's announcement): what an export list decides it by.
    pub key: RouteKey,
    /// The key is a reader's (see [`Unicast::reader`]).
    pub reader: bool,
    /// The engine datagram, untouched.
    pub datagram: Bytes,
}

/// LINK_STATE: the neighbours of router `origin`, as of `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkState {
    /// The router whose links these are.
    pub origin: NodeId,
    /// Its sequence number (non-zero); newer wins.
    pub seq: u32,
    /// `count × u64 BE`, kept as bytes so parsing does not allocate.
    neighbours: Bytes,
}

impl LinkState {
    /// A link state listing `neighbours` (at most [`MAX_NEIGHBOURS`]; more are left out).
    pub fn new(origin: NodeId, seq: u32, neighbours: &[NodeId]) -> Self {
        let n = neighbours.len().min(MAX_NEIGHBOURS);
        let mut b = BytesMut::with_capacity(n * 8);
        for node in &neighbours[..n] {
            b.put_u64(node.0);
        }
        LinkState {
            origin,
            seq,
            neighbours: b.freeze(),
        }
    }

    /// How many neighbours it lists.
    pub fn len(&self) -> usize {
        self.neighbours.len() / 8
    }

    /// True if it lists no neighbour.
    pub fn is_empty(&self) -> bool {
        self.neighbours.is_empty()
    }

    /// The neighbours, in the order sent.
    pub fn neighbours(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.neighbours
            .chunks_exact(8)
            .map(|c| NodeId(u64::from_be_bytes(c.try_into().unwrap_or([0; 8]))))
    }
}

/// One link frame, parsed and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frame {
    /// HELLO.
    Hello(Hello),
    /// ADVERTISE.
    Advertise(Advertise),
    /// WITHDRAW_ADVERTISE.
    WithdrawAdvertise(Withdraw),
    /// SUBSCRIBE.
    Subscribe(RouteKey),
    /// UNSUBSCRIBE.
    Unsubscribe(RouteKey),
    /// QUERY.
    Query(RouteKey),
    /// PARTICIPANT.
    Participant(HostRoute),
    /// PARTICIPANT_GONE.
    ParticipantGone(HostRoute),
    /// DATA.
    Data(Data),
    /// UNICAST.
    Unicast(Unicast),
    /// ANNOUNCE.
    Announce(Announce),
    /// LINK_STATE.
    LinkState(LinkState),
}

/// A reader over a frame body that was already checked to be long enough for its fixed part.
/// Reads past the end return zeros instead of panicking; [`Frame::decode`] checks lengths
/// first, so they never happen, and a bug could only produce a wrong value, never a crash.
struct Body(Bytes);

impl Body {
    fn key(&mut self) -> RouteKey {
        let mut k = [0u8; 32];
        if self.0.len() >= 32 {
            self.0.copy_to_slice(&mut k);
        }
        RouteKey(k)
    }
    fn u8(&mut self) -> u8 {
        if self.0.is_empty() {
            0
        } else {
            self.0.get_u8()
        }
    }
    /// The flags byte after `key`: whether the key is a reader's. Unknown bits, or a
    /// reader's flag without a key, are malformed.
    fn flags(&mut self, key: &RouteKey) -> Result<bool, FrameError> {
        match self.u8() {
            0 => Ok(false),
            FLAG_READER if *key != RouteKey::default() => Ok(true),
            _ => Err(FrameError::BadValue("flags")),
        }
    }
    fn u16(&mut self) -> u16 {
        if self.0.len() < 2 {
            0
        } else {
            self.0.get_u16()
        }
    }
    fn u32(&mut self) -> u32 {
        if self.0.len() < 4 {
            0
        } else {
            self.0.get_u32()
        }
    }
    fn u64(&mut self) -> u64 {
        if self.0.len() < 8 {
            0
        } else {
            self.0.get_u64()
        }
    }
    fn node(&mut self, field: &'static str) -> Result<NodeId, FrameError> {
        match self.u64() {
            0 => Err(FrameError::BadValue(field)),
            v => Ok(NodeId(v)),
        }
    }
    fn participant(&mut self, field: &'static str) -> Result<ParticipantId, FrameError> {
        match self.u64() {
            0 => Err(FrameError::BadValue(field)),
            v => Ok(ParticipantId(v)),
        }
    }
    fn seq(&mut self) -> Result<u32, FrameError> {
        match self.u32() {
            0 => Err(FrameError::BadValue("seq")),
            v => Ok(v),
        }
    }
}

impl Frame {
    /// This frame's type.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Frame::Hello(_) => FrameType::Hello,
            Frame::Advertise(_) => FrameType::Advertise,
            Frame::WithdrawAdvertise(_) => FrameType::WithdrawAdvertise,
            Frame::Subscribe(_) => FrameType::Subscribe,
            Frame::Unsubscribe(_) => FrameType::Unsubscribe,
            Frame::Query(_) => FrameType::Query,
            Frame::Participant(_) => FrameType::Participant,
            Frame::ParticipantGone(_) => FrameType::ParticipantGone,
            Frame::Data(_) => FrameType::Data,
            Frame::Unicast(_) => FrameType::Unicast,
            Frame::Announce(_) => FrameType::Announce,
            Frame::LinkState(_) => FrameType::LinkState,
        }
    }

    /// Parses one whole frame, header included; `bytes` must hold exactly one frame.
    /// Variable parts are slices of `bytes` (no copy).
    pub fn parse(bytes: Bytes) -> Result<Frame, FrameError> {
        let (ty, len) = parse_header(&bytes)?;
        if bytes.len() != FRAME_HEADER_LEN + len {
            return Err(if bytes.len() < FRAME_HEADER_LEN + len {
                FrameError::Truncated
            } else {
                FrameError::BadLength { frame: ty, len }
            });
        }
        Frame::decode(ty, bytes.slice(FRAME_HEADER_LEN..))
    }

    /// Decodes the body of a frame of type `ty` (the header already read).
    pub fn decode(ty: FrameType, body: Bytes) -> Result<Frame, FrameError> {
        let len = body.len();
        let (want, exact) = ty.body_len();
        if len > MAX_FRAME_BODY {
            return Err(FrameError::TooLarge(len));
        }
        if len < want || (exact && len != want) {
            return Err(FrameError::BadLength { frame: ty, len });
        }
        let mut b = Body(body);
        //= docs/wire.md#router-links
        //# Node ids, participant ids and sequence numbers are never zero; a frame holding
        //# a zero there is invalid.
        Ok(match ty {
            FrameType::Hello => {
                let version = b.u8();
                if version != LINK_VERSION {
                    return Err(FrameError::UnsupportedVersion(version));
                }
                let role = match b.u8() {
                    0 => Role::Session,
                    1 => Role::Router,
                    _ => return Err(FrameError::BadValue("role")),
                };
                let node = b.node("node")?;
                let domain = b.u32();
                Frame::Hello(Hello {
                    version,
                    role,
                    node,
                    domain,
                })
            }
            FrameType::Advertise => {
                let key = b.key();
                let origin = b.node("origin")?;
                let seq = b.seq()?;
                let hops = b.u8();
                Frame::Advertise(Advertise {
                    key,
                    origin,
                    seq,
                    hops,
                })
            }
            FrameType::WithdrawAdvertise => {
                let key = b.key();
                let origin = b.node("origin")?;
                let seq = b.seq()?;
                Frame::WithdrawAdvertise(Withdraw { key, origin, seq })
            }
            FrameType::Subscribe => Frame::Subscribe(b.key()),
            FrameType::Unsubscribe => Frame::Unsubscribe(b.key()),
            FrameType::Query => Frame::Query(b.key()),
            FrameType::Participant | FrameType::ParticipantGone => {
                let participant = b.participant("participant")?;
                let origin = b.node("origin")?;
                let seq = b.seq()?;
                let r = HostRoute {
                    participant,
                    origin,
                    seq,
                };
                if ty == FrameType::Participant {
                    Frame::Participant(r)
                } else {
                    Frame::ParticipantGone(r)
                }
            }
            FrameType::Data => {
                let key = b.key();
                let origin = b.node("origin")?;
                let src = b.participant("src")?;
                let hops = b.u8();
                Frame::Data(Data {
                    key,
                    origin,
                    src,
                    hops,
                    datagram: b.0,
                })
            }
            FrameType::Unicast => {
                let dst = b.participant("dst")?;
                let src = b.participant("src")?;
                let hops = b.u8();
                let key = b.key();
                let reader = b.flags(&key)?;
                Frame::Unicast(Unicast {
                    dst,
                    src,
                    hops,
                    key,
                    reader,
                    datagram: b.0,
                })
            }
            FrameType::Announce => {
                let src = b.participant("src")?;
                let origin = b.node("origin")?;
                let hops = b.u8();
                let key = b.key();
                let reader = b.flags(&key)?;
                Frame::Announce(Announce {
                    src,
                    origin,
                    hops,
                    key,
                    reader,
                    datagram: b.0,
                })
            }
            FrameType::LinkState => {
                let origin = b.node("origin")?;
                let seq = b.seq()?;
                let count = b.u16() as usize;
                if b.0.len() != count * 8 {
                    return Err(FrameError::BadLength { frame: ty, len });
                }
                if b.0.chunks_exact(8).any(|c| c == [0; 8]) {
                    return Err(FrameError::BadValue("neighbour"));
                }
                Frame::LinkState(LinkState {
                    origin,
                    seq,
                    neighbours: b.0,
                })
            }
        })
    }

    /// The datagram a DATA, UNICAST or ANNOUNCE carries: written after [`Frame::encode_head`]
    /// by a driver that sends a frame without copying its payload.
    pub fn payload(&self) -> Option<&Bytes> {
        match self {
            Frame::Data(d) => Some(&d.datagram),
            Frame::Unicast(u) => Some(&u.datagram),
            Frame::Announce(a) => Some(&a.datagram),
            Frame::LinkState(l) => Some(&l.neighbours),
            _ => None,
        }
    }

    /// The body length on the wire.
    pub fn body_len(&self) -> usize {
        let (fixed, _) = self.frame_type().body_len();
        fixed + self.payload().map_or(0, Bytes::len)
    }

    /// The whole frame's length on the wire, header included.
    pub fn encoded_len(&self) -> usize {
        FRAME_HEADER_LEN + self.body_len()
    }

    /// Appends the header and the fixed fields to `out`: everything but [`Frame::payload`].
    /// Fails (writing nothing) if the body would exceed [`MAX_FRAME_BODY`].
    pub fn encode_head(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        let body_len = self.body_len();
        if body_len > MAX_FRAME_BODY {
            return Err(FrameError::TooLarge(body_len));
        }
        out.push(self.frame_type() as u8);
        out.put_u32(body_len as u32);
        match self {
            Frame::Hello(h) => {
                out.push(h.version);
                out.push(h.role as u8);
                out.put_u64(h.node.0);
                out.put_u32(h.domain);
            }
            Frame::Advertise(a) => {
                out.extend_from_slice(&a.key.0);
                out.put_u64(a.origin.0);
                out.put_u32(a.seq);
                out.push(a.hops);
            }
            Frame::WithdrawAdvertise(w) => {
                out.extend_from_slice(&w.key.0);
                out.put_u64(w.origin.0);
                out.put_u32(w.seq);
            }
            Frame::Subscribe(k) | Frame::Unsubscribe(k) | Frame::Query(k) => {
                out.extend_from_slice(&k.0)
            }
            Frame::Participant(r) | Frame::ParticipantGone(r) => {
                out.put_u64(r.participant.0);
                out.put_u64(r.origin.0);
                out.put_u32(r.seq);
            }
            Frame::Data(d) => {
                out.extend_from_slice(&d.key.0);
                out.put_u64(d.origin.0);
                out.put_u64(d.src.0);
                out.push(d.hops);
            }
            Frame::Unicast(u) => {
                out.put_u64(u.dst.0);
                out.put_u64(u.src.0);
                out.push(u.hops);
                out.extend_from_slice(&u.key.0);
                out.push(if u.reader { FLAG_READER } else { 0 });
            }
            Frame::Announce(a) => {
                out.put_u64(a.src.0);
                out.put_u64(a.origin.0);
                out.push(a.hops);
                out.extend_from_slice(&a.key.0);
                out.push(if a.reader { FLAG_READER } else { 0 });
            }
            Frame::LinkState(l) => {
                out.put_u64(l.origin.0);
                out.put_u32(l.seq);
                out.put_u16(l.len() as u16);
            }
        }
        Ok(())
    }

    /// Appends the whole frame to `out` (a copy of the payload; see [`Frame::encode_head`]
    /// for the zero-copy way).
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        self.encode_head(out)?;
        if let Some(p) = self.payload() {
            out.extend_from_slice(p);
        }
        Ok(())
    }

    /// The whole frame as bytes.
    pub fn to_bytes(&self) -> Result<Bytes, FrameError> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.encode(&mut v)?;
        Ok(v.into())
    }
}

/// Reads a frame header: its type and body length, checked against the type's bounds and
/// [`MAX_FRAME_BODY`] before the body is awaited, so a peer cannot make a receiver buffer a
/// frame it would refuse.
fn parse_header(bytes: &[u8]) -> Result<(FrameType, usize), FrameError> {
    let Some(head) = bytes.get(..FRAME_HEADER_LEN) else {
        return Err(FrameError::Truncated);
    };
    let ty = FrameType::from_u8(head[0]).ok_or(FrameError::UnknownType(head[0]))?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME_BODY {
        return Err(FrameError::TooLarge(len));
    }
    let (want, exact) = ty.body_len();
    if len < want || (exact && len != want) {
        return Err(FrameError::BadLength { frame: ty, len });
    }
    Ok((ty, len))
}

/// Cuts a byte stream into frames: frames arrive split across (or packed into) stream reads.
///
/// Push what the stream gives with [`Decoder::push`] (or [`Decoder::push_bytes`], which keeps
/// whole frames of a chunk without copying them), then take frames with [`Decoder::next_frame`]
/// until it returns `Ok(None)`. A header is checked as soon as its five bytes are in, so an
/// oversized or unknown frame is refused before its body is buffered; after an error the
/// decoder stays failed (a stream cannot resynchronise) and the link should be closed.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Bytes of frames not yet complete.
    buf: BytesMut,
    /// Whole chunks pushed while `buf` was empty, cut into frames without a copy.
    chunk: Bytes,
    failed: Option<FrameError>,
}

impl Decoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes read from the stream (copied). Ignored once the decoder has failed.
    pub fn push(&mut self, data: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        if !self.chunk.is_empty() {
            let chunk = core::mem::take(&mut self.chunk);
            self.buf.extend_from_slice(&chunk);
        }
        self.buf.extend_from_slice(data);
    }

    /// Appends a chunk read from the stream; frames that lie whole inside it are handed out
    /// as slices of it, without a copy.
    pub fn push_bytes(&mut self, data: Bytes) {
        if self.failed.is_some() {
            return;
        }
        if self.buf.is_empty() && self.chunk.is_empty() {
            self.chunk = data;
        } else {
            self.push(&data);
        }
    }

    /// Bytes held that are not yet a whole frame (at most [`MAX_FRAME_LEN`] plus the last
    /// push).
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.chunk.len()
    }

    /// The next whole frame, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let r = self.next_inner();
        if let Err(e) = r {
            self.failed = Some(e);
            self.buf = BytesMut::new();
            self.chunk = Bytes::new();
        }
        r
    }

    fn next_inner(&mut self) -> Result<Option<Frame>, FrameError> {
        if !self.chunk.is_empty() {
            if self.chunk.len() >= FRAME_HEADER_LEN {
                let (ty, len) = parse_header(&self.chunk)?;
                if self.chunk.len() >= FRAME_HEADER_LEN + len {
                    let mut frame = self.chunk.split_to(FRAME_HEADER_LEN + len);
                    frame.advance(FRAME_HEADER_LEN);
                    return Frame::decode(ty, frame).map(Some);
                }
            }
            // An incomplete frame at the end of the chunk: keep it in the buffer.
            let chunk = core::mem::take(&mut self.chunk);
            self.buf.extend_from_slice(&chunk);
        }
        if self.buf.len() < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let (ty, len) = parse_header(&self.buf)?;
        if self.buf.len() < FRAME_HEADER_LEN + len {
            self.buf.reserve(FRAME_HEADER_LEN + len - self.buf.len());
            return Ok(None);
        }
        let mut frame = self.buf.split_to(FRAME_HEADER_LEN + len);
        frame.advance(FRAME_HEADER_LEN);
        Frame::decode(ty, frame.freeze()).map(Some)
    }
}

#[cfg(test)]
mod tests;
