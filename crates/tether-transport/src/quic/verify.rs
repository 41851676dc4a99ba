//! Who may be at the other end of a link: the rustls verifiers (one per side) that accept a
//! peer iff its certificate carries a credential of this realm, valid now, not revoked,
//! naming the certificate's key, with a role this side expects.

use std::fmt;
use std::sync::{Arc, RwLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls13_signature_with_raw_key};
use rustls::pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use tether_crypto::{Credential, CredentialError, RevocationList, Role};

use super::cert::{CertParseError, CertView, ED25519_SPKI_PREFIX};

/// The realm's revocation list as links see it: shared by every endpoint and verifier
/// holding a clone, replaceable while they run. A new list applies to every handshake
/// after it is put in place (links already up are not re-checked here: their owner closes
/// them, [`Link::peer`](super::Link::peer) says whose they are).
#[derive(Clone, Default)]
pub struct Revocations(Arc<RwLock<Option<Arc<RevocationList>>>>);

impl fmt::Debug for Revocations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.current() {
            Some(l) => write!(
                f,
                "Revocations(list {}, {} serials)",
                l.serial,
                l.serials.len()
            ),
            None => f.write_str("Revocations(none)"),
        }
    }
}

/// Why a revocation list was not put in place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RevocationsError {
    /// Not signed by the realm's CA (or another realm's).
    #[error("revocation list refused: {0}")]
    Invalid(CredentialError),
    /// Older than the list in place (a lower list serial): it could bring a revoked
    /// credential back.
    #[error("revocation list {offered} is older than list {current} in place")]
    Stale {
        /// The offered list's serial.
        offered: u64,
        /// The serial of the list in place.
        current: u64,
    },
    /// The serial of the list in place, with other contents: the CA signs one list per
    /// serial, so one of them is not what it says.
    #[error("revocation list {0} differs from the list {0} in place")]
    Conflicting(u64),
}

impl Revocations {
    /// No list yet (nothing revoked).
    pub fn new() -> Revocations {
        Revocations::default()
    }

    /// The list in place.
    pub fn current(&self) -> Option<Arc<RevocationList>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `list` in place if the realm's CA (`ca_public`) signed it and it is newer than
    /// the list in place, or that list again (`docs/wire.md#credential`: lists are ordered
    /// by their serial; as a session does with the lists it loads).
    pub fn replace(
        &self,
        ca_public: &[u8; 32],
        list: RevocationList,
    ) -> Result<(), RevocationsError> {
        list.verify(ca_public).map_err(RevocationsError::Invalid)?;
        let mut cur = self.0.write().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cur.as_ref() {
            if list.serial < c.serial {
                return Err(RevocationsError::Stale {
                    offered: list.serial,
                    current: c.serial,
                });
            }
            if list.serial == c.serial && list != **c {
                return Err(RevocationsError::Conflicting(list.serial));
            }
        }
        *cur = Some(Arc::new(list));
        Ok(())
    }
}

/// Which peers an endpoint accepts: credentials of the realm whose CA public key is
/// `ca_public`, not in `revocations`, with one of `roles`.
#[derive(Debug, Clone)]
pub struct PeerPolicy {
    ca_public: [u8; 32],
    revocations: Revocations,
    roles: Vec<Role>,
}

impl PeerPolicy {
    /// Peers of realm `ca_public` with a role in `roles`, checked against `revocations`.
    ///
    /// A router's server accepts `[Role::Member, Role::Router]` (sessions and other
    /// routers); a session's client, and a router dialling another router, accept
    /// `[Role::Router]`.
    pub fn new(ca_public: [u8; 32], revocations: Revocations, roles: &[Role]) -> PeerPolicy {
        PeerPolicy {
            ca_public,
            revocations,
            roles: roles.to_vec(),
        }
    }

    /// The same realm and revocations, other roles.
    pub fn with_roles(&self, roles: &[Role]) -> PeerPolicy {
        PeerPolicy {
            roles: roles.to_vec(),
            ..self.clone()
        }
    }

    /// The realm's CA public key.
    pub fn ca_public(&self) -> [u8; 32] {
        self.ca_public
    }

    /// The revocation list the policy checks against.
    pub fn revocations(&self) -> &Revocations {
        &self.revocations
    }

    /// The roles accepted.
    pub fn roles(&self) -> &[Role] {
        &self.roles
    }

