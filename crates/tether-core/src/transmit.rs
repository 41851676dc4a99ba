//! What the engine hands a transport: one datagram as a head and a shared body.

use std::net::SocketAddr;

use bytes::Bytes;

/// Largest head kept inline in a [`Transmit`] (datagram header, heartbeat, DATA header; or
/// SEALED_BATCH fields and tag: 92 bytes).
pub(crate) const INLINE_HEAD: usize = 96;

/// The first bytes of a transmit: inline when they are a sample's headers (no allocation per
/// sample), shared otherwise.
#[derive(Clone, PartialEq, Eq)]
pub struct Head(HeadRepr);

#[derive(Clone, PartialEq, Eq)]
pub(crate) enum HeadRepr {
    Inline { len: u8, buf: [u8; INLINE_HEAD] },
    Shared(Bytes),
}

impl Head {
    /// An inline head (at most 96 bytes; longer input is truncated, which the engine never
    /// produces: `DATA_HEAD_MAX` is 76).
    pub(crate) fn inline(s: &[u8]) -> Self {
        let n = s.len().min(INLINE_HEAD);
        let mut buf = [0u8; INLINE_HEAD];
        buf[..n].copy_from_slice(&s[..n]);
        Head(HeadRepr::Inline { len: n as u8, buf })
    }

    /// Copies `s`, inline when it is short.
    pub fn copy_from_slice(s: &[u8]) -> Self {
        if s.len() <= INLINE_HEAD {
            let mut buf = [0u8; INLINE_HEAD];
            buf[..s.len()].copy_from_slice(s);
            Head(HeadRepr::Inline {
                len: s.len() as u8,
                buf,
            })
        } else {
            Head(HeadRepr::Shared(Bytes::copy_from_slice(s)))
        }
    }

    /// The bytes as shared [`Bytes`] (copies inline heads).
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            HeadRepr::Inline { .. } => Bytes::copy_from_slice(self),
            HeadRepr::Shared(b) => b.clone(),
        }
    }
}

impl From<Bytes> for Head {
    fn from(b: Bytes) -> Self {
        Head(HeadRepr::Shared(b))
    }
}

impl std::ops::Deref for Head {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            HeadRepr::Inline { len, buf } => &buf[..*len as usize],
            HeadRepr::Shared(b) => b,
        }
    }
}

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Head({} bytes)", self.len())
    }
}

/// What follows a datagram's body: in a secure realm its AUTH_TAG (`docs/wire.md#auth_tag`),
/// computed as the datagram leaves the engine; empty otherwise.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    len: u8,
    buf: [u8; tether_wire::AUTH_TAG_LEN],
}

impl Tail {
    /// No tail.
    pub const NONE: Tail = Tail {
        len: 0,
        buf: [0; tether_wire::AUTH_TAG_LEN],
    };

    /// An AUTH_TAG submessage.
    pub(crate) fn auth_tag(b: [u8; tether_wire::AUTH_TAG_LEN]) -> Tail {
        Tail {
            len: tether_wire::AUTH_TAG_LEN as u8,
            buf: b,
        }
    }
}

impl std::ops::Deref for Tail {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

impl std::fmt::Debug for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tail({} bytes)", self.len)
    }
}

/// One datagram to send: `head` followed by `body`, then `tail`. The body is a sample's payload,
/// referenced rather than copied, so a transport can send both with one scatter-gather call;
/// several transmits of one sample share the same payload bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a transmit must be handed to a transport"]
pub struct Transmit {
    /// Where to.
    pub dest: SocketAddr,
    /// Headers (and every submessage when there is no body).
    pub head: Head,
    /// The payload of the datagram's last DATA submessage, or empty.
    pub body: Bytes,
    /// The datagram's authentication tag (secure realms), or empty.
    pub tail: Tail,
    /// The local writer whose samples (DATA, DATA_FRAG, BATCH, SEALED_BATCH), heartbeat or
    /// GAP this datagram carries; `None` for everything else (discovery, AUTH, keys,
    /// ACKNACKs, probes). A driver sends a datagram to a router link's group as a DATA frame
    /// under that writer's [`route_key`](crate::Participant::route_key): such a datagram
    /// always names its writer. A copy field, so tagging costs nothing per sample.
    pub writer: Option<tether_wire::EntityId>,
    /// The local endpoint whose ENDPOINT this datagram announces, alone among endpoints (to
    /// a routed peer or a router link's group, announcements go one endpoint a datagram):
    /// a driver tags the frame with that endpoint's routing key and kind, so that a site's
    /// export list holds back what a topic it does not export announces, and no writer
    /// matches a reader its data can never reach. `None` for everything else.
    pub announces: Option<tether_wire::EntityId>,
}

impl Transmit {
    /// Total datagram length.
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len() + self.tail.len()
    }

    /// True if the datagram is empty (never for transmits the engine produces).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The datagram as one buffer.
    pub fn contiguous(&self) -> Bytes {
        if self.body.is_empty() && self.tail.is_empty() {
            self.head.to_bytes()
        } else {
            let mut v = Vec::with_capacity(self.len());
            v.extend_from_slice(&self.head);
            v.extend_from_slice(&self.body);
            v.extend_from_slice(&self.tail);
            Bytes::from(v)
        }
    }
}
