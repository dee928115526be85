//! Sharing across rules (issue 4): the paper's section 4 scaled up, shared and unshared
//! engines side by side in one binary. Prints a markdown table; writes a CSV for
//! `docs/plot_sharing.py`.
//!
//! `cargo bench -p cepheus-core --bench sharing` (add `-- --quick` or set
//! `CEPHEUS_BENCH_QUICK=1` for a smoke run, which writes no CSV unless `CEPHEUS_BENCH_CSV`
//! names one; `CEPHEUS_BENCH_CSV=path` moves the CSV from `target/sharing.csv` (or
//! `$CARGO_TARGET_DIR/sharing.csv`); `CEPHEUS_BENCH_ONLY=section,..` runs some sections only;
//! `CEPHEUS_BENCH_DUMP=dir` writes each rule set's TOML there; `CEPHEUS_BENCH_REPEAT=n` times
//! each mode n times, interleaved, and keeps the fastest; for profiling,
//! `CEPHEUS_BENCH_MODE=shared|unshared` runs one mode and `CEPHEUS_BENCH_RULES=n,..` only the
//! cells with those rule counts; `CEPHEUS_BENCH_HOSTS=n` sets the number of hosts, 64;
//! `CEPHEUS_BENCH_DRAIN=json|light|thread` how the alerts are drained, see [`Drain`];
//! `CEPHEUS_BENCH_TEMPLATES=seq,and,..` draws the rules from these pattern templates only, of
//! seq, or, and, count, seq-count, absent, seq-absent, to see what each costs).
//! Run without `--bench` (`cargo test --all-targets`), it only smoke-tests the `events`
//! section in quick mode. See docs/benchmarks.md, "Sharing across rules".

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod workload;

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::io::Write as _;
use std::time::Instant;

use cepheus_core::alert::Alert;
use cepheus_core::engine::{Engine, EngineConfig};
use workload::{Events, Workload};

/// The agent's allocator: the engine is timed as the agent runs it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Events per generated chunk (generation is not timed).
const CHUNK: usize = 1 << 18;
/// Most events of the warm-up run that precedes each timed run (a fifth of the cell's).
const WARMUP: usize = 50_000;

/// Events pushed between two reads of the clocks; the alerts they made are then hashed and
/// dropped untimed (an engine's caller drains alerts as they come; holding a chunk's worth,
/// millions at 10,000 rules, would time the allocator instead).
const TIMED: usize = 1024;

/// CPU time of this thread in ns (`CLOCK_THREAD_CPUTIME_ID`: exact, not tick-sampled, so
/// short timed stretches add up correctly).
fn cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    (t.tv_sec as u64) * 1_000_000_000 + t.tv_nsec as u64
}

/// One mode's run of one cell.
#[derive(Default, Clone)]
struct Side {
    wall_s: f64,
    cpu_s: f64,
    evals: u64,
    /// Deliveries that found their group through a family record (the virtual operator).
    family_saved: u64,
    alerts: u64,
    /// Hash of the JSON of every alert, in order.
    digest: u64,
    /// Timer entries held at the end (stale ones included).
    timers: usize,
    /// The same measures after the first `mark` events (see [`run`]).
    at_mark: Mark,
}

/// A run's measures after its first `mark` events.
#[derive(Default, Clone)]
struct Mark {
    wall_s: f64,
    cpu_s: f64,
    alerts: u64,
    digest: u64,
}

