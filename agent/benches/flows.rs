//! Packets per second through pcap reading + decode + flow table, on one core.
//!
//! A synthetic capture is built in memory with etherparse: 1,000,000 Ethernet/IPv4 frames over
//! 10,000 flows (half TCP with a SYN/SYN-ACK/ACK start, half UDP), interleaved, 1 µs apart.
//! Run: `cargo bench -p cepheus-agent --bench flows`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::io::Cursor;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use etherparse::PacketBuilder;

use cepheus_agent::flow;

const PACKETS: usize = 1_000_000;
const FLOWS: usize = 10_000;

fn synthetic_pcap() -> Vec<u8> {
    let mut out = Vec::with_capacity(PACKETS * 90 + 24);
    out.extend_from_slice(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0]);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    let payload = [0x55u8; 32];
    let mut frame = Vec::with_capacity(128);
    for i in 0..PACKETS {
        let f = i % FLOWS;
        let round = i / FLOWS;
        let client = [10, 1, (f >> 8) as u8, f as u8];
        let server = [192, 168, 0, (f % 200) as u8 + 1];
        let cport = 20_000 + (f % 40_000) as u16;
        // Client on even rounds: SYN (round 0), SYN-ACK from the server (round 1), then alternate.
        let from_client = round.is_multiple_of(2);
        let (src, dst, sp, dp) = if from_client {
            (client, server, cport, 443)
        } else {
            (server, client, 443, cport)
        };
        frame.clear();
        let b = PacketBuilder::ethernet2([1; 6], [2; 6]).ipv4(src, dst, 64);
        if f.is_multiple_of(2) {
            let mut t = b.tcp(sp, dp, round as u32, 65535);
            t = match round {
                0 => t.syn(),
                1 => t.syn().ack(1),
                _ => t.ack(1),
            };
            t.write(&mut frame, if round < 3 { &[] } else { &payload })
                .unwrap();
        } else {
            b.udp(sp, dp).write(&mut frame, &payload).unwrap();
        }
        let us = i as u64;
        let (sec, usec) = (1_700_000_000 + us / 1_000_000, us % 1_000_000);
        out.extend_from_slice(&(sec as u32).to_le_bytes());
        out.extend_from_slice(&(usec as u32).to_le_bytes());
        out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        out.extend_from_slice(&frame);
    }
    out
}

fn run(pcap: &[u8]) -> (u64, usize) {
    let mut reader = flow::capture::CaptureReader::new(Cursor::new(pcap)).unwrap();
    let mut engine = flow::FlowEngine::new(flow::table::FlowConfig::default());
    let mut notices = Vec::with_capacity(1024);
    let mut syslog = Vec::new();
    let mut ended = 0usize;
    while let Some(Ok(pkt)) = reader.next_packet() {
        engine.push(&pkt, &mut notices, &mut syslog);
        ended += notices.len();
        notices.clear();
        syslog.clear();
    }
    engine.finish(&mut notices, &mut syslog);
    ended += notices.len();
    (engine.counters().decoded, ended)
}

fn bench(c: &mut Criterion) {
    let pcap = synthetic_pcap();
    let (decoded, notices) = run(&pcap);
    assert_eq!(decoded, PACKETS as u64);
    assert_eq!(notices, 2 * FLOWS);
    let mut g = c.benchmark_group("flows");
    g.throughput(Throughput::Elements(PACKETS as u64));
    g.sample_size(10);
    g.measurement_time(std::time::Duration::from_secs(20));
    g.bench_function("pcap_decode_table_1M_pkts_10k_flows", |b| {
        b.iter(|| black_box(run(black_box(&pcap))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
