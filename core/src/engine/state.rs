//! Per-group state of one rule and the transitions that events and timers make on it.
//!
//! Nothing here knows about lanes, the filter or the wheel: a group is fed "event at t with
//! these definitions matched" and "a timer at t", and it appends alerts and says when it next
//! wants to wake. That keeps the semantics (DESIGN.md, "Semantics fixed here") in one place.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::plan::{Alt, EvSet, Plan, Step};
use crate::alert::{Alert, AlertState, Body, MAX_ALERT_EVENTS, Reason};
use crate::event::{Event, Value};
use crate::rules::ir::{NO_TIME, Rule, Severity, TemplatePart, Trigger, Window, lookup};
use crate::time::{Duration, Timestamp};

/// The seed of an alert id: the episode's start, and how many earlier episodes of the group
/// started at the same instant (0 almost always), so two episodes never share an id.
pub type IdSeed = (Timestamp, u32);

/// A group key: the values of the rule's `group_by` fields, in order (empty: one group).
///
/// One value (the common case) is held inline, so the group map compares keys without
/// following a pointer; several values are shared.
#[derive(Clone, Debug)]
pub struct GroupKey(KeyRepr);

#[derive(Clone, Debug)]
enum KeyRepr {
    One(Value),
    Many(Arc<[Value]>),
}

impl GroupKey {
    /// A key from its values.
    pub fn new(values: &[Value]) -> GroupKey {
        match values {
            [v] => GroupKey(KeyRepr::One(v.clone())),
            _ => GroupKey(KeyRepr::Many(Arc::from(values))),
        }
    }

    /// A key of one value (no allocation).
    pub fn one(v: Value) -> GroupKey {
        GroupKey(KeyRepr::One(v))
    }

    /// A key from owned values.
    pub fn from_vec(mut values: Vec<Value>) -> GroupKey {
        match values.len() {
            1 => match values.pop() {
                Some(v) => GroupKey::one(v),
                None => GroupKey(KeyRepr::Many(Arc::from(values))),
            },
            _ => GroupKey(KeyRepr::Many(Arc::from(values))),
        }
    }

    /// The values, in `group_by` order.
    pub fn as_slice(&self) -> &[Value] {
        match &self.0 {
            KeyRepr::One(v) => std::slice::from_ref(v),
            KeyRepr::Many(vs) => vs,
        }
    }
}

impl std::ops::Deref for GroupKey {
    type Target = [Value];
    fn deref(&self) -> &[Value] {
        self.as_slice()
    }
}

impl PartialEq for GroupKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for GroupKey {}

impl std::hash::Hash for GroupKey {
    /// One value hashes as itself (the common case costs one value's hashing).
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match &self.0 {
            KeyRepr::One(v) => v.hash(state),
            KeyRepr::Many(vs) => vs.hash(state),
        }
    }
}

impl PartialOrd for GroupKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for GroupKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Serialize for GroupKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

impl<'de> Deserialize<'de> for GroupKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v: Vec<Value> = Vec::deserialize(d)?;
        Ok(GroupKey::new(&v))
    }
}

/// A rule a state serves, with what its alerts carry, made once when the engine is built.
#[derive(Clone)]
pub struct Member {
    /// The rule.
    pub rule: Arc<Rule>,
    /// Its alert ids' hash state after the name ([`Alert::id_prefix`]).
    pub id_prefix: u64,
    /// Its index in the rule set (the order of same-instant alerts).
    pub rank: u32,
    /// Its severity (kept here so making an alert reads no rule).
    pub severity: Severity,
    /// Its alerts are episodes the engine ends (resolved, retracted), not matches that fire
    /// once and stay firing ([`super::plan::Plan::alerts_resolve`]).
    pub episodic: bool,
}

impl Member {
    /// Rule `rule`, the `rank`-th of its rule set; `episodic`: see [`Member::episodic`].
    pub fn new(rule: Arc<Rule>, rank: u32, episodic: bool) -> Member {
        Member {
            id_prefix: Alert::id_prefix(&rule.name),
            severity: rule.severity,
            rule,
            rank,
            episodic,
        }
    }
}

// A state's member table is shown in every alert's `Debug`: by rule name only.
impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.rule.name)
    }
}

/// Rule-level facts the group transitions need, kept with the rule state so a transition's
/// context is a reference to them, not a copy made per delivery.
pub struct RuleFacts {
    /// The rule (the first of `members`): its meaning.
    pub rule: Arc<Rule>,
    /// Every rule with this meaning that shares the state (alerts are made for each).
    pub members: Arc<[Member]>,
    /// Its plan.
    pub plan: Arc<Plan>,
    /// When monitoring began for the rule (`Timestamp::MIN`: not yet).
    pub monitor_start: Timestamp,
    /// Most partial matches a group keeps.
    pub max_partial: usize,
    /// The rule's `within` and `forget_after`, kept beside the state: every transition reads
    /// them, and the rule itself lies a few cache lines away.
    pub within: Option<Window>,
    /// See `within`.
    pub forget_after: Duration,
    /// The plan is [`Plan::simple`] and the window has no least distance: a group holding no
    /// live partial match may take an event by [`LinearState::fresh`].
    pub simple: bool,
    /// The plan is [`Plan::single`] and the window, if any, has no least distance: an event
    /// of its step may be finished at once by [`LinearState::single`].
    pub single: bool,
    /// The plan is [`Plan::slides`]: a partial match past its first step may still slide
    /// (see [`Run::lead`]).
    pub slides: bool,
    /// No alternative of the plan begins with a closure: no partial match collects at its
    /// start or slides, so one is live while its start is in the window ([`Run::live`]),
    /// which [`LinearState::fresh`] tests without looking at its alternative.
    pub plain_first: bool,
    /// A rule of this meaning (in the whole rule set, shared or not) shows `{count}` in its
    /// message: a closure at the start keeps the events it counts (up to
    /// [`MAX_CLOSURE_ITEMS`]) rather than only those an alert shows.
    pub counts: bool,
    /// The first steps [`Group::on_fresh`] starts from, when the plan is [`RuleFacts::simple`]
    /// and of a form it takes ([`Lean::of`]).
    pub lean: Lean,
}

/// What [`Group::on_fresh`] needs of a plan, found once when the engine is built: the
/// events of the first step of each alternative (none completes with one event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lean {
    /// Not such a plan: every event takes [`Group::on_event`].
    Off,
    /// One alternative (`seq(a, b)`), whose plain first step takes these definitions, and
    /// the window's length (kept here: [`Group::on_fresh`] reads it on every event).
    One(EvSet, Duration),
    /// One alternative beginning with a closure of at least two that does not slide
    /// (`a{3,}`, `seq(a{3,}, b)`), whose first step takes these definitions; the window's
    /// length.
    Closure(EvSet, Duration),
    /// Two alternatives (`and(a, b)`), with their plain first steps' definitions; the
    /// window's length.
    Two(EvSet, EvSet, Duration),
    /// An absence (`absent(a) for D`): its awaited definitions and D.
    Absence(EvSet, Duration),
    /// A one-step plan ([`RuleFacts::single`]: `or(a, b)`, `seq(a, absent(b) for D)`): its
    /// step's definitions, those its absence at the end awaits (0: none), and how long a
    /// wait for that absence lasts (its D, else the window).
    Single(EvSet, EvSet, Duration),
    /// A one-step plan with no absence at its end whose alerts the rule limits (`or(a, b)`
    /// with `trigger = { every = .. }`): its step's definitions and the period (what
    /// `every_period` gives, kept here: most of its matches are suppressed, and each would
    /// read the trigger and the window again).
    Throttled(EvSet, Duration),
}

impl Lean {
    /// The lean form of `plan` (see [`Lean`]); `simple`, `single`, `slides`: the
    /// [`RuleFacts`] of these names; `wmax`: the length of the rule's window, if any;
    /// `trigger`: the rule's.
    pub fn of(
        plan: &Plan,
        simple: bool,
        single: bool,
        slides: bool,
        wmax: Option<Duration>,
        trigger: &Trigger,
    ) -> Lean {
        let alts = match plan {
            Plan::Absence { set, for_, min } => {
                // (A count, `absent(x{n,})`, takes the general transition.)
                return if *min > 1 {
                    Lean::Off
                } else {
                    Lean::Absence(*set, *for_)
                };
            }
            Plan::Linear { alts } => alts,
        };
        if single && let [a] = alts.as_slice() {
            let end = a.end_absent.as_ref().map_or(0, |e| e.set);
            // (As `LinearState::finish` holds a match back: the period `every_period` gives
            // without a fallback.)
            if end == 0
                && let Some(period) = period_of(trigger, wmax, None)
            {
                return Lean::Throttled(a.steps[0].set, period);
            }
            // (As `LinearState::finish` dates a wait: its D, else the window from the match's
            // start, which a one-step match's event is.)
            let after = (a.end_absent.as_ref())
                .and_then(|e| e.for_)
                .or(wmax)
                .unwrap_or(Duration::ZERO);
            return Lean::Single(a.steps[0].set, end, after);
        }
        let first = |a: &Alt| match a.steps.as_slice() {
            [s, _, ..] if s.repeat.is_none() => Some(s.set),
            _ => None,
        };
        // (A simple plan has a window: none leaves the general transition.)
        let Some(w) = wmax else {
            return Lean::Off;
        };
        match alts.as_slice() {
            _ if !simple => Lean::Off,
            [a] if a.steps[0].repeat.is_some() => {
                if slides || completes_at_once(a) {
                    Lean::Off
                } else {
                    Lean::Closure(a.steps[0].set, w)
                }
            }
            [a] => first(a).map_or(Lean::Off, |x| Lean::One(x, w)),
            [a, b] => match (first(a), first(b)) {
                (Some(x), Some(y)) => Lean::Two(x, y, w),
                _ => Lean::Off,
            },
            _ => Lean::Off,
        }
    }
}

/// What a group transition reads: its rule's facts, and the engine's outage mark.
pub struct RuleCtx<'a> {
    /// The rule's facts (read through `Deref`: `ctx.rule`, `ctx.plan`...).
    pub facts: &'a RuleFacts,
    /// Alerts whose deadline lies before this are marked `outage`.
    pub outage_until: Timestamp,
}

impl std::ops::Deref for RuleCtx<'_> {
    type Target = RuleFacts;

    fn deref(&self) -> &RuleFacts {
        self.facts
    }
}

impl RuleCtx<'_> {
    fn wmax(&self) -> Option<Duration> {
        self.within.map(|w| w.max)
    }
    fn wmin(&self) -> Duration {
        self.within.map(|w| w.min).unwrap_or(Duration::ZERO)
    }
}

/// Counters a group transition may bump.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RuleCounters {
    /// Events that matched one of the rule's definitions (after late filtering).
    pub matched: u64,
    /// Late events (event time below the watermark).
    pub late: u64,
    /// New groups refused because the rule had `max_groups` groups.
    pub groups_rejected: u64,
    /// Partial matches dropped because a group had `max_partial_matches`.
    pub partial_evicted: u64,
    /// Alert changes emitted, per rule (every state change counts; rules sharing a state each
    /// emit the same ones).
    pub alerts: u64,
    /// Matches not alerted because of the trigger's rate limit.
    pub suppressed: u64,
    /// Groups dropped after `forget_after`, or let go holding nothing to make room under a
    /// full `max_groups`.
    pub forgotten: u64,
}

/// One matched event in a partial match.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Item {
    time: Timestamp,
    id: u64,
    ev: Arc<Event>,
    /// The distinct-field value, for `distinct` closures (boxed: most items have none, and
    /// runs move as they start, complete and expire).
    dv: Option<Box<Value>>,
}

/// A partial match's events, oldest first: one or two inline (most runs hold one, and a
/// collector's second event within its window is common: starting a run, or a collector
/// taking its second event, allocates nothing), a boxed ring buffer beyond (closures slide by
/// popping the front). Serialized as the plain sequence, like the `VecDeque` it replaced.
#[derive(Clone, Debug)]
enum Items {
    One(Item),
    /// Two, oldest first.
    Two([Item; 2]),
    /// Zero items (`None`) or a ring of any length.
    #[allow(
        clippy::box_collection,
        reason = "one word, not three: the inline items stay the run's largest part"
    )]
    Many(Option<Box<VecDeque<Item>>>),
}

impl Default for Items {
    fn default() -> Items {
        Items::Many(None)
    }
}

impl Items {
    fn push_back(&mut self, item: Item) {
        match self {
            Items::Many(None) => *self = Items::One(item),
            Items::Many(Some(d)) => d.push_back(item),
            Items::One(_) => {
                if let Items::One(first) = std::mem::take(self) {
                    *self = Items::Two([first, item]);
                }
            }
            Items::Two(_) => {
                let mut d = VecDeque::with_capacity(4);
                if let Items::Two([a, b]) = std::mem::take(self) {
                    d.push_back(a);
                    d.push_back(b);
                }
                d.push_back(item);
                *self = Items::Many(Some(Box::new(d)));
            }
        }
    }

    fn pop_front(&mut self) -> Option<Item> {
        match self {
            Items::Many(None) => None,
            Items::Many(Some(d)) => d.pop_front(),
            Items::One(_) | Items::Two(_) => match std::mem::take(self) {
                Items::One(first) => Some(first),
                Items::Two([first, second]) => {
                    *self = Items::One(second);
                    Some(first)
                }
                _ => None,
            },
        }
    }

    fn front(&self) -> Option<&Item> {
        match self {
            Items::One(x) | Items::Two([x, _]) => Some(x),
            Items::Many(Some(d)) => d.front(),
            Items::Many(None) => None,
        }
    }

    /// The newest item (items are in time order: the latest time).
    fn back(&self) -> Option<&Item> {
        match self {
            Items::One(x) | Items::Two([_, x]) => Some(x),
            Items::Many(Some(d)) => d.back(),
            Items::Many(None) => None,
        }
    }

    /// Whether an item is of time `at` (items are in time order: a binary search).
    fn holds_time(&self, at: Timestamp) -> bool {
        match self {
            Items::One(x) => x.time == at,
            Items::Two([x, y]) => x.time == at || y.time == at,
            Items::Many(Some(d)) => d.binary_search_by_key(&at, |i| i.time).is_ok(),
            Items::Many(None) => false,
        }
    }

    fn len(&self) -> usize {
        match self {
            Items::One(_) => 1,
            Items::Two(_) => 2,
            Items::Many(Some(d)) => d.len(),
            Items::Many(None) => 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the items `keep` says to, by their position (oldest first) and value.
    fn retain(&mut self, mut keep: impl FnMut(usize, &Item) -> bool) {
        match self {
            Items::One(x) => {
                if !keep(0, x) {
                    *self = Items::default();
                }
            }
            Items::Two([x, y]) => {
                let (kx, ky) = (keep(0, x), keep(1, y));
                if !(kx && ky)
                    && let Items::Two([x, y]) = std::mem::take(self)
                {
                    if kx {
                        *self = Items::One(x);
                    } else if ky {
                        *self = Items::One(y);
                    }
                }
            }
            Items::Many(Some(d)) => {
                let mut k = 0;
                d.retain(|i| {
                    k += 1;
                    keep(k - 1, i)
                });
            }
            Items::Many(None) => {}
        }
    }

    /// Each item, mutably, oldest first.
    fn for_each_mut(&mut self, mut f: impl FnMut(&mut Item)) {
        match self {
            Items::One(x) => f(x),
            Items::Two(two) => two.iter_mut().for_each(f),
            Items::Many(Some(ring)) => ring.iter_mut().for_each(f),
            Items::Many(None) => {}
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Item> {
        let (a, b): (&[Item], &[Item]) = match self {
            Items::One(x) => (std::slice::from_ref(x), &[]),
            Items::Two(two) => (two.as_slice(), &[]),
            Items::Many(Some(d)) => d.as_slices(),
            Items::Many(None) => (&[], &[]),
        };
        a.iter().chain(b)
    }
}

impl Serialize for Items {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Items {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Items, D::Error> {
        let v = Vec::<Item>::deserialize(d)?;
        let mut items = Items::default();
        for it in v {
            items.push_back(it);
        }
        Ok(items)
    }
}

/// What tells a partial match apart at one instant (see [`Run::mark`]).
type RunMark = (Option<u64>, u16, u16, u32);

/// The largest upper count of a `distinct` closure that keeps one event per value (see
/// `take`): replacing a value's older event scans the closure's events.
const ONE_PER_VALUE: u32 = 256;

/// The most shadow runs a group holds (a shadow partial match is one run per alternative it
/// reads, up to 24 for an `and` of five).
const MAX_SHADOW_RUNS: usize = 24;

/// Shadows are for a group's few partial matches: past this many runs (a flood) a group has
/// none (each event would look for each shadow's origin among them).
const SHADOW_GROUP_RUNS: usize = 64;

/// The bit of [`Run::alt`] that marks a shadow (see step F of `LinearState::on_event`): the
/// partial match an event would have started had an older one not taken it. Plans have at
/// most 256 alternatives, so the bit is free; a checkpoint keeps it.
const SHADOW: u16 = 0x8000;

/// The bit of [`Run::alt`] that marks a copy (see step E of `LinearState::on_event`): a
/// younger partial match's second reading, which took an event an older one took. It is part
/// of its partial match: it neither counts against `max_partial_matches` nor outlives it.
const COPY: u16 = 0x4000;

/// A partial match of one alternative.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// The alternative's index, and [`SHADOW`] for a shadow, [`COPY`] for a copy.
    alt: u16,
    /// The step the run waits on (or collects, for a closure with `count > 0`).
    pos: u16,
    count: u32,
    start: Timestamp,
    last_end: Timestamp,
    items: Items,
    /// Counts per distinct value, for `distinct` closures only (boxed: other runs have none).
    #[serde(with = "pairs", default)]
    #[allow(
        clippy::box_collection,
        reason = "one word, not three: a run stays small"
    )]
    distinct: Option<Box<BTreeMap<Value, u32>>>,
}

/// A wait's events or ids: inline for the common match of one or two events (`seq(a,
/// absent(b) for W)` makes a wait per start, dropped when `b` comes: two allocations less
/// each). Serialized as the `Vec` it replaced: the same sequence, in JSON and postcard.
type WaitVec<T> = SmallVec<[T; 2]>;

/// A completed match waiting for an absence at its end. (`end_waits` forgets a lone one
/// whose events it took: a field that owns memory must be let go there too.)
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Wait {
    alt: u16,
    deadline: Timestamp,
    events: WaitVec<Arc<Event>>,
    /// When the absence began (the match's last step): an awaited event after it, even late
    /// (within `allowed_lateness`), ends the wait. `None` in checkpoints made before it was
    /// kept: the last event's time then.
    #[serde(default)]
    from: Option<Timestamp>,
    /// The ids of the events it holds (all of them, where `events` keeps the last few): what
    /// a match consumes is told by id, as for partial matches. Empty in older checkpoints.
    #[serde(default, skip_serializing_if = "SmallVec::is_empty")]
    ids: WaitVec<u64>,
}

impl Wait {
    /// The wait of a match of one event (`ev`, numbered `id`, at `t`) for the absence after
    /// it, until `deadline`: what [`Run::into_wait_parts`] makes of its one-event run.
    fn lone(deadline: Timestamp, t: Timestamp, ev: &Arc<Event>, id: u64) -> Wait {
        let mut events = WaitVec::new();
        events.push(ev.clone());
        let mut ids = WaitVec::new();
        ids.push(id);
        Wait {
            alt: 0,
            deadline,
            events,
            from: Some(t),
            ids,
        }
    }

    fn from(&self) -> Timestamp {
        self.from
            .or_else(|| self.events.last().map(|e| e.time))
            .unwrap_or(Timestamp::MIN)
    }
}

/// Ends every wait of `waits` (as `Vec::clear`): a lone one holding nothing on the heap, the
/// common case (`seq(a, absent(b) for D)` makes one wait per start, ended by the next `b`),
/// without the drop glue's two calls, and none at all without a wait.
#[inline(always)]
fn end_waits(waits: &mut Vec<Wait>) {
    if let [w] = waits.as_mut_slice()
        && w.events.len() == 1
        && !w.events.spilled()
        && !w.ids.spilled()
    {
        drop(w.events.pop());
        // (What is left of it is inline and holds no event: nothing to drop, and forgetting
        // it spares moving it out.)
        std::mem::forget(waits.pop());
        return;
    }
    if !waits.is_empty() {
        waits.clear();
    }
}

/// What an open episode is waiting for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum EpisodeKind {
    /// An absence fired; the awaited events resolve it.
    Absence(EvSet),
    /// A closure matched; it ends after a window of quiet.
    Closure(EvSet),
}

/// An open (firing) alert of a group.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Episode {
    /// The episode's start (and rank among episodes of this group starting at the same
    /// instant): with the rule and group, the seed of the alert id.
    id: IdSeed,
    kind: EpisodeKind,
    /// Absence: the fired deadline. Closure: the time of the last extending event.
    last: Timestamp,
    events: Vec<Arc<Event>>,
    /// An absence that began within the rule's `trigger = { every = .. }` period of the
    /// group's last alert is held back until that period ends: it fires then if it is still
    /// open, and ends unseen (counted as suppressed) if it closes before.
    #[serde(default)]
    held_until: Option<Timestamp>,
    /// An absence at the end of a sequence: when it began (see [`Wait`]), so a late awaited
    /// event in between retracts it. `None` for absence-only rules, which keep their own.
    #[serde(default)]
    from: Option<Timestamp>,
    /// A `distinct` closure's episode: how many of `events`, at their front, are of the
    /// steps before the closure (kept whatever the closure's values).
    #[serde(default)]
    prefix: u16,
    /// How many events the episode took, all of them (`events` keeps the last few): the
    /// message's `{count}`. 0 in checkpoints made before it was kept (then `events` counts).
    #[serde(default)]
    count: u32,
}

