//! Credentials over time: a peer whose credential expires while it is a member is forgotten
//! as a revoked one is (unmatched, the writers it read moved to a new epoch), and our own
//! credential's expiry is reported (`docs/wire.md#credential`).
//!
//! Credentials expire in whole unix seconds, and [`Security::unix_at`](crate::Security::unix_at)
//! counts in whole seconds: housekeeping looks at most once per [`EXPIRY_CHECK`], so a
//! peer is unmatched within about a second of its expiry, at the cost of one pass over the
//! participant table per second.

use std::time::{Duration, Instant};

use tether_wire::ParticipantId;

use crate::event::{AuthFailure, Event};
use crate::participant::{Participant, after};

/// How often housekeeping looks for expired credentials.
pub(crate) const EXPIRY_CHECK: Duration = Duration::from_secs(1);

/// When credentials are next looked at, and whether our own expiry was reported.
#[derive(Debug, Default)]
pub(crate) struct ExpiryTimer {
    /// The next look (`None`: at the next housekeeping).
    next: Option<Instant>,
    /// Our own credential's expiry was reported.
    own_reported: bool,
}

impl Participant {
    /// From housekeeping, at most once per [`EXPIRY_CHECK`]: verified peers whose credential
    /// has expired lose their authentication and every match (counted in
    /// `credentials_expired`, reported once as [`AuthFailure::Expired`]), as revoked ones
    /// do; and our own credential's expiry is reported once
    /// ([`Event::OwnCredentialExpired`]): peers refuse us from then on.
    pub(crate) fn expire_credentials(&mut self, now: Instant) {
        let Some(sec) = self.cfg.security.as_ref() else {
            return;
        };
        if self.expiry.next.is_some_and(|t| now < t) {
            return;
        }
        self.expiry.next = Some(after(now, EXPIRY_CHECK));
        //= docs/wire.md#credential
        //# A participant looks at least once a second for verified peers whose credential has
        //# expired, and forgets them as it forgets revoked ones
        let unix = sec.unix_at(now);
        let own = (sec.credential.serial, sec.credential.expires);
        let expired: Vec<ParticipantId> = self
            .peers
            .remotes
            .iter()
            .filter(|(_, p)| {
                p.auth
                    .as_ref()
                    .filter(|a| a.verified)
                    .and_then(|a| a.credential.as_ref())
                    .is_some_and(|c| unix >= c.expires)
            })
            .map(|(id, _)| *id)
            .collect();
        if !self.expiry.own_reported && unix >= own.1 {
            self.expiry.own_reported = true;
            self.events.push_back(Event::OwnCredentialExpired {
                serial: own.0,
                expires: own.1,
            });
        }
        self.stats.credentials_expired += expired.len() as u64;
        self.forget_authentication(&expired, AuthFailure::Expired);
    }
}
