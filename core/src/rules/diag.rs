//! Diagnostics of the rule checker: where (file, line, column, byte span), what, and a hint.
//!
//! A [`Diagnostic`] carries the text of the file it points into, so it renders on its own with
//! miette (`file:line:column`, the source line, a caret under the culprit, the help text).

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// The rule set is rejected.
    Error,
    /// Accepted, but probably not what was meant.
    Warning,
    /// Context attached to another diagnostic (see [`Diagnostic::related`]).
    Note,
}

impl Level {
    /// `error` or `warning`.
    pub const fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Note => "note",
        }
    }
}

/// A secondary location in the same file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// Byte span in the file.
    pub span: Range<usize>,
    /// What is there.
    pub message: String,
}

/// One finding of the checker, with its location.
#[derive(Clone, Debug)]
pub struct Diagnostic {
    /// The file it points into (a rule file, or an `expect` file).
    pub path: PathBuf,
    /// 1-based line of the span start.
    pub line: usize,
    /// 1-based column (in characters) of the span start.
    pub column: usize,
    /// Byte offsets in the file.
    pub span: Range<usize>,
    /// Error or warning.
    pub severity: Level,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
    /// The text under the caret (short), if any.
    pub label: Option<String>,
    /// Other places in the same file worth showing.
    pub labels: Vec<Label>,
    /// Notes elsewhere, possibly in other files (e.g. where a duplicate name was first defined).
    pub related: Vec<Diagnostic>,
    /// The text of the file, for rendering.
    pub source: Arc<FileText>,
}

/// How far along its line a place may lie for a diagnostic to be drawn with miette's
/// snippet (whole lines: a caret 8,000 columns to the right helps no one, and miette pads
/// with format widths, which stop at 65,535 columns); further along, [`Diagnostic::excerpt`]
/// shows the part of the line around it.
const WIDEST_SNIPPET: usize = 240;

/// Characters of a long line [`Diagnostic::excerpt`] shows before the place.
const EXCERPT_BEFORE: usize = 40;

/// Characters of a long line [`Diagnostic::excerpt`] shows in all, at most.
const EXCERPT_CHARS: usize = 90;

impl Diagnostic {
    /// Whether a place it (or a related note) shows lies too far along its line for a
    /// snippet ([`WIDEST_SNIPPET`]): then it is written as one plain line.
    pub fn too_wide(&self) -> bool {
        std::iter::once(&self.span)
            .chain(self.labels.iter().map(|l| &l.span))
            .any(|s| {
                self.source
                    .along_line(s.start)
                    .max(self.source.along_line(s.end))
                    > WIDEST_SNIPPET
            })
            || self.related.iter().any(Diagnostic::too_wide)
    }

    /// The part of its line around the place, for a line too long to show whole: the line's
    /// number, the text (`…` where cut) and how many characters precede the place in it.
    pub fn excerpt(&self) -> Option<(usize, String, usize)> {
        let text = &self.source.text;
        let at = self.span.start.min(text.len());
        let line = self.source.line_of(at);
        let start = at - self.source.along_line(at);
        let end = text[start..]
            .find(['\n', '\r'])
            .map_or(text.len(), |i| start + i);
        let body = text.get(start..end)?;
        let before: Vec<char> = body.get(..at - start)?.chars().collect();
        let skip = before.len().saturating_sub(EXCERPT_BEFORE);
        let mut shown = String::new();
        if skip > 0 {
            shown.push('…');
        }
        let caret = shown.chars().count() + before.len() - skip;
        let mut rest = body.chars().skip(skip);
        shown.extend(rest.by_ref().take(EXCERPT_CHARS));
        if rest.next().is_some() {
            shown.push('…');
        }
        // (Shown on a terminal: a tab or control character would shift the caret.)
        let shown = shown
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        Some((line + 1, shown, caret))
    }

    /// Whether this is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Level::Error
    }

    /// The diagnostic as one JSON object: file, line, column, severity, message, help.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "file": self.path.display().to_string(),
            "line": self.line,
            "column": self.column,
            "severity": self.severity.name(),
            "message": self.message,
            "help": self.help,
        })
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diagnostic {}

