//! Path-MTU probing: PROBE and PROBE_ACK (`docs/wire.md#probe`).

use crate::{Cursor, Error};

/// Length of a PROBE body before its padding: the probe's id.
pub const PROBE_FIXED_LEN: usize = 8;

/// A padded datagram that asks its receiver to confirm it arrived whole. Sent with the
/// don't-fragment bit set, its arrival proves the path carries datagrams of its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeRepr {
    /// Chosen at random by the sender; the acknowledgment must repeat it.
    pub id: u64,
    /// Padding bytes after the id (zeros when emitted; any value is accepted).
    pub padding: u16,
}

/// The answer to a PROBE: its id, the length of the datagram that carried it, and how much
/// the answering participant has received from the prober.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeAckRepr {
    /// The probe's id.
    pub id: u64,
    /// Length in bytes of the datagram the probe arrived in.
    pub size: u32,
    /// Bytes of counted datagrams (`docs/wire.md#received`) the answering participant has
    /// received from the prober's participant, the probe's own datagram excluded, modulo
    /// 2^64. `None`: absent (a 12-byte body).
    pub received: Option<u64>,
}

/// Length of a PROBE_ACK body with its `received` field.
pub const PROBE_ACK_LEN: usize = 20;

impl ProbeRepr {
    /// Parses the body's fields from `c` (the padding is the rest of the body).
    pub(crate) fn parse(c: &mut Cursor<'_>) -> Result<Self, Error> {
        //= docs/wire.md#probe
        let id = c.u64()?;
        let padding = c.rest().len();
        Ok(ProbeRepr {
            id,
            padding: u16::try_from(padding).map_err(|_| Error::BadValue("padding"))?,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.resize(out.len() + self.padding as usize, 0);
        Ok(())
    }
}

impl ProbeAckRepr {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'_>) -> Result<Self, Error> {
        //= docs/wire.md#probe
        let id = c.u64()?;
        let size = c.u32()?;
        let received = if c.is_empty() { None } else { Some(c.u64()?) };
        Ok(ProbeAckRepr { id, size, received })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        if let Some(r) = self.received {
            out.extend_from_slice(&r.to_le_bytes());
        }
        Ok(())
    }
}
