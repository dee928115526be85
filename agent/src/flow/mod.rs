//! Packets to flows: decoding, the flow table, pcap files, live capture, and `cepheus flows`.
//!
//! The pieces, each usable alone:
//! - [`capture::CaptureReader`]: pcap/pcapng files as raw frames;
//! - [`live::LiveCapture`]: frames from an interface (pnet_datalink, its own thread);
//! - [`decode::decode`]: a frame to a [`decode::PacketInfo`] (never panics, outcomes counted);
//! - [`table::FlowTable`]: sans-I/O bidirectional flow table driven by packet stamps;
//! - [`FlowEngine`]: decode + table + syslog datagram extraction + counters;
//! - [`MergedCaptures`]: capture files as one stream of frames in time order;
//! - [`MultiFlowReader`]: those frames through one flow table, as an iterator of
//!   [`FlowItem`]s for `cepheus replay`.
//!
//! Flow events ([`notice_to_event`]) carry every flow field of the registry. `time` is the
//! first packet's stamp for `flow_start` and the last packet's stamp for `flow_end` and
//! `attempt_failed`; `arrival` is when the event was made: for a flow timed out (idle, or
//! closed and its linger over) the moment its timer ran out, as a live table ticking on its
//! own makes it, even when a replay only learns of it at a later packet (never before an
//! event already made, so items come out in non-decreasing `arrival` order); at the end of a
//! capture, its last stamp.

pub mod capture;
pub mod cmd;
pub mod decode;
pub mod filter;
pub mod live;
pub mod reasm;
pub mod table;
pub mod tcp_syslog;

use std::collections::VecDeque;
use std::net::IpAddr;

use cepheus_core::event::{Event, Field, Source, Value};
use cepheus_core::time::{Duration, Timestamp};

use capture::{CaptureError, CaptureReader, RawPacket};
use decode::{Decoded, proto};
use table::{FlowConfig, FlowNotice, FlowTable, NoticeKind};

/// The ports whose UDP datagrams and TCP streams (reassembled, RFC 6587 framing) are also
/// surfaced as syslog: the standard one and cepheus's own default listener.
pub const SYSLOG_PORTS: [u16; 2] = [514, 5514];

/// A syslog message seen on the wire (a UDP datagram to a syslog port, or one message of a
/// TCP stream to one), for the syslog ingest (peer = `src`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyslogDatagram {
    /// Capture stamp of the datagram.
    pub time: Timestamp,
    /// The sender's address (the syslog `peer`).
    pub src: IpAddr,
    /// The message as captured (a UDP payload, or a TCP message without its framing).
    pub payload: Vec<u8>,
}

/// One output of a flow reader: a flow event or a syslog datagram.
#[derive(Clone, Debug, PartialEq)]
pub enum FlowItem {
    /// A `flow_start`, `flow_end` or `attempt_failed` event (`source = flow`).
    Flow(Event),
    /// A syslog datagram to hand to the syslog parser.
    Syslog(SyslogDatagram),
}

/// Counters of decoding (the flow table's own are in [`table::TableStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Frames read.
    pub packets: u64,
    /// Frames decoded to an IP packet and given to the flow table.
    pub decoded: u64,
    /// Frames cut before the headers ended.
    pub truncated: u64,
    /// Frames with contradictory headers.
    pub malformed: u64,
    /// Frames without IP (ARP, ...).
    pub non_ip: u64,
    /// Frames of a link type the decoder does not know.
    pub unsupported_linktype: u64,
    /// Syslog messages surfaced (UDP datagrams and messages of TCP streams).
    pub syslog: u64,
    /// Syslog datagrams that came in IP fragments (a message longer than the path's MTU) and
    /// were put back together (they count in `syslog` too).
    pub syslog_reassembled: u64,
    /// Syslog datagrams in IP fragments given up: a fragment never came (within 30 s of
    /// capture time), the datagram was too large, or too many were in progress at once.
    pub syslog_fragments_lost: u64,
    /// Capture read errors (each ends its file; counted by the reader of the files).
    pub read_errors: u64,
    /// Flows created.
    pub flows: u64,
    /// Flows evicted because the table was full.
    pub evicted: u64,
    /// Packets stamped before the table's clock.
    pub out_of_order: u64,
    /// IP fragments whose first fragment was not seen.
    pub orphan_fragments: u64,
    /// Syslog over TCP: messages, holes, oversized, unframeable and evicted streams.
    pub tcp_syslog: tcp_syslog::TcpSyslogCounters,
}

