//! The one place the engine tests exercise the API: build rules, feed a script, compare alerts.

use std::sync::Arc;

use cepheus_core::alert::Alert;
use cepheus_core::engine::{Engine, EngineConfig};
use cepheus_core::event::{Event, Field, FieldKey, Source, Value};
use cepheus_core::rules::ir::{
    CmpOp, Cond, DEFAULT_FORGET_AFTER, DEFAULT_MAX_DELAY, EventDef, Expr, Pattern, Rule, RuleSet,
    Severity, TimeMode, Trigger, Window,
};
use cepheus_core::time::{Duration, Timestamp};

/// A rule under construction. Event definitions match syslog events whose `app` is the
/// definition's name; the group is the `host` field.
pub struct R(pub Rule);

pub fn rule(name: &str, events: &[&str], pattern: Pattern) -> R {
    R(Rule {
        name: name.into(),
        severity: Severity::High,
        description: None,
        message: None,
        group_by: vec!["host".into()],
        events: events
            .iter()
            .enumerate()
            .map(|(position, n)| EventDef {
                name: n.to_string(),
                cond: Cond::And(vec![
                    Cond::Source(Source::Syslog),
                    Cond::Cmp(
                        CmpOp::Eq,
                        Expr::Field(FieldKey::Known(Field::App)),
                        Expr::Lit(Value::str(n)),
                    ),
                ]),
                group_fields: vec![FieldKey::Known(Field::Host).into()],
                position,
            })
            .collect(),
        pattern,
        within: None,
        expect: Vec::new(),
        time: TimeMode::Processing,
        max_delay: DEFAULT_MAX_DELAY,
        allowed_lateness: Duration::ZERO,
        trigger: Trigger::Event,
        forget_after: DEFAULT_FORGET_AFTER,
        max_groups: None,
        max_partial_matches: None,
        file: "test".into(),
    })
}

impl R {
    pub fn within(mut self, secs: i64) -> R {
        self.0.within = Some(Window {
            min: Duration::ZERO,
            max: Duration::from_secs(secs),
        });
        self
    }
    pub fn within_range(mut self, min: i64, max: i64) -> R {
        self.0.within = Some(Window {
            min: Duration::from_secs(min),
            max: Duration::from_secs(max),
        });
        self
    }
    pub fn ungrouped(mut self) -> R {
        self.0.group_by.clear();
        for e in &mut self.0.events {
            e.group_fields.clear();
        }
        self
    }
    pub fn expect(mut self, hosts: &[&str]) -> R {
        self.0.expect = hosts.iter().map(|h| vec![Value::str(h)]).collect();
        self
    }
    pub fn event_time(mut self, delay: i64, lateness: i64) -> R {
        self.0.time = TimeMode::Event;
        self.0.max_delay = Duration::from_secs(delay);
        self.0.allowed_lateness = Duration::from_secs(lateness);
        self
    }
    pub fn every(mut self, secs: Option<i64>) -> R {
        self.0.trigger = Trigger::Every(secs.map(Duration::from_secs));
        self
    }
    pub fn forget_after(mut self, secs: i64) -> R {
        self.0.forget_after = Duration::from_secs(secs);
        self
    }
    pub fn distinct_on_msg(mut self) -> R {
        if let Pattern::Repeat { distinct, .. } = &mut self.0.pattern {
            *distinct = Some(FieldKey::Known(Field::Msg));
        }
        self
    }
    /// Definition `i` matches syslog events whose `msg` is `msg` (whatever their `app`), so
    /// that one event can be two of the rule's definitions.
    pub fn on_msg(mut self, i: usize, msg: &str) -> R {
        self.0.events[i].cond = Cond::And(vec![
            Cond::Source(Source::Syslog),
            Cond::Cmp(
                CmpOp::Eq,
                Expr::Field(FieldKey::Known(Field::Msg)),
                Expr::Lit(Value::str(msg)),
            ),
        ]);
        self
    }
    pub fn max_partial(mut self, n: u64) -> R {
        self.0.max_partial_matches = Some(n);
        self
    }
}

pub fn ev(i: usize) -> Pattern {
    Pattern::Event(i)
}
pub fn seq(ps: Vec<Pattern>) -> Pattern {
    Pattern::Seq(ps)
}
pub fn or(ps: Vec<Pattern>) -> Pattern {
    Pattern::Or(ps)
}
pub fn and(ps: Vec<Pattern>) -> Pattern {
    Pattern::And(ps)
}
pub fn rep(p: Pattern, min: u32, max: Option<u32>) -> Pattern {
    Pattern::Repeat {
        inner: Box::new(p),
        min,
        max,
        distinct: None,
    }
}
pub fn absent(p: Pattern, for_secs: Option<i64>) -> Pattern {
    Pattern::Absent {
        inner: Box::new(p),
        for_: for_secs.map(Duration::from_secs),
    }
}

pub fn set(rules: Vec<R>) -> RuleSet {
    RuleSet {
        rules: rules.into_iter().map(|r| Arc::new(r.0)).collect(),
    }
}

