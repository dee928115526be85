//! The CEP shard actor: one per arbiter (thread); owns the engines of its share of the groups.
//!
//! Events arrive through a bounded tokio channel (fed by the ingest side, see `ingest.rs`)
//! turned into an actor stream; control messages (reload, stats) through the actor's own
//! bounded mailbox. An interval moves every engine's clock to the wall clock, which fires
//! absences. Alerts go to the alert sink.
//!
//! A shard runs one [`Engine`] over all the rules, configured with its partition of the
//! (rule, group) space: it receives the events that concern a group it owns and ignores the
//! groups it does not own (see `route.rs`), and work is shared between its rules.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll};

use actix::prelude::*;
use cepheus_core::alert::Alert;
use cepheus_core::engine::{Checkpoint, Engine, RuleStats};
use cepheus_core::event::Event;
use cepheus_core::rules::ir::RuleSet;
use cepheus_core::time::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::journal::{Journal, JournalStats};
use super::queue::{QueueProbe, Queued};

use super::sink::{AlertSink, Alerts};
use crate::flow::live::wall_clock;

/// A batch of events for one shard, in arrival order (shared when several shards get one).
pub type Batch = Vec<Arc<Event>>;

/// A bounded channel's receiving end as a `Stream` (for `ctx.add_stream`).
pub struct RxStream<T>(pub mpsc::Receiver<T>);

impl<T> futures_core::Stream for RxStream<T> {
    type Item = T;
    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<T>> {
        self.get_mut().0.poll_recv(cx)
    }
}

/// Swap in a new rule set (unchanged rules keep their state), the reload's number beside it
/// ([`Shard::generation`]). Answers the rules whose state did not go on, and why
/// ([`Engine::reload`]).
#[derive(Message)]
#[rtype(result = "Vec<(String, cepheus_core::alert::Reason)>")]
pub struct Reload(pub RuleSet, pub u64);

/// Ask for the shard's counters and per-rule stats.
#[derive(Message)]
#[rtype(result = "ShardStats")]
pub struct GetStats;

/// Retire a group by hand (`cepheus groups forget RULE KEY`): the key as text, its values in
/// `group_by` order, comma-separated. Answers whether this shard held the group (its open
/// alert, if any, is resolved with reason `forgotten`) and what it knows of the rule.
#[derive(Message)]
#[rtype(result = "ForgetOutcome")]
pub struct ForgetGroup {
    /// The rule's name.
    pub rule: String,
    /// The group's key as text.
    pub key: String,
}

/// List a rule's groups (`cepheus groups list RULE`): at most `limit`, in key order, with
/// how many this shard holds and the rule's `group_by`; `None` when no rule has that name.
#[derive(Message)]
#[rtype(result = "Option<ListedGroups>")]
pub struct ListGroups {
    /// The rule's name.
    pub rule: String,
    /// The most groups to list.
    pub limit: usize,
}

/// A rule's `group_by` (`None`: no rule has that name): what a silence of the rule may name.
#[derive(Message)]
#[rtype(result = "Option<Vec<String>>")]
pub struct GroupByOf(pub String);

/// One shard's groups of a rule.
#[derive(Debug)]
pub struct ListedGroups {
    /// The rule's `group_by` names.
    pub group_by: Vec<String>,
    /// How many groups of the rule the shard holds.
    pub total: usize,
    /// The first `limit` of them, in key order.
    pub groups: Vec<cepheus_core::engine::GroupView>,
}

/// What one shard reports.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ShardStats {
    /// The shard's number.
    pub shard: usize,
    /// Rules it runs (a part of).
    pub rules: Vec<String>,
    /// Batches received.
    pub batches: u64,
    /// Events received.
    pub events: u64,
    /// Deliveries waiting in the shard's queue.
    pub queued_batches: usize,
    /// Events waiting in the shard's queue or being handled (at most `engine.queue_size`; a
    /// large one counts as several, see `engine.queue_bytes`).
    pub queued_events: usize,
    /// Per-rule stats of its engines.
    #[serde(skip)]
    pub rule_stats: Vec<RuleStats>,
    /// Late events, summed over its engines.
    pub late: u64,
    /// Events whose group key could not be formed, summed over its engines.
    pub keyless: u64,
    /// Events stamped after their arrival (a sender whose clock runs ahead), taken as
    /// arriving now by event-time rules.
    pub future: u64,
    /// Timer entries its engine holds (stale ones included): what its timers cost in memory,
    /// about 24 bytes each.
    pub timer_entries: usize,
    /// Groups its engine holds (how the keys spread over the shards).
    pub groups: usize,
    /// Times its engine panicked (a bug) and was rebuilt from the rules: the shard goes on,
    /// its groups' state (partial matches, deadlines) is lost, its open alerts are resolved
    /// with reason `engine_restarted`.
    pub engine_restarts: u64,
    /// Timers its engine dropped as stuck (re-armed for the instant they fired: a bug).
    pub stuck_timers: u64,
    /// Its event journal (`store.journal`), if it keeps one.
    pub journal: Option<JournalStats>,
    /// The list files its engine's rules read (every shard's rules are the same).
    #[serde(skip)]
    pub lists: Vec<crate::rulefiles::ListSummary>,
}

/// What a shard tells the agent's shutdown and watchdog of how it is going.
#[derive(Clone, Debug, Default)]
pub struct Liveness {
    /// Bumped once its queue has ended (shutdown); one counter for all shards.
    pub drained: Arc<AtomicUsize>,
    /// Bumped after each batch and tick it handled: the watchdog tells a busy shard (a long
    /// alert storm, a flood) from a stuck one.
    pub progress: Arc<std::sync::atomic::AtomicU64>,
    /// Set while it makes a saved state (seconds for a million groups): bounded work, which
    /// the watchdog counts as busy.
    pub saving: Arc<std::sync::atomic::AtomicBool>,
}

