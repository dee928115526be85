//! Live capture on a named interface with pnet_datalink (AF_PACKET), on its own thread.
//!
//! The thread reads frames (`poll` + `recv`, one per call), stamps them with the wall clock,
//! applies the [`Filter`] and sends owned copies into a bounded channel; when the consumer falls
//! behind, frames are dropped and counted rather than queued without limit. Opening the socket
//! needs root or `CAP_NET_RAW` ([`LiveError::Permission`] says so).
//!
//! On a loopback interface pnet sees every frame twice (outgoing and incoming, STACK.md §4) and
//! does not expose the packet type to tell them apart: there the second copy of a frame, the
//! same bytes within [`LOOPBACK_TWIN_WINDOW`] of the first, is dropped and counted
//! (`duplicates`), as DESIGN.md asks of "a packet seen twice on loopback". Each frame pairs with
//! one copy at most, so a frame really sent twice is still seen twice.
//!
//! The packet socket is opened here and handed to pnet, with a second descriptor of it kept to
//! read the kernel's statistics (`PACKET_STATISTICS`): the frames the kernel dropped because
//! the socket's buffer was full before the thread read them (`kernel_dropped`), the loss an
//! operator cannot see in any other counter of ours.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration as StdDuration, SystemTime, UNIX_EPOCH};

use cepheus_core::time::Timestamp;

use super::capture::RawPacket;
use super::decode::{Decoded, decode, linktype};
use super::filter::Filter;

/// Errors starting a live capture.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// No interface of that name (the second: the names there are, to pick from).
    #[error("no network interface named {0:?} here (this host has: {1}; `ip link` lists them)")]
    NoSuchInterface(String, String),
    /// The process may not open a packet socket.
    #[error(
        "cannot capture on {iface}: permission denied; live capture needs root or CAP_NET_RAW \
         (e.g. `setcap cap_net_raw+ep cepheus`, or AmbientCapabilities=CAP_NET_RAW in the unit)"
    )]
    Permission {
        /// The interface.
        iface: String,
    },
    /// Any other failure opening the channel.
    #[error("cannot capture on {iface}: {source}")]
    Io {
        /// The interface.
        iface: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// pnet returned a channel type other than Ethernet.
    #[error("interface {0:?} does not give an Ethernet channel")]
    NotEthernet(String),
}

/// The largest frame read from the socket (loopback's MTU is 65,536; a longer one is cut).
const READ_BUFFER: usize = 65_536;

/// One frame captured live (owned; it crossed a thread).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LivePacket {
    /// Wall-clock stamp taken when the frame was read.
    pub ts: Timestamp,
    /// The frame (Ethernet).
    pub data: Vec<u8>,
}

impl LivePacket {
    /// A borrowed view for [`super::FlowEngine::push`].
    pub fn as_raw(&self) -> RawPacket<'_> {
        RawPacket {
            ts: self.ts,
            linktype: linktype::ETHERNET,
            // A frame that filled the read buffer may have been cut (its length on the wire
            // is unknown): said to be longer, so its headers' lengths are believed.
            orig_len: self.data.len() as u32 + u32::from(self.data.len() >= READ_BUFFER),
            data: &self.data,
        }
    }
}

/// Counters of the capture thread.
#[derive(Debug, Default)]
pub struct LiveStats {
    /// Frames read from the socket.
    pub received: AtomicU64,
    /// Frames rejected by the filter.
    pub filtered: AtomicU64,
    /// Frames dropped because the channel was full.
    pub dropped: AtomicU64,
    /// Frames the kernel dropped before the thread read them (the socket's buffer was full).
    pub kernel_dropped: AtomicU64,
    /// Second copies of loopback frames, dropped (see the module doc).
    pub duplicates: AtomicU64,
    /// The socket failed and is not open again yet ([`Recovery::Reopen`]).
    pub down: AtomicBool,
    /// Times the interface was opened again after its socket failed.
    pub reopened: AtomicU64,
    /// Why it stopped ([`Recovery::Stop`]).
    pub failed: std::sync::Mutex<Option<String>>,
}

