//! `cepheus run`: the live appliance, and `cepheus config`.
//!
//! Actors and tasks (actix 0.13 on tokio; see ARCHITECTURE.md for the picture):
//! - ingest arbiters (one thread each): UDP sockets and TCP connections, each task parsing,
//!   de-duplicating and routing ([`ingest`], [`route`]);
//! - CEP shard arbiters (one thread each): one [`shard::Shard`] actor per arbiter;
//! - the system arbiter: TCP accept loops, the [`sink::AlertSink`], the reloader, signals, and
//!   the HTTP API ([`api`], actix-web, on its own worker thread).

pub mod api;
pub mod budget;
pub mod builtin;
pub mod config;
pub mod counters;
pub mod files;
pub mod forward;
pub mod framing;
pub mod ingest;
pub mod journal;
pub mod mem;
pub mod outq;
pub mod queue;
pub mod reload;
pub mod route;
pub mod shard;
pub mod silence;
pub mod sink;
pub mod stdout;
pub mod watchdog;
pub mod webhook;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration as StdDuration, Instant};

use actix::prelude::*;
use anyhow::Context as _;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::ingest::syslog::{SyslogParser, Year};
use config::Config;
use counters::{IngestCounters, SinkCounters};
use reload::{Reloader, RuleSource, Trigger};
use route::RoutePlan;
use shard::Shard;
use sink::{AlertSink, Flush};

/// Arguments of `cepheus run`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit status: 0 after a clean stop (SIGTERM or SIGINT); 1 when the configuration or the rules have errors (`cepheus config check FILE` and `cepheus rules check PATH` list them all: a missing capture interface or token file too); 2 when starting failed (the configuration file, a rule file, a followed file or the store's folder missing or unreadable, a port in use)."
)]
pub struct RunArgs {
    /// Configuration file (TOML; `cepheus config default` prints one). Default: built-in
    /// defaults (syslog on 127.0.0.1:5514, API on 127.0.0.1:9514).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `cepheus config ...`.
#[derive(clap::Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print the complete default configuration, every key commented.
    #[command(alias = "print")]
    Default,
    /// Validate a configuration file, naming every problem at once; exit 0 when valid, 1
    /// when not, 2 when it cannot be read.
    Check {
        /// The file.
        #[arg(required_unless_present = "config", conflicts_with = "config")]
        file: Option<PathBuf>,
        /// The file, written as `run` takes it.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

/// Why rule files that hold no rule do not start the agent (an empty folder does not either).
const NO_RULE: &str = "the rule files hold no rule, so nothing would be watched: add `[[rule]]` tables, or leave rules.paths out to run the built-in rules";

/// Milliseconds on a monotonic clock, process-wide (a step of the wall clock is no idle
/// time and no stall): what the listeners' idle times and the stdout stall are read on.
pub(crate) fn mono_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// Runs `cepheus config ...`.
pub fn config_cmd(cmd: ConfigCommand) -> ExitCode {
    match cmd {
        ConfigCommand::Default => {
            print!("{}", config::DEFAULT_CONFIG);
            ExitCode::SUCCESS
        }
        ConfigCommand::Check { file, config } => match file.or(config) {
            Some(f) => config_check(&f),
            None => ExitCode::from(2),
        },
    }
}

/// `cepheus config check`: what `run` would refuse at start-up, `check` refuses too, and it
/// names every problem at once: the values, then the files and folders they name (syslog
/// files, rule paths, the token file, the store), then the rules those paths hold.
fn config_check(file: &std::path::Path) -> ExitCode {
    let (cfg, bad_keys) = match read_config(file) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut problems = cfg.problems();
    problems.extend(cfg.environment_problems());
    for p in &problems {
        say_problem(file, p);
    }
    for w in cfg.warnings().iter().chain(&cfg.environment_warnings()) {
        eprintln!("warning: {}: `{}`: {}", file.display(), w.key, w.message);
    }
    // The rules, as `run` loads them (their diagnostics go to stderr), unless their paths
    // are already known to be missing.
    let mut rules_ok = true;
    if !problems.iter().any(|p| p.key == "rules.paths") {
        match RuleSource::from_paths(&cfg.rules.paths).load() {
            Ok(Some(r)) if r.rules.is_empty() => {
                eprintln!("error: {}: `rules.paths`: {NO_RULE}", file.display());
                rules_ok = false;
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                eprintln!(
                    "error: {}: `rules.paths`: the rules have errors (above)",
                    file.display()
                );
                rules_ok = false;
            }
            Err(e) => {
                eprintln!("error: {}: `rules.paths`: {e:#}", file.display());
                rules_ok = false;
            }
        }
    }
    if problems.is_empty() && rules_ok && !bad_keys {
        eprintln!("{}: ok", file.display());
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Reads the configuration file as `run` and `config check` do. One that cannot be read is a
/// start-up failure (exit 2), as a missing followed file is, and one that does not parse is
/// exit 1 (said). Keys of a wrong name or type are said first and set aside (`true`): their
/// defaults stand in, so that everything else is checked too.
fn read_config(file: &std::path::Path) -> Result<(Config, bool), ExitCode> {
    match Config::read_setting_aside(file) {
        Ok((cfg, set_aside)) => {
            if let Some(e) = &set_aside {
                eprintln!("error: {e}");
            }
            Ok((cfg, set_aside.is_some()))
        }
        Err(e @ config::ConfigError::Io { .. }) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(2))
        }
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(1))
        }
    }
}

/// Says one problem of the configuration file `file`.
fn say_problem(file: &std::path::Path, p: &config::Problem) {
    eprintln!("error: {}: `{}`: {}", file.display(), p.key, p.message);
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    // actix's own start-up lines ("starting 1 workers") are not the operator's business, nor
    // are actix_http's, one ERROR line per malformed request a client sends (20,000 garbage
    // requests made 20,000 lines, before any token is checked: a log flood at will).
    // `RUST_LOG` sets the level, and keeps these unless it names actix itself (found by a
    // review: `RUST_LOG=info` brought the flood back).
    const QUIET: &str = "actix_server=warn,actix_web=warn,actix_http=off";
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => {
            let spec = if v.contains("actix") {
                v
            } else {
                format!("{v},{QUIET}")
            };
            EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new(format!("info,{QUIET}")))
        }
        _ => EnvFilter::new(format!("info,{QUIET}")),
    };
    let tty = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(tty);
    // On a terminal: the default human format; under systemd's journal, each line with its
    // level as a syslog priority (`<4>`: journald reads it, so `journalctl -p warning` finds
    // the warnings) and no time stamp (journald adds its own); otherwise plain lines (colour
    // codes would only be noise in a file).
    let _ = if tty {
        builder.try_init()
    } else if stderr_is_journal() {
        builder
            .with_target(false)
            .event_format(JournalPriority(
                tracing_subscriber::fmt::format()
                    .with_target(false)
                    .without_time(),
            ))
            .try_init()
    } else {
        builder.with_target(false).try_init()
    };
}

