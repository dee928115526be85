//! Syslog lines parsed per second, RFC 3164 (real loghub files and syslog_loose's bench lines)
//! and RFC 5424 (syslog_loose's bench lines). Run: `cargo bench -p cepheus-agent --bench
//! syslog_parse`; the "thrpt" column is lines per second. `rfc3164+last/...` adds the
//! per-sender memory of the last message (`LastMessages`) to each parse.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use cepheus_core::time::Timestamp;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

// The agent is a binary crate; its ingest layer is pure, so the bench compiles it in directly.
// `clippy --all-targets` builds benches with cfg(test) but no test harness: the modules' unit
// test imports then look unused.
#[allow(unused_imports)]
use cepheus_agent::ingest;

use ingest::syslog::{LastMessages, SyslogParser, Year, Zone};

fn read(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/syslog")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

fn bench(c: &mut Criterion) {
    let parser = SyslogParser::new(Zone::default(), Year::Resolve);
    let arrival = Timestamp::parse_rfc3339("2026-11-30T00:00:00Z").unwrap();
    let mut group = c.benchmark_group("syslog_parse");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    for file in ["loghub_OpenSSH_2k.log", "loghub_Linux_2k.log"] {
        let text = read(file);
        let lines: Vec<&[u8]> = text.lines().map(str::as_bytes).collect();
        group.throughput(Throughput::Elements(lines.len() as u64));
        group.bench_function(format!("rfc3164/{file}"), |b| {
            b.iter(|| {
                for line in &lines {
                    black_box(parser.parse(black_box(line), arrival, None).is_ok());
                }
            })
        });
        // What remembering each sender's last message (for its syslogd's repeat notices)
        // adds to a parse, as the live router does it: compare with the row above.
        let last = std::sync::Mutex::new(LastMessages::default());
        group.bench_function(format!("rfc3164+last/{file}"), |b| {
            b.iter(|| {
                for line in &lines {
                    if let Ok(ev) = parser.parse(black_box(line), arrival, None) {
                        let mut last = last.lock().unwrap();
                        let ev = last.take(ev, line, None, |b| parser.parse(b, arrival, None).ok());
                        black_box(ev);
                    }
                }
            })
        });
    }

    for name in [
        "rfc3164_simple",
        "rfc3164_long_msg",
        "rfc3164_with_structured_data",
        "rfc5424_with_structured_data",
        "rfc5424_without_structured_data",
        "rfc5424_without_structured_data_long_msg",
    ] {
        let line = read(&format!("syslog_loose_bench_{name}.txt"));
        let line = line.trim_end().as_bytes().to_vec();
        group.throughput(Throughput::Elements(1));
        group.bench_function(name, |b| {
            b.iter(|| black_box(parser.parse(black_box(&line), arrival, None).is_ok()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
