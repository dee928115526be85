//! `cepheus replay`: runs the rules over recorded input as fast as it can.
//!
//! Syslog files (one message per line, RFC 3164/5424 detected per line, JSON-lines events too)
//! and pcap/pcapng captures (flows, and syslog datagrams to UDP 514) are merged by their
//! recorded timestamps, which drive the engine's clock: processing-time rules replay
//! deterministically. Alerts go to stdout as JSON lines; a summary goes to stderr.

use std::io::{self, BufRead, BufWriter, IsTerminal, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use cepheus_core::alert::Alert;
use cepheus_core::engine::{Engine, EngineConfig};
use cepheus_core::event::Event;
use cepheus_core::rules::ir::RuleSet;
use cepheus_core::time::{Duration, Timestamp};

use crate::flow::{FlowItem, MultiFlowReader, table::FlowConfig};
use crate::ingest::dedup::{Dedup, SharedDedup};
use crate::ingest::input::{Inputs, first_yearless_stamp, open_inputs};
use crate::ingest::syslog::{SyslogParser, Year, Zone};
use crate::rulefiles;

/// Arguments of `cepheus replay`.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// Rule files or folders (repeatable); default `rules/`, or the built-in rules when there
    /// is no such folder (as `cepheus run`).
    #[arg(long = "rules", value_name = "PATH")]
    pub rules: Vec<PathBuf>,
    /// Advance the clock after the input to this RFC 3339 time, or by `+DURATION` past the
    /// last event, so trailing absences fire.
    #[arg(long, value_name = "TIME|+DURATION")]
    pub until: Option<String>,
    /// Compile every rule on its own (no work shared between rules): the paper's RCEDA
    /// baseline, with no predicate index (every event is offered to every rule, which tests
    /// each of its event definitions), for measuring what sharing saves. The alerts are the
    /// same.
    #[arg(long)]
    pub no_share: bool,
    /// The inputs and how to read them.
    #[command(flatten)]
    pub input: InputArgs,
}

/// The inputs of `cepheus replay` and `cepheus events`, and how to read them.
#[derive(clap::Args, Debug)]
pub struct InputArgs {
    /// The year of the first RFC 3164 stamp (they carry none) of the first file named;
    /// default: resolved against today. The stamps after it, in that file and the others
    /// (one log, rotated), follow on: a log crossing New Year goes into the next year; each
    /// takes the year within half a year of the latest before it (another file's first, of
    /// that first stamp); a 29 February in a year without one, the leap year before.
    #[arg(long, value_name = "YYYY", value_parser = parse_year)]
    pub year: Option<i32>,
    /// The zone of RFC 3164 stamps: `UTC` (default), an offset such as `+02:00`, or a name.
    #[arg(
        long,
        value_name = "ZONE",
        default_value = "UTC",
        allow_hyphen_values = true
    )]
    pub tz: String,
    /// Drop a syslog message that repeats, byte for byte, one read this long before it in any
    /// of the inputs (a message relayed twice, perhaps into two files; in a capture, a syslog
    /// datagram seen twice), as the live agent's `[syslog] dedup_window` does; `0s` keeps
    /// every line. Flow packets and JSON events are not deduplicated (a file given twice is
    /// read once, with a warning).
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_DEDUP_WINDOW)]
    pub dedup_window: String,
    /// Input files: syslog or JSON-lines text, pcap or pcapng captures (their flows, and the
    /// syslog sent over UDP or TCP to port 514 or 5514); `-` is stdin, text or a capture
    /// (named twice, read once, with a warning).
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
}

/// `--year`: a year every RFC 3164 stamp of which is a time ([`Year::checked`], as a rule
/// test's `year` is checked).
fn parse_year(s: &str) -> Result<i32, String> {
    let y: i64 = s
        .trim()
        .parse()
        .map_err(|e| format!("`{s}` is not a year: {e}"))?;
    Year::checked(y)
}

