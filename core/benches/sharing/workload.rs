//! Deterministic rule and event generators for the sharing benchmark (docs/benchmarks.md,
//! "Sharing across rules"). Everything is drawn from a seeded xorshift64* generator, so a
//! (parameters, seed) pair always gives the same rule text and the same event stream.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use cepheus_core::event::{Event, Field, Source, Value};
use cepheus_core::graph;
use cepheus_core::rules::compile_str;
use cepheus_core::rules::ir::RuleSet;
use cepheus_core::time::Timestamp;

/// xorshift64* (Vigna): tiny, fast, deterministic; good enough to draw a workload.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (any value; 0 is remapped).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n` below 2^32).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Fisher-Yates.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// The pattern templates of the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Template {
    /// `seq(a, b) within W`
    Seq,
    /// `or(a, b)` (with `trigger = { every = .. }` so alerts stay rare)
    Or,
    /// `and(a, b) within W`
    And,
    /// `a{3,} within W`
    Count,
    /// `seq(a{3,}, b) within W`
    SeqCount,
    /// `absent(a) for W`
    Absent,
    /// `seq(a, absent(b) for W)`
    SeqAbsent,
}

impl Template {
    /// The template's name in `CEPHEUS_BENCH_TEMPLATES`.
    pub fn name(self) -> &'static str {
        match self {
            Template::Seq => "seq",
            Template::Or => "or",
            Template::And => "and",
            Template::Count => "count",
            Template::SeqCount => "seq-count",
            Template::Absent => "absent",
            Template::SeqAbsent => "seq-absent",
        }
    }

    /// Whether the template reads a second event type `b`.
    pub fn two_events(self) -> bool {
        !matches!(self, Template::Count | Template::Absent)
    }
}

/// One operation of the pool: a template and one of its three windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Op {
    /// The template.
    pub t: Template,
    /// Window index, 0..3.
    pub w: u8,
}

/// Every (template, window) of the pool: 19 operations. Two different entries on the same
/// event types never have the same meaning.
pub fn catalog() -> Vec<Op> {
    use Template::*;
    let mut v = Vec::new();
    for t in [Seq, And, Count, SeqCount, Absent, SeqAbsent] {
        for w in 0..3 {
            v.push(Op { t, w });
        }
    }
    v.push(Op { t: Or, w: 0 });
    // `CEPHEUS_BENCH_TEMPLATES=seq,and,..`: only these templates (to see what each costs).
    if let Ok(only) = std::env::var("CEPHEUS_BENCH_TEMPLATES") {
        let names: Vec<&str> = only.split(',').map(str::trim).collect();
        v.retain(|op| names.contains(&op.t.name()));
        assert!(
            !v.is_empty(),
            "CEPHEUS_BENCH_TEMPLATES={only}: none of seq, or, and, count, seq-count, absent, seq-absent"
        );
    }
    v
}

/// A rule before rendering: an operation on predicate (event type) indexes `a` and `b`
/// (`b` unused by one-event templates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Spec {
    /// The operation.
    pub op: Op,
    /// First event type.
    pub a: u32,
    /// Second event type.
    pub b: u32,
}

/// Which predicates the event types are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// Event type k is `syslog and app == "e{k}"`; every event is of exactly one type.
    Apps,
    /// 50 predicates `syslog and F == vJ` over five fields F (app, procid, msgid, msg,
    /// facility) and ten values J each; events draw each field from 20 values, so an event
    /// satisfies 0 to 5 predicates (2.5 on average).
    Fifty,
}

/// Fields of [`Space::Fifty`], with the value prefixes (facility is an integer).
const FIFTY_FIELDS: [(Field, &str); 5] = [
    (Field::App, "a"),
    (Field::Procid, "p"),
    (Field::Msgid, "i"),
    (Field::Msg, "m"),
    (Field::Facility, ""),
];

/// Values an event draws each [`Space::Fifty`] field from (half of them are in predicates).
const FIFTY_VALUES: usize = 20;

