//! Who the cloud router refuses across NAT: a revoked member, a router of another realm.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tether_testkit::netns::sites::{Site, Sites};

use crate::common::realm::Realm;
use crate::common::{Live, wait_until};
use crate::helpers::{
    Clock, InSites, METRICS_PORT, TURN, cloud, cloud_metrics, done, links, metrics, ready, sites,
    wait_cloud_links,
};

/// Member `c` is revoked and the cloud router reads the revocation list: `c`'s echo at
/// site B never receives and the router says it refused a revoked credential, while `b`'s
/// echo beside it receives site A's samples over the same path.
#[test]
fn a_revoked_member_is_refused_by_the_router_across_nat() {
    const TEST: &str = "a_revoked_member_is_refused_by_the_router_across_nat";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let Some(sites) = sites(TEST, || Sites::builder("tnv").create()) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    realm.keys(&["revoke", "realm", "c"]);
    let (a, b) = (sites.site(Site::A), sites.site(Site::B));
    let router = realm.cloud_router(&sites, "revocations = \"realm/revoked.toml\"");
    let revoked = Live::spawn(realm.via_cloud(
        b,
        "c",
        &[
            "echo",
            "/x",
            "--count",
            "1",
            "--reliable",
            "--timeout",
            "10",
        ],
    ));
    let good = Live::spawn(realm.via_cloud(
        b,
        "b",
        &[
            "echo",
            "/x",
            "--count",
            "3",
            "--reliable",
            "--timeout",
            "30",
        ],
    ));
    assert!(
        wait_cloud_links(&sites, "session", 1.0, clock.up_to(Duration::from_secs(20))),
        "{}",
        router.stderr()
    );
    let _publ = Live::spawn(realm.via_cloud(
        a,
        "a",
        &[
            "pub",
            "/x",
            "for members",
            "-n",
            "60",
            "-r",
            "5",
            "--wait-matched",
            "0",
        ],
    ));
    let g = done(good, &clock);
    assert!(g.ok(), "b's echo: {}\nrouter: {}", g.err, router.stderr());
    assert_eq!(g.out, "for members\n".repeat(3));
    let r = done(revoked, &clock);
    assert!(
        !r.ok() && r.out.is_empty(),
        "a revoked member got through: {}",
        r.out
    );
    assert!(
        wait_until(clock.up_to(Duration::from_secs(5)), || router
            .stderr()
            .contains("revoked")),
        "{}",
        router.stderr()
    );
    eprintln!(
        "{TEST}: router: {}; done in {:?}",
        router
            .stderr()
            .lines()
            .filter(|l| l.contains("revoked"))
            .take(2)
            .collect::<Vec<_>>()
            .join(" | "),
        clock.0.elapsed()
    );
}

/// A router of another realm, at site A, dials the cloud router through NAT A: its
/// certificate is not the realm's, so the cloud refuses it and never links it.
#[test]
fn a_router_of_another_realm_cannot_join_across_nat() {
    const TEST: &str = "a_router_of_another_realm_cannot_join_across_nat";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let Some(sites) = sites(TEST, || Sites::builder("tnf").create()) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    let other = Realm::new(&["a", "b", "c"]);
    let router = realm.cloud_router(&sites, "");
    let foreign = other.router(
        sites.site(Site::A).ns(),
        "site",
        SocketAddr::from((Ipv4Addr::LOCALHOST, METRICS_PORT)),
        &format!("connect = [\"quic/{}\"]", cloud()),
    );
    assert!(
        wait_until(clock.up_to(Duration::from_secs(15)), || {
            let log = router.stderr();
            log.contains(&format!("link from {}:", Site::A.public_addr()))
                && log.contains("refused")
                && log.contains("another realm")
        }),
        "cloud: {}\nforeign: {}",
        router.stderr(),
        foreign.stderr()
    );
    assert_eq!(
        links(&metrics(sites.cloud(), cloud_metrics()), "cloud", "router"),
        0.0,
        "{}",
        router.stderr()
    );
    eprintln!(
        "{TEST}: cloud: {}; done in {:?}",
        router
            .stderr()
            .lines()
            .find(|l| l.contains("refused"))
            .unwrap_or(""),
        clock.0.elapsed()
    );
}
