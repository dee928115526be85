//! cepheus-core: the CEP engine of cepheus, with no I/O, no clock and no actix.
//!
//! This crate owns the event model ([`event`]), the rule language ([`rules`]: parse, check,
//! compile), the engine ([`engine`]: per-group state, timers, the time model) and the alert
//! shape ([`alert`]). It is fed events and "the time is now T" and returns alerts; everything
//! that touches sockets, threads, clocks or disks lives in `cepheus-agent` and `cepheus-store`.
//! That seam is what makes a replay of a file give the same alerts every time, and what lets
//! the same code run live, in replay, in tests and in benchmarks.

pub mod alert;
pub mod engine;
pub mod event;
pub mod fnv;
pub mod graph;
pub mod rules;
pub mod time;