impl InputArgs {
    /// Opens every input as one stream of events merged by recorded time: each text input a
    /// source of its own, the captures one source (one flow table for all: rotated files make
    /// one stream of flows), one duplicate filter for all (the live agent has one for all its
    /// sockets: a message relayed twice may sit in two files).
    pub fn open(&self) -> anyhow::Result<Merger> {
        let zone: Zone = self.tz.parse().map_err(|e| anyhow::anyhow!("--tz: {e}"))?;
        let year = self.year.map_or(Year::Resolve, Year::Fixed);
        let parser = SyslogParser::new(zone, year);
        let window = Duration::parse(&self.dedup_window)
            .map_err(|e| anyhow::anyhow!("--dedup-window {}: {e}", self.dedup_window))?;
        let dedup = dedup_filter(window);
        let mut sources = Vec::new();
        let mut captures = Vec::new();
        // With `--year`, the files given are one log (rotated files): the first text file's
        // first year-less stamp takes the year, and each other file's first stamp follows on
        // from it (within half a year), as its own later lines do; else a log rotated over
        // New Year would put its two files a year apart.
        let mut follow_from: Option<(PathBuf, Timestamp)> = None;
        let mut stdin_given = false;
        let mut text_files = std::collections::HashSet::new();
        for p in &self.inputs {
            // Standard input is one stream: a second reader of it would take lines (or a
            // capture's packets) from under the first, tearing lines in two. Named again, it
            // is read once, as a capture file given twice is.
            if p == Path::new("-") {
                if stdin_given {
                    eprintln!(
                        "warning: -: standard input was given before: read once (a second reader would tear its lines, or its capture, in two)"
                    );
                    continue;
                }
                stdin_given = true;
            }
            // (As `flows` says it: an empty file passes for a quiet log otherwise.)
            if std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() == 0) {
                eprintln!(
                    "warning: {}: the file is empty (0 bytes): nothing in it",
                    p.display()
                );
            }
            match input_kind(p).with_context(|| format!("cannot read {}", p.display()))? {
                InputKind::Capture => captures.push(p.clone()),
                InputKind::NotCapture => bail!(
                    "{} is named as a capture but does not start as one (no pcap or pcapng magic number): it is damaged, or not a capture (a text log: rename it)",
                    p.display()
                ),
                InputKind::Text => {
                    // A text file given twice (also under another name: a link, `./x` and
                    // `x`; by device and inode), read once, as a capture file is: its JSON
                    // events would count twice (only syslog lines are dropped as duplicates).
                    if let Ok(m) = std::fs::metadata(p)
                        && m.is_file()
                        && !text_files.insert((m.dev(), m.ino()))
                    {
                        eprintln!(
                            "warning: {}: the same file was given before: read once (each line would count twice)",
                            p.display()
                        );
                        continue;
                    }
                    if self.year.is_some() && follow_from.is_none() && p != Path::new("-") {
                        follow_from = first_yearless_stamp(p, parser).map(|t| (p.clone(), t));
                    }
                    let follow = follow_from
                        .as_ref()
                        .filter(|(first, _)| first != p)
                        .map(|&(_, t)| t);
                    sources.push(text_file_source(p, parser, follow, dedup.clone())?);
                }
                // Read as text it is all "not syslog" and no alert: refused, with the way round.
                InputKind::Compressed(kind) => {
                    let tool = match kind {
                        "gzip" => "zcat",
                        "bzip2" => "bzcat",
                        "xz" => "xzcat",
                        _ => "zstdcat",
                    };
                    bail!(
                        "{} is {kind}-compressed: decompress it first, or pipe it in as `-` (`{tool} {} | cepheus ... -`)",
                        p.display(),
                        p.display()
                    );
                }
            }
        }
        if !captures.is_empty() {
            sources.push(captures_source(&captures, parser, dedup.clone())?);
        }
        Ok(Merger::new(sources, Some(dedup)))
    }
}

