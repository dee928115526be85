//! Families: the graph's virtual nodes at run time.
//!
//! Rule states (distinct meanings) that are fed by the same event nodes (the same predicate
//! and the same mapping of fields to `group_by` names) in the same scope (the same `group_by`
//! and the same time lane) form a *family*, as similar operations (OA, SS, OS) form one virtual
//! node in the paper. A family keeps one record per group key holding the group slot of each
//! member that has that group (the EOIT's parent addresses; the occurrence bits are the
//! definitions an event matched, delivered with it). An event that concerns several members of
//! a family is looked up once: the first member's delivery finds the record, the others read
//! their slot from it.
//!
//! A record never decides anything: a slot read from it is checked against the member's own
//! group (key) before use, and a member that frees a group clears its entry, so records hold
//! only the members' live groups (bounded by their `max_groups`) and nothing a checkpoint
//! would need.

use std::collections::HashMap;
use std::hash::Hash;

use super::state::GroupKey;

/// One family: its members and their group records.
#[derive(Debug, Default)]
pub struct Family {
    /// Member rule states (indices into the engine's states), ascending.
    pub members: Vec<u32>,
    groups: HashMap<GroupKey, u32>,
    records: Vec<Record>,
    free: Vec<u32>,
    /// The record the last delivery found: (event sequence number, the key's number within
    /// that event, record), so the other members concerned by the same event need no lookup
    /// and no comparison of keys.
    memo: Option<(u64, u32, u32)>,
}

/// One group's record: the (slot, generation) of each member holding the group. Sparse (as
/// many entries as hold it, by position, found by binary search: a family can have thousands
/// of members) until at least half the members hold it, then dense (indexed by position).
#[derive(Debug, Default)]
struct Record {
    held: u32,
    repr: Repr,
}

#[derive(Debug)]
enum Repr {
    /// (position, slot, generation), by position.
    Sparse(Vec<(u32, u32, u32)>),
    /// (slot, generation) per position; `NONE` in the slot: not held.
    Dense(Box<[(u32, u32)]>),
}

impl Default for Repr {
    fn default() -> Repr {
        Repr::Sparse(Vec::new())
    }
}

/// A dense record's empty entry.
const NONE: u32 = u32::MAX;

/// The largest family whose records may go dense (8 bytes per member and record).
const DENSE_MAX_MEMBERS: usize = 4096;

impl Family {
    /// A family of `members` (at least two).
    pub fn new(members: Vec<u32>) -> Family {
        Family {
            members,
            ..Family::default()
        }
    }

    /// The record of `key` for the delivery of event `seq`, where `kid` numbers the event's
    /// distinct keys (equal numbers, equal keys; `None`: unnumbered, looked up), and whether
    /// an earlier delivery of the same event had found it; `make` creates it when missing.
    pub fn record(
        &mut self,
        key: &GroupKey,
        seq: u64,
        kid: Option<u32>,
        make: bool,
    ) -> Option<(u32, bool)> {
        if let Some(r) = self.memoized(seq, kid) {
            return Some((r, true));
        }
        let r = match self.groups.get(key) {
            Some(r) => *r,
            None if make => {
                let r = match self.free.pop() {
                    Some(r) => r,
                    None => {
                        self.records.push(Record::default());
                        (self.records.len() - 1) as u32
                    }
                };
                self.groups.insert(key.clone(), r);
                r
            }
            None => return None,
        };
        self.remember(seq, kid, r);
        Some((r, false))
    }

    /// The record of `key`, if any, without touching the memo (a read-ahead's lookup).
    pub fn find(&self, key: &GroupKey) -> Option<u32> {
        self.groups.get(key).copied()
    }

    /// A delivery of event `seq` (key number `kid`) found record `r` without [`Family::record`]
    /// (its slot was read ahead): the memo moves as that lookup would have moved it, and
    /// whether an earlier delivery of the same event had found the record is returned.
    pub fn note(&mut self, seq: u64, kid: Option<u32>, r: u32) -> bool {
        if self.memoized(seq, kid).is_some() {
            return true;
        }
        self.remember(seq, kid, r);
        false
    }

    /// The record an earlier delivery of event `seq` found for key number `kid`, if any.
    fn memoized(&self, seq: u64, kid: Option<u32>) -> Option<u32> {
        match self.memo {
            Some((s, k, r)) if s == seq && Some(k) == kid => Some(r),
            _ => None,
        }
    }

