//! cepheus-store: the agent's persistence (sled 0.34 behind an API that leaks no sled type).
//!
//! What it keeps, in the folder `store.path`:
//! - **alert changes**, each once: a change is known by its alert's id and state, so the
//!   firing (or resolved) an engine restored from an older checkpoint makes again is recognised
//!   and not kept, nor shown, twice. Kept in the order recorded, the oldest pruned beyond a
//!   cap.
//! - **engine checkpoints**, one per CEP shard, so a restart (even after `kill -9`) continues
//!   the groups, deadlines and partial matches of the last checkpoint. These are plain files
//!   in `<store>/state/` (written aside, synced, then renamed over the last), not sled
//!   values: sled 0.34 keeps every large value it ever replaced in its `blobs` folder
//!   (spacejam/sled#786), so a state saved every few seconds grew the store by gigabytes a
//!   day.
//!
//! Durability: [`Store::record`] and [`Store::save_checkpoints`] return once what they wrote
//! is flushed (sled) or synced (the state files), so what they return survives the process
//! being killed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cepheus_core::alert::{Alert, AlertState};
use sled::Transactional;

/// What [`Store::ack`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acked {
    /// No such alert is firing: nothing done.
    NotFiring,
    /// Acknowledged.
    Now,
    /// Acknowledged again: `before` is the acknowledgement it replaced (`{"by", "time"}`).
    Again {
        /// The replaced acknowledgement's JSON.
        before: String,
    },
}

/// What can go wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process holds the store (sled locks its folder).
    #[error(
        "the store at {0} is in use by another process (another `cepheus run` with the same `store.path`, or `cepheus alerts` reading it while no agent answered)"
    )]
    Locked(PathBuf),
    /// The store's files could not be read or written.
    #[error("the store at {path}: {source}")]
    Io {
        /// The store's folder.
        path: PathBuf,
        /// What sled said.
        source: sled::Error,
    },
    /// A saved state's file could not be read or written.
    #[error("the store's saved state at {path}: {source}")]
    State {
        /// The file or folder.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The store's files are damaged (sled found corruption, or failed while recovering
    /// them): the caller may set the folder aside and begin a new store.
    #[error("the store at {path} is damaged: {what}")]
    Corrupt {
        /// The store's folder.
        path: PathBuf,
        /// What was found.
        what: String,
    },
    /// A record in the store is not what this version writes (damaged, or another format).
    #[error("the store at {path} holds a damaged record: {what}")]
    Damaged {
        /// The store's folder.
        path: PathBuf,
        /// Which record.
        what: String,
    },
}

/// The store's format, kept in the store: a later format refuses an earlier one explicitly.
const FORMAT: u32 = 1;

/// A firing sent again when what muted it ended, still owed to some notifying outputs
/// ([`Store::resends`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resend {
    /// The alert's id.
    pub id: u64,
    /// The last change kept when it was sent again (`None`: none): its place in the order.
    pub after: Option<u64>,
    /// The outputs (as their cursors are named) that have not dealt with it.
    pub to: Vec<String>,
}

/// A [`Resend`] as its row holds it.
#[derive(serde::Serialize, serde::Deserialize)]
struct ResendRow {
    after: Option<u64>,
    to: Vec<String>,
}

/// An alert change to record: its identity (id and state) and its JSON text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The alert's id.
    pub id: u64,
    /// The state it enters.
    pub state: AlertState,
    /// The alert change, as the one JSON object of DESIGN.md ("Alerts").
    pub json: String,
    /// Its position in the store's order of recording, once kept ([`Store::record_changes`]
    /// sets it for the changes it keeps); `None` for a change not kept.
    pub seq: Option<u64>,
    /// A firing's rule meaning ([`cepheus_core::rules::ir::Rule::meaning_digest`]), kept
    /// beside it (not in its JSON) while it fires: after a crash, what tells an alert of the
    /// rule as it runs now from one of an earlier form. `None`: not known.
    pub meaning: Option<u64>,
}

impl Change {
    /// Whether a silence or an inhibition muted it (its JSON says `silenced` or
    /// `inhibited`): the notifying outputs (webhook, syslog) leave it out.
    pub fn is_muted(&self) -> bool {
        mutes_of(&self.json).is_some()
    }

    /// An engine's alert change, rendered.
    pub fn of(a: &Alert) -> Change {
        Change {
            id: a.id().0,
            state: a.state,
            json: a.to_json().to_string(),
            seq: None,
            meaning: None,
        }
    }
}

/// Where an output stands in the store's order of recording ([`Store::output_cursor`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputCursor {
    /// It never said: an output new to this store (it starts from now).
    Unknown,
    /// It dealt with every change up to this one (`None`: none yet).
    After(Option<u64>),
}

/// How many changes left out of a replay [`Store::resume_point`] counts at most (the count
/// says "at least" beyond): its cost stays bounded whatever the store holds.
pub const MISSED_COUNTED: usize = 131_072;

/// Where a resumed client goes on ([`Store::resume_point`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resume {
    /// The change to replay after (`None`: from the first kept).
    pub after: Option<u64>,
    /// Kept changes left out, the oldest, beyond the replay's limit (at most
    /// [`MISSED_COUNTED`]: at least that many beyond).
    pub skipped: u64,
    /// Changes after the client's were pruned, or the store was made anew since (how many
    /// is not known).
    pub pruned: bool,
}

impl Resume {
    /// A client's resume in a store that keeps no change: nothing to replay, and changes
    /// after its own are gone (or the store was made anew).
    pub fn nothing_kept() -> Resume {
        Resume {
            after: None,
            skipped: 0,
            pruned: true,
        }
    }
}

/// One alert change as stored: its position in the order of recording and its JSON text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredAlert {
    /// Position in the order of recording (increasing, with gaps).
    pub seq: u64,
    /// The alert change, as the one JSON object of DESIGN.md ("Alerts").
    pub json: String,
    /// For a firing alert ([`Store::firing`]; `None` in other listings): the meaning of the rule that fired it, if
    /// it was kept with one ([`Change::meaning`]).
    pub meaning: Option<u64>,
}

/// A shard's engine checkpoint as stored (the agent serialises it; the store keeps bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedShard {
    /// The shard's number.
    pub shard: u32,
    /// How many shards there were when it was saved (groups are spread by this count).
    pub shards: u32,
    /// The serialised checkpoint (empty when read from a state file: see `file`).
    pub data: Vec<u8>,
    /// Read from this state file ([`Store::readable_checkpoints`]), its bytes not held: they
    /// are read as they are decoded ([`SavedShard::reader`]), so that a restart does not hold
    /// every shard's state twice at its peak, as text and as read. `None`: `data` holds them.
    pub file: Option<PathBuf>,
}

impl SavedShard {
    /// The serialised checkpoint, read as it goes: from its state file, or from `data`.
    pub fn reader(&self) -> Result<Box<dyn std::io::Read + '_>, StoreError> {
        use std::io::Read;
        let Some(path) = &self.file else {
            return Ok(Box::new(&self.data[..]));
        };
        let err = |source| StoreError::State {
            path: path.clone(),
            source,
        };
        let mut f =
            std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path).map_err(err)?);
        // (Past the header: the shard count, already read.)
        f.read_exact(&mut [0u8; 4]).map_err(err)?;
        Ok(Box::new(f))
    }

    /// The same state with its bytes held in `data` (read from its file, if it has one).
    pub fn loaded(&self) -> Result<SavedShard, StoreError> {
        let mut data = Vec::new();
        let path = self.file.clone().unwrap_or_default();
        std::io::Read::read_to_end(&mut self.reader()?, &mut data)
            .map_err(|source| StoreError::State { path, source })?;
        Ok(SavedShard {
            data,
            file: None,
            ..self.clone()
        })
    }
}

/// The agent's store.
#[derive(Clone)]
pub struct Store {
    path: PathBuf,
    db: sled::Db,
    /// seq (u64 BE) -> id (8 bytes BE) + state (1 byte) + JSON.
    alerts: sled::Tree,
    /// id (8 bytes BE) + state (1 byte) -> seq: which changes were recorded.
    seen: sled::Tree,
    /// id (8 bytes BE) -> seq (u64 BE) + JSON of its firing: the alerts firing now (not yet
    /// resolved or retracted), whatever the pruning of changes.
    open: sled::Tree,
    /// id (8 bytes BE) -> meaning (u64 BE): the rule meaning a firing alert was kept with
    /// ([`Change::meaning`]); dropped with its row in `open`. (Added to format 1: a store
    /// without it holds none.)
    meanings: sled::Tree,
    /// id (8 bytes BE) -> JSON `{"by": ..., "time": ...}`: who acknowledged a firing alert,
    /// and when (dropped when it ends: its resolve carries it).
    acks: sled::Tree,
    /// id (8 bytes BE) -> JSON of the silence that muted its firing (`{"id", "by", "until"}`,
    /// as its firing's `silenced` says): the notifying outputs did not send it, nor will
    /// they send its end, which carries it too. Dropped when it ends, or when the silence
    /// ends while it fires ([`Store::unmute`]).
    muted: sled::Tree,
    /// id (8 bytes BE) -> JSON `{"after": seq or null, "to": [output names]}`: a firing
    /// alert sent again when what muted it ended, which those notifying outputs have not
    /// dealt with yet (written with the unmuting, dropped by each output as it delivers it
    /// or gives it up, [`Store::resent`]): what a stop or a crash left unsent is sent at the
    /// next start ([`Store::resends`]). (Added to format 1: a store without it holds none.)
    resend: sled::Tree,
    /// silence id (u64 BE) -> the silence as the agent wrote it (JSON).
    silences: sled::Tree,
    /// shard (u32 BE) -> shards (u32 BE) + checkpoint: where stores before `state/` kept
    /// them (read when `state/` has none; emptied at the first save).
    checkpoints: sled::Tree,
    /// "format" -> u32 BE; "written" -> the seq (u64 BE) of the last change written out;
    /// "instance" -> u32 BE, drawn when the store was made (or first opened by a version that
    /// keeps it).
    meta: sled::Tree,
    /// This store's "instance": tells its seqs from those of a store made anew in its place.
    instance: u32,
    /// Alert changes beyond this many are pruned, oldest first; firing alerts too.
    max_alerts: u64,
    /// What is held, counted as it changes (sled 0.34's `len` walks a tree).
    held: Arc<Mutex<Held>>,
    /// The last number given to a state written aside ([`Store::state_aside`]).
    asides: Arc<std::sync::atomic::AtomicU64>,
}

/// The counts [`Store`] keeps of its trees.
#[derive(Default)]
struct Held {
    /// Entries of `alerts`.
    changes: u64,
    /// The firing alerts by the seq of their firing: which is oldest, to prune.
    firing: BTreeMap<u64, [u8; 8]>,
    /// The seqs of the changes pruned since [`Store::take_pruned`] last took them, ascending
    /// (at most [`PRUNED_HELD`]: the caller takes them after each write or prune).
    pruned: std::collections::VecDeque<u64>,
}

/// Pruned seqs held for [`Store::take_pruned`] at most (the oldest go first beyond).
const PRUNED_HELD: usize = 1 << 20;

impl Held {
    fn note_pruned(&mut self, seq: u64) {
        if self.pruned.len() >= PRUNED_HELD {
            self.pruned.pop_front();
        }
        self.pruned.push_back(seq);
    }
}

/// What recording one change did.
#[derive(Clone, Copy)]
struct Outcome {
    fresh: bool,
    /// A firing alert began (the seq of its change).
    opened: Option<u64>,
    /// A firing alert ended (the seq of its firing change).
    closed: Option<u64>,
}

/// The dedup key of an alert change: its id and state.
fn seen_key(id: u64, state: AlertState) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[..8].copy_from_slice(&id.to_be_bytes());
    k[8] = match state {
        AlertState::Firing => 0,
        AlertState::Resolved => 1,
        AlertState::Retracted => 2,
    };
    k
}

impl StoreError {
    /// Whether the store's files could not be opened for writing (a permission refused, or a
    /// read-only file system): sled opens them for writing even to read them.
    pub fn not_writable(&self) -> bool {
        matches!(self, StoreError::Io { source: sled::Error::Io(e), .. } if matches!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
        ))
    }
}

