//! The checker: types and field availability of conditions, the shape of patterns, and their
//! compilation to [`ir`](crate::rules::ir) values.

use std::collections::BTreeSet;
use std::ops::Range;

use super::ir::{REGEX_NFA_MAX, Re, ReError};
use ipnet::IpNet;

use crate::event::{Field, FieldKey, Source, Value, ValueType};
use crate::rules::diag::{Diagnostic, FileCtx, Level, StrMap, did_you_mean, near_field};
use crate::rules::ir::{
    ArithOp, CmpOp, Cond, EventDef, Expr, ListFile, ListItems, NetRanges, Pattern, RegexCond,
    TimePart, ValueList, Window, canonical_net,
};
use crate::rules::syntax::{CondAst, ExprAst, Lit, PatAst, Span};
use crate::time::Duration;

/// Reports diagnostics for spans inside one expression string.
pub(crate) struct Reporter<'a> {
    pub file: &'a FileCtx,
    pub map: &'a StrMap,
    pub diags: &'a mut Vec<Diagnostic>,
    /// Bytes the rule set's regexes compiled so far take (see [`MAX_REGEX_BYTES`]).
    pub regex_bytes: &'a mut usize,
    /// The regexes compiled so far, by text (or why one could not be): one written again is
    /// shared, or refused, not built again.
    pub regexes: &'a mut std::collections::HashMap<Box<str>, Result<Re, ReError>>,
    /// Reads a list file (`lhs in file("...")`), as `expect` files are read.
    pub read_file: &'a mut dyn FnMut(&std::path::Path) -> std::io::Result<String>,
    /// The list files read so far (see [`Lists`]).
    pub lists: &'a mut Lists,
}

/// The list files a compile has read, by path and the type they were read as (`None`: it had
/// errors, reported at its first use).
pub(crate) type Lists =
    std::collections::HashMap<(std::path::PathBuf, ValueType), Option<std::sync::Arc<ListFile>>>;

/// The most items one list file may hold: far above a threat feed's tens of thousands, and a
/// bound on the memory a mistaken file costs (each item takes 16 to 64 bytes).
pub const MAX_LIST_ITEMS: usize = 1_000_000;

/// The most lines of one list file reported as errors; past it, one more error counts the rest.
const MAX_LIST_ERRORS: usize = 20;

/// The most lines a list file may have (comments and blank lines included): what its
/// diagnostics' line table may cost stays bounded (16 MB).
const MAX_LIST_LINES: usize = 2 * MAX_LIST_ITEMS;

/// The most the compiled regexes of a whole rule set may take together: each is capped
/// ([`crate::rules::ir::REGEX_NFA_MAX`]), but a few hundred large ones within that cap took
/// 18 GB and 100 s to compile. 2,000 rules with Unicode classes and named groups take about
/// 220 MB.
pub const MAX_REGEX_BYTES: usize = 512 * (1 << 20);

impl Reporter<'_> {
    fn at(&self, span: Span) -> Range<usize> {
        self.map.span(span)
    }

    /// The file text under a span of the expression (empty if it cannot be cut there).
    fn text(&self, span: Span) -> String {
        self.file.text.get(self.at(span)).unwrap_or("").to_string()
    }

    pub fn error(&mut self, span: Span, msg: impl Into<String>, help: Option<String>) {
        let mut d = self.file.diag(Level::Error, self.at(span), msg);
        d.help = help;
        self.diags.push(d);
    }

    pub fn warning(&mut self, span: Span, msg: impl Into<String>, help: Option<String>) {
        let mut d = self.file.diag(Level::Warning, self.at(span), msg);
        d.help = help;
        self.diags.push(d);
    }
}

/// What a checked condition tells about its events.
#[derive(Clone, Debug, Default)]
pub(crate) struct EventInfo {
    /// The source the condition pins (`syslog and ...`), if any.
    pub source: Option<Source>,
    /// Regex captures: name and type, in order.
    pub captures: Vec<(String, ValueType)>,
    /// The ways the condition can hold (see [`Branch`]); `None` when there are too many to
    /// list, and then only `source` and `captures` are known.
    pub branches: Option<Vec<Branch>>,
}

/// One way a condition can hold: the source its events must come from (named by a
/// `syslog`/`flow` conjunct, or implied by a field only one source has) and the captures it
/// makes. `(syslog and app == "x") or (flow and dport == 22)` has two.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Branch {
    source: Option<Source>,
    captures: Vec<String>,
}

/// At most this many branches are listed (a condition of many `or`s under `and`s would
/// multiply them); past it the checker knows only the top-level source and all captures.
const MAX_BRANCHES: usize = 64;

/// Why a field may be missing from a condition's events.
pub(crate) enum Missing {
    /// Events of this source can match, and they have no such field.
    Source(Source),
    /// An alternative of an `or`, or an optional part of a regex, can match without the
    /// capture that makes it.
    Capture,
}

impl Missing {
    /// Why event `event` may lack field `field`, and what to do about it, for a diagnostic.
    pub fn explain(&self, field: &str, event: &str) -> (String, String) {
        match self {
            Missing::Source(s) => (
                format!("it can match {} events, which have no `{field}`", s.name()),
                format!(
                    "make every alternative of its condition provide `{field}` (the same source, or the same named capture), or split `{event}` into one event per source"
                ),
            ),
            Missing::Capture => (
                format!(
                    "it can match without the capture `(?P<{field}>...)` (an alternative of its `or`, or a part of its regex under `|`, `?` or `*`)"
                ),
                format!(
                    "make `(?P<{field}>...)` take part in every match (in every alternative of the `or`, outside the regex's `|`, `?` and `*`), or split `{event}` into one event per alternative"
                ),
            ),
        }
    }
}

impl EventInfo {
    /// The key and type of a field these events carry, if they do.
    pub fn provides(&self, name: &str) -> Option<(FieldKey, ValueType)> {
        if let Some((_, t)) = self.captures.iter().rev().find(|(n, _)| n == name) {
            return Some((FieldKey::from_name(name), *t));
        }
        if name.starts_with("sd.") {
            return (self.source != Some(Source::Flow))
                .then(|| (FieldKey::from_name(name), ValueType::Str));
        }
        let f = Field::from_name(name)?;
        match self.source {
            Some(s) if !f.available_in(s) => None,
            _ => Some((FieldKey::Known(f), f.ty())),
        }
    }

    /// Whether every event the condition can match carries `name` (which [`EventInfo::provides`]
    /// accepted): `Err` names the way an event could match without it.
    pub fn always_provides(&self, name: &str) -> Result<(), Missing> {
        let Some(branches) = &self.branches else {
            return Ok(());
        };
        // A capture of that name somewhere in the condition: what is missing is the capture
        // (optional, or in one alternative only), even where the name is also a field.
        let captured = self.captures.iter().any(|(n, _)| n == name);
        for b in branches {
            if b.captures.iter().any(|c| c == name) {
                continue;
            }
            // A branch that names no source (`true`, `not (app == "cron")`) matches events of
            // every source: a flow satisfies a negated syslog test.
            let lacking = |f: &dyn Fn(Source) -> bool| match b.source {
                Some(s) => (!f(s)).then_some(s),
                None => Source::ALL.into_iter().find(|&s| !f(s)),
            };
            let known = if name.starts_with("sd.") {
                Some(lacking(&|s| s != Source::Flow))
            } else {
                Field::from_name(name).map(|f| lacking(&|s| f.available_in(s)))
            };
            match known {
                Some(None) => {}
                Some(Some(s)) if !captured => return Err(Missing::Source(s)),
                _ => return Err(Missing::Capture),
            }
        }
        Ok(())
    }

    /// Names of the fields these events carry (for suggestions and templates).
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = Field::ALL
            .iter()
            .filter(|f| self.source.is_none_or(|s| f.available_in(s)))
            .map(|f| f.name().to_string())
            .collect();
        v.extend(self.captures.iter().map(|(n, _)| n.clone()));
        v
    }

    /// What to say of `name`, a field these events lack: the sources that have it (the
    /// condition pins another), else a near name, else the fields they carry.
    pub fn missing_field_help(&self, name: &str) -> String {
        if let Some(s) = self.source {
            if let Some(f) = Field::from_name(name).filter(|f| !f.available_in(s)) {
                let others: Vec<&str> = f.sources().iter().map(|s| s.name()).collect();
                return format!(
                    "{} events have no `{name}`; {} events have it (the condition pins {})",
                    s.name(),
                    others.join(" and "),
                    s.name()
                );
            }
            if s == Source::Flow && name.starts_with("sd.") {
                return "structured data (sd.*) is carried by syslog events only".into();
            }
        }
        let names = self.names();
        if let Some(s) = near_field(name, names.iter().map(String::as_str)) {
            return format!("did you mean `{s}`?");
        }
        let sd = if self.source == Some(Source::Flow) {
            ""
        } else {
            "; sd.<id>.<param>"
        };
        format!(
            "its fields are: {}{sd} (named regex captures too)",
            names.join(", ")
        )
    }
}

/// The top-level conjuncts of a condition, through parenthesised `and`s and `not not`.
fn conjuncts<'a>(c: &'a CondAst, out: &mut Vec<&'a CondAst>) {
    match c {
        CondAst::And(v) => v.iter().for_each(|x| conjuncts(x, out)),
        CondAst::Not(inner, _) => match &**inner {
            CondAst::Not(x, _) => conjuncts(x, out),
            _ => out.push(c),
        },
        other => out.push(other),
    }
}

/// The source an event that is not of source `s` is of: the other one, while there are two
/// (`not syslog` is a flow).
fn other_source(s: Source) -> Option<Source> {
    let mut others = Source::ALL.into_iter().filter(|&o| o != s);
    match (others.next(), others.next()) {
        (Some(o), None) => Some(o),
        _ => None,
    }
}

