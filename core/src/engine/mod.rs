//! The CEP engine: fed events and "the time is now T", it returns alerts.
//!
//! Layout: the [`filter`] finds which event definitions an event satisfies; each match is keyed
//! by its group and handed to the rule's *lane* (one lane for processing time, one per
//! `max_delay` for event time; an event-time lane reorders events below its watermark); the
//! lane feeds the group's state machine ([`state`]) and drives its timers on a hierarchical
//! [`wheel`]. The engine never reads a clock: time only moves when the caller pushes an event
//! (its arrival stamp) or calls [`Engine::advance_to`].

mod compact;
pub mod family;
pub mod filter;
pub mod plan;
pub mod reshard;
pub mod state;
pub mod wheel;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::alert::{Alert, AlertState, Reason};
use crate::event::{Event, Field, FieldKey, Value};
use crate::fnv::Fnv;
use crate::rules::ir::{Captures, EventDef, GroupField, Rule, RuleSet, TimeMode, key_value};
use crate::time::{Duration, Timestamp};
use compact::Compact;
use family::Family;
use filter::Filter;
use plan::{EvSet, Plan, PlanError};
use state::{Group, GroupKey, Member, RuleCounters, RuleCtx, RuleFacts, SavedGroup};
use wheel::{Settle, TimerEntry, Wheel};

/// Engine-wide settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Default `max_groups` for rules that set none.
    pub max_groups: u64,
    /// Default `max_partial_matches` for rules that set none.
    pub max_partial_matches: u64,
    /// Share work between rules (the predicate index, identical predicates evaluated once,
    /// rules with the same meaning run on one state). `false` is the unshared baseline
    /// (`--no-share`), the paper's RCEDA: every rule compiled on its own, no index, every
    /// event offered to every rule, which tests each of its definitions (so
    /// `predicate_evals` is events x definitions). Both give the same alerts.
    pub share: bool,
    /// The share of the (rule, group) space this engine owns, when several engines (CEP shards)
    /// split the work; `None`: all of it.
    pub partition: Option<Partition>,
    /// The input is a recording (replay, rule tests): event-time rules begin monitoring at
    /// the earliest event's time (DESIGN.md), however late its first line arrived. Live, the
    /// start is never put before the clock less the first sources' lag and `max_delay`, so a
    /// relay's backlog cannot blame expected groups for a silence nobody could have heard.
    pub recorded: bool,
}

/// One of `count` engines that split the (rule, group) space: a group of a rule with
/// `group_by` belongs to engine `stable_hash(key) % count`, an ungrouped rule to
/// `stable_hash(its meaning) % count` (so ungrouped rules spread over the engines, and rules
/// that share state land together).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// This engine's number, `0..count`.
    pub index: u32,
    /// How many engines split the work.
    pub count: u32,
}

impl Partition {
    /// The engine (of `count`) that owns `key` of `rule`.
    pub fn owner(rule: &Rule, canonical: &str, key: &[Value], count: u32) -> u32 {
        Partition::owner_of(!rule.group_by.is_empty(), canonical, key, count)
    }

    /// [`Partition::owner`] for a rule known by its meaning and whether it groups (what a
    /// checkpoint says of it).
    pub fn owner_of(grouped: bool, canonical: &str, key: &[Value], count: u32) -> u32 {
        let h = if grouped {
            stable_hash(key)
        } else {
            stable_hash_bytes(canonical.as_bytes())
        };
        (h % u64::from(count.max(1))) as u32
    }
}

/// The types of a rule's group key values, by `group_by` position (every definition gives a
/// group field one type: the checker sees to it).
fn key_types(rule: &Rule) -> Vec<crate::event::ValueType> {
    let Some(def) = rule.events.first() else {
        return Vec::new();
    };
    def.group_fields.iter().map(GroupField::ty).collect()
}

/// The network each of a rule's group key values is read as (`src/64`), by `group_by`
/// position; empty when none is.
fn key_nets(rule: &Rule) -> Vec<Option<(u8, u8)>> {
    let Some(def) = rule.events.first() else {
        return Vec::new();
    };
    if def.group_fields.iter().all(|f| f.net.is_none()) {
        return Vec::new();
    }
    def.group_fields.iter().map(|f| f.net).collect()
}

/// A hash of group key values that is the same on every run, build and machine (FNV-1a over a
/// tagged encoding): shard ownership and checkpoints may rely on it.
/// Routers and partitioned engines call it for every hit, so it allocates nothing: the type,
/// then the value's bytes (strings length-prefixed, numbers little-endian, addresses as octets).
pub fn stable_hash(key: &[Value]) -> u64 {
    let mut h = Fnv::new();
    for v in key {
        h.feed(&[v.ty() as u8]);
        match v {
            Value::Str(s) => {
                h.feed(&(s.len() as u64).to_le_bytes());
                h.feed(s.as_bytes());
            }
            Value::Int(i) => h.feed(&i.to_le_bytes()),
            Value::Float(x) => h.feed(&x.to_bits().to_le_bytes()),
            Value::Bool(b) => h.feed(&[u8::from(*b)]),
            Value::Ip(std::net::IpAddr::V4(a)) => h.feed(&a.octets()),
            Value::Ip(std::net::IpAddr::V6(a)) => h.feed(&a.octets()),
            Value::Time(t) => h.feed(&t.0.to_le_bytes()),
            Value::Duration(d) => h.feed(&d.0.to_le_bytes()),
        }
    }
    h.finish()
}

/// FNV-1a of `b`: the same on every run, build and machine (an ungrouped rule's shard is
/// that of its meaning's text; the fuzz targets draw their choices from their input with it).
pub fn stable_hash_bytes(b: &[u8]) -> u64 {
    let mut h = Fnv::new();
    h.feed(b);
    h.finish()
}

/// `max_groups` of a rule that sets none.
pub const DEFAULT_MAX_GROUPS: u64 = 1_000_000;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_groups: DEFAULT_MAX_GROUPS,
            max_partial_matches: 1_000,
            share: true,
            partition: None,
            recorded: false,
        }
    }
}

/// Why an engine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A rule's pattern cannot be planned.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A checkpoint could not be read.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
}

/// One rule state's counters and budgets ([`Engine::budget_counters`]).
#[derive(Debug)]
pub struct BudgetView<'a> {
    /// The rules sharing the state (one, unless several rules mean the same).
    pub rules: Vec<&'a str>,
    /// The rule's `max_groups` (or the engine's default), over all engines.
    pub max_groups: u64,
    /// Its `max_partial_matches` per group.
    pub max_partial_matches: u64,
    /// Its counters.
    pub counters: &'a RuleCounters,
}

/// Counters and sizes of one rule (for `/metrics`, budgets and the dashboard).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RuleStats {
    /// The rule's name.
    pub rule: String,
    /// Rules with the same meaning that share this rule's state (and these numbers).
    pub shared_with: Vec<String>,
    /// Groups held.
    pub groups: u64,
    /// Partial matches held.
    pub partial_matches: u64,
    /// Approximate bytes of state held: group slots and keys (their text included), the
    /// events partial matches hold (their text included; an event several groups hold is
    /// counted in each), a share of the family records.
    pub bytes: u64,
    /// Event counters.
    pub counters: RuleCounters,
}

/// Engine-wide counters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct EngineCounters {
    /// Events pushed.
    pub events: u64,
    /// Events that matched no rule.
    pub unmatched: u64,
    /// Matches whose group key could not be formed (a group field missing, or a text over
    /// [`MAX_KEY_TEXT`](crate::rules::ir::MAX_KEY_TEXT) bytes): once per (rule, event
    /// definition) the event matched, shared or not.
    pub keyless: u64,
    /// Late events, once per rule they were late for (shared or not, the same count).
    pub late: u64,
    /// Predicate evaluations (the Filter's work: shared predicates count once per event).
    pub predicate_evals: u64,
    /// Events stamped after their arrival (taken as arriving now by event-time rules).
    #[serde(default)]
    pub future: u64,
    /// Deliveries that found their group through their family's record (a lookup shared with
    /// another rule state of the same family for the same event) instead of their own. A
    /// diagnostic of the sharing: it depends on which shortcut found a group, not only on the
    /// input.
    #[serde(default)]
    pub family_lookups_saved: u64,
    /// Timers a group re-armed for the very instant they fired (a bug: nothing could have
    /// changed); each was dropped rather than fired again for ever, which would stall the
    /// engine. The group keeps its state and gets a timer again at its next event.
    #[serde(default)]
    pub stuck_timers: u64,
}

/// Where a rule's state comes from, besides its meaning: rules share a state only with the
/// same lineage (see [`Engine::with_cohorts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Lineage {
    /// When its rules began monitoring (see `RuleRt::cohort`).
    cohort: u64,
    /// The saved state it goes on from, if any.
    from: Option<usize>,
    /// A rule a saved state served under its name that does not go on from one (its meaning
    /// changed): it may carry discovered groups (`carry_discovered`), which a rule added now
    /// must not take from it.
    changed: bool,
}

/// A rule state at run time. In C order from a cache line's start, so that what a delivery
/// reads comes first, in as few lines as it fits: the slot and cold vectors, the lane and the
/// timing, then what a transition's context names, then its counters (Rust's own order spread
/// them over six lines; modelled L1d misses at 1,000 rules -15 %).
#[repr(C, align(64))]
struct RuleRt {
    slots: Vec<Option<Slot>>,
    /// Beside each occupied slot, its key and parked deadline.
    cold: Vec<Option<Cold>>,
    lane: usize,
    /// What a transition's context names (see [`RuleCtx`]). Its `members` are the rules
    /// served by this state: `rule` first, then rules with the same meaning (SO at the root,
    /// when sharing), shared with the state's alerts, which name their rule in it.
    facts: RuleFacts,
    /// When its rules began monitoring, as a number: 0 at the engine's start, then one more
    /// for each reload that added or changed rules. Rules share a state only within one
    /// cohort, so a rule added (or renamed, or changed into a running rule's meaning) begins
    /// at its reload and takes nothing from before it.
    cohort: u64,
    counters: RuleCounters,
    /// Definitions the plan uses; matches of others are ignored.
    used: EvSet,
    groups: HashMap<GroupKey, u32>,
    free: Vec<u32>,
    max_groups: u64,
    canonical: String,
    /// The definitions whose events may open a group ([`Plan::opens`]).
    opens: EvSet,
    /// Where the next look for an idle group to let go starts, when `max_groups` is full.
    idle_scan: u32,
}

/// A rule state split for writing: its context (read-only) beside its mutable parts.
struct Split<'a> {
    ctx: RuleCtx<'a>,
    groups: &'a mut HashMap<GroupKey, u32>,
    slots: &'a mut Vec<Option<Slot>>,
    cold: &'a mut Vec<Option<Cold>>,
    free: &'a mut Vec<u32>,
    counters: &'a mut RuleCounters,
}

impl RuleRt {
    /// Whether the engine of partition `p` owns this state's group `key`.
    fn owned_by(&self, p: Partition, key: &[Value]) -> bool {
        Partition::owner(&self.facts.rule, &self.canonical, key, p.count) == p.index
    }

    /// When its rules began monitoring, if they have.
    fn monitor_start(&self) -> Option<Timestamp> {
        (self.facts.monitor_start != Timestamp::MIN).then_some(self.facts.monitor_start)
    }

    /// The rule's context, read-only.
    fn ctx(&self, outage_until: Timestamp) -> RuleCtx<'_> {
        RuleCtx {
            facts: &self.facts,
            outage_until,
        }
    }

    /// The rule's context beside its groups and counters (a split borrow: the rule is read
    /// while its groups and counters are written).
    fn split(&mut self, outage_until: Timestamp) -> Split<'_> {
        let RuleRt {
            facts,
            groups,
            slots,
            cold,
            free,
            counters,
            ..
        } = self;
        Split {
            ctx: RuleCtx {
                facts,
                outage_until,
            },
            groups,
            slots,
            cold,
            free,
            counters,
        }
    }

    /// Runs `f` on a group with the rule's context beside it. The group's [`Cold`] part is
    /// handed unread (`Some` whenever the slot is occupied), so a transition that needs
    /// neither the key nor the parked deadline does not load it.
    fn with_group<R>(
        &mut self,
        slot: u32,
        outage_until: Timestamp,
        f: impl FnOnce(&RuleCtx<'_>, &mut Slot, &mut Option<Cold>, &mut RuleCounters) -> R,
    ) -> Option<R> {
        let Split {
            ctx,
            slots,
            cold,
            counters,
            ..
        } = self.split(outage_until);
        let s = slots.get_mut(slot as usize)?.as_mut()?;
        let c = cold.get_mut(slot as usize)?;
        Some(f(&ctx, s, c, counters))
    }

    /// Rules `who` leave or join this state at a reload: every group's open alert is
    /// announced to them as `state` ([`Group::members_change`]); `compact`: the state's
    /// groups in compact records.
    #[allow(clippy::too_many_arguments)]
    fn members_change<'g>(
        &mut self,
        compact: impl Iterator<Item = (&'g GroupKey, &'g Group)>,
        who: Vec<Member>,
        now: Timestamp,
        state: AlertState,
        reason: Option<Reason>,
        outage_until: Timestamp,
        out: &mut Vec<Alert>,
    ) {
        let Split {
            ctx,
            slots,
            cold,
            counters,
            ..
        } = self.split(outage_until);
        // The same facts, announced to `who` only.
        let facts = RuleFacts {
            members: Arc::from(who),
            rule: ctx.rule.clone(),
            plan: ctx.plan.clone(),
            ..*ctx.facts
        };
        let ctx = RuleCtx {
            facts: &facts,
            outage_until,
        };
        // In key order: the same whichever slots the groups took (shared or not).
        let mut held: Vec<(&GroupKey, &Group)> = slots
            .iter()
            .zip(cold.iter())
            .filter_map(|(s, c)| Some((&c.as_ref()?.key, &s.as_ref()?.group)))
            .collect();
        held.extend(compact.map(|(k, g)| -> (&GroupKey, &Group) { (k, g) }));
        held.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, group) in held {
            group.members_change(&ctx, key, now, state, reason, counters, out);
        }
    }
}

/// A group key as an operator writes it, `text`, as the texts of its values in `group_by`
/// order (`None`: not a key of that shape). Either the group object of an alert
/// (`{"host":"web,1","app":"nginx"}`, copied from it: each field named, so values may hold
/// commas), or the values in order, comma-separated, as in `expect`.
pub fn group_key_texts(group_by: &[String], text: &str) -> Option<Vec<String>> {
    Some(match serde_json::from_str(text.trim()) {
        Ok(serde_json::Value::Object(obj)) => {
            if obj.len() != group_by.len() {
                return None;
            }
            group_by
                .iter()
                .map(|g| obj.get(g).map(group_value_text))
                .collect::<Option<_>>()?
        }
        // (An ungrouped rule's one group: its key is empty.)
        _ if group_by.is_empty() && text.trim().is_empty() => Vec::new(),
        _ if group_by.len() == 1 => vec![text.trim().to_string()],
        _ => text.split(',').map(|v| v.trim().to_string()).collect(),
    })
}

/// The text of one value of an alert's `group` object, as [`group_key_texts`] gives it (a
/// string as it is, anything else as its JSON), so a key compares with a stored alert's group.
pub fn group_value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        // As the engine writes a float (`1`, not JSON's `1.0`).
        serde_json::Value::Number(n) if n.is_f64() => {
            n.as_f64().map_or_else(|| n.to_string(), |x| x.to_string())
        }
        other => other.to_string(),
    }
}

/// One group of a rule as [`Engine::list_groups`] shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupView {
    /// Its key: the `group_by` values, in order.
    pub key: Vec<Value>,
    /// Listed in `expect` (watched from the start, never forgotten).
    pub expected: bool,
    /// An alert of it is firing now.
    pub firing: bool,
    /// Its last event, or when it began to be watched (an expected group never heard from).
    pub active_at: Timestamp,
}

/// A group's slot: what a delivery reads and writes, one cache line. What only alerts,
/// lookups by key and timer bookkeeping read is beside it, in [`Cold`].
#[repr(align(64))]
struct Slot {
    group: Group,
    /// The deadline of the group's armed timer entry (`MAX`: none).
    armed_at: Timestamp,
}

/// The rest of a group's slot, at the same index in [`RuleRt::cold`].
struct Cold {
    /// The group's key.
    key: GroupKey,
    /// A later entry of this group still in the wheel, left there when an earlier deadline
    /// was armed (`MAX`: none). It is taken back when the group next wants a timer at or after
    /// it, so a group whose partial matches come and go does not leave an entry for its far
    /// `forget_after` deadline in the wheel at every turn (they would pile up for 7 days).
    parked: Timestamp,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Pending {
    time: Timestamp,
    seq: u64,
    rule: u32,
    key: GroupKey,
    mask: EvSet,
    ev: Arc<Event>,
}

// A total order: one event can feed one state under several keys, and a tie would leave the
// release order to the heap's history (so to everything buffered with it). Such hits go in
// definition order (the lowest definition each matched), as in the processing-time lane.
impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.time, self.seq, self.rule)
            .cmp(&(o.time, o.seq, o.rule))
            .then_with(|| self.mask.trailing_zeros().cmp(&o.mask.trailing_zeros()))
            .then_with(|| self.key.cmp(&o.key))
    }
}

struct Lane {
    mode: TimeMode,
    delay: Duration,
    /// The lane's time: the arrival clock (processing) or the watermark (event).
    now: Timestamp,
    wheel: Wheel,
    pending: BinaryHeap<Reverse<Pending>>,
    max_event: Option<Timestamp>,
    last_arrival: Option<Timestamp>,
    /// Event time: the watermark at the last arrival, from which an idle lane's watermark
    /// moves on with the clock.
    mark: Option<Timestamp>,
    /// Event time: the arrival clock when the lane began (see [`Engine::start_lane`]).
    first_arrival: Option<Timestamp>,
    generation_bump: u32,
    /// Event time: the earliest event time seen before the lane's rules began monitoring
    /// (they begin at the first event in event-time order, not the first to arrive).
    min_event: Option<Timestamp>,
    started: bool,
    /// Event time: the canonical conditions whose events make the lane's watermark (its rules'
    /// used definitions), sorted; empty for the processing-time lane.
    sources: Vec<String>,
    /// Event time: beside each of `sources`, the fields its definitions key groups by (an
    /// event without them is no source: see `lane_sources`).
    keys: Vec<Vec<String>>,
    /// Event time: a sweep may pass the lane by while the arrival clock is before this: nothing
    /// of it can be due sooner (its watermark trails the clock by `max_delay` at least).
    /// `MIN` whenever a timer is armed outside a release of the lane.
    skip_until: Timestamp,
}

/// The engine. See the module docs.
pub struct Engine {
    cfg: EngineConfig,
    ruleset: RuleSet,
    rts: Vec<RuleRt>,
    filter: Filter,
    lanes: Vec<Lane>,
    clock: Option<Timestamp>,
    next_seq: u64,
    /// Idle groups let go to make room under a full `max_groups` (see `idle_group`), counted
    /// so that an event's deliveries know when what was read ahead may be stale.
    idle_freed: u64,
    outage_until: Timestamp,
    /// The first event's time (at most its arrival) when the engine began with one: with
    /// [`EngineConfig::recorded`], what an event-time lane's start may not go before, less
    /// `max_delay` (nothing earlier can be matched). Not saved: a recording is not restored.
    first_stamp: Option<Timestamp>,
    /// Restored after downtime: the next advance marks deadlines it passes as outages.
    outage_pending: bool,
    /// Event time: the earliest and the latest event time of any event seen (what a lane
    /// none of whose sources spoke yet begins and stops by, in replay).
    min_event_any: Option<Timestamp>,
    max_event_any: Option<Timestamp>,
    /// Event time: the arrival clock from which the lanes an event is no source of are
    /// brought up to date again (every [`SWEEP_EVERY`] of arrivals, not at every event).
    sweep_at: Timestamp,
    counters: EngineCounters,
    /// Rule-set index -> index of the state that runs it.
    rt_of: Vec<u32>,
    /// Per predicate: the distinct (state, definition) pairs it feeds (rules that share a
    /// state count once), with the first rule of each (for ordering), unused definitions
    /// left out.
    consumers: Vec<Vec<Consumer>>,
    cands: Vec<(u32, u32)>,
    /// Per predicate: its one consumer is grouped by the field the predicate is indexed on,
    /// so the index entry can carry the group's slot.
    hintable: Vec<Option<Field>>,
    hits: Vec<Hit>,
    /// The event-time lanes the event being pushed is a source of, sorted (reused).
    lane_hit: Vec<u32>,

    /// Per state (sized once: states are fixed for an engine's life), (stamp, index in
    /// `hits`) of its first hit from the event being evaluated.
    hit_of: Vec<(u64, u32)>,
    /// Scratch for `sort_hits`.
    hit_perm: Vec<(u64, u32)>,
    /// Stamp of the evaluation in progress (see `hit_of`).
    hit_stamp: u64,
    /// Scratch for [`Engine::order_alerts`]: each alert's (time, rule order) and index.
    alert_keys: Vec<((Timestamp, u32), u32)>,
    /// Scratch for [`Engine::expand_alerts`].
    alert_scratch: Vec<Alert>,
    /// Scratch for [`Engine::expand_alerts`]'s heap: each entry's next alert's (time, rank),
    /// the entry and the alert's number in it.
    alert_heads: Vec<AlertHead>,
    fired: Vec<TimerEntry>,
    /// Scratch: due timers sorted for firing (see `advance_lane`).
    ready: Vec<TimerEntry>,
    /// The last event's allocation, reused for the next event when nothing kept it.
    spare: Option<Arc<Event>>,
    /// The fields some rule's `distinct` closure counts: held whole ([`cap_held_texts`]).
    distinct_keys: Vec<FieldKey>,
    /// `push_batch`'s look-ahead window.
    ahead: Vec<Event>,
    /// `push_batch`: the group slots the look-ahead window will touch.
    touch: Vec<(u32, u32)>,
    /// `push_batch`: the window's candidates (as `Filter::candidates_hinted` gives them), one
    /// run per event ending at `ahead_ends[i]`, so each event probes the index once.
    ahead_cands: Vec<(u32, u32)>,
    ahead_ends: Vec<usize>,
    /// The run of `ahead_cands` the next evaluation uses instead of probing the index.
    ahead_pos: Option<(usize, usize)>,
    /// Families of rule states (see [`family`]); per state, its family and position in it.
    families: Vec<Family>,
    family_of: Vec<Option<(u32, u32)>>,
    /// Whether an event's groups are read ahead ([`Engine::touch_groups`]); off only in the
    /// test that shows it changes nothing.
    read_ahead: bool,
    /// Per predicate: its consumers whose states are not direct (reached through hits), in
    /// `consumers` order. A direct state (processing time, one group field mapping, no
    /// captures) is compact ([`compact`]): delivered straight from the predicates it reads,
    /// with no [`Hit`] ([`Engine::deliver_compact`], its consumers in `compact.uses`).
    via_hits: Vec<Vec<Consumer>>,
    /// Per direct state, the (predicate, definition) pairs it is read through, so its
    /// delivery carries every definition the event holds.
    direct_feeds: Vec<Feeds>,
    /// Per predicate, the stamp of the last event that satisfied it (see `hit_of`), for
    /// `direct_feeds`.
    pred_seen: Vec<u64>,
    /// The predicates the event being pushed satisfied that feed direct states, with their
    /// index hints.
    direct_preds: Vec<(u32, u32)>,
    /// Per predicate: whether it is plain, answered wholly by the index and feeding only
    /// direct states, so a candidate goes straight to `direct_preds` (see [`plain_preds`]).
    plain: Vec<bool>,
    /// The event's distinct group keys, numbered in order of appearance (the key numbers
    /// [`Family`] records remember).
    ev_keys: Vec<GroupKey>,
    /// The compact states' groups (see [`compact`]): outside a restore or a reload, a
    /// compact state holds none in its own slots.
    compact: Compact,
}

/// How many events [`Engine::push_batch`] reads ahead: their index entries and group slots
/// are loaded before the first of them is processed, so the cache misses of many events
/// overlap instead of being paid one after another.
const LOOKAHEAD: usize = 16;

/// What a timer entry still means when it comes due or moves down the wheel.
enum Refile {
    /// Its group may have something due at its deadline: it takes the firing path.
    Due,
    /// Its group's deadline moved past it (a heartbeat arrived): the entry for the new
    /// deadline (already recorded as the group's armed deadline; the caller files it).
    Moved(TimerEntry),
    /// Its group no longer wants it (freed, or re-armed with another entry).
    Stale,
}

