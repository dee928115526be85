//! The HTTP API: `GET /health`, `GET /stats` (JSON), `GET /metrics` (Prometheus text),
//! `GET /groups?rule=NAME` (what `cepheus groups list` reads), and `POST /groups/forget`
//! (`{"rule": .., "key": ..}`, what `cepheus groups forget` sends).
//!
//! `/metrics` is rendered by hand from the same snapshot as `/stats` rather than through the
//! `metrics` facade and `metrics-exporter-prometheus`: every number already lives in one
//! place (atomics on the ingest side, the engines' own counters in the shards), so a global
//! recorder would only duplicate them, and the text format is a few lines per family. That
//! saves ~40 crates and keeps one source of truth; revisit if histograms are wanted.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use actix::Addr;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;

use super::counters::{
    CaptureCounters, CaptureSnapshot, IngestCounters, IngestSnapshot, SinkCounters, SinkSnapshot,
};
use super::shard::{ForgetGroup, GetStats, ListGroups, Shard, ShardStats};

/// Marks the app served on the Unix socket (`api.socket`), whose requests need no token.
#[derive(Clone, Copy, Debug)]
pub struct ViaSocket;

/// Binds the API's Unix socket at `path`, mode 0660. A socket file left by an agent that
/// died is replaced; one an agent answers on, or any other file, is an error.
pub fn bind_socket(path: &std::path::Path) -> anyhow::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            anyhow::bail!(
                "api.socket: {} exists and is not a socket (remove it, or name another path)",
                path.display()
            );
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "api.socket: {} is in use (is another `cepheus run` using it?)",
                path.display()
            );
        }
        std::fs::remove_file(path).map_err(|e| {
            anyhow::anyhow!(
                "api.socket: cannot replace the stale {}: {e}",
                path.display()
            )
        })?;
    }
    // Made in a private folder beside it, given its mode there, then moved into place: it is
    // never reachable with the mode the umask gave it (a permissive one, 000, would let any
    // local user in, with no token, until the mode was set).
    let private = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."))
        .join(format!(".cepheus-api.{}", std::process::id()));
    let made = {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&private)
    };
    let at = match &made {
        Ok(()) => private.join("s"),
        // (A folder it cannot write in: bound in place, the mode set after.)
        Err(_) => path.to_path_buf(),
    };
    let bound = std::os::unix::net::UnixListener::bind(&at)
        .map_err(|e| anyhow::anyhow!("api.socket: cannot bind {}: {e}", path.display()))
        .and_then(|l| {
            std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o660)).map_err(|e| {
                anyhow::anyhow!("api.socket: cannot set the mode of {}: {e}", path.display())
            })?;
            if at != path {
                std::fs::rename(&at, path).map_err(|e| {
                    anyhow::anyhow!("api.socket: cannot move it to {}: {e}", path.display())
                })?;
            }
            Ok(l)
        });
    if made.is_ok() {
        let _ = std::fs::remove_file(private.join("s"));
        let _ = std::fs::remove_dir(&private);
    }
    bound
}

/// What the API handlers read.
pub struct ApiState {
    /// The shards.
    pub shards: Vec<Addr<Shard>>,
    /// Ingest counters.
    pub ingest: Arc<IngestCounters>,
    /// Sink and control counters.
    pub sink: Arc<SinkCounters>,
    /// Live capture counters, when `[capture]` is configured.
    pub capture: Option<Arc<CaptureCounters>>,
    /// UDP listen addresses (kernel drop counters are read for them).
    pub udp: Vec<SocketAddr>,
    /// Each syslog listener's counters (UDP first, then TCP, as configured).
    pub listeners: Vec<Arc<super::counters::ListenerCounters>>,
    /// Start of the process.
    pub started: Instant,
    /// The API token, when one is configured (`api.token_file`).
    pub token: Option<String>,
    /// Why the last reload was refused, until one succeeds.
    pub reload_error: super::reload::LastReloadError,
    /// The store, read for `/alerts` (none in some tests).
    pub store: Option<cepheus_store::Store>,
    /// The sink's live stream of alert changes, for `/alerts/stream`.
    pub changes: Option<tokio::sync::broadcast::Sender<super::sink::Streamed>>,
    /// The alert streams' places (at most [`MAX_STREAMS`]).
    pub streams: Streams,
    /// The alert sink (none in some tests): a group forgotten by hand resolves through it the
    /// alerts no engine holds.
    pub alert_sink: Option<Addr<super::sink::AlertSink>>,
    /// The `/alerts` listings' places (at most [`MAX_LISTINGS`]).
    pub listings: Listings,
}

/// `/alerts` listings built or being sent at once, at most: each may hold up to
/// [`MAX_LISTING_BYTES`] until its client has read it, so clients that ask and never read
/// would otherwise hold gigabytes (one more is answered 503 at once, to retry).
pub const MAX_LISTINGS: usize = 8;

/// The most connections each of the API's listeners (TCP, Unix socket) holds open at once;
/// more wait in the kernel's queue until one closes (one that sent no request within
/// [`REQUEST_TIMEOUT`], an idle keep-alive one after [`IDLE_TIMEOUT`]). Room for many
/// clients (a fleet's probes, dashboards), so that a few hundred held idle do not make
/// `/health` and `cepheus alerts` wait.
pub const MAX_CONNECTIONS: usize = 1024;

/// How long a new connection may take to send its request's head: a client holding
/// connections without asking anything (a slowloris) holds each place this long at most.
/// Every real client (curl, `cepheus alerts`, the dashboard, a probe) asks at once.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a connection may stay idle between requests (the dashboard polls every second
/// on one connection).
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The places of the `/alerts` listings.
#[derive(Clone)]
pub struct Listings(Arc<tokio::sync::Semaphore>);

impl Default for Listings {
    fn default() -> Listings {
        Listings(Arc::new(tokio::sync::Semaphore::new(MAX_LISTINGS)))
    }
}

/// A listing's body: it keeps its place among the [`MAX_LISTINGS`] until it is sent whole, or
/// its connection is dropped.
struct HeldBody {
    body: Option<bytes::Bytes>,
    len: u64,
    _place: tokio::sync::OwnedSemaphorePermit,
}

impl actix_web::body::MessageBody for HeldBody {
    type Error = std::convert::Infallible;

    fn size(&self) -> actix_web::body::BodySize {
        actix_web::body::BodySize::Sized(self.len)
    }

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<bytes::Bytes, Self::Error>>> {
        std::task::Poll::Ready(self.get_mut().body.take().map(Ok))
    }
}

/// Alert streams (`GET /alerts/stream`) open at once, at most: each holds a connection and a
/// place in the sink's broadcast.
pub const MAX_STREAMS: usize = 64;

/// Alert changes a stream's subscriber may fall behind by before it misses some (and is told).
/// Four of the sink's slices of 8,192: an absence storm of 100,000 firing at once reached a
/// local `curl -sN` whole (at 4,096 it missed about 40 %; `docs/absence_storm.sh BIN 100000 stream`, see
/// docs/benchmarks.md); the ring holds as many changes' JSON while a stream is open.
pub const STREAM_BACKLOG: usize = 32_768;

/// How long what the API sent may stay unacknowledged before the kernel closes the connection
/// (TCP_USER_TIMEOUT on its TCP connections): a stream's client that stopped reading, its
/// receive window shut, gives its place among the [`MAX_STREAMS`] back after this.
pub const STALL: std::time::Duration = std::time::Duration::from_secs(60);

/// The most a stream writes at once (changes already waiting go out together, up to this).
const CHUNK_BYTES: usize = 256 << 10;

/// A stream's comment line when nothing happened for this long (proxies and clients keep the
/// connection; a client gone is only noticed at a write, so this is also how soon its place
/// among the [`MAX_STREAMS`] is given back).
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(5);

/// The places of the open alert streams, at most [`MAX_STREAMS`]. A stream whose body has not
/// been asked for its next chunk for [`STALL`] has a client that stopped reading (the server
/// stops asking once the connection's buffers are full): when the places are all taken, a new
/// stream takes the place stalled longest, and the stalled stream ends if it is ever asked
/// again. This is what frees a place held over the Unix socket, which has no TCP user timeout.
#[derive(Clone, Default)]
pub struct Streams(Arc<std::sync::Mutex<Vec<Arc<Place>>>>);

/// One stream's place: when its body was last asked for a chunk, and whether another stream
/// took it.
struct Place {
    last_ask: std::sync::Mutex<Instant>,
    taken: std::sync::atomic::AtomicBool,
}

/// A stream's hold on its place, given back when the stream ends.
pub struct StreamSlot {
    place: Arc<Place>,
    streams: Streams,
}

impl Streams {
    /// A place for a stream starting at `now`: a free one, else the one stalled longest if it
    /// has been for [`STALL`]; `None` when every place is held by a stream still read.
    pub fn admit(&self, now: Instant) -> Option<StreamSlot> {
        use std::sync::atomic::Ordering;
        let mut places = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if places.len() >= MAX_STREAMS {
            let last_ask = |p: &Arc<Place>| {
                *p.last_ask
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            };
            let (i, since) = places
                .iter()
                .enumerate()
                .map(|(i, p)| (i, last_ask(p)))
                .min_by_key(|&(_, t)| t)?;
            if now.saturating_duration_since(since) < STALL {
                return None;
            }
            let stalled = places.swap_remove(i);
            stalled.taken.store(true, Ordering::SeqCst);
            tracing::warn!(
                stalled_for_s = now.saturating_duration_since(since).as_secs(),
                "an alert stream's client stopped reading: its place goes to a new stream"
            );
        }
        let place = Arc::new(Place {
            last_ask: std::sync::Mutex::new(now),
            taken: std::sync::atomic::AtomicBool::new(false),
        });
        places.push(place.clone());
        Some(StreamSlot {
            place,
            streams: self.clone(),
        })
    }