    /// Record `r` was found for key number `kid` of event `seq` (unnumbered keys are not
    /// remembered).
    fn remember(&mut self, seq: u64, kid: Option<u32>, r: u32) {
        if let Some(kid) = kid {
            self.memo = Some((seq, kid, r));
        }
    }

    /// The (slot, generation) member `pos` recorded in record `r`, if any.
    pub fn slot(&self, r: u32, pos: u32) -> Option<(u32, u32)> {
        match &self.records.get(r as usize)?.repr {
            Repr::Sparse(v) => {
                let i = v.binary_search_by_key(&pos, |e| e.0).ok()?;
                Some((v[i].1, v[i].2))
            }
            Repr::Dense(d) => d.get(pos as usize).copied().filter(|e| e.0 != NONE),
        }
    }

    /// Records member `pos`'s slot and its generation in record `r`.
    pub fn set(&mut self, r: u32, pos: u32, slot: u32, generation: u32) {
        let members = self.members.len();
        let Some(rec) = self.records.get_mut(r as usize) else {
            return;
        };
        match &mut rec.repr {
            Repr::Sparse(v) => match v.binary_search_by_key(&pos, |e| e.0) {
                Ok(i) => v[i] = (pos, slot, generation),
                Err(i) => {
                    v.insert(i, (pos, slot, generation));
                    rec.held += 1;
                    if members <= DENSE_MAX_MEMBERS && rec.held as usize * 2 >= members {
                        let mut d = vec![(NONE, 0); members].into_boxed_slice();
                        for &(p, s, g) in v.iter() {
                            if let Some(e) = d.get_mut(p as usize) {
                                *e = (s, g);
                            }
                        }
                        rec.repr = Repr::Dense(d);
                    }
                }
            },
            Repr::Dense(d) => {
                if let Some(e) = d.get_mut(pos as usize) {
                    if e.0 == NONE {
                        rec.held += 1;
                    }
                    *e = (slot, generation);
                }
            }
        }
    }

    /// Member `pos` freed its group `key`: its entry goes, and the record (its memory too)
    /// when no member holds the group any more.
    pub fn release(&mut self, key: &GroupKey, pos: u32) {
        let Some(&r) = self.groups.get(key) else {
            return;
        };
        let Some(rec) = self.records.get_mut(r as usize) else {
            return;
        };
        let gone = match &mut rec.repr {
            Repr::Sparse(v) => match v.binary_search_by_key(&pos, |e| e.0) {
                Ok(i) => {
                    v.remove(i);
                    true
                }
                Err(_) => false,
            },
            Repr::Dense(d) => match d.get_mut(pos as usize) {
                Some(e) if e.0 != NONE => {
                    *e = (NONE, 0);
                    true
                }
                _ => false,
            },
        };
        if gone {
            rec.held = rec.held.saturating_sub(1);
        }
        if rec.held == 0 {
            *rec = Record::default();
            self.groups.remove(key);
            self.free.push(r);
            // The record may be reused for another key.
            self.memo = None;
        }
    }