impl Counters {
    /// What of the captures read was not taken whole, one warning line each (syslog messages
    /// lost, a capture out of time order), so that partial results do not pass for complete
    /// ones; frames in no flow are said per file ([`MergedCaptures::file_warnings`]). Said by
    /// every command that reads capture files.
    pub fn read_warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.syslog_fragments_lost > 0 {
            w.push(format!(
                "captures: {} syslog datagrams in IP fragments could not be put back together (a fragment missing): those messages are lost",
                self.syslog_fragments_lost
            ));
        }
        if self.evicted > 0 {
            w.push(format!(
                "captures: {} flows were ended early because the flow table was full (1,000,000 open flows at most, the ones closest to their timeouts going first; `cepheus flows --max-flows` sets another size): a flow that went on after it shows as two",
                self.evicted
            ));
        }
        if self.out_of_order > 0 {
            w.push(format!(
                "captures: {} packets are stamped earlier than a packet before them in the same file: each was taken at the later time, so flows around them may be split or cut short (`reordercap` from Wireshark sorts a capture)",
                self.out_of_order
            ));
        }
        w
    }
}

/// Decoder + flow table + syslog extraction: raw frames in, notices and syslog messages out.
#[derive(Debug)]
pub struct FlowEngine {
    table: FlowTable,
    counters: Counters,
    scratch: Vec<FlowNotice>,
    /// Syslog extraction (`None`: flows only, as the running agent, whose sockets get the
    /// syslog).
    tcp_syslog: Option<tcp_syslog::TcpSyslog>,
    /// The latest frame's stamp: when the streams still open end.
    last: Timestamp,
    /// Syslog datagrams in IP fragments, being put back together.
    frags: reasm::SyslogFragments,
}

impl FlowEngine {
    /// An engine with an empty table, that also surfaces the syslog messages it sees.
    pub fn new(cfg: FlowConfig) -> Self {
        FlowEngine {
            table: FlowTable::new(cfg),
            counters: Counters::default(),
            scratch: Vec::new(),
            tcp_syslog: Some(tcp_syslog::TcpSyslog::default()),
            last: Timestamp::MIN,
            frags: reasm::SyslogFragments::default(),
        }
    }

    /// An engine that makes flows only (syslog on the wire is left alone).
    pub fn flows_only(cfg: FlowConfig) -> Self {
        FlowEngine {
            tcp_syslog: None,
            ..FlowEngine::new(cfg)
        }
    }

    /// The earliest first-packet time of a flow still open: no flow ended later starts before
    /// it (`cepheus flows` writes the records before it in order). `None` when none is open.
    pub fn oldest_open(&self) -> Option<Timestamp> {
        self.table.oldest_open()
    }

    /// The flows open now.
    pub fn open_flows(&self) -> usize {
        self.table.open_flows()
    }

    /// Frames so far cut before their headers ended, or malformed (in no flow).
    pub fn damaged(&self) -> u64 {
        self.counters.truncated + self.counters.malformed
    }