    /// Streams holding a place now.
    pub fn open(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

impl StreamSlot {
    /// The stream's body is asked for its next chunk at `now`: whether it may go on (`false`:
    /// it stalled and its place went to another stream).
    pub fn ask(&self, now: Instant) -> bool {
        *self
            .place
            .last_ask
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = now;
        !self.place.taken.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut places = self
            .streams
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = places.iter().position(|p| Arc::ptr_eq(p, &self.place)) {
            places.swap_remove(i);
        }
    }
}

/// `GET /alerts/stream`: server-sent events, one `alert` event per alert change as the sink
/// writes it out (the one alert object as `data`, and as `id` its place in the store and the
/// store's instance, when kept), what the store kept after the last change a client had when
/// it falls more than [`STREAM_BACKLOG`] behind the live ones ([`Follow::catch_up`]; a
/// `lagged` event with `{"missed": N}` when the store cannot say), and a comment every 5 s of
/// quiet. A client that comes back with
/// `Last-Event-ID` (as a browser's `EventSource` does) first gets the changes the store kept
/// after that one, at most [`STREAM_BACKLOG`] (a `lagged` event counts the older ones), read
/// from the store a page at a time as the client takes them.
async fn alert_stream(req: HttpRequest, st: web::Data<ApiState>) -> HttpResponse {
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    if let Some(refused) = st.refusal(&req) {
        return refused;
    }
    let Some(tx) = st.changes.as_ref() else {
        return text(HttpResponse::NotFound(), "this agent streams no alerts");
    };
    let instance = st.store.as_ref().map(cepheus_store::Store::instance);
    let resume = match req.headers().get("last-event-id") {
        // (An empty one, as after a stream that sent no `id`, is none.)
        None => None,
        Some(v) if v.as_bytes().trim_ascii().is_empty() => None,
        Some(v) => match v.to_str().ok().and_then(|v| parse_event_id(v.trim())) {
            // Another store's change (this one was made anew since): none of this one's.
            Some((seq, of)) => Some(seq.filter(|_| of.is_none_or(|of| Some(of) == instance))),
            None => {
                return text(
                    HttpResponse::BadRequest(),
                    "Last-Event-ID is an `id` this stream sent (SEQ@STORE, as `1042@9f3a01bc`)",
                );
            }
        },
    };
    let Some(slot) = st.streams.admit(Instant::now()) else {
        return text(
            HttpResponse::ServiceUnavailable(),
            format!("{MAX_STREAMS} alert streams are open already, all of them read"),
        );
    };
    let store = st.store.clone();
    // A new client has what the store holds when it comes, read before it subscribes: a
    // change kept after that read is sent to it live, or given by a catch-up should it fall
    // behind (`Follow::catch_up`), never lost.
    let mut given = None;
    let mut empty_at_start = false;
    if resume.is_none()
        && let Some(read) = store.clone()
    {
        match on_store(move || read.last_seq()).await {
            Ok(last) => {
                given = last;
                empty_at_start = last.is_none();
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the store for a new alert stream; it goes on live");
            }
        }
    }
    // A resumed one subscribes before the store is read: what the store holds now is
    // replayed, what comes after is live (a change is kept, and so has its place, before it
    // is sent).
    let rx = tx.subscribe();
    let mut replay = None;
    if let Some(after) = resume
        && let Some(store) = store.clone()
    {
        let read = store.clone();
        let point = move || -> Result<_, cepheus_store::StoreError> {
            let Some(end) = read.last_seq()? else {
                // Nothing kept, though the client had a change: all went (or the store was
                // made anew).
                return Ok((None, cepheus_store::Resume::nothing_kept()));
            };
            Ok((Some(end), read.resume_point(after, end, STREAM_BACKLOG)?))
        };
        match on_store(point).await {
            Ok((end, at)) => {
                given = at.after;
                empty_at_start = at.after.is_none();
                replay = Some(Replay {
                    instance: store.instance(),
                    store,
                    after: at.after,
                    end,
                    missed: at.skipped,
                    pruned: at.pruned,
                    told: None,
                });
            }
            Err(e) => return come_back_later(&e),
        }
    }
    // The live changes a replay already gave are not given again.
    let through = replay.as_ref().and_then(|r| r.end);
    let follow = Follow {
        rx,
        slot,
        replay,
        given,
        from_first: empty_at_start,
        through,
        store,
        instance,
    };
    let events = futures_util::stream::unfold(follow, |mut f| async move {
        if !f.slot.ask(Instant::now()) {
            return None;
        }
        if let Some(r) = f.replay.as_mut() {
            let (chunk, done) = r.next_chunk().await?;
            if r.after.is_some() {
                f.given = f.given.max(r.after);
            }
            if done {
                f.replay = None;
            }
            if !chunk.is_empty() {
                return Some((Ok::<_, actix_web::Error>(bytes::Bytes::from(chunk)), f));
            }
        }
        let mut chunk = String::new();
        // Fallen behind the live changes: how many went by.
        let mut lagged = None;
        match tokio::time::timeout(KEEP_ALIVE, f.rx.recv()).await {
            Err(_) => chunk.push_str(": keep-alive\n\n"),
            Ok(Err(RecvError::Closed)) => return None,
            Ok(Err(RecvError::Lagged(n))) => lagged = Some(n),
            Ok(Ok(c)) => {
                f.write(&mut chunk, c);
                // What else is there already goes in the same chunk (an alert storm: one
                // write for many changes keeps the client from falling behind).
                while chunk.len() < CHUNK_BYTES {
                    match f.rx.try_recv() {
                        Ok(c) => f.write(&mut chunk, c),
                        Err(TryRecvError::Lagged(n)) => {
                            lagged = Some(n);
                            break;
                        }
                        Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                    }
                }
            }
        }
        if let Some(n) = lagged
            && !f.catch_up().await
        {
            sse_lagged(&mut chunk, n, false);
        }
        if chunk.is_empty() {
            // (Only changes already replayed, or a replay to come: a comment keeps the chunk
            // non-empty.)
            chunk.push_str(": replayed\n\n");
        }
        Some((Ok::<_, actix_web::Error>(bytes::Bytes::from(chunk)), f))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(events)
}

/// One client's alert stream: the live changes, and a replay from the store when it resumed
/// or fell behind them.
struct Follow {
    rx: tokio::sync::broadcast::Receiver<super::sink::Streamed>,
    slot: StreamSlot,
    replay: Option<Replay>,
    /// The last kept change the client was given (or had when it came): where a replay
    /// begins when it falls behind.
    given: Option<u64>,
    /// With no `given`: the client has none of the store's changes (it was empty, or all
    /// were replayed as another store's), so a replay begins at the first kept. Else, with
    /// none, where it stands is not known: it is told `lagged`.
    from_first: bool,
    /// Live changes up to this one were given by a replay: not given again.
    through: Option<u64>,
    store: Option<cepheus_store::Store>,
    instance: Option<u32>,
}

impl Follow {
    /// A live change into the chunk, unless a replay gave it.
    fn write(&mut self, chunk: &mut String, (seq, json): super::sink::Streamed) {
        if let (Some(s), Some(end)) = (seq, self.through)
            && s <= end
        {
            return;
        }
        let json = match (json, seq) {
            (Some(json), _) => json,
            // A large change, read from the store where it was kept (one key, just written:
            // in sled's cache).
            (None, Some(s)) => {
                let read = (self.store.as_ref())
                    .map(|st| st.changes_after(s.checked_sub(1), 1))
                    .transpose();
                match read {
                    Ok(Some(rows)) if rows.first().is_some_and(|r| r.seq == s) => {
                        Arc::from(rows[0].json.as_str())
                    }
                    Ok(_) => {
                        // Pruned already (a store at its max_alerts in a storm): the client
                        // resumes past it; nothing to send.
                        tracing::debug!(
                            seq = s,
                            "a streamed alert change was pruned before it was sent"
                        );
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(seq = s, error = %e, "cannot read a streamed alert change from the store");
                        return;
                    }
                }
            }
            (None, None) => return,
        };
        sse_alert(chunk, seq.zip(self.instance), &json);
        if seq.is_some() {
            self.given = self.given.max(seq);
        }
    }

    /// The client fell more than [`STREAM_BACKLOG`] behind the live changes: what the store
    /// kept after the last one it was given is replayed (at most [`STREAM_BACKLOG`], the rest
    /// counted), then the live ones after those. False when that cannot be (no store, or it
    /// cannot be read): the caller says `lagged`.
    async fn catch_up(&mut self) -> bool {
        let Some(store) = self.store.clone() else {
            return false;
        };
        if self.given.is_none() && !self.from_first {
            return false;
        }
        let (after, from_first) = (self.given, self.from_first);
        let read = store.clone();
        let point = move || -> Result<_, cepheus_store::StoreError> {
            let Some(end) = read.last_seq()? else {
                return Ok(None);
            };
            let mut at = read.resume_point(after, end, STREAM_BACKLOG)?;
            if after.is_none() && from_first {
                // (None is read as another store's change: this client has none of them,
                // so only what was pruned since is missed.)
                at.pruned = read.pruned_through()?.is_some();
            }
            Ok(Some((end, at)))
        };
        match on_store(point).await {
            Ok(Some((end, at))) => {
                self.through = Some(end);
                self.replay = Some(Replay {
                    instance: store.instance(),
                    store,
                    after: at.after,
                    end: Some(end),
                    missed: at.skipped,
                    pruned: at.pruned,
                    told: None,
                });
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the store for a stream that fell behind");
                false
            }
        }
    }
}

/// A `lagged` event: `missed` changes this client will not get, and whether some after its
/// last were pruned from the store.
fn sse_lagged(chunk: &mut String, missed: u64, pruned: bool) {
    let pruned = if pruned { ",\"pruned\":true" } else { "" };
    let _ = write!(
        chunk,
        "event: lagged\ndata: {{\"missed\":{missed}{pruned}}}\n\n"
    );
}

/// One alert change as a server-sent event; its `id`, when kept, is its place in the store
/// and the store's instance ([`parse_event_id`] reads it back).
fn sse_alert(chunk: &mut String, place: Option<(u64, u32)>, json: &str) {
    if let Some((seq, instance)) = place {
        let _ = writeln!(chunk, "id: {seq}@{instance:08x}");
    }
    let _ = write!(chunk, "event: alert\ndata: {json}\n\n");
}

/// How many changes a resumed stream reads from the store at a time: its memory is a page,
/// whatever it missed.
const REPLAY_PAGE: usize = 64;

/// A replay the store cannot go on with: said in the log, and the stream ends.
fn give_up(e: &dyn std::fmt::Display) -> Option<(String, bool)> {
    tracing::warn!(error = %e, "cannot read the store for a stream that resumes; it ends");
    None
}

/// A stream that cannot resume now (the store cannot be read): a stream that ends at once,
/// asking the client to come back in 5 s (any answer but 200 would make a browser's
/// `EventSource` give up for good).
fn come_back_later(e: &dyn std::fmt::Display) -> HttpResponse {
    tracing::warn!(error = %e, "cannot read the store for a stream that resumes");
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .body("retry: 5000\n: the store cannot be read now; come back\n\n")
}

/// An event `id` as [`sse_alert`] writes it: the seq (`None`: the id is another store's, too
/// large for a seq) and the store's instance (`None` in an id from before instances were
/// kept: taken as this store's). `None` for text that is no such id.
fn parse_event_id(id: &str) -> Option<(Option<u64>, Option<u32>)> {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let (seq, of) = match id.split_once('@') {
        Some((seq, of)) if of.len() == 8 && of.bytes().all(|b| b.is_ascii_hexdigit()) => {
            (seq, Some(u32::from_str_radix(of, 16).ok()?))
        }
        Some(_) => return None,
        None => (id, None),
    };
    digits(seq).then(|| (seq.parse().ok(), of))
}

/// Runs `read` (a store read: it walks sled's pages) off the server's thread; its error, or
/// the blocking pool's, as text.
async fn on_store<T, E>(read: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, String>
where
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    match web::block(read).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// What a stream resumed with `Last-Event-ID` has still to replay from the store.
struct Replay {
    store: cepheus_store::Store,
    /// The store's instance, for the replayed changes' ids.
    instance: u32,
    /// The last change given (or skipped); `None`: none yet, from the first kept.
    after: Option<u64>,
    /// The last change kept when the stream began (`None`: none): those after it come live.
    end: Option<u64>,
    /// How many changes before the replayed ones the client will not get (over
    /// [`STREAM_BACKLOG`]), said first.
    missed: u64,
    /// Changes after the client's may have been pruned from the store (or it was made anew
    /// since): said first too.
    pruned: bool,
    /// The newest pruned change the client was told of (pruning may go on as it reads).
    told: Option<u64>,
}

impl Replay {
    /// The next chunk of the replay, and whether the replay is over; `None` when the store
    /// cannot be read: the stream ends, and the client, back with the last `id` it got,
    /// misses nothing.
    async fn next_chunk(&mut self) -> Option<(String, bool)> {
        let store = self.store.clone();
        let after = self.after;
        let page = move || -> Result<_, cepheus_store::StoreError> {
            Ok((
                store.pruned_through()?,
                store.changes_after(after, REPLAY_PAGE)?,
            ))
        };
        let (pruned_through, changes) = match on_store(page).await {
            Ok(got) => got,
            Err(e) => return give_up(&e),
        };
        // Changes after the last one given pruned since (the oldest go first), not told yet.
        let newly = pruned_through
            .is_some_and(|p| self.after.is_none_or(|a| p > a) && self.told.is_none_or(|t| p > t));
        let mut chunk = String::new();
        if self.missed > 0 || self.pruned || newly {
            sse_lagged(&mut chunk, self.missed, self.pruned || newly);
            self.missed = 0;
            self.pruned = false;
            self.told = pruned_through;
        }
        // (A short page is not the end: the store leaves out a row it cannot read.)
        let mut done = changes.is_empty();
        for c in changes {
            if self.end.is_none_or(|end| c.seq > end) {
                done = true;
                break;
            }
            sse_alert(&mut chunk, Some((c.seq, self.instance)), &c.json);
            self.after = Some(c.seq);
        }
        let through = matches!((self.after, self.end), (Some(a), Some(end)) if a >= end);
        Some((chunk, done || through))
    }
}

impl ApiState {
    /// Whether the request may read or change the agent's state: the right bearer token, or,
    /// with no token configured (the API then listens on loopback only), a `Host` that names
    /// this machine, so a web page whose name was made to point at 127.0.0.1 (DNS rebinding)
    /// cannot reach it through a browser. `Some` is the refusal to answer with.
    fn refusal(&self, req: &HttpRequest) -> Option<HttpResponse> {
        // Through the Unix socket: its file mode let the client in.
        if req.app_data::<ViaSocket>().is_some() {
            return None;
        }
        if self.token.is_none() && !host_is_local(req) {
            return Some(
                HttpResponse::Forbidden()
                    .content_type("text/plain")
                    .body("this API answers only requests addressed to localhost (Host header)\n"),
            );
        }
        (!self.authorized(req)).then(unauthorized)
    }

    /// Whether the request carries the right bearer token (compared in constant time), or no
    /// token is configured.
    fn authorized(&self, req: &HttpRequest) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let given = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            // (The scheme's case does not matter: RFC 9110.)
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map_or("", |(_, t)| t.trim_start_matches(' '));
        let (a, b) = (given.as_bytes(), token.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// Whether the `Host` header (absent: HTTP/1.0, a local client) names this machine:
/// `localhost` or a loopback address, any port.
fn host_is_local(req: &HttpRequest) -> bool {
    let Some(h) = req.headers().get("host") else {
        return true;
    };
    let Ok(h) = h.to_str() else {
        return false;
    };
    // The port, if any, is digits (`localhost:1@evil.example` names no port of ours).
    let port_ok = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let host = match h.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((ip, "")) => ip,
            Some((ip, after)) if after.strip_prefix(':').is_some_and(port_ok) => ip,
            _ => return false,
        },
        None => match h.rsplit_once(':') {
            Some((name, port)) if port_ok(port) => name,
            Some(_) => return false,
            None => h,
        },
    };
    // (`localhost.`, the name written fully qualified, is the same name.)
    let host = host.strip_suffix('.').unwrap_or(host);
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Text from a request as it goes into the agent's log: escaped (no line breaks or terminal
/// codes of its own) and cut to 200 characters.
fn for_log(s: &str) -> String {
    let cut: String = s.chars().take(200).collect();
    let more = if cut.len() < s.len() { "..." } else { "" };
    format!("{cut:?}{more}")
}

fn unauthorized() -> HttpResponse {
    HttpResponse::Unauthorized()
        .insert_header(("WWW-Authenticate", "Bearer"))
        .content_type("text/plain")
        .body("missing or wrong API token (Authorization: Bearer <token>)\n")
}

/// One rule's stats summed over the shards that run a part of it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RuleSummary {
    /// The rule.
    pub rule: String,
    /// Shards that run (a part of) it.
    pub shards: Vec<usize>,
    /// Groups held.
    pub groups: u64,
    /// Partial matches held.
    pub partial_matches: u64,
    /// Approximate bytes of state.
    pub bytes: u64,
    /// The engine's counters, summed.
    pub counters: BTreeMap<String, u64>,
}

/// The `/stats` document.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    /// Seconds since start.
    pub uptime_secs: u64,
    /// Ingest counters.
    pub ingest: IngestSnapshot,
    /// Datagrams the kernel dropped on our UDP sockets (receive queue full), from
    /// /proc/net/udp{,6}; `None` when unreadable.
    pub udp_kernel_drops: Option<u64>,
    /// Per syslog listener: messages, bytes, connections, the last message's time.
    pub listeners: Vec<super::counters::ListenerSnapshot>,
    /// Alert sink and control counters.
    pub sink: SinkSnapshot,
    /// Live capture counters (absent without `[capture]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureSnapshot>,
    /// Alerts dropped because the sink's mailbox was full.
    pub alerts_dropped: u64,
    /// Per shard.
    pub shards: Vec<ShardStats>,
    /// Per rule.
    pub rules: Vec<RuleSummary>,
    /// The list files the rules read (`in file(..)`), with their item counts: which feed
    /// the running rules test against, and how big it was when they were loaded.
    pub lists: Vec<crate::rulefiles::ListSummary>,
    /// Why the last reload was refused (the old rules kept running), until one succeeds.
    pub reload_error: Option<super::reload::ReloadError>,
    /// What the store holds (absent without a store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreStats>,
}

/// What the store holds.
#[derive(Clone, Debug, Serialize)]
pub struct StoreStats {
    /// Alert changes kept (at most `store.max_alerts`).
    pub alert_changes: u64,
    /// Alerts firing now (their resolve or retract not recorded yet).
    pub firing: u64,
}

fn add_counters(into: &mut BTreeMap<String, u64>, c: &impl Serialize) {
    if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(c) {
        for (k, v) in m {
            if let Some(n) = v.as_u64() {
                *into.entry(k).or_insert(0) += n;
            }
        }
    }
}

/// Collects the stats of every stage.
pub async fn collect(st: &ApiState) -> Stats {
    let mut shards = Vec::new();
    for (i, s) in st.shards.iter().enumerate() {
        match s.send(GetStats).await {
            Ok(x) => shards.push(x),
            Err(e) => {
                tracing::warn!(shard = i, error = %e, "shard did not answer");
                shards.push(ShardStats {
                    shard: i,
                    ..ShardStats::default()
                });
            }
        }
    }
    let mut rules: Vec<RuleSummary> = Vec::new();
    for s in &shards {
        // A shard's engine holds every rule, but runs (owns groups of) only those in its
        // `rules`: an ungrouped rule lives on one shard.
        for r in s.rule_stats.iter().filter(|r| s.rules.contains(&r.rule)) {
            let idx = match rules.iter().position(|x| x.rule == r.rule) {
                Some(i) => i,
                None => {
                    rules.push(RuleSummary {
                        rule: r.rule.clone(),
                        ..RuleSummary::default()
                    });
                    rules.len() - 1
                }
            };
            let sum = &mut rules[idx];
            sum.shards.push(s.shard);
            sum.groups += r.groups;
            sum.partial_matches += r.partial_matches;
            sum.bytes += r.bytes;
            add_counters(&mut sum.counters, &r.counters);
        }
    }
    Stats {
        uptime_secs: st.started.elapsed().as_secs(),
        ingest: st.ingest.snapshot(),
        udp_kernel_drops: kernel_udp_drops(&st.udp),
        listeners: st.listeners.iter().map(|l| l.snapshot()).collect(),
        // (Counted where the shards drop them: shown in the sink's counters, which /metrics
        // exports, and at the top level, where /stats said it first. An audit found the
        // sink's own field always 0.)
        sink: {
            let mut s = st.sink.snapshot();
            s.alerts_dropped = super::sink::dropped();
            s
        },
        capture: st.capture.as_ref().map(|c| c.snapshot()),
        alerts_dropped: super::sink::dropped(),
        // (Every shard runs the same rules: the first that answered says.)
        lists: (shards.iter())
            .find(|s| !s.lists.is_empty())
            .map(|s| s.lists.clone())
            .unwrap_or_default(),
        shards,
        rules,
        reload_error: st.reload_error.lock().ok().and_then(|e| e.clone()),
        store: st.store.as_ref().map(|s| {
            let (alert_changes, firing) = s.counts();
            StoreStats {
                alert_changes,
                firing,
            }
        }),
    }
}

/// Sums the `drops` column of /proc/net/udp and /proc/net/udp6 for sockets bound to the
/// given ports (Linux; `None` elsewhere or when unreadable).
pub fn kernel_udp_drops(addrs: &[SocketAddr]) -> Option<u64> {
    if addrs.is_empty() {
        return Some(0);
    }
    let mut total = 0u64;
    let mut any = false;
    for file in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        any = true;
        total += udp_drops_in(&text, addrs);
    }
    any.then_some(total)
}

/// The drops of our ports in one /proc/net/udp text.
pub fn udp_drops_in(text: &str, addrs: &[SocketAddr]) -> u64 {
    let mut total = 0;
    for line in text.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(drops)) = (cols.get(1), cols.last()) else {
            continue;
        };
        let Some(port) = local
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
        else {
            continue;
        };
        if addrs.iter().any(|a| a.port() == port) {
            total += drops.parse::<u64>().unwrap_or(0);
        }
    }
    total
}

/// Prometheus text exposition of a stats snapshot.
pub fn render_metrics(s: &Stats) -> String {
    let mut o = String::new();
    let family = |o: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    for (k, v) in s.ingest.pairs() {
        let name = format!("cepheus_ingest_{k}_total");
        family(&mut o, &name, "counter", "Ingest counter (see /stats).");
        let _ = writeln!(o, "{name} {v}");
    }
    if let Some(d) = s.udp_kernel_drops {
        family(
            &mut o,
            "cepheus_udp_kernel_drops_total",
            "counter",
            "Datagrams dropped by the kernel (socket receive queue full).",
        );
        let _ = writeln!(o, "cepheus_udp_kernel_drops_total {d}");
    }
    for (what, help) in [
        ("messages", "Messages received on a syslog listener."),
        (
            "bytes",
            "Bytes of the messages received on a syslog listener.",
        ),
        (
            "connections",
            "TCP connections accepted on a syslog listener.",
        ),
    ] {
        if s.listeners.is_empty() {
            break;
        }
        let name = format!("cepheus_listener_{what}_total");
        family(&mut o, &name, "counter", help);
        for l in &s.listeners {
            let v = match what {
                "messages" => l.messages,
                "bytes" => l.bytes,
                _ => l.connections,
            };
            // (A listener's name holds no quote nor backslash: a protocol and an address.)
            let _ = writeln!(o, "{name}{{listener=\"{}\"}} {v}", l.listener);
        }
    }
    for (k, v) in s.sink.pairs() {
        let name = format!("cepheus_{k}_total");
        family(&mut o, &name, "counter", "Alert sink / control counter.");
        let _ = writeln!(o, "{name} {v}");
    }
    for (k, v) in s.sink.gauges() {
        let name = format!("cepheus_{k}");
        let help = if k.ends_with("_behind") {
            "1 while alert changes for the output wait in the store (they follow in order)."
        } else if k == "store_waiting" {
            "Alert changes written out that wait for the store to keep them now."
        } else {
            "Alert changes waiting in an output's queue now."
        };
        family(&mut o, &name, "gauge", help);
        let _ = writeln!(o, "{name} {v}");
    }
    // Gauges: whether the rules on disk were refused at the last reload (the old ones run;
    // `reload_error` in /stats says why), and how long the agent has run.
    family(
        &mut o,
        "cepheus_rules_reload_refused",
        "gauge",
        "1 while the last rule reload was refused (old rules running), else 0.",
    );
    let _ = writeln!(
        o,
        "cepheus_rules_reload_refused {}",
        u8::from(s.reload_error.is_some())
    );
    family(
        &mut o,
        "cepheus_uptime_seconds",
        "gauge",
        "Seconds since the agent started.",
    );
    let _ = writeln!(o, "cepheus_uptime_seconds {}", s.uptime_secs);
    if let Some(st) = &s.store {
        family(
            &mut o,
            "cepheus_alerts_firing",
            "gauge",
            "Alerts firing now, as the store has them.",
        );
        let _ = writeln!(o, "cepheus_alerts_firing {}", st.firing);
    }
    for (k, v) in s.capture.iter().flat_map(|c| c.pairs()) {
        let name = format!("cepheus_capture_{k}_total");
        family(
            &mut o,
            &name,
            "counter",
            "Live capture counter (see /stats).",
        );
        let _ = writeln!(o, "{name} {v}");
    }
    for (k, v) in s.capture.iter().flat_map(|c| c.gauges()) {
        let name = format!("cepheus_capture_{k}");
        family(
            &mut o,
            &name,
            "gauge",
            "1 while the live capture is down (its interface went down or was removed).",
        );
        let _ = writeln!(o, "{name} {v}");
    }
    // Per-shard counters and gauges (what waits and what is held: the back-pressure an
    // operator alerts on): one family each, one line per shard.
    type Get = fn(&ShardStats) -> u64;
    let per_shard: [(&str, &str, &str, Get); 16] = [
        (
            "cepheus_shard_batches_total",
            "counter",
            "Batches of events a shard handled.",
            |sh| sh.batches,
        ),
        (
            "cepheus_shard_late_total",
            "counter",
            "Late events per shard (event time below a rule's watermark), over its rules.",
            |sh| sh.late,
        ),
        (
            "cepheus_shard_journal_written_total",
            "counter",
            "Events a shard appended to its journal (replayed after a crash).",
            |sh| sh.journal.map_or(0, |j| j.written),
        ),
        (
            "cepheus_shard_journal_skipped_total",
            "counter",
            "Events a shard could not journal (full, disk nearly full, a failed write): a crash before its next saved state would lose them.",
            |sh| sh.journal.map_or(0, |j| j.skipped),
        ),
        (
            "cepheus_shard_journal_replayed_total",
            "counter",
            "Events a shard replayed from its journal at start.",
            |sh| sh.journal.map_or(0, |j| j.replayed),
        ),
        (
            "cepheus_shard_events_total",
            "counter",
            "Deliveries handled per shard.",
            |sh| sh.events,
        ),
        (
            "cepheus_shard_engine_restarts_total",
            "counter",
            "Times a shard's engine panicked and was rebuilt (its groups' state lost).",
            |sh| sh.engine_restarts,
        ),
        (
            "cepheus_shard_future_total",
            "counter",
            "Events stamped after their arrival (a sender whose clock runs ahead), taken as arriving now by event-time rules.",
            |sh| sh.future,
        ),
        (
            "cepheus_shard_keyless_total",
            "counter",
            "Matches dropped because the event lacked a group_by field.",
            |sh| sh.keyless,
        ),
        (
            "cepheus_shard_stuck_timers_total",
            "counter",
            "Timers an engine dropped because a group re-armed them for the instant they fired (a bug; the engine goes on).",
            |sh| sh.stuck_timers,
        ),
        (
            "cepheus_shard_journal_bytes",
            "gauge",
            "Bytes a shard's journal holds (at most 512 MiB).",
            |sh| sh.journal.map_or(0, |j| j.bytes),
        ),
        (
            "cepheus_shard_queued_events",
            "gauge",
            "Events waiting in a shard's queue or being handled (one larger than engine.queue_bytes / engine.queue_size counts as several).",
            |sh| sh.queued_events as u64,
        ),
        (
            "cepheus_shard_queued_batches",
            "gauge",
            "Batches waiting in a shard's queue.",
            |sh| sh.queued_batches as u64,
        ),
        (
            "cepheus_shard_timer_entries",
            "gauge",
            "Timer entries a shard's engine holds.",
            |sh| sh.timer_entries as u64,
        ),
        (
            "cepheus_shard_groups",
            "gauge",
            "Groups a shard's engine holds, over its rules.",
            |sh| sh.groups as u64,
        ),
        (
            "cepheus_shard_rules",
            "gauge",
            "Rules run per shard.",
            |sh| sh.rules.len() as u64,
        ),
    ];
    for (name, kind, help, get) in per_shard {
        family(&mut o, name, kind, help);
        for sh in &s.shards {
            let _ = writeln!(o, "{name}{{shard=\"{}\"}} {}", sh.shard, get(sh));
        }
    }
    family(
        &mut o,
        "cepheus_rule_groups",
        "gauge",
        "Groups held per rule.",
    );
    for r in &s.rules {
        let _ = writeln!(
            o,
            "cepheus_rule_groups{{rule=\"{}\"}} {}",
            esc(&r.rule),
            r.groups
        );
    }
    let mut names: Vec<&String> = s.rules.iter().flat_map(|r| r.counters.keys()).collect();
    names.sort();
    names.dedup();
    for n in names {
        let name = format!("cepheus_rule_{n}_total");
        family(&mut o, &name, "counter", "Per-rule engine counter.");
        for r in &s.rules {
            if let Some(v) = r.counters.get(n) {
                let _ = writeln!(o, "{name}{{rule=\"{}\"}} {v}", esc(&r.rule));
            }
        }
    }
    o
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The body of `POST /groups/forget`.
#[derive(Debug, serde::Deserialize)]
struct ForgetRequest {
    rule: String,
    key: String,
}

/// A request's JSON body, of the shape `shape` says. JSON bodies only: a web page can post
/// text/plain across sites without asking first, but not application/json (the browser asks,
/// and no route answers its question).
#[allow(clippy::result_large_err)] // (answered at once: no error travels further)
fn json_body<T: serde::de::DeserializeOwned>(
    req: &HttpRequest,
    body: &[u8],
    shape: &str,
) -> Result<T, HttpResponse> {
    let json = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(text(
            HttpResponse::UnsupportedMediaType(),
            "send the body as Content-Type: application/json",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| text(HttpResponse::BadRequest(), format!("expected {shape}: {e}")))
}

/// The most a request body may hold: the API's bodies are a few hundred bytes.
const MAX_BODY: usize = 64 * 1024;

/// A request's body, at most [`MAX_BODY`] bytes: a larger one is refused with 413 saying the
/// limit (read after the token check, so a request without it sends its body for nothing).
async fn read_body(payload: web::Payload) -> Result<bytes::Bytes, HttpResponse> {
    match payload.to_bytes_limited(MAX_BODY).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(e)) => Err(text(
            HttpResponse::BadRequest(),
            format!("the body could not be read: {e}"),
        )),
        Err(_) => Err(text(
            HttpResponse::PayloadTooLarge(),
            format!(
                "the body is over {} KiB, the most this API takes (a request is a few hundred bytes)",
                MAX_BODY / 1024
            ),
        )),
    }
}

/// A write request's body as `T` (JSON of the shape `shape` says), once its token is checked
/// (a request without it learns nothing, not even the body's shape): else the answer to give.
#[allow(clippy::result_large_err)] // (answered at once: no error travels further)
async fn json_request<T: serde::de::DeserializeOwned>(
    req: &HttpRequest,
    st: &ApiState,
    payload: web::Payload,
    shape: &str,
) -> Result<T, HttpResponse> {
    if let Some(refused) = st.refusal(req) {
        return Err(refused);
    }
    let body = read_body(payload).await?;
    json_body(req, &body, shape)
}

/// The answer of a request that needs the store, from an agent that keeps none.
fn no_store() -> HttpResponse {
    text(HttpResponse::NotFound(), "this agent keeps no store")
}

/// The answer when the alert sink did not take a request (it is stopping).
fn sink_silent(e: impl std::fmt::Display) -> HttpResponse {
    text(
        HttpResponse::ServiceUnavailable(),
        format!("the alert sink did not answer: {e}"),
    )
}

/// A plain-text answer.
fn text(mut r: actix_web::HttpResponseBuilder, what: impl std::fmt::Display) -> HttpResponse {
    r.content_type("text/plain").body(format!("{what}\n"))
}

/// `POST /groups/forget` `{"rule", "key"}`: retires a group in whichever shard holds it: 200
/// `{"forgotten": true}`, or 404 when no shard holds such a group (unknown rule or key).
async fn forget_group(
    req: HttpRequest,
    st: web::Data<ApiState>,
    payload: web::Payload,
) -> HttpResponse {
    let shape = r#"{"rule": "...", "key": "..."}"#;
    let body: ForgetRequest = match json_request(&req, &st, payload, shape).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let mut forgotten = false;
    let mut expected = false;
    let mut group_by: Option<Vec<String>> = None;
    let mut sharers = Vec::new();
    // What the store holds before the engines forget: only that may be resolved by the sink
    // below (an alert the group makes meanwhile is a new episode).
    let mark = match &st.alert_sink {
        Some(sink) => sink.send(super::sink::StoreMark).await.ok().flatten(),
        None => None,
    };
    let mut answered = true;
    for s in &st.shards {
        let msg = ForgetGroup {
            rule: body.rule.clone(),
            key: body.key.clone(),
        };
        match s.send(msg).await {
            Ok(f) => {
                forgotten |= f.forgotten;
                expected |= f.expected;
                group_by = group_by.or(f.group_by);
                if sharers.is_empty() {
                    sharers = f.sharers;
                }
            }
            Err(e) => {
                answered = false;
                tracing::warn!(error = %e, "shard did not answer");
            }
        }
    }
    // The alerts of the group that no engine holds (a match fires once, and stays firing):
    // resolved too, after the engines' own resolves (the shards sent those to the sink before
    // answering), so that nothing of the group is left firing.
    let key = (group_by.as_deref())
        .and_then(|g| cepheus_core::engine::group_key_texts(g, &body.key).map(|k| (g.to_vec(), k)));
    // (A shard that did not answer may still hold the group and its alert: left as it is.)
    if let (Some(sink), Some((group_by, key)), Some(through), true) =
        (&st.alert_sink, key, mark, answered)
    {
        let msg = super::sink::ForgetAlerts {
            through,
            rules: sharers,
            group_by,
            key,
            time: crate::flow::live::wall_clock(),
        };
        match sink.send(msg).await {
            Ok(n) => forgotten |= n > 0,
            Err(e) => tracing::warn!(error = %e, "the alert sink did not answer"),
        }
    }
    // Each group retired is said by name (an operator's act that switches monitoring off:
    // there are at most as many as groups); a request that retired nothing, at most ten a
    // second, so a client looping over it does not flood the log (the line says how many it
    // held back).
    static FORGET_LOG: std::sync::LazyLock<super::counters::LogLimit> =
        std::sync::LazyLock::new(|| super::counters::LogLimit::new(100));
    if forgotten {
        tracing::info!(
            rule = %for_log(&body.rule),
            key = %for_log(&body.key),
            forgotten,
            "groups forget"
        );
    } else if let Some(held_back) = FORGET_LOG.allow() {
        tracing::info!(
            rule = %for_log(&body.rule),
            key = %for_log(&body.key),
            forgotten,
            held_back,
            "groups forget"
        );
    }
    // `rule_known` and the rule's `group_by` let a client say which part was wrong.
    let doc = serde_json::json!({
        "rule": body.rule,
        "key": body.key,
        "forgotten": forgotten,
        // Watched from the start (`expect`, or an ungrouped rule's one group): retired all the
        // same, watched again from the next reload.
        "expected": expected,
        "rule_known": group_by.is_some(),
        "group_by": group_by,
    });
    if forgotten {
        HttpResponse::Ok().json(doc)
    } else {
        HttpResponse::NotFound().json(doc)
    }
}

/// The query of `GET /groups`.
#[derive(Debug, serde::Deserialize)]
struct GroupsQuery {
    rule: String,
    limit: Option<usize>,
}

/// Groups listed at most by `GET /groups` (`limit` lowers it).
pub const MAX_LISTED_GROUPS: usize = 10_000;

/// `GET /groups?rule=NAME[&limit=N]`: the rule's groups across the shards, in key order (at
/// most `limit`, default and cap [`MAX_LISTED_GROUPS`]): `{"rule", "group_by", "total",
/// "groups": [{"group": {..}, "expected", "firing", "active_at"}]}`; 404 when no rule has
/// that name. How an operator finds the key of a group that raises no alert. `firing`: an
/// alert of the group fires (an open episode, or a match's alert the store holds firing).
async fn list_groups(
    req: HttpRequest,
    st: web::Data<ApiState>,
    query: web::Query<GroupsQuery>,
) -> HttpResponse {
    if let Some(refused) = st.refusal(&req) {
        return refused;
    }
    let limit = query
        .limit
        .unwrap_or(MAX_LISTED_GROUPS)
        .min(MAX_LISTED_GROUPS);
    let mut group_by: Option<Vec<String>> = None;
    let mut total = 0usize;
    let mut groups = Vec::new();
    for s in &st.shards {
        let msg = ListGroups {
            rule: query.rule.clone(),
            limit,
        };
        match s.send(msg).await {
            Ok(Some(l)) => {
                group_by = Some(l.group_by);
                total += l.total;
                groups.extend(l.groups);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "shard did not answer"),
        }
    }
    let Some(group_by) = group_by else {
        return HttpResponse::NotFound().json(serde_json::json!({
            "rule": query.rule,
            "rule_known": false,
        }));
    };
    groups.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    groups.truncate(limit);
    // A match fires once and stays firing in the store while its group holds no open episode
    // (its partial matches may even be gone): the store's firing alerts of the rule say which
    // of the other groups fire.
    let stored = match &st.store {
        Some(store) if groups.iter().any(|g| !g.firing) => {
            let store = store.clone();
            let listing = Listing {
                recent: None,
                rule: Some(query.rule.clone()),
                severity: None,
            };
            match on_store(move || store.firing_top(MAX_FIRING, |json| listing.rank(json))).await {
                Ok(list) => firing_groups(&list, &group_by),
                Err(e) => {
                    tracing::warn!(error = %e, "groups list: the store's firing alerts could not be read");
                    std::collections::HashSet::new()
                }
            }
        }
        _ => std::collections::HashSet::new(),
    };
    let listed: Vec<serde_json::Value> = groups
        .iter()
        .map(|g| {
            let group: serde_json::Map<String, serde_json::Value> = group_by
                .iter()
                .zip(&g.key)
                .map(|(name, v)| (name.clone(), v.to_json()))
                .collect();
            let firing = g.firing || stored.contains(&group_text(&group, &group_by));
            serde_json::json!({
                "group": group,
                "expected": g.expected,
                "firing": firing,
                "active_at": g.active_at.to_rfc3339(),
            })
        })
        .collect();
    HttpResponse::Ok().json(serde_json::json!({
        "rule": query.rule,
        "group_by": group_by,
        "total": total,
        "groups": listed,
    }))
}

/// A group's values as text, in `group_by` order (a value missing: `null`): what tells two
/// alerts' groups apart whatever the order of their objects' keys.
fn group_text(group: &serde_json::Map<String, serde_json::Value>, group_by: &[String]) -> String {
    let values: Vec<&serde_json::Value> = group_by
        .iter()
        .map(|n| group.get(n).unwrap_or(&serde_json::Value::Null))
        .collect();
    serde_json::to_string(&values).unwrap_or_default()
}

/// The groups (as [`group_text`]) of the alerts in `list`, each an alert's JSON.
fn firing_groups(
    list: &[cepheus_store::StoredAlert],
    group_by: &[String],
) -> std::collections::HashSet<String> {
    #[derive(serde::Deserialize)]
    struct Grouped {
        #[serde(default)]
        group: serde_json::Map<String, serde_json::Value>,
    }
    list.iter()
        .filter_map(|a| serde_json::from_str::<Grouped>(&a.json).ok())
        .map(|a| group_text(&a.group, group_by))
        .collect()
}

async fn health() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

async fn stats(req: HttpRequest, st: web::Data<ApiState>) -> HttpResponse {
    if let Some(refused) = st.refusal(&req) {
        return refused;
    }
    HttpResponse::Ok().json(collect(&st).await)
}

/// `GET /alerts`: the alerts firing now, oldest first; `?recent=N`: the last N alert changes
/// instead (firing, resolved, retracted), oldest first. A JSON array of alert objects.
async fn alerts(
    req: HttpRequest,
    st: web::Data<ApiState>,
    query: web::Query<AlertsQuery>,
) -> HttpResponse {
    if let Some(refused) = st.refusal(&req) {
        return refused;
    }
    let Some(store) = st.store.clone() else {
        return no_store();
    };
    let recent = query.recent;
    if recent == Some(0) {
        return text(
            HttpResponse::BadRequest(),
            "recent=0 lists nothing: give the number of latest changes to list (1 or more)",
        );
    }
    let listing = match Listing::of(&query) {
        Ok(l) => l,
        Err(why) => return text(HttpResponse::BadRequest(), why),
    };
    let Ok(place) = st.listings.0.clone().try_acquire_owned() else {
        let mut busy = HttpResponse::ServiceUnavailable();
        busy.insert_header(("Retry-After", "1"));
        return text(
            busy,
            format!(
                "{MAX_LISTINGS} listings are being read already (a client that asks and does not read holds its place until its connection ends): retry"
            ),
        );
    };
    // How many fire in all: a listing of the firing alerts holds the newest that fit.
    let firing = store.counts().1;
    match on_store(move || alert_listing(&store, &listing)).await {
        Ok(list) => {
            let mut body = String::from("[");
            for (i, a) in list.iter().enumerate() {
                if i > 0 {
                    body.push(',');
                }
                body.push_str(&a.json);
            }
            body.push_str("]\n");
            let mut answer = HttpResponse::Ok();
            answer.content_type("application/json");
            if recent.is_none() {
                // (The listing may hold fewer: the newest 20,000, at most 64 MiB.)
                answer.insert_header(("X-Firing-Total", firing.to_string()));
            }
            let body = bytes::Bytes::from(body);
            answer.body(HeldBody {
                len: body.len() as u64,
                body: Some(body),
                _place: place,
            })
        }
        Err(e) => text(HttpResponse::InternalServerError(), e),
    }
}

/// `POST /alerts/ack` `{"id": "...", "by": "..."}`: acknowledges a firing alert (it stays
/// firing and still resolves; listings and its resolve carry `ack`). 404 when no such alert
/// is firing.
async fn ack_alert(
    req: HttpRequest,
    st: web::Data<ApiState>,
    payload: web::Payload,
) -> HttpResponse {
    let shape = r#"{"id": "<16 hex digits>", "by": "..."}"#;
    let body: AckRequest = match json_request(&req, &st, payload, shape).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let Ok(id) = body.id.parse::<cepheus_core::alert::AlertId>() else {
        // (Quoted and cut: what a client sent is not echoed raw.)
        let what = format!("{} is no alert id (16 hex digits)", for_log(&body.id));
        return text(HttpResponse::BadRequest(), what);
    };
    let Some(store) = st.store.clone() else {
        return no_store();
    };
    let by = if body.by.trim().is_empty() {
        "api".to_string()
    } else {
        body.by.chars().take(200).collect()
    };
    let now = crate::flow::live::wall_clock().to_rfc3339();
    match on_store(move || store.ack(id.0, &by, &now)).await {
        Ok(cepheus_store::Acked::Now) => {
            HttpResponse::Ok().json(serde_json::json!({ "acked": true }))
        }
        // Who had acknowledged it, so the client can say whose acknowledgement it replaced.
        Ok(cepheus_store::Acked::Again { before }) => HttpResponse::Ok().json(serde_json::json!({
            "acked": true,
            "before": serde_json::from_str::<serde_json::Value>(&before).unwrap_or_default(),
        })),
        Ok(cepheus_store::Acked::NotFiring) => HttpResponse::NotFound().json(serde_json::json!({
            "acked": false,
            "error": format!("no alert {} is firing (`cepheus alerts` lists them)", body.id),
        })),
        Err(e) => text(HttpResponse::InternalServerError(), e),
    }
}

/// `GET /silences`: the silences the agent keeps (pending, active, and those ended in the
/// last 7 days), by id, each with its `state` (see [`super::silence`]). 404 without a store.
async fn list_silences(req: HttpRequest, st: web::Data<ApiState>) -> HttpResponse {
    if let Some(refused) = st.refusal(&req) {
        return refused;
    }
    let Some(sink) = &st.alert_sink else {
        return no_store();
    };
    match sink.send(super::sink::ListSilences).await {
        Ok(list) => {
            let now = crate::flow::live::wall_clock();
            let listed: Vec<serde_json::Value> = list.iter().map(|s| s.listed(now)).collect();
            HttpResponse::Ok().json(listed)
        }
        Err(e) => sink_silent(e),
    }
}

/// `POST /silences/add` `{"rule": .., "group": {..}, "for": "2h" | "ends_at": RFC 3339,
/// "starts_at": .., "by": .., "comment": ..}`: a new silence, answered as `GET /silences`
/// lists it (201); 400 saying what is wrong with it; 409 when the agent keeps as many as it
/// can.
async fn add_silence(
    req: HttpRequest,
    st: web::Data<ApiState>,
    payload: web::Payload,
) -> HttpResponse {
    let shape = r#"{"rule": "...", "group": {"field": "value"}, "for": "2h", "by": "...", "comment": "..."}"#;
    let new: super::silence::NewSilence = match json_request(&req, &st, payload, shape).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let Some(sink) = &st.alert_sink else {
        return no_store();
    };
    // A silence names fields of its rule's group, or of some rule's: a typo would mute
    // nothing, silently. (A blank rule is said by the silence's own checks.)
    let named = new.rule.as_deref().map(str::trim).filter(|r| !r.is_empty());
    if let (None, Some(shard)) = (named, st.shards.first())
        && !new.group.is_empty()
    {
        match shard.send(super::shard::GroupBys).await {
            Ok(all) => {
                if !all.iter().any(|g| new.group.keys().all(|f| g.contains(f))) {
                    let fields: Vec<String> = new.group.keys().map(|f| for_log(f)).collect();
                    return text(
                        HttpResponse::BadRequest(),
                        format!(
                            "no rule the agent runs groups by {}: the silence would mute nothing (`cepheus groups list RULE` shows a rule's fields)",
                            fields.join(" and ")
                        ),
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "a shard did not answer; the silence's fields are not checked")
            }
        }
    }
    if let (Some(rule), Some(shard)) = (named, st.shards.first()) {
        let rule = rule.to_string();
        match shard.send(super::shard::GroupByOf(rule.clone())).await {
            Ok(None) => {
                return text(
                    HttpResponse::BadRequest(),
                    format!(
                        "the agent runs no rule named {} (its /stats lists the rules it runs)",
                        for_log(&rule)
                    ),
                );
            }
            Ok(Some(group_by)) => {
                if let Some(f) = new.group.keys().find(|f| !group_by.contains(f)) {
                    let by = if group_by.is_empty() {
                        "has no group_by".to_string()
                    } else {
                        format!("groups by {}", group_by.join(", "))
                    };
                    return text(
                        HttpResponse::BadRequest(),
                        format!(
                            "rule {} {by}: group field {} is none of them, so the silence would mute nothing",
                            for_log(&rule),
                            for_log(f)
                        ),
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "a shard did not answer; the silence's fields are not checked")
            }
        }
    }
    match sink.send(super::sink::AddSilence(new)).await {
        Ok(Ok((s, existing))) => {
            let mut listed = s.listed(crate::flow::live::wall_clock());
            if existing {
                // (The same silence made again, a key pressed twice: the one there stands.)
                listed["existing"] = true.into();
                HttpResponse::Ok().json(listed)
            } else {
                HttpResponse::Created().json(listed)
            }
        }
        Ok(Err((code, why))) => {
            let status = actix_web::http::StatusCode::from_u16(code)
                .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
            text(HttpResponse::build(status), why)
        }
        Err(e) => sink_silent(e),
    }
}

/// `POST /silences/expire` `{"id": "<16 hex digits>"}`: the silence ends now (the alerts it
/// muted that still fire are sent); answered as listed. 404 when there is no such silence.
async fn expire_silence(
    req: HttpRequest,
    st: web::Data<ApiState>,
    payload: web::Payload,
) -> HttpResponse {
    #[derive(serde::Deserialize)]
    struct Expire {
        id: String,
    }
    let shape = r#"{"id": "<16 hex digits>"}"#;
    let body: Expire = match json_request(&req, &st, payload, shape).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let Some(sink) = &st.alert_sink else {
        return no_store();
    };
    // (An id as listed, or without its leading zeros.)
    let id = match u64::from_str_radix(body.id.trim(), 16) {
        Ok(n) if body.id.trim().len() <= 16 => format!("{n:016x}"),
        _ => body.id.trim().to_ascii_lowercase(),
    };
    match sink.send(super::sink::ExpireSilence(id)).await {
        Ok(Ok(Some(s))) => HttpResponse::Ok().json(s.listed(crate::flow::live::wall_clock())),
        Ok(Ok(None)) => HttpResponse::NotFound().json(serde_json::json!({
            "error": format!("no silence {} (`cepheus silence list` lists them)", for_log(&body.id)),
        })),
        Ok(Err(why)) => text(HttpResponse::InternalServerError(), why),
        Err(e) => sink_silent(e),
    }
}

/// `/alerts/ack` body.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AckRequest {
    id: String,
    #[serde(default)]
    by: String,
}

/// What a listing of `/alerts` (and of `cepheus alerts`) holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The last N changes instead of the alerts firing now.
    pub recent: Option<usize>,
    /// Only this rule's alerts.
    pub rule: Option<String>,
    /// Only alerts at least this severe.
    pub severity: Option<cepheus_core::rules::ir::Severity>,
}

impl Listing {
    /// Whether it names a rule or a least severity (so it may leave firing alerts out).
    pub fn filtered(&self) -> bool {
        self.rule.is_some() || self.severity.is_some()
    }

