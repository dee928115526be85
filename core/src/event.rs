//! The event model: what every input (syslog line, flow) becomes before the rules see it.
//!
//! An event has an event time (the stamp its source wrote), an arrival time (when cepheus
//! received it), a source kind and typed fields. The fields that rules may name are defined once,
//! here, in [`Field`]: their names, types, sources and meaning. Structured data (`sd.<id>.<param>`)
//! and regex captures are open-ended and carried as [`FieldKey::Named`].

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

use crate::time::{Duration, Timestamp};

/// Where an event came from; rule conditions test it with the bare words `syslog` and `flow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A syslog message (RFC 3164 or 5424), from a socket, a file or a capture.
    Syslog,
    /// A flow event produced by the flow table from packets.
    Flow,
}

impl Source {
    /// Every source, in order.
    pub const ALL: [Source; 2] = [Source::Syslog, Source::Flow];

    /// The keyword for this source in rule conditions and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Source::Syslog => "syslog",
            Source::Flow => "flow",
        }
    }
}

/// The type of a field or of an expression in a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueType {
    /// UTF-8 text.
    Str,
    /// A signed 64-bit integer.
    Int,
    /// A 64-bit float.
    Float,
    /// true or false.
    Bool,
    /// An IPv4 or IPv6 address.
    Ip,
    /// An instant.
    Time,
    /// A length of time.
    Duration,
}

impl ValueType {
    /// The name used in diagnostics.
    pub const fn name(self) -> &'static str {
        match self {
            ValueType::Str => "string",
            ValueType::Int => "integer",
            ValueType::Float => "float",
            ValueType::Bool => "bool",
            ValueType::Ip => "IP address",
            ValueType::Time => "timestamp",
            ValueType::Duration => "duration",
        }
    }

    /// The name with its article, for messages: "an integer", "a string".
    pub const fn with_article(self) -> &'static str {
        match self {
            ValueType::Str => "a string",
            ValueType::Int => "an integer",
            ValueType::Float => "a float",
            ValueType::Bool => "a bool",
            ValueType::Ip => "an IP address",
            ValueType::Time => "a timestamp",
            ValueType::Duration => "a duration",
        }
    }

    /// Integers and floats mix in arithmetic and comparisons.
    pub const fn is_numeric(self) -> bool {
        matches!(self, ValueType::Int | ValueType::Float)
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A typed field value.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "t", content = "v", rename_all = "lowercase")]
pub enum Value {
    /// Text; short strings inline, longer ones shared, so copies are cheap.
    Str(SmolStr),
    /// Integer.
    Int(i64),
    /// Float.
    Float(f64),
    /// Boolean.
    Bool(bool),
    /// IP address.
    Ip(IpAddr),
    /// Instant.
    Time(Timestamp),
    /// Length of time.
    Duration(Duration),
}

impl Value {
    /// The bytes the value keeps beside itself: the text of a string too long to be inline
    /// (more than 23 bytes), else none. For `/stats`.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Value::Str(s) if s.len() > 23 => s.len(),
            _ => 0,
        }
    }

    /// An IP address value; an IPv4-mapped IPv6 address (`::ffff:10.0.0.2`, what a dual-stack
    /// socket reports for an IPv4 sender) is the IPv4 address, so both spellings are one group
    /// and compare equal.
    pub fn ip(addr: IpAddr) -> Value {
        Value::Ip(addr.to_canonical())
    }

    /// The type of this value.
    pub const fn ty(&self) -> ValueType {
        match self {
            Value::Str(_) => ValueType::Str,
            Value::Int(_) => ValueType::Int,
            Value::Float(_) => ValueType::Float,
            Value::Bool(_) => ValueType::Bool,
            Value::Ip(_) => ValueType::Ip,
            Value::Time(_) => ValueType::Time,
            Value::Duration(_) => ValueType::Duration,
        }
    }

    /// A string value.
    pub fn str(s: &str) -> Self {
        Value::Str(SmolStr::new(s))
    }

    /// The text if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Parses `text` as a value of type `ty` (expect files, JSON events, CLI input).
    pub fn parse_as(ty: ValueType, text: &str) -> Option<Value> {
        let t = text.trim();
        Some(match ty {
            ValueType::Str => Value::str(t),
            ValueType::Int => Value::Int(t.parse().ok()?),
            ValueType::Float => Value::Float(t.parse().ok()?),
            ValueType::Bool => Value::Bool(t.parse().ok()?),
            ValueType::Ip => Value::ip(t.parse().ok()?),
            ValueType::Time => Value::Time(Timestamp::parse_rfc3339(t)?),
            ValueType::Duration => Value::Duration(Duration::parse(t).ok()?),
        })
    }

    /// This value as plain JSON (strings, numbers, bools; IPs, times and durations as text).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Str(s) => serde_json::Value::String(s.to_string()),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(x) => serde_json::Number::from_f64(*x)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Ip(ip) => serde_json::Value::String(ip.to_string()),
            Value::Time(t) => serde_json::Value::String(t.to_rfc3339()),
            Value::Duration(d) => serde_json::Value::String(d.to_string()),
        }
    }
}

