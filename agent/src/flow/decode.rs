//! Frames to packet summaries: link layer by hand, IP and transport with etherparse.
//!
//! The link layer (Ethernet II with any mix of 802.1Q / 802.1ad / 0x9100 tags, Linux SLL and
//! SLL2, BSD loopback, raw IP) is a few fixed offsets, parsed here so the VLAN ids come out
//! directly. IPv4/IPv6 (extension headers, fragments) go through etherparse's lax slicer, which
//! accepts frames cut by a snap length; TCP, UDP and ICMP headers through etherparse's slices.
//! Nothing here panics on any input: every outcome is a [`Decoded`] value that the caller counts.

use std::net::IpAddr;

use etherparse::{LaxIpSlice, TcpSlice, UdpSlice};

/// Link types (pcap LINKTYPE_* values) the decoder understands.
pub mod linktype {
    /// BSD loopback: 4-byte address family, then IP.
    pub const NULL: u32 = 0;
    /// Ethernet II.
    pub const ETHERNET: u32 = 1;
    /// DLT_RAW as some platforms number it (raw IPv4/IPv6).
    pub const RAW_12: u32 = 12;
    /// DLT_RAW on OpenBSD.
    pub const RAW_14: u32 = 14;
    /// LINKTYPE_RAW: raw IPv4/IPv6, no link header.
    pub const RAW: u32 = 101;
    /// OpenBSD loopback (like NULL, network byte order).
    pub const LOOP: u32 = 108;
    /// Linux "cooked" capture v1.
    pub const LINUX_SLL: u32 = 113;
    /// Raw IPv4.
    pub const IPV4: u32 = 228;
    /// Raw IPv6.
    pub const IPV6: u32 = 229;
    /// Linux "cooked" capture v2.
    pub const LINUX_SLL2: u32 = 276;
}

/// IP protocol numbers used by the flow code.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// TCP flag bits as they sit in the 14th header byte.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// Ethernet's least payload (46 bytes): a shorter packet is padded up to it.
const MIN_ETHERNET_PAYLOAD: usize = 46;

/// Most VLAN tags the decoder walks through before calling a frame malformed.
const MAX_VLAN_TAGS: usize = 4;

/// A decoded IP packet: what the flow table needs, borrowed from the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketInfo<'a> {
    /// Outermost VLAN id (0 when untagged).
    pub vlan_outer: u16,
    /// Innermost VLAN id (0 when untagged); the `vlan` field of flow events.
    pub vlan: u16,
    /// IP source.
    pub src: IpAddr,
    /// IP destination.
    pub dst: IpAddr,
    /// IP protocol number of the payload (after IPv6 extension headers).
    pub proto: u8,
    /// Source port (TCP/UDP), 0 otherwise.
    pub sport: u16,
    /// Destination port (TCP/UDP), 0 otherwise.
    pub dport: u16,
    /// ICMP type and code, when ICMP/ICMPv6.
    pub icmp: Option<(u8, u8)>,
    /// ICMP echo identifier, when an echo request or reply (pairs requests with replies).
    pub icmp_echo_id: Option<u16>,
    /// TCP flag byte (0 for other protocols).
    pub tcp_flags: u8,
    /// TCP sequence number (0 for other protocols): syslog over TCP is reassembled by it.
    pub tcp_seq: u32,
    /// IP-level length: IPv4 total length / 40 + IPv6 payload length, as the header says.
    pub ip_len: u32,
    /// Transport payload length as the headers say (TCP: IP length minus headers).
    pub payload_len: u32,
    /// The captured transport payload (may be shorter than `payload_len` when truncated).
    pub payload: &'a [u8],
    /// IP fragment data, when the packet is a fragment.
    pub fragment: Option<Fragment>,
    /// The headers claim more bytes than the frame holds, or fewer than they need (an IP
    /// or UDP length, a TCP header length): harmless in a frame the capture cut (snaplen),
    /// a lie in a whole one, which [`super::FlowEngine`] then counts as malformed.
    pub claims_more: bool,
}

/// Where an IP fragment belongs: its datagram and its place in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// The IP identification (IPv4's 16 bits, IPv6's 32).
    pub id: u32,
    /// Offset of its data in the datagram's IP payload, in bytes.
    pub offset: u32,
    /// More fragments follow (false: the last one).
    pub more: bool,
}

impl Fragment {
    /// The first fragment: the only one that carries the transport header.
    pub const fn first(&self) -> bool {
        self.offset == 0
    }
}

