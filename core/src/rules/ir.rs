//! The compiled form of rules: what the checker produces and the engine consumes.
//!
//! Everything here is resolved and typed: field names are [`FieldKey`]s, regexes are compiled,
//! durations are numbers, event names are indexes. A value of these types is valid by
//! construction (the checker rejected everything else), so the engine never re-validates.

use std::fmt::{self, Write as _};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use regex_automata::PatternID;
use regex_automata::meta;
use regex_automata::util::captures::Captures as Groups;
use sha2::{Digest, Sha256};

use crate::event::{Event, Field, FieldKey, Source, Value};
use crate::time::{Duration, Timestamp};

/// Captured fields of one condition evaluation (regex named groups), looked up before the event.
pub type Captures = Vec<(FieldKey, Value)>;

/// A compiled condition over one event.
#[derive(Clone, Debug)]
pub enum Cond {
    /// Always true (an empty condition).
    True,
    /// The event comes from this source (`syslog`, `flow`).
    Source(Source),
    /// All of these hold (evaluated left to right, so captures flow rightwards).
    And(Vec<Cond>),
    /// Any of these holds.
    Or(Vec<Cond>),
    /// This does not hold.
    Not(Box<Cond>),
    /// `lhs <op> rhs` for comparable values of the same type (ints and floats mix).
    Cmp(CmpOp, Expr, Expr),
    /// `lhs contains|starts_with|ends_with rhs` on strings.
    Str(StrOp, Expr, Expr),
    /// `lhs =~ "re"` (or `!~` when `negate`); named groups are captured as fields.
    Regex(Box<RegexCond>),
    /// `lhs in [v, ...]`.
    In(Expr, ValueList),
    /// `lhs in 10.0.0.0/8` or `lhs in [10.0.0.0/8, ::1/128]`.
    InCidr(Expr, Vec<IpNet>),
    /// `lhs in file("bad.txt")`: the values or networks a list file holds, read when the rules
    /// are compiled (and again at each reload).
    InFile(Expr, Arc<ListFile>),
    /// `exists(field)`.
    Exists(FieldKey),
}

/// The literals of an `in [...]` list; long lists are hashed so membership stays O(1)
/// (a rule may list thousands of hosts).
#[derive(Clone, Debug)]
pub struct ValueList {
    values: Vec<Value>,
    set: Option<std::collections::HashSet<Value>>,
}

impl ValueList {
    /// Lists shorter than this are scanned.
    const HASH_FROM: usize = 8;

    /// A list of literals.
    pub fn new(values: Vec<Value>) -> Self {
        // Ints and floats compare numerically, which hashing cannot do: hash only lists
        // without floats, and look up only values that are not floats.
        let hashable =
            values.len() >= Self::HASH_FROM && !values.iter().any(|v| matches!(v, Value::Float(_)));
        let set = hashable.then(|| values.iter().cloned().collect());
        ValueList { values, set }
    }

    /// The literals, in the order written.
    pub fn values(&self) -> &[Value] {
        &self.values
    }

    /// Whether `v` equals one of the literals (ints and floats compare numerically).
    pub fn contains(&self, v: &Value) -> bool {
        match &self.set {
            Some(set) if !matches!(v, Value::Float(_)) => set.contains(v),
            _ => self
                .values
                .iter()
                .any(|x| compare(v, x) == Some(std::cmp::Ordering::Equal)),
        }
    }
}

/// A list file's items, as a condition `lhs in file("...")` tests them: a file of thousands
/// of addresses (a threat feed, an allowlist) costs one hash lookup or one binary search per
/// test.
pub struct ListFile {
    /// The file, as the rule names it joined to the rule file's folder: the condition's
    /// canonical text, so a reload that changes only the list's contents keeps the state of
    /// the rules that read it.
    pub path: String,
    /// What it holds.
    pub items: ListItems,
}

/// The items of a [`ListFile`].
#[derive(Debug)]
pub enum ListItems {
    /// Values of one type (texts or whole numbers), compared as `==` compares them.
    Values(std::collections::HashSet<Value>),
    /// IP addresses and networks.
    Nets(NetRanges),
}

impl fmt::Debug for ListFile {
    /// The path and the number of items, not the items: a condition in a log or a panic
    /// message would otherwise print a feed of a million addresses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ListFile({:?}, {} items)", self.path, self.len())
    }
}

impl ListFile {
    /// How many distinct items it holds (networks as written, before they are merged).
    pub fn len(&self) -> usize {
        match &self.items {
            ListItems::Values(v) => v.len(),
            ListItems::Nets(n) => n.distinct,
        }
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `v` is one of its values, or an address in one of its networks.
    pub fn contains(&self, v: &Value) -> bool {
        match (&self.items, v) {
            (ListItems::Values(set), v) => set.contains(v),
            (ListItems::Nets(nets), Value::Ip(ip)) => nets.contains(*ip),
            (ListItems::Nets(_), _) => false,
        }
    }
}

/// IP networks as sorted, disjoint ranges of 128-bit numbers, an IPv4 address numbered as its
/// IPv4-mapped IPv6 form: membership is a binary search, and means what
/// [`Cond::InCidr`] means (an IPv4 address is in an IPv6 network that holds its mapped form).
#[derive(Debug, Default)]
pub struct NetRanges {
    ranges: Vec<(u128, u128)>,
    /// How many distinct networks they were made of.
    distinct: usize,
}

impl NetRanges {
    /// The ranges of `nets`, merged.
    pub fn new(nets: impl IntoIterator<Item = IpNet>) -> Self {
        let mut ranges: Vec<(u128, u128)> = nets
            .into_iter()
            .map(|n| {
                let n = canonical_net(n).trunc();
                (ip_number(n.network()), ip_number(n.broadcast()))
            })
            .collect();
        ranges.sort_unstable();
        ranges.dedup();
        let distinct = ranges.len();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        merged.shrink_to_fit();
        NetRanges {
            ranges: merged,
            distinct,
        }
    }

    /// Whether `ip` is in one of the networks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let x = ip_number(canonical_ip(ip));
        let i = self.ranges.partition_point(|&(lo, _)| lo <= x);
        i > 0 && self.ranges[i - 1].1 >= x
    }
}

/// An address as a number in IPv6's space, an IPv4 one as its mapped form (`::ffff:a.b.c.d`).
fn ip_number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().to_bits(),
        IpAddr::V6(v6) => v6.to_bits(),
    }
}

/// A compiled regex (linear time, `regex`'s syntax and engine) with its text.
///
/// Built as `regex::Regex` builds one (10 MB for the compiled program, 2 MB for each lazy
/// DFA cache), except that the one-pass DFA, which finds the groups of a match fastest, is
/// kept only up to [`ONEPASS_MAX`]: with Unicode classes and groups it is most of a regex's
/// memory (about 0.7 MB). Without it a capturing match costs about 0.1 µs more.
#[derive(Clone, Debug)]
pub struct Re {
    re: meta::Regex,
    text: Box<str>,
}

/// The largest one-pass DFA a condition's regex keeps (see [`Re`]).
pub const ONEPASS_MAX: usize = 64 * 1024;

/// Why a regex could not be built.
pub type ReError = Box<meta::BuildError>;

/// The most a regex's compiled program (its NFA) may take, as `regex::Regex` allows.
pub const REGEX_NFA_MAX: usize = 10 * (1 << 20);

impl Re {
    /// Compiles `text`.
    pub fn new(text: &str) -> Result<Re, ReError> {
        Re::with_limit(text, REGEX_NFA_MAX)
    }

    /// Compiles `text` with its compiled program limited to `nfa_limit` bytes (what a rule
    /// set's budget for regexes has left, when under [`REGEX_NFA_MAX`]).
    pub fn with_limit(text: &str, nfa_limit: usize) -> Result<Re, ReError> {
        let cfg = meta::Config::new()
            .nfa_size_limit(Some(nfa_limit))
            .hybrid_cache_capacity(2 * (1 << 20))
            .onepass_size_limit(Some(ONEPASS_MAX));
        let re = meta::Regex::builder()
            .configure(cfg)
            .build(text)
            .map_err(Box::new)?;
        Ok(Re {
            re,
            text: text.into(),
        })
    }

    /// The regex as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it matches somewhere in `hay`.
    pub fn is_match(&self, hay: &str) -> bool {
        self.re.is_match(hay)
    }

