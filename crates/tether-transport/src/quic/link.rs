//! Endpoints (a UDP socket with quinn on it) and links (one verified connection, one
//! bidirectional stream of length-prefixed frames).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{TransportConfig, VarInt};
use rustls::pki_types::CertificateDer;
use tether_crypto::{Credential, Identity, Random, Role};

use super::backoff::Backoff;
use super::cert::{self, CertView, CertificateError};
use super::error::{LinkError, io_err};
use super::verify::{PeerPolicy, Verifier};

/// The ALPN protocol of tether links.
pub const ALPN: &[u8] = b"tether/1";

/// The largest frame a link carries: 16 MiB + 5 (a routing frame's 5-byte header and the
/// largest body).
pub const MAX_FRAME: usize = 16 * 1024 * 1024 + 5;

/// What each side writes first on the link's stream (`docs/security.md`).
const PREAMBLE: [u8; 4] = *b"TQL1";

/// Application close code: a frame over the limit.
const CLOSE_FRAME_TOO_LARGE: u32 = 1;
/// Application close code: the preamble is not `TQL1`.
const CLOSE_BAD_PREAMBLE: u32 = 2;

/// A node's certificate for its links, made from its identity and credential.
pub struct LinkIdentity {
    pub(super) cert: CertificateDer<'static>,
    pub(super) key: rustls::pki_types::PrivateKeyDer<'static>,
    pub(super) credential: Credential,
}

impl fmt::Debug for LinkIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkIdentity")
            .field("name", &self.credential.name)
            .field("serial", &self.credential.serial)
            .field("role", &self.credential.role)
            .finish_non_exhaustive()
    }
}

impl LinkIdentity {
    /// The self-signed certificate of `identity`'s Ed25519 key carrying `credential`
    /// (which must name that key).
    pub fn new(identity: &Identity, credential: &Credential) -> Result<Self, CertificateError> {
        let k = cert::make(identity, credential)?;
        Ok(LinkIdentity {
            cert: k.cert,
            key: k.key,
            credential: credential.clone(),
        })
    }

    /// The certificate (DER).
    pub fn certificate(&self) -> &[u8] {
        &self.cert
    }

    /// The credential it carries.
    pub fn credential(&self) -> &Credential {
        &self.credential
    }
}

/// Random 8-byte connection ids that any id validates against (quinn's default hashes them
/// under a per-process key): what a server with a stable reset key needs, so that after a
/// restart it answers the packets of its earlier connections with a stateless reset.
struct RandomCids;

impl quinn::ConnectionIdGenerator for RandomCids {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        let mut b = [0u8; 8];
        tether_crypto::OsRandom.fill(&mut b);
        quinn::ConnectionId::new(&b)
    }

    fn cid_len(&self) -> usize {
        8
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// Timers and limits of an endpoint's links.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    keep_alive: Duration,
    idle_timeout: Duration,
    handshake_timeout: Duration,
    max_frame: usize,
    stream_window: u32,
    /// Where the stateless-reset key comes from (`None`: random per endpoint).
    reset_secret: Option<[u8; 32]>,
}

impl Default for LinkConfig {
    /// Keep-alive 1 s, idle timeout 4 s, handshake timeout 4 s, frames up to
    /// [`MAX_FRAME`], 16 MiB stream window.
    fn default() -> Self {
        LinkConfig {
            keep_alive: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(4),
            handshake_timeout: Duration::from_secs(4),
            max_frame: MAX_FRAME,
            stream_window: 16 << 20,
            reset_secret: None,
        }
    }
}

impl LinkConfig {
    /// How often an idle link sends a keep-alive (less than the idle timeout).
    pub fn keep_alive(&mut self, d: Duration) -> &mut Self {
        self.keep_alive = d;
        self
    }

    /// How long without hearing from the peer before the link is declared dead (the lower
    /// of both sides' values applies).
    pub fn idle_timeout(&mut self, d: Duration) -> &mut Self {
        self.idle_timeout = d;
        self
    }

    /// How long a dial, or a client's handshake at a server, may take (QUIC and TLS, the
    /// link's preamble) before it is given up: separate from the idle timeout, which may be
    /// raised for lossy links while a dial to a router that is down should still be tried
    /// afresh soon (QUIC's own retransmissions of its first packet back off).
    pub fn handshake_timeout(&mut self, d: Duration) -> &mut Self {
        self.handshake_timeout = d;
        self
    }

