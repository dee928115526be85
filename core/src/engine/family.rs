//! Families: the graph's virtual nodes at run time.
//!
//! Rule states (distinct meanings) that are fed by the same event nodes (the same predicate
//! and the same mapping of fields to `group_by` names) in the same scope (the same `group_by`
//! and the same time lane) form a *family*, as similar operations (OA, SS, OS) form one virtual
//! node in the paper. A family keeps one record per group key holding the group slot of each
//! member (the EOIT's parent addresses; the occurrence bits are the definitions an event
//! matched, delivered with it). An event that concerns several members of a family is looked
//! up once: the first member's delivery finds the record, the others read their slot from it.
//!
//! A record never decides anything: a slot read from it is checked against the member's own
//! group (key) before use, and a member that frees a group clears its entry, so records are
//! bounded by the members' groups and hold no state a checkpoint would need.

use std::collections::HashMap;

use super::state::GroupKey;

/// No slot recorded for this member.
pub const NO_SLOT: u32 = u32::MAX;

/// One family: its members and their group records.
#[derive(Debug, Default)]
pub struct Family {
    /// Member rule states (indices into the engine's states), ascending.
    pub members: Vec<u32>,
    groups: HashMap<GroupKey, u32>,
    records: Vec<Box<[u32]>>,
    free: Vec<u32>,
}

impl Family {
    /// A family of `members` (at least two).
    pub fn new(members: Vec<u32>) -> Family {
        Family {
            members,
            ..Family::default()
        }
    }

    /// The record of `key`, if any.
    pub fn find(&self, key: &GroupKey) -> Option<u32> {
        self.groups.get(key).copied()
    }

    /// The record of `key`, made (empty) if there is none.
    pub fn find_or_make(&mut self, key: &GroupKey) -> u32 {
        if let Some(r) = self.groups.get(key) {
            return *r;
        }
        let empty = vec![NO_SLOT; self.members.len()].into_boxed_slice();
        let r = match self.free.pop() {
            Some(r) => {
                self.records[r as usize] = empty;
                r
            }
            None => {
                self.records.push(empty);
                (self.records.len() - 1) as u32
            }
        };
        self.groups.insert(key.clone(), r);
        r
    }

    /// The slot member `pos` recorded in record `r` ([`NO_SLOT`] if none).
    pub fn slot(&self, r: u32, pos: usize) -> u32 {
        self.records
            .get(r as usize)
            .and_then(|rec| rec.get(pos))
            .copied()
            .unwrap_or(NO_SLOT)
    }

    /// Records member `pos`'s slot in record `r`.
    pub fn set(&mut self, r: u32, pos: usize, slot: u32) {
        if let Some(e) = self
            .records
            .get_mut(r as usize)
            .and_then(|rec| rec.get_mut(pos))
        {
            *e = slot;
        }
    }

    /// Member `pos` freed its group `key`: its entry is cleared, and the record dropped when no
    /// member holds the group any more. Returns whether a record was dropped.
    pub fn release(&mut self, key: &GroupKey, pos: usize) -> bool {
        let Some(&r) = self.groups.get(key) else {
            return false;
        };
        self.set(r, pos, NO_SLOT);
        let empty = self
            .records
            .get(r as usize)
            .is_none_or(|rec| rec.iter().all(|s| *s == NO_SLOT));
        if empty {
            self.groups.remove(key);
            self.free.push(r);
        }
        empty
    }

    /// Group records held (for the memory estimate).
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// Partitions rule states into families: `feeds[s]` lists the event nodes feeding state `s`
/// (any comparable identity: predicate and group field mapping) and `scope[s]` its scope
/// (`None`: never in a family). States sharing an event node and a scope are in one family
/// (transitively). Returns the families of two or more members, members ascending, families
/// ordered by their first member.
pub fn partition<F: PartialEq, S: PartialEq>(
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
    for a in 0..n {
        for b in a + 1..n {
            let same_scope = matches!((&scope[a], &scope[b]), (Some(x), Some(y)) if x == y);
            if same_scope && feeds[a].iter().any(|f| feeds[b].contains(f)) {
                let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
                if ra != rb {
                    parent[ra.max(rb)] = ra.min(rb);
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
        // feed 7 in another scope; 4 is alone.
        let feeds = vec![vec![7], vec![7, 8], vec![8], vec![7], vec![9]];
        let scope = vec![
            Some("host"),
            Some("host"),
            Some("host"),
            Some("src"),
            Some("host"),
        ];
        assert_eq!(partition(&feeds, &scope), vec![vec![0, 1, 2]]);
        let none: Vec<Option<&str>> = vec![None; 5];
        assert!(partition(&feeds, &none).is_empty());
    }

    #[test]
    fn records_are_dropped_when_no_member_holds_the_group() {
        let mut f = Family::new(vec![3, 5]);
        let k = GroupKey::one(Value::str("h1"));
        let r = f.find_or_make(&k);
        f.set(r, 0, 10);
        f.set(r, 1, 20);
        assert_eq!((f.slot(r, 0), f.slot(r, 1)), (10, 20));
        assert!(!f.release(&k, 0));
        assert_eq!(f.find(&k), Some(r));
        assert!(f.release(&k, 1));
        assert_eq!(f.find(&k), None);
        assert!(f.is_empty());
        // The freed record is reused, empty.
        let r2 = f.find_or_make(&GroupKey::one(Value::str("h2")));
        assert_eq!(r2, r);
        assert_eq!(f.slot(r2, 0), NO_SLOT);
    }
}