/// The CEP shard actor.
pub struct Shard {
    id: usize,
    count: usize,
    engine: Option<Engine>,
    sink: Addr<AlertSink>,
    tick: std::time::Duration,
    out: Vec<Alert>,
    stats: ShardStats,
    rx: Option<mpsc::Receiver<Queued>>,
    /// Senders still able to reach the queue (for `queued_batches`).
    probe: Option<QueueProbe>,
    live: Liveness,
    /// The rules it runs, to rebuild its engine after a panic.
    rules: RuleSet,
    /// What the shards said of their rules' budgets and late events (one for all shards).
    budgets: Arc<std::sync::Mutex<super::budget::BudgetWatch>>,
    /// When it reads its counters for them next.
    budget_due: super::budget::Due,
    /// How often its engine's state is saved (through the sink, into the store); `None`:
    /// never (no store).
    checkpoint_every: Option<std::time::Duration>,
    /// When it saves next.
    checkpoint_due: std::time::Instant,
    /// The reload whose rules it runs ([`Reload`]'s number; 0: those it started with): its
    /// alert batches carry it, so the sink tells old rules' alerts from new ones.
    generation: u64,
    /// Something happened since the last save (events, alerts, a reload): an idle shard
    /// writes its unchanged state only every [`IDLE_SAVE_EVERY`], for its clock.
    changed: bool,
    /// When the state was last saved (or the shard began).
    saved_at: std::time::Instant,
    /// The state saved by an earlier run, taken by the first engine it builds.
    resume: Option<Checkpoint>,
    /// Its event journal, if it keeps one.
    journal: Option<Journal>,
    /// The journal segment the saved state replays from (taken at start).
    replay_from: Option<u64>,
    /// Its own address, for the sink's word that a state is kept.
    me: Option<Addr<Shard>>,
    /// Ids of the alerts its replay sent on before the start-up reckoning (`adopt`).
    startup_ids: Vec<u64>,
    /// The journal segment a fresh engine's events begin at, when the last run began afresh
    /// and died before keeping a state (taken at start), and that engine's clock when it
    /// began, if the journal kept it.
    fresh_from: Option<(u64, Option<cepheus_core::time::Timestamp>)>,
    /// Its engine was built from a saved state and has not caught up with now yet
    /// ([`Shard::replay`] does).
    continuing: bool,
    /// The store its states are written aside in ([`Persistence::store`]).
    store: cepheus_store::Store,
    /// Its engine was begun afresh in this run (not from a saved state or a journal):
    /// everything it holds open, it made in this run.
    afresh: bool,
    /// Its queue ended (shutdown) and its last state was sent: its clock stands still, so
    /// no alert is made after that state that the stopping sink could not take (the next
    /// start makes it, from that state).
    stopped: bool,
    /// The wall clock at the last tick: a jump past [`STALL`] says the shard stood still.
    last_tick: Option<Timestamp>,
    /// After a stall: the instant its clock was held at, and until when it waits for the
    /// input that waited in the buffers meanwhile (see [`Shard::tick_now`]).
    catch_up: Option<(Timestamp, std::time::Instant)>,
    /// While it is not yet known whether a stall was the process stopped or this shard too
    /// busy to tick: when it was seen (see [`Shard::caught_up`]).
    stall_seen: Option<Timestamp>,
    /// The events taken while catching up, pushed in the order of their stamps when it
    /// ends: several sockets' backlogs are read one after another, and the engine's clock,
    /// which never goes back, must move through the stall in time order, not read order.
    held_back: Batch,
    /// The bytes of `held_back` (at most [`HELD_BACK_BYTES`]).
    held_back_bytes: usize,
}

/// The most events held back while catching up; past it they are pushed at once.
const HELD_BACK: usize = 100_000;

/// The most bytes of events held back while catching up (100,000 datagrams of 64 KiB would
/// be 6 GiB); past it they are pushed at once.
const HELD_BACK_BYTES: usize = 256 << 20;

/// A gap between two ticks longer than this (and than ten ticks) is a stall: the process
/// was stopped, its VM paused, or it swapped.
const STALL: std::time::Duration = std::time::Duration::from_secs(2);

/// How long after a stall the shard's clock waits for the input that waited meanwhile.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(2);

/// An arrival this far inside a stall (after its start, before it was seen) was received
/// during it: the process was not stopped (see [`Shard::caught_up`]).
const STALL_MARGIN: cepheus_core::time::Duration = cepheus_core::time::Duration::from_millis(500);

/// A shard's saved state as the store keeps it: its engine's checkpoint and the first journal
/// segment whose events it does not hold.
#[derive(Debug, Serialize, Deserialize)]
pub struct SavedState {
    /// The segment a restart replays from; `None`: nothing to replay (no journal, or a store
    /// written before the journal existed).
    pub journal: Option<u64>,
    /// The engine's state.
    pub engine: Checkpoint,
}

/// Why a stored state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadStateError {
    /// Its file could not be read.
    #[error(transparent)]
    Store(#[from] cepheus_store::StoreError),
    /// It is not a state this version reads.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

impl SavedState {
    /// Reads a stored state: this form, or the bare checkpoint that earlier versions stored.
    /// Decoded as it is read (a state of hundreds of MB is not held as text beside what is
    /// made of it).
    pub fn read(saved: &cepheus_store::SavedShard) -> Result<SavedState, ReadStateError> {
        match serde_json::from_reader(saved.reader()?) {
            Ok(s) => Ok(s),
            Err(e) => serde_json::from_reader::<_, Checkpoint>(saved.reader()?)
                .map(|engine| SavedState {
                    journal: None,
                    engine,
                })
                .map_err(|_| ReadStateError::Json(e)),
        }
    }
}

/// The sink's word that a state a shard sent is kept: the journal's segments before
/// `journal` may go.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StateKept {
    /// The segment that state replays from.
    pub journal: u64,
}

/// Alert changes a replay holds before it sends them on to the sink.
const REPLAY_FLUSH: usize = 10_000;

/// How far ahead of the wall clock a saved state's clock may be and still be continued.
const CLOCK_AHEAD_SECS: i64 = 60;

/// Where a shard's state is saved and what it resumes from.
pub struct Persistence {
    /// How often the state is saved; `None`: never.
    pub every: Option<std::time::Duration>,
    /// The state an earlier run saved for this shard.
    pub resume: Option<SavedState>,
    /// The shard's event journal, if it keeps one.
    pub journal: Option<Journal>,
    /// The store its states go to: each is written to a file there as it is made
    /// ([`cepheus_store::Store::state_aside`]), not held as text.
    pub store: cepheus_store::Store,
}