/// Hosts (the group key of every rule): 64, or `CEPHEUS_BENCH_HOSTS` (to see how much of a
/// cell's cost is the size of its group state: each host's event rate stays the same).
pub fn hosts() -> usize {
    std::env::var("CEPHEUS_BENCH_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(64)
}

/// Time between two events.
pub const DT_MS: u64 = 1;

fn cond(space: Space, p: u32) -> String {
    match space {
        Space::Apps => format!("syslog and app == \"e{p}\""),
        Space::Fifty => {
            let (f, prefix) = FIFTY_FIELDS[(p / 10) as usize];
            let j = p % 10;
            if f == Field::Facility {
                format!("syslog and facility == {j}")
            } else {
                format!("syslog and {} == \"{prefix}{j}\"", f.name())
            }
        }
    }
}

/// A generated rule set and what it measures.
pub struct Workload {
    /// Rule text (TOML).
    pub text: String,
    /// The compiled rules.
    pub rules: RuleSet,
    /// The predicate space of the events.
    pub space: Space,
    /// Number of event types (Apps) or predicates (Fifty).
    pub preds: usize,
    /// Rules identical in meaning to at least one other rule (measured on the compiled set).
    pub redundant: usize,
    /// Rules sharing an event condition with a rule of another meaning (measured).
    pub similar: usize,
    /// Distinct meanings (`Rule::canonical`): the states a shared engine runs.
    pub meanings: usize,
}

fn window(op: Op, gap_ms: u64) -> u64 {
    let w = u64::from(op.w);
    let g = gap_ms.max(1);
    let v = match op.t {
        // Short windows: a pair completes for ~1 % of its events.
        Template::Seq | Template::And => g / [200, 100, 50][w as usize],
        // Three in a fifth of the gap: ~2 % of events at most.
        Template::Count | Template::SeqCount => g / [20, 10, 5][w as usize],
        // Long absences: a gap that long has probability e^-5 .. e^-9.
        Template::Absent | Template::SeqAbsent => g * [5, 7, 9][w as usize],
        // The throttle period.
        Template::Or => g * 20,
    };
    v.max(1)
}

fn render(out: &mut String, i: usize, s: Spec, space: Space, gap_ms: u64) {
    const SEV: [&str; 5] = ["critical", "high", "medium", "low", "info"];
    let w = window(s.op, gap_ms);
    let pattern = match s.op.t {
        Template::Seq => format!("seq(a, b) within {w}ms"),
        Template::Or => "or(a, b)".to_string(),
        Template::And => format!("and(a, b) within {w}ms"),
        Template::Count => format!("a{{3,}} within {w}ms"),
        Template::SeqCount => format!("seq(a{{3,}}, b) within {w}ms"),
        Template::Absent => format!("absent(a) for {w}ms"),
        Template::SeqAbsent => format!("seq(a, absent(b) for {w}ms)"),
    };
    let _ = writeln!(out, "[[rule]]");
    let _ = writeln!(out, "name = \"r{i:05}\"");
    let _ = writeln!(out, "severity = \"{}\"", SEV[i % SEV.len()]);
    let _ = writeln!(out, "message = \"rule {i} on {{host}}\"");
    let _ = writeln!(out, "group_by = [\"host\"]");
    let _ = writeln!(out, "events.a = '{}'", cond(space, s.a));
    if s.op.t.two_events() {
        let _ = writeln!(out, "events.b = '{}'", cond(space, s.b));
    }
    let _ = writeln!(out, "pattern = \"{pattern}\"");
    if s.op.t == Template::Or {
        let _ = writeln!(out, "trigger = {{ every = \"{w}ms\" }}");
    }
    out.push('\n');
}

fn compile(specs: &[Spec], space: Space, preds: usize, gap_ms: u64) -> Workload {
    let mut text = String::new();
    for (i, s) in specs.iter().enumerate() {
        render(&mut text, i, *s, space, gap_ms);
    }
    let c = compile_str("sharing-bench.toml", &text);
    let rules = match c.rules {
        Some(r) => r,
        None => panic!("generated rules do not compile: {:?}", c.diagnostics),
    };
    let (redundant, similar, meanings) = measure(&rules);
    Workload {
        text,
        rules,
        space,
        preds,
        redundant,
        similar,
        meanings,
    }
}

/// (redundant, similar, distinct meanings) of a compiled rule set, by the definitions of
/// docs/benchmarks.md: a rule is redundant when another rule has the same
/// `Rule::canonical()`, similar when the shared graph ([`graph::build`]) combines its
/// operation with another into a virtual node (the paper's OA, SS or OS).
pub fn measure(rules: &RuleSet) -> (usize, usize, usize) {
    let canon: Vec<String> = rules.rules.iter().map(|r| r.canonical()).collect();
    let mut per_meaning: HashMap<&str, usize> = HashMap::new();
    for c in &canon {
        *per_meaning.entry(c).or_default() += 1;
    }
    let redundant = canon.iter().filter(|c| per_meaning[c.as_str()] > 1).count();
    let g = graph::build(rules, true);
    let similar: HashSet<usize> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, graph::NodeKind::Virtual { .. }))
        .flat_map(|n| n.rules.iter().copied())
        .collect();
    (redundant, similar.len(), per_meaning.len())
}

