//! The configuration of `cepheus run`: a TOML file, every key optional and documented.
//!
//! [`DEFAULT_CONFIG`] is the complete commented file that `cepheus config default` prints; a
//! test checks that it parses to exactly [`Config::default`], so the documentation cannot
//! drift from the code.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use cepheus_core::time::Duration;
use serde::Deserialize;

use crate::ingest::syslog::Zone;

/// The complete default configuration, with a comment on every key.
pub const DEFAULT_CONFIG: &str = r#"# cepheus configuration (`cepheus run --config FILE`).
# Every key is optional; the values below are the built-in defaults. Durations are written
# like in rule files: "250ms", "2s", "5m", "1h". A relative path written in this file
# (syslog.files, rules.paths, store.path, api.token_file, api.socket, output.file) is relative
# to this file's folder,
# as under systemd the working directory is "/"; the defaults are relative to the working
# directory.

[syslog]
# UDP listeners: one datagram is one message; the sender's address is the `peer` field.
# Each listener (API too) takes its own address family: list "0.0.0.0:514" and "[::]:514"
# for both (a "[::]" entry is skipped, with a warning, on a host booted without IPv6).
udp = ["127.0.0.1:5514"]
# TCP listeners: RFC 6587 framing, octet counting ("LEN <PRI>MSG", or "LEN MSG" without PRI
# once the next frame shows a count too) or newline/NUL-terminated, detected per frame (a
# line that merely begins with a number, "200 OK", is a line).
tcp = ["127.0.0.1:5514"]
# A TCP connection that completes no message for this long is closed (bytes that never make
# a message do not count, and are dropped at the close: tcp_unfinished); at least 1s.
tcp_idle_timeout = "5m"
# The senders whose syslog is taken, as networks or addresses ("10.0.0.0/8", "192.0.2.7",
# "2001:db8::/32"); every other sender's datagrams are dropped and its TCP connections closed
# at once, counted as senders_refused and said in the log. Empty: any sender. (Over UDP a
# source address can be forged: this keeps out strays and scanners, not a forger on the path.)
# List 127.0.0.1 and ::1 too if a relay on this host forwards to the agent.
allowed_senders = []
# Most concurrent TCP connections. When all are open, a new one takes the place of the one
# silent longest among those that never delivered a syslog message (if silent for 1 s), else
# of the one silent longest of all (if silent for 30 s), else of the one silent longest of
# the host holding the most, if it holds more than the newcomer's host (its senders reconnect
# at their next message), all counted as tcp_evicted; else it is accepted and closed at once
# (tcp_rejected). One remote host holds at most a quarter of them (a sender on this host, any
# number). Cut (and said in the log) to what the open-files limit leaves after 128 for the
# agent's own files.
max_connections = 1024
# Largest message in bytes, its line end (LF or CRLF) not counted. Larger UDP datagrams are
# dropped; larger TCP frames are skipped
# (newline framing, up to 16 times this; a longer line, like a huge length when octet
# counting or a stream that lost its framing, ends the connection: the sender reconnects,
# and what it had sent after it on that connection is lost). Counted. With octet counting, a
# frame whose count was wrong (characters counted, not bytes) loses only its last bytes: the
# next frame is found and read on (tcp_resynced).
max_message_size = 65536
# Zone of stamps that carry none (RFC 3164's, and ISO 8601 ones written without an offset):
# "UTC", an offset such as "+02:00", or an IANA
# name such as "Europe/Paris" (a time in the spring-forward gap moves forward by the gap;
# one in the autumn overlap is the earlier, but in `replay` the later when the lines before
# it are already past the earlier: the hour's second pass). Their year is resolved against
# the arrival time. A Cisco stamp that names its zone (`12:00:00.123 UTC:`) is read in that
# zone when it is UTC/GMT or a common abbreviation (EST, CST = US Central, PDT, CET, EEST,
# JST, AEST, ...; docs/rules.md, field `time`).
timezone = "UTC"
# Exact duplicates (same bytes from the same peer, the line ending aside) within this window
# after the copy let through are dropped and counted: a message relayed twice is seen once (one repeated more
# often, a stamp-less heartbeat, gets through once per window). "0s" turns the filter off.
dedup_window = "2s"
# Most messages remembered by the duplicate filter (oldest forgotten first).
dedup_capacity = 65536
# Files of syslog lines to read (one message per line), followed like `tail -F`: new lines
# as they are appended, from the start again after rotation or truncation. "-" reads
# standard input until it ends. Missing files (or folders, FIFOs) are an error at start-up.
files = []
# Where reading a file begins when the agent starts: "end" (the lines already there were
# written before the agent ran; a restart does not replay them as new events) or
# "beginning" (read them too, stamped with the time they are read).
files_from = "end"
# Kernel receive queue of each UDP socket, in bytes: bursts beyond it are lost (and counted
# from /proc/net/udp). The kernel caps it at net.core.rmem_max; 0 keeps the system default.
udp_receive_buffer = 8388608

[rules]
# Rule files or folders (folders: every *.toml in them, recursively; *.test.toml excluded).
# Empty: "rules" when that folder exists, else the rules built into the binary.
# The folders (and the files' folders) are watched: a change reloads the rules; SIGHUP too.
paths = []

[store]
# Where the agent keeps its data (a sled database: alert changes, the engine's checkpoints);
# created when missing. One agent per folder.
path = "./cepheus-data"
# How often each shard's engine state (groups, deadlines, partial matches) is saved: a
# restart, even after a crash, continues from the last save. Deadlines that passed while the
# agent was down fire at start-up with reason "outage". A state that takes long to make (a
# million groups) is saved less often, so saving takes at most a twentieth of a shard's time;
# the event journal keeps what comes between.
checkpoint_every = "5s"
# Alert changes kept (each firing, resolved, retracted); the oldest go beyond this.
max_alerts = 1000000
# And those older than this go too (checked every minute; alerts still firing stay listed as
# firing, however old). Unset: kept until max_alerts pushes them out.
# max_age = "90d"
# Each shard also journals the events it takes (in <path>/journal, up to 512 MiB a shard;
# what a saved state holds is deleted), so a restart after a crash replays those that came
# after the last save: no partial match or heartbeat of those seconds is lost. Never fsynced:
# a killed process loses nothing, a power cut may lose the last seconds.
journal = true

[engine]
# CEP shards (each an actor on its own thread); 0 means one per CPU core, or as many as
# the saved state has (so a VM given more or fewer cores keeps its groups and deadlines).
shards = 0
# Events queued per shard before the ingest side drops and counts (UDP); TCP waits at three
# quarters of it, so that one TCP sender flooding a shard leaves room for datagrams.
queue_size = 65536
# And the bytes those events may take (256 MiB): an event larger than queue_bytes /
# queue_size (4 KiB here) takes the room of several, so 64 KiB datagrams fill the queue at
# 4,096 of them, not 65,536 (4 GiB).
queue_bytes = 268435456
# How often each shard moves its clock to the wall clock (fires absences); 1ms to 1m.
tick = "100ms"

[api]
# HTTP API: GET /health (answers while the process lives: liveness only; the watchdog
# checks the pipeline), /stats (JSON), /metrics (Prometheus; cepheus_rules_reload_refused
# is 1 while edited rules are refused), /alerts (what `cepheus alerts` shows), POST
# /alerts/ack and /groups/forget (what `cepheus alerts ack` and `cepheus groups forget`
# send). Loopback by default; without a token, only requests addressed to localhost are
# answered (but /health, open to liveness probes).
listen = "127.0.0.1:9514"
# A file holding a token (one line, at least 16 characters; refused if every user may read
# or write it: mode 0640). When set, every path but /health needs the header
# "Authorization: Bearer <token>" (/health stays open for liveness probes). Required when
# `listen` is not a loopback address.
# token_file = "/etc/cepheus/api.token"
# A Unix socket the API answers on too, created at start (mode 0660: the agent's user and
# group), without the token: who may open the socket may ask. `cepheus alerts` and
# `cepheus groups` use it when the configuration names one they can open.
# socket = "/run/cepheus/api.sock"

[output]
# Alert changes as JSON lines on stdout (the same shape as `cepheus replay`).
stdout = true
# And appended to a file, for a log shipper (created with mode 0640; moved away by logrotate
# or removed, it is made anew within a second, so no copytruncate is needed). The store
# keeps every change whatever the outputs.
# file = "/var/log/cepheus/alerts.jsonl"
# And forwarded to a syslog collector (a SIEM) as RFC 5424 messages: "udp://IP:PORT", or
# "tcp://IP:PORT" (octet counting, reconnected when the connection fails or the collector
# closed it, looked at before each message, so a restarted collector loses none). Facility auth,
# severity from the rule's (critical: crit, high: err, medium: warning, low: notice, info:
# info), APP-NAME cepheus, MSGID the state (firing, resolved, retracted), the message the
# alert's JSON. Up to 10,000 wait in its queue while the collector is slow or away; beyond,
# they wait in the store and follow in order as the queue drains (a change the store could
# not keep, its disk nearly full, or pruned from it by store.max_alerts or max_age before it
# was sent, is dropped and counted: syslog_unsent, as is over UDP a
# send the collector's closed port refused); syslog_sent counts those handed over,
# syslog_failed the tries that failed, syslog_waiting (a gauge) what waits in the queue now.
# syslog = "tcp://10.0.0.5:514"
# And POSTed as JSON to an HTTP(S) endpoint: {"alerts": [<alert>, ...]}, up to 100 changes a
# request, in order. A failed request (no connection, a timeout, 5xx, 429) is tried again
# after 1 s, then twice as long each time up to a minute; another 4xx drops it. Up to 10,000
# changes wait in its queue (webhook_waiting, a gauge; webhook_failed counts the failed
# requests); beyond, they wait in the store and follow in order as the queue drains (one the
# store could not keep, or pruned by store.max_alerts or max_age before it was sent, is
# dropped and counted, webhook_unsent, as is what is left in the
# queue when the agent stops, 5 s after its shards have drained: sent at the next start). HTTPS checks the certificate against the system's
# roots. The token file's one line is sent as `Authorization: Bearer <token>`.
# webhook = "https://alerts.example.com/cepheus"
# webhook_token_file = "/etc/cepheus/webhook.token"

