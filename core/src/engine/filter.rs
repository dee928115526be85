//! The Filter stage: which event definitions of which rules an event satisfies.
//!
//! Definitions are grouped into *predicates*: with sharing on, every distinct condition (after
//! normalisation, [`Cond::predicate_key`]) is one predicate, evaluated once per event for all the
//! definitions of all the rules that use it. Every predicate is filed under its source (a
//! top-level `syslog`/`flow` conjunct) and, when it has one, under an equality conjunct on a
//! registry field (`app == "sshd"`, `host in ["a", "b"]`, an `or` of such tests on one field):
//! the paper's hash table from event attributes to the nodes that consume them; or, when that
//! is shared by fewer definitions, under a `starts_with`/`ends_with` conjunct on a string
//! field, in a table of the field's prefixes (suffixes) of that length (`host ends_with "-007"`
//! in one rule per host group). An event probes each indexed field (and each affix length)
//! once and evaluates only the predicates filed under its values plus the unindexed ones, so
//! events that concern no rule cost a few hash lookups however many rules there are.
//!
//! With sharing off (`--no-share`) there is no index: as in the paper's RCEDA baseline (which
//! delivers every primitive event to every query; the hash table is part of the shared
//! method) and as Flink runs one operator per pattern, every (rule, definition) is its own
//! predicate holding its full condition, and every event is offered to every one of them in
//! rule order, each rule testing its own conditions.

use std::collections::HashMap;

use smallvec::{SmallVec, smallvec};

use crate::event::{Event, Field, FieldKey, Source, Value};
use crate::rules::ir::{Captures, CmpOp, Cond, Expr, RuleSet};

/// A predicate: one condition, evaluated once per event for every definition that uses it.
#[derive(Debug)]
pub struct Pred {
    /// The (rule, definition) pairs that use this condition, in rule order.
    pub consumers: Vec<(u32, u32)>,
    /// The condition without what the index already guarantees (the source test and the
    /// indexed equality), so an indexed `host in [...]` of 10,000 names is not tested twice;
    /// the full condition when there is no index (unshared).
    residual: Cond,
    /// The field the predicate is filed under in the index, if any.
    pub key_field: Option<Field>,
    /// How many values it is filed under (the values `key_field` must take to satisfy it).
    pub key_values: usize,
}

/// An index entry: a predicate, and a hint the engine may keep there (the group slot of the
/// predicate's consumer for this value: one lookup per event instead of two).
#[derive(Debug, Clone, Copy)]
struct Entry {
    pred: u32,
    hint: u32,
}

/// No hint stored.
pub const NO_HINT: u32 = u32::MAX;

/// The predicates filed under one value: one inline (the common case: a probe reads one
/// bucket and no second allocation), more in a list.
type Entries = SmallVec<[Entry; 1]>;

/// Index tables hash with foldhash, not SipHash: their keys come from rule files, and input
/// only looks them up (a lookup cannot lengthen probe chains), so a flood of crafted values
/// cannot degrade them; SipHash stays where input inserts keys (group maps).
type IndexMap = HashMap<Value, Entries, foldhash::fast::FixedState>;

/// Prefix or suffix tables, keyed by text (foldhash, as [`IndexMap`]).
type AffixMap = HashMap<Box<str>, Entries, foldhash::fast::FixedState>;

/// The predicates filed under a `starts_with` (or `ends_with`) test on one string field, by
/// the tested text, for texts of one length (in bytes).
#[derive(Debug)]
struct AffixTable {
    field: Field,
    suffix: bool,
    len: usize,
    map: AffixMap,
}

impl AffixTable {
    /// The part of `v` this table is keyed by, if `v` is long enough (and cut at a character
    /// boundary: a text cut inside a character is no prefix or suffix of a text that starts
    /// and ends on boundaries).
    fn key<'a>(&self, v: &'a str) -> Option<&'a str> {
        let at = if self.suffix {
            v.len().checked_sub(self.len)?
        } else {
            self.len
        };
        if at > v.len() {
            return None;
        }
        let (head, tail) = (v.get(..at)?, v.get(at..)?);
        Some(if self.suffix { tail } else { head })
    }
}

#[derive(Debug, Default)]
struct SourceIndex {
    /// Definitions evaluated for every event of this source.
    always: Vec<u32>,
    /// (field, value -> predicates) tables.
    by_field: Vec<(Field, IndexMap)>,
    /// Prefix and suffix tables.
    affixes: Vec<AffixTable>,
}

/// The predicate index over a rule set.
#[derive(Debug)]
pub struct Filter {
    /// All predicates, by index.
    pub preds: Vec<Pred>,
    /// Whether there is an index (shared); without, every predicate is a candidate.
    indexed: bool,
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

/// What a conjunct usable as an index key requires of a field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Wants {
    /// To equal one of these literals.
    OneOf(Vec<Value>),
    /// To start (`suffix == false`) or end with this text.
    Affix { suffix: bool, text: String },
}