/// What a frame turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// An IP packet with its summary.
    Ip(PacketInfo<'a>),
    /// A well-formed frame that carries no IP (ARP, LLDP, ...).
    NonIp,
    /// The capture cut the frame before the headers we need ended.
    Truncated,
    /// Headers that contradict themselves (bad IP version, header length, ...).
    Malformed,
    /// A link type this decoder does not know.
    UnsupportedLinktype,
}

/// Whether frames of link type `linktype` are decoded (others are
/// [`Decoded::UnsupportedLinktype`]).
pub const fn supported(linktype: u32) -> bool {
    matches!(
        linktype,
        linktype::ETHERNET
            | linktype::LINUX_SLL
            | linktype::LINUX_SLL2
            | linktype::NULL
            | linktype::LOOP
            | linktype::RAW
            | linktype::RAW_12
            | linktype::RAW_14
            | linktype::IPV4
            | linktype::IPV6
    )
}

/// Decodes one frame of link type `linktype` (a pcap LINKTYPE_* value).
pub fn decode(linktype: u32, frame: &[u8]) -> Decoded<'_> {
    match linktype {
        linktype::ETHERNET => decode_ethernet(frame),
        linktype::LINUX_SLL => match (frame.get(14..16), frame.get(16..)) {
            (Some(p), Some(rest)) => decode_ethertype(u16::from_be_bytes([p[0], p[1]]), rest, 0, 0),
            _ => Decoded::Truncated,
        },
        linktype::LINUX_SLL2 => match (frame.get(0..2), frame.get(20..)) {
            (Some(p), Some(rest)) => decode_ethertype(u16::from_be_bytes([p[0], p[1]]), rest, 0, 0),
            _ => Decoded::Truncated,
        },
        linktype::NULL | linktype::LOOP => match frame.get(4..) {
            Some(rest) => decode_raw(rest, 0, 0),
            None => Decoded::Truncated,
        },
        linktype::RAW | linktype::RAW_12 | linktype::RAW_14 | linktype::IPV4 | linktype::IPV6 => {
            decode_raw(frame, 0, 0)
        }
        _ => Decoded::UnsupportedLinktype,
    }
}

fn decode_ethernet(frame: &[u8]) -> Decoded<'_> {
    let Some(et) = frame.get(12..14) else {
        return Decoded::Truncated;
    };
    let mut ethertype = u16::from_be_bytes([et[0], et[1]]);
    let mut off = 14usize;
    let (mut outer, mut inner) = (0u16, 0u16);
    let mut tags = 0usize;
    while matches!(ethertype, 0x8100 | 0x88a8 | 0x9100 | 0x9200) {
        if tags == MAX_VLAN_TAGS {
            return Decoded::Malformed;
        }
        let Some(tag) = frame.get(off..off + 4) else {
            return Decoded::Truncated;
        };
        let id = u16::from_be_bytes([tag[0], tag[1]]) & 0x0fff;
        if tags == 0 {
            outer = id;
        }
        inner = id;
        tags += 1;
        ethertype = u16::from_be_bytes([tag[2], tag[3]]);
        off += 4;
    }
    match frame.get(off..) {
        Some(rest) => decode_ethertype(ethertype, rest, outer, inner),
        None => Decoded::Truncated,
    }
}

fn decode_ethertype(ethertype: u16, rest: &[u8], outer: u16, inner: u16) -> Decoded<'_> {
    match ethertype {
        0x0800 | 0x86dd => decode_raw(rest, outer, inner),
        _ => Decoded::NonIp,
    }
}

