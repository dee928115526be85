//! Syslog over TCP seen in a capture: each client-to-server byte stream to a syslog port is
//! put back in sequence order and cut into messages by the TCP listener's own RFC 6587
//! framing ([`Framer`]: octet counting or LF/NUL), so a capture of rsyslog forwarding over TCP
//! gives the syslog events the agent would have read from the connection.
//!
//! A hole (a segment the capture missed) is waited for while the segments after it fit in
//! [`MAX_AHEAD`]; then, or when the stream ends, it is given up: the message it cut is lost
//! (counted in `gaps`), and framing starts again at the next frame boundary after it (the
//! byte after a LF or NUL, or an octet count followed by a PRI, `57 <13>...`). A FIN that comes
//! before the segments it ends waits for them; a RST drops the unfinished last message, as the
//! listener does. Bounded: at most [`MAX_STREAMS`] streams; a new one evicts first a stream
//! that never carried data (a SYN scan), else the one idle longest.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;

use bytes::{Buf, BytesMut};
use cepheus_core::time::Timestamp;

use super::SyslogDatagram;
use super::decode::{PacketInfo, tcp_flags};
use crate::run::framing::{Frame, Framer};

/// Most TCP syslog streams followed at once (a relay forwards over a few; with
/// [`MAX_AHEAD`] and [`MAX_MESSAGE`], at most 128 MiB held whatever the capture).
pub const MAX_STREAMS: usize = 1024;

/// Most bytes of one stream's segments held while they wait for an earlier one, each held
/// segment counted with [`HELD_OVERHEAD`] (tiny segments cannot hold more than this).
pub const MAX_AHEAD: usize = 64 * 1024;

/// What one held segment costs beyond its bytes (its vector and map entry), as counted.
const HELD_OVERHEAD: usize = 96;

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
    /// Times a counted stream's framing was lost (a wrong count, a stray partial line) and
    /// found again at the next frame, the bytes between dropped.
    pub resynced: u64,
    /// Streams evicted to make room for a new one.
    pub evicted: u64,
    /// Counted messages a stream ended inside (its connection, or the capture, stopped
    /// mid-message): dropped.
    pub unfinished: u64,
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
    /// After a hole: bytes are skipped up to the next frame boundary.
    resync: bool,
    /// The offset just past a FIN seen before all the data it ends.
    fin: Option<u32>,
    /// The stream cannot be framed: ignored until it ends.
    dead: bool,
    /// Carried data (streams that never did are evicted first).
    has_data: bool,
    /// Which stream of this key (a new SYN on the same ports makes another).
    serial: u64,
    last: Timestamp,
}

