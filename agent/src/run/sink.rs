//! The alert sink actor: alert changes as JSON lines on stdout (the store issue adds sled).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use actix::prelude::*;
use cepheus_core::alert::Alert;

use super::counters::SinkCounters;

/// Alert changes from one shard, in the order they were made.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Alerts(pub Vec<Alert>);

/// Write out everything received so far (shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Flush;

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Counts alerts a shard could not hand to the sink (its mailbox was full).
pub fn note_dropped(n: usize) {
    DROPPED.fetch_add(n as u64, Ordering::Relaxed);
}

/// Alerts dropped because the sink's mailbox was full.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The alert sink.
pub struct AlertSink {
    stdout: bool,
    counters: Arc<SinkCounters>,
}

impl AlertSink {
    /// A sink writing JSON lines to stdout when `stdout`.
    pub fn new(stdout: bool, counters: Arc<SinkCounters>) -> AlertSink {
        AlertSink { stdout, counters }
    }
}

/// Capacity of the sink's mailbox (batches).
pub const MAILBOX: usize = 4096;

impl Actor for AlertSink {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX);
    }
}

impl Handler<Alerts> for AlertSink {
    type Result = ();

    fn handle(&mut self, msg: Alerts, _: &mut Self::Context) {
        self.counters
            .alerts
            .fetch_add(msg.0.len() as u64, Ordering::Relaxed);
        if !self.stdout {
            return;
        }
        let mut out = std::io::stdout().lock();
        for a in &msg.0 {
            let line = a.to_json().to_string();
            if let Err(e) = writeln!(out, "{line}") {
                tracing::error!(error = %e, "cannot write alerts to stdout");
                return;
            }
        }
        if let Err(e) = out.flush() {
            tracing::error!(error = %e, "cannot write alerts to stdout");
        }
    }
}

impl Handler<Flush> for AlertSink {
    type Result = ();

    fn handle(&mut self, _: Flush, _: &mut Self::Context) {
        let _ = std::io::stdout().lock().flush();
    }
}
