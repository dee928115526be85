//! `cepheus flows FILE...` / `cepheus flows --interface IF --duration 3s`.
//!
//! Prints one JSON object per flow, like `zeek -r` writes conn.log, sorted by first packet
//! time then id; a summary of counters goes to stderr as one JSON object. Several files are
//! read as one stream of frames in time order, through one flow table. A record is written
//! once no flow still open can start before it, so memory holds the open flows and at most
//! about `--max-flows` ended ones (beyond that the oldest go out, and a flow open since before
//! them comes when it ends, out of order); a live capture writes each flow as it ends (in
//! the order they end, as Zeek writes conn.log), and ends the flows still open on Ctrl-C or
//! SIGTERM.
//!
//! Byte counts, per direction (`orig_*` from the originator, `resp_*` back):
//! - `orig_bytes` / `resp_bytes`: IP-level bytes (IP headers included), the registry's
//!   `orig_bytes`; `orig_ip_bytes` / `resp_ip_bytes` repeat them under Zeek's name;
//! - `orig_frame_bytes` / `resp_frame_bytes`: frame bytes on the wire (pcap original length),
//!   which is what tshark's `-z conv` Bytes columns count;
//! - `orig_payload_bytes` / `resp_payload_bytes`: transport payload, Zeek's `orig_bytes`
//!   (TCP from sequence numbers, so a retransmission counts once; UDP as the headers say).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration as StdDuration, Instant};

use serde_json::json;

use super::filter::Filter;
use super::live::{DEFAULT_CHANNEL_CAPACITY, LiveCapture, wall_clock};
use super::table::{FlowConfig, FlowNotice, FlowRecord, NoticeKind};
use super::{FlowEngine, MergedCaptures, notice_to_event};

/// Arguments of `cepheus flows`.
#[derive(clap::Args, Debug)]
pub struct FlowsArgs {
    /// pcap or pcapng files, read as one stream of frames in time order (captures rotated by
    /// `tcpdump -G` or `-C` make one stream of flows, as in `cepheus replay`).
    #[arg(required_unless_present = "interface")]
    pub files: Vec<PathBuf>,
    /// Capture live on this interface instead (needs root or CAP_NET_RAW).
    #[arg(long, short = 'i', conflicts_with = "files")]
    pub interface: Option<String>,
    /// With --interface: stop after this long (e.g. `3s`, `1m`); default: until Ctrl-C or
    /// SIGTERM (either ends the flows still open, prints them and the summary).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<StdDuration>,
    /// Keep only packets matching this filter, in tcpdump's words over IP packets, e.g.
    /// `udp port 514 and not src net 10.0.0.0/8`, `tcp and (port 22 or 443)`: [src|dst]
    /// host ADDR, [src|dst] net PREFIX, [tcp|udp] [src|dst] port N|NAME, portrange N-M, tcp,
    /// udp, icmp, icmp6, ip, ip6, [ip|ip6] proto N, vlan [N] (a tag other than 0, either tag of a
    /// Q-in-Q frame, where tcpdump reads the outer one; unlike tcpdump, the other words match
    /// tagged frames too, without `vlan and`), with and, or, not and
    /// parentheses (and/or of equal precedence, left to right, as in tcpdump); no link-level
    /// words, byte offsets, less/greater or host names.
    #[arg(long, short = 'f')]
    pub filter: Option<String>,
    /// Most flows kept at once (more evicts the flow closest to its timeout).
    #[arg(long, default_value_t = FlowConfig::default().max_flows,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_flows: usize,
    /// Print the flow events (flow_start, flow_end, attempt_failed) and the syslog datagrams'
    /// events as they happen, as JSON lines `cepheus replay` reads, instead of one record per
    /// flow.
    #[arg(long)]
    pub events: bool,
}

