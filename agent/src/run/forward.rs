//! `[output] syslog`: alert changes forwarded to a syslog collector (a SIEM) as RFC 5424
//! messages, from a thread of its own behind a bounded queue, so a slow or absent collector
//! never holds up the sink (and the store behind it).

use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cepheus_store::Change;

use super::config::Forward;
use super::counters::{LogLimit, SinkCounters, bump};
use super::outq::{Cursor, Drain, Names, OutQueue};

/// Messages waiting for the collector; beyond, they are dropped and counted.
pub const QUEUE: usize = 10_000;

/// The forwarder's name among the store's output cursors.
pub const CURSOR: &str = "syslog";

/// The sink's side of the forwarder.
pub struct Forwarder {
    q: OutQueue<Vec<u8>>,
    host: String,
    pid: u32,
}

impl Forwarder {
    /// Starts the forwarding thread; it notes in `store`, if given, the last change it dealt
    /// with.
    pub fn start(
        to: Forward,
        counters: Arc<SinkCounters>,
        store: Option<cepheus_store::Store>,
    ) -> std::io::Result<Forwarder> {
        let c = counters.clone();
        let q = OutQueue::start(
            "output.syslog",
            "syslog-forward",
            super::outq::queue_size(QUEUE),
            counters,
            Names {
                unsent: |c| &c.syslog_unsent,
                waiting: |c| &c.syslog_waiting,
                behind: |c| &c.syslog_behind,
            },
            store.map(|store| Cursor {
                store,
                name: CURSOR,
            }),
            move |d| forward_loop(to, &d, &c),
        )?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty() && h.is_ascii() && !h.contains(' '))
            .unwrap_or_else(|| "-".into());
        Ok(Forwarder {
            q,
            host,
            pid: std::process::id(),
        })
    }

    /// Queues the changes; what does not fit is counted as `syslog_unsent`.
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
                self.q.push(c.seq, format_5424(c, &self.host, self.pid));
            }
        }
        self.q.skip(skipped);
    }

    /// Queues firing alerts a silence muted, at its end (they have no place of their own in
    /// the store: see [`OutQueue::push_extra`]).
    pub fn send_again(&self, after: Option<u64>, changes: &[Change]) {
        for c in changes {
            self.q
                .push_extra(after, c.id, format_5424(c, &self.host, self.pid));
        }
    }

    /// Its queue: what it is behind from, and its room (see [`OutQueue::page`]).
    pub fn queue(&self) -> &OutQueue<Vec<u8>> {
        &self.q
    }

    /// Feeds its queue from the store while it is behind ([`OutQueue::page`]).
    pub fn page(&self, changes: &[Change], all: bool) {
        let items = changes.iter().filter_map(|c| {
            let line = (!c.is_muted()).then(|| format_5424(c, &self.host, self.pid));
            Some((c.seq?, line))
        });
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

/// An RFC 3339 time with at most 6 digits of fraction, as RFC 5424's TIME-SECFRAC allows
/// (`1*6DIGIT`): an alert's time has 9 (nanoseconds), which a strict collector refuses.
fn secfrac_6(t: &str) -> String {
    let Some(dot) = t.find('.') else {
        return t.to_string();
    };
    let digits = t[dot + 1..].bytes().take_while(u8::is_ascii_digit).count();
    if digits <= 6 {
        return t.to_string();
    }
    format!("{}{}", &t[..dot + 7], &t[dot + 1 + digits..])
}

/// An alert change as an RFC 5424 message: facility auth (4), severity from the rule's,
/// the alert's time, APP-NAME `cepheus`, MSGID the state, no structured data, the JSON as
/// the message (after a BOM: UTF-8).
pub fn format_5424(c: &Change, host: &str, pid: u32) -> Vec<u8> {
    let v: serde_json::Value = serde_json::from_str(&c.json).unwrap_or_default();
    let sev = match v["severity"].as_str() {
        Some("critical") => 2,
        Some("high") => 3,
        Some("medium") => 4,
        Some("low") => 5,
        _ => 6,
    };
    let time = v["time"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map_or_else(|| "-".to_string(), secfrac_6);
    let mut m = format!(
        "<{}>1 {time} {host} cepheus {pid} {} - \u{feff}",
        4 * 8 + sev,
        c.state.name()
    )
    .into_bytes();
    m.extend_from_slice(c.json.as_bytes());
    m
}

/// The most a UDP datagram carries (IPv4: 65,535 less the IP and UDP headers).
const MAX_DATAGRAM: usize = 65_507;

/// A message that fits one datagram: as it is when it does; else with its alert's `events`
/// left out (`"events": []`, and `"events_left_out"` saying how many), which is where an
/// alert grows (up to 16 events of up to 64 KiB each); the rest of the alert is what an
/// operator must get. Still too long, it is returned as it is (the send fails and counts).
fn fit_datagram(m: Vec<u8>) -> Vec<u8> {
    const BOM: &[u8] = "\u{feff}".as_bytes();
    if m.len() <= MAX_DATAGRAM {
        return m;
    }
    let Some(at) = m.windows(BOM.len()).position(|w| w == BOM) else {
        return m;
    };
    let body = at + BOM.len();
    let Ok(serde_json::Value::Object(mut alert)) = serde_json::from_slice(&m[body..]) else {
        return m;
    };
    let n = alert
        .get("events")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    alert.insert("events".into(), serde_json::Value::Array(Vec::new()));
    alert.insert("events_left_out".into(), n.into());
    let mut out = m[..body].to_vec();
    if serde_json::to_writer(&mut out, &alert).is_err() || out.len() > MAX_DATAGRAM {
        return m;
    }
    out
}

fn forward_loop(to: Forward, d: &Drain<Vec<u8>>, counters: &SinkCounters) {
    let limit = LogLimit::new(60_000);
    let said = |e: &dyn std::fmt::Display, counters: &SinkCounters| {
        if let Some(held) = limit.allow() {
            let unsent = counters
                .syslog_unsent
                .load(std::sync::atomic::Ordering::Relaxed);
            let waiting = counters
                .syslog_waiting
                .load(std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(error = %e, waiting, unsent_so_far = unsent, held_back = held, "cannot forward alerts to the syslog collector (output.syslog); retrying");
        }
    };
    match to {
        Forward::Udp(addr) => {
            let bind: SocketAddr = if addr.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            // Connected: the kernel then reports a collector's closed port (its ICMP answer
            // to an earlier datagram) as an error of a later send, which is counted.
            let Ok(sock) = UdpSocket::bind(bind).and_then(|s| s.connect(addr).map(|()| s)) else {
                tracing::error!("cannot open a UDP socket for output.syslog");
                return;
            };
            while let Some(m) = d.recv() {
                let m = fit_datagram(m);
                let sent = sock.send(&m);
                if d.done(1) {
                    match sent {
                        Ok(_) => bump(&counters.syslog_sent, 1),
                        // (A datagram is not sent again: this one is given up.)
                        Err(e) => {
                            bump(&counters.syslog_unsent, 1);
                            if let Some(held) = limit.allow() {
                                tracing::warn!(error = %e, bytes = m.len(), held_back = held, "an alert change could not be sent to the syslog collector over UDP (output.syslog): it is counted in syslog_unsent and not sent again (tcp:// delivers what UDP cannot)");
                            }
                        }
                    }
                }
            }
        }
        Forward::Tcp(addr) => {
            let mut conn: Option<TcpStream> = None;
            let mut next_try = Instant::now();
            while let Some(m) = d.recv() {
                let mut framed = format!("{} ", m.len()).into_bytes();
                framed.extend_from_slice(&m);
                // The message waits (and the queue fills behind it) until the collector
                // takes it: tried again once a second.
                loop {
                    if conn.is_none() {
                        // (Cut short when the agent stops: one more try, then give up.)
                        d.pause(next_try.saturating_duration_since(Instant::now()));
                        next_try = Instant::now() + Duration::from_secs(1);
                        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                            Ok(s) => {
                                let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                                let _ = s.set_nodelay(true);
                                conn = Some(s);
                            }
                            // Stopping, and the collector still cannot be reached: what is
                            // queued is given up (the queue counts it and says so).
                            Err(_) if d.closing() => return,
                            Err(e) => {
                                bump(&counters.syslog_failed, 1);
                                said(&e, counters);
                                continue;
                            }
                        }
                    }
                    let Some(s) = conn.as_mut() else { continue };
                    // A collector that restarted closed this connection: a write to it would
                    // seem to succeed and be lost. Seen before writing, it is made anew.
                    if peer_closed(s) {
                        bump(&counters.syslog_failed, 1);
                        said(&"the collector closed the connection", counters);
                        conn = None;
                        continue;
                    }
                    match s.write_all(&framed) {
                        Ok(()) => {
                            if d.done(1) {
                                bump(&counters.syslog_sent, 1);
                            }
                            break;
                        }
                        Err(_) if d.closing() => return,
                        Err(e) => {
                            bump(&counters.syslog_failed, 1);
                            said(&e, counters);
                            conn = None;
                        }
                    }
                }
            }
        }
    }
}

/// Whether the collector closed `s` (or it failed): a look at what it sent, without
/// waiting. A collector sends nothing on this connection; what it does send is dropped.
fn peer_closed(s: &mut TcpStream) -> bool {
    use std::io::Read;
    if s.set_nonblocking(true).is_err() {
        return true;
    }
    let mut buf = [0u8; 512];
    let mut reads = 0;
    let closed = loop {
        reads += 1;
        match s.read(&mut buf) {
            Ok(0) => break true,
            // (A chatty collector is read at most this much before each message.)
            Ok(_) if reads >= 64 => break false,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break true,
        }
    };
    closed || s.set_nonblocking(false).is_err()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use cepheus_core::alert::AlertState;

    /// A collector that restarts (closes its end) between two alerts gets the second on a
    /// new connection: it is not written into the closed one and lost.
    #[test]
    fn a_change_after_the_collector_closed_goes_on_a_new_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let counters = Arc::new(SinkCounters::default());
        let mut f = Forwarder::start(Forward::Tcp(addr), counters.clone(), None).unwrap();
        let change = |n: u64| Change {
            id: n,
            state: AlertState::Firing,
            json: format!(
                r#"{{"id":"{n:016x}","severity":"high","time":"2026-12-04T08:00:00Z"}}\n"#
            ),
            seq: None,
            meaning: None,
        };
        // What the collector reads on `conn` until it holds `id` (or 10 s pass).
        let read_until = |mut conn: std::net::TcpStream, id: &str| {
            use std::io::Read;
            conn.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&got).contains(id) {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            String::from_utf8_lossy(&got).into_owned()
        };
        // The next connection made within 10 s (none: the message was lost, the test fails).
        listener.set_nonblocking(true).unwrap();
        let accept = || {
            let until = Instant::now() + Duration::from_secs(10);
            loop {
                match listener.accept() {
                    Ok((c, _)) => {
                        c.set_nonblocking(false).unwrap();
                        return c;
                    }
                    Err(_) if Instant::now() < until => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => panic!("no connection from the forwarder: {e}"),
                }
            }
        };
        f.send(&[change(1)]);
        let first = accept();
        let id1 = "0000000000000001";
        assert!(read_until(first.try_clone().unwrap(), id1).contains(id1));
        // The collector restarts: its end of the connection closes.
        drop(first);
        std::thread::sleep(Duration::from_millis(200));
        // A change a silence muted is left out (it would come before the next).
        let muted = Change {
            json: r#"{"id":"0000000000000003","severity":"high","time":"2026-12-04T08:00:00Z","silenced":{"id":"00000000000000a1"}}"#.into(),
            ..change(3)
        };
        f.send(&[muted, change(2)]);
        let second = accept();
        let id2 = "0000000000000002";
        let got = read_until(second, id2);
        assert!(got.contains(id2));
        assert!(!got.contains("0000000000000003"), "{got}");
        assert_eq!(
            counters
                .syslog_sent
                .load(std::sync::atomic::Ordering::SeqCst),
            2
        );
        // The closed connection was seen (counted as a failed try) and nothing waits.
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(load(&counters.syslog_failed), 1);
        assert_eq!(load(&counters.syslog_waiting), 0);
        let _ = f.close(Instant::now() + Duration::from_secs(1));
    }

    /// An alert too long for a datagram goes without its events (how many is said); one
    /// that fits goes as it is.
    #[test]
    fn an_alert_too_long_for_a_datagram_goes_without_its_events() {
        let big = "x".repeat(30_000);
        let json = serde_json::json!({"id": "1", "rule": "r", "state": "firing",
            "message": "m", "events": [{"msg": big}, {"msg": big}, {"msg": big}]});
        let c = Change {
            id: 1,
            state: AlertState::Firing,
            json: json.to_string(),
            seq: None,
            meaning: None,
        };
        let m = format_5424(&c, "h", 1);
        assert!(m.len() > MAX_DATAGRAM);
        let fit = fit_datagram(m.clone());
        assert!(fit.len() <= MAX_DATAGRAM);
        let text = String::from_utf8(fit).unwrap();
        let (head, body) = text.split_once('\u{feff}').unwrap();
        assert!(head.starts_with("<"), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["events"], serde_json::json!([]));
        assert_eq!(v["events_left_out"], 3);
        assert_eq!(v["message"], "m");
        let small = format_5424(
            &Change {
                json: r#"{"id":"1","events":[{"msg":"x"}]}"#.into(),
                ..c
            },
            "h",
            1,
        );
        assert_eq!(fit_datagram(small.clone()), small);
    }

    /// RFC 5424 allows at most 6 digits of fraction: an alert's nanoseconds are cut there.
    #[test]
    fn the_header_time_has_at_most_six_fraction_digits() {
        assert_eq!(
            secfrac_6("2026-12-04T18:45:42.061076698Z"),
            "2026-12-04T18:45:42.061076Z"
        );
        assert_eq!(
            secfrac_6("2026-12-04T18:45:42.061076698+05:30"),
            "2026-12-04T18:45:42.061076+05:30"
        );
        for t in [
            "2026-12-04T18:45:42Z",
            "2026-12-04T18:45:42.5Z",
            "2026-12-04T18:45:42.123456Z",
        ] {
            assert_eq!(secfrac_6(t), t);
        }
    }

    #[test]
    fn a_change_is_an_rfc_5424_message_with_its_json() {
        let c = Change {
            id: 1,
            state: AlertState::Firing,
            json: r#"{"id":"0000000000000001","rule":"hb","severity":"critical","state":"firing","time":"2026-12-03T05:00:00Z"}"#.into(),
            seq: None,
            meaning: None,
        };
        let m = String::from_utf8(format_5424(&c, "sensor1", 42)).unwrap();
        assert_eq!(
            m,
            format!(
                "<34>1 2026-12-03T05:00:00Z sensor1 cepheus 42 firing - \u{feff}{}",
                c.json
            )
        );
        // What cepheus reads back: the same fields, the JSON as the message.
        let parsed = syslog_loose::parse_message(&m, syslog_loose::Variant::RFC5424);
        assert_eq!(parsed.hostname, Some("sensor1"));
        assert_eq!(parsed.appname, Some("cepheus"));
        assert_eq!(parsed.msgid, Some("firing"));
        assert!(parsed.msg.ends_with(&c.json), "{}", parsed.msg);
    }
}