/// What a replay counted.
#[derive(Debug, Default)]
pub struct Summary {
    /// Events read (syslog messages and flow events).
    pub events: u64,
    /// Lines or datagrams that were not syslog.
    pub malformed: u64,
    /// Exact duplicates dropped.
    pub duplicates: u64,
    /// Late events (event-time rules).
    pub late: u64,
    /// Alert changes printed.
    pub alerts: u64,
    /// The last event's time, when the end asked for (an absolute `--until`, a test's
    /// `until`) was before it: the clock stopped there instead (the caller says so, in its
    /// own words and place).
    pub until_before_last: Option<Timestamp>,
}

/// Runs `cepheus replay`.
pub fn run(args: ReplayArgs) -> ExitCode {
    match replay(&args) {
        Ok(code) => code,
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Whether writing failed because the reader went away (`| head`): not an error of ours.
pub fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        let kind = c
            .downcast_ref::<io::Error>()
            .map(io::Error::kind)
            .or_else(|| c.downcast_ref::<serde_json::Error>()?.io_error_kind());
        kind == Some(io::ErrorKind::BrokenPipe)
    })
}

/// Loads rules, printing diagnostics; `None` (after printing) when they have errors.
pub fn load_rules(paths: &[PathBuf]) -> anyhow::Result<Option<RuleSet>> {
    Ok(compile_rules(paths)?.rules)
}

/// Compiles rules, printing diagnostics (their `rules` is `None` when they have errors).
pub fn compile_rules(paths: &[PathBuf]) -> anyhow::Result<cepheus_core::rules::Compiled> {
    compile_rules_showing(paths, usize::MAX)
}

/// Diagnostics the agent writes to its log per compile of the rules, at most: a rule file
/// with thousands of errors must not flood the journal (`cepheus rules check` lists all).
pub const AGENT_DIAGNOSTICS_SHOWN: usize = 50;

/// [`compile_rules`], writing at most `shown` diagnostics to stderr (then how many more).
pub fn compile_rules_showing(
    paths: &[PathBuf],
    shown: usize,
) -> anyhow::Result<cepheus_core::rules::Compiled> {
    let default = [PathBuf::from("rules")];
    let compiled = if paths.is_empty() && !default[0].exists() {
        // As `cepheus run`: with no `rules/` here, the rules built into the binary.
        eprintln!(
            "note: no rules/ folder here: using the built-in rules (--rules PATH chooses others)"
        );
        crate::run::builtin::compile_builtin()
    } else {
        let paths = if paths.is_empty() {
            &default[..]
        } else {
            paths
        };
        rulefiles::load(paths)?.compiled
    };
    show_diagnostics(&compiled.diagnostics, shown);
    Ok(compiled)
}

/// Writes at most `shown` of `diagnostics` to stderr, rendered, then how many were left out.
pub fn show_diagnostics(diagnostics: &[cepheus_core::rules::Diagnostic], shown: usize) {
    let color = io::stderr().is_terminal();
    for d in diagnostics.iter().take(shown) {
        eprint!("{}", crate::rules_cmd::render(d, color));
    }
    if let Some(more) = diagnostics.len().checked_sub(shown).filter(|&n| n > 0) {
        eprintln!(
            "... and {more} more diagnostic(s) not shown here: `cepheus rules check` lists them all"
        );
    }
}

