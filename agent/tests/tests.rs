//! Integration tests of the `cepheus` binary: one test executable, one module per area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

// Flows: captures vs tshark sidecars, truncated input, proptests, live capture in a netns.
mod flows;
