//! QUIC links between routers, and between a session and its router: quinn over rustls
//! (aws-lc-rs), mutual TLS 1.3, ALPN `tether/1`, whole frames on one bidirectional stream.
//!
//! # Trust: the credential is the certificate
//!
//! Each side presents one self-signed X.509 certificate, made with rcgen, whose key is the
//! node's Ed25519 identity key (the signing seed of its key bundle) and which carries the
//! node's tether [`Credential`](tether_crypto::Credential) (its binary form,
//! `docs/wire.md#credential`) in a private, non-critical extension, OID
//! [`CREDENTIAL_OID`] (`2.25.9098195606688862146.1`, under the UUID arc: see its docs).
//! Each side's verifier (rustls `ClientCertVerifier` on the server, `ServerCertVerifier` on
//! the client) accepts the peer if and only if:
//!
//! 1. the certificate is one DER certificate with an Ed25519 key and exactly one
//!    credential extension (no chain);
//! 2. the credential verifies under the realm's CA public key, is within its validity at
//!    the handshake's time, and its serial is not in the [`Revocations`] list in place
//!    (replaceable while the endpoint runs);
//! 3. the certificate's SubjectPublicKeyInfo key is the credential's `sign_public`;
//! 4. the credential's role is one the side accepts ([`PeerPolicy`]): a router's server
//!    accepts members and routers, a session requires its server to be a router, a router
//!    dialling a router requires a router;
//!
//! and the TLS 1.3 CertificateVerify signature is checked with the aws-lc-rs provider's
//! Ed25519 over the key read by the same parser that found the credential: the key that
//! signed the handshake is the key the credential names. Nothing else in the certificate
//! (names, dates, issuer, its self-signature) is trusted or needed, and the server name a
//! client dials is not checked: the credential says who the peer is, and a [`Link`]
//! exposes it ([`Link::peer`]).
//!
//! Why not a separate X.509 PKI: a realm has one trust root already, the CA's Ed25519 key
//! that signs credentials, with one revocation list and one notion of expiry, the ones AUTH
//! enforces between members. Putting the credential in the certificate makes the link's
//! mutual TLS check exactly what AUTH checks, with no second CA to run, no second
//! revocation mechanism (CRLs, OCSP) to keep in step, and no certificate that outlives the
//! credential it stands for. The certificate is made afresh from the key bundle at start.
//!
//! TLS session resumption is off on both sides (no tickets, no session cache): every
//! connection presents its certificate and is checked against the revocation list then in
//! place. A list replaced at run time applies to new connections; links already up stay up
//! until their owner closes them (it knows whose they are).
//!
//! A refusal is reported on the refusing side as [`LinkError::PeerRefused`] with the
//! [`Refusal`] in words (wrong realm, expired, revoked, wrong role, key mismatch, bad
//! certificate); the other side gets the TLS alert `certificate_unknown` in a QUIC
//! CONNECTION_CLOSE whose reason phrase says the same, as [`LinkError::RefusedByPeer`].
//!
//! # Frames
//!
//! After the handshake the client opens one bidirectional stream and writes the 4-byte
//! preamble `TQL1`; the server answers with the same, so the client's
//! [`connect`](QuicEndpoint::connect) returns only once the server has accepted its
//! certificate too. Then each side writes frames: `length u32 BE | bytes`, at most
//! [`MAX_FRAME`] bytes (16 MiB + 5: the largest link frame of `tether-routing` with its
//! header). The bytes are opaque here. Sending waits for QUIC flow control
//! (backpressure); a peer announcing a frame over the limit has its link closed.
//!
//! # Liveness and movement
//!
//! Keep-alives every second and an idle timeout of 4 s (both in [`LinkConfig`]) notice a
//! dead peer within a few seconds. A client may move: [`QuicEndpoint::rebind`] puts the
//! endpoint on a new UDP socket and its connections migrate (the server allows migration).
//! [`QuicEndpoint::reconnect`] with a [`Backoff`] (exponential, jittered, bounded) dials
//! again when a link is lost.
//!
//! This module moves frames and decides nothing about them: what a frame means is
//! `tether-routing`'s, when to dial and whom is the driver's.

mod backoff;
mod cert;
mod error;
mod link;
mod stream;
mod verify;

#[cfg(test)]
mod tests;

pub use backoff::Backoff;
pub use cert::{CREDENTIAL_OID, CertParseError, CertificateError};
pub use error::LinkError;
pub use link::{
    ALPN, Congestion, IncomingLink, LinkConfig, LinkIdentity, MAX_FRAME, PeerCredential,
    QuicEndpoint, SendError,
};
pub use stream::{Link, LinkReceiver, LinkSender, LinkStats};
pub use verify::{PeerPolicy, Refusal, Revocations, RevocationsError};
