//! `cepheus rules ...`: check (and later test, graph) rule files.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use cepheus_core::rules::Diagnostic;

use crate::rulefiles;

/// Output format of `cepheus rules check`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Rendered for people: file:line:column, the line, a caret, the hint.
    #[default]
    Human,
    /// One JSON object per diagnostic per line.
    Json,
}

/// Arguments of `cepheus rules check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Rule files or folders (folders: every `*.toml` in them, recursively, but `*.test.toml`).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

/// Renders one diagnostic as miette does, in colour when `color`.
pub fn render(d: &Diagnostic, color: bool) -> String {
    let mut theme = if color {
        miette::GraphicalTheme::unicode()
    } else {
        miette::GraphicalTheme::unicode_nocolor()
    };
    // A caret under the culprit (DESIGN.md, "Rule language"), as compilers print it.
    theme.characters.underline = '^';
    theme.characters.uarrow = '^';
    let handler = miette::GraphicalReportHandler::new_themed(theme)
        .with_width(100)
        .with_links(false);
    let mut out = String::new();
    // (A place far along a very long line is written plainly: miette cannot draw it.)
    if d.too_wide() || handler.render_report(&mut out, d).is_err() {
        out = format!(
            "{}:{}:{}: {}: {}\n",
            d.path.display(),
            d.line,
            d.column,
            d.severity.name(),
            d.message
        );
        // The part of the line around the place, with a caret under it.
        if let Some((line, text, caret)) = d.excerpt() {
            use unicode_width::UnicodeWidthStr;
            let n = line.to_string();
            let pad = " ".repeat(n.len());
            // (Under the place in terminal cells: CJK text takes two each.)
            let before: String = text.chars().take(caret).collect();
            out.push_str(&format!(
                " {pad} |\n {n} | {text}\n {pad} | {}^\n",
                " ".repeat(before.width())
            ));
        }
        if let Some(help) = &d.help {
            out.push_str(&format!("  help: {help}\n"));
        }
        for r in &d.related {
            out.push_str(&format!(
                "  {}:{}:{}: {}\n",
                r.path.display(),
                r.line,
                r.column,
                r.message
            ));
        }
    }
    out
}

/// Runs `cepheus rules check`: exit 0 when valid (warnings allowed), 1 on errors, 2 on usage/IO errors.
pub fn check(args: CheckArgs) -> ExitCode {
    // A path that is not there is said (exit 2), and the others are checked all the same:
    // one mistyped path must not hide every finding of the rest.
    let (paths, missing): (Vec<&PathBuf>, Vec<&PathBuf>) = args
        .paths
        .iter()
        .partition(|p| std::fs::symlink_metadata(p).is_ok());
    let usage_error = |file: Option<&PathBuf>, message: String| {
        eprintln!("error: {message}");
        if args.format == Format::Json {
            // A reader of the JSON lines learns of it too, in the diagnostics' shape.
            let line = serde_json::json!({
                "file": file.map(|f| f.display().to_string()),
                "line": serde_json::Value::Null,
                "column": serde_json::Value::Null,
                "severity": "error",
                "message": message,
                "help": "give rule files (*.toml) or folders of them that exist and can be read",
            });
            let _ = writeln!(std::io::stdout().lock(), "{line}");
        }
    };
    let say_missing = || {
        for p in &missing {
            usage_error(Some(p), format!("{}: no such file or folder", p.display()));
        }
    };
    if paths.is_empty() {
        say_missing();
        return ExitCode::from(2);
    }
    let paths: Vec<PathBuf> = paths.into_iter().cloned().collect();
    let loaded = match rulefiles::load(&paths) {
        Ok(l) => l,
        Err(e) => {
            usage_error(None, format!("{e:#}"));
            say_missing();
            return ExitCode::from(2);
        }
    };
    let diags = &loaded.compiled.diagnostics;
    match args.format {
        Format::Json => {
            let mut out = std::io::stdout().lock();
            for d in diags {
                let _ = writeln!(out, "{}", d.to_json());
            }
        }
        Format::Human => {
            let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            let mut err = std::io::stderr().lock();
            for d in diags {
                let _ = writeln!(err, "{}", render(d, color));
            }
        }
    }
    eprintln!("{}", loaded.summary());
    if !missing.is_empty() {
        say_missing();
        return ExitCode::from(2);
    }
    if loaded.compiled.errors() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
