//! Compact rule states: one record per (scope, group key) holding the groups of all its
//! members inline, found once per event and scope.
//!
//! A *compact* state is a direct one (processing time, every definition read through one
//! group field mapping, no captures). The compact states reading their key through the same
//! fields form a *scope* (up to [`MAX_MEMBERS`]), which keeps one record per key holding each
//! member's [`Group`] ([`Cell`]). An event's key is read and its record found once per event
//! and scope, not once per delivery through each state's own map, slot and generation. The
//! groups are the NFA's own and every transition is the NFA's ([`Group::on_event`],
//! [`Group::on_timer`]), and each group keeps the timer deadlines its slot would (one wheel
//! entry each, naming scope, record and position): only where a group lives and how it is
//! found change, so alerts, counters and checkpoints are those of the NFA path; a member's
//! groups are even numbered as its slots would be ([`Slots`]), so that a full `max_groups`
//! lets the same idle group go. This is the storage half of docs/compact-evaluator.md; its
//! transitions (few-word states per template, shared occurrence logs) are still the NFA's.
//!
//! The engine drives the transitions and timers (it holds the rule contexts) and keeps the
//! invariant that a compact state's groups are all here, none in its own slots, outside of
//! the start of monitoring, a restore or a reload, which make groups in slots and then move
//! them here (`Engine::absorb`).

use std::collections::HashMap;

use super::plan::EvSet;
use super::state::{Group, GroupKey};
use crate::time::Timestamp;

/// The most members of one scope (a record indexes its cells by position in 16 bits); more
/// compact states reading the same fields make more scopes.
pub const MAX_MEMBERS: usize = 1024;

/// One compact consumer of a predicate: the state, the definition it reads the predicate
/// as, the rule (to read the key's fields from) and where its groups are.
#[derive(Clone, Copy, Debug)]
pub struct Use {
    /// The rule state.
    pub state: u32,
    /// The definition (of `rule`) the predicate is.
    pub def: u32,
    /// The first rule of the state with this definition.
    pub rule: u32,
    /// The state's scope and position in it.
    pub scope: u32,
    /// See `scope`.
    pub pos: u32,
    /// The other predicate the state is read through, as an index into the engine's
    /// `pred_seen` (the stamp of the last event that satisfied each predicate), which holds a
    /// slot past the predicates' stamped for every event, for a state read through more than
    /// one other predicate or through this one as several definitions (`other_mask` 0: see
    /// the engine's `direct_feeds`); `u32::MAX`, past every slot, for a state read through
    /// this use's predicate only (reached once an event, through this use). So the mask of a
    /// delivery through this use is `mask`, and `other_mask` too if the event satisfied
    /// `other`, found without the state's list of feeds; and a state no other use reaches for
    /// the event needs no mark that it was delivered to.
    pub other: u32,
    /// The definitions the state reads this use's predicate as (the event holds them all).
    pub mask: EvSet,
    /// The definitions the state reads `other` as.
    pub other_mask: EvSet,
}

/// The compact states, their scopes and records.
#[derive(Default)]
pub struct Compact {
    /// Per rule state: its (scope, position), if compact.
    pub of: Vec<Option<(u32, u32)>>,
    /// The scopes.
    pub scopes: Vec<Scope>,
    /// Per predicate: its compact consumers, in the order of the engine's consumers.
    pub uses: Vec<Vec<Use>>,
}

/// The compact states reading their group key through one field mapping.
#[derive(Default)]
pub struct Scope {
    /// Member states by position, ascending.
    pub members: Vec<u32>,
    /// Groups held, per position.
    pub counts: Vec<u64>,
    /// Per position, its groups numbered as the NFA numbers a state's slots.
    pub slots: Vec<Slots>,
    keys: HashMap<GroupKey, u32>,
    recs: Vec<Option<Rec>>,
    free: Vec<u32>,
    /// The event whose key was last read for this scope (see [`Scope::probe`]).
    seen: u64,
    /// That event's key (`None`: it has none) and its record, if any.
    key: Option<GroupKey>,
    rec: Option<u32>,
}

/// A compact state's groups numbered as its slots would be (a freed number is the next
/// one taken), so that a full `max_groups` looks for an idle group to let go in the same
/// order, and finds the same one, as the NFA's slots do ([`Scope::idle`]).
#[derive(Default)]
pub struct Slots {
    /// Per number, the record holding that group.
    pub at: Vec<Option<u32>>,
    /// Numbers free for reuse, the next one last.
    pub free: Vec<u32>,
    /// Where the next look for an idle group starts.
    pub scan: u32,
}