    /// Decodes one frame and feeds the table; the syslog messages it carried (a UDP datagram,
    /// or the messages a TCP segment completed) go to `syslog`.
    pub fn push(
        &mut self,
        pkt: &RawPacket<'_>,
        out: &mut Vec<FlowNotice>,
        syslog: &mut Vec<SyslogDatagram>,
    ) {
        self.counters.packets += 1;
        self.last = self.last.max(pkt.ts);
        match decode::decode(pkt.linktype, pkt.data) {
            // A frame the capture kept whole whose headers claim more than it holds: the
            // lengths lie (tshark and Zeek count what is there; a 45-byte frame is not a
            // flow of 60,000 bytes: found by an audit).
            Decoded::Ip(info)
                if info.claims_more && pkt.data.len() as u64 >= u64::from(pkt.orig_len) =>
            {
                self.counters.malformed += 1;
            }
            Decoded::Ip(info) => {
                self.counters.decoded += 1;
                self.table.process(pkt.ts, pkt.orig_len, &info, out);
                let Some(tcp) = self.tcp_syslog.as_mut() else {
                    return;
                };
                if info.proto == proto::UDP {
                    let payload = match info.fragment {
                        // Only the first fragment has ports: a syslog datagram in fragments is
                        // put back together first.
                        Some(frag) => {
                            let to_syslog =
                                frag.first().then(|| SYSLOG_PORTS.contains(&info.dport));
                            match self.frags.push(
                                pkt.ts,
                                info.src,
                                info.dst,
                                frag,
                                to_syslog,
                                info.payload,
                            ) {
                                reasm::Outcome::Whole(p) => p,
                                reasm::Outcome::Held => return,
                            }
                        }
                        None if SYSLOG_PORTS.contains(&info.dport) && !info.payload.is_empty() => {
                            info.payload.to_vec()
                        }
                        None => return,
                    };
                    self.counters.syslog += 1;
                    syslog.push(SyslogDatagram {
                        time: pkt.ts,
                        src: info.src,
                        payload,
                    });
                } else if info.proto == proto::TCP
                    && info.fragment.is_none()
                    && SYSLOG_PORTS.contains(&info.dport)
                {
                    let before = syslog.len();
                    tcp.segment(pkt.ts, &info, syslog);
                    self.counters.syslog += (syslog.len() - before) as u64;
                }
                return;
            }
            Decoded::NonIp => self.counters.non_ip += 1,
            Decoded::Truncated => self.counters.truncated += 1,
            Decoded::Malformed => self.counters.malformed += 1,
            Decoded::UnsupportedLinktype => self.counters.unsupported_linktype += 1,
        }
        // Frames that are not flows still move the clock.
        self.table.advance(pkt.ts, out);
    }

    /// Moves the clock without a packet (a live capture's idle tick) and expires flows.
    pub fn advance(&mut self, now: Timestamp, out: &mut Vec<FlowNotice>) {
        self.table.advance(now, out);
    }

    /// Ends every open flow and TCP syslog stream (end of capture): a stream's last message
    /// without its delimiter counts, as when a sender closes its connection.
    pub fn finish(&mut self, out: &mut Vec<FlowNotice>, syslog: &mut Vec<SyslogDatagram>) {
        while !self.finish_some(usize::MAX, out, syslog) {}
    }

    /// [`FlowEngine::finish`] a part at a time: at most `max` flows ended per call (the
    /// oldest first); `true` once everything is ended and said.
    pub fn finish_some(
        &mut self,
        max: usize,
        out: &mut Vec<FlowNotice>,
        syslog: &mut Vec<SyslogDatagram>,
    ) -> bool {
        if !self.table.finish_some(max, out) {
            return false;
        }
        self.frags.finish();
        if let Some(tcp) = self.tcp_syslog.as_mut() {
            let before = syslog.len();
            tcp.finish(self.last, syslog);
            self.counters.syslog += (syslog.len() - before) as u64;
        }
        true
    }

    /// [`FlowEngine::push`] with its output as [`FlowItem`]s in order (flow events, then the
    /// syslog messages): the form `cepheus run` wants for a live capture.
    pub fn push_items(&mut self, pkt: &RawPacket<'_>, out: &mut Vec<FlowItem>) {
        let mut notices = std::mem::take(&mut self.scratch);
        let mut syslog = Vec::new();
        self.push(pkt, &mut notices, &mut syslog);
        out.extend(
            notices
                .drain(..)
                .map(|n| FlowItem::Flow(notice_to_event(&n))),
        );
        out.extend(syslog.into_iter().map(FlowItem::Syslog));
        self.scratch = notices;
    }