/// Runs `cepheus flows`.
pub fn run(args: FlowsArgs) -> ExitCode {
    if args.duration.is_some() && args.interface.is_none() {
        eprintln!(
            "error: --duration bounds a live capture (--interface); a capture file is read to its end"
        );
        return ExitCode::from(2);
    }
    let filter = match Filter::parse(args.filter.as_deref().unwrap_or("")) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let cfg = FlowConfig {
        max_flows: args.max_flows,
        ..FlowConfig::default()
    };
    let mut out = Output::new(args.events, args.max_flows);
    if let Some(iface) = &args.interface {
        return run_live(iface, filter, args.duration, cfg, &mut out);
    }
    let mut frames = match MergedCaptures::open(&args.files) {
        Ok(f) => f,
        Err((path, e)) => {
            eprintln!("error: {}", e.about(&path));
            return ExitCode::from(2);
        }
    };
    let mut engine = FlowEngine::new(cfg);
    let (mut notices, mut syslog) = (Vec::new(), Vec::new());
    let mut filtered_out = 0u64;
    while !out.closed() {
        let Some(frame) = frames.next() else {
            break;
        };
        let pkt = frame.raw();
        if !filter.is_empty()
            && let super::decode::Decoded::Ip(p) = super::decode::decode(pkt.linktype, pkt.data)
            && !filter.matches(&p)
        {
            filtered_out += 1;
            continue;
        }
        let before = engine.damaged();
        engine.push(&pkt, &mut notices, &mut syslog);
        let damaged = engine.damaged() - before;
        if damaged > 0 {
            frames.note_damaged(damaged);
        }
        out.notices(&mut notices);
        out.syslog(&mut syslog);
        out.spill(&engine);
    }
    // The flows open at the end, a few thousand at a time, written as they go.
    loop {
        let done = engine.finish_some(super::FINISH_STEP, &mut notices, &mut syslog);
        out.notices(&mut notices);
        out.syslog(&mut syslog);
        out.spill(&engine);
        if done || out.closed() {
            break;
        }
    }
    out.flush();
    let mut summary = serde_json::to_value(engine.counters()).unwrap_or_default();
    summary["read_errors"] = json!(frames.errors().len());
    if !filter.is_empty() {
        // `packets` counts the frames that passed the filter: these are the others.
        summary["filtered_out"] = json!(filtered_out);
    }
    match args.files.as_slice() {
        [one] => summary["file"] = json!(one.display().to_string()),
        many => {
            summary["files"] = json!(
                many.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
            )
        }
    }
    for w in frames.file_warnings() {
        eprintln!("{w}");
    }
    for w in engine.counters().read_warnings() {
        eprintln!("warning: {w}");
    }
    for path in &args.files {
        if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            eprintln!(
                "warning: {}: the file is empty (0 bytes): no capture in it",
                path.display()
            );
        }
    }
    if let [(_, e)] = frames.errors() {
        summary["read_error"] = json!(e.to_string());
    }
    print_summary(&summary);
    out.exit_code(ExitCode::SUCCESS)
}

fn run_live(
    iface: &str,
    filter: Filter,
    duration: Option<StdDuration>,
    cfg: FlowConfig,
    out: &mut Output,
) -> ExitCode {
    let cap = match LiveCapture::start(
        iface,
        filter,
        DEFAULT_CHANNEL_CAPACITY,
        super::live::Recovery::Stop,
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Ctrl-C or SIGTERM ends the capture as `--duration` does: the flows still open end, and
    // they and the summary are printed (the default action would lose them all: found by an
    // audit).
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("warning: cannot catch signal {sig} ({e}): stopping it loses the open flows");
        }
    }
    let started = Instant::now();
    let mut engine = FlowEngine::new(cfg);
    let (mut notices, mut syslog) = (Vec::new(), Vec::new());
    out.as_they_end = true;
    loop {
        if out.closed()
            || stop.load(Ordering::Relaxed)
            || duration.is_some_and(|d| started.elapsed() >= d)
        {
            break;
        }
        match cap.recv_timeout(StdDuration::from_millis(200)) {
            Ok(Some(pkt)) => {
                engine.push(&pkt.as_raw(), &mut notices, &mut syslog);
                out.notices(&mut notices);
                out.syslog(&mut syslog);
            }
            Ok(None) => {
                engine.advance(wall_clock(), &mut notices);
                out.notices(&mut notices);
            }
            Err(()) => break,
        }
    }
    use std::sync::atomic::Ordering::Relaxed;
    let failed = cap.failed();
    let stats = cap.stop();
    let (received, filtered, dropped, kernel_dropped, duplicates) = (
        stats.received.load(Relaxed),
        stats.filtered.load(Relaxed),
        stats.dropped.load(Relaxed),
        stats.kernel_dropped.load(Relaxed),
        stats.duplicates.load(Relaxed),
    );
    engine.finish(&mut notices, &mut syslog);
    out.notices(&mut notices);
    out.syslog(&mut syslog);
    out.flush();
    let mut summary = serde_json::to_value(engine.counters()).unwrap_or_default();
    summary["interface"] = json!(iface);
    summary["received"] = json!(received);
    summary["filtered"] = json!(filtered);
    summary["dropped"] = json!(dropped);
    summary["kernel_dropped"] = json!(kernel_dropped);
    summary["loopback_duplicates"] = json!(duplicates);
    print_summary(&summary);
    // The flows seen until then are out; the run did not cover what was asked.
    if let Some(why) = failed {
        eprintln!("error: {why}");
        return ExitCode::from(2);
    }
    out.exit_code(ExitCode::SUCCESS)
}