/// Opens `iface` again every [`REOPEN_EVERY`] until it can, or `stop` is set (`None`).
fn reopen(iface: &str, stop: &AtomicBool) -> Option<Opened> {
    loop {
        let until = std::time::Instant::now() + REOPEN_EVERY;
        while std::time::Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            std::thread::sleep(StdDuration::from_millis(100));
        }
        match open(iface) {
            // (A socket opened on an interface still down fails at once again: it is only
            // kept once the interface is up.)
            Ok(o) if o.up => return Some(o),
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "capture not open again yet"),
        }
    }
}

/// How far apart the two copies of one loopback frame may be (they are microseconds apart).
pub const LOOPBACK_TWIN_WINDOW: StdDuration = StdDuration::from_millis(20);

/// Loopback frames waiting for their second copy: (hash of the bytes, length, when seen).
#[derive(Default)]
struct Twins {
    waiting: std::collections::VecDeque<(u64, usize, std::time::Instant)>,
}

impl Twins {
    /// Frames waiting at most (older ones go first).
    const CAP: usize = 256;

    /// Whether `frame` is the second copy of a frame seen within the window (then the pair is
    /// done); otherwise it waits for its own copy.
    fn is_second_copy(&mut self, frame: &[u8], now: std::time::Instant) -> bool {
        use std::hash::{BuildHasher as _, BuildHasherDefault};
        let h = BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(frame);
        while let Some(&(_, _, t)) = self.waiting.front() {
            if now.duration_since(t) > LOOPBACK_TWIN_WINDOW || self.waiting.len() >= Self::CAP {
                self.waiting.pop_front();
            } else {
                break;
            }
        }
        if let Some(i) = self
            .waiting
            .iter()
            .position(|&(wh, len, _)| wh == h && len == frame.len())
        {
            self.waiting.remove(i);
            return true;
        }
        self.waiting.push_back((h, frame.len(), now));
        false
    }
}

/// A running capture: receive frames from [`LiveCapture::recv_timeout`]; dropping it stops it.
pub struct LiveCapture {
    rx: Receiver<LivePacket>,
    /// Bytes of the frames in the channel (at most [`CHANNEL_BYTES`]).
    queued: Arc<std::sync::atomic::AtomicUsize>,
    stop: Arc<AtomicBool>,
    stats: Arc<LiveStats>,
    thread: Option<JoinHandle<()>>,
}

/// Frames the channel holds before the capture thread starts dropping.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 65_536;

/// Bytes of frames the channel holds before the capture thread starts dropping: frames are
/// up to 64 KiB where the interface merges them (GRO), and 65,536 of those are 4 GiB.
pub const CHANNEL_BYTES: usize = 128 << 20;

/// How long a capture that stopped (its interface went down or was removed) waits before it
/// opens its interface again, when it is kept going ([`Recovery::Reopen`]).
pub const REOPEN_EVERY: StdDuration = StdDuration::from_secs(5);

/// What a capture does when its socket fails (the interface went down, or was removed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Ends (`cepheus flows -i`: the failure is said, and the run ends with it).
    Stop,
    /// Opens the interface again every [`REOPEN_EVERY`] until it can (the agent: a mirror port
    /// that goes down and comes back is watched again), said in the log and counted.
    Reopen,
}

/// A packet socket opened on an interface.
struct Opened {
    rx: Box<dyn pnet_datalink::DataLinkReceiver>,
    /// A second descriptor of the socket `rx` reads, for its statistics ([`kernel_drops`]).
    stats_fd: rustix::fd::OwnedFd,
    /// The interface is a loopback one (see the module doc).
    loopback: bool,
    /// The interface was up when opened.
    up: bool,
}

/// Whether an interface named `iface` is there ([`LiveError::NoSuchInterface`] naming those
/// that are, if not).
pub fn interface_exists(iface: &str) -> Result<(), LiveError> {
    find_interface(iface).map(|_| ())
}

