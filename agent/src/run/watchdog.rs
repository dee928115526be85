//! systemd's watchdog (`WatchdogSec=`): pinged when a probe has been through the pipeline and
//! back, so an idle input still pings and a stuck stage does not.
//!
//! A quarter period after the last came back, a probe goes to each ingest thread (its event
//! loop runs the probe's task), and to each CEP shard, which passes it on to the alert sink
//! and answers once the sink did. All answered within a quarter period: `WATCHDOG=1`. A
//! probe still on its way is not given up: it waits at one stage, and if that stage got work
//! done meanwhile (it is busy with a flood or an alert storm, not stuck) the watchdog is
//! pinged all the same; else a warning (at most one a minute) names the stage, and systemd
//! restarts the service once the period passes with no ping.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix::{Addr, ArbiterHandle};
use tokio::sync::{oneshot, watch};

use super::counters::{IngestCounters, SinkCounters};
use super::shard::{Liveness, Probe, Shard};

/// The stages a probe goes through.
pub struct Stages {
    /// The ingest threads (UDP loops and TCP connections run there).
    pub ingest: Vec<ArbiterHandle>,
    /// The CEP shards (each passes the probe to the alert sink).
    pub shards: Vec<Addr<Shard>>,
    /// What each stage has done so far.
    pub progress: Progress,
}

/// Counters that move whenever a stage gets work done.
#[derive(Clone)]
pub struct Progress {
    /// The ingest threads' (all together).
    pub ingest: Arc<IngestCounters>,
    /// Each shard's (batches and ticks handled, and whether it is making a saved state).
    pub shards: Vec<Liveness>,
    /// The alert sink's (alert changes taken).
    pub sink: Arc<SinkCounters>,
}

/// Where a probe on its way is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// In ingest thread `i`'s queue.
    Ingest(usize),
    /// In shard `i`'s mailbox (`false`), or past it, waiting on the alert sink (`true`).
    Shard(usize, bool),
}

/// A probe's position, shared between the probe and the watchdog.
#[derive(Default)]
struct Position {
    /// Ingest thread `i`, or shard `i` as `SHARD + i`.
    stage: AtomicUsize,
    /// Past the current shard's mailbox.
    entered: Arc<AtomicBool>,
}

const SHARD: usize = 1 << 20;

impl Position {
    fn at(&self) -> At {
        match self.stage.load(Ordering::SeqCst) {
            s if s >= SHARD => At::Shard(s - SHARD, self.entered.load(Ordering::SeqCst)),
            s => At::Ingest(s),
        }
    }
}

impl Progress {
    /// The counter of the stage a probe waits at.
    fn of(&self, at: At) -> u64 {
        let i = &self.ingest;
        match at {
            At::Ingest(_) => [&i.udp_datagrams, &i.tcp_frames, &i.parsed, &i.malformed]
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .fold(0u64, u64::wrapping_add),
            At::Shard(s, false) => self
                .shards
                .get(s)
                .map_or(0, |c| c.progress.load(Ordering::Relaxed)),
            At::Shard(_, true) => self.sink.alerts.load(Ordering::Relaxed),
        }
    }

    /// Whether the stage is in the middle of bounded work that gives no count while it lasts
    /// (a shard making a saved state).
    fn in_long_work(&self, at: At) -> bool {
        match at {
            At::Shard(s, false) => self
                .shards
                .get(s)
                .is_some_and(|l| l.saving.load(Ordering::SeqCst)),
            _ => false,
        }
    }
}

impl Stages {
    /// Sends one probe through every stage, saying where it is in `pos`; `Err` names the
    /// first that did not answer.
    fn probe(&self, pos: Arc<Position>) -> impl Future<Output = Result<(), String>> + 'static {
        let ingest = self.ingest.clone();
        let shards = self.shards.clone();
        async move {
            for (i, arb) in ingest.iter().enumerate() {
                pos.stage.store(i, Ordering::SeqCst);
                let (tx, rx) = oneshot::channel();
                let sent = arb.spawn(async move {
                    let _ = tx.send(());
                });
                if !sent || rx.await.is_err() {
                    return Err(format!("ingest thread {i}"));
                }
            }
            for (i, s) in shards.iter().enumerate() {
                // (The flag first: the watchdog reads the stage, then its flag. The shard
                // sets it as the probe leaves its mailbox.)
                pos.entered.store(false, Ordering::SeqCst);
                pos.stage.store(SHARD + i, Ordering::SeqCst);
                let answered = s
                    .send(Probe(Some(pos.entered.clone())))
                    .await
                    .unwrap_or(false);
                if !answered {
                    return Err(format!("shard {i} or the alert sink"));
                }
            }
            Ok(())
        }
    }
}

/// A probe on its way through the stages.
type ProbeFuture = Pin<Box<dyn Future<Output = Result<(), String>>>>;

/// What a round makes of a probe still on its way.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The stage it waited at last round answered, or got work done since: busy, pinged.
    Busy,
    /// A probe begun this round: judged at the next (no ping, no warning; it may have just
    /// reached a stuck stage, which proves nothing yet).
    Arrived,
    /// No work done where it waits for a round: stuck (no ping).
    Stuck,
}