/// Splits `n` rules into classes of equal meaning: the `red` redundant ones in pairs (one
/// triple when `red` is odd), the others alone. `red` must not be 1.
fn classes(n: usize, red: usize) -> Vec<usize> {
    assert!(red != 1 && red <= n);
    let mut v = Vec::new();
    if red > 0 {
        v.extend(std::iter::repeat_n(2, red / 2));
        if red % 2 == 1 {
            *v.last_mut().expect("red >= 3") += 1;
        }
    }
    v.extend(std::iter::repeat_n(1, n - red));
    v
}

/// How many of the `s` similar rules are also redundant, given `rd` redundant rules among `n`:
/// the integer nearest to `s * rd / n` (as if independent) that the construction can realise.
fn overlap(n: usize, s: usize, rd: usize) -> Option<usize> {
    let ideal = (s * rd + n / 2) / n;
    let feasible = |x: usize| {
        if x > s || x > rd || rd - x > n - s || x == 1 || rd - x == 1 {
            return false;
        }
        // Similar rules form families of >= 2 meanings.
        let meanings = x / 2 + (s - x);
        s == 0 || meanings >= 2
    };
    (0..=n)
        .flat_map(|d| [ideal.checked_sub(d), Some(ideal + d)])
        .flatten()
        .find(|&x| feasible(x))
}

/// `n` rules over [`Space::Apps`]: exactly `round(n * similar_pct / 100)` similar rules and
/// `round(n * redundant_pct / 100)` redundant ones (panics when that cannot be realised, e.g.
/// a single similar rule). See docs/benchmarks.md for the construction.
pub fn mixed(n: usize, similar_pct: u32, redundant_pct: u32, seed: u64) -> Workload {
    let s = (n * similar_pct as usize + 50) / 100;
    let rd = (n * redundant_pct as usize + 50) / 100;
    let x = overlap(n, s, rd)
        .unwrap_or_else(|| panic!("{n} rules: {s} similar and {rd} redundant is not realisable"));
    let mut rng = Rng::new(seed);
    let cat = catalog();
    // (copies, spec) per meaning.
    let mut meanings: Vec<(usize, Spec)> = Vec::new();
    let mut next_type = 0u32;
    let mut fresh = || {
        next_type += 1;
        next_type - 1
    };
    // Similar part: classes grouped into families of two meanings (one of three when odd),
    // each family one of the paper's similar operations (Table 1) on fresh event types a, b,
    // c: OA `or(a, b)` and `and(a, b)`; SS `seq(a, b)` and `seq(a, c)`; OS `or(a, c)` and
    // `seq(a, b)`. A family of three adds `seq(a, c)` to OA, or `seq(a, d)` to SS. The `seq`
    // and `and` of a family share one window (a virtual node combines one scope only).
    let mut sim = classes(s, x);
    rng.shuffle(&mut sim);
    let mut fams: Vec<Vec<usize>> = sim.chunks(2).map(<[usize]>::to_vec).collect();
    if fams.last().is_some_and(|f| f.len() == 1) {
        let last = fams.pop().expect("non-empty");
        if let Some(prev) = fams.last_mut() {
            prev.extend(last);
        }
    }
    for fam in fams {
        let (a, b, c) = (fresh(), fresh(), fresh());
        let w = rng.below(3) as u8;
        let op = |t| Op { t, w };
        let or = Op {
            t: Template::Or,
            w: 0,
        };
        let spec = |op, b| Spec { op, a, b };
        let mut specs = match (fam.len(), rng.below(3)) {
            (2, 0) => vec![spec(or, b), spec(op(Template::And), b)],
            (2, 1) => vec![spec(op(Template::Seq), b), spec(op(Template::Seq), c)],
            (2, _) => vec![spec(or, c), spec(op(Template::Seq), b)],
            (_, 0 | 1) => vec![
                spec(or, b),
                spec(op(Template::And), b),
                spec(op(Template::Seq), c),
            ],
            (_, _) => {
                let d = fresh();
                vec![
                    spec(op(Template::Seq), b),
                    spec(op(Template::Seq), c),
                    spec(op(Template::Seq), d),
                ]
            }
        };
        rng.shuffle(&mut specs);
        meanings.extend(fam.into_iter().zip(specs));
    }
    // The rest: each meaning alone on fresh event types.
    for copies in classes(n - s, rd - x) {
        let op = cat[rng.below(cat.len())];
        let a = fresh();
        let b = if op.t.two_events() { fresh() } else { a };
        meanings.push((copies, Spec { op, a, b }));
    }
    let preds = next_type as usize;
    let mut specs: Vec<Spec> = meanings
        .into_iter()
        .flat_map(|(copies, spec)| std::iter::repeat_n(spec, copies))
        .collect();
    rng.shuffle(&mut specs);
    let gap_ms = preds as u64 * hosts() as u64 * DT_MS;
    let w = compile(&specs, Space::Apps, preds, gap_ms);
    assert_eq!(
        (w.similar, w.redundant),
        (s, rd),
        "generator: measured (similar, redundant) differ from the request"
    );
    w
}