    /// The groups of its first match in `hay` (`None`: no match): group `i`'s text, if it took
    /// part.
    pub fn captures<'h>(&self, hay: &'h str) -> Option<Vec<Option<&'h str>>> {
        let mut caps: Groups = self.re.create_captures();
        self.re.captures(hay, &mut caps);
        if !caps.is_match() {
            return None;
        }
        Some(
            (0..caps.group_len())
                .map(|i| caps.get_group(i).and_then(|sp| hay.get(sp.range())))
                .collect(),
        )
    }

    /// The names of its groups, by index (`None` for group 0 and unnamed groups).
    pub fn capture_names(&self) -> impl Iterator<Item = Option<&str>> {
        self.re.group_info().pattern_names(PatternID::ZERO)
    }

    /// Bytes its compiled form takes (not counting the lazy caches its searches grow).
    pub fn memory_usage(&self) -> usize {
        self.re.memory_usage()
    }
}

/// The regex part of a [`Cond::Regex`].
#[derive(Clone, Debug)]
pub struct RegexCond {
    /// The string the regex runs on.
    pub lhs: Expr,
    /// Compiled (linear-time) regex.
    pub re: Re,
    /// `!~`: true when the field is there and the regex does not match it (then nothing is
    /// captured).
    pub negate: bool,
    /// Named groups: (group index, field it becomes).
    pub captures: Vec<(usize, FieldKey)>,
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// The operator that says the same with its operands swapped (`a < b` is `b > a`).
    pub fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            same => same,
        }
    }
}

/// A string test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StrOp {
    /// `contains`
    Contains,
    /// `starts_with`
    StartsWith,
    /// `ends_with`
    EndsWith,
}

/// An arithmetic operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

/// A value-producing expression inside a condition.
#[derive(Clone, Debug)]
pub enum Expr {
    /// A literal.
    Lit(Value),
    /// A field of the event (or a capture made earlier in the same condition).
    Field(FieldKey),
    /// Arithmetic.
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    /// Unary minus.
    Neg(Box<Expr>),
    /// A part of a time's wall clock in a zone (`hour(time, "Europe/Paris")`), as an integer.
    TimePart(TimePart, Box<Expr>, Option<chrono_tz::Tz>),
}

/// What a time-of-day function reads from a time (`hour(time)`): "outside business hours",
/// "at the weekend".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimePart {
    /// `hour`: 0 to 23.
    Hour,
    /// `minute`: 0 to 59.
    Minute,
    /// `weekday`: 1 (Monday) to 7 (Sunday), as ISO 8601.
    Weekday,
    /// `day`: the day of the month, 1 to 31.
    Day,
    /// `month`: 1 to 12.
    Month,
}

impl TimePart {
    /// Every function, in the order docs list them.
    pub const ALL: [TimePart; 5] = [
        TimePart::Hour,
        TimePart::Minute,
        TimePart::Weekday,
        TimePart::Day,
        TimePart::Month,
    ];

    /// The function's name in rules.
    pub const fn name(self) -> &'static str {
        match self {
            TimePart::Hour => "hour",
            TimePart::Minute => "minute",
            TimePart::Weekday => "weekday",
            TimePart::Day => "day",
            TimePart::Month => "month",
        }
    }

    /// The part of `t` read in `zone` (UTC without one).
    pub fn of(self, t: crate::time::Timestamp, zone: Option<chrono_tz::Tz>) -> i64 {
        let utc = chrono::DateTime::from_timestamp_nanos(t.as_nanos());
        match zone {
            Some(z) => self.read(&utc.with_timezone(&z)),
            None => self.read(&utc),
        }
    }

    fn read(self, d: &(impl chrono::Datelike + chrono::Timelike)) -> i64 {
        i64::from(match self {
            TimePart::Hour => d.hour(),
            TimePart::Minute => d.minute(),
            TimePart::Weekday => d.weekday().number_from_monday(),
            TimePart::Day => d.day(),
            TimePart::Month => d.month(),
        })
    }
}

/// Looks a field up: captures first, then the event; `time` is the event time.
pub fn lookup<'a>(ev: &'a Event, caps: &'a Captures, key: &FieldKey) -> Option<LookedUp<'a>> {
    if let Some((_, v)) = caps.iter().rev().find(|(k, _)| k == key) {
        return Some(LookedUp::Ref(v));
    }
    if *key == FieldKey::Known(Field::Time) {
        return Some(LookedUp::Owned(Value::Time(ev.time)));
    }
    ev.get_key(key).map(LookedUp::Ref)
}

/// The longest text a group key's value may be, in bytes. Host names, addresses and user
/// names are far shorter; a longer value (a forged 60 KB host name, a capture of a whole
/// line) would make every group of a flood of them cost its size, so such an event forms no
/// group (counted as `keyless`).
pub const MAX_KEY_TEXT: usize = 1024;

/// A group field's value for event `ev`: looked up as [`lookup`] does (a network, for one
/// read so: [`GroupField::net`]), `None` when missing, not an address where a network is
/// read, or a text longer than [`MAX_KEY_TEXT`].
pub fn key_value(ev: &Event, caps: &Captures, field: &GroupField) -> Option<Value> {
    let v = lookup(ev, caps, &field.key)?;
    if let Some((v4, v6)) = field.net {
        return network(v.get(), v4, v6);
    }
    let v = v.get().clone();
    match &v {
        Value::Str(s) if s.len() > MAX_KEY_TEXT => None,
        _ => Some(v),
    }
}

/// A looked-up value: borrowed from the event, or made (`time`).
#[derive(Debug)]
pub enum LookedUp<'a> {
    /// Borrowed.
    Ref(&'a Value),
    /// Made on the fly.
    Owned(Value),
}

impl LookedUp<'_> {
    /// The value.
    pub fn get(&self) -> &Value {
        match self {
            LookedUp::Ref(v) => v,
            LookedUp::Owned(v) => v,
        }
    }
}

impl Expr {
    /// Evaluates to a value; `None` when a field is missing or arithmetic does not apply.
    pub fn eval<'a>(&'a self, ev: &'a Event, caps: &'a Captures) -> Option<LookedUp<'a>> {
        match self {
            Expr::Lit(v) => Some(LookedUp::Ref(v)),
            Expr::Field(k) => lookup(ev, caps, k),
            Expr::Neg(e) => {
                let v = e.eval(ev, caps)?;
                Some(LookedUp::Owned(match v.get() {
                    Value::Int(i) => Value::Int(i.checked_neg()?),
                    Value::Float(x) => Value::Float(-x),
                    _ => return None,
                }))
            }
            Expr::Arith(op, a, b) => {
                let a = a.eval(ev, caps)?;
                let b = b.eval(ev, caps)?;
                arith(*op, a.get(), b.get()).map(LookedUp::Owned)
            }
            Expr::TimePart(part, e, zone) => match e.eval(ev, caps)?.get() {
                Value::Time(t) => Some(LookedUp::Owned(Value::Int(part.of(*t, *zone)))),
                _ => None,
            },
        }
    }
}

fn arith(op: ArithOp, a: &Value, b: &Value) -> Option<Value> {
    use ArithOp::*;
    Some(match (a, b) {
        (Value::Int(x), Value::Int(y)) => Value::Int(match op {
            Add => x.checked_add(*y)?,
            Sub => x.checked_sub(*y)?,
            Mul => x.checked_mul(*y)?,
            Div => x.checked_div(*y)?,
            Rem => x.checked_rem(*y)?,
        }),
        (Value::Int(_), Value::Float(_))
        | (Value::Float(_), Value::Int(_))
        | (Value::Float(_), Value::Float(_)) => {
            let (x, y) = (as_f64(a)?, as_f64(b)?);
            Value::Float(match op {
                Add => x + y,
                Sub => x - y,
                Mul => x * y,
                Div => x / y,
                Rem => x % y,
            })
        }
        (Value::Time(t), Value::Duration(d)) => match op {
            Add => Value::Time(t.add(*d)),
            Sub => Value::Time(t.sub(*d)),
            _ => return None,
        },
        (Value::Time(t), Value::Time(u)) if op == Sub => Value::Duration(t.since(*u)),
        (Value::Duration(x), Value::Duration(y)) => match op {
            Add => Value::Duration(Duration(x.0.checked_add(y.0)?)),
            Sub => Value::Duration(Duration(x.0.checked_sub(y.0)?.max(0))),
            _ => return None,
        },
        (Value::Duration(x), Value::Int(n)) => match op {
            Mul => Value::Duration(Duration(x.0.checked_mul(*n)?.max(0))),
            Div => Value::Duration(Duration(x.0.checked_div(*n)?.max(0))),
            _ => return None,
        },
        _ => return None,
    })
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Float(x) => Some(*x),
        _ => None,
    }
}

