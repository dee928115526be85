//! Ingest: UDP and TCP syslog listeners, parsing (the Filter stage) and routing, in parallel.
//!
//! Each UDP socket and each TCP connection is a task on one of the ingest arbiters (threads),
//! and each task owns a [`Router`]: it parses what it reads, drops duplicates, finds the shard
//! of every (rule, group) the event concerns and sends per-shard batches. So parsing and
//! routing scale with the ingest threads, and no single router actor serialises the stream.
//! Overload: TCP waits for room in a full shard queue (backpressure reaches the sender through
//! TCP flow control); UDP cannot push back, so a full queue drops the batch, counted.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use bytes::BytesMut;
use cepheus_core::event::Event;
use cepheus_core::time::Timestamp;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{Semaphore, watch};

use super::counters::{CaptureCounters, IngestCounters, Limits, ListenerCounters, bump};
use super::framing::{Frame, Framer};
use super::queue::ShardTx;
use super::route::RoutePlan;
use super::shard::Batch;
use crate::flow::live::wall_clock;
use crate::ingest::Malformed;
use crate::ingest::dedup::Dedup;
use crate::ingest::syslog::{LAST_MESSAGES, LastMessages, SyslogParser};

/// Most deliveries per batch to one shard.
pub const MAX_BATCH: usize = 1024;

const DEDUP_STRIPES: usize = 8;

/// What every ingest task shares.
pub struct Shared {
    /// The syslog parser (zone, year policy).
    pub parser: SyslogParser,
    /// Counters.
    pub counters: Arc<IngestCounters>,
    /// Log rate limits.
    pub limits: Limits,
    /// The duplicate filter, striped by peer.
    pub dedup: Vec<Mutex<Dedup>>,
    /// Each sender's last message, for its syslogd's repeat notices, striped by peer.
    pub last: Vec<Mutex<LastMessages>>,
    /// Largest message.
    pub max_message: usize,
    /// TCP idle timeout.
    pub idle: StdDuration,
    /// The senders taken (`syslog.allowed_senders`); empty: any.
    pub allowed: Vec<ipnet::IpNet>,
}

impl Shared {
    /// Shared state; the duplicate filter's capacity is split over its stripes.
    pub fn new(
        parser: SyslogParser,
        counters: Arc<IngestCounters>,
        dedup_window: cepheus_core::time::Duration,
        dedup_capacity: usize,
        max_message: usize,
        idle: StdDuration,
    ) -> Shared {
        let per = dedup_capacity.div_ceil(DEDUP_STRIPES).max(1);
        Shared {
            parser,
            counters,
            limits: Limits::default(),
            dedup: (0..DEDUP_STRIPES)
                .map(|_| Mutex::new(Dedup::new(dedup_window, per)))
                .collect(),
            last: (0..DEDUP_STRIPES)
                .map(|_| Mutex::new(LastMessages::holding(LAST_MESSAGES / DEDUP_STRIPES)))
                .collect(),
            max_message,
            idle,
            allowed: Vec::new(),
        }
    }

    /// Takes only the syslog of these senders (none: any).
    pub fn allowing(mut self, allowed: Vec<ipnet::IpNet>) -> Shared {
        self.allowed = allowed;
        self
    }

    /// Whether `peer` may send (`syslog.allowed_senders`); a refusal is counted and said (at
    /// most once a second, with how many more).
    pub fn admits(&self, peer: IpAddr, how: &str) -> bool {
        let ip = peer.to_canonical();
        if self.allowed.is_empty() || self.allowed.iter().any(|n| n.contains(&ip)) {
            return true;
        }
        bump(&self.counters.senders_refused, 1);
        if let Some(held) = self.limits.refused.allow() {
            tracing::warn!(peer = %ip, suppressed = held, "syslog {how} from a sender not in syslog.allowed_senders: dropped (and any more within a second, counted in senders_refused)");
        }
        false
    }

    fn duplicate(&self, bytes: &[u8], peer: Option<IpAddr>, now: Timestamp) -> bool {
        match self.dedup[stripe(peer)].lock() {
            Ok(mut d) => d.enabled() && d.seen(bytes, peer, now),
            Err(_) => false,
        }
    }

    /// `ev` (parsed from `bytes`) as the rules are to see it: a syslogd's repeat notice as
    /// the sender's message it repeats ([`LastMessages`]).
    fn repeated(&self, ev: Event, bytes: &[u8], peer: Option<IpAddr>, at: Timestamp) -> Event {
        match self.last[stripe(peer)].lock() {
            Ok(mut last) => last.take(ev, bytes, peer, |b| self.parser.parse(b, at, peer).ok()),
            Err(_) => ev,
        }
    }
}

/// The stripe of the per-sender filters that `peer`'s messages use.
fn stripe(peer: Option<IpAddr>) -> usize {
    (match peer {
        Some(IpAddr::V4(a)) => a.octets()[3] as usize,
        Some(IpAddr::V6(a)) => a.octets()[15] as usize,
        None => 0,
    }) % DEDUP_STRIPES
}

/// The router half of an ingest task: parse, dedup, route, batch.
pub struct Router {
    shared: Arc<Shared>,
    plan_rx: watch::Receiver<Arc<RoutePlan>>,
    plan: Arc<RoutePlan>,
    txs: Vec<ShardTx>,
    pending: Vec<Batch>,
    /// Stateless engine that computes which shards an event concerns (rebuilt on reload).
    engine: Option<cepheus_core::engine::Engine>,
    owners: Vec<u32>,
    /// The last messages of what this router reads without a peer (a followed file: a
    /// syslogd writes its repeat notices per file, so each file has its own).
    local_last: LastMessages,
}

