//! Routing: which CEP shard owns which (rule, group), and the duplicate filter.
//!
//! Pure code (no actors, no clock): the ingest side calls [`RoutePlan::route`] for every
//! parsed event and [`Dedup::seen`] for every message, and tests call them directly.
//!
//! # Ownership
//!
//! - A rule **with** `group_by`: the group `(rule, key)` is owned by shard
//!   `hash(key) % shards`. The key is computed exactly as the engine does: the rule set's
//!   predicate index ([`Filter`]) finds the definitions the event satisfies, and each
//!   definition's `group_fields` are looked up in the event and the condition's captures.
//!   Hashing the key alone (not the rule) sends an event that several rules group the same way
//!   to a single shard. `expect`ed keys are split the same way, so each expected group is armed
//!   on exactly one shard.
//! - A rule **without** `group_by` is one serial group: it is owned by shard
//!   `hash(rule name) % shards` (stable across reloads that add or remove other rules), so
//!   ungrouped rules spread over the shards as the patent balances CEP operators over workers.
//!
//! Each shard runs one engine per rule it owns a part of (see `shard.rs`), and only receives
//! an event for the rules whose group it owns, so no (rule, group) is ever evaluated twice.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use cepheus_core::engine::filter::Filter;
use cepheus_core::event::{Event, Value};
use cepheus_core::rules::ir::{Captures, Rule, RuleSet, lookup};
use cepheus_core::time::{Duration, Timestamp};

/// A fixed-key hasher: ownership must not change between runs of the same binary.
#[derive(Clone, Copy, Debug, Default)]
struct FixedState;

impl BuildHasher for FixedState {
    type Hasher = std::hash::DefaultHasher;
    fn build_hasher(&self) -> Self::Hasher {
        std::hash::DefaultHasher::new()
    }
}

/// The shard that owns a group key (a rule with `group_by`).
pub fn key_shard(key: &[Value], shards: usize) -> usize {
    (FixedState.hash_one(key) % shards.max(1) as u64) as usize
}

/// The shard that owns a rule without `group_by`.
pub fn rule_shard(name: &str, shards: usize) -> usize {
    (FixedState.hash_one(name) % shards.max(1) as u64) as usize
}

/// One delivery: this event, for this rule, to the shard that owns its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// The shard.
    pub shard: usize,
    /// The rule's index in the plan's rule set.
    pub rule: u32,
}

/// The routing table of one rule set over a number of shards.
pub struct RoutePlan {
    rules: RuleSet,
    names: Vec<Arc<str>>,
    filter: Filter,
    shards: usize,
    /// For each shard, the rules it runs (grouped rules with their `expect` narrowed to the
    /// keys it owns; ungrouped rules on their owner only).
    per_shard: Vec<RuleSet>,
}

impl std::fmt::Debug for RoutePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutePlan")
            .field("rules", &self.names)
            .field("shards", &self.shards)
            .finish()
    }
}