fn compare(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Int(_), Value::Float(_)) | (Value::Float(_), Value::Int(_)) => {
            as_f64(a)?.partial_cmp(&as_f64(b)?)
        }
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y),
        // An IPv6 address is neither above nor below an IPv4 one (`src > 10.0.0.1` is not
        // true of every IPv6 source); mapped ones are IPv4 already (`Value::ip`).
        (Value::Ip(x), Value::Ip(y)) if x.is_ipv4() != y.is_ipv4() => None,
        _ if a.ty() == b.ty() => Some(a.cmp(b)),
        _ => None,
    }
}

impl Cond {
    /// Evaluates the condition on `ev`; named regex groups are appended to `caps`.
    ///
    /// A missing field makes the test that reads it false (`not` of it true), as in SQL's
    /// "unknown is not a match" for filters.
    pub fn eval(&self, ev: &Event, caps: &mut Captures) -> bool {
        match self {
            Cond::True => true,
            Cond::Source(s) => ev.source == *s,
            Cond::And(cs) => cs.iter().all(|c| c.eval(ev, caps)),
            Cond::Or(cs) => {
                for c in cs {
                    let mark = caps.len();
                    if c.eval(ev, caps) {
                        return true;
                    }
                    caps.truncate(mark);
                }
                false
            }
            Cond::Not(c) => {
                let mark = caps.len();
                let r = !c.eval(ev, caps);
                caps.truncate(mark);
                r
            }
            // `field == "literal"`, the most common test: no general comparison when the
            // field holds a value of the literal's type (the same answer as below).
            Cond::Cmp(CmpOp::Eq, Expr::Field(k), Expr::Lit(lit))
                if !matches!(lit, Value::Float(_)) && *k != FieldKey::Known(Field::Time) =>
            {
                let found = match caps.iter().rev().find(|(c, _)| c == k) {
                    Some((_, v)) => Some(v),
                    None => ev.get_key(k),
                };
                match found {
                    None => false,
                    Some(v) if v.ty() == lit.ty() => v == lit,
                    Some(v) => compare(v, lit) == Some(std::cmp::Ordering::Equal),
                }
            }
            Cond::Cmp(op, a, b) => {
                let (Some(a), Some(b)) = (a.eval(ev, caps), b.eval(ev, caps)) else {
                    return false;
                };
                let (x, y) = (a.get(), b.get());
                if matches!(op, CmpOp::Eq | CmpOp::Ne)
                    && x.ty() == y.ty()
                    && !matches!(x, Value::Float(_))
                {
                    // Equality of same-typed values without ordering them (the common test).
                    return (x == y) == (*op == CmpOp::Eq);
                }
                let Some(ord) = compare(a.get(), b.get()) else {
                    return false;
                };
                use std::cmp::Ordering::*;
                match op {
                    CmpOp::Eq => ord == Equal,
                    CmpOp::Ne => ord != Equal,
                    CmpOp::Lt => ord == Less,
                    CmpOp::Le => ord != Greater,
                    CmpOp::Gt => ord == Greater,
                    CmpOp::Ge => ord != Less,
                }
            }
            Cond::Str(op, a, b) => {
                let (Some(a), Some(b)) = (a.eval(ev, caps), b.eval(ev, caps)) else {
                    return false;
                };
                let (Some(a), Some(b)) = (a.get().as_str(), b.get().as_str()) else {
                    return false;
                };
                match op {
                    StrOp::Contains => a.contains(b),
                    StrOp::StartsWith => a.starts_with(b),
                    StrOp::EndsWith => a.ends_with(b),
                }
            }
            Cond::Regex(r) => {
                let found = {
                    // A field the event lacks: false either way, as for every other test
                    // (`not (app =~ "x")` is the way to say "no such app").
                    let Some(v) = r.lhs.eval(ev, caps) else {
                        return false;
                    };
                    let text = match v.get() {
                        Value::Str(s) => s.clone(),
                        other => smol_str::SmolStr::new(other.to_string()),
                    };
                    if r.negate {
                        return !r.re.is_match(&text);
                    }
                    if r.captures.is_empty() {
                        return r.re.is_match(&text);
                    }
                    let Some(m) = r.re.captures(&text) else {
                        return false;
                    };
                    let mut found = Vec::with_capacity(r.captures.len());
                    for (idx, key) in &r.captures {
                        if let Some(Some(g)) = m.get(*idx) {
                            match capture_value(key, g) {
                                Some(v) => found.push((key.clone(), v)),
                                None => return false,
                            }
                        }
                    }
                    found
                };
                caps.extend(found);
                true
            }
            Cond::In(e, list) => match e.eval(ev, caps) {
                Some(v) => list.contains(v.get()),
                None => false,
            },
            Cond::InCidr(e, nets) => match e.eval(ev, caps) {
                Some(v) => match v.get() {
                    Value::Ip(ip) => {
                        let ip = canonical_ip(*ip);
                        nets.iter().any(|n| match (n, ip) {
                            // An IPv4 address is its mapped form too: in an IPv6 network wider
                            // than `::ffff:0:0/96` that holds it (`::/0`, as Zeek reads it).
                            (IpNet::V6(n6), IpAddr::V4(v4)) => n6.contains(&v4.to_ipv6_mapped()),
                            _ => n.contains(&ip),
                        })
                    }
                    _ => false,
                },
                None => false,
            },
            Cond::InFile(e, list) => match e.eval(ev, caps) {
                Some(v) => list.contains(v.get()),
                None => false,
            },
            Cond::Exists(k) => lookup(ev, caps, k).is_some(),
        }
    }

    /// A normalised text of the condition: equal texts mean equal conditions
    /// (used to share predicates and to keep state across reloads).
    pub fn canonical(&self) -> String {
        let mut s = String::new();
        self.write_canonical(&mut s, true);
        s
    }

    /// The identity of the condition as a predicate: [`Cond::canonical`] of an equivalent
    /// condition normalised further, so conditions written differently that hold for exactly
    /// the same events are evaluated once (`syslog and app == "x"` and `app == "x"`;
    /// `app == "a" or app == "b"` and `app in ["a", "b"]`). Only for predicates: a rule's
    /// meaning (which keys its saved state) keeps [`Cond::canonical`].
    pub fn predicate_key(&self) -> String {
        if self.captures_any() {
            return self.normalised_capturing().canonical();
        }
        self.normalised().canonical()
    }

    /// An equivalent condition for one that captures: captures flow left to right and may
    /// stand for registry fields (`src` read out of a syslog message), so only nested `and`s
    /// are flattened (the order kept) and a source test dropped where another operand, reading
    /// no captured name, implies that source.
    fn normalised_capturing(&self) -> Cond {
        fn flatten(cs: &[Cond], out: &mut Vec<Cond>) {
            for c in cs {
                match c {
                    Cond::And(inner) => flatten(inner, out),
                    Cond::True => {}
                    c => out.push(c.clone()),
                }
            }
        }
        let Cond::And(cs) = self else {
            return self.clone();
        };
        let mut parts = Vec::with_capacity(cs.len());
        flatten(cs, &mut parts);
        let mut captured = Vec::new();
        for c in &parts {
            c.captured_keys(&mut captured);
        }
        Cond::and_of(parts, &captured)
    }

    /// The `and` of `parts` (flat: no `and` or `true` among them), without a source test
    /// another operand implies (one reading no field of `captured`), one part as itself.
    fn and_of(mut parts: Vec<Cond>, captured: &[FieldKey]) -> Cond {
        let implied: Vec<Source> = parts
            .iter()
            .filter(|c| !matches!(c, Cond::Source(_)))
            .filter_map(|c| c.implied_source(captured))
            .collect();
        parts.retain(|c| !matches!(c, Cond::Source(s) if implied.contains(s)));
        match parts.len() {
            0 => Cond::True,
            1 => parts.pop().unwrap_or(Cond::True),
            _ => Cond::And(parts),
        }
    }

    /// The fields its regexes capture, appended to `out`.
    fn captured_keys(&self, out: &mut Vec<FieldKey>) {
        match self {
            Cond::Regex(r) if !r.negate => out.extend(r.captures.iter().map(|(_, k)| k.clone())),
            Cond::And(cs) | Cond::Or(cs) => cs.iter().for_each(|c| c.captured_keys(out)),
            _ => {}
        }
    }

