//! PARTICIPANT and ENDPOINT: discovery (`docs/wire.md` sections 3.1 and 3.2).

use super::{
    Durability, EndpointKind, HistoryKind, Liveliness, QosRepr, Reliability, StrList, put_str16,
};
use crate::{Cursor, DESCRIPTION_OVERHEAD, EntityId, Error, MAX_PARTITIONS};

/// A participant announcement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParticipantRepr<'a> {
    /// How long receivers consider the participant alive without hearing from it, in ms.
    pub lease_ms: u32,
    /// Human-readable name (may be empty).
    pub name: &'a str,
    /// The IPv4 multicast group and port its readers also take data on, if any
    /// (`docs/wire.md#participant`).
    pub data_group: Option<core::net::SocketAddrV4>,
}

/// An endpoint announcement.
///
/// ```text
///  0       4   5   6   7   8   9   10  11  12
/// +-------+---+---+---+---+---+---+---+-------+-------+---------+-- ... --+-------+-----+
/// |entity |knd|rel|dur|his|liv|prt|enc| depth |max_smp|max_bytes| durations | topic | ...
/// +-------+---+---+---+---+---+---+---+-------+-------+---------+-- ... --+-------+-----+
///   ... | type | partition count | partitions | [description length (u16) | description]
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndpointRepr<'a> {
    /// The endpoint inside its participant (non-zero).
    pub entity: EntityId,
    /// Writer or reader.
    pub kind: EndpointKind,
    /// Offered (writer) or requested (reader) QoS.
    pub qos: QosRepr,
    /// How a writer protects its samples, or how a reader requires them protected, in a
    /// secure realm ([`ProtectionMode::Unannounced`] outside one).
    pub protection: ProtectionMode,
    /// What its payloads are, as a label for tools (never checked against the bytes).
    pub encoding: Encoding,
    /// Topic name.
    pub topic: &'a str,
    /// Type name.
    pub type_name: &'a str,
    /// Partitions (empty: the default partition).
    pub partitions: StrList<'a>,
    /// In a secure realm: the topic's name and type sealed for the realm's members, bound
    /// to the topic id `topic` names (`docs/wire.md#endpoint`); `None` outside one.
    pub description: Option<&'a [u8]>,
}

/// How an endpoint protects samples (a writer) or requires them protected (a reader): one
/// byte of ENDPOINT (`docs/wire.md#endpoint`). A writer and a reader match only if the
/// writer gives every protection the reader requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtectionMode {
    /// Not said (0): security off, or a sender that predates the field. Matching does not
    /// look at it.
    Unannounced,
    /// A secure realm's `off` (1): samples in clear.
    Off,
    /// `encrypt` (2): samples sealed under the writer's sender key.
    Encrypt,
    /// `sign` (3): samples signed by the writer, in clear.
    Sign,
    /// `encrypt+sign` (4): sealed and signed.
    EncryptSign,
}

impl ProtectionMode {
    /// The wire byte.
    pub fn to_u8(self) -> u8 {
        match self {
            ProtectionMode::Unannounced => 0,
            ProtectionMode::Off => 1,
            ProtectionMode::Encrypt => 2,
            ProtectionMode::Sign => 3,
            ProtectionMode::EncryptSign => 4,
        }
    }

    /// From the wire byte; `None` for values this version does not define (the ENDPOINT is
    /// malformed: a receiver cannot tell what such a peer sends or accepts).
    pub fn from_u8(v: u8) -> Option<ProtectionMode> {
        Some(match v {
            0 => ProtectionMode::Unannounced,
            1 => ProtectionMode::Off,
            2 => ProtectionMode::Encrypt,
            3 => ProtectionMode::Sign,
            4 => ProtectionMode::EncryptSign,
            _ => return None,
        })
    }

    /// The mode from whether samples are sealed and signed.
    pub fn from_bits(encrypt: bool, sign: bool) -> ProtectionMode {
        match (encrypt, sign) {
            (false, false) => ProtectionMode::Off,
            (true, false) => ProtectionMode::Encrypt,
            (false, true) => ProtectionMode::Sign,
            (true, true) => ProtectionMode::EncryptSign,
        }
    }