fn replay(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    let Some(rules) = load_rules(&args.rules)? else {
        eprintln!("error: the rules have errors; nothing was replayed");
        return Ok(ExitCode::from(1));
    };
    let until = (args.until.as_deref().map(parse_until).transpose()).context("--until")?;
    let cfg = EngineConfig {
        share: !args.no_share,
        recorded: true,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(&rules, cfg).context("building the engine")?;
    let merger = args.input.open()?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut summary = Summary::default();
    let started = Instant::now();
    let progress = progress_bar();
    drive(
        &mut engine,
        merger,
        until,
        &mut summary,
        progress.as_ref(),
        &mut |a| {
            serde_json::to_writer(&mut out, &a.to_json()).context("writing alerts")?;
            out.write_all(b"\n").context("writing alerts")
        },
    )?;
    out.flush().context("writing alerts")?;
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    if let (Some(last), Some(Until::At(t))) = (summary.until_before_last, until) {
        eprintln!(
            "warning: --until {} is before the last event ({}): the clock stops at the last event",
            t.to_rfc3339(),
            last.to_rfc3339()
        );
    }
    let wall = started.elapsed().as_secs_f64();
    let rate = if wall > 0.0 {
        summary.events as f64 / wall
    } else {
        0.0
    };
    let duplicates = match summary.duplicates {
        0 => String::new(),
        1 => ", 1 duplicate dropped".to_string(),
        n => format!(", {n} duplicates dropped"),
    };
    // Matches dropped for want of a group field (`group_by = ["user"]`, a line without the
    // capture): said only when there are some, so a rule that silently sees nothing shows.
    let keyless = match engine.counters().keyless {
        0 => String::new(),
        1 => ", 1 match without its group_by field".to_string(),
        n => format!(", {n} matches without their group_by field"),
    };
    // Budgets that bit (a rule blind to a key, a partial match lost), matches a trigger held
    // back and events stamped ahead of their arrival are said when there are some.
    // Per rule, as `--no-share` counts them: a state several rules share counts for each.
    let (refused, dropped, suppressed) =
        engine.budget_counters().fold((0, 0, 0), |(r, d, s), v| {
            let n = v.rules.len() as u64;
            (
                r + n * v.counters.groups_rejected,
                d + n * v.counters.partial_evicted,
                s + n * v.counters.suppressed,
            )
        });
    let mut budgets = String::new();
    if refused > 0 {
        budgets += &format!(", {refused} new groups refused (max_groups)");
    }
    if dropped > 0 {
        budgets += &format!(", {dropped} partial matches dropped (max_partial_matches)");
    }
    if suppressed > 0 {
        budgets += &format!(", {suppressed} suppressed by a trigger period");
    }
    match engine.counters().future {
        0 => {}
        1 => budgets += ", 1 event stamped ahead of its arrival",
        n => budgets += &format!(", {n} events stamped ahead of their arrival"),
    }
    eprintln!(
        "replay: {} events, {} malformed{duplicates}, {} late{keyless}{budgets}, {} alerts in {:.3}s ({:.0} events/s, {} predicate evaluations)",
        summary.events,
        summary.malformed,
        summary.late,
        summary.alerts,
        wall,
        rate,
        engine.counters().predicate_evals
    );
    warn_if_nothing_read(summary.events, summary.malformed);
    Ok(ExitCode::SUCCESS)
}

/// Says so when no line of the inputs was an event but some were refused: the wrong file
/// (a CSV, a JSON document, a licence) reads as nothing, which is no success to report quietly.
pub fn warn_if_nothing_read(events: u64, malformed: u64) {
    if events == 0 && malformed > 0 {
        eprintln!(
            "warning: nothing read became an event ({malformed} lines or captured messages were refused as malformed; a JSON event's bad field is said above): are these the right inputs (syslog, JSON-lines events one object per line, or captures)?"
        );
    }
}

/// How far ahead of a replay's clock a line's stamp may jump before it is read as a wrong
/// clock, when the next line goes back (see [`drive`]).
const OUTLIER_JUMP: cepheus_core::time::Duration = cepheus_core::time::Duration::from_secs(3600);

/// Whether the input goes back before `bound` after the line being judged: the next event
/// (read into `ahead`, from `items`) is below it. The lines refused or dropped as duplicates
/// on the way are counted in `summary` as they are passed (not held: any number of them).
/// Only the next event: a real gap followed a few lines later by one old message (a buffered
/// one) is a gap (found by a review: looking further took a return for a wrong clock).
fn goes_back(
    ahead: &mut std::collections::VecDeque<Result<Event, Dropped>>,
    items: &mut dyn Iterator<Item = Result<Event, Dropped>>,
    bound: Timestamp,
    summary: &mut Summary,
) -> bool {
    loop {
        let item = match ahead.pop_front() {
            Some(item) => item,
            None => match items.next() {
                Some(item) => item,
                None => return false,
            },
        };
        match item {
            Ok(next) => {
                let back = next.arrival < bound;
                ahead.push_front(Ok(next));
                return back;
            }
            Err(Dropped::Malformed) => summary.malformed += 1,
            Err(Dropped::Duplicate) => summary.duplicates += 1,
        }
    }
}

/// Feeds a merged input through the engine, then ends it (`until`), handing every alert to
/// `sink` as soon as it is made.
pub fn drive(
    engine: &mut Engine,
    mut merger: Merger,
    until: Option<Until>,
    summary: &mut Summary,
    progress: Option<&indicatif::ProgressBar>,
    sink: &mut dyn FnMut(Alert) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut alerts: Vec<Alert> = Vec::new();
    let mut last_time: Option<Timestamp> = None;
    let mut items = merger.by_ref();
    // Items read ahead of the one being handled (see the wrong clock below).
    let mut ahead: std::collections::VecDeque<Result<Event, Dropped>> =
        std::collections::VecDeque::new();
    while let Some(item) = ahead.pop_front().or_else(|| items.next()) {
        match item {
            Ok(mut ev) => {
                // A line stamped far ahead of the input's clock, after which the input goes
                // on from where it was (a device whose clock is wrong), arrived with the lines
                // around it, as the live agent would see it: stamped ahead of its arrival, it
                // cannot drag the clock forward (found by an audit: one line of 2036 among
                // 2026's fired every absence). Only for an arrival read from the stamp itself.
                // "Goes on" is the next event, past any lines refused or dropped as
                // duplicates (found by an audit: a `-- MARK --` line after it, or the line
                // relayed twice, fired every absence).
                if let Some(clock) = last_time
                    && ev.arrival == ev.time
                    && ev.arrival > clock.add(OUTLIER_JUMP)
                    && goes_back(&mut ahead, &mut items, clock.add(OUTLIER_JUMP), summary)
                {
                    ev.arrival = clock;
                }
                summary.events += 1;
                last_time = Some(last_time.map_or(ev.arrival, |t| t.max(ev.arrival)));
                engine.push(ev, &mut alerts);
            }
            Err(Dropped::Malformed) => summary.malformed += 1,
            Err(Dropped::Duplicate) => summary.duplicates += 1,
        }
        for a in alerts.drain(..) {
            summary.alerts += 1;
            sink(a)?;
        }
        if let Some(pb) = progress
            && summary.events.is_multiple_of(4096)
        {
            pb.set_position(summary.events);
        }
    }
    let (malformed, duplicates) = merger.dropped();
    summary.malformed += malformed;
    summary.duplicates += duplicates;
    let until = match until {
        Some(Until::At(t)) => {
            summary.until_before_last = last_time.filter(|last| t < *last);
            Some(t)
        }
        Some(Until::After(d)) => last_time.map(|t| t.add(d)),
        None => None,
    };
    engine.finish(until, &mut alerts);
    for a in alerts.drain(..) {
        summary.alerts += 1;
        sink(a)?;
    }
    summary.late = engine.counters().late;
    Ok(())
}

fn progress_bar() -> Option<indicatif::ProgressBar> {
    if !io::stderr().is_terminal() || !io::stdout().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new_spinner();
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} {pos} events ({per_sec}) {elapsed}")
    {
        pb.set_style(style);
    }
    Some(pb)
}