/// Writes a run's summary object to stderr; a closed stderr (`2>&1 | head`) is no reason to
/// panic.
fn print_summary(summary: &serde_json::Value) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{summary}");
}

/// Fewest ended records held before they are sorted and written (see [`Output::spill`]).
const SPILL_MIN: usize = 4096;

/// Collects ended flows (record mode) or prints events as they come (event mode).
struct Output<W: std::io::Write = std::io::Stdout> {
    /// Where the lines go (standard output; a buffer in tests).
    sink: W,
    events: bool,
    ended: Vec<(FlowRecord, &'static str)>,
    /// Held records that make [`Output::spill`] look at the table again.
    spill_at: usize,
    /// Most ended records held back for order: beyond, the oldest are written anyway.
    cap: usize,
    /// Each record written as its flow ends, in that order (a live capture: a long flow or
    /// steady traffic would hold the sorted ones back for minutes; found by a review).
    as_they_end: bool,
    /// Standard output failed: a reader that went away (`| head`) ends the run quietly,
    /// anything else is reported and the run ends with exit code 2.
    failed: Option<std::io::Error>,
    /// Each sender's last syslog message, for its syslogd's repeat notices (as replay reads
    /// the capture).
    last: crate::ingest::syslog::LastMessages,
}

impl Output {
    fn new(events: bool, max_flows: usize) -> Self {
        Output::with_sink(std::io::stdout(), events, max_flows)
    }
}

impl<W: std::io::Write> Output<W> {
    fn with_sink(sink: W, events: bool, max_flows: usize) -> Self {
        Output {
            sink,
            events,
            ended: Vec::new(),
            spill_at: SPILL_MIN,
            cap: max_flows.max(SPILL_MIN),
            as_they_end: false,
            failed: None,
            last: Default::default(),
        }
    }

    /// Writes one line to standard output, unless it already failed.
    fn line(&mut self, v: impl std::fmt::Display) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = writeln!(self.sink, "{v}") {
            self.failed = Some(e);
        }
    }

    /// Whether writing failed (the run stops reading).
    fn closed(&self) -> bool {
        self.failed.is_some()
    }

    /// The run's exit code given writing: a closed pipe is not an error.
    fn exit_code(&self, code: ExitCode) -> ExitCode {
        match &self.failed {
            Some(e) if e.kind() == std::io::ErrorKind::BrokenPipe => code,
            Some(e) => {
                eprintln!("error: writing to standard output: {e}");
                ExitCode::from(2)
            }
            None => code,
        }
    }

    fn notices(&mut self, notices: &mut Vec<FlowNotice>) {
        for n in notices.drain(..) {
            if self.events {
                self.line(crate::events_cmd::event_json(&notice_to_event(&n)));
            } else if let NoticeKind::End(r) = n.kind {
                if self.as_they_end {
                    self.line(record_json(&n.flow, r.name()));
                } else {
                    self.ended.push((n.flow, r.name()));
                }
            }
        }
    }

    fn syslog(&mut self, messages: &mut Vec<super::SyslogDatagram>) {
        for d in messages.drain(..) {
            if !self.events {
                continue;
            }
            // As `cepheus replay` reads JSON lines (and reads this message in the capture): the
            // parsed syslog event with its sender as `peer` and the capture stamp as
            // `arrival`, so `flows --events` output replays to the same alerts as the capture.
            let parser = crate::ingest::syslog::SyslogParser::default();
            match parser.parse(&d.payload, d.time, Some(d.src)) {
                Ok(mut ev) => {
                    ev.arrival = d.time;
                    let bytes = crate::ingest::syslog::trim_bytes(&d.payload);
                    let ev = self.last.take(ev, bytes, Some(d.src), |b| {
                        parser.parse(b, d.time, Some(d.src)).ok()
                    });
                    self.line(crate::events_cmd::event_json(&ev));
                }
                Err(_) => self.line(json!({
                    "time": d.time.to_rfc3339(),
                    "source": "syslog_datagram",
                    "src": d.src.to_string(),
                    "payload": String::from_utf8_lossy(&d.payload),
                })),
            }
        }
    }

    /// Writes, in order, the ended records no flow still open can come before (their first
    /// packet is older than every open flow's), and past `cap` held the oldest half anyway;
    /// looks at the table only every so many records, so the cost per record stays small
    /// however many flows are open.
    fn spill(&mut self, engine: &FlowEngine) {
        if self.events || self.ended.len() < self.spill_at {
            return;
        }
        self.ended.sort_by_key(|(f, _)| (f.first, f.id));
        let mut n = match engine.oldest_open() {
            Some(t) => self.ended.partition_point(|(f, _)| f.first < t),
            None => self.ended.len(),
        };
        if self.ended.len() - n > self.cap {
            n = self.ended.len() - self.cap / 2;
        }
        let ready: Vec<_> = self.ended.drain(..n).collect();
        for (f, reason) in ready {
            self.line(record_json(&f, reason));
        }
        self.spill_at = (self.ended.len().max(engine.open_flows()).max(SPILL_MIN / 2)) * 2;
    }