    /// An equivalent condition (for a condition that captures nothing): nested `and`s and
    /// `or`s flattened, a source test dropped where another operand reads a field only that
    /// source has (every test on a missing field is false), `or`ed equalities on one field
    /// made one `in`, and an `in` of one value an equality.
    fn normalised(&self) -> Cond {
        match self {
            Cond::And(cs) => {
                let mut parts = Vec::with_capacity(cs.len());
                for c in cs.iter().map(Cond::normalised) {
                    match c {
                        Cond::And(inner) => parts.extend(inner),
                        Cond::True => {}
                        c => parts.push(c),
                    }
                }
                Cond::and_of(parts, &[])
            }
            Cond::Or(cs) => {
                let mut parts: Vec<Cond> = Vec::with_capacity(cs.len());
                // (field, its values) of the equalities met so far, by first appearance.
                let mut equal: Vec<(Field, Vec<Value>)> = Vec::new();
                for c in cs.iter().map(Cond::normalised) {
                    let flat = match c {
                        Cond::Or(inner) => inner,
                        c => vec![c],
                    };
                    for c in flat {
                        match c.equality() {
                            Some((f, vals)) => match equal.iter_mut().find(|(g, _)| *g == f) {
                                Some((_, v)) => v.extend(vals),
                                None => equal.push((f, vals)),
                            },
                            None => parts.push(c),
                        }
                    }
                }
                parts.extend(equal.into_iter().map(|(f, vals)| {
                    Cond::In(Expr::Field(FieldKey::Known(f)), ValueList::new(vals)).normalised()
                }));
                match parts.len() {
                    1 => parts.pop().unwrap_or(Cond::True),
                    _ => Cond::Or(parts),
                }
            }
            Cond::Not(c) => match c.normalised() {
                Cond::Not(inner) => *inner,
                c => Cond::Not(Box::new(c)),
            },
            Cond::Cmp(CmpOp::Eq, Expr::Lit(v), Expr::Field(k)) => {
                Cond::Cmp(CmpOp::Eq, Expr::Field(k.clone()), Expr::Lit(v.clone()))
            }
            Cond::In(Expr::Field(k), list)
                if list.values().len() == 1 && self.equality().is_some() =>
            {
                Cond::Cmp(
                    CmpOp::Eq,
                    Expr::Field(k.clone()),
                    Expr::Lit(list.values()[0].clone()),
                )
            }
            c => c.clone(),
        }
    }

    /// `field == literal` (either way round) or `field in [literals]` on a registry field,
    /// with literals of the field's own type that are not floats: the tests whose `or` is
    /// exactly one `in` (same-typed equality, hashed or scanned alike).
    fn equality(&self) -> Option<(Field, Vec<Value>)> {
        let (f, vals) = match self {
            Cond::Cmp(CmpOp::Eq, Expr::Field(FieldKey::Known(f)), Expr::Lit(v))
            | Cond::Cmp(CmpOp::Eq, Expr::Lit(v), Expr::Field(FieldKey::Known(f))) => {
                (*f, vec![v.clone()])
            }
            Cond::In(Expr::Field(FieldKey::Known(f)), list) => (*f, list.values().to_vec()),
            _ => return None,
        };
        let same_type = |v: &Value| v.ty() == f.ty() && !matches!(v, Value::Float(_));
        (f != Field::Time && !vals.is_empty() && vals.iter().all(same_type)).then_some((f, vals))
    }

    /// The one source whose events alone can satisfy this condition, when a test on a field
    /// only that source has (false on an event without it) or a source test says so; a test
    /// on a field in `captured` says nothing (a capture may give any event that field).
    fn implied_source(&self, captured: &[FieldKey]) -> Option<Source> {
        let of_field = |k: &FieldKey| match k {
            _ if captured.contains(k) => None,
            FieldKey::Known(f) => match f.sources() {
                [s] => Some(*s),
                _ => None,
            },
            FieldKey::Named(_) => None,
        };
        let of_expr = |e: &Expr| match e {
            Expr::Field(k) => of_field(k),
            _ => None,
        };
        match self {
            Cond::Source(s) => Some(*s),
            Cond::Cmp(_, a, b) | Cond::Str(_, a, b) => of_expr(a).or_else(|| of_expr(b)),
            Cond::Regex(r) => of_expr(&r.lhs),
            Cond::In(e, _) | Cond::InCidr(e, _) | Cond::InFile(e, _) => of_expr(e),
            Cond::Exists(k) => of_field(k),
            Cond::And(cs) => {
                let mut found = cs.iter().filter_map(|c| c.implied_source(captured));
                let first = found.next()?;
                // (Two sources: never true; left as written.)
                found.all(|s| s == first).then_some(first)
            }
            Cond::Or(cs) => {
                let first = cs.first()?.implied_source(captured)?;
                cs.iter()
                    .all(|c| c.implied_source(captured) == Some(first))
                    .then_some(first)
            }
            Cond::True | Cond::Not(_) => None,
        }
    }

    /// [`Cond::canonical`] with every `and`/`or` sorted, captures or not: equal for two
    /// conditions that differ only in the order of operands a capture pins (so the graph can
    /// say why they are not one predicate).
    pub(crate) fn canonical_any_order(&self) -> String {
        let mut s = String::new();
        self.write_canonical(&mut s, false);
        s
    }

    fn write_canonical(&self, s: &mut String, keep_capture_order: bool) {
        match self {
            Cond::True => s.push_str("true"),
            Cond::Source(src) => s.push_str(src.name()),
            Cond::And(cs) | Cond::Or(cs) => {
                let word = if matches!(self, Cond::And(_)) {
                    "and"
                } else {
                    "or"
                };
                // Operands with captures must keep their order; others are sorted.
                let mut parts: Vec<String> = cs
                    .iter()
                    .map(|c| {
                        let mut p = String::new();
                        c.write_canonical(&mut p, keep_capture_order);
                        p
                    })
                    .collect();
                if !keep_capture_order || !cs.iter().any(Cond::captures_any) {
                    parts.sort();
                    parts.dedup();
                }
                s.push('(');
                s.push_str(&parts.join(&format!(" {word} ")));
                s.push(')');
            }
            Cond::Not(c) => {
                s.push_str("not ");
                c.write_canonical(s, keep_capture_order);
            }
            Cond::Cmp(op, a, b) => {
                let _ = write!(s, "{a} {} {b}", cmp_name(*op));
            }
            Cond::Str(op, a, b) => {
                let w = match op {
                    StrOp::Contains => "contains",
                    StrOp::StartsWith => "starts_with",
                    StrOp::EndsWith => "ends_with",
                };
                let _ = write!(s, "{a} {w} {b}");
            }
            Cond::Regex(r) => {
                let _ = write!(
                    s,
                    "{} {} {}",
                    r.lhs,
                    if r.negate { "!~" } else { "=~" },
                    quoted(r.re.as_str())
                );
            }
            Cond::In(e, list) => {
                let mut vals: Vec<String> = list.values().iter().map(lit).collect();
                vals.sort();
                vals.dedup();
                let _ = write!(s, "{e} in [{}]", vals.join(", "));
            }
            Cond::InCidr(e, nets) => {
                let mut vals: Vec<String> = nets.iter().map(|n| n.to_string()).collect();
                vals.sort();
                vals.dedup();
                let _ = write!(s, "{e} in [{}]", vals.join(", "));
            }
            Cond::InFile(e, list) => {
                let _ = write!(s, "{e} in file({})", quoted(&list.path));
            }
            Cond::Exists(k) => {
                let _ = write!(s, "exists({})", k.name());
            }
        }
    }

    /// Whether a regex of this condition captures a field named `name`.
    pub fn captures_named(&self, name: &str) -> bool {
        self.captures_where(&|k| k.name() == name)
    }

    /// Whether evaluating this condition can capture fields.
    pub fn captures_any(&self) -> bool {
        self.captures_where(&|_| true)
    }

    /// Whether evaluating this condition can capture a field `pick` accepts (a negated
    /// regex captures nothing).
    fn captures_where(&self, pick: &dyn Fn(&FieldKey) -> bool) -> bool {
        match self {
            Cond::Regex(r) => !r.negate && r.captures.iter().any(|(_, k)| pick(k)),
            Cond::And(cs) | Cond::Or(cs) => cs.iter().any(|c| c.captures_where(pick)),
            _ => false,
        }
    }
}

/// IPv4-mapped IPv6 addresses compare as IPv4, so `::ffff:10.0.0.1 in 10.0.0.0/8` holds.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// A network written in IPv4-mapped form (`::ffff:10.0.0.0/104`, `::ffff:10.0.0.1`) as the
/// IPv4 network it is (`10.0.0.0/8`): addresses are IPv4 once mapped, so the mapped form
/// would contain none of them.
pub fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(n) if n.prefix_len() >= 96 => match n.addr().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, n.prefix_len() - 96)
                .map(|n| IpNet::V4(n.trunc()))
                .unwrap_or(net),
            None => net,
        },
        _ => net,
    }
}

