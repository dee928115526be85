//! A capture filter in tcpdump's words (pcap-filter(7)), applied in user space after decoding.
//!
//! pnet_datalink 0.35 attaches no kernel BPF program (and exposes no socket to attach one to),
//! so live capture filters here, on the capture thread, before frames reach the channel.
//! The grammar is pcap-filter's over IP packets: primitives combined with `and`/`&&`,
//! `or`/`||` (equal precedence, left to right, as in tcpdump), `not`/`!` and parentheses;
//! `[src|dst|src or dst|src and dst] host ADDR`, `[src|dst] net PREFIX` (`10.0.0.0/8`, `10.1`,
//! `2001:db8::/32`, `ADDR mask MASK`), `[tcp|udp] [src|dst] port N|NAME`, `portrange N-M`,
//! `tcp`, `udp`, `icmp`, `icmp6`, `ip`, `ip6`, `[ip|ip6] proto N|NAME`, `vlan [N]`. An address
//! or port alone after `and`/`or` repeats the words before the previous one, as in tcpdump
//! (`port 80 or 443`, `host 10.0.0.1 or 10.0.0.2`). Unlike tcpdump's, the words test the IP
//! packet whether or not the frame carries VLAN tags (tcpdump needs `vlan and` first), and
//! `vlan N` matches either tag of a Q-in-Q frame; a tag with id 0 counts as none. Link-level
//! words (`ether`, `arp`), `less`/`greater`, byte offsets and host names are refused with a
//! message naming them.

use std::net::IpAddr;

use super::decode::{PacketInfo, proto};

/// A filter expression that does not parse: where, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad filter at `{at}`: {why}")]
pub struct FilterError {
    /// The word the parser stopped at (`end` past the last one).
    pub at: String,
    /// What was expected there.
    pub why: String,
}

/// Which end of a packet an address or port test looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// Either (the default, and `src or dst`).
    Either,
    Src,
    Dst,
    /// Both (`src and dst`).
    Both,
}

impl Dir {
    fn test<T: Copy>(self, src: T, dst: T, f: impl Fn(T) -> bool) -> bool {
        match self {
            Dir::Either => f(src) || f(dst),
            Dir::Src => f(src),
            Dir::Dst => f(dst),
            Dir::Both => f(src) && f(dst),
        }
    }
}

/// One test of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prim {
    /// IP protocol number, optionally only over IPv4 (`Some(false)`) or IPv6 (`Some(true)`).
    Proto(u8, Option<bool>),
    /// `ip` (false) or `ip6` (true).
    Family(bool),
    /// An address prefix (a host is a full-length one).
    Net(Dir, IpAddr, u8),
    /// A TCP or UDP port range, optionally of one of them.
    Port(Dir, Option<u8>, u16, u16),
    /// A VLAN tag, any or this id (outer or inner).
    Vlan(Option<u16>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Expr {
    Prim(Prim),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

/// A parsed filter (empty: every packet passes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    expr: Option<Expr>,
}

impl Filter {
    /// Parses a filter expression (empty text matches everything).
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        let tokens = tokenize(text);
        if tokens.is_empty() {
            return Ok(Filter::default());
        }
        if tokens.len() > MAX_WORDS {
            return Err(FilterError {
                at: tokens[MAX_WORDS].clone(),
                why: format!("a filter has at most {MAX_WORDS} words"),
            });
        }
        let mut p = Parser {
            tokens,
            pos: 0,
            depth: 0,
            last: None,
        };
        let expr = p.expr(false)?;
        if let Some(t) = p.peek() {
            return Err(p.error(t, "unbalanced `)`"));
        }
        Ok(Filter { expr: Some(expr) })
    }

    /// Whether a decoded packet passes.
    pub fn matches(&self, p: &PacketInfo<'_>) -> bool {
        self.expr.as_ref().is_none_or(|e| eval(e, p))
    }

    /// True when the filter has no terms.
    pub fn is_empty(&self) -> bool {
        self.expr.is_none()
    }
}

