//! The CEP shard actor: one per arbiter (thread); owns the engines of its share of the groups.
//!
//! Events arrive through a bounded tokio channel (fed by the ingest side, see `ingest.rs`)
//! turned into an actor stream; control messages (reload, stats) through the actor's own
//! bounded mailbox. An interval moves every engine's clock to the wall clock, which fires
//! absences. Alerts go to the alert sink.
//!
//! A shard runs one [`Engine`] per rule it owns a part of: an event reaches the engine of
//! exactly the rules whose group (for that event) this shard owns, so no rule evaluates an
//! event for a group another shard owns (see `route.rs`).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll};

use actix::prelude::*;
use cepheus_core::alert::Alert;
use cepheus_core::engine::{Engine, EngineConfig, RuleStats};
use cepheus_core::event::Event;
use cepheus_core::rules::ir::{Rule, RuleSet};
use cepheus_core::time::Timestamp;
use serde::Serialize;
use tokio::sync::mpsc;

use super::sink::{AlertSink, Alerts};
use crate::flow::live::wall_clock;

/// One delivery: an event for one rule.
#[derive(Debug)]
pub struct Routed {
    /// The rule's name.
    pub rule: Arc<str>,
    /// The event (shared when it goes to several rules).
    pub ev: Arc<Event>,
}

/// A batch of deliveries to one shard, in arrival order.
pub type Batch = Vec<Routed>;

/// A bounded channel's receiving end as a `Stream` (for `ctx.add_stream`).
pub struct RxStream<T>(pub mpsc::Receiver<T>);

impl<T> futures_core::Stream for RxStream<T> {
    type Item = T;
    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<T>> {
        self.get_mut().0.poll_recv(cx)
    }
}

/// Swap in a new share of the rules (engines of unchanged rules keep their state).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reload(pub RuleSet);

/// Ask for the shard's counters and per-rule stats.
#[derive(Message)]
#[rtype(result = "ShardStats")]
pub struct GetStats;

/// What one shard reports.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ShardStats {
    /// The shard's number.
    pub shard: usize,
    /// Rules it runs (a part of).
    pub rules: Vec<String>,
    /// Batches received.
    pub batches: u64,
    /// Deliveries received ((event, rule) pairs).
    pub events: u64,
    /// Deliveries for a rule the shard does not run (during a reload).
    pub unknown_rule: u64,
    /// Deliveries waiting in the shard's queue.
    pub queued_batches: usize,
    /// Per-rule stats of its engines.
    #[serde(skip)]
    pub rule_stats: Vec<RuleStats>,
    /// Late events, summed over its engines.
    pub late: u64,
    /// Events whose group key could not be formed, summed over its engines.
    pub keyless: u64,
}

struct RuleEngine {
    name: Arc<str>,
    canonical: String,
    engine: Engine,
}

/// The CEP shard actor.
pub struct Shard {
    id: usize,
    engines: Vec<RuleEngine>,
    by_name: HashMap<Arc<str>, usize>,
    sink: Addr<AlertSink>,
    tick: std::time::Duration,
    out: Vec<Alert>,
    stats: ShardStats,
    rx: Option<mpsc::Receiver<Batch>>,
    /// Senders still able to reach the queue (for `queued_batches`).
    probe: Option<mpsc::WeakSender<Batch>>,
    drained: Arc<AtomicUsize>,
}

fn build(rule: &Arc<Rule>, now: Timestamp) -> Option<Engine> {
    let set = RuleSet {
        rules: vec![rule.clone()],
    };
    match Engine::new(&set, EngineConfig::default()) {
        Ok(mut e) => {
            let mut out = Vec::new();
            e.advance_to(now, &mut out);
            Some(e)
        }
        Err(err) => {
            tracing::error!(rule = %rule.name, error = %err, "cannot build the rule's engine");
            None
        }
    }
}

