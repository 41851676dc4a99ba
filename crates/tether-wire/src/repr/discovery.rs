//! PARTICIPANT and ENDPOINT: discovery (`docs/wire.md` sections 3.1 and 3.2).

use super::{
    Durability, EndpointKind, HistoryKind, Liveliness, QosRepr, Reliability, StrList, put_str16,
};
use crate::{Cursor, EntityId, Error, MAX_PARTITIONS};

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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndpointRepr<'a> {
    /// The endpoint inside its participant (non-zero).
    pub entity: EntityId,
    /// Writer or reader.
    pub kind: EndpointKind,
    /// Offered (writer) or requested (reader) QoS.
    pub qos: QosRepr,
    /// Topic name.
    pub topic: &'a str,
    /// Type name.
    pub type_name: &'a str,
    /// Partitions (empty: the default partition).
    pub partitions: StrList<'a>,
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
        let _reserved = c.u16()?;
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
        let bytes = c.rest();
        let mut check = Cursor::new(bytes);
        for _ in 0..count {
            check.str16()?;
        }
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
            topic,
            type_name,
            partitions: StrList::Encoded { count, bytes },
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
        out.extend_from_slice(&0u16.to_le_bytes());
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
        Ok(())
    }
}