impl miette::Diagnostic for Diagnostic {
    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.severity {
            Level::Error => miette::Severity::Error,
            Level::Warning => miette::Severity::Warning,
            Level::Note => miette::Severity::Advice,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&*self.source)
    }

    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        if self.related.is_empty() {
            return None;
        }
        Some(Box::new(
            self.related.iter().map(|d| d as &dyn miette::Diagnostic),
        ))
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        let len = self.source.text.len();
        let clamp = move |r: &Range<usize>| {
            let s = r.start.min(len);
            let e = r.end.clamp(s, len);
            (s, e - s)
        };
        let (s, l) = clamp(&self.span);
        let primary = miette::LabeledSpan::new_primary_with_span(self.label.clone(), (s, l));
        let rest = self.labels.iter().map(move |lb| {
            let (s, l) = clamp(&lb.span);
            miette::LabeledSpan::new_with_span(Some(lb.message.clone()), (s, l))
        });
        Some(Box::new(std::iter::once(primary).chain(rest)))
    }
}

/// A rule file's name and text as miette reads them: what it renders around a span is read
/// from the span's own lines (found in a table of line starts), not by scanning the file from
/// its top for every diagnostic, which made 136 warnings in one 1 MB file cost 0.7 s.
#[derive(Debug)]
pub struct FileText {
    /// The file's name as shown.
    pub name: String,
    /// The file's text.
    pub text: Arc<str>,
    /// Byte offset of the start of every line.
    line_starts: Arc<[usize]>,
    /// Whether the text holds a `\r` (found once: reading a span must not scan the file).
    has_cr: bool,
}

impl FileText {
    /// How far byte `off` lies from the start of its line, in bytes.
    fn along_line(&self, off: usize) -> usize {
        let off = off.min(self.text.len());
        off - self
            .line_starts
            .get(self.line_of(off))
            .copied()
            .unwrap_or(0)
    }

    /// The index of the line holding byte `off`.
    fn line_of(&self, off: usize) -> usize {
        self.line_starts
            .partition_point(|&s| s <= off)
            .saturating_sub(1)
    }
}

impl miette::SourceCode for FileText {
    fn read_span<'a>(
        &'a self,
        span: &miette::SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn miette::SpanContents<'a> + 'a>, miette::MietteError> {
        let text = self.text.as_bytes();
        // miette counts a lone `\r` as a line end, the table does not: such a file is read
        // the slow way.
        let (base, window) = if self.has_cr {
            (0, text)
        } else {
            let first = self.line_of(span.offset().min(text.len()));
            // One line more than the context before: miette's scan of an empty span at a
            // line start ends on the newline before it.
            let from_line = first.saturating_sub(context_lines_before.saturating_add(1));
            let last = self.line_of(
                (span.offset() + span.len())
                    .saturating_sub(1)
                    .min(text.len()),
            );
            // Two lines more than the context, so the scan below ends where a scan of the
            // whole file would.
            let to_line = last.saturating_add(context_lines_after).saturating_add(2);
            let from = self.line_starts.get(from_line).copied().unwrap_or(0);
            let to = self.line_starts.get(to_line).copied().unwrap_or(text.len());
            (from, &text[from..to])
        };
        let base_line = self.line_of(base);
        let local = miette::SourceSpan::new(span.offset().saturating_sub(base).into(), span.len());
        let inner = <[u8] as miette::SourceCode>::read_span(
            window,
            &local,
            context_lines_before,
            context_lines_after,
        )?;
        let at = miette::SourceSpan::new((inner.span().offset() + base).into(), inner.span().len());
        Ok(Box::new(miette::MietteSpanContents::new_named(
            self.name.clone(),
            inner.data(),
            at,
            inner.line() + base_line,
            if (context_lines_before, context_lines_after) == (0, 0) {
                char_column(&self.text, at.offset(), inner.column())
            } else {
                inner.column()
            },
            inner.line_count() + base_line,
        )))
    }
}

/// The column miette prints in a report's `[file:line:column]` header (from a read of the
/// span alone): miette counts bytes from the line's start; the JSON output and compilers
/// count characters, so both say the same column on a line with `é` or `日本`.
fn char_column(text: &str, offset: usize, byte_column: usize) -> usize {
    let offset = offset.min(text.len());
    text.get(offset.saturating_sub(byte_column)..offset)
        .map_or(byte_column, |s| s.chars().count())
}

/// One file's text and name, shared by its diagnostics.
#[derive(Clone, Debug)]
pub(crate) struct FileCtx {
    pub path: PathBuf,
    pub text: Arc<str>,
    /// The name, the text and its line table (a file of 10,000 rules asks for positions
    /// thousands of times: no rescanning from the top).
    pub named: Arc<FileText>,
}