    /// [`FlowEngine::advance`] with its output as [`FlowItem`]s (call on an idle tick).
    pub fn advance_items(&mut self, now: Timestamp, out: &mut Vec<FlowItem>) {
        let mut notices = std::mem::take(&mut self.scratch);
        self.advance(now, &mut notices);
        out.extend(
            notices
                .drain(..)
                .map(|n| FlowItem::Flow(notice_to_event(&n))),
        );
        self.scratch = notices;
    }

    /// [`FlowEngine::finish`] with its output as [`FlowItem`]s (end of capture).
    pub fn finish_items(&mut self, out: &mut Vec<FlowItem>) {
        while !self.finish_items_some(usize::MAX, out) {}
    }

    /// [`FlowEngine::finish_items`] a part at a time (see [`FlowEngine::finish_some`]).
    pub fn finish_items_some(&mut self, max: usize, out: &mut Vec<FlowItem>) -> bool {
        let mut notices = std::mem::take(&mut self.scratch);
        let mut syslog = Vec::new();
        let done = self.finish_some(max, &mut notices, &mut syslog);
        out.extend(
            notices
                .drain(..)
                .map(|n| FlowItem::Flow(notice_to_event(&n))),
        );
        out.extend(syslog.into_iter().map(FlowItem::Syslog));
        self.scratch = notices;
        done
    }

    /// All counters so far.
    pub fn counters(&self) -> Counters {
        let t = self.table.stats();
        Counters {
            flows: t.flows,
            evicted: t.evicted,
            out_of_order: t.out_of_order,
            orphan_fragments: t.orphan_fragments,
            syslog_reassembled: self.frags.reassembled,
            syslog_fragments_lost: self.frags.lost,
            tcp_syslog: self
                .tcp_syslog
                .as_ref()
                .map(|t| t.counters())
                .unwrap_or_default(),
            ..self.counters
        }
    }
}

/// A flow notice as a flow event with every flow field of the registry (`end_reason` only
/// on an end).
pub fn notice_to_event(n: &FlowNotice) -> Event {
    let f = &n.flow;
    let (kind, time, ended) = match n.kind {
        NoticeKind::Start => ("flow_start", f.first, None),
        NoticeKind::End(r) => ("flow_end", f.last, Some(r)),
        NoticeKind::AttemptFailed(r) => ("attempt_failed", f.last, Some(r)),
    };
    let int = |v: u64| Value::Int(i64::try_from(v).unwrap_or(i64::MAX));
    let mut e = Event::new(Source::Flow, time, n.at);
    e.fields.reserve(18);
    e.set(Field::Kind, Value::str(kind));
    e.set(Field::Src, Value::ip(f.src));
    e.set(Field::Dst, Value::ip(f.dst));
    e.set(Field::Sport, Value::Int(i64::from(f.sport)));
    e.set(Field::Dport, Value::Int(i64::from(f.dport)));
    e.set(Field::Proto, Value::str(&f.proto_name()));
    e.set(Field::Vlan, Value::Int(i64::from(f.vlan)));
    e.set(Field::State, Value::str(f.state()));
    e.set(Field::OrigBytes, int(f.orig.ip_bytes));
    e.set(Field::RespBytes, int(f.resp.ip_bytes));
    e.set(Field::OrigPayloadBytes, int(f.orig.payload_bytes));
    e.set(Field::RespPayloadBytes, int(f.resp.payload_bytes));
    e.set(Field::OrigPkts, int(f.orig.pkts));
    e.set(Field::RespPkts, int(f.resp.pkts));
    e.set(Field::Duration, Value::Duration(f.duration()));
    e.set(
        Field::OrigFlags,
        Value::str(table::flag_letters(f.orig_flags.all)),
    );
    e.set(
        Field::RespFlags,
        Value::str(table::flag_letters(f.resp_flags.all)),
    );
    if let Some(r) = ended {
        e.set(Field::EndReason, Value::str(r.name()));
    }
    e
}