impl Value {
    /// Writes the value as `Display` does, strings without the formatting machinery (alert
    /// ids and messages write one per alert).
    pub fn write_to(&self, w: &mut impl fmt::Write) -> fmt::Result {
        match self {
            Value::Str(s) => w.write_str(s),
            other => write!(w, "{other}"),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Str(s) => f.write_str(s),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Ip(ip) => write!(f, "{ip}"),
            Value::Time(t) => write!(f, "{t}"),
            Value::Duration(d) => write!(f, "{d}"),
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Str(a), Value::Str(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Ip(a), Value::Ip(b)) => a == b,
            (Value::Time(a), Value::Time(b)) => a == b,
            (Value::Duration(a), Value::Duration(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

impl Hash for Value {
    /// Few writes into the hasher (each costs a call into SipHash, which this hot path keeps
    /// for its resistance to crafted collisions): the type and the length in one word, then
    /// the bytes.
    fn hash<H: Hasher>(&self, state: &mut H) {
        let tag = |t: u64, len: usize| (t << 56) | len as u64;
        match self {
            Value::Str(s) => {
                state.write_u64(tag(0, s.len()));
                state.write(s.as_bytes());
            }
            Value::Int(i) => state.write_u128(u128::from(tag(1, 0)) << 64 | *i as u64 as u128),
            Value::Float(x) => {
                state.write_u128(u128::from(tag(2, 0)) << 64 | u128::from(x.to_bits()))
            }
            Value::Bool(b) => state.write_u64(tag(3, usize::from(*b))),
            Value::Ip(std::net::IpAddr::V4(a)) => {
                state.write_u64(tag(4, 0) | u64::from(a.to_bits()))
            }
            Value::Ip(std::net::IpAddr::V6(a)) => {
                state.write_u64(tag(5, 0));
                state.write_u128(a.to_bits());
            }
            Value::Time(t) => state.write_u128(u128::from(tag(6, 0)) << 64 | t.0 as u64 as u128),
            Value::Duration(d) => {
                state.write_u128(u128::from(tag(7, 0)) << 64 | d.0 as u64 as u128)
            }
        }
    }
}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Value {
    /// A total order (values of different types order by type) so group keys sort
    /// deterministically in output and checkpoints.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match (self, other) {
            (Value::Str(a), Value::Str(b)) => a.cmp(b),
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::Float(a), Value::Float(b)) => a.total_cmp(b),
            (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
            (Value::Ip(a), Value::Ip(b)) => a.cmp(b),
            (Value::Time(a), Value::Time(b)) => a.cmp(b),
            (Value::Duration(a), Value::Duration(b)) => a.cmp(b),
            _ => {
                let rank = |v: &Value| v.ty() as u8;
                rank(self).cmp(&rank(other)).then(Ordering::Equal)
            }
        }
    }
}

macro_rules! fields {
    ($( $(#[doc = $doc:literal])* $variant:ident = $name:literal : $ty:ident, [$($src:ident),*] ; )*) => {
        /// Every field that rules can name, flows included: the one place they are defined.
        ///
        /// Structured data (`sd.<id>.<param>`, strings, syslog only) and regex captures are not
        /// listed: they are [`FieldKey::Named`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum Field {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl Field {
            /// All fields, in documentation order.
            pub const ALL: &'static [Field] = &[$(Field::$variant),*];

            /// The name rules use.
            pub const fn name(self) -> &'static str {
                match self { $(Field::$variant => $name,)* }
            }

            /// The type of the field's values.
            pub const fn ty(self) -> ValueType {
                match self { $(Field::$variant => ValueType::$ty,)* }
            }

            /// The sources whose events carry this field.
            pub const fn sources(self) -> &'static [Source] {
                match self { $(Field::$variant => &[$(Source::$src),*],)* }
            }

            /// One line saying what the field holds (for docs and `--help`).
            pub fn doc(self) -> &'static str {
                match self { $(Field::$variant => concat!($($doc),*).trim_start(),)* }
            }

            /// Looks a field up by the name rules use.
            pub fn from_name(name: &str) -> Option<Field> {
                match name { $($name => Some(Field::$variant),)* _ => None }
            }
        }
    };
}

fields! {
    /// Event time: the stamp written by the source (syslog header; a flow's first packet for `flow_start`, its last for `flow_end` and `attempt_failed`). A stamp without a zone (RFC 3164's) is read in `[syslog] timezone` (`--tz`), except a Cisco stamp that names its zone (`*Jan 10 12:00:00.123 UTC:`, IOS's `show-timezone`) with UTC, GMT or one of the common abbreviations: WET/WEST, CET/CEST, MET/MEST, EET/EEST, MSK, EST/EDT, CST/CDT (US Central), MST/MDT, PST/PDT, AKST/AKDT, HST, AWST, SGT, HKT, JST, KST, ACST/ACDT, AEST/AEDT, NZST/NZDT; another word (`IST`, `BST`, a name the device's operator chose) is read in the configured zone.
    Time = "time": Time, [Syslog, Flow];
    /// syslog: the hostname in the message header; a message received without one (no header, or RFC 5424's `-`) has its sender's address (`peer`) written out, as rsyslog and syslog-ng fill it.
    Host = "host": Str, [Syslog];
    /// syslog: the IP address of the socket peer (or capture sender) that delivered the message.
    Peer = "peer": Ip, [Syslog];
    /// syslog: the application name (RFC 3164 tag, RFC 5424 APP-NAME), e.g. `sshd`; for Cisco IOS, ASA and NX-OS messages the `%FACILITY-SEVERITY-MNEMONIC`, e.g. `%LINK-3-UPDOWN` (their sequence numbers, `*` of a clock not in sync and the colon after the stamp are read as such), also when a relay wrapped the message in a header of its own (rsyslog's RFC 5424 template gives `sw1 123 - - - *Mar  1 00:00:01.123: %LINK-3-UPDOWN: ...`: the app is still the mnemonic, the time the relay's). A message with a PRI but no header (`<30>dnsmasq[12]: query ...`, as busybox and some routers send it) has its tag read too.
    App = "app": Str, [Syslog];
    /// syslog: the process id as written (may be non-numeric).
    Procid = "procid": Str, [Syslog];
    /// syslog: the RFC 5424 MSGID.
    Msgid = "msgid": Str, [Syslog];
    /// syslog: the facility number, 0 (kern) to 23 (local7). A message received without a
    /// PRI is `user.notice` (facility 1, severity 5), as RFC 3164 has a relay assign it and
    /// rsyslog and syslog-ng read it; a line of a file without one has neither field
    /// (`/var/log/auth.log`'s lines are not `user`), nor has one whose PRI is above 191.
    Facility = "facility": Int, [Syslog];
    /// syslog: the severity, 0 (emerg) to 7 (debug); see `facility` for a message without a
    /// PRI.
    Severity = "severity": Int, [Syslog];
    /// syslog: the free-form message text.
    Msg = "msg": Str, [Syslog];
    /// flow: `flow_start` (its first packet), `flow_end` (every flow that ends, failed attempts
    /// included) or `attempt_failed` (a TCP attempt that ended unanswered or rejected: Zeek's
    /// `S0`, `REJ`, `RSTOS0` or `SH`; made right after that flow's `flow_end`, so a rule on
    /// `kind == "flow_end"` also sees the failed attempts; `state` tells them apart).
    Kind = "kind": Str, [Flow];
    /// flow: the originator's address: the side that sent the first packet, except that a
    /// flow first seen from its server (a SYN-ACK first; TCP picked up mid-stream, an ACK
    /// or a reset from a port below 1024 to one of 1024 or more, or from below 32768 to
    /// 32768 or more; UDP from a service port, below 1024 or a known one such as 5353 or
    /// 1900, to a port that is none) is turned round to its client, as Zeek does; a FIN,
    /// NULL or Xmas probe from a service port (a scan's `-g 53`) is not, nor a UDP probe
    /// from a port that is no service's.
    Src = "src": Ip, [Flow];
    /// flow: the responder's address.
    Dst = "dst": Ip, [Flow];
    /// flow: the originator's port (0 for protocols without ports).
    Sport = "sport": Int, [Flow];
    /// flow: the responder's port (for ICMP, the type).
    Dport = "dport": Int, [Flow];
    /// flow: `tcp`, `udp`, `icmp`, `icmpv6` or the IP protocol number as text.
    Proto = "proto": Str, [Flow];
    /// flow: the innermost 802.1Q VLAN id, 0 when untagged.
    Vlan = "vlan": Int, [Flow];
    /// flow: connection state in Zeek's conn_state spelling (`S0`, `REJ`, `SF`, `RSTO`, `RSTR`, `OTH`, ...); UDP flows are `SF`, `S0` or `SHR` (only the responder sent), other protocols `OTH`, as in Zeek.
    State = "state": Str, [Flow];
    /// flow: IP-level bytes sent by the originator (IP headers included; Zeek's `orig_bytes`, the payload, is `orig_payload_bytes`).
    OrigBytes = "orig_bytes": Int, [Flow];
    /// flow: IP-level bytes sent by the responder (IP headers included).
    RespBytes = "resp_bytes": Int, [Flow];
    /// flow: packets sent by the originator.
    OrigPkts = "orig_pkts": Int, [Flow];
    /// flow: packets sent by the responder.
    RespPkts = "resp_pkts": Int, [Flow];
    /// flow: time from the first to the last packet.
    Duration = "duration": Duration, [Flow];
    // (The event journal stores a field by its position here: a new field goes last.)
    /// flow: transport payload bytes sent by the originator, what Zeek counts as `orig_bytes` (TCP: from sequence numbers, so a segment sent again counts once; UDP: as its headers say).
    OrigPayloadBytes = "orig_payload_bytes": Int, [Flow];
    /// flow: transport payload bytes sent by the responder.
    RespPayloadBytes = "resp_payload_bytes": Int, [Flow];
    /// flow: every TCP flag the originator's packets carried, as letters in the header's order (Wireshark's): `C` CWR, `E` ECE, `U` URG, `A` ACK, `P` PSH, `R` RST, `S` SYN, `F` FIN; `""` for none (a NULL probe) and for flows not TCP. An Xmas probe is `UPF`, a finished client `APSF`.
    OrigFlags = "orig_flags": Str, [Flow];
    /// flow: every TCP flag the responder's packets carried, as `orig_flags` spells them (`AS` a SYN-ACK and nothing more, `AR` a refusal).
    RespFlags = "resp_flags": Str, [Flow];
    /// syslog: how many times the message came, when its sender folded copies into one line (rsyslog's repeated-message reduction: `message repeated 5 times: [ Failed password ...]` has `msg` the message and `repeat` 5; and the notice of sysklogd's, FreeBSD's or macOS's syslogd, `last message repeated 4 times` or `--- last message repeated 4 times ---`, which stands for its sender's last message, taken again at the notice's time with `repeat` 4: the sender being the peer and host (a followed file's own), the last 4,096 senders' messages of up to 2 KiB are remembered, and a notice of one not remembered stays a plain untagged message); the rules see such an event that many times (at most 64), so a counted pattern counts them all. Absent for a plain message.
    Repeat = "repeat": Int, [Syslog];
    /// flow: why a flow ended, on its `flow_end` and `attempt_failed` (none on `flow_start`): `closed` (FINs both ways or a reset; the event comes up to 5 s after that packet, its last ACKs collected first, as Zeek does), `idle_timeout`, `active_timeout` (older than an hour: its next packet starts a new flow), `evicted` (the flow table was full), `capture_end` (the capture, or a replay's input, ended with the flow open) or `reused` (a new connection took its ports). A rule grouping by it, or counting its distinct values, should match ends only (`kind != "flow_start"`): a start has no key there and is counted as keyless.
    EndReason = "end_reason": Str, [Flow];
}

/// The most times one event stands for ([`Field::Repeat`]): a forged count cannot make one
/// line cost the engine more than this many events.
pub const MAX_REPEAT: i64 = 64;

impl Field {
    /// Whether events of `source` carry this field.
    pub fn available_in(self, source: Source) -> bool {
        self.sources().contains(&source)
    }

