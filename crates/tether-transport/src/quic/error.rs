//! Why a link could not be made or ended ([`LinkError`]), from what quinn says.

use std::io;

use quinn::ConnectionError;

/// Why a link could not be made, or ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// This side refused the peer's certificate (the reason says why: wrong realm,
    /// expired, revoked, wrong role, key mismatch, bad certificate).
    #[error("peer refused: {reason}")]
    PeerRefused {
        /// The verifier's reason.
        reason: String,
    },
    /// The peer refused this side's certificate (its reason, as its close said it).
    #[error("refused by the peer: {reason}")]
    RefusedByPeer {
        /// The peer's reason.
        reason: String,
    },
    /// The handshake failed otherwise (no common ALPN or cipher suite, a protocol error).
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// Nothing heard from the peer within the idle timeout: it is gone or unreachable.
    #[error("the peer went silent (idle timeout)")]
    TimedOut,
    /// A dial's handshake did not finish in time: no answer came (nothing listens there,
    /// or the path drops it), or too little of one.
    #[error(
        "no answer to the handshake within {0:?} (is it running, and reachable at that address?)"
    )]
    NoAnswer(std::time::Duration),
    /// The peer closed the link.
    #[error("closed by the peer{}", said(*.code, .reason))]
    ClosedByPeer {
        /// Its close code.
        code: u64,
        /// Its reason.
        reason: String,
    },
    /// The peer's application closed the connection before the handshake was done. QUIC
    /// hides an application's reason until then (RFC 9000, section 10.2.3): a router does
    /// this when the handshake outlasts its `limits.handshake_timeout_ms` (a lossy path
    /// slows it) or when it is stopping.
    #[error(
        "the peer gave up the handshake before it was done (a router does when the handshake \
         outlasts its limits.handshake_timeout_ms, as on a lossy path, or when it is stopping)"
    )]
    ClosedInHandshake,
    /// The peer refused the connection at once (QUIC's CONNECTION_REFUSED): a router does
    /// while it stops, and when it is at its limit of links or handshakes.
    #[error(
        "the peer refused the connection at once (a router does while it stops, and when \
         it is at its limits.max_links or max_handshakes)"
    )]
    RefusedAtOnce,
    /// This side closed the link (or its endpoint).
    #[error("closed here")]
    LocallyClosed,
    /// The peer ended the stream: no more frames.
    #[error("the peer ended the link's stream")]
    Finished,
    /// The peer announced a frame longer than the limit; the link was closed.
    #[error("the peer sent a frame of {len} bytes (limit {max}); link closed")]
    FrameTooLarge {
        /// The announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The peer ended the stream inside a frame or the preamble.
    #[error("the peer ended the stream inside a frame")]
    Truncated,
    /// The peer is not a tether link (wrong preamble).
    #[error("not a tether link: bad preamble")]
    BadPreamble,
    /// No address to dial, or the endpoint cannot dial it.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The endpoint could not be set up.
    #[error("endpoint configuration: {0}")]
    Config(String),
    /// A socket error.
    #[error("socket: {0}")]
    Io(String),
    /// The connection was lost otherwise (reset, version mismatch, …).
    #[error("connection lost: {0}")]
    Lost(String),
}

/// A peer's close in words: its reason, and its code when that is not 0 (a plain close);
/// nothing when it gave neither (a dropped connection closes so).
fn said(code: u64, reason: &str) -> String {
    match (code, reason.is_empty()) {
        (0, true) => String::new(),
        (0, false) => format!(": {reason}"),
        (c, true) => format!(" (code {c})"),
        (c, false) => format!(" (code {c}): {reason}"),
    }
}

/// Crypto (TLS alert) close codes are 0x100..0x200 (RFC 9001 section 4.8).
fn is_crypto(code: u64) -> bool {
    (0x100..0x200).contains(&code)
}

/// A verifier's [`Refusal`](super::Refusal) in words, from the reason rustls gives a
/// refused certificate (`invalid peer certificate: Other(OtherError(<refusal>))`); `None` if
/// the reason is not a refused certificate.
fn refusal(reason: &str) -> Option<String> {
    let r = reason.strip_prefix("invalid peer certificate: ")?;
    Some(
        r.strip_prefix("Other(OtherError(")
            .and_then(|r| r.strip_suffix("))"))
            .unwrap_or(r)
            .to_string(),
    )
}

/// The most characters of a peer's text (a close's reason) kept in an error: a keyless
/// peer can close a handshake with any reason.
const PEER_TEXT_MAX: usize = 160;

/// A peer's text, made safe to log and cut at [`PEER_TEXT_MAX`] characters.
fn printable(text: &str) -> String {
    crate::text::printable(text, PEER_TEXT_MAX)
}

