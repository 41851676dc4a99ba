//! `tether keys`: a realm's CA and secret, credentials with grants, revocation.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use tether::keys::{KeyError, Realm, describe, utc};

use crate::out::outln;

#[derive(Args, Debug)]
pub(crate) struct KeysArgs {
    #[command(subcommand)]
    cmd: KeysCmd,
}

#[derive(Subcommand, Debug)]
enum KeysCmd {
    /// Create a realm in DIR: its CA key pair and its realm secret (files 0600).
    Init {
        /// The realm directory (created if missing).
        dir: PathBuf,
    },
    /// Issue NAME a key pair and a credential signed by the realm's CA, granting the
    /// topic patterns given (`*` one level, `**` any depth). Writes DIR/NAME.key (0600, for
    /// `--keys`) and DIR/NAME.cred.
    ///
    /// With --role router, NAME is a router: its credential (role router) has no grants,
    /// and its DIR/NAME.key holds no realm secret (routers forward sealed data by topic id
    /// and cannot open it; members refuse a router as a peer). Use it with `tether router`.
    /// A replacement (--replace) keeps the role NAME has.
    ///
    /// With --replace, NAME already has a credential: it gets new keys and a credential
    /// under a new serial, and its earlier serials are revoked in the same step (the
    /// revocation list DIR/revoked.toml is re-signed with the next list serial). Sessions
    /// that watch that list (--revocations) drop the old credential while they run; hand
    /// NAME its new DIR/NAME.key.
    Issue {
        /// The realm directory.
        dir: PathBuf,
        /// The participant's name.
        name: String,
        /// Topic patterns NAME may publish (repeatable, or several after one flag); a
        /// leading / is implied, as in topic names.
        #[arg(long = "pub", value_name = "PATTERN", num_args = 1..)]
        publish: Vec<String>,
        /// Topic patterns NAME may subscribe to.
        #[arg(long = "sub", value_name = "PATTERN", num_args = 1..)]
        subscribe: Vec<String>,
        /// Days until it expires.
        #[arg(long, value_name = "DAYS", default_value_t = 365)]
        expires: u64,
        /// What NAME is: a member (a session, with grants) or a router (no grants, no
        /// realm secret).
        #[arg(long, value_enum, default_value_t = RoleArg::Member)]
        role: RoleArg,
        /// Replace NAME's credential: new keys and serial, the old serials revoked.
        #[arg(long)]
        replace: bool,
    },
    /// Revoke NAME's credentials (or one SERIAL) and re-sign the realm's revocation list
    /// (DIR/revoked.toml) with the next list serial. Participants load it with
    /// --revocations, and reload it while they run when it changes; they refuse a list
    /// older than the one they hold.
    Revoke {
        /// The realm directory.
        dir: PathBuf,
        /// A name or a serial number.
        who: String,
    },
    /// Print the routing key of TOPIC in this realm: what routers route it on and what a
    /// router's export list ([[export]] key = "…") names it by. Routers never learn names.
    TopicId {
        /// The realm directory (its realm secret derives the key).
        dir: PathBuf,
        /// The topic (a leading / is implied).
        topic: String,
    },
    /// Print a key file (credential, bundle, revocation list, CA) in plain words. Never
    /// prints a secret.
    Show {
        /// The file.
        file: PathBuf,
    },
}

/// `--role`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum RoleArg {
    /// A session: publishes and subscribes under its grants.
    Member,
    /// A router: relays sealed data between sites over QUIC; no grants.
    Router,
}

