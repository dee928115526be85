//! The thread that writes alert changes to stdout as JSON lines (`output.stdout`): the sink
//! hands it the lines and goes on, so a reader that stops reading (a paused `| less`, a FIFO
//! nobody opened, a stalled journal) no longer holds the sink, and with it the store, the
//! API's listings, the other outputs and the watchdog's probe; nor does the sink's mailbox
//! fill until the shards drop alerts. Lines wait in memory up to [`MAX_WAITING_BYTES`];
//! beyond, they are given up (counted in `alerts_unwritten`, said in the log: the store
//! keeps them). The store's written-out mark follows what this thread wrote
//! ([`StdoutWriter::written_through`]), so a crash writes again at the next start what was
//! still waiting here, as before.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cepheus_store::Change;

use super::counters::{LogLimit, SinkCounters, bump};

/// The most bytes of lines waiting for stdout (a storm's minute, or a reader's pause of
/// several seconds): beyond, new lines are given up rather than the sink held.
pub const MAX_WAITING_BYTES: usize = 64 << 20;

/// How long, when the agent stops, the sink waits at most for stdout to take the lines
/// waiting for it.
const STDOUT_DRAIN: Duration = Duration::from_secs(15);

/// How long a write to stdout may have waited for its reader before a stop gives up on it
/// at once (a reader that has stopped reading will not take the rest in time).
const STDOUT_GIVEN_UP: Duration = Duration::from_secs(5);

/// When the write to stdout under way (one line, or the flush) began, in milliseconds of
/// [`super::mono_ms`] (0: none under way): a reader that stops reading holds the writer
/// thread inside that write, where it cannot tell anyone; [`stdout_waiting`] lets another
/// task say so.
static STDOUT_SINCE: AtomicU64 = AtomicU64::new(0);

/// How long the write to stdout under way has waited for its reader, if one is under way.
pub fn stdout_waiting() -> Option<Duration> {
    let since = STDOUT_SINCE.load(Ordering::Relaxed);
    (since != 0).then(|| Duration::from_millis(super::mono_ms().saturating_sub(since)))
}

/// `write` timed in [`STDOUT_SINCE`].
fn timed<T>(write: impl FnOnce() -> T) -> T {
    // (At least 1: 0 says no write is under way.)
    STDOUT_SINCE.store(super::mono_ms().max(1), Ordering::Relaxed);
    let r = write();
    STDOUT_SINCE.store(0, Ordering::Relaxed);
    r
}

/// The most bytes one write of the thread takes from the queue (the rest waits for the next).
const BATCH_BYTES: usize = 256 << 10;

/// A line waiting, or a run of lines given up (`text` empty, `given_up` how many).
struct Line {
    /// Its change's place in the store's order (`None`: not kept yet).
    seq: Option<u64>,
    text: Vec<u8>,
    given_up: u64,
}

