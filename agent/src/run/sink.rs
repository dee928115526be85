//! The alert sink actor: alert changes into the store, then as JSON lines on stdout; the
//! shards' checkpoints into the store.
//!
//! Alerts and checkpoints come through the one mailbox, in the order each shard sent them, so
//! a checkpoint is stored only after every alert its engine made before it: a restart from it
//! never misses one of them, and the ones it makes again are recognised by the store
//! (`alerts_repeated`) and neither kept nor written twice. The sink runs on its own thread: a
//! store write waits for the disk.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use actix::prelude::*;
use cepheus_core::alert::Alert;
use cepheus_core::alert::{AlertState, Reason};
use cepheus_core::time::Timestamp;
use cepheus_store::{Change, SavedShard, Store};

use super::counters::{LogLimit, SinkCounters, bump};

/// An alert change on the live stream: its place in the store's order (`None`: not kept, so
/// a client cannot resume after it) and its JSON, left out (`None`) when it is over
/// [`STREAM_INLINE`] and kept: the stream reads it from the store.
pub type Streamed = (Option<u64>, Option<Arc<str>>);

/// The most bytes of an alert change's JSON the live stream carries itself. A client that
/// stops reading holds the stream's backlog (`api::STREAM_BACKLOG` changes) until it goes:
/// at this size at most 128 MiB, where alerts of 16 events of 16 KiB could hold gigabytes.
pub const STREAM_INLINE: usize = 4096;

/// Alert changes from one shard, in the order they were made, with the number of the reload
/// whose rules made them (0: the rules the agent started with).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Alerts(pub Vec<Alert>, pub u64);

/// A shard's engine checkpoint, to store once the alerts sent before it are stored; once it
/// is kept, the shard is told (with the journal segment it replays from), so that it can let
/// its journal's older segments go.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SaveCheckpoint(
    pub SavedShard,
    pub Option<(Recipient<super::shard::StateKept>, u64)>,
);

/// The engines no longer run these rules as they were: removed or changed while the agent
/// was down (a restarted shard's engine says it), or by a reload (after the engines resolved
/// the alerts they held). Their alerts still firing in the store are resolved at `time`,
/// with the reason: a match's alert, which no engine holds, too.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Retire {
    /// The rules, and why.
    pub rules: Vec<(String, Reason)>,
    /// When (the restart, the reload).
    pub time: Timestamp,
    /// Sent by the reload of this number, once every shard has taken its rules: the alerts
    /// fired by these rules as that reload made them (on a shard that reloaded first) are
    /// left alone. `None`: a restart's.
    pub reload: Option<u64>,
}

/// How long, when the agent stops, `output.syslog` and `output.webhook` get to deliver what
/// waits in their queues (what is left is counted as unsent and said in the log).
const OUTPUTS_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Write out everything received so far (shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Flush;

/// The stdout thread wrote lines: the store's written-out mark may move.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StdoutWrote;

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The log's limit for alerts dropped at a full sink: one line a second for all shards (an
/// audit saw 11,187 lines in 3 s of a storm).
static DROPPED_SAID: std::sync::LazyLock<super::counters::LogLimit> =
    std::sync::LazyLock::new(|| super::counters::LogLimit::new(1000));

/// Counts alerts shard `shard` could not hand to the sink (its mailbox was full), and says so
/// in the log at most once a second, with how many lines were held back.
pub fn note_dropped(shard: usize, n: usize) {
    let total = DROPPED.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
    if let Some(held) = DROPPED_SAID.allow() {
        tracing::error!(
            shard,
            alerts = n,
            dropped_in_all = total,
            suppressed = held,
            "alert sink full: alerts dropped (alerts_dropped counts them)"
        );
    }
}

/// Alerts dropped because the sink's mailbox was full.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The alert sink.
pub struct AlertSink {
    /// The thread writing the JSON lines to stdout, if they go there.
    stdout: Option<super::stdout::StdoutWriter>,
    /// Where that thread says it wrote (the sink's address, once it runs), and whether such a
    /// word waits in the mailbox (one at a time).
    stdout_wrote: Arc<(
        std::sync::OnceLock<Recipient<StdoutWrote>>,
        std::sync::atomic::AtomicBool,
    )>,
    counters: Arc<SinkCounters>,
    /// Where alert changes and checkpoints are kept (none in some tests).
    store: Option<Store>,
    /// One store error line per minute.
    store_limit: LogLimit,
    /// Changes pruned before an output sent them, said at most once a minute.
    prune_limit: LogLimit,
    /// `output.file`, if set.
    file: Option<FileOutput>,
    /// `output.syslog`, if set.
    forwarder: Option<super::forward::Forwarder>,
    webhook: Option<super::webhook::Webhook>,
    /// The live stream of alert changes (`GET /alerts/stream`): each change written out is
    /// offered to the subscribers, none of whom can hold up the sink (a slow one misses some
    /// and is told how many).
    stream: Option<tokio::sync::broadcast::Sender<Streamed>>,
    /// `store.max_age`: changes older are dropped, checked every minute.
    max_age: Option<cepheus_core::time::Duration>,
    /// At start: the alerts the store had firing, and the shards still to say which of them
    /// their engines hold ([`Adopt`]); what none holds is resolved (`state_lost`).
    adopting: Option<Adopting>,
    /// The free space of the store's file system, as last looked at.
    space: Space,
    /// Alert changes written out while the store could not keep them (a nearly full disk, a
    /// failed write), oldest first: kept as soon as it can, before anything newer, so the
    /// store (the API, `cepheus alerts`, the dashboard) does not go on showing an episode as
    /// firing whose resolve went out meanwhile. At most [`UNKEPT_MAX_BYTES`] of JSON.
    unkept: std::collections::VecDeque<Change>,
    /// The JSON bytes in `unkept`.
    unkept_bytes: usize,
    /// `unkept` changed since it was last kept aside ([`AlertSink::save_unkept`]).
    unkept_dirty: bool,
    /// [`UNKEPT_MAX_BYTES`] (tests lower it).
    unkept_max: usize,
    /// The alerts fired in batches of a reload whose `Retire` has not come yet, by id, with
    /// the reload's number (only while a reload goes from shard to shard).
    fired_since_reload: std::collections::HashMap<u64, u64>,
    /// The last reload whose `Retire` came.
    retired_through: u64,
    /// The rules' meanings ([`Rule::meaning_digest`](cepheus_core::rules::ir::Rule::meaning_digest))
    /// by rule name, for each reload whose rules may still make alerts (0: the rules the
    /// agent started with): a firing is kept with its rule's meaning, so that the alerts of
    /// an earlier form of a rule are told from the current one's after a crash.
    meanings: std::collections::BTreeMap<u64, Arc<RuleMeanings>>,
    /// The silences, as the store keeps them (read at start; only the sink changes them).
    silences: Vec<super::silence::Silence>,
    /// `[[inhibit]]` of the configuration.
    inhibits: Vec<super::silence::InhibitRule>,
    /// What the store kept late may be muted by what ended meanwhile: to settle
    /// ([`AlertSink::reconcile_if_due`]).
    reconcile_due: bool,
    /// The silences could not be read at start: their marks are left as they are.
    silences_unread: bool,
    /// Per rule, whether its alerts are episodes the engine ends, not matches that fire once
    /// and stay firing ([`Alert::episodic`]; from each alert taken, and the start's `Adopt`):
    /// a muted match stays muted when what muted it ends (it happened then).
    episodic: std::collections::HashMap<String, bool>,
    /// The firing alerts of their sources, by (rule's index, values of its `equal` fields):
    /// what inhibits now (as many as firing alerts, at most).
    inhibitors:
        std::collections::HashMap<(usize, Vec<String>), std::collections::BTreeMap<u64, Timestamp>>,
}

/// Each rule's meaning by name ([`Meanings`]).
pub type RuleMeanings = std::collections::HashMap<String, u64>;

/// The rules' meanings of reload `.0` (0: the rules the agent started with), sent before
/// any shard runs them.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Meanings(pub u64, pub Arc<RuleMeanings>);

/// The meanings of `rules`, by name.
pub fn meanings_of(rules: &cepheus_core::rules::ir::RuleSet) -> Arc<RuleMeanings> {
    Arc::new(
        rules
            .rules
            .iter()
            .map(|r| (r.name.clone(), r.meaning_digest()))
            .collect(),
    )
}

/// The most JSON the changes waiting for the store may hold (the oldest go first, counted
/// in `store_dropped`).
const UNKEPT_MAX_BYTES: usize = 64 << 20;

/// How often changes waiting for the store are tried again when no new alert comes.
const CATCH_UP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// How many alert changes of a batch are rendered and kept at a time (the store writes
/// transactions of at most 1,024, with one flush for each such slice).
const TAKE_CHUNK: usize = 8192;

/// Below this much free space the store is not written (sled may hang on a full disk).
pub const MIN_FREE_BYTES: u64 = 64 << 20;

/// The store's free-space guard: looked at once a second at most.
struct Space {
    checked: Option<std::time::Instant>,
    low: bool,
    /// [`MIN_FREE_BYTES`] (tests change it).
    min_free: u64,
}

impl Default for Space {
    fn default() -> Self {
        Space {
            checked: None,
            low: false,
            min_free: MIN_FREE_BYTES,
        }
    }
}

/// The start-up reckoning of the store's firing alerts against the engines'.
struct Adopting {
    /// Ids the store had firing when the sink started.
    firing: std::collections::HashSet<u64>,
    /// Ids some engine holds open.
    held: std::collections::HashSet<u64>,
    /// Shards that have not said yet.
    waiting: std::collections::HashSet<usize>,
    /// Rules whose alerts an engine holds until they resolve.
    episodic: std::collections::HashSet<String>,
    /// Rules running.
    running: std::collections::HashSet<String>,
}

/// A shard's engine, as first built at start, holds these alerts open (ids).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Adopt {
    /// The shard.
    pub shard: usize,
    /// Ids of the alerts its engine holds firing.
    pub ids: Vec<u64>,
    /// The rules whose alerts are episodes an engine holds until they resolve (a match
    /// that fires once is held by none, and stays firing as it is).
    pub episodic: Vec<String>,
    /// Every rule it runs (a firing alert of a rule none runs is resolved `rule_removed`).
    pub running: Vec<String>,
}

/// How much of `output.file`'s end is read at start for the changes a crash left there.
const TAIL_BYTES: u64 = 16 << 20;

/// JSON lines appended to a file that logrotate may move or remove: it is checked at most
/// once a second and made anew when it is no longer the file open.
struct FileOutput {
    path: std::path::PathBuf,
    open: Option<(std::fs::File, u64)>,
    checked: Option<std::time::Instant>,
    limit: LogLimit,
    /// Changes the file refused (a full disk, no descriptor left), oldest first: written
    /// before the next ones, each second or with the next change (at most
    /// [`FILE_HELD_BYTES`]; past that the oldest are given up, logged: the store has them).
    held: Vec<Change>,
}

/// Most JSON held for the output file while it refuses changes.
const FILE_HELD_BYTES: usize = 64 << 20;

impl FileOutput {
    /// The file to write to now: the one open, unless the path names another file or none.
    fn current(&mut self) -> std::io::Result<&mut std::fs::File> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let now = std::time::Instant::now();
        let due = self
            .checked
            .is_none_or(|t| now.duration_since(t) >= std::time::Duration::from_secs(1));
        if due {
            self.checked = Some(now);
            let ino = std::fs::metadata(&self.path).ok().map(|m| m.ino());
            if ino.is_none() || self.open.as_ref().map(|(_, i)| *i) != ino {
                self.open = None;
            }
        }
        if self.open.is_none() {
            // Never through a symlink (another user planting one in the folder, even after a
            // rotation removed the file, would have alerts appended to a file of theirs
            // choosing), and never to a file another user owns.
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .mode(0o640)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&self.path)
                .map_err(|e| {
                    if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                        std::io::Error::other(format!(
                            "{} is a symbolic link: alerts are not written through one",
                            self.path.display()
                        ))
                    } else {
                        e
                    }
                })?;
            let meta = f.metadata()?;
            let me = rustix::process::geteuid().as_raw();
            if meta.uid() != me {
                return Err(std::io::Error::other(format!(
                    "{} belongs to another user (uid {}): alerts are not written to it",
                    self.path.display(),
                    meta.uid()
                )));
            }
            if !meta.is_file() {
                return Err(std::io::Error::other(format!(
                    "{} is not a regular file",
                    self.path.display()
                )));
            }
            // A last line cut short (a crash or a full disk in the middle of a write) is ended
            // here, so the next change starts a line of its own rather than gluing to it.
            if meta.len() > 0 {
                use std::os::unix::fs::FileExt;
                let mut last = [0u8; 1];
                f.read_exact_at(&mut last, meta.len() - 1)?;
                if last[0] != b'\n' {
                    f.write_all(b"\n")?;
                }
            }
            self.open = Some((f, meta.ino()));
        }
        match &mut self.open {
            Some((f, _)) => Ok(f),
            None => Err(std::io::Error::other("no file")),
        }
    }

    /// The changes of `alerts` that the file's end does not hold already: what a crash
    /// between appending and noting it in the store (the changes a restart writes out
    /// again) left there is not appended twice. The file's last [`TAIL_BYTES`] are read; a
    /// file rotated since holds none of them.
    fn missing(&self, alerts: &[Change]) -> Vec<Change> {
        use std::io::{Read, Seek, SeekFrom};
        let mut tail = Vec::new();
        let read = std::fs::File::open(&self.path).and_then(|mut f| {
            let len = f.metadata()?.len();
            f.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))?;
            f.take(TAIL_BYTES).read_to_end(&mut tail)
        });
        if read.is_err() {
            return alerts.to_vec();
        }
        let held: std::collections::HashSet<(String, String)> = tail
            .split(|b| *b == b'\n')
            .filter_map(|line| {
                let v: serde_json::Value = serde_json::from_slice(line).ok()?;
                Some((
                    v["id"].as_str()?.to_string(),
                    v["state"].as_str()?.to_string(),
                ))
            })
            .collect();
        alerts
            .iter()
            .filter(|a| {
                let id = cepheus_core::alert::AlertId(a.id).to_string();
                !held.contains(&(id, a.state.name().to_string()))
            })
            .cloned()
            .collect()
    }

    /// Appends the changes it holds (those the file's end does not have already), then the
    /// batch; a failure is counted (`file_unwritten`, each change once) and logged at most
    /// once a minute, the changes held for the next try, and the file opened again then
    /// (found by an audit: a change refused once was never written).
    fn write(&mut self, alerts: &[Change], counters: &SinkCounters) {
        let retried = std::mem::take(&mut self.held);
        let retried = if retried.is_empty() {
            retried
        } else {
            self.missing(&retried)
        };
        if alerts.is_empty() && retried.is_empty() {
            return;
        }
        let mut text = Vec::new();
        for a in retried.iter().chain(alerts) {
            text.extend_from_slice(a.json.as_bytes());
            text.push(b'\n');
        }
        let written = self.current().and_then(|f| f.write_all(&text));
        match written {
            Ok(()) if !retried.is_empty() => {
                tracing::info!(
                    alert_changes = retried.len(),
                    file = %self.path.display(),
                    "output.file takes changes again: the ones it refused are written"
                );
            }
            Ok(()) => {}
            Err(e) => {
                self.open = None;
                bump(&counters.file_unwritten, alerts.len() as u64);
                if let Some(held) = self.limit.allow() {
                    tracing::error!(error = %e, file = %self.path.display(), held_back = held, "cannot append alerts to output.file: held, and tried again each second (the store keeps them)");
                }
                let mut held = retried;
                held.extend_from_slice(alerts);
                let mut bytes: usize = held.iter().map(|c| c.json.len() + 1).sum();
                let mut drop = 0;
                while bytes > FILE_HELD_BYTES && drop < held.len() {
                    bytes -= held[drop].json.len() + 1;
                    drop += 1;
                }
                if drop > 0 {
                    held.drain(..drop);
                    tracing::error!(
                        given_up = drop,
                        file = %self.path.display(),
                        "output.file refused more changes than are held for it: the oldest given up (the store keeps them)"
                    );
                }
                self.held = held;
            }
        }
    }

    /// Whether it holds changes the file refused.
    fn holds(&self) -> bool {
        !self.held.is_empty()
    }
}

impl AlertSink {
    /// A sink keeping alerts in `store` and writing them as JSON lines to stdout when
    /// `stdout`.
    pub fn new(stdout: bool, counters: Arc<SinkCounters>, store: Option<Store>) -> AlertSink {
        let out = stdout.then(|| Box::new(std::io::stdout()) as Box<dyn Write + Send>);
        let mut sink = AlertSink::with_writer(out, counters);
        sink.store = store;
        sink
    }

    /// A sink writing JSON lines to `out`, from a thread of its own (tests give a writer
    /// that fails). A thread that cannot be started leaves stdout unwritten (said in the log).
    pub fn with_writer(
        out: Option<Box<dyn Write + Send>>,
        counters: Arc<SinkCounters>,
    ) -> AlertSink {
        let stdout_wrote: Arc<(std::sync::OnceLock<Recipient<StdoutWrote>>, _)> = Arc::new((
            std::sync::OnceLock::new(),
            std::sync::atomic::AtomicBool::new(false),
        ));
        let told = stdout_wrote.clone();
        let stdout = out.and_then(|out| {
            let wrote = move || {
                if let Some(r) = told.0.get()
                    && !told.1.swap(true, Ordering::AcqRel)
                {
                    r.do_send(StdoutWrote);
                }
            };
            super::stdout::StdoutWriter::start(out, counters.clone(), wrote)
                .map_err(|e| tracing::error!(error = %e, "cannot start the thread writing alerts to stdout: they are not written there"))
                .ok()
        });
        AlertSink {
            stdout,
            stdout_wrote,
            counters,
            store: None,
            store_limit: LogLimit::new(60_000),
            prune_limit: LogLimit::new(60_000),
            file: None,
            forwarder: None,
            webhook: None,
            stream: None,
            max_age: None,
            adopting: None,
            space: Space::default(),
            unkept: Default::default(),
            unkept_bytes: 0,
            unkept_dirty: false,
            unkept_max: UNKEPT_MAX_BYTES,
            fired_since_reload: Default::default(),
            retired_through: 0,
            meanings: Default::default(),
            silences: Vec::new(),
            inhibits: Vec::new(),
            inhibitors: Default::default(),
            episodic: Default::default(),
            reconcile_due: false,
            silences_unread: false,
        }
    }

    /// The `[[inhibit]]` rules of the configuration.
    pub fn with_inhibits(mut self, inhibits: Vec<super::silence::InhibitRule>) -> AlertSink {
        self.inhibits = inhibits;
        self
    }