/// A conjunct usable as an index key: its position among the condition's conjuncts, its
/// field, and what it requires.
type IndexKey = (usize, Field, Wants);

/// A `starts_with`/`ends_with` test of a registry string field the condition does not
/// capture, against a non-empty literal.
fn affix(c: &Cond, captured: &[FieldKey]) -> Option<(Field, Wants)> {
    let Cond::Str(op, Expr::Field(k), Expr::Lit(Value::Str(text))) = c else {
        return None;
    };
    let suffix = match op {
        crate::rules::ir::StrOp::StartsWith => false,
        crate::rules::ir::StrOp::EndsWith => true,
        crate::rules::ir::StrOp::Contains => return None,
    };
    let f = match k {
        FieldKey::Known(f) if f.ty() == crate::event::ValueType::Str && !captured.contains(k) => *f,
        _ => return None,
    };
    (!text.is_empty()).then(|| {
        (
            f,
            Wants::Affix {
                suffix,
                text: text.to_string(),
            },
        )
    })
}

/// The equality conjuncts usable as index keys: a registry field (not captured by the
/// condition) equal to one of some literals of the field's type.
fn index_keys(c: &Cond) -> Vec<IndexKey> {
    // One equality test (the checker writes the field first: `"sshd" == app` is
    // `app == "sshd"`), on a registry field the condition does not capture, against literals
    // of the field's type.
    fn equality<'a>(c: &'a Cond, captured: &[FieldKey]) -> Option<(Field, &'a [Value])> {
        let (k, vs) = match c {
            Cond::Cmp(CmpOp::Eq, Expr::Field(k), Expr::Lit(v)) => (k, std::slice::from_ref(v)),
            Cond::In(Expr::Field(k), list) => (k, list.values()),
            _ => return None,
        };
        let f = match k {
            FieldKey::Known(f) if *f != Field::Time && !captured.contains(k) => *f,
            _ => return None,
        };
        (!vs.is_empty() && vs.iter().all(|v| v.ty() == f.ty())).then_some((f, vs))
    }
    let captured = captured_names(c);
    conjuncts(c)
        .into_iter()
        .enumerate()
        .filter_map(|(i, conj)| {
            if let Some((f, wants)) = affix(conj, &captured) {
                return Some((i, f, wants));
            }
            // An `or` of equalities on one field is the `in` list it means:
            // `app == "nginx" or app == "apache"` is `app in ["nginx", "apache"]`.
            let branches = match conj {
                Cond::Or(cs) => cs.as_slice(),
                other => std::slice::from_ref(other),
            };
            let mut field: Option<Field> = None;
            let mut seen: std::collections::HashSet<&Value> = Default::default();
            let mut values = Vec::new();
            for b in branches {
                let (f, vs) = equality(b, &captured)?;
                if field.is_some_and(|g| g != f) {
                    return None;
                }
                field = Some(f);
                values.extend(vs.iter().filter(|v| seen.insert(*v)).cloned());
            }
            Some((i, field?, Wants::OneOf(values)))
        })
        .collect()
}

/// The (field, value or affix) entries a key files its predicate under, for counting how many
/// predicates share each.
fn sharing_keys(f: Field, wants: &Wants) -> Vec<(Field, Wants)> {
    match wants {
        Wants::OneOf(vs) => vs
            .iter()
            .map(|v| (f, Wants::OneOf(vec![v.clone()])))
            .collect(),
        affix => vec![(f, affix.clone())],
    }
}

fn captured_names(c: &Cond) -> Vec<FieldKey> {
    match c {
        Cond::Regex(r) if !r.negate => r.captures.iter().map(|(_, k)| k.clone()).collect(),
        Cond::And(cs) | Cond::Or(cs) => cs.iter().flat_map(captured_names).collect(),
        _ => Vec::new(),
    }
}

/// Sorts candidates by predicate. A predicate is a candidate at most once per event (it is
/// filed under one key, and an event has one value per field), so the order is the one a sort
/// of the pairs gives; a few candidates (the common case) by insertion on the predicate alone,
/// cheaper than the general sort's comparison of pairs.
fn sort_by_pred(c: &mut [(u32, u32)]) {
    if c.len() > 16 {
        c.sort_unstable_by_key(|e| e.0);
        return;
    }
    for i in 1..c.len() {
        let x = c[i];
        let mut j = i;
        while j > 0 && c[j - 1].0 > x.0 {
            c[j] = c[j - 1];
            j -= 1;
        }
        c[j] = x;
    }
}

