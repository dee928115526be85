//! Reassembly of syslog datagrams that came in IP fragments (a message longer than the
//! path's MTU), so passive syslog reads them whole. Bounded: at most [`MAX_DATAGRAMS`] in
//! progress (the oldest gives way), [`MAX_DATAGRAM`] bytes each, [`TIMEOUT`] of capture time
//! to complete (RFC 791's reassembly timer is of this order); what gives way is counted.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use cepheus_core::time::{Duration, Timestamp};

use super::decode::Fragment;

/// Datagrams being reassembled at once.
pub const MAX_DATAGRAMS: usize = 64;

/// The largest datagram reassembled (an IPv4 datagram's own limit).
pub const MAX_DATAGRAM: u32 = 65_535;

/// Capture time a datagram has to complete in.
pub const TIMEOUT: Duration = Duration(30_000_000_000);

/// The UDP header: the first fragment's data begins after it.
const UDP_HEADER: u32 = 8;

type Key = (IpAddr, IpAddr, u32);

#[derive(Debug)]
struct Partial {
    started: Timestamp,
    /// Known from the first fragment: to a syslog port (else the datagram is dropped).
    syslog: Option<bool>,
    /// (offset in the IP payload, bytes).
    parts: Vec<(u32, Vec<u8>)>,
    /// The IP payload's length, from the last fragment.
    end: Option<u32>,
    bytes: u32,
}

/// What a fragment did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Held, the datagram is not whole yet (or is not syslog).
    Held,
    /// The datagram is whole: its UDP payload (the syslog message).
    Whole(Vec<u8>),
}

/// Syslog datagrams in reassembly.
#[derive(Debug, Default)]
pub struct SyslogFragments {
    map: HashMap<Key, Partial>,
    order: VecDeque<Key>,
    /// Syslog datagrams given up (a fragment never came, too large, or pushed out).
    pub lost: u64,
    /// Syslog datagrams reassembled.
    pub reassembled: u64,
}

impl SyslogFragments {
    /// Takes one UDP fragment from `src` to `dst` with its data (for the first fragment, the
    /// UDP payload after the header) and, for the first one, whether it goes to a syslog port.
    pub fn push(
        &mut self,
        ts: Timestamp,
        src: IpAddr,
        dst: IpAddr,
        frag: Fragment,
        to_syslog: Option<bool>,
        data: &[u8],
    ) -> Outcome {
        self.expire(ts);
        let key = (src, dst, frag.id);
        if !self.map.contains_key(&key) {
            if to_syslog == Some(false) {
                return Outcome::Held;
            }
            if self.map.len() >= MAX_DATAGRAMS {
                self.drop_oldest();
            }
            self.map.insert(
                key,
                Partial {
                    started: ts,
                    syslog: None,
                    parts: Vec::new(),
                    end: None,
                    bytes: 0,
                },
            );
            self.order.push_back(key);
        }
        let Some(p) = self.map.get_mut(&key) else {
            return Outcome::Held;
        };
        if to_syslog == Some(false) {
            self.remove(&key);
            return Outcome::Held;
        }
        if to_syslog == Some(true) {
            p.syslog = Some(true);
        }
        let at = if frag.first() {
            UDP_HEADER
        } else {
            frag.offset
        };
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let stop = at.saturating_add(len);
        if !frag.more {
            p.end = Some(stop);
        }
        p.bytes = p.bytes.saturating_add(len);
        if stop > MAX_DATAGRAM || p.bytes > 2 * MAX_DATAGRAM {
            let syslog = p.syslog == Some(true);
            self.remove(&key);
            if syslog {
                self.lost += 1;
            }
            return Outcome::Held;
        }
        p.parts.push((at, data.to_vec()));
        match whole(p) {
            Some(msg) if p.syslog == Some(true) => {
                self.remove(&key);
                self.reassembled += 1;
                Outcome::Whole(msg)
            }
            _ => Outcome::Held,
        }
    }

