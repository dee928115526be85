//! Integration tests of the `cepheus` binary (one test binary; modules per area).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "cli/rules_check.rs"]
mod rules_check;