# Inhibition (as Alertmanager's): while an alert of rule `source` fires, the alerts of the
# `targets` rules (every rule when left out) whose groups have the same values of the
# `equal` fields, and that begin firing then, do not go to the webhook nor to syslog (they
# are kept, listed and written to stdout and the file with `"inhibited": {"by": ID, "rule":
# ...}`, and so are their ends); when the source alert ends, those still firing are sent.
# Only the source's episodes inhibit (an absence, a closure: a match never ends); `cepheus
# silence` mutes by hand instead.
# [[inhibit]]
# source = "heartbeat-missing"
# targets = ["sshd-down", "disk-full"]
# equal = ["host"]

# Live capture (optional, needs root or CAP_NET_RAW): flows of one interface become events.
# If the interface goes down or is removed, or is not there yet at start (a mirror port's
# NIC that comes up later; `config check` warns of it), it is opened every 5 s until it can
# be (capture.down in /stats is 1 meanwhile). capture.dropped counts the frames cepheus itself could not keep up
# with, capture.kernel_dropped those the kernel dropped before cepheus read them (its socket
# buffer was full): either one above 0 means flows are missing packets.
# [capture]
# interface = "eth0"
# filter = "not port 22"        # tcpdump's words over IP: see `cepheus flows --help`
# Also read the syslog seen on the wire (UDP and TCP to ports 514 and 5514) as syslog events,
# with `peer` = the sender: for a mirror port. Leave it off when this host receives that
# syslog on its own sockets (each message would count twice).
# syslog = false
"#;

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the configuration file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax or an unknown/mistyped key.
    #[error("{path}: {message}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// toml's message (with line and column).
        message: String,
    },
    /// Values of the right type but not allowed: every one found, one line each.
    #[error("{}", problems.iter().map(|p| format!("{}: `{}`: {}", path.display(), p.key, p.message)).collect::<Vec<_>>().join("\n"))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, in the order of the documented keys.
        problems: Vec<Problem>,
    },
}

/// One thing wrong in a configuration: the key and why, for the operator who fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key, dotted.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

impl Problem {
    fn new(key: &'static str, message: impl Into<String>) -> Problem {
        Problem {
            key,
            message: message.into(),
        }
    }

    /// A problem from an error that names its key first (`run` prints it as it is), the key
    /// not said twice.
    fn keyed(key: &'static str, e: &anyhow::Error) -> Problem {
        let e = format!("{e:#}");
        let message = e
            .strip_prefix(key)
            .and_then(|r| r.strip_prefix(": "))
            .unwrap_or(&e);
        Problem::new(key, message)
    }
}

/// The whole configuration.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Syslog listeners and parsing.
    pub syslog: SyslogConfig,
    /// Rule files.
    pub rules: RulesConfig,
    /// Data directory.
    pub store: StoreConfig,
    /// CEP shards.
    pub engine: EngineSection,
    /// HTTP API.
    pub api: ApiConfig,
    /// Alert outputs.
    pub output: OutputConfig,
    /// Optional live capture.
    pub capture: Option<CaptureConfig>,
    /// `[[inhibit]]`: alerts that mute others while they fire.
    pub inhibit: Vec<super::silence::InhibitRule>,
}

/// `[syslog]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyslogConfig {
    /// UDP listen addresses.
    #[serde(deserialize_with = "addrs")]
    pub udp: Vec<SocketAddr>,
    /// TCP listen addresses.
    #[serde(deserialize_with = "addrs")]
    pub tcp: Vec<SocketAddr>,
    /// A TCP connection that completes no message for this long is closed.
    pub tcp_idle_timeout: DurationText,
    /// Most concurrent TCP connections.
    pub max_connections: usize,
    /// Largest message in bytes.
    pub max_message_size: usize,
    /// Zone of RFC 3164 stamps.
    pub timezone: String,
    /// Duplicate window.
    pub dedup_window: DurationText,
    /// Duplicate filter capacity.
    pub dedup_capacity: usize,
    /// UDP socket receive buffer in bytes (0: system default).
    pub udp_receive_buffer: usize,
    /// Files (or `-`, stdin) read line by line and followed.
    pub files: Vec<PathBuf>,
    /// Where reading a file begins at start-up.
    pub files_from: FilesFrom,
    /// The senders (networks or addresses) whose syslog is taken; empty: any sender.
    #[serde(deserialize_with = "nets")]
    pub allowed_senders: Vec<ipnet::IpNet>,
}

/// Where reading a followed file begins at start-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FilesFrom {
    /// After the lines already there (`tail -F`).
    #[default]
    End,
    /// From the first line.
    Beginning,
}

impl Default for SyslogConfig {
    fn default() -> Self {
        let lo: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 5514));
        SyslogConfig {
            udp: vec![lo],
            tcp: vec![lo],
            tcp_idle_timeout: DurationText(Duration::from_secs(300)),
            max_connections: 1024,
            max_message_size: 65536,
            timezone: "UTC".into(),
            dedup_window: DurationText(Duration::from_secs(2)),
            dedup_capacity: 65536,
            udp_receive_buffer: 8 * 1024 * 1024,
            files: Vec::new(),
            files_from: FilesFrom::End,
            allowed_senders: Vec::new(),
        }
    }
}

/// `[rules]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RulesConfig {
    /// Rule files or folders; empty means `rules/` or the built-in rules.
    pub paths: Vec<PathBuf>,
}

/// `[store]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Data directory as written in the file; unset means [`StoreConfig::DEFAULT_PATH`]
    /// (relative to the working directory, not to the file: it was not written there).
    pub path: Option<PathBuf>,
    /// How often the shards save their engines' state.
    pub checkpoint_every: DurationText,
    /// Alert changes kept.
    pub max_alerts: u64,
    /// Alert changes older than this are dropped (firing alerts stay listed); unset: kept
    /// until `max_alerts` pushes them out.
    pub max_age: Option<DurationText>,
    /// Whether the shards journal the events they take between two saves (so a crash loses
    /// none of them).
    pub journal: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            path: None,
            checkpoint_every: DurationText(Duration::from_secs(5)),
            max_alerts: 1_000_000,
            max_age: None,
            journal: true,
        }
    }
}

impl StoreConfig {
    /// Where the data goes when the file does not say.
    pub const DEFAULT_PATH: &str = "./cepheus-data";

    /// The data directory.
    pub fn path(&self) -> &Path {
        self.path
            .as_deref()
            .unwrap_or(Path::new(StoreConfig::DEFAULT_PATH))
    }
}

/// `[engine]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSection {
    /// Shards; 0 = number of cores.
    pub shards: usize,
    /// Events queued per shard.
    pub queue_size: usize,
    /// Bytes of events queued per shard (a large event takes the room of several).
    pub queue_bytes: usize,
    /// Clock tick of the shards.
    pub tick: DurationText,
}

impl Default for EngineSection {
    fn default() -> Self {
        EngineSection {
            shards: 0,
            queue_size: 65536,
            queue_bytes: 256 << 20,
            tick: DurationText(Duration::from_millis(100)),
        }
    }
}

/// `[api]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// Listen address of the HTTP API.
    #[serde(deserialize_with = "addr")]
    pub listen: SocketAddr,
    /// File holding the API token; required off loopback.
    pub token_file: Option<PathBuf>,
    /// A Unix socket the API also answers on, without the token (its file mode, 0660, is the
    /// access control).
    pub socket: Option<PathBuf>,
}

impl ApiConfig {
    /// The API token from `token_file`, if one is configured: read and trimmed, at least 16
    /// characters. The agent serves with it and `cepheus groups` sends it.
    pub fn token(&self) -> anyhow::Result<Option<String>> {
        let Some(p) = &self.token_file else {
            return Ok(None);
        };
        let t = crate::rulefiles::read_text(p)
            .map_err(|e| anyhow::anyhow!("api.token_file: cannot read {}: {e}", p.display()))?;
        let t = t.trim().to_string();
        if t.contains(['\r', '\n']) {
            anyhow::bail!(
                "api.token_file: {} holds more than one line: the token is the file's one line",
                p.display()
            );
        }
        if t.len() < 16 {
            anyhow::bail!(
                "api.token_file: {} holds no token of at least 16 characters",
                p.display()
            );
        }
        Ok(Some(t))
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9514)),
            token_file: None,
            socket: None,
        }
    }
}

/// `[output]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputConfig {
    /// JSON lines on stdout.
    pub stdout: bool,
    /// JSON lines appended to this file (reopened when it is moved or removed).
    pub file: Option<PathBuf>,
    /// Alert changes forwarded as RFC 5424 syslog messages to a collector.
    #[serde(deserialize_with = "forward", default)]
    pub syslog: Option<Forward>,
    /// Alert changes POSTed as JSON to this `http://` or `https://` endpoint.
    #[serde(deserialize_with = "webhook_url", default)]
    pub webhook: Option<String>,
    /// A file holding the webhook's bearer token (sent as `Authorization: Bearer ...`).
    pub webhook_token_file: Option<PathBuf>,
}

impl OutputConfig {
    /// Where `[output] webhook` posts, its token read (an unreadable or empty file is an
    /// error naming the key).
    pub fn webhook_target(&self) -> anyhow::Result<Option<super::webhook::Target>> {
        let Some(url) = &self.webhook else {
            return Ok(None);
        };
        let token = match &self.webhook_token_file {
            None => None,
            Some(p) => {
                let t = crate::rulefiles::read_text(p).map_err(|e| {
                    anyhow::anyhow!(
                        "output.webhook_token_file: cannot read {}: {e}",
                        p.display()
                    )
                })?;
                let t = t.trim().to_string();
                if t.is_empty() {
                    anyhow::bail!(
                        "output.webhook_token_file: {} holds no token (one line, not empty)",
                        p.display()
                    );
                }
                if t.contains(['\r', '\n']) {
                    anyhow::bail!(
                        "output.webhook_token_file: {} holds more than one line: the token is the file's one line",
                        p.display()
                    );
                }
                Some(t)
            }
        };
        Ok(Some(super::webhook::Target {
            url: url.clone(),
            token,
        }))
    }
}

fn webhook_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    webhook_endpoint(&s)
        .map(|u| Some(u.to_string()))
        .map_err(|why| {
            serde::de::Error::custom(format!(
                "`{s}`: {why}: write an http:// or https:// URL with a host (e.g. \"https://alerts.example.com/hook\"); a token goes in `webhook_token_file`, not in the URL"
            ))
        })
}

