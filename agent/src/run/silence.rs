//! Silences: an operator mutes, for a while, the notifications of the alerts of a rule, a
//! group or both (a host in maintenance, a known incident), as Alertmanager's silences do.
//!
//! A silence is active from `starts_at` to `ends_at`, by the agent's clock. An alert that
//! begins firing while a silence matching it is active is *muted*: it is kept in the store and
//! written to stdout and `output.file` as any other, with a `silenced` field naming the
//! silence, but `output.webhook` and `output.syslog` do not send it, nor its end (the
//! receivers never heard of it; the end carries `silenced` too). When the silence ends (its
//! time, or `cepheus silence expire`), the alerts it muted that still fire are sent to those
//! outputs then, without `silenced`, and their ends follow as usual. Alerts already firing
//! when a silence begins were notified, and so are their ends.
//!
//! The silences live in the store (`silences` tree) and in the alert sink, which alone changes
//! them (the API asks it); this module holds their shape and matching, no I/O.

use std::collections::BTreeMap;

use cepheus_core::rules::ir::Severity;
use cepheus_core::time::Timestamp;
use serde::{Deserialize, Serialize};

/// Silences kept at most, ended ones included (an ended silence is dropped first, the one
/// that ended first; none is dropped while it may still mute).
pub const MAX_SILENCES: usize = 1000;

/// How long an ended silence stays listed.
pub const KEPT_AFTER_END: cepheus_core::time::Duration =
    cepheus_core::time::Duration::from_secs(7 * 24 * 3600);

/// How much sooner a silence made this recently may end and still stand for one asked again
/// (a key pressed twice, a command run again a moment later: `--for 1h` then ends a little
/// later each time, and would otherwise make a new silence each time). An older one that
/// ends sooner is not the same: asking again then extends the muting.
pub const REPEAT_SLACK: cepheus_core::time::Duration = cepheus_core::time::Duration::from_secs(60);

/// How far ahead a silence may end.
pub const MAX_LENGTH: cepheus_core::time::Duration =
    cepheus_core::time::Duration::from_secs(366 * 24 * 3600);

/// The most group fields one silence names.
pub const MAX_MATCHERS: usize = 16;

/// The longest text a silence keeps (its rule, a group value, `by`, `comment`), in bytes.
pub const MAX_TEXT: usize = 1024;

/// One silence, as the API and the store hold it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Silence {
    /// 16 hexadecimal digits.
    pub id: String,
    /// Only the alerts of this rule (by name); any rule when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Only the alerts whose group has these values (each field named must be in the group,
    /// with this value as text); any group when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group: BTreeMap<String, String>,
    /// Only the alerts of these severities; any severity when empty (a maintenance window
    /// that mutes what is `low` and `info` while what is `critical` still pages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub severity: Vec<Severity>,
    /// When it begins muting.
    #[serde(with = "rfc3339")]
    pub starts_at: Timestamp,
    /// When it stops.
    #[serde(with = "rfc3339")]
    pub ends_at: Timestamp,
    /// Who made it.
    pub by: String,
    /// Why.
    #[serde(default)]
    pub comment: String,
    /// When it was made.
    #[serde(with = "rfc3339")]
    pub created_at: Timestamp,
    /// Its end was dealt with: the alerts it muted that still fired were sent.
    #[serde(default)]
    pub ended: bool,
}

/// A silence asked for (`POST /silences/add`), before the agent gives it an id.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSilence {
    /// See [`Silence::rule`].
    #[serde(default)]
    pub rule: Option<String>,
    /// See [`Silence::group`]: values as text (another value is taken as its JSON text).
    #[serde(default)]
    pub group: BTreeMap<String, serde_json::Value>,
    /// See [`Silence::severity`].
    #[serde(default)]
    pub severity: Vec<Severity>,
    /// RFC 3339; now when absent.
    #[serde(default)]
    pub starts_at: Option<String>,
    /// RFC 3339; or `for`.
    #[serde(default)]
    pub ends_at: Option<String>,
    /// How long from `starts_at` (`2h`, `30m`, `1d`); or `ends_at`.
    #[serde(default, rename = "for")]
    pub duration: Option<String>,
    /// Who makes it.
    pub by: String,
    /// Why.
    #[serde(default)]
    pub comment: String,
}

