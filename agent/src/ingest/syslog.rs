//! Syslog lines (RFC 5424 and RFC 3164, with or without PRI) to events.
//!
//! Parsing is done by `syslog_loose`'s exact entry point
//! (`parse_message_with_year_exact_tz`, `Variant::Either`: RFC 5424 first, then RFC 3164), which
//! returns an error instead of stuffing an unparsable line into `msg`. We pass it UTC as its zone
//! and apply the configured zone ourselves, because its own "no zone" default is the host's local
//! time (not reproducible) and its "MMM DD YYYY" path reads the wall clock as UTC.
//!
//! # What is malformed
//!
//! - a line that is empty after trimming whitespace, CR, LF and NUL: [`Malformed::Empty`];
//! - a line that `syslog_loose` cannot parse and that does not start with a valid PRI
//!   (`<0>`..`<191>`): [`Malformed::NotSyslog`]. Real log-file lines without PRI
//!   (`Dec 10 06:55:46 LabSZ sshd[24200]: ...`) parse because they carry an RFC 3164 timestamp;
//!   "complete and utter gobbledegook" has neither PRI nor timestamp and is rejected, and so
//!   is a line without PRI whose stamp is the nil `-` (`- gobbledegook`).
//! - a line with a valid PRI that `syslog_loose` rejects (no timestamp, `Feb 29` in a non-leap
//!   year, ...) is kept, as rsyslog keeps it: facility and severity from the PRI, `msg` the rest
//!   of the line, time the arrival;
//! - a stamp outside the range of [`Timestamp`] (years 1677..2262): [`Malformed::TimeOutOfRange`].
//!
//! A line whose header parses but whose PRI is above 191 has no `facility` and no `severity`.
//!
//! Cisco headers (`<189>123: sw1: *Mar  1 00:00:23.123 UTC: %LINK-3-UPDOWN: ...`, a
//! sequence number as the tag of a BSD header, or no stamp at all) are read as the BSD
//! headers they resemble, their `%FACILITY-SEVERITY-MNEMONIC` the app. ISO 8601 stamps with
//! a space for the `T`, or an offset without its colon (`+0200`), keep their header too.
//!
//! An RFC 3164 header word that holds a `[` is never the host (no host name does): when the
//! first one is `app[procid]` written without its colon (`<13>Feb 13 20:07:26 sshd[123] no
//! colon`) it is the tag and the line has no `host`, as a line whose tag has its colon and no
//! host before it (`<13>Apr  5 12:56:51 su: pam ok`).
//!
//! Invalid UTF-8 is converted lossily (U+FFFD), never rejected.
//!
//! # Time
//!
//! RFC 5424 stamps and RFC 3339 stamps inside RFC 3164 lines carry their own offset and are
//! taken as written; an ISO 8601 stamp written without one (`2019-02-13T19:48:34`, not RFC
//! 5424 but some devices send it) is read in the parser's [`Zone`]. Classic RFC 3164 stamps (`MMM DD HH:MM:SS`) carry no zone: they are read in
//! the parser's [`Zone`] (UTC by default). Their year is [`Year::Fixed`] (`replay --year`) or
//! [`Year::Resolve`]d against the arrival instant the way syslog daemons do: syslog-ng's
//! `determine_year_for_month` puts a December stamp received in January into the previous year
//! and a January stamp received in December into the next one; Vector does the first half. We
//! keep their rule (a January stamp received in December, on any day, is next year's) and
//! generalise it: otherwise the year is the latest of (arrival year + 1, arrival year, arrival
//! year − 1) that puts the stamp no more than [`FUTURE_SLACK_DAYS`] days after the arrival (in
//! the zone's wall clock). So a stamp more than about a month in the future is last year's, and
//! a replayed November file read in January lands in the previous year too. A stamp without any time
//! (RFC 5424 `-`, PRI-only lines) gets the arrival as its time.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

use cepheus_core::event::{Event, Field, FieldKey, Source, Value};
use cepheus_core::time::Timestamp;
use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc};
use syslog_loose::{IncompleteDate, Message, ProcId, Protocol, Variant};

use super::Malformed;

/// How far ahead of the arrival (in days) a year-less stamp may be before it is taken as
/// last year's: senders' clocks drift and relays buffer, but not by a month.
pub const FUTURE_SLACK_DAYS: i64 = 31;

/// The zone in which zone-less RFC 3164 stamps are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zone {
    /// A fixed offset from UTC (`UTC`, `Z`, `+02:00`, `-0530`).
    Fixed(FixedOffset),
    /// An IANA zone (`Europe/Paris`), daylight saving time included.
    Iana(chrono_tz::Tz),
}

impl Default for Zone {
    /// UTC, the documented default.
    fn default() -> Self {
        Zone::Fixed(Utc.fix())
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Zone::Fixed(o) if o.local_minus_utc() == 0 => f.write_str("UTC"),
            Zone::Fixed(o) => write!(f, "{o}"),
            Zone::Iana(tz) => f.write_str(tz.name()),
        }
    }
}

/// A zone name that is neither an offset nor an IANA zone.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown time zone `{0}`: write `UTC`, an offset such as `+02:00`, or an IANA name such as `Europe/Paris`"
)]
pub struct BadZone(pub String);

impl FromStr for Zone {
    type Err = BadZone;

    /// Parses `UTC`/`Z`, `+HH:MM`/`+HHMM`/`+HH` (or `-`), or an IANA name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("utc") || t.eq_ignore_ascii_case("z") {
            return Ok(Zone::default());
        }
        if let Some(sign) = t.chars().next().filter(|c| *c == '+' || *c == '-') {
            return parse_offset(&t[1..], sign == '-')
                .map(Zone::Fixed)
                .ok_or_else(|| BadZone(t.to_string()));
        }
        t.parse::<chrono_tz::Tz>()
            .map(Zone::Iana)
            .map_err(|_| BadZone(t.to_string()))
    }
}

/// `HH`, `HHMM` or `HH:MM` (after the sign) as an offset of at most 23:59.
fn parse_offset(body: &str, negative: bool) -> Option<FixedOffset> {
    let digits: String = body.chars().filter(|c| *c != ':').collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) || body.matches(':').count() > 1 {
        return None;
    }
    let (h, m) = match digits.len() {
        2 => (digits.parse::<i32>().ok()?, 0),
        4 => (
            digits[..2].parse::<i32>().ok()?,
            digits[2..].parse::<i32>().ok()?,
        ),
        _ => return None,
    };
    if h > 23 || m > 59 {
        return None;
    }
    let secs = (h * 3600 + m * 60) * if negative { -1 } else { 1 };
    FixedOffset::east_opt(secs)
}

impl Zone {
    /// The UTC instant of a wall-clock time in this zone: the earliest of an ambiguous pair;
    /// in a daylight-saving gap (02:30 on the night clocks go from 02:00 to 03:00), the
    /// offset in force before the change, so the reading moves forward by the gap (to 03:30),
    /// as a clock that had not changed yet would mean it, and never before the lines logged
    /// just ahead of it. `None` outside the years [`Timestamp`] can hold (no chrono arithmetic
    /// near its own limits, where it would panic).
    fn to_utc(self, naive: NaiveDateTime) -> Option<NaiveDateTime> {
        if !Year::RANGE.contains(&naive.year()) {
            return None;
        }
        let offset = match self {
            Zone::Fixed(o) => o,
            Zone::Iana(tz) => match tz.from_local_datetime(&naive).earliest() {
                Some(t) => return Some(t.naive_utc()),
                None => {
                    // The last valid reading before the gap (gaps are at most a few hours).
                    let before = (1..=16)
                        .map(|k| naive - chrono::Duration::minutes(15 * k))
                        .find_map(|t| tz.from_local_datetime(&t).latest());
                    match before {
                        Some(t) => t.offset().fix(),
                        None => tz.offset_from_utc_datetime(&naive).fix(),
                    }
                }
            },
        };
        naive.checked_sub_signed(chrono::Duration::seconds(i64::from(
            offset.local_minus_utc(),
        )))
    }

    /// The wall clock in this zone at a UTC instant.
    fn wall_clock(self, utc: NaiveDateTime) -> NaiveDateTime {
        match self {
            Zone::Fixed(o) => utc + chrono::Duration::seconds(i64::from(o.local_minus_utc())),
            Zone::Iana(tz) => tz.from_utc_datetime(&utc).naive_local(),
        }
    }
}

/// Which year a year-less RFC 3164 stamp belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Year {
    /// Always this year (`replay --year`): replays give the same times on any day.
    Fixed(i32),
    /// Resolved against the arrival instant as syslog daemons do (see the module docs).
    #[default]
    Resolve,
    /// The year that puts the stamp nearest the "arrival" given, which is the latest year-less
    /// stamp before it: how a file's lines after its first follow on (over New Year, over a
    /// gap of months, a little back for lines out of order): of the years around it, the one
    /// within half a year of it. A 29 February with no leap year that near goes to the last
    /// leap year before.
    Follow,
}

impl Year {
    /// The years a stamp can be in: those every instant of which a [`Timestamp`] holds (64-bit
    /// nanoseconds since 1970 run from September 1677 to April 2262).
    pub const RANGE: std::ops::RangeInclusive<i32> = 1678..=2261;

    /// `y` as the year of [`Year::Fixed`] (`replay --year`, a rule test's `year`) when it is in
    /// [`Year::RANGE`], else why not: in another year every RFC 3164 stamp would be refused.
    pub fn checked(y: i64) -> Result<i32, String> {
        match i32::try_from(y) {
            Ok(y) if Self::RANGE.contains(&y) => Ok(y),
            _ => Err(format!(
                "{y} is not a year from {} to {} (times are 64-bit nanoseconds: every RFC 3164 stamp would be out of range)",
                Self::RANGE.start(),
                Self::RANGE.end()
            )),
        }
    }
}

/// What kind of time stamp a line carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// None (RFC 5424 `-`, a PRI-only line): the event's time is its arrival.
    None,
    /// A classic RFC 3164 stamp, whose year was resolved (or fixed by `replay --year`);
    /// `named_zone`: read in a zone the stamp names (a Cisco `UTC:`), not the configured one.
    YearLess {
        /// See the variant.
        named_zone: bool,
    },
    /// A stamp with its own year (RFC 5424, RFC 3339 inside RFC 3164, a year in the stamp).
    Full,
}

/// Parses syslog lines into events; cheap to copy, holds only its configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyslogParser {
    zone: Zone,
    year: Year,
}

impl SyslogParser {
    /// A parser reading zone-less stamps in `zone` with the year policy `year`.
    pub const fn new(zone: Zone, year: Year) -> Self {
        SyslogParser { zone, year }
    }

    /// The same parser with the year policy `year`.
    pub const fn with_year(self, year: Year) -> Self {
        SyslogParser { year, ..self }
    }

    /// The zone of zone-less RFC 3164 stamps.
    pub const fn zone(&self) -> Zone {
        self.zone
    }

    /// The year policy for year-less RFC 3164 stamps.
    pub const fn year(&self) -> Year {
        self.year
    }

    /// The later reading of the zone-less stamp read as `t`, when its wall clock falls in an
    /// autumn overlap of the zone (02:30 on the night clocks go back from 03:00 to 02:00 is
    /// two instants, and `t` is the earlier): what the second pass of that hour means.
    pub fn later_reading(&self, t: Timestamp) -> Option<Timestamp> {
        let Zone::Iana(tz) = self.zone else {
            return None;
        };
        let utc = naive_utc(t);
        let wall = tz.from_utc_datetime(&utc).naive_local();
        match tz.from_local_datetime(&wall) {
            chrono::LocalResult::Ambiguous(a, b) if a.naive_utc() == utc => {
                let shift = (b.naive_utc() - a.naive_utc()).num_nanoseconds()?;
                Some(Timestamp(t.0.checked_add(shift)?))
            }
            _ => None,
        }
    }

    /// Parses one message (a datagram, a frame or a file line) received at `arrival` from
    /// `peer` into a syslog [`Event`], or says why it is [`Malformed`]. Never panics.
    pub fn parse(
        &self,
        line: &[u8],
        arrival: Timestamp,
        peer: Option<IpAddr>,
    ) -> Result<Event, Malformed> {
        self.parse_stamped(line, arrival, peer).map(|(e, _)| e)
    }