impl Episode {
    /// How many events the episode took ([`Episode::count`], or, from an older checkpoint,
    /// those it holds).
    fn taken(&self) -> u32 {
        self.count.max(len_u32(self.events.len()))
    }

    /// A held-back absence still open when its period ends fires then (at that instant),
    /// and counts as the group's last alert (`last`).
    fn release(
        &mut self,
        ctx: &RuleCtx<'_>,
        key: &GroupKey,
        now: Timestamp,
        last: &mut Option<Timestamp>,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) {
        let Some(at) = self.held_until.filter(|&at| at <= now) else {
            return;
        };
        self.held_until = None;
        *last = Some(at);
        let reason = (at < ctx.outage_until).then_some(Reason::Outage);
        emit(
            ctx,
            key,
            self.id,
            AlertState::Firing,
            at,
            (self.events.clone(), self.taken()),
            reason,
            counters,
            out,
        );
    }
}

/// The state of one group of an absence-only rule.
///
/// Its two instants are one word each, [`NO_TIME`] for none (checkpointed as `null`, as the
/// `Option`s they were), and what only late events read is behind one pointer: then it fits
/// beside a linear group's state and a group's state is 40 bytes. `NO_TIME` is below every
/// time the engine sees, and the identity of the `max` both are read through, so none and
/// `NO_TIME` mean the same. Checkpointed flat ([`SavedAbsence`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(from = "SavedAbsence", into = "SavedAbsence")]
pub struct AbsenceState {
    /// The last awaited event (`NO_TIME`: none).
    last_seen: Timestamp,
    firing: Option<Box<Episode>>,
    /// When the group last alerted, for `trigger = { every = .. }` (`NO_TIME`: never).
    last_fired: Timestamp,
    /// What late events read, and a count's earlier events (`None`: nothing).
    late: Option<Box<AbsenceLate>>,
}

/// What only late awaited events of an absence group read.
#[derive(Clone, Debug)]
struct AbsenceLate {
    /// For `absent(x{n,})`: the awaited events before `last_seen` that it counts (the last
    /// `n - 1`, oldest first; none for a plain absence). Here, not beside `last_seen`: a
    /// group's state stays five words.
    before: VecDeque<Timestamp>,
    /// For `absent(x{n,})`, while fewer than `n` came: since when the group is watched, its
    /// first awaited event (a group found by its events) or when a reload listed it (`NO_TIME`:
    /// an expected group, from the start of monitoring).
    from: Timestamp,
    /// While firing: the latest awaited event that came late, stamped after the deadline
    /// (`NO_TIME`: none). Not matched, but if an earlier late one retracts the alert, the
    /// absence is re-armed from it: the engine knows the silence ended no earlier.
    after: Timestamp,
    /// The last alert an awaited event in time resolved, with when its silence began (only
    /// for rules with an `allowed_lateness`): a late awaited event stamped in that silence
    /// still turns it into `retracted` (DESIGN: a late event before a fired absence's deadline
    /// retracts that alert), as it does while it fires.
    resolved: Option<(Episode, Timestamp)>,
}

/// An absence group's state as checkpoints hold it (flat, as before [`AbsenceLate`]).
#[derive(Serialize, Deserialize)]
struct SavedAbsence {
    #[serde(with = "opt_time")]
    last_seen: Timestamp,
    firing: Option<Box<Episode>>,
    #[serde(with = "opt_time", default = "no_time")]
    last_fired: Timestamp,
    #[serde(with = "opt_time", default = "no_time")]
    late_after: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resolved: Option<Box<(Episode, Timestamp)>>,
    /// [`AbsenceLate::before`] (empty: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    before: Vec<Timestamp>,
    /// [`AbsenceLate::from`] (none: `NO_TIME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    count_from: Option<Timestamp>,
}

impl From<SavedAbsence> for AbsenceState {
    fn from(s: SavedAbsence) -> AbsenceState {
        let mut a = AbsenceState {
            last_seen: s.last_seen,
            firing: s.firing,
            last_fired: s.last_fired,
            late: None,
        };
        if !s.before.is_empty() {
            a.late_mut().before = s.before.into();
        }
        if let Some(t) = s.count_from {
            a.late_mut().from = t;
        }
        a.set_late_after(s.late_after);
        if let Some(r) = s.resolved {
            a.late_mut().resolved = Some(*r);
        }
        a
    }
}

impl From<AbsenceState> for SavedAbsence {
    fn from(a: AbsenceState) -> SavedAbsence {
        let late_after = a.late_after();
        let (resolved, before, count_from) = match a.late {
            Some(l) => (l.resolved.map(Box::new), Vec::from(l.before), opt(l.from)),
            None => (None, Vec::new(), None),
        };
        SavedAbsence {
            last_seen: a.last_seen,
            firing: a.firing,
            last_fired: a.last_fired,
            late_after,
            resolved,
            before,
            count_from,
        }
    }
}

fn no_time() -> Timestamp {
    NO_TIME
}

/// [`NO_TIME`] as `None`.
fn opt(t: Timestamp) -> Option<Timestamp> {
    (t != NO_TIME).then_some(t)
}

impl AbsenceState {
    /// Since when the absence is measured: the later of the last awaited event (for a count,
    /// `absent(x{n,})`, see [`AbsenceState::counted_since`]) and the start of monitoring.
    fn watched_since(&self, ctx: &RuleCtx<'_>) -> Timestamp {
        let seen = match ctx.plan.absence_min() {
            1 => self.last_seen,
            min => self.counted_since(min),
        };
        seen.max(ctx.monitor_start)
    }

    /// Since when a count (`absent(x{n,})`) is measured, before the start of monitoring is
    /// taken into account: its n-th newest awaited event if there were n (the count falls
    /// below n when that one leaves the window); with fewer, since it is watched
    /// ([`AbsenceLate::from`]: a group found by its events from its first, as an absence from
    /// its last; an expected one from the start of monitoring, or from when a reload listed
    /// it).
    fn counted_since(&self, min: u32) -> Timestamp {
        match &self.late {
            Some(l) if l.before.len() + 1 >= min as usize && self.last_seen != NO_TIME => {
                l.before.front().copied().unwrap_or(NO_TIME)
            }
            Some(l) => l.from,
            None => NO_TIME,
        }
    }

    /// An awaited event came at `t`; `min` is the `n` of `absent(x{n,})` (1 for a plain
    /// absence), whose last `n - 1` events before the newest are kept, and the group's first
    /// event the time it is watched from unless it is `expected`.
    fn saw(&mut self, t: Timestamp, min: u32, expected: bool) {
        if min <= 1 {
            self.last_seen = self.last_seen.max(t);
            return;
        }
        if self.last_seen == NO_TIME {
            if !expected && self.late.as_ref().is_none_or(|l| l.from == NO_TIME) {
                self.late_mut().from = t;
            }
            self.last_seen = t;
            return;
        }
        let last = self.last_seen;
        let b = &mut self.late_mut().before;
        if t >= last {
            b.push_back(last);
        } else {
            // (Not in time order: kept sorted.)
            let at = b.partition_point(|x| *x <= t);
            b.insert(at, t);
        }
        while b.len() >= min as usize {
            b.pop_front();
        }
        self.last_seen = last.max(t);
    }

    /// [`AbsenceLate::after`] (`NO_TIME`: none).
    fn late_after(&self) -> Timestamp {
        self.late.as_ref().map_or(NO_TIME, |l| l.after)
    }

    /// Sets [`AbsenceLate::after`]; the box goes when it holds nothing.
    fn set_late_after(&mut self, t: Timestamp) {
        if t != NO_TIME {
            self.late_mut().after = t;
        } else if let Some(l) = &mut self.late {
            l.after = NO_TIME;
            self.drop_empty_late();
        }
    }

    /// Lets the [`AbsenceLate`] box go when it holds nothing.
    fn drop_empty_late(&mut self) {
        if self.late.as_ref().is_some_and(|l| {
            l.after == NO_TIME && l.resolved.is_none() && l.before.is_empty() && l.from == NO_TIME
        }) {
            self.late = None;
        }
    }

    fn late_mut(&mut self) -> &mut AbsenceLate {
        self.late.get_or_insert_with(|| {
            Box::new(AbsenceLate {
                before: VecDeque::new(),
                from: NO_TIME,
                after: NO_TIME,
                resolved: None,
            })
        })
    }

    /// Drops the resolved alert kept for late events if its deadline is before `horizon`
    /// (the box goes when it holds nothing more).
    fn forget_resolved_before(&mut self, horizon: Timestamp) {
        let Some(l) = self.late.as_mut() else {
            return;
        };
        if l.resolved.as_ref().is_some_and(|(ep, _)| ep.last < horizon) {
            l.resolved = None;
            self.drop_empty_late();
        }
    }

    /// Takes the resolved alert whose silence `t` falls in, if any (the box goes when it
    /// holds nothing more).
    fn take_resolved_at(&mut self, t: Timestamp) -> Option<Episode> {
        let l = self.late.as_mut()?;
        let (ep, since) = l.resolved.as_ref()?;
        if !(t > *since && t <= ep.last) {
            return None;
        }
        let (ep, _) = l.resolved.take()?;
        self.drop_empty_late();
        Some(ep)
    }
}

/// The state of one group of a linear rule: as small as an absence group's (it lives inline
/// in the group's slot, so a delivery reads the slot and the runs, no box between), with what
/// most groups never need behind one pointer.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
pub struct LinearState {
    runs: Vec<Run>,
    episode: Option<Box<Episode>>,
    rare: Option<Box<Rare>>,
}

/// What a linear group holds only once it has waited, alerted or tracked a leading absence.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
struct Rare {
    waits: Vec<Wait>,
    /// Per event definition, when it last occurred (only for rules with a leading absence).
    last_seen: Vec<Option<Timestamp>>,
    last_emit: Option<Timestamp>,
    /// The last id seed taken (see `seeds`).
    last_seed: Option<IdSeed>,
    /// The id seeds taken that a later episode of the group may still start at the same
    /// instant as (see `LinearState::next_seed`): episodes do not begin in order (a match
    /// begins at its first event, an absence at the end at its deadline), so the last seed
    /// alone cannot tell a later one's rank. Empty in older checkpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    seeds: Vec<IdSeed>,
    /// Shadows may stand among the runs (set when one is made, cleared when none is left):
    /// a group that never had one pays nothing for them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    shadows: bool,
    /// The ids of events a start closure after a leading absence took that could not start
    /// a match themselves (an awaited event came within the absence's time before them):
    /// when the closure's window slides onto one, it goes too, so that the match's first
    /// event always has its absence before it (`seq(absent(x) for 10s, a{2,}, b) within 5s`
    /// over a@11 x@12 a@13 a@14 b@17 matches nothing). With their times and the alternative
    /// whose absence they break (another's may hold); none older than the closures' fronts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    bad_starts: Vec<(Timestamp, u64, u16)>,
}

impl Rare {
    /// Whether it plays no part in an event's transition that completes nothing (no wait to
    /// cancel, no leading-absence time to note, no shadow): what it holds then (the rate
    /// limit, the alert ids) is read only by a completion.
    fn inert(&self) -> bool {
        self.waits.is_empty() && self.last_seen.is_empty() && !self.shadows
    }

    /// Whether it holds nothing a later event or timer reads, at `now`: inert, with no alert
    /// id of its group begun at `now` (a later episode begins at `now` at the earliest, so an
    /// older seed can never give it the same id) and no rate limit still running. A group
    /// that has alerted is then no different from one that never did.
    fn spent(&self, ctx: &RuleCtx<'_>, now: Timestamp) -> bool {
        let limit_over = match (self.last_emit, &ctx.rule.trigger) {
            (None, _) | (_, Trigger::Event) => true,
            // (No period and no window: the period is an absence's duration; kept.)
            (Some(at), Trigger::Every(_)) => {
                every_period(ctx, None).is_some_and(|p| at.add(p) <= now)
            }
        };
        self.inert()
            && (self.seeds.iter().chain(&self.last_seed)).all(|&(at, _)| at < now)
            && limit_over
    }
}

/// Per-group state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum GroupState {
    /// Absence-only rule.
    Absence(AbsenceState),
    /// Linear rule.
    Linear(LinearState),
}

impl GroupState {
    /// Calls `f` on each event the state holds (partial matches, waits, episodes, a resolved
    /// absence kept for late events): how a restore makes one again an event a checkpoint
    /// saved once per holder ([`crate::engine::Checkpoint`]).
    pub(crate) fn each_event(&mut self, f: &mut impl FnMut(&mut Arc<Event>)) {
        let episode = |ep: &mut Episode, f: &mut dyn FnMut(&mut Arc<Event>)| {
            ep.events.iter_mut().for_each(f);
        };
        match self {
            GroupState::Absence(a) => {
                if let Some(ep) = &mut a.firing {
                    episode(ep, f);
                }
                if let Some((ep, _)) = a.late.as_mut().and_then(|l| l.resolved.as_mut()) {
                    episode(ep, f);
                }
            }
            GroupState::Linear(l) => {
                for r in &mut l.runs {
                    r.items.for_each_mut(|it| f(&mut it.ev));
                }
                if let Some(ep) = &mut l.episode {
                    episode(ep, f);
                }
                if let Some(rare) = &mut l.rare {
                    rare.waits
                        .iter_mut()
                        .for_each(|w| w.events.iter_mut().for_each(&mut *f));
                }
            }
        }
    }
}

/// A group's state, without its key: what a transition reads and writes. The engine keeps
/// the key apart (only alerts and lookups read it), so a group's slot is one cache line.
#[derive(Clone, Debug)]
pub struct Group {
    /// Listed in `expect` (never forgotten).
    pub expected: bool,
    /// An event of the group has come (an expected group may never have had one).
    pub heard: bool,
    /// Which group the engine's slot holds (bumped when a freed slot is reused; not saved).
    pub generation: u32,
    /// The last event of this group.
    pub last_activity: Timestamp,
    /// The state.
    pub state: GroupState,
}

/// A group as a checkpoint saves it: its key and state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SavedGroup {
    /// The key.
    pub key: GroupKey,
    /// Listed in `expect` (never forgotten).
    pub expected: bool,
    /// An event of the group has come (`true` in checkpoints made before it was kept).
    #[serde(default = "heard_before")]
    pub heard: bool,
    /// The last event of this group.
    pub last_activity: Timestamp,
    /// The state.
    pub state: GroupState,
}

/// A group saved before [`SavedGroup::heard`] was kept is taken as heard from (what a
/// reload did with all of them then).
fn heard_before() -> bool {
    true
}

impl SavedGroup {
    /// The saved form of group `g` under `key`.
    pub fn new(key: &GroupKey, g: &Group) -> SavedGroup {
        SavedGroup {
            key: key.clone(),
            expected: g.expected,
            heard: g.heard,
            last_activity: g.last_activity,
            state: g.state.clone(),
        }
    }

    /// The live group (generation 0) and its key.
    pub fn into_parts(self) -> (GroupKey, Group) {
        let g = Group {
            expected: self.expected,
            heard: self.heard,
            generation: 0,
            last_activity: self.last_activity,
            state: self.state,
        };
        (self.key, g)
    }
}

/// The most events one closure holds (see `take`).
pub const MAX_CLOSURE_ITEMS: usize = 4096;

/// Runs past their window are dropped when their group next sees an event or a timer (every
/// transition expires first, so nothing can match them); a timer is armed to drop them only
/// while the group's runs hold more than this many events. A window's end then costs no timer
/// for the common group with one or two short partial matches, and a group keeps at most this
/// many events past a window (until its next event, timer or `forget_after`).
pub const LAZY_EXPIRY_ITEMS: usize = 4;

