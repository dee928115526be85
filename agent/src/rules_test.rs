//! `cepheus rules test`: rule unit tests in the manner of `promtool test rules`.
//!
//! A test file `NAME.test.toml` sits beside the rule file `NAME.toml` it tests. Each `[[test]]`
//! gives input (syslog lines or JSON-lines events, mixed freely), optionally how far to run the
//! clock past the input, and the alert changes expected. The command runs each test in a fresh
//! engine, exactly as `cepheus replay` would (a syslog line repeated byte for byte within the
//! duplicate window is dropped, as replay drops it), and reports every difference.
//!
//! ```toml
//! rules = ["ssh.toml"]   # optional; default: the rule file with the same stem
//! year  = 2024           # RFC 3164 stamps' year, 1678 to 2261 (default 2024: tests never age)
//! dedup_window = "2s"    # optional, as replay's --dedup-window ("0s" keeps every line)
//!
//! [[test]]
//! name  = "five failures then a success"
//! input = """
//! Dec 10 06:55:46 gw sshd[1]: Failed password for root from 203.0.113.9 port 1 ssh2
//! ...
//! """
//! until = "+10m"                  # optional: RFC 3339 time or +DURATION past the last event
//! rules_under_test = ["ssh-bruteforce-then-success"]   # optional: ignore other rules' alerts
//!
//! [[test.expect]]
//! rule  = "ssh-bruteforce-then-success"
//! state = "firing"                # default "firing"
//! group = { src = "203.0.113.9" }
//! time  = "2024-12-10T06:56:30Z"  # optional, like message and reason
//! ```

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use cepheus_core::alert::Alert;
use cepheus_core::engine::{Engine, EngineConfig};
use cepheus_core::rules::ir::RuleSet;
use cepheus_core::time::Duration;
use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::ingest::syslog::{SyslogParser, Year, Zone};
use crate::replay::{self, Merger, Summary, Until};

/// Arguments of `cepheus rules test`.
#[derive(clap::Args, Debug)]
pub struct TestArgs {
    /// Test files (`*.test.toml`), folders searched for them, or rule files (their
    /// `NAME.test.toml` beside them).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestFile {
    /// (Spanned: a file that cannot be read is said where it is named.)
    rules: Option<Vec<Spanned<PathBuf>>>,
    /// Checked as replay's `--year` is ([`Year::checked`]), and said where it is written.
    year: Option<Spanned<i64>>,
    tz: Option<Spanned<String>>,
    /// As replay's `--dedup-window` (default the same, [`replay::DEFAULT_DEDUP_WINDOW`]).
    dedup_window: Option<Spanned<String>>,
    /// Files the rules read (`expect` and list files), by path relative to this file's
    /// folder, and the text they read in their place: a test that does not depend on the
    /// folder's own `hosts.txt`, which its operator edits for the fleet.
    files: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    /// Only that `test` is an array here: each test is read on its own ([`TestCase`], from
    /// the document with its spans, [`read_test_file`]): one that is not valid is said and
    /// counted, and the others still run.
    #[serde(default, rename = "test")]
    tests: Vec<serde::de::IgnoredAny>,
}

/// One `[[test]]`. Values that can be wrong keep where they are written ([`Spanned`]), so
/// what is said of them names `FILE:LINE:COLUMN`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestCase {
    name: String,
    /// (Where it is: the line numbers of the lines it refuses.)
    input: Spanned<String>,
    until: Option<Spanned<String>>,
    rules_under_test: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    expect: Vec<Spanned<Expected>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    rule: Spanned<String>,
    #[serde(default = "firing")]
    state: Spanned<String>,
    group: Option<Spanned<Group>>,
    time: Option<Spanned<Time>>,
    message: Option<String>,
    reason: Option<Spanned<String>>,
}

/// An expected alert's group: each `group_by` field's value (the keys spanned too).
type Group = std::collections::BTreeMap<Spanned<String>, toml::Value>;

