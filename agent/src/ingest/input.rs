//! Replay inputs: files (or `-` for stdin) read line by line, lazily, into events.
//!
//! One message per line. A line whose first non-blank byte is `{` is a JSON event
//! ([`parse_json_event`]); any other line is syslog ([`SyslogParser`]). Blank lines are
//! skipped. Lines are read through a fixed cap ([`MAX_LINE`] by default; a JSON event line
//! [`JSON_LINE_FACTOR`] times that, since `cepheus events` writes a message of that size
//! escaped, up to six times longer): a longer line is discarded as it streams past (never
//! held in memory) and reported as [`Malformed::Oversized`]. Files are opened up front (a missing file fails before any event
//! flows) and read one after the other.
//!
//! Replay has no recorded arrival for a syslog line, so a syslog event's arrival is its own
//! time, and a line without a stamp takes the time of the event before it, so a replay gives
//! the same events every time. Lines without a stamp before the input's first stamped event
//! wait for it (at most [`MAX_HELD`] lines and [`MAX_HELD_BYTES`]) and take its time; only an
//! input with no stamp at all (or more such lines first) falls back to a fixed instant,
//! [`no_stamp_time`]. Year-less RFC 3164 stamps resolve their year
//! ([`Year::Resolve`](super::syslog::Year)) against the `reference` instant (today), then
//! against the previous such stamp; pass `Year::Fixed` (`replay --year`) for runs that must
//! not depend on the day they run.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use cepheus_core::event::Event;
use cepheus_core::time::{Duration, Timestamp};

use super::Malformed;
use super::dedup::SharedDedup;
use super::jsonl::parse_json_event;
use super::syslog::{LastMessages, Stamp, SyslogParser, Year, trim_bytes};

/// The default cap on one line, in bytes (a syslog message larger than this is abuse).
pub const MAX_LINE: usize = 64 * 1024;

/// How many times the line cap a JSON event line may take: a syslog message at the cap,
/// written by `cepheus events` with its control bytes escaped (`\u0001`, six bytes for one)
/// and its fields named, still reads back (found by an audit: `events X | replay -` lost what
/// `replay X` kept).
pub const JSON_LINE_FACTOR: usize = 8;

/// Most lines held while they wait for the input's first stamp.
pub const MAX_HELD: usize = 10_000;

/// Most bytes of lines held while they wait for the input's first stamp.
pub const MAX_HELD_BYTES: usize = 4 << 20;

/// One input line's outcome, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct InputItem {
    /// The event, or why the line is malformed.
    pub event: Result<Event, Malformed>,
    /// The path as given (`-` for stdin).
    pub source_name: String,
    /// 1-based line number within that source.
    pub line_no: u64,
    /// The line's duplicate key, for the reader that decides in merged order
    /// ([`Inputs::with_dedup_keys`]); `None` for JSON events and refused lines.
    pub dedup_key: Option<u64>,
}

/// Counts of what the reader has seen so far (for replay's summary and metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Non-blank lines read.
    pub read: u64,
    /// Lines that did not become events (oversized ones included).
    pub malformed: u64,
    /// Lines longer than the cap.
    pub oversized: u64,
}

/// An input could not be opened or read (replay stops: this is not a bad line).
#[derive(Debug, thiserror::Error)]
#[error("{name}: {error}")]
pub struct InputError {
    /// The path as given.
    pub name: String,
    /// The I/O error.
    #[source]
    pub error: io::Error,
}