fn decode_raw(data: &[u8], vlan_outer: u16, vlan: u16) -> Decoded<'_> {
    let Some(first) = data.first() else {
        return Decoded::Truncated;
    };
    if !matches!(first >> 4, 4 | 6) {
        return Decoded::Malformed;
    }
    let (ip, _ext_err) = match LaxIpSlice::from_slice(data) {
        Ok(v) => v,
        Err(etherparse::err::ip::LaxHeaderSliceError::Len(_)) => return Decoded::Truncated,
        Err(etherparse::err::ip::LaxHeaderSliceError::Content(_)) => return Decoded::Malformed,
    };
    let mut lie = false;
    // An IPv6 jumbogram (RFC 2675: payload length 0) or a TSO-sized one: its UDP length may
    // be 0 too.
    let mut jumbo = false;
    let (ip_len, fragment) = match &ip {
        LaxIpSlice::Ipv4(v4) => {
            let h = v4.header();
            let total = u32::from(h.total_len());
            let hlen = u32::from(h.ihl()) * 4;
            // Total length 0: a segment the sending host's NIC was to cut (TSO), captured on
            // that host before it was: the frame's length is the datagram's, as tshark reads
            // it (found by a review). Only a large one: in a minimum-size frame the length
            // would take Ethernet's padding for data. Another length below the header's is a
            // lie.
            let ip_len = if total >= hlen {
                total
            } else {
                lie = total != 0 || data.len() <= MIN_ETHERNET_PAYLOAD;
                data.len() as u32
            };
            let frag =
                (h.more_fragments() || h.fragments_offset().value() != 0).then(|| Fragment {
                    id: u32::from(h.identification()),
                    offset: u32::from(h.fragments_offset().value()) * 8,
                    more: h.more_fragments(),
                });
            (ip_len, frag)
        }
        LaxIpSlice::Ipv6(v6) => {
            let plen = u32::from(v6.header().payload_length());
            jumbo = plen == 0;
            let ip_len = if plen == 0 {
                data.len() as u32
            } else {
                40 + plen
            };
            let frag = ipv6_fragment(v6.header().next_header().0, v6.extensions().slice());
            (ip_len, frag)
        }
    };
    let payload = ip.payload();
    let headers_len = ip_len.saturating_sub(payload.payload.len() as u32);
    let mut info = PacketInfo {
        vlan_outer,
        vlan,
        src: ip.source_addr(),
        dst: ip.destination_addr(),
        proto: payload.ip_number.0,
        sport: 0,
        dport: 0,
        icmp: None,
        icmp_echo_id: None,
        tcp_flags: 0,
        tcp_seq: 0,
        ip_len,
        payload_len: ip_len.saturating_sub(headers_len),
        payload: payload.payload,
        fragment,
        claims_more: lie || ip_len as usize > data.len(),
    };
    // Only a fragment at offset 0 carries the transport header.
    if fragment.is_some_and(|f| !f.first()) {
        return Decoded::Ip(info);
    }
    // Length of the transport segment as the IP header says (not what was captured).
    let l4_len = match &ip {
        LaxIpSlice::Ipv4(v4) => ip_len.saturating_sub(u32::from(v4.header().ihl()) * 4),
        LaxIpSlice::Ipv6(_) => ip_len.saturating_sub(40 + ext_len(&ip)),
    };
    let seg = payload.payload;
    match info.proto {
        proto::TCP => {
            match TcpSlice::from_slice(seg) {
                Ok(tcp) => {
                    info.sport = tcp.source_port();
                    info.dport = tcp.destination_port();
                    info.tcp_flags = seg.get(13).copied().unwrap_or(0);
                    info.tcp_seq = tcp.sequence_number();
                    info.payload_len = l4_len.saturating_sub(u32::from(tcp.data_offset()) * 4);
                    info.payload = tcp.payload();
                }
                // The fixed header is whole but the options were cut by the capture length
                // (a SYN's options at tcpdump's old 68-byte snaplen): ports and flags are
                // there, which is all a flow needs; the packet counts.
                Err(_) if seg.len() >= 20 && seg.len() < tcp_header_len(seg) => {
                    info.claims_more = true;
                    info.sport = u16::from_be_bytes([seg[0], seg[1]]);
                    info.dport = u16::from_be_bytes([seg[2], seg[3]]);
                    info.tcp_flags = seg[13];
                    info.tcp_seq = u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]);
                    info.payload_len = l4_len.saturating_sub(tcp_header_len(seg) as u32);
                    info.payload = &[];
                }
                Err(_) if seg.len() < 20 => return Decoded::Truncated,
                Err(_) => return Decoded::Malformed,
            }
        }
        proto::UDP => {
            let Ok(udp) = UdpSlice::from_slice_lax(seg) else {
                return Decoded::Truncated;
            };
            info.sport = udp.source_port();
            info.dport = udp.destination_port();
            let udp_len = u32::from(udp.length());
            // A first fragment's UDP length is the whole datagram's; a jumbogram's is 0.
            let short = udp_len < 8 && !(udp_len == 0 && jumbo);
            info.claims_more |= short || (udp_len > l4_len && fragment.is_none());
            info.payload_len = l4_len.saturating_sub(8);
            info.payload = udp.payload();
        }
        proto::ICMP | proto::ICMPV6 => {
            let (Some(&t), Some(&c)) = (seg.first(), seg.get(1)) else {
                return Decoded::Truncated;
            };
            info.icmp = Some((t, c));
            let echo = if info.proto == proto::ICMP {
                matches!(t, 0 | 8)
            } else {
                matches!(t, 128 | 129)
            };
            if echo && let Some(id) = seg.get(4..6) {
                info.icmp_echo_id = Some(u16::from_be_bytes([id[0], id[1]]));
            }
            info.payload_len = l4_len.saturating_sub(8);
            info.payload = seg.get(8..).unwrap_or(&[]);
        }
        _ => {}
    }
    Decoded::Ip(info)
}