    /// Whether samples are sealed and signed (`None`: unannounced).
    pub fn bits(self) -> Option<(bool, bool)> {
        match self {
            ProtectionMode::Unannounced => None,
            ProtectionMode::Off => Some((false, false)),
            ProtectionMode::Encrypt => Some((true, false)),
            ProtectionMode::Sign => Some((false, true)),
            ProtectionMode::EncryptSign => Some((true, true)),
        }
    }

    /// As configuration names it: `off`, `encrypt`, `sign`, `encrypt+sign` (`unannounced`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProtectionMode::Unannounced => "unannounced",
            ProtectionMode::Off => "off",
            ProtectionMode::Encrypt => "encrypt",
            ProtectionMode::Sign => "sign",
            ProtectionMode::EncryptSign => "encrypt+sign",
        }
    }
}

impl core::fmt::Display for ProtectionMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A label saying what an endpoint's payloads are: one byte of ENDPOINT
/// (`docs/wire.md#endpoint`). Payloads are bytes whatever the label; tools use it to print
/// them (`tether echo` pretty-prints JSON and CBOR). It plays no part in matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Encoding {
    /// No label (0). Values this version does not define are read as this.
    #[default]
    Unset,
    /// UTF-8 text (1).
    Text,
    /// JSON (2).
    Json,
    /// CBOR, RFC 8949 (3).
    Cbor,
    /// OMG CDR, as ROS 2 and DDS serialise messages (4).
    Cdr,
    /// Opaque bytes (5).
    Bytes,
}

impl Encoding {
    /// Every label, in wire order.
    pub const ALL: [Encoding; 6] = [
        Encoding::Unset,
        Encoding::Text,
        Encoding::Json,
        Encoding::Cbor,
        Encoding::Cdr,
        Encoding::Bytes,
    ];

    /// The wire byte.
    pub fn to_u8(self) -> u8 {
        match self {
            Encoding::Unset => 0,
            Encoding::Text => 1,
            Encoding::Json => 2,
            Encoding::Cbor => 3,
            Encoding::Cdr => 4,
            Encoding::Bytes => 5,
        }
    }

    /// From the wire byte: a value this version does not define is read as
    /// [`Encoding::Unset`] (a label is advice; a later version may define more).
    pub fn from_u8(v: u8) -> Encoding {
        match v {
            1 => Encoding::Text,
            2 => Encoding::Json,
            3 => Encoding::Cbor,
            4 => Encoding::Cdr,
            5 => Encoding::Bytes,
            _ => Encoding::Unset,
        }
    }

    /// Its name: `unset`, `text`, `json`, `cbor`, `cdr`, `bytes`.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Unset => "unset",
            Encoding::Text => "text",
            Encoding::Json => "json",
            Encoding::Cbor => "cbor",
            Encoding::Cdr => "cdr",
            Encoding::Bytes => "bytes",
        }
    }
}

impl core::fmt::Display for Encoding {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of [`Encoding`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEncoding(pub String);

impl core::fmt::Display for UnknownEncoding {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "unknown encoding '{}' (text, json, cbor, cdr, bytes or unset)",
            self.0
        )
    }
}

impl std::error::Error for UnknownEncoding {}

impl core::str::FromStr for Encoding {
    type Err = UnknownEncoding;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Encoding::ALL
            .into_iter()
            .find(|e| e.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownEncoding(s.to_string()))
    }
}

impl<'a> ParticipantRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#participant
        let lease_ms = c.u32()?;
        if lease_ms == 0 {
            return Err(Error::BadValue("lease_ms"));
        }
        let name = c.str16()?;
        let data_group = match c.rest() {
            [] => None,
            &[a, b, cc, d, p0, p1] => {
                let ip = core::net::Ipv4Addr::new(a, b, cc, d);
                if !ip.is_multicast() {
                    return Err(Error::BadValue("data group"));
                }
                Some(core::net::SocketAddrV4::new(
                    ip,
                    u16::from_le_bytes([p0, p1]),
                ))
            }
            _ => return Err(Error::BadValue("data group")),
        };
        Ok(ParticipantRepr {
            lease_ms,
            name,
            data_group,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(&self.lease_ms.to_le_bytes());
        put_str16(out, self.name)?;
        if let Some(g) = self.data_group {
            if !g.ip().is_multicast() {
                return Err(Error::BadLength);
            }
            out.extend_from_slice(&g.ip().octets());
            out.extend_from_slice(&g.port().to_le_bytes());
        }
        Ok(())
    }
}