impl Router {
    /// A router sending to the shards' queues `txs` with the routing plan in `plan_rx`.
    pub fn new(
        shared: Arc<Shared>,
        plan_rx: watch::Receiver<Arc<RoutePlan>>,
        txs: Vec<ShardTx>,
    ) -> Router {
        let plan = plan_rx.borrow().clone();
        Router {
            shared,
            plan_rx,
            engine: plan.router(),
            plan,
            pending: txs.iter().map(|_| Vec::new()).collect(),
            txs,
            owners: Vec::new(),
            local_last: LastMessages::default(),
        }
    }

    /// Whether some shard's batch is full (flush before reading more).
    pub fn full(&self) -> bool {
        self.pending.iter().any(|b| b.len() >= MAX_BATCH)
    }

    /// One message received at `arrival` from `peer`: counted, parsed, routed into batches.
    /// Returns whether it was syslog (a duplicate counts: it was, once).
    pub fn accept(&mut self, bytes: &[u8], peer: Option<IpAddr>, arrival: Timestamp) -> bool {
        self.refresh_plan();
        let sh = &*self.shared;
        // Parsed first: what is not syslog is malformed however often it comes (a flood of
        // one garbage line was counted as one malformed and thousands of duplicates; found
        // by an audit), and only messages are remembered as seen.
        let ev = match sh.parser.parse(bytes, arrival, peer) {
            Ok(ev) => ev,
            Err(e) => {
                self.malformed(&e, peer);
                return false;
            }
        };
        // The line ending is no part of the message (as in replay's inputs): one relayed with
        // CRLF and again with LF, or over TCP and again over UDP, is one message.
        let bytes = crate::ingest::syslog::trim_bytes(bytes);
        if sh.duplicate(bytes, peer, arrival) {
            bump(&sh.counters.duplicates, 1);
            return true;
        }
        let ev = match peer {
            Some(_) => sh.repeated(ev, bytes, peer, arrival),
            None => self
                .local_last
                .take(ev, bytes, None, |b| sh.parser.parse(b, arrival, None).ok()),
        };
        // Counted once routed, so a reader who sees `parsed` also sees where it went
        // (`keyless`, `unmatched`).
        self.route(ev);
        bump(&self.shared.counters.parsed, 1);
        true
    }

    /// An event made elsewhere (a flow from the live capture): routed as is.
    pub fn accept_event(&mut self, ev: cepheus_core::event::Event) {
        self.refresh_plan();
        self.route(ev);
        bump(&self.shared.counters.parsed, 1);
    }

    /// [`Router::flush`] from a plain thread (the capture thread): waits for room.
    pub fn flush_blocking(&mut self) {
        for s in 0..self.pending.len() {
            if self.pending[s].is_empty() {
                continue;
            }
            let batch = std::mem::take(&mut self.pending[s]);
            let n = batch.len() as u64;
            if self.txs[s].blocking_send(batch).is_err() {
                bump(&self.shared.counters.queue_full, n);
            } else {
                bump(&self.shared.counters.routed, n);
            }
        }
    }

    fn malformed(&self, e: &Malformed, peer: Option<IpAddr>) {
        let sh = &*self.shared;
        bump(&sh.counters.malformed, 1);
        if let Some(held) = sh.limits.malformed.allow() {
            tracing::warn!(peer = %show_peer(peer), error = %e, suppressed = held, "malformed message dropped");
        }
    }

    /// A message over the size limit was dropped.
    pub fn oversized(&self, peer: Option<IpAddr>) {
        let sh = &*self.shared;
        bump(&sh.counters.oversized, 1);
        if let Some(held) = sh.limits.oversized.allow() {
            tracing::warn!(peer = %show_peer(peer), limit = sh.max_message, suppressed = held, "oversized message dropped");
        }
    }

    fn refresh_plan(&mut self) {
        if self.plan_rx.has_changed().unwrap_or(false) {
            self.plan = self.plan_rx.borrow_and_update().clone();
            self.engine = self.plan.router();
        }
    }

    /// Sends a parsed event to every shard that owns a group it concerns.
    fn route(&mut self, ev: cepheus_core::event::Event) {
        let sh = &*self.shared;
        self.owners.clear();
        let ev = Arc::new(ev);
        let mut keyless = false;
        if let Some(engine) = &mut self.engine {
            let before = engine.counters().keyless;
            engine.owners(&ev, self.plan.shards() as u32, &mut self.owners);
            keyless = engine.counters().keyless > before;
        }
        if keyless {
            bump(&sh.counters.keyless, 1);
        }
        if self.owners.is_empty() {
            if !keyless {
                bump(&sh.counters.unmatched, 1);
            }
            return;
        }
        for &s in &self.owners {
            if let Some(batch) = self.pending.get_mut(s as usize) {
                batch.push(ev.clone());
            }
        }
    }

    /// Sends the pending batches; waits for room when `wait` (TCP), else drops and counts
    /// what does not fit (UDP).
    pub async fn flush(&mut self, wait: bool) {
        for s in 0..self.pending.len() {
            if self.pending[s].is_empty() {
                continue;
            }
            let batch = std::mem::take(&mut self.pending[s]);
            let n = batch.len() as u64;
            let lost = if wait {
                self.txs[s].send(batch).await.is_err()
            } else {
                self.txs[s].try_send(batch).is_err()
            };
            let sh = &*self.shared;
            if !lost {
                bump(&sh.counters.routed, n);
            } else {
                bump(&sh.counters.queue_full, n);
                if let Some(held) = sh.limits.queue_full.allow() {
                    tracing::warn!(
                        shard = s,
                        events = n,
                        suppressed = held,
                        "shard queue full: events dropped"
                    );
                }
            }
        }
    }
}