/// `--until`: an instant, or a duration past the last event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// An RFC 3339 instant.
    At(Timestamp),
    /// `+DURATION`.
    After(Duration),
}

/// Parses `--until` (and a rule test's `until`); the error says what was given and what is
/// expected, the caller names where it was written.
pub fn parse_until(s: &str) -> anyhow::Result<Until> {
    if let Some(d) = s.strip_prefix('+') {
        return Duration::parse(d)
            .map(Until::After)
            .map_err(|e| anyhow::anyhow!("`{s}`: {e}"));
    }
    match Timestamp::parse_rfc3339(s) {
        Some(t) => Ok(Until::At(t)),
        // A valid stamp out of the engine's range (64-bit nanoseconds) is said as such.
        None if chrono::DateTime::parse_from_rfc3339(s).is_ok() => bail!(
            "`{s}`: times run from the year 1678 to 2261 (64-bit nanoseconds); use one in that range"
        ),
        // A wall clock without its zone: which instant it is depends on the zone, said.
        None if ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
            .iter()
            .any(|f| chrono::NaiveDateTime::parse_from_str(s, f).is_ok()) =>
        {
            bail!(
                "`{s}` has no zone: add `Z` for UTC (`{}Z`) or the offset, such as `+01:00`",
                s.replacen(' ', "T", 1)
            )
        }
        None => bail!(
            "`{s}`: expected an RFC 3339 time such as 2026-11-30T12:00:00Z, or +DURATION such as +10m"
        ),
    }
}

