//! The flow table: packets in, flow notices out. Sans-I/O and driven only by packet stamps.
//!
//! Flows are bidirectional and keyed by (outer VLAN, inner VLAN, protocol, the two endpoints).
//! The originator is the sender of the first packet seen, except that a first packet which is a
//! TCP SYN+ACK makes its *receiver* the originator (the handshake's SYN was missed).
//!
//! Time only moves when the caller says so (a packet stamp, [`FlowTable::advance`] or
//! [`FlowTable::finish`]). Timers sit in a coarse wheel (one bucket per millisecond) holding one
//! entry per flow; when a bucket comes due each flow in it is either ended or rescheduled at its
//! real deadline, so a packet costs one hash lookup and no timer work.
//!
//! Memory is bounded by [`FlowConfig::max_flows`]: a new flow that finds the table full evicts
//! the flow closest to its timeout (a stale wheel entry is first moved to its flow's deadline),
//! and the eviction is counted.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;

use cepheus_core::time::{Duration, Timestamp};

use super::decode::{PacketInfo, proto, tcp_flags};

/// Timeouts and limits of the flow table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowConfig {
    /// TCP flow idle this long (strictly more) ends; Zeek's `tcp_inactivity_timeout` (5 min).
    pub tcp_idle: Duration,
    /// A TCP attempt (only SYNs from the originator, nothing back) ends after this much
    /// silence: 35 s, over the longest gap of Linux's default SYN retries (1, 2, 4, 8, 16 and
    /// 32 s), so one connect() that is never answered is one attempt, not two.
    pub tcp_attempt: Duration,
    /// After FIN from both sides or a RST, the flow lingers this long to collect the last ACKs.
    pub tcp_close_linger: Duration,
    /// UDP flow idle timeout (Zeek's `udp_inactivity_timeout`, 1 min).
    pub udp_idle: Duration,
    /// Idle timeout of ICMP and other protocols (1 min).
    pub other_idle: Duration,
    /// A flow older than this is ended (`active_timeout`) and its next packet starts a new flow.
    pub active: Duration,
    /// Most flows kept at once; one more evicts the flow closest to its timeout.
    pub max_flows: usize,
}

impl Default for FlowConfig {
    fn default() -> Self {
        const S: i64 = 1_000_000_000;
        FlowConfig {
            tcp_idle: Duration(300 * S),
            tcp_attempt: Duration(35 * S),
            tcp_close_linger: Duration(5 * S),
            udp_idle: Duration(60 * S),
            other_idle: Duration(60 * S),
            active: Duration(3600 * S),
            max_flows: 1_000_000,
        }
    }
}

/// Why a flow ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EndReason {
    /// TCP closed by FIN from both sides or by a RST (after the linger).
    Closed,
    /// No packet for the idle timeout of its protocol and state.
    Idle,
    /// Older than the active timeout.
    Active,
    /// Evicted to make room (table full).
    Evicted,
    /// The capture ended (end of file, stop of a live capture).
    CaptureEnd,
    /// A new connection took its ports: a SYN from the originator with another initial
    /// sequence number, though no close was seen (Zeek's port reuse).
    Reused,
}

impl EndReason {
    /// The spelling in JSON output.
    pub const fn name(self) -> &'static str {
        match self {
            EndReason::Closed => "closed",
            EndReason::Idle => "idle_timeout",
            EndReason::Active => "active_timeout",
            EndReason::Evicted => "evicted",
            EndReason::CaptureEnd => "capture_end",
            EndReason::Reused => "reused",
        }
    }
}

/// Packet and byte counts of one direction of a flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirCounts {
    /// Packets.
    pub pkts: u64,
    /// IP-level bytes (IP header and everything after it, as the IP header says).
    pub ip_bytes: u64,
    /// Frame bytes as on the wire (pcap original length); tshark's `conv` Bytes.
    pub frame_bytes: u64,
    /// Transport payload bytes: TCP from sequence numbers (a retransmission once, as Zeek),
    /// other protocols as the headers say.
    pub payload_bytes: u64,
}

/// TCP flags seen from one side, for the connection state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SideFlags {
    /// A SYN without ACK.
    pub syn: bool,
    /// A SYN with ACK.
    pub synack: bool,
    /// A FIN.
    pub fin: bool,
    /// A RST.
    pub rst: bool,
    /// Every TCP flag its packets carried (their flags bytes ORed): what `orig_flags` and
    /// `resp_flags` spell ([`flag_letters`]).
    pub all: u8,
}

/// TCP flags as letters, in the header's order from its high bit (Wireshark's
/// `tcp.flags.str`): `C` CWR, `E` ECE, `U` URG, `A` ACK, `P` PSH, `R` RST, `S` SYN, `F` FIN;
/// none is the empty text (a NULL probe, or a flow not TCP). Spelt once per flags byte.
pub fn flag_letters(bits: u8) -> &'static str {
    static SPELT: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        const LETTERS: [(u8, char); 8] = [
            (0x80, 'C'),
            (0x40, 'E'),
            (0x20, 'U'),
            (0x10, 'A'),
            (0x08, 'P'),
            (0x04, 'R'),
            (0x02, 'S'),
            (0x01, 'F'),
        ];
        (0..=255u8)
            .map(|bits| {
                LETTERS
                    .iter()
                    .filter(|&&(b, _)| bits & b != 0)
                    .map(|&(_, c)| c)
                    .collect()
            })
            .collect()
    });
    SPELT.get(usize::from(bits)).map_or("", String::as_str)
}

/// A flow as the table knows it (a copy is handed out with every notice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// Stable id: a hash of the first packet's stamp and the flow's endpoints.
    pub id: u64,
    /// Originator address.
    pub src: IpAddr,
    /// Responder address.
    pub dst: IpAddr,
    /// Originator port (0 without ports).
    pub sport: u16,
    /// Responder port (for ICMP the type of the first packet).
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
    /// Outer VLAN id (0 untagged).
    pub vlan_outer: u16,
    /// Innermost VLAN id (0 untagged).
    pub vlan: u16,
    /// First packet stamp.
    pub first: Timestamp,
    /// Last packet stamp.
    pub last: Timestamp,
    /// Originator to responder.
    pub orig: DirCounts,
    /// Responder to originator.
    pub resp: DirCounts,
    /// TCP flags seen from the originator.
    pub orig_flags: SideFlags,
    /// TCP flags seen from the responder.
    pub resp_flags: SideFlags,
}

impl FlowRecord {
    /// Time from first to last packet.
    pub fn duration(&self) -> Duration {
        self.last.since(self.first)
    }

    /// The protocol's name in events: `tcp`, `udp`, `icmp`, `icmpv6` or the number as text.
    pub fn proto_name(&self) -> String {
        match self.proto {
            proto::TCP => "tcp".into(),
            proto::UDP => "udp".into(),
            proto::ICMP => "icmp".into(),
            proto::ICMPV6 => "icmpv6".into(),
            n => n.to_string(),
        }
    }

    /// The connection state in Zeek's conn_state spelling (UDP as Zeek: `SF` both ways, `S0`
    /// only the originator, `SHR` only the responder; other protocols `OTH`).
    pub fn state(&self) -> &'static str {
        if self.proto == proto::UDP {
            // Zeek's UDP states: each side active once it sent anything.
            return match (self.orig.pkts > 0, self.resp.pkts > 0) {
                (true, true) => "SF",
                (true, false) => "S0",
                (false, true) => "SHR",
                (false, false) => "OTH",
            };
        }
        if self.proto != proto::TCP {
            // As Zeek: ICMP and every other protocol have no connection states.
            return "OTH";
        }
        let (o, r) = (self.orig_flags, self.resp_flags);
        // Zeek's rejection when both reset: no data either way.
        let no_data = self.orig.payload_bytes == 0 && self.resp.payload_bytes == 0;
        if o.syn {
            if r.synack || r.syn {
                // As Zeek's conn_state: the responder's reset first; both reset with no data
                // either way is a rejection.
                if r.rst {
                    if o.rst && no_data { "REJ" } else { "RSTR" }
                } else if o.rst {
                    "RSTO"
                } else if o.fin && r.fin {
                    "SF"
                } else if o.fin {
                    "S2"
                } else if r.fin {
                    "S3"
                } else {
                    "S1"
                }
            } else if r.rst {
                "REJ"
            } else if o.rst {
                "RSTOS0"
            } else if o.fin {
                "SH"
            } else if self.resp.pkts == 0 {
                "S0"
            } else {
                "OTH"
            }
        } else {
            // No SYN from the originator: picked up mid-stream (Zeek's partial endpoints, which
            // count as inactive), or its SYN was missed and the responder's SYN-ACK seen (then
            // the responder is active). Zeek's conn_state on those endpoint states.
            let resp_active = r.synack;
            // Zeek's originator is inactive unless it reset, closed, or answered a SYN-ACK.
            let orig_inactive = !(o.rst || o.fin || (r.synack && self.orig.pkts > 0));
            if r.rst {
                if o.rst && no_data {
                    "REJ"
                } else if orig_inactive {
                    "RSTRH"
                } else {
                    "RSTR"
                }
            } else if o.rst {
                if resp_active { "RSTO" } else { "OTH" }
            } else if o.fin && r.fin {
                "SF"
            } else if o.fin {
                if resp_active { "S2" } else { "SH" }
            } else if r.fin {
                "SHR"
            } else {
                "OTH"
            }
        }
    }

    /// True for a failed TCP attempt: a SYN never answered by a SYN-ACK, i.e. no answer (`S0`),
    /// rejected (`REJ`), or given up by the originator before any answer (`RSTOS0`, `SH`; a
    /// scanner such as masscan resets its own probes).
    pub fn is_failed_attempt(&self) -> bool {
        self.proto == proto::TCP && matches!(self.state(), "S0" | "REJ" | "RSTOS0" | "SH")
    }
}

