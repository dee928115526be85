//! The alert: one JSON object, the same shape in replay, outputs, the API and the store.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::engine::state::{Member, render_message};
use crate::event::{Event, Value};
use crate::fnv::Fnv;
use crate::rules::ir::Severity;
use crate::time::Timestamp;

/// Where an alert is in its lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertState {
    /// The condition holds (a match, or an absence detected).
    Firing,
    /// It no longer holds (the awaited event came back, the episode ended, the group was forgotten).
    Resolved,
    /// A late event showed the absence never happened.
    Retracted,
}

impl AlertState {
    /// The spelling in JSON.
    pub const fn name(self) -> &'static str {
        match self {
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
            AlertState::Retracted => "retracted",
        }
    }
}

impl AlertState {
    /// Every state, in lifecycle order (for messages that list them).
    pub const ALL: [AlertState; 3] = [
        AlertState::Firing,
        AlertState::Resolved,
        AlertState::Retracted,
    ];
}

/// Why an alert changed state other than by its pattern (docs/rules.md, "Alerts"): the one
/// list of the `reason` values, so the engine, the shard and `rules test` cannot drift apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The group was silent for `forget_after` (or retired by hand) while its alert was open.
    Forgotten,
    /// A closure's episode ended: the group was quiet for the rule's window.
    EpisodeEnd,
    /// A late event showed a fired absence never happened.
    LateEvent,
    /// An absence fired for a deadline that passed while the agent was down.
    Outage,
    /// A reload changed the rule: its open alerts are resolved.
    RuleChanged,
    /// A reload removed the rule: its open alerts are resolved.
    RuleRemoved,
    /// The engine failed and was rebuilt: its open alerts are resolved.
    EngineRestarted,
    /// At a restart, no engine holds the alert's episode any more (the state that held it
    /// was lost with a crash after the last save, or could not be continued): resolved
    /// rather than left firing for ever.
    StateLost,
}

impl Reason {
    /// Every reason, as docs/rules.md lists them.
    pub const ALL: [Reason; 8] = [
        Reason::Forgotten,
        Reason::EpisodeEnd,
        Reason::LateEvent,
        Reason::Outage,
        Reason::RuleChanged,
        Reason::RuleRemoved,
        Reason::EngineRestarted,
        Reason::StateLost,
    ];

    /// The spelling in JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Reason::Forgotten => "forgotten",
            Reason::EpisodeEnd => "episode_end",
            Reason::LateEvent => "late_event",
            Reason::Outage => "outage",
            Reason::RuleChanged => "rule_changed",
            Reason::RuleRemoved => "rule_removed",
            Reason::EngineRestarted => "engine_restarted",
            Reason::StateLost => "state_lost",
        }
    }
}

/// An alert's stable identity: 64 bits of FNV-1a over rule, group and episode start, written
/// as 16 lowercase hex digits (kept as the number: no allocation per alert, a compact key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AlertId(pub u64);

impl std::fmt::Display for AlertId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Text that is not an alert id (16 hex digits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an alert id is 16 hex digits")]
pub struct BadAlertId;

impl std::str::FromStr for AlertId {
    type Err = BadAlertId;
    fn from_str(s: &str) -> Result<AlertId, BadAlertId> {
        if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BadAlertId);
        }
        u64::from_str_radix(s, 16)
            .map(AlertId)
            .map_err(|_| BadAlertId)
    }
}

impl Serialize for AlertId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AlertId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AlertId, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse()
            .map_err(|e| serde::de::Error::custom(format!("{s:?}: {e}")))
    }
}

