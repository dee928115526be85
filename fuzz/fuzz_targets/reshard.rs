//! Partitioned engines (CEP shards) against one engine: the rules and script of the `engine`
//! target (`common`), without event-time rules (each shard keeps the watermark of the groups
//! it owns, so a silence is judged by its shard's hosts' clocks: docs/rules.md) and without
//! `max_groups` (each shard keeps its share of the budget: docs/rules.md), run
//!
//! - by one engine (`partition: None`), every step;
//! - by `N` engines (`partition: Some(Partition { index, count: N })`, 1 to 4), each event
//!   pushed to the engines `Engine::owners` names (as the agent's ingest routes it, through a
//!   stateless routing engine: agent/src/run/ingest.rs), every clock move to all of them (the
//!   agent ticks every shard); before a step the input picks, the `N` engines are
//!   checkpointed (through JSON), spread over `M` (1 to 4) with `reshard::reshard`, as a
//!   restart with another `engine.shards` does (agent/src/run/mod.rs: `resharded`), and `M`
//!   engines restored from the spread checkpoints (through JSON) go on.
//!
//! Every engine is first advanced to the script's start, as the agent's shards all begin at
//! its start. The shards' alerts reach the agent's sink in the order each shard sent them,
//! with no order across shards, so asserted is: for every (rule, group), exactly the same
//! alerts (as JSON) in the same order as the one engine's (which also makes the two sets of
//! alerts equal as multisets); and, after `finish`, each rule's counters summed over the
//! shards (`reshard` gives the counters' sums to the first new engine) equal to the one
//! engine's, and so does the number of groups held.
//!
//! Set `CEPHEUS_FUZZ_DEBUG=1` to print an input's rules, script and diagnostics.

#![no_main]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use arbitrary::Unstructured;
use cepheus_core::alert::Alert;
use cepheus_core::engine::reshard::reshard;
use cepheus_core::engine::{Checkpoint, Engine, EngineConfig, Partition};
use cepheus_core::rules::compile_str;
use cepheus_core::rules::ir::RuleSet;
use cepheus_core::time::Timestamp;
use common::{Menu, Step, debug};
use libfuzzer_sys::fuzz_target;

/// Alerts by (rule, group), each group's in the order made.
type ByGroup = BTreeMap<(String, String), Vec<String>>;

fn by_group(into: &mut ByGroup, alerts: &[Alert]) {
    for a in alerts {
        let group = serde_json::to_string(&a.to_json()["group"]).unwrap_or_default();
        into.entry((a.rule().to_string(), group))
            .or_default()
            .push(a.to_json().to_string());
    }
}

fn through_json(cp: &Checkpoint) -> Checkpoint {
    let text = serde_json::to_string(cp).expect("a checkpoint serialises");
    serde_json::from_str(&text).expect("a checkpoint reads back")
}

fn shard_cfg(share: bool, index: u32, count: u32) -> EngineConfig {
    EngineConfig {
        share,
        partition: Some(Partition { index, count }),
        ..EngineConfig::default()
    }
}

/// Each rule's counters summed over `engines`, as JSON (every field is a count).
fn rule_counters(engines: &[Engine]) -> Vec<BTreeMap<String, u64>> {
    let mut out: Vec<BTreeMap<String, u64>> = Vec::new();
    for e in engines {
        for (i, s) in e.stats().into_iter().enumerate() {
            if out.len() <= i {
                out.push(BTreeMap::new());
            }
            let serde_json::Value::Object(fields) =
                serde_json::to_value(&s.counters).expect("counters serialise")
            else {
                continue;
            };
            for (k, v) in fields {
                *out[i].entry(k).or_default() += v.as_u64().unwrap_or(0);
            }
        }
    }
    out
}

struct Cut {
    at: usize,
    count: u32,
}