/// What the sink and the thread share.
#[derive(Default)]
struct State {
    lines: VecDeque<Line>,
    /// The bytes of `lines`.
    bytes: usize,
    /// The thread is writing lines it took out of `lines`.
    writing: bool,
    /// The last place in the store's order written or given up, once nothing before it
    /// waits.
    through: Option<u64>,
    /// The agent stops: the thread ends once `lines` is empty.
    closing: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Lines came, or `closing` was set.
    more: Condvar,
    /// The thread wrote what it had taken.
    wrote: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // (A panic of the thread while holding the lock leaves the state as it was: usable.)
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The sink's side of the stdout writer thread.
pub struct StdoutWriter {
    shared: Arc<Shared>,
    counters: Arc<SinkCounters>,
    /// [`MAX_WAITING_BYTES`] (less in tests).
    max_bytes: usize,
    /// Lines given up while over [`MAX_WAITING_BYTES`], said in the log at most once a minute.
    limit: LogLimit,
    thread: Option<JoinHandle<()>>,
}

impl StdoutWriter {
    /// Starts the thread writing to `out`; `wrote` is called (from it) after each write, so
    /// that the sink can move the store's written-out mark.
    pub fn start(
        out: Box<dyn Write + Send>,
        counters: Arc<SinkCounters>,
        wrote: impl Fn() + Send + 'static,
    ) -> std::io::Result<StdoutWriter> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            more: Condvar::new(),
            wrote: Condvar::new(),
        });
        let mut thread = Thread {
            shared: shared.clone(),
            counters: counters.clone(),
            out,
            closed: false,
            cut: false,
            limit: LogLimit::new(60_000),
        };
        let handle = std::thread::Builder::new()
            .name("stdout".into())
            .spawn(move || thread.run(wrote))?;
        Ok(StdoutWriter {
            shared,
            counters,
            max_bytes: MAX_WAITING_BYTES,
            limit: LogLimit::new(60_000),
            thread: Some(handle),
        })
    }

    /// Queues the changes' lines, in order; over [`MAX_WAITING_BYTES`] they are given up.
    pub fn push(&self, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        let mut given_up = 0;
        {
            let mut st = self.shared.lock();
            for c in changes {
                let n = c.json.len() + 1;
                if st.bytes + n > self.max_bytes {
                    given_up += 1;
                    // Runs of lines given up stand as one entry, whatever the storm's length.
                    match st.lines.back_mut() {
                        Some(l) if l.given_up > 0 => {
                            l.given_up += 1;
                            l.seq = c.seq.or(l.seq);
                        }
                        _ => st.lines.push_back(Line {
                            seq: c.seq,
                            text: Vec::new(),
                            given_up: 1,
                        }),
                    }
                    continue;
                }
                let mut text = Vec::with_capacity(n);
                text.extend_from_slice(c.json.as_bytes());
                text.push(b'\n');
                st.bytes += n;
                st.lines.push_back(Line {
                    seq: c.seq,
                    text,
                    given_up: 0,
                });
            }
        }
        self.shared.more.notify_one();
        if given_up > 0 {
            bump(&self.counters.alerts_unwritten, given_up);
            if let Some(held) = self.limit.allow() {
                tracing::error!(
                    given_up,
                    held_back = held,
                    waiting_mb = MAX_WAITING_BYTES >> 20,
                    "stdout is not read: alert changes waiting for it are over the limit, new ones given up (the store keeps them; counted as alerts_unwritten)"
                );
            }
        }
    }

    /// Whether every line queued has been written (or given up).
    pub fn idle(&self) -> bool {
        let st = self.shared.lock();
        st.lines.is_empty() && !st.writing
    }

    /// The last place in the store's order written or given up with nothing before it
    /// waiting: the store's written-out mark may go that far while lines wait.
    pub fn written_through(&self) -> Option<u64> {
        self.shared.lock().through
    }

    /// Waits until every line queued is written, at most until `deadline`; returns whether
    /// they were.
    pub fn drain(&self, deadline: Instant) -> bool {
        let mut st = self.shared.lock();
        while !st.lines.is_empty() || st.writing {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            st = match self.shared.wrote.wait_timeout(st, left) {
                Ok((st, _)) => st,
                Err(e) => e.into_inner().0,
            };
        }
        true
    }
}

impl StdoutWriter {
    /// At a stop: waits for the lines queued to be written while the reader reads, at most
    /// [`STDOUT_DRAIN`], and not once a write has waited [`STDOUT_GIVEN_UP`]; returns
    /// whether they all were.
    pub fn drain_at_stop(&self) -> bool {
        let deadline = Instant::now() + STDOUT_DRAIN;
        loop {
            let slice = Instant::now() + Duration::from_millis(200);
            if self.drain(slice.min(deadline)) {
                return true;
            }
            if Instant::now() >= deadline || stdout_waiting().is_some_and(|w| w >= STDOUT_GIVEN_UP)
            {
                return false;
            }
        }
    }
}

impl Drop for StdoutWriter {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.more.notify_one();
        // Not joined: a write blocked on a reader that never reads would hold the drop for
        // ever (the process's end takes the thread).
        drop(self.thread.take());
    }
}

/// The thread's side.
struct Thread {
    shared: Arc<Shared>,
    counters: Arc<SinkCounters>,
    out: Box<dyn Write + Send>,
    /// The reader went away (a broken pipe): lines are counted as lost, not written.
    closed: bool,
    /// A write failed part-way: the next line starts with a line end of its own.
    cut: bool,
    limit: LogLimit,
}

impl Thread {
    fn run(&mut self, wrote: impl Fn()) {
        loop {
            let batch = {
                let mut st = self.shared.lock();
                while st.lines.is_empty() && !st.closing {
                    st = match self.shared.more.wait(st) {
                        Ok(st) => st,
                        Err(e) => e.into_inner(),
                    };
                }
                if st.lines.is_empty() {
                    return;
                }
                let mut batch = Vec::new();
                let mut bytes = 0;
                while let Some(l) = st.lines.pop_front() {
                    bytes += l.text.len();
                    batch.push(l);
                    if bytes >= BATCH_BYTES {
                        break;
                    }
                }
                st.writing = true;
                batch
            };
            self.write(&batch);
            {
                let mut st = self.shared.lock();
                st.writing = false;
                st.bytes -= batch.iter().map(|l| l.text.len()).sum::<usize>();
                if let Some(s) = batch.iter().filter_map(|l| l.seq).max() {
                    st.through = st.through.max(Some(s));
                }
            }
            self.shared.wrote.notify_all();
            wrote();
        }
    }