impl RoutePlan {
    /// The plan for `rules` over `shards` shards.
    pub fn new(rules: &RuleSet, shards: usize) -> RoutePlan {
        let shards = shards.max(1);
        let mut per_shard = vec![RuleSet::default(); shards];
        for rule in &rules.rules {
            if rule.group_by.is_empty() {
                per_shard[rule_shard(&rule.name, shards)]
                    .rules
                    .push(rule.clone());
                continue;
            }
            for (s, set) in per_shard.iter_mut().enumerate() {
                let mut r: Rule = (**rule).clone();
                r.expect.retain(|k| key_shard(k, shards) == s);
                set.rules.push(Arc::new(r));
            }
        }
        RoutePlan {
            names: rules
                .rules
                .iter()
                .map(|r| Arc::from(r.name.as_str()))
                .collect(),
            filter: Filter::new(rules, true),
            rules: rules.clone(),
            shards,
            per_shard,
        }
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The rules shard `s` runs.
    pub fn shard_rules(&self, s: usize) -> &RuleSet {
        &self.per_shard[s.min(self.shards - 1)]
    }

    /// The name of rule `i`.
    pub fn rule_name(&self, i: u32) -> &Arc<str> {
        &self.names[i as usize]
    }

    /// Appends where `ev` must go (sorted, without repeats) to `out`; returns `true` when some
    /// rule's definitions gave the event keys owned by different shards (see ARCHITECTURE.md:
    /// each of those shards then sees the event for that rule).
    pub fn route(&self, ev: &Event, cands: &mut Vec<u32>, out: &mut Vec<Target>) -> bool {
        let start = out.len();
        cands.clear();
        self.filter.candidates(ev, cands);
        let mut caps = Captures::new();
        let mut key: Vec<Value> = Vec::new();
        for &ci in cands.iter() {
            caps.clear();
            if !self.filter.eval(ci, ev, &mut caps) {
                continue;
            }
            for &(rule_idx, def_idx) in &self.filter.preds[ci as usize].consumers {
                let rule = &self.rules.rules[rule_idx as usize];
                let shard = if rule.group_by.is_empty() {
                    rule_shard(&rule.name, self.shards)
                } else {
                    let def = &rule.events[def_idx as usize];
                    key.clear();
                    let mut complete = true;
                    for f in &def.group_fields {
                        match lookup(ev, &caps, f) {
                            Some(v) => key.push(v.get().clone()),
                            None => {
                                complete = false;
                                break;
                            }
                        }
                    }
                    if !complete {
                        // The engine counts it as keyless; no shard needs it.
                        continue;
                    }
                    key_shard(&key, self.shards)
                };
                out.push(Target {
                    shard,
                    rule: rule_idx,
                });
            }
        }
        let tail = &mut out[start..];
        tail.sort_unstable();
        let mut w = start;
        let mut split = false;
        for r in start..out.len() {
            if r > start && out[r] == out[w - 1] {
                continue;
            }
            if w > start && out[w - 1].rule == out[r].rule {
                split = true;
            }
            out[w] = out[r];
            w += 1;
        }
        out.truncate(w);
        split
    }
}

/// Drops exact duplicates (same bytes from the same peer) seen within a window.
///
/// Bounded: at most `capacity` messages are remembered (a ring of their hashes in arrival
/// order plus a count per hash); older ones are forgotten first, so under a flood of unique
/// messages the filter degrades to "no duplicate found", never to unbounded memory. A hash
/// collision (64 bits) could drop a distinct message: about one in 10^14 at full capacity.
#[derive(Debug)]
pub struct Dedup {
    window: Duration,
    capacity: usize,
    ring: VecDeque<(u64, Timestamp)>,
    counts: HashMap<u64, u32>,
}

impl Dedup {
    /// A filter remembering messages for `window`, at most `capacity` of them.
    pub fn new(window: Duration, capacity: usize) -> Dedup {
        Dedup {
            window,
            capacity: capacity.max(1),
            ring: VecDeque::new(),
            counts: HashMap::new(),
        }
    }

    /// Whether the filter is on.
    pub fn enabled(&self) -> bool {
        self.window.0 > 0
    }