/// A captured string converted to the type of the field it names (`src` becomes an IP).
pub fn capture_value(key: &FieldKey, text: &str) -> Option<Value> {
    match key {
        // A number out of the field's range (`dport` 99999) is refused as JSON input is;
        // text fields keep any text a log line may say (`state` in a syslog line).
        FieldKey::Known(f) => Value::parse_as(f.ty(), text)
            .filter(|v| !matches!(v, Value::Int(_)) || f.out_of_range(v).is_none()),
        FieldKey::Named(_) => Some(Value::str(text)),
    }
}

fn cmp_name(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "==",
        CmpOp::Ne => "!=",
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
    }
}

/// A string as a condition literal is written (`"..."`, only `"` escaped, backslashes as
/// they are), so a regex reads as in the rule file; distinct strings stay distinct.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\\\""))
}

fn lit(v: &Value) -> String {
    match v {
        Value::Str(s) => quoted(s),
        other => other.to_string(),
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Lit(v) => f.write_str(&lit(v)),
            Expr::Field(k) => f.write_str(k.name()),
            Expr::Neg(e) => write!(f, "-({e})"),
            Expr::TimePart(part, e, None) => write!(f, "{}({e})", part.name()),
            Expr::TimePart(part, e, Some(z)) => {
                write!(f, "{}({e}, {})", part.name(), quoted(z.name()))
            }
            Expr::Arith(op, a, b) => {
                let o = match op {
                    ArithOp::Add => "+",
                    ArithOp::Sub => "-",
                    ArithOp::Mul => "*",
                    ArithOp::Div => "/",
                    ArithOp::Rem => "%",
                };
                write!(f, "({a} {o} {b})")
            }
        }
    }
}

/// Index of an event definition within its rule (`events.<name>`).
pub type EventId = usize;

/// A compiled pattern expression. `within` is not here: it is [`Rule::within`] (top level only).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// One event of this definition.
    Event(EventId),
    /// Each in turn (skip-till-next-match).
    Seq(Vec<Pattern>),
    /// Any one of them.
    Or(Vec<Pattern>),
    /// All of them, in any order.
    And(Vec<Pattern>),
    /// `p{min,max}`, `p+`; `distinct` counts only distinct values of a field.
    Repeat {
        /// The repeated pattern (an event or an `or` of events).
        inner: Box<Pattern>,
        /// Minimum count (>= 1).
        min: u32,
        /// Maximum count, if any.
        max: Option<u32>,
        /// Count distinct values of this field only.
        distinct: Option<FieldKey>,
    },
    /// `absent(p) for D`: `p` did not occur (for `D`, when given).
    Absent {
        /// What must not occur (an event or an `or` of events).
        inner: Box<Pattern>,
        /// How long, when given.
        for_: Option<Duration>,
    },
}

impl Pattern {
    /// Whether the pattern names definition `def` anywhere: a definition it does not name is
    /// never evaluated (the checker warns about it).
    pub fn uses(&self, def: EventId) -> bool {
        match self {
            Pattern::Event(i) => *i == def,
            Pattern::Seq(ps) | Pattern::Or(ps) | Pattern::And(ps) => ps.iter().any(|p| p.uses(def)),
            Pattern::Repeat { inner, .. } | Pattern::Absent { inner, .. } => inner.uses(def),
        }
    }
}

/// `within D` or `within D1..D2`: bounds on the distance from the first to the last step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    /// The least distance (0 for `within D`).
    pub min: Duration,
    /// The greatest distance.
    pub max: Duration,
}

/// Severity of a rule's alerts.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Wake someone up.
    Critical,
    /// Look today.
    High,
    /// Look this week.
    Medium,
    /// Worth knowing.
    Low,
    /// For the record.
    Info,
}

impl Severity {
    /// The spelling in rule files and alerts.
    pub const fn name(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::High => "high",
            Severity::Medium => "medium",
            Severity::Low => "low",
            Severity::Info => "info",
        }
    }

    /// Parses a rule file's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "critical" => Severity::Critical,
            "high" => Severity::High,
            "medium" => Severity::Medium,
            "low" => Severity::Low,
            "info" => Severity::Info,
            _ => return None,
        })
    }
}

/// Which clock a rule runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeMode {
    /// Arrival time (the default): no reordering.
    Processing,
    /// Event time: events reordered below a watermark that trails by `max_delay`.
    Event,
}

/// When a rule's matches become alerts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// Alert on every match.
    Event,
    /// At most one alert per period per group (`None`: the rule's window, tumbling).
    Every(Option<Duration>),
}

/// One part of a message template: text, or `{field}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TemplatePart {
    /// Literal text.
    Text(String),
    /// A field of the group or of the matching events.
    Field(FieldKey),
}

/// The greatest `n` of `absent(x{n,}) for D` (fewer than `n` in any `D`): each group keeps
/// the times of its last `n` awaited events, 8 KB at most.
pub const MAX_ABSENT_COUNT: u32 = 1000;

/// Where a group field's value comes from: an event field read whole, or an address field
/// read as its network (`src/64`), so that the addresses of one network form one group (a
/// sender rotating through the addresses of its IPv6 /64 is one source, as it is one host).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupField {
    /// The field read.
    pub key: FieldKey,
    /// When read as a network, the bits kept of an IPv4 address (at most 32) and of an IPv6
    /// one (at most 128).
    pub net: Option<(u8, u8)>,
}

impl From<FieldKey> for GroupField {
    fn from(key: FieldKey) -> GroupField {
        GroupField { key, net: None }
    }
}

/// A group field that reads `key` whole (tests and callers compare with the plain key).
impl PartialEq<FieldKey> for GroupField {
    fn eq(&self, key: &FieldKey) -> bool {
        self.net.is_none() && self.key == *key
    }
}

impl GroupField {
    /// `key` read as its network, `v4` and `v6` bits long (capped at the families' widths).
    pub fn network(key: FieldKey, v4: u8, v6: u8) -> GroupField {
        GroupField {
            key,
            net: Some((v4.min(32), v6.min(128))),
        }
    }

    /// As rules write it: `src`, `src/64` (both lengths from one: an IPv4 address keeps at
    /// most its 32 bits), or `src/24,64`.
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        match self.net {
            None => std::borrow::Cow::Borrowed(self.key.name()),
            Some((v4, v6)) => format!("{}/{}", self.key.name(), net_lengths(v4, v6)).into(),
        }
    }

    /// The type of its values: the field's, an IP address for a network.
    pub fn ty(&self) -> crate::event::ValueType {
        match self.net {
            None => self.key.ty(),
            Some(_) => crate::event::ValueType::Ip,
        }
    }
}

/// A network's lengths as rules write them after the slash: `64` when one says both (an
/// IPv4 address keeping at most its 32 bits), else `24,64`.
pub fn net_lengths(v4: u8, v6: u8) -> String {
    if v4 == v6.min(32) {
        v6.to_string()
    } else {
        format!("{v4},{v6}")
    }
}

/// The network an address value is in, `v4` bits of an IPv4 address and `v6` of an IPv6 one
/// kept, as its first address (`2001:db8:1:2::` for `2001:db8:1:2::5` at 64 bits); `None` for
/// a value that is no address. An IPv4-mapped IPv6 address is its IPv4 address, masked as
/// one.
pub fn network(v: &Value, v4: u8, v6: u8) -> Option<Value> {
    let Value::Ip(ip) = v else {
        return None;
    };
    Some(Value::Ip(match ip.to_canonical() {
        std::net::IpAddr::V4(a) => {
            let keep = u32::MAX
                .checked_shl(32 - u32::from(v4.min(32)))
                .unwrap_or(0);
            std::net::IpAddr::V4(std::net::Ipv4Addr::from_bits(a.to_bits() & keep))
        }
        std::net::IpAddr::V6(a) => {
            let keep = u128::MAX
                .checked_shl(128 - u32::from(v6.min(128)))
                .unwrap_or(0);
            std::net::IpAddr::V6(std::net::Ipv6Addr::from_bits(a.to_bits() & keep))
        }
    }))
}

/// An event definition of a rule: its condition, and which field supplies each group name.
#[derive(Clone, Debug)]
pub struct EventDef {
    /// The name in `events.<name>`.
    pub name: String,
    /// The condition.
    pub cond: Cond,
    /// For each `group_by` name (same order), the field that supplies it.
    pub group_fields: Vec<GroupField>,
    /// Where the file wrote it among the rule's definitions (shown in that order; no part of
    /// the meaning, see `order_definitions` in the checker).
    pub position: usize,
}