impl FileCtx {
    pub fn new(path: PathBuf, text: &str) -> Self {
        let text: Arc<str> = Arc::from(text);
        let line_starts: Arc<[usize]> = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        let named = Arc::new(FileText {
            name: path.display().to_string(),
            has_cr: text.contains('\r'),
            text: text.clone(),
            line_starts,
        });
        FileCtx { path, text, named }
    }

    /// The line holding byte `offset`, without its line end (read from the line table).
    pub fn line(&self, offset: usize) -> Option<&str> {
        let named = &self.named;
        let idx = named.line_of(offset.min(self.text.len()));
        let start = *named.line_starts.get(idx)?;
        let end = named
            .line_starts
            .get(idx + 1)
            .map_or(self.text.len(), |&next| next - 1);
        self.text.get(start..end)
    }

    /// 1-based line and column (in chars) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let mut off = offset.min(self.text.len());
        while !self.text.is_char_boundary(off) {
            off -= 1;
        }
        let idx = self.named.line_of(off);
        let start = self
            .named
            .line_starts
            .get(idx)
            .copied()
            .unwrap_or(0)
            .min(off);
        let col = self.text[start..off].chars().count() + 1;
        (idx + 1, col)
    }

    pub fn diag(&self, level: Level, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        let (line, column) = self.line_col(span.start);
        Diagnostic {
            path: self.path.clone(),
            line,
            column,
            span,
            severity: level,
            message: message.into(),
            help: None,
            label: None,
            labels: Vec::new(),
            related: Vec::new(),
            source: self.named.clone(),
        }
    }
}

/// Builder helpers.
impl Diagnostic {
    pub(crate) fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub(crate) fn with_label(mut self, span: Range<usize>, message: impl Into<String>) -> Self {
        self.labels.push(Label {
            span,
            message: message.into(),
        });
        self
    }
}

/// Maps byte offsets inside a decoded TOML string value back to offsets in the file.
#[derive(Clone, Debug)]
pub(crate) struct StrMap {
    /// For each byte of the decoded string (and one past the end), its offset in the file.
    map: Vec<usize>,
    fallback: Range<usize>,
}

impl StrMap {
    /// Builds the map for a string value whose TOML token spans `span` in `file`.
    pub fn new(file: &str, span: Range<usize>, value: &str) -> Self {
        let fallback = span.clone();
        let map = build_map(file, span, value).unwrap_or_default();
        StrMap { map, fallback }
    }

    /// The file span of a span inside the string.
    pub fn span(&self, r: Range<usize>) -> Range<usize> {
        if self.map.is_empty() {
            return self.fallback.clone();
        }
        let last = self.map.len() - 1;
        let s = self.map[r.start.min(last)];
        let e = self.map[r.end.min(last)].max(s);
        s..e
    }
}

fn build_map(file: &str, span: Range<usize>, value: &str) -> Option<Vec<usize>> {
    let raw = file.get(span.clone())?;
    let (delim, literal) = if raw.starts_with("'''") {
        (3, true)
    } else if raw.starts_with("\"\"\"") {
        (3, false)
    } else if raw.starts_with('\'') {
        (1, true)
    } else if raw.starts_with('"') {
        (1, false)
    } else {
        return None;
    };
    let mut start = delim;
    if delim == 3 {
        if raw[start..].starts_with("\r\n") {
            start += 2;
        } else if raw[start..].starts_with('\n') {
            start += 1;
        }
    }
    let end = raw.len().checked_sub(delim)?;
    let body = raw.get(start..end)?;
    let base = span.start + start;
    let mut map = Vec::with_capacity(value.len() + 1);
    let mut decoded = String::with_capacity(value.len());
    if literal {
        decoded.push_str(body);
        map.extend((0..body.len()).map(|i| base + i));
    } else {
        let b = body.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\' && i + 1 < b.len() {
                let at = base + i;
                let (ch, used): (Option<char>, usize) = match b[i + 1] {
                    b'b' => (Some('\u{8}'), 2),
                    b't' => (Some('\t'), 2),
                    b'n' => (Some('\n'), 2),
                    b'f' => (Some('\u{c}'), 2),
                    b'r' => (Some('\r'), 2),
                    b'e' => (Some('\u{1b}'), 2),
                    b'"' => (Some('"'), 2),
                    b'\\' => (Some('\\'), 2),
                    b'x' => (hex(body.get(i + 2..i + 4)?), 4),
                    b'u' => (hex(body.get(i + 2..i + 6)?), 6),
                    b'U' => (hex(body.get(i + 2..i + 10)?), 10),
                    b' ' | b'\t' | b'\n' | b'\r' => {
                        // line-ending backslash: skip whitespace and newlines
                        let mut j = i + 1;
                        while j < b.len() && matches!(b[j], b' ' | b'\t' | b'\n' | b'\r') {
                            j += 1;
                        }
                        (None, j - i)
                    }
                    _ => return None,
                };
                if let Some(c) = ch {
                    decoded.push(c);
                    map.extend(std::iter::repeat_n(at, c.len_utf8()));
                }
                i += used;
            } else {
                let c = body[i..].chars().next()?;
                decoded.push(c);
                map.extend((0..c.len_utf8()).map(|k| base + i + k));
                i += c.len_utf8();
            }
        }
    }
    map.push(span.end - delim);
    (decoded == value).then_some(map)
}