/// What the table reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeKind {
    /// The first packet of a new flow.
    Start,
    /// The flow ended (emitted before [`NoticeKind::AttemptFailed`] for the same flow).
    End(EndReason),
    /// A TCP attempt ended unanswered (S0) or rejected (REJ); follows its `End`.
    AttemptFailed(EndReason),
}

/// One report of the table: a kind, a snapshot of the flow, and the table's clock when made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowNotice {
    /// What happened.
    pub kind: NoticeKind,
    /// The flow at that moment.
    pub flow: FlowRecord,
    /// The table's clock when the notice was made (the arrival stamp of the event).
    pub at: Timestamp,
}

/// Counters of the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Flows created.
    pub flows: u64,
    /// Flows evicted because the table was full.
    pub evicted: u64,
    /// Flows currently in the table.
    pub active: u64,
    /// Packets stamped earlier than the table's clock (counted, processed at the clock).
    pub out_of_order: u64,
    /// Non-first IP fragments whose first fragment (the one with the ports) never came within
    /// [`ORPHAN_WAIT`] (or was pushed out of the bounded wait): counted into no flow.
    pub orphan_fragments: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FlowKey {
    vlan_outer: u16,
    vlan: u16,
    proto: u8,
    a: IpAddr,
    b: IpAddr,
    pa: u16,
    pb: u16,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    rec: FlowRecord,
    key: FlowKey,
    /// The originator is key endpoint `a`.
    orig_is_a: bool,
    /// When FIN both ways or RST was seen.
    closed_at: Option<Timestamp>,
    /// The sequence number of the originator's first SYN (TCP), when one was seen.
    isn: Option<u32>,
    /// TCP: how far each direction's data reached (originator, responder), for its payload
    /// bytes counted as Zeek counts them, from sequence numbers (a retransmission once).
    seq: [Option<SeqReach>; 2],
}

/// How far one direction of a TCP flow has sent data: from `base` (its first data byte's
/// sequence number), `top` bytes (64 bits: a flow may pass 4 GiB).
#[derive(Clone, Copy, Debug)]
struct SeqReach {
    base: u32,
    top: u64,
}

impl SeqReach {
    /// The farthest a segment may lie from the data so far and still count (beyond, a
    /// sequence number that is no continuation of these: garbage, or another connection).
    const FAR: i64 = 1 << 30;

    /// A segment of `len` bytes whose data begins at sequence number `start`: the reach
    /// grows by what it brings past the top (a retransmission or an old segment, nothing).
    fn take(&mut self, start: u32, len: u32) {
        // (A segment without data brings none, whatever its number: the ACKs after a FIN
        // are one past the data, the FIN's own sequence number.)
        if len == 0 {
            return;
        }
        let at = start.wrapping_sub(self.base.wrapping_add(self.top as u32)) as i32;
        let past = i64::from(at) + i64::from(len);
        if past > 0 && i64::from(at) < Self::FAR {
            self.top += past as u64;
        }
    }
}

/// Fragment key: source, destination, protocol, IP identification.
type FragKey = (IpAddr, IpAddr, u8, u32);

/// UDP services of port 1024 or more that answer clients on ephemeral ports (Zeek's
/// `likely_server_ports` for UDP, and syslog's own): OpenVPN, RADIUS, SSDP, GTP, STUN, Teredo,
/// IPsec NAT-T, VXLAN, SIP, mDNS, LLMNR, syslog (5514: cepheus's default), Geneve, syslog over
/// DTLS. Sorted (a binary search).
const UDP_SERVICE_PORTS: [u16; 16] = [
    1194, 1812, 1813, 1900, 2123, 2152, 3478, 3544, 4500, 4789, 5060, 5353, 5355, 5514, 6081, 6514,
];

/// Whether a UDP port is a service's: below 1024, or a known service above (see
/// [`UDP_SERVICE_PORTS`]). A datagram first seen from a service port to a port that is none is
/// the service's reply, and the flow is turned round to its client.
fn udp_service_port(port: u16) -> bool {
    port < 1024 || UDP_SERVICE_PORTS.binary_search(&port).is_ok()
}

/// Most first fragments remembered to give later fragments their ports.
const MAX_FRAGS: usize = 4096;

/// How long (capture time) a fragment that came before its datagram's first fragment waits
/// for it: the first brings the ports, and the fragment joins that flow.
pub const ORPHAN_WAIT: Duration = Duration(30 * SEC);

/// Whether an entry of the order of waiting fragments still names a datagram waiting since
/// then (not one whose first came, nor a later one of the same key).
fn still_waiting(orphans: &HashMap<FragKey, Orphan>, (k, since): &(FragKey, Timestamp)) -> bool {
    orphans.get(k).is_some_and(|o| o.since == *since)
}

/// Fragments that came before their first fragment, summed per datagram.
#[derive(Clone, Copy, Debug)]
struct Orphan {
    since: Timestamp,
    pkts: u64,
    ip_bytes: u64,
    frame_bytes: u64,
    payload_bytes: u64,
}

/// The bidirectional flow table.
#[derive(Debug)]
pub struct FlowTable {
    cfg: FlowConfig,
    index: HashMap<FlowKey, u32>,
    slots: Vec<Option<Slot>>,
    gens: Vec<u32>,
    free: Vec<u32>,
    /// Bucket (millisecond, see [`BUCKET`]) -> (slot, generation) to check then.
    wheel: BTreeMap<i64, Vec<(u32, u32)>>,
    wheel_len: usize,
    frags: HashMap<FragKey, (u16, u16)>,
    frag_order: VecDeque<FragKey>,
    /// Fragments waiting for their first fragment (at most [`MAX_FRAGS`] datagrams, for
    /// [`ORPHAN_WAIT`]), and the order they began waiting in.
    orphans: HashMap<FragKey, Orphan>,
    /// (datagram, when it began waiting): an entry whose datagram no longer waits since
    /// then (its first came) is stale, and skipped.
    orphan_order: VecDeque<(FragKey, Timestamp)>,
    now: Timestamp,
    /// The flows still to end when the capture ended (see [`FlowTable::finish_some`]).
    finishing: Option<Vec<(Timestamp, u64, u32)>>,
    /// The latest `at` of a notice made: a flow timed out is stamped when its timer ran
    /// out, but never before a notice already made (arrival order stays non-decreasing).
    last_at: Timestamp,
    stats: TableStats,
}

const SEC: i64 = 1_000_000_000;

/// The wheel's bucket: a flow's timer is looked at within this of its deadline, so a flow
/// whose timer ran out ends before a later packet's notices (stamped at its deadline, not a
/// second late behind another flow's start: notices are made in time order).
const BUCKET: i64 = 1_000_000;

impl FlowTable {
    /// An empty table.
    pub fn new(cfg: FlowConfig) -> Self {
        FlowTable {
            cfg: FlowConfig {
                max_flows: cfg.max_flows.clamp(1, u32::MAX as usize - 1),
                ..cfg
            },
            index: HashMap::new(),
            slots: Vec::new(),
            gens: Vec::new(),
            free: Vec::new(),
            wheel: BTreeMap::new(),
            wheel_len: 0,
            frags: HashMap::new(),
            frag_order: VecDeque::new(),
            orphans: HashMap::new(),
            orphan_order: VecDeque::new(),
            now: Timestamp::MIN,
            finishing: None,
            last_at: Timestamp::MIN,
            stats: TableStats::default(),
        }
    }

    /// The table's configuration.
    pub fn config(&self) -> &FlowConfig {
        &self.cfg
    }

    /// The counters so far.
    pub fn stats(&self) -> TableStats {
        TableStats {
            active: self.index.len() as u64,
            ..self.stats
        }
    }

    /// The table's clock: the latest stamp seen.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Moves the clock to `now` (never backwards) and ends every flow whose timer ran out.
    pub fn advance(&mut self, now: Timestamp, out: &mut Vec<FlowNotice>) {
        if now > self.now {
            self.now = now;
        }
        let now = self.now;
        let due = now.0.div_euclid(BUCKET);
        while let Some(entry) = self.wheel.first_entry() {
            if *entry.key() > due {
                break;
            }
            let items = entry.remove();
            self.wheel_len = self.wheel_len.saturating_sub(items.len());
            let mut due = Vec::new();
            for (slot, gen_) in items {
                let Some(s) = self.entry_slot(slot, gen_) else {
                    continue;
                };
                let deadline = self.deadline(s);
                if now.0 > deadline.0 {
                    due.push((deadline, s.rec.id, slot, self.expiry_reason(s)));
                } else {
                    self.schedule(slot, deadline);
                }
            }
            // Ended in the order their timers ran out, each stamped then (as a live table
            // ticking on its own ends them), not when a later packet revealed them.
            due.sort_unstable_by_key(|&(d, id, _, _)| (d, id));
            for (deadline, _, slot, r) in due {
                self.end_slot_at(slot, r, deadline, out);
            }
        }
    }