    /// The listing a query asks for; `Err` says what of it is wrong.
    fn of(q: &AlertsQuery) -> Result<Listing, String> {
        let severity = match q.severity.as_deref() {
            None => None,
            Some(s) => Some(cepheus_core::rules::ir::Severity::parse(s).ok_or_else(|| {
                format!(
                    "severity={s}: give one of critical, high, medium, low, info (the alerts at least that severe are listed)"
                )
            })?),
        };
        Ok(Listing {
            recent: q.recent,
            rule: q.rule.clone(),
            severity,
        })
    }

    /// Whether an alert (its JSON) is one this listing names, and its rank (the more severe,
    /// the higher) when it is.
    fn rank(&self, json: &str) -> Option<u8> {
        #[derive(Default, serde::Deserialize)]
        struct Head<'a> {
            #[serde(borrow, default)]
            rule: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow, default)]
            severity: Option<std::borrow::Cow<'a, str>>,
        }
        // (An object without them, which the agent never writes, ranks last and matches no
        // rule or severity asked for.)
        let head: Head<'_> = serde_json::from_str(json).unwrap_or_default();
        let sev = head
            .severity
            .as_deref()
            .and_then(cepheus_core::rules::ir::Severity::parse)
            .unwrap_or(cepheus_core::rules::ir::Severity::Info);
        if self
            .rule
            .as_deref()
            .is_some_and(|r| head.rule.as_deref() != Some(r))
        {
            return None;
        }
        if self.severity.is_some() && head.severity.is_none() {
            return None;
        }
        if self.severity.is_some_and(|least| sev > least) {
            return None;
        }
        Some(4 - sev as u8)
    }
}