/// `output.webhook` read as a URL (RFC 3986, by the `url` crate: the scheme and host in any
/// case, IPv6 in brackets, ports checked), or why it cannot be posted to.
fn webhook_endpoint(s: &str) -> Result<url::Url, String> {
    // What the parser would mend silently (blanks and control characters it drops, a
    // missing `//`) is refused: the URL posted to is the one written.
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("blanks or control characters in it".into());
    }
    let lower = s.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err("it does not begin with http:// or https://".into());
    }
    let u = url::Url::parse(s).map_err(|e| e.to_string())?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!("the scheme is {}", u.scheme()));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("a user or password in the URL".into());
    }
    if u.port() == Some(0) {
        return Err("port 0".into());
    }
    Ok(u)
}

/// Whether the webhook's host is this machine (so a token sent over plain http stays on it).
fn webhook_on_loopback(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Domain(d)) => d.trim_end_matches('.').eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.to_canonical().is_loopback(),
        None => false,
    }
}

/// Where `[output] syslog` forwards: `udp://IP:PORT` or `tcp://IP:PORT` (octet counting).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// One datagram per alert change.
    Udp(SocketAddr),
    /// One connection, messages framed by octet counting (RFC 6587), reconnected on failure.
    Tcp(SocketAddr),
}

fn forward<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Forward>, D::Error> {
    let s = String::deserialize(d)?;
    let bad = || {
        format!("`{s}`: write \"udp://IP:PORT\" or \"tcp://IP:PORT\" (e.g. \"tcp://10.0.0.5:514\")")
    };
    let (scheme, rest) = s
        .split_once("://")
        .ok_or_else(|| serde::de::Error::custom(bad()))?;
    let a = parse_addr(rest).map_err(serde::de::Error::custom)?;
    match scheme {
        "udp" => Ok(Some(Forward::Udp(a))),
        "tcp" => Ok(Some(Forward::Tcp(a))),
        _ => Err(serde::de::Error::custom(bad())),
    }
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            stdout: true,
            file: None,
            syslog: None,
            webhook: None,
            webhook_token_file: None,
        }
    }
}

/// `[capture]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureConfig {
    /// Interface name.
    pub interface: String,
    /// Capture filter (see `cepheus flows --help`).
    #[serde(default)]
    pub filter: String,
    /// Also read the syslog on the wire (UDP/TCP to 514 and 5514) into the rules.
    #[serde(default)]
    pub syslog: bool,
}

/// A duration written as text (`"2s"`), parsed like rule-file durations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationText(pub Duration);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// Text, or a number said to need its unit (`5` is not `"5s"`).
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = DurationText;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a duration as a string with its unit, e.g. \"5s\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<DurationText, E> {
                Duration::parse(s).map(DurationText).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<DurationText, E> {
                Err(if n < 0 {
                    negative(n)
                } else {
                    E::custom(format!(
                        "a duration is a string with its unit: write \"{n}s\" for {n} seconds (or \"{n}ms\", \"{n}m\"), not {n}"
                    ))
                })
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<DurationText, E> {
                self.visit_i64(n.min(i64::MAX as u64) as i64)
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<DurationText, E> {
                Err(if n < 0.0 {
                    negative(n)
                } else {
                    E::custom(format!(
                        "a duration is a string with its unit: write e.g. \"{n}s\", not {n}"
                    ))
                })
            }
        }
        /// A negative number where a duration was due.
        fn negative<E: serde::de::Error>(n: impl std::fmt::Display) -> E {
            E::custom(format!(
                "a duration is never negative, and is a string with its unit (e.g. \"5s\"), not {n}"
            ))
        }
        d.deserialize_any(Visitor)
    }
}

/// A listen address as `IP:PORT`, with a hint for what it is not (a name, a missing port).
fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    t.parse().map_err(|_| {
        // What is wrong, when it can be told: no port, or a port past 65535.
        let why = if t.parse::<std::net::IpAddr>().is_ok() {
            " (the port is missing)"
        } else if let Some((ip, port)) = t.rsplit_once(':')
            && ip.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok()
            && port.parse::<u64>().is_ok_and(|p| p > 65535)
        {
            " (a port is at most 65535)"
        } else {
            ""
        };
        format!(
            "`{s}` is not an IP address and port{why}: write e.g. \"127.0.0.1:5514\", \"0.0.0.0:514\" or \"[::1]:5514\" (names such as localhost are not resolved)"
        )
    })
}

fn addr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let s = String::deserialize(d)?;
    parse_addr(&s).map_err(serde::de::Error::custom)
}

/// Networks (`10.0.0.0/8`, `2001:db8::/32`) or single addresses (`192.0.2.7`); a network with
/// bits set past its prefix length is refused (most likely a typo).
fn nets<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<ipnet::IpNet>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| parse_net(s).map_err(serde::de::Error::custom))
        .collect()
}

/// One entry of `syslog.allowed_senders`.
pub(crate) fn parse_net(s: &str) -> Result<ipnet::IpNet, String> {
    let t = s.trim();
    if let Ok(a) = t.parse::<std::net::IpAddr>() {
        return Ok(ipnet::IpNet::from(a.to_canonical()));
    }
    let net: ipnet::IpNet = t.parse().map_err(|_| {
        format!("`{t}` is no network or address (10.0.0.0/8, 2001:db8::/32, 192.0.2.7)")
    })?;
    if net.trunc() != net {
        return Err(format!(
            "`{t}` has bits set past its prefix length: the network is {}",
            net.trunc()
        ));
    }
    Ok(net)
}

fn addrs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<SocketAddr>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| parse_addr(s).map_err(serde::de::Error::custom))
        .collect()
}

impl DurationText {
    /// As a std duration (negative counts as zero).
    pub fn std(self) -> std::time::Duration {
        std::time::Duration::from_nanos(u64::try_from(self.0.0).unwrap_or(0))
    }
}