    /// The meanings of the rules the agent starts with ([`meanings_of`]), kept with their
    /// alerts.
    pub fn with_meanings(mut self, meanings: Arc<RuleMeanings>) -> AlertSink {
        self.meanings.insert(0, meanings);
        self
    }

    /// The rules' meanings as reload `generation` made them (the latest known for a later
    /// one), if known.
    fn meanings_at(&self, generation: u64) -> Option<Arc<RuleMeanings>> {
        let (_, m) = self.meanings.range(..=generation).next_back()?;
        Some(m.clone())
    }

    /// The meanings of the rules the engines ran when the sink last heard that all had
    /// taken them (at start, the rules the agent started with, even while a reload goes
    /// from shard to shard).
    fn meanings_settled(&self) -> Option<Arc<RuleMeanings>> {
        self.meanings.values().next().cloned()
    }

    /// Keeps the changes waiting for the store, if it can take them now (they were written
    /// out when they came, and are noted so); returns whether none waits.
    fn catch_up(&mut self) -> bool {
        if self.unkept.is_empty() {
            return true;
        }
        let Some(store) = self.writable_store().cloned() else {
            return false;
        };
        let mut waiting: Vec<Change> = std::mem::take(&mut self.unkept).into();
        // Not noted written out while the output file holds changes it refused: a restart
        // writes them out again (found by a review: a store that had been low on space
        // noted them here, and the file never got them).
        let file_holds = self.file_holds();
        let result = store.record_changes(&mut waiting).and_then(|_| {
            if file_holds {
                Ok(())
            } else {
                self.mark_out(&store)
            }
        });
        match result {
            Ok(()) => {
                tracing::info!(
                    alert_changes = waiting.len(),
                    "kept in the store the alert changes written out while it could not keep them"
                );
                // The outputs had them (without a place): their cursors may pass them now,
                // or a restart would send them again.
                if let Some(last) = waiting.iter().filter_map(|c| c.seq).max() {
                    for (_, output) in self.queued() {
                        output.mark(last);
                    }
                }
                // The live stream had them without a place: again, with it, so that a client
                // that resumed meanwhile (its replay ended before they were kept) gets them.
                self.offer_to_stream(waiting.iter().filter(|c| c.seq.is_some()));
                // What muted a firing written out meanwhile may have ended meanwhile: settled
                // once the batch being taken is kept too (its ends are marked by then), and at
                // the start once the engines said which alerts are episodes.
                self.reconcile_due = true;
                self.unkept_bytes = 0;
                self.unkept_dirty = true;
                self.counters.store_waiting.store(0, Ordering::Relaxed);
                self.count_pruned();
                true
            }
            Err(e) => {
                // (Tried again whole: what a transaction kept before the error is known to
                // the store by id and state, and not kept twice.)
                bump(&self.counters.store_errors, 1);
                if let Some(held) = self.store_limit.allow() {
                    tracing::error!(error = %e, held_back = held, waiting = waiting.len(), "cannot keep the alert changes waiting for the store; tried again later");
                }
                self.unkept = waiting.into();
                false
            }
        }
    }

    /// Keeps aside, beside the shards' states, the changes waiting for the store (or removes
    /// what was kept aside once none waits), when that changed since the last time.
    fn save_unkept(&mut self) {
        if !self.unkept_dirty {
            return;
        }
        let Some(store) = self.store.as_ref() else {
            return;
        };
        // A firing's rule meaning goes with it (a line of its own shape), so a restart tells
        // an earlier form's alert from the current one's for these too.
        let lines: Vec<std::borrow::Cow<'_, str>> = self
            .unkept
            .iter()
            .map(|c| match c.meaning {
                Some(m) => format!("{{\"meaning\":\"{m:016x}\",\"change\":{}}}", c.json).into(),
                None => c.json.as_str().into(),
            })
            .collect();
        let jsons: Vec<&str> = lines.iter().map(|l| l.as_ref()).collect();
        match store.save_unkept(&jsons) {
            Ok(()) => self.unkept_dirty = false,
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                if let Some(held) = self.store_limit.allow() {
                    tracing::error!(error = %e, waiting = jsons.len(), held_back = held, "cannot keep aside the alert changes waiting for the store: a restart now would not keep them");
                }
            }
        }
    }

    /// [`AlertSink::hold_unkept`], then kept if the store can.
    #[cfg(test)]
    fn load_unkept(&mut self) {
        self.hold_unkept();
        self.catch_up();
        self.save_unkept();
    }

    /// What an earlier run kept aside for the store ([`AlertSink::save_unkept`]): waiting
    /// again (not written out again: the outputs had them), to be kept when the store can.
    fn hold_unkept(&mut self) {
        let Some(store) = self.store.as_ref() else {
            return;
        };
        let jsons = match store.unkept() {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the alert changes the last run kept aside for the store");
                return;
            }
        };
        if jsons.is_empty() {
            return;
        }
        let changes: Vec<Change> = jsons.into_iter().filter_map(unkept_change).collect();
        // They were firing (or ended) when the last run died: the start's reckoning
        // (`adopt`, the restart's `Retire`) counts them with the store's.
        if let Some(a) = &mut self.adopting {
            let mut last: std::collections::HashMap<u64, AlertState> = Default::default();
            for c in &changes {
                last.insert(c.id, c.state);
            }
            a.firing.extend(
                last.into_iter()
                    .filter(|(_, s)| *s == AlertState::Firing)
                    .map(|(id, _)| id),
            );
        }
        tracing::info!(
            alert_changes = changes.len(),
            "the last run kept aside alert changes its store could not take: keeping them now"
        );
        self.hold(&changes);
    }

    /// Adds changes written out but not kept to those waiting for the store.
    fn hold(&mut self, changes: &[Change]) {
        if !changes.is_empty() {
            self.unkept_dirty = true;
        }
        for c in changes {
            self.unkept_bytes += c.json.len();
            self.unkept.push_back(c.clone());
        }
        let mut dropped = 0;
        while self.unkept_bytes > self.unkept_max {
            let Some(c) = self.unkept.pop_front() else {
                break;
            };
            self.unkept_bytes -= c.json.len();
            dropped += 1;
        }
        if dropped > 0 {
            bump(&self.counters.store_dropped, dropped);
            if let Some(held) = self.store_limit.allow() {
                tracing::error!(
                    dropped,
                    held_back = held,
                    "alert changes waiting for the store passed 64 MiB: the oldest will never be kept (they went to the outputs)"
                );
            }
        }
        self.counters
            .store_waiting
            .store(self.unkept.len() as u64, Ordering::Relaxed);
    }

    /// The store, unless its file system is nearly full: then nothing is written to it (it
    /// resumes by itself once space is freed), counted and said in the log.
    fn writable_store(&mut self) -> Option<&Store> {
        let store = self.store.as_ref()?;
        let now = std::time::Instant::now();
        if self
            .space
            .checked
            .is_none_or(|t| now.duration_since(t) >= std::time::Duration::from_secs(1))
        {
            self.space.checked = Some(now);
            let free = rustix::fs::statvfs(store.path())
                .ok()
                .map(|v| v.f_bavail.saturating_mul(v.f_frsize));
            let low = free.is_some_and(|f| f < self.space.min_free);
            if low != self.space.low {
                match free {
                    Some(f) if low => tracing::error!(
                        free_mb = f >> 20,
                        store = %store.path().display(),
                        "the store's disk is nearly full: alerts and state are not kept until space is freed (they still go to the outputs)"
                    ),
                    _ => tracing::info!(
                        "the store's disk has room again: alerts and state are kept again"
                    ),
                }
            }
            self.space.low = low;
        }
        if self.space.low {
            bump(&self.counters.store_errors, 1);
            return None;
        }
        self.store.as_ref()
    }

    /// Reckons at start the alerts the store has firing against those the `shards` engines
    /// hold (each says so with an [`Adopt`]).
    pub fn adopting(mut self, shards: usize) -> AlertSink {
        let Some(store) = &self.store else {
            return self;
        };
        let firing = match store.firing() {
            Ok(f) => f
                .iter()
                .filter_map(|a| {
                    let v: serde_json::Value = serde_json::from_str(&a.json).ok()?;
                    let id: cepheus_core::alert::AlertId = v["id"].as_str()?.parse().ok()?;
                    Some(id.0)
                })
                .collect(),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the firing alerts of the last run");
                return self;
            }
        };
        self.adopting = Some(Adopting {
            firing,
            held: Default::default(),
            waiting: (0..shards).collect(),
            episodic: Default::default(),
            running: Default::default(),
        });
        self
    }

    /// Drops the store's alert changes older than `max_age` (`store.max_age`), every minute.
    pub fn with_max_age(mut self, max_age: Option<cepheus_core::time::Duration>) -> AlertSink {
        self.max_age = max_age;
        self
    }

    /// One pass of `store.max_age`: at most [`AGE_PRUNE_BATCH`] changes, so a large backlog
    /// (the key just set on a full store) goes over several minutes without holding the sink.
    fn prune_by_age(&mut self) {
        let Some(age) = self.max_age else {
            return;
        };
        let cutoff = crate::flow::live::wall_clock().sub(age);
        let Some(store) = self.writable_store() else {
            return;
        };
        match store.prune_older_than(cutoff, AGE_PRUNE_BATCH) {
            Ok(0) => {}
            Ok(n) => {
                tracing::debug!(
                    alert_changes = n,
                    "dropped alert changes older than store.max_age"
                );
                self.count_pruned();
            }
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                if let Some(held) = self.store_limit.allow() {
                    tracing::error!(error = %e, held_back = held, "cannot drop alert changes older than store.max_age");
                }
            }
        }
    }

    /// Also offers the alert changes to the subscribers of `tx` (`GET /alerts/stream`).
    pub fn with_stream(mut self, tx: tokio::sync::broadcast::Sender<Streamed>) -> AlertSink {
        self.stream = Some(tx);
        self
    }

    /// Also posts the alert changes to `output.webhook`, when set.
    pub fn with_webhook(mut self, w: Option<super::webhook::Webhook>) -> AlertSink {
        self.webhook = w;
        self
    }

    /// Also forwards the alert changes to a syslog collector (`output.syslog`), when set.
    pub fn with_forwarder(mut self, f: Option<super::forward::Forwarder>) -> AlertSink {
        self.forwarder = f;
        self
    }

    /// Also appends the alert changes to `path` (`output.file`), when set.
    pub fn with_file(mut self, path: Option<std::path::PathBuf>) -> AlertSink {
        self.file = path.map(|path| FileOutput {
            path,
            open: None,
            checked: None,
            limit: LogLimit::new(60_000),
            held: Vec::new(),
        });
        self
    }

    /// Offers changes to the live stream's subscribers (`GET /alerts/stream`), with their
    /// places in the store when kept.
    fn offer_to_stream<'c>(&self, changes: impl Iterator<Item = &'c Change>) {
        if let Some(tx) = self.stream.as_ref().filter(|tx| tx.receiver_count() > 0) {
            for c in changes {
                let json = (c.seq.is_none() || c.json.len() <= STREAM_INLINE)
                    .then(|| Arc::from(c.json.as_str()));
                // (None listening any more: nothing to do.)
                let _ = tx.send((c.seq, json));
            }
        }
    }

    /// Writes kept changes to every output (stdout, the file, the collector), then notes in
    /// the store that they were written.
    fn emit(&mut self, fresh: &[Change]) {
        self.emit_to(fresh, false);
    }

    /// [`AlertSink::emit`]; with `again` (changes an earlier run may have written before it
    /// died), the file gets only those its end does not hold, and the outputs with a cursor
    /// in the store none (they catch up from it: [`AlertSink::resend_undelivered`]).
    fn emit_to(&mut self, fresh: &[Change], again: bool) {
        self.write(fresh);
        if let Some(f) = &mut self.file {
            if again {
                let missing = f.missing(fresh);
                f.write(&missing, &self.counters);
            } else {
                f.write(fresh, &self.counters);
            }
        }
        if !again {
            for (_, output) in self.queued() {
                output.send(fresh);
            }
        }
        self.count_pruned();
        self.offer_to_stream(fresh.iter());
        if !fresh.is_empty() {
            self.note_written_out();
        }
    }

    /// Whether the output file holds changes it refused: until it takes them, the store must
    /// not note changes written out, so that a restart writes them out again.
    fn file_holds(&self) -> bool {
        self.file.as_ref().is_some_and(FileOutput::holds)
    }

    /// Notes in the store that the changes kept so far are written out (not while the
    /// output file holds refused ones); a failure is counted and said.
    fn note_written_out(&mut self) {
        if !self.file_holds()
            && let Some(store) = self.writable_store().cloned()
            && let Err(e) = self.mark_out(&store)
        {
            bump(&self.counters.store_errors, 1);
            tracing::warn!(error = %e, "cannot note the alerts written out (a restart may write them again)");
        }
    }

    /// The changes the output file refused, tried again (each second), and noted written
    /// in the store once the file took them.
    fn retry_file(&mut self) {
        let Some(f) = self.file.as_mut() else {
            return;
        };
        if !f.holds() {
            // Moved away by logrotate or removed: made anew now (within a second), not at
            // the next change, so a shipper following the path finds it. (A failure is the
            // next write's to say.)
            let _ = f.current();
            return;
        }
        f.write(&[], &self.counters);
        self.note_written_out();
    }

    /// The changes an earlier run kept but did not write out (it died between the two):
    /// written now, before anything new.
    fn emit_unwritten(&mut self) {
        let Some(store) = &self.store else {
            return;
        };
        let left = match store.unwritten() {
            Ok(l) => l,
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                tracing::error!(error = %e, "cannot read the alerts an earlier run did not write out");
                return;
            }
        };
        if left.is_empty() {
            return;
        }
        tracing::info!(
            alerts = left.len(),
            "writing out the alert changes kept but not written before the last stop"
        );
        let changes: Vec<Change> = left.into_iter().filter_map(stored_change).collect();
        self.emit_to(&changes, true);
    }

    /// What `output.syslog` and `output.webhook` had not dealt with (delivered or given up)
    /// when the agent last stopped or died, by their cursors in the store: queued again,
    /// before anything new, up to their queues' size. An output new to the store starts
    /// from now.
    fn resend_undelivered(&mut self) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let present = self.output_names();
        for name in [super::forward::CURSOR, super::webhook::CURSOR] {
            if !present.contains(&name) {
                // Not configured now: configured again later, it starts from then, not with
                // the changes of the weeks between.
                if let Err(e) = store.forget_output_cursor(name) {
                    tracing::debug!(output = name, error = %e, "cannot forget the output's place");
                }
            }
        }
        for (name, output) in self.queued() {
            let from = match store.output_cursor(name) {
                Ok(cepheus_store::OutputCursor::After(s)) => s,
                // New to the store: it starts from now, with what an earlier run kept but
                // did not write out before it died (the outputs that then wrote out that
                // far: a store from before the cursors, or an output just configured).
                Ok(cepheus_store::OutputCursor::Unknown) => {
                    let from = store.written_through().ok().flatten();
                    if let Err(e) = store.set_output_cursor(name, from) {
                        tracing::warn!(output = name, error = %e, "cannot note where the output starts");
                    }
                    from
                }
                Err(e) => {
                    tracing::error!(output = name, error = %e, "cannot read what the output had delivered: what it had not is not sent again");
                    continue;
                }
            };
            // What is left after its cursor is paged in from the store, in order, as its
            // queue drains (`page_outputs`), however much it is.
            match store.changes_after(from, 1) {
                Ok(left) if !left.is_empty() => {
                    tracing::info!(
                        output = name,
                        "sending again, in order, the alert changes the output had not delivered when the agent stopped"
                    );
                    output.resume(from);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(output = name, error = %e, "cannot read the alert changes the output had not delivered");
                }
            }
        }
        self.resend_owed(&store);
        self.page_outputs();
    }

    /// The firings sent again when what muted them ended that the outputs had not dealt
    /// with when the agent stopped or died: queued again, each at its place in the order,
    /// if it still fires and nothing mutes it now (else owed no more).
    fn resend_owed(&self, store: &Store) {
        let owed = match store.resends() {
            Ok(o) => o,
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                tracing::error!(error = %e, "cannot read the alerts sent again that the outputs had not delivered: they are not sent again");
                return;
            }
        };
        let mut sent = 0;
        for r in owed {
            let firing = match (store.firing_change(r.id), store.mutes(r.id)) {
                (Ok(Some(json)), Ok(None)) => Some(json),
                (Ok(_), Ok(_)) => None,
                (Err(e), _) | (_, Err(e)) => {
                    bump(&self.counters.store_errors, 1);
                    tracing::warn!(error = %e, "cannot read an alert sent again that the outputs had not delivered");
                    continue;
                }
            };
            for name in &r.to {
                let output = firing
                    .as_ref()
                    .and_then(|_| self.queued().find(|(n, _)| n == name));
                let (Some(json), Some((_, output))) = (&firing, output) else {
                    // Ended, muted anew, or an output not configured any more.
                    if let Err(e) = store.resent(r.id, name) {
                        tracing::debug!(output = %name, error = %e, "cannot drop an alert sent again no more owed");
                    }
                    continue;
                };
                let change = Change {
                    id: r.id,
                    state: AlertState::Firing,
                    json: json.clone(),
                    seq: None,
                    meaning: None,
                };
                output.send_again(r.after, std::slice::from_ref(&change));
                sent += 1;
            }
        }
        if sent > 0 {
            tracing::info!(
                alerts = sent,
                "sending again the alerts, still firing, whose silence or inhibiting alert had ended but that the outputs had not delivered when the agent stopped"
            );
        }
    }

    /// Feeds the outputs whose queue fell behind (a storm, a collector away) from the store,
    /// in order, as their queues drain: nothing the store keeps is dropped for want of room.
    fn page_outputs(&mut self) {
        let Some(store) = self.store.clone() else {
            return;
        };
        // What the store pruned since (a catch-up's write prunes too) is counted before any
        // paging moves past it.
        self.count_pruned();
        for (name, output) in self.queued() {
            let Some((after, room)) = output.behind() else {
                continue;
            };
            if room == 0 {
                continue;
            }
            match store.changes_after(after, room) {
                Ok(left) => {
                    let all = left.len() < room;
                    let changes: Vec<Change> = left.into_iter().filter_map(stored_change).collect();
                    output.page(&changes, all);
                }
                Err(e) => {
                    bump(&self.counters.store_errors, 1);
                    tracing::warn!(output = name, error = %e, "cannot read the alert changes waiting for the output: tried again in a second");
                }
            }
        }
    }

    /// Counts, for each output behind, the changes the store pruned (`store.max_alerts`,
    /// `store.max_age`) before its queue took them: it never will, and says so, rather than
    /// skip them silently. (Called after the changes of a write went to the outputs: a queue
    /// takes in order, so what it took is at or before where it is behind from.)
    fn count_pruned(&mut self) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let pruned = store.take_pruned();
        if pruned.is_empty() {
            return;
        }
        for (name, output) in self.queued() {
            let Some((after, _)) = output.behind() else {
                continue;
            };
            let lost = pruned
                .iter()
                .filter(|&&s| after.is_none_or(|a| s > a))
                .count() as u64;
            if lost > 0 {
                output.lost(lost);
                if let Some(held) = self.prune_limit.allow() {
                    tracing::warn!(
                        output = name,
                        alert_changes = lost,
                        held_back = held,
                        "alert changes waiting for the output were pruned from the store (store.max_alerts or store.max_age) before it could send them: counted as unsent"
                    );
                }
            }
        }
    }

    /// The names (as their cursors') of the outputs behind a queue that are configured: those
    /// a firing sent again is owed to until each deals with it
    /// ([`cepheus_store::Store::resends`]).
    fn output_names(&self) -> Vec<&'static str> {
        self.queued().map(|(name, _)| name).collect()
    }

    /// The outputs behind a queue that are configured (`output.syslog`, `output.webhook`):
    /// each with its name among the store's cursors.
    fn queued(&self) -> impl Iterator<Item = (&'static str, &dyn QueuedOutput)> {
        let forwarder = self.forwarder.as_ref().map(|f| {
            let f: &dyn QueuedOutput = f;
            (super::forward::CURSOR, f)
        });
        let webhook = self.webhook.as_ref().map(|w| {
            let w: &dyn QueuedOutput = w;
            (super::webhook::CURSOR, w)
        });
        forwarder.into_iter().chain(webhook)
    }

    /// One batch from a shard: counted, rendered (once), kept, and what is new written out.
    fn take(&mut self, alerts: Vec<Alert>, generation: u64) {
        self.counters
            .alerts
            .fetch_add(alerts.len() as u64, Ordering::Relaxed);
        // Rendered, kept and written out a slice at a time: a storm's batch (150,000 alerts
        // from one shard) rendered whole held every JSON text at once (77 MB at 300,000).
        let meanings = self.meanings_at(generation);
        let now = crate::flow::live::wall_clock();
        for part in alerts.chunks(TAKE_CHUNK) {
            let mut changes: Vec<Change> = Vec::with_capacity(part.len());
            let mut ended = Vec::new();
            for a in part {
                if self.episodic.get(a.rule()) != Some(&a.episodic()) {
                    self.episodic.insert(a.rule().to_string(), a.episodic());
                }
                let mut c = Change {
                    meaning: meanings
                        .as_ref()
                        .filter(|_| a.state == AlertState::Firing)
                        .and_then(|m| m.get(a.rule()).copied()),
                    ..Change::of(a)
                };
                if a.state == AlertState::Firing
                    && let Some((field, mark)) = self.muting(
                        c.id,
                        (a.rule(), Some(a.severity())),
                        a.group(),
                        (now, a.time),
                        Besides::default(),
                    )
                {
                    c.json = cepheus_store::with_field(&c.json, field, mark.to_string().as_bytes());
                }
                // (In order: an inhibitor firing mutes what fires after it in the batch.)
                // (A match's alert never ends: it inhibits nothing.)
                if !self.inhibits.is_empty()
                    && a.episodic()
                    && self.note_inhibitor(
                        c.id,
                        a.rule(),
                        a.group(),
                        (a.state == AlertState::Firing).then_some(a.time),
                    )
                {
                    ended.push(c.id);
                }
                changes.push(c);
            }
            self.mark_muted_ends(&mut changes);
            let fresh = self.keep(changes);
            self.count_muted(&fresh);
            self.emit(&fresh);
            // (After the batch is kept: what the ended inhibitors muted is in the store.)
            self.unmute_inhibited(&ended);
            self.reconcile_if_due();
        }
    }

    /// [`AlertSink::reconcile_mutes`] when the store kept what waited for it, once no start
    /// reckoning is pending (which settles them all).
    fn reconcile_if_due(&mut self) {
        if self.reconcile_due && self.adopting.is_none() {
            self.reconcile_due = false;
            self.reconcile_mutes();
        }
    }

    /// Resolves made by the sink itself, of alerts no engine holds (`forgotten`,
    /// `rule_changed`, `rule_removed`, `state_lost`): counted as the shards' are, kept, and
    /// what is new written out.
    fn resolve_held_by_none(&mut self, mut changes: Vec<Change>) {
        bump(&self.counters.alerts, changes.len() as u64);
        self.mark_muted_ends(&mut changes);
        let fresh = self.keep(changes);
        self.emit(&fresh);
        self.note_inhibitors_ended(&fresh);
        self.reconcile_if_due();
    }

    /// Keeps a batch in the store; returns the changes it did not have before (all of them
    /// when it cannot be written: written out, and kept once it can).
    fn keep(&mut self, mut alerts: Vec<Change>) -> Vec<Change> {
        if self.store.is_none() {
            return alerts;
        }
        if !self.catch_up() {
            self.hold(&alerts);
            return alerts;
        }
        let Some(store) = self.writable_store() else {
            self.hold(&alerts);
            return alerts;
        };
        match store.record_changes(&mut alerts) {
            Ok(fresh) => {
                let before = alerts.len();
                let kept: Vec<Change> = alerts
                    .into_iter()
                    .zip(fresh)
                    .filter_map(|(a, new)| new.then_some(a))
                    .collect();
                bump(&self.counters.alerts_repeated, (before - kept.len()) as u64);
                kept
            }
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                if let Some(held) = self.store_limit.allow() {
                    tracing::error!(error = %e, held_back = held, alerts = alerts.len(), "cannot keep alerts in the store; written out, and kept once it can");
                }
                self.hold(&alerts);
                alerts
            }
        }
    }

    /// Hands one batch to stdout's thread (which counts and says what it cannot write).
    fn write(&mut self, alerts: &[Change]) {
        if let Some(out) = &self.stdout {
            out.push(alerts);
        }
    }

    /// Waits until stdout's thread wrote what it was given, then notes it in the store (what
    /// the thread's word does in the running agent).
    #[cfg(test)]
    pub(crate) fn settle(&mut self) {
        if let Some(out) = &self.stdout {
            assert!(out.drain(std::time::Instant::now() + std::time::Duration::from_secs(10)));
        }
        self.note_written_out();
    }

    /// Notes in the store that the changes kept so far are written out: as far as stdout's
    /// thread has written them, when lines wait for it.
    fn mark_out(&self, store: &Store) -> Result<(), cepheus_store::StoreError> {
        match &self.stdout {
            Some(out) if !out.idle() => match out.written_through() {
                Some(seq) => store.mark_written_through(seq),
                None => Ok(()),
            },
            _ => store.mark_written(),
        }
    }
}

