//! Arbitrary bytes through the agent's syslog ingest: the line parser
//! (`ingest::syslog::SyslogParser`), the RFC 6587 TCP framer (`run::framing::Framer`) and the
//! replay input reader (`ingest::input::Inputs`: syslog and JSON-event lines, line cap, dedup).
//!
//! Input: an 8-byte header (missing bytes are 0), then the stream.
//! - `h[0]` zone of zone-less stamps, `h[1]` year policy (`Year::Resolve` or a fixed year,
//!   extremes included: `replay --year` takes any i32), `h[2]` arrival instant, `h[3]` peer,
//!   `h[4]` the framer's max message size (`syslog.max_message_size` is 16..16 MiB),
//!   `h[5]` seed of the chunking of the stream (TCP reads), `h[6]` the replay reader's line cap.
//!
//! What is checked, besides "never panics":
//! - the framer gives the same frames whatever the chunking of the stream (TCP segment and
//!   read boundaries are arbitrary), and never a message longer than its maximum;
//! - every message it frames is parsed as `cepheus run` parses it, and the event serialised;
//! - the whole stream is also parsed as one datagram (UDP), and read as a replay input file.

#![no_main]

use std::io::Cursor;
use std::net::IpAddr;

use bytes::BytesMut;
use cepheus_agent::ingest::dedup::{Dedup, SharedDedup};
use cepheus_agent::ingest::input::Inputs;
use cepheus_agent::ingest::syslog::{SyslogParser, Year, Zone};
use cepheus_agent::run::framing::{Frame, Framer};
use cepheus_core::time::{Duration, Timestamp};
use libfuzzer_sys::fuzz_target;

const ZONES: [&str; 8] = [
    "UTC",
    "+05:30",
    "-0800",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "+23:59",
];

const YEARS: [i32; 11] = [
    2024,
    1970,
    1677,
    1678,
    2261,
    2262,
    0,
    -1,
    9999,
    i32::MAX,
    i32::MIN,
];

/// 2026-01-01T00:00:00Z, 2025-12-31T23:59:59Z, 2024-02-29T12:00:00Z in nanoseconds.
const ARRIVALS: [i64; 8] = [
    1_767_225_600_000_000_000,
    1_767_225_599_000_000_000,
    1_709_208_000_000_000_000,
    0,
    i64::MIN,
    i64::MAX,
    -1,
    9_214_646_400_000_000_000, // 2262-01-01
];

const MAXES: [usize; 6] = [16, 17, 20, 64, 256, 65_536];

fn frames(
    framer_max: usize,
    stream: &[u8],
    chunks: &mut dyn FnMut() -> usize,
) -> Vec<Result<Vec<u8>, &'static str>> {
    let mut f = Framer::new(framer_max);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut rest = stream;
    loop {
        let n = chunks().min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        while let Some(fr) = f.decode(&mut buf) {
            match fr {
                Frame::Msg(m) => out.push(Ok(m.to_vec())),
                Frame::Oversized => out.push(Err("oversized")),
                Frame::Resynced => out.push(Err("resynced")),
                Frame::Unfinished => out.push(Err("unfinished")),
                Frame::Fatal(_) => {
                    out.push(Err("fatal"));
                    return out;
                }
            }
        }
        if rest.is_empty() {
            break;
        }
    }
    match f.finish(&mut buf) {
        Some(Frame::Msg(m)) => out.push(Ok(m.to_vec())),
        Some(Frame::Oversized) => out.push(Err("oversized")),
        Some(Frame::Fatal(_)) => out.push(Err("fatal")),
        Some(Frame::Resynced) => out.push(Err("resynced")),
        Some(Frame::Unfinished) => out.push(Err("unfinished")),
        None => {}
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let mut h = [0u8; 8];
    let n = data.len().min(8);
    h[..n].copy_from_slice(&data[..n]);
    let stream = &data[n..];

    let zone: Zone = ZONES[usize::from(h[0]) % ZONES.len()]
        .parse()
        .unwrap_or_default();
    let year = match h[1] as usize % (YEARS.len() + 1) {
        0 => Year::Resolve,
        i => Year::Fixed(YEARS[i - 1]),
    };
    let arrival = Timestamp(ARRIVALS[usize::from(h[2]) % ARRIVALS.len()]);
    let peer: Option<IpAddr> = match h[3] % 3 {
        0 => None,
        1 => Some(IpAddr::from([10, 0, 0, 7])),
        _ => Some("::ffff:10.0.0.7".parse().unwrap_or(IpAddr::from([0u8; 16]))),
    };
    let max = MAXES[usize::from(h[4]) % MAXES.len()];
    let parser = SyslogParser::new(zone, year);

    // UDP: the stream as one datagram.
    if let Ok(ev) = parser.parse(stream, arrival, peer) {
        let _ = ev.to_json().to_string();
    }

    // TCP: framed in one read, and in reads of pseudo-random sizes; the same frames.
    let whole = frames(max, stream, &mut || usize::MAX);
    let mut seed = u32::from(h[5]) | 1;
    let mut chunked_reads = || {
        // xorshift: reads of 1..=16 bytes, or 1..=4 when the seed's low bit pattern says so.
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let span = if h[5] & 0x80 != 0 { 4 } else { 16 };
        1 + (seed as usize % span)
    };
    let split = frames(max, stream, &mut chunked_reads);
    assert_eq!(
        whole, split,
        "the framer's output depends on how the stream is cut into reads (max {max})"
    );
    for m in whole.iter().flatten() {
        // (The CR of a CRLF ending is the line end's, not the message's: the parser trims it.)
        let end = usize::from(m.last() == Some(&b'\r'));
        assert!(
            m.len() <= max + end,
            "a frame of {} bytes passed the maximum {max}",
            m.len()
        );
        if let Ok(ev) = parser.parse(m, arrival, peer) {
            let _ = ev.to_json().to_string();
        }
    }

    // Replay: the stream as an input file (syslog and JSON lines, line cap, dedup).
    let max_line = [1usize, 8, 64, 4096][usize::from(h[6]) % 4];
    let reader: Box<dyn std::io::BufRead + Send> = Box::new(Cursor::new(stream.to_vec()));
    let dedup = SharedDedup::new(Dedup::new(Duration::from_secs(5), 16).into());
    let inputs = Inputs::from_readers(vec![("fuzz".into(), reader)], parser, arrival)
        .with_max_line(max_line)
        .with_dedup_keys(dedup.clone());
    for item in inputs {
        match item {
            Ok(item) => {
                if let Ok(ev) = item.event {
                    // Decided as the replay's merger decides, in read order.
                    if let Some(k) = item.dedup_key {
                        let _ = dedup.borrow_mut().seen_key(k, ev.arrival);
                    }
                    let _ = ev.to_json().to_string();
                }
            }
            Err(_) => break,
        }
    }
});
