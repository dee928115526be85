//! A shard's event journal: each batch a shard takes is appended here before its engine sees
//! it, so that a restart continues from the last saved state *and* the events that came after
//! it (a `kill -9` between two saves loses no event the shard had taken).
//!
//! The journal is a folder of numbered segments. A state saved at the moment segment `k`
//! begins holds every event of the segments before `k`: a restart from it replays the
//! segments from `k` on, in order, and once the store has that state (the sink says so) the
//! segments before `k` are deleted. A record is `[length u32 LE][crc32 u32 LE][event]`, the
//! event in postcard (serde); a torn last record (the crash cut a write) ends its segment.
//!
//! Records are written with one `write` per batch and never fsynced: a killed process loses
//! nothing the kernel took, a power cut may lose the last seconds (as the store's own
//! unflushed writes would). The journal is bounded ([`MAX_BYTES`]) and stops, said once in
//! the log and counted, when the store cannot take states (so nothing would ever be deleted)
//! or its disk is nearly full; it resumes by itself.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::net::IpAddr;

use cepheus_core::event::{Event, FieldKey, Source, Value};
use cepheus_core::time::{Duration as CoreDuration, Timestamp};
use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

/// The most a shard's journal holds (all segments): beyond it, events are not journalled
/// until a saved state lets older segments go.
pub const MAX_BYTES: u64 = 512 << 20;

/// The largest record read back (an event is bounded by `syslog.max_message_size`, at most
/// 1 MiB, plus its parsed fields): a longer length is damage, not an event.
const MAX_RECORD: u32 = 16 << 20;

/// Below this much free space on its disk the journal writes nothing: twice what the store
/// keeps free, so the journal never takes the room the store needs to save the states that
/// let the journal's segments go.
const MIN_FREE_BYTES: u64 = 2 * super::sink::MIN_FREE_BYTES;

/// The file marking a journal begun with a fresh engine (see [`Journal::mark_fresh`]).
const FRESH: &str = "fresh";

/// Events replayed at a time.
const REPLAY_BATCH: usize = 1024;

/// What a journal did, for `/stats`.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct JournalStats {
    /// Events written.
    pub written: u64,
    /// Events not written (the journal was full, its disk nearly full, or a write failed): a
    /// crash before the next saved state would lose them.
    pub skipped: u64,
    /// Events replayed at start.
    pub replayed: u64,
    /// Bytes its segments hold.
    pub bytes: u64,
}

/// One shard's journal.
pub struct Journal {
    dir: PathBuf,
    /// The segment appended to.
    seg: u64,
    file: Option<File>,
    /// Bytes of each segment kept, by number.
    sizes: Vec<(u64, u64)>,
    stats: JournalStats,
    /// Why appends are held back, when they are (said once per spell).
    held: Option<&'static str>,
    space_checked: Option<Instant>,
    low: bool,
    buf: Vec<u8>,
    /// Kept only to be replayed once, then deleted (`store.journal` turned off).
    replay_only: bool,
}

/// What a replay read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Events read.
    pub events: u64,
    /// Segments read.
    pub segments: u64,
    /// Segments that ended in a torn or damaged record (the rest of such a segment is not
    /// read): one is expected after a crash.
    pub cut: u64,
}

fn seg_name(n: u64) -> String {
    format!("{n:020}.journal")
}

fn seg_number(name: &str) -> Option<u64> {
    name.strip_suffix(".journal")?.parse().ok()
}