/// The source pinned by a top-level `syslog`/`flow` conjunct.
fn pinned(c: &CondAst, r: &mut Reporter<'_>) -> Option<Source> {
    let mut parts: Vec<&CondAst> = Vec::new();
    conjuncts(c, &mut parts);
    let mut found: Option<(Source, Span)> = None;
    for p in parts {
        // `not flow` says `syslog` as well as `syslog` does (with two sources).
        let said = match p {
            CondAst::Source(s, span) => Some((*s, span)),
            CondAst::Not(inner, span) => match &**inner {
                CondAst::Source(s, _) => other_source(*s).map(|o| (o, span)),
                _ => None,
            },
            _ => None,
        };
        if let Some((s, span)) = said {
            match &found {
                Some((f, _)) if *f != s => {
                    r.error(
                        span.clone(),
                        "an event is either syslog or flow, never both: this condition can never match",
                        Some("use `or` to accept either source".into()),
                    );
                }
                _ => found = Some((s, span.clone())),
            }
        }
    }
    found.map(|(s, _)| s)
}

/// Checks and compiles a condition; `None` when it has errors (already reported).
pub(crate) fn compile_cond(c: &CondAst, r: &mut Reporter<'_>) -> (Option<Cond>, EventInfo) {
    let source = pinned(c, r);
    let mut ck = CondChecker {
        info: EventInfo {
            source,
            captures: Vec::new(),
            branches: None,
        },
        r,
    };
    let out = ck.cond(c);
    let mut info = ck.info;
    if out.is_some() {
        let captured: BTreeSet<&str> = info.captures.iter().map(|(n, _)| n.as_str()).collect();
        info.branches = branches(c, &captured);
        // Fields of both sources where every way to match needs both (`app == "a" and
        // dport == 22`): as impossible as `syslog and flow`, which is an error. (A pinned
        // source already refuses the other's fields; a `false` is the author's own.)
        if info.source.is_none() && info.branches.as_ref().is_some_and(Vec::is_empty) {
            let mut fields = Vec::new();
            tested_fields(c, &mut fields);
            let of = |want: Source| {
                fields
                    .iter()
                    .find(|(f, _)| implied_source(f, &captured) == Some(want))
            };
            if let (Some((a, _)), Some((b, span))) = (of(Source::Syslog), of(Source::Flow)) {
                r.error(
                    (*span).clone(),
                    format!(
                        "`{a}` is a field of syslog events and `{b}` of flow events: an event is \
                         either syslog or flow, never both, so this condition can never match"
                    ),
                    Some("test fields of one source, or use `or` to accept either source".into()),
                );
            }
        }
    }
    (out, info)
}

/// The fields a condition's tests read, except under `not` (a missing field makes a negated
/// test true: it requires nothing).
fn tested_fields<'c>(c: &'c CondAst, out: &mut Vec<(&'c str, &'c Span)>) {
    match c {
        CondAst::Or(v) | CondAst::And(v) => v.iter().for_each(|x| tested_fields(x, out)),
        CondAst::Not(..) | CondAst::Bool(..) | CondAst::Bare(_) | CondAst::Source(..) => {}
        CondAst::Exists(n, span) => out.push((n, span)),
        CondAst::Cmp(_, a, b, _) | CondAst::Str(_, a, b, _) => {
            expr_fields(a, out);
            expr_fields(b, out);
        }
        CondAst::In(a, items, _) => {
            expr_fields(a, out);
            items.iter().for_each(|i| expr_fields(i, out));
        }
        CondAst::Regex { lhs, .. } => expr_fields(lhs, out),
    }
}

/// The single source a field name implies, when only one source has it (and no capture of
/// the condition can stand in for it).
fn implied_source(name: &str, captured: &BTreeSet<&str>) -> Option<Source> {
    if captured.contains(name) {
        return None;
    }
    if name.starts_with("sd.") {
        return Some(Source::Syslog);
    }
    match Field::from_name(name)?.sources() {
        [s] => Some(*s),
        _ => None,
    }
}

/// The fields an expression reads.
fn expr_fields<'e>(e: &'e ExprAst, out: &mut Vec<(&'e str, &'e Span)>) {
    match e {
        ExprAst::Field(n, span) => out.push((n, span)),
        ExprAst::Lit(..) => {}
        ExprAst::Arith(_, a, b, _) => {
            expr_fields(a, out);
            expr_fields(b, out);
        }
        ExprAst::Neg(a, _) => expr_fields(a, out),
        ExprAst::Call(_, args, _) => args.iter().for_each(|a| expr_fields(a, out)),
    }
}

/// The branches of a checked condition (see [`Branch`]), or `None` past [`MAX_BRANCHES`]. A
/// test on a field that is missing is false, so a field only one source has pins that source
/// in its branch; branches that need two sources at once are dropped (they never match).
fn branches(c: &CondAst, captured: &BTreeSet<&str>) -> Option<Vec<Branch>> {
    let atom = |fields: &[(&str, &Span)], caps: Vec<String>| -> Vec<Branch> {
        let mut source = None;
        for (f, _) in fields {
            match (source, implied_source(f, captured)) {
                (Some(a), Some(b)) if a != b => return Vec::new(),
                (None, s) => source = s,
                _ => {}
            }
        }
        vec![Branch {
            source,
            captures: caps,
        }]
    };
    Some(match c {
        CondAst::Or(v) => {
            let mut out = Vec::new();
            for p in v {
                out.extend(branches(p, captured)?);
                if out.len() > MAX_BRANCHES {
                    return None;
                }
            }
            out
        }
        CondAst::And(v) => {
            let mut acc = vec![Branch::default()];
            for p in v {
                let next = branches(p, captured)?;
                let mut prod = Vec::new();
                for a in &acc {
                    for b in &next {
                        let source = match (a.source, b.source) {
                            (Some(x), Some(y)) if x != y => continue,
                            (x, y) => x.or(y),
                        };
                        let mut captures = a.captures.clone();
                        captures.extend(b.captures.iter().cloned());
                        prod.push(Branch { source, captures });
                    }
                }
                if prod.len() > MAX_BRANCHES {
                    return None;
                }
                acc = prod;
            }
            acc
        }
        // A negation's captures are dropped. `not not x` holds where `x` does, `not syslog`
        // is a flow (an event is one or the other); nothing else is known of what a
        // negation matches.
        CondAst::Not(inner, _) => match &**inner {
            CondAst::Not(x, _) => branches(x, captured)?
                .into_iter()
                .map(|b| Branch {
                    source: b.source,
                    captures: Vec::new(),
                })
                .collect(),
            CondAst::Source(s, _) => vec![Branch {
                source: other_source(*s),
                captures: Vec::new(),
            }],
            _ => vec![Branch::default()],
        },
        CondAst::Bool(true, _) | CondAst::Bare(_) => vec![Branch::default()],
        CondAst::Bool(false, _) => Vec::new(),
        CondAst::Source(s, _) => vec![Branch {
            source: Some(*s),
            captures: Vec::new(),
        }],
        CondAst::Exists(n, span) => atom(&[(n.as_str(), span)], Vec::new()),
        CondAst::Cmp(_, a, b, _) | CondAst::Str(_, a, b, _) => {
            let mut fs = Vec::new();
            expr_fields(a, &mut fs);
            expr_fields(b, &mut fs);
            atom(&fs, Vec::new())
        }
        CondAst::In(a, items, _) => {
            let mut fs = Vec::new();
            expr_fields(a, &mut fs);
            for i in items {
                expr_fields(i, &mut fs);
            }
            atom(&fs, Vec::new())
        }
        CondAst::Regex {
            lhs, negate, re, ..
        } => {
            let mut fs = Vec::new();
            expr_fields(lhs, &mut fs);
            let caps = if *negate {
                Vec::new()
            } else {
                capture_names(re)
            };
            atom(&fs, caps)
        }
    })
}

/// The names of a regex's capture groups that take part in every match, in order, without
/// compiling it (an invalid regex has none here: the condition's check reports it). A group
/// in one branch of a `|`, or under `?`, `*` or `{0,n}`, may match without it.
fn capture_names(re: &str) -> Vec<String> {
    fn walk(h: &regex_syntax::hir::Hir, sure: bool, out: &mut Vec<String>) {
        use regex_syntax::hir::HirKind;
        match h.kind() {
            HirKind::Capture(c) => {
                if let Some(n) = &c.name
                    && sure
                {
                    out.push(n.to_string());
                }
                walk(&c.sub, sure, out);
            }
            HirKind::Repetition(r) => walk(&r.sub, sure && r.min > 0, out),
            HirKind::Concat(hs) => {
                for h in hs {
                    walk(h, sure, out);
                }
            }
            HirKind::Alternation(hs) => {
                for h in hs {
                    walk(h, sure && hs.len() == 1, out);
                }
            }
            HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) | HirKind::Look(_) => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(h) = regex_syntax::parse(re) {
        walk(&h, true, &mut out);
    }
    out
}

struct CondChecker<'r, 'a> {
    info: EventInfo,
    r: &'r mut Reporter<'a>,
}

/// What a value field `f` never takes in an event the agent makes should have been (`None`:
/// fine): [`Field::out_of_range`] (which also refuses JSON events), a whole float read as its
/// integer (`dport == 22.0` is `dport == 22`, integers and floats mix), and `proto`'s
/// spellings (its names in lower case; the common protocols by name, not number), which
/// JSON events from elsewhere may still use.
fn never_written(f: Field, l: &Value) -> Option<&'static str> {
    match (f, l) {
        (_, Value::Float(x)) if x.fract() == 0.0 && x.abs() < 9.0e15 => {
            f.out_of_range(&Value::Int(*x as i64))
        }
        (Field::Proto, Value::Str(p)) => {
            let named = f.enumerated().contains(&p.as_str());
            let number = p
                .parse::<u8>()
                .is_ok_and(|n| !matches!(n, 1 | 6 | 17 | 58) && p.as_str() == n.to_string());
            (!named && !number).then_some(
                "\"tcp\", \"udp\", \"icmp\", \"icmpv6\" or another protocol's number (\"47\")",
            )
        }
        _ => f.out_of_range(l),
    }
}

