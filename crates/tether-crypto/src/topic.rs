//! Topic identifiers: 256 bits, HMAC-SHA-256 under the realm secret over the canonical
//! topic metadata. Members derive the same id; outsiders cannot map an id back to a name.

use std::fmt;

use aws_lc_rs::{digest, hmac};

use crate::RealmSecret;

/// A topic's 256-bit identifier.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicId(pub [u8; 32]);

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({self})")
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::to_hex(&self.0))
    }
}

impl TopicId {
    /// The id of topic `name` with type `type_name`, optionally scoped to a site or another
    /// unique string, in the realm of `secret`. The input is canonical: each field is
    /// length-prefixed, so no two different topics encode alike.
    pub fn derive(secret: &RealmSecret, name: &str, type_name: &str, scope: &str) -> TopicId {
        let key = hmac::Key::new(hmac::HMAC_SHA256, secret.0.as_slice());
        let mut ctx = hmac::Context::with_key(&key);
        tether_wire::topic_id_input(name, type_name, scope, |piece| ctx.update(piece));
        let tag = ctx.sign();
        TopicId(tag.as_ref().try_into().expect("HMAC-SHA-256 is 32 bytes"))
    }

    /// The id of a topic outside any realm (security off): SHA-256 over the same canonical
    /// input as [`derive`](Self::derive). Anyone can compute it from the name, so it hides
    /// nothing; it gives routers the same 256-bit key space with and without security, and
    /// never equals a realm's id of the same topic.
    pub fn plain(name: &str, type_name: &str, scope: &str) -> TopicId {
        let mut ctx = digest::Context::new(&digest::SHA256);
        tether_wire::topic_id_input(name, type_name, scope, |piece| ctx.update(piece));
        let d = ctx.finish();
        TopicId(d.as_ref().try_into().expect("SHA-256 is 32 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_for_members_distinct_otherwise() {
        let s = RealmSecret::from_bytes([7; 32]);
        let a = TopicId::derive(&s, "/cmd_vel", "geometry_msgs/Twist", "");
        assert_eq!(
            a,
            TopicId::derive(&s, "/cmd_vel", "geometry_msgs/Twist", "")
        );
        assert_ne!(a, TopicId::derive(&s, "/cmd_vel", "std_msgs/String", ""));
        assert_ne!(
            a,
            TopicId::derive(&s, "/cmd_vel", "geometry_msgs/Twist", "site2")
        );
        // Length prefixes: moving a character between fields changes the id.
        assert_ne!(
            TopicId::derive(&s, "/ab", "c", ""),
            TopicId::derive(&s, "/a", "bc", "")
        );
        // Another realm's secret gives another id.
        let other = RealmSecret::from_bytes([8; 32]);
        assert_ne!(
            a,
            TopicId::derive(&other, "/cmd_vel", "geometry_msgs/Twist", "")
        );
        assert_eq!(a.to_string().len(), 64);
    }

    #[test]
    fn plain_ids_are_sha256_of_the_canonical_input() {
        let mut input = Vec::new();
        tether_wire::topic_id_input("/chatter", "", "", |p| input.extend_from_slice(p));
        let want = digest::digest(&digest::SHA256, &input);
        let id = TopicId::plain("/chatter", "", "");
        assert_eq!(&id.0[..], want.as_ref());
        assert_ne!(id, TopicId::plain("/chatter", "t", ""));
        let s = RealmSecret::from_bytes([7; 32]);
        assert_ne!(id, TopicId::derive(&s, "/chatter", "", ""));
    }

    /// RFC 4231 test case 2, so the provider's HMAC-SHA-256 is checked too.
    #[test]
    fn hmac_known_answer() {
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"Jefe");
        let tag = hmac::sign(&key, b"what do ya want for nothing?");
        assert_eq!(
            crate::to_hex(tag.as_ref()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