/// One key's record: the groups its members hold, by position.
pub struct Rec {
    /// The key.
    pub key: GroupKey,
    /// Which cell each position holds.
    index: Index,
    /// The groups held, in no order.
    cells: Vec<Cell>,
}

/// A record's index from position to cell: dense (per position, its cell's index plus one; 0:
/// none) in a scope of at most [`DENSE_MEMBERS`] or once an eighth of the members hold a group
/// there (sparse again below a sixteenth), else sparse ((position, cell) pairs by position),
/// so that a record's index takes at most 32 bytes per group it holds plus 128, however many
/// members its scope has.
enum Index {
    Dense(Box<[u16]>),
    Sparse(Vec<(u16, u16)>),
}

/// The most members of a scope whose records are dense from the start.
const DENSE_MEMBERS: usize = 64;

/// A member's group in a record, with its timer deadlines: the one it is armed at and the one
/// it parked (`MAX`: none), kept exactly as a slot keeps them ([`Cell::arm`]), each an entry
/// in the wheel exactly as its slot's would be (its state, its number, its generation:
/// [`Compact::entry_cell`]). So a group's timer fires when and in the order a slot's would (a
/// linear group's at its armed deadline even when an event moved its next wake later: it
/// drops its partial matches past the window then, and a checkpoint holds what the slots'
/// would), and the wheel holds what it would hold with slots.
pub struct Cell {
    /// The member's position.
    pub pos: u32,
    /// The group's number among its member's groups (see [`Slots`]).
    pub slot: u32,
    /// Where its slot's timer entry would be (`MAX`: none).
    pub armed: Timestamp,
    /// Where its slot's parked entry would be (`MAX`: none).
    pub parked: Timestamp,
    /// The group.
    pub group: Group,
}

impl Cell {
    /// The group's next wake is `wake` after a transition at `lane_now`: armed as a slot
    /// arms it (the engine's `arm_slot`): only if earlier than the armed deadline, taking back
    /// the parked deadline when it is not later than `wake`, else parking the armed one.
    /// Returns whether a new entry is to be filed (at `armed`).
    #[must_use]
    pub fn arm(&mut self, wake: Option<Timestamp>, lane_now: Timestamp) -> bool {
        let Some(wake) = wake else {
            return false;
        };
        if wake >= self.armed {
            return false;
        }
        // A parked deadline the lane has passed came due and was dropped.
        let parked = if self.parked > lane_now {
            self.parked
        } else {
            Timestamp::MAX
        };
        if parked != Timestamp::MAX && parked <= wake {
            self.armed = parked;
            self.parked = Timestamp::MAX;
            return false;
        }
        self.parked = match (self.armed, parked) {
            (Timestamp::MAX, p) => p,
            (a, Timestamp::MAX) => a,
            (a, p) => a.max(p),
        };
        self.armed = wake;
        true
    }
}

/// A dense record's key, index and cells ([`Rec::dense`]).
pub struct Dense<'a> {
    /// The record's key.
    pub key: &'a GroupKey,
    index: &'a [u16],
    cells: &'a mut [Cell],
}

impl Dense<'_> {
    /// Member `pos`'s cell, if it holds a group here ([`Rec::with`] for a dense index).
    #[inline(always)]
    pub fn cell(&mut self, pos: u32) -> Option<&mut Cell> {
        self.cells.get_mut(dense_at(self.index, pos)?)
    }
}

/// The cell a dense index gives position `pos`, past every cell when it gives none (an entry
/// 0 wraps: one bounds check, the cells', for both).
#[inline(always)]
fn dense_at(index: &[u16], pos: u32) -> Option<usize> {
    Some(usize::from(*index.get(pos as usize)?).wrapping_sub(1))
}

impl Rec {
    fn new(key: GroupKey, members: usize) -> Rec {
        let index = if members <= DENSE_MEMBERS {
            Index::Dense(vec![0; members].into_boxed_slice())
        } else {
            Index::Sparse(Vec::new())
        };
        Rec {
            key,
            index,
            cells: Vec::new(),
        }
    }

