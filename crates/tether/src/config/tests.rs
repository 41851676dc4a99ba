use super::*;

#[test]
fn empty_is_default() {
    assert_eq!(Config::from_toml("").unwrap(), Config::default());
}

#[test]
fn full_example_parses() {
    let text = include_str!("mod.rs")
        .lines()
        .skip_while(|l| !l.starts_with("//! ```toml"))
        .skip(1)
        .take_while(|l| !l.starts_with("//! ```"))
        .map(|l| l.trim_start_matches("//!").trim_start())
        .collect::<Vec<_>>()
        .join("\n");
    let c = Config::from_toml(&text).unwrap();
    assert_eq!(c.name, "robot1");
    assert_eq!(c.discovery.peers.len(), 1);
    let f = c.flow_controller_specs().unwrap();
    assert_eq!(f[0].0, "bulk");
    assert_eq!(f[0].1.bytes_per_second(), Some(10e6));
    assert_eq!(f[1].0, "paper");
    assert_eq!(f[1].1.bytes_per_second(), Some(10.0 * 8192.0 * 100.0));
}

/// The limits on what a peer may make us store are taken within what the wire allows.
#[test]
fn peer_limits_are_checked() {
    let c =
        Config::from_toml("[discovery]\nmax_partitions = 0\nmax_string_bytes = 65535\n").unwrap();
    assert_eq!(
        (c.discovery.max_partitions, c.discovery.max_string_bytes),
        (0, 65535)
    );
    for (t, field) in [
        ("max_partitions = 17", "discovery.max_partitions"),
        ("max_string_bytes = 0", "discovery.max_string_bytes"),
        ("max_string_bytes = 64", "discovery.max_string_bytes"),
        ("max_string_bytes = 65536", "discovery.max_string_bytes"),
        (
            "max_endpoints_per_participant = 0",
            "discovery.max_endpoints_per_participant",
        ),
        (
            "max_peer_metadata_bytes = 10",
            "discovery.max_peer_metadata_bytes",
        ),
    ] {
        let e = Config::from_toml(&format!("[discovery]\n{t}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{e}");
    }
    // Reassembly budgets below the largest sample would refuse it silently.
    for t in [
        "max_reassembly_bytes_per_writer = 100000",
        "max_reassembly_bytes = 0",
    ] {
        let e = Config::from_toml(&format!("[transport]\nmax_sample_size = 200000\n{t}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_sample_size"), "{e}");
    }
    // Keys may come from --keys after the file: a mode without them loads.
    assert!(Config::from_toml("[security]\nmode = \"encrypt+sign\"\n").is_ok());
}

#[test]
fn flow_controllers_are_checked() {
    let f = |t: &str| Config::from_toml(&format!("[flow_controllers.x]\n{t}\n"));
    assert!(f("rate = \"unlimited\"").is_ok());
    assert!(f("tokens_per_period = \"unlimited\"").is_ok());
    let r = f("rate = \"512KiB/s\"")
        .unwrap()
        .flow_controller_specs()
        .unwrap()[0]
        .1
        .bytes_per_second()
        .unwrap();
    assert!((r / (512.0 * 1024.0) - 1.0).abs() < 1e-4, "{r}");
    for (bad, says) in [
        ("rate = \"fast\"", "bad rate"),
        ("", "give rate or tokens_per_period"),
        ("rate = \"1MB/s\"\ntokens_per_period = 3", "not both"),
        (
            "tokens_per_period = 3\nbytes_per_token = 0",
            "bytes_per_token",
        ),
        ("tokens_per_period = 3\nperiod_ms = 0", "period_ms"),
        ("tokens_per_period = 3\nmax_tokens = 0", "max_tokens"),
        (
            "rate = \"10B/s\"\nbytes_per_token = 1000",
            "less than one token",
        ),
        ("tokens_per_period = \"lots\"", "line"),
        ("tokens = 3", "tokens"),
    ] {
        let e = f(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad:?}: {e}");
    }
}

#[test]
fn unknown_key_names_key_and_line() {
    let e = Config::from_toml("domain = 1\n\n[discovery]\nmulticastt = true\n").unwrap_err();
    let m = e.to_string();
    assert!(m.contains("multicastt"), "{m}");
    assert!(m.contains("line 4"), "{m}");
}

#[test]
fn wrong_type_names_key_and_line() {
    let e = Config::from_toml("name = \"x\"\ndomain = \"zero\"\n").unwrap_err();
    let m = e.to_string();
    assert!(m.contains("line 2"), "{m}");
    assert!(m.contains("domain") || m.contains("invalid type"), "{m}");
    let e = Config::from_toml("[transport]\nbusy_poll = 3\n").unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
}

#[test]
fn security_words_are_typed() {
    let c = Config::from_toml(
        "[security]\nkeys = \"k\"\nmode = \"encrypt+sign\"\nsuite = \"aes256-gcm\"\n\
         [security.topics]\n\"/a/**\" = \"sign\"\n\"/b\" = \"off\"\n",
    )
    .unwrap();
    assert_eq!(c.security.mode, Some(SecurityMode::EncryptSign));
    assert_eq!(c.security.suite, SuiteChoice::Aes256Gcm);
    assert_eq!(c.security.topics["/a/**"], SecurityMode::Sign);
    assert_eq!(c.security.topics["/b"], SecurityMode::Off);
    assert_eq!(Config::default().security.suite, SuiteChoice::Auto);
    for m in SecurityMode::ALL {
        assert_eq!(m.name().parse::<SecurityMode>(), Ok(m));
    }
    for s in SuiteChoice::ALL {
        assert_eq!(s.name().parse::<SuiteChoice>(), Ok(s));
    }
    for (text, says) in [
        (
            "[security]\nmode = \"sometimes\"\n",
            "unknown mode 'sometimes' (expected off, encrypt, sign or encrypt+sign)",
        ),
        (
            "[security]\nkeys = \"k\"\nsuite = \"des\"\n",
            "unknown suite 'des' (expected auto, aes128-gcm, aes256-gcm or chacha20-poly1305)",
        ),
        (
            "[security]\nkeys = \"k\"\n[security.topics]\n\"/a\" = \"loud\"\n",
            "unknown mode 'loud'",
        ),
        ("[security]\nmode = 3\n", "line 2"),
    ] {
        let e = Config::from_toml(text).unwrap_err().to_string();
        assert!(e.contains(says), "{text:?}: {e}");
        assert!(e.contains("line"), "{text:?}: {e}");
    }
}

#[test]
fn bad_values_are_errors() {
    assert!(Config::from_toml("[transport]\nmax_datagram = 10\n").is_err());
    assert!(Config::from_toml("[discovery]\nmulticast_group = \"10.0.0.1\"\n").is_err());
    assert!(Config::from_toml("[transport]\nmulticast_data = true\n").is_ok());
    assert!(
        Config::from_toml("[transport]\nmulticast_data = true\n[discovery]\nmulticast = true\n")
            .is_ok()
    );
    assert!(Config::from_toml("[discovery]\nlease_ms = 1\n").is_err());
    let e = Config::from_toml("[reliability]\nheartbeat_period_ms = 18446744073709551615\n")
        .unwrap_err();
    assert!(e.to_string().contains("heartbeat_period_ms"), "{e}");
    assert!(Config::from_toml("[reliability]\nmax_blocking_time_ms = 0\n").is_err());
    let e = Config::from_toml("[routers]\nidle_timeout_ms = 1999\n").unwrap_err();
    assert!(e.to_string().contains("routers.idle_timeout_ms"), "{e}");
    let c = Config::from_toml("[routers]\nidle_timeout_ms = 9000\n").unwrap();
    assert_eq!(c.routers.idle_timeout_ms, 9000);
    assert_eq!(c.routers.congestion, "cubic");
    let e = Config::from_toml("[routers]\ncongestion = \"reno\"\n").unwrap_err();
    assert!(
        e.to_string().contains("routers.congestion") && e.to_string().contains("cubic or bbr"),
        "{e}"
    );
    let c = Config::from_toml("[routers]\ncongestion = \"bbr\"\n").unwrap();
    assert_eq!(c.routers.congestion, "bbr");
}

/// The range decides the registry, multicast and the address listened on; explicit keys
/// win unless they contradict it.
#[test]
fn discovery_ranges() {
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let c = Config::default();
    assert_eq!(c.discovery.range, DiscoveryRange::Subnet);
    assert!(c.discovery.uses_registry() && c.discovery.uses_multicast());
    assert_eq!(c.listen_addr(), any, "reachable from the LAN by default");
    let c = Config::from_toml("[discovery]\nrange = \"localhost\"\n").unwrap();
    assert!(c.discovery.uses_registry() && !c.discovery.uses_multicast());
    assert_eq!(c.listen_addr(), lo);
    let c = Config::from_toml("[discovery]\nrange = \"localhost\"\npeers = [\"192.0.2.1:7411\"]\n")
        .unwrap();
    assert_eq!(c.listen_addr(), any, "static peers elsewhere must reach it");
    let c = Config::from_toml("[discovery]\nrange = \"OFF\"\n").unwrap();
    assert!(!c.discovery.uses_registry() && !c.discovery.uses_multicast());
    assert_eq!(c.listen_addr(), any);
    let c = Config::from_toml("[discovery]\nmulticast = false\n").unwrap();
    assert!(c.discovery.uses_registry() && !c.discovery.uses_multicast());
    let c = Config::from_toml("[transport]\nlisten = \"10.0.0.1:7411\"\n").unwrap();
    assert_eq!(c.listen_addr(), "10.0.0.1:7411".parse().unwrap());
    for (text, says) in [
        (
            "range = \"localhost\"\nmulticast = true",
            "discovery.multicast: true contradicts range = \"localhost\"",
        ),
        ("range = \"off\"\nregistry = true", "discovery.registry"),
        (
            "range = \"lan\"",
            "unknown discovery range 'lan' (expected subnet, localhost or off)",
        ),
    ] {
        let e = Config::from_toml(&format!("[discovery]\n{text}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{text:?}: {e}");
    }
}

/// The environment overrides the file; a range from it replaces the file's registry and
/// multicast keys; bad values are errors naming the variable.
#[test]
fn environment_overrides() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let mut c =
        Config::from_toml("domain = 3\n[discovery]\nmulticast = true\npeers = [\"192.0.2.9:1\"]\n")
            .unwrap();
    c.apply_vars(vars(&[
        ("TETHER_DOMAIN", " 42 "),
        ("TETHER_DISCOVERY", "localhost"),
        ("TETHER_PEERS", "192.0.2.10:7411, 127.0.0.1:7412,"),
    ]))
    .unwrap();
    assert_eq!(c.domain, 42);
    assert_eq!(c.discovery.range, DiscoveryRange::Localhost);
    assert!(
        !c.discovery.uses_multicast(),
        "the file's multicast = true is replaced"
    );
    assert_eq!(
        c.discovery.peers,
        vec![
            "192.0.2.10:7411".parse().unwrap(),
            "127.0.0.1:7412".parse().unwrap()
        ]
    );
    // Empty variables change nothing.
    let before = c.clone();
    c.apply_vars(vars(&[("TETHER_DOMAIN", ""), ("TETHER_PEERS", " ")]))
        .unwrap();
    assert_eq!(c, before);
    for (pairs, says) in [
        (
            &[("TETHER_DOMAIN", "seven")][..],
            "invalid environment variable TETHER_DOMAIN=\"seven\": a domain id",
        ),
        (&[("TETHER_DOMAIN", "70000")][..], "TETHER_DOMAIN"),
        (
            &[("TETHER_DISCOVERY", "lan")][..],
            "TETHER_DISCOVERY=\"lan\": unknown discovery range 'lan'",
        ),
        (
            &[("TETHER_PEERS", "192.0.2.10")][..],
            "TETHER_PEERS=\"192.0.2.10\": peer '192.0.2.10' is not HOST:PORT",
        ),
    ] {
        let pairs: &'static [(&'static str, &'static str)] = pairs;
        let e = Config::default()
            .apply_vars(vars(pairs))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{pairs:?}: {e}");
    }
}

#[test]
fn peers_and_listen_addresses_parse() {
    assert_eq!(
        Config::parse_peer("localhost:7411").unwrap(),
        "127.0.0.1:7411".parse().unwrap()
    );
    assert_eq!(
        Config::parse_peer("[::1]:9").unwrap(),
        "[::1]:9".parse().unwrap()
    );
    assert!(Config::parse_peer(":7411").is_err());
    assert!(Config::parse_peer("host").is_err());
    assert_eq!(
        Config::parse_listen("7411").unwrap(),
        "0.0.0.0:7411".parse().unwrap()
    );
    assert_eq!(
        Config::parse_listen("10.0.0.5").unwrap(),
        "10.0.0.5:0".parse().unwrap()
    );
    assert!(
        Config::parse_listen("eth0")
            .unwrap_err()
            .contains("0.0.0.0:7411")
    );
}

#[test]
fn batch_io_words_are_typed() {
    let c = Config::from_toml("[transport]\nbatch_io = \"mmsg\"\ndont_fragment = false\n").unwrap();
    assert_eq!(c.transport.batch_io, BatchIoMode::Mmsg);
    assert!(!c.transport.dont_fragment);
    let c = Config::from_toml("[transport]\nbatch_io = \"single\"\n").unwrap();
    assert_eq!(c.transport.batch_io, BatchIoMode::Single);
    assert_eq!(Config::default().transport.batch_io, BatchIoMode::Offload);
    assert!(Config::default().transport.dont_fragment);
    let e = Config::from_toml("[transport]\nbatch_io = \"gso\"\n").unwrap_err();
    assert!(e.to_string().contains("batch_io"), "{e}");
}

/// Relative paths in a file are taken from the file's directory; absolute ones and
/// paths given in TOML text (no file) stay as they are.
#[test]
fn relative_paths_follow_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("robot");
    std::fs::create_dir(&sub).unwrap();
    let file = sub.join("tether.toml");
    let text = "[discovery]\nregistry_dir = \"reg\"\n[security]\nkeys = \"realm/r1.key\"\nrevocations = \"/etc/revoked.toml\"\n";
    std::fs::write(&file, text).unwrap();
    let c = Config::from_file(&file).unwrap();
    assert_eq!(c.security.keys, Some(sub.join("realm/r1.key")));
    assert_eq!(
        c.security.revocations,
        Some(PathBuf::from("/etc/revoked.toml"))
    );
    assert_eq!(c.discovery.registry_dir, Some(sub.join("reg")));
    let c = Config::from_toml(text).unwrap();
    assert_eq!(c.security.keys, Some(PathBuf::from("realm/r1.key")));
}