/// Whether stderr is systemd's journal stream (`JOURNAL_STREAM` names its device and inode,
/// as systemd.exec(5) says to check before speaking the journal's prefixes).
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(stream) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.split_once(':') else {
        return false;
    };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    dev.parse() == Ok(meta.dev()) && ino.parse() == Ok(meta.ino())
}

/// A log line format that begins each event with its level as a syslog priority (`<3>`
/// error, `<4>` warning, `<6>` info, `<7>` debug), for journald (sd-daemon(3)).
struct JournalPriority<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for JournalPriority<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        write!(writer, "<{}>", journal_priority(*event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// The syslog priority journald files a line of `level` under.
fn journal_priority(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        _ => 7,
    }
}

/// Catches SIGHUP from now on, noting it in the flag returned (the same flag at every call):
/// a SIGHUP before the reload handler is in place (config management, logrotate's `kill -HUP`
/// while the store opens) would end the agent silently, and systemd counts that as a clean
/// exit, not restarted (found by an audit); a reload follows once the agent runs. `main`
/// calls it first for `cepheus run`, before even reading the command line.
pub fn catch_early_hup() -> Arc<AtomicBool> {
    static EARLY_HUP: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    EARLY_HUP
        .get_or_init(|| {
            let flag = Arc::new(AtomicBool::new(false));
            let _ = signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&flag));
            flag
        })
        .clone()
}

/// Runs `cepheus run`: exit 0 after a clean stop, 1 on bad rules/config, 2 on start-up errors.
pub fn run(args: RunArgs) -> ExitCode {
    let early_hup = catch_early_hup();
    init_tracing();
    let cfg =
        match &args.config {
            // Every error of the file at once, as `config check` says them (keys of a wrong name
            // or type, then the values), not one round of fixes per kind.
            Some(p) => match read_config(p) {
                Ok((c, bad_keys)) => {
                    let mut problems = c.problems();
                    // What `config check` finds beyond the values is a configuration error too
                    // (exit 1: restarting cannot mend a missing token),
                    // but for what may come right by itself, which starting says (exit 2): a
                    // followed file, a rule path or the store's folder missing.
                    problems.extend(c.environment_problems().into_iter().filter(|pr| {
                        !matches!(pr.key, "syslog.files" | "rules.paths" | "store.path")
                    }));
                    for pr in &problems {
                        say_problem(p, pr);
                    }
                    if bad_keys || !problems.is_empty() {
                        return ExitCode::from(1);
                    }
                    c
                }
                Err(code) => return code,
            },
            None => Config::default(),
        };
    for w in cfg.warnings().iter().chain(&cfg.store_owner_warning()) {
        tracing::warn!(key = w.key, "{}", w.message);
    }
    // What the agent makes (the store's files, the saved states, the journal, the output
    // file) is for its own user and group, whatever umask it was started with (the unit
    // sets 0027; a shell's 000 made the store world-writable): at least 0027.
    let old = rustix::process::umask(rustix::fs::Mode::from_bits_truncate(0o027));
    rustix::process::umask(old | rustix::fs::Mode::from_bits_truncate(0o027));
    if cfg.capture.is_none() {
        drop_capture_capability();
    }
    if running_as_root() {
        tracing::warn!(
            "running as root: the service should run as an unprivileged user with only CAP_NET_BIND_SERVICE (syslog on port 514) and CAP_NET_RAW (live capture); see systemd/README.md. What this run creates (the store's files) is root's: the service's user cannot write them afterwards (chown them back, e.g. chown -R cepheus: /var/lib/cepheus)"
        );
    }
    let mut cfg = cfg;
    cfg.syslog.max_connections = fit_connections(cfg.syslog.max_connections);
    let source = RuleSource::from_paths(&cfg.rules.paths);
    // (Named rule paths are the config's; the default `rules/` folder is nobody's key.)
    let key = if cfg.rules.paths.is_empty() {
        String::new()
    } else {
        format!(
            "{}rules.paths: ",
            in_config(args.config.as_deref(), "rules.paths: ")
        )
    };
    let rules = match source.load() {
        Ok(Some(r)) if r.rules.is_empty() => {
            eprintln!("error: {key}{NO_RULE}; not starting");
            return ExitCode::from(1);
        }
        Ok(Some(r)) => r,
        Ok(None) => {
            eprintln!("error: {key}the rules have errors; not starting");
            return ExitCode::from(1);
        }
        // Rules that cannot be read (as `rules check` says it: 2), not rules with errors.
        Err(e) => {
            eprintln!("error: {key}{e:#}");
            return ExitCode::from(2);
        }
    };
    // (Kept to say at a reload what changed in it: a reload applies rules only.)
    let config_text = args
        .config
        .as_ref()
        .and_then(|p| Some((p.clone(), std::fs::read_to_string(p).ok()?)));
    match start(cfg, source, rules, config_text, early_hup) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let said = format!("{e:#}");
            eprintln!("error: {}{said}", in_config(args.config.as_deref(), &said));
            ExitCode::from(2)
        }
    }
}

/// Without `[capture]`, `CAP_NET_RAW` (which the packaged unit grants for live capture) is
/// given up at once: permitted, effective and inheritable, and so ambient (the service keeps
/// only what it uses). Done before any thread starts (capabilities are per thread; threads
/// made later inherit the sets). Refused (the unit's system call filter, an old kernel), it
/// is said and the agent goes on.
fn drop_capture_capability() {
    drop_capability(
        rustix::thread::CapabilitySet::NET_RAW,
        "CAP_NET_RAW",
        "no [capture] is configured",
    );
}

/// Gives up `cap` (named `name`) for good, from every set (the ambient one follows the
/// permitted one), saying so with `why`; a process that does not hold it changes nothing.
fn drop_capability(cap: rustix::thread::CapabilitySet, name: &str, why: &str) {
    use rustix::thread::{capabilities, set_capabilities};
    let dropped = capabilities(None).and_then(|mut sets| {
        if !(sets.permitted | sets.effective | sets.inheritable).contains(cap) {
            return Ok(false);
        }
        sets.permitted.remove(cap);
        sets.effective.remove(cap);
        sets.inheritable.remove(cap);
        set_capabilities(None, sets).map(|()| true)
    });
    match dropped {
        Ok(true) => tracing::info!("{name} given up: {why}"),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "cannot give up {name} ({why})"),
    }
}

