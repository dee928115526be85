//! A shard's queue: batches of events, bounded by the events it holds (`engine.queue_size`),
//! not by the batches. Bounded by batches (`queue_size / 1024` of them), a burst of small UDP
//! batches filled it with far fewer events than the setting says, and dropped the rest.
//!
//! Each batch takes one place of room per event (at least one, at most the whole queue), and
//! gives it back once the shard has handled it: `queue_size` bounds the events waiting and
//! being handled.
//!
//! An event takes more than one place when it is large: one place per `queue_bytes /
//! queue_size` bytes of it (4 KiB at the defaults), so `queue_bytes` bounds the memory held
//! too (65,536 datagrams of 64 KiB, gigabytes, fit in a queue counted by events alone).
//!
//! Senders that wait for room (a TCP connection, the capture) may take three quarters of it
//! at most: the rest is kept for those that cannot wait (UDP datagrams, dropped when there
//! is no room), so one TCP sender flooding a shard does not make every datagram of other
//! hosts' heartbeats drop (an audit saw half of them go, and false silences follow).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, mpsc};

use super::shard::Batch;

/// A batch in a shard's queue, with the room it takes.
pub struct Queued {
    /// The events.
    pub batch: Batch,
    /// Given back when dropped (once the shard has handled the batch).
    pub room: OwnedSemaphorePermit,
    /// A waiting sender's share of it, given back with it.
    pub waited: Option<OwnedSemaphorePermit>,
}

/// The sending side of a shard's queue (cloned for every ingest task).
#[derive(Clone)]
pub struct ShardTx {
    tx: mpsc::Sender<Queued>,
    room: Arc<Semaphore>,
    size: usize,
    /// The room senders that wait may take (see the module's notes), of `waiting_size`.
    waiting: Arc<Semaphore>,
    waiting_size: usize,
    /// The bytes of events one place stands for (see the module's notes).
    place_bytes: usize,
}

/// What the shard reads of its own queue for `/stats`, without keeping it open.
pub struct QueueProbe {
    tx: mpsc::WeakSender<Queued>,
    room: Arc<Semaphore>,
    size: usize,
}

/// A shard's queue of `size` events (at least one) holding `bytes` of them at most.
pub fn shard_queue(size: usize, bytes: usize) -> (ShardTx, mpsc::Receiver<Queued>) {
    let size = size.clamp(1, Semaphore::MAX_PERMITS);
    let place_bytes = (bytes / size).max(1);
    // A batch holds one event at least, so the channel is never full while there is room.
    let (tx, rx) = mpsc::channel(size);
    let room = Arc::new(Semaphore::new(size));
    let waiting_size = (size - size / 4).max(1);
    let waiting = Arc::new(Semaphore::new(waiting_size));
    (
        ShardTx {
            tx,
            room,
            size,
            waiting,
            waiting_size,
            place_bytes,
        },
        rx,
    )
}

impl ShardTx {
    /// The places `batch` takes: one per event, or per `place_bytes` of them if more.
    fn weight(&self, batch: &Batch) -> usize {
        let bytes: usize = batch.iter().map(|e| e.heap_bytes()).sum();
        batch.len().max(bytes.div_ceil(self.place_bytes))
    }

    /// The room `batch` takes.
    fn places(&self, batch: &Batch) -> u32 {
        self.weight(batch)
            .clamp(1, self.size)
            .min(u32::MAX as usize) as u32
    }

    /// The waiting senders' share `batch` takes.
    fn waiting_places(&self, batch: &Batch) -> u32 {
        (self.weight(batch))
            .clamp(1, self.waiting_size)
            .min(u32::MAX as usize) as u32
    }

    /// Queues `batch`, waiting for room within the waiting senders' share; `Err` (the batch)
    /// when the shard is gone.
    pub async fn send(&self, batch: Batch) -> Result<(), Batch> {
        // (As many places of the room as of the share: a batch larger than the share would
        // take the datagrams' part of a small queue too.)
        let n = self.waiting_places(&batch);
        let Ok(waited) = self.waiting.clone().acquire_many_owned(n).await else {
            return Err(batch);
        };
        let Ok(room) = self.room.clone().acquire_many_owned(n).await else {
            return Err(batch);
        };
        self.tx
            .send(Queued {
                batch,
                room,
                waited: Some(waited),
            })
            .await
            .map_err(|e| e.0.batch)
    }

    /// Queues `batch` if there is room now; `Err` (the batch) when there is none or the shard
    /// is gone.
    pub fn try_send(&self, batch: Batch) -> Result<(), Batch> {
        let Ok(room) = self
            .room
            .clone()
            .try_acquire_many_owned(self.places(&batch))
        else {
            return Err(batch);
        };
        self.tx
            .try_send(Queued {
                batch,
                room,
                waited: None,
            })
            .map_err(|e| e.into_inner().batch)
    }

    /// [`ShardTx::send`] from a plain thread (the capture thread, outside the runtime): waits
    /// for room a millisecond at a time.
    pub fn blocking_send(&self, batch: Batch) -> Result<(), Batch> {
        let n = self.waiting_places(&batch);
        let (Some(waited), Some(room)) = (
            self.blocking_acquire(&self.waiting, n),
            self.blocking_acquire(&self.room, n),
        ) else {
            return Err(batch);
        };
        self.tx
            .blocking_send(Queued {
                batch,
                room,
                waited: Some(waited),
            })
            .map_err(|e| e.0.batch)
    }

