//! Finding and loading rule files: `rules check`, `rules test`, `replay` and `run` share this.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use cepheus_core::rules::{Compiled, Diagnostic, SourceFile, compile, source_from_bytes};

/// Rule files read from disk and what the checker made of them.
#[derive(Debug)]
pub struct Loaded {
    /// The rule files, sorted by path.
    pub sources: Vec<SourceFile>,
    /// The checked rules and every diagnostic.
    pub compiled: Compiled,
}

impl Loaded {
    /// A one-line summary such as `3 files, 7 rules: 0 errors, 1 warning`.
    pub fn summary(&self) -> String {
        let files = self.sources.len();
        let rules = count_rules(&self.sources);
        let (e, w) = (self.compiled.errors(), self.compiled.warnings());
        format!(
            "{files} file{}, {rules} rule{}: {e} error{}, {w} warning{}",
            plural(files),
            plural(rules),
            plural(e),
            plural(w)
        )
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Counts the rules of each file as TOML reads them (`[[rule]]`, `[[ rule ]]`, `rule = [..]`;
/// rules with errors count too); a file that is not valid TOML counts its `[[rule]]` lines.
fn count_rules(sources: &[SourceFile]) -> usize {
    sources
        .iter()
        .map(|s| {
            let text = s.text.strip_prefix('\u{feff}').unwrap_or(&s.text);
            match toml::from_str::<toml::Table>(text) {
                Ok(t) => t
                    .get("rule")
                    .and_then(toml::Value::as_array)
                    .map_or(0, Vec::len),
                Err(_) => text
                    .lines()
                    .filter(|l| l.trim_start().starts_with("[[rule]]"))
                    .count(),
            }
        })
        .sum()
}

/// The rule files named by `paths`: files as given, folders searched recursively for `*.toml`
/// (except `*.test.toml`, the rule tests beside them, and hidden entries). A missing path is
/// an error, and so is a `*.toml` in a folder that links to nothing.
pub fn collect(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    if let Some(t) = paths
        .iter()
        .find(|p| crate::rules_test::is_test_file(p) && !p.is_dir())
    {
        anyhow::bail!(
            "{} is a rule test file, not rules: run `cepheus rules test {}`",
            t.display(),
            t.display()
        );
    }
    collect_matching(paths, &|p| {
        p.extension().is_some_and(|e| e == "toml") && !crate::rules_test::is_test_file(p)
    })
}

/// Files named by `paths`: files as given, folders searched recursively for files that
/// satisfy `wanted`; sorted, without repeats. Symbolic links are followed, but a folder is
/// searched once however many links lead to it (so a link back up is no loop), and a file
/// reached by several paths is read once, under the first of them in order. A missing path,
/// or a wanted name in a folder that links to nothing, is an error.
pub fn collect_matching(
    paths: &[PathBuf],
    wanted: &dyn Fn(&Path) -> bool,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut folders = HashSet::new();
    for p in paths {
        let meta = std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        if meta.is_dir() {
            walk(p, wanted, &mut folders, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    out.sort();
    // One entry per file, under the first path to it (a repeated path is the same file).
    let mut files = HashSet::new();
    out.retain(|p| files.insert(identity(p)));
    Ok(out)
}

/// The files the rules of the last [`load`] read (`expect` files, list files of
/// `in file(...)`), and its rule files reached through a link (canonical paths): with the
/// rule folders, what a change to reloads the rules.
static EXPECT_FILES: std::sync::Mutex<std::collections::BTreeSet<PathBuf>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Whether `p` is named as a rule file found in a folder is: `*.toml`, not hidden (an
/// editor's swap file, a log written beside the rules are not), not a rule test
/// (`*.test.toml`).
pub fn is_rule_file_name(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
        && p.extension().is_some_and(|e| e == "toml")
        && !crate::rules_test::is_test_file(p)
}

/// Whether `p` is an `expect` or list file the last [`load`] read, or tried to read (one
/// missing then is watched for its return), or the real path of a rule file it read through a
/// link.
pub fn is_expect_file(p: &Path) -> bool {
    EXPECT_FILES
        .lock()
        .is_ok_and(|f| f.contains(&identity(p)) || f.contains(p))
}

/// The `expect` files the last [`load`] read or tried to read, and the real paths of the rule
/// files it read through a link.
pub fn expect_files() -> Vec<PathBuf> {
    EXPECT_FILES
        .lock()
        .map(|f| f.iter().cloned().collect())
        .unwrap_or_default()
}

/// A list file the rules read, as `/stats` shows it: which feed is loaded, and how big.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ListSummary {
    /// The file, as the rules' canonical form names it (joined to the rule file's folder).
    pub path: String,
    /// Its distinct items.
    pub items: usize,
}

/// The list files `rules` read, in the order the rules name them.
pub fn lists(rules: &cepheus_core::rules::ir::RuleSet) -> Vec<ListSummary> {
    (rules.list_files().iter())
        .map(|l| ListSummary {
            path: l.path.clone(),
            items: l.len(),
        })
        .collect()
}

/// The list files `rules` read, for a log line: `path (N items), ...` (empty: none).
pub fn lists_summary(rules: &cepheus_core::rules::ir::RuleSet) -> String {
    (lists(rules).iter())
        .map(|l| match l.items {
            1 => format!("{} (1 item)", l.path),
            n => format!("{} ({n} items)", l.path),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The folder a file is in (`.` for a bare name).
pub fn folder_of(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// What names one file or folder, whatever path reached it; for one that does not exist,
/// its folder's name and its own (so it is known again once it is made).
pub fn identity(p: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(p) {
        return c;
    }
    let folder = std::fs::canonicalize(folder_of(p)).ok();
    match (folder, p.file_name()) {
        (Some(d), Some(name)) => d.join(name),
        _ => std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
    }
}

fn walk(
    dir: &Path,
    wanted: &dyn Fn(&Path) -> bool,
    folders: &mut HashSet<PathBuf>,
    out: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    if !folders.insert(identity(dir)) {
        tracing::debug!(folder = %dir.display(), "rule folder already searched (a link to it), skipped");
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read folder {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("cannot read folder {}", dir.display()))?;
    entries.sort();
    for p in entries {
        // Hidden entries are editors' and tools' (an Emacs lock `.#x.toml` is a dangling
        // link, a `.git` folder holds no rules), and so is a link to nothing: not rule files.
        let hidden = p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        // (A file that cannot be read for another reason, permissions, is still an error.)
        let dangling = p
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
            && std::fs::metadata(&p).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
        if dangling && !hidden && wanted(&p) {
            // A rule file whose link lost its target (a package moved it, a mount is gone):
            // its rules would go unseen, their alerts resolved as removed.
            let to = std::fs::read_link(&p)
                .map(|t| format!(" (a link to {}, which does not exist)", t.display()))
                .unwrap_or_default();
            anyhow::bail!("cannot read {}{to}", p.display());
        }
        if hidden || dangling {
            tracing::debug!(path = %p.display(), "skipped in a rule folder (hidden, or a link to nothing)");
            continue;
        }
        if p.is_dir() {
            walk(&p, wanted, folders, out)?;
        } else if wanted(&p) {
            out.push(p);
        }
    }
    Ok(())
}

/// Reads and compiles the rule files named by `paths` (see [`collect`]).
pub fn load(paths: &[PathBuf]) -> anyhow::Result<Loaded> {
    load_with(paths, &|_| None)
}

/// [`load`], the files the rules read (`expect` and list files) taken from `given` when it
/// has them (asked by the path the rules name them at): a rule test's own `hosts.txt`, not
/// the one its folder holds for the fleet.
pub fn load_with(
    paths: &[PathBuf],
    given: &dyn Fn(&Path) -> Option<String>,
) -> anyhow::Result<Loaded> {
    let files = collect(paths)?;
    if files.is_empty() {
        let tests =
            collect_matching(paths, &crate::rules_test::is_test_file).map_or(0, |t| t.len());
        let only_tests = if tests > 0 {
            format!(" (only {tests} rule test file(s), *.test.toml: tests, not rules)")
        } else {
            String::new()
        };
        // Relative paths also as absolute ones: a service's working folder is not the shell's.
        let shown = |p: &PathBuf| match std::path::absolute(p) {
            Ok(a) if a != *p => format!("{} ({})", p.display(), a.display()),
            _ => p.display().to_string(),
        };
        bail!(
            "no rule files (*.toml) in {}{only_tests}: add rule files there, or name other paths (`rules.paths` for `run`, `--rules` for `replay`)",
            paths.iter().map(shown).collect::<Vec<_>>().join(", ")
        );
    }
    // A rule file reached through a link is watched where it really is too: an edit there
    // (the link's target) is an edit of the rules.
    let mut read: Vec<PathBuf> = files
        .iter()
        .filter_map(|f| {
            let real = identity(f);
            (std::path::absolute(f).ok().as_ref() != Some(&real)).then_some(real)
        })
        .collect();
    let mut sources = Vec::new();
    let mut not_utf8 = Vec::new();
    for f in files {
        let bytes = read_bounded(&f).with_context(|| format!("cannot read {}", f.display()))?;
        let (src, bad) = source_from_bytes(f, bytes);
        sources.push(src);
        not_utf8.extend(bad);
    }
    let mut compiled = compile(&sources, &mut |p| {
        if let Some(text) = given(p) {
            return Ok(text);
        }
        read.push(identity(p));
        read_text(p)
    });
    if let Ok(mut files) = EXPECT_FILES.lock() {
        *files = read.into_iter().collect();
    }
    put_not_utf8_first(&mut compiled, not_utf8);
    Ok(Loaded { sources, compiled })
}

/// A file that is not UTF-8 was checked with its bad bytes replaced: its error (from
/// `source_from_bytes`) goes first among the file's findings, and no rules come out.
pub fn put_not_utf8_first(compiled: &mut Compiled, not_utf8: Vec<Diagnostic>) {
    for d in not_utf8 {
        let at = compiled
            .diagnostics
            .iter()
            .position(|x| x.path >= d.path)
            .unwrap_or(compiled.diagnostics.len());
        compiled.diagnostics.insert(at, d);
        compiled.rules = None;
    }
}

/// The most a rule, `expect` or test file may hold: far above any real rule set (50,000
/// rules are about 6 MB), and a bound on what a mistaken path (`/dev/zero`) can cost.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reads a regular file of at most [`MAX_FILE_BYTES`]. A FIFO, device or socket is refused
/// before it is opened (opening a FIFO waits for a writer; a device may never end).
pub fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let meta = std::fs::metadata(path)?;
    if meta.is_dir() {
        return Err(std::io::Error::other("is a folder: name a file"));
    }
    if !meta.is_file() {
        return Err(std::io::Error::other(
            "not a regular file (a FIFO, device or socket is refused: it may never end)",
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_FILE_BYTES >> 20
        )));
    }
    Ok(bytes)
}

/// [`read_bounded`], as UTF-8 text.
pub fn read_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            cepheus_core::rules::not_utf8(&e),
        )
    })
}