/// The time of events when no line of the input carries a stamp: fixed, so such a replay
/// gives the same alerts every time: 1 January of `--year` (UTC), else the Unix epoch.
pub fn no_stamp_time(parser: SyslogParser) -> Timestamp {
    let y = match parser.year() {
        Year::Fixed(y) => y,
        Year::Resolve | Year::Follow => 1970,
    };
    chrono::NaiveDate::from_ymd_opt(y, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .and_then(|t| t.and_utc().timestamp_nanos_opt())
        .map_or(Timestamp(0), Timestamp)
}

/// A streaming reader over several inputs; an [`Iterator`] of [`InputItem`]s.
pub struct Inputs {
    sources: std::vec::IntoIter<(String, Box<dyn BufRead + Send>)>,
    current: Option<(String, Box<dyn BufRead + Send>, u64)>,
    /// The number of each input's first line (1, or where a rule test's input begins).
    first_line: u64,
    parser: SyslogParser,
    /// The time of the last event: lines without a stamp take it.
    last_time: Timestamp,
    /// What year-less RFC 3164 stamps resolve their year against until the first of them: the
    /// reference (the first may lie before it: a November file replayed in January).
    reference: Timestamp,
    /// Then the latest such stamp (so a file crossing New Year follows on, and neither a line
    /// with a year of its own nor one that resolved into an earlier year, a device's wrong
    /// clock or a 29 February that had to go back to the last leap year, moves it back).
    latest_stamp: Option<Timestamp>,
    /// The latest stamp with a year of its own (RFC 5424, ISO 8601) read before the first
    /// year-less one: without `--year`, a first year-less stamp within a day of it follows on
    /// from it, as a daemon receiving the lines then would, not from today (found by an audit:
    /// a 2024 log's one RFC 3164 line was read as 2026 and moved the replay's end two years
    /// on).
    full_stamp: Option<Timestamp>,
    /// The first year-less stamp too follows on from the reference (a later file of a replay
    /// with `--year`, see [`Inputs::follow_on_from`]) instead of taking the parser's year.
    first_follows: bool,
    max_line: usize,
    counters: Counters,
    dedup: Option<SharedDedup>,
    buf: Vec<u8>,
    /// A stamped event was read (or holding was given up): lines without a stamp take the
    /// previous event's time from now on.
    stamped: bool,
    /// Lines read before the first stamp, with their bytes (for the dedup), waiting for it.
    held: VecDeque<(InputItem, Vec<u8>)>,
    /// The bytes of the held lines.
    held_bytes: usize,
    /// Items ready to be returned, in input order.
    ready: VecDeque<InputItem>,
    /// Each host's last message, for its syslogd's repeat notices.
    last: LastMessages,
}

/// Inputs that can be read only once (a pipe, a FIFO, `<(zcat old.log.gz)`): opened at their
/// first look ([`peek_input`]) and kept, buffered, for the one reader that reads them
/// ([`open_input`]). Opened again, one would have lost what the look read, or wait for
/// ever for a writer that is gone.
static STREAMS: std::sync::Mutex<Vec<(PathBuf, BufReader<File>)>> =
    std::sync::Mutex::new(Vec::new());

/// Whether `path` names an input that can be read only once: not `-` (standard input has its
/// own buffer) and not a regular file.
pub fn is_stream(path: &Path) -> bool {
    path != Path::new("-") && std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

/// The first bytes of the input at `path` (at most `buf.len()`, fewer when its first read
/// gives fewer), read without taking them from the reader that follows: a regular file is
/// read from its start, a stream ([`is_stream`]) in the buffer kept for its reader.
pub fn peek_input(path: &Path, buf: &mut [u8]) -> io::Result<usize> {
    use std::io::Read as _;
    if !is_stream(path) {
        let mut f = File::open(path)?;
        let mut n = 0;
        while n < buf.len() {
            match f.read(&mut buf[n..])? {
                0 => break,
                k => n += k,
            }
        }
        return Ok(n);
    }
    let mut streams = STREAMS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let at = match streams.iter().position(|(p, _)| p == path) {
        Some(i) => i,
        None => {
            streams.push((path.to_path_buf(), BufReader::new(File::open(path)?)));
            streams.len() - 1
        }
    };
    let head = streams[at].1.fill_buf()?;
    let n = head.len().min(buf.len());
    buf[..n].copy_from_slice(&head[..n]);
    Ok(n)
}

/// The input at `path` opened for the one reader that reads it: a stream's kept reader
/// (what [`peek_input`] looked at still in it), else the file.
pub fn open_input(path: &Path) -> io::Result<Box<dyn BufRead + Send>> {
    let kept = {
        let mut streams = STREAMS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        streams
            .iter()
            .position(|(p, _)| p == path)
            .map(|i| streams.swap_remove(i).1)
    };
    Ok(match kept {
        Some(r) => Box::new(r),
        None => Box::new(BufReader::new(File::open(path)?)),
    })
}

/// The time of the first year-less RFC 3164 stamp among the first lines of the file at
/// `path`, as `parser` reads it (`None`: none there, the file cannot be read, or it is a
/// stream, read once by its own reader): what the other files of a replay with `--year`
/// follow on from.
pub fn first_yearless_stamp(path: &Path, parser: SyslogParser) -> Option<Timestamp> {
    /// How far into the file to look.
    const LINES: usize = 1000;
    if is_stream(path) {
        return None;
    }
    let file = File::open(path).ok()?;
    BufReader::new(file)
        .split(b'\n')
        .take(LINES)
        .map_while(Result::ok)
        .filter(|line| !is_json_line(line))
        .find_map(
            |line| match parser.parse_stamped(&line, Timestamp(0), None) {
                Ok((e, Stamp::YearLess { .. })) => Some(e.time),
                _ => None,
            },
        )
}

/// Opens `paths` (`-` is stdin) for a replay with `parser`, `reference` as the instant before
/// the first event (see the module docs), and the default line cap.
pub fn open_inputs(
    paths: &[PathBuf],
    parser: SyslogParser,
    reference: Timestamp,
) -> Result<Inputs, InputError> {
    let mut sources: Vec<(String, Box<dyn BufRead + Send>)> = Vec::with_capacity(paths.len());
    for path in paths {
        let name = path.display().to_string();
        if path == Path::new("-") {
            sources.push((name, Box::new(BufReader::new(io::stdin()))));
        } else {
            let reader = open_input(path).map_err(|error| InputError {
                name: name.clone(),
                error,
            })?;
            sources.push((name, reader));
        }
    }
    Ok(Inputs::from_readers(sources, parser, reference))
}

impl Inputs {
    /// A reader over already-open sources (named for diagnostics); used by tests and stdin.
    pub fn from_readers(
        sources: Vec<(String, Box<dyn BufRead + Send>)>,
        parser: SyslogParser,
        reference: Timestamp,
    ) -> Self {
        Inputs {
            sources: sources.into_iter(),
            current: None,
            parser,
            last_time: no_stamp_time(parser),
            reference,
            latest_stamp: None,
            full_stamp: None,
            first_follows: false,
            max_line: MAX_LINE,
            counters: Counters::default(),
            buf: Vec::new(),
            dedup: None,
            stamped: false,
            held: VecDeque::new(),
            held_bytes: 0,
            ready: VecDeque::new(),
            last: LastMessages::default(),
            first_line: 1,
        }
    }

    /// Numbers the lines of every input from `n` (a rule test's input, which starts at
    /// that line of its test file), so what is refused is said at the line to edit.
    pub fn first_line(mut self, n: u64) -> Self {
        self.first_line = n.max(1);
        self
    }

    /// Gives each syslog line its key in `dedup` ([`InputItem::dedup_key`]): the reader
    /// merging the inputs by time decides with
    /// [`Dedup::seen_key`](super::dedup::Dedup::seen_key), in the merged order, so a line repeated in another file (the same message relayed
    /// twice) is dropped where it falls, whichever file was read ahead.
    pub fn with_dedup_keys(mut self, dedup: SharedDedup) -> Self {
        self.dedup = Some(dedup);
        self
    }

    /// Resolves the first year-less stamp too as following on from `t` (within half a year
    /// either way), as the lines after it do: a rotated file of a replay with `--year` takes
    /// its year from the first file's first stamp, so a log rotated over New Year is one log.
    pub fn follow_on_from(mut self, t: Timestamp) -> Self {
        self.reference = t;
        self.first_follows = true;
        self
    }

    /// Sets the cap on one line in bytes (at least 1).
    pub fn with_max_line(mut self, max_line: usize) -> Self {
        self.max_line = max_line.max(1);
        self
    }

    /// What has been read so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Parses one non-blank line into an event, and whether it carried its own time.
    fn parse_line(&mut self, line: &[u8]) -> Result<(Event, bool), Malformed> {
        // A byte-order mark (a file saved by a Windows editor) is no part of the line.
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if is_json_line(line) {
            let text = String::from_utf8_lossy(line);
            return parse_json_event(&text).map(|e| (e, true));
        }
        // The first year-less stamp takes `--year` or resolves against the reference; the
        // ones after it follow on from the latest (over New Year, over gaps of months).
        let (parser, year_ref) = match self.latest_stamp {
            Some(t) => (self.parser.with_year(Year::Follow), t),
            None if self.first_follows => (self.parser.with_year(Year::Follow), self.reference),
            None => (self.parser, self.reference),
        };
        let (mut event, mut stamp) = parser.parse_stamped(line, year_ref, None)?;
        // The first year-less stamp, without `--year`, right after a line with a year of its
        // own: it goes on from that line, as a daemon receiving them then would have read it.
        // (Not far from it: a device whose clock is stuck years back writes such lines too.)
        if self.latest_stamp.is_none()
            && !self.first_follows
            && self.parser.year() == Year::Resolve
            && matches!(stamp, Stamp::YearLess { .. })
            && let Some(t) = self.full_stamp
            && let Ok((near, s)) = self
                .parser
                .with_year(Year::Follow)
                .parse_stamped(line, t, None)
            && near.time.0.abs_diff(t.0) <= Duration::from_secs(86_400).as_nanos() as u64
        {
            event = near;
            stamp = s;
        }
        match stamp {
            Stamp::None => event.time = self.last_time,
            Stamp::YearLess { named_zone } => {
                // The second pass of an autumn overlap's hour, read as the first, would go
                // back about an hour: the later reading follows on from the lines before it
                // (found by an audit: time stood still for an hour, and a heartbeat rule
                // fired). A line a few minutes out of order stays as read.
                // (Not for a stamp in a zone it names: the configured zone's overlap is not
                // its own.)
                let back = Duration::from_secs(30 * 60);
                if !named_zone
                    && event.time < self.last_time.sub(back)
                    && let Some(later) = parser.later_reading(event.time)
                    && later >= self.last_time.sub(back)
                {
                    event.time = later;
                }
                self.latest_stamp = match self.latest_stamp {
                    Some(t) => Some(t.max(event.time)),
                    // A first stamp that had to go back years (a 29 February in a year
                    // without one) sets no year for the lines after it: they take `--year`
                    // (or the reference) as if it were not there.
                    None if self.went_back(event.time) => None,
                    None => Some(event.time),
                };
            }
            Stamp::Full if self.latest_stamp.is_none() => {
                self.full_stamp = Some(event.time);
            }
            Stamp::Full => {}
        }
        // Replay: no recorded arrival, so the event's own time is its arrival.
        event.arrival = event.time;
        // A syslogd's `last message repeated 3 times` stands for its host's last message.
        let (t, again) = (event.time, self.parser.with_year(Year::Follow));
        let event = self.last.take(event, line, None, |b| {
            again.parse_stamped(b, t, None).ok().map(|(e, _)| e)
        });
        Ok((event, stamp != Stamp::None))
    }

    /// Whether `t`, the first year-less stamp, lies more than half a year before the year it
    /// was resolved against (`--year`'s 1 January, or the reference it follows on from):
    /// only a 29 February with no leap year that near does.
    fn went_back(&self, t: Timestamp) -> bool {
        const DAY: i64 = 86_400;
        let (from, margin) = match self.parser.year() {
            _ if self.first_follows => (self.reference, 184 * DAY),
            // (Two days: 1 January in any zone.)
            Year::Fixed(_) => (no_stamp_time(self.parser), 2 * DAY),
            Year::Resolve | Year::Follow => return false,
        };
        t.0 < from
            .0
            .saturating_sub(Duration::from_secs(margin).as_nanos())
    }

    /// Dedup key and counters of one item about to be returned; an event's time becomes the
    /// time of the lines after it that have none.
    fn settle(&mut self, mut item: InputItem, bytes: &[u8]) -> InputItem {
        // Syslog relayed twice is one message; two JSON events alike are two events (a test
        // input that repeats a failed login five times means five). The line ending is no
        // part of the message: a line relayed once with CRLF and once with LF is one message.
        if let (Ok(_), Some(d)) = (&item.event, &self.dedup)
            && !is_json_line(bytes)
        {
            item.dedup_key = Some(d.borrow().key(trim_bytes(bytes), None));
        }
        match &item.event {
            Ok(e) => self.last_time = e.time,
            Err(_) => self.counters.malformed += 1,
        }
        item
    }

    /// Releases the lines held for a stamp, with time `t` for their events.
    fn release(&mut self, t: Timestamp) {
        self.stamped = true;
        self.held_bytes = 0;
        while let Some((mut item, bytes)) = self.held.pop_front() {
            if let Ok(e) = &mut item.event {
                e.time = t;
                e.arrival = t;
            }
            let item = self.settle(item, &bytes);
            self.ready.push_back(item);
        }
    }
}

/// Reads one line of at most `max_text` bytes (`max_json` for a JSON event line, whose
/// first byte after a byte-order mark and blanks is `{`) into `buf` (without the newline).
/// Returns `Ok(None)` at end of input, else whether the line was longer than its cap (then
/// `buf` holds only its first bytes and the rest was skipped). Whatever the reads' sizes.
fn read_capped(
    r: &mut dyn BufRead,
    buf: &mut Vec<u8>,
    max_text: usize,
    max_json: usize,
) -> io::Result<Option<bool>> {
    buf.clear();
    let mut any = false;
    let mut oversized = false;
    // Whether the line is JSON, once its first byte past a mark and blanks is read.
    let mut json: Option<bool> = None;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            // The input's end ends the line: one never known to be JSON is text.
            if json.is_none() && buf.len() > max_text {
                buf.truncate(max_text);
                oversized = true;
            }
            return Ok(any.then_some(oversized));
        }
        any = true;
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        let max = if json == Some(false) {
            max_text
        } else {
            max_json
        };
        let room = max.saturating_sub(buf.len());
        if take > room {
            oversized = true;
        }
        buf.extend_from_slice(&chunk[..take.min(room)]);
        let consumed = if done { take + 1 } else { take };
        r.consume(consumed);
        if json.is_none() {
            json = json_start(buf);
            if json.is_none() && (done || oversized) {
                // All blanks (or a mark's start) to its end or its cap: a text line.
                json = Some(false);
            }
            if json == Some(false) && buf.len() > max_text {
                buf.truncate(max_text);
                oversized = true;
            }
        }
        if done {
            return Ok(Some(oversized));
        }
    }
}