    /// [`SyslogParser::parse`], and what kind of stamp the line carried
    /// ([`Stamp::None`]: the event's time is `arrival`).
    pub fn parse_stamped(
        &self,
        line: &[u8],
        arrival: Timestamp,
        peer: Option<IpAddr>,
    ) -> Result<(Event, Stamp), Malformed> {
        let text: Cow<'_, str> = String::from_utf8_lossy(trim_bytes(line));
        let text = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
        if text.is_empty() {
            return Err(Malformed::Empty);
        }
        // A byte-order mark before the message or right after its PRI (a Windows agent's, an
        // editor's) is no part of it: the header after it is read, as rsyslog reads it, live
        // as in files.
        let bom_less = without_bom(text);
        let text = bom_less.as_deref().unwrap_or(text);
        let sent_pri = split_pri(text).is_some();
        // An ISO 8601 stamp without an offset (`2019-02-13T19:48:34`, some devices and
        // scripts write it) is read in the configured zone and written back in UTC, or
        // syslog_loose would lose the whole header with it.
        let zoned = self.zone_less_iso(text);
        let text = zoned.as_deref().unwrap_or(text);
        // Cisco's headers (sequence numbers, `*Mar  1 00:00:23.123:`, `%LINK-3-UPDOWN:`) as
        // the BSD ones they resemble.
        let cisco = cisco_header(text);
        let (text, zone) = match &cisco {
            Some((t, named)) => (t.as_str(), named.map_or(self.zone, Zone::Fixed)),
            None => (text, self.zone),
        };
        let arrival_utc = naive_utc(arrival);
        let year = self.year;
        // syslog_loose's year callback must be `Copy`: it captures plain values and a shared
        // reference (to learn whether the stamp lacked a year).
        let year_less = std::cell::Cell::new(false);
        let seen = &year_less;
        let resolve = move |d: IncompleteDate| {
            seen.set(true);
            resolve_year(year, zone, arrival_utc, d)
        };
        // A BSD stamp with fractional seconds (syslog-ng's `frac-digits`) is parsed without
        // them (syslog_loose would lose the whole header), then they are added back.
        // Where a BSD stamp starts and how long it is (a year in it: 20 bytes, else 15),
        // looked for once: neither change below moves it.
        let stamp =
            (bsd_stamp(text).map(|s| (s, 15))).or_else(|| bsd_year_stamp(text).map(|s| (s, 20)));
        let stripped = stamp.and_then(|(s, len)| strip_bsd_fraction(text, s, len));
        let (unfrac, frac) = match stripped {
            Some((t, ns)) => (Some(t), ns),
            None => (None, 0),
        };
        let text = unfrac.as_deref().unwrap_or(text);
        // Runs of blanks between a BSD stamp and the tag (`20:07:26  h  a: x`, tabs) lose
        // syslog_loose the host and the tag: one space each.
        let squeezed = stamp.and_then(|(s, len)| squeeze_bsd_header(text, s, len));
        let text = squeezed.as_deref().unwrap_or(text);
        // An RFC 5424 line whose structured data is never closed (`[x no end`) is read with
        // none, its text the message: syslog_loose would lose the whole header (host, app)
        // with it, and the event every rule keyed on them.
        let unclosed = unclosed_sd(text);
        let text = unclosed.as_deref().unwrap_or(text);
        let parse = |t| {
            syslog_loose::parse_message_with_year_exact_tz(t, resolve, Some(Utc), Variant::Either)
        };
        let parsed = parse(text);
        // A tag without its colon first in an RFC 3164 header (`sshd[123] no colon`) is read
        // by syslog_loose as the host: it is parsed again with the colon.
        let tagged = parsed.as_ref().ok().and_then(|m| colon_after_tag(text, m));
        let (text, parsed) = match tagged.as_deref() {
            Some(t) => (t, parse(t)),
            None => (text, parsed),
        };
        let (mut event, stamped) = match parsed {
            // Without a PRI, only a stamp says a line is syslog (`host app: x` is refused by
            // syslog_loose); its nil stamp `-` is no stamp (`- gobbledegook` would be a host).
            Ok(msg) if msg.timestamp.is_none() && !text.starts_with('<') => {
                return Err(Malformed::NotSyslog);
            }
            Ok(msg) => {
                let stamped = match msg.timestamp {
                    None => Stamp::None,
                    Some(_) if year_less.get() => Stamp::YearLess {
                        named_zone: zone != self.zone,
                    },
                    Some(_) => Stamp::Full,
                };
                (self.event_from(text, msg, arrival, frac, zone)?, stamped)
            }
            Err(_) => {
                let bare =
                    text.starts_with('<') && after_pri(text).is_some_and(|r| r.trim().is_empty());
                let why = if bare {
                    Malformed::PriOnly
                } else {
                    Malformed::NotSyslog
                };
                (pri_only(text, arrival).ok_or(why)?, Stamp::None)
            }
        };
        relayed_cisco(&mut event);
        folded_repeats(&mut event);
        syslogd_notice(&mut event);
        if let Some(ip) = peer {
            let ip = Value::ip(ip);
            // A message without a hostname (`<14>heartbeat: alive`, as Python's
            // SysLogHandler and busybox send it) is its sender's, as rsyslog and syslog-ng
            // fill HOSTNAME/HOST: a rule grouped by host still sees it.
            if event.get(Field::Host).is_none() {
                event.set(Field::Host, Value::str(&ip.to_string()));
            }
            // A message received without a PRI is `user.notice`, as RFC 3164 (4.3.3) has a
            // relay write it and rsyslog and syslog-ng read it: `severity <= 3` is not true of
            // it, `severity >= 5` is. A line of a file keeps none (/var/log/auth.log has no
            // PRI, and its lines are not `user`).
            if !sent_pri && event.get(Field::Severity).is_none() {
                event.set(Field::Facility, Value::Int(1));
                event.set(Field::Severity, Value::Int(5));
            }
            event.set(Field::Peer, ip);
        }
        Ok((event, stamped))
    }

    /// `text` with its zone-less ISO 8601 stamp (after the PRI, and the version `1` of RFC
    /// 5424) read in the parser's zone and written in UTC, `Z`; `None` when it has no such
    /// stamp (one with `Z` or an offset is taken as written).
    fn zone_less_iso(&self, text: &str) -> Option<String> {
        let body = after_pri(text)?;
        let mut start = text.len() - body.len();
        if let Some(rest) = body.strip_prefix("1 ") {
            start = text.len() - rest.len();
        }
        let b = text.as_bytes().get(start..)?;
        let digits = |r: std::ops::Range<usize>| {
            b.get(r.clone())
                .is_some_and(|d| d.len() == r.len() && d.iter().all(u8::is_ascii_digit))
        };
        let shape = digits(0..4)
            && b.get(4) == Some(&b'-')
            && digits(5..7)
            && b.get(7) == Some(&b'-')
            && digits(8..10)
            && matches!(b.get(10), Some(b'T' | b' '))
            && digits(11..13)
            && b.get(13) == Some(&b':')
            && digits(14..16)
            && b.get(16) == Some(&b':')
            && digits(17..19);
        if !shape {
            return None;
        }
        let mut end = 19;
        if b.get(end) == Some(&b'.') {
            let n = b[end + 1..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
            if !(1..=9).contains(&n) {
                return None;
            }
            end += 1 + n;
        }
        // The zone: none (a space follows), `Z`, or an offset `+hh:mm`, `-hh:mm`, or
        // without its colon (`+0200`, which some devices write). After a tab syslog_loose
        // reads no header, and the stamp is left as sent, in `msg`.
        let spaced = b[10] == b' ';
        let stamp = std::str::from_utf8(&b[..end]).ok()?;
        let wall =
            NaiveDateTime::parse_from_str(&stamp.replacen(' ', "T", 1), "%Y-%m-%dT%H:%M:%S%.f")
                .ok()?;
        let (utc, zone_len) = match b.get(end) {
            Some(b' ') => (self.zone.to_utc(wall)?, 0),
            Some(b'Z') if spaced => (wall, 1),
            Some(&sign @ (b'+' | b'-')) => {
                let colon = b.get(end + 3) == Some(&b':');
                let (len, hh, mm) = if colon {
                    (6, end + 1..end + 3, end + 4..end + 6)
                } else {
                    (5, end + 1..end + 3, end + 3..end + 5)
                };
                // `+hh:mm` after a `T` is RFC 3339: syslog_loose reads it as written.
                if colon && !spaced {
                    return None;
                }
                if !digits(hh.clone()) || !digits(mm.clone()) {
                    return None;
                }
                let num = |r: std::ops::Range<usize>| -> Option<i64> {
                    std::str::from_utf8(&b[r]).ok()?.parse().ok()
                };
                let mins = num(hh)? * 60 + num(mm)?;
                if mins > 18 * 60 {
                    return None;
                }
                let off = chrono::Duration::minutes(if sign == b'-' { -mins } else { mins });
                (wall.checked_sub_signed(off)?, len)
            }
            _ => return None,
        };
        if b.get(end + zone_len) != Some(&b' ') {
            return None;
        }
        Some(format!(
            "{}{}{}",
            &text[..start],
            utc.format("%Y-%m-%dT%H:%M:%S%.fZ"),
            &text[start + end + zone_len..]
        ))
    }

    /// Builds the event from a parsed message, reading a zone-less stamp in `zone` (the
    /// configured one, or the one a Cisco stamp names).
    fn event_from(
        &self,
        text: &str,
        msg: Message<&str>,
        arrival: Timestamp,
        frac_ns: i64,
        zone: Zone,
    ) -> Result<Event, Malformed> {
        let time = match msg.timestamp {
            None => arrival,
            Some(ts) if is_bsd_stamp(text) => {
                // Parsed with UTC as the zone: the UTC reading *is* the wall clock.
                let wall = ts.naive_utc();
                let utc = zone.to_utc(wall);
                to_timestamp(utc.ok_or_else(|| Malformed::TimeOutOfRange(wall.to_string()))?)?
                    .add(cepheus_core::time::Duration(frac_ns))
            }
            Some(ts) => to_timestamp(ts.naive_utc())?,
        };
        let mut event = Event::new(Source::Syslog, time, arrival);
        // A PRI above 191 (no facility has it) is not a PRI: neither field, not a severity
        // read from its low bits (`<192>` would pass `severity <= 3` as an emergency).
        if let (Some(f), Some(s)) = (msg.facility, msg.severity) {
            event.set(Field::Facility, Value::Int(f as i64));
            event.set(Field::Severity, Value::Int(s as i64));
        }
        let (host, app) = match (&msg.protocol, msg.hostname, msg.appname) {
            // RFC 3164 without a hostname (`<13>Apr  5 12:56:51 su: pam ok`, as local
            // senders write it): the first header word ends with a colon, so it is the tag.
            (Protocol::RFC3164, Some(h), None) if ends_with_colon(text, h) => (None, Some(h)),
            // A host, then `-` for no tag (`Jul  7 08:06:15 combo - x`): syslog_loose drops
            // the host with the tag.
            (Protocol::RFC3164, None, None) => (nil_tag_host(text), None),
            (_, h, a) => (h, a),
        };
        if let Some(h) = host {
            event.set(Field::Host, Value::str(h));
        }
        if let Some(a) = app {
            event.set(Field::App, Value::str(a));
        }
        match msg.procid {
            Some(ProcId::PID(p)) => {
                let written = pid_as_written(text, &msg, p);
                event.set(Field::Procid, Value::str(&written));
            }
            Some(ProcId::Name(n)) => event.set(Field::Procid, Value::str(n)),
            None => {}
        }
        if let Some(m) = msg.msgid {
            event.set(Field::Msgid, Value::str(m));
        }
        let body = match msg.protocol {
            // Structured data that is not RFC 5424's (`[Originator@6876 sub=Vimsvc opID=x]`,
            // as ESXi writes it: values without quotes) yields no parameter: it stays in the
            // MSG, as rsyslog and syslog-ng keep it, rather than vanish unseen; so does all of
            // it when one element of several is such (the others' parameters are still read).
            Protocol::RFC5424(_) => unread_sd(text, msg.msg, msg.structured_data.len())
                .unwrap_or_else(|| msg_5424(text, msg.msg)),
            // (Not when syslog_loose dropped host and tag: that `-` was the nil tag.)
            Protocol::RFC3164
                if msg.structured_data.is_empty()
                    && (msg.hostname.is_some() || msg.appname.is_some()) =>
            {
                msg_3164(text, msg.msg)
            }
            Protocol::RFC3164 => msg.msg,
        };
        event.set(
            Field::Msg,
            Value::str(body.strip_prefix('\u{feff}').unwrap_or(body)),
        );
        // Distinct `sd.` keys, and none is set before them (the others are known fields).
        event.extend_new(
            sd_fields(&msg)
                .into_iter()
                .map(|(key, value)| (FieldKey::Named(Arc::from(key)), Value::str(&value))),
        );
        Ok(event)
    }
}

/// The most distinct `sd.<id>.<param>` fields one message gives (see [`sd_fields`]).
pub const MAX_SD_FIELDS: usize = 64;

/// The `sd.<id>.<param>` fields of a message's structured data, in the order first written.
/// A parameter written more than once (RFC 5424 allows it: `origin`'s `ip`, one per address)
/// keeps every value, in the order written and each once, joined by [`SD_JOIN`]; the last
/// one alone would hide the others from rules and alerts. A repeated SD-ID (which RFC 5424
/// forbids, but senders write) is read the same way. At most [`MAX_SD_FIELDS`] distinct
/// parameters become fields, the first written: a sender's thousands of tiny parameters
/// would each be a field held in every partial match and alert that holds the event (ten
/// times the message's size in memory, and as much in the store).
fn sd_fields(msg: &Message<&str>) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = Vec::new();
    // Where each key is in `fields`, and the values it holds: an SD bomb of many parameters
    // costs no quadratic search.
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut seen: HashSet<(usize, String)> = HashSet::new();
    for element in &msg.structured_data {
        // (Not `params()`: syslog_loose also turns `\n` into a line feed, which RFC 5424
        // does not, and a Windows path `C:\new` would lose its `\n`.)
        for (name, value) in &element.params {
            let key = format!("sd.{}.{}", element.id, name);
            let value = sd_unescape(value);
            match at.get(&key) {
                Some(&i) => {
                    if let Some((_, joined)) = fields.get_mut(i)
                        && seen.insert((i, value.clone()))
                    {
                        joined.push_str(SD_JOIN);
                        joined.push_str(&value);
                    }
                }
                None if fields.len() < MAX_SD_FIELDS => {
                    at.insert(key.clone(), fields.len());
                    seen.insert((fields.len(), value.clone()));
                    fields.push((key, value));
                }
                None => {}
            }
        }
    }
    fields
}

/// What joins the values of a structured-data parameter written more than once.
const SD_JOIN: &str = ",";

/// A PARAM-VALUE as RFC 5424 (6.3.3) reads it: `\"`, `\\` and `\]` are escapes; any other
/// backslash is kept as written.
fn sd_unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('\\', Some(&n @ ('"' | '\\' | ']'))) => {
                out.push(n);
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

/// An RFC 3164 message as sent: `syslog_loose` reads a `-` that starts it as empty
/// structured data and drops it (`kernel: -EIO` gave `EIO`, the kernel's
/// `------------[ cut here ]` lost a dash, `combo  -- root[2421]: ...` gave `- root...`).
/// `parsed` is its MSG, a slice of `text`.
fn msg_3164<'a>(text: &'a str, parsed: &'a str) -> &'a str {
    let Some(start) = offset_in(text, parsed) else {
        return parsed;
    };
    let before = text[..start].trim_end_matches([' ', '\t']);
    match before.strip_suffix('-') {
        Some(head) if head.ends_with([' ', '\t', ':']) => text.get(head.len()..).unwrap_or(parsed),
        _ => parsed,
    }
}

/// The text of an RFC 5424 message from its structured data on, when that part is not nil
/// (`-`) and yet `syslog_loose` read fewer elements from it than it holds (`read` of them;
/// `parsed`, the MSG it read after them, is a slice of `text`); `None` otherwise.
fn unread_sd<'a>(text: &'a str, parsed: &str, read: usize) -> Option<&'a str> {
    let start = sd_field(text)?;
    let rest = &text[start..];
    if !rest.starts_with('[') {
        return None;
    }
    // Where the MSG begins, if it is in the text (else the whole rest is structured data).
    let msg_at = offset_in(text, parsed).filter(|&m| m >= start && !parsed.is_empty());
    if read > 0 && sd_elements(&text[start..msg_at.unwrap_or(text.len())]) <= read {
        return None;
    }
    match msg_at {
        Some(m) if text[start..m].trim().is_empty() => None,
        _ => Some(rest.trim_end()),
    }
}

/// Where the STRUCTURED-DATA field of an RFC 5424 line (`<PRI>1 ` first) begins: after six
/// header fields (`<PRI>1`, stamp, host, app, procid, msgid), each ended by a space or more
/// (some senders write more; `syslog_loose` reads them as one). `None` for another line.
fn sd_field(text: &str) -> Option<usize> {
    after_pri(text)?.strip_prefix("1 ")?;
    let mut rest = text;
    for _ in 0..6 {
        let end = rest.find(' ')?;
        rest = rest[end..].trim_start_matches(' ');
    }
    Some(text.len() - rest.len())
}

/// How many `[...]` elements `sd` begins with, one after the other (a `]` inside a quoted
/// value, or escaped there, ends none; one never closed counts).
fn sd_elements(sd: &str) -> usize {
    let b = sd.as_bytes();
    let (mut i, mut n) = (0, 0);
    while b.get(i) == Some(&b'[') {
        n += 1;
        let mut quoted = false;
        i += 1;
        while let Some(&c) = b.get(i) {
            match c {
                b'\\' if quoted => i += 1,
                b'"' => quoted = !quoted,
                b']' if !quoted => break,
                _ => {}
            }
            i += 1;
        }
        i += 1;
    }
    n
}