impl Shard {
    /// A shard running `rules`, reading batches from `rx`, sending alerts to `sink`; it says
    /// how it goes in `live`.
    pub fn new(
        id: usize,
        count: usize,
        rules: &RuleSet,
        rx: mpsc::Receiver<Queued>,
        probe: QueueProbe,
        sink: Addr<AlertSink>,
        tick: std::time::Duration,
        live: Liveness,
        budgets: Arc<std::sync::Mutex<super::budget::BudgetWatch>>,
        persistence: Persistence,
    ) -> Shard {
        let mut s = Shard {
            id,
            count,
            engine: None,
            sink,
            tick,
            out: Vec::new(),
            stats: ShardStats {
                shard: id,
                ..ShardStats::default()
            },
            rx: Some(rx),
            probe: Some(probe),
            live,
            rules: RuleSet::default(), // `install` keeps them
            budgets,
            budget_due: super::budget::Due::default(),
            checkpoint_every: persistence.every,
            // The first save at once (its first tick): the state it begins or continues with,
            // which the journal's events then follow.
            checkpoint_due: std::time::Instant::now(),
            saved_at: std::time::Instant::now(),
            generation: 0,
            changed: true,
            replay_from: persistence.resume.as_ref().and_then(|r| r.journal),
            // No saved state, but a journal begun with a fresh engine that died before its
            // first state was kept: that fresh engine is continued, from its journal.
            fresh_from: match (&persistence.resume, &persistence.journal) {
                (None, Some(j)) => j.fresh_mark(),
                _ => None,
            },
            resume: persistence.resume.map(|r| r.engine),
            journal: persistence.journal,
            me: None,
            startup_ids: Vec::new(),
            continuing: false,
            store: persistence.store,
            afresh: false,
            stopped: false,
            last_tick: None,
            catch_up: None,
            stall_seen: None,
            held_back: Vec::new(),
            held_back_bytes: 0,
        };
        s.install(rules);
        s.replay();
        // What its engine holds, before the alerts it made at start (its outages).
        s.adopt();
        s.flush();
        // What the restored engine counted (refused groups, late events) was said by the run
        // that counted it.
        if let Some(e) = s.engine.as_ref() {
            (s.budgets.lock())
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .baseline(s.id, s.count, e.budget_counters());
        }
        s
    }

    /// At start, when it continued from a saved state (or from the fresh engine the last run
    /// began and died before saving): replays the events journalled after it, then marks the
    /// time since the last of them as the outage (deadlines passed since fire with reason
    /// `outage`). When it begins afresh, the journal is deleted (nothing of it is continued)
    /// and marked as following a fresh engine.
    fn replay(&mut self) {
        let from = self.replay_from.take();
        let continuing = std::mem::take(&mut self.continuing);
        self.afresh = !continuing;
        self.replay_journal(continuing, from);
        self.drop_spent_journal();
    }

    /// A journal kept only to be replayed (`store.journal` turned off) goes, folder and all,
    /// once no segment is left (a saved state holds them all).
    fn drop_spent_journal(&mut self) {
        if self
            .journal
            .as_ref()
            .is_some_and(|j| j.is_replay_only() && j.is_empty())
            && let Some(j) = self.journal.take()
        {
            j.delete();
        }
    }

    fn replay_journal(&mut self, continuing: bool, from: Option<u64>) {
        if !continuing {
            if let Some(j) = self.journal.as_mut() {
                j.clear();
                if !j.is_replay_only() {
                    j.mark_fresh(self.engine.as_ref().and_then(Engine::clock));
                }
            }
            return;
        }
        match (self.journal.take(), from) {
            (Some(mut journal), Some(from)) => {
                let started = std::time::Instant::now();
                let r = journal.replay(from, |b| {
                    self.guarded("replay", |e, out| e.push_batch(b, out));
                    // What the replay fires goes on to the sink as it comes (so a long replay
                    // holds no more than this many), its ids kept for the start-up reckoning.
                    if self.out.len() >= REPLAY_FLUSH {
                        self.startup_ids.extend(self.out.iter().map(|a| a.id().0));
                        self.flush();
                    }
                });
                // What this run appends comes after what the state it continues names.
                journal.number_from(from);
                self.journal = Some(journal);
                if r.events > 0 || r.cut > 0 {
                    tracing::info!(
                        shard = self.id,
                        events = r.events,
                        segments = r.segments,
                        cut = r.cut,
                        alert_changes = self.out.len(),
                        ms = started.elapsed().as_millis() as u64,
                        "replayed the events journalled after the saved state"
                    );
                }
            }
            // A state saved without a journal (or by a version before it): what is journalled
            // is not its continuation.
            (Some(mut journal), None) => {
                journal.clear();
                self.journal = Some(journal);
            }
            (None, _) => {}
        }
        self.guarded("start", |e, out| {
            e.mark_outage();
            e.advance_to(wall_clock(), out);
        });
    }

    /// Tells the sink which alerts this shard's engine, as first built, holds firing (a copy
    /// of it resolves them all, and is dropped), so that it can resolve the store's firing
    /// alerts that no engine holds any more.
    fn adopt(&mut self) {
        if self.checkpoint_every.is_none() {
            return;
        }
        let mut ids = Vec::new();
        // An engine begun afresh holds open only what it made in this run (in `self.out` and
        // `startup_ids`, below). One continued lists its own, with no copy of itself (a
        // checkpoint and a restored engine, as large as the engine: at a restart of a million
        // groups that copy was 1.2 GB, the restart's peak but for the first save).
        if let Some(e) = self.engine.as_mut().filter(|_| !self.afresh) {
            ids = e.open_alert_ids();
        }
        // The alerts it made in catching up to now (replayed, outages, episodes ended
        // meanwhile) are its own too: the sink gets them right after (or had them already).
        ids.append(&mut self.startup_ids);
        ids.extend(self.out.iter().map(|a| a.id().0));
        let episodic = self
            .rules
            .rules
            .iter()
            .filter(|r| cepheus_core::engine::plan::plan(r).is_ok_and(|p| p.alerts_resolve()))
            .map(|r| r.name.clone())
            .collect();
        let running = self.rules.rules.iter().map(|r| r.name.clone()).collect();
        // (`do_send`: once, at start, and the reckoning waits for every shard's.)
        self.sink.do_send(super::sink::Adopt {
            shard: self.id,
            ids,
            episodic,
            running,
        });
    }

