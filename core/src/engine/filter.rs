//! The Filter stage: which event definitions of which rules an event satisfies.
//!
//! Every definition is filed under its source (a top-level `syslog`/`flow` conjunct) and, when
//! it has one, under an equality conjunct on a registry field (`app == "sshd"`,
//! `host in ["a", "b"]`): the paper's hash table from event attributes to the nodes that consume
//! them. An event probes each indexed field once and evaluates only the definitions filed under
//! its values plus the unindexed ones, so events that concern no rule cost a few hash lookups
//! however many rules there are.

use std::collections::HashMap;

use crate::event::{Event, Field, FieldKey, Source, Value};
use crate::rules::ir::{Captures, CmpOp, Cond, Expr, RuleSet};

/// One event definition of one rule, as the filter sees it.
#[derive(Debug)]
pub struct DefEntry {
    /// Rule index.
    pub rule: u32,
    /// Definition index within the rule.
    pub def: u32,
}

#[derive(Debug, Default)]
struct SourceIndex {
    /// Definitions evaluated for every event of this source.
    always: Vec<u32>,
    /// (field, value -> definitions) tables.
    by_field: Vec<(Field, HashMap<Value, Vec<u32>>)>,
}

/// The predicate index over a rule set.
#[derive(Debug)]
pub struct Filter {
    /// All definitions, by filter index.
    pub defs: Vec<DefEntry>,
    sources: [SourceIndex; 2],
}

fn source_slot(s: Source) -> usize {
    match s {
        Source::Syslog => 0,
        Source::Flow => 1,
    }
}

fn conjuncts(c: &Cond) -> Vec<&Cond> {
    match c {
        Cond::And(cs) => cs.iter().flat_map(conjuncts).collect(),
        other => vec![other],
    }
}

/// The source a condition pins, if any.
pub fn pinned_source(c: &Cond) -> Option<Source> {
    conjuncts(c).into_iter().find_map(|c| match c {
        Cond::Source(s) => Some(*s),
        _ => None,
    })
}

/// A field and the literal values a condition requires it to equal (one of).
type IndexKey = (Field, Vec<Value>);

/// The equality conjuncts usable as index keys: a registry field (not captured by the
/// condition) equal to one of some literals of the field's type.
fn index_keys(c: &Cond) -> Vec<IndexKey> {
    let captured = captured_names(c);
    let usable = |k: &FieldKey| match k {
        FieldKey::Known(f) if *f != Field::Time && !captured.contains(k) => Some(*f),
        _ => None,
    };
    conjuncts(c)
        .into_iter()
        .filter_map(|conj| match conj {
            Cond::Cmp(CmpOp::Eq, Expr::Field(k), Expr::Lit(v))
            | Cond::Cmp(CmpOp::Eq, Expr::Lit(v), Expr::Field(k)) => usable(k)
                .filter(|f| f.ty() == v.ty())
                .map(|f| (f, vec![v.clone()])),
            Cond::In(Expr::Field(k), list) => usable(k)
                .filter(|f| {
                    list.values().iter().all(|v| v.ty() == f.ty()) && !list.values().is_empty()
                })
                .map(|f| (f, list.values().to_vec())),
            _ => None,
        })
        .collect()
}

fn captured_names(c: &Cond) -> Vec<FieldKey> {
    match c {
        Cond::Regex(r) if !r.negate => r.captures.iter().map(|(_, k)| k.clone()).collect(),
        Cond::And(cs) | Cond::Or(cs) => cs.iter().flat_map(captured_names).collect(),
        _ => Vec::new(),
    }
}

impl Filter {
    /// Builds the index for a rule set.
    ///
    /// Each definition is filed under one of its equality conjuncts: the one whose values are
    /// shared by the fewest definitions (`host in [...]` beats `app == "heartbeat"` when a
    /// hundred rules all test the app), so an event's probe finds few candidates.
    pub fn new(rules: &RuleSet) -> Filter {
        let mut defs = Vec::new();
        let mut keyed: Vec<(Option<Source>, Vec<IndexKey>)> = Vec::new();
        let mut sharing: HashMap<(Field, Value), u32> = HashMap::new();
        for (ri, rule) in rules.rules.iter().enumerate() {
            for (di, def) in rule.events.iter().enumerate() {
                defs.push(DefEntry {
                    rule: ri as u32,
                    def: di as u32,
                });
                let keys = index_keys(&def.cond);
                for (f, vs) in &keys {
                    for v in vs {
                        *sharing.entry((*f, v.clone())).or_default() += 1;
                    }
                }
                keyed.push((pinned_source(&def.cond), keys));
            }
        }
        let mut sources: [SourceIndex; 2] = Default::default();
        for (idx, (pinned, keys)) in keyed.into_iter().enumerate() {
            let idx = idx as u32;
            let cost = |(f, vs): &(Field, Vec<Value>)| {
                let worst = vs
                    .iter()
                    .map(|v| sharing.get(&(*f, v.clone())).copied().unwrap_or(0))
                    .max();
                (worst.unwrap_or(u32::MAX), vs.len())
            };
            let key = keys.into_iter().min_by_key(cost);
            for src in [Source::Syslog, Source::Flow] {
                if pinned.is_some_and(|p| p != src) {
                    continue;
                }
                let si = &mut sources[source_slot(src)];
                match &key {
                    Some((field, values)) if field.available_in(src) => {
                        let table = match si.by_field.iter_mut().position(|(f, _)| f == field) {
                            Some(p) => &mut si.by_field[p].1,
                            None => {
                                si.by_field.push((*field, HashMap::new()));
                                let last = si.by_field.len() - 1;
                                &mut si.by_field[last].1
                            }
                        };
                        for v in values {
                            let list = table.entry(v.clone()).or_default();
                            if list.last() != Some(&idx) {
                                list.push(idx);
                            }
                        }
                    }
                    Some(_) => {} // the field never occurs in this source: never matches
                    None => si.always.push(idx),
                }
            }
        }
        Filter { defs, sources }
    }

    /// Appends the filter indexes of the definitions `ev` may satisfy (to be evaluated), in
    /// ascending order.
    pub fn candidates(&self, ev: &Event, out: &mut Vec<u32>) {
        let si = &self.sources[source_slot(ev.source)];
        let start = out.len();
        out.extend_from_slice(&si.always);
        for (field, table) in &si.by_field {
            if let Some(v) = ev.get(*field)
                && let Some(list) = table.get(v)
            {
                out.extend_from_slice(list);
            }
        }
        if !si.by_field.is_empty() {
            out[start..].sort_unstable();
        }
    }

    /// Evaluates a definition's condition (captures appended to `caps`).
    pub fn eval(&self, rules: &RuleSet, idx: u32, ev: &Event, caps: &mut Captures) -> bool {
        let d = &self.defs[idx as usize];
        rules.rules[d.rule as usize].events[d.def as usize]
            .cond
            .eval(ev, caps)
    }
}
