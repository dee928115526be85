//! What the engine targets (`engine`, `engine_batch`, `reshard`) share: the menu a fuzz input
//! is decoded from (`arbitrary::Unstructured`), after core's property tests
//! (core/tests/engine/props.rs: `pool_rule`, `adversarial`, `wild`): event definitions on the
//! apps `a`, `b`, `c`, `hb`; hosts `h1`..`h3`; `procid` drawn from the host names (so a
//! definition that takes its group from `procid` feeds the same state under another key);
//! `msg` from `p`, `q`, `r`. The rules are written as rule-file text, to be compiled with
//! `compile_str` (the checker rejecting what the language does not allow), so every rule set
//! the engine sees is one a user could write. Every other rule may be emitted twice under
//! another name (one shared state).
//!
//! A [`Menu`] leaves out what a target's check does not hold for (the bytes that choose it are
//! read all the same): `reshard` has no event-time rule (each shard keeps the watermark of
//! the groups it owns, docs/rules.md) and no `max_groups` (each shard keeps its share of the
//! budget), and `engine_batch` reads batch boundaries in the script.

#![allow(dead_code)]

use std::fmt::Write as _;

use arbitrary::{Result, Unstructured};
use cepheus_core::alert::Alert;
use cepheus_core::event::{Event, Field, Source, Value};
use cepheus_core::time::Timestamp;

/// What the generator may emit.
#[derive(Clone, Copy, Debug)]
pub struct Menu {
    /// `time = "event"` (with `max_delay`, `allowed_lateness`).
    pub event_time: bool,
    /// `max_groups = n`.
    pub max_groups: bool,
    /// Batch boundaries in the script ([`Script::cuts`]); without, the script reads as the
    /// `engine` target always read it.
    pub cuts: bool,
}

impl Menu {
    /// Everything (the `engine` target's menu).
    pub const ALL: Menu = Menu {
        event_time: true,
        max_groups: true,
        cuts: false,
    };
}

/// The events and clock moves of an input.
pub struct Script {
    pub steps: Vec<Step>,
    /// With [`Menu::cuts`]: the steps before which a batch ends (ascending, maybe repeated).
    pub cuts: Vec<usize>,
    /// The last step's time, in milliseconds.
    pub end: i64,
}

/// An input: its rules' text and its script.
pub struct Input {
    pub text: String,
    pub script: Script,
}

/// Decodes the rules (1 to [`MAX_RULES`], some copied under another name) and the script.
pub fn input(u: &mut Unstructured<'_>, menu: Menu) -> Result<Input> {
    let n = u.int_in_range(1..=MAX_RULES)?;
    let mut text = String::new();
    for i in 0..n {
        let (r, copy) = rule(u, i, menu)?;
        text.push_str(&r);
        text.push('\n');
        if copy {
            text.push_str(&r.replacen(
                &format!("name = \"r{i}\""),
                &format!("name = \"r{i}-copy\""),
                1,
            ));
            text.push('\n');
        }
    }
    let script = script(u, menu)?;
    Ok(Input { text, script })
}

/// Prints an input's rules, diagnostics and script (with `CEPHEUS_FUZZ_DEBUG=1`).
pub fn show(text: &str, diagnostics: &[cepheus_core::rules::Diagnostic], s: &Script) {
    eprintln!("--- rules\n{text}");
    for d in diagnostics {
        eprintln!("{}:{}: {}", d.line, d.column, d.message);
    }
    eprintln!("--- script");
    for (i, st) in s.steps.iter().enumerate() {
        for _ in s.cuts.iter().filter(|&&c| c == i) {
            eprintln!("-- cut");
        }
        eprintln!("{i}: {}", describe(st));
    }
    eprintln!("finish {}", s.end + 100_000);
}