/// What the alerts of one change share: the state's rules (each alert names its own in
/// them), the group, the events, the reason and the part of the id after the rule's name. A
/// state serving many rules (the same meaning under other names) makes one alert per rule for
/// every change; they differ only in rule, id and message, so each alert is half a cache line
/// and a pointer here, and making one writes nothing but the alert itself.
#[derive(Debug)]
pub(crate) struct Body {
    pub(crate) members: Arc<[Member]>,
    pub(crate) group: Box<[(String, Value)]>,
    pub(crate) events: Box<[Arc<Event>]>,
    /// For an alert that ends an episode because of one event (resolved by it, retracted by
    /// it late): the episode's events, where the message finds the fields that event lacks
    /// (`{src}` of a silent agent's traffic, resolved by a heartbeat). Not output.
    pub(crate) context: Box<[Arc<Event>]>,
    /// How many events the match or episode took, all of them (`events` keeps the last
    /// [`MAX_ALERT_EVENTS`]): the message's `{count}`.
    pub(crate) count: u32,
    pub(crate) reason: Option<Reason>,
    /// What the id hashes after the rule's name ([`Alert::id_tail`]).
    pub(crate) id_tail: Box<[u8]>,
}

/// One alert change: a new alert, or a state change of an existing one (same `id`).
#[derive(Clone, Debug)]
pub struct Alert {
    /// When this state began.
    pub time: Timestamp,
    /// Lifecycle state this change enters.
    pub state: AlertState,
    /// The rule's position in `body.members`, or [`Alert::EVERY_MEMBER`] inside the engine.
    pub(crate) member: u32,
    pub(crate) body: Arc<Body>,
    // No rendered message: it is rendered from the rule's template when read. An alert storm
    // makes thousands per event at 10,000 rules; rendering belongs to whoever reads them (the
    // output, on its own thread), and an alert without a cached text is smaller.
}

/// The most events an alert carries.
pub const MAX_ALERT_EVENTS: usize = 16;

/// The most bytes of one text an alert shows: its message, and each text field of its events
/// (a 64 KiB syslog line, 16 times in each of thousands of alerts, would otherwise make the
/// store, the outputs and the listings grow by the megabyte per alert). A longer text is cut
/// at a character boundary and ends with [`CUT_MARK`].
pub const MAX_ALERT_TEXT: usize = 2048;

/// What ends a text an alert shows cut.
pub const CUT_MARK: &str = "…[cut]";

/// The most bytes the texts of one event an alert shows take together, names included:
/// beyond it, the longest texts are cut further (see [`event_json`]). With at most
/// [`MAX_ALERT_EVENTS`] events, an alert's events stay within 256 KiB however many fields a
/// sender packed into its messages.
pub const MAX_ALERT_EVENT_TEXT: usize = 16 * 1024;

/// `s`, cut to [`MAX_ALERT_TEXT`] bytes (marked) when longer.
pub(crate) fn capped(s: &str) -> std::borrow::Cow<'_, str> {
    cut_to(s, MAX_ALERT_TEXT)
}

/// `s`, cut to `max` bytes (marked, at a character boundary) when longer; a `max` shorter
/// than the mark leaves the mark alone.
fn cut_to(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut end = max.saturating_sub(CUT_MARK.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}{CUT_MARK}", &s[..end]))
}

/// An event as an alert shows it: its JSON, each text cut by [`capped`], and, when its
/// texts and names still take more than [`MAX_ALERT_EVENT_TEXT`] bytes, the longest texts
/// cut to one length, the longest that fits (a short text is never cut for a long one).
fn event_json(e: &Event) -> serde_json::Value {
    let mut v = e.to_json();
    let Some(o) = v.as_object_mut() else {
        return v;
    };
    for x in o.values_mut() {
        if let serde_json::Value::String(t) = x
            && t.len() > MAX_ALERT_TEXT
        {
            *t = capped(t).into_owned();
        }
    }
    let names: usize = o.keys().map(String::len).sum();
    let texts: Vec<usize> = (o.values())
        .filter_map(|x| x.as_str().map(str::len))
        .collect();
    if names + texts.iter().sum::<usize>() <= MAX_ALERT_EVENT_TEXT {
        return v;
    }
    // The longest length every text may keep, found by halving: the texts (none longer than
    // it) then fit what the names leave. The other values (numbers, addresses) are short.
    let room = MAX_ALERT_EVENT_TEXT.saturating_sub(names);
    let fits = |c: usize| texts.iter().map(|&n| n.min(c)).sum::<usize>() <= room;
    let (mut lo, mut hi) = (0, MAX_ALERT_TEXT);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    for x in o.values_mut() {
        if let serde_json::Value::String(t) = x
            && t.len() > lo
        {
            *t = cut_to(t, lo.max(CUT_MARK.len())).into_owned();
        }
    }
    v
}

