//! The TOML front end: rule files, their keys, and rule-level checks.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::event::{FieldKey, Value, ValueType};
use crate::rules::check::{EventInfo, PatEnv, Reporter, compile_cond, compile_pattern};
use crate::rules::diag::{Diagnostic, FileCtx, Level, StrMap, did_you_mean, near_field};
use crate::rules::ir::{
    DEFAULT_FORGET_AFTER, DEFAULT_MAX_DELAY, EventDef, GroupField, Rule, Severity, TemplatePart,
    TimeMode, Trigger, net_lengths, network,
};
use crate::rules::syntax::{SyntaxError, parse_cond, parse_pattern};
use crate::time::Duration;

/// Every key a `[[rule]]` table may hold.
pub const RULE_KEYS: &[&str] = &[
    "name",
    "severity",
    "description",
    "message",
    "group_by",
    "events",
    "pattern",
    "expect",
    "time",
    "max_delay",
    "allowed_lateness",
    "trigger",
    "forget_after",
    "max_groups",
    "max_partial_matches",
];

const RESERVED: &[&str] = &[
    "seq", "or", "and", "absent", "within", "for", "distinct", "not", "in", "syslog", "flow",
];

/// What a message's `{name}` reads from the alert itself, not from its group or events: the
/// rule's name, its severity, and how many events the match or episode took.
const ALERT_NAMES: &[&str] = &["rule", "severity", "count"];

type Val<'i> = Spanned<DeValue<'i>>;

/// Where a rule name was first defined.
pub(crate) struct FirstDef {
    pub path: PathBuf,
    pub line: usize,
    pub column: usize,
    /// A note pointing at the first definition.
    pub note: Diagnostic,
}

/// State shared across files during one compile.
pub(crate) struct Session<'f> {
    pub diags: Vec<Diagnostic>,
    pub names: HashMap<String, FirstDef>,
    /// Each rule meaning ([`Rule::canonical`]) met so far, and the first rule that has it.
    pub meanings: HashMap<String, String>,
    pub read_file: &'f mut dyn FnMut(&Path) -> std::io::Result<String>,
    /// Bytes the regexes compiled so far take, against [`super::check::MAX_REGEX_BYTES`].
    pub regex_bytes: usize,
    /// The regexes compiled so far, by text (shared by every condition that writes one).
    pub regexes: HashMap<Box<str>, Result<super::ir::Re, super::ir::ReError>>,
    /// The list files read so far (`lhs in file("...")`), by path and the type they were read
    /// as: each read once however many conditions name it (`None`: it had errors).
    pub lists: super::check::Lists,
}

struct Cx<'s, 'f> {
    file: &'s FileCtx,
    s: &'s mut Session<'f>,
    errors: usize,
}

fn h(s: impl Into<String>) -> Option<String> {
    Some(s.into())
}

impl Cx<'_, '_> {
    fn push(&mut self, d: Diagnostic) {
        if d.is_error() {
            self.errors += 1;
        }
        self.s.diags.push(d);
    }

    fn error(&mut self, span: Range<usize>, msg: impl Into<String>, help: Option<String>) {
        let mut d = self.file.diag(Level::Error, span, msg);
        d.help = help;
        self.push(d);
    }

    fn warning(&mut self, span: Range<usize>, msg: impl Into<String>, help: Option<String>) {
        let mut d = self.file.diag(Level::Warning, span, msg);
        d.help = help;
        self.push(d);
    }

    fn syntax(&mut self, map: &StrMap, e: SyntaxError) {
        self.error(map.span(e.span), e.message, e.help);
    }

    fn reporter<'a>(&'a mut self, map: &'a StrMap) -> (Reporter<'a>, usize) {
        let before = self.s.diags.len();
        (
            Reporter {
                file: self.file,
                map,
                diags: &mut self.s.diags,
                regex_bytes: &mut self.s.regex_bytes,
                regexes: &mut self.s.regexes,
                read_file: &mut *self.s.read_file,
                lists: &mut self.s.lists,
            },
            before,
        )
    }

    /// Counts errors pushed through a [`Reporter`] since `before`.
    fn settle(&mut self, before: usize) {
        self.errors += self.s.diags[before..]
            .iter()
            .filter(|d| d.is_error())
            .count();
    }

    fn string<'v>(&mut self, v: &'v Val<'_>, what: &str) -> Option<&'v str> {
        match v.get_ref() {
            DeValue::String(s) => Some(s),
            other => {
                let t = other.type_str();
                // An entry of a list (`group_by = ["host", 5]`) is quoted where it stands.
                let hint = match other {
                    DeValue::Integer(_) | DeValue::Float(_) | DeValue::Boolean(_)
                        if what == "group_by" =>
                    {
                        let raw = self.file.text.get(v.span()).unwrap_or("...");
                        format!("quote it: `\"{raw}\"`")
                    }
                    _ => format!("quote it: `{what} = \"...\"`"),
                };
                self.error(
                    v.span(),
                    format!("`{what}` must be a string, found {t}"),
                    Some(hint),
                );
                None
            }
        }
    }

    fn duration(&mut self, v: &Val<'_>, what: &str) -> Option<Duration> {
        if let DeValue::Integer(i) = v.get_ref() {
            let n = i.as_str();
            self.error(
                v.span(),
                format!("`{what}` needs a unit"),
                h(format!("write \"{n}s\", \"{n}m\" or \"{n}h\"")),
            );
            return None;
        }
        let s = self.string(v, what)?;
        match Duration::parse(s) {
            Ok(d) => Some(d),
            Err(e) => {
                self.error(v.span(), format!("bad duration for `{what}`"), Some(e));
                None
            }
        }
    }

    fn count(&mut self, v: &Val<'_>, what: &str) -> Option<u64> {
        let n = match v.get_ref() {
            DeValue::Integer(i) => {
                i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok()
            }
            _ => None,
        };
        match n.and_then(|n| u64::try_from(n).ok()).filter(|n| *n > 0) {
            Some(n) => Some(n),
            // An integer too large for one (TOML's own integers stop at 2^63 - 1).
            None if matches!(v.get_ref(), DeValue::Integer(_)) && n.is_none() => {
                self.error(
                    v.span(),
                    format!("`{what}` is too large"),
                    Some(format!(
                        "write a whole number up to {}, unquoted: `{what} = 1000`",
                        i64::MAX
                    )),
                );
                None
            }
            None => {
                self.error(
                    v.span(),
                    format!("`{what}` must be a positive integer"),
                    Some(format!(
                        "write a whole number above 0, unquoted: `{what} = 1000`"
                    )),
                );
                None
            }
        }
    }
}

