//! Syslog over TCP seen in a capture: each client-to-server byte stream to a syslog port is
//! put back in sequence order and cut into messages by the TCP listener's own RFC 6587
//! framing ([`Framer`]: octet counting or LF/NUL), so a capture of rsyslog forwarding over TCP
//! gives the syslog events the agent would have read from the connection.
//!
//! Bounded: at most [`MAX_STREAMS`] streams (a new one evicts the one idle longest), and per
//! stream the framer's message size and at most [`MAX_AHEAD`] bytes of segments waiting for
//! a hole to fill. A hole that does not fill (a segment the capture missed) loses the message
//! it cut: the stream goes on from the segment after it, and the loss is counted.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use bytes::BytesMut;
use cepheus_core::time::Timestamp;

use super::SyslogDatagram;
use super::decode::{PacketInfo, tcp_flags};
use crate::run::framing::{Frame, Framer};

/// Most TCP syslog streams followed at once (a relay forwards over a few; with
/// [`MAX_AHEAD`] and [`MAX_MESSAGE`], at most 128 MiB held whatever the capture).
pub const MAX_STREAMS: usize = 1024;

/// Most bytes of one stream's segments held while they wait for an earlier one.
pub const MAX_AHEAD: usize = 64 * 1024;

/// The longest message (the framer's limit: the TCP listener's default `max_message_size`).
pub const MAX_MESSAGE: usize = 65536;

/// Counters of TCP syslog reassembly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TcpSyslogCounters {
    /// Messages cut out of TCP streams.
    pub messages: u64,
    /// Holes in a stream that never filled (a segment missing from the capture): the
    /// message they cut was lost.
    pub gaps: u64,
    /// Messages longer than the maximum, skipped.
    pub oversized: u64,
    /// Streams given up because they cannot be syslog (an absurd octet count).
    pub unframeable: u64,
    /// Streams evicted to make room for a new one.
    pub evicted: u64,
}

/// One direction of a connection: client to server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    vlan: u16,
}

#[derive(Debug)]
struct Stream {
    /// The sequence number of the stream's first byte: offsets below count from it.
    base: u32,
    /// The offset of the next byte expected.
    next: u32,
    buf: BytesMut,
    framer: Framer,
    /// Segments beyond a hole, by offset.
    ahead: BTreeMap<u32, Vec<u8>>,
    ahead_bytes: usize,
    /// The stream cannot be framed: ignored until it ends.
    dead: bool,
    last: Timestamp,
}

impl Stream {
    fn new(base: u32, now: Timestamp) -> Stream {
        Stream {
            base,
            next: 0,
            buf: BytesMut::new(),
            framer: Framer::new(MAX_MESSAGE),
            ahead: BTreeMap::new(),
            ahead_bytes: 0,
            dead: false,
            last: now,
        }
    }

    /// Places one segment's bytes (`whole` long on the wire, `data` as captured): in order
    /// they go to the framer's buffer, beyond a hole they wait (bounded), and what was
    /// already had (a retransmission) is not taken twice.
    fn take(
        &mut self,
        c: &mut TcpSyslogCounters,
        seq: u32,
        data: &[u8],
        whole: usize,
        to: &mut Out<'_>,
    ) {
        let at = seq.wrapping_sub(self.base);
        if (at.wrapping_sub(self.next) as i32) > 0 {
            if self.ahead_bytes + data.len() <= MAX_AHEAD && data.len() == whole {
                if !self.ahead.contains_key(&at) {
                    self.ahead_bytes += data.len();
                    self.ahead.insert(at, data.to_vec());
                }
                return;
            }
            // The hole will not fill in time: what it cut is lost; go on from here.
            self.skip_hole(c, at);
        }
        self.append(c, at, data, whole, to);
        // Segments that waited and now fit.
        while let Some(entry) = self.ahead.first_entry() {
            if (entry.key().wrapping_sub(self.next) as i32) > 0 {
                break;
            }
            let (at, seg) = entry.remove_entry();
            self.ahead_bytes -= seg.len();
            self.append(c, at, &seg, seg.len(), to);
        }
    }

