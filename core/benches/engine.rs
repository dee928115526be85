//! Engine throughput (events already parsed): heartbeat absence over many rules and hosts, and
//! the ssh brute-force rules over many source addresses.
//!
//! `cargo bench -p cepheus-core --bench engine`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use cepheus_core::engine::{Engine, EngineConfig};
use cepheus_core::event::{Event, Field, Source, Value};
use cepheus_core::rules::compile_str;
use cepheus_core::rules::ir::RuleSet;
use cepheus_core::time::Timestamp;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

/// The agent's allocator: the engine is timed as the agent runs it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RULES: usize = 100;
const HOSTS: usize = 100_000;

fn host(i: usize) -> String {
    format!("host{i:06}")
}

/// 100 rules, rule r watching the hosts h with h % 100 == r (disjoint sets covering 100,000
/// hosts), each `absent(hb) for 2m`.
pub fn heartbeat_rules(rules: usize, hosts: usize) -> RuleSet {
    let mut text = String::new();
    for r in 0..rules {
        let hosts: Vec<String> = (0..hosts)
            .filter(|h| h % rules == r)
            .map(|h| format!("\"{}\"", host(h)))
            .collect();
        text.push_str(&format!(
            "[[rule]]\nname = \"hb-{r}\"\nseverity = \"critical\"\ngroup_by = [\"host\"]\nevents.hb = 'syslog and app == \"heartbeat\" and host in [{}]'\npattern = \"absent(hb) for 2m\"\n\n",
            hosts.join(", ")
        ));
    }
    let c = compile_str("bench.toml", &text);
    c.rules.expect("valid heartbeat rules")
}

/// `rounds` heartbeats from every host, one per minute each, in time order.
pub fn heartbeat_events(rounds: usize, hosts: usize) -> Vec<Event> {
    let mut v = Vec::with_capacity(rounds * hosts);
    let t0 = 1_780_000_000i64 * 1_000_000_000;
    let step = 60_000_000_000 / hosts as i64;
    for r in 0..rounds {
        for h in 0..hosts {
            let t = Timestamp(t0 + r as i64 * 60_000_000_000 + h as i64 * step);
            v.push(
                Event::new(Source::Syslog, t, t)
                    .with(Field::Host, Value::str(&host(h)))
                    .with(Field::App, Value::str("heartbeat"))
                    .with(Field::Msg, Value::str("alive")),
            );
        }
    }
    v
}

fn ssh_rules() -> RuleSet {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../rules/ssh.toml")).unwrap();
    compile_str("ssh.toml", &text)
        .rules
        .expect("valid ssh rules")
}

/// Failed logins from 100,000 addresses (a few each), every 50th followed by a success.
fn ssh_events(n: usize) -> Vec<Event> {
    let t0 = 1_780_000_000i64 * 1_000_000_000;
    (0..n)
        .map(|i| {
            let src = i % 100_000;
            let ip = format!("10.{}.{}.{}", src >> 16, (src >> 8) & 255, src & 255);
            let t = Timestamp(t0 + i as i64 * 1_000_000);
            let msg = if i % 50 == 49 {
                format!("Accepted password for alice from {ip} port 2222 ssh2")
            } else {
                format!("Failed password for root from {ip} port 2222 ssh2")
            };
            Event::new(Source::Syslog, t, t)
                .with(Field::Host, Value::str("bastion"))
                .with(Field::App, Value::str("sshd"))
                .with(Field::Msg, Value::str(&msg))
        })
        .collect()
}

/// Pushes every event in batches, as the agent's shards do (the engine is built in the
/// untimed setup).
fn run((mut e, events): (Engine, Vec<Event>)) -> (Engine, usize) {
    let mut out = Vec::new();
    e.push_batch(events, &mut out);
    let n = out.len();
    (e, n)
}

/// Pushes every event one at a time (`Engine::push`).
fn run_one_at_a_time((mut e, events): (Engine, Vec<Event>)) -> (Engine, usize) {
    let mut out = Vec::new();
    for ev in events {
        e.push(ev, &mut out);
    }
    let n = out.len();
    (e, n)
}

fn setup(rules: &RuleSet, events: &[Event]) -> (Engine, Vec<Event>) {
    (
        Engine::new(rules, EngineConfig::default()).unwrap(),
        events.to_vec(),
    )
}

fn bench(c: &mut Criterion) {
    let rules = heartbeat_rules(RULES, HOSTS);
    let events = heartbeat_events(3, HOSTS);
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    g.throughput(Throughput::Elements(events.len() as u64));
    g.bench_function("heartbeat_100_rules_100k_hosts", |b| {
        b.iter_batched(|| setup(&rules, &events), run, BatchSize::LargeInput)
    });
    // Steady state: the 100,000 groups already exist (the first round is pushed in the untimed
    // setup); the timed part is the next three rounds, as in a long-running agent.
    let warm = heartbeat_events(4, HOSTS);
    let (first, rest) = warm.split_at(HOSTS);
    g.throughput(Throughput::Elements(rest.len() as u64));
    let steady = || {
        let (mut e, _) = setup(&rules, &[]);
        let mut out = Vec::new();
        for ev in first {
            e.push(ev.clone(), &mut out);
        }
        (e, rest.to_vec())
    };
    g.bench_function("heartbeat_100_rules_100k_hosts_steady", |b| {
        b.iter_batched(steady, run, BatchSize::LargeInput)
    });
    g.bench_function("heartbeat_100_rules_100k_hosts_steady_one_at_a_time", |b| {
        b.iter_batched(steady, run_one_at_a_time, BatchSize::LargeInput)
    });
    // The same work on a cache-resident working set (10 rules, 1,000 hosts, 100 rounds): the
    // difference to the case above is the cost of cache misses on 100,000 groups.
    let small_rules = heartbeat_rules(10, 1_000);
    let small_events = heartbeat_events(100, 1_000);
    g.throughput(Throughput::Elements(small_events.len() as u64));
    g.bench_function("heartbeat_10_rules_1k_hosts", |b| {
        b.iter_batched(
            || setup(&small_rules, &small_events),
            run,
            BatchSize::LargeInput,
        )
    });
    let rules = ssh_rules();
    let events = ssh_events(300_000);
    g.throughput(Throughput::Elements(events.len() as u64));
    g.bench_function("ssh_rules_100k_sources", |b| {
        b.iter_batched(|| setup(&rules, &events), run, BatchSize::LargeInput)
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