/// What `/alerts` (and `cepheus alerts` reading the store itself) lists: the last changes
/// (at most [`MAX_RECENT`] looked at), or the alerts firing now ([`MAX_FIRING`] at most: the
/// firing list can hold a million one-shot matches; past that, the most severe, then the
/// newest, so a flood of minor alerts hides no critical one), of one rule or severity if
/// asked.
pub fn alert_listing(
    store: &cepheus_store::Store,
    listing: &Listing,
) -> Result<Vec<cepheus_store::StoredAlert>, cepheus_store::StoreError> {
    listing_within(store, listing, MAX_LISTING_BYTES)
}

/// [`alert_listing`] with at most `max_bytes` of JSON.
fn listing_within(
    store: &cepheus_store::Store,
    listing: &Listing,
    max_bytes: usize,
) -> Result<Vec<cepheus_store::StoredAlert>, cepheus_store::StoreError> {
    let filtered = listing.filtered();
    let mut list = match listing.recent {
        Some(n) if filtered => {
            let mut all = store.recent(MAX_RECENT)?;
            all.retain(|a| listing.rank(&a.json).is_some());
            let cut = all.len().saturating_sub(n);
            all.drain(..cut);
            all
        }
        Some(n) => store.recent(n.min(MAX_RECENT))?,
        None => {
            // Ranked (each read) only when some are left out: the rule or severity asked,
            // or more firing than a listing holds.
            let mut f = if filtered || store.counts().1 > MAX_FIRING as u64 {
                store.firing_top(MAX_FIRING, |json| listing.rank(json))?
            } else {
                store.firing_newest(MAX_FIRING)?
            };
            // Oldest first by when each began firing (shards write theirs independently, so
            // the store's order is only nearly that), then as stored.
            f.sort_by_cached_key(|a| began(&a.json));
            f
        }
    };
    let total: usize = list.iter().map(|a| a.json.len() + 1).sum();
    if total <= max_bytes {
        return Ok(list);
    }
    if listing.recent.is_some() {
        // The latest changes: the newest that fit in `max_bytes` of JSON.
        let mut bytes = 0usize;
        let keep = list
            .iter()
            .rev()
            .take_while(|a| {
                bytes = bytes.saturating_add(a.json.len() + 1);
                bytes <= max_bytes
            })
            .count();
        let cut = list.len() - keep;
        list.drain(..cut);
        return Ok(list);
    }
    // The firing alerts: the most severe, then the newest, that fit (found by a review: the
    // oldest went first, and a critical alert is often the oldest), still oldest first.
    let mut order: Vec<usize> = (0..list.len()).collect();
    // (Each alert's rank read once: it parses the alert.)
    order.sort_by_cached_key(|&i| {
        (
            std::cmp::Reverse(Listing::default().rank(&list[i].json)),
            std::cmp::Reverse(list[i].seq),
        )
    });
    let mut keep = vec![false; list.len()];
    let mut bytes = 0usize;
    for i in order {
        bytes = bytes.saturating_add(list[i].json.len() + 1);
        if bytes > max_bytes {
            break;
        }
        keep[i] = true;
    }
    let mut kept = keep.iter();
    list.retain(|_| kept.next().copied().unwrap_or(false));
    Ok(list)
}

