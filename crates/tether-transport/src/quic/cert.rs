//! The link certificate: made with rcgen from the node's Ed25519 identity key, carrying its
//! credential in a private extension; and the strict DER reading the verifiers need (the
//! subject public key and that extension, nothing else).
//!
//! ```text
//! Certificate  SEQUENCE { tbsCertificate, signatureAlgorithm (Ed25519), signature }
//! tbsCertificate SEQUENCE {
//!     [0] version v3, serialNumber = credential serial, signature (Ed25519),
//!     issuer = subject = CN=<credential name>, validity = credential issued .. expires,
//!     subjectPublicKeyInfo = Ed25519 <sign_public>,
//!     [3] extensions { 2.25.9098195606688862146.1 (non-critical):
//!                      OCTET STRING { OCTET STRING <credential, docs/wire.md#credential> } } }
//! ```

use std::time::Duration;

use rcgen::{CertificateParams, CustomExtension, DnType, KeyPair, PKCS_ED25519, SerialNumber};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tether_crypto::{Credential, Identity};

/// The OID of the extension that carries a node's tether credential:
/// `2.25.9098195606688862146.1`.
///
/// `2.25` is the ITU-T X.667 arc where any UUID, written as one integer, names an OID with no
/// registration. tether's UUID is the integer 9098195606688862146 (random, drawn once; its
/// high 64 bits are zero so that rcgen, which encodes arcs as `u64`, can write it), and `.1`
/// under it is the credential extension. Registering an IANA Private Enterprise Number
/// would give a shorter OID; nothing else depends on the value.
pub const CREDENTIAL_OID: &[u64] = &[2, 25, 9_098_195_606_688_862_146, 1];

/// The same OID as its DER content octets (what a certificate carries after tag and length).
const CREDENTIAL_OID_DER: &[u8] = &[
    0x69, // 2.25 = 2 * 40 + 25
    0xFE, 0xA1, 0xD2, 0x96, 0xB3, 0x8D, 0xD6, 0x9F, 0x42, // 9098195606688862146
    0x01, // 1
];

/// DER of an Ed25519 SubjectPublicKeyInfo, before its 32 key bytes (RFC 8410).
pub(crate) const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// DER of a PKCS#8 v1 Ed25519 private key, before its 32-byte seed (RFC 8410).
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// The last second X.509's `GeneralizedTime` can say (9999-12-31 23:59:59 UTC).
const MAX_X509_SECS: u64 = 253_402_300_799;

/// A node's certificate and private key for its links.
pub(crate) struct CertifiedKey {
    pub(crate) cert: CertificateDer<'static>,
    pub(crate) key: PrivateKeyDer<'static>,
}

/// Why a certificate could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateError {
    /// The credential names another Ed25519 key than the identity's.
    #[error("the credential names another key than this identity's (wrong key bundle?)")]
    KeyMismatch,
    /// rcgen refused the parameters.
    #[error("cannot make the link certificate: {0}")]
    Generate(String),
}

/// The self-signed certificate of `identity`, carrying `credential`.
pub(crate) fn make(
    identity: &Identity,
    credential: &Credential,
) -> Result<CertifiedKey, CertificateError> {
    if credential.sign_public != identity.sign_public() {
        return Err(CertificateError::KeyMismatch);
    }
    let pkcs8 = [&ED25519_PKCS8_PREFIX[..], identity.sign_seed()].concat();
    let pkcs8 = PrivatePkcs8KeyDer::from(pkcs8);
    let gen_err = |e: rcgen::Error| CertificateError::Generate(e.to_string());
    let key_pair = KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &PKCS_ED25519).map_err(gen_err)?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, credential.name.as_str());
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + Duration::from_secs(credential.issued.min(MAX_X509_SECS));
    params.not_after = epoch + Duration::from_secs(credential.expires.min(MAX_X509_SECS));
    params.serial_number = Some(SerialNumber::from(credential.serial));
    let mut ext =
        CustomExtension::from_oid_content(CREDENTIAL_OID, octet_string(&credential.to_bytes()));
    ext.set_criticality(false);
    params.custom_extensions.push(ext);
    let cert = params.self_signed(&key_pair).map_err(gen_err)?;
    Ok(CertifiedKey {
        cert: cert.der().clone(),
        key: PrivateKeyDer::Pkcs8(pkcs8),
    })
}

/// DER `OCTET STRING` of `b`.
pub(super) fn octet_string(b: &[u8]) -> Vec<u8> {
    let mut out = vec![0x04];
    let n = b.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let len = (n as u64).to_be_bytes();
        let skip = len.iter().take_while(|x| **x == 0).count();
        out.push(0x80 | (8 - skip) as u8);
        out.extend_from_slice(&len[skip..]);
    }
    out.extend_from_slice(b);
    out
}