impl CondChecker<'_, '_> {
    /// Warns when field `f` never takes the value `l` (a port of 70000, `kind ==
    /// "flow_started"`, `proto == "TCP"`): the test or item at `lit` is constant
    /// (`consequence` says how), surely not what was meant.
    fn warn_out_of_range(&mut self, f: Field, l: &Value, lit: &ExprAst, consequence: &str) {
        let Some(want) = never_written(f, l) else {
            return;
        };
        let help = match l {
            Value::Str(text) => f
                .enumerated()
                .iter()
                .find(|c| c.eq_ignore_ascii_case(text))
                .copied()
                .or_else(|| did_you_mean(text, f.enumerated().iter().copied()))
                .map(|c| format!("did you mean \"{c}\"? `{}` is {want}", f.name())),
            _ => None,
        }
        .unwrap_or_else(|| format!("`{}` is {want}", f.name()));
        self.r.warning(
            lit.span(),
            format!(
                "`{}` never takes the value {}: {consequence}",
                f.name(),
                describe(lit)
            ),
            Some(help),
        );
    }
}

fn lit_value(l: &Lit) -> Option<Value> {
    Some(match l {
        Lit::Str(s) => Value::str(s),
        Lit::Int(i) => Value::Int(*i),
        Lit::Float(x) => Value::Float(*x),
        Lit::Bool(b) => Value::Bool(*b),
        Lit::Ip(ip) => Value::ip(*ip),
        Lit::Dur(d) => Value::Duration(*d),
        Lit::Cidr(_) => return None,
    })
}

/// An `or` of events is a set (one step any of them takes): its events in one order, once
/// each, so `or(b, a)` and `or(a, b, a)` mean `or(a, b)`.
fn as_event_set(ps: &mut Vec<Pattern>) {
    let key = |p: &Pattern| match p {
        Pattern::Event(i) => *i,
        _ => usize::MAX,
    };
    ps.sort_by_key(key);
    ps.dedup_by_key(|p| key(p));
}

/// The definitions sorted by what they match (their conditions) and the pattern's
/// references renumbered to follow: the order a file lists `events.*` in is no part of a
/// rule's meaning (state is kept across a reload that only reorders them, and such rules
/// share). Kept as written where the order means something
/// ([`crate::rules::ir::definition_order_matters`]).
pub(crate) fn order_definitions(defs: Vec<EventDef>, pattern: Pattern) -> (Vec<EventDef>, Pattern) {
    if crate::rules::ir::definition_order_matters(&defs) {
        return (defs, pattern);
    }
    // (Every definition takes its group from the same fields here: the condition decides.)
    let keys: Vec<String> = defs.iter().map(|d| d.cond.canonical()).collect();
    let mut order: Vec<usize> = (0..defs.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
    if order.iter().enumerate().all(|(new, &old)| new == old) {
        return (defs, pattern);
    }
    let mut renumber = vec![0; defs.len()];
    for (new, &old) in order.iter().enumerate() {
        renumber[old] = new;
    }
    fn remap(p: Pattern, to: &[usize]) -> Pattern {
        match p {
            Pattern::Event(i) => Pattern::Event(to.get(i).copied().unwrap_or(i)),
            Pattern::Seq(ps) => Pattern::Seq(ps.into_iter().map(|p| remap(p, to)).collect()),
            Pattern::And(ps) => Pattern::And(ps.into_iter().map(|p| remap(p, to)).collect()),
            Pattern::Or(ps) => {
                let mut ps: Vec<Pattern> = ps.into_iter().map(|p| remap(p, to)).collect();
                // An `or` of events is a set in index order (see `as_event_set`).
                if ps.iter().all(|p| matches!(p, Pattern::Event(_))) {
                    as_event_set(&mut ps);
                }
                Pattern::Or(ps)
            }
            Pattern::Repeat {
                inner,
                min,
                max,
                distinct,
            } => Pattern::Repeat {
                inner: Box::new(remap(*inner, to)),
                min,
                max,
                distinct,
            },
            Pattern::Absent { inner, for_ } => Pattern::Absent {
                inner: Box::new(remap(*inner, to)),
                for_,
            },
        }
    }
    let pattern = remap(pattern, &renumber);
    let mut slots: Vec<Option<EventDef>> = defs.into_iter().map(Some).collect();
    let defs = order.iter().filter_map(|&old| slots[old].take()).collect();
    (defs, pattern)
}

/// Whether a pattern is an event or an `or` of events (through nested ones): one step, as
/// the plan's `simple_set` reads it (which, unlike this, needs fewer than 64 definitions).
fn only_events(p: &Pattern) -> bool {
    match p {
        Pattern::Event(_) => true,
        Pattern::Or(ps) => ps.iter().all(only_events),
        _ => false,
    }
}

/// The operands of an associative operator with those of the same operator nested in it
/// spliced in place (`open` gives a nested one's operands, or the item back), order kept.
fn flatten<T>(items: Vec<T>, open: impl Fn(T) -> Result<Vec<T>, T> + Copy) -> Vec<T> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match open(item) {
            Ok(inner) => out.extend(flatten(inner, open)),
            Err(item) => out.push(item),
        }
    }
    out
}

fn compatible(a: ValueType, b: ValueType) -> bool {
    a == b || (a.is_numeric() && b.is_numeric())
}