pub(crate) fn run(a: KeysArgs) -> anyhow::Result<ExitCode> {
    match a.cmd {
        KeysCmd::TopicId { dir, topic } => {
            let topic = crate::names::topic(&topic).map_err(anyhow::Error::msg)?;
            let r = Realm::open(&dir)?;
            outln!("{}", tether_crypto::to_hex(&r.route_key(&topic)))?;
        }
        KeysCmd::Init { dir } => {
            let r = Realm::init(&dir)?;
            outln!(
                "realm created in {}\nCA public key {}\nissue credentials with: tether keys issue {} NAME --pub PATTERN --sub PATTERN",
                dir.display(),
                tether_crypto::to_hex(&r.ca_public()),
                dir.display()
            )?;
        }
        KeysCmd::Issue {
            dir,
            name,
            publish,
            subscribe,
            expires,
            role,
            replace,
        } => {
            if expires == 0 || expires > 36_500 {
                anyhow::bail!("--expires {expires} is outside 1..=36500 days");
            }
            if role == RoleArg::Router && !(publish.is_empty() && subscribe.is_empty()) {
                anyhow::bail!(
                    "a router's credential carries no grants: leave out --pub and --sub with \
                     --role router (routers forward sealed samples by topic id and cannot \
                     open them)"
                );
            }
            // Topic names are taken from the root (`chatter` is `/chatter`): so are grants,
            // and they follow the names' rules (a grant no name can match grants nothing).
            let patterns = |v: Vec<String>| -> anyhow::Result<Vec<String>> {
                v.iter()
                    .map(|p| crate::names::pattern(p).map_err(anyhow::Error::msg))
                    .collect()
            };
            let (publish, subscribe) = (patterns(publish)?, patterns(subscribe)?);
            let r = Realm::open(&dir)?;
            // What a replacement given grants no longer grants, to say so: the grants given
            // are all it gets (a hint to add one grant must not silently take the others).
            let mut dropped = Vec::new();
            let (c, revoked) = if replace {
                let before = r.grants(&name).ok();
                let c = r.replace(&name, publish, subscribe, expires)?;
                if let Some((_, p, s)) = before {
                    let gone = |old: Vec<String>, new: &[String], flag: &str| {
                        old.into_iter()
                            .filter(|g| !new.contains(g))
                            .map(|g| format!("--{flag} {g}"))
                            .collect::<Vec<_>>()
                    };
                    dropped.extend(gone(p, &c.0.publish, "pub"));
                    dropped.extend(gone(s, &c.0.subscribe, "sub"));
                }
                c
            } else {
                let issued = match role {
                    RoleArg::Router => r.issue_router(&name, expires),
                    RoleArg::Member => r.issue(&name, publish, subscribe, expires),
                };
                let c = issued.map_err(|e| match e {
                    KeyError::Exists(p) => anyhow::anyhow!(
                        "{} exists; refusing to overwrite it (to give {name} a new credential \
                         and revoke its old one: --replace)",
                        p.display()
                    ),
                    e => e.into(),
                })?;
                (c, Vec::new())
            };
            outln!(
                "issued {} serial {}{}, expires {}\nkeys: {}\ncredential: {}",
                c.name,
                c.serial,
                if c.role == tether_crypto::Role::Router {
                    " (role router: no grants, no realm secret)"
                } else {
                    ""
                },
                utc(c.expires),
                dir.join(format!("{name}.key")).display(),
                dir.join(format!("{name}.cred")).display()
            )?;
            if c.role == tether_crypto::Role::Member {
                let show = |g: &[String]| {
                    if g.is_empty() {
                        "nothing".to_string()
                    } else {
                        g.join(" ")
                    }
                };
                outln!(
                    "grants: publish {}; subscribe {}",
                    show(&c.publish),
                    show(&c.subscribe)
                )?;
            }
            if replace {
                outln!(
                    "revoked serial{} {} (revocation list {}: {})",
                    if revoked.len() == 1 { "" } else { "s" },
                    list(&revoked),
                    r.revocations()?.serial,
                    dir.join("revoked.toml").display()
                )?;
            }
            if c.role == tether_crypto::Role::Member
                && c.publish.is_empty()
                && c.subscribe.is_empty()
            {
                eprintln!(
                    "note: {name} has no grants: it is a member of the realm but may neither \
                     publish nor subscribe (give --pub and --sub patterns)"
                );
            }
            if !dropped.is_empty() {
                eprintln!(
                    "note: {name} no longer has {} (a replacement given grants has those \
                     only; give them too to keep them)",
                    dropped.join(", ")
                );
            }
        }
        KeysCmd::Revoke { dir, who } => {
            let r = Realm::open(&dir)?;
            let serials = r.revoke(&who)?;
            outln!(
                "revoked serial{} {}; revocation list {}: {}",
                if serials.len() == 1 { "" } else { "s" },
                list(&serials),
                r.revocations()?.serial,
                dir.join("revoked.toml").display()
            )?;
            eprintln!(
                "note: sessions refuse it once they load this list: run them with \
                 --revocations {} (reloaded while they run), or copy it over the list they load",
                dir.join("revoked.toml").display()
            );
        }
        KeysCmd::Show { file } => crate::out::print(&describe(&file)?)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `1, 2, 3`.
fn list(serials: &[u64]) -> String {
    serials
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