    fn flush(&mut self) {
        self.ended.sort_by_key(|(f, _)| (f.first, f.id));
        let ended = std::mem::take(&mut self.ended);
        for (f, reason) in ended {
            self.line(record_json(&f, reason));
        }
    }
}

/// A flow as a conn.log-like JSON object.
pub fn record_json(f: &FlowRecord, end_reason: &str) -> serde_json::Value {
    json!({
        "ts": f.first.to_rfc3339(),
        "uid": format!("F{:016x}", f.id),
        "src": f.src.to_string(),
        "sport": f.sport,
        "dst": f.dst.to_string(),
        "dport": f.dport,
        "proto": f.proto_name(),
        "vlan": f.vlan,
        "vlan_outer": f.vlan_outer,
        "duration": f.duration().0 as f64 / 1e9,
        "state": f.state(),
        "orig_pkts": f.orig.pkts,
        "resp_pkts": f.resp.pkts,
        "orig_bytes": f.orig.ip_bytes,
        "resp_bytes": f.resp.ip_bytes,
        "orig_ip_bytes": f.orig.ip_bytes,
        "resp_ip_bytes": f.resp.ip_bytes,
        "orig_frame_bytes": f.orig.frame_bytes,
        "resp_frame_bytes": f.resp.frame_bytes,
        "orig_payload_bytes": f.orig.payload_bytes,
        "resp_payload_bytes": f.resp.payload_bytes,
        "orig_flags": super::table::flag_letters(f.orig_flags.all),
        "resp_flags": super::table::flag_letters(f.resp_flags.all),
        "end_reason": end_reason,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use cepheus_core::time::Timestamp;
    use etherparse::PacketBuilder;

    use super::super::capture::RawPacket;
    use super::super::decode::linktype;
    use super::*;

    /// Records are written sorted by first packet as the flows before them end, holding few
    /// (not every flow of the capture until its end); a flow open since before many others
    /// ended does not hold them all back.
    #[test]
    fn ended_records_are_written_in_order_in_bounded_memory() {
        // About 1,000 flows open at once (one a millisecond, 1 s idle), none evicted.
        let cfg = FlowConfig {
            max_flows: 2_000,
            udp_idle: cepheus_core::time::Duration(1_000_000_000),
            ..FlowConfig::default()
        };
        let mut engine = FlowEngine::new(cfg);
        let mut out = Output::with_sink(Vec::new(), false, cfg.max_flows);
        let (mut notices, mut syslog) = (Vec::new(), Vec::new());
        let mut most_held = 0;
        let n = 30_000u32;
        for i in 0..=n {
            // Flow 0 from one address, sending again every 500 ms: open throughout.
            let (src, port) = if i % 500 == 0 {
                ([10, 0, 0, 1], 1000)
            } else {
                ([10, 0, 1, 1], 1024 + (i % 60_000) as u16)
            };
            let mut frame = Vec::new();
            PacketBuilder::ipv4(src, [10, 0, 0, 2], 64)
                .udp(port, 53)
                .write(&mut frame, b"q")
                .unwrap();
            let pkt = RawPacket {
                ts: Timestamp(i64::from(i) * 1_000_000),
                linktype: linktype::RAW,
                orig_len: frame.len() as u32,
                data: &frame,
            };
            engine.push(&pkt, &mut notices, &mut syslog);
            out.notices(&mut notices);
            out.spill(&engine);
            most_held = most_held.max(out.ended.len());
        }
        engine.finish(&mut notices, &mut syslog);
        out.notices(&mut notices);
        out.flush();
        assert!(most_held <= 2 * SPILL_MIN, "{most_held} records held");
        let text = String::from_utf8(out.sink).unwrap();
        let ts: Vec<chrono::DateTime<chrono::FixedOffset>> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                chrono::DateTime::parse_from_rfc3339(v["ts"].as_str().unwrap()).unwrap()
            })
            .collect();
        // Every flow once: the long one and the others.
        assert_eq!(ts.len(), n as usize - (n / 500) as usize + 1);
        // In order, but for the long flow, which came when it ended (at the end of the
        // capture), after the records held past the cap had gone out.
        let late: Vec<usize> = (1..ts.len()).filter(|&i| ts[i] < ts[i - 1]).collect();
        assert_eq!(late.len(), 1, "{late:?}");
        assert_eq!(ts[late[0]].timestamp(), 0);
    }
}