impl Filter {
    /// Builds the index for a rule set.
    ///
    /// Each definition is filed under one of its equality conjuncts: the one whose values are
    /// shared by the fewest definitions (`host in [...]` beats `app == "heartbeat"` when a
    /// hundred rules all test the app), so an event's probe finds few candidates.
    ///
    /// With `share`, identical conditions become one predicate. Without, there is no index
    /// (the unshared baseline, see the module docs): every definition is its own predicate
    /// with its full condition, in (rule, definition) order, and a candidate for every event.
    pub fn new(rules: &RuleSet, share: bool) -> Filter {
        if !share {
            let preds = rules.rules.iter().enumerate().flat_map(|(ri, rule)| {
                rule.events
                    .iter()
                    .enumerate()
                    .filter(|(di, _)| rule.pattern.uses(*di))
                    .map(move |(di, def)| Pred {
                        consumers: vec![(ri as u32, di as u32)],
                        residual: def.cond.clone(),
                        key_field: None,
                        key_values: 0,
                    })
            });
            return Filter {
                preds: preds.collect(),
                indexed: false,
                sources: Default::default(),
            };
        }
        let mut groups: Vec<(&Cond, Vec<(u32, u32)>)> = Vec::new();
        let mut by_text: HashMap<String, usize> = HashMap::new();
        for (ri, rule) in rules.rules.iter().enumerate() {
            for (di, def) in rule.events.iter().enumerate() {
                // A definition the pattern does not name is never evaluated.
                if !rule.pattern.uses(di) {
                    continue;
                }
                let owner = (ri as u32, di as u32);
                match by_text.entry(def.cond.predicate_key()) {
                    std::collections::hash_map::Entry::Occupied(e) => {
                        let g = &mut groups[*e.get()];
                        g.1.push(owner);
                        // Of conditions that hold for the same events, one that names its
                        // source is evaluated: it is filed under that source only.
                        if pinned_source(g.0).is_none() && pinned_source(&def.cond).is_some() {
                            g.0 = &def.cond;
                        }
                        continue;
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(groups.len());
                    }
                }
                groups.push((&def.cond, vec![owner]));
            }
        }
        let mut preds = Vec::with_capacity(groups.len());
        let mut keyed: Vec<(Option<Source>, Vec<IndexKey>, &Cond)> = Vec::new();
        let mut sharing: HashMap<(Field, Wants), u32> = HashMap::new();
        for (cond, _) in &groups {
            let keys = index_keys(cond);
            for (_, f, wants) in &keys {
                for k in sharing_keys(*f, wants) {
                    *sharing.entry(k).or_default() += 1;
                }
            }
            keyed.push((pinned_source(cond), keys, cond));
        }
        let mut sources: [SourceIndex; 2] = Default::default();
        let owners = groups.into_iter().map(|(_, consumers)| consumers);
        for (idx, ((pinned, keys, cond), consumers)) in keyed.into_iter().zip(owners).enumerate() {
            let idx = idx as u32;
            // The fewest predicates sharing an entry, then the fewest entries, then an
            // equality (its table can hold the engine's slot hints).
            let cost = |(_, f, wants): &IndexKey| {
                let entries = sharing_keys(*f, wants);
                let worst = entries
                    .iter()
                    .map(|k| sharing.get(k).copied().unwrap_or(0))
                    .max();
                let affix = matches!(wants, Wants::Affix { .. });
                (worst.unwrap_or(u32::MAX), entries.len(), affix)
            };
            let key = keys.into_iter().min_by_key(cost);
            let keep: Vec<Cond> = conjuncts(cond)
                .into_iter()
                .enumerate()
                .filter(|(i, c)| {
                    let indexed = key.as_ref().is_some_and(|k| k.0 == *i);
                    // Only the pinned source is guaranteed by the table the predicate is filed
                    // in (a second, other source conjunct stays: it never holds).
                    let source = matches!(c, Cond::Source(s) if Some(*s) == pinned);
                    !indexed && !source
                })
                .map(|(_, c)| c.clone())
                .collect();
            let residual = match keep.len() {
                0 => Cond::True,
                1 => keep.into_iter().next().unwrap_or(Cond::True),
                _ => Cond::And(keep),
            };
            let key = key.map(|(_, f, wants)| (f, wants));
            let values = match &key {
                Some((f, Wants::OneOf(vs))) => Some((*f, vs.len())),
                _ => None,
            };
            preds.push(Pred {
                consumers,
                residual,
                key_field: values.map(|(f, _)| f),
                key_values: values.map_or(0, |(_, n)| n),
            });
            for src in Source::ALL {
                if pinned.is_some_and(|p| p != src) {
                    continue;
                }
                let si = &mut sources[source_slot(src)];
                let entry = Entry {
                    pred: idx,
                    hint: NO_HINT,
                };
                match &key {
                    Some((field, Wants::Affix { suffix, text })) if field.available_in(src) => {
                        let (suffix, len) = (*suffix, text.len());
                        let table =
                            match si.affixes.iter().position(|t| {
                                t.field == *field && t.suffix == suffix && t.len == len
                            }) {
                                Some(p) => &mut si.affixes[p].map,
                                None => {
                                    si.affixes.push(AffixTable {
                                        field: *field,
                                        suffix,
                                        len,
                                        map: AffixMap::default(),
                                    });
                                    let last = si.affixes.len() - 1;
                                    &mut si.affixes[last].map
                                }
                            };
                        let list = table.entry(text.as_str().into()).or_default();
                        if list.last().is_none_or(|e| e.pred != idx) {
                            list.push(entry);
                        }
                    }
                    Some((field, Wants::OneOf(values))) if field.available_in(src) => {
                        let table = match si.by_field.iter_mut().position(|(f, _)| f == field) {
                            Some(p) => &mut si.by_field[p].1,
                            None => {
                                si.by_field.push((*field, IndexMap::default()));
                                let last = si.by_field.len() - 1;
                                &mut si.by_field[last].1
                            }
                        };
                        for v in values {
                            match table.entry(v.clone()) {
                                std::collections::hash_map::Entry::Vacant(slot) => {
                                    slot.insert(smallvec![entry]);
                                }
                                std::collections::hash_map::Entry::Occupied(mut list) => {
                                    let list = list.get_mut();
                                    if list.last().is_none_or(|e| e.pred != idx) {
                                        list.push(entry);
                                    }
                                }
                            }
                        }
                    }
                    Some(_) => {} // the field never occurs in this source: never matches
                    None => si.always.push(idx),
                }
            }
        }
        Filter {
            preds,
            indexed: true,
            sources,
        }
    }