/// Whether timer entry `e`'s group may have moved its deadline later without filing an entry:
/// an absence's, or a one-step plan's in processing time (`seq(a, absent(b) for D)`'s wait
/// that a `b` ended, `or`'s forgetting that its events put off), whose groups hold no partial
/// match (see [`refile`]). Any other entry is due at its deadline unless stale, which the
/// firing path tells as well, so it needs no look at its group before. (Not an event-time
/// one-step plan's: moved to its forgetting, its entry would put off the sweeps that bring
/// its lane's time on, which the lane's stats and its expired partial matches read.)
#[inline]
fn may_move(rts: &[RuleRt], e: &TimerEntry) -> bool {
    rts.get(e.rule as usize).is_some_and(|rt| {
        (rt.facts.single && rt.lane == 0) || matches!(*rt.facts.plan, Plan::Absence { .. })
    })
}

/// Sorts a timer entry of `rts` at `now`. A group whose deadline moved later than `now` and
/// whose timer would find nothing to do now ([`Group::timer_idle`]) is re-armed at its next
/// wake without the firing path (the lazy re-arm: events never cancel timers; firing it
/// would find nothing due and arm exactly that).
fn refile(
    rts: &mut [RuleRt],
    compact: &mut Compact,
    outage_until: Timestamp,
    now: Timestamp,
    e: &TimerEntry,
) -> Refile {
    if compact.holds(e.rule as usize) {
        // A compact group's entry, sorted as its slot's would be.
        let Some((_, cell)) = compact.entry_cell(e.rule as usize, e.slot, e.generation) else {
            return Refile::Stale;
        };
        if cell.armed != e.deadline {
            return if cell.parked == e.deadline {
                Refile::Due
            } else {
                Refile::Stale
            };
        }
        if !cell.group.timer_idle() {
            return Refile::Due;
        }
        let Some(rt) = rts.get(e.rule as usize) else {
            return Refile::Stale;
        };
        return match cell.group.next_wake(&rt.ctx(outage_until)) {
            Some(wake) if wake > now => {
                // Armed as the firing path arms it: a parked entry not later is taken back.
                cell.armed = Timestamp::MAX;
                if cell.arm(Some(wake), now) {
                    Refile::Moved(TimerEntry {
                        deadline: cell.armed,
                        ..*e
                    })
                } else {
                    Refile::Stale
                }
            }
            _ => Refile::Due,
        };
    }
    let Some(rt) = rts.get_mut(e.rule as usize) else {
        return Refile::Stale;
    };
    let r = rt.with_group(e.slot, outage_until, |ctx, s, c, _| {
        if s.group.generation != e.generation {
            return Refile::Stale;
        }
        if s.armed_at != e.deadline {
            // A parked entry stays in the wheel; due, it is dropped where timers fire.
            return if c.as_ref().is_some_and(|c| c.parked == e.deadline) {
                Refile::Due
            } else {
                Refile::Stale
            };
        }
        if !s.group.timer_idle() {
            return Refile::Due;
        }
        match s.group.next_wake(ctx) {
            Some(wake) if wake > now => {
                // Armed as the firing path arms it: a parked entry not later is taken back.
                s.armed_at = Timestamp::MAX;
                match arm_slot(ctx, s, c, now, e.rule as usize, e.slot, false) {
                    Some(n) => Refile::Moved(n),
                    None => Refile::Stale,
                }
            }
            _ => Refile::Due,
        }
    });
    r.unwrap_or(Refile::Stale)
}

/// Cuts each text of `e` longer than an alert shows ([`crate::alert::MAX_ALERT_TEXT`]) as an
/// alert cuts it, but those of the fields in `keep` (a `distinct` closure's, whose whole value
/// tells values apart). Partial matches, waits and episodes hold their events for the alerts
/// they make (which show no more than that) and for `{field}` in messages (cut to the same
/// length, and from the start: the same text), so they show the same; what a sender's 64 KiB
/// messages cost held in every group of every rule is 2 KiB each.
fn cap_held_texts(e: &mut Event, keep: &[FieldKey]) {
    for (k, v) in &mut e.fields {
        if held_cut_off(v)
            && !keep.contains(k)
            && let Value::Str(s) = v
        {
            *v = Value::str(&crate::alert::capped(s));
        }
    }
}

/// Whether `v` is a text longer than an alert shows, which groups hold cut
/// ([`cap_held_texts`]). (A long text is on the heap: the inline ones, most, are passed over
/// at once.)
#[inline]
fn held_cut_off(v: &Value) -> bool {
    matches!(v, Value::Str(s) if s.is_heap_allocated() && s.len() > crate::alert::MAX_ALERT_TEXT)
}

/// Whether a compact delivery through `u` for the event stamped `stamp` may not be the only
/// one to its state (only then is the state marked delivered to, and looked for marked), and
/// its mask: every definition of the state the event holds.
#[inline(always)]
fn reach(u: &compact::Use, stamp: u64, pred_seen: &[u64], direct_feeds: &[Feeds]) -> (bool, EvSet) {
    let seen = |&(p, bit): &(u32, EvSet)| {
        if pred_seen[p as usize] == stamp {
            bit
        } else {
            0
        }
    };
    // (A state read through this use only has `other` past every slot: no load.)
    if pred_seen.get(u.other as usize) != Some(&stamp) {
        return (false, u.mask);
    }
    if u.other_mask != 0 {
        return (true, u.mask | u.other_mask);
    }
    let mask = match &direct_feeds[u.state as usize] {
        Feeds::One => 1u64 << u.def,
        Feeds::Two([a, b]) => seen(a) | seen(b),
        Feeds::Many(f) => f.iter().map(seen).fold(0, |m, b| m | b),
    };
    (true, mask)
}

/// Feeds state `rule`'s compact group one event (the NFA's transition) and arms its timer as
/// its slot's would be (at `lane_now`); returns the entry to file, if one is needed.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn feed(
    facts: &RuleFacts,
    outage_until: Timestamp,
    key: &GroupKey,
    cell: &mut compact::Cell,
    t: Timestamp,
    mask: EvSet,
    ev: &Arc<Event>,
    seq: u64,
    rule: u32,
    lane_now: Timestamp,
    counters: &mut RuleCounters,
    out: &mut Vec<Alert>,
) -> Option<TimerEntry> {
    let g = &mut cell.group;
    // (A context for each way: only the general transition's is put in memory for its call,
    // the lean one's stays in registers, a few stores less per delivery.)
    let lean = RuleCtx {
        facts,
        outage_until,
    };
    if let Some(wake) = g.on_fresh(&lean, t, mask, ev, seq, counters) {
        return arm_cell(cell, rule, wake, lane_now);
    }
    let ctx = RuleCtx {
        facts,
        outage_until,
    };
    let calm = g.on_event(&ctx, key, t, mask, ev, seq, counters, out);
    let wake = if calm {
        g.forget_wake(&ctx)
    } else {
        g.next_wake(&ctx)
    };
    arm_cell(cell, rule, wake, lane_now)
}

/// The uses of the next predicate an event satisfied (`next` its place among `preds`, moved
/// past it), for a compact delivery's loop; `None` after the last.
#[inline(always)]
fn next_uses<'a>(
    preds: &[(u32, u32)],
    uses_of: &'a [Vec<compact::Use>],
    next: &mut usize,
) -> Option<std::slice::Iter<'a, compact::Use>> {
    let &(ci, _) = preds.get(*next)?;
    *next += 1;
    Some(uses_of[ci as usize].iter())
}

/// Arms state `rule`'s compact group at `wake` (at the lane's time `lane_now`) as its slot
/// would be armed ([`compact::Cell::arm`]); returns the entry its slot would file, if any.
#[inline]
fn arm_cell(
    cell: &mut compact::Cell,
    rule: u32,
    wake: Option<Timestamp>,
    lane_now: Timestamp,
) -> Option<TimerEntry> {
    cell.arm(wake, lane_now).then_some(TimerEntry {
        deadline: cell.armed,
        rule,
        slot: cell.slot,
        generation: cell.group.generation,
    })
}

/// Approximate bytes of one entry of a map from group key to slot or record: the entry and
/// the table's control bytes and spare room (for `RuleStats::bytes`).
const KEY_MAP_ENTRY: usize = std::mem::size_of::<(GroupKey, u32)>() + 16;

/// The most groups a rule state makes room for before it sees them (see `Engine::new`).
const MAX_PRESIZED_GROUPS: usize = 65_536;

/// A due timer in firing order: deadline, rule, group key.
type DueTimer = (Timestamp, u32, Option<GroupKey>, TimerEntry);

/// Sorts hits by their order. Orders are unique (a definition gives one key): hundreds of
/// hits per event at thousands of rules made moving them in a sort itself dominate.
fn sort_hits(hits: &mut [Hit], perm: &mut Vec<(u64, u32)>) {
    let key = |h: &Hit| (u64::from(h.order.0) << 32) | u64::from(h.order.1);
    if hits.is_sorted_by_key(key) {
        return;
    }
    perm.clear();
    perm.extend(hits.iter().enumerate().map(|(i, h)| (key(h), i as u32)));
    permute_sorted(hits, perm);
}

/// Puts `items` in key order, stably: `keys` holds (key, index of the item), one per item;
/// the keys are sorted (the index makes them unique), then each item moves once.
fn permute_sorted<K: Ord, T>(items: &mut [T], keys: &mut [(K, u32)]) {
    // The keys are unique, so any sort gives this order; the stable one merges the sorted
    // runs they mostly come in (each shared state's alerts are in rule order) in linear time.
    keys.sort();
    // Position j takes the item at keys[j].1: follow each cycle once, swapping.
    const DONE: u32 = u32::MAX;
    for i in 0..keys.len() {
        if keys[i].1 == DONE {
            continue;
        }
        let mut j = i;
        loop {
            let k = keys[j].1 as usize;
            keys[j].1 = DONE;
            if k == i {
                break;
            }
            items.swap(j, k);
            j = k;
        }
    }
}

/// How many slots a full `max_groups` looks at for an idle group to let go, per refused key.
const IDLE_SCAN: usize = 64;

/// The most groups of `rule` this engine keeps: its `max_groups` (or the engine's default),
/// split across the engines of a partition when groups are spread over them by key (the
/// first `max % count` engines one more), so that all of them together keep at most
/// `max_groups` groups of the rule (or one per engine, when `max_groups` is smaller than
/// their number). A rule without `group_by` has its one group on one engine.
fn shard_budget(rule: &Rule, cfg: &EngineConfig) -> u64 {
    let max = rule.max_groups.unwrap_or(cfg.max_groups);
    match cfg.partition {
        Some(p) if p.count > 1 && !rule.group_by.is_empty() => {
            let count = u64::from(p.count);
            // At least one: a shard with none would refuse every group it owns, silently.
            (max / count + u64::from(u64::from(p.index) < max % count)).max(1)
        }
        _ => max,
    }
}

/// The timer entry a group needs after a transition, if its next wake is earlier than the
/// entry already armed: none when the parked entry is not later than the wake (it fires
/// early, finds nothing due and arms again: cheaper than a wheel entry left behind), else a
/// new entry, and the entry it supersedes is parked. `calm`: the transition left the group
/// nothing of its own to wake for (what [`Group::on_event`] says), so its wake is its
/// forgetting, known without [`Group::next_wake`].
fn arm_slot(
    ctx: &RuleCtx<'_>,
    s: &mut Slot,
    c: &mut Option<Cold>,
    lane_now: Timestamp,
    ri: usize,
    slot: u32,
    calm: bool,
) -> Option<TimerEntry> {
    let wake = if calm {
        debug_assert_eq!(
            s.group.next_wake(ctx),
            s.group.forget_wake(ctx),
            "a calm group with a wake of its own"
        );
        s.group.forget_wake(ctx)
    } else {
        s.group.next_wake(ctx)
    }?;
    if wake >= s.armed_at {
        return None;
    }
    if let Some(c) = c.as_mut() {
        // Entries after the lane's time have not been fired (or dropped) yet.
        if c.parked != Timestamp::MAX && c.parked > lane_now && c.parked <= wake {
            s.armed_at = c.parked;
            c.parked = Timestamp::MAX;
            return None;
        }
        if s.armed_at != Timestamp::MAX {
            // Keep the later one: an unparked entry lives only until its deadline.
            c.parked = if c.parked == Timestamp::MAX {
                s.armed_at
            } else {
                c.parked.max(s.armed_at)
            };
        }
    }
    s.armed_at = wake;
    Some(TimerEntry {
        deadline: wake,
        rule: ri as u32,
        slot,
        generation: s.group.generation,
    })
}

/// Per predicate, whether a candidate for it needs nothing but to be passed on to the direct
/// states it feeds: the index answers it wholly (no residual to evaluate, no captures) and it
/// has no consumer reached through hits.
fn plain_preds(filter: &Filter, via_hits: &[Vec<Consumer>], compact: &Compact) -> Vec<bool> {
    (0..filter.preds.len())
        .map(|p| {
            filter.exact(p as u32)
                && via_hits.get(p).is_none_or(|v| v.is_empty())
                && compact.uses.get(p).is_some_and(|u| !u.is_empty())
        })
        .collect()
}

/// State `rule`'s group in `slot`, if the slot is occupied.
/// The group key definition `def` reads from `ev` (with the captures its condition made), if
/// the event has every field it names.
fn group_key(def: &EventDef, ev: &Event, caps: &Captures) -> Option<GroupKey> {
    if let [f] = def.group_fields.as_slice() {
        key_value(ev, caps, f).map(GroupKey::one)
    } else {
        def.group_fields
            .iter()
            .map(|f| key_value(ev, caps, f))
            .collect::<Option<Vec<Value>>>()
            .map(GroupKey::from_vec)
    }
}

/// The canonical conditions of a rule's definitions in `used`, sorted and without repeats:
/// the events that make an event-time rule's watermark.
/// The canonical conditions of a rule's used definitions (sorted, each once), and beside each
/// the fields its definitions read the group key from (sorted, each list once): an event is
/// one of the rule's sources when a definition matches it and it holds those fields, so two
/// rules with the same of both see the same events move their watermark.
fn lane_sources(rule: &Rule, used: plan::EvSet) -> (Vec<String>, Vec<Vec<String>>) {
    let mut pairs: Vec<(String, String)> = rule
        .events
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < 64 && used & (1u64 << i) != 0)
        .map(|(_, d)| {
            let fields: Vec<_> = d.group_fields.iter().map(GroupField::name).collect();
            (d.cond.canonical(), fields.join(","))
        })
        .collect();
    pairs.sort();
    pairs.dedup();
    let mut sources: Vec<String> = Vec::new();
    let mut keys: Vec<Vec<String>> = Vec::new();
    for (cond, fields) in pairs {
        if sources.last() != Some(&cond) {
            sources.push(cond);
            keys.push(Vec::new());
        }
        if let Some(k) = keys.last_mut() {
            k.push(fields);
        }
    }
    (sources, keys)
}

fn slot_at(rts: &[RuleRt], rule: u32, slot: u32) -> Option<&Slot> {
    rts.get(rule as usize)?.slots.get(slot as usize)?.as_ref()
}

/// The key of state `rule`'s group in `slot`, if the slot is occupied.
fn key_at(rts: &[RuleRt], rule: u32, slot: u32) -> Option<&GroupKey> {
    rts.get(rule as usize)?
        .cold
        .get(slot as usize)?
        .as_ref()
        .map(|c| &c.key)
}

/// The group key a timer entry names, if its slot (or compact record) is still occupied.
fn group_key_of<'a>(
    rts: &'a [RuleRt],
    compact: &'a Compact,
    e: &TimerEntry,
) -> Option<&'a GroupKey> {
    if compact.holds(e.rule as usize) {
        return compact.entry_key(e.rule as usize, e.slot);
    }
    key_at(rts, e.rule, e.slot)
}

/// Firing order of due timers: the order of their [`DueTimer`] tuples, without cloning keys.
fn timer_order(
    rts: &[RuleRt],
    compact: &Compact,
    a: &TimerEntry,
    b: &TimerEntry,
) -> std::cmp::Ordering {
    (a.deadline, a.rule)
        .cmp(&(b.deadline, b.rule))
        .then_with(|| group_key_of(rts, compact, a).cmp(&group_key_of(rts, compact, b)))
        .then_with(|| a.cmp(b))
}

/// One (state, definition) a predicate feeds.
#[derive(Clone, Copy)]
struct Consumer {
    state: u32,
    def: u32,
    /// The first rule of the state with this definition (for ordering).
    rule: u32,
    /// The number of the definition's group field mapping (equal numbers, same fields).
    mapping: u32,
}

/// One match of an event for one rule state and group.
struct Hit {
    /// Index of the rule state (not of the rule: rules may share a state).
    rule: u32,
    /// The first (rule, definition) that produced it: the delivery order.
    order: (u32, u32),
    /// The predicate's index entry and the group slot hint it holds, when it can hold one.
    hint: Option<(u32, u32)>,
    key: GroupKey,
    /// The key's number among the event's distinct keys (equal numbers, equal keys).
    kid: u32,
    mask: EvSet,
    /// The event enriched with its predicate's captures; `None`: the event itself (no
    /// reference count touched per hit).
    ev: Option<Arc<Event>>,
    /// The (rule, definition) whose captures `ev` holds.
    ev_order: (u32, u32),
    /// The group as [`Engine::touch_groups`] found it before the event's deliveries, checked
    /// again when delivered.
    found: Option<Found>,
}

/// The (predicate, definition bit) pairs a direct state is read through: one (the
/// consumer's own), two (the common case, `seq(a, b)`, held inline), or more.
enum Feeds {
    One,
    Two([(u32, EvSet); 2]),
    Many(Box<[(u32, EvSet)]>),
}

/// An entry's next alert in [`Engine::expand_alerts`]'s merge: its (time, rank), the entry,
/// and the alert's number in it; smallest on top.
type AlertHead = Reverse<((Timestamp, u32), u32, u32)>;

/// What [`Engine::touch_groups`] found for a hit.
#[derive(Clone, Copy, Debug)]
enum Found {
    /// Its family's record for the key: the delivery reads the member's slot from it, as
    /// from a record it looked up itself ([`Engine::family_slot`]).
    Family { rec: u32 },
    /// The group, in its state's own map, with the slot's generation then.
    Own { slot: u32, generation: u32 },
}

impl Hit {
    /// The event this hit delivers, given the event pushed.
    fn event<'a>(&'a self, pushed: &'a Arc<Event>) -> &'a Arc<Event> {
        self.ev.as_ref().unwrap_or(pushed)
    }
}

impl Engine {
    /// Builds an engine for a rule set. Monitoring begins at the first event or advance.
    pub fn new(rules: &RuleSet, cfg: EngineConfig) -> Result<Engine, EngineError> {
        Engine::with_cohorts(rules, cfg, &|_| Lineage::default())
    }