impl Journal {
    /// Opens (creating it) the journal in `dir`; appends go to a new segment after every
    /// segment there.
    pub fn open(dir: &Path) -> io::Result<Journal> {
        fs::create_dir_all(dir)?;
        let mut sizes = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if let Some(n) = entry.file_name().to_str().and_then(seg_number) {
                sizes.push((n, entry.metadata()?.len()));
            }
        }
        sizes.sort_unstable();
        let seg = sizes.last().map_or(0, |(n, _)| n + 1);
        let mut j = Journal {
            dir: dir.to_path_buf(),
            seg,
            file: None,
            sizes,
            stats: JournalStats::default(),
            held: None,
            space_checked: None,
            low: false,
            buf: Vec::new(),
            replay_only: false,
        };
        j.stats.bytes = j.total();
        Ok(j)
    }

    fn total(&self) -> u64 {
        self.sizes.iter().map(|(_, b)| b).sum()
    }

    /// Numbers the segments appended from now on at least `seg`: a saved state that replays
    /// from `seg` must never miss events this run appends (its folder may be empty, after a
    /// clean stop, and would otherwise count from 0 again).
    pub fn number_from(&mut self, seg: u64) {
        if seg > self.seg {
            self.file = None;
            self.seg = seg;
        }
    }

    /// This journal only to replay what an earlier run wrote (the journal is turned off now):
    /// it appends nothing, and its segments go as saved states cover them (see
    /// [`Journal::is_replay_only`]).
    pub fn replay_only(mut self) -> Journal {
        self.replay_only = true;
        self
    }

    /// Whether it is kept only to be replayed once, then deleted with its folder.
    pub fn is_replay_only(&self) -> bool {
        self.replay_only
    }

    /// Notes that the segments from the one appended next follow an engine begun afresh (no
    /// saved state yet): if the agent dies before a state of it is kept, the next start
    /// replays them into a fresh engine ([`Journal::fresh_from`]) rather than losing them.
    /// `began`: the fresh engine's clock when it began, kept with the mark, so that the
    /// engine continued from the journal begins monitoring when the dead one did.
    pub fn mark_fresh(&mut self, began: Option<cepheus_core::time::Timestamp>) {
        let text = match began {
            Some(t) => format!("{} {}", self.seg, t.0),
            None => self.seg.to_string(),
        };
        if let Err(e) = fs::write(self.dir.join(FRESH), text) {
            tracing::warn!(journal = %self.dir.display(), error = %e, "cannot mark the journal as begun afresh");
        }
    }

    /// The segment an engine begun afresh was journalled from, if no state of it was kept
    /// since ([`Journal::mark_fresh`]).
    pub fn fresh_from(&self) -> Option<u64> {
        self.fresh_mark().map(|(seg, _)| seg)
    }

    /// [`Journal::fresh_from`], with the fresh engine's clock when it began if its mark kept
    /// one (marks of earlier versions did not): the file read once.
    pub fn fresh_mark(&self) -> Option<(u64, Option<cepheus_core::time::Timestamp>)> {
        let text = fs::read_to_string(self.dir.join(FRESH)).ok()?;
        let mut words = text.split_whitespace();
        let seg = words.next()?.parse().ok()?;
        let began = words
            .next()
            .and_then(|w| w.parse().ok())
            .map(cepheus_core::time::Timestamp);
        Some((seg, began))
    }

    /// Forgets the mark of [`Journal::mark_fresh`] (a state is kept now).
    pub fn clear_fresh(&mut self) {
        let _ = fs::remove_file(self.dir.join(FRESH));
    }

    /// Deletes it, folder and all (a replay-only journal whose segments a saved state
    /// holds): its fresh mark goes too, as it names segments no longer there.
    pub fn delete(self) {
        let _ = fs::remove_file(self.dir.join(FRESH));
        match fs::remove_dir(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(journal = %self.dir.display(), error = %e, "cannot delete the journal's folder (journal = false)");
            }
        }
    }

    /// Whether it holds no segment any more.
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What it did so far.
    pub fn stats(&self) -> JournalStats {
        JournalStats {
            bytes: self.total(),
            ..self.stats
        }
    }

    /// The segment a state saved now would replay from: appends go to a new segment from here
    /// on, and the events appended so far are all before it.
    pub fn rotate(&mut self) -> u64 {
        if self.file.take().is_some() || self.sizes.last().is_some_and(|(n, _)| *n >= self.seg) {
            self.seg += 1;
        }
        self.seg
    }

    /// Deletes the segments before `seg` (a saved state holds their events).
    pub fn release_before(&mut self, seg: u64) {
        let mut kept = Vec::with_capacity(self.sizes.len());
        for (n, b) in std::mem::take(&mut self.sizes) {
            if n >= seg {
                kept.push((n, b));
                continue;
            }
            match fs::remove_file(self.dir.join(seg_name(n))) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(journal = %self.dir.display(), error = %e, "cannot delete a journal segment");
                    kept.push((n, b));
                }
            }
        }
        self.sizes = kept;
    }

    /// Deletes every segment (the shard starts afresh: nothing of them is continued).
    pub fn clear(&mut self) {
        self.file = None;
        self.release_before(u64::MAX);
        self.seg += 1;
    }

    /// Appends `batch`; an event it cannot write is counted in `skipped` (and said in the log
    /// once per spell), never an error for the caller: the shard goes on without it.
    pub fn append(&mut self, batch: &[Arc<Event>]) {
        if batch.is_empty() || self.replay_only {
            return;
        }
        if let Some(why) = self.hold() {
            self.skip(batch.len() as u64, why);
            return;
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        for ev in batch {
            let at = buf.len();
            buf.extend_from_slice(&[0; 8]);
            match postcard::to_extend(&Record::of(ev), std::mem::take(&mut buf)) {
                Ok(b) => buf = b,
                Err(e) => {
                    // (Unreachable for an event: every field serialises.)
                    tracing::error!(error = %e, "cannot encode an event for the journal");
                    buf = Vec::new();
                    break;
                }
            }
            let len = (buf.len() - at - 8) as u32;
            let crc = crc32fast::hash(&buf[at + 8..]);
            buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
            buf[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        }
        if buf.is_empty() {
            self.skip(batch.len() as u64, "an event could not be encoded");
            return;
        }
        match self.write(&buf) {
            Ok(()) => {
                self.stats.written += batch.len() as u64;
                if self.held.take().is_some() {
                    tracing::info!(journal = %self.dir.display(), "events are journalled again");
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "journal write failed");
                // Part of the batch may be in the segment: later records go to a new one,
                // so a replay, which ends a segment at its first torn record, keeps them.
                self.file = None;
                self.seg += 1;
                self.skip(batch.len() as u64, "a write failed");
            }
        }
        self.buf = buf;
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.file.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.join(seg_name(self.seg)))?;
            self.file = Some(f);
            if self.sizes.last().is_none_or(|(n, _)| *n != self.seg) {
                self.sizes.push((self.seg, 0));
            }
        }
        if let Some(f) = self.file.as_mut() {
            f.write_all(buf)?;
        }
        if let Some((_, b)) = self.sizes.last_mut() {
            *b += buf.len() as u64;
        }
        Ok(())
    }

    /// Why appends are held back now, if they are.
    fn hold(&mut self) -> Option<&'static str> {
        if self.total() >= MAX_BYTES {
            return Some("it is full (no state saved lately lets older events go)");
        }
        let now = Instant::now();
        if self
            .space_checked
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            self.space_checked = Some(now);
            self.low = rustix::fs::statvfs(&self.dir)
                .ok()
                .is_some_and(|v| v.f_bavail.saturating_mul(v.f_frsize) < MIN_FREE_BYTES);
        }
        self.low.then_some("its disk is nearly full")
    }

    fn skip(&mut self, n: u64, why: &'static str) {
        self.stats.skipped += n;
        if self.held.replace(why).is_none() {
            tracing::error!(
                journal = %self.dir.display(),
                why,
                "events are not journalled: a crash would lose those since the last saved state"
            );
        }
    }

    /// Reads the segments from `from` on, in order, handing their events to `f` in batches of
    /// at most 1,024 as they are read (a replay holds one batch at a time); records them as
    /// replayed.
    pub fn replay(&mut self, from: u64, mut f: impl FnMut(Vec<Event>)) -> Replayed {
        let mut r = Replayed::default();
        let segs: Vec<u64> = self
            .sizes
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| *n >= from)
            .collect();
        for n in segs {
            let path = self.dir.join(seg_name(n));
            let file = match File::open(&path) {
                Ok(file) => file,
                Err(e) => {
                    tracing::warn!(segment = %path.display(), error = %e, "cannot read a journal segment");
                    r.cut += 1;
                    continue;
                }
            };
            r.segments += 1;
            let mut seg_events = 0u64;
            let mut rd = BufReader::with_capacity(1 << 16, file);
            let mut batch = Vec::with_capacity(REPLAY_BATCH);
            let mut payload = Vec::new();
            loop {
                match read_record(&mut rd, &mut payload) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(why) => {
                        tracing::warn!(segment = %path.display(), events_before = seg_events, why, "a journal segment ends in a torn or damaged record: the rest of it is not replayed");
                        r.cut += 1;
                        break;
                    }
                }
                match postcard::from_bytes::<Owned>(&payload) {
                    Ok(ev) => {
                        let ev = ev.event();
                        r.events += 1;
                        seg_events += 1;
                        batch.push(ev);
                        if batch.len() == REPLAY_BATCH {
                            f(std::mem::replace(
                                &mut batch,
                                Vec::with_capacity(REPLAY_BATCH),
                            ));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(segment = %path.display(), error = %e, "a journal record cannot be read: the rest of the segment is not replayed");
                        r.cut += 1;
                        break;
                    }
                }
            }
            if !batch.is_empty() {
                f(batch);
            }
        }
        self.stats.replayed += r.events;
        r
    }
}

