//! Packing submessages into datagrams, and a sample into its DATA or DATA_FRAGs.

use std::collections::VecDeque;
use std::net::SocketAddr;

use bytes::Bytes;
use tether_wire::{
    DataFragRepr, DataRepr, DatagramBuilder, EntityId, HEADER_LEN, Header, HeartbeatRepr,
    Submessage,
};

use crate::event::Stats;

use crate::transmit::{Head, Tail, Transmit};

/// Packs submessages for one destination into as few datagrams as fit.
pub(crate) struct Packer {
    pub(crate) dest: SocketAddr,
    pub(crate) hdr: Header,
    pub(crate) max: usize,
    pub(crate) buf: Vec<u8>,
    pub(crate) tmp: Vec<u8>,
    /// The local writer whose submessages these are, if any ([`Transmit::writer`]).
    pub(crate) writer: Option<EntityId>,
}

impl Packer {
    pub(crate) fn new(dest: SocketAddr, hdr: Header, max: usize) -> Self {
        let mut buf = Vec::new();
        DatagramBuilder::new(&mut buf, hdr);
        Packer {
            dest,
            hdr,
            max,
            buf,
            tmp: Vec::new(),
            writer: None,
        }
    }

    /// A packer for local writer `writer`'s submessages (repairs, GAPs, heartbeats): its
    /// datagrams name it ([`Transmit::writer`]).
    pub(crate) fn for_writer(dest: SocketAddr, hdr: Header, max: usize, writer: EntityId) -> Self {
        Packer {
            writer: Some(writer),
            ..Packer::new(dest, hdr, max)
        }
    }

    pub(crate) fn push(
        &mut self,
        m: &Submessage<'_>,
        out: &mut VecDeque<Transmit>,
        stats: &mut Stats,
    ) {
        self.push_together(std::slice::from_ref(m), out, stats);
    }

    /// Pushes `ms` into one datagram: the current one if they all fit, else the next (an
    /// ACKNACK and the SKIPPED that qualifies it must not be parted: one could be lost
    /// without the other).
    pub(crate) fn push_together(
        &mut self,
        ms: &[Submessage<'_>],
        out: &mut VecDeque<Transmit>,
        stats: &mut Stats,
    ) {
        let mut b = DatagramBuilder::new(&mut self.tmp, self.hdr);
        for m in ms {
            if b.push(m).is_err() {
                return;
            }
        }
        let body_len = self.tmp.len() - HEADER_LEN;
        if self.buf.len() + body_len > self.max && self.buf.len() > HEADER_LEN {
            self.flush(out, stats);
        }
        self.buf.extend_from_slice(&self.tmp[HEADER_LEN..]);
    }

    pub(crate) fn flush(&mut self, out: &mut VecDeque<Transmit>, stats: &mut Stats) {
        if self.buf.len() <= HEADER_LEN {
            return;
        }
        let dg = Bytes::copy_from_slice(&self.buf);
        self.buf.truncate(HEADER_LEN);
        stats.datagrams_sent += 1;
        stats.bytes_sent += dg.len() as u64;
        out.push_back(Transmit {
            dest: self.dest,
            head: dg.into(),
            body: Bytes::new(),
            tail: Tail::NONE,
            writer: self.writer,
            announces: None,
        });
    }

    pub(crate) fn finish(mut self, out: &mut VecDeque<Transmit>, stats: &mut Stats) {
        self.flush(out, stats);
    }
}

/// One sample on its way to one destination: builds its DATA, or one of its fragments.
pub(crate) struct Outgoing<'a> {
    pub(crate) hdr: Header,
    /// Largest payload sent whole in one DATA.
    pub(crate) single: usize,
    pub(crate) frag_size: u16,
    pub(crate) dest: SocketAddr,
    pub(crate) writer: EntityId,
    pub(crate) reader: EntityId,
    pub(crate) seq: u64,
    pub(crate) timestamp_ns: u64,
    pub(crate) payload: &'a Bytes,
}

