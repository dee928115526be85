//! `[output] webhook`: alert changes POSTed as JSON to an HTTP or HTTPS endpoint (a chat
//! bridge, a paging service, a ticketing system), from a thread of its own behind a bounded
//! queue, so a slow or absent endpoint never holds up the sink (and the store behind it).
//!
//! Each request carries what waits, up to [`MAX_BATCH`] changes: `{"alerts": [<alert>, ...]}`,
//! each element the one alert object of DESIGN.md, in the order made. A request that fails
//! (no connection, a timeout, a 5xx or 429 answer) is sent again, after 1 s, then twice as
//! long each time up to a minute, while the queue fills behind it; an answer the endpoint
//! will give again (another 4xx, or a redirect: none is followed) drops the request, counted
//! and logged. HTTPS checks the endpoint's certificate against the system's trusted roots.
//! When the agent stops, what is queued gets a few seconds; what is left is counted and logged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cepheus_store::Change;

use super::counters::{LogLimit, SinkCounters, bump};
use super::outq::{Cursor, Drain, Names, OutQueue};

/// Alert changes waiting for the endpoint; beyond, they are dropped and counted.
pub const QUEUE: usize = 10_000;

/// The webhook's name among the store's output cursors.
pub const CURSOR: &str = "webhook";

/// Alert changes per request, at most.
pub const MAX_BATCH: usize = 100;

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The longest wait between two tries of a failed request.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Where and how to post.
#[derive(Clone, Debug)]
pub struct Target {
    /// The endpoint (`http://` or `https://`).
    pub url: String,
    /// Sent as `Authorization: Bearer <token>`, when set.
    pub token: Option<String>,
}

/// The sink's side of the webhook.
pub struct Webhook {
    q: OutQueue<String>,
}

impl Webhook {
    /// Starts the posting thread; it notes in `store`, if given, the last change it dealt
    /// with.
    pub fn start(
        to: Target,
        counters: Arc<SinkCounters>,
        store: Option<cepheus_store::Store>,
    ) -> std::io::Result<Webhook> {
        let c = counters.clone();
        let q = OutQueue::start(
            "output.webhook",
            "webhook",
            super::outq::queue_size(QUEUE),
            counters,
            Names {
                unsent: |c| &c.webhook_unsent,
                waiting: |c| &c.webhook_waiting,
                behind: |c| &c.webhook_behind,
            },
            store.map(|store| Cursor {
                store,
                name: CURSOR,
            }),
            move |d| post_loop(&to, &d, &c),
        )?;
        Ok(Webhook { q })
    }

    /// Queues the changes; what does not fit is counted as `webhook_unsent`.
    /// A change a silence muted is left out (see [`super::silence`]).
    pub fn send(&self, changes: &[Change]) {
        // (The muted changes before a change sent are passed with it: only those after the
        // last one sent need a mark of their own.)
        let mut skipped = None;
        for c in changes {
            if c.is_muted() {
                skipped = c.seq.or(skipped);
            } else {
                if c.seq.is_some() {
                    skipped = None;
                }
                self.q.push(c.seq, c.json.clone());
            }
        }
        self.q.skip(skipped);
    }

    /// Queues firing alerts a silence muted, at its end (they have no place of their own in
    /// the store: see [`OutQueue::push_extra`]).
    pub fn send_again(&self, after: Option<u64>, changes: &[Change]) {
        for c in changes {
            self.q.push_extra(after, c.id, c.json.clone());
        }
    }

    /// Its queue: what it is behind from, and its room (see [`OutQueue::page`]).
    pub fn queue(&self) -> &OutQueue<String> {
        &self.q
    }

    /// Feeds its queue from the store while it is behind ([`OutQueue::page`]).
    pub fn page(&self, changes: &[Change], all: bool) {
        let items = changes
            .iter()
            .filter_map(|c| Some((c.seq?, (!c.is_muted()).then(|| c.json.clone()))));
        self.q.page(items, all);
    }

    /// Changes sent before the store kept them are kept now, up to `seq` (see
    /// [`OutQueue::mark`]).
    pub fn mark(&self, seq: u64) {
        self.q.mark(seq);
    }

    /// The agent stops: what is queued gets until `deadline`; returns how many were left
    /// (counted and logged).
    pub fn close(&mut self, deadline: Instant) -> usize {
        self.q.close(deadline)
    }
}

/// Why a request did not go through.
enum Failed {
    /// Worth trying again (no connection, a timeout, 5xx, 429).
    Again(String),
    /// The endpoint refuses this request and would again (another 4xx).
    Refused(String),
}

