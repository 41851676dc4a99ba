//! Authentication and access control in a secure realm, in the simulator: deny by default,
//! match only proven identities whose grants cover the topic.
//!
//! The tests are in `security/`, by topic: authentication and grants, what goes on the
//! wire, sealed samples, sender keys and their epochs, signed modes; `helpers.rs` has what
//! they share.

#[path = "security/helpers.rs"]
mod helpers;

#[path = "security/authentication.rs"]
mod authentication;
#[path = "security/keys.rs"]
mod keys;
#[path = "security/sealing.rs"]
mod sealing;
#[path = "security/signing.rs"]
mod signing;
#[path = "security/wire.rs"]
mod wire;