/// Reads one UDP socket until shutdown.
pub async fn udp_loop(
    sock: UdpSocket,
    mut router: Router,
    listener: Arc<ListenerCounters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let max = router.shared.max_message;
    // Room for a message of `max` bytes and its line end (CRLF at most), and one byte more to
    // tell a longer datagram, which the kernel cuts to the buffer.
    let mut buf = vec![0u8; max + 3];
    let counters = router.shared.counters.clone();
    loop {
        let first = tokio::select! {
            _ = shutdown.changed() => break,
            r = sock.recv_from(&mut buf) => r,
        };
        let now = wall_clock();
        let mut res = first;
        let mut n_read = 0;
        loop {
            match res {
                Ok((n, peer)) => {
                    counters.udp_datagrams.fetch_add(1, Ordering::Relaxed);
                    if !router.shared.admits(peer.ip(), "datagram") {
                        // (Not counted as the listener's message either.)
                    } else if n - line_end_len(&buf[..n]) > max {
                        listener.message(0, now);
                        router.oversized(Some(peer.ip()));
                    } else {
                        listener.message(n, now);
                        router.accept(&buf[..n], Some(peer.ip()), now);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    bump(&counters.read_errors, 1);
                    tracing::debug!(error = %e, "udp receive error");
                    break;
                }
            }
            n_read += 1;
            if n_read >= 4096 || router.full() {
                break;
            }
            res = sock.try_recv_from(&mut buf);
        }
        router.flush(false).await;
    }
    router.flush(false).await;
}

/// How a TCP listener hands connections to the ingest arbiters.
pub struct TcpIngest {
    /// Shared ingest state.
    pub shared: Arc<Shared>,
    /// The routing plan.
    pub plan_rx: watch::Receiver<Arc<RoutePlan>>,
    /// This listener's own counters.
    pub listener: Arc<ListenerCounters>,
    /// The shards' queues.
    pub txs: Vec<ShardTx>,
    /// Arbiters that run the connections (round robin).
    pub arbiters: Vec<actix::ArbiterHandle>,
    /// Open-connection budget.
    pub slots: Arc<Semaphore>,
    /// The open connections, for making room when the budget is spent.
    pub conns: Arc<Conns>,
}

/// How long a connection must have gone without delivering a message (since it opened)
/// before a new one may take its place when `max_connections` are open: such connections
/// go first, before any sender that delivered ([`EVICT_DELIVERED_AFTER_IDLE`]).
const EVICT_AFTER_IDLE: StdDuration = StdDuration::from_secs(1);

/// When none of those is left, a connection that delivered makes room once it has been
/// silent this long (the one silent longest): otherwise a few hosts that open their share of
/// connections and deliver one message on each lock every new sender out until the idle
/// timeout. A sender whose connection was closed so reconnects at its next message.
const EVICT_DELIVERED_AFTER_IDLE: StdDuration = StdDuration::from_secs(30);

/// The open TCP connections and when each opened, so that when `max_connections` are open a
/// new connection takes the place of the oldest among those that never delivered a message
/// (open for at least [`EVICT_AFTER_IDLE`]) instead of being refused: a flood of idle
/// connections, or of connections trickling bytes that never make a message (slowloris),
/// cannot lock real senders out; a sender that delivered is pushed out only when no such
/// connection is left and it has been silent for [`EVICT_DELIVERED_AFTER_IDLE`]. One
/// remote peer holds at most a quarter of the places, so neither can one host that keeps
/// many connections delivering now and then.
#[derive(Debug)]
pub struct Conns {
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next: AtomicU64,
    /// Open connections per remote peer (loopback peers are not counted).
    per_peer: Mutex<HashMap<std::net::IpAddr, usize>>,
    /// The most one remote peer may hold: a quarter of `syslog.max_connections` (at least
    /// one), so one host that opens connections and sends a message on each now and then
    /// cannot take every place from the others.
    peer_cap: usize,
}

/// One open connection's entry in [`Conns`].
#[derive(Debug, Default)]
struct Conn {
    /// When it opened, then when it last delivered, on [`Conns::now_ms`]'s clock.
    last: AtomicU64,
    /// Told to close, to make room.
    close: tokio::sync::Notify,
    /// It was told (not picked twice).
    told: std::sync::atomic::AtomicBool,
    /// It delivered a message: a real sender, evicted only after the others.
    delivered: std::sync::atomic::AtomicBool,
    /// Told to close whether or not it is delivering now (a place taken from a sender that
    /// delivered: [`Evicted::Silent`], [`Evicted::Share`]); otherwise a connection told while
    /// it delivers stays.
    binding: std::sync::atomic::AtomicBool,
    /// The remote peer it counts against (`None`: a local one).
    peer: Option<std::net::IpAddr>,
}

/// Why a connection was told to close to make room for a new one (see
/// [`Conns::evict_idlest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evicted {
    /// It never delivered a message and was silent for [`EVICT_AFTER_IDLE`].
    Idle,
    /// It delivered, and was silent for [`EVICT_DELIVERED_AFTER_IDLE`].
    Silent,
    /// Its peer held more places than the newcomer's: places are shared out between peers
    /// before a peer keeps more than its share.
    Share,
}

impl Conns {
    /// The open connections of a listener side allowed `max_connections` in all.
    pub fn new(max_connections: usize) -> Conns {
        Conns {
            open: Mutex::default(),
            next: AtomicU64::new(0),
            per_peer: Mutex::default(),
            peer_cap: (max_connections / 4).max(1),
        }
    }

