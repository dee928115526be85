//! Ingest benchmark (not a test): starts the real `cepheus run` (bench profile) on loopback
//! with the shipped rules, blasts syslog at it over TCP and UDP, and reads its `/stats` and
//! `/proc/PID/stat`.
//!
//! `cargo bench -p cepheus-agent --bench ingest`; knobs (environment):
//! `BENCH_TCP_SECS` (default 10), `BENCH_TCP_CONNS` (2), `BENCH_UDP_SECS` (per rate step,
//! default 10; the documented run uses 60), `BENCH_UDP_RATES` (comma list, msgs/s).
//!
//! The traffic: unique messages (a sequence number, so the duplicate filter keeps them), one
//! in ten an sshd "Failed password" line (matched and routed to a shard), one in ten a
//! heartbeat from one of 1,000 hosts, the rest unrelated application lines.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn env_u64(k: &str, d: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn free_port() -> u16 {
    loop {
        let t = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = t.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    r.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

fn stats(api: u16) -> serde_json::Value {
    let body = http_get(api, "/stats").unwrap();
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn ingest(api: u16, k: &str) -> u64 {
    stats(api)["ingest"][k].as_u64().unwrap_or(0)
}

/// (user + system) CPU seconds of a process.
fn cpu_secs(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    let hz = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    ticks as f64 / hz
}

fn message(seq: u64) -> String {
    match seq % 10 {
        0 => format!(
            "<38>Nov 30 10:00:00 gw{} sshd[42]: Failed password for root from 10.{}.{}.{} port {} ssh2\n",
            seq % 7,
            (seq >> 16) & 255,
            (seq >> 8) & 255,
            seq & 255,
            1024 + seq % 60000
        ),
        1 => format!(
            "<14>Nov 30 10:00:00 host-{} heartbeat: alive {seq}\n",
            seq % 1000
        ),
        _ => format!(
            "<30>1 2026-11-30T10:00:00.000Z app-{} nginx 17 - - GET /index.html?q={seq} 200 512\n",
            seq % 50
        ),
    }
}

struct Agent(Child);
impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start() -> (Agent, u16, u16) {
    let port = free_port();
    let api = free_port();
    let dir = std::env::temp_dir().join(format!("cepheus-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/../rules");
    let cfg = format!(
        "[syslog]\nudp = [\"127.0.0.1:{port}\"]\ntcp = [\"127.0.0.1:{port}\"]\n\
         [api]\nlisten = \"127.0.0.1:{api}\"\n[rules]\npaths = [\"{rules}\"]\n\
         [store]\npath = \"{}\"\njournal = {}\n[output]\nstdout = false\n",
        dir.join("data").display(),
        // `BENCH_JOURNAL=false`: without the shards' event journal, to see what it costs.
        std::env::var("BENCH_JOURNAL").map_or(true, |v| v != "false"),
    );
    let cfg_path = dir.join("cepheus.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["run", "--config"])
        .arg(&cfg_path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(api, "/health").is_none() {
        assert!(Instant::now() < deadline, "agent did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Agent(child), port, api)
}

fn seen(api: u16) -> u64 {
    let s = stats(api);
    let i = &s["ingest"];
    ["parsed", "malformed", "duplicates", "oversized"]
        .iter()
        .map(|k| i[*k].as_u64().unwrap_or(0))
        .sum()
}

fn tcp_run(port: u16, api: u16, pid: u32) {
    let secs = env_u64("BENCH_TCP_SECS", 10);
    let conns = env_u64("BENCH_TCP_CONNS", 2);
    let before = seen(api);
    let cpu0 = cpu_secs(pid);
    let t0 = Instant::now();
    let handles: Vec<_> = (0..conns)
        .map(|c| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let mut buf = Vec::with_capacity(256 * 1024);
                let mut seq = c << 40;
                let mut sent = 0u64;
                let end = Instant::now() + Duration::from_secs(secs);
                while Instant::now() < end {
                    buf.clear();
                    for _ in 0..2000 {
                        buf.extend_from_slice(message(seq).as_bytes());
                        seq += 1;
                    }
                    s.write_all(&buf).unwrap();
                    sent += 2000;
                }
                sent
            })
        })
        .collect();
    let sent: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen(api) - before < sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let wall = t0.elapsed().as_secs_f64();
    let got = seen(api) - before;
    let cpu = cpu_secs(pid) - cpu0;
    println!(
        "TCP: {conns} connections, {sent} messages sent, {got} processed in {wall:.2} s: {:.0} msg/s; agent CPU {cpu:.2} s = {:.2} µs/msg",
        got as f64 / wall,
        cpu * 1e6 / got.max(1) as f64
    );
}

fn udp_step(port: u16, api: u16, pid: u32, rate: u64, secs: u64) -> bool {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let d0 = ingest(api, "udp_datagrams");
    let k0 = stats(api)["udp_kernel_drops"].as_u64().unwrap_or(0);
    let q0 = ingest(api, "queue_full");
    let cpu0 = cpu_secs(pid);
    let t0 = Instant::now();
    let total = rate * secs;
    let mut seq = 1u64 << 50;
    let mut sent = 0u64;
    while sent < total {
        // Pace in 1 ms slices.
        let due = ((t0.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
        while sent < due {
            let _ = sock.send_to(message(seq).as_bytes(), ("127.0.0.1", port));
            seq += 1;
            sent += 1;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    std::thread::sleep(Duration::from_millis(1000));
    let got = ingest(api, "udp_datagrams") - d0;
    let kdrops = stats(api)["udp_kernel_drops"].as_u64().unwrap_or(0) - k0;
    let qdrops = ingest(api, "queue_full") - q0;
    let cpu = cpu_secs(pid) - cpu0;
    let ok = got == sent && qdrops == 0;
    println!(
        "UDP {rate} msg/s for {secs} s: sent {sent}, received {got}, kernel drops {kdrops}, queue drops {qdrops}, agent CPU {:.2} µs/msg: {}",
        cpu * 1e6 / got.max(1) as f64,
        if ok { "no loss" } else { "LOSS" }
    );
    ok
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing useful: only run
    // when asked to benchmark.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let (agent, port, api) = start();
    let pid = agent.0.id();
    tcp_run(port, api, pid);
    let secs = env_u64("BENCH_UDP_SECS", 10);
    let rates: Vec<u64> = std::env::var("BENCH_UDP_RATES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![25_000, 50_000, 100_000, 150_000, 200_000]);
    let mut best = 0;
    for r in rates {
        if udp_step(port, api, pid, r, secs) {
            best = r;
        } else {
            break;
        }
    }
    println!("UDP: highest rate held for {secs} s with no loss: {best} msg/s");
}
