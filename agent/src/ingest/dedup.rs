//! Exact-duplicate suppression (DESIGN.md, "Event filtering"): the same bytes from the same
//! peer within a short window are dropped before any rule sees them (a message relayed twice,
//! a packet seen twice on loopback). Pure: the caller passes the time.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;

use cepheus_core::time::{Duration, Timestamp};

/// One filter read by several inputs of a replay (a message relayed twice is in two files).
pub type SharedDedup = std::rc::Rc<std::cell::RefCell<Dedup>>;

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
    /// Per-process random keys: a sender cannot craft messages that collide with others'.
    state: std::collections::hash_map::RandomState,
}

impl Dedup {
    /// A filter remembering messages for `window`, at most `capacity` of them.
    pub fn new(window: Duration, capacity: usize) -> Dedup {
        Dedup {
            window,
            capacity: capacity.max(1),
            ring: VecDeque::new(),
            counts: HashMap::new(),
            state: std::collections::hash_map::RandomState::new(),
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
    /// window after the copy that was let through (the message is a duplicate and must be
    /// dropped). A duplicate does not restart the window: a message repeated more often than
    /// the window (a stamp-less heartbeat every second) still gets through once per window.
    pub fn seen(&mut self, bytes: &[u8], peer: Option<IpAddr>, now: Timestamp) -> bool {
        if !self.enabled() {
            return false;
        }
        let h = self.key(bytes, peer);
        self.seen_key(h, now)
    }

    /// The message's key (its bytes and peer, hashed with this filter's keys), for a caller
    /// that decides later, in another order than it reads ([`Dedup::seen_key`]).
    pub fn key(&self, bytes: &[u8], peer: Option<IpAddr>) -> u64 {
        let mut hasher = self.state.build_hasher();
        peer.hash(&mut hasher);
        bytes.hash(&mut hasher);
        hasher.finish()
    }

    /// [`Dedup::seen`] of a message known by its [`Dedup::key`].
    pub fn seen_key(&mut self, h: u64, now: Timestamp) -> bool {
        if !self.enabled() {
            return false;
        }
        let cutoff = now.sub(self.window);
        while let Some(&(old, t)) = self.ring.front() {
            if t >= cutoff && self.ring.len() < self.capacity {
                break;
            }
            self.ring.pop_front();
            if let Some(c) = self.counts.get_mut(&old) {
                *c -= 1;
                if *c == 0 {
                    self.counts.remove(&old);
                }
            }
        }
        if self.counts.contains_key(&h) {
            return true;
        }
        self.ring.push_back((h, now));
        *self.counts.entry(h).or_insert(0) += 1;
        false
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
        // A message repeated every second with a 2 s window: dropped within 2 s of the copy
        // let through, let through again after (a duplicate does not restart the window).
        let mut d = Dedup::new(Duration::from_secs(2), 100);
        let kept: Vec<i64> = (0..10i64)
            .filter(|&s| !d.seen(b"hb", peer, t.add(Duration::from_secs(s))))
            .collect();
        assert_eq!(kept, [0, 3, 6, 9]);
        let mut off = Dedup::new(Duration::ZERO, 4);
        assert!(!off.seen(b"m", peer, t));
        assert!(!off.seen(b"m", peer, t));
    }
}
