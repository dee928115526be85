//! The rule language: TOML rule files, condition and pattern expressions, the checker and the
//! compiled form ([`ir`]) the engine consumes.

pub mod ir;