/// Entries of a table in file order.
fn entries<'t, 'i>(
    t: &'t DeTable<'i>,
) -> Vec<(&'t Spanned<std::borrow::Cow<'i, str>>, &'t Val<'i>)> {
    let mut v: Vec<_> = t.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

/// Checks one file and compiles its rules (those without errors).
pub(crate) fn compile_file(path: &Path, text: &str, s: &mut Session<'_>) -> Vec<Rule> {
    let file = FileCtx::new(path.to_path_buf(), text);
    let first = s.diags.len();
    let rules = compile_file_inner(&file, text, s);
    // this file's findings in file order (those in expect files after them)
    s.diags[first..].sort_by_key(|d| (d.path != file.path, d.span.start));
    rules
}

fn compile_file_inner(file: &FileCtx, text: &str, s: &mut Session<'_>) -> Vec<Rule> {
    let mut cx = Cx { file, s, errors: 0 };
    let (doc, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        for e in errors {
            let span = e.span().unwrap_or(0..0);
            let msg = e.message().trim().to_string();
            let help = if msg.contains("duplicate key") && text.get(span.clone()) == Some("rule") {
                h(
                    "start each rule with a `[[rule]]` line (double brackets): `[rule]` after one \
                   is a second, different `rule`",
                )
            } else if msg.contains("duplicate key") {
                h("each key may appear once per rule; event names must be unique within a rule")
            } else if msg.contains("string")
                && let Some(c) = text
                    .get(span.start..)
                    .and_then(|t| t.chars().next())
                    .filter(|c| c.is_control() && *c != '\n' && *c != '\r')
            {
                h(format!(
                    "a control character (U+{:04X}) stands in the string: remove it (or, in a \"...\" string, write it escaped, `\\u{:04X}`)",
                    c as u32, c as u32
                ))
            } else if msg.contains("escape") {
                h(
                    "in a \"...\" string a backslash starts an escape: double it (`\\\\w`), or \
                     write the condition in single quotes, which keep backslashes as written: \
                     events.a = 'msg =~ \"\\w+\"'",
                )
            } else if let Some(line) = file.line(span.start)
                && let Some((_, value)) = line.split_once('=')
                && value.trim_start().starts_with('"')
                && value.matches('"').count() >= 4
            {
                // `events.a = "app == "sshd""`: the string ended at the second quote.
                h(
                    "the string ended at its second `\"`: a condition holding double quotes is \
                     written in single quotes, e.g. events.a = 'app == \"sshd\"'",
                )
            } else if msg.contains("string") {
                h(
                    "close the string on the same line; write conditions in single quotes, e.g. \
                   events.a = 'app == \"sshd\"'",
                )
            } else {
                h("a rule file is TOML: `key = value` lines under `[[rule]]`, strings in quotes")
            };
            cx.error(span, format!("TOML: {msg}"), help);
        }
        return Vec::new();
    }
    let mut rules = Vec::new();
    let mut any_rule = false;
    for (k, v) in entries(doc.get_ref()) {
        if k.get_ref() != "rule" {
            let help = if did_you_mean(k.get_ref(), ["rule"]).is_some() {
                h("did you mean `[[rule]]`?")
            } else {
                h("a rule file holds `[[rule]]` tables only")
            };
            cx.error(
                k.span(),
                format!("unknown top-level key `{}`", k.get_ref()),
                help,
            );
            continue;
        }
        let DeValue::Array(items) = v.get_ref() else {
            cx.error(
                v.span(),
                "`rule` must be an array of tables",
                h("start each rule with a `[[rule]]` line"),
            );
            continue;
        };
        for item in items.iter() {
            any_rule = true;
            let DeValue::Table(t) = item.get_ref() else {
                cx.error(
                    item.span(),
                    "each rule must be a table",
                    h("start each rule with `[[rule]]`"),
                );
                continue;
            };
            if let Some(r) = rule(&mut cx, t, item.span()) {
                rules.push(r);
            }
        }
    }
    if !any_rule && cx.errors == 0 {
        cx.warning(
            0..0,
            "this file defines no rule",
            h("add a `[[rule]]` table"),
        );
    }
    rules
}

/// A rule that differs from an earlier one only in its names (its own, its event
/// definitions'), severity, description or message (often a copy left behind): each alert
/// comes once per rule. Said as a warning with where
/// the first is, since the engine runs both on one shared state without complaint.
fn same_meaning(cx: &mut Cx<'_, '_>, rule: &Rule, span: Range<usize>) {
    let meaning = rule.canonical();
    let Some(first) = cx.s.meanings.get(&meaning) else {
        cx.s.meanings.insert(meaning, rule.name.clone());
        return;
    };
    let mut d = cx.file.diag(
        Level::Warning,
        span,
        format!(
            "rule `{}` means the same as rule `{first}`: every alert they make comes once per rule",
            rule.name
        ),
    );
    d.help = Some(
        "they differ only in names, severity, description, message or the order of their event definitions; remove the copy, or change what one of them matches"
            .into(),
    );
    if let Some(def) = cx.s.names.get(first) {
        d.related.push(def.note.clone());
    }
    cx.push(d);
}

struct EventSrc<'t, 'i> {
    name: String,
    key_span: Range<usize>,
    value: &'t Val<'i>,
    cond: Option<crate::rules::ir::Cond>,
    info: Option<EventInfo>,
    /// group name -> (field name, span of the field value)
    mapping: Vec<(String, String, Range<usize>)>,
}

fn rule(cx: &mut Cx<'_, '_>, t: &DeTable<'_>, span: Range<usize>) -> Option<Rule> {
    let errors_before = cx.errors;
    // the `[[rule]]` header line, for findings about the rule as a whole
    let head = {
        let rest = cx.file.text.get(span.start..).unwrap_or("");
        let len = if rest.starts_with("[[") {
            rest.find('\n').unwrap_or(rest.len())
        } else {
            0
        };
        span.start..span.start + len.min(rest.trim_end().len())
    };
    let mut get: HashMap<&str, (&Spanned<std::borrow::Cow<'_, str>>, &Val<'_>)> = HashMap::new();
    for (k, v) in entries(t) {
        let key = k.get_ref().as_ref();
        if let Some(known) = RULE_KEYS.iter().find(|n| **n == key) {
            get.insert(known, (k, v));
        } else {
            let help = match did_you_mean(key, RULE_KEYS.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("rule keys are: {}", RULE_KEYS.join(", ")),
            };
            cx.error(
                k.span(),
                format!("unknown key `{key}` in a rule"),
                Some(help),
            );
        }
    }
    let val = |k: &str| get.get(k).map(|(_, v)| *v);

    // identity
    let name = match val("name") {
        Some(v) => cx
            .string(v, "name")
            .map(|n| (n.trim().to_string(), v.span())),
        None => {
            cx.error(
                head.clone(),
                "this rule has no `name`",
                h("add `name = \"...\"`"),
            );
            None
        }
    };
    if let Some((n, sp)) = &name {
        if n.is_empty() {
            cx.error(
                sp.clone(),
                "the rule name is empty",
                Some(
                    "name the rule: `name = \"ssh-bruteforce\"` (unique across the rule files)"
                        .into(),
                ),
            );
        } else if n.chars().any(char::is_control) {
            // A name is written in logs, alerts and `cepheus groups forget RULE`: one line.
            cx.error(
                sp.clone(),
                "the rule name holds a control character (a newline, a tab)",
                h("rule names are one line of printable text, e.g. `ssh-bruteforce`"),
            );
        } else if let Some(first) = cx.s.names.get(n) {
            let note = format!(
                "first defined at {}:{}:{}",
                first.path.display(),
                first.line,
                first.column
            );
            let mut d = cx.file.diag(
                Level::Error,
                sp.clone(),
                format!("duplicate rule name `{n}`"),
            );
            d.help = Some(format!("{note}; rule names must be unique across files"));
            d.related.push(first.note.clone());
            cx.push(d);
        } else {
            let (line, column) = cx.file.line_col(sp.start);
            let mut note = cx.file.diag(
                Level::Note,
                sp.clone(),
                format!("`{n}` is first defined here"),
            );
            note.label = Some("first definition".into());
            cx.s.names.insert(
                n.clone(),
                FirstDef {
                    path: cx.file.path.clone(),
                    line,
                    column,
                    note,
                },
            );
        }
    }
    let severity = match val("severity") {
        Some(v) => cx
            .string(v, "severity")
            .and_then(|s| match Severity::parse(s) {
                Some(sev) => Some(sev),
                None => {
                    let all = ["critical", "high", "medium", "low", "info"];
                    let help = match did_you_mean(s, all) {
                        Some(x) => format!("did you mean `{x}`?"),
                        None => format!("use one of: {}", all.join(", ")),
                    };
                    cx.error(v.span(), format!("unknown severity `{s}`"), Some(help));
                    None
                }
            }),
        None => {
            cx.error(
                head.clone(),
                "this rule has no `severity`",
                h("add `severity = \"high\"` (critical, high, medium, low or info)"),
            );
            None
        }
    };
    let description =
        val("description").and_then(|v| cx.string(v, "description").map(str::to_string));

    // group_by
    let mut group_by: Vec<(String, Range<usize>)> = Vec::new();
    if let Some(v) = val("group_by") {
        match v.get_ref() {
            DeValue::Array(a) => {
                for it in a.iter() {
                    if let Some(s) = cx.string(it, "group_by") {
                        if let Some((_, first)) = group_by.iter().find(|(n, _)| n == s) {
                            let first = first.clone();
                            cx.push(
                                cx.file
                                    .diag(
                                        Level::Error,
                                        it.span(),
                                        format!("`{s}` is listed twice in group_by"),
                                    )
                                    .with_label(first, "first listed here")
                                    .with_help(format!("list `{s}` once: drop this entry")),
                            );
                        } else if s.is_empty() {
                            cx.error(it.span(), "empty group_by name", None);
                        } else {
                            group_by.push((s.to_string(), it.span()));
                        }
                    }
                }
            }
            DeValue::String(s) => {
                cx.error(
                    v.span(),
                    "`group_by` must be a list",
                    Some(format!("write group_by = [\"{s}\"]")),
                );
            }
            other => {
                cx.error(
                    v.span(),
                    format!(
                        "`group_by` must be a list of field names, found {}",
                        other.type_str()
                    ),
                    Some("write `group_by = [\"host\"]`".into()),
                );
            }
        }
    }
    let group_names: Vec<&str> = group_by.iter().map(|(n, _)| n.as_str()).collect();

    // events
    let mut events: Vec<EventSrc<'_, '_>> = Vec::new();
    match val("events") {
        None => cx.error(
            head.clone(),
            "this rule has no events",
            h("define events with `events.<name> = '<condition>'`"),
        ),
        Some(v) => match v.get_ref() {
            DeValue::Table(et) => {
                for (k, ev) in entries(et) {
                    let name = k.get_ref().to_string();
                    let ok_name = name
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    if !ok_name {
                        cx.error(
                            k.span(),
                            format!("`{name}` is not a valid event name"),
                            h("event names are letters, digits and `_`, starting with a letter"),
                        );
                    } else if RESERVED.contains(&name.as_str()) {
                        cx.error(
                            k.span(),
                            format!("`{name}` is a keyword and cannot name an event"),
                            h("pick another name"),
                        );
                    }
                    events.push(event(cx, name, k.span(), ev, &group_names));
                }
                if et.is_empty() {
                    cx.error(v.span(), "this rule has no events", None);
                }
            }
            other => cx.error(
                v.span(),
                format!("`events` must be a table, found {}", other.type_str()),
                h("write `events.fail = 'syslog and ...'`"),
            ),
        },
    }

    // group fields of every event
    let mut group_types: Vec<Option<(ValueType, String)>> = vec![None; group_by.len()];
    // The registry field each group value is read from (by the first event mapping it): its
    // range bounds the `expect` values.
    let mut group_fields: Vec<Option<crate::event::Field>> = vec![None; group_by.len()];
    // The network each group value is read as (`src/64`), by the first event: every event
    // must read it so (an address and its network are not one key).
    let mut group_nets: Vec<Option<(NetBits, String)>> = vec![None; group_by.len()];
    let mut misspelt = vec![false; group_by.len()];
    let mut event_defs = Vec::new();
    for ev in &events {
        let mut fields = Vec::new();
        if let Some(info) = &ev.info {
            for (gi, g) in group_names.iter().enumerate() {
                let mapped = ev.mapping.iter().find(|(gn, _, _)| gn == g);
                let (fname, fspan) = match mapped {
                    Some((_, f, sp)) => (f.as_str(), sp.clone()),
                    None => (*g, ev.value.span()),
                };
                // `src/64`: the field, read as its network.
                let (fname, net) = match net_spec(fname) {
                    None => (fname, None),
                    Some(Ok((f, v4, v6))) => (f, Some((v4, v6))),
                    Some(Err(msg)) => {
                        cx.error(
                            fspan,
                            format!("event `{}` maps group field `{g}` to `{fname}`: {msg}", ev.name),
                            h("write an address field and the bits of its network to keep: `src/64` (an IPv6 /64, an IPv4 address whole), or `src/24,64` (IPv4 /24, IPv6 /64)"),
                        );
                        continue;
                    }
                };
                match (&group_nets[gi], net) {
                    (Some((first, first_ev)), net) if *first != net => {
                        let said = |n: NetBits| match n {
                            None => "an address".to_string(),
                            Some((v4, v6)) => format!("a /{} network", net_lengths(v4, v6)),
                        };
                        cx.error(
                            fspan.clone(),
                            format!(
                                "group field `{g}` is read as {} in event `{first_ev}` but as {} in event `{}`",
                                said(*first),
                                said(net),
                                ev.name
                            ),
                            h("read it the same way in every event: the same network length (`src/64`), or none"),
                        );
                    }
                    (Some(_), _) => {}
                    (None, net) => group_nets[gi] = Some((net, ev.name.clone())),
                }
                match info.provides(fname).map(|(key, ty)| match net {
                    None => Ok((GroupField::from(key), ty)),
                    Some((v4, v6)) if ty == ValueType::Ip => {
                        Ok((GroupField::network(key, v4, v6), ValueType::Ip))
                    }
                    Some(_) => Err(ty),
                }) {
                    Some(Err(ty)) => cx.error(
                        fspan.clone(),
                        format!(
                            "event `{}` reads group field `{g}` as a network of `{fname}`, which is {}, not an IP address",
                            ev.name,
                            with_article(&ty.to_string())
                        ),
                        h("a network is read from an address field: `src`, `dst`, `peer`, or a capture named like one (`(?P<src>...)` reads an IP address)"),
                    ),
                    Some(Ok((key, ty))) => {
                        if let Err(why) = info.always_provides(fname) {
                            let (what, help) = why.explain(fname, &ev.name);
                            cx.error(
                                fspan.clone(),
                                format!(
                                    "event `{}` cannot always provide group field `{g}`: {what}",
                                    ev.name
                                ),
                                Some(help),
                            );
                        }
                        match &group_types[gi] {
                            Some((t0, first)) if *t0 != ty => {
                                cx.error(
                                    fspan,
                                    format!(
                                        "group field `{g}` is {} in event `{first}` but {} in event `{}`",
                                        with_article(&t0.to_string()),
                                        with_article(&ty.to_string()),
                                        ev.name
                                    ),
                                    h("group keys must have one type: map the group name to fields of the same type"),
                                );
                            }
                            Some(_) => {}
                            None => {
                                group_types[gi] = Some((ty, ev.name.clone()));
                                if let (FieldKey::Known(f), None) = (&key.key, key.net) {
                                    group_fields[gi] = Some(*f);
                                }
                            }
                        }
                        fields.push(key);
                    }
                    None => {
                        let names = info.names();
                        let src = info.source.map_or("its", |s| s.name());
                        if mapped.is_some() {
                            let help = Some(info.missing_field_help(fname));
                            cx.error(
                                fspan,
                                format!("event `{}` has no field `{fname}`", ev.name),
                                help,
                            );
                        } else if let Some(close) =
                            near_field(g, names.iter().map(String::as_str))
                        {
                            // A typo in `group_by` itself when no event of the rule has the
                            // field (said there, once); else in this event (its capture).
                            let some_event_has_it = events.iter().any(|e| {
                                e.info.as_ref().is_some_and(|i| i.provides(g).is_some())
                                    || e.mapping.iter().any(|(gn, _, _)| gn == g)
                            });
                            if some_event_has_it {
                                cx.error(
                                    fspan,
                                    format!("event `{}` cannot provide group field `{g}`", ev.name),
                                    Some(format!(
                                        "did you mean to capture `{g}` where it has `{close}`?"
                                    )),
                                );
                            } else if !misspelt[gi] {
                                misspelt[gi] = true;
                                cx.error(
                                    group_by[gi].1.clone(),
                                    format!(
                                        "`{g}` in `group_by` is not a field of event `{}`",
                                        ev.name
                                    ),
                                    Some(format!("did you mean `{close}`?")),
                                );
                            }
                        } else {
                            cx.error(
                                fspan,
                                format!("event `{}` cannot provide group field `{g}`", ev.name),
                                Some(format!(
                                    "{src} events have no `{g}`: map it to one of their fields, e.g. `events.{} = {{ if = '...', {g} = \"<field>\" }}`, or capture it with a named regex group `(?P<{g}>...)`",
                                    ev.name
                                )),
                            );
                        }
                    }
                }
            }
        }
        if let Some(cond) = &ev.cond {
            event_defs.push(EventDef {
                name: ev.name.clone(),
                cond: cond.clone(),
                group_fields: fields,
                position: event_defs.len(),
            });
        }
    }

    // pattern
    let names: Vec<String> = events.iter().map(|e| e.name.clone()).collect();
    let infos: Vec<Option<EventInfo>> = events.iter().map(|e| e.info.clone()).collect();
    let mut checked = None;
    let mut pattern_span = head.clone();
    let mut pattern_text = String::new();
    match val("pattern") {
        None => cx.error(
            head.clone(),
            "this rule has no `pattern`",
            h("add e.g. `pattern = \"seq(a, b) within 5m\"`"),
        ),
        Some(v) => {
            pattern_span = v.span();
            if let Some(text) = cx.string(v, "pattern") {
                pattern_text = text.trim().to_string();
                let map = StrMap::new(&cx.file.text, v.span(), text);
                match parse_pattern(text) {
                    Err(e) => cx.syntax(&map, e),
                    Ok(ast) => {
                        let env = PatEnv {
                            names: &names,
                            infos: &infos,
                        };
                        let (mut r, before) = cx.reporter(&map);
                        checked = compile_pattern(&ast, &env, &mut r);
                        cx.settle(before);
                    }
                }
            }
        }
    }
    if let Some(c) = &checked {
        for (i, ev) in events.iter().enumerate() {
            if !c.used.contains(&i) {
                cx.warning(
                    ev.key_span.clone(),
                    format!(
                        "event `{}` is defined but the pattern does not use it",
                        ev.name
                    ),
                    h("use it in `pattern` or remove it"),
                );
            }
        }
    }

    // expect
    let mut expect: Vec<Vec<Value>> = Vec::new();
    let mut commented = false;
    if let Some(v) = val("expect") {
        if group_by.is_empty() {
            cx.error(
                v.span(),
                "`expect` lists groups, but this rule has no `group_by`",
                h("add `group_by = [\"host\"]` or remove `expect`"),
            );
        } else if group_types.iter().all(Option::is_some) {
            let types: Vec<ValueType> = group_types.iter().flatten().map(|(t, _)| *t).collect();
            let nets: Vec<NetBits> = (group_nets.iter())
                .map(|n| n.as_ref().and_then(|(net, _)| *net))
                .collect();
            let key = (
                group_names.as_slice(),
                types.as_slice(),
                group_fields.as_slice(),
            );
            expect = expect_values(cx, v, key, &nets, &mut commented);
        } else {
            expect_shape(cx, v);
        }
    }
    // An absence rule per group watches only the groups it has seen or is told of: with no
    // `expect`, or one that lists no group (an empty list, a file with no key yet), a group
    // never seen never alerts.
    if let Some(c) = &checked
        && c.absence_only
        && !group_by.is_empty()
        && expect.is_empty()
    {
        match val("expect") {
            None => cx.warning(
                pattern_span.clone(),
                "this rule only detects an absence, per group, with no `expect`: a group never seen will never alert",
                h("list the groups that must be present: `expect = { file = \"hosts.txt\" }` or `expect = [\"web-1\", ...]`"),
            ),
            // (Not for a file that says, in comments only, that none is listed yet.)
            Some(v) if cx.errors == errors_before && !commented => cx.warning(
                v.span(),
                "`expect` lists no group: this rule only detects an absence, per group, so a group never seen will never alert",
                h("list the groups that must be present, one key per line of the file or in the list"),
            ),
            Some(_) => {}
        }
    }

    // message
    let mut message = None;
    if let Some(v) = val("message")
        && let Some(text) = cx.string(v, "message")
    {
        let map = StrMap::new(&cx.file.text, v.span(), text);
        let absence_only = checked.as_ref().is_some_and(|c| c.absence_only);
        // The events a match holds (those named outside `absent(..)`): only they fill fields.
        let present = checked.as_ref().map(|c| {
            let mut set = std::collections::BTreeSet::new();
            present_events(&c.pattern, &mut set);
            set
        });
        message = template(
            cx,
            &map,
            text,
            &group_names,
            &infos,
            absence_only,
            present.as_ref(),
        );
    }

    // time model (`None`: a mode not understood, already said)
    let time = match val("time") {
        None => Some(TimeMode::Processing),
        Some(v) => match cx.string(v, "time") {
            Some("processing") => Some(TimeMode::Processing),
            Some("event") => Some(TimeMode::Event),
            Some(other) => {
                cx.error(
                    v.span(),
                    format!("unknown time mode `{other}`"),
                    h("use \"processing\" (arrival time) or \"event\" (the stamp the source wrote)"),
                );
                None
            }
            None => None,
        },
    };
    let max_delay = val("max_delay").and_then(|v| cx.duration(v, "max_delay"));
    let allowed_lateness = val("allowed_lateness").and_then(|v| cx.duration(v, "allowed_lateness"));
    // (Not after a mode misspelt: `max_delay` says the author meant event time.)
    if time == Some(TimeMode::Processing) {
        for k in ["max_delay", "allowed_lateness"] {
            if let Some(v) = val(k) {
                cx.warning(
                    v.span(),
                    format!("`{k}` has no effect with processing time"),
                    h("add `time = \"event\"` or remove it"),
                );
            }
        }
    }
    // A trigger table with an error in it: no further warning about what it would limit.
    let mut trigger_bad = false;
    let trigger = match val("trigger") {
        None => Trigger::Event,
        Some(v) => match v.get_ref() {
            DeValue::String(s) if s == "event" => Trigger::Event,
            DeValue::Table(tt) => {
                let mut every = None;
                for (k, tv) in entries(tt) {
                    if k.get_ref() == "every" {
                        every = cx.duration(tv, "every");
                        trigger_bad |= every.is_none();
                    } else {
                        trigger_bad = true;
                        cx.error(
                            k.span(),
                            format!("unknown key `{}` in `trigger`", k.get_ref()),
                            h("write `trigger = { every = \"1m\" }`, or `{}` for the rule's window"),
                        );
                    }
                }
                Trigger::Every(every)
            }
            _ => {
                cx.error(
                    v.span(),
                    "`trigger` must be \"event\" or a table `{ every = \"1m\" }`",
                    h("`{}` means: once per window (tumbling)"),
                );
                Trigger::Event
            }
        },
    };
    if let Some(c) = &checked {
        if let Some(w) = c.within
            && w.min > Duration::ZERO
            && most_events(&c.pattern).is_some_and(|n| n <= 1)
        {
            cx.warning(
                pattern_span.clone(),
                format!(
                    "this rule never matches: a match holds one event, so it lasts 0s, never the least duration {} of `within {}..{}` (an absence is no event: the duration runs from the first event to the last)",
                    w.min, w.min, w.max
                ),
                h(format!("write `within {}`", w.max)),
            );
        }
        absences_past_within(cx, c, &pattern_span);
        unused_upper_count(cx, c, &pattern_span);
        unbounded(cx, c, &pattern_span, &pattern_text);
        if let (Trigger::Every(period), Some(v)) = (&trigger, val("trigger"))
            && !trigger_bad
            && c.within.is_none()
            && longest_wait(&c.pattern) == Duration::ZERO
            && period.is_none_or(|p| p == Duration::ZERO)
        {
            cx.warning(
                v.span(),
                "this trigger limits nothing: with no period (or 0s) it means once per window, and this rule has no `within`",
                h("set a period, e.g. `trigger = { every = \"10m\" }`, or add `within` to the pattern"),
            );
        }
        if let (Trigger::Every(Some(period)), Some(v)) = (&trigger, val("trigger"))
            && !trigger_bad
            && *period == Duration::ZERO
            && (c.within.is_some() || longest_wait(&c.pattern) > Duration::ZERO)
        {
            cx.warning(
                v.span(),
                "this trigger limits nothing: `every = \"0s\"` allows an alert per match, as `trigger = \"event\"` does",
                h("set a period, e.g. `trigger = { every = \"10m\" }`, or write `{}` for once per window"),
            );
        }
        if let (Trigger::Every(Some(period)), Some(v), Some(w)) =
            (&trigger, val("trigger"), c.within)
            && !trigger_bad
            && *period > w.max
        {
            cx.warning(
                v.span(),
                format!(
                    "the period ({period}) is longer than the rule's window ({}): the window applies, so this rule alerts up to once per {}",
                    w.max, w.max
                ),
                h(format!(
                    "write `every = \"{}\"` (or `{{}}`) to say so; a longer quiet time needs a longer `within`",
                    w.max
                )),
            );
        }
    }
    let forget_after = val("forget_after").and_then(|v| cx.duration(v, "forget_after"));
    // The pattern's longest wait: its longest absence, and its window.
    let absence_wait = checked.as_ref().map(|c| longest_wait(&c.pattern));
    let longest = checked
        .as_ref()
        .zip(absence_wait)
        .map(|(c, a)| a.max(c.within.map_or(Duration::ZERO, |w| w.max)));
    if let (Some(f), Some(v), Some(longest)) = (forget_after, val("forget_after"), longest) {
        if f < longest {
            cx.warning(
                v.span(),
                format!("`forget_after` ({f}) is shorter than the pattern's {longest}: a silent group is forgotten before it can alert"),
                h(format!("use at least `forget_after = \"{}\"`", twice(longest))),
            );
        } else if f == longest && Some(f) == absence_wait && longest > Duration::ZERO {
            // (An absence's wait: a `within` alone fires on an event, nothing to forget then.)
            cx.warning(
                v.span(),
                format!("`forget_after` ({f}) is the pattern's {longest}: a silent group is forgotten as it alerts, its alert resolved `forgotten` at once"),
                h(format!("use a longer one, such as `forget_after = \"{}\"`", twice(longest))),
            );
        }
    }
    let max_groups = val("max_groups").and_then(|v| cx.count(v, "max_groups"));
    if let (Some(m), Some(v)) = (max_groups, val("max_groups"))
        && expect.len() as u64 >= m
    {
        // Expected groups always exist and count toward the budget: none is left to discover.
        cx.warning(
            v.span(),
            format!(
                "`expect` lists {} groups, `max_groups` is {m}: every group the rule could discover beyond them is refused",
                expect.len()
            ),
            h(format!(
                "raise `max_groups` above {} to leave room for groups not listed",
                expect.len()
            )),
        );
    }
    if let (None, Some(v)) = (val("max_groups"), val("expect"))
        && expect.len() as u64 >= crate::engine::DEFAULT_MAX_GROUPS
    {
        // The same with the default budget, which the rule does not show.
        cx.warning(
            v.span(),
            format!(
                "`expect` lists {} groups, as many as the default `max_groups` ({}): every group the rule could discover beyond them is refused",
                expect.len(),
                crate::engine::DEFAULT_MAX_GROUPS
            ),
            h(format!(
                "set `max_groups` above {} to leave room for groups not listed",
                expect.len()
            )),
        );
    }
    let max_partial_matches =
        val("max_partial_matches").and_then(|v| cx.count(v, "max_partial_matches"));

    if cx.errors > errors_before {
        return None;
    }
    let checked = checked?;
    let (name, name_span) = name?;
    // Not given, `forget_after` is 7 days, or twice the pattern's longest wait when that is
    // longer: a default never forgets a group before the rule could alert on it, nor as it
    // alerts (`absent(ok) for 7d` under 7 days fired and was resolved `forgotten` at once).
    let forget_after = forget_after
        .unwrap_or_else(|| DEFAULT_FORGET_AFTER.max(twice(longest.unwrap_or(Duration::ZERO))));
    let (event_defs, pattern) = crate::rules::check::order_definitions(event_defs, checked.pattern);
    let rule = Rule {
        name,
        severity: severity?,
        description,
        message,
        group_by: group_by.into_iter().map(|(n, _)| n).collect(),
        events: event_defs,
        pattern,
        within: checked.within,
        expect,
        time: time?,
        max_delay: max_delay.unwrap_or(DEFAULT_MAX_DELAY),
        allowed_lateness: allowed_lateness.unwrap_or(Duration::ZERO),
        trigger,
        forget_after,
        max_groups,
        max_partial_matches,
        file: cx.file.path.display().to_string(),
    };
    // What the checker lets through but the engine cannot run (a pattern that expands too
    // far, `and` of more than 5 parts, ...) is an error here, not a shard without an engine.
    if let Err(e) = crate::engine::plan::plan(&rule) {
        use crate::engine::plan::PlanError;
        let (message, help) = match e {
            PlanError::TooManyEvents(_) => (
                "this rule has more than 64 event definitions".to_string(),
                "split it into several rules".to_string(),
            ),
            PlanError::TooManyAlternatives(_) => (
                format!(
                    "this pattern expands to more than {} alternatives",
                    crate::engine::plan::MAX_ALTERNATIVES
                ),
                "split it into several rules, or factor out the `or`s".to_string(),
            ),
            // "what; how to write it instead" (the second part, when there is one, is the
            // hint).
            PlanError::Unsupported { what, .. } => match what.split_once("; ") {
                Some((what, how)) => (
                    format!("the engine cannot run this pattern: {what}"),
                    how.to_string(),
                ),
                None => (
                    format!("the engine cannot run this pattern: {what}"),
                    String::new(),
                ),
            },
        };
        let message = format!("rule `{}`: {message}", rule.name);
        cx.error(pattern_span, message, (!help.is_empty()).then_some(help));
        return None;
    }
    same_meaning(cx, &rule, name_span);
    Some(rule)
}

fn event<'t, 'i>(
    cx: &mut Cx<'_, '_>,
    name: String,
    key_span: Range<usize>,
    v: &'t Val<'i>,
    group_names: &[&str],
) -> EventSrc<'t, 'i> {
    let mut out = EventSrc {
        name,
        key_span,
        value: v,
        cond: None,
        info: None,
        mapping: Vec::new(),
    };
    let cond_val: Option<&Val<'_>> = match v.get_ref() {
        DeValue::String(_) => Some(v),
        DeValue::Table(t) => {
            let mut cond = None;
            for (k, fv) in entries(t) {
                let key = k.get_ref().as_ref();
                if key == "if" {
                    cond = Some(fv);
                } else if group_names.contains(&key) {
                    if let Some(f) = cx.string(fv, key) {
                        out.mapping
                            .push((key.to_string(), f.to_string(), fv.span()));
                    }
                } else {
                    let help = match did_you_mean(key, group_names.iter().copied().chain(["if"])) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None if group_names.is_empty() => {
                            "an event table holds `if` and, for each group_by name, the field that supplies it; this rule has no group_by".into()
                        }
                        None => format!(
                            "an event table holds `if` and group_by names ({})",
                            group_names.join(", ")
                        ),
                    };
                    cx.error(
                        k.span(),
                        format!("`{key}` is neither `if` nor a group_by name"),
                        Some(help),
                    );
                }
            }
            if cond.is_none() {
                cx.error(
                    v.span(),
                    format!("event `{}` has no `if` condition", out.name),
                    h("write `{ if = 'syslog and ...', ... }`"),
                );
            }
            cond
        }
        other => {
            cx.error(
                v.span(),
                format!(
                    "an event is a condition string or a table, found {}",
                    other.type_str()
                ),
                h("write `events.x = 'syslog and app == \"sshd\"'`"),
            );
            None
        }
    };
    let Some(cv) = cond_val else { return out };
    let Some(text) = cx.string(cv, "if") else {
        return out;
    };
    let map = StrMap::new(&cx.file.text, cv.span(), text);
    match parse_cond(text) {
        Err(e) => cx.syntax(&map, e),
        Ok(ast) => {
            let (mut r, before) = cx.reporter(&map);
            let (cond, info) = compile_cond(&ast, &mut r);
            let errs = r.diags[before..].iter().any(Diagnostic::is_error);
            cx.settle(before);
            if !errs {
                out.cond = cond;
                out.info = Some(info);
            }
        }
    }
    out
}

