//! A link once made: one verified connection and its bidirectional stream of
//! length-prefixed frames, split into a sending and a receiving half.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::LinkError;
use super::link::{
    CLOSE_BAD_PREAMBLE, CLOSE_FRAME_TOO_LARGE, LinkConfig, PREAMBLE, PeerCredential, SendError,
};

/// What both halves of a link share.
#[derive(Debug)]
struct Shared {
    conn: quinn::Connection,
    peer: PeerCredential,
    frames_sent: AtomicU64,
    bytes_sent: AtomicU64,
    frames_received: AtomicU64,
    bytes_received: AtomicU64,
}

/// A link's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkStats {
    /// Frames sent (whole, handed to QUIC).
    pub frames_sent: u64,
    /// Their bytes (without length prefixes).
    pub bytes_sent: u64,
    /// Frames received.
    pub frames_received: u64,
    /// Their bytes.
    pub bytes_received: u64,
    /// UDP datagrams sent.
    pub udp_datagrams_sent: u64,
    /// UDP bytes sent.
    pub udp_bytes_sent: u64,
    /// UDP datagrams received.
    pub udp_datagrams_received: u64,
    /// UDP bytes received.
    pub udp_bytes_received: u64,
    /// Packets declared lost.
    pub lost_packets: u64,
    /// Congestion events.
    pub congestion_events: u64,
    /// The congestion window, bytes.
    pub cwnd: u64,
    /// The smoothed round-trip time.
    pub rtt: Duration,
}

impl Shared {
    fn stats(&self) -> LinkStats {
        let q = self.conn.stats();
        LinkStats {
            frames_sent: self.frames_sent.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            frames_received: self.frames_received.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            udp_datagrams_sent: q.udp_tx.datagrams,
            udp_bytes_sent: q.udp_tx.bytes,
            udp_datagrams_received: q.udp_rx.datagrams,
            udp_bytes_received: q.udp_rx.bytes,
            lost_packets: q.path.lost_packets,
            congestion_events: q.path.congestion_events,
            cwnd: q.path.cwnd,
            rtt: q.path.rtt,
        }
    }
}

/// One verified connection carrying frames both ways. [`split`](Self::split) it to send
/// and receive from different tasks.
#[derive(Debug)]
pub struct Link {
    tx: LinkSender,
    pub(super) rx: LinkReceiver,
}

/// The sending half of a [`Link`].
#[derive(Debug)]
pub struct LinkSender {
    stream: quinn::SendStream,
    shared: Arc<Shared>,
    max_frame: usize,
    /// What a write whose future was dropped before it finished left unwritten of its
    /// frames: the next write (or `finish_delivered`) writes it first, so the stream stays
    /// framed. (A session closing while a batch was half written sent its goodbyes into the
    /// middle of a frame; the router read a length of 463 MB and closed the link, the
    /// goodbyes lost.)
    unsent: Vec<Bytes>,
}

/// The receiving half of a [`Link`].
#[derive(Debug)]
pub struct LinkReceiver {
    stream: quinn::RecvStream,
    shared: Arc<Shared>,
    max_frame: usize,
    buf: BytesMut,
    /// The server's preamble has not been read yet (a link from
    /// [`QuicEndpoint::connect_early`]).
    pub(super) preamble_due: bool,
}

impl Link {
    pub(super) fn new(
        conn: quinn::Connection,
        peer: PeerCredential,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
        cfg: &LinkConfig,
    ) -> Link {
        let shared = Arc::new(Shared {
            conn,
            peer,
            frames_sent: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            frames_received: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
        });
        Link {
            tx: LinkSender {
                stream: send,
                shared: shared.clone(),
                max_frame: cfg.max_frame,
                unsent: Vec::new(),
            },
            rx: LinkReceiver {
                stream: recv,
                shared,
                max_frame: cfg.max_frame,
                buf: BytesMut::new(),
                preamble_due: false,
            },
        }
    }

    /// The peer's verified credential.
    pub fn peer(&self) -> &PeerCredential {
        &self.tx.shared.peer
    }

    /// The peer's address now (it changes when the peer migrates).
    pub fn remote_address(&self) -> SocketAddr {
        self.tx.shared.conn.remote_address()
    }

    /// The smoothed round-trip time.
    pub fn rtt(&self) -> Duration {
        self.tx.shared.conn.rtt()
    }

    /// The link's counters.
    pub fn stats(&self) -> LinkStats {
        self.tx.shared.stats()
    }

    /// Sends one frame (see [`LinkSender::send`]).
    pub async fn send(&mut self, frame: Bytes) -> Result<(), SendError> {
        self.tx.send(frame).await
    }

    /// Receives one frame (see [`LinkReceiver::recv`]).
    pub async fn recv(&mut self) -> Result<Bytes, LinkError> {
        self.rx.recv().await
    }