/// Alert changes one pass of `store.max_age` drops at most.
const AGE_PRUNE_BATCH: usize = 20_000;

/// Capacity of the sink's mailbox (batches).
pub const MAILBOX: usize = 4096;

impl Actor for AlertSink {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX);
        let _ = self.stdout_wrote.0.set(ctx.address().recipient());
        self.start_up();
        // (What a storm of alert changes rendered and wrote, given back once it is over.)
        ctx.run_interval(super::mem::EVERY, |_, _| super::mem::collect());
        ctx.run_interval(CATCH_UP_EVERY, |act, _| {
            act.catch_up();
            act.reconcile_if_due();
        });
        ctx.run_interval(std::time::Duration::from_secs(1), |act, _| {
            act.page_outputs();
            act.retry_file();
            // (At the start, once the engines said which alerts are episodes.)
            if act.adopting.is_none() {
                act.end_silences();
            }
        });
        if self.max_age.is_some() {
            self.prune_by_age();
            ctx.run_interval(std::time::Duration::from_secs(60), |act, _| {
                act.prune_by_age()
            });
        }
    }
}

impl AlertSink {
    /// What the sink does with its store before any shard speaks: what the outputs had not
    /// dealt with, what was kept but not written out, what the store could not keep (held
    /// first, so that the silences and the inhibiting alerts are known with it, then kept);
    /// what muted alerts is settled now, or once the engines said which rules' alerts are
    /// episodes (`Adopt`).
    fn start_up(&mut self) {
        self.resend_undelivered();
        self.emit_unwritten();
        self.hold_unkept();
        self.load_silences();
        self.load_inhibitors();
        // (After those: keeping these notes them written out, and moves the outputs past
        // them, as they had them.)
        self.catch_up();
        self.save_unkept();
        if self.adopting.is_none() {
            self.settle_mutes();
        }
    }

    /// What ended while the agent was down, or before a crash, or while the store could not
    /// keep it: the silences whose end came, and the muted alerts whose silence or
    /// inhibiting alert no longer mutes them.
    fn settle_mutes(&mut self) {
        // A match's alert never ends: it inhibits nothing (it would for ever).
        let episodic = &self.episodic;
        let inhibits = &self.inhibits;
        self.inhibitors.retain(|(i, _), _| {
            inhibits
                .get(*i)
                .is_some_and(|r| episodic.get(&r.source) != Some(&false))
        });
        self.reconcile_due = false;
        self.end_silences();
        self.reconcile_mutes();
    }
}

impl Handler<Alerts> for AlertSink {
    type Result = ();

    fn handle(&mut self, msg: Alerts, _: &mut Self::Context) {
        if msg.1 > self.retired_through {
            for a in msg.0.iter().filter(|a| a.state == AlertState::Firing) {
                self.fired_since_reload.insert(a.id().0, msg.1);
            }
        }
        self.take(msg.0, msg.1);
    }
}

impl Handler<Meanings> for AlertSink {
    type Result = ();

    fn handle(&mut self, msg: Meanings, _: &mut Self::Context) {
        self.meanings.insert(msg.0, msg.1);
    }
}

impl Handler<Adopt> for AlertSink {
    type Result = ();

    fn handle(&mut self, msg: Adopt, _: &mut Self::Context) {
        self.adopt(msg);
    }
}

impl AlertSink {
    /// A shard's word on the alerts its engine holds; once every shard has said, the ones
    /// firing at start that none holds are resolved (`state_lost`, `rule_removed`).
    fn adopt(&mut self, msg: Adopt) {
        let Some(a) = &mut self.adopting else {
            return;
        };
        if !a.waiting.remove(&msg.shard) {
            return;
        }
        a.held.extend(msg.ids);
        for r in &msg.running {
            self.episodic.insert(r.clone(), msg.episodic.contains(r));
        }
        a.episodic.extend(msg.episodic);
        a.running.extend(msg.running);
        if !a.waiting.is_empty() {
            return;
        }
        let Some(a) = self.adopting.take() else {
            return;
        };
        self.reckon(a);
        // (Now that the engines said which rules' alerts are episodes.)
        self.settle_mutes();
    }

    /// Every shard said: the store's firing alerts that no engine holds are resolved.
    fn reckon(&mut self, a: Adopting) {
        // (An alert whose end waits for the store, its disk still nearly full, is not lost:
        // that end is kept as soon as the store can.)
        // (Its last waiting change is what counts: a rule that rejoins a state across reloads
        // may end an id and fire it again.)
        let mut last: std::collections::HashMap<u64, AlertState> = Default::default();
        for c in &self.unkept {
            last.insert(c.id, c.state);
        }
        let ended: std::collections::HashSet<u64> = last
            .into_iter()
            .filter(|(_, s)| *s != AlertState::Firing)
            .map(|(id, _)| id)
            .collect();
        let lost: std::collections::HashSet<u64> = a
            .firing
            .difference(&a.held)
            .filter(|id| !ended.contains(id))
            .copied()
            .collect();
        let (Some(store), false) = (&self.store, lost.is_empty()) else {
            return;
        };
        let now = crate::flow::live::wall_clock();
        let settled = self.meanings_settled();
        let changes: Vec<Change> = match store.firing() {
            Ok(f) => f
                .iter()
                .filter_map(|f| {
                    let v: serde_json::Value = serde_json::from_str(&f.json).ok()?;
                    let rule = v["rule"].as_str()?;
                    // A rule no engine runs any more (removed while its state was not
                    // continued), else an episode no engine holds.
                    let reason = if !a.running.contains(rule) {
                        Reason::RuleRemoved
                    } else if f.meaning.is_some_and(|m| {
                        settled.as_ref().and_then(|s| s.get(rule).copied()) != Some(m)
                    }) {
                        // Kept with a form of its rule that no longer runs (a crash between
                        // a reload's saves and the resolve of its match alerts).
                        Reason::RuleChanged
                    } else if a.episodic.contains(rule) {
                        Reason::StateLost
                    } else {
                        return None;
                    };
                    let c = resolved_change(&f.json, reason, now)?;
                    lost.contains(&c.id).then_some(c)
                })
                .collect(),
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                tracing::error!(error = %e, "cannot read the firing alerts whose state was lost: they stay firing");
                return;
            }
        };
        if changes.is_empty() {
            return;
        }
        tracing::warn!(
            alerts = changes.len(),
            "resolving the alerts firing before the restart that no engine holds any more (state_lost; rule_removed for rules no longer running; rule_changed for a match an earlier form of its rule fired)"
        );
        self.resolve_held_by_none(changes);
    }
}

impl Handler<Retire> for AlertSink {
    type Result = ();

    fn handle(&mut self, msg: Retire, _: &mut Self::Context) {
        // What this reload's new rules fired is theirs, not a retired rule's.
        let mut new_rules: std::collections::HashSet<u64> = Default::default();
        if let Some(g) = msg.reload {
            self.retired_through = self.retired_through.max(g);
            // Every shard runs reload `g`'s rules, and sent what the earlier ones made before.
            let newer = self.meanings.split_off(&g);
            if !newer.is_empty() {
                self.meanings = newer;
            }
            new_rules.extend(
                self.fired_since_reload
                    .iter()
                    .filter(|(_, r)| **r >= g)
                    .map(|(id, _)| *id),
            );
            self.fired_since_reload.retain(|_, r| *r > g);
        }
        if msg.rules.is_empty() {
            return;
        }
        let changes = {
            let Some(store) = &self.store else {
                return;
            };
            let firing = match store.firing() {
                Ok(f) => f,
                Err(e) => {
                    bump(&self.counters.store_errors, 1);
                    tracing::error!(error = %e, "cannot read the firing alerts of changed or removed rules: they stay firing");
                    return;
                }
            };
            // Changes that wait for the store (its disk nearly full), the last one per id: an
            // alert ended there is not ended again; one that fired there is ended too.
            let mut last: std::collections::HashMap<u64, AlertState> = Default::default();
            for c in &self.unkept {
                last.insert(c.id, c.state);
            }
            let waiting_firing = self
                .unkept
                .iter()
                .filter(|c| c.state == AlertState::Firing && last.get(&c.id) == Some(&c.state))
                .map(|c| (c.json.as_str(), c.meaning));
            // Only what was firing when the sink started: a changed rule's engine may already
            // have raised new alerts (its outages) before another shard's `Retire` comes.
            let at_start = self.adopting.as_ref().map(|a| &a.firing);
            // An alert kept with its rule's meaning is the retired form's when that meaning
            // is not the rule's now: that alone decides, so that neither an alert the new
            // form made before a crash is resolved, nor one of the old form left firing.
            let now = match msg.reload {
                Some(g) => self.meanings_at(g),
                None => self.meanings_settled(),
            };
            let now = |rule: &str| now.as_ref().and_then(|m| m.get(rule).copied());
            let mut seen = std::collections::HashSet::new();
            firing
                .iter()
                .map(|f| (f.json.as_str(), f.meaning))
                .chain(waiting_firing)
                .filter_map(|(json, meaning)| {
                    let rule = rule_of(json)?;
                    let reason = msg.rules.iter().find(|(r, _)| *r == rule)?.1;
                    let c = resolved_change(json, reason, msg.time)?;
                    let retired = at_start.is_none_or(|s| s.contains(&c.id))
                        && match meaning {
                            Some(m) => now(&rule) != Some(m),
                            None => !new_rules.contains(&c.id),
                        };
                    retired.then_some(c)
                })
                .filter(|c| last.get(&c.id).is_none_or(|s| *s == AlertState::Firing))
                .filter(|c| seen.insert(c.id))
                .collect::<Vec<Change>>()
        };
        if changes.is_empty() {
            return;
        }
        if msg.reload.is_some() {
            tracing::info!(
                alerts = changes.len(),
                "resolving the alerts of rules the reload changed or removed that no engine held (a match's)"
            );
        } else {
            tracing::info!(
                alerts = changes.len(),
                "resolving the alerts of rules changed or removed while the agent was down"
            );
        }
        self.resolve_held_by_none(changes);
    }
}

/// The store's newest change once the changes sent before this message are kept (`None`:
/// none, or no store): what a `groups forget` may resolve, [`ForgetAlerts::through`].
#[derive(Message)]
#[rtype(result = "Option<u64>")]
pub struct StoreMark;

impl Handler<StoreMark> for AlertSink {
    type Result = Option<u64>;

    fn handle(&mut self, _: StoreMark, _: &mut Self::Context) -> Option<u64> {
        self.store.as_ref()?.last_seq().ok().flatten()
    }
}

/// `POST /silences/add`: a new silence (made at `now` by the sink, which gives it its id and
/// keeps it). Answers it, or what is wrong with it (`Err((409, ..))` when there are too many).
#[derive(Message)]
#[rtype(result = "Result<(super::silence::Silence, bool), (u16, String)>")]
pub struct AddSilence(pub super::silence::NewSilence);

impl Handler<AddSilence> for AlertSink {
    /// The silence, and whether it is one already there (the same rule and group, active
    /// from now at least as long, or made a moment ago and as long give or take
    /// [`super::silence::REPEAT_SLACK`]): then no other is made.
    type Result = Result<(super::silence::Silence, bool), (u16, String)>;