/// Pushes `events` events through a fresh engine; the measures after the first `mark` of them
/// are kept too (`mark <= events`), so a long run can be compared with a shorter one of the
/// other mode on the same stream.
fn run(w: &Workload, events: usize, mark: usize, share: bool, seed: u64) -> Side {
    let cfg = EngineConfig {
        share,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(&w.rules, cfg).expect("engine");
    let mut stream = Events::new(w, seed);
    let mut buf = Vec::with_capacity(CHUNK);
    let mut side = Side::default();
    let drain = Drain::from_env();
    // `Drain::Thread`: the alerts go to another thread, which renders, hashes and drops them.
    let (to_sink, sink_in) = std::sync::mpsc::sync_channel::<Drained>(4);
    let (recycle, spare) = std::sync::mpsc::channel::<Vec<Alert>>();
    std::thread::scope(|scope| {
        let sink = scope.spawn(move || {
            let mut h = DefaultHasher::new();
            let mut at_mark = 0;
            for d in sink_in {
                match d {
                    Drained::Alerts(mut v) => {
                        for a in v.drain(..) {
                            h.write(a.to_json().to_string().as_bytes());
                        }
                        let _ = recycle.send(v);
                    }
                    Drained::Mark => at_mark = h.finish(),
                }
            }
            (at_mark, h.finish())
        });
        let mut h = DefaultHasher::new();
        let mut out: Vec<Alert> = Vec::new();
        let mut left = events;
        let mut done = 0;
        while left > 0 {
            let n = left.min(CHUNK);
            left -= n;
            buf.clear();
            stream.fill(n, &mut buf);
            let mut evs = buf.drain(..);
            while evs.len() > 0 {
                // Timed stretches end at the mark, so it is measured exactly.
                let take = if done < mark {
                    TIMED.min(mark - done)
                } else {
                    TIMED
                };
                let (c0, t0) = (cpu_ns(), Instant::now());
                for ev in evs.by_ref().take(take) {
                    engine.push(ev, &mut out);
                    done += 1;
                }
                side.wall_s += t0.elapsed().as_secs_f64();
                side.cpu_s += cpu_ns().saturating_sub(c0) as f64 / 1e9;
                side.alerts += out.len() as u64;
                match drain {
                    Drain::Json => {
                        for a in out.drain(..) {
                            h.write(a.to_json().to_string().as_bytes());
                        }
                    }
                    Drain::Light => {
                        for a in out.drain(..) {
                            h.write_u64(a.id().0);
                            h.write(a.rule().as_bytes());
                            h.write(a.state.name().as_bytes());
                            h.write_i64(a.time.0);
                            h.write_usize(a.events().len());
                            h.write(a.reason().unwrap_or("").as_bytes());
                        }
                    }
                    Drain::Thread if !out.is_empty() => {
                        let next = spare.try_recv().unwrap_or_default();
                        to_sink
                            .send(Drained::Alerts(std::mem::replace(&mut out, next)))
                            .expect("sink thread");
                    }
                    Drain::Thread => {}
                }
                if done == mark {
                    side.at_mark = Mark {
                        wall_s: side.wall_s,
                        cpu_s: side.cpu_s,
                        alerts: side.alerts,
                        digest: h.finish(),
                    };
                    let _ = to_sink.send(Drained::Mark);
                }
            }
        }
        drop(to_sink);
        let (at_mark, all) = sink.join().expect("sink thread");
        if drain == Drain::Thread {
            side.at_mark.digest = at_mark;
            side.digest = all;
        } else {
            side.digest = h.finish();
        }
    });
    side.evals = engine.counters().predicate_evals;
    side.family_saved = engine.counters().family_lookups_saved;
    side.timers = engine.timer_entries();
    side
}

/// How a run disposes of the alerts of each timed stretch (`CEPHEUS_BENCH_DRAIN`); both modes
/// of a cell drain alike, so their digests compare.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// `json` (the default): each alert's JSON is rendered and hashed on the engine's thread,
    /// as `cepheus replay` prints it. At 10,000 rules that is thousands of alerts per
    /// stretch, and rendering them evicts the engine's working set from the caches.
    Json,
    /// `light`: each alert's id, rule, state, time, event count and reason are hashed on the
    /// engine's thread: the engine's own cost, without the reader's.
    Light,
    /// `thread`: the alerts go to another thread, which renders, hashes and drops them, as
    /// the agent's shards hand theirs to the alert sink.
    Thread,
}

impl Drain {
    fn from_env() -> Drain {
        match std::env::var("CEPHEUS_BENCH_DRAIN").as_deref() {
            Ok("light") => Drain::Light,
            Ok("thread") => Drain::Thread,
            Ok("json") | Err(_) => Drain::Json,
            Ok(other) => panic!("CEPHEUS_BENCH_DRAIN={other}: json, light or thread"),
        }
    }
}