    /// Runs `f` on the engine; a panic in it (a bug: no input should cause one) is caught,
    /// logged and counted, and the engine rebuilt from the rules, so one bad delivery does not
    /// take the shard, and every group it owns, down for good.
    fn guarded(&mut self, what: &str, f: impl FnOnce(&mut Engine, &mut Vec<Alert>)) {
        let Some(e) = self.engine.as_mut() else {
            return;
        };
        let out = &mut self.out;
        // (Alerts the failed call made before the panic are whole, and kept: those left open
        // are resolved with the rest below.)
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(e, out))).is_err();
        if caught {
            self.stats.engine_restarts += 1;
            tracing::error!(
                shard = self.id,
                during = what,
                "the engine panicked (a bug, please report it with the message above); rebuilt from the rules, the state of this shard's groups is lost"
            );
            self.retire_engine();
            let rules = std::mem::take(&mut self.rules);
            self.install(&rules);
        }
    }

    /// Drops an engine that panicked, first resolving its open alerts with reason
    /// `engine_restarted` (nothing else would ever resolve them; a silence that goes on fires
    /// again from the new engine). If that panics too, they are left as they are.
    fn retire_engine(&mut self) {
        let Some(mut e) = self.engine.take() else {
            return;
        };
        let mut resolved = Vec::new();
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e.resolve_all(cepheus_core::alert::Reason::EngineRestarted, &mut resolved)
        }))
        .is_ok();
        if ok {
            self.out.append(&mut resolved);
        } else {
            tracing::error!(
                shard = self.id,
                "its open alerts could not be resolved: they stay firing until resolved by hand"
            );
        }
    }

    /// Runs `rules`: the engine reloads them, else one is built (from the saved state at
    /// start-up). Returns the rules a reload retired, and why.
    fn install(&mut self, rules: &RuleSet) -> Vec<(String, cepheus_core::alert::Reason)> {
        self.changed = true;
        let old = std::mem::replace(&mut self.rules, rules.clone());
        let plan = super::route::RoutePlan::new(rules, self.count);
        if let Some(engine) = &mut self.engine {
            match engine.reload(rules, &mut self.out) {
                Ok(retired) => {
                    self.stats.rules = plan.shard_rule_names(self.id);
                    return retired;
                }
                Err(err) => {
                    tracing::error!(shard = self.id, error = %err, "reload failed; rules restarted")
                }
            }
            // The engine built below holds none of its open alerts: resolved
            // (`engine_restarted`), and the changed and removed rules named.
            self.retire_engine();
            self.build_engine(rules);
            return retired_between(&old, rules);
        }
        self.build_engine(rules);
        Vec::new()
    }

    /// Builds the engine of `rules`: from the state an earlier run saved when there is one
    /// (start-up), else afresh.
    fn build_engine(&mut self, rules: &RuleSet) {
        let plan = super::route::RoutePlan::new(rules, self.count);
        // A saved state whose clock is ahead of this machine's (the clock was stepped back
        // since, or it came from elsewhere) would keep every absence blind until the clock
        // caught up with it (the engine's clock never goes back): begun afresh instead.
        let now = wall_clock();
        if let Some(cp) = &self.resume
            && let Some(clock) = cp.clock
            && clock > now.add(cepheus_core::time::Duration::from_secs(CLOCK_AHEAD_SECS))
        {
            tracing::warn!(
                shard = self.id,
                saved_clock = %clock.to_rfc3339(),
                now = %now.to_rfc3339(),
                "the saved state's clock is ahead of this machine's (was the clock stepped back?): starting afresh, or absences would stay blind until the clock catches up"
            );
            self.resume = None;
        }
        let built = match self.resume.take() {
            // The state an earlier run saved: its groups, deadlines and partial matches go
            // on; [`Shard::replay`] then feeds it what was journalled after it and moves it to
            // now (deadlines passed meanwhile fire then, with reason `outage`).
            // Rules added or changed while it was down begin monitoring now, as at start-up.
            Some(cp) => Engine::restore_retiring_at(
                rules,
                plan.shard_config(self.id),
                cp,
                false,
                Some(now),
            )
            .map(|(e, retired)| {
                    tracing::info!(shard = self.id, "continuing from the saved state");
                    self.continuing = true;
                    // Rules removed or changed while the agent was down: their kept alerts
                    // are resolved before anything this engine says.
                    if !retired.is_empty() {
                        self.sink.do_send(super::sink::Retire {
                            rules: retired,
                            time: wall_clock(),
                            reload: None,
                        });
                    }
                    e
                })
                .or_else(|err| {
                    self.continuing = false;
                    tracing::warn!(shard = self.id, error = %err, "cannot continue from the saved state; starting afresh");
                    Engine::new(rules, plan.shard_config(self.id))
                }),
            None => {
                let mut began = None;
                if let Some((k, at)) = self.fresh_from.take() {
                    tracing::info!(shard = self.id, "continuing the engine the last run began afresh, from its journal");
                    self.continuing = true;
                    self.replay_from = Some(k);
                    began = at;
                }
                // Begun when the dead engine began (its rules' monitoring, expected groups'
                // deadlines), not at the first event its journal holds.
                Engine::new(rules, plan.shard_config(self.id)).map(|mut e| {
                    if let Some(t) = began {
                        e.advance_to(t, &mut self.out);
                    }
                    e
                })
            }
        };
        match built {
            Ok(mut e) => {
                if !self.continuing {
                    e.advance_to(wall_clock(), &mut self.out);
                }
                self.engine = Some(e);
                self.stats.rules = plan.shard_rule_names(self.id);
            }
            Err(err) => {
                tracing::error!(shard = self.id, error = %err, "cannot build the shard's engine");
                self.engine = None;
                self.stats.rules.clear();
            }
        }
    }

    /// Moves the engine's clock to the wall clock (deadlines fire), except after a stall
    /// (the process stopped, its VM paused): then the clock waits at the stall's start for
    /// up to [`CATCH_UP`], while the messages that waited in the sockets' buffers are taken
    /// at their senders' stamps ([`Shard::caught_up`]), so a heartbeat sent during the stall
    /// counts when it was sent, not after every host's deadline has fired.
    fn tick_now(&mut self) {
        let now = wall_clock();
        self.note_stall(now);
        self.last_tick = Some(now);
        match self.catch_up {
            Some((_, until)) if std::time::Instant::now() < until => {
                self.flush();
                self.live.progress.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Some(_) => {
                self.catch_up = None;
                self.stall_seen = None;
                self.release_held_back();
            }
            None => {}
        }
        self.guarded("tick", |e, out| e.advance_to(now, out));
        self.flush();
        self.live.progress.fetch_add(1, Ordering::Relaxed);
        let now = std::time::Instant::now();
        if let Some(e) = self.engine.as_ref().filter(|_| self.budget_due.due(now)) {
            // (A shard that panicked while holding the lock leaves the watch as it was.)
            let said = (self.budgets.lock())
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .check(self.id, self.count, e.budget_counters(), now);
            for w in said {
                // (Totals over all the shards: no one shard to name.)
                tracing::warn!(rule = %w.rules, "rule {}: {}", w.rules, w.text);
            }
        }
        self.save_state(false);
    }

    /// Pushes the events held back while catching up, in the order of their arrivals (their
    /// senders' stamps); ties keep the order they were read in.
    fn release_held_back(&mut self) {
        if self.held_back.is_empty() {
            return;
        }
        self.held_back_bytes = 0;
        let mut held = std::mem::take(&mut self.held_back);
        held.sort_by_key(|ev| ev.arrival);
        self.guarded("events", |e, out| {
            let events = held
                .into_iter()
                .map(|ev| Arc::try_unwrap(ev).unwrap_or_else(|a| (*a).clone()));
            e.push_batch(events, out);
        });
        self.flush();
    }

    /// Begins catching up when the wall clock is past the last tick by more than a stall
    /// (checked at each tick and each batch: after a pause, the input that waited may reach
    /// the shard before its first tick does).
    fn note_stall(&mut self, now: Timestamp) {
        let stall = STALL.max(self.tick.saturating_mul(10));
        if let Some(prev) = self.last_tick
            && self.catch_up.is_none()
            && now.since(prev).0 > i64::try_from(stall.as_nanos()).unwrap_or(i64::MAX)
        {
            tracing::warn!(
                shard = self.id,
                stalled_ms = now.since(prev).0 / 1_000_000,
                "the shard kept no time for over 2 s (the process stopped, its VM paused, it swapped, or it was too busy to tick): deadlines that fell meanwhile wait up to 2 s while the input that waited is read, at its senders' stamps"
            );
            self.catch_up = Some((prev, std::time::Instant::now() + CATCH_UP));
            self.stall_seen = Some(now);
        }
    }

    /// While catching up after a stall: each event arrives at its own stamp when that lies
    /// between the stall's start and its reading (a message sent during the stall), else at
    /// the stall's start; never later, so the clock moves through the stall as the senders
    /// saw it, and no deadline fires before the messages that came before it.
    ///
    /// Only after the process stood still: then nothing was received meanwhile (the input
    /// waited in the sockets and is stamped as it is read, after the stall). A shard merely
    /// too busy to tick (a flood) is told by its input: the listeners went on receiving,
    /// and stamped each message when it came, during the stall; those arrivals are right,
    /// and moved back to the stall's start they made the next deadlines fire early (a
    /// heartbeat every 4 s raised a 5 s absence). Its catch-up is called off.
    fn caught_up(&mut self, batch: &mut Batch) {
        self.note_stall(wall_clock());
        let Some((held, _)) = self.catch_up else {
            return;
        };
        if let Some(seen) = self.stall_seen {
            let during = |t: Timestamp| t > held.add(STALL_MARGIN) && t < seen.sub(STALL_MARGIN);
            // (Messages only: a flow's end is stamped with the flow table's deadline, which
            // may fall inside a pause; a message is stamped when a listener read it.)
            let received = |ev: &Arc<cepheus_core::event::Event>| {
                ev.source == cepheus_core::event::Source::Syslog
            };
            if batch.iter().any(|ev| received(ev) && during(ev.arrival)) {
                tracing::info!(
                    shard = self.id,
                    "the shard was too busy to tick, not stopped: its input keeps the times it came"
                );
                self.catch_up = None;
                self.stall_seen = None;
                // (As if it had ticked then: the same stall is not seen again.)
                self.last_tick = Some(seen);
                self.release_held_back();
                return;
            }
            if batch.iter().any(|ev| ev.arrival >= seen.sub(STALL_MARGIN)) {
                // Read after the stall, none during it: the process stood still.
                self.stall_seen = None;
            }
        }
        for ev in batch.iter_mut() {
            let at = if ev.time >= held && ev.time < ev.arrival {
                ev.time
            } else {
                held
            };
            if at != ev.arrival {
                Arc::make_mut(ev).arrival = at;
            }
        }
    }

    /// Sends the engine's state to the sink to keep, after the alerts it made so far (so the
    /// store never holds a state whose alerts it lacks), when `force` or when it is due.
    fn save_state(&mut self, force: bool) {
        let Some(every) = self.checkpoint_every else {
            return;
        };
        let now = std::time::Instant::now();
        if !force && now < self.checkpoint_due {
            return;
        }
        self.checkpoint_due = now + every;
        self.flush();
        // Partial matches past their window are let go first, with the events only they held:
        // neither kept in memory nor saved until each group's next event (a hostile-input audit
        // found a stopped flood of large lines saved, 1.9 GB a minute, long after its window).
        // Their going is a change: the smaller state is saved.
        if let Some(e) = self.engine.as_mut()
            && e.drop_expired()
        {
            self.changed = true;
        }
        // Idle, the state changes only in its clock: saved now and then all the same, so that
        // a restart after a crash finds it at most a minute old (the journal after it is
        // replayed; days old, a restart read days of journal).
        if !self.changed && !force && now.duration_since(self.saved_at) < idle_save_every() {
            return;
        }
        let Some(e) = &self.engine else {
            return;
        };
        // Events taken from now on go to a new segment: the state below holds every earlier one,
        // but those held back during a stall's catch-up, not in the engine yet: written again
        // into the new segment, so that a replay still feeds them.
        let journal = self.journal.as_mut().map(Journal::rotate);
        if let Some(j) = self.journal.as_mut() {
            j.append(&self.held_back);
        }
        self.live.saving.store(true, Ordering::SeqCst);
        let state = SavedState {
            journal,
            engine: e.checkpoint(),
        };
        let made = self.write_state(&state);
        drop(state);
        self.live.saving.store(false, Ordering::SeqCst);
        self.live.progress.fetch_add(1, Ordering::Relaxed);
        let saved = match made {
            Ok(saved) => saved,
            Err(err) => {
                tracing::error!(shard = self.id, error = %err, "cannot write the engine's state");
                return;
            }
        };
        // A state that takes long to make (a million groups: seconds) is made less often, so
        // that saving takes at most 1/SAVE_SHARE of the shard's time; the journal holds what
        // comes between.
        self.checkpoint_due = next_save(now, every, now.elapsed());
        let kept = journal.and_then(|j| Some((self.me.clone()?.recipient(), j)));
        match self.sink.try_send(super::sink::SaveCheckpoint(saved, kept)) {
            Ok(()) => {
                self.changed = false;
                self.saved_at = now;
            }
            Err(err) => {
                let why = err.to_string();
                // (What it was written to goes: the sink will not put it in place.)
                let super::sink::SaveCheckpoint(unsent, _) = err.into_inner();
                if let Some(f) = &unsent.file {
                    let _ = std::fs::remove_file(f);
                }
                // Tried again at the next tick, not a whole period later (a reload's or a
                // forget's state must not wait that long).
                self.checkpoint_due = std::time::Instant::now();
                tracing::warn!(shard = self.id, error = %why, "alert sink full: state not saved this time")
            }
        }
    }

    /// The state as the store keeps it: written to a file aside in the store as it is made
    /// (a state of hundreds of MB is not also held as text).
    fn write_state(&self, state: &SavedState) -> Result<cepheus_store::SavedShard, String> {
        let (shard, shards) = (self.id as u32, self.count as u32);
        let path = self.store.state_aside(shard).map_err(|e| e.to_string())?;
        let written = (|| -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
            f.write_all(&shards.to_be_bytes())?;
            serde_json::to_writer(&mut f, state)?;
            f.flush()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&path);
            return Err(format!("{}: {e}", path.display()));
        }
        Ok(cepheus_store::SavedShard {
            shard,
            shards,
            data: Vec::new(),
            file: Some(path),
        })
    }

    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        self.changed = true;
        let batch = std::mem::take(&mut self.out);
        let n = batch.len();
        if self.sink.try_send(Alerts(batch, self.generation)).is_err() {
            super::sink::note_dropped(self.id, n);
        }
    }
}