/// An input item that is not an event, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// Not syslog (or not a JSON event), or too long.
    Malformed,
    /// An exact duplicate within the dedup window.
    Duplicate,
}

/// One input, as a stream of events (or markers of what was dropped), each syslog message
/// with its key in the run's duplicate filter: the [`Merger`] decides, in merged order.
pub type Source = Box<dyn Iterator<Item = Result<(Event, Option<u64>), Dropped>>>;

/// Messages a duplicate filter remembers (as the live agent's default `dedup_capacity`).
const DEDUP_CAPACITY: usize = 65_536;

/// How long a syslog message is remembered to drop its exact repeats, unless told otherwise
/// (`--dedup-window`, a rule test's `dedup_window`): the live agent's default
/// `[syslog] dedup_window`.
pub const DEFAULT_DEDUP_WINDOW: &str = "2s";

/// A replay's duplicate filter: exact repeats of a syslog message within `window` (zero: the
/// filter is off), as many remembered as the live agent's default `dedup_capacity`.
pub fn dedup_filter(window: Duration) -> SharedDedup {
    SharedDedup::new(Dedup::new(window, DEDUP_CAPACITY).into())
}

/// What an input holds, told by its first bytes.
#[derive(Debug, PartialEq, Eq)]
enum InputKind {
    /// Syslog or JSON-lines text.
    Text,
    /// A pcap or pcapng capture.
    Capture,
    /// A compressed file (a rotated log), by its format's name.
    Compressed(&'static str),
    /// A file named as a capture (`.pcap`, `.pcapng`, `.cap`) that does not start as one.
    NotCapture,
}

/// What an input is, by its magic number. Standard input is peeked at in its own buffer, so
/// what is read is still there for whichever reader follows (a capture written at once by
/// `tcpdump -w -` is told; a first chunk too short to tell is text).
fn input_kind(path: &Path) -> io::Result<InputKind> {
    let mut magic = [0u8; 6];
    let n = if path == Path::new("-") {
        let mut stdin = io::stdin().lock();
        let head = stdin.fill_buf()?;
        let n = head.len().min(magic.len());
        magic[..n].copy_from_slice(&head[..n]);
        n
    } else {
        // (A pipe or FIFO is peeked in the buffer its reader takes over.)
        crate::ingest::input::peek_input(path, &mut magic)?
    };
    let m = &magic[..n];
    let capture = m.len() >= 4
        && matches!(
            u32::from_le_bytes([m[0], m[1], m[2], m[3]]),
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 | 0x0a0d_0d0a
        );
    Ok(if capture {
        InputKind::Capture
    } else if m.starts_with(&[0x1f, 0x8b]) {
        InputKind::Compressed("gzip")
    } else if m.starts_with(b"BZh") {
        InputKind::Compressed("bzip2")
    } else if m.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        InputKind::Compressed("xz")
    } else if m.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        InputKind::Compressed("zstd")
    } else if n > 0
        && path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ["pcap", "pcapng", "cap"].contains(&e.to_ascii_lowercase().as_str()))
    {
        // Named as a capture, not one: read as text it would be all "not syslog", no alert
        // and a success.
        InputKind::NotCapture
    } else {
        InputKind::Text
    })
}

/// The captures' flow items; at their end, what was not read whole is said on stderr (a
/// capture cut short, frames cut or malformed), so partial results do not pass for complete
/// ones.
struct Reported {
    reader: MultiFlowReader,
    told: bool,
}

impl Iterator for Reported {
    type Item = FlowItem;