impl Outgoing<'_> {
    pub(crate) fn frag_count(&self) -> u32 {
        if self.payload.len() <= self.single {
            1
        } else {
            (self.payload.len() as u32).div_ceil(self.frag_size as u32)
        }
    }

    /// The DATA (when the sample fits one datagram; `n` is then 0) or fragment `n`, with
    /// `hb` in front. Counted in `stats`.
    pub(crate) fn datagram(
        &self,
        n: u32,
        hb: Option<&HeartbeatRepr>,
        stats: &mut Stats,
    ) -> Transmit {
        let mut head = Vec::with_capacity(128);
        let mut b = DatagramBuilder::new(&mut head, self.hdr);
        if let Some(hb) = hb {
            let _ = b.push(&Submessage::Heartbeat(*hb));
        }
        let body = if self.payload.len() <= self.single {
            let data = DataRepr {
                writer: self.writer,
                reader: self.reader,
                seq: self.seq,
                timestamp_ns: self.timestamp_ns,
                payload: &[],
            };
            let _ = b.push_data_head(&data, self.payload.len());
            self.payload.clone()
        } else {
            let fs = self.frag_size as usize;
            let start = (n as usize * fs).min(self.payload.len());
            let end = (start + fs).min(self.payload.len());
            let body = self.payload.slice(start..end);
            let f = DataFragRepr {
                writer: self.writer,
                reader: self.reader,
                seq: self.seq,
                timestamp_ns: self.timestamp_ns,
                sample_size: self.payload.len() as u32,
                frag_size: self.frag_size,
                frag_num: n,
                payload: &body,
            };
            let _ = b.push_frag_head(&f);
            body
        };
        stats.datagrams_sent += 1;
        stats.bytes_sent += (head.len() + body.len()) as u64;
        Transmit {
            dest: self.dest,
            head: Head::copy_from_slice(&head),
            body,
            tail: Tail::NONE,
            writer: Some(self.writer),
            announces: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_wire::{AckNackRepr, Datagram, ParticipantId, SkippedRepr};

    /// Farewell ACKNACKs with their SKIPPEDs, more than a datagram holds: each SKIPPED is in
    /// the datagram of its ACKNACK, right after it.
    #[test]
    fn an_acknack_and_its_skipped_are_never_parted() {
        let hdr = Header {
            domain: 0,
            participant: ParticipantId(1),
        };
        let dest: SocketAddr = "127.0.0.1:7400".parse().unwrap();
        let mut p = Packer::new(dest, hdr, 300);
        let (mut out, mut stats) = (VecDeque::new(), Stats::default());
        for i in 1..=20u32 {
            let an = AckNackRepr {
                reader: EntityId(i),
                writer: EntityId(1),
                base: 5,
                num_bits: 0,
                bitmap: [0; 8],
                count: i,
                start_unknown: false,
            };
            let sk = SkippedRepr {
                reader: EntityId(i),
                writer: EntityId(1),
                count: i,
                skipped: 0,
                abandoned: 0,
            };
            p.push_together(
                &[Submessage::AckNack(an), Submessage::Skipped(sk)],
                &mut out,
                &mut stats,
            );
        }
        p.finish(&mut out, &mut stats);
        assert!(out.len() > 1);
        let mut pairs = 0;
        for t in &out {
            let bytes = t.contiguous();
            assert!(bytes.len() <= 300);
            let d = Datagram::parse(&bytes).unwrap();
            let ms: Vec<_> = d.submessages().map(Result::unwrap).collect();
            assert_eq!(ms.len() % 2, 0);
            for m in ms.chunks(2) {
                match (&m[0], &m[1]) {
                    (Submessage::AckNack(a), Submessage::Skipped(s)) if a.count == s.count => {
                        pairs += 1
                    }
                    other => panic!("parted: {other:?}"),
                }
            }
        }
        assert_eq!(pairs, 20);
    }
}