    /// [`Engine::new`] with each rule's [`Lineage`] (a restore's): rules share a state when
    /// they have the same meaning and the same lineage, so that rules that ran apart before a
    /// restore or a reload go on apart, as they would unshared.
    fn with_cohorts(
        rules: &RuleSet,
        cfg: EngineConfig,
        lineage_of: &dyn Fn(&Rule) -> Lineage,
    ) -> Result<Engine, EngineError> {
        let mut lanes: Vec<Lane> = vec![Lane::new(TimeMode::Processing, Duration::ZERO)];
        let mut rts: Vec<RuleRt> = Vec::with_capacity(rules.rules.len());
        let mut rt_of = Vec::with_capacity(rules.rules.len());
        let mut by_meaning: HashMap<(String, Lineage), usize> = HashMap::new();
        // Each state's members, gathered before they are frozen into the state.
        let mut members: Vec<Vec<Member>> = Vec::with_capacity(rules.rules.len());
        for (rank, rule) in rules.rules.iter().enumerate() {
            let rank = rank as u32;
            let canonical = rule.canonical();
            let lineage = lineage_of(rule);
            let cohort = lineage.cohort;
            if cfg.share
                && let Some(&shared) = by_meaning.get(&(canonical.clone(), lineage))
            {
                // The same meaning under another name (SO at the root): one state, one more
                // alert per change.
                // (The same meaning: the same plan, so the same kind of alerts.)
                let episodic = members[shared].first().is_some_and(|m| m.episodic);
                members[shared].push(Member::new(rule.clone(), rank, episodic));
                rt_of.push(shared as u32);
                continue;
            }
            by_meaning.insert((canonical.clone(), lineage), rts.len());
            rt_of.push(rts.len() as u32);
            let plan = plan::plan(rule)?;
            // (Shared engine only, as direct deliveries: the unshared one stays the reference
            // the property tests and the fuzz target compare against.)
            let simple =
                cfg.share && plan.simple() && rule.within.is_some_and(|w| w.min == Duration::ZERO);
            let single =
                cfg.share && plan.single() && rule.within.is_none_or(|w| w.min == Duration::ZERO);
            let slides = plan.slides();
            let plain_first = match &plan {
                Plan::Linear { alts } => alts
                    .iter()
                    .all(|a| a.steps.first().is_none_or(|s| s.repeat.is_none())),
                Plan::Absence { .. } => true,
            };
            // (Shared engine only, as `simple`.)
            let lean = if cfg.share {
                state::Lean::of(
                    &plan,
                    simple,
                    single,
                    slides,
                    rule.within.map(|w| w.max),
                    &rule.trigger,
                )
            } else {
                state::Lean::Off
            };
            let used = plan.used();
            let opens = plan.opens();
            let lane = match rule.time {
                TimeMode::Processing => 0,
                // A rule's watermark is made of its own sources' events: it shares a lane
                // only with rules of the same delay over the same conditions.
                TimeMode::Event => {
                    let (sources, keys) = lane_sources(rule, used);
                    match lanes.iter().position(|l| {
                        l.mode == TimeMode::Event
                            && l.delay == rule.max_delay
                            && l.sources == sources
                            && l.keys == keys
                    }) {
                        Some(i) => i,
                        None => {
                            let mut lane = Lane::new(TimeMode::Event, rule.max_delay);
                            lane.sources = sources;
                            lane.keys = keys;
                            lanes.push(lane);
                            lanes.len() - 1
                        }
                    }
                }
            };
            members.push(vec![Member::new(rule.clone(), rank, plan.alerts_resolve())]);
            rts.push(RuleRt {
                canonical,
                facts: RuleFacts {
                    rule: rule.clone(),
                    members: Arc::from(Vec::new()),
                    plan: Arc::new(plan),
                    monitor_start: Timestamp::MIN,
                    max_partial: rule
                        .max_partial_matches
                        .unwrap_or(cfg.max_partial_matches)
                        .max(1) as usize,
                    within: rule.within,
                    forget_after: rule.forget_after,
                    simple,
                    single,
                    slides,
                    plain_first,
                    counts: false,
                    lean,
                },
                lane,
                groups: HashMap::new(),
                slots: Vec::new(),
                cold: Vec::new(),
                free: Vec::new(),
                counters: RuleCounters::default(),
                max_groups: shard_budget(rule, &cfg),
                used,
                opens,
                cohort,
                idle_scan: 0,
            });
        }
        // A closure counting for `{count}` keeps more events (see `RuleFacts::counts`), which
        // moves the start of some matches, and so their ids: decided per meaning over the
        // whole rule set, so that shared and unshared engines keep the same partial matches.
        let counting: std::collections::HashSet<&str> = (rts.iter().zip(&members))
            .filter(|(_, m)| m.iter().any(|m| m.rule.shows_count()))
            .map(|(rt, _)| rt.canonical.as_str())
            .collect();
        let counts: Vec<bool> = rts
            .iter()
            .map(|rt| counting.contains(rt.canonical.as_str()))
            .collect();
        for ((rt, m), c) in rts.iter_mut().zip(members).zip(counts) {
            rt.facts.counts = c;
            rt.facts.members = m.into();
        }
        let filter = Filter::new(rules, cfg.share);
        // Group field mappings, numbered: consumers with the same number read their group
        // key from the same fields.
        let mut mappings: HashMap<&[GroupField], u32> = HashMap::new();
        let consumers: Vec<Vec<Consumer>> = filter
            .preds
            .iter()
            .map(|p| {
                let mut v: Vec<Consumer> = Vec::new();
                for &(rule, def) in &p.consumers {
                    let rt = rt_of[rule as usize];
                    let used = rts[rt as usize].used & (1u64 << def) != 0;
                    if used && !v.iter().any(|c| c.state == rt && c.def == def) {
                        let fields = &rules.rules[rule as usize].events[def as usize].group_fields;
                        let n = mappings.len() as u32;
                        let mapping = *mappings.entry(fields.as_slice()).or_insert(n);
                        v.push(Consumer {
                            state: rt,
                            def,
                            rule,
                            mapping,
                        });
                    }
                }
                v
            })
            .collect();
        let hintable = filter
            .preds
            .iter()
            .zip(&consumers)
            .map(|(p, cs): (&filter::Pred, &Vec<Consumer>)| {
                let f = p.key_field?;
                let [c] = cs.as_slice() else {
                    return None;
                };
                let fields = &rules.rules[c.rule as usize].events[c.def as usize].group_fields;
                matches!(fields.as_slice(), [g] if g.net.is_none() && g.key == FieldKey::Known(f))
                    .then_some(f)
            })
            .collect();
        // Room for the groups up front when a rule's definitions pin its one group field to
        // listed values (`host in [...]`), or it expects groups: no rehash while the first
        // round creates them. Capped, so a long list costs at most a few megabytes.
        let mut bound: Vec<Option<usize>> = rts
            .iter()
            .map(|rt| (rt.facts.rule.group_by.len() == 1).then_some(rt.facts.rule.expect.len()))
            .collect();
        let mut fed = vec![0u64; rts.len()];
        // The event nodes feeding each state (predicate, group field mapping), for families.
        let mut node_feeds: Vec<Vec<(u32, &[GroupField])>> = vec![Vec::new(); rts.len()];
        for (pi, (p, cs)) in filter.preds.iter().zip(&consumers).enumerate() {
            for &Consumer {
                state: rt,
                def,
                rule,
                ..
            } in cs
            {
                let fields = &rules.rules[rule as usize].events[def as usize].group_fields;
                let pinned = p.key_field.is_some_and(|f| {
                    matches!(fields.as_slice(), [g] if g.net.is_none() && g.key == FieldKey::Known(f))
                });
                let b = &mut bound[rt as usize];
                *b = match (*b, pinned) {
                    (Some(n), true) => Some(n + p.key_values),
                    _ => None,
                };
                fed[rt as usize] |= 1u64 << def;
                node_feeds[rt as usize].push((pi as u32, fields.as_slice()));
            }
        }
        for ((rt, b), fed) in rts.iter_mut().zip(bound).zip(fed) {
            // Every definition the plan uses must be pinned (and fed by some predicate).
            if let Some(n) = b
                && fed & rt.used == rt.used
            {
                rt.groups.reserve(n.min(MAX_PRESIZED_GROUPS));
                rt.slots.reserve(n.min(MAX_PRESIZED_GROUPS));
                rt.cold.reserve(n.min(MAX_PRESIZED_GROUPS));
            }
        }
        let hit_of = vec![(0, 0); rts.len()];
        // Direct states (shared engine only: the unshared one stays the reference the
        // property tests compare against): processing time, every definition read through
        // one group field mapping and capturing nothing, so an event has one key for the
        // state and carries no fields of its own to it.
        let mut direct = vec![cfg.share; rts.len()];
        let mut mapping_of: Vec<Option<u32>> = vec![None; rts.len()];
        for cs in &consumers {
            for c in cs {
                let r = c.state as usize;
                let captures = rules.rules[c.rule as usize].events[c.def as usize]
                    .cond
                    .captures_any();
                let one_mapping = *mapping_of[r].get_or_insert(c.mapping) == c.mapping;
                if captures || !one_mapping || rts[r].lane != 0 {
                    direct[r] = false;
                }
            }
        }
        // (Direct consumers here for a moment: `compact.uses` below.)
        let (via_direct, via_hits): (Vec<Vec<Consumer>>, Vec<Vec<Consumer>>) = consumers
            .iter()
            .map(|cs| cs.iter().partition(|c| direct[c.state as usize]))
            .unzip();
        let mut feeds: Vec<Vec<(u32, EvSet)>> = vec![Vec::new(); rts.len()];
        for (ci, cs) in via_direct.iter().enumerate() {
            for c in cs {
                feeds[c.state as usize].push((ci as u32, 1u64 << c.def));
            }
        }
        // Direct states are compact (see [`compact`]), in scopes of the states reading their
        // key through one mapping (in state order).
        let mut compact = Compact {
            of: vec![None; rts.len()],
            ..Compact::default()
        };
        let mut scope_of_mapping: HashMap<u32, u32> = HashMap::new();
        for ri in 0..rts.len() {
            let Some(mapping) = mapping_of[ri].filter(|_| direct[ri]) else {
                continue;
            };
            let s = match scope_of_mapping.get(&mapping) {
                Some(&s) if compact.scopes[s as usize].members.len() < compact::MAX_MEMBERS => s,
                _ => {
                    compact.scopes.push(compact::Scope::default());
                    let s = (compact.scopes.len() - 1) as u32;
                    scope_of_mapping.insert(mapping, s);
                    s
                }
            };
            let scope = &mut compact.scopes[s as usize];
            compact.of[ri] = Some((s, scope.members.len() as u32));
            // (Its groups are cells in records: no room made in its slots.)
            let rt = &mut rts[ri];
            rt.groups = HashMap::new();
            rt.slots = Vec::new();
            rt.cold = Vec::new();
            scope.members.push(ri as u32);
            scope.counts.push(0);
            scope.slots.push(compact::Slots::default());
        }
        compact.uses = (via_direct.iter().enumerate())
            .map(|(ci, cs)| {
                cs.iter()
                    .filter_map(|c| {
                        let (scope, pos) = compact.of[c.state as usize]?;
                        // (`other` past every slot of `pred_seen`: none, then the slot
                        // stamped for every event, past the predicates'.)
                        let (never, always) = (u32::MAX, via_direct.len() as u32);
                        let (mut mask, mut other, mut other_mask) = (0, never, 0);
                        let mut own = 0;
                        for &(p, bit) in &feeds[c.state as usize] {
                            if p == ci as u32 {
                                mask |= bit;
                                own += 1;
                            } else if other == never || other == p {
                                other = p;
                                other_mask |= bit;
                            } else {
                                other = always;
                            }
                        }
                        if own > 1 || other == always {
                            (other, other_mask) = (always, 0);
                        }
                        Some(compact::Use {
                            state: c.state,
                            def: c.def,
                            rule: c.rule,
                            scope,
                            pos,
                            other,
                            mask,
                            other_mask,
                        })
                    })
                    .collect()
            })
            .collect();
        // Families (the graph's virtual nodes at run time): states fed by the same event
        // node (predicate and group field mapping) in the same scope (group_by, lane).
        let mut family_of = vec![None; rts.len()];
        let mut families = Vec::new();
        if cfg.share {
            let scope: Vec<Option<(&[String], usize)>> = rts
                .iter()
                .map(|rt| Some((rt.facts.rule.group_by.as_slice(), rt.lane)))
                .collect();
            for members in family::partition(&node_feeds, &scope) {
                for (pos, &m) in members.iter().enumerate() {
                    // A compact member's groups are in its scope's records, which serve
                    // every state reading the same fields (its family's members among
                    // them): it reads no family record.
                    if compact.of[m as usize].is_none() {
                        family_of[m as usize] = Some((families.len() as u32, pos as u32));
                    }
                }
                families.push(Family::new(members));
            }
        }
        let direct_feeds = feeds
            .into_iter()
            .map(|f| match f.as_slice() {
                [a, b] => Feeds::Two([*a, *b]),
                [_, _, ..] => Feeds::Many(f.into_boxed_slice()),
                _ => Feeds::One,
            })
            .collect();
        // (And one slot more, see `compact::Use::other`.)
        let pred_seen = vec![0; via_direct.len() + 1];
        let mut distinct_keys: Vec<FieldKey> = Vec::new();
        for rt in &rts {
            if let Plan::Linear { alts } = &*rt.facts.plan {
                let steps = alts.iter().flat_map(|a| &a.steps);
                for k in steps.filter_map(|s| s.repeat.as_ref()?.distinct.as_ref()) {
                    if !distinct_keys.contains(k) {
                        distinct_keys.push(k.clone());
                    }
                }
            }
        }
        let plain = plain_preds(&filter, &via_hits, &compact);
        Ok(Engine {
            plain,
            via_hits,
            direct_feeds,
            pred_seen,
            direct_preds: Vec::new(),
            ev_keys: Vec::new(),
            compact,
            families,
            family_of,
            read_ahead: true,
            filter,
            hintable,
            consumers,
            rt_of,
            ruleset: rules.clone(),
            rts,
            lanes,
            clock: None,
            next_seq: 0,
            idle_freed: 0,
            outage_until: Timestamp::MIN,
            first_stamp: None,
            outage_pending: false,
            min_event_any: None,
            max_event_any: None,
            sweep_at: Timestamp::MIN,
            counters: EngineCounters::default(),
            cands: Vec::new(),
            hits: Vec::new(),
            lane_hit: Vec::new(),

            hit_of,
            hit_perm: Vec::new(),
            hit_stamp: 0,
            alert_keys: Vec::new(),
            alert_scratch: Vec::new(),
            alert_heads: Vec::new(),
            fired: Vec::new(),
            ready: Vec::new(),
            spare: None,
            distinct_keys,
            ahead: Vec::with_capacity(LOOKAHEAD),
            touch: Vec::new(),
            ahead_cands: Vec::new(),
            ahead_ends: Vec::new(),
            ahead_pos: None,
            cfg,
        })
    }

    /// The arrival clock (`None` before the first event or advance).
    pub fn clock(&self) -> Option<Timestamp> {
        self.clock
    }

    /// Engine-wide counters.
    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    /// The rule set the engine runs.
    pub fn rules(&self) -> &RuleSet {
        &self.ruleset
    }

    /// The families of rule states that share group records (see [`family`]), each as the
    /// names of the rules it serves, in rule order (for `cepheus rules graph`).
    pub fn families(&self) -> Vec<Vec<&str>> {
        self.families
            .iter()
            .map(|f| {
                f.members
                    .iter()
                    .flat_map(|&m| {
                        self.rts[m as usize]
                            .facts
                            .members
                            .iter()
                            .map(|r| r.rule.name.as_str())
                    })
                    .collect()
            })
            .collect()
    }