    /// Closes the link at once with `code` and `reason` (frames not yet delivered are
    /// dropped: to end cleanly, [`LinkSender::finish`] and wait for the peer's close).
    pub fn close(&self, code: u32, reason: &str) {
        self.tx.shared.conn.close(code.into(), reason.as_bytes());
    }

    /// Waits until the link is closed, and says why.
    pub async fn closed(&self) -> LinkError {
        self.tx.shared.conn.closed().await.into()
    }

    /// The two halves.
    pub fn split(self) -> (LinkSender, LinkReceiver) {
        (self.tx, self.rx)
    }
}

impl LinkSender {
    /// Sends one frame: its length (u32 BE) then its bytes, on the link's stream. Waits
    /// while the peer's flow-control window is full (backpressure). A frame longer than
    /// the link's limit is refused (`LinkError::FrameTooLarge`), and handed back.
    pub async fn send(&mut self, frame: Bytes) -> Result<(), SendError> {
        self.send_parts(frame, Bytes::new(), Bytes::new()).await
    }

    /// Why a frame of `len` bytes is refused: over this link's limit.
    fn too_large(&self, len: usize) -> LinkError {
        LinkError::FrameTooLarge {
            len,
            max: self.max_frame,
        }
    }

    /// Sends one frame made of `head`, `body` and `tail` (as [`send`](Self::send) does with
    /// them joined), without joining them: a router forwarding one datagram on many links
    /// writes a small head of its own on each and the same body, referenced, not copied;
    /// a session sends a sample's payload where the engine keeps it.
    pub async fn send_parts(
        &mut self,
        head: Bytes,
        body: Bytes,
        tail: Bytes,
    ) -> Result<(), SendError> {
        let len = head.len() + body.len() + tail.len();
        if len > self.max_frame {
            return Err(refused(&head, &body, &tail, self.too_large(len)));
        }
        if let Err(error) = self.write_unsent().await {
            return Err(refused(&head, &body, &tail, error));
        }
        let prefix = Bytes::copy_from_slice(&(len as u32).to_be_bytes());
        self.unsent
            .extend([prefix, head.clone(), body.clone(), tail.clone()]);
        let r = self.stream.write_all_chunks(&mut self.unsent).await;
        self.unsent.clear();
        match r {
            Ok(()) => {
                self.shared.frames_sent.fetch_add(1, Ordering::Relaxed);
                self.shared
                    .bytes_sent
                    .fetch_add(len as u64, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(refused(&head, &body, &tail, e.into())),
        }
    }

    /// Sends several frames, each made of a head, a body and a tail (as
    /// [`send_parts`](Self::send_parts) does one by one), in one write to the stream: a
    /// router or session that finds frames queued hands QUIC all of them at once, which
    /// packs them into full packets and takes its connection's lock once, not per frame.
    /// `frames` is emptied. A frame over the limit is refused before anything is written.
    pub async fn send_batch(
        &mut self,
        frames: &mut Vec<(Bytes, Bytes, Bytes)>,
    ) -> Result<(), SendError> {
        if let Some((h, b, t)) = frames
            .iter()
            .find(|(h, b, t)| h.len() + b.len() + t.len() > self.max_frame)
        {
            let e = refused(h, b, t, self.too_large(h.len() + b.len() + t.len()));
            frames.clear();
            return Err(e);
        }
        if let Err(error) = self.write_unsent().await {
            frames.clear();
            return Err(SendError {
                frame: Bytes::new(),
                error,
            });
        }
        let mut chunks = std::mem::take(&mut self.unsent);
        chunks.reserve(frames.len() * 4);
        let mut bytes = 0u64;
        let n = frames.len() as u64;
        // Every frame's length prefix in one buffer: one allocation a batch, not a frame.
        let mut prefixes = BytesMut::with_capacity(frames.len() * 4);
        for (h, b, t) in frames.iter() {
            prefixes.put_u32((h.len() + b.len() + t.len()) as u32);
        }
        let mut prefixes = prefixes.freeze();
        for (h, b, t) in frames.drain(..) {
            let len = h.len() + b.len() + t.len();
            bytes += len as u64;
            chunks.push(prefixes.split_to(4));
            for c in [h, b, t] {
                if !c.is_empty() {
                    chunks.push(c);
                }
            }
        }
        self.unsent = chunks;
        let r = self.stream.write_all_chunks(&mut self.unsent).await;
        self.unsent.clear();
        match r {
            Ok(()) => {
                self.shared.frames_sent.fetch_add(n, Ordering::Relaxed);
                self.shared.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(SendError {
                frame: Bytes::new(),
                error: e.into(),
            }),
        }
    }

    /// Writes what a dropped write left unwritten (`unsent`), if anything.
    async fn write_unsent(&mut self) -> Result<(), LinkError> {
        self.unsent.retain(|c| !c.is_empty());
        if self.unsent.is_empty() {
            return Ok(());
        }
        let r = self.stream.write_all_chunks(&mut self.unsent).await;
        self.unsent.clear();
        r.map_err(LinkError::from)
    }

    /// Ends the stream after the frames sent: the peer's [`LinkReceiver::recv`] returns
    /// [`LinkError::Finished`] once it has them all.
    pub fn finish(&mut self) -> Result<(), LinkError> {
        self.stream.finish().map_err(|_| LinkError::LocallyClosed)
    }

    /// [`finish`](Self::finish), then waits until the peer has acknowledged every byte of
    /// the stream (QUIC repairs what the path lost meanwhile): closing the link or its
    /// endpoint earlier discards what is still unacknowledged, the last frames first.
    /// Fails if the link is lost or the peer stopped the stream.
    pub async fn finish_delivered(&mut self) -> Result<(), LinkError> {
        self.write_unsent().await?;
        self.finish()?;
        match self.stream.stopped().await {
            Ok(None) => Ok(()),
            Ok(Some(_)) | Err(_) => Err(LinkError::LocallyClosed),
        }
    }

    /// The peer's verified credential.
    pub fn peer(&self) -> &PeerCredential {
        &self.shared.peer
    }

    /// The link's counters.
    pub fn stats(&self) -> LinkStats {
        self.shared.stats()
    }

    /// The peer's address now.
    pub fn remote_address(&self) -> SocketAddr {
        self.shared.conn.remote_address()
    }

    /// Closes the link at once (see [`Link::close`]).
    pub fn close(&self, code: u32, reason: &str) {
        self.shared.conn.close(code.into(), reason.as_bytes());
    }
}

impl LinkReceiver {
    /// The next whole frame, however QUIC cut it. [`LinkError::Finished`] when the peer
    /// ended the stream after a whole frame; a frame announced over the limit closes the
    /// link.
    pub async fn recv(&mut self) -> Result<Bytes, LinkError> {
        self.confirm().await?;
        loop {
            if let Some(frame) = self.take_whole()? {
                return Ok(frame);
            }
            self.fill().await?;
        }
    }

    /// Waits for the next whole frame, as [`recv`](Self::recv), and puts it in `out` with
    /// every other whole frame already received, up to `max` in all: a receiver that
    /// handles frames under a lock takes it once for them all.
    pub async fn recv_batch(&mut self, out: &mut Vec<Bytes>, max: usize) -> Result<(), LinkError> {
        out.push(self.recv().await?);
        while out.len() < max {
            match self.take_whole()? {
                Some(frame) => out.push(frame),
                None => break,
            }
        }
        Ok(())
    }

    /// Waits for the server's preamble on a link from
    /// [`connect_early`](QuicEndpoint::connect_early): it comes once the server accepted
    /// our certificate (a refusal ends the connection instead, and is returned). At once
    /// for any other link, or once confirmed.
    pub async fn confirm(&mut self) -> Result<(), LinkError> {
        while self.preamble_due {
            if self.buf.len() >= PREAMBLE.len() {
                if self.buf[..PREAMBLE.len()] != PREAMBLE {
                    self.shared
                        .conn
                        .close(CLOSE_BAD_PREAMBLE.into(), b"bad preamble");
                    return Err(LinkError::BadPreamble);
                }
                self.buf.advance(PREAMBLE.len());
                self.preamble_due = false;
                break;
            }
            match self.fill().await {
                Err(LinkError::Finished) | Err(LinkError::Truncated) => {
                    return Err(LinkError::Truncated);
                }
                r => r?,
            }
        }
        Ok(())
    }

    /// The first whole frame in the buffer, if there is one.
    fn take_whole(&mut self) -> Result<Option<Bytes>, LinkError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
        if len > self.max_frame {
            self.shared
                .conn
                .close(CLOSE_FRAME_TOO_LARGE.into(), b"frame too large");
            return Err(LinkError::FrameTooLarge {
                len,
                max: self.max_frame,
            });
        }
        if self.buf.len() < 4 + len {
            self.buf.reserve(4 + len - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(4);
        let frame = self.buf.split_to(len).freeze();
        self.shared.frames_received.fetch_add(1, Ordering::Relaxed);
        self.shared
            .bytes_received
            .fetch_add(len as u64, Ordering::Relaxed);
        Ok(Some(frame))
    }

    /// Waits for more of the stream and appends all of it that has arrived to the buffer.
    async fn fill(&mut self) -> Result<(), LinkError> {
        let mut chunks: [Bytes; 16] = Default::default();
        match self.stream.read_chunks(&mut chunks).await? {
            Some(n) => {
                for c in &chunks[..n] {
                    self.buf.extend_from_slice(c);
                }
                Ok(())
            }
            None if self.buf.is_empty() => Err(LinkError::Finished),
            None => Err(LinkError::Truncated),
        }
    }

    /// The peer's verified credential.
    pub fn peer(&self) -> &PeerCredential {
        &self.shared.peer
    }
}

/// A frame given as head, body and tail that was not sent, handed back joined with why.
fn refused(head: &[u8], body: &[u8], tail: &[u8], error: LinkError) -> SendError {
    SendError {
        frame: [head, body, tail].concat().into(),
        error,
    }
}