/// The keys an `expect` lists (sorted), read from the rule or its file; `commented` is set
/// when a file holds a comment line (read when it lists no key: a list left empty on purpose,
/// as the installer leaves `hosts.txt`, "none listed yet").
fn expect_values(
    cx: &mut Cx<'_, '_>,
    v: &Val<'_>,
    (groups, types, fields): (&[&str], &[ValueType], &[Option<crate::event::Field>]),
    nets: &[NetBits],
    commented: &mut bool,
) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    // Keys already listed: an expect list is a set (its order and repeats change nothing, and
    // so do not change the rule's identity either: the result is sorted).
    let mut seen: BTreeSet<Vec<Value>> = BTreeSet::new();
    // (text, file, span within that file)
    match v.get_ref() {
        DeValue::Array(a) => {
            for it in a.iter() {
                let text = match it.get_ref() {
                    DeValue::String(s) => Some(s),
                    other => {
                        let raw = cx.file.text.get(it.span()).unwrap_or("...");
                        cx.error(
                            it.span(),
                            format!("an `expect` key is a string, found {}", other.type_str()),
                            Some(format!("quote it: `\"{raw}\"`")),
                        );
                        None
                    }
                };
                if let Some(s) = text {
                    match parse_key(s, groups, types, fields, nets) {
                        Ok(k) if !seen.insert(k.clone()) => {
                            cx.warning(
                                it.span(),
                                format!("`{s}` is listed twice"),
                                h("remove the repeated key"),
                            );
                        }
                        Ok(k) => out.push(k),
                        Err((msg, help, sub)) => {
                            let map = StrMap::new(&cx.file.text, it.span(), s);
                            cx.error(map.span(sub), msg, help);
                        }
                    }
                }
            }
        }
        DeValue::Table(t) => {
            let mut file = None;
            for (k, fv) in entries(t) {
                if k.get_ref() == "file" {
                    file = cx.string(fv, "file").map(|f| (f.to_string(), fv.span()));
                } else {
                    cx.error(
                        k.span(),
                        format!("unknown key `{}` in `expect`", k.get_ref()),
                        h("write `expect = { file = \"hosts.txt\" }`"),
                    );
                }
            }
            let Some((rel, span)) = file else {
                if !t.is_empty() {
                    return out;
                }
                cx.error(
                    v.span(),
                    "`expect` table needs `file`",
                    h("write `expect = { file = \"hosts.txt\" }`"),
                );
                return out;
            };
            let base = cx.file.path.parent().unwrap_or(Path::new(""));
            let path = base.join(&rel);
            let text = match (cx.s.read_file)(&path) {
                Ok(t) => t,
                Err(e) => {
                    cx.error(
                        span,
                        format!("cannot read expect file `{}`: {e}", path.display()),
                        Some(
                            "the path is relative to the rule file's folder; one key per line"
                                .into(),
                        ),
                    );
                    return out;
                }
            };
            // (A byte-order mark, as Windows editors write, is no part of the first key.)
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            let ef = FileCtx::new(path, text);
            for line in list_lines(text) {
                let (sp, trimmed) = match line {
                    ListLine::Comment => {
                        *commented = true;
                        continue;
                    }
                    ListLine::Item(sp, item) => (sp, item),
                };
                match parse_key(trimmed, groups, types, fields, nets) {
                    Ok(k) => {
                        if !seen.insert(k.clone()) {
                            let mut d =
                                ef.diag(Level::Warning, sp, format!("`{trimmed}` is listed twice"));
                            d.help = h("remove the repeated line");
                            cx.push(d);
                        } else {
                            out.push(k);
                        }
                    }
                    Err((msg, help, sub)) => {
                        let mut d =
                            ef.diag(Level::Error, sp.start + sub.start..sp.start + sub.end, msg);
                        d.help = help;
                        cx.push(d);
                    }
                }
            }
        }
        _ => expect_shape(cx, v),
    }
    out.sort();
    // Kept as long as the rule: without the room left by doubling (up to half the list).
    out.shrink_to_fit();
    out
}