impl CondChecker<'_, '_> {
    fn cond(&mut self, c: &CondAst) -> Option<Cond> {
        match c {
            CondAst::Or(v) => {
                let parts: Vec<Option<Cond>> = v.iter().map(|c| self.cond(c)).collect();
                let parts = parts.into_iter().collect::<Option<Vec<_>>>()?;
                Some(Cond::Or(flatten(parts, |c| match c {
                    Cond::Or(cs) => Ok(cs),
                    other => Err(other),
                })))
            }
            CondAst::And(v) => {
                let parts: Vec<Option<Cond>> = v.iter().map(|c| self.cond(c)).collect();
                let parts = parts.into_iter().collect::<Option<Vec<_>>>()?;
                Some(Cond::And(flatten(parts, |c| match c {
                    Cond::And(cs) => Ok(cs),
                    other => Err(other),
                })))
            }
            CondAst::Not(c, _) => {
                // captures under `not` are not kept (the engine drops them too)
                let mark = self.info.captures.len();
                let inner = self.cond(c);
                self.info.captures.truncate(mark);
                Some(match inner? {
                    // `not not x` is `x`, unless x captures (under `not` nothing is kept).
                    Cond::Not(x) if !x.captures_any() => *x,
                    inner => Cond::Not(Box::new(inner)),
                })
            }
            CondAst::Source(s, _) => Some(Cond::Source(*s)),
            CondAst::Bool(true, _) => Some(Cond::True),
            CondAst::Bool(false, _) => Some(Cond::Not(Box::new(Cond::True))),
            CondAst::Exists(name, span) => {
                let (k, _) = self.field(name, span.clone())?;
                Some(Cond::Exists(k))
            }
            CondAst::Bare(e) => {
                let ty = self.expr(e).map(|(_, t)| t);
                let help = match e {
                    ExprAst::Field(n, _) => {
                        // An example literal of the field's own type.
                        let example = ty.map_or("\"...\"", example_literal);
                        Some(format!(
                            "compare it, e.g. `{n} == {example}`, or test presence with `exists({n})`"
                        ))
                    }
                    _ => Some("write a comparison such as `app == \"sshd\"`".into()),
                };
                let what = ty.map_or(String::new(), |t| format!(" ({})", t.with_article()));
                self.r.error(
                    e.span(),
                    format!("expected a condition, found a value{what}"),
                    help,
                );
                None
            }
            CondAst::Cmp(op, a, b, opspan) => {
                let ea = self.expr(a);
                let eb = self.expr(b);
                let ((xa, ta), (xb, tb)) = (ea?, eb?);
                if !compatible(ta, tb) {
                    let help =
                        mismatch_fix(ta, b)
                            .or_else(|| mismatch_fix(tb, a))
                            .or_else(|| match (a, b) {
                                (_, ExprAst::Lit(..)) => mismatch_help(ta, b),
                                (ExprAst::Lit(..), _) => mismatch_help(tb, a),
                                _ => Some(format!(
                                    "both sides must have one type: here {ta} and {tb}"
                                )),
                            });
                    // The caret goes under the literal to change, else the whole comparison.
                    let at = match (a, b) {
                        (_, ExprAst::Lit(..)) => b.span(),
                        (ExprAst::Lit(..), _) => a.span(),
                        _ => a.span().start.min(opspan.start)..b.span().end.max(opspan.end),
                    };
                    self.r.error(
                        at,
                        format!(
                            "cannot compare {} ({ta}) with {} ({tb})",
                            describe(a),
                            describe(b)
                        ),
                        help,
                    );
                    return None;
                }
                // `kind == "flow_started"`, `dport == 70000`: a value the field never takes
                // makes the test constant, surely not what was meant.
                if matches!(op, CmpOp::Eq | CmpOp::Ne) {
                    let fixed = match (&xa, &xb) {
                        (Expr::Field(FieldKey::Known(f)), Expr::Lit(l)) => Some((*f, l, b)),
                        (Expr::Lit(l), Expr::Field(FieldKey::Known(f))) => Some((*f, l, a)),
                        _ => None,
                    };
                    if let Some((f, l, lit)) = fixed {
                        let always = if *op == CmpOp::Eq { "never" } else { "always" };
                        self.warn_out_of_range(f, l, lit, &format!("this test is {always} true"));
                    }
                }
                // `"sshd" == app` is `app == "sshd"`: the field first, as the index and the
                // canonical form expect (the operator turned round for an ordering).
                Some(match (xa, xb) {
                    (Expr::Lit(l), Expr::Field(f)) => {
                        Cond::Cmp(op.flipped(), Expr::Field(f), Expr::Lit(l))
                    }
                    (xa, xb) => Cond::Cmp(*op, xa, xb),
                })
            }
            CondAst::Str(op, a, b, opspan) => {
                let ea = self.expr(a);
                let eb = self.expr(b);
                let ((xa, ta), (xb, tb)) = (ea?, eb?);
                for (t, e) in [(ta, a), (tb, b)] {
                    if t != ValueType::Str {
                        self.r.error(
                            e.span(),
                            format!(
                                "string test on {} which is {}",
                                describe(e),
                                t.with_article()
                            ),
                            Some(format!(
                                "`{}` works on strings only",
                                self.r.text(opspan.clone())
                            )),
                        );
                        return None;
                    }
                }
                Some(Cond::Str(*op, xa, xb))
            }
            CondAst::Regex {
                lhs,
                negate,
                re,
                re_span,
                offsets,
            } => {
                let (x, _) = self.expr(lhs)?;
                if let Some((count, at)) = heavy_repetition(re) {
                    self.r.error(
                        regex_span(re, offsets, at).unwrap_or_else(|| re_span.clone()),
                        format!(
                            "a repetition counted to {count} makes every match of this regex slow (about a second per long message at 50,000): at most {MAX_REGEX_REPEAT}"
                        ),
                        Some(format!(
                            "match a shorter run: `x{{{MAX_REGEX_REPEAT},}}` also says \"at least {MAX_REGEX_REPEAT}\", and a run of N is found by any shorter one it holds"
                        )),
                    );
                    return None;
                }
                // Within what the rule set's budget has left: once it is nearly spent, a large
                // regex fails fast at the limit instead of being built and then refused.
                let left = MAX_REGEX_BYTES.saturating_sub(*self.r.regex_bytes);
                // (What a text gave, it gives again: a regex that failed is not built again.)
                let known = self.r.regexes.get(re.as_str()).cloned();
                let seen = known.is_some();
                let compiled = match known
                    .unwrap_or_else(|| Re::with_limit(re, left.min(REGEX_NFA_MAX)))
                {
                    Ok(c) if seen => c,
                    Ok(c) if c.memory_usage() <= left => {
                        *self.r.regex_bytes += c.memory_usage();
                        self.r.regexes.insert(re.as_str().into(), Ok(c.clone()));
                        c
                    }
                    Err(e) if seen || left >= REGEX_NFA_MAX || e.size_limit().is_none() => {
                        if !seen {
                            self.r.regexes.insert(re.as_str().into(), Err(e.clone()));
                        }
                        self.regex_error(re, re_span, offsets, &e);
                        return None;
                    }
                    _ => {
                        // Spent: the regexes after this one are refused at once, not each
                        // built up to what is left first.
                        *self.r.regex_bytes = MAX_REGEX_BYTES;
                        self.r.error(
                            re_span.clone(),
                            format!(
                                "the rule set's regexes take more than {} MB together with this one",
                                MAX_REGEX_BYTES >> 20
                            ),
                            Some("use fewer or smaller regexes: `\\w`, `\\d` and `\\s` span all of Unicode (`[a-z0-9_]`, `[0-9]` and `[ \\t]` do not), and a condition such as `msg contains \"...\"` needs none".into()),
                        );
                        return None;
                    }
                };
                let mut captures = Vec::new();
                for (idx, name) in compiled.capture_names().enumerate() {
                    let Some(name) = name else { continue };
                    let key = FieldKey::from_name(name);
                    // The event's time is what windows, deadlines and alerts read: a capture
                    // would show one time in the alert's events while the match used another.
                    if key == FieldKey::Known(Field::Time) {
                        self.r.error(
                            re_span.clone(),
                            "a capture cannot be named `time`: an event's time is its own",
                            Some(
                                "name it otherwise, e.g. `(?P<ts>...)`; `time` stays the stamp the event was read with"
                                    .into(),
                            ),
                        );
                        return None;
                    }
                    // A capture named as a field the matched event has itself replaces its
                    // value with text from the message (which its sender writes).
                    let own = match (&key, lhs) {
                        (&FieldKey::Known(f), ExprAst::Field(n, _)) => match Field::from_name(n) {
                            Some(g) => g.sources().iter().any(|s| f.sources().contains(s)),
                            // (`sd.<id>.<param>`: a syslog field too.)
                            None => n.starts_with("sd.") && f.sources().contains(&Source::Syslog),
                        },
                        _ => false,
                    };
                    if own && key == FieldKey::Known(Field::Peer) {
                        self.r.error(
                            re_span.clone(),
                            "a capture cannot be named `peer`: the sender's address is the socket's, which no message text may replace",
                            Some("name it otherwise, e.g. `(?P<client>...)`".into()),
                        );
                        return None;
                    }
                    if own && !*negate {
                        self.r.warning(
                            re_span.clone(),
                            format!(
                                "the capture `{name}` replaces the event's own `{name}` with text from the message, in grouping, conditions and the alert's events"
                            ),
                            Some(format!(
                                "name it otherwise to keep both, e.g. `(?P<msg_{name}>...)`; keep it only if the message's value is the one meant (a relay's origin host)"
                            )),
                        );
                    }
                    let ty = key.ty();
                    if !*negate {
                        self.info.captures.push((name.to_string(), ty));
                    }
                    captures.push((idx, key));
                }
                Some(Cond::Regex(Box::new(RegexCond {
                    lhs: x,
                    re: compiled,
                    negate: *negate,
                    captures,
                })))
            }
            CondAst::In(lhs, items, inspan) => {
                let (x, t) = self.expr(lhs)?;
                if let Some(call) = items
                    .iter()
                    .find(|it| matches!(it, ExprAst::Call(n, _, _) if n == "file"))
                {
                    // (`in [file("a")]` too: the list file is no item of a list.)
                    let bracketed = self.r.text(inspan.end..call.span().start).contains('[');
                    if items.len() > 1 || bracketed {
                        self.r.error(
                            call.span(),
                            "`file(...)` stands alone after `in`: one list file per test",
                            Some(format!(
                                "write `{0} in file(\"a.txt\") or {0} in file(\"b.txt\")`, or join the files",
                                self.r.text(lhs.span())
                            )),
                        );
                        return None;
                    }
                    let ExprAst::Call(_, args, span) = call else {
                        return None;
                    };
                    let list = self.list_file(args, span, t, lhs)?;
                    return Some(Cond::InFile(x, list));
                }
                let mut nets: Vec<IpNet> = Vec::new();
                let mut vals: Vec<Value> = Vec::new();
                let mut ok = true;
                for it in items {
                    // `-1` is a negative number, as a literal is (the parser reads a minus).
                    let negative = match it {
                        ExprAst::Neg(inner, sp) => match &**inner {
                            ExprAst::Lit(Lit::Int(i), isp) => i
                                .checked_neg()
                                .map(|n| ExprAst::Lit(Lit::Int(n), sp.start..isp.end)),
                            ExprAst::Lit(Lit::Float(x), isp) => {
                                Some(ExprAst::Lit(Lit::Float(-x), sp.start..isp.end))
                            }
                            _ => None,
                        },
                        _ => None,
                    };
                    let it = negative.as_ref().unwrap_or(it);
                    match (t, it) {
                        (ValueType::Ip, ExprAst::Lit(Lit::Cidr(n), sp)) => {
                            if n.trunc() != *n {
                                self.r.warning(
                                    sp.clone(),
                                    format!(
                                        "`{n}` has host bits set: it is the network `{}`",
                                        n.trunc()
                                    ),
                                    Some(format!(
                                        "write `{}` for the network, or `{}` for the one address",
                                        n.trunc(),
                                        n.addr()
                                    )),
                                );
                            }
                            nets.push(canonical_net(*n))
                        }
                        (ValueType::Ip, ExprAst::Lit(Lit::Ip(ip), _)) => {
                            nets.push(canonical_net(IpNet::from(*ip)))
                        }
                        (ValueType::Ip, ExprAst::Lit(Lit::Str(s), sp)) => {
                            ok = false;
                            let help = if s.parse::<IpNet>().is_ok()
                                || s.parse::<std::net::IpAddr>().is_ok()
                            {
                                format!("write the address without quotes: {s}")
                            } else {
                                "list IP addresses or networks such as 10.0.0.0/8".into()
                            };
                            self.r.error(
                                sp.clone(),
                                format!(
                                    "{} is an IP address; this list item is a string",
                                    describe(lhs)
                                ),
                                Some(help),
                            );
                        }
                        (_, ExprAst::Lit(Lit::Cidr(_), sp)) => {
                            ok = false;
                            self.r.error(
                                sp.clone(),
                                format!(
                                    "a network (CIDR) only contains IP addresses; {} is {}",
                                    describe(lhs),
                                    t.with_article()
                                ),
                                Some("`in 10.0.0.0/8` works on IP fields such as `src`, `dst` or `peer`".into()),
                            );
                        }
                        (_, ExprAst::Lit(l, sp)) => {
                            let Some(v) = lit_value(l) else { continue };
                            // `state in ["s0", "rej"]`: an item the field never takes matches
                            // nothing, as `==` with it would.
                            if let Expr::Field(FieldKey::Known(f)) = &x
                                && compatible(t, v.ty())
                            {
                                self.warn_out_of_range(*f, &v, it, "this item never matches");
                            }
                            if !compatible(t, v.ty()) {
                                ok = false;
                                self.r.error(
                                    sp.clone(),
                                    format!(
                                        "list item is {}, but {} is {}",
                                        v.ty().with_article(),
                                        describe(lhs),
                                        t.with_article()
                                    ),
                                    mismatch_help(t, it),
                                );
                            } else {
                                vals.push(v);
                            }
                        }
                        (_, other) => {
                            ok = false;
                            self.r.error(
                                other.span(),
                                "`in` lists hold literal values only",
                                Some("write values such as \"sshd\", 22 or 10.0.0.0/8".into()),
                            );
                        }
                    }
                }
                if !ok {
                    return None;
                }
                if items.is_empty() {
                    self.r.warning(
                        inspan.clone(),
                        "`in []` is an empty list: this test is never true",
                        None,
                    );
                }
                if t == ValueType::Ip {
                    return Some(Cond::InCidr(x, nets));
                }
                // `app in ["sshd"]` is `app == "sshd"` (both compare as `compare` does): one
                // predicate and one canonical text for the two.
                let mut distinct = vals.clone();
                distinct.sort();
                distinct.dedup();
                if let [v] = distinct.as_slice() {
                    return Some(Cond::Cmp(CmpOp::Eq, x, Expr::Lit(v.clone())));
                }
                Some(Cond::In(x, ValueList::new(vals)))
            }
        }
    }

