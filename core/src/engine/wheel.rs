//! A hierarchical timer wheel: O(1) insert, amortised O(1) expiry, no cancellation.
//!
//! Five levels of 128 slots at 1 ms resolution cover about 397 days; a later deadline is parked
//! in the top level and comes back early, which is harmless because every timer of the engine is
//! validated when it fires (a fired entry whose group no longer wants it is ignored, and a group
//! whose deadline moved later is simply re-armed). That "lazy" contract is why there is no
//! cancel: re-arming a heartbeat on every event costs nothing.

use crate::time::Timestamp;

// 128 slots a level (occupancy in a u128): a deadline of seconds (an absence's, a window's)
// goes in at level 1 and moves down once before it fires, not twice as with 64.
const SLOT_BITS: u32 = 7;
const SLOTS: usize = 1 << SLOT_BITS;
const LEVELS: usize = 5;
/// A level's occupancy: one bit per slot.
type Bits = u128;
const TICK_NS: i64 = 1_000_000;
/// Ticks covered by the whole wheel.
const MAX_TICKS: u64 = 1 << (SLOT_BITS as u64 * LEVELS as u64);

/// What a timer carries: the engine's (rule, group slot, generation) and the exact deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimerEntry {
    /// Exact deadline (the wheel itself works in 1 ms ticks).
    pub deadline: Timestamp,
    /// Rule index in the engine.
    pub rule: u32,
    /// Group slot within the rule.
    pub slot: u32,
    /// Generation of the slot when armed (a reused slot ignores older timers).
    pub generation: u32,
}

struct Level {
    occupied: Bits,
    /// A fixed array, so a slot's index (masked) needs no bounds check.
    slots: Box<[Vec<TimerEntry>; SLOTS]>,
}

/// The wheel. Time only moves forward through [`Wheel::advance`].
pub struct Wheel {
    /// The current tick (ms since the epoch, shifted to be non-negative).
    elapsed: u64,
    levels: [Level; LEVELS],
    /// Entries in the current tick that are not yet due (sub-millisecond deadlines).
    held: Vec<TimerEntry>,
    len: usize,
    /// An emptied slot's buffer, swapped in when a slot is drained so slots keep their
    /// capacity (a heartbeat's timers pass through the same slots every period).
    scratch: Vec<TimerEntry>,
    /// The tick the earliest occupied slot's range starts at (`u64::MAX`: none), what
    /// [`Wheel::next_expiration`] would say: kept exact by every insert and advance, so
    /// `has_due` needs no scan of the levels.
    earliest: u64,
}

/// What the owner of a timer says when the wheel moves it down a level (see
/// [`Wheel::advance_settling`]).
pub enum Settle {
    /// Still wanted at its deadline.
    Keep,
    /// Wanted at this later deadline instead (the owner re-armed it).
    Move(Timestamp),
    /// No longer wanted.
    Drop,
}

/// The most capacity a drained buffer keeps (a burst's peak is not held forever).
const SCRATCH_KEEP: usize = 1024;

#[inline]
fn tick_of(t: Timestamp) -> u64 {
    // Shift so that negative instants (never used in practice) still order correctly.
    // (As u64, wrapping: the same as adding in i128, the tick being far below 2^62.) An
    // instant after the epoch, every one in practice, is divided unsigned: a few
    // instructions fewer than the signed, rounding-down division, for every entry at every
    // level it moves down.
    let ticks = if t.0 >= 0 {
        (t.0 as u64) / TICK_NS as u64
    } else {
        t.0.div_euclid(TICK_NS) as u64
    };
    ticks.wrapping_add(1 << 62)
}

impl Wheel {
    /// An empty wheel whose current time is `now`.
    pub fn new(now: Timestamp) -> Self {
        Wheel {
            elapsed: tick_of(now),
            levels: std::array::from_fn(|_| Level {
                occupied: 0,
                slots: Box::new(std::array::from_fn(|_| Vec::new())),
            }),
            held: Vec::new(),
            len: 0,
            scratch: Vec::new(),
            earliest: u64::MAX,
        }
    }

    /// Number of armed entries (including stale ones not yet fired).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is armed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Arms an entry. A deadline at or before the current tick fires on the next advance.
    pub fn insert(&mut self, e: TimerEntry) {
        self.len += 1;
        let when = tick_of(e.deadline);
        if when <= self.elapsed {
            self.held.push(e);
            return;
        }
        let start = self.place(self.cap(when), e);
        self.earliest = self.earliest.min(start);
    }