fn cap_events(v: &mut Vec<Arc<Event>>) {
    if v.len() > MAX_ALERT_EVENTS {
        let extra = v.len() - MAX_ALERT_EVENTS;
        v.drain(..extra);
    }
}

impl Group {
    /// A new group; `seen` is the time of its first event (`None` for an expected group).
    pub fn new(ctx: &RuleCtx<'_>, expected: bool, now: Timestamp) -> Group {
        let state = match &*ctx.plan {
            Plan::Absence { .. } => GroupState::Absence(AbsenceState {
                last_seen: NO_TIME,
                firing: None,
                last_fired: NO_TIME,
                late: None,
            }),
            Plan::Linear { alts } => {
                let tracks = alts.iter().any(|a| a.start_absent.is_some());
                GroupState::Linear(LinearState {
                    rare: tracks.then(|| {
                        Box::new(Rare {
                            last_seen: vec![None; ctx.rule.events.len()],
                            ..Rare::default()
                        })
                    }),
                    ..LinearState::default()
                })
            }
        };
        Group {
            expected,
            heard: !expected,
            generation: 0,
            last_activity: now,
            state,
        }
    }

    /// An absence group is watched from `t` (it was not before): its deadline counts from
    /// there, not from when the rule began monitoring (a count's, `absent(x{n,})` with
    /// `min` above 1, while fewer than `n` came).
    pub fn watch_from(&mut self, t: Timestamp, min: u32) {
        if let GroupState::Absence(a) = &mut self.state {
            if min > 1 {
                let from = &mut a.late_mut().from;
                *from = (*from).max(t);
            } else {
                a.last_seen = a.last_seen.max(t);
            }
        }
    }

    /// Partial matches that can still complete at `now` (runs inside the window, and waits),
    /// counted as `max_partial_matches` counts them, a copy being part of its partial match,
    /// except that a shadow counts once its origin is gone;
    /// runs past their window may still be held (see [`LAZY_EXPIRY_ITEMS`]).
    pub fn partial_matches(&self, ctx: &RuleCtx<'_>, now: Timestamp) -> usize {
        match &self.state {
            GroupState::Absence(_) => 0,
            GroupState::Linear(l) => {
                let live = |r: &Run| match (ctx.wmax(), &*ctx.plan) {
                    (Some(w), Plan::Linear { alts }) => {
                        r.live(&alts[r.alt_id() as usize], now.sub(w), ctx.slides)
                    }
                    _ => true,
                };
                // A shadow's origin: a live partial match holding its first event as a later one.
                let orphaned =
                    |s: &Run| s.items.front().is_none_or(|f| !l.origin_lives(f.id, live));
                let runs = l
                    .runs
                    .iter()
                    .filter(|r| live(r) && !r.is_copy() && (!r.is_shadow() || orphaned(r)))
                    .count();
                runs + l.waits().len()
            }
        }
    }

    /// Drops the partial matches that can no longer complete at `now` (past the window): what
    /// the group's next transition would drop first, done now, so that their events are let
    /// go (a group holding a few runs keeps them past the window otherwise, see
    /// [`LAZY_EXPIRY_ITEMS`]). Changes no alert: nothing later can match them.
    /// Returns whether it dropped any.
    pub fn drop_expired(&mut self, ctx: &RuleCtx<'_>, now: Timestamp) -> bool {
        if let (GroupState::Linear(l), Plan::Linear { alts }, Some(w)) =
            (&mut self.state, &*ctx.plan, ctx.wmax())
            && !l.runs.is_empty()
        {
            let before = l.runs.len();
            l.expire(alts, now, w, ctx.slides);
            return l.runs.len() < before;
        }
        false
    }

    /// About how many bytes the events its partial matches and waits hold take: each item,
    /// and its event with the event's text (shared with the event's other holders); for an
    /// absence, what it keeps for late events and a count.
    pub fn held_bytes(&self) -> usize {
        match &self.state {
            // (A count's earlier events: their times.)
            GroupState::Absence(a) => a.late.as_ref().map_or(0, |l| {
                std::mem::size_of::<AbsenceLate>()
                    + l.before.capacity() * std::mem::size_of::<Timestamp>()
            }),
            GroupState::Linear(l) => {
                let runs = l.runs.iter().flat_map(|r| r.items.iter().map(|i| &i.ev));
                let waits = l.waits().iter().flat_map(|w| w.events.iter());
                runs.chain(waits).map(|e| 96 + e.heap_bytes()).sum()
            }
        }
    }

    /// A sum of words from each part of memory a transition of this group reads first (the
    /// runs and the oldest event they hold), so an engine can load several groups' memory at
    /// once before their transitions run one after another. Reads only.
    pub fn touch(&self) -> u64 {
        let mut sum = self.last_activity.0 as u64;
        if let GroupState::Linear(l) = &self.state
            && let (Some(first), Some(last)) = (l.runs.first(), l.runs.last())
        {
            sum = sum
                .wrapping_add(first.start.0 as u64)
                .wrapping_add(last.last_end.0 as u64);
            if let Some(it) = first.items.front() {
                sum = sum.wrapping_add(Arc::strong_count(&it.ev) as u64);
            }
        }
        sum
    }

    /// Whether an alert of this group is firing (an episode held back by the rule's trigger
    /// period is not, until its alert is out).
    pub fn firing(&self) -> bool {
        self.open_episode().is_some()
    }

    /// Feeds one event at `t` that matched the definitions in `mask`. Returns whether the
    /// group is left with nothing of its own to wake for (then its next wake is its
    /// forgetting, see [`Group::forget_wake`]); `false` says only that it may have.
    pub fn on_event(
        &mut self,
        ctx: &RuleCtx<'_>,
        key: &GroupKey,
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) -> bool {
        self.heard_at(t, counters);
        match (&mut self.state, &*ctx.plan) {
            (GroupState::Absence(a), Plan::Absence { set, for_, min }) => {
                if mask & set == 0 {
                    return false;
                }
                let silent_since = a.watched_since(ctx);
                a.saw(t, *min, self.expected);
                // (A count's alert goes on until n are back within D, not at the first.)
                if *min > 1 && a.watched_since(ctx).add(*for_) <= t {
                    return false;
                }
                if a.late.is_some() {
                    a.set_late_after(NO_TIME);
                    // A resolved alert no late event can reach any more (stamped at or before
                    // its deadline, yet not more than `allowed_lateness` below this one's
                    // time) goes.
                    a.forget_resolved_before(t.sub(ctx.rule.allowed_lateness));
                }
                if let Some(ep) = a.firing.take() {
                    end_by_event(ctx, key, &ep, AlertState::Resolved, t, ev, counters, out);
                    // (A held-back absence resolved unseen has nothing to retract.)
                    if ctx.rule.allowed_lateness > Duration::ZERO && ep.held_until.is_none() {
                        a.late_mut().resolved = Some((*ep, silent_since));
                    }
                }
                false
            }
            (GroupState::Linear(l), Plan::Linear { alts }) => {
                l.on_event(ctx, alts, key, t, mask, ev, id, counters, out)
            }
            _ => false,
        }
    }

    /// [`Group::on_event`] for the common start of a plan with a [`Lean`] form, without its
    /// general dispatch: a group with no episode and nothing in [`Rare`] that an event acts
    /// on, whose partial matches have all passed the window, and an event that starts at
    /// most one alternative ([`LinearState::fresh`] then restarts the old run in place, or
    /// drops what it holds). Returns `None`, having changed nothing, in any other case,
    /// else the group's next wake (its forgetting: it is left with nothing of its own).
    #[inline(always)]
    pub fn on_fresh(
        &mut self,
        ctx: &RuleCtx<'_>,
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
    ) -> Option<Option<Timestamp>> {
        // (Each form its own copy of `on_start`: whether the first step is a closure, and for
        // one alternative which it starts, are constants there.)
        match ctx.lean {
            Lean::Off => None,
            Lean::Absence(set, for_) => self.on_awaited(ctx, t, mask, set, for_, counters),
            Lean::Single(step, end, after) => {
                self.on_single(ctx, t, mask, (step, end, after), ev, id, counters)
            }
            Lean::Throttled(step, period) => {
                self.on_throttled(ctx, t, mask, step, period, counters)
            }
            Lean::One(a, w) => self.on_start::<false>(
                ctx,
                t,
                w,
                mask,
                (mask & a != 0).then_some(0),
                ev,
                id,
                counters,
            ),
            Lean::Closure(a, w) => self.on_start::<true>(
                ctx,
                t,
                w,
                mask,
                (mask & a != 0).then_some(0),
                ev,
                id,
                counters,
            ),
            Lean::Two(a, b, w) => {
                let start = match (mask & a != 0, mask & b != 0) {
                    (true, true) => {
                        return self.on_both(ctx.facts, ctx.outage_until, t, w, ev, id, counters);
                    }
                    (true, false) => Some(0),
                    (false, true) => Some(1),
                    (false, false) => None,
                };
                self.on_start::<false>(ctx, t, w, mask, start, ev, id, counters)
            }
        }
    }