/// Whether the order of a rule's event definitions is part of its meaning: when one captures
/// fields (an event two definitions match carries the captures of the first) or they take
/// their group from different fields (an event two of them match is taken under each key,
/// in definition order). Elsewhere the checker puts them in one order.
pub fn definition_order_matters(defs: &[EventDef]) -> bool {
    defs.iter().any(|d| d.cond.captures_any())
        || defs
            .windows(2)
            .any(|w| w[0].group_fields != w[1].group_fields)
}

/// A compiled rule.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Unique name.
    pub name: String,
    /// Alert severity.
    pub severity: Severity,
    /// Free text for people.
    pub description: Option<String>,
    /// The alert message template (`None`: rule name and group).
    pub message: Option<Vec<TemplatePart>>,
    /// Names of the group fields (the key of a group), in order.
    pub group_by: Vec<String>,
    /// Event definitions; [`Pattern::Event`] indexes this.
    pub events: Vec<EventDef>,
    /// The pattern.
    pub pattern: Pattern,
    /// The top-level window, if any.
    pub within: Option<Window>,
    /// Groups armed at start-up: each a full key in `group_by` order, typed.
    pub expect: Vec<Vec<Value>>,
    /// processing or event time.
    pub time: TimeMode,
    /// Event time: how far the watermark trails.
    pub max_delay: Duration,
    /// Event time: how late an event may still retract a fired absence.
    pub allowed_lateness: Duration,
    /// Alert trigger.
    pub trigger: Trigger,
    /// A discovered group silent this long is dropped.
    pub forget_after: Duration,
    /// Budget: most groups kept (`None`: engine default).
    pub max_groups: Option<u64>,
    /// Budget: most partial matches per group (`None`: engine default).
    pub max_partial_matches: Option<u64>,
    /// The file the rule came from (for messages).
    pub file: String,
}

impl Rule {
    /// Whether its message shows `{count}` (how many events the match or episode took): not
    /// when a group field or a regex capture is named `count` (the message shows that).
    pub fn shows_count(&self) -> bool {
        self.message
            .iter()
            .flatten()
            .any(|p| matches!(p, TemplatePart::Field(k) if k.name() == "count"))
            && !self.group_by.iter().any(|g| g == "count")
            && !self.events.iter().any(|e| e.cond.captures_named("count"))
    }

    /// A text that changes exactly when the rule's meaning changes (not its name, file,
    /// position or the names of its event definitions, which no alert shows): engine state
    /// survives a reload when this is unchanged, and rules with one meaning share one state.
    pub fn canonical(&self) -> String {
        self.canonical_with(ExpectAs::Digest)
    }

    /// The canonical form checkpoints of version 2 saved, with the whole `expect` list in
    /// it: what a restore maps to [`Rule::canonical`] when it reads one.
    pub fn canonical_v2(&self) -> String {
        self.canonical_with(ExpectAs::Whole)
    }

    fn canonical_with(&self, expect: ExpectAs) -> String {
        let mut s = String::new();
        let _ = write!(s, "group_by={:?};", self.group_by);
        for (i, e) in self.events.iter().enumerate() {
            let keys: Vec<_> = e.group_fields.iter().map(GroupField::name).collect();
            let _ = write!(s, "event {i}: {} keys {:?};", e.cond.canonical(), keys);
        }
        let _ = write!(
            s,
            "pattern={:?};within={:?};expect={};time={:?};delay={:?};late={:?};trigger={:?};forget={:?};budgets={:?}/{:?}",
            self.pattern,
            self.within,
            ExpectPart(&self.expect, expect),
            self.time,
            self.max_delay,
            self.allowed_lateness,
            self.trigger,
            self.forget_after,
            self.max_groups,
            self.max_partial_matches
        );
        s
    }

    /// A canonical form saved before the `expect` part was a digest (checkpoints of earlier
    /// builds wrote the whole list), of a rule no longer loaded (a loaded one is matched by
    /// [`Rule::canonical_v2`]): the same form as [`Rule::canonical`] would give, found by
    /// reading the list from the last `;expect=[`, so a list holding that text itself is
    /// cut wrong (and its rule taken for another).
    pub fn canonical_of_saved(c: String) -> String {
        let Some(from) = c.rfind(";expect=[").map(|i| i + ";expect=".len()) else {
            return c;
        };
        let Some(to) = c[from..].rfind("];time=").map(|i| from + i + 1) else {
            return c;
        };
        if &c[from..to] == "[]" {
            return c;
        }
        let mut h = Sha256::new();
        h.update(&c.as_bytes()[from..to]);
        format!("{}#{}{}", &c[..from], digest_hex(h), &c[to..])
    }

    /// A 64-bit fingerprint of the rule's meaning without its `expect` list: what an alert
    /// is kept with, so that after a crash the sink can tell an alert of the rule as it runs
    /// now from one of an earlier form (changed at a reload, or while the agent was down).
    /// Equal for two forms exactly when [`Rule::canonicals_differ_only_in_expect`] or equal.
    /// Stored: a build that writes [`Rule::canonical`] differently must tell the digests of
    /// the earlier form from changed rules, as a checkpoint's version does for saved states.
    pub fn meaning_digest(&self) -> u64 {
        // (The list left out, not digested: a list of a million hosts costs nothing here.)
        let mut h = crate::fnv::Fnv::new();
        h.feed(self.canonical_with(ExpectAs::Omitted).as_bytes());
        h.finish()
    }

    /// Whether two canonical forms ([`Rule::canonical`], possibly of rules no longer loaded)
    /// differ at most in their `expect` part: the same rule with another `expect` list. The
    /// part is found from the end, since only the parts before it hold user text.
    pub fn canonicals_differ_only_in_expect(a: &str, b: &str) -> bool {
        let split = |c: &str| -> Option<(usize, usize)> {
            let from = c.rfind(";expect=")?;
            let to = from + c[from..].find(";time=")?;
            Some((from, to))
        };
        match (split(a), split(b)) {
            (Some((fa, ta)), Some((fb, tb))) => a[..fa] == b[..fb] && a[ta..] == b[tb..],
            _ => false,
        }
    }
}

/// How a rule's canonical form names its `expect` list: `[]` when empty, else `#` and the
/// first 128 bits of the SHA-256 of the list written out (`{:?}`) in full (a list of a
/// million hosts made a 45 MB identity, copied into each engine and written into every saved
/// state); [`ExpectAs::Whole`], the list written out (version-2 checkpoints);
/// [`ExpectAs::Omitted`], `-` (the meaning digest, which leaves the list out).
struct ExpectPart<'a>(&'a [Vec<Value>], ExpectAs);

/// How [`ExpectPart`] writes the list.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpectAs {
    Digest,
    Whole,
    Omitted,
}

impl fmt::Display for ExpectPart<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.1 == ExpectAs::Omitted {
            return f.write_str("-");
        }
        if self.0.is_empty() || self.1 == ExpectAs::Whole {
            return write!(f, "{:?}", self.0);
        }
        let mut h = DigestWriter(Sha256::new());
        write!(h, "{:?}", self.0)?;
        write!(f, "#{}", digest_hex(h.0))
    }
}

/// Text written into a SHA-256 as it is formatted (no copy of a long list's text).
struct DigestWriter(Sha256);

impl fmt::Write for DigestWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.update(s.as_bytes());
        Ok(())
    }
}

