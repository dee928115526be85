//! The rule language: TOML rule files, condition and pattern expressions, the checker and the
//! compiled form ([`ir`]) the engine consumes.
//!
//! [`compile`] is the entry point: rule file texts in, a checked [`ir::RuleSet`] and every
//! [`Diagnostic`] out. It does no I/O of its own; `expect = { file = ... }` is read through the
//! caller's `read_file`.

mod check;
pub mod diag;
mod file;
pub mod ir;
pub mod syntax;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use diag::{Diagnostic, Label, Level};
pub use file::rule_keys;

/// One rule file: its path (for messages and relative `expect` files) and its text.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Where the file is.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

/// The result of [`compile`].
#[derive(Debug, Default)]
pub struct Compiled {
    /// The rules, when there is no error (warnings allowed).
    pub rules: Option<ir::RuleSet>,
    /// Every error and warning, in file order.
    pub diagnostics: Vec<Diagnostic>,
}

impl Compiled {
    /// Number of errors.
    pub fn errors(&self) -> usize {
        self.diagnostics.iter().filter(|d| d.is_error()).count()
    }

    /// Number of warnings.
    pub fn warnings(&self) -> usize {
        self.diagnostics.len() - self.errors()
    }
}

/// Parses, checks and compiles rule files (sorted by path); `expect` files are read through
/// `read_file` (paths relative to each rule file's folder).
pub fn compile(
    sources: &[SourceFile],
    read_file: &mut dyn FnMut(&Path) -> std::io::Result<String>,
) -> Compiled {
    compile_within(sources, read_file, check::MAX_REGEX_BYTES)
}

/// [`compile`] with the regexes' budget `regex_budget` (bytes) in place of
/// [`check::MAX_REGEX_BYTES`] (the tests' smaller one).
fn compile_within(
    sources: &[SourceFile],
    read_file: &mut dyn FnMut(&Path) -> std::io::Result<String>,
    regex_budget: usize,
) -> Compiled {
    let mut order: Vec<&SourceFile> = sources.iter().collect();
    order.sort_by(|a, b| a.path.cmp(&b.path));
    let mut session = file::Session {
        diags: Vec::new(),
        names: HashMap::new(),
        meanings: HashMap::new(),
        read_file,
        regex_bytes: check::MAX_REGEX_BYTES.saturating_sub(regex_budget),
        regexes: HashMap::new(),
        lists: HashMap::new(),
    };
    let mut rules = Vec::new();
    for src in order {
        rules.extend(file::compile_file(&src.path, &src.text, &mut session));
    }
    let diagnostics = session.diags;
    let ok = !diagnostics.iter().any(Diagnostic::is_error);
    Compiled {
        rules: ok.then(|| ir::RuleSet {
            rules: rules.into_iter().map(Arc::new).collect(),
        }),
        diagnostics,
    }
}

/// What is wrong with text that is not UTF-8, in one wording for every file the agent reads:
/// the first bad byte and its offset.
pub fn not_utf8(e: &std::string::FromUtf8Error) -> String {
    let at = e.utf8_error().valid_up_to();
    let bytes = e.as_bytes();
    let byte = bytes.get(at).copied().unwrap_or(0);
    // Where, as an editor counts it (the text before it is valid).
    let before = &bytes[..at.min(bytes.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let column = std::str::from_utf8(&before[line_start..]).map_or(0, |t| t.chars().count()) + 1;
    format!(
        "not UTF-8 text: byte 0x{byte:02x} at line {line}, column {column} (offset {at}) is not valid here"
    )
}

/// A rule file read as bytes. When it is not UTF-8 the bad bytes are replaced (so the rest of
/// the file is still checked) and an error points at the first of them.
pub fn source_from_bytes(path: PathBuf, bytes: Vec<u8>) -> (SourceFile, Option<Diagnostic>) {
    match String::from_utf8(bytes) {
        Ok(text) => (SourceFile { path, text }, None),
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let message = format!("this file is {}", not_utf8(&e));
            let text = String::from_utf8_lossy(e.as_bytes()).into_owned();
            let ctx = diag::FileCtx::new(path.clone(), &text);
            let mut d = ctx.diag(
                diag::Level::Error,
                at..at + char::REPLACEMENT_CHARACTER.len_utf8(),
                message,
            );
            d.help =
                Some("rule files are UTF-8: re-encode it (e.g. `iconv -f latin1 -t utf-8`)".into());
            (SourceFile { path, text }, Some(d))
        }
    }
}

/// Compiles rule texts that read no `expect` files (tests, the API's "check this text").
pub fn compile_str(path: &str, text: &str) -> Compiled {
    let src = [SourceFile {
        path: PathBuf::from(path),
        text: text.to_string(),
    }];
    compile(&src, &mut |p| {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} (no files are read here)", p.display()),
        ))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The regexes of a whole rule set have one budget: past it, each further regex is an
    /// error at its place (memory and compile time stay bounded however many a file holds);
    /// a regex written again is shared, not built (nor counted) again.
    #[test]
    fn the_regexes_of_a_rule_set_share_one_budget() {
        let rule = |n: usize, re: &str| {
            format!(
                "[[rule]]\nname = \"r{n}\"\nseverity = \"low\"\nevents.a = 'msg =~ \"{re}\"'\npattern = \"a\"\n"
            )
        };
        let same: String = (0..40).map(|n| rule(n, r"\w{20}x")).collect();
        let distinct: String = (0..40)
            .map(|n| rule(n, &format!(r"\w{{20}}x{n}")))
            .collect();
        let run = |text: &str, budget: usize| {
            let src = [SourceFile {
                path: PathBuf::from("r.toml"),
                text: text.to_string(),
            }];
            compile_within(
                &src,
                &mut |_| Err(std::io::ErrorKind::NotFound.into()),
                budget,
            )
        };
        let one = ir::Re::new(r"\w{20}x").unwrap().memory_usage();
        let budget = one * 10;
        assert_eq!(run(&same, budget).errors(), 0);
        let c = run(&distinct, budget);
        let msgs: Vec<&str> = c.diagnostics.iter().map(|d| d.message.as_str()).collect();
        assert!((25..=31).contains(&c.errors()), "{msgs:#?}");
        let d = &c.diagnostics[0];
        assert!(
            d.message.contains("regexes take more than"),
            "{}",
            d.message
        );
        // (At least eight of the ten it has room for fitted.)
        assert!(d.line > 8 * 5, "{}", d.line);
        assert_eq!(run(&distinct, check::MAX_REGEX_BYTES).errors(), 0);
        // A regex too large to build, written three times: refused at each place (built
        // once: the fuzz reproducer slow-failing-regex-recompiled-2k times it).
        let big: String = (0..3).map(|n| rule(n, r"\w{600}")).collect();
        let c = run(&big, check::MAX_REGEX_BYTES);
        assert_eq!(c.errors(), 3);
        assert!(
            c.diagnostics
                .iter()
                .all(|d| d.message == c.diagnostics[0].message),
            "{:?}",
            c.diagnostics
        );
        // A regex that is wrong is said to be wrong, budget spent or not.
        let c = run(&format!("{distinct}{}", rule(99, "(")), budget);
        let last = c.diagnostics.last().unwrap();
        assert!(
            last.message.starts_with("invalid regex"),
            "{}",
            last.message
        );
    }
}