    #[inline]
    fn slot(&self, pos: u32) -> Option<usize> {
        match &self.index {
            Index::Dense(d) => match d.get(pos as usize) {
                Some(&i) if i != 0 => Some(i as usize - 1),
                _ => None,
            },
            Index::Sparse(v) => v
                .binary_search_by_key(&(pos as u16), |&(p, _)| p)
                .ok()
                .map(|k| v[k].1 as usize),
        }
    }

    /// Position `pos` holds cell `i` (`None`: none).
    fn set(&mut self, pos: u32, i: Option<usize>) {
        match &mut self.index {
            Index::Dense(d) => {
                if let Some(e) = d.get_mut(pos as usize) {
                    *e = i.map_or(0, |i| (i + 1) as u16);
                }
            }
            Index::Sparse(v) => {
                let at = v.binary_search_by_key(&(pos as u16), |&(p, _)| p);
                match (at, i) {
                    (Ok(k), Some(i)) => v[k].1 = i as u16,
                    (Ok(k), None) => {
                        v.remove(k);
                    }
                    (Err(k), Some(i)) => v.insert(k, (pos as u16, i as u16)),
                    (Err(_), None) => {}
                }
            }
        }
    }

    /// The record's key beside member `pos`'s group, if it holds one.
    #[inline]
    pub fn with(&mut self, pos: u32) -> Option<(&GroupKey, &mut Cell)> {
        let i = match &self.index {
            Index::Dense(d) => dense_at(d, pos)?,
            Index::Sparse(_) => self.slot(pos)?,
        };
        Some((&self.key, self.cells.get_mut(i)?))
    }

    /// The record's cells through its dense index, if it is dense: what the deliveries after
    /// the first to one record read each member's cell through, without testing the index's
    /// form each time (most records are dense: small scopes, or many members held here).
    #[inline]
    pub fn dense(&mut self) -> Option<Dense<'_>> {
        match &self.index {
            Index::Dense(d) => Some(Dense {
                key: &self.key,
                index: d,
                cells: &mut self.cells,
            }),
            Index::Sparse(_) => None,
        }
    }

    /// The group of member `pos`, if it holds one (read only).
    pub fn get(&self, pos: u32) -> Option<&Group> {
        self.cells.get(self.slot(pos)?).map(|c| &c.group)
    }

    /// Member `pos` (of `members`) holds `g` (it held none) as its group number `slot`, no
    /// timer armed.
    fn put(&mut self, pos: u32, slot: u32, g: Group, members: usize) {
        if self.slot(pos).is_some() {
            debug_assert!(false, "a compact group made twice");
            return;
        }
        // Most records hold one group (a rule's own key): room for one, not the four a
        // vector's first push makes (a million expected hosts took 300 MB more).
        if self.cells.capacity() == 0 {
            self.cells.reserve_exact(1);
        }
        self.cells.push(Cell {
            pos,
            slot,
            armed: Timestamp::MAX,
            parked: Timestamp::MAX,
            group: g,
        });
        // Dense once an eighth of the members hold a group here.
        if let Index::Sparse(v) = &self.index
            && self.cells.len() * 8 >= members
        {
            let mut d = vec![0u16; members].into_boxed_slice();
            for &(p, c) in v {
                if let Some(e) = d.get_mut(p as usize) {
                    *e = c + 1;
                }
            }
            self.index = Index::Dense(d);
        }
        self.set(pos, Some(self.cells.len() - 1));
    }

    /// Member `pos` lets its group go: the group and its number.
    fn take(&mut self, pos: u32) -> Option<(Group, u32)> {
        let i = self.slot(pos)?;
        self.set(pos, None);
        let cell = self.cells.swap_remove(i);
        if let Some(moved) = self.cells.get(i) {
            let p = moved.pos;
            self.set(p, Some(i));
        }
        // Sparse again once few members hold a group here (not at once below the eighth that
        // made it dense: a group coming and going there would convert it every time).
        if let Index::Dense(d) = &self.index
            && d.len() > DENSE_MEMBERS
            && self.cells.len() * 16 < d.len()
        {
            let mut v: Vec<(u16, u16)> = (self.cells.iter().enumerate())
                .map(|(c, cell)| (cell.pos as u16, c as u16))
                .collect();
            v.sort_unstable();
            self.index = Index::Sparse(v);
        }
        Some((cell.group, cell.slot))
    }

    /// The groups held, with their positions, in no order.
    #[cfg(test)]
    pub fn cells_mut(&mut self) -> &mut [Cell] {
        &mut self.cells
    }

    /// Whether no member holds a group.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
}

