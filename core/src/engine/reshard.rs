//! Spreading the checkpoints of `S` engines that split the (rule, group) space over another
//! number of engines: what a restart with another `engine.shards` needs to go on with every
//! group, deadline and open alert instead of starting afresh. Pure data: each group and each
//! buffered event goes to the engine [`Partition::owner_of`] names for the new count.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{CHECKPOINT_VERSION, Checkpoint, LaneCheckpoint, Partition, RuleCheckpoint};
use crate::time::Timestamp;

/// Why checkpoints cannot be spread over another count (the caller starts afresh, saying so).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReshardError {
    /// No checkpoint to spread.
    #[error("no saved state")]
    Empty,
    /// A checkpoint of another format version.
    #[error("a saved state of format version {0} (this build writes {CHECKPOINT_VERSION})")]
    Version(u32),
    /// The engines ran different rules (or lanes): their parts cannot be matched.
    #[error("the saved states of the shards hold different rules or lanes")]
    Mismatch,
    /// A rule saved before its `group_by` was kept: its groups' owners are unknown.
    #[error("rule {0:?} was saved by an older version, without its group_by")]
    NoGroupBy(String),
    /// An event-time lane one engine had not begun (no event of its sources yet, in a
    /// replay): when its rules' monitoring begins is that engine's alone.
    #[error("an event-time lane had not begun in every shard")]
    LaneNotBegun,
}