/// The rules of `old` that `new` does not run as they were (a reload whose engine could not
/// carry its state): `rule_removed` for a name gone, `rule_changed` for another meaning.
fn retired_between(old: &RuleSet, new: &RuleSet) -> Vec<(String, cepheus_core::alert::Reason)> {
    use cepheus_core::alert::Reason;
    let now: std::collections::HashMap<&str, String> = new
        .rules
        .iter()
        .map(|r| (r.name.as_str(), r.canonical()))
        .collect();
    old.rules
        .iter()
        .filter_map(|r| match now.get(r.name.as_str()) {
            None => Some((r.name.clone(), Reason::RuleRemoved)),
            Some(c) if *c != r.canonical() => Some((r.name.clone(), Reason::RuleChanged)),
            Some(_) => None,
        })
        .collect()
}

/// How often a shard with nothing new saves its state anyway (its clock: see
/// [`Shard::save_state`]).
const IDLE_SAVE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// [`IDLE_SAVE_EVERY`], or in debug builds `CEPHEUS_TEST_IDLE_SAVE_MS` (tests).
fn idle_save_every() -> std::time::Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("CEPHEUS_TEST_IDLE_SAVE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        return std::time::Duration::from_millis(ms);
    }
    IDLE_SAVE_EVERY
}

/// A shard spends at most one part in this many of its time making saved states.
const SAVE_SHARE: u32 = 20;