/// The fragment header among IPv6 extension headers (`exts`, the first of kind `first`), if
/// the packet is a fragment.
/// Walked by hand with every length checked: etherparse 0.21's extension iterator reads past
/// the end of a chain the lax slicer cut short (out of bounds, found by fuzzing).
fn ipv6_fragment(first: u8, exts: &[u8]) -> Option<Fragment> {
    let mut next = first;
    let mut rest = exts;
    let mut found = None;
    loop {
        let n = rest.get(1).map(|&n| usize::from(n));
        let len = match (next, n) {
            // hop-by-hop, routing, destination options, mobility, HIP, shim6: (n + 1) * 8
            (0 | 43 | 60 | 135 | 139 | 140, Some(n)) => (n + 1) * 8,
            (44, _) => 8,
            // authentication header: (n + 2) * 4
            (51, Some(n)) => (n + 2) * 4,
            _ => return found,
        };
        // The chain ends where the slicer stopped.
        let Some(header) = rest.get(..len) else {
            return found;
        };
        if next == 44 {
            let off_flags = u16::from_be_bytes([header[2], header[3]]);
            let offset = off_flags >> 3;
            let more = off_flags & 1 != 0;
            if offset != 0 || more {
                let id = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
                found = Some(Fragment {
                    id,
                    offset: u32::from(offset) * 8,
                    more,
                });
            }
        }
        next = header[0];
        rest = &rest[len..];
    }
}

/// Bytes of IPv6 extension headers in front of the payload.
fn ext_len(ip: &LaxIpSlice<'_>) -> u32 {
    match ip {
        LaxIpSlice::Ipv6(v6) => v6.extensions().slice().len() as u32,
        LaxIpSlice::Ipv4(_) => 0,
    }
}

