//! The datagram view (header + submessage iterator) and the builder that emits datagrams.

use crate::{
    Cursor, EntityId, Error, HEADER_LEN, Header, MAGIC, MAX_BODY_LEN, ParticipantId,
    SUBMESSAGE_HEADER_LEN, Submessage, SubmessageKind, VERSION,
};

mod field {
    use core::ops::Range;
    pub(super) const MAGIC: Range<usize> = 0..4;
    pub(super) const VERSION: usize = 4;
    pub(super) const FLAGS: usize = 5;
    pub(super) const DOMAIN: Range<usize> = 6..8;
    pub(super) const PARTICIPANT: Range<usize> = 8..16;
}

/// A checked view of one datagram: the header is valid; submessages are parsed lazily.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    header: Header,
    body: &'a [u8],
}

impl<'a> Datagram<'a> {
    /// Checks the header of `bytes` (`docs/wire.md` section 2).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        if bytes.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        //= docs/wire.md#header
        //# A receiver MUST drop a datagram whose magic is not `TTHR` or whose version it does not speak.
        if bytes[field::MAGIC] != MAGIC {
            return Err(Error::BadMagic);
        }
        if bytes[field::VERSION] != VERSION {
            return Err(Error::UnsupportedVersion(bytes[field::VERSION]));
        }
        if bytes[field::FLAGS] != 0 {
            return Err(Error::BadValue("header flags"));
        }
        let domain = u16::from_le_bytes([bytes[6], bytes[7]]);
        let mut p = [0u8; 8];
        p.copy_from_slice(&bytes[field::PARTICIPANT]);
        let participant = u64::from_le_bytes(p);
        if participant == 0 {
            return Err(Error::BadValue("participant"));
        }
        debug_assert_eq!(field::DOMAIN.len(), 2);
        let body = &bytes[HEADER_LEN..];
        if body.is_empty() {
            return Err(Error::Truncated);
        }
        Ok(Datagram {
            header: Header {
                domain,
                participant: ParticipantId(participant),
            },
            body,
        })
    }

    /// The validated header.
    pub fn header(&self) -> Header {
        self.header
    }

    /// Iterates the submessages; yields at most one error, then stops.
    pub fn submessages(&self) -> Submessages<'a> {
        Submessages {
            cursor: Cursor::new(self.body),
            done: false,
        }
    }
}

/// Iterator over the submessages of a [`Datagram`].
#[derive(Debug)]
pub struct Submessages<'a> {
    cursor: Cursor<'a>,
    done: bool,
}

impl<'a> Iterator for Submessages<'a> {
    type Item = Result<Submessage<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = (|| {
            let kind = self.cursor.u8()?;
            let flags = self.cursor.u8()?;
            let len = self.cursor.u16()? as usize;
            let body = self.cursor.take(len)?;
            Submessage::parse_flagged(kind, flags, body)
        })();
        match &r {
            Err(_) => self.done = true,
            Ok(_) => self.done = self.cursor.is_empty(),
        }
        Some(r)
    }
}

/// Emits one datagram: a header, then submessages appended in order.
#[derive(Debug)]
pub struct DatagramBuilder<'b> {
    out: &'b mut Vec<u8>,
}

impl<'b> DatagramBuilder<'b> {
    /// Clears `out` and writes `header` into it.
    pub fn new(out: &'b mut Vec<u8>, header: Header) -> Self {
        out.clear();
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(0);
        out.extend_from_slice(&header.domain.to_le_bytes());
        out.extend_from_slice(&header.participant.0.to_le_bytes());
        DatagramBuilder { out }
    }

    /// Appends one submessage. On error the datagram is left as it was before the call.
    pub fn push(&mut self, msg: &Submessage<'_>) -> Result<&mut Self, Error> {
        let start = self.out.len();
        self.out.push(msg.kind());
        self.out.push(msg.flags());
        self.out.extend_from_slice(&[0, 0]);
        if let Err(e) = msg.emit_body(self.out) {
            self.out.truncate(start);
            return Err(e);
        }
        let len = self.out.len() - start - SUBMESSAGE_HEADER_LEN;
        if len > MAX_BODY_LEN {
            self.out.truncate(start);
            return Err(Error::TooLong);
        }
        self.out[start + 2..start + 4].copy_from_slice(&(len as u16).to_le_bytes());
        Ok(self)
    }

    /// Appends a DATA submessage's header and fixed fields for a payload of `payload_len`
    /// bytes that the caller sends right after these bytes (scatter-gather). `data.payload`
    /// is ignored. The datagram must end with that payload.
    pub fn push_data_head(
        &mut self,
        data: &crate::DataRepr<'_>,
        payload_len: usize,
    ) -> Result<&mut Self, Error> {
        let len = crate::DATA_FIXED_LEN + payload_len;
        if len > MAX_BODY_LEN {
            return Err(Error::TooLong);
        }
        self.out.push(crate::SubmessageKind::Data as u8);
        self.out.push(0);
        self.out.extend_from_slice(&(len as u16).to_le_bytes());
        data.emit_fixed(self.out);
        Ok(self)
    }