fn hex(s: &str) -> Option<char> {
    char::from_u32(u32::from_str_radix(s, 16).ok()?)
}

/// "did you mean `message`?" for serde's "unknown field `mesage`, expected one of `rule`,
/// ..." (as rule files suggest a key; said for test files and the configuration too), else
/// nothing.
pub fn unknown_key_hint(msg: &str) -> String {
    let ticked =
        |s: &str| -> Vec<String> { s.split('`').skip(1).step_by(2).map(String::from).collect() };
    let Some((head, tail)) = msg.split_once("expected one of") else {
        return String::new();
    };
    let (Some(name), known) = (ticked(head).pop(), ticked(tail)) else {
        return String::new();
    };
    match did_you_mean(&name, known.iter().map(String::as_str)) {
        Some(k) => format!("did you mean `{k}`?"),
        None => String::new(),
    }
}

/// What other tools call our event fields (Zeek, syslog-ng, rsyslog, ECS, common habit), as
/// (their name, ours): a rule ported from them names `hostname` or `dst_port`, which no edit
/// distance brings to `host` or `dport`.
const FIELD_ALIASES: &[(&str, &str)] = &[
    ("hostname", "host"),
    ("host_name", "host"),
    ("source_host", "host"),
    ("computer", "host"),
    ("src_ip", "src"),
    ("srcip", "src"),
    ("src_addr", "src"),
    ("source_ip", "src"),
    ("source", "src"),
    ("saddr", "src"),
    ("ip_src", "src"),
    ("orig_h", "src"),
    ("id.orig_h", "src"),
    ("client_ip", "src"),
    ("dst_ip", "dst"),
    ("dstip", "dst"),
    ("dst_addr", "dst"),
    ("dest_ip", "dst"),
    ("dest", "dst"),
    ("destination", "dst"),
    ("destination_ip", "dst"),
    ("daddr", "dst"),
    ("ip_dst", "dst"),
    ("resp_h", "dst"),
    ("id.resp_h", "dst"),
    ("server_ip", "dst"),
    ("src_port", "sport"),
    ("srcport", "sport"),
    ("source_port", "sport"),
    ("orig_p", "sport"),
    ("id.orig_p", "sport"),
    ("dst_port", "dport"),
    ("dstport", "dport"),
    ("dest_port", "dport"),
    ("destination_port", "dport"),
    ("port", "dport"),
    ("resp_p", "dport"),
    ("id.resp_p", "dport"),
    ("program", "app"),
    ("programname", "app"),
    ("appname", "app"),
    ("app_name", "app"),
    ("tag", "app"),
    ("syslogtag", "app"),
    ("ident", "app"),
    ("pid", "procid"),
    ("proc_id", "procid"),
    ("process_id", "procid"),
    ("message", "msg"),
    ("text", "msg"),
    ("content", "msg"),
    ("msg_id", "msgid"),
    ("message_id", "msgid"),
    ("sev", "severity"),
    ("level", "severity"),
    ("priority", "severity"),
    ("fac", "facility"),
    ("protocol", "proto"),
    ("transport", "proto"),
    ("conn_state", "state"),
    ("timestamp", "time"),
    ("ts", "time"),
    ("@timestamp", "time"),
];