/// An RFC 5424 MSG as sent: one space separates it from the structured data and any further
/// ones are its own (an indented continuation line keeps its indent), which `syslog_loose`
/// drops. `parsed` is `syslog_loose`'s MSG, a slice of `text`.
fn msg_5424<'a>(text: &'a str, parsed: &'a str) -> &'a str {
    let Some(start) = offset_in(text, parsed) else {
        return parsed;
    };
    let before = &text[..start];
    let blanks = before.len() - before.trim_end_matches(' ').len();
    match text.get(start - blanks.saturating_sub(1)..) {
        Some(m) if blanks > 1 => m,
        _ => parsed,
    }
}

/// The process id as the sender wrote it (`0123` stays `0123`): `syslog_loose` hands back a
/// number, so find its text in the header (`app[pid]` in RFC 3164, the fifth header token in
/// RFC 5424) and keep it only if it reads as the same number.
fn pid_as_written(text: &str, msg: &Message<&str>, pid: i32) -> String {
    let found = match (&msg.protocol, msg.appname) {
        (Protocol::RFC5424(_), _) => text.split_whitespace().nth(4),
        (Protocol::RFC3164, Some(app)) if !app.is_empty() => text
            .match_indices(app)
            .find_map(|(i, _)| text[i + app.len()..].strip_prefix('['))
            .and_then(|rest| rest.split(']').next()),
        (Protocol::RFC3164, Some(_)) => None,
        (Protocol::RFC3164, None) => None,
    };
    match found {
        Some(t) if t.trim().parse::<i32>() == Ok(pid) => t.to_string(),
        _ => pid.to_string(),
    }
}

/// Whether the header word `word` (a slice of `text`, as the parser hands it back) is
/// written `word:` followed by a blank or the end: a tag, not a hostname. Only the colon right
/// after that word counts (`fw1  link down on fw1: eth0` keeps `fw1` as the host).
fn ends_with_colon(text: &str, word: &str) -> bool {
    offset_in(text, word).is_some_and(|start| {
        text[start + word.len()..]
            .strip_prefix(':')
            .is_some_and(|r| r.chars().next().is_none_or(char::is_whitespace))
    })
}

/// Where `part`, a slice the parser took from `text`, starts in it (`None` when it is not
/// one): the parser hands back slices, and what surrounds them is read from `text`.
fn offset_in(text: &str, part: &str) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    text.get(start..end)
        .is_some_and(|s| s.as_ptr() == part.as_ptr())
        .then_some(start)
}

/// `text` with a colon after its first RFC 3164 header word when that word holds a `[`
/// (`sshd[123]`) and was read as the host: no host name holds one, so it is the tag
/// (`app[procid]`) written without the colon that ends it (`<13>Feb 13 20:07:26 sshd[123] no
/// colon`, also before a nil tag `-`), and the line has no host, as when the colon is there.
/// A tag whose colon has no blank after it (`sshd[123]:x`) gets one. `None` for any other
/// line, and for a word that starts with `[` (no tag).
fn colon_after_tag(text: &str, msg: &Message<&str>) -> Option<String> {
    if !matches!(msg.protocol, Protocol::RFC3164) {
        return None;
    }
    let host = match (msg.hostname, msg.appname) {
        (Some(h), _) => h,
        // A host before a nil tag, as `event_from` reads it.
        (None, None) => nil_tag_host(text)?,
        (None, Some(_)) => return None,
    };
    let open = host.find('[').filter(|&i| i > 0)?;
    let start = offset_in(text, host)?;
    let (at, insert) = match host.find(':') {
        None => (start + host.len(), ":"),
        Some(colon) if colon > open && host[..colon].ends_with(']') => (start + colon + 1, " "),
        Some(_) => return None,
    };
    Some(format!("{}{insert}{}", &text[..at], &text[at..]))
}

/// The host of an RFC 3164 header whose tag is `-` (none): `Mmm dd hh:mm:ss host - ...`,
/// `host -: ...`, or the same after an RFC 3339 stamp.
fn nil_tag_host(text: &str) -> Option<&str> {
    let rest = match bsd_stamp(text) {
        Some(start) => text.get(start + 15..)?,
        None => {
            // `2024-12-10T10:00:00Z host - ...`, as rsyslog may send it.
            let body = after_pri(text)?.trim_start();
            let b = body.as_bytes();
            let rfc3339 = b.len() > 19
                && b[..4].iter().all(u8::is_ascii_digit)
                && b[4] == b'-'
                && b[10] == b'T';
            if !rfc3339 {
                return None;
            }
            &body[body.find(' ')?..]
        }
    };
    let (host, after) = rest.strip_prefix(' ')?.split_once(' ')?;
    let nil = after.strip_prefix('-').is_some_and(|r| {
        r.chars()
            .next()
            .is_none_or(|c| c.is_whitespace() || c == ':')
    });
    (nil && !host.is_empty() && !host.contains(':') && host != "-").then_some(host)
}

/// Trims trailing CR, LF and NUL (framing leftovers) from raw bytes.
pub(crate) fn trim_bytes(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|b| !matches!(b, b'\r' | b'\n' | 0))
        .map_or(0, |i| i + 1);
    &line[..end]
}

/// Whether the message's stamp is a zone-less BSD one (`MMM DD ...`) rather than RFC 3339:
/// after an optional PRI and spaces, the header starts with a letter (a month name).
fn is_bsd_stamp(text: &str) -> bool {
    // An unclosed `<` is skipped alone.
    let rest = after_pri(text).unwrap_or_else(|| &text[1..]);
    rest.trim_start()
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
}

/// `text` without a byte-order mark at its start or right after its PRI (`None`: it has
/// none there). RFC 5424's own BOM, before the MSG, is the parser's.
fn without_bom(text: &str) -> Option<String> {
    const BOM: char = '\u{feff}';
    if let Some(rest) = text.strip_prefix(BOM) {
        let rest = rest.trim_start_matches(BOM);
        return Some(without_bom(rest).unwrap_or_else(|| rest.to_string()));
    }
    let (digits, body) = split_pri(text)?;
    let body = body.strip_prefix(BOM)?;
    Some(format!("<{digits}>{}", body.trim_start_matches(BOM)))
}

/// A leading `<PRI>` of one to three digits: its digits and the text after it.
fn split_pri(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix('<')?;
    let close = rest.find('>')?;
    let digits = &rest[..close];
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits, &rest[close + 1..]))
}

/// The text after a leading `<PRI>` (all of it without one); `None` for a `<` never closed.
fn after_pri(text: &str) -> Option<&str> {
    match text.strip_prefix('<') {
        Some(r) => r.find('>').map(|i| &r[i + 1..]),
        None => Some(text),
    }
}

/// Where a BSD stamp (`Mmm dd hh:mm:ss`, after the PRI and blanks) starts, when one does and
/// more than one byte follows it: the byte right after it (`text[start + 15]`) tells what
/// comes next (a blank, or `.` and a fraction).
fn bsd_stamp(text: &str) -> Option<usize> {
    let body = after_pri(text)?;
    let start = text.len() - body.trim_start().len();
    let b = text.as_bytes().get(start..)?;
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let stamp = b.len() > 16
        && b[..3].iter().all(u8::is_ascii_alphabetic)
        && b[3] == b' '
        && (b[4] == b' ' || digit(4))
        && digit(5)
        && b[6] == b' '
        && digit(7)
        && digit(8)
        && b[9] == b':'
        && digit(10)
        && digit(11)
        && b[12] == b':'
        && digit(13)
        && digit(14);
    stamp.then_some(start)
}

/// A BSD header (`Mmm dd hh:mm:ss host tag:`) whose host and tag are set apart by more than
/// one space or by tabs: the same header with single spaces (the message after the tag's
/// colon is left as it is). `None` when there is nothing to squeeze, or no such header.
/// `start` is where [`bsd_stamp`] (`len` 15) or [`bsd_year_stamp`] (`len` 20) found the stamp.
fn squeeze_bsd_header(text: &str, start: usize, len: usize) -> Option<String> {
    if !matches!(text.as_bytes().get(start + len), Some(b' ' | b'\t')) {
        return None;
    }
    let head_start = start + len;
    let region = &text[head_start..];
    // The tag ends at the first colon, followed by a space or the end (`12:34`, `http://`
    // and an IPv6 host are no tag's end); a header is short.
    let colon = region.find(':').filter(|&i| i <= 128)?;
    if !matches!(region.as_bytes().get(colon + 1), None | Some(b' ' | b'\t')) {
        return None;
    }
    let head = &region[..colon];
    let words: Vec<&str> = head.split_whitespace().collect();
    let joined = words.join(" ");
    let tidy = head.strip_prefix(' ') == Some(joined.as_str());
    if tidy || !(1..=2).contains(&words.len()) || head.ends_with([' ', '\t']) {
        return None;
    }
    Some(format!(
        "{} {joined}{}",
        &text[..head_start],
        &region[colon..]
    ))
}

/// A BSD header stamp with fractional seconds (`Dec  2 05:40:00.123 host ...`): the text
/// without the fraction, and the fraction in nanoseconds. `None` for anything else. `start` is
/// where [`bsd_stamp`] found the stamp.
fn strip_bsd_fraction(text: &str, start: usize, len: usize) -> Option<(String, i64)> {
    if text.as_bytes().get(start + len) != Some(&b'.') {
        return None;
    }
    let b = &text.as_bytes()[start + len + 1..];
    let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if !(1..=9).contains(&digits) || b.get(digits) != Some(&b' ') {
        return None;
    }
    let frac = std::str::from_utf8(&b[..digits]).ok()?;
    let ns = format!("{frac:0<9}").parse::<i64>().ok()?;
    let cut = start + len;
    Some((format!("{}{}", &text[..cut], &text[cut + 1 + digits..]), ns))
}

/// Where a BSD stamp with a year (`Mmm dd yyyy hh:mm:ss`, Cisco's and some appliances'; 20
/// bytes) starts after the PRI, when one does.
fn bsd_year_stamp(text: &str) -> Option<usize> {
    let body = after_pri(text)?;
    let start = text.len() - body.trim_start().len();
    let b = text.as_bytes().get(start..)?;
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let stamp = b.len() > 21
        && b[..3].iter().all(u8::is_ascii_alphabetic)
        && b[3] == b' '
        && (b[4] == b' ' || digits(4..5))
        && digits(5..6)
        && b[6] == b' '
        && digits(7..11)
        && b[11] == b' '
        && digits(12..14)
        && b[14] == b':'
        && digits(15..17)
        && b[17] == b':'
        && digits(18..20);
    stamp.then_some(start)
}