impl From<ConnectionError> for LinkError {
    fn from(e: ConnectionError) -> LinkError {
        // Every text below may carry what the peer sent (a close's reason, a certificate's
        // contents in a refusal): all of it is made printable.
        match e {
            ConnectionError::TransportError(t) if is_crypto(u64::from(t.code)) => {
                match refusal(&t.reason) {
                    Some(reason) => LinkError::PeerRefused {
                        reason: printable(&reason),
                    },
                    None => LinkError::Handshake(printable(&t.to_string())),
                }
            }
            ConnectionError::TransportError(t) => LinkError::Lost(printable(&t.to_string())),
            ConnectionError::ConnectionClosed(c) if is_crypto(u64::from(c.error_code)) => {
                let reason = printable(&String::from_utf8_lossy(&c.reason));
                match refusal(&reason) {
                    Some(reason) => LinkError::RefusedByPeer { reason },
                    None => LinkError::Handshake(format!("{}: {reason}", c.error_code)),
                }
            }
            ConnectionError::ConnectionClosed(c)
                if c.error_code == quinn::TransportErrorCode::APPLICATION_ERROR =>
            {
                LinkError::ClosedInHandshake
            }
            ConnectionError::ConnectionClosed(c)
                if c.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED =>
            {
                LinkError::RefusedAtOnce
            }
            ConnectionError::ConnectionClosed(c) => LinkError::Lost(printable(&c.to_string())),
            ConnectionError::ApplicationClosed(a) => LinkError::ClosedByPeer {
                code: a.error_code.into_inner(),
                reason: printable(&String::from_utf8_lossy(&a.reason)),
            },
            ConnectionError::TimedOut => LinkError::TimedOut,
            ConnectionError::LocallyClosed => LinkError::LocallyClosed,
            e => LinkError::Lost(printable(&e.to_string())),
        }
    }
}

impl From<quinn::ReadError> for LinkError {
    fn from(e: quinn::ReadError) -> LinkError {
        match e {
            quinn::ReadError::ConnectionLost(c) => c.into(),
            quinn::ReadError::Reset(code) => LinkError::ClosedByPeer {
                code: code.into_inner(),
                reason: "stream reset".into(),
            },
            quinn::ReadError::ClosedStream => LinkError::LocallyClosed,
            e => LinkError::Lost(printable(&e.to_string())),
        }
    }
}

impl From<quinn::WriteError> for LinkError {
    fn from(e: quinn::WriteError) -> LinkError {
        match e {
            quinn::WriteError::ConnectionLost(c) => c.into(),
            quinn::WriteError::Stopped(code) => LinkError::ClosedByPeer {
                code: code.into_inner(),
                reason: "stream stopped".into(),
            },
            quinn::WriteError::ClosedStream => LinkError::LocallyClosed,
            e => LinkError::Lost(printable(&e.to_string())),
        }
    }
}

pub(super) fn io_err(e: io::Error) -> LinkError {
    LinkError::Io(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::LinkError;

    /// A close says its reason, and its code only when it is not the plain 0; a close with
    /// neither (a dropped connection) says nothing more than that the peer closed.
    #[test]
    fn a_peer_close_says_only_what_it_was_given() {
        let closed = |code, reason: &str| {
            LinkError::ClosedByPeer {
                code,
                reason: reason.into(),
            }
            .to_string()
        };
        assert_eq!(closed(0, ""), "closed by the peer");
        assert_eq!(
            closed(0, "the router is stopping"),
            "closed by the peer: the router is stopping"
        );
        assert_eq!(closed(2, ""), "closed by the peer (code 2)");
        assert_eq!(
            closed(2, "malformed frame"),
            "closed by the peer (code 2): malformed frame"
        );
    }

    /// An application's close before the handshake is done reaches the other side as a
    /// transport close with APPLICATION_ERROR and no reason: said as a handshake given up,
    /// not as quinn's "the application or application protocol caused the connection to
    /// be closed during the handshake".
    #[test]
    fn a_handshake_given_up_by_the_peer_says_so() {
        let closed = |code, reason: &'static [u8]| {
            LinkError::from(quinn::ConnectionError::ConnectionClosed(
                quinn::ConnectionClose {
                    error_code: code,
                    frame_type: None,
                    reason: bytes::Bytes::from_static(reason),
                },
            ))
        };
        let e = closed(quinn::TransportErrorCode::APPLICATION_ERROR, b"");
        assert_eq!(e, LinkError::ClosedInHandshake);
        assert!(e.to_string().contains("handshake_timeout_ms"), "{e}");
        // A refusal at once (a router stopping, or at its limits) says so.
        let e = closed(quinn::TransportErrorCode::CONNECTION_REFUSED, b"");
        assert_eq!(e, LinkError::RefusedAtOnce);
        assert!(e.to_string().contains("while it stops"), "{e}");
        // Other transport closes keep quinn's words.
        let e = closed(quinn::TransportErrorCode::PROTOCOL_VIOLATION, b"bad");
        assert!(matches!(e, LinkError::Lost(_)));
    }
}