/// The field `name` most likely means among `candidates`: what other tools call it
/// (`hostname` for `host`, `dst_port` for `dport`), else the closest by spelling.
pub fn near_field<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str> + Clone,
) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    FIELD_ALIASES
        .iter()
        .filter(|(theirs, _)| *theirs == lower)
        .find_map(|(_, ours)| candidates.clone().into_iter().find(|c| c == ours))
        .or_else(|| did_you_mean(name, candidates))
}

/// The closest name to `name` among `candidates`, if close enough to suggest.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = levenshtein(name, c);
        let limit = (name.chars().count().max(c.chars().count()) / 3).max(1);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Optimal string alignment distance (Levenshtein plus adjacent transpositions).
fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, slot) in d.iter_mut().enumerate().take(w) {
        *slot = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn maps_literal_and_basic_strings() {
        let file = r#"a = 'x "y" z'"#;
        let m = StrMap::new(file, 4..13, r#"x "y" z"#);
        assert_eq!(m.span(2..5), 7..10);
        let file = r#"a = "x \"y\" z""#;
        let m = StrMap::new(file, 4..15, r#"x "y" z"#);
        // `"` of the decoded string covers the whole escape `\"`
        assert_eq!(m.span(2..3), 7..9);
        assert_eq!(m.span(3..4), 9..10);
        assert_eq!(&file[m.span(6..7)], "z");
    }

    #[test]
    fn line_col_counts_chars() {
        let f = FileCtx::new("x.toml".into(), "ab\ncé d");
        assert_eq!(f.line_col(0), (1, 1));
        assert_eq!(f.line_col(3), (2, 1));
        assert_eq!(f.line_col(7), (2, 4));
    }

    /// What miette reads around any span of a file is the same from [`FileText`] as from
    /// its own whole-file scan (`NamedSource`): data, span, line, column and line count.
    #[test]
    fn file_text_reads_spans_as_miette_does() {
        use miette::SourceCode;
        let texts = [
            "[[rule]]\nname = \"a\"\n\nevents.x = 'app == \"é\"'\npattern = \"x\"\n",
            "one\ntwo\nthree\n\n\nsix\nseven",
            "\n\nx\n",
            "no newline at all",
            "crlf\r\nlines\r\nhere\r\n",
        ];
        for text in texts {
            let f = FileCtx::new("t.toml".into(), text);
            let reference = miette::NamedSource::new("t.toml", text.to_string());
            for off in 0..=text.len() {
                for len in 0..4 {
                    if off + len > text.len() {
                        continue;
                    }
                    let span = miette::SourceSpan::new(off.into(), len);
                    for (before, after) in [(0, 0), (1, 1), (2, 3), (0, 2), (3, 0)] {
                        let want = reference.read_span(&span, before, after);
                        let got = f.named.read_span(&span, before, after);
                        match (want, got) {
                            (Ok(w), Ok(g)) => {
                                let at = (text, off, len, before, after);
                                assert_eq!(w.data(), g.data(), "{at:?}");
                                assert_eq!(w.span(), g.span(), "{at:?}");
                                assert_eq!(w.line(), g.line(), "{at:?}");
                                // The header's column counts characters (miette's, bytes).
                                let col = if (before, after) == (0, 0) {
                                    char_column(text, w.span().offset(), w.column())
                                } else {
                                    w.column()
                                };
                                assert_eq!(col, g.column(), "{at:?}");
                                assert_eq!(w.line_count(), g.line_count(), "{at:?}");
                                assert_eq!(w.name(), g.name(), "{at:?}");
                            }
                            (Err(_), Err(_)) => {}
                            (w, g) => panic!(
                                "{:?}: {:?} against {:?}",
                                (text, off, len, before, after),
                                w.is_ok(),
                                g.is_ok()
                            ),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn suggestions() {
        assert_eq!(
            did_you_mean("sevrity", ["severity", "name"]),
            Some("severity")
        );
        assert_eq!(did_you_mean("zzz", ["severity", "name"]), None);
        let fields = ["host", "app", "msg", "src", "dst", "dport"];
        assert_eq!(near_field("hostname", fields), Some("host"));
        assert_eq!(near_field("dst_port", fields), Some("dport"));
        assert_eq!(near_field("Program", fields), Some("app"));
        assert_eq!(near_field("hots", fields), Some("host"));
        // An alias whose field is not among the candidates (a flow rule has no `app`) is
        // not suggested.
        assert_eq!(near_field("program", ["src", "dst"]), None);
    }
}