    /// Group records held.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Approximate bytes its records hold (map entries, record headers and entries), for the
    /// members' `RuleStats::bytes`.
    pub fn bytes(&self) -> u64 {
        let per_record = super::KEY_MAP_ENTRY + std::mem::size_of::<Record>();
        let entries: usize = self
            .records
            .iter()
            .map(|r| match &r.repr {
                Repr::Sparse(v) => v.len() * std::mem::size_of::<(u32, u32, u32)>(),
                Repr::Dense(d) => d.len() * std::mem::size_of::<(u32, u32)>(),
            })
            .sum();
        (self.groups.len() * per_record + entries) as u64
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// Partitions rule states into families: `feeds[s]` lists the event nodes feeding state `s`
/// (any identity: predicate and group field mapping) and `scope[s]` its scope (`None`: never
/// in a family). States sharing an event node and a scope are in one family (transitively).
/// Returns the families of two or more members, members ascending, families ordered by their
/// first member. Linear in the feeds (a rule set of 20,000 rules compiles at every reload).
pub fn partition<F: Hash + Eq, S: Hash + Eq>(
    feeds: &[Vec<F>],
    scope: &[Option<S>],
) -> Vec<Vec<u32>> {
    let n = feeds.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut first: HashMap<(&F, &S), usize> = HashMap::new();
    for (s, fs) in feeds.iter().enumerate() {
        let Some(sc) = scope.get(s).and_then(Option::as_ref) else {
            continue;
        };
        for f in fs {
            match first.get(&(f, sc)) {
                Some(&other) => {
                    let (a, b) = (root(&mut parent, s), root(&mut parent, other));
                    if a != b {
                        parent[a.max(b)] = a.min(b);
                    }
                }
                None => {
                    first.insert((f, sc), s);
                }
            }
        }
    }
    let mut by_root: Vec<Vec<u32>> = vec![Vec::new(); n];
    for i in 0..n {
        let r = root(&mut parent, i);
        by_root[r].push(i as u32);
    }
    by_root.into_iter().filter(|m| m.len() >= 2).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Value;

    #[test]
    fn states_sharing_an_event_node_in_one_scope_are_one_family() {
        // 0 and 1 share feed 7; 1 and 2 share feed 8 (transitively one family); 3 shares
        // feed 7 in another scope; 4 is alone; 5 and 6 share feed 9 in a third scope.
        let feeds = vec![
            vec![7],
            vec![7, 8],
            vec![8],
            vec![7],
            vec![10],
            vec![9],
            vec![9],
        ];
        let scope = vec![
            Some("host"),
            Some("host"),
            Some("host"),
            Some("src"),
            Some("host"),
            Some("ip"),
            Some("ip"),
        ];
        assert_eq!(partition(&feeds, &scope), vec![vec![0, 1, 2], vec![5, 6]]);
        let none: Vec<Option<&str>> = vec![None; 7];
        assert!(partition(&feeds, &none).is_empty());
    }

    #[test]
    fn records_hold_only_members_with_the_group_and_go_with_the_last() {
        let mut f = Family::new((0..1000).collect());
        let k = GroupKey::one(Value::str("h1"));
        assert_eq!(f.record(&k, 1, Some(0), false), None);
        let Some((r, again)) = f.record(&k, 1, Some(0), true) else {
            panic!("a record is made on demand");
        };
        assert!(!again);
        f.set(r, 700, 20, 4);
        f.set(r, 3, 10, 0);
        f.set(r, 700, 20, 5);
        assert!(
            matches!(&f.records[r as usize].repr, Repr::Sparse(v) if v.len() == 2),
            "sparse, not one entry per member"
        );
        // The same event finds it without a lookup; another event (or another key of the
        // same event) looks it up.
        assert_eq!(f.record(&k, 1, Some(0), false), Some((r, true)));
        assert_eq!(f.record(&k, 1, Some(1), false), Some((r, false)));
        assert_eq!(f.record(&k, 2, Some(0), false), Some((r, false)));
        assert_eq!(
            (f.slot(r, 3), f.slot(r, 700), f.slot(r, 5)),
            (Some((10, 0)), Some((20, 5)), None)
        );
        f.release(&k, 3);
        assert_eq!(f.len(), 1);
        f.release(&k, 700);
        assert!(f.is_empty());
        assert_eq!(
            f.record(&k, 2, Some(0), false),
            None,
            "the memo went with the record"
        );
        // The freed record is reused, empty.
        let Some((r2, _)) = f.record(&GroupKey::one(Value::str("h2")), 3, Some(0), true) else {
            panic!("a record is made on demand");
        };
        assert_eq!(r2, r);
        assert_eq!(f.slot(r2, 700), None);
    }

    #[test]
    fn a_record_most_members_hold_goes_dense_and_reads_the_same() {
        let mut f = Family::new((0..6).collect());
        let k = GroupKey::one(Value::str("h1"));
        let Some((r, _)) = f.record(&k, 1, Some(0), true) else {
            panic!("a record is made on demand");
        };
        f.set(r, 4, 40, 1);
        f.set(r, 1, 10, 2);
        assert!(matches!(f.records[r as usize].repr, Repr::Sparse(_)));
        f.set(r, 2, 20, 3);
        assert!(matches!(f.records[r as usize].repr, Repr::Dense(_)));
        f.set(r, 2, 21, 7);
        assert_eq!(
            (0..6).map(|p| f.slot(r, p)).collect::<Vec<_>>(),
            vec![
                None,
                Some((10, 2)),
                Some((21, 7)),
                None,
                Some((40, 1)),
                None
            ]
        );
        for p in [1, 2, 5] {
            f.release(&k, p);
        }
        assert_eq!(f.slot(r, 4), Some((40, 1)));
        assert_eq!(f.len(), 1, "held by one member still");
        f.release(&k, 4);
        assert!(f.is_empty());
    }
}