/// serde's names of Rust's number types in a message (`expected usize`) in words an operator
/// reads (`expected a whole number, 0 or more`).
fn plain_types(message: &str) -> String {
    const WORDS: [(&str, &str); 9] = [
        ("expected usize", "expected a whole number, 0 or more"),
        ("expected u64", "expected a whole number, 0 or more"),
        (
            "expected u32",
            "expected a whole number from 0 to 4294967295",
        ),
        ("expected u16", "expected a whole number from 0 to 65535"),
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected i64", "expected a whole number"),
        ("expected i32", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
    ];
    let mut out = message.to_string();
    for (rust, words) in WORDS {
        // (Whole words only: `expected u8` is not the start of `expected u80`.)
        let mut from = 0;
        while let Some(i) = out[from..].find(rust).map(|i| from + i) {
            let end = i + rust.len();
            if out[end..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
                from = end;
                continue;
            }
            out.replace_range(i..end, words);
            from = i + words.len();
        }
    }
    out
}

impl Config {
    /// Parses a configuration text (`path` only names it in errors) and validates it.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let cfg = Config::parse_unchecked(path, text)?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Parses without validating the values (see [`Config::problems`]). A key that is unknown
    /// or of the wrong type is said with every other such key, not only the first: each
    /// one's line is set aside and the file read again (TOML that does not parse at all is
    /// one error, and so is an unknown table, whose keys would then be taken for the table
    /// before it).
    fn parse_unchecked(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let (cfg, set_aside) = Config::parse_setting_aside(path, text)?;
        match set_aside {
            None => Ok(cfg),
            Some(e) => Err(e),
        }
    }

    /// [`Config::parse_unchecked`], but the keys of a wrong name or type are set aside (their
    /// defaults taken) and said apart, so that `config check` can go on to every other
    /// problem of the file at once. `Err` when what is left does not parse either.
    fn parse_setting_aside(
        path: &Path,
        text: &str,
    ) -> Result<(Config, Option<ConfigError>), ConfigError> {
        // (In the file's order, whatever order the reader found them in.)
        let fail = |mut messages: Vec<(usize, String)>| {
            messages.sort();
            ConfigError::Toml {
                path: path.to_path_buf(),
                message: (messages.into_iter().map(|(_, m)| m))
                    .collect::<Vec<_>>()
                    .join("\n"),
            }
        };
        let mut text = text.to_string();
        let mut messages = Vec::new();
        let mut set_aside: Vec<String> = Vec::new();
        for _ in 0..32 {
            let e = match toml::from_str::<Config>(&text) {
                Ok(cfg) if messages.is_empty() => return Ok((cfg, None)),
                Ok(cfg) => return Ok((cfg, Some(fail(messages)))),
                Err(e) => e,
            };
            let at = e.span().map_or(usize::MAX, |r| r.start);
            let mut message = plain_types(e.to_string().trim_end());
            let hint = cepheus_core::rules::diag::unknown_key_hint(e.message());
            if !hint.is_empty() {
                message.push_str("\n  = hint: ");
                message.push_str(&hint);
            }
            // A required key set aside for its type is missing now: said once, as mistyped.
            let echo = set_aside
                .iter()
                .any(|k: &String| message.contains(&format!("missing field `{k}`")));
            if !echo {
                messages.push((at, message));
            }
            let Some(span) = e.span() else { break };
            let start = text[..span.start.min(text.len())]
                .rfind('\n')
                .map_or(0, |i| i + 1);
            let line = text[start..].trim_start();
            if echo {
                break;
            }
            if let Some((key, _)) = line.split_once('=') {
                set_aside.push(key.trim().trim_matches('"').to_string());
            }
            if line.starts_with('#') {
                break;
            }
            if line.starts_with('[') {
                // An unknown table: set aside with its keys (to the next table), which would
                // otherwise be read as the previous table's.
                let end = text[start..]
                    .match_indices('\n')
                    .map(|(i, _)| start + i + 1)
                    .find(|&i| text[i..].trim_start().starts_with('['))
                    .unwrap_or(text.len());
                let block: String = text[start..end]
                    .split_inclusive('\n')
                    .map(|l| format!("#{l}"))
                    .collect();
                text.replace_range(start..end, &block);
            } else {
                text.insert(start, '#');
            }
            // A value over several lines, set aside by its first: the rest no longer parses.
            if text.parse::<toml::Table>().is_err() {
                break;
            }
        }
        Err(fail(messages))
    }

    /// Reads, parses and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let cfg = Config::read(path)?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Reads and parses a configuration file, leaving the values to [`Config::problems`].
    pub fn read(path: &Path) -> Result<Config, ConfigError> {
        match Config::read_setting_aside(path)? {
            (cfg, None) => Ok(cfg),
            (_, Some(e)) => Err(e),
        }
    }

    /// [`Config::read`], with the keys of a wrong name or type set aside and said apart (see
    /// [`Config::parse_setting_aside`]): what `config check` reads, to say everything at once.
    pub fn read_setting_aside(path: &Path) -> Result<(Config, Option<ConfigError>), ConfigError> {
        let text = crate::rulefiles::read_text(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let (mut cfg, set_aside) = Config::parse_setting_aside(path, &text)?;
        if let Some(dir) = path.parent() {
            cfg.resolve_paths(dir);
        }
        Ok((cfg, set_aside))
    }

    /// Makes the relative paths written in the file relative to its folder `dir` (the
    /// defaults stay relative to the working directory: they were not written there).
    fn resolve_paths(&mut self, dir: &Path) {
        if dir.as_os_str().is_empty() {
            return;
        }
        let at = |p: &mut PathBuf| {
            // (An empty path stays empty: `problems` refuses it, rather than it naming the
            // configuration's own folder.)
            if p.is_relative() && p.as_os_str() != "-" && !p.as_os_str().is_empty() {
                *p = dir.join(&*p);
            }
        };
        self.syslog.files.iter_mut().for_each(at);
        self.rules.paths.iter_mut().for_each(at);
        if let Some(t) = self.api.token_file.as_mut() {
            at(t);
        }
        if let Some(t) = self.api.socket.as_mut() {
            at(t);
        }
        if let Some(t) = self.output.file.as_mut() {
            at(t);
        }
        if let Some(t) = self.output.webhook_token_file.as_mut() {
            at(t);
        }
        if let Some(p) = self.store.path.as_mut() {
            at(p);
        }
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                problems,
            })
        }
    }

    /// Every address it listens on, with its key.
    fn listeners(&self) -> impl Iterator<Item = (&'static str, &SocketAddr)> {
        self.syslog
            .udp
            .iter()
            .map(|a| ("syslog.udp", a))
            .chain(self.syslog.tcp.iter().map(|a| ("syslog.tcp", a)))
            .chain(std::iter::once(("api.listen", &self.api.listen)))
    }

    /// Every value wrong in itself or against another (no file or socket is touched).
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        let mut bad = |key: &'static str, message: String| out.push(Problem::new(key, message));
        if let Err(e) = self.zone() {
            bad("syslog.timezone", e.to_string());
        }
        if self.syslog.max_message_size < 16 || self.syslog.max_message_size > 16 << 20 {
            bad(
                "syslog.max_message_size",
                "must be between 16 and 16777216 bytes".into(),
            );
        }
        if self.syslog.max_connections == 0 {
            bad("syslog.max_connections", "must be at least 1".into());
        }
        if self.syslog.tcp_idle_timeout.0 < Duration::from_secs(1) {
            bad(
                "syslog.tcp_idle_timeout",
                "must be at least 1s (shorter closes senders between two messages)".into(),
            );
        }
        if self.syslog.dedup_capacity == 0 && self.syslog.dedup_window.0.0 > 0 {
            bad(
                "syslog.dedup_capacity",
                "must be at least 1 (set dedup_window = \"0s\" to turn the filter off)".into(),
            );
        }
        if self.inhibit.len() > super::silence::MAX_INHIBIT_RULES {
            bad(
                "inhibit",
                format!("at most {} rules", super::silence::MAX_INHIBIT_RULES),
            );
        }
        for r in &self.inhibit {
            if let Some(why) = r.problem() {
                bad("inhibit", why);
            }
        }
        if self.engine.shards > 256 {
            bad("engine.shards", "at most 256".into());
        }
        if self.engine.queue_size == 0 {
            bad("engine.queue_size", "must be at least 1".into());
        }
        if self.engine.queue_bytes < 1 << 20 {
            bad(
                "engine.queue_bytes",
                "must be at least 1048576 (1 MiB)".into(),
            );
        }
        if self.store.checkpoint_every.0 < Duration::from_millis(10) {
            bad("store.checkpoint_every", "must be at least 10ms".into());
        }
        if self.store.max_alerts == 0 {
            bad("store.max_alerts", "must be at least 1".into());
        }
        if let Some(a) = self.store.max_age
            && a.0 < Duration::from_secs(60)
        {
            bad("store.max_age", "must be at least 1m".into());
        }
        if self.engine.tick.0 < Duration::from_millis(1) {
            bad("engine.tick", "must be at least 1ms".into());
        }
        if self.engine.tick.0 > Duration::from_secs(60) {
            bad(
                "engine.tick",
                "must be at most 1m: absences fire only as often as the clock moves".into(),
            );
        }
        if self.store.checkpoint_every.0 > Duration::from_secs(24 * 3600) {
            bad(
                "store.checkpoint_every",
                "must be at most 1d: a restart replays the event journal since the last save"
                    .into(),
            );
        }
        // Empty paths: each names a file or folder, never "here".
        let empty = |p: &PathBuf| p.as_os_str().is_empty();
        for (key, given) in [
            ("syslog.files", self.syslog.files.iter().any(empty)),
            ("rules.paths", self.rules.paths.iter().any(empty)),
            ("store.path", self.store.path.as_ref().is_some_and(empty)),
            (
                "api.token_file",
                self.api.token_file.as_ref().is_some_and(empty),
            ),
            ("api.socket", self.api.socket.as_ref().is_some_and(empty)),
            ("output.file", self.output.file.as_ref().is_some_and(empty)),
            (
                "output.webhook_token_file",
                self.output.webhook_token_file.as_ref().is_some_and(empty),
            ),
        ] {
            if given {
                bad(key, "an empty path: name a file or folder".into());
            }
        }
        // Port 0 binds a port the system picks, which no sender or client would know.
        for (key, a) in self.listeners() {
            if a.port() == 0 {
                bad(
                    key,
                    format!(
                        "{a}: port 0 lets the system pick a port no sender or client would know: name a fixed port"
                    ),
                );
            }
        }
        if let Some(sock) = &self.api.socket
            && sock.as_os_str().len() > 107
        {
            bad(
                "api.socket",
                format!(
                    "{} is {} bytes long: a Unix socket's path may be at most 107 bytes; choose a shorter one",
                    sock.display(),
                    sock.as_os_str().len()
                ),
            );
        }
        if let Some(c) = &self.capture
            && let Err(e) = crate::flow::filter::Filter::parse(&c.filter)
        {
            bad("capture.filter", e.to_string());
        }
        if !self.api.listen.ip().is_loopback() && self.api.token_file.is_none() {
            bad(
                "api.token_file",
                format!(
                    "api.listen = {} is not a loopback address: set api.token_file (requests then need \"Authorization: Bearer <token>\"), or listen on 127.0.0.1",
                    self.api.listen
                ),
            );
        }
        // Two listeners of one protocol on one address: the second bind would fail.
        for (key, addrs) in [
            ("syslog.udp", &self.syslog.udp),
            ("syslog.tcp", &self.syslog.tcp),
        ] {
            for (i, a) in addrs.iter().enumerate() {
                if let Some(b) = addrs[..i].iter().find(|b| overlap(a, b)) {
                    let why = if a == b {
                        format!("{a} is listed twice")
                    } else {
                        format!(
                            "{a} and {b} claim the same port (a wildcard address takes it on every address)"
                        )
                    };
                    bad(key, why);
                }
            }
        }
        if let Some(t) = self
            .syslog
            .tcp
            .iter()
            .find(|t| overlap(t, &self.api.listen))
        {
            bad(
                "api.listen",
                format!(
                    "{} is also a syslog.tcp listener ({t}): give the API its own port",
                    self.api.listen
                ),
            );
        }
        out
    }

    /// What is valid but likely not meant (said by `config check` and in `run`'s log).
    pub fn warnings(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        if self.syslog.udp.is_empty()
            && self.syslog.tcp.is_empty()
            && self.syslog.files.is_empty()
            && self.capture.is_none()
        {
            out.push(Problem::new(
                "syslog",
                "no input: `udp`, `tcp` and `files` are empty and there is no `[capture]`, so no event will arrive (only expected groups' absences can fire)",
            ));
        }
        if let Some(c) = &self.capture
            && c.syslog
            && let Some(a) = self
                .syslog
                .udp
                .iter()
                .chain(&self.syslog.tcp)
                .find(|a| matches!(a.port(), 514 | 5514) && !a.ip().is_loopback())
        {
            out.push(Problem::new(
                "capture.syslog",
                format!(
                    "reads the syslog on the wire to ports 514 and 5514, and this agent listens on {a} too: a message sent to this host would count twice (leave capture.syslog for a mirror port)"
                ),
            ));
        }
        let o = &self.output;
        if !o.stdout && o.file.is_none() && o.syslog.is_none() && o.webhook.is_none() {
            out.push(Problem::new(
                "output.stdout",
                "alert changes go to no output: `output.stdout = false` and no `file`, `syslog` or `webhook` is set (the store still keeps them, and `cepheus alerts` lists them)",
            ));
        }
        if let (Some(url), Some(_)) = (&o.webhook, &o.webhook_token_file)
            && let Ok(u) = webhook_endpoint(url)
            && u.scheme() == "http"
            && !webhook_on_loopback(&u)
        {
            out.push(Problem::new(
                "output.webhook",
                format!(
                    "the token of webhook_token_file goes to {} in clear text (http://): write https://",
                    u.host_str().unwrap_or_default()
                ),
            ));
        }
        if let Some(f) = &o.webhook_token_file {
            out.extend(open_to_all("output.webhook_token_file", f));
        }
        if o.webhook_token_file.is_some() && o.webhook.is_none() {
            out.push(Problem::new(
                "output.webhook_token_file",
                "is set but `output.webhook` is not: no request will carry it",
            ));
        }
        if let Some(f) = &self.api.token_file {
            out.extend(open_to_all("api.token_file", f));
        }
        for r in &self.inhibit {
            if r.targets.is_empty() && r.equal.is_empty() {
                out.push(Problem::new(
                    "inhibit",
                    format!(
                        "source `{}` with no `targets` and no `equal`: while any of its alerts fires, every other rule's new alerts, on every host, go to no webhook or syslog (name the `targets`, or the `equal` fields such as host)",
                        r.source
                    ),
                ));
            }
            if r.targets.contains(&r.source) {
                out.push(Problem::new(
                    "inhibit",
                    format!(
                        "`targets` names the source `{}`: an alert of it is never inhibited by its own rule (as in Alertmanager)",
                        r.source
                    ),
                ));
            }
        }
        out
    }

    /// What `run` finds at start-up beyond the values: missing files and folders, an
    /// unreadable token (the rules themselves are checked by their own command).
    pub fn environment_problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        if let Some(f) = &self.output.file
            && let Err(why) = output_file_usable(f)
        {
            out.push(Problem::new("output.file", why));
        }
        if let Err(e) = self.output.webhook_target() {
            out.push(Problem::keyed("output.webhook_token_file", &e));
        }
        let mut followed = std::collections::HashMap::new();
        for f in &self.syslog.files {
            if f.as_os_str() == "-" {
                continue;
            }
            // One file under two names: two readers, each line read twice.
            if let Ok(m) = std::fs::metadata(f) {
                use std::os::unix::fs::MetadataExt;
                if let Some(first) = followed.insert((m.dev(), m.ino()), f) {
                    out.push(Problem::new(
                        "syslog.files",
                        format!(
                            "{} is the file {} already names: list it once",
                            f.display(),
                            first.display()
                        ),
                    ));
                    continue;
                }
            }
            match std::fs::metadata(f) {
                Ok(m) if m.is_dir() => out.push(Problem::new(
                    "syslog.files",
                    format!("{} is a folder; list the files to follow", f.display()),
                )),
                Ok(m) if !m.is_file() => out.push(Problem::new(
                    "syslog.files",
                    format!(
                        "{} is not a regular file (a FIFO or device cannot be followed)",
                        f.display()
                    ),
                )),
                Ok(_) => {
                    if let Err(e) = std::fs::File::open(f) {
                        out.push(Problem::new(
                            "syslog.files",
                            format!("cannot read {}: {e}", f.display()),
                        ));
                    }
                }
                Err(e) => out.push(Problem::new(
                    "syslog.files",
                    format!("cannot read {}: {e}", f.display()),
                )),
            }
        }
        for p in &self.rules.paths {
            if let Err(e) = std::fs::metadata(p) {
                out.push(Problem::new("rules.paths", format!("{}: {e}", p.display())));
            }
        }
        // Ports below the system's unprivileged start (1024) need CAP_NET_BIND_SERVICE.
        if !may_bind_low_ports() {
            let low = low_port_start();
            for (key, a) in self.listeners() {
                if a.port() != 0 && a.port() < low {
                    out.push(Problem::new(
                        key,
                        format!(
                            "port {} is below {low}: binding it needs CAP_NET_BIND_SERVICE (or root), which this process lacks; grant it, use a port above {}, or forward from the system's syslog daemon",
                            a.port(),
                            low - 1
                        ),
                    ));
                }
            }
        }
        if let Err(why) = store_usable(self.store.path()) {
            out.push(Problem::new("store.path", why));
        }
        if let Some(c) = &self.capture {
            // Opened and closed at once: a missing interface or a missing CAP_NET_RAW shows
            // (with no filter when the filter is wrong: `problems` says that one).
            let filter = crate::flow::filter::Filter::parse(&c.filter).unwrap_or_default();
            let stop = crate::flow::live::Recovery::Stop;
            match crate::flow::live::LiveCapture::start(&c.interface, filter, 16, stop) {
                Ok(cap) => {
                    cap.stop();
                }
                // (Not there yet: `run` waits for it, a warning.)
                Err(crate::flow::live::LiveError::NoSuchInterface(..)) => {}
                Err(e) => out.push(Problem::new("capture.interface", e.to_string())),
            }
        }
        if let Err(e) = self.api.token() {
            out.push(Problem::keyed("api.token_file", &e));
        }
        // A secret every user may read or rewrite is no secret: refused (as OpenSSH refuses
        // such a private key). Any local user would use the API with it.
        for (key, f) in [
            ("api.token_file", &self.api.token_file),
            ("output.webhook_token_file", &self.output.webhook_token_file),
        ] {
            use std::os::unix::fs::PermissionsExt;
            let Some((f, mode)) = f.as_ref().and_then(|f| {
                let m = std::fs::metadata(f).ok()?;
                Some((f, m.permissions().mode()))
            }) else {
                continue;
            };
            let who = if mode & 0o002 != 0 {
                "writable by every user, who could set the token"
            } else if mode & 0o004 != 0 {
                "readable by every user, who could use the token"
            } else {
                continue;
            };
            out.push(Problem::new(
                key,
                format!(
                    "{} is {who} (mode {:04o}): `chmod 0640` it (owner and the agent's group)",
                    f.display(),
                    mode & 0o7777
                ),
            ));
        }
        // `run` makes the socket where nothing is, or where a socket was left.
        if let Some(sock) = &self.api.socket
            && let Ok(m) = std::fs::symlink_metadata(sock)
        {
            use std::os::unix::fs::FileTypeExt;
            if !m.file_type().is_socket() {
                out.push(Problem::new(
                    "api.socket",
                    format!(
                        "{} exists and is not a socket (a {}): name a path where the agent may make its socket",
                        sock.display(),
                        if m.is_dir() { "folder" } else { "file" }
                    ),
                ));
            }
        }
        out
    }

    /// What `config check` can only warn of because it may be made before `run` starts:
    /// `api.socket` in a folder missing now (systemd's `RuntimeDirectory=` makes the packaged
    /// one, /run/cepheus, as it starts the unit).
    pub fn environment_warnings(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        if let Some(c) = &self.capture
            && let Err(e @ crate::flow::live::LiveError::NoSuchInterface(..)) =
                crate::flow::live::interface_exists(&c.interface)
        {
            out.push(Problem::new(
                "capture.interface",
                format!("{e}: `run` waits for it, opening it every 5s (a misspelt name waits for ever: /stats says capture.down)"),
            ));
        }
        if let Some(sock) = &self.api.socket {
            let dir = match sock.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            if !dir.is_dir() {
                out.push(Problem::new(
                    "api.socket",
                    format!(
                        "the folder {} does not exist now: `run` cannot create the socket unless it exists by then (the packaged unit's RuntimeDirectory=cepheus makes /run/cepheus when the service starts; elsewhere create it, or leave `socket` out)",
                        dir.display()
                    ),
                ));
            }
        }
        // An address no interface of this host holds now: `run` could not bind it. Tried
        // with port 0, so a running agent's own ports stand in no way.
        for (key, addr) in self.listeners() {
            if addr.ip().is_unspecified() {
                continue;
            }
            if let Err(e) = std::net::UdpSocket::bind(SocketAddr::new(addr.ip(), 0))
                && e.kind() == std::io::ErrorKind::AddrNotAvailable
            {
                out.push(Problem::new(
                    key,
                    format!(
                        "{} is not an address of this host now: `run` cannot listen on {addr} unless an interface holds it by then (write 0.0.0.0 or [::] for every interface)",
                        addr.ip()
                    ),
                ));
            }
        }
        // (Not the store's owner: `config check` runs as root at install, when the store is
        // the service user's; `run` says it, as that user.)
        out
    }

    /// A store folder (followed through links) that belongs to another user than root or
    /// this process's: that user may plant or swap its files (a saved state read as the
    /// agent's, a state file linked to a secret), said so before anything is read from it.
    pub fn store_owner_warning(&self) -> Option<Problem> {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(self.store.path()).ok()?.uid();
        (owner != 0 && owner != rustix::process::geteuid().as_raw()).then(|| {
            Problem::new(
                "store.path",
                format!(
                    "{} belongs to another user (uid {owner}), who may change what the agent reads back from it: give it to the agent's user (`chown -R`), or name a folder of the agent's own",
                    self.store.path().display()
                ),
            )
        })
    }

    /// The zone of RFC 3164 stamps.
    pub fn zone(&self) -> Result<Zone, crate::ingest::syslog::BadZone> {
        self.syslog.timezone.parse()
    }

    /// The number of shards: `engine.shards`, or the number of cores when 0 (a run with a
    /// saved state continues with that state's count instead: `run::shards_to_run`).
    pub fn shard_count(&self) -> usize {
        if self.engine.shards > 0 {
            return self.engine.shards;
        }
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// The first port an unprivileged process may bind (Linux's
/// `net.ipv4.ip_unprivileged_port_start`, 1024 unless changed).
fn low_port_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(1024)
}

