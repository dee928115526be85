//! A network namespace joined to the test's namespace by a veth pair: the place where tests
//! that capture packets (AF_PACKET, root) send known traffic. Removed on drop, also when a
//! test fails.

use std::process::{Command, Stdio};

/// Runs a command (no shell); whether it succeeded.
pub fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The namespace, our end of the veth pair, and the two addresses of the /24 between them.
pub struct Netns {
    pub name: String,
    /// Our end (capture here).
    pub veth: String,
    /// Our address.
    pub here: String,
    /// The namespace's address.
    pub there: String,
}

impl Netns {
    /// Creates the namespace for `test`, named from `prefix` and the pid, in a /24 of
    /// 10.`octet`.0.0/13 picked by pid (so concurrent runs do not clash). `None`, after
    /// printing why, when the test must be skipped (not root, no iproute2, no netns).
    pub fn create(test: &str, prefix: &str, octet: u32) -> Option<Netns> {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false);
        if !root {
            println!("SKIPPED {test}: needs root (netns, veth, AF_PACKET)");
            return None;
        }
        if !sh(&["ip", "-V"]) {
            println!("SKIPPED {test}: `ip` (iproute2) not found");
            return None;
        }
        let id = std::process::id() % 100_000;
        let net = format!("10.{}.{}", octet + id % 8, (id / 8) % 250);
        let ns = Netns {
            name: format!("{prefix}{id}"),
            veth: format!("{prefix}{id}a"),
            here: format!("{net}.1"),
            there: format!("{net}.2"),
        };
        let peer = format!("{prefix}{id}b");
        let ok = sh(&["ip", "netns", "add", &ns.name])
            && sh(&[
                "ip", "link", "add", &ns.veth, "type", "veth", "peer", "name", &peer,
            ])
            && sh(&["ip", "link", "set", &peer, "netns", &ns.name])
            && sh(&[
                "ip",
                "addr",
                "add",
                &format!("{}/24", ns.here),
                "dev",
                &ns.veth,
            ])
            && sh(&["ip", "link", "set", &ns.veth, "up"])
            && ns.exec(&[
                "ip",
                "addr",
                "add",
                &format!("{}/24", ns.there),
                "dev",
                &peer,
            ])
            && ns.exec(&["ip", "link", "set", &peer, "up"])
            && ns.exec(&["ip", "link", "set", "lo", "up"]);
        if !ok {
            println!("SKIPPED {test}: could not create netns/veth (no CAP_SYS_ADMIN?)");
            return None;
        }
        Some(ns)
    }

    /// Runs a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> bool {
        let mut v = vec!["ip", "netns", "exec", self.name.as_str()];
        v.extend_from_slice(args);
        sh(&v)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        sh(&["ip", "link", "del", &self.veth]);
        sh(&["ip", "netns", "del", &self.name]);
    }
}