    /// [`Group::on_fresh`] for the forms that start an alternative (`start`, or none: the
    /// event only ends what has passed the window `w` long), whose first step is a closure
    /// if `CLOSURE` (an event of `mask` that finds a live collector: [`Group::on_collect`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn on_start<const CLOSURE: bool>(
        &mut self,
        ctx: &RuleCtx<'_>,
        t: Timestamp,
        w: Duration,
        mask: EvSet,
        start: Option<u16>,
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
    ) -> Option<Option<Timestamp>> {
        let GroupState::Linear(l) = &mut self.state else {
            return None;
        };
        if l.episode.is_some() || l.rare.as_ref().is_some_and(|r| !r.inert()) {
            return None;
        }
        let horizon = t.sub(w);
        // Which runs are live ([`Run::live`]): with plain first steps, while their start is in
        // the window; with a closure first that does not slide, a collector while one of its
        // events is: its newest, as a group's events come in time order (the arrival clock
        // never goes back, an event-time lane releases in time order, its late events take
        // `on_late`) and a collector here loses events only from its front (no `distinct`
        // in a simple plan).
        let live = |r: &Run| {
            if CLOSURE && r.pos == 0 && r.count > 0 {
                r.items.back().is_some_and(|i| i.time >= horizon)
            } else {
                r.start >= horizon
            }
        };
        // (One run, the common case, tested and restarted without a loop.)
        match (start, l.runs.as_mut_slice()) {
            (_, [old]) if CLOSURE && live(old) => {
                return self.on_collect(
                    ctx.facts,
                    ctx.outage_until,
                    t,
                    w,
                    horizon,
                    mask,
                    ev,
                    id,
                    counters,
                );
            }
            (Some(alt), [old]) if !CLOSURE && live(old) => {
                return self.on_another(
                    ctx.facts,
                    ctx.outage_until,
                    t,
                    mask,
                    alt,
                    ev,
                    id,
                    counters,
                );
            }
            (_, [old]) if live(old) => return None,
            (Some(alt), [old]) => old.restart_as(alt, CLOSURE, t, id, ev),
            (_, [_]) => {
                if let Some(old) = l.runs.pop() {
                    old.let_go();
                }
            }
            (_, runs) if runs.iter().any(live) => return None,
            (None, _) => l.runs.clear(),
            (Some(alt), _) => {
                l.runs.clear();
                if l.runs.capacity() == 0 {
                    l.runs.reserve_exact(1);
                }
                l.runs.push(Run::first_as(alt, CLOSURE, t, id, ev));
            }
        }
        self.heard_at(t, counters);
        Some(self.forget_wake(ctx))
    }

    /// [`Group::on_fresh`] for a plan of [`Lean::Two`] (the window `w` long) and an event that
    /// starts both alternatives (`and(a, b)` over an event that is both): when no partial match
    /// is live, what the general transition does, the old runs gone and one new run in each
    /// alternative, in order (one partial match read both ways). `None`, having changed
    /// nothing, in any other case. Out of line: few events are of both.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn on_both(
        &mut self,
        facts: &RuleFacts,
        outage_until: Timestamp,
        t: Timestamp,
        w: Duration,
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
    ) -> Option<Option<Timestamp>> {
        // (The context made here, as in `on_collect`: the caller's stays in registers.)
        let ctx = &RuleCtx {
            facts,
            outage_until,
        };
        let GroupState::Linear(l) = &mut self.state else {
            return None;
        };
        // (Two runs within `max_partial_matches`, else the general transition evicts.)
        if ctx.max_partial < 2 || l.episode.is_some() || l.rare.as_ref().is_some_and(|r| !r.inert())
        {
            return None;
        }
        // (Plain first steps: a run is live while its start is in the window.)
        let horizon = t.sub(w);
        if l.runs.iter().any(|r| r.start >= horizon) {
            return None;
        }
        l.runs.clear();
        if l.runs.capacity() == 0 {
            l.runs.reserve_exact(1);
        }
        l.runs.push(Run::first_as(0, false, t, id, ev));
        l.runs.push(Run::first_as(1, false, t, id, ev));
        self.heard_at(t, counters);
        Some(self.next_wake(ctx))
    }

    /// [`Group::on_fresh`] for a plan of [`Lean::One`] or [`Lean::Two`] whose one partial
    /// match is live and an event that starts alternative `alt` (another `a` of `seq(a, b)`
    /// while the first waits for its `b`): when the partial match cannot take the event (no
    /// step of it from where it stands is of the event), what the general transition does, a
    /// second run begun behind it, within `max_partial_matches`. `None`, having changed
    /// nothing, in any other case. Out of line: most starts find no live partial match.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn on_another(
        &mut self,
        facts: &RuleFacts,
        outage_until: Timestamp,
        t: Timestamp,
        mask: EvSet,
        alt: u16,
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
    ) -> Option<Option<Timestamp>> {
        let ctx = &RuleCtx {
            facts,
            outage_until,
        };
        let (GroupState::Linear(l), Plan::Linear { alts }) = (&mut self.state, &*ctx.plan) else {
            return None;
        };
        let [old] = l.runs.as_slice() else {
            return None;
        };
        // (A step it stands at or any after: a closure that is satisfied moves on to the next.)
        let ahead = alts
            .get(usize::from(old.alt_id()))?
            .steps
            .get(usize::from(old.pos)..)?;
        if ctx.max_partial < 2 || old.is_shadow() || ahead.iter().any(|s| s.set & mask != 0) {
            return None;
        }
        l.runs.push(Run::first_as(alt, false, t, id, ev));
        self.heard_at(t, counters);
        Some(self.next_wake(ctx))
    }

    /// [`Group::on_fresh`] for an event that finds the group's one partial match a live
    /// collector (at its first step, a closure, of a plan of [`Lean::Closure`], the window `w`
    /// long, beginning at `horizon`): what the general transition then does when the closure
    /// has no upper count and the event neither completes the match nor moves it on (the
    /// events the window passed go; an event of the closure joins, the oldest going past the
    /// cap; the next wake as [`Group::next_wake`] finds it). `None`, having changed nothing,
    /// in any other case. Out of line: most deliveries find no live collector.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn on_collect(
        &mut self,
        facts: &RuleFacts,
        outage_until: Timestamp,
        t: Timestamp,
        w: Duration,
        horizon: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
    ) -> Option<Option<Timestamp>> {
        // (The context made here, not by the caller: it stays in registers on the deliveries'
        // way, which most deliveries take without coming here.)
        let ctx = &RuleCtx {
            facts,
            outage_until,
        };
        let (GroupState::Linear(l), Plan::Linear { alts }) = (&mut self.state, &*ctx.plan) else {
            return None;
        };
        let ([alt], [r]) = (alts.as_slice(), l.runs.as_mut_slice()) else {
            return None;
        };
        let step = &alt.steps[0];
        let rep = step.repeat.as_ref()?;
        if rep.max.is_some() || rep.distinct.is_some() || r.pos != 0 || r.count == 0 {
            return None;
        }
        // What `expire` lets go (the events before the window, each taking one off the
        // count), then what `take` does: a satisfied closure moves on to an event of its next
        // step (not here), else an event of the closure joins it (the oldest going at the cap
        // of a collector `take` reckons for a plan of one alternative with no upper count, no
        // `distinct`, no least distance and no absence), and an event of neither is let be.
        let gone = r.items.iter().take_while(|i| i.time < horizon).count();
        let left = r.items.len() - gone;
        let min = rep.min;
        let kept = r.count.saturating_sub(len_u32(gone));
        let moves = alt.steps.get(1).is_some_and(|s| s.set & mask != 0);
        if left == 0 || (moves && kept >= min) {
            // Not live after all, or the closure moves on: the general transition.
            return None;
        }
        let gathers = step.set & mask != 0;
        let full = gathers && {
            let min = min as usize;
            let cap = if ctx.counts {
                MAX_CLOSURE_ITEMS.max(min.min(100_000) * 2)
            } else {
                min.clamp(MAX_ALERT_EVENTS, 100_000)
            };
            left >= cap
        };
        if gathers && alt.steps.len() == 1 {
            let count = kept.saturating_sub(u32::from(full)).saturating_add(1);
            if count >= min {
                // The closure's match completes (an episode begins).
                return None;
            }
        }
        for _ in 0..gone + usize::from(full) {
            r.pop_front(step);
        }
        if gathers {
            r.push(
                step,
                Item {
                    time: t,
                    id,
                    ev: ev.clone(),
                    dv: None,
                },
            );
            r.count = r.count.saturating_add(1);
        }
        // (As `LinearState::next_wake` finds the group: no wait, no episode, one run.)
        let own = (r.items.len() > LAZY_EXPIRY_ITEMS).then(|| r.start.add(w).add(Duration(1)));
        self.heard_at(t, counters);
        Some(self.wake_with(ctx, own))
    }

    /// [`Group::on_fresh`] for an absence ([`Lean::Absence`]) that is not firing and keeps
    /// nothing for late events: what [`Group::on_event`] and [`Group::next_wake`] do then
    /// (an awaited event moves the silence's start; the next wake is its deadline or the
    /// group's forgetting). `None`, having changed nothing, in any other case.
    #[inline(always)]
    fn on_awaited(
        &mut self,
        ctx: &RuleCtx<'_>,
        t: Timestamp,
        mask: EvSet,
        set: EvSet,
        for_: Duration,
        counters: &mut RuleCounters,
    ) -> Option<Option<Timestamp>> {
        let GroupState::Absence(a) = &mut self.state else {
            return None;
        };
        if a.firing.is_some() || a.late.is_some() {
            return None;
        }
        if mask & set != 0 {
            a.last_seen = a.last_seen.max(t);
        }
        // (A plain absence: counts take the general transition.)
        let deadline = a.last_seen.max(ctx.monitor_start).add(for_);
        self.heard_at(t, counters);
        Some(self.wake_with(ctx, Some(deadline)))
    }

    /// [`Group::on_fresh`] for a one-step plan ([`Lean::Single`]) whose group holds no
    /// episode, no run and nothing of a leading absence or shadow, in the cases of
    /// [`LinearState::single`] and the general transition that make no alert: an awaited
    /// event alone (the waits end), an event of the step while a wait for the absence after
    /// it is pending (nothing changes) or while none is (its wait begins, `after` long), and
    /// an event of both (the waits end, its own begins). (A match the rate limit
    /// suppresses takes [`Group::on_throttled`].) `None`, having changed nothing, in any other
    /// case.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn on_single(
        &mut self,
        ctx: &RuleCtx<'_>,
        t: Timestamp,
        mask: EvSet,
        (step, end, after): (EvSet, EvSet, Duration),
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
    ) -> Option<Option<Timestamp>> {
        let GroupState::Linear(l) = &mut self.state else {
            return None;
        };
        if l.episode.is_some()
            || !l.runs.is_empty()
            || l.rare
                .as_ref()
                .is_some_and(|r| r.shadows || !r.last_seen.is_empty())
        {
            return None;
        }
        let (starts, ends) = (mask & step != 0, mask & end != 0);
        if ends && let Some(rare) = &mut l.rare {
            // (One alternative: every wait is its own, and the event ends them all, before it
            // starts anything: an event of both the step and the absence breaks the waits,
            // then waits itself, as the general transition's steps B and F have it.)
            end_waits(&mut rare.waits);
        }
        let own = match (starts, ends) {
            (false, true) => None,
            (true, _) if end != 0 => match l.waits().iter().map(|w| w.deadline).min() {
                Some(first) => Some(first),
                None => {
                    // The match waits for the absence, as `LinearState::finish` makes it
                    // wait (one alternative, no episode, no wait pending).
                    let deadline = t.add(after);
                    l.rare().waits.push(Wait::lone(deadline, t, ev, id));
                    Some(deadline)
                }
            },
            // (A match of a plan with no absence at its end: its rule has no rate limit, those
            // with one take `on_throttled`, so it alerts.)
            _ => return None,
        };
        self.heard_at(t, counters);
        Some(self.wake_with(ctx, own))
    }

    /// [`Group::on_fresh`] for a one-step plan whose alerts the rule limits
    /// ([`Lean::Throttled`]): [`Group::on_single`]'s match the rate limit suppresses (its id
    /// seed still taken), with the period read from the plan's form. `None`, having changed
    /// nothing, in any other case.
    #[inline(always)]
    fn on_throttled(
        &mut self,
        ctx: &RuleCtx<'_>,
        t: Timestamp,
        mask: EvSet,
        step: EvSet,
        period: Duration,
        counters: &mut RuleCounters,
    ) -> Option<Option<Timestamp>> {
        let GroupState::Linear(l) = &mut self.state else {
            return None;
        };
        // (A group that never alerted has no rate limit running, nor anything in `Rare`.)
        let rare = l.rare.as_deref_mut()?;
        if mask & step == 0
            || l.episode.is_some()
            || !l.runs.is_empty()
            || rare.shadows
            || !rare.last_seen.is_empty()
            || t >= rare.last_emit?.add(period)
        {
            return None;
        }
        l.next_seed_lone(t);
        counters.suppressed += 1;
        self.heard_at(t, counters);
        Some(self.forget_wake(ctx))
    }

    /// Whether its timer, coming due before [`Group::next_wake`], would change nothing and
    /// arm that wake (what lets the wheel move its entry there without the firing path): an
    /// absence's, or a linear group's that holds no partial match (its timer would drop the
    /// ones past the window) and no start a leading absence broke (dropped with them).
    pub fn timer_idle(&self) -> bool {
        match &self.state {
            GroupState::Absence(_) => true,
            GroupState::Linear(l) => {
                l.runs.is_empty() && l.rare.as_ref().is_none_or(|r| r.bad_starts.is_empty())
            }
        }
    }

    /// The group's next wake when it has nothing of its own to wake for: its forgetting
    /// (none for a group listed in `expect`).
    #[inline]
    pub fn forget_wake(&self, ctx: &RuleCtx<'_>) -> Option<Timestamp> {
        (!self.expected).then(|| self.last_activity.add(ctx.forget_after))
    }

    /// A late event (within `allowed_lateness`) of an absence rule: retracts a fired absence
    /// whose deadline it falls before, or moves a deadline that has not fired yet. Returns
    /// whether the group's deadline changed.
    pub fn on_late(
        &mut self,
        ctx: &RuleCtx<'_>,
        key: &GroupKey,
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        now: Timestamp,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) -> bool {
        self.heard = true;
        // (A count, `absent(x{n,})`, never comes here: its plan refuses `allowed_lateness`,
        // and without it the engine takes no late event.)
        let (a, set) = match (&mut self.state, &*ctx.plan) {
            (GroupState::Absence(a), Plan::Absence { set, .. }) => (a, *set),
            (GroupState::Linear(l), Plan::Linear { alts }) => {
                return l.on_late(ctx, alts, key, t, mask, ev, now, counters, out);
            }
            _ => return false,
        };
        if mask & set == 0 {
            return false;
        }
        // An alert an awaited event in time resolved, whose silence this one falls in: it
        // should not have fired.
        if let Some(ep) = a.take_resolved_at(t) {
            if ep.held_until.is_none() && a.last_fired == ep.last {
                // A withdrawn alert does not count against the trigger's period.
                a.last_fired = NO_TIME;
            }
            end_by_event(ctx, key, &ep, AlertState::Retracted, now, ev, counters, out);
            return false;
        }
        let base = a.watched_since(ctx);
        let Some(ep) = &a.firing else {
            // Not fired yet: the late event still moves the deadline (arriving after the
            // absence fired would have retracted it; arriving earlier must not fire it).
            if t <= base {
                return false;
            }
            a.last_seen = t;
            return true;
        };
        // An `a` at the deadline itself was in time (in order it keeps the alert from firing).
        if t <= base {
            return false;
        }
        if t > ep.last {
            let after = a.late_after().max(t);
            a.set_late_after(after);
            return false;
        }
        let Some(ep) = a.firing.take() else {
            return false;
        };
        // Re-armed from the latest `a` known, this one or one that came late before it.
        a.last_seen = t.max(a.late_after());
        a.set_late_after(NO_TIME);
        if ep.held_until.is_none() {
            // A withdrawn alert does not count against the trigger's period.
            a.last_fired = NO_TIME;
        }
        end_by_event(ctx, key, &ep, AlertState::Retracted, now, ev, counters, out);
        true
    }

    /// Fires what is due at `now`; returns whether the group should be dropped (forgotten).
    pub fn on_timer(
        &mut self,
        ctx: &RuleCtx<'_>,
        key: &GroupKey,
        now: Timestamp,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) -> bool {
        match (&mut self.state, &*ctx.plan) {
            (GroupState::Absence(a), Plan::Absence { for_, .. }) => {
                let deadline = a.watched_since(ctx).add(*for_);
                if a.firing.is_none() && deadline <= now {
                    // A lone absence's episodes never share a start: each next deadline is
                    // after the event that ended the previous one.
                    let id = (deadline, 0);
                    let held_until = held_until(ctx, opt(a.last_fired), deadline, Some(*for_));
                    if held_until.is_none() {
                        let reason = (deadline < ctx.outage_until).then_some(Reason::Outage);
                        emit(
                            ctx,
                            key,
                            id,
                            AlertState::Firing,
                            deadline,
                            (Vec::new(), 0),
                            reason,
                            counters,
                            out,
                        );
                        a.last_fired = deadline;
                    }
                    a.firing = Some(Box::new(Episode {
                        id,
                        kind: EpisodeKind::Absence(0),
                        last: deadline,
                        events: Vec::new(),
                        held_until,
                        from: None,
                        prefix: 0,
                        count: 0,
                    }));
                }
                if let Some(ep) = a.firing.as_mut() {
                    let mut last = opt(a.last_fired);
                    ep.release(ctx, key, now, &mut last, counters, out);
                    a.last_fired = last.unwrap_or(NO_TIME);
                }
            }
            (GroupState::Linear(l), Plan::Linear { alts }) => {
                l.on_timer(ctx, alts, key, now, counters, out)
            }
            _ => {}
        }
        let forget_at = self.last_activity.add(ctx.forget_after);
        if !self.expected && forget_at <= now {
            self.forget(ctx, key, forget_at, counters, out);
            return true;
        }
        false
    }

    /// Whether the group holds nothing at `now` that a later event or timer could see: a
    /// discovered linear group with no episode, no wait, no leading-absence time, no rate
    /// limit still running, no alert begun at `now` (whose id a new episode's could repeat),
    /// and only partial matches past their window (its next transition would drop them). Such
    /// a group is no different from none, so a full `max_groups` may let it go.
    pub fn idle_at(&self, ctx: &RuleCtx<'_>, now: Timestamp) -> bool {
        let (GroupState::Linear(l), Plan::Linear { alts }) = (&self.state, &*ctx.plan) else {
            return false;
        };
        if l.episode.is_some() || l.rare.as_ref().is_some_and(|r| !r.spent(ctx, now)) {
            return false;
        }
        match ctx.wmax() {
            None => l.runs.is_empty(),
            Some(w) => {
                let horizon = now.sub(w);
                !l.runs
                    .iter()
                    .any(|r| r.live(&alts[r.alt_id() as usize], horizon, ctx.slides))
            }
        }
    }

    /// The group is dropped (silent for `forget_after`, or retired by hand): an open alert is
    /// resolved with reason `forgotten`.
    pub fn forget(
        &mut self,
        ctx: &RuleCtx<'_>,
        key: &GroupKey,
        at: Timestamp,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) {
        let firing = match &mut self.state {
            GroupState::Absence(a) => {
                a.set_late_after(NO_TIME);
                a.firing.take()
            }
            GroupState::Linear(l) => l.episode.take(),
        };
        if firing.as_ref().is_some_and(|ep| ep.held_until.is_some()) {
            counters.suppressed += 1;
        } else if let Some(ep) = firing {
            // With the episode's events, so the message is filled as the firing one was.
            let count = ep.taken();
            emit(
                ctx,
                key,
                ep.id,
                AlertState::Resolved,
                at,
                (ep.events, count),
                Some(Reason::Forgotten),
                counters,
                out,
            );
        }
        counters.forgotten += 1;
    }

    /// The group's open episode (an alert firing, not held back), if any.
    fn open_episode(&self) -> Option<&Episode> {
        let ep = match &self.state {
            GroupState::Absence(a) => a.firing.as_deref(),
            GroupState::Linear(l) => l.episode.as_deref(),
        };
        ep.filter(|e| e.held_until.is_none())
    }

    /// At a reload, rules stop or start sharing this group's state: the open alert, if any,
    /// is resolved (`reason`) for the rules in `ctx.members` that leave, or announced
    /// (`Firing`, at `at`) for those that join, so each rule's alerts stay a lifecycle of
    /// their own. The episode itself goes on.
    pub fn members_change(
        &self,
        ctx: &RuleCtx<'_>,
        key: &GroupKey,
        at: Timestamp,
        state: AlertState,
        reason: Option<Reason>,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) {
        let Some(ep) = self.open_episode() else {
            return;
        };
        // The episode's events, also when it is resolved for the rules that leave: the message
        // is filled from them (`{user}` would stay a placeholder with none).
        emit(
            ctx,
            key,
            ep.id,
            state,
            at,
            (ep.events.clone(), ep.taken()),
            reason,
            counters,
            out,
        );
    }

    /// When this group next needs a timer (`None`: never).
    pub fn next_wake(&self, ctx: &RuleCtx<'_>) -> Option<Timestamp> {
        let own = match (&self.state, &*ctx.plan) {
            (GroupState::Absence(a), Plan::Absence { for_, .. }) => match &a.firing {
                None => Some(a.watched_since(ctx).add(*for_)),
                Some(ep) => ep.held_until,
            },
            (GroupState::Linear(l), Plan::Linear { .. }) => l.next_wake(ctx),
            _ => None,
        };
        self.wake_with(ctx, own)
    }

    /// The group's next wake when its state's own is `own`: the earlier of it and its
    /// forgetting.
    #[inline(always)]
    fn wake_with(&self, ctx: &RuleCtx<'_>, own: Option<Timestamp>) -> Option<Timestamp> {
        match (own, self.forget_wake(ctx)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// An event of the group came at `t`: its last activity, and counted as matched.
    #[inline(always)]
    fn heard_at(&mut self, t: Timestamp, counters: &mut RuleCounters) {
        self.last_activity = self.last_activity.max(t);
        self.heard = true;
        counters.matched += 1;
    }
}

/// The rule's rate-limit period (`trigger = { every = D }`): D, capped by the window; no D
/// means the window, or `fallback` (an absence's duration) without one.
fn every_period(ctx: &RuleCtx<'_>, fallback: Option<Duration>) -> Option<Duration> {
    period_of(&ctx.rule.trigger, ctx.wmax(), fallback)
}

/// [`every_period`] of a rule whose trigger is `trigger` and window `wmax` long (if any).
fn period_of(
    trigger: &Trigger,
    wmax: Option<Duration>,
    fallback: Option<Duration>,
) -> Option<Duration> {
    let Trigger::Every(period) = *trigger else {
        return None;
    };
    // DESIGN: no period, or one longer than the window, means the window.
    Some(match (period, wmax) {
        (Some(p), Some(w)) => p.min(w),
        (p, w) => p.or(w).or(fallback).unwrap_or(Duration::ZERO),
    })
}

/// When an episode beginning at `t` may be alerted, if the rate limit holds it back: the end
/// of the period of the group's last alert, when `t` falls within it.
fn held_until(
    ctx: &RuleCtx<'_>,
    last: Option<Timestamp>,
    t: Timestamp,
    fallback: Option<Duration>,
) -> Option<Timestamp> {
    let until = last?.add(every_period(ctx, fallback)?);
    (t < until).then_some(until)
}

/// Whether a run of one event of `alt`'s first step is a match already: one step, plain or
/// a closure of at most one.
#[inline]
fn completes_at_once(alt: &Alt) -> bool {
    alt.steps.len() == 1 && alt.steps[0].repeat.as_ref().is_none_or(|r| r.min <= 1)
}

/// Whether an event of `mask` begins a shadow in `alt`: its first step, of two or more, all
/// plain (a shadow that, once alone, collected for a closure would be the oldest there and
/// keep what younger partial matches need: closures have no copies), no absence at either end.
fn shadow_alt(alt: &Alt, mask: EvSet) -> bool {
    alt.steps[0].set & mask != 0
        && alt.steps.len() >= 2
        && alt.steps.iter().all(|s| s.repeat.is_none())
        && alt.start_absent.is_none()
        && alt.end_absent.is_none()
}

/// A step before the last on which an event can move a partial match along without
/// completing it, so that a younger one waiting there gets a copy: a plain step, or a closure
/// in the middle (one at the start slides instead: its window may begin at any event).
fn copy_step(alt: &Alt, pos: u16) -> bool {
    (pos as usize) + 1 < alt.steps.len() && (pos > 0 || alt.steps[pos as usize].repeat.is_none())
}

fn effective_count(r: &Run, step: &Step) -> u32 {
    match step.repeat.as_ref().and_then(|rep| rep.distinct.as_ref()) {
        Some(_) => r.distinct.as_ref().map_or(0, |d| d.len()) as u32,
        None => r.count,
    }
}

fn guard_ok(step: &Step, r: &Run, t: Timestamp) -> bool {
    match &step.guard {
        Some((_, Some(d))) => t >= r.last_end.add(*d),
        _ => true,
    }
}

impl Run {
    /// Takes `item` as the first event of `step`, the step it waits on: a closure counts it,
    /// a plain step is passed.
    fn enter(&mut self, step: &Step, item: Item) {
        self.push(step, item);
        if step.repeat.is_some() {
            self.count = 1;
        } else {
            self.pos += 1;
        }
    }

    fn push(&mut self, step: &Step, item: Item) {
        if step.repeat.as_ref().is_some_and(|r| r.distinct.is_some())
            && let Some(v) = &item.dv
        {
            *self
                .distinct
                .get_or_insert_with(Box::default)
                .entry((**v).clone())
                .or_insert(0) += 1;
        }
        self.last_end = self.last_end.max(item.time);
        // A closure of one (`a{1}`) at the start slides by emptying itself first: its start is
        // the event that now fills it (a stale start kept it from ever expiring: the timer
        // that should drop it found it alive and re-armed for the same instant, for good).
        if self.items.is_empty() {
            self.start = item.time;
        }
        self.items.push_back(item);
    }

    /// Its first event, alternative, step and count: a run still so after an event did not
    /// take it.
    fn mark(&self) -> RunMark {
        (
            self.items.front().map(|i| i.id),
            self.alt,
            self.pos,
            self.count,
        )
    }

    /// Drops the events of the closure it collects (its last `count`) that hold distinct
    /// value `v`: the closure sees `v` again. An earlier closure's events stay, whatever
    /// their values.
    fn drop_value(&mut self, v: &Value) {
        let before = self.items.len();
        let own_from = before.saturating_sub(self.count as usize);
        self.items
            .retain(|k, i| k < own_from || i.dv.as_deref() != Some(v));
        let gone = before - self.items.len();
        self.count = self.count.saturating_sub(gone as u32);
        if let Some(d) = &mut self.distinct {
            d.remove(v);
        }
        if let Some(f) = self.items.front() {
            self.start = f.time;
        }
    }

    fn pop_front(&mut self, step: &Step) {
        if let Some(it) = self.items.pop_front() {
            if step.repeat.as_ref().is_some_and(|r| r.distinct.is_some())
                && let Some(v) = &it.dv
                && let Some(d) = &mut self.distinct
                && let Some(n) = d.get_mut(&**v)
            {
                *n -= 1;
                if *n == 0 {
                    d.remove(&**v);
                }
            }
            self.count = self.count.saturating_sub(1);
        }
        if let Some(f) = self.items.front() {
            self.start = f.time;
        }
    }

    /// A run that event `id` (at `t`, distinct value `dv`) begins at the first step of the
    /// alternative `alt` (with the [`SHADOW`] bit for a shadow).
    fn begin(
        alt: u16,
        first: &Step,
        t: Timestamp,
        id: u64,
        ev: &Arc<Event>,
        dv: Option<Box<Value>>,
    ) -> Run {
        let mut r = Run {
            alt,
            pos: 0,
            count: 0,
            start: t,
            last_end: t,
            items: Items::default(),
            distinct: None,
        };
        r.enter(
            first,
            Item {
                time: t,
                id,
                ev: ev.clone(),
                dv,
            },
        );
        r
    }

    /// What [`Run::begin`] makes for a first step without `distinct`, built at once.
    fn first(alt: u16, first: &Step, t: Timestamp, id: u64, ev: &Arc<Event>) -> Run {
        Run::first_as(alt, first.repeat.is_some(), t, id, ev)
    }

    /// [`Run::first`] for a first step that is a closure or not (`closure`).
    #[inline(always)]
    fn first_as(alt: u16, closure: bool, t: Timestamp, id: u64, ev: &Arc<Event>) -> Run {
        Run {
            alt,
            pos: u16::from(!closure),
            count: u32::from(closure),
            start: t,
            last_end: t,
            items: Items::One(Item {
                time: t,
                id,
                ev: ev.clone(),
                dv: None,
            }),
            distinct: None,
        }
    }

    /// Becomes what [`Run::first`] makes, in place: a run of one event with no `distinct`
    /// counts (a closure's or a step's) takes the new event in its one item, so the old run
    /// is neither dropped nor a new one moved in.
    #[inline]
    fn restart(&mut self, alt: u16, first: &Step, t: Timestamp, id: u64, ev: &Arc<Event>) {
        self.restart_as(alt, first.repeat.is_some(), t, id, ev);
    }

    /// [`Run::restart`] for a first step that is a closure or not (`closure`).
    #[inline(always)]
    fn restart_as(&mut self, alt: u16, closure: bool, t: Timestamp, id: u64, ev: &Arc<Event>) {
        match (&mut self.items, &self.distinct) {
            (Items::One(it), None) => {
                it.time = t;
                it.id = id;
                it.ev = ev.clone();
                if it.dv.is_some() {
                    it.dv = None;
                }
            }
            (Items::Two(_), None) => {
                let it = Item {
                    time: t,
                    id,
                    ev: ev.clone(),
                    dv: None,
                };
                // (The two old events dropped inline: the general drop is out of line.)
                if let Items::Two([a, b]) = std::mem::replace(&mut self.items, Items::One(it)) {
                    drop(a);
                    drop(b);
                }
            }
            _ => {
                *self = Run::first_as(alt, closure, t, id, ev);
                return;
            }
        }
        // (What `first_as` sets beside its event.)
        self.alt = alt;
        self.pos = u16::from(!closure);
        self.count = u32::from(closure);
        self.start = t;
        self.last_end = t;
    }

    /// Drops it, the common run (one event, no `distinct` counts) inline: the general drop
    /// of a run is out of line.
    #[inline(always)]
    fn let_go(self) {
        match self {
            Run {
                items: Items::One(it),
                distinct: None,
                ..
            } => drop(it),
            r => drop(r),
        }
    }

    /// The alternative it reads.
    fn alt_id(&self) -> u16 {
        self.alt & !(SHADOW | COPY)
    }

    /// A copy of a younger partial match (step E of `LinearState::on_event`).
    fn is_copy(&self) -> bool {
        self.alt & COPY != 0
    }

    /// Whether it counts against `max_partial_matches`: not a shadow, not a copy.
    fn counted(&self) -> bool {
        self.alt & (SHADOW | COPY) == 0
    }

    /// A shadow: the partial match an event would have begun had an older one not taken it
    /// (step F of `LinearState::on_event`).
    fn is_shadow(&self) -> bool {
        self.alt & SHADOW != 0
    }

    /// Whether it holds the event `id`.
    fn holds(&self, id: u64) -> bool {
        self.items.iter().any(|i| i.id == id)
    }

    /// A step-0 closure still collecting: its window slides instead of expiring.
    fn is_collector(&self, alt: &Alt) -> bool {
        self.pos == 0 && self.count > 0 && alt.steps[0].repeat.is_some()
    }

    /// Whether the run survives expiry at `horizon` (the window's start): what
    /// [`LinearState::expire`] keeps. `slides`: its plan is [`Plan::slides`].
    #[inline(always)]
    fn live(&self, alt: &Alt, horizon: Timestamp, slides: bool) -> bool {
        if self.is_collector(alt) {
            self.items.iter().any(|i| i.time >= horizon)
        } else {
            self.start >= horizon || (slides && self.latest_start(alt) >= horizon)
        }
    }

    /// For a run past a closure at the start whose later steps up to its own are plain, in a
    /// plan that [`Plan::slides`]: how many of its events are that closure's, and the
    /// closure. Its window slides there still: the oldest of them may go while it keeps its
    /// minimum (`seq(fail{5,}, ok, sudo) within 10m` must not lose its match to a sixth,
    /// stale failure).
    fn lead<'a>(&self, alt: &'a Alt) -> Option<(usize, &'a super::plan::Repeat)> {
        let pos = self.pos as usize;
        if pos == 0 {
            return None;
        }
        let rep = alt.steps[0].repeat.as_ref()?;
        if alt.steps.get(1..pos)?.iter().any(|s| s.repeat.is_some()) {
            return None;
        }
        let cur = match alt.steps.get(pos) {
            Some(s) if s.repeat.is_some() && self.count > 0 => self.count as usize,
            _ => 0,
        };
        let k0 = self.items.len().checked_sub(pos - 1 + cur)?;
        Some((k0, rep))
    }

    /// How many of the closure's oldest events may go (see [`Run::lead`]), before `horizon`
    /// if given: while it keeps its minimum count (of distinct values, for `distinct`).
    fn slidable(&self, alt: &Alt, horizon: Option<Timestamp>) -> usize {
        let Some((k0, rep)) = self.lead(alt) else {
            return 0;
        };
        let min = rep.min as usize;
        let before = |i: &Item| horizon.is_none_or(|h| i.time < h);
        if rep.distinct.is_none() {
            return (self.items.iter().take(k0.saturating_sub(min)))
                .take_while(|i| before(i))
                .count();
        }
        let mut counts: BTreeMap<&Value, u32> = BTreeMap::new();
        for i in self.items.iter().take(k0) {
            if let Some(v) = i.dv.as_deref() {
                *counts.entry(v).or_insert(0) += 1;
            }
        }
        let mut gone = 0;
        for i in self.items.iter().take(k0) {
            if !before(i) {
                break;
            }
            let Some(v) = i.dv.as_deref() else {
                break;
            };
            let values = counts.len();
            match counts.get_mut(v) {
                Some(n) if *n > 1 => *n -= 1,
                Some(_) if values > min => {
                    counts.remove(v);
                }
                _ => break,
            }
            gone += 1;
        }
        gone
    }

    /// The latest start the run may slide to (see [`Run::lead`]).
    #[cold]
    #[inline(never)]
    fn latest_start(&self, alt: &Alt) -> Timestamp {
        let gone = self.slidable(alt, None);
        match self.items.iter().nth(gone) {
            Some(i) if gone > 0 => i.time,
            _ => self.start,
        }
    }

    /// Lets go the closure's oldest events before `horizon` while it keeps its minimum (see
    /// [`Run::lead`]); returns whether it is then inside the window.
    fn slide(&mut self, alt: &Alt, horizon: Timestamp) -> bool {
        for _ in 0..self.slidable(alt, Some(horizon)) {
            self.items.pop_front();
        }
        if let Some(f) = self.items.front() {
            self.start = f.time;
        }
        self.start >= horizon
    }

    /// The alert's events: the most recent [`MAX_ALERT_EVENTS`]; a `distinct` closure's
    /// repeats give way, so its alert shows the values it counted (a port scan's ports, not
    /// sixteen tries of one port): the most recent event of each value.
    fn events(&self) -> Vec<Arc<Event>> {
        self.events_and_prefix().0
    }

    /// A [`Wait`]'s events ([`Run::events`]) and ids (of all its events), built in place:
    /// a wait of one or two events allocates nothing for them, and one of one event takes
    /// the run's.
    fn into_wait_parts(self) -> (WaitVec<Arc<Event>>, WaitVec<u64>) {
        if let Items::One(it) = self.items {
            // (The common match of one event: no `distinct` value to look at, one of each.)
            let mut events = WaitVec::new();
            events.push(it.ev);
            let mut ids = WaitVec::new();
            ids.push(it.id);
            return (events, ids);
        }
        let ids = self.items.iter().map(|i| i.id).collect();
        if !self.items.iter().any(|i| i.dv.is_some()) {
            let skip = self.items.len().saturating_sub(MAX_ALERT_EVENTS);
            let events = self.items.iter().skip(skip).map(|i| i.ev.clone()).collect();
            return (events, ids);
        }
        (WaitVec::from_vec(self.events()), ids)
    }

    /// [`Run::events`], and for a `distinct` closure how many of them, at the front, are of
    /// the steps before it (they carry no distinct value).
    fn events_and_prefix(&self) -> (Vec<Arc<Event>>, u16) {
        // (Not `distinct`, which a run leaving its closure drops: the items keep their values.)
        if !self.items.iter().any(|i| i.dv.is_some()) {
            let skip = self.items.len().saturating_sub(MAX_ALERT_EVENTS);
            // (Room made exactly: the alert's body keeps them as they are, with no copy to
            // shrink them; the items' iterator gives no exact length.)
            let mut out = Vec::with_capacity(self.items.len() - skip);
            out.extend(self.items.iter().skip(skip).map(|i| i.ev.clone()));
            return (out, 0);
        }
        let items: Vec<&Item> = self.items.iter().collect();
        let mut seen: Vec<&Value> = Vec::new();
        let mut out: Vec<Arc<Event>> = Vec::with_capacity(MAX_ALERT_EVENTS);
        let mut prefix = 0u16;
        for i in items.iter().rev() {
            if out.len() == MAX_ALERT_EVENTS {
                break;
            }
            match i.dv.as_deref() {
                Some(v) if seen.contains(&v) => continue,
                Some(v) => seen.push(v),
                None => prefix += 1,
            }
            out.push(i.ev.clone());
        }
        out.reverse();
        (out, prefix)
    }
}

