//! A realm in a temporary directory for the router tests (`router.rs` on loopback,
//! `netns_sites.rs` in namespaces): members with every grant, routers `cloud` and `site`,
//! and the commands that run a router or a member of it.

use std::path::PathBuf;
use std::process::Command;

use super::{Live, text};

pub(crate) struct Realm {
    dir: tempfile::TempDir,
}

impl Realm {
    /// `tether keys init realm`, members `members` (publish and subscribe everything) and
    /// routers `cloud` and `site`.
    pub(crate) fn new(members: &[&str]) -> Realm {
        let dir = tempfile::tempdir().unwrap();
        let r = Realm { dir };
        r.keys(&["init", "realm"]);
        for m in members {
            r.keys(&["issue", "realm", m, "--pub", "/**", "--sub", "/**"]);
        }
        for router in ["cloud", "site"] {
            r.keys(&["issue", "realm", router, "--role", "router"]);
        }
        r
    }

    /// A path in the realm's directory.
    pub(crate) fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// `tether keys ARGS` in the realm's directory (it must succeed); its output.
    pub(crate) fn keys(&self, args: &[&str]) -> String {
        let o = Command::new(env!("CARGO_BIN_EXE_tether"))
            .current_dir(self.dir.path())
            .arg("keys")
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "keys {args:?}: {}", text(&o.stderr));
        text(&o.stdout)
    }

    /// Router `name` run by `tether` (`cmd`: here, or in a namespace) from router.toml
    /// `file` holding its name and keys and `body`, logging at info.
    pub(crate) fn start_router(
        &self,
        mut cmd: Command,
        file: &str,
        name: &str,
        body: &str,
    ) -> Live {
        let cfg = self.path(file);
        std::fs::write(
            &cfg,
            format!("name = \"{name}\"\nkeys = \"realm/{name}.key\"\n{body}\n"),
        )
        .unwrap();
        cmd.env("RUST_LOG", "info")
            .env_remove("TETHER_CONFIG")
            .args(["router", "--config"])
            .arg(&cfg);
        Live::spawn(cmd)
    }

    /// `tether` (`cmd`) as member `who`, with registry directory `registry` of the realm's,
    /// discovery off, meeting others only through the router at `router` (`HOST:PORT`).
    pub(crate) fn member_command(
        &self,
        mut cmd: Command,
        registry: &str,
        who: &str,
        router: &str,
    ) -> Command {
        cmd.env_remove("TETHER_CONFIG")
            .env_remove("TETHER_KEYS")
            .env_remove("TETHER_ROUTERS")
            .arg("--registry-dir")
            .arg(self.path(registry))
            .args(["--discovery", "off", "--keys"])
            .arg(self.path(&format!("realm/{who}.key")))
            .args(["--router", &format!("quic/{router}")]);
        cmd
    }
}