/// The first 128 bits of a SHA-256, in hex.
fn digest_hex(h: Sha256) -> String {
    h.finalize()[..16]
        .iter()
        .fold(String::with_capacity(32), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// A compiled, checked set of rules: what the engine runs.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    /// The rules, in file order (files sorted by path).
    pub rules: Vec<Arc<Rule>>,
}

impl RuleSet {
    /// The list files its conditions read (`in file(...)`), each once, in the order first
    /// met: what a log line tells an operator who just edited one.
    pub fn list_files(&self) -> Vec<Arc<ListFile>> {
        type Seen = std::collections::HashSet<*const ListFile>;
        fn walk(c: &Cond, seen: &mut Seen, out: &mut Vec<Arc<ListFile>>) {
            match c {
                Cond::InFile(_, l) if seen.insert(Arc::as_ptr(l)) => out.push(l.clone()),
                Cond::And(cs) | Cond::Or(cs) => cs.iter().for_each(|c| walk(c, seen, out)),
                Cond::Not(c) => walk(c, seen, out),
                _ => {}
            }
        }
        let (mut seen, mut out) = (Seen::default(), Vec::new());
        for r in &self.rules {
            for d in &r.events {
                walk(&d.cond, &mut seen, &mut out);
            }
        }
        out
    }
}

/// The default for `forget_after`.
pub const DEFAULT_FORGET_AFTER: Duration = Duration::from_secs(7 * 86_400);
/// The default for `max_delay`.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(5);

/// An instant that cannot appear in input; the engine uses it for "no time yet".
pub const NO_TIME: Timestamp = Timestamp::MIN;

#[cfg(test)]
mod tests {
    use super::Re;

    /// `Re` is `regex::Regex` with a smaller one-pass DFA: the same matches and groups.
    #[test]
    fn a_condition_regex_matches_and_captures_as_regex_does() {
        let pats = [
            r"Failed password for (?:invalid user )?(?P<user>\S+) from (?P<src>[0-9a-f.:]+)",
            r"Accepted \w+ for (?P<user>\S+) from (?P<src>[0-9a-f.:]+)",
            r"^(?P<a>\d+)-(?P<b>\d+)?x(?P<c>é+)?$",
            r"(?i)ERROR\b",
            r"a|(?P<x>b)|c",
            r"",
        ];
        let hays = [
            "Failed password for invalid user admin from 10.0.0.1 port 22 ssh2",
            "Failed password for root from ::1 port 22 ssh2",
            "Accepted publickey for root from 192.168.1.5 port 50022 ssh2",
            "Accepted ключ for пользователь from 10.1.1.1",
            "12-x",
            "12-34xéé",
            "an error here",
            "ERRORS",
            "cab",
            "",
        ];
        for p in pats {
            let (Ok(ours), Ok(theirs)) = (Re::new(p), regex::Regex::new(p)) else {
                panic!("{p} compiles");
            };
            assert_eq!(ours.as_str(), p);
            assert_eq!(
                ours.capture_names().collect::<Vec<_>>(),
                theirs.capture_names().collect::<Vec<_>>()
            );
            for h in hays {
                assert_eq!(ours.is_match(h), theirs.is_match(h), "{p} on {h}");
                let want = theirs
                    .captures(h)
                    .map(|c| c.iter().map(|g| g.map(|m| m.as_str())).collect::<Vec<_>>());
                assert_eq!(ours.captures(h), want, "{p} on {h}");
            }
        }
    }

    /// Unicode classes with groups: the one-pass DFA that made this regex about 0.7 MB is
    /// not kept (2,000 such rules took 2.4 GB at `rules check`).
    #[test]
    fn a_unicode_regex_with_groups_stays_small() {
        let p = r"Accepted \w+ for (?P<user>\S+) from (?P<src>\S+)";
        let Ok(re) = Re::new(p) else {
            panic!("{p} compiles");
        };
        assert!(
            re.memory_usage() < 200 * 1024,
            "{} bytes",
            re.memory_usage()
        );
        assert!(Re::new(r"\w{1000}\w{1000}\w{1000}\w{1000}\w{1000}").is_err());
    }

    #[test]
    fn only_the_expect_part_may_differ() {
        let c = |pre: &str, expect: &str, post: &str| {
            format!(
                "group_by=[\"host\"];event hb: (app == \"{pre}\");pattern=P;within=None;expect={expect};time=Processing;{post}"
            )
        };
        let a = c("hb", "[[\"web-1\"]]", "forget=7d");
        assert!(Rule::canonicals_differ_only_in_expect(
            &a,
            &c("hb", "[[\"web-1\"], [\"web-2\"]]", "forget=7d")
        ));
        assert!(Rule::canonicals_differ_only_in_expect(&a, &a));
        assert!(!Rule::canonicals_differ_only_in_expect(
            &a,
            &c("hb2", "[[\"web-1\"]]", "forget=7d")
        ));
        assert!(!Rule::canonicals_differ_only_in_expect(
            &a,
            &c("hb", "[[\"web-1\"]]", "forget=1d")
        ));
        // User text that looks like the part is left alone: the real one is the last.
        let tricky = c("x;expect=[];time=Y", "[]", "forget=7d");
        assert!(!Rule::canonicals_differ_only_in_expect(
            &tricky,
            &c("x", "[]", "forget=7d")
        ));
        assert!(!Rule::canonicals_differ_only_in_expect("no parts", &a));
    }

    use super::*;

    /// A network keeps the first bits of an address of either family, none (`/0`: one
    /// group for every address) to all of them, and is named in its shortest form.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_network_keeps_an_addresss_first_bits() {
        use crate::event::Field;
        let src = || FieldKey::Known(Field::Src);
        let ip = |t: &str| Value::ip(t.parse().unwrap());
        let of = |(v4, v6), t: &str| network(&ip(t), v4, v6).map(|v| v.to_string());
        assert_eq!(GroupField::network(src(), 24, 64).name(), "src/24,64");
        assert_eq!(GroupField::network(src(), 32, 64).name(), "src/64");
        assert_eq!(GroupField::network(src(), 0, 0).name(), "src/0");
        assert_eq!(GroupField::network(src(), 40, 200).net, Some((32, 128)));
        assert_eq!(GroupField::from(src()).name(), "src");
        assert_eq!(of((24, 64), "192.0.2.77").as_deref(), Some("192.0.2.0"));
        assert_eq!(
            of((24, 64), "::ffff:192.0.2.77").as_deref(),
            Some("192.0.2.0")
        );
        assert_eq!(
            of((24, 64), "2001:db8:a:b:c:d:e:f").as_deref(),
            Some("2001:db8:a:b::")
        );
        assert_eq!(of((0, 0), "192.0.2.77").as_deref(), Some("0.0.0.0"));
        assert_eq!(of((0, 0), "2001:db8::1").as_deref(), Some("::"));
        assert_eq!(of((32, 128), "2001:db8::1").as_deref(), Some("2001:db8::1"));
        assert_eq!(network(&Value::str("192.0.2.77"), 24, 64), None);
    }

    fn ev() -> Event {
        Event::new(
            Source::Syslog,
            Timestamp::from_secs(100),
            Timestamp::from_secs(100),
        )
        .with(Field::App, Value::str("sshd"))
        .with(Field::Severity, Value::Int(3))
        .with(
            Field::Msg,
            Value::str("Failed password for root from 10.1.2.3 port 22 ssh2"),
        )
        .with(
            Field::Peer,
            Value::Ip("::ffff:10.9.9.9".parse().unwrap_or(IpAddr::from([0; 4]))),
        )
    }

    fn field(f: Field) -> Expr {
        Expr::Field(FieldKey::Known(f))
    }

    #[test]
    fn comparisons_and_strings() {
        let e = ev();
        let mut caps = Captures::new();
        let c = Cond::And(vec![
            Cond::Source(Source::Syslog),
            Cond::Cmp(CmpOp::Eq, field(Field::App), Expr::Lit(Value::str("sshd"))),
            Cond::Cmp(
                CmpOp::Le,
                field(Field::Severity),
                Expr::Lit(Value::Float(3.0)),
            ),
            Cond::Str(
                StrOp::StartsWith,
                field(Field::Msg),
                Expr::Lit(Value::str("Failed")),
            ),
        ]);
        assert!(c.eval(&e, &mut caps));
        let c = Cond::Cmp(CmpOp::Eq, field(Field::Host), Expr::Lit(Value::str("x")));
        assert!(!c.eval(&e, &mut caps), "missing field is no match");
        let c = Cond::Cmp(
            CmpOp::Eq,
            Expr::Arith(
                ArithOp::Add,
                Box::new(field(Field::Severity)),
                Box::new(Expr::Lit(Value::Int(1))),
            ),
            Expr::Lit(Value::Int(4)),
        );
        assert!(c.eval(&e, &mut caps));
    }

    #[test]
    fn regex_captures_become_typed_fields() {
        let e = ev();
        let mut caps = Captures::new();
        let re = Re::new(r"Failed password for (?P<user>\S+) from (?P<src>[0-9a-f.:]+)")
            .unwrap_or_else(|_| Re::new("x").unwrap_or_else(|_| unreachable!()));
        let c = Cond::Regex(Box::new(RegexCond {
            lhs: field(Field::Msg),
            re,
            negate: false,
            captures: vec![
                (1, FieldKey::from_name("user")),
                (2, FieldKey::from_name("src")),
            ],
        }));
        assert!(c.eval(&e, &mut caps));
        assert_eq!(caps[0].1, Value::str("root"));
        assert_eq!(
            caps[1],
            (
                FieldKey::Known(Field::Src),
                Value::Ip(IpAddr::from([10, 1, 2, 3]))
            )
        );
        let then = Cond::InCidr(
            field(Field::Src),
            vec!["10.0.0.0/8".parse().unwrap_or_else(|_| unreachable!())],
        );
        assert!(then.eval(&e, &mut caps));
    }

    #[test]
    fn a_capture_named_like_a_port_holds_a_port() {
        let port = FieldKey::from_name("dport");
        assert_eq!(capture_value(&port, "65535"), Some(Value::Int(65_535)));
        assert_eq!(capture_value(&port, "99999"), None);
        assert_eq!(capture_value(&port, "-1"), None);
        let severity = FieldKey::from_name("severity");
        assert_eq!(capture_value(&severity, "8"), None);
        // A text field keeps any text: a syslog line's own `state` word is not a Zeek state.
        let state = FieldKey::from_name("state");
        assert_eq!(capture_value(&state, "up"), Some(Value::str("up")));
    }

    #[test]
    fn cidr_sees_mapped_v4_and_in_list() {
        let e = ev();
        let mut caps = Captures::new();
        let nets = vec!["10.0.0.0/8".parse().unwrap_or_else(|_| unreachable!())];
        assert!(Cond::InCidr(field(Field::Peer), nets).eval(&e, &mut caps));
        let net = |t: &str| canonical_net(t.parse().unwrap_or_else(|_| unreachable!()));
        assert_eq!(net("::ffff:10.0.0.0/104"), net("10.0.0.0/8"));
        assert_eq!(net("::ffff:10.9.9.9/128"), net("10.9.9.9/32"));
        assert_eq!(net("2001:db8::/32").to_string(), "2001:db8::/32");
        assert!(
            Cond::InCidr(field(Field::Peer), vec![net("::ffff:10.9.9.9/128")]).eval(&e, &mut caps)
        );
        // An IPv6 network that holds the mapped addresses holds IPv4 ones (`::/0` is every
        // address, as Zeek reads it); one that does not, does not.
        for (n, holds) in [
            ("::/0", true),
            ("::fffe:0:0/95", true),
            ("2001:db8::/32", false),
        ] {
            assert_eq!(
                Cond::InCidr(field(Field::Peer), vec![net(n)]).eval(&e, &mut caps),
                holds,
                "{n}"
            );
        }
        let c = Cond::In(
            field(Field::App),
            ValueList::new(vec![Value::str("dropbear"), Value::str("sshd")]),
        );
        assert!(c.eval(&e, &mut caps));
        assert!(Cond::Exists(FieldKey::Known(Field::Time)).eval(&e, &mut caps));
        assert!(!Cond::Exists(FieldKey::from_name("sd.origin.ip")).eval(&e, &mut caps));
    }

    /// Addresses are ordered within a family only: an IPv6 peer is neither above nor below
    /// an IPv4 literal (it is not equal to it either), a mapped one is IPv4.
    #[test]
    fn addresses_of_two_families_are_not_ordered() {
        let cmp = |op, peer: &str, lit: &str| {
            let e = ev().with(
                Field::Peer,
                Value::ip(peer.parse().unwrap_or_else(|_| unreachable!())),
            );
            let lit = Value::ip(lit.parse().unwrap_or_else(|_| unreachable!()));
            Cond::Cmp(op, field(Field::Peer), Expr::Lit(lit)).eval(&e, &mut Captures::new())
        };
        for op in [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq] {
            assert!(!cmp(op, "2001:db8::1", "10.0.0.1"), "{op:?}");
            assert!(!cmp(op, "10.0.0.1", "2001:db8::1"), "{op:?}");
        }
        assert!(cmp(CmpOp::Ne, "2001:db8::1", "10.0.0.1"));
        assert!(cmp(CmpOp::Gt, "::ffff:10.0.0.2", "10.0.0.1"));
        assert!(cmp(CmpOp::Gt, "2001:db8::2", "2001:db8::1"));
        assert!(cmp(CmpOp::Le, "10.0.0.1", "10.0.0.1"));
    }

    #[test]
    fn a_regex_test_on_a_missing_field_is_false_either_way() {
        let e = ev();
        let mut caps = Captures::new();
        let re = |negate| {
            Cond::Regex(Box::new(RegexCond {
                lhs: field(Field::Host),
                re: Re::new("^web").unwrap_or_else(|_| unreachable!()),
                negate,
                captures: Vec::new(),
            }))
        };
        assert!(!re(false).eval(&e, &mut caps));
        assert!(
            !re(true).eval(&e, &mut caps),
            "`host !~ ..` on an event without host"
        );
        assert!(Cond::Not(Box::new(re(false))).eval(&e, &mut caps));
        let e = e.with(Field::Host, Value::str("db-1"));
        assert!(re(true).eval(&e, &mut caps));
    }

    #[test]
    fn canonical_ignores_operand_order() {
        let a = Cond::And(vec![
            Cond::Source(Source::Syslog),
            Cond::Cmp(CmpOp::Eq, field(Field::App), Expr::Lit(Value::str("sshd"))),
        ]);
        let b = Cond::And(vec![
            Cond::Cmp(CmpOp::Eq, field(Field::App), Expr::Lit(Value::str("sshd"))),
            Cond::Source(Source::Syslog),
        ]);
        assert_eq!(a.canonical(), b.canonical());
    }

    use proptest::prelude::*;

    /// A network near the others (so they overlap, nest and touch), of either family or
    /// IPv4-mapped, and an address near them.
    fn net() -> impl Strategy<Value = ipnet::IpNet> {
        prop_oneof![
            (0u32..4096, 20u8..=32).prop_map(|(x, p)| {
                let a = std::net::Ipv4Addr::from(0x0a00_0000 | (x << 8));
                ipnet::IpNet::V4(ipnet::Ipv4Net::new(a, p).unwrap_or_default())
            }),
            (0u32..4096, 116u8..=128).prop_map(|(x, p)| {
                let a = std::net::Ipv4Addr::from(0x0a00_0000 | (x << 8)).to_ipv6_mapped();
                ipnet::IpNet::V6(ipnet::Ipv6Net::new(a, p).unwrap_or_default())
            }),
            (0u32..4096, 100u8..=128).prop_map(|(x, p)| {
                let a = std::net::Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(x) << 16);
                ipnet::IpNet::V6(ipnet::Ipv6Net::new(a, p).unwrap_or_default())
            }),
            Just("::/0".parse().unwrap_or_default()),
            Just("::ffff:0:0/95".parse().unwrap_or_default()),
        ]
    }

    fn addr() -> impl Strategy<Value = std::net::IpAddr> {
        prop_oneof![
            (0u32..(1 << 20)).prop_map(|x| std::net::IpAddr::V4((0x0a00_0000 | x).into())),
            (0u32..(1 << 20)).prop_map(|x| {
                std::net::IpAddr::V6(std::net::Ipv4Addr::from(0x0a00_0000 | x).to_ipv6_mapped())
            }),
            (0u32..(1 << 28)).prop_map(|x| {
                std::net::IpAddr::V6((0x2001_0db8_u128 << 96 | u128::from(x)).into())
            }),
        ]
    }

    proptest! {
        /// A list file's networks hold exactly the addresses `in [...]` with the same networks
        /// holds (merged ranges searched, against the written networks scanned).
        #[test]
        fn list_file_networks_hold_what_an_in_list_holds(
            nets in proptest::collection::vec(net(), 0..40),
            addrs in proptest::collection::vec(addr(), 1..60),
        ) {
            use crate::event::{Event, Field, Source, Value};
            use crate::time::Timestamp;
            let field = || super::Expr::Field(crate::event::FieldKey::Known(Field::Src));
            let written = super::Cond::InCidr(
                field(),
                nets.iter().map(|n| super::canonical_net(*n)).collect(),
            );
            let file = super::Cond::InFile(
                field(),
                std::sync::Arc::new(super::ListFile {
                    path: "x".into(),
                    items: super::ListItems::Nets(super::NetRanges::new(nets.iter().copied())),
                }),
            );
            // Each network's edges and their neighbours too: where a merge or a search is off
            // by one.
            let edges = nets.iter().flat_map(|n| {
                let (lo, hi) = (super::ip_number(n.network()), super::ip_number(n.broadcast()));
                [lo.wrapping_sub(1), lo, hi, hi.wrapping_add(1)].map(|x| {
                    std::net::IpAddr::V6(std::net::Ipv6Addr::from(x)).to_canonical()
                })
            });
            for a in addrs.into_iter().chain(edges) {
                let ev = Event::new(Source::Flow, Timestamp(0), Timestamp(0))
                    .with(Field::Src, Value::Ip(a));
                let mut caps = Vec::new();
                prop_assert_eq!(written.eval(&ev, &mut caps), file.eval(&ev, &mut caps), "{}", a);
            }
        }
    }
}
