//! A small capture filter in tcpdump words, applied in user space after decoding.
//!
//! pnet_datalink 0.35 attaches no kernel BPF program (and exposes no socket to attach one to),
//! so live capture filters here, on the capture thread, before frames reach the channel.
//! Grammar: terms joined by `and` (or just juxtaposed), each optionally preceded by `not`:
//! `tcp`, `udp`, `icmp`, `icmp6`, `ip`, `ip6`, `proto N`, `port N`, `host ADDR`, `vlan N`.
//! Example: `udp and port 514 and not host 10.0.0.9`.

use std::net::IpAddr;

use super::decode::{PacketInfo, proto};

/// A filter expression that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "bad filter at `{0}`: expected tcp, udp, icmp, icmp6, ip, ip6, proto N, port N, host ADDR or vlan N (terms joined by `and`, each may be negated with `not`; no `or`, parentheses, `src`/`dst` or `net`)"
)]
pub struct FilterError(pub String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prim {
    Proto(u8),
    Port(u16),
    Host(IpAddr),
    Vlan(u16),
    V4,
    V6,
}

/// A parsed filter: every term must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    terms: Vec<(bool, Prim)>,
}

impl Filter {
    /// Parses a filter expression (empty text matches everything).
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        let mut terms = Vec::new();
        let mut it = text.split_whitespace().peekable();
        let mut neg = false;
        while let Some(w) = it.next() {
            let bad = || FilterError(w.to_string());
            let prim = match w {
                "and" | "&&" => continue,
                "not" | "!" => {
                    neg = !neg;
                    continue;
                }
                "tcp" => Prim::Proto(proto::TCP),
                "udp" => Prim::Proto(proto::UDP),
                "icmp" => Prim::Proto(proto::ICMP),
                "icmp6" => Prim::Proto(proto::ICMPV6),
                "ip" => Prim::V4,
                "ip6" => Prim::V6,
                "proto" | "port" | "host" | "vlan" => {
                    let arg = it.next().ok_or_else(bad)?;
                    match w {
                        "proto" => Prim::Proto(arg.parse().map_err(|_| bad())?),
                        "port" => Prim::Port(arg.parse().map_err(|_| bad())?),
                        "host" => Prim::Host(arg.parse().map_err(|_| bad())?),
                        _ => Prim::Vlan(arg.parse().map_err(|_| bad())?),
                    }
                }
                _ => return Err(bad()),
            };
            terms.push((neg, prim));
            neg = false;
        }
        if neg {
            return Err(FilterError("not".into()));
        }
        Ok(Filter { terms })
    }

    /// Whether a decoded packet passes.
    pub fn matches(&self, p: &PacketInfo<'_>) -> bool {
        self.terms.iter().all(|(neg, prim)| {
            let hit = match *prim {
                Prim::Proto(n) => p.proto == n,
                Prim::Port(n) => p.sport == n || p.dport == n,
                Prim::Host(a) => p.src == a || p.dst == a,
                Prim::Vlan(v) => p.vlan == v || p.vlan_outer == v,
                Prim::V4 => p.src.is_ipv4(),
                Prim::V6 => p.src.is_ipv6(),
            };
            hit != *neg
        })
    }

    /// True when the filter has no terms.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses() {
        assert!(Filter::parse("").unwrap().is_empty());
        assert_eq!(
            Filter::parse("udp and port 514 and not host 10.0.0.9")
                .unwrap()
                .terms
                .len(),
            3
        );
        assert!(Filter::parse("port x").is_err());
        assert!(Filter::parse("frob").is_err());
        assert!(Filter::parse("not").is_err());
    }
}