    /// Takes the endpoint's stateless-reset key from `secret` (a server's, derived from its
    /// identity: `Identity::derived_secret`) instead of drawing it at random: a server that
    /// restarts then answers packets of the connections it had before with a reset its
    /// clients accept, so they notice at their next packet (a keep-alive at most) rather
    /// than after the idle timeout, and dial again at once.
    pub fn reset_secret(&mut self, secret: [u8; 32]) -> &mut Self {
        self.reset_secret = Some(secret);
        self
    }

    fn endpoint(&self) -> quinn::EndpointConfig {
        let Some(secret) = self.reset_secret else {
            return quinn::EndpointConfig::default();
        };
        // The key object quinn's reset tokens take (its `HmacKey` is implemented for it).
        let k = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &secret);
        let mut e = quinn::EndpointConfig::new(Arc::new(k));
        // quinn's default connection ids are hashed under a key drawn per process, and
        // packets with ids that do not validate are dropped before a reset is considered: a
        // restarted server must take any id as possibly its own.
        e.cid_generator(|| Box::new(RandomCids));
        e
    }

    /// The largest frame accepted and sent (at most [`MAX_FRAME`]).
    pub fn max_frame(&mut self, n: usize) -> &mut Self {
        self.max_frame = n.min(MAX_FRAME);
        self
    }

    /// How many bytes the peer may send ahead on the stream (flow control): what a link
    /// can have in flight.
    pub fn stream_window(&mut self, bytes: u32) -> &mut Self {
        self.stream_window = bytes.max(64 * 1024);
        self
    }

    fn transport(&self) -> Result<TransportConfig, LinkError> {
        let mut t = TransportConfig::default();
        let idle = quinn::IdleTimeout::try_from(self.idle_timeout)
            .map_err(|_| LinkError::Config("idle timeout too long".into()))?;
        t.max_idle_timeout(Some(idle))
            .keep_alive_interval(Some(self.keep_alive))
            .max_concurrent_bidi_streams(1u32.into())
            .max_concurrent_uni_streams(0u32.into())
            .stream_receive_window(self.stream_window.into())
            .receive_window(VarInt::from_u32(self.stream_window.saturating_mul(2)))
            .send_window(u64::from(self.stream_window) * 2);
        Ok(t)
    }
}

/// A peer's credential, as its certificate carried it and this side's verifier accepted it
/// during the handshake. Only a link makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCredential(Credential);

impl PeerCredential {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Its serial.
    pub fn serial(&self) -> u64 {
        self.0.serial
    }

    /// Its role.
    pub fn role(&self) -> Role {
        self.0.role
    }

    /// Its realm (the CA's public key).
    pub fn realm(&self) -> [u8; 32] {
        self.0.realm
    }

    /// The whole credential.
    pub fn credential(&self) -> &Credential {
        &self.0
    }
}

/// A UDP socket bound to `bind`. The kernel's default buffers are kept: on loopback,
/// 4 MiB buffers halved a link's throughput (the congestion controller filled them, and
/// the round-trip time grew from 0.1 to 2-4 ms), where the losses of the default ones
/// keep its window in check.
fn udp_socket(bind: SocketAddr) -> io::Result<std::net::UdpSocket> {
    std::net::UdpSocket::bind(bind)
}

/// A frame that was not sent, and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("frame of {} bytes not sent: {error}", frame.len())]
pub struct SendError {
    /// The frame.
    pub frame: Bytes,
    /// Why: the link is gone, or (local misuse) the frame is over the limit
    /// ([`LinkError::FrameTooLarge`]).
    pub error: LinkError,
}

/// A UDP socket with QUIC on it: accepts links (a server) and dials them.
///
/// Made and used inside a tokio runtime (with I/O and time enabled).
#[derive(Debug, Clone)]
pub struct QuicEndpoint {
    inner: quinn::Endpoint,
    cfg: LinkConfig,
}