/// When the state is next saved, after one begun at `began` that took `took` to make:
/// `every` later, or later still for a state that is long to make.
fn next_save(
    began: std::time::Instant,
    every: std::time::Duration,
    took: std::time::Duration,
) -> std::time::Instant {
    began + every.max(took.saturating_mul(SAVE_SHARE))
}

impl Actor for Shard {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(64);
        self.me = Some(ctx.address());
        if let Some(rx) = self.rx.take() {
            ctx.add_stream(RxStream(rx));
        }
        ctx.run_interval(self.tick, |act, _| {
            if !act.stopped {
                act.tick_now();
            }
        });
        // (What a burst left in this thread's heap, given back once the shard is quiet.)
        ctx.run_interval(super::mem::EVERY, |_, _| super::mem::collect());
        self.tick_now();
    }
}

impl StreamHandler<Queued> for Shard {
    fn handle(&mut self, queued: Queued, _: &mut Self::Context) {
        // The room goes back to the queue once the batch is handled (end of scope).
        let Queued {
            mut batch,
            room: _room,
            waited: _waited,
        } = queued;
        self.stats.batches += 1;
        self.stats.events += batch.len() as u64;
        self.changed = true;
        #[cfg(debug_assertions)]
        let inject = fault_injected(&batch);
        // Debug builds only (tests): an event with this app stalls the shard for 2 s (or
        // `CEPHEUS_FAULT_STALL_MS`), as a stuck engine would (the watchdog must stop pinging).
        #[cfg(debug_assertions)]
        if batch_has_app(&batch, "CEPHEUS_FAULT_STALL_APP") {
            let ms = std::env::var("CEPHEUS_FAULT_STALL_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(2000);
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        self.caught_up(&mut batch);
        // Journalled before the engine sees it: a crash from here on loses none of it; with
        // the arrivals the engine will take them at, which its ticks may have moved on.
        if let Some(j) = self.journal.as_mut() {
            at_clock(&mut batch, self.engine.as_ref().and_then(Engine::clock));
            j.append(&batch);
        }
        if self.catch_up.is_some() {
            self.held_back_bytes += batch.iter().map(|e| e.heap_bytes()).sum::<usize>();
            self.held_back.append(&mut batch);
            if self.held_back.len() >= HELD_BACK || self.held_back_bytes >= HELD_BACK_BYTES {
                self.release_held_back();
            }
            self.live.progress.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.guarded("events", |e, out| {
            #[cfg(debug_assertions)]
            if inject {
                panic!("fault injected by CEPHEUS_FAULT_PANIC_APP");
            }
            let events = batch
                .into_iter()
                .map(|ev| Arc::try_unwrap(ev).unwrap_or_else(|a| (*a).clone()));
            e.push_batch(events, out);
        });
        self.flush();
        self.live.progress.fetch_add(1, Ordering::Relaxed);
    }

    fn finished(&mut self, _: &mut Self::Context) {
        // The ingest side is gone (shutdown): everything queued has been handled.
        self.catch_up = None;
        self.stall_seen = None;
        self.release_held_back();
        self.tick_now();
        self.save_state(true);
        self.stopped = true;
        self.probe = None;
        self.live.drained.fetch_add(1, Ordering::SeqCst);
    }
}

/// Raises each event's arrival to the instant the engine will take it at: its clock (moved
/// on by the ticks since the event was stamped) or a later arrival before it in the batch,
/// as `Engine::push` does. Journalled so, a replay (which has no ticks) takes each event at
/// the same instant as the live run did, and decides the same deadlines (a heartbeat queued
/// 0.8 ms across a tick moved its silence's deadline by 0.8 ms, which made a new alert id).
fn at_clock(batch: &mut Batch, clock: Option<Timestamp>) {
    let Some(mut c) = clock else {
        return;
    };
    for ev in batch.iter_mut() {
        if ev.arrival < c {
            Arc::make_mut(ev).arrival = c;
        }
        c = c.max(ev.arrival);
    }
}

/// Debug builds only (tests): a batch holding an event whose `app` is the value of
/// `CEPHEUS_FAULT_PANIC_APP` makes the engine panic, to test that a shard survives one.
#[cfg(debug_assertions)]
fn fault_injected(batch: &Batch) -> bool {
    batch_has_app(batch, "CEPHEUS_FAULT_PANIC_APP")
}

/// Debug builds only (tests): whether a batch holds an event whose `app` is the value of the
/// environment variable `var`.
#[cfg(debug_assertions)]
fn batch_has_app(batch: &Batch, var: &str) -> bool {
    let Ok(app) = std::env::var(var) else {
        return false;
    };
    batch.iter().any(|ev| {
        ev.get(cepheus_core::event::Field::App)
            .and_then(|v| v.as_str())
            == Some(app.as_str())
    })
}

/// A shard's answer to [`ForgetGroup`].
#[derive(Debug, Default)]
pub struct ForgetOutcome {
    /// It held the group and retired it.
    pub forgotten: bool,
    /// The rule's `group_by` names; `None`: no rule has that name.
    pub group_by: Option<Vec<String>>,
    /// The rules that share its groups (itself included).
    pub sharers: Vec<String>,
    /// The group retired was watched from the start (the rule's `expect`, or an ungrouped
    /// absence's one group): unwatched until the next reload.
    pub expected: bool,
}

impl Shard {
    /// The `group_by` of the rule named `rule`, if this shard's rules have one so named.
    fn group_by_of(&self, rule: &str) -> Option<Vec<String>> {
        self.rules
            .rules
            .iter()
            .find(|r| r.name == rule)
            .map(|r| r.group_by.clone())
    }
}

/// Every rule's `group_by`: what a silence of no rule may name.
#[derive(Message)]
#[rtype(result = "Vec<Vec<String>>")]
pub struct GroupBys;

impl Handler<GroupBys> for Shard {
    type Result = MessageResult<GroupBys>;

    fn handle(&mut self, _: GroupBys, _: &mut Self::Context) -> Self::Result {
        MessageResult(
            self.rules
                .rules
                .iter()
                .map(|r| r.group_by.clone())
                .collect(),
        )
    }
}

impl Handler<GroupByOf> for Shard {
    type Result = MessageResult<GroupByOf>;

    fn handle(&mut self, msg: GroupByOf, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.group_by_of(&msg.0))
    }
}

impl Handler<ListGroups> for Shard {
    type Result = MessageResult<ListGroups>;

    fn handle(&mut self, msg: ListGroups, _: &mut Self::Context) -> Self::Result {
        let group_by = self.group_by_of(&msg.rule);
        let listed = group_by.and_then(|group_by| {
            let (total, groups) = self.engine.as_ref()?.list_groups(&msg.rule, msg.limit)?;
            Some(ListedGroups {
                group_by,
                total,
                groups,
            })
        });
        MessageResult(listed)
    }
}

impl Handler<ForgetGroup> for Shard {
    type Result = MessageResult<ForgetGroup>;

    fn handle(&mut self, msg: ForgetGroup, _: &mut Self::Context) -> Self::Result {
        let group_by = self.group_by_of(&msg.rule);
        let mut forgotten = false;
        let mut expected = false;
        self.changed = true;
        self.guarded("forget", |e, out| {
            // Time has moved since the last tick: what was due fires first.
            e.advance_to(wall_clock(), out);
            forgotten = match e.find_group(&msg.rule, &msg.key) {
                Some(key) => {
                    expected = e.group_expected(&msg.rule, &key) == Some(true);
                    e.forget_group(&msg.rule, &key, out)
                }
                None => false,
            };
        });
        let expected = forgotten && expected;
        self.flush();
        if forgotten {
            // Kept at once, not at the next save: a crash in between would bring the group
            // (and its deadline) back from the last saved state, with the journal's events.
            self.save_state(true);
        }
        let sharers = (self.engine.as_ref())
            .and_then(|e| e.group_sharers(&msg.rule))
            .map(|(_, rules)| rules)
            .unwrap_or_default();
        MessageResult(ForgetOutcome {
            forgotten,
            group_by,
            sharers,
            expected,
        })
    }
}

/// The watchdog's probe: the shard answers once the alert sink it feeds answered too, so a
/// shard stuck in its engine, or a sink stuck in a write, keeps the probe from coming back.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct Probe(pub Option<Arc<std::sync::atomic::AtomicBool>>);

impl Handler<Probe> for Shard {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, probe: Probe, _: &mut Self::Context) -> Self::Result {
        // Past this shard's mailbox: from here the probe waits on the sink.
        if let Some(entered) = &probe.0 {
            entered.store(true, Ordering::SeqCst);
        }
        let sink = self.sink.clone();
        Box::pin(async move { sink.send(super::sink::Probe).await.is_ok() })
    }
}

impl Handler<Reload> for Shard {
    type Result = MessageResult<Reload>;