    /// The only values a text field takes, when it has a fixed set (a flow's `kind` and
    /// `state`); empty for the others.
    pub fn enumerated(self) -> &'static [&'static str] {
        match self {
            Field::Kind => &["flow_start", "flow_end", "attempt_failed"],
            Field::State => &[
                "S0", "S1", "SF", "REJ", "S2", "S3", "RSTO", "RSTR", "RSTOS0", "RSTRH", "SH",
                "SHR", "OTH",
            ],
            Field::Proto => &["tcp", "udp", "icmp", "icmpv6"],
            Field::EndReason => &[
                "closed",
                "idle_timeout",
                "active_timeout",
                "evicted",
                "capture_end",
                "reused",
            ],
            _ => &[],
        }
    }

    /// What a value that no sender or capture could produce should have been (`None`: fine):
    /// ports, VLANs, counts, syslog codes, flow kinds and connection states. A test rule fed
    /// such an event would match what the live agent never sees.
    pub fn out_of_range(self, v: &Value) -> Option<&'static str> {
        let int = |lo: i64, hi: i64| matches!(v, Value::Int(i) if (lo..=hi).contains(i));
        let ok = match self {
            Field::Sport | Field::Dport => int(0, 65_535),
            Field::Vlan => int(0, 4_095),
            Field::Facility => int(0, 23),
            Field::Severity => int(0, 7),
            Field::OrigBytes
            | Field::RespBytes
            | Field::OrigPayloadBytes
            | Field::RespPayloadBytes
            | Field::OrigPkts
            | Field::RespPkts => int(0, i64::MAX),
            Field::Repeat => int(1, i64::MAX),
            Field::Kind | Field::State | Field::EndReason => {
                matches!(v, Value::Str(k) if self.enumerated().contains(&&**k))
            }
            _ => true,
        };
        (!ok).then_some(match self {
            Field::Sport | Field::Dport => "a port, 0 to 65535",
            Field::Vlan => "a VLAN id, 0 to 4095",
            Field::Facility => "a syslog facility, 0 to 23",
            Field::Severity => "a syslog severity, 0 to 7",
            Field::Kind => "\"flow_start\", \"flow_end\" or \"attempt_failed\"",
            Field::State => {
                "a Zeek conn_state (S0, S1, SF, REJ, S2, S3, RSTO, RSTR, RSTOS0, RSTRH, SH, SHR, OTH)"
            }
            Field::Repeat => "a count, 1 or more",
            Field::EndReason => {
                "\"closed\", \"idle_timeout\", \"active_timeout\", \"evicted\", \"capture_end\" or \"reused\""
            }
            _ => "a count, 0 or more",
        })
    }
}