    /// Each rule state's counters with its budgets, without reading any group (cheap enough for
    /// every tick): what a running agent watches to say when a rule refuses groups, drops
    /// partial matches or sees late events.
    pub fn budget_counters(&self) -> impl Iterator<Item = BudgetView<'_>> {
        self.rts.iter().map(|rt| BudgetView {
            rules: rt
                .facts
                .members
                .iter()
                .map(|m| m.rule.name.as_str())
                .collect(),
            max_groups: rt.facts.rule.max_groups.unwrap_or(self.cfg.max_groups),
            max_partial_matches: rt.facts.max_partial as u64,
            counters: &rt.counters,
        })
    }

    /// Groups held, over all rule states (a group rules share counts once).
    pub fn groups(&self) -> usize {
        self.rts.iter().map(|rt| rt.groups.len()).sum::<usize>() + self.compact.total() as usize
    }

    /// Lets go of the partial matches past their window in every group, with the events only
    /// they held: what each group's next transition would drop first (see
    /// [`state::LAZY_EXPIRY_ITEMS`]). Changes no alert; a caller does it before saving the
    /// state and now and then, so that a flood of large events that stopped is not kept (and
    /// saved) until each group's next event or `forget_after`. Returns whether it dropped any.
    pub fn drop_expired(&mut self) -> bool {
        // Each lane's released time, not its watermark: an event-time lane not swept lately
        // may still hold events below the watermark, to be delivered (a review's case).
        let Engine {
            rts,
            compact,
            lanes,
            outage_until,
            ..
        } = self;
        let mut dropped = false;
        for rt in rts.iter_mut() {
            let now = lanes[rt.lane].now;
            let split = rt.split(*outage_until);
            for s in split.slots.iter_mut().flatten() {
                dropped |= s.group.drop_expired(&split.ctx, now);
            }
        }
        for (ri, g) in compact.groups_mut() {
            if let Some(rt) = rts.get(ri) {
                dropped |= g.drop_expired(&rt.ctx(*outage_until), lanes[rt.lane].now);
            }
        }
        dropped
    }

    /// Per-rule counters and sizes.
    pub fn stats(&self) -> Vec<RuleStats> {
        let compact = self.compact.by_state(self.rts.len());
        self.ruleset
            .rules
            .iter()
            .zip(&self.rt_of)
            .map(|(rule, &ri)| {
                let rt = &self.rts[ri as usize];
                // A family's records, shared by its members, are counted in equal shares.
                let family = self.family_of[ri as usize].map_or(0, |(f, _)| {
                    let f = &self.families[f as usize];
                    f.bytes() / f.members.len().max(1) as u64
                });
                let mut partial = 0u64;
                let mut held = 0u64;
                let now = self.lanes[rt.lane].now;
                let ctx = rt.ctx(self.outage_until);
                let ri = ri as usize;
                for g in (rt.slots.iter().flatten().map(|s| &s.group))
                    .chain(compact[ri].iter().map(|&(_, g)| g))
                {
                    partial += g.partial_matches(&ctx, now) as u64;
                    held += g.held_bytes() as u64;
                }
                // The keys' own text (a value over the inline size is on the heap).
                let key_text: u64 = (rt.cold.iter().flatten().map(|c| &c.key))
                    .chain(compact[ri].iter().map(|&(k, _)| k))
                    .flat_map(|k| k.as_slice())
                    .map(|v| v.heap_bytes() as u64)
                    .sum();
                let key_values =
                    (std::mem::size_of::<Value>() * rt.facts.rule.group_by.len()) as u64;
                let per_group = (std::mem::size_of::<Option<Slot>>()
                    + std::mem::size_of::<Option<Cold>>()) as u64
                    + KEY_MAP_ENTRY as u64
                    + std::mem::size_of::<TimerEntry>() as u64
                    + key_values;
                // A compact state's groups are cells in its scope's records (and a number
                // each), the records shared by the scope's members in equal shares.
                let per_cell = (std::mem::size_of::<compact::Cell>()
                    + std::mem::size_of::<Option<u32>>()) as u64;
                let scope = self.compact.of[ri].map_or(0, |(s, _)| {
                    let s = &self.compact.scopes[s as usize];
                    s.bytes() / s.members.len().max(1) as u64
                });
                let cells = self.compact.count(ri);
                let groups = rt.groups.len() as u64 + cells;
                RuleStats {
                    rule: rule.name.clone(),
                    shared_with: rt
                        .facts
                        .members
                        .iter()
                        .filter(|m| m.rule.name != rule.name)
                        .map(|m| m.rule.name.clone())
                        .collect(),
                    groups,
                    partial_matches: partial,
                    bytes: rt.groups.len() as u64 * per_group
                        + cells * per_cell
                        + key_text
                        + held
                        + family
                        + scope,
                    counters: rt.counters.clone(),
                }
            })
            .collect()
    }

    /// Monitoring begins: processing-time rules at the arrival clock `at`, event-time rules at
    /// the first event's time `first`.
    fn begin(&mut self, at: Timestamp, first: Timestamp, defer_event_time: bool) {
        self.clock = Some(at);
        self.first_stamp = defer_event_time.then_some(first);
        for lane in &mut self.lanes {
            let t = match lane.mode {
                TimeMode::Processing => at,
                TimeMode::Event => first.sub(lane.delay),
            };
            lane.now = t;
            lane.wheel = Wheel::new(t);
            // The lane has watched since now: it is idle (its watermark follows the clock) only
            // once `max_delay` passes with nothing arriving, so the first events of a source
            // that lags by more than that are not late on arrival.
            if lane.mode == TimeMode::Event {
                lane.last_arrival = Some(at);
                lane.first_arrival = Some(at);
            }
        }
        for ri in 0..self.rts.len() {
            if self.rts[ri].monitor_start().is_none() {
                match self.rts[ri].facts.rule.time {
                    TimeMode::Processing => self.start_rule(ri, at),
                    TimeMode::Event if !defer_event_time => self.start_rule(ri, first),
                    TimeMode::Event => {}
                }
            }
        }
        for lane in &mut self.lanes[1..] {
            lane.started = !defer_event_time;
        }
        self.absorb();
    }

    /// Monitoring begins for a rule: its expected groups are armed. A rule without `group_by`
    /// is one group, known from the start: an absence-only rule's single group is expected,
    /// so it fires once its time has passed since monitoring began even if its event never
    /// came.
    fn start_rule(&mut self, ri: usize, at: Timestamp) {
        let start = at;
        self.rts[ri].facts.monitor_start = start;
        for key in self.expected_keys(ri) {
            if !self.owns(ri, &key) {
                continue;
            }
            let key = GroupKey::new(&key);
            if let Some(slot) = self.slot_for(ri, &key, true, start) {
                self.arm(ri, slot);
            }
        }
    }

    /// The groups state `ri` has from the start: its rule's `expect` list, or the one group of
    /// an absence rule without `group_by`.
    fn expected_keys(&self, ri: usize) -> Vec<Vec<Value>> {
        let rt = &self.rts[ri];
        if rt.facts.rule.group_by.is_empty()
            && matches!(*rt.facts.plan, Plan::Absence { .. })
            && rt.facts.rule.expect.is_empty()
        {
            return vec![Vec::new()];
        }
        rt.facts.rule.expect.clone()
    }

    /// Whether this engine owns `key` of rule state `ri` (always, without a partition).
    fn owns(&self, ri: usize, key: &[Value]) -> bool {
        self.cfg
            .partition
            .is_none_or(|p| self.rts[ri].owned_by(p, key))
    }

    /// The engines (of `count`) that own some group this event concerns, in ascending order:
    /// a router sends the event to each of them (the same evaluation as [`Engine::push`]).
    pub fn owners(&mut self, ev: &Arc<Event>, count: u32, out: &mut Vec<u32>) {
        let mut hits = std::mem::take(&mut self.hits);
        hits.clear();
        self.evaluate(ev, &mut hits);
        let start = out.len();
        for h in &hits {
            let rt = &self.rts[h.rule as usize];
            out.push(Partition::owner(
                &rt.facts.rule,
                &rt.canonical,
                &h.key,
                count,
            ));
        }
        // The compact states' keys, each state once (as `deliver_compact` reaches them).
        let stamp = self.hit_stamp;
        let no_caps = Captures::new();
        for &(ci, _) in &self.direct_preds {
            for c in &self.compact.uses[ci as usize] {
                let ri = c.state as usize;
                if self.hit_of[ri].0 == stamp {
                    continue;
                }
                let def = &self.ruleset.rules[c.rule as usize].events[c.def as usize];
                let rt = &self.rts[ri];
                let Some(key) = group_key(def, ev, &no_caps) else {
                    self.counters.keyless += rt.facts.members.len() as u64;
                    continue;
                };
                if !self.owns(ri, &key) {
                    continue;
                }
                self.hit_of[ri] = (stamp, 0);
                out.push(Partition::owner(&rt.facts.rule, &rt.canonical, &key, count));
            }
        }
        out[start..].sort_unstable();
        let mut seen = start;
        for i in start..out.len() {
            if i == start || out[i] != out[seen - 1] {
                out[seen] = out[i];
                seen += 1;
            }
        }
        out.truncate(seen);
        // Keep the scratch space, not the event: the caller may want it back unshared.
        hits.clear();
        self.hits = hits;
    }

    /// Finds or creates a group slot; `None` when the rule is at `max_groups`. With
    /// `expected`, the group found or made is watched from the start (never forgotten).
    fn slot_for(
        &mut self,
        ri: usize,
        key: &GroupKey,
        expected: bool,
        now: Timestamp,
    ) -> Option<u32> {
        // A full budget first lets go a group that holds nothing any more, if one is found
        // soon: a burst of forged keys would otherwise keep new ones out until `forget_after`.
        let full = {
            let rt = &self.rts[ri];
            !expected && rt.groups.len() as u64 >= rt.max_groups && !rt.groups.contains_key(key)
        };
        if full && let Some((slot, idle)) = self.idle_group(ri, now) {
            self.rts[ri].counters.forgotten += 1;
            self.idle_freed += 1;
            self.free_slot(ri, slot, &idle);
        }
        let rt = &mut self.rts[ri];
        let (lane, max_groups) = (rt.lane, rt.max_groups);
        let Split {
            ctx,
            groups,
            slots,
            cold,
            free,
            counters,
        } = rt.split(self.outage_until);
        let held = groups.len() as u64;
        // One hash per lookup, found or created (the key is cheap to clone: inline or shared).
        let vacant = match groups.entry(key.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let idx = *e.get();
                // A group an event made before monitoring began (an event-time lane delivers
                // what its watermark passed while it waits for its start) is, once its key is
                // watched from the start, watched all the same: never forgotten.
                if expected && let Some(Some(s)) = slots.get_mut(idx as usize) {
                    s.group.expected = true;
                }
                return Some(idx);
            }
            std::collections::hash_map::Entry::Vacant(v) => v,
        };
        if !expected && held >= max_groups {
            counters.groups_rejected += 1;
            return None;
        }
        let mut slot = Slot {
            group: Group::new(&ctx, expected, now),
            armed_at: Timestamp::MAX,
        };
        let c = Cold {
            key: key.clone(),
            parked: Timestamp::MAX,
        };
        let idx = match free.pop() {
            Some(i) => {
                let generation = self.lanes[lane].generation_bump.wrapping_add(1);
                self.lanes[lane].generation_bump = generation;
                slot.group.generation = generation;
                slots[i as usize] = Some(slot);
                cold[i as usize] = Some(c);
                i
            }
            None => {
                slots.push(Some(slot));
                cold.push(Some(c));
                (slots.len() - 1) as u32
            }
        };
        vacant.insert(idx);
        Some(idx)
    }

    /// A discovered group of state `ri` that holds nothing at `now` ([`Group::idle_at`]),
    /// among the next [`IDLE_SCAN`] slots from where the last look stopped: bounded work per
    /// refused key, and over a flood every slot is looked at in turn.
    fn idle_group(&mut self, ri: usize, now: Timestamp) -> Option<(u32, GroupKey)> {
        let outage_until = self.outage_until;
        let rt = &mut self.rts[ri];
        let n = rt.slots.len();
        if n == 0 {
            return None;
        }
        let ctx = rt.ctx(outage_until);
        let start = rt.idle_scan as usize % n;
        let mut found = None;
        let mut next = start;
        for i in 0..IDLE_SCAN.min(n) {
            let idx = (start + i) % n;
            next = (idx + 1) % n;
            let idle = rt.slots[idx]
                .as_ref()
                .is_some_and(|s| !s.group.expected && s.group.idle_at(&ctx, now));
            if idle && let Some(c) = rt.cold[idx].as_ref() {
                found = Some((idx as u32, c.key.clone()));
                break;
            }
        }
        rt.idle_scan = next as u32;
        found
    }

    /// Arms the group's next timer if it is earlier than the one already armed (see
    /// [`arm_slot`]).
    fn arm(&mut self, ri: usize, slot: u32) {
        let lane = self.rts[ri].lane;
        let lane_now = self.lanes[lane].now;
        let entry = self.rts[ri].with_group(slot, self.outage_until, |ctx, s, c, _| {
            arm_slot(ctx, s, c, lane_now, ri, slot, false)
        });
        if let Some(Some(e)) = entry {
            self.lanes[lane].wheel.insert(e);
            self.lane_armed(lane);
        }
    }

    /// A timer was armed in `lane`: a sweep must look at it again.
    fn lane_armed(&mut self, lane: usize) {
        self.lanes[lane].skip_until = Timestamp::MIN;
    }

    /// Alerts made by one call, in (time, rule order) order: stable, so a rule's own alerts
    /// keep their processing order, and the same whether rules share state or not.
    fn order_alerts(&mut self, out: &mut Vec<Alert>, start: usize) {
        if out[start..].iter().any(Alert::for_every_member) && self.expand_alerts(out, start) {
            return;
        }
        let out = &mut out[start..];
        if out.len() < 2 {
            return;
        }
        // Each alert's rank is its member's, read through the body it already holds (a state
        // shared by thousands of rules alerts for each of them at once: no rule is looked
        // up); alerts usually come in order already (a shared state's members are in rule
        // order), and then nothing moves.
        let order = |a: &Alert| (a.time, a.rank());
        // Checked on the alerts themselves: sorted, they need no keys written.
        if out.is_sorted_by_key(order) {
            return;
        }
        let mut keys = std::mem::take(&mut self.alert_keys);
        keys.clear();
        keys.extend(out.iter().enumerate().map(|(i, a)| (order(a), i as u32)));
        // A retraction re-arms its absence, whose deadline may already have passed: the new
        // alert, stamped with that deadline, must still come after the retraction it follows
        // (else a reader sees two alerts of one group firing at once).
        // The retractions by rule, so each alert looks only at its own rule's (a reload or a
        // late event can retract for thousands of rules in one call).
        let mut retracted: Vec<(u32, u32)> = (out.iter().enumerate())
            .filter(|(_, r)| r.state == AlertState::Retracted)
            .map(|(i, r)| (r.rank(), i as u32))
            .collect();
        if !retracted.is_empty() {
            retracted.sort_unstable();
            for (j, a) in out.iter().enumerate() {
                let from = retracted.partition_point(|&(rank, _)| rank < a.rank());
                for &(_, i) in retracted[from..]
                    .iter()
                    .take_while(|&&(rank, _)| rank == a.rank())
                {
                    let r = &out[i as usize];
                    if (i as usize) < j && a.time < r.time && a.group() == r.group() {
                        keys[j].0.0 = keys[j].0.0.max(r.time);
                    }
                }
            }
        }
        permute_sorted(out, &mut keys);
        self.alert_keys = keys;
    }

    /// Makes the alerts that entries for every member of a shared state stand for
    /// ([`Alert::EVERY_MEMBER`]), one per member, in place of `out[start..]`: merged in
    /// (time, rule order) when no retraction is among them (each entry's members are in rule
    /// order, so they are then ordered as the sort in [`Engine::order_alerts`] would order
    /// them, ties in the order they were made), else in the order they were made, for that
    /// sort. Returns whether they are in order.
    fn expand_alerts(&mut self, out: &mut Vec<Alert>, start: usize) -> bool {
        /// Entries up to this many are merged by looking at every entry's next alert; more,
        /// through a heap of them.
        const SCAN_MAX: usize = 4;
        /// Changes of up to this many shared states at one instant are merged by rank alone,
        /// looking at each state's next member (an alert storm: a scan of 16 ranks costs less
        /// than a heap's sifting).
        const MERGE_MAX: usize = 16;
        let mut made = std::mem::take(&mut self.alert_scratch);
        made.clear();
        made.extend(out.drain(start..));
        // (A state's members are in rule order, as the engine gathers them, and so are those
        // a reload announces a change to, taken from them.)
        debug_assert!(
            made.iter()
                .all(|a| a.body.members.is_sorted_by_key(|m| m.rank)),
            "a state's members out of rule order"
        );
        let ordered = made.iter().all(|a| a.state != AlertState::Retracted);
        if made.len() == 1 || !ordered {
            for a in &made {
                a.expand_into(out);
            }
        } else if made.len() <= MERGE_MAX
            && let Some(t) = made.first().map(|a| a.time)
            && made.iter().all(|a| a.for_every_member() && a.time == t)
        {
            // The common case: changes of some shared states at one instant, ordered by
            // their members' ranks alone.
            Alert::merge_members(&made, out);
        } else if made.len() > SCAN_MAX {
            // Each entry's next alert, smallest (time, rank, entry) on top: ties go to the
            // entry made first, as in a stable sort.
            let mut heads = std::mem::take(&mut self.alert_heads);
            heads.clear();
            heads.extend(
                made.iter()
                    .enumerate()
                    .filter_map(|(e, a)| Some(Reverse((a.order_of(0)?, e as u32, 0u32)))),
            );
            let mut heap = BinaryHeap::from(heads);
            while let Some(mut top) = heap.peek_mut() {
                let Reverse((_, e, i)) = *top;
                let a = &made[e as usize];
                out.push(a.nth(i as usize));
                match a.order_of(i as usize + 1) {
                    Some(k) => *top = Reverse((k, e, i + 1)),
                    None => {
                        std::collections::binary_heap::PeekMut::pop(top);
                    }
                }
            }
            self.alert_heads = heap.into_vec();
        } else {
            let mut next = [0usize; SCAN_MAX];
            loop {
                let mut best: Option<((Timestamp, u32), usize)> = None;
                for (e, a) in made.iter().enumerate() {
                    if let Some(k) = a.order_of(next[e])
                        && best.is_none_or(|(b, _)| k < b)
                    {
                        best = Some((k, e));
                    }
                }
                let Some((_, e)) = best else {
                    break;
                };
                out.push(made[e].nth(next[e]));
                next[e] += 1;
            }
        }
        made.clear();
        self.alert_scratch = made;
        ordered
    }

    /// Timer entries held in the lanes' wheels, stale ones included (they go when they come
    /// due or move down a level): what the timers cost in memory.
    pub fn timer_entries(&self) -> usize {
        self.lanes.iter().map(|l| l.wheel.len()).sum()
    }

    /// Pushes one event; alerts it causes (and timers due before it) are appended to `out`.
    /// An event that stands for several ([`Event::copies`]: a syslog line folding repeats of
    /// its message) is pushed that many times, each a separate event at the same instant.
    pub fn push(&mut self, ev: Event, out: &mut Vec<Alert>) {
        let start = out.len();
        for _ in 1..ev.copies() {
            self.push_inner(ev.clone(), out);
        }
        self.push_inner(ev, out);
        // (Most events make no alert: no call then.)
        if out.len() > start {
            self.order_alerts(out, start);
        }
    }

    /// Pushes events in order, exactly as [`Engine::push`] one at a time would (same alerts,
    /// same counters), but faster on large working sets: the memory each event will touch is
    /// read a few events ahead.
    pub fn push_batch<I: IntoIterator<Item = Event>>(&mut self, events: I, out: &mut Vec<Alert>) {
        let mut events = events.into_iter();
        let mut ahead = std::mem::take(&mut self.ahead);
        loop {
            ahead.clear();
            ahead.extend(events.by_ref().take(LOOKAHEAD));
            if ahead.is_empty() {
                break;
            }
            // Without an index (unshared) there are no hinted slots to read ahead.
            let warmed = ahead.len() > 1 && self.filter.indexed();
            if warmed {
                self.warm(&ahead);
            }
            for (i, ev) in ahead.drain(..).enumerate() {
                if warmed {
                    let from = if i == 0 { 0 } else { self.ahead_ends[i - 1] };
                    self.ahead_pos = Some((from, self.ahead_ends[i]));
                }
                self.push(ev, out);
            }
        }
        self.ahead = ahead;
    }

    /// Probes the index for `evs` (kept for their evaluation) and loads the group slots the
    /// entries name. It changes no state: the candidates are what each event's own probe
    /// would give (the index only changes at reload), and a hint that goes stale before its
    /// event is validated there like any other.
    fn warm(&mut self, evs: &[Event]) {
        let mut cands = std::mem::take(&mut self.ahead_cands);
        let mut touch = std::mem::take(&mut self.touch);
        cands.clear();
        touch.clear();
        self.ahead_ends.clear();
        for ev in evs {
            let from = cands.len();
            self.filter.candidates_hinted(ev, &mut cands);
            self.ahead_ends.push(cands.len());
            for &(pred, hint) in &cands[from..] {
                if hint != filter::NO_HINT
                    && let Some(c) = self.consumers.get(pred as usize).and_then(|c| c.first())
                {
                    touch.push((c.state, hint));
                }
            }
        }
        // The loads are independent, so they are all in flight at once.
        let mut sum = 0u64;
        for &(rt, slot) in &touch {
            if let Some(s) = slot_at(&self.rts, rt, slot) {
                sum = sum
                    .wrapping_add(s.armed_at.0 as u64)
                    .wrapping_add(s.group.last_activity.0 as u64);
            }
            // The hint is checked against the key.
            if let Some(k) = key_at(&self.rts, rt, slot) {
                sum = sum.wrapping_add(k.first().map_or(0, |v| v.ty() as u64));
            }
        }
        std::hint::black_box(sum);
        self.ahead_cands = cands;
        self.touch = touch;
    }

    /// One event's work ([`Engine::push`]). Not inlined: inlined into `push` it cost about
    /// 50 M more instructions on the pool-100 cell at 10,000 rules (register pressure in the
    /// delivery loop; docs/compact-evaluator.md, "Session 48").
    #[inline(never)]
    fn push_inner(&mut self, ev: Event, out: &mut Vec<Alert>) {
        self.counters.events += 1;
        let arrival = match self.clock {
            None => {
                self.begin(ev.arrival, ev.time.min(ev.arrival), true);
                ev.arrival
            }
            Some(c) => c.max(ev.arrival),
        };
        self.note_outage(arrival);
        self.clock = Some(arrival);
        // An event stamped after its arrival (a sender whose clock runs ahead) counts as
        // arriving now in event-time lanes: it cannot sit in a reorder buffer until that time.
        let ev_time = if ev.time > arrival {
            self.counters.future += 1;
            arrival
        } else {
            ev.time
        };
        let ev = self.wrap(ev);
        let mut hits = std::mem::take(&mut self.hits);
        hits.clear();
        self.evaluate(&ev, &mut hits);
        // What the groups hold of it (the conditions have read it whole).
        let ev = self.held(ev);
        // Processing-time lane: timers strictly before now, then the event at now.
        self.advance_lane(0, arrival.sub(Duration(1)), out);
        let seq = self.next_seq;
        self.next_seq += 1;
        let direct = !self.direct_preds.is_empty() && self.deliver_compact(&ev, arrival, seq, out);
        if hits.is_empty() && !direct {
            self.counters.unmatched += 1;
        }
        if hits.len() > 1 && self.read_ahead {
            // (Counts event-time hits too: they are skipped there, and rare.)
            self.touch_groups(&mut hits);
        }
        let idle_before = self.idle_freed;
        for h in &hits {
            if self.rts[h.rule as usize].lane == 0 {
                // What the read-ahead found holds unless a delivery let an idle group go
                // meanwhile (its family record may be gone, or another key's now).
                let found = if self.idle_freed == idle_before {
                    h.found
                } else {
                    None
                };
                self.deliver(
                    h.rule as usize,
                    &h.key,
                    arrival,
                    h.mask,
                    h.event(&ev),
                    (seq, Some(h.kid)),
                    h.hint,
                    found,
                    out,
                );
            }
        }
        // Event-time lanes: reorder below the watermark. Which lanes this event is a source of,
        // marked once (not a scan of the hits per lane).
        let mut lane_hit = std::mem::take(&mut self.lane_hit);
        let sweep = arrival >= self.sweep_at;
        if self.lanes.len() > 1 {
            // (In a replay, a line stamped more than a day before the first is stale, a clock
            // never set: late, it moves nothing, where monitoring begins included.)
            let stale = self.cfg.recorded
                && self
                    .first_stamp
                    .is_some_and(|f| f.since(ev_time) > STALE_FIRST_SOURCE);
            if !stale {
                self.min_event_any = Some(self.min_event_any.map_or(ev_time, |m| m.min(ev_time)));
            }
            self.max_event_any = Some(self.max_event_any.map_or(ev_time, |m| m.max(ev_time)));
            if sweep {
                self.sweep_at = arrival.add(SWEEP_EVERY);
            }
            lane_hit.clear();
            lane_hit.extend(
                hits.iter()
                    .map(|h| self.rts[h.rule as usize].lane as u32)
                    .filter(|&l| l != 0),
            );
            lane_hit.sort_unstable();
            lane_hit.dedup();
        }
        // The lanes the event is a source of, and, on a sweep, those whose time may have
        // something due (by `skip_until`); no other lane is touched.
        let count = if sweep {
            self.lanes.len().saturating_sub(1)
        } else {
            lane_hit.len()
        };
        for n in 0..count {
            let (li, ours) = if sweep {
                (n + 1, lane_hit.binary_search(&((n + 1) as u32)).is_ok())
            } else {
                (lane_hit[n] as usize, true)
            };
            let lane = &mut self.lanes[li];
            if !ours {
                // Not one of the lane's sources: it moves no watermark; through the clock an
                // idle lane's time goes on, brought up to date every SWEEP_EVERY of arrivals
                // (as the agent's tick does), so an event costs nothing in the lanes it is no
                // source of. A lane that has not begun waits for its first source.
                if (lane.max_event.is_none() && !lane.started) || arrival < lane.skip_until {
                    continue;
                }
                let w = lane.watermark(arrival);
                self.release(li, w, out);
                continue;
            }
            if lane.max_event.is_none() && !lane.started {
                // The lane's first source (replay): its time begins here, as it would have at
                // the first event, so a source whose stamps lag loses nothing from its first
                // event on whatever other lines came before it. (Nothing ran in the lane yet:
                // no rule began, no timer, nothing buffered.) Not for a line stamped more than
                // a day before the input's start: a clock never set, not a lag (it would have
                // matched, and fired alerts dated 1970; found by an audit); it is late. (A
                // zone's offset, up to 12 hours behind, is a lag.)
                let t = ev_time.sub(lane.delay);
                if t < lane.now && lane.now.since(t) <= STALE_FIRST_SOURCE {
                    lane.now = t;
                    lane.wheel = Wheel::new(t);
                }
            }
            // Where the lane's time had got to when this event arrived (an idle lane's
            // watermark moved with the clock meanwhile), then what the event itself adds.
            // (A started lane with no source yet follows the clock: computed, not read from
            // `now`, which a sweep may not have moved yet. A lane still to begin, in replay,
            // starts from where its first source put it.)
            let before =
                (lane.max_event.is_some() || lane.started).then(|| lane.watermark(arrival));
            // A late event (below the lane's time already) is no arrival for the watermark:
            // it must not hold an idle lane's time back (a host logging an hour behind, sending
            // every second, kept every other host's silence from firing while it sent).
            let late = ev_time < before.unwrap_or(lane.now);
            let w = if late {
                before.unwrap_or(lane.now)
            } else {
                lane.max_event = Some(lane.max_event.map_or(ev_time, |m| m.max(ev_time)));
                if !lane.started {
                    lane.min_event = Some(lane.min_event.map_or(ev_time, |m| m.min(ev_time)));
                }
                lane.last_arrival = Some(arrival);
                let w = lane
                    .watermark(arrival)
                    .max(before.unwrap_or(Timestamp::MIN));
                lane.mark = Some(w);
                w
            };
            // Time passes before the event is looked at: deadlines the watermark passed fire
            // first, as they would have with the clock ticking while the event was on its
            // way, so a late event finds the alert it may retract. Strictly before `w`: what
            // happens at `w` itself comes after this event's own delivery (events at an
            // instant go before the timers of that instant).
            self.release(li, w.sub(Duration(1)), out);
            for h in &hits {
                if self.rts[h.rule as usize].lane != li {
                    continue;
                }
                if ev_time < w {
                    self.late(h, h.event(&ev), w, out);
                } else {
                    self.lanes[li].pending.push(Reverse(Pending {
                        time: ev_time,
                        seq,
                        rule: h.rule,
                        key: h.key.clone(),
                        mask: h.mask,
                        ev: h.event(&ev).clone(),
                    }));
                }
            }
            self.release(li, w, out);
        }
        hits.clear();
        self.hits = hits;
        self.lane_hit = lane_hit;
        self.spare = Some(ev);
    }

    /// Finds the groups of the event's processing-time hits (except those whose predicate's
    /// index entry can carry a slot hint: they keep their own path, which refreshes the hint)
    /// and loads the memory their deliveries will read (each group's slot, runs and oldest
    /// held event) before the first transition runs, so the cache misses of several
    /// deliveries overlap instead of being paid one after another. Changes no state: the
    /// lookups are the ones the deliveries would make (without the family memo), and each
    /// delivery checks what was found before using it ([`Engine::own_slot`],
    /// [`Engine::family_slot`]).
    fn touch_groups(&self, hits: &mut [Hit]) {
        let mut sum = 0u64;
        // The last family record found: (family, key number, record).
        let mut last: Option<(u32, u32, u32)> = None;
        for h in hits.iter_mut() {
            if h.hint.is_some() || self.rts[h.rule as usize].lane != 0 {
                continue;
            }
            h.found = self.touch_group(h.rule, &h.key, h.kid, &mut last, &mut sum);
        }
        std::hint::black_box(sum);
    }

    /// One group of [`Engine::touch_groups`]: finds it (through `last`, the last family record
    /// found: family, key number, record), adds what its delivery will read to `sum`, and
    /// says where it was found.
    fn touch_group(
        &self,
        rule: u32,
        key: &GroupKey,
        kid: u32,
        last: &mut Option<(u32, u32, u32)>,
        sum: &mut u64,
    ) -> Option<Found> {
        let ri = rule as usize;
        let mut found = None;
        // The group's slot, if it has one yet.
        let slot = match self.family_of[ri] {
            Some((f, pos)) => {
                let fam = &self.families[f as usize];
                let rec = match *last {
                    Some((lf, lk, r)) if lf == f && lk == kid => Some(r),
                    _ => fam.find(key),
                };
                let rec = rec?;
                *last = Some((f, kid, rec));
                // Even with no slot of this member in it, the record spares the delivery
                // its lookup.
                found = Some(Found::Family { rec });
                fam.slot(rec, pos).map(|(slot, _)| slot)
            }
            None => self.rts[ri].groups.get(key).copied(),
        };
        let Some((slot, s)) = slot.and_then(|slot| Some((slot, slot_at(&self.rts, rule, slot)?)))
        else {
            return found;
        };
        if self.family_of[ri].is_none() {
            found = Some(Found::Own {
                slot,
                generation: s.group.generation,
            });
        }
        *sum = sum
            .wrapping_add(s.armed_at.0 as u64)
            .wrapping_add(s.group.touch());
        found
    }

    /// The event as groups hold it: `ev` itself, or, when it has a text longer than an alert
    /// shows ([`crate::alert::MAX_ALERT_TEXT`]), a copy with such texts cut as alerts cut them
    /// ([`cap_held_texts`]).
    #[inline]
    fn held(&self, ev: Arc<Event>) -> Arc<Event> {
        if !ev.fields.iter().any(|(_, v)| held_cut_off(v)) {
            return ev;
        }
        self.held_cut(&ev)
    }

    /// [`Engine::held`]'s copy, out of line (rare).
    #[cold]
    #[inline(never)]
    fn held_cut(&self, ev: &Arc<Event>) -> Arc<Event> {
        let mut e = (**ev).clone();
        cap_held_texts(&mut e, &self.distinct_keys);
        Arc::new(e)
    }

    /// The event in an `Arc`, reusing the previous event's allocation when nothing (a partial
    /// match, an alert, a reorder buffer) kept it: no allocation per event in the common case.
    fn wrap(&mut self, ev: Event) -> Arc<Event> {
        if let Some(mut spare) = self.spare.take()
            && let Some(slot) = Arc::get_mut(&mut spare)
        {
            *slot = ev;
            return spare;
        }
        Arc::new(ev)
    }

    /// Moves time to `now` (never backwards): fires every timer due and, in event-time lanes,
    /// releases events below the new watermark.
    pub fn advance_to(&mut self, now: Timestamp, out: &mut Vec<Alert>) {
        let start = out.len();
        self.advance_inner(now, out);
        self.order_alerts(out, start);
    }

    fn advance_inner(&mut self, now: Timestamp, out: &mut Vec<Alert>) {
        let now = match self.clock {
            None => {
                self.begin(now, now, false);
                now
            }
            Some(c) => c.max(now),
        };
        self.note_outage(now);
        self.clock = Some(now);
        self.advance_lane(0, now, out);
        for li in 1..self.lanes.len() {
            let w = self.lanes[li].watermark(now);
            self.release(li, w, out);
        }
    }

    /// End of input (replay): releases every buffered event, then stops every lane's time at
    /// the later of the last event's time and `until`.
    pub fn finish(&mut self, until: Option<Timestamp>, out: &mut Vec<Alert>) {
        let start = out.len();
        self.finish_inner(until, out);
        self.order_alerts(out, start);
    }

    fn finish_inner(&mut self, until: Option<Timestamp>, out: &mut Vec<Alert>) {
        let Some(clock) = self.clock else {
            if let Some(u) = until {
                self.advance_to(u, out);
            }
            return;
        };
        let end = until.map_or(clock, |u| u.max(clock));
        self.clock = Some(end);
        self.advance_lane(0, end, out);
        for li in 1..self.lanes.len() {
            let lane = &self.lanes[li];
            // A lane whose sources never spoke stops with the input: its last event's time.
            let last = lane.max_event.or(self.max_event_any).unwrap_or(clock);
            // The input's last line, whatever its source (docs/rules.md, "Time"): a line no
            // definition of the lane's rules matches moves its time too, so a log whose last
            // lines come from another program fires the silences they cover.
            let input_end = last.max(self.max_event_any.unwrap_or(last));
            // `until` is on the arrival clock; the lane's time reaches as far past where the
            // last arrival left it (its watermark then, plus the delay) as `until` is past that
            // arrival (a lagging source keeps its lag). A lane that saw no event: `until`.
            // Never short of the input's end: `--until` stops the clock there or later, so it
            // takes back no alert the end of the input gives (a lagging source's lag would).
            let stop = match (until, lane.mark, lane.last_arrival) {
                (Some(u), Some(m), Some(a)) => m.add(lane.delay).add(u.since(a)),
                (Some(u), None, _) if lane.max_event.is_none() => {
                    last.add(u.since(clock).max(Duration(0)))
                }
                (Some(u), _, _) => u,
                (None, _, _) => input_end,
            }
            .max(input_end);
            self.release(li, Timestamp::MAX, out);
            self.advance_lane(li, stop, out);
        }
    }

    /// Event time: the lane's rules begin monitoring at the earliest event seen, once the
    /// watermark reaches it (nothing earlier can arrive in time after that), but, live, never before
    /// the time the lane's most advanced source had when the first event arrived (less
    /// `max_delay`): a stale line (a relay's backlog, a host whose clock lags) must not
    /// back-date the start, or every expected group would be blamed for a silence from
    /// before the agent could hear it. A lane whose only source lags keeps its first event.
    fn start_lane(&mut self, li: usize, w: Timestamp) {
        let lane = &self.lanes[li];
        if lane.started {
            return;
        }
        // The earliest event seen (any: monitoring begins at the first event's time).
        let Some(earliest) = [lane.min_event, self.min_event_any]
            .into_iter()
            .flatten()
            .min()
        else {
            return;
        };
        let floor = match (lane.first_arrival, lane.last_arrival, lane.max_event) {
            // A recording begins at its earliest event, wherever its clock stood, but not
            // before its first line's time less `max_delay` (the lane's time then: a stale
            // line read later, of a clock never set, say, is late and moves nothing).
            _ if self.cfg.recorded => self
                .first_stamp
                .map_or(Timestamp::MIN, |f| f.sub(lane.delay)),
            // The leader's lag: how far its newest stamp trails the clock.
            (Some(f), Some(a), Some(m)) => f.sub(a.since(m).max(Duration(0))).sub(lane.delay),
            // None of its sources spoke (yet): the input's own lag (its newest stamp against
            // the clock) stands for theirs.
            (Some(f), _, None) => {
                let lag = match (self.clock, self.max_event_any) {
                    (Some(c), Some(m)) => c.since(m).max(Duration(0)),
                    _ => Duration(0),
                };
                f.sub(lag).sub(lane.delay)
            }
            _ => Timestamp::MIN,
        };
        let first = earliest.max(floor);
        if w < first {
            return;
        }
        self.lanes[li].started = true;
        for ri in 0..self.rts.len() {
            if self.rts[ri].lane == li && self.rts[ri].monitor_start().is_none() {
                self.start_rule(ri, first);
            }
        }
    }

    /// Releases pending events up to the watermark `w`, then moves the lane's time to `w`.
    fn release(&mut self, li: usize, w: Timestamp, out: &mut Vec<Alert>) {
        self.start_lane(li, w);
        while let Some(Reverse(p)) = self.lanes[li].pending.peek() {
            if p.time > w {
                break;
            }
            let Some(Reverse(p)) = self.lanes[li].pending.pop() else {
                break;
            };
            self.advance_lane(li, p.time.sub(Duration(1)), out);
            self.deliver(
                p.rule as usize,
                &p.key,
                p.time,
                p.mask,
                &p.ev,
                (p.seq, None),
                None,
                None,
                out,
            );
        }
        if w != Timestamp::MAX {
            self.advance_lane(li, w, out);
        }
        // Until when a sweep may pass this lane by: its next timer or buffered event, which
        // its watermark (at most the clock less the delay) reaches `max_delay` later at the
        // earliest; a lane still to begin monitoring is always looked at.
        let lane = &mut self.lanes[li];
        lane.skip_until = if lane.mode == TimeMode::Processing || !lane.started {
            Timestamp::MIN
        } else {
            let next = [
                lane.wheel.due_bound(),
                lane.pending.peek().map(|Reverse(p)| p.time),
            ]
            .into_iter()
            .flatten()
            .min();
            next.map_or(Timestamp::MAX, |t| t.add(lane.delay))
        };
    }

    /// Fires the lane's timers up to `to` and sets its time.
    fn advance_lane(&mut self, li: usize, to: Timestamp, out: &mut Vec<Alert>) {
        // Short of the lane's time, only deadlines armed in its past are due (an event-time
        // rule whose monitoring began before the lane's time: its expected groups' silences
        // fire before the events after them).
        if !self.lanes[li].wheel.has_due(to) {
            self.lanes[li].now = self.lanes[li].now.max(to);
            return;
        }
        // Due timers fire one at a time in (deadline, rule, group key) order: deterministic,
        // independent of how often a group was re-armed, and the same after a restore
        // renumbers the slots. A timer that re-arms into the past joins the queue.
        let mut due: BinaryHeap<Reverse<DueTimer>> = BinaryHeap::new();
        let mut fired = std::mem::take(&mut self.fired);
        // Due timers in firing order, last first, while nothing had to be merged with them: a
        // sort by reference instead of a heap of cloned keys (the common case).
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        let mut check_wheel = true;
        loop {
            // The wheel is asked again only when the queue ran dry or a timer was just armed
            // for an instant this advance covers (not once per fired timer), and, when the
            // queue ran dry, only if it has something due (mostly it has not: it was advanced).
            if check_wheel
                || (due.is_empty() && ready.is_empty() && self.lanes[li].wheel.has_due(to))
            {
                check_wheel = false;
                fired.clear();
                // Entries moving down a level whose group's deadline moved later go straight
                // back out at the new deadline; entries nobody wants are dropped. Only an
                // absence's deadline moves later: another entry goes down unlooked at (a stale
                // one is dropped when it comes due), which saves a group lookup per level.
                let Engine {
                    lanes,
                    rts,
                    compact,
                    outage_until,
                    ..
                } = self;
                let lane = &mut lanes[li];
                let lane_now = lane.now;
                lane.wheel.advance_settling(to, &mut fired, |e| {
                    if !may_move(rts, e) {
                        return Settle::Keep;
                    }
                    match refile(rts, compact, *outage_until, e.deadline.max(lane_now), e) {
                        Refile::Due => Settle::Keep,
                        Refile::Moved(n) => Settle::Move(n.deadline),
                        Refile::Stale => Settle::Drop,
                    }
                });
            }
            // Due timers whose group's deadline moved later are filed again at the new
            // deadline: back in the wheel, or, when this advance covers it, among the due
            // timers (so same-instant timers still fire in order). Only an absence's moves:
            // another's is left to the firing path, which tells a stale one too.
            let mut i = 0;
            while i < fired.len() {
                if !may_move(&self.rts, &fired[i]) {
                    i += 1;
                    continue;
                }
                let now = fired[i].deadline.max(self.lanes[li].now);
                match refile(
                    &mut self.rts,
                    &mut self.compact,
                    self.outage_until,
                    now,
                    &fired[i],
                ) {
                    Refile::Moved(n) if n.deadline <= to => fired[i] = n,
                    Refile::Moved(n) => {
                        self.lanes[li].wheel.insert(n);
                        fired.swap_remove(i);
                    }
                    Refile::Stale => {
                        fired.swap_remove(i);
                    }
                    Refile::Due => i += 1,
                }
            }
            if !fired.is_empty() {
                if due.is_empty() && ready.is_empty() {
                    // Nothing queued: these are all the due timers; sort them once.
                    let (rts, compact) = (&self.rts, &self.compact);
                    fired.sort_unstable_by(|a, b| timer_order(rts, compact, b, a));
                    std::mem::swap(&mut fired, &mut ready);
                } else {
                    // A timer armed into this advance joins the queued ones: merge in a heap.
                    for e in fired.drain(..).chain(ready.drain(..)) {
                        let key = group_key_of(&self.rts, &self.compact, &e).cloned();
                        due.push(Reverse((e.deadline, e.rule, key, e)));
                    }
                }
            }
            let Some(e) = ready
                .pop()
                .or_else(|| due.pop().map(|Reverse((_, _, _, e))| e))
            else {
                break;
            };
            if self.compact.holds(e.rule as usize) {
                check_wheel |= self.compact_timer(li, &e, to, out);
                continue;
            }
            let ri = e.rule as usize;
            let Some(rt) = self.rts.get_mut(ri) else {
                continue;
            };
            let Some(s) = rt
                .slots
                .get_mut(e.slot as usize)
                .and_then(Option::as_mut)
                .filter(|s| s.group.generation == e.generation)
            else {
                continue;
            };
            if s.armed_at != e.deadline {
                if let Some(c) = rt.cold.get_mut(e.slot as usize).and_then(Option::as_mut)
                    && c.parked == e.deadline
                {
                    // Parked and never taken back: it leaves the wheel here.
                    c.parked = Timestamp::MAX;
                }
                continue;
            }
            let now = e.deadline.max(self.lanes[li].now);
            self.lanes[li].now = now;
            self.on_timer(ri, e.slot, now, out);
            // Everything due at `now` was done: a timer re-armed for `now` again would fire
            // again with nothing changed, for ever (a stale deadline is a bug; fuzzing found
            // one). Dropped, so the engine goes on; debug builds stop on it.
            if let Some(s) = self
                .rts
                .get_mut(ri)
                .and_then(|rt| rt.slots.get_mut(e.slot as usize))
                .and_then(Option::as_mut)
                && s.armed_at <= now
            {
                debug_assert!(false, "a timer re-armed for the instant it fired ({now:?})");
                s.armed_at = Timestamp::MAX;
                self.counters.stuck_timers += 1;
            }
            let rearmed = slot_at(&self.rts, e.rule, e.slot).is_some_and(|s| s.armed_at <= to);
            check_wheel |= rearmed;
        }
        self.fired = fired;
        self.ready = ready;
        self.lanes[li].now = self.lanes[li].now.max(to);
    }

    /// Compact entry `e` of lane `li` comes due (the advance goes to `to`): if its group is
    /// still held and armed at its deadline, its timer fires as a slot's does
    /// (`Engine::on_timer`): the group is let go if forgotten, else armed again (its entry
    /// filed), and its record freed once it holds no group. One lookup of the group for all
    /// of it; returns whether the group was re-armed for an instant the advance covers.
    fn compact_timer(
        &mut self,
        li: usize,
        e: &TimerEntry,
        to: Timestamp,
        out: &mut Vec<Alert>,
    ) -> bool {
        let Engine {
            rts,
            compact,
            lanes,
            outage_until,
            counters,
            ..
        } = self;
        let ri = e.rule as usize;
        let Some((key, cell)) = compact.entry_cell(ri, e.slot, e.generation) else {
            return false;
        };
        if cell.armed != e.deadline {
            if cell.parked == e.deadline {
                // Parked and never taken back: it leaves the wheel here.
                cell.parked = Timestamp::MAX;
            }
            return false;
        }
        let now = e.deadline.max(lanes[li].now);
        lanes[li].now = now;
        let Some(rt) = rts.get_mut(ri) else {
            return false;
        };
        let ctx = RuleCtx {
            facts: &rt.facts,
            outage_until: *outage_until,
        };
        cell.armed = Timestamp::MAX;
        if cell.group.on_timer(&ctx, key, now, &mut rt.counters, out) {
            let key = key.clone();
            if let Some((s, r, pos)) = compact.locate(ri, &key) {
                let scope = &mut compact.scopes[s as usize];
                scope.remove(r, pos);
                scope.release_if_empty(r);
            }
            return false;
        }
        let wake = cell.group.next_wake(&ctx);
        if let Some(e) = arm_cell(cell, ri as u32, wake, now) {
            lanes[0].wheel.insert(e);
            lanes[0].skip_until = Timestamp::MIN;
        }
        // Everything due at `now` was done: a timer re-armed for `now` again would fire again
        // with nothing changed, for ever (see the same check for slots in `advance_lane`).
        if cell.armed <= now {
            debug_assert!(false, "a timer re-armed for the instant it fired ({now:?})");
            cell.armed = Timestamp::MAX;
            counters.stuck_timers += 1;
            return false;
        }
        cell.armed <= to
    }

    fn on_timer(&mut self, ri: usize, slot: u32, now: Timestamp, out: &mut Vec<Alert>) {
        let forget = self.rts[ri].with_group(slot, self.outage_until, |ctx, s, c, counters| {
            s.armed_at = Timestamp::MAX;
            let key = &c.as_ref()?.key;
            s.group
                .on_timer(ctx, key, now, counters, out)
                .then(|| key.clone())
        });
        match forget {
            Some(Some(key)) => self.free_slot(ri, slot, &key),
            Some(None) => self.arm(ri, slot),
            None => {}
        }
    }

    /// Delivers one hit: `at` is the event's sequence number and, for the processing-time
    /// lane, its key's number within the event (what lets a family's other members skip the
    /// lookup).
    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        ri: usize,
        key: &GroupKey,
        t: Timestamp,
        mask: EvSet,
        ev: &Arc<Event>,
        at: (u64, Option<u32>),
        hint: Option<(u32, u32)>,
        found: Option<Found>,
        out: &mut Vec<Alert>,
    ) {
        let seq = at.0;
        // The index entry's hint, when it still names this group's slot, saves the group map
        // lookup; a group created or moved since is looked up and the hint refreshed.
        let hinted =
            hint.and_then(|(_, slot)| (key_at(&self.rts, ri as u32, slot)? == key).then_some(slot));
        let (own, rec) = match found {
            Some(Found::Own { slot, generation }) => (Some((slot, generation)), None),
            Some(Found::Family { rec }) => (None, Some(rec)),
            None => (None, None),
        };
        let slot = match hinted
            .or_else(|| own.and_then(|(slot, generation)| self.own_slot(ri, key, slot, generation)))
            .or_else(|| self.family_slot(ri, key, at, rec))
        {
            Some(slot) => slot,
            None => {
                // An event that could not act on a new group makes none (it would hold a
                // slot, and a share of `max_groups`, until `forget_after` for nothing).
                // (A lookup first: most groups exist, and finding one is cheaper than
                // `slot_for`'s entry.)
                let rt = &mut self.rts[ri];
                let slot = match rt.groups.get(key).copied() {
                    Some(slot) => slot,
                    None if mask & rt.opens == 0 => {
                        rt.counters.matched += 1;
                        return;
                    }
                    None => match self.slot_for(ri, key, false, t) {
                        Some(slot) => slot,
                        None => return,
                    },
                };
                if let Some((pred, _)) = hint
                    && let Some(field) = self.hintable[pred as usize]
                    && let Some(value) = key.first()
                {
                    self.filter.set_hint(ev.source, field, value, pred, slot);
                }
                self.family_record(ri, key, at, slot);
                slot
            }
        };
        // The transition and the timer it needs, in one visit of the group.
        let lane = self.rts[ri].lane;
        let lane_now = self.lanes[lane].now;
        // The key is the hit's (equal to the slot's): the transition does not read the slot's.
        let entry = self.rts[ri].with_group(slot, self.outage_until, |ctx, s, c, counters| {
            let calm = s.group.on_event(ctx, key, t, mask, ev, seq, counters, out);
            arm_slot(ctx, s, c, lane_now, ri, slot, calm)
        });
        if let Some(Some(e)) = entry {
            self.lanes[lane].wheel.insert(e);
            self.lane_armed(lane);
        }
    }

    /// State `ri`'s slot for `key` as its family records it (checked against the slot's
    /// generation: a slot freed and reused is another group), so members after the first need
    /// no lookup of their own.
    fn family_slot(
        &mut self,
        ri: usize,
        key: &GroupKey,
        at: (u64, Option<u32>),
        found: Option<u32>,
    ) -> Option<u32> {
        let (f, pos) = self.family_of[ri]?;
        let fam = &mut self.families[f as usize];
        // A record found ahead ([`Engine::touch_groups`]) is the one a lookup now would give:
        // nothing frees a record between the read-ahead and the deliveries.
        let (r, memoized) = match found {
            Some(r) => (r, fam.note(at.0, at.1, r)),
            None => fam.record(key, at.0, at.1, false)?,
        };
        let (slot, generation) = fam.slot(r, pos)?;
        let s = self.rts[ri].slots.get(slot as usize)?.as_ref()?;
        if s.group.generation != generation {
            return None;
        }
        debug_assert!(
            key_at(&self.rts, ri as u32, slot) == Some(key),
            "a family record named another group"
        );
        if memoized {
            self.counters.family_lookups_saved += 1;
        }
        Some(slot)
    }

    /// The slot [`Engine::touch_groups`] found in state `ri`'s own group map, if it still
    /// holds that group (its generation unchanged).
    fn own_slot(&self, ri: usize, key: &GroupKey, slot: u32, generation: u32) -> Option<u32> {
        let s = self.rts[ri].slots.get(slot as usize)?.as_ref()?;
        if s.group.generation != generation {
            return None;
        }
        debug_assert!(
            key_at(&self.rts, ri as u32, slot) == Some(key),
            "a slot found ahead held another group"
        );
        Some(slot)
    }

    /// Records state `ri`'s slot for `key` in its family.
    fn family_record(&mut self, ri: usize, key: &GroupKey, at: (u64, Option<u32>), slot: u32) {
        if let Some((f, pos)) = self.family_of[ri] {
            let generation = self.rts[ri]
                .slots
                .get(slot as usize)
                .and_then(Option::as_ref)
                .map_or(0, |s| s.group.generation);
            let fam = &mut self.families[f as usize];
            if let Some((r, _)) = fam.record(key, at.0, at.1, true) {
                fam.set(r, pos, slot, generation);
            }
        }
    }

    /// Frees state `ri`'s group `key` in `slot` (forgotten by time or by hand).
    fn free_slot(&mut self, ri: usize, slot: u32, key: &GroupKey) {
        let rt = &mut self.rts[ri];
        rt.slots[slot as usize] = None;
        rt.cold[slot as usize] = None;
        rt.groups.remove(key);
        rt.free.push(slot);
        if let Some((f, pos)) = self.family_of[ri] {
            self.families[f as usize].release(key, pos);
        }
    }

    fn late(&mut self, h: &Hit, ev: &Arc<Event>, w: Timestamp, out: &mut Vec<Alert>) {
        let ri = h.rule as usize;
        // Once per rule (each rule of a shared state was late for it), as unshared.
        self.counters.late += self.rts[ri].facts.members.len() as u64;
        self.rts[ri].counters.late += 1;
        let lateness = self.rts[ri].facts.rule.allowed_lateness;
        if ev.time < w.sub(lateness) {
            return;
        }
        let Some(&slot) = self.rts[ri].groups.get(&h.key) else {
            return;
        };
        let moved = self.rts[ri].with_group(slot, self.outage_until, |ctx, s, _, counters| {
            s.group
                .on_late(ctx, &h.key, ev.time, h.mask, ev, w, counters, out)
        });
        if moved == Some(true) {
            self.arm(ri, slot);
        }
    }

    /// The Filter stage: which (rule, group, definitions) this event matches.
    fn evaluate(&mut self, ev: &Arc<Event>, hits: &mut Vec<Hit>) {
        let mut cands = std::mem::take(&mut self.cands);
        cands.clear();
        match self.ahead_pos.take() {
            Some((from, to)) => cands.extend_from_slice(&self.ahead_cands[from..to]),
            None => self.filter.candidates_hinted(ev, &mut cands),
        }
        let mut caps = Captures::new();
        // Which hit each state got from this event: stamped, so nothing is cleared per event.
        self.hit_stamp = self.hit_stamp.wrapping_add(1);
        let stamp = self.hit_stamp;
        let mut hit_of = std::mem::take(&mut self.hit_of);
        let mut several_keys = false;
        // The event's distinct group keys (see `ev_keys`), and the last one with the number of
        // the field mapping it was read through.
        let mut keys = std::mem::take(&mut self.ev_keys);
        keys.clear();
        self.direct_preds.clear();
        let mut last_key: Option<(u32, u32)> = None;
        self.counters.predicate_evals += cands.len() as u64;
        for &(ci, slot_hint) in &cands {
            if self.plain[ci as usize] {
                self.direct_preds.push((ci, slot_hint));
                continue;
            }
            caps.clear();
            if !self.filter.eval(ci, ev, &mut caps) {
                continue;
            }
            // One enriched event (with the captures) per predicate, shared by its consumers.
            let mut enriched: Option<Arc<Event>> = None;
            for &Consumer {
                state: rt,
                def: def_idx,
                rule: rule_idx,
                mapping,
            } in &self.via_hits[ci as usize]
            {
                let bit = 1u64 << def_idx;
                let cached = match last_key {
                    Some((m, kid)) if caps.is_empty() && m == mapping => Some(kid),
                    _ => None,
                };
                let (key, known) = match cached {
                    Some(kid) => (keys[kid as usize].clone(), Some(kid)),
                    None => {
                        let def = &self.ruleset.rules[rule_idx as usize].events[def_idx as usize];
                        let Some(key) = group_key(def, ev, &caps) else {
                            // For each rule of the state, as unshared counts them.
                            self.counters.keyless +=
                                self.rts[rt as usize].facts.members.len() as u64;
                            continue;
                        };
                        let kid = keys.iter().position(|k| *k == key).map(|i| i as u32);
                        (key, kid)
                    }
                };
                if !self.owns(rt as usize, &key) {
                    // Another engine (shard) owns this group.
                    continue;
                }
                let kid = known.unwrap_or_else(|| {
                    keys.push(key.clone());
                    (keys.len() - 1) as u32
                });
                if cached.is_none() {
                    // Without captures the key depends only on the fields read: the next
                    // definition mapping the same fields has the same key.
                    last_key = caps.is_empty().then_some((mapping, kid));
                }
                let ev_arc = if caps.is_empty() {
                    None
                } else {
                    Some(
                        enriched
                            .get_or_insert_with(|| {
                                let mut e = (**ev).clone();
                                for (k, v) in &caps {
                                    e.set_key(k.clone(), v.clone());
                                }
                                cap_held_texts(&mut e, &self.distinct_keys);
                                Arc::new(e)
                            })
                            .clone(),
                    )
                };
                let order = (rule_idx, def_idx);
                // The state's hit from this event, if any, in one step (merging stays linear
                // when an event concerns hundreds of states); a state whose definitions map
                // the group from different fields can have hits under several keys: a scan.
                let first = hit_of[rt as usize];
                let found = if first.0 != stamp {
                    None
                } else if hits[first.1 as usize].kid == kid {
                    Some(first.1 as usize)
                } else {
                    hits.iter().position(|h| h.rule == rt && h.kid == kid)
                };
                match found {
                    Some(i) => {
                        let h = &mut hits[i];
                        h.mask |= bit;
                        h.order = h.order.min(order);
                        // The event carries the captures of the first definition (in rule
                        // order) that made any: the same in shared and unshared engines,
                        // whatever order the predicates are evaluated in.
                        if ev_arc.is_some() && (h.ev.is_none() || order < h.ev_order) {
                            h.ev = ev_arc;
                            h.ev_order = order;
                        }
                    }
                    None => {
                        if first.0 != stamp {
                            hit_of[rt as usize] = (stamp, hits.len() as u32);
                        } else {
                            several_keys = true;
                        }
                        let hint = self.hintable[ci as usize].map(|_| (ci, slot_hint));
                        hits.push(Hit {
                            rule: rt,
                            key,
                            kid,
                            mask: bit,
                            ev: ev_arc,
                            ev_order: order,
                            order,
                            hint,
                            found: None,
                        });
                    }
                }
            }
            if !self.compact.uses[ci as usize].is_empty() {
                self.direct_preds.push((ci, slot_hint));
            }
        }
        // What depends on the order of deliveries is a state's own alerts at one instant and
        // which of its groups is made first (the caller orders the rest by time and rule
        // order, timers by deadline, rule and key, the reorder buffer totally by time, event,
        // state, first definition and key): with one hit per state any order gives the same
        // output. A state with hits under several keys gets them in (rule, definition) order,
        // whatever the predicate order, in shared and unshared engines.
        if several_keys {
            let mut perm = std::mem::take(&mut self.hit_perm);
            sort_hits(hits, &mut perm);
            self.hit_perm = perm;
        }
        self.cands = cands;
        self.hit_of = hit_of;
        self.ev_keys = keys;
    }

    /// Delivers the event to the compact states the predicates it satisfied feed (see
    /// [`compact`]), each once, with the mask of every definition of it the event holds: what
    /// a [`Hit`] would say, for states that need none of the rest, with the key and its record
    /// found once per scope. The group is made, found and fed as [`Engine::deliver`] does
    /// (the same budget, the NFA's own transition). Deliveries come after the timers before
    /// the event's arrival like every delivery; deliveries to different states commute
    /// (budgets, groups and alerts are per state, and alerts are put in order afterwards), so
    /// going before the hits changes nothing. Returns whether any was made.
    fn deliver_compact(
        &mut self,
        ev: &Arc<Event>,
        t: Timestamp,
        seq: u64,
        out: &mut Vec<Alert>,
    ) -> bool {
        let Engine {
            rts,
            compact,
            lanes,
            outage_until,
            counters,
            direct_preds,
            direct_feeds,
            pred_seen,
            hit_of,
            hit_stamp,
            ruleset,
            cfg,
            idle_freed,
            ..
        } = self;
        let stamp = *hit_stamp;
        for &(ci, _) in direct_preds.iter() {
            pred_seen[ci as usize] = stamp;
        }
        // (The slot stamped for every event, see `compact::Use::other`.)
        if let Some(always) = pred_seen.last_mut() {
            *always = stamp;
        }
        // (Slices taken once: the loop keeps their bounds, not the vectors' fields, at hand.)
        let rts = rts.as_mut_slice();
        let pred_seen = pred_seen.as_slice();
        let direct_feeds = direct_feeds.as_slice();
        let hit_of = hit_of.as_mut_slice();
        let outage_until = *outage_until;
        let no_caps = Captures::new();
        let mut any = false;
        let mut armed = false;
        // (Counted here and added once: a store per delivery less.)
        let mut saved = 0u64;
        let partition = cfg.partition;
        // (Filing timers leaves the lane's time as it is.)
        let lane_now = lanes[0].now;
        let uses_of = compact.uses.as_slice();
        let preds = direct_preds.as_slice();
        // (With one scope, every use is in it: no test in the loop below.)
        let one_scope = compact.scopes.len() == 1;
        // The predicates' uses, one after another: `next` is the next predicate's.
        let mut next = 0;
        let mut uses = [].iter();
        loop {
            let Some(u) = uses.next() else {
                let Some(more) = next_uses(preds, uses_of, &mut next) else {
                    break;
                };
                uses = more;
                continue;
            };
            let ri = u.state as usize;
            let (twice, mask) = reach(u, stamp, pred_seen, direct_feeds);
            if twice && hit_of[ri].0 == stamp {
                continue;
            }
            let scope = &mut compact.scopes[u.scope as usize];
            let (key, rec, again) = scope.probe(stamp, || {
                let def = &ruleset.rules[u.rule as usize].events[u.def as usize];
                group_key(def, ev, &no_caps)
            });
            let rt = &mut rts[ri];
            let Some(key) = key else {
                // For each rule of the state, as unshared counts them.
                counters.keyless += rt.facts.members.len() as u64;
                continue;
            };
            if let Some(p) = partition
                && !rt.owned_by(p, key)
            {
                continue;
            }
            if twice {
                hit_of[ri] = (stamp, 0);
            }
            any = true;
            // Most deliveries find their group: fed at once.
            if let Some(r) = rec
                && let Some(record) = scope.rec(r)
                && let Some((key, cell)) = record.with(u.pos)
            {
                if again {
                    // Found in the record another state's delivery of this event found.
                    saved += 1;
                }
                if let Some(e) = feed(
                    &rt.facts,
                    outage_until,
                    key,
                    cell,
                    t,
                    mask,
                    ev,
                    seq,
                    u.state,
                    lane_now,
                    &mut rt.counters,
                    out,
                ) {
                    lanes[0].wheel.insert(e);
                    armed = true;
                }
                // The uses after it in its scope whose groups the record holds, this
                // predicate's and then the next ones' (in the order of the loop above), as
                // above with the key and record found (no probe): up to one whose group is to
                // be made or one of another scope, which the steps above take (nothing done
                // for it here). (With a partition, each use goes the first way, which tests
                // its ownership; so does each in a sparse record, found again through the
                // probe's record.)
                if partition.is_some() {
                    continue;
                }
                let Some(mut dense) = record.dense() else {
                    continue;
                };
                let key = dense.key;
                loop {
                    // (An event satisfying several predicates finds its record once, not once
                    // per predicate.)
                    let Some(v) = uses.as_slice().first() else {
                        let Some(more) = next_uses(preds, uses_of, &mut next) else {
                            break;
                        };
                        uses = more;
                        continue;
                    };
                    if !one_scope && v.scope != u.scope {
                        break;
                    }
                    let vi = v.state as usize;
                    let (twice, mask) = reach(v, stamp, pred_seen, direct_feeds);
                    if twice && hit_of[vi].0 == stamp {
                        uses.next();
                        continue;
                    }
                    let rt = &mut rts[vi];
                    let Some(cell) = dense.cell(v.pos) else {
                        break;
                    };
                    uses.next();
                    if twice {
                        hit_of[vi] = (stamp, 0);
                    }
                    saved += 1;
                    if let Some(e) = feed(
                        &rt.facts,
                        outage_until,
                        key,
                        cell,
                        t,
                        mask,
                        ev,
                        seq,
                        v.state,
                        lane_now,
                        &mut rt.counters,
                        out,
                    ) {
                        lanes[0].wheel.insert(e);
                        armed = true;
                    }
                }
                continue;
            }
            // As `deliver` and `slot_for` make a group: only for an event that can act on
            // it, and within the state's budget, which a full budget first makes room in by
            // letting go a group that holds nothing any more (found as the NFA's slots
            // find it).
            if mask & rt.opens == 0 {
                rt.counters.matched += 1;
                continue;
            }
            let ctx = RuleCtx {
                facts: &rt.facts,
                outage_until,
            };
            if scope.counts[u.pos as usize] >= rt.max_groups
                && let Some(idle) =
                    scope.idle(u.pos, IDLE_SCAN, |g| !g.expected && g.idle_at(&ctx, t))
            {
                rt.counters.forgotten += 1;
                *idle_freed += 1;
                scope.remove(idle, u.pos);
                scope.release_if_empty(idle);
            }
            if scope.counts[u.pos as usize] >= rt.max_groups {
                rt.counters.groups_rejected += 1;
                continue;
            }
            let Some(r) = scope.probed_record() else {
                continue;
            };
            scope.insert(
                r,
                u.pos,
                Group::new(&ctx, false, t),
                &mut lanes[0].generation_bump,
            );
            let Some(record) = scope.rec(r) else {
                continue;
            };
            let Some((key, cell)) = record.with(u.pos) else {
                continue;
            };
            if let Some(e) = feed(
                &rt.facts,
                outage_until,
                key,
                cell,
                t,
                mask,
                ev,
                seq,
                u.state,
                lane_now,
                &mut rt.counters,
                out,
            ) {
                lanes[0].wheel.insert(e);
                armed = true;
            }
        }
        counters.family_lookups_saved += saved;
        if armed {
            lanes[0].skip_until = Timestamp::MIN;
        }
        any
    }

    /// State `ri`'s group `key`, in its slots or its compact records.
    fn group_of(&self, ri: usize, key: &GroupKey) -> Option<&Group> {
        if let Some((s, r, pos)) = self.compact.locate(ri, key) {
            return self.compact.scopes[s as usize].rec_ref(r)?.get(pos);
        }
        let slot = *self.rts[ri].groups.get(key)?;
        Some(&slot_at(&self.rts, ri as u32, slot)?.group)
    }

    /// Moves the groups of compact states out of their slots (where a restore, a reload or
    /// the start of monitoring made them) into their scopes' records, each keeping its slot's
    /// number, generation and timer deadlines, so the entries its slot filed in the wheel are
    /// its own: afterwards a compact state holds no group in its slots.
    fn absorb(&mut self) {
        let Engine { rts, compact, .. } = self;
        for (ri, rt) in rts.iter_mut().enumerate() {
            let Some((s, pos)) = compact.of[ri] else {
                continue;
            };
            // The slots, their keys and their map go with their room (a million expected
            // groups made there at the start took about 140 MB of it, kept for nothing: a
            // compact state's groups live in its records).
            let slots = std::mem::take(&mut rt.slots);
            let colds = std::mem::take(&mut rt.cold);
            rt.groups = HashMap::default();
            if slots.is_empty() {
                continue;
            }
            let scope = &mut compact.scopes[s as usize];
            // The groups keep their slots' numbers (and timer deadlines; the free numbers theirs), so that the
            // state goes on as it would in its slots.
            let mut at: Vec<Option<u32>> = Vec::with_capacity(slots.len());
            for (slot, cold) in slots.into_iter().zip(colds) {
                let (Some(slot), Some(cold)) = (slot, cold) else {
                    at.push(None);
                    continue;
                };
                let r = scope.record_for(&cold.key);
                let n = at.len() as u32;
                at.push(Some(r));
                // Its number, generation and deadlines stay its slot's: the entries its slot
                // filed in the wheel are its own.
                scope.adopt(r, pos, n, slot.group, (slot.armed_at, cold.parked));
            }
            scope.number(pos, at, std::mem::take(&mut rt.free), rt.idle_scan);
        }
    }

    /// The rule state that runs the rule named `rule` (its own, or one it shares), if any.
    fn state_named(&self, rule: &str) -> Option<usize> {
        self.rts
            .iter()
            .position(|r| r.facts.members.iter().any(|m| m.rule.name == rule))
    }

    /// The key of rule `rule`'s group written as `text` (its values in `group_by` order,
    /// comma-separated, as in `expect`), if the rule holds such a group: how an operator
    /// names a group by hand without knowing its values' types.
    pub fn find_group(&self, rule: &str, text: &str) -> Option<Vec<Value>> {
        let ri = self.state_named(rule)?;
        let rt = &self.rts[ri];
        let want = group_key_texts(&rt.facts.rule.group_by, text)?;
        (rt.groups.keys())
            .chain(self.compact.groups_of(ri).map(|(k, _)| k))
            .find(|k| {
                k.len() == want.len() && k.iter().zip(&want).all(|(v, w)| v.to_string() == *w)
            })
            .map(|k| k.to_vec())
    }

    /// Whether rule `rule`'s group `key` is watched from the start (listed in `expect`, or an
    /// ungrouped absence's one group), which, once forgotten, only a reload or a restart
    /// brings back;
    /// `None`: no such group.
    pub fn group_expected(&self, rule: &str, key: &[Value]) -> Option<bool> {
        let ri = self.state_named(rule)?;
        Some(self.group_of(ri, &GroupKey::new(key))?.expected)
    }

    /// The `group_by` of rule `rule` and the names of every rule that shares its groups (the
    /// same meaning, itself included), if this engine runs it: the rules whose alerts a
    /// group forgotten by hand concerns.
    pub fn group_sharers(&self, rule: &str) -> Option<(Vec<String>, Vec<String>)> {
        let rt = &self.rts[self.state_named(rule)?];
        let names = rt
            .facts
            .members
            .iter()
            .map(|m| m.rule.name.to_string())
            .collect();
        Some((rt.facts.rule.group_by.clone(), names))
    }

    /// The groups of rule `rule` this engine holds, in key order (at most `limit`), and how
    /// many it holds; `None` when it runs no rule of that name. What an operator reads to
    /// name a group that raises no alert (`cepheus groups list`, then `groups forget`).
    pub fn list_groups(&self, rule: &str, limit: usize) -> Option<(usize, Vec<GroupView>)> {
        let ri = self.state_named(rule)?;
        let rt = &self.rts[ri];
        let mut keys: Vec<(&GroupKey, &Group)> = (rt.groups.iter())
            .filter_map(|(k, &s)| Some((k, &slot_at(&self.rts, ri as u32, s)?.group)))
            .chain(self.compact.groups_of(ri))
            .collect();
        let held = keys.len();
        // Only the first `limit` sorted (a rule may hold a million groups).
        if limit < keys.len() {
            keys.select_nth_unstable_by(limit, |a, b| a.0.cmp(b.0));
            keys.truncate(limit);
        }
        keys.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let views = keys
            .iter()
            .take(limit)
            .map(|&(k, g)| GroupView {
                key: k.to_vec(),
                expected: g.expected,
                firing: g.firing(),
                active_at: g.last_activity,
            })
            .collect();
        Some((held, views))
    }

    /// Resolves every open alert with `reason` (appended to `out`), as a reload resolves those
    /// of a removed rule: for an engine about to be dropped and started afresh (the agent
    /// does this after a panic, with reason `engine_restarted`), so no alert is left firing
    /// that nothing will ever resolve. The engine's state is otherwise left as it is.
    pub fn resolve_all(&mut self, reason: Reason, out: &mut Vec<Alert>) {
        let start = out.len();
        let outage_until = self.outage_until;
        let times: Vec<Timestamp> = (0..self.lanes.len()).map(|li| self.lane_time(li)).collect();
        let compact = self.compact.by_state(self.rts.len());
        for (rt, groups) in self.rts.iter_mut().zip(compact) {
            let now = times[rt.lane];
            let who = rt.facts.members.to_vec();
            rt.members_change(
                groups.into_iter(),
                who,
                now,
                AlertState::Resolved,
                Some(reason),
                outage_until,
                out,
            );
        }
        self.order_alerts(out, start);
    }

    /// The ids of the alerts the engine holds open (those [`Engine::resolve_all`] would
    /// resolve), the engine left as it was: no copy of it is made to list them.
    pub fn open_alert_ids(&mut self) -> Vec<u64> {
        // (`resolve_all` changes no group, only the counters of the alerts it makes.)
        let counters: Vec<RuleCounters> = self.rts.iter().map(|rt| rt.counters.clone()).collect();
        let mut out = Vec::new();
        self.resolve_all(Reason::StateLost, &mut out);
        for (rt, c) in self.rts.iter_mut().zip(counters) {
            rt.counters = c;
        }
        out.iter().map(|a| a.id().0).collect()
    }

    /// Retires a group by hand (`cepheus groups forget RULE KEY`): its open alert, if any, is
    /// resolved with reason `forgotten` (appended to `out`); returns whether it existed. An
    /// expected group comes back at the next reload that still lists it.
    pub fn forget_group(&mut self, rule: &str, key: &[Value], out: &mut Vec<Alert>) -> bool {
        let Some(ri) = self.state_named(rule) else {
            return false;
        };
        let key = GroupKey::new(key);
        let at = self.lane_time(self.rts[ri].lane);
        let start = out.len();
        if let Some((s, r, pos)) = self.compact.locate(ri, &key) {
            let rt = &mut self.rts[ri];
            let ctx = RuleCtx {
                facts: &rt.facts,
                outage_until: self.outage_until,
            };
            let scope = &mut self.compact.scopes[s as usize];
            if let Some(mut g) = scope.remove(r, pos) {
                g.forget(&ctx, &key, at, &mut rt.counters, out);
            }
            // (Its timer entries are stale: its number no longer names it.)
            scope.release_if_empty(r);
            self.order_alerts(out, start);
            return true;
        }
        let Some(&slot) = self.rts[ri].groups.get(&key) else {
            return false;
        };
        self.rts[ri].with_group(slot, self.outage_until, |ctx, s, _, counters| {
            s.group.forget(ctx, &key, at, counters, out)
        });
        self.free_slot(ri, slot, &key);
        self.order_alerts(out, start);
        true
    }

    /// A snapshot of all state, from which [`Engine::restore`] continues exactly.
    pub fn checkpoint(&self) -> Checkpoint {
        let compact = self.compact.by_state(self.rts.len());
        Checkpoint {
            version: CHECKPOINT_VERSION,
            clock: self.clock,
            min_event_any: self.min_event_any,
            max_event_any: self.max_event_any,
            sweep_at: Some(self.sweep_at),
            next_seq: self.next_seq,
            counters: self.counters.clone(),
            lanes: self
                .lanes
                .iter()
                .map(|l| LaneCheckpoint {
                    event_time: l.mode == TimeMode::Event,
                    delay: l.delay,
                    now: l.now,
                    max_event: l.max_event,
                    last_arrival: l.last_arrival,
                    mark: l.mark,
                    first_arrival: l.first_arrival,
                    min_event: l.min_event,
                    started: l.started,
                    sources: l.sources.clone(),
                    keys: Some(l.keys.clone()),
                    pending: l
                        .pending
                        .iter()
                        .map(|Reverse(p)| PendingCheckpoint {
                            rule: self.rts[p.rule as usize].canonical.clone(),
                            rule_name: self.rts[p.rule as usize].facts.rule.name.clone(),
                            time: p.time,
                            seq: p.seq,
                            key: p.key.clone(),
                            mask: p.mask,
                            ev: p.ev.clone(),
                        })
                        .collect(),
                })
                .collect(),
            rules: self
                .rts
                .iter()
                .enumerate()
                .map(|(ri, rt)| RuleCheckpoint {
                    name: rt.facts.rule.name.clone(),
                    members: rt
                        .facts
                        .members
                        .iter()
                        .map(|m| m.rule.name.clone())
                        .collect(),
                    canonical: rt.canonical.clone(),
                    cohort: rt.cohort,
                    monitor_start: rt.monitor_start(),
                    counters: rt.counters.clone(),
                    group_by: Some(rt.facts.rule.group_by.clone()),
                    key_types: Some(key_types(&rt.facts.rule)),
                    key_nets: key_nets(&rt.facts.rule),
                    groups: {
                        let mut g: Vec<SavedGroup> = rt
                            .slots
                            .iter()
                            .zip(&rt.cold)
                            .filter_map(|(s, c)| {
                                Some(SavedGroup::new(&c.as_ref()?.key, &s.as_ref()?.group))
                            })
                            .chain(compact[ri].iter().map(|&(k, g)| SavedGroup::new(k, g)))
                            .collect();
                        g.sort_by(|a, b| a.key.cmp(&b.key));
                        g
                    },
                })
                .collect(),
        }
    }

    /// Builds an engine for `rules` that continues from `cp`. Rules whose meaning is unchanged
    /// keep their state; new or changed rules begin monitoring at the checkpoint's clock.
    /// With `outage`, absences whose deadline passed between the checkpoint and the next
    /// advance are marked `reason: "outage"` (the agent was down).
    pub fn restore(
        rules: &RuleSet,
        cfg: EngineConfig,
        cp: Checkpoint,
        outage: bool,
    ) -> Result<Engine, EngineError> {
        Engine::restore_marking(rules, cfg, cp, outage, None).map(|(mut e, _)| {
            e.absorb();
            e
        })
    }

    /// [`Engine::restore`], also naming the rules of the checkpoint whose state does not go
    /// on (removed, renamed, or changed: `rule_changed` when a rule of that name runs now,
    /// else `rule_removed`). A reload resolves their open alerts; after a restart that is the
    /// caller's to do, from the alerts it kept, since the checkpoint holds no rule to render
    /// them with.
    pub fn restore_retiring(
        rules: &RuleSet,
        cfg: EngineConfig,
        cp: Checkpoint,
        outage: bool,
    ) -> Result<(Engine, Vec<(String, Reason)>), EngineError> {
        Engine::restore_retiring_at(rules, cfg, cp, outage, None)
    }

    /// [`Engine::restore_retiring`] at a restart at `begin` (the agent's clock as it starts
    /// again): rules added or changed while it was down (of either time), and groups added to
    /// an `expect` list meanwhile, begin monitoring then, not at the checkpoint's clock (they
    /// did not run while it was down: an absence of theirs has no deadline in that time).
    pub fn restore_retiring_at(
        rules: &RuleSet,
        cfg: EngineConfig,
        cp: Checkpoint,
        outage: bool,
        begin: Option<Timestamp>,
    ) -> Result<(Engine, Vec<(String, Reason)>), EngineError> {
        let saved: Vec<Vec<String>> = cp
            .rules
            .iter()
            .map(|rc| rc.served().map(String::from).collect())
            .collect();
        let (mut e, source) = Engine::restore_marking(rules, cfg, cp, outage, begin)?;
        e.absorb();
        let running: std::collections::HashSet<&str> =
            rules.rules.iter().map(|r| r.name.as_str()).collect();
        let mut retired = Vec::new();
        for (i, names) in saved.iter().enumerate() {
            for name in names {
                let goes_on = source.iter().enumerate().any(|(ri, s)| {
                    *s == Some(i) && e.rts[ri].facts.members.iter().any(|m| &m.rule.name == name)
                });
                if !goes_on {
                    let reason = if running.contains(name.as_str()) {
                        Reason::RuleChanged
                    } else {
                        Reason::RuleRemoved
                    };
                    retired.push((name.clone(), reason));
                }
            }
        }
        Ok((e, retired))
    }

    /// [`Engine::restore`], with the saved rule state each new one took (its index in the
    /// checkpoint's `rules`), if any. Every group is left in its state's slots, compact
    /// states' too: the caller moves those to their records ([`Engine::absorb`]) once it is
    /// done with the slots.
    fn restore_marking(
        rules: &RuleSet,
        cfg: EngineConfig,
        mut cp: Checkpoint,
        outage: bool,
        begin: Option<Timestamp>,
    ) -> Result<(Engine, Vec<Option<usize>>), EngineError> {
        match cp.version {
            CHECKPOINT_VERSION => {}
            // Its rules' meanings hold their whole `expect` lists: read as this build writes
            // them (a digest), so each goes on with its state.
            2 => {
                // A loaded rule's version-2 form is known exactly (a list's text cannot be
                // told apart from the rest by reading it); a rule no longer loaded is read.
                let now: HashMap<String, String> = rules
                    .rules
                    .iter()
                    .filter(|r| !r.expect.is_empty())
                    .map(|r| (r.canonical_v2(), r.canonical()))
                    .collect();
                let upgrade = |c: &mut String| {
                    let old = std::mem::take(c);
                    *c = match now.get(&old) {
                        Some(new) => new.clone(),
                        None => Rule::canonical_of_saved(old),
                    };
                };
                for rc in &mut cp.rules {
                    upgrade(&mut rc.canonical);
                }
                for p in cp.lanes.iter_mut().flat_map(|l| l.pending.iter_mut()) {
                    upgrade(&mut p.rule);
                }
                cp.version = CHECKPOINT_VERSION;
            }
            v => {
                return Err(EngineError::Checkpoint(format!(
                    "version {v} (this build reads {CHECKPOINT_VERSION} and 2)"
                )));
            }
        }
        share_events(&mut cp);
        // A rule goes on in its cohort when the checkpoint has it under its name with its
        // meaning (its `expect` list aside); any other (added, renamed, changed) begins now, in
        // a cohort of its own, so it shares no state with rules that began before it.
        // The saved states that served each rule name.
        let mut saved_by_member: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, rc) in cp.rules.iter().enumerate() {
            for m in rc.served() {
                saved_by_member.entry(m.to_string()).or_default().push(i);
            }
        }
        let fresh = cp
            .rules
            .iter()
            .map(|rc| rc.cohort)
            .max()
            .map_or(0, |m| m + 1);
        // The saved state a rule goes on from: one that served it with its meaning, else with
        // its meaning but for its `expect` list (regrouped below).
        let goes_on_from = |rule: &Rule| -> Option<usize> {
            let canonical = rule.canonical();
            let served = saved_by_member.get(rule.name.as_str());
            let find = |ok: &dyn Fn(&RuleCheckpoint) -> bool| {
                served
                    .into_iter()
                    .flatten()
                    .copied()
                    .find(|&i| ok(&cp.rules[i]))
            };
            find(&|rc| rc.canonical == canonical).or_else(|| {
                find(&|rc| Rule::canonicals_differ_only_in_expect(&rc.canonical, &canonical))
            })
        };
        let lineage_of = |rule: &Rule| -> Lineage {
            let from = goes_on_from(rule);
            Lineage {
                cohort: from.map_or(fresh, |i| cp.rules[i].cohort),
                from,
                // (A rule going on from a saved state is no more changed than its state.)
                changed: from.is_none() && saved_by_member.contains_key(rule.name.as_str()),
            }
        };
        let mut e = Engine::with_cohorts(rules, cfg, &lineage_of)?;
        e.next_seq = cp.next_seq;
        e.min_event_any = cp.min_event_any;
        e.max_event_any = cp.max_event_any;
        e.sweep_at = cp.sweep_at.unwrap_or(Timestamp::MIN);
        e.counters = cp.counters;
        let Some(clock) = cp.clock else {
            let none = vec![None; e.rts.len()];
            return Ok((e, none));
        };
        e.clock = Some(clock);
        for (li, lane) in e.lanes.iter_mut().enumerate() {
            let like = |l: &&LaneCheckpoint| {
                (l.event_time == (lane.mode == TimeMode::Event))
                    && (li == 0 || l.delay == lane.delay)
            };
            let saved = cp
                .lanes
                .iter()
                .filter(like)
                .find(|l| {
                    l.sources == lane.sources && l.keys.as_ref().is_none_or(|k| *k == lane.keys)
                })
                .or_else(|| cp.lanes.iter().filter(like).find(|l| l.sources.is_empty()));
            // A lane new to the rules (a reload that adds an event-time rule over other
            // sources) begins from the clock, as a running agent's lanes do.
            let now = saved.map_or(
                match lane.mode {
                    TimeMode::Processing => clock,
                    TimeMode::Event => clock.sub(lane.delay),
                },
                |s| s.now,
            );
            lane.now = now;
            lane.wheel = Wheel::new(now);
            if saved.is_none() && lane.mode == TimeMode::Event {
                lane.last_arrival = Some(clock);
                lane.first_arrival = Some(clock);
            }
            if let Some(s) = saved {
                lane.max_event = s.max_event;
                lane.last_arrival = s.last_arrival;
                lane.mark = s.mark;
                lane.first_arrival = s.first_arrival;
                lane.min_event = s.min_event;
                lane.started = s.started;
            } else {
                lane.started = true;
            }
        }
        if outage {
            e.outage_pending = true;
        }
        // Each new rule state takes the saved state its rules go on from (the same for all of
        // them: they share it only then), regrouped when its `expect` list alone changed. A
        // state of a fresh cohort takes none. Several new states may take copies of one saved
        // state: rules that shared it and now go apart each keep it, as they would unshared.
        let source: Vec<Option<usize>> = e
            .rts
            .iter()
            .map(|rt| goes_on_from(&rt.facts.rule))
            .collect();
        let mut saved = cp.rules;
        let mut targets: Vec<Vec<usize>> = vec![Vec::new(); saved.len()];
        for (ri, s) in source.iter().enumerate() {
            if let Some(i) = s {
                targets[*i].push(ri);
            }
        }
        let mut saved_to: HashMap<(String, String), Vec<usize>> = HashMap::new();
        for (i, rc) in saved.iter_mut().enumerate() {
            if targets[i].is_empty() {
                continue;
            }
            saved_to.insert((rc.canonical.clone(), rc.name.clone()), targets[i].clone());
            let last = targets[i].len() - 1;
            for (n, &ri) in targets[i].iter().enumerate() {
                e.rts[ri].facts.monitor_start = rc.monitor_start.unwrap_or(Timestamp::MIN);
                e.rts[ri].counters = rc.counters.clone();
                for g in &mut rc.groups {
                    let rt = &mut e.rts[ri];
                    // A checkpoint this engine wrote lists each group once; an edited or
                    // damaged one may not, and a second slot under one key would be forgotten
                    // through the first's map entry. The first listed is kept.
                    if rt.groups.contains_key(&g.key) {
                        continue;
                    }
                    // Copied (a copy holds no spare room, as what was read may), and the last
                    // state to take a saved group lets its state go at once: a restart would
                    // otherwise hold every group twice, the checkpoint's and the engine's, at
                    // its peak. (What is left, its key and times, is what
                    // `carry_discovered` reads.)
                    let group = g.clone().into_parts().1;
                    if n == last {
                        g.state = state::GroupState::Linear(state::LinearState::default());
                    }
                    let key = g.key.clone();
                    rt.slots.push(Some(Slot {
                        group,
                        armed_at: Timestamp::MAX,
                    }));
                    let idx = (rt.slots.len() - 1) as u32;
                    rt.groups.insert(key.clone(), idx);
                    rt.cold.push(Some(Cold {
                        key,
                        parked: Timestamp::MAX,
                    }));
                }
            }
        }
        // A saved state's pending events go where the state went: those of a state no new
        // state took (its rules removed, renamed or changed) are freed with it, so a rule that
        // begins now sees none of them (and one event is never given twice to one state).
        for lc in &cp.lanes {
            for p in &lc.pending {
                let Some(to) = saved_to.get(&(p.rule.clone(), p.rule_name.clone())) else {
                    continue;
                };
                for &ri in to {
                    let lane = e.rts[ri].lane;
                    e.lanes[lane].pending.push(Reverse(Pending {
                        time: p.time,
                        seq: p.seq,
                        rule: ri as u32,
                        key: p.key.clone(),
                        mask: p.mask,
                        ev: p.ev.clone(),
                    }));
                }
            }
        }
        // Every state that goes on has every group its `expect` lists now (a changed list's,
        // and one forgotten by hand, which comes back watched from the checkpoint's clock:
        // the rule files were read again, as at a reload).
        // (At a restart, from when the agent runs again: see `restore_retiring_at`.)
        let begin = begin.map_or(clock, |b| b.max(clock));
        for (ri, s) in source.iter().enumerate() {
            if s.is_some() {
                e.regroup(ri, begin);
            }
        }
        for ri in 0..e.rts.len() {
            if e.rts[ri].monitor_start().is_none() && e.lanes[e.rts[ri].lane].started {
                // (Event-time rules too: a running agent's event-time lanes follow its clock
                // less their `max_delay`, and a rule begun at a clock `c` is watched from `c`,
                // as at start-up; from the saved clock, an absence added while the agent was
                // down fired as an outage at the restart.)
                e.start_rule(ri, begin);
            }
            for slot in 0..e.rts[ri].slots.len() as u32 {
                e.arm(ri, slot);
            }
        }
        e.carry_discovered(&source, &saved, &saved_by_member);
        Ok((e, source))
    }

    /// A changed absence rule keeps the groups it had discovered, watched from its new start
    /// as expected groups are: an edit of a threshold (at a reload, or while the agent was
    /// down) must not drop from watch a host that is already silent. The groups of a new
    /// meaning are those the rules now having it had discovered (in shared and unshared
    /// engines alike), when they grouped by the same names with values of the same types;
    /// they stay discovered (forgotten after `forget_after` of silence), most recently active
    /// first while `max_groups` has room. `source`: the saved state each state took, if any.
    fn carry_discovered(
        &mut self,
        source: &[Option<usize>],
        saved: &[RuleCheckpoint],
        saved_by_member: &HashMap<String, Vec<usize>>,
    ) {
        let mut by_meaning: HashMap<(&str, u64), Vec<&str>> = HashMap::new();
        for rt in &self.rts {
            by_meaning
                .entry((rt.canonical.as_str(), rt.cohort))
                .or_default()
                .extend(rt.facts.members.iter().map(|m| m.rule.name.as_str()));
        }
        // (new state, its start, (last activity, key) of the groups to carry)
        type Carry = (usize, Timestamp, Vec<(Timestamp, GroupKey)>);
        let mut carry: Vec<Carry> = Vec::new();
        for (ri, s) in source.iter().enumerate() {
            let rt = &self.rts[ri];
            let (None, Some(start), Plan::Absence { .. }) =
                (s, rt.monitor_start(), &*rt.facts.plan)
            else {
                continue;
            };
            // A rule added now takes nothing from before it (its state holds no changed rule:
            // they have another lineage).
            if !rt
                .facts
                .members
                .iter()
                .any(|m| saved_by_member.contains_key(m.rule.name.as_str()))
            {
                continue;
            }
            let types = key_types(&rt.facts.rule);
            let nets = key_nets(&rt.facts.rule);
            let mut olds: Vec<usize> = by_meaning
                .get(&(rt.canonical.as_str(), rt.cohort))
                .into_iter()
                .flatten()
                .filter_map(|n| saved_by_member.get(*n))
                .flatten()
                .copied()
                .filter(|&i| {
                    let old = &saved[i];
                    old.group_by.as_ref() == Some(&rt.facts.rule.group_by)
                        && old.key_types.as_ref() == Some(&types)
                        && old.key_nets == nets
                })
                .collect();
            olds.sort_unstable();
            olds.dedup();
            let mut keys: Vec<(Timestamp, GroupKey)> = olds
                .iter()
                .flat_map(|&i| saved[i].groups.iter())
                .filter(|g| !g.expected)
                .map(|g| (g.last_activity, g.key.clone()))
                .collect();
            keys.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            carry.push((ri, start, keys));
        }
        for (ri, start, keys) in carry {
            let mut seen: std::collections::HashSet<GroupKey> = Default::default();
            for (_, key) in keys {
                if self.rts[ri].groups.len() as u64 >= self.rts[ri].max_groups {
                    break;
                }
                if !seen.insert(key.clone())
                    || self.rts[ri].groups.contains_key(&key)
                    || !self.owns(ri, &key)
                {
                    continue;
                }
                if let Some(slot) = self.slot_for(ri, &key, false, start) {
                    // (A count's group, while fewer than n came, is watched from the rule's
                    // start, not from its next event: it was watched before.)
                    let min = self.rts[ri].facts.plan.absence_min();
                    if min > 1
                        && let Some(Some(s)) = self.rts[ri].slots.get_mut(slot as usize)
                    {
                        s.group.watch_from(start, min);
                    }
                    self.arm(ri, slot);
                }
            }
        }
    }

    /// A state restored or kept at a reload: its groups are expected exactly when its rule's
    /// `expect` list names them (one no longer listed is a discovered group from now on,
    /// forgotten after `forget_after` of silence), and a listed group it lacks (newly
    /// listed, or forgotten by hand) exists from `now` (an event-time rule's lane time), its
    /// absence timed from then.
    fn regroup(&mut self, ri: usize, now: Timestamp) {
        // An event-time rule's groups are watched from its lane's time, not the arrival clock
        // (a review found a host forgotten by hand watched again a whole lag late).
        let lane = self.rts[ri].lane;
        let now = if self.lanes[lane].mode == TimeMode::Event {
            self.lane_time(lane)
        } else {
            now
        };
        let expect: Vec<GroupKey> = self
            .expected_keys(ri)
            .iter()
            .map(|k| GroupKey::new(k))
            .collect();
        let rt = &mut self.rts[ri];
        let forget_after = rt.facts.forget_after;
        for (s, c) in rt.slots.iter_mut().zip(&rt.cold) {
            if let (Some(s), Some(c)) = (s.as_mut(), c.as_ref()) {
                let was = s.group.expected;
                s.group.expected = expect.contains(&c.key);
                if was && !s.group.expected {
                    s.group.last_activity = if !s.group.heard {
                        // Listed, never heard from, listed no more (a typo put right): it was
                        // only ever the list's, so it is forgotten now, its open alert
                        // resolved `forgotten` (it stayed firing for `forget_after`).
                        now.sub(forget_after)
                    } else {
                        // Discovered from now: its silence counts from the reload, so it is
                        // not forgotten (and its alert resolved) at a time already past.
                        s.group.last_activity.max(now)
                    };
                }
            }
        }
        // An event-time lane that has not begun makes the expected groups itself, when the
        // watermark reaches the earliest event time (as without a reload): none now.
        if !self.lanes[self.rts[ri].lane].started {
            return;
        }
        for key in expect {
            if self.rts[ri].groups.contains_key(&key) || !self.owns(ri, &key) {
                continue;
            }
            if let Some(slot) = self.slot_for(ri, &key, true, now) {
                let min = self.rts[ri].facts.plan.absence_min();
                if let Some(Some(s)) = self.rts[ri].slots.get_mut(slot as usize) {
                    s.group.watch_from(now, min);
                }
                self.arm(ri, slot);
            }
        }
    }

    /// Swaps in a new rule set; state of rules whose meaning did not change is kept (and of
    /// rules whose `expect` list alone changed, see [`Engine::regroup`]), and new or changed
    /// rules begin monitoring now.
    ///
    /// The open alerts of a rule state that does not survive are resolved (into `out`), with
    /// `reason: "rule_changed"` when a rule it served is still in the set, else
    /// `"rule_removed"`: an alert is never left firing for a rule that no longer watches it.
    /// Returns those rules and reasons, so that the caller can resolve the alerts it kept of
    /// them that no state held (a match's, which fires once).
    pub fn reload(
        &mut self,
        rules: &RuleSet,
        out: &mut Vec<Alert>,
    ) -> Result<Vec<(String, Reason)>, EngineError> {
        let cp = self.checkpoint();
        let (mut next, source) = Engine::restore_marking(rules, self.cfg.clone(), cp, false, None)?;
        next.outage_until = self.outage_until;
        next.outage_pending = self.outage_pending;
        let start = out.len();
        let names: std::collections::HashSet<&str> =
            rules.rules.iter().map(|r| r.name.as_str()).collect();
        // Rules whose state goes on (in a new state taken from an old one), by old state.
        let mut carried: Vec<std::collections::HashSet<String>> =
            vec![Default::default(); self.rts.len()];
        for (ri, s) in source.iter().enumerate() {
            if let Some(i) = s
                && let Some(c) = carried.get_mut(*i)
            {
                c.extend(
                    next.rts[ri]
                        .facts
                        .members
                        .iter()
                        .map(|m| m.rule.name.clone()),
                );
            }
        }
        let compact = self.compact.by_state(self.rts.len());
        // An old state's rules that no longer run it: their open alerts are resolved.
        let mut retired: Vec<(String, Reason)> = Vec::new();
        for (i, carried) in carried.iter().enumerate() {
            let now = self.lane_time(self.rts[i].lane);
            for (reason, changed) in [(Reason::RuleChanged, true), (Reason::RuleRemoved, false)] {
                let gone: Vec<Member> = self.rts[i]
                    .facts
                    .members
                    .iter()
                    .filter(|m| {
                        !carried.contains(&m.rule.name)
                            && names.contains(m.rule.name.as_str()) == changed
                    })
                    .cloned()
                    .collect();
                retired.extend(gone.iter().map(|m| (m.rule.name.clone(), reason)));
                if !gone.is_empty() {
                    self.rts[i].members_change(
                        compact[i].iter().copied(),
                        gone,
                        now,
                        AlertState::Resolved,
                        Some(reason),
                        self.outage_until,
                        out,
                    );
                }
            }
        }
        // A new state's rules that did not run the state it took: they see its open alerts
        // begin now.
        for (ri, s) in source.iter().enumerate() {
            let Some(i) = *s else { continue };
            let before: std::collections::HashSet<&str> = self.rts[i]
                .facts
                .members
                .iter()
                .map(|m| m.rule.name.as_str())
                .collect();
            let joined: Vec<Member> = next.rts[ri]
                .facts
                .members
                .iter()
                .filter(|m| !before.contains(m.rule.name.as_str()))
                .cloned()
                .collect();
            if !joined.is_empty() {
                let now = next.lane_time(next.rts[ri].lane);
                let outage_until = next.outage_until;
                next.rts[ri].members_change(
                    next.compact.groups_of(ri),
                    joined,
                    now,
                    AlertState::Firing,
                    None,
                    outage_until,
                    out,
                );
            }
        }
        // (A changed absence rule kept the groups it had discovered: `carry_discovered`.)
        // Every kept state has every group its `expect` lists (one forgotten by hand comes
        // back now, watched from now).
        if let Some(clock) = next.clock {
            for (ri, s) in source.iter().enumerate() {
                if s.is_some() {
                    next.regroup(ri, clock);
                }
            }
        }
        next.absorb();
        self.order_alerts(out, start);
        *self = next;
        retired.sort_by(|a, b| a.0.cmp(&b.0));
        retired.dedup_by(|a, b| a.0 == b.0);
        Ok(retired)
    }

    /// Lane `li`'s time at the arrival clock: for an event-time lane that has begun, its
    /// watermark then, whether or not the lane was brought up to it (an idle lane is, only
    /// every `SWEEP_EVERY` of arrivals: how far it got depends on when the engine last swept
    /// it, which a restore does not keep); else the lane's own time.
    fn lane_time(&self, li: usize) -> Timestamp {
        let lane = &self.lanes[li];
        match (lane.mode, self.clock) {
            (TimeMode::Event, Some(clock)) if lane.started => lane.watermark(clock),
            _ => lane.now,
        }
    }

    /// Says that the source of events was down since the clock's last reading (a restart
    /// that first replayed what it had journalled): deadlines before the next reading fire
    /// with reason `outage`, as after [`Engine::restore`] with `outage`.
    pub fn mark_outage(&mut self) {
        self.outage_pending = true;
    }

    /// After a restore with `outage`: deadlines before the first new clock reading passed
    /// while the agent was down.
    fn note_outage(&mut self, now: Timestamp) {
        if self.outage_pending {
            self.outage_pending = false;
            self.outage_until = now;
        }
    }
}