impl Store {
    /// [`Store::open`], waiting up to `wait` while another process holds the store (another
    /// `cepheus run` stopping, or `cepheus alerts` reading it for a moment); `waiting` is
    /// called once, when the wait begins, for the caller to say so.
    pub fn open_waiting(
        dir: &Path,
        max_alerts: u64,
        wait: std::time::Duration,
        mut waiting: impl FnMut(),
    ) -> Result<Store, StoreError> {
        let deadline = std::time::Instant::now() + wait;
        let mut said = false;
        loop {
            match Store::open(dir, max_alerts) {
                Err(StoreError::Locked(_)) if std::time::Instant::now() < deadline => {
                    if !said {
                        said = true;
                        waiting();
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                other => return other,
            }
        }
    }

    /// Opens (or creates) the store in `dir`, keeping at most `max_alerts` alert changes.
    pub fn open(dir: &Path, max_alerts: u64) -> Result<Store, StoreError> {
        let io = |source: sled::Error| match &source {
            sled::Error::Io(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                StoreError::Locked(dir.to_path_buf())
            }
            // sled 0.34 reports a held lock as an `Other` I/O error naming the lock.
            sled::Error::Io(e) if e.to_string().contains("lock") => {
                StoreError::Locked(dir.to_path_buf())
            }
            sled::Error::Corruption { .. } => StoreError::Corrupt {
                path: dir.to_path_buf(),
                what: source.to_string(),
            },
            _ => StoreError::Io {
                path: dir.to_path_buf(),
                source,
            },
        };
        // sled 0.34 has open reports of damage after an abrupt stop, some of which it meets
        // with a panic while recovering: that is damage too, for the caller to deal with.
        let opened = std::panic::catch_unwind(|| {
            sled::Config::new()
                .path(dir)
                // sled's page cache would grow to 1 GiB (its default) under an alert storm;
                // the agent reads the store little (listings, acks): a bounded share of RAM.
                .cache_capacity(CACHE_BYTES)
                // The agent flushes after each write it must not lose; no background flusher.
                .flush_every_ms(None)
                .open()
        })
        .map_err(|p| StoreError::Corrupt {
            path: dir.to_path_buf(),
            what: p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "sled panicked while opening it".into()),
        })?;
        let db = opened.map_err(io)?;
        let meta = db.open_tree("meta").map_err(io)?;
        match meta.get("format").map_err(io)? {
            None => {
                meta.insert("format", &FORMAT.to_be_bytes()).map_err(io)?;
            }
            Some(v) if v.as_ref() == FORMAT.to_be_bytes() => {}
            Some(v) => {
                return Err(StoreError::Damaged {
                    path: dir.to_path_buf(),
                    what: format!(
                        "format {:?}, this version reads format {FORMAT} (move the folder away to start afresh)",
                        v.as_ref()
                    ),
                });
            }
        }
        let instance = match meta
            .get("instance")
            .map_err(io)?
            .and_then(|v| <[u8; 4]>::try_from(v.as_ref()).ok())
        {
            Some(v) => u32::from_be_bytes(v),
            None => {
                let drawn = draw_instance();
                meta.insert("instance", &drawn.to_be_bytes()).map_err(io)?;
                // Durable before any id names it (no write flushes it otherwise before the
                // stream gives one out).
                db.flush().map_err(io)?;
                drawn
            }
        };
        let alerts = db.open_tree("alerts").map_err(io)?;
        let open = db.open_tree("open").map_err(io)?;
        // A store without the mark (made before it was kept) counts all it holds as written;
        // an empty one, none (its first change will be number 0).
        if meta.get("written").map_err(io)?.is_none() {
            let last = alerts
                .last()
                .map_err(io)?
                .map_or(NONE_WRITTEN, |(k, _)| seq_of(&k));
            meta.insert("written", &last.to_be_bytes()).map_err(io)?;
        }
        let mut held = Held {
            changes: alerts.len() as u64,
            firing: BTreeMap::new(),
            pruned: std::collections::VecDeque::new(),
        };
        for row in open.iter() {
            let (k, v) = row.map_err(io)?;
            if let (Ok(id), Some(seq)) = (<[u8; 8]>::try_from(k.as_ref()), v.get(..8)) {
                held.firing.insert(seq_of(seq), id);
            }
        }
        let store = Store {
            path: dir.to_path_buf(),
            alerts,
            seen: db.open_tree("seen").map_err(io)?,
            open,
            acks: db.open_tree("acks").map_err(io)?,
            muted: db.open_tree("muted").map_err(io)?,
            resend: db.open_tree("resend").map_err(io)?,
            silences: db.open_tree("silences").map_err(io)?,
            meanings: db.open_tree("meanings").map_err(io)?,
            meta,
            instance,
            checkpoints: db.open_tree("checkpoints").map_err(io)?,
            db,
            max_alerts: max_alerts.max(1),
            held: Arc::new(Mutex::new(held)),
            asides: Arc::default(),
        };
        // A meaning whose firing row is gone (a prune interrupted between the two, an older
        // build that removed only the row) says nothing of a later firing of that id.
        for row in store.meanings.iter() {
            let (k, _) = row.map_err(io)?;
            if store.open.get(&k).map_err(io)?.is_none() {
                store.meanings.remove(&k).map_err(io)?;
            }
        }
        // A smaller cap than the last run's applies at once.
        store.prune()?;
        Ok(store)
    }

    fn io(&self, source: sled::Error) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Records a batch of alert changes and returns, in order, whether each is new: a change
    /// whose id and state were recorded before (by this run or an earlier one) is not kept
    /// again. Durable on return.
    pub fn record(&self, alerts: &[Alert]) -> Result<Vec<bool>, StoreError> {
        let mut changes: Vec<Change> = alerts.iter().map(Change::of).collect();
        self.record_changes(&mut changes)
    }

    /// [`Store::record`] for changes already rendered (the agent renders each alert once,
    /// for the store and its outputs, and makes some changes itself from kept ones). The
    /// resolve (or retract) of an acknowledged alert gains its `ack`, here and as kept; each
    /// change kept gets its `seq`.
    /// A batch is kept in transactions of at most `TXN_CHANGES`: on an error, the
    /// transactions before the failing one stay kept (each change whole, in order), so a
    /// firing kept there may stay listed as firing while its resolve, in the failed part, is
    /// not; the caller hears only the error.
    pub fn record_changes(&self, changes: &mut [Change]) -> Result<Vec<bool>, StoreError> {
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        self.mark_muted_ends(&[], changes)?;
        for c in changes.iter_mut() {
            if c.state != AlertState::Firing
                && let Some(ack) = self.acks.get(c.id.to_be_bytes()).map_err(|e| self.io(e))?
            {
                c.json = with_field(&c.json, "ack", &ack);
            }
        }
        // In transactions of at most TXN_CHANGES changes (each change's rows are written
        // together; durability comes from the one flush at the end): sled holds a
        // transaction's whole write set in memory, and a storm of 150,000 absences in one
        // made the agent grow by gigabytes.
        let mut fresh = Vec::with_capacity(changes.len());
        for chunk in changes.chunks_mut(TXN_CHANGES) {
            let rows: Vec<Row> = chunk
                .iter()
                .map(|c| {
                    let key = seen_key(c.id, c.state);
                    let mut v = key.to_vec();
                    v.extend_from_slice(c.json.as_bytes());
                    let muted = (c.state == AlertState::Firing)
                        .then(|| mutes_of(&c.json))
                        .flatten();
                    (key, v, c.meaning, muted)
                })
                .collect();
            let mut seqs = Vec::with_capacity(rows.len());
            for _ in &rows {
                seqs.push(self.db.generate_id().map_err(|e| self.io(e))?);
            }
            let trees = (
                &self.alerts,
                &self.seen,
                &self.open,
                &self.meanings,
                &self.muted,
            );
            let outcomes = trees
                .transaction(|(alerts, seen, open, meanings, muted_by)| {
                    let mut out = Vec::with_capacity(rows.len());
                    for ((key, value, meaning, muted), seq) in rows.iter().zip(&seqs) {
                        let mut o = Outcome {
                            fresh: false,
                            opened: None,
                            closed: None,
                        };
                        if seen.get(key)?.is_none() {
                            o.fresh = true;
                            seen.insert(&key[..], &seq.to_be_bytes())?;
                            alerts.insert(&seq.to_be_bytes(), value.as_slice())?;
                            let id = &key[..8];
                            if key[8] == 0 {
                                let mut v = seq.to_be_bytes().to_vec();
                                v.extend_from_slice(&value[9..]);
                                open.insert(id, v)?;
                                match meaning {
                                    Some(m) => meanings.insert(id, &m.to_be_bytes())?,
                                    None => meanings.remove(id)?,
                                };
                                match muted {
                                    Some(m) => muted_by.insert(id, m.as_slice())?,
                                    None => muted_by.remove(id)?,
                                };
                                o.opened = Some(*seq);
                            } else if let Some(v) = open.remove(id)? {
                                meanings.remove(id)?;
                                muted_by.remove(id)?;
                                o.closed = v.get(..8).map(seq_of);
                                // Its firing's change already pruned: its dedup key, kept while
                                // it fired, goes now (nothing else would prune it).
                                if let Some(f) = v.get(..8)
                                    && alerts.get(f)?.is_none()
                                {
                                    let mut k = [0u8; 9];
                                    k[..8].copy_from_slice(id);
                                    seen.remove(&k[..])?;
                                }
                            }
                        }
                        out.push(o);
                    }
                    Ok(out)
                })
                .map_err(|e| self.txn_error(e))?;
            {
                let mut held = self.lock();
                for (o, key) in outcomes.iter().zip(&rows) {
                    held.changes += u64::from(o.fresh);
                    if let Some(seq) = o.opened
                        && let Ok(id) = <[u8; 8]>::try_from(&key.0[..8])
                    {
                        held.firing.insert(seq, id);
                    }
                    if let Some(seq) = o.closed {
                        held.firing.remove(&seq);
                        self.acks.remove(&key.0[..8]).map_err(|e| self.io(e))?;
                    }
                }
            }
            fresh.extend(outcomes.iter().map(|o| o.fresh));
            for ((c, o), seq) in chunk.iter_mut().zip(&outcomes).zip(&seqs) {
                if o.fresh {
                    c.seq = Some(*seq);
                }
            }
        }
        self.prune()?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(fresh)
    }

    /// A failed transaction of this store as its error (none of its transactions aborts of
    /// itself: an abort says the store is damaged).
    fn txn_error(&self, e: sled::transaction::TransactionError<()>) -> StoreError {
        match e {
            sled::transaction::TransactionError::Storage(e) => self.io(e),
            sled::transaction::TransactionError::Abort(()) => StoreError::Damaged {
                path: self.path.clone(),
                what: "an aborted transaction".into(),
            },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // (Counts only: a panic elsewhere while holding it leaves them usable.)
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops the oldest alert changes beyond `max_alerts` (their dedup keys with them, except
    /// a firing alert's, which its resolve needs), and the oldest firing alerts beyond as many
    /// (alerts that never resolve, such as a sequence's matches, would pile up).
    fn prune(&self) -> Result<(), StoreError> {
        let mut held = self.lock();
        let mut last_gone = None;
        while held.changes > self.max_alerts {
            let Some((k, v)) = self.alerts.pop_min().map_err(|e| self.io(e))? else {
                held.changes = 0;
                break;
            };
            held.changes -= 1;
            held.note_pruned(seq_of(&k));
            last_gone = Some(seq_of(&k));
            let firing = held.firing.contains_key(&seq_of(&k));
            if let Some(key) = v.get(..9)
                && !firing
            {
                self.seen.remove(key).map_err(|e| self.io(e))?;
            }
        }
        while held.firing.len() as u64 > self.max_alerts {
            let Some((seq, id)) = held.firing.pop_first() else {
                break;
            };
            self.open.remove(id).map_err(|e| self.io(e))?;
            self.meanings.remove(id).map_err(|e| self.io(e))?;
            self.acks.remove(id).map_err(|e| self.io(e))?;
            self.muted.remove(id).map_err(|e| self.io(e))?;
            // Its change is gone already unless it is among the newest.
            if self
                .alerts
                .get(seq.to_be_bytes())
                .map_err(|e| self.io(e))?
                .is_none()
            {
                let mut key = [0u8; 9];
                key[..8].copy_from_slice(&id);
                self.seen.remove(key).map_err(|e| self.io(e))?;
            }
        }
        self.note_pruned_through(last_gone)
    }

    /// Keeps the newest change pruned so far (changes go oldest first): what tells a client
    /// that comes back after a change whether any after it is gone ([`Store::resume_point`]).
    fn note_pruned_through(&self, seq: Option<u64>) -> Result<(), StoreError> {
        let Some(seq) = seq else {
            return Ok(());
        };
        if self.pruned_through()?.is_some_and(|p| p >= seq) {
            return Ok(());
        }
        self.meta
            .insert("pruned_through", &seq.to_be_bytes())
            .map_err(|e| self.io(e))?;
        Ok(())
    }

    /// The newest change pruned (`None`: none since this was kept, before session 40's
    /// format had it).
    pub fn pruned_through(&self) -> Result<Option<u64>, StoreError> {
        Ok(self
            .meta
            .get("pruned_through")
            .map_err(|e| self.io(e))?
            .map(|v| seq_of(&v)))
    }

    /// Drops alert changes whose time is before `cutoff`, oldest first, at most `limit` of
    /// them (a large backlog goes over several calls); returns how many went. It stops at the
    /// first change that is not older (changes are kept in the order made, which follows
    /// their times but for event-time rules' late ones). Alerts still firing stay listed as
    /// firing, however old (as with `max_alerts`).
    pub fn prune_older_than(
        &self,
        cutoff: cepheus_core::time::Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        #[derive(serde::Deserialize)]
        struct Time<'a> {
            #[serde(borrow)]
            time: std::borrow::Cow<'a, str>,
        }
        let mut held = self.lock();
        let mut gone = 0;
        let mut last_gone = None;
        while gone < limit {
            let Some((k, v)) = self.alerts.first().map_err(|e| self.io(e))? else {
                break;
            };
            let time = v
                .get(9..)
                .and_then(|b| serde_json::from_slice::<Time<'_>>(b).ok())
                .and_then(|t| cepheus_core::time::Timestamp::parse_rfc3339(&t.time));
            // (A change whose time cannot be read is old by position: it goes too.)
            if time.is_some_and(|t| t >= cutoff) {
                break;
            }
            self.alerts.remove(&k).map_err(|e| self.io(e))?;
            held.changes = held.changes.saturating_sub(1);
            held.note_pruned(seq_of(&k));
            last_gone = Some(seq_of(&k));
            gone += 1;
            if let Some(key) = v.get(..9)
                && !held.firing.contains_key(&seq_of(&k))
            {
                self.seen.remove(key).map_err(|e| self.io(e))?;
            }
        }
        drop(held);
        self.note_pruned_through(last_gone)?;
        Ok(gone)
    }

    /// The most recent `limit` alert changes, oldest first.
    pub fn recent(&self, limit: usize) -> Result<Vec<StoredAlert>, StoreError> {
        let mut out = Vec::new();
        for row in self.alerts.iter().rev().take(limit) {
            let (k, v) = row.map_err(|e| self.io(e))?;
            let json = v
                .get(9..)
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or_else(|| StoreError::Damaged {
                    path: self.path.clone(),
                    what: format!("alert change {}", seq_of(&k)),
                })?;
            out.push(StoredAlert {
                seq: seq_of(&k),
                json: json.to_string(),
                meaning: None,
            });
        }
        out.reverse();
        Ok(out)
    }

    /// The alerts firing now (their firing change), oldest first: recorded firing, and not
    /// resolved or retracted since.
    pub fn firing(&self) -> Result<Vec<StoredAlert>, StoreError> {
        let mut out = Vec::new();
        for row in self.open.iter() {
            let (k, v) = row.map_err(|e| self.io(e))?;
            out.push(self.open_alert(&k, &v)?);
        }
        out.sort_by_key(|a| a.seq);
        Ok(out)
    }

    /// A row of the firing list (key: the alert's id; value: its firing change's sequence
    /// number, then its JSON), with its acknowledgement if any.
    fn open_alert(&self, k: &[u8], v: &[u8]) -> Result<StoredAlert, StoreError> {
        let parsed = v
            .get(..8)
            .map(seq_of)
            .zip(v.get(8..).and_then(|b| std::str::from_utf8(b).ok()));
        let Some((seq, json)) = parsed else {
            return Err(self.damaged_open(k));
        };
        let json = match self.acks.get(k).map_err(|e| self.io(e))? {
            Some(ack) => with_field(json, "ack", &ack),
            None => json.to_string(),
        };
        let meaning = self
            .meanings
            .get(k)
            .map_err(|e| self.io(e))?
            .and_then(|m| <[u8; 8]>::try_from(m.as_ref()).ok())
            .map(u64::from_be_bytes);
        Ok(StoredAlert { seq, json, meaning })
    }

    fn damaged_open(&self, k: &[u8]) -> StoreError {
        StoreError::Damaged {
            path: self.path.clone(),
            what: format!("open alert {k:?}"),
        }
    }

    /// The `n` firing alerts stored last, oldest first, as [`Store::firing`] would end: only
    /// the sequence numbers of the others are held meanwhile, so listing the newest thousands
    /// of a million firing alerts does not load them all.
    pub fn firing_newest(&self, n: usize) -> Result<Vec<StoredAlert>, StoreError> {
        self.firing_top(n, |_| Some(0))
    }

    /// The `n` firing alerts ranked first by `rank` (of each one's JSON as recorded, without
    /// its `ack`; `None` leaves it out), the newest first among equal ranks: a listing that
    /// must hold the most severe of a million, or one rule's. Lowest rank and oldest first.
    pub fn firing_top(
        &self,
        n: usize,
        rank: impl Fn(&str) -> Option<u8>,
    ) -> Result<Vec<StoredAlert>, StoreError> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let mut newest: BinaryHeap<Reverse<(u8, u64, sled::IVec)>> = BinaryHeap::new();
        for row in self.open.iter() {
            let (k, v) = row.map_err(|e| self.io(e))?;
            let parsed = v
                .get(..8)
                .map(seq_of)
                .zip(v.get(8..).and_then(|b| std::str::from_utf8(b).ok()));
            let Some((seq, json)) = parsed else {
                return Err(self.damaged_open(&k));
            };
            let Some(r) = rank(json) else {
                continue;
            };
            if newest.len() < n {
                newest.push(Reverse((r, seq, k)));
            } else if newest
                .peek()
                .is_some_and(|Reverse((low_r, low, _))| (*low_r, *low) < (r, seq))
            {
                newest.pop();
                newest.push(Reverse((r, seq, k)));
            }
        }
        let mut out = Vec::with_capacity(newest.len());
        for Reverse((_, _, k)) in newest.into_sorted_vec().into_iter().rev() {
            // Resolved meanwhile: no longer firing. (Read again whole: fired anew meanwhile,
            // its number is the new change's.)
            let Some(v) = self.open.get(&k).map_err(|e| self.io(e))? else {
                continue;
            };
            out.push(self.open_alert(&k, &v)?);
        }
        Ok(out)
    }

    /// Acknowledges the firing alert `id`: `by` (who) at `time` (RFC 3339). It stays firing
    /// and still resolves; listings show `ack`, and its resolve carries it. An alert
    /// acknowledged already takes the new `by` and `time` ([`Acked::Again`] gives the old).
    /// Durable on return.
    pub fn ack(&self, id: u64, by: &str, time: &str) -> Result<Acked, StoreError> {
        let ack = serde_json::json!({ "by": by, "time": time }).to_string();
        let key = id.to_be_bytes();
        // One transaction with the firing list: a resolve recorded meanwhile either sees the
        // ack (and carries it) or makes this answer `false`.
        let acked = (&self.open, &self.acks)
            .transaction(|(open, acks)| {
                if open.get(key)?.is_none() {
                    return Ok(Acked::NotFiring);
                }
                Ok(match acks.insert(&key[..], ack.as_bytes())? {
                    Some(before) => Acked::Again {
                        before: String::from_utf8_lossy(&before).into_owned(),
                    },
                    None => Acked::Now,
                })
            })
            .map_err(|e| self.txn_error(e))?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(acked)
    }

    /// Marks the ends in `changes` whose firings were muted (the receivers never heard of
    /// them) as muted too, with what muted them: their firing earlier in `waiting` (changes
    /// not kept yet, in order), earlier in `changes`, or kept here. The first firing of an id
    /// is the one kept and sent: what a repeat of it says counts for nothing.
    pub fn mark_muted_ends<'a>(
        &self,
        waiting: impl IntoIterator<Item = &'a Change>,
        changes: &mut [Change],
    ) -> Result<(), StoreError> {
        if changes.iter().all(|c| c.state == AlertState::Firing) {
            return Ok(());
        }
        let mut firings: std::collections::HashMap<u64, Option<Vec<u8>>> =
            std::collections::HashMap::new();
        let note = |firings: &mut std::collections::HashMap<u64, Option<Vec<u8>>>,
                    c: &Change|
         -> Result<(), StoreError> {
            if firings.contains_key(&c.id) {
                return Ok(());
            }
            let mutes = if self.has_change(c.id, AlertState::Firing)? {
                self.mutes(c.id)?
            } else {
                mutes_of(&c.json)
            };
            firings.insert(c.id, mutes);
            Ok(())
        };
        for c in waiting
            .into_iter()
            .filter(|c| c.state == AlertState::Firing)
        {
            note(&mut firings, c)?;
        }
        for c in changes.iter_mut() {
            if c.state == AlertState::Firing {
                note(&mut firings, c)?;
                continue;
            }
            let mutes = match firings.get(&c.id) {
                Some(m) => m.clone(),
                None => self.mutes(c.id)?,
            };
            if let Some(m) = mutes {
                c.json = with_fields(&c.json, &m);
            }
        }
        Ok(())
    }

    /// Whether change (`id`, `state`) was kept (and not pruned since).
    pub fn has_change(&self, id: u64, state: AlertState) -> Result<bool, StoreError> {
        self.seen
            .contains_key(seen_key(id, state))
            .map_err(|e| self.io(e))
    }

    /// The firing alerts muted now, each with what muted it (an object of [`MUTED_BY`]
    /// fields), by id.
    pub fn muted_rows(&self) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let mut out = Vec::new();
        for row in self.muted.iter() {
            let (k, v) = row.map_err(|e| self.io(e))?;
            if let Ok(id) = <[u8; 8]>::try_from(k.as_ref()) {
                out.push((u64::from_be_bytes(id), v.to_vec()));
            }
        }
        Ok(out)
    }

    /// The firing change of alert `id` as listed now, if it fires.
    pub fn firing_change(&self, id: u64) -> Result<Option<String>, StoreError> {
        Ok(self
            .open
            .get(id.to_be_bytes())
            .map_err(|e| self.io(e))?
            .and_then(|row| {
                row.get(8..)
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .map(String::from)
            }))
    }

    /// What muted firing alert `id` ([`mutes_of`] of its firing), if anything.
    pub fn mutes(&self, id: u64) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .muted
            .get(id.to_be_bytes())
            .map_err(|e| self.io(e))?
            .map(|m| m.to_vec()))
    }

    /// A new silence's id (never one given before by this store).
    pub fn new_silence_id(&self) -> Result<u64, StoreError> {
        self.db.generate_id().map_err(|e| self.io(e))
    }

    /// Keeps silence `id` as `json` (replacing it if kept). Durable on return.
    pub fn put_silence(&self, id: u64, json: &str) -> Result<(), StoreError> {
        self.silences
            .insert(id.to_be_bytes(), json.as_bytes())
            .map_err(|e| self.io(e))?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(())
    }

    /// Drops silence `id`. Durable on return.
    pub fn remove_silence(&self, id: u64) -> Result<(), StoreError> {
        self.silences
            .remove(id.to_be_bytes())
            .map_err(|e| self.io(e))?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(())
    }

    /// The silences kept, by id (ascending), each as the agent wrote it.
    pub fn silences(&self) -> Result<Vec<(u64, String)>, StoreError> {
        let mut out = Vec::new();
        for row in self.silences.iter() {
            let (k, v) = row.map_err(|e| self.io(e))?;
            let Ok(id) = <[u8; 8]>::try_from(k.as_ref()) else {
                continue;
            };
            out.push((
                u64::from_be_bytes(id),
                String::from_utf8_lossy(&v).into_owned(),
            ));
        }
        Ok(out)
    }

    /// Firing alert `id` is muted from now by what `field` (one of [`MUTED_BY`]) says,
    /// `mark`: its firing row says so, and its end will be muted; a sending again owed for it
    /// ([`Store::resends`]) is dropped. Nothing when it does not fire.
    pub fn mute(&self, id: u64, field: &str, mark: &str) -> Result<(), StoreError> {
        let key = id.to_be_bytes();
        (&self.open, &self.muted, &self.resend)
            .transaction(|(open, muted, resend)| {
                let marked =
                    rewrite_open(open, &key, |json| with_field(json, field, mark.as_bytes()))?;
                if marked.is_none() {
                    return Ok(());
                }
                // (Muted anew: a sending again still owed for it is owed no more.)
                resend.remove(&key[..])?;
                let mut by = muted_by(muted, &key)?;
                by.insert(field.into(), serde_json::from_str(mark).unwrap_or_default());
                muted.insert(
                    &key[..],
                    serde_json::Value::Object(by).to_string().as_bytes(),
                )?;
                Ok(())
            })
            .map_err(|e| self.txn_error(e))?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(())
    }

    /// What muted alerts ended: a silence (`field` [`SILENCED`], `key` `id`, `value` its
    /// id), or a firing alert that inhibited others ([`INHIBITED`], `by`, its id). The alerts
    /// it muted lose that field in their firing rows; those muted by nothing else any more
    /// will have their end sent, and are returned as their firing changes are now, for the
    /// notifying outputs to send (not kept again: the store has them).
    /// An alert whose firing JSON `stays` says so stays muted as it is (a match, which
    /// happened while muted). Each one returned is owed to the outputs named `to` in the
    /// same write ([`Store::resends`]), so a stop or a crash before they deal with it does
    /// not lose it.
    pub fn unmute(
        &self,
        field: &str,
        key: &str,
        value: &str,
        stays: &dyn Fn(&str) -> bool,
        to: &[&str],
    ) -> Result<Vec<Change>, StoreError> {
        let mut out = Vec::new();
        let owed = self.owed(to)?;
        // (Only a row naming the value is parsed: a storm's ends each look over every muted
        // row. Ids are hex, written in the row as they are; another value is looked for by
        // parsing every row.)
        let needle = value.as_bytes();
        let plain = !needle.is_empty() && needle.iter().all(u8::is_ascii_alphanumeric);
        for row in self.muted.iter() {
            let (k, v) = row.map_err(|e| self.io(e))?;
            if plain && !v.windows(needle.len()).any(|w| w == needle) {
                continue;
            }
            let by: Option<serde_json::Value> = serde_json::from_slice(&v).ok();
            if by.as_ref().and_then(|b| b[field][key].as_str()) != Some(value) {
                continue;
            }
            let firing = self.open.get(&k).map_err(|e| self.io(e))?;
            if firing
                .as_ref()
                .and_then(|f| f.get(8..))
                .and_then(|b| std::str::from_utf8(b).ok())
                .is_some_and(stays)
            {
                continue;
            }
            let renewed = self.unmute_row(&k, field, owed.as_deref())?;
            if let (Some(json), Ok(id)) = (renewed, <[u8; 8]>::try_from(k.as_ref())) {
                out.push(Change {
                    id: u64::from_be_bytes(id),
                    state: AlertState::Firing,
                    json,
                    seq: None,
                    meaning: None,
                });
            }
        }
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(out)
    }

    /// Firing alert `id` is muted by `field` no more (what muted it ended before the store
    /// kept it). Returns its firing change as it is now when nothing else mutes it (for the
    /// notifying outputs to send, owed to those named `to` as [`Store::unmute`] says), `None`
    /// when something does or it does not fire.
    pub fn unmute_one(
        &self,
        id: u64,
        field: &str,
        to: &[&str],
    ) -> Result<Option<Change>, StoreError> {
        let owed = self.owed(to)?;
        let json = self.unmute_row(&id.to_be_bytes(), field, owed.as_deref())?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(json.map(|json| Change {
            id,
            state: AlertState::Firing,
            json,
            seq: None,
            meaning: None,
        }))
    }

    /// Drops `field` from what muted firing alert `k` (its `muted` row and its firing row);
    /// returns its firing's JSON as it is now when nothing mutes it any more, and then, in
    /// the same write, notes it owed as `owed` says (a [`Store::owed`] row), if given.
    fn unmute_row(
        &self,
        k: &[u8],
        field: &str,
        owed: Option<&[u8]>,
    ) -> Result<Option<String>, StoreError> {
        (&self.open, &self.muted, &self.resend)
            .transaction(|(open, muted, resend)| {
                let mut left = muted_by(muted, k)?;
                left.remove(field);
                if left.is_empty() {
                    muted.remove(k)?;
                } else {
                    let v = serde_json::Value::Object(left.clone()).to_string();
                    muted.insert(k, v.as_bytes())?;
                }
                let json = rewrite_open(open, k, |json| without_field(json, field))?;
                let json = json.filter(|_| left.is_empty());
                if let (Some(_), Some(owed)) = (&json, owed) {
                    resend.insert(k, owed)?;
                }
                Ok(json)
            })
            .map_err(|e| self.txn_error(e))
    }

    /// The row noting a firing sent again now as owed to the outputs named `to` (`None`: to
    /// none): placed after the last change kept, as the outputs place it.
    fn owed(&self, to: &[&str]) -> Result<Option<Vec<u8>>, StoreError> {
        if to.is_empty() {
            return Ok(None);
        }
        let row = serde_json::json!({"after": self.last_seq()?, "to": to});
        Ok(Some(row.to_string().into_bytes()))
    }

    /// The firings sent again when what muted them ended that some notifying outputs had not
    /// dealt with (delivered or given up) when the agent stopped or died: each with the
    /// place in the order it was made at and the outputs still owed it. A row that cannot
    /// be read is left out.
    pub fn resends(&self) -> Result<Vec<Resend>, StoreError> {
        let mut out = Vec::new();
        for row in self.resend.iter() {
            let (k, v) = row.map_err(|e| self.io(e))?;
            let (Ok(id), Ok(row)) = (
                <[u8; 8]>::try_from(k.as_ref()),
                serde_json::from_slice::<ResendRow>(&v),
            ) else {
                continue;
            };
            out.push(Resend {
                id: u64::from_be_bytes(id),
                after: row.after,
                to: row.to,
            });
        }
        Ok(out)
    }

    /// Output `name` dealt with (delivered or gave up) the firing of alert `id` sent again
    /// ([`Store::resends`]): owed to it no more. Not flushed (as [`Store::set_output_cursor`]):
    /// after a crash it may be sent again, never missed.
    pub fn resent(&self, id: u64, name: &str) -> Result<(), StoreError> {
        self.resend
            .fetch_and_update(id.to_be_bytes(), |row| {
                let mut row: ResendRow = serde_json::from_slice(row?).ok()?;
                row.to.retain(|n| n != name);
                if row.to.is_empty() {
                    return None;
                }
                serde_json::to_vec(&row).ok()
            })
            .map_err(|e| self.io(e))?;
        Ok(())
    }

    /// Notes that every change recorded so far has been written to the outputs. Durable on
    /// return (a crash just before it makes the last batch written out again at start).
    pub fn mark_written(&self) -> Result<(), StoreError> {
        let last = self
            .alerts
            .last()
            .map_err(|e| self.io(e))?
            .map_or(NONE_WRITTEN, |(k, _)| seq_of(&k));
        self.meta
            .insert("written", &last.to_be_bytes())
            .map_err(|e| self.io(e))?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(())
    }

    /// Notes that the changes recorded up to `seq` have been written to the outputs (stdout
    /// wrote that far while later ones wait for it). Never moves the mark back; durable on
    /// return.
    pub fn mark_written_through(&self, seq: u64) -> Result<(), StoreError> {
        let Some(last) = self
            .alerts
            .last()
            .map_err(|e| self.io(e))?
            .map(|(k, _)| seq_of(&k))
        else {
            return Ok(());
        };
        let upto = seq.min(last);
        if self.written_through()?.is_some_and(|w| w >= upto) {
            return Ok(());
        }
        self.meta
            .insert("written", &upto.to_be_bytes())
            .map_err(|e| self.io(e))?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(())
    }

    /// Where output `name` (`webhook`, `syslog`) stands: the last change it dealt with,
    /// delivered or given up ([`Store::set_output_cursor`]).
    pub fn output_cursor(&self, name: &str) -> Result<OutputCursor, StoreError> {
        Ok(
            match self
                .meta
                .get(format!("sent.{name}"))
                .map_err(|e| self.io(e))?
            {
                None => OutputCursor::Unknown,
                Some(v) => match seq_of(&v) {
                    NONE_WRITTEN => OutputCursor::After(None),
                    s => OutputCursor::After(Some(s)),
                },
            },
        )
    }

    /// Notes that output `name` dealt with every change up to `seq` (`None`: none yet). Not
    /// flushed (the next flushed write takes it along): after a crash the output may get
    /// again the changes since the last flush, never miss one.
    pub fn set_output_cursor(&self, name: &str, seq: Option<u64>) -> Result<(), StoreError> {
        self.meta
            .insert(
                format!("sent.{name}"),
                &seq.unwrap_or(NONE_WRITTEN).to_be_bytes(),
            )
            .map_err(|e| self.io(e))?;
        Ok(())
    }

    /// Forgets where output `name` stood (it is not configured any more): configured again
    /// later, it starts from then, not with what was made meanwhile.
    pub fn forget_output_cursor(&self, name: &str) -> Result<(), StoreError> {
        self.meta
            .remove(format!("sent.{name}"))
            .map_err(|e| self.io(e))?;
        Ok(())
    }

    /// Makes what was written durable (the outputs' cursors, written without a flush).
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(())
    }

    /// The last change noted as written out ([`Store::mark_written`]; `None`: none).
    pub fn written_through(&self) -> Result<Option<u64>, StoreError> {
        Ok(self
            .meta
            .get("written")
            .map_err(|e| self.io(e))?
            .map(|v| seq_of(&v))
            .filter(|&s| s != NONE_WRITTEN))
    }

    /// The newest change's position in the order of recording, counting a firing alert whose
    /// change row was pruned (`None`: none kept).
    pub fn last_seq(&self) -> Result<Option<u64>, StoreError> {
        let change = self
            .alerts
            .last()
            .map_err(|e| self.io(e))?
            .map(|(k, _)| seq_of(&k));
        // A firing alert outlives its change row once pruned (`max_age`): still kept.
        let firing = self.lock().firing.last_key_value().map(|(seq, _)| *seq);
        Ok(change.max(firing))
    }

    /// The seqs of the changes pruned (by `max_alerts` or [`Store::prune_older_than`]) since
    /// the last call, ascending: an output still behind them will never send them, and says
    /// so.
    pub fn take_pruned(&self) -> Vec<u64> {
        std::mem::take(&mut self.lock().pruned).into()
    }

    /// The changes recorded after `seq` (`None`: from the first), oldest first, at most
    /// `limit`: what an output has not dealt with ([`Store::output_cursor`]).
    pub fn changes_after(
        &self,
        seq: Option<u64>,
        limit: usize,
    ) -> Result<Vec<StoredAlert>, StoreError> {
        let mut out = Vec::new();
        let from = match seq {
            None => 0,
            Some(s) => match s.checked_add(1) {
                Some(f) => f,
                None => return Ok(out),
            },
        };
        for row in self.alerts.range(from.to_be_bytes()..).take(limit) {
            let (k, v) = row.map_err(|e| self.io(e))?;
            if let Some(json) = v.get(9..).and_then(|b| std::str::from_utf8(b).ok()) {
                out.push(StoredAlert {
                    seq: seq_of(&k),
                    json: json.to_string(),
                    meaning: None,
                });
            }
        }
        Ok(out)
    }

    /// This store's instance: drawn when it was made, so that a client holding a seq of a
    /// store since made anew in the same place is told so (see [`Store::resume_point`]).
    pub fn instance(&self) -> u32 {
        self.instance
    }

    /// Where a client that last saw change `after` goes on, replaying at most `max` of the
    /// changes kept up to `through`: found walking back from `through` (seqs only grow; they
    /// are not counts), so at a cost of about `max` reads whatever the store holds. `None`,
    /// or a change later than `through`, is none this store gave (it was made anew since, or
    /// the id is another's): all it holds is replayed (at most `max`), as possibly missed.
    pub fn resume_point(
        &self,
        after: Option<u64>,
        through: u64,
        max: usize,
    ) -> Result<Resume, StoreError> {
        let after = after.filter(|&a| a <= through);
        let pruned = match after {
            None => true,
            Some(a) => self.pruned_after(a)?,
        };
        let mut resume = Resume {
            after,
            skipped: 0,
            pruned,
        };
        let from = after.map_or(0, |a| a.saturating_add(1));
        if from > through {
            return Ok(resume);
        }
        let mut newest = self
            .alerts
            .range(from.to_be_bytes()..=through.to_be_bytes())
            .keys()
            .rev();
        for _ in 0..max {
            match newest.next() {
                Some(k) => drop(k.map_err(|e| self.io(e))?),
                None => return Ok(resume),
            }
        }
        // Beyond `max`: the first left out is where the replay goes on after; the others
        // left out are counted, up to a bound.
        if let Some(k) = newest.next() {
            resume.after = Some(seq_of(&k.map_err(|e| self.io(e))?));
            resume.skipped = 1;
            for k in newest.take(MISSED_COUNTED - 1) {
                k.map_err(|e| self.io(e))?;
                resume.skipped += 1;
            }
        }
        Ok(resume)
    }

    /// Whether changes after `after` were pruned.
    fn pruned_after(&self, after: u64) -> Result<bool, StoreError> {
        Ok(self.pruned_through()?.is_some_and(|p| p > after))
    }

    /// The changes recorded but not yet written to the outputs (the process died between
    /// the two), oldest first: for the outputs at start.
    pub fn unwritten(&self) -> Result<Vec<StoredAlert>, StoreError> {
        self.changes_after(self.written_through()?, usize::MAX)
    }

    /// How many alert changes the store holds, and how many alerts are firing.
    pub fn counts(&self) -> (u64, u64) {
        let held = self.lock();
        (held.changes, held.firing.len() as u64)
    }

    /// Replaces every shard's checkpoint with `saved` (one per shard of one run, each holding
    /// its bytes: the state files are removed first): what a restart continues from. Durable
    /// on return.
    pub fn save_checkpoints(&self, saved: &[SavedShard]) -> Result<(), StoreError> {
        let dir = self.state_dir();
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::State {
            path: dir.clone(),
            source,
        })?;
        for (shard, _) in self.state_files()? {
            let path = dir.join(state_name(shard));
            std::fs::remove_file(&path).map_err(|source| StoreError::State { path, source })?;
        }
        for s in saved {
            self.save_checkpoint(s)?;
        }
        // Every shard's state is replaced: none of an older store's is left to read.
        if !self.checkpoints.is_empty() {
            self.checkpoints.clear().map_err(|e| self.io(e))?;
            self.db.flush().map_err(|e| self.io(e))?;
        }
        sync_dir(&dir)
    }

    /// Keeps aside, in a file of its own beside the shards' states (`state/unkept.jsonl`),
    /// the alert changes (their JSON) the store could not take when its disk was nearly
    /// full, so a restart keeps them first; an empty list removes the file. Replaces what
    /// was kept aside. Durable on return.
    pub fn save_unkept(&self, changes: &[&str]) -> Result<(), StoreError> {
        use std::io::Write;
        let dir = self.state_dir();
        let path = dir.join(UNKEPT_FILE);
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::State { path, source }
        };
        if changes.is_empty() {
            return match std::fs::remove_file(&path) {
                Ok(()) => sync_dir(&dir),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(source) => Err(StoreError::State { path, source }),
            };
        }
        std::fs::create_dir_all(&dir).map_err(err(&dir))?;
        let aside = dir.join(format!("{UNKEPT_FILE}.new"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&aside).map_err(err(&aside))?);
        for c in changes {
            f.write_all(c.as_bytes())
                .and_then(|()| f.write_all(b"\n"))
                .map_err(err(&aside))?;
        }
        let f = f.into_inner().map_err(|e| StoreError::State {
            path: aside.clone(),
            source: e.into_error(),
        })?;
        f.sync_all().map_err(err(&aside))?;
        drop(f);
        std::fs::rename(&aside, &path).map_err(err(&path))?;
        sync_dir(&dir)
    }

    /// The alert changes kept aside by [`Store::save_unkept`], oldest first (none when no
    /// file; a line cut short by a crash is skipped).
    pub fn unkept(&self) -> Result<Vec<String>, StoreError> {
        let path = self.state_dir().join(UNKEPT_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(text
                .lines()
                .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
                .map(String::from)
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(StoreError::State { path, source }),
        }
    }

    /// Saves one shard's checkpoint, keeping the others'. Durable on return. A state written
    /// aside ([`Store::state_aside`]) is put in place (and removed if it cannot be).
    pub fn save_checkpoint(&self, saved: &SavedShard) -> Result<(), StoreError> {
        use std::io::Write;
        let dir = self.state_dir();
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::State { path, source }
        };
        let path = dir.join(state_name(saved.shard));
        if let Some(aside) = saved.file.as_deref().filter(|p| self.is_aside(p)) {
            let placed = std::fs::File::open(aside)
                .and_then(|f| f.sync_all())
                .map_err(err(aside))
                .and_then(|()| std::fs::rename(aside, &path).map_err(err(&path)))
                .and_then(|()| sync_dir(&dir));
            if placed.is_err() {
                let _ = std::fs::remove_file(aside);
            }
            placed?;
            return self.forget_legacy_checkpoints();
        }
        std::fs::create_dir_all(&dir).map_err(err(&dir))?;
        let aside = dir.join(format!("{}.new", state_name(saved.shard)));
        // (A state read from a file is copied from it: its bytes are not held.)
        let mut from = saved.reader()?;
        let mut f = std::fs::File::create(&aside).map_err(err(&aside))?;
        f.write_all(&saved.shards.to_be_bytes())
            .and_then(|()| std::io::copy(&mut from, &mut f).map(drop))
            .and_then(|()| f.sync_all())
            .map_err(err(&aside))?;
        drop(f);
        std::fs::rename(&aside, &path).map_err(err(&path))?;
        sync_dir(&dir)?;
        self.forget_legacy_checkpoints()
    }

    /// The checkpoints saved, by shard number: each shard's state file, or, for a shard that
    /// has none yet, what an older store kept in sled (a store being upgraded: its shards
    /// write their files one by one).
    pub fn checkpoints(&self) -> Result<Vec<SavedShard>, StoreError> {
        let (saved, mut unreadable) = self.readable_checkpoints()?;
        match unreadable.pop() {
            Some(e) => Err(e),
            None => Ok(saved),
        }
    }

    /// The checkpoints saved, as [`Store::checkpoints`], and apart the errors of the state
    /// files that could not be read: one damaged or unreadable file costs its own shard its
    /// state, not the others theirs.
    pub fn readable_checkpoints(&self) -> Result<(Vec<SavedShard>, Vec<StoreError>), StoreError> {
        let files = self.state_files_tidied(true)?;
        let mut unreadable = Vec::new();
        let mut out: Vec<SavedShard> = self
            .legacy_checkpoints()?
            .into_iter()
            .filter(|l| !files.iter().any(|(shard, _)| *shard == l.shard))
            .collect();
        for (shard, path) in files {
            // Only the header now: the state is read as it is decoded (`SavedShard::reader`).
            let mut header = [0u8; 4];
            let read = std::fs::File::open(&path)
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut header));
            match read {
                Ok(()) => {}
                // A file shorter than its header (cut by a disk that filled, or by hand) is
                // no state: that shard has none, and begins afresh; the others go on.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => continue,
                Err(source) => {
                    unreadable.push(StoreError::State { path, source });
                    continue;
                }
            }
            out.push(SavedShard {
                shard,
                shards: u32::from_be_bytes(header),
                data: Vec::new(),
                file: Some(path),
            });
        }
        out.sort_by_key(|s| s.shard);
        Ok((out, unreadable))
    }

    fn state_dir(&self) -> PathBuf {
        self.path.join("state")
    }

    /// The state files there are, by shard number (states on their way aside).
    fn state_files(&self) -> Result<Vec<(u32, PathBuf)>, StoreError> {
        self.state_files_tidied(false)
    }

    /// Where shard `shard` writes a state as it makes it, for [`Store::save_checkpoint`] to
    /// put in place (a `SavedShard` naming it as its `file`): a name of its own in the state
    /// folder, so a state need not be held in memory as text, and several may wait at once.
    /// The next start removes one a crash left there.
    pub fn state_aside(&self, shard: u32) -> Result<PathBuf, StoreError> {
        let dir = self.state_dir();
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::State {
            path: dir.clone(),
            source,
        })?;
        let n = self
            .asides
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(dir.join(format!("shard-{shard}.{n}{ASIDE}")))
    }

    /// Whether `path` is a state written aside ([`Store::state_aside`]).
    fn is_aside(&self, path: &Path) -> bool {
        path.parent() == Some(self.state_dir().as_path())
            && path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(ASIDE))
    }

    /// The state files there are, by shard number; with `tidy` (at start), the states a crash
    /// left written aside are removed (while the agent runs, they are states on their way).
    fn state_files_tidied(&self, tidy: bool) -> Result<Vec<(u32, PathBuf)>, StoreError> {
        let dir = self.state_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::State { path: dir, source }),
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            // A state a crash caught while it was written aside: never renamed, never read.
            if name.to_str().is_some_and(|n| n.ends_with(ASIDE)) {
                if tidy {
                    let _ = std::fs::remove_file(entry.path());
                }
                continue;
            }
            let shard = name.to_str().and_then(|n| {
                n.strip_prefix("shard-")?
                    .strip_suffix(".state")?
                    .parse()
                    .ok()
            });
            if let Some(shard) = shard {
                out.push((shard, entry.path()));
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Checkpoints as stores before `state/` kept them, in sled.
    fn legacy_checkpoints(&self) -> Result<Vec<SavedShard>, StoreError> {
        let mut out = Vec::new();
        for row in self.checkpoints.iter() {
            let (k, v) = row.map_err(|e| self.io(e))?;
            let (Ok(shard), Some(Ok(shards))) = (
                <[u8; 4]>::try_from(k.as_ref()),
                v.get(..4).map(<[u8; 4]>::try_from),
            ) else {
                return Err(StoreError::Damaged {
                    path: self.path.clone(),
                    what: "a checkpoint".into(),
                });
            };
            out.push(SavedShard {
                shard: u32::from_be_bytes(shard),
                shards: u32::from_be_bytes(shards),
                data: v.get(4..).unwrap_or_default().to_vec(),
                file: None,
            });
        }
        Ok(out)
    }

    /// Empties the sled tree of older stores' checkpoints, once every shard it held has its
    /// state file (before, a crash would leave some shards without any state).
    fn forget_legacy_checkpoints(&self) -> Result<(), StoreError> {
        if self.checkpoints.is_empty() {
            return Ok(());
        }
        let files = self.state_files()?;
        let all_moved = self
            .legacy_checkpoints()?
            .iter()
            .all(|l| files.iter().any(|(shard, _)| *shard == l.shard));
        if !all_moved {
            return Ok(());
        }
        self.checkpoints.clear().map_err(|e| self.io(e))?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(())
    }

    /// The store's folder.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `json` (an alert object) with its field `name` set to the JSON `value` (an `ack`, a
/// `silenced` mark; unchanged when either is not what it should be).
pub fn with_field(json: &str, name: &str, value: &[u8]) -> String {
    let parsed = serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .zip(serde_json::from_slice::<serde_json::Value>(value).ok());
    match parsed {
        Some((mut v, value)) => match v.as_object_mut() {
            Some(o) => {
                o.insert(name.into(), value);
                v.to_string()
            }
            None => json.to_string(),
        },
        None => json.to_string(),
    }
}

/// In a transaction over `open`: firing alert `k`'s row with its JSON rewritten by `edit`
/// (its place kept); the new JSON, `None` when it does not fire.
fn rewrite_open(
    open: &sled::transaction::TransactionalTree,
    k: &[u8],
    edit: impl FnOnce(&str) -> String,
) -> Result<Option<String>, sled::transaction::ConflictableTransactionError<()>> {
    let Some(row) = open.get(k)? else {
        return Ok(None);
    };
    let (Some(seq), Some(json)) = (
        row.get(..8),
        row.get(8..).and_then(|b| std::str::from_utf8(b).ok()),
    ) else {
        return Ok(None);
    };
    let json = edit(json);
    let mut v = seq.to_vec();
    v.extend_from_slice(json.as_bytes());
    open.insert(k, v)?;
    Ok(Some(json))
}

/// In a transaction over `muted`: what muted firing alert `k` (empty: nothing).
fn muted_by(
    muted: &sled::transaction::TransactionalTree,
    k: &[u8],
) -> Result<
    serde_json::Map<String, serde_json::Value>,
    sled::transaction::ConflictableTransactionError<()>,
> {
    Ok(muted
        .get(k)?
        .and_then(|m| serde_json::from_slice(&m).ok())
        .unwrap_or_default())
}

/// A change as [`Store::record_changes`] writes it: its dedup key, its row in `alerts`, its
/// rule's meaning, and what muted it ([`mutes_of`]).
type Row = ([u8; 9], Vec<u8>, Option<u64>, Option<Vec<u8>>);

/// The field of an alert change a silence that muted it adds (DESIGN.md's object, plus this).
pub const SILENCED: &str = "silenced";

/// The field of an alert change an inhibition (another alert firing) that muted it adds.
pub const INHIBITED: &str = "inhibited";

/// The fields that say an alert change is muted.
pub const MUTED_BY: [&str; 2] = [SILENCED, INHIBITED];

/// What muted an alert change: an object of its top-level [`MUTED_BY`] fields (as text), if
/// it has any (at its top level: the text alone can hold them in an event or a message).
pub fn mutes_of(json: &str) -> Option<Vec<u8>> {
    // (Each field as its key is written: a plain search, no text made per change.)
    const KEYS: [&str; 2] = ["\"silenced\":", "\"inhibited\":"];
    if !KEYS.iter().any(|k| json.contains(k)) {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Head {
        silenced: Option<serde_json::Value>,
        inhibited: Option<serde_json::Value>,
    }
    let head: Head = serde_json::from_str(json).ok()?;
    let mut by = serde_json::Map::new();
    for (f, v) in [(SILENCED, head.silenced), (INHIBITED, head.inhibited)] {
        if let Some(v) = v {
            by.insert(f.into(), v);
        }
    }
    (!by.is_empty()).then(|| serde_json::Value::Object(by).to_string().into_bytes())
}

/// `json` with each field of the object `fields` set (as it was when either is not an
/// object).
pub fn with_fields(json: &str, fields: &[u8]) -> String {
    let parsed = serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .zip(serde_json::from_slice::<serde_json::Value>(fields).ok());
    match parsed {
        Some((mut v, serde_json::Value::Object(fields))) => match v.as_object_mut() {
            Some(o) => {
                o.extend(fields);
                v.to_string()
            }
            None => json.to_string(),
        },
        _ => json.to_string(),
    }
}

/// `json` without its top-level field `name` (as it was when not an object or not JSON).
fn without_field(json: &str, name: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(mut v) => match v.as_object_mut() {
            Some(o) => {
                o.remove(name);
                v.to_string()
            }
            None => json.to_string(),
        },
        Err(_) => json.to_string(),
    }
}

/// sled's page cache, at most.
const CACHE_BYTES: u64 = 64 << 20;

/// Most alert changes one store transaction writes (see [`Store::record_changes`]).
const TXN_CHANGES: usize = 1024;

/// A shard's state file.
/// How a state written aside ends (the store's own, and a shard's: [`Store::state_aside`]).
const ASIDE: &str = ".state.new";

fn state_name(shard: u32) -> String {
    format!("shard-{shard}.state")
}

/// Makes a folder's entries (a rename, a removal) durable.
/// The file of alert changes kept aside ([`Store::save_unkept`]), in the state folder.
const UNKEPT_FILE: &str = "unkept.jsonl";

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StoreError::State {
            path: dir.to_path_buf(),
            source,
        })
}

