//! Memory given back to the system by threads that went quiet.
//!
//! mimalloc keeps a thread's freed pages in that thread's heap until the thread allocates or
//! frees again; a block one thread frees into another's page waits there too. A shard that
//! made a burst of alerts and then sits idle (an absence storm: everything fires once) would
//! keep hundreds of MB that way (docs/benchmarks.md, "The store"). The shards and the alert sink
//! collect their heaps now and then ([`collect`]).

use std::time::Duration;

/// How often a thread collects its heap, at most.
pub const EVERY: Duration = Duration::from_secs(5);

/// Hands the calling thread's freed pages (and those other threads freed into them) back to
/// the system: a thread that may sit idle calls it every [`EVERY`] (an actor's `run_interval`).
pub fn collect() {
    // SAFETY: `mi_collect` takes no pointer and only walks the calling thread's own heap
    // (mimalloc's documented use: "eagerly free memory"). In the binary mimalloc is the global
    // allocator (main.rs); where it is not (the library's tests), its heap is empty.
    #[allow(
        unsafe_code,
        reason = "one call into mimalloc's C API, no pointers passed"
    )]
    unsafe {
        libmimalloc_sys::mi_collect(false);
    }
}
