//! Routing: which CEP shard owns which (rule, group).
//!
//! Pure code (no actors, no clock): the ingest side calls [`RoutePlan::route`] for every
//! parsed event (and `ingest::dedup` for every message first), and tests call it directly.
//!
//! # Ownership
//!
//! - A rule **with** `group_by`: the group `(rule, key)` is owned by shard
//!   `stable_hash(key) % shards` (core's [`Partition`]). The key is computed exactly as the
//!   engine does, by a stateless routing engine ([`Engine::owners`]). Hashing the key alone
//!   (not the rule) sends an event that several rules group the same way to a single shard.
//!   `expect`ed keys are split the same way, so each expected group is armed on one shard.
//! - A rule **without** `group_by` is one serial group, owned by the shard its meaning hashes
//!   to, so ungrouped rules spread over the shards as the patent balances CEP operators over
//!   workers (and rules that share state land together).
//!
//! Each shard runs one engine over all the rules with its [`Partition`] (see `shard.rs`): it
//! receives an event once if it owns any group the event concerns, and its engine ignores the
//! groups it does not own, so each (rule, group) lives on exactly one shard.

use cepheus_core::engine::{Engine, EngineConfig, Partition};
use cepheus_core::rules::ir::RuleSet;

/// The routing table of one rule set over a number of shards: which shard owns which
/// (rule, group) is [`Partition::owner`] in core, the same function the shards' engines use.
#[derive(Debug)]
pub struct RoutePlan {
    rules: RuleSet,
    shards: usize,
}

impl RoutePlan {
    /// The plan for `rules` over `shards` shards.
    pub fn new(rules: &RuleSet, shards: usize) -> RoutePlan {
        RoutePlan {
            rules: rules.clone(),
            shards: shards.max(1),
        }
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The rules (every shard runs all of them, each on its own share of the groups).
    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    /// A routing engine for this plan: it evaluates conditions and forms group keys exactly as
    /// the shards do, and holds no state. Each ingest task builds its own (routing needs
    /// scratch space).
    pub fn router(&self) -> Option<Engine> {
        match Engine::new(&self.rules, EngineConfig::default()) {
            Ok(e) => Some(e),
            Err(err) => {
                tracing::error!(error = %err, "cannot build the routing engine");
                None
            }
        }
    }

    /// The engine configuration of shard `s`: it owns its share of every rule's groups.
    pub fn shard_config(&self, s: usize) -> EngineConfig {
        EngineConfig {
            partition: Some(Partition {
                index: s as u32,
                count: self.shards as u32,
            }),
            ..EngineConfig::default()
        }
    }

    /// The rules shard `s` runs a part of: every grouped rule, and the ungrouped rules it owns.
    pub fn shard_rule_names(&self, s: usize) -> Vec<String> {
        self.rules
            .rules
            .iter()
            .filter(|r| {
                !r.group_by.is_empty()
                    || Partition::owner(r, &r.canonical(), &[], self.shards as u32) == s as u32
            })
            .map(|r| r.name.clone())
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use cepheus_core::rules::compile_str;
    use cepheus_core::time::Timestamp;

    fn rules(text: &str) -> RuleSet {
        let c = compile_str("t.toml", text);
        c.rules.unwrap_or_else(|| panic!("{:?}", c.diagnostics))
    }

    fn syslog(app: &str, host: &str, msg: &str) -> cepheus_core::event::Event {
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
        let mut out = Vec::new();
        let mut armed = 0;
        for s in 0..3 {
            let mut e = Engine::new(plan.rules(), plan.shard_config(s)).unwrap();
            e.advance_to(Timestamp::from_secs(1), &mut out);
            armed += e.stats()[0].groups;
        }
        assert_eq!(armed, 6, "each expected host is armed on exactly one shard");
        // The ungrouped rule is listed on exactly one shard.
        let owners = (0..3)
            .filter(|&s| {
                plan.shard_rule_names(s)
                    .iter()
                    .any(|n| n == "any-heartbeat")
            })
            .count();
        assert_eq!(owners, 1);
        let mut router = plan.router().unwrap();
        let any = &set.rules[1];
        for host in ["a", "b", "c", "zz"] {
            let mut shards = Vec::new();
            router.owners(
                &std::sync::Arc::new(syslog("heartbeat", host, "x")),
                3,
                &mut shards,
            );
            let key_owner = Partition::owner(
                &set.rules[0],
                &set.rules[0].canonical(),
                &[cepheus_core::event::Value::str(host)],
                3,
            );
            let rule_owner = Partition::owner(any, &any.canonical(), &[], 3);
            let mut want = vec![key_owner, rule_owner];
            want.sort_unstable();
            want.dedup();
            assert_eq!(shards, want, "{host}");
        }
        let mut shards = Vec::new();
        router.owners(
            &std::sync::Arc::new(syslog("sshd", "a", "x")),
            3,
            &mut shards,
        );
        assert!(shards.is_empty());
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
        let (a, b) = (plan.shard_rule_names(0), plan.shard_rule_names(1));
        assert!(!a.is_empty() && !b.is_empty(), "{a:?} {b:?}");
        assert_eq!(a.len() + b.len(), 20);
    }
}