/// `"FILE: "` when `said` begins with a key of the configuration file `config` (`store.path:
/// ...`), so that the operator knows which file to edit; else nothing.
fn in_config(config: Option<&std::path::Path>, said: &str) -> String {
    let key = said.split(": ").next().unwrap_or_default();
    let is_key = key.contains('.')
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '.' || c == '_');
    match config {
        Some(c) if is_key => format!("{}: ", c.display()),
        _ => String::new(),
    }
}

/// Descriptors kept for everything but TCP senders: listeners, followed files, the rule
/// folder's watches, the store, the API's usual few connections (it may hold up to
/// `api::MAX_CONNECTIONS` per listener, each closed within a second if it asks nothing: only
/// clients flooding the API compete with the senders for the rest).
const FD_RESERVE: u64 = 128;

/// `max_connections` as the open-files limit allows: the soft limit is raised to the hard one
/// first (systemd's default soft limit, 1,024, is below the default `max_connections` plus
/// what the agent itself opens). Past the limit, `accept` would fail for every new sender
/// while idle ones hold their descriptors, so the silent-longest eviction could not work.
fn fit_connections(wanted: usize) -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    // (`None`: unlimited.)
    let Some(mut soft) = lim.current else {
        return wanted;
    };
    // Up to the hard limit; with none, to what the connections and the agent need.
    let target = lim
        .maximum
        .unwrap_or((wanted as u64).saturating_add(FD_RESERVE));
    if soft < target {
        let raised = Rlimit {
            current: Some(target),
            maximum: lim.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => soft = target,
            Err(e) => tracing::debug!(error = %e, "could not raise the open-files limit"),
        }
    }
    let room = usize::try_from(soft.saturating_sub(FD_RESERVE))
        .unwrap_or(usize::MAX)
        .max(1);
    if wanted > room {
        tracing::warn!(
            max_connections = wanted,
            open_files_limit = soft,
            "syslog.max_connections does not fit the open-files limit: at most {room} TCP connections (raise LimitNOFILE= in the unit, or ulimit -n)"
        );
        return room;
    }
    wanted
}

/// Whether the process runs with root's user id (read from /proc: no libc call for it).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Why a syslog listener could not bind, with what to do about it: a port another daemon
/// holds, or a port below 1024 without the capability to bind it.
fn bind_error(key: &str, addr: SocketAddr, e: std::io::Error) -> anyhow::Error {
    let hint = match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            "ports below 1024 need CAP_NET_BIND_SERVICE (or root): grant it, use a port above 1023, or keep the system's syslog daemon and forward from it: README.md, \"Forwarding from rsyslog or syslog-ng\""
        }
        std::io::ErrorKind::AddrInUse if key == "api.listen" => {
            "another cepheus running? `ss -ltnp` shows who holds it; set `[api] listen` to a free port"
        }
        // (Syslog daemons hold the standard ports: 514, 601, 6514.)
        std::io::ErrorKind::AddrInUse if matches!(addr.port(), 514 | 601 | 6514) => {
            "another cepheus, or another syslog daemon (`ss -ltunp` shows who holds it)? forward from a syslog daemon instead: README.md, \"Forwarding from rsyslog or syslog-ng\""
        }
        std::io::ErrorKind::AddrInUse => {
            "another cepheus running? `ss -ltunp` shows who holds it; set the listener to a free port"
        }
        _ => "check the address",
    };
    anyhow::anyhow!("{key}: cannot bind {addr} ({hint}): {e}")
}

/// A socket of `ty` bound to `addr`, listening if it is a stream. An IPv6 one takes IPv6 only
/// (`IPV6_V6ONLY`), whatever `net.ipv6.bindv6only` says, so `0.0.0.0:514` and `[::]:514` can
/// both be listed: with the kernel's default, `[::]` would take IPv4 too and the second bind
/// would fail.
fn bind_socket(addr: SocketAddr, ty: socket2::Type) -> std::io::Result<socket2::Socket> {
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), ty, None)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    let stream = ty == socket2::Type::STREAM;
    if stream {
        // As std's `TcpListener::bind` does: a restart does not wait out TIME_WAIT.
        s.set_reuse_address(true)?;
    }
    s.bind(&addr.into())?;
    if stream {
        // A backlog of 1024, not std's 128: hundreds of senders reconnecting at once (after a
        // restart) would wait on SYN retries (the kernel caps it at net.core.somaxconn).
        s.listen(1024)?;
    }
    Ok(s)
}

/// Whether `key`'s address `addr` may be skipped after bind error `e`: the IPv6 wildcard on a
/// host without IPv6 (booted with `ipv6.disable=1`), so a packaged config listing `[::]:514`
/// beside `0.0.0.0:514` still starts there. Said in the log.
fn no_ipv6_here(key: &str, addr: SocketAddr, e: &std::io::Error) -> bool {
    let skip = addr.is_ipv6()
        && addr.ip().is_unspecified()
        && e.raw_os_error() == Some(rustix::io::Errno::AFNOSUPPORT.raw_os_error());
    if skip {
        tracing::warn!(%addr, key, error = %e, "IPv6 is not available on this host: not listening on this address");
    }
    skip
}

/// The API's listener. Its connections (which inherit the option) are closed by the kernel
/// when what we sent stays unacknowledged for [`api::STALL`]: an alert stream's client that
/// stopped reading (its window shut) would otherwise hold its place among the
/// [`api::MAX_STREAMS`] for as long as it keeps the connection open.
fn bind_api(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let s = bind_socket(addr, socket2::Type::STREAM)?;
    s.set_tcp_user_timeout(Some(api::STALL))?;
    Ok(s.into())
}

fn bind_udp(
    addr: SocketAddr,
    receive_buffer: usize,
) -> anyhow::Result<Option<std::net::UdpSocket>> {
    let s: std::net::UdpSocket = match bind_socket(addr, socket2::Type::DGRAM) {
        Ok(s) => s.into(),
        Err(e) if no_ipv6_here("syslog.udp", addr, &e) => return Ok(None),
        Err(e) => return Err(bind_error("syslog.udp", addr, e)),
    };
    s.set_nonblocking(true)?;
    // A burst larger than the kernel's receive queue is lost before we can read it: ask for a
    // big queue. The kernel caps it at net.core.rmem_max; say so when it did.
    let sock = socket2::SockRef::from(&s);
    if receive_buffer > 0 {
        if let Err(e) = sock.set_recv_buffer_size(receive_buffer) {
            tracing::warn!(%addr, error = %e, "syslog.udp_receive_buffer: cannot set");
        }
        let got = sock.recv_buffer_size().unwrap_or(0);
        // Linux reports twice the size it granted (bookkeeping overhead included).
        if got < receive_buffer {
            tracing::warn!(
                %addr,
                asked = receive_buffer,
                granted = got / 2,
                "UDP receive buffer capped by the kernel: raise net.core.rmem_max to keep bursts"
            );
        }
    }
    Ok(Some(s))
}