/// The most JSON a listing holds (the newest alerts that fit): one request must not make the
/// agent build gigabytes.
pub const MAX_LISTING_BYTES: usize = 64 << 20;

/// When an alert change began (its `time`), read without building the whole object: a
/// listing of 20,000 firing alerts sorts on it. `None` (first) when it has none.
fn began(json: &str) -> Option<cepheus_core::time::Timestamp> {
    #[derive(serde::Deserialize)]
    struct Time<'a> {
        #[serde(borrow)]
        time: std::borrow::Cow<'a, str>,
    }
    serde_json::from_str::<Time<'_>>(json)
        .ok()
        .and_then(|t| cepheus_core::time::Timestamp::parse_rfc3339(&t.time))
}

/// The most changes `/alerts?recent=N` returns.
pub const MAX_RECENT: usize = 20_000;

/// The most firing alerts `/alerts` returns (the newest).
pub const MAX_FIRING: usize = 20_000;

/// `/alerts` query parameters.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsQuery {
    /// The last N alert changes instead of the firing alerts.
    pub recent: Option<usize>,
    /// Only this rule's alerts.
    pub rule: Option<String>,
    /// Only alerts at least this severe (`critical`, `high`, `medium`, `low`, `info`).
    pub severity: Option<String>,
}

async fn metrics(req: HttpRequest, st: web::Data<ApiState>) -> HttpResponse {
    if let Some(refused) = st.refusal(&req) {
        return refused;
    }
    let s = collect(&st).await;
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(render_metrics(&s))
}