fn eval(e: &Expr, p: &PacketInfo<'_>) -> bool {
    match e {
        Expr::Prim(prim) => test(*prim, p),
        Expr::Not(e) => !eval(e, p),
        Expr::And(a, b) => eval(a, p) && eval(b, p),
        Expr::Or(a, b) => eval(a, p) || eval(b, p),
    }
}

fn test(prim: Prim, p: &PacketInfo<'_>) -> bool {
    match prim {
        Prim::Proto(n, fam) => p.proto == n && fam.is_none_or(|v6| p.src.is_ipv6() == v6),
        Prim::Family(v6) => p.src.is_ipv6() == v6,
        Prim::Net(dir, net, len) => dir.test(p.src, p.dst, |a| in_net(a, net, len)),
        Prim::Port(dir, only, lo, hi) => {
            // Ports are in TCP and UDP headers, which only a datagram's first fragment holds.
            let transport = match only {
                Some(n) => p.proto == n,
                None => p.proto == proto::TCP || p.proto == proto::UDP,
            };
            transport
                && p.fragment.is_none_or(|f| f.offset == 0)
                && dir.test(p.sport, p.dport, |port| (lo..=hi).contains(&port))
        }
        Prim::Vlan(None) => p.vlan != 0 || p.vlan_outer != 0,
        Prim::Vlan(Some(v)) => p.vlan == v || p.vlan_outer == v,
    }
}