    fn handle(&mut self, msg: AddSilence, _: &mut Self::Context) -> Self::Result {
        let Some(store) = self.store.clone() else {
            return Err((
                404,
                "this agent keeps no store: no silence can be kept".into(),
            ));
        };
        let now = crate::flow::live::wall_clock();
        // What is wrong with it first: a refused request drops no old silence, takes no id.
        let mut silence = msg.0.into_silence(0, now).map_err(|why| (400, why))?;
        if let Some(same) = self.silences.iter().find(|s| s.stands_for(&silence, now)) {
            return Ok((same.clone(), true));
        }
        // Room: the oldest ended silence goes first; one that may still mute never does.
        if self.silences.len() >= super::silence::MAX_SILENCES {
            let oldest = (self.silences.iter().enumerate())
                .filter(|(_, s)| s.ended)
                .min_by_key(|(_, s)| s.ends_at)
                .map(|(i, _)| i);
            let Some(i) = oldest else {
                return Err((
                    409,
                    format!(
                        "{} silences are pending or active, the most the agent keeps: expire some first (`cepheus silence list`)",
                        super::silence::MAX_SILENCES
                    ),
                ));
            };
            let id = u64::from_str_radix(&self.silences[i].id, 16).unwrap_or(0);
            if let Err(e) = store.remove_silence(id) {
                return Err((500, format!("cannot drop an old silence: {e}")));
            }
            self.silences.remove(i);
        }
        let id = store
            .new_silence_id()
            .map_err(|e| (500, format!("cannot keep the silence: {e}")))?;
        silence.id = format!("{id:016x}");
        let json = serde_json::to_string(&silence).unwrap_or_default();
        store
            .put_silence(id, &json)
            .map_err(|e| (500, format!("cannot keep the silence: {e}")))?;
        tracing::info!(silence = %silence.id, rule = ?silence.rule, group = ?silence.group, severity = ?silence.severity, by = %silence.by, until = %silence.ends_at.to_rfc3339(), "silence added");
        self.silences.push(silence.clone());
        Ok((silence, false))
    }
}

/// `POST /silences/expire`: silence `.0` (its id) ends now. Answers it as it is now; `None`
/// when there is no such silence.
#[derive(Message)]
#[rtype(result = "Result<Option<super::silence::Silence>, String>")]
pub struct ExpireSilence(pub String);

impl Handler<ExpireSilence> for AlertSink {
    type Result = Result<Option<super::silence::Silence>, String>;

    fn handle(&mut self, msg: ExpireSilence, _: &mut Self::Context) -> Self::Result {
        let Some(store) = self.store.clone() else {
            return Ok(None);
        };
        let now = crate::flow::live::wall_clock();
        let Some(s) = self.silences.iter_mut().find(|s| s.id == msg.0) else {
            return Ok(None);
        };
        if s.ends_at > now {
            s.ends_at = now;
            if s.starts_at > now {
                s.starts_at = now;
            }
            let json = serde_json::to_string(&*s).unwrap_or_default();
            store
                .put_silence(u64::from_str_radix(&s.id, 16).unwrap_or(0), &json)
                .map_err(|e| format!("cannot end the silence: {e}"))?;
            tracing::info!(silence = %s.id, "silence expired");
        }
        // (At the start, once the engines said which alerts are episodes: the tick.)
        if self.adopting.is_none() {
            self.end_silences();
        }
        Ok(self.silences.iter().find(|s| s.id == msg.0).cloned())
    }
}

/// `GET /silences`: the silences kept (pending, active, and ended within
/// [`super::silence::KEPT_AFTER_END`]), by id.
#[derive(Message)]
#[rtype(result = "Vec<super::silence::Silence>")]
pub struct ListSilences;

impl Handler<ListSilences> for AlertSink {
    type Result = Vec<super::silence::Silence>;

    fn handle(&mut self, _: ListSilences, _: &mut Self::Context) -> Self::Result {
        self.silences.clone()
    }
}

/// A group forgotten by hand (`cepheus groups forget`): the store's alerts of it still firing
/// that no engine resolved (a match fires once and is held by none) are resolved at `time`,
/// `forgotten`, as the engine resolved those it held. Answers how many.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct ForgetAlerts {
    /// Only alerts kept at or before this change ([`StoreMark`], taken before the engines
    /// forgot): one that fired again while they did is a new episode, and stays firing.
    pub through: u64,
    /// The rules that share the group (the same meaning).
    pub rules: Vec<String>,
    /// Their `group_by`.
    pub group_by: Vec<String>,
    /// The key's values as texts ([`cepheus_core::engine::group_key_texts`]).
    pub key: Vec<String>,
    /// When (the request).
    pub time: Timestamp,
}

impl Handler<ForgetAlerts> for AlertSink {
    type Result = usize;

    fn handle(&mut self, msg: ForgetAlerts, _: &mut Self::Context) -> usize {
        let Some(store) = &self.store else {
            return 0;
        };
        let firing = match store.firing() {
            Ok(f) => f,
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                tracing::error!(error = %e, "cannot read the firing alerts of a forgotten group: they stay firing");
                return 0;
            }
        };
        let changes: Vec<Change> = firing
            .iter()
            .filter(|f| f.seq <= msg.through)
            .filter(|f| of_group(&f.json, &msg.rules, &msg.group_by, &msg.key))
            .filter_map(|f| resolved_change(&f.json, Reason::Forgotten, msg.time))
            .collect();
        let n = changes.len();
        if n > 0 {
            self.resolve_held_by_none(changes);
        }
        n
    }
}

/// Whether the alert `json` is of one of `rules` and of the group whose values are `key`.
fn of_group(json: &str, rules: &[String], group_by: &[String], key: &[String]) -> bool {
    let Some(head) = Head::of(json) else {
        return false;
    };
    if !rules.contains(&head.rule) || group_by.len() != key.len() {
        return false;
    }
    group_by.iter().zip(key).all(|(name, want)| {
        (head.group.get(name)).is_some_and(|g| cepheus_core::engine::group_value_text(g) == *want)
    })
}

/// An output behind a queue of its own thread (`output.syslog`, `output.webhook`).
trait QueuedOutput {
    /// Queues the changes.
    fn send(&self, changes: &[Change]);
    /// Changes sent before the store kept them are kept now, up to `seq`.
    fn mark(&self, seq: u64);
    /// Where its queue is behind from, and its room ([`super::outq::OutQueue::page`]).
    fn behind(&self) -> Option<(Option<u64>, usize)>;
    /// Puts its queue behind from `after` ([`super::outq::OutQueue::resume`]).
    fn resume(&self, after: Option<u64>);
    /// Feeds its queue from the store while it is behind.
    fn page(&self, changes: &[Change], all: bool);
    /// Queues firing alerts again, at the end of the silence that muted them, when `after`
    /// was the last change the store kept.
    fn send_again(&self, after: Option<u64>, changes: &[Change]);
    /// Counts `n` changes it was behind on that the store pruned ([`super::outq::OutQueue::lost`]).
    fn lost(&self, n: u64);
}

impl QueuedOutput for super::forward::Forwarder {
    fn send(&self, changes: &[Change]) {
        super::forward::Forwarder::send(self, changes);
    }
    fn mark(&self, seq: u64) {
        super::forward::Forwarder::mark(self, seq);
    }
    fn behind(&self) -> Option<(Option<u64>, usize)> {
        Some((self.queue().behind()?, self.queue().room()))
    }
    fn resume(&self, after: Option<u64>) {
        self.queue().resume(after);
    }
    fn page(&self, changes: &[Change], all: bool) {
        super::forward::Forwarder::page(self, changes, all);
    }
    fn send_again(&self, after: Option<u64>, changes: &[Change]) {
        super::forward::Forwarder::send_again(self, after, changes);
    }
    fn lost(&self, n: u64) {
        self.queue().lost(n);
    }
}

impl QueuedOutput for super::webhook::Webhook {
    fn send(&self, changes: &[Change]) {
        super::webhook::Webhook::send(self, changes);
    }
    fn mark(&self, seq: u64) {
        super::webhook::Webhook::mark(self, seq);
    }
    fn behind(&self) -> Option<(Option<u64>, usize)> {
        Some((self.queue().behind()?, self.queue().room()))
    }
    fn resume(&self, after: Option<u64>) {
        self.queue().resume(after);
    }
    fn page(&self, changes: &[Change], all: bool) {
        super::webhook::Webhook::page(self, changes, all);
    }
    fn send_again(&self, after: Option<u64>, changes: &[Change]) {
        super::webhook::Webhook::send_again(self, after, changes);
    }
    fn lost(&self, n: u64) {
        self.queue().lost(n);
    }
}

/// A group as an alert's JSON gives it, its values as [`super::silence::value_text`] reads
/// them (a string as itself, another value as its JSON text).
type Group = Vec<(String, cepheus_core::event::Value)>;

/// What the sink reads of an alert change's JSON (the rest it passes on as written).
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    id: String,
    rule: String,
    #[serde(default)]
    severity: Option<cepheus_core::rules::ir::Severity>,
    #[serde(default)]
    group: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    time: String,
}

impl Head {
    fn of(json: &str) -> Option<Head> {
        serde_json::from_str(json).ok()
    }
}

/// The id, rule, group and time of an alert change's JSON.
fn head_of(json: &str) -> Option<(u64, String, Group, Timestamp)> {
    parts(Head::of(json)?)
}

/// The id, rule, group and time [`head_of`] reads from what `head` holds.
fn parts(head: Head) -> Option<(u64, String, Group, Timestamp)> {
    let id = u64::from_str_radix(&head.id, 16).ok()?;
    let group = (head.group.into_iter())
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => cepheus_core::event::Value::str(&s),
                other => cepheus_core::event::Value::str(&other.to_string()),
            };
            (k, v)
        })
        .collect();
    let time = Timestamp::parse_rfc3339(&head.time).unwrap_or(Timestamp::MIN);
    Some((id, head.rule, group, time))
}

/// What may mute an alert besides what ended ([`AlertSink::muting`]).
#[derive(Clone, Copy, Default)]
struct Besides<'a> {
    /// A silence that ended (its id).
    silence: Option<&'a str>,
    /// An alert that inhibited and ended (its id).
    inhibitor: Option<u64>,
}

impl AlertSink {
    /// What mutes alert `id` of `rule` (of its severity, if known) and `group`, which began
    /// firing at `began`, at `now`,
    /// if anything, besides what `besides` names: the field that says so and its mark. An
    /// active silence first (the one ending last, so the alert is muted as long as any
    /// would), else a firing alert that inhibits it (`[[inhibit]]`): one that began firing
    /// before it (by time, then id: two alerts never mute each other), and, as in
    /// Alertmanager, never an alert of the source rule (which matches both sides).
    fn muting(
        &self,
        id: u64,
        (rule, severity): (&str, Option<cepheus_core::rules::ir::Severity>),
        group: &[(String, cepheus_core::event::Value)],
        (now, began): (Timestamp, Timestamp),
        besides: Besides<'_>,
    ) -> Option<(&'static str, serde_json::Value)> {
        let silence = (self.silences.iter())
            .filter(|s| Some(s.id.as_str()) != besides.silence)
            .filter(|s| s.active(now) && s.matches(rule, severity, group))
            .max_by_key(|s| s.ends_at);
        if let Some(s) = silence {
            return Some((cepheus_store::SILENCED, s.mark()));
        }
        let (by, source) =
            self.inhibitor_of((id, rule, group, began), |by| Some(by) != besides.inhibitor)?;
        let mark = serde_json::json!({
            "by": cepheus_core::alert::AlertId(by).to_string(),
            "rule": source,
        });
        Some((cepheus_store::INHIBITED, mark))
    }

    /// A firing alert that inhibits alert `id` of `rule` and `group`, which began firing at
    /// `began`, by the `[[inhibit]]` rules as they are now, among those `take` accepts: its id
    /// and its source rule (see [`AlertSink::muting`]).
    fn inhibitor_of(
        &self,
        (id, rule, group, began): (
            u64,
            &str,
            &[(String, cepheus_core::event::Value)],
            Timestamp,
        ),
        take: impl Fn(u64) -> bool,
    ) -> Option<(u64, &str)> {
        for (i, r) in self.inhibits.iter().enumerate() {
            if !r.targets(rule) || r.source == rule {
                continue;
            }
            let Some(key) = r.key(group) else {
                continue;
            };
            let by = (self.inhibitors.get(&(i, key)).into_iter().flatten())
                .find(|&(&by, &at)| by != id && take(by) && (at, by) < (began, id));
            if let Some((&by, _)) = by {
                return Some((by, r.source.as_str()));
            }
        }
        None
    }

    /// Alert `id` of `rule` and `group` fires (`firing`) or ends: as an `[[inhibit]]` source,
    /// it inhibits from now, or no more. Returns whether it ended as one (its muted alerts
    /// are then to be sent: [`AlertSink::unmute_inhibited`]).
    fn note_inhibitor(
        &mut self,
        id: u64,
        rule: &str,
        group: &[(String, cepheus_core::event::Value)],
        firing: Option<Timestamp>,
    ) -> bool {
        let mut ended = false;
        for (i, r) in self.inhibits.iter().enumerate() {
            if r.source != rule {
                continue;
            }
            let Some(key) = r.key(group) else {
                continue;
            };
            if let Some(at) = firing {
                self.inhibitors.entry((i, key)).or_default().insert(id, at);
            } else if let Some(set) = self.inhibitors.get_mut(&(i, key.clone())) {
                ended |= set.remove(&id).is_some();
                if set.is_empty() {
                    self.inhibitors.remove(&(i, key));
                }
            }
        }
        ended
    }

    /// Counts the firings in `fresh` (new to the store) that a silence or an inhibition
    /// muted.
    fn count_muted(&self, fresh: &[Change]) {
        for c in fresh.iter().filter(|c| c.state == AlertState::Firing) {
            let Some(m) = cepheus_store::mutes_of(&c.json) else {
                continue;
            };
            // (A silence's mark first, as `muting` gives it: `m` is an object of its marks.)
            let silenced = serde_json::from_slice::<serde_json::Value>(&m)
                .is_ok_and(|v| v.get(cepheus_store::SILENCED).is_some());
            let n = if silenced {
                &self.counters.alerts_silenced
            } else {
                &self.counters.alerts_inhibited
            };
            bump(n, 1);
        }
    }

    /// Marks the ends in `changes` whose firings were muted as muted too
    /// ([`Store::mark_muted_ends`]), their firings also among the changes waiting for the
    /// store (`unkept`): the store marks those it keeps; this covers the ends written out
    /// while it cannot keep them too.
    fn mark_muted_ends(&self, changes: &mut [Change]) {
        if let Some(store) = &self.store
            && let Err(e) = store.mark_muted_ends(&self.unkept, changes)
        {
            bump(&self.counters.store_errors, 1);
            tracing::warn!(error = %e, "cannot read what muted the alerts ending: their ends are sent");
        }
    }