    /// Appends a segment that starts at or before `next`, and frames the messages it ends.
    fn append(
        &mut self,
        c: &mut TcpSyslogCounters,
        at: u32,
        data: &[u8],
        whole: usize,
        to: &mut Out<'_>,
    ) {
        let have = self.next.wrapping_sub(at) as usize;
        if have >= whole {
            return;
        }
        if have < data.len() {
            self.buf.extend_from_slice(&data[have..]);
        }
        self.next = at.wrapping_add(whole as u32);
        self.frame(c, to);
        if whole > data.len() && !self.dead {
            // The capture cut the segment (snap length): its tail is a hole.
            let next = self.next;
            self.skip_hole(c, next);
        }
    }

    /// Cuts the messages the buffer holds.
    fn frame(&mut self, c: &mut TcpSyslogCounters, to: &mut Out<'_>) {
        if self.dead {
            return;
        }
        while let Some(f) = self.framer.decode(&mut self.buf) {
            match f {
                Frame::Msg(m) => to.message(c, m),
                Frame::Oversized => c.oversized += 1,
                Frame::Fatal => {
                    c.unframeable += 1;
                    self.dead = true;
                    self.buf.clear();
                    self.ahead.clear();
                    self.ahead_bytes = 0;
                    return;
                }
            }
        }
    }

    /// Gives up on a hole: the message it cut is lost, the stream goes on at `to`.
    fn skip_hole(&mut self, c: &mut TcpSyslogCounters, to: u32) {
        c.gaps += 1;
        self.buf.clear();
        self.framer = Framer::new(MAX_MESSAGE);
        self.ahead.clear();
        self.ahead_bytes = 0;
        self.next = to;
    }
}

/// Where a stream's messages go: stamped and sent as coming from its client.
struct Out<'a> {
    ts: Timestamp,
    src: IpAddr,
    out: &'a mut Vec<SyslogDatagram>,
}

impl Out<'_> {
    fn message(&mut self, c: &mut TcpSyslogCounters, m: BytesMut) {
        c.messages += 1;
        self.out.push(SyslogDatagram {
            time: self.ts,
            src: self.src,
            payload: m.to_vec(),
        });
    }
}

/// The TCP syslog streams of a capture.
#[derive(Debug, Default)]
pub struct TcpSyslog {
    streams: HashMap<Key, Stream>,
    counters: TcpSyslogCounters,
}

impl TcpSyslog {
    /// Counters so far.
    pub fn counters(&self) -> TcpSyslogCounters {
        self.counters
    }

    /// One TCP segment from a client to a syslog port: the messages it completes go to `out`,
    /// stamped with the segment's time.
    pub fn segment(&mut self, ts: Timestamp, p: &PacketInfo<'_>, out: &mut Vec<SyslogDatagram>) {
        let key = Key {
            src: p.src,
            dst: p.dst,
            sport: p.sport,
            dport: p.dport,
            vlan: p.vlan,
        };
        let syn = p.tcp_flags & tcp_flags::SYN != 0;
        let end = p.tcp_flags & (tcp_flags::FIN | tcp_flags::RST) != 0;
        if syn {
            // A new connection on the same ports: the old one ended unseen.
            if let Some(old) = self.streams.remove(&key) {
                self.close(&key, old, ts, out);
            }
            self.make_room(&key);
            self.streams
                .insert(key, Stream::new(p.tcp_seq.wrapping_add(1), ts));
            return;
        }
        if !self.streams.contains_key(&key) {
            if p.payload.is_empty() {
                return;
            }
            // Picked up mid-stream: from this segment on.
            self.make_room(&key);
            self.streams.insert(key, Stream::new(p.tcp_seq, ts));
        }
        let Some(s) = self.streams.get_mut(&key) else {
            return;
        };
        s.last = ts;
        if !s.dead && !p.payload.is_empty() {
            let whole = (p.payload_len as usize).max(p.payload.len());
            let mut to = Out {
                ts,
                src: key.src,
                out,
            };
            s.take(&mut self.counters, p.tcp_seq, p.payload, whole, &mut to);
        }
        if end && let Some(s) = self.streams.remove(&key) {
            self.close(&key, s, ts, out);
        }
    }

