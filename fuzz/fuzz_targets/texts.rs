//! Text an operator writes, through the agent's parsers of it: the configuration file
//! (`run::config::Config::parse`, which validates every value, then its warnings) and capture
//! filters (`flow::filter::Filter::parse`, pcap-filter's grammar, then matched against
//! packets the input describes). Must never panic.
//!
//! Input: the first byte picks what is read (even: a configuration file, the rest of the
//! input; odd: a filter, the text up to the first NUL byte, then 24 bytes per packet).
//!
//! What is checked, besides "never panics": a filter `F` that parses, written `not ( F )`,
//! parses too (unless that takes it past the filter's word or nesting limits) and matches
//! exactly the packets `F` does not; `( F ) or ( F )` matches exactly those `F` does.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use cepheus_agent::flow::decode::PacketInfo;
use cepheus_agent::flow::filter::Filter;
use cepheus_agent::run::config::Config;
use libfuzzer_sys::fuzz_target;

/// At most this many packets are matched per input.
const MAX_PACKETS: usize = 16;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let text = String::from_utf8_lossy(rest);
        if let Ok(cfg) = Config::parse(Path::new("fuzz.toml"), &text) {
            let _ = cfg.warnings();
            let _ = cfg.shard_count();
        }
        return;
    }
    let (text, packets) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let Ok(filter) = Filter::parse(&text) else {
        return;
    };
    let negated = Filter::parse(&format!("not ( {text} )")).ok();
    let twice = Filter::parse(&format!("( {text} ) or ( {text} )")).ok();
    for bytes in packets.chunks(24).take(MAX_PACKETS) {
        let p = packet(bytes);
        let m = filter.matches(&p);
        if let Some(n) = &negated {
            assert_eq!(n.matches(&p), !m, "`not ( {text} )` on {p:?}");
        }
        if let Some(t) = &twice {
            assert_eq!(t.matches(&p), m, "`( {text} ) or ( {text} )` on {p:?}");
        }
    }
});

/// A packet described by up to 24 bytes (missing ones are 0): small values are likely, so
/// ports, protocols and tags the filters name come up.
fn packet(b: &[u8]) -> PacketInfo<'static> {
    let at = |i: usize| b.get(i).copied().unwrap_or(0);
    let word = |i: usize| u16::from_be_bytes([at(i), at(i + 1)]);
    let v6 = at(0) & 1 == 1;
    let addr = |i: usize| -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, word(i)))
        } else {
            IpAddr::V4(Ipv4Addr::new(10, at(i) % 4, at(i + 1) % 4, at(i + 1)))
        }
    };
    // Ports from a short list most of the time (the filters' likely words), else any.
    let port = |i: usize| {
        const LIKELY: [u16; 8] = [22, 53, 80, 443, 514, 6514, 0, 65535];
        let w = word(i);
        if at(i) & 0x80 == 0 {
            LIKELY[(w % 8) as usize]
        } else {
            w
        }
    };
    let proto = [6u8, 17, 1, 58, 47, 0, 255, at(5)][(at(4) % 8) as usize];
    let icmp = matches!(proto, 1 | 58).then_some((at(14), at(15)));
    PacketInfo {
        vlan_outer: word(16) % 4096 * u16::from(at(20) & 1),
        vlan: word(18) % 4096 * u16::from(at(20) & 2 != 0),
        src: addr(6),
        dst: addr(8),
        proto,
        sport: port(10),
        dport: port(12),
        icmp,
        icmp_echo_id: icmp.map(|_| word(21)),
        tcp_flags: if proto == 6 { at(23) } else { 0 },
        tcp_seq: 0,
        ip_len: 40,
        payload_len: 0,
        payload: &[],
        fragment: None,
        claims_more: false,
    }
}