impl PartialEq for Alert {
    fn eq(&self, o: &Alert) -> bool {
        self.id() == o.id()
            && self.rule() == o.rule()
            && self.severity() == o.severity()
            && self.state == o.state
            && self.group() == o.group()
            && self.time == o.time
            && self.events() == o.events()
            && self.reason() == o.reason()
            && self.message() == o.message()
    }
}

impl Alert {
    /// `member` of a change the engine made for every rule sharing its state, one alert each
    /// to be made when the engine puts its alerts in order: a shared state's change costs one
    /// entry until then, and its rules' alerts come out in rule order by a merge, not a sort.
    /// Never handed out.
    pub(crate) const EVERY_MEMBER: u32 = u32::MAX;

    fn member(&self) -> &Member {
        debug_assert!(
            self.member != Alert::EVERY_MEMBER,
            "an alert for every member left the engine"
        );
        // (The first member for one that would have: never the case, and no panic.)
        let m = &self.body.members;
        m.get(self.member as usize).unwrap_or(&m[0])
    }

    /// The rule's severity (its member's: not kept in each alert).
    pub fn severity(&self) -> Severity {
        self.member().severity
    }

    /// The rule's index in the engine's rule set: the order of alerts at one instant (read
    /// from its member, not kept in each alert: an alert storm makes thousands per event).
    pub(crate) fn rank(&self) -> u32 {
        self.member().rank
    }

    /// Whether it stands for one alert per member ([`Alert::EVERY_MEMBER`]).
    pub(crate) fn for_every_member(&self) -> bool {
        self.member == Alert::EVERY_MEMBER
    }

    /// The (time, rank) of the `i`-th alert it stands for (one, unless it is for every
    /// member), if there is one.
    pub(crate) fn order_of(&self, i: usize) -> Option<(Timestamp, u32)> {
        if self.for_every_member() {
            self.body.members.get(i).map(|m| (self.time, m.rank))
        } else {
            (i == 0).then_some((self.time, self.rank()))
        }
    }

    /// Appends the alerts it stands for to `out`, in member order.
    pub(crate) fn expand_into(&self, out: &mut Vec<Alert>) {
        if !self.for_every_member() {
            out.push(self.clone());
            return;
        }
        out.extend((0..self.body.members.len()).map(|i| self.for_member(i)));
    }

    /// Appends the alerts of `entries`, each for every member of its state and all at one
    /// instant, to `out` in rank order, ties to the earlier entry (as a stable sort would):
    /// a merge of their members, each entry's next rank kept between rounds.
    pub(crate) fn merge_members(entries: &[Alert], out: &mut Vec<Alert>) {
        out.reserve(entries.iter().map(|a| a.body.members.len()).sum());
        if let [a, b] = entries {
            // Two entries (the common case): a plain two-way merge. (Ranks are distinct across
            // states, a rule being the member of one; a tie would go to `a`, made first.)
            let (ma, mb) = (&a.body.members[..], &b.body.members[..]);
            let (mut i, mut j) = (0, 0);
            while let (Some(x), Some(y)) = (ma.get(i), mb.get(j)) {
                if x.rank <= y.rank {
                    out.push(a.for_member(i));
                    i += 1;
                } else {
                    out.push(b.for_member(j));
                    j += 1;
                }
            }
            for (e, from) in [(a, i), (b, j)] {
                out.extend((from..e.body.members.len()).map(|k| e.for_member(k)));
            }
            return;
        }
        // (A spent entry's rank is past every rule's.)
        let rank = |a: &Alert, i: usize| {
            a.body
                .members
                .get(i)
                .map_or(u64::MAX, |m| u64::from(m.rank))
        };
        // Each entry's next rank, and its next member's position.
        let mut ranks: SmallVec<[u64; 16]> = entries.iter().map(|a| rank(a, 0)).collect();
        let mut next: SmallVec<[usize; 16]> = entries.iter().map(|_| 0).collect();
        // (Slices taken once: the loop does not test where the vectors keep their items.)
        let (ranks, next) = (&mut ranks[..], &mut next[..]);
        loop {
            // The smallest rank, the first entry of it (a scan of the ranks alone).
            let (mut e, mut best) = (0, u64::MAX);
            for (j, &r) in ranks.iter().enumerate() {
                if r < best {
                    (e, best) = (j, r);
                }
            }
            if best == u64::MAX {
                break;
            }
            let (Some(a), Some(i)) = (entries.get(e), next.get_mut(e)) else {
                break;
            };
            if *i >= a.body.members.len() {
                break;
            }
            out.push(a.for_member(*i));
            *i += 1;
            let r = rank(a, *i);
            if let Some(slot) = ranks.get_mut(e) {
                *slot = r;
            }
        }
    }

