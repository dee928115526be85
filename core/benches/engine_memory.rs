//! Bytes per armed (rule, group): one absence rule with 1,000,000 expected hosts, all armed.
//! Counts live heap bytes with a counting allocator around `Engine::new` + arming. Then what a
//! restart needs: an engine holding 200,000 hosts' partial matches, saved as the agent saves
//! it (JSON), read back and restored, its peak of live heap against the engine's own.
//!
//! `cargo bench -p cepheus-core --bench engine_memory`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use cepheus_core::engine::{Engine, EngineConfig};
use cepheus_core::event::{Field, FieldKey, Value};
use cepheus_core::rules::compile_str;
use cepheus_core::rules::ir::RuleSet;
use cepheus_core::time::Timestamp;

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(by: isize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grew(l.size() as isize);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        grew(n as isize - l.size() as isize);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const N: usize = 1_000_000;

fn main() {
    let c = compile_str(
        "m.toml",
        "[[rule]]\nname = \"hb\"\nseverity = \"critical\"\ngroup_by = [\"host\"]\nexpect = [\"x\"]\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 5m\"\n",
    );
    let mut rules: RuleSet = c.rules.expect("valid rule");
    let mut rule = (*rules.rules[0]).clone();
    rule.expect = (0..N)
        .map(|i| vec![Value::str(&format!("host{i:07}"))])
        .collect();
    assert_eq!(
        rule.events[0].group_fields,
        vec![FieldKey::Known(Field::Host)]
    );
    rules.rules[0] = Arc::new(rule);
    // The expect list itself belongs to the rule set, not to the armed state: measure from here.
    let before = LIVE.load(Ordering::Relaxed);
    let mut engine = Engine::new(&rules, EngineConfig::default()).unwrap();
    let mut out = Vec::new();
    engine.advance_to(Timestamp::from_secs(1_780_000_000), &mut out);
    let after = LIVE.load(Ordering::Relaxed);
    let stats = engine.stats();
    assert_eq!(stats[0].groups, N as u64);
    let per = (after - before) as f64 / N as f64;
    println!(
        "armed groups: {N}; live heap for engine state: {} bytes; {per:.1} bytes per armed (rule, group)",
        after - before
    );
    println!(
        "engine's own estimate: {} bytes per group",
        stats[0].bytes / N as u64
    );
    drop(engine);
    restart_peak();
}

/// Hosts whose partial matches the restart measurement holds.
const HOSTS: usize = 200_000;

/// A restart's peak of live heap: an engine holding [`HOSTS`] groups, each with a partial
/// match of two events (a syslog line each), checkpointed as the agent saves it (JSON), then
/// the JSON read back and restored while the engine is gone; the peak against the engine's
/// own heap before and after.
fn restart_peak() {
    use cepheus_core::engine::Checkpoint;
    use cepheus_core::event::{Event, Source};
    let rules = compile_str(
        "r.toml",
        "[[rule]]\nname = \"brute\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.f = 'syslog and app == \"sshd\" and msg contains \"Failed\"'\nevents.ok = 'syslog and app == \"sshd\" and msg contains \"Accepted\"'\npattern = \"seq(f{5,}, ok) within 1h\"\n",
    )
    .rules
    .expect("valid rule");
    let base = LIVE.load(Ordering::Relaxed);
    let mut engine = Engine::new(&rules, EngineConfig::default()).unwrap();
    let mut out = Vec::new();
    let t0 = 1_780_000_000;
    for round in 0..2 {
        for h in 0..HOSTS {
            let at = Timestamp::from_secs(t0 + round);
            let ev = Event::new(Source::Syslog, at, at)
                .with(Field::Host, Value::str(&format!("host{h:07}")))
                .with(Field::App, Value::str("sshd"))
                .with(
                    Field::Msg,
                    Value::str(&format!(
                        "Failed password for invalid user admin{h} from 203.0.113.{} port {} ssh2",
                        h % 250,
                        40_000 + h % 20_000
                    )),
                );
            engine.push(ev, &mut out);
        }
    }
    let steady = LIVE.load(Ordering::Relaxed) - base;
    // Saving: what the shard holds while it makes the state, written to a file as it is
    // made, then with its text in memory.
    let path =
        std::env::temp_dir().join(format!("cepheus-bench-save-{}.state", std::process::id()));
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    {
        let f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
        serde_json::to_writer(f, &engine.checkpoint()).unwrap();
    }
    let stream_save_peak = PEAK.load(Ordering::Relaxed) - base;
    let _ = std::fs::remove_file(&path);
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let json = serde_json::to_vec(&engine.checkpoint()).unwrap();
    let save_peak = PEAK.load(Ordering::Relaxed) - base;
    drop(engine);
    let with_json = LIVE.load(Ordering::Relaxed) - base;
    // Read back whole, as the agent did until 2026-12-06, and as it does now: decoded from its
    // file as it is read (`SavedState::read`).
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let started = std::time::Instant::now();
    let cp: Checkpoint = serde_json::from_slice(&json).unwrap();
    let whole_secs = started.elapsed().as_secs_f64();
    let whole_peak = PEAK.load(Ordering::Relaxed) - base;
    drop(cp);
    let path = std::env::temp_dir().join(format!("cepheus-bench-{}.state", std::process::id()));
    std::fs::write(&path, &json).unwrap();
    drop(json);
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let started = std::time::Instant::now();
    let file = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&path).unwrap());
    let cp: Checkpoint = serde_json::from_reader(file).unwrap();
    let stream_secs = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    let read_peak = PEAK.load(Ordering::Relaxed) - base;
    let decoded = LIVE.load(Ordering::Relaxed) - base;
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let engine = Engine::restore(&rules, EngineConfig::default(), cp, false).unwrap();
    let restore_peak = PEAK.load(Ordering::Relaxed) - base;
    let after = LIVE.load(Ordering::Relaxed) - base;
    assert_eq!(engine.stats()[0].groups, HOSTS as u64);
    let mb = |b: isize| b as f64 / (1 << 20) as f64;
    let x = |b: isize| b as f64 / steady as f64;
    println!(
        "saving {HOSTS} groups: peak {:.0} MiB ({:.2}x the engine) with the text in memory, {:.0} MiB ({:.2}x) written to a file as made",
        mb(save_peak),
        x(save_peak),
        mb(stream_save_peak),
        x(stream_save_peak)
    );
    println!(
        "restart of {HOSTS} groups: engine {:.0} MiB; its JSON {:.0} MiB, read back {:.0} MiB; peak reading it whole {:.0} MiB ({:.2}x the engine, {whole_secs:.1} s), read from its file as decoded {:.0} MiB ({:.2}x, {stream_secs:.1} s), restoring from what was read {:.0} MiB ({:.2}x); restored engine {:.0} MiB",
        mb(steady),
        mb(with_json),
        mb(decoded),
        mb(whole_peak),
        x(whole_peak),
        mb(read_peak),
        x(read_peak),
        mb(restore_peak),
        x(restore_peak),
        mb(after)
    );
}
