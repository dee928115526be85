//! Reloads under fuzzing: a rule set R1 from the `engine` target's menu (`common`), then up to
//! three reloads, each to a set derived from the one before by edits the input picks (rules
//! kept, removed, renamed, changed in window, pattern, a condition, `expect`, `forget_after`
//! or `trigger`, given another severity, copied under a new name (the same meaning, begun
//! later), new rules added), at steps of the script the input picks, between its events and
//! clock moves; and a checkpoint/restore through JSON of the shared engine, the unshared one
//! or both, at a step it picks. Checked, by docs/rules.md ("Reload and restart"):
//!
//! 1. the shared engine and the unshared one (`share: false`) give exactly the same alerts,
//!    call by call (reloads included), as JSON, and the same retired rules from `reload`;
//! 2. each alert's lifecycle: a `resolved` or `retracted` alert fired before under its id and
//!    was still open (or, retracted by a late event, was resolved, once); every group that `list_groups` says is firing has an open alert; at a
//!    reload, every firing group of a removed rule gets a `resolved` with reason
//!    `rule_removed`, of a changed rule (its meaning, not only its `expect`) `rule_changed`,
//!    and the reload emits nothing else (a kept rule, one whose `expect` alone or severity
//!    changed, or whose state-mate left, emits nothing); `reload` returns exactly the removed
//!    and changed rules with those reasons;
//! 3. a rule kept by name and meaning (severity aside) gives the alerts (severity aside) of
//!    an engine that never reloaded, until it is edited, renamed or removed (state-mates that
//!    part keep a copy each; a rule added with its meaning shares nothing with it); and a
//!    rule under a new name (added, renamed, copied) in processing time gives the alerts of a
//!    fresh engine started with it at the reload's clock ("a rule added at a reload begins
//!    monitoring there, whatever its meaning"), call by call;
//! 4. no panic, no hang.
//!
//! Set `CEPHEUS_FUZZ_DEBUG=1` to print the rule sets, where each reload falls and the script.

#![no_main]

mod common;

use std::collections::{HashMap, HashSet};

use arbitrary::{Result, Unstructured};
use cepheus_core::alert::{Alert, AlertState, Reason};
use cepheus_core::engine::{Checkpoint, Engine, EngineConfig};
use cepheus_core::rules::compile_str;
use cepheus_core::rules::ir::{Rule, RuleSet};
use cepheus_core::time::Timestamp;
use common::{DURS, Menu, Step, debug, describe, json};
use libfuzzer_sys::fuzz_target;

/// The name line of a rule body, filled in by [`Entry::text`].
const NAME: &str = "name = \"@\"";

#[derive(Clone)]
struct Entry {
    name: String,
    /// The rule's text with [`NAME`] for its name line.
    body: String,
}

impl Entry {
    fn text(&self) -> String {
        self.body
            .replacen(NAME, &format!("name = \"{}\"", self.name), 1)
    }
    /// The body with the severity left out (no part of a rule's meaning).
    fn meaning(&self) -> String {
        self.body
            .replace("severity = \"high\"", "severity = \"low\"")
    }
    fn event_time(&self) -> bool {
        self.body.contains("time = \"event\"")
    }
}

fn set_text(es: &[&Entry]) -> String {
    es.iter().map(|e| e.text() + "\n").collect()
}

fn fresh(u: &mut Unstructured<'_>, id: &mut usize) -> Result<(Entry, bool)> {
    let (r, copy) = common::rule(u, *id, Menu::ALL)?;
    let name = format!("r{id}");
    *id += 1;
    let body = r.replacen(&format!("name = \"{name}\""), NAME, 1);
    Ok((Entry { name, body }, copy))
}

fn within(u: &mut Unstructured<'_>) -> Result<Option<String>> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 => None,
        1 => Some(format!(" within {}", common::dur(u)?)),
        _ => {
            let a = u.int_in_range(0..=4usize)?;
            let b = u.int_in_range(a + 1..=DURS.len() - 1)?;
            Some(format!(" within {}..{}", DURS[a], DURS[b]))
        }
    })
}

