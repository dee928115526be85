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

use crate::replay::{Dropped, InputArgs, broken_pipe};

/// Arguments of `cepheus events`.
#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// The inputs and how to read them (as `cepheus replay`).
    #[command(flatten)]
    pub input: InputArgs,
}

/// Runs `cepheus events`: 0 when everything was read (refused lines are counted and named on
/// stderr, as replay does), 2 when an input cannot be read.
pub fn run(args: EventsArgs) -> ExitCode {
    match events(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn events(args: &EventsArgs) -> anyhow::Result<()> {
    let mut merger = args.input.open()?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let (mut events, mut malformed, mut duplicates) = (0u64, 0u64, 0u64);
    for item in merger.by_ref() {
        match item {
            Ok(ev) => {
                events += 1;
                serde_json::to_writer(&mut out, &event_json(&ev)).context("writing events")?;
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
    Ok(())
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