    fn handle(&mut self, msg: Reload, _: &mut Self::Context) -> Self::Result {
        // Time has moved since the last tick: what was due fires first, and the reload's
        // changes (`rule_changed`, `rule_removed`) are stamped now, not at that tick.
        self.guarded("tick", |e, out| e.advance_to(wall_clock(), out));
        // What the old rules made goes in a batch of the old generation.
        self.flush();
        let old = self.rules.clone();
        let installed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.install(&msg.0)));
        let caught = installed.is_err();
        let mut retired = installed.unwrap_or_default();
        if caught {
            // A reload that panicked may have resolved some alerts (`rule_changed`) already:
            // dropped, or they would be resolved twice.
            self.out.clear();
            self.stats.engine_restarts += 1;
            tracing::error!(
                shard = self.id,
                "the engine panicked while reloading (a bug, please report it with the message above); rebuilt from the new rules, the state of this shard's groups is lost"
            );
            self.retire_engine();
            self.install(&msg.0);
            retired = retired_between(&old, &msg.0);
        }
        // From here on, what it makes is the new rules' (a rule that joined a state sees its
        // open alerts begin now): the sink's resolves of the retired rules' alerts that no
        // engine held leave those alone.
        self.generation = msg.1;
        self.flush();
        // Saved at once: a replay after a crash must not feed events from before the reload
        // to rules that began at it (the journal does not record reloads).
        self.save_state(true);
        MessageResult(retired)
    }
}