fn bind_tcp(addr: SocketAddr) -> anyhow::Result<Option<std::net::TcpListener>> {
    let s: std::net::TcpListener = match bind_socket(addr, socket2::Type::STREAM) {
        Ok(s) => s.into(),
        Err(e) if no_ipv6_here("syslog.tcp", addr, &e) => return Ok(None),
        Err(e) => return Err(bind_error("syslog.tcp", addr, e)),
    };
    s.set_nonblocking(true)?;
    Ok(Some(s))
}

/// Opens the store at `path` with `open`. A damaged one (`StoreError::Corrupt`) is set aside,
/// renamed `<folder>.damaged-<unix seconds>` beside it for a post-mortem, and a new one begun,
/// said in the log: the agent goes on watching, without its former state and alerts, rather
/// than failing to start over and over under systemd.
fn open_store(
    path: &std::path::Path,
    max_alerts: u64,
    open: impl Fn(&std::path::Path, u64) -> Result<cepheus_store::Store, cepheus_store::StoreError>,
) -> Result<cepheus_store::Store, cepheus_store::StoreError> {
    match open(path, max_alerts) {
        Err(cepheus_store::StoreError::Corrupt { what, .. }) => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let mut aside = path.as_os_str().to_owned();
            aside.push(format!(".damaged-{secs}"));
            let aside = std::path::PathBuf::from(aside);
            let moved = std::fs::rename(path, &aside).and_then(|()| std::fs::create_dir_all(path));
            if let Err(e) = moved {
                tracing::error!(error = %e, "cannot set the damaged store aside");
                return open(path, max_alerts);
            }
            tracing::error!(
                damage = %what,
                set_aside = %aside.display(),
                "the store was damaged: it is set aside and a new one begun (former alerts and state are in the folder set aside)"
            );
            open(path, max_alerts)
        }
        other => other,
    }
}

/// Most shards a run continues with on `engine.shards = 0` when its saved state had them.
const MAX_CONTINUED_SHARDS: usize = 256;

/// How many shards to run: `engine.shards`; with 0 (one per core), the count of the saved
/// state when there is one, so a machine given more or fewer cores (a VM resized) goes on
/// with its groups and their deadlines instead of starting afresh (groups are spread over
/// the shards by their count).
fn shards_to_run(cfg: &Config, read: &ReadStates) -> usize {
    let cores = cfg.shard_count();
    if cfg.engine.shards > 0 {
        return cores;
    }
    // (The readable ones: a damaged shard file must not make the others' count unknown,
    // which would drop them all.)
    let saved = read
        .as_ref()
        .ok()
        .and_then(|(c, _)| c.iter().map(|s| s.shards as usize).max())
        .filter(|&s| (1..=MAX_CONTINUED_SHARDS).contains(&s));
    match saved {
        Some(s) if s != cores => {
            tracing::info!(
                shards = s,
                cores,
                "engine.shards = 0 (one per core): continuing with the shards of the saved state, so its groups and deadlines go on; set engine.shards to choose (another count spreads the saved state over its shards)"
            );
            s
        }
        _ => cores,
    }
}

/// The saved states as read once at start (`Store::readable_checkpoints`): the readable ones
/// and the errors of the others. They may be hundreds of MB: read once, not per use.
type ReadStates = Result<
    (
        Vec<cepheus_store::SavedShard>,
        Vec<cepheus_store::StoreError>,
    ),
    cepheus_store::StoreError,
>;

/// The engine states an earlier run saved (`read`), one per shard, when it ran as many
/// shards (groups are spread over the shards by their count); none otherwise, with a
/// warning.
fn saved_states(
    store: &cepheus_store::Store,
    read: ReadStates,
    n: usize,
) -> anyhow::Result<Vec<Option<shard::SavedState>>> {
    let mut out: Vec<Option<shard::SavedState>> = (0..n).map(|_| None).collect();
    let saved = match read {
        Ok((saved, unreadable)) => {
            // A state file that cannot be read costs its shard its state, not the others:
            // that shard begins afresh (and its first save replaces the file).
            for e in unreadable {
                tracing::error!(error = %e, "a shard's saved state cannot be read: that shard starts afresh; the alerts it held firing are resolved (state_lost)");
            }
            saved
        }
        // A saved state that cannot be read must not keep the agent from starting (under
        // systemd, over and over): begun afresh, said in the log, and dropped.
        Err(e) => {
            tracing::error!(error = %e, "the saved state cannot be read: starting afresh; the alerts it held firing are resolved (state_lost)");
            if let Err(e) = store.save_checkpoints(&[]) {
                tracing::error!(error = %e, "cannot drop the unreadable saved state");
            }
            return Ok(out);
        }
    };
    if saved.is_empty() {
        return Ok(out);
    }
    if saved
        .iter()
        .any(|s| s.shards as usize != n || s.shard as usize >= n)
    {
        let then = saved.iter().map(|s| s.shards).max().unwrap_or(0);
        let journals = store.path().join("journal");
        match resharded(store, &journals, &saved, n) {
            Ok(states) => {
                tracing::info!(
                    saved_by = then,
                    shards = n,
                    "the saved state of a run with another number of shards was spread over this run's shards: its groups, deadlines and open alerts go on"
                );
                return Ok(states.into_iter().map(Some).collect());
            }
            Err(why) => tracing::warn!(
                saved_by = then,
                shards = n,
                saved = saved.len(),
                why,
                "the saved state is of a run with another number of shards (`engine.shards`, 0: one per core) and cannot be spread over this run's: starting afresh; the alerts it held firing are resolved (state_lost)"
            ),
        }
        // Dropped, so that the next start does not meet it again.
        store
            .save_checkpoints(&[])
            .map_err(|e| anyhow::anyhow!("store.path: {e}"))?;
        return Ok(out);
    }
    if saved.len() != n {
        // (A crash between the shards' first saves: those that saved go on.)
        tracing::warn!(
            shards = n,
            saved = saved.len(),
            "the saved state lacks some shards: those begin afresh, the others continue"
        );
    }
    for s in saved {
        match shard::SavedState::read(&s) {
            Ok(cp) => {
                if let Some(slot) = out.get_mut(s.shard as usize) {
                    *slot = Some(cp);
                }
            }
            Err(e) => {
                tracing::warn!(shard = s.shard, error = %e, "the saved state of this shard cannot be read; it starts afresh");
            }
        }
    }
    Ok(out)
}

