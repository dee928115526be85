//! The bounded queue and thread behind each output that talks to the network
//! (`output.syslog`, `output.webhook`): the sink only queues, so a slow or absent peer never
//! holds up the sink (and the store behind it). A change kept in the store that does not fit
//! waits there: the queue is *behind* from it, takes no new change directly, and is fed from
//! the store, in order, as it drains ([`OutQueue::page`]); one not kept (the store's disk
//! nearly full) that does not fit is dropped and counted; what is still queued when the agent
//! stops is counted and said in the log, not lost silently.
//! Each output notes in the store the last change it dealt with ([`Cursor`]): what it had
//! not when the agent stopped or died is sent again at the next start.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::counters::{SinkCounters, bump};

/// Where an output notes the last change it dealt with (delivered, or given up): its name
/// among the store's output cursors ([`cepheus_store::Store::output_cursor`]).
#[derive(Clone)]
pub struct Cursor {
    /// The store.
    pub store: cepheus_store::Store,
    /// The output's name there (`webhook`, `syslog`).
    pub name: &'static str,
}

/// Items an output's queue holds, `default` (debug builds: `CEPHEUS_TEST_OUTPUT_QUEUE` sets
/// it, so that a test overflows it with a few alerts).
pub fn queue_size(default: usize) -> usize {
    #[cfg(debug_assertions)]
    if let Some(n) = std::env::var("CEPHEUS_TEST_OUTPUT_QUEUE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        return n.max(1);
    }
    default
}

/// What goes through an output's queue.
enum Slot<T> {
    /// An item, with its change's place in the store's order (`None`: not kept yet).
    Item(Option<u64>, T),
    /// An item with no place of its own: alert `.0`'s firing sent again, owed to the output
    /// in the store until it is dealt with ([`cepheus_store::Store::resent`]).
    Extra(u64, T),
    /// Once what was queued before it is dealt with, every change up to this place is:
    /// changes sent before the store kept them (its disk was nearly full) got their place
    /// later.
    Mark(u64),
}

/// The sink's side: queues items for the output's thread.
pub struct OutQueue<T> {
    /// The output's name in the configuration, for the log (`output.webhook`).
    name: &'static str,
    tx: Option<SyncSender<Slot<T>>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    capacity: usize,
    /// Behind: the changes kept in the store after this place (`Some(None)`: all of them)
    /// are not queued yet; they are paged in from the store, [`OutQueue::page`].
    behind: std::cell::Cell<Option<Option<u64>>>,
    /// Items with no place in the store ([`OutQueue::push_extra`]) waiting while it is
    /// behind, each with the last place kept when it was made: paged in at that point of
    /// the order (at most [`MAX_EXTRAS`]).
    extras: RefCell<VecDeque<(Option<u64>, u64, T)>>,
}

/// The most items without a place in the store that wait for a queue behind.
pub const MAX_EXTRAS: usize = 10_000;

/// What both sides see.
struct Shared {
    /// Set when the agent stops: waits between tries are cut short.
    closing: AtomicBool,
    /// Set once the items left were counted at the deadline: what the thread finishes after
    /// is not counted again.
    counted: AtomicBool,
    counters: Arc<SinkCounters>,
    /// The output's `*_unsent` counter and `*_waiting` gauge among them.
    names: Names,
    /// Where it notes what it dealt with, if anywhere.
    cursor: Option<Cursor>,
}

/// An output's `*_unsent` counter and `*_waiting` gauge (items queued and not yet dealt
/// with, sent or given up, by the thread) among the sink's counters.
#[derive(Clone, Copy)]
pub struct Names {
    /// The counter of items not delivered.
    pub unsent: fn(&SinkCounters) -> &AtomicU64,
    /// The gauge of items waiting.
    pub waiting: fn(&SinkCounters) -> &AtomicU64,
    /// The gauge that is 1 while changes wait in the store ([`OutQueue::behind`]).
    pub behind: fn(&SinkCounters) -> &AtomicU64,
}

impl Shared {
    fn unsent(&self, n: u64) {
        bump((self.names.unsent)(&self.counters), n);
    }