/// A message rsyslog's repeated-message reduction folded (`message repeated 5 times: [ Failed
/// password for root from 5.36.59.76 port 42393 ssh2]`, as `$RepeatedMsgReduction on` writes
/// it after the first copy): the message is the one repeated and `repeat` says how many times
/// it came, so that rules see every copy (a brute force folded into one line counted once).
fn folded_repeats(event: &mut Event) {
    let Some(msg) = event.get(Field::Msg).and_then(Value::as_str) else {
        return;
    };
    let Some(rest) = msg.strip_prefix("message repeated ") else {
        return;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let Some(inner) = rest[digits..]
        .strip_prefix(" times: [")
        .and_then(|r| r.strip_suffix(']'))
    else {
        return;
    };
    let Ok(n) = rest[..digits].parse::<i64>() else {
        return;
    };
    if n < 1 {
        return;
    }
    // (rsyslog writes the message as it came after the tag: with its leading space.)
    let inner = Value::str(inner.strip_prefix(' ').unwrap_or(inner));
    event.set(Field::Msg, inner);
    if n > 1 {
        event.set(Field::Repeat, Value::Int(n));
    }
}

/// A syslogd's notice that it folded copies of the sender's previous message into a count
/// (sysklogd's, FreeBSD's and macOS's: `last message repeated 3 times`, `--- last message
/// repeated 1 time ---`), which the header's reading took apart (`last` as the tag, or, in a
/// message forwarded without a hostname as FreeBSD forwards, `last` as the host and `message`
/// as the tag): made an untagged message of the notice's text, its host the sender's (the
/// peer's, as for any message without one), so that [`LastMessages`] finds it.
fn syslogd_notice(event: &mut Event) {
    let text = |f| event.get(f).and_then(Value::as_str);
    let msg = text(Field::Msg).unwrap_or("");
    // Cheap test first: every such notice says `repeated`.
    if !msg.contains("repeated ") {
        return;
    }
    let (notice, host_misread) = match (text(Field::Host), text(Field::App)) {
        (Some(h @ ("last" | "---")), Some(a)) if text(Field::Procid).is_none() => {
            (format!("{h} {a} {msg}"), true)
        }
        (_, Some(a @ ("last" | "---"))) if text(Field::Procid).is_none() => {
            (format!("{a} {msg}"), false)
        }
        _ => return,
    };
    if notice_count(&notice).is_none() {
        return;
    }
    event.fields.retain(|(k, _)| {
        let misread = matches!(k, FieldKey::Known(Field::Host)) && host_misread;
        !(matches!(k, FieldKey::Known(Field::App)) || misread)
    });
    event.set(Field::Msg, Value::str(&notice));
}

/// How many times a syslogd's notice (`last message repeated 3 times`, with or without
/// macOS's `--- ... ---`) says the sender's previous message came again.
fn notice_count(text: &str) -> Option<i64> {
    let t = text.trim();
    let t = t.strip_prefix("--- ").unwrap_or(t);
    let t = t.strip_suffix(" ---").unwrap_or(t);
    let rest = t.strip_prefix("last message repeated ")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if !matches!(&rest[digits..], " time" | " times") {
        return None;
    }
    rest[..digits].parse().ok().filter(|&n| n >= 1)
}

/// The count of a syslogd's repeat notice ([`syslogd_notice`]'s form: no tag, the notice
/// as the message), if `event` is one.
pub fn repeat_notice(event: &Event) -> Option<i64> {
    if event.source != Source::Syslog || event.get(Field::App).is_some() {
        return None;
    }
    notice_count(event.get(Field::Msg)?.as_str()?)
}

/// Senders whose last message one [`LastMessages`] remembers at most (beyond it, one is let
/// go for each new one: a notice from a sender it no longer holds stays as it came).
pub const LAST_MESSAGES: usize = 4096;

/// The longest last message remembered (a longer one is not: a notice after it stays as it
/// came), so one [`LastMessages`] holds at most about 16 MB (a buffer reused for a sender's
/// messages keeps at most twice this).
const LAST_MESSAGE_BYTES: usize = 2048;

/// The last message of each sender (by peer and host), as received, so that a syslogd's
/// notice that it repeated ([`repeat_notice`]) stands for those copies: the message again,
/// at the notice's time, with `repeat` the count, as rsyslog's folded form reads. Without
/// it, five failed logins folded by a FreeBSD or sysklogd sender into one line and a
/// notice would count once. Bounded ([`LAST_MESSAGES`], [`LAST_MESSAGE_BYTES`]). A notice
/// whose message was lost on the way (UDP) stands for the message before it: the sender
/// cannot be asked.
#[derive(Debug)]
pub struct LastMessages {
    map: HashMap<u64, Vec<u8>>,
    /// Senders held at most ([`LAST_MESSAGES`], or a share of it).
    cap: usize,
    /// Per-process random keys: a sender cannot make its messages collide with another's.
    state: std::collections::hash_map::RandomState,
}

impl Default for LastMessages {
    fn default() -> Self {
        LastMessages::holding(LAST_MESSAGES)
    }
}

impl LastMessages {
    /// One holding at most `cap` senders (a stripe's share of [`LAST_MESSAGES`]).
    pub fn holding(cap: usize) -> LastMessages {
        LastMessages {
            map: HashMap::new(),
            cap: cap.max(1),
            state: Default::default(),
        }
    }

    /// `event`, parsed from `bytes` sent by `peer`, as the rules are to see it: a repeat
    /// notice whose sender's last message is known becomes that message (`reparse` reads
    /// its bytes again) at the notice's time and arrival, standing for as many copies as
    /// the notice says; any other message is remembered as its sender's last and returned
    /// as it is.
    pub fn take(
        &mut self,
        event: Event,
        bytes: &[u8],
        peer: Option<IpAddr>,
        reparse: impl FnOnce(&[u8]) -> Option<Event>,
    ) -> Event {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut h = self.state.build_hasher();
        peer.hash(&mut h);
        event.get(Field::Host).and_then(Value::as_str).hash(&mut h);
        let key = h.finish();
        if let Some(n) = repeat_notice(&event) {
            let Some(mut again) = self.map.get(&key).and_then(|b| reparse(b)) else {
                return event;
            };
            again.time = event.time;
            again.arrival = event.arrival;
            if n > 1 {
                again.set(Field::Repeat, Value::Int(n));
            } else {
                again
                    .fields
                    .retain(|(k, _)| !matches!(k, FieldKey::Known(Field::Repeat)));
            }
            return again;
        }
        if bytes.len() > LAST_MESSAGE_BYTES {
            self.map.remove(&key);
            return event;
        }
        if self.map.len() >= self.cap
            && !self.map.contains_key(&key)
            && let Some(&gone) = self.map.keys().next()
        {
            self.map.remove(&gone);
        }
        let kept = self.map.entry(key).or_default();
        kept.clear();
        kept.extend_from_slice(bytes);
        event
    }
}

/// A Cisco message a relay wrapped in a header of its own (rsyslog's RFC 5424 template:
/// `<189>1 2026-12-06T01:52:22Z sw1 123 - - - *Mar  1 00:00:01.123: %LINK-3-UPDOWN: text`,
/// or its BSD one, `sw1 123: *Mar ...`): the relay took the device's sequence number (or
/// its stamp's first word) for the app, and the rest for the message. The mnemonic becomes
/// the app and the text after it the message, as for the device's own header; the time
/// stays the relay's (the device's clock may not be in sync: its `*`).
fn relayed_cisco(event: &mut Event) {
    let (Some(msg), app) = (
        event.get(Field::Msg).and_then(Value::as_str),
        event.get(Field::App).and_then(Value::as_str),
    ) else {
        return;
    };
    // Cheap test first: every such message holds `: %`.
    if !msg.contains('%') {
        return;
    }
    // What the device wrote after its sequence number: the message, or (a stamp's first
    // word taken for the app: `*Mar`) the app and the message.
    let joined;
    let tail = match app {
        None => msg,
        Some(a) if is_cisco_seq(a) => msg,
        Some(a) if is_month_word(a.trim_start_matches(['*', '.'])) => {
            joined = format!("{a} {msg}");
            joined.as_str()
        }
        Some(_) => return,
    };
    let Some(rest) = after_device_stamp(tail) else {
        return;
    };
    let Some((mnemonic, text)) = cisco_mnemonic(rest) else {
        return;
    };
    let (mnemonic, text) = (Value::str(mnemonic), Value::str(text));
    event.set(Field::App, mnemonic);
    event.set(Field::Msg, text);
}

/// Whether `w` is a Cisco sequence number (`123` of `123: *Mar  1 ...`): one to ten digits.
fn is_cisco_seq(w: &str) -> bool {
    !w.is_empty() && w.len() <= 10 && w.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `w` is an English month's abbreviation (`Mar`), as Cisco writes its stamps.
fn is_month_word(w: &str) -> bool {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    MONTHS.contains(&w)
}

/// `s` after a Cisco device's stamp and the colon after it (`*Mar  1 00:00:01.123 UTC: `,
/// `.Mar 1 2026 00:00:01: `), or `s` itself when it starts with the mnemonic's `%`; `None`
/// when it starts with neither.
fn after_device_stamp(s: &str) -> Option<&str> {
    if s.starts_with('%') {
        return Some(s);
    }
    let s = s.strip_prefix(['*', '.']).unwrap_or(s);
    let mut words = s.split(' ').filter(|w| !w.is_empty());
    if !is_month_word(words.next()?) {
        return None;
    }
    let day = words.next()?;
    if day.is_empty() || day.len() > 2 || !day.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // The clock (`hh:mm:ss[.fff]`), maybe after a year, then maybe a zone word; the colon
    // ends the last of them.
    let colon = s.find(": %")?;
    let clock = s[..colon]
        .split(' ')
        .filter(|w| !w.is_empty())
        .skip(2)
        .find(|w| w.contains(':'))?;
    let b = clock.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let ok = b.len() >= 8
        && digits(0..2)
        && b[2] == b':'
        && digits(3..5)
        && b[5] == b':'
        && digits(6..8);
    ok.then(|| &s[colon + 2..])
}

/// `%FACILITY-SEVERITY-MNEMONIC: text` (Cisco IOS, ASA, NX-OS: `%LINK-3-UPDOWN`,
/// `%ASA-6-302013`): the mnemonic and the text after it.
fn cisco_mnemonic(s: &str) -> Option<(&str, &str)> {
    let end = s.find(": ").or_else(|| s.strip_suffix(':').map(str::len))?;
    let tag = &s[..end];
    let word = tag.strip_prefix('%')?;
    let parts: Vec<&str> = word.split('-').collect();
    let ok = parts.len() >= 3
        && word
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && parts.iter().all(|p| !p.is_empty())
        && parts[1..parts.len() - 1]
            .iter()
            .any(|p| p.len() == 1 && p.as_bytes()[0].is_ascii_digit());
    ok.then(|| (tag, s.get(end + 2..).unwrap_or("")))
}

/// The fixed offset of a zone word a device writes after its stamp (Cisco's `show-timezone`:
/// `12:00:00.123 UTC:`), for the common abbreviations whose meaning is not in doubt on
/// network equipment (`CST` is taken as US Central); `None` for any other word (`IST`, `BST`,
/// a name of the operator's choosing), which is read in the configured zone.
fn zone_word(word: &str) -> Option<FixedOffset> {
    let hours: f32 = match word {
        "UTC" | "GMT" | "UT" | "Z" | "WET" => 0.0,
        "WEST" | "CET" | "MET" => 1.0,
        "CEST" | "MEST" | "EET" => 2.0,
        "EEST" | "MSK" => 3.0,
        "AWST" | "SGT" | "HKT" => 8.0,
        "JST" | "KST" => 9.0,
        "ACST" => 9.5,
        "AEST" => 10.0,
        "ACDT" => 10.5,
        "AEDT" => 11.0,
        "NZST" => 12.0,
        "NZDT" => 13.0,
        "HST" => -10.0,
        "AKST" => -9.0,
        "AKDT" | "PST" => -8.0,
        "PDT" | "MST" => -7.0,
        "MDT" | "CST" => -6.0,
        "CDT" | "EST" => -5.0,
        "EDT" => -4.0,
        _ => return None,
    };
    FixedOffset::east_opt((hours * 3600.0) as i32)
}

/// A Cisco header as the BSD one it resembles, which syslog_loose reads, and the zone its
/// stamp names when it names a known one ([`zone_word`]):
/// `<189>123: sw1: *Mar  1 00:00:23.123 UTC: %LINK-3-UPDOWN: text` (a sequence number, a
/// host, `*` or `.` for a clock not in sync, a colon after the stamp, a zone word) becomes
/// `<189>Mar  1 00:00:23.123 sw1 %LINK-3-UPDOWN: text` (in UTC);
/// `<189>Mar  1 18:46:11 sw1 123: %LINK-3-UPDOWN: text` (a sequence number as the tag)
/// becomes `<189>Mar  1 18:46:11 sw1 %LINK-3-UPDOWN: text`; NX-OS's year first
/// (`<190>sw1: 2017 Jul 28 14:42:46 UTC: %AUTHPRIV-6-SYSTEM_MSG: text`, or `<187>: 2005 ...`
/// with neither number nor host) becomes `Jul 28 2017 14:42:46`; ASA's device id after the
/// stamp (`<166>Jan 10 2024 12:00:01 asa01 : %ASA-6-302014: text`) is the host. The
/// mnemonic is the app. `None` for any other line (a PRI is required).
fn cisco_header(text: &str) -> Option<(String, Option<FixedOffset>)> {
    let body = after_pri(text)?;
    let pri = &text[..text.len() - body.len()];
    // (Every line is looked at: one without a mnemonic's `%` is passed over at once.)
    if pri.is_empty() || !body.as_bytes().contains(&b'%') {
        return None;
    }
    let word_colon = |s: &str| -> Option<usize> {
        let i = s.find(": ")?;
        (i > 0 && !s[..i].contains([' ', '\t'])).then_some(i)
    };
    // A BSD header whose tag is a sequence number before the mnemonic.
    let numbered = |start: usize| -> Option<String> {
        let after = &text[start + 15..];
        let frac = after
            .strip_prefix('.')
            .map_or(0, |f| 1 + f.bytes().take_while(u8::is_ascii_digit).count());
        let rest = after[frac..].strip_prefix(' ')?;
        let host_end = rest.find(' ')?;
        let tail = &rest[host_end + 1..];
        let seq = word_colon(tail).filter(|&i| is_cisco_seq(&tail[..i]))?;
        cisco_mnemonic(&tail[seq + 2..])?;
        Some(format!(
            "{}{}",
            &text[..text.len() - tail.len()],
            &tail[seq + 2..]
        ))
    };
    // (Else a stamp first may still be Cisco's: `Mar  1 00:00:23.123 UTC: %...`, with no
    // sequence number or host before it, or ASA's `Jan 10 12:00:01 asa01 : %...`.)
    if let Some(numbered) = bsd_stamp(text).and_then(numbered) {
        return Some((numbered, None));
    }
    // NX-OS writes `<PRI>: ` when it sends neither sequence number nor host.
    let mut rest = body.strip_prefix(": ").unwrap_or(body);
    if let Some(i) = word_colon(rest).filter(|&i| is_cisco_seq(&rest[..i])) {
        rest = &rest[i + 2..];
    }
    let month = |s: &str| s.len() > 3 && s.as_bytes()[..3].iter().all(u8::is_ascii_alphabetic);
    let year_first = |s: &str| {
        let b = s.as_bytes();
        b.len() > 9 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b' ' && month(&s[5..])
    };
    let mut host = None;
    if let Some(i) = word_colon(rest)
        && !rest.starts_with(['*', '.', '%'])
        && !(month(rest) && rest.as_bytes().get(3) == Some(&b' '))
        && !year_first(rest)
    {
        host = Some(&rest[..i]);
        rest = &rest[i + 2..];
    }
    let rest = rest.strip_prefix(['*', '.']).unwrap_or(rest);
    // `yyyy Mmm dd ...` (NX-OS) as `Mmm dd yyyy ...` (IOS), which syslog_loose reads.
    let reordered;
    let rest = if year_first(rest) && rest.len() > 11 && rest.as_bytes()[11] == b' ' {
        reordered = format!("{} {}{}", &rest[5..11], &rest[..4], &rest[11..]);
        reordered.as_str()
    } else {
        rest
    };
    // `Mmm dd [yyyy ]hh:mm:ss[.fff]`, then a zone word and `: %`, `: %`, or (ASA's device
    // id) a host and ` : %` or `: %`.
    let b = rest.as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    if !(month(rest)
        && b[3] == b' '
        && (b.get(4) == Some(&b' ') || digit(4))
        && digit(5)
        && b.get(6) == Some(&b' '))
    {
        return None;
    }
    let mut i = 7;
    if (7..11).all(digit) && b.get(11) == Some(&b' ') {
        i = 12;
    }
    let clock = digit(i)
        && digit(i + 1)
        && b.get(i + 2) == Some(&b':')
        && digit(i + 3)
        && digit(i + 4)
        && b.get(i + 5) == Some(&b':')
        && digit(i + 6)
        && digit(i + 7);
    if !clock {
        return None;
    }
    let mut end = i + 8;
    if b.get(end) == Some(&b'.') {
        end += 1 + b[end + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
    }
    let mut zone = None;
    let after = match rest[end..].strip_prefix(": ") {
        Some(after) => after,
        None => {
            let z = rest[end..].strip_prefix(' ')?;
            // (The word may hold colons: an IPv6 device id, `2001:db8::1: %ASA-...`.)
            let (word, spaced, after) = match (z.find(" : %"), z.find(": %")) {
                (Some(i), Some(j)) if i < j => (&z[..i], true, &z[i + 3..]),
                (_, Some(j)) => (&z[..j], false, &z[j + 2..]),
                (Some(i), None) => (&z[..i], true, &z[i + 3..]),
                (None, None) => return None,
            };
            if word.is_empty() || word.contains([' ', '\t']) {
                return None;
            }
            // A zone word (IOS's `show-timezone`) stands where ASA writes its device id:
            // a word of letters is a zone when the host came before the stamp, or when it is
            // one a zone is spelt as; anything else there is the host.
            let letters =
                (1..=5).contains(&word.len()) && word.bytes().all(|c| c.is_ascii_alphabetic());
            let known = zone_word(word);
            if !spaced
                && (known.is_some()
                    || (letters
                        && (host.is_some() || word.bytes().all(|c| c.is_ascii_uppercase()))))
            {
                zone = known;
            } else if host.is_none() {
                host = Some(word);
            } else {
                return None;
            }
            after
        }
    };
    cisco_mnemonic(after)?;
    let host = host.map(|h| format!(" {h}")).unwrap_or_default();
    Some((format!("{pri}{}{host} {after}", &rest[..end]), zone))
}

/// `text` with `- ` (no structured data) before its STRUCTURED-DATA field when it is an RFC
/// 5424 line (`<PRI>1 ` and five header fields) whose structured data opens (`[`) and is never
/// closed: no `]` follows. `None` otherwise.
fn unclosed_sd(text: &str) -> Option<String> {
    let at = sd_field(text)?;
    let sd = &text[at..];
    (sd.starts_with('[') && !sd.contains(']')).then(|| format!("{}- {sd}", &text[..at]))
}

/// A line that starts with a valid PRI but has no parsable header: kept with the PRI's
/// facility and severity, the rest as `msg`, and the arrival as its time.
fn pri_only(text: &str, arrival: Timestamp) -> Option<Event> {
    let (digits, body) = split_pri(text)?;
    let pri: i64 = digits.parse().ok()?;
    if pri > 191 {
        return None;
    }
    let msg = body.trim();
    if msg.is_empty() {
        return None;
    }
    let ev = Event::new(Source::Syslog, arrival, arrival)
        .with(Field::Facility, Value::Int(pri / 8))
        .with(Field::Severity, Value::Int(pri % 8));
    // A Cisco message without a stamp (`123: %SYS-5-CONFIG_I: ...`, `%ASA-6-302013: ...`):
    // its mnemonic is the app.
    let seq = msg
        .find(": ")
        .filter(|&i| i <= 10 && msg[..i].bytes().all(|b| b.is_ascii_digit()))
        .map_or(0, |i| i + 2);
    Some(match cisco_mnemonic(&msg[seq..]) {
        Some((app, text)) => ev
            .with(Field::App, Value::str(app))
            .with(Field::Msg, Value::str(text.trim())),
        None => match bare_tag(msg) {
            // `<30>dnsmasq[12]: query ...` as busybox and some routers send it: the tag
            // is read as after a header (syslog-ng and rsyslog do the same).
            Some((app, procid, text)) => {
                let ev = ev
                    .with(Field::App, Value::str(app))
                    .with(Field::Msg, Value::str(text));
                match procid {
                    Some(p) => ev.with(Field::Procid, Value::str(p)),
                    None => ev,
                }
            }
            None => ev.with(Field::Msg, Value::str(msg)),
        },
    })
}

/// The RFC 3164 tag that starts a message with no header (`app: text`, `app[pid]: text`):
/// the app, its process id and the text after the colon. `None` when the first word is no
/// tag (spaces or other characters before the colon, no blank after it: `12:30:00 up`, only
/// digits: a Cisco sequence number).
fn bare_tag(msg: &str) -> Option<(&str, Option<&str>, &str)> {
    let end = msg.find([':', '['])?;
    let app = &msg[..end];
    let tag_char = |b: u8| b.is_ascii_alphanumeric() || b"-_./@".contains(&b);
    // All digits: a Cisco sequence number (`12: text`), not a tag.
    if app.len() > 48 || !app.bytes().all(tag_char) || app.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut rest = &msg[end..];
    let mut procid = None;
    if let Some(r) = rest.strip_prefix('[') {
        let close = r.find(']')?;
        let p = &r[..close];
        if p.is_empty() || p.len() > 128 || p.bytes().any(|b| b.is_ascii_whitespace()) {
            return None;
        }
        procid = Some(p);
        rest = &r[close + 1..];
    }
    let rest = rest.strip_prefix(':')?;
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    Some((app, procid, rest.trim()))
}

/// A UTC wall clock as a [`Timestamp`], or malformed when out of range.
fn to_timestamp(utc: NaiveDateTime) -> Result<Timestamp, Malformed> {
    utc.and_utc()
        .timestamp_nanos_opt()
        .map(Timestamp)
        .ok_or_else(|| Malformed::TimeOutOfRange(utc.to_string()))
}

/// A [`Timestamp`] as a UTC wall clock (always in range: i64 nanoseconds fit chrono).
fn naive_utc(t: Timestamp) -> NaiveDateTime {
    DateTime::<Utc>::from_timestamp_nanos(t.as_nanos()).naive_utc()
}

/// The latest year up to `y` that has this day (`y` itself but for a 29 February: the leap
/// year before).
fn last_year_with(y: i32, month: u32, day: u32) -> Option<i32> {
    (y.saturating_sub(4)..=y)
        .rev()
        .find(|&cand| NaiveDate::from_ymd_opt(cand, month, day).is_some())
}

/// The year of a year-less stamp (see the module docs for the rule and its sources).
fn resolve_year(
    year: Year,
    zone: Zone,
    arrival_utc: NaiveDateTime,
    (month, day, hour, minute, second): IncompleteDate,
) -> i32 {
    match year {
        // A 29 February in a year without one (a log of 2024 replayed with `--year 2023`)
        // goes to the leap year before, as a resolved one does: the line is kept.
        Year::Fixed(y) => last_year_with(y, month, day).unwrap_or(y),
        Year::Follow => {
            let latest = zone.wall_clock(arrival_utc);
            let y = latest.year();
            let at = |cand: i32| {
                NaiveDate::from_ymd_opt(cand, month, day)
                    .and_then(|d| d.and_hms_opt(hour, minute, second))
            };
            // Near: within half a year (one of the three is, but for a 29 February).
            const HALF_YEAR: u64 = 183 * 86_400;
            (y - 1..=y + 1)
                .filter_map(|cand| {
                    let off = (at(cand)? - latest).num_seconds().unsigned_abs();
                    (off <= HALF_YEAR).then_some((off, cand))
                })
                .min()
                .map(|(_, cand)| cand)
                // A 29 February with no leap year near: the last one before (kept, and as it
                // lies back it moves nothing).
                .or_else(|| last_year_with(y, month, day))
                .unwrap_or(y)
        }
        Year::Resolve => {
            let now = zone.wall_clock(arrival_utc);
            let y = now.year();
            // syslog-ng's and rsyslog's rule, whatever the day: a January stamp received in
            // December is next year's.
            if now.month() == 12 && month == 1 {
                return y + 1;
            }
            let limit = now + chrono::Duration::days(FUTURE_SLACK_DAYS);
            // Down to y − 4: only a 29 February needs more than y − 1 (the last leap year).
            (y - 4..=y + 1)
                .rev()
                .find(|&cand| {
                    NaiveDate::from_ymd_opt(cand, month, day)
                        .and_then(|d| d.and_hms_opt(hour, minute, second))
                        .is_some_and(|stamp| stamp <= limit)
                })
                .unwrap_or(y)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn squeeze(text: &str) -> Option<String> {
        bsd_stamp(text).and_then(|s| squeeze_bsd_header(text, s, 15))
    }

    fn strip_fraction(text: &str) -> Option<(String, i64)> {
        bsd_stamp(text).and_then(|s| strip_bsd_fraction(text, s, 15))
    }

    fn at(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn get(e: &Event, f: Field) -> Option<&str> {
        e.get(f).and_then(Value::as_str)
    }

    /// The text of structured-data field `k` (`sd.<id>.<param>`).
    fn sd(e: &Event, k: &str) -> Option<String> {
        e.get_key(&FieldKey::Named(Arc::from(k)))
            .map(|v| v.to_string())
    }

    #[test]
    fn structured_data_values_keep_backslashes_rfc_5424_does_not_escape() {
        let p = SyslogParser::default();
        let e = p
            .parse(
                br#"<14>1 2024-06-01T12:00:00Z h app 1 ID [ex@1 a="C:\new\temp" q="say \"hi\"" b="x\]y" s="a\\b"] m"#,
                at("2024-06-02T00:00:00Z"),
                None,
            )
            .unwrap();
        assert_eq!(sd(&e, "sd.ex@1.a").as_deref(), Some(r"C:\new\temp"));
        assert_eq!(sd(&e, "sd.ex@1.q").as_deref(), Some(r#"say "hi""#));
        assert_eq!(sd(&e, "sd.ex@1.b").as_deref(), Some("x]y"));
        assert_eq!(sd(&e, "sd.ex@1.s").as_deref(), Some(r"a\b"));
    }

    /// RFC 5424 (6.3.3) lets a parameter be written more than once in an element (`origin`'s
    /// `ip`, one per address, 7.2.1): the field keeps every value, in the order written, joined
    /// by `,`, a value written again once; an SD-ID written twice (which RFC 5424 forbids) is
    /// read the same way.
    #[test]
    fn a_repeated_structured_data_parameter_keeps_every_value() {
        let p = SyslogParser::default();
        let e = p
            .parse(
                br#"<14>1 2024-06-01T12:00:00Z h app 1 ID [origin ip="10.0.0.1" ip="192.0.2.7" software="x"][x@1 a="1" b="2" a="2" a="1" a="3"][x@1 a="4" c="5"] m"#,
                at("2024-06-02T00:00:00Z"),
                None,
            )
            .unwrap();
        assert_eq!(
            sd(&e, "sd.origin.ip").as_deref(),
            Some("10.0.0.1,192.0.2.7")
        );
        assert_eq!(sd(&e, "sd.origin.software").as_deref(), Some("x"));
        assert_eq!(sd(&e, "sd.x@1.a").as_deref(), Some("1,2,3,4"));
        assert_eq!(sd(&e, "sd.x@1.b").as_deref(), Some("2"));
        assert_eq!(sd(&e, "sd.x@1.c").as_deref(), Some("5"));
        assert_eq!(get(&e, Field::Msg), Some("m"));
    }

    /// An SD bomb (thousands of tiny parameters) gives at most MAX_SD_FIELDS fields, the
    /// first written; a parameter already taken still gathers its values; the message is read.
    #[test]
    fn structured_data_gives_at_most_max_sd_fields_fields() {
        let p = SyslogParser::default();
        let params: String = (0..1000).map(|i| format!(" p{i}=\"v\"")).collect();
        let line = format!("<14>1 2024-06-01T12:00:00Z h app 1 ID [x@1{params} p0=\"w\"] m");
        let e = p
            .parse(line.as_bytes(), at("2024-06-02T00:00:00Z"), None)
            .unwrap();
        let n = |e: &Event| {
            e.to_json()
                .as_object()
                .map_or(0, |o| o.keys().filter(|k| k.starts_with("sd.")).count())
        };
        assert_eq!(n(&e), MAX_SD_FIELDS);
        assert_eq!(sd(&e, "sd.x@1.p0").as_deref(), Some("v,w"));
        assert_eq!(
            sd(&e, &format!("sd.x@1.p{}", MAX_SD_FIELDS - 1)).as_deref(),
            Some("v")
        );
        assert_eq!(sd(&e, &format!("sd.x@1.p{MAX_SD_FIELDS}")), None);
        assert_eq!(get(&e, Field::Msg), Some("m"));
    }

    /// A byte-order mark before the PRI, or right after it, is no part of the message: the
    /// header after it is read (the live agent dropped such a datagram as malformed).
    #[test]
    fn a_byte_order_mark_before_the_header_is_skipped() {
        let p = SyslogParser::default();
        let now = at("2026-03-02T00:00:00Z");
        for line in [
            &b"\xEF\xBB\xBF<38>Mar  1 00:00:01 web-1 sshd[3]: bom"[..],
            b"<38>\xEF\xBB\xBFMar  1 00:00:01 web-1 sshd[3]: bom",
            b"\xEF\xBB\xBF\xEF\xBB\xBF<38>\xEF\xBB\xBFMar  1 00:00:01 web-1 sshd[3]: bom",
        ] {
            let e = p.parse(line, now, None).unwrap();
            assert_eq!(get(&e, Field::Host), Some("web-1"), "{line:?}");
            assert_eq!(get(&e, Field::App), Some("sshd"), "{line:?}");
            assert_eq!(get(&e, Field::Msg), Some("bom"), "{line:?}");
            assert_eq!(e.time, at("2026-03-01T00:00:01Z"), "{line:?}");
        }
    }

    /// Structured data that is not RFC 5424's (ESXi's values without quotes) stays in the
    /// MSG, as rsyslog and syslog-ng keep it: it vanished, and no rule could see it.
    #[test]
    fn structured_data_that_gives_no_parameter_stays_in_the_message() {
        let p = SyslogParser::default();
        let now = at("2026-03-02T00:00:00Z");
        let e = p
            .parse(
                b"<166>1 2026-03-01T00:00:01.123Z esxi1 Hostd - - [Originator@6876 sub=Vimsvc.TaskManager opID=abc] Task Created",
                now,
                None,
            )
            .unwrap();
        assert_eq!(get(&e, Field::App), Some("Hostd"));
        assert_eq!(get(&e, Field::Host), Some("esxi1"));
        assert_eq!(
            get(&e, Field::Msg),
            Some("[Originator@6876 sub=Vimsvc.TaskManager opID=abc] Task Created")
        );
        let e = p
            .parse(b"<14>1 2026-03-01T00:00:01Z h a - - [id@1 k=v]", now, None)
            .unwrap();
        assert_eq!(get(&e, Field::Msg), Some("[id@1 k=v]"));
        let e = p
            .parse(
                b"<14>1 2026-03-01T00:00:01Z  h a - - [id@1 k=v] x",
                now,
                None,
            )
            .unwrap();
        assert_eq!(get(&e, Field::Msg), Some("[id@1 k=v] x"));
        // Well-formed structured data, and none (`-`), are read as before.
        let e = p
            .parse(
                b"<14>1 2026-03-01T00:00:01Z h a - - [id@1 k=\"v\"] text",
                now,
                None,
            )
            .unwrap();
        assert_eq!(get(&e, Field::Msg), Some("text"));
        assert_eq!(sd(&e, "sd.id@1.k").as_deref(), Some("v"));
        let e = p
            .parse(
                b"<14>1 2026-03-01T00:00:01Z h a - - - [not sd] text",
                now,
                None,
            )
            .unwrap();
        assert_eq!(get(&e, Field::Msg), Some("[not sd] text"));
        // One element of several that is not RFC 5424's keeps them all in the MSG, before or
        // after a well-formed one (whose parameters are still read); several well-formed ones,
        // a `]` in a quoted value among them, are read as such.
        for (line, msg) in [
            (
                &b"<14>1 2026-03-01T00:00:01Z h a - - [id@1 k=\"v\"][b y=2] text"[..],
                "[id@1 k=\"v\"][b y=2] text",
            ),
            (
                b"<14>1 2026-03-01T00:00:01Z h a - - [b y=2][id@1 k=\"v\"] text",
                "[b y=2][id@1 k=\"v\"] text",
            ),
            (
                b"<14>1 2026-03-01T00:00:01Z h a - - [id@1 k=\"v\"][b y=\"a]\\\"b\"] text",
                "text",
            ),
        ] {
            let e = p.parse(line, now, None).unwrap();
            let text = String::from_utf8_lossy(line);
            assert_eq!(get(&e, Field::Msg), Some(msg), "{text}");
            assert_eq!(sd(&e, "sd.id@1.k").as_deref(), Some("v"), "{text}");
        }
        // Well-formed structured data and no MSG (RFC 5424's example 4): an empty message.
        let e = p
            .parse(
                b"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"][examplePriority@32473 class=\"high\"]",
                now,
                None,
            )
            .unwrap();
        assert_eq!(get(&e, Field::Msg), Some(""));
        assert_eq!(
            sd(&e, "sd.examplePriority@32473.class").as_deref(),
            Some("high")
        );
    }

    /// A Cisco message relayed in rsyslog's RFC 5424 or BSD header: the mnemonic is the app
    /// (the relay took the sequence number, or the stamp's first word, for it).
    #[test]
    fn a_relayed_cisco_message_keeps_its_mnemonic_as_the_app() {
        let p = SyslogParser::new(Zone::default(), Year::Fixed(2026));
        let now = at("2026-12-06T02:00:00Z");
        for line in [
            "<189>1 2026-12-06T01:52:22Z sw1 123 - - - *Mar  1 00:00:01.123: %LINK-3-UPDOWN: Interface Gi0/1, changed state to down",
            "<189>Dec  6 01:52:22 sw1 123: *Mar  1 00:00:01.123: %LINK-3-UPDOWN: Interface Gi0/1, changed state to down",
            "<189>Dec  6 01:52:22 sw1 *Mar  1 00:00:01.123: %LINK-3-UPDOWN: Interface Gi0/1, changed state to down",
            "<189>1 2026-12-06T01:52:22Z sw1 - - - - Mar  1 2026 00:00:01 UTC: %LINK-3-UPDOWN: Interface Gi0/1, changed state to down",
            "<189>1 2026-12-06T01:52:22Z sw1 4711 - - - %LINK-3-UPDOWN: Interface Gi0/1, changed state to down",
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::App), Some("%LINK-3-UPDOWN"), "{line}");
            assert_eq!(
                get(&e, Field::Msg),
                Some("Interface Gi0/1, changed state to down"),
                "{line}"
            );
            assert_eq!(get(&e, Field::Host), Some("sw1"), "{line}");
            assert_eq!(e.time, at("2026-12-06T01:52:22Z"), "{line}");
        }
        // Not Cisco's: left as read.
        for (line, app) in [
            ("<13>1 2026-12-06T01:52:22Z h 123 - - - 50% done: %x", "123"),
            (
                "<13>1 2026-12-06T01:52:22Z h cron - - - Mar  1 00:00:01: %LINK-3-UPDOWN: x",
                "cron",
            ),
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::App), Some(app), "{line}");
        }
    }

    #[test]
    fn plain_file_line_without_pri() {
        let p = SyslogParser::default();
        let e = p
            .parse(
                b"Dec 10 06:55:46 LabSZ sshd[24200]: Invalid user webmaster from 173.234.31.186\r\n",
                at("2026-12-20T00:00:00Z"),
                None,
            )
            .unwrap();
        assert_eq!(e.time, at("2026-12-10T06:55:46Z"));
        assert_eq!(get(&e, Field::Host), Some("LabSZ"));
        assert_eq!(get(&e, Field::App), Some("sshd"));
        assert_eq!(get(&e, Field::Procid), Some("24200"));
        assert_eq!(
            get(&e, Field::Msg),
            Some("Invalid user webmaster from 173.234.31.186")
        );
        assert_eq!(e.get(Field::Facility), None);
        assert_eq!(e.get(Field::Severity), None);
    }

    #[test]
    fn blanks_in_a_bsd_header_keep_host_and_tag() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        for line in [
            "<13>Feb 13 20:07:26  h  a:  x  y",
            "<13>Feb 13 20:07:26 h  a: x  y",
            "<13>Feb 13 20:07:26\th\ta: x  y",
            "Feb  3 20:07:26 h   a[12]: x  y",
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::Host), Some("h"), "{line}");
            assert_eq!(get(&e, Field::App), Some("a"), "{line}");
            assert!(
                get(&e, Field::Msg).is_some_and(|m| m.ends_with("x  y")),
                "{line}"
            );
        }
        // Already tidy, or not a host and a tag: left alone.
        assert_eq!(squeeze("<13>Feb 13 20:07:26 h a: x"), None);
        assert_eq!(squeeze("<13>Feb 13 20:07:26 one  two three: x"), None);
        assert_eq!(squeeze("<13>1 2026-02-13T20:07:26Z h a - - - x"), None);
        // No tag: the text is left to the parser as it was.
        for line in [
            "<13>Feb 13 20:07:26  12:34 something",
            "<13>Feb 13 20:07:26  h  http://x",
            "<13>Feb 13 20:07:26  fe80::1  a: x",
        ] {
            assert_eq!(squeeze(line), None, "{line}");
        }
    }

    #[test]
    fn an_rfc5424_msg_keeps_its_leading_spaces() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        for (line, want) in [
            (
                "<13>1 2026-02-13T20:07:26Z h a - - -   at Foo.bar()",
                "  at Foo.bar()",
            ),
            (
                "<13>1 2026-02-13T20:07:26Z h a - - [x@1 k=\"v\"]  two",
                " two",
            ),
            ("<13>1 2026-02-13T20:07:26Z h a - - - one", "one"),
            ("<13>1 2026-02-13T20:07:26Z h a - - - \u{feff}bom", "bom"),
            // RFC 3164 content keeps the usual reading: the blanks after the tag go.
            ("<13>Feb 13 20:07:26 h a:   x", "x"),
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::Msg), Some(want), "{line}");
        }
        // Nothing but blanks after the structured data: no MSG to speak of.
        let e = p
            .parse(b"<13>1 2026-02-13T20:07:26Z h a - - -    ", now, None)
            .unwrap();
        assert_eq!(get(&e, Field::Msg), Some(""));
    }

    /// Structured data that is never closed costs the line its structured data, not its
    /// header: host, app, procid and msgid stay, the rest is the message.
    #[test]
    fn unclosed_structured_data_keeps_the_header() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        let e = p
            .parse(
                b"<13>1 2024-03-01T00:00:00Z host1 app1 12 ID1 [bad sd no close msg",
                now,
                None,
            )
            .unwrap();
        assert_eq!(get(&e, Field::Host), Some("host1"));
        assert_eq!(get(&e, Field::App), Some("app1"));
        assert_eq!(get(&e, Field::Procid), Some("12"));
        assert_eq!(get(&e, Field::Msgid), Some("ID1"));
        assert_eq!(get(&e, Field::Msg), Some("[bad sd no close msg"));
        // Runs of spaces between the header's fields too (as the parser reads them).
        let e = p
            .parse(
                b"<13>1 2024-03-01T00:00:00Z  host1 app1  12 ID1 [bad sd",
                now,
                None,
            )
            .unwrap();
        assert_eq!(get(&e, Field::Host), Some("host1"));
        assert_eq!(get(&e, Field::Msgid), Some("ID1"));
        assert_eq!(get(&e, Field::Msg), Some("[bad sd"));
        // Closed, it is structured data as before.
        let e = p
            .parse(
                b"<13>1 2024-03-01T00:00:00Z host1 app1 12 ID1 [a@1 k=\"v\"] hi",
                now,
                None,
            )
            .unwrap();
        assert_eq!(get(&e, Field::Msg), Some("hi"));
        assert_eq!(unclosed_sd("<13>1 2024-03-01T00:00:00Z h a - - - [x"), None);
        assert_eq!(unclosed_sd("<13>Feb 13 20:07:26 h a: [x"), None);
    }

    #[test]
    fn a_message_starting_with_a_dash_keeps_it() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        for (line, want) in [
            (
                "Dec 10 10:00:00 h kernel: ------------[ cut here ]------------",
                "------------[ cut here ]------------",
            ),
            ("Dec 10 10:00:00 h kernel: -EIO", "-EIO"),
            ("<13>Dec 10 10:00:00 h app[12]: - x", "- x"),
            ("Dec 10 10:00:00 h app: x - y", "x - y"),
            (
                "Jul  7 08:06:15 combo  -- root[2421]: ROOT LOGIN ON tty2",
                "-- root[2421]: ROOT LOGIN ON tty2",
            ),
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::Msg), Some(want), "{line}");
        }
    }

    #[test]
    fn a_host_before_a_nil_tag_is_kept() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        for line in [
            "Jul  7 08:06:15 combo - x y",
            "<13>Jul  7 08:06:15 combo - x y",
            "Jul  7 08:06:15 combo -: x y",
            "<13>2024-07-07T08:06:15Z combo - x y",
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::Host), Some("combo"), "{line}");
            assert_eq!(get(&e, Field::App), None, "{line}");
            assert_eq!(get(&e, Field::Msg), Some("x y"), "{line}");
        }
        // A tag that merely starts with `-` is a tag.
        let e = p.parse(b"Jul  7 08:06:15 combo -x y", now, None).unwrap();
        assert_eq!(get(&e, Field::Host), Some("combo"));
        assert_eq!(get(&e, Field::App), Some("-x"));
    }

    #[test]
    fn a_dual_stack_peer_is_its_ipv4_address() {
        let p = SyslogParser::default();
        let peer: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        let e = p
            .parse(
                b"<13>Feb 13 20:07:26 h a: x",
                at("2026-12-20T00:00:00Z"),
                Some(peer),
            )
            .unwrap();
        assert_eq!(
            e.get(Field::Peer),
            Some(&Value::Ip(IpAddr::from([10, 0, 0, 7])))
        );
    }

    /// A message received without a hostname is its sender's (as rsyslog and syslog-ng fill
    /// it); one with a hostname keeps it, and a line of a file (no sender) has none.
    #[test]
    fn a_message_without_a_hostname_is_its_senders() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        let peer: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        for line in [
            &b"<14>heartbeat: alive"[..],
            b"<14>1 2026-12-19T23:59:00Z - heartbeat - - - alive",
        ] {
            let e = p.parse(line, now, Some(peer)).unwrap();
            let text = String::from_utf8_lossy(line);
            assert_eq!(get(&e, Field::Host), Some("10.0.0.7"), "{text}");
            assert_eq!(get(&e, Field::App), Some("heartbeat"), "{text}");
            let e = p.parse(line, now, None).unwrap();
            assert_eq!(e.get(Field::Host), None, "{text}");
        }
        let e = p
            .parse(b"<13>Feb 13 20:07:26 h a: x", now, Some(peer))
            .unwrap();
        assert_eq!(get(&e, Field::Host), Some("h"));
    }

    /// A message received without a PRI is `user.notice` (facility 1, severity 5), as RFC
    /// 3164 has a relay assign it; a line of a file without one has neither, and a PRI sent
    /// is kept.
    #[test]
    fn a_message_received_without_a_pri_is_user_notice() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        let peer: IpAddr = "10.0.0.7".parse().unwrap();
        let line = &b"Feb 13 20:07:26 h sshd[1]: x"[..];
        let e = p.parse(line, now, Some(peer)).unwrap();
        assert_eq!(e.get(Field::Facility), Some(&Value::Int(1)));
        assert_eq!(e.get(Field::Severity), Some(&Value::Int(5)));
        assert_eq!(get(&e, Field::App), Some("sshd"));
        let e = p.parse(line, now, None).unwrap();
        assert_eq!(e.get(Field::Facility), None);
        assert_eq!(e.get(Field::Severity), None);
        let e = p
            .parse(b"<11>Feb 13 20:07:26 h sshd[1]: x", now, Some(peer))
            .unwrap();
        assert_eq!(e.get(Field::Severity), Some(&Value::Int(3)));
        assert_eq!(e.get(Field::Facility), Some(&Value::Int(1)));
    }

    #[test]
    fn a_pri_above_191_gives_no_severity() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        for line in [
            "<192>Feb 13 20:07:26 h a: x",
            "<199>Feb 13 20:07:26 h a: x",
            "<255>1 2026-02-13T20:07:26Z h a - - - x",
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(e.get(Field::Severity), None, "{line}");
            assert_eq!(e.get(Field::Facility), None, "{line}");
            assert_eq!(get(&e, Field::Host), Some("h"), "{line}");
        }
        let e = p.parse(b"<191>Feb 13 20:07:26 h a: x", now, None).unwrap();
        assert_eq!(e.get(Field::Severity), Some(&Value::Int(7)));
        assert_eq!(e.get(Field::Facility), Some(&Value::Int(23)));
    }

    #[test]
    fn bsd_stamps_with_fractional_seconds_keep_their_header() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        for (line, time) in [
            (
                "<13>Dec  2 05:40:00.123 host4 app4: with ms",
                "2026-12-02T05:40:00.123Z",
            ),
            (
                "Dec 12 05:40:00.000001 host4 app4: with ms",
                "2026-12-12T05:40:00.000001Z",
            ),
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::Host), Some("host4"), "{line}");
            assert_eq!(get(&e, Field::App), Some("app4"), "{line}");
            assert_eq!(get(&e, Field::Msg), Some("with ms"), "{line}");
            assert_eq!(e.time, at(time), "{line}");
        }
        // A stamp with a year keeps its fraction too.
        let e = SyslogParser::new(Zone::default(), Year::Fixed(2024))
            .parse(
                b"<13>Jan 10 2024 12:00:00.456 host app: x",
                at("2024-06-01T00:00:00Z"),
                None,
            )
            .unwrap();
        assert_eq!(e.time, at("2024-01-10T12:00:00.456Z"));
        assert_eq!(get(&e, Field::Host), Some("host"));
        assert_eq!(get(&e, Field::Msg), Some("x"));
        // With a blank after the PRI, or runs of blanks in the header, as a stamp without a
        // year is read.
        for line in [
            "<13> Jan 10 2024 12:00:00.456 host app: x",
            "<13>Jan 10 2024 12:00:00.456  host  app: x",
        ] {
            let e = SyslogParser::new(Zone::default(), Year::Fixed(2024))
                .parse(line.as_bytes(), at("2024-06-01T00:00:00Z"), None)
                .unwrap();
            assert_eq!(e.time, at("2024-01-10T12:00:00.456Z"), "{line}");
            assert_eq!(get(&e, Field::Host), Some("host"), "{line}");
            assert_eq!(get(&e, Field::App), Some("app"), "{line}");
            assert_eq!(get(&e, Field::Msg), Some("x"), "{line}");
        }
        // Not a stamp's fraction: left alone.
        assert_eq!(strip_fraction("<13>Dec  2 05:40:00 h a: 1.5 s"), None);
        assert_eq!(
            strip_fraction("<13>1 2026-12-02T05:40:00.1Z h a - - - x"),
            None
        );
    }

    /// Cisco IOS, ASA and NX-OS headers: a sequence number, a host, `*` for a clock not in
    /// sync, a colon after the stamp, a zone word, and the `%FAC-SEV-MNEMONIC` the app;
    /// without a stamp the mnemonic is still the app (the time is the arrival).
    #[test]
    fn cisco_headers_give_their_stamp_host_and_mnemonic() {
        let p = SyslogParser::new(Zone::default(), Year::Fixed(2024));
        let arrival = at("2024-06-01T00:00:00Z");
        let cases: &[(&str, &str, Option<&str>, &str, &str)] = &[
            (
                "<189>123: *Mar  1 00:00:23.123: %LINK-3-UPDOWN: Interface Fa0/1, changed state to up",
                "2024-03-01T00:00:23.123Z",
                None,
                "%LINK-3-UPDOWN",
                "Interface Fa0/1, changed state to up",
            ),
            (
                "<189>4711: router1: *Mar  1 00:00:23.123 UTC: %SYS-5-CONFIG_I: Configured from console",
                "2024-03-01T00:00:23.123Z",
                Some("router1"),
                "%SYS-5-CONFIG_I",
                "Configured from console",
            ),
            (
                "<190>01: Mar  1 01:00:00.223: %SEC-6-IPACCESSLOGP: list 101 denied tcp",
                "2024-03-01T01:00:00.223Z",
                None,
                "%SEC-6-IPACCESSLOGP",
                "list 101 denied tcp",
            ),
            (
                "<189>Mar  1 18:46:11 sw1.example.com 123: %LINK-3-UPDOWN: Interface Gi0/1",
                "2024-03-01T18:46:11Z",
                Some("sw1.example.com"),
                "%LINK-3-UPDOWN",
                "Interface Gi0/1",
            ),
            (
                "<189>.Mar 15 2024 08:00:01: %OSPF-5-ADJCHG: Process 1, Nbr 10.0.0.2",
                "2024-03-15T08:00:01Z",
                None,
                "%OSPF-5-ADJCHG",
                "Process 1, Nbr 10.0.0.2",
            ),
            // A year and a fraction together keep the fraction.
            (
                "<189>123: *Jan 10 2024 12:00:00.123: %SYS-5-CONFIG_I: Configured",
                "2024-01-10T12:00:00.123Z",
                None,
                "%SYS-5-CONFIG_I",
                "Configured",
            ),
            // NX-OS: the year first, with a host or with `<PRI>: ` and neither number nor host.
            (
                "<190>sw01.pdx01: 2017 Jul 28 14:42:46 UTC: %AUTHPRIV-6-SYSTEM_MSG: pam_unix(dcos_sshd:session): session opened",
                "2017-07-28T14:42:46Z",
                Some("sw01.pdx01"),
                "%AUTHPRIV-6-SYSTEM_MSG",
                "pam_unix(dcos_sshd:session): session opened",
            ),
            (
                "<187>: 2005 Sep 04 18:18:22 UTC: %AUTHPRIV-3-SYSTEM_MSG: ttyS1: togetattr: error",
                "2005-09-04T18:18:22Z",
                None,
                "%AUTHPRIV-3-SYSTEM_MSG",
                "ttyS1: togetattr: error",
            ),
            // IOS with no sequence number nor host, its clock in sync (no `*`): the zone.
            (
                "<189>Mar  1 00:00:23.123 UTC: %LINK-3-UPDOWN: Interface Gi0/2",
                "2024-03-01T00:00:23.123Z",
                None,
                "%LINK-3-UPDOWN",
                "Interface Gi0/2",
            ),
            // ASA with its device id (a name or an address) after the stamp, with a year or
            // without.
            (
                "<166>Jan 10 12:00:01 asa01 : %ASA-6-302014: Teardown",
                "2024-01-10T12:00:01Z",
                Some("asa01"),
                "%ASA-6-302014",
                "Teardown",
            ),
            (
                "<166>Jan 10 2024 12:00:01 asa01 : %ASA-6-302014: Teardown TCP connection 123",
                "2024-01-10T12:00:01Z",
                Some("asa01"),
                "%ASA-6-302014",
                "Teardown TCP connection 123",
            ),
            (
                "<166>Jan 10 2024 12:00:03 2001:db8::1: %ASA-4-106023: Deny udp",
                "2024-01-10T12:00:03Z",
                Some("2001:db8::1"),
                "%ASA-4-106023",
                "Deny udp",
            ),
            (
                "<166>Jan 10 2024 12:00:02 10.1.1.1: %ASA-4-106023: Deny tcp src outside:1.2.3.4/5555",
                "2024-01-10T12:00:02Z",
                Some("10.1.1.1"),
                "%ASA-4-106023",
                "Deny tcp src outside:1.2.3.4/5555",
            ),
        ];
        for (line, time, host, app, msg) in cases {
            let e = p.parse(line.as_bytes(), arrival, None).unwrap();
            assert_eq!(e.time, at(time), "{line}");
            assert_eq!(get(&e, Field::Host), *host, "{line}");
            assert_eq!(get(&e, Field::App), Some(*app), "{line}");
            assert_eq!(get(&e, Field::Msg), Some(*msg), "{line}");
        }
        for line in [
            "<166>%ASA-6-302013: Built outbound TCP",
            "<189>77: %SYS-5-RESTART: System restarted",
        ] {
            let e = p.parse(line.as_bytes(), arrival, None).unwrap();
            assert_eq!(e.time, arrival, "{line}");
            assert!(
                get(&e, Field::App).is_some_and(|a| a.starts_with('%')),
                "{line}"
            );
        }
        // A zone the stamp names is its zone, whatever the configured one; a word that names
        // no known zone is read in the configured one.
        let berlin = SyslogParser::new(Zone::Iana(chrono_tz::Europe::Berlin), Year::Fixed(2024));
        for (line, time) in [
            (
                "<189>124: router1: Jan 10 12:00:01.456 UTC: %LINK-3-UPDOWN: down",
                "2024-01-10T12:00:01.456Z",
            ),
            (
                "<189>125: router1: Jan 10 12:00:02.789 EST: %LINK-3-UPDOWN: up",
                "2024-01-10T17:00:02.789Z",
            ),
            (
                "<189>126: router1: Jan 10 2024 12:00:03 CET: %LINK-3-UPDOWN: up",
                "2024-01-10T11:00:03Z",
            ),
            (
                "<189>127: router1: Jan 10 12:00:04 LAB: %LINK-3-UPDOWN: up",
                "2024-01-10T11:00:04Z",
            ),
        ] {
            let e = berlin.parse(line.as_bytes(), arrival, None).unwrap();
            assert_eq!(e.time, at(time), "{line}");
            assert_eq!(get(&e, Field::App), Some("%LINK-3-UPDOWN"), "{line}");
        }
        // Not Cisco: left as they were.
        let e = p.parse(b"<13>12: not a mnemonic", arrival, None).unwrap();
        assert_eq!(get(&e, Field::Msg), Some("12: not a mnemonic"));
        assert_eq!(get(&e, Field::App), None);
        let e = p
            .parse(
                b"<13>Mar  1 18:46:11 h app[12]: %not-a-mnemonic: x",
                arrival,
                None,
            )
            .unwrap();
        assert_eq!(get(&e, Field::App), Some("app"));
    }

    /// ISO 8601 stamps with a space for the `T`, or an offset without its colon (`+0200`),
    /// keep their header and are read at their offset (or in the zone without one).
    #[test]
    fn iso_stamps_with_a_space_or_a_short_offset_keep_their_header() {
        let p = SyslogParser::new(Zone::default(), Year::Fixed(2024));
        let arrival = at("2024-06-01T00:00:00Z");
        for (line, time) in [
            (
                "<13>2024-03-01 18:46:25 host app: x",
                "2024-03-01T18:46:25Z",
            ),
            (
                "<13>1 2024-03-01T10:00:00+0200 host app - - - x",
                "2024-03-01T08:00:00Z",
            ),
            (
                "<13>2024-03-01 18:46:25+01:00 host app: x",
                "2024-03-01T17:46:25Z",
            ),
            (
                "<13>2024-03-01T18:46:25-0530 host app: x",
                "2024-03-02T00:16:25Z",
            ),
            (
                "<13>2024-03-01 18:46:25.5Z host app: x",
                "2024-03-01T18:46:25.5Z",
            ),
        ] {
            let e = p.parse(line.as_bytes(), arrival, None).unwrap();
            assert_eq!(e.time, at(time), "{line}");
            assert_eq!(get(&e, Field::Host), Some("host"), "{line}");
            assert_eq!(get(&e, Field::App), Some("app"), "{line}");
            assert_eq!(get(&e, Field::Msg), Some("x"), "{line}");
        }
    }

    #[test]
    fn iso_stamps_without_an_offset_are_read_in_the_zone_and_keep_their_header() {
        let paris = SyslogParser::new("Europe/Paris".parse().unwrap(), Year::Resolve);
        let now = at("2026-12-20T00:00:00Z");
        for (line, time, procid, msg) in [
            (
                "<13>2019-02-13T19:48:34 host4 app4: no offset",
                "2019-02-13T18:48:34Z",
                None,
                "no offset",
            ),
            (
                "<13>2019-07-13T19:48:34.250 host4 app4[12]: summer",
                "2019-07-13T17:48:34.250Z",
                Some("12"),
                "summer",
            ),
            (
                "<13>1 2019-02-13T19:48:34 host4 app4 77 ID1 - five",
                "2019-02-13T18:48:34Z",
                Some("77"),
                "five",
            ),
            // With an offset or `Z`: as written, whatever the zone.
            (
                "<13>1 2019-02-13T19:48:34Z host4 app4 - - - utc",
                "2019-02-13T19:48:34Z",
                None,
                "utc",
            ),
            (
                "<13>2019-02-13T19:48:34-05:00 host4 app4: offset",
                "2019-02-14T00:48:34Z",
                None,
                "offset",
            ),
        ] {
            let e = paris.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::Host), Some("host4"), "{line}");
            assert_eq!(get(&e, Field::App), Some("app4"), "{line}");
            assert_eq!(get(&e, Field::Procid), procid, "{line}");
            assert_eq!(get(&e, Field::Msg), Some(msg), "{line}");
            assert_eq!(e.time, at(time), "{line}");
        }
        // Not a stamp (a date in the message of a stamp-less line): left alone.
        assert_eq!(paris.zone_less_iso("<13>app: 2019-02-13T19:48:34 x"), None);
        assert_eq!(
            paris.zone_less_iso("<13>2019-02-13T19:48:34\thost app: x"),
            None
        );
        assert_eq!(
            paris.zone_less_iso("<13>2019-02-13T19:48 host app: x"),
            None
        );
    }

    #[test]
    fn rfc3164_without_hostname_reads_the_tag_as_the_app() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        for (line, host, app, msg) in [
            (
                "<13>Apr  5 12:56:51 robin: Hello",
                None,
                Some("robin"),
                "Hello",
            ),
            ("<13>Apr  5 12:56:51 su: pam ok", None, Some("su"), "pam ok"),
            (
                "<13>Apr  5 12:56:51 sshd[7]: x y",
                None,
                Some("sshd"),
                "x y",
            ),
            (
                "<13>Apr  5 12:56:51 web-1 robin: Hello",
                Some("web-1"),
                Some("robin"),
                "Hello",
            ),
            (
                "<13>Apr  5 12:56:51 10.0.0.1 sshd: x",
                Some("10.0.0.1"),
                Some("sshd"),
                "x",
            ),
            // A hostname with no tag, its name later followed by a colon: still the host.
            (
                "<134>Oct 30 16:05:54 fw1  link down on fw1: eth0",
                Some("fw1"),
                None,
                "link down on fw1: eth0",
            ),
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::Host), host, "{line}");
            assert_eq!(get(&e, Field::App), app, "{line}");
            assert_eq!(get(&e, Field::Msg), Some(msg), "{line}");
        }
    }

    /// A host name never holds a `[`: a first header word `app[pid]` not followed by a colon is
    /// the tag, the line has no host, and the words after it are the message.
    #[test]
    fn a_tag_without_its_colon_is_not_the_host() {
        let p = SyslogParser::default();
        let now = at("2026-12-20T00:00:00Z");
        for (line, app, procid, msg) in [
            (
                "<13>Feb 13 20:07:26 sshd[123] no colon",
                "sshd",
                Some("123"),
                "no colon",
            ),
            (
                "Feb 13 20:07:26 sshd[123] no colon",
                "sshd",
                Some("123"),
                "no colon",
            ),
            (
                "<13>Feb 13 20:07:26 sshd[123] su: a colon later",
                "sshd",
                Some("123"),
                "su: a colon later",
            ),
            (
                "<13>2026-02-13T20:07:26Z sshd[123] no colon",
                "sshd",
                Some("123"),
                "no colon",
            ),
            ("<13>Feb 13 20:07:26 sshd[123]", "sshd", Some("123"), ""),
            ("<13>Feb 13 20:07:26 sshd[] x y", "sshd[]", None, "x y"),
            (
                "<13>Feb 13 20:07:26 sshd[123] - x",
                "sshd",
                Some("123"),
                "- x",
            ),
            ("Feb 13 20:07:26 sshd[123]:x y", "sshd", Some("123"), "x y"),
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::Host), None, "{line}");
            assert_eq!(get(&e, Field::App), Some(app), "{line}");
            assert_eq!(get(&e, Field::Procid), procid, "{line}");
            assert_eq!(get(&e, Field::Msg), Some(msg), "{line}");
        }
        // With a host before it, or its colon, as before.
        for line in [
            "<13>Feb 13 20:07:26 h sshd[123] no colon",
            "<13>Feb 13 20:07:26 h sshd[123]: no colon",
        ] {
            let e = p.parse(line.as_bytes(), now, None).unwrap();
            assert_eq!(get(&e, Field::Host), Some("h"), "{line}");
            assert_eq!(get(&e, Field::App), Some("sshd"), "{line}");
            assert_eq!(get(&e, Field::Procid), Some("123"), "{line}");
            assert_eq!(get(&e, Field::Msg), Some("no colon"), "{line}");
        }
    }

    #[test]
    fn procid_as_written() {
        let p = SyslogParser::default();
        let t = at("2026-12-20T00:00:00Z");
        let e = p
            .parse(b"Dec 10 06:55:46 h sshd[0123]: x", t, None)
            .unwrap();
        assert_eq!(get(&e, Field::Procid), Some("0123"));
        let e = p
            .parse(b"<13>1 2026-01-01T00:00:00Z h app 007 - - x", t, None)
            .unwrap();
        assert_eq!(get(&e, Field::Procid), Some("007"));
        let e = p
            .parse(b"<13>1 2026-01-01T00:00:00Z h app worker-1 - - x", t, None)
            .unwrap();
        assert_eq!(get(&e, Field::Procid), Some("worker-1"));
    }

    #[test]
    fn far_years_are_out_of_range_not_panics() {
        let t = at("2026-01-01T00:00:00Z");
        for zone in ["-12:00", "+14:00", "Pacific/Kiritimati", "UTC"] {
            let p = SyslogParser::new(zone.parse().unwrap(), Year::Resolve);
            for line in [
                "<13>Dec 31 262142 23:59:59 h a: x",
                "<13>Jan  1 -262143 00:00:00 h a: x",
                "<13>Jan  1 1200 00:00:00 h a: x",
            ] {
                let got = p.parse(line.as_bytes(), t, None);
                assert!(
                    matches!(got, Err(Malformed::TimeOutOfRange(_))) || got.is_ok(),
                    "{zone} {line}: {got:?}"
                );
            }
        }
        let p = SyslogParser::new("+02:00".parse().unwrap(), Year::Fixed(5000));
        assert!(matches!(
            p.parse(b"<13>Jan  1 00:00:00 h a: x", t, None),
            Err(Malformed::TimeOutOfRange(_))
        ));
    }

    /// A fixed year is one whose every stamp a [`Timestamp`] holds: its first and last
    /// instants, in the farthest zones, parse; a year outside is refused with the range.
    #[test]
    fn a_fixed_year_is_checked_against_the_timestamp_range() {
        let t = at("2026-01-01T00:00:00Z");
        for y in [*Year::RANGE.start(), *Year::RANGE.end()] {
            assert_eq!(Year::checked(i64::from(y)), Ok(y));
            for zone in ["-12:00", "+14:00"] {
                let p = SyslogParser::new(zone.parse().unwrap(), Year::Fixed(y));
                for line in [
                    &b"<13>Jan  1 00:00:00 h a: x"[..],
                    b"<13>Dec 31 23:59:59 h a: x",
                ] {
                    assert!(p.parse(line, t, None).is_ok(), "{y} {zone}");
                }
            }
        }
        for y in [1677, 2262, 3000, -5, i64::from(i32::MAX) + 1] {
            let Err(e) = Year::checked(y) else {
                panic!("{y} passed")
            };
            assert!(
                e.starts_with(&format!("{y} is not a year from 1678 to 2261")),
                "{e}"
            );
        }
    }

    /// A syslogd's `last message repeated N times` (sysklogd, FreeBSD forwarding without a
    /// hostname, macOS's `--- ... ---`) stands for the sender's last message, N times, at
    /// the notice's time; a notice whose message is not known, or a tagged message that
    /// merely says those words, stays as it came.
    #[test]
    fn a_syslogd_repeat_notice_stands_for_the_senders_last_message() {
        let p = SyslogParser::default();
        let t = at("2026-03-01T00:00:00Z");
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let mut last = LastMessages::default();
        let mut feed = |line: &[u8], peer: Option<IpAddr>| {
            let ev = p.parse(line, t, peer).unwrap();
            last.take(ev, line, peer, |b| p.parse(b, t, peer).ok())
        };
        let msg = |e: &Event| e.get(Field::Msg).and_then(Value::as_str).map(String::from);
        // FreeBSD forwards without a hostname: `last` would be the host, `message` the tag.
        let first = feed(
            b"<38>Mar  1 00:00:00 sshd[12]: Failed password for root",
            Some(peer),
        );
        assert_eq!(first.get(Field::Host), Some(&Value::str("10.0.0.9")));
        let again = feed(
            b"<38>Mar  1 00:00:03 last message repeated 4 times",
            Some(peer),
        );
        assert_eq!(msg(&again).as_deref(), Some("Failed password for root"));
        assert_eq!(again.get(Field::App), Some(&Value::str("sshd")));
        assert_eq!(again.get(Field::Host), Some(&Value::str("10.0.0.9")));
        assert_eq!(again.copies(), 4);
        assert_eq!(again.time, at("2026-03-01T00:00:03Z"));
        // sysklogd with a hostname; one repeat is one more copy, with no count.
        feed(b"<38>Mar  1 00:00:04 web-1 su: FAILED SU", None);
        let one = feed(
            b"<38>Mar  1 00:00:05 web-1 last message repeated 1 time",
            None,
        );
        assert_eq!(msg(&one).as_deref(), Some("FAILED SU"));
        assert_eq!((one.get(Field::Repeat), one.copies()), (None, 1));
        // macOS.
        let mac = feed(
            b"<38>Mar  1 00:00:06 web-1 --- last message repeated 2 times ---",
            None,
        );
        assert_eq!((msg(&mac).as_deref(), mac.copies()), (Some("FAILED SU"), 2));
        // Another host's message is not web-1's: an unknown sender's notice stays as it
        // came (untagged, its text the message), as does a program's message in those words.
        let other = feed(
            b"<38>Mar  1 00:00:07 db-1 last message repeated 2 times",
            None,
        );
        assert_eq!(
            msg(&other).as_deref(),
            Some("last message repeated 2 times")
        );
        assert_eq!((other.get(Field::App), other.copies()), (None, 1));
        let said = feed(
            b"<38>Mar  1 00:00:08 web-1 app: last message repeated 2 times",
            None,
        );
        assert_eq!(said.get(Field::App), Some(&Value::str("app")));
        assert_eq!(said.copies(), 1);
        // ... and that message is now web-1's last.
        let after = feed(
            b"<38>Mar  1 00:00:09 web-1 last message repeated 3 times",
            None,
        );
        assert_eq!(after.get(Field::App), Some(&Value::str("app")));
        assert_eq!(after.copies(), 3);
        // Not notices: no count, a word after it.
        for line in [
            &b"<38>Mar  1 00:00:10 web-1 last message repeated times"[..],
            b"<38>Mar  1 00:00:10 web-1 last message repeated 3 times over",
        ] {
            let e = feed(line, None);
            assert_eq!(e.get(Field::App), Some(&Value::str("last")), "{line:?}");
        }
    }

    /// The last messages remembered are bounded: a flood of senders starts the memory
    /// again, and a long message is not kept.
    #[test]
    fn last_messages_are_bounded() {
        let p = SyslogParser::default();
        let t = at("2026-03-01T00:00:00Z");
        let mut last = LastMessages::default();
        for i in 0..3 * LAST_MESSAGES {
            let line = format!("<38>Mar  1 00:00:00 h{i} a: x");
            let ev = p.parse(line.as_bytes(), t, None).unwrap();
            last.take(ev, line.as_bytes(), None, |_| None);
            assert!(last.map.len() <= LAST_MESSAGES);
        }
        // Full, a new sender lets one other go, not all of them.
        assert_eq!(last.map.len(), LAST_MESSAGES);
        let long = format!(
            "<38>Mar  1 00:00:00 h0 a: {}",
            "x".repeat(LAST_MESSAGE_BYTES)
        );
        let ev = p.parse(long.as_bytes(), t, None).unwrap();
        last.take(ev, long.as_bytes(), None, |_| panic!("no reparse"));
        let line = b"<38>Mar  1 00:00:01 h0 last message repeated 2 times";
        let ev = p.parse(line, t, None).unwrap();
        let ev = last.take(ev, line, None, |_| panic!("nothing kept to read"));
        assert_eq!(ev.copies(), 1);
    }

    #[test]
    fn garbage_is_malformed() {
        let p = SyslogParser::default();
        let t = at("2026-01-01T00:00:00Z");
        assert_eq!(
            p.parse(b"complete and utter gobbledegook", t, None),
            Err(Malformed::NotSyslog)
        );
        assert_eq!(p.parse(b"\r\n\0", t, None), Err(Malformed::Empty));
        assert_eq!(p.parse(b"<13>", t, None), Err(Malformed::PriOnly));
        assert_eq!(p.parse(b"<13>  ", t, None), Err(Malformed::PriOnly));
        assert_eq!(p.parse(b"<999>hello", t, None), Err(Malformed::NotSyslog));
        // A nil stamp without PRI is no header: not a host named `gobbledegook`.
        for line in [&b"- gobbledegook"[..], b"- host app: x", b"-"] {
            assert_eq!(
                p.parse(line, t, None),
                Err(Malformed::NotSyslog),
                "{line:?}"
            );
        }
        // With a PRI the line is kept (facility and severity from it).
        let e = p.parse(b"<13>- host app: x", t, None).unwrap();
        assert_eq!(e.get(Field::Severity), Some(&Value::Int(5)));
    }

    #[test]
    fn pri_only_keeps_pri_and_text() {
        let p = SyslogParser::default();
        let t = at("2026-01-01T00:00:00Z");
        let e = p.parse(b"<13>hello there", t, None).unwrap();
        assert_eq!(e.time, t);
        assert_eq!(e.get(Field::Facility), Some(&Value::Int(1)));
        assert_eq!(e.get(Field::Severity), Some(&Value::Int(5)));
        assert_eq!(get(&e, Field::Msg), Some("hello there"));
    }

    /// A message with a PRI and a tag but no stamp nor host (busybox, dnsmasq on routers):
    /// the tag is the app, as after a header; a first word that is no tag stays in the text.
    #[test]
    fn a_tag_without_a_header_is_the_app() {
        let p = SyslogParser::default();
        let t = at("2026-01-01T00:00:00Z");
        for (line, app, procid, msg) in [
            (
                "<30>dnsmasq-dhcp[1234]: DHCPACK(br-lan) 10.0.0.5",
                Some("dnsmasq-dhcp"),
                Some("1234"),
                "DHCPACK(br-lan) 10.0.0.5",
            ),
            (
                "<13>su: pam_unix(su:session): opened",
                Some("su"),
                None,
                "pam_unix(su:session): opened",
            ),
            ("<13>kernel:", Some("kernel"), None, ""),
            ("<13>12:30:00 up 3 days", None, None, "12:30:00 up 3 days"),
            ("<13>two words: here", None, None, "two words: here"),
            ("<13>sshd[1 2]: x", None, None, "sshd[1 2]: x"),
            ("<13>sshd[12] no colon", None, None, "sshd[12] no colon"),
        ] {
            let e = p.parse(line.as_bytes(), t, None).unwrap();
            assert_eq!(e.time, t, "{line}");
            assert_eq!(get(&e, Field::App), app, "{line}");
            assert_eq!(get(&e, Field::Procid), procid, "{line}");
            assert_eq!(get(&e, Field::Msg), Some(msg), "{line}");
        }
    }

    #[test]
    fn year_resolution() {
        let p = SyslogParser::default();
        let line = b"<13>Dec 31 23:59:00 h app: x";
        let e = p.parse(line, at("2027-01-01T00:00:30Z"), None).unwrap();
        assert_eq!(e.time, at("2026-12-31T23:59:00Z"));
        let jan = b"<13>Jan  1 00:00:10 h app: x";
        let e = p.parse(jan, at("2026-12-31T23:59:59Z"), None).unwrap();
        assert_eq!(e.time, at("2027-01-01T00:00:10Z"));
        // Any January stamp received in December is next year's (syslog-ng, rsyslog), even
        // more than FUTURE_SLACK_DAYS ahead.
        let late_jan = b"<13>Jan 25 10:00:00 h app: x";
        let e = p.parse(late_jan, at("2026-12-04T00:00:00Z"), None).unwrap();
        assert_eq!(e.time, at("2027-01-25T10:00:00Z"));
        // Further ahead than that, a stamp is last year's: a replayed file, not a clock.
        let feb = b"<13>Feb  1 10:00:00 h app: x";
        let e = p.parse(feb, at("2026-12-04T00:00:00Z"), None).unwrap();
        assert_eq!(e.time, at("2026-02-01T10:00:00Z"));
        let nov = b"<13>Nov 20 10:00:00 h app: x";
        let e = p.parse(nov, at("2027-01-10T00:00:00Z"), None).unwrap();
        assert_eq!(e.time, at("2026-11-20T10:00:00Z"));
        let fixed = SyslogParser::new(Zone::default(), Year::Fixed(2005));
        let e = fixed.parse(line, at("2027-01-01T00:00:30Z"), None).unwrap();
        assert_eq!(e.time, at("2005-12-31T23:59:00Z"));
    }

    /// rsyslog's repeated-message reduction: the folded message is the message, `repeat` how
    /// many times it came; a line that merely mentions it, or a malformed count, stays as is.
    #[test]
    fn a_folded_repeat_is_its_message_with_a_count() {
        let p = SyslogParser::new(Zone::default(), Year::Fixed(2024));
        let t = at("2024-12-10T08:00:00Z");
        let line = b"Dec 10 07:13:56 LabSZ sshd[24227]: message repeated 5 times: [ Failed password for root from 5.36.59.76 port 42393 ssh2]";
        let e = p.parse(line, t, None).unwrap();
        assert_eq!(
            get(&e, Field::Msg),
            Some("Failed password for root from 5.36.59.76 port 42393 ssh2")
        );
        assert_eq!(e.get(Field::Repeat), Some(&Value::Int(5)));
        assert_eq!(e.copies(), 5);
        let once = p
            .parse(
                b"<13>Dec 10 07:13:56 h app: message repeated 1 times: [ x]",
                t,
                None,
            )
            .unwrap();
        assert_eq!(get(&once, Field::Msg), Some("x"));
        assert_eq!(once.get(Field::Repeat), None);
        assert_eq!(once.copies(), 1);
        // A count past the cap stands for at most MAX_REPEAT events.
        let flood = p
            .parse(
                b"<13>Dec 10 07:13:56 h app: message repeated 99999 times: [ x]",
                t,
                None,
            )
            .unwrap();
        assert_eq!(flood.copies(), cepheus_core::event::MAX_REPEAT as usize);
        for text in [
            &b"<13>Dec 10 07:13:56 h app: the message repeated 5 times: [ x]"[..],
            b"<13>Dec 10 07:13:56 h app: message repeated many times: [ x]",
            b"<13>Dec 10 07:13:56 h app: message repeated 5 times: [ x",
            b"<13>Dec 10 07:13:56 h app: message repeated 0 times: [ x]",
        ] {
            let e = p.parse(text, t, None).unwrap();
            assert_eq!(
                e.get(Field::Repeat),
                None,
                "{:?}",
                String::from_utf8_lossy(text)
            );
            assert!(get(&e, Field::Msg).unwrap().contains("repeated"));
        }
    }

    #[test]
    fn zones_parse() {
        assert_eq!("UTC".parse::<Zone>(), Ok(Zone::default()));
        assert_eq!(
            "+02:00".parse::<Zone>(),
            Ok(Zone::Fixed(FixedOffset::east_opt(7200).unwrap()))
        );
        assert_eq!(
            "-0530".parse::<Zone>(),
            Ok(Zone::Fixed(FixedOffset::west_opt(5 * 3600 + 1800).unwrap()))
        );
        assert!(matches!("Europe/Paris".parse::<Zone>(), Ok(Zone::Iana(_))));
        assert!("+25:00".parse::<Zone>().is_err());
        assert!("Mars/Olympus".parse::<Zone>().is_err());
        assert_eq!(
            "Europe/Paris".parse::<Zone>().unwrap().to_string(),
            "Europe/Paris"
        );
    }

    #[test]
    fn iana_zone_follows_dst() {
        let paris: Zone = "Europe/Paris".parse().unwrap();
        let p = SyslogParser::new(paris, Year::Fixed(2026));
        let t = at("2026-06-01T00:00:00Z");
        let summer = p.parse(b"Jul  1 12:00:00 h a: x", t, None).unwrap();
        assert_eq!(summer.time, at("2026-07-01T10:00:00Z"));
        let winter = p.parse(b"Jan  1 12:00:00 h a: x", t, None).unwrap();
        assert_eq!(winter.time, at("2026-01-01T11:00:00Z"));
        // In the spring gap (02:00 CET -> 03:00 CEST on 29 March 2026) a reading moves
        // forward by the gap: 02:30 is 03:30 CEST, after 01:59:59 CET, not before it.
        let before = p.parse(b"Mar 29 01:59:59 h a: x", t, None).unwrap();
        assert_eq!(before.time, at("2026-03-29T00:59:59Z"));
        let gap = p.parse(b"Mar 29 02:30:00 h a: x", t, None).unwrap();
        assert_eq!(gap.time, at("2026-03-29T01:30:00Z"));
        let after = p.parse(b"Mar 29 03:30:00 h a: x", t, None).unwrap();
        assert_eq!(after.time, at("2026-03-29T01:30:00Z"));
        // In the autumn overlap (03:00 CEST -> 02:00 CET on 25 October) the earlier of the two.
        let twice = p.parse(b"Oct 25 02:30:00 h a: x", t, None).unwrap();
        assert_eq!(twice.time, at("2026-10-25T00:30:00Z"));
    }
}