    /// Registers a new connection from `peer`; it leaves when the guard drops. `None` when
    /// that peer holds its share already (a local peer, a relay on this host, has no cap).
    fn register(self: &Arc<Self>, peer: std::net::IpAddr) -> Option<ConnGuard> {
        // (An IPv6 host has a whole /64 to itself: counted as one.)
        let peer = match peer.to_canonical() {
            ip if ip.is_loopback() => None,
            std::net::IpAddr::V6(v6) => {
                let s = v6.segments();
                Some(std::net::IpAddr::V6(std::net::Ipv6Addr::new(
                    s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                )))
            }
            v4 => Some(v4),
        };
        if let Some(ip) = peer {
            let mut per_peer = self.per_peer.lock().ok()?;
            let n = per_peer.entry(ip).or_insert(0);
            if *n >= self.peer_cap {
                return None;
            }
            *n += 1;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            last: AtomicU64::new(super::mono_ms()),
            peer,
            ..Conn::default()
        });
        if let Ok(mut open) = self.open.lock() {
            open.insert(id, conn.clone());
        }
        Some(ConnGuard {
            conns: self.clone(),
            id,
            conn,
            peer,
        })
    }

    /// Tells a connection to close to make room for `new` (registered already), if one may
    /// ([`EVICT_AFTER_IDLE`], [`EVICT_DELIVERED_AFTER_IDLE`], a peer's share): why it was.
    fn evict_idlest(&self, new: &ConnGuard) -> Option<Evicted> {
        self.evict_idlest_at(super::mono_ms(), new.id, new.peer)
    }

    /// [`Conns::evict_idlest`] at `now` (ms on [`Conns::now_ms`]'s clock), for the newcomer
    /// `new_id` from `new` (`None`: a local peer), never itself: the one silent longest among those that never delivered,
    /// silent at least [`EVICT_AFTER_IDLE`]; else the one silent longest of all, silent at least
    /// [`EVICT_DELIVERED_AFTER_IDLE`]; else the one silent longest of the peer that holds the
    /// most places, if it holds more than the newcomer's peer (itself included): a few hosts
    /// that open their quarter each and deliver now and then cannot lock others out.
    fn evict_idlest_at(
        &self,
        now: u64,
        new_id: u64,
        new: Option<std::net::IpAddr>,
    ) -> Option<Evicted> {
        // (The peers' counts first, apart: the two locks are never held together.)
        // The peers holding the most places, when more than the newcomer's peer holds.
        let (heavy, held) = {
            let per_peer = self.per_peer.lock().ok()?;
            let newcomer = new.and_then(|ip| per_peer.get(&ip).copied()).unwrap_or(1);
            let most = per_peer.values().copied().max().unwrap_or(0);
            let heavy: Vec<std::net::IpAddr> = if most > newcomer {
                (per_peer.iter().filter(|&(_, &n)| n == most))
                    .map(|(&ip, _)| ip)
                    .collect()
            } else {
                Vec::new()
            };
            (heavy, most)
        };
        let open = self.open.lock().ok()?;
        let silent = |c: &Arc<Conn>| now.saturating_sub(c.last.load(Ordering::Relaxed));
        let silent_enough = |c: &Arc<Conn>, min: StdDuration| silent(c) >= min.as_millis() as u64;
        // (The newcomer, registered already and silent since it opened, is not a candidate:
        // it would stand for "young connections that never delivered" and refuse itself.)
        let others = || open.iter().filter(|&(&id, _)| id != new_id).map(|(_, c)| c);
        let idlest = |delivered: bool| {
            others()
                .filter(|c| {
                    c.delivered.load(Ordering::Relaxed) == delivered
                        && !c.told.load(Ordering::Relaxed)
                })
                .max_by_key(|c| silent(c))
        };
        let (c, why) = match idlest(false) {
            Some(c) if silent_enough(c, EVICT_AFTER_IDLE) => (c, Evicted::Idle),
            // Connections that never delivered, all too young yet (a flood of new ones): the
            // newcomer is refused rather than a real sender pushed out.
            Some(_) => return None,
            None => match idlest(true).filter(|c| silent_enough(c, EVICT_DELIVERED_AFTER_IDLE)) {
                Some(c) => (c, Evicted::Silent),
                None => {
                    // The one silent longest of theirs.
                    let c = others()
                        .filter(|c| {
                            c.peer.is_some_and(|p| heavy.contains(&p))
                                && !c.told.load(Ordering::Relaxed)
                        })
                        .max_by_key(|c| silent(c))?;
                    tracing::debug!(peer = ?c.peer, held, "a peer's place given to a newcomer");
                    (c, Evicted::Share)
                }
            },
        };
        c.binding.store(why != Evicted::Idle, Ordering::Relaxed);
        c.told.store(true, Ordering::Relaxed);
        c.close.notify_one();
        Some(why)
    }
}

/// A connection's registration in [`Conns`]; it unregisters when dropped.
struct ConnGuard {
    conns: Arc<Conns>,
    id: u64,
    conn: Arc<Conn>,
    /// The remote peer it counts against (`None`: a local one).
    peer: Option<std::net::IpAddr>,
}

impl ConnGuard {
    /// It made progress now (delivered).
    fn touch(&self) {
        self.conn.last.store(super::mono_ms(), Ordering::Relaxed);
    }

    /// It delivered a message: evicted only when no silent connection that never did is left.
    fn delivered(&self) {
        self.conn.delivered.store(true, Ordering::Relaxed);
    }

    /// How long since it opened or last delivered.
    fn silent_for(&self) -> StdDuration {
        StdDuration::from_millis(
            super::mono_ms().saturating_sub(self.conn.last.load(Ordering::Relaxed)),
        )
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if let Ok(mut open) = self.conns.open.lock() {
            open.remove(&self.id);
        }
        if let (Some(ip), Ok(mut per_peer)) = (self.peer, self.conns.per_peer.lock())
            && let Some(n) = per_peer.get_mut(&ip)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per_peer.remove(&ip);
            }
        }
    }
}

