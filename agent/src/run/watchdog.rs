//! systemd's watchdog (`WatchdogSec=`): pinged only when a probe has been through the
//! pipeline and back, so an idle input still pings and a stuck stage does not.
//!
//! Every half period a probe goes to each ingest thread (its event loop runs the probe's
//! task), and to each CEP shard, which passes it on to the alert sink and answers once the
//! sink did. All answered within the half period: `WATCHDOG=1`; else a warning (at most one
//! a minute) names the stage that did not, and systemd restarts the service once the period
//! passes with no ping.

use std::time::{Duration, Instant};

use actix::{Addr, ArbiterHandle};
use tokio::sync::{oneshot, watch};

use super::shard::{Probe, Shard};

/// The stages a probe goes through.
pub struct Stages {
    /// The ingest threads (UDP loops and TCP connections run there).
    pub ingest: Vec<ArbiterHandle>,
    /// The CEP shards (each passes the probe to the alert sink).
    pub shards: Vec<Addr<Shard>>,
}

impl Stages {
    /// Sends one probe through every stage; `Err` names the first that did not answer.
    async fn probe(&self) -> Result<(), String> {
        for (i, arb) in self.ingest.iter().enumerate() {
            let (tx, rx) = oneshot::channel();
            let sent = arb.spawn(async move {
                let _ = tx.send(());
            });
            if !sent || rx.await.is_err() {
                return Err(format!("ingest thread {i}"));
            }
        }
        for (i, s) in self.shards.iter().enumerate() {
            if !s.send(Probe).await.unwrap_or(false) {
                return Err(format!("shard {i} or the alert sink"));
            }
        }
        Ok(())
    }
}

/// Pings systemd every half `period` while every stage answers, until shutdown (when
/// stopping, the pipeline drains and is no longer probed).
pub async fn run(period: Duration, stages: Stages, mut shutdown: watch::Receiver<bool>) {
    let half = (period / 2).max(Duration::from_millis(10));
    let mut last_warned: Option<Instant> = None;
    tracing::info!(period = ?period, "systemd watchdog enabled");
    loop {
        tokio::select! {
            _ = tokio::time::sleep(half) => {}
            _ = shutdown.changed() => return,
        }
        let answer = tokio::time::timeout(half, stages.probe()).await;
        let stuck = match answer {
            Ok(Ok(())) => {
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                continue;
            }
            Ok(Err(stage)) => stage,
            Err(_) => "a stage (no answer within half the watchdog period)".to_string(),
        };
        if last_warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            last_warned = Some(Instant::now());
            tracing::warn!(stage = %stuck, "the pipeline did not answer the watchdog probe: systemd not pinged");
        }
    }
}