impl Scope {
    /// The key `read` gives for event `stamp` (`None`: it has none) and its record: read
    /// once per event and scope (every member reads the same fields), then remembered; and
    /// whether it was remembered (an earlier member's delivery of the event read it).
    #[inline]
    pub fn probe(
        &mut self,
        stamp: u64,
        read: impl FnOnce() -> Option<GroupKey>,
    ) -> (Option<&GroupKey>, Option<u32>, bool) {
        let again = self.seen == stamp;
        if !again {
            self.seen = stamp;
            self.key = read();
            self.rec = self.key.as_ref().and_then(|k| self.keys.get(k).copied());
        }
        (self.key.as_ref(), self.rec, again)
    }

    /// The record of the key last probed, made if missing.
    pub fn probed_record(&mut self) -> Option<u32> {
        if let Some(r) = self.rec {
            return Some(r);
        }
        let key = self.key.clone()?;
        Some(self.record_for(&key))
    }

    /// The record of `key`, made if missing (and remembered for the event being probed).
    pub fn record_for(&mut self, key: &GroupKey) -> u32 {
        if let Some(&r) = self.keys.get(key) {
            return r;
        }
        let r = match self.free.pop() {
            Some(r) => {
                self.recs[r as usize] = Some(Rec::new(key.clone(), self.members.len()));
                r
            }
            None => {
                let rec = Rec::new(key.clone(), self.members.len());
                self.recs.push(Some(rec));
                (self.recs.len() - 1) as u32
            }
        };
        self.keys.insert(key.clone(), r);
        if self.key.as_ref() == Some(key) {
            self.rec = Some(r);
        }
        r
    }

    /// Member `pos` holds `g` in record `r` (it held none there): it takes the number its
    /// slot would have (a number taken again, the next generation from `bump`, as a slot
    /// reused takes its lane's), and counts one more group.
    pub fn insert(&mut self, r: u32, pos: u32, mut g: Group, bump: &mut u32) {
        let slots = &mut self.slots[pos as usize];
        let slot = match slots.free.pop() {
            Some(n) => {
                slots.at[n as usize] = Some(r);
                *bump = bump.wrapping_add(1);
                g.generation = *bump;
                n
            }
            None => {
                slots.at.push(Some(r));
                (slots.at.len() - 1) as u32
            }
        };
        if let Some(rec) = self.recs.get_mut(r as usize).and_then(Option::as_mut) {
            rec.put(pos, slot, g, self.members.len());
            self.counts[pos as usize] += 1;
        }
    }

    /// Member `pos` lets its group in record `r` go (the record stays, see
    /// [`Scope::release_if_empty`]).
    pub fn remove(&mut self, r: u32, pos: u32) -> Option<Group> {
        let rec = self.recs.get_mut(r as usize)?.as_mut()?;
        let (g, slot) = rec.take(pos)?;
        let slots = &mut self.slots[pos as usize];
        slots.at[slot as usize] = None;
        slots.free.push(slot);
        self.counts[pos as usize] -= 1;
        Some(g)
    }

    /// The record of a group of member `pos` that `idle` says holds nothing, among the next
    /// `limit` of its numbers from where the last look stopped (the NFA's `idle_group` over
    /// its slots, in the same order).
    pub fn idle(&mut self, pos: u32, limit: usize, idle: impl Fn(&Group) -> bool) -> Option<u32> {
        let slots = &self.slots[pos as usize];
        let n = slots.at.len();
        if n == 0 {
            return None;
        }
        let start = slots.scan as usize % n;
        let mut found = None;
        let mut next = start;
        for i in 0..limit.min(n) {
            let idx = (start + i) % n;
            next = (idx + 1) % n;
            if let Some(r) = slots.at[idx]
                && let Some(rec) = self.recs.get(r as usize).and_then(Option::as_ref)
                && rec.get(pos).is_some_and(&idle)
            {
                found = Some(r);
                break;
            }
        }
        self.slots[pos as usize].scan = next as u32;
        found
    }

    /// Member `pos` holds `g` in record `r` as its group number `slot` (given by
    /// [`Scope::number`]), its slot's timer armed at `armed` with `parked` parked.
    pub fn adopt(
        &mut self,
        r: u32,
        pos: u32,
        slot: u32,
        g: Group,
        (armed, parked): (Timestamp, Timestamp),
    ) {
        let Some(rec) = self.recs.get_mut(r as usize).and_then(Option::as_mut) else {
            return;
        };
        rec.put(pos, slot, g, self.members.len());
        if let Some((_, cell)) = rec.with(pos) {
            cell.armed = armed;
            cell.parked = parked;
            self.counts[pos as usize] += 1;
        }
    }