/// Registers the routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    // A query that does not parse is answered in words, naming what the routes take.
    let queries = web::QueryConfig::default().error_handler(|err, _| {
        let why = format!(
            "bad query string ({err}): /alerts takes recent=N (1 or more), rule=NAME and severity=LEVEL, /groups rule=NAME and limit=N"
        );
        actix_web::error::InternalError::from_response(err, text(HttpResponse::BadRequest(), why))
            .into()
    });
    // A read answers HEAD as GET (without the body: actix-http sends none for HEAD), as
    // HTTP has it, so a probe that checks with HEAD sees the agent; another method is 405
    // with `Allow`; an unknown path is 404 naming the paths.
    fn read<F, Args>(path: &str, handler: F) -> actix_web::Resource
    where
        F: actix_web::Handler<Args>,
        Args: actix_web::FromRequest + 'static,
        F::Output: actix_web::Responder + 'static,
    {
        web::resource(path)
            .route(web::get().to(handler.clone()))
            .route(web::head().to(handler))
            .default_service(web::to(|| async { not_allowed("GET, HEAD") }))
    }
    fn write<F, Args>(path: &str, handler: F) -> actix_web::Resource
    where
        F: actix_web::Handler<Args>,
        Args: actix_web::FromRequest + 'static,
        F::Output: actix_web::Responder + 'static,
    {
        web::resource(path)
            .route(web::post().to(handler))
            .default_service(web::to(|| async { not_allowed("POST") }))
    }
    cfg.app_data(queries)
        .service(read("/health", health))
        .service(read("/stats", stats))
        .service(read("/metrics", metrics))
        .service(read("/alerts", alerts))
        .service(read("/alerts/stream", alert_stream))
        .service(write("/alerts/ack", ack_alert))
        .service(read("/groups", list_groups))
        .service(write("/groups/forget", forget_group))
        .service(read("/silences", list_silences))
        .service(write("/silences/add", add_silence))
        .service(write("/silences/expire", expire_silence))
        .default_service(web::to(|| async {
            text(
                HttpResponse::NotFound(),
                format!("no such path; the API's are {PATHS}"),
            )
        }));
}

/// The API's paths and methods, for the answers to a wrong path or method.
const PATHS: &str = "GET /health, GET /stats, GET /metrics, GET /alerts[?recent=N&rule=NAME&severity=LEVEL], GET /alerts/stream, POST /alerts/ack, GET /groups?rule=NAME[&limit=N], POST /groups/forget, GET /silences, POST /silences/add, POST /silences/expire";

