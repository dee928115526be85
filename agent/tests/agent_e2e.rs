//! `cepheus run` end to end: the real binary on ephemeral ports, fed by util-linux `logger`
//! and by raw sockets; alerts read from its stdout, counters from its `/stats`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::netns::Netns;

/// A running agent; killed on drop (also when a test fails).
struct Agent {
    child: Child,
    dir: PathBuf,
    port: u16,
    api: u16,
    out: Arc<Mutex<Vec<Value>>>,
    /// Set once the thread copying stdout has read it to its end (the agent exited).
    out_done: Arc<std::sync::atomic::AtomicBool>,
    err: Arc<Mutex<String>>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both UDP and TCP on 127.0.0.1.
fn free_port() -> u16 {
    for _ in 0..100 {
        let t = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = t.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
    panic!("no free port");
}

/// Writes a secret (a token file) as an operator should: readable by its owner and group
/// only (the agent refuses one every user may read).
fn write_secret(path: &Path, text: impl AsRef<[u8]>) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o640)).unwrap();
}

fn scratch(name: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-{name}-{nanos}"));
    std::fs::create_dir_all(d.join("rules")).unwrap();
    d
}

impl Agent {
    /// Starts the agent in `dir` (rules in `dir/rules`) with extra config lines.
    fn start(dir: &Path, extra: &str) -> Agent {
        Agent::start_with(dir, "", extra)
    }

    /// As [`Agent::start`], with extra lines in the `[syslog]` table too.
    fn start_with(dir: &Path, syslog_extra: &str, extra: &str) -> Agent {
        Agent::start_full(dir, syslog_extra, "", extra)
    }

    /// As [`Agent::start_with`], with extra lines in the `[api]` table too.
    ///
    /// A port found free can be taken by another test's socket before the agent binds it;
    /// the agent then exits with "Address already in use", and the start is retried on
    /// fresh ports (any other failure panics at once).
    fn start_full(dir: &Path, syslog_extra: &str, api_extra: &str, extra: &str) -> Agent {
        Agent::start_env(dir, syslog_extra, api_extra, extra, &[])
    }

    /// As [`Agent::start_full`], with environment variables for the agent.
    fn start_env(
        dir: &Path,
        syslog_extra: &str,
        api_extra: &str,
        extra: &str,
        envs: &[(&str, &str)],
    ) -> Agent {
        Agent::start_wrapped(dir, syslog_extra, api_extra, extra, envs, &[])
    }

    /// As [`Agent::start_env`], the agent started by the command `wrap` (e.g. `prlimit`).
    fn start_wrapped(
        dir: &Path,
        syslog_extra: &str,
        api_extra: &str,
        extra: &str,
        envs: &[(&str, &str)],
        wrap: &[&str],
    ) -> Agent {
        let mut last = String::new();
        for _ in 0..5 {
            match Agent::try_start(dir, syslog_extra, api_extra, extra, envs, wrap) {
                Ok(agent) => return agent,
                Err(e) if e.contains("Address already in use") => last = e,
                Err(e) => panic!("agent did not start: {e}"),
            }
        }
        panic!("agent did not start after 5 tries on fresh ports: {last}");
    }

