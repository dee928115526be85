//! Finding and loading rule files: `rules check`, `rules test`, `replay` and `run` share this.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use cepheus_core::rules::{Compiled, SourceFile, compile};

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

/// Counts `[[rule]]` headers (rules are counted even when they have errors).
fn count_rules(sources: &[SourceFile]) -> usize {
    sources
        .iter()
        .map(|s| {
            s.text
                .lines()
                .filter(|l| l.trim_start().starts_with("[[rule]]"))
                .count()
        })
        .sum()
}

/// The rule files named by `paths`: files as given, folders searched recursively for `*.toml`
/// (except `*.test.toml`, the rule tests beside them). A missing path is an error.
pub fn collect(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    collect_matching(paths, &|p| {
        p.extension().is_some_and(|e| e == "toml") && !crate::rules_test::is_test_file(p)
    })
}

/// Files named by `paths`: files as given, folders searched recursively for files that
/// satisfy `wanted`; sorted, without repeats. Symbolic links are followed, but a folder is
/// searched once however many links lead to it (so a link back up is no loop), and a file
/// reached by several paths is read once, under the first of them in order. A missing path
/// is an error.
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

/// What names one file or folder, whatever path reached it.
fn identity(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
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
    let files = collect(paths)?;
    if files.is_empty() {
        bail!(
            "no rule files (*.toml) in {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut sources = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("cannot read {}", f.display()))?;
        sources.push(SourceFile { path: f, text });
    }
    let compiled = compile(&sources, &mut |p| std::fs::read_to_string(p));
    Ok(Loaded { sources, compiled })
}