/// The group of an expectation that names none.
static NO_GROUP: Group = Group::new();

impl Expected {
    fn group(&self) -> &Group {
        self.group.as_ref().map_or(&NO_GROUP, Spanned::get_ref)
    }
}

/// A time written as a string or as a TOML datetime (`time = 2024-12-10T10:01:00Z`, which
/// TOML reads as a date, not text).
#[derive(Debug)]
struct Time(String);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::String(s) => Ok(Time(s)),
            toml::Value::Datetime(t) => Ok(Time(t.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "a time such as \"2024-12-10T10:01:00Z\", found {}",
                other.type_str()
            ))),
        }
    }
}

fn firing() -> Spanned<String> {
    // (Never said to be wrong: where it is does not matter.)
    Spanned::new(0..0, "firing".into())
}

/// Runs `cepheus rules test`: exit 0 when every test passes, 1 on any failure, 2 on
/// usage/IO errors.
pub fn run(args: TestArgs) -> ExitCode {
    let files = match collect(&args.paths) {
        Ok(f) if f.is_empty() => {
            eprintln!("error: no test files (*.test.toml) in the given paths");
            return ExitCode::from(2);
        }
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let color = std::io::stdout().is_terminal();
    let (mut passed, mut failed, mut broken) = (0usize, 0usize, 0usize);
    for f in &files {
        // A file or test that cannot be run (unreadable, not a test file, its rules with
        // errors, a bad `until`) is said, and the others still run: one typo hides no other
        // result.
        match run_file(f, color) {
            Ok((p, fl, b)) => {
                passed += p;
                failed += fl;
                broken += b;
            }
            Err(e) => {
                broken += 1;
                println!("  {} {e:#}", paint("ERROR", "31", color));
                // (The file named once: most of these name it, or where in it.)
                let e = format!("{e:#}");
                if e.contains(&f.display().to_string()) {
                    eprintln!("error: {e}");
                } else {
                    eprintln!("error: {}: {e}", f.display());
                }
            }
        }
    }
    let not_run = match broken {
        0 => String::new(),
        n => format!(", {n} could not be run"),
    };
    println!(
        "{} test file(s): {passed} passed, {failed} failed{not_run}",
        files.len()
    );
    if broken > 0 {
        ExitCode::from(2)
    } else if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Test files under `paths` (files as given, folders searched for `*.test.toml`), sorted.
/// A rule file `NAME.toml` stands for its tests, `NAME.test.toml` beside it.
fn collect(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut given = Vec::with_capacity(paths.len());
    for p in paths {
        if is_test_file(p) || !p.is_file() {
            given.push(p.clone());
            continue;
        }
        if p.extension().is_none_or(|e| e != "toml") {
            anyhow::bail!(
                "{} is neither a rule file nor a rule test file (not `.toml`): give a rule file NAME.toml, its tests NAME.test.toml, or a folder of them",
                p.display()
            );
        }
        let stem = p
            .file_stem()
            .map_or_else(|| "NAME".into(), |s| s.to_string_lossy().into_owned());
        let tests = p.with_file_name(format!("{stem}.test.toml"));
        if !tests.is_file() {
            anyhow::bail!(
                "{} is not a rule test file, and {} does not exist: the tests of {stem}.toml go in {stem}.test.toml beside it (see docs/rules.md, \"Testing rules\")",
                p.display(),
                tests.display()
            );
        }
        given.push(tests);
    }
    crate::rulefiles::collect_matching(&given, &|p| is_test_file(p))
}

/// Whether a path names a rule test file (`*.test.toml`).
pub fn is_test_file(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".test.toml"))
}