/// What the engine's thread hands the alert thread ([`Drain::Thread`]).
enum Drained {
    /// A timed stretch's alerts, in order.
    Alerts(Vec<Alert>),
    /// The run reached its mark: the digest so far is the mark's.
    Mark,
}

#[derive(Clone)]
struct Row {
    section: String,
    rules: usize,
    similar: usize,
    redundant: usize,
    similar_pct: String,
    redundant_pct: String,
    meanings: usize,
    preds: usize,
    /// Events of the shared run.
    events: usize,
    /// Events of the unshared run: the shared run's first events, fewer where the unshared
    /// engine is too slow to run them all (the `fifty` rows).
    events_unshared: usize,
    shared: Side,
    unshared: Side,
}

impl Row {
    /// Unshared over shared CPU time on the same events (NaN when a side did not run).
    fn speedup_cpu(&self) -> f64 {
        if self.shared.at_mark.cpu_s <= 0.0 || self.unshared.cpu_s <= 0.0 {
            return f64::NAN;
        }
        self.unshared.cpu_s / self.shared.at_mark.cpu_s
    }
    fn speedup_wall(&self) -> f64 {
        self.unshared.wall_s / self.shared.at_mark.wall_s.max(1e-12)
    }
    fn ns_per_event(s: &Side, events: usize) -> f64 {
        s.cpu_s * 1e9 / events as f64
    }
}