fn distinct_value(step: &Step, ev: &Event) -> Option<Option<Box<Value>>> {
    match step.repeat.as_ref().and_then(|r| r.distinct.as_ref()) {
        Some(k) => {
            let caps = Vec::new();
            lookup(ev, &caps, k).map(|v| Some(Box::new(v.get().clone())))
        }
        None => Some(None),
    }
}

enum Took {
    No,
    Yes,
}

impl LinearState {
    fn waits(&self) -> &[Wait] {
        self.rare.as_ref().map_or(&[], |r| &r.waits)
    }

    fn last_seen(&self) -> &[Option<Timestamp>] {
        self.rare.as_ref().map_or(&[], |r| &r.last_seen)
    }

    fn last_emit(&self) -> Option<Timestamp> {
        self.rare.as_ref().and_then(|r| r.last_emit)
    }

    /// The rare part, made when first written.
    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Whether an event at `t` can start no match of an alternative with the leading absence
    /// `(set, d)`: the absence's time since monitoring began has not passed, or an awaited
    /// event came within it.
    fn lead_blocked(&self, ctx: &RuleCtx<'_>, (set, d): (EvSet, Duration), t: Timestamp) -> bool {
        if t < ctx.monitor_start.add(d) {
            return true;
        }
        let last = self
            .last_seen()
            .iter()
            .enumerate()
            .filter(|(e, _)| set & (1u64 << e) != 0)
            .filter_map(|(_, ts)| *ts)
            .max();
        last.is_some_and(|l| l.add(d) > t)
    }

    /// Notes event `id` (at `t`) as no start of the closures after a leading absence it may
    /// join (see `Rare::bad_starts`).
    fn note_bad_start(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        t: Timestamp,
        mask: EvSet,
        id: u64,
    ) {
        for (ai, alt) in alts.iter().enumerate() {
            let blocked = alt.steps[0].repeat.is_some()
                && alt.steps[0].set & mask != 0
                && alt
                    .start_absent
                    .is_some_and(|lead| self.lead_blocked(ctx, lead, t));
            if blocked {
                self.rare().bad_starts.push((t, id, ai as u16));
            }
        }
    }

    /// The start closures after a leading absence let go the events at their front that could
    /// not start a match (see `Rare::bad_starts`); a closure left with none goes.
    #[cold]
    #[inline(never)]
    fn drop_bad_fronts(&mut self, alts: &[Alt]) {
        let Some(rare) = self.rare.as_mut() else {
            return;
        };
        if rare.bad_starts.is_empty() {
            return;
        }
        let bad = &rare.bad_starts;
        let mut oldest: Option<Timestamp> = None;
        self.runs.retain_mut(|r| {
            let alt = &alts[r.alt_id() as usize];
            if alt.start_absent.is_none() || !r.is_collector(alt) {
                return true;
            }
            let ai = r.alt_id();
            while r
                .items
                .front()
                .is_some_and(|i| bad.iter().any(|&(_, b, a)| b == i.id && a == ai))
            {
                r.pop_front(&alt.steps[0]);
            }
            let front = r.items.front().map(|i| i.time);
            oldest = match (oldest, front) {
                (Some(o), Some(f)) => Some(o.min(f)),
                (o, f) => o.or(f),
            };
            !r.items.is_empty()
        });
        // (A closure's events are in time order: none it holds is older than its front.)
        match oldest {
            Some(o) => rare.bad_starts.retain(|&(t, _, _)| t >= o),
            None => rare.bad_starts.clear(),
        }
    }

    fn on_event(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        key: &GroupKey,
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) -> bool {
        if ctx.simple
            && self.episode.is_none()
            && self.rare.as_ref().is_none_or(|r| r.inert())
            && let Some(calm) = self.fresh(ctx, alts, t, mask, ev, id)
        {
            return calm;
        }
        if ctx.single
            && let Some(calm) = self.single(ctx, alts, key, t, mask, ev, id, counters, out)
        {
            return calm;
        }
        if ctx.simple
            && self
                .complete_lone(ctx, alts, key, t, mask, ev, id, counters, out)
                .is_some()
        {
            return false;
        }
        self.general(ctx, alts, key, t, mask, ev, id, counters, out);
        false
    }

    /// The general transition's commonest completion without its steps: a simple plan's one
    /// live partial match, standing at its last step, a plain one, which the event is of
    /// (the `b` of `seq(a, b)`, the second event of `and(a, b)`), takes the event and is
    /// finished (steps E and G; B to D leave it as it is, and F starts nothing for an event
    /// a partial match took). `None`, having changed nothing, in any other case.
    #[allow(clippy::too_many_arguments)]
    fn complete_lone(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        key: &GroupKey,
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) -> Option<()> {
        if self.episode.is_some() || self.rare.as_ref().is_some_and(|r| !r.inert()) {
            return None;
        }
        let w = ctx.wmax()?;
        let [r] = self.runs.as_mut_slice() else {
            return None;
        };
        let alt = alts.get(usize::from(r.alt_id()))?;
        let pos = usize::from(r.pos);
        let step = alt.steps.get(pos)?;
        // (Live without sliding, as step C keeps it; a plain step of a simple plan has no
        // guard, no `distinct` and no least distance, so it takes an event of its own.)
        if pos == 0
            || pos + 1 != alt.steps.len()
            || step.repeat.is_some()
            || step.set & mask == 0
            || r.is_shadow()
            || r.start < t.sub(w)
        {
            return None;
        }
        if !matches!(take(ctx, alt, r, t, mask, ev, id), Took::Yes) {
            return None;
        }
        debug_assert!(
            complete(ctx, alt, r, t),
            "a last step taken did not complete"
        );
        let r = self.runs.pop()?;
        self.finish(ctx, alts, key, r, t, counters, out);
        Some(())
    }