impl Lane {
    fn new(mode: TimeMode, delay: Duration) -> Lane {
        Lane {
            mode,
            delay,
            now: Timestamp::MIN,
            wheel: Wheel::new(Timestamp(0)),
            pending: BinaryHeap::new(),
            max_event: None,
            last_arrival: None,
            mark: None,
            first_arrival: None,
            generation_bump: 0,
            min_event: None,
            started: mode == TimeMode::Processing,
            sources: Vec::new(),
            keys: Vec::new(),
            skip_until: Timestamp::MIN,
        }
    }

    /// The watermark at arrival clock `clock`: the largest event time seen minus the delay,
    /// never ahead of the clock minus the delay, and following the clock when the lane has been
    /// idle for longer than the delay.
    fn watermark(&self, clock: Timestamp) -> Timestamp {
        let capped = clock.sub(self.delay);
        let w = match (self.max_event, self.last_arrival) {
            (Some(m), Some(a)) if clock.since(a) > self.delay => {
                // Idle: the watermark moves on at the clock's rate from where the last
                // arrival left it, so a source whose stamps lag its arrivals keeps its lag.
                let from = self.mark.unwrap_or(Timestamp::MIN).max(m.sub(self.delay));
                from.add(clock.since(a)).min(capped)
            }
            (Some(m), _) => m.sub(self.delay).min(capped),
            (None, _) => capped,
        };
        w.max(self.now)
    }
}