impl Iterator for Inputs {
    type Item = Result<InputItem, InputError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Some(Ok(item));
            }
            if self.current.is_none() {
                let Some((name, reader)) = self.sources.next() else {
                    // No stamp in the whole input: the held lines take the reference.
                    if self.held.is_empty() {
                        return None;
                    }
                    let t = self.last_time;
                    self.release(t);
                    continue;
                };
                self.current = Some((name, reader, self.first_line - 1));
            }
            let (name, reader, line_no) = self.current.as_mut()?;
            let mut buf = std::mem::take(&mut self.buf);
            let read = read_capped(
                reader.as_mut(),
                &mut buf,
                self.max_line,
                self.max_line.saturating_mul(JSON_LINE_FACTOR),
            );
            let outcome = match read {
                Err(error) => {
                    let name = name.clone();
                    self.current = None;
                    self.buf = buf;
                    return Some(Err(InputError { name, error }));
                }
                Ok(None) => {
                    self.current = None;
                    self.buf = buf;
                    continue;
                }
                Ok(Some(oversized)) => {
                    *line_no += 1;
                    (oversized, name.clone(), *line_no)
                }
            };
            let (oversized, source_name, line_no) = outcome;
            let blank = buf.iter().all(|b| b.is_ascii_whitespace() || *b == 0);
            if blank && !oversized {
                self.buf = buf;
                continue;
            }
            self.counters.read += 1;
            let parsed = if oversized {
                self.counters.oversized += 1;
                Err(Malformed::Oversized {
                    limit: if is_json_line(&buf) {
                        self.max_line.saturating_mul(JSON_LINE_FACTOR)
                    } else {
                        self.max_line
                    },
                })
            } else {
                self.parse_line(&buf)
            };
            let (event, stamp) = match parsed {
                Ok((e, true)) => {
                    let t = e.time;
                    (Ok(e), Some(t))
                }
                Ok((e, false)) => (Ok(e), None),
                Err(m) => (Err(m), None),
            };
            let item = InputItem {
                event,
                source_name,
                line_no,
                dedup_key: None,
            };
            if !self.stamped {
                match stamp {
                    Some(t) => self.release(t),
                    None if self.held.len() < MAX_HELD
                        && self.held_bytes + buf.len() <= MAX_HELD_BYTES =>
                    {
                        self.held_bytes += buf.len();
                        self.held.push_back((item, buf.clone()));
                        self.buf = buf;
                        continue;
                    }
                    None => {
                        let t = self.last_time;
                        self.release(t);
                    }
                }
            }
            let item = self.settle(item, &buf);
            self.buf = buf;
            self.ready.push_back(item);
            return self.ready.pop_front().map(Ok);
        }
    }
}

