//! `tether router --config router.toml`: a router for a site or the cloud
//! ([`tether_router`]); `--check` validates the configuration and the keys it names
//! without starting anything.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

/// `tether router`.
#[derive(Args, Debug)]
pub(crate) struct RouterArgs {
    /// Check router.toml (given with --config) and the keys and revocation list it names,
    /// say what the router would do, and exit: 0 if it would start, 2 if not.
    #[arg(long)]
    check: bool,
}

pub(crate) fn run(config: Option<PathBuf>, a: RouterArgs) -> anyhow::Result<ExitCode> {
    let path = config.context(
        "a router needs its configuration: tether router --config router.toml \
         (see docs/routing.md for an example)",
    )?;
    let mut cfg = tether_router::RouterConfig::load(&path)?;
    let keys = tether::keys::RouterKeys::load(&cfg.keys)?;
    if cfg.name.is_empty() {
        cfg.name = keys.credential.name.clone();
    }
    let revocations = cfg
        .revocations
        .as_ref()
        .map(|p| tether::keys::load_revocations(p, &keys.ca_public))
        .transpose()?;
    keys.credential
        .verify(
            &keys.ca_public,
            tether::keys::unix_now(),
            revocations.as_ref(),
        )
        .context("the router's own credential")?;
    if a.check {
        println!("{}: ok", path.display());
        println!(
            "  router '{}' (credential '{}', serial {}, expires {}), domain {}",
            cfg.name,
            keys.credential.name,
            keys.credential.serial,
            tether::keys::utc(keys.credential.expires),
            cfg.domain
        );
        match cfg.listen {
            Some(l) => println!("  listens on quic/{l} for sessions and routers"),
            None => println!("  listens on nothing (dials only)"),
        }
        for c in &cfg.connect {
            println!("  dials quic/{c}");
        }
        if let Some(m) = cfg.metrics {
            println!("  metrics at http://{m}/metrics");
        }
        println!(
            "  congestion control {} on its side of every link",
            cfg.congestion
        );
        match (&cfg.revocations, &revocations) {
            (Some(p), Some(l)) => println!(
                "  revocation list {} (serial {}, {} credential(s) revoked): links of revoked credentials are refused",
                p.display(),
                l.serial,
                l.serials.len()
            ),
            _ => println!("  no revocation list: revoked credentials are not refused here"),
        }
        match &cfg.export {
            None => println!("  no export list: every topic crosses"),
            Some(rules) => {
                println!(
                    "  export list: {} topic key(s) may cross; nothing else does",
                    rules.len()
                );
                for r in rules {
                    let key = tether_crypto::to_hex(&r.key);
                    let way = match r.direction {
                        tether_router::Direction::Out => "out of the site",
                        tether_router::Direction::In => "into the site",
                        tether_router::Direction::Both => "both ways",
                    };
                    println!("    {key}: {way}");
                }
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let stop = crate::interrupt::Interrupt::catch()?;
    // One thread: a frame is received, routed and sent again without waking another
    // thread (the router's state is behind one lock anyway). On two vCPUs this halved a
    // hop's latency (bench wan, 64 B RTT through one router: 266 µs with two worker
    // threads, 134 µs with one) for the same throughput.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the router's runtime")?;
    rt.block_on(tether_router::run(cfg, async move {
        while stop.caught().is_none() {
            tokio::time::sleep(crate::interrupt::TICK).await;
        }
    }))?;
    Ok(ExitCode::SUCCESS)
}
