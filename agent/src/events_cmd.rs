//! `cepheus events`: the events that recorded input turns into, as JSON lines.
//!
//! For a rule writer (which fields does this log line give, under which names and types?)
//! and for tests: the output is the JSON-lines event shape `cepheus replay` reads, so
//! `cepheus events X > e.jsonl; cepheus replay e.jsonl` alerts as `cepheus replay X` does.
//! Inputs are read exactly as `replay` reads them (same parser, year, zone, duplicate filter,
//! merge order, flows of captures).

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use anyhow::Context;
use cepheus_core::event::Event;
use cepheus_core::rules::ir::{RuleSet, key_value};

use crate::replay::{Dropped, InputArgs, broken_pipe};

/// Arguments of `cepheus events`.
#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// Rule files or folders (repeatable): each event then also lists, under `matches`, every
    /// event definition of these rules it satisfies, with the group it falls in (`null`: a
    /// `group_by` field is missing, so the rule drops it) and the regex captures it gives.
    /// Such lines are for reading, not replay input.
    #[arg(long = "rules", value_name = "PATH")]
    pub rules: Vec<std::path::PathBuf>,
    /// The inputs and how to read them (as `cepheus replay`).
    #[command(flatten)]
    pub input: InputArgs,
}

/// Runs `cepheus events`: 0 when everything was read (refused lines are counted and named on
/// stderr, as replay does), 1 when `--rules` have errors, 2 when an input cannot be read.
pub fn run(args: EventsArgs) -> ExitCode {
    match events(&args) {
        Ok(code) => code,
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn events(args: &EventsArgs) -> anyhow::Result<ExitCode> {
    let rules = if args.rules.is_empty() {
        None
    } else {
        match crate::replay::load_rules(&args.rules)? {
            Some(r) => Some(r),
            None => {
                eprintln!("error: the rules have errors; no event was read");
                return Ok(ExitCode::from(1));
            }
        }
    };
    let mut merger = args.input.open()?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let (mut events, mut malformed, mut duplicates) = (0u64, 0u64, 0u64);
    for item in merger.by_ref() {
        match item {
            Ok(ev) => {
                events += 1;
                let mut json = event_json(&ev);
                if let (Some(rules), serde_json::Value::Object(m)) = (&rules, &mut json) {
                    m.insert("matches".into(), matches(rules, &ev));
                }
                serde_json::to_writer(&mut out, &json).context("writing events")?;
                out.write_all(b"\n").context("writing events")?;
            }
            Err(Dropped::Malformed) => malformed += 1,
            Err(Dropped::Duplicate) => duplicates += 1,
        }
    }
    out.flush().context("writing events")?;
    let (m, d) = merger.dropped();
    eprintln!(
        "events: {events} events, {} malformed, {} duplicates dropped",
        malformed + m,
        duplicates + d
    );
    crate::replay::warn_if_nothing_read(events, malformed + m);
    Ok(ExitCode::SUCCESS)
}

/// Every event definition of `rules` that `ev` satisfies: rule, definition, group (`null`
/// when a `group_by` field is missing: the rule drops the event) and regex captures.
fn matches(rules: &RuleSet, ev: &Event) -> serde_json::Value {
    let mut found = Vec::new();
    for rule in &rules.rules {
        // In the order the file wrote them (the compiled order is the meaning's).
        let mut defs: Vec<&cepheus_core::rules::ir::EventDef> = rule.events.iter().collect();
        defs.sort_by_key(|d| d.position);
        for def in defs {
            let mut caps = Vec::new();
            if !def.cond.eval(ev, &mut caps) {
                continue;
            }
            let group: Option<serde_json::Map<String, serde_json::Value>> = (rule.group_by.iter())
                .zip(&def.group_fields)
                .map(|(name, field)| {
                    key_value(ev, &caps, field).map(|v| (name.clone(), v.to_json()))
                })
                .collect();
            let captures: serde_json::Map<String, serde_json::Value> = (caps.iter())
                .map(|(k, v)| (k.name().to_string(), v.to_json()))
                .collect();
            let mut m = serde_json::Map::new();
            m.insert("rule".into(), rule.name.clone().into());
            m.insert("event".into(), def.name.clone().into());
            m.insert(
                "group".into(),
                group.map_or(serde_json::Value::Null, Into::into),
            );
            if !captures.is_empty() {
                m.insert("captures".into(), captures.into());
            }
            found.push(serde_json::Value::Object(m));
        }
    }
    serde_json::Value::Array(found)
}

/// One event in the shape replay reads: `source`, `time`, `arrival` when it differs from
/// `time`, then every field by name.
pub fn event_json(ev: &Event) -> serde_json::Value {
    let mut json = ev.to_json();
    if ev.arrival != ev.time
        && let serde_json::Value::Object(m) = &mut json
    {
        m.insert("arrival".into(), ev.arrival.to_rfc3339().into());
    }
    json
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::PathBuf;

    use super::*;
    use crate::ingest::jsonl::parse_json_event;

    /// `--rules`: each definition an event satisfies, with its group (null when a group
    /// field is missing) and its captures; definitions it does not satisfy are not listed.
    #[test]
    fn matches_name_rule_definition_group_and_captures() {
        let rules = cepheus_core::rules::compile_str(
            "r.toml",
            "[[rule]]\nname = \"brute\"\nseverity = \"high\"\ngroup_by = [\"src\"]\nevents.fail = 'syslog and msg =~ \"Failed password for (?P<user>\\S+) from (?P<src>\\S+)\"'\nevents.ok = 'syslog and msg =~ \"Accepted \\S+ for \\S+ from (?P<src>\\S+)\"'\npattern = \"seq(fail{3,}, ok) within 5m\"\n\n[[rule]]\nname = \"by-host\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.any = 'syslog'\npattern = \"any\"\n",
        )
        .rules
        .unwrap();
        let p = crate::ingest::syslog::SyslogParser::default();
        let ev = p
            .parse(
                b"<38>Dec 10 06:55:46 h sshd[1]: Failed password for root from 10.0.0.9 port 22",
                cepheus_core::time::Timestamp(0),
                None,
            )
            .unwrap();
        assert_eq!(
            matches(&rules, &ev),
            serde_json::json!([
                {"rule": "brute", "event": "fail", "group": {"src": "10.0.0.9"},
                 "captures": {"user": "root", "src": "10.0.0.9"}},
                {"rule": "by-host", "event": "any", "group": {"host": "h"}},
            ])
        );
        // No hostname in the header: no `host` to group by, so `by-host` drops it.
        let ev = p
            .parse(
                b"<13>Dec  2 05:40:00 su: x",
                cepheus_core::time::Timestamp(0),
                None,
            )
            .unwrap();
        assert_eq!(
            matches(&rules, &ev),
            serde_json::json!([{"rule": "by-host", "event": "any", "group": null}])
        );
    }

    /// Every event of the real syslog files and captures, written by `cepheus events` and read
    /// back as replay reads JSON lines, is the same event, field for field.
    #[test]
    fn every_event_reads_back_as_itself() {
        let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let mut inputs: Vec<PathBuf> = Vec::new();
        for dir in ["syslog", "pcap", "synthetic"] {
            for e in std::fs::read_dir(data.join(dir)).unwrap() {
                let p = e.unwrap().path();
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                if name.ends_with(".log")
                    || name.ends_with(".txt") && name.starts_with("syslog_loose")
                    || name.ends_with(".pcap")
                    || name.ends_with(".pcapng")
                {
                    inputs.push(p);
                }
            }
        }
        assert!(inputs.len() > 20, "{inputs:?}");
        let (mut n, mut kinds) = (0, std::collections::BTreeSet::new());
        for p in inputs {
            let args = InputArgs {
                year: Some(2024),
                tz: "+02:00".into(),
                dedup_window: "0s".into(),
                inputs: vec![p.clone()],
            };
            for ev in args.open().unwrap().flatten() {
                let line = serde_json::to_string(&event_json(&ev)).unwrap();
                let back = parse_json_event(&line)
                    .unwrap_or_else(|e| panic!("{}: {line}: {e}", p.display()));
                // The same event; its fields in any order.
                let sorted = |e: &Event| {
                    let mut e = e.clone();
                    e.fields.sort_by(|a, b| a.0.name().cmp(b.0.name()));
                    e
                };
                assert_eq!(sorted(&back), sorted(&ev), "{}: {line}", p.display());
                n += 1;
                for (k, _) in &ev.fields {
                    kinds.insert(k.name().to_string());
                }
            }
        }
        // Both sources and most fields went through: syslog with structured data and peers,
        // flows with durations, addresses and states.
        assert!(n > 5_000, "{n}");
        for f in [
            "app", "procid", "msgid", "peer", "duration", "src", "state", "vlan",
        ] {
            assert!(kinds.contains(f), "no event had `{f}`: {kinds:?}");
        }
        assert!(kinds.iter().any(|k| k.starts_with("sd.")), "{kinds:?}");
    }
}
