//! The prefix of a datagram sealed for one peer (`docs/wire.md#sealed`), written before the
//! sealed bytes exist: the sender seals in place behind it, and the prefix is the AEAD's
//! associated data.

use crate::{
    DatagramBuilder, Error, HEADER_LEN, Header, MAX_BODY_LEN, ParticipantId, SEALED_FIXED_LEN,
    SUBMESSAGE_HEADER_LEN, SubmessageKind,
};

/// Bytes before the sealed bytes of a pairwise-sealed datagram: header, SEALED submessage
/// header, `to` and `counter`.
pub const SEALED_PREFIX_LEN: usize = HEADER_LEN + SUBMESSAGE_HEADER_LEN + SEALED_FIXED_LEN;

/// Clears `out` and writes the prefix of a datagram from `header` sealed for `to` under
/// `counter`, whose sealed bytes (ciphertext and tag) will be `sealed_len` long. The caller
/// appends them; the datagram then parses as one [`SealedRepr`](crate::SealedRepr).
pub fn encode_sealed_prefix(
    out: &mut Vec<u8>,
    header: Header,
    to: ParticipantId,
    counter: u64,
    sealed_len: usize,
) -> Result<(), Error> {
    let body = SEALED_FIXED_LEN + sealed_len;
    if counter == 0 || sealed_len < 16 || body > MAX_BODY_LEN {
        return Err(Error::BadLength);
    }
    DatagramBuilder::new(out, header);
    out.push(SubmessageKind::Sealed as u8);
    out.push(0);
    out.extend_from_slice(&(body as u16).to_le_bytes());
    out.extend_from_slice(&to.0.to_le_bytes());
    out.extend_from_slice(&counter.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Datagram, SealedRepr, Submessage};

    #[test]
    fn a_prefix_and_its_sealed_bytes_parse_as_one_sealed_submessage() {
        let hdr = Header {
            domain: 7,
            participant: ParticipantId(0x1234),
        };
        let sealed = [0xAB; 40];
        let mut v = Vec::new();
        encode_sealed_prefix(&mut v, hdr, ParticipantId(99), 5, sealed.len()).unwrap();
        assert_eq!(v.len(), SEALED_PREFIX_LEN);
        v.extend_from_slice(&sealed);
        let d = Datagram::parse(&v).unwrap();
        assert_eq!(d.header(), hdr);
        let m: Vec<_> = d.submessages().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            m,
            vec![Submessage::Sealed(SealedRepr {
                to: ParticipantId(99),
                counter: 5,
                sealed: &sealed
            })]
        );
        assert_eq!(
            encode_sealed_prefix(&mut v, hdr, ParticipantId(99), 0, 40),
            Err(Error::BadLength),
            "counter 0 is never sent"
        );
        assert_eq!(
            encode_sealed_prefix(&mut v, hdr, ParticipantId(99), 1, MAX_BODY_LEN),
            Err(Error::BadLength),
            "too long for a submessage"
        );
    }
}