    /// Messages remembered.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Records a message; `true` when the same bytes came from the same peer within the
    /// window (the message is a duplicate and must be dropped).
    pub fn seen(&mut self, bytes: &[u8], peer: Option<IpAddr>, now: Timestamp) -> bool {
        if !self.enabled() {
            return false;
        }
        let cutoff = now.sub(self.window);
        while let Some(&(h, t)) = self.ring.front() {
            if t >= cutoff && self.ring.len() < self.capacity {
                break;
            }
            self.ring.pop_front();
            if let Some(c) = self.counts.get_mut(&h) {
                *c -= 1;
                if *c == 0 {
                    self.counts.remove(&h);
                }
            }
        }
        let mut hasher = FixedState.build_hasher();
        peer.hash(&mut hasher);
        bytes.hash(&mut hasher);
        let h = hasher.finish();
        let dup = self.counts.contains_key(&h);
        self.ring.push_back((h, now));
        *self.counts.entry(h).or_insert(0) += 1;
        dup
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cepheus_core::rules::compile_str;

    fn rules(text: &str) -> RuleSet {
        let c = compile_str("t.toml", text);
        c.rules.unwrap_or_else(|| panic!("{:?}", c.diagnostics))
    }

    fn syslog(app: &str, host: &str, msg: &str) -> Event {
        let p = crate::ingest::syslog::SyslogParser::default();
        let line = format!("<13>1 2026-11-30T10:00:00Z {host} {app} - - - {msg}");
        p.parse(line.as_bytes(), Timestamp::from_secs(1), None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    const TWO: &str = r#"
[[rule]]
name = "hb"
severity = "low"
group_by = ["host"]
expect = ["a", "b", "c", "d", "e", "f"]
events.hb = 'syslog and app == "heartbeat"'
pattern = "absent(hb) for 60s"

[[rule]]
name = "any-heartbeat"
severity = "low"
events.hb = 'syslog and app == "heartbeat"'
pattern = "hb{3,} within 1m"
"#;

    #[test]
    fn each_group_has_one_owner_and_expect_is_split() {
        let set = rules(TWO);
        let plan = RoutePlan::new(&set, 3);
        let expected: usize = (0..3)
            .map(|s| plan.shard_rules(s).rules[0].expect.len())
            .sum();
        assert_eq!(expected, 6);
        // The ungrouped rule runs on exactly one shard.
        let owners = (0..3)
            .filter(|&s| {
                plan.shard_rules(s)
                    .rules
                    .iter()
                    .any(|r| r.name == "any-heartbeat")
            })
            .count();
        assert_eq!(owners, 1);
        let mut cands = Vec::new();
        for host in ["a", "b", "c", "zz"] {
            let mut out = Vec::new();
            let split = plan.route(&syslog("heartbeat", host, "x"), &mut cands, &mut out);
            assert!(!split);
            assert_eq!(out.len(), 2, "{out:?}");
            let hb = out.iter().find(|t| t.rule == 0).map(|t| t.shard);
            assert_eq!(hb, Some(key_shard(&[Value::str(host)], 3)));
            let any = out.iter().find(|t| t.rule == 1).map(|t| t.shard);
            assert_eq!(any, Some(rule_shard("any-heartbeat", 3)));
        }
        let mut out = Vec::new();
        plan.route(&syslog("sshd", "a", "x"), &mut cands, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn twenty_ungrouped_rules_spread() {
        let mut text = String::new();
        for i in 0..20 {
            text.push_str(&format!(
                "[[rule]]\nname = \"r{i}\"\nseverity = \"low\"\nevents.e = 'syslog and app == \"x{i}\"'\npattern = \"e\"\n"
            ));
        }
        let plan = RoutePlan::new(&rules(&text), 2);
        assert!(!plan.shard_rules(0).rules.is_empty());
        assert!(!plan.shard_rules(1).rules.is_empty());
        assert_eq!(
            plan.shard_rules(0).rules.len() + plan.shard_rules(1).rules.len(),
            20
        );
    }

    #[test]
    fn dedup_window_and_bound() {
        let peer: Option<IpAddr> = "10.0.0.1".parse().ok();
        let other: Option<IpAddr> = "10.0.0.2".parse().ok();
        let mut d = Dedup::new(Duration::from_secs(2), 4);
        let t = Timestamp::from_secs(100);
        assert!(!d.seen(b"m", peer, t));
        assert!(d.seen(b"m", peer, t.add(Duration::from_secs(1))));
        assert!(!d.seen(b"m", other, t.add(Duration::from_secs(1))));
        // Outside the window: new again.
        assert!(!d.seen(b"m", peer, t.add(Duration::from_secs(10))));
        for i in 0..100u32 {
            d.seen(&i.to_le_bytes(), peer, t.add(Duration::from_secs(10)));
        }
        assert!(d.len() <= 4);
        let mut off = Dedup::new(Duration::ZERO, 4);
        assert!(!off.seen(b"m", peer, t));
        assert!(!off.seen(b"m", peer, t));
    }
}