/// One line of a list file (an `expect` file, a condition's `in file(...)`).
pub(crate) enum ListLine<'t> {
    /// A line that is a comment (`# ...`).
    Comment,
    /// An item: its byte range in the file, and its text (trimmed, without a comment after
    /// it).
    Item(Range<usize>, &'t str),
}

/// The comments and items of a list file, blank lines skipped: one item per line; `#` starts
/// a comment at the start of a line or after a blank (`web-1  # rack 4`; `admin#1` is an
/// item); a byte-order mark at the start of any line is no part of it (Windows editors write
/// one, and lists joined with `cat` keep each: a key holding it would be invisible, and
/// never match what a host sends).
pub(crate) fn list_lines(text: &str) -> impl Iterator<Item = ListLine<'_>> {
    let mut offset = 0;
    text.split_inclusive('\n').filter_map(move |line| {
        let mut start = offset;
        offset += line.len();
        let line = match line.strip_prefix('\u{feff}') {
            Some(rest) => {
                start += '\u{feff}'.len_utf8();
                rest
            }
            None => line,
        };
        let body = line.trim_end_matches(['\n', '\r']);
        let comment = body
            .match_indices('#')
            .map(|(i, _)| i)
            .find(|&i| body[..i].ends_with([' ', '\t']));
        let body = comment.map_or(body, |c| &body[..c]);
        let trimmed = body.trim();
        if trimmed.starts_with('#') {
            return Some(ListLine::Comment);
        }
        if trimmed.is_empty() {
            return None;
        }
        let lead = body.len() - body.trim_start().len();
        Some(ListLine::Item(
            start + lead..start + lead + trimmed.len(),
            trimmed,
        ))
    })
}