impl<'a> EndpointRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#endpoint
        let entity = c.entity("entity")?;
        let kind = match c.u8()? {
            1 => EndpointKind::Writer,
            2 => EndpointKind::Reader,
            _ => return Err(Error::BadValue("endpoint kind")),
        };
        let reliability = match c.u8()? {
            0 => Reliability::BestEffort,
            1 => Reliability::Reliable,
            _ => return Err(Error::BadValue("reliability")),
        };
        let durability = match c.u8()? {
            0 => Durability::Volatile,
            1 => Durability::TransientLocal,
            _ => return Err(Error::BadValue("durability")),
        };
        let history = match c.u8()? {
            0 => HistoryKind::KeepLast,
            1 => HistoryKind::KeepAll,
            _ => return Err(Error::BadValue("history")),
        };
        let liveliness = match c.u8()? {
            0 => Liveliness::Automatic,
            _ => return Err(Error::BadValue("liveliness")),
        };
        //= docs/wire.md#endpoint
        //# protection | 1 | 0 unannounced, 1 off, 2 encrypt, 3 sign, 4 encrypt+sign
        let protection = ProtectionMode::from_u8(c.u8()?).ok_or(Error::BadValue("protection"))?;
        let encoding = Encoding::from_u8(c.u8()?);
        let depth = c.u32()?;
        if history == HistoryKind::KeepLast && depth == 0 {
            return Err(Error::BadValue("depth"));
        }
        let max_samples = c.u32()?;
        let max_bytes = c.u64()?;
        let deadline_us = c.u64()?;
        let lifespan_us = c.u64()?;
        let lease_us = c.u64()?;
        if deadline_us == 0 || lifespan_us == 0 || lease_us == 0 {
            return Err(Error::BadValue("duration"));
        }
        let topic = c.str16()?;
        if topic.is_empty() {
            return Err(Error::BadValue("topic"));
        }
        let type_name = c.str16()?;
        let count = c.u8()?;
        if count as usize > MAX_PARTITIONS {
            return Err(Error::BadLength);
        }
        let rest = c.rest();
        let mut check = Cursor::new(rest);
        for _ in 0..count {
            check.str16()?;
        }
        let bytes = &rest[..rest.len() - check.remaining()];
        // An optional description follows the partitions: length, then that many bytes.
        let description = if check.is_empty() {
            None
        } else {
            let n = check.u16()? as usize;
            if n < DESCRIPTION_OVERHEAD {
                return Err(Error::BadLength);
            }
            Some(check.take(n)?)
        };
        check.finish()?;
        Ok(EndpointRepr {
            entity,
            kind,
            qos: QosRepr {
                reliability,
                durability,
                history,
                depth,
                max_samples,
                max_bytes,
                deadline_us,
                lifespan_us,
                liveliness,
                lease_us,
            },
            protection,
            encoding,
            topic,
            type_name,
            partitions: StrList::Encoded { count, bytes },
            description,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        let q = &self.qos;
        out.extend_from_slice(&self.entity.0.to_le_bytes());
        out.push(match self.kind {
            EndpointKind::Writer => 1,
            EndpointKind::Reader => 2,
        });
        out.push(q.reliability as u8);
        out.push(q.durability as u8);
        out.push(q.history as u8);
        out.push(q.liveliness as u8);
        out.push(self.protection.to_u8());
        out.push(self.encoding.to_u8());
        out.extend_from_slice(&q.depth.to_le_bytes());
        out.extend_from_slice(&q.max_samples.to_le_bytes());
        out.extend_from_slice(&q.max_bytes.to_le_bytes());
        out.extend_from_slice(&q.deadline_us.to_le_bytes());
        out.extend_from_slice(&q.lifespan_us.to_le_bytes());
        out.extend_from_slice(&q.lease_us.to_le_bytes());
        put_str16(out, self.topic)?;
        put_str16(out, self.type_name)?;
        if self.partitions.len() > MAX_PARTITIONS {
            return Err(Error::BadLength);
        }
        out.push(self.partitions.len() as u8);
        for p in self.partitions.iter() {
            put_str16(out, p)?;
        }
        if let Some(d) = self.description {
            if d.len() < DESCRIPTION_OVERHEAD {
                return Err(Error::BadLength);
            }
            let n = u16::try_from(d.len()).map_err(|_| Error::TooLong)?;
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(d);
        }
        Ok(())
    }
}