fn rustls_err(e: rustls::Error) -> LinkError {
    LinkError::Config(e.to_string())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn client_config(
    me: &LinkIdentity,
    servers: PeerPolicy,
    cfg: &LinkConfig,
) -> Result<quinn::ClientConfig, LinkError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(rustls_err)?
        .dangerous()
        .with_custom_certificate_verifier(Verifier::new(servers))
        .with_client_auth_cert(vec![me.cert.clone()], me.key.clone_key())
        .map_err(rustls_err)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    // Every connection shows its certificate and is checked against the list in place.
    tls.resumption = rustls::client::Resumption::disabled();
    tls.enable_early_data = false;
    let q = QuicClientConfig::try_from(tls).map_err(|e| LinkError::Config(e.to_string()))?;
    let mut c = quinn::ClientConfig::new(Arc::new(q));
    c.transport_config(Arc::new(cfg.transport()?));
    Ok(c)
}

fn server_config(
    me: &LinkIdentity,
    clients: PeerPolicy,
    cfg: &LinkConfig,
) -> Result<quinn::ServerConfig, LinkError> {
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(rustls_err)?
        .with_client_cert_verifier(Verifier::new(clients))
        .with_single_cert(vec![me.cert.clone()], me.key.clone_key())
        .map_err(rustls_err)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    tls.send_tls13_tickets = 0;
    tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    tls.max_early_data_size = 0;
    let q = QuicServerConfig::try_from(tls).map_err(|e| LinkError::Config(e.to_string()))?;
    let mut s = quinn::ServerConfig::with_crypto(Arc::new(q));
    s.transport_config(Arc::new(cfg.transport()?));
    s.migration(true);
    Ok(s)
}