    /// Appends the predicates `ev` may satisfy (to be evaluated), in ascending order, each with
    /// its hint for the event's value ([`NO_HINT`] when none is stored or it is not indexed).
    /// Unshared (no index): every predicate, without hints.
    pub fn candidates_hinted(&self, ev: &Event, out: &mut Vec<(u32, u32)>) {
        if !self.indexed {
            out.extend((0..self.preds.len() as u32).map(|p| (p, NO_HINT)));
            return;
        }
        let si = &self.sources[source_slot(ev.source)];
        let start = out.len();
        out.extend(si.always.iter().map(|p| (*p, NO_HINT)));
        let mut lists = 0;
        for (field, table) in &si.by_field {
            if let Some(v) = ev.get(*field)
                && let Some(list) = table.get(v)
            {
                out.extend(list.iter().map(|e| (e.pred, e.hint)));
                lists += 1;
            }
        }
        for t in &si.affixes {
            if let Some(v) = ev.get(t.field).and_then(Value::as_str)
                && let Some(k) = t.key(v)
                && let Some(list) = t.map.get(k)
            {
                out.extend(list.iter().map(|e| (e.pred, NO_HINT)));
                lists += 1;
            }
        }
        // Each list is ascending; merging is needed only when candidates come from several.
        if lists > 1 || (lists == 1 && !si.always.is_empty()) {
            sort_by_pred(&mut out[start..]);
        }
    }

    /// Whether events are filed through an index (shared); without, every predicate is a
    /// candidate for every event.
    pub fn indexed(&self) -> bool {
        self.indexed
    }

    /// Stores a hint for predicate `pred` under `value` of its index field, for `source`.
    pub fn set_hint(&mut self, source: Source, field: Field, value: &Value, pred: u32, hint: u32) {
        let si = &mut self.sources[source_slot(source)];
        if let Some((_, table)) = si.by_field.iter_mut().find(|(f, _)| *f == field)
            && let Some(list) = table.get_mut(value)
            && let Some(e) = list.iter_mut().find(|e| e.pred == pred)
        {
            e.hint = hint;
        }
    }

    /// Whether the index answers predicate `idx` wholly (its residual is `True`): every
    /// candidate it gives for it holds.
    pub fn exact(&self, idx: u32) -> bool {
        self.indexed && matches!(self.preds[idx as usize].residual, Cond::True)
    }

    /// Evaluates a predicate (captures appended to `caps`).
    /// (Only for candidates this filter produced for `ev`: the index already checked the rest.)
    /// A residual of `True` (the index checked the whole condition, the common case) is
    /// answered here: the general evaluator's frame costs about 30 instructions per call.
    #[inline]
    pub fn eval(&self, idx: u32, ev: &Event, caps: &mut Captures) -> bool {
        match &self.preds[idx as usize].residual {
            Cond::True => true,
            residual => residual.eval(ev, caps),
        }
    }
}