/// One frame copied out of its capture (a reader's next frame, waiting its turn).
#[derive(Debug)]
pub struct OwnedFrame {
    /// Capture stamp.
    pub ts: Timestamp,
    /// The capture's link type.
    pub linktype: u32,
    /// Length on the wire.
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

impl OwnedFrame {
    /// The frame as the decoder reads it.
    pub fn raw(&self) -> RawPacket<'_> {
        RawPacket {
            ts: self.ts,
            linktype: self.linktype,
            orig_len: self.orig_len,
            data: &self.data,
        }
    }
}

/// Several capture files as one stream of frames in time order (the first file's frame on a
/// tie: files in the order given), so captures rotated by `tcpdump -G` or `-C` read as one.
/// A file cut short ends there; the error is kept. A file given twice is read once.
pub struct MergedCaptures {
    /// Each file, its reader (`None` once done) and its next frame.
    files: Vec<(
        std::path::PathBuf,
        Option<capture::OpenedCapture>,
        Option<OwnedFrame>,
    )>,
    /// Files cut short: the file and the error that ended it.
    errors: Vec<(std::path::PathBuf, CaptureError)>,
    /// Paths that named a file given before (read once: each packet would count twice).
    repeated: Vec<std::path::PathBuf>,
    /// Beside each file, what of it is in no flow (said by [`MergedCaptures::file_warnings`]).
    lost: Vec<FileLoss>,
    /// The file of the frame returned last (what [`MergedCaptures::note_damaged`] is about).
    last: usize,
}

/// What of one capture file is in no flow.
#[derive(Debug, Default)]
struct FileLoss {
    /// Frames of each link type not decoded (a few link types at most: a file has one, a
    /// pcapng one per interface).
    foreign: std::collections::BTreeMap<u32, u64>,
    /// Frames cut before their headers ended, or malformed.
    damaged: u64,
    /// Frames stamped far ahead of the file's clock and followed by frames of the earlier
    /// time (a wrong clock): read at the file's clock ([`MergedCaptures::refill`]).
    outliers: u64,
    /// The file's clock: the latest stamp it gave.
    clock: Option<Timestamp>,
    /// Its frame after the next one, read to judge the next (see `outliers`).
    ahead: Option<OwnedFrame>,
}

/// How far ahead of its file's clock a frame's stamp may jump before it is read as a wrong
/// clock, when the frame after it goes back (as `cepheus replay` judges a syslog line).
pub const OUTLIER_JUMP: Duration = Duration::from_secs(3600);

impl MergedCaptures {
    /// Opens the capture files (an unreadable one is an error).
    pub fn open(paths: &[std::path::PathBuf]) -> Result<Self, (std::path::PathBuf, CaptureError)> {
        use std::os::unix::fs::MetadataExt;
        let mut files = Vec::with_capacity(paths.len());
        let mut seen = std::collections::HashSet::new();
        let mut repeated = Vec::new();
        for p in paths {
            // The same file under another name too (a link, `./x` and `x`): by device and
            // inode.
            if let Ok(m) = std::fs::metadata(p)
                && m.is_file()
                && !seen.insert((m.dev(), m.ino()))
            {
                repeated.push(p.clone());
                continue;
            }
            let r = CaptureReader::open(p).map_err(|e| (p.clone(), e))?;
            files.push((p.clone(), Some(r), None));
        }
        let lost = files.iter().map(|_| FileLoss::default()).collect();
        let mut m = MergedCaptures {
            files,
            errors: Vec::new(),
            repeated,
            lost,
            last: 0,
        };
        for i in 0..m.files.len() {
            m.refill(i);
        }
        Ok(m)
    }