/// Accepts TCP connections until shutdown.
pub async fn tcp_accept_loop(
    listener: TcpListener,
    ing: TcpIngest,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut next = 0usize;
    // At shutdown: the connections the kernel completed already (their senders may have sent
    // and been acknowledged) are still taken and read, up to this many; then it ends.
    let mut stopping: Option<usize> = None;
    loop {
        if let Some(left) = stopping.as_mut() {
            use futures_util::FutureExt as _;
            let pending = if *left > 0 {
                listener.accept().now_or_never()
            } else {
                None
            };
            *left = left.saturating_sub(1);
            let Some(Ok((stream, peer))) = pending else {
                break;
            };
            admit_connection(&ing, stream, peer, &shutdown, &mut next).await;
            continue;
        }
        let (stream, peer) = tokio::select! {
            _ = shutdown.changed() => {
                stopping = Some(ing.slots.available_permits().max(1));
                continue;
            }
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    bump(&ing.shared.counters.read_errors, 1);
                    if let Some(held) = ing.shared.limits.connection.allow() {
                        tracing::warn!(error = %e, suppressed = held, "tcp accept failed");
                    }
                    // EMFILE and friends: do not spin.
                    tokio::time::sleep(StdDuration::from_millis(50)).await;
                    continue;
                }
            },
        };
        admit_connection(&ing, stream, peer, &shutdown, &mut next).await;
    }
}

/// Takes an accepted connection, if its sender may send and a place is free (or made), and
/// reads it on an ingest arbiter (the `next` one, in turn).
async fn admit_connection(
    ing: &TcpIngest,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    shutdown: &watch::Receiver<bool>,
    next: &mut usize,
) {
    if !ing.shared.admits(peer.ip(), "connection") {
        drop(stream);
        return;
    }
    let Some(guard) = ing.conns.register(peer.ip()) else {
        bump(&ing.shared.counters.tcp_rejected, 1);
        if let Some(held) = ing.shared.limits.connection.allow() {
            tracing::warn!(%peer, suppressed = held, "too many tcp connections from this peer (a quarter of syslog.max_connections): refused");
        }
        drop(stream);
        return;
    };
    let mut permit = ing.slots.clone().try_acquire_owned().ok();
    if permit.is_none()
        && let Some(why) = ing.conns.evict_idlest(&guard)
    {
        // The evicted connection's task ends and hands its permit back.
        bump(&ing.shared.counters.tcp_evicted, 1);
        let said = match why {
            Evicted::Idle => None,
            Evicted::Silent => Some(
                "all tcp connections are taken (syslog.max_connections) and each delivered: the one silent longest (30 s or more) is closed for a new sender; its sender reconnects at its next message",
            ),
            Evicted::Share => Some(
                "all tcp connections are taken (syslog.max_connections), each delivered within 30 s: one of the peer holding the most is closed for a sender from a peer holding fewer; its sender reconnects at its next message",
            ),
        };
        if let Some(said) = said
            && let Some(held) = ing.shared.limits.connection.allow()
        {
            tracing::warn!(%peer, suppressed = held, "{said}");
        }
        permit = tokio::time::timeout(
            StdDuration::from_millis(500),
            ing.slots.clone().acquire_owned(),
        )
        .await
        .ok()
        .and_then(Result::ok);
    }
    let Some(permit) = permit else {
        bump(&ing.shared.counters.tcp_rejected, 1);
        if let Some(held) = ing.shared.limits.connection.allow() {
            tracing::warn!(%peer, suppressed = held, "too many tcp connections (syslog.max_connections): refused");
        }
        drop(stream);
        return;
    };
    bump(&ing.shared.counters.tcp_connections, 1);
    bump(&ing.listener.connections, 1);
    // A sender that went away without closing (rebooted, cable cut) is found within
    // about 2.5 minutes, not at the idle timeout: its place (and its share of its host's
    // places) comes back sooner.
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(StdDuration::from_secs(60))
        .with_interval(StdDuration::from_secs(10));
    if let Err(e) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive) {
        tracing::debug!(%peer, error = %e, "tcp keepalive not set");
    }
    let std_stream = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "tcp stream handoff failed");
            return;
        }
    };
    let router = Router::new(ing.shared.clone(), ing.plan_rx.clone(), ing.txs.clone());
    let shutdown = shutdown.clone();
    let counted = ing.listener.clone();
    let arb = &ing.arbiters[*next % ing.arbiters.len().max(1)];
    *next = next.wrapping_add(1);
    let spawned = arb.spawn(async move {
        match TcpStream::from_std(std_stream) {
            Ok(s) => tcp_conn(s, peer, router, &counted, shutdown, &guard).await,
            Err(e) => tracing::debug!(error = %e, "tcp stream handoff failed"),
        }
        drop(permit);
    });
    if !spawned {
        tracing::error!("ingest arbiter is gone; connection dropped");
    }
}

/// At shutdown, the longest a TCP connection is still read, and the quiet that ends it sooner.
const SHUTDOWN_DRAIN: StdDuration = StdDuration::from_millis(1500);

/// A sender's connection closed to make room is read for at most this long first (within the
/// newcomer's wait for its place), so that what it sent before it was told is not lost.
const EVICT_DRAIN: StdDuration = StdDuration::from_millis(300);
const SHUTDOWN_QUIET: StdDuration = StdDuration::from_millis(100);