pub fn describe(s: &Step) -> String {
    match s {
        Step::Push(e) => format!(
            "push {} time={} arrival={}",
            e.to_json(),
            e.time.0 / 1_000_000,
            e.arrival.0 / 1_000_000
        ),
        Step::Advance(t) => format!("advance_to {}", t.0 / 1_000_000),
    }
}

pub const APPS: [&str; 4] = ["a", "b", "c", "hb"];
pub const HOSTS: [&str; 3] = ["h1", "h2", "h3"];
pub const MSGS: [&str; 3] = ["p", "q", "r"];
/// Event names of every rule: `events.e0` .. `events.e3`.
pub const EVS: [&str; 4] = ["e0", "e1", "e2", "e3"];
/// Durations a rule may name (windows, absences, delays, periods).
pub const DURS: [&str; 10] = [
    "500ms", "1s", "2s", "3s", "4s", "5s", "8s", "10s", "20s", "60s",
];
pub const MAX_RULES: usize = 6;
pub const MAX_STEPS: usize = 200;

pub fn debug() -> bool {
    std::env::var_os("CEPHEUS_FUZZ_DEBUG").is_some()
}

pub fn pick<'a>(u: &mut Unstructured<'_>, xs: &[&'a str]) -> Result<&'a str> {
    Ok(*u.choose(xs)?)
}

pub fn dur(u: &mut Unstructured<'_>) -> Result<&'static str> {
    pick(u, &DURS)
}

/// An event name, or `or(..)` of two (the body of a count or an absence).
fn ev_set(u: &mut Unstructured<'_>) -> Result<String> {
    let a = pick(u, &EVS)?;
    Ok(if u.ratio(1, 4)? {
        format!("or({a}, {})", pick(u, &EVS)?)
    } else {
        a.to_string()
    })
}

/// A count: `x{n}`, `x{n,}`, `x{n,m}`, `x+`, optionally `distinct(field)`.
fn count(u: &mut Unstructured<'_>) -> Result<String> {
    let body = ev_set(u)?;
    let n = u.int_in_range(1..=4u8)?;
    let mut s = match u.int_in_range(0..=3u8)? {
        0 => format!("{body}{{{n}}}"),
        1 => format!("{body}{{{n},}}"),
        2 => {
            let m = n + u.int_in_range(0..=2u8)?;
            format!("{body}{{{n},{m}}}")
        }
        _ => format!("{body}+"),
    };
    if u.ratio(1, 4)? {
        let _ = write!(s, " distinct({})", pick(u, &["msg", "procid", "host"])?);
    }
    Ok(s)
}

/// `absent(x)` with or without `for D`.
fn absence(u: &mut Unstructured<'_>, needs_for: bool) -> Result<String> {
    let body = ev_set(u)?;
    Ok(if needs_for || u.ratio(1, 2)? {
        format!("absent({body}) for {}", dur(u)?)
    } else {
        format!("absent({body})")
    })
}

/// One step of a sequence.
fn step(u: &mut Unstructured<'_>, depth: u8, edge: bool, has_within: bool) -> Result<String> {
    Ok(match u.int_in_range(0..=9u8)? {
        0..=3 => pick(u, &EVS)?.to_string(),
        4 | 5 => count(u)?,
        6 | 7 => absence(u, edge && !has_within)?,
        8 if depth > 0 => format!("or({}, {})", pick(u, &EVS)?, seq(u, depth - 1, has_within)?),
        _ if depth > 0 => seq(u, depth - 1, has_within)?,
        _ => pick(u, &EVS)?.to_string(),
    })
}

fn seq(u: &mut Unstructured<'_>, depth: u8, has_within: bool) -> Result<String> {
    let n = u.int_in_range(2..=4usize)?;
    let mut steps = Vec::with_capacity(n);
    for i in 0..n {
        steps.push(step(u, depth, i == 0 || i == n - 1, has_within)?);
    }
    Ok(format!("seq({})", steps.join(", ")))
}

/// The pattern, without `within`.
pub fn pattern(u: &mut Unstructured<'_>, has_within: bool) -> Result<String> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => pick(u, &EVS)?.to_string(),
        1 => count(u)?,
        // (A count's absence, fewer than n, only as the whole pattern.)
        2 if u.ratio(1, 3)? => {
            let body = ev_set(u)?;
            let n = u.int_in_range(2..=4u8)?;
            format!("absent({body}{{{n},}}) for {}", dur(u)?)
        }
        2 => absence(u, !has_within)?,
        3 | 4 => seq(u, 1, has_within)?,
        5 => {
            let n = u.int_in_range(2..=3usize)?;
            let mut alts = Vec::new();
            for _ in 0..n {
                alts.push(if u.ratio(1, 2)? {
                    pick(u, &EVS)?.to_string()
                } else {
                    seq(u, 0, has_within)?
                });
            }
            format!("or({})", alts.join(", "))
        }
        6 => {
            let n = u.int_in_range(2..=3usize)?;
            let mut parts = Vec::new();
            for _ in 0..n {
                parts.push(if u.ratio(1, 3)? {
                    count(u)?
                } else {
                    pick(u, &EVS)?.to_string()
                });
            }
            format!("and({})", parts.join(", "))
        }
        _ => seq(u, 0, has_within)?,
    })
}