impl QuicEndpoint {
    /// A server on `bind`, accepting clients that `clients` accepts, presenting `me`. It
    /// can dial too ([`connect`](Self::connect)): the servers it dials must be routers of
    /// the same realm (`clients` with roles `[Router]`).
    pub fn server(
        bind: SocketAddr,
        me: &LinkIdentity,
        clients: PeerPolicy,
        cfg: &LinkConfig,
    ) -> Result<QuicEndpoint, LinkError> {
        let servers = clients.with_roles(&[Role::Router]);
        let sc = server_config(me, clients, cfg)?;
        let socket = udp_socket(bind).map_err(io_err)?;
        let mut inner = quinn::Endpoint::new(
            cfg.endpoint(),
            Some(sc),
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(io_err)?;
        inner.set_default_client_config(client_config(me, servers, cfg)?);
        Ok(QuicEndpoint {
            inner,
            cfg: cfg.clone(),
        })
    }

    /// A client on `bind` (port 0: any), presenting `me`, dialling servers that `servers`
    /// accepts (a session: roles `[Router]`).
    pub fn client(
        bind: SocketAddr,
        me: &LinkIdentity,
        servers: PeerPolicy,
        cfg: &LinkConfig,
    ) -> Result<QuicEndpoint, LinkError> {
        let mut e = QuicEndpoint::unconfigured_client(bind, cfg)?;
        e.set_client(me, servers)?;
        Ok(e)
    }

    /// A client on `bind` that cannot dial yet: [`set_client`](Self::set_client) says what
    /// it presents and whom it accepts. The socket and QUIC's state are made meanwhile (a
    /// session makes them while it loads its keys: a few hundred microseconds less before
    /// its first dial).
    pub fn unconfigured_client(
        bind: SocketAddr,
        cfg: &LinkConfig,
    ) -> Result<QuicEndpoint, LinkError> {
        let socket = udp_socket(bind).map_err(io_err)?;
        let inner =
            quinn::Endpoint::new(cfg.endpoint(), None, socket, Arc::new(quinn::TokioRuntime))
                .map_err(io_err)?;
        Ok(QuicEndpoint {
            inner,
            cfg: cfg.clone(),
        })
    }

    /// The certificate this endpoint presents when it dials (`me`), and the servers it
    /// accepts (`servers`); replaces what was set before, for the next dials.
    pub fn set_client(&mut self, me: &LinkIdentity, servers: PeerPolicy) -> Result<(), LinkError> {
        self.inner
            .set_default_client_config(client_config(me, servers, &self.cfg)?);
        Ok(())
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Moves the endpoint to `socket` (a new local address, e.g. after the host's address
    /// changed): its connections migrate to it, the server following the client.
    pub fn rebind(&self, socket: std::net::UdpSocket) -> io::Result<()> {
        self.inner.rebind(socket)
    }

    /// Moves the endpoint to a new socket bound to `bind` (port 0: any); returns the new
    /// local address.
    pub fn rebind_to(&self, bind: SocketAddr) -> io::Result<SocketAddr> {
        self.inner.rebind(udp_socket(bind)?)?;
        self.inner.local_addr()
    }

    /// The next client knocking (a server; `None` once the endpoint is closed). Its
    /// handshake runs in [`IncomingLink::establish`], which a server spawns so that one
    /// slow client does not hold up the others.
    pub async fn accept(&self) -> Option<IncomingLink> {
        let incoming = self.inner.accept().await?;
        Some(IncomingLink {
            incoming,
            cfg: self.cfg.clone(),
        })
    }

    /// Dials `addr` (`server_name` is sent in the TLS SNI for the server's logs; identity
    /// is the credential). Returns once both sides accepted each other's certificates and
    /// the link's stream is open.
    pub async fn connect(&self, addr: SocketAddr, server_name: &str) -> Result<Link, LinkError> {
        let mut link = self.connect_early(addr, server_name).await?;
        tokio::time::timeout(self.cfg.handshake_timeout, link.rx.confirm())
            .await
            .map_err(|_| LinkError::TimedOut)??;
        Ok(link)
    }

    /// [`connect`](Self::connect), returning as soon as this side's handshake is done and
    /// the preamble written, one round trip sooner: frames may be sent at once, and reach
    /// the server right after the client's last handshake flight. Whether the server
    /// accepted our certificate is known from its preamble: [`LinkReceiver::confirm`]
    /// waits for it (the first `recv` does too); a refusal that comes before this side
    /// opened its stream fails the dial itself. Frames sent before a refusal are lost with
    /// the link.
    pub async fn connect_early(
        &self,
        addr: SocketAddr,
        server_name: &str,
    ) -> Result<Link, LinkError> {
        let connecting = self
            .inner
            .connect(addr, server_name)
            .map_err(|e| LinkError::Connect(e.to_string()))?;
        let wait = self.cfg.handshake_timeout;
        let dial = async {
            // A dial that hears nothing has not gone silent: it was never answered.
            let conn = connecting.await.map_err(|e| match LinkError::from(e) {
                LinkError::TimedOut => LinkError::NoAnswer(wait),
                e => e,
            })?;
            let peer = peer_credential(&conn)?;
            let (mut send, recv) = conn.open_bi().await?;
            send.write_all(&PREAMBLE).await?;
            Ok::<_, LinkError>((conn, peer, send, recv))
        };
        let (conn, peer, send, recv) = tokio::time::timeout(wait, dial)
            .await
            .map_err(|_| LinkError::NoAnswer(wait))??;
        let mut link = Link::new(conn, peer, send, recv, &self.cfg);
        link.rx.preamble_due = true;
        Ok(link)
    }

    /// [`connect`](Self::connect) until it succeeds, waiting `backoff`'s delays between
    /// attempts (jittered with `rng`); gives up after `max_attempts` if given, returning the
    /// last error. Resets `backoff` on success.
    pub async fn reconnect(
        &self,
        addr: SocketAddr,
        server_name: &str,
        backoff: &mut Backoff,
        rng: &mut (dyn Random + Send),
        max_attempts: Option<u32>,
    ) -> Result<Link, LinkError> {
        let mut tries = 0u32;
        loop {
            match self.connect(addr, server_name).await {
                Ok(l) => {
                    backoff.reset();
                    return Ok(l);
                }
                Err(e) => {
                    tries += 1;
                    if max_attempts.is_some_and(|m| tries >= m) {
                        return Err(e);
                    }
                    let d = backoff.next_delay(rng);
                    tracing::warn!(%addr, error = %e, attempt = tries, retry_in = ?d, "link not made");
                    tokio::time::sleep(d).await;
                }
            }
        }
    }

    /// Closes every connection of the endpoint with `code` and `reason`.
    pub fn close(&self, code: u32, reason: &str) {
        self.inner.close(code.into(), reason.as_bytes());
    }

    /// Waits until every connection has been closed cleanly (after [`close`](Self::close):
    /// the peers learn of it).
    pub async fn wait_idle(&self) {
        self.inner.wait_idle().await;
    }
}

/// The first 4 bytes of the stream; the end of the stream before them is a truncation.
async fn read_preamble(recv: &mut quinn::RecvStream, p: &mut [u8; 4]) -> Result<(), LinkError> {
    match recv.read_exact(p).await {
        Ok(()) => Ok(()),
        Err(quinn::ReadExactError::FinishedEarly(_)) => Err(LinkError::Truncated),
        Err(quinn::ReadExactError::ReadError(e)) => Err(e.into()),
    }
}

fn peer_credential(conn: &quinn::Connection) -> Result<PeerCredential, LinkError> {
    let bad = || LinkError::Handshake("the peer's certificate is not at hand".into());
    let certs = conn
        .peer_identity()
        .and_then(|a| a.downcast::<Vec<CertificateDer<'static>>>().ok())
        .ok_or_else(bad)?;
    let first = certs.first().ok_or_else(bad)?;
    // The verifier accepted this certificate during the handshake: read what it checked.
    let view = CertView::parse(first).map_err(|e| LinkError::Handshake(e.to_string()))?;
    let c =
        Credential::from_bytes(view.credential).map_err(|e| LinkError::Handshake(e.to_string()))?;
    Ok(PeerCredential(c))
}

/// A client whose handshake has begun on a server.
#[derive(Debug)]
pub struct IncomingLink {
    incoming: quinn::Incoming,
    cfg: LinkConfig,
}

impl IncomingLink {
    /// Where it comes from.
    pub fn remote_address(&self) -> SocketAddr {
        self.incoming.remote_address()
    }

    /// Whether the client has proved it receives at its address (it came back with the
    /// token of a [`retry`](Self::retry)).
    pub fn address_validated(&self) -> bool {
        self.incoming.remote_address_validated()
    }

    /// Answers with a stateless Retry (RFC 9000 section 8.1.2): the client must come back
    /// with the token it carries, from its address, before this side keeps any state for it
    /// or does any of the handshake's work; a forger of source addresses never does.
    /// `None` once the Retry is sent; the link handed back if it cannot be retried (it
    /// already was).
    pub fn retry(self) -> Option<IncomingLink> {
        let cfg = self.cfg;
        self.incoming.retry().err().map(|e| IncomingLink {
            incoming: e.into_incoming(),
            cfg,
        })
    }

    /// Refuses the client at once (CONNECTION_REFUSED), keeping nothing of it.
    pub fn refuse(self) {
        self.incoming.refuse();
    }

    /// Completes the handshake (the client's certificate checked) and the preamble.
    pub async fn establish(self) -> Result<Link, LinkError> {
        let conn = self.incoming.await?;
        let peer = peer_credential(&conn)?;
        let opened = async {
            let (mut send, mut recv) = conn.accept_bi().await?;
            let mut p = [0u8; 4];
            read_preamble(&mut recv, &mut p).await?;
            if p != PREAMBLE {
                conn.close(CLOSE_BAD_PREAMBLE.into(), b"bad preamble");
                return Err(LinkError::BadPreamble);
            }
            send.write_all(&PREAMBLE).await?;
            Ok((send, recv))
        };
        let (send, recv) = tokio::time::timeout(self.cfg.handshake_timeout, opened)
            .await
            .map_err(|_| LinkError::TimedOut)??;
        Ok(Link::new(conn, peer, send, recv, &self.cfg))
    }
}

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
    rx: LinkReceiver,
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
    preamble_due: bool,
}

impl Link {
    fn new(
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
            let frame = [&head[..], &body[..], &tail[..]].concat();
            return Err(SendError {
                frame: frame.into(),
                error: LinkError::FrameTooLarge {
                    len,
                    max: self.max_frame,
                },
            });
        }
        if let Err(error) = self.write_unsent().await {
            let frame = [&head[..], &body[..], &tail[..]].concat();
            return Err(SendError {
                frame: frame.into(),
                error,
            });
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
            Err(e) => {
                let frame = [&head[..], &body[..], &tail[..]].concat();
                Err(SendError {
                    frame: frame.into(),
                    error: e.into(),
                })
            }
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
            let frame = [&h[..], &b[..], &t[..]].concat();
            let len = frame.len();
            frames.clear();
            return Err(SendError {
                frame: frame.into(),
                error: LinkError::FrameTooLarge {
                    len,
                    max: self.max_frame,
                },
            });
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