/// Judges a probe waiting at `at`, whose counter is `done` now, given where it was seen
/// waiting at the last round (`seen`; `None` for a probe begun this round).
fn judge(seen: Option<(At, u64)>, at: At, done: u64) -> Verdict {
    match seen {
        None => Verdict::Arrived,
        Some((was, before)) if was == at && done == before => Verdict::Stuck,
        Some(_) => Verdict::Busy,
    }
}

/// Pings systemd every quarter `period` or so while every stage answers or is busy, until
/// shutdown (when stopping, the pipeline drains and is no longer probed).
pub async fn run(period: Duration, stages: Stages, mut shutdown: watch::Receiver<bool>) {
    // A probe is begun a quarter period after the last came back, and one on its way is
    // judged every quarter: a busy pipeline is pinged at least every three quarters (a probe
    // first seen waiting is judged one quarter later).
    let quarter = (period / 4).max(Duration::from_millis(10));
    let mut last_warned: Option<Instant> = None;
    let mut last_busy: Option<Instant> = None;
    tracing::info!(period = ?period, "systemd watchdog enabled");
    // Where a probe on its way was seen waiting, and that stage's counter then.
    let mut waiting: Option<(At, u64)> = None;
    let mut in_flight: Option<(ProbeFuture, Arc<Position>)> = None;
    loop {
        if in_flight.is_none() {
            tokio::select! {
                _ = tokio::time::sleep(quarter) => {}
                _ = shutdown.changed() => return,
            }
        }
        let (probe, pos) = in_flight.get_or_insert_with(|| {
            let pos = Arc::new(Position::default());
            (Box::pin(stages.probe(pos.clone())), pos)
        });
        let answer = tokio::select! {
            a = tokio::time::timeout(quarter, probe.as_mut()) => a,
            _ = shutdown.changed() => return,
        };
        let stuck = match answer {
            Ok(Ok(())) => {
                in_flight = None;
                waiting = None;
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                continue;
            }
            Ok(Err(stage)) => {
                in_flight = None;
                waiting = None;
                stage
            }
            Err(_) => {
                // Still on its way: kept, and judged by where it waits (`judge`).
                let at = pos.at();
                let done = stages.progress.of(at);
                let verdict = match judge(waiting.replace((at, done)), at, done) {
                    Verdict::Stuck if stages.progress.in_long_work(at) => Verdict::Busy,
                    v => v,
                };
                match verdict {
                    Verdict::Busy => {
                        let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                        if last_busy.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                            last_busy = Some(Instant::now());
                            tracing::info!(stage = ?at, "the pipeline is busy: the watchdog probe waits at a stage that is working; pinged");
                        }
                        continue;
                    }
                    Verdict::Arrived => continue,
                    Verdict::Stuck => {
                        format!(
                            "{at:?} (no answer and no work done for a quarter of the watchdog period)"
                        )
                    }
                }
            }
        };
        if last_warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            last_warned = Some(Instant::now());
            tracing::warn!(stage = %stuck, "the pipeline did not answer the watchdog probe: systemd not pinged");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_that_got_work_done_is_busy_not_stuck() {
        let shard = At::Shard(1, false);
        let sink = At::Shard(1, true);
        // A probe begun this round: no verdict yet (it may have just reached a stuck stage).
        assert_eq!(judge(None, shard, 5), Verdict::Arrived);
        // Moved on since the last round: the stage it waited at answered.
        assert_eq!(judge(Some((At::Ingest(0), 9)), shard, 5), Verdict::Busy);
        assert_eq!(judge(Some((shard, 5)), sink, 100), Verdict::Busy);
        // Still there: busy if it got work done since, stuck if not.
        assert_eq!(judge(Some((shard, 5)), shard, 6), Verdict::Busy);
        assert_eq!(judge(Some((shard, 5)), shard, 5), Verdict::Stuck);
        assert_eq!(judge(Some((sink, 100)), sink, 250), Verdict::Busy);
        assert_eq!(judge(Some((sink, 100)), sink, 100), Verdict::Stuck);
        let pos = Position::default();
        assert_eq!(pos.at(), At::Ingest(0));
        pos.stage.store(SHARD + 2, Ordering::SeqCst);
        assert_eq!(pos.at(), At::Shard(2, false));
        pos.entered.store(true, Ordering::SeqCst);
        assert_eq!(pos.at(), At::Shard(2, true));
        let p = Progress {
            ingest: Arc::default(),
            shards: vec![
                Liveness::default(),
                Liveness::default(),
                Liveness::default(),
            ],
            sink: Arc::default(),
        };
        p.shards[2].progress.store(5, Ordering::SeqCst);
        assert_eq!(p.of(At::Shard(2, false)), 5);
        // A shard making a saved state is busy, though it counts nothing meanwhile.
        assert!(!p.in_long_work(At::Shard(2, false)));
        p.shards[2].saving.store(true, Ordering::SeqCst);
        assert!(p.in_long_work(At::Shard(2, false)));
        assert!(!p.in_long_work(At::Shard(2, true)));
        p.sink.alerts.store(9, Ordering::SeqCst);
        assert_eq!(p.of(At::Shard(2, true)), 9);
        p.ingest.parsed.store(3, Ordering::SeqCst);
        assert_eq!(p.of(At::Ingest(1)), 3);
    }
}
