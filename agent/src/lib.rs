//! cepheus-agent: everything of the `cepheus` binary that is not the command line.
//!
//! This crate is the shell around `cepheus-core`: it reads files, captures and (next) sockets,
//! turns their bytes into events, drives the engine's clock, and writes alerts; `run` is the
//! live appliance (actix actors). It owns all
//! I/O; the semantics live in `cepheus-core`. A library target so that tests and benchmarks
//! link the same code the binary runs.

pub mod alerts_cmd;
pub mod api_client;
pub mod events_cmd;
pub mod flow;
pub mod groups_cmd;
pub mod ingest;
pub mod replay;
pub mod rulefiles;
pub mod rules_cmd;
pub mod rules_graph;
pub mod rules_test;
pub mod run;
pub mod tui_cmd;