    /// The transition in full (steps A to G), for what the shortcuts do not take. Not inlined:
    /// its frame would be every transition's.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn general(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        key: &GroupKey,
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) {
        // A. An open episode: an absence resolves, a closure extends.
        if let Some(ep) = &mut self.episode {
            match ep.kind {
                EpisodeKind::Absence(set) if mask & set != 0 => {
                    if let Some(ep) = self.episode.take() {
                        end_by_event(ctx, key, &ep, AlertState::Resolved, t, ev, counters, out);
                    }
                }
                EpisodeKind::Closure(set) if mask & set != 0 => {
                    ep.last = ep.last.max(t);
                    // A `distinct` closure's episode shows the most recent event of each
                    // value, as its firing did (not a port tried twice, twice).
                    if let Plan::Linear { alts } = &*ctx.plan
                        && let Some(step) = alts.iter().filter_map(|a| a.steps.last()).find(|s| {
                            s.set & mask != 0
                                && s.repeat.as_ref().is_some_and(|r| r.distinct.is_some())
                        })
                        && let Some(Some(v)) = distinct_value(step, ev)
                    {
                        // (The events of the steps before the closure stay, whatever they
                        // hold in the distinct field.)
                        let prefix = usize::from(ep.prefix);
                        let mut at = 0;
                        ep.events.retain(|e| {
                            at += 1;
                            at <= prefix
                                || distinct_value(step, e).flatten().as_deref() != Some(&*v)
                        });
                    }
                    ep.count = ep.taken().saturating_add(1);
                    ep.events.push(ev.clone());
                    let cut = ep.events.len().saturating_sub(MAX_ALERT_EVENTS);
                    cap_events(&mut ep.events);
                    ep.prefix = ep
                        .prefix
                        .saturating_sub(u16::try_from(cut).unwrap_or(u16::MAX));
                    self.note_seen(mask, t);
                    return;
                }
                _ => {}
            }
        }
        // B. An awaited event cancels the waits of absences at the end. An event that cannot
        // start a match after a leading absence is noted as such for the closures it joins.
        self.end_waits(alts, mask);
        if self.rare.as_ref().is_some_and(|r| !r.last_seen.is_empty()) {
            self.note_bad_start(ctx, alts, t, mask, id);
        }
        // C. Expiry by the window (closures at the start slide).
        if let Some(w) = ctx.wmax() {
            self.expire(alts, t, w, ctx.slides);
        }
        // D. Absences in the middle kill the runs they guard: with `for D`, an awaited event
        // up to and at the D's end (in time, as at an absence's deadline at the end).
        // An event that is also the guarded step's own, without `for`, is that step, not
        // between: `seq(boot, absent(any), ok)` matches an `ok` that is also an `any`. Only for
        // the partial match that takes it there (E): the others it passes over saw an `any`
        // between, and go once the event is handled (`exempt`, by what each was then).
        let wmin = ctx.wmin();
        let mut exempt: SmallVec<[RunMark; 2]> = SmallVec::new();
        self.runs.retain(|r| {
            let alt = &alts[r.alt_id() as usize];
            let step = &alt.steps[r.pos as usize];
            let guarded = if step.repeat.is_some() && r.count > 0 {
                let satisfied =
                    effective_count(r, step) >= step.repeat.as_ref().map_or(1, |x| x.min);
                if satisfied {
                    alt.steps
                        .get(r.pos as usize + 1)
                        .map(|s| (r.pos as usize + 1, s))
                } else {
                    None
                }
            } else {
                Some((r.pos as usize, step))
            };
            let Some((at, gs)) = guarded else {
                return true;
            };
            match &gs.guard {
                Some((g, None)) if g & mask != 0 => {
                    let completes =
                        at + 1 == alt.steps.len() && gs.repeat.as_ref().is_none_or(|x| x.min <= 1);
                    let may_take = gs.set & mask != 0
                        && distinct_value(gs, ev).is_some()
                        && !(completes && t.since(r.start) < wmin);
                    if may_take {
                        exempt.push(r.mark());
                    }
                    may_take
                }
                Some((g, Some(d))) if g & mask != 0 => t > r.last_end.add(*d),
                _ => true,
            }
        });
        // E. The oldest partial match that can take the event takes it. The runs one event
        // started in several alternatives (the orders of an `and`, the branches of an `or`)
        // are one partial match read in different ways: each of them that can take the event
        // does, so `and(a, b, c)` over `a c b` is not lost to the order `a b c` taking `b`.
        // The first to complete wins and consumes the others with its events.
        //
        // A younger partial match waiting on the step an event moved the oldest one along (a
        // plain step or a closure in the middle, before the last: no completion) keeps its
        // place, and a copy of it takes the event too, so that if the older one falls out of
        // the window before it matches, the copy goes on (`seq(a, b, c) within 10s` over
        // a@0 a@5 b@6 c@12 matches a@5 b@6 c@12; `seq(a, b{2,}, c) within 10s` over
        // a@0 b@1 a@5 b@6 b@7 c@12 matches a@5 b@6 b@7 c@12); if the older one matches, it
        // consumes the event and the copy with it, and the younger one still waits for its own
        // (`a@0 a@1 b@2 b@3 c@4 c@5` matches twice). A copy goes on itself with later such
        // events. One copy per partial match at most (the runs at most double), and per event.
        //
        // With several alternatives (the branches of an `or`, the orders of an `and`), "the
        // oldest partial match that can take it" is per alternative: a younger partial match
        // reading another alternative takes the event too, unless an older one took it
        // there, so a start in one branch never starves another branch (`and(fail{3,}, probe)`
        // over fail probe fail fail fail matches probe and the three fails after it). The
        // first to complete still consumes the event: none younger than it takes it.
        let mut completed: Option<usize> = None;
        let mut completed_origin: Option<Option<u64>> = None;
        let mut origin: Option<Option<u64>> = None;
        let mut moved: Option<(u16, u16)> = None;
        let mut stop = self.runs.len();
        let mut also_complete: SmallVec<[usize; 1]> = SmallVec::new();
        let mut takers: SmallVec<[usize; 2]> = SmallVec::new();
        // Per alternative, the partial match that took the event there (by its first event).
        let mut served: SmallVec<[Option<Option<u64>>; 4]> = smallvec::smallvec![None; alts.len()];
        let mut unserved = alts.len();
        let shadows = self.rare.as_ref().is_some_and(|r| r.shadows) && self.settle_shadows();
        for (ri, r) in self.runs.iter_mut().enumerate() {
            if r.is_shadow() {
                continue;
            }
            let first = r.items.front().map(|i| i.id);
            let other = |o: Option<u64>| o != first || o.is_none();
            if let Some(o) = origin
                && other(o)
            {
                // A partial match younger than the first that took the event.
                stop = stop.min(ri);
                if unserved == 0 || completed_origin.is_some_and(other) {
                    break;
                }
            }
            let ai = r.alt_id() as usize;
            if served[ai].is_some_and(other) {
                continue;
            }
            let alt = &alts[ai];
            let pos = r.pos;
            if let Took::Yes = take(ctx, alt, r, t, mask, ev, id) {
                if origin.is_none() {
                    origin = Some(first);
                }
                if served[ai].is_none() {
                    served[ai] = Some(first);
                    unserved -= 1;
                }
                takers.push(ri);
                if moved.is_none() && origin == Some(first) && copy_step(alt, pos) {
                    moved = Some((r.alt_id(), pos));
                }
                if complete(ctx, alt, r, t) {
                    if completed.is_none() {
                        completed = Some(ri);
                    } else {
                        // Another reading of the same partial match completed too (two
                        // branches of an `or`), or a younger partial match after a wait:
                        // handled with the first in G, in order.
                        also_complete.push(ri);
                    }
                    // A match consumes the event: no younger partial match takes it. A wait
                    // (an alternative ending in an absence) consumes nothing yet, so a younger
                    // one may still complete on it, and its match drops the wait.
                    if alt.end_absent.is_none() && completed_origin.is_none() {
                        completed_origin = Some(first);
                    }
                }
            }
        }
        if let (None, Some(step)) = (completed, moved) {
            // (A copy inserted moves the runs after it: the takers younger than it with them.)
            if let Some(at) = self.copy_for_younger(ctx, alts, stop, step, t, mask, ev, id) {
                for i in &mut takers {
                    if *i >= at {
                        *i += 1;
                    }
                }
            }
        }
        // Shadows (see F and `feed_shadows`).
        let mut shadow_done: Option<usize> = None;
        if shadows && completed.is_none() {
            shadow_done = self.feed_shadows(ctx, alts, &takers, t, mask, ev, id);
        }
        let taken = origin.is_some();
        // F. Otherwise it starts a run in every alternative it can start.
        // Rarely more than one: no allocation for an immediate completion.
        let mut fresh_completed: SmallVec<[usize; 2]> = SmallVec::new();
        let mut immediate: Option<Run> = None;
        // An event the oldest partial match took past a plain step before its last (no
        // completion) starts a shadow where it could have started a partial match of its own
        // (the first, plain step of an alternative of two steps or more: the orders of an
        // `and`, the branches of an `or`), so that a stale start does not hide it:
        // `and(a, b, c) within 5s` over a@0 b@4 c@6 a@7 matches b@4 c@6 a@7 once the partial
        // match from a@0 has fallen out of the window. While its origin lives, a shadow takes
        // only what the origin takes or what no partial match takes, and never completes; if
        // the origin matches, it consumes the event and the shadow with it. Once the origin is
        // gone, the shadow takes what it can beside whoever takes it, as a copy does. One shadow per origin, none for an origin whose
        // alternative ends in an absence (its match consumes nothing), only with a window, a few
        // per group, and shadows never count against `max_partial_matches` nor push out a
        // partial match.
        if let (true, None, None, Some((malt, _))) = (taken, completed, shadow_done, moved)
            && ctx.wmax().is_some()
            && alts[malt as usize].end_absent.is_none()
            && alts[malt as usize].steps.iter().all(|s| s.repeat.is_none())
            && self.runs.len() < SHADOW_GROUP_RUNS
        {
            self.start_shadows(ctx.max_partial, alts, &takers, t, mask, ev, id);
        }
        // (A shadow that completed on the event consumes it: nothing it would start survives.)
        if !taken && shadow_done.is_none() {
            for (ai, alt) in alts.iter().enumerate() {
                let first = &alt.steps[0];
                if first.set & mask == 0 {
                    continue;
                }
                if alt
                    .start_absent
                    .is_some_and(|lead| self.lead_blocked(ctx, lead, t))
                {
                    continue;
                }
                let Some(dv) = distinct_value(first, ev) else {
                    continue;
                };
                let r = Run::begin(ai as u16, first, t, id, ev, dv);
                let done = complete(ctx, alt, &r, t);
                if done && alts.len() == 1 && alt.steps.len() == 1 && first.repeat.is_none() {
                    // The one alternative, one plain step, matched at once (`a`, `or(a, b)`,
                    // `seq(a, absent(b) for D)`): such a rule never holds a partial match, so
                    // it is finished as it stands, without a pass through `runs`.
                    immediate = Some(r);
                } else if done || alt.steps.len() > 1 || first.repeat.is_some() {
                    // Most groups hold one partial match at a time: room for one, not the
                    // four a first push makes (a run is a cache line; 192 bytes a group).
                    if self.runs.capacity() == 0 {
                        self.runs.reserve_exact(1);
                    }
                    self.runs.push(r);
                    if done {
                        fresh_completed.push(self.runs.len() - 1);
                    }
                }
            }
            let real = if self.runs.len() > ctx.max_partial {
                self.runs.iter().filter(|r| r.counted()).count()
            } else {
                self.runs.len()
            };
            if real > ctx.max_partial {
                self.evict(real - ctx.max_partial, &mut fresh_completed, counters);
            }
        }
        // G. Completions, finished in order: the first match wins and consumes the event; a
        // wait (an alternative that ends in an absence) is not a match yet, so the next one
        // still gets its match (at most one fires: one alert per episode).
        // - Readings of one partial match that completed on this event.
        // - Else, among runs this event started, the first alternative's; the others held the
        //   same event and are consumed with it.
        // Every completed run leaves `runs` here: one left behind would sit past its last step.
        let done_at: SmallVec<[usize; 2]> = match (completed, shadow_done) {
            (Some(ri), _) => std::iter::once(ri).chain(also_complete).collect(),
            (None, Some(si)) => std::iter::once(si).collect(),
            (None, None) => fresh_completed,
        };
        if let Some(r) = immediate {
            debug_assert!(
                done_at.is_empty(),
                "a single-step rule held a partial match"
            );
            self.finish(ctx, alts, key, r, t, counters, out);
        } else if !done_at.is_empty() {
            self.finish_all(ctx, alts, key, &done_at, t, counters, out);
        }
        if !exempt.is_empty() {
            // The partial matches D spared that did not take the event (still as they were).
            self.runs.retain(|r| !exempt.contains(&r.mark()));
        }
        if self.rare.as_ref().is_some_and(|r| !r.bad_starts.is_empty()) {
            // (A closure at its upper count let its front go for the event.)
            self.drop_bad_fronts(alts);
        }
        self.note_seen(mask, t);
    }

    /// Step G of [`LinearState::on_event`]: the runs at `done_at` (ascending) leave `runs`
    /// and are finished in order until one that is not a wait (out of line: most events
    /// complete nothing).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn finish_all(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        key: &GroupKey,
        done_at: &[usize],
        t: Timestamp,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) {
        let mut done: SmallVec<[Run; 1]> =
            done_at.iter().rev().map(|&i| self.runs.remove(i)).collect();
        done.reverse();
        for r in done {
            let pending = alts[r.alt_id() as usize].end_absent.is_some();
            self.finish(ctx, alts, key, r, t, counters, out);
            if !pending {
                break;
            }
        }
    }

    /// The oldest `extra` partial matches go, each with its copy (shadows are not partial
    /// matches of their own yet, copies are part of theirs: neither counts nor goes for
    /// itself here); `fresh` (indices of runs this event started, at the end) follows.
    #[inline(never)]
    fn evict(
        &mut self,
        extra: usize,
        fresh: &mut SmallVec<[usize; 2]>,
        counters: &mut RuleCounters,
    ) {
        counters.partial_evicted += extra as u64;
        let mut left = extra;
        let mut gone: SmallVec<[Option<u64>; 4]> = SmallVec::new();
        let going: Vec<bool> = (self.runs.iter())
            .map(|r| {
                let first = r.items.front().map(|i| i.id);
                if left > 0 && r.counted() {
                    left -= 1;
                    gone.push(first);
                    true
                } else {
                    // A copy sits right after its partial match.
                    r.is_copy() && gone.last() == Some(&first)
                }
            })
            .collect();
        // The runs this event started move down by the runs that go before them, or go.
        fresh.retain_mut(|i| {
            let before = going[..*i].iter().filter(|&&g| g).count();
            let keep = !going[*i];
            *i -= before;
            keep
        });
        let mut it = going.iter();
        self.runs.retain(|_| !it.next().copied().unwrap_or(false));
    }

    /// Step F's shadows (see there): the partial match the event would have begun, unless
    /// the partial match that took it has one already.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn start_shadows(
        &mut self,
        max_partial: usize,
        alts: &[Alt],
        takers: &[usize],
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
    ) {
        let mut count = 0;
        for r in self.runs.iter().filter(|r| r.is_shadow()) {
            count += 1;
            let of_origin =
                (r.items.front()).is_some_and(|f| takers.iter().any(|&i| self.runs[i].holds(f.id)));
            if of_origin {
                return;
            }
        }
        // The bounds hold after the new runs too: at most MAX_SHADOW_RUNS shadow runs (and no
        // more than the rule's own budget of partial matches), SHADOW_GROUP_RUNS runs in all.
        let new = alts.iter().filter(|a| shadow_alt(a, mask)).count();
        if count + new > MAX_SHADOW_RUNS.min(max_partial)
            || self.runs.len() + new > SHADOW_GROUP_RUNS
        {
            return;
        }
        for (ai, alt) in alts.iter().enumerate() {
            if shadow_alt(alt, mask) {
                let r = Run::begin(ai as u16 | SHADOW, &alt.steps[0], t, id, ev, None);
                self.runs.push(r);
            }
        }
        if new > 0 {
            self.rare().shadows = true;
        }
    }

    /// Before step E: in a flood (more than [`SHADOW_GROUP_RUNS`] runs) the shadows go.
    /// Whether any is left.
    #[inline(never)]
    fn settle_shadows(&mut self) -> bool {
        if self.runs.len() > SHADOW_GROUP_RUNS {
            self.runs.retain(|r| !r.is_shadow());
        }
        let any = self.runs.iter().any(Run::is_shadow);
        if !any {
            self.rare().shadows = false;
        }
        any
    }

    /// Whether the origin of a shadow that begins with event `s0` lives: a partial match
    /// (among those `live` keeps) that holds `s0` as a later event of its own.
    fn origin_lives(&self, s0: u64, live: impl Fn(&Run) -> bool) -> bool {
        self.runs.iter().any(|r| {
            !r.is_shadow() && r.items.front().is_some_and(|f| f.id != s0) && live(r) && r.holds(s0)
        })
    }

    /// Step E for the shadows. While its origin (the partial match holding its first event
    /// as a later one of its own) lives, a shadow takes the event when the origin took it or
    /// nobody did, never completing on it (the origin goes first); once the origin is gone,
    /// it takes what it can beside whoever takes it, as a copy does, and may complete.
    /// Returns the first shadow that completed.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn feed_shadows(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        takers: &[usize],
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
    ) -> Option<usize> {
        let mut done = None;
        for si in 0..self.runs.len() {
            let Some(s0) = (self.runs.get(si))
                .filter(|r| r.is_shadow())
                .and_then(|r| r.items.front().map(|f| f.id))
            else {
                continue;
            };
            let alt = &alts[self.runs[si].alt_id() as usize];
            let mut next = self.runs[si].clone();
            if let Took::No = take(ctx, alt, &mut next, t, mask, ev, id) {
                continue;
            }
            let origin_took = takers.iter().any(|&i| self.runs[i].holds(s0));
            // Only when needed (it walks the runs): whether the origin lives.
            let alive = || self.origin_lives(s0, |_| true);
            if !origin_took && !takers.is_empty() && alive() {
                // Another partial match took it while the origin lives: not the shadow's.
                continue;
            }
            let completes = complete(ctx, alt, &next, t);
            if completes && (origin_took || alive()) {
                continue;
            }
            self.runs[si] = next;
            if completes && done.is_none() {
                done = Some(si);
            }
        }
        done
    }

    /// After an event moved the oldest partial match along `step` (see [`copy_step`]), the
    /// next younger partial match waiting on that step, among the few from `from`
    /// on, gets a copy of itself that takes the event too (or, if it is already such a copy,
    /// goes on itself): see step E of [`LinearState::on_event`]. Returns where it inserted a
    /// copy, if it did (the runs from there on moved by one).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn copy_for_younger(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        from: usize,
        step: (u16, u16),
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
    ) -> Option<usize> {
        // Among the next few only: an event costs at most one copy, whatever the flood. No
        // copy without a window (an older partial match never falls out of it), for an
        // alternative that ends in an absence (its match is a wait that consumes nothing, so
        // a copy would outlive it with a shared event). A copy is part of its partial match:
        // it does not count against `max_partial_matches` (one per partial match at most, so
        // the runs at most double), and goes when its partial match is pushed out.
        const LOOK_AHEAD: usize = 8;
        let ends_in_absence = alts
            .get(step.0 as usize)
            .is_some_and(|a| a.end_absent.is_some());
        if ctx.wmax().is_none() || ends_in_absence {
            return None;
        }
        let first_id = |r: &Run| r.items.front().map(|i| i.id);
        let end = self.runs.len().min(from + LOOK_AHEAD);
        for ri in from..end {
            let r = &self.runs[ri];
            let first = first_id(r);
            if first.is_none() || r.is_shadow() || (r.alt_id(), r.pos) != step {
                continue;
            }
            let alt = &alts[r.alt_id() as usize];
            let prev = ri.checked_sub(1).map(|p| &self.runs[p]);
            let next = self.runs.get(ri + 1);
            if prev.is_some_and(|p| first_id(p) == first && p.alt_id() == r.alt_id()) {
                // A copy already (right after its partial match, same alternative): it goes
                // on itself, the partial match it copies still waits.
                let _ = take(ctx, alt, &mut self.runs[ri], t, mask, ev, id);
                return None;
            }
            if prev.is_none_or(|p| first_id(p) != first)
                && next.is_none_or(|n| first_id(n) != first)
            {
                // Alone in its origin (no copy yet, not one of several alternatives).
                let mut copy = r.clone();
                copy.alt |= COPY;
                if let Took::Yes = take(ctx, alt, &mut copy, t, mask, ev, id) {
                    self.runs.insert(ri + 1, copy);
                    return Some(ri + 1);
                }
            }
        }
        None
    }

    /// A late awaited event (within `allowed_lateness`) of an absence at the end of a
    /// sequence, stamped `t` at or after the absence began: it ends a wait still open, and
    /// retracts an absence that fired while it was on its way if it falls before the fired
    /// deadline (as for absence-only rules). Returns whether the group changed.
    #[allow(clippy::too_many_arguments)]
    fn on_late(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        key: &GroupKey,
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        now: Timestamp,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) -> bool {
        let awaits = |alt: u16| {
            alts.get(alt as usize)
                .and_then(|a| a.end_absent.as_ref())
                .is_some_and(|e| e.set & mask != 0)
        };
        let mut changed = false;
        if let Some(rare) = &mut self.rare {
            let before = rare.waits.len();
            rare.waits.retain(|w| !(awaits(w.alt) && t >= w.from()));
            changed = rare.waits.len() != before;
        }
        let Some(ep) = &self.episode else {
            return changed;
        };
        let (EpisodeKind::Absence(set), Some(from)) = (&ep.kind, ep.from) else {
            return changed;
        };
        if mask & set == 0 || t < from || t > ep.last {
            return changed;
        }
        let Some(ep) = self.episode.take() else {
            return changed;
        };
        if ep.held_until.is_none()
            && let Some(rare) = &mut self.rare
        {
            // A withdrawn alert does not count against the trigger's period.
            rare.last_emit = None;
        }
        end_by_event(ctx, key, &ep, AlertState::Retracted, now, ev, counters, out);
        true
    }

    /// The transition of a group of a simple plan ([`RuleCtx::simple`]) with no episode, no
    /// wait, no leading-absence time and no shadow ([`Rare::inert`]) whose partial matches
    /// have all passed the window, when the event starts nothing that completes at once:
    /// what [`LinearState::on_event`] does then, without its general machinery (most events
    /// of a pattern with a short window find their group so). Every run goes (step C drops
    /// them all; with none left, D and E find nothing, and no copy or shadow is made), and
    /// the event starts a run in each alternative whose first step it satisfies (F).
    /// Returns `None`, having changed nothing, when the case is another, else whether the
    /// group is left with nothing of its own to wake for.
    fn fresh(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
    ) -> Option<bool> {
        let w = ctx.wmax()?;
        let horizon = t.sub(w);
        let live = if ctx.plain_first {
            self.runs.iter().any(|r| r.start >= horizon)
        } else {
            self.runs
                .iter()
                .any(|r| r.live(&alts[r.alt_id() as usize], horizon, ctx.slides))
        };
        if live {
            return None;
        }
        // What the event starts; a run of one event that completes at once (an alternative
        // of one step it fills: a plain one, or a closure of at most one) takes the general
        // path, as does a budget it would overflow (never one run: the budget is at least 1).
        if let [alt] = alts {
            let first = &alt.steps[0];
            if first.set & mask == 0 {
                self.runs.clear();
                return Some(true);
            }
            if completes_at_once(alt) {
                return None;
            }
            debug_assert!(ctx.max_partial >= 1, "a budget of no partial match");
            if let [old] = self.runs.as_mut_slice() {
                // (The common case: the group's one partial match, past its window, is
                // the new one's room.)
                old.restart(0, first, t, id, ev);
            } else {
                self.runs.clear();
                if self.runs.capacity() == 0 {
                    // (One run's room, not the four a first push makes: most groups hold one.)
                    self.runs.reserve_exact(1);
                }
                self.runs.push(Run::first(0, first, t, id, ev));
            }
            debug_assert!(
                !complete(ctx, alt, &self.runs[0], t),
                "a fresh run completed"
            );
            return Some(true);
        }
        let mut starts = 0;
        let mut last = 0;
        for (ai, alt) in alts.iter().enumerate() {
            let first = &alt.steps[0];
            if first.set & mask == 0 {
                continue;
            }
            if completes_at_once(alt) {
                return None;
            }
            starts += 1;
            last = ai;
        }
        if starts > ctx.max_partial {
            return None;
        }
        if starts == 1
            && let [old] = self.runs.as_mut_slice()
        {
            // (One start, and one old run past its window for its room, as above.)
            old.restart(last as u16, &alts[last].steps[0], t, id, ev);
            return Some(true);
        }
        self.runs.clear();
        if starts == 0 {
            return Some(true);
        }
        if self.runs.capacity() == 0 {
            self.runs.reserve_exact(starts);
        }
        for (ai, alt) in alts.iter().enumerate() {
            let first = &alt.steps[0];
            if first.set & mask != 0 {
                // (A simple plan has no leading absence and no `distinct`.)
                let r = Run::first(ai as u16, first, t, id, ev);
                debug_assert!(!complete(ctx, alt, &r, t), "a fresh run completed");
                self.runs.push(r);
            }
        }
        // Runs of one event each, no wait, no episode: nothing to wake for unless they are
        // enough to be expired early (see `next_wake`).
        Some(starts <= LAZY_EXPIRY_ITEMS)
    }

    /// The transition of a group of a one-step plan ([`RuleCtx::single`]) with no episode,
    /// no leading-absence time and no shadow: an event of its step that ends no wait is a
    /// match at once, finished as the general transition finishes it (step F makes the
    /// one-event run, G finishes it: an alert, a suppressed match, or a wait for the absence
    /// at the end), and an awaited event that is not of the step ends the waits (step B),
    /// without the other steps. Returns `None`, having changed nothing, when the case is
    /// another (an event of both), else whether the group is left with nothing of its own
    /// to wake for.
    #[allow(clippy::too_many_arguments)]
    fn single(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        key: &GroupKey,
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        id: u64,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) -> Option<bool> {
        let [alt] = alts else {
            return None;
        };
        let step = &alt.steps[0];
        let ends_wait = alt.end_absent.as_ref().is_some_and(|e| e.set & mask != 0);
        if self.episode.is_some()
            || !self.runs.is_empty()
            || self
                .rare
                .as_ref()
                .is_some_and(|r| r.shadows || !r.last_seen.is_empty())
        {
            return None;
        }
        if ends_wait || step.set & mask == 0 {
            if step.set & mask != 0 {
                return None;
            }
            // The awaited event alone: it ends the waits (step B), and starts nothing; the
            // plan's one alternative had them all.
            self.end_waits(alts, mask);
            return Some(self.waits().is_empty());
        }
        // What `finish` would do with the one-event match, where that is only a count or
        // nothing, without making the match: a wait already pending for the absence at the
        // end takes no second one, and a match the rate limit holds back is suppressed (its
        // id seed still taken, as the alert ids after it count it).
        match &alt.end_absent {
            Some(_) if self.waits().iter().any(|w| w.alt == 0) => return Some(false),
            None if held_until(ctx, self.last_emit(), t, None).is_some() => {
                self.next_seed(t, t);
                counters.suppressed += 1;
                // (No wait without an absence at the end, no episode, no run.)
                return Some(true);
            }
            _ => {}
        }
        let r = Run::first(0, step, t, id, ev);
        debug_assert!(complete(ctx, alt, &r, t), "a one-step run did not complete");
        self.finish(ctx, alts, key, r, t, counters, out);
        Some(false)
    }

    /// [`LinearState::next_seed`] of a match at `t` of one event, inline in its common case
    /// (no run, no wait, every seed taken before `t`, so all go), else the general one.
    #[inline(always)]
    fn next_seed_lone(&mut self, t: Timestamp) {
        if self.runs.is_empty()
            && let Some(rare) = &mut self.rare
            && rare.waits.is_empty()
        {
            let n = match rare.last_seed {
                Some((at, k)) if at == t => k + 1,
                _ => 0,
            };
            match rare.seeds.as_mut_slice() {
                // (The common case, one seed left by the last match: replaced in place.)
                [s] if s.0 < t => *s = (t, n),
                seeds if seeds.iter().all(|&(at, _)| at < t) => {
                    rare.seeds.clear();
                    rare.seeds.push((t, n));
                }
                _ => {
                    self.next_seed(t, t);
                    return;
                }
            }
            rare.last_seed = Some((t, n));
            return;
        }
        self.next_seed(t, t);
    }

    /// The id seed of an episode beginning at `start`, taken at `now` (the earliest time a
    /// later event or deadline can have): `start` and how many episodes of the group began
    /// at that instant before it, so two episodes never share an id (DESIGN: rule + group +
    /// episode start). The seeds a later episode may still begin at the same instant as are
    /// kept: those at `now` or later, at a pending wait's deadline or later, and at the time
    /// of an event a partial match holds (a match begins at its first event, or at a later
    /// one once a closure slides); the others go, so the list stays as short as the partial
    /// matches.
    fn next_seed(&mut self, start: Timestamp, now: Timestamp) -> IdSeed {
        let runs = &self.runs;
        let rare = self.rare.get_or_insert_with(Default::default);
        let floor = (rare.waits.iter().map(|w| w.deadline)).fold(start.min(now), Timestamp::min);
        let mut n = match rare.last_seed {
            Some((at, k)) if at == start => k + 1,
            _ => 0,
        };
        if runs.is_empty() && rare.seeds.iter().all(|&(at, _)| at < floor) {
            // (The common case, a match of one event with none pending: every seed goes.)
            rare.seeds.clear();
        } else {
            rare.seeds
                .retain(|&(at, _)| at >= floor || runs.iter().any(|r| r.items.holds_time(at)));
            for &(at, k) in &rare.seeds {
                if at == start {
                    n = n.max(k + 1);
                }
            }
        }
        let seed = (start, n);
        rare.seeds.push(seed);
        rare.last_seed = Some(seed);
        seed
    }

    /// Step B of [`LinearState::on_event`]: the waits of absences at the end that an event
    /// of `mask` is awaited by end.
    fn end_waits(&mut self, alts: &[Alt], mask: EvSet) {
        if let Some(rare) = &mut self.rare {
            rare.waits.retain(|w| {
                alts[w.alt as usize]
                    .end_absent
                    .as_ref()
                    .is_none_or(|e| e.set & mask == 0)
            });
        }
    }

    fn note_seen(&mut self, mask: EvSet, t: Timestamp) {
        let Some(rare) = &mut self.rare else {
            return;
        };
        for (e, slot) in rare.last_seen.iter_mut().enumerate() {
            if mask & (1u64 << e) != 0 {
                *slot = Some(slot.map_or(t, |s| s.max(t)));
            }
        }
    }

    fn expire(&mut self, alts: &[Alt], t: Timestamp, w: Duration, slides: bool) {
        let horizon = t.sub(w);
        self.runs.retain_mut(|r| {
            let alt = &alts[r.alt_id() as usize];
            if r.is_collector(alt) {
                while r.items.front().is_some_and(|i| i.time < horizon) {
                    r.pop_front(&alt.steps[0]);
                }
                !r.items.is_empty()
            } else if r.start >= horizon {
                true
            } else {
                slides && r.slide(alt, horizon)
            }
        });
        if self.rare.as_ref().is_some_and(|r| !r.bad_starts.is_empty()) {
            self.drop_bad_fronts(alts);
        }
    }

    fn finish(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        key: &GroupKey,
        r: Run,
        t: Timestamp,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) {
        let alt = &alts[r.alt_id() as usize];
        if let Some(end) = &alt.end_absent {
            // The absence at the end starts now, none while firing. A wait already pending
            // for this alternative covers a younger one (it fires first, and the younger
            // would fire while it fires), except where another alternative's match may take
            // the older one's events first (`or(seq(a, absent(b) for D), seq(a, c))` over
            // `a a c`): there the younger waits too, behind it (up to the partial-match
            // budget), and fires at its own deadline if the older is gone.
            let waiting = self.waits().iter().filter(|w| w.alt == r.alt_id()).count();
            let queue = alts.len() > 1 && waiting < ctx.max_partial;
            if self.episode.is_none() && (waiting == 0 || queue) {
                let deadline = match end.for_ {
                    Some(d) => t.add(d),
                    None => r.start.add(ctx.wmax().unwrap_or(Duration::ZERO)),
                };
                let alt = r.alt_id();
                let (events, ids) = r.into_wait_parts();
                self.rare().waits.push(Wait {
                    alt,
                    deadline,
                    events,
                    from: Some(t),
                    ids,
                });
            }
            return;
        }
        // The match consumes its events: other partial matches holding them are dropped, and
        // so are the waits (matches waiting for an absence at their end) holding any.
        if !self.runs.is_empty() {
            let mut ids: SmallVec<[u64; 4]> = r.items.iter().map(|i| i.id).collect();
            ids.sort_unstable();
            self.runs
                .retain(|o| !o.items.iter().any(|i| ids.binary_search(&i.id).is_ok()));
        }
        if let Some(rare) = self.rare.as_mut()
            && !rare.waits.is_empty()
        {
            rare.waits
                .retain(|w| !w.ids.iter().any(|id| r.items.iter().any(|i| i.id == *id)));
        }
        let last = &alt.steps[alt.steps.len() - 1];
        // Another alternative's closure completing while a closure episode is open (`or(seq(x,
        // y{2,}), seq(x, z{2,}))`): the same episode goes on, its events and what extends it
        // joined (a second alert would leave the first open for good).
        if last.repeat.is_some()
            && let Some(ep) = self.episode.as_mut()
            && let EpisodeKind::Closure(set) = ep.kind
        {
            ep.kind = EpisodeKind::Closure(set | last.set);
            ep.last = ep.last.max(t);
            ep.count = ep.taken().saturating_add(len_u32(r.items.len()));
            ep.events.extend(r.events());
            cap_events(&mut ep.events);
            return;
        }
        let id = self.next_seed(r.start, t);
        if last.repeat.is_some() {
            // A closure episode is one alert already, ended by a window of quiet: not
            // rate-limited. Only the closure's events extend it (and keep it from being
            // quiet): `seq(login, get{10,})` must not be held open by routine logins.
            let set = last.set;
            let (events, prefix) = r.events_and_prefix();
            let count = len_u32(r.items.len());
            emit(
                ctx,
                key,
                id,
                AlertState::Firing,
                t,
                (events.clone(), count),
                None,
                counters,
                out,
            );
            self.episode = Some(Box::new(Episode {
                id,
                kind: EpisodeKind::Closure(set),
                last: t,
                events,
                held_until: None,
                from: None,
                prefix,
                count,
            }));
            return;
        }
        if held_until(ctx, self.last_emit(), t, None).is_some() {
            counters.suppressed += 1;
            return;
        }
        self.rare().last_emit = Some(t);
        emit(
            ctx,
            key,
            id,
            AlertState::Firing,
            t,
            (r.events(), len_u32(r.items.len())),
            None,
            counters,
            out,
        );
    }

    fn on_timer(
        &mut self,
        ctx: &RuleCtx<'_>,
        alts: &[Alt],
        key: &GroupKey,
        now: Timestamp,
        counters: &mut RuleCounters,
        out: &mut Vec<Alert>,
    ) {
        // Absences at the end whose time passed.
        let mut due: Vec<Wait> = Vec::new();
        if let Some(rare) = &mut self.rare {
            rare.waits.retain(|w| {
                if w.deadline <= now {
                    due.push(w.clone());
                    false
                } else {
                    true
                }
            });
        }
        due.sort_by_key(|w| (w.deadline, w.alt));
        for w in due {
            if self.episode.is_some() {
                continue;
            }
            let set = alts[w.alt as usize]
                .end_absent
                .as_ref()
                .map_or(0, |e| e.set);
            let id = self.next_seed(w.deadline, w.deadline);
            let for_ = alts[w.alt as usize]
                .end_absent
                .as_ref()
                .and_then(|e| e.for_);
            let held_until = held_until(ctx, self.last_emit(), w.deadline, for_);
            // (`ids` holds every event of the match; older waits have none.)
            let count = len_u32(w.ids.len().max(w.events.len()));
            if held_until.is_none() {
                let reason = (w.deadline < ctx.outage_until).then_some(Reason::Outage);
                emit(
                    ctx,
                    key,
                    id,
                    AlertState::Firing,
                    w.deadline,
                    (w.events.to_vec(), count),
                    reason,
                    counters,
                    out,
                );
                self.rare().last_emit = Some(w.deadline);
            }
            // The wait is a match now: it consumes its events (a partial match of another
            // alternative holding them is dropped, as when any match completes).
            self.runs
                .retain(|r| !r.items.iter().any(|i| w.ids.contains(&i.id)));
            let from = Some(w.from());
            self.episode = Some(Box::new(Episode {
                id,
                kind: EpisodeKind::Absence(set),
                last: w.deadline,
                events: w.events.into_vec(),
                held_until,
                from,
                prefix: 0,
                count,
            }));
        }
        if let Some(ep) = self.episode.as_mut()
            && ep.held_until.is_some()
        {
            let rare = self.rare.get_or_insert_with(Box::default);
            ep.release(ctx, key, now, &mut rare.last_emit, counters, out);
        }
        // A closure episode ends after a window of quiet.
        if let (Some(ep), Some(w)) = (&self.episode, ctx.wmax())
            && matches!(ep.kind, EpisodeKind::Closure(_))
            && ep.last.add(w) <= now
        {
            let at = ep.last.add(w);
            let ep_id = ep.id;
            let events = (ep.events.clone(), ep.taken());
            self.episode = None;
            emit(
                ctx,
                key,
                ep_id,
                AlertState::Resolved,
                at,
                events,
                Some(Reason::EpisodeEnd),
                counters,
                out,
            );
        }
        if let Some(w) = ctx.wmax() {
            self.expire(alts, now, w, ctx.slides);
        }
    }

    fn next_wake(&self, ctx: &RuleCtx<'_>) -> Option<Timestamp> {
        let mut wake: Option<Timestamp> = None;
        let mut consider = |t: Timestamp| wake = Some(wake.map_or(t, |w| w.min(t)));
        for w in self.waits() {
            consider(w.deadline);
        }
        if let Some(at) = self.episode.as_ref().and_then(|e| e.held_until) {
            consider(at);
        }
        if let Some(w) = ctx.wmax() {
            if let Some(ep) = &self.episode
                && matches!(ep.kind, EpisodeKind::Closure(_))
            {
                consider(ep.last.add(w));
            }
            // Free partial matches that can no longer complete, when they hold enough to
            // matter (else the next transition drops them).
            let held: usize = self.runs.iter().map(|r| r.items.len()).sum();
            if held > LAZY_EXPIRY_ITEMS
                && let Some(oldest) = self.runs.iter().map(|r| r.start).min()
            {
                consider(oldest.add(w).add(Duration(1)));
            }
        }
        wake
    }
}