    /// Reads file `i`'s next frame into its slot (or closes it: at its end, or on an error).
    /// A frame stamped more than [`OUTLIER_JUMP`] after the file's clock, whose next frame
    /// goes back below that, is read at the file's clock (counted, and said): one frame of a
    /// wrong clock (a device's, a damaged record) would otherwise move every flow's time and
    /// the rules' clock years ahead, firing every absence, and hold back the file's later
    /// frames in the merge.
    fn refill(&mut self, i: usize) {
        self.files[i].2 = None;
        let mut next = self.read(i);
        if let (Some(f), Some(clock)) = (next.as_mut(), self.lost[i].clock)
            && f.ts > clock.add(OUTLIER_JUMP)
        {
            let after = self.read(i);
            if after
                .as_ref()
                .is_some_and(|a| a.ts <= clock.add(OUTLIER_JUMP))
            {
                f.ts = clock;
                self.lost[i].outliers += 1;
            }
            self.lost[i].ahead = after;
        }
        if let Some(f) = &next {
            let l = &mut self.lost[i];
            l.clock = Some(l.clock.map_or(f.ts, |c| c.max(f.ts)));
        }
        self.files[i].2 = next;
    }

    /// File `i`'s next frame: the one read ahead, else from its reader (closed at its end or
    /// on an error).
    fn read(&mut self, i: usize) -> Option<OwnedFrame> {
        if let Some(f) = self.lost[i].ahead.take() {
            return Some(f);
        }
        let (path, reader, _) = &mut self.files[i];
        let r = reader.as_mut()?;
        match r.next_packet() {
            Some(Ok(p)) => Some(OwnedFrame {
                ts: p.ts,
                linktype: p.linktype,
                orig_len: p.orig_len,
                data: p.data.to_vec(),
            }),
            Some(Err(e)) => {
                self.errors.push((path.clone(), e));
                *reader = None;
                None
            }
            None => {
                *reader = None;
                None
            }
        }
    }

    /// Counts `n` frames of the file of the frame returned last as cut or malformed (as the
    /// decoder found them), to be said of that file.
    pub fn note_damaged(&mut self, n: u64) {
        if let Some(l) = self.lost.get_mut(self.last) {
            l.damaged += n;
        }
    }

    /// The files cut short, with the error that ended each.
    pub fn errors(&self) -> &[(std::path::PathBuf, CaptureError)] {
        &self.errors
    }

    /// What to say of the files, as warning lines: those cut short (with the error that
    /// ended each), and paths that named a file given before (not read again).
    pub fn file_warnings(&self) -> Vec<String> {
        let cut = self.errors.iter().map(|(path, e)| {
            format!(
                "warning: {}: the capture cannot be read past a cut or damaged record ({e}); the rest of it is not read",
                path.display()
            )
        });
        let again = self.repeated.iter().map(|path| {
            format!(
                "warning: {}: the same capture file was given before: read once (each packet would count twice in its flow)",
                path.display()
            )
        });
        let mut lost = Vec::new();
        for ((path, _, _), l) in self.files.iter().zip(&self.lost) {
            for (lt, n) in &l.foreign {
                lost.push(format!(
                    "warning: {}: {n} frames of link type {lt}, which cepheus does not decode (it reads Ethernet, Linux cooked SLL and SLL2, BSD loopback and raw IP): in no flow",
                    path.display()
                ));
            }
            if l.outliers > 0 {
                lost.push(format!(
                    "warning: {}: {} frames stamped more than an hour after the frame before them, and followed by frames of that earlier time (a wrong clock), were taken at the time of the frame before them",
                    path.display(),
                    l.outliers
                ));
            }
            if l.damaged > 0 {
                lost.push(format!(
                    "warning: {}: {} frames cut before their headers ended or malformed (lengths that contradict the frame): counted, in no flow",
                    path.display(),
                    l.damaged
                ));
            }
        }
        cut.chain(again).chain(lost).collect()
    }
}

impl Iterator for MergedCaptures {
    type Item = OwnedFrame;