    fn try_start(
        dir: &Path,
        syslog_extra: &str,
        api_extra: &str,
        extra: &str,
        envs: &[(&str, &str)],
        wrap: &[&str],
    ) -> Result<Agent, String> {
        let port = free_port();
        let mut api = free_port();
        while api == port {
            api = free_port();
        }
        // 2 s unless the test sets its own.
        let idle = if syslog_extra.contains("tcp_idle_timeout") {
            ""
        } else {
            "tcp_idle_timeout = \"2s\"\n"
        };
        // `rules/` unless the test says otherwise.
        let rules = if extra.contains("[rules]") {
            ""
        } else {
            "[rules]\npaths = [\"rules\"]\n"
        };
        let cfg = format!(
            "[syslog]\nudp = [\"127.0.0.1:{port}\"]\ntcp = [\"127.0.0.1:{port}\"]\n\
             max_message_size = 1024\n{idle}{syslog_extra}\n\
             [api]\nlisten = \"127.0.0.1:{api}\"\n{api_extra}\n{rules}\
             [store]\npath = \"data\"\n{extra}"
        );
        std::fs::write(dir.join("cepheus.toml"), cfg).unwrap();
        let bin = env!("CARGO_BIN_EXE_cepheus");
        let mut cmd = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd
            .args(["run", "--config", "cepheus.toml"])
            .current_dir(dir)
            .env("RUST_LOG", "info")
            // Debug builds: an event with this app makes a shard's engine panic (fault test).
            .env("CEPHEUS_FAULT_PANIC_APP", "cepheus-test-fault")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = Arc::new(Mutex::new(Vec::new()));
        let err = Arc::new(Mutex::new(String::new()));
        let (so, se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let o = out.clone();
        let out_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = out_done.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(so).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    o.lock().unwrap().push(v);
                }
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let e = err.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(se);
            let mut buf = String::new();
            while r.read_line(&mut buf).unwrap_or(0) > 0 {
                e.lock().unwrap().push_str(&buf);
                buf.clear();
            }
        });
        let mut agent = Agent {
            child,
            dir: dir.to_path_buf(),
            port,
            api,
            out,
            out_done,
            err,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while http_get(api, "/health").is_none() {
            if let Ok(Some(status)) = agent.child.try_wait() {
                // Let the reader thread take the last of stderr before it is read.
                std::thread::sleep(Duration::from_millis(100));
                return Err(format!("exited with {status}: {}", agent.stderr()));
            }
            if Instant::now() >= deadline {
                return Err(format!("no /health within 20 s: {}", agent.stderr()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(agent)
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    fn stats(&self) -> Value {
        let body = http_get(self.api, "/stats").expect("/stats");
        serde_json::from_str(&body).unwrap()
    }

    /// Waits for an alert matching `pred`; panics with what was seen after `secs`.
    fn wait_alert(&self, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = self.out.lock().unwrap().iter().find(|v| pred(v)) {
                return v.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no such alert; alerts: {:?}\nstderr: {}",
                self.out.lock().unwrap(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn alerts(&self, pred: impl Fn(&Value) -> bool) -> usize {
        self.out.lock().unwrap().iter().filter(|v| pred(v)).count()
    }

    /// Waits until `/stats` satisfies `pred`.
    fn wait_stats(&self, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.stats();
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "stats never matched: {s}\nstderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the agent's log says `text` (it is copied from the process's stderr by a
    /// thread, and a shard may say it after /health answers).
    fn wait_stderr(&self, secs: u64, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !self.stderr().contains(text) {
            assert!(
                Instant::now() < deadline,
                "the log never said {text:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGHUP: reload the rules.
    fn hangup(&self) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    }

    /// The names of the rules /stats lists.
    fn rule_names(s: &Value) -> Vec<String> {
        s["rules"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|r| r["rule"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// SIGTERM, and the exit status within 5 s.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "agent did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Once the agent has exited: waits until every line it wrote to stdout has been read
    /// (the copying thread may still be parsing the pipe's last lines when it exits).
    fn wait_stdout_read(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.out_done.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "stdout not read to its end");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Returns once the alert sink has dealt with everything sent to it before: its
    /// writes done (stdout's handed to its thread; the store's note that they were written
    /// follows what that thread wrote),
    /// a shard's state it was sent saved. (`POST /groups/forget` of a rule no agent runs:
    /// the API asks the sink for its store mark first, through the sink's one mailbox;
    /// nothing is forgotten.) Instead of a sleep before a kill -9, which a loaded machine
    /// could outlast.
    fn sink_settled(&self) {
        let body = r#"{"rule":"no-such-rule-sink-barrier","key":"x"}"#;
        let mut s = TcpStream::connect(("127.0.0.1", self.api)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "POST /groups/forget HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
    }
}

/// A TCP port held for a listener to come later: bound, not listening, so connections to it
/// are refused meanwhile, and no other socket (another test's, an ephemeral client port)
/// can take it in between, as it could a port found free and let go.
struct ParkedPort(socket2::Socket);

impl ParkedPort {
    fn new() -> ParkedPort {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.set_reuse_address(true).unwrap();
        let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        s.bind(&addr.into()).unwrap();
        ParkedPort(s)
    }

    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().as_socket().unwrap().port()
    }

    /// The listener, on the port held.
    fn listen(self) -> TcpListener {
        self.0.listen(128).unwrap();
        self.0.into()
    }
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    if !resp.starts_with("HTTP/1.1 200") {
        return None;
    }
    resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

fn logger_available() -> bool {
    Command::new("logger")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `logger` to the agent; `proto` is `--udp` or `--tcp`, `format` `--rfc3164` or `--rfc5424`.
fn logger(port: u16, proto: &str, format: &str, tag: &str, msg: &str) {
    let st = Command::new("logger")
        .args([
            "--server",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            proto,
            format,
            "-t",
            tag,
            msg,
        ])
        .status()
        .unwrap();
    assert!(st.success(), "logger failed");
}

fn ts(v: &Value) -> f64 {
    let t = v["time"].as_str().unwrap();
    let ts = cepheus_core::time::Timestamp::parse_rfc3339(t).unwrap();
    ts.as_nanos() as f64 / 1e9
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

const SSH_RULES: &str = include_str!("../../rules/ssh.toml");

#[test]
fn logger_heartbeat_absence_and_ssh_bruteforce() {
    if !logger_available() {
        eprintln!("SKIPPED: util-linux `logger` is not installed (apt-get install bsdutils)");
        return;
    }
    let dir = scratch("logger");
    std::fs::write(
        dir.join("rules/hb.toml"),
        r#"
[[rule]]
name = "hb-missing"
severity = "critical"
group_by = ["host"]
events.hb = 'syslog and app == "heartbeat"'
pattern = "absent(hb) for 2s"
"#,
    )
    .unwrap();
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    let mut agent = Agent::start(&dir, "");
    let port = agent.port;

    // A heartbeat over UDP (RFC 3164), then silence: the absence fires after 2 s ...
    logger(port, "--udp", "--rfc3164", "heartbeat", "alive");
    let fired = agent.wait_alert(10, |v| v["rule"] == "hb-missing" && v["state"] == "firing");
    // ... and resolves when the heartbeat returns (over TCP, RFC 5424).
    logger(port, "--tcp", "--rfc5424", "heartbeat", "alive again");
    let resolved = agent.wait_alert(10, |v| {
        v["rule"] == "hb-missing" && v["state"] == "resolved"
    });
    assert_eq!(fired["id"], resolved["id"]);
    assert_eq!(fired["group"], resolved["group"]);

    // Five failed passwords then a success from one address, as sshd writes them.
    for i in 0..5 {
        let msg = format!(
            "Failed password for root from 203.0.113.9 port {} ssh2",
            52100 + i
        );
        logger(port, "--tcp", "--rfc3164", "sshd", &msg);
    }
    // Each `logger` is a connection of its own, and connections are read side by side: the
    // failures are taken by the shards before the success is sent, as minutes of sshd
    // would have them (waited for, not slept: a loaded machine may read them late). Two
    // heartbeats and five failures so far.
    agent.wait_events(7);
    logger(
        port,
        "--tcp",
        "--rfc3164",
        "sshd",
        "Accepted password for alice from 203.0.113.9 port 52150 ssh2",
    );
    let a = agent.wait_alert(10, |v| v["rule"] == "ssh-bruteforce-then-success");
    assert_eq!(a["group"]["src"], "203.0.113.9");
    assert_eq!(a["state"], "firing");

    let st = agent.terminate();
    assert!(st.success(), "exit status {st:?}: {}", agent.stderr());
}

#[test]
fn reload_keeps_armed_deadlines_and_survives_bad_files() {
    let dir = scratch("reload");
    // An expected host that never speaks: armed when monitoring begins, fires at start + 5 s.
    std::fs::write(
        dir.join("rules/hb.toml"),
        r#"
[[rule]]
name = "hb-missing"
severity = "critical"
group_by = ["host"]
expect = ["silent-host"]
events.hb = 'syslog and app == "heartbeat"'
pattern = "absent(hb) for 5s"
"#,
    )
    .unwrap();
    let marker = |app: &str| {
        format!(
            "[[rule]]\nname = \"marker\"\nseverity = \"info\"\nevents.m = 'syslog and app == \"{app}\"'\npattern = \"m\"\n"
        )
    };
    std::fs::write(dir.join("rules/marker.toml"), marker("one")).unwrap();
    let agent = Agent::start(&dir, "[engine]\nshards = 2\n");
    let started = now_secs();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let send = |line: &str| {
        udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
    };

    // Change the rule under the running agent: the watcher reloads it.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(dir.join("rules/marker.toml"), marker("two")).unwrap();
    agent.wait_stats(10, |s| s["sink"]["reloads"].as_u64() >= Some(1));
    let reloaded = now_secs();
    send("<13>1 2026-11-30T10:00:00Z h1 two - - - after reload");
    agent.wait_alert(10, |v| v["rule"] == "marker" && v["state"] == "firing");

    // The unchanged absence rule kept its armed deadline: it fires at start + 5 s, not at
    // reload + 5 s.
    let a = agent.wait_alert(15, |v| {
        v["rule"] == "hb-missing" && v["group"]["host"] == "silent-host"
    });
    let t = ts(&a);
    assert!(
        t < reloaded + 4.0,
        "fired at {t}, started {started}, reloaded {reloaded}: the deadline was re-armed"
    );
    assert!(
        t >= started + 3.0,
        "fired too early: {t} vs start {started}"
    );

    // Break the file: the error is reported and the old rule keeps alerting.
    std::fs::write(
        dir.join("rules/marker.toml"),
        "[[rule]]\nname = \"marker\"\npattern = \"m(\"\n",
    )
    .unwrap();
    let s = agent.wait_stats(10, |s| s["sink"]["reloads_failed"].as_u64() >= Some(1));
    assert!(agent.stderr().contains("marker.toml"), "{}", agent.stderr());
    // /stats says why, with file:line:column, until a reload succeeds.
    let why = s["reload_error"]["errors"][0].as_str().unwrap_or_default();
    assert!(why.contains("marker.toml:"), "{s}");
    // /metrics says it too, for an alerting rule on the monitor's side.
    let metrics = http_get(agent.api, "/metrics").expect("/metrics");
    assert!(
        metrics.contains("\ncepheus_rules_reload_refused 1\n"),
        "{metrics}"
    );
    assert!(metrics.contains("\ncepheus_uptime_seconds "), "{metrics}");
    // The log line itself names the first error (a log reader sees only that line).
    let log = agent.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("old rules keep running"))
        .unwrap_or_default();
    assert!(line.contains("marker.toml:"), "{log}");
    send("<13>1 2026-11-30T10:00:01Z h1 two - - - still there");
    let deadline = Instant::now() + Duration::from_secs(10);
    while agent.alerts(|v| v["rule"] == "marker") < 2 {
        assert!(Instant::now() < deadline, "old rule stopped alerting");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = agent.dir.clone();
}

#[test]
fn duplicates_are_dropped_and_ungrouped_rules_spread() {
    let dir = scratch("dedup");
    let mut text = String::new();
    for i in 0..20 {
        text.push_str(&format!(
            "[[rule]]\nname = \"r{i}\"\nseverity = \"low\"\nevents.e = 'syslog and app == \"app{i}\"'\npattern = \"e\"\n\n"
        ));
    }
    std::fs::write(dir.join("rules/many.toml"), text).unwrap();
    let agent = Agent::start(&dir, "[engine]\nshards = 2\n");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let line = b"<13>1 2026-11-30T10:00:00Z relay app3 - - - relayed twice";
    udp.send_to(line, ("127.0.0.1", agent.port)).unwrap();
    udp.send_to(line, ("127.0.0.1", agent.port)).unwrap();
    // Relayed once more with a line ending: the same message (as replay reads it).
    let crlf = [&line[..], b"\r\n"].concat();
    udp.send_to(&crlf, ("127.0.0.1", agent.port)).unwrap();
    // A byte-order mark before the PRI (a Windows agent's) is no part of the message.
    udp.send_to(
        b"\xEF\xBB\xBF<13>1 2026-11-30T10:00:00Z h app5 - - - with a BOM",
        ("127.0.0.1", agent.port),
    )
    .unwrap();
    for i in 0..20 {
        let l = format!("<13>1 2026-11-30T10:00:00Z h app{i} - - - hello {i}");
        udp.send_to(l.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
    }
    // The same garbage three times: malformed each time, no duplicate (only messages are
    // remembered as seen).
    for _ in 0..3 {
        udp.send_to(b"\xff\xfe not syslog", ("127.0.0.1", agent.port))
            .unwrap();
    }
    // A datagram is counted when read, before it is told a duplicate or parsed.
    let s = agent.wait_stats(10, |s| {
        let n = |k: &str| s["ingest"][k].as_u64().unwrap_or(0);
        n("udp_datagrams") >= 27 && n("duplicates") + n("parsed") + n("malformed") >= 27
    });
    assert_eq!(s["ingest"]["duplicates"], 2, "{s}");
    assert_eq!(s["ingest"]["malformed"], 3, "{s}");
    agent.wait_alert(10, |v| v["rule"] == "r3");
    let deadline = Instant::now() + Duration::from_secs(10);
    while agent.alerts(|v| v["rule"] == "r3") < 2
        || agent.alerts(|v| v["rule"] == "r5") < 2
        || agent.alerts(|_| true) < 22
    {
        assert!(Instant::now() < deadline, "alerts missing");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        agent.alerts(|v| v["rule"] == "r3"),
        2,
        "the duplicate alerted"
    );
    let s = agent.stats();
    let shards = s["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 2);
    let counts: Vec<usize> = shards
        .iter()
        .map(|sh| sh["rules"].as_array().unwrap().len())
        .collect();
    assert!(counts.iter().all(|&c| c > 0), "rules per shard: {counts:?}");
    assert_eq!(counts.iter().sum::<usize>(), 20);
    // Each ungrouped rule is on one shard, in `rules[].shards` as in `shards[].rules`.
    for r in s["rules"].as_array().unwrap() {
        let on = r["shards"].as_array().unwrap();
        assert_eq!(on.len(), 1, "{r}");
        let sh = on[0].as_u64().unwrap() as usize;
        assert!(
            shards[sh]["rules"].as_array().unwrap().contains(&r["rule"]),
            "{r}"
        );
    }
    assert!(
        shards.iter().all(|sh| sh["events"].as_u64() > Some(0)),
        "{s}"
    );
    // One group per rule, each with its `forget_after` timer armed, and no more.
    for sh in shards {
        let rules = sh["rules"].as_array().map_or(0, Vec::len) as u64;
        assert_eq!(sh["groups"].as_u64(), Some(rules), "{s}");
    }
    let timers: u64 = shards
        .iter()
        .map(|sh| sh["timer_entries"].as_u64().unwrap())
        .sum();
    assert_eq!(timers, 20, "{s}");
}

/// A FreeBSD host forwards without a hostname, and folds repeats of a message into a notice
/// (`last message repeated 4 times`): live, the notice is the sender's last message four times
/// more, so five failures count five.
#[test]
fn a_senders_repeat_notice_counts_its_copies_live() {
    let dir = scratch("syslogd-repeats");
    std::fs::write(
        dir.join("rules/five.toml"),
        "[[rule]]\nname = \"five\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.f = 'syslog and app == \"sshd\" and msg contains \"Failed\"'\npattern = \"f{5,} within 1m\"\n",
    )
    .unwrap();
    let agent = Agent::start(&dir, "");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let send = |l: &[u8]| udp.send_to(l, ("127.0.0.1", agent.port)).unwrap();
    send(b"<38>Mar  1 10:00:00 sshd[41]: Failed password for root from 203.0.113.9 port 5011 ssh2");
    send(b"<38>Mar  1 10:00:09 last message repeated 3 times");
    agent.wait_events(2);
    // Four failures: no episode yet.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        agent.alerts(|v| v["rule"] == "five"),
        0,
        "{}",
        agent.stderr()
    );
    send(b"<38>Mar  1 10:00:19 last message repeated 1 time");
    let a = agent.wait_alert(10, |v| v["rule"] == "five");
    assert_eq!(a["group"]["host"], "127.0.0.1", "{a}");
}

/// Hundreds of connections to the API held open without a request (a slowloris, or a fleet
/// of stuck probes) leave room for `/health` and the CLI: more than the old limit of 256 are
/// held here, and `/health` still answers (it waited for the first of them to time out, 5 s).
#[test]
fn idle_api_connections_leave_health_answering() {
    let dir = scratch("api-idle");
    std::fs::write(dir.join("rules/one.toml"), one_step_rule("one")).unwrap();
    let agent = Agent::start(&dir, "");
    let idle: Vec<TcpStream> = (0..600)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", agent.api)).ok())
        .collect();
    assert!(idle.len() > 500, "only {} connections opened", idle.len());
    let mut s = TcpStream::connect(("127.0.0.1", agent.api)).unwrap();
    // (Longer than a request's 1 s to send its head, shorter than the old 5 s.)
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    write!(
        s,
        "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    // The idle ones are closed once they have held their place a second without asking (a
    // read that times out, the connection still open, fails here).
    let mut first = &idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = Vec::new();
    let closed = first.read_to_end(&mut buf);
    assert!(closed.is_ok(), "{closed:?}");
    assert!(
        buf.is_empty() || String::from_utf8_lossy(&buf).contains("408"),
        "{buf:?}"
    );
}

/// A datagram holding a message of exactly `max_message_size` (1,024 here) and its line end,
/// `\n` or `\r\n`, is whole: the line end is not the message's; a byte more is oversized.
#[test]
fn a_datagram_of_the_maximum_size_with_its_line_end_is_whole() {
    let dir = scratch("udp-max");
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    let agent = Agent::start(&dir, "");
    let line = |len: usize, fill: &str| {
        let head = "<13>Nov 30 10:00:00 gw app: ";
        format!("{head}{}", fill.repeat(len - head.len()))
    };
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    // (Two messages that differ: the same one with another line end is a duplicate.)
    for d in [
        format!("{}\n", line(1024, "x")),
        format!("{}\r\n", line(1024, "y")),
        format!("{}\n", line(1025, "z")),
    ] {
        udp.send_to(d.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
    }
    let s = agent.wait_stats(10, |s| {
        let n = |k: &str| s["ingest"][k].as_u64().unwrap_or(0);
        n("parsed") + n("oversized") >= 3
    });
    assert_eq!(s["ingest"]["parsed"].as_u64(), Some(2), "{s}");
    assert_eq!(s["ingest"]["oversized"].as_u64(), Some(1), "{s}");
}

#[test]
fn bad_input_is_counted_and_good_lines_still_alert() {
    let dir = scratch("bad");
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    let mut agent = Agent::start(&dir, "");
    let fail = |i: u32| {
        format!(
            "<38>Nov 30 10:00:0{i} gw sshd[1]: Failed password for root from 198.51.100.7 port {} ssh2\n",
            40000 + i
        )
    };
    let mut c = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    c.write_all(fail(0).as_bytes()).unwrap();
    c.write_all(b"complete and utter gobbledegook\n").unwrap();
    c.write_all(&[0xde, 0xad, 0xbe, 0xef, 0x00]).unwrap();
    c.write_all(&vec![b'A'; 5000]).unwrap();
    c.write_all(b"\n").unwrap();
    c.write_all(fail(1).as_bytes()).unwrap();
    // Octet counting, including an oversized frame that is skipped by its length.
    let f2 = fail(2);
    write!(c, "{} {}", f2.len(), f2).unwrap();
    write!(c, "2000 {}", "B".repeat(2000)).unwrap();
    c.write_all(fail(3).as_bytes()).unwrap();
    drop(c);
    // A half-closed connection: a partial last frame, then FIN.
    let mut h = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    h.write_all(fail(4).trim_end().as_bytes()).unwrap();
    h.shutdown(Shutdown::Write).unwrap();
    // A connection that goes silent mid-frame: closed by the idle timeout, its unfinished
    // frame dropped and counted (cut mid-way, it is no message; the sender did not close).
    let mut idle = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    idle.write_all(b"<13>never finished").unwrap();
    // UDP: garbage and an oversized datagram.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(&[0u8, 1, 2, 3, 0xff], ("127.0.0.1", agent.port))
        .unwrap();
    udp.send_to(&vec![b'x'; 1500], ("127.0.0.1", agent.port))
        .unwrap();
    let a = agent.wait_alert(10, |v| v["rule"] == "ssh-bruteforce");
    assert_eq!(a["group"]["src"], "198.51.100.7");
    let s = agent.wait_stats(10, |s| {
        let n = |k: &str| s["ingest"][k].as_u64().unwrap_or(0);
        n("tcp_idle_closed") >= 1
            && n("tcp_unfinished") == 1
            && n("parsed") == 5
            && n("malformed") >= 2
            && n("oversized") >= 3
    });
    let ing = &s["ingest"];
    assert!(ing["malformed"].as_u64() >= Some(2), "{s}");
    assert!(ing["oversized"].as_u64() >= Some(3), "{s}");
    assert_eq!(ing["parsed"].as_u64(), Some(5), "{s}");
    assert!(agent.stderr().contains("malformed"), "{}", agent.stderr());
    // Each listener says what came in on it: 2 datagrams on UDP; on TCP 3 connections so far
    // (the idle one included) and every frame, oversized ones too.
    let listeners = s["listeners"].as_array().expect("listeners");
    let of = |proto: &str| {
        let name = format!("{proto} 127.0.0.1:{}", agent.port);
        listeners
            .iter()
            .find(|l| l["listener"] == name.as_str())
            .unwrap_or_else(|| panic!("{name}: {s}"))
    };
    let (udp_l, tcp_l) = (of("udp"), of("tcp"));
    assert_eq!(udp_l["messages"], 2, "{s}");
    // (An oversized message adds no bytes.)
    assert_eq!(udp_l["bytes"], 5, "{s}");
    assert_eq!(udp_l["connections"], 0, "{s}");
    assert!(udp_l["last_message"].is_string(), "{s}");
    assert_eq!(tcp_l["connections"], 3, "{s}");
    assert_eq!(
        tcp_l["messages"],
        ing["tcp_frames"].as_u64().unwrap() + 2,
        "{s}"
    );
    let metrics = http_get(agent.api, "/metrics").expect("/metrics");
    let line = format!(
        "cepheus_listener_messages_total{{listener=\"udp 127.0.0.1:{}\"}} 2\n",
        agent.port
    );
    assert!(metrics.contains(&line), "{line}\n{metrics}");
    drop(idle);
    let st = agent.terminate();
    assert!(st.success(), "{st:?}");
}

// ---- flows in `cepheus run`: live capture on a veth pair, a scan rule on flow events ----------

const SCAN_RULES: &str = r#"
[[rule]]
name = "mini-scan"
severity = "medium"
message = "{src} probed several ports"
group_by = ["src"]
events.attempt = 'flow and kind in ["flow_start", "attempt_failed"] and proto == "tcp"'
pattern = "attempt{5,} distinct(dport) within 1m"
"#;

#[test]
fn flow_rules_alert_on_live_capture_in_run() {
    let Some(ns) = Netns::create("flow_rules_alert_on_live_capture_in_run", "crn", 210) else {
        return;
    };
    let (here, there) = (ns.here.clone(), ns.there.clone());
    let dir = scratch("capture");
    std::fs::write(dir.join("rules/scan.toml"), SCAN_RULES).unwrap();
    let agent = Agent::start(
        &dir,
        &format!("[capture]\ninterface = \"{}\"\nfilter = \"tcp\"\n", ns.veth),
    );
    std::thread::sleep(Duration::from_millis(500));
    // Six connection attempts to closed ports from the namespace (each SYN answered by RST).
    let probes: Vec<String> = (0..6)
        .map(|i| format!("(echo > /dev/tcp/{here}/{}) 2>/dev/null", 20_000 + i))
        .collect();
    ns.exec(&["bash", "-c", &format!("{}; true", probes.join("; "))]);
    let alert = agent.wait_alert(15, |a| a["rule"] == "mini-scan");
    assert_eq!(alert["state"], "firing");
    assert_eq!(alert["group"]["src"], there.as_str());
    assert_eq!(alert["message"], format!("{there} probed several ports"));
    // One episode, not one alert per probe.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        agent.alerts(|a| a["rule"] == "mini-scan" && a["state"] == "firing"),
        1
    );
    // The capture's counters are in /stats and /metrics (published every 250 ms).
    let s = agent.wait_stats(10, |s| {
        s["capture"]["received"].as_u64() >= Some(12) && s["capture"]["flows"].as_u64() >= Some(6)
    });
    let cap = &s["capture"];
    assert_eq!(cap["dropped"], 0, "{s}");
    assert_eq!(cap["kernel_dropped"], 0, "{s}");
    let metrics = http_get(agent.api, "/metrics").expect("/metrics");
    assert!(
        metrics.contains("cepheus_capture_kernel_dropped_total 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("cepheus_capture_received_total "),
        "{metrics}"
    );
    assert!(metrics.contains("cepheus_capture_down 0"), "{metrics}");
    assert_ne!(
        caps_of(agent.child.id(), "CapEff") & CAP_NET_RAW,
        0,
        "kept for capture"
    );
    // The interface goes down: said, shown as down; back up, the capture is opened again
    // and sees the traffic after it.
    assert!(crate::netns::sh(&["ip", "link", "set", &ns.veth, "down"]));
    agent.wait_stats(10, |s| s["capture"]["down"] == 1);
    agent.wait_stderr(10, "the interface went down");
    assert!(crate::netns::sh(&["ip", "link", "set", &ns.veth, "up"]));
    let before = cap["flows"].as_u64().unwrap_or(0);
    agent.wait_stats(20, |s| {
        s["capture"]["down"] == 0 && s["capture"]["reopened"] == 1
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        ns.exec(&[
            "bash",
            "-c",
            &format!("(echo > /dev/tcp/{here}/21000) 2>/dev/null; true"),
        ]);
        let s = agent.stats();
        if s["capture"]["flows"].as_u64() > Some(before) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no flow after the capture came back: {s}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// With `capture.syslog`, syslog seen on the wire (a mirror port) becomes syslog events with
/// `peer` = the sender, though nothing on this host listens on the port it was sent to.
#[test]
fn capture_syslog_reads_the_syslog_on_the_wire() {
    let Some(ns) = Netns::create("capture_syslog_reads_the_syslog_on_the_wire", "crs", 218) else {
        return;
    };
    let (here, there) = (ns.here.clone(), ns.there.clone());
    let dir = scratch("capture-syslog");
    std::fs::write(
        dir.join("rules/probe.toml"),
        r#"
[[rule]]
name = "wire-syslog"
severity = "info"
message = "{app} from {peer}"
group_by = ["peer"]
events.a = 'syslog and app == "probe"'
pattern = "a"
"#,
    )
    .unwrap();
    let agent = Agent::start(
        &dir,
        &format!(
            "[capture]\ninterface = \"{}\"\nfilter = \"udp\"\nsyslog = true\n",
            ns.veth
        ),
    );
    std::thread::sleep(Duration::from_millis(500));
    ns.exec(&[
        "bash",
        "-c",
        &format!("echo -n '<13>Dec  2 05:40:00 box probe: hello' > /dev/udp/{here}/514; true"),
    ]);
    let alert = agent.wait_alert(15, |a| a["rule"] == "wire-syslog");
    assert_eq!(alert["group"]["peer"], there.as_str());
    assert_eq!(alert["message"], format!("probe from {there}"));
}

#[test]
fn followed_file_lines_are_ingested_across_rotation() {
    let dir = scratch("files");
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    let log = dir.join("auth.log");
    // An old line already in the file is read too (`files_from = "beginning"`); a partial
    // line waits for its newline.
    std::fs::write(
        &log,
        "Nov 30 10:00:00 gw sshd[1]: Failed password for root from 198.51.100.9 port 1 ssh2\n",
    )
    .unwrap();
    let agent = Agent::start_with(
        &dir,
        "files = [\"auth.log\"]\nfiles_from = \"beginning\"",
        "",
    );
    let append = |text: &str| {
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    };
    let fail = |i: u32| {
        format!(
            "Nov 30 10:00:0{i} gw sshd[1]: Failed password for root from 198.51.100.9 port {i} ssh2\n"
        )
    };
    append(&fail(2));
    append(&fail(3));
    // Half a line, then the rest.
    let f4 = fail(4);
    append(&f4[..20]);
    std::thread::sleep(Duration::from_millis(500));
    append(&f4[20..]);
    // Rotation: the file is renamed and a new one takes its place.
    std::fs::rename(&log, dir.join("auth.log.1")).unwrap();
    std::fs::write(&log, fail(5) + "Nov 30 10:00:09 gw sshd[1]: Accepted password for root from 198.51.100.9 port 9 ssh2\n").unwrap();
    let a = agent.wait_alert(10, |a| a["rule"] == "ssh-bruteforce-then-success");
    assert_eq!(a["group"]["src"], "198.51.100.9");
    let s = agent.stats();
    assert_eq!(s["ingest"]["malformed"], 0, "{s}");
    // The lines read from the file are counted as routed, as datagrams are (all 6 reached the
    // shards before the alert they made; the count follows the hand-over).
    agent.wait_stats(10, |s| s["ingest"]["routed"] == 6);
}

/// By default a followed file is read from its end, like `tail -F`: the lines already there
/// are not new events (a restart must not replay a month of auth.log as fresh failures).
#[test]
fn followed_files_start_at_their_end_by_default() {
    let dir = scratch("files-end");
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    let log = dir.join("auth.log");
    let fail = |i: u32| {
        format!(
            "Nov 30 10:00:0{i} gw sshd[1]: Failed password for root from 198.51.100.7 port {i} ssh2\n"
        )
    };
    // Five old failures and a half-written line.
    let old: String = (1..=5).map(fail).collect();
    std::fs::write(&log, old + "Nov 30 10:00:09 gw sshd[1]: Accepted pass").unwrap();
    let agent = Agent::start_with(&dir, "files = [\"auth.log\"]", "");
    std::thread::sleep(Duration::from_millis(500));
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(b"word for root from 198.51.100.7 port 9 ssh2\n")
        .unwrap();
    f.write_all(fail(6).as_bytes()).unwrap();
    agent.wait_stats(10, |s| s["ingest"]["parsed"].as_u64() >= Some(2));
    // Time for anything more (an old line read again) to be counted too.
    std::thread::sleep(Duration::from_millis(500));
    let s = agent.stats();
    // The completed line and the new one; none of the old ones.
    assert_eq!(s["ingest"]["parsed"], 2, "{s}");
    assert_eq!(
        agent.alerts(|a| a["rule"] == "ssh-bruteforce-then-success"),
        0
    );
}

/// SIGTERM while a sender keeps its TCP connection open (as rsyslog and syslog-ng do): what
/// it already sent is read and handled before the agent exits, but for a last message it
/// did not finish (cut mid-way: dropped, as at an idle close).
#[test]
fn sigterm_handles_what_open_tcp_connections_already_sent() {
    let dir = scratch("tcp-drain");
    std::fs::write(
        dir.join("rules/echo.toml"),
        "[[rule]]\nname = \"echo\"\nseverity = \"info\"\nevents.e = 'syslog and app == \"load\"'\npattern = \"e\"\n",
    )
    .unwrap();
    let mut agent = Agent::start(&dir, "");
    let mut c = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    let n = 5_000;
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "<13>Dec  2 05:40:00 h{} load: message {i}\n",
            i % 7
        ));
    }
    text.push_str("<13>Dec  2 05:40:00 h1 load: cut mid-wa");
    c.write_all(text.as_bytes()).unwrap();
    let st = agent.terminate();
    assert!(st.success(), "{st:?}: {}", agent.stderr());
    agent.wait_stdout_read();
    assert_eq!(
        agent.alerts(|a| a["rule"] == "echo"),
        n,
        "{}",
        agent.stderr()
    );
    drop(c);
}

/// An event a rule's condition matches but that lacks a `group_by` field is counted as
/// `keyless`, not as `unmatched` (the operator's "why is my heartbeat ignored").
#[test]
fn events_without_a_group_field_are_counted_keyless() {
    let dir = scratch("keyless");
    std::fs::write(
        dir.join("rules/hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"procid\"]\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 1m\"\n",
    )
    .unwrap();
    let agent = Agent::start(&dir, "");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    // No process id: nothing to group by. (A message without a hostname has its sender's
    // address as host: it is not keyless by host.)
    udp.send_to(
        b"<13>Dec  2 05:40:00 web-1 heartbeat: no pid here",
        ("127.0.0.1", agent.port),
    )
    .unwrap();
    udp.send_to(
        b"<13>Dec  2 05:40:00 web-1 cron: unrelated",
        ("127.0.0.1", agent.port),
    )
    .unwrap();
    // `parsed` is counted before the event is routed: wait until both have been placed.
    let s = agent.wait_stats(10, |s| {
        s["ingest"]["parsed"] == 2
            && s["ingest"]["keyless"].as_u64().unwrap_or(0)
                + s["ingest"]["unmatched"].as_u64().unwrap_or(0)
                == 2
    });
    assert_eq!(s["ingest"]["keyless"], 1, "{s}");
    assert_eq!(s["ingest"]["unmatched"], 1, "{s}");
    assert!(s["shards"][0].get("future").is_some(), "{s}");
}

/// Started under a umask of 000 (a shell's), the agent makes its store, states and output
/// file for its own user and group only: never writable or readable by others.
#[test]
fn what_the_agent_makes_is_not_for_other_users_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("umask");
    std::fs::write(dir.join("rules/fresh.toml"), one_step_rule("fresh")).unwrap();
    let agent = Agent::start_wrapped(
        &dir,
        "",
        "",
        "[output]\nfile = \"out.jsonl\"\n",
        &[],
        &["sh", "-c", "umask 000; exec \"$0\" \"$@\""],
    );
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(
        b"<13>1 2026-12-03T05:00:00Z h x - - - hi",
        ("127.0.0.1", agent.port),
    )
    .unwrap();
    agent.wait_alert(10, |v| v["rule"] == "fresh");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dir.join("data/state").is_dir() {
        assert!(Instant::now() < deadline, "no state folder");
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in ["data", "data/db", "data/state", "out.jsonl"] {
        let mode = std::fs::metadata(dir.join(p)).unwrap().permissions().mode();
        assert_eq!(mode & 0o027, 0, "{p}: {mode:o}");
    }
}

/// Under an open-files limit below `max_connections` (systemd's default soft limit is 1,024,
/// the default `max_connections` too), the connection limit is cut to what fits: idle
/// connections are then evicted for a new sender instead of `accept` failing for it until
/// the idle timeout.
#[test]
fn idle_connections_cannot_lock_senders_out_under_a_low_open_files_limit() {
    let dir = scratch("nofile");
    std::fs::write(dir.join("rules/fresh.toml"), one_step_rule("fresh")).unwrap();
    let agent = Agent::start_wrapped(
        &dir,
        "tcp_idle_timeout = \"5m\"\n",
        "",
        "",
        &[],
        &["prlimit", "--nofile=300:300", "--"],
    );
    agent.wait_stderr(10, "does not fit the open-files limit");
    let idle: Vec<TcpStream> = (0..400)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", agent.port)).ok())
        .collect();
    assert!(idle.len() > 300, "only {} connections opened", idle.len());
    // Idle from when the agent took them (a place is made only for one silent 1 s): waited
    // until it has taken or refused every one, then the 1.5 s.
    let n = idle.len() as u64;
    agent.wait_stats(30, |s| {
        let c = |k: &str| s["ingest"][k].as_u64().unwrap_or(0);
        c("tcp_connections") + c("tcp_rejected") >= n
    });
    std::thread::sleep(Duration::from_millis(1500));
    let mut fresh = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    fresh
        .write_all(b"<13>Dec  2 05:40:00 edge x: while idle ones are held\n")
        .unwrap();
    agent.wait_alert(10, |a| a["rule"] == "fresh");
    let s = agent.stats();
    assert!(s["ingest"]["tcp_evicted"].as_u64() >= Some(1), "{s}");
    drop(idle);
}

/// A rule file of one rule `name` that alerts on each syslog event of app `x`.
fn one_step_rule(name: &str) -> String {
    format!(
        "[[rule]]\nname = \"{name}\"\nseverity = \"low\"\nevents.a = 'syslog and app == \"x\"'\npattern = \"a\"\n"
    )
}

/// A SIGHUP while the agent is starting (before its reload handler runs: a `kill -HUP` from
/// config management, logrotate) does not end it (the default action did, silently, and
/// systemd counts that a clean exit): it starts, and reloads the rules.
#[test]
fn a_sighup_while_starting_reloads_instead_of_killing() {
    let dir = scratch("early-hup");
    std::fs::write(dir.join("rules/fresh.toml"), one_step_rule("fresh")).unwrap();
    let agent = Agent::start_wrapped(
        &dir,
        "",
        "",
        "",
        &[],
        // (A SIGHUP every 10 ms from the moment the agent catches it (its `SigCgt` mask odd:
        // the first thing it does), while it starts: some lands before its reload handler,
        // whatever the machine's speed. Sent after a fixed wait, one could kill the shell
        // before its `exec` on a loaded machine, or the agent before it catches SIGHUP: a
        // window no program closes, as the runtime starts before `main`.)
        &[
            "sh",
            "-c",
            "(until case \"$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$$/status)\" in *[13579bdf]) true;; *) false;; esac; do sleep 0.001; done; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do kill -HUP $$ || exit; sleep 0.01; done) & exec \"$0\" \"$@\"",
        ],
    );
    // (Caught before the reload handler was in place, then reloaded.)
    agent.wait_stderr(10, "SIGHUP came while starting");
    agent.wait_stderr(10, "reloading rules");
    assert!(http_get(agent.api, "/health").is_some());
}

/// Started on the built-in rules (no `rules/` folder, no `rules.paths`): a `rules/` folder
/// made later is read at the next SIGHUP and watched from then on; its rule tests
/// (`*.test.toml`) are not rules, and a change to one reloads nothing.
#[test]
fn a_rules_folder_made_after_start_is_read_at_sighup() {
    let dir = scratch("builtin-then-rules");
    std::fs::remove_dir_all(dir.join("rules")).unwrap();
    let agent = Agent::start(&dir, "[rules]\npaths = []\n");
    let s = agent.stats();
    assert!(
        Agent::rule_names(&s).contains(&"heartbeat-missing".to_string()),
        "{s}"
    );
    std::fs::create_dir(dir.join("rules")).unwrap();
    std::fs::write(dir.join("rules/mine.toml"), one_step_rule("mine")).unwrap();
    agent.hangup();
    // (Waited for by the shards' rules too: the reload is counted before every shard has
    // installed it, and a loaded machine showed the old rules in between.)
    let s = agent.wait_stats(10, |s| {
        s["sink"]["reloads"].as_u64() >= Some(1) && Agent::rule_names(s) == ["mine"]
    });
    assert_eq!(Agent::rule_names(&s), ["mine"], "{s}");
    let reloads = s["sink"]["reloads"].clone();
    // A rule test written beside it: no reload.
    std::fs::write(dir.join("rules/mine.test.toml"), "# a test to come\n").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(agent.stats()["sink"]["reloads"], reloads);
    // The folder is watched now: an edit reloads without a signal. (Waited for by its
    // result, not by the reload count: on a loaded machine a late event of the writes above
    // may make one more reload, of the same text, before this one.)
    std::fs::write(dir.join("rules/mine.toml"), one_step_rule("mine2")).unwrap();
    let s = agent.wait_stats(10, |s| Agent::rule_names(s) == ["mine2"]);
    assert_eq!(Agent::rule_names(&s), ["mine2"], "{s}");
}

/// A rule file written in several steps (an editor, a deployment) is read once, when the
/// writes have stopped: one reload, of the last text.
#[test]
fn a_file_written_in_several_steps_reloads_once() {
    let dir = scratch("debounce");
    std::fs::write(dir.join("rules/r.toml"), one_step_rule("r0")).unwrap();
    let agent = Agent::start(&dir, "");
    // Quiet spells of 150 ms or more between two writes (a loaded machine may pause this
    // thread that long): a reload may come in each, 200 ms of quiet being the agent's cue.
    let mut spells = 0;
    let mut last = Instant::now();
    for i in 1..=15 {
        std::fs::write(dir.join("rules/r.toml"), one_step_rule(&format!("r{i}"))).unwrap();
        if i > 1 && last.elapsed() >= Duration::from_millis(150) {
            spells += 1;
        }
        last = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = agent.wait_stats(10, |s| s["sink"]["reloads"].as_u64() >= Some(1));
    std::thread::sleep(Duration::from_millis(1000));
    let s2 = agent.stats();
    let reloads = s2["sink"]["reloads"].as_u64().unwrap();
    assert!(
        reloads >= 1 && reloads <= 1 + spells,
        "{reloads} reloads, {spells} quiet spells\n{s}\n{s2}"
    );
    assert_eq!(Agent::rule_names(&s2), ["r15"], "{s2}");
}

/// A rule file truncated and written a moment later (a writer paused between the two) is
/// waited for: the reload reads its new text, never the empty file that would have removed
/// its rules; a file left empty is read within the reload's 5-s cap all the same.
#[test]
fn an_empty_rule_file_is_waited_for_before_a_reload() {
    let dir = scratch("empty-wait");
    std::fs::write(dir.join("rules/r.toml"), one_step_rule("r0")).unwrap();
    let agent = Agent::start(&dir, "");
    std::fs::write(dir.join("rules/r.toml"), "").unwrap();
    std::thread::sleep(Duration::from_millis(900));
    std::fs::write(dir.join("rules/r.toml"), one_step_rule("r1")).unwrap();
    let s = agent.wait_stats(10, |s| s["sink"]["reloads"].as_u64() >= Some(1));
    std::thread::sleep(Duration::from_millis(600));
    let s2 = agent.stats();
    assert_eq!(s2["sink"]["reloads"], 1, "{s}\n{s2}");
    assert_eq!(Agent::rule_names(&s2), ["r1"], "{s2}");
    // Left empty: read once the cap has passed.
    let t = Instant::now();
    std::fs::write(dir.join("rules/r.toml"), "").unwrap();
    let s3 = agent.wait_stats(15, |s| s["sink"]["reloads"].as_u64() >= Some(2));
    assert!(t.elapsed() >= Duration::from_secs(4), "{s3}");
    assert!(Agent::rule_names(&s3).is_empty(), "{s3}");
}

/// A rule whose `max_groups` is full says so in the log (a flood of keys makes it blind to a
/// new one): counted in /stats, and said within seconds.
#[test]
fn a_full_group_budget_is_said_in_the_log() {
    let dir = scratch("budget");
    std::fs::write(
        dir.join("rules/few.toml"),
        "[[rule]]\nname = \"few\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nmax_groups = 2\nevents.a = 'syslog and app == \"login\"'\npattern = \"a{3,} within 1m\"\n",
    )
    .unwrap();
    let agent = Agent::start(&dir, "[engine]\nshards = 1\n");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    for h in ["h1", "h2", "h3", "h4", "h5"] {
        let line = format!("<13>Dec  2 05:40:00 {h} login: x");
        udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
    }
    agent.wait_stats(10, |s| s["ingest"]["parsed"] == 5);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !agent.stderr().contains("rule few: refused 3 new group(s)") {
        assert!(Instant::now() < deadline, "{}", agent.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        agent
            .stderr()
            .contains("max_groups budget is full (2 groups)"),
        "{}",
        agent.stderr()
    );
}

/// Only rule files and the `expect` files they read trigger a reload: a log written into the
/// rule folder (the agent's own stderr, say) made it reload every 200 ms.
#[test]
fn only_rule_and_expect_files_trigger_a_reload() {
    let dir = scratch("reload-filter");
    std::fs::write(dir.join("rules/hosts.txt"), "web-1\n").unwrap();
    std::fs::write(
        dir.join("rules/hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nexpect = { file = \"hosts.txt\" }\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 1h\"\n",
    )
    .unwrap();
    let agent = Agent::start(&dir, "");
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..5 {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("rules/agent.log"))
            .unwrap();
        writeln!(f, "line {i}").unwrap();
        std::fs::write(dir.join("rules/.hb.toml.swp"), format!("{i}")).unwrap();
        // Beside the rule folder (where its parent is watched for the folder itself): the
        // agent's own config, another tool's file.
        std::fs::write(dir.join("other.toml"), format!("x = {i}\n")).unwrap();
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(agent.stats()["sink"]["reloads"], 0, "{}", agent.stderr());
    std::fs::write(dir.join("rules/hosts.txt"), "web-1\nweb-2\n").unwrap();
    agent.wait_stats(10, |s| s["sink"]["reloads"].as_u64() >= Some(1));
}

/// A rule folder reached through a link, with an `expect` file in it: an edit reloads (the
/// expect file's folder is the rule folder's real path; watching it again must not hide the
/// rule folder's events).
#[test]
fn a_linked_rule_folder_with_an_expect_file_reloads_on_edits() {
    let dir = scratch("linked-rules");
    std::fs::remove_dir(dir.join("rules")).unwrap();
    std::fs::create_dir_all(dir.join("real/rules")).unwrap();
    std::os::unix::fs::symlink(dir.join("real/rules"), dir.join("rules")).unwrap();
    std::fs::write(dir.join("rules/more.txt"), "web-2\n").unwrap();
    let rule = |window: &str| {
        format!(
            "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nexpect = {{ file = \"more.txt\" }}\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for {window}\"\n"
        )
    };
    std::fs::write(dir.join("rules/hb.toml"), rule("1h")).unwrap();
    let agent = Agent::start(&dir, "");
    let reloads = |s: &Value| s["sink"]["reloads"].as_u64().unwrap_or(0);
    for (i, window) in ["2h", "3h"].iter().enumerate() {
        std::thread::sleep(Duration::from_millis(500));
        std::fs::write(dir.join("rules/hb.toml"), rule(window)).unwrap();
        agent.wait_stats(10, |s| reloads(s) > i as u64);
    }
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(
        dir.join("real/rules/new.toml"),
        rule("4h").replace("\"hb\"", "\"hb2\""),
    )
    .unwrap();
    agent.wait_stats(10, |s| reloads(s) > 2);
}

/// An `expect` file that goes missing makes the reload fail (the old rules go on); once it
/// is back, the rules reload by themselves. One outside the rule folder is watched too.
#[test]
fn an_expect_file_that_comes_back_reloads_the_rules() {
    let dir = scratch("expect-back");
    std::fs::write(dir.join("hosts.txt"), "web-1\n").unwrap();
    std::fs::write(dir.join("rules/more.txt"), "web-2\n").unwrap();
    let rule = |name: &str, file: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nexpect = {{ file = \"{file}\" }}\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 1h\"\n"
        )
    };
    let text = [rule("out", "../hosts.txt"), rule("in", "more.txt")].concat();
    std::fs::write(dir.join("rules/hb.toml"), text).unwrap();
    let agent = Agent::start(&dir, "");
    let reloads = |s: &Value| s["sink"]["reloads"].as_u64().unwrap_or(0);
    let failed = |s: &Value| s["sink"]["reloads_failed"].as_u64().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(500));
    // Outside the rule folder: an edit reloads.
    std::fs::write(dir.join("hosts.txt"), "web-1\nweb-3\n").unwrap();
    agent.wait_stats(10, |s| reloads(s) >= 1);
    for name in ["rules/more.txt", "hosts.txt"] {
        std::thread::sleep(Duration::from_millis(500));
        let before = agent.stats();
        std::fs::rename(dir.join(name), dir.join("moved.txt")).unwrap();
        agent.wait_stats(10, |s| failed(s) > failed(&before));
        std::thread::sleep(Duration::from_millis(500));
        std::fs::rename(dir.join("moved.txt"), dir.join(name)).unwrap();
        let after = agent.wait_stats(10, |s| reloads(s) > reloads(&before));
        assert!(after["reload_error"].is_null(), "{name}: {after}");
    }
}

/// A rule file that a reload brings in, naming an `expect` file outside the rule folders:
/// that file is watched from that reload on (its folder was watched only from the reload
/// after, so its edits went unread until a SIGHUP).
#[test]
fn an_expect_file_of_a_rule_added_by_a_reload_is_watched() {
    let dir = scratch("expect-added");
    std::fs::create_dir_all(dir.join("lists")).unwrap();
    std::fs::write(dir.join("lists/q.txt"), "q1\n").unwrap();
    std::fs::write(dir.join("rules/r.toml"), one_step_rule("r0")).unwrap();
    let agent = Agent::start(&dir, "");
    let reloads = |s: &Value| s["sink"]["reloads"].as_u64().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(
        dir.join("rules/q.toml"),
        "[[rule]]\nname = \"hbq\"\nseverity = \"info\"\ngroup_by = [\"host\"]\nexpect = { file = \"../lists/q.txt\" }\nevents.hb = 'syslog and app == \"hbq\"'\npattern = \"absent(hb) for 1h\"\n",
    )
    .unwrap();
    agent.wait_stats(10, |s| reloads(s) >= 1);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(dir.join("lists/q.txt"), "q1\nq2\n").unwrap();
    agent.wait_stats(10, |s| reloads(s) >= 2);
    // The log says the list's rule was edited (its state goes on: not `changed`).
    agent.wait_stderr(10, "changed= edited=hbq removed=");
}

/// A list file a condition reads (`host in file("...")`), outside the rule folder, is watched
/// like an `expect` file: an edit reloads the rules and the next events are tested against
/// the new list; a list gone makes the reload fail (the old rules go on) until it is back.
#[test]
fn a_list_file_edit_reloads_the_rules_with_the_new_list() {
    let dir = scratch("list-file");
    std::fs::create_dir_all(dir.join("lists")).unwrap();
    std::fs::write(dir.join("lists/watch.txt"), "# hosts to watch\nh1\n").unwrap();
    std::fs::write(
        dir.join("rules/w.toml"),
        "[[rule]]\nname = \"watched\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"login\" and host in file(\"../lists/watch.txt\")'\npattern = \"a\"\n",
    )
    .unwrap();
    let agent = Agent::start(&dir, "");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    // (Each line its own: the same line again from one sender is taken for a duplicate.)
    let sent = std::cell::Cell::new(0);
    let send = |host: &str| {
        sent.set(sent.get() + 1);
        let line = format!("<14>1 - {host} login - - - in {}", sent.get());
        udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
    };
    let reloads = |s: &Value| s["sink"]["reloads"].as_u64().unwrap_or(0);
    let failed = |s: &Value| s["sink"]["reloads_failed"].as_u64().unwrap_or(0);
    send("h1");
    send("h2");
    agent.wait_alert(10, |v| v["rule"] == "watched" && v["group"]["host"] == "h1");
    // (`h2` matched no rule: the ingest let it go.)
    let s = agent.wait_stats(10, |s| s["ingest"]["unmatched"].as_u64() >= Some(1));
    // `/stats` names the list the rules read, and how many items it held when they loaded.
    let listed = |s: &Value| -> Vec<(String, u64)> {
        (s["lists"].as_array().into_iter().flatten())
            .map(|l| {
                let path = l["path"].as_str().unwrap_or_default().to_string();
                (path, l["items"].as_u64().unwrap_or(0))
            })
            .collect()
    };
    let lists = listed(&s);
    assert!(
        matches!(lists.as_slice(), [(p, 1)] if p.ends_with("lists/watch.txt")),
        "{s}"
    );
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(dir.join("lists/watch.txt"), "h1\nh2\n").unwrap();
    let s = agent.wait_stats(10, |s| reloads(s) >= 1);
    // The log names the list and what it now holds, and so does `/stats`.
    agent.wait_stderr(10, "watch.txt (2 items)");
    assert_eq!(listed(&s), [(lists[0].0.clone(), 2)], "{s}");
    send("h2");
    agent.wait_alert(10, |v| v["rule"] == "watched" && v["group"]["host"] == "h2");
    // Only the second `h2` matched: the first came before the list named it.
    assert_eq!(
        agent.alerts(|v| v["group"]["host"] == "h2" && v["state"] == "firing"),
        1
    );
    std::thread::sleep(Duration::from_millis(500));
    std::fs::rename(dir.join("lists/watch.txt"), dir.join("lists/moved.txt")).unwrap();
    let s = agent.wait_stats(10, |s| failed(s) >= 1);
    assert_eq!(reloads(&s), 1, "{s}");
    assert!(
        s["reload_error"]
            .to_string()
            .contains("cannot read list file"),
        "{s}"
    );
    // Back: the rules reload by themselves.
    std::thread::sleep(Duration::from_millis(500));
    std::fs::rename(dir.join("lists/moved.txt"), dir.join("lists/watch.txt")).unwrap();
    let s = agent.wait_stats(10, |s| reloads(s) >= 2);
    assert!(s["reload_error"].is_null(), "{s}");
}

/// A rule file that is a link to a file elsewhere: an edit of its target reloads (its folder
/// was not watched, so the edit went unread until a SIGHUP), and a target gone makes the
/// reload fail, the old rules going on (the rules were dropped without a word).
#[test]
fn a_linked_rule_files_target_is_watched_and_its_loss_refused() {
    let dir = scratch("linked-rule-file");
    std::fs::create_dir_all(dir.join("ext")).unwrap();
    std::fs::write(dir.join("rules/r.toml"), one_step_rule("r0")).unwrap();
    std::fs::write(dir.join("ext/lnk.toml"), one_step_rule("lnk")).unwrap();
    std::os::unix::fs::symlink(dir.join("ext/lnk.toml"), dir.join("rules/lnk.toml")).unwrap();
    let agent = Agent::start(&dir, "");
    let reloads = |s: &Value| s["sink"]["reloads"].as_u64().unwrap_or(0);
    let failed = |s: &Value| s["sink"]["reloads_failed"].as_u64().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(dir.join("ext/lnk.toml"), one_step_rule("lnk2")).unwrap();
    agent.wait_stats(10, |s| reloads(s) >= 1);
    // The log names what the reload did, not a count only.
    agent.wait_stderr(10, "added=lnk2 changed= edited= removed=lnk");
    std::thread::sleep(Duration::from_millis(500));
    std::fs::remove_file(dir.join("ext/lnk.toml")).unwrap();
    let s = agent.wait_stats(10, |s| failed(s) >= 1);
    assert!(
        s["reload_error"]["errors"][0]
            .as_str()
            .is_some_and(|e| e.contains("which does not exist")),
        "{s}"
    );
}

/// A panic in a shard's engine (a bug; injected here) is caught: the shard rebuilds its
/// engine, counts it, and the agent goes on alerting. (The injection exists in debug builds
/// only.)
#[cfg(debug_assertions)]
#[test]
fn a_shard_survives_a_panic_in_its_engine() {
    let dir = scratch("engine-panic");
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    std::fs::write(
        dir.join("rules/fault.toml"),
        "[[rule]]\nname = \"fault\"\nseverity = \"info\"\nevents.f = 'syslog and app == \"cepheus-test-fault\"'\npattern = \"f\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("rules/hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nexpect = [\"web-9\"]\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 1s\"\n",
    )
    .unwrap();
    // One shard, so the expected group's alert is in the engine that panics.
    let agent = Agent::start(&dir, "[engine]\nshards = 1\n");
    let firing = agent.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "firing");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(
        b"<13>1 2026-11-30T10:00:00Z h1 cepheus-test-fault - - - boom",
        ("127.0.0.1", agent.port),
    )
    .unwrap();
    let s = agent.wait_stats(10, |s| {
        s["shards"]
            .as_array()
            .is_some_and(|a| a.iter().any(|sh| sh["engine_restarts"].as_u64() >= Some(1)))
    });
    assert!(s["shards"].is_array(), "{s}");
    // The log line comes after the panic's own message (a long backtrace where
    // RUST_BACKTRACE is set), which the counter does not wait for.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !agent.stderr().contains("the engine panicked") {
        assert!(Instant::now() < deadline, "{}", agent.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The alert the lost engine held open is resolved, not left firing for good.
    let resolved = agent.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "resolved");
    assert_eq!(resolved["id"], firing["id"]);
    assert_eq!(resolved["reason"], "engine_restarted");
    for i in 0..5 {
        let msg = format!(
            "<38>1 2026-11-30T10:00:0{i}Z srv sshd 1 - - Failed password for root from 198.51.100.9 port 4000{i} ssh2"
        );
        udp.send_to(msg.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    udp.send_to(
        b"<38>1 2026-11-30T10:00:09Z srv sshd 1 - - Accepted password for root from 198.51.100.9 port 40009 ssh2",
        ("127.0.0.1", agent.port),
    )
    .unwrap();
    let a = agent.wait_alert(10, |v| v["rule"] == "ssh-bruteforce-then-success");
    assert_eq!(a["group"]["src"], "198.51.100.9");
    // The shard's counters are in /metrics, one line per shard.
    let metrics = http_get(agent.api, "/metrics").expect("/metrics");
    for line in [
        "cepheus_shard_engine_restarts_total{shard=\"0\"} 1",
        "cepheus_shard_future_total{shard=\"0\"} ",
        "cepheus_shard_keyless_total{shard=\"0\"} ",
        "cepheus_shard_stuck_timers_total{shard=\"0\"} 0",
        "cepheus_shard_journal_skipped_total{shard=\"0\"} 0",
        "cepheus_shard_journal_written_total{shard=\"0\"} ",
        "cepheus_shard_journal_bytes{shard=\"0\"} ",
        "cepheus_shard_batches_total{shard=\"0\"} ",
        "cepheus_shard_late_total{shard=\"0\"} 0",
        "# TYPE cepheus_shard_queued_events gauge\ncepheus_shard_queued_events{shard=\"0\"} ",
        "cepheus_shard_queued_batches{shard=\"0\"} ",
        "cepheus_shard_timer_entries{shard=\"0\"} ",
        "cepheus_shard_groups{shard=\"0\"} ",
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
}

/// Under systemd (`Type=notify-reload`, `WatchdogSec=`): ready once running, the watchdog
/// pinged while the pipeline answers its probes, reloading then ready around a reload,
/// stopping at SIGTERM.
#[test]
fn systemd_hears_ready_watchdog_reloading_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let dir = scratch("notify");
    std::fs::write(
        dir.join("rules/hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 1h\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("rules/stall.toml"),
        "[[rule]]\nname = \"stall\"\nseverity = \"info\"\nevents.s = 'syslog and app == \"cepheus-test-stall\"'\npattern = \"s\"\n",
    )
    .unwrap();
    let socket = dir.join("notify.sock");
    let sd = UnixDatagram::bind(&socket).unwrap();
    sd.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut agent = Agent::start_env(
        &dir,
        "",
        "",
        "",
        &[
            ("NOTIFY_SOCKET", socket.to_str().unwrap()),
            ("WATCHDOG_USEC", "400000"),
            ("CEPHEUS_FAULT_STALL_APP", "cepheus-test-stall"),
            ("CEPHEUS_FAULT_STALL_MS", "4000"),
        ],
    );
    let heard = std::cell::RefCell::new(Vec::<String>::new());
    let stderr = agent.err.clone();
    let wait_for = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 512];
        while !heard.borrow().iter().any(|m| m.contains(what)) {
            assert!(
                Instant::now() < deadline,
                "no {what}: {:?}\n{}",
                heard.borrow(),
                stderr.lock().unwrap()
            );
            if let Ok(n) = sd.recv(&mut buf) {
                heard
                    .borrow_mut()
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    };
    wait_for("READY=1");
    // Pinged again and again, not once.
    let pings = || {
        heard
            .borrow()
            .iter()
            .filter(|m| m.contains("WATCHDOG=1"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 512];
    while pings() < 3 {
        assert!(Instant::now() < deadline, "{:?}", heard.borrow());
        if let Ok(n) = sd.recv(&mut buf) {
            heard
                .borrow_mut()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    // A shard stuck for 4 s (injected; debug builds): the log says which stage did not
    // answer, no ping comes while it is stuck, and pings come again once it is back.
    if cfg!(debug_assertions) {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        for host in ["h1", "h2", "h3", "h4"] {
            let line = format!("<13>1 2026-11-30T10:00:00Z {host} cepheus-test-stall - - - x");
            udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
                .unwrap();
        }
        // Stuck once the watchdog says so (waited for, not slept: a loaded machine may take
        // the stalling event late); what it sent before is already in the socket.
        agent.wait_stderr(10, "did not answer the watchdog probe");
        let stuck_seen = Instant::now();
        while sd.recv(&mut buf).is_ok() {}
        heard.borrow_mut().clear();
        // Listened to for 1 s of the stall's 4 (the drain above took 0.2 s of quiet).
        std::thread::sleep(Duration::from_millis(1000));
        let listened = stuck_seen.elapsed();
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            if let Ok(n) = sd.recv(&mut buf) {
                heard
                    .borrow_mut()
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        // (Judged only while the stall surely lasted: it began before the log line, which a
        // loaded machine may show a moment late.)
        if listened < Duration::from_millis(2500) {
            assert_eq!(pings(), 0, "pinged while a shard was stuck");
        }
        wait_for("WATCHDOG=1");
    }
    heard.borrow_mut().clear();
    std::fs::write(
        dir.join("rules/hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 2h\"\n",
    )
    .unwrap();
    wait_for("RELOADING=1");
    assert!(
        heard.borrow().iter().any(|m| m.contains("MONOTONIC_USEC=")),
        "{:?}",
        heard.borrow()
    );
    heard.borrow_mut().clear();
    wait_for("READY=1");
    assert!(agent.terminate().success());
    wait_for("STOPPING=1");
}

/// Datagrams the kernel dropped (a receive buffer overflowed) are said in the log, not only
/// counted in /stats.
#[test]
fn udp_kernel_drops_are_said_in_the_log() {
    let dir = scratch("udp-drops");
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    let agent = Agent::start_with(
        &dir,
        "udp_receive_buffer = 4096\n",
        "[engine]\nshards = 1\n",
    );
    let line = b"<38>1 2026-11-30T10:00:00Z srv sshd 1 - - Failed password for root from 198.51.100.9 port 40000 ssh2 and some more text to fill the buffer faster";
    let senders: Vec<_> = (0..2)
        .map(|_| {
            let port = agent.port;
            std::thread::spawn(move || {
                let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
                for _ in 0..20_000 {
                    let _ = udp.send_to(line, ("127.0.0.1", port));
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let drops = agent.stats()["udp_kernel_drops"].as_u64().unwrap_or(0);
    if drops == 0 {
        eprintln!("no kernel drops induced on this machine: nothing to check");
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while !agent
        .stderr()
        .contains("the kernel dropped syslog datagrams")
    {
        assert!(
            Instant::now() < deadline,
            "{drops} drops, not said: {}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A rule folder deleted and made anew (`git checkout`, `rm -rf rules; cp -r new rules`) is
/// watched again: a later edit still reloads the rules.
#[test]
fn a_rule_folder_made_anew_is_watched_again() {
    let dir = scratch("reload-recreate");
    let rule = |window: &str| {
        format!(
            "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for {window}\"\n"
        )
    };
    std::fs::write(dir.join("rules/hb.toml"), rule("1h")).unwrap();
    let agent = Agent::start(&dir, "");
    std::thread::sleep(Duration::from_millis(300));
    std::fs::remove_dir_all(dir.join("rules")).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    std::fs::create_dir(dir.join("rules")).unwrap();
    std::fs::write(dir.join("rules/hb.toml"), rule("2h")).unwrap();
    let after = |s: &serde_json::Value| s["sink"]["reloads"].as_u64().unwrap_or(0);
    agent.wait_stats(10, |s| after(s) >= 1);
    std::thread::sleep(Duration::from_millis(600));
    let before = after(&agent.stats());
    // An edit made after the folder came back reloads.
    std::fs::write(dir.join("rules/hb.toml"), rule("3h")).unwrap();
    agent.wait_stats(10, |s| after(s) > before);
}

#[test]
fn api_token_guards_stats_and_metrics() {
    let dir = scratch("token");
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    let token = "0123456789abcdef-test-token";
    write_secret(&dir.join("api.token"), format!("{token}\n"));
    let agent = Agent::start_full(&dir, "", "token_file = \"api.token\"", "");
    let get = |path: &str, auth: Option<&str>| -> String {
        let mut s = TcpStream::connect(("127.0.0.1", agent.api)).unwrap();
        // (`scheme token` as given, or `Bearer token`.)
        let header = auth
            .map(|t| match t.split_once(' ') {
                Some(_) => format!("Authorization: {t}\r\n"),
                None => format!("Authorization: Bearer {t}\r\n"),
            })
            .unwrap_or_default();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\n{header}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(get("/health", None).starts_with("HTTP/1.1 200"));
    assert!(get("/stats", None).starts_with("HTTP/1.1 401"));
    assert!(get("/metrics", Some("wrong-token-wrong-token")).starts_with("HTTP/1.1 401"));
    assert!(get("/stats", Some(token)).starts_with("HTTP/1.1 200"));
    assert!(get("/metrics", Some(token)).starts_with("HTTP/1.1 200"));
    // The scheme's case does not matter (RFC 9110); another scheme is refused.
    assert!(get("/stats", Some(&format!("bearer {token}"))).starts_with("HTTP/1.1 200"));
    assert!(get("/stats", Some(&format!("Basic {token}"))).starts_with("HTTP/1.1 401"));
}

/// `groups list` says a group fires when a match of it fired: its alert stays firing in the
/// store, though the group holds no open episode (a match fires once).
#[test]
fn groups_list_says_a_matched_group_fires() {
    let dir = scratch("list-match");
    std::fs::write(
        dir.join("rules/pair.toml"),
        "[[rule]]\nname = \"pair\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
         events.a = 'syslog and app == \"login\"'\nevents.b = 'syslog and app == \"sudo\"'\n\
         pattern = \"seq(a, b) within 1m\"\n",
    )
    .unwrap();
    let agent = Agent::start(&dir, "[engine]\nshards = 2\n");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    for line in [
        "<13>1 2026-11-30T10:00:00Z web-1 login - - - in",
        "<13>1 2026-11-30T10:00:01Z web-2 login - - - in",
        "<13>1 2026-11-30T10:00:02Z web-1 sudo - - - root",
    ] {
        udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let fired = agent.wait_alert(10, |v| v["rule"] == "pair" && v["state"] == "firing");
    assert_eq!(fired["group"]["host"], "web-1");
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["groups", "list", "pair", "--config", "cepheus.toml"])
        .current_dir(&agent.dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(table.contains("\nweb-1         yes     no"), "{table}");
    assert!(table.contains("\nweb-2         no      no"), "{table}");
    assert!(
        table.ends_with("2 of 2 group(s) of rule `pair`\n"),
        "{table}"
    );
}

/// `cepheus groups forget RULE KEY` against a running agent (two shards): the group's open
/// alert is resolved with reason `forgotten` and its state dropped; an unknown group exits 1.
#[test]
fn groups_forget_retires_a_group_of_the_running_agent() {
    let dir = scratch("forget");
    std::fs::write(
        dir.join("rules/hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
         events.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 1s\"\n\
         [[rule]]\nname = \"watched\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
         events.hb = 'syslog and app == \"beat\"'\npattern = \"absent(hb) for 1h\"\n\
         expect = [\"web-9\"]\n",
    )
    .unwrap();
    let agent = Agent::start(&dir, "[engine]\nshards = 2\n");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(
        b"<13>1 2026-11-30T10:00:00Z web-1 heartbeat - - - alive",
        ("127.0.0.1", agent.port),
    )
    .unwrap();
    let fired = agent.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "firing");
    // /stats says which shard holds the group: one of the two, once.
    let held = |s: &Value| -> Vec<u64> {
        s["shards"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|sh| sh["groups"].as_u64().unwrap_or(99))
                    .collect()
            })
            .unwrap_or_default()
    };
    // (web-1 of `hb`, and web-9 expected by `watched`: each held by one shard, once.)
    let per_shard = held(&agent.stats());
    assert_eq!(per_shard.len(), 2);
    assert_eq!(per_shard.iter().sum::<u64>(), 2, "{per_shard:?}");
    // GET /alerts says how many fire in all (its listing may hold fewer).
    let mut s = TcpStream::connect(("127.0.0.1", agent.api)).unwrap();
    write!(
        s,
        "GET /alerts HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(
        resp.to_ascii_lowercase()
            .contains("\r\nx-firing-total: 1\r\n"),
        "{resp}"
    );
    // A query that lists nothing, or does not parse, is answered 400 in words.
    for (query, said) in [
        ("recent=0", "recent=0 lists nothing"),
        (
            "recent=abc",
            "bad query string (Query deserialize error: invalid digit",
        ),
    ] {
        let mut s = TcpStream::connect(("127.0.0.1", agent.api)).unwrap();
        write!(
            s,
            "GET /alerts?{query} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        assert!(
            resp.starts_with("HTTP/1.1 400") && resp.contains(said),
            "{resp}"
        );
    }
    // `groups list` names it, as `groups forget` takes it, whichever shard holds it.
    let list = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cepheus"))
            .args(["groups", "list"])
            .args(args)
            .args(["--config", "cepheus.toml"])
            .current_dir(&agent.dir)
            .output()
            .unwrap()
    };
    let out = list(&["hb"]);
    assert_eq!(out.status.code(), Some(0));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        table.starts_with("GROUP (host)  FIRING  EXPECTED  ACTIVE AT\n"),
        "{table}"
    );
    assert!(
        table.contains("\nweb-1         yes     no        20"),
        "{table}"
    );
    assert!(table.ends_with("1 of 1 group(s) of rule `hb`\n"), "{table}");
    let out = list(&["hb", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["total"], 1, "{doc}");
    assert_eq!(doc["groups"][0]["group"], fired["group"], "{doc}");
    assert_eq!(list(&["hbb"]).status.code(), Some(1));
    let forget_of = |rule: &str, key: &str| {
        Command::new(env!("CARGO_BIN_EXE_cepheus"))
            .args(["groups", "forget", rule, key, "--config", "cepheus.toml"])
            .current_dir(&agent.dir)
            .output()
            .unwrap()
    };
    let forget = |key: &str| forget_of("hb", key);
    let out = forget("web-1");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "forgot group `web-1` of rule `hb`\n"
    );
    // An expected group is retired too, and the operator told it is unwatched until a reload.
    let out = forget_of("watched", "web-9");
    assert_eq!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("note: the rule watches this group from the start (it is in `expect`"),
        "{said}"
    );
    let resolved = agent.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "resolved");
    assert_eq!(resolved["reason"], "forgotten");
    assert_eq!(resolved["id"], fired["id"]);
    // Each group retired is in the agent's log by name, however close the two requests came.
    agent.wait_stderr(10, "key=\"web-1\" forgotten=true");
    agent.wait_stderr(10, "key=\"web-9\" forgotten=true");
    let out = list(&["hb"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "0 of 0 group(s) of rule `hb`\n"
    );
    let again = forget("web-1");
    assert_eq!(again.status.code(), Some(1));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("rule `hb` holds no group `web-1` now: its key is host"),
        "{err}"
    );
    // A rule the agent does not run is named as such, not as a missing group.
    let unknown = forget_of("hbb", "web-1");
    assert_eq!(unknown.status.code(), Some(1));
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(err.contains("the agent runs no rule named `hbb`"), "{err}");
    // Forgotten, it does not fire again (it would have, 1 s after being re-armed).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(agent.alerts(|v| v["rule"] == "hb"), 2);
    // What a web page may post across sites without asking first (text/plain) is refused,
    // and so is a request addressed to another name (DNS rebinding).
    let post = |content_type: &str, host: &str| {
        let mut s = TcpStream::connect(("127.0.0.1", agent.api)).unwrap();
        let body = r#"{"rule":"hb","key":"web-1"}"#;
        write!(
            s,
            "POST /groups/forget HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        resp.lines().next().unwrap_or_default().to_string()
    };
    assert!(post("text/plain;charset=UTF-8", "127.0.0.1").contains(" 415 "));
    assert!(post("application/json", "attacker.example").contains(" 403 "));
    assert!(
        post("application/json", "localhost").contains(" 404 "),
        "not held now: answered"
    );
}

/// A match fires once and no engine holds it firing: forgetting its group resolves it too
/// (`forgotten`), as docs/rules.md promises, so an operator can clear it.
#[test]
fn groups_forget_resolves_a_match_that_fired_once() {
    let dir = scratch("forget-match");
    std::fs::write(
        dir.join("rules/pair.toml"),
        "[[rule]]\nname = \"pair\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
         events.a = 'syslog and msg == \"one\"'\nevents.b = 'syslog and msg == \"two\"'\n\
         pattern = \"seq(a, b) within 1m\"\n",
    )
    .unwrap();
    let agent = Agent::start(&dir, "[engine]\nshards = 2\n");
    step(agent.port, "web1", "one");
    step(agent.port, "web1", "two");
    let fired = agent.wait_alert(10, |v| v["rule"] == "pair" && v["state"] == "firing");
    let forget = || {
        Command::new(env!("CARGO_BIN_EXE_cepheus"))
            .args([
                "groups",
                "forget",
                "pair",
                "web1",
                "--config",
                "cepheus.toml",
            ])
            .current_dir(&agent.dir)
            .output()
            .unwrap()
    };
    let out = forget();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resolved = agent.wait_alert(10, |v| v["rule"] == "pair" && v["state"] == "resolved");
    assert_eq!(resolved["reason"], "forgotten");
    assert_eq!(resolved["id"], fired["id"]);
    // Nothing of it is left: the same request finds nothing now.
    assert_eq!(forget().status.code(), Some(1));
    assert_eq!(agent.alerts(|v| v["rule"] == "pair"), 2);
}

#[test]
fn groups_forget_without_an_agent_says_so() {
    let dir = scratch("forget-none");
    let port = free_port();
    std::fs::write(
        dir.join("cepheus.toml"),
        format!("[api]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args([
            "groups",
            "forget",
            "hb",
            "web-1",
            "--config",
            "cepheus.toml",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the agent's API"));
}

/// `cepheus ARGS` run in `dir`: its exit code and stderr.
fn cepheus_in(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What `config check` refuses beyond the values, `run` refuses as a configuration error
/// (exit 1, which the unit does not restart), not as a start that failed (exit 2, restarted
/// every 2 s for ever): found by an audit with a missing token file. A followed file that is
/// missing stays exit 2 (it may come). (A capture interface not there is waited for: a
/// mirror port's NIC may come up after the agent; `config check` warns of it.)
#[test]
fn configuration_errors_found_at_start_are_exit_1() {
    let dir = scratch("env-errors");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let api = free_port();
    for (extra, key, code) in [
        (
            "[api]\nlisten = \"127.0.0.1:API\"\ntoken_file = \"no-token\"\n",
            "api.token_file",
            1,
        ),
        (
            "[syslog]\nudp = []\ntcp = []\nfiles = [\"no-such.log\"]\n",
            "syslog.files",
            2,
        ),
    ] {
        let extra = extra.replace("API", &api.to_string());
        let api_line = if extra.contains("[api]") {
            String::new()
        } else {
            format!("[api]\nlisten = \"127.0.0.1:{api}\"\n")
        };
        let syslog = if extra.contains("[syslog]") {
            ""
        } else {
            "[syslog]\nudp = []\ntcp = []\n"
        };
        std::fs::write(
            dir.join("cepheus.toml"),
            format!("{syslog}{api_line}[store]\npath = \"data\"\n{extra}"),
        )
        .unwrap();
        let (got, err) = cepheus_in(&dir, &["run", "--config", "cepheus.toml"]);
        assert_eq!(got, Some(code), "{key}: {err}");
        assert!(
            err.contains(&format!("`{key}`")) || err.contains(key),
            "{key}: {err}"
        );
    }
}

/// The agent writes at most 50 of a rule set's diagnostics to its log, then how many more
/// (found by an audit: a file of 20,000 broken rules wrote 16 MB in one go); `rules check`
/// lists them all.
#[test]
fn the_agent_logs_a_bounded_number_of_rule_diagnostics() {
    let dir = scratch("many-diagnostics");
    let broken: String = (0..60)
        .map(|i| {
            format!(
                "[[rule]]\nname = \"r{i}\"\nseverity = \"low\"\nevents.a = 'syslog and nosuch == 1'\npattern = \"a\"\n"
            )
        })
        .collect();
    std::fs::write(dir.join("rules/bad.toml"), broken).unwrap();
    std::fs::write(
        dir.join("cepheus.toml"),
        format!(
            "[syslog]\nudp = []\ntcp = []\n[rules]\npaths = [\"rules\"]\n[api]\nlisten = \"127.0.0.1:{}\"\n[store]\npath = \"data\"\n",
            free_port()
        ),
    )
    .unwrap();
    let (code, err) = cepheus_in(&dir, &["run", "--config", "cepheus.toml"]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.matches("unknown field `nosuch`").count(), 50, "{err}");
    assert!(
        err.contains(
            "... and 10 more diagnostic(s) not shown here: `cepheus rules check` lists them all"
        ),
        "{err}"
    );
    let (code, err) = cepheus_in(&dir, &["rules", "check", "rules"]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.matches("unknown field `nosuch`").count(), 60, "{err}");
    assert!(!err.contains("not shown here"), "{err}");
}

/// A token file that cannot be read stops `run` before it makes anything (no store folder
/// left behind).
#[test]
fn a_refused_start_leaves_no_store_folder() {
    let dir = scratch("refused-start");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let (p1, p2) = (free_port(), free_port());
    std::fs::write(
        dir.join("c.toml"),
        format!(
            "[syslog]\nudp = [\"127.0.0.1:{p1}\"]\ntcp = []\n[api]\nlisten = \"127.0.0.1:{p2}\"\ntoken_file = \"missing\"\n[store]\npath = \"data-x\"\n"
        ),
    )
    .unwrap();
    let (code, err) = cepheus_in(&dir, &["run", "--config", "c.toml"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("api.token_file"), "{err}");
    assert!(!dir.join("data-x").exists(), "{err}");
    // Rule files that hold no rule: nothing would be watched, as with an empty folder.
    std::fs::write(dir.join("rules/hb.toml"), "# nothing yet\n").unwrap();
    std::fs::write(
        dir.join("c.toml"),
        format!(
            "[syslog]\nudp = [\"127.0.0.1:{p1}\"]\ntcp = []\n[api]\nlisten = \"127.0.0.1:{p2}\"\n[rules]\npaths = [\"rules\"]\n[store]\npath = \"data-x\"\n"
        ),
    )
    .unwrap();
    for args in [
        &["run", "--config", "c.toml"][..],
        &["config", "check", "c.toml"],
    ] {
        let (code, err) = cepheus_in(&dir, args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(
            err.contains("the rule files hold no rule"),
            "{args:?}: {err}"
        );
    }
}

/// `cepheus config check` names every problem that `cepheus run` would refuse at start-up,
/// values and missing files alike, in one pass.
#[test]
fn config_check_names_every_problem_run_would_refuse() {
    let dir = scratch("config-all");
    std::fs::write(
        dir.join("cepheus.toml"),
        "[syslog]\nfiles = [\"missing.log\"]\nmax_connections = 0\nudp = [\"127.0.0.1:5599\", \"127.0.0.1:5599\"]\n[rules]\npaths = [\"no-such-rules\"]\n",
    )
    .unwrap();
    let (code, err) = cepheus_in(&dir, &["config", "check", "cepheus.toml"]);
    assert_eq!(code, Some(1), "{err}");
    for key in [
        "syslog.max_connections",
        "syslog.udp",
        "syslog.files",
        "rules.paths",
    ] {
        assert!(
            err.contains(&format!("cepheus.toml: `{key}`")),
            "{key}:\n{err}"
        );
    }
    assert!(err.contains("127.0.0.1:5599 is listed twice"), "{err}");
    // A folder where the file was meant.
    let (_, err) = cepheus_in(&dir, &["config", "check", "rules"]);
    assert!(err.contains("is a folder: name a file"), "{err}");
    // A rules folder with a broken rule: check refuses as run does.
    std::fs::write(
        dir.join("cepheus.toml"),
        "[syslog]\nudp = []\ntcp = []\n[rules]\npaths = [\"rules\"]\n",
    )
    .unwrap();
    std::fs::write(dir.join("rules/bad.toml"), "[[rule]]\nname = \"x\"\n").unwrap();
    let (code, err) = cepheus_in(&dir, &["config", "check", "cepheus.toml"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("`rules.paths`: the rules have errors"),
        "{err}"
    );
    // Written as `run` takes it, the same.
    let (code2, err2) = cepheus_in(&dir, &["config", "check", "--config", "cepheus.toml"]);
    assert_eq!((code2, err2), (code, err));
    // A key of the wrong type hides nothing else: the bad zone and the broken rule are said
    // with it.
    std::fs::write(
        dir.join("cepheus.toml"),
        "[rules]\npaths = [\"rules\"]\n[syslog]\ntimezone = \"X/Y\"\nudp = 5\ntcp = []\n",
    )
    .unwrap();
    let (code, err) = cepheus_in(&dir, &["config", "check", "cepheus.toml"]);
    assert_eq!(code, Some(1), "{err}");
    for said in [
        "expected a sequence",
        "`syslog.timezone`",
        "`rules.paths`: the rules have errors",
    ] {
        assert!(err.contains(said), "{said}:\n{err}");
    }
    // `run` too says a key of the wrong type and a bad value at once (exit 1, nothing
    // started); a duration written as a number is told its unit.
    std::fs::write(
        dir.join("cepheus.toml"),
        "[store]\ncheckpoint_every = 5\n[syslog]\ntimezone = \"X/Y\"\nudp = []\ntcp = []\n",
    )
    .unwrap();
    let (code, err) = cepheus_in(&dir, &["run", "--config", "cepheus.toml"]);
    assert_eq!(code, Some(1), "{err}");
    for said in [
        "a duration is a string with its unit: write \"5s\" for 5 seconds",
        "cepheus.toml: `syslog.timezone`",
    ] {
        assert!(err.contains(said), "{said}:\n{err}");
    }
    // A file that cannot be read: exit 2, for check as for run.
    for args in [
        &["config", "check", "no-such.toml"][..],
        &["run", "--config", "no-such.toml"][..],
    ] {
        let (code, err) = cepheus_in(&dir, args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("cannot read the configuration file no-such.toml"),
            "{err}"
        );
    }
}

/// `cepheus config check` refuses what `cepheus run` would refuse at start-up: a token file
/// that holds no token of at least 16 characters (and accepts one that does).
#[test]
fn config_check_reads_the_token_file_as_run_does() {
    let dir = scratch("config-token");
    // No rules folder: the built-in rules (an empty folder is refused, by run and check).
    std::fs::remove_dir(dir.join("rules")).unwrap();
    std::fs::write(
        dir.join("cepheus.toml"),
        "[api]\nlisten = \"127.0.0.2:9516\"\ntoken_file = \"tok\"\n",
    )
    .unwrap();
    let check = || {
        Command::new(env!("CARGO_BIN_EXE_cepheus"))
            .args(["config", "check", "cepheus.toml"])
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    write_secret(&dir.join("tok"), "s3cret\n");
    let out = check();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("api.token_file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    write_secret(&dir.join("tok"), "0123456789abcdef0123\n");
    let out = check();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A syslog port another program holds: `cepheus run` exits non-zero naming the config key
/// and what to do (a port of its own: pick a free one; a syslog daemon's standard port, 514,
/// points to the forwarding docs instead, whose section exists).
#[test]
fn a_taken_syslog_port_names_its_key_and_the_forwarding_docs() {
    let dir = scratch("port-taken");
    // No rules folder: the built-in rules.
    std::fs::remove_dir(dir.join("rules")).unwrap();
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let api = free_port();
    std::fs::write(
        dir.join("cepheus.toml"),
        format!(
            "[syslog]\nudp = [\"127.0.0.1:{port}\"]\ntcp = []\n[api]\nlisten = \"127.0.0.1:{api}\"\n"
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["run", "--config", "cepheus.toml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("syslog.udp"), "{stderr}");
    assert!(
        stderr.contains("set the listener to a free port"),
        "{stderr}"
    );
    // (What a taken port 514 says, which this test cannot bind: the unit test
    // `bind_errors_say_what_to_do`.)
    let section = "Forwarding from rsyslog or syslog-ng";
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    assert!(readme.contains(&format!("## {section}")));
    drop(taken);
}

/// A sender that delivered and then trickles bytes that never make a message is closed after
/// the idle timeout like a silent one: bytes are no progress (it held its slot for good).
#[test]
fn a_delivered_connection_that_only_trickles_bytes_is_closed_when_idle() {
    let dir = scratch("trickle");
    std::fs::write(
        dir.join("rules/r.toml"),
        "[[rule]]\nname = \"hello\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"hello\"'\npattern = \"a\"\n",
    )
    .unwrap();
    let mut agent = Agent::start_with(&dir, "tcp_idle_timeout = \"1s\"", "");
    let mut c = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    c.write_all(b"<13>Dec  2 01:47:00 trickler hello: hi\n")
        .unwrap();
    agent.wait_alert(10, |v| v["group"]["host"] == "trickler");
    // A byte every 200 ms, never a newline: each read is within the timeout, no message is.
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(8) {
        if c.write_all(b"x").is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if !closed {
        c.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut b = [0u8; 16];
        closed = match std::io::Read::read(&mut c, &mut b) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        };
    }
    assert!(
        closed,
        "still open after trickling for 8 s with a 1 s idle timeout"
    );
    let s = agent.wait_stats(10, |s| s["ingest"]["tcp_idle_closed"].as_u64() >= Some(1));
    assert!(s["ingest"]["tcp_idle_closed"].as_u64() >= Some(1), "{s}");
    // The bytes it never finished are no message (found by an audit: a line cut mid-way,
    // `... from 10.0.0.`, reached the rules).
    assert_eq!(s["ingest"]["tcp_unfinished"], 1, "{s}");
    assert_eq!(s["ingest"]["tcp_frames"], 1, "{s}");
    let st = agent.terminate();
    assert!(st.success(), "{st:?}");
}

/// With `max_connections` TCP connections open, a new sender is not locked out until the idle
/// timeout: a connection that never delivered a message and has been silent makes room
/// (counted as `tcp_evicted`), the oldest first; one that delivered is not pushed out (unless
/// silent 30 s, which this test does not wait for), and with nothing left to evict a newcomer
/// is refused as before.
/// Accepted syslog connections have TCP keepalive on, so a sender gone without closing is
/// found (the kernel shows the keepalive timer of the agent's end in /proc/net/tcp).
#[test]
fn syslog_connections_keep_alive() {
    let dir = scratch("keepalive");
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    let agent = Agent::start(&dir, "");
    let mut c = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    c.write_all(b"<13>Dec  2 01:47:00 h hello: hi\n").unwrap();
    agent.wait_stats(10, |s| s["ingest"]["tcp_frames"].as_u64() >= Some(1));
    let port = format!(":{:04X}", agent.port);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        // The agent's end: local port ours, established (01), timer 2 (keepalive).
        let ours = table.lines().find(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 5 && cols[1].ends_with(&port) && cols[3] == "01"
        });
        if let Some(line) = ours {
            let timer = line.split_whitespace().nth(5).unwrap_or_default();
            assert!(timer.starts_with("02:"), "{line}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no established agent end for {port}:\n{table}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(c);
}

#[test]
fn idle_connections_make_room_for_a_new_sender() {
    let dir = scratch("evict");
    std::fs::write(
        dir.join("rules/r.toml"),
        "[[rule]]\nname = \"hello\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"hello\"'\npattern = \"a\"\n",
    )
    .unwrap();
    let mut agent = Agent::start_with(&dir, "max_connections = 3\ntcp_idle_timeout = \"5m\"", "");
    let line = |host: &str| format!("<13>Dec  2 01:47:00 {host} hello: hi\n");
    let mut sender = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    sender.write_all(line("sender").as_bytes()).unwrap();
    agent.wait_alert(10, |v| v["group"]["host"] == "sender");
    let mut idle: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(("127.0.0.1", agent.port)).unwrap())
        .collect();
    agent.wait_stats(10, |s| s["ingest"]["tcp_connections"].as_u64() >= Some(3));
    // Without a message for longer than a newcomer must wait for; the second trickles bytes
    // that never make one (slowloris): bytes are no progress, it makes room all the same.
    for _ in 0..8 {
        let _ = idle[1].write_all(b"x");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let mut newcomers = Vec::new();
    for host in ["n1", "n2"] {
        let mut c = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
        c.write_all(line(host).as_bytes()).unwrap();
        agent.wait_alert(10, |v| v["group"]["host"] == host);
        newcomers.push(c);
    }
    // Nothing is left to evict: the sender, n1 and n2 all delivered.
    let mut late = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    let _ = late.write_all(line("late").as_bytes());
    let s = agent.wait_stats(10, |s| s["ingest"]["tcp_rejected"].as_u64() >= Some(1));
    assert_eq!(s["ingest"]["tcp_evicted"].as_u64(), Some(2), "{s}");
    // The trickled bytes, no message, dropped with the connection: counted as unfinished.
    assert_eq!(s["ingest"]["tcp_unfinished"].as_u64(), Some(1), "{s}");
    // The first sender, silent all along, still gets through.
    sender.write_all(line("sender-again").as_bytes()).unwrap();
    agent.wait_alert(10, |v| v["group"]["host"] == "sender-again");
    assert_eq!(
        agent.alerts(|v| v["group"]["host"] == "late"),
        0,
        "the refused connection's message reached the rules"
    );
    drop((idle, newcomers, late, sender));
    let st = agent.terminate();
    assert!(st.success(), "{st:?}");
}

/// A capability set of a process (`CapPrm`, `CapEff` ... in /proc/PID/status).
fn caps_of(pid: u32, set: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{set}:")))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

const CAP_NET_RAW: u64 = 1 << 13;

/// Without `[capture]` the agent gives up CAP_NET_RAW as it starts (run as root here, it had
/// it); with one it keeps it (see the capture test).
#[test]
fn without_capture_the_agent_gives_up_cap_net_raw() {
    if caps_of(std::process::id(), "CapEff") & CAP_NET_RAW == 0 {
        println!("SKIPPED: the tests run without CAP_NET_RAW");
        return;
    }
    let dir = scratch("caps");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let agent = Agent::start(&dir, "");
    let pid = agent.child.id();
    for set in ["CapPrm", "CapEff", "CapInh"] {
        assert_eq!(caps_of(pid, set) & CAP_NET_RAW, 0, "{set}");
    }
    agent.wait_stderr(10, "CAP_NET_RAW given up");
}

/// `syslog.allowed_senders`: a sender outside the list is dropped (UDP) or closed (TCP),
/// counted and said; one in it is taken.
#[test]
fn senders_outside_the_allowed_networks_are_refused() {
    let dir = scratch("allowed-senders");
    std::fs::write(
        dir.join("rules/r.toml"),
        "[[rule]]\nname = \"hello\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"hello\"'\npattern = \"a\"\n",
    )
    .unwrap();
    let line = |host: &str| format!("<13>Dec  2 01:47:00 {host} hello: hi\n");
    let mut agent = Agent::start_with(
        &dir,
        "allowed_senders = [\"10.0.0.0/8\", \"192.0.2.7\"]",
        "",
    );
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(line("by-udp").as_bytes(), ("127.0.0.1", agent.port))
        .unwrap();
    let mut tcp = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = tcp.write_all(line("by-tcp").as_bytes());
    let s = agent.wait_stats(10, |s| s["ingest"]["senders_refused"].as_u64() >= Some(2));
    assert_eq!(s["ingest"]["tcp_connections"], 0, "{s}");
    let mut buf = [0u8; 1];
    // Closed at once (reset, as it had unread bytes), not left open.
    match tcp.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("not closed: {other:?}"),
    }
    agent.wait_stats(10, |_| {
        agent.stderr().contains("not in syslog.allowed_senders")
    });
    // A burst: the first said, the others held back and told within a second or so, not
    // only when the next refusal comes (maybe hours later).
    for _ in 0..5 {
        udp.send_to(line("by-udp").as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
    }
    agent.wait_stderr(
        10,
        "more messages or connections from senders not in syslog.allowed_senders dropped",
    );
    assert_eq!(agent.alerts(|v| v["rule"] == "hello"), 0);
    assert!(agent.terminate().success());
    // Listed, loopback is taken.
    let agent = Agent::start_with(&dir, "allowed_senders = [\"127.0.0.0/8\"]", "");
    udp.send_to(line("by-udp").as_bytes(), ("127.0.0.1", agent.port))
        .unwrap();
    agent.wait_alert(10, |v| v["group"]["host"] == "by-udp");
}

/// A heartbeat rule without `expect`: its groups are discovered, so a restart that kept no
/// state would not know the host at all.
const HB_3S: &str = r#"
[[rule]]
name = "hb"
severity = "critical"
group_by = ["host"]
events.hb = 'syslog and app == "hb"'
pattern = "absent(hb) for 3s"
"#;

/// A heartbeat from `host` over UDP (RFC 5424; processing time, so the stamp is not read).
fn heartbeat(port: u16, host: &str, n: u32) {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let line = format!("<14>1 2026-12-03T05:00:00Z {host} hb - - - alive {n}");
    udp.send_to(line.as_bytes(), ("127.0.0.1", port)).unwrap();
}

impl Agent {
    /// SIGKILL: no shutdown, no last save.
    fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits until the shards have replayed `n` events from their journals, in all.
    fn wait_replayed(&self, n: u64) -> Value {
        self.wait_stats(10, |s| {
            s["shards"].as_array().is_some_and(|a| {
                a.iter()
                    .filter_map(|x| x["journal"]["replayed"].as_u64())
                    .sum::<u64>()
                    == n
            })
        })
    }

    /// Waits until the shards have taken `n` events.
    fn wait_events(&self, n: u64) {
        self.wait_stats(10, |s| {
            s["shards"]
                .as_array()
                .is_some_and(|a| a.iter().filter_map(|x| x["events"].as_u64()).sum::<u64>() >= n)
        });
    }
}

#[test]
fn a_deadline_survives_kill_9_and_fires_for_the_outage() {
    let dir = scratch("kill9-deadline");
    // 6 s, not 3: the kill must come before the deadline, and a loaded machine can take
    // seconds to answer /stats.
    std::fs::write(dir.join("rules/hb.toml"), HB_3S.replace("for 3s", "for 6s")).unwrap();
    let extra = "checkpoint_every = \"100ms\"\n";
    let mut first = Agent::start(&dir, extra);
    heartbeat(first.port, "web1", 1);
    let sent = Instant::now();
    first.wait_events(1);
    // A few saves after the heartbeat, then killed well before its deadline.
    std::thread::sleep(Duration::from_millis(500));
    first.kill9();
    assert!(
        sent.elapsed() < Duration::from_millis(5000),
        "too slow to test"
    );
    assert_eq!(first.alerts(|_| true), 0);
    // The deadline passes while the agent is down.
    std::thread::sleep(Duration::from_millis(6500).saturating_sub(sent.elapsed()));
    let second = Agent::start(&dir, extra);
    let restarted = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let fired = second.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "firing");
    assert_eq!(fired["group"]["host"], "web1");
    assert_eq!(fired["reason"], "outage", "{fired}");
    // Its time is the deadline, which passed before the restart.
    assert!(ts(&fired) < restarted, "{fired} at {restarted}");
    assert!(second.stderr().contains("continuing from the saved state"));
    // The next heartbeat resolves that same alert.
    heartbeat(second.port, "web1", 2);
    let resolved = second.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "resolved");
    assert_eq!(resolved["id"], fired["id"]);
}

/// A host added to `expect` while the agent was down after a kill -9 is watched from about
/// the crash, not from the last time something happened (found by an audit: an idle agent
/// did not save its state, so a host added after days of quiet was dated days back and its
/// absence fired at once as `outage`). Idle, a shard saves its clock now and then (every
/// minute; 300 ms here).
#[test]
fn a_host_added_while_down_after_an_idle_spell_is_watched_from_the_crash() {
    let dir = scratch("kill9-idle");
    let rule = |hosts: &str| {
        format!(
            "[[rule]]\nname = \"hb\"\nseverity = \"critical\"\ngroup_by = [\"host\"]\nexpect = [{hosts}]\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 60s\"\n"
        )
    };
    std::fs::write(dir.join("rules/hb.toml"), rule("\"k1\"")).unwrap();
    let extra = "checkpoint_every = \"100ms\"\n";
    let env = [("CEPHEUS_TEST_IDLE_SAVE_MS", "300")];
    let mut first = Agent::start_env(&dir, "", "", extra, &env);
    first.wait_stats(10, |s| s["shards"].is_array());
    // Idle: nothing comes.
    std::thread::sleep(Duration::from_secs(5));
    first.kill9();
    let killed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    std::fs::write(dir.join("rules/hb.toml"), rule("\"k1\", \"k3\"")).unwrap();
    let second = Agent::start_env(&dir, "", "", extra, &env);
    second.wait_stats(10, |s| s["shards"].is_array());
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["groups", "list", "hb", "--json", "--config", "cepheus.toml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let k3 = doc["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["group"]["host"] == "k3"))
        .unwrap_or_else(|| panic!("{doc}"));
    let since = cepheus_core::time::Timestamp::parse_rfc3339(k3["active_at"].as_str().unwrap())
        .unwrap()
        .0 as f64
        / 1e9;
    // (Without the idle saves: the first run's start, 5 s or more before the crash.)
    assert!(
        since > killed - 2.5,
        "k3 watched from {since}, the crash at {killed}: {doc}"
    );
    assert_eq!(second.alerts(|_| true), 0);
}

/// A group forgotten by hand stays forgotten across kill -9, even long before the next
/// regular save: the forget is kept at once (the journal's heartbeat would bring it back).
#[test]
fn a_forgotten_group_stays_forgotten_across_kill_9() {
    let dir = scratch("kill9-forget");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let extra = "checkpoint_every = \"1h\"\n";
    let mut first = Agent::start(&dir, extra);
    heartbeat(first.port, "web1", 1);
    first.wait_events(1);
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["groups", "forget", "hb", "web1", "--config", "cepheus.toml"])
        .current_dir(&first.dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // (The sink writes the state the shard sent at once: waited for.)
    first.sink_settled();
    first.kill9();
    let second = Agent::start(&dir, extra);
    // Its deadline (3 s after the heartbeat) passes: nothing fires for it.
    std::thread::sleep(Duration::from_millis(4000));
    assert_eq!(
        second.alerts(|v| v["rule"] == "hb"),
        0,
        "{}",
        second.stderr()
    );
}

#[test]
fn an_alert_shown_before_kill_9_is_not_shown_again() {
    let dir = scratch("kill9-dedup");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    // A first run sees the heartbeat and saves its state as it stops.
    let mut first = Agent::start(&dir, "checkpoint_every = \"100ms\"\n");
    heartbeat(first.port, "web1", 1);
    let sent = Instant::now();
    first.wait_events(1);
    assert!(first.terminate().success(), "{}", first.stderr());
    // A second run, which saves no state of its own, shows the absence, then is killed.
    let rare = "checkpoint_every = \"1h\"\n";
    let mut second = Agent::start(&dir, rare);
    let fired = second.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "firing");
    assert!(sent.elapsed() < Duration::from_secs(10));
    // (Written out, then kept in the store: a kill between the two shows it again, which is
    // by design, at least once. Past that moment, as the sibling test below.)
    second.sink_settled();
    second.kill9();
    // The third run continues from the first run's state: the deadline passed, so its engine
    // fires that absence again, and the store knows it was shown already.
    let third = Agent::start(&dir, rare);
    third.wait_stats(10, |s| s["sink"]["alerts_repeated"] == 1);
    assert_eq!(third.alerts(|v| v["rule"] == "hb"), 0, "shown twice");
    // Its resolve is new, and shown, with the same id.
    heartbeat(third.port, "web1", 2);
    let resolved = third.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "resolved");
    assert_eq!(resolved["id"], fired["id"]);
}

/// A two-step rule whose first step stays open for an hour.
const SEQ_1H: &str = r#"
[[rule]]
name = "pair"
severity = "high"
group_by = ["host"]
events.a = 'syslog and app == "step" and msg contains "one"'
events.b = 'syslog and app == "step" and msg contains "two"'
pattern = "seq(a, b) within 1h"
"#;

fn step(port: u16, host: &str, what: &str) {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let line = format!("<14>1 2026-12-03T05:00:00Z {host} step - - - {what}");
    udp.send_to(line.as_bytes(), ("127.0.0.1", port)).unwrap();
}

#[test]
fn events_taken_after_the_last_save_are_replayed_after_kill_9() {
    let dir = scratch("kill9-journal");
    std::fs::write(dir.join("rules/pair.toml"), SEQ_1H).unwrap();
    // Saved at start only: the first step is taken after that save, then the agent is killed.
    let rare = "checkpoint_every = \"1h\"\n";
    let mut first = Agent::start(&dir, rare);
    step(first.port, "web1", "one");
    first.wait_events(1);
    first.kill9();
    // The second run continues from the start-up state, replays the first step from the
    // journal, and the second step completes the match.
    let second = Agent::start(&dir, rare);
    second.wait_replayed(1);
    second.wait_stderr(10, "replayed the events journalled");
    step(second.port, "web1", "two");
    let fired = second.wait_alert(10, |v| v["rule"] == "pair");
    assert_eq!(fired["group"]["host"], "web1");
    assert_eq!(fired["events"].as_array().map(Vec::len), Some(2), "{fired}");
    assert_eq!(second.alerts(|v| v["rule"] == "pair"), 1);
}

#[test]
fn a_shard_that_died_before_its_first_state_was_kept_replays_its_journal() {
    let dir = scratch("kill9-journal-fresh");
    std::fs::write(dir.join("rules/pair.toml"), SEQ_1H).unwrap();
    // An expected host never heard from: timed from when the dead engine began.
    std::fs::write(
        dir.join("rules/quiet.toml"),
        "[[rule]]\nname = \"quiet\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
         events.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 10s\"\n\
         expect = [\"q\"]\n",
    )
    .unwrap();
    let rare = "checkpoint_every = \"1h\"\n";
    let mut first = Agent::start(&dir, rare);
    step(first.port, "web1", "one");
    first.wait_events(1);
    first.kill9();
    // The mark names the clock the fresh engines began at (here 30 s ago, so that it cannot
    // be mistaken for the first journalled event's arrival).
    let began = chrono::Utc::now() - chrono::Duration::seconds(30);
    let began_ns = began.timestamp_nanos_opt().unwrap();
    // As a kill before any shard's first state was kept leaves the store: no state, and
    // each journal still marked as begun with a fresh engine, from its first segment.
    std::fs::remove_dir_all(dir.join("data/state")).unwrap();
    for shard in std::fs::read_dir(dir.join("data/journal"))
        .unwrap()
        .flatten()
    {
        let first = std::fs::read_dir(shard.path())
            .unwrap()
            .flatten()
            .filter_map(|f| {
                f.file_name()
                    .to_str()?
                    .strip_suffix(".journal")?
                    .parse::<u64>()
                    .ok()
            })
            .min()
            // (A shard that journalled nothing was marked all the same, at its next segment.)
            .unwrap_or(0);
        std::fs::write(shard.path().join("fresh"), format!("{first} {began_ns}")).unwrap();
    }
    let second = Agent::start(&dir, rare);
    second.wait_replayed(1);
    step(second.port, "web1", "two");
    let fired = second.wait_alert(10, |v| v["rule"] == "pair");
    assert_eq!(fired["events"].as_array().map(Vec::len), Some(2), "{fired}");
    let quiet = second.wait_alert(10, |v| v["rule"] == "quiet");
    let at = chrono::DateTime::parse_from_rfc3339(quiet["time"].as_str().unwrap()).unwrap();
    assert_eq!(
        at.timestamp_nanos_opt().unwrap(),
        began_ns + 10_000_000_000,
        "{quiet}"
    );
}

#[test]
fn a_journal_turned_off_is_still_replayed_once_then_deleted() {
    let dir = scratch("kill9-journal-off");
    std::fs::write(dir.join("rules/pair.toml"), SEQ_1H).unwrap();
    let mut first = Agent::start(&dir, "checkpoint_every = \"1h\"\n");
    step(first.port, "web1", "one");
    first.wait_events(1);
    first.kill9();
    let second = Agent::start(&dir, "checkpoint_every = \"1h\"\njournal = false\n");
    second.wait_stats(10, |_| {
        second.stderr().contains("replayed the events journalled")
    });
    step(second.port, "web1", "two");
    second.wait_alert(10, |v| v["rule"] == "pair");
    // Deleted once the state saved at start, which holds it, is kept.
    let left = || -> Vec<PathBuf> {
        std::fs::read_dir(dir.join("data/journal"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let t = Instant::now();
    while !left().is_empty() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(left().is_empty(), "{:?}", left());
}

#[test]
fn a_host_first_heard_after_the_last_save_is_still_watched_after_kill_9() {
    let dir = scratch("kill9-journal-hb");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let rare = "checkpoint_every = \"1h\"\n";
    let mut first = Agent::start(&dir, rare);
    heartbeat(first.port, "web1", 1);
    first.wait_events(1);
    first.kill9();
    // Down past its deadline: the restart knows the host from the journal and fires for it.
    std::thread::sleep(Duration::from_millis(3500));
    let second = Agent::start(&dir, rare);
    let fired = second.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "firing");
    assert_eq!(fired["group"]["host"], "web1");
    assert_eq!(fired["reason"], "outage", "{fired}");
}

#[test]
fn a_heartbeat_rule_edited_while_down_still_watches_the_hosts_it_knew() {
    let dir = scratch("edited-while-down");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let keep = "checkpoint_every = \"100ms\"\n";
    let mut first = Agent::start(&dir, keep);
    heartbeat(first.port, "web1", 1);
    first.wait_events(1);
    assert!(first.terminate().success());
    // The threshold edited, then a restart (not a reload): web1, silent since, still fires.
    std::fs::write(dir.join("rules/hb.toml"), HB_3S.replace("for 3s", "for 2s")).unwrap();
    let second = Agent::start(&dir, keep);
    let fired = second.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "firing");
    assert_eq!(fired["group"]["host"], "web1");
}

#[test]
fn a_crash_after_a_reload_replays_nothing_from_before_it_into_the_changed_rule() {
    let dir = scratch("kill9-journal-reload");
    std::fs::write(dir.join("rules/pair.toml"), SEQ_1H).unwrap();
    let rare = "checkpoint_every = \"1h\"\n";
    let mut first = Agent::start(&dir, rare);
    step(first.port, "web1", "one");
    first.wait_events(1);
    // The rule changed under the running agent: it begins at the reload, without that "one".
    std::fs::write(
        dir.join("rules/pair.toml"),
        SEQ_1H.replace("within 1h", "within 2h"),
    )
    .unwrap();
    first.hangup();
    first.wait_stats(10, |s| {
        s["sink"]["reloads"].as_u64() >= Some(1)
            && s["shards"]
                .as_array()
                .is_some_and(|a| a.iter().all(|x| x["journal"]["bytes"] == 0))
    });
    step(first.port, "web1", "two");
    first.wait_events(2);
    first.kill9();
    assert_eq!(first.alerts(|_| true), 0);
    // The restart replays only what came after the reload: still no match.
    let second = Agent::start(&dir, rare);
    second.wait_replayed(1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        second.alerts(|v| v["rule"] == "pair"),
        0,
        "{}",
        second.stderr()
    );
}

/// With `engine.shards = 0` (one per core), a saved state of another count is continued
/// with its own count: a machine given more or fewer cores keeps watching the hosts it had
/// discovered (they used to be dropped, resolved as `state_lost`, and never fire again).
#[test]
fn one_shard_per_core_continues_a_state_saved_with_another_count() {
    let dir = scratch("state-reshard");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let mut first = Agent::start(&dir, "checkpoint_every = \"100ms\"\n[engine]\nshards = 5\n");
    heartbeat(first.port, "web9", 1);
    first.wait_events(1);
    assert!(first.terminate().success());
    let second = Agent::start(&dir, "checkpoint_every = \"100ms\"\n[engine]\nshards = 0\n");
    // The discovered host stays watched: its silence fires.
    let a = second.wait_alert(15, |v| v["group"]["host"] == "web9");
    assert_eq!(a["state"], "firing", "{a}");
    let err = second.stderr();
    assert!(
        err.contains("continuing with the shards of the saved state"),
        "{err}"
    );
    assert!(!err.contains("another number of shards"), "{err}");
    assert_eq!(second.stats()["shards"].as_array().map(Vec::len), Some(5));
}

#[test]
fn shards_that_saved_continue_when_another_did_not() {
    let dir = scratch("state-partial");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let two = "checkpoint_every = \"100ms\"\n[engine]\nshards = 2\n";
    let mut first = Agent::start(&dir, two);
    heartbeat(first.port, "web1", 1);
    first.wait_events(1);
    assert!(first.terminate().success());
    // As if killed between the two shards' first saves.
    std::fs::remove_file(dir.join("data/state/shard-1.state")).unwrap();
    let second = Agent::start(&dir, two);
    second.wait_stats(10, |_| second.stderr().contains("lacks some shards"));
    let err = second.stderr();
    assert!(
        err.contains("continuing from the saved state shard=0"),
        "{err}"
    );
    assert!(!err.contains("another number of shards"), "{err}");
}

#[test]
fn a_cut_saved_state_is_dropped_and_its_shard_starts_afresh() {
    let dir = scratch("state-damaged");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let keep = "checkpoint_every = \"100ms\"\n[engine]\nshards = 2\n";
    let mut first = Agent::start(&dir, keep);
    heartbeat(first.port, "web1", 1);
    first.wait_events(1);
    assert!(first.terminate().success());
    let state = dir.join("data/state/shard-0.state");
    assert!(state.is_file(), "no saved state at {}", state.display());
    std::fs::write(&state, b"\0\0").unwrap();
    // That shard begins afresh, the other goes on.
    let mut second = Agent::start(&dir, keep);
    second.wait_stats(10, |_| second.stderr().contains("lacks some shards"));
    assert!(
        second
            .stderr()
            .contains("continuing from the saved state shard=1")
    );
    assert!(second.terminate().success());
    // Dropped, and saved anew: the next start continues.
    let third = Agent::start(&dir, keep);
    third.wait_stats(10, |_| {
        third.stderr().contains("continuing from the saved state")
    });
}

#[test]
fn a_saved_state_that_cannot_be_read_costs_only_its_own_shard() {
    let dir = scratch("state-unreadable");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let keep = "checkpoint_every = \"100ms\"\n[engine]\nshards = 2\n";
    let mut first = Agent::start(&dir, keep);
    heartbeat(first.port, "web1", 1);
    first.wait_events(1);
    assert!(first.terminate().success());
    // An I/O error reading shard 0's state (a link to itself: ELOOP, even as root).
    let state = dir.join("data/state/shard-0.state");
    std::fs::remove_file(&state).unwrap();
    std::os::unix::fs::symlink("shard-0.state", &state).unwrap();
    let mut second = Agent::start(&dir, keep);
    second.wait_stats(10, |_| second.stderr().contains("lacks some shards"));
    let err = second.stderr();
    assert!(
        err.contains("a shard's saved state cannot be read") && err.contains("shard-0.state"),
        "{err}"
    );
    assert!(
        err.contains("continuing from the saved state shard=1"),
        "{err}"
    );
    // Shard 0's first save replaced the file: the next start continues both.
    assert!(second.terminate().success());
    let third = Agent::start(&dir, keep);
    third.wait_stats(10, |_| {
        third
            .stderr()
            .contains("continuing from the saved state shard=0")
    });
}

#[test]
fn a_replayed_alert_is_not_shown_twice_and_the_journal_is_let_go_once_saved() {
    let dir = scratch("kill9-journal-twice");
    std::fs::write(dir.join("rules/pair.toml"), SEQ_1H).unwrap();
    let rare = "checkpoint_every = \"1h\"\n";
    let mut first = Agent::start(&dir, rare);
    step(first.port, "web1", "one");
    step(first.port, "web1", "two");
    first.wait_alert(10, |v| v["rule"] == "pair");
    // The sink notes a change written out right after writing it; killed between the two, a
    // restart writes it again (at least once, by design), which is not what this tests: under
    // load that gap was once hit here (so waited for, not slept).
    first.sink_settled();
    first.kill9();
    // Replayed, the match is made again: the store knows it, nothing is shown.
    let mut again = Agent::start(&dir, rare);
    again.wait_stats(10, |s| s["sink"]["alerts_repeated"] == 1);
    assert_eq!(again.alerts(|v| v["rule"] == "pair"), 0, "shown twice");
    // Killed once the state it saved at start (the replayed match in it) is kept: the
    // journal's segments before it are gone then.
    again.wait_stats(10, |s| {
        s["shards"]
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x["journal"]["bytes"] == 0))
    });
    again.kill9();
    // That run saved its state as it began, the replayed match in it: the next one has
    // nothing to replay and nothing to show. Once its own state is kept, the journal's older
    // segments are deleted.
    let last = Agent::start(&dir, "checkpoint_every = \"100ms\"\n");
    last.wait_stats(10, |s| {
        s["rules"][0]["counters"]["alerts"] == 1 && s["shards"][0]["journal"]["replayed"] == 0
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(last.alerts(|v| v["rule"] == "pair"), 0, "shown twice");
    let journal = dir.join("data/journal");
    let segments = || {
        std::fs::read_dir(&journal)
            .map(|d| {
                d.flatten()
                    .flat_map(|s| std::fs::read_dir(s.path()).into_iter().flatten())
                    .flatten()
                    .filter(|f| std::fs::metadata(f.path()).is_ok_and(|m| m.len() > 0))
                    .count()
            })
            .unwrap_or(usize::MAX)
    };
    let t = Instant::now();
    while segments() != 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        segments(),
        0,
        "journalled events a saved state holds were kept"
    );
}

/// `cepheus alerts` against the agent in `dir`: (exit code, stdout, stderr).
///
/// Tried again, for up to 30 s, while it finds the store locked: a test that wrote the store
/// itself has let go of it, but sled lets go of its lock a moment after the drop.
fn alerts_cmd(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
            .arg("alerts")
            .args(args)
            .args(["--config", "cepheus.toml"])
            .current_dir(dir)
            .output()
            .unwrap();
        let locked = String::from_utf8_lossy(&out.stderr).contains("is in use by another process");
        if !locked || Instant::now() >= deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn alerts_lists_what_fires_now_and_the_latest_changes() {
    let dir = scratch("alerts-cmd");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    write_secret(&dir.join("token"), "s3cret-0123456789abcdef\n");
    let agent = Agent::start_full(&dir, "", "token_file = \"token\"\n", "");
    let (code, out, err) = alerts_cmd(&dir, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "");
    assert!(err.contains("no alert is firing"), "{err}");
    // A rule name the agent does not run is said (a quiet rule lists nothing alike).
    let (code, _, err) = alerts_cmd(&dir, &["--rule", "hbb"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("the agent runs no rule named `hbb` (its rules: hb)"),
        "{err}"
    );
    let (_, _, err) = alerts_cmd(&dir, &["--rule", "hb"]);
    assert!(!err.contains("no rule named"), "{err}");
    heartbeat(agent.port, "web1", 1);
    heartbeat(agent.port, "web2", 1);
    let fired = agent.wait_alert(10, |v| {
        v["state"] == "firing" && v["group"]["host"] == "web2"
    });
    agent.wait_alert(10, |v| {
        v["state"] == "firing" && v["group"]["host"] == "web1"
    });
    heartbeat(agent.port, "web1", 2);
    agent.wait_alert(10, |v| v["state"] == "resolved");
    // The alert the store has is the one written out, as JSON lines.
    let (code, out, err) = alerts_cmd(&dir, &["--json"]);
    assert_eq!(code, 0, "{err}");
    let firing: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(firing, std::slice::from_ref(&fired), "{out}");
    // As a table: a header, then one line.
    let (_, out, _) = alerts_cmd(&dir, &[]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("ID") && lines[0].contains("RULE"));
    assert!(
        lines[1].contains("critical") && lines[1].contains("host=web2"),
        "{out}"
    );
    // The latest changes: both firings and the resolve, in order.
    let (_, out, _) = alerts_cmd(&dir, &["--recent", "10", "--json"]);
    let states: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["state"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(states, ["firing", "firing", "resolved"], "{out}");
    let (_, out, _) = alerts_cmd(&dir, &["--recent", "1", "--json"]);
    assert_eq!(out.lines().count(), 1);
    // Acknowledged by alice: still firing, listed with its ack; the resolved one cannot be.
    let id = fired["id"].as_str().unwrap();
    let (code, out, err) = alerts_cmd(&dir, &["ack", id, "--by", "root"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, format!("acknowledged alert {id}\n"));
    // Again, by alice: hers stands, and whose it replaced is said.
    let (code, out, err) = alerts_cmd(&dir, &["ack", id, "--by", "alice"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with(&format!(
            "acknowledged alert {id} (by alice now; it was acknowledged by root at "
        )),
        "{out}"
    );
    // `--config` before `ack` is taken too; a blank name is refused, not recorded.
    let before = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args([
            "alerts",
            "--config",
            "cepheus.toml",
            "ack",
            id,
            "--by",
            "alice",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(
        before.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&before.stderr)
    );
    let (code, _, err) = alerts_cmd(&dir, &["ack", id, "--by", " "]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a blank name records nobody"), "{err}");
    let (_, out, _) = alerts_cmd(&dir, &["--json"]);
    let listed: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(listed["ack"]["by"], "alice", "{out}");
    assert_eq!(listed["state"], "firing");
    let (_, out, _) = alerts_cmd(&dir, &[]);
    assert!(
        out.contains(id) && out.contains("[acked by alice]"),
        "{out}"
    );
    let web1 = agent.wait_alert(1, |v| v["state"] == "resolved");
    let (code, _, err) = alerts_cmd(&dir, &["ack", web1["id"].as_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is firing"), "{err}");
    // Its resolve carries the ack, on stdout as in the store.
    heartbeat(agent.port, "web2", 2);
    let resolved = agent.wait_alert(10, |v| {
        v["state"] == "resolved" && v["group"]["host"] == "web2"
    });
    assert_eq!(resolved["ack"]["by"], "alice", "{resolved}");
    // Without the configuration, the token is missing: said, exit 2.
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["alerts"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // The agent stopped: the listing comes from its store, said so; an ack needs the agent.
    let mut agent = agent;
    assert!(agent.terminate().success());
    let (code, out, err) = alerts_cmd(&dir, &["--recent", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("read from its store"), "{err}");
    let last: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(last.last(), Some(&resolved), "{out}");
    let (code, _, err) = alerts_cmd(&dir, &["ack", id]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot reach the agent"), "{err}");
}

/// More alerts fire than a listing holds: `cepheus alerts` says how many and that it lists the
/// most severe then the newest (read from the store here: the count comes from the agent's `/stats` otherwise).
#[test]
fn alerts_says_when_more_fire_than_it_lists() {
    let dir = scratch("alerts-cut");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        dir.join("cepheus.toml"),
        format!("[store]\npath = \"data\"\n[api]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let max = cepheus_agent::run::api::MAX_FIRING;
    {
        let store = cepheus_store::Store::open(&dir.join("data"), u64::MAX).unwrap();
        let mut changes: Vec<cepheus_store::Change> = (0..max as u64 + 3)
            .map(|id| cepheus_store::Change {
                id,
                state: cepheus_core::alert::AlertState::Firing,
                json: format!(
                    r#"{{"id":"{id:016x}","state":"firing","time":"2026-12-04T07:00:00Z","rule":"hb","group":{{"host":"h{id}"}}}}"#
                ),
                seq: None,
                meaning: None,
            })
            .collect();
        store.record_changes(&mut changes).unwrap();
    }
    let (code, out, err) = alerts_cmd(&dir, &["--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), max);
    assert!(
        err.contains(&format!(
            "note: {} alerts are firing; listed are {max}, the most severe then the newest",
            max + 3
        )),
        "{err}"
    );
    // The latest changes are a listing of their own: no such note.
    let (code, _, err) = alerts_cmd(&dir, &["--recent", "5"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("alerts are firing"), "{err}");
    // More changes asked for than a listing holds: said.
    let (code, out, err) = alerts_cmd(&dir, &["--recent", "30000", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), cepheus_agent::run::api::MAX_RECENT);
    assert!(
        err.contains(&format!(
            "--recent 30000: a listing holds the last {} changes at most",
            cepheus_agent::run::api::MAX_RECENT
        )),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn alerts_refuses_arguments_that_cannot_be_answered_before_asking_anyone() {
    let dir = scratch("alerts-args");
    let (code, _, err) = alerts_cmd(&dir, &["--recent", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("0 lists nothing"), "{err}");
    let (code, _, err) = alerts_cmd(&dir, &["ack", "nothex"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("16 hexadecimal digits"), "{err}");
    assert!(!err.contains("cannot reach the agent"), "{err}");
}

/// A rule removed by a reload resolves its open alert at the reload, not at the shard's last
/// tick (with a long `engine.tick`, that was seconds before).
#[test]
fn a_reload_resolves_at_the_reload_not_at_the_last_tick() {
    let dir = scratch("reload-time");
    let episode = "[[rule]]\nname = \"ep\"\nseverity = \"low\"\nevents.a = 'syslog and app == \"x\"'\npattern = \"a{1,} within 1m\"\n";
    std::fs::write(dir.join("rules/ep.toml"), episode).unwrap();
    let agent = Agent::start(&dir, "[engine]\ntick = \"30s\"\n");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(
        b"<13>1 2026-12-03T05:00:00Z h x - - - one",
        ("127.0.0.1", agent.port),
    )
    .unwrap();
    agent.wait_alert(10, |v| v["rule"] == "ep" && v["state"] == "firing");
    std::thread::sleep(Duration::from_millis(1500));
    let before = now_secs();
    std::fs::write(dir.join("rules/ep.toml"), one_step_rule("other")).unwrap();
    agent.hangup();
    let r = agent.wait_alert(10, |v| v["rule"] == "ep" && v["state"] == "resolved");
    assert_eq!(r["reason"], "rule_removed", "{r}");
    let at = chrono::DateTime::parse_from_rfc3339(r["time"].as_str().unwrap()).unwrap();
    let at = at.timestamp_micros() as f64 / 1e6;
    assert!(
        at >= before - 0.05,
        "resolved at {at}, the reload began at {before}"
    );
}

#[test]
fn alerts_of_rules_changed_or_removed_while_down_are_resolved_at_restart() {
    let dir = scratch("restart-changed");
    let two = format!(
        "{HB_3S}{}",
        HB_3S.replace("\"hb\"\nseverity", "\"hb-b\"\nseverity")
    );
    std::fs::write(dir.join("rules/hb.toml"), &two).unwrap();
    let mut first = Agent::start(&dir, "checkpoint_every = \"100ms\"\n");
    heartbeat(first.port, "web1", 1);
    let a = first.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "firing");
    let b = first.wait_alert(10, |v| v["rule"] == "hb-b" && v["state"] == "firing");
    assert!(first.terminate().success(), "{}", first.stderr());
    // While it is down, `hb` is changed (6 s) and `hb-b` removed.
    std::fs::write(dir.join("rules/hb.toml"), HB_3S.replace("for 3s", "for 6s")).unwrap();
    let second = Agent::start(&dir, "checkpoint_every = \"100ms\"\n");
    let ra = second.wait_alert(10, |v| v["rule"] == "hb" && v["state"] == "resolved");
    let rb = second.wait_alert(10, |v| v["rule"] == "hb-b" && v["state"] == "resolved");
    assert_eq!(
        (&ra["id"], &ra["reason"]),
        (&a["id"], &"rule_changed".into())
    );
    assert_eq!(
        (&rb["id"], &rb["reason"]),
        (&b["id"], &"rule_removed".into())
    );
    assert_eq!(ra["group"], a["group"]);
    // Nothing of theirs is left firing in the store.
    let (code, out, err) = alerts_cmd(&dir, &["--json"]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
}

/// A rule `seq(a, b) within WITHIN` grouped by host, on the apps `NAMEa` and `NAMEb`: a
/// match's alert, which fires once and no engine holds.
fn match_rule(name: &str, within: &str) -> String {
    format!(
        "[[rule]]\nname = \"{name}\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"{name}a\"'\nevents.b = 'syslog and app == \"{name}b\"'\npattern = \"seq(a, b) within {within}\"\n"
    )
}

/// Sends each [`match_rule`]'s two events, and waits for their alerts to fire (in order).
fn fire_matches(agent: &Agent, names: &[&str]) -> Vec<Value> {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    for name in names {
        for step in ["a", "b"] {
            let line = format!("<13>Dec  2 05:40:00 web1 {name}{step}: x");
            udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
                .unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    names
        .iter()
        .map(|n| agent.wait_alert(10, |v| v["rule"] == *n && v["state"] == "firing"))
        .collect()
}

/// The alerts the store has firing (`cepheus alerts --json`).
fn firing_alerts(dir: &Path) -> Vec<Value> {
    let (code, out, err) = alerts_cmd(dir, &["--json"]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A crash after a reload's shards saved the new rules' state but before the sink resolved
/// the changed rule's match alert (which no engine holds): the restart resolves it
/// (`rule_changed`), since it was kept with its rule's earlier meaning; the unchanged
/// rule's alert stays firing.
#[test]
fn a_crash_before_a_reload_resolved_a_changed_rules_match_alert_resolves_it_at_restart() {
    let dir = scratch("reload-crash-retire");
    std::fs::write(
        dir.join("rules/m.toml"),
        [match_rule("m1", "1m"), match_rule("m3", "1m")].concat(),
    )
    .unwrap();
    let mut first = Agent::start_env(
        &dir,
        "",
        "",
        "checkpoint_every = \"100ms\"\n",
        &[("CEPHEUS_FAULT_ABORT_BEFORE_RETIRE", "1")],
    );
    let fired = fire_matches(&first, &["m1", "m3"]);
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(
        dir.join("rules/m.toml"),
        [match_rule("m1", "2m"), match_rule("m3", "1m")].concat(),
    )
    .unwrap();
    first.hangup();
    let deadline = Instant::now() + Duration::from_secs(20);
    while first.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the injected abort did not come");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(first.stderr().contains("CEPHEUS_FAULT_ABORT_BEFORE_RETIRE"));
    let second = Agent::start(&dir, "checkpoint_every = \"100ms\"\n");
    let r1 = second.wait_alert(10, |v| v["rule"] == "m1" && v["state"] == "resolved");
    assert_eq!(
        (&r1["id"], &r1["reason"]),
        (&fired[0]["id"], &"rule_changed".into())
    );
    // Resolved because of its meaning (the shards had saved the new rules' state), not
    // because a shard restored the old rules and named m1 as changed while down.
    assert!(
        !second
            .stderr()
            .contains("rules changed or removed while the agent was down"),
        "{}",
        second.stderr()
    );
    std::thread::sleep(Duration::from_millis(500));
    let firing = firing_alerts(&dir);
    assert_eq!(firing.len(), 1, "{firing:?}");
    assert_eq!(firing[0]["id"], fired[1]["id"]);
}

/// A match's alert fires once and no engine holds it: a reload that changes or removes its
/// rule resolves it all the same (`rule_changed`, `rule_removed`), as a restart does; an
/// unchanged rule's stays firing.
#[test]
fn match_alerts_of_rules_a_reload_changes_or_removes_are_resolved() {
    let dir = scratch("reload-match");
    let three = [
        match_rule("m1", "1m"),
        match_rule("m2", "1m"),
        match_rule("m3", "1m"),
    ]
    .concat();
    std::fs::write(dir.join("rules/m.toml"), three).unwrap();
    let agent = Agent::start(&dir, "");
    let fired = fire_matches(&agent, &["m1", "m2", "m3"]);
    std::thread::sleep(Duration::from_millis(300));
    // m1 changed, m2 removed, m3 as it was.
    std::fs::write(
        dir.join("rules/m.toml"),
        [match_rule("m1", "2m"), match_rule("m3", "1m")].concat(),
    )
    .unwrap();
    let r1 = agent.wait_alert(10, |v| v["rule"] == "m1" && v["state"] == "resolved");
    let r2 = agent.wait_alert(10, |v| v["rule"] == "m2" && v["state"] == "resolved");
    assert_eq!(
        (&r1["id"], &r1["reason"]),
        (&fired[0]["id"], &"rule_changed".into())
    );
    assert_eq!(
        (&r2["id"], &r2["reason"]),
        (&fired[1]["id"], &"rule_removed".into())
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        agent.alerts(|v| v["state"] == "resolved"),
        2,
        "{}",
        agent.stderr()
    );
    let firing = firing_alerts(&dir);
    assert_eq!(firing.len(), 1, "{firing:?}");
    assert_eq!(firing[0]["id"], fired[2]["id"]);
    // The sink's own resolves count with the shards' changes: 3 firing, 2 resolved.
    assert_eq!(agent.stats()["sink"]["alerts"], 5);
}

#[test]
fn the_api_answers_on_its_unix_socket_without_the_token() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("api-socket");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    write_secret(&dir.join("token"), "s3cret-0123456789abcdef\n");
    let api = "token_file = \"token\"\nsocket = \"api.sock\"\n";
    let keep = "checkpoint_every = \"100ms\"\n";
    let mut agent = Agent::start_full(&dir, "", api, keep);
    let sock = dir.join("api.sock");
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    // Over TCP the token is needed; the client, given the configuration, takes the socket
    // even when it cannot read the token.
    assert!(http_get(agent.api, "/stats").is_none());
    write_secret(&dir.join("token"), "");
    heartbeat(agent.port, "web1", 1);
    agent.wait_alert(10, |v| v["state"] == "firing");
    let (code, out, err) = alerts_cmd(&dir, &["--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let id = serde_json::from_str::<Value>(out.trim()).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _, err) = alerts_cmd(&dir, &["ack", &id, "--by", "ops"]);
    assert_eq!(code, 0, "{err}");
    // A crash leaves the socket file: the next start replaces it.
    agent.kill9();
    assert!(sock.exists());
    write_secret(&dir.join("token"), "s3cret-0123456789abcdef\n");
    let mut again = Agent::start_full(&dir, "", api, keep);
    let (code, out, err) = alerts_cmd(&dir, &["--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"by\":\"ops\""), "{out}");
    // A clean stop removes it.
    assert!(again.terminate().success());
    assert!(!sock.exists());
}

#[test]
fn tui_without_an_agent_says_so_before_taking_the_screen() {
    let dir = scratch("tui-none");
    let port = free_port();
    std::fs::write(
        dir.join("c.toml"),
        format!("[api]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["tui", "--config", "c.toml"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the agent's API"), "{err}");
    // Nothing was drawn (no alternate screen, no escape sequences).
    assert!(out.stdout.is_empty());
}

#[test]
fn alerts_are_appended_to_output_file_which_logrotate_may_move() {
    let dir = scratch("output-file");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let agent = Agent::start(&dir, "[output]\nfile = \"alerts.jsonl\"\n");
    let file = dir.join("alerts.jsonl");
    heartbeat(agent.port, "web1", 1);
    let fired = agent.wait_alert(10, |v| v["state"] == "firing");
    let read = |p: &Path| -> Vec<Value> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // As on stdout.
    let deadline = Instant::now() + Duration::from_secs(30);
    while read(&file).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(read(&file), std::slice::from_ref(&fired));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o640
    );
    // Moved away (logrotate): the next changes go to a new file of that name.
    std::fs::rename(&file, dir.join("alerts.jsonl.1")).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    heartbeat(agent.port, "web1", 2);
    let resolved = agent.wait_alert(10, |v| v["state"] == "resolved");
    let deadline = Instant::now() + Duration::from_secs(30);
    while read(&file).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(read(&file), [resolved]);
    assert_eq!(read(&dir.join("alerts.jsonl.1")), [fired]);
}

#[test]
fn alerts_are_forwarded_to_a_syslog_collector_over_tcp_and_udp() {
    let dir = scratch("forward");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    // The TCP collector is not there at first: the alert waits, then goes when it comes.
    let parked = ParkedPort::new();
    let tcp_port = parked.port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let agent = Agent::start(
        &dir,
        &format!("[output]\nsyslog = \"tcp://127.0.0.1:{tcp_port}\"\n"),
    );
    heartbeat(agent.port, "web1", 1);
    let fired = agent.wait_alert(10, |v| v["state"] == "firing");
    let listener = parked.listen();
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // One octet-counted frame: "LEN MSG".
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while buf.last() != Some(&b' ') {
        conn.read_exact(&mut byte).unwrap();
        buf.push(byte[0]);
    }
    let len: usize = std::str::from_utf8(&buf).unwrap().trim().parse().unwrap();
    let mut msg = vec![0u8; len];
    conn.read_exact(&mut msg).unwrap();
    let msg = String::from_utf8(msg).unwrap();
    assert!(msg.starts_with("<34>1 "), "{msg}");
    assert!(
        msg.contains(" cepheus ") && msg.contains(" firing - "),
        "{msg}"
    );
    let json: Value = serde_json::from_str(msg.split('\u{feff}').nth(1).unwrap()).unwrap();
    assert_eq!(json, fired);
    drop(agent);

    // Over UDP: one datagram per change.
    let dir = scratch("forward-udp");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let agent = Agent::start(
        &dir,
        &format!("[output]\nsyslog = \"udp://127.0.0.1:{udp_port}\"\n"),
    );
    heartbeat(agent.port, "web2", 1);
    let fired = agent.wait_alert(10, |v| v["state"] == "firing");
    let mut d = [0u8; 65536];
    let n = udp.recv(&mut d).unwrap();
    let msg = String::from_utf8_lossy(&d[..n]).into_owned();
    let json: Value = serde_json::from_str(msg.split('\u{feff}').nth(1).unwrap()).unwrap();
    assert_eq!(json, fired);
}

/// A minimal HTTP endpoint for the webhook: answers each request with the next status of
/// `statuses` (then 200), and hands over (headers, body) of each.
fn http_endpoint(statuses: Vec<u16>) -> (u16, std::sync::mpsc::Receiver<(String, String)>) {
    http_endpoint_on(TcpListener::bind("127.0.0.1:0").unwrap(), statuses)
}

/// [`http_endpoint`] on `listener` (a [`ParkedPort`]'s, for a port known before).
fn http_endpoint_on(
    listener: TcpListener,
    statuses: Vec<u16>,
) -> (u16, std::sync::mpsc::Receiver<(String, String)>) {
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut statuses = statuses.into_iter();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if conn.read_exact(&mut byte).is_err() {
                    break;
                }
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            let mut body = vec![0u8; len];
            let _ = conn.read_exact(&mut body);
            let status = statuses.next().unwrap_or(200);
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = tx.send((head, String::from_utf8_lossy(&body).into_owned()));
        }
    });
    (port, rx)
}

#[test]
fn alerts_are_posted_to_a_webhook_and_a_failed_post_is_tried_again() {
    let dir = scratch("webhook");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    write_secret(&dir.join("hook.token"), "hook-s3cret\n");
    // The endpoint fails the first request (503): the same alerts come again.
    let (port, got) = http_endpoint(vec![503]);
    let agent = Agent::start(
        &dir,
        &format!(
            "[output]\nwebhook = \"http://127.0.0.1:{port}/hook\"\nwebhook_token_file = \"hook.token\"\n"
        ),
    );
    heartbeat(agent.port, "web1", 1);
    let fired = agent.wait_alert(10, |v| v["state"] == "firing");
    let (head1, body1) = got.recv_timeout(Duration::from_secs(10)).unwrap();
    let (head2, body2) = got.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(head1.starts_with("POST /hook HTTP/1.1"), "{head1}");
    assert!(
        head2.contains("Authorization: Bearer hook-s3cret"),
        "{head2}"
    );
    assert!(
        head2
            .to_ascii_lowercase()
            .contains("content-type: application/json")
    );
    assert_eq!(body1, body2, "the failed request is sent again as it was");
    let v: Value = serde_json::from_str(&body2).unwrap();
    assert_eq!(v["alerts"], Value::Array(vec![fired.clone()]));
    // Its resolve follows.
    heartbeat(agent.port, "web1", 2);
    let (_, body3) = got.recv_timeout(Duration::from_secs(10)).unwrap();
    let v: Value = serde_json::from_str(&body3).unwrap();
    assert_eq!(v["alerts"][0]["state"], "resolved");
    assert_eq!(v["alerts"][0]["id"], fired["id"]);
    let s = agent.wait_stats(10, |s| s["sink"]["webhook_sent"] == 2);
    // The one failed request is counted; nothing waits any more.
    assert_eq!(s["sink"]["webhook_failed"], 1, "{s}");
    assert_eq!(s["sink"]["webhook_waiting"], 0, "{s}");
    let metrics = http_get(agent.api, "/metrics").expect("/metrics");
    assert!(
        metrics.contains("# TYPE cepheus_webhook_waiting gauge\ncepheus_webhook_waiting 0\n")
            && metrics.contains("cepheus_webhook_failed_total 1\n"),
        "{metrics}"
    );
}

/// A silence (`cepheus silence add`) mutes the webhook's notifications of the alerts of its
/// group that begin firing while it is active, and of their ends; the alerts are kept and
/// written to stdout with `silenced`. One still firing when the silence is expired is posted
/// then; another group's alerts are posted throughout.
#[test]
fn a_silence_mutes_the_webhook_until_it_ends() {
    let dir = scratch("silence");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let (port, got) = http_endpoint(vec![]);
    let agent = Agent::start(
        &dir,
        &format!("[output]\nwebhook = \"http://127.0.0.1:{port}/hook\"\n"),
    );
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cepheus"))
            .arg("silence")
            .args(args)
            .args(["--config", "cepheus.toml"])
            .current_dir(&agent.dir)
            .output()
            .unwrap()
    };
    // Refused in words: a silence of everything.
    let out = cli(&["add", "--for", "1h"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("must name a rule, a group, severities"),
        "{err}"
    );
    // A rule it does not run, a field the rule does not group by: it would mute nothing.
    let out = cli(&["add", "--rule", "hbb", "--for", "1h"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the agent runs no rule named \"hbb\""),
        "{err}"
    );
    let out = cli(&["add", "--rule", "hb", "--group", "hots=web1", "--for", "1h"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rule \"hb\" groups by host: group field \"hots\" is none of them"),
        "{err}"
    );
    let out = cli(&["add", "--group", "hots=web1", "--for", "1h"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no rule the agent runs groups by \"hots\""),
        "{err}"
    );
    let out = cli(&[
        "add",
        "--group",
        "host=web1",
        "--group",
        "host=web2",
        "--for",
        "1h",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--group names `host` twice"), "{err}");
    let out = cli(&["add", "--rule", "hb", "--for", "1000d"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a silence ends within a year"), "{err}");
    let out = cli(&[
        "add",
        "--group",
        "host=web1",
        "--for",
        "1h",
        "--comment",
        "maint",
        "--by",
        "ops",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        said.starts_with("silence ") && said.contains(" active until "),
        "{said}"
    );
    let id = said.split_whitespace().nth(1).unwrap().to_string();
    // The same again (a key pressed twice): the one there stands, also when asked for as
    // long again a moment later (it would end a little later).
    for d in ["30m", "1h"] {
        let again = cli(&["add", "--group", "host=web1", "--for", d, "--by", "ops"]);
        let said = String::from_utf8_lossy(&again.stdout);
        assert!(
            said.starts_with(&format!("silence {id} already mutes these alerts")),
            "{d}: {said}"
        );
    }
    // Every alert posted, in order.
    let mut posted: Vec<Value> = Vec::new();
    let pump = |posted: &mut Vec<Value>, until: &dyn Fn(&[Value]) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !until(posted) {
            assert!(Instant::now() < deadline, "posted: {posted:?}");
            if let Ok((_, body)) = got.recv_timeout(Duration::from_millis(100)) {
                let v: Value = serde_json::from_str(&body).unwrap();
                posted.extend(v["alerts"].as_array().unwrap().iter().cloned());
            }
        }
    };
    let of = |host: &'static str, state: &'static str| {
        move |v: &Value| v["group"]["host"] == host && v["state"] == state
    };
    heartbeat(agent.port, "web1", 1);
    heartbeat(agent.port, "web2", 1);
    let muted = agent.wait_alert(10, of("web1", "firing"));
    assert_eq!(muted["silenced"]["id"], id.as_str(), "{muted}");
    assert_eq!(muted["silenced"]["by"], "ops");
    pump(&mut posted, &|p: &[Value]| {
        p.iter().any(of("web2", "firing"))
    });
    // Listed silenced, and its end muted too (it was never posted).
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["alerts", "--config", "cepheus.toml"])
        .current_dir(&agent.dir)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains(&format!("[silenced by {id}]")), "{table}");
    heartbeat(agent.port, "web1", 2);
    let end = agent.wait_alert(10, of("web1", "resolved"));
    assert_eq!(end["silenced"]["id"], id.as_str(), "{end}");
    // Another group's end is posted (after web1's muted one).
    heartbeat(agent.port, "web2", 2);
    pump(&mut posted, &|p: &[Value]| {
        p.iter().any(of("web2", "resolved"))
    });
    // web1 falls silent again within the silence: muted; expired, it is posted then.
    agent.wait_alert(10, |v| {
        of("web1", "firing")(v) && v["id"] != muted["id"] && v.get("silenced").is_some()
    });
    assert!(
        !posted.iter().any(|v| v["group"]["host"] == "web1"),
        "{posted:?}"
    );
    // (Its id as listed, or without its leading zeros.)
    let short = format!("{:x}", u64::from_str_radix(&id, 16).unwrap());
    let out = cli(&["expire", &short]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pump(&mut posted, &|p: &[Value]| {
        p.iter().any(of("web1", "firing"))
    });
    let web1: Vec<&Value> = posted
        .iter()
        .filter(|v| v["group"]["host"] == "web1")
        .collect();
    assert_eq!(web1.len(), 1, "{posted:?}");
    assert!(web1[0].get("silenced").is_none(), "{posted:?}");
    assert_ne!(web1[0]["id"], muted["id"]);
    let out = cli(&["list"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(&format!("{id}  expired  *     host=web1")),
        "{table}"
    );
    assert!(cli(&["expire", "00000000000000ff"]).status.code() == Some(1));
    let s = agent.stats();
    assert_eq!(s["sink"]["alerts_silenced"], 2, "{s}");
}

/// `[[inhibit]]`: while a host's heartbeat alert fires, its service alert that begins firing
/// is not posted (kept and written with `inhibited`); when the heartbeat alert resolves, the
/// service alert still firing is posted, and its end after it.
#[test]
fn an_inhibiting_alert_mutes_the_webhook_until_it_ends() {
    let dir = scratch("inhibit");
    std::fs::write(
        dir.join("rules/up.toml"),
        "[[rule]]\nname = \"up\"\nseverity = \"critical\"\ngroup_by = [\"host\"]\n\
         events.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 2s\"\n\
         [[rule]]\nname = \"svc\"\nseverity = \"high\"\ngroup_by = [\"host\"]\n\
         events.s = 'syslog and app == \"svc\"'\npattern = \"absent(s) for 4s\"\n",
    )
    .unwrap();
    let (port, got) = http_endpoint(vec![]);
    let agent = Agent::start(
        &dir,
        &format!(
            "[output]\nwebhook = \"http://127.0.0.1:{port}/hook\"\n\
             [[inhibit]]\nsource = \"up\"\ntargets = [\"svc\"]\nequal = [\"host\"]\n"
        ),
    );
    let send = |app: &str, n: u32| {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let line = format!("<14>1 2026-12-03T05:00:00Z web1 {app} - - - alive {n}");
        udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
    };
    let mut posted: Vec<Value> = Vec::new();
    let pump = |posted: &mut Vec<Value>, until: &dyn Fn(&[Value]) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !until(posted) {
            assert!(Instant::now() < deadline, "posted: {posted:?}");
            if let Ok((_, body)) = got.recv_timeout(Duration::from_millis(100)) {
                let v: Value = serde_json::from_str(&body).unwrap();
                posted.extend(v["alerts"].as_array().unwrap().iter().cloned());
            }
        }
    };
    let of = |rule: &'static str, state: &'static str| {
        move |v: &Value| v["rule"] == rule && v["state"] == state
    };
    send("hb", 1);
    send("svc", 1);
    let up = agent.wait_alert(10, of("up", "firing"));
    let svc = agent.wait_alert(10, of("svc", "firing"));
    assert_eq!(svc["inhibited"]["by"], up["id"], "{svc}");
    assert_eq!(svc["inhibited"]["rule"], "up");
    pump(&mut posted, &|p: &[Value]| p.iter().any(of("up", "firing")));
    // The host is back: its heartbeat alert resolves, and the service's, still firing, is
    // posted then (without `inhibited`), its end after it.
    send("hb", 2);
    pump(&mut posted, &|p: &[Value]| {
        p.iter().any(of("svc", "firing"))
    });
    let i_up = posted.iter().position(of("up", "resolved")).unwrap();
    let i_svc = posted.iter().position(of("svc", "firing")).unwrap();
    assert!(i_up < i_svc, "{posted:?}");
    assert!(posted[i_svc].get("inhibited").is_none(), "{posted:?}");
    assert_eq!(posted[i_svc]["id"], svc["id"]);
    send("svc", 2);
    pump(&mut posted, &|p: &[Value]| {
        p.iter().any(of("svc", "resolved"))
    });
    let end = posted.iter().find(|v| of("svc", "resolved")(v)).unwrap();
    assert!(end.get("inhibited").is_none(), "{end}");
    assert_eq!(agent.stats()["sink"]["alerts_inhibited"], 1);
}

/// What the webhook took is not posted again after kill -9, even when nothing followed it
/// (found by an audit: the note of what it took waited for the store's next flushed write,
/// so a crash in a quiet spell posted again all it had taken since).
#[test]
fn a_webhook_gets_nothing_again_after_kill_9_in_a_quiet_spell() {
    let dir = scratch("kill9-webhook");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let (port, got) = http_endpoint(vec![]);
    let extra = format!(
        "checkpoint_every = \"100ms\"\n[output]\nwebhook = \"http://127.0.0.1:{port}/hook\"\n"
    );
    let mut first = Agent::start(&dir, &extra);
    heartbeat(first.port, "web1", 1);
    let fired = first.wait_alert(10, |v| v["state"] == "firing");
    let (_, body) = got.recv_timeout(Duration::from_secs(10)).unwrap();
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["alerts"], Value::Array(vec![fired.clone()]));
    first.wait_stats(10, |s| s["sink"]["webhook_sent"] == 1);
    // A few saves of the engine (so the restart knows the alert), then the crash.
    std::thread::sleep(Duration::from_millis(500));
    first.kill9();
    let second = Agent::start(&dir, &extra);
    second.wait_stats(10, |s| s["sink"].is_object());
    heartbeat(second.port, "web1", 2);
    // The first post after the restart is the resolve, not the firing again.
    let (_, body) = got.recv_timeout(Duration::from_secs(10)).unwrap();
    let v: Value = serde_json::from_str(&body).unwrap();
    let states: Vec<&Value> = v["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["state"])
        .collect();
    assert_eq!(states, ["resolved"], "{body}");
    assert_eq!(v["alerts"][0]["id"], fired["id"]);
}

/// A change the endpoint refuses (4xx) is dropped and said in the log, even within a minute
/// of a failure tried again (each has its own log limit).
#[test]
fn a_webhook_refusal_after_a_retry_is_said_in_the_log() {
    let dir = scratch("webhook-refused");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let (port, got) = http_endpoint(vec![503, 404]);
    let agent = Agent::start(
        &dir,
        &format!("[output]\nwebhook = \"http://127.0.0.1:{port}/hook\"\n"),
    );
    heartbeat(agent.port, "web1", 1);
    agent.wait_alert(10, |v| v["state"] == "firing");
    for _ in 0..2 {
        got.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    agent.wait_stats(10, |s| s["sink"]["webhook_unsent"] == 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !agent.stderr().contains("(refused: 1 change(s) dropped)") {
        assert!(Instant::now() < deadline, "{}", agent.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(agent.stderr().contains("(tried again in 1 s)"));
}

/// More alert changes than the webhook's queue holds, while its endpoint fails: those that do
/// not fit wait in the store and follow, in order, as the queue drains; none is dropped.
#[test]
fn changes_past_an_outputs_queue_follow_from_the_store() {
    let dir = scratch("webhook-behind");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let (port, got) = http_endpoint(vec![503, 503]);
    let agent = Agent::start_env(
        &dir,
        "",
        "",
        &format!("[output]\nwebhook = \"http://127.0.0.1:{port}/hook\"\n"),
        &[("CEPHEUS_TEST_OUTPUT_QUEUE", "3")],
    );
    let hosts: Vec<String> = (0..20).map(|i| format!("web{i:02}")).collect();
    for h in &hosts {
        heartbeat(agent.port, h, 1);
    }
    agent.wait_stats(20, |s| s["sink"]["alerts"].as_u64() >= Some(20));
    // Behind while the endpoint refuses (a second, then two, between its tries).
    agent.wait_stats(10, |s| s["sink"]["webhook_behind"] == 1);
    let metrics = http_get(agent.api, "/metrics").expect("/metrics");
    assert!(
        metrics.contains("# TYPE cepheus_webhook_behind gauge\n"),
        "{metrics}"
    );
    // The first two requests were refused (503) and come again: only the accepted count.
    let mut posted: Vec<Value> = Vec::new();
    let mut requests = 0;
    let deadline = Instant::now() + Duration::from_secs(40);
    while posted.len() < 20 {
        let left = deadline.saturating_duration_since(Instant::now());
        let (_, body) = got
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{} posted: {posted:?}", posted.len()));
        requests += 1;
        if requests <= 2 {
            continue;
        }
        let v: Value = serde_json::from_str(&body).unwrap();
        posted.extend(v["alerts"].as_array().unwrap().iter().cloned());
    }
    // Each firing once.
    assert!(posted.iter().all(|a| a["state"] == "firing"), "{posted:?}");
    let mut ids: Vec<&str> = posted.iter().map(|a| a["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 20, "{posted:?}");
    let s = agent.wait_stats(10, |s| {
        s["sink"]["webhook_waiting"] == 0 && s["sink"]["webhook_behind"] == 0
    });
    assert_eq!(s["sink"]["webhook_unsent"], 0, "{s}");
}

/// An octet-counting sender that counts one frame in characters, not bytes, loses that
/// frame's last bytes only: the frames after it on the same connection are read (before,
/// the rest of the connection waited as one line for a line end that never came, and the
/// host's heartbeats went unseen).
#[test]
fn a_wrong_octet_count_loses_only_its_frame() {
    let dir = scratch("tcp-resync");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let agent = Agent::start(&dir, "");
    let mut c = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    let frame = |body: &str, count: usize| format!("{count} {body}");
    let beat = |n: u32| format!("<14>1 2026-12-03T05:00:00Z web1 hb - - - alive {n}");
    let mut stream = String::new();
    stream.push_str(&frame(&beat(1), beat(1).len()));
    let umlaut = "<14>1 2026-12-03T05:00:00Z web1 app - - - Übergröße";
    stream.push_str(&frame(umlaut, umlaut.chars().count()));
    for n in 2..6 {
        stream.push_str(&frame(&beat(n), beat(n).len()));
    }
    c.write_all(stream.as_bytes()).unwrap();
    // The connection stays open: the frames after the bad one are read all the same.
    let s = agent.wait_stats(10, |s| s["ingest"]["parsed"].as_u64() >= Some(6));
    assert_eq!(s["ingest"]["tcp_resynced"], 1, "{s}");
    assert_eq!(s["ingest"]["tcp_unframeable"], 0, "{s}");
    agent.wait_stderr(30, "lost its octet counting");
    drop(c);
}

/// Changes waiting in the store for an output that the store prunes first (`max_alerts`) are
/// counted as unsent and said, not skipped silently: what the endpoint got and what is
/// counted make up every change.
#[test]
fn changes_pruned_before_an_output_sent_them_are_counted() {
    let dir = scratch("webhook-pruned");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let (port, got) = http_endpoint(vec![503, 503]);
    let agent = Agent::start_env(
        &dir,
        "",
        "",
        &format!(
            "max_alerts = 5
[output]
webhook = \"http://127.0.0.1:{port}/hook\"\n"
        ),
        &[("CEPHEUS_TEST_OUTPUT_QUEUE", "3")],
    );
    for i in 0..20 {
        heartbeat(agent.port, &format!("web{i:02}"), 1);
    }
    agent.wait_stats(20, |s| s["sink"]["alerts"].as_u64() >= Some(20));
    let s = agent.wait_stats(40, |s| {
        s["sink"]["webhook_waiting"] == 0 && s["sink"]["webhook_behind"] == 0
    });
    let unsent = s["sink"]["webhook_unsent"].as_u64().unwrap();
    assert!(unsent > 0, "{s}");
    let mut ids = std::collections::BTreeSet::new();
    while let Ok((_, body)) = got.recv_timeout(Duration::from_millis(500)) {
        let v: Value = serde_json::from_str(&body).unwrap();
        for a in v["alerts"].as_array().unwrap() {
            ids.insert(a["id"].as_str().unwrap().to_string());
        }
    }
    // (The two refused requests carried changes sent again later: counted once by id.)
    assert_eq!(ids.len() as u64 + unsent, 20, "{ids:?} {s}");
    agent.wait_stderr(30, "pruned from the store");
}

/// Changes an output never took, more than its queue holds, are all sent at the next start,
/// in order, from the store (not only a queue's worth).
#[test]
fn a_backlog_past_the_queue_is_sent_after_a_restart() {
    let dir = scratch("webhook-backlog");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let parked = ParkedPort::new();
    let port = parked.port();
    let config = format!("[output]\nwebhook = \"http://127.0.0.1:{port}/hook\"\n");
    let queue = [("CEPHEUS_TEST_OUTPUT_QUEUE", "3")];
    let mut first = Agent::start_env(&dir, "", "", &config, &queue);
    for i in 0..20 {
        heartbeat(first.port, &format!("web{i:02}"), 1);
    }
    first.wait_stats(20, |s| s["sink"]["alerts"].as_u64() >= Some(20));
    assert!(first.terminate().success());
    first.wait_stderr(10, "still wait for output.webhook in the store");
    // The endpoint is there now: the 20 come, from the store, each once at least.
    let (_, got) = http_endpoint_on(parked.listen(), vec![]);
    let second = Agent::start_env(&dir, "", "", &config, &queue);
    let mut ids = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while ids.len() < 20 {
        let left = deadline.saturating_duration_since(Instant::now());
        let (_, body) = got
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{} of 20: {}", ids.len(), second.stderr()));
        let v: Value = serde_json::from_str(&body).unwrap();
        for a in v["alerts"].as_array().unwrap() {
            if a["state"] == "firing" {
                ids.insert(a["id"].as_str().unwrap().to_string());
            }
        }
    }
}

#[test]
fn alerts_a_webhook_never_took_are_counted_and_said_when_the_agent_stops() {
    let dir = scratch("webhook-down");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    // A port nothing listens on: every post fails and is tried again.
    let parked = ParkedPort::new();
    let port = parked.port();
    let config = format!("[output]\nwebhook = \"http://127.0.0.1:{port}/hook\"\n");
    let mut agent = Agent::start(&dir, &config);
    heartbeat(agent.port, "web1", 1);
    let fired = agent.wait_alert(10, |v| v["state"] == "firing");
    // Tried at least once, and waiting to try again (1 s, then 2 s ...).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !agent
        .stderr()
        .contains("cannot post alerts to output.webhook")
    {
        assert!(Instant::now() < deadline, "{}", agent.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    // /stats says the change waits and the endpoint failed.
    let s = agent.wait_stats(10, |s| s["sink"]["webhook_failed"].as_u64() >= Some(1));
    assert_eq!(s["sink"]["webhook_waiting"], 1, "{s}");
    // SIGTERM cuts the wait short (terminate allows 5 s), tries once more, and says what it
    // could not deliver instead of dropping it unseen.
    assert!(agent.terminate().success());
    let log = agent.stderr();
    assert!(
        log.contains("not delivered to output.webhook before stopping") && log.contains("left=1"),
        "{log}"
    );
    // The endpoint is back, the agent restarts: what it never delivered is posted then, once.
    let (again, got) = http_endpoint_on(parked.listen(), vec![]);
    assert_eq!(again, port);
    let mut second = Agent::start(&dir, &config);
    let (_, body) = got.recv_timeout(Duration::from_secs(10)).unwrap();
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["alerts"], Value::Array(vec![fired.clone()]), "{body}");
    second.wait_stats(10, |s| s["sink"]["webhook_sent"] == 1);
    assert!(second.terminate().success());
    let third = Agent::start(&dir, &config);
    third.wait_stats(10, |s| s["uptime_secs"].as_u64() >= Some(1));
    std::thread::sleep(Duration::from_millis(500));
    if let Ok((_, b)) = got.try_recv() {
        panic!("posted again: {b}\n{}", third.stderr());
    }
    assert_eq!(third.stats()["sink"]["webhook_sent"], 0);
}

#[test]
fn a_webhook_that_redirects_is_not_counted_as_delivered() {
    let dir = scratch("webhook-redirect");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let (port, got) = http_endpoint(vec![301]);
    let agent = Agent::start(
        &dir,
        &format!("[output]\nwebhook = \"http://127.0.0.1:{port}/hook\"\n"),
    );
    heartbeat(agent.port, "web1", 1);
    agent.wait_alert(10, |v| v["state"] == "firing");
    got.recv_timeout(Duration::from_secs(10)).unwrap();
    let s = agent.wait_stats(10, |s| s["sink"]["webhook_unsent"] == 1);
    assert_eq!(s["sink"]["webhook_sent"], 0, "{s}");
    agent.wait_stderr(10, "answered 301");
    assert!(
        agent.stderr().contains("answered 301"),
        "{}",
        agent.stderr()
    );
}

/// The HTTPS endpoint of the webhook test: Python's server with a certificate of a CA made
/// for the test, appending each request body to `got`.
const HTTPS_ENDPOINT: &str = r#"
import http.server, ssl, sys
port_file, got = sys.argv[1], sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
        with open(got, 'ab') as f:
            f.write(body + b'\n')
        self.send_response(200)
        self.send_header('Content-Length', '0')
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(('127.0.0.1', 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain('cert.pem', 'key.pem')
s.socket = ctx.wrap_socket(s.socket, server_side=True)
open(port_file, 'w').write(str(s.server_address[1]))
s.serve_forever()
"#;

#[test]
fn a_webhook_over_https_is_posted_when_its_ca_is_trusted_and_refused_otherwise() {
    let dir = scratch("webhook-https");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let sh = |cmd: &str| {
        let st = Command::new("sh")
            .args(["-c", cmd])
            .current_dir(&dir)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "{cmd}");
    };
    // A CA, and a certificate it signs for 127.0.0.1.
    sh(
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=cepheus-test-ca",
    );
    sh("openssl req -newkey rsa:2048 -nodes -keyout key.pem -out srv.csr -subj /CN=127.0.0.1");
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    sh(
        "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 1 -extfile ext.cnf",
    );
    std::fs::write(dir.join("srv.py"), HTTPS_ENDPOINT).unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Kill(
        Command::new("python3")
            .args(["srv.py", "port", "got"])
            .current_dir(&dir)
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    let port = loop {
        if let Ok(p) = std::fs::read_to_string(dir.join("port"))
            && let Ok(p) = p.trim().parse::<u16>()
        {
            break p;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the endpoint did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let extra = format!("[output]\nwebhook = \"https://127.0.0.1:{port}/hook\"\n");
    // The CA trusted (rustls reads the roots from SSL_CERT_FILE, as from the system's).
    let ca = dir.join("ca.pem");
    let ca = ca.to_str().unwrap();
    let trusted = Agent::start_env(&dir, "", "", &extra, &[("SSL_CERT_FILE", ca)]);
    heartbeat(trusted.port, "web1", 1);
    let fired = trusted.wait_alert(10, |v| v["state"] == "firing");
    trusted.wait_stats(10, |s| s["sink"]["webhook_sent"] == 1);
    let got = std::fs::read_to_string(dir.join("got")).unwrap();
    let v: Value = serde_json::from_str(got.trim()).unwrap();
    assert_eq!(v["alerts"][0], fired);
    drop(trusted);
    // Not trusted: nothing is posted, and the log says why.
    let _ = std::fs::remove_dir_all(dir.join("data"));
    let stranger = dir.join("none.pem");
    std::fs::write(&stranger, "").unwrap();
    let untrusted = Agent::start_env(
        &dir,
        "",
        "",
        &extra,
        &[("SSL_CERT_FILE", stranger.to_str().unwrap())],
    );
    heartbeat(untrusted.port, "web2", 1);
    untrusted.wait_alert(10, |v| v["state"] == "firing");
    untrusted.wait_stats(10, |_| untrusted.stderr().contains("cannot post alerts"));
    assert!(
        untrusted.stderr().contains("certificate"),
        "{}",
        untrusted.stderr()
    );
    assert_eq!(std::fs::read_to_string(dir.join("got")).unwrap(), got);
}

#[test]
fn alert_changes_are_streamed_as_server_sent_events() {
    let dir = scratch("sse");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let agent = Agent::start(&dir, "");
    // The stream is open (its head came: the subscription is made) before the first alert.
    let (mut s, mut seen) = sse_open(agent.api, "");
    heartbeat(agent.port, "web1", 1);
    let fired = agent.wait_alert(10, |v| v["state"] == "firing");
    heartbeat(agent.port, "web1", 2);
    let resolved = agent.wait_alert(10, |v| v["state"] == "resolved");
    let events: Vec<Value> = sse_alerts(&mut s, &mut seen, 2)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(events, [fired, resolved]);
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(
        seen.to_ascii_lowercase()
            .contains("content-type: text/event-stream")
    );
    assert!(seen.contains("event: alert\n"), "{seen}");
}

/// An alert event's `id`: the change's seq and the store's instance.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd)]
struct SseId(u64, String);

impl std::fmt::Display for SseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.0, self.1)
    }
}

/// Opens `/alerts/stream` with `headers`, reads its head: the stream and what was read.
fn sse_open(port: u16, headers: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /alerts/stream HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n{headers}\r\n"
    )
    .unwrap();
    let mut seen = String::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with("\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        seen.push(byte[0] as char);
    }
    (s, seen)
}

/// Reads until `n` alert events came: each with its `id`, if any, as its seq and store.
fn sse_alerts(s: &mut TcpStream, seen: &mut String, n: usize) -> Vec<(Option<SseId>, Value)> {
    let mut buf = [0u8; 4096];
    loop {
        let mut events = Vec::new();
        for block in seen.split("\n\n") {
            let mut id = None;
            for l in block.lines() {
                if let Some(v) = l.strip_prefix("id: ") {
                    let (seq, store) = v.split_once('@').unwrap();
                    assert_eq!(store.len(), 8, "{v}");
                    id = Some(SseId(seq.parse().unwrap(), store.to_string()));
                }
                if let Some(d) = l.strip_prefix("data: ")
                    && block.contains("event: alert")
                {
                    events.push((id.clone(), serde_json::from_str::<Value>(d).unwrap()));
                }
            }
        }
        if events.len() >= n {
            return events;
        }
        let k = s.read(&mut buf).unwrap();
        assert!(k > 0, "the stream ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..k]));
    }
}

/// Each kept change carries its place in the store as its event's `id`; a client that comes
/// back with `Last-Event-ID` (as a browser's EventSource does) first gets what it missed.
#[test]
fn a_stream_resumed_with_last_event_id_gets_the_changes_it_missed() {
    let dir = scratch("sse-resume");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let agent = Agent::start(&dir, "");
    let (mut s, mut seen) = sse_open(agent.api, "");
    heartbeat(agent.port, "web1", 1);
    let fired = agent.wait_alert(10, |v| v["state"] == "firing");
    let first = sse_alerts(&mut s, &mut seen, 1);
    assert_eq!(first[0].1, fired);
    let Some(id) = first[0].0.clone() else {
        panic!("a kept change without an id: {seen}");
    };
    drop(s);
    // While no stream is open: the group comes back, its alert resolves.
    heartbeat(agent.port, "web1", 2);
    let resolved = agent.wait_alert(10, |v| v["state"] == "resolved");
    let (mut s, mut seen) = sse_open(agent.api, &format!("Last-Event-ID: {id}\r\n"));
    let missed = sse_alerts(&mut s, &mut seen, 1);
    assert_eq!(missed.len(), 1, "only what came after {id}: {seen}");
    assert_eq!(missed[0].1, resolved);
    assert!(
        missed[0]
            .0
            .as_ref()
            .is_some_and(|later| later.0 > id.0 && later.1 == id.1),
        "{seen}"
    );
    // Then the live changes (web1 silent again, or web2's), with their ids.
    heartbeat(agent.port, "web2", 1);
    let live = sse_alerts(&mut s, &mut seen, 2);
    assert_eq!(live[1].1["state"], "firing", "{seen}");
    assert!(
        live[1].0.as_ref().map(|l| l.0) > missed[0].0.as_ref().map(|m| m.0),
        "{seen}"
    );
    let bad = {
        let mut s = TcpStream::connect(("127.0.0.1", agent.api)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "GET /alerts/stream HTTP/1.1\r\nHost: localhost\r\nLast-Event-ID: soon\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        r
    };
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    // An empty one is none: the live changes only.
    let (_s, head) = sse_open(agent.api, "Last-Event-ID: \r\n");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // One this store never gave (as after a store made anew): all it holds, said maybe
    // missed. Whatever its seq: another store's (its instance differs), one above this
    // store's last, one from before ids named their store.
    let other = format!("{:08x}", u32::from_str_radix(&id.1, 16).unwrap() ^ 1);
    for given in [
        format!("{}@{other}", missed[0].0.as_ref().unwrap().0),
        format!("0@{other}"),
        "999999999999".to_string(),
        format!("999999999999@{}", id.1),
    ] {
        let (mut s, mut seen) = sse_open(agent.api, &format!("Last-Event-ID: {given}\r\n"));
        let all = sse_alerts(&mut s, &mut seen, 2);
        assert_eq!(all[0], (Some(id.clone()), fired.clone()), "{given}: {seen}");
        assert!(
            seen.contains("event: lagged\ndata: {\"missed\":0,\"pruned\":true}"),
            "{given}: {seen}"
        );
    }
    // One from before ids named their store: this store's.
    let (mut s, mut seen) = sse_open(agent.api, &format!("Last-Event-ID: {}\r\n", id.0));
    let after = sse_alerts(&mut s, &mut seen, 1);
    assert_eq!(after[0].1, resolved, "{seen}");
    assert!(!seen.contains("event: lagged"), "{seen}");
    for bad in [
        format!("{}@{}x", id.0, id.1),
        format!("{}@", id.0),
        "@1".into(),
    ] {
        let mut s = TcpStream::connect(("127.0.0.1", agent.api)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "GET /alerts/stream HTTP/1.1\r\nHost: localhost\r\nLast-Event-ID: {bad}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        assert!(r.starts_with("HTTP/1.1 400"), "{bad}: {r}");
    }
}

#[test]
fn the_api_client_follows_the_alert_stream_over_tcp_and_the_socket() {
    use std::io::BufRead;
    let dir = scratch("sse-client");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    write_secret(&dir.join("token"), "s3cret-0123456789abcdef\n");
    // Over TCP (with the token), then over the socket (without it).
    for (api, host) in [
        ("token_file = \"token\"\n", "web1"),
        ("token_file = \"token\"\nsocket = \"api.sock\"\n", "web2"),
    ] {
        let _ = std::fs::remove_dir_all(dir.join("data"));
        let agent = Agent::start_full(&dir, "", api, "");
        let client =
            cepheus_agent::api_client::Client::new(Some(&dir.join("cepheus.toml"))).unwrap();
        let stream = client.stream("/alerts/stream").unwrap();
        heartbeat(agent.port, host, 1);
        let fired = agent.wait_alert(10, |v| v["state"] == "firing");
        let mut lines = std::io::BufReader::new(stream).lines();
        let data = loop {
            let line = lines.next().expect("the stream ended").unwrap();
            if let Some(d) = line.strip_prefix("data: ") {
                break serde_json::from_str::<Value>(d).unwrap();
            }
        };
        assert_eq!(data, fired, "{api}");
    }
}

#[test]
fn alerts_kept_but_not_written_out_before_a_kill_are_written_at_restart() {
    let dir = scratch("kill9-unwritten");
    let hosts: Vec<String> = (0..500).map(|i| format!("\"h{i}\"")).collect();
    std::fs::write(
        dir.join("rules/hb.toml"),
        format!(
            "[[rule]]\nname = \"hb\"\nseverity = \"critical\"\ngroup_by = [\"host\"]\nexpect = [{}]\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 1s\"\n",
            hosts.join(", ")
        ),
    )
    .unwrap();
    // A first run whose stdout nobody reads: 500 alerts (150 KB) fill the pipe, and the sink
    // waits on it with the alerts kept in the store (and the state saved); then it is killed.
    let extra = "checkpoint_every = \"100ms\"\n";
    let first = Agent::start(&dir, extra);
    let cfg = std::fs::read_to_string(dir.join("cepheus.toml")).unwrap();
    drop(first);
    std::fs::write(dir.join("blocked.toml"), &cfg).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["run", "--config", "blocked.toml"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    child.kill().unwrap();
    child.wait().unwrap();
    let mut shown = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut shown)
        .unwrap();
    let mut ids: std::collections::HashSet<String> = shown
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["id"].as_str().map(String::from))
        .collect();
    assert!(ids.len() < 500, "the pipe did not fill: {}", ids.len());
    // The restart writes out what the store kept and the pipe never took.
    let second = Agent::start(&dir, extra);
    second.wait_stats(10, |_| {
        second.alerts(|v| v["state"] == "firing") + ids.len() >= 500
    });
    // (The restored engine knows them all: no new episode comes.)
    std::thread::sleep(Duration::from_millis(1500));
    for v in second.out.lock().unwrap().iter() {
        ids.insert(v["id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 500);
}

#[test]
fn alerts_no_engine_holds_after_a_restart_are_resolved_as_state_lost() {
    // Fired, then killed before any save, without a journal: the next run knows nothing of it.
    let dir = scratch("state-lost");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let rare = "checkpoint_every = \"1h\"\njournal = false\n";
    let mut first = Agent::start(&dir, rare);
    heartbeat(first.port, "web1", 1);
    let fired = first.wait_alert(10, |v| v["state"] == "firing");
    first.kill9();
    let second = Agent::start(&dir, rare);
    let lost = second.wait_alert(10, |v| v["state"] == "resolved");
    assert_eq!(lost["id"], fired["id"]);
    assert_eq!(lost["reason"], "state_lost");
    let (code, out, err) = alerts_cmd(&dir, &["--json"]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
}

#[test]
fn another_number_of_shards_goes_on_after_a_clean_stop() {
    let dir = scratch("shards-changed");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let two = "checkpoint_every = \"100ms\"\n[engine]\nshards = 2\n";
    let three = "checkpoint_every = \"100ms\"\n[engine]\nshards = 3\n";
    let mut first = Agent::start(&dir, two);
    for host in ["web1", "web2", "web3", "web4"] {
        heartbeat(first.port, host, 1);
    }
    let ids: Vec<Value> = ["web1", "web2", "web3", "web4"]
        .iter()
        .map(|h| {
            first.wait_alert(10, |v| v["state"] == "firing" && v["group"]["host"] == *h)["id"]
                .clone()
        })
        .collect();
    let fired = &ids[0];
    assert!(first.terminate().success());
    // Spread over three shards: the open alerts stay open, the hosts stay watched.
    let mut second = Agent::start(&dir, three);
    second.wait_stats(10, |_| {
        second
            .stderr()
            .contains("was spread over this run's shards")
    });
    heartbeat(second.port, "web1", 2);
    let back = second.wait_alert(10, |v| {
        v["state"] == "resolved" && v["group"]["host"] == "web1"
    });
    assert_eq!(&back["id"], fired);
    assert_ne!(back["reason"], "state_lost", "{back}");
    assert!(
        !second.stderr().contains("starting afresh"),
        "{}",
        second.stderr()
    );
    assert_eq!(second.stats()["shards"].as_array().map(Vec::len), Some(3));
    assert!(second.terminate().success());
    // The same number again: its own state goes on; every host's alert is one episode.
    let third = Agent::start(&dir, three);
    third.wait_stats(10, |_| {
        third.stderr().contains("continuing from the saved state")
    });
    assert!(!third.stderr().contains("another number of shards"));
    let (code, out, err) = alerts_cmd(&dir, &["--json"]);
    assert_eq!(code, 0, "{err}");
    for id in &ids[1..] {
        assert!(out.contains(id.as_str().unwrap()), "{id} not firing: {out}");
    }
    assert!(!out.contains("state_lost"), "{out}");
}

#[test]
fn another_number_of_shards_after_a_crash_starts_afresh_and_resolves_what_was_firing() {
    let dir = scratch("shards-changed-crash");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let two = "checkpoint_every = \"1h\"\n[engine]\nshards = 2\n";
    let one = "checkpoint_every = \"1h\"\n[engine]\nshards = 1\n";
    let mut first = Agent::start(&dir, two);
    heartbeat(first.port, "web1", 1);
    let fired = first.wait_alert(10, |v| v["state"] == "firing");
    assert!(first.terminate().success());
    // Journalled after the saved state, then killed: that is not all in the saved state.
    let mut again = Agent::start(&dir, two);
    heartbeat(again.port, "web2", 1);
    again.wait_events(1);
    again.kill9();
    let mut second = Agent::start(&dir, one);
    let lost = second.wait_alert(10, |v| v["state"] == "resolved");
    assert_eq!(
        (&lost["id"], &lost["reason"]),
        (&fired["id"], &"state_lost".into())
    );
    let err = second.stderr();
    assert!(err.contains("another number of shards"), "{err}");
    assert!(err.contains("did not stop cleanly"), "{err}");
    heartbeat(second.port, "web3", 1);
    second.wait_alert(10, |v| {
        v["state"] == "firing" && v["group"]["host"] == "web3"
    });
    assert!(second.terminate().success());
    // The same number again: its own state goes on.
    let third = Agent::start(&dir, one);
    third.wait_stats(10, |_| {
        third.stderr().contains("continuing from the saved state")
    });
    assert!(!third.stderr().contains("another number of shards"));
    assert_eq!(third.alerts(|_| true), 0);
}

#[test]
fn a_saved_state_from_ahead_of_the_clock_is_not_continued() {
    let dir = scratch("clock-ahead");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let keep = "checkpoint_every = \"100ms\"\n";
    let mut first = Agent::start(&dir, keep);
    heartbeat(first.port, "web1", 1);
    first.wait_events(1);
    assert!(first.terminate().success());
    // The saved clock an hour ahead (as after a clock stepped back by an hour).
    {
        let store = cepheus_store::Store::open(&dir.join("data"), 100).unwrap();
        let mut saved: Vec<_> = (store.checkpoints().unwrap().iter())
            .map(|s| s.loaded().unwrap())
            .collect();
        for s in &mut saved {
            let mut state: Value = serde_json::from_slice(&s.data).unwrap();
            let cp = &mut state["engine"];
            let hour = 3_600_000_000_000i64;
            let shift = |v: &mut Value| {
                if let Some(t) = v.as_i64() {
                    *v = Value::from(t + hour);
                }
            };
            shift(&mut cp["clock"]);
            for lane in cp["lanes"].as_array_mut().unwrap() {
                shift(&mut lane["now"]);
            }
            s.data = serde_json::to_vec(&state).unwrap();
        }
        store.save_checkpoints(&saved).unwrap();
    }
    // Begun afresh: a host heartbeating now and then silent fires within its 3 s.
    let second = Agent::start(&dir, keep);
    // (Said by the shard as it loads its rules, which may come after /health answers.)
    second.wait_stderr(10, "clock is ahead");
    heartbeat(second.port, "web2", 1);
    second.wait_alert(10, |v| {
        v["state"] == "firing" && v["group"]["host"] == "web2"
    });
}

#[test]
fn a_match_that_fires_once_stays_firing_across_restarts() {
    let dir = scratch("match-restart");
    std::fs::write(
        dir.join("rules/m.toml"),
        r#"
[[rule]]
name = "m"
severity = "high"
group_by = ["host"]
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
pattern = "seq(a, b) within 30s"
"#,
    )
    .unwrap();
    let send = |port: u16, app: &str| {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let line = format!("<14>1 2026-12-03T05:00:00Z web1 {app} - - - x");
        udp.send_to(line.as_bytes(), ("127.0.0.1", port)).unwrap();
    };
    let keep = "checkpoint_every = \"100ms\"\n";
    let mut first = Agent::start(&dir, keep);
    send(first.port, "a");
    first.wait_events(1);
    send(first.port, "b");
    let fired = first.wait_alert(10, |v| v["state"] == "firing");
    assert!(first.terminate().success());
    for kill in [false, true] {
        let mut again = Agent::start(&dir, keep);
        again.wait_stats(10, |_| again.stderr().contains("store opened"));
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(again.alerts(|_| true), 0, "no resolve of a match");
        let (_, out, _) = alerts_cmd(&dir, &["--json"]);
        let listed: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(listed["id"], fired["id"]);
        if kill {
            again.kill9();
        } else {
            assert!(again.terminate().success());
        }
    }
}

#[test]
fn an_episode_that_ended_while_down_resolves_as_episode_end_not_state_lost() {
    let dir = scratch("episode-down");
    std::fs::write(
        dir.join("rules/f.toml"),
        r#"
[[rule]]
name = "burst"
severity = "high"
group_by = ["host"]
events.f = 'syslog and app == "f"'
pattern = "f{3,} within 2s"
"#,
    )
    .unwrap();
    // (One shard: its own alerts and its reckoning then come one after the other.)
    let keep = "checkpoint_every = \"100ms\"\n[engine]\nshards = 1\n";
    let mut first = Agent::start(&dir, keep);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..3 {
        let line = format!("<14>1 2026-12-03T05:00:00Z web1 f - - - burst {i}");
        udp.send_to(line.as_bytes(), ("127.0.0.1", first.port))
            .unwrap();
    }
    let fired = first.wait_alert(10, |v| v["state"] == "firing");
    assert!(first.terminate().success());
    // Down for longer than the window: the episode ended meanwhile.
    std::thread::sleep(Duration::from_secs(3));
    let second = Agent::start(&dir, keep);
    let ended = second.wait_alert(10, |v| v["state"] == "resolved");
    assert_eq!(ended["id"], fired["id"]);
    assert_eq!(ended["reason"], "episode_end", "{ended}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(second.alerts(|_| true), 1);
}

/// A deadline that passes while the agent stops (a stream client holds the API's stop for
/// a moment) makes no alert the stopping sink cannot take: the shards' clocks stand still
/// once their last state is sent, and the next start makes it, from that state.
#[test]
fn no_alert_is_made_after_the_shards_stopped() {
    let dir = scratch("stop-quiet");
    std::fs::write(
        dir.join("rules/hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nexpect = [\"h1\", \"h2\", \"h3\"]\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 2s\"\n",
    )
    .unwrap();
    let mut agent = Agent::start(&dir, "");
    let mut s = TcpStream::connect(("127.0.0.1", agent.api)).unwrap();
    write!(
        s,
        "GET /alerts/stream HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(agent.terminate().success());
    drop(s);
    let err = agent.stderr();
    assert!(!err.contains("alerts dropped"), "{err}");
    // Whatever was not made before the stop (a slow start may have let the deadline pass
    // before it) is made at the next start.
    let again = Agent::start(&dir, "");
    for h in ["h1", "h2", "h3"] {
        let firing = |v: &Value| v["state"] == "firing" && v["group"]["host"] == h;
        if agent.alerts(firing) == 0 {
            again.wait_alert(10, firing);
        }
    }
}

/// A reload applies rules only: a configuration file changed since start is said, with the
/// keys that changed and that a restart applies them.
#[test]
fn a_reload_says_what_changed_in_the_configuration() {
    let dir = scratch("reload-config");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let agent = Agent::start(&dir, "");
    let cfg = dir.join("cepheus.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{text}\n[output]\nfile = \"alerts.jsonl\"\n")).unwrap();
    agent.hangup();
    agent.wait_stats(10, |_| agent.stderr().contains("rules reloaded"));
    let err = agent.stderr();
    assert!(
        err.contains("the configuration file changed since start")
            && err.contains("output.file")
            && err.contains("restart"),
        "{err}"
    );
    assert!(!err.contains("would not start the agent"), "{err}");
    // Broken now: said at the reload, not found at the next restart.
    std::fs::write(
        &cfg,
        format!(
            "{text}
garbage [[[
"
        ),
    )
    .unwrap();
    agent.hangup();
    agent.wait_stderr(10, "would not start the agent (a restart would fail)");
}

/// A refused request says why no token went with it: the configuration passed names no
/// `api.token_file` (not "the token is not the agent's").
#[test]
fn a_refused_request_says_why_it_had_no_token() {
    let dir = scratch("no-token-hint");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    write_secret(&dir.join("token"), "s3cret-0123456789abcdef\n");
    let _agent = Agent::start_full(&dir, "", "token_file = \"token\"\n", "");
    let cfg = std::fs::read_to_string(dir.join("cepheus.toml")).unwrap();
    std::fs::write(
        dir.join("other.toml"),
        cfg.replace("token_file = \"token\"\n", ""),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["alerts", "--config", "other.toml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("answered 401") && err.contains("other.toml names no api.token_file"),
        "{err}"
    );
}

/// A stall (the process stopped, its VM paused) raises no false silence: the heartbeats
/// sent meanwhile waited in the socket's buffer, and are taken at their senders' stamps
/// before the deadlines that fell during the stall fire.
#[test]
fn a_stall_raises_no_false_silence() {
    let dir = scratch("stall");
    std::fs::write(
        dir.join("rules/hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 3s\"\n",
    )
    .unwrap();
    // (A connection idle for longer than the pause is not what this tests.)
    // (One shard: both hosts' backlogs reach the same engine.)
    let agent = Agent::start_with(
        &dir,
        "tcp_idle_timeout = \"1m\"\n",
        "[engine]\nshards = 1\n",
    );
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    // One host over UDP, another over one TCP connection: after the pause their backlogs
    // are read one after the other, and must still count in time order.
    let mut tcp = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    let mut beat = |n: u32| {
        let stamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let line = format!("<14>1 {stamp} h1 hb - - - alive {n}");
        udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
        let line = format!("<14>1 {stamp} h2 hb - - - alive {n}");
        write!(tcp, "{} {line}", line.len()).unwrap();
    };
    let pid = agent.child.id().to_string();
    for n in 0..4 {
        beat(n);
        std::thread::sleep(Duration::from_millis(500));
    }
    agent.wait_events(8);
    Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    // Beats every 0.5 s for 6 s while it stands still (twice the absence's length).
    for n in 4..16 {
        beat(n);
        std::thread::sleep(Duration::from_millis(500));
    }
    Command::new("kill").args(["-CONT", &pid]).status().unwrap();
    for n in 16..22 {
        beat(n);
        std::thread::sleep(Duration::from_millis(500));
    }
    agent.wait_events(44);
    assert_eq!(agent.alerts(|v| v["rule"] == "hb"), 0, "{}", agent.stderr());
    agent.wait_stderr(10, "the shard kept no time for over 2 s");
}

/// A shard too busy to tick (here an event that stalls it 4 s, as a flood would) is no stopped
/// process: the listeners went on receiving, and the heartbeats that came meanwhile keep the
/// times they came (moved back to the stall's start, they made the next deadline fire early:
/// a host beating every 0.5 s raised a 3 s absence).
#[cfg(debug_assertions)]
#[test]
fn a_busy_shard_raises_no_false_silence() {
    let dir = scratch("busy-shard");
    std::fs::write(
        dir.join("rules/hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 3s\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("rules/stall.toml"),
        "[[rule]]\nname = \"stall\"\nseverity = \"info\"\nevents.s = 'syslog and app == \"stall\"'\npattern = \"s\"\n",
    )
    .unwrap();
    let agent = Agent::start_env(
        &dir,
        "",
        "",
        "[engine]\nshards = 1\n",
        &[
            ("CEPHEUS_FAULT_STALL_APP", "stall"),
            ("CEPHEUS_FAULT_STALL_MS", "4000"),
        ],
    );
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    // No stamp: the arrival is all the agent knows of when a beat came.
    let beat = |n: u32| {
        let line = format!("<14>1 - h1 hb - - - alive {n}");
        udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
    };
    for n in 0..4 {
        beat(n);
        std::thread::sleep(Duration::from_millis(500));
    }
    udp.send_to(b"<14>1 - h9 stall - - - x", ("127.0.0.1", agent.port))
        .unwrap();
    for n in 4..24 {
        beat(n);
        std::thread::sleep(Duration::from_millis(500));
    }
    agent.wait_events(25);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(agent.alerts(|v| v["rule"] == "hb"), 0, "{}", agent.stderr());
    agent.wait_stderr(10, "too busy to tick, not stopped");
}

/// A removed rule's match made on a shard still busy with the old rules when the reload
/// began (here an event that stalls it 2 s, as a burst would) is an old-rule alert no engine
/// holds: the reload resolves it too (`rule_removed`), nothing of the rule stays firing.
#[cfg(debug_assertions)]
#[test]
fn a_removed_rules_match_made_while_the_reload_waits_for_its_shard_is_resolved() {
    let dir = scratch("reload-race");
    let rule = |name: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"{name}a\"'\nevents.b = 'syslog and app == \"{name}b\"'\npattern = \"seq(a, b) within 1m\"\n"
        )
    };
    std::fs::write(dir.join("rules/m.toml"), [rule("m1"), rule("m2")].concat()).unwrap();
    // A 1 s tick: the 2 s stall below is no stall to the shard (10 ticks), so the event
    // that caused it is not held back.
    let agent = Agent::start_env(
        &dir,
        "",
        "",
        "[engine]\ntick = \"1s\"\n",
        &[("CEPHEUS_FAULT_STALL_APP", "m2b")],
    );
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let send = |app: &str| {
        let line = format!("<13>Dec  2 05:40:00 web1 {app}: x");
        udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
            .unwrap();
    };
    send("m2a");
    agent.wait_events(1);
    // The b that stalls the shard 2 s, then m2 removed: the reload (200 ms of quiet after
    // the write) comes to the shard behind that b, while it is stalled. (The other way
    // round, 50 ms apart, a loaded machine could route the b after the reload.)
    send("m2b");
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(dir.join("rules/m.toml"), rule("m1")).unwrap();
    let fired = agent.wait_alert(10, |v| v["rule"] == "m2" && v["state"] == "firing");
    let resolved = agent.wait_alert(10, |v| v["rule"] == "m2" && v["state"] == "resolved");
    assert_eq!(
        (&resolved["id"], &resolved["reason"]),
        (&fired["id"], &"rule_removed".into())
    );
    let (code, out, err) = alerts_cmd(&dir, &["--json"]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
}

/// A kill -9 while a reload goes from shard to shard (one busy): the shard that took the new
/// rules kept its state at once, so the restart does not feed the journal's events from
/// before the reload to the changed rule, which began at the reload (a match the live run
/// never made).
#[cfg(debug_assertions)]
#[test]
fn a_kill_9_midway_through_a_reload_feeds_no_earlier_event_to_a_changed_rule() {
    let dir = scratch("reload-kill9");
    let rule = |pattern: &str| {
        format!(
            "[[rule]]\nname = \"m\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"ma\"'\nevents.b = 'syslog and app == \"mb\"'\npattern = \"{pattern} within 1m\"\n[[rule]]\nname = \"probe\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.x = 'syslog and app in [\"px\", \"stall\"]'\npattern = \"absent(x) for 1h\"\n"
        )
    };
    std::fs::write(dir.join("rules/m.toml"), rule("seq(b, a)")).unwrap();
    let extra = "checkpoint_every = \"1h\"\n[engine]\nshards = 2\ntick = \"1s\"\n";
    let mut first = Agent::start_env(&dir, "", "", extra, &[("CEPHEUS_FAULT_STALL_APP", "stall")]);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let send = |port: u16, host: &str, app: &str| {
        let line = format!("<14>1 2026-12-03T05:00:00Z {host} {app} - - - x");
        udp.send_to(line.as_bytes(), ("127.0.0.1", port)).unwrap();
    };
    let counts = |a: &Agent| -> Vec<u64> {
        a.stats()["shards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["groups"].as_u64().unwrap())
            .collect()
    };
    let mut on: [Option<String>; 2] = [None, None];
    let mut prev = counts(&first);
    for i in 0..40u64 {
        let host = format!("h{i}");
        send(first.port, &host, "px");
        first.wait_events(i + 1);
        let now = counts(&first);
        for s in 0..2 {
            if now[s] > prev[s] && on[s].is_none() {
                on[s] = Some(host.clone());
            }
        }
        prev = now;
        if on.iter().all(Option::is_some) {
            break;
        }
    }
    let a = on[0].clone().expect("a host on shard 0");
    let b = on[1].clone().expect("a host on shard 1");
    // Before the reload: an `a` (the old rule waits for a `b` first).
    send(first.port, &a, "ma");
    std::thread::sleep(Duration::from_millis(200));
    // Shard 1 stalled for 2 s, then m changed: seq(a, c), monitoring from the reload on.
    // (The stall first, so that the reload, 200 ms of quiet after the write, reaches shard 1
    // behind it even when a loaded machine routes the stall late.)
    send(first.port, &b, "stall");
    std::thread::sleep(Duration::from_millis(150));
    std::fs::write(dir.join("rules/m.toml"), rule("seq(a, b)")).unwrap();
    first.wait_stderr(30, "reloading rules");
    std::thread::sleep(Duration::from_millis(300));
    // After the reload: with the new rule's monitoring begun at the reload, no match.
    send(first.port, &a, "mb");
    std::thread::sleep(Duration::from_millis(300));
    // (Shard 1 is still busy: the reload has not ended.)
    assert!(
        !first.stderr().contains("rules reloaded"),
        "the reload is over already"
    );
    first.kill9();
    let second = Agent::start(&dir, extra);
    std::thread::sleep(Duration::from_secs(3));
    let (_, out, _) = alerts_cmd(&dir, &["--json"]);
    assert!(
        !out.lines().any(|l| l.contains(&format!("\"{a}\""))),
        "m fired from an event before the reload: {out}\n{}",
        second.stderr()
    );
}

/// A reload while a shard catches up after a stall keeps its state at once: the events held
/// back then (journalled, not in the engine yet) are written again into the journal's new
/// segment, so a kill -9 before the catch-up ends loses none of them, nor the match they
/// complete.
#[cfg(debug_assertions)]
#[test]
fn a_save_during_a_stalls_catch_up_keeps_the_held_back_events_for_a_replay() {
    let dir = scratch("catch-up-save");
    std::fs::write(
        dir.join("rules/m.toml"),
        "[[rule]]\nname = \"m\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"ma\"'\nevents.b = 'syslog and app in [\"mb\", \"stall\"]'\npattern = \"seq(a, b) within 10m\"\n",
    )
    .unwrap();
    let other = |sev: &str| {
        format!(
            "[[rule]]\nname = \"o\"\nseverity = \"{sev}\"\ngroup_by = [\"host\"]\nevents.x = 'syslog and app == \"ox\"'\npattern = \"x\"\n"
        )
    };
    std::fs::write(dir.join("rules/o.toml"), other("low")).unwrap();
    let extra = "checkpoint_every = \"1h\"\n[engine]\nshards = 1\ntick = \"100ms\"\n";
    let mut first = Agent::start_env(&dir, "", "", extra, &[("CEPHEUS_FAULT_STALL_APP", "stall")]);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let send = |port: u16, app: &str| {
        let line = format!("<14>1 2026-12-03T05:00:00Z web1 {app} - - - x");
        udp.send_to(line.as_bytes(), ("127.0.0.1", port)).unwrap();
    };
    std::thread::sleep(Duration::from_millis(500));
    send(first.port, "ma");
    first.wait_events(1);
    // o changed (m not), and the b that completes m's match stalls the shard 2 s.
    std::fs::write(dir.join("rules/o.toml"), other("high")).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    send(first.port, "stall");
    first.wait_stderr(8, "rules reloaded");
    std::thread::sleep(Duration::from_millis(300));
    let caught_up = first.stderr().contains("kept no time");
    let before = first.out.lock().unwrap().len();
    first.kill9();
    let second = Agent::start(&dir, extra);
    std::thread::sleep(Duration::from_secs(4));
    let (_, out, _) = alerts_cmd(&dir, &["--json"]);
    assert!(
        out.lines().any(|l| l.contains("\"m\"")),
        "m's match (a before the crash, b journalled before it) was lost; stall seen: {caught_up}, alerts before kill: {before}; alerts: {out}\nfirst run: {}\nsecond: {}",
        first.stderr(),
        second.stderr()
    );
}

/// One raw HTTP/1.1 request to the API: the whole response.
fn http_raw(port: u16, method: &str, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp
}

/// A body over the API's limit is refused with 413 saying the limit, and the agent goes on
/// answering.
#[test]
fn an_oversized_api_body_is_refused_with_the_limit_stated() {
    let dir = scratch("api-body-limit");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let agent = Agent::start(&dir, "");
    let body = format!(r#"{{"rule": "hb", "key": "{}"}}"#, "x".repeat(100 * 1024));
    for path in ["/groups/forget", "/alerts/ack"] {
        let mut s = TcpStream::connect(("127.0.0.1", agent.api)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        // (The agent may answer before reading it all and close: a failed write is fine.)
        let _ = s.write_all(body.as_bytes());
        let mut resp = String::new();
        let _ = s.read_to_string(&mut resp);
        assert!(resp.starts_with("HTTP/1.1 413"), "{path}: {resp}");
        assert!(resp.contains("over 64 KiB"), "{path}: {resp}");
    }
    assert!(http_raw(agent.api, "GET", "/health").starts_with("HTTP/1.1 200"));
}

/// HEAD answers as GET does, without the body (a liveness probe may use it); a method a
/// path does not take is 405 with `Allow`, and an unknown path 404, each saying the API's
/// paths.
#[test]
fn the_api_answers_head_and_names_its_paths_for_a_wrong_method_or_path() {
    let dir = scratch("api-methods");
    std::fs::write(dir.join("rules/hb.toml"), HB_3S).unwrap();
    let agent = Agent::start(&dir, "");
    let head = http_raw(agent.api, "HEAD", "/health");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_, body) = head.split_once("\r\n\r\n").unwrap();
    assert_eq!(body, "", "HEAD sends no body");
    assert!(http_raw(agent.api, "HEAD", "/stats").starts_with("HTTP/1.1 200"));
    for (method, path, allow) in [
        ("GET", "/alerts/ack", "POST"),
        ("POST", "/alerts", "GET, HEAD"),
        ("DELETE", "/groups", "GET, HEAD"),
        ("GET", "/groups/forget", "POST"),
    ] {
        let r = http_raw(agent.api, method, path);
        assert!(r.starts_with("HTTP/1.1 405"), "{method} {path}: {r}");
        assert!(
            r.to_ascii_lowercase()
                .contains(&format!("allow: {}", allow.to_ascii_lowercase())),
            "{method} {path}: {r}"
        );
        assert!(r.contains("POST /groups/forget"), "{r}");
    }
    let r = http_raw(agent.api, "GET", "/alert");
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    assert!(r.contains("no such path; the API's are GET /health"), "{r}");
}

/// A stdout nobody reads (a paused pager, a FIFO whose reader sleeps) holds its writer thread
/// inside a write: `/stats` says so (`stdout_stalled`), the log too; the store and the API
/// have every alert meanwhile (they waited behind it, and the shards dropped what the sink's
/// mailbox could not hold: an audit), and a SIGTERM still stops the agent once stdout's
/// grace is over (an audit saw it wait for ever).
#[test]
fn a_stdout_nobody_reads_is_said_and_does_not_hold_a_stop() {
    let dir = scratch("stdout-stall");
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    let fifo = dir.join("stall");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    // The reader: opens the FIFO, never reads.
    let mut reader = Command::new("sh")
        .args(["-c", "exec sleep 120 < stall"])
        .current_dir(&dir)
        .spawn()
        .unwrap();
    let mut agent = Agent::start_wrapped(
        &dir,
        "",
        "",
        "",
        &[],
        &["sh", "-c", "exec \"$0\" \"$@\" > stall"],
    );
    // 400 brute forces: 400 alerts, far more than a pipe holds.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..400u32 {
        for k in 0..5u32 {
            let line = format!(
                "<38>Nov 30 10:00:0{k} gw sshd[1]: Failed password for root from 10.9.{}.{} port {} ssh2",
                i / 250,
                i % 250,
                40000 + k
            );
            udp.send_to(line.as_bytes(), ("127.0.0.1", agent.port))
                .unwrap();
        }
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    agent.wait_stats(30, |s| s["sink"]["stdout_stalled"] == 1);
    agent.wait_stderr(10, "stdout has not taken alert changes");
    // Every brute force is in the store and the API's listing (and none was dropped).
    let s = agent.wait_stats(30, |s| s["sink"]["alerts"].as_u64() >= Some(400));
    assert_eq!(s["sink"]["alerts_dropped"], 0, "{s}");
    let listed = http_get(agent.api, "/alerts").unwrap();
    let firing = listed.matches("\"ssh-bruteforce\"").count();
    assert_eq!(firing, 400, "{listed}");
    // (`terminate` fails the test if the agent has not stopped within 30 s.)
    let status = agent.terminate();
    assert!(status.success(), "{status}: {}", agent.stderr());
    assert!(
        agent.stderr().contains(
            "stdout has not taken the alert changes waiting for it: stopping without them"
        ),
        "{}",
        agent.stderr()
    );
    let _ = reader.kill();
    let _ = reader.wait();
}

/// Under systemd's journal (`JOURNAL_STREAM` naming stderr), each log line begins with its
/// level as a syslog priority, so `journalctl -p warning` finds the warnings (all were filed
/// as info); on another stderr, no prefix.
#[test]
fn log_lines_carry_their_priority_for_the_journal() {
    use std::os::unix::fs::MetadataExt as _;
    let dir = scratch("journal-priority");
    std::fs::write(dir.join("rules/ssh.toml"), SSH_RULES).unwrap();
    let (port, api) = (free_port(), free_port());
    std::fs::write(
        dir.join("cepheus.toml"),
        format!(
            "[syslog]\nudp = [\"127.0.0.1:{port}\"]\ntcp = []\n[api]\nlisten = \"127.0.0.1:{api}\"\n\
             [rules]\npaths = [\"rules\"]\n[store]\npath = \"data\"\n"
        ),
    )
    .unwrap();
    for journal in [true, false] {
        let log = dir.join(format!("err-{journal}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let meta = file.metadata().unwrap();
        let stream = if journal {
            format!("{}:{}", meta.dev(), meta.ino())
        } else {
            format!("{}:{}", meta.dev(), meta.ino() + 1)
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_cepheus"))
            .args(["run", "--config", "cepheus.toml"])
            .current_dir(&dir)
            .env("JOURNAL_STREAM", stream)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let text = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let exited = child.try_wait().ok().flatten().is_some();
            if text.contains("cepheus running") || exited || Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = child.kill();
        let _ = child.wait();
        let running = text
            .lines()
            .find(|l| l.contains("cepheus running"))
            .unwrap_or_else(|| panic!("no start line: {text}"));
        if journal {
            assert!(running.starts_with("<6>"), "{running}");
            for l in text.lines().filter(|l| l.contains(" WARN ")) {
                assert!(l.starts_with("<4>"), "{l}");
            }
        } else {
            assert!(!text.lines().any(|l| l.starts_with('<')), "{text}");
        }
    }
}