/// Reads one TCP connection: frames, parses, routes; closes on EOF, idleness, or shutdown
/// (after reading what was already sent).
async fn tcp_conn(
    mut stream: TcpStream,
    peer: SocketAddr,
    mut router: Router,
    listener: &ListenerCounters,
    mut shutdown: watch::Receiver<bool>,
    guard: &ConnGuard,
) {
    let shared = router.shared.clone();
    let mut framer = Framer::new(shared.max_message);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let ip = Some(peer.ip());
    // Shutdown: what the sender already sent is read and delivered before the connection is
    // dropped (the kernel acknowledged it; rsyslog and syslog-ng keep their connections
    // open), until the stream is quiet for a moment, within a bound.
    // (Taken while the agent stops already: drained at once.)
    let mut draining: Option<std::time::Instant> =
        (*shutdown.borrow()).then(std::time::Instant::now);
    // How long a drain lasts: SHUTDOWN_DRAIN, or EVICT_DRAIN for a connection closed to make
    // room.
    let mut drain_for = SHUTDOWN_DRAIN;
    // When it last completed a message (or opened): bytes that never make one are no
    // progress, so a sender that trickles them is closed after the idle timeout like a
    // silent one (else a delivered-then-trickling connection held its slot for good).
    let mut last_message = std::time::Instant::now();
    loop {
        if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(64 * 1024);
        }
        let read = if let Some(since) = draining {
            if since.elapsed() >= drain_for {
                break;
            }
            match tokio::time::timeout(SHUTDOWN_QUIET, stream.read_buf(&mut buf)).await {
                // Quiet: all that was sent is in; the agent closes it, and a message it had
                // not finished is dropped, as at an idle close (`Err(false)`).
                Err(_) => Err(false),
                Ok(r) => Ok(r),
            }
        } else {
            tokio::select! {
            _ = shutdown.changed() => {
                draining = Some(std::time::Instant::now());
                continue;
            }
            _ = guard.conn.close.notified() => {
                // Told while it was delivering (a full shard queue): it is not idle, it stays.
                let binding = guard.conn.binding.load(Ordering::Relaxed);
                if !binding && guard.silent_for() < EVICT_AFTER_IDLE {
                    guard.conn.told.store(false, Ordering::Relaxed);
                    continue;
                }
                if binding {
                    // A sender: what it sent is read first (the kernel acknowledged it),
                    // briefly, then it is closed as at shutdown.
                    tracing::debug!(%peer, "tcp connection of a sender closed to make room for a new one");
                    draining = Some(std::time::Instant::now());
                    drain_for = EVICT_DRAIN;
                    continue;
                }
                tracing::debug!(%peer, "idle tcp connection closed to make room for a new one");
                // Closed by the agent, as at an idle close (what it sent after its last message
                // is dropped, counted below).
                Err(false)
            }
            r = tokio::time::timeout(shared.idle, stream.read_buf(&mut buf)) => r.map_err(|_| true),
            }
        };
        // (Bytes are no progress: a connection that trickles bytes but never completes a
        // message stays as evictable as a silent one.)
        let now = wall_clock();
        // Closed by us (idle, evicted, or stopping): what it sent after its last complete message is a
        // message it did not finish (not one it ended by closing), dropped.
        let mut closed_by_us = false;
        let mut eof = match read {
            Err(idle) => {
                if idle {
                    bump(&shared.counters.tcp_idle_closed, 1);
                    tracing::debug!(%peer, "idle tcp connection closed");
                }
                closed_by_us = true;
                true
            }
            Ok(Ok(0)) => true,
            Ok(Ok(_)) => false,
            Ok(Err(e)) => {
                bump(&shared.counters.read_errors, 1);
                tracing::debug!(%peer, error = %e, "tcp read error");
                break;
            }
        };
        let mut fatal = false;
        // Whether this read delivered a message (bytes alone are no progress: a connection
        // that delivered once and then trickles bytes must still go silent for eviction).
        let mut delivered_now = false;
        while let Some(f) = framer.decode(&mut buf) {
            match f {
                Frame::Msg(m) => {
                    last_message = std::time::Instant::now();
                    bump(&shared.counters.tcp_frames, 1);
                    listener.message(m.len(), now);
                    if router.accept(&m, ip, now) {
                        guard.delivered();
                        delivered_now = true;
                    }
                }
                Frame::Oversized => {
                    last_message = std::time::Instant::now();
                    listener.message(0, now);
                    router.oversized(ip);
                }
                // (Only at the stream's end, from `finish`.)
                Frame::Unfinished => bump(&shared.counters.tcp_unfinished, 1),
                Frame::Resynced => {
                    bump(&shared.counters.tcp_resynced, 1);
                    if let Some(held) = shared.limits.connection.allow() {
                        tracing::warn!(%peer, suppressed = held, "tcp stream lost its octet counting (a wrong count, or a stray partial line): the bytes up to the next frame dropped, the frames after it read on");
                    }
                }
                Frame::Fatal(why) => {
                    bump(&shared.counters.tcp_unframeable, 1);
                    if let Some(held) = shared.limits.connection.allow() {
                        tracing::warn!(%peer, suppressed = held, "tcp stream lost its framing ({why}): connection closed (the sender reconnects and goes on)");
                    }
                    fatal = true;
                    break;
                }
            }
            if router.full() {
                router.flush(true).await;
            }
        }
        // Bytes, but no message completed for the idle timeout, this read's included.
        if !eof && !fatal && draining.is_none() && last_message.elapsed() >= shared.idle {
            bump(&shared.counters.tcp_idle_closed, 1);
            tracing::debug!(%peer, "tcp connection closed: bytes but no message for the idle timeout");
            closed_by_us = true;
            eof = true;
        }
        if eof && !fatal && closed_by_us {
            if !buf.trim_ascii().is_empty() {
                bump(&shared.counters.tcp_unfinished, 1);
                tracing::debug!(%peer, bytes = buf.len(), "unfinished message of a tcp connection the agent closed (idle, evicted, or stopping) dropped");
            }
        } else if eof && !fatal {
            while let Some(fr) = framer.finish(&mut buf) {
                match fr {
                    Frame::Msg(m) => {
                        bump(&shared.counters.tcp_frames, 1);
                        listener.message(m.len(), now);
                        delivered_now |= router.accept(&m, ip, now);
                    }
                    Frame::Oversized => {
                        listener.message(0, now);
                        router.oversized(ip);
                    }
                    Frame::Unfinished => {
                        bump(&shared.counters.tcp_unfinished, 1);
                        tracing::debug!(%peer, "a counted message the sender's close cut short dropped");
                    }
                    Frame::Fatal(_) => break,
                    Frame::Resynced => {}
                }
            }
        }
        router.flush(true).await;
        // Delivered now (perhaps after waiting on a full shard queue): not idle.
        if delivered_now {
            guard.touch();
        }
        if eof || fatal {
            break;
        }
    }
    router.flush(true).await;
}

