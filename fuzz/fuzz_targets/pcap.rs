//! Arbitrary bytes as a capture file (pcap or pcapng, told by the magic) through the flow
//! reader, as `cepheus flows --events` and `cepheus replay` read one file:
//! `CaptureReader` → `FlowEngine` (decode, flow table, syslog datagrams, TCP syslog streams put
//! back in order and cut by the RFC 6587 framer) → flow events and records as JSON, syslog
//! messages through the syslog parser. Must never panic.
//!
//! Two engines read the same frames: one as `cepheus flows` configures it (defaults, every
//! frame), one with a table of 2 flows and short timeouts (eviction, expiry), which also
//! filters the frames through a capture filter and moves its clock between frames (the live
//! capture's idle ticks), with its output as `FlowItem`s (`push_items`, replay's form).

#![no_main]

use std::io::Cursor;

use cepheus_agent::flow::capture::CaptureReader;
use cepheus_agent::flow::cmd::record_json;
use cepheus_agent::flow::decode::{Decoded, decode};
use cepheus_agent::flow::filter::Filter;
use cepheus_agent::flow::table::{FlowConfig, FlowNotice, NoticeKind};
use cepheus_agent::flow::{FlowEngine, FlowItem, SyslogDatagram, notice_to_event};
use cepheus_agent::ingest::syslog::SyslogParser;
use cepheus_core::time::Duration;
use libfuzzer_sys::fuzz_target;

/// Frames read at most (a capture's loop is linear; this bounds one input's time).
const MAX_FRAMES: usize = 2_000;

fn notices(out: &mut Vec<FlowNotice>) {
    for n in out.drain(..) {
        let _ = notice_to_event(&n).to_json().to_string();
        if let NoticeKind::End(r) = n.kind {
            let _ = record_json(&n.flow, r.name()).to_string();
        }
    }
}

fn syslog(parser: &SyslogParser, out: &mut Vec<SyslogDatagram>) {
    for d in out.drain(..) {
        if let Ok(ev) = parser.parse(&d.payload, d.time, Some(d.src)) {
            let _ = ev.to_json().to_string();
        }
    }
}

fn items(parser: &SyslogParser, out: &mut Vec<FlowItem>) {
    for item in out.drain(..) {
        match item {
            FlowItem::Flow(ev) => {
                let _ = ev.to_json().to_string();
            }
            FlowItem::Syslog(d) => {
                if let Ok(ev) = parser.parse(&d.payload, d.time, Some(d.src)) {
                    let _ = ev.to_json().to_string();
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = CaptureReader::new(Cursor::new(data)) else {
        return;
    };
    let parser = SyslogParser::default();
    let filter = Filter::parse("not port 53 and not vlan 4095").unwrap_or_default();
    let mut plain = FlowEngine::new(FlowConfig::default());
    const S: i64 = 1_000_000_000;
    let mut small = FlowEngine::new(FlowConfig {
        tcp_idle: Duration(10 * S),
        tcp_attempt: Duration(2 * S),
        tcp_close_linger: Duration(S),
        udp_idle: Duration(3 * S),
        other_idle: Duration(3 * S),
        active: Duration(20 * S),
        max_flows: 2,
    });
    let (mut ns, mut ds, mut its) = (Vec::new(), Vec::new(), Vec::new());
    let mut frames = 0;
    while let Some(Ok(pkt)) = reader.next_packet() {
        frames += 1;
        if frames > MAX_FRAMES {
            break;
        }
        plain.push(&pkt, &mut ns, &mut ds);
        notices(&mut ns);
        syslog(&parser, &mut ds);

        small.advance_items(pkt.ts, &mut its);
        let keep = match decode(pkt.linktype, pkt.data) {
            Decoded::Ip(p) => filter.matches(&p),
            _ => true,
        };
        if keep {
            small.push_items(&pkt, &mut its);
        }
        items(&parser, &mut its);
    }
    plain.finish(&mut ns, &mut ds);
    notices(&mut ns);
    syslog(&parser, &mut ds);
    let _ = serde_json::to_string(&plain.counters());
    small.finish_items(&mut its);
    items(&parser, &mut its);
    let _ = serde_json::to_string(&small.counters());
});