/// Timed runs per mode and cell (`CEPHEUS_BENCH_REPEAT`, default 1); the fastest is kept.
fn repeat() -> usize {
    std::env::var("CEPHEUS_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// `CEPHEUS_BENCH_MODE=shared|unshared`: run one mode only (for profiling; no comparison).
fn mode() -> Option<bool> {
    match std::env::var("CEPHEUS_BENCH_MODE").ok()?.as_str() {
        "shared" => Some(true),
        "unshared" => Some(false),
        _ => None,
    }
}

/// `CEPHEUS_BENCH_RULES=n,..`: run only the cells with these rule counts.
fn rules_wanted(n: usize) -> bool {
    std::env::var("CEPHEUS_BENCH_RULES")
        .map(|v| v.split(',').any(|x| x.trim().parse() == Ok(n)))
        .unwrap_or(true)
}

/// One cell: `events` through the shared engine, the first `events_unshared` of them through
/// the unshared one.
fn cell(
    section: &str,
    w: &Workload,
    (events, events_unshared): (usize, usize),
    sim: &str,
    red: &str,
) -> Row {
    assert!(events_unshared <= events);
    let seed = 0xC3E9_4E05 ^ events as u64;
    let rules = w.rules.rules.len();
    eprint!(
        "{section}: {rules} rules, sim {sim}, red {red}, {events} events ({events_unshared} unshared) ... "
    );
    let _ = std::io::stderr().flush();
    if let Ok(dir) = std::env::var("CEPHEUS_BENCH_DUMP") {
        let file = format!("{dir}/{section}-{rules}-{sim}-{red}.toml").replace([' ', '%'], "");
        if let Err(e) = std::fs::write(&file, &w.text) {
            eprintln!("{file}: {e}");
        }
    }
    let mut sides: [Option<Side>; 2] = [None, None];
    for _ in 0..repeat() {
        for (i, share) in [true, false].into_iter().enumerate() {
            if mode().is_some_and(|m| m != share) {
                continue;
            }
            let n = if share { events } else { events_unshared };
            let warm = (n / 5).min(WARMUP);
            run(w, warm, warm, share, seed ^ 1);
            let s = run(w, n, events_unshared, share, seed);
            // Keep the fastest run (least disturbed by the other tenants of the machine).
            if sides[i].as_ref().is_none_or(|o| s.cpu_s < o.cpu_s) {
                sides[i] = Some(s);
            }
        }
    }
    let [shared, unshared] = sides.map(Option::unwrap_or_default);
    if mode().is_none() {
        assert_eq!(
            shared.at_mark.alerts, unshared.alerts,
            "{section}: shared and unshared alert counts differ"
        );
        assert_eq!(
            shared.at_mark.digest, unshared.digest,
            "{section}: shared and unshared alerts differ"
        );
    }
    let row = Row {
        section: section.to_string(),
        rules,
        similar: w.similar,
        redundant: w.redundant,
        similar_pct: sim.to_string(),
        redundant_pct: red.to_string(),
        meanings: w.meanings,
        preds: w.preds,
        events,
        events_unshared,
        shared,
        unshared,
    };
    eprintln!(
        "shared {:.2}s unshared {:.2}s (cpu) x{:.2}; family lookups saved {:.2}/event; {} timer entries at the end",
        row.shared.cpu_s,
        row.unshared.cpu_s,
        row.speedup_cpu(),
        row.shared.family_saved as f64 / events.max(1) as f64,
        row.shared.timers
    );
    row
}

fn pct(n: usize, of: usize) -> String {
    format!("{:.0} %", 100.0 * n as f64 / of as f64)
}

fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --all-targets`) only a smoke
    // run of one section, so a test pass never runs the whole matrix.
    let benching = std::env::args().any(|a| a == "--bench");
    let quick = !benching
        || std::env::args().any(|a| a == "--quick")
        || std::env::var("CEPHEUS_BENCH_QUICK").is_ok_and(|v| v == "1");
    let only: Option<Vec<String>> = match std::env::var("CEPHEUS_BENCH_ONLY") {
        Ok(v) => Some(v.split(',').map(str::to_string).collect()),
        Err(_) if !benching => Some(vec!["events".to_string()]),
        Err(_) => None,
    };
    let want = |s: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == s));
    // (full, quick) sizes.
    let m = |full: usize, small: usize| if quick { small } else { full };
    let million = m(1_000_000, 20_000);
    let mut rows: Vec<Row> = Vec::new();
    let started = Instant::now();

    if want("events") {
        let w = workload::mixed(40, 50, 50, 1);
        for events in [m(40_000, 4_000), million, m(10_000_000, 100_000)] {
            rows.push(cell("events", &w, (events, events), "50", "50"));
        }
    }
    if want("similar") {
        for sim in [10, 20, 30, 40, 50] {
            let w = workload::mixed(40, sim, 0, 2);
            rows.push(cell(
                "similar",
                &w,
                (million, million),
                &sim.to_string(),
                "0",
            ));
        }
    }
    if want("redundant") {
        for red in [10, 25, 50, 75, 100] {
            let w = workload::mixed(40, 0, red, 3);
            rows.push(cell(
                "redundant",
                &w,
                (million, million),
                "0",
                &red.to_string(),
            ));
        }
    }
    if want("rules") {
        let sizes: &[usize] = if quick {
            &[10, 100, 1_000]
        } else {
            &[10, 100, 1_000, 10_000]
        };
        for &n in sizes.iter().filter(|&&n| rules_wanted(n)) {
            let w = workload::mixed(n, 50, 50, 4);
            // 1M events in every cell, as the matrix asks (the unshared baseline tests
            // every definition on every event: ~17,000 at 10,000 rules, about 6 minutes).
            rows.push(cell("rules", &w, (million, million), "50", "50"));
        }
    }
    // `CEPHEUS_BENCH_POOL=10,25,100`: the pool sizes of the `fifty-pool` rows (default 100;
    // a size other than 100 is its own section, `fifty-pool-25`).
    let pools: Vec<usize> = std::env::var("CEPHEUS_BENCH_POOL")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![100]);
    let mut sections: Vec<(String, Option<usize>)> = vec![("fifty".to_string(), None)];
    for &p in &pools {
        let name = if p == 100 {
            "fifty-pool".to_string()
        } else {
            format!("fifty-pool-{p}")
        };
        sections.push((name, Some(p.max(1))));
    }
    for (section, pool) in &sections {
        let (section, pool) = (section.as_str(), *pool);
        if !(want(section) || (section.starts_with("fifty-pool") && want("fifty-pool"))) {
            continue;
        }
        let sizes: &[usize] = if quick {
            &[10, 100, 1_000]
        } else {
            &[10, 100, 1_000, 10_000]
        };
        for &n in sizes.iter().filter(|&&n| rules_wanted(n)) {
            let w = workload::fifty(n, pool, 5);
            // The shared engine runs the same 200,000 events (200 s of event time, past the
            // longest window) at every size, so the rows compare steady states; the unshared
            // one, up to 2 ms an event at 10,000 rules, runs their beginning.
            let events = m(200_000, 5_000);
            let unshared = match n {
                10_000 => m(10_000, 2_000),
                1_000 => m(40_000, 5_000),
                _ => events,
            };
            let sim = pct(w.similar, n);
            let red = pct(w.redundant, n);
            rows.push(cell(section, &w, (events, unshared), &sim, &red));
        }
    }

    println!(
        "\n| section | rules | similar | redundant | states shared | event types | events | shared wall / cpu s | unshared wall / cpu s | speed-up cpu (wall) | pred evals/event shared / unshared | ns/event shared / unshared (cpu) | alerts |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} ({}) | {} ({}) | {} | {} | {} | {:.3} / {:.3} | {:.3} / {:.3} | {} ({:.2}×) | {:.2} / {:.2} | {:.0} / {:.0} | {} |",
            r.section,
            r.rules,
            r.similar_pct,
            r.similar,
            r.redundant_pct,
            r.redundant,
            r.meanings,
            r.preds,
            if r.events == r.events_unshared {
                r.events.to_string()
            } else {
                format!("{} / {}", r.events, r.events_unshared)
            },
            r.shared.wall_s,
            r.shared.cpu_s,
            r.unshared.wall_s,
            r.unshared.cpu_s,
            if r.speedup_cpu().is_nan() {
                "–".to_string()
            } else {
                format!("{:.2}×", r.speedup_cpu())
            },
            r.speedup_wall(),
            r.shared.evals as f64 / r.events as f64,
            r.unshared.evals as f64 / r.events_unshared as f64,
            Row::ns_per_event(&r.shared, r.events),
            Row::ns_per_event(&r.unshared, r.events_unshared),
            r.shared.alerts,
        );
    }
    println!(
        "\n{} cells in {:.0} s{}, {} timed run(s) per mode and cell{}.",
        rows.len(),
        started.elapsed().as_secs_f64(),
        if quick { " (quick)" } else { "" },
        repeat(),
        match (mode(), Drain::from_env()) {
            (Some(_), _) => "; one mode only",
            (None, Drain::Light) =>
                "; alerts equal (count and digest of their ids, rules, states, times) in every cell",
            (None, _) => "; alerts equal (count and JSON digest) in every cell",
        }
    );

    let path = match std::env::var("CEPHEUS_BENCH_CSV") {
        Ok(p) => p,
        // A smoke run (`cargo test`, `--quick`) does not overwrite the last real CSV (found
        // by an audit: `-- --quick` did).
        Err(_) if quick => return,
        // In the target folder cargo uses (`CARGO_TARGET_DIR` if set).
        Err(_) => match std::env::var("CARGO_TARGET_DIR") {
            Ok(dir) if !dir.is_empty() => format!("{dir}/sharing.csv"),
            _ => concat!(env!("CARGO_MANIFEST_DIR"), "/../target/sharing.csv").to_string(),
        },
    };
    let mut csv = String::from(
        "section,rules,similar,redundant,states,event_types,events,events_unshared,shared_wall_s,shared_cpu_s,shared_cpu_s_same_events,unshared_wall_s,unshared_cpu_s,shared_evals,unshared_evals,alerts,family_saved,timer_entries\n",
    );
    for r in &rows {
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{},{},{},{}\n",
            r.section,
            r.rules,
            r.similar,
            r.redundant,
            r.meanings,
            r.preds,
            r.events,
            r.events_unshared,
            r.shared.wall_s,
            r.shared.cpu_s,
            r.shared.at_mark.cpu_s,
            r.unshared.wall_s,
            r.unshared.cpu_s,
            r.shared.evals,
            r.unshared.evals,
            r.shared.alerts,
            r.shared.family_saved,
            r.shared.timers
        ));
    }
    match std::fs::write(&path, csv) {
        Ok(()) => eprintln!("CSV: {path}"),
        Err(e) => eprintln!("CSV not written to {path}: {e}"),
    }
}