/// Most an event-time lane's first source may put its start before the input's first line in
/// a replay (a source whose stamps lag, a device logging its local time read as UTC: up to
/// 12 hours): earlier, the line is stale (a clock never set), late, not lagging.
const STALE_FIRST_SOURCE: Duration = Duration(86_400 * 1_000_000_000);

/// How often, in arrival time, event-time lanes an event is no source of are brought up to
/// date: deadlines passed meanwhile fire at most this late in the output (with their own
/// times), as with the agent's tick.
const SWEEP_EVERY: Duration = Duration(100_000_000);

/// The checkpoint format version. 2: a rule's meaning ([`Rule::canonical`], which keys its
/// saved state) no longer holds its event definitions' names, so a version-1 checkpoint
/// would match no rule and restore nothing; it is refused instead. 3: the `expect` part of a
/// rule's meaning is a digest of the list, not the list (a version-2 checkpoint is read with
/// its meanings turned into that form: [`Rule::canonical_of_saved`]).
pub const CHECKPOINT_VERSION: u32 = 3;

/// A snapshot of an engine's state: serializable (serde), restorable with [`Engine::restore`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version.
    pub version: u32,
    /// The arrival clock.
    pub clock: Option<Timestamp>,
    /// The next event sequence number.
    pub next_seq: u64,
    /// Engine counters.
    pub counters: EngineCounters,
    /// Lanes: times and buffered events.
    pub lanes: Vec<LaneCheckpoint>,
    /// Per rule: identity, monitoring start, counters and groups.
    pub rules: Vec<RuleCheckpoint>,
    /// Event time: the earliest event time seen (absent in older checkpoints).
    #[serde(default)]
    pub min_event_any: Option<Timestamp>,
    /// Event time: the latest event time seen.
    #[serde(default)]
    pub max_event_any: Option<Timestamp>,
    /// Event time: the arrival clock of the lanes' next sweep.
    #[serde(default)]
    pub sweep_at: Option<Timestamp>,
}