/// The TCP header length the data offset claims (0 when not even that byte was captured).
fn tcp_header_len(seg: &[u8]) -> usize {
    seg.get(12).map(|b| usize::from(b >> 4) * 4).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use etherparse::PacketBuilder;

    #[test]
    fn udp_ethernet_and_double_vlan() {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2([1; 6], [2; 6])
            .double_vlan(
                etherparse::VlanId::try_new(100).unwrap(),
                etherparse::VlanId::try_new(7).unwrap(),
            )
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1000, 514)
            .write(&mut frame, b"<13>hello")
            .unwrap();
        let Decoded::Ip(p) = decode(linktype::ETHERNET, &frame) else {
            panic!("not ip");
        };
        assert_eq!((p.vlan_outer, p.vlan), (100, 7));
        assert_eq!((p.sport, p.dport, p.proto), (1000, 514, proto::UDP));
        assert_eq!(p.ip_len, 20 + 8 + 9);
        assert_eq!(p.payload, b"<13>hello");
    }

    #[test]
    fn tcp_ipv6_raw_and_truncations() {
        let mut pkt = Vec::new();
        PacketBuilder::ipv6([1; 16], [2; 16], 64)
            .tcp(40000, 22, 1, 1000)
            .syn()
            .write(&mut pkt, b"")
            .unwrap();
        let Decoded::Ip(p) = decode(linktype::RAW, &pkt) else {
            panic!("not ip");
        };
        assert_eq!(p.tcp_flags & tcp_flags::SYN, tcp_flags::SYN);
        assert_eq!(p.ip_len, 60);
        for cut in 0..pkt.len() {
            let d = decode(linktype::RAW, &pkt[..cut]);
            assert!(
                matches!(d, Decoded::Truncated | Decoded::Malformed),
                "{cut} {d:?}"
            );
        }
        assert_eq!(decode(linktype::ETHERNET, &[0; 5]), Decoded::Truncated);
        assert_eq!(decode(9999, &[0; 5]), Decoded::UnsupportedLinktype);
        for lt in 0..400 {
            let frame = [0x45u8; 64];
            assert_eq!(
                decode(lt, &frame) == Decoded::UnsupportedLinktype,
                !supported(lt),
                "link type {lt}"
            );
        }
    }

    #[test]
    fn a_syn_whose_options_the_snaplen_cut_still_counts() {
        let mut pkt = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 8080, 1, 1000)
            .syn()
            .options_raw(&[1; 20])
            .unwrap()
            .write(&mut pkt, b"")
            .unwrap();
        assert_eq!(pkt.len(), 20 + 20 + 20);
        // Cut inside the options (tcpdump's old 68-byte snaplen on Ethernet is 54 of IP).
        for cut in [40, 48, 54, 59] {
            let Decoded::Ip(p) = decode(linktype::RAW, &pkt[..cut]) else {
                panic!("{cut}: not ip");
            };
            assert_eq!((p.sport, p.dport), (40000, 8080), "{cut}");
            assert_eq!(p.tcp_flags & tcp_flags::SYN, tcp_flags::SYN, "{cut}");
            assert_eq!(p.payload_len, 0, "{cut}");
        }
        // Inside the fixed header: truncated.
        assert_eq!(decode(linktype::RAW, &pkt[..39]), Decoded::Truncated);
    }

    fn udp_ip() -> Vec<u8> {
        let mut v = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(5, 6)
            .write(&mut v, b"x")
            .unwrap();
        v
    }

    #[test]
    fn cooked_loopback_and_raw_linktypes() {
        let ip = udp_ip();
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&ip);
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&ip);
        for (lt, frame) in [
            (linktype::LINUX_SLL, &sll),
            (linktype::LINUX_SLL2, &sll2),
            (linktype::NULL, &null),
            (linktype::IPV4, &ip),
            (linktype::RAW_12, &ip),
        ] {
            let Decoded::Ip(p) = decode(lt, frame) else {
                panic!("linktype {lt}");
            };
            assert_eq!(
                (p.sport, p.dport, p.payload),
                (5, 6, &b"x"[..]),
                "linktype {lt}"
            );
        }
        // 802.3 length field and ARP are not IP.
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06, 0, 0]);
        assert_eq!(decode(linktype::ETHERNET, &arp), Decoded::NonIp);
        // Five VLAN tags are more than we walk.
        let mut deep = vec![0u8; 12];
        for _ in 0..5 {
            deep.extend_from_slice(&[0x81, 0x00, 0, 1]);
        }
        deep.extend_from_slice(&[0x81, 0x00]);
        assert_eq!(decode(linktype::ETHERNET, &deep), Decoded::Malformed);
    }

    #[test]
    fn ipv6_extension_headers_and_fragments() {
        // IPv6 + hop-by-hop (8 bytes) + fragment header (offset 0, more) + UDP.
        let mut p = vec![0x60, 0, 0, 0];
        let udp = [
            0x00, 0x35, 0x04, 0xd2, 0x00, 0x10, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        let plen = (8 + 8 + udp.len()) as u16;
        p.extend_from_slice(&plen.to_be_bytes());
        p.extend_from_slice(&[0, 64]); // next header hop-by-hop, hop limit
        p.extend_from_slice(&[0x20; 16]);
        p.extend_from_slice(&[0x21; 16]);
        p.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop -> fragment, PadN
        p.extend_from_slice(&[17, 0, 0x00, 0x01, 0, 0, 0x12, 0x34]); // frag -> UDP, off 0, M
        p.extend_from_slice(&udp);
        let Decoded::Ip(d) = decode(linktype::RAW, &p) else {
            panic!("not ip");
        };
        assert_eq!((d.proto, d.sport, d.dport), (proto::UDP, 53, 1234));
        assert_eq!(
            d.fragment,
            Some(Fragment {
                id: 0x1234,
                offset: 0,
                more: true
            })
        );
        assert_eq!(d.ip_len, 40 + u32::from(plen));
        // A later fragment: no ports here, the table maps them.
        let n = p.len();
        p[n - udp.len() - 6] = 0x00;
        p[n - udp.len() - 5] = 0x10; // offset 2 (x8 bytes)
        let Decoded::Ip(d) = decode(linktype::RAW, &p) else {
            panic!("not ip");
        };
        assert_eq!(
            (d.sport, d.dport, d.fragment),
            (
                0,
                0,
                Some(Fragment {
                    id: 0x1234,
                    offset: 16,
                    more: false
                })
            )
        );
    }
}