/// One edit of a rule's body (which may leave it invalid: that reload is then refused, as the
/// agent refuses one, and skipped).
fn edit(u: &mut Unstructured<'_>, body: &str) -> Result<String> {
    let mut lines: Vec<String> = body.lines().map(str::to_string).collect();
    let pat = lines.iter().position(|l| l.starts_with("pattern = \""));
    match u.int_in_range(0..=6u8)? {
        0 => {
            // The window.
            if let Some(i) = pat {
                let inner = lines[i]["pattern = \"".len()..lines[i].len() - 1].to_string();
                let p = inner.split(" within ").next().unwrap_or(&inner).to_string();
                let w = within(u)?.unwrap_or_default();
                lines[i] = format!("pattern = \"{p}{w}\"");
            }
        }
        1 => {
            // The pattern, under the same window.
            if let Some(i) = pat {
                let inner = lines[i]["pattern = \"".len()..lines[i].len() - 1].to_string();
                let w = inner.split_once(" within ").map(|(_, w)| w.to_string());
                let p = common::pattern(u, w.is_some())?;
                let w = w.map(|w| format!(" within {w}")).unwrap_or_default();
                lines[i] = format!("pattern = \"{p}{w}\"");
            }
        }
        2 => {
            // A condition.
            let pre = format!("events.e{} = ", u.int_in_range(0..=3u8)?);
            let c = common::cond(u)?;
            if let Some(l) = lines.iter_mut().find(|l| l.starts_with(&pre)) {
                *l = format!("{pre}'{c}'");
            }
        }
        3 => {
            // The `expect` list (rules grouped by host only).
            let e = common::pick(
                u,
                &[
                    "",
                    "[\"h3\", \"never\"]",
                    "[\"h1\"]",
                    "[\"h1\", \"h2\", \"h3\"]",
                ],
            )?;
            if lines.iter().any(|l| l == "group_by = [\"host\"]") {
                lines.retain(|l| !l.starts_with("expect = "));
                if !e.is_empty() {
                    lines.push(format!("expect = {e}"));
                }
            }
        }
        4 => {
            // The severity: no part of the meaning.
            for l in lines.iter_mut().filter(|l| l.starts_with("severity = ")) {
                *l = if l.contains("low") {
                    "severity = \"high\"".into()
                } else {
                    "severity = \"low\"".into()
                };
            }
        }
        5 => {
            let f = common::pick(u, &["", "3s", "5s", "20s", "1m"])?;
            lines.retain(|l| !l.starts_with("forget_after = "));
            if !f.is_empty() {
                lines.push(format!("forget_after = \"{f}\""));
            }
        }
        _ => {
            lines.retain(|l| !l.starts_with("trigger = "));
            match u.int_in_range(0..=2u8)? {
                0 => lines.push(format!("trigger = {{ every = \"{}\" }}", common::dur(u)?)),
                1 => lines.push("trigger = {}".into()),
                _ => {}
            }
        }
    }
    let mut s = lines.join("\n");
    s.push('\n');
    Ok(s)
}

struct Plan {
    r1: Vec<Entry>,
    /// Each reload: where in the script (a fraction of it, /256) and the rules after it.
    reloads: Vec<(u8, Vec<Entry>)>,
    /// Where the checkpoint/restore falls, and which engines (bit 0 shared, bit 1 unshared).
    restore: (u8, u8),
    script: common::Script,
}