    /// The `i`-th alert it stands for (see [`Alert::order_of`]).
    pub(crate) fn nth(&self, i: usize) -> Alert {
        if !self.for_every_member() {
            return self.clone();
        }
        self.for_member(i)
    }

    /// The alert of the `i`-th member of a change for every member.
    #[inline]
    fn for_member(&self, i: usize) -> Alert {
        Alert {
            time: self.time,
            state: self.state,
            member: i as u32,
            body: self.body.clone(),
        }
    }

    /// Stable identity: a hash of rule, group and episode start (hashed when read: an alert
    /// storm makes thousands per event, and most of each id is hashed once for all of them).
    pub fn id(&self) -> AlertId {
        Alert::id_after(self.member().id_prefix, &self.body.id_tail)
    }

    /// The rule's name.
    pub fn rule(&self) -> &str {
        &self.member().rule.name
    }

    /// Whether the alert is an episode the engine ends (resolved or retracted later: an
    /// absence, a closure), not a match that fires once and stays firing.
    pub fn episodic(&self) -> bool {
        self.member().episodic
    }

    /// The group: the `group_by` names and their values, in `group_by` order.
    pub fn group(&self) -> &[(String, Value)] {
        &self.body.group
    }

    /// The matching events (capped, most recent last).
    pub fn events(&self) -> &[Arc<Event>] {
        &self.body.events
    }

