//! Budget warnings: a rule that refuses new groups, drops partial matches or sees late events
//! is said in the log, at most once a minute per rule and kind.
//!
//! The engine counts each of these per rule (`/stats`: `groups_rejected`, `partial_evicted`,
//! `late`), but an operator reads the log: a flood of unique keys that fills a rule's
//! `max_groups` makes it blind to a new attacker, and nothing else would say so.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cepheus_core::engine::BudgetView;

/// How often one rule's warning of one kind may be repeated.
pub const REPEAT_AFTER: Duration = Duration::from_secs(60);

/// How often each shard reads its counters (each read walks every rule state).
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// What was last read and said of each rule state (by the name of its first rule), over all
/// the shards: one watch is shared by them, so a rule is said once, with its totals.
#[derive(Debug, Default)]
pub struct BudgetWatch {
    rules: HashMap<String, Entry>,
}

/// One rule state: each shard's last counts and when it read them, and per kind the total
/// when last said, when, and since when a count not said yet waits for the other shards.
#[derive(Debug, Default)]
struct Entry {
    shards: Vec<[u64; 3]>,
    read: Vec<Option<Instant>>,
    said: [u64; 3],
    at: [Option<Instant>; 3],
    pending: [Option<Instant>; 3],
}

impl Entry {
    /// Room for `n` shards.
    fn fit(&mut self, n: usize) {
        if self.shards.len() < n {
            self.shards.resize(n, [0; 3]);
            self.read.resize(n, None);
        }
    }
}

/// One warning: which rules, what happened, how often since the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The rules sharing the state (one, unless several rules mean the same).
    pub rules: String,
    /// What the warning says.
    pub text: String,
}

/// Each shard's clock for reading its counters (every [`CHECK_EVERY`]).
#[derive(Debug, Default)]
pub struct Due {
    next: Option<Instant>,
}

impl Due {
    /// Whether the counters are to be read at `now`.
    pub fn due(&mut self, now: Instant) -> bool {
        if self.next.is_some_and(|n| now < n) {
            return false;
        }
        self.next = Some(now + CHECK_EVERY);
        true
    }
}