/// The key of a field in an event: a defined [`Field`] or an open-ended name
/// (`sd.<id>.<param>` or a regex capture).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FieldKey {
    /// A field of the registry.
    Known(Field),
    /// Structured data `sd.<id>.<param>` (full dotted name) or a regex capture name.
    Named(Arc<str>),
}

impl FieldKey {
    /// The name as rules write it.
    pub fn name(&self) -> &str {
        match self {
            FieldKey::Known(f) => f.name(),
            FieldKey::Named(n) => n,
        }
    }

    /// The type of its values: the registry field's, text for any other name (`sd.*`,
    /// regex captures).
    pub fn ty(&self) -> ValueType {
        match self {
            FieldKey::Known(f) => f.ty(),
            FieldKey::Named(_) => ValueType::Str,
        }
    }

    /// Resolves a name: a registry field if there is one, else an open-ended name.
    pub fn from_name(name: &str) -> FieldKey {
        match Field::from_name(name) {
            Some(f) => FieldKey::Known(f),
            None => FieldKey::Named(Arc::from(name)),
        }
    }
}

/// One input event: a syslog message or a flow event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// syslog or flow.
    pub source: Source,
    /// The event time written by the source.
    pub time: Timestamp,
    /// When cepheus received it (replay: the recorded stamp).
    pub arrival: Timestamp,
    /// The typed fields, without `time` (which is [`Event::time`]).
    pub fields: Vec<(FieldKey, Value)>,
}