/// The length of the line end a datagram closes with (`\n` or `\r\n`; 0 for none): not part
/// of the message, so a message of the maximum size is whole with or without one.
fn line_end_len(d: &[u8]) -> usize {
    match d {
        [.., b'\r', b'\n'] => 2,
        [.., b'\n'] => 1,
        _ => 0,
    }
}

/// A sender for a log line: its address, or `-` for a line read from a file.
fn show_peer(peer: Option<IpAddr>) -> String {
    peer.map_or_else(|| "-".to_string(), |p| p.to_string())
}

/// Runs a live capture on the current (plain) thread until shutdown: packets become flow
/// events through the flow table and are routed like syslog events. Syslog seen on the wire
/// is read too with `syslog` (`capture.syslog`: a mirror port), else left alone (it arrives
/// through the syslog sockets).
pub fn capture_loop(
    cap: crate::flow::live::LiveCapture,
    mut router: Router,
    shutdown: watch::Receiver<bool>,
    counters: Arc<CaptureCounters>,
    syslog: bool,
) {
    use crate::flow::{FlowEngine, FlowItem, table::FlowConfig};
    let mut flows = if syslog {
        FlowEngine::new(FlowConfig::default())
    } else {
        FlowEngine::flows_only(FlowConfig::default())
    };
    let mut items = Vec::new();
    let mut last_flush = std::time::Instant::now();
    let mut last_count = std::time::Instant::now();
    while !*shutdown.borrow() {
        if last_count.elapsed() >= StdDuration::from_millis(250) {
            publish_capture(cap.stats(), &flows, &counters);
            last_count = std::time::Instant::now();
        }
        match cap.recv_timeout(StdDuration::from_millis(100)) {
            Ok(Some(pkt)) => flows.push_items(&pkt.as_raw(), &mut items),
            Ok(None) => flows.advance_items(wall_clock(), &mut items),
            Err(()) => {
                tracing::error!("live capture stopped");
                break;
            }
        }
        for it in items.drain(..) {
            match it {
                FlowItem::Flow(ev) => router.accept_event(ev),
                // Parsed, deduplicated and counted as a datagram from its sender would be.
                FlowItem::Syslog(d) => {
                    router.accept(&d.payload, Some(d.src), d.time);
                }
            }
            // A burst (every flow whose timer ran out while the shards held this thread up:
            // up to `max_flows`) goes in batches of the queues' size, not as one.
            if router.full() {
                router.flush_blocking();
                last_flush = std::time::Instant::now();
            }
        }
        if router.full() || last_flush.elapsed() >= StdDuration::from_millis(50) {
            router.flush_blocking();
            last_flush = std::time::Instant::now();
        }
    }
    router.flush_blocking();
    let stats = cap.stop();
    publish_capture(&stats, &flows, &counters);
}