    /// The tick a deadline is filed at: itself, or, beyond what the wheel covers, the last tick
    /// of the top level's slot just before the current one, one turn ahead. (Capping at
    /// `elapsed + MAX_TICKS - 1` would land in the current top slot's index one turn ahead,
    /// which reads as due now: the entry would be drained and filed back forever.) A capped
    /// entry comes back early, up to about 394 days ahead, and is filed again from there.
    fn cap(&self, when: u64) -> u64 {
        let top_slot = 1u64 << (SLOT_BITS * (LEVELS as u32 - 1));
        when.min((self.elapsed & !(top_slot - 1)) + MAX_TICKS - 1)
    }

    /// Files an entry at tick `when` (after the current one); returns the tick its slot's range
    /// starts at, for the caller to lower `earliest` by (an advance sets it once when done).
    fn place(&mut self, when: u64, e: TimerEntry) -> u64 {
        let level = level_for(self.elapsed, when);
        let shift = level as u32 * SLOT_BITS;
        let slot = ((when >> shift) as usize) & (SLOTS - 1);
        let lv = &mut self.levels[level];
        lv.slots[slot].push(e);
        lv.occupied |= (1 as Bits) << slot;
        // `when` rounded down to the level's slot size.
        when & !((1u64 << shift) - 1)
    }

    /// An instant no armed entry is due before (`None`: nothing armed): the earliest held
    /// deadline or the start of the earliest occupied slot's range. A lower bound, cheap.
    pub fn due_bound(&self) -> Option<Timestamp> {
        if self.len == 0 {
            return None;
        }
        let held = self.held.iter().map(|e| e.deadline).min();
        let slot = (self.earliest != u64::MAX).then(|| {
            let ns = (self.earliest as i128 - (1i128 << 62)) * TICK_NS as i128;
            Timestamp(ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
        });
        match (held, slot) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b).or(Some(Timestamp::MIN)),
        }
    }

    /// Whether an advance to `now` would fire anything (a cheap check for the hot path).
    pub fn has_due(&self, now: Timestamp) -> bool {
        self.held.iter().any(|e| e.deadline <= now) || tick_of(now) >= self.earliest
    }

    /// Moves time to `now` and appends every entry whose deadline has passed to `out`, sorted
    /// by deadline then rule then slot (deterministic).
    pub fn advance(&mut self, now: Timestamp, out: &mut Vec<TimerEntry>) {
        self.advance_settling(now, out, |_| Settle::Keep);
    }

    /// As [`Wheel::advance`], and every entry moved down a level (not yet due) is first shown
    /// to `settle`: its owner may move it to a later deadline or drop it, so a deadline that
    /// keeps moving (a heartbeat) goes back out once per period instead of cascading to the
    /// bottom level and firing.
    pub fn advance_settling(
        &mut self,
        now: Timestamp,
        out: &mut Vec<TimerEntry>,
        mut settle: impl FnMut(&TimerEntry) -> Settle,
    ) {
        let target = tick_of(now);
        let start = out.len();
        let len = &mut self.len;
        self.held.retain(|e| {
            if e.deadline <= now {
                out.push(*e);
                *len -= 1;
                false
            } else {
                true
            }
        });
        // The first slot not due is where the wheel's earliest stays (`MAX`: none left).
        let mut earliest = u64::MAX;
        while let Some((level, slot, slot_tick)) = self.next_expiration() {
            if slot_tick > target {
                // (Moving the wheel's time on to `target`, short of this slot, changes no
                // slot's start: this is what a scan after would find.)
                earliest = slot_tick;
                break;
            }
            self.elapsed = slot_tick.max(self.elapsed);
            let lv = &mut self.levels[level];
            lv.occupied &= !((1 as Bits) << slot);
            let mut entries = std::mem::take(&mut self.scratch);
            std::mem::swap(&mut entries, &mut lv.slots[slot]);
            for mut e in entries.drain(..) {
                let mut when = self.cap(tick_of(e.deadline));
                if when > self.elapsed {
                    match settle(&e) {
                        Settle::Keep => {}
                        Settle::Move(d) => {
                            e.deadline = d;
                            when = self.cap(tick_of(d));
                        }
                        Settle::Drop => {
                            self.len -= 1;
                            continue;
                        }
                    }
                }
                if when <= self.elapsed {
                    if e.deadline <= now {
                        out.push(e);
                        self.len -= 1;
                    } else {
                        self.held.push(e);
                    }
                } else {
                    self.place(when, e);
                }
            }
            if entries.capacity() <= SCRATCH_KEEP {
                self.scratch = entries;
            }
        }
        if target > self.elapsed {
            self.elapsed = target;
        }
        self.earliest = earliest;
        debug_assert_eq!(earliest, self.scanned_earliest());
        out[start..].sort_unstable();
    }

    /// What `earliest` must be: the start of the earliest occupied slot's range, found by a scan
    /// of the levels (`u64::MAX`: none).
    fn scanned_earliest(&self) -> u64 {
        self.next_expiration().map_or(u64::MAX, |(_, _, tick)| tick)
    }

    /// The earliest (level, slot, tick at which the slot's range starts) that holds entries.
    fn next_expiration(&self) -> Option<(usize, usize, u64)> {
        for (level, lv) in self.levels.iter().enumerate() {
            if lv.occupied == 0 {
                continue;
            }
            let shift = level as u32 * SLOT_BITS;
            let slot_range = 1u64 << shift;
            let level_range = slot_range << SLOT_BITS;
            let now_slot = ((self.elapsed >> shift) as usize) & (SLOTS - 1);
            let rotated = lv.occupied.rotate_right(now_slot as u32);
            let zeros = rotated.trailing_zeros() as usize;
            let slot = (zeros + now_slot) % SLOTS;
            let level_start = self.elapsed & !(level_range - 1);
            let mut tick = level_start + slot as u64 * slot_range;
            if tick + slot_range <= self.elapsed {
                tick += level_range;
            }
            return Some((level, slot, tick));
        }
        None
    }
}

