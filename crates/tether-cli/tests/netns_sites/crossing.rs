//! What crosses the cloud router between two sites behind NATs: data both ways, and of a
//! site with an export list, only its exported topics.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tether_testkit::netns::sites::{Site, Sites};

use crate::common::Live;
use crate::common::realm::Realm;
use crate::helpers::{
    Clock, InSites, METRICS_PORT, SITE_PORT, TURN, cloud, cloud_metrics, done, metric, metrics,
    ready, sites, wait_cloud_links,
};

/// Sites A and B, both behind their NATs, meet through the cloud router only: A publishes
/// /a2b to B and B publishes /b2a to A, reliable, every sample delivered; the router saw
/// each site as its NAT's public address.
#[test]
fn two_sites_behind_nat_meet_through_a_cloud_router() {
    const TEST: &str = "two_sites_behind_nat_meet_through_a_cloud_router";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let Some(sites) = sites(TEST, || Sites::builder("tnm").create()) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    let router = realm.cloud_router(&sites, "");
    let (a, b) = (sites.site(Site::A), sites.site(Site::B));
    let n = 20;
    let count = n.to_string();
    let n_s = count.as_str();
    let echo_args = |topic| {
        [
            "echo",
            topic,
            "--count",
            n_s,
            "--reliable",
            "--timeout",
            "40",
        ]
    };
    let at_b = Live::spawn(realm.via_cloud(b, "b", &echo_args("/a2b")));
    let at_a = Live::spawn(realm.via_cloud(a, "a", &echo_args("/b2a")));
    assert!(
        wait_cloud_links(&sites, "session", 2.0, clock.up_to(Duration::from_secs(20))),
        "the echoes never linked: {}",
        router.stderr()
    );
    let pub_args = |topic, what| ["pub", topic, what, "-n", n_s, "-r", "20", "--linger", "20"];
    let from_a = Live::spawn(realm.via_cloud(a, "a", &pub_args("/a2b", "from site A")));
    let from_b = Live::spawn(realm.via_cloud(b, "b", &pub_args("/b2a", "from site B")));
    for (who, p) in [("pub at A", from_a), ("pub at B", from_b)] {
        let p = done(p, &clock);
        assert!(p.ok(), "{who}: {}", p.err);
    }
    for (who, e, want) in [
        ("echo at B", at_b, "from site A\n"),
        ("echo at A", at_a, "from site B\n"),
    ] {
        let e = done(e, &clock);
        assert!(e.ok(), "{who}: {}\nrouter: {}", e.err, router.stderr());
        assert_eq!(e.out, want.repeat(n), "{who}");
    }
    let page = metrics(sites.cloud(), cloud_metrics());
    assert!(
        metric(&page, "tether_router_samples_forwarded_total") >= 2.0 * n as f64,
        "{page}"
    );
    // The cloud saw the NATs, never a site's own address.
    let log = router.stderr();
    for site in Site::ALL {
        assert!(
            log.contains(&format!("at {}:", site.public_addr())),
            "{log}"
        );
        assert!(!log.contains(&site.first_addr().to_string()), "{log}");
    }
    eprintln!("{TEST}: done in {:?}", clock.0.elapsed());
}