/// The saved states of a run with another number of shards (`saved`, all of them) spread over
/// `n` shards by the groups' new owners (`reshard`), when that run stopped cleanly: its
/// journals (in `journals`) hold no event after its states, so nothing else needs replaying.
/// The journals are deleted, then the new states saved (a crash between the two finds the
/// old states and nothing journalled after them again). Says why not otherwise.
fn resharded(
    store: &cepheus_store::Store,
    journals: &std::path::Path,
    saved: &[cepheus_store::SavedShard],
    n: usize,
) -> Result<Vec<shard::SavedState>, String> {
    let then = saved.first().map_or(0, |s| s.shards as usize);
    let mut numbers: Vec<u32> = saved.iter().map(|s| s.shard).collect();
    numbers.sort_unstable();
    if then == 0
        || saved.iter().any(|s| s.shards as usize != then)
        || numbers != (0..then as u32).collect::<Vec<_>>()
    {
        return Err(format!(
            "the saved states are not those of one run's {then} shards"
        ));
    }
    let mut parts = Vec::with_capacity(then);
    for s in saved {
        let state = shard::SavedState::read(s)
            .map_err(|e| format!("shard {}'s saved state cannot be read: {e}", s.shard))?;
        let dir = journals.join(format!("shard-{}", s.shard));
        if dir.is_dir() {
            let mut j = journal::Journal::open(&dir)
                .map_err(|e| format!("shard {}'s journal cannot be read: {e}", s.shard))?;
            if j.fresh_from().is_some() {
                return Err(format!(
                    "shard {} journalled a fresh engine that was never saved",
                    s.shard
                ));
            }
            if let Some(from) = state.journal {
                let mut events = 0usize;
                let r = j.replay(from, |b| events += b.len());
                if events > 0 || r.cut > 0 {
                    return Err(format!(
                        "shard {} journalled {events} events after its saved state (the last run did not stop cleanly)",
                        s.shard
                    ));
                }
            }
        }
        parts.push(state.engine);
    }
    let spread =
        cepheus_core::engine::reshard::reshard(parts, n as u32).map_err(|e| e.to_string())?;
    match std::fs::remove_dir_all(journals) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot delete the old journals: {e}")),
    }
    let states: Vec<shard::SavedState> = spread
        .into_iter()
        .map(|engine| shard::SavedState {
            // Each shard's journal starts empty: what it appends from segment 0 on follows
            // this state.
            journal: Some(0),
            engine,
        })
        .collect();
    let rows = states
        .iter()
        .enumerate()
        .map(|(i, st)| {
            serde_json::to_vec(st)
                .map(|data| cepheus_store::SavedShard {
                    shard: i as u32,
                    shards: n as u32,
                    data,
                    file: None,
                })
                .map_err(|e| format!("cannot write the spread state: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    store
        .save_checkpoints(&rows)
        .map_err(|e| format!("cannot save the spread state: {e}"))?;
    Ok(states)
}

/// The shards' event journals (`store.journal`), one folder per shard in `<store>/journal`;
/// those of shards this run does not have (another `engine.shards`) are deleted.
fn open_journals(store: &config::StoreConfig, n: usize) -> Vec<Option<journal::Journal>> {
    let root = store.path().join("journal");
    if let Ok(entries) = std::fs::read_dir(&root) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let ours = (0..n).any(|i| name == format!("shard-{i}"));
            if !ours {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    (0..n)
        .map(|i| {
            let dir = root.join(format!("shard-{i}"));
            if !store.journal {
                // Turned off: what an earlier run journalled is still replayed, and deleted
                // once a saved state holds it.
                return dir
                    .is_dir()
                    .then(|| journal::Journal::open(&dir).ok())
                    .flatten()
                    .map(journal::Journal::replay_only);
            }
            match journal::Journal::open(&dir) {
                Ok(j) => Some(j),
                Err(e) => {
                    // (The shard runs on without one: a crash would lose its events since
                    // the last save, as with `journal = false`.)
                    tracing::error!(journal = %dir.display(), error = %e, "cannot open the shard's journal: it runs without one");
                    None
                }
            }
        })
        .collect()
}

fn start(
    cfg: Config,
    source: RuleSource,
    rules: cepheus_core::rules::ir::RuleSet,
    config_text: Option<(PathBuf, String)>,
    early_hup: Arc<AtomicBool>,
) -> anyhow::Result<u8> {
    // The secrets first: a refusal leaves nothing made behind (no store folder).
    let api_token = cfg.api.token()?;
    let webhook_target = cfg.output.webhook_target()?;
    config::store_usable(cfg.store.path()).map_err(|why| anyhow::anyhow!("store.path: {why}"))?;
    if let Some(f) = &cfg.output.file {
        config::output_file_usable(f).map_err(|why| anyhow::anyhow!("output.file: {why}"))?;
    }
    std::fs::create_dir_all(cfg.store.path())
        .with_context(|| format!("store.path: cannot create {}", cfg.store.path().display()))?;
    // Held by another process: maybe `cepheus alerts` reading it for a moment while no agent
    // ran; waited for, up to 10 s, before giving up.
    let open_waiting = |path: &std::path::Path, max: u64| {
        cepheus_store::Store::open_waiting(path, max, std::time::Duration::from_secs(10), || {
            tracing::warn!(store = %path.display(), "the store is in use by another process (another `cepheus run` with this store.path, or `cepheus alerts` reading it): waiting up to 10 s for it");
        })
    };
    let udp: Vec<_> = cfg
        .syslog
        .udp
        .iter()
        .filter_map(|a| bind_udp(*a, cfg.syslog.udp_receive_buffer).transpose())
        .collect::<Result<_, _>>()?;
    let tcp: Vec<_> = cfg
        .syslog
        .tcp
        .iter()
        .filter_map(|a| bind_tcp(*a).transpose())
        .collect::<Result<_, _>>()?;
    let api_listener =
        bind_api(cfg.api.listen).map_err(|e| bind_error("api.listen", cfg.api.listen, e))?;
    let api_socket = cfg
        .api
        .socket
        .as_deref()
        .map(api::bind_socket)
        .transpose()?;
    // Every listener is bound: binding a port below 1024 is never needed again (a reload
    // applies rules only; outputs bind none), so a service's user gives it up (root keeps its
    // own, warned of above), before the store starts its threads, which would keep it.
    if !running_as_root() {
        drop_capability(
            rustix::thread::CapabilitySet::NET_BIND_SERVICE,
            "CAP_NET_BIND_SERVICE",
            "the listeners are bound",
        );
    }
    let store = open_store(cfg.store.path(), cfg.store.max_alerts, open_waiting)
        .map_err(|e| anyhow::anyhow!("store.path: {e}"))?;
    let udp_addrs: Vec<SocketAddr> = udp.iter().filter_map(|s| s.local_addr().ok()).collect();
    // Each listener's own counters, by its bound address (`/stats` `listeners`).
    let bound = |proto: &str, addr: std::io::Result<SocketAddr>, asked: SocketAddr| {
        counters::ListenerCounters::new(proto, addr.unwrap_or(asked))
    };
    let udp_counted: Vec<Arc<counters::ListenerCounters>> = udp
        .iter()
        .zip(&cfg.syslog.udp)
        .map(|(s, a)| bound("udp", s.local_addr(), *a))
        .collect();
    let tcp_counted: Vec<Arc<counters::ListenerCounters>> = tcp
        .iter()
        .zip(&cfg.syslog.tcp)
        .map(|(l, a)| bound("tcp", l.local_addr(), *a))
        .collect();
    let listeners: Vec<Arc<counters::ListenerCounters>> =
        udp_counted.iter().chain(&tcp_counted).cloned().collect();
    let zone = cfg
        .zone()
        .map_err(|e| anyhow::anyhow!("syslog.timezone: {e}"))?;
    let read = store.readable_checkpoints();
    let n = shards_to_run(&cfg, &read);
    let (changes, firing) = store.counts();
    tracing::info!(
        store = %cfg.store.path().display(),
        alert_changes = changes,
        firing,
        // (As `Store::checkpoints` counts them: none when any cannot be read.)
        saved_shards = match &read {
            Ok((saved, bad)) if bad.is_empty() => saved.len(),
            _ => 0,
        },
        "store opened"
    );
    let resume = saved_states(&store, read, n)?;
    let journals = open_journals(&cfg.store, n);
    let plan = Arc::new(RoutePlan::new(&rules, n));
    let (plan_tx, plan_rx) = watch::channel(plan.clone());
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (reload_tx, reload_rx) = mpsc::channel::<Trigger>(16);
    let watcher = reload::RuleWatcher::start(&source, reload_tx.clone())?;

    let ingest_counters = Arc::new(IngestCounters::default());
    let sink_counters = Arc::new(SinkCounters::default());
    let shared = Arc::new(
        ingest::Shared::new(
            SyslogParser::new(zone, Year::Resolve),
            ingest_counters.clone(),
            cfg.syslog.dedup_window.0,
            cfg.syslog.dedup_capacity,
            cfg.syslog.max_message_size,
            cfg.syslog.tcp_idle_timeout.std(),
        )
        .allowing(cfg.syslog.allowed_senders.clone()),
    );
    let tick = cfg.engine.tick.std();
    let started = Instant::now();

    let capture_counters = Arc::new(counters::CaptureCounters::default());
    let capture = match &cfg.capture {
        Some(c) => {
            let filter = crate::flow::filter::Filter::parse(&c.filter)
                .map_err(|e| anyhow::anyhow!("capture.filter: {e}"))?;
            let cap = crate::flow::live::LiveCapture::start(
                &c.interface,
                filter,
                65536,
                crate::flow::live::Recovery::Reopen,
            )
            .map_err(|e| anyhow::anyhow!("capture.interface: {e}"))?;
            tracing::info!(interface = %c.interface, "live capture started");
            Some(cap)
        }
        None => None,
    };

    let system = actix::System::new();
    let state = system.block_on(async move {
        // The sink on a thread of its own: a store write waits for the disk.
        let sink_arbiter = Arbiter::new();
        let (stdout, counters) = (cfg.output.stdout, sink_counters.clone());
        let api_store = store.clone();
        let file = cfg.output.file.clone();
        let forwarder = cfg
            .output
            .syslog
            .map(|to| forward::Forwarder::start(to, sink_counters.clone(), Some(store.clone())))
            .transpose()
            .context("output.syslog: starting the forwarding thread")?;
        let webhook = webhook_target
            .map(|to| webhook::Webhook::start(to, sink_counters.clone(), Some(store.clone())))
            .transpose()
            .context("output.webhook: starting the posting thread")?;
        let max_age = cfg.store.max_age.map(|a| a.0);
        let inhibits = cfg.inhibit.clone();
        let (changes_tx, _) = tokio::sync::broadcast::channel(api::STREAM_BACKLOG);
        let sink_changes = changes_tx.clone();
        let meanings = sink::meanings_of(&rules);
        // The shards write their states into it (aside, for the sink to put in place).
        let shard_store = store.clone();
        let sink = AlertSink::start_in_arbiter(&sink_arbiter.handle(), move |ctx| {
            // Its capacity from the first message on: the shards send at once.
            ctx.set_mailbox_capacity(sink::MAILBOX);
            AlertSink::new(stdout, counters, Some(store))
                .with_meanings(meanings)
                .with_inhibits(inhibits)
                .with_file(file)
                .with_forwarder(forwarder)
                .with_webhook(webhook)
                .with_stream(sink_changes)
                .with_max_age(max_age)
                .adopting(n)
        });
        // Running (its start-up reckoning read, its mailbox at full size) before any shard
        // sends to it.
        let _ = sink.send(sink::Probe).await;
        let checkpoint_every = Some(cfg.store.checkpoint_every.std());
        let drained = Arc::new(AtomicUsize::new(0));
        let budgets = Arc::new(std::sync::Mutex::new(budget::BudgetWatch::default()));
        let mut arbiters = Vec::new();
        let mut shards = Vec::new();
        let mut shard_progress = Vec::new();
        let mut txs: Vec<queue::ShardTx> = Vec::new();
        for (s, (resume, journal)) in resume.into_iter().zip(journals).enumerate() {
            let arb = Arbiter::new();
            let (tx, rx) = queue::shard_queue(cfg.engine.queue_size, cfg.engine.queue_bytes);
            let probe = tx.probe();
            let share = plan.rules().clone();
            let sink = sink.clone();
            let live = shard::Liveness {
                drained: drained.clone(),
                progress: Default::default(),
                saving: Default::default(),
            };
            shard_progress.push(live.clone());
            let budgets = budgets.clone();
            let persistence = shard::Persistence {
                every: checkpoint_every,
                resume,
                journal,
                store: shard_store.clone(),
            };
            let addr = Shard::start_in_arbiter(&arb.handle(), move |_| {
                Shard::new(
                    s,
                    n,
                    &share,
                    rx,
                    probe,
                    sink,
                    tick,
                    live,
                    budgets,
                    persistence,
                )
            });
            arbiters.push(arb);
            shards.push(addr);
            txs.push(tx);
        }
        let ingest_arbs: Vec<Arbiter> = (0..n).map(|_| Arbiter::new()).collect();
        let handles: Vec<ArbiterHandle> = ingest_arbs.iter().map(|a| a.handle()).collect();
        for (i, (sock, counted)) in udp.into_iter().zip(udp_counted).enumerate() {
            let router = ingest::Router::new(shared.clone(), plan_rx.clone(), txs.clone());
            let shutdown = shutdown_rx.clone();
            handles[i % handles.len()].spawn(async move {
                match tokio::net::UdpSocket::from_std(sock) {
                    Ok(s) => ingest::udp_loop(s, router, counted, shutdown).await,
                    Err(e) => tracing::error!(error = %e, "udp socket setup failed"),
                }
            });
        }
        let slots = Arc::new(Semaphore::new(cfg.syslog.max_connections));
        let conns = Arc::new(ingest::Conns::new(cfg.syslog.max_connections));
        for (l, counted) in tcp.into_iter().zip(tcp_counted) {
            let listener = match tokio::net::TcpListener::from_std(l) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(error = %e, "tcp listener setup failed");
                    continue;
                }
            };
            let ing = ingest::TcpIngest {
                shared: shared.clone(),
                plan_rx: plan_rx.clone(),
                listener: counted,
                txs: txs.clone(),
                arbiters: handles.clone(),
                slots: slots.clone(),
                conns: conns.clone(),
            };
            actix::spawn(ingest::tcp_accept_loop(listener, ing, shutdown_rx.clone()));
        }
        for path in &cfg.syslog.files {
            let router = ingest::Router::new(shared.clone(), plan_rx.clone(), txs.clone());
            files::start(
                path.clone(),
                router,
                shutdown_rx.clone(),
                cfg.syslog.max_message_size,
                cfg.syslog.files_from == config::FilesFrom::End,
            )
            .with_context(|| format!("syslog.files: cannot start reading {}", path.display()))?;
            tracing::info!(input = %path.display(), "reading syslog lines");
        }
        if let Some(cap) = capture {
            let router = ingest::Router::new(shared.clone(), plan_rx.clone(), txs.clone());
            let shutdown = shutdown_rx.clone();
            let counters = capture_counters.clone();
            let syslog = cfg.capture.as_ref().is_some_and(|c| c.syslog);
            std::thread::Builder::new()
                .name("capture".into())
                .spawn(move || ingest::capture_loop(cap, router, shutdown, counters, syslog))
                .context("starting the capture thread")?;
        }
        drop(txs);
        let reload_error = reload::LastReloadError::default();
        let api_state = actix_web::web::Data::new(api::ApiState {
            shards: shards.clone(),
            ingest: ingest_counters.clone(),
            sink: sink_counters.clone(),
            capture: cfg.capture.is_some().then(|| capture_counters.clone()),
            udp: udp_addrs.clone(),
            listeners: listeners.clone(),
            started,
            token: api_token.clone(),
            reload_error: reload_error.clone(),
            store: Some(api_store),
            changes: Some(changes_tx),
            streams: api::Streams::default(),
            alert_sink: Some(sink.clone()),
            listings: api::Listings::default(),
        });
        let socket_state = api_state.clone();
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(api_state.clone())
                .configure(api::routes)
        })
        .workers(1)
        // Open connections are file descriptors the syslog listeners, the journal and the
        // store need too: a client holding thousands idle must not starve them.
        .max_connections(api::MAX_CONNECTIONS)
        .client_request_timeout(api::REQUEST_TIMEOUT)
        .keep_alive(api::IDLE_TIMEOUT)
        .disable_signals()
        .listen(api_listener)?
        .run();
        let server_handle = server.handle();
        actix::spawn(async move {
            if let Err(e) = server.await {
                tracing::error!(error = %e, "api server stopped");
            }
        });
        // The same API on the Unix socket, for local clients its mode lets in.
        let socket_handle = match api_socket {
            Some(l) => {
                let server = actix_web::HttpServer::new(move || {
                    actix_web::App::new()
                        .app_data(socket_state.clone())
                        .app_data(api::ViaSocket)
                        .configure(api::routes)
                })
                .workers(1)
                .max_connections(api::MAX_CONNECTIONS)
                .client_request_timeout(api::REQUEST_TIMEOUT)
                .keep_alive(api::IDLE_TIMEOUT)
                .disable_signals()
                .listen_uds(l)?
                .run();
                let handle = server.handle();
                actix::spawn(async move {
                    if let Err(e) = server.await {
                        tracing::error!(error = %e, "api socket server stopped");
                    }
                });
                Some(handle)
            }
            None => None,
        };
        let socket_path = cfg.api.socket.clone();
        actix::spawn(
            Reloader {
                source,
                plan_tx,
                shards: shards.clone(),
                sink: Some(sink.clone()),
                generation: 0,
                counters: sink_counters.clone(),
                debounce: StdDuration::from_millis(200),
                watcher,
                trigger: reload_tx.downgrade(),
                last_error: reload_error.clone(),
                config: config_text,
            }
            .run(reload_rx),
        );
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let hup_tx = reload_tx;
        if early_hup.swap(false, Ordering::SeqCst) {
            tracing::info!("SIGHUP came while starting: reloading the rules");
            let _ = hup_tx.try_send(Trigger::Hangup);
        }
        actix::spawn(async move {
            while hup.recv().await.is_some() {
                let _ = hup_tx.try_send(Trigger::Hangup);
            }
        });
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        actix::spawn(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: draining and stopping"),
                _ = int.recv() => tracing::info!("SIGINT: draining and stopping"),
            }
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
            let _ = shutdown_tx.send(true);
            let deadline = Instant::now() + StdDuration::from_secs(4);
            while drained.load(Ordering::SeqCst) < n && Instant::now() < deadline {
                tokio::time::sleep(StdDuration::from_millis(20)).await;
            }
            if drained.load(Ordering::SeqCst) < n {
                tracing::warn!("shards did not drain in time; stopping anyway");
            }
            // The sink no longer waits on stdout (its thread does, and the sink gives it up at
            // a stop once its reader has stopped reading): its last work is waited for.
            let _ = sink.send(Flush).await;
            sink_arbiter.stop();
            let _ = tokio::time::timeout(StdDuration::from_secs(1), server_handle.stop(true)).await;
            if let Some(h) = socket_handle {
                let _ = tokio::time::timeout(StdDuration::from_secs(1), h.stop(true)).await;
            }
            if let Some(p) = &socket_path {
                let _ = std::fs::remove_file(p);
            }
            for a in &arbiters {
                a.stop();
            }
            for a in &ingest_arbs {
                a.stop();
            }
            tracing::info!("stopped");
            System::current().stop_with_code(0);
        });
        actix::spawn(counters::watch_stdout(
            sink_counters.clone(),
            shutdown_rx.clone(),
        ));
        actix::spawn(counters::tell_held_back(
            shared.clone(),
            shutdown_rx.clone(),
        ));
        actix::spawn(counters::watch_udp_kernel_drops(
            udp_addrs.clone(),
            shutdown_rx.clone(),
        ));
        // Ready (and watched) once every shard has been built, its journal replayed, and has
        // answered a probe through the sink: a long replay counts against systemd's start
        // timeout, not against the watchdog.
        for s in &shards {
            let _ = s.send(shard::Probe(None)).await;
        }
        if let Some(period) = sd_notify::watchdog_enabled() {
            let stages = watchdog::Stages {
                ingest: handles.clone(),
                shards: shards.clone(),
                progress: watchdog::Progress {
                    ingest: ingest_counters.clone(),
                    shards: shard_progress.clone(),
                    sink: sink_counters.clone(),
                },
            };
            actix::spawn(watchdog::run(period, stages, shutdown_rx.clone()));
        }
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
        tracing::info!(
            udp = ?cfg.syslog.udp, tcp = ?cfg.syslog.tcp, api = %cfg.api.listen, shards = n,
            rules = rules.rules.len(), lists = %crate::rulefiles::lists_summary(&rules),
            "cepheus running"
        );
        anyhow::Ok(())
    });
    state?;
    let code = system.run_with_code().context("actix system")?;
    Ok(u8::try_from(code).unwrap_or(2))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_error_about_a_key_names_the_configuration_file() {
        let f = std::path::Path::new("/etc/cepheus/cepheus.toml");
        let said = "store.path: cannot create /var/lib/x: Permission denied";
        assert_eq!(in_config(Some(f), said), "/etc/cepheus/cepheus.toml: ");
        assert_eq!(in_config(None, said), "");
        assert_eq!(in_config(Some(f), "cannot open the store: locked"), "");
        assert_eq!(in_config(Some(f), "/var/lib/x: gone"), "");
    }

    /// `0.0.0.0:P` and `[::]:P` both listen (the IPv6 socket takes IPv6 only), over UDP and
    /// TCP, and each receives on its own family. Skipped where the host has no IPv6.
    #[test]
    fn ipv4_and_ipv6_wildcards_listen_side_by_side() {
        use std::io::{Read, Write};
        let Some(u4) = bind_udp("0.0.0.0:0".parse().unwrap(), 0).unwrap() else {
            panic!("no IPv4 socket");
        };
        let port = u4.local_addr().unwrap().port();
        let v6: SocketAddr = format!("[::]:{port}").parse().unwrap();
        let Some(u6) = bind_udp(v6, 0).unwrap() else {
            return; // No IPv6 on this host: nothing more to see.
        };
        let Some(t4) = bind_tcp(format!("0.0.0.0:{port}").parse().unwrap()).unwrap() else {
            panic!("no IPv4 listener");
        };
        let Some(t6) = bind_tcp(v6).unwrap() else {
            panic!("IPv6 for UDP but not for TCP");
        };
        for (sock, to) in [(&u4, "127.0.0.1"), (&u6, "::1")] {
            sock.set_nonblocking(false).unwrap();
            let from = std::net::UdpSocket::bind((to, 0)).unwrap();
            from.send_to(b"<13>hi", (to, port)).unwrap();
            let mut buf = [0u8; 16];
            let (n, peer) = sock.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], peer.is_ipv6()), (&b"<13>hi"[..], to == "::1"));
        }
        for (l, to) in [(&t4, "127.0.0.1"), (&t6, "::1")] {
            l.set_nonblocking(false).unwrap();
            let mut c = std::net::TcpStream::connect((to, port)).unwrap();
            c.write_all(b"x").unwrap();
            let (mut s, peer) = l.accept().unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            assert_eq!((b, peer.is_ipv6()), (*b"x", to == "::1"));
        }
    }

    /// The API's connections carry the stall limit (TCP_USER_TIMEOUT, inherited from the
    /// listener): a client that stops reading is cut off by the kernel.
    #[test]
    fn api_connections_have_a_stall_limit() {
        let l = bind_api("127.0.0.1:0".parse().unwrap()).unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (conn, _) = l.accept().unwrap();
        let got = socket2::SockRef::from(&conn).tcp_user_timeout().unwrap();
        assert_eq!(got, Some(api::STALL));
    }

    #[test]
    fn a_damaged_store_is_set_aside_and_a_new_one_begun() {
        let base = std::env::temp_dir().join(format!("cepheus-damaged-{}", std::process::id()));
        let path = base.join("data");
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("db"), b"whatever was there").unwrap();
        let calls = std::cell::Cell::new(0);
        let store = open_store(&path, 10, |p, max| {
            calls.set(calls.get() + 1);
            if calls.get() == 1 {
                return Err(cepheus_store::StoreError::Corrupt {
                    path: p.to_path_buf(),
                    what: "a bad crc".into(),
                });
            }
            cepheus_store::Store::open(p, max)
        })
        .unwrap();
        assert_eq!(calls.get(), 2);
        assert_eq!(store.counts(), (0, 0));
        let aside: Vec<_> = std::fs::read_dir(&base)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("data.damaged-"))
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(
            std::fs::read(base.join(&aside[0]).join("db")).unwrap(),
            b"whatever was there"
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn bind_errors_say_what_to_do() {
        let addr: SocketAddr = ([127, 0, 0, 1], 514).into();
        let denied = bind_error(
            "syslog.udp",
            addr,
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        )
        .to_string();
        assert!(
            denied.starts_with("syslog.udp: cannot bind 127.0.0.1:514"),
            "{denied}"
        );
        assert!(denied.contains("CAP_NET_BIND_SERVICE"), "{denied}");
        assert!(!denied.contains("another syslog daemon"), "{denied}");
        let taken = bind_error(
            "syslog.tcp",
            addr,
            std::io::Error::from(std::io::ErrorKind::AddrInUse),
        )
        .to_string();
        assert!(taken.contains("another syslog daemon"), "{taken}");
        assert!(
            taken.contains("README.md, \"Forwarding from rsyslog or syslog-ng\""),
            "{taken}"
        );
        // A port of cepheus's own (the default 5514) is not a syslog daemon's.
        let own = bind_error(
            "syslog.tcp",
            "127.0.0.1:5514".parse().unwrap(),
            std::io::Error::from(std::io::ErrorKind::AddrInUse),
        )
        .to_string();
        assert!(own.contains("set the listener to a free port"), "{own}");
        assert!(!own.contains("syslog daemon"), "{own}");
        let api = bind_error(
            "api.listen",
            addr,
            std::io::Error::from(std::io::ErrorKind::AddrInUse),
        )
        .to_string();
        assert!(api.contains("set `[api] listen` to a free port"), "{api}");
        assert!(!api.contains("syslog daemon"), "{api}");
    }
}