    /// `n` places of `places`, waited for a millisecond at a time; `None` once the shard is
    /// gone.
    fn blocking_acquire(&self, places: &Arc<Semaphore>, n: u32) -> Option<OwnedSemaphorePermit> {
        loop {
            match places.clone().try_acquire_many_owned(n) {
                Ok(p) => return Some(p),
                Err(TryAcquireError::NoPermits) if !self.tx.is_closed() => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return None,
            }
        }
    }

    /// The shard's view of its queue.
    pub fn probe(&self) -> QueueProbe {
        QueueProbe {
            tx: self.tx.downgrade(),
            room: self.room.clone(),
            size: self.size,
        }
    }
}

impl QueueProbe {
    /// Batches waiting, and places taken by events waiting or being handled (one per event
    /// but for large ones); zeros once every sender is gone.
    pub fn queued(&self) -> (usize, usize) {
        match self.tx.upgrade() {
            Some(tx) => (
                tx.max_capacity() - tx.capacity(),
                self.size - self.room.available_permits(),
            ),
            None => (0, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use cepheus_core::event::{Event, Source};
    use cepheus_core::time::Timestamp;

    /// Room enough for the small events of these tests: counted by events.
    const BYTES: usize = 1 << 30;

    fn batch(n: usize) -> Batch {
        (0..n)
            .map(|_| Arc::new(Event::new(Source::Syslog, Timestamp(0), Timestamp(0))))
            .collect()
    }

    /// Senders that wait take three quarters of the room at most: the rest stays for
    /// datagrams, which cannot wait (a TCP flood made half of other hosts' datagrams drop).
    #[test]
    fn waiting_senders_leave_a_quarter_of_the_queue_to_datagrams() {
        let (tx, mut rx) = shard_queue(100, BYTES);
        for _ in 0..75 {
            assert!(tx.blocking_send(batch(1)).is_ok());
        }
        assert_eq!(tx.waiting.available_permits(), 0, "a 76th would wait");
        assert!(tx.try_send(batch(25)).is_ok());
        assert!(tx.try_send(batch(1)).is_err());
        assert_eq!(tx.probe().queued(), (76, 100));
        // Handled: a waiting sender's batch gives its share back.
        drop(rx.try_recv().unwrap());
        assert_eq!(tx.waiting.available_permits(), 1);
        // A waiting sender's batch larger than the share takes no more of the room than
        // the share: a quarter stays for datagrams.
        let (tx, _rx) = shard_queue(1000, BYTES);
        assert!(tx.blocking_send(batch(1024)).is_ok());
        assert!(tx.try_send(batch(250)).is_ok());
        // A datagram's batch takes none of the waiting senders' share.
        let (tx, _rx) = shard_queue(100, BYTES);
        assert!(tx.try_send(batch(90)).is_ok());
        assert_eq!(tx.waiting.available_permits(), 75);
    }

    /// Large events take a place per `queue_bytes / queue_size` of them: the queue holds
    /// what its bytes allow, not its size in 64 KiB datagrams.
    #[test]
    fn large_events_take_room_by_their_bytes() {
        use cepheus_core::event::{Field, Value};
        let big = || -> Batch {
            vec![Arc::new(
                Event::new(Source::Syslog, Timestamp(0), Timestamp(0))
                    .with(Field::Msg, Value::str(&"x".repeat(64 << 10))),
            )]
        };
        // 100 events, 1 MiB: a place is 10 KiB; a 64 KiB event takes 7.
        let (tx, _rx) = shard_queue(100, 100 * (10 << 10));
        assert_eq!(tx.places(&big()), 7);
        assert_eq!(tx.places(&batch(3)), 3);
        let mut sent = 0;
        while tx.try_send(big()).is_ok() {
            sent += 1;
        }
        assert_eq!(sent, 14, "100 places of 7");
        // The small ones still fit in what is left.
        assert!(tx.try_send(batch(2)).is_ok());
        assert!(tx.try_send(batch(1)).is_err());
    }

    #[test]
    fn the_queue_holds_as_many_events_as_its_size_in_any_batches() {
        let (tx, mut rx) = shard_queue(100, BYTES);
        // 100 batches of one event: all fit (a queue of batches of 1,024 would have held
        // none of this: 100 / 1,024 rounds to nothing).
        for _ in 0..100 {
            assert!(tx.try_send(batch(1)).is_ok());
        }
        assert_eq!(tx.probe().queued(), (100, 100));
        assert_eq!(tx.try_send(batch(1)).map_err(|b| b.len()), Err(1));
        // Handled: the room comes back when the batch is dropped, not when it is read.
        let first = rx.try_recv().unwrap();
        assert!(tx.try_send(batch(1)).is_err());
        drop(first);
        assert!(tx.try_send(batch(1)).is_ok());
        // A batch larger than the whole queue takes all of it.
        let (tx, mut rx) = shard_queue(10, BYTES);
        assert!(tx.try_send(batch(30)).is_ok());
        assert!(tx.try_send(batch(1)).is_err());
        assert_eq!(rx.try_recv().unwrap().batch.len(), 30);
        assert!(tx.try_send(batch(5)).is_ok());
        assert!(tx.try_send(batch(5)).is_ok());
        assert!(tx.try_send(batch(1)).is_err());
        // The shard gone: refused, even with room.
        drop(rx);
        let (tx, rx) = shard_queue(10, BYTES);
        drop(rx);
        assert!(tx.try_send(batch(1)).is_err());
        assert!(tx.blocking_send(batch(1)).is_err());
    }
}