impl NewSilence {
    /// The silence it asks for, made at `now` with id `id`; `Err` says what is wrong with it,
    /// in words for the operator.
    pub fn into_silence(self, id: u64, now: Timestamp) -> Result<Silence, String> {
        let rule = self.rule.map(|r| r.trim().to_string());
        if rule.as_deref() == Some("") {
            return Err("`rule` is blank: name a rule, or leave it out to silence every rule's alerts of the group".into());
        }
        let mut group = BTreeMap::new();
        for (k, v) in self.group {
            // (Another value than a string as its JSON text, as an alert's group value is
            // compared: [`value_text`].)
            let v = match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            group.insert(k, v);
        }
        if rule.is_none() && group.is_empty() && self.severity.is_empty() {
            return Err(
                "a silence must name a rule, a group, severities, or several of them (it would mute every alert)".into(),
            );
        }
        let mut severity = self.severity;
        severity.sort();
        severity.dedup();
        if group.len() > MAX_MATCHERS {
            return Err(format!(
                "a silence names at most {MAX_MATCHERS} group fields"
            ));
        }
        let texts = rule
            .iter()
            .chain(group.keys())
            .chain(group.values())
            .chain([&self.by, &self.comment]);
        for t in texts {
            if t.len() > MAX_TEXT {
                return Err(format!("a text of a silence is at most {MAX_TEXT} bytes"));
            }
        }
        let by = self.by.trim().to_string();
        if by.is_empty() {
            return Err("`by` is blank: say who silences".into());
        }
        let starts_at = match self.starts_at.as_deref() {
            None => now,
            Some(s) => Timestamp::parse_rfc3339(s).ok_or_else(|| {
                format!("starts_at `{s}` is no RFC 3339 time (2026-12-06T22:00:00Z)")
            })?,
        };
        let ends_at = match (self.ends_at.as_deref(), self.duration.as_deref()) {
            (Some(_), Some(_)) => {
                return Err("give `ends_at` or `for`, not both".into());
            }
            (None, None) => {
                return Err(
                    "give when the silence ends: `ends_at` (RFC 3339) or `for` (2h)".into(),
                );
            }
            (Some(s), None) => Timestamp::parse_rfc3339(s).ok_or_else(|| {
                format!("ends_at `{s}` is no RFC 3339 time (2026-12-06T23:00:00Z)")
            })?,
            (None, Some(d)) => {
                let d = cepheus_core::time::Duration::parse(d)
                    .map_err(|e| format!("for `{d}`: {e}"))?;
                starts_at.add(d)
            }
        };
        if ends_at <= now {
            return Err("the silence ends in the past: it would mute nothing".into());
        }
        if ends_at <= starts_at {
            return Err("the silence ends before it begins".into());
        }
        if ends_at > now.add(MAX_LENGTH) {
            return Err("a silence ends within a year: make it again then if it must go on".into());
        }
        Ok(Silence {
            id: format!("{id:016x}"),
            rule,
            group,
            severity,
            starts_at,
            ends_at,
            by,
            comment: self.comment,
            created_at: now,
            ended: false,
        })
    }
}

impl Silence {
    /// Whether it mutes at `now`: between its times, and its end not dealt with (once it
    /// was, it mutes nothing more, even if the clock is stepped back before its end).
    pub fn active(&self, now: Timestamp) -> bool {
        !self.ended && self.starts_at <= now && now < self.ends_at
    }

    /// Whether this silence, already kept, stands for `new` asked at `now` (then no other is
    /// made): active, the same rule, group and severities, from now at least as long, or
    /// made a moment ago and as long give or take [`REPEAT_SLACK`].
    pub fn stands_for(&self, new: &Silence, now: Timestamp) -> bool {
        self.active(now)
            && self.rule == new.rule
            && self.group == new.group
            && self.severity == new.severity
            && self.starts_at <= new.starts_at
            && (self.ends_at >= new.ends_at
                || (now.since(self.created_at) <= REPEAT_SLACK
                    && self.ends_at.add(REPEAT_SLACK) >= new.ends_at))
    }

    /// `pending`, `active` or `expired` at `now`.
    pub fn state(&self, now: Timestamp) -> &'static str {
        if self.ended {
            "expired"
        } else if now < self.starts_at {
            "pending"
        } else if now < self.ends_at {
            "active"
        } else {
            "expired"
        }
    }

    /// Whether it names the alerts of rule `rule`, of severity `severity` (`None`: not known)
    /// and group `group` (field name and value).
    pub fn matches(
        &self,
        rule: &str,
        severity: Option<Severity>,
        group: &[(String, cepheus_core::event::Value)],
    ) -> bool {
        if self.rule.as_deref().is_some_and(|r| r != rule) {
            return false;
        }
        if !self.severity.is_empty() && severity.is_none_or(|s| !self.severity.contains(&s)) {
            return false;
        }
        self.group.iter().all(|(name, want)| {
            group
                .iter()
                .find(|(n, _)| n == name)
                .is_some_and(|(_, v)| value_text(v) == *want)
        })
    }

    /// What a muted alert's `silenced` field says of it.
    pub fn mark(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "by": self.by,
            "until": self.ends_at.to_rfc3339(),
        })
    }

    /// Its JSON with its state at `now`, as `GET /silences` lists it.
    pub fn listed(&self, now: Timestamp) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("state".into(), self.state(now).into());
            o.remove("ended");
        }
        v
    }
}

