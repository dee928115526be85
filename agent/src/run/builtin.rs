//! The rules built into the binary: `cepheus run` uses them when there is no `rules/` folder,
//! so a first try needs no file at all.

use std::path::{Path, PathBuf};

use cepheus_core::rules::{Compiled, SourceFile, compile};

/// The shipped rule files (not their `*.test.toml`), as `(file name, text)`.
pub const RULE_FILES: &[(&str, &str)] = &[
    (
        "heartbeat.toml",
        include_str!("../../../rules/heartbeat.toml"),
    ),
    ("scan.toml", include_str!("../../../rules/scan.toml")),
    (
        "silent-agent.toml",
        include_str!("../../../rules/silent-agent.toml"),
    ),
    ("ssh.toml", include_str!("../../../rules/ssh.toml")),
];

/// Files that rules refer to (`expect = { file = ... }`, `in file(...)`), as `(file name,
/// text)`. The built-in `hosts.txt` lists no host: the example hosts of `rules/hosts.txt` (web-1, web-2,
/// db-1) would fire as silent on a first try with no file at all, on machines that have none
/// of them; built in, the heartbeat rule watches the hosts it hears from.
pub const DATA_FILES: &[(&str, &str)] = &[
    (
        "hosts.txt",
        "# The built-in rules expect no host: each host is watched from its first heartbeat.\n\
         # To expect hosts, copy the rules folder (`rules/`) and list them in its hosts.txt.\n",
    ),
    ("scanners.txt", include_str!("../../../rules/scanners.txt")),
];

/// The folder name shown in diagnostics of built-in rules.
pub const ORIGIN: &str = "<built-in rules>";

/// Compiles the built-in rules.
pub fn compile_builtin() -> Compiled {
    let sources: Vec<SourceFile> = RULE_FILES
        .iter()
        .map(|(name, text)| SourceFile {
            path: Path::new(ORIGIN).join(name),
            text: (*text).to_string(),
        })
        .collect();
    compile(&sources, &mut |p: &Path| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        DATA_FILES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| (*t).to_string())
            .ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, p.display().to_string())
            })
    })
}

/// Whether a path is one of the built-in rule files (never watched).
pub fn is_builtin(p: &Path) -> bool {
    p.starts_with(PathBuf::from(ORIGIN))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use super::*;

    #[test]
    fn builtin_rules_compile() {
        let c = compile_builtin();
        assert_eq!(c.errors(), 0, "{:?}", c.diagnostics);
        // (scanners.txt holds comments only: an allowlist left empty, not warned of.)
        assert_eq!(c.warnings(), 0, "{:?}", c.diagnostics);
        let rules = c.rules.expect("rules");
        assert!(rules.rules.len() >= 4, "{} rules", rules.rules.len());
        // No example host is expected: a first try raises no alert for hosts that do not
        // exist.
        let hb = rules.rules.iter().find(|r| r.name == "heartbeat-missing");
        assert!(hb.expect("heartbeat rule").expect.is_empty());
    }
}