/// An event as a record holds it. [`Value`]'s own serde form is adjacently tagged (for the
/// checkpoints' JSON), which a format without self-description cannot read back; the records
/// use plain enums, written from borrows (no copy of the event).
#[derive(Serialize)]
struct Record<'a> {
    source: Source,
    time: Timestamp,
    arrival: Timestamp,
    fields: Vec<(&'a FieldKey, ValueRef<'a>)>,
}

#[derive(Serialize)]
enum ValueRef<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
    Ip(IpAddr),
    Time(Timestamp),
    Duration(CoreDuration),
}

#[derive(Deserialize)]
struct Owned {
    source: Source,
    time: Timestamp,
    arrival: Timestamp,
    fields: Vec<(FieldKey, ValueOwned)>,
}

#[derive(Deserialize)]
enum ValueOwned {
    Str(SmolStr),
    Int(i64),
    Float(f64),
    Bool(bool),
    Ip(IpAddr),
    Time(Timestamp),
    Duration(CoreDuration),
}

impl<'a> Record<'a> {
    fn of(ev: &'a Event) -> Record<'a> {
        let fields = ev
            .fields
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::Str(s) => ValueRef::Str(s),
                    Value::Int(i) => ValueRef::Int(*i),
                    Value::Float(f) => ValueRef::Float(*f),
                    Value::Bool(b) => ValueRef::Bool(*b),
                    Value::Ip(a) => ValueRef::Ip(*a),
                    Value::Time(t) => ValueRef::Time(*t),
                    Value::Duration(d) => ValueRef::Duration(*d),
                };
                (k, v)
            })
            .collect();
        Record {
            source: ev.source,
            time: ev.time,
            arrival: ev.arrival,
            fields,
        }
    }
}