    /// Writes the batch's lines (one write each: a failure cuts at most one line), then
    /// flushes; what could not be written is counted and said.
    fn write(&mut self, batch: &[Line]) {
        let lines = batch.iter().filter(|l| l.given_up == 0).count();
        let mut written = 0;
        let mut failure = None;
        if !self.closed {
            if self.cut {
                match timed(|| self.out.write_all(b"\n")) {
                    Ok(()) => self.cut = false,
                    Err(e) => failure = Some(e),
                }
            }
            for l in batch.iter().filter(|l| l.given_up == 0) {
                if failure.is_some() {
                    break;
                }
                if let Err(e) = timed(|| self.out.write_all(&l.text)) {
                    failure = Some(e);
                    break;
                }
                written += 1;
            }
            if failure.is_none()
                && let Err(e) = timed(|| self.out.flush())
            {
                failure = Some(e);
            }
        }
        let lost = lines - written;
        if lost == 0 && failure.is_none() {
            return;
        }
        bump(&self.counters.alerts_unwritten, lost as u64);
        if failure.is_some() {
            self.cut = true;
        }
        if let Some(e) = &failure
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            self.closed = true;
        }
        if let Some(held) = self.limit.allow() {
            let total = self.counters.alerts_unwritten.load(Ordering::Relaxed);
            match &failure {
                Some(e) => tracing::error!(
                    error = %e,
                    lost_so_far = total,
                    "cannot write alerts to stdout; they are lost (counted as alerts_unwritten)"
                ),
                None => tracing::error!(
                    lost_so_far = total,
                    held_back = held,
                    "stdout is closed; alerts are lost (counted as alerts_unwritten)"
                ),
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::mpsc::{Receiver, sync_channel};
    use std::time::Duration;

    use super::*;

    /// A reader that takes a write only when the test lets it (a send on `go`).
    pub(crate) struct Gated {
        pub go: Receiver<()>,
        pub data: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gated {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.go.recv().map_err(|_| std::io::ErrorKind::BrokenPipe)?;
            self.data.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn change(seq: u64) -> Change {
        Change {
            id: seq,
            state: cepheus_core::alert::AlertState::Firing,
            json: format!("{{\"n\":{seq}}}"),
            seq: Some(seq),
            meaning: None,
        }
    }

    /// A reader that stops reading holds no caller: lines wait up to the limit, further
    /// ones are given up and counted; the place written through follows what the reader
    /// took, and every line waiting is written once it reads again.
    #[test]
    fn a_reader_that_stops_holds_no_caller() {
        let (go, gate) = sync_channel(0);
        let data = Arc::new(Mutex::new(Vec::new()));
        let counters = Arc::new(SinkCounters::default());
        let out = Gated {
            go: gate,
            data: data.clone(),
        };
        let mut w = StdoutWriter::start(Box::new(out), counters.clone(), || {}).unwrap();
        // Room for four lines of 8 bytes.
        w.max_bytes = 32;
        w.push(&(0..10).map(change).collect::<Vec<_>>());
        assert!(!w.idle());
        // Four wait in memory (the thread holds them, stuck in its first write), the rest
        // are given up.
        let given_up = counters.alerts_unwritten.load(Ordering::Relaxed);
        assert_eq!(given_up, 6);
        assert_eq!(w.written_through(), None);
        assert!(!w.drain(Instant::now() + Duration::from_millis(100)));
        // The reader reads again.
        let kept = 10 - given_up;
        for _ in 0..kept {
            go.send(()).unwrap();
        }
        assert!(w.drain(Instant::now() + Duration::from_secs(10)));
        let text = String::from_utf8(data.lock().unwrap().clone()).unwrap();
        let expected: String = (0..kept).map(|n| format!("{{\"n\":{n}}}\n")).collect();
        assert_eq!(text, expected);
        // Written or given up: all ten, in order.
        assert_eq!(w.written_through(), Some(9));
        assert!(w.idle());
        drop(go);
    }
}
