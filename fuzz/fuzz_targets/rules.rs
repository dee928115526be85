//! Arbitrary bytes as rule files, through what `cepheus rules check` does with them
//! (`rulefiles::load` after the files are read): `source_from_bytes` (not-UTF-8 diagnostic),
//! `compile`, every diagnostic rendered by miette as `rules check` renders it and as JSON
//! (`--format json`), and the summary line. Must never panic, whatever the text.
//!
//! The input is split at its first NUL byte into two files (`a.toml`, `b.toml`), so rules
//! across files (duplicate names, notes pointing at the other file) are reached too; without a
//! NUL it is one file. `expect = { file = .. }` and a condition's `in file(..)` read
//! `self.txt` as the input's own text, `missing.txt` as not found, and any other name as a
//! fixed list of keys of several types.
//!
//! A rule set that compiles must also be accepted by `graph::build` (text and dot, as
//! `cepheus rules graph` prints it) and `Engine::new`, shared and unshared: the checker is the
//! only validation, the engine's `PlanError` is a safety net that must never trip.

#![no_main]

use std::path::{Path, PathBuf};

use cepheus_agent::rulefiles::{Loaded, put_not_utf8_first};
use cepheus_agent::rules_cmd::render;
use cepheus_core::engine::{Engine, EngineConfig};
use cepheus_core::graph;
use cepheus_core::rules::{compile, source_from_bytes};
use libfuzzer_sys::fuzz_target;

/// What an `expect` file other than `self.txt` and `missing.txt` holds: names, numbers, IP
/// addresses, a comment, a blank line, a two-field key and a bad line.
const EXPECT_TEXT: &str = "web-1\n# comment\n\n22\n10.0.0.1\n::1\nweb-2,22\n-5\nnot an ip\n";

fuzz_target!(|data: &[u8]| {
    let files: Vec<(&str, &[u8])> = match data.iter().position(|&b| b == 0) {
        Some(i) => vec![
            ("/fuzz/a.toml", &data[..i]),
            ("/fuzz/b.toml", &data[i + 1..]),
        ],
        None => vec![("/fuzz/a.toml", data)],
    };
    let mut sources = Vec::new();
    let mut not_utf8 = Vec::new();
    for (p, bytes) in files {
        let (src, bad) = source_from_bytes(PathBuf::from(p), bytes.to_vec());
        sources.push(src);
        not_utf8.extend(bad);
    }
    let own_text = String::from_utf8_lossy(data).into_owned();
    let mut read_file = |p: &Path| -> std::io::Result<String> {
        match p.file_name().and_then(|n| n.to_str()) {
            Some("self.txt") => Ok(own_text.clone()),
            Some("missing.txt") => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such file",
            )),
            _ => Ok(EXPECT_TEXT.to_string()),
        }
    };
    let mut compiled = compile(&sources, &mut read_file);
    // As `rulefiles::load`: a file that is not UTF-8 has its error first, and no rules.
    put_not_utf8_first(&mut compiled, not_utf8);
    // What `rules check` prints: each diagnostic rendered (human) or as JSON, and the summary.
    for d in &compiled.diagnostics {
        let _ = render(d, false);
        let _ = d.to_json().to_string();
    }
    let loaded = Loaded { sources, compiled };
    let _ = loaded.summary();

    // A checked rule set is one the engine runs.
    if let Some(rules) = &loaded.compiled.rules {
        for share in [true, false] {
            let g = graph::build(rules, share);
            let _ = g.to_text();
            let _ = g.to_dot();
            let cfg = EngineConfig {
                share,
                ..EngineConfig::default()
            };
            if let Err(e) = Engine::new(rules, cfg) {
                panic!(
                    "rules check accepted a rule set that Engine::new (share: {share}) refuses: {e}"
                );
            }
        }
    }
});