    /// Member `pos`'s groups take the numbers `at` and `free` (its slots when it had them).
    pub fn number(&mut self, pos: u32, at: Vec<Option<u32>>, free: Vec<u32>, scan: u32) {
        self.slots[pos as usize] = Slots { at, free, scan };
    }

    /// About how many bytes the scope's records take beyond their groups' cells: the key
    /// map, the records and their indexes (what its members share, for `RuleStats::bytes`).
    pub fn bytes(&self) -> u64 {
        let entry = std::mem::size_of::<(GroupKey, u32)>() + 16;
        let index = 2 * self.members.len();
        (self.keys.len() * (entry + index)
            + self.recs.capacity() * std::mem::size_of::<Option<Rec>>()) as u64
    }

    /// Record `r`, if live.
    #[inline]
    pub fn rec(&mut self, r: u32) -> Option<&mut Rec> {
        self.recs.get_mut(r as usize)?.as_mut()
    }

    /// Record `r`, if live (read only).
    pub fn rec_ref(&self, r: u32) -> Option<&Rec> {
        self.recs.get(r as usize)?.as_ref()
    }

    /// The record of `key`, if any.
    pub fn find(&self, key: &GroupKey) -> Option<u32> {
        self.keys.get(key).copied()
    }

    /// Frees record `r` once no member holds a group in it.
    pub fn release_if_empty(&mut self, r: u32) {
        let Some(rec) = self.recs.get(r as usize).and_then(Option::as_ref) else {
            return;
        };
        if !rec.is_empty() {
            return;
        }
        self.keys.remove(&rec.key);
        if self.rec == Some(r) {
            self.rec = None;
        }
        self.recs[r as usize] = None;
        self.free.push(r);
    }

    /// The live records.
    pub fn records(&self) -> impl Iterator<Item = &Rec> {
        self.recs.iter().flatten()
    }
}

impl Compact {
    /// The groups of compact state `ri`, with their keys, in no particular order (empty for a
    /// state that is not compact).
    pub fn groups_of(&self, ri: usize) -> impl Iterator<Item = (&GroupKey, &Group)> {
        let at = self.of.get(ri).copied().flatten();
        at.into_iter().flat_map(move |(s, pos)| {
            self.scopes[s as usize]
                .records()
                .filter_map(move |r| Some((&r.key, r.get(pos)?)))
        })
    }

    /// Every compact group, with the index of its state, to change in place.
    pub fn groups_mut(&mut self) -> impl Iterator<Item = (usize, &mut Group)> {
        self.scopes.iter_mut().flat_map(|scope| {
            let members = &scope.members;
            scope.recs.iter_mut().flatten().flat_map(move |rec| {
                rec.cells
                    .iter_mut()
                    .map(move |c| (members[c.pos as usize] as usize, &mut c.group))
            })
        })
    }

    /// The groups of every compact state, with their keys, by state index (`states` of
    /// them; empty for a state that is not compact), in one pass over the records: what a
    /// reader of every state's groups takes, instead of a scan of the scope per state.
    pub fn by_state(&self, states: usize) -> Vec<Vec<(&GroupKey, &Group)>> {
        let mut out: Vec<Vec<(&GroupKey, &Group)>> = vec![Vec::new(); states];
        for scope in &self.scopes {
            for rec in scope.records() {
                for cell in &rec.cells {
                    if let Some(v) = out.get_mut(scope.members[cell.pos as usize] as usize) {
                        v.push((&rec.key, &cell.group));
                    }
                }
            }
        }
        out
    }

    /// How many groups compact state `ri` holds.
    pub fn count(&self, ri: usize) -> u64 {
        match self.of.get(ri).copied().flatten() {
            Some((s, pos)) => self.scopes[s as usize].counts[pos as usize],
            None => 0,
        }
    }

    /// The compact group a timer entry names, as a slot's entry names its group (state `ri`,
    /// the group's number `slot`, its generation), with its key; `None` when that group is no
    /// longer held (the entry is stale).
    pub fn entry_cell(
        &mut self,
        ri: usize,
        slot: u32,
        generation: u32,
    ) -> Option<(&GroupKey, &mut Cell)> {
        let (s, pos, r) = self.numbered(ri, slot)?;
        let (key, cell) = self.scopes[s as usize].rec(r)?.with(pos)?;
        (cell.slot == slot && cell.group.generation == generation).then_some((key, cell))
    }