/// Whether this process may bind ports below [`low_port_start`]: root, or holding
/// CAP_NET_BIND_SERVICE (bit 10 of `CapEff` in /proc/self/status). Unknown counts as yes
/// (no false alarm where /proc is not Linux's).
fn may_bind_low_ports() -> bool {
    std::fs::read_to_string("/proc/self/status").map_or(true, |s| status_allows_low_ports(&s))
}

/// [`may_bind_low_ports`] on the text of a /proc/<pid>/status.
fn status_allows_low_ports(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_none_or(|caps| caps & (1 << 10) != 0)
}

/// Whether `run` can append to the output file (made if missing: the check removes the one
/// it made, leaving no trace).
pub(crate) fn output_file_usable(f: &Path) -> Result<(), String> {
    let existed = f.exists();
    match std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(f)
    {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(f);
            }
            Ok(())
        }
        Err(e) => Err(format!("cannot append to {}: {e}", f.display())),
    }
}

/// Whether `run` can create the store folder (it does at start-up; nothing is written in it
/// yet). Checked by doing it: the folders this creates are removed again.
pub(crate) fn store_usable(path: &Path) -> Result<(), String> {
    // Named whole: a relative one (the default `./cepheus-data`) is relative to the
    // directory the agent was started in, which the operator reading it may not know.
    let whole = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let path = whole.as_path();
    let shown = path.display();
    match std::fs::metadata(path) {
        Ok(m) if !m.is_dir() => return Err(format!("{shown} exists and is not a folder")),
        Ok(_) => {
            // Written in by doing it: a folder another user owns is found now, not when the
            // store first writes.
            let probe = path.join(format!(".cepheus-write-test-{}", std::process::id()));
            std::fs::File::create(&probe)
                .map_err(|e| format!("cannot write in {shown}: {e}{}", denied_hint(&e, path)))?;
            let _ = std::fs::remove_file(&probe);
        }
        Err(_) => {
            // The folders to create, deepest first, so they can be removed again.
            let mut missing = Vec::new();
            let mut p = Some(path);
            while let Some(q) = p.filter(|q| !q.as_os_str().is_empty() && !q.exists()) {
                missing.push(q.to_path_buf());
                p = q.parent();
            }
            let made = std::fs::create_dir_all(path);
            for m in &missing {
                let _ = std::fs::remove_dir(m);
            }
            return made
                .map_err(|e| format!("cannot create {shown}: {e}{}", denied_hint(&e, path)));
        }
    }
    Ok(())
}