/// One input line of a script: `app:host@secs` (event; `@t/a` gives event time t, arrival a;
/// `app:host:msg@t` sets msg), or `tick@secs` (advance the clock), or `end@secs` (finish with
/// `--until`), or `end` (finish at the last event).
pub enum Step {
    Event(Event),
    Tick(Timestamp),
    End(Option<Timestamp>),
}

pub fn parse_script(script: &str) -> Vec<Step> {
    script
        .split_whitespace()
        .map(|tok| {
            if tok == "end" {
                return Step::End(None);
            }
            let (what, when) = tok.split_once('@').unwrap_or((tok, "0"));
            let (t, a) = match when.split_once('/') {
                Some((t, a)) => (t.parse::<i64>().unwrap(), a.parse::<i64>().unwrap()),
                None => {
                    let t = when.parse::<i64>().unwrap();
                    (t, t)
                }
            };
            match what {
                "tick" => Step::Tick(Timestamp::from_secs(t)),
                "end" => Step::End(Some(Timestamp::from_secs(t))),
                _ => {
                    let mut parts = what.split(':');
                    let app = parts.next().unwrap();
                    let host = parts.next().unwrap_or("h");
                    let mut e = Event::new(
                        Source::Syslog,
                        Timestamp::from_secs(t),
                        Timestamp::from_secs(a),
                    )
                    .with(Field::App, Value::str(app))
                    .with(Field::Host, Value::str(host));
                    if let Some(m) = parts.next() {
                        e.set(Field::Msg, Value::str(m));
                    }
                    Step::Event(e)
                }
            }
        })
        .collect()
}

/// The times (whole seconds) of each alert's events: which events a match took.
pub fn event_secs(alerts: &[Alert]) -> Vec<Vec<i64>> {
    (alerts.iter())
        .map(|a| {
            (a.events().iter())
                .map(|e| e.time.0 / 1_000_000_000)
                .collect()
        })
        .collect()
}

/// `state host @secs` per alert (rule name prefixed when several rules), plus ` (reason)`.
pub fn fmt_alert(a: &Alert, with_rule: bool) -> String {
    let group: Vec<String> = a.group().iter().map(|(_, v)| v.to_string()).collect();
    let secs = a.time.0 as f64 / 1e9;
    let mut s = String::new();
    if with_rule {
        s.push_str(a.rule());
        s.push(' ');
    }
    s.push_str(a.state.name());
    if !group.is_empty() {
        s.push(' ');
        s.push_str(&group.join(","));
    }
    s.push_str(&format!(" @{secs}"));
    if let Some(r) = a.reason() {
        s.push_str(&format!(" ({r})"));
    }
    s
}

pub fn run(rules: &RuleSet, steps: Vec<Step>) -> Vec<Alert> {
    let mut engine = Engine::new(rules, EngineConfig::default()).unwrap();
    let mut out = Vec::new();
    run_on(&mut engine, steps, &mut out);
    out
}

pub fn run_on(engine: &mut Engine, steps: Vec<Step>, out: &mut Vec<Alert>) {
    for s in steps {
        match s {
            Step::Event(e) => engine.push(e, out),
            Step::Tick(t) => engine.advance_to(t, out),
            Step::End(u) => engine.finish(u, out),
        }
    }
}

/// The table-driven check: rules, an input script, the expected alerts (one per line).
#[track_caller]
pub fn check(rules: Vec<R>, script: &str, expected: &[&str]) {
    let rules = set(rules);
    let with_rule = rules.rules.len() > 1;
    let got: Vec<String> = run(&rules, parse_script(script))
        .iter()
        .map(|a| fmt_alert(a, with_rule))
        .collect();
    assert_eq!(got, expected, "\nscript: {script}");
}

/// An engine for `rules`, shared or each rule on its own, otherwise as configured by default.
pub fn new_engine(rules: &RuleSet, share: bool) -> Engine {
    Engine::new(
        rules,
        EngineConfig {
            share,
            ..EngineConfig::default()
        },
    )
    .expect("an engine for rules that compiled")
}

/// The alerts `script` raises under `rules`, formatted without the rule, once it is checked
/// that the shared engine and the unshared one (each rule on its own) raise the same.
#[track_caller]
pub fn fired_alike(rules: &RuleSet, script: &str) -> Vec<String> {
    let alerts = |share: bool| {
        let mut e = new_engine(rules, share);
        let mut out = Vec::new();
        run_on(&mut e, parse_script(script), &mut out);
        out
    };
    let shared = alerts(true);
    assert_eq!(
        shared,
        alerts(false),
        "{script}: shared and unshared differ"
    );
    shared.iter().map(|a| fmt_alert(a, false)).collect()
}

/// Rule-file text compiled (it must compile).
pub fn compile_toml(text: &str) -> RuleSet {
    cepheus_core::rules::compile_str("r.toml", text)
        .rules
        .expect("rules that compile")
}

/// A syslog event of `app` from `host` (none for `""`), stamped `time` and arriving at
/// `arrival` (nanoseconds).
pub fn syslog_event(app: &str, host: &str, time: Timestamp, arrival: Timestamp) -> Event {
    let ev = Event::new(Source::Syslog, time, arrival).with(Field::App, Value::str(app));
    if host.is_empty() {
        ev
    } else {
        ev.with(Field::Host, Value::str(host))
    }
}