    fn pending(&self) -> &AtomicU64 {
        (self.names.waiting)(&self.counters)
    }
}

/// The output thread's side: takes items and says when it has dealt with them.
pub struct Drain<T> {
    rx: Receiver<Slot<T>>,
    shared: Arc<Shared>,
    /// The items taken and not yet dealt with, in order: each one's place (`None`: none, or
    /// not kept yet) and, for an alert sent again, its id.
    taken: RefCell<VecDeque<(Option<u64>, Option<u64>)>>,
}

impl<T: Send + 'static> OutQueue<T> {
    /// Starts thread `thread` running `work` over a queue of `capacity` items; items that do
    /// not fit, or are left when the agent stops, are added to counter `names.unsent`; the
    /// last item dealt with is noted at `cursor`, if given.
    pub fn start(
        name: &'static str,
        thread: &str,
        capacity: usize,
        counters: Arc<SinkCounters>,
        names: Names,
        cursor: Option<Cursor>,
        work: impl FnOnce(Drain<T>) + Send + 'static,
    ) -> std::io::Result<OutQueue<T>> {
        let (tx, rx) = sync_channel(capacity);
        let shared = Arc::new(Shared {
            closing: AtomicBool::new(false),
            counted: AtomicBool::new(false),
            counters,
            names,
            cursor,
        });
        let drain = Drain {
            rx,
            shared: shared.clone(),
            taken: RefCell::new(VecDeque::new()),
        };
        let handle = std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || work(drain))?;
        Ok(OutQueue {
            name,
            tx: Some(tx),
            shared,
            thread: Some(handle),
            capacity,
            behind: std::cell::Cell::new(None),
            extras: RefCell::new(VecDeque::new()),
        })
    }

    /// Where it is behind from ([`OutQueue::page`]): the changes after this place
    /// (`Some(None)`: all) wait in the store; `None` when it is not behind (or stopped).
    pub fn behind(&self) -> Option<Option<u64>> {
        self.tx.as_ref()?;
        self.behind.get()
    }

    /// Puts it behind from `after` (its cursor: the last change it dealt with; `None`: none):
    /// what the store kept after it is paged in, in order ([`OutQueue::page`]). At start,
    /// for what an earlier run did not deliver.
    pub fn resume(&self, after: Option<u64>) {
        // (The caller says why: a restart's backlog, not a full queue.)
        self.set_behind(Some(after));
    }

    /// Sets where it is behind from, and the output's `*_behind` gauge.
    fn set_behind(&self, behind: Option<Option<u64>>) {
        self.behind.set(behind);
        let gauge = (self.shared.names.behind)(&self.shared.counters);
        gauge.store(u64::from(behind.is_some()), Ordering::SeqCst);
    }

    fn fell_behind(&self) {
        tracing::warn!(
            output = self.name,
            "alert changes wait for {} in the store: its queue is full (the collector slow or away); they follow in order as it drains",
            self.name
        );
    }

    /// Whether its thread ended (it takes nothing any more).
    fn gone(&self) -> bool {
        self.thread.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Items it can take now: paging waits for a quarter of the queue, not one place at a time.
    pub fn room(&self) -> usize {
        let waiting = self.shared.pending().load(Ordering::SeqCst);
        let free = self
            .capacity
            .saturating_sub(usize::try_from(waiting).unwrap_or(usize::MAX));
        if free < self.capacity.div_ceil(4) {
            0
        } else {
            free
        }
    }

    /// Feeds it while it is behind: `items` are the changes kept after [`OutQueue::behind`],
    /// in order, and `all` says they are every one there is: then it is caught up, and takes
    /// new changes directly again.
    /// An item `None` is a change the output leaves out (a silence muted it): the cursor
    /// passes it once what was queued before it is dealt with.
    pub fn page(&self, items: impl IntoIterator<Item = (u64, Option<T>)>, all: bool) {
        let Some(tx) = &self.tx else {
            return;
        };
        // (Left-out changes before an item sent are passed with it: only those after the
        // last one need a mark.)
        let mut skipped = None;
        for (seq, item) in items {
            // (Items without a place made before this change was kept go first.)
            if !self.send_extras(tx, Some(seq)) {
                return;
            }
            let Some(item) = item else {
                skipped = Some(seq);
                continue;
            };
            self.shared.pending().fetch_add(1, Ordering::SeqCst);
            if tx.try_send(Slot::Item(Some(seq), item)).is_err() {
                // Full again: the rest at the next page.
                self.shared.pending().fetch_sub(1, Ordering::SeqCst);
                return;
            }
            skipped = None;
            self.set_behind(Some(Some(seq)));
        }
        if let Some(seq) = skipped {
            if tx.try_send(Slot::Mark(seq)).is_err() {
                return;
            }
            self.set_behind(Some(Some(seq)));
        }
        if all {
            if !self.send_extras(tx, None) {
                return;
            }
            self.set_behind(None);
            tracing::info!(
                output = self.name,
                "{} caught up with the alert changes that waited in the store",
                self.name
            );
        }
    }

    /// Queues `item`, of the change kept at `seq` in the store. When the queue is full, a
    /// change the store keeps waits there (the queue is behind from it, and takes the changes
    /// after it from the store, in order, [`OutQueue::page`]); one it does not keep (or any,
    /// once the thread is gone) is counted as unsent.
    pub fn push(&self, seq: Option<u64>, item: T) {
        let Some(tx) = &self.tx else {
            self.shared.unsent(1);
            return;
        };
        if self.behind.get().is_some() {
            if self.gone() {
                self.shared.unsent(1);
            }
            // In the store, or kept there later (a change not kept yet gets a place after
            // the ones waiting): paged in after the ones before it.
            return;
        }
        self.shared.pending().fetch_add(1, Ordering::SeqCst);
        match tx.try_send(Slot::Item(seq, item)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) if seq.is_some() => {
                self.shared.pending().fetch_sub(1, Ordering::SeqCst);
                self.set_behind(seq.map(|s| Some(s.saturating_sub(1))));
                self.fell_behind();
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.shared.pending().fetch_sub(1, Ordering::SeqCst);
                self.shared.unsent(1);
            }
        }
    }

    /// Leaves out the change kept at `seq` (a silence muted it): the output's cursor passes
    /// it in order, as if sent. (Behind, paging leaves it out: [`OutQueue::page`].)
    pub fn skip(&self, seq: Option<u64>) {
        if let Some(seq) = seq {
            self.mark(seq);
        }
    }

    /// Queues `item`, which has no place of its own in the store (alert `id` sent again when
    /// what muted it ends), made when `after` was the last change kept. Behind, or with no
    /// room, it waits and is paged in at that point of the order (before what the store kept
    /// after `after`, never out of order); past [`MAX_EXTRAS`] waiting, or once stopped, it
    /// is counted as unsent (the store still owes it to the output: it is sent at the next
    /// start).
    pub fn push_extra(&self, after: Option<u64>, id: u64, item: T) {
        let Some(tx) = &self.tx else {
            self.shared.unsent(1);
            return;
        };
        if self.behind.get().is_none() {
            self.shared.pending().fetch_add(1, Ordering::SeqCst);
            match tx.try_send(Slot::Extra(id, item)) {
                Ok(()) => return,
                Err(TrySendError::Full(Slot::Extra(_, item))) => {
                    self.shared.pending().fetch_sub(1, Ordering::SeqCst);
                    // What the store keeps from now on waits there, after it.
                    self.set_behind(Some(after));
                    self.fell_behind();
                    self.wait_extra(after, id, item);
                }
                Err(_) => {
                    self.shared.pending().fetch_sub(1, Ordering::SeqCst);
                    self.shared.unsent(1);
                }
            }
            return;
        }
        self.wait_extra(after, id, item);
    }

    /// Keeps an item without a place for when the queue pages in `after`.
    fn wait_extra(&self, after: Option<u64>, id: u64, item: T) {
        let mut extras = self.extras.borrow_mut();
        if extras.len() >= MAX_EXTRAS || self.gone() {
            self.shared.unsent(1);
            return;
        }
        extras.push_back((after, id, item));
    }

    /// Sends the waiting items without a place made before change `before` was kept (`None`:
    /// all); false when the queue is full again (the rest at the next page).
    fn send_extras(&self, tx: &SyncSender<Slot<T>>, before: Option<u64>) -> bool {
        let mut extras = self.extras.borrow_mut();
        while let Some((after, _, _)) = extras.front() {
            if before.is_some() && *after >= before {
                break;
            }
            let Some((after, id, item)) = extras.pop_front() else {
                break;
            };
            self.shared.pending().fetch_add(1, Ordering::SeqCst);
            if let Err(e) = tx.try_send(Slot::Extra(id, item)) {
                self.shared.pending().fetch_sub(1, Ordering::SeqCst);
                match e {
                    TrySendError::Full(Slot::Extra(_, item)) => {
                        extras.push_front((after, id, item))
                    }
                    _ => self.shared.unsent(1),
                }
                return false;
            }
        }
        true
    }

    /// Says that changes sent earlier without a place in the store (not kept yet) are kept
    /// now, up to `seq`: once the items queued before this are dealt with, the output's
    /// cursor may pass them. Dropped when the queue is full (a restart may then send them
    /// again).
    pub fn mark(&self, seq: u64) {
        // Behind, the cursor must not pass what waits in the store: the changes just kept
        // are among those paged in.
        if self.behind.get().is_some() {
            return;
        }
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(Slot::Mark(seq));
        }
    }

    /// `n` changes waiting in the store for this queue (behind) were pruned from it before
    /// they could be paged in: counted as unsent.
    pub fn lost(&self, n: u64) {
        self.shared.unsent(n);
    }

    /// The agent stops: no more items; the thread gets until `deadline` to deal with what is
    /// queued (its waits between tries cut short). Returns how many were left, which are
    /// counted as unsent and said in the log.
    pub fn close(&mut self, deadline: Instant) -> usize {
        self.shared.closing.store(true, Ordering::SeqCst);
        self.tx = None;
        if let Some(h) = self.thread.take() {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
        // Whatever the thread is still holding or never took (the thread, if still at it,
        // no longer counts what it finishes).
        self.shared.counted.store(true, Ordering::SeqCst);
        if self.behind.get().is_some() {
            tracing::warn!(
                output = self.name,
                "alert changes still wait for {} in the store: they are sent at the next start",
                self.name
            );
        }
        let left = self.shared.pending().swap(0, Ordering::SeqCst)
            + self.extras.borrow_mut().drain(..).count() as u64;
        if left > 0 {
            self.shared.unsent(left);
            tracing::warn!(
                output = self.name,
                left,
                "alert changes not delivered to {} before stopping (counted as unsent; the store keeps them)",
                self.name
            );
        }
        usize::try_from(left).unwrap_or(usize::MAX)
    }
}

