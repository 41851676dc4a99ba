//! Endpoints (a UDP socket with quinn on it) and how links are made (a verified connection,
//! its preamble); the link itself, a stream of length-prefixed frames, is in `stream.rs`.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{TransportConfig, VarInt};
use rustls::pki_types::CertificateDer;
use tether_crypto::{Credential, Identity, Random, Role};

use super::backoff::Backoff;
use super::cert::{self, CertView, CertificateError};
use super::error::{LinkError, io_err};
use super::stream::Link;
use super::verify::{PeerPolicy, Verifier};

/// The ALPN protocol of tether links.
pub const ALPN: &[u8] = b"tether/1";

/// The largest frame a link carries: 16 MiB + 5 (a routing frame's 5-byte header and the
/// largest body).
pub const MAX_FRAME: usize = 16 * 1024 * 1024 + 5;

/// What each side writes first on the link's stream (`docs/security.md`).
pub(super) const PREAMBLE: [u8; 4] = *b"TQL1";

/// Application close code: a frame over the limit.
pub(super) const CLOSE_FRAME_TOO_LARGE: u32 = 1;
/// Application close code: the preamble is not `TQL1`.
pub(super) const CLOSE_BAD_PREAMBLE: u32 = 2;

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

/// A link's congestion controller: how fast it sends into a path that loses packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Congestion {
    /// CUBIC (RFC 9438; quinn's default): a lost packet is taken as congestion and the
    /// rate halves. Fastest on clean paths (loopback, wired LANs).
    #[default]
    Cubic,
    /// BBR: the rate follows the bandwidth and round trip measured, and loss alone does
    /// not slow it. On a path losing 20 % of its frames it kept up with 5 MB/s where
    /// CUBIC, halving at every loss, carried a third to a quarter of that.
    Bbr,
}

impl fmt::Display for Congestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Congestion::Cubic => "cubic",
            Congestion::Bbr => "bbr",
        })
    }
}

impl std::str::FromStr for Congestion {
    type Err = String;

    /// `cubic` or `bbr`.
    fn from_str(s: &str) -> Result<Congestion, String> {
        match s {
            "cubic" => Ok(Congestion::Cubic),
            "bbr" => Ok(Congestion::Bbr),
            _ => Err(format!(
                "'{s}' is not a congestion controller: cubic or bbr"
            )),
        }
    }
}

/// Timers and limits of an endpoint's links.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    keep_alive: Duration,
    idle_timeout: Duration,
    handshake_timeout: Duration,
    pub(super) max_frame: usize,
    stream_window: u32,
    congestion: Congestion,
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
            congestion: Congestion::default(),
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

    /// The congestion controller of the links' sending side ([`Congestion`]).
    pub fn congestion(&mut self, c: Congestion) -> &mut Self {
        self.congestion = c;
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
        match self.congestion {
            Congestion::Cubic => {
                t.congestion_controller_factory(
                    Arc::new(quinn::congestion::CubicConfig::default()),
                );
            }
            Congestion::Bbr => {
                t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()));
            }
        }
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