    /// Feeds one decoded packet stamped `ts`; notices for ended and started flows go to `out`.
    pub fn process(
        &mut self,
        ts: Timestamp,
        frame_len: u32,
        pkt: &PacketInfo<'_>,
        out: &mut Vec<FlowNotice>,
    ) {
        if ts < self.now {
            self.stats.out_of_order += 1;
        }
        self.advance(ts, out);
        let ts = self.now;
        self.expire_orphans(ts);
        let Some((sport, dport)) = self.ports(pkt) else {
            // A fragment before its first: it waits for the ports.
            self.hold_orphan(ts, frame_len, pkt);
            return;
        };
        let (key, from_a) = make_key(pkt, sport, dport);
        let flags = pkt.tcp_flags;
        let is_tcp = pkt.proto == proto::TCP;

        let mut slot_id = self.index.get(&key).copied();
        // A finished TCP flow meeting a fresh SYN, or an over-age flow: end it, start anew.
        if let Some(id) = slot_id
            && let Some(s) = self.slots.get(id as usize).and_then(|s| s.as_ref())
        {
            let syn_only = is_tcp && flags & (tcp_flags::SYN | tcp_flags::ACK) == tcp_flags::SYN;
            // A SYN from the originator with another initial sequence number: a new
            // connection on the same ports, though the old one's close was not seen (a NAT,
            // a capture that missed it). A retransmitted SYN keeps its number. On a flow
            // picked up mid-stream (no SYN seen), a SYN that does not begin where the
            // originator's data began is one too (Zeek compares with the first number seen).
            let reused = syn_only
                && from_a == s.orig_is_a
                && match (s.isn, s.seq[0]) {
                    (Some(isn), _) => isn != pkt.tcp_seq,
                    (None, Some(r)) => r.base != pkt.tcp_seq.wrapping_add(1),
                    (None, None) => false,
                };
            if syn_only && s.closed_at.is_some() {
                self.end_slot(id, EndReason::Closed, out);
                slot_id = None;
            } else if reused {
                self.end_slot(id, EndReason::Reused, out);
                slot_id = None;
            } else if ts.0 > self.deadline(s).0 {
                // Past its deadline, though its wheel bucket (milliseconds) is not due yet:
                // the timeout is exact, wherever the packets fall within the buckets.
                let reason = self.expiry_reason(s);
                let deadline = self.deadline(s);
                self.end_slot_at(id, reason, deadline, out);
                slot_id = None;
            } else if ts.since(s.rec.first) > self.cfg.active {
                self.end_slot(id, EndReason::Active, out);
                slot_id = None;
            }
        }
        let id = match slot_id {
            Some(id) => id,
            None => self.create(ts, key, from_a, pkt, sport, dport, out),
        };
        let Some(s) = self.slots.get_mut(id as usize).and_then(|s| s.as_mut()) else {
            return;
        };
        let from_orig = from_a == s.orig_is_a;
        let mut closed_now = false;
        let rec = &mut s.rec;
        rec.last = ts;
        let (dir, side) = if from_orig {
            (&mut rec.orig, &mut rec.orig_flags)
        } else {
            (&mut rec.resp, &mut rec.resp_flags)
        };
        dir.pkts += 1;
        dir.ip_bytes += u64::from(pkt.ip_len);
        dir.frame_bytes += u64::from(frame_len);
        if is_tcp {
            // Zeek's orig_bytes and resp_bytes: from sequence numbers, so a segment sent
            // again counts once. (Data begins after the SYN's own sequence number.) A segment
            // cut in IP fragments adds what each fragment carries.
            let start = pkt
                .tcp_seq
                .wrapping_add(u32::from(flags & tcp_flags::SYN != 0));
            let reach = s.seq[usize::from(!from_orig)].get_or_insert(SeqReach {
                base: start,
                top: 0,
            });
            if pkt.fragment.is_some() {
                reach.top += u64::from(pkt.payload_len);
            } else {
                reach.take(start, pkt.payload_len);
            }
            dir.payload_bytes = reach.top;
            if flags & tcp_flags::SYN != 0 {
                if flags & tcp_flags::ACK != 0 {
                    side.synack = true;
                } else {
                    side.syn = true;
                    if from_orig && s.isn.is_none() {
                        s.isn = Some(pkt.tcp_seq);
                    }
                }
            }
            side.fin |= flags & tcp_flags::FIN != 0;
            side.rst |= flags & tcp_flags::RST != 0;
            side.all |= flags;
            if s.closed_at.is_none()
                && (flags & tcp_flags::RST != 0 || (rec.orig_flags.fin && rec.resp_flags.fin))
            {
                s.closed_at = Some(ts);
                closed_now = true;
            }
        } else {
            dir.payload_bytes += u64::from(pkt.payload_len);
        }
        let started = rec.orig.pkts + rec.resp.pkts == 1;
        // The first fragment: the fragments of its datagram that came before it join here
        // (same source and destination, so the same direction); the flow began with the
        // earliest of them.
        if let Some(f) = pkt.fragment.filter(|f| f.first())
            && let Some(o) = self.orphans.remove(&(pkt.src, pkt.dst, pkt.proto, f.id))
        {
            let dir = if from_orig {
                &mut rec.orig
            } else {
                &mut rec.resp
            };
            dir.pkts += o.pkts;
            dir.ip_bytes += o.ip_bytes;
            dir.frame_bytes += o.frame_bytes;
            match &mut s.seq[usize::from(!from_orig)] {
                Some(reach) if is_tcp => {
                    reach.top += o.payload_bytes;
                    dir.payload_bytes = reach.top;
                }
                _ => dir.payload_bytes += o.payload_bytes,
            }
            rec.first = rec.first.min(o.since);
        }
        if started {
            // (Stamped with the flow's first packet; it arrives now.)
            out.push(FlowNotice {
                kind: NoticeKind::Start,
                flow: *rec,
                at: ts,
            });
            self.last_at = self.last_at.max(ts);
        }
        if closed_now {
            // The linger is shorter than the pending check: add a check at its end.
            self.schedule(id, ts.add(self.cfg.tcp_close_linger));
        }
    }

    /// Ends every flow (end of capture), in start order; the table is empty afterwards.
    pub fn finish(&mut self, out: &mut Vec<FlowNotice>) {
        while !self.finish_some(usize::MAX, out) {}
    }