/// Whether `a` lies in `net`/`len` (never across address families).
fn in_net(a: IpAddr, net: IpAddr, len: u8) -> bool {
    match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Words, with parentheses and a leading `!` split off (`!(tcp)` is `!`, `(`, `tcp`, `)`).
fn tokenize(text: &str) -> Vec<String> {
    // `tcp&&udp` is `tcp && udp`, as tcpdump reads it.
    let text = text.replace("&&", " && ").replace("||", " || ");
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        let single = matches!(c, '(' | ')') || (c == '!' && word.is_empty());
        if c.is_whitespace() || single {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            if single {
                out.push(c.to_string());
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// What a primitive tests, without its value: what a value alone after `and`/`or` repeats.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Host,
    Net,
    Port,
    PortRange,
    Proto,
    Vlan,
}

#[derive(Clone, Copy, Debug)]
struct Quals {
    /// `tcp`/`udp` before a port (the protocol number), or `ip`/`ip6` (false/true) before
    /// a host, net or proto.
    transport: Option<u8>,
    family: Option<bool>,
    dir: Dir,
    kind: Kind,
}

/// The most words a filter may have (its tree is walked recursively, per packet).
const MAX_WORDS: usize = 1024;

/// How deep parentheses and `not`s may nest (a filter is a line, not a program; the parser
/// recurses once per level).
const MAX_DEPTH: usize = 64;

struct Parser {
    tokens: Vec<String>,
    pos: usize,
    depth: usize,
    /// The qualifiers of the last primitive that took a value.
    last: Option<Quals>,
}

const WORDS: &str = "expected host, net, port, portrange, tcp, udp, icmp, icmp6, ip, ip6, proto or vlan (with src/dst, and, or, not and parentheses, as in tcpdump)";

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.pos).map(String::as_str)
    }

    fn next(&mut self) -> Option<String> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += usize::from(t.is_some());
        t
    }

    fn error(&self, at: &str, why: impl Into<String>) -> FilterError {
        FilterError {
            at: at.to_string(),
            why: why.into(),
        }
    }

    fn end(&self, why: impl Into<String>) -> FilterError {
        self.error("end", why)
    }

    /// Primitives joined by `and`/`or` (equal precedence, left to right) or side by side
    /// (`and`, as earlier versions read them).
    fn expr(&mut self, after_op: bool) -> Result<Expr, FilterError> {
        // (`after_op`: the expression opens a parenthesis right after `and`/`or`, so its first
        // primitive may be a value alone, as in `port 80 or (443 or 8443)`.)
        let mut left = self.unary(after_op)?;
        loop {
            let op = match self.peek() {
                None | Some(")") => return Ok(left),
                Some("and" | "&&") => Some(true),
                Some("or" | "||") => Some(false),
                Some(_) => None,
            };
            if op.is_some() {
                self.pos += 1;
            }
            let right = self.unary(op.is_some())?;
            left = match op {
                Some(false) => Expr::Or(Box::new(left), Box::new(right)),
                _ => Expr::And(Box::new(left), Box::new(right)),
            };
        }
    }

    /// `not` X, a parenthesised expression, a primitive, or (`after_op`) a value alone.
    fn unary(&mut self, after_op: bool) -> Result<Expr, FilterError> {
        if self.depth >= MAX_DEPTH {
            let at = self.peek().unwrap_or("end").to_string();
            return Err(self.error(&at, format!("nested more than {MAX_DEPTH} deep")));
        }
        self.depth += 1;
        let e = self.unary_inner(after_op);
        self.depth -= 1;
        e
    }

    fn unary_inner(&mut self, after_op: bool) -> Result<Expr, FilterError> {
        match self.peek() {
            None => Err(self.end("the filter ends where a primitive was expected")),
            Some("not" | "!") => {
                self.pos += 1;
                Ok(Expr::Not(Box::new(self.unary(after_op)?)))
            }
            Some("(") => {
                self.pos += 1;
                let e = self.expr(after_op)?;
                match self.next().as_deref() {
                    Some(")") => Ok(e),
                    _ => Err(self.end("missing `)`")),
                }
            }
            Some(")") => Err(self.error(")", "`)` where a primitive was expected")),
            Some(_) => self.primitive(after_op),
        }
    }

    fn primitive(&mut self, after_op: bool) -> Result<Expr, FilterError> {
        let Some(first) = self.next() else {
            return Err(self.end(WORDS));
        };
        let mut q = Quals {
            transport: None,
            family: None,
            dir: Dir::Either,
            kind: Kind::Host,
        };
        let mut word = first.clone();
        // A protocol word: alone it is a primitive; before a kind it qualifies it.
        let proto_word = match word.as_str() {
            "tcp" => Some(Prim::Proto(proto::TCP, None)),
            "udp" => Some(Prim::Proto(proto::UDP, None)),
            "icmp" => Some(Prim::Proto(proto::ICMP, Some(false))),
            "icmp6" => Some(Prim::Proto(proto::ICMPV6, Some(true))),
            "ip" => Some(Prim::Family(false)),
            "ip6" => Some(Prim::Family(true)),
            _ => None,
        };
        if let Some(prim) = proto_word {
            let qualifies = matches!(
                self.peek(),
                Some("src" | "dst" | "host" | "net" | "port" | "portrange" | "proto")
            );
            if !qualifies {
                return Ok(Expr::Prim(prim));
            }
            // As in tcpdump: `tcp`/`udp` qualify ports, `ip`/`ip6` addresses, networks and
            // protocols; nothing else (a qualifier never silently drops).
            let next = self.peek().unwrap_or_default();
            match prim {
                Prim::Proto(n, _)
                    if (n == proto::TCP || n == proto::UDP)
                        && matches!(next, "src" | "dst" | "port" | "portrange") =>
                {
                    q.transport = Some(n)
                }
                Prim::Family(v6) if next != "port" && next != "portrange" => q.family = Some(v6),
                _ => {
                    let how = if next == "port" || next == "portrange" {
                        "ports are in TCP and UDP headers: write `tcp port N`, `udp port N` or `port N`"
                            .to_string()
                    } else {
                        format!("to combine them, write `{first} and {next} ...`")
                    };
                    return Err(
                        self.error(&first, format!("`{first}` cannot qualify `{next}`: {how}"))
                    );
                }
            }
            word = self.next().unwrap_or_default();
        }
        let mut has_dir = false;
        if matches!(word.as_str(), "src" | "dst") {
            has_dir = true;
            q.dir = if word == "src" { Dir::Src } else { Dir::Dst };
            // `src or dst`, `src and dst` (either order) are one qualifier.
            let other = if word == "src" { "dst" } else { "src" };
            if matches!(self.peek(), Some("or" | "and" | "||" | "&&"))
                && self.tokens.get(self.pos + 1).map(String::as_str) == Some(other)
            {
                let op = self.next().unwrap_or_default();
                self.pos += 1;
                q.dir = if op == "or" || op == "||" {
                    Dir::Either
                } else {
                    Dir::Both
                };
            }
            word =
                match self.next() {
                    Some(w) => w,
                    None => return Err(self.end(
                        "`src`/`dst` must be followed by host, net, port, portrange or an address",
                    )),
                };
        }
        let kind = match word.as_str() {
            "host" => Some(Kind::Host),
            "net" => Some(Kind::Net),
            "port" => Some(Kind::Port),
            "portrange" => Some(Kind::PortRange),
            "proto" => Some(Kind::Proto),
            "vlan" => Some(Kind::Vlan),
            _ => None,
        };
        let value = match kind {
            Some(k) => {
                q.kind = k;
                match k {
                    // `vlan` may stand alone (any tag).
                    Kind::Vlan => match self.peek() {
                        Some(v) if v.parse::<u16>().is_ok() => self.next(),
                        _ => None,
                    },
                    _ => match self.next() {
                        Some(v) => Some(v),
                        None => return Err(self.end(format!("`{word}` needs a value"))),
                    },
                }
            }
            None if has_dir || q.transport.is_some() || q.family.is_some() => {
                // `src 10.0.0.1`: host is assumed, as in tcpdump (a prefix: net).
                if word.contains('/') {
                    q.kind = Kind::Net;
                }
                Some(word.clone())
            }
            None => {
                // A value alone: after `and`/`or` it repeats the previous primitive's words
                // (`port 80 or 443`); an address alone is a host.
                match self.last {
                    Some(last) if after_op && looks_like_value(&word) => q = last,
                    _ if address(&word).is_some() => {}
                    _ if word.contains('/') => q.kind = Kind::Net,
                    _ => return Err(self.unknown(&word)),
                }
                Some(word.clone())
            }
        };
        let prim = self.build(q, value.as_deref(), &first)?;
        if value.is_some() {
            self.last = Some(q);
        }
        Ok(Expr::Prim(prim))
    }

    /// The error for a word that starts no primitive.
    fn unknown(&self, w: &str) -> FilterError {
        let why = match w {
            "ether" | "arp" | "rarp" | "wlan" | "llc" | "stp" | "decnet" | "atalk" | "ipx" => {
                "link-level primitives are not supported (flows are IP): use ip, ip6, tcp, udp, icmp, icmp6, host, net, port, portrange, proto or vlan".to_string()
            }
            "less" | "greater" | "len" => {
                "packet-length tests (less, greater, len) are not supported".to_string()
            }
            "gateway" | "broadcast" | "multicast" | "mpls" | "pppoed" | "pppoes" | "geneve" => {
                format!("`{w}` is not supported; {WORDS}")
            }
            _ if w.contains('[') => "byte-offset expressions (`tcp[13] & 2 != 0`) are not supported".to_string(),
            _ => WORDS.to_string(),
        };
        self.error(w, why)
    }

    fn build(&mut self, q: Quals, value: Option<&str>, first: &str) -> Result<Prim, FilterError> {
        let v = value.unwrap_or("");
        let dir_only = |what: &str| -> Result<(), FilterError> {
            if q.dir != Dir::Either {
                return Err(self.error(first, format!("`src`/`dst` do not apply to {what}")));
            }
            Ok(())
        };
        match q.kind {
            Kind::Host | Kind::Net => {
                if q.transport.is_some() {
                    return Err(self.error(
                        first,
                        "`tcp`/`udp` qualify port and portrange only (write `tcp and host ADDR`)",
                    ));
                }
                let (net, len) = if matches!(q.kind, Kind::Host) {
                    let a = address(v).ok_or_else(|| {
                        let numeric = v
                            .bytes()
                            .all(|b| b.is_ascii_hexdigit() || b == b'.' || b == b':');
                        self.error(
                            v,
                            if numeric {
                                "not an IPv4 or IPv6 address"
                            } else {
                                "host names are not resolved: give an IPv4 or IPv6 address"
                            },
                        )
                    })?;
                    (a, if a.is_ipv4() { 32 } else { 128 })
                } else {
                    self.net(v)?
                };
                if q.family.is_some_and(|v6| v6 != net.is_ipv6()) {
                    return Err(self.error(v, "the address is not of the family `ip`/`ip6` names"));
                }
                Ok(Prim::Net(q.dir, net, len))
            }
            Kind::Port | Kind::PortRange => {
                if q.family.is_some() {
                    return Err(self.error(
                        first,
                        "`ip`/`ip6` do not qualify ports (write `ip and port N`)",
                    ));
                }
                let (lo, hi) = if matches!(q.kind, Kind::Port) {
                    let p = port(v).ok_or_else(|| {
                        self.error(v, "a port is a number from 0 to 65535 (or 0x..) or a service name such as ssh, domain, http, https, syslog")
                    })?;
                    (p, p)
                } else {
                    // `N-M` in either order, or one port (as tcpdump takes them).
                    let range = match v.split_once('-') {
                        Some((a, b)) => port(a).zip(port(b)),
                        None => port(v).map(|p| (p, p)),
                    };
                    match range {
                        Some((a, b)) => (a.min(b), a.max(b)),
                        None => {
                            return Err(
                                self.error(v, "a port range is N-M (ports from 0 to 65535)")
                            );
                        }
                    }
                };
                Ok(Prim::Port(q.dir, q.transport, lo, hi))
            }
            Kind::Proto => {
                dir_only("proto")?;
                let n = match v.trim_start_matches('\\') {
                    "tcp" => proto::TCP,
                    "udp" => proto::UDP,
                    "icmp" => proto::ICMP,
                    "icmp6" => proto::ICMPV6,
                    n => n.parse().map_err(|_| {
                        self.error(
                            v,
                            "a protocol is a number from 0 to 255 or tcp, udp, icmp, icmp6",
                        )
                    })?,
                };
                Ok(Prim::Proto(n, q.family))
            }
            Kind::Vlan => {
                dir_only("vlan")?;
                match value {
                    None => Ok(Prim::Vlan(None)),
                    Some(v) => match v.parse::<u16>() {
                        Ok(0) => Err(self.error(
                            v,
                            "VLAN 0 (a priority tag) is not told apart from no tag here: write `not vlan` for untagged frames",
                        )),
                        Ok(id) if id < 4096 => Ok(Prim::Vlan(Some(id))),
                        _ => Err(self.error(v, "a VLAN id is a number from 1 to 4095")),
                    },
                }
            }
        }
    }

    /// A network: `ADDR/LEN`, a dotted IPv4 prefix of one to three bytes (`10`, `192.168`),
    /// a whole address (one host), or `ADDR mask MASK` (the mask read from the next word).
    fn net(&mut self, v: &str) -> Result<(IpAddr, u8), FilterError> {
        let bad = || {
            self.error(v, "a network is ADDR/LEN (10.0.0.0/8, 2001:db8::/32), a dotted prefix (10, 192.168) or ADDR mask MASK")
        };
        if let Some((a, len)) = v.split_once('/') {
            // `10.0.0.0/8`, also `10/8` (a dotted prefix, as tcpdump reads it).
            let a = address(a)
                .or_else(|| dotted_prefix(a).map(|(a, _)| a))
                .ok_or_else(bad)?;
            let len: u8 = len.parse().map_err(|_| bad())?;
            if len > if a.is_ipv4() { 32 } else { 128 } {
                return Err(bad());
            }
            return self.network(v, a, len);
        }
        let whole = address(v).map(|a| (a, if a.is_ipv4() { 32 } else { 128 }));
        let (a, len) = whole.or_else(|| dotted_prefix(v)).ok_or_else(bad)?;
        // `net ADDR mask MASK`.
        if self.peek() != Some("mask") {
            return Ok((a, len));
        }
        let mask = self
            .tokens
            .get(self.pos + 1)
            .and_then(|m| m.parse::<std::net::Ipv4Addr>().ok())
            .map(u32::from)
            .filter(|m| m.leading_ones() + m.trailing_zeros() == 32)
            .ok_or_else(|| {
                self.error(
                    "mask",
                    "a mask is a dotted IPv4 mask of contiguous ones (255.255.0.0)",
                )
            })?;
        if a.is_ipv6() {
            return Err(bad());
        }
        self.pos += 2;
        self.network(v, a, mask.leading_ones() as u8)
    }

    /// `a/len` as a network, refused (as tcpdump refuses it) when `a` has bits set past the
    /// prefix: `10.1.2.3/8` is most likely a typo, of the address or of the length.
    fn network(&self, v: &str, a: IpAddr, len: u8) -> Result<(IpAddr, u8), FilterError> {
        let host_bits = match a {
            IpAddr::V4(x) => u32::from(x).checked_shl(u32::from(len)).unwrap_or(0) != 0,
            IpAddr::V6(x) => u128::from(x).checked_shl(u32::from(len)).unwrap_or(0) != 0,
        };
        if host_bits {
            let net = match a {
                IpAddr::V4(x) => IpAddr::V4(
                    (u32::from(x) & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)).into(),
                ),
                IpAddr::V6(x) => IpAddr::V6(
                    (u128::from(x) & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0))
                        .into(),
                ),
            };
            return Err(self.error(
                v,
                format!("bits are set past the prefix length (tcpdump refuses it too): the network is {net}/{len}"),
            ));
        }
        Ok((a, len))
    }
}