/// For a permission refused on the store's folder: who this process runs as, and the fix.
fn denied_hint(e: &std::io::Error, path: &Path) -> String {
    use std::os::unix::fs::MetadataExt as _;
    if e.kind() == std::io::ErrorKind::ReadOnlyFilesystem {
        return " (its file system is mounted read-only: remount it read-write, or set store.path to a folder on another)".into();
    }
    if e.kind() != std::io::ErrorKind::PermissionDenied {
        return String::new();
    }
    let user = crate::api_client::current_user();
    // A folder this user owns but whose mode refuses it writing: chown would change nothing.
    let nearest = path
        .ancestors()
        .find_map(|q| Some((q, std::fs::metadata(q).ok()?)));
    if let Some((q, m)) = nearest
        && m.uid() == rustix::process::geteuid().as_raw()
        && m.mode() & 0o200 == 0
    {
        return format!(
            " (this agent runs as `{user}`, which owns {} but whose mode {:o} does not let it write there: `chmod u+w {}`)",
            q.display(),
            m.mode() & 0o7777,
            q.display()
        );
    }
    format!(
        " (this agent runs as `{user}`: give it the folder, e.g. `sudo install -d -o {user} {p}` or `sudo chown -R {user}: {p}`, or set store.path to a folder it owns)",
        p = path.display()
    )
}