/// The most distinct events with the same times and number of fields [`share_events`]
/// compares a held event with: its cost stays linear whatever a flood of alike events holds.
const SHARE_BUCKET: usize = 8;

/// Makes one again, in a checkpoint read back, each event it holds several times: a live
/// event several groups hold (two rules' partial matches, a match and its wait) is saved
/// once per holder, and read back as that many copies, which a restored engine at a million
/// groups held as hundreds of MB more than the live one did. Events equal in every field are
/// the same event to every reader (none tells events apart by address).
fn share_events(cp: &mut Checkpoint) {
    // (Events alike in their times and number of fields, by those.)
    type Alike = (Timestamp, Timestamp, usize);
    let mut seen: HashMap<Alike, smallvec::SmallVec<[Arc<Event>; 1]>> = HashMap::new();
    let mut share = |ev: &mut Arc<Event>| {
        let bucket = seen
            .entry((ev.time, ev.arrival, ev.fields.len()))
            .or_default();
        match bucket.iter().find(|held| ***held == **ev) {
            Some(held) => *ev = held.clone(),
            None if bucket.len() < SHARE_BUCKET => bucket.push(ev.clone()),
            None => {}
        }
    };
    for g in cp.rules.iter_mut().flat_map(|rc| rc.groups.iter_mut()) {
        g.state.each_event(&mut share);
    }
    for p in cp.lanes.iter_mut().flat_map(|l| l.pending.iter_mut()) {
        share(&mut p.ev);
    }
}

/// A lane in a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LaneCheckpoint {
    /// Event time (else processing).
    pub event_time: bool,
    /// Its `max_delay`.
    pub delay: Duration,
    /// Its time.
    pub now: Timestamp,
    /// The largest event time seen.
    pub max_event: Option<Timestamp>,
    /// The last arrival.
    pub last_arrival: Option<Timestamp>,
    /// The watermark at the last arrival (absent in checkpoints before it was kept).
    #[serde(default)]
    pub mark: Option<Timestamp>,
    /// The arrival clock when the lane began (absent in checkpoints before it was kept).
    #[serde(default)]
    pub first_arrival: Option<Timestamp>,
    /// The earliest event time seen before the lane began monitoring.
    pub min_event: Option<Timestamp>,
    /// Whether the lane's rules began monitoring.
    pub started: bool,
    /// The conditions whose events make its watermark (absent in checkpoints before lanes
    /// were kept per source: such a lane is matched by its delay alone).
    #[serde(default)]
    pub sources: Vec<String>,
    /// Beside each of `sources`, the fields its rules key groups by (absent in checkpoints
    /// before lanes were told apart by them: such a lane is matched by its sources alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<Vec<String>>>,
    /// Buffered events.
    pub pending: Vec<PendingCheckpoint>,
}

/// A buffered event in a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PendingCheckpoint {
    /// The rule's canonical form.
    pub rule: String,
    /// The rule's name (the first, when several share the state).
    pub rule_name: String,
    /// Event time.
    pub time: Timestamp,
    /// Sequence number.
    pub seq: u64,
    /// Group key.
    pub key: GroupKey,
    /// Matched definitions.
    pub mask: EvSet,
    /// The event.
    pub ev: Arc<Event>,
}

/// One rule in a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RuleCheckpoint {
    /// Name (for people).
    pub name: String,
    /// The rules the state served (`name` first); none in checkpoints made before they were
    /// kept: `name` alone then.
    #[serde(default)]
    pub members: Vec<String>,
    /// Canonical form (the identity that must match to restore).
    pub canonical: String,
    /// The state's cohort (when its rules began monitoring; 0 in older checkpoints).
    #[serde(default)]
    pub cohort: u64,
    /// When monitoring began.
    pub monitor_start: Option<Timestamp>,
    /// Counters.
    pub counters: RuleCounters,
    /// Groups, sorted by key.
    pub groups: Vec<SavedGroup>,
    /// The rule's `group_by` (`None` in older checkpoints: their groups are not carried):
    /// what its groups' keys mean, so a changed absence rule grouping alike can keep them.
    #[serde(default)]
    pub group_by: Option<Vec<String>>,
    /// The types of its key values, by `group_by` position (`None` in older checkpoints).
    #[serde(default)]
    pub key_types: Option<Vec<crate::event::ValueType>>,
    /// The network each key value is read as (`src/64`), by `group_by` position; empty when
    /// none is (and in checkpoints made before networks): keys of another reading are not
    /// carried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_nets: Vec<Option<(u8, u8)>>,
}

