//! `cepheus rules test` on a test file the input holds, against one of the shipped rule files:
//! the test file's head and tables are read, each test's input replayed through the engine and
//! its expectations compared. Must never panic or hang, whatever the file says (a test file
//! is written by hand, next to the rules, and run in CI).
//!
//! Input: the first byte picks the rule file under test (heartbeat, ssh, scan, silent-agent,
//! each as shipped, with heartbeat's `hosts.txt`); the rest is the test file's text.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use cepheus_agent::rules_test::{TestArgs, run};
use libfuzzer_sys::fuzz_target;

/// The shipped rule files, by name.
const RULES: [(&str, &str); 4] = [
    ("heartbeat", include_str!("../../rules/heartbeat.toml")),
    ("ssh", include_str!("../../rules/ssh.toml")),
    ("scan", include_str!("../../rules/scan.toml")),
    (
        "silent-agent",
        include_str!("../../rules/silent-agent.toml"),
    ),
];

/// A folder of its own, with the rule files and the lists they read written once.
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d =
            std::env::temp_dir().join(format!("cepheus-fuzz-rules-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a scratch folder");
        for (name, text) in RULES {
            std::fs::write(d.join(format!("{name}.toml")), text).expect("a rule file");
        }
        std::fs::write(d.join("hosts.txt"), include_str!("../../rules/hosts.txt"))
            .expect("hosts.txt");
        std::fs::write(d.join("scanners.txt"), include_str!("../../rules/scanners.txt"))
            .expect("scanners.txt");
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (name, _) = RULES[pick as usize % RULES.len()];
    let path = dir().join(format!("{name}.test.toml"));
    if std::fs::write(&path, rest).is_err() {
        return;
    }
    let _ = run(TestArgs { paths: vec![path] });
});
