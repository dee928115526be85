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

/// How often the counters are read (each read walks every rule state).
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// What was last said of each rule state (by the name of its first rule).
#[derive(Debug, Default)]
pub struct BudgetWatch {
    said: HashMap<String, [Said; 3]>,
    next: Option<Instant>,
}

/// One kind's counter when last said, and when.
#[derive(Clone, Copy, Debug, Default)]
struct Said {
    count: u64,
    at: Option<Instant>,
}

/// One warning: which rules, what happened, how often since the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The rules sharing the state (one, unless several rules mean the same).
    pub rules: String,
    /// What the warning says.
    pub text: String,
}

impl BudgetWatch {
    /// Whether the counters are to be read at `now` (every [`CHECK_EVERY`]).
    pub fn due(&mut self, now: Instant) -> bool {
        if self.next.is_some_and(|n| now < n) {
            return false;
        }
        self.next = Some(now + CHECK_EVERY);
        true
    }

    /// The warnings due at `now` for these counters (one engine's), remembering what it said.
    pub fn check<'a>(
        &mut self,
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
            if !self.said.contains_key(*first) {
                // Nothing to say of a rule that never refused, dropped or saw late anything.
                if counts == [0; 3] {
                    continue;
                }
                self.said.insert((*first).to_string(), Default::default());
            }
            let Some(said) = self.said.get_mut(*first) else {
                continue;
            };
            for (kind, (&count, said)) in counts.iter().zip(said.iter_mut()).enumerate() {
                if count < said.count {
                    // The rule state was rebuilt (a reload that changed it): counting anew.
                    *said = Said { count, at: None };
                    continue;
                }
                let quiet = said
                    .at
                    .is_none_or(|at| now.duration_since(at) >= REPEAT_AFTER);
                if count == said.count || !quiet {
                    continue;
                }
                let n = count - said.count;
                let since = match said.at {
                    Some(at) => format!(" in the last {}s", now.duration_since(at).as_secs()),
                    None => String::new(),
                };
                let text = match kind {
                    0 => format!(
                        "refused {n} new group(s){since}: its max_groups budget is full ({} groups on this shard), so a new key (a new attacker, say) is not watched; raise `max_groups` or group by fewer values (groups_rejected in /stats)",
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
                *said = Said {
                    count,
                    at: Some(now),
                };
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
        let t0 = Instant::now();
        assert!(w.due(t0));
        assert!(!w.due(t0 + Duration::from_secs(1)));
        assert!(w.due(t0 + CHECK_EVERY));
        assert!(w.check(e.budget_counters(), t0).is_empty());
        for (i, h) in ["h1", "h2", "h3", "h4"].iter().enumerate() {
            push(&mut e, h, i as i64);
        }
        let said = w.check(e.budget_counters(), t0);
        assert_eq!(said.len(), 1, "{said:?}");
        assert_eq!(said[0].rules, "r");
        assert!(
            said[0].text.starts_with(
                "refused 2 new group(s): its max_groups budget is full (2 groups on this shard)"
            ),
            "{said:?}"
        );
        // More refused within the minute: not said again yet; nothing new: nothing said.
        push(&mut e, "h5", 5);
        assert!(
            w.check(e.budget_counters(), t0 + Duration::from_secs(30))
                .is_empty()
        );
        let later = t0 + REPEAT_AFTER;
        let said = w.check(e.budget_counters(), later);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0]
                .text
                .starts_with("refused 1 new group(s) in the last 60s"),
            "{said:?}"
        );
        assert!(
            w.check(e.budget_counters(), later + REPEAT_AFTER)
                .is_empty()
        );
    }
}