/// A test file's head, checked, and its `[[test]]` tables as written (with their spans in
/// `text`), to be read one by one.
fn read_test_file<'t>(
    path: &Path,
    text: &'t str,
) -> anyhow::Result<(TestFile, Vec<Spanned<DeValue<'t>>>)> {
    let invalid = |e: toml::de::Error| {
        anyhow::anyhow!(
            "{} is not a valid test file: {e}{}",
            path.display(),
            cepheus_core::rules::diag::unknown_key_hint(e.message())
        )
    };
    let doc = DeTable::parse(text).map_err(invalid)?;
    let file = TestFile::deserialize(toml::de::Deserializer::from(doc.clone())).map_err(
        |mut e: toml::de::Error| {
            // (The text, for the excerpt under the message.)
            e.set_input(Some(text));
            invalid(e)
        },
    )?;
    let tests = match doc.into_inner().remove("test").map(Spanned::into_inner) {
        Some(DeValue::Array(tests)) => tests.into_iter().collect(),
        _ => Vec::new(),
    };
    Ok((file, tests))
}

/// Runs one test file: (passed, failed, tests that could not be run).
fn run_file(path: &Path, color: bool) -> anyhow::Result<(usize, usize, usize)> {
    println!("{}", path.display());
    let text = crate::rulefiles::read_text(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let (file, tests) = read_test_file(path, &text)?;
    // A file with no test would pass while testing nothing (`[[tests]]` is an unknown key,
    // but an empty file, or a head alone, reads as valid): it cannot be run, as pytest counts
    // collecting no test a failure.
    if file.tests.is_empty() {
        bail!(
            "no [[test]] in {}: a test file holds one `[[test]]` table per test (docs/rules.md, \"Testing rules\")",
            path.display()
        );
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let place = Place { path, text: &text };
    // The rule file a test file stands beside: NAME.toml for NAME.test.toml.
    let beside = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .trim_end_matches(".test.toml")
        .to_string()
        + ".toml";
    let rule_paths: Vec<PathBuf> = match &file.rules {
        // Nothing named would load whatever `./rules` holds where the command runs, or the
        // built-in rules: the test would pass or fail by the folder (found by an audit).
        Some(list) if list.is_empty() => bail!(
            "{}: `rules = []` names no rule file: name the files under test (relative to this file), or leave `rules` out for {beside}",
            path.display(),
        ),
        Some(list) => {
            for p in list {
                let full = dir.join(p.get_ref());
                if let Err(e) = std::fs::metadata(&full) {
                    bail!(
                        "{}: rules: cannot read {}: {e} (paths are relative to the test file's folder)",
                        place.at(p.span()),
                        full.display()
                    );
                }
            }
            list.iter().map(|p| dir.join(p.get_ref())).collect()
        }
        None => vec![dir.join(&beside)],
    };
    // The files the test gives in place of the folder's, by the file they are (`hosts.txt`
    // and `../rules/hosts.txt` from the rules' folder are one), whether it exists or not.
    let mut given: std::collections::BTreeMap<PathBuf, &str> = Default::default();
    if let Some(f) = &file.files {
        for (name, text) in f.get_ref() {
            let at = crate::rulefiles::identity(&dir.join(name));
            if given.insert(at.clone(), text.as_str()).is_some() {
                bail!(
                    "{}: `files` gives {} twice (under two names)",
                    place.at(f.span()),
                    at.display()
                );
            }
        }
    }
    let used = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let loaded = crate::rulefiles::load_with(&rule_paths, &|p: &Path| {
        let at = crate::rulefiles::identity(p);
        let text = given.get(&at)?;
        used.borrow_mut().insert(at);
        Some((*text).to_string())
    })?;
    replay::show_diagnostics(&loaded.compiled.diagnostics, usize::MAX);
    let Some(rules) = loaded.compiled.rules else {
        bail!("the rules under test have errors");
    };
    // A name no rule reads is a mistake (a misspelt name would test the folder's file).
    if let Some(f) = &file.files
        && let Some(unread) = given.keys().find(|p| !used.borrow().contains(*p))
    {
        bail!(
            "{}: `files` gives {}, which no rule under test reads (names are relative to this file's folder, as the rules' `expect = {{ file = .. }}` and `in file(..)` resolve them)",
            place.at(f.span()),
            unread.display()
        );
    }
    let zone: Zone = match &file.tz {
        Some(z) => z
            .get_ref()
            .parse()
            .map_err(|e| anyhow::anyhow!("{}: `tz`: {e}", place.at(z.span())))?,
        None => Zone::default(),
    };
    let year = match &file.year {
        // Out of the range, every RFC 3164 line of every test would be refused.
        Some(y) => Year::checked(*y.get_ref())
            .map_err(|e| anyhow::anyhow!("{}: `year`: {e}", place.at(y.span())))?,
        None => 2024,
    };
    let parser = SyslogParser::new(zone, Year::Fixed(year));
    let dedup_window = match &file.dedup_window {
        Some(w) => Duration::parse(w.get_ref()).map_err(|e| {
            anyhow::anyhow!(
                "{}: dedup_window `{}`: {e}",
                place.at(w.span()),
                w.get_ref()
            )
        })?,
        None => Duration::parse(replay::DEFAULT_DEDUP_WINDOW).map_err(anyhow::Error::msg)?,
    };
    let (mut passed, mut failed, mut broken) = (0, 0, 0);
    for (i, table) in tests.into_iter().enumerate() {
        let name = table
            .get_ref()
            .as_table()
            .and_then(|t| t.get("name"))
            .and_then(|n| n.get_ref().as_str());
        let label = match name {
            Some(n) => format!("`{n}`"),
            None => format!("number {}", i + 1),
        };
        // (Where `rules_under_test` is, should it name nothing.)
        let under_test_at = table
            .get_ref()
            .as_table()
            .and_then(|t| t.get("rules_under_test"))
            .map(|v| place.at(v.span()));
        // Read from the document, its errors carry where (the key, the value) in the file.
        let t = match TestCase::deserialize(toml::de::ValueDeserializer::from(table)) {
            Ok(t) => t,
            Err(e) => {
                broken += 1;
                let hint = cepheus_core::rules::diag::unknown_key_hint(e.message());
                let hint = if hint.is_empty() {
                    hint
                } else {
                    format!(" ({hint})")
                };
                let at = e
                    .span()
                    .map_or_else(|| path.display().to_string(), |s| place.at(s));
                let why = format!("{}{hint}", e.message().trim());
                println!(
                    "  {} test {label} is not valid: {at}: {why}",
                    paint("ERROR", "31", color)
                );
                eprintln!("error: {at}: test {label} is not valid: {why}");
                continue;
            }
        };
        let t = &t;
        // An empty list leaves every alert out: a test that nothing should fire could never
        // fail (found by an audit).
        let named = if t.rules_under_test.as_ref().is_some_and(Vec::is_empty) {
            Err((
                under_test_at.unwrap_or_else(|| path.display().to_string()),
                "`rules_under_test = []` names no rule, so every alert would be left out and the test could not fail: name the rules whose alerts count, or leave it out".to_string(),
            ))
        } else {
            Ok(())
        };
        let until = t.until.as_ref().map(|u| {
            replay::parse_until(u.get_ref())
                .map_err(|e| (place.at(u.span()), format!("`until`: {e:#}")))
        });
        let problems = match named.and(until.transpose()).and_then(|until| {
            run_case(&rules, parser, dedup_window, t, until, &place)
                .map_err(|e| (path.display().to_string(), format!("{e:#}")))
        }) {
            Ok(p) => p,
            Err((at, why)) => {
                broken += 1;
                println!("  {} {}: {at}: {why}", paint("ERROR", "31", color), t.name);
                eprintln!("error: {at}: test `{}`: {why}", t.name);
                continue;
            }
        };
        if problems.is_empty() {
            passed += 1;
            println!("  {} {}", paint("ok", "32", color), t.name);
        } else {
            failed += 1;
            println!("  {} {}", paint("FAILED", "31", color), t.name);
            for p in problems {
                println!("      {p}");
            }
        }
    }
    Ok((passed, failed, broken))
}

/// A test file's name and text, to say where in it a value is written.
struct Place<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Place<'_> {
    /// `FILE:LINE:COLUMN` of where `span` begins (1-based; the column counts characters, as
    /// the diagnostics of rule files do).
    fn at(&self, span: std::ops::Range<usize>) -> String {
        let (line, column) = line_column(self.text, span.start);
        format!("{}:{line}:{column}", self.path.display())
    }
}

/// 1-based line and column (in characters) of a byte offset of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = text.get(..offset).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).unwrap_or_default().chars().count() + 1;
    (before.matches('\n').count() + 1, column)
}