/// The interface named `iface` (the interfaces listed once, also for the error).
fn find_interface(iface: &str) -> Result<pnet_datalink::NetworkInterface, LiveError> {
    let mut all = pnet_datalink::interfaces();
    let Some(at) = all.iter().position(|i| i.name == iface) else {
        let names: Vec<String> = all.into_iter().map(|i| i.name).collect();
        return Err(LiveError::NoSuchInterface(
            iface.to_string(),
            names.join(", "),
        ));
    };
    Ok(all.swap_remove(at))
}

/// Opens a packet socket on `iface`.
fn open(iface: &str) -> Result<Opened, LiveError> {
    let ni = find_interface(iface)?;
    let refused = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::PermissionDenied => LiveError::Permission {
            iface: iface.to_string(),
        },
        _ => LiveError::Io {
            iface: iface.to_string(),
            source: e,
        },
    };
    // The socket pnet would open (every protocol, raw frames), opened here so that a second
    // descriptor of it can read its statistics; pnet owns the first and closes it.
    let sock = rustix::net::socket_with(
        rustix::net::AddressFamily::PACKET,
        rustix::net::SocketType::RAW,
        rustix::net::SocketFlags::CLOEXEC,
        Some(rustix::net::eth::ALL),
    )
    .map_err(|e| refused(e.into()))?;
    let stats_fd = rustix::io::fcntl_dupfd_cloexec(&sock, 0).map_err(|e| refused(e.into()))?;
    let cfg = pnet_datalink::Config {
        read_timeout: Some(StdDuration::from_millis(100)),
        read_buffer_size: READ_BUFFER,
        promiscuous: true,
        socket_fd: Some(std::os::fd::IntoRawFd::into_raw_fd(sock)),
        ..Default::default()
    };
    match pnet_datalink::channel(&ni, cfg) {
        Ok(pnet_datalink::Channel::Ethernet(_tx, rx)) => Ok(Opened {
            rx,
            stats_fd,
            loopback: ni.is_loopback(),
            up: ni.is_up(),
        }),
        Ok(_) => Err(LiveError::NotEthernet(iface.to_string())),
        Err(e) => Err(refused(e)),
    }
}

/// The frames the kernel dropped on the packet socket `fd` since the last call (the kernel
/// zeroes its statistics as they are read); `None` if it would not say.
fn kernel_drops(fd: &rustix::fd::OwnedFd) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let mut st = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: `fd` is an open descriptor we own for the whole call; the kernel writes at most
    // `len` bytes into `st`, a `tpacket_stats` of exactly that size, and `len` back.
    #[allow(
        unsafe_code,
        reason = "PACKET_STATISTICS has no safe wrapper in rustix or pnet"
    )]
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&raw mut st).cast::<libc::c_void>(),
            &raw mut len,
        )
    };
    (rc == 0).then_some(u64::from(st.tp_drops))
}

/// How often the capture thread reads the kernel's drop count.
const KERNEL_STATS_EVERY: StdDuration = StdDuration::from_secs(1);

/// Why a capture's socket failed, in an operator's words (pnet says "Unexpected poll event"
/// when the interface went down or away).
fn failure(iface: &str, e: &std::io::Error) -> String {
    let gone = !pnet_datalink::interfaces().iter().any(|i| i.name == iface);
    let why = if gone {
        "the interface was removed"
    } else {
        "the interface went down"
    };
    format!("capture on {iface} stopped: {why} ({e})")
}