    fn next(&mut self) -> Option<FlowItem> {
        let item = self.reader.next();
        if item.is_none() && !self.told {
            self.told = true;
            let c = self.reader.counters();
            for w in self.reader.file_warnings() {
                eprintln!("{w}");
            }
            for w in c.read_warnings() {
                eprintln!("warning: {w}");
            }
        }
        item
    }
}

/// A text input of a replay (a file of syslog or JSON lines, `-` for stdin); exact
/// duplicate lines within `dedup` are dropped.
fn text_file_source(
    path: &Path,
    parser: SyslogParser,
    follow_from: Option<Timestamp>,
    dedup: SharedDedup,
) -> anyhow::Result<Source> {
    // Year-less RFC 3164 stamps are resolved as a syslog daemon reading them now would
    // (`--year` fixes the year instead, for replays that must not depend on the day), or
    // follow on from the first file's first stamp.
    let inputs: Inputs = open_inputs(
        &[path.to_path_buf()],
        parser,
        crate::flow::live::wall_clock(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?
    .with_dedup_keys(dedup);
    let inputs = match follow_from {
        Some(t) => inputs.follow_on_from(t),
        None => inputs,
    };
    Ok(lines_source(
        inputs,
        Box::new(|why| eprintln!("warning: {why}")),
    ))
}

/// Capture files as one replay source: one flow table for all of them, in time order (see
/// [`MultiFlowReader`]); the syslog datagrams in them are parsed, each with its key in
/// `seen` (the [`Merger`] drops exact duplicates).
pub fn captures_source(
    paths: &[PathBuf],
    parser: SyslogParser,
    seen: SharedDedup,
) -> anyhow::Result<Source> {
    let reader = MultiFlowReader::open(paths, FlowConfig::default())
        .map_err(|(p, e)| anyhow::anyhow!("{}", e.about(&p)))?;
    let reader = Reported {
        reader,
        told: false,
    };
    // Each sender's last message, for its syslogd's repeat notices.
    let mut last = crate::ingest::syslog::LastMessages::default();
    Ok(Box::new(reader.map(move |item| match item {
        FlowItem::Flow(ev) => Ok((ev, None)),
        FlowItem::Syslog(d) => match parser.parse(&d.payload, d.time, Some(d.src)) {
            Ok(mut ev) => {
                // The capture's clock is the arrival; the message keeps its own stamp.
                ev.arrival = d.time;
                let key = seen.borrow().key(&d.payload, Some(d.src));
                let bytes = crate::ingest::syslog::trim_bytes(&d.payload);
                let ev = last.take(ev, bytes, Some(d.src), |b| {
                    parser.parse(b, d.time, Some(d.src)).ok()
                });
                Ok((ev, Some(key)))
            }
            Err(_) => Err(Dropped::Malformed),
        },
    })))
}

/// Text given in memory (a rule test's input) as a replay source, each syslog line with its
/// key in `dedup` (as a file's: the [`Merger`] given that filter drops exact repeats, JSON
/// events never); its lines are numbered from `first_line` in what it says of them, and
/// `tell` hears why the first refused ones were.
pub fn text_source(
    name: &str,
    text: String,
    parser: SyslogParser,
    first_line: u64,
    dedup: SharedDedup,
    tell: Box<dyn FnMut(String) + Send>,
) -> Source {
    let reader: Box<dyn io::BufRead + Send> = Box::new(io::Cursor::new(text.into_bytes()));
    lines_source(
        Inputs::from_readers(vec![(name.to_string(), reader)], parser, Timestamp(0))
            .first_line(first_line)
            .with_dedup_keys(dedup),
        tell,
    )
}

/// Syslog or JSON-lines text as events: the recorded stamp is the arrival.
fn lines_source(inputs: Inputs, mut tell: Box<dyn FnMut(String) + Send>) -> Source {
    // A refused line is said with its reason (which JSON field, what it should be; why it is
    // not syslog) and place: the first few told (on stderr in replay), the rest only counted.
    let mut told = 0u32;
    Box::new(inputs.map(move |item| match item {
        Ok(item) => match item.event {
            // Recorded logs: a syslog line's own stamp is its arrival (set by the reader); a
            // JSON event keeps the arrival it states, even one before its stamp (a sender
            // whose clock runs ahead, which must not drag time forward).
            Ok(ev) => Ok((ev, item.dedup_key)),
            Err(e) => {
                if told < MALFORMED_TOLD {
                    told += 1;
                    tell(format!("{}:{}: {e}", item.source_name, item.line_no));
                    if told == MALFORMED_TOLD {
                        tell("further refused lines are only counted".into());
                    }
                }
                Err(Dropped::Malformed)
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "input read error");
            Err(Dropped::Malformed)
        }
    }))
}

/// How many refused JSON events a replay names before it only counts them.
const MALFORMED_TOLD: u32 = 5;

/// Merges sources by arrival stamp (each source is read in its own order), and drops exact
/// duplicates in that merged order (a line relayed into two files is kept where it first
/// falls, whichever file was read ahead).
pub struct Merger {
    sources: Vec<Source>,
    heads: Vec<Option<(Event, Option<u64>)>>,
    /// The run's duplicate filter (the sources give each message's key in it).
    dedup: Option<SharedDedup>,
    /// Dropped items of the sources read ahead while merging.
    malformed: u64,
    duplicates: u64,
}

impl Merger {
    /// A merger over opened sources, deciding duplicates with `dedup` (the filter whose keys
    /// the sources give).
    pub fn new(sources: Vec<Source>, dedup: Option<SharedDedup>) -> Merger {
        let heads = sources.iter().map(|_| None).collect();
        Merger {
            sources,
            heads,
            dedup,
            malformed: 0,
            duplicates: 0,
        }
    }

    /// What the sources dropped while read ahead for merging: (malformed, duplicates).
    pub fn dropped(&self) -> (u64, u64) {
        (self.malformed, self.duplicates)
    }

    fn fill(&mut self, i: usize) {
        while self.heads[i].is_none() {
            match self.sources[i].next() {
                Some(Ok(item)) => self.heads[i] = Some(item),
                Some(Err(Dropped::Malformed)) => self.malformed += 1,
                Some(Err(Dropped::Duplicate)) => self.duplicates += 1,
                None => return,
            }
        }
    }
}

impl Iterator for Merger {
    type Item = Result<Event, Dropped>;

    fn next(&mut self) -> Option<Self::Item> {
        // A single source's drops come through as they are read (with their place in its
        // order); merged sources' are counted in `dropped`.
        let (ev, key) = if self.sources.len() == 1 {
            match self.sources[0].next()? {
                Ok(item) => item,
                Err(d) => return Some(Err(d)),
            }
        } else {
            for i in 0..self.sources.len() {
                self.fill(i);
            }
            let best = self
                .heads
                .iter()
                .enumerate()
                .filter_map(|(i, h)| h.as_ref().map(|(e, _)| (e.arrival, i)))
                .min()?;
            self.heads[best.1].take()?
        };
        if let (Some(k), Some(d)) = (key, &self.dedup)
            && d.borrow_mut().seen_key(k, ev.arrival)
        {
            return Some(Err(Dropped::Duplicate));
        }
        Some(Ok(ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_forms() {
        assert_eq!(
            parse_until("+10m").ok(),
            Some(Until::After(Duration::from_secs(600)))
        );
        assert_eq!(
            parse_until("2026-11-30T12:00:00Z").ok(),
            Timestamp::parse_rfc3339("2026-11-30T12:00:00Z").map(Until::At)
        );
        assert!(parse_until("tomorrow").is_err());
        for s in ["2024-12-10T09:00:00", "2024-12-10 09:00:00.5"] {
            let Err(e) = parse_until(s) else {
                panic!("{s} has no zone")
            };
            assert!(e.to_string().contains("has no zone: add `Z`"), "{e}");
        }
        let Err(e) = parse_until("2300-01-01T00:00:00Z") else {
            panic!("2300 parsed");
        };
        assert!(e.to_string().contains("from the year 1678 to 2261"), "{e}");
    }
}