/// The request body for `alerts` (each one alert's JSON).
pub fn body(alerts: &[String]) -> String {
    let mut b = String::with_capacity(12 + alerts.iter().map(|a| a.len() + 1).sum::<usize>());
    b.push_str("{\"alerts\":[");
    for (i, a) in alerts.iter().enumerate() {
        if i > 0 {
            b.push(',');
        }
        b.push_str(a);
    }
    b.push_str("]}");
    b
}

fn post(agent: &ureq::Agent, to: &Target, body: &str) -> Result<(), Failed> {
    let mut req = agent
        .post(&to.url)
        .set("Content-Type", "application/json")
        .set("User-Agent", concat!("cepheus/", env!("CARGO_PKG_VERSION")));
    if let Some(t) = &to.token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    match req.send_string(body) {
        Ok(r) if (200..300).contains(&r.status()) => Ok(()),
        // Redirects are not followed (a POST turned into a GET would deliver nothing):
        // the endpoint's address is to be written as it answers.
        Ok(r) => Err(Failed::Refused(format!(
            "the endpoint answered {} {}; write the URL it names in output.webhook",
            r.status(),
            r.header("Location").unwrap_or("(no Location)")
        ))),
        Err(ureq::Error::Status(code, _)) if code == 429 || code >= 500 => {
            Err(Failed::Again(format!("the endpoint answered {code}")))
        }
        Err(ureq::Error::Status(code, r)) => {
            let text = r.into_string().unwrap_or_default();
            let text: String = text.chars().take(200).collect();
            Err(Failed::Refused(format!(
                "the endpoint answered {code}: {}",
                text.trim()
            )))
        }
        Err(e) => Err(Failed::Again(e.to_string())),
    }
}

fn post_loop(to: &Target, d: &Drain<String>, counters: &SinkCounters) {
    let agent = ureq::AgentBuilder::new()
        .timeout(TIMEOUT)
        .redirects(0)
        .build();
    // One limit for the failures tried again and one for the refusals that drop changes, so
    // a minute of retries never hides a change lost.
    let (again, refused) = (LogLimit::new(60_000), LogLimit::new(60_000));
    let said = |limit: &LogLimit, e: &str, counters: &SinkCounters| {
        if let Some(held) = limit.allow() {
            let unsent = counters
                .webhook_unsent
                .load(std::sync::atomic::Ordering::Relaxed);
            let waiting = counters
                .webhook_waiting
                .load(std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(error = %e, url = %to.url, waiting, unsent_so_far = unsent, held_back = held, "cannot post alerts to output.webhook");
        }
    };
    while let Some(first) = d.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match d.try_recv() {
                Some(a) => batch.push(a),
                None => break,
            }
        }
        let body = body(&batch);
        let mut wait = Duration::from_secs(1);
        loop {
            match post(&agent, to, &body) {
                Ok(()) => {
                    if d.done(batch.len()) {
                        bump(&counters.webhook_sent, batch.len() as u64);
                    }
                    break;
                }
                Err(Failed::Refused(e)) => {
                    if d.done(batch.len()) {
                        bump(&counters.webhook_unsent, batch.len() as u64);
                    }
                    said(
                        &refused,
                        &format!("{e} (refused: {} change(s) dropped)", batch.len()),
                        counters,
                    );
                    break;
                }
                // Stopping, and the endpoint still fails: what is queued is given up (the
                // queue counts it and says so).
                Err(Failed::Again(_)) if d.closing() => return,
                Err(Failed::Again(e)) => {
                    bump(&counters.webhook_failed, 1);
                    said(
                        &again,
                        &format!("{e} (tried again in {} s)", wait.as_secs()),
                        counters,
                    );
                    // Cut short when the agent stops: one more try, then give up.
                    if d.pause(wait) {
                        wait = (wait * 2).min(MAX_BACKOFF);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_an_object_holding_the_alerts_in_order() {
        let alerts = vec![r#"{"id":"1"}"#.to_string(), r#"{"id":"2"}"#.to_string()];
        let b = body(&alerts);
        assert_eq!(b, r#"{"alerts":[{"id":"1"},{"id":"2"}]}"#);
        let v: serde_json::Value = serde_json::from_str(&b).unwrap_or_default();
        assert_eq!(v["alerts"][1]["id"], "2");
        assert_eq!(body(&[]), r#"{"alerts":[]}"#);
    }
}