/// What the verifiers read from a peer's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CertView<'a> {
    /// The Ed25519 key of its SubjectPublicKeyInfo.
    pub(crate) public_key: [u8; 32],
    /// The credential extension's bytes (not yet parsed as a credential).
    pub(crate) credential: &'a [u8],
}

/// Why a certificate's bytes were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CertParseError {
    /// Not DER of an X.509 v3 certificate (the string names the part).
    Malformed(&'static str),
    /// Its key is not Ed25519.
    NotEd25519,
    /// It carries no tether credential extension.
    NoCredential,
    /// It carries the credential extension twice.
    TwoCredentials,
}

impl std::fmt::Display for CertParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CertParseError::Malformed(what) => write!(f, "not an X.509 certificate ({what})"),
            CertParseError::NotEd25519 => f.write_str("its key is not Ed25519"),
            CertParseError::NoCredential => f.write_str(
                "it carries no tether credential (extension 2.25.9098195606688862146.1)",
            ),
            CertParseError::TwoCredentials => {
                f.write_str("it carries the tether credential extension twice")
            }
        }
    }
}

impl std::error::Error for CertParseError {}

/// A DER reader: tag-length-value, definite lengths in their shortest form only.
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn peek_tag(&self) -> Option<u8> {
        self.0.first().copied()
    }

    /// The next element's tag and contents.
    fn any(&mut self, what: &'static str) -> Result<(u8, &'a [u8]), CertParseError> {
        let bad = CertParseError::Malformed(what);
        let (&tag, rest) = self.0.split_first().ok_or(bad)?;
        if tag & 0x1f == 0x1f {
            return Err(bad); // high tag numbers: nothing in a certificate uses them
        }
        let (&first, mut rest) = rest.split_first().ok_or(bad)?;
        let len = if first < 0x80 {
            first as usize
        } else {
            let n = (first & 0x7f) as usize;
            if n == 0 || n > 4 || rest.len() < n {
                return Err(bad);
            }
            let mut len = 0usize;
            for &b in &rest[..n] {
                len = len << 8 | b as usize;
            }
            // Shortest form only: no leading zero byte, no long form below 128.
            if rest[0] == 0 || len < 0x80 {
                return Err(bad);
            }
            rest = &rest[n..];
            len
        };
        if rest.len() < len {
            return Err(bad);
        }
        let (value, rest) = rest.split_at(len);
        self.0 = rest;
        Ok((tag, value))
    }

    /// The next element, which must have `tag`.
    fn expect(&mut self, tag: u8, what: &'static str) -> Result<&'a [u8], CertParseError> {
        match self.any(what)? {
            (t, v) if t == tag => Ok(v),
            _ => Err(CertParseError::Malformed(what)),
        }
    }

    /// Skips the next element if it has `tag`.
    fn skip_if(&mut self, tag: u8, what: &'static str) -> Result<(), CertParseError> {
        if self.peek_tag() == Some(tag) {
            self.any(what)?;
        }
        Ok(())
    }
}

const SEQUENCE: u8 = 0x30;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;