/// `[[inhibit]]` of the configuration: while an alert of rule `source` fires, the alerts of
/// `targets` (every rule when empty) whose groups have the same values of the `equal` fields
/// and that begin firing then are muted as a silence mutes them, marked `inhibited` (a host
/// that stopped sending heartbeats need not also page for each of its services). When that
/// alert ends, those still firing are sent.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InhibitRule {
    /// The rule whose firing alerts inhibit.
    pub source: String,
    /// The rules whose alerts they inhibit (every rule when empty; an alert never inhibits
    /// itself).
    #[serde(default)]
    pub targets: Vec<String>,
    /// The group fields whose values must be the same in both alerts (each must be in
    /// both groups); none: every alert of the targets.
    #[serde(default)]
    pub equal: Vec<String>,
}

/// `[[inhibit]]` rules at most.
pub const MAX_INHIBIT_RULES: usize = 256;

impl InhibitRule {
    /// Whether it inhibits alerts of rule `rule`.
    pub fn targets(&self, rule: &str) -> bool {
        self.targets.is_empty() || self.targets.iter().any(|t| t == rule)
    }

    /// The values of its `equal` fields in `group`, as text (`None`: one is missing).
    pub fn key(&self, group: &[(String, cepheus_core::event::Value)]) -> Option<Vec<String>> {
        self.equal
            .iter()
            .map(|f| {
                group
                    .iter()
                    .find(|(n, _)| n == f)
                    .map(|(_, v)| value_text(v))
            })
            .collect()
    }

    /// What is wrong with it, if anything.
    pub fn problem(&self) -> Option<String> {
        if self.source.trim().is_empty() {
            return Some("`source` is blank: name the rule whose alerts inhibit".into());
        }
        if self.equal.iter().any(|f| f.trim().is_empty()) {
            return Some("`equal` holds a blank field name".into());
        }
        None
    }
}

/// A group value as a silence or an inhibition compares it: a string as itself, another
/// value as its JSON text.
pub fn value_text(v: &cepheus_core::event::Value) -> String {
    match v.to_json() {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    }
}

/// [`Timestamp`]s as RFC 3339 texts.
mod rfc3339 {
    use cepheus_core::time::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("`{s}` is no RFC 3339 time")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use cepheus_core::event::Value;

    fn new(json: serde_json::Value) -> Result<Silence, String> {
        let n: NewSilence = serde_json::from_value(json).map_err(|e| e.to_string())?;
        n.into_silence(0xa1, Timestamp::from_secs(1_000))
    }

    /// A silence asked again a moment later for as long is the one there; asked again later
    /// for longer than what is left of it, it is another (the muting goes on).
    #[test]
    fn a_silence_asked_again_is_the_same_only_a_moment_later() {
        let at = |secs: i64, d: &str| {
            let n: NewSilence = serde_json::from_value(
                serde_json::json!({"group": {"host": "web-1"}, "for": d, "by": "ops"}),
            )
            .unwrap();
            n.into_silence(0xa1, Timestamp::from_secs(secs)).unwrap()
        };
        let first = at(1_000, "1h");
        let now = Timestamp::from_secs(1_001);
        // A key pressed twice: it would end a second later.
        assert!(first.stands_for(&at(1_001, "1h"), now));
        // Shorter: within it whenever asked.
        assert!(first.stands_for(&at(1_001, "30m"), now));
        // Not the same group.
        let other = serde_json::from_value::<NewSilence>(
            serde_json::json!({"group": {"host": "web-2"}, "for": "1h", "by": "ops"}),
        )
        .unwrap()
        .into_silence(0xa1, now)
        .unwrap();
        assert!(!first.stands_for(&other, now));
        // Ten minutes before it ends, `--for 1m` extends the muting: another silence.
        let late = Timestamp::from_secs(1_000 + 3_000);
        assert!(!first.stands_for(&at(1_000 + 3_000, "11m"), late));
        assert!(first.stands_for(&at(1_000 + 3_000, "10m"), late));
        // Half a minute before it ends, a minute more is another silence too.
        let last = Timestamp::from_secs(1_000 + 3_570);
        assert!(!first.stands_for(&at(1_000 + 3_570, "1m"), last));
    }