/// An IP address; a dotted IPv4 address may have leading zeros (`10.0.0.010` is 10.0.0.10,
/// as tcpdump reads it).
fn address(w: &str) -> Option<IpAddr> {
    if let Ok(a) = w.parse() {
        return Some(a);
    }
    dotted(w).filter(|&(_, n)| n == 4).map(|(a, _)| a)
}

/// A dotted IPv4 prefix of one to three bytes (`10` is 10.0.0.0/8, `192.168` 192.168.0.0/16).
fn dotted_prefix(w: &str) -> Option<(IpAddr, u8)> {
    dotted(w)
        .filter(|&(_, n)| n < 4)
        .map(|(a, n)| (a, 8 * n as u8))
}

/// One to four dotted decimal bytes (leading zeros allowed), the rest zero, and how many.
fn dotted(w: &str) -> Option<(IpAddr, usize)> {
    let mut octets = [0u8; 4];
    let mut n = 0;
    for p in w.split('.') {
        if n == 4 || p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        octets[n] = p.parse().ok()?;
        n += 1;
    }
    Some((IpAddr::from(octets), n))
}

/// Whether a word can be the value of a primitive (an address, a prefix, a port or range).
fn looks_like_value(w: &str) -> bool {
    address(w).is_some()
        || w.contains('/')
        || w.split(['.', '-'])
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        || port(w).is_some()
}