/// A JSON event line (its first non-blank byte after any byte-order mark opens an object);
/// any other line is syslog.
fn is_json_line(line: &[u8]) -> bool {
    json_start(line) == Some(true)
}

/// Whether a line beginning with `start` is a JSON event (its first byte past a byte-order
/// mark and blanks is `{`); `None` while `start` holds only blanks or a mark's beginning.
fn json_start(start: &[u8]) -> Option<bool> {
    const MARK: &[u8] = b"\xEF\xBB\xBF";
    if MARK.starts_with(start) && start.len() < MARK.len() {
        return None;
    }
    let body = start.strip_prefix(MARK).unwrap_or(start);
    body.iter()
        .find(|b| !b.is_ascii_whitespace())
        .map(|b| *b == b'{')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::Cursor;

    use cepheus_core::event::{Field, Source, Value};
    use cepheus_core::time::Duration;

    use super::*;
    use crate::ingest::dedup::Dedup;

    /// Which items are duplicates, decided in read order at each event's arrival as the
    /// replay's merger decides (one input: read order is merged order).
    fn duplicates(inputs: Inputs, window: Duration, capacity: usize) -> Vec<bool> {
        let dedup = SharedDedup::new(Dedup::new(window, capacity).into());
        inputs
            .with_dedup_keys(dedup.clone())
            .map(|item| {
                let item = item.unwrap();
                match (item.event, item.dedup_key) {
                    (Ok(ev), Some(k)) => dedup.borrow_mut().seen_key(k, ev.arrival),
                    _ => false,
                }
            })
            .collect()
    }

    fn reader(text: &[u8]) -> Box<dyn BufRead + Send> {
        Box::new(Cursor::new(text.to_vec()))
    }

    /// A 29 February in a year without one is kept (the leap year before, with or without
    /// `--year`), and it does not drag the lines after it back into that year.
    #[test]
    fn a_29_february_keeps_its_line_and_moves_no_other() {
        let text = b"Feb 28 10:00:00 h sshd[1]: a\nFeb 29 10:00:00 h sshd[1]: b\nMar  1 10:00:00 h sshd[1]: c\n";
        let times = |year: Year| -> Vec<String> {
            Inputs::from_readers(
                vec![("f".into(), reader(text))],
                SyslogParser::new(Default::default(), year),
                Timestamp::parse_rfc3339("2026-06-01T00:00:00Z").unwrap(),
            )
            .map(|i| i.unwrap().event.unwrap().time.to_rfc3339())
            .collect()
        };
        assert_eq!(
            times(Year::Resolve),
            [
                "2026-02-28T10:00:00Z",
                "2024-02-29T10:00:00Z",
                "2026-03-01T10:00:00Z"
            ]
        );
        assert_eq!(
            times(Year::Fixed(2023)),
            [
                "2023-02-28T10:00:00Z",
                "2020-02-29T10:00:00Z",
                "2023-03-01T10:00:00Z"
            ]
        );
    }

    /// A first line on a 29 February that `--year` has not (a 2024 log replayed with
    /// `--year 2023`) goes to the leap year before, and the lines after it still take
    /// `--year`: it does not move the whole log back years.
    #[test]
    fn a_first_line_on_a_29_february_sets_no_year_for_the_others() {
        let text = b"Feb 29 10:00:00 h sshd[1]: a\nMar  1 10:00:00 h sshd[1]: b\nJul 31 23:00:00 h sshd[1]: c\nDec 31 01:00:00 h sshd[1]: d\nJan  1 01:00:00 h sshd[1]: e\n";
        let times: Vec<String> = Inputs::from_readers(
            vec![("f".into(), reader(text))],
            SyslogParser::new(Default::default(), Year::Fixed(2023)),
            Timestamp::parse_rfc3339("2026-06-01T00:00:00Z").unwrap(),
        )
        .map(|i| i.unwrap().event.unwrap().time.to_rfc3339())
        .collect();
        assert_eq!(
            times,
            [
                "2020-02-29T10:00:00Z",
                "2023-03-01T10:00:00Z",
                "2023-07-31T23:00:00Z",
                "2023-12-31T01:00:00Z",
                "2024-01-01T01:00:00Z"
            ]
        );
    }

    /// `--year` is the year of the first year-less stamp; the lines after it follow on: over
    /// New Year into the next year, over a gap of months in the same year, and a little back
    /// for a line out of order (which moves nothing).
    #[test]
    fn years_after_the_first_stamp_follow_on_with_or_without_year() {
        let text = b"Dec 31 23:50:01 h sshd[1]: a\nJan  1 00:20:01 h sshd[1]: b\nDec 31 23:59:00 h sshd[1]: c\nMar 20 08:00:00 h sshd[1]: d\nAug 30 08:00:00 h sshd[1]: e\n";
        let times = |year: Year| -> Vec<String> {
            Inputs::from_readers(
                vec![("f".into(), reader(text))],
                SyslogParser::new(Default::default(), year),
                Timestamp::parse_rfc3339("2026-12-31T23:55:00Z").unwrap(),
            )
            .map(|i| i.unwrap().event.unwrap().time.to_rfc3339())
            .collect()
        };
        assert_eq!(
            times(Year::Fixed(2024)),
            [
                "2024-12-31T23:50:01Z",
                "2025-01-01T00:20:01Z",
                "2024-12-31T23:59:00Z",
                "2025-03-20T08:00:00Z",
                "2025-08-30T08:00:00Z"
            ]
        );
        assert_eq!(
            times(Year::Resolve),
            [
                "2026-12-31T23:50:01Z",
                "2027-01-01T00:20:01Z",
                "2026-12-31T23:59:00Z",
                "2027-03-20T08:00:00Z",
                "2027-08-30T08:00:00Z"
            ]
        );
    }

    /// Without `--year`, a year-less stamp after lines with years of their own follows on
    /// from them (the receipt time a daemon would have had), not from today; with `--year`
    /// it takes that year.
    #[test]
    fn a_year_less_stamp_after_full_ones_follows_on_from_them() {
        let text = b"<14>1 2024-12-10T10:00:30Z a hb - - - x\nDec 10 10:00:40 sw1 kernel: y\nJan  2 00:00:00 sw1 kernel: z\n";
        let times = |year: Year| -> Vec<String> {
            Inputs::from_readers(
                vec![("f".into(), reader(text))],
                SyslogParser::new(Default::default(), year),
                Timestamp::parse_rfc3339("2026-12-05T00:00:00Z").unwrap(),
            )
            .map(|i| i.unwrap().event.unwrap().time.to_rfc3339())
            .collect()
        };
        assert_eq!(
            times(Year::Resolve),
            [
                "2024-12-10T10:00:30Z",
                "2024-12-10T10:00:40Z",
                "2025-01-02T00:00:00Z"
            ]
        );
        assert_eq!(times(Year::Fixed(2023))[1], "2023-12-10T10:00:40Z");
    }

    /// A JSON event line may be longer than a syslog line (what `cepheus events` writes of a
    /// message at the cap, escaped): read whole up to its own cap; a syslog line that long is
    /// oversized.
    #[test]
    fn a_json_line_has_room_for_an_escaped_message_at_the_cap() {
        let msg = "\\u0001".repeat(MAX_LINE / 4);
        let json = format!(
            "{{\"source\":\"syslog\",\"time\":\"2026-01-01T00:00:00Z\",\"app\":\"a\",\"msg\":\"{msg}\"}}\n"
        );
        assert!(json.len() > MAX_LINE);
        let text = format!("Jan  1 00:00:00 h a: {}\n", "x".repeat(MAX_LINE + 10));
        let items: Vec<_> = Inputs::from_readers(
            vec![
                ("j".into(), reader(json.as_bytes())),
                ("t".into(), reader(text.as_bytes())),
            ],
            SyslogParser::new(Default::default(), Year::Fixed(2026)),
            Timestamp(0),
        )
        .map(|i| i.unwrap().event)
        .collect();
        assert_eq!(items.len(), 2);
        let ev = items[0].as_ref().unwrap();
        assert_eq!(
            ev.get(Field::Msg).map(|v| v.to_string().len()),
            Some(MAX_LINE / 4)
        );
        assert!(matches!(items[1], Err(Malformed::Oversized { .. })));
    }

    #[test]
    fn mixed_lines_and_counters() {
        let a = b"Dec 10 06:55:46 LabSZ sshd[1]: hello\n\n{\"source\":\"flow\",\"time\":\"2026-01-01T00:00:00Z\",\"dport\":22}\r\ngobbledegook\n<13>1 - h app - - - no stamp";
        let b = b"Dec 10 06:55:47 LabSZ sshd[2]: again\n";
        let reference = Timestamp::parse_rfc3339("2026-12-20T00:00:00Z").unwrap();
        let items: Vec<_> = Inputs::from_readers(
            vec![("a".into(), reader(a)), ("b".into(), reader(b))],
            SyslogParser::default(),
            reference,
        )
        .map(Result::unwrap)
        .collect();
        assert_eq!(items.len(), 5);
        let ssh = items[0].event.as_ref().unwrap();
        assert_eq!(ssh.arrival, ssh.time);
        assert_eq!(ssh.get(Field::Msg), Some(&Value::str("hello")));
        assert_eq!(items[1].line_no, 3);
        assert_eq!(items[1].event.as_ref().unwrap().source, Source::Flow);
        assert_eq!(items[2].event, Err(Malformed::NotSyslog));
        // No stamp: the previous event's time (the flow's).
        let flow_time = items[1].event.as_ref().unwrap().time;
        assert_eq!(items[3].event.as_ref().unwrap().time, flow_time);
        assert_eq!((items[4].source_name.as_str(), items[4].line_no), ("b", 1));
    }

    #[test]
    fn lines_without_a_stamp_before_the_first_take_its_time() {
        // A PRI-only line and an RFC 5424 `-` stamp first, then a malformed line, then the
        // first stamp: a replay must not depend on when it runs.
        let a = b"<189>35: %LINK-3-UPDOWN: down\n<14>1 - h app - - - started\ngobbledegook\nDec 10 06:55:46 LabSZ sshd[1]: hello\n<13>1 - h app - - - later\n";
        let year = super::super::syslog::Year::Fixed(2024);
        let run = |reference: &str| -> Vec<InputItem> {
            Inputs::from_readers(
                vec![("a".into(), reader(a))],
                SyslogParser::new(Default::default(), year),
                Timestamp::parse_rfc3339(reference).unwrap(),
            )
            .map(Result::unwrap)
            .collect()
        };
        let items = run("2026-12-20T00:00:00Z");
        assert_eq!(items, run("2030-01-01T00:00:00Z"));
        let first = Timestamp::parse_rfc3339("2024-12-10T06:55:46Z").unwrap();
        let times: Vec<Option<Timestamp>> = items
            .iter()
            .map(|i| i.event.as_ref().ok().map(|e| e.time))
            .collect();
        assert_eq!(
            times,
            [Some(first), Some(first), None, Some(first), Some(first)]
        );
        assert_eq!(
            items.iter().map(|i| i.line_no).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        // With no stamp at all, a fixed instant, whatever the day: the Unix epoch, or
        // 1 January of `--year`.
        let only = b"<14>1 - h app - - - a\n<14>1 - h app - - - b\n";
        let reference = Timestamp::parse_rfc3339("2026-12-20T00:00:00Z").unwrap();
        let times = |parser: SyslogParser, reference: Timestamp| -> Vec<Timestamp> {
            Inputs::from_readers(vec![("b".into(), reader(only))], parser, reference)
                .map(|i| i.unwrap().event.unwrap().time)
                .collect()
        };
        assert_eq!(times(SyslogParser::default(), reference), [Timestamp(0); 2]);
        let later = Timestamp::parse_rfc3339("2031-05-01T00:00:00Z").unwrap();
        assert_eq!(times(SyslogParser::default(), later), [Timestamp(0); 2]);
        let y2024 = Timestamp::parse_rfc3339("2024-01-01T00:00:00Z").unwrap();
        assert_eq!(
            times(SyslogParser::new(Default::default(), year), reference),
            [y2024; 2]
        );
        // Held lines are bounded in bytes too: past the bound they take that instant.
        let mut big = Vec::new();
        let line = format!("<14>1 - h app - - - {}\n", "x".repeat(1000));
        for _ in 0..(MAX_HELD_BYTES / 1000 + 10) {
            big.extend_from_slice(line.as_bytes());
        }
        big.extend_from_slice(b"Dec 10 06:55:46 LabSZ sshd[1]: hello\n");
        let items: Vec<_> = Inputs::from_readers(
            vec![("c".into(), reader(&big))],
            SyslogParser::default(),
            reference,
        )
        .map(Result::unwrap)
        .collect();
        assert_eq!(items[0].event.as_ref().unwrap().time, Timestamp(0));
        assert_ne!(
            items.last().unwrap().event.as_ref().unwrap().time,
            Timestamp(0)
        );
    }

    #[test]
    fn years_follow_today_and_the_previous_year_less_stamp_not_a_wrong_clock() {
        // A device whose clock is stuck in 2003 writes an RFC 5424 line: the RFC 3164 lines
        // after it still resolve against today (2026-12-20), then against each other, so a
        // file crossing New Year follows on into the next year.
        let text = b"<13>1 2003-10-11T22:14:15Z h a - - - old clock\n\
                     <13>Nov 30 10:00:00 h a: y\n\
                     <13>Dec 20 23:59:59 h a: z\n\
                     <13>Jan  1 00:00:01 h a: new year\n\
                     <13>Feb 29 10:00:00 h a: leap day\n";
        let reference = Timestamp::parse_rfc3339("2026-12-20T00:00:00Z").unwrap();
        let times: Vec<String> = Inputs::from_readers(
            vec![("a".into(), reader(text))],
            SyslogParser::default(),
            reference,
        )
        .map(|i| i.unwrap().event.unwrap().time.to_string())
        .collect();
        assert_eq!(
            times,
            [
                "2003-10-11T22:14:15Z",
                "2026-11-30T10:00:00Z",
                "2026-12-20T23:59:59Z",
                "2027-01-01T00:00:01Z",
                // 2027 and 2028's 29 February would be in the future: the last one before.
                "2024-02-29T10:00:00Z",
            ]
        );
    }

    #[test]
    fn oversized_lines_are_skipped_not_buffered() {
        let mut text = vec![b'x'; 1000];
        text.extend_from_slice(b"\nDec 10 06:55:46 LabSZ sshd[1]: ok\n");
        let mut inputs = Inputs::from_readers(
            vec![(
                "big".into(),
                Box::new(BufReader::with_capacity(16, Cursor::new(text))),
            )],
            SyslogParser::default(),
            Timestamp::default(),
        )
        .with_max_line(100);
        let first = inputs.next().unwrap().unwrap();
        assert_eq!(first.event, Err(Malformed::Oversized { limit: 100 }));
        assert!(inputs.buf.capacity() < 1000);
        let second = inputs.next().unwrap().unwrap();
        assert_eq!(second.line_no, 2);
        assert!(second.event.is_ok());
        assert!(inputs.next().is_none());
        assert_eq!(
            inputs.counters(),
            Counters {
                read: 2,
                malformed: 1,
                oversized: 1,
            }
        );
    }

    #[test]
    fn a_byte_order_mark_and_line_endings_are_no_part_of_a_line() {
        let text = b"\xEF\xBB\xBF{\"source\":\"syslog\",\"time\":\"2024-01-01T00:00:00Z\",\"host\":\"h\"}\n\
                     <13>1 2024-01-01T00:00:01Z h a - - - same\r\n\
                     <13>1 2024-01-01T00:00:01Z h a - - - same\n";
        let open = || {
            Inputs::from_readers(
                vec![("a".into(), reader(text))],
                SyslogParser::default(),
                Timestamp(0),
            )
        };
        let items: Vec<InputItem> = open().map(Result::unwrap).collect();
        assert!(items[0].event.is_ok(), "{:?}", items[0].event);
        assert_eq!(
            duplicates(open(), Duration::from_secs(2), 100),
            [false, false, true]
        );
    }

    #[test]
    fn json_events_alike_are_not_duplicates() {
        let line = "{\"source\":\"syslog\",\"time\":\"2026-01-01T00:00:00Z\",\"app\":\"a\"}\n";
        let text = format!("{line}{line}{line}");
        let reader: Box<dyn std::io::BufRead + Send> =
            Box::new(std::io::Cursor::new(text.into_bytes()));
        let inputs = Inputs::from_readers(
            vec![("t".to_string(), reader)],
            SyslogParser::default(),
            Timestamp(0),
        );
        let dups = duplicates(inputs, Duration::from_secs(2), 16);
        assert_eq!(dups, vec![false, false, false]);
    }

    #[test]
    fn repeated_lines_within_the_window_are_marked_duplicate() {
        let text = "<13>1 2026-01-01T00:00:00Z h a - - - same\n\
                    <13>1 2026-01-01T00:00:01Z h a - - - same\n\
                    <13>1 2026-01-01T00:00:01Z h a - - - same\n\
                    <13>1 2026-01-01T00:00:01Z h a - - - other\n\
                    <13>1 2026-01-01T00:00:01Z h a - - - same\n\
                    <13>1 2026-01-01T00:00:09Z h a - - - same\n";
        let reader: Box<dyn BufRead + Send> = Box::new(Cursor::new(text.as_bytes().to_vec()));
        let inputs = Inputs::from_readers(
            vec![("t".into(), reader)],
            SyslogParser::default(),
            Timestamp(0),
        );
        let dups = duplicates(inputs, Duration::from_secs(2), 16);
        // The stamps differ for the second line (not the same bytes); 8 s later is new again.
        assert_eq!(dups, [false, false, true, false, true, false]);
    }

    #[test]
    fn missing_file_fails_up_front() {
        let err = open_inputs(
            &[PathBuf::from("/nonexistent/cepheus.log")],
            SyslogParser::default(),
            Timestamp::default(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().starts_with("/nonexistent/cepheus.log:"));
    }
}