/// Refuses an `expect` that is neither a list nor a `{ file = ... }` table (checked even when
/// the group's types are unknown, so this finding is not lost behind another).
fn expect_shape(cx: &mut Cx<'_, '_>, v: &Val<'_>) {
    if matches!(v.get_ref(), DeValue::Array(_) | DeValue::Table(_)) {
        return;
    }
    cx.error(
        v.span(),
        format!(
            "`expect` must be a list of keys or `{{ file = \"...\" }}`, found {}",
            v.get_ref().type_str()
        ),
        Some(
            "write `expect = [\"web-1\", \"db-1\"]` or `expect = { file = \"hosts.txt\" }`".into(),
        ),
    );
}

/// A bad expect key: message, hint, and the byte range of the culprit inside the key text.
type KeyError = (String, Option<String>, Range<usize>);

fn parse_key(
    s: &str,
    groups: &[&str],
    types: &[ValueType],
    fields: &[Option<crate::event::Field>],
    nets: &[NetBits],
) -> Result<Vec<Value>, KeyError> {
    // A JSON object names each field (`{"host": "web,1", "app": "nginx"}`, as `groups
    // forget` takes a key): a value may then hold a comma.
    // (Several fields only: one text field's key may begin with a brace, as it did before.)
    let mut key = if groups.len() > 1 && s.trim_start().starts_with('{') {
        json_key(s, groups, types, fields)?
    } else {
        plain_key(s, groups, types, fields)?
    };
    // A group read as a network is named by its first address: any address of the network
    // names it (`2001:db8:1:2::5` is the group `2001:db8:1:2::` of `src/64`).
    for (v, net) in key.iter_mut().zip(nets) {
        if let Some((v4, v6)) = *net
            && let Some(first) = network(v, v4, v6)
        {
            *v = first;
        }
    }
    Ok(key)
}