    #[test]
    fn a_silence_by_severity_mutes_those_severities_only() {
        let s = new(serde_json::json!({
            "severity": ["low", "info", "low"], "for": "1h", "by": "ops"
        }))
        .unwrap();
        assert_eq!(s.severity, [Severity::Low, Severity::Info]);
        let g = [("host".to_string(), Value::str("web-1"))];
        assert!(s.matches("hb", Some(Severity::Low), &g));
        assert!(s.matches("ssh", Some(Severity::Info), &g));
        assert!(!s.matches("hb", Some(Severity::Critical), &g));
        // An alert whose severity is not known is not muted by severity.
        assert!(!s.matches("hb", None, &g));
        // With a rule and a group too: all must match.
        let both = new(serde_json::json!({
            "rule": "hb", "group": {"host": "web-1"}, "severity": ["high"], "for": "1h", "by": "ops"
        }))
        .unwrap();
        assert!(both.matches("hb", Some(Severity::High), &g));
        assert!(!both.matches("hb", Some(Severity::Low), &g));
        assert!(!both.matches("ssh", Some(Severity::High), &g));
        // A name rules do not use is refused, saying so.
        let e =
            new(serde_json::json!({"severity": ["urgent"], "for": "1h", "by": "ops"})).unwrap_err();
        assert!(e.contains("urgent"), "{e}");
        // Nothing named: refused.
        let e = new(serde_json::json!({"severity": [], "for": "1h", "by": "ops"})).unwrap_err();
        assert!(e.contains("severities"), "{e}");
    }

    #[test]
    fn a_silence_names_the_rule_and_group_values_it_mutes() {
        let s = new(serde_json::json!({
            "rule": "hb", "group": {"host": "web-1", "port": 22}, "for": "1h", "by": "ops"
        }))
        .unwrap();
        assert_eq!(s.id, "00000000000000a1");
        assert_eq!(s.ends_at, Timestamp::from_secs(4_600));
        let g = |host: &str, port: i64| {
            vec![
                ("host".to_string(), Value::str(host)),
                ("port".to_string(), Value::Int(port)),
            ]
        };
        assert!(s.matches("hb", None, &g("web-1", 22)));
        assert!(!s.matches("hb", None, &g("web-2", 22)));
        assert!(!s.matches("hb", None, &g("web-1", 23)));
        assert!(!s.matches("other", None, &g("web-1", 22)));
        // A field it names that the group lacks: not matched.
        assert!(!s.matches("hb", None, &[("host".to_string(), Value::str("web-1"))]));
        let any_rule = new(serde_json::json!({
            "group": {"host": "web-1"}, "ends_at": "1970-01-01T02:00:00Z", "by": "ops"
        }))
        .unwrap();
        assert!(any_rule.matches("ssh", None, &g("web-1", 1)));
        assert!(any_rule.active(Timestamp::from_secs(1_000)));
        assert!(!any_rule.active(Timestamp::from_secs(7_200)));
        assert_eq!(any_rule.state(Timestamp::from_secs(7_200)), "expired");
    }

    #[test]
    fn a_silence_that_would_mute_everything_or_nothing_is_refused_in_words() {
        for (json, said) in [
            (
                serde_json::json!({"for": "1h", "by": "ops"}),
                "must name a rule, a group",
            ),
            (
                serde_json::json!({"rule": "hb", "by": "ops"}),
                "give when the silence ends",
            ),
            (
                serde_json::json!({"rule": "hb", "for": "1h", "ends_at": "2030-01-01T00:00:00Z", "by": "ops"}),
                "not both",
            ),
            (
                serde_json::json!({"rule": "hb", "ends_at": "1970-01-01T00:10:00Z", "by": "ops"}),
                "in the past",
            ),
            (
                serde_json::json!({"rule": "hb", "for": "1 fortnight", "by": "ops"}),
                "for `1 fortnight`",
            ),
            (
                serde_json::json!({"rule": "hb", "for": "1h", "by": " "}),
                "`by` is blank",
            ),
            (
                serde_json::json!({"rule": " ", "for": "1h", "by": "ops"}),
                "`rule` is blank",
            ),
            (
                serde_json::json!({"rule": "hb", "for": "1h", "by": "ops", "until": "x"}),
                "unknown field `until`",
            ),
        ] {
            let e = new(json).unwrap_err();
            assert!(e.contains(said), "{e}");
        }
    }

    #[test]
    fn a_silence_reads_back_as_written() {
        let s = new(serde_json::json!({
            "rule": "hb", "for": "90m", "by": "ops", "comment": "maintenance",
            "starts_at": "1970-01-01T01:00:00Z"
        }))
        .unwrap();
        let text = serde_json::to_string(&s).unwrap();
        let back: Silence = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.state(Timestamp::from_secs(1_000)), "pending");
        let listed = s.listed(Timestamp::from_secs(4_000));
        assert_eq!(listed["state"], "active");
        assert_eq!(listed["ends_at"], "1970-01-01T02:30:00Z");
        assert!(listed.get("ended").is_none());
        assert_eq!(s.mark()["until"], "1970-01-01T02:30:00Z");
    }
}