    /// [`FlowTable::finish`] a part at a time: ends at most `max` flows (the oldest first) and
    /// says whether all are ended, so a capture that ends with a million flows open is not a
    /// million events at once.
    pub fn finish_some(&mut self, max: usize, out: &mut Vec<FlowNotice>) -> bool {
        let mut live = match self.finishing.take() {
            Some(l) => l,
            None => {
                let mut live: Vec<(Timestamp, u64, u32)> = self
                    .slots
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.as_ref().map(|s| (s.rec.first, s.rec.id, i as u32)))
                    .collect();
                // Newest first: taken from the end.
                live.sort_unstable_by(|a, b| b.cmp(a));
                live
            }
        };
        for _ in 0..max {
            let Some((_, _, slot)) = live.pop() else {
                break;
            };
            // A flow already closed (FIN both ways, or RST), waiting out its linger for the
            // last ACKs, ended as closed: only open flows end with the capture.
            let closed = self
                .slots
                .get(slot as usize)
                .is_some_and(|s| s.as_ref().is_some_and(|s| s.closed_at.is_some()));
            let reason = if closed {
                EndReason::Closed
            } else {
                EndReason::CaptureEnd
            };
            self.end_slot(slot, reason, out);
        }
        if !live.is_empty() {
            self.finishing = Some(live);
            return false;
        }
        self.wheel.clear();
        self.wheel_len = 0;
        // Fragments still waiting for their first never get a flow.
        while !self.orphans.is_empty() {
            self.give_up_orphan();
        }
        true
    }

    /// The earliest first-packet time of a flow still open or of fragments still waiting for
    /// their first: no flow ended later starts before it. `None` when nothing is open.
    pub fn oldest_open(&self) -> Option<Timestamp> {
        let flows = self.slots.iter().flatten().map(|s| s.rec.first);
        flows.chain(self.orphans.values().map(|o| o.since)).min()
    }

    /// The flows open now.
    pub fn open_flows(&self) -> usize {
        self.index.len()
    }

    /// A fragment whose first fragment has not come: summed with its datagram's others until
    /// it does.
    fn hold_orphan(&mut self, ts: Timestamp, frame_len: u32, pkt: &PacketInfo<'_>) {
        let Some(f) = pkt.fragment else {
            return;
        };
        let k = (pkt.src, pkt.dst, pkt.proto, f.id);
        if !self.orphans.contains_key(&k) {
            if self.orphans.len() >= MAX_FRAGS {
                self.give_up_orphan();
            }
            self.orphan_order.push_back((k, ts));
            // Entries of datagrams whose first came stay until they reach the front: behind
            // one still waiting (up to ORPHAN_WAIT) they would pile up, one per datagram.
            if self.orphan_order.len() > 2 * MAX_FRAGS {
                let orphans = &self.orphans;
                self.orphan_order.retain(|e| still_waiting(orphans, e));
                self.orphan_order.shrink_to(2 * MAX_FRAGS);
            }
        }
        let o = self.orphans.entry(k).or_insert(Orphan {
            since: ts,
            pkts: 0,
            ip_bytes: 0,
            frame_bytes: 0,
            payload_bytes: 0,
        });
        o.pkts += 1;
        o.ip_bytes += u64::from(pkt.ip_len);
        o.frame_bytes += u64::from(frame_len);
        o.payload_bytes += u64::from(pkt.payload_len);
    }

    /// Gives up the fragments that waited [`ORPHAN_WAIT`] for their first by `now`.
    fn expire_orphans(&mut self, now: Timestamp) {
        while let Some(&front) = self.orphan_order.front() {
            if !still_waiting(&self.orphans, &front) {
                self.orphan_order.pop_front();
            } else if now.since(front.1) > ORPHAN_WAIT {
                self.give_up_orphan();
            } else {
                break;
            }
        }
    }

    /// Gives up the datagram that began waiting first (stale entries, whose first came,
    /// are skipped), counted in `orphan_fragments`.
    fn give_up_orphan(&mut self) {
        while let Some(front) = self.orphan_order.pop_front() {
            if still_waiting(&self.orphans, &front)
                && let Some(o) = self.orphans.remove(&front.0)
            {
                self.stats.orphan_fragments += o.pkts;
                return;
            }
        }
    }

    /// The packet's ports (ICMP: the echo identifier); a non-first fragment gets its first
    /// fragment's, `None` when that has not come.
    fn ports(&mut self, pkt: &PacketInfo<'_>) -> Option<(u16, u16)> {
        let ports = match (pkt.icmp, pkt.icmp_echo_id) {
            // Echo request and reply share the identifier: on the requester's side, as a port
            // would be, so that a host pinging itself (source and destination the same) still
            // has a side for each. Other ICMP: one flow per host pair.
            (Some((0 | 129, _)), Some(id)) => (0, id),
            (Some(_), Some(id)) => (id, 0),
            (Some(_), None) => (0, 0),
            (None, _) => (pkt.sport, pkt.dport),
        };
        match pkt.fragment.map(|f| (f.id, f.first())) {
            Some((id, true)) => {
                let k = (pkt.src, pkt.dst, pkt.proto, id);
                if self.frags.len() >= MAX_FRAGS
                    && let Some(old) = self.frag_order.pop_front()
                {
                    self.frags.remove(&old);
                }
                if self.frags.insert(k, ports).is_none() {
                    self.frag_order.push_back(k);
                }
                Some(ports)
            }
            Some((id, false)) => self.frags.get(&(pkt.src, pkt.dst, pkt.proto, id)).copied(),
            None => Some(ports),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        ts: Timestamp,
        key: FlowKey,
        from_a: bool,
        pkt: &PacketInfo<'_>,
        sport: u16,
        dport: u16,
        out: &mut Vec<FlowNotice>,
    ) -> u32 {
        if self.index.len() >= self.cfg.max_flows {
            self.evict_one(out);
        }
        // SYN+ACK first: the receiver is the originator. A TCP flow picked up mid-stream (no
        // SYN; an ACK, as every segment after the handshake has, or a reset), or a UDP flow
        // whose request was not seen (one-way tap, asymmetric routing), from a service-looking
        // port to an ephemeral-looking one: the sender is the server, the receiver the
        // originator (Zeek's likely-server-port flip), so a server answering many clients
        // (DNS, NTP) is not an originator reaching many ports. Not a TCP scan from a service
        // port (nmap's `-g 53`): a FIN, NULL or Xmas probe carries neither, so the scanner
        // stays the originator (found by an audit: the scan rule saw nothing). A UDP probe
        // from a service port to a port that is none looks like a reply, as in Zeek. UDP
        // knows its services by name (Zeek's `likely_server_ports`), not by the ephemeral
        // range as TCP picked up mid-stream does: a UDP scan from a fixed source port such as
        // 12345 to high ports would otherwise turn every probe round (its targets
        // "originating" to port 12345) and the scan rule would see one port.
        let tcp = pkt.proto == proto::TCP;
        let udp = pkt.proto == proto::UDP;
        let synack =
            pkt.tcp_flags & (tcp_flags::SYN | tcp_flags::ACK) == (tcp_flags::SYN | tcp_flags::ACK);
        let server_ports = (sport < 1024 && dport >= 1024) || (sport < 32_768 && dport >= 32_768);
        let midstream_from_server = pkt.tcp_flags & tcp_flags::SYN == 0
            && pkt.tcp_flags & (tcp_flags::ACK | tcp_flags::RST) != 0
            && server_ports;
        let udp_reply = udp && udp_service_port(sport) && !udp_service_port(dport);
        let flip = (tcp && (synack || midstream_from_server)) || udp_reply;
        let (src, dst, sp, dp) = if flip {
            (pkt.dst, pkt.src, dport, sport)
        } else {
            (pkt.src, pkt.dst, sport, dport)
        };
        let dport_shown = match pkt.icmp {
            Some((t, _)) => u16::from(t),
            None => dp,
        };
        let sport_shown = if pkt.icmp.is_some() { 0 } else { sp };
        let rec = FlowRecord {
            id: stable_id(ts, &key),
            src,
            dst,
            sport: sport_shown,
            dport: dport_shown,
            proto: pkt.proto,
            vlan_outer: pkt.vlan_outer,
            vlan: pkt.vlan,
            first: ts,
            last: ts,
            orig: DirCounts::default(),
            resp: DirCounts::default(),
            orig_flags: SideFlags::default(),
            resp_flags: SideFlags::default(),
        };
        let slot = Slot {
            rec,
            key,
            orig_is_a: from_a != flip,
            closed_at: None,
            isn: None,
            seq: [None; 2],
        };
        let id = match self.free.pop() {
            Some(id) => {
                if let Some(s) = self.slots.get_mut(id as usize) {
                    *s = Some(slot);
                }
                id
            }
            None => {
                self.slots.push(Some(slot));
                self.gens.push(0);
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(key, id);
        self.stats.flows += 1;
        // First check after the shortest timeout that can apply; rescheduled as needed.
        let first_check = ts.add(
            self.cfg
                .tcp_close_linger
                .min(self.idle_for(pkt.proto, true)),
        );
        self.schedule(id, first_check);
        id
    }

    /// Ends the flow closest to its timeout, to make room. A flow's wheel entry may be older
    /// than its deadline (an entry is moved on only when it runs out: a session's first
    /// packet's entry stays first while later packets push its deadline on), so an entry whose
    /// flow ends later is moved to its deadline first, and the next one looked at: a flood of
    /// one-packet flows pushes out each other, not the long sessions (it did: the oldest entry
    /// was a session's).
    fn evict_one(&mut self, out: &mut Vec<FlowNotice>) {
        loop {
            let Some(mut entry) = self.wheel.first_entry() else {
                return;
            };
            let bucket = *entry.key();
            let items = entry.get_mut();
            let Some((slot, gen_)) = items.pop() else {
                entry.remove();
                continue;
            };
            if items.is_empty() {
                entry.remove();
            }
            self.wheel_len = self.wheel_len.saturating_sub(1);
            let Some(s) = self.entry_slot(slot, gen_) else {
                continue;
            };
            let deadline = self.deadline(s);
            if Self::bucket_of(deadline) > bucket {
                self.schedule(slot, deadline);
                continue;
            }
            self.stats.evicted += 1;
            self.end_slot(slot, EndReason::Evicted, out);
            return;
        }
    }

    /// The flow a wheel entry (`slot`, `gen_`) is for, if it is still that flow's (a slot
    /// freed or taken again since leaves its old entries stale).
    fn entry_slot(&self, slot: u32, gen_: u32) -> Option<&Slot> {
        if self.gens.get(slot as usize) != Some(&gen_) {
            return None;
        }
        self.slots.get(slot as usize)?.as_ref()
    }

    /// The wheel bucket a deadline is filed in: bucket b is processed once the clock reaches
    /// b, so a deadline is rounded up.
    fn bucket_of(at: Timestamp) -> i64 {
        at.0.div_euclid(BUCKET).saturating_add(1)
    }

    fn schedule(&mut self, slot: u32, at: Timestamp) {
        let Some(&gen_) = self.gens.get(slot as usize) else {
            return;
        };
        self.wheel
            .entry(Self::bucket_of(at))
            .or_default()
            .push((slot, gen_));
        self.wheel_len += 1;
        // At most two live entries per flow (its timer and a close-linger check): 3x leaves slack.
        if self.wheel_len > self.cfg.max_flows.saturating_mul(3).max(1024) {
            self.compact_wheel();
        }
    }

    fn compact_wheel(&mut self) {
        let gens = &self.gens;
        let slots = &self.slots;
        let mut len = 0;
        self.wheel.retain(|_, items| {
            items.retain(|(s, g)| {
                gens.get(*s as usize) == Some(g)
                    && slots.get(*s as usize).is_some_and(|x| x.is_some())
            });
            len += items.len();
            !items.is_empty()
        });
        self.wheel_len = len;
    }

    fn idle_for(&self, p: u8, attempt: bool) -> Duration {
        match p {
            proto::TCP if attempt => self.cfg.tcp_attempt,
            proto::TCP => self.cfg.tcp_idle,
            proto::UDP => self.cfg.udp_idle,
            _ => self.cfg.other_idle,
        }
    }

    /// When the flow in `s` ends if nothing more arrives (strictly after this instant).
    fn deadline(&self, s: &Slot) -> Timestamp {
        self.ending(s).0
    }

    /// Why the flow in `s` ends at its deadline: the timeout that runs out first (its close
    /// linger, its active limit or its idle time), not what the clock is past by now (a
    /// capture with a long gap is past every limit when the flow is looked at).
    fn expiry_reason(&self, s: &Slot) -> EndReason {
        self.ending(s).1
    }

    fn ending(&self, s: &Slot) -> (Timestamp, EndReason) {
        let r = &s.rec;
        let attempt = r.resp.pkts == 0 && !r.orig_flags.synack && r.orig_flags.syn;
        let idle = r.last.add(self.idle_for(r.proto, attempt));
        let active = r.first.add(self.cfg.active);
        let mut end = if active.0 < idle.0 {
            (active, EndReason::Active)
        } else {
            (idle, EndReason::Idle)
        };
        if let Some(c) = s.closed_at {
            let linger = r.last.max(c).add(self.cfg.tcp_close_linger);
            if linger.0 <= end.0.0 {
                end = (linger, EndReason::Closed);
            }
        }
        end
    }

    fn end_slot(&mut self, slot: u32, reason: EndReason, out: &mut Vec<FlowNotice>) {
        self.end_slot_at(slot, reason, self.now, out);
    }

    /// Ends a flow with its notices stamped `at` (when its timer ran out), kept between the
    /// last notice made and the clock.
    fn end_slot_at(
        &mut self,
        slot: u32,
        reason: EndReason,
        at: Timestamp,
        out: &mut Vec<FlowNotice>,
    ) {
        let Some(s) = self.slots.get_mut(slot as usize).and_then(|s| s.take()) else {
            return;
        };
        if let Some(g) = self.gens.get_mut(slot as usize) {
            *g = g.wrapping_add(1);
        }
        self.free.push(slot);
        self.index.remove(&s.key);
        let at = at.max(self.last_at).min(self.now);
        self.last_at = at;
        out.push(FlowNotice {
            kind: NoticeKind::End(reason),
            flow: s.rec,
            at,
        });
        if s.rec.is_failed_attempt() {
            out.push(FlowNotice {
                kind: NoticeKind::AttemptFailed(reason),
                flow: s.rec,
                at,
            });
        }
    }
}

fn make_key(pkt: &PacketInfo<'_>, sport: u16, dport: u16) -> (FlowKey, bool) {
    let from_a = (pkt.src, sport) <= (pkt.dst, dport);
    let (a, pa, b, pb) = if from_a {
        (pkt.src, sport, pkt.dst, dport)
    } else {
        (pkt.dst, dport, pkt.src, sport)
    };
    (
        FlowKey {
            vlan_outer: pkt.vlan_outer,
            vlan: pkt.vlan,
            proto: pkt.proto,
            a,
            b,
            pa,
            pb,
        },
        from_a,
    )
}

/// FNV-1a over the first stamp and the key: the same capture gives the same ids every run.
fn stable_id(ts: Timestamp, key: &FlowKey) -> u64 {
    let mut h = cepheus_core::fnv::Fnv::new();
    h.feed(&ts.0.to_le_bytes());
    h.feed(&key.vlan_outer.to_le_bytes());
    h.feed(&key.vlan.to_le_bytes());
    h.feed(&[key.proto]);
    for ip in [key.a, key.b] {
        match ip {
            IpAddr::V4(v) => h.feed(&v.octets()),
            IpAddr::V6(v) => h.feed(&v.octets()),
        }
    }
    h.feed(&key.pa.to_le_bytes());
    h.feed(&key.pb.to_le_bytes());
    h.finish()
}

/// An IPv4 packet (a 20-byte header) cut in two fragments with IP identification `id`: the
/// first `cut` bytes of its payload (a multiple of 8), then the rest. For the tests.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn two_fragments(whole: &[u8], id: u16, cut: usize) -> [Vec<u8>; 2] {
    let mut v4 = etherparse::Ipv4Header::from_slice(whole).unwrap().0;
    let body = &whole[20..];
    [(0, &body[..cut], true), (cut, &body[cut..], false)].map(|(off, chunk, more)| {
        v4.identification = id;
        v4.more_fragments = more;
        v4.fragment_offset = etherparse::IpFragOffset::try_new((off / 8) as u16).unwrap();
        v4.set_payload_len(chunk.len()).unwrap();
        v4.header_checksum = v4.calc_header_checksum();
        let mut f = v4.to_bytes().to_vec();
        f.extend_from_slice(chunk);
        f
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::decode::{Decoded, decode, linktype};
    use super::*;
    use etherparse::PacketBuilder;

    fn tcp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, f: &str) -> Vec<u8> {
        tcp_with(src, dst, sp, dp, f, 1, &[])
    }

    /// A TCP packet with flags `f` (`D`: with `data`), sequence number `seq`.
    fn tcp_with(
        src: [u8; 4],
        dst: [u8; 4],
        sp: u16,
        dp: u16,
        f: &str,
        seq: u32,
        data: &[u8],
    ) -> Vec<u8> {
        let mut b = PacketBuilder::ipv4(src, dst, 64).tcp(sp, dp, seq, 1000);
        if f.contains('S') {
            b = b.syn();
        }
        if f.contains('A') {
            b = b.ack(1);
        }
        if f.contains('F') {
            b = b.fin();
        }
        if f.contains('R') {
            b = b.rst();
        }
        let mut v = Vec::new();
        b.write(&mut v, data).unwrap();
        v
    }

    /// The flows the notices ended, in order.
    fn ended(out: &[FlowNotice]) -> Vec<FlowRecord> {
        out.iter()
            .filter(|n| matches!(n.kind, NoticeKind::End(_)))
            .map(|n| n.flow)
            .collect()
    }

    fn feed(t: &mut FlowTable, secs: f64, frame: &[u8], out: &mut Vec<FlowNotice>) {
        let Decoded::Ip(p) = decode(linktype::RAW, frame) else {
            panic!()
        };
        t.process(Timestamp((secs * 1e9) as i64), frame.len() as u32, &p, out);
    }

    const C: [u8; 4] = [10, 0, 0, 1];
    const S: [u8; 4] = [10, 0, 0, 2];

    /// Feeds a script of (seconds, from the client, flags) between C:4000 and S:80.
    fn play(t: &mut FlowTable, script: &[(f64, bool, &str)], out: &mut Vec<FlowNotice>) {
        for (at, from_c, f) in script {
            let fr = if *from_c {
                tcp(C, S, 4000, 80, f)
            } else {
                tcp(S, C, 80, 4000, f)
            };
            feed(t, *at, &fr, out);
        }
    }

    fn states(script: &[(f64, bool, &str)]) -> Vec<String> {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        play(&mut t, script, &mut out);
        t.finish(&mut out);
        ended(&out).iter().map(|f| f.state().to_string()).collect()
    }

    #[test]
    fn conn_states() {
        assert_eq!(states(&[(0.0, true, "S")]), ["S0"]);
        assert_eq!(states(&[(0.0, true, "S"), (0.1, false, "RA")]), ["REJ"]);
        assert_eq!(
            states(&[
                (0.0, true, "S"),
                (0.1, false, "SA"),
                (0.2, true, "A"),
                (0.3, true, "FA"),
                (0.4, false, "FA"),
                (0.5, true, "A")
            ]),
            ["SF"]
        );
        assert_eq!(states(&[(0.0, true, "S"), (0.1, false, "SA")]), ["S1"]);
        assert_eq!(
            states(&[(0.0, true, "S"), (0.1, false, "SA"), (0.2, true, "R")]),
            ["RSTO"]
        );
        assert_eq!(states(&[(0.0, true, "S"), (0.1, true, "R")]), ["RSTOS0"]);
        assert_eq!(states(&[(0.0, false, "SA")]), ["OTH"]);
        assert_eq!(states(&[(0.0, false, "SA"), (0.1, false, "R")]), ["RSTRH"]);
        assert_eq!(states(&[(0.0, true, "A")]), ["OTH"]);
    }

    /// The responder's reset decides first, as in Zeek's conn_state: after a handshake, both
    /// ends reset with no data is a rejection (and a failed attempt); with data, the
    /// responder's reset is `RSTR` even when the originator reset too.
    #[test]
    fn a_responders_reset_decides_the_state_first() {
        let hs = [(0.0, true, "S"), (0.1, false, "SA"), (0.2, true, "A")];
        let with = |rest: &[(f64, bool, &'static str)]| {
            let mut v = hs.to_vec();
            v.extend_from_slice(rest);
            states(&v)
        };
        assert_eq!(with(&[(0.3, false, "R"), (0.4, true, "R")]), ["REJ"]);
        assert_eq!(with(&[(0.3, true, "R"), (0.4, false, "R")]), ["REJ"]);
        assert_eq!(with(&[(0.3, false, "R")]), ["RSTR"]);
        assert_eq!(with(&[(0.3, true, "R")]), ["RSTO"]);
        // With data: the responder's reset stands, whoever reset first.
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        play(&mut t, &hs, &mut out);
        feed(
            &mut t,
            0.3,
            &tcp_with(C, S, 4000, 80, "A", 2, b"data"),
            &mut out,
        );
        feed(&mut t, 0.4, &tcp(C, S, 4000, 80, "R"), &mut out);
        feed(&mut t, 0.5, &tcp(S, C, 80, 4000, "R"), &mut out);
        t.finish(&mut out);
        let ends = ended(&out);
        assert_eq!(ends.len(), 1);
        assert_eq!(ends[0].state(), "RSTR");
        assert!(!ends[0].is_failed_attempt());
    }

    /// A SYN from the originator with another initial sequence number starts a new flow on
    /// the same ports (the old one ends as `reused`), though no close was seen; a
    /// retransmitted SYN (same number) does not.
    #[test]
    fn a_new_syn_on_the_same_ports_is_a_new_flow() {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        let syn = |seq| tcp_with(C, S, 40018, 80, "S", seq, &[]);
        feed(&mut t, 0.0, &syn(100), &mut out);
        feed(&mut t, 0.5, &syn(100), &mut out);
        feed(&mut t, 1.0, &tcp(S, C, 80, 40018, "SA"), &mut out);
        feed(
            &mut t,
            1.1,
            &tcp_with(C, S, 40018, 80, "A", 101, &[]),
            &mut out,
        );
        feed(&mut t, 11.0, &syn(90_000), &mut out);
        feed(&mut t, 11.1, &tcp(S, C, 80, 40018, "SA"), &mut out);
        t.finish(&mut out);
        let ends: Vec<(&str, u64, &str)> = out
            .iter()
            .filter_map(|n| match n.kind {
                NoticeKind::End(r) => Some((n.flow.state(), n.flow.orig.pkts, r.name())),
                _ => None,
            })
            .collect();
        assert_eq!(ends, [("S1", 3, "reused"), ("S1", 1, "capture_end")]);
    }

    /// TCP payload bytes are counted from sequence numbers, as Zeek counts them: a segment
    /// sent twice counts once, an old one nothing; data picked up mid-stream counts from
    /// there, and a gap in the capture counts as sent.
    #[test]
    fn tcp_payload_is_counted_from_sequence_numbers() {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        let seg = |seq: u32, n: usize| tcp_with(C, S, 4000, 80, "A", seq, &vec![b'x'; n]);
        feed(
            &mut t,
            0.0,
            &tcp_with(C, S, 4000, 80, "S", 1000, &[]),
            &mut out,
        );
        feed(&mut t, 0.1, &tcp(S, C, 80, 4000, "SA"), &mut out);
        feed(&mut t, 0.2, &seg(1001, 100), &mut out);
        feed(&mut t, 0.3, &seg(1001, 100), &mut out); // sent again
        feed(&mut t, 0.4, &seg(1101, 50), &mut out);
        feed(&mut t, 0.5, &seg(1201, 10), &mut out); // 50 bytes missed before it
        feed(&mut t, 0.6, &seg(1051, 20), &mut out); // old data
        t.finish(&mut out);
        let f = ended(&out)[0];
        assert_eq!(f.orig.payload_bytes, 210);
        assert_eq!(f.orig.pkts, 6);
        // Across the wrap of the sequence numbers too.
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        feed(
            &mut t,
            0.0,
            &tcp_with(C, S, 4001, 80, "A", u32::MAX - 9, &[b'y'; 30]),
            &mut out,
        );
        feed(
            &mut t,
            0.1,
            &tcp_with(C, S, 4001, 80, "A", 20, &[b'y'; 30]),
            &mut out,
        );
        t.finish(&mut out);
        let f = ended(&out)[0];
        assert_eq!(f.orig.payload_bytes, 60);
    }

    /// A flow picked up mid-stream then meeting a SYN numbered elsewhere: a new flow (Zeek's
    /// reuse), not a jump of the old one's payload by the distance between the numbers.
    #[test]
    fn a_syn_on_a_flow_picked_up_mid_stream_is_a_new_flow() {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        feed(
            &mut t,
            0.0,
            &tcp_with(C, S, 4000, 80, "A", 1000, &[1; 100]),
            &mut out,
        );
        feed(
            &mut t,
            1.0,
            &tcp_with(C, S, 4000, 80, "S", 500_000_000, &[]),
            &mut out,
        );
        feed(&mut t, 1.1, &tcp(S, C, 80, 4000, "SA"), &mut out);
        feed(
            &mut t,
            1.2,
            &tcp_with(C, S, 4000, 80, "A", 500_000_001, &[2; 10]),
            &mut out,
        );
        t.finish(&mut out);
        let ends: Vec<(u64, &str)> = out
            .iter()
            .filter_map(|n| match n.kind {
                NoticeKind::End(r) => Some((n.flow.orig.payload_bytes, r.name())),
                _ => None,
            })
            .collect();
        assert_eq!(ends, [(100, "reused"), (10, "capture_end")]);
    }

    /// A TCP segment cut in IP fragments counts its data, also once later packets come.
    #[test]
    fn a_fragmented_tcp_segment_counts_its_data() {
        let mut whole = Vec::new();
        PacketBuilder::ipv4(C, S, 64)
            .tcp(4000, 80, 1101, 1000)
            .ack(1)
            .write(&mut whole, &[3u8; 200])
            .unwrap();
        // The TCP header and 92 bytes, then the other 108.
        let frags = two_fragments(&whole, 9, 112);
        for order in [[0, 1], [1, 0]] {
            let mut t = FlowTable::new(FlowConfig::default());
            let mut out = Vec::new();
            feed(
                &mut t,
                0.0,
                &tcp_with(C, S, 4000, 80, "S", 1000, &[]),
                &mut out,
            );
            feed(&mut t, 0.1, &tcp(S, C, 80, 4000, "SA"), &mut out);
            feed(
                &mut t,
                0.2,
                &tcp_with(C, S, 4000, 80, "A", 1001, &[1; 100]),
                &mut out,
            );
            feed(&mut t, 0.3, &frags[order[0]], &mut out);
            feed(&mut t, 0.31, &frags[order[1]], &mut out);
            feed(
                &mut t,
                0.4,
                &tcp_with(C, S, 4000, 80, "AF", 1301, &[]),
                &mut out,
            );
            feed(&mut t, 0.5, &tcp(S, C, 80, 4000, "AF"), &mut out);
            t.finish(&mut out);
            let f = ended(&out)[0];
            assert_eq!(f.orig.payload_bytes, 300, "{order:?}");
        }
    }

    #[test]
    fn conn_states_of_connections_picked_up_mid_stream() {
        // No SYN seen (the capture began after it): Zeek's partial endpoints.
        let both_close = [
            (0.0, true, "A"),
            (0.1, false, "A"),
            (0.2, true, "FA"),
            (0.3, false, "FA"),
        ];
        assert_eq!(states(&both_close), ["SF"]);
        assert_eq!(states(&[(0.0, true, "A"), (0.1, true, "FA")]), ["SH"]);
        assert_eq!(states(&[(0.0, true, "A"), (0.1, false, "FA")]), ["SHR"]);
        assert_eq!(states(&[(0.0, true, "A"), (0.1, false, "RA")]), ["RSTRH"]);
        assert_eq!(states(&[(0.0, true, "A"), (0.1, true, "RA")]), ["OTH"]);
        // The SYN missed, the SYN-ACK seen: the responder is active.
        let synack_close = [
            (0.0, false, "SA"),
            (0.1, true, "A"),
            (0.2, true, "FA"),
            (0.3, false, "FA"),
        ];
        assert_eq!(states(&synack_close), ["SF"]);
        assert_eq!(states(&[(0.0, false, "SA"), (0.1, true, "FA")]), ["S2"]);
        assert_eq!(states(&[(0.0, false, "SA"), (0.1, true, "RA")]), ["RSTO"]);
        // The responder's reset: the originator active (it answered the SYN-ACK, or closed)
        // makes it RSTR; both reset with no data, REJ.
        assert_eq!(
            states(&[(0.0, false, "SA"), (0.1, true, "A"), (0.2, false, "R")]),
            ["RSTR"]
        );
        assert_eq!(
            states(&[(0.0, true, "A"), (0.1, true, "FA"), (0.2, false, "R")]),
            ["RSTR"]
        );
        assert_eq!(states(&[(0.0, true, "R"), (0.1, false, "R")]), ["REJ"]);
    }

    #[test]
    fn a_flow_picked_up_mid_stream_from_a_server_port_is_oriented_to_the_client() {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        // The server (5432) speaks first to a client's ephemeral port: the client originates.
        feed(&mut t, 0.0, &tcp(S, C, 5432, 40000, "A"), &mut out);
        // A probe without SYN from a high port to a service port: its sender originates.
        feed(&mut t, 0.1, &tcp(C, S, 51000, 22, "A"), &mut out);
        // Port 80 to 1500: 80 is a service port.
        feed(&mut t, 0.2, &tcp(S, C, 80, 1500, "PA"), &mut out);
        let starts: Vec<(std::net::IpAddr, u16, u16)> = out
            .iter()
            .filter(|n| matches!(n.kind, NoticeKind::Start))
            .map(|n| (n.flow.src, n.flow.sport, n.flow.dport))
            .collect();
        let c = IpAddr::from(C);
        assert_eq!(starts, [(c, 40000, 5432), (c, 51000, 22), (c, 1500, 80)]);
        // A FIN probe from port 53 (nmap's `-g 53`): no ACK, the scanner originates. A reset
        // from port 443 picked up mid-stream: the server's, its client originates.
        feed(&mut t, 0.3, &tcp(S, C, 53, 1500, "F"), &mut out);
        feed(&mut t, 0.4, &tcp(S, C, 443, 51000, "R"), &mut out);
        let starts: Vec<(std::net::IpAddr, u16, u16)> = out
            .iter()
            .filter(|n| matches!(n.kind, NoticeKind::Start))
            .map(|n| (n.flow.src, n.flow.sport, n.flow.dport))
            .collect();
        assert_eq!(starts[3], (IpAddr::from(S), 53, 1500));
        assert_eq!(starts[4], (IpAddr::from(C), 51000, 443));
        // UDP seen only from the server's side (a DNS server's replies, requests not
        // captured): the clients originate, so the server does not reach many ports (a client
        // on a port below the ephemeral range too: Windows' 1025-5000, NAT).
        let mut out = Vec::new();
        for (i, (sp, dp)) in [
            (53, 40000),
            (53, 40001),
            (123, 123),
            (40002, 53),
            (53, 1500),
            // A probe from a fixed port that is no service's to a high port (a UDP scan): its
            // sender originates, whatever the ports' ranges. mDNS's answer: the service's.
            (12345, 40003),
            (5353, 40004),
        ]
        .into_iter()
        .enumerate()
        {
            let mut v = Vec::new();
            PacketBuilder::ipv4(S, C, 64)
                .udp(sp, dp)
                .write(&mut v, &[1, 2, 3])
                .unwrap();
            feed(&mut t, 1.0 + i as f64, &v, &mut out);
        }
        let starts: Vec<(std::net::IpAddr, u16, u16)> = out
            .iter()
            .filter(|n| matches!(n.kind, NoticeKind::Start))
            .map(|n| (n.flow.src, n.flow.sport, n.flow.dport))
            .collect();
        let s = IpAddr::from(S);
        assert_eq!(
            starts,
            [
                (c, 40000, 53),
                (c, 40001, 53),
                (s, 123, 123),
                (s, 40002, 53),
                (c, 1500, 53),
                (s, 12345, 40003),
                (c, 40004, 5353),
            ]
        );
        assert!(
            UDP_SERVICE_PORTS.is_sorted(),
            "binary search needs them sorted"
        );
    }

    /// A UDP scan from one fixed source port to high ports (each probe unanswered): the
    /// scanner originates every probe, so a rule counting its distinct destination ports sees
    /// them all (they were turned round when the source port was below 32768 and the
    /// destination above, and the scan rule saw one port).
    #[test]
    fn a_udp_scan_from_a_fixed_port_keeps_the_scanner_as_originator() {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        for i in 0..30u16 {
            let mut v = Vec::new();
            PacketBuilder::ipv4(C, S, 64)
                .udp(12345, 40000 + i)
                .write(&mut v, &[])
                .unwrap();
            feed(&mut t, f64::from(i) * 0.01, &v, &mut out);
        }
        let starts: Vec<(std::net::IpAddr, u16)> = out
            .iter()
            .filter(|n| matches!(n.kind, NoticeKind::Start))
            .map(|n| (n.flow.src, n.flow.dport))
            .collect();
        assert_eq!(starts.len(), 30);
        assert!(starts.iter().all(|&(src, _)| src == IpAddr::from(C)));
        let ports: std::collections::BTreeSet<u16> = starts.iter().map(|&(_, p)| p).collect();
        assert_eq!(ports.len(), 30);
    }

    /// Ending the open flows a part at a time gives what ending them at once gives, in the
    /// same order (the oldest first), and says when all are ended.
    #[test]
    fn finishing_in_parts_ends_the_same_flows_in_the_same_order() {
        let fill = |t: &mut FlowTable| {
            let mut out = Vec::new();
            for i in 0..10u16 {
                feed(
                    t,
                    f64::from(i) * 0.1,
                    &tcp(C, S, 40000 + i, 80, "S"),
                    &mut out,
                );
            }
        };
        let ends = |out: &[FlowNotice]| -> Vec<(u16, EndReason)> {
            out.iter()
                .filter_map(|n| match n.kind {
                    NoticeKind::End(r) => Some((n.flow.sport, r)),
                    _ => None,
                })
                .collect()
        };
        let mut whole = FlowTable::new(FlowConfig::default());
        fill(&mut whole);
        let mut at_once = Vec::new();
        whole.finish(&mut at_once);
        let mut parts = FlowTable::new(FlowConfig::default());
        fill(&mut parts);
        let mut by_three = Vec::new();
        let mut calls = 1;
        while !parts.finish_some(3, &mut by_three) {
            calls += 1;
        }
        assert_eq!(calls, 4);
        assert_eq!(ends(&by_three), ends(&at_once));
        assert_eq!(ends(&at_once).len(), 10);
        assert_eq!(parts.open_flows(), 0);
    }

    #[test]
    fn a_closed_flow_still_lingering_when_the_capture_ends_ended_closed() {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        feed(&mut t, 0.0, &tcp(C, S, 40000, 80, "S"), &mut out);
        feed(&mut t, 0.1, &tcp(S, C, 80, 40000, "SA"), &mut out);
        feed(&mut t, 0.2, &tcp(C, S, 40000, 80, "FA"), &mut out);
        feed(&mut t, 0.3, &tcp(S, C, 80, 40000, "FA"), &mut out);
        // Another flow still open at the end.
        feed(&mut t, 0.4, &tcp(C, S, 40001, 80, "S"), &mut out);
        t.finish(&mut out);
        let ends: Vec<(u16, EndReason)> = out
            .iter()
            .filter_map(|n| match n.kind {
                NoticeKind::End(r) => Some((n.flow.sport, r)),
                _ => None,
            })
            .collect();
        assert_eq!(
            ends,
            [(40000, EndReason::Closed), (40001, EndReason::CaptureEnd)]
        );
    }

    #[test]
    fn idle_timeouts_are_exact_within_the_second() {
        let udp = |t: &mut FlowTable, at: f64, out: &mut Vec<FlowNotice>| {
            let mut v = Vec::new();
            PacketBuilder::ipv4(C, S, 64)
                .udp(1000, 2000)
                .write(&mut v, &[1, 2, 3])
                .unwrap();
            feed(t, at, &v, out);
        };
        // A 60.5 s gap (over the 60 s UDP timeout) splits the flow wherever it falls in the
        // seconds, and a 59.9 s one never does.
        for (first, second, flows) in [
            (0.0, 60.5, 2),
            (0.7, 61.2, 2),
            (0.0, 59.9, 1),
            (0.9, 60.8, 1),
        ] {
            let mut t = FlowTable::new(FlowConfig::default());
            let mut out = Vec::new();
            udp(&mut t, first, &mut out);
            udp(&mut t, second, &mut out);
            t.finish(&mut out);
            let ends: Vec<&FlowNotice> = out
                .iter()
                .filter(|n| matches!(n.kind, NoticeKind::End(_)))
                .collect();
            assert_eq!(ends.len(), flows, "{first} then {second}");
            if flows == 2 {
                assert!(matches!(ends[0].kind, NoticeKind::End(EndReason::Idle)));
            }
        }
    }

    /// A flow whose timer ran out ends stamped at its deadline, before the notices of a later
    /// packet of another flow (it was stamped at that packet, up to a second late: the wheel
    /// looked at whole seconds, and notices are made in time order).
    #[test]
    fn a_timed_out_flow_ends_at_its_deadline_before_a_later_packets_notices() {
        let udp = |t: &mut FlowTable, at: f64, sport: u16, out: &mut Vec<FlowNotice>| {
            let mut v = Vec::new();
            PacketBuilder::ipv4(C, S, 64)
                .udp(sport, 514)
                .write(&mut v, &[1, 2, 3])
                .unwrap();
            feed(t, at, &v, out);
        };
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        udp(&mut t, 0.538, 40013, &mut out);
        udp(&mut t, 60.4, 40011, &mut out);
        udp(&mut t, 60.686, 40014, &mut out);
        let end = out
            .iter()
            .position(|n| matches!(n.kind, NoticeKind::End(_)))
            .expect("the first flow ended");
        assert_eq!(out[end].at, Timestamp((60.538 * 1e9) as i64));
        let started = |sport: u16| {
            out.iter()
                .position(|n| matches!(n.kind, NoticeKind::Start) && n.flow.sport == sport)
        };
        assert!(started(40014).is_some_and(|i| i > end), "{out:?}");
    }

    #[test]
    fn a_flow_ends_for_the_timeout_that_ran_out_first_whatever_the_gap_after_it() {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        feed(&mut t, 0.0, &tcp(C, S, 1, 80, "S"), &mut out);
        feed(&mut t, 0.1, &tcp(S, C, 80, 1, "SA"), &mut out);
        feed(&mut t, 0.2, &tcp(C, S, 1, 80, "A"), &mut out);
        // Two hours of nothing (past the active limit too), then another flow.
        feed(&mut t, 7200.0, &tcp(C, S, 2, 80, "S"), &mut out);
        let ends: Vec<(u16, NoticeKind)> = out
            .iter()
            .filter(|n| matches!(n.kind, NoticeKind::End(_)))
            .map(|n| (n.flow.sport, n.kind))
            .collect();
        assert_eq!(ends, [(1, NoticeKind::End(EndReason::Idle))]);
        // A flow still busy at its active limit ends for that limit.
        let active = FlowConfig::default().active.0 as f64 / 1e9;
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        let mut at = 0.0;
        while at <= active + 60.0 {
            feed(&mut t, at, &tcp(C, S, 3, 80, "A"), &mut out);
            at += 60.0;
        }
        let first = out
            .iter()
            .find(|n| matches!(n.kind, NoticeKind::End(_)))
            .map(|n| n.kind);
        assert_eq!(first, Some(NoticeKind::End(EndReason::Active)));
    }

    #[test]
    fn udp_and_other_protocols_take_zeeks_states() {
        let udp = |src, dst, sp, dp| {
            let mut v = Vec::new();
            PacketBuilder::ipv4(src, dst, 64)
                .udp(sp, dp)
                .write(&mut v, &[1u8; 8])
                .unwrap();
            v
        };
        let state = |frames: &[Vec<u8>]| {
            let mut t = FlowTable::new(FlowConfig::default());
            let mut out = Vec::new();
            for (i, f) in frames.iter().enumerate() {
                feed(&mut t, i as f64 * 0.1, f, &mut out);
            }
            t.finish(&mut out);
            out.iter()
                .find(|n| matches!(n.kind, NoticeKind::End(_)))
                .map(|n| n.flow.state())
        };
        let ask = udp(C, S, 40000, 53);
        let answer = udp(S, C, 53, 40000);
        assert_eq!(state(&[ask.clone(), answer.clone()]), Some("SF"));
        assert_eq!(state(&[ask]), Some("S0"));
        // Only the server's answer seen: the flow is turned to its client, who sent nothing.
        assert_eq!(state(&[answer]), Some("SHR"));
    }

    #[test]
    fn timeouts_and_eviction() {
        let mut t = FlowTable::new(FlowConfig {
            max_flows: 2,
            ..FlowConfig::default()
        });
        let mut out = Vec::new();
        feed(&mut t, 0.0, &tcp(C, S, 1, 80, "S"), &mut out);
        feed(&mut t, 1.0, &tcp(C, S, 2, 80, "S"), &mut out);
        feed(&mut t, 2.0, &tcp(C, S, 3, 80, "S"), &mut out);
        assert_eq!(t.stats().evicted, 1);
        assert!(
            out.iter()
                .any(|n| n.kind == NoticeKind::End(EndReason::Evicted) && n.flow.sport == 1)
        );
        // Attempts time out after 30 s of silence: the next packet at 40 s ends both.
        feed(&mut t, 40.0, &tcp(C, S, 9, 80, "S"), &mut out);
        let failed = out
            .iter()
            .filter(|n| matches!(n.kind, NoticeKind::AttemptFailed(EndReason::Idle)))
            .count();
        assert_eq!(failed, 2);
        assert_eq!(t.stats().active, 1);
    }

    /// A full table evicts the flow closest to its timeout: one-packet UDP flows (a minute
    /// of idle time) before an established TCP session (five minutes) that began before them.
    #[test]
    fn eviction_takes_the_flow_closest_to_its_timeout_not_the_oldest() {
        let mut t = FlowTable::new(FlowConfig {
            max_flows: 3,
            ..FlowConfig::default()
        });
        let mut out = Vec::new();
        feed(&mut t, 0.0, &tcp(C, S, 50000, 22, "S"), &mut out);
        feed(&mut t, 0.01, &tcp(S, C, 22, 50000, "SA"), &mut out);
        feed(&mut t, 0.02, &tcp(C, S, 50000, 22, "A"), &mut out);
        feed(&mut t, 0.5, &tcp(C, S, 50000, 22, "PA"), &mut out);
        for (i, at) in [1.0, 2.0, 3.0].into_iter().enumerate() {
            let mut v = Vec::new();
            PacketBuilder::ipv4(C, S, 64)
                .udp(40000 + i as u16, 53)
                .write(&mut v, &[1])
                .unwrap();
            feed(&mut t, at, &v, &mut out);
        }
        let evicted: Vec<(u8, u16)> = out
            .iter()
            .filter(|n| n.kind == NoticeKind::End(EndReason::Evicted))
            .map(|n| (n.flow.proto, n.flow.sport))
            .collect();
        assert_eq!(evicted, [(proto::UDP, 40000)]);
        // The session goes on as one flow.
        feed(&mut t, 4.0, &tcp(C, S, 50000, 22, "PA"), &mut out);
        let ssh_starts = out
            .iter()
            .filter(|n| matches!(n.kind, NoticeKind::Start) && n.flow.dport == 22)
            .count();
        assert_eq!(ssh_starts, 1);
    }

    #[test]
    fn timed_out_flows_are_stamped_when_their_timer_ran_out_in_that_order() {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        // Two unanswered SYNs, at 0 s and 2.5 s, and then nothing until 100 s.
        feed(&mut t, 0.0, &tcp(C, S, 1, 80, "S"), &mut out);
        feed(&mut t, 2.5, &tcp(C, S, 2, 80, "S"), &mut out);
        feed(&mut t, 100.0, &tcp(C, S, 9, 443, "S"), &mut out);
        let failed: Vec<(u16, i64)> = out
            .iter()
            .filter(|n| matches!(n.kind, NoticeKind::AttemptFailed(_)))
            .map(|n| (n.flow.sport, n.at.0))
            .collect();
        // Not at 100 s, when the next packet came: when each timer ran out (35 s of
        // silence), earliest first.
        let wait = FlowConfig::default().tcp_attempt.0;
        assert_eq!(failed, [(1, wait), (2, 2_500_000_000 + wait)]);
        let ats: Vec<i64> = out.iter().map(|n| n.at.0).collect();
        assert!(ats.windows(2).all(|w| w[0] <= w[1]), "{ats:?}");
    }

    /// Datagrams whose last fragment comes first, then their first, behind one whose first
    /// never comes: the order of waiting datagrams keeps no entry for each of them.
    #[test]
    fn fragments_adopted_behind_one_still_waiting_leave_no_trace() {
        let mut whole = Vec::new();
        PacketBuilder::ipv4(C, S, 64)
            .udp(41000, 2000)
            .write(&mut whole, &[7u8; 64])
            .unwrap();
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        feed(&mut t, 0.0, &two_fragments(&whole, 1, 40)[1], &mut out);
        for id in 2..20_000u16 {
            let f = two_fragments(&whole, id, 40);
            feed(&mut t, 0.001, &f[1], &mut out);
            feed(&mut t, 0.001, &f[0], &mut out);
        }
        assert_eq!(t.orphans.len(), 1);
        assert!(
            t.orphan_order.len() <= 2 * MAX_FRAGS,
            "{}",
            t.orphan_order.len()
        );
        // The one still waiting is given up in its time.
        feed(&mut t, 60.0, &tcp(C, S, 1, 80, "S"), &mut out);
        assert_eq!(t.orphans.len(), 0);
        assert_eq!(t.stats().orphan_fragments, 1);
    }

    #[test]
    fn ipv4_fragments_join_their_flow() {
        let mut whole = Vec::new();
        PacketBuilder::ipv4(C, S, 64)
            .udp(41000, 2000)
            .write(&mut whole, &[7u8; 64])
            .unwrap();
        // The datagram (UDP header + 64 bytes) in two fragments (40 bytes, then the rest),
        // with IP id `id`.
        let fragments = |id: u16| two_fragments(&whole, id, 40);
        let (frags, frags2) = (fragments(77), fragments(78));
        // Feeds the packets at their times and ends the capture: the flows ended, and the
        // fragments given up.
        let run = |packets: &[(f64, &[u8])]| -> (Vec<FlowRecord>, u64) {
            let mut t = FlowTable::new(FlowConfig::default());
            let mut out = Vec::new();
            for (at, p) in packets {
                feed(&mut t, *at, p, &mut out);
            }
            t.finish(&mut out);
            (ended(&out), t.stats().orphan_fragments)
        };
        let whole_flow = |f: &FlowRecord| (f.sport, f.dport, f.orig.pkts, f.orig.ip_bytes);
        let (ends, orphans) = run(&[(0.0, &frags[0]), (0.001, &frags[1])]);
        assert_eq!(ends.len(), 1);
        assert_eq!((ends[0].sport, ends[0].orig.pkts), (41000, 2));
        assert_eq!(ends[0].orig.ip_bytes, 20 + 40 + 20 + 32);
        assert_eq!(orphans, 0);
        // Last fragment first: it waits for the first, then joins its flow (no port-0 flow),
        // which began with it.
        let (ends, orphans) = run(&[(0.0, &frags[1]), (0.001, &frags[0])]);
        let flows: Vec<_> = ends.iter().map(whole_flow).collect();
        assert_eq!(flows, [(41000, 2000, 2, 20 + 40 + 20 + 32)]);
        assert_eq!(orphans, 0);
        assert_eq!(ends[0].first, Timestamp(0));
        assert_eq!(ends[0].duration(), Duration(1_000_000));
        // A first fragment that never comes: counted, and no flow; one that comes too late
        // (after ORPHAN_WAIT) makes its flow alone.
        let (ends, orphans) = run(&[(0.0, &frags[1]), (31.0, &frags[0])]);
        let flows: Vec<(u16, u64)> = ends.iter().map(|f| (f.sport, f.orig.pkts)).collect();
        assert_eq!(flows, [(41000, 1)]);
        assert_eq!(orphans, 1);
        let (ends, orphans) = run(&[(0.0, &frags[1])]);
        assert!(ends.is_empty(), "{ends:?}");
        assert_eq!(orphans, 1);
        // Two datagrams waiting, each last fragment first: the first one's joining leaves
        // the second waiting (not given up in its place).
        let (ends, orphans) = run(&[
            (0.0, &frags[1]),
            (0.001, &frags2[1]),
            (0.002, &frags[0]),
            (0.003, &frags2[0]),
        ]);
        let pkts: u64 = ends.iter().map(|f| f.orig.pkts).sum();
        assert_eq!(pkts, 4, "{ends:?}");
        assert_eq!(orphans, 0);
    }

    #[test]
    fn icmp_echo_pairs_request_and_reply() {
        use etherparse::PacketBuilder;
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        let mut req = Vec::new();
        PacketBuilder::ipv4(C, S, 64)
            .icmpv4_echo_request(9, 1)
            .write(&mut req, b"ping")
            .unwrap();
        let mut rep = Vec::new();
        PacketBuilder::ipv4(S, C, 64)
            .icmpv4_echo_reply(9, 1)
            .write(&mut rep, b"ping")
            .unwrap();
        feed(&mut t, 0.0, &req, &mut out);
        feed(&mut t, 0.1, &rep, &mut out);
        t.finish(&mut out);
        let ends: Vec<_> = out
            .iter()
            .filter(|n| matches!(n.kind, NoticeKind::End(_)))
            .collect();
        assert_eq!(ends.len(), 1);
        let f = ends[0].flow;
        assert_eq!(
            (f.proto_name().as_str(), f.dport, f.orig.pkts, f.resp.pkts),
            ("icmp", 8, 1, 1)
        );
        assert_eq!(f.state(), "OTH");
        // A host pinging itself (loopback): the reply is the other side's all the same.
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        for (at, reply) in [(0.0, false), (0.1, true), (1.0, false), (1.1, true)] {
            let mut p = Vec::new();
            let b = PacketBuilder::ipv4(C, C, 64);
            let b = if reply {
                b.icmpv4_echo_reply(9, 1)
            } else {
                b.icmpv4_echo_request(9, 1)
            };
            b.write(&mut p, b"ping").unwrap();
            feed(&mut t, at, &p, &mut out);
        }
        t.finish(&mut out);
        let ends: Vec<(u64, u64)> = ended(&out)
            .iter()
            .map(|f| (f.orig.pkts, f.resp.pkts))
            .collect();
        assert_eq!(ends, [(2, 2)]);
    }

    #[test]
    fn close_linger_then_port_reuse() {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        feed(&mut t, 0.0, &tcp(C, S, 4000, 80, "S"), &mut out);
        feed(&mut t, 0.1, &tcp(S, C, 80, 4000, "RA"), &mut out);
        // A new SYN on the same 5-tuple right after the RST: a new flow.
        feed(&mut t, 0.2, &tcp(C, S, 4000, 80, "S"), &mut out);
        // After the linger (5 s) the second attempt is still open: attempt timeout is 35 s.
        feed(&mut t, 40.0, &tcp(C, S, 1, 1, "S"), &mut out);
        let ends: Vec<_> = out
            .iter()
            .filter_map(|n| match n.kind {
                NoticeKind::End(r) => Some((n.flow.state(), r)),
                _ => None,
            })
            .collect();
        assert_eq!(ends, [("REJ", EndReason::Closed), ("S0", EndReason::Idle)]);
    }

    #[test]
    fn one_unanswered_connect_with_linux_syn_retries_is_one_attempt() {
        let mut t = FlowTable::new(FlowConfig::default());
        let mut out = Vec::new();
        for at in [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0] {
            feed(&mut t, at, &tcp(C, S, 40000, 443, "S"), &mut out);
        }
        t.advance(Timestamp(200_000_000_000), &mut out);
        let failed: Vec<u64> = out
            .iter()
            .filter_map(|n| match n.kind {
                NoticeKind::AttemptFailed(_) => Some(n.flow.orig.pkts),
                _ => None,
            })
            .collect();
        assert_eq!(failed, [7]);
    }
}
