//! Differential fuzzing of the engine: a small rule set and a script of events and clock moves,
//! run through `Engine` shared (the default) and unshared (`share: false`, the `--no-share`
//! baseline). Asserts no panic and exactly the same alerts, call by call (each `push`,
//! `advance_to` and the final `finish`), as JSON (id, rule, group, time, state, reason, ...).
//!
//! The input is decoded by hand with `arbitrary::Unstructured` into choices from a fixed menu
//! (`common`, shared with `engine_batch` and `reshard`), the whole menu here.
//!
//! Set `CEPHEUS_FUZZ_DEBUG=1` to print each input's rule text, script and diagnostics (for
//! reading a reproducer: `./target/.../engine artifacts/engine/crash-...`).

#![no_main]

mod common;

use arbitrary::Unstructured;
use cepheus_core::engine::{Checkpoint, Engine, EngineConfig};
use cepheus_core::rules::compile_str;
use cepheus_core::rules::ir::RuleSet;
use cepheus_core::time::Timestamp;
use common::{Menu, Step, debug, describe, json};
use libfuzzer_sys::fuzz_target;

/// Runs the script; with `cut = Some((i, rules, cfg))`, the engine is checkpointed before
/// step `i` (through JSON, as the agent saves it) and a restored engine goes on from there.
fn run(
    mut e: Engine,
    steps: &[Step],
    end: Timestamp,
    cut: Option<(usize, &RuleSet, EngineConfig)>,
) -> Vec<Vec<String>> {
    let mut calls = Vec::with_capacity(steps.len() + 1);
    let mut out = Vec::new();
    let restore = |e: &Engine, rules: &RuleSet, cfg: &EngineConfig| {
        let text = serde_json::to_string(&e.checkpoint()).expect("a checkpoint serialises");
        let cp: Checkpoint = serde_json::from_str(&text).expect("a checkpoint reads back");
        Engine::restore(rules, cfg.clone(), cp, false).expect("a checkpoint restores")
    };
    for (i, s) in steps.iter().enumerate() {
        if let Some((at, rules, cfg)) = &cut
            && *at == i
        {
            e = restore(&e, rules, cfg);
        }
        out.clear();
        match s {
            Step::Push(ev) => e.push(ev.clone(), &mut out),
            Step::Advance(t) => e.advance_to(*t, &mut out),
        }
        calls.push(json(&out));
    }
    if let Some((at, rules, cfg)) = &cut
        && *at == steps.len()
    {
        e = restore(&e, rules, cfg);
    }
    out.clear();
    e.finish(Some(end), &mut out);
    calls.push(json(&out));
    calls
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(common::Input { text, script }) = common::input(&mut u, Menu::ALL) else {
        return;
    };
    let compiled = compile_str("fuzz.toml", &text);
    if debug() {
        common::show(&text, &compiled.diagnostics, &script);
    }
    let (steps, end) = (script.steps, script.end);
    let Some(rules) = compiled.rules else {
        return;
    };
    let end = Timestamp((end + 100_000).saturating_mul(1_000_000));
    // A rule set the checker accepts but the planner refuses is the `rules` target's finding;
    // here both modes must agree on it, and there is nothing to run.
    let built = [true, false].map(|share| {
        Engine::new(
            &rules,
            EngineConfig {
                share,
                ..EngineConfig::default()
            },
        )
        .map_err(|e| e.to_string())
    });
    let (shared, unshared) = match built {
        [Ok(s), Ok(u)] => (run(s, &steps, end, None), run(u, &steps, end, None)),
        [Err(a), Err(b)] if a == b => return,
        [a, b] => panic!(
            "Engine::new accepts the rules in one mode only: shared {:?}, unshared {:?}",
            a.err(),
            b.err()
        ),
    };
    if shared != unshared {
        let at = shared
            .iter()
            .zip(&unshared)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let what = steps.get(at).map_or("finish".to_string(), describe);
        panic!(
            "shared and unshared alerts differ at call {at} ({what})\nshared:   {:#?}\nunshared: {:#?}\nrules:\n{text}",
            shared[at], unshared[at]
        );
    }

    // Checkpoint, restore (through JSON) and go on, at a step the input picks, in the mode it
    // picks: "Engine::restore continues exactly", so the alerts are those of never stopping.
    let h = cepheus_core::engine::stable_hash_bytes(data);
    let at = (h % (steps.len() as u64 + 1)) as usize;
    let share = h & (1 << 40) != 0;
    let cfg = EngineConfig {
        share,
        ..EngineConfig::default()
    };
    let Ok(e) = Engine::new(&rules, cfg.clone()) else {
        return;
    };
    let cut = run(e, &steps, end, Some((at, &rules, cfg)));
    let whole = if share { &shared } else { &unshared };
    if *whole != cut {
        let call = whole
            .iter()
            .zip(&cut)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let what = steps.get(call).map_or("finish".to_string(), describe);
        panic!(
            "checkpoint before step {at} and restore (share: {share}) changes the alerts at call {call} ({what})\nwhole: {:#?}\ncut:   {:#?}\nrules:\n{text}",
            whole[call], cut[call]
        );
    }
});