    /// The firing alerts the store holds muted by what no longer mutes (a silence ended or
    /// unknown, an alert that no longer inhibits: it ended, possibly while its end waited
    /// for the store or before a crash, or its `[[inhibit]]` rule is gone): muted by it no
    /// more, and sent unless something else mutes them now or they are matches (which stay
    /// muted). At the start, once the engines said which rules' alerts are episodes; and
    /// whenever the store keeps what waited for it.
    fn reconcile_mutes(&self) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let rows = match store.muted_rows() {
            Ok(r) => r,
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                tracing::warn!(error = %e, "cannot read the muted alerts");
                return;
            }
        };
        let now = crate::flow::live::wall_clock();
        for (id, m) in rows {
            let Ok(m) = serde_json::from_slice::<serde_json::Value>(&m) else {
                continue;
            };
            // (Silences that could not be read: their marks stand.)
            let silence = m[cepheus_store::SILENCED]["id"]
                .as_str()
                .filter(|_| !self.silences_unread);
            let stale_silence =
                silence.filter(|sid| !self.silences.iter().any(|s| s.id == *sid && s.active(now)));
            let by = m[cepheus_store::INHIBITED]["by"]
                .as_str()
                .and_then(|b| u64::from_str_radix(b, 16).ok());
            if stale_silence.is_none() && by.is_none() {
                continue;
            }
            let json = match store.firing_change(id) {
                Ok(json) => json,
                Err(e) => {
                    bump(&self.counters.store_errors, 1);
                    tracing::warn!(error = %e, "cannot read a muted alert");
                    continue;
                }
            };
            // An inhibiting alert that no longer fires, or that the `[[inhibit]]` rules as
            // they are now (changed since it muted) do not make inhibit this one.
            let stale_inhibitor = by.filter(|&b| {
                let head = json.as_deref().and_then(head_of);
                head.is_none_or(|(_, rule, group, began)| {
                    self.inhibitor_of((id, &rule, &group, began), |by| by == b)
                        .is_none()
                })
            });
            if stale_silence.is_none() && stale_inhibitor.is_none() {
                continue;
            }
            if json.as_deref().is_some_and(|j| self.stays_muted(j)) {
                continue;
            }
            let mut back = Vec::new();
            for (field, stale) in [
                (cepheus_store::SILENCED, stale_silence.is_some()),
                (cepheus_store::INHIBITED, stale_inhibitor.is_some()),
            ] {
                if !stale {
                    continue;
                }
                match store.unmute_one(id, field, &self.output_names()) {
                    Ok(c) => back.extend(c),
                    Err(e) => {
                        bump(&self.counters.store_errors, 1);
                        tracing::warn!(error = %e, "cannot unmute an alert whose silence or inhibiting alert ended");
                    }
                }
            }
            self.send_unmuted(
                &store,
                back,
                Besides {
                    silence: stale_silence,
                    inhibitor: stale_inhibitor,
                },
            );
        }
    }

    /// The `[[inhibit]]` sources firing in the store and among the changes waiting for it
    /// (in order: an end waiting there ends its firing), noted.
    fn load_inhibitors(&mut self) {
        if self.inhibits.is_empty() {
            return;
        }
        let Some(store) = self.store.clone() else {
            return;
        };
        match store.firing() {
            Ok(firing) => {
                for f in firing {
                    if let Some((id, rule, group, at)) = head_of(&f.json) {
                        self.note_inhibitor(id, &rule, &group, Some(at));
                    }
                }
            }
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                tracing::error!(error = %e, "cannot read the firing alerts: none inhibits others until it fires again");
            }
        }
        let waiting: Vec<(u64, String, Group, Timestamp, bool)> = (self.unkept.iter())
            .filter_map(|c| {
                let (id, rule, group, at) = head_of(&c.json)?;
                Some((id, rule, group, at, c.state == AlertState::Firing))
            })
            .collect();
        for (id, rule, group, at, firing) in waiting {
            self.note_inhibitor(id, &rule, &group, firing.then_some(at));
        }
    }

    /// Whether a muted firing (its JSON) stays muted when what muted it ends: a match's (it
    /// fired once, while muted; sent late it would be news of the past).
    fn stays_muted(&self, json: &str) -> bool {
        rule_of(json).is_some_and(|r| self.episodic.get(&r) == Some(&false))
    }

    /// Kept changes the sink made itself (resolves of alerts no engine holds): those of
    /// `[[inhibit]]` sources end their inhibition.
    fn note_inhibitors_ended(&mut self, changes: &[Change]) {
        if self.inhibits.is_empty() {
            return;
        }
        let ended: Vec<u64> = changes
            .iter()
            .filter(|c| c.state != AlertState::Firing)
            .filter_map(|c| head_of(&c.json))
            .filter_map(|(id, rule, group, _)| {
                self.note_inhibitor(id, &rule, &group, None).then_some(id)
            })
            .collect();
        self.unmute_inhibited(&ended);
    }

    /// The alerts inhibited by `ended` (alerts that ended) that still fire are sent, unless
    /// something else mutes them now or they are matches.
    fn unmute_inhibited(&mut self, ended: &[u64]) {
        let Some(store) = self.store.clone() else {
            return;
        };
        // (At the start, once the engines said which alerts are episodes: `settle_mutes`
        // releases what no longer mutes.)
        if self.adopting.is_some() {
            return;
        }
        for &by in ended {
            let hex = cepheus_core::alert::AlertId(by).to_string();
            let stays = |json: &str| self.stays_muted(json);
            match store.unmute(
                cepheus_store::INHIBITED,
                "by",
                &hex,
                &stays,
                &self.output_names(),
            ) {
                Ok(back) => self.send_unmuted(
                    &store,
                    back,
                    Besides {
                        inhibitor: Some(by),
                        silence: None,
                    },
                ),
                Err(e) => {
                    bump(&self.counters.store_errors, 1);
                    tracing::warn!(alert = %hex, error = %e, "cannot end an inhibition in the store: the alerts it muted stay muted until the next start");
                }
            }
        }
    }

    /// Firing alerts muted by what ended (`besides`), as the store gives them back: muted
    /// again by whatever else mutes them now, the others sent to the notifying outputs.
    fn send_unmuted(&self, store: &Store, back: Vec<Change>, besides: Besides<'_>) {
        let now = crate::flow::live::wall_clock();
        let mut again = Vec::new();
        for c in back {
            let head = Head::of(&c.json);
            let severity = head.as_ref().and_then(|h| h.severity);
            let muted = head.and_then(parts).and_then(|(id, rule, group, began)| {
                self.muting(id, (&rule, severity), &group, (now, began), besides)
            });
            match muted {
                Some((field, mark)) => {
                    if let Err(e) = store.mute(c.id, field, &mark.to_string()) {
                        bump(&self.counters.store_errors, 1);
                        tracing::warn!(error = %e, "cannot note an alert muted anew");
                    }
                }
                None => again.push(c),
            }
        }
        if !again.is_empty() {
            tracing::info!(
                alerts = again.len(),
                "what muted alerts ended: those still firing are sent"
            );
            // (Where they go in the outputs' order: after what the store kept by now.)
            let after = match store.last_seq() {
                Ok(after) => after,
                Err(e) => {
                    bump(&self.counters.store_errors, 1);
                    tracing::warn!(error = %e, alerts = again.len(), "cannot read the store's last alert change: the alerts still firing are sent at the next start (counted as unsent now)");
                    for (_, output) in self.queued() {
                        output.lost(again.len() as u64);
                    }
                    return;
                }
            };
            for (_, output) in self.queued() {
                output.send_again(after, &again);
            }
        }
    }

    /// Reads the silences the store keeps (one it cannot read is said and left out).
    fn load_silences(&mut self) {
        let Some(store) = &self.store else {
            return;
        };
        match store.silences() {
            Ok(kept) => {
                let mut unread = false;
                self.silences = kept
                    .into_iter()
                    .filter_map(|(id, json)| match serde_json::from_str(&json) {
                        Ok(s) => Some(s),
                        Err(e) => {
                            unread = true;
                            tracing::error!(silence = format!("{id:016x}"), error = %e, "a silence the store keeps cannot be read: left out (what silences muted stays muted until the agent restarts)");
                            None
                        }
                    })
                    .collect();
                self.silences_unread = unread;
            }
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                self.silences_unread = true;
                tracing::error!(error = %e, "cannot read the silences: none mutes, and what they muted stays muted, until the agent restarts");
            }
        }
        self.silences.sort_by(|a, b| a.id.cmp(&b.id));
    }

    /// The silences whose end came and was not dealt with: the alerts they muted that still
    /// fire are sent to the notifying outputs (and listed without `silenced`); and those
    /// ended longer than [`super::silence::KEPT_AFTER_END`] ago go.
    fn end_silences(&mut self) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let now = crate::flow::live::wall_clock();
        let mut i = 0;
        while i < self.silences.len() {
            let s = &self.silences[i];
            if s.ends_at > now {
                i += 1;
                continue;
            }
            if !s.ended {
                let stays = |json: &str| self.stays_muted(json);
                let to = self.output_names();
                let back = match store.unmute(cepheus_store::SILENCED, "id", &s.id, &stays, &to) {
                    Ok(b) => b,
                    Err(e) => {
                        bump(&self.counters.store_errors, 1);
                        tracing::warn!(silence = %s.id, error = %e, "cannot end a silence in the store: tried again in a second");
                        return;
                    }
                };
                let id = s.id.clone();
                // (Another silence or an inhibition may still mute some of them.)
                self.send_unmuted(
                    &store,
                    back,
                    Besides {
                        silence: Some(&id),
                        inhibitor: None,
                    },
                );
                let s = &mut self.silences[i];
                s.ended = true;
                let json = serde_json::to_string(&*s).unwrap_or_default();
                if let Err(e) =
                    store.put_silence(u64::from_str_radix(&s.id, 16).unwrap_or(0), &json)
                {
                    bump(&self.counters.store_errors, 1);
                    tracing::warn!(silence = %s.id, error = %e, "cannot note that a silence ended (the next start deals with its end again, with nothing left to send)");
                }
            }
            let s = &self.silences[i];
            if s.ends_at.add(super::silence::KEPT_AFTER_END) <= now {
                let id = u64::from_str_radix(&s.id, 16).unwrap_or(0);
                if let Err(e) = store.remove_silence(id) {
                    bump(&self.counters.store_errors, 1);
                    tracing::warn!(silence = %s.id, error = %e, "cannot drop an old silence");
                    i += 1;
                    continue;
                }
                self.silences.remove(i);
                continue;
            }
            i += 1;
        }
    }
}

/// A change as the store keeps it, with its place (`None` when its JSON is not an alert's).
fn stored_change(a: cepheus_store::StoredAlert) -> Option<Change> {
    Some(Change {
        seq: Some(a.seq),
        meaning: a.meaning,
        ..change_of(a.json)?
    })
}

/// A line of `state/unkept.jsonl` ([`AlertSink::save_unkept`]): an alert change's JSON, or
/// `{"meaning": HEX, "change": JSON}` for a firing kept with its rule's meaning.
fn unkept_change(line: String) -> Option<Change> {
    // (Read by its fixed layout, so the change's JSON is kept byte for byte.)
    let with_meaning = line
        .strip_prefix("{\"meaning\":\"")
        .and_then(|rest| rest.split_at_checked(16))
        .and_then(|(hex, rest)| {
            let change = rest.strip_prefix("\",\"change\":")?.strip_suffix('}')?;
            Some((u64::from_str_radix(hex, 16).ok()?, change))
        });
    match with_meaning {
        Some((m, change)) => Some(Change {
            meaning: Some(m),
            ..change_of(change.to_string())?
        }),
        None => change_of(line),
    }
}

/// An alert change's JSON as a change not kept yet (`None` when it is not an alert's).
fn change_of(json: String) -> Option<Change> {
    let v: serde_json::Value = serde_json::from_str(&json).ok()?;
    let id: cepheus_core::alert::AlertId = v["id"].as_str()?.parse().ok()?;
    let state = AlertState::ALL
        .into_iter()
        .find(|s| Some(s.name()) == v["state"].as_str())?;
    Some(Change {
        id: id.0,
        state,
        json,
        seq: None,
        meaning: None,
    })
}

/// The rule an alert change's JSON names.
fn rule_of(json: &str) -> Option<String> {
    Head::of(json).map(|h| h.rule)
}

/// The `resolved` change of a kept firing alert: its object, in state `resolved` at `time`,
/// with `reason`.
fn resolved_change(firing: &str, reason: Reason, time: Timestamp) -> Option<Change> {
    let mut v: serde_json::Value = serde_json::from_str(firing).ok()?;
    let id: cepheus_core::alert::AlertId = v.get("id")?.as_str()?.parse().ok()?;
    let o = v.as_object_mut()?;
    o.insert("state".into(), AlertState::Resolved.name().into());
    o.insert("time".into(), time.to_rfc3339().into());
    o.insert("reason".into(), reason.name().into());
    Some(Change {
        id: id.0,
        state: AlertState::Resolved,
        json: v.to_string(),
        seq: None,
        meaning: None,
    })
}

impl Handler<SaveCheckpoint> for AlertSink {
    type Result = ();

    fn handle(&mut self, msg: SaveCheckpoint, _: &mut Self::Context) {
        self.save_checkpoint(msg);
    }
}

impl AlertSink {
    /// Saves a shard's checkpoint, unless alert changes wait for the store.
    fn save_checkpoint(&mut self, msg: SaveCheckpoint) {
        // Not held back on a nearly full disk: a state replaces a file of its own (no sled
        // write), and keeping it lets the shard's journal free its older segments. A
        // restart from it will not make again the alert changes waiting for the store: they
        // are kept aside with it, and kept first at the next start.
        self.catch_up();
        self.save_unkept();
        let Some(store) = self.store.as_ref() else {
            return;
        };
        match store.save_checkpoint(&msg.0) {
            Ok(()) => {
                if let Some((shard, journal)) = msg.1 {
                    shard.do_send(super::shard::StateKept { journal });
                }
            }
            Err(e) => {
                bump(&self.counters.store_errors, 1);
                if let Some(held) = self.store_limit.allow() {
                    tracing::error!(error = %e, shard = msg.0.shard, held_back = held, "cannot save the shard's checkpoint; a restart would continue from an older one");
                }
            }
        }
    }
}

/// The watchdog's probe (see `watchdog.rs`): answered when the sink's mailbox is served.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Probe;

impl Handler<Probe> for AlertSink {
    type Result = ();

    fn handle(&mut self, _: Probe, _: &mut Self::Context) {}
}

impl Handler<StdoutWrote> for AlertSink {
    type Result = ();

    fn handle(&mut self, _: StdoutWrote, _: &mut Self::Context) {
        self.stdout_wrote.1.store(false, Ordering::Release);
        self.note_written_out();
    }
}

impl Handler<Flush> for AlertSink {
    type Result = ();