impl LiveCapture {
    /// Opens `iface` and starts the capture thread; `recovery` says what it does if the
    /// socket fails later.
    pub fn start(
        iface: &str,
        filter: Filter,
        capacity: usize,
        recovery: Recovery,
    ) -> Result<LiveCapture, LiveError> {
        // An interface not there yet (a mirror port's NIC whose driver or bridge comes up
        // after the agent) is waited for as one that went away is, when the capture is kept
        // going: starting would otherwise fail for good.
        let first = match open(iface) {
            Ok(o) => Some(o),
            Err(LiveError::NoSuchInterface(..)) if recovery == Recovery::Reopen => None,
            Err(e) => return Err(e),
        };
        let (tx, chan_rx): (SyncSender<LivePacket>, _) = sync_channel(capacity.max(1));
        let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let queued2 = queued.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(LiveStats::default());
        stats.down.store(first.is_none(), Ordering::Relaxed);
        let (stop2, stats2, name) = (stop.clone(), stats.clone(), iface.to_string());
        let thread = std::thread::Builder::new()
            .name(format!("capture-{iface}"))
            .spawn(move || {
                let first = match first {
                    Some(o) => o,
                    None => {
                        tracing::error!(iface = %name, "no network interface named {name:?} yet: opened every {}s until it can be (counted in /stats capture.down)", REOPEN_EVERY.as_secs());
                        let Some(o) = reopen(&name, &stop2) else {
                            return;
                        };
                        stats2.down.store(false, Ordering::Relaxed);
                        stats2.reopened.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(iface = %name, "capture started");
                        o
                    }
                };
                let Opened {
                    mut rx,
                    mut stats_fd,
                    loopback,
                    ..
                } = first;
                let mut twins = loopback.then(Twins::default);
                let kernel = |fd: &rustix::fd::OwnedFd| {
                    if let Some(n) = kernel_drops(fd) {
                        stats2.kernel_dropped.fetch_add(n, Ordering::Relaxed);
                    }
                };
                let mut stats_at = std::time::Instant::now() + KERNEL_STATS_EVERY;
                while !stop2.load(Ordering::Relaxed) {
                    if std::time::Instant::now() >= stats_at {
                        kernel(&stats_fd);
                        stats_at = std::time::Instant::now() + KERNEL_STATS_EVERY;
                    }
                    match rx.next() {
                        Ok(frame) => {
                            stats2.received.fetch_add(1, Ordering::Relaxed);
                            if let Some(t) = &mut twins
                                && t.is_second_copy(frame, std::time::Instant::now())
                            {
                                stats2.duplicates.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            if !filter.is_empty() {
                                let pass = match decode(linktype::ETHERNET, frame) {
                                    Decoded::Ip(p) => filter.matches(&p),
                                    _ => false,
                                };
                                if !pass {
                                    stats2.filtered.fetch_add(1, Ordering::Relaxed);
                                    continue;
                                }
                            }
                            if queued2.load(Ordering::Relaxed) + frame.len() > CHANNEL_BYTES {
                                stats2.dropped.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            let pkt = LivePacket {
                                ts: wall_clock(),
                                data: frame.to_vec(),
                            };
                            let len = pkt.data.len();
                            queued2.fetch_add(len, Ordering::Relaxed);
                            match tx.try_send(pkt) {
                                Ok(()) => {}
                                Err(TrySendError::Full(_)) => {
                                    queued2.fetch_sub(len, Ordering::Relaxed);
                                    stats2.dropped.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(TrySendError::Disconnected(_)) => break,
                            }
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::TimedOut
                                    | std::io::ErrorKind::WouldBlock
                                    | std::io::ErrorKind::Interrupted
                            ) => {}
                        Err(e) => {
                            let said = failure(&name, &e);
                            if recovery == Recovery::Stop {
                                tracing::error!("{said}");
                                *stats2.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(said);
                                break;
                            }
                            kernel(&stats_fd);
                            stats2.down.store(true, Ordering::Relaxed);
                            tracing::error!("{said}; opened again every {}s until it can be (counted in /stats capture.down)", REOPEN_EVERY.as_secs());
                            match reopen(&name, &stop2) {
                                Some(again) => {
                                    rx = again.rx;
                                    stats_fd = again.stats_fd;
                                    twins = again.loopback.then(Twins::default);
                                    stats2.down.store(false, Ordering::Relaxed);
                                    stats2.reopened.fetch_add(1, Ordering::Relaxed);
                                    tracing::info!(iface = %name, "capture resumed");
                                }
                                None => break,
                            }
                        }
                    }
                }
                // What the kernel dropped since the last read (the summary and /stats read
                // the counter after the thread ends).
                kernel(&stats_fd);
            })
            .map_err(|source| LiveError::Io {
                iface: iface.to_string(),
                source,
            })?;
        Ok(LiveCapture {
            rx: chan_rx,
            queued,
            stop,
            stats,
            thread: Some(thread),
        })
    }

    /// Why the capture stopped, when its socket failed ([`Recovery::Stop`]).
    pub fn failed(&self) -> Option<String> {
        self.stats
            .failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The next frame, waiting at most `timeout`; `Ok(None)` on timeout, `Err(())` once the
    /// capture thread has ended.
    #[allow(clippy::result_unit_err)]
    pub fn recv_timeout(&self, timeout: StdDuration) -> Result<Option<LivePacket>, ()> {
        match self.rx.recv_timeout(timeout) {
            Ok(p) => {
                self.queued.fetch_sub(p.data.len(), Ordering::Relaxed);
                Ok(Some(p))
            }
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(()),
        }
    }

    /// The capture thread's counters.
    pub fn stats(&self) -> &LiveStats {
        &self.stats
    }

    /// Stops the thread and waits for it (within one read timeout); its counters, final (the
    /// kernel's drops are read as the thread ends).
    pub fn stop(mut self) -> Arc<LiveStats> {
        self.shutdown();
        self.stats.clone()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for LiveCapture {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The wall clock as a stamp (live capture is the one place flows meet a real clock).
pub fn wall_clock() -> Timestamp {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_loopback_frame_pairs_with_one_copy() {
        let mut t = Twins::default();
        let t0 = std::time::Instant::now();
        let (a, b) = (b"frame a".as_slice(), b"frame b".as_slice());
        assert!(!t.is_second_copy(a, t0));
        assert!(!t.is_second_copy(b, t0));
        assert!(t.is_second_copy(a, t0));
        // A frame really sent twice: its second sending waits for its own copy.
        assert!(!t.is_second_copy(a, t0));
        assert!(t.is_second_copy(a, t0));
        assert!(t.is_second_copy(b, t0));
        // Past the window, the same bytes are a new frame.
        assert!(!t.is_second_copy(a, t0));
        let late = t0 + LOOPBACK_TWIN_WINDOW + StdDuration::from_millis(1);
        assert!(!t.is_second_copy(a, late));
        assert!(t.is_second_copy(a, late));
    }

    /// Frames the kernel drops on a socket nobody reads are counted from its statistics: the
    /// loss no counter of ours would show otherwise. Needs CAP_NET_RAW (skipped without).
    #[test]
    fn the_kernels_drops_are_read_from_the_socket() {
        let opened = match open("lo") {
            Ok(o) => o,
            Err(LiveError::Permission { .. }) => {
                println!("SKIPPED: the tests run without CAP_NET_RAW");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        // A small buffer, whatever the host's default (rmem_default may hold them all).
        rustix::net::sockopt::set_socket_recv_buffer_size(&opened.stats_fd, 64 * 1024).unwrap();
        // (Zeroes what other traffic on lo left so far.)
        assert!(kernel_drops(&opened.stats_fd).is_some());
        let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = sink.local_addr().unwrap();
        let from = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // Far more than the socket's buffer holds (a few hundred such frames), none read.
        for _ in 0..4000 {
            let _ = from.send_to(&[0u8; 1000], to);
        }
        let dropped = kernel_drops(&opened.stats_fd).unwrap();
        assert!(dropped > 1000, "{dropped}");
        // Read once: the next read counts from there.
        assert!(kernel_drops(&opened.stats_fd).unwrap() < dropped);
        drop(opened);
    }
}