/// The written-out mark of a store that has written nothing out yet (sled numbers the first
/// change 0, so "up to 0" would count it written).
const NONE_WRITTEN: u64 = u64::MAX;

/// A new store's instance: random (the standard library's per-process hash keys, which it
/// draws from the system's randomness) mixed with the time, so two stores made in one place
/// one after the other are told apart.
fn draw_instance() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.write_u32(std::process::id());
    let x = h.finish();
    (x ^ (x >> 32)) as u32
}

/// The sequence number an `alerts` key holds (0 for a malformed key, which prune and listing
/// only use to order).
fn seq_of(k: &[u8]) -> u64 {
    <[u8; 8]>::try_from(k).map_or(0, u64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// States as read, their bytes read too (to compare with those saved).
    fn held(v: Vec<SavedShard>) -> Vec<SavedShard> {
        v.iter().map(|s| s.loaded().unwrap()).collect()
    }
    use cepheus_core::engine::{Engine, EngineConfig};
    use cepheus_core::event::{Event, Source, Value};
    use cepheus_core::rules::compile_str;
    use cepheus_core::time::{Duration, Timestamp};

    /// The store in `dir` opened, maybe right after a handle to it was dropped: sled lets its
    /// lock go when its last background task does, which under load can be a moment later
    /// (CI once saw `Locked` here).
    fn reopen(dir: &Path, max_alerts: u64) -> Store {
        Store::open_waiting(dir, max_alerts, std::time::Duration::from_secs(30), || {}).unwrap()
    }

    /// The alerts of a heartbeat rule over one host that goes silent and comes back.
    fn heartbeat_alerts() -> Vec<Alert> {
        let rules = heartbeat_rules();
        let mut e = Engine::new(&rules, EngineConfig::default()).unwrap();
        let mut out = Vec::new();
        let t0 = Timestamp::from_secs(1_000_000);
        for t in [0, 30] {
            let at = t0.add(Duration::from_secs(t));
            let mut ev = Event::new(Source::Syslog, at, at);
            ev.set(cepheus_core::event::Field::Host, Value::str("a"));
            ev.set(cepheus_core::event::Field::App, Value::str("hb"));
            e.push(ev, &mut out);
        }
        out
    }

    /// `absent(hb) for 10s` by host.
    fn heartbeat_rules() -> cepheus_core::rules::ir::RuleSet {
        let compiled = compile_str(
            "hb.toml",
            r#"
[[rule]]
name = "hb"
severity = "high"
group_by = ["host"]
events.hb = 'syslog and app == "hb"'
pattern = "absent(hb) for 10s"
"#,
        );
        compiled.rules.expect("the rule compiles")
    }

    #[test]
    fn a_change_is_kept_once_across_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        assert_eq!(
            alerts.iter().map(|a| a.state).collect::<Vec<_>>(),
            [AlertState::Firing, AlertState::Resolved]
        );
        {
            let s = reopen(dir.path(), 100);
            assert_eq!(s.record(&alerts[..1]).unwrap(), [true]);
            // The same firing again (an engine restored from an older checkpoint), and the
            // resolve, new.
            assert_eq!(s.record(&alerts).unwrap(), [false, true]);
        }
        let s = reopen(dir.path(), 100);
        assert_eq!(s.record(&alerts).unwrap(), [false, false]);
        let kept = s.recent(10).unwrap();
        assert_eq!(kept.len(), 2);
        assert!(kept[0].seq < kept[1].seq);
        assert_eq!(kept[0].json, alerts[0].to_json().to_string());
        assert_eq!(kept[1].json, alerts[1].to_json().to_string());
        assert_eq!(s.recent(1).unwrap(), kept[1..]);
    }

    /// A firing's rule meaning is kept beside it while it fires, across reopening, and goes
    /// with its resolve; a firing kept without one has none.
    #[test]
    fn a_firing_keeps_its_rule_meaning_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        {
            let s = reopen(dir.path(), 100);
            let mut firing = vec![Change {
                meaning: Some(0xfeed),
                ..Change::of(&alerts[0])
            }];
            s.record_changes(&mut firing).unwrap();
            assert_eq!(s.firing().unwrap()[0].meaning, Some(0xfeed));
        }
        let s = reopen(dir.path(), 100);
        assert_eq!(s.firing().unwrap()[0].meaning, Some(0xfeed));
        s.record(&alerts[1..]).unwrap();
        assert!(s.firing().unwrap().is_empty());
        assert!(s.meanings.is_empty());
        // One left behind (as by a prune cut short) goes at the next opening.
        s.meanings
            .insert(7u64.to_be_bytes(), &1u64.to_be_bytes())
            .unwrap();
        drop(s);
        let s = reopen(dir.path(), 100);
        assert!(s.meanings.is_empty());
        // Kept without a meaning (a change made before they were kept): none.
        let d2 = tempfile::tempdir().unwrap();
        let s2 = reopen(d2.path(), 100);
        s2.record(&alerts[..1]).unwrap();
        assert_eq!(s2.firing().unwrap()[0].meaning, None);
    }

    /// Kept changes get their place; an output's cursor says where it stands, across a
    /// reopening once flushed, and what follows it is what it has not dealt with.
    #[test]
    fn an_output_cursor_names_what_the_output_has_not_dealt_with() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        {
            let s = reopen(dir.path(), 100);
            assert_eq!(s.output_cursor("webhook").unwrap(), OutputCursor::Unknown);
            assert_eq!(s.last_seq().unwrap(), None);
            s.set_output_cursor("webhook", None).unwrap();
            let mut changes: Vec<Change> = alerts.iter().map(Change::of).collect();
            s.record_changes(&mut changes).unwrap();
            let seqs: Vec<u64> = changes.iter().map(|c| c.seq.unwrap()).collect();
            assert!(seqs[0] < seqs[1]);
            assert_eq!(s.last_seq().unwrap(), Some(seqs[1]));
            // Not kept again: no place.
            let mut again: Vec<Change> = alerts[..1].iter().map(Change::of).collect();
            s.record_changes(&mut again).unwrap();
            assert_eq!(again[0].seq, None);
            assert_eq!(s.changes_after(None, 10).unwrap().len(), 2);
            assert_eq!(s.changes_after(None, 1).unwrap()[0].seq, seqs[0]);
            s.set_output_cursor("webhook", Some(seqs[0])).unwrap();
            s.flush().unwrap();
        }
        let s = reopen(dir.path(), 100);
        let OutputCursor::After(Some(at)) = s.output_cursor("webhook").unwrap() else {
            panic!("no cursor");
        };
        let left = s.changes_after(Some(at), 10).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].json, alerts[1].to_json().to_string());
        assert_eq!(s.output_cursor("syslog").unwrap(), OutputCursor::Unknown);
        assert!(s.changes_after(Some(u64::MAX), 10).unwrap().is_empty());
        s.forget_output_cursor("webhook").unwrap();
        assert_eq!(s.output_cursor("webhook").unwrap(), OutputCursor::Unknown);
    }

    #[test]
    fn an_alert_fires_until_its_resolve_is_recorded_whatever_the_pruning() {
        let dir = tempfile::tempdir().unwrap();
        // a and b fire, b resolves, then a: with room for two changes, a's firing leaves the
        // changes while a still fires.
        let alerts = two_hosts_alerts();
        let states: Vec<_> = alerts
            .iter()
            .map(|a| (a.group()[0].1.as_str().unwrap().to_string(), a.state))
            .collect();
        assert_eq!(
            states,
            [
                ("a".to_string(), AlertState::Firing),
                ("b".to_string(), AlertState::Firing),
                ("b".to_string(), AlertState::Resolved),
                ("a".to_string(), AlertState::Resolved),
            ]
        );
        let s = reopen(dir.path(), 2);
        assert!(s.firing().unwrap().is_empty());
        s.record(&alerts[..3]).unwrap();
        assert_eq!(s.counts(), (2, 1));
        let firing = s.firing().unwrap();
        assert_eq!(firing.len(), 1);
        assert_eq!(firing[0].json, alerts[0].to_json().to_string());
        assert!(
            s.recent(10)
                .unwrap()
                .iter()
                .all(|c| c.json != firing[0].json)
        );
        // Across a restart, and then its resolve ends it (and is new).
        drop(s);
        let s = reopen(dir.path(), 2);
        assert_eq!(s.counts(), (2, 1));
        assert_eq!(s.record(&alerts[..1]).unwrap(), [false]);
        assert_eq!(s.record(&alerts[3..]).unwrap(), [true]);
        assert!(s.firing().unwrap().is_empty());
        assert_eq!(s.counts(), (2, 0));
    }

    #[test]
    fn the_newest_firing_alerts_are_the_end_of_all_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 100);
        let alerts = heartbeat_alerts_of(&["e", "a", "d", "b", "c"]);
        let firing: Vec<_> = alerts
            .iter()
            .filter(|a| a.state == AlertState::Firing)
            .cloned()
            .collect();
        assert_eq!(firing.len(), 5);
        for a in &firing {
            s.record(std::slice::from_ref(a)).unwrap();
        }
        let _ = s
            .ack(firing[4].id().0, "alice", "2026-12-03T05:00:00Z")
            .unwrap();
        let all = s.firing().unwrap();
        assert_eq!(all.len(), 5);
        for n in 0..=6 {
            let newest = s.firing_newest(n).unwrap();
            assert_eq!(newest, all[all.len().saturating_sub(n)..], "{n}");
        }
        assert!(s.firing_newest(1).unwrap()[0].json.contains("alice"));
    }

    /// A batch larger than one transaction: every change kept once, a repeat in a later
    /// transaction of the same batch seen as one, and the counts right.
    #[test]
    fn a_batch_larger_than_a_transaction_is_kept_whole_and_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 1_000_000);
        let hosts: Vec<String> = (0..TXN_CHANGES + 10).map(|i| format!("h{i}")).collect();
        let names: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let firing: Vec<Alert> = heartbeat_alerts_of(&names)
            .into_iter()
            .filter(|a| a.state == AlertState::Firing)
            .collect();
        assert_eq!(firing.len(), TXN_CHANGES + 10);
        let mut batch: Vec<Alert> = firing.clone();
        batch.push(firing[3].clone());
        let fresh = s.record(&batch).unwrap();
        assert_eq!(fresh.len(), batch.len());
        assert!(fresh[..firing.len()].iter().all(|f| *f));
        assert!(!fresh[firing.len()], "the repeat is not new");
        assert_eq!(s.counts(), (firing.len() as u64, firing.len() as u64));
        assert_eq!(s.firing().unwrap().len(), firing.len());
        assert_eq!(s.record(&firing[..2]).unwrap(), [false, false]);
    }

    /// Hosts `hosts` heartbeat at 0 s and all fire at 10 s, in the order given.
    fn heartbeat_alerts_of(hosts: &[&str]) -> Vec<Alert> {
        let mut e = Engine::new(&heartbeat_rules(), EngineConfig::default()).unwrap();
        let mut out = Vec::new();
        let t0 = Timestamp::from_secs(1_000_000);
        for (i, host) in hosts.iter().enumerate() {
            let at = t0.add(Duration::from_millis(i as i64));
            let mut ev = Event::new(Source::Syslog, at, at);
            ev.set(cepheus_core::event::Field::Host, Value::str(host));
            ev.set(cepheus_core::event::Field::App, Value::str("hb"));
            e.push(ev, &mut out);
        }
        e.advance_to(t0.add(Duration::from_secs(20)), &mut out);
        out
    }

    #[test]
    fn an_acknowledged_alert_still_resolves_and_its_resolve_says_who_acked() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        let s = reopen(dir.path(), 10);
        let id = alerts[0].id().0;
        assert_eq!(
            s.ack(id, "alice", "2026-12-03T05:00:00Z").unwrap(),
            Acked::NotFiring,
            "not firing yet"
        );
        s.record(&alerts[..1]).unwrap();
        assert_eq!(
            s.ack(id, "root", "2026-12-03T04:59:00Z").unwrap(),
            Acked::Now
        );
        // Again: the new one stands, and the old is given back.
        assert_eq!(
            s.ack(id, "alice", "2026-12-03T05:00:00Z").unwrap(),
            Acked::Again {
                before: r#"{"by":"root","time":"2026-12-03T04:59:00Z"}"#.into()
            }
        );
        let firing: serde_json::Value = serde_json::from_str(&s.firing().unwrap()[0].json).unwrap();
        assert_eq!(firing["ack"]["by"], "alice");
        assert_eq!(firing["state"], "firing");
        let mut resolve = vec![Change::of(&alerts[1])];
        assert_eq!(s.record_changes(&mut resolve).unwrap(), [true]);
        let kept: serde_json::Value = serde_json::from_str(&s.recent(1).unwrap()[0].json).unwrap();
        assert_eq!(kept["state"], "resolved");
        assert_eq!(kept["ack"]["time"], "2026-12-03T05:00:00Z");
        assert_eq!(resolve[0].json, kept.to_string());
        assert!(s.firing().unwrap().is_empty());
        assert_eq!(
            s.ack(id, "bob", "2026-12-03T05:01:00Z").unwrap(),
            Acked::NotFiring,
            "resolved"
        );
    }

    /// A muted firing and its end in one `record_changes` call (one shard batch: the
    /// engine fires and resolves an absence in one push, as `heartbeat_alerts` does): the
    /// end must be muted too, but `muted` is read before the batch's firing is written.
    #[test]
    fn a_muted_firing_and_its_end_in_one_batch_mute_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        let s = reopen(dir.path(), 10);
        let silence = r#"{"id":"00000000000000a1","by":"ops","until":"2026-12-03T06:00:00Z"}"#;
        let mut both = vec![Change::of(&alerts[0]), Change::of(&alerts[1])];
        assert_eq!(both[0].state, AlertState::Firing);
        assert_ne!(both[1].state, AlertState::Firing);
        both[0].json = with_field(&both[0].json, SILENCED, silence.as_bytes());
        assert_eq!(s.record_changes(&mut both).unwrap(), [true, true]);
        assert!(both[0].is_muted());
        assert!(
            both[1].is_muted(),
            "the end of a muted firing goes to the webhook: {}",
            both[1].json
        );
    }

    /// (Review.) A firing kept and sent unmuted, given again with its end in one batch (a
    /// journal replayed after a crash: the firing a repeat, dropped) and marked muted the
    /// second time (a silence added meanwhile): `batch_mutes` trusts the repeat, and the
    /// end is muted though the receivers had the firing.
    #[test]
    fn the_end_of_an_unmuted_firing_repeated_muted_in_its_batch_is_not_muted() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        let s = reopen(dir.path(), 10);
        let mut fire = vec![Change::of(&alerts[0])];
        assert_eq!(s.record_changes(&mut fire).unwrap(), [true]);
        let silence = r#"{"id":"00000000000000a1","by":"ops","until":"2026-12-03T06:00:00Z"}"#;
        let mut both = vec![Change::of(&alerts[0]), Change::of(&alerts[1])];
        both[0].json = with_field(&both[0].json, SILENCED, silence.as_bytes());
        assert_eq!(s.record_changes(&mut both).unwrap(), [false, true]);
        assert!(
            !both[1].is_muted(),
            "the end of a firing sent unmuted is muted: {}",
            both[1].json
        );
    }

    #[test]
    fn a_muted_alerts_end_is_muted_until_its_silence_ends() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        let s = reopen(dir.path(), 10);
        let silence = r#"{"id":"00000000000000a1","by":"ops","until":"2026-12-03T06:00:00Z"}"#;
        let silenced = |c: &Change| with_field(&c.json, SILENCED, silence.as_bytes());
        // A firing the sink marked silenced: kept so, its end muted too (and saying so).
        let mut fire = vec![Change::of(&alerts[0])];
        fire[0].json = silenced(&fire[0]);
        assert!(fire[0].is_muted());
        assert_eq!(s.record_changes(&mut fire).unwrap(), [true]);
        let mut resolve = vec![Change::of(&alerts[1])];
        assert!(!resolve[0].is_muted());
        assert_eq!(s.record_changes(&mut resolve).unwrap(), [true]);
        assert!(resolve[0].is_muted(), "{}", resolve[0].json);
        let kept: serde_json::Value = serde_json::from_str(&s.recent(1).unwrap()[0].json).unwrap();
        assert_eq!(kept["silenced"]["by"], "ops");
        // Ended, it is muted no more: nothing to unmute, and a later firing is not muted.
        assert!(
            s.unmute(SILENCED, "id", "00000000000000a1", &|_| false, &[])
                .unwrap()
                .is_empty()
        );

        // Another store: the silence ends while the alert fires.
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 10);
        let mut fire = vec![Change::of(&alerts[0])];
        fire[0].json = silenced(&fire[0]);
        s.record_changes(&mut fire).unwrap();
        assert!(
            s.unmute(SILENCED, "id", "00000000000000ff", &|_| false, &[])
                .unwrap()
                .is_empty(),
            "another silence"
        );
        let back = s
            .unmute(SILENCED, "id", "00000000000000a1", &|_| false, &[])
            .unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].id, alerts[0].id().0);
        assert!(!back[0].is_muted(), "{}", back[0].json);
        assert_eq!(back[0].json, Change::of(&alerts[0]).json);
        // Listed without it, and its end goes out.
        assert!(!s.firing().unwrap()[0].json.contains("silenced"));
        let mut resolve = vec![Change::of(&alerts[1])];
        s.record_changes(&mut resolve).unwrap();
        assert!(!resolve[0].is_muted(), "{}", resolve[0].json);
        assert!(
            s.unmute(SILENCED, "id", "00000000000000a1", &|_| false, &[])
                .unwrap()
                .is_empty()
        );

        // Muted twice (a silence, then another alert's inhibition): sent once both ended.
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 10);
        let mut fire = vec![Change::of(&alerts[0])];
        fire[0].json = silenced(&fire[0]);
        s.record_changes(&mut fire).unwrap();
        s.mute(
            alerts[0].id().0,
            INHIBITED,
            r#"{"by":"00000000000000b2","rule":"up"}"#,
        )
        .unwrap();
        assert!(s.firing().unwrap()[0].json.contains("\"inhibited\":"));
        assert!(
            s.unmute(SILENCED, "id", "00000000000000a1", &|_| false, &[])
                .unwrap()
                .is_empty()
        );
        let listed = s.firing().unwrap()[0].json.clone();
        assert!(
            !listed.contains("silenced") && listed.contains("inhibited"),
            "{listed}"
        );
        let back = s
            .unmute(INHIBITED, "by", "00000000000000b2", &|_| false, &[])
            .unwrap();
        assert_eq!(back.len(), 1);
        assert!(!back[0].is_muted(), "{}", back[0].json);
    }

    #[test]
    fn a_firing_sent_again_stays_owed_until_each_output_deals_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        let id = alerts[0].id().0;
        let silence = r#"{"id":"00000000000000a1","by":"ops","until":"2026-12-03T06:00:00Z"}"#;
        {
            let s = reopen(dir.path(), 10);
            let mut fire = vec![Change::of(&alerts[0])];
            fire[0].json = with_field(&fire[0].json, SILENCED, silence.as_bytes());
            s.record_changes(&mut fire).unwrap();
            let kept = fire[0].seq;
            assert!(kept.is_some());
            assert!(s.resends().unwrap().is_empty());
            // Muted by nothing else: owed to both outputs, placed after what was kept.
            let back = s
                .unmute(
                    SILENCED,
                    "id",
                    "00000000000000a1",
                    &|_| false,
                    &["syslog", "webhook"],
                )
                .unwrap();
            assert_eq!(back.len(), 1);
            let owed = vec![Resend {
                id,
                after: kept,
                to: vec!["syslog".into(), "webhook".into()],
            }];
            assert_eq!(s.resends().unwrap(), owed);
            // The syslog output delivers it: owed to the webhook only.
            s.resent(id, "syslog").unwrap();
            s.resent(id, "syslog").unwrap();
            assert_eq!(s.resends().unwrap()[0].to, ["webhook"]);
            s.flush().unwrap();
        }
        // What a stop left owed is still owed after it.
        let s = reopen(dir.path(), 10);
        assert_eq!(s.resends().unwrap()[0].to, ["webhook"]);
        s.resent(id, "webhook").unwrap();
        assert!(s.resends().unwrap().is_empty());
        s.resent(id, "webhook").unwrap();

        // Muted anew (another silence) before it went out: owed no more.
        s.mute(id, SILENCED, silence).unwrap();
        assert_eq!(
            s.unmute_one(id, SILENCED, &["webhook"])
                .unwrap()
                .map(|c| c.id),
            Some(id)
        );
        assert_eq!(s.resends().unwrap().len(), 1);
        s.mute(id, INHIBITED, r#"{"by":"00000000000000b2","rule":"up"}"#)
            .unwrap();
        assert!(s.resends().unwrap().is_empty());
        // Still muted by something else when one ends: not sent, so owed to none.
        s.mute(id, SILENCED, silence).unwrap();
        assert_eq!(s.unmute_one(id, SILENCED, &["webhook"]).unwrap(), None);
        assert!(s.resends().unwrap().is_empty());
    }

    #[test]
    fn silences_are_kept_and_dropped() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = reopen(dir.path(), 10);
            let a = s.new_silence_id().unwrap();
            let b = s.new_silence_id().unwrap();
            assert_ne!(a, b);
            s.put_silence(a, "{\"a\":1}").unwrap();
            s.put_silence(b, "{\"b\":1}").unwrap();
            s.put_silence(a, "{\"a\":2}").unwrap();
            s.remove_silence(b).unwrap();
        }
        let s = reopen(dir.path(), 10);
        let kept = s.silences().unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].1, "{\"a\":2}");
    }

    #[test]
    fn changes_recorded_but_not_written_out_are_given_back_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        {
            let s = reopen(dir.path(), 10);
            assert!(s.unwritten().unwrap().is_empty());
            s.record(&alerts[..1]).unwrap();
            s.mark_written().unwrap();
            s.record(&alerts[1..]).unwrap();
            // Killed before writing the resolve out.
        }
        let s = reopen(dir.path(), 10);
        let left = s.unwritten().unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].json, alerts[1].to_json().to_string());
        s.mark_written().unwrap();
        assert!(s.unwritten().unwrap().is_empty());
    }

    /// The written-out mark moved as far as stdout wrote: never back, never past the last
    /// change kept.
    #[test]
    fn the_written_mark_moves_only_forward_and_only_over_kept_changes() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = two_hosts_alerts();
        let s = reopen(dir.path(), 100);
        // Nothing kept: nothing to mark.
        s.mark_written_through(5).unwrap();
        assert_eq!(s.written_through().unwrap(), None);
        s.record(&alerts[..3]).unwrap();
        let seqs: Vec<u64> = s.unwritten().unwrap().iter().map(|c| c.seq).collect();
        assert_eq!(seqs.len(), 3);
        s.mark_written_through(seqs[0]).unwrap();
        assert_eq!(s.unwritten().unwrap().len(), 2);
        // Not back.
        s.mark_written().unwrap();
        s.mark_written_through(seqs[0]).unwrap();
        assert!(s.unwritten().unwrap().is_empty());
        // Not past the last kept: a change kept later is still to write.
        s.mark_written_through(u64::MAX - 1).unwrap();
        s.record(&alerts[3..]).unwrap();
        assert_eq!(s.unwritten().unwrap().len(), alerts.len() - 3);
    }

    #[test]
    fn changes_older_than_the_cutoff_go_and_firing_alerts_stay() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 100);
        // web1 fires, web2 fires, web2 resolves: then everything before the resolve goes.
        let alerts = two_hosts_alerts();
        s.record(&alerts[..3]).unwrap();
        let cutoff = alerts[2].time;
        let firing_before = s.firing().unwrap();
        assert_eq!(s.prune_older_than(cutoff, 1).unwrap(), 1);
        assert_eq!(s.prune_older_than(cutoff, 100).unwrap(), 1);
        assert_eq!(s.prune_older_than(cutoff, 100).unwrap(), 0);
        assert_eq!(s.counts().0, 1);
        assert_eq!(s.recent(10).unwrap().len(), 1);
        // web1 still fires, listed as before; its dedup key stays while it fires.
        assert_eq!(s.firing().unwrap(), firing_before);
        assert_eq!(s.record(&alerts[..1]).unwrap(), [false]);
        // web2's firing change went with its key: made again, it would be new.
        assert_eq!(s.record(&alerts[1..2]).unwrap(), [true]);
    }

    #[test]
    fn the_first_change_of_a_new_store_is_given_back_if_never_written_out() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        {
            let s = reopen(dir.path(), 10);
            s.record(&alerts[..1]).unwrap();
            // Killed before writing the very first change out.
        }
        let s = reopen(dir.path(), 10);
        let left = s.unwritten().unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].json, alerts[0].to_json().to_string());
    }

    #[test]
    fn an_alert_that_outlived_its_firing_change_leaves_no_dedup_key_behind() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = two_hosts_alerts();
        let s = reopen(dir.path(), 2);
        for a in &alerts {
            s.record(std::slice::from_ref(a)).unwrap();
        }
        // a fires, b fires, b resolves, a resolves: the two newest changes, and their keys.
        assert_eq!(s.counts(), (2, 0));
        assert_eq!(s.seen.len(), 2);
    }

    #[test]
    fn firing_alerts_beyond_the_cap_go_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = two_hosts_alerts();
        let s = reopen(dir.path(), 1);
        s.record(&alerts[..2]).unwrap();
        let firing = s.firing().unwrap();
        assert_eq!(firing.len(), 1);
        assert_eq!(firing[0].json, alerts[1].to_json().to_string());
        // A pruned firing is forgotten whole: it would be kept again.
        assert_eq!(s.record(&alerts[..1]).unwrap(), [true]);
    }

    /// Hosts a and b heartbeat at 0 s, both fire at 10 s, b comes back at 20 s, a at 30 s.
    fn two_hosts_alerts() -> Vec<Alert> {
        let mut e = Engine::new(&heartbeat_rules(), EngineConfig::default()).unwrap();
        let mut out = Vec::new();
        let t0 = Timestamp::from_secs(1_000_000);
        for (t, host) in [(0, "a"), (0, "b"), (20, "b"), (30, "a")] {
            let at = t0.add(Duration::from_secs(t));
            let mut ev = Event::new(Source::Syslog, at, at);
            ev.set(cepheus_core::event::Field::Host, Value::str(host));
            ev.set(cepheus_core::event::Field::App, Value::str("hb"));
            e.push(ev, &mut out);
        }
        out
    }

    #[test]
    fn a_second_process_cannot_open_a_held_store() {
        let dir = tempfile::tempdir().unwrap();
        let _held = reopen(dir.path(), 100);
        // sled locks the folder per process; a second open in this process shares the lock,
        // so the check is done by a child: this test binary, asked to open the store.
        if std::env::var_os("CEPHEUS_STORE_CHILD").is_some() {
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "tests::child_opens_the_store",
                "--nocapture",
                "--include-ignored",
            ])
            .env("CEPHEUS_STORE_CHILD", dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("in use by another process"),
            "child said: {text}"
        );
    }

    /// Run by [`a_second_process_cannot_open_a_held_store`] in a child process.
    #[test]
    #[ignore = "run as a child process by a_second_process_cannot_open_a_held_store"]
    fn child_opens_the_store() {
        let Some(dir) = std::env::var_os("CEPHEUS_STORE_CHILD") else {
            return;
        };
        match Store::open(Path::new(&dir), 100) {
            Ok(_) => println!("opened"),
            Err(e) => println!("{e}"),
        }
    }

    #[test]
    fn the_oldest_changes_are_pruned_beyond_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let alerts = heartbeat_alerts();
        let s = reopen(dir.path(), 1);
        assert_eq!(s.record(&alerts[..1]).unwrap(), [true]);
        assert_eq!(s.record(&alerts[1..]).unwrap(), [true]);
        let kept = s.recent(10).unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].json, alerts[1].to_json().to_string());
        // The pruned change's dedup key went with it.
        assert_eq!(s.record(&alerts[..1]).unwrap(), [true]);
    }

    /// Resolved changes of alert `id`s, distinct.
    fn resolved(ids: std::ops::Range<u64>) -> Vec<Change> {
        ids.map(|id| Change {
            id,
            state: AlertState::Resolved,
            json: format!(
                r#"{{"id":"{id:016x}","state":"resolved","time":"2026-12-03T10:00:00Z"}}"#
            ),
            seq: None,
            meaning: None,
        })
        .collect()
    }

    /// A resumed client's point is found by counting changes, not subtracting seqs (which
    /// jump at a reopen): across a restart it misses nothing; beyond the limit it skips the
    /// oldest, counted; after a prune it is told changes may be gone.
    #[test]
    fn a_resume_point_counts_changes_across_a_restart_a_limit_and_a_prune() {
        let dir = tempfile::tempdir().unwrap();
        let mut before = resolved(0..2);
        {
            let s = reopen(dir.path(), 1000);
            s.record_changes(&mut before).unwrap();
        }
        let s = reopen(dir.path(), 1000);
        let mut after = resolved(2..3);
        s.record_changes(&mut after).unwrap();
        let (first, last) = (before[0].seq.unwrap(), after[0].seq.unwrap());
        let r = s.resume_point(Some(first), last, 1000).unwrap();
        assert_eq!(
            r,
            Resume {
                after: Some(first),
                skipped: 0,
                pruned: false
            }
        );
        let got: Vec<u64> = s
            .changes_after(r.after, 10)
            .unwrap()
            .iter()
            .map(|c| c.seq)
            .collect();
        assert_eq!(got, [before[1].seq.unwrap(), last]);
        // Beyond the limit: the oldest left out, counted.
        let r = s.resume_point(Some(first), last, 1).unwrap();
        assert_eq!(
            r,
            Resume {
                after: before[1].seq,
                skipped: 1,
                pruned: false
            }
        );
        // Nothing after the last.
        assert_eq!(
            s.resume_point(Some(last), last, 10).unwrap(),
            Resume {
                after: Some(last),
                ..Resume::default()
            }
        );
        // An id this store never gave (it was made anew since): all it holds, maybe missed.
        let r = s.resume_point(Some(last + 5_000_000), last, 10).unwrap();
        assert_eq!(
            r,
            Resume {
                after: None,
                skipped: 0,
                pruned: true
            }
        );
        let r = s.resume_point(Some(last + 5_000_000), last, 2).unwrap();
        assert_eq!(
            r,
            Resume {
                after: before[0].seq,
                skipped: 1,
                pruned: true
            }
        );
        drop(s);
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 10);
        let mut changes = resolved(0..30);
        s.record_changes(&mut changes[..1]).unwrap();
        s.record_changes(&mut changes[1..]).unwrap();
        let (first, last) = (changes[0].seq.unwrap(), changes[29].seq.unwrap());
        let r = s.resume_point(Some(first), last, 1000).unwrap();
        assert!(r.pruned, "{r:?}");
        assert_eq!(r.skipped, 0);
        assert!(!s.resume_point(changes[25].seq, last, 1000).unwrap().pruned);
        // Only the client's own change gone: nothing after it is.
        assert!(!s.resume_point(changes[19].seq, last, 1000).unwrap().pruned);
        assert!(s.resume_point(changes[18].seq, last, 1000).unwrap().pruned);
        // The largest id is as foreign as any, and held to the limit too.
        assert_eq!(
            s.resume_point(None, last, 2).unwrap(),
            s.resume_point(Some(last + 1), last, 2).unwrap()
        );
        assert_eq!(s.resume_point(None, last, 2).unwrap().skipped, 8);
    }

    /// A store keeps its instance across reopens; one made anew in its place has another.
    #[test]
    fn a_store_keeps_its_instance_and_a_new_one_draws_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let first = reopen(dir.path(), 10).instance();
        assert_eq!(reopen(dir.path(), 10).instance(), first);
        std::fs::remove_dir_all(dir.path()).unwrap();
        let again = reopen(dir.path(), 10).instance();
        assert_ne!(again, first);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(reopen(other.path(), 10).instance(), again);
    }

    /// Bytes under `dir`, recursively.
    fn disk_use(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => disk_use(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    }

    #[test]
    fn a_state_saved_over_and_over_does_not_grow_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 10);
        let state = |i: u8| SavedShard {
            shard: 0,
            shards: 1,
            data: vec![i; 1 << 20],
            file: None,
        };
        for i in 0..40 {
            s.save_checkpoint(&state(i)).unwrap();
        }
        drop(s);
        let s = reopen(dir.path(), 10);
        assert_eq!(held(s.checkpoints().unwrap()), [state(39)]);
        // One state of 1 MiB, and sled's own files: not 40 MiB of replaced states.
        let used = disk_use(dir.path());
        assert!(used < 8 << 20, "{used} bytes on disk");
    }

    #[test]
    fn a_state_an_older_store_kept_in_sled_is_read_then_moved() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 10);
        let mut v = 2u32.to_be_bytes().to_vec();
        v.extend_from_slice(b"old");
        s.checkpoints.insert(1u32.to_be_bytes(), v).unwrap();
        let old = SavedShard {
            shard: 1,
            shards: 2,
            data: b"old".to_vec(),
            file: None,
        };
        assert_eq!(held(s.checkpoints().unwrap()), std::slice::from_ref(&old));
        // Shard 0 was kept in sled too: until it has its file, shard 1's sled state stays
        // (a crash between the two would otherwise leave one shard without any state).
        let mut v0 = 2u32.to_be_bytes().to_vec();
        v0.extend_from_slice(b"zero");
        s.checkpoints.insert(0u32.to_be_bytes(), v0).unwrap();
        let new = SavedShard {
            data: b"new".to_vec(),
            file: None,
            ..old.clone()
        };
        s.save_checkpoint(&new).unwrap();
        let zero = SavedShard {
            shard: 0,
            shards: 2,
            data: b"zero".to_vec(),
            file: None,
        };
        assert_eq!(held(s.checkpoints().unwrap()), [zero.clone(), new.clone()]);
        assert!(!s.checkpoints.is_empty());
        let zero_new = SavedShard {
            data: b"zero-new".to_vec(),
            file: None,
            ..zero
        };
        s.save_checkpoint(&zero_new).unwrap();
        assert!(s.checkpoints.is_empty());
        assert_eq!(held(s.checkpoints().unwrap()), [zero_new, new]);
        s.save_checkpoints(&[]).unwrap();
        assert!(s.checkpoints().unwrap().is_empty());
    }

    #[test]
    fn a_state_file_that_cannot_be_read_costs_only_its_own_shard() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 10);
        let a = |shard, data: &[u8]| SavedShard {
            shard,
            shards: 3,
            data: data.to_vec(),
            file: None,
        };
        s.save_checkpoints(&[a(0, b"x"), a(1, b"y"), a(2, b"z")])
            .unwrap();
        // An I/O error on shard 1's file (a link to itself: ELOOP, even as root).
        let one = dir.path().join("state").join("shard-1.state");
        std::fs::remove_file(&one).unwrap();
        std::os::unix::fs::symlink("shard-1.state", &one).unwrap();
        let (saved, unreadable) = s.readable_checkpoints().unwrap();
        assert_eq!(held(saved), [a(0, b"x"), a(2, b"z")]);
        assert_eq!(unreadable.len(), 1);
        assert!(
            unreadable[0].to_string().contains("shard-1.state"),
            "{}",
            unreadable[0]
        );
        assert!(s.checkpoints().is_err());
        // The shard's next save replaces it.
        s.save_checkpoint(&a(1, b"y2")).unwrap();
        assert_eq!(
            held(s.checkpoints().unwrap()),
            [a(0, b"x"), a(1, b"y2"), a(2, b"z")]
        );
    }

    /// A shard writes its state aside as it makes it; saving puts it in place. States on
    /// their way for other shards are left alone meanwhile, and one a crash left aside is
    /// removed at the next start.
    #[test]
    fn a_state_written_aside_is_put_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 10);
        let aside = |shard: u32, data: &[u8]| {
            let path = s.state_aside(shard).unwrap();
            let mut bytes = 2u32.to_be_bytes().to_vec();
            bytes.extend_from_slice(data);
            std::fs::write(&path, bytes).unwrap();
            SavedShard {
                shard,
                shards: 2,
                data: Vec::new(),
                file: Some(path),
            }
        };
        let zero = aside(0, b"state zero");
        let one = aside(1, b"state one");
        assert_ne!(zero.file, one.file);
        s.save_checkpoint(&zero).unwrap();
        assert!(!zero.file.as_ref().unwrap().exists());
        // Shard 1's is still on its way.
        assert!(one.file.as_ref().unwrap().exists());
        s.save_checkpoint(&one).unwrap();
        let held = |v: Vec<SavedShard>| -> Vec<(u32, Vec<u8>)> {
            v.iter()
                .map(|x| (x.shard, x.loaded().unwrap().data))
                .collect()
        };
        assert_eq!(
            held(s.checkpoints().unwrap()),
            [(0, b"state zero".to_vec()), (1, b"state one".to_vec())]
        );
        // A crash left one aside: gone at the next start, the state in place kept.
        let left = aside(0, b"never put in place");
        drop(s);
        let s = reopen(dir.path(), 10);
        assert_eq!(
            held(s.readable_checkpoints().unwrap().0)[0].1,
            b"state zero"
        );
        assert!(!left.file.as_ref().unwrap().exists());
    }

    #[test]
    fn checkpoints_are_replaced_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path(), 10);
        assert!(s.checkpoints().unwrap().is_empty());
        let a = |shard, data: &[u8]| SavedShard {
            shard,
            shards: 2,
            data: data.to_vec(),
            file: None,
        };
        s.save_checkpoints(&[a(0, b"x"), a(1, b"y")]).unwrap();
        s.save_checkpoint(&a(1, b"z")).unwrap();
        assert_eq!(held(s.checkpoints().unwrap()), [a(0, b"x"), a(1, b"z")]);
        s.save_checkpoints(&[SavedShard {
            shard: 0,
            shards: 1,
            data: b"w".to_vec(),
            file: None,
        }])
        .unwrap();
        drop(s);
        let s = reopen(dir.path(), 10);
        assert_eq!(
            held(s.checkpoints().unwrap()),
            [SavedShard {
                shard: 0,
                shards: 1,
                data: b"w".to_vec(),
                file: None,
            }]
        );
    }
}