/// The bits of an IPv4 and an IPv6 address a group field keeps (`src/24,64`); `None`: the
/// whole address (or a field that is none).
type NetBits = Option<(u8, u8)>;

/// A group field mapping that reads an address field as its network (`src/64`,
/// `src/24,64`): the field's name and the bits kept of an IPv4 and an IPv6 address (one
/// length is both, an IPv4 address keeping at most its 32 bits); `None` when `text` names no
/// network, `Err` for lengths that are not.
fn net_spec(text: &str) -> Option<Result<(&str, u8, u8), String>> {
    // (A name with a slash and no digit after it is no network: an `sd.*` parameter may
    // hold a slash.)
    let (field, lengths) = text
        .rsplit_once('/')
        .filter(|(_, l)| l.bytes().any(|b| b.is_ascii_digit()))?;
    let bits = |t: &str, max: u8| match t.trim().parse::<u8>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!(
            "`{}` is not a network length (a number of bits, 0 to {max})",
            t.trim()
        )),
    };
    Some((|| {
        let (v4, v6) = match lengths.split_once(',') {
            None => {
                let n = bits(lengths, 128)?;
                (n.min(32), n)
            }
            Some((v4, v6)) => (bits(v4, 32)?, bits(v6, 128)?),
        };
        Ok((field.trim(), v4, v6))
    })())
}