    /// End of the capture: every stream ends, its last unterminated message included.
    pub fn finish(&mut self, ts: Timestamp, out: &mut Vec<SyslogDatagram>) {
        let mut all: Vec<(Key, Stream)> = self.streams.drain().collect();
        // In a stable order (the map's is not): by when each last moved, then by key.
        all.sort_by(|a, b| {
            (a.1.last, a.0.src, a.0.sport, a.0.dst, a.0.dport)
                .cmp(&(b.1.last, b.0.src, b.0.sport, b.0.dst, b.0.dport))
        });
        for (k, s) in all {
            self.close(&k, s, ts, out);
        }
    }

    /// A stream ends: what is left in its buffer is its last message.
    fn close(&mut self, key: &Key, mut s: Stream, ts: Timestamp, out: &mut Vec<SyslogDatagram>) {
        if s.dead {
            return;
        }
        let c = &mut self.counters;
        if !s.ahead.is_empty() {
            c.gaps += 1;
        }
        let mut to = Out {
            ts,
            src: key.src,
            out,
        };
        s.frame(c, &mut to);
        match s.framer.finish(&mut s.buf) {
            Some(Frame::Msg(m)) => to.message(c, m),
            Some(Frame::Oversized) => c.oversized += 1,
            Some(Frame::Fatal) => c.unframeable += 1,
            None => {}
        }
    }

