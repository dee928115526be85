//! Counters shared by the ingest side (atomics: many tasks on several threads bump them), and
//! bounded-rate logging of bad input and overload.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;

macro_rules! counters {
    ($(#[$m:meta])* $name:ident, $snap:ident { $($(#[$fm:meta])* $f:ident),* $(,)? }
     $(gauges { $($(#[$gm:meta])* $g:ident),* $(,)? })?) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        pub struct $name {
            $($(#[$fm])* pub $f: AtomicU64,)*
            $($($(#[$gm])* pub $g: AtomicU64,)*)?
        }

        /// A copy of the counters at one instant (for /stats and /metrics).
        #[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
        pub struct $snap {
            $($(#[$fm])* pub $f: u64,)*
            $($($(#[$gm])* pub $g: u64,)*)?
        }

        impl $name {
            /// Reads every counter.
            pub fn snapshot(&self) -> $snap {
                $snap {
                    $($f: self.$f.load(Ordering::Relaxed),)*
                    $($($g: self.$g.load(Ordering::Relaxed),)*)?
                }
            }
        }

        impl $snap {
            /// `(name, value)` of every counter (which only grow), for /metrics.
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($f), self.$f),)*]
            }

            /// `(name, value)` of every gauge (what is so now), for /metrics.
            #[allow(dead_code, reason = "not every set of counters has gauges")]
            pub fn gauges(&self) -> Vec<(&'static str, u64)> {
                vec![$($((stringify!($g), self.$g),)*)?]
            }
        }
    };
}

counters!(
    /// Ingest counters (all listeners together).
    IngestCounters, IngestSnapshot {
        /// UDP datagrams received.
        udp_datagrams,
        /// TCP connections accepted.
        tcp_connections,
        /// TCP connections refused because `max_connections` were open.
        tcp_rejected,
        /// Datagrams and TCP connections from senders not in `syslog.allowed_senders`,
        /// dropped.
        senders_refused,
        /// TCP connections closed for idleness.
        tcp_idle_closed,
        /// Unfinished messages dropped when the agent closed a TCP connection (idle, or the
        /// agent stopping): the bytes after its last complete message (cut mid-way, they must
        /// not reach a rule; a sender's own close ends its last line instead); and counted
        /// messages (`LEN <PRI>...`) a sender's close cut short.
        tcp_unfinished,
        /// Silent TCP connections told to close to make room for a new one when
        /// `max_connections` were open: one that never delivered a message (silent 1 s), else
        /// the one silent longest (30 s).
        tcp_evicted,
        /// TCP connections closed because the stream could not be framed.
        tcp_unframeable,
        /// Times a TCP stream's octet counting was lost (a wrong count: a sender counting
        /// characters, not bytes; a stray partial line) and found again at the next frame:
        /// the bytes between were dropped, the frames after them read.
        tcp_resynced,
        /// TCP frames received (messages, before parsing).
        tcp_frames,
        /// Messages that were not syslog (empty, binary garbage, no header ...).
        malformed,
        /// Messages larger than `max_message_size` (UDP datagrams and TCP frames).
        oversized,
        /// Exact duplicates dropped by the duplicate filter.
        duplicates,
        /// Events parsed (after the duplicate filter).
        parsed,
        /// Events that no rule wants (not sent to any shard).
        unmatched,
        /// Events a rule's condition matched but that lack one of its `group_by` fields (no
        /// group to put them in; not sent to any shard for that rule), once per event. The
        /// shards' own `keyless` counts again, per definition, such events that reached them
        /// for another rule.
        keyless,
        /// Deliveries to shards (an event counts once per shard it goes to); those dropped
        /// because the queue was full count in `queue_full` only.
        routed,
        /// Deliveries dropped because a shard's queue was full (UDP; TCP waits instead).
        queue_full,
        /// Socket read errors.
        read_errors,
    }
);

counters!(
    /// Counters of the alert sink and the control plane.
    SinkCounters, SinkSnapshot {
        /// Alert changes received from the shards, or made by the sink for alerts no engine
        /// holds (a match's, resolved `forgotten`, `rule_changed`, ...): written out, unless counted in
        /// `alerts_repeated` (the store had them: a restarted engine made them again) or in
        /// `alerts_unwritten`.
        alerts,
        /// Alert changes a shard could not hand to the sink (its mailbox was full), lost
        /// (read from [`super::sink::dropped`] when the counters are shown).
        alerts_dropped,
        /// Alert changes that could not be written to stdout (a closed pipe, a full disk);
        /// the store still has them.
        alerts_unwritten,
        /// Alert changes the store already had (an engine restored from a checkpoint made
        /// them again after a restart): neither kept nor written twice.
        alerts_repeated,
        /// Alert changes a silence muted (`cepheus silence`): kept and written to stdout and
        /// `output.file` with `silenced`, not sent to `output.syslog` nor `output.webhook`.
        /// Firing changes only: their ends are muted with them.
        alerts_silenced,
        /// Alert changes an `[[inhibit]]` rule muted (another alert fired): as
        /// `alerts_silenced`.
        alerts_inhibited,
        /// Alert changes that could not be appended to `output.file` (the store has them).
        file_unwritten,
        /// Alert changes handed to `output.syslog`'s connection (TCP: written to a connection
        /// the collector had not closed; UDP: sent without an error).
        syslog_sent,
        /// Alert changes not forwarded to `output.syslog` (its queue was full and the store
        /// could not keep them, or pruned them first; left in the queue at a stop; UDP: a send
        /// refused, the collector's port closed).
        syslog_unsent,
        /// Tries to reach `output.syslog`'s collector over TCP that failed (no connection, a
        /// write refused, a connection it had closed): the message waits and is tried again.
        syslog_failed,
        /// Alert changes posted to `output.webhook` (the endpoint answered 2xx).
        webhook_sent,
        /// Alert changes not posted to `output.webhook` (its queue was full and the store could
        /// not keep them, or pruned them first; left in the queue at a stop; refused by the
        /// endpoint with a 4xx).
        webhook_unsent,
        /// Requests to `output.webhook` that failed and are tried again (no connection, a
        /// timeout, a 5xx or 429 answer): their changes wait, in `webhook_waiting`.
        webhook_failed,
        /// Writes to the store that failed or were refused (a nearly full disk): the alerts
        /// are written out and wait, in `store_waiting`, to be kept once the store can; a
        /// checkpoint is tried again at the next save.
        store_errors,
        /// Alert changes the store will never keep: more than 64 MiB waited for it (the
        /// oldest went first; the outputs had them).
        store_dropped,
        /// Rule reloads that took effect.
        reloads,
        /// Rule reloads rejected (the old rules kept running).
        reloads_failed,
    }
    gauges {
        /// Alert changes written out that wait for the store to keep them now (its disk
        /// nearly full, a write failed); kept aside with each state saved, for a restart.
        store_waiting,
        /// Alert changes queued for `output.syslog` now, not yet sent nor given up.
        syslog_waiting,
        /// Alert changes queued for `output.webhook` now, not yet posted nor given up.
        webhook_waiting,
        /// 1 while alert changes for `output.syslog` wait in the store (its queue was full,
        /// or a restart's backlog): they follow in order as the queue drains.
        syslog_behind,
        /// 1 while alert changes for `output.webhook` wait in the store, as for syslog.
        webhook_behind,
        /// 1 while a write of alert changes to stdout has waited 2 s or more for its reader
        /// (a paused pager, a pipe nobody reads): its lines wait in memory, up to 64 MiB (set
        /// `output.stdout = false` when nothing reads it).
        stdout_stalled,
    }
);

counters!(
    /// Live capture counters (`[capture]`), copied from the capture thread as it runs.
    CaptureCounters, CaptureSnapshot {
        /// Frames read from the interface.
        received,
        /// Frames rejected by `capture.filter`.
        filtered,
        /// Frames dropped because the capture channel was full (the flow table fell behind).
        dropped,
        /// Frames the kernel dropped before cepheus read them (the packet socket's buffer was
        /// full: cepheus's capture thread fell behind the interface).
        kernel_dropped,
        /// Second copies of loopback frames, dropped.
        loopback_duplicates,
        /// Frames decoded to an IP packet and given to the flow table.
        decoded,
        /// Frames cut before their headers ended.
        truncated,
        /// Frames with contradictory headers.
        malformed,
        /// Frames without IP (ARP, ...).
        non_ip,
        /// Flows created.
        flows,
        /// Flows evicted because the flow table was full.
        evicted,
        /// Packets stamped before the flow table's clock.
        out_of_order,
        /// IP fragments whose first fragment (the one with the ports) did not come within
        /// 30 s: counted into no flow (those that come before their first wait for it).
        orphan_fragments,
        /// Times the interface was opened again after its capture failed (it went down, or
        /// was removed, and came back).
        reopened,
    }
    gauges {
        /// 1 while the capture is not running: its interface went down or was removed (it is
        /// opened again every 5 s), so no flow is seen.
        down,
    }
);

/// One syslog listener's counters (`/stats` `listeners`, `/metrics` by its `listener` label):
/// which socket messages come in on, and when the last did, so an operator sees at once
/// that, say, the TCP port hears nothing while UDP does.
#[derive(Debug, Default)]
pub struct ListenerCounters {
    /// `udp 127.0.0.1:5514`, `tcp [::]:514`: the protocol and the bound address.
    pub name: String,
    /// Messages received (UDP datagrams, TCP frames; oversized ones included).
    pub messages: AtomicU64,
    /// The bytes of those messages (without TCP framing; an oversized one adds none).
    pub bytes: AtomicU64,
    /// TCP connections accepted (0 for UDP).
    pub connections: AtomicU64,
    /// When the last message came, in ms since the Unix epoch (0: none yet).
    pub last_ms: AtomicU64,
}

impl ListenerCounters {
    /// The counters of the listener `proto` (`udp`, `tcp`) bound to `addr`.
    pub fn new(proto: &str, addr: std::net::SocketAddr) -> Arc<ListenerCounters> {
        Arc::new(ListenerCounters {
            name: format!("{proto} {addr}"),
            ..ListenerCounters::default()
        })
    }

    /// One message of `bytes` bytes came at `now`.
    pub fn message(&self, bytes: usize, now: cepheus_core::time::Timestamp) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        let ms = u64::try_from(now.0 / 1_000_000).unwrap_or(0);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// What the counters say now.
    pub fn snapshot(&self) -> ListenerSnapshot {
        let last = self.last_ms.load(Ordering::Relaxed);
        ListenerSnapshot {
            listener: self.name.clone(),
            messages: self.messages.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
            last_message: (last > 0).then(|| {
                cepheus_core::time::Timestamp(i64::try_from(last).unwrap_or(0) * 1_000_000)
                    .to_rfc3339()
            }),
        }
    }
}

/// A listener's counters as `/stats` shows them.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ListenerSnapshot {
    /// `udp 127.0.0.1:5514`, `tcp [::]:514`.
    pub listener: String,
    /// Messages received.
    pub messages: u64,
    /// Their bytes.
    pub bytes: u64,
    /// TCP connections accepted (0 for UDP).
    pub connections: u64,
    /// When the last message came (RFC 3339), `null` when none has.
    pub last_message: Option<String>,
}

/// Allows one log line per `period` per kind of problem; counts what it held back.
#[derive(Debug)]
pub struct LogLimit {
    start: Instant,
    period_ms: u64,
    next_ms: AtomicU64,
    held: AtomicU64,
}

impl LogLimit {
    /// One line per `period_ms` milliseconds.
    pub fn new(period_ms: u64) -> LogLimit {
        LogLimit {
            start: Instant::now(),
            period_ms,
            next_ms: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// `Some(lines held back since the last one)` when a line may be logged now.
    pub fn allow(&self) -> Option<u64> {
        if self.take_turn() {
            return Some(self.held.swap(0, Ordering::Relaxed));
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Lines held back and not told with a later line, once a line may be logged again: what a
    /// burst that stopped held back, said by [`tell_held_back`] (else no later line would).
    pub fn overdue(&self) -> Option<u64> {
        if self.held.load(Ordering::Relaxed) == 0 || !self.take_turn() {
            return None;
        }
        Some(self.held.swap(0, Ordering::Relaxed)).filter(|&n| n > 0)
    }

    /// Whether a line may be logged now (its period is over), taking the turn if so.
    fn take_turn(&self) -> bool {
        let now = self.start.elapsed().as_millis() as u64;
        let next = self.next_ms.load(Ordering::Relaxed);
        now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now + self.period_ms,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

/// Says, in `stdout_stalled` and in the log (once a minute at most), when a write of alert
/// changes to stdout has waited for its reader for 2 s or more: the sink is held inside it
/// and cannot say so itself.
pub async fn watch_stdout(
    counters: std::sync::Arc<SinkCounters>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut said: Option<std::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
        let waited = super::stdout::stdout_waiting().filter(|w| w.as_secs() >= 2);
        counters
            .stdout_stalled
            .store(u64::from(waited.is_some()), Ordering::Relaxed);
        if let Some(w) = waited
            && said.is_none_or(|t| t.elapsed().as_secs() >= 60)
        {
            said = Some(std::time::Instant::now());
            tracing::warn!(
                waited_s = w.as_secs(),
                "stdout has not taken alert changes for {} s: they wait for it in memory (up to 64 MiB, then new ones are given up for stdout; the store, the API and the other outputs are not held); read it, or set `output.stdout = false` when nothing does",
                w.as_secs()
            );
        }
    }
}

/// Says every second how many warnings each limit held back once its burst is over (the
/// counters in `/stats` have the exact numbers).
pub async fn tell_held_back(
    shared: std::sync::Arc<super::ingest::Shared>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
        let l = &shared.limits;
        for (limit, what) in [
            (&l.malformed, "malformed messages dropped"),
            (&l.oversized, "oversized messages dropped"),
            (
                &l.queue_full,
                "batches dropped on a full shard queue (`queue_full` counts their events)",
            ),
            (&l.connection, "connection problems"),
            (
                &l.refused,
                "messages or connections from senders not in syslog.allowed_senders dropped",
            ),
        ] {
            if let Some(n) = limit.overdue() {
                tracing::warn!(
                    held_back = n,
                    "and {n} more {what} since the last such line (see /stats)"
                );
            }
        }
    }
}

/// The rate limits of the agent's warnings, one per kind.
#[derive(Debug)]
pub struct Limits {
    /// Malformed messages.
    pub malformed: LogLimit,
    /// Oversized messages.
    pub oversized: LogLimit,
    /// Queue-full drops.
    pub queue_full: LogLimit,
    /// Connection-level problems.
    pub connection: LogLimit,
    /// Senders refused (`syslog.allowed_senders`).
    pub refused: LogLimit,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            malformed: LogLimit::new(1000),
            oversized: LogLimit::new(1000),
            queue_full: LogLimit::new(1000),
            connection: LogLimit::new(1000),
            refused: LogLimit::new(1000),
        }
    }
}

/// Bumps a counter.
pub fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// How often the kernel's drop counts of the UDP sockets are read.
const UDP_DROPS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Says in the log, at most once a minute, that the kernel dropped datagrams on the syslog UDP
/// sockets (their receive buffers overflowed: the agent never saw those messages), with how
/// many since the last line and what to do. Only `/stats` counted them before.
pub async fn watch_udp_kernel_drops(
    addrs: Vec<std::net::SocketAddr>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let Some(mut said) = super::api::kernel_udp_drops(&addrs) else {
        return;
    };
    let limit = LogLimit::new(60_000);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(UDP_DROPS_EVERY) => {}
            _ = shutdown.changed() => return,
        }
        let Some(total) = super::api::kernel_udp_drops(&addrs) else {
            return;
        };
        if total > said && limit.allow().is_some() {
            tracing::warn!(
                dropped = total - said,
                total,
                "the kernel dropped syslog datagrams: the UDP receive buffers overflowed (raise syslog.udp_receive_buffer and net.core.rmem_max, add shards, or send over TCP, which pushes back)"
            );
            said = total;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_limit_holds_back() {
        let l = LogLimit::new(60_000);
        assert_eq!(l.allow(), Some(0));
        assert_eq!(l.allow(), None);
        assert_eq!(l.allow(), None);
        assert_eq!(l.held.load(Ordering::Relaxed), 2);
        // Told once the period is over, even with no later line; then nothing is held.
        assert_eq!(l.overdue(), None, "within the period");
        l.next_ms.store(0, Ordering::Relaxed);
        assert_eq!(l.overdue(), Some(2));
        l.next_ms.store(0, Ordering::Relaxed);
        assert_eq!(l.overdue(), None);
        assert_eq!(l.allow(), Some(0));
    }
}