impl Shard {
    /// A shard running `rules`, reading batches from `rx`, sending alerts to `sink`; it bumps
    /// `drained` once its queue has ended (shutdown).
    pub fn new(
        id: usize,
        rules: &RuleSet,
        rx: mpsc::Receiver<Batch>,
        probe: mpsc::WeakSender<Batch>,
        sink: Addr<AlertSink>,
        tick: std::time::Duration,
        drained: Arc<AtomicUsize>,
    ) -> Shard {
        let mut s = Shard {
            id,
            engines: Vec::new(),
            by_name: HashMap::new(),
            sink,
            tick,
            out: Vec::new(),
            stats: ShardStats {
                shard: id,
                ..ShardStats::default()
            },
            rx: Some(rx),
            probe: Some(probe),
            drained,
        };
        s.install(rules);
        s
    }

    fn install(&mut self, rules: &RuleSet) {
        let now = wall_clock();
        let mut old: Vec<Option<RuleEngine>> = std::mem::take(&mut self.engines)
            .into_iter()
            .map(Some)
            .collect();
        let mut engines = Vec::with_capacity(rules.rules.len());
        for rule in &rules.rules {
            let canonical = rule.canonical();
            let set = RuleSet {
                rules: vec![rule.clone()],
            };
            let reuse = old
                .iter()
                .position(|o| o.as_ref().is_some_and(|o| *o.name == *rule.name))
                .or_else(|| {
                    old.iter()
                        .position(|o| o.as_ref().is_some_and(|o| o.canonical == canonical))
                })
                .and_then(|i| old[i].take());
            let engine = match reuse {
                Some(mut re) => match re.engine.reload(&set) {
                    Ok(()) => Some(re.engine),
                    Err(err) => {
                        tracing::error!(rule = %rule.name, error = %err, "reload failed; rule restarted");
                        build(rule, now)
                    }
                },
                None => build(rule, now),
            };
            if let Some(engine) = engine {
                engines.push(RuleEngine {
                    name: Arc::from(rule.name.as_str()),
                    canonical,
                    engine,
                });
            }
        }
        self.by_name = engines
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.clone(), i))
            .collect();
        self.engines = engines;
        self.stats.rules = self.engines.iter().map(|e| e.name.to_string()).collect();
    }

    fn tick_now(&mut self) {
        let now = wall_clock();
        for e in &mut self.engines {
            e.engine.advance_to(now, &mut self.out);
        }
        self.flush();
    }

    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.out);
        let n = batch.len();
        if let Err(e) = self.sink.try_send(Alerts(batch)) {
            tracing::error!(shard = self.id, alerts = n, error = %e, "alert sink full: alerts dropped");
            super::sink::note_dropped(n);
        }
    }
}

impl Actor for Shard {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(64);
        if let Some(rx) = self.rx.take() {
            ctx.add_stream(RxStream(rx));
        }
        ctx.run_interval(self.tick, |act, _| act.tick_now());
        self.tick_now();
    }
}

impl StreamHandler<Batch> for Shard {
    fn handle(&mut self, batch: Batch, _: &mut Self::Context) {
        self.stats.batches += 1;
        for r in batch {
            self.stats.events += 1;
            let Some(&i) = self.by_name.get(&r.rule) else {
                self.stats.unknown_rule += 1;
                continue;
            };
            let ev = Arc::try_unwrap(r.ev).unwrap_or_else(|a| (*a).clone());
            self.engines[i].engine.push(ev, &mut self.out);
        }
        self.flush();
    }

    fn finished(&mut self, _: &mut Self::Context) {
        // The ingest side is gone (shutdown): everything queued has been handled.
        self.tick_now();
        self.probe = None;
        self.drained.fetch_add(1, Ordering::SeqCst);
    }
}

impl Handler<Reload> for Shard {
    type Result = ();

    fn handle(&mut self, msg: Reload, _: &mut Self::Context) {
        self.install(&msg.0);
        self.flush();
    }
}

impl Handler<GetStats> for Shard {
    type Result = MessageResult<GetStats>;

    fn handle(&mut self, _: GetStats, _: &mut Self::Context) -> Self::Result {
        let mut s = self.stats.clone();
        s.queued_batches = self
            .probe
            .as_ref()
            .and_then(|w| w.upgrade())
            .map_or(0, |tx| tx.max_capacity() - tx.capacity());
        s.late = 0;
        s.keyless = 0;
        for e in &self.engines {
            s.rule_stats.extend(e.engine.stats());
            s.late += e.engine.counters().late;
            s.keyless += e.engine.counters().keyless;
        }
        MessageResult(s)
    }
}