/// The checkpoints of the engines that split the work before (`parts`, any order), as `count`
/// engines would hold them: engine `i` gets the groups and buffered events it owns, the
/// arrival clock and watermarks of the most advanced part, each lane's time where the least
/// advanced part had it (so what that part had not reached yet still happens, in order),
/// and engine 0 the counters' sums (the agent reports the
/// sum over its engines). Every part must come from the same rules.
pub fn reshard(parts: Vec<Checkpoint>, count: u32) -> Result<Vec<Checkpoint>, ReshardError> {
    let count = count.max(1);
    let first = parts.first().ok_or(ReshardError::Empty)?;
    if let Some(p) = parts.iter().find(|p| p.version != CHECKPOINT_VERSION) {
        return Err(ReshardError::Version(p.version));
    }
    let same_rules = |p: &Checkpoint| {
        p.rules.len() == first.rules.len()
            && p.rules.iter().zip(&first.rules).all(|(a, b)| {
                a.canonical == b.canonical && a.cohort == b.cohort && a.name == b.name
            })
    };
    let same_lanes = |p: &Checkpoint| {
        p.lanes.len() == first.lanes.len()
            && p.lanes.iter().zip(&first.lanes).all(|(a, b)| {
                a.event_time == b.event_time && a.delay == b.delay && a.sources == b.sources
            })
    };
    if !parts.iter().all(|p| same_rules(p) && same_lanes(p)) {
        return Err(ReshardError::Mismatch);
    }
    if parts
        .iter()
        .any(|p| p.lanes.iter().any(|l| l.event_time && !l.started))
    {
        return Err(ReshardError::LaneNotBegun);
    }
    if let Some(r) = first.rules.iter().find(|r| r.group_by.is_none()) {
        return Err(ReshardError::NoGroupBy(r.name.clone()));
    }
    // Which engine owns a group of the rule with meaning `canonical` (its `group_by` known).
    let grouped: std::collections::HashMap<String, bool> = first
        .rules
        .iter()
        .map(|r| {
            let g = r.group_by.as_ref().is_some_and(|g| !g.is_empty());
            (r.canonical.clone(), g)
        })
        .collect();
    let owner = |canonical: &str, key: &[crate::event::Value]| {
        let g = grouped.get(canonical).copied().unwrap_or(false);
        Partition::owner_of(g, canonical, key, count) as usize
    };

    let mut out: Vec<Checkpoint> = (0..count)
        .map(|i| Checkpoint {
            version: CHECKPOINT_VERSION,
            clock: max_of(parts.iter().map(|p| p.clock)),
            next_seq: parts.iter().map(|p| p.next_seq).max().unwrap_or(0),
            counters: if i == 0 {
                sum_all(parts.iter().map(|p| &p.counters))
            } else {
                Default::default()
            },
            lanes: first
                .lanes
                .iter()
                .enumerate()
                .map(|(li, l)| LaneCheckpoint {
                    // The least advanced part's time: a group from a shard that lagged (each
                    // shard's clock moves with its own events between ticks) keeps deadlines
                    // the others passed, and they must fire at their own instants, in order,
                    // when time next moves, not all at once at the later time. The deadlines
                    // of the other parts' groups are all after it (theirs fired already).
                    now: parts.iter().map(|p| p.lanes[li].now).min().unwrap_or(l.now),
                    max_event: max_of(parts.iter().map(|p| p.lanes[li].max_event)),
                    last_arrival: max_of(parts.iter().map(|p| p.lanes[li].last_arrival)),
                    mark: max_of(parts.iter().map(|p| p.lanes[li].mark)),
                    first_arrival: min_of(parts.iter().map(|p| p.lanes[li].first_arrival)),
                    min_event: min_of(parts.iter().map(|p| p.lanes[li].min_event)),
                    started: parts.iter().any(|p| p.lanes[li].started),
                    pending: Vec::new(),
                    ..l.clone()
                })
                .collect(),
            rules: first
                .rules
                .iter()
                .enumerate()
                .map(|(ri, r)| RuleCheckpoint {
                    monitor_start: min_of(parts.iter().map(|p| p.rules[ri].monitor_start)),
                    counters: if i == 0 {
                        sum_all(parts.iter().map(|p| &p.rules[ri].counters))
                    } else {
                        Default::default()
                    },
                    groups: Vec::new(),
                    ..r.clone()
                })
                .collect(),
            min_event_any: min_of(parts.iter().map(|p| p.min_event_any)),
            max_event_any: max_of(parts.iter().map(|p| p.max_event_any)),
            sweep_at: min_of(parts.iter().map(|p| p.sweep_at)),
        })
        .collect();
    for p in parts {
        for (li, lane) in p.lanes.into_iter().enumerate() {
            for ev in lane.pending {
                out[owner(&ev.rule, &ev.key)].lanes[li].pending.push(ev);
            }
        }
        for (ri, rule) in p.rules.into_iter().enumerate() {
            for g in rule.groups {
                out[owner(&rule.canonical, &g.key)].rules[ri].groups.push(g);
            }
        }
    }
    for cp in &mut out {
        for lane in &mut cp.lanes {
            // Released in (time, sequence) order, as one engine's buffer holds them.
            lane.pending.sort_by_key(|e| (e.time, e.seq));
        }
        for rule in &mut cp.rules {
            rule.groups.sort_by(|a, b| a.key.cmp(&b.key));
        }
    }
    Ok(out)
}

fn max_of(it: impl Iterator<Item = Option<Timestamp>>) -> Option<Timestamp> {
    it.flatten().max()
}

fn min_of(it: impl Iterator<Item = Option<Timestamp>>) -> Option<Timestamp> {
    it.flatten().min()
}

/// The field-by-field sum of counter sets (every field of the counter structs is a count),
/// through their serde form, so a counter added later is summed too.
fn sum_all<'a, T: Serialize + DeserializeOwned + Default + 'a>(
    it: impl Iterator<Item = &'a T>,
) -> T {
    let mut total = serde_json::Map::new();
    for c in it {
        let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(c) else {
            continue;
        };
        for (k, v) in fields {
            let add = v.as_u64().unwrap_or(0);
            let now = total
                .get(&k)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            total.insert(k, serde_json::Value::from(now.saturating_add(add)));
        }
    }
    serde_json::from_value(serde_json::Value::Object(total)).unwrap_or_default()
}
