//! `Engine::push_batch` against `Engine::push`: the rules and script of the `engine` target
//! (`common`, the whole menu), with batch boundaries the input chooses (a script step that
//! ends the batch; a clock move ends one too, as the agent's shard pushes a batch, then
//! ticks). Each batch goes through `push_batch` in one engine and event by event through
//! `push` in another, in the same mode (shared and unshared both). Asserts, batch by batch,
//! exactly the same alerts in the same order (as JSON), the same engine counters (all but
//! `family_lookups_saved`, a diagnostic of which shortcut found a group: a read-ahead hint
//! may be a step older than the event's own probe, as core's `batches_are_one_at_a_time`
//! says) and the same number of groups; at the end, after `finish`, the same per-rule
//! statistics (`Engine::stats`) and timer entries.
//!
//! Set `CEPHEUS_FUZZ_DEBUG=1` to print an input's rules, script (with its cuts) and
//! diagnostics.

#![no_main]

mod common;

use arbitrary::Unstructured;
use cepheus_core::engine::{Engine, EngineConfig, EngineCounters};
use cepheus_core::event::Event;
use cepheus_core::rules::compile_str;
use cepheus_core::time::Timestamp;
use common::{Menu, Step, debug, describe, json};
use libfuzzer_sys::fuzz_target;

/// A part of the script: a batch of events, or a clock move.
enum Part<'a> {
    Batch(Vec<&'a Event>),
    Advance(Timestamp),
}

/// The script cut into parts: consecutive pushes form a batch, ended by a cut or a clock move.
fn parts<'a>(steps: &'a [Step], cuts: &[usize]) -> Vec<(usize, Part<'a>)> {
    let mut out: Vec<(usize, Part<'a>)> = Vec::new();
    let mut batch: Option<(usize, Vec<&Event>)> = None;
    for (i, s) in steps.iter().enumerate() {
        if cuts.binary_search(&i).is_ok()
            && let Some((at, b)) = batch.take()
        {
            out.push((at, Part::Batch(b)));
        }
        match s {
            Step::Push(ev) => batch.get_or_insert_with(|| (i, Vec::new())).1.push(ev),
            Step::Advance(t) => {
                if let Some((at, b)) = batch.take() {
                    out.push((at, Part::Batch(b)));
                }
                out.push((i, Part::Advance(*t)));
            }
        }
    }
    if let Some((at, b)) = batch.take() {
        out.push((at, Part::Batch(b)));
    }
    out
}

fn counters(e: &Engine) -> EngineCounters {
    EngineCounters {
        family_lookups_saved: 0,
        ..e.counters().clone()
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let menu = Menu {
        cuts: true,
        ..Menu::ALL
    };
    let Ok(common::Input { text, script }) = common::input(&mut u, menu) else {
        return;
    };
    let compiled = compile_str("fuzz.toml", &text);
    if debug() {
        common::show(&text, &compiled.diagnostics, &script);
    }
    let Some(rules) = compiled.rules else {
        return;
    };
    let end = Timestamp((script.end + 100_000).saturating_mul(1_000_000));
    let parts = parts(&script.steps, &script.cuts);
    for share in [true, false] {
        let cfg = EngineConfig {
            share,
            ..EngineConfig::default()
        };
        // The `engine` target checks that both modes build alike.
        let (Ok(mut batched), Ok(mut single)) = (
            Engine::new(&rules, cfg.clone()),
            Engine::new(&rules, cfg.clone()),
        ) else {
            return;
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for (at, part) in &parts {
            a.clear();
            b.clear();
            let what = match part {
                Part::Batch(evs) => {
                    batched.push_batch(evs.iter().map(|&e| e.clone()), &mut a);
                    for &e in evs {
                        single.push(e.clone(), &mut b);
                    }
                    format!("batch of {} from step {at}", evs.len())
                }
                Part::Advance(t) => {
                    batched.advance_to(*t, &mut a);
                    single.advance_to(*t, &mut b);
                    format!("step {at}: {}", describe(&script.steps[*at]))
                }
            };
            let (ja, jb) = (json(&a), json(&b));
            if ja != jb {
                panic!(
                    "push_batch and push give different alerts (share: {share}) at the {what}\npush_batch: {ja:#?}\npush:       {jb:#?}\nrules:\n{text}"
                );
            }
            assert_eq!(
                counters(&batched),
                counters(&single),
                "push_batch and push give different counters (share: {share}) after the {what}\nrules:\n{text}"
            );
            assert_eq!(
                batched.groups(),
                single.groups(),
                "push_batch and push hold different numbers of groups (share: {share}) after the {what}"
            );
        }
        a.clear();
        b.clear();
        batched.finish(Some(end), &mut a);
        single.finish(Some(end), &mut b);
        assert_eq!(
            json(&a),
            json(&b),
            "push_batch and push differ at finish (share: {share})\nrules:\n{text}"
        );
        assert_eq!(
            counters(&batched),
            counters(&single),
            "counters at finish (share: {share})"
        );
        assert_eq!(
            batched.stats(),
            single.stats(),
            "push_batch and push give different statistics (share: {share})\nrules:\n{text}"
        );
        assert_eq!(
            batched.timer_entries(),
            single.timer_entries(),
            "timer entries at finish (share: {share})"
        );
    }
});