    fn regex_error(&mut self, re: &str, re_span: &Span, offsets: &[usize], e: &ReError) {
        // regex-syntax gives the exact place of syntax errors
        let located = match regex_syntax::ast::parse::Parser::new().parse(re) {
            Err(pe) => {
                let s = pe.span();
                let at = s.start.offset..s.end.offset.max(s.start.offset + 1);
                regex_span(re, offsets, at).map(|span| (span, pe.kind().to_string()))
            }
            Ok(_) => None,
        };
        match located {
            Some((span, kind)) => self.r.error(
                span,
                format!("invalid regex: {kind}"),
                Some("regexes use Rust `regex` syntax; backslashes are kept as written".into()),
            ),
            None => {
                let (last, help) = match e.size_limit() {
                    // (What makes it large: counts and classes, or the text itself.)
                    Some(limit) if grows_when_compiled(re) => (
                        format!("its compiled form would exceed {} MB", limit >> 20),
                        "count less, or use narrower classes: `\\w`, `\\d` and `\\s` span all of Unicode (`[a-z0-9_]`, `[0-9]` and `[ \\t]` do not; `(?-u:\\w)` is `\\w` in ASCII)".to_string(),
                    ),
                    Some(limit) => (
                        format!("its compiled form would exceed {} MB", limit >> 20),
                        "the regex is too long: split it over several event definitions, e.g. `events.ioc1 = ...`, `events.ioc2 = ...` and `or(ioc1, ioc2)` in the pattern".to_string(),
                    ),
                    None => {
                        let text = e.to_string();
                        (text.lines().last().unwrap_or("").trim().to_string(), text)
                    }
                };
                self.r.error(
                    re_span.clone(),
                    format!("invalid regex: {last}"),
                    Some(help),
                );
            }
        }
    }

    fn field(&mut self, name: &str, span: Span) -> Option<(FieldKey, ValueType)> {
        // `sd.origin`: an SD-ID alone, which no event carries (its fields are its
        // parameters).
        if let Some(id) = name.strip_prefix("sd.")
            && !id.contains('.')
        {
            self.r.warning(
                span.clone(),
                format!("`{name}` is never set: structured data gives one field per parameter"),
                Some(format!(
                    "name a parameter, `sd.{id}.<param>` (e.g. `sd.origin.ip`); an SD-ID without parameters gives no field"
                )),
            );
        }
        if let Some(p) = self.info.provides(name) {
            return Some(p);
        }
        let src = self.info.source;
        if name.starts_with("sd.") {
            self.r.error(
                span,
                format!("unknown field `{name}` for flow events"),
                Some("structured data (sd.*) is carried by syslog events only".into()),
            );
            return None;
        }
        if let (Some(f), Some(s)) = (Field::from_name(name), src) {
            let others: Vec<&str> = f.sources().iter().map(|s| s.name()).collect();
            self.r.error(
                span,
                format!(
                    "unknown field `{name}` for {} events; {} events have it",
                    s.name(),
                    others.join(" and ")
                ),
                Some(format!(
                    "this condition starts with `{}`, which pins the source",
                    s.name()
                )),
            );
            return None;
        }
        let names = self.info.names();
        let help = match near_field(name, names.iter().map(String::as_str)) {
            Some(s) => Some(format!("did you mean `{s}`?")),
            None => Some(format!(
                "fields are: {}; sd.<id>.<param>; and named regex captures (a text value is \
                 quoted: `host == \"web-1\"`)",
                names.join(", ")
            )),
        };
        self.r.error(span, format!("unknown field `{name}`"), help);
        None
    }

    /// The list file `file(args)` names, read as values of type `t` (what `lhs` is), from the
    /// rule file's folder; read once per compile whatever the number of tests naming it.
    fn list_file(
        &mut self,
        args: &[ExprAst],
        span: &Span,
        t: ValueType,
        lhs: &ExprAst,
    ) -> Option<std::sync::Arc<ListFile>> {
        let usage = "write `src in file(\"blocklist.txt\")`: a path relative to the rule file's \
                     folder, one value or network per line";
        let rel = match args {
            [ExprAst::Lit(Lit::Str(p), _)] if !p.is_empty() => p.clone(),
            _ => {
                self.r.error(
                    span.clone(),
                    "`file` takes the list file's path, in quotes",
                    Some(usage.into()),
                );
                return None;
            }
        };
        if !matches!(t, ValueType::Str | ValueType::Int | ValueType::Ip) {
            self.r.error(
                span.clone(),
                format!(
                    "a list file holds texts, whole numbers or IP addresses; {} is {}",
                    describe(lhs),
                    t.with_article()
                ),
                Some("test this field with `in [...]` or comparisons".into()),
            );
            return None;
        }
        let base = self
            .r
            .file
            .path
            .parent()
            .unwrap_or(std::path::Path::new(""));
        // One spelling per file (`./a.txt` and `a.txt` are one), for the cache and for the
        // canonical text, which must not depend on which rule named the file first.
        let path: std::path::PathBuf = base
            .join(&rel)
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect();
        if path.to_str().is_none() {
            self.r.error(
                span.clone(),
                format!("the list file's path `{}` is not UTF-8", path.display()),
                Some("name the rule folder and the list with UTF-8 names".into()),
            );
            return None;
        }
        let key = (path.clone(), t);
        if let Some(found) = self.r.lists.get(&key) {
            let found = found.clone();
            if found.is_none() {
                self.r.error(
                    span.clone(),
                    format!(
                        "list file `{}` has errors (reported at its lines)",
                        path.display()
                    ),
                    None,
                );
            }
            return found;
        }
        let text = match (self.r.read_file)(&path) {
            Ok(text) => text,
            Err(e) => {
                self.r.error(
                    span.clone(),
                    format!("cannot read list file `{}`: {e}", path.display()),
                    Some(
                        "the path is relative to the rule file's folder; one value or network per line"
                            .into(),
                    ),
                );
                return None;
            }
        };
        // (Checked before any line is: a diagnostic in the file copies it and tables its lines,
        // which a feed of millions of blank lines would make hundreds of megabytes.)
        let lines = text.bytes().filter(|&b| b == b'\n').count();
        if lines > MAX_LIST_LINES {
            self.r.error(
                span.clone(),
                format!(
                    "list file `{}` has {lines} lines: at most {MAX_LIST_LINES} are read",
                    path.display()
                ),
                Some(format!(
                    "a list holds at most {MAX_LIST_ITEMS} items, one per line"
                )),
            );
            self.r.lists.insert(key, None);
            return None;
        }
        let what = format!("{} ({})", describe(lhs), t.with_article());
        // (A registry field's list is checked against the values it takes.)
        let field = match lhs {
            ExprAst::Field(name, _) => Field::from_name(name),
            _ => None,
        };
        let (items, diags) = read_list(&path, &text, t, &what, field);
        let failed = diags.iter().any(Diagnostic::is_error);
        self.r.diags.extend(diags);
        let list = match items {
            Some(items) if !failed => std::sync::Arc::new(ListFile {
                path: path.display().to_string(),
                items,
            }),
            _ => {
                self.r.lists.insert(key, None);
                return None;
            }
        };
        // (A list holding only comments was left empty on purpose: an allowlist to fill in.)
        let commented =
            || super::file::list_lines(&text).any(|l| matches!(l, super::file::ListLine::Comment));
        if list.is_empty() && !commented() {
            self.r.warning(
                span.clone(),
                format!(
                    "list file `{}` lists nothing: this test is never true",
                    path.display()
                ),
                Some("one value or network per line; `#` starts a comment".into()),
            );
        }
        self.r.lists.insert(key, Some(list.clone()));
        Some(list)
    }