impl<T> Drain<T> {
    /// The next item, waiting for one; `None` once the agent stops and the queue is empty.
    pub fn recv(&self) -> Option<T> {
        loop {
            match self.rx.recv().ok()? {
                Slot::Item(seq, item) => return Some(self.took((seq, None), item)),
                Slot::Extra(id, item) => return Some(self.took((None, Some(id)), item)),
                Slot::Mark(seq) => self.marked(seq),
            }
        }
    }

    /// The next item if one is queued now.
    pub fn try_recv(&self) -> Option<T> {
        loop {
            match self.rx.try_recv().ok()? {
                Slot::Item(seq, item) => return Some(self.took((seq, None), item)),
                Slot::Extra(id, item) => return Some(self.took((None, Some(id)), item)),
                Slot::Mark(seq) => self.marked(seq),
            }
        }
    }

    fn took(&self, taken: (Option<u64>, Option<u64>), item: T) -> T {
        self.taken.borrow_mut().push_back(taken);
        item
    }

    /// A [`OutQueue::mark`] reached: noted with the last item taken (the cursor moves when
    /// it is dealt with), or now when every item taken is dealt with.
    fn marked(&self, seq: u64) {
        let now = {
            let mut taken = self.taken.borrow_mut();
            match taken.back_mut() {
                Some((last, _)) => {
                    *last = Some(last.map_or(seq, |s| s.max(seq)));
                    false
                }
                None => true,
            }
        };
        if now {
            self.note(seq);
        }
    }