/// Copies the capture thread's and the flow table's counters where /stats reads them.
fn publish_capture(
    live: &crate::flow::live::LiveStats,
    flows: &crate::flow::FlowEngine,
    out: &CaptureCounters,
) {
    let f = flows.counters();
    let set = |c: &AtomicU64, v: u64| c.store(v, Ordering::Relaxed);
    set(&out.received, live.received.load(Ordering::Relaxed));
    set(&out.filtered, live.filtered.load(Ordering::Relaxed));
    set(&out.dropped, live.dropped.load(Ordering::Relaxed));
    set(
        &out.kernel_dropped,
        live.kernel_dropped.load(Ordering::Relaxed),
    );
    set(
        &out.loopback_duplicates,
        live.duplicates.load(Ordering::Relaxed),
    );
    set(&out.decoded, f.decoded);
    set(&out.truncated, f.truncated);
    set(&out.malformed, f.malformed);
    set(&out.non_ip, f.non_ip);
    set(&out.flows, f.flows);
    set(&out.evicted, f.evicted);
    set(&out.out_of_order, f.out_of_order);
    set(&out.orphan_fragments, f.orphan_fragments);
    set(&out.reopened, live.reopened.load(Ordering::Relaxed));
    set(&out.down, u64::from(live.down.load(Ordering::Relaxed)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_that_delivered_makes_room_only_after_the_others_and_30_s_of_silence() {
        #![allow(clippy::unwrap_used)]
        let conns = Arc::new(Conns::new(8));
        let local: std::net::IpAddr = [127, 0, 0, 1].into();
        let (a, b, c) = (
            conns.register(local).unwrap(),
            conns.register(local).unwrap(),
            conns.register(local).unwrap(),
        );
        for (g, last) in [(&a, 1_000), (&b, 2_000), (&c, 3_000)] {
            g.conn.last.store(last, Ordering::Relaxed);
        }
        a.delivered();
        b.delivered();
        // c never delivered: it goes first, once silent 1 s, though a is silent longer; until
        // then no sender that delivered is pushed out for a newcomer either.
        assert_eq!(conns.evict_idlest_at(3_500, u64::MAX, None), None);
        assert_eq!(conns.evict_idlest_at(3_900, u64::MAX, None), None);
        assert_eq!(
            conns.evict_idlest_at(4_000, u64::MAX, None),
            Some(Evicted::Idle)
        );
        assert!(c.conn.told.load(Ordering::Relaxed));
        // (One that never delivered stays if it delivers before it is closed.)
        assert!(!c.conn.binding.load(Ordering::Relaxed));
        // Then the one silent longest of those that delivered, once silent 30 s.
        assert_eq!(conns.evict_idlest_at(30_000, u64::MAX, None), None);
        assert_eq!(
            conns.evict_idlest_at(31_000, u64::MAX, None),
            Some(Evicted::Silent)
        );
        assert!(a.conn.told.load(Ordering::Relaxed));
        assert!(a.conn.binding.load(Ordering::Relaxed));
        assert!(!b.conn.told.load(Ordering::Relaxed));
        assert_eq!(conns.evict_idlest_at(31_500, u64::MAX, None), None);
        // A flood of new connections, too young to go: no sender that delivered goes instead.
        let d = conns.register(local).unwrap();
        d.conn.last.store(60_000, Ordering::Relaxed);
        assert_eq!(conns.evict_idlest_at(60_500, u64::MAX, None), None);
        assert!(!b.conn.told.load(Ordering::Relaxed));
        assert_eq!(
            conns.evict_idlest_at(61_000, u64::MAX, None),
            Some(Evicted::Idle)
        );
    }

    /// The newcomer is registered before room is made for it, and has delivered nothing yet:
    /// it is no candidate, so it does not stand for "young connections that never delivered"
    /// and get itself refused while a sender silent 30 s could make room (it did: the 30 s
    /// rule never ran for a real newcomer).
    #[test]
    fn the_newcomer_is_not_its_own_reason_to_be_refused() {
        #![allow(clippy::unwrap_used)]
        let conns = Arc::new(Conns::new(2));
        let local: std::net::IpAddr = [127, 0, 0, 1].into();
        let old = conns.register(local).unwrap();
        old.delivered();
        old.conn.last.store(1_000, Ordering::Relaxed);
        let new = conns.register(local).unwrap();
        new.conn.last.store(40_000, Ordering::Relaxed);
        assert_eq!(
            conns.evict_idlest_at(40_000, new.id, new.peer),
            Some(Evicted::Silent)
        );
        assert!(old.conn.told.load(Ordering::Relaxed));
        assert!(!new.conn.told.load(Ordering::Relaxed));
    }

    /// Four peers that hold their quarter each and deliver now and then (never silent 30 s)
    /// do not lock a fifth out: a place of the peer holding the most goes to the newcomer's
    /// peer while that holds fewer, and no further.
    #[test]
    fn peers_holding_their_quarter_each_make_room_for_a_new_peer() {
        #![allow(clippy::unwrap_used)]
        let conns = Arc::new(Conns::new(8));
        let peer = |i: u8| -> std::net::IpAddr { [192, 0, 2, i].into() };
        let mut held = Vec::new();
        for i in 1..=4u8 {
            for k in 0..2u64 {
                let g = conns.register(peer(i)).unwrap();
                g.delivered();
                g.conn.last.store(u64::from(i) * 100 + k, Ordering::Relaxed);
                held.push(g);
            }
        }
        // All delivered within 30 s: before, the newcomer was refused.
        let new = conns.register(peer(5)).unwrap();
        assert_eq!(
            conns.evict_idlest_at(10_000, new.id, new.peer),
            Some(Evicted::Share)
        );
        // The one silent longest of a peer holding two: peer 1's first.
        let told: Vec<usize> = (held.iter().enumerate())
            .filter(|(_, g)| g.conn.told.load(Ordering::Relaxed))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(told, [0]);
        // Its task ends (its guard drops); the newcomer takes the place.
        held.remove(0);
        new.delivered();
        new.conn.last.store(9_000, Ordering::Relaxed);
        held.push(new);
        // A second from peer 5 (holding two with it) finds no peer holding more: refused.
        let again = conns.register(peer(5)).unwrap();
        assert_eq!(conns.evict_idlest_at(10_000, again.id, again.peer), None);
        drop(again);
        // A local newcomer (a relay on this host, counted as one) may take from a peer
        // holding two.
        assert_eq!(
            conns.evict_idlest_at(10_000, u64::MAX, None),
            Some(Evicted::Share)
        );
    }

    #[test]
    fn one_remote_peer_holds_at_most_a_quarter_of_the_places() {
        let conns = Arc::new(Conns::new(8));
        let remote: std::net::IpAddr = [192, 0, 2, 7].into();
        let other: std::net::IpAddr = [192, 0, 2, 8].into();
        let a = conns.register(remote);
        let b = conns.register(remote);
        assert!(a.is_some() && b.is_some());
        assert!(conns.register(remote).is_none(), "a third from one peer");
        assert!(
            conns.register(other).is_some(),
            "another peer still gets in"
        );
        drop(a);
        assert!(
            conns.register(remote).is_some(),
            "a place freed is its own again"
        );
        // A local peer (a relay on this host) is not capped.
        let local: Vec<_> = (0..20)
            .map(|_| conns.register([127, 0, 0, 1].into()))
            .collect();
        assert!(local.iter().all(Option::is_some));
        let ip = |s: &str| -> std::net::IpAddr { s.parse().unwrap_or_else(|_| unreachable!()) };
        assert!(conns.register(ip("::ffff:127.0.0.1")).is_some());
        // One peer however it is written, and an IPv6 host is its /64.
        let c = [
            conns.register(ip("::ffff:192.0.2.8")),
            conns.register(ip("192.0.2.8")),
        ];
        assert!(c.iter().all(Option::is_some));
        assert!(
            conns.register(ip("192.0.2.8")).is_none(),
            "mapped and plain are one"
        );
        let v6: Vec<_> = ["2001:db8::1", "2001:db8::2"]
            .iter()
            .map(|a| conns.register(ip(a)))
            .collect();
        assert!(v6.iter().all(Option::is_some));
        assert!(conns.register(ip("2001:db8::ffff")).is_none(), "same /64");
        assert!(
            conns.register(ip("2001:db8:0:1::1")).is_some(),
            "another /64"
        );
        drop(b);
    }
}