impl RuleCheckpoint {
    /// The rules the state served (`name` alone in checkpoints made before `members`).
    fn served(&self) -> impl Iterator<Item = &str> {
        let alone = self.members.is_empty().then_some(self.name.as_str());
        alone
            .into_iter()
            .chain(self.members.iter().map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, Source};

    /// A checkpoint listing a group twice (edited by hand, or damaged) restores it once:
    /// one group, one alert when it is forgotten, and nothing left behind.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_group_key_written_by_hand_compares_as_the_engine_writes_its_values() {
        let json = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
        for (v, engine) in [
            (json("1.0"), Value::Float(1.0)),
            (json("1.5"), Value::Float(1.5)),
            (json("22"), Value::Int(22)),
            (json("-3"), Value::Int(-3)),
            (json("\"web,1\""), Value::str("web,1")),
        ] {
            assert_eq!(group_value_text(&v), engine.to_string(), "{v}");
        }
        let by = ["ratio".to_string(), "host".to_string()];
        assert_eq!(
            group_key_texts(&by, r#"{"host":"web,1","ratio":1.0}"#),
            Some(vec!["1".to_string(), "web,1".to_string()])
        );
        assert_eq!(
            group_key_texts(&by, "2, web1"),
            Some(vec!["2".to_string(), "web1".to_string()])
        );
        assert_eq!(group_key_texts(&by, r#"{"host":"web1"}"#), None);
    }

    /// A syslog event of `host` and `app` stamped and arriving at `t`.
    fn host_app(t: Timestamp, host: &str, app: &str) -> Event {
        Event::new(Source::Syslog, t, t)
            .with(crate::event::Field::Host, Value::str(host))
            .with(crate::event::Field::App, Value::str(app))
    }

    #[test]
    fn a_group_listed_twice_in_a_checkpoint_restores_once() {
        let text = r#"
[[rule]]
name = "hb"
severity = "high"
group_by = ["host"]
events.a = 'syslog and app == "hb"'
pattern = "absent(a) for 10s"
"#;
        let rules = compiled("t.toml", text);
        let Ok(mut e) = Engine::new(&rules, EngineConfig::default()) else {
            panic!("engine")
        };
        let t0 = Timestamp(1_780_000_000_000_000_000);
        let mut out = Vec::new();
        e.push(host_app(t0, "h1", "hb"), &mut out);
        // The absence fires: the group has an open alert.
        e.advance_to(t0.add(Duration(11_000_000_000)), &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        let mut cp = e.checkpoint();
        let g = cp.rules[0].groups[0].clone();
        cp.rules[0].groups.push(g);
        let Ok(mut r) = Engine::restore(&rules, EngineConfig::default(), cp, false) else {
            panic!("restore")
        };
        assert_eq!(r.stats()[0].groups, 1);
        assert_eq!(r.checkpoint().rules[0].groups.len(), 1, "one slot, not two");
        let mut out = Vec::new();
        assert!(r.forget_group("hb", &[Value::str("h1")], &mut out));
        assert_eq!(out.len(), 1, "the open alert resolves once: {out:?}");
        assert_eq!(r.stats()[0].groups, 0);
        assert!(
            r.checkpoint().rules[0].groups.is_empty(),
            "no slot left behind"
        );
        assert!(!r.forget_group("hb", &[Value::str("h1")], &mut out));
    }

    /// An event two rules' partial matches hold is saved once per holder; read back, the
    /// restore makes it one event again (as the live engine held it), and restores the same.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn an_event_saved_once_per_holder_is_read_back_as_one() {
        let text = r#"
[[rule]]
name = "ab"
severity = "high"
group_by = ["host"]
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
pattern = "seq(a, b) within 1h"

[[rule]]
name = "ac"
severity = "high"
group_by = ["host"]
events.a = 'syslog and app == "a"'
events.c = 'syslog and app == "c"'
pattern = "seq(a, c) within 1h"
"#;
        let rules = compiled("t.toml", text);
        let mut e = Engine::new(&rules, EngineConfig::default()).unwrap();
        let t0 = Timestamp(1_780_000_000_000_000_000);
        let mut out = Vec::new();
        e.push(host_app(t0, "h1", "a"), &mut out);
        let held = |cp: &mut Checkpoint| {
            let mut at = Vec::new();
            for g in cp.rules.iter_mut().flat_map(|rc| rc.groups.iter_mut()) {
                g.state.each_event(&mut |ev| at.push(Arc::as_ptr(ev)));
            }
            at
        };
        let json = serde_json::to_string(&e.checkpoint()).unwrap();
        let mut cp: Checkpoint = serde_json::from_str(&json).unwrap();
        let read = held(&mut cp);
        assert_eq!(read.len(), 2, "one partial match per rule");
        assert_ne!(read[0], read[1], "read back as two copies");
        share_events(&mut cp);
        let shared = held(&mut cp);
        assert_eq!(shared[0], shared[1]);
        // Restored, both rules go on from it alike.
        let mut r = Engine::restore(&rules, EngineConfig::default(), cp, false).unwrap();
        r.push(host_app(t0.add(Duration(1)), "h1", "b"), &mut out);
        r.push(host_app(t0.add(Duration(1)), "h1", "c"), &mut out);
        let rules_fired: Vec<&str> = out.iter().map(|a| a.rule()).collect();
        assert_eq!(rules_fired, ["ab", "ac"]);
    }

    /// A delivery reads one cache line of its group: the slot is 64 bytes, occupied or not.
    #[test]
    fn a_group_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    /// A rule state begins a cache line (its layout is measured: see `RuleRt`).
    #[test]
    fn a_rule_state_begins_a_cache_line() {
        assert_eq!(std::mem::align_of::<RuleRt>(), 64);
    }

    /// Reading an event's groups ahead changes nothing: with it and without it, the same
    /// alerts and the same counters (the family diagnostic included), on random streams over
    /// a family whose members take the group from two fields (events with two keys), a rule
    /// alone, rate limits, absences, and groups forgotten and made again in reused slots.
    #[test]
    fn reading_groups_ahead_changes_nothing() {
        let text = r#"
[[rule]]
name = "s"
severity = "high"
group_by = ["host"]
forget_after = "6s"
events.x = 'syslog and app == "x"'
events.y = { if = 'syslog and app == "y"', host = "procid" }
pattern = "seq(x, y) within 5s"

[[rule]]
name = "a"
severity = "high"
group_by = ["host"]
forget_after = "6s"
events.x = 'syslog and app == "x"'
events.y = { if = 'syslog and app == "y"', host = "procid" }
pattern = "and(x, y) within 3s"

[[rule]]
name = "c"
severity = "high"
group_by = ["host"]
forget_after = "6s"
events.x = 'syslog and app == "x"'
pattern = "x{2,} within 4s"

[[rule]]
name = "o"
severity = "high"
group_by = ["host"]
events.x = 'syslog and app == "x"'
events.z = 'syslog and msgid == "z"'
pattern = "or(x, z)"
trigger = { every = "2s" }

[[rule]]
name = "w"
severity = "high"
group_by = ["host"]
forget_after = "6s"
events.z = 'syslog and msgid == "z"'
events.x = 'syslog and app == "x"'
pattern = "seq(z, absent(x) for 3s)"

[[rule]]
name = "g"
severity = "high"
group_by = ["host"]
forget_after = "6s"
events.y = 'syslog and app == "y"'
pattern = "absent(y) for 4s"

[[rule]]
name = "alone"
severity = "high"
group_by = ["procid"]
events.q = 'syslog and msgid == "z"'
events.r = 'syslog and app == "y"'
pattern = "seq(q, r) within 2s"
"#;
        let rules = compiled("read-ahead.toml", text);
        let hosts = ["h1", "h2", "h3"];
        let (mut saved, mut alerts) = (0, 0);
        for seed in 1..=300u64 {
            let mut next = draws(seed);
            let mut t = 1_000_000i64;
            let evs: Vec<Event> = (0..60)
                .map(|_| {
                    t += next(3000) as i64;
                    let ts = Timestamp(t * 1_000_000);
                    let app = ["x", "y", "v"][next(3) as usize];
                    let msgid = ["z", "n"][next(2) as usize];
                    Event::new(Source::Syslog, ts, ts)
                        .with(Field::App, Value::str(app))
                        .with(Field::Msgid, Value::str(msgid))
                        .with(Field::Host, Value::str(hosts[next(3) as usize]))
                        .with(Field::Procid, Value::str(hosts[next(3) as usize]))
                })
                .collect();
            let run = |ahead: bool| {
                let mut e = match Engine::new(&rules, EngineConfig::default()) {
                    Ok(e) => e,
                    Err(err) => panic!("engine: {err}"),
                };
                e.read_ahead = ahead;
                let alerts = run_through(&mut e, &evs, Timestamp((t + 20_000) * 1_000_000));
                (alerts, e.counters().clone())
            };
            let (with, without) = (run(true), run(false));
            assert_eq!(with, without, "seed {seed}");
            saved += with.1.family_lookups_saved;
            alerts += with.0.len();
        }
        assert!(saved > 0, "the family shortcut was taken");
        assert!(alerts > 0, "the streams alert");
    }

    /// Compact states ([`Engine::deliver_compact`], their groups in scope records) give
    /// exactly what the same states give through hits, in their own slots: same alerts, same
    /// counters and statistics (memory aside), over states that are direct (one mapping, no
    /// captures; one of them fed twice by one event, one at a full `max_groups` letting idle
    /// groups go) and states that are not (two mappings, captures), in one engine.
    #[test]
    fn direct_deliveries_change_nothing() {
        let text = r#"
[[rule]]
name = "two"
severity = "high"
group_by = ["host"]
forget_after = "6s"
events.x = 'syslog and app == "x"'
events.m = 'syslog and msgid == "z"'
pattern = "seq(x, m) within 3s"

[[rule]]
name = "both"
severity = "high"
group_by = ["host"]
forget_after = "6s"
events.x = 'syslog and app == "x"'
events.m = 'syslog and msgid == "z"'
pattern = "and(x, m) within 2s"

[[rule]]
name = "mapped"
severity = "high"
group_by = ["host"]
forget_after = "6s"
events.x = 'syslog and app == "x"'
events.y = { if = 'syslog and app == "y"', host = "procid" }
pattern = "seq(x, y) within 5s"

[[rule]]
name = "caught"
severity = "high"
group_by = ["host"]
forget_after = "6s"
events.c = 'syslog and msg =~ "^(?P<word>[a-z]+) "'
events.x = 'syslog and app == "x"'
pattern = "seq(c, x) within 4s"

[[rule]]
name = "count"
severity = "high"
group_by = ["host"]
events.x = 'syslog and app == "x"'
pattern = "x{3,} within 4s"
max_groups = 2

[[rule]]
name = "quiet"
severity = "high"
group_by = ["host"]
forget_after = "6s"
events.m = 'syslog and msgid == "z"'
events.y = 'syslog and app == "y"'
pattern = "seq(m, absent(y) for 3s)"
"#;
        let rules = compiled("direct.toml", text);
        let hosts = ["h1", "h2", "h3", "h4"];
        let (mut alerts, mut keyless) = (0, 0);
        for seed in 1..=300u64 {
            let mut next = draws(seed);
            let mut t = 1_000_000i64;
            let evs: Vec<Event> = (0..80)
                .map(|_| {
                    t += next(2000) as i64;
                    let ts = Timestamp(t * 1_000_000);
                    let app = ["x", "y", "v"][next(3) as usize];
                    let msgid = ["z", "n"][next(2) as usize];
                    let msg = ["word here", "9 no"][next(2) as usize];
                    let e = Event::new(Source::Syslog, ts, ts)
                        .with(Field::App, Value::str(app))
                        .with(Field::Msgid, Value::str(msgid))
                        .with(Field::Msg, Value::str(msg))
                        .with(Field::Procid, Value::str(hosts[next(4) as usize]));
                    // Now and then no host: keyless for the rules grouped by it.
                    match hosts.get(next(5) as usize) {
                        Some(h) => e.with(Field::Host, Value::str(h)),
                        None => e,
                    }
                })
                .collect();
            let run = |direct: bool| {
                let mut e = match Engine::new(&rules, EngineConfig::default()) {
                    Ok(e) => e,
                    Err(err) => panic!("engine: {err}"),
                };
                let mut hits: Vec<&str> = e
                    .via_hits
                    .iter()
                    .flatten()
                    .map(|c| e.rts[c.state as usize].facts.rule.name.as_str())
                    .collect();
                hits.sort_unstable();
                hits.dedup();
                assert_eq!(hits, ["caught", "mapped"]);
                if !direct {
                    e.via_hits = e.consumers.clone();
                    // Compact states are direct ones keeping their groups in records: here,
                    // in their own slots, delivered through hits.
                    e.compact.uses.iter_mut().for_each(Vec::clear);
                    e.compact.of.iter_mut().for_each(|o| *o = None);
                    e.compact.scopes.clear();
                    e.plain = plain_preds(&e.filter, &e.via_hits, &e.compact);
                }
                let alerts = run_through(&mut e, &evs, Timestamp((t + 20_000) * 1_000_000));
                let mut counters = e.counters().clone();
                // (Which deliveries find their family's record already looked up depends on
                // their order.)
                counters.family_lookups_saved = 0;
                // (Memory aside: a compact state's groups are cells in records, not slots.)
                let stats: Vec<String> = (e.stats().into_iter())
                    .map(|s| format!("{:?}", RuleStats { bytes: 0, ..s }))
                    .collect();
                (alerts, counters, stats)
            };
            let (with, without) = (run(true), run(false));
            assert_eq!(with, without, "seed {seed}");
            alerts += with.0.len();
            keyless += with.1.keyless;
        }
        assert!(alerts > 0, "the streams alert");
        assert!(keyless > 0, "some events have no key");
    }

    /// One-step plans' timer entries moved to their groups' next wake (shortcuts on) against
    /// the firing path (off): processing-time plans in records and in slots (a capture, a
    /// second key mapping), event-time ones with late events (which take the firing path),
    /// rate limits, expected groups, `max_groups`, a restore (with and without an outage)
    /// in the middle: the same alerts, counters, stats and checkpoints.
    #[test]
    fn one_step_timer_moves_change_nothing() {
        let rule = |name: &str, pattern: &str, extra: &str| {
            format!(
                "[[rule]]\nname = \"{name}\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
                 events.x = 'syslog and app == \"x\"'\n\
                 events.m = 'syslog and msgid == \"z\"'\nevents.y = 'syslog and app == \"y\"'\n\
                 pattern = \"{pattern}\"\n{extra}\n"
            )
        };
        let event_time = "time = \"event\"\nmax_delay = \"1s\"\nallowed_lateness = \"3s\"\n";
        let text = [
            rule(
                "p_silent",
                "seq(x, absent(m) for 3s)",
                "forget_after = \"9s\"",
            ),
            rule(
                "p_rate",
                "seq(x, absent(y) for 2s)",
                "trigger = { every = \"5s\" }\nforget_after = \"6s\"",
            ),
            rule(
                "p_any",
                "or(y, m)",
                "trigger = { every = \"3s\" }\nforget_after = \"4s\"\nmax_groups = 2",
            ),
            rule(
                "p_exp",
                "seq(m, absent(x) for 2s)",
                "expect = [\"h2\"]\nforget_after = \"5s\"",
            ),
            rule(
                "e_silent",
                "seq(x, absent(m) for 3s)",
                &format!("{event_time}forget_after = \"9s\"\nmax_groups = 2"),
            ),
            rule(
                "e_any",
                "or(x, m)",
                &format!("{event_time}trigger = {{ every = \"4s\" }}\nforget_after = \"5s\""),
            ),
            rule(
                "e_pair",
                "seq(x, m) within 3s",
                &format!("{event_time}forget_after = \"8s\""),
            ),
        ]
        .concat()
            + "[[rule]]\nname = \"p_caught\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
               forget_after = \"6s\"\nevents.c = 'syslog and msg =~ \"^(?P<word>[a-z]+) \"'\n\
               events.x = 'syslog and app == \"x\"'\npattern = \"seq(c, absent(x) for 2s)\"\n\
               [[rule]]\nname = \"p_mapped\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
               forget_after = \"6s\"\nevents.x = 'syslog and app == \"x\"'\n\
               events.y = { if = 'syslog and app == \"y\"', host = \"procid\" }\n\
               pattern = \"seq(x, absent(y) for 2s)\"\n";
        let rules = compiled("moves.toml", &text);
        let hosts = ["h1", "h2", "h3"];
        let mut alerts = 0;
        for seed in 1..=150u64 {
            let mut next = draws(seed);
            let mut arrival = 1_000_000i64;
            let mut steps: Vec<(Option<Event>, Timestamp)> = Vec::new();
            for _ in 0..90 {
                arrival += next(2200) as i64;
                let lag = [0, 0, 0, 300, 1500, 3500, 6000][next(7) as usize];
                let at = Timestamp(arrival * 1_000_000);
                if next(6) == 0 {
                    steps.push((None, at));
                    continue;
                }
                let ts = Timestamp((arrival - lag) * 1_000_000);
                let e = Event::new(Source::Syslog, ts, at)
                    .with(Field::App, Value::str(["x", "y", "v"][next(3) as usize]))
                    .with(Field::Msgid, Value::str(["z", "n"][next(2) as usize]))
                    .with(
                        Field::Msg,
                        Value::str(["word here", "9 no"][next(2) as usize]),
                    )
                    .with(Field::Procid, Value::str(hosts[next(3) as usize]))
                    .with(Field::Host, Value::str(hosts[next(3) as usize]));
                steps.push((Some(e), at));
            }
            let restore_at = next(90) as usize;
            let outage = next(2) == 0;
            let run = |moves: bool| {
                let mut e = match Engine::new(&rules, EngineConfig::default()) {
                    Ok(e) => e,
                    Err(err) => panic!("engine: {err}"),
                };
                if !moves {
                    without_shortcuts(&mut e);
                }
                let mut out = Vec::new();
                let mut saved = Vec::new();
                for (i, (ev, at)) in steps.iter().enumerate() {
                    match ev {
                        Some(ev) => e.push(ev.clone(), &mut out),
                        None => e.advance_to(*at, &mut out),
                    }
                    if i % 15 == 14 {
                        match serde_json::to_string(&e.checkpoint()) {
                            Ok(j) => saved.push(j),
                            Err(err) => panic!("checkpoint: {err}"),
                        }
                    }
                    if i == restore_at {
                        let cp = e.checkpoint();
                        e = match Engine::restore(&rules, EngineConfig::default(), cp, outage) {
                            Ok(e) => e,
                            Err(err) => panic!("restore: {err}"),
                        };
                        if !moves {
                            without_shortcuts(&mut e);
                        }
                    }
                }
                e.finish(Some(Timestamp((arrival + 30_000) * 1_000_000)), &mut out);
                let alerts: Vec<String> = out.iter().map(|a| a.to_json().to_string()).collect();
                let stats: Vec<String> = e.stats().iter().map(|s| format!("{s:?}")).collect();
                (alerts, e.counters().clone(), stats, saved)
            };
            let with = run(true);
            assert_eq!(with, run(false), "seed {seed}");
            alerts += with.0.len();
        }
        assert!(alerts > 0, "the streams alert");
    }

    /// An event-time lane holding a one-step plan (`seq(x, absent(m) for 30s)`, whose wait an
    /// `m` ends at once) and a sequence: the wait's entry is not moved to the group's
    /// forgetting as a processing-time one is, so the sweeps of unrelated arrivals still bring
    /// the lane's time on, and its stats and checkpointed time are those of the firing path
    /// (moved, the lane stood at 16.6 s against 31.6 s, a partial match past its window still
    /// counted). Found by a review of the move.
    #[test]
    fn an_event_time_one_step_plans_entry_keeps_its_lanes_time() {
        let text = "[[rule]]\nname = \"silent\"\nseverity = \"low\"\ngroup_by = [\"host\"]\n\
            events.x = 'syslog and app == \"x\"'\nevents.m = 'syslog and app == \"m\"'\n\
            pattern = \"seq(x, absent(m) for 30s)\"\ntime = \"event\"\nmax_delay = \"1s\"\n\
            [[rule]]\nname = \"pair\"\nseverity = \"low\"\ngroup_by = [\"host\"]\n\
            events.x = 'syslog and app == \"x\"'\nevents.m = 'syslog and app == \"m\"'\n\
            pattern = \"seq(m, x) within 20s\"\ntime = \"event\"\nmax_delay = \"1s\"\n";
        let rules = compiled("lane.toml", text);
        let ev = |app: &str, ms: i64| {
            let t = Timestamp(ms * 1_000_000);
            Event::new(Source::Syslog, t, t)
                .with(Field::App, Value::str(app))
                .with(Field::Host, Value::str("h1"))
        };
        let mut script = vec![("x", 1000), ("m", 1500)];
        script.extend((2600..=33_600).step_by(1000).map(|t| ("v", t)));
        let run = |shortcuts: bool| {
            let mut e = match Engine::new(&rules, EngineConfig::default()) {
                Ok(e) => e,
                Err(err) => panic!("engine: {err}"),
            };
            assert!(e.rts.iter().any(|rt| rt.facts.single && rt.lane != 0));
            if !shortcuts {
                without_shortcuts(&mut e);
            }
            let mut out = Vec::new();
            for &(app, t) in &script {
                e.push(ev(app, t), &mut out);
            }
            let alerts: Vec<String> = out.iter().map(|a| a.to_json().to_string()).collect();
            let lanes = match serde_json::to_value(e.checkpoint()) {
                Ok(j) => j["lanes"].to_string(),
                Err(err) => panic!("checkpoint: {err}"),
            };
            let partial: Vec<u64> = e.stats().iter().map(|s| s.partial_matches).collect();
            (alerts, partial, lanes)
        };
        assert_eq!(run(true), run(false));
    }

    /// Turns `e`'s transition shortcuts off (`simple`, `single`, `Lean`): every event takes
    /// the general transition and every timer the firing path, the reference the shortcuts
    /// are compared with.
    fn without_shortcuts(e: &mut Engine) {
        e.rts.iter_mut().for_each(|rt| {
            rt.facts.simple = false;
            rt.facts.single = false;
            rt.facts.lean = state::Lean::Off;
        });
    }

    /// The transitions' shortcuts leave exactly what the general transition leaves: same
    /// alerts, counters, statistics and checkpoints (every group's partial matches and
    /// waits). `LinearState::fresh` ([`RuleCtx::simple`]: a group whose partial matches have
    /// all passed the window) over sequences, `and`, closures at the start (with and without
    /// an upper count), three steps, a budget of one partial match and `x{1,}` (left to the
    /// general path); `LinearState::single` ([`RuleCtx::single`]: an event of a one-step
    /// plan) over `or` with and without a window and a rate limit, and absences at the end
    /// with and without one; and plans neither takes (a least distance). `Group::on_fresh`
    /// ([`state::Lean`]) over sequences, `and` and closures at the start (with and without an
    /// upper count), one with an expected group, collectors past and under the cap of the
    /// events a closure keeps and events of the step after a collector that cannot move it
    /// on (`Group::on_collect`), absences (`Lean::Absence`), with
    /// and without an expected group, and the one-step plans above (`Lean::Single`).
    #[test]
    fn transition_shortcuts_change_nothing() {
        let rule = |name: &str, pattern: &str, extra: &str| {
            format!(
                "[[rule]]\nname = \"{name}\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
                 forget_after = \"9s\"\nevents.x = 'syslog and app == \"x\"'\n\
                 events.m = 'syslog and msgid == \"z\"'\nevents.y = 'syslog and app == \"y\"'\n\
                 pattern = \"{pattern}\"\n{extra}\n"
            )
        };
        let text = [
            rule("seq", "seq(x, m) within 3s", ""),
            rule("and", "and(x, m) within 2s", ""),
            rule("count", "x{3,} within 4s", "max_groups = 2"),
            rule("upto", "seq(x{2,3}, m) within 3s", ""),
            rule("three", "seq(x, m, y) within 5s", ""),
            rule("budget", "seq(x, y) within 6s", "max_partial_matches = 1"),
            rule("andone", "and(x, m) within 2s", "max_partial_matches = 1"),
            rule(
                "either",
                "or(x, y) within 3s",
                "trigger = { every = \"2s\" }",
            ),
            rule("oneof", "x{1,} within 2s", ""),
            rule("least", "seq(x, m) within 1s..3s", ""),
            rule("quiet", "seq(m, absent(y) for 3s)", ""),
            rule("anyof", "or(x, m)", "trigger = { every = \"4s\" }"),
            rule(
                "calm",
                "seq(x, absent(m) for 2s)",
                "trigger = { every = \"5s\" }",
            ),
            rule("bare", "or(y, m)", ""),
            rule("tail", "seq(y, absent(x)) within 2s", ""),
            rule("listed", "seq(x, y) within 3s", "expect = [\"h2\"]"),
            rule("gone", "absent(y) for 3s", "expect = [\"h1\"]"),
            rule("lost", "absent(m) for 2s", ""),
            rule("gather", "seq(x{2,}, m) within 4s", ""),
        ]
        .concat();
        // Collectors of every event of their group that nothing moves on: past the cap of
        // the events a closure keeps (`flood`), and under the larger one a `{count}` keeps.
        let flood = |name: &str, message: &str, within: u32| {
            format!(
                "[[rule]]\nname = \"{name}\"\nseverity = \"low\"\ngroup_by = [\"host\"]\n\
                 message = \"{message}\"\nevents.e = 'syslog'\n\
                 events.n = 'syslog and msgid == \"never\"'\n\
                 pattern = \"seq(e{{2,}}, n) within {within}s\"\n"
            )
        };
        let text =
            text + &flood("flood", "{host}", 200) + &flood("tally", "{count} from {host}", 190);
        let rules = compiled("fresh.toml", &text);
        let hosts = ["h1", "h2", "h3"];
        let (mut alerts, mut fresh) = (0, 0);
        for seed in 1..=300u64 {
            let mut next = draws(seed);
            let mut t = 1_000_000i64;
            let evs: Vec<Event> = (0..80)
                .map(|_| {
                    t += next(2500) as i64;
                    let ts = Timestamp(t * 1_000_000);
                    let app = ["x", "y", "v"][next(3) as usize];
                    let msgid = ["z", "n"][next(2) as usize];
                    Event::new(Source::Syslog, ts, ts)
                        .with(Field::App, Value::str(app))
                        .with(Field::Msgid, Value::str(msgid))
                        .with(Field::Host, Value::str(hosts[next(3) as usize]))
                })
                .collect();
            let run = |shortcuts: bool| {
                let mut e = match Engine::new(&rules, EngineConfig::default()) {
                    Ok(e) => e,
                    Err(err) => panic!("engine: {err}"),
                };
                let names = |f: fn(&RuleRt) -> bool| -> Vec<String> {
                    e.rts
                        .iter()
                        .filter(|rt| f(rt))
                        .map(|rt| rt.facts.rule.name.clone())
                        .collect()
                };
                assert_eq!(
                    names(|rt| rt.facts.simple),
                    [
                        "seq", "and", "count", "upto", "three", "budget", "andone", "either",
                        "oneof", "listed", "gather", "flood", "tally"
                    ]
                );
                assert_eq!(
                    names(|rt| rt.facts.single),
                    ["either", "quiet", "anyof", "calm", "bare", "tail"]
                );
                if !shortcuts {
                    without_shortcuts(&mut e);
                }
                let mut out = Vec::new();
                let mut saved = Vec::new();
                for (i, ev) in evs.iter().enumerate() {
                    e.push(ev.clone(), &mut out);
                    if i % 20 == 19 {
                        match serde_json::to_string(&e.checkpoint()) {
                            Ok(j) => saved.push(j),
                            Err(err) => panic!("checkpoint: {err}"),
                        }
                    }
                }
                e.finish(Some(Timestamp((t + 20_000) * 1_000_000)), &mut out);
                let alerts: Vec<String> = out.iter().map(|a| a.to_json().to_string()).collect();
                let stats: Vec<String> = e.stats().iter().map(|s| format!("{s:?}")).collect();
                (alerts, e.counters().clone(), stats, saved)
            };
            let (with, without) = (run(true), run(false));
            assert_eq!(with, without, "seed {seed}");
            alerts += with.0.len();
            fresh += with.3.iter().filter(|c| c.contains("\"runs\":[{")).count();
        }
        assert!(alerts > 0, "the streams alert");
        assert!(fresh > 0, "checkpoints hold partial matches");
    }

    /// The rule set of a rule file's text (a diagnostic fails the test).
    fn compiled(name: &str, text: &str) -> RuleSet {
        let c = crate::rules::compile_str(name, text);
        match c.rules {
            Some(rules) => rules,
            None => panic!("rules compile: {:?}", c.diagnostics),
        }
    }

    /// A seeded xorshift64*: each call draws a number below its argument.
    fn draws(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        move |n| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
        }
    }

    /// `evs` pushed through `e` in order, then `finish` at `end`: every alert, as JSON.
    fn run_through(e: &mut Engine, evs: &[Event], end: Timestamp) -> Vec<String> {
        let mut out = Vec::new();
        for ev in evs {
            e.push(ev.clone(), &mut out);
        }
        e.finish(Some(end), &mut out);
        out.iter().map(|a| a.to_json().to_string()).collect()
    }

    fn hit(order: (u32, u32)) -> Hit {
        let ev = Some(Arc::new(Event::new(
            Source::Syslog,
            Timestamp(0),
            Timestamp(0),
        )));
        Hit {
            rule: order.0 ^ order.1,
            order,
            hint: None,
            key: GroupKey::new(&[Value::Int(i64::from(order.0))]),
            kid: order.0,
            mask: 1,
            ev,
            ev_order: order,
            found: None,
        }
    }

    /// `sort_hits` gives the order a plain sort by `order` gives, for every arrangement of a
    /// few hits and for long shuffled runs (cycles of every length).
    #[test]
    fn sort_hits_sorts_by_order() {
        let orders: Vec<(u32, u32)> = (0..7u32).map(|i| (i / 3, i % 3 + 10)).collect();
        let mut perm = Vec::new();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for n in [0, 1, 2, 3, 7, 7, 7, 7] {
            for _ in 0..50 {
                let mut hits: Vec<Hit> = orders[..n].iter().map(|&o| hit(o)).collect();
                for i in (1..hits.len()).rev() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    hits.swap(i, (seed % (i as u64 + 1)) as usize);
                }
                sort_hits(&mut hits, &mut perm);
                let got: Vec<(u32, u32, u32)> = hits
                    .iter()
                    .map(|h| (h.order.0, h.order.1, h.rule))
                    .collect();
                let want: Vec<(u32, u32, u32)> =
                    orders[..n].iter().map(|&(a, b)| (a, b, a ^ b)).collect();
                assert_eq!(got, want);
            }
        }
        let mut long: Vec<Hit> = (0..500u32).rev().map(|i| hit((i % 97, i))).collect();
        sort_hits(&mut long, &mut perm);
        assert!(long.is_sorted_by_key(|h| h.order));
        assert_eq!(long.len(), 500);
    }
}
