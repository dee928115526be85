//! FNV-1a (64 bit): the one stable hash of the project, for values that must be the same on
//! every run, build and machine (shard ownership, alert ids, fingerprints in the graph dump,
//! the agent's flow ids).

/// An FNV-1a state; bytes are fed in order, so feeding a text piece by piece hashes as feeding
/// it whole.
pub struct Fnv(u64);

impl Fnv {
    /// The FNV-1a offset basis.
    pub fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds bytes, in order.
    pub fn feed(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The byte that closes a part: no UTF-8 text contains it.
    pub const END: u8 = 0xff;

    /// Closes a part with [`Fnv::END`], so parts fed one after the other cannot run into
    /// each other.
    pub fn end(&mut self) {
        self.feed(&[Fnv::END]);
    }

    /// The hash of what was fed so far (feeding may go on).
    pub fn finish(&self) -> u64 {
        self.0
    }

    /// Continues from a state [`Fnv::finish`] returned (hashing a common prefix once).
    pub fn resume(state: u64) -> Fnv {
        Fnv(state)
    }
}

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv::new()
    }
}

impl std::fmt::Write for Fnv {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.feed(s.as_bytes());
        Ok(())
    }
}