impl Owned {
    fn event(self) -> Event {
        let fields = self
            .fields
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    ValueOwned::Str(s) => Value::Str(s),
                    ValueOwned::Int(i) => Value::Int(i),
                    ValueOwned::Float(f) => Value::Float(f),
                    ValueOwned::Bool(b) => Value::Bool(b),
                    // (As the event had it: `Value::ip` normalised it when it was made.)
                    ValueOwned::Ip(a) => Value::Ip(a),
                    ValueOwned::Time(t) => Value::Time(t),
                    ValueOwned::Duration(d) => Value::Duration(d),
                };
                (k, v)
            })
            .collect();
        Event {
            source: self.source,
            time: self.time,
            arrival: self.arrival,
            fields,
        }
    }
}

/// Reads one record's payload into `out`: `Ok(false)` at the segment's clean end.
fn read_record(rd: &mut impl Read, out: &mut Vec<u8>) -> Result<bool, &'static str> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        match rd.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err("a record's header is cut"),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err("a read failed"),
        }
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len > MAX_RECORD {
        return Err("a record's length is out of bounds");
    }
    out.clear();
    out.resize(len as usize, 0);
    rd.read_exact(out).map_err(|_| "a record's event is cut")?;
    if crc32fast::hash(out) != crc {
        return Err("a record's checksum does not match");
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use cepheus_core::event::Field;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cepheus-journal-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn ev(i: i64) -> Arc<Event> {
        let mut e = (*plain(i)).clone();
        e.set_key(
            cepheus_core::event::FieldKey::from_name("sd.origin.ip"),
            Value::str("192.0.2.1"),
        );
        e.set(
            Field::Facility,
            Value::Duration(cepheus_core::time::Duration(5)),
        );
        Arc::new(e)
    }

    fn plain(i: i64) -> Arc<Event> {
        let t = Timestamp(1_780_000_000_000_000_000 + i * 1_000_000);
        Arc::new(
            Event::new(Source::Syslog, t, t.add(cepheus_core::time::Duration(7)))
                .with(Field::Host, Value::str(&format!("h{i}")))
                .with(Field::Msg, Value::str(&"x".repeat(i as usize % 40)))
                .with(Field::Severity, Value::Int(i % 8))
                .with(Field::Peer, Value::ip("10.0.0.1".parse().unwrap()))
                .with(Field::Time, Value::Time(t)),
        )
    }

    fn read_all(j: &mut Journal, from: u64) -> (Vec<Event>, Replayed) {
        let mut got = Vec::new();
        let r = j.replay(from, |b| got.extend(b));
        (got, r)
    }

    #[test]
    fn events_come_back_whole_and_in_order_from_the_segment_a_state_names() {
        let d = scratch("order");
        let mut j = Journal::open(&d).unwrap();
        let before: Vec<_> = (0..5).map(ev).collect();
        j.append(&before);
        let from = j.rotate();
        let after: Vec<_> = (5..3000).map(ev).collect();
        for chunk in after.chunks(7) {
            j.append(chunk);
        }
        let (got, r) = read_all(&mut j, from);
        assert_eq!(got.len(), after.len());
        assert!(got.iter().zip(&after).all(|(a, b)| a == b.as_ref()));
        assert_eq!(r.cut, 0);
        // A journal opened again (a restart) finds the same, and appends after it.
        let mut again = Journal::open(&d).unwrap();
        let (got2, _) = read_all(&mut again, from);
        assert_eq!(got2.len(), after.len());
        let (all, _) = read_all(&mut again, 0);
        assert_eq!(all.len(), 3000);
        assert_eq!(all[0], *before[0]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn released_segments_are_deleted_and_the_rest_replays() {
        let d = scratch("release");
        let mut j = Journal::open(&d).unwrap();
        j.append(&[ev(1), ev(2)]);
        let k = j.rotate();
        j.append(&[ev(3)]);
        assert!(j.stats().bytes > 0);
        j.release_before(k);
        let files = fs::read_dir(&d).unwrap().count();
        assert_eq!(files, 1, "only the segment after the saved state is left");
        let (got, _) = read_all(&mut j, 0);
        assert_eq!(got, vec![(*ev(3)).clone()]);
        // A rotation with nothing appended since names a segment nothing is in yet.
        let k2 = j.rotate();
        let k3 = j.rotate();
        assert_eq!(k2, k3);
        j.clear();
        assert_eq!(fs::read_dir(&d).unwrap().count(), 0);
        assert_eq!(j.stats().bytes, 0);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_torn_or_damaged_tail_ends_its_segment_only() {
        let d = scratch("torn");
        let mut j = Journal::open(&d).unwrap();
        j.append(&[ev(1), ev(2)]);
        let k = j.rotate();
        j.append(&[ev(3), ev(4)]);
        drop(j);
        let first = d.join(seg_name(0));
        // Cut the first segment inside its second record; flip a byte of the second's last.
        let len = fs::metadata(&first).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&first)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let second = d.join(seg_name(k));
        let mut bytes = fs::read(&second).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&second, bytes).unwrap();
        let mut j = Journal::open(&d).unwrap();
        let (got, r) = read_all(&mut j, 0);
        assert_eq!(got, vec![(*ev(1)).clone(), (*ev(3)).clone()]);
        assert_eq!(r.cut, 2);
        assert_eq!(r.segments, 2);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_run_whose_folder_is_empty_numbers_after_the_state_it_continues() {
        let d = scratch("number");
        let mut j = Journal::open(&d).unwrap();
        j.append(&[ev(1)]);
        let k = j.rotate();
        j.release_before(k);
        drop(j);
        // A new run: an empty folder, and a saved state that replays from `k`.
        let mut j = Journal::open(&d).unwrap();
        j.number_from(k);
        j.append(&[ev(2)]);
        let (got, _) = read_all(&mut j, k);
        assert_eq!(got, vec![(*ev(2)).clone()]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_journal_begun_afresh_says_from_where_until_a_state_is_kept() {
        let d = scratch("fresh");
        let mut j = Journal::open(&d).unwrap();
        j.clear();
        let began = cepheus_core::time::Timestamp(1_700_000_000_123_456_789);
        j.mark_fresh(Some(began));
        j.append(&[ev(1)]);
        let again = Journal::open(&d).unwrap();
        let (from, at) = again.fresh_mark().unwrap();
        assert_eq!(at, Some(began));
        assert_eq!(again.fresh_from(), Some(from));
        let mut again = again;
        let (got, _) = read_all(&mut again, from);
        assert_eq!(got, vec![(*ev(1)).clone()]);
        again.clear_fresh();
        assert_eq!(again.fresh_from(), None);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_spent_journal_is_deleted_with_its_fresh_mark() {
        let d = scratch("spent");
        let mut j = Journal::open(&d).unwrap();
        // (A mark of an earlier version: no clock.)
        j.mark_fresh(None);
        let j = Journal::open(&d).unwrap().replay_only();
        assert!(j.is_empty() && j.fresh_from().is_some());
        assert_eq!(j.fresh_mark().map(|(_, at)| at), Some(None));
        j.delete();
        assert!(!d.exists());
    }

    #[test]
    fn a_full_journal_counts_what_it_does_not_write() {
        let d = scratch("full");
        let mut j = Journal::open(&d).unwrap();
        j.sizes.push((j.seg, MAX_BYTES));
        j.append(&[ev(1), ev(2)]);
        assert_eq!(j.stats().skipped, 2);
        assert_eq!(j.stats().written, 0);
        // Once a saved state lets the old segment go, it writes again.
        let k = j.rotate();
        j.release_before(k);
        j.append(&[ev(3)]);
        assert_eq!(j.stats().written, 1);
        let _ = fs::remove_dir_all(&d);
    }
}