    /// The key of the compact group a timer entry names (see [`Compact::entry_cell`]), if
    /// its number is held.
    pub fn entry_key(&self, ri: usize, slot: u32) -> Option<&GroupKey> {
        let (s, _, r) = self.numbered(ri, slot)?;
        Some(&self.scopes[s as usize].rec_ref(r)?.key)
    }

    /// Where state `ri`'s group numbered `slot` is, if the number is held: its scope, its
    /// position there and its record.
    fn numbered(&self, ri: usize, slot: u32) -> Option<(u32, u32, u32)> {
        let (s, pos) = self.of.get(ri).copied().flatten()?;
        let scope = self.scopes.get(s as usize)?;
        let r = (*scope.slots.get(pos as usize)?.at.get(slot as usize)?)?;
        Some((s, pos, r))
    }

    /// Whether state `ri` is compact.
    #[inline]
    pub fn holds(&self, ri: usize) -> bool {
        self.of.get(ri).is_some_and(Option::is_some)
    }

    /// Every compact group held.
    pub fn total(&self) -> u64 {
        self.scopes.iter().flat_map(|s| s.counts.iter()).sum()
    }

    /// Compact state `ri`'s group `key`: its scope, record and position, if it holds it.
    pub fn locate(&self, ri: usize, key: &GroupKey) -> Option<(u32, u32, u32)> {
        let (s, pos) = self.of.get(ri).copied().flatten()?;
        let scope = &self.scopes[s as usize];
        let r = scope.find(key)?;
        scope.rec_ref(r)?.get(pos)?;
        Some((s, r, pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::state::GroupState;
    use crate::event::Value;

    fn group(t: i64) -> Group {
        Group {
            heard: true,
            expected: false,
            generation: 0,
            last_activity: Timestamp(t),
            state: GroupState::Linear(Default::default()),
        }
    }

    fn scope(members: u32) -> Scope {
        let mut s = Scope::default();
        for m in 0..members {
            s.members.push(m);
            s.counts.push(0);
            s.slots.push(Slots::default());
        }
        s
    }

    /// A record holding one group takes room for one (a million expected hosts of one
    /// absence rule each make such a record: room for four cost about 300 MB more).
    #[test]
    fn a_record_of_one_group_takes_room_for_one() {
        let mut s = scope(1);
        let r = s.record_for(&GroupKey::one(Value::str("h1")));
        s.insert(r, 0, group(0), &mut 0);
        let Some(rec) = s.rec(r) else {
            panic!("the record was made");
        };
        assert_eq!(rec.cells.capacity(), 1);
    }

    #[test]
    fn a_record_keeps_its_members_groups_by_position() {
        let mut s = scope(70);
        let key = GroupKey::one(Value::str("h1"));
        let r = s.record_for(&key);
        s.insert(r, 5, group(5), &mut 0);
        s.insert(r, 1, group(1), &mut 0);
        s.insert(r, 69, group(69), &mut 0);
        assert_eq!(
            (s.counts[1], s.counts[5], s.counts[69], s.counts[2]),
            (1, 1, 1, 0)
        );
        let Some(rec) = s.rec(r) else {
            panic!("the record was made");
        };
        let mut held: Vec<u32> = rec.cells_mut().iter().map(|c| c.pos).collect();
        held.sort_unstable();
        assert_eq!(held, [1, 5, 69]);
        assert_eq!(rec.get(5).map(|g| g.last_activity), Some(Timestamp(5)));
        assert!(rec.get(2).is_none());
        assert_eq!(s.remove(r, 1).map(|g| g.last_activity), Some(Timestamp(1)));
        // The others keep their groups whatever moved.
        let Some(rec) = s.rec(r) else {
            panic!("the record was kept");
        };
        assert_eq!(rec.get(5).map(|g| g.last_activity), Some(Timestamp(5)));
        assert_eq!(rec.get(69).map(|g| g.last_activity), Some(Timestamp(69)));
        assert!(s.remove(r, 1).is_none());
        s.remove(r, 69);
        s.release_if_empty(r);
        assert!(s.find(&key).is_some(), "a record holding a group stays");
        s.remove(r, 5);
        s.release_if_empty(r);
        assert!(s.find(&key).is_none());
        assert_eq!(s.counts.iter().sum::<u64>(), 0);
        // A freed record is reused for another key.
        let r2 = s.record_for(&GroupKey::one(Value::str("h2")));
        assert_eq!(r2, r);
    }

    /// A record of a large scope indexes its cells sparsely until an eighth of the members
    /// hold a group there, then densely: either way each position finds its own group, through
    /// any order of makes and lets go (checked against a map).
    #[test]
    fn a_records_index_finds_each_group_sparse_or_dense() {
        // Every position finds what the model says it holds.
        let check = |s: &mut Scope, r: u32, model: &HashMap<u32, i64>, members: u32, at: &str| {
            let Some(rec) = s.rec(r) else {
                panic!("the record holds groups");
            };
            for p in 0..members {
                assert_eq!(
                    rec.get(p).map(|g| g.last_activity),
                    model.get(&p).copied().map(Timestamp),
                    "{members}: {p} {at}"
                );
            }
        };
        for members in [3u32, 64, 65, 200, 1024] {
            let mut s = scope(members);
            let r = s.record_for(&GroupKey::one(Value::str("h")));
            let mut model: HashMap<u32, i64> = HashMap::new();
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(members);
            for step in 0..3000i64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = (x % u64::from(members)) as u32;
                if model.contains_key(&pos) && x.is_multiple_of(3) {
                    let g = s.remove(r, pos).map(|g| g.last_activity);
                    assert_eq!(g, model.remove(&pos).map(Timestamp), "{members}: {pos}");
                } else if let std::collections::hash_map::Entry::Vacant(v) = model.entry(pos) {
                    s.insert(r, pos, group(step), &mut 0);
                    v.insert(step);
                }
                if step % 97 == 0 {
                    check(&mut s, r, &model, members, &format!("at {step}"));
                }
            }
            assert_eq!(s.counts.iter().sum::<u64>(), model.len() as u64);
            // Then every group goes, the index turning sparse again on the way.
            let mut left: Vec<u32> = model.keys().copied().collect();
            left.sort_unstable();
            for (n, pos) in left.into_iter().enumerate() {
                let g = s.remove(r, pos).map(|g| g.last_activity);
                assert_eq!(g, model.remove(&pos).map(Timestamp), "{members}: {pos}");
                if n % 7 == 0 {
                    check(&mut s, r, &model, members, &format!("after {n} went"));
                }
            }
            assert!(s.rec(r).is_some_and(|rec| rec.is_empty()));
        }
    }

    /// A member's groups are numbered as its slots would be: a freed number is taken next,
    /// and the look for an idle group goes through them in order from where it stopped.
    #[test]
    fn a_members_groups_are_numbered_as_slots() {
        let mut s = scope(2);
        let recs: Vec<u32> = (0..4)
            .map(|h| s.record_for(&GroupKey::one(Value::str(&format!("h{h}")))))
            .collect();
        for &r in &recs[..3] {
            s.insert(r, 1, group(i64::from(r)), &mut 0);
        }
        assert_eq!(s.slots[1].at, [Some(recs[0]), Some(recs[1]), Some(recs[2])]);
        s.remove(recs[1], 1);
        s.insert(recs[3], 1, group(3), &mut 0);
        assert_eq!(
            s.slots[1].at[1],
            Some(recs[3]),
            "the freed number is taken next"
        );
        // Idle: the groups of h0 and h2; the look starts at number 0, then goes on after it.
        let idle = |g: &Group| g.last_activity != Timestamp(i64::from(recs[3]));
        assert_eq!(s.idle(1, 64, idle), Some(recs[0]));
        assert_eq!(s.idle(1, 64, idle), Some(recs[2]));
        assert_eq!(s.idle(1, 1, |_| false), None);
        assert_eq!(s.slots[1].scan, 1);
    }

    #[test]
    fn a_scope_reads_an_events_key_once() {
        let mut s = Scope::default();
        let key = GroupKey::one(Value::str("h1"));
        let r = s.record_for(&key);
        let mut reads = 0;
        for _ in 0..3 {
            let (k, rec, _) = s.probe(7, || {
                reads += 1;
                Some(key.clone())
            });
            assert_eq!(k, Some(&key));
            assert_eq!(rec, Some(r));
        }
        assert_eq!(reads, 1);
        let (k, rec, again) = s.probe(8, || None);
        assert!(k.is_none() && rec.is_none() && !again);
    }
}