    /// Notes at the cursor, if any, that every change up to `seq` is dealt with; durable at
    /// once when nothing else waits, so a crash in the quiet that follows sends none of it
    /// again (while changes flow, the store's flushed writes take the note along).
    fn note(&self, seq: u64) {
        let Some(c) = &self.shared.cursor else {
            return;
        };
        if let Err(e) = c.store.set_output_cursor(c.name, Some(seq)) {
            tracing::debug!(output = c.name, error = %e, "cannot note the last alert change delivered");
            return;
        }
        if self.shared.pending().load(Ordering::SeqCst) == 0
            && self.taken.borrow().is_empty()
            && let Err(e) = c.store.flush()
        {
            tracing::debug!(output = c.name, error = %e, "cannot make the last alert change delivered durable");
        }
    }

    /// `n` items taken are dealt with: sent, or given up (noted at the cursor: a restart
    /// does not send them again). True when the caller is to count them (as sent or
    /// unsent); false when the agent's stop already counted them as unsent.
    pub fn done(&self, n: usize) -> bool {
        let mut last = None;
        let mut resent = Vec::new();
        {
            let mut taken = self.taken.borrow_mut();
            for _ in 0..n {
                let Some((seq, id)) = taken.pop_front() else {
                    break;
                };
                last = seq.or(last);
                resent.extend(id);
            }
        }
        if let Some(c) = &self.shared.cursor {
            for id in resent {
                if let Err(e) = c.store.resent(id, c.name) {
                    tracing::debug!(output = c.name, error = %e, "cannot note an alert sent again as delivered (it may be sent again at the next start)");
                }
            }
        }
        let count = !self.shared.counted.load(Ordering::SeqCst);
        if count {
            let _ = self
                .shared
                .pending()
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| {
                    Some(p.saturating_sub(n as u64))
                });
        }
        // (After the count: the note is made durable when nothing waits any more.)
        if let Some(s) = last {
            self.note(s);
        }
        count
    }

    /// Waits `d` before trying again, or less once the agent stops; false when it stops
    /// (the caller then tries once more, then gives up what it holds).
    pub fn pause(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if self.closing() {
                return false;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
        }
        !self.closing()
    }

    /// Whether the agent is stopping.
    pub fn closing(&self) -> bool {
        self.shared.closing.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// The webhook's counters, for a queue under test.
    fn names() -> Names {
        Names {
            unsent: |c| &c.webhook_unsent,
            waiting: |c| &c.webhook_waiting,
            behind: |c| &c.webhook_behind,
        }
    }

    #[test]
    fn items_left_when_the_agent_stops_are_counted_as_unsent() {
        let counters = Arc::new(SinkCounters::default());
        let unsent = || counters.webhook_unsent.load(Ordering::SeqCst);
        let (holding_tx, holding) = std::sync::mpsc::channel();
        // A peer that never takes anything: the thread retries its first item until told to stop.
        let mut q = OutQueue::start(
            "output.test",
            "outq-test",
            4,
            counters.clone(),
            names(),
            None,
            move |d: Drain<u32>| {
                if let Some(_item) = d.recv() {
                    let _ = holding_tx.send(());
                    while d.pause(Duration::from_secs(60)) {}
                    // Stopping: give up the item held and the rest (the queue's close counts them).
                }
            },
        )
        .unwrap();
        // The thread holds the first item before the rest come: 4 more fit, 2 do not.
        q.push(None, 0);
        holding.recv_timeout(Duration::from_secs(10)).unwrap();
        for i in 1..7 {
            q.push(None, i);
        }
        assert_eq!(unsent(), 2);
        let t = Instant::now();
        let left = q.close(Instant::now() + Duration::from_secs(5));
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "the pause was not cut short"
        );
        assert_eq!(left, 5, "the one held and the 4 queued");
        assert_eq!(unsent(), 7);
        // After closing, nothing is queued any more.
        q.push(None, 7);
        assert_eq!(unsent(), 8);
    }

    #[test]
    fn what_does_not_fit_waits_in_the_store_and_follows_in_order() {
        let counters = Arc::new(SinkCounters::default());
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (gate_tx, gate) = std::sync::mpsc::channel::<()>();
        let seen = got.clone();
        let mut q = OutQueue::start(
            "output.test",
            "outq-page",
            4,
            counters.clone(),
            names(),
            None,
            move |d: Drain<u64>| {
                // A peer away until the gate opens.
                let _ = gate.recv();
                while let Some(item) = d.recv() {
                    seen.lock().unwrap().push(item);
                    d.done(1);
                }
            },
        )
        .unwrap();
        for seq in 1..=8 {
            q.push(Some(seq), seq);
        }
        // 4 fit; the 5th makes it behind, and what follows waits in the store: none is lost.
        assert_eq!(q.behind(), Some(Some(4)));
        assert_eq!(counters.webhook_unsent.load(Ordering::SeqCst), 0);
        assert_eq!(counters.webhook_behind.load(Ordering::SeqCst), 1);
        assert_eq!(q.room(), 0);
        gate_tx.send(()).unwrap();
        let t = Instant::now();
        while q.room() == 0 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Paged from the store (two at a time here), in order, then caught up.
        q.page([(5, Some(5)), (6, Some(6))], false);
        assert_eq!(q.behind(), Some(Some(6)));
        q.page([(7, Some(7)), (8, Some(8))], true);
        assert_eq!(q.behind(), None);
        assert_eq!(counters.webhook_behind.load(Ordering::SeqCst), 0);
        let until = |n: usize| {
            let t = Instant::now();
            while got.lock().unwrap().len() < n && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        // Caught up, a change goes straight in again.
        until(8);
        q.push(Some(9), 9);
        until(9);
        // Behind again (from the start, as after a restart): a change not kept yet waits to
        // be kept (it is paged in then, after the others), and a mark does not move the
        // cursor past what waits.
        q.resume(None);
        assert_eq!(q.behind(), Some(None));
        q.push(None, 100);
        q.mark(50);
        q.page([(10, Some(10)), (11, Some(11))], true);
        until(11);
        assert_eq!(*got.lock().unwrap(), (1..=11).collect::<Vec<u64>>());
        assert_eq!(q.close(Instant::now() + Duration::from_secs(5)), 0);
        assert_eq!(counters.webhook_unsent.load(Ordering::SeqCst), 0);
    }

    /// The cursor moves as items are dealt with, in order; a mark passes changes sent
    /// before the store kept them once what was queued before it is dealt with.
    #[test]
    fn the_cursor_follows_what_was_dealt_with_and_marks() {
        let dir = std::env::temp_dir().join(format!("cepheus-outq-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = cepheus_store::Store::open(&dir, 100).unwrap();
        let counters = Arc::new(SinkCounters::default());
        let counters_of_test = counters.clone();
        let (go_tx, go) = std::sync::mpsc::channel::<()>();
        let (dealt_tx, dealt) = std::sync::mpsc::channel::<u32>();
        let mut q = OutQueue::start(
            "output.test",
            "outq-test",
            16,
            counters,
            names(),
            Some(Cursor {
                store: store.clone(),
                name: "test",
            }),
            move |d: Drain<u32>| {
                while let Some(item) = d.recv() {
                    // One at a time, when the test says so.
                    if go.recv().is_err() {
                        return;
                    }
                    d.done(1);
                    let _ = dealt_tx.send(item);
                }
            },
        )
        .unwrap();
        let at = || store.output_cursor("test").unwrap();
        // (The thread reads a mark when it next looks at the queue: waited for.)
        let reaches = |want: Option<u64>| {
            let deadline = Instant::now() + Duration::from_secs(5);
            while at() != cepheus_store::OutputCursor::After(want) {
                assert!(Instant::now() < deadline, "{:?}, not {want:?}", at());
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        q.push(Some(3), 0);
        q.push(None, 1);
        q.mark(9);
        q.push(Some(10), 2);
        go_tx.send(()).unwrap();
        assert_eq!(dealt.recv_timeout(Duration::from_secs(5)).unwrap(), 0);
        assert_eq!(at(), cepheus_store::OutputCursor::After(Some(3)));
        go_tx.send(()).unwrap();
        assert_eq!(dealt.recv_timeout(Duration::from_secs(5)).unwrap(), 1);
        // The item before the mark is dealt with: the mark's place is passed.
        reaches(Some(9));
        go_tx.send(()).unwrap();
        assert_eq!(dealt.recv_timeout(Duration::from_secs(5)).unwrap(), 2);
        assert_eq!(at(), cepheus_store::OutputCursor::After(Some(10)));
        // A mark with nothing outstanding moves it at once.
        q.mark(12);
        reaches(Some(12));
        // A change left out (a silence muted it) is passed as if sent, and so are those
        // paged in from the store while behind.
        q.skip(Some(14));
        reaches(Some(14));
        q.resume(Some(14));
        q.page([(15, None), (16, None)], true);
        assert_eq!(q.behind(), None);
        reaches(Some(16));
        // An alert sent again at a silence's end has no place: the cursor stays, and the
        // store owes it to the output no more once it is dealt with.
        let mut muted = vec![cepheus_store::Change {
            id: 7,
            state: cepheus_core::alert::AlertState::Firing,
            json: r#"{"id":"0000000000000007","silenced":{"id":"00000000000000a1"}}"#.into(),
            seq: None,
            meaning: None,
        }];
        assert_eq!(store.record_changes(&mut muted).unwrap(), [true]);
        let back = store
            .unmute(
                cepheus_store::SILENCED,
                "id",
                "00000000000000a1",
                &|_| false,
                &["test"],
            )
            .unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(store.resends().unwrap().len(), 1);
        q.push_extra(Some(16), 7, 7);
        go_tx.send(()).unwrap();
        assert_eq!(dealt.recv_timeout(Duration::from_secs(5)).unwrap(), 7);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !store.resends().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "still owed");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(at(), cepheus_store::OutputCursor::After(Some(16)));
        // Behind, it waits, and is paged in where it was made: after 18, before 19.
        q.resume(Some(16));
        q.push_extra(Some(18), 8, 8);
        q.page([(17, Some(17)), (18, Some(18)), (19, Some(19))], true);
        assert_eq!(q.behind(), None);
        for want in [17, 18, 8, 19] {
            go_tx.send(()).unwrap();
            assert_eq!(dealt.recv_timeout(Duration::from_secs(5)).unwrap(), want);
        }
        assert_eq!(counters_of_test.webhook_unsent.load(Ordering::SeqCst), 0);
        drop(go_tx);
        q.close(Instant::now() + Duration::from_secs(5));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_queue_its_thread_empties_leaves_nothing_at_close() {
        let counters = Arc::new(SinkCounters::default());
        let unsent = || counters.webhook_unsent.load(Ordering::SeqCst);
        let got = Arc::new(AtomicUsize::new(0));
        let g = got.clone();
        let mut q = OutQueue::start(
            "output.test",
            "outq-test",
            100,
            counters.clone(),
            names(),
            None,
            move |d: Drain<u32>| {
                while let Some(_item) = d.recv() {
                    std::thread::sleep(Duration::from_millis(2));
                    g.fetch_add(1, Ordering::SeqCst);
                    d.done(1);
                }
            },
        )
        .unwrap();
        for i in 0..50 {
            q.push(None, i);
        }
        assert_eq!(q.close(Instant::now() + Duration::from_secs(10)), 0);
        assert_eq!(got.load(Ordering::SeqCst), 50);
        assert_eq!(unsent(), 0);
    }
}