fn paint(s: &str, code: &str, color: bool) -> String {
    if color {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

/// The line of the test file where an `input` string's first line is (three quotes and a
/// line end begin it on the next line: TOML drops that line end).
fn input_first_line(text: &str, span: std::ops::Range<usize>) -> u64 {
    let start = span.start.min(text.len());
    let line = text[..start].matches('\n').count() as u64 + 1;
    let lit = &text[start..];
    let multi = lit.starts_with("\"\"\"") || lit.starts_with("'''");
    let after = lit.get(3..).unwrap_or_default();
    if multi && (after.starts_with('\n') || after.starts_with("\r\n")) {
        line + 1
    } else {
        line
    }
}

/// A maximum matching of expectations to alerts: `fits[e]` the alerts expectation `e` fits,
/// in order; the answer gives, for each of the `alerts`, the expectation it is paired with.
/// Kuhn's augmenting paths, each expectation tried in the order written and its alerts in
/// theirs, so a test whose entries do not compete pairs them as the first fit would.
fn pair_up(fits: &[Vec<usize>], alerts: usize) -> Vec<Option<usize>> {
    fn augment(
        e: usize,
        fits: &[Vec<usize>],
        seen: &mut [bool],
        taken_by: &mut [Option<usize>],
    ) -> bool {
        for &a in &fits[e] {
            if seen[a] {
                continue;
            }
            seen[a] = true;
            if taken_by[a].is_none_or(|other| augment(other, fits, seen, taken_by)) {
                taken_by[a] = Some(e);
                return true;
            }
        }
        false
    }
    let mut taken_by = vec![None; alerts];
    for e in 0..fits.len() {
        let mut seen = vec![false; alerts];
        augment(e, fits, &mut seen, &mut taken_by);
    }
    taken_by
}

/// Runs one test, its `until` read: what is wrong (empty when it passed), each thing said
/// of a value of the test with where the value is.
fn run_case(
    rules: &RuleSet,
    parser: SyslogParser,
    dedup_window: Duration,
    t: &TestCase,
    until: Option<Until>,
    place: &Place,
) -> anyhow::Result<Vec<String>> {
    let first_line = input_first_line(place.text, t.input.span());
    // A test's events are a recording: monitoring begins at the first one's time.
    let cfg = EngineConfig {
        recorded: true,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(rules, cfg).context("building the engine")?;
    // Refused lines are said as `FILE:LINE: why`, the line of the test file, in the report.
    let refused = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let told = refused.clone();
    // As replay reads a file: exact repeats of a syslog line within the window dropped (a
    // fresh filter per test, as the engine is).
    let dedup = replay::dedup_filter(dedup_window);
    let source = replay::text_source(
        &place.path.display().to_string(),
        t.input.get_ref().clone(),
        parser,
        first_line,
        dedup.clone(),
        Box::new(move |why| {
            if let Ok(mut v) = told.lock() {
                v.push(why);
            }
        }),
    );
    let mut summary = Summary::default();
    let mut got: Vec<Alert> = Vec::new();
    replay::drive(
        &mut engine,
        Merger::new(vec![source], Some(dedup)),
        until,
        &mut summary,
        None,
        &mut |a| {
            got.push(a);
            Ok(())
        },
    )?;
    if let (Some(last), Some(u)) = (summary.until_before_last, &t.until) {
        eprintln!(
            "warning: {}: `until` ({}) is before the test's last event ({}): the clock stops at the last event",
            place.at(u.span()),
            u.get_ref(),
            last.to_rfc3339()
        );
    }
    let mut problems = Vec::new();
    // A name that is no rule would make the test pass or fail for the wrong reason: a typo
    // in `rules_under_test` filtered every alert away and the test passed with no expect.
    let known = |name: &str| rules.rules.iter().any(|r| r.name == name);
    let names = || {
        rules
            .rules
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    // (Each wrong name said once, where it is first written.)
    let mut unknown: Vec<(&str, &str)> = Vec::new();
    for (key, name) in t
        .rules_under_test
        .iter()
        .flatten()
        .map(|n| ("rules_under_test", n))
        .chain(t.expect.iter().map(|e| ("expect.rule", &e.get_ref().rule)))
    {
        if !known(name.get_ref()) && !unknown.contains(&(key, name.get_ref())) {
            unknown.push((key, name.get_ref()));
            problems.push(format!(
                "{}: {key}: no rule named `{}` in the rules under test ({})",
                place.at(name.span()),
                name.get_ref(),
                names()
            ));
        }
    }
    // An expectation no alert can meet (a misspelt state, time, reason or group field)
    // fails with what is wrong with it, where it is, not only with `missing:`.
    for spanned in &t.expect {
        use cepheus_core::alert::{AlertState, Reason};
        let e = spanned.get_ref();
        let states = AlertState::ALL.map(AlertState::name);
        if !states.contains(&e.state.get_ref().as_str()) {
            problems.push(format!(
                "{}: expect.state: `{}` is not an alert state ({})",
                place.at(e.state.span()),
                e.state.get_ref(),
                states.join(", ")
            ));
        }
        if let Some(time) = &e.time
            && cepheus_core::time::Timestamp::parse_rfc3339(&time.get_ref().0).is_none()
        {
            problems.push(format!(
                "{}: expect.time: `{}` is not an RFC 3339 time (e.g. 2024-12-10T10:01:00Z)",
                place.at(time.span()),
                time.get_ref().0
            ));
        }
        if let Some(reason) = &e.reason
            && !Reason::ALL.iter().any(|r| r.name() == reason.get_ref())
        {
            problems.push(format!(
                "{}: expect.reason: `{}` is not a reason an alert gives ({})",
                place.at(reason.span()),
                reason.get_ref(),
                Reason::ALL.map(Reason::name).join(", ")
            ));
        }
        if let Some(rule) = rules.rules.iter().find(|r| r.name == *e.rule.get_ref()) {
            let unnamed: Vec<&str> = rule
                .group_by
                .iter()
                .filter(|g| !e.group().contains_key(g.as_str()))
                .map(String::as_str)
                .collect();
            if !unnamed.is_empty() {
                // At the group, or the expectation that has none.
                let at = e.group.as_ref().map_or(spanned.span(), Spanned::span);
                problems.push(format!(
                    "{}: expect.group: rule `{}` groups by {}: name every field, e.g. `group = {{ {} = \"...\" }}`",
                    place.at(at),
                    e.rule.get_ref(),
                    rule.group_by.join(", "),
                    unnamed.join(" = \"...\", ")
                ));
            }
            for (k, want) in e.group() {
                // A value the field can never hold (an IP field given `not-ip` or a number)
                // is said where it is written, whether or not any alert came.
                if let Some(i) = rule.group_by.iter().position(|g| g == k.get_ref())
                    && let Some(field) = rule.events.first().and_then(|d| d.group_fields.get(i))
                {
                    use cepheus_core::event::{Value, ValueType};
                    let ty = field.ty();
                    // (A text field holds any value written as text: `port = 1234` for a
                    // captured port is matched as "1234".)
                    let fits = match want {
                        toml::Value::String(t) => Value::parse_as(ty, t).is_some(),
                        toml::Value::Integer(_) => {
                            matches!(ty, ValueType::Int | ValueType::Float | ValueType::Str)
                        }
                        toml::Value::Float(_) => matches!(ty, ValueType::Float | ValueType::Str),
                        toml::Value::Boolean(_) => matches!(ty, ValueType::Bool | ValueType::Str),
                        _ => false,
                    };
                    if !fits {
                        problems.push(format!(
                            "{}: expect.group: `{}` = {want} is not a valid {} (rule `{}` takes `{}` from `{}`)",
                            place.at(k.span()),
                            k.get_ref(),
                            ty.name(),
                            e.rule.get_ref(),
                            k.get_ref(),
                            field.name()
                        ));
                    }
                }
                if !rule.group_by.iter().any(|g| g == k.get_ref()) {
                    problems.push(format!(
                        "{}: expect.group: `{}` is not a group_by field of rule `{}` ({})",
                        place.at(k.span()),
                        k.get_ref(),
                        e.rule.get_ref(),
                        if rule.group_by.is_empty() {
                            "it has none: write `group = {}` or leave it out".to_string()
                        } else {
                            rule.group_by.join(", ")
                        }
                    ));
                }
            }
        }
    }
    if let Some(only) = &t.rules_under_test {
        got.retain(|a| only.iter().any(|r| r.get_ref() == a.rule()));
    }
    if summary.malformed > 0 {
        problems.push(format!(
            "{} input line(s) are not syslog or JSON events:",
            summary.malformed
        ));
        if let Ok(why) = refused.lock() {
            problems.extend(why.iter().map(|w| format!("  {w}")));
        }
    }
    // Each expectation paired with an alert it fits, as many as can be (a maximum matching,
    // not the first fit in the order written: an expectation without `time` took the alert a
    // more precise one needed, and the test failed or passed by the order of its entries;
    // found by an audit).
    let fits: Vec<Vec<usize>> = t
        .expect
        .iter()
        .map(|e| {
            (0..got.len())
                .filter(|&i| matches(e.get_ref(), &got[i]))
                .collect()
        })
        .collect();
    let taken_by = pair_up(&fits, got.len());
    let mut unmatched: Vec<Option<&Alert>> = got.iter().map(Some).collect();
    for (ei, e) in t.expect.iter().enumerate() {
        match taken_by.iter().position(|&x| x == Some(ei)) {
            Some(ai) => unmatched[ai] = None,
            None => {
                problems.push(format!(
                    "missing:    {} ({})",
                    describe_expected(e.get_ref()),
                    place.at(e.span())
                ));
                let e = e.get_ref();
                // A group value that cannot be one of this field's values (`10.0.0.002` for
                // an IP address) is said to be, or the test reads as a mere mismatch.
                for (k, want) in e.group() {
                    let Some(want) = want.as_str() else {
                        continue;
                    };
                    let k = k.get_ref();
                    let ty = got
                        .iter()
                        .filter(|a| a.rule() == e.rule.get_ref())
                        .find_map(|a| a.group().iter().find(|(n, _)| n == k).map(|(_, v)| v.ty()));
                    if let Some(ty) = ty
                        && cepheus_core::event::Value::parse_as(ty, want).is_none()
                    {
                        problems.push(format!(
                            "            group `{k}`: `{want}` is not a valid {} (as `{k}` is in this rule's alerts)",
                            ty.name()
                        ));
                    }
                }
            }
        }
    }
    for a in unmatched.into_iter().flatten() {
        problems.push(format!("unexpected: {}", describe(a)));
    }
    // A test written as if every line counted fails for a reason the report must name.
    if !problems.is_empty() && summary.duplicates > 0 {
        problems.push(format!(
            "note: {} input line(s) dropped as exact repeats of a syslog line within {dedup_window}, as replay drops them (`dedup_window = \"0s\"` in the test file keeps them)",
            summary.duplicates
        ));
    }
    Ok(problems)
}

fn matches(e: &Expected, a: &Alert) -> bool {
    if e.rule.get_ref() != a.rule() || e.state.get_ref() != a.state.name() {
        return false;
    }
    if e.group().len() != a.group().len() {
        return false;
    }
    for (k, v) in a.group().iter() {
        let want = match e.group().get(k.as_str()) {
            Some(toml::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => return false,
        };
        // As the value's type reads it (`::ffff:10.0.0.1` is `10.0.0.1`), else as text.
        // (Text exactly: parsing trims, and `" root"` is not `root`.)
        let typed = match v {
            cepheus_core::event::Value::Str(_) => None,
            _ => cepheus_core::event::Value::parse_as(v.ty(), &want),
        };
        if typed.as_ref() != Some(v) && want != v.to_string() {
            return false;
        }
    }
    if let Some(t) = &e.time
        && cepheus_core::time::Timestamp::parse_rfc3339(&t.get_ref().0) != Some(a.time)
    {
        return false;
    }
    if e.message.as_ref().is_some_and(|m| *m != a.message()) {
        return false;
    }
    if e.reason
        .as_ref()
        .is_some_and(|r| Some(r.get_ref().as_str()) != a.reason())
    {
        return false;
    }
    true
}

fn describe_expected(e: &Expected) -> String {
    let group: Vec<String> = e
        .group()
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                k.get_ref(),
                v.as_str().map_or_else(|| v.to_string(), str::to_string)
            )
        })
        .collect();
    let mut s = format!(
        "{} {} {{{}}}",
        e.rule.get_ref(),
        e.state.get_ref(),
        group.join(", ")
    );
    if let Some(t) = &e.time {
        s.push_str(&format!(" at {}", t.get_ref().0));
    }
    if let Some(r) = &e.reason {
        s.push_str(&format!(" reason={}", r.get_ref()));
    }
    if let Some(m) = &e.message {
        s.push_str(&format!(" message={m:?}"));
    }
    s
}

fn describe(a: &Alert) -> String {
    let group: Vec<String> = a.group().iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut s = format!(
        "{} {} {{{}}} at {}",
        a.rule(),
        a.state.name(),
        group.join(", "),
        a.time
    );
    if let Some(r) = a.reason() {
        s.push_str(&format!(" reason={r}"));
    }
    s.push_str(&format!(" message={:?}", a.message()));
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A mistyped key of a test file gets the suggestion a rule file's would.
    #[test]
    fn a_mistyped_test_key_is_suggested() {
        let text =
            "[[test]]\nname = \"t\"\ninput = \"\"\n[[test.expect]]\nrule = \"r\"\nmesage = \"x\"\n";
        let (_, tests) = read_test_file(Path::new("t.test.toml"), text).expect("a test file");
        let test = tests.into_iter().next().expect("a test");
        let Err(e) = TestCase::deserialize(toml::de::ValueDeserializer::from(test)) else {
            panic!("parsed");
        };
        let hint = cepheus_core::rules::diag::unknown_key_hint;
        assert_eq!(hint(e.message()), "did you mean `message`?");
        assert_eq!(hint("unknown field `zzz`, expected `a`"), "");
    }

    /// Positions are 1-based, columns in characters (as rule files' diagnostics count them);
    /// an offset inside a character or past the end is taken back to one that is not.
    #[test]
    fn positions_count_lines_and_characters() {
        let text = "a = 1\nnamé = \"x\"\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 4), (1, 5));
        assert_eq!(line_column(text, 6), (2, 1));
        let x = text.find("\"x").unwrap();
        assert_eq!(line_column(text, x), (2, 8));
        assert_eq!(line_column(text, text.find('é').unwrap() + 1), (2, 4));
        assert_eq!(line_column(text, 1000), (3, 1));
        let place = Place {
            path: Path::new("t.test.toml"),
            text,
        };
        assert_eq!(place.at(x..x + 3), "t.test.toml:2:8");
    }
}