/// Tries to let run `r` take the event; on success the run has advanced.
// Inlined into the delivery's loop over the partial matches (the hot path of a flood), though
// the copies of step E call it too.
#[inline(always)]
fn take(
    ctx: &RuleCtx<'_>,
    alt: &Alt,
    r: &mut Run,
    t: Timestamp,
    mask: EvSet,
    ev: &Arc<Event>,
    id: u64,
) -> Took {
    let pos = r.pos as usize;
    if pos >= alt.steps.len() {
        return Took::No;
    }
    let step = &alt.steps[pos];
    let last = alt.steps.len() - 1;
    let collecting = step.repeat.is_some() && r.count > 0;
    if collecting {
        let rep = step.repeat.as_ref().map_or((1, None), |x| (x.min, x.max));
        let satisfied = effective_count(r, step) >= rep.0;
        if satisfied
            && pos < last
            && let Some(next) = alt.steps.get(pos + 1)
            && next.set & mask != 0
            && guard_ok(next, r, t)
            && let Some(dv) = distinct_value(next, ev)
        {
            let completes = pos + 1 == last && next.repeat.as_ref().is_none_or(|x| x.min <= 1);
            if !completes || t.since(r.start) >= ctx.wmin() {
                r.pos += 1;
                r.count = 0;
                if step.repeat.as_ref().is_some_and(|x| x.distinct.is_some()) {
                    // Its values are counted: a later `distinct` closure counts its own
                    // (`seq(a{2,} distinct(msg), b{2,} distinct(msg))` must not take the a's).
                    r.distinct = None;
                }
                r.enter(
                    next,
                    Item {
                        time: t,
                        id,
                        ev: ev.clone(),
                        dv,
                    },
                );
                return Took::Yes;
            }
        }
        if step.set & mask != 0
            && let Some(dv) = distinct_value(step, ev)
        {
            let at_max = rep.1.is_some_and(|m| effective_count(r, step) >= m);
            // A flood inside the window must not grow memory without bound: a closure holds
            // at most MAX_CLOSURE_ITEMS events (or twice its minimum, if more). At the start of
            // a pattern it slides (the oldest goes); in the middle it stops collecting. One at
            // the start with no upper count, no `distinct` and no least duration, in a pattern
            // of one alternative that does not end in an absence, holds only its minimum, or
            // the events an alert shows if more: a match needs that many of the window before
            // its next step and shows the latest; the older ones could only slide out unused
            // (`seq(fail{5,}, ok) within 5m` under a brute force of thousands of failures per
            // address kept them all, about 1 KB each). Not with other alternatives, whose
            // runs start on the same events and must stay in step with it (and whose runs a
            // match consumes by the events it holds), nor with an absence at the end, whose
            // wait may be reckoned from the match's start.
            let cap = if r.is_collector(alt)
                && alt.start_absent.is_none()
                && rep.1.is_none()
                && step.repeat.as_ref().is_some_and(|x| x.distinct.is_none())
                && ctx.wmin() == Duration::ZERO
                && alt.end_absent.is_none()
                && !ctx.counts
                && matches!(&*ctx.plan, Plan::Linear { alts } if alts.len() == 1)
            {
                (rep.0 as usize).clamp(MAX_ALERT_EVENTS, 100_000)
            } else {
                MAX_CLOSURE_ITEMS.max((rep.0 as usize).min(100_000) * 2)
            };
            let full = r.items.len() >= cap;
            if (at_max || full) && !r.is_collector(alt) {
                return Took::No;
            }
            let again = dv
                .as_deref()
                .filter(|v| r.distinct.as_ref().is_some_and(|d| d.contains_key(*v)));
            // A `distinct` closure with a small upper count keeps one event per value, the
            // latest: a value seen again replaces its older event, so the closure holds the
            // latest `m` values (a scanner retrying a port is still a scan of `m` ports, not
            // one short of it), and no more than `m` events (each repeat costs at most `m`).
            let one_per_value = step
                .repeat
                .as_ref()
                .is_some_and(|x| x.distinct.is_some() && x.max.is_some_and(|m| m <= ONE_PER_VALUE));
            if let (true, Some(v)) = (one_per_value, again) {
                r.drop_value(v);
            } else if at_max {
                // A new value at the cap: the oldest values go, each with its repeats.
                while r
                    .distinct
                    .as_ref()
                    .is_some_and(|d| d.len() as u32 >= rep.1.unwrap_or(0))
                    && !r.items.is_empty()
                {
                    r.pop_front(step);
                }
                if step.repeat.as_ref().is_some_and(|x| x.distinct.is_none()) {
                    r.pop_front(step);
                }
            }
            if r.items.len() >= cap {
                r.pop_front(step);
            }
            r.push(
                step,
                Item {
                    time: t,
                    id,
                    ev: ev.clone(),
                    dv,
                },
            );
            r.count = r.count.saturating_add(1);
            return Took::Yes;
        }
        return Took::No;
    }
    if step.set & mask != 0 && guard_ok(step, r, t) {
        let Some(dv) = distinct_value(step, ev) else {
            return Took::No;
        };
        let completes = pos == last && step.repeat.as_ref().is_none_or(|x| x.min <= 1);
        if completes && t.since(r.start) < ctx.wmin() {
            return Took::No;
        }
        r.enter(
            step,
            Item {
                time: t,
                id,
                ev: ev.clone(),
                dv,
            },
        );
        return Took::Yes;
    }
    Took::No
}