    /// Appends a DATA_FRAG submessage's header and fixed fields; the caller sends the
    /// fragment's `frag.payload.len()`-many bytes right after (scatter-gather), and the
    /// datagram must end with them. `frag.payload` is only measured.
    pub fn push_frag_head(&mut self, frag: &crate::DataFragRepr<'_>) -> Result<&mut Self, Error> {
        let len = crate::DATA_FRAG_FIXED_LEN + frag.payload.len();
        if len > MAX_BODY_LEN {
            return Err(Error::TooLong);
        }
        self.out.push(crate::SubmessageKind::DataFrag as u8);
        self.out.push(0);
        self.out.extend_from_slice(&(len as u16).to_le_bytes());
        frag.emit_fixed(self.out);
        Ok(self)
    }

    /// Appends a BATCH submessage's header and fixed fields for `entries_len` bytes of
    /// entries that the caller sends right after (scatter-gather); the datagram must end
    /// with them. `batch.entries` is ignored.
    pub fn push_batch_head(
        &mut self,
        batch: &crate::BatchRepr<'_>,
        entries_len: usize,
    ) -> Result<&mut Self, Error> {
        let len = crate::BATCH_FIXED_LEN + entries_len;
        if len > MAX_BODY_LEN {
            return Err(Error::TooLong);
        }
        self.out.push(crate::SubmessageKind::Batch as u8);
        self.out.push(0);
        self.out.extend_from_slice(&(len as u16).to_le_bytes());
        batch.emit_fixed(self.out);
        Ok(self)
    }

    /// Appends a SEALED_BATCH submessage's header and fields for `ciphertext_len` bytes of
    /// ciphertext that the caller sends right after (scatter-gather); the datagram must end
    /// with them (then its AUTH_TAG). `batch.ciphertext` is ignored.
    pub fn push_sealed_batch_head(
        &mut self,
        batch: &crate::SealedBatchRepr<'_>,
        ciphertext_len: usize,
    ) -> Result<&mut Self, Error> {
        let len = crate::SEALED_BATCH_FIXED_LEN + ciphertext_len;
        if len > MAX_BODY_LEN {
            return Err(Error::TooLong);
        }
        self.out.push(crate::SubmessageKind::SealedBatch as u8);
        self.out.push(0);
        self.out.extend_from_slice(&(len as u16).to_le_bytes());
        batch.emit_fixed(self.out);
        Ok(self)
    }

    /// Appends a SEALED submessage's header, `to` and `counter`, for `sealed_len` bytes of
    /// ciphertext and tag that the caller appends right after (sealing in place, with every
    /// byte before them as associated data: `docs/wire.md#sealed`).
    pub fn push_sealed_head(
        &mut self,
        to: ParticipantId,
        counter: u64,
        sealed_len: usize,
    ) -> Result<&mut Self, Error> {
        let len = crate::SEALED_FIXED_LEN + sealed_len;
        if len > MAX_BODY_LEN {
            return Err(Error::TooLong);
        }
        if counter == 0 || sealed_len < 16 {
            return Err(Error::BadLength);
        }
        self.out.push(crate::SubmessageKind::Sealed as u8);
        self.out.push(0);
        self.out.extend_from_slice(&(len as u16).to_le_bytes());
        self.out.extend_from_slice(&to.0.to_le_bytes());
        self.out.extend_from_slice(&counter.to_le_bytes());
        Ok(self)
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// True if only the header has been written.
    pub fn is_empty(&self) -> bool {
        self.out.len() <= HEADER_LEN
    }
}

/// Most bytes [`encode_data_head`] writes: header, heartbeat, DATA header and fixed fields.
pub const DATA_HEAD_MAX: usize =
    HEADER_LEN + SUBMESSAGE_HEADER_LEN + 28 + SUBMESSAGE_HEADER_LEN + crate::DATA_FIXED_LEN;

/// Encodes, into a fixed buffer, the head of a datagram that carries one sample whose payload
/// the caller sends right after it (scatter-gather): the header, an optional heartbeat, and
/// the DATA submessage's header and fixed fields. The bytes equal what [`DatagramBuilder`]
/// writes for the same submessages; this is the writer's per-sample fast path. Returns the
/// length written.
pub fn encode_data_head(
    header: &Header,
    heartbeat: Option<&crate::HeartbeatRepr>,
    data: &crate::DataRepr<'_>,
    payload_len: usize,
    out: &mut [u8; DATA_HEAD_MAX],
) -> Result<usize, Error> {
    let body = crate::DATA_FIXED_LEN + payload_len;
    if body > MAX_BODY_LEN {
        return Err(Error::TooLong);
    }
    let mut w = Fixed { out, at: 0 };
    w.put(&MAGIC);
    w.put(&[VERSION, 0]);
    w.put(&header.domain.to_le_bytes());
    w.put(&header.participant.0.to_le_bytes());
    if let Some(hb) = heartbeat {
        let flags = if hb.final_ { crate::HEARTBEAT_FINAL } else { 0 };
        w.put(&[crate::SubmessageKind::Heartbeat as u8, flags]);
        w.put(&28u16.to_le_bytes());
        w.put(&hb.writer.0.to_le_bytes());
        w.put(&hb.reader.0.to_le_bytes());
        w.put(&hb.first.to_le_bytes());
        w.put(&hb.last.to_le_bytes());
        w.put(&hb.count.to_le_bytes());
    }
    w.put(&[crate::SubmessageKind::Data as u8, 0]);
    w.put(&(body as u16).to_le_bytes());
    w.put(&data.writer.0.to_le_bytes());
    w.put(&data.reader.0.to_le_bytes());
    w.put(&data.seq.to_le_bytes());
    w.put(&data.timestamp_ns.to_le_bytes());
    Ok(w.at)
}

/// Writes into a buffer whose size is fixed at compile time to fit everything written.
struct Fixed<'a> {
    out: &'a mut [u8; DATA_HEAD_MAX],
    at: usize,
}