impl<'a> CertView<'a> {
    /// Reads the subject key and the credential extension of a DER certificate. Nothing
    /// else in it is trusted or used: the handshake proves the key, the credential (checked
    /// by the caller) says who holds it. Bytes after the certificate are refused.
    pub(crate) fn parse(der: &'a [u8]) -> Result<CertView<'a>, CertParseError> {
        let mut outer = Der(der);
        let mut cert = Der(outer.expect(SEQUENCE, "certificate")?);
        if !outer.is_empty() {
            return Err(CertParseError::Malformed("bytes after the certificate"));
        }
        let mut tbs = Der(cert.expect(SEQUENCE, "tbsCertificate")?);
        cert.expect(SEQUENCE, "signatureAlgorithm")?;
        cert.expect(0x03, "signature")?;
        if !cert.is_empty() {
            return Err(CertParseError::Malformed("certificate fields"));
        }
        tbs.skip_if(0xa0, "version")?;
        tbs.expect(0x02, "serialNumber")?;
        tbs.expect(SEQUENCE, "signature")?;
        tbs.expect(SEQUENCE, "issuer")?;
        tbs.expect(SEQUENCE, "validity")?;
        tbs.expect(SEQUENCE, "subject")?;
        let before = tbs.0;
        let spki_body = tbs.expect(SEQUENCE, "subjectPublicKeyInfo")?;
        let spki = &before[..before.len() - tbs.0.len()];
        let public_key = match spki.strip_prefix(&ED25519_SPKI_PREFIX[..]) {
            Some(k) if k.len() == 32 => k.try_into().expect("32 bytes"),
            _ => {
                let _ = spki_body;
                return Err(CertParseError::NotEd25519);
            }
        };
        tbs.skip_if(0x81, "issuerUniqueID")?;
        tbs.skip_if(0x82, "subjectUniqueID")?;
        let mut credential = None;
        if tbs.peek_tag() == Some(0xa3) {
            let mut wrapped = Der(tbs.expect(0xa3, "extensions")?);
            let mut exts = Der(wrapped.expect(SEQUENCE, "extensions")?);
            if !wrapped.is_empty() {
                return Err(CertParseError::Malformed("extensions"));
            }
            while !exts.is_empty() {
                let mut ext = Der(exts.expect(SEQUENCE, "extension")?);
                let oid = ext.expect(OID, "extension id")?;
                ext.skip_if(BOOLEAN, "extension criticality")?;
                let value = ext.expect(OCTET_STRING, "extension value")?;
                if !ext.is_empty() {
                    return Err(CertParseError::Malformed("extension"));
                }
                if oid == CREDENTIAL_OID_DER {
                    if credential.is_some() {
                        return Err(CertParseError::TwoCredentials);
                    }
                    let mut v = Der(value);
                    let c = v.expect(OCTET_STRING, "credential extension")?;
                    if !v.is_empty() {
                        return Err(CertParseError::Malformed("credential extension"));
                    }
                    credential = Some(c);
                }
            }
        }
        if !tbs.is_empty() {
            return Err(CertParseError::Malformed("tbsCertificate fields"));
        }
        Ok(CertView {
            public_key,
            credential: credential.ok_or(CertParseError::NoCredential)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tether_crypto::{CaKey, Role};

    fn credential(ca: &CaKey, id: &Identity, name: &str) -> Credential {
        Credential::issue_with_role(
            ca,
            Role::Router,
            name,
            42,
            1_800_000_000,
            u64::MAX,
            id.sign_public(),
            id.kx_public(),
            vec![],
            vec![],
        )
        .unwrap()
    }

    #[test]
    fn the_oid_constant_is_its_der() {
        // Base-128 of 9098195606688862146, written out by hand above.
        let mut v = 9_098_195_606_688_862_146u64;
        let mut groups = vec![(v & 0x7f) as u8];
        v >>= 7;
        while v > 0 {
            groups.push(0x80 | (v & 0x7f) as u8);
            v >>= 7;
        }
        groups.reverse();
        let want = [&[0x69][..], &groups, &[1]].concat();
        assert_eq!(CREDENTIAL_OID_DER, &want[..]);
    }

    #[test]
    fn a_made_certificate_reads_back() {
        let ca = CaKey::generate();
        let id = Identity::generate();
        let c = credential(&ca, &id, "relay-1");
        let k = make(&id, &c).unwrap();
        let v = CertView::parse(&k.cert).unwrap();
        assert_eq!(v.public_key, id.sign_public());
        assert_eq!(Credential::from_bytes(v.credential).unwrap(), c);
        // A credential for another key is refused.
        let other = Identity::generate();
        assert_eq!(make(&other, &c).err(), Some(CertificateError::KeyMismatch));
        // Trailing bytes, truncation.
        let mut b = k.cert.to_vec();
        b.push(0);
        assert!(CertView::parse(&b).is_err());
        assert!(CertView::parse(&k.cert[..k.cert.len() - 1]).is_err());
    }

    #[test]
    fn a_certificate_without_the_extension_is_refused() {
        let kp = KeyPair::generate_for(&PKCS_ED25519).unwrap();
        let cert = CertificateParams::new(vec!["x.invalid".into()])
            .unwrap()
            .self_signed(&kp)
            .unwrap();
        assert_eq!(
            CertView::parse(cert.der()),
            Err(CertParseError::NoCredential)
        );
        let kp = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = CertificateParams::new(vec!["x.invalid".into()])
            .unwrap()
            .self_signed(&kp)
            .unwrap();
        assert_eq!(CertView::parse(cert.der()), Err(CertParseError::NotEd25519));
    }

    proptest! {
        /// Arbitrary bytes, and a real certificate with a byte changed or cut, never panic.
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..600), at in any::<prop::sample::Index>(), x in any::<u8>()) {
            let _ = CertView::parse(&b);
            let ca = CaKey::from_seed(&[3; 32]).unwrap();
            let id = Identity::from_secrets(&[4; 32], &[5; 32]).unwrap();
            let k = make(&id, &credential(&ca, &id, "n")).unwrap();
            let mut c = k.cert.to_vec();
            let i = at.index(c.len());
            c[i] ^= x;
            let _ = CertView::parse(&c);
            let _ = CertView::parse(&c[..i]);
        }
    }
}