    fn handle(&mut self, _: Flush, _: &mut Self::Context) {
        let began = std::time::Instant::now();
        if let Some(out) = &self.stdout
            && !out.drain_at_stop()
        {
            tracing::error!(
                waited_s = began.elapsed().as_secs(),
                "stdout has not taken the alert changes waiting for it: stopping without them (the next start writes them again)"
            );
        }
        self.note_written_out();
        // A last try for what the output file refused (else the next start writes it).
        self.retry_file();
        if !self.catch_up() {
            tracing::error!(
                alert_changes = self.unkept.len(),
                "stopping with alert changes the store could not keep (they went to the outputs): kept aside, the next start keeps them"
            );
        }
        self.save_unkept();
        // The outputs behind a queue get a few seconds together for what waits.
        let deadline = std::time::Instant::now() + OUTPUTS_GRACE;
        if let Some(f) = self.forwarder.as_mut() {
            f.close(deadline);
        }
        if let Some(w) = self.webhook.as_mut() {
            w.close(deadline);
        }
        // What the outputs delivered, noted without a flush: kept, so the next start sends
        // them none of it again.
        if let Some(store) = &self.store
            && (self.forwarder.is_some() || self.webhook.is_some())
            && let Err(e) = store.flush()
        {
            tracing::warn!(error = %e, "cannot note what the outputs delivered (the next start may send some again)");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Mutex;

    use cepheus_core::engine::{Engine, EngineConfig};
    use cepheus_core::event::{Event, Field, Source, Value};
    use cepheus_core::rules::compile_str;
    use cepheus_core::time::Timestamp;

    use super::*;

    /// The live stream carries a kept change's JSON only when small; a large one goes by its
    /// place alone (the stream reads it from the store), one not kept always with its JSON.
    #[test]
    fn the_stream_carries_large_kept_changes_by_place() {
        let (tx, mut rx) = tokio::sync::broadcast::channel::<Streamed>(8);
        let sink = AlertSink::with_writer(None, Arc::new(SinkCounters::default())).with_stream(tx);
        let change = |seq: Option<u64>, len: usize| Change {
            id: 1,
            state: AlertState::Firing,
            json: format!(r#"{{"m":"{}"}}"#, "x".repeat(len)),
            seq,
            meaning: None,
        };
        let sent = [
            change(Some(1), 10),
            change(Some(2), STREAM_INLINE),
            change(None, STREAM_INLINE),
        ];
        sink.offer_to_stream(sent.iter());
        let got: Vec<(Option<u64>, Option<usize>)> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|(seq, json)| (seq, json.map(|j| j.len())))
            .collect();
        let len = |c: &Change| Some(c.json.len());
        assert_eq!(
            got,
            [
                (Some(1), len(&sent[0])),
                (Some(2), None),
                (None, len(&sent[2]))
            ]
        );
    }

    /// Accepts `room` lines, then fails every write with `kind`.
    struct Failing {
        room: usize,
        kind: std::io::ErrorKind,
        lines: Arc<Mutex<usize>>,
    }

    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut lines = self.lines.lock().unwrap();
            if *lines >= self.room {
                return Err(std::io::Error::from(self.kind));
            }
            *lines += buf.iter().filter(|b| **b == b'\n').count();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn alerts(n: usize) -> Vec<Alert> {
        let rules = compile_str(
            "t.toml",
            "[[rule]]\nname = \"r\"\nseverity = \"low\"\nevents.a = 'syslog'\npattern = \"a\"\n",
        )
        .rules
        .unwrap();
        let mut e = Engine::new(&rules, EngineConfig::default()).unwrap();
        let mut out = Vec::new();
        for i in 0..n {
            let t = Timestamp::from_secs(i as i64);
            e.push(
                Event::new(Source::Syslog, t, t).with(Field::Msg, Value::str("x")),
                &mut out,
            );
        }
        assert_eq!(out.len(), n);
        out
    }

    #[test]
    fn alerts_that_cannot_be_written_are_counted() {
        let counters = Arc::new(SinkCounters::default());
        let lines = Arc::new(Mutex::new(0));
        let out = Failing {
            room: 3,
            kind: std::io::ErrorKind::BrokenPipe,
            lines: lines.clone(),
        };
        let mut sink = AlertSink::with_writer(Some(Box::new(out)), counters.clone());
        let batch = alerts(5);
        sink.take(batch.clone(), 0);
        sink.settle();
        assert_eq!(*lines.lock().unwrap(), 3);
        let snap = counters.snapshot();
        assert_eq!((snap.alerts, snap.alerts_unwritten), (5, 2));
        // The pipe is closed for good: later batches are counted, not attempted.
        sink.take(batch.clone(), 0);
        sink.settle();
        let snap = counters.snapshot();
        assert_eq!((snap.alerts, snap.alerts_unwritten), (10, 7));
        // Another error (a full disk) is retried with the next batch.
        let counters = Arc::new(SinkCounters::default());
        let out = Failing {
            room: 0,
            kind: std::io::ErrorKind::StorageFull,
            lines: Arc::new(Mutex::new(0)),
        };
        let mut sink = AlertSink::with_writer(Some(Box::new(out)), counters.clone());
        sink.take(batch.clone(), 0);
        sink.take(batch.clone(), 0);
        sink.settle();
        assert_eq!(counters.snapshot().alerts_unwritten, 10);
    }

    /// A sink with a store in a scratch folder and an output that counts its lines.
    #[allow(clippy::type_complexity)]
    fn stored_sink(
        name: &str,
    ) -> (
        std::path::PathBuf,
        AlertSink,
        Store,
        Arc<SinkCounters>,
        Arc<Mutex<usize>>,
    ) {
        let dir = std::env::temp_dir().join(format!("cepheus-sink-{name}-{}", std::process::id()));
        let counters = Arc::new(SinkCounters::default());
        let lines = Arc::new(Mutex::new(0));
        let out = Failing {
            room: usize::MAX,
            kind: std::io::ErrorKind::Other,
            lines: lines.clone(),
        };
        let store = Store::open(&dir, 100).unwrap();
        let mut sink = AlertSink::with_writer(Some(Box::new(out)), counters.clone());
        sink.store = Some(store.clone());
        (dir, sink, store, counters, lines)
    }

    /// A stdout nobody reads holds neither the sink nor the store: the changes are kept as
    /// they come, and noted written out only as far as stdout took them (a crash then
    /// writes the rest again at the next start).
    #[test]
    fn a_stdout_nobody_reads_holds_neither_sink_nor_store() {
        let dir = std::env::temp_dir().join(format!("cepheus-sink-gated-{}", std::process::id()));
        let (go, gate) = std::sync::mpsc::sync_channel(0);
        let data = Arc::new(Mutex::new(Vec::new()));
        let out = super::super::stdout::tests::Gated {
            go: gate,
            data: data.clone(),
        };
        let store = Store::open(&dir, 100).unwrap();
        let mut sink =
            AlertSink::with_writer(Some(Box::new(out)), Arc::new(SinkCounters::default()));
        sink.store = Some(store.clone());
        let batch = alerts(3);
        sink.take(batch[..2].to_vec(), 0);
        // (The thread has taken the first two lines: it is in the first one's write.)
        go.send(()).unwrap();
        sink.take(batch[2..].to_vec(), 0);
        sink.note_written_out();
        assert_eq!(store.counts().0, 3);
        assert_eq!(store.unwritten().unwrap().len(), 3);
        // The reader takes the second line: the first two are written, the third waits, and
        // the mark goes as far as the second.
        go.send(()).unwrap();
        let out = sink.stdout.as_ref().unwrap();
        let second = store.recent(3).unwrap()[1].seq;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while out.written_through() != Some(second) {
            assert!(
                std::time::Instant::now() < deadline,
                "the second line not written"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        sink.note_written_out();
        assert_eq!(store.unwritten().unwrap().len(), 1);
        go.send(()).unwrap();
        sink.settle();
        assert_eq!(
            String::from_utf8(data.lock().unwrap().clone())
                .unwrap()
                .lines()
                .count(),
            3
        );
        assert!(store.unwritten().unwrap().is_empty());
        drop((sink, store, go));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn changes_a_crash_left_in_the_file_are_not_appended_again_at_restart() {
        let (dir, mut sink, store, _, lines) = stored_sink("file-again");
        let file = dir.with_extension("jsonl");
        let _ = std::fs::remove_file(&file);
        // Kept, then the crash: two of the three made it to the file, none was noted written.
        let mut changes: Vec<Change> = alerts(3).iter().map(Change::of).collect();
        store.record_changes(&mut changes).unwrap();
        let mut text = String::from("{\"not\": \"an alert\"}\n");
        for c in &changes[..2] {
            text.push_str(&c.json);
            text.push('\n');
        }
        text.push_str("{\"id\": \"cut");
        std::fs::write(&file, &text).unwrap();
        sink = sink.with_file(Some(file.clone()));
        assert_eq!(store.unwritten().unwrap().len(), 3);
        sink.emit_unwritten();
        let after = std::fs::read_to_string(&file).unwrap();
        // Every change on a line of its own, the cut line ended before it.
        let whole: Vec<&str> = after
            .lines()
            .filter(|l| {
                serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v["state"].is_string())
            })
            .collect();
        assert_eq!(whole.len(), 3, "{after}");
        assert!(after.contains("\"cut\n{"), "{after}");
        assert!(
            after.ends_with(&format!("{}\n", changes[2].json)),
            "{after}"
        );
        // stdout cannot be read back: it gets all three again.
        sink.settle();
        assert_eq!(*lines.lock().unwrap(), 3);
        assert!(store.unwritten().unwrap().is_empty());
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&file);
    }

    /// The output file is never written through a symbolic link (another user could plant
    /// one where the file is made anew after a rotation): counted as unwritten instead, held,
    /// and written once a regular file can be.
    #[test]
    fn the_output_file_is_not_written_through_a_symlink() {
        let (dir, sink, store, counters, _) = stored_sink("file-link");
        let _ = std::fs::create_dir_all(&dir);
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let link = dir.join("alerts.jsonl");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let mut sink = sink.with_file(Some(link.clone()));
        sink.take(alerts(1), 0);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(counters.snapshot().file_unwritten, 1);
        // Held, and not noted written in the store (a restart would write it out again),
        // not either when changes kept aside while the store was short of room are kept.
        assert_eq!(store.unwritten().unwrap().len(), 1);
        sink.unkept.push_back(cepheus_store::Change {
            id: 77,
            state: cepheus_core::alert::AlertState::Firing,
            json: r#"{"id":"000000000000004d","state":"firing"}"#.to_string(),
            seq: None,
            meaning: None,
        });
        assert!(sink.catch_up());
        assert_eq!(store.unwritten().unwrap().len(), 2);
        // A regular file there: written, the refused change first, on the next try (each
        // second) with no new change.
        std::fs::remove_file(&link).unwrap();
        sink.file.as_mut().unwrap().checked = None;
        sink.retry_file();
        sink.settle();
        assert_eq!(std::fs::read_to_string(&link).unwrap().lines().count(), 1);
        assert!(store.unwritten().unwrap().is_empty());
        sink.take(alerts(2)[1..].to_vec(), 0);
        assert_eq!(std::fs::read_to_string(&link).unwrap().lines().count(), 2);
        assert_eq!(counters.snapshot().file_unwritten, 1);
        // Moved away (a rotation): made anew at the next second's try, with no new change.
        std::fs::rename(&link, dir.join("alerts.jsonl.1")).unwrap();
        sink.file.as_mut().unwrap().checked = None;
        sink.retry_file();
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "");
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn changes_older_than_max_age_are_dropped_from_the_store() {
        let (dir, sink, store, _, _) = stored_sink("max-age");
        let mut sink = sink.with_max_age(Some(cepheus_core::time::Duration::from_secs(3600)));
        // Alerts of 1970 (one-shot matches: they stay listed as firing).
        sink.take(alerts(3), 0);
        assert_eq!(store.counts(), (3, 3));
        sink.prune_by_age();
        assert_eq!(store.counts(), (0, 3));
        assert!(store.recent(10).unwrap().is_empty());
        // Without max_age nothing goes.
        let mut sink = sink.with_max_age(None);
        sink.take(alerts(5)[3..].to_vec(), 0);
        sink.prune_by_age();
        assert_eq!(store.counts().0, 2);
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn changes_the_store_already_has_are_neither_kept_nor_written_again() {
        let (dir, mut sink, store, counters, lines) = stored_sink("kept");
        let batch = alerts(3);
        sink.take(batch[..2].to_vec(), 0);
        sink.take(batch.clone(), 0);
        sink.settle();
        assert_eq!(*lines.lock().unwrap(), 3);
        let snap = counters.snapshot();
        assert_eq!(
            (snap.alerts, snap.alerts_repeated, snap.store_errors),
            (5, 2, 0)
        );
        assert_eq!(store.recent(10).unwrap().len(), 3);
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_nearly_full_disk_keeps_alerts_out_of_the_store_until_space_comes_back() {
        let (dir, mut sink, store, counters, lines) = stored_sink("full");
        // As if less than the minimum were free: written out, not kept.
        sink.space.min_free = u64::MAX;
        let batch = alerts(3);
        sink.take(batch[..2].to_vec(), 0);
        sink.settle();
        assert_eq!(*lines.lock().unwrap(), 2);
        assert_eq!(store.counts().0, 0);
        assert!(counters.snapshot().store_errors >= 1);
        assert_eq!(counters.snapshot().store_waiting, 2);
        // Bounded: past the cap the oldest go, counted.
        let two = sink.unkept_bytes;
        sink.unkept_max = two;
        sink.take(batch[2..].to_vec(), 0);
        assert_eq!(counters.snapshot().store_waiting, 2);
        assert_eq!(counters.snapshot().store_dropped, 1);
        assert!(sink.unkept_bytes <= two);
        sink.unkept_max = UNKEPT_MAX_BYTES;
        // Room again (looked at once a second: forced here): the two waiting (the first
        // went past the cap) are kept first, and not written out again; the third, taken
        // again, is one the store has now.
        sink.space.min_free = 0;
        sink.space.checked = None;
        sink.take(batch[2..].to_vec(), 0);
        sink.settle();
        assert_eq!(*lines.lock().unwrap(), 3);
        assert_eq!(store.counts().0, 2);
        assert_eq!(counters.snapshot().store_waiting, 0);
        assert_eq!(counters.snapshot().alerts_repeated, 1);
        assert!(store.unwritten().unwrap().is_empty());
        assert_eq!(store.recent(10).unwrap().len(), 2);
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An alert whose resolve waits for the store (its disk still nearly full at a restart)
    /// is not taken for one no engine holds: no `state_lost` resolve after its own.
    #[test]
    fn an_alert_whose_end_waits_for_the_store_is_not_lost() {
        let (dir, sink, store, _, lines) = stored_sink("adopt-unkept");
        let mut sink = sink;
        let fired = alerts(1);
        sink.take(fired.clone(), 0);
        let mut sink = sink.adopting(1);
        sink.space.min_free = u64::MAX;
        sink.space.checked = None;
        let c = Change::of(&fired[0]);
        let end = resolved_change(&c.json, Reason::Forgotten, Timestamp::from_secs(9)).unwrap();
        let fresh = sink.keep(vec![end]);
        sink.emit(&fresh);
        sink.settle();
        assert_eq!(*lines.lock().unwrap(), 2);
        sink.adopt(Adopt {
            shard: 0,
            ids: Vec::new(),
            episodic: vec!["r".into()],
            running: vec!["r".into()],
        });
        sink.settle();
        assert_eq!(
            *lines.lock().unwrap(),
            2,
            "a state_lost resolve was written"
        );
        assert_eq!(sink.unkept.len(), 1);
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A shard's state is saved on a nearly full disk too, and the changes waiting for the
    /// store are kept aside with it: a restart (whose engine continues from that state and
    /// will not make them again) keeps them first, without writing them out again.
    #[test]
    fn changes_waiting_for_the_store_are_kept_aside_for_a_restart() {
        let (dir, mut sink, store, _, _) = stored_sink("full-state");
        let saved = |n: u8| SavedShard {
            shard: 0,
            shards: 1,
            data: vec![n; 4],
            file: None,
        };
        sink.space.min_free = u64::MAX;
        sink.take(alerts(2), 0);
        sink.save_checkpoint(SaveCheckpoint(saved(2), None));
        let kept: Vec<SavedShard> = (store.checkpoints().unwrap().iter())
            .map(|s| s.loaded().unwrap())
            .collect();
        assert_eq!(kept, vec![saved(2)]);
        assert_eq!(store.unkept().unwrap().len(), 2);
        assert_eq!(store.counts().0, 0);
        drop(sink);
        // The restart, with room again.
        let lines = Arc::new(Mutex::new(0));
        let out = Failing {
            room: usize::MAX,
            kind: std::io::ErrorKind::Other,
            lines: lines.clone(),
        };
        let mut again =
            AlertSink::with_writer(Some(Box::new(out)), Arc::new(SinkCounters::default()));
        again.store = Some(store.clone());
        again.space.min_free = 0;
        again.load_unkept();
        assert_eq!(store.counts().0, 2);
        assert!(store.unkept().unwrap().is_empty());
        assert!(store.unwritten().unwrap().is_empty());
        again.settle();
        assert_eq!(*lines.lock().unwrap(), 0, "written out again");
        drop((again, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A firing waiting for the store when the agent stops keeps its rule's meaning across
    /// the restart (kept aside with it), and counts among the alerts firing at start: an
    /// earlier form's is resolved there like one the store had.
    #[test]
    fn a_waiting_firing_keeps_its_rule_meaning_across_a_restart() {
        let (dir, mut sink, store, _, _) = stored_sink("full-meaning");
        sink = sink.with_meanings(meanings_r(0xa));
        sink.space.min_free = u64::MAX;
        let fired = alerts(1);
        sink.take(fired.clone(), 0);
        sink.save_unkept();
        assert_eq!(store.unkept().unwrap().len(), 1);
        drop(sink);
        // The restart runs another form of `r`.
        let mut again = AlertSink::with_writer(None, Arc::new(SinkCounters::default()))
            .with_meanings(meanings_r(0xb));
        again.store = Some(store.clone());
        let mut again = again.adopting(1);
        again.space.min_free = 0;
        again.load_unkept();
        let kept: Vec<Option<u64>> = store.firing().unwrap().iter().map(|f| f.meaning).collect();
        assert_eq!(kept, [Some(0xa)]);
        again.adopt(Adopt {
            shard: 0,
            ids: Vec::new(),
            episodic: Vec::new(),
            running: vec!["r".to_string()],
        });
        assert!(store.firing().unwrap().is_empty(), "left firing");
        let last = store.recent(1).unwrap();
        assert!(
            last[0].json.contains("\"rule_changed\""),
            "{}",
            last[0].json
        );
        drop((again, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Takes half of one write, then fails the next call once (a disk filling up), then
    /// works again.
    struct Flaky {
        calls: usize,
        cut_at: usize,
        data: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Flaky {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.calls += 1;
            let n = if self.calls == self.cut_at {
                buf.len() / 2
            } else if self.calls == self.cut_at + 1 {
                return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
            } else {
                buf.len()
            };
            self.data.lock().unwrap().extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn after_a_failed_write_every_alert_starts_a_line_of_its_own() {
        let counters = Arc::new(SinkCounters::default());
        let data = Arc::new(Mutex::new(Vec::new()));
        let out = Flaky {
            calls: 0,
            cut_at: 2,
            data: data.clone(),
        };
        let mut sink = AlertSink::with_writer(Some(Box::new(out)), counters.clone());
        let batch = alerts(3);
        sink.take(batch.clone(), 0);
        sink.take(batch.clone(), 0);
        sink.settle();
        let text = String::from_utf8(data.lock().unwrap().clone()).unwrap();
        let whole = text
            .lines()
            .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
            .count();
        let unwritten = counters.snapshot().alerts_unwritten as usize;
        // Every alert not counted as lost is one whole JSON line; the cut one is alone.
        assert_eq!(whole, 6 - unwritten, "{text}");
        assert!(unwritten >= 1);
        assert_eq!(text.lines().count(), whole + 1, "{text}");
    }

    /// The ids of the alerts `store` has firing.
    fn firing_ids(store: &Store) -> Vec<u64> {
        store
            .firing()
            .unwrap()
            .iter()
            .filter_map(|f| serde_json::from_str::<serde_json::Value>(&f.json).ok())
            .filter_map(|v| u64::from_str_radix(v["id"].as_str()?, 16).ok())
            .collect()
    }

    /// Rule `r`'s meaning is `m` ([`alerts`] are `r`'s).
    fn meanings_r(m: u64) -> Arc<RuleMeanings> {
        Arc::new(RuleMeanings::from([("r".to_string(), m)]))
    }

    fn retire(sink: &mut AlertSink, rules: Vec<(String, Reason)>) {
        let mut ctx = actix::Context::<AlertSink>::new();
        <AlertSink as Handler<Retire>>::handle(
            sink,
            Retire {
                rules,
                time: Timestamp::from_secs(10),
                reload: Some(1),
            },
            &mut ctx,
        );
    }

    /// A changed rule fired again on a shard that took the reload first (its batch carries
    /// the reload's number): the reload's resolves leave that alert firing, and end the one
    /// its old form fired.
    #[test]
    fn a_reload_leaves_what_its_new_rules_fired_on_a_shard_that_reloaded_first() {
        let (dir, mut sink, store, _, _) = stored_sink("retire-new");
        let all = alerts(2);
        let mut ctx = actix::Context::<AlertSink>::new();
        <AlertSink as Handler<Alerts>>::handle(&mut sink, Alerts(all[..1].to_vec(), 0), &mut ctx);
        <AlertSink as Handler<Alerts>>::handle(&mut sink, Alerts(all[1..].to_vec(), 1), &mut ctx);
        retire(&mut sink, vec![("r".into(), Reason::RuleChanged)]);
        assert_eq!(firing_ids(&store), [all[1].id().0]);
        assert!(sink.fired_since_reload.is_empty());
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A firing is kept with the meaning of its rule as the reload that made it ran it; after
    /// a crash in the middle of a reload (some shards ran the new form, whose alert fired),
    /// the restart's resolves of the changed rule end only the old form's alert.
    #[test]
    fn a_restart_resolves_only_the_alerts_of_a_changed_rules_old_form() {
        let (dir, mut sink, store, counters, _) = stored_sink("retire-meaning");
        let all = alerts(2);
        sink = sink.with_meanings(meanings_r(0xa));
        let mut ctx = actix::Context::<AlertSink>::new();
        <AlertSink as Handler<Meanings>>::handle(&mut sink, Meanings(1, meanings_r(0xb)), &mut ctx);
        <AlertSink as Handler<Alerts>>::handle(&mut sink, Alerts(all[..1].to_vec(), 0), &mut ctx);
        <AlertSink as Handler<Alerts>>::handle(&mut sink, Alerts(all[1..].to_vec(), 1), &mut ctx);
        let kept: Vec<Option<u64>> = store.firing().unwrap().iter().map(|f| f.meaning).collect();
        assert_eq!(kept, [Some(0xa), Some(0xb)]);
        drop(sink);
        // The restart runs the new form; a shard restored from a state saved before the
        // reload names the rule as changed while the agent was down.
        let mut again = AlertSink::with_writer(None, counters).with_meanings(meanings_r(0xb));
        again.store = Some(store.clone());
        let mut again = again.adopting(1);
        <AlertSink as Handler<Retire>>::handle(
            &mut again,
            Retire {
                rules: vec![("r".into(), Reason::RuleChanged)],
                time: Timestamp::from_secs(10),
                reload: None,
            },
            &mut ctx,
        );
        assert_eq!(firing_ids(&store), [all[1].id().0]);
        drop((again, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The store's disk is nearly full at a reload: the engine's own `rule_changed` resolve
    /// of an alert it held waits to be kept while the store still lists the alert firing;
    /// the reload's resolves of what no engine held do not end it a second time.
    #[test]
    fn a_reload_does_not_resolve_again_what_an_engine_resolved_while_the_store_waits() {
        let (dir, mut sink, store, _, lines) = stored_sink("retire-twice");
        let fired = alerts(1);
        sink.take(fired.clone(), 0);
        sink.settle();
        assert_eq!(*lines.lock().unwrap(), 1);
        sink.space.min_free = u64::MAX;
        sink.space.checked = None;
        let c = Change::of(&fired[0]);
        let end = resolved_change(&c.json, Reason::RuleChanged, Timestamp::from_secs(9)).unwrap();
        let fresh = sink.keep(vec![end]);
        sink.emit(&fresh);
        sink.settle();
        assert_eq!(*lines.lock().unwrap(), 2);
        retire(&mut sink, vec![("r".into(), Reason::RuleChanged)]);
        sink.settle();
        assert_eq!(*lines.lock().unwrap(), 2, "resolved (written out) twice");
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An old rule's alert that fired while the store's disk was nearly full waits to be
    /// kept: a reload that removes its rule resolves it all the same, so that it is not kept
    /// firing once the disk has room.
    #[test]
    fn a_reload_resolves_a_removed_rules_alert_that_waits_for_the_store() {
        let (dir, mut sink, store, _, _) = stored_sink("retire-unkept");
        let all = alerts(2);
        sink.take(all[..1].to_vec(), 0);
        sink.space.min_free = u64::MAX;
        sink.space.checked = None;
        sink.take(all[1..].to_vec(), 0);
        retire(&mut sink, vec![("r".into(), Reason::RuleRemoved)]);
        sink.space.min_free = 0;
        sink.space.checked = None;
        assert!(sink.catch_up());
        let firing = store.firing().unwrap();
        assert!(firing.is_empty(), "left firing: {firing:?}");
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `store.max_age` pruned every change row while match alerts (which do not resolve by
    /// themselves) fire: the store's mark still counts them, so `groups forget` can resolve
    /// them.
    #[test]
    fn the_store_mark_counts_alerts_firing_after_their_rows_were_pruned() {
        let (dir, sink, store, _, _) = stored_sink("mark-pruned");
        let mut sink = sink.with_max_age(Some(cepheus_core::time::Duration::from_secs(3600)));
        sink.take(alerts(3), 0);
        sink.prune_by_age();
        assert_eq!(store.counts(), (0, 3));
        let mut ctx = actix::Context::<AlertSink>::new();
        let mark = <AlertSink as Handler<StoreMark>>::handle(&mut sink, StoreMark, &mut ctx);
        let newest = store.firing().unwrap().iter().map(|f| f.seq).max();
        assert_eq!(mark, newest);
        assert!(mark.is_some());
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// What the sink's test modules share: a sink forwarding to a socket the test reads.
#[cfg(test)]
mod test_kit {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::net::UdpSocket;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use super::super::silence::InhibitRule;
    use super::*;

    /// The socket a test sink forwards to, and the sink's counters (to wait for its queue).
    pub struct Collector {
        socket: UdpSocket,
        counters: Arc<SinkCounters>,
    }

    /// A sink on `store` forwarding to a fresh UDP socket, with `inhibits`.
    pub fn sink_on(store: &Store, inhibits: Vec<InhibitRule>) -> (AlertSink, Collector) {
        let counters = Arc::new(SinkCounters::default());
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let to = super::super::config::Forward::Udp(socket.local_addr().unwrap());
        let f = super::super::forward::Forwarder::start(to, counters.clone(), Some(store.clone()))
            .unwrap();
        let mut sink = AlertSink::with_writer(None, counters.clone())
            .with_forwarder(Some(f))
            .with_inhibits(inhibits);
        sink.store = Some(store.clone());
        (sink, Collector { socket, counters })
    }

    /// Adds the silence `spec` (as `POST /silences/add` takes it) through the sink's handler.
    pub fn add_silence(
        sink: &mut AlertSink,
        spec: serde_json::Value,
    ) -> super::super::silence::Silence {
        let new = serde_json::from_value(spec).unwrap();
        let mut ctx = actix::Context::<AlertSink>::new();
        <AlertSink as Handler<AddSilence>>::handle(sink, AddSilence(new), &mut ctx)
            .unwrap()
            .0
    }

    /// The datagrams the collector got, once the forwarder dealt with all it was given (its
    /// queue's gauge says so: no fixed wait, which a loaded machine outlasts).
    pub fn got(c: &Collector) -> Vec<String> {
        let until = Instant::now() + Duration::from_secs(30);
        while c.counters.syslog_waiting.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while let Ok(n) = c.socket.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }
}

/// Silences against the outputs and the store, each test a defect a review found.
#[cfg(test)]
mod silence_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use cepheus_core::engine::{Engine, EngineConfig};
    use cepheus_core::event::{Event, Field, Source, Value};
    use cepheus_core::rules::compile_str;

    use super::test_kit::{Collector, add_silence, got, sink_on};
    use super::*;

    /// `absent(hb) for 10s` by host, one host silent 30 s: its firing and its resolve, made
    /// by one push of the engine (so one batch from a shard).
    fn hb_alerts() -> Vec<Alert> {
        let rules = compile_str(
            "hb.toml",
            "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 10s\"\n",
        )
        .rules
        .unwrap();
        let mut e = Engine::new(&rules, EngineConfig::default()).unwrap();
        let mut out = Vec::new();
        let t0 = Timestamp::from_secs(1_000_000);
        let mut batch = Vec::new();
        for t in [0, 30] {
            let at = t0.add(cepheus_core::time::Duration::from_secs(t));
            batch.push(
                Event::new(Source::Syslog, at, at)
                    .with(Field::Host, Value::str("web1"))
                    .with(Field::App, Value::str("hb")),
            );
        }
        e.push_batch(batch, &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].state, AlertState::Firing);
        assert_eq!(out[1].state, AlertState::Resolved);
        out
    }

    /// A sink with a store, forwarding to a UDP socket read by the test, and a silence of
    /// rule `hb` (host web1) active for an hour. Returns the socket and the silence's id.
    /// A store of its own, in a fresh folder named after `name`.
    fn scratch_store(name: &str) -> (std::path::PathBuf, Store) {
        let dir =
            std::env::temp_dir().join(format!("cepheus-silence-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir, 100).unwrap();
        (dir, store)
    }

    fn silenced_sink(name: &str) -> (std::path::PathBuf, AlertSink, Store, Collector, String) {
        let (dir, store) = scratch_store(name);
        let (mut sink, collector) = sink_on(&store, Vec::new());
        let s = add_silence(
            &mut sink,
            serde_json::json!({"rule": "hb", "group": {"host": "web1"}, "for": "1h", "by": "ops"}),
        );
        (dir, sink, store, collector, s.id)
    }

    /// A muted firing and its resolve in one shard batch: the resolve is forwarded
    /// (receivers get the end of an alert they never heard of).
    #[test]
    fn the_end_of_a_muted_firing_in_the_same_batch_is_not_forwarded() {
        let (dir, mut sink, store, collector, _) = silenced_sink("same-batch");
        sink.take(hb_alerts(), 0);
        let kept = store.recent(10).unwrap();
        assert_eq!(kept.len(), 2);
        let sent = got(&collector);
        assert!(sent.is_empty(), "forwarded: {sent:?}");
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The store's disk nearly full (changes held, written out, kept later): the
    /// resolve of a muted firing is forwarded, since only `record_changes` marks it.
    #[test]
    fn the_end_of_a_muted_firing_is_not_forwarded_while_the_store_is_full() {
        let (dir, mut sink, store, collector, _) = silenced_sink("held-end");
        sink.space.min_free = u64::MAX;
        sink.space.checked = None;
        let both = hb_alerts();
        sink.take(both[..1].to_vec(), 0);
        sink.take(both[1..].to_vec(), 0);
        let sent = got(&collector);
        assert!(sent.is_empty(), "forwarded: {sent:?}");
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A silence by severity mutes the alerts of that severity only (the heartbeat rule's
    /// alerts are `high`).
    #[test]
    fn a_silence_by_severity_mutes_that_severity_only() {
        for (severity, muted) in [("low", false), ("high", true)] {
            let (dir, store) = scratch_store(&format!("severity-{severity}"));
            let (mut sink, collector) = sink_on(&store, Vec::new());
            add_silence(
                &mut sink,
                serde_json::json!({"severity": [severity], "for": "1h", "by": "ops"}),
            );
            sink.take(hb_alerts()[..1].to_vec(), 0);
            let sent = got(&collector);
            assert_eq!(sent.is_empty(), muted, "{severity}: {sent:?}");
            let listed = &store.firing().unwrap()[0].json;
            assert_eq!(listed.contains("\"silenced\""), muted, "{listed}");
            drop((sink, store));
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// A firing sent again when its silence ended is owed to the outputs in the store until
    /// they deal with it: sent, it is owed no more (a restart does not send it twice); left
    /// unsent by a stop or a crash, it is sent at the next start, once.
    #[test]
    fn a_firing_sent_again_is_owed_until_delivered_even_across_a_stop() {
        let (dir, mut sink, store, collector, id) = silenced_sink("owed");
        // Once delivered, owed no more: a restart sends nothing.
        let delivered_once = |sink: AlertSink| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !store.resends().unwrap().is_empty() {
                let late = std::time::Instant::now() >= deadline;
                assert!(!late, "still owed after delivery");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            drop(sink);
            let (mut sink, collector) = sink_on(&store, Vec::new());
            sink.start_up();
            assert!(got(&collector).is_empty(), "sent twice");
            sink
        };
        sink.take(hb_alerts()[..1].to_vec(), 0);
        assert!(got(&collector).is_empty());
        let mut ctx = actix::Context::<AlertSink>::new();
        <AlertSink as Handler<ExpireSilence>>::handle(&mut sink, ExpireSilence(id), &mut ctx)
            .unwrap()
            .unwrap();
        assert_eq!(got(&collector).len(), 1);
        let sink = delivered_once(sink);

        // Muted again (as by a silence gone since), then the agent dies between that
        // silence's end (kept) and the sending: as the sink's write alone.
        let alert = hb_alerts()[0].id().0;
        let mark = r#"{"id":"00000000000000c3","by":"ops","until":"2026-12-03T06:00:00Z"}"#;
        store.mute(alert, cepheus_store::SILENCED, mark).unwrap();
        let back = store
            .unmute(
                cepheus_store::SILENCED,
                "id",
                "00000000000000c3",
                &|_| false,
                &[super::super::forward::CURSOR],
            )
            .unwrap();
        assert_eq!(back.len(), 1);
        drop(sink);
        let (mut sink, collector) = sink_on(&store, Vec::new());
        sink.start_up();
        let sent = got(&collector);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert!(sent[0].contains(" firing - "), "{}", sent[0]);
        drop(delivered_once(sink));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A muted firing held while the store's disk is nearly full; its silence ends
    /// meanwhile; kept later, it is kept muted by the ended silence for ever: never sent
    /// though it still fires after the silence's end, listed `silenced` by an expired silence,
    /// and its end will be muted too.
    #[test]
    fn a_muted_firing_held_for_the_store_is_sent_when_its_silence_ends() {
        let (dir, mut sink, store, collector, id) = silenced_sink("held-firing");
        sink.space.min_free = u64::MAX;
        sink.space.checked = None;
        let both = hb_alerts();
        sink.take(both[..1].to_vec(), 0);
        let mut ctx = actix::Context::<AlertSink>::new();
        let ended =
            <AlertSink as Handler<ExpireSilence>>::handle(&mut sink, ExpireSilence(id), &mut ctx)
                .unwrap()
                .unwrap();
        assert!(ended.ended);
        // Room again: the held firing is kept.
        sink.space.min_free = 0;
        sink.space.checked = None;
        // (As the catch-up tick: kept, then what no longer mutes settled.)
        assert!(sink.catch_up());
        sink.reconcile_if_due();
        sink.end_silences();
        let firing = store.firing().unwrap();
        assert_eq!(firing.len(), 1);
        let sent = got(&collector);
        assert!(
            !firing[0].json.contains("\"silenced\"") && sent.len() == 1,
            "still firing after its silence ended, yet listed muted and never sent: {} / sent {sent:?}",
            firing[0].json
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A match muted by a silence (it fires once and stays firing) stays muted when the
    /// silence ends: sent then, it would be news of the past (an episode still firing is
    /// sent: the tests above).
    #[test]
    fn a_muted_match_stays_muted_when_its_silence_ends() {
        let (dir, mut sink, store, collector, id) = silenced_sink("match");
        let rules = compile_str(
            "m.toml",
            "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.x = 'syslog and app == \"x\"'\npattern = \"x\"\n",
        )
        .rules
        .unwrap();
        let mut e = Engine::new(&rules, EngineConfig::default()).unwrap();
        let mut matched = Vec::new();
        let at = Timestamp::from_secs(1_000_000);
        e.push(
            Event::new(Source::Syslog, at, at)
                .with(Field::Host, Value::str("web1"))
                .with(Field::App, Value::str("x")),
            &mut matched,
        );
        assert_eq!(matched.len(), 1);
        assert!(!matched[0].episodic());
        sink.take(matched, 0);
        let mut ctx = actix::Context::<AlertSink>::new();
        <AlertSink as Handler<ExpireSilence>>::handle(&mut sink, ExpireSilence(id), &mut ctx)
            .unwrap()
            .unwrap();
        let sent = got(&collector);
        assert!(sent.is_empty(), "{sent:?}");
        let firing = store.firing().unwrap();
        assert_eq!(firing.len(), 1);
        assert!(
            firing[0].json.contains("\"silenced\""),
            "{}",
            firing[0].json
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// (The clock stepped back.) A silence whose end was dealt with (`ended`) mutes
    /// again when the wall clock goes back before its `ends_at` (`silencing` looks at the
    /// times only); `end_silences` and `expire` skip an `ended` silence, so what it mutes
    /// then is never unmuted nor sent.
    #[test]
    fn a_silence_whose_end_was_dealt_with_mutes_nothing_more() {
        let (dir, mut sink, store, collector, id) = silenced_sink("clock-back");
        // Ended at T and dealt with; then NTP steps the clock back before T: as if so.
        sink.silences[0].ended = true;
        sink.take(hb_alerts()[..1].to_vec(), 0);
        let mut ctx = actix::Context::<AlertSink>::new();
        let _ =
            <AlertSink as Handler<ExpireSilence>>::handle(&mut sink, ExpireSilence(id), &mut ctx);
        sink.end_silences();
        let sent = got(&collector);
        assert_eq!(
            sent.len(),
            1,
            "muted by an ended silence, and never sent: {}",
            store.firing().unwrap()[0].json
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Inhibition and the muting fixes, from a review: each test a defect.
#[cfg(test)]
mod inhibit_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use cepheus_core::engine::{Engine, EngineConfig};
    use cepheus_core::event::{Event, Field, Source, Value};
    use cepheus_core::rules::compile_str;

    use super::super::silence::InhibitRule;
    use super::test_kit::{Collector, add_silence, got, sink_on};
    use super::*;

    /// `hb`: a host's heartbeat absent 10 s (by host); `svc`: an app of a host silent 20 s
    /// (by host and app). `tick` events move the clock only.
    const RULES: &str = "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 10s\"\n\n[[rule]]\nname = \"svc\"\nseverity = \"high\"\ngroup_by = [\"host\", \"app\"]\nevents.s = 'syslog and app != \"hb\" and app != \"tick\"'\npattern = \"absent(s) for 20s\"\n";

    struct Feed(Engine);

    impl Feed {
        fn new() -> Feed {
            let rules = compile_str("r.toml", RULES).rules.unwrap();
            Feed(Engine::new(&rules, EngineConfig::default()).unwrap())
        }

        /// What one event of `host`/`app` at second `t` makes.
        fn at(&mut self, t: i64, host: &str, app: &str) -> Vec<Alert> {
            let at =
                Timestamp::from_secs(1_000_000).add(cepheus_core::time::Duration::from_secs(t));
            let mut out = Vec::new();
            self.0.push(
                Event::new(Source::Syslog, at, at)
                    .with(Field::Host, Value::str(host))
                    .with(Field::App, Value::str(app)),
                &mut out,
            );
            out
        }
    }

    fn rule_of_alert(a: &Alert) -> String {
        format!("{}:{:?}:{:?}", a.rule(), a.state, a.group())
    }

    fn inhibit(source: &str, targets: &[&str], equal: &[&str]) -> InhibitRule {
        InhibitRule {
            source: source.into(),
            targets: targets.iter().map(|s| s.to_string()).collect(),
            equal: equal.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// What `started` does with the store before any shard speaks.
    fn start(sink: &mut AlertSink) {
        sink.start_up();
    }

    fn scratch(name: &str) -> (std::path::PathBuf, Store) {
        let dir =
            std::env::temp_dir().join(format!("cepheus-inhibit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir, 1000).unwrap();
        (dir, store)
    }

    fn one(alerts: Vec<Alert>, want: &str) -> Vec<Alert> {
        let names: Vec<String> = alerts.iter().map(rule_of_alert).collect();
        assert_eq!(alerts.len(), 1, "{want}: {names:?}");
        assert!(names[0].starts_with(want), "{want}: {names:?}");
        alerts
    }

    /// The engine: web1's heartbeat and its app `db` seen at 0; `hb` web1 fires at 10 (seen
    /// at 11), `svc` web1/db at 20 (seen at 21); the heartbeat back at 30 ends `hb`.
    fn timeline() -> (Vec<Alert>, Vec<Alert>, Vec<Alert>) {
        let mut f = Feed::new();
        assert!(f.at(0, "web1", "hb").is_empty());
        assert!(f.at(0, "web1", "db").is_empty());
        let source_fires = one(f.at(11, "clock", "tick"), "hb:Firing");
        let target_fires = one(f.at(21, "clock", "tick"), "svc:Firing");
        let source_ends = one(f.at(30, "web1", "hb"), "hb:Resolved");
        (source_fires, target_fires, source_ends)
    }

    /// The source's end waited for the store (its disk nearly full) when the agent stopped:
    /// kept at the next start (`hold_unkept`, `catch_up`), which noted no inhibitor's end, after
    /// `load_inhibitors` read it firing in the store. It inhibits for ever from then: a
    /// target firing after its end is muted, and never sent.
    #[test]
    fn a_source_whose_end_waited_for_the_store_at_a_restart_inhibits_no_more() {
        let (dir, store) = scratch("unkept-end");
        let (source_fires, target_fires, source_ends) = timeline();
        let rules = vec![inhibit("hb", &["svc"], &["host"])];
        let (mut sink, collector) = sink_on(&store, rules.clone());
        sink.take(source_fires, 0);
        sink.space.min_free = u64::MAX;
        sink.space.checked = None;
        sink.take(source_ends, 0);
        sink.save_unkept();
        assert_eq!(store.unkept().unwrap().len(), 1);
        let _ = got(&collector);
        drop(sink);
        // The restart, with room again.
        let (mut sink, collector) = sink_on(&store, rules);
        start(&mut sink);
        assert!(
            store.firing().unwrap().is_empty(),
            "the source's end is kept"
        );
        sink.take(target_fires, 0);
        let sent = got(&collector);
        assert_eq!(
            sent.len(),
            1,
            "a target firing after its source ended is muted by it: {}",
            store.firing().unwrap()[0].json
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The source's firing and a target's it muted waited for the store when the agent
    /// stopped: at the start `load_inhibitors` (read before what waited) did not see the
    /// source, and the target was sent although its source still fired.
    #[test]
    fn a_target_whose_source_waited_for_the_store_at_a_restart_stays_muted() {
        let (dir, store) = scratch("unkept-source");
        let (source_fires, target_fires, _) = timeline();
        let rules = vec![inhibit("hb", &["svc"], &["host"])];
        let (mut sink, collector) = sink_on(&store, rules.clone());
        sink.space.min_free = u64::MAX;
        sink.space.checked = None;
        sink.take(source_fires, 0);
        sink.take(target_fires, 0);
        sink.save_unkept();
        assert_eq!(store.unkept().unwrap().len(), 2);
        let sent = got(&collector);
        assert_eq!(sent.len(), 1, "the source only: {sent:?}");
        drop(sink);
        let (mut sink, collector) = sink_on(&store, rules);
        start(&mut sink);
        assert_eq!(store.firing().unwrap().len(), 2);
        let sent = got(&collector);
        assert!(
            sent.is_empty(),
            "the target is sent while its source fires: {sent:?}"
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Under `[[inhibit]]` source `hb`, targets `svc`, equal `host`: the source fires, then
    /// the target, muted (only the source is sent); then the agent restarts with `now` as
    /// its inhibit rules. The restarted sink, its collector, and the source's end to come.
    fn muted_then_restarted(
        store: &Store,
        now: Vec<InhibitRule>,
    ) -> (AlertSink, Collector, Vec<Alert>) {
        let (source_fires, target_fires, source_ends) = timeline();
        let (mut sink, collector) = sink_on(store, vec![inhibit("hb", &["svc"], &["host"])]);
        sink.take(source_fires, 0);
        sink.take(target_fires, 0);
        assert_eq!(got(&collector).len(), 1);
        drop(sink);
        let (mut sink, collector) = sink_on(store, now);
        start(&mut sink);
        (sink, collector, source_ends)
    }

    /// The `[[inhibit]]` rule taken out of the configuration (or its source renamed) while
    /// a target it muted fires: nothing ever unmutes the target (`note_inhibitor` knows
    /// only the rules of now, and nothing at the start looks at the `inhibited` rows), so
    /// it is never sent, even once its source ended, and its end is muted too.
    #[test]
    fn a_target_muted_by_a_removed_inhibit_rule_is_sent_when_its_source_ends() {
        let (dir, store) = scratch("removed-rule");
        let (mut sink, collector, source_ends) = muted_then_restarted(&store, Vec::new());
        sink.take(source_ends, 0);
        let firing = store.firing().unwrap();
        assert_eq!(firing.len(), 1);
        let sent = got(&collector);
        assert!(
            sent.len() == 2 && !firing[0].json.contains("\"inhibited\""),
            "the source ended, its target still firing is never sent: {} / {sent:?}",
            firing[0].json
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The `[[inhibit]]` rule changed across a restart while its source still fires: a
    /// target it no longer covers (its `targets`, or its `equal` fields) is sent at the start,
    /// not once the source ends; one it still covers stays muted.
    #[test]
    fn a_target_an_inhibit_rule_no_longer_covers_is_sent_at_the_start() {
        for (now, sent) in [
            (inhibit("hb", &["other"], &["host"]), 1),
            (inhibit("hb", &["svc"], &["app"]), 1),
            (inhibit("hb", &["svc"], &["host"]), 0),
            (inhibit("hb", &[], &["host"]), 0),
        ] {
            let (dir, store) = scratch("changed-rule");
            let (sink, collector, _) = muted_then_restarted(&store, vec![now.clone()]);
            let got = got(&collector);
            assert_eq!(got.len(), sent, "{now:?}: {got:?}");
            assert!(
                got.iter().all(|d| d.contains("\"rule\":\"svc\"")),
                "{got:?}"
            );
            let target = (store.firing().unwrap().into_iter())
                .find(|f| f.json.contains("\"rule\":\"svc\""))
                .unwrap();
            assert_eq!(target.json.contains("\"inhibited\""), sent == 0, "{now:?}");
            drop((sink, store));
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// The agent dies between keeping a source's end and unmuting what it inhibited
    /// (`take` unmutes after `keep` and `emit`): at the next start the source is not
    /// firing, and nothing unmutes its targets: muted for ever.
    #[test]
    fn a_target_whose_source_ended_before_a_crash_is_sent_at_the_start() {
        let (dir, store) = scratch("crash");
        let (source_fires, target_fires, source_ends) = timeline();
        let rules = vec![inhibit("hb", &["svc"], &["host"])];
        let (mut sink, collector) = sink_on(&store, rules.clone());
        sink.take(source_fires, 0);
        sink.take(target_fires, 0);
        assert_eq!(got(&collector).len(), 1);
        // The source's end kept and written out; the agent dies before `unmute_inhibited`.
        let end: Vec<Change> = source_ends.iter().map(Change::of).collect();
        let fresh = sink.keep(end);
        sink.emit(&fresh);
        drop(sink);
        let (mut sink, collector) = sink_on(&store, rules);
        start(&mut sink);
        let firing = store.firing().unwrap();
        assert_eq!(firing.len(), 1);
        let sent = got(&collector);
        assert!(
            !firing[0].json.contains("\"inhibited\""),
            "muted by an alert that ended: {}",
            firing[0].json
        );
        // The target it muted is sent (it was counted unsent: the queue was behind at the
        // start), after the source's end if the crash kept that from the output.
        let of = |d: &String| {
            let rule = if d.contains("\"rule\":\"svc\"") {
                "svc"
            } else {
                "hb"
            };
            let state = if d.contains(" firing - ") {
                "firing"
            } else {
                "resolved"
            };
            format!("{rule}:{state}")
        };
        let sent: Vec<String> = sent.iter().map(of).collect();
        assert_eq!(
            sent.last().map(String::as_str),
            Some("svc:firing"),
            "{sent:?}"
        );
        assert!(
            sent[..sent.len() - 1].iter().all(|s| s == "hb:resolved"),
            "{sent:?}"
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Self-inhibition (`targets` left out: every rule, the source's too), three apps of
    /// one host silent: the first pages, the second and third are muted. When the first
    /// ends, `send_unmuted` mutes the second again by the third (which began after it) and
    /// the third by the second: each mutes the other, both fire, neither is ever sent.
    #[test]
    fn alerts_of_a_source_that_targets_itself_do_not_mute_each_other_for_ever() {
        let (dir, store) = scratch("cycle");
        let mut f = Feed::new();
        assert!(f.at(0, "web1", "a").is_empty());
        assert!(f.at(2, "web1", "b").is_empty());
        assert!(f.at(4, "web1", "c").is_empty());
        let a_fires = one(f.at(21, "clock", "tick"), "svc:Firing");
        let b_fires = one(f.at(23, "clock", "tick"), "svc:Firing");
        let c_fires = one(f.at(25, "clock", "tick"), "svc:Firing");
        let a_ends = one(f.at(26, "web1", "a"), "svc:Resolved");
        let (mut sink, collector) = sink_on(&store, vec![inhibit("svc", &[], &["host"])]);
        sink.take(a_fires, 0);
        sink.take(b_fires, 0);
        sink.take(c_fires, 0);
        // As in Alertmanager, alerts of the source rule (on both sides) inhibit none of
        // their own: each is sent, and none is left muted.
        assert_eq!(got(&collector).len(), 3);
        sink.take(a_ends, 0);
        assert_eq!(got(&collector).len(), 1);
        let firing: Vec<String> = store
            .firing()
            .unwrap()
            .into_iter()
            .map(|f| f.json)
            .collect();
        assert_eq!(firing.len(), 2);
        assert!(
            firing.iter().all(|f| !f.contains("inhibited")),
            "{firing:#?}"
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An alert that fired and was sent, then a silence added; the engine makes its firing
    /// again with its end in one batch (a journal replayed after a crash: the firing a
    /// repeat the store drops): the firing is marked muted by the silence of now, and the
    /// batch-aware marking (`mark_muted_ends`, `record_changes`) mutes its end by it; the
    /// receivers never hear that an alert they were sent ended.
    #[test]
    fn the_end_of_a_sent_firing_repeated_in_its_batch_is_not_muted() {
        let (dir, store) = scratch("repeat");
        let mut f = Feed::new();
        assert!(f.at(0, "web1", "hb").is_empty());
        let fires = one(f.at(11, "clock", "tick"), "hb:Firing");
        let ends = one(f.at(30, "web1", "hb"), "hb:Resolved");
        let (mut sink, collector) = sink_on(&store, Vec::new());
        sink.take(fires.clone(), 0);
        assert_eq!(got(&collector).len(), 1);
        add_silence(
            &mut sink,
            serde_json::json!({"rule": "hb", "for": "1h", "by": "ops"}),
        );
        // Replayed: the firing (a repeat) and its end in one batch.
        sink.take(fires.into_iter().chain(ends).collect(), 0);
        let sent = got(&collector);
        let last = store.recent(1).unwrap()[0].json.clone();
        assert!(
            sent.len() == 1 && !last.contains("\"silenced\""),
            "the end of a firing sent unmuted is muted: {last} / {sent:?}"
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A match muted by a silence that ends while the agent is down stays muted at the next
    /// start: what muted alerts is settled once the engines said which rules' alerts are
    /// episodes (before, a match was taken for one and sent, news of the past).
    #[test]
    fn a_muted_match_whose_silence_ended_while_down_stays_muted_at_the_start() {
        let (dir, store) = scratch("match-down");
        let rules = compile_str(
            "m.toml",
            "[[rule]]\nname = \"m\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.x = 'syslog and app == \"x\"'\npattern = \"x\"\n",
        )
        .rules
        .unwrap();
        let mut e = Engine::new(&rules, EngineConfig::default()).unwrap();
        let mut matched = Vec::new();
        let at = Timestamp::from_secs(1_000_000);
        e.push(
            Event::new(Source::Syslog, at, at)
                .with(Field::Host, Value::str("web1"))
                .with(Field::App, Value::str("x")),
            &mut matched,
        );
        assert!(matched.len() == 1 && !matched[0].episodic());
        let (mut sink, collector) = sink_on(&store, Vec::new());
        add_silence(
            &mut sink,
            serde_json::json!({"rule": "m", "for": "1h", "by": "ops"}),
        );
        sink.take(matched, 0);
        assert!(got(&collector).is_empty());
        // Its end comes while the agent is down.
        let mut s = sink.silences[0].clone();
        s.ends_at = crate::flow::live::wall_clock().sub(cepheus_core::time::Duration::from_secs(1));
        store
            .put_silence(
                u64::from_str_radix(&s.id, 16).unwrap(),
                &serde_json::to_string(&s).unwrap(),
            )
            .unwrap();
        drop(sink);
        // The restart, as `run` makes its sink: the start's reckoning waits for the shard.
        let (sink, collector) = sink_on(&store, Vec::new());
        let mut sink = sink.adopting(1);
        start(&mut sink);
        assert!(
            got(&collector).is_empty(),
            "settled before the engines said"
        );
        sink.adopt(Adopt {
            shard: 0,
            ids: Vec::new(),
            episodic: Vec::new(),
            running: vec!["m".to_string()],
        });
        let sent = got(&collector);
        assert!(sent.is_empty(), "a muted match sent at the start: {sent:?}");
        assert!(sink.silences[0].ended);
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    // ---- Review of 0dadf51 (session 52) ----

    /// A match rule `m` by host: one alert per event of app `x` (at second `t`).
    fn match_alert(e: &mut Engine, t: i64, host: &str) -> Vec<Alert> {
        let at = Timestamp::from_secs(1_000_000).add(cepheus_core::time::Duration::from_secs(t));
        let mut out = Vec::new();
        e.push(
            Event::new(Source::Syslog, at, at)
                .with(Field::Host, Value::str(host))
                .with(Field::App, Value::str("x")),
            &mut out,
        );
        assert!(out.len() == 1 && !out[0].episodic(), "{out:?}");
        out
    }

    fn match_engine() -> Engine {
        let rules = compile_str(
            "m.toml",
            "[[rule]]\nname = \"m\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.x = 'syslog and app == \"x\"'\npattern = \"x\"\n",
        )
        .rules
        .unwrap();
        Engine::new(&rules, EngineConfig::default()).unwrap()
    }

    fn of_rule<'a>(sent: &'a [String], rule: &str) -> Vec<&'a String> {
        let want = format!("\"rule\":\"{rule}\"");
        sent.iter().filter(|l| l.contains(&want)).collect()
    }

    /// `catch_up` (inside `keep`) runs `reconcile_mutes` after `take` already noted the
    /// batch's inhibitor ends in `inhibitors`, but before the batch is kept: a batch with a
    /// source's end and its muted target's end, taken when what waited for the store is
    /// kept, has the target's firing sent (`send_again`) while its end, marked by
    /// `mark_muted_ends` before, stays muted: the receivers get a firing that never ends.
    #[test]
    fn a_target_and_its_source_ending_in_a_catch_up_batch_both_stay_muted() {
        let (dir, store) = scratch("r52-race");
        let mut f = Feed::new();
        assert!(f.at(0, "web1", "hb").is_empty());
        assert!(f.at(0, "web1", "db").is_empty());
        assert!(f.at(5, "web2", "hb").is_empty());
        let source_fires = one(f.at(11, "clock", "tick"), "hb:Firing");
        let other_fires = one(f.at(16, "clock", "tick"), "hb:Firing");
        let target_fires = one(f.at(21, "clock", "tick"), "svc:Firing");
        let source_ends = one(f.at(30, "web1", "hb"), "hb:Resolved");
        let target_ends = one(f.at(31, "web1", "db"), "svc:Resolved");
        let (mut sink, collector) = sink_on(&store, vec![inhibit("hb", &["svc"], &["host"])]);
        sink.take(source_fires, 0);
        sink.take(target_fires, 0);
        assert_eq!(got(&collector).len(), 1);
        // The disk nearly full a moment: another host's alert waits for the store.
        sink.space.min_free = u64::MAX;
        sink.space.checked = None;
        sink.take(other_fires, 0);
        assert_eq!(sink.unkept.len(), 1);
        sink.space.min_free = 0;
        sink.space.checked = None;
        let _ = got(&collector);
        sink.take(source_ends.into_iter().chain(target_ends).collect(), 0);
        let sent = got(&collector);
        let svc = of_rule(&sent, "svc");
        assert!(
            svc.len() != 1,
            "the muted target's firing is sent, its end muted: {svc:?}"
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `mark_muted_ends` takes a repeated firing's mutes from the store only when the store
    /// has it: a firing sent unmuted that still waits for the store (its disk still nearly
    /// full after a crash), made again with its end by the replay once a silence was added,
    /// has the repeat's `silenced` put on its end: the receivers never hear it ended.
    #[test]
    fn the_end_of_a_sent_firing_waiting_for_the_store_repeated_in_its_batch_is_sent() {
        let (dir, store) = scratch("r52-repeat-unkept");
        let mut f = Feed::new();
        assert!(f.at(0, "web1", "hb").is_empty());
        let fires = one(f.at(11, "clock", "tick"), "hb:Firing");
        let ends = one(f.at(30, "web1", "hb"), "hb:Resolved");
        let (mut sink, collector) = sink_on(&store, Vec::new());
        sink.space.min_free = u64::MAX;
        sink.space.checked = None;
        sink.take(fires.clone(), 0);
        assert_eq!(got(&collector).len(), 1, "the firing is sent");
        add_silence(
            &mut sink,
            serde_json::json!({"rule": "hb", "for": "1h", "by": "ops"}),
        );
        sink.save_unkept();
        drop(sink);
        // The restart, the disk still nearly full; the replay makes the firing and its end.
        let (mut sink, collector) = sink_on(&store, Vec::new());
        sink.space.min_free = u64::MAX;
        sink.space.checked = None;
        start(&mut sink);
        sink.take(fires.into_iter().chain(ends).collect(), 0);
        let sent = got(&collector);
        assert!(
            sent.iter().any(|l| l.contains("\"state\":\"resolved\"")),
            "the end of a firing sent unmuted is muted: {sent:?} / {:?}",
            sink.unkept.iter().map(|c| &c.json).collect::<Vec<_>>()
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `ExpireSilence` calls `end_silences` while the start's reckoning waits for the
    /// shards (the tick's does not since 0dadf51): `episodic` is still empty, so a muted
    /// match is taken for an episode and sent, news of the past.
    #[test]
    fn a_silence_expired_before_the_engines_said_leaves_a_muted_match_muted() {
        let (dir, store) = scratch("r52-expire-early");
        let mut e = match_engine();
        let (mut sink, collector) = sink_on(&store, Vec::new());
        let s = add_silence(
            &mut sink,
            serde_json::json!({"rule": "m", "for": "1h", "by": "ops"}),
        );
        sink.take(match_alert(&mut e, 0, "web1"), 0);
        assert!(got(&collector).is_empty());
        drop(sink);
        let (sink, collector) = sink_on(&store, Vec::new());
        let mut sink = sink.adopting(1);
        start(&mut sink);
        // Expired through the API before the shard's `Adopt`.
        let mut ctx = actix::Context::<AlertSink>::new();
        <AlertSink as Handler<ExpireSilence>>::handle(&mut sink, ExpireSilence(s.id), &mut ctx)
            .unwrap()
            .unwrap();
        sink.adopt(Adopt {
            shard: 0,
            ids: Vec::new(),
            episodic: Vec::new(),
            running: vec!["m".to_string()],
        });
        let sent = got(&collector);
        assert!(sent.is_empty(), "a muted match sent: {sent:?}");
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A restart's `Retire` (sent by a shard from `install`, before its `Adopt`) resolves
    /// an `[[inhibit]]` source whose rule changed while the agent was down;
    /// `note_inhibitors_ended` → `unmute_inhibited` asks `stays_muted` while `episodic` is
    /// still empty: the match it inhibited is sent, news of the past.
    #[test]
    fn a_source_retired_before_the_engines_said_leaves_a_muted_match_muted() {
        let (dir, store) = scratch("r52-retire-early");
        let mut f = Feed::new();
        assert!(f.at(0, "web1", "hb").is_empty());
        let source_fires = one(f.at(11, "clock", "tick"), "hb:Firing");
        let mut e = match_engine();
        let rules = vec![inhibit("hb", &["m"], &["host"])];
        let (mut sink, collector) = sink_on(&store, rules.clone());
        sink.take(source_fires, 0);
        sink.take(match_alert(&mut e, 20, "web1"), 0);
        assert_eq!(got(&collector).len(), 1, "the source only");
        drop(sink);
        let (sink, collector) = sink_on(&store, rules);
        let mut sink = sink.adopting(1);
        start(&mut sink);
        let mut ctx = actix::Context::<AlertSink>::new();
        <AlertSink as Handler<Retire>>::handle(
            &mut sink,
            Retire {
                rules: vec![("hb".to_string(), Reason::RuleChanged)],
                time: crate::flow::live::wall_clock(),
                reload: None,
            },
            &mut ctx,
        );
        sink.adopt(Adopt {
            shard: 0,
            ids: Vec::new(),
            episodic: vec!["hb".to_string(), "svc".to_string()],
            running: vec!["hb".to_string(), "svc".to_string(), "m".to_string()],
        });
        let sent = got(&collector);
        assert_eq!(of_rule(&sent, "hb").len(), 1, "the source's end: {sent:?}");
        let m = of_rule(&sent, "m");
        assert!(m.is_empty(), "a muted match sent: {m:?}");
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A match as an `[[inhibit]]` source inhibits nothing: its alerts (a new id per match)
    /// never end, so noted in `inhibitors` they piled up without bound and, once the store
    /// pruned them, went on inhibiting after the group was forgotten.
    #[test]
    fn match_sources_neither_pile_up_nor_inhibit() {
        let dir =
            std::env::temp_dir().join(format!("cepheus-inhibit-r52-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir, 4).unwrap();
        let mut e = match_engine();
        let mut f = Feed::new();
        assert!(f.at(0, "web1", "db").is_empty());
        let target_fires = one(f.at(21, "clock", "tick"), "svc:Firing");
        let (mut sink, collector) = sink_on(&store, vec![inhibit("m", &["svc"], &["host"])]);
        for t in 0..20 {
            sink.take(match_alert(&mut e, t - 100, "web1"), 0);
        }
        assert_eq!(got(&collector).len(), 20);
        let noted: usize = sink.inhibitors.values().map(|s| s.len()).sum();
        let firing = store.firing().unwrap().len();
        let mut ctx = actix::Context::<AlertSink>::new();
        let through = store.last_seq().unwrap().unwrap();
        let n = <AlertSink as Handler<ForgetAlerts>>::handle(
            &mut sink,
            ForgetAlerts {
                through,
                rules: vec!["m".into()],
                group_by: vec!["host".into()],
                key: vec!["web1".into()],
                time: crate::flow::live::wall_clock(),
            },
            &mut ctx,
        );
        assert!(n > 0);
        assert!(store.firing().unwrap().is_empty());
        let _ = got(&collector);
        sink.take(target_fires, 0);
        let sent = got(&collector);
        assert!(
            noted <= firing && sent.len() == 1,
            "{noted} inhibitors noted, the store lists {firing} firing; after the group is forgotten, the target sent: {sent:?} / {}",
            store.firing().unwrap()[0].json
        );
        drop((sink, store));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