    /// Checks a peer's certificate at `now` (unix seconds): its credential, that the
    /// credential names the certificate's key, and its role.
    pub(crate) fn check(&self, cert: &[u8], now: u64) -> Result<Credential, Refusal> {
        let view = CertView::parse(cert).map_err(Refusal::Certificate)?;
        let cred = Credential::from_bytes(view.credential).map_err(Refusal::Credential)?;
        cred.verify(&self.ca_public, now, self.revocations.current().as_deref())
            .map_err(Refusal::Credential)?;
        if view.public_key != cred.sign_public {
            return Err(Refusal::KeyMismatch {
                name: cred.name,
                serial: cred.serial,
            });
        }
        if !self.roles.contains(&cred.role) {
            return Err(Refusal::WrongRole {
                name: cred.name,
                role: cred.role,
                expected: self.roles.clone(),
            });
        }
        Ok(cred)
    }
}

/// Why a peer's certificate was refused. Its `Display` is the reason the refusing side
/// reports, and the reason phrase of the QUIC close the other side receives (with the TLS
/// alert `certificate_unknown`). Its `Debug` is its `Display` too: rustls shows a
/// verifier's own error with `Debug` in the close reason.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The certificate is not one a tether link presents.
    #[error("bad certificate: {0}")]
    Certificate(CertParseError),
    /// Its credential is malformed, of another realm, expired or not yet valid, revoked,
    /// or its signature does not verify.
    #[error("credential refused: {0}")]
    Credential(CredentialError),
    /// The credential names another key than the certificate's.
    #[error(
        "key mismatch: the certificate's key is not the one credential '{name}' (serial {serial}) names"
    )]
    KeyMismatch {
        /// The credential's name.
        name: String,
        /// Its serial.
        serial: u64,
    },
    /// The credential's role is not one this side accepts.
    #[error(
        "wrong role: '{name}' is a {role}, this side accepts {}",
        roles(expected)
    )]
    WrongRole {
        /// The credential's name.
        name: String,
        /// Its role.
        role: Role,
        /// The roles accepted.
        expected: Vec<Role>,
    },
}

impl fmt::Debug for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

fn roles(r: &[Role]) -> String {
    r.iter()
        .map(|r| format!("{r}s"))
        .collect::<Vec<_>>()
        .join(" and ")
}

impl From<Refusal> for rustls::Error {
    fn from(r: Refusal) -> rustls::Error {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
            Arc::new(r),
        )))
    }
}

/// The TLS 1.3 handshake signature over `message`, by the certificate's key: read by the
/// same parser that found the credential, so the key that signed is the key the
/// credential names; verified with the provider's Ed25519.
fn verify_signature(
    algs: &WebPkiSupportedAlgorithms,
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    if dss.scheme != SignatureScheme::ED25519 {
        return Err(rustls::Error::PeerMisbehaved(
            rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme,
        ));
    }
    let view = CertView::parse(cert).map_err(|e| rustls::Error::from(Refusal::Certificate(e)))?;
    let spki = [&ED25519_SPKI_PREFIX[..], &view.public_key].concat();
    verify_tls13_signature_with_raw_key(message, &SubjectPublicKeyInfoDer::from(spki), dss, algs)
}

fn no_tls12() -> rustls::Error {
    rustls::Error::PeerIncompatible(rustls::PeerIncompatible::Tls12NotOffered)
}

/// The verifier both sides use, as a server (of clients) and as a client (of servers).
#[derive(Debug)]
pub(crate) struct Verifier {
    policy: PeerPolicy,
    algs: WebPkiSupportedAlgorithms,
}

impl Verifier {
    pub(crate) fn new(policy: PeerPolicy) -> Arc<Verifier> {
        Arc::new(Verifier {
            policy,
            algs: rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms,
        })
    }

    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        if !intermediates.is_empty() {
            return Err(Refusal::Certificate(CertParseError::Malformed(
                "a chain (a link presents one self-signed certificate)",
            ))
            .into());
        }
        match self.policy.check(end_entity, now.as_secs()) {
            Ok(c) => {
                tracing::debug!(name = %c.name, serial = c.serial, role = %c.role, "link peer accepted");
                Ok(())
            }
            Err(r) => {
                tracing::info!(reason = %r, "link peer refused");
                Err(r.into())
            }
        }
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The name dialled is not checked: the credential says who the peer is (the caller
        // reads it from the link).
        self.check(end_entity, intermediates, now)
            .map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(no_tls12())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_signature(&self.algs, message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

impl ClientCertVerifier for Verifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity, intermediates, now)
            .map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(no_tls12())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_signature(&self.algs, message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}