impl Fixed<'_> {
    fn put(&mut self, b: &[u8]) {
        self.out[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
}

/// Whether a datagram counts toward what its receiver reports in a PROBE_ACK's `received`
/// (`docs/wire.md#received`): every datagram except those whose first submessage is
/// discovery (PARTICIPANT, PARTICIPANT_BYE, ENDPOINT, ENDPOINT_BYE, which may travel to a
/// discovery group) or path probing (PROBE, PROBE_ACK). Sender and receiver both apply it to
/// the datagram as built, before any pairwise sealing (`docs/wire.md#sealed`). Reads only
/// the first submessage's kind: `bytes` need not be valid otherwise.
pub fn counts_as_received(bytes: &[u8]) -> bool {
    //= docs/wire.md#received
    match bytes
        .get(HEADER_LEN)
        .copied()
        .and_then(SubmessageKind::from_u8)
    {
        Some(
            SubmessageKind::Participant
            | SubmessageKind::ParticipantBye
            | SubmessageKind::Endpoint
            | SubmessageKind::EndpointBye
            | SubmessageKind::Probe
            | SubmessageKind::ProbeAck,
        ) => false,
        Some(_) => true,
        None => false,
    }
}

/// The id of the PROBE that a datagram starts with, if it starts with one (after its
/// header); `None` for anything else.
pub fn leading_probe_id(bytes: &[u8]) -> Option<u64> {
    if bytes.get(HEADER_LEN).copied() != Some(SubmessageKind::Probe as u8) {
        return None;
    }
    let at = HEADER_LEN + SUBMESSAGE_HEADER_LEN;
    let id = bytes.get(at..at + 8)?;
    Some(u64::from_le_bytes(id.try_into().ok()?))
}

/// What [`writer_stream`] reads of a datagram from a writer's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterStream {
    /// The writer (the first submessage's).
    pub writer: EntityId,
    /// It carries samples (a DATA, DATA_FRAG or BATCH).
    pub samples: bool,
    /// Some DATA or DATA_FRAG in it is addressed to one reader (a repair, or a
    /// transient-local writer's history for a late joiner), not to every matched reader.
    pub addressed: bool,
}

/// The writer of a datagram from a writer's stream (its first submessage is a DATA,
/// DATA_FRAG, BATCH, BATCH_SIG, HEARTBEAT or GAP, each of which begins with the writer's
/// entity id), whether it carries samples, and whether they are addressed to one reader.
/// `None` for any other datagram. Reads only submessage headers and those ids: `bytes` (a
/// datagram as built, before any pairwise sealing) need not be valid otherwise.
pub fn writer_stream(bytes: &[u8]) -> Option<WriterStream> {
    let first = SubmessageKind::from_u8(*bytes.get(HEADER_LEN)?)?;
    let stream = matches!(
        first,
        SubmessageKind::Data
            | SubmessageKind::DataFrag
            | SubmessageKind::Batch
            | SubmessageKind::SealedBatch
            | SubmessageKind::BatchSig
            | SubmessageKind::Heartbeat
            | SubmessageKind::Gap
    );
    if !stream {
        return None;
    }
    let at = HEADER_LEN + SUBMESSAGE_HEADER_LEN;
    let writer = EntityId(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let mut i = HEADER_LEN;
    let (mut samples, mut addressed) = (false, false);
    while let Some(h) = bytes.get(i..i + SUBMESSAGE_HEADER_LEN) {
        let kind = SubmessageKind::from_u8(h[0]);
        samples |= matches!(
            kind,
            Some(
                SubmessageKind::Data
                    | SubmessageKind::DataFrag
                    | SubmessageKind::Batch
                    | SubmessageKind::SealedBatch
            )
        );
        if matches!(kind, Some(SubmessageKind::Data | SubmessageKind::DataFrag)) {
            let r = i + SUBMESSAGE_HEADER_LEN + 4;
            if let Some(reader) = bytes.get(r..r + 4) {
                addressed |= reader != [0, 0, 0, 0];
            }
        }
        let len = u16::from_le_bytes([h[2], h[3]]) as usize;
        i += SUBMESSAGE_HEADER_LEN + len;
    }
    Some(WriterStream {
        writer,
        samples,
        addressed,
    })
}
