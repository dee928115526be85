//! Bytes per armed (rule, group): one absence rule with 1,000,000 expected hosts, all armed.
//! Counts live heap bytes with a counting allocator around `Engine::new` + arming.
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

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
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
}