fn level_for(elapsed: u64, when: u64) -> usize {
    const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
    let masked = (elapsed ^ when) | SLOT_MASK;
    let significant = 63 - masked.leading_zeros() as usize;
    (significant / SLOT_BITS as usize).min(LEVELS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Whether the wheel's `earliest` is what a scan of its levels finds (`has_due` trusts it).
    fn earliest_exact(w: &Wheel) -> bool {
        w.earliest == w.scanned_earliest()
    }

    fn entry(ns: i64, slot: u32) -> TimerEntry {
        TimerEntry {
            deadline: Timestamp(ns),
            rule: 0,
            slot,
            generation: 0,
        }
    }

    #[test]
    fn fires_in_order_and_not_early() {
        let mut w = Wheel::new(Timestamp(0));
        w.insert(entry(5_000_000_000, 1));
        w.insert(entry(1_500_000, 2));
        w.insert(entry(3_600_000_000_000, 3));
        let mut out = Vec::new();
        w.advance(Timestamp(1_000_000), &mut out);
        assert!(out.is_empty());
        w.advance(Timestamp(4_999_999_999), &mut out);
        assert_eq!(out.iter().map(|e| e.slot).collect::<Vec<_>>(), vec![2]);
        out.clear();
        w.advance(Timestamp(5_000_000_000), &mut out);
        assert_eq!(out.iter().map(|e| e.slot).collect::<Vec<_>>(), vec![1]);
        out.clear();
        w.advance(Timestamp(3_600_000_000_000), &mut out);
        assert_eq!(out.iter().map(|e| e.slot).collect::<Vec<_>>(), vec![3]);
        assert!(w.is_empty());
    }

    /// Deadlines beyond the wheel's reach (2^35 ms, about 397 days) are parked and fire at
    /// their time; they used to be filed into a slot that read as due now, forever.
    #[test]
    fn deadlines_beyond_the_wheel_fire_at_their_time() {
        const DAY: i64 = 86_400_000_000_000;
        for start in [0i64, 5_000_000, 3 * (1 << 30) * 1_000_000 + 7] {
            let mut w = Wheel::new(Timestamp(start));
            w.insert(entry(start + 1000 * DAY, 1));
            w.insert(entry(start + 5_000_000_000, 2));
            w.insert(entry(start + 3000 * DAY + 1, 3));
            assert!(earliest_exact(&w));
            let mut out = Vec::new();
            w.advance(Timestamp(start + 60_000_000_000), &mut out);
            assert_eq!(out.iter().map(|e| e.slot).collect::<Vec<_>>(), vec![2]);
            out.clear();
            let mut now = start + 60_000_000_000;
            while out.is_empty() {
                now += 10 * DAY;
                w.advance(Timestamp(now), &mut out);
                assert!(earliest_exact(&w));
            }
            assert_eq!(out.iter().map(|e| e.slot).collect::<Vec<_>>(), vec![1]);
            assert!(now - (start + 1000 * DAY) <= 10 * DAY);
            out.clear();
            w.advance(Timestamp(start + 3000 * DAY), &mut out);
            assert!(out.is_empty(), "fired early");
            w.advance(Timestamp(start + 3000 * DAY + 1), &mut out);
            assert_eq!(out.iter().map(|e| e.slot).collect::<Vec<_>>(), vec![3]);
            assert!(w.is_empty());
        }
    }

    proptest! {
        /// Against a sorted list: every entry fires exactly once, at the first advance whose
        /// time reaches its deadline, in deadline order.
        #[test]
        fn matches_a_reference(
            deadlines in proptest::collection::vec(0i64..10_000_000_000_000, 1..200),
            steps in proptest::collection::vec(0i64..500_000_000_000, 1..60),
        ) {
            let mut w = Wheel::new(Timestamp(0));
            for (i, d) in deadlines.iter().enumerate() {
                w.insert(entry(*d, i as u32));
                prop_assert!(earliest_exact(&w));
            }
            let mut now = 0i64;
            let mut fired = vec![false; deadlines.len()];
            let mut all_steps = steps.clone();
            all_steps.push(10_000_000_000_000);
            for s in all_steps {
                now += s;
                let mut out = Vec::new();
                w.advance(Timestamp(now), &mut out);
                prop_assert!(earliest_exact(&w));
                for e in &out {
                    prop_assert!(e.deadline.0 <= now, "fired early");
                    prop_assert!(!fired[e.slot as usize], "fired twice");
                    fired[e.slot as usize] = true;
                }
                for (i, d) in deadlines.iter().enumerate() {
                    if *d <= now {
                        prop_assert!(fired[i], "late: {} at {}", d, now);
                    }
                }
                let ds: Vec<i64> = out.iter().map(|e| e.deadline.0).collect();
                let mut sorted = ds.clone();
                sorted.sort();
                prop_assert_eq!(ds, sorted);
            }
            prop_assert!(w.is_empty());
        }

        /// With an owner that moves some deadlines later and gives up others when the wheel
        /// shows them on the way down: each wanted entry fires exactly once, at the first
        /// advance reaching its latest deadline, and no dropped entry fires.
        #[test]
        fn settling_matches_a_reference(
            deadlines in proptest::collection::vec(0i64..10_000_000_000_000, 1..200),
            moves in proptest::collection::vec((0u8..3, 0i64..5_000_000_000_000), 200),
            steps in proptest::collection::vec(0i64..500_000_000_000, 1..60),
        ) {
            let mut w = Wheel::new(Timestamp(0));
            // The owner's view: the deadline it wants (None: dropped), applied once.
            let mut wanted: Vec<Option<i64>> = Vec::new();
            let mut pending: Vec<(u8, i64)> = Vec::new();
            for (i, d) in deadlines.iter().enumerate() {
                w.insert(entry(*d, i as u32));
                wanted.push(Some(*d));
                pending.push(moves[i]);
            }
            let mut now = 0i64;
            let mut fired = vec![false; deadlines.len()];
            let mut all_steps = steps.clone();
            all_steps.push(20_000_000_000_000);
            for s in all_steps {
                now += s;
                // `has_due` may say yes too early (a slot to cascade), never no when an entry
                // whose deadline has passed is still waiting.
                let waiting = wanted
                    .iter()
                    .zip(&fired)
                    .any(|(d, f)| !f && d.is_some_and(|d| d <= now));
                prop_assert!(!waiting || w.has_due(Timestamp(now)), "has_due missed an entry");
                let mut out = Vec::new();
                w.advance_settling(Timestamp(now), &mut out, |e| {
                    let i = e.slot as usize;
                    match std::mem::take(&mut pending[i]) {
                        (1, by) if by > 0 => {
                            let d = e.deadline.0 + by;
                            wanted[i] = Some(d);
                            Settle::Move(Timestamp(d))
                        }
                        (2, _) => {
                            wanted[i] = None;
                            Settle::Drop
                        }
                        _ => Settle::Keep,
                    }
                });
                prop_assert!(earliest_exact(&w));
                for e in &out {
                    let i = e.slot as usize;
                    prop_assert!(e.deadline.0 <= now, "fired early");
                    prop_assert!(!fired[i], "fired twice");
                    prop_assert_eq!(Some(e.deadline.0), wanted[i], "fired at a deadline not wanted");
                    fired[i] = true;
                }
                for (i, d) in wanted.iter().enumerate() {
                    if let Some(d) = d && *d <= now {
                        prop_assert!(fired[i], "late: {} at {}", d, now);
                    }
                }
            }
            prop_assert!(w.is_empty());
            prop_assert!(wanted.iter().zip(&fired).all(|(w, f)| w.is_some() == *f));
        }
    }
}