    /// Keeps the table under [`MAX_STREAMS`]: a new stream evicts the one idle longest.
    fn make_room(&mut self, new: &Key) {
        if self.streams.len() < MAX_STREAMS || self.streams.contains_key(new) {
            return;
        }
        let oldest = self
            .streams
            .iter()
            .min_by_key(|(k, s)| (s.last, k.src, k.sport, k.dst, k.dport))
            .map(|(k, _)| *k);
        if let Some(k) = oldest {
            self.streams.remove(&k);
            self.counters.evicted += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::flow::decode::proto;

    const CLIENT: [u8; 4] = [10, 0, 0, 7];

    fn seg(seq: u32, flags: u8, data: &[u8]) -> PacketInfo<'_> {
        PacketInfo {
            vlan_outer: 0,
            vlan: 0,
            src: IpAddr::from(CLIENT),
            dst: IpAddr::from([10, 0, 0, 1]),
            proto: proto::TCP,
            sport: 40000,
            dport: 514,
            icmp: None,
            icmp_echo_id: None,
            tcp_flags: flags | tcp_flags::ACK,
            tcp_seq: seq,
            ip_len: 40 + data.len() as u32,
            payload_len: data.len() as u32,
            payload: data,
            fragment: None,
        }
    }

    /// Feeds segments (seq, flags, bytes) and returns the messages, as text.
    fn run(t: &mut TcpSyslog, segs: &[(u32, u8, &[u8])]) -> Vec<String> {
        let mut out = Vec::new();
        for (i, (seq, flags, data)) in segs.iter().enumerate() {
            t.segment(Timestamp(i as i64), &seg(*seq, *flags, data), &mut out);
        }
        out.iter()
            .map(|d| String::from_utf8_lossy(&d.payload).into_owned())
            .collect()
    }

    const ISN: u32 = u32::MAX - 10; // the sequence numbers wrap inside the stream

    fn at(n: u32) -> u32 {
        ISN.wrapping_add(1).wrapping_add(n)
    }

    #[test]
    fn in_order_octet_counted_and_lf_framed_messages() {
        let mut t = TcpSyslog::default();
        let got = run(
            &mut t,
            &[
                (ISN, tcp_flags::SYN, b""),
                (at(0), 0, b"5 hello3 ab"),
                (at(11), 0, b"c\nsecond\nthi"),
                (at(23), tcp_flags::FIN, b"rd"),
            ],
        );
        assert_eq!(got, ["hello", "abc", "second", "third"]);
        assert_eq!(t.counters().messages, 4);
        assert!(t.streams.is_empty());
    }

    #[test]
    fn segments_out_of_order_and_retransmitted_are_put_back_in_order() {
        let mut t = TcpSyslog::default();
        let got = run(
            &mut t,
            &[
                (ISN, tcp_flags::SYN, b""),
                (at(4), 0, b"two\n"),
                (at(0), 0, b"one\n"),
                (at(0), 0, b"one\n"),      // retransmitted
                (at(2), 0, b"e\ntwo\nth"), // overlaps both, adds "th"
                (at(8), 0, b"three\n"),    // overlaps "th"
            ],
        );
        assert_eq!(got, ["one", "two", "three"]);
        assert_eq!(t.counters().gaps, 0);
    }

    #[test]
    fn a_missing_segment_loses_only_the_message_it_cut() {
        let mut t = TcpSyslog::default();
        // "one\ntw" | "o\nthree\n" (missing) ... and the held segments overflow MAX_AHEAD.
        let mut segs: Vec<(u32, u8, &[u8])> =
            vec![(ISN, tcp_flags::SYN, b""), (at(0), 0, b"one\ntw")];
        let big = vec![b'x'; 1000];
        let mut big_lines: Vec<Vec<u8>> = Vec::new();
        for _ in 0..(MAX_AHEAD / 1000 + 2) {
            let mut l = big.clone();
            l.push(b'\n');
            big_lines.push(l);
        }
        let mut off = 14; // "one\ntw" (6) + the missing "o\nthree\n" (8)
        for l in &big_lines {
            segs.push((at(off), 0, l));
            off += l.len() as u32;
        }
        let got = run(&mut t, &segs);
        assert_eq!(got[0], "one");
        assert!(!got.iter().any(|m| m.contains("tw") || m.contains("three")));
        assert!(got.len() >= 2 && got[1..].iter().all(|m| m.len() == 1000));
        assert_eq!(t.counters().gaps, 1);
    }

    #[test]
    fn a_segment_cut_by_the_snap_length_drops_its_message() {
        let mut t = TcpSyslog::default();
        let mut out = Vec::new();
        t.segment(Timestamp(0), &seg(ISN, tcp_flags::SYN, b""), &mut out);
        let mut cut = seg(at(0), 0, b"one\ntwo is lo");
        cut.payload_len = 20; // "one\ntwo is longer\n" on the wire, 13 bytes captured
        t.segment(Timestamp(1), &cut, &mut out);
        t.segment(Timestamp(2), &seg(at(20), 0, b"three\n"), &mut out);
        let got: Vec<_> = out.iter().map(|d| d.payload.clone()).collect();
        assert_eq!(got, [b"one".to_vec(), b"three".to_vec()]);
        assert_eq!(t.counters().gaps, 1);
    }

    #[test]
    fn a_stream_picked_up_mid_way_and_its_unterminated_end() {
        let mut t = TcpSyslog::default();
        let got = run(
            &mut t,
            &[(777, 0, b"<13>a b: one\n<13>a b: tw"), (801, 0, b"o")],
        );
        assert_eq!(got, ["<13>a b: one"]);
        let mut out = Vec::new();
        t.finish(Timestamp(9), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].payload, b"<13>a b: two");
        assert_eq!(out[0].src, IpAddr::from(CLIENT));
    }

    #[test]
    fn a_stream_that_is_not_syslog_is_given_up() {
        let mut t = TcpSyslog::default();
        let got = run(
            &mut t,
            &[
                (ISN, tcp_flags::SYN, b""),
                (at(0), 0, b"9999999999 x\n"),
                (at(13), 0, b"more\n"),
            ],
        );
        assert!(got.is_empty(), "{got:?}");
        assert_eq!(t.counters().unframeable, 1);
    }

    #[test]
    fn streams_are_bounded() {
        let mut t = TcpSyslog::default();
        let mut out = Vec::new();
        for i in 0..(MAX_STREAMS as u32 + 10) {
            let mut s = seg(1, 0, b"partial");
            s.sport = (i % 60000) as u16;
            s.src = IpAddr::from((i / 60000 + 1).to_be_bytes());
            t.segment(Timestamp(i64::from(i)), &s, &mut out);
        }
        assert_eq!(t.streams.len(), MAX_STREAMS);
        assert_eq!(t.counters().evicted, 10);
        assert!(out.is_empty());
    }
}