    /// A time-of-day function: `hour(time)`, `weekday(time, "Europe/Paris")`.
    fn call(&mut self, name: &str, args: &[ExprAst], span: &Span) -> Option<(Expr, ValueType)> {
        if name == "file" {
            self.r.error(
                span.clone(),
                "`file(...)` is a list of values, for `in`",
                Some("write `src in file(\"blocklist.txt\")`".into()),
            );
            return None;
        }
        let Some(part) = TimePart::ALL.into_iter().find(|p| p.name() == name) else {
            let names: Vec<&str> = TimePart::ALL.iter().map(|p| p.name()).collect();
            let help = match did_you_mean(name, names.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!(
                    "the functions are {}, of a time: `hour(time) >= 18`; presence is `exists(field)`",
                    names.join(", ")
                ),
            };
            self.r.error(
                span.clone(),
                format!("unknown function `{name}`"),
                Some(help),
            );
            return None;
        };
        let usage = format!("write `{name}(time)`, or `{name}(time, \"Europe/Paris\")` for a zone");
        let (time, zone) = match args {
            [t] => (t, None),
            [t, z] => (t, Some(z)),
            _ => {
                self.r.error(
                    span.clone(),
                    format!("`{name}` takes a time and, optionally, a zone"),
                    Some(usage),
                );
                return None;
            }
        };
        let zone = match zone {
            None => None,
            Some(ExprAst::Lit(Lit::Str(z), zs)) => match z.parse::<chrono_tz::Tz>() {
                Ok(tz) => Some(tz),
                Err(_) => {
                    self.r.error(
                        zs.clone(),
                        format!("unknown time zone `{z}`"),
                        Some("name an IANA zone such as \"Europe/Paris\" or \"UTC\"".into()),
                    );
                    return None;
                }
            },
            Some(other) => {
                self.r.error(
                    other.span(),
                    "the zone must be a quoted IANA name",
                    Some(usage),
                );
                return None;
            }
        };
        let (x, t) = self.expr(time)?;
        if t != ValueType::Time {
            self.r.error(
                time.span(),
                format!("`{name}` reads a time, not {}", t.with_article()),
                Some(usage),
            );
            return None;
        }
        Some((Expr::TimePart(part, Box::new(x), zone), ValueType::Int))
    }

    fn expr(&mut self, e: &ExprAst) -> Option<(Expr, ValueType)> {
        match e {
            ExprAst::Lit(Lit::Cidr(n), s) => {
                self.r.error(
                    s.clone(),
                    format!("a network ({n}) can only follow `in`"),
                    Some(format!("write `src in {n}`")),
                );
                None
            }
            ExprAst::Lit(l, _) => {
                let v = lit_value(l)?;
                let t = v.ty();
                Some((Expr::Lit(v), t))
            }
            ExprAst::Field(name, span) => {
                let (k, t) = self.field(name, span.clone())?;
                Some((Expr::Field(k), t))
            }
            ExprAst::Neg(inner, s) => {
                let (x, t) = self.expr(inner)?;
                if !t.is_numeric() {
                    self.r.error(
                        s.clone(),
                        format!("cannot negate {}", t.with_article()),
                        Some("`-` negates numbers and durations only".into()),
                    );
                    return None;
                }
                Some((Expr::Neg(Box::new(x)), t))
            }
            ExprAst::Arith(op, a, b, s) => {
                let ea = self.expr(a);
                let eb = self.expr(b);
                let ((xa, ta), (xb, tb)) = (ea?, eb?);
                use ValueType as T;
                let t = match (ta, tb) {
                    (T::Int, T::Int) => Some(T::Int),
                    (x, y) if x.is_numeric() && y.is_numeric() => Some(T::Float),
                    (T::Time, T::Duration) if matches!(op, ArithOp::Add | ArithOp::Sub) => {
                        Some(T::Time)
                    }
                    (T::Time, T::Time) if *op == ArithOp::Sub => Some(T::Duration),
                    (T::Duration, T::Duration) if matches!(op, ArithOp::Add | ArithOp::Sub) => {
                        Some(T::Duration)
                    }
                    (T::Duration, T::Int) if matches!(op, ArithOp::Mul | ArithOp::Div) => {
                        Some(T::Duration)
                    }
                    _ => None,
                };
                let Some(t) = t else {
                    let sym = self.r.text(s.clone());
                    self.r.error(
                        s.clone(),
                        format!("cannot apply `{sym}` to {ta} and {tb}"),
                        Some("arithmetic works on numbers, and on times and durations".into()),
                    );
                    return None;
                };
                Some((Expr::Arith(*op, Box::new(xa), Box::new(xb)), t))
            }
            ExprAst::Call(name, args, s) => self.call(name, args, s),
        }
    }
}

/// The items of list file `path` (text `text`, read as `expect` files are:
/// [`super::file::list_lines`]) as values of type `t` (`what`: the tested expression and its
/// type, for messages), and what is wrong with its lines; repeats kept once; for IP
/// addresses, networks too (`10.0.0.0/8`). `None` past [`MAX_LIST_ITEMS`] or with errors.
pub(crate) fn read_list(
    path: &std::path::Path,
    text: &str,
    t: ValueType,
    what: &str,
    field: Option<Field>,
) -> (Option<ListItems>, Vec<Diagnostic>) {
    // (The file's context, for diagnostics only: a clean list of millions of lines is not
    // copied for them.)
    let mut ctx: Option<FileCtx> = None;
    // (Without its byte-order mark, as an `expect` file: the columns of its first line count
    // from its first character.)
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut diags = Vec::new();
    let mut errors = 0usize;
    let mut report = |diags: &mut Vec<Diagnostic>,
                      level: Level,
                      span: Range<usize>,
                      msg: String,
                      help: Option<String>| {
        let c = ctx.get_or_insert_with(|| FileCtx::new(path.to_path_buf(), text));
        let mut d = c.diag(level, span, msg);
        d.help = help;
        diags.push(d);
    };
    let mut values: std::collections::HashSet<Value> = Default::default();
    let mut nets: Vec<IpNet> = Vec::new();
    // Networks with host bits set; items the field never takes (`dport` 70000), and why.
    let mut host_bits = FirstLines::default();
    let mut never = FirstLines::default();
    let mut never_why: Option<&'static str> = None;
    for line in super::file::list_lines(text) {
        let super::file::ListLine::Item(sp, item) = line else {
            continue;
        };
        let held = values.len() + nets.len();
        if held >= MAX_LIST_ITEMS {
            report(
                &mut diags,
                Level::Error,
                sp,
                format!("more than {MAX_LIST_ITEMS} items in one list file"),
                Some("split it into several files, tested with `or`".into()),
            );
            return (None, diags);
        }
        let mut bad = |diags: &mut Vec<Diagnostic>, errors: &mut usize, msg: String, help: &str| {
            *errors += 1;
            if *errors <= MAX_LIST_ERRORS {
                report(diags, Level::Error, sp.clone(), msg, Some(help.to_string()));
            }
        };
        match t {
            ValueType::Ip => {
                let net = if item.contains('/') {
                    item.parse::<IpNet>().ok()
                } else {
                    item.parse::<std::net::IpAddr>().ok().map(IpNet::from)
                };
                match net {
                    Some(n) => {
                        if n.trunc() != n {
                            host_bits.note(&sp, item);
                        }
                        nets.push(n);
                    }
                    None => bad(
                        &mut diags,
                        &mut errors,
                        format!(
                            "`{item}` is not an IP address or network; this list is for {what}"
                        ),
                        "one address (`192.0.2.7`, `2001:db8::1`) or network (`10.0.0.0/8`) per line",
                    ),
                }
            }
            _ => {
                let v = match t {
                    ValueType::Int => item.parse::<i64>().ok().map(Value::Int),
                    _ => Some(Value::str(item)),
                };
                let Some(v) = v else {
                    bad(
                        &mut diags,
                        &mut errors,
                        format!("`{item}` is not a whole number; this list is for {what}"),
                        "one number per line, such as 22",
                    );
                    continue;
                };
                if let Some(why) = field.and_then(|f| never_written(f, &v)) {
                    never.note(&sp, item);
                    never_why.get_or_insert(why);
                }
                values.insert(v);
            }
        }
    }
    if let (Some((sp, item)), Some(f), Some(want)) = (never.first.clone(), field, never_why) {
        let more = never.more();
        report(
            &mut diags,
            Level::Warning,
            sp,
            format!(
                "`{}` never takes the value `{item}`: this item never matches{more}",
                f.name()
            ),
            Some(format!("`{}` is {want}", f.name())),
        );
    }
    if errors > MAX_LIST_ERRORS {
        let end = text.len();
        report(
            &mut diags,
            Level::Error,
            end..end,
            format!("{} more lines like these", errors - MAX_LIST_ERRORS),
            None,
        );
    }
    if let Some((sp, item)) = host_bits.first.clone() {
        let more = host_bits.more();
        let net = item
            .parse::<IpNet>()
            .map(|n| n.trunc().to_string())
            .unwrap_or_default();
        report(
            &mut diags,
            Level::Warning,
            sp,
            format!("`{item}` has host bits set: it is read as the network `{net}`{more}"),
            Some("write the network's first address, or the one address without `/`".into()),
        );
    }
    if errors > 0 {
        return (None, diags);
    }
    let items = match t {
        ValueType::Ip => ListItems::Nets(NetRanges::new(nets)),
        _ => {
            values.shrink_to_fit();
            ListItems::Values(values)
        }
    };
    (Some(items), diags)
}

/// The first line of a list file one warning stands for, and how many lines it stands for: a
/// feed with thousands of such lines makes one warning, not thousands.
#[derive(Default)]
struct FirstLines {
    /// The first line's span and item.
    first: Option<(Range<usize>, String)>,
    count: usize,
}

impl FirstLines {
    fn note(&mut self, sp: &Range<usize>, item: &str) {
        self.count += 1;
        self.first
            .get_or_insert_with(|| (sp.clone(), item.to_string()));
    }

    /// What follows the warning: how many more lines it stands for (nothing for one).
    fn more(&self) -> String {
        match self.count {
            0 | 1 => String::new(),
            n => format!(" (and {} more lines like it)", n - 1),
        }
    }
}