/// Whether two listeners would claim the same port: the same address, or one of them the
/// wildcard of the other's family. Each listener takes its own family only (`IPV6_V6ONLY`,
/// whatever `bindv6only` says), so `[::]` does not take the IPv4 port. Port 0, "any free
/// port", never clashes.
fn overlap(a: &SocketAddr, b: &SocketAddr) -> bool {
    a.port() == b.port()
        && a.port() != 0
        && a.is_ipv4() == b.is_ipv4()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// A secret file (`key`) owned by another user, or that its group may write (and so replace
/// the secret with one it knows): said, with the mode to give it. (One every user may read or
/// write is refused: `environment_problems`.)
fn open_to_all(key: &'static str, f: &Path) -> Option<Problem> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(f).ok();
    let mode = meta.as_ref().map_or(0, |m| m.permissions().mode());
    // Its owner may replace it too: root or the agent's own user, no one else.
    if let Some(owner) = meta.as_ref().map(MetadataExt::uid)
        && owner != 0
        && owner != rustix::process::geteuid().as_raw()
    {
        return Some(Problem::new(
            key,
            format!(
                "{} belongs to another user (uid {owner}), who may replace the secret: `chown root:` it",
                f.display()
            ),
        ));
    }
    if mode & 0o006 != 0 || mode & 0o020 == 0 {
        return None;
    }
    Some(Problem::new(
        key,
        format!(
            "{} is writable by its group (mode {:04o}): `chmod 0640` it (owner and the agent's group)",
            f.display(),
            mode & 0o7777
        ),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn allowed_senders_are_networks_or_addresses() {
        let ok = |s: &str| parse_net(s).unwrap().to_string();
        assert_eq!(ok("10.0.0.0/8"), "10.0.0.0/8");
        assert_eq!(ok(" 192.0.2.7 "), "192.0.2.7/32");
        assert_eq!(ok("::ffff:192.0.2.7"), "192.0.2.7/32");
        assert_eq!(ok("2001:db8::/32"), "2001:db8::/32");
        assert!(
            parse_net("10.1.2.3/8")
                .unwrap_err()
                .contains("the network is 10.0.0.0/8")
        );
        assert!(
            parse_net("web1")
                .unwrap_err()
                .contains("no network or address")
        );
        let cfg = Config::parse(
            Path::new("c.toml"),
            "[syslog]\nallowed_senders = [\"10.0.0.0/8\", \"10.1.2.3/8\"]\n",
        );
        let e = cfg.unwrap_err().to_string();
        assert!(
            e.contains("c.toml") && e.contains("the network is 10.0.0.0/8"),
            "{e}"
        );
    }

    #[test]
    fn inhibit_rules_are_read_and_a_blank_source_refused() {
        let c = Config::parse(
            Path::new("x"),
            "[[inhibit]]\nsource = \"up\"\nequal = [\"host\"]\n[[inhibit]]\nsource = \"dc-down\"\ntargets = [\"up\"]\n",
        )
        .unwrap();
        assert_eq!(c.inhibit.len(), 2);
        assert!(c.inhibit[0].targets("anything"));
        assert!(!c.inhibit[1].targets("svc") && c.inhibit[1].targets("up"));
        let e = Config::parse(Path::new("x"), "[[inhibit]]\nsource = \" \"\n");
        assert!(matches!(
            e,
            Err(ConfigError::Invalid { problems, .. }) if problems[0].key == "inhibit"
        ));
        let broad = Config::parse(Path::new("x"), "[[inhibit]]\nsource = \"up\"\n").unwrap();
        let said: Vec<String> = broad.warnings().iter().map(|p| p.message.clone()).collect();
        assert!(
            said.iter()
                .any(|w| w.contains("no `targets` and no `equal`")),
            "{said:?}"
        );
        assert!(c.warnings().iter().all(|p| p.key != "inhibit"));
        let e = Config::parse(
            Path::new("x"),
            "[[inhibit]]\nsource = \"up\"\nequals = [\"host\"]\n",
        );
        assert!(matches!(e, Err(ConfigError::Toml { .. })), "{e:?}");
    }

    #[test]
    fn default_text_is_the_default() {
        let mut parsed = Config::parse(Path::new("default"), DEFAULT_CONFIG).unwrap();
        // The text writes the default store path out (so it follows the file once copied).
        assert_eq!(parsed.store.path(), Config::default().store.path());
        parsed.store = StoreConfig::default();
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn rejects_unknown_keys_and_bad_values() {
        let e = Config::parse(Path::new("x"), "[syslog]\nudpp = []\n");
        assert!(matches!(e, Err(ConfigError::Toml { .. })), "{e:?}");
        let e = Config::parse(Path::new("x"), "[syslog]\ntimezone = \"Mars/Base\"\n");
        assert!(matches!(
            e,
            Err(ConfigError::Invalid { problems, .. }) if problems[0].key == "syslog.timezone"
        ));
        let e = Config::parse(Path::new("x"), "[engine]\ntick = \"soon\"\n");
        assert!(matches!(e, Err(ConfigError::Toml { .. })), "{e:?}");
        let ok = Config::parse(
            Path::new("x"),
            "capture = { interface = \"eth0\", filter = \"\" }\n[syslog]\nudp = []\n",
        );
        assert!(ok.is_ok(), "{ok:?}");
        // A name or a missing port is said to be one, with what to write.
        for text in [
            "[syslog]\nudp = [\"localhost:5514\"]\n",
            "[syslog]\ntcp = [\"0.0.0.0\"]\n",
            "[api]\nlisten = \"127.0.0.1\"\n",
        ] {
            let e = Config::parse(Path::new("x"), text).map(|_| ()).unwrap_err();
            assert!(
                e.to_string().contains("is not an IP address and port"),
                "{e}"
            );
        }
        let ok = Config::parse(Path::new("x"), "[syslog]\nudp = [\"[::1]:5514\"]\n");
        assert!(ok.is_ok(), "{ok:?}");
        // What is wrong, when it can be told.
        for (text, why) in [
            ("[api]\nlisten = \"127.0.0.1\"\n", "(the port is missing)"),
            (
                "[api]\nlisten = \"127.0.0.1:70000\"\n",
                "(a port is at most 65535)",
            ),
            (
                "[syslog]\nudp = [\"[::1]:99999\"]\n",
                "(a port is at most 65535)",
            ),
        ] {
            let e = Config::parse(Path::new("x"), text).map(|_| ()).unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn an_api_off_loopback_needs_a_token() {
        let e = Config::parse(Path::new("x"), "[api]\nlisten = \"0.0.0.0:9514\"\n");
        assert!(
            matches!(
                &e,
                Err(ConfigError::Invalid { problems, .. }) if problems[0].key == "api.token_file"
            ),
            "{e:?}"
        );
        let ok = Config::parse(
            Path::new("x"),
            "[api]\nlisten = \"0.0.0.0:9514\"\ntoken_file = \"/etc/cepheus/api.token\"\n",
        );
        assert!(ok.is_ok(), "{ok:?}");
        assert!(Config::parse(Path::new("x"), "[api]\nlisten = \"[::1]:9514\"\n").is_ok());
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let e = Config::parse(
            Path::new("c.toml"),
            "[syslog]\nmax_connections = 0\nudp = [\"127.0.0.1:5514\", \"0.0.0.0:5514\"]\ntcp = [\"127.0.0.1:9514\"]\n[engine]\nqueue_size = 0\n",
        );
        let Err(ConfigError::Invalid { problems, .. }) = &e else {
            panic!("{e:?}")
        };
        let keys: Vec<&str> = problems.iter().map(|p| p.key).collect();
        assert_eq!(
            keys,
            [
                "syslog.max_connections",
                "engine.queue_size",
                "syslog.udp",
                "api.listen"
            ]
        );
        let text = e.unwrap_err().to_string();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.lines().all(|l| l.starts_with("c.toml: `")), "{text}");
        // UDP and TCP on one port do not clash, nor two addresses of one family.
        let ok = Config::parse(
            Path::new("x"),
            "[syslog]\nudp = [\"127.0.0.1:5514\", \"127.0.0.2:5514\", \"[::1]:5514\"]\ntcp = [\"0.0.0.0:5514\"]\n",
        );
        assert!(ok.is_ok(), "{ok:?}");
        // Each listener takes its own family: the IPv6 wildcard beside the IPv4 one is fine,
        // beside an IPv6 address of the same port it is not.
        let ok = Config::parse(
            Path::new("x"),
            "[syslog]\nudp = [\"0.0.0.0:5514\", \"[::]:5514\"]\n",
        );
        assert!(ok.is_ok(), "{ok:?}");
        let e = Config::parse(
            Path::new("x"),
            "[syslog]\nudp = [\"[::1]:5514\", \"[::]:5514\"]\n",
        );
        assert!(matches!(e, Err(ConfigError::Invalid { .. })), "{e:?}");
    }

    #[test]
    fn environment_problems_name_missing_files_and_folders() {
        let cfg = Config::parse(
            Path::new("x"),
            "[syslog]\nfiles = [\"/nonexistent/a.log\", \"-\", \"/\"]\n[rules]\npaths = [\"/nonexistent/rules\"]\n",
        )
        .unwrap();
        let keys: Vec<&str> = cfg.environment_problems().iter().map(|p| p.key).collect();
        assert_eq!(keys, ["syslog.files", "syslog.files", "rules.paths"]);
    }

    /// A store folder of another user is said by `run` (as root here: one given to `nobody`).
    #[test]
    fn a_store_folder_of_another_user_is_warned_of() {
        let dir = std::env::temp_dir().join(format!("cepheus-store-owner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = Config::parse(
            Path::new("/nonexistent/c.toml"),
            &format!("[store]\npath = \"{}\"\n", dir.display()),
        )
        .unwrap();
        assert!(cfg.store_owner_warning().is_none());
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
            let w = cfg.store_owner_warning().expect("a warning");
            assert_eq!(w.key, "store.path");
            assert!(
                w.message.contains("belongs to another user (uid 65534)"),
                "{w:?}"
            );
            // Not in `config check`'s list: run as root at install, the store is the
            // service user's.
            assert!(cfg.environment_warnings().is_empty());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_socket_in_a_missing_folder_is_warned_of_not_refused() {
        let cfg = Config::parse(
            Path::new("/nonexistent/c.toml"),
            "[api]\nsocket = \"/nonexistent/run/api.sock\"\n",
        )
        .unwrap();
        let w = cfg.environment_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].key, "api.socket");
        assert!(
            w[0].message.contains("/nonexistent/run does not exist"),
            "{}",
            w[0].message
        );
        assert!(
            !cfg.environment_problems()
                .iter()
                .any(|p| p.key == "api.socket")
        );
        let here = Config::parse(
            Path::new("/tmp/c.toml"),
            "[api]\nsocket = \"/tmp/api.sock\"\n",
        )
        .unwrap();
        assert!(here.environment_warnings().is_empty());
    }

    /// An address of no interface here (TEST-NET-1) is said by `config check`; the
    /// defaults (loopback) and the wildcard are not.
    #[test]
    fn a_listen_address_not_of_this_host_is_warned_of() {
        let cfg = Config::parse(
            Path::new("/tmp/c.toml"),
            "[syslog]\nudp = [\"192.0.2.1:47514\", \"0.0.0.0:47515\"]\ntcp = [\"127.0.0.1:47516\"]\n",
        )
        .unwrap();
        let w = cfg.environment_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].key, "syslog.udp");
        assert!(
            w[0].message
                .contains("192.0.2.1 is not an address of this host now"),
            "{}",
            w[0].message
        );
    }

    #[test]
    fn output_webhook_takes_an_http_or_https_url_and_its_token_from_a_file() {
        let cfg = Config::parse(
            Path::new("/etc/cepheus/cepheus.toml"),
            "[output]\nwebhook = \"https://alerts.example.com/hook?x=1\"\nwebhook_token_file = \"hook.token\"\n",
        )
        .unwrap();
        assert_eq!(
            cfg.output.webhook.as_deref(),
            Some("https://alerts.example.com/hook?x=1")
        );
        for (good, read) in [
            ("http://127.0.0.1:8080/x", "http://127.0.0.1:8080/x"),
            ("https://[::1]:8443/", "https://[::1]:8443/"),
            ("https://[::1]/", "https://[::1]/"),
            // Schemes and host names are in any case (RFC 3986).
            (
                "HTTPS://Alerts.Example.COM/Hook",
                "https://alerts.example.com/Hook",
            ),
        ] {
            let cfg = Config::parse(Path::new("x"), &format!("[output]\nwebhook = \"{good}\"\n"));
            assert_eq!(
                cfg.as_ref().ok().and_then(|c| c.output.webhook.as_deref()),
                Some(read),
                "{good}: {:?}",
                cfg.as_ref().err()
            );
        }
        assert_eq!(
            cfg.output.webhook_token_file.as_deref(),
            Some(Path::new("hook.token"))
        );
        let e = cfg.output.webhook_target().unwrap_err().to_string();
        assert!(e.contains("output.webhook_token_file"), "{e}");
        for bad in [
            "alerts.example.com/hook",
            "ftp://alerts.example.com",
            "https://",
            "https://user:pw@alerts.example.com/",
            "http://127.0.0.1:99999/hook",
            "http://127.0.0.1:0/hook",
            "https://alerts example.com/hook",
            "https:alerts.example.com/hook",
            "https:/alerts.example.com/hook",
            "https://alerts.exa\tmple.com/hook",
        ] {
            let e = Config::parse(Path::new("x"), &format!("[output]\nwebhook = \"{bad}\"\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("webhook") && e.contains("https://"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_required_key_of_the_wrong_type_is_said_once_not_also_as_missing() {
        let e = Config::parse(Path::new("x"), "[capture]\ninterface = 1\nbogus = 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected a string"), "{e}");
        assert!(e.contains("unknown field `bogus`"), "{e}");
        assert!(!e.contains("missing field"), "{e}");
    }

    #[test]
    fn a_webhook_token_over_plain_http_is_warned_of_unless_it_stays_on_this_machine() {
        let warned = |url: &str| {
            let cfg = Config::parse(
                Path::new("x"),
                &format!("[output]\nwebhook = \"{url}\"\nwebhook_token_file = \"t\"\n"),
            )
            .unwrap();
            cfg.warnings()
                .iter()
                .any(|p| p.key == "output.webhook" && p.message.contains("clear text"))
        };
        for url in [
            "http://alerts.example.com/hook",
            "HTTP://alerts.example.com:8080/hook",
            "http://10.0.0.7/hook",
        ] {
            assert!(warned(url), "{url}");
        }
        for url in [
            "https://alerts.example.com/hook",
            "http://localhost:8080/hook",
            "HTTP://LOCALHOST/hook",
            "http://127.0.0.9/hook",
            "http://[::1]:9000/hook",
            "http://localhost./hook",
            "http://[::ffff:127.0.0.1]/hook",
        ] {
            assert!(!warned(url), "{url}");
        }
    }

    #[test]
    fn output_syslog_names_its_transport() {
        let cfg = Config::parse(
            Path::new("x"),
            "[output]\nsyslog = \"tcp://10.0.0.5:514\"\n",
        )
        .unwrap();
        assert_eq!(
            cfg.output.syslog,
            Some(Forward::Tcp("10.0.0.5:514".parse().unwrap()))
        );
        for bad in ["10.0.0.5:514", "tls://10.0.0.5:6514", "udp://siem:514"] {
            let e = Config::parse(Path::new("x"), &format!("[output]\nsyslog = \"{bad}\"\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("syslog") && e.contains("IP"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_output_file_that_cannot_be_appended_to_is_a_problem_and_the_check_leaves_no_trace() {
        let cfg = Config::parse(
            Path::new("x"),
            "[output]\nfile = \"/nonexistent/alerts.jsonl\"\n",
        )
        .unwrap();
        let p = cfg.environment_problems();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].key, "output.file");
        let dir = std::env::temp_dir().join(format!("cepheus-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.jsonl");
        assert_eq!(output_file_usable(&f), Ok(()));
        assert!(!f.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn relative_paths_written_in_the_file_are_relative_to_its_folder() {
        let dir = std::env::temp_dir().join(format!("cepheus-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cepheus.toml");
        std::fs::write(
            &file,
            "[syslog]\nfiles = [\"auth.log\", \"-\", \"/var/log/x.log\"]\n[rules]\npaths = [\"rules\"]\n[api]\ntoken_file = \"tok\"\n[output]\nwebhook = \"http://127.0.0.1:1/\"\nwebhook_token_file = \"hook\"\n",
        )
        .unwrap();
        let cfg = Config::read(&file).unwrap();
        assert_eq!(
            cfg.syslog.files,
            [
                dir.join("auth.log"),
                PathBuf::from("-"),
                PathBuf::from("/var/log/x.log")
            ]
        );
        assert_eq!(cfg.rules.paths, [dir.join("rules")]);
        assert_eq!(cfg.api.token_file, Some(dir.join("tok")));
        assert_eq!(cfg.output.webhook_token_file, Some(dir.join("hook")));
        // The default store stays in the working directory; a written one follows the file,
        // also when it is written as the default is.
        assert_eq!(cfg.store, StoreConfig::default());
        std::fs::write(&file, "[store]\npath = \"data\"\n").unwrap();
        assert_eq!(Config::read(&file).unwrap().store.path(), dir.join("data"));
        std::fs::write(&file, "[store]\npath = \"./cepheus-data\"\n").unwrap();
        assert_eq!(
            Config::read(&file).unwrap().store.path(),
            dir.join("./cepheus-data")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_syslog_file_listed_twice_is_refused() {
        let dir = std::env::temp_dir().join(format!("cepheus-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.log"), "x\n").unwrap();
        let d = dir.display();
        let c = Config::parse(
            &dir.join("c.toml"),
            &format!("[syslog]\nfiles = [\"{d}/a.log\", \"{d}/./a.log\"]\n"),
        )
        .unwrap();
        let p = c.environment_problems();
        assert!(
            p.iter()
                .any(|p| p.key == "syslog.files" && p.message.contains("list it once")),
            "{p:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn capture_syslog_beside_listeners_on_its_ports_is_warned() {
        let text = |udp: &str| {
            format!(
                "[syslog]\nudp = [\"{udp}\"]\ntcp = []\n[capture]\ninterface = \"eth0\"\nsyslog = true\n"
            )
        };
        let warned = |udp: &str| {
            Config::parse(Path::new("x"), &text(udp))
                .unwrap()
                .warnings()
                .iter()
                .any(|w| w.key == "capture.syslog" && w.message.contains("count twice"))
        };
        assert!(warned("0.0.0.0:514"));
        assert!(!warned("127.0.0.1:5514"));
        assert!(!warned("0.0.0.0:6514"));
    }

    #[test]
    fn durations_out_of_any_use_are_refused() {
        for (text, key) in [
            (
                "[syslog]\ntcp_idle_timeout = \"1ns\"\n",
                "syslog.tcp_idle_timeout",
            ),
            ("[engine]\ntick = \"5000w\"\n", "engine.tick"),
            (
                "[store]\ncheckpoint_every = \"5000w\"\n",
                "store.checkpoint_every",
            ),
        ] {
            let e = Config::parse(Path::new("x"), text);
            assert!(
                matches!(&e, Err(ConfigError::Invalid { problems, .. }) if problems[0].key == key),
                "{text}: {e:?}"
            );
        }
        let ok = "[syslog]\ntcp_idle_timeout = \"1s\"\n[engine]\ntick = \"1m\"\n[store]\ncheckpoint_every = \"1d\"\n";
        assert!(Config::parse(Path::new("x"), ok).is_ok());
    }

    #[test]
    fn a_relative_store_folder_is_named_whole() {
        // (The tests run in the package's folder, which holds Cargo.toml, a file.)
        let e = store_usable(Path::new("Cargo.toml/cepheus-data")).unwrap_err();
        let whole = std::env::current_dir()
            .unwrap()
            .join("Cargo.toml/cepheus-data");
        assert!(e.contains(&whole.display().to_string()), "{e}");
    }

    #[test]
    fn the_store_folder_must_be_creatable_and_the_check_leaves_no_trace() {
        let base = std::env::temp_dir().join(format!("cepheus-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        // Creatable: fine, and nothing is left behind.
        assert_eq!(store_usable(&base.join("a/b")), Ok(()));
        assert!(!base.join("a").exists());
        // Under a file: not creatable.
        std::fs::write(base.join("f"), "x").unwrap();
        let e = store_usable(&base.join("f/data")).unwrap_err();
        assert!(e.starts_with("cannot create"), "{e}");
        let e = store_usable(&base.join("f")).unwrap_err();
        assert!(e.contains("is not a folder"), "{e}");
        // An existing folder is fine, and left as it is.
        assert_eq!(store_usable(&base), Ok(()));
        assert_eq!(std::fs::read_dir(&base).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn every_unknown_or_mistyped_key_is_said_at_once() {
        let text = "[syslog]\nmax_conections = 3\nfiles_from = \"middle\"\nudp = [\"127.0.0.1:99999\"]\n[engine]\nshards = -1\n";
        let e = Config::parse(Path::new("x"), text).unwrap_err().to_string();
        for key in ["max_conections", "middle", "99999", "shards"] {
            assert!(e.contains(key), "{key} not said: {e}");
        }
        assert!(e.contains("line 2") && e.contains("line 6"), "{e}");
        // A misspelt key is suggested, as in rule files; a number's type is said in words.
        assert!(e.contains("hint: did you mean `max_connections`?"), "{e}");
        assert!(e.contains("expected a whole number, 0 or more"), "{e}");
        assert!(!e.contains("usize"), "{e}");
        // An unknown table hides no other mistake, and its keys are not taken for another's.
        let e = Config::parse(
            Path::new("x"),
            "[syslog]\nmax_conections = 3\n[sylog]\nudp = []\n[engine]\nshards = -1\n",
        )
        .unwrap_err()
        .to_string();
        for what in ["max_conections", "sylog", "shards"] {
            assert!(e.contains(what), "{what} not said: {e}");
        }
        assert_eq!(e.matches("TOML parse error").count(), 3, "{e}");
        // Syntax that does not parse: one error.
        let e = Config::parse(Path::new("x"), "[syslog\nudp = 1\n").unwrap_err();
        assert_eq!(e.to_string().matches("TOML parse error").count(), 1, "{e}");
    }

    #[test]
    fn numbers_types_are_said_in_words() {
        assert_eq!(
            plain_types("invalid value: integer `70000`, expected u16; expected u8x"),
            "invalid value: integer `70000`, expected a whole number from 0 to 65535; expected u8x"
        );
    }

    #[test]
    fn empty_paths_port_zero_and_misplaced_sockets_are_refused() {
        let problems = |text: &str| match Config::parse(Path::new("/etc/cepheus/x.toml"), text) {
            Ok(c) => c.environment_problems(),
            Err(ConfigError::Invalid { problems, .. }) => problems,
            Err(e) => panic!("{e}"),
        };
        for (text, key) in [
            ("[store]\npath = \"\"\n", "store.path"),
            ("[rules]\npaths = [\"\"]\n", "rules.paths"),
            ("[api]\nsocket = \"\"\n", "api.socket"),
            ("[output]\nfile = \"\"\n", "output.file"),
        ] {
            let p = problems(text);
            assert!(
                p.iter()
                    .any(|p| p.key == key && p.message.contains("an empty path")),
                "{text}: {p:?}"
            );
        }
        for (text, key) in [
            ("[syslog]\nudp = [\"127.0.0.1:0\"]\n", "syslog.udp"),
            ("[syslog]\ntcp = [\"127.0.0.1:0\"]\n", "syslog.tcp"),
            ("[api]\nlisten = \"127.0.0.1:0\"\n", "api.listen"),
        ] {
            let p = problems(text);
            assert!(
                p.iter()
                    .any(|p| p.key == key && p.message.contains("port 0")),
                "{text}: {p:?}"
            );
        }
        let dir = std::env::temp_dir().join(format!("cepheus-sock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = problems(&format!("[api]\nsocket = \"{}\"\n", dir.display()));
        assert!(
            p.iter()
                .any(|p| p.key == "api.socket" && p.message.contains("is not a socket (a folder)")),
            "{p:?}"
        );
        let long = format!("/run/{}/api.sock", "d".repeat(120));
        let p = problems(&format!("[api]\nsocket = \"{long}\"\n"));
        assert!(
            p.iter()
                .any(|p| p.key == "api.socket" && p.message.contains("at most 107 bytes")),
            "{p:?}"
        );
        // A token file of two lines: no header could carry it.
        let tok = dir.join("tok");
        std::fs::write(&tok, "aaaaaaaaaaaaaaaa\nbbbbbbbbbbbbbbbbbb\n").unwrap();
        let p = problems(&format!("[api]\ntoken_file = \"{}\"\n", tok.display()));
        assert!(
            p.iter()
                .any(|p| p.key == "api.token_file" && p.message.contains("more than one line")),
            "{p:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_token_file_every_user_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let f = std::env::temp_dir().join(format!("cepheus-token-{}", std::process::id()));
        std::fs::write(&f, "0123456789abcdef0123\n").unwrap();
        let cfg = |mode: u32| {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let text = format!("[api]\ntoken_file = \"{}\"\n", f.display());
            Config::parse(Path::new("x"), &text).unwrap().warnings()
        };
        assert!(cfg(0o640).is_empty());
        // Readable or writable by every user: refused (an environment problem), not only
        // warned of.
        let refused = |mode: u32| {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let text = format!("[api]\ntoken_file = \"{}\"\n", f.display());
            let c = Config::parse(Path::new("x"), &text).unwrap();
            (c.warnings(), c.environment_problems())
        };
        for (mode, said) in [
            (
                0o644,
                "readable by every user, who could use the token (mode 0644)",
            ),
            (
                0o662,
                "writable by every user, who could set the token (mode 0662)",
            ),
        ] {
            let (w, e) = refused(mode);
            assert!(w.is_empty(), "{w:?}");
            assert!(
                e.iter()
                    .any(|p| p.key == "api.token_file" && p.message.contains(said)),
                "{e:?}"
            );
        }
        // A group that may write it may put in a token it knows.
        assert!(
            cfg(0o660)[0]
                .message
                .contains("writable by its group (mode 0660)")
        );
        // The webhook's token file: the same test (a file every user may replace counts too).
        let hook = |mode: u32| {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let text = format!(
                "[output]\nwebhook = \"https://alerts.example/hook\"\nwebhook_token_file = \"{}\"\n",
                f.display()
            );
            Config::parse(Path::new("x"), &text).unwrap().warnings()
        };
        assert!(hook(0o640).is_empty(), "{:?}", hook(0o640));
        let w = hook(0o622);
        assert!(w.is_empty(), "{w:?}");
        let text = format!(
            "[output]\nwebhook = \"https://alerts.example/hook\"\nwebhook_token_file = \"{}\"\n",
            f.display()
        );
        let e = Config::parse(Path::new("x"), &text)
            .unwrap()
            .environment_problems();
        assert!(
            e.iter().any(|p| p.key == "output.webhook_token_file"
                && p.message
                    .contains("writable by every user, who could set the token (mode 0622)")),
            "{e:?}"
        );
        // Owned by another user (not root, not the agent's): that user may replace it.
        if rustix::process::geteuid().is_root() {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
            let w = cfg(0o600);
            assert!(
                w[0].message.contains("belongs to another user (uid 65534)"),
                "{w:?}"
            );
        }
        let _ = std::fs::remove_file(&f);
    }

    #[test]
    fn alerts_written_nowhere_are_a_warning() {
        let cfg = Config::parse(Path::new("x"), "[output]\nstdout = false\n").unwrap();
        let w = cfg.warnings();
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].key, "output.stdout");
        assert!(Config::default().warnings().is_empty());
    }

    #[test]
    fn no_input_at_all_is_a_warning() {
        let none = Config::parse(Path::new("x"), "[syslog]\nudp = []\ntcp = []\n").unwrap();
        let w = none.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].message.contains("no event will arrive"), "{w:?}");
        let tcp = Config::parse(Path::new("x"), "[syslog]\nudp = []\n").unwrap();
        assert!(tcp.warnings().is_empty());
    }

    /// A capture interface not there is waited for by `run` (a mirror port's NIC may come up
    /// after the agent): a warning, naming the interfaces there are, not an error that would
    /// keep the service down for good.
    #[test]
    fn a_capture_interface_that_does_not_exist_is_a_warning() {
        let cfg = Config::parse(
            Path::new("x"),
            "[store]\npath = \"/tmp\"\n[capture]\ninterface = \"nosuch0\"\n",
        )
        .unwrap();
        assert!(
            !cfg.environment_problems()
                .iter()
                .any(|p| p.key == "capture.interface")
        );
        let p: Vec<Problem> = cfg
            .environment_warnings()
            .into_iter()
            .filter(|p| p.key == "capture.interface")
            .collect();
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].message.contains("nosuch0"), "{p:?}");
        // The names there are, to pick from.
        assert!(
            p[0].message.contains("this host has: ") && p[0].message.contains("lo"),
            "{p:?}"
        );
    }

    #[test]
    fn low_ports_need_cap_net_bind_service() {
        // root's full set, CAP_NET_BIND_SERVICE alone, an unprivileged user, no line.
        assert!(status_allows_low_ports(
            "Name:\tx\nCapEff:\t000001ffffffffff\n"
        ));
        assert!(status_allows_low_ports("CapEff:\t0000000000000400\n"));
        assert!(!status_allows_low_ports("CapEff:\t0000000000000000\n"));
        assert!(status_allows_low_ports("Name:\tx\n"));
    }
}