    /// Why, when not obvious: `outage`, `forgotten`, `episode_end`, `late_event` ...
    pub fn reason(&self) -> Option<&'static str> {
        self.body.reason.map(Reason::name)
    }

    /// The message, rendered from the rule's template (at each call: read it once).
    pub fn message(&self) -> String {
        render_message(
            &self.member().rule,
            self.group(),
            self.events(),
            &self.body.context,
            self.body.count,
        )
    }

    /// The stable id of an episode: FNV-1a over rule, group and start.
    pub fn make_id(rule: &str, group: &[Value], start: Timestamp) -> AlertId {
        Alert::make_id_ranked(rule, group, start, 0)
    }

    /// The id of the `rank`-th episode of a group starting at the same instant (rank 0 is
    /// [`Alert::make_id`]).
    pub fn make_id_ranked(rule: &str, group: &[Value], start: Timestamp, rank: u32) -> AlertId {
        let mut tail = Vec::new();
        Alert::id_tail(group, start, rank, &mut tail);
        Alert::id_after(Alert::id_prefix(rule), &tail)
    }

    /// What an id hashes after the rule name (group values, start, rank), written once for
    /// the rules that share a state and alert together.
    pub(crate) fn id_tail(group: &[Value], start: Timestamp, rank: u32, out: &mut Vec<u8>) {
        /// Bytes of a value's text (its `Display`), written without a String.
        struct Bytes<'a>(&'a mut Vec<u8>);
        impl std::fmt::Write for Bytes<'_> {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0.extend_from_slice(s.as_bytes());
                Ok(())
            }
        }
        // Each part is closed as `Fnv::end` closes one.
        for v in group {
            let _ = v.write_to(&mut Bytes(out));
            out.push(Fnv::END);
        }
        out.extend_from_slice(&start.0.to_le_bytes());
        out.push(Fnv::END);
        if rank > 0 {
            out.extend_from_slice(&rank.to_le_bytes());
            out.push(Fnv::END);
        }
    }

    /// The hash state after `rule`'s name: computed once per rule, it leaves only the tail
    /// to hash per alert.
    pub(crate) fn id_prefix(rule: &str) -> u64 {
        let mut h = Fnv::new();
        h.feed(rule.as_bytes());
        h.end();
        h.finish()
    }

    /// The id from a rule's [`Alert::id_prefix`] and the tail from [`Alert::id_tail`].
    pub(crate) fn id_after(prefix: u64, tail: &[u8]) -> AlertId {
        let mut h = Fnv::resume(prefix);
        h.feed(tail);
        AlertId(h.finish())
    }

    /// The alert as the JSON object of DESIGN.md ("Alerts").
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("id".into(), self.id().to_string().into());
        m.insert("rule".into(), self.rule().into());
        m.insert("severity".into(), self.severity().name().into());
        m.insert("state".into(), self.state.name().into());
        let mut g = serde_json::Map::new();
        for (k, v) in self.group() {
            g.insert(k.clone(), v.to_json());
        }
        m.insert("group".into(), serde_json::Value::Object(g));
        m.insert("time".into(), self.time.to_rfc3339().into());
        m.insert("message".into(), capped(&self.message()).into());
        m.insert(
            "events".into(),
            serde_json::Value::Array(self.events().iter().map(|e| event_json(e)).collect()),
        );
        if let Some(r) = self.reason() {
            m.insert("reason".into(), r.into());
        }
        serde_json::Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_at_a_character_boundary_and_marked() {
        assert_eq!(capped("short"), "short");
        let exact = "x".repeat(MAX_ALERT_TEXT);
        assert_eq!(capped(&exact), exact);
        // Three-byte characters: the cut lands inside one and moves back to its start.
        let long = "€".repeat(MAX_ALERT_TEXT);
        let cut = capped(&long);
        assert!(cut.len() <= MAX_ALERT_TEXT, "{}", cut.len());
        assert!(cut.ends_with(CUT_MARK));
        assert!(cut.trim_end_matches(CUT_MARK).chars().all(|c| c == '€'));
        let mut e = Event::new(crate::event::Source::Syslog, Timestamp(0), Timestamp(0));
        e.set(crate::event::Field::Msg, Value::str(&"a".repeat(65_536)));
        e.set(crate::event::Field::Host, Value::str("web1"));
        let v = event_json(&e);
        assert_eq!(v["host"], "web1");
        let msg = v["msg"].as_str().unwrap_or_default();
        assert_eq!(msg.len(), MAX_ALERT_TEXT);
        assert!(msg.ends_with(CUT_MARK));
    }

    /// An event whose many texts together pass MAX_ALERT_EVENT_TEXT is shown with its
    /// longest texts cut to one length, so it fits; its short texts and every name stay.
    #[test]
    fn an_event_of_many_long_fields_is_cut_to_fit() {
        let mut e = Event::new(crate::event::Source::Syslog, Timestamp(0), Timestamp(0));
        e.set(crate::event::Field::Host, Value::str("web1"));
        e.set(crate::event::Field::Msg, Value::str(&"m".repeat(65_536)));
        for i in 0..64 {
            e.set_key(
                crate::event::FieldKey::Named(std::sync::Arc::from(format!("sd.x@1.p{i}"))),
                Value::str(&"v".repeat(1000)),
            );
        }
        let v = event_json(&e);
        let Some(o) = v.as_object() else {
            panic!("an object: {v}")
        };
        let size: usize = o
            .iter()
            .map(|(k, x)| k.len() + x.as_str().map_or(0, str::len))
            .sum();
        assert!(size <= MAX_ALERT_EVENT_TEXT, "{size}");
        assert_eq!(o.keys().filter(|k| k.starts_with("sd.")).count(), 64);
        assert_eq!(v["host"], "web1");
        let p0 = v["sd.x@1.p0"].as_str().unwrap_or_default();
        assert!(p0.ends_with(CUT_MARK) && p0.len() > 100, "{p0}");
        assert_eq!(v["msg"].as_str().map(str::len), Some(p0.len()));
        // Small events are shown whole.
        let mut small = Event::new(crate::event::Source::Syslog, Timestamp(0), Timestamp(0));
        small.set(crate::event::Field::Msg, Value::str("hello"));
        assert_eq!(event_json(&small), small.to_json());
    }

    /// docs/rules.md lists every reason an alert can carry, in the enum's order, and no other.
    #[test]
    fn the_rule_reference_lists_every_reason() {
        let doc = include_str!("../../docs/rules.md");
        let Some(at) = doc.find("`reason` when there is one (") else {
            panic!("docs/rules.md lost its Alerts paragraph")
        };
        let list = &doc[at..doc[at..].find(':').map_or(doc.len(), |e| at + e)];
        let named: Vec<&str> = list.split('`').skip(3).step_by(2).collect();
        assert_eq!(named, Reason::ALL.map(Reason::name));
    }

    /// The id as first written (a String per value, `format!` for the hex): the reference the
    /// allocation-free one must match, since ids are stable across versions.
    fn reference_id(rule: &str, group: &[Value], start: Timestamp, rank: u32) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |bytes: &[u8]| {
            for b in bytes {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            h ^= 0xff;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        };
        feed(rule.as_bytes());
        for v in group {
            feed(v.to_string().as_bytes());
        }
        feed(&start.0.to_le_bytes());
        if rank > 0 {
            feed(&rank.to_le_bytes());
        }
        format!("{h:016x}")
    }

    #[test]
    fn ids_are_those_of_the_first_version_for_every_value_type() {
        let values = [
            Value::str("h1"),
            Value::str(""),
            Value::str("a long host name that is not inline at all, with ünïcode"),
            Value::Int(-42),
            Value::Int(i64::MAX),
            Value::Float(1.5),
            Value::Float(-0.0),
            Value::Bool(true),
            Value::Ip(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1))),
            Value::Ip(std::net::IpAddr::V6(std::net::Ipv6Addr::new(
                0xfe80, 0, 0, 0, 0, 0, 0, 1,
            ))),
            Value::Time(Timestamp(1_780_000_000_123_456_789)),
            Value::Duration(crate::time::Duration(90_000_000_000)),
        ];
        for (i, v) in values.iter().enumerate() {
            for rank in [0, 1, 7] {
                let group = [v.clone(), values[(i + 1) % values.len()].clone()];
                for g in [&group[..1], &group[..], &[]] {
                    let start = Timestamp(i as i64 * 1_000_003 - 5);
                    assert_eq!(
                        Alert::make_id_ranked("ssh-bruteforce", g, start, rank).to_string(),
                        reference_id("ssh-bruteforce", g, start, rank),
                        "{g:?} rank {rank}"
                    );
                }
            }
        }
    }

    /// An alert is three words: at 10,000 rules an event makes several, and they are written
    /// to the caller's buffer (its rule's rank is its member's, not a field).
    #[test]
    fn an_alert_is_three_words() {
        assert_eq!(std::mem::size_of::<Alert>(), 24);
    }

    #[test]
    fn id_is_stable_and_distinguishes() {
        let a = Alert::make_id("r", &[Value::str("h1")], Timestamp(5));
        assert_eq!(a, Alert::make_id("r", &[Value::str("h1")], Timestamp(5)));
        assert_ne!(a, Alert::make_id("r", &[Value::str("h2")], Timestamp(5)));
        assert_ne!(a, Alert::make_id("r", &[Value::str("h1")], Timestamp(6)));
        assert_eq!(a.to_string().len(), 16);
    }

    #[test]
    fn ids_keep_leading_zeros_and_read_back() {
        let id = AlertId(0x00ab_0000_0000_0001);
        assert_eq!(id.to_string(), "00ab000000000001");
        assert_eq!("00ab000000000001".parse::<AlertId>(), Ok(id));
        assert_eq!(id.to_string(), "00ab000000000001");
        assert_ne!(id.to_string(), "ab000000000001");
        let json = serde_json::to_string(&id).ok();
        assert_eq!(json.as_deref(), Some("\"00ab000000000001\""));
        assert_eq!(
            serde_json::from_str::<AlertId>("\"00ab000000000001\"").ok(),
            Some(id)
        );
        assert_ne!(id.to_string(), "00AB000000000001");
        assert!(serde_json::from_str::<AlertId>("\"not hex\"").is_err());
    }
}