/// A condition on one of the apps.
pub fn cond(u: &mut Unstructured<'_>) -> Result<String> {
    let x = pick(u, &APPS)?;
    Ok(match u.int_in_range(0..=7u8)? {
        0..=2 => format!(r#"syslog and app == "{x}""#),
        3 => format!(r#"syslog and app in ["{x}", "{}"]"#, pick(u, &APPS)?),
        4 => format!(
            r#"syslog and app == "{x}" and msg != "{}""#,
            pick(u, &MSGS)?
        ),
        5 => format!(
            r#"syslog and (app == "{x}" or host == "{}")"#,
            pick(u, &HOSTS)?
        ),
        6 => format!(
            r#"syslog and app == "{x}" and severity <= {}"#,
            u.int_in_range(0..=7u8)?
        ),
        _ => format!(
            r#"syslog and app == "{x}" and msg =~ "^[{}q]""#,
            pick(u, &MSGS)?
        ),
    })
}

/// One rule's text (a `[[rule]]` table), and whether it should also be emitted as a copy.
pub fn rule(u: &mut Unstructured<'_>, i: usize, menu: Menu) -> Result<(String, bool)> {
    let mut r = String::new();
    let group = u.int_in_range(0..=4u8)?;
    let group_by: &[&str] = match group {
        0 => &[],
        1 | 2 => &["host"],
        3 => &["procid"],
        _ => &["host", "msg"],
    };
    let _ = writeln!(r, "[[rule]]\nname = \"r{i}\"\nseverity = \"low\"");
    if !group_by.is_empty() {
        let names: Vec<String> = group_by.iter().map(|g| format!("\"{g}\"")).collect();
        let _ = writeln!(r, "group_by = [{}]", names.join(", "));
    }
    for e in EVS {
        let c = cond(u)?;
        // With `group_by = ["host"]`, a definition may take its host from `procid`.
        if group == 2 && u.ratio(1, 3)? {
            let _ = writeln!(r, "events.{e} = {{ if = '{c}', host = \"procid\" }}");
        } else {
            let _ = writeln!(r, "events.{e} = '{c}'");
        }
    }
    let within = match u.int_in_range(0..=3u8)? {
        0 | 1 => None,
        2 => Some(format!(" within {}", dur(u)?)),
        _ => {
            let a = u.int_in_range(0..=4usize)?;
            let b = u.int_in_range(a + 1..=DURS.len() - 1)?;
            Some(format!(" within {}..{}", DURS[a], DURS[b]))
        }
    };
    let p = pattern(u, within.is_some())?;
    let _ = writeln!(r, "pattern = \"{p}{}\"", within.unwrap_or_default());
    if u.ratio(1, 3)? {
        let line = format!(
            "time = \"event\"\nmax_delay = \"{}\"\nallowed_lateness = \"{}\"",
            pick(u, &["0s", "1s", "3s", "5s"])?,
            pick(u, &["0s", "2s", "4s"])?
        );
        // (The bytes are read either way, so an input means the same rules otherwise.)
        if menu.event_time {
            let _ = writeln!(r, "{line}");
        }
    }
    match u.int_in_range(0..=5u8)? {
        0 => {
            let _ = writeln!(r, "trigger = {{ every = \"{}\" }}", dur(u)?);
        }
        1 => {
            let _ = writeln!(r, "trigger = {{}}");
        }
        _ => {}
    }
    if u.ratio(1, 4)? {
        let _ = writeln!(
            r,
            "forget_after = \"{}\"",
            pick(u, &["3s", "5s", "20s", "1m"])?
        );
    }
    if u.ratio(1, 5)? {
        let n = u.int_in_range(1..=3u8)?;
        if menu.max_groups {
            let _ = writeln!(r, "max_groups = {n}");
        }
    }
    if u.ratio(1, 4)? {
        let _ = writeln!(r, "max_partial_matches = {}", u.int_in_range(1..=3u8)?);
    }
    if group_by == ["host"] && u.ratio(1, 3)? {
        let _ = writeln!(r, "expect = [\"h3\", \"never\"]");
    }
    Ok((r, u.ratio(1, 3)?))
}

pub enum Step {
    Push(Event),
    Advance(Timestamp),
}

pub fn script(u: &mut Unstructured<'_>, menu: Menu) -> Result<Script> {
    let mut steps = Vec::new();
    let mut cuts = Vec::new();
    let mut t: i64 = 1_000_000; // milliseconds
    let ms = |t: i64| Timestamp(t.saturating_mul(1_000_000));
    while steps.len() < MAX_STEPS && !u.is_empty() {
        let kind = u.int_in_range(0..=if menu.cuts { 12 } else { 11u8 })?;
        let gap = *u.choose(&[0i64, 0, 1, 500, 1_000, 1_000, 2_000, 3_000, 5_000, 30_000])?;
        t += gap;
        match kind {
            0..=7 => {
                let off = i64::from(u.int_in_range(-8..=8i8)?) * 1_000;
                let mut e = Event::new(Source::Syslog, ms(t + off), ms(t))
                    .with(Field::App, Value::str(pick(u, &APPS)?))
                    .with(Field::Host, Value::str(pick(u, &HOSTS)?));
                let fields = u.int_in_range(0..=7u8)?;
                if fields & 1 == 0 {
                    e.set(Field::Msg, Value::str(pick(u, &MSGS)?));
                }
                if fields & 2 == 0 {
                    e.set(Field::Procid, Value::str(pick(u, &HOSTS)?));
                }
                if fields & 4 == 0 {
                    e.set(
                        Field::Severity,
                        Value::Int(i64::from(u.int_in_range(0..=7u8)?)),
                    );
                }
                steps.push(Step::Push(e));
            }
            8 => {
                // A flow event: no rule's definition matches it.
                let e = Event::new(Source::Flow, ms(t), ms(t))
                    .with(Field::Dport, Value::Int(22))
                    .with(Field::Kind, Value::str("flow_start"));
                steps.push(Step::Push(e));
            }
            9 | 10 => steps.push(Step::Advance(ms(t))),
            // (Only with `menu.cuts`.) A batch ends before the next step.
            12 => cuts.push(steps.len()),
            _ => {
                // A jump far ahead (past every window, deadline and forget_after).
                t += 1_000_000_000;
                steps.push(Step::Advance(ms(t)));
            }
        }
    }
    Ok(Script {
        steps,
        cuts,
        end: t,
    })
}

pub fn json(alerts: &[Alert]) -> Vec<String> {
    alerts.iter().map(|a| a.to_json().to_string()).collect()
}