/// 405 for a method the path does not take, saying which it takes.
fn not_allowed(allow: &'static str) -> HttpResponse {
    let mut r = HttpResponse::MethodNotAllowed();
    r.insert_header((actix_web::http::header::ALLOW, allow));
    text(r, format!("this path takes {allow}; the API's are {PATHS}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Alert changes of ids `ids` in state `state`, not kept yet (their JSON names the id).
    fn test_changes(
        ids: std::ops::Range<u64>,
        state: cepheus_core::alert::AlertState,
    ) -> Vec<cepheus_store::Change> {
        ids.map(|id| cepheus_store::Change {
            id,
            state,
            json: format!(r#"{{"id":"{id:016x}"}}"#),
            seq: None,
            meaning: None,
        })
        .collect()
    }

    /// The API's state over `store` and nothing else (no shards, no streams yet).
    fn test_state(store: Option<cepheus_store::Store>) -> ApiState {
        ApiState {
            shards: Vec::new(),
            ingest: Arc::default(),
            sink: Arc::default(),
            capture: None,
            udp: Vec::new(),
            listeners: Vec::new(),
            started: Instant::now(),
            token: None,
            reload_error: Default::default(),
            store,
            changes: None,
            streams: Streams::default(),
            alert_sink: None,
            listings: Listings::default(),
        }
    }

    /// A live stream over `store` (its client has none of the store's changes when
    /// `from_first`), and the sender of its live changes.
    fn follow_on(
        store: &cepheus_store::Store,
        from_first: bool,
    ) -> (
        tokio::sync::broadcast::Sender<super::super::sink::Streamed>,
        Follow,
    ) {
        #![allow(clippy::unwrap_used)]
        let (tx, rx) = tokio::sync::broadcast::channel::<super::super::sink::Streamed>(4);
        let f = Follow {
            rx,
            slot: Streams::default().admit(Instant::now()).unwrap(),
            replay: None,
            given: None,
            from_first,
            through: None,
            store: Some(store.clone()),
            instance: Some(store.instance()),
        };
        (tx, f)
    }

    /// What a stream that fell behind writes: its catch-up from the store, then the live
    /// changes still queued.
    fn catch_up_all(mut f: Follow) -> String {
        #![allow(clippy::unwrap_used)]
        actix_web::rt::System::new().block_on(async move {
            assert!(f.catch_up().await, "a catch-up");
            let mut out = String::new();
            while let Some(r) = f.replay.as_mut() {
                let (chunk, done) = r.next_chunk().await.unwrap();
                out.push_str(&chunk);
                if done {
                    f.replay = None;
                }
            }
            while let Ok(c) = f.rx.try_recv() {
                f.write(&mut out, c);
            }
            out
        })
    }

    /// A live client that falls more than the broadcast's backlog behind is given what the
    /// store kept after the last change it had, then the live ones not given by that: none
    /// lost, none twice (it was told `lagged` and lost them).
    #[test]
    fn a_stream_that_falls_behind_catches_up_from_the_store() {
        #![allow(clippy::unwrap_used)]
        use cepheus_core::alert::AlertState;
        let dir = std::env::temp_dir().join(format!("cepheus-api-behind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = cepheus_store::Store::open(&dir, 10_000).unwrap();
        let mut changes = test_changes(0..20, AlertState::Firing);
        store.record_changes(&mut changes).unwrap();
        let seqs: Vec<u64> = changes.iter().filter_map(|c| c.seq).collect();
        let instance = store.instance();
        let (tx, mut f) = follow_on(&store, false);
        // It was given the first 3 live; then 17 more went by while it did not read.
        let mut given = String::new();
        for (c, seq) in changes.iter().zip(&seqs).take(3) {
            tx.send((Some(*seq), Some(c.json.clone().into()))).unwrap();
        }
        for _ in 0..3 {
            let c = f.rx.try_recv().unwrap();
            f.write(&mut given, c);
        }
        for (c, seq) in changes.iter().zip(&seqs).skip(3) {
            tx.send((Some(*seq), Some(c.json.clone().into()))).unwrap();
        }
        // (And one the store could not keep, which comes live only.)
        tx.send((None, Some(r#"{"id":"unkept"}"#.into()))).unwrap();
        assert!(matches!(
            f.rx.try_recv(),
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_))
        ));
        given.push_str(&catch_up_all(f));
        let ids: Vec<&str> = given
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .collect();
        let want: Vec<String> = seqs.iter().map(|s| format!("{s}@{instance:08x}")).collect();
        assert_eq!(ids, want, "{given}");
        assert!(!given.contains("lagged"), "{given}");
        assert!(given.ends_with("data: {\"id\":\"unkept\"}\n\n"), "{given}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A client that came to an empty store and fell behind is given every change kept
    /// since, from the first, none said missed (a review found it told `lagged` only).
    #[test]
    fn a_stream_begun_on_an_empty_store_catches_up_from_its_first_change() {
        #![allow(clippy::unwrap_used)]
        use cepheus_core::alert::AlertState;
        let dir = std::env::temp_dir().join(format!("cepheus-api-empty-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = cepheus_store::Store::open(&dir, 10_000).unwrap();
        assert_eq!(store.last_seq().unwrap(), None);
        let instance = store.instance();
        let (tx, mut f) = follow_on(&store, true);
        let mut changes = test_changes(0..10, AlertState::Firing);
        store.record_changes(&mut changes).unwrap();
        for c in &changes {
            tx.send((c.seq, Some(c.json.clone().into()))).unwrap();
        }
        let seqs: Vec<u64> = changes.iter().filter_map(|c| c.seq).collect();
        assert!(f.rx.try_recv().is_err(), "lagged");
        let got = catch_up_all(f);
        let ids: Vec<&str> = got.lines().filter_map(|l| l.strip_prefix("id: ")).collect();
        let want: Vec<String> = seqs.iter().map(|s| format!("{s}@{instance:08x}")).collect();
        assert_eq!(ids, want, "{got}");
        assert!(!got.contains("lagged"), "{got}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A large change comes without its JSON (a stalled client's backlog would hold it):
    /// the stream reads it from the store, and writes it as a small one.
    #[test]
    fn a_large_change_is_read_from_the_store() {
        #![allow(clippy::unwrap_used)]
        use cepheus_core::alert::AlertState;
        let dir = std::env::temp_dir().join(format!("cepheus-api-large-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = cepheus_store::Store::open(&dir, 10_000).unwrap();
        let mut changes = test_changes(0..2, AlertState::Firing);
        changes[1].json = format!(
            r#"{{"id":"0000000000000001","msg":"{}"}}"#,
            "x".repeat(9000)
        );
        store.record_changes(&mut changes).unwrap();
        let (tx, mut f) = follow_on(&store, false);
        tx.send((changes[0].seq, Some(changes[0].json.clone().into())))
            .unwrap();
        tx.send((changes[1].seq, None)).unwrap();
        let mut out = String::new();
        while let Ok(c) = f.rx.try_recv() {
            f.write(&mut out, c);
        }
        let data: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        assert_eq!(data, [changes[0].json.as_str(), changes[1].json.as_str()]);
        assert_eq!(f.given, changes[1].seq);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The socket is bound with its mode (0660) already set, even under a umask that lets
    /// anyone in, and leaves nothing beside it; a stale one is replaced.
    #[test]
    fn the_api_socket_is_bound_with_its_mode() {
        #![allow(clippy::unwrap_used)]
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("cepheus-api-sock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("api.sock");
        let l = bind_socket(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, [std::ffi::OsString::from("api.sock")]);
        // It answers at its place.
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        drop(l);
        // Left by an agent that died: replaced.
        assert!(bind_socket(&path).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn event_ids_read_back_as_written() {
        let mut chunk = String::new();
        sse_alert(&mut chunk, Some((1042, 0x9f3a_01bc)), "{}");
        assert!(chunk.starts_with("id: 1042@9f3a01bc\n"), "{chunk}");
        assert_eq!(
            parse_event_id("1042@9f3a01bc"),
            Some((Some(1042), Some(0x9f3a_01bc)))
        );
        // From before ids named their store; a seq beyond any; not ids.
        assert_eq!(parse_event_id("17"), Some((Some(17), None)));
        assert_eq!(
            parse_event_id("99999999999999999999999@00000001"),
            Some((None, Some(1)))
        );
        for bad in [
            "",
            "soon",
            "-1",
            "1@",
            "@9f3a01bc",
            "1@9f3a01b",
            "1@9f3a01bcd",
            "1@9g3a01bc",
            "1 @9f3a01bc",
        ] {
            assert_eq!(parse_event_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_stream_stalled_for_the_limit_gives_its_place_to_a_new_one() {
        #![allow(clippy::expect_used)]
        use std::time::Duration;
        let streams = Streams::default();
        let t0 = Instant::now();
        let mut held: Vec<StreamSlot> = (0..MAX_STREAMS)
            .map(|_| streams.admit(t0).expect("a free place"))
            .collect();
        assert_eq!(streams.open(), MAX_STREAMS);
        assert!(
            streams.admit(t0 + Duration::from_secs(59)).is_none(),
            "every stream began within the limit"
        );
        // All read at 30 s but the 8th, stalled since it began.
        for (i, s) in held.iter().enumerate() {
            if i != 7 {
                assert!(s.ask(t0 + Duration::from_secs(30)));
            }
        }
        assert!(
            streams
                .admit(t0 + STALL - Duration::from_millis(1))
                .is_none()
        );
        let newcomer = streams
            .admit(t0 + STALL)
            .expect("the stalled stream's place");
        assert_eq!(streams.open(), MAX_STREAMS);
        assert!(
            !held[7].ask(t0 + STALL),
            "the stalled stream ends when asked again"
        );
        assert!(held[6].ask(t0 + STALL), "the others go on");
        // The stalled stream's end frees nothing more; the newcomer's does.
        drop(held.remove(7));
        assert_eq!(streams.open(), MAX_STREAMS);
        drop(newcomer);
        assert_eq!(streams.open(), MAX_STREAMS - 1);
        let _again = streams.admit(t0 + STALL).expect("a free place");
        // Only a stream stalled for the limit is taken: the others were read at 30 s.
        assert!(streams.admit(t0 + Duration::from_secs(89)).is_none());
        assert!(streams.admit(t0 + Duration::from_secs(90)).is_some());
    }

    #[test]
    fn firing_alerts_are_listed_oldest_first_by_when_they_began() {
        #![allow(clippy::unwrap_used)]
        use cepheus_core::alert::AlertState;
        let dir = std::env::temp_dir().join(format!("cepheus-api-order-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = cepheus_store::Store::open(&dir, 100).unwrap();
        let change = |id: u64, time: &str| cepheus_store::Change {
            id,
            state: AlertState::Firing,
            json: format!(r#"{{"id":"{id:016x}","state":"firing","time":"{time}"}}"#),
            seq: None,
            meaning: None,
        };
        // Written in another order than they began (two shards, each in its own order).
        store
            .record_changes(&mut [
                change(1, "2026-12-03T10:00:12.2677Z"),
                change(2, "2026-12-03T10:00:12.5Z"),
                change(3, "2026-12-03T10:00:12.2674Z"),
                change(4, "2026-12-03T10:00:12Z"),
            ])
            .unwrap();
        let ids: Vec<String> = alert_listing(&store, &Listing::default())
            .unwrap()
            .iter()
            .map(|a| serde_json::from_str::<serde_json::Value>(&a.json).unwrap()["id"].to_string())
            .collect();
        assert_eq!(
            ids,
            [4, 3, 1, 2].map(|i| format!("\"{i:016x}\"")),
            "by time, not by the order written"
        );
        // The latest changes stay in the order they were written.
        let recent4 = Listing {
            recent: Some(4),
            ..Listing::default()
        };
        let recent: Vec<u64> = alert_listing(&store, &recent4)
            .unwrap()
            .iter()
            .map(|a| a.seq)
            .collect();
        assert!(recent.is_sorted(), "{recent:?}");
        // A listing holds the newest that fit in its bytes.
        let sizes: Vec<usize> = store
            .recent(4)
            .unwrap()
            .iter()
            .map(|a| a.json.len() + 1)
            .collect();
        let one = sizes.iter().max().copied().unwrap_or(0);
        let fit: Vec<u64> = listing_within(&store, &recent4, sizes[2] + sizes[3])
            .unwrap()
            .iter()
            .map(|a| a.seq)
            .collect();
        assert_eq!(fit, recent[2..], "the newest two");
        let firing = listing_within(&store, &Listing::default(), 3 * one).unwrap();
        assert_eq!(firing.len(), 3);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A listing of one rule or of the alerts at least so severe holds only those, however
    /// many others fire; and past what a listing holds, the most severe are kept, not only
    /// the newest (a flood of minor alerts hides no critical one).
    #[test]
    fn listings_name_a_rule_or_a_severity_and_keep_the_most_severe() {
        #![allow(clippy::unwrap_used)]
        use cepheus_core::alert::AlertState;
        let dir = std::env::temp_dir().join(format!("cepheus-api-rank-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = cepheus_store::Store::open(&dir, 100_000).unwrap();
        let change = |id: u64, rule: &str, severity: &str| cepheus_store::Change {
            id,
            state: AlertState::Firing,
            json: format!(
                r#"{{"id":"{id:016x}","rule":"{rule}","severity":"{severity}","state":"firing","time":"2026-12-03T10:00:00Z"}}"#
            ),
            seq: None,
            meaning: None,
        };
        // Two critical alerts first, then more low ones than a listing holds.
        let mut changes = vec![change(1, "ssh", "critical"), change(2, "scan", "high")];
        changes.extend((0..MAX_FIRING as u64 + 5).map(|i| change(100 + i, "hb", "low")));
        store.record_changes(&mut changes).unwrap();
        let ids = |l: &Listing| -> Vec<u64> {
            alert_listing(&store, l)
                .unwrap()
                .iter()
                .map(|a| {
                    let v: serde_json::Value = serde_json::from_str(&a.json).unwrap();
                    u64::from_str_radix(v["id"].as_str().unwrap(), 16).unwrap()
                })
                .collect()
        };
        let all = ids(&Listing::default());
        assert_eq!(all.len(), MAX_FIRING);
        assert!(all.contains(&1) && all.contains(&2), "the most severe kept");
        // Cut by bytes too: the most severe stay, then the newest, oldest first.
        let one = changes[5].json.len() + 1;
        let fit: Vec<u64> = listing_within(&store, &Listing::default(), 10 * one)
            .unwrap()
            .iter()
            .map(|a| {
                let v: serde_json::Value = serde_json::from_str(&a.json).unwrap();
                u64::from_str_radix(v["id"].as_str().unwrap(), 16).unwrap()
            })
            .collect();
        assert!((8..=10).contains(&fit.len()), "{fit:?}");
        assert!(fit.contains(&1) && fit.contains(&2), "{fit:?}");
        let newest = 100 + MAX_FIRING as u64 + 4;
        assert!(fit.contains(&newest), "{fit:?}");
        let ssh = Listing {
            rule: Some("ssh".into()),
            ..Listing::default()
        };
        assert_eq!(ids(&ssh), [1]);
        let high = Listing {
            severity: Some(cepheus_core::rules::ir::Severity::High),
            ..Listing::default()
        };
        let mut got = ids(&high);
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
        // The last changes of one rule, among the last MAX_RECENT changes (the scan alert is
        // older than those).
        let last = 100 + MAX_FIRING as u64 + 4;
        let recent_hb = Listing {
            recent: Some(2),
            rule: Some("hb".into()),
            ..Listing::default()
        };
        assert_eq!(ids(&recent_hb), [last - 1, last]);
        let recent_scan = Listing {
            recent: Some(2),
            rule: Some("scan".into()),
            ..Listing::default()
        };
        assert_eq!(ids(&recent_scan), Vec::<u64>::new());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_resumed_stream_replays_page_by_page_up_to_where_it_began() {
        #![allow(clippy::unwrap_used)]
        use cepheus_core::alert::AlertState;
        let dir = std::env::temp_dir().join(format!("cepheus-api-replay-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = cepheus_store::Store::open(&dir, 10_000).unwrap();
        let mut changes = test_changes(0..200, AlertState::Firing);
        store.record_changes(&mut changes).unwrap();
        let seqs: Vec<u64> = changes.iter().filter_map(|c| c.seq).collect();
        assert_eq!(seqs.len(), 200);
        // Resumed after the 6th change, begun when the 150th was the last kept.
        let (after, end) = (seqs[5], seqs[149]);
        let mut replay = Replay {
            instance: store.instance(),
            store,
            after: Some(after),
            end: Some(end),
            missed: 3,
            pruned: false,
            told: None,
        };
        let (given, chunks) = actix_web::rt::System::new().block_on(async move {
            let mut given = String::new();
            let mut chunks = 0;
            loop {
                let (chunk, done) = replay.next_chunk().await.unwrap();
                given.push_str(&chunk);
                chunks += 1;
                if done {
                    return (given, chunks);
                }
                assert!(chunks < 10, "a replay that does not end");
            }
        });
        let ids: Vec<u64> = given
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|v| parse_event_id(v).unwrap().0.unwrap())
            .collect();
        assert_eq!(
            ids,
            seqs[6..150],
            "the changes after 6, up to 150, each once, in order"
        );
        assert_eq!(chunks, 3, "pages of {REPLAY_PAGE}");
        assert!(
            given.starts_with("event: lagged\ndata: {\"missed\":3}\n\n"),
            "{given}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Changes pruned while a resumed stream reads its replay are said missed, once; the
    /// replay goes on with what is kept. (After a review's test.)
    #[test]
    fn changes_pruned_during_a_replay_are_said_missed() {
        #![allow(clippy::unwrap_used)]
        use cepheus_core::alert::AlertState;
        let dir = std::env::temp_dir().join(format!("cepheus-api-pruned-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = cepheus_store::Store::open(&dir, 200).unwrap();
        let changes = |ids: std::ops::Range<u64>| test_changes(ids, AlertState::Resolved);
        let mut first = changes(0..200);
        store.record_changes(&mut first).unwrap();
        let seqs: Vec<u64> = first.iter().filter_map(|c| c.seq).collect();
        let instance = store.instance();
        let mut replay = Replay {
            instance,
            store: store.clone(),
            after: Some(seqs[0]),
            end: Some(seqs[199]),
            missed: 0,
            pruned: false,
            told: None,
        };
        let given = actix_web::rt::System::new().block_on(async move {
            let mut given = replay.next_chunk().await.unwrap().0;
            // 100 more: the oldest 100 go, 35 of them not given yet.
            replay
                .store
                .record_changes(&mut changes(1000..1100))
                .unwrap();
            loop {
                let (chunk, done) = replay.next_chunk().await.unwrap();
                given.push_str(&chunk);
                if done {
                    return given;
                }
            }
        });
        let ids: Vec<String> = given
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(str::to_string)
            .collect();
        let want: Vec<String> = seqs[1..65]
            .iter()
            .chain(&seqs[100..200])
            .map(|s| format!("{s}@{instance:08x}"))
            .collect();
        assert_eq!(ids, want);
        assert_eq!(
            given
                .matches("event: lagged\ndata: {\"missed\":0,\"pruned\":true}")
                .count(),
            1,
            "{given}"
        );
        // A store that keeps nothing: said, and nothing replayed.
        let empty_dir = dir.join("empty");
        let empty = cepheus_store::Store::open(&empty_dir, 10).unwrap();
        let at = cepheus_store::Resume::nothing_kept();
        let mut replay = Replay {
            instance: empty.instance(),
            store: empty,
            after: at.after,
            end: None,
            missed: at.skipped,
            pruned: at.pruned,
            told: None,
        };
        let (chunk, done) = actix_web::rt::System::new()
            .block_on(async move { replay.next_chunk().await.unwrap() });
        assert!(done);
        assert_eq!(
            chunk,
            "event: lagged\ndata: {\"missed\":0,\"pruned\":true}\n\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Alerts a shard dropped at a full sink are counted in /stats' sink counters and in
    /// /metrics (found by an audit: the metric was always 0); the store's waiting gauge has
    /// its own help.
    #[test]
    fn dropped_alerts_reach_the_metrics() {
        #![allow(clippy::unwrap_used)]
        let st = test_state(None);
        super::super::sink::note_dropped(0, 7);
        let stats = actix_web::rt::System::new().block_on(collect(&st));
        // (Other tests of this process may drop some too: at least these.)
        assert!(
            stats.sink.alerts_dropped >= 7,
            "{}",
            stats.sink.alerts_dropped
        );
        assert_eq!(stats.sink.alerts_dropped, stats.alerts_dropped);
        let metrics = render_metrics(&stats);
        let line = metrics
            .lines()
            .find(|l| l.starts_with("cepheus_alerts_dropped_total "))
            .unwrap();
        assert_eq!(
            line,
            format!("cepheus_alerts_dropped_total {}", stats.alerts_dropped)
        );
        assert!(metrics.contains(
            "# HELP cepheus_store_waiting Alert changes written out that wait for the store to keep them now."
        ));
    }

    #[test]
    fn listings_past_the_limit_are_answered_busy_until_one_is_read() {
        #![allow(clippy::unwrap_used)]
        use actix_web::test::{TestRequest, call_service, init_service, read_body};
        let dir = std::env::temp_dir().join(format!("cepheus-api-busy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = cepheus_store::Store::open(&dir, 1000).unwrap();
        let st = test_state(Some(store));
        let places = st.listings.0.clone();
        actix_web::rt::System::new().block_on(async move {
            let app = init_service(
                actix_web::App::new()
                    .app_data(web::Data::new(st))
                    .configure(routes),
            )
            .await;
            let get = || {
                TestRequest::get()
                    .uri("/alerts")
                    .insert_header(("Host", "localhost"))
                    .to_request()
            };
            // A listing not read yet holds its place.
            let unread = call_service(&app, get()).await;
            assert_eq!(unread.status(), 200);
            assert_eq!(places.available_permits(), MAX_LISTINGS - 1);
            let held: Vec<_> = (1..MAX_LISTINGS)
                .map(|_| places.clone().try_acquire_owned().unwrap())
                .collect();
            let busy = call_service(&app, get()).await;
            assert_eq!(busy.status(), 503);
            assert_eq!(busy.headers().get("retry-after").unwrap(), "1");
            // Read, it gives its place back; so do the others.
            assert_eq!(read_body(unread).await, "[]\n");
            drop(held);
            assert_eq!(places.available_permits(), MAX_LISTINGS);
            assert_eq!(call_service(&app, get()).await.status(), 200);
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_requests_addressed_to_this_machine_pass_without_a_token() {
        use actix_web::test::TestRequest;
        let with = |host: Option<&str>| {
            let mut r = TestRequest::get().uri("/stats");
            if let Some(h) = host {
                r = r.insert_header(("Host", h));
            }
            host_is_local(&r.to_http_request())
        };
        for ok in [
            None,
            Some("localhost"),
            Some("LOCALHOST:9514"),
            Some("localhost.:9514"),
            Some("127.0.0.1:9514"),
            Some("127.0.0.7"),
            Some("[::1]:9514"),
            Some("[::ffff:127.0.0.1]"),
        ] {
            assert!(with(ok), "{ok:?}");
        }
        for bad in [
            "attacker.example",
            "attacker.example:9514",
            "localhost:1@attacker.example",
            "localhost:",
            "[::1]x",
            "[::1]:9514@attacker.example",
            "10.0.0.1:9514",
            "[::2]",
        ] {
            assert!(!with(Some(bad)), "{bad}");
        }
    }

    #[test]
    fn request_text_in_the_log_is_escaped_and_cut() {
        let forged = "A\n2026-12-02T00:00:00Z  INFO forged\x1b[2J";
        let logged = for_log(forged);
        assert!(
            !logged.contains('\n') && !logged.contains('\x1b'),
            "{logged}"
        );
        let long = "k".repeat(10_000);
        assert!(for_log(&long).len() < 220);
        assert!(for_log(&long).ends_with("..."));
    }

    #[test]
    fn proc_net_udp_drops() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
  1: 0100007F:158A 00000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 123 2 0000000000000000 7\n\
  2: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 124 2 0000000000000000 9\n";
        let addrs: Vec<SocketAddr> =
            vec!["127.0.0.1:5514".parse().unwrap_or_else(|_| unreachable!())];
        assert_eq!(udp_drops_in(text, &addrs), 7);
    }
}