/// `n` rules drawn independently over the same 50 predicates ([`Space::Fifty`]): a uniform
/// operation on two distinct uniform predicates; with `pool`, each rule is instead a uniform
/// pick among `pool` such draws (so at most `pool` distinct meanings, however many rules).
pub fn fifty(n: usize, pool: Option<usize>, seed: u64) -> Workload {
    let mut rng = Rng::new(seed);
    let cat = catalog();
    let draw = |rng: &mut Rng| {
        let op = cat[rng.below(cat.len())];
        let a = rng.below(50) as u32;
        let b = (a + 1 + rng.below(49) as u32) % 50;
        Spec { op, a, b }
    };
    let specs: Vec<Spec> = match pool {
        None => (0..n).map(|_| draw(&mut rng)).collect(),
        Some(p) => {
            let pool: Vec<Spec> = (0..p).map(|_| draw(&mut rng)).collect();
            (0..n).map(|_| pool[rng.below(p)]).collect()
        }
    };
    // Each predicate holds for 1/20 of the events of a host.
    let gap_ms = FIFTY_VALUES as u64 * hosts() as u64 * DT_MS;
    compile(&specs, Space::Fifty, 50, gap_ms)
}

/// Syslog-shaped events in increasing time, `DT_MS` apart, from [`hosts()`] hosts.
pub struct Events {
    rng: Rng,
    space: Space,
    preds: usize,
    i: i64,
    hosts: Vec<Value>,
    /// Apps: one value per event type; Fifty: 20 values per field, field-major.
    values: Vec<Value>,
    msg: Value,
}

impl Events {
    /// The stream for a workload.
    pub fn new(w: &Workload, seed: u64) -> Events {
        let hosts = (0..hosts())
            .map(|h| Value::str(&format!("h{h:03}")))
            .collect();
        let values = match w.space {
            Space::Apps => (0..w.preds).map(|k| Value::str(&format!("e{k}"))).collect(),
            Space::Fifty => FIFTY_FIELDS
                .iter()
                .flat_map(|(f, prefix)| {
                    (0..FIFTY_VALUES).map(move |j| {
                        if *f == Field::Facility {
                            Value::Int(j as i64)
                        } else {
                            Value::str(&format!("{prefix}{j}"))
                        }
                    })
                })
                .collect(),
        };
        Events {
            rng: Rng::new(seed ^ 0x5EED_0FE7_E7E7),
            space: w.space,
            preds: w.preds,
            i: 0,
            hosts,
            values,
            msg: Value::str("bench"),
        }
    }

    /// Appends the next `n` events to `out`.
    pub fn fill(&mut self, n: usize, out: &mut Vec<Event>) {
        const T0: i64 = 1_780_000_000 * 1_000_000_000;
        for _ in 0..n {
            let t = Timestamp(T0 + self.i * DT_MS as i64 * 1_000_000);
            self.i += 1;
            let host = self.hosts[self.rng.below(self.hosts.len())].clone();
            let mut ev = Event::new(Source::Syslog, t, t).with(Field::Host, host);
            match self.space {
                Space::Apps => {
                    let k = self.rng.below(self.preds);
                    ev = ev
                        .with(Field::App, self.values[k].clone())
                        .with(Field::Msg, self.msg.clone());
                }
                Space::Fifty => {
                    for (fi, (f, _)) in FIFTY_FIELDS.iter().enumerate() {
                        let j = self.rng.below(FIFTY_VALUES);
                        ev.set(*f, self.values[fi * FIFTY_VALUES + j].clone());
                    }
                }
            }
            out.push(ev);
        }
    }
}
