//! Engine tests (one test binary): table-driven semantics and properties.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "engine/support.rs"]
mod support;

#[path = "engine/cases.rs"]
mod cases;

#[path = "engine/props.rs"]
mod props;

#[path = "engine/oracle.rs"]
mod oracle;