    fn next(&mut self) -> Option<OwnedFrame> {
        let (_, i) = self
            .files
            .iter()
            .enumerate()
            .filter_map(|(i, (_, _, h))| h.as_ref().map(|h| (h.ts, i)))
            .min()?;
        let frame = self.files[i].2.take();
        self.last = i;
        if let Some(f) = &frame
            && !decode::supported(f.linktype)
        {
            // At most a few link types a file (each pcapng interface has one).
            let foreign = &mut self.lost[i].foreign;
            if foreign.len() < 16 || foreign.contains_key(&f.linktype) {
                *foreign.entry(f.linktype).or_default() += 1;
            }
        }
        self.refill(i);
        frame
    }
}

/// Flows ended at a time when a capture ends (see [`FlowEngine::finish_some`]).
pub const FINISH_STEP: usize = 4096;

/// Several capture files as one stream of flow items: their frames in time order
/// ([`MergedCaptures`]) through one flow table, so a flow that goes on from one file to the
/// next stays one flow, and only the end of the last file ends open flows.
pub struct MultiFlowReader {
    frames: MergedCaptures,
    engine: FlowEngine,
    pending: VecDeque<FlowItem>,
    items: Vec<FlowItem>,
    finished: bool,
}

impl MultiFlowReader {
    /// Opens the capture files (an unreadable one is an error).
    pub fn open(
        paths: &[std::path::PathBuf],
        cfg: FlowConfig,
    ) -> Result<Self, (std::path::PathBuf, CaptureError)> {
        Ok(MultiFlowReader {
            frames: MergedCaptures::open(paths)?,
            engine: FlowEngine::new(cfg),
            pending: VecDeque::new(),
            items: Vec::new(),
            finished: false,
        })
    }

    /// The counters so far (final once the iterator returned `None`).
    pub fn counters(&self) -> Counters {
        Counters {
            read_errors: self.frames.errors().len() as u64,
            ..self.engine.counters()
        }
    }

    /// What to say of the files ([`MergedCaptures::file_warnings`]).
    pub fn file_warnings(&self) -> Vec<String> {
        self.frames.file_warnings()
    }
}

impl Iterator for MultiFlowReader {
    type Item = FlowItem;

    fn next(&mut self) -> Option<FlowItem> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.finished {
                return None;
            }
            match self.frames.next() {
                Some(h) => {
                    let before = self.engine.damaged();
                    self.engine.push_items(&h.raw(), &mut self.items);
                    let damaged = self.engine.damaged() - before;
                    if damaged > 0 {
                        self.frames.note_damaged(damaged);
                    }
                }
                // The flows open at the end, a few thousand at a time (a capture may end
                // with a million open: their events are not all held at once).
                None => self.finished = self.engine.finish_items_some(FINISH_STEP, &mut self.items),
            }
            self.pending.extend(self.items.drain(..));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use etherparse::PacketBuilder;

    use super::*;

    #[test]
    fn udp_datagrams_to_514_and_5514_are_syslog() {
        let mut flows = FlowEngine::new(FlowConfig::default());
        let mut out = Vec::new();
        for (port, syslog) in [(514, true), (5514, true), (53, false)] {
            let mut frame = Vec::new();
            PacketBuilder::ipv4([10, 0, 0, 7], [10, 0, 0, 1], 64)
                .udp(40000, port)
                .write(&mut frame, b"<13>Dec  2 05:40:00 h hb: alive")
                .unwrap();
            let pkt = RawPacket {
                ts: Timestamp(0),
                linktype: decode::linktype::RAW,
                orig_len: frame.len() as u32,
                data: &frame,
            };
            let mut got = Vec::new();
            flows.push(&pkt, &mut out, &mut got);
            assert_eq!(got.len() == 1, syslog, "port {port}");
        }
    }