/// A port number, or one of the common service names (tcpdump reads /etc/services; these are
/// the ones a monitoring filter names, fixed so a filter means the same on every host).
fn port(w: &str) -> Option<u16> {
    if let Ok(n) = w.parse() {
        return Some(n);
    }
    if let Some(hex) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        return u16::from_str_radix(hex, 16).ok();
    }
    Some(match w {
        "ftp-data" => 20,
        "ftp" => 21,
        "ssh" => 22,
        "telnet" => 23,
        "smtp" => 25,
        "domain" | "dns" => 53,
        "bootps" => 67,
        "bootpc" => 68,
        "tftp" => 69,
        "http" | "www" => 80,
        "kerberos" => 88,
        "pop3" => 110,
        "sunrpc" | "portmapper" => 111,
        "ntp" => 123,
        "epmap" | "loc-srv" => 135,
        "netbios-ns" => 137,
        "netbios-dgm" => 138,
        "netbios-ssn" => 139,
        "imap" => 143,
        "snmp" => 161,
        "snmptrap" => 162,
        "ldap" => 389,
        "https" => 443,
        "microsoft-ds" | "smb" => 445,
        "kpasswd" => 464,
        "isakmp" => 500,
        "syslog" => 514,
        "rtsp" => 554,
        "submission" => 587,
        "ldaps" => 636,
        "rsync" => 873,
        "imaps" => 993,
        "pop3s" => 995,
        "socks" => 1080,
        "openvpn" => 1194,
        "ms-sql-s" => 1433,
        "radius" => 1812,
        "nfs" => 2049,
        "mysql" => 3306,
        "rdp" | "ms-wbt-server" => 3389,
        "sip" => 5060,
        "postgresql" => 5432,
        "x11" => 6000,
        "redis" => 6379,
        "syslog-tls" => 6514,
        "ircd" => 6667,
        "http-alt" | "webcache" => 8080,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::flow::decode::Fragment;

    fn pkt(src: &str, dst: &str, proto: u8, sport: u16, dport: u16) -> PacketInfo<'static> {
        PacketInfo {
            vlan_outer: 0,
            vlan: 0,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            proto,
            sport,
            dport,
            icmp: None,
            icmp_echo_id: None,
            tcp_flags: 0,
            tcp_seq: 0,
            ip_len: 40,
            payload_len: 0,
            payload: &[],
            fragment: None,
            claims_more: false,
        }
    }

    fn pass(filter: &str, p: &PacketInfo<'_>) -> bool {
        Filter::parse(filter)
            .unwrap_or_else(|e| panic!("{filter}: {e}"))
            .matches(p)
    }

    #[test]
    fn earlier_filters_still_parse_and_mean_the_same() {
        assert!(Filter::parse("").unwrap().is_empty());
        let syslog = pkt("10.0.0.1", "10.0.0.2", proto::UDP, 40000, 514);
        let from_9 = pkt("10.0.0.9", "10.0.0.2", proto::UDP, 40000, 514);
        for f in [
            "udp and port 514 and not host 10.0.0.9",
            "udp port 514 not host 10.0.0.9",
        ] {
            assert!(pass(f, &syslog), "{f}");
            assert!(!pass(f, &from_9), "{f}");
        }
        assert!(pass("ip", &syslog));
        assert!(!pass("ip6", &syslog));
        assert!(pass("proto 17", &syslog));
    }

    #[test]
    fn and_or_have_equal_precedence_left_to_right_as_in_tcpdump() {
        let ssh = pkt("10.0.0.1", "10.0.0.2", proto::TCP, 50000, 22);
        let dns = pkt("10.0.0.1", "10.0.0.2", proto::UDP, 50000, 53);
        // (tcp or udp) and port 53: the ssh packet fails, as tcpdump reads it.
        assert!(!pass("tcp or udp and port 53", &ssh));
        assert!(pass("tcp or udp and port 53", &dns));
        assert!(pass("tcp or (udp and port 53)", &ssh));
        assert!(pass("not tcp and port 53", &dns));
        assert!(!pass("not (tcp or udp)", &dns));
        assert!(!pass("!(tcp || udp)", &dns));
        assert!(pass("!tcp && port 53", &dns));
    }

    #[test]
    fn directions_prefixes_and_ranges() {
        let p = pkt("192.168.1.7", "10.1.2.3", proto::TCP, 443, 51000);
        assert!(pass("src host 192.168.1.7", &p));
        assert!(!pass("dst host 192.168.1.7", &p));
        assert!(pass("src or dst host 10.1.2.3", &p));
        assert!(!pass("src and dst host 10.1.2.3", &p));
        assert!(pass("src 192.168.1.7", &p));
        assert!(pass("dst net 10.0.0.0/8", &p));
        assert!(pass("net 192.168", &p));
        assert!(pass("net 192.168.0.0 mask 255.255.0.0 and tcp", &p));
        assert!(pass("net 192.168 mask 255.255.0.0", &p));
        assert!(pass("net 192.168.001.0/24", &p));
        assert!(pass("dst net 10/8", &p));
        assert!(pass("dst 10.0.0.0/8", &p));
        assert!(pass("192.168.1.0/24", &p));
        assert!(pass("tcp&&dst port 51000||udp", &p));
        assert!(!pass("src net 10", &p));
        assert!(pass("tcp src port https", &p));
        assert!(!pass("udp port 443", &p));
        // Names as Debian's /etc/services spells them, for the services a monitor filters on.
        for (name, n) in [
            ("netbios-ssn", 139),
            ("rsync", 873),
            ("http-alt", 8080),
            ("nfs", 2049),
        ] {
            assert_eq!(port(name), Some(n), "{name}");
        }
        assert!(pass("dst portrange 50000-52000", &p));
        assert!(pass("dst portrange 52000-50000", &p));
        assert!(pass("portrange 443", &p));
        assert!(pass("tcp src port 0x1bb", &p));
        assert!(pass("host 192.168.001.007", &p));
        assert!(!pass("src portrange 1-442", &p));
        assert!(pass("port 80 or 443", &p));
        assert!(pass("port 80 or (8443 or 443)", &p));
        assert!(!pass("port 80 or (8443 or 8080)", &p));
        assert!(pass("host 10.9.9.9 or 10.1.2.3", &p));
        assert!(!pass("host 10.9.9.9 or 10.8.8.8", &p));
        assert!(pass("ip proto tcp", &p));
        assert!(pass("ip proto \\tcp", &p));
        assert!(!pass("ip6 proto 6", &p));
        let v6 = pkt("2001:db8::1", "2001:db9::2", proto::ICMPV6, 0, 0);
        assert!(pass("src net 2001:db8::/32 and icmp6", &v6));
        assert!(!pass("dst net 2001:db8::/32", &v6));
        assert!(!pass("icmp", &v6));
        // Ports are only in TCP and UDP headers, and only in a first fragment.
        let icmp = pkt("10.0.0.1", "10.0.0.2", proto::ICMP, 0, 0);
        assert!(!pass("port 0", &icmp));
        let mut frag = pkt("10.0.0.1", "10.0.0.2", proto::UDP, 0, 0);
        frag.fragment = Some(Fragment {
            id: 1,
            offset: 1480,
            more: false,
        });
        assert!(!pass("port 0", &frag));
        let mut tagged = p;
        tagged.vlan = 20;
        assert!(pass("vlan", &tagged));
        assert!(pass("vlan 20 and tcp", &tagged));
        assert!(!pass(
            "vlan",
            &pkt("10.0.0.1", "10.0.0.2", proto::TCP, 1, 2)
        ));
    }

    #[test]
    fn refusals_name_the_word_and_say_why() {
        for (f, at, says) in [
            ("port x", "x", "service name"),
            ("frob", "frob", "expected host"),
            ("not", "end", "primitive was expected"),
            ("(tcp", "end", "missing `)`"),
            ("tcp)", ")", "unbalanced"),
            ("host example.com", "example.com", "not resolved"),
            ("ether host 00:11:22:33:44:55", "ether", "link-level"),
            ("greater 100", "greater", "packet-length"),
            ("tcp[13] & 2 != 0", "tcp[13]", "byte-offset"),
            ("portrange 9-x", "9-x", "N-M"),
            (
                "host 10.0.0.256",
                "10.0.0.256",
                "not an IPv4 or IPv6 address",
            ),
            ("net 10.0.0.0/33", "10.0.0.0/33", "ADDR/LEN"),
            ("net 10.0.0.0 mask 255.0.255.0", "mask", "contiguous"),
            (
                "net 141.142.228.5/16",
                "141.142.228.5/16",
                "the network is 141.142.0.0/16",
            ),
            (
                "src net 2001:db8::1/32",
                "2001:db8::1/32",
                "the network is 2001:db8::/32",
            ),
            (
                "net 10.1.0.0 mask 255.0.0.0",
                "10.1.0.0",
                "the network is 10.0.0.0/8",
            ),
            ("tcp host 10.0.0.1", "tcp", "cannot qualify `host`"),
            ("src vlan 3", "src", "do not apply to vlan"),
            ("tcp and src", "end", "must be followed"),
            ("vlan 5000", "5000", "VLAN id"),
            ("vlan 0", "0", "priority tag"),
            ("icmp port 80", "icmp", "cannot qualify `port`"),
            ("icmp host 10.0.0.1", "icmp", "cannot qualify `host`"),
            ("tcp proto 17", "tcp", "cannot qualify `proto`"),
            ("udp net 10", "udp", "cannot qualify `net`"),
            ("ip6 port 80", "ip6", "cannot qualify `port`"),
            ("or 443", "or", "expected host"),
            (&"(".repeat(100), "(", "nested more than 64 deep"),
            (&"not ".repeat(100), "not", "nested more than 64 deep"),
            (&"tcp and ".repeat(100_000), "tcp", "at most 1024 words"),
        ] {
            let e = Filter::parse(f).unwrap_err();
            assert_eq!(e.at, at, "{f}: {e}");
            assert!(e.to_string().contains(says), "{f}: {e}");
        }
    }
}