    /// Gives up every datagram still incomplete (end of capture).
    pub fn finish(&mut self) {
        self.lost += self.map.values().filter(|p| p.syslog == Some(true)).count() as u64;
        self.map.clear();
        self.order.clear();
    }

    fn expire(&mut self, now: Timestamp) {
        while let Some(k) = self.order.front() {
            match self.map.get(k) {
                Some(p) if now.since(p.started) <= TIMEOUT => break,
                _ => self.drop_oldest(),
            }
        }
    }

    fn drop_oldest(&mut self) {
        if let Some(k) = self.order.pop_front()
            && let Some(p) = self.map.remove(&k)
            && p.syslog == Some(true)
        {
            self.lost += 1;
        }
    }

    fn remove(&mut self, key: &Key) {
        self.map.remove(key);
        self.order.retain(|k| k != key);
    }
}

/// The UDP payload when the parts cover it from the header's end to the last fragment's end.
fn whole(p: &mut Partial) -> Option<Vec<u8>> {
    let end = p.end?;
    p.parts.sort_by_key(|(at, _)| *at);
    let mut covered = UDP_HEADER;
    for (at, d) in &p.parts {
        if *at > covered {
            return None;
        }
        covered = covered.max(at + d.len() as u32);
    }
    if covered < end {
        return None;
    }
    let mut msg = vec![0u8; (end - UDP_HEADER) as usize];
    for (at, d) in &p.parts {
        let from = (at - UDP_HEADER) as usize;
        let n = d.len().min(msg.len().saturating_sub(from));
        if let (Some(dst), Some(src)) = (msg.get_mut(from..from + n), d.get(..n)) {
            dst.copy_from_slice(src);
        }
    }
    Some(msg)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn frag(id: u32, offset: u32, more: bool) -> Fragment {
        Fragment { id, offset, more }
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 7));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));

    #[test]
    fn fragments_in_any_order_make_the_message() {
        let msg: Vec<u8> = (0..100u8).collect();
        // The first fragment holds the UDP header (8 bytes) and 32 bytes of message: the next
        // fragment begins at IP payload offset 40.
        let (a, b, c) = (&msg[..32], &msg[32..64], &msg[64..]);
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
            let mut f = SyslogFragments::default();
            let mut got = Outcome::Held;
            for i in order {
                got = match i {
                    0 => f.push(Timestamp(0), A, B, frag(5, 0, true), Some(true), a),
                    1 => f.push(Timestamp(0), A, B, frag(5, 40, true), None, b),
                    _ => f.push(Timestamp(0), A, B, frag(5, 72, false), None, c),
                };
            }
            assert_eq!(got, Outcome::Whole(msg.clone()), "{order:?}");
            assert_eq!((f.reassembled, f.lost), (1, 0));
        }
    }

    #[test]
    fn other_ports_missing_parts_and_floods_are_bounded() {
        let mut f = SyslogFragments::default();
        // Not syslog: dropped, later parts held nowhere.
        assert_eq!(
            f.push(Timestamp(0), A, B, frag(1, 0, true), Some(false), b"x"),
            Outcome::Held
        );
        assert_eq!(
            f.push(Timestamp(0), A, B, frag(1, 8, false), None, b"y"),
            Outcome::Held
        );
        // A syslog datagram whose last fragment never comes: lost after the timeout.
        f.push(Timestamp(0), A, B, frag(2, 0, true), Some(true), b"abc");
        let later = Timestamp(0).add(TIMEOUT).add(Duration(1));
        f.push(later, A, B, frag(3, 0, true), Some(true), b"abc");
        assert_eq!(f.lost, 1);
        // A flood of first fragments: never more than MAX_DATAGRAMS held.
        for id in 10..1000 {
            f.push(later, A, B, frag(id, 0, true), Some(true), b"abc");
        }
        assert!(f.map.len() <= MAX_DATAGRAMS && f.order.len() <= MAX_DATAGRAMS);
        f.finish();
        assert!(f.map.is_empty());
        assert_eq!(f.lost, 1 + 991);
    }
}