impl Stream {
    fn new(base: u32, now: Timestamp, serial: u64) -> Stream {
        Stream {
            base,
            next: 0,
            buf: BytesMut::new(),
            framer: Framer::new(MAX_MESSAGE),
            ahead: BTreeMap::new(),
            ahead_bytes: 0,
            resync: false,
            fin: None,
            dead: false,
            has_data: false,
            serial,
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
        if after(at, self.next) {
            let cost = data.len() + HELD_OVERHEAD;
            if self.ahead_bytes + cost <= MAX_AHEAD && data.len() == whole {
                // A retransmission that carries more than the segment held there wins.
                let shorter = self.ahead.get(&at).map(|h| h.len());
                if shorter.is_none_or(|n| n < data.len()) {
                    if let Some(n) = shorter {
                        self.ahead_bytes -= n + HELD_OVERHEAD;
                    }
                    self.ahead_bytes += cost;
                    self.ahead.insert(at, data.to_vec());
                }
                return;
            }
            // The hole will not fill in time: give it up, and the ones after it up to here.
            while after(at, self.next) {
                let to_at = match self.ahead.first_key_value() {
                    Some((&k, _)) if after(at, k) => k,
                    _ => at,
                };
                self.skip_hole(c, to_at);
                self.drain(c, to);
            }
        }
        self.append(c, at, data, whole, to);
        self.drain(c, to);
    }

    /// Appends the held segments that now fit.
    fn drain(&mut self, c: &mut TcpSyslogCounters, to: &mut Out<'_>) {
        while let Some(entry) = self.ahead.first_entry() {
            if after(*entry.key(), self.next) {
                break;
            }
            let (at, seg) = entry.remove_entry();
            self.ahead_bytes -= seg.len() + HELD_OVERHEAD;
            self.append(c, at, &seg, seg.len(), to);
        }
    }

    /// Gives up every hole: what is held goes on after them (the stream is ending).
    fn give_up_holes(&mut self, c: &mut TcpSyslogCounters, to: &mut Out<'_>) {
        while let Some((&k, _)) = self.ahead.first_key_value() {
            self.skip_hole(c, k);
            self.drain(c, to);
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
        if self.resync {
            match frame_boundary(&self.buf) {
                Some(p) => {
                    self.buf.advance(p);
                    self.resync = false;
                }
                None => {
                    // Keep the end, where a boundary may begin.
                    if self.buf.len() > 16 {
                        let cut = self.buf.len() - 16;
                        self.buf.advance(cut);
                    }
                    return;
                }
            }
        }
        while let Some(f) = self.framer.decode(&mut self.buf) {
            match f {
                Frame::Msg(m) => to.message(c, m),
                Frame::Oversized => c.oversized += 1,
                Frame::Resynced => c.resynced += 1,
                // (Only at the stream's end, from `finish`.)
                Frame::Unfinished => c.unfinished += 1,
                Frame::Fatal(_) => {
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

    /// Gives up the hole before offset `to`: the message it cut is lost, framing starts
    /// again at the next frame boundary after it.
    fn skip_hole(&mut self, c: &mut TcpSyslogCounters, to: u32) {
        c.gaps += 1;
        self.buf.clear();
        self.framer = Framer::new(MAX_MESSAGE);
        self.resync = true;
        self.next = to;
    }
}

/// Whether offset `a` lies after `b` (offsets wrap with the sequence numbers).
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Where a frame may begin in bytes that follow a hole: at once if they begin with a PRI,
/// else after a LF or NUL, or at an octet count followed by a PRI (`57 <13>...`), whichever
/// comes first.
fn frame_boundary(b: &[u8]) -> Option<usize> {
    (0..b.len()).find_map(|p| {
        if (p == 0 && b[0] == b'<') || (p > 0 && matches!(b[p - 1], b'\n' | 0)) {
            return Some(p);
        }
        if p > 0 && b[p - 1].is_ascii_digit() {
            return None;
        }
        octet_start(b, p)
    })
}

/// An octet count starting in the digit run at `p` and followed by a PRI. The run may begin
/// with the digits that ended the message the hole cut (`...port 22` + `512 <38>...` is
/// `22512 <38>`): the count is the longest tail of the run whose frame ends where another
/// frame begins (or at the end of what is there), else the whole run.
fn octet_start(b: &[u8], p: usize) -> Option<usize> {
    let run = b[p..]
        .iter()
        .take(20)
        .take_while(|x| x.is_ascii_digit())
        .count();
    if run == 0 || b.get(p + run) != Some(&b' ') || b.get(p + run + 1) != Some(&b'<') {
        return None;
    }
    let body = p + run + 1;
    let starts_frame = |e: usize| {
        crate::run::framing::octet_count(&b[e..])
            .is_some_and(|(d, _)| b.get(e + d + 1) == Some(&b'<'))
    };
    for q in p..p + run {
        if p + run - q > 10 || b[q] == b'0' {
            continue;
        }
        let Some(count) = std::str::from_utf8(&b[q..p + run])
            .ok()
            .and_then(|t| t.parse::<usize>().ok())
        else {
            continue;
        };
        let end = body.saturating_add(count);
        if end == b.len() || (end < b.len() && starts_frame(end)) {
            return Some(q);
        }
    }
    (run <= 10 && b[p] != b'0').then_some(p)
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
    /// Streams made by a SYN, oldest first, with their serial: evicted first while they
    /// carry no data (stale entries are skipped).
    fresh: VecDeque<(Key, u64)>,
    serial: u64,
    /// Streams that ended, with the sequence number just past what they carried (the last
    /// [`MAX_STREAMS`]): a retransmission after the end is not a new stream picked up
    /// mid-way, whose messages would come out twice.
    ended: HashMap<Key, u32>,
    ended_order: VecDeque<Key>,
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
        if syn {
            let isn_next = p.tcp_seq.wrapping_add(1);
            if self.streams.get(&key).is_some_and(|s| s.base == isn_next) {
                return; // the SYN again (retransmitted): the same connection
            }
            // A new connection on the same ports: the old one ended unseen.
            if let Some(old) = self.streams.remove(&key) {
                self.close(&key, old, ts, out, true);
            }
            self.open(key, isn_next, ts, true);
            return;
        }
        if !self.streams.contains_key(&key) {
            if p.payload.is_empty() {
                return;
            }
            let end = p.tcp_seq.wrapping_add(p.payload.len() as u32);
            // A retransmission of a stream that ended (close before its end; a new connection
            // on the same ports, its SYN missed, starts anywhere else).
            if self
                .ended
                .get(&key)
                .is_some_and(|&e| !after(end, e) && e.wrapping_sub(end) < 1 << 20)
            {
                return;
            }
            // Picked up mid-stream: from this segment on, at a frame boundary.
            self.open(key, p.tcp_seq, ts, false);
            if let Some(s) = self.streams.get_mut(&key) {
                s.resync = true;
            }
        }
        let Some(s) = self.streams.get_mut(&key) else {
            return;
        };
        s.last = ts;
        let whole = (p.payload_len as usize).max(p.payload.len());
        if !s.dead && !p.payload.is_empty() {
            s.has_data = true;
            let mut to = Out {
                ts,
                src: key.src,
                out,
            };
            s.take(&mut self.counters, p.tcp_seq, p.payload, whole, &mut to);
        }
        if p.tcp_flags & tcp_flags::RST != 0 {
            if let Some(s) = self.streams.remove(&key) {
                self.close(&key, s, ts, out, false);
            }
            return;
        }
        if p.tcp_flags & tcp_flags::FIN != 0 {
            let end = p.tcp_seq.wrapping_sub(s.base).wrapping_add(whole as u32);
            s.fin = Some(end);
        }
        // The stream ends once its data up to the FIN is in.
        if s.fin.is_some_and(|f| !after(f, s.next))
            && let Some(s) = self.streams.remove(&key)
        {
            self.close(&key, s, ts, out, true);
        }
    }

    /// End of the capture: every stream ends, its last unterminated message included.
    pub fn finish(&mut self, ts: Timestamp, out: &mut Vec<SyslogDatagram>) {
        let mut all: Vec<(Key, Stream)> = self.streams.drain().collect();
        self.fresh.clear();
        // In a stable order (the map's is not): by when each last moved, then by key.
        all.sort_by(|a, b| {
            (a.1.last, a.0.src, a.0.sport, a.0.dst, a.0.dport)
                .cmp(&(b.1.last, b.0.src, b.0.sport, b.0.dst, b.0.dport))
        });
        for (k, s) in all {
            self.close(&k, s, ts, out, true);
        }
    }

    /// A new stream of `key`, its first byte at sequence number `base`.
    fn open(&mut self, key: Key, base: u32, ts: Timestamp, by_syn: bool) {
        self.make_room();
        self.serial += 1;
        self.streams.insert(key, Stream::new(base, ts, self.serial));
        if by_syn {
            self.fresh.push_back((key, self.serial));
            if self.fresh.len() > 2 * MAX_STREAMS {
                let streams = &self.streams;
                self.fresh.retain(|(k, n)| {
                    streams
                        .get(k)
                        .is_some_and(|s| s.serial == *n && !s.has_data)
                });
            }
        }
    }

    /// A stream ends: held segments go on after their holes, and what is left in its buffer
    /// is its last message (not after a RST: the listener drops it too).
    fn close(
        &mut self,
        key: &Key,
        mut s: Stream,
        ts: Timestamp,
        out: &mut Vec<SyslogDatagram>,
        last_message: bool,
    ) {
        if self
            .ended
            .insert(*key, s.base.wrapping_add(s.next))
            .is_none()
        {
            self.ended_order.push_back(*key);
            if self.ended_order.len() > MAX_STREAMS
                && let Some(old) = self.ended_order.pop_front()
            {
                self.ended.remove(&old);
            }
        }
        if s.dead {
            return;
        }
        let c = &mut self.counters;
        let mut to = Out {
            ts,
            src: key.src,
            out,
        };
        s.give_up_holes(c, &mut to);
        s.frame(c, &mut to);
        // Data up to a FIN seen but never captured: a hole at the end.
        if let Some(f) = s.fin
            && after(f, s.next)
        {
            s.skip_hole(c, f);
        }
        if !last_message || s.resync || s.dead {
            return;
        }
        while let Some(fr) = s.framer.finish(&mut s.buf) {
            match fr {
                Frame::Msg(m) => to.message(c, m),
                Frame::Oversized => c.oversized += 1,
                Frame::Fatal(_) => {
                    c.unframeable += 1;
                    break;
                }
                Frame::Resynced => c.resynced += 1,
                Frame::Unfinished => c.unfinished += 1,
            }
        }
    }

    /// Keeps the table under [`MAX_STREAMS`]: a stream that never carried data goes first,
    /// else the one idle longest.
    fn make_room(&mut self) {
        if self.streams.len() < MAX_STREAMS {
            return;
        }
        while let Some((k, n)) = self.fresh.pop_front() {
            if self
                .streams
                .get(&k)
                .is_some_and(|s| s.serial == n && !s.has_data)
            {
                self.streams.remove(&k);
                self.counters.evicted += 1;
                return;
            }
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
            claims_more: false,
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
                (at(0), 0, b"8 <1>hello6 <1>ab"),
                (at(17), 0, b"c\nsecond\nthi"),
                (at(29), tcp_flags::FIN, b"rd"),
            ],
        );
        assert_eq!(got, ["<1>hello", "<1>abc", "second", "third"]);
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
        let full = b"<1>one\n<1>two is longer\n";
        let mut cut = seg(at(0), 0, &full[..13]);
        cut.payload_len = full.len() as u32; // 13 bytes captured
        t.segment(Timestamp(1), &cut, &mut out);
        let after_cut = at(full.len() as u32);
        t.segment(Timestamp(2), &seg(after_cut, 0, b"<1>three\n"), &mut out);
        let got: Vec<_> = out.iter().map(|d| d.payload.clone()).collect();
        assert_eq!(got, [b"<1>one".to_vec(), b"<1>three".to_vec()]);
        assert_eq!(t.counters().gaps, 1);
    }

    /// `n` messages of about 500 bytes, framed LF or octet-counted, cut in 1400-byte segments.
    fn stream(n: usize, octets: bool) -> Vec<u8> {
        let mut s = Vec::new();
        for i in 0..n {
            let m = format!("<13>Jan  1 00:00:00 h app: msg{i:03} {}", "x".repeat(470));
            if octets {
                s.extend_from_slice(format!("{} {m}", m.len()).as_bytes());
            } else {
                s.extend_from_slice(m.as_bytes());
                s.push(b'\n');
            }
        }
        s
    }

    /// Feeds `bytes` in 1400-byte segments, leaving out segment `drop`, with a FIN on the
    /// last one; returns the numbers of the messages that came out.
    fn feed(bytes: &[u8], drop: usize, fin_first: bool) -> (Vec<usize>, TcpSyslogCounters) {
        let mut t = TcpSyslog::default();
        let mut out = Vec::new();
        t.segment(Timestamp(0), &seg(ISN, tcp_flags::SYN, b""), &mut out);
        let chunks: Vec<(usize, &[u8])> = bytes
            .chunks(1400)
            .enumerate()
            .map(|(i, c)| (i * 1400, c))
            .collect();
        let last = chunks.len() - 1;
        let mut order: Vec<usize> = (0..chunks.len()).filter(|&i| i != drop).collect();
        if fin_first {
            // The FIN segment is captured before the two before it.
            order.retain(|&i| i != last);
            order.insert(order.len() - 2, last);
        }
        for (n, i) in order.into_iter().enumerate() {
            let (off, c) = chunks[i];
            let flags = if i == last { tcp_flags::FIN } else { 0 };
            t.segment(
                Timestamp(n as i64 + 1),
                &seg(at(off as u32), flags, c),
                &mut out,
            );
        }
        t.finish(Timestamp(1_000_000), &mut out);
        let nums = out
            .iter()
            .map(|d| {
                let text = String::from_utf8_lossy(&d.payload).into_owned();
                let i = text.find("msg").unwrap_or_else(|| panic!("{text}"));
                text[i + 3..i + 6].parse().unwrap()
            })
            .collect();
        (nums, t.counters())
    }

    #[test]
    fn a_hole_that_never_fills_loses_only_the_messages_it_cut() {
        for octets in [false, true] {
            let bytes = stream(200, octets);
            let (got, c) = feed(&bytes, 3, false);
            // Segment 3 holds bytes 4200..5600: messages 8 to 11 touch it (about 500 bytes each).
            assert!(
                got.len() >= 195,
                "octets {octets}: {} of 200: {got:?}",
                got.len()
            );
            assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
            assert!(
                got.contains(&7) && got.contains(&12) && got.contains(&199),
                "{got:?}"
            );
            assert_eq!(c.gaps, 1, "octets {octets}");
            assert_eq!(c.messages as usize, got.len());
        }
    }

    #[test]
    fn after_a_hole_an_octet_count_is_told_from_the_digits_that_end_a_message() {
        let mut bytes = Vec::new();
        for i in 0..200 {
            let m = format!(
                "<13>Jan  1 00:00:00 h sshd: msg{i:03} {} port 22",
                "x".repeat(450)
            );
            bytes.extend_from_slice(format!("{} {m}", m.len()).as_bytes());
        }
        let mut t = TcpSyslog::default();
        let mut out = Vec::new();
        t.segment(Timestamp(0), &seg(ISN, tcp_flags::SYN, b""), &mut out);
        for (i, c) in bytes.chunks(1400).enumerate() {
            if i != 3 {
                t.segment(Timestamp(1), &seg(at((i * 1400) as u32), 0, c), &mut out);
            }
        }
        t.finish(Timestamp(2), &mut out);
        assert!(out.len() >= 195, "{} of 200", out.len());
        assert!(
            out.iter()
                .all(|d| d.payload.starts_with(b"<13>") && d.payload.ends_with(b"port 22"))
        );
    }

    #[test]
    fn a_fin_before_the_data_it_ends_waits_for_it() {
        let bytes = stream(20, false);
        let (got, c) = feed(&bytes, usize::MAX, true);
        assert_eq!(got, (0..20).collect::<Vec<_>>());
        assert_eq!(c.gaps, 0);
        // And with a hole still open at the FIN: given up when the capture ends.
        let (got, _) = feed(&bytes, 2, true);
        assert!(got.contains(&0) && got.contains(&19), "{got:?}");
    }

    #[test]
    fn a_reset_drops_the_unfinished_message_and_a_repeated_syn_is_the_same_connection() {
        let mut t = TcpSyslog::default();
        let got = run(
            &mut t,
            &[
                (ISN, tcp_flags::SYN, b""),
                (at(0), 0, b"<1>one\n"),
                (ISN, tcp_flags::SYN, b""),
                (at(7), 0, b"<1>two\n<1>th"),
                (at(19), tcp_flags::RST, b"re"),
            ],
        );
        assert_eq!(got, ["<1>one", "<1>two"]);
    }

    #[test]
    fn a_missing_tail_before_a_fin_drops_its_message_and_a_longer_retransmission_wins() {
        let mut t = TcpSyslog::default();
        let mut out = Vec::new();
        t.segment(Timestamp(0), &seg(ISN, tcp_flags::SYN, b""), &mut out);
        t.segment(Timestamp(1), &seg(at(0), 0, b"<1>one\n<1>tw"), &mut out);
        t.segment(Timestamp(2), &seg(at(20), tcp_flags::FIN, b""), &mut out);
        t.finish(Timestamp(3), &mut out);
        let got: Vec<_> = out.iter().map(|d| d.payload.clone()).collect();
        assert_eq!(got, [b"<1>one".to_vec()]);
        assert_eq!(t.counters().gaps, 1);
        let mut t = TcpSyslog::default();
        let got = run(
            &mut t,
            &[
                (ISN, tcp_flags::SYN, b""),
                (at(0), 0, b"<1>a\n"),
                (at(10), 0, b"<1>c"),
                (at(10), 0, b"<1>c\n<1>d\n"),
                (at(5), 0, b"<1>b\n"),
                (at(20), tcp_flags::FIN, b"<1>e\n"),
            ],
        );
        assert_eq!(got, ["<1>a", "<1>b", "<1>c", "<1>d", "<1>e"]);
    }

    #[test]
    fn a_retransmission_after_the_end_is_not_read_twice() {
        let mut t = TcpSyslog::default();
        let got = run(
            &mut t,
            &[
                (100, tcp_flags::FIN, b"<1>a\n"),
                (100, tcp_flags::FIN, b"<1>a\n"),
                (105, 0, b"<1>b\n"),
            ],
        );
        assert_eq!(got, ["<1>a", "<1>b"]);
    }

    #[test]
    fn tiny_segments_beyond_a_hole_are_bounded_by_count_too() {
        let mut t = TcpSyslog::default();
        let mut out = Vec::new();
        t.segment(Timestamp(0), &seg(ISN, tcp_flags::SYN, b""), &mut out);
        for i in 0..10_000u32 {
            t.segment(Timestamp(1), &seg(at(1 + 2 * i), 0, b"x"), &mut out);
        }
        let s = t.streams.values().next().unwrap();
        assert!(
            s.ahead.len() <= MAX_AHEAD / HELD_OVERHEAD,
            "{}",
            s.ahead.len()
        );
    }

    #[test]
    fn a_syn_scan_does_not_evict_streams_that_carry_data() {
        let mut t = TcpSyslog::default();
        let mut out = Vec::new();
        t.segment(Timestamp(0), &seg(ISN, tcp_flags::SYN, b""), &mut out);
        t.segment(Timestamp(1), &seg(at(0), 0, b"<1>one\n"), &mut out);
        for i in 0..(3 * MAX_STREAMS as u32) {
            let mut s = seg(7, tcp_flags::SYN, b"");
            s.sport = (i % 60000) as u16 + 1;
            s.src = IpAddr::from((i / 60000 + 100).to_be_bytes());
            t.segment(Timestamp(i64::from(i) + 2), &s, &mut out);
        }
        t.segment(Timestamp(1 << 40), &seg(at(7), 0, b"<1>two\n"), &mut out);
        let got: Vec<_> = out.iter().map(|d| d.payload.clone()).collect();
        assert_eq!(got, [b"<1>one".to_vec(), b"<1>two".to_vec()]);
        assert_eq!(t.streams.len(), MAX_STREAMS);
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
                (at(0), 0, b"9999999999 <x\n"),
                (at(14), 0, b"more\n"),
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