fn complete(ctx: &RuleCtx<'_>, alt: &Alt, r: &Run, t: Timestamp) -> bool {
    let n = alt.steps.len();
    let pos = r.pos as usize;
    let done = if pos >= n {
        true
    } else if pos == n - 1 {
        let step = &alt.steps[pos];
        step.repeat
            .as_ref()
            .is_some_and(|rep| r.count > 0 && effective_count(r, step) >= rep.min)
    } else {
        false
    };
    done && t.since(r.start) >= ctx.wmin()
}

/// An open episode ended by one event: `resolved` by the awaited event, or `retracted` by a
/// late one; an episode held back by the trigger's period ends unseen (counted as
/// suppressed).
#[allow(clippy::too_many_arguments)]
fn end_by_event(
    ctx: &RuleCtx<'_>,
    key: &GroupKey,
    ep: &Episode,
    state: AlertState,
    at: Timestamp,
    ev: &Arc<Event>,
    counters: &mut RuleCounters,
    out: &mut Vec<Alert>,
) {
    if ep.held_until.is_some() {
        counters.suppressed += 1;
        return;
    }
    let reason = (state == AlertState::Retracted).then_some(Reason::LateEvent);
    emit_ending(
        ctx,
        key,
        ep.id,
        state,
        at,
        (vec![ev.clone()], ep.taken()),
        &ep.events,
        reason,
        counters,
        out,
    );
}

/// Appends one alert change per rule the state serves (its message is rendered by the reader):
/// `events` are the match's or episode's (the last [`MAX_ALERT_EVENTS`] kept) and how many
/// it took in all.
fn emit(
    ctx: &RuleCtx<'_>,
    key: &GroupKey,
    id: IdSeed,
    state: AlertState,
    time: Timestamp,
    events: (Vec<Arc<Event>>, u32),
    reason: Option<Reason>,
    counters: &mut RuleCounters,
    out: &mut Vec<Alert>,
) {
    emit_ending(
        ctx,
        key,
        id,
        state,
        time,
        events,
        &[],
        reason,
        counters,
        out,
    );
}

/// [`emit`] for a change that ends an episode because of one event: `episode` holds the
/// episode's events, from which the message fills what that event lacks.
#[allow(clippy::too_many_arguments)]
fn emit_ending(
    ctx: &RuleCtx<'_>,
    key: &GroupKey,
    id: IdSeed,
    state: AlertState,
    time: Timestamp,
    (mut events, count): (Vec<Arc<Event>>, u32),
    episode: &[Arc<Event>],
    reason: Option<Reason>,
    counters: &mut RuleCounters,
    out: &mut Vec<Alert>,
) {
    cap_events(&mut events);
    // Rules that share this state (the same meaning under other names) each get their alert;
    // they share the group, the events and the part of the id after the rule's name.
    let mut tail = Vec::with_capacity(32);
    Alert::id_tail(key, id.0, id.1, &mut tail);
    let body = Arc::new(Body {
        members: ctx.members.clone(),
        group: ctx
            .rule
            .group_by
            .iter()
            .cloned()
            .zip(key.iter().cloned())
            .collect(),
        events: events.into(),
        context: episode.into(),
        count,
        reason,
        id_tail: tail.into(),
    });
    // Counted once: each rule sharing the state emits this change (its `/stats` line counts
    // its own alerts, as without sharing). One entry for all of them, made into one alert
    // each when the engine puts the alerts in order.
    counters.alerts += 1;
    let member = match ctx.members.len() {
        0 => return,
        1 => 0,
        _ => Alert::EVERY_MEMBER,
    };
    out.push(Alert {
        time,
        state,
        member,
        body,
    });
}

/// Fills a message template from the group, then the most recent matching event, then the
/// most recent event of `context` (an ended episode's, for the fields its ending event lacks).
pub fn render_message(
    rule: &Rule,
    group: &[(String, Value)],
    events: &[Arc<Event>],
    context: &[Arc<Event>],
    count: u32,
) -> String {
    // Values are written straight into the message (no String per value): alert storms make
    // one message per alert.
    let Some(parts) = &rule.message else {
        let mut s = String::with_capacity(rule.name.len() + 24 * group.len());
        s.push_str(&rule.name);
        for (k, v) in group {
            s.push(' ');
            s.push_str(k);
            s.push('=');
            let _ = v.write_to(&mut s);
        }
        return s;
    };
    let mut s = String::with_capacity(64);
    let caps = Vec::new();
    for p in parts {
        match p {
            TemplatePart::Text(t) => s.push_str(t),
            TemplatePart::Field(k) => {
                if let Some((_, v)) = group.iter().find(|(n, _)| n == k.name()) {
                    let _ = v.write_to(&mut s);
                } else if k.name() == "rule" {
                    s.push_str(&rule.name);
                } else if k.name() == "severity" {
                    // The alert's own severity (as in its JSON), in every state of the
                    // episode: not a syslog event's severity number.
                    s.push_str(rule.severity.name());
                } else if let Some(v) = events
                    .iter()
                    .rev()
                    .chain(context.iter().rev())
                    .find_map(|e| lookup(e, &caps, k))
                {
                    let _ = v.get().write_to(&mut s);
                } else if k.name() == "count" {
                    // How many events the match or episode took (an absence: none), unless
                    // an event has a field of that name (a capture), shown above.
                    s.push_str(&count.to_string());
                } else {
                    s.push('{');
                    s.push_str(k.name());
                    s.push('}');
                }
            }
        }
    }
    s
}

/// Serde helper: an optional instant in one word ([`NO_TIME`] for none) as an `Option`.
mod opt_time {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::rules::ir::NO_TIME;
    use crate::time::Timestamp;

    /// `NO_TIME` as `null`, any other instant as itself.
    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        super::opt(*t).serialize(s)
    }

    /// `null` as `NO_TIME`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        Ok(Option::<Timestamp>::deserialize(d)?.unwrap_or(NO_TIME))
    }
}

/// Serde helper: a map with non-string keys as a list of pairs.
mod pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::event::Value;

    type Counts = Option<Box<BTreeMap<Value, u32>>>;

    /// As a list of (value, count) pairs; no map is an empty list.
    pub fn serialize<S: Serializer>(m: &Counts, s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<(&Value, &u32)> = m.iter().flat_map(|m| m.iter()).collect();
        v.serialize(s)
    }

    /// An empty list is no map.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Counts, D::Error> {
        let v: Vec<(Value, u32)> = Vec::deserialize(d)?;
        Ok((!v.is_empty()).then(|| Box::new(v.into_iter().collect())))
    }
}

/// `n` as a count of events (they are far fewer than `u32::MAX`; saturating all the same).
fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Source;

    fn item(i: u64) -> Item {
        let ts = Timestamp(i as i64);
        Item {
            time: ts,
            id: i,
            ev: Arc::new(Event::new(Source::Syslog, ts, ts)),
            dv: None,
        }
    }

    fn ids(items: &Items) -> Vec<u64> {
        items.iter().map(|i| i.id).collect()
    }

    /// A run checkpointed before `distinct` was boxed restores, with or without counts.
    #[test]
    fn runs_restore_with_or_without_distinct_counts() {
        let base = r#""alt":0,"pos":0,"count":1,"start":5,"last_end":5,"items":[]"#;
        let no_field: Option<Run> = serde_json::from_str(&format!("{{{base}}}")).ok();
        let empty: Option<Run> = serde_json::from_str(&format!("{{{base},\"distinct\":[]}}")).ok();
        let v = serde_json::to_string(&Value::Int(3)).unwrap_or_default();
        let counts = format!("[[{v},2]]");
        let some: Option<Run> =
            serde_json::from_str(&format!("{{{base},\"distinct\":{counts}}}")).ok();
        assert!(no_field.is_some_and(|r| r.distinct.is_none()));
        assert!(empty.is_some_and(|r| r.distinct.is_none()));
        let Some(r) = some else {
            panic!("a run with distinct counts restores");
        };
        assert_eq!(r.distinct.as_ref().map(|d| d.len()), Some(1));
        let again = serde_json::to_value(&r).ok();
        assert_eq!(
            again
                .as_ref()
                .and_then(|v| v.get("distinct"))
                .map(|d| d.to_string()),
            Some(counts)
        );
    }

    /// A partial match stays small (a delivery reads and writes its first cache line; a
    /// second event, inline, the rest): its items are two inline events and their kind's
    /// word (no niche of an event holds it), 104 bytes a run.
    #[test]
    fn a_run_is_small() {
        assert_eq!(
            std::mem::size_of::<Items>(),
            2 * std::mem::size_of::<Item>() + 8
        );
        assert!(
            std::mem::size_of::<Run>() <= 104,
            "{}",
            std::mem::size_of::<Run>()
        );
    }

    /// Either kind of group state fits in the other's 40 bytes, with no word for the kind.
    #[test]
    fn group_state_is_five_words() {
        assert_eq!(std::mem::size_of::<LinearState>(), 40);
        assert_eq!(std::mem::size_of::<GroupState>(), 40);
    }

    /// An absence group checkpointed with `Option` instants (`null` or a time) restores, and
    /// checkpoints the same way.
    #[test]
    fn absence_instants_checkpoint_as_options() {
        let t = Timestamp::from_secs(1_000);
        let tj = serde_json::to_string(&t).unwrap_or_default();
        let old = format!("{{\"last_seen\":{tj},\"firing\":null}}");
        let a: Option<AbsenceState> = serde_json::from_str(&old).ok();
        let Some(a) = a else {
            panic!("an old checkpoint restores");
        };
        assert_eq!((a.last_seen, a.last_fired), (t, NO_TIME));
        assert_eq!(
            serde_json::to_string(&a).ok(),
            Some(format!(
                "{{\"last_seen\":{tj},\"firing\":null,\"last_fired\":null,\"late_after\":null}}"
            ))
        );
        let none: Option<AbsenceState> =
            serde_json::from_str(r#"{"last_seen":null,"firing":null,"last_fired":null}"#).ok();
        assert!(none.is_some_and(|a| a.last_seen == NO_TIME && a.last_fired == NO_TIME));
    }

    /// Waits and episodes saved before they kept when an absence began still restore; a
    /// wait then takes its last event's time.
    #[test]
    fn waits_and_episodes_from_older_checkpoints_restore() {
        let t = Timestamp::from_secs(1_000);
        let tj = serde_json::to_string(&t).unwrap_or_default();
        let ev = Arc::new(Event::new(
            crate::event::Source::Syslog,
            Timestamp::from_secs(7),
            Timestamp::from_secs(7),
        ));
        let evj = serde_json::to_string(&ev).unwrap_or_default();
        let old = format!("{{\"alt\":0,\"deadline\":{tj},\"events\":[{evj}]}}");
        let w: Option<Wait> = serde_json::from_str(&old).ok();
        let Some(w) = w else {
            panic!("an old wait restores: {old}");
        };
        assert_eq!((w.from, w.from()), (None, Timestamp::from_secs(7)));
        let new = Wait {
            from: Some(Timestamp::from_secs(5)),
            ..w
        };
        assert_eq!(new.from(), Timestamp::from_secs(5));
        let old_ep =
            format!("{{\"id\":[{tj},0],\"kind\":{{\"Absence\":1}},\"last\":{tj},\"events\":[]}}");
        let ep: Option<Episode> = serde_json::from_str(&old_ep).ok();
        assert!(
            ep.is_some_and(|e| e.from.is_none() && e.held_until.is_none()),
            "an old episode restores: {old_ep}"
        );
    }

    /// A wait's inline events and ids serialize as the `Vec`s they replaced, to the same
    /// bytes in JSON and postcard (checkpoints of either kind restore both ways), inline or
    /// spilled.
    #[test]
    fn waits_serialize_as_with_vecs() {
        #[derive(Serialize, Deserialize)]
        struct VecWait {
            alt: u16,
            deadline: Timestamp,
            events: Vec<Arc<Event>>,
            #[serde(default)]
            from: Option<Timestamp>,
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            ids: Vec<u64>,
        }
        let ev = |s: i64| {
            Arc::new(Event::new(
                crate::event::Source::Syslog,
                Timestamp::from_secs(s),
                Timestamp::from_secs(s),
            ))
        };
        for n in [0usize, 1, 2, 3, 5] {
            let events: Vec<Arc<Event>> = (0..n).map(|i| ev(i as i64)).collect();
            let ids: Vec<u64> = (0..n as u64).map(|i| i * 7 + 1).collect();
            let old = VecWait {
                alt: 1,
                deadline: Timestamp::from_secs(60),
                events: events.clone(),
                from: Some(Timestamp::from_secs(3)),
                ids: ids.clone(),
            };
            let new = Wait {
                alt: 1,
                deadline: Timestamp::from_secs(60),
                events: WaitVec::from_vec(events),
                from: Some(Timestamp::from_secs(3)),
                ids: WaitVec::from_vec(ids),
            };
            let json = serde_json::to_string(&old).unwrap_or_default();
            assert!(!json.is_empty());
            assert_eq!(serde_json::to_string(&new).unwrap_or_default(), json);
            let bin = postcard::to_stdvec(&old).unwrap_or_default();
            assert!(!bin.is_empty());
            assert_eq!(postcard::to_stdvec(&new).unwrap_or_default(), bin);
            // What was saved restores, and saves again to the same bytes.
            let back: Option<Wait> = serde_json::from_str(&json).ok();
            let back = back.map(|w| serde_json::to_string(&w).unwrap_or_default());
            assert_eq!(back.as_deref(), Some(json.as_str()));
            if n > 0 {
                // (Postcard cannot restore a field skipped when empty, before as now.)
                let back: Option<Wait> = postcard::from_bytes(&bin).ok();
                let back = back.map(|w| postcard::to_stdvec(&w).unwrap_or_default());
                assert_eq!(back, Some(bin));
            }
        }
    }

    /// `Items` behaves as the `VecDeque` it replaced, inline and beyond, and checkpoints as
    /// the same JSON sequence (old checkpoints restore).
    #[test]
    fn items_act_and_serialize_as_a_deque() {
        let mut items = Items::default();
        let mut model: VecDeque<Item> = VecDeque::new();
        // Pushes and pops across the inline/ring boundary, in both directions.
        let ops = [1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1];
        for (n, &op) in ops.iter().enumerate() {
            if op == 1 {
                items.push_back(item(n as u64));
                model.push_back(item(n as u64));
            } else {
                assert_eq!(
                    items.pop_front().map(|i| i.id),
                    model.pop_front().map(|i| i.id)
                );
            }
            assert_eq!(ids(&items), model.iter().map(|i| i.id).collect::<Vec<_>>());
            assert_eq!(items.len(), model.len());
            assert_eq!(items.is_empty(), model.is_empty());
            assert_eq!(items.front().map(|i| i.id), model.front().map(|i| i.id));
            assert_eq!(items.back().map(|i| i.id), model.back().map(|i| i.id));
            let json = serde_json::to_string(&items).ok();
            assert_eq!(json, serde_json::to_string(&model).ok());
            let back: Option<Items> = json.and_then(|j| serde_json::from_str(&j).ok());
            assert_eq!(back.map(|b| ids(&b)), Some(ids(&items)));
        }
    }
}