/// A key as values comma-separated in `group_by` order (see [`parse_key`]).
fn plain_key(
    s: &str,
    groups: &[&str],
    types: &[ValueType],
    fields: &[Option<crate::event::Field>],
) -> Result<Vec<Value>, KeyError> {
    // One text field takes a comma as text (`web-1,22` may be a name); another type cannot,
    // so there a comma means values for fields group_by does not have.
    let one_text = groups.len() == 1 && types.first() == Some(&ValueType::Str);
    let parts: Vec<&str> = if one_text {
        vec![s]
    } else {
        s.split(',').collect()
    };
    if parts.len() != groups.len() {
        return Err((
            format!(
                "`{s}` has {} value(s), but group_by has {} ({})",
                parts.len(),
                groups.len(),
                groups.join(", ")
            ),
            h(if types.contains(&ValueType::Str) {
                format!(
                    "write the values comma-separated in group_by order: {}; or, for a value with a comma, a JSON object: '{{\"{}\": \"...\", ...}}'",
                    groups.join(","),
                    groups.first().copied().unwrap_or("field")
                )
            } else {
                format!(
                    "write the values comma-separated in group_by order: {}",
                    groups.join(",")
                )
            }),
            0..s.len(),
        ));
    }
    // Exactly its length: a key lives as long as the rule (one per expected host), and a
    // `Vec::new()` grown by push keeps room for 4 values (96 bytes for one 24-byte value).
    let mut out = Vec::with_capacity(parts.len());
    let mut at = 0;
    for (i, ((p, g), t)) in parts.iter().zip(groups).zip(types).enumerate() {
        let lead = p.len() - p.trim_start().len();
        let sub = at + lead..at + lead + p.trim().len();
        at += p.len() + 1;
        let parsed = Value::parse_as(*t, p);
        // A value no event can carry (`dport` 70000): the group would alert for ever.
        if let (Some(v), Some(Some(f))) = (&parsed, fields.get(i))
            && let Some(range) = f.out_of_range(v)
        {
            return Err((
                format!(
                    "`{}` is not a valid value for group field `{g}`: no event carries it",
                    p.trim()
                ),
                h(format!("`{}` is {range}", f.name())),
                sub,
            ));
        }
        match parsed {
            // No event can give a longer one (see `MAX_KEY_TEXT`): the group would never hear
            // from its host and alert for ever.
            Some(Value::Str(v)) if v.len() > crate::rules::ir::MAX_KEY_TEXT => {
                return Err((
                    format!(
                        "`{}...` is longer than {} bytes: no event forms a group with such a value",
                        p.trim().chars().take(20).collect::<String>(),
                        crate::rules::ir::MAX_KEY_TEXT
                    ),
                    h("group values are at most 1 KiB of text"),
                    sub,
                ));
            }
            Some(v) if !p.trim().is_empty() => out.push(v),
            _ => {
                return Err((
                    format!("`{}` is not a valid {t} for group field `{g}`", p.trim()),
                    match t {
                        _ if p.trim().is_empty() => {
                            h("an empty value names no group: remove it, or write the value")
                        }
                        ValueType::Ip => h("write an IPv4 or IPv6 address such as 10.0.0.5"),
                        ValueType::Int => h("write a whole number"),
                        _ => None,
                    },
                    sub,
                ));
            }
        }
    }
    Ok(out)
}

/// An `expect` key written as a JSON object of the group's fields: each value (a string, or
/// a number for a number field) read as the comma-separated form reads it.
fn json_key(
    s: &str,
    groups: &[&str],
    types: &[ValueType],
    fields: &[Option<crate::event::Field>],
) -> Result<Vec<Value>, KeyError> {
    let whole = 0..s.len();
    let example = format!(
        "write {{{}}}",
        groups
            .iter()
            .map(|g| format!("\"{g}\": \"...\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let obj: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(s.trim()).map_err(|e| {
            (
                format!("`{s}` is not a JSON object of the group's fields ({e})"),
                h(example.clone()),
                whole.clone(),
            )
        })?;
    if let Some(extra) = obj.keys().find(|k| !groups.contains(&k.as_str())) {
        return Err((
            format!(
                "`{extra}` is no group_by field of this rule ({})",
                groups.join(", ")
            ),
            h(example),
            whole,
        ));
    }
    let mut out = Vec::with_capacity(groups.len());
    for (i, g) in groups.iter().enumerate() {
        let text = match obj.get(*g) {
            Some(serde_json::Value::String(t)) => t.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            Some(other) => {
                return Err((
                    format!("the value of `{g}` is {other}: write a string or a number"),
                    h(example),
                    whole,
                ));
            }
            None => {
                return Err((
                    format!("`{s}` has no value for group field `{g}`"),
                    h(example),
                    whole,
                ));
            }
        };
        // Each value as a key of that one field would be read (its type, its range).
        let one = plain_key(
            &text,
            &groups[i..=i],
            &types[i..=i.min(types.len().saturating_sub(1))],
            fields.get(i..=i).unwrap_or(&[]),
        );
        match one {
            Ok(mut v) if v.len() == 1 => out.append(&mut v),
            Ok(_) => return Err((format!("`{s}`: no value for `{g}`"), None, whole)),
            Err((msg, help, _)) => return Err((msg, help, whole)),
        }
    }
    Ok(out)
}

fn template(
    cx: &mut Cx<'_, '_>,
    map: &StrMap,
    text: &str,
    groups: &[&str],
    infos: &[Option<EventInfo>],
    absence_only: bool,
    present: Option<&std::collections::BTreeSet<usize>>,
) -> Option<Vec<TemplatePart>> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut ok = true;
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' if b.get(i + 1) == Some(&b'{') => {
                lit.push('{');
                i += 2;
            }
            b'}' if b.get(i + 1) == Some(&b'}') => {
                lit.push('}');
                i += 2;
            }
            b'{' => {
                let Some(end) = text[i..].find('}').map(|e| i + e) else {
                    cx.error(
                        map.span(i..text.len()),
                        "unclosed `{` in message",
                        h("write `{{` for a literal brace"),
                    );
                    ok = false;
                    break;
                };
                let name = text[i + 1..end].trim();
                if !lit.is_empty() {
                    parts.push(TemplatePart::Text(std::mem::take(&mut lit)));
                }
                let known = groups.contains(&name)
                    || infos
                        .iter()
                        .flatten()
                        .any(|inf| inf.provides(name).is_some())
                    || ALERT_NAMES.contains(&name);
                if name.is_empty() {
                    cx.error(
                        map.span(i..end + 1),
                        "empty `{}` in message",
                        h("write a field name: `{host}`"),
                    );
                    ok = false;
                } else if known
                    && absence_only
                    && !groups.contains(&name)
                    && !ALERT_NAMES.contains(&name)
                {
                    // An absence fires for want of an event: there is none to fill it from.
                    cx.warning(
                        map.span(i..end + 1),
                        format!(
                            "`{{{name}}}` stays as written when this absence fires (no event is there to fill it); only its resolved alert, ended by an event, has one"
                        ),
                        h(if groups.is_empty() {
                            "an absence's message can name `{rule}`, `{severity}` and `{count}`".to_string()
                        } else {
                            format!("an absence's message can name its group: {}", groups.iter().map(|g| format!("`{{{g}}}`")).collect::<Vec<_>>().join(", "))
                        }),
                    );
                } else if known
                    && !groups.contains(&name)
                    && !ALERT_NAMES.contains(&name)
                    && let Some(present) = present
                    && !present.iter().any(|&e| {
                        infos
                            .get(e)
                            .and_then(Option::as_ref)
                            .is_some_and(|inf| inf.provides(name).is_some())
                    })
                {
                    // Only events inside `absent(..)` provide it: a match never holds one.
                    cx.warning(
                        map.span(i..end + 1),
                        format!(
                            "`{{{name}}}` stays as written: only events inside `absent(..)` provide it, and a match holds none of them"
                        ),
                        h("name a field of an event the match holds, or a group field"),
                    );
                } else if !known && infos.iter().all(Option::is_some) {
                    // (A definition with an error of its own provides no fields to look in:
                    // then nothing is said here, the error is enough.)
                    let mut cands: Vec<String> = groups.iter().map(|s| s.to_string()).collect();
                    for inf in infos.iter().flatten() {
                        cands.extend(inf.names());
                    }
                    let help = match near_field(name, cands.iter().map(String::as_str)) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None => "use a group_by name or a field of the rule's events".into(),
                    };
                    cx.warning(
                        map.span(i..end + 1),
                        format!("`{{{name}}}` is neither a group field nor a field of this rule's events"),
                        Some(help),
                    );
                }
                parts.push(TemplatePart::Field(FieldKey::from_name(name)));
                i = end + 1;
            }
            _ => {
                let c = text[i..].chars().next().unwrap_or(' ');
                lit.push(c);
                i += c.len_utf8();
            }
        }
    }
    if !lit.is_empty() {
        parts.push(TemplatePart::Text(lit));
    }
    ok.then_some(parts)
}

/// The names of the keys a rule may hold (for docs and tests).
pub fn rule_keys() -> &'static [&'static str] {
    RULE_KEYS
}