impl Handler<GetStats> for Shard {
    type Result = MessageResult<GetStats>;

    fn handle(&mut self, _: GetStats, _: &mut Self::Context) -> Self::Result {
        let mut s = self.stats.clone();
        (s.queued_batches, s.queued_events) =
            self.probe.as_ref().map_or((0, 0), QueueProbe::queued);
        s.late = 0;
        s.keyless = 0;
        s.future = 0;
        s.stuck_timers = 0;
        s.timer_entries = 0;
        s.groups = 0;
        if let Some(e) = &self.engine {
            s.groups = e.groups();
            s.rule_stats = e.stats();
            s.late = e.counters().late;
            s.keyless = e.counters().keyless;
            s.future = e.counters().future;
            s.stuck_timers = e.counters().stuck_timers;
            s.timer_entries = e.timer_entries();
            s.lists = crate::rulefiles::lists(e.rules());
        }
        s.journal = self.journal.as_ref().map(Journal::stats);
        MessageResult(s)
    }
}

impl Handler<StateKept> for Shard {
    type Result = ();

    fn handle(&mut self, msg: StateKept, _: &mut Self::Context) {
        if let Some(j) = self.journal.as_mut() {
            j.release_before(msg.journal);
            j.clear_fresh();
        }
        self.drop_spent_journal();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::time::{Duration, Instant};

    /// A reload whose engine could not carry its state names the rules it no longer runs as
    /// they were: removed, changed (another meaning); not one whose severity alone changed.
    #[test]
    fn a_failed_reload_names_the_changed_and_removed_rules() {
        let set = |text: &str| {
            cepheus_core::rules::compile_str("r.toml", text)
                .rules
                .unwrap()
        };
        let rule = |name: &str, severity: &str, window: &str| {
            format!(
                "[[rule]]\nname = \"{name}\"\nseverity = \"{severity}\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"x\"'\npattern = \"absent(a) for {window}\"\n"
            )
        };
        let old = set(&[
            rule("same", "low", "1m"),
            rule("sev", "low", "1m"),
            rule("win", "low", "1m"),
            rule("gone", "low", "1m"),
        ]
        .concat());
        let new = set(&[
            rule("same", "low", "1m"),
            rule("sev", "high", "1m"),
            rule("win", "low", "2m"),
            rule("added", "low", "1m"),
        ]
        .concat());
        let mut got = retired_between(&old, &new);
        got.sort_by(|a, b| a.0.cmp(&b.0));
        use cepheus_core::alert::Reason;
        assert_eq!(
            got,
            [
                ("gone".to_string(), Reason::RuleRemoved),
                ("win".to_string(), Reason::RuleChanged)
            ]
        );
    }

    /// A heartbeat stamped just before a tick and taken just after it: replayed from the
    /// journal (no ticks), it must give the live run's deadline and alert id.
    #[test]
    fn journalled_arrivals_replay_at_the_live_instants() {
        use cepheus_core::engine::EngineConfig;
        use cepheus_core::event::{Field, Source, Value};
        let rules = cepheus_core::rules::compile_str(
            "hb.toml",
            "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
             events.hb = 'syslog'\npattern = \"absent(hb) for 10s\"\n",
        )
        .rules
        .expect("rules");
        let ms = |n: i64| Timestamp(n * 1_000_000);
        let hb = |arrival: Timestamp| {
            Arc::new(
                Event::new(Source::Syslog, arrival, arrival).with(Field::Host, Value::str("web-1")),
            )
        };
        let fired = |e: &mut Engine, out: &mut Vec<Alert>| {
            e.advance_to(ms(30_000), out);
            out.iter()
                .map(|a| (a.id().to_string(), a.time))
                .collect::<Vec<_>>()
        };
        let run = |batch: &Batch, tick: bool| {
            let mut e = Engine::new(&rules, EngineConfig::default()).expect("engine");
            let mut out = Vec::new();
            e.push((*hb(ms(1_000))).clone(), &mut out);
            if tick {
                e.advance_to(ms(5_000), &mut out);
            }
            e.push_batch(batch.iter().map(|ev| (**ev).clone()), &mut out);
            fired(&mut e, &mut out)
        };
        // Stamped 0.8 ms before the tick at 5 s, taken after it: the live run's silence
        // starts at the tick.
        let batch: Batch = vec![hb(Timestamp(ms(5_000).0 - 800_000))];
        let live = run(&batch, true);
        assert_eq!(live.len(), 1, "{live:?}");
        assert_eq!(live[0].1, ms(15_000));
        // Journalled as stamped, the replay fired 0.8 ms earlier, under another id.
        assert_ne!(run(&batch, false), live);
        let mut settled = batch.clone();
        at_clock(&mut settled, Some(ms(5_000)));
        assert_eq!(run(&settled, false), live);
        // The clock or a later arrival before it in the batch, whichever is later.
        let mut both = vec![hb(ms(6_000)), hb(ms(5_500)), hb(ms(7_000))];
        at_clock(&mut both, Some(ms(5_000)));
        let arrivals: Vec<Timestamp> = both.iter().map(|e| e.arrival).collect();
        assert_eq!(arrivals, [ms(6_000), ms(6_000), ms(7_000)]);
    }

    #[test]
    fn a_state_long_to_make_is_saved_less_often() {
        let t = Instant::now();
        let every = Duration::from_secs(5);
        assert_eq!(next_save(t, every, Duration::from_millis(10)), t + every);
        // Two seconds to make: at most a twentieth of the shard's time, so every 40 s.
        assert_eq!(
            next_save(t, every, Duration::from_secs(2)),
            t + Duration::from_secs(40)
        );
    }
}
