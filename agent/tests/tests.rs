//! Integration tests of the agent, linked as one binary (saves link time on a 2-core CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

// Modules of the agent's library, as `crate::ingest` etc. for the test modules.
use cepheus_agent::ingest;

/// `cepheus rules check` through the binary, with snapshots of its diagnostics.
#[path = "cli/rules_check.rs"]
mod rules_check;

/// `cepheus rules graph` through the binary: the paper's shared nodes in text and dot.
mod rules_graph;

/// Syslog, JSON-lines and replay-input parsing against real corpora and hostile input.
mod syslog_ingest;

/// `cepheus replay` against independent counts, the peers' scorer, and itself (determinism).
mod replay;

/// Flows: captures vs tshark sidecars, truncated input, proptests, live capture in a netns.
mod flows;

/// `cepheus run` end to end: logger, reload, duplicates, shards, bad input.
mod agent_e2e;

/// The systemd unit, packaged configuration and install script.
mod packaging;

/// A network namespace with a veth pair, for the live-capture tests.
mod netns;