/// Warns of an absence `for D` longer than the rule's `within` in a sequence: in its middle
/// the sequence never matches (the next step may only come `D` after the step before it,
/// past the window); at its end the alert comes `D` after the last step, later than the
/// window suggests (`within` bounds only the steps before it).
fn absences_past_within(
    cx: &mut Cx<'_, '_>,
    c: &crate::rules::check::CheckedPattern,
    span: &Range<usize>,
) {
    use crate::rules::ir::Pattern;
    if let (Some(w), Pattern::Absent { for_: Some(d), .. }) = (c.within, &c.pattern) {
        // An absence alone with both: `for` times it, and `within` does nothing (found by an
        // audit: `absent(hb) for 2m within 1m` fired after 2 minutes, with no word).
        cx.warning(
            span.clone(),
            format!(
                "`within {}` does nothing here: an absence alone fires once {d} (its `for`) has passed with no event",
                w.max
            ),
            h(format!(
                "drop `within`, or write `absent(..) within {}` if that is the silence meant",
                w.max
            )),
        );
        return;
    }
    let (Some(w), Pattern::Seq(ps)) = (c.within, &c.pattern) else {
        return;
    };
    let mut middle_told = false;
    for (i, p) in ps.iter().enumerate().skip(1) {
        let Pattern::Absent { for_: Some(d), .. } = p else {
            continue;
        };
        if *d <= w.max {
            continue;
        }
        if i + 1 == ps.len() {
            cx.warning(
                span.clone(),
                format!(
                    "the absence at the end waits {d}, longer than `within {}`: `within` bounds the steps before it, so this fires {d} after the last of them",
                    w.max
                ),
                h(format!(
                    "write `absent(..) for` at most {} if the whole match must fit the window, or drop `within` if {d} is meant",
                    w.max
                )),
            );
        } else if !middle_told {
            middle_told = true;
            cx.warning(
                span.clone(),
                format!(
                    "this rule never matches: after `absent(..) for {d}` the next step may only come {d} after the step before it, but `within {}` ends the match sooner",
                    w.max
                ),
                h(format!("make `within` at least {d}, or shorten the absence")),
            );
        }
    }
}

/// Warns of a closure `{n,m}` that ends the pattern: its match fires at the `n`-th event and
/// its episode goes on with every further one, so `m` limits nothing (`a{2,3}` is `a{2,}`).
fn unused_upper_count(
    cx: &mut Cx<'_, '_>,
    c: &crate::rules::check::CheckedPattern,
    span: &Range<usize>,
) {
    use crate::rules::ir::Pattern;
    fn last_closure(p: &Pattern) -> Option<(u32, u32)> {
        match p {
            Pattern::Repeat {
                min, max: Some(m), ..
            } if m >= min && *m >= 2 => Some((*min, *m)),
            Pattern::Seq(ps) => ps.last().and_then(last_closure),
            Pattern::Or(ps) | Pattern::And(ps) => ps.iter().find_map(last_closure),
            _ => None,
        }
    }
    if let Some((n, m)) = last_closure(&c.pattern) {
        let written = if n == m {
            format!("{{{n}}}")
        } else {
            format!("{{{n},{m}}}")
        };
        cx.warning(
            span.clone(),
            format!(
                "the upper count of `{written}` changes nothing here: a closure that ends the pattern fires once it holds {n} events, and every further one extends that alert's episode"
            ),
            h(format!(
                "write `{{{n},}}`: one alert per episode, however many events extend it"
            )),
        );
    }
}

/// Warns of a pattern that pairs or counts events with no `within`: a temporal mistake more
/// often than a wish (the events of a match may be days apart; a count never starts over).
fn unbounded(
    cx: &mut Cx<'_, '_>,
    c: &crate::rules::check::CheckedPattern,
    span: &Range<usize>,
    text: &str,
) {
    if c.within.is_some() {
        return;
    }
    if ends_in_count(&c.pattern) {
        cx.warning(
            span.clone(),
            "with no `within` this count has no window: it alerts once enough events have come since the group was first seen, however far apart, and its episode never ends",
            h(format!(
                "add `within` to count the events of a time window, e.g. `{text} within 5m`"
            )),
        );
    } else if needs_two(&c.pattern) {
        cx.warning(
            span.clone(),
            "with no `within` the events of a match may be any time apart: a partial match waits until its group is forgotten (`forget_after`), so an event of last week completes with one of today",
            h(format!(
                "add `within` to say how close they must be, e.g. `{text} within 10m`"
            )),
        );
    }
}

/// Whether a match of `p` may end in a count (`a{5,}`, `seq(b, a{2,})`, `or(a{5,}, b)`).
fn ends_in_count(p: &crate::rules::ir::Pattern) -> bool {
    use crate::rules::ir::Pattern;
    match p {
        Pattern::Repeat { .. } => true,
        Pattern::Seq(ps) => ps.last().is_some_and(ends_in_count),
        Pattern::Or(ps) | Pattern::And(ps) => ps.iter().any(ends_in_count),
        _ => false,
    }
}

/// The fewest events a match of `p` takes.
fn min_events(p: &crate::rules::ir::Pattern) -> u64 {
    use crate::rules::ir::Pattern;
    match p {
        Pattern::Event(_) => 1,
        Pattern::Seq(ps) | Pattern::And(ps) => ps.iter().map(min_events).sum(),
        Pattern::Or(ps) => ps.iter().map(min_events).min().unwrap_or(0),
        Pattern::Repeat { inner, min, .. } => u64::from(*min) * min_events(inner),
        Pattern::Absent { .. } => 0,
    }
}

/// Whether some way of matching `p` takes two events or more.
fn needs_two(p: &crate::rules::ir::Pattern) -> bool {
    use crate::rules::ir::Pattern;
    match p {
        Pattern::Event(_) | Pattern::Absent { .. } => false,
        Pattern::Seq(ps) | Pattern::And(ps) => {
            ps.iter().map(min_events).sum::<u64>() >= 2 || ps.iter().any(needs_two)
        }
        Pattern::Or(ps) => ps.iter().any(needs_two),
        Pattern::Repeat { .. } => min_events(p) >= 2,
    }
}

/// The event definitions `p` names outside `absent(..)`: those a match holds.
fn present_events(p: &crate::rules::ir::Pattern, out: &mut std::collections::BTreeSet<usize>) {
    use crate::rules::ir::Pattern;
    match p {
        Pattern::Event(i) => {
            out.insert(*i);
        }
        Pattern::Seq(ps) | Pattern::Or(ps) | Pattern::And(ps) => {
            ps.iter().for_each(|p| present_events(p, out));
        }
        Pattern::Repeat { inner, .. } => present_events(inner, out),
        Pattern::Absent { .. } => {}
    }
}

/// The most events one match of `p` holds (`None`: no bound).
fn most_events(p: &crate::rules::ir::Pattern) -> Option<u64> {
    use crate::rules::ir::Pattern;
    match p {
        Pattern::Event(_) => Some(1),
        Pattern::Seq(ps) | Pattern::And(ps) => ps
            .iter()
            .try_fold(0u64, |n, p| Some(n.saturating_add(most_events(p)?))),
        Pattern::Or(ps) => ps
            .iter()
            .try_fold(0u64, |n, p| Some(n.max(most_events(p)?))),
        Pattern::Repeat { inner, max, .. } => {
            Some(most_events(inner)?.saturating_mul(u64::from((*max)?)))
        }
        Pattern::Absent { .. } => Some(0),
    }
}

/// `d` twice over (the default `forget_after` of a pattern that waits `d`).
fn twice(d: Duration) -> Duration {
    Duration(d.0.saturating_mul(2))
}

fn longest_wait(p: &crate::rules::ir::Pattern) -> Duration {
    use crate::rules::ir::Pattern;
    match p {
        Pattern::Event(_) => Duration::ZERO,
        Pattern::Seq(ps) | Pattern::Or(ps) | Pattern::And(ps) => {
            ps.iter().map(longest_wait).max().unwrap_or(Duration::ZERO)
        }
        Pattern::Repeat { inner, .. } => longest_wait(inner),
        Pattern::Absent { inner, for_ } => for_.unwrap_or(Duration::ZERO).max(longest_wait(inner)),
    }
}

/// `a string`, `an integer`, `an IP address`: a type name with its indefinite article.
fn with_article(noun: &str) -> String {
    let vowel = noun
        .chars()
        .next()
        .is_some_and(|c| "aeiouAEIOU".contains(c) || noun.starts_with("IP"));
    format!("{} {noun}", if vowel { "an" } else { "a" })
}