impl BudgetWatch {
    /// Takes shard `shard`'s counters (of `shards`) as already said: what a restored engine
    /// (and the journal replayed into it) counted in an earlier run, which that run said.
    /// A restart does not say it again as if it were new.
    pub fn baseline<'a>(
        &mut self,
        shard: usize,
        shards: usize,
        states: impl Iterator<Item = BudgetView<'a>>,
    ) {
        for s in states {
            let Some(first) = s.rules.first() else {
                continue;
            };
            let c = s.counters;
            let counts = [c.groups_rejected, c.partial_evicted, c.late];
            if counts == [0; 3] {
                continue;
            }
            let e = self.rules.entry((*first).to_string()).or_default();
            e.fit(shards.max(shard + 1));
            e.shards[shard] = counts;
            for (said, n) in e.said.iter_mut().zip(counts) {
                *said += n;
            }
        }
    }

    /// Takes shard `shard`'s counters (of `shards`), and gives the warnings due at `now`.
    pub fn check<'a>(
        &mut self,
        shard: usize,
        shards: usize,
        states: impl Iterator<Item = BudgetView<'a>>,
        now: Instant,
    ) -> Vec<Warning> {
        let mut out = Vec::new();
        for s in states {
            let Some(first) = s.rules.first() else {
                continue;
            };
            let c = s.counters;
            let counts = [c.groups_rejected, c.partial_evicted, c.late];
            if !self.rules.contains_key(*first) {
                // Nothing to say of a rule that never refused, dropped or saw late anything.
                if counts == [0; 3] {
                    continue;
                }
                self.rules.insert((*first).to_string(), Entry::default());
            }
            let Some(e) = self.rules.get_mut(*first) else {
                continue;
            };
            e.fit(shards.max(shard + 1));
            e.shards[shard] = counts;
            e.read[shard] = Some(now);
            for kind in 0..3 {
                let total: u64 = e.shards.iter().map(|c| c[kind]).sum();
                if total < e.said[kind] {
                    // A rule state rebuilt (a reload that changed it) counts anew.
                    e.said[kind] = total;
                    e.pending[kind] = None;
                    continue;
                }
                let quiet = e.at[kind].is_none_or(|at| now.duration_since(at) >= REPEAT_AFTER);
                if total == e.said[kind] || !quiet {
                    continue;
                }
                // Said once every shard has read its counts since this one saw them (a burst
                // spread by key reaches all shards at once: one warning with the whole count),
                // or two rounds later whatever a shard that stopped reading says.
                let since = *e.pending[kind].get_or_insert(now);
                let all_read = e.read[..shards.min(e.read.len())]
                    .iter()
                    .all(|r| r.is_some_and(|r| r >= since));
                if !all_read && now.duration_since(since) < 2 * CHECK_EVERY {
                    continue;
                }
                e.pending[kind] = None;
                let n = total - e.said[kind];
                let since = match e.at[kind] {
                    Some(at) => format!(" in the last {}s", now.duration_since(at).as_secs()),
                    None => String::new(),
                };
                let spread = if shards > 1 {
                    format!(", spread over {shards} shards by key")
                } else {
                    String::new()
                };
                let text = match kind {
                    0 => format!(
                        "refused {n} new group(s){since}: its max_groups budget is full ({} groups{spread}), so a new key (a new attacker, say) is not watched; raise `max_groups` or group by fewer values (groups_rejected in /stats)",
                        s.max_groups
                    ),
                    1 => format!(
                        "dropped {n} partial match(es){since}: a group held max_partial_matches ({}), and the oldest go; raise it or shorten `within` (partial_evicted in /stats)",
                        s.max_partial_matches
                    ),
                    _ => format!(
                        "{n} event(s) came late{since} (below the watermark: not matched); raise `max_delay` if a source lags (late in /stats)"
                    ),
                };
                out.push(Warning {
                    rules: s.rules.join(", "),
                    text,
                });
                e.said[kind] = total;
                e.at[kind] = Some(now);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use cepheus_core::engine::{Engine, EngineConfig};
    use cepheus_core::event::{Event, Field, Source, Value};
    use cepheus_core::rules::compile_str;
    use cepheus_core::time::Timestamp;

    use super::*;

    fn engine(max_groups: u64) -> Engine {
        let text = format!(
            "[[rule]]\nname = \"r\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nmax_groups = {max_groups}\nevents.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\npattern = \"seq(a, b) within 1m\"\n"
        );
        let rules = compile_str("r.toml", &text).rules.unwrap();
        Engine::new(&rules, EngineConfig::default()).unwrap()
    }

    fn push(e: &mut Engine, host: &str, s: i64) {
        let t = Timestamp(s * 1_000_000_000);
        let mut ev = Event::new(Source::Syslog, t, t);
        ev.set(Field::App, Value::str("a"));
        ev.set(Field::Host, Value::str(host));
        e.push(ev, &mut Vec::new());
    }

    #[test]
    fn a_full_group_budget_is_said_once_a_minute_with_the_count() {
        let mut e = engine(2);
        let mut w = BudgetWatch::default();
        let mut due = Due::default();
        let t0 = Instant::now();
        assert!(due.due(t0));
        assert!(!due.due(t0 + Duration::from_secs(1)));
        assert!(due.due(t0 + CHECK_EVERY));
        assert!(w.check(0, 1, e.budget_counters(), t0).is_empty());
        for (i, h) in ["h1", "h2", "h3", "h4"].iter().enumerate() {
            push(&mut e, h, i as i64);
        }
        let said = w.check(0, 1, e.budget_counters(), t0);
        assert_eq!(said.len(), 1, "{said:?}");
        assert_eq!(said[0].rules, "r");
        assert!(
            said[0]
                .text
                .starts_with("refused 2 new group(s): its max_groups budget is full (2 groups),"),
            "{said:?}"
        );
        // More refused within the minute: not said again yet; nothing new: nothing said.
        push(&mut e, "h5", 5);
        assert!(
            w.check(0, 1, e.budget_counters(), t0 + Duration::from_secs(30))
                .is_empty()
        );
        let later = t0 + REPEAT_AFTER;
        let said = w.check(0, 1, e.budget_counters(), later);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0]
                .text
                .starts_with("refused 1 new group(s) in the last 60s"),
            "{said:?}"
        );
        assert!(
            w.check(0, 1, e.budget_counters(), later + REPEAT_AFTER)
                .is_empty()
        );
    }

    /// What a restored engine counted was said by the run that counted it: a restart says
    /// only what is refused after it.
    #[test]
    fn a_restart_does_not_say_old_counts_again() {
        let mut e = engine(2);
        for (i, h) in ["h1", "h2", "h3", "h4"].iter().enumerate() {
            push(&mut e, h, i as i64);
        }
        let mut w = BudgetWatch::default();
        w.baseline(0, 1, e.budget_counters());
        let t0 = Instant::now();
        assert!(w.check(0, 1, e.budget_counters(), t0).is_empty());
        push(&mut e, "h5", 5);
        let said = w.check(0, 1, e.budget_counters(), t0);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].text.starts_with("refused 1 new group(s)"),
            "{said:?}"
        );
    }

    #[test]
    fn shards_are_said_together_once_per_rule() {
        // Two shards' engines, each refusing groups of the same rule in one burst: one
        // warning, once both have read their counts, with the total and the rule's budget.
        let (mut a, mut b) = (engine(4), engine(4));
        for (i, h) in ["h1", "h2", "h3", "h4", "h5", "h6"].iter().enumerate() {
            push(&mut a, h, i as i64);
            push(&mut b, h, i as i64);
        }
        let mut w = BudgetWatch::default();
        let t0 = Instant::now();
        assert!(w.check(0, 2, a.budget_counters(), t0).is_empty());
        let t1 = t0 + Duration::from_secs(1);
        let said = w.check(1, 2, b.budget_counters(), t1);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].text.starts_with("refused 4 new group(s):"),
            "{said:?}"
        );
        assert!(
            said[0]
                .text
                .contains("(4 groups, spread over 2 shards by key)"),
            "{said:?}"
        );
        assert!(w.check(0, 2, a.budget_counters(), t1).is_empty());
        // A minute later, one more: said once the other shard has read too.
        push(&mut a, "h7", 7);
        let t2 = t1 + REPEAT_AFTER;
        assert!(w.check(0, 2, a.budget_counters(), t2).is_empty());
        let said = w.check(1, 2, b.budget_counters(), t2 + Duration::from_secs(1));
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0]
                .text
                .starts_with("refused 1 new group(s) in the last 61s"),
            "{said:?}"
        );
        // A shard that stops reading (stuck) holds the warning back two rounds at most.
        push(&mut a, "h8", 8);
        let t3 = t2 + 2 * REPEAT_AFTER;
        assert!(w.check(0, 2, a.budget_counters(), t3).is_empty());
        assert!(
            w.check(0, 2, a.budget_counters(), t3 + CHECK_EVERY)
                .is_empty()
        );
        let said = w.check(0, 2, a.budget_counters(), t3 + 2 * CHECK_EVERY);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].text.starts_with("refused 1 new group(s)"),
            "{said:?}"
        );
    }
}