fn run_shards(
    rules: &RuleSet,
    share: bool,
    n: u32,
    cut: Option<Cut>,
    steps: &[Step],
    start: Timestamp,
    end: Timestamp,
) -> (ByGroup, Vec<Engine>) {
    let Ok(mut router) = Engine::new(rules, EngineConfig::default()) else {
        panic!("the routing engine cannot be built for rules an engine took");
    };
    let mut shards: Vec<Engine> = (0..n)
        .map(|i| Engine::new(rules, shard_cfg(share, i, n)).expect("a shard's engine builds"))
        .collect();
    let mut outs: Vec<Vec<Alert>> = (0..n).map(|_| Vec::new()).collect();
    let mut alerts = ByGroup::new();
    for (e, out) in shards.iter_mut().zip(&mut outs) {
        e.advance_to(start, out);
    }
    let mut owners = Vec::new();
    for i in 0..=steps.len() {
        if let Some(c) = &cut
            && c.at == i
        {
            // The shards stop (what they sent is in the sink), their states are spread over
            // `c.count` engines, and those go on.
            for out in &mut outs {
                by_group(&mut alerts, out);
            }
            let parts: Vec<Checkpoint> = shards
                .iter()
                .map(|e| through_json(&e.checkpoint()))
                .collect();
            let spread = reshard(parts, c.count).unwrap_or_else(|e| {
                panic!("reshard refuses the states of {n} shards of processing-time rules: {e}")
            });
            assert_eq!(
                spread.len(),
                c.count as usize,
                "reshard gives one state per engine"
            );
            shards = spread
                .iter()
                .enumerate()
                .map(|(s, cp)| {
                    Engine::restore(
                        rules,
                        shard_cfg(share, s as u32, c.count),
                        through_json(cp),
                        false,
                    )
                    .expect("a spread state restores")
                })
                .collect();
            outs = (0..c.count).map(|_| Vec::new()).collect();
        }
        let Some(step) = steps.get(i) else {
            break;
        };
        match step {
            Step::Push(ev) => {
                owners.clear();
                router.owners(&Arc::new(ev.clone()), shards.len() as u32, &mut owners);
                for &s in &owners {
                    shards[s as usize].push(ev.clone(), &mut outs[s as usize]);
                }
            }
            Step::Advance(t) => {
                for (e, out) in shards.iter_mut().zip(&mut outs) {
                    e.advance_to(*t, out);
                }
            }
        }
    }
    for (e, out) in shards.iter_mut().zip(&mut outs) {
        e.finish(Some(end), out);
        by_group(&mut alerts, out);
    }
    (alerts, shards)
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let (Ok(n), Ok(m), Ok(at), Ok(share)) = (
        u.int_in_range(1..=4u32),
        u.int_in_range(0..=4u32),
        u.arbitrary::<u8>(),
        u.arbitrary::<bool>(),
    ) else {
        return;
    };
    let menu = Menu {
        event_time: false,
        max_groups: false,
        cuts: false,
    };
    let Ok(common::Input { text, script }) = common::input(&mut u, menu) else {
        return;
    };
    let compiled = compile_str("fuzz.toml", &text);
    let steps = &script.steps;
    // `m == 0`: no resharding; else before step `at` scaled to the script.
    let cut = (m > 0).then(|| Cut {
        at: usize::from(at) * (steps.len() + 1) / 256,
        count: m,
    });
    if debug() {
        common::show(&text, &compiled.diagnostics, &script);
        eprintln!(
            "--- {n} shards, share: {share}, resharded to {m} before step {:?}",
            cut.as_ref().map(|c| c.at)
        );
    }
    let Some(rules) = compiled.rules else {
        return;
    };
    let start = Timestamp(1_000_000 * 1_000_000);
    let end = Timestamp((script.end + 100_000).saturating_mul(1_000_000));
    let cfg = EngineConfig {
        share,
        ..EngineConfig::default()
    };
    let Ok(mut one) = Engine::new(&rules, cfg) else {
        return;
    };
    let mut out = Vec::new();
    one.advance_to(start, &mut out);
    for s in steps {
        match s {
            Step::Push(ev) => one.push(ev.clone(), &mut out),
            Step::Advance(t) => one.advance_to(*t, &mut out),
        }
    }
    one.finish(Some(end), &mut out);
    let mut want = ByGroup::new();
    by_group(&mut want, &out);

    let cut_at = cut.as_ref().map(|c| c.at);
    let (got, shards) = run_shards(&rules, share, n, cut, steps, start, end);
    if got != want {
        let keys: std::collections::BTreeSet<_> = want.keys().chain(got.keys()).collect();
        let key = keys
            .into_iter()
            .find(|k| want.get(*k) != got.get(*k))
            .expect("a group differs");
        panic!(
            "{n} shards (resharded to {m} before step {cut_at:?}, share: {share}) and one engine give different alerts for rule {} group {}\none engine: {:#?}\nshards:     {:#?}\nrules:\n{text}",
            key.0,
            key.1,
            want.get(key),
            got.get(key)
        );
    }
    let (a, b) = (
        rule_counters(std::slice::from_ref(&one)),
        rule_counters(&shards),
    );
    assert_eq!(
        a, b,
        "each rule's counters: one engine (left), summed over the shards (right)\nrules:\n{text}"
    );
    assert_eq!(
        one.groups(),
        shards.iter().map(Engine::groups).sum::<usize>(),
        "groups held: one engine, summed over the shards"
    );
});