fn describe(e: &ExprAst) -> String {
    match e {
        ExprAst::Field(n, _) => format!("`{n}`"),
        ExprAst::Lit(Lit::Str(s), _) => format!("{s:?}"),
        ExprAst::Lit(Lit::Int(i), _) => i.to_string(),
        ExprAst::Lit(Lit::Float(x), _) => x.to_string(),
        ExprAst::Lit(Lit::Bool(b), _) => b.to_string(),
        ExprAst::Lit(Lit::Ip(ip), _) => ip.to_string(),
        ExprAst::Lit(Lit::Cidr(n), _) => n.to_string(),
        ExprAst::Lit(Lit::Dur(d), _) => d.to_string(),
        _ => "the expression".into(),
    }
}

/// A hint when a value of type `want` is compared with the literal `other`.
/// A literal of type `t`, for hints (`severity == 3`).
fn example_literal(t: ValueType) -> &'static str {
    match t {
        ValueType::Int => "3",
        ValueType::Float => "1.5",
        ValueType::Ip => "10.0.0.1",
        ValueType::Duration => "5s",
        ValueType::Bool => "true",
        ValueType::Time => "time - 5m",
        ValueType::Str => "\"...\"",
    }
}

/// How to write a value of the type `want` in place of `other`: a fix for the common slips
/// (quotes, units), else an example of the type.
fn mismatch_help(want: ValueType, other: &ExprAst) -> Option<String> {
    mismatch_fix(want, other).or_else(|| {
        Some(format!(
            "give {}, e.g. `{}`",
            want.with_article(),
            example_literal(want)
        ))
    })
}