fn plan(u: &mut Unstructured<'_>) -> Result<Plan> {
    let mut id = 0;
    let mut r1 = Vec::new();
    for _ in 0..u.int_in_range(1..=5usize)? {
        let (e, copy) = fresh(u, &mut id)?;
        let copy = copy.then(|| Entry {
            name: format!("{}-copy", e.name),
            body: e.body.clone(),
        });
        r1.push(e);
        r1.extend(copy);
    }
    let mut reloads = Vec::new();
    let mut cur = r1.clone();
    for r in 0..u.int_in_range(1..=3u8)? {
        let at = u.arbitrary::<u8>()?;
        let mut next = Vec::new();
        for e in &cur {
            match u.int_in_range(0..=10u8)? {
                0..=3 => next.push(e.clone()),
                4 => {}
                5..=7 => next.push(Entry {
                    name: e.name.clone(),
                    body: edit(u, &e.body)?,
                }),
                8 => next.push(Entry {
                    name: format!("{}-v{}", e.name, r + 1),
                    body: e.body.clone(),
                }),
                9 => {
                    // Kept, and copied under a new name: the same meaning, begun later.
                    next.push(e.clone());
                    next.push(Entry {
                        name: format!("n{id}"),
                        body: e.body.clone(),
                    });
                    id += 1;
                }
                _ => next.push(Entry {
                    name: format!("{}-v{}", e.name, r + 1),
                    body: edit(u, &e.body)?,
                }),
            }
        }
        for _ in 0..u.int_in_range(0..=2u8)? {
            if !cur.is_empty() && u.ratio(1, 2)? {
                // The meaning of a rule of the set before (maybe changed or dropped since).
                let e = u.choose(&cur)?;
                next.push(Entry {
                    name: format!("n{id}"),
                    body: e.body.clone(),
                });
                id += 1;
            } else {
                next.push(fresh(u, &mut id)?.0);
            }
        }
        if next.len() > 1 && u.ratio(1, 4)? {
            let k = u.int_in_range(1..=next.len() - 1)?;
            next.rotate_left(k);
        }
        reloads.push((at, next.clone()));
        cur = next;
    }
    let restore = (u.arbitrary::<u8>()?, u.int_in_range(0..=3u8)?);
    let script = common::script(u, Menu::ALL)?;
    Ok(Plan {
        r1,
        reloads,
        restore,
        script,
    })
}

fn cfg(share: bool) -> EngineConfig {
    EngineConfig {
        share,
        ..EngineConfig::default()
    }
}

fn compile(es: &[&Entry]) -> Option<RuleSet> {
    compile_str("fuzz.toml", &set_text(es)).rules
}

fn key_of(a: &Alert) -> String {
    let v: Vec<String> = a.group().iter().map(|(_, v)| v.to_string()).collect();
    v.join("\u{1}")
}

/// An alert as JSON without its severity (which a reload may change without changing the
/// rule's meaning).
fn plain(a: &Alert) -> String {
    let mut j = a.to_json();
    if let Some(m) = j.as_object_mut() {
        m.remove("severity");
    }
    j.to_string()
}

/// What is checked of the engines under test (`share` true and false) against each other and
/// against the references.
struct World<'a> {
    text: &'a str,
    /// Open alerts of the shared engine: (rule, id) -> group key.
    open: HashMap<(String, u64), String>,
    /// Alerts resolved: a late event may still retract one, once (DESIGN: a late event
    /// stamped before a fired absence's deadline turns that alert into `retracted`).
    resolved: HashSet<(String, u64)>,
    /// Reference engines: the first runs R1 and never reloads; one more per reload that added
    /// processing-time rules under new names, started at the reload's clock.
    refs: Vec<Engine>,
    /// The rules compared with a reference: name -> (reference, whether call tags count).
    track: HashMap<String, (usize, bool)>,
    /// Per tracked rule: (tag, alert) of the engine under test, and of its reference.
    logs: HashMap<String, (Vec<(String, String)>, Vec<(String, String)>)>,
}