/// Site A's router, in site A's namespace, lets only /telemetry leave (its export list);
/// it dials the cloud router through NAT A. Site A publishes /telemetry and /private; site
/// B's members (on the cloud router) get /telemetry and nothing of /private, and the site
/// router counts what it held back.
#[test]
fn only_exported_topics_cross() {
    const TEST: &str = "only_exported_topics_cross";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let Some(sites) = sites(TEST, || Sites::builder("tnx").create()) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    let telemetry = realm.keys(&["topic-id", "realm", "/telemetry"]);
    let (a, b) = (sites.site(Site::A), sites.site(Site::B));
    let cloud_router = realm.cloud_router(&sites, "");
    let site_metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, METRICS_PORT));
    let site_addr = format!("{}:{SITE_PORT}", a.addr());
    let site_router = realm.router(
        a.ns(),
        "site",
        site_metrics,
        &format!(
            "listen = \"{site_addr}\"\nconnect = [\"quic/{}\"]\n\
             [[export]]\nkey = \"{}\"\ndirection = \"out\"",
            cloud(),
            telemetry.trim()
        ),
    );
    assert!(
        wait_cloud_links(&sites, "router", 1.0, clock.up_to(Duration::from_secs(20))),
        "the site router never linked to the cloud across NAT A\nsite: {}\ncloud: {}",
        site_router.stderr(),
        cloud_router.stderr()
    );
    let telemetry_echo = Live::spawn(realm.via_cloud(
        b,
        "b",
        &[
            "echo",
            "/telemetry",
            "--count",
            "5",
            "--reliable",
            "--timeout",
            "30",
        ],
    ));
    // Two readers of /private at site B: a volatile one and a transient-local one (which
    // asks for what the writer holds).
    let private_echoes = [&[][..], &["--transient-local"][..]].map(|extra| {
        let mut args = vec![
            "echo",
            "/private",
            "--count",
            "1",
            "--reliable",
            "--timeout",
            "12",
        ];
        args.extend_from_slice(extra);
        Live::spawn(realm.via_cloud(b, "b", &args))
    });
    assert!(
        wait_cloud_links(&sites, "session", 3.0, clock.up_to(Duration::from_secs(20))),
        "{}",
        cloud_router.stderr()
    );
    // /private goes out at once, matched or not, for longer than /telemetry takes to cross,
    // from a volatile writer and a transient-local one (both reliable, keep-last: neither
    // waits for readers): had anything of it crossed, an echo would print it.
    let private_pubs = [&[][..], &["--transient-local"][..]].map(|extra| {
        let mut args = vec![
            "pub",
            "/private",
            "site secret",
            "-n",
            "40",
            "-r",
            "5",
            "--keep-last",
            "40",
            "--wait-matched",
            "0",
            "--stats",
        ];
        args.extend_from_slice(extra);
        Live::spawn(realm.member(a, "a", &site_addr, &args))
    });
    let telemetry_pub = Live::spawn(realm.member(
        a,
        "a",
        &site_addr,
        &[
            "pub",
            "/telemetry",
            "site data",
            "-n",
            "5",
            "-r",
            "10",
            "--linger",
            "20",
        ],
    ));
    let tp = done(telemetry_pub, &clock);
    assert!(tp.ok(), "pub /telemetry: {}", tp.err);
    let te = done(telemetry_echo, &clock);
    assert!(
        te.ok(),
        "echo /telemetry: {}\nsite: {}",
        te.err,
        site_router.stderr()
    );
    assert_eq!(te.out, "site data\n".repeat(5));
    let page = metrics(a.ns(), site_metrics);
    let denied = metric(
        &page,
        "tether_router_drops_total{router=\"site\",reason=\"export_denied\"}",
    );
    assert!(denied > 0.0, "{page}");
    let [volatile, history] = private_echoes.map(|e| done(e, &clock));
    let pubs = private_pubs.map(|p| done(p, &clock));
    let unicast = |page: &str, name: &str| {
        metric(
            page,
            &format!("tether_router_unicast_forwarded_total{{router=\"{name}\"}}"),
        )
    };
    let why = format!(
        "UNICAST frames forwarded: by the site router {}, by the cloud router {}\n\
         volatile writer: {} (exit {:?})\ntransient-local writer: {} (exit {:?})",
        unicast(&page, "site"),
        unicast(&metrics(sites.cloud(), cloud_metrics()), "cloud"),
        pubs[0]
            .err
            .lines()
            .filter(|l| !l.starts_with(' '))
            .collect::<Vec<_>>()
            .join(" | "),
        pubs[0].code,
        pubs[1]
            .err
            .lines()
            .filter(|l| !l.starts_with(' '))
            .collect::<Vec<_>>()
            .join(" | "),
        pubs[1].code,
    );
    for (reader, e) in [("volatile", &volatile), ("transient-local", &history)] {
        assert!(
            !e.ok() && e.out.is_empty(),
            "/private crossed site A's export list to a {reader} reader at site B: {:?}\n{why}",
            e.out
        );
    }
    eprintln!(
        "{TEST}: export_denied {denied} at the site router; done in {:?}",
        clock.0.elapsed()
    );
}