    #[test]
    fn a_fragmented_syslog_datagram_is_put_back_together() {
        let mut flows = FlowEngine::new(FlowConfig::default());
        let mut whole = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 7], [10, 0, 0, 1], 64)
            .udp(40000, 514)
            .write(&mut whole, &[b'x'; 64])
            .unwrap();
        let (mut notices, mut got) = (Vec::new(), Vec::new());
        for frame in table::two_fragments(&whole, 9, 40) {
            let pkt = RawPacket {
                ts: Timestamp(0),
                linktype: decode::linktype::RAW,
                orig_len: frame.len() as u32,
                data: &frame,
            };
            flows.push(&pkt, &mut notices, &mut got);
        }
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].payload, [b'x'; 64]);
        let c = flows.counters();
        assert_eq!(
            (c.syslog, c.syslog_reassembled, c.syslog_fragments_lost),
            (1, 1, 0)
        );
    }

    /// Headers that claim more than a whole frame holds are a lie (malformed, in no flow);
    /// in a frame the capture cut they are believed (the frame was longer on the wire).
    #[test]
    fn lengths_beyond_a_whole_frame_are_malformed() {
        let mut good = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 7], [10, 0, 0, 1], 64)
            .tcp(40000, 80, 1, 1000)
            .write(&mut good, b"hello")
            .unwrap();
        let mut big_ip = good.clone();
        big_ip[2..4].copy_from_slice(&60_000u16.to_be_bytes());
        let mut small_ip = good.clone();
        small_ip[2..4].copy_from_slice(&10u16.to_be_bytes());
        let mut long_tcp = good.clone();
        long_tcp[20 + 12] = 0xf0; // data offset 60 in a 25-byte segment
        let mut udp = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 7], [10, 0, 0, 1], 64)
            .udp(40000, 53)
            .write(&mut udp, b"q")
            .unwrap();
        let mut short_udp = udp.clone();
        short_udp[20 + 4..20 + 6].copy_from_slice(&2u16.to_be_bytes());
        // Captured on the sender before its NIC cut it (TSO): total length 0 (a large
        // segment; in a minimum-size frame, 0 is a lie).
        let mut tso = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 7], [10, 0, 0, 1], 64)
            .tcp(40000, 80, 1, 1000)
            .write(&mut tso, &[b'x'; 3000])
            .unwrap();
        tso[2..4].copy_from_slice(&0u16.to_be_bytes());
        let mut zero_small = good.clone();
        zero_small[2..4].copy_from_slice(&0u16.to_be_bytes());
        // An IPv6 jumbogram's lengths (RFC 2675): payload 0, UDP 0.
        let mut jumbo = Vec::new();
        PacketBuilder::ipv6([0xfe; 16], [0xfd; 16], 64)
            .udp(40000, 53)
            .write(&mut jumbo, b"q")
            .unwrap();
        jumbo[4..6].copy_from_slice(&0u16.to_be_bytes());
        jumbo[40 + 4..40 + 6].copy_from_slice(&0u16.to_be_bytes());
        for (name, frame, lie) in [
            ("good", &good, false),
            ("good udp", &udp, false),
            ("IP length 0 (TSO)", &tso, false),
            ("IP length 0, small", &zero_small, true),
            ("IPv6 jumbogram", &jumbo, false),
            ("IP length 60000", &big_ip, true),
            ("IP length 10", &small_ip, true),
            ("TCP header 60", &long_tcp, true),
            ("UDP length 2", &short_udp, true),
        ] {
            for cut in [false, true] {
                let mut flows = FlowEngine::new(FlowConfig::default());
                let pkt = RawPacket {
                    ts: Timestamp(0),
                    linktype: decode::linktype::RAW,
                    orig_len: frame.len() as u32 + u32::from(cut) * 100,
                    data: frame,
                };
                flows.push(&pkt, &mut Vec::new(), &mut Vec::new());
                let c = flows.counters();
                let malformed = lie && !cut;
                assert_eq!(
                    (c.malformed, c.decoded),
                    (u64::from(malformed), u64::from(!malformed)),
                    "{name}, cut: {cut}"
                );
            }
        }
    }
}