impl World<'_> {
    fn lifecycle(&mut self, out: &[Alert], at: &str) {
        for a in out {
            let k = (a.rule().to_string(), a.id().0);
            match a.state {
                AlertState::Firing => {
                    self.open.insert(k, key_of(a));
                }
                AlertState::Retracted
                    if a.reason() == Some("late_event")
                        && !self.open.contains_key(&k)
                        && self.resolved.remove(&k) => {}
                AlertState::Resolved | AlertState::Retracted => {
                    if a.state == AlertState::Resolved {
                        self.resolved.insert(k.clone());
                    }
                    if self.open.remove(&k).is_none() {
                        panic!(
                            "{at}: {} of an alert not open (never fired, or closed already): {}\nrules:\n{}",
                            a.state.name(),
                            a.to_json(),
                            self.text
                        );
                    }
                }
            }
        }
    }

    /// Every group the engine says is firing has an open alert.
    fn firing_groups_are_open(&self, e: &Engine, rules: &RuleSet, at: &str) {
        let open: HashSet<(&str, &str)> = self
            .open
            .iter()
            .map(|((r, _), g)| (r.as_str(), g.as_str()))
            .collect();
        for r in &rules.rules {
            let Some((_, groups)) = e.list_groups(&r.name, usize::MAX) else {
                continue;
            };
            for g in groups.iter().filter(|g| g.firing) {
                let key: Vec<String> = g.key.iter().map(ToString::to_string).collect();
                let key = key.join("\u{1}");
                assert!(
                    open.contains(&(r.name.as_str(), key.as_str())),
                    "{at}: rule {} group {key:?} is firing, but no alert of it is open\nrules:\n{}",
                    r.name,
                    self.text
                );
            }
        }
    }

    fn log_tested(&mut self, out: &[Alert], tag: &str) {
        for a in out {
            if self.track.contains_key(a.rule()) {
                let l = self.logs.entry(a.rule().to_string()).or_default();
                l.0.push((tag.to_string(), plain(a)));
            }
        }
    }

    fn log_ref(&mut self, r: usize, out: &[Alert], tag: &str) {
        for a in out {
            if self.track.get(a.rule()).is_some_and(|t| t.0 == r) {
                let l = self.logs.entry(a.rule().to_string()).or_default();
                l.1.push((tag.to_string(), plain(a)));
            }
        }
    }

    /// Compares a tracked rule's alerts with its reference's, and stops tracking it.
    fn untrack(&mut self, name: &str, why: &str) {
        let Some((r, tags)) = self.track.remove(name) else {
            return;
        };
        let (tested, reference) = self.logs.remove(name).unwrap_or_default();
        let strip = |l: &[(String, String)]| -> Vec<String> {
            l.iter()
                .map(|(t, j)| if tags { format!("@{t} {j}") } else { j.clone() })
                .collect()
        };
        let (a, b) = (strip(&tested), strip(&reference));
        if a != b {
            let at = a
                .iter()
                .zip(&b)
                .position(|(x, y)| x != y)
                .unwrap_or(a.len().min(b.len()));
            panic!(
                "rule {name} ({why}) differs from its reference engine #{r} (0: never reloaded) at alert {at}\nreloaded:  {:#?}\nreference: {:#?}\nrules:\n{}",
                &a[at.min(a.len())..],
                &b[at.min(b.len())..],
                self.text
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(p) = plan(&mut u) else {
        return;
    };
    let all: Vec<&Entry> = p.r1.iter().collect();
    let mut text = format!("--- R1\n{}", set_text(&all));
    let n = p.script.steps.len();
    let mut at_prev = 0;
    let reload_at: Vec<usize> = p
        .reloads
        .iter()
        .map(|(f, _)| {
            at_prev = at_prev.max(usize::from(*f) * (n + 1) / 256);
            at_prev
        })
        .collect();
    for (i, ((_, es), at)) in p.reloads.iter().zip(&reload_at).enumerate() {
        let es: Vec<&Entry> = es.iter().collect();
        text.push_str(&format!(
            "--- R{} before step {at}\n{}",
            i + 2,
            set_text(&es)
        ));
    }
    let restore_at = usize::from(p.restore.0) * (n + 1) / 256;
    if debug() {
        eprintln!("{text}");
        eprintln!(
            "--- restore before step {restore_at}, engines {}",
            p.restore.1
        );
        common::show("", &[], &p.script);
    }
    let Some(rules1) = compile(&all) else {
        return;
    };
    let (Ok(mut a), Ok(mut b), Ok(c)) = (
        Engine::new(&rules1, cfg(true)),
        Engine::new(&rules1, cfg(false)),
        Engine::new(&rules1, cfg(true)),
    ) else {
        // (Whether both modes refuse alike is the `engine` target's check.)
        return;
    };
    let end = Timestamp((p.script.end + 100_000).saturating_mul(1_000_000));
    let mut w = World {
        text: &text,
        open: HashMap::new(),
        resolved: HashSet::new(),
        refs: vec![c],
        track: p
            .r1
            .iter()
            .map(|e| (e.name.clone(), (0, !e.event_time())))
            .collect(),
        logs: HashMap::new(),
    };
    let mut cur: Vec<Entry> = p.r1.clone();
    let mut rules = rules1;
    let mut next_reload = 0;
    for i in 0..=n {
        while next_reload < p.reloads.len() && reload_at[next_reload] == i {
            let k = next_reload;
            next_reload += 1;
            let new: &Vec<Entry> = &p.reloads[k].1;
            let es: Vec<&Entry> = new.iter().collect();
            // A refused reload leaves the old rules running.
            let Some(new_rules) = compile(&es) else {
                continue;
            };
            let at = format!("reload {} (to R{}) before step {i}", k + 1, k + 2);
            let mut firing: Vec<(String, String)> = Vec::new();
            for r in &rules.rules {
                for g in a
                    .list_groups(&r.name, usize::MAX)
                    .map(|x| x.1)
                    .unwrap_or_default()
                {
                    if g.firing {
                        let key: Vec<String> = g.key.iter().map(ToString::to_string).collect();
                        firing.push((r.name.clone(), key.join("\u{1}")));
                    }
                }
            }
            let clock = a.clock();
            let (mut oa, mut ob) = (Vec::new(), Vec::new());
            let (ra, rb) = (a.reload(&new_rules, &mut oa), b.reload(&new_rules, &mut ob));
            let retired = match (ra, rb) {
                (Ok(x), Ok(y)) => {
                    assert_eq!(x, y, "{at}: shared and unshared retire other rules\n{text}");
                    x
                }
                (Err(x), Err(y)) => {
                    assert_eq!(x.to_string(), y.to_string(), "{at}\n{text}");
                    continue;
                }
                (x, y) => panic!(
                    "{at}: reload succeeds in one mode only: shared {:?}, unshared {:?}\n{text}",
                    x.err(),
                    y.err()
                ),
            };
            assert_eq!(
                json(&oa),
                json(&ob),
                "{at}: shared and unshared alerts differ\n{text}"
            );
            w.lifecycle(&oa, &at);
            // What the docs say becomes of each old rule.
            let canon: HashMap<&str, String> = new_rules
                .rules
                .iter()
                .map(|r| (r.name.as_str(), r.canonical()))
                .collect();
            let fate: HashMap<&str, Option<Reason>> = rules
                .rules
                .iter()
                .map(|r| {
                    let f = match canon.get(r.name.as_str()) {
                        None => Some(Reason::RuleRemoved),
                        Some(c)
                            if *c != r.canonical()
                                && !Rule::canonicals_differ_only_in_expect(c, &r.canonical()) =>
                        {
                            Some(Reason::RuleChanged)
                        }
                        Some(_) => None,
                    };
                    (r.name.as_str(), f)
                })
                .collect();
            for al in &oa {
                let f = fate.get(al.rule()).copied().flatten();
                assert!(
                    al.state == AlertState::Resolved
                        && f.is_some()
                        && al.reason() == f.map(Reason::name),
                    "{at}: the reload emits {} (rule {} is {:?} by the docs)\n{text}",
                    al.to_json(),
                    al.rule(),
                    f
                );
            }
            for (r, g) in &firing {
                if let Some(f) = fate.get(r.as_str()).copied().flatten() {
                    assert!(
                        oa.iter().any(|al| al.rule() == r
                            && key_of(al) == *g
                            && al.reason() == Some(f.name())),
                        "{at}: rule {r} ({}) had group {g:?} firing, not resolved at the reload\nreload's alerts: {:#?}\n{text}",
                        f.name(),
                        json(&oa)
                    );
                }
            }
            let mut want: Vec<(String, Reason)> = fate
                .iter()
                .filter_map(|(r, f)| f.map(|f| (r.to_string(), f)))
                .collect();
            want.sort_by(|x, y| x.0.cmp(&y.0));
            // (An engine that never read the clock holds no state, and `reload` then names
            // every rule as changed: no alert can be open, so nothing is left to resolve.)
            if clock.is_some() {
                assert_eq!(retired, want, "{at}: the rules reload retires\n{text}");
            }
            // Tracking: a rule kept by name and meaning goes on being compared.
            let kept: HashMap<&str, String> =
                new.iter().map(|e| (e.name.as_str(), e.meaning())).collect();
            for e in &cur {
                if kept.get(e.name.as_str()) != Some(&e.meaning()) {
                    w.untrack(&e.name, &format!("edited or gone at {at}"));
                }
            }
            w.log_tested(&oa, &at);
            // Rules under new names in processing time: against an engine started now.
            let old: HashSet<&str> = cur.iter().map(|e| e.name.as_str()).collect();
            let newbies: Vec<&Entry> = new
                .iter()
                .filter(|e| !old.contains(e.name.as_str()) && !e.event_time())
                .collect();
            if !newbies.is_empty() {
                let Some(nr) = compile(&newbies) else {
                    panic!("{at}: rules of a set that compiles do not compile alone\n{text}");
                };
                if let Ok(mut d) = Engine::new(&nr, cfg(true)) {
                    let r = w.refs.len();
                    for e in &newbies {
                        w.track.insert(e.name.clone(), (r, true));
                    }
                    let mut o = Vec::new();
                    if let Some(t) = clock {
                        d.advance_to(t, &mut o);
                    }
                    w.refs.push(d);
                    w.log_ref(r, &o, &at);
                }
            }
            cur.clone_from(new);
            rules = new_rules;
            w.firing_groups_are_open(&a, &rules, &at);
        }
        if i == restore_at {
            let again = |e: &Engine, share: bool| {
                let t = serde_json::to_string(&e.checkpoint()).expect("a checkpoint serialises");
                let cp: Checkpoint = serde_json::from_str(&t).expect("a checkpoint reads back");
                Engine::restore(&rules, cfg(share), cp, false).expect("a checkpoint restores")
            };
            if p.restore.1 & 1 != 0 {
                a = again(&a, true);
            }
            if p.restore.1 & 2 != 0 {
                b = again(&b, false);
            }
        }
        let (mut oa, mut ob) = (Vec::new(), Vec::new());
        let (tag, what) = match p.script.steps.get(i) {
            Some(s) => {
                let go = |e: &mut Engine, o: &mut Vec<Alert>| match s {
                    Step::Push(ev) => e.push(ev.clone(), o),
                    Step::Advance(t) => e.advance_to(*t, o),
                };
                go(&mut a, &mut oa);
                go(&mut b, &mut ob);
                for r in 0..w.refs.len() {
                    let mut o = Vec::new();
                    go(&mut w.refs[r], &mut o);
                    w.log_ref(r, &o, &format!("step {i}"));
                }
                (format!("step {i}"), describe(s))
            }
            None => {
                a.finish(Some(end), &mut oa);
                b.finish(Some(end), &mut ob);
                for r in 0..w.refs.len() {
                    let mut o = Vec::new();
                    w.refs[r].finish(Some(end), &mut o);
                    w.log_ref(r, &o, "finish");
                }
                ("finish".to_string(), "finish".to_string())
            }
        };
        if json(&oa) != json(&ob) {
            panic!(
                "{tag} ({what}): shared and unshared alerts differ\nshared:   {:#?}\nunshared: {:#?}\n{text}",
                json(&oa),
                json(&ob)
            );
        }
        if debug() {
            eprintln!("{tag} ({what}): {:#?}", json(&oa));
        }
        w.lifecycle(&oa, &tag);
        w.log_tested(&oa, &tag);
        w.firing_groups_are_open(&a, &rules, &tag);
    }
    let names: Vec<String> = w.track.keys().cloned().collect();
    for name in names {
        w.untrack(&name, "to the end");
    }
});