impl Event {
    /// About how many bytes the event takes in memory, its text included: what a group that
    /// holds it keeps alive (shared with every other holder), for `/stats`.
    pub fn heap_bytes(&self) -> usize {
        let name = |k: &FieldKey| match k {
            FieldKey::Named(n) => n.len(),
            FieldKey::Known(_) => 0,
        };
        std::mem::size_of::<Event>()
            + self.fields.capacity() * std::mem::size_of::<(FieldKey, Value)>()
            + (self.fields.iter())
                .map(|(k, v)| name(k) + v.heap_bytes())
                .sum::<usize>()
    }

    /// An event with no fields yet.
    pub fn new(source: Source, time: Timestamp, arrival: Timestamp) -> Self {
        Event {
            source,
            time,
            arrival,
            fields: Vec::new(),
        }
    }

    /// Sets a registry field (replacing an earlier value).
    pub fn set(&mut self, field: Field, value: Value) {
        self.set_key(FieldKey::Known(field), value);
    }

    /// Sets any field (replacing an earlier value).
    pub fn set_key(&mut self, key: FieldKey, value: Value) {
        if let Some(slot) = self.fields.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            self.fields.push((key, value));
        }
    }

    /// Adds fields the event does not hold yet (no search per field: a message's structured
    /// data can hold thousands). A key already present is then found with its first value.
    pub fn extend_new(&mut self, fields: impl IntoIterator<Item = (FieldKey, Value)>) {
        self.fields.extend(fields);
    }

    /// Builder form of [`Event::set`].
    pub fn with(mut self, field: Field, value: Value) -> Self {
        self.set(field, value);
        self
    }

    /// A registry field's value, if present. `time` is always present.
    pub fn get(&self, field: Field) -> Option<&Value> {
        self.fields
            .iter()
            .find(|(k, _)| matches!(k, FieldKey::Known(f) if *f == field))
            .map(|(_, v)| v)
    }

    /// How many times the event stands for ([`Field::Repeat`], at most [`MAX_REPEAT`]): 1 but
    /// for a syslog line that folded copies of its message.
    pub fn copies(&self) -> usize {
        if self.source != Source::Syslog {
            return 1;
        }
        match self.get(Field::Repeat) {
            Some(Value::Int(n)) if *n > 1 => (*n).min(MAX_REPEAT) as usize,
            _ => 1,
        }
    }

    /// Any field's value by key, if present.
    pub fn get_key(&self, key: &FieldKey) -> Option<&Value> {
        match key {
            FieldKey::Known(f) => self.get(*f),
            FieldKey::Named(n) => self
                .fields
                .iter()
                .find(|(k, _)| matches!(k, FieldKey::Named(m) if m == n))
                .map(|(_, v)| v),
        }
    }

    /// This event as a JSON object: `time`, `source`, then every field by name.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("time".into(), self.time.to_rfc3339().into());
        m.insert("source".into(), self.source.name().into());
        for (k, v) in &self.fields {
            m.insert(k.name().to_string(), v.to_json());
        }
        serde_json::Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The event journal (postcard) writes a field as its position in the registry: a
    /// journal written by an earlier version is read right only while these positions hold.
    /// A new field goes last; none is ever inserted or removed.
    #[test]
    fn the_registrys_positions_are_stable() {
        let names: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(
            names[..28],
            [
                "time",
                "host",
                "peer",
                "app",
                "procid",
                "msgid",
                "facility",
                "severity",
                "msg",
                "kind",
                "src",
                "dst",
                "sport",
                "dport",
                "proto",
                "vlan",
                "state",
                "orig_bytes",
                "resp_bytes",
                "orig_pkts",
                "resp_pkts",
                "duration",
                "orig_payload_bytes",
                "resp_payload_bytes",
                "orig_flags",
                "resp_flags",
                "repeat",
                "end_reason",
            ]
        );
    }

    #[test]
    fn registry_covers_design_fields() {
        let syslog = [
            "host", "peer", "app", "procid", "msgid", "facility", "severity", "msg", "time",
        ];
        let flow = [
            "kind",
            "src",
            "dst",
            "sport",
            "dport",
            "proto",
            "vlan",
            "state",
            "orig_bytes",
            "resp_bytes",
            "orig_pkts",
            "resp_pkts",
            "duration",
            "time",
        ];
        for n in syslog {
            let f = Field::from_name(n).unwrap_or_else(|| panic!("{n} missing"));
            assert!(f.available_in(Source::Syslog), "{n}");
        }
        for n in flow {
            let f = Field::from_name(n).unwrap_or_else(|| panic!("{n} missing"));
            assert!(f.available_in(Source::Flow), "{n}");
        }
        assert!(!Field::Msg.available_in(Source::Flow));
        assert!(!Field::Dport.available_in(Source::Syslog));
        assert_eq!(Field::Severity.ty(), ValueType::Int);
        assert_eq!(Field::Src.ty(), ValueType::Ip);
        assert!(Field::Host.doc().starts_with("syslog:"));
    }

    #[test]
    fn get_and_set() {
        let e = Event::new(Source::Syslog, Timestamp(1), Timestamp(2))
            .with(Field::App, Value::str("sshd"))
            .with(Field::App, Value::str("cron"));
        assert_eq!(e.get(Field::App), Some(&Value::str("cron")));
        assert_eq!(e.fields.len(), 1);
        assert_eq!(e.get(Field::Host), None);
    }

    #[test]
    fn value_parse_by_type() {
        assert_eq!(
            Value::parse_as(ValueType::Ip, " 10.0.0.1 "),
            Some(Value::Ip(
                "10.0.0.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
            ))
        );
        assert_eq!(Value::parse_as(ValueType::Int, "x"), None);
    }

    #[test]
    fn ipv4_mapped_addresses_are_ipv4() {
        let mapped = Value::parse_as(ValueType::Ip, "::ffff:10.0.0.2");
        assert_eq!(mapped, Value::parse_as(ValueType::Ip, "10.0.0.2"));
        assert_eq!(mapped.map(|v| v.to_string()).as_deref(), Some("10.0.0.2"));
        let v6 = Value::parse_as(ValueType::Ip, "2001:db8::1");
        assert_eq!(v6.map(|v| v.to_string()).as_deref(), Some("2001:db8::1"));
    }
}