fn mismatch_fix(want: ValueType, other: &ExprAst) -> Option<String> {
    match (want, other) {
        (ValueType::Ip, ExprAst::Lit(Lit::Str(s), _)) if s.parse::<std::net::IpAddr>().is_ok() => {
            Some(format!("write the address without quotes: {s}"))
        }
        (ValueType::Ip, ExprAst::Lit(Lit::Cidr(n), _)) => {
            Some(format!("test membership with `in {n}`"))
        }
        (ValueType::Str, ExprAst::Lit(Lit::Int(i), _)) => {
            Some(format!("write \"{i}\" to compare as text"))
        }
        (ValueType::Str, ExprAst::Lit(Lit::Ip(ip), _)) => {
            Some(format!("write \"{ip}\" to compare as text"))
        }
        (t, ExprAst::Lit(Lit::Str(s), _)) if t.is_numeric() && s.trim().parse::<f64>().is_ok() => {
            Some(format!(
                "write {} without quotes to compare as a number",
                s.trim()
            ))
        }
        (ValueType::Duration, ExprAst::Lit(Lit::Int(i), _)) => Some(format!("give a unit: {i}s")),
        (ValueType::Duration, ExprAst::Lit(Lit::Float(x), _)) => {
            Some(format!("give a unit: {x}s"))
        }
        // There is no timestamp literal: times are compared through their parts.
        (ValueType::Time, ExprAst::Lit(..)) => Some(
            "there is no timestamp literal: compare the time's parts, e.g. `hour(time) >= 22`, or write the window in the pattern (`within`)"
                .into(),
        ),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// patterns

/// Per-event facts the pattern checker needs.
pub(crate) struct PatEnv<'e> {
    /// Event names, in definition order.
    pub names: &'e [String],
    /// Facts of each event (same order), `None` when its condition had errors.
    pub infos: &'e [Option<EventInfo>],
}

/// The checked pattern and its top-level window.
pub(crate) struct CheckedPattern {
    pub pattern: Pattern,
    pub within: Option<Window>,
    /// Events the pattern names.
    pub used: BTreeSet<usize>,
    /// The pattern is one `absent(..)` alone.
    pub absence_only: bool,
}

pub(crate) fn compile_pattern(
    p: &PatAst,
    env: &PatEnv<'_>,
    r: &mut Reporter<'_>,
) -> Option<CheckedPattern> {
    let mut used = BTreeSet::new();
    let (body, within) = match p {
        PatAst::Within {
            inner,
            min,
            max,
            span,
        } => {
            let w = window(min, max, span, r);
            (&**inner, w)
        }
        other => (other, None),
    };
    let mut pc = PatChecker {
        env,
        used: &mut used,
        r,
    };
    let has_within = matches!(p, PatAst::Within { .. });
    let pattern = pc.pat(body, Pos::Top { has_within });
    let pattern = pattern?;
    // a pattern made only of absences with several steps
    if let PatAst::Seq(items, span) = body
        && items.len() > 1
        && items.iter().all(|i| matches!(i, PatAst::Absent { .. }))
    {
        r.error(
            span.clone(),
            "a sequence made only of absences is not supported",
            Some("use one `absent(or(a, b)) for D`, or start the sequence with an event".into()),
        );
        return None;
    }
    let absence_only = matches!(body, PatAst::Absent { .. });
    if matches!(p, PatAst::Within { .. }) && within.is_none() {
        return None;
    }
    Some(CheckedPattern {
        pattern,
        within,
        used,
        absence_only,
    })
}

fn window(
    min: &Option<(Duration, Span)>,
    max: &(Duration, Span),
    span: &Span,
    r: &mut Reporter<'_>,
) -> Option<Window> {
    let lo = min.as_ref().map_or(Duration::ZERO, |(d, _)| *d);
    if max.0 == Duration::ZERO {
        r.error(
            max.1.clone(),
            "`within` needs a duration above zero",
            Some("the longest a whole match may take: `within 5m`".into()),
        );
        return None;
    }
    if lo > max.0 {
        r.error(
            span.clone(),
            format!(
                "`within {}..{}`: the least distance is above the greatest",
                lo, max.0
            ),
            Some("write the smaller duration first".into()),
        );
        return None;
    }
    Some(Window {
        min: lo,
        max: max.0,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pos {
    /// The whole pattern.
    Top { has_within: bool },
    /// First or last step of a top-level seq.
    SeqEdge { has_within: bool },
    /// A middle step of a seq.
    SeqMiddle,
    /// Anywhere else.
    Nested,
}

struct PatChecker<'e, 'u, 'r, 'a> {
    env: &'e PatEnv<'e>,
    used: &'u mut BTreeSet<usize>,
    r: &'r mut Reporter<'a>,
}

impl PatChecker<'_, '_, '_, '_> {
    fn event(&mut self, name: &str, span: &Span) -> Option<usize> {
        match self.env.names.iter().position(|n| n == name) {
            Some(i) => {
                self.used.insert(i);
                Some(i)
            }
            None => {
                let help = match did_you_mean(name, self.env.names.iter().map(String::as_str)) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None if self.env.names.is_empty() => {
                        "define events with `events.<name> = '...'`".into()
                    }
                    None => format!("defined events: {}", self.env.names.join(", ")),
                };
                self.r
                    .error(span.clone(), format!("unknown event `{name}`"), Some(help));
                None
            }
        }
    }

    /// The body of a closure or absence: an event or an `or` of events.
    fn simple(&mut self, p: &PatAst, what: &str) -> Option<(Pattern, Vec<usize>)> {
        match p {
            PatAst::Event(n, s) => {
                let i = self.event(n, s)?;
                Some((Pattern::Event(i), vec![i]))
            }
            PatAst::Or(items, _) if items.iter().all(|i| matches!(i, PatAst::Event(..))) => {
                let mut out = Vec::new();
                let mut ids = Vec::new();
                let mut ok = true;
                for it in items {
                    if let PatAst::Event(n, s) = it {
                        match self.event(n, s) {
                            Some(i) => {
                                out.push(Pattern::Event(i));
                                ids.push(i);
                            }
                            None => ok = false,
                        }
                    }
                }
                as_event_set(&mut out);
                ok.then_some((Pattern::Or(out), ids))
            }
            other => {
                self.r.error(
                    other.span(),
                    format!("{what} takes an event name or `or(..)` of event names"),
                    Some("define one more event that combines the conditions, if needed".into()),
                );
                None
            }
        }
    }

    fn pat(&mut self, p: &PatAst, pos: Pos) -> Option<Pattern> {
        match p {
            PatAst::Event(n, s) => self.event(n, s).map(Pattern::Event),
            PatAst::Within { span, .. } => {
                self.r.error(
                    span.clone(),
                    "`within` applies to the whole pattern only",
                    Some("move it to the end: `seq(a, b) within 5m`".into()),
                );
                None
            }
            PatAst::Seq(items, _) => {
                let n = items.len();
                let top = match pos {
                    Pos::Top { has_within } => Some(has_within),
                    _ => None,
                };
                let parts: Vec<Option<Pattern>> = items
                    .iter()
                    .enumerate()
                    .map(|(i, it)| {
                        let ipos = match top {
                            Some(w) if i == 0 || i + 1 == n => Pos::SeqEdge { has_within: w },
                            _ if i == 0 || i + 1 == n => Pos::Nested,
                            _ => Pos::SeqMiddle,
                        };
                        let ipos = if top.is_none()
                            && matches!(it, PatAst::Absent { .. })
                            && ipos == Pos::Nested
                        {
                            // the edges of a nested seq: require `for`
                            Pos::SeqEdge { has_within: false }
                        } else {
                            ipos
                        };
                        self.pat(it, ipos)
                    })
                    .collect();
                Some(Pattern::Seq(parts.into_iter().collect::<Option<Vec<_>>>()?))
            }
            PatAst::Or(items, _) | PatAst::And(items, _) => {
                let parts: Vec<Option<Pattern>> = items
                    .iter()
                    .map(|it| {
                        if let PatAst::Absent { span, .. } = it {
                            self.r.error(
                                span.clone(),
                                "`absent(..)` cannot be inside `or(..)` or `and(..)`",
                                Some("use absent alone or as a step of `seq(..)`".into()),
                            );
                            None
                        } else {
                            self.pat(it, Pos::Nested)
                        }
                    })
                    .collect();
                let parts = parts.into_iter().collect::<Option<Vec<_>>>()?;
                // `or(a, or(b, c))` is `or(a, b, c)`, `and(and(a, b), c)` is `and(a, b, c)`:
                // one form, so the graph and the state keys see one pattern.
                Some(if matches!(p, PatAst::Or(..)) {
                    // An `or` of events (through nested ones) is one step any of them takes;
                    // an `or` holding more is a choice of alternatives, where a nested `or` of
                    // events is one alternative (one step), so it stays as written. Any other
                    // nested `or` gives its alternatives in place, as if written flat.
                    let all_events = parts.iter().all(only_events);
                    let mut ps = flatten(parts, |p| match p {
                        Pattern::Or(ps) if all_events || !ps.iter().all(only_events) => Ok(ps),
                        other => Err(other),
                    });
                    // An `or` of events is a set (one step any of them takes): in one order,
                    // so `or(a, b)` and `or(b, a)` are one meaning.
                    if all_events {
                        as_event_set(&mut ps);
                    }
                    Pattern::Or(ps)
                } else {
                    // (Its parts stay in the order written: when one event completes two of
                    // its orders at once, the first written wins, and what the match holds
                    // and opens may differ: `and(a{2,}, b)` is not `and(b, a{2,})`.)
                    Pattern::And(flatten(parts, |p| match p {
                        Pattern::And(ps) => Ok(ps),
                        other => Err(other),
                    }))
                })
            }
            PatAst::Repeat {
                inner,
                min,
                max,
                distinct,
                span,
            } => {
                let body = self.simple(inner, "a count such as `{5,}`");
                let mut ok = true;
                if *min == 0 {
                    ok = false;
                    self.r.error(
                        span.clone(),
                        "a count must be at least 1",
                        Some("to say that something did not happen, use `absent(..)`".into()),
                    );
                }
                if let Some(m) = max
                    && *m < *min
                {
                    ok = false;
                    self.r.error(
                        span.clone(),
                        format!("the greatest count ({m}) is below the least ({min})"),
                        Some(format!("write `{{{m},{min}}}`")),
                    );
                }
                let (inner, ids) = body?;
                let distinct = match distinct {
                    None => None,
                    Some((name, fspan)) => {
                        let mut key = None;
                        for i in &ids {
                            let Some(Some(info)) = self.env.infos.get(*i) else {
                                continue;
                            };
                            match info.provides(name) {
                                Some((k, _)) => {
                                    key = Some(k);
                                    // Counted only from the events that carry it: every one
                                    // must (DESIGN: a field every repeated event carries).
                                    if let Err(why) = info.always_provides(name) {
                                        ok = false;
                                        let event =
                                            self.env.names.get(*i).map_or("?", String::as_str);
                                        let (what, help) = why.explain(name, event);
                                        self.r.error(
                                            fspan.clone(),
                                            format!(
                                                "event `{event}` cannot always provide `{name}` to count distinct values of: {what}"
                                            ),
                                            Some(help),
                                        );
                                    }
                                }
                                None => {
                                    ok = false;
                                    let help = Some(info.missing_field_help(name));
                                    self.r.error(
                                        fspan.clone(),
                                        format!(
                                            "event `{}` has no field `{name}` to count distinct values of",
                                            self.env.names.get(*i).map_or("?", String::as_str)
                                        ),
                                        help,
                                    );
                                }
                            }
                        }
                        Some(key.unwrap_or_else(|| FieldKey::from_name(name)))
                    }
                };
                ok.then(|| Pattern::Repeat {
                    inner: Box::new(inner),
                    min: *min,
                    max: *max,
                    distinct,
                })
            }
            PatAst::Absent { inner, for_, span } => {
                let body = match &**inner {
                    // `absent(x{n,}) for D`: fewer than n in any D, as the whole pattern.
                    PatAst::Repeat {
                        inner: counted,
                        min,
                        max: None,
                        distinct: None,
                        span: cspan,
                    } if matches!(pos, Pos::Top { .. }) => {
                        let body = self.simple(counted, "a count such as `{5,}`");
                        if *min == 0 || *min > crate::rules::ir::MAX_ABSENT_COUNT {
                            self.r.error(
                                cspan.clone(),
                                format!(
                                    "`absent(..)` of a count needs a least count from 1 to {}",
                                    crate::rules::ir::MAX_ABSENT_COUNT
                                ),
                                Some("`absent(hb{3,}) for 5m`: fewer than 3 in any 5 minutes (each group keeps the times of that many events)".into()),
                            );
                            None
                        } else {
                            body.map(|(p, ids)| {
                                // (`absent(x{1,})` is `absent(x)`.)
                                let p = if *min == 1 {
                                    p
                                } else {
                                    Pattern::Repeat {
                                        inner: Box::new(p),
                                        min: *min,
                                        max: None,
                                        distinct: None,
                                    }
                                };
                                (p, ids)
                            })
                        }
                    }
                    PatAst::Repeat { span: cspan, .. } => {
                        self.r.error(
                            cspan.clone(),
                            "`absent(..)` of a count stands alone as the whole pattern, with a least count only (`{n,}`: no greatest count, no `distinct`)",
                            Some("`absent(hb{3,}) for 5m`: fewer than 3 `hb` in any 5 minutes".into()),
                        );
                        None
                    }
                    _ => self.simple(inner, "`absent(..)`"),
                };
                let mut ok = true;
                if let Some((d, ds)) = for_
                    && *d == Duration::ZERO
                {
                    ok = false;
                    self.r.error(
                        ds.clone(),
                        "`for` needs a duration above zero",
                        Some("how long the event must be missing: `absent(hb) for 1m`".into()),
                    );
                }
                if for_.is_none() {
                    let needs = match pos {
                        Pos::Top { has_within } | Pos::SeqEdge { has_within } => !has_within,
                        Pos::SeqMiddle => false,
                        Pos::Nested => true,
                    };
                    if needs {
                        ok = false;
                        self.r.error(
                            span.clone(),
                            "`absent(..)` here needs a time: how long must it be absent?",
                            Some(format!(
                                "write `{} for 5m`, or give the whole pattern a `within`",
                                self.r.text(span.clone())
                            )),
                        );
                    }
                }
                let (inner, _) = body?;
                ok.then(|| Pattern::Absent {
                    inner: Box::new(inner),
                    for_: for_.as_ref().map(|(d, _)| *d),
                })
            }
        }
    }
}

/// Where bytes `at` of regex `re` are in the file, through `offsets` (the file offset of each
/// byte of `re`, escapes in a basic string making them differ); at least one byte long.
fn regex_span(re: &str, offsets: &[usize], at: std::ops::Range<usize>) -> Option<Span> {
    let map = |i: usize| offsets.get(i.min(offsets.len().saturating_sub(1))).copied();
    let (a, b) = (map(at.start)?, map(at.end.min(re.len()))?);
    Some(a..b.max(a + 1))
}

/// The most a regex may count one repetition to (nested ones multiplied): a regex's matching
/// cost grows with its compiled size, and `[a-z]{50000}` took 9 s per 64 KiB message, one
/// rule and a few datagrams stalling every shard.
pub const MAX_REGEX_REPEAT: u32 = 1_000;

/// The first repetition of `re` counted past [`MAX_REGEX_REPEAT`] (nested counts multiplied),
/// and where it is in `re`; `None` when there is none (or `re` does not parse: compiling it
/// says why).
fn heavy_repetition(re: &str) -> Option<(u64, std::ops::Range<usize>)> {
    use regex_syntax::ast::{Ast, RepetitionKind, RepetitionRange};
    fn walk(ast: &Ast, outer: u64) -> Option<(u64, std::ops::Range<usize>)> {
        match ast {
            Ast::Repetition(r) => {
                let n = match &r.op.kind {
                    RepetitionKind::Range(RepetitionRange::Exactly(n))
                    | RepetitionKind::Range(RepetitionRange::AtLeast(n)) => u64::from(*n),
                    RepetitionKind::Range(RepetitionRange::Bounded(a, b)) => {
                        u64::from(*a).max(u64::from(*b))
                    }
                    _ => 1,
                };
                let total = outer.saturating_mul(n.max(1));
                if total > u64::from(MAX_REGEX_REPEAT) {
                    return Some((total, r.span.start.offset..r.span.end.offset));
                }
                walk(&r.ast, total)
            }
            Ast::Group(g) => walk(&g.ast, outer),
            Ast::Alternation(a) => a.asts.iter().find_map(|x| walk(x, outer)),
            Ast::Concat(c) => c.asts.iter().find_map(|x| walk(x, outer)),
            _ => None,
        }
    }
    let ast = regex_syntax::ast::parse::Parser::new().parse(re).ok()?;
    walk(&ast, 1)
}

/// Whether a regex holds what makes its compiled form large out of proportion to its text:
/// counted repetitions and classes (`\\w`, `\\d`, `\\s` and `\\p{..}` span all of Unicode), as
/// opposed to a long plain text such as a list of escaped domain names.
fn grows_when_compiled(re: &str) -> bool {
    let mut chars = re.chars();
    while let Some(c) = chars.next() {
        match c {
            '{' | '[' => return true,
            '\\' => {
                if matches!(
                    chars.next(),
                    Some('w' | 'W' | 'd' | 'D' | 's' | 'S' | 'p' | 'P' | 'b' | 'B')
                ) {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod grows_tests {
    use super::grows_when_compiled;

    /// Counts and classes make a regex large when compiled; a long text, escaped punctuation
    /// included (a list of domain names), does not (found by a review).
    #[test]
    fn what_grows_when_compiled() {
        for yes in [r"\w{900}", r"[a-z]+", r"\d", r"\p{L}", r"a{3}"] {
            assert!(grows_when_compiled(yes), "{yes}");
        }
        for no in [r"evil\.com|bad\.org", "aaaa", r"C:\\dir", r"a\+b"] {
            assert!(!grows_when_compiled(no), "{no}");
        }
    }
}
